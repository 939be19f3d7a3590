//! The member's side of the ping RPC and of the beat stream: answers every
//! ping and every beat while the member is up, or, with a [`PingGate`], as
//! the gate decides.
//!
//! Guarantees:
//! - a ping or a beat is answered at once, with no IO of its own: the gate
//!   is a synchronous call, given the instant it arrived; a beat is a ping
//!   to the gate;
//! - a ping the gate refuses is answered `UNAVAILABLE` (never OK), and a
//!   refused beat ends its stream with `UNAVAILABLE` (the holder's next
//!   ping is then a call, refused the same way), so the holder counts
//!   either as failed, and a stopping member's draining connections are
//!   never held open by a stream;
//! - only a ping that carries a trace context makes a span (joined to the
//!   distributor's trace), so thousands of members pinged every second never
//!   flood a collector with root spans.

use std::sync::Arc;

use std::time::Instant;

use futures::StreamExt as _;

use crate::core::handoff::PingView;
use crate::edge::clock;
use crate::proto::Beat;
use crate::proto::grpc_pinger_server::{GrpcPinger, GrpcPingerServer};
use crate::proto::liveness_server::{Liveness, LivenessServer};

/// Decides the answer to each ping.
pub trait PingGate: Send + Sync + 'static {
    /// A ping arrived at `received`, saying `view` of its holder (`None`
    /// from a holder that says nothing, or says it in a form this version
    /// does not read): `Ok` answers it OK, `Err(why)` answers it
    /// `UNAVAILABLE` with that message.
    fn admit(&self, received: Instant, view: Option<PingView>) -> Result<(), String>;
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

    /// The answer to a ping or a beat that arrived at `received`.
    fn answer(&self, received: Instant, view: Option<PingView>) -> Result<(), String> {
        match &self.gate {
            Some(gate) => gate.admit(received, view),
            None => Ok(()),
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
        let view = request
            .metadata()
            .get(PingView::METADATA)
            .and_then(|v| v.to_str().ok())
            .and_then(PingView::decode);
        let answer = self.answer(received, view);
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

/// The answers of one beat stream, one per beat, in order.
pub type Beats = std::pin::Pin<Box<dyn futures::Stream<Item = Result<Beat, tonic::Status>> + Send>>;

#[tonic::async_trait]
impl Liveness for PingResponder {
    type BeatsStream = Beats;

    async fn beats(
        &self,
        request: tonic::Request<tonic::Streaming<Beat>>,
    ) -> Result<tonic::Response<Beats>, tonic::Status> {
        let this = self.clone();
        // The holder's view, as the last beat of this stream that carried
        // one said (a beat whose view did not change carries none).
        let mut view: Option<PingView> = None;
        // Answered as each beat is read: no task, no buffer of its own. A
        // refusal ends the stream (tonic sends an error as the last item),
        // so a member that stops never keeps a draining connection open.
        let answers = request.into_inner().map(move |beat| {
            let beat = beat?;
            let received = clock::now();
            if !beat.holder.is_empty() {
                view = PingView::decode(&beat.holder);
            }
            match this.answer(received, view) {
                Ok(()) => Ok(Beat {
                    seq: beat.seq,
                    holder: String::new(),
                }),
                Err(why) => Err(tonic::Status::unavailable(why)),
            }
        });
        Ok(tonic::Response::new(Box::pin(answers)))
    }
}

/// The ping service, to add to a worker's own tonic server.
pub fn ping_service() -> GrpcPingerServer<PingResponder> {
    GrpcPingerServer::new(PingResponder::default())
}

/// The beat service (optional: the holder pings a member without it), to
/// add to a worker's own tonic server next to [`ping_service`].
pub fn beat_service() -> LivenessServer<PingResponder> {
    LivenessServer::new(PingResponder::default())
}
