//! The member's side of the ping RPC: answers every ping while the member is
//! up.
//!
//! Guarantees:
//! - a ping is answered at once, with no IO of its own;
//! - only a ping that carries a trace context makes a span (joined to the
//!   distributor's trace), so thousands of members pinged every second never
//!   flood a collector with root spans.

use std::sync::Arc;

use crate::proto::grpc_pinger_server::{GrpcPinger, GrpcPingerServer};

/// The member side: answers every ping while the member is up.
#[derive(Debug, Default, Clone)]
pub struct PingResponder {
    member: Option<Arc<str>>,
}

impl PingResponder {
    /// A responder that names `member` in its trace spans.
    pub fn new(member: &str) -> PingResponder {
        PingResponder {
            member: Some(member.into()),
        }
    }
}

#[tonic::async_trait]
impl GrpcPinger for PingResponder {
    async fn ping(
        &self,
        request: tonic::Request<()>,
    ) -> Result<tonic::Response<()>, tonic::Status> {
        // Only traced pings make a span: 10,000 members pinged every second
        // must not flood a collector with root spans.
        if request.metadata().contains_key("traceparent") {
            let member = self.member.as_deref().unwrap_or("");
            let span = tracing::info_span!("member_ping", member);
            super::trace::extract(request.metadata(), &span);
            span.in_scope(|| tracing::debug!(member, "ping answered"));
        }
        Ok(tonic::Response::new(()))
    }
}

/// The ping service, to add to a worker's own tonic server.
pub fn ping_service() -> GrpcPingerServer<PingResponder> {
    GrpcPingerServer::new(PingResponder::default())
}
