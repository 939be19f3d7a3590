//! The member's side of the ping RPC: answers every ping while the member is
//! up, or, with a [`PingGate`], as the gate decides.
//!
//! Guarantees:
//! - a ping is answered at once, with no IO of its own: the gate is a
//!   synchronous call, given the instant the ping arrived;
//! - a ping the gate refuses is answered `UNAVAILABLE` (never OK), so the
//!   holder counts it as a failed ping;
//! - only a ping that carries a trace context makes a span (joined to the
//!   distributor's trace), so thousands of members pinged every second never
//!   flood a collector with root spans.

use std::sync::Arc;

use std::time::Instant;

use crate::edge::clock;
use crate::proto::grpc_pinger_server::{GrpcPinger, GrpcPingerServer};

/// Decides the answer to each ping.
pub trait PingGate: Send + Sync + 'static {
    /// A ping arrived at `received`: `Ok` answers it OK, `Err(why)` answers
    /// it `UNAVAILABLE` with that message.
    fn admit(&self, received: Instant) -> Result<(), String>;
}

/// The member side: answers every ping while the member is up (or as its
/// gate decides).
#[derive(Default, Clone)]
pub struct PingResponder {
    member: Option<Arc<str>>,
    gate: Option<Arc<dyn PingGate>>,
}

impl std::fmt::Debug for PingResponder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PingResponder")
            .field("member", &self.member)
            .field("gated", &self.gate.is_some())
            .finish()
    }
}

impl PingResponder {
    /// A responder that names `member` in its trace spans.
    pub fn new(member: &str) -> PingResponder {
        PingResponder {
            member: Some(member.into()),
            gate: None,
        }
    }

    /// The same, answering as `gate` decides.
    pub fn gated(member: &str, gate: Arc<dyn PingGate>) -> PingResponder {
        PingResponder {
            member: Some(member.into()),
            gate: Some(gate),
        }
    }
}

#[tonic::async_trait]
impl GrpcPinger for PingResponder {
    async fn ping(
        &self,
        request: tonic::Request<()>,
    ) -> Result<tonic::Response<()>, tonic::Status> {
        let received = clock::now();
        let answer = match &self.gate {
            Some(gate) => gate.admit(received),
            None => Ok(()),
        };
        // Only traced pings make a span: 10,000 members pinged every second
        // must not flood a collector with root spans.
        if request.metadata().contains_key("traceparent") {
            let member = self.member.as_deref().unwrap_or("");
            let span = tracing::info_span!("member_ping", member);
            super::trace::extract(request.metadata(), &span);
            span.in_scope(|| match &answer {
                Ok(()) => tracing::debug!(member, "ping answered"),
                Err(why) => tracing::debug!(member, why, "ping refused"),
            });
        }
        match answer {
            Ok(()) => Ok(tonic::Response::new(())),
            Err(why) => Err(tonic::Status::unavailable(why)),
        }
    }
}

/// The ping service, to add to a worker's own tonic server.
pub fn ping_service() -> GrpcPingerServer<PingResponder> {
    GrpcPingerServer::new(PingResponder::default())
}
