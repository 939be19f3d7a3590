//! Beats: a member's liveness over one long-lived stream
//! (`/proto.Liveness/Beats`) on the connection the pinger keeps to it,
//! instead of a call every poll. A beat is one small message each way: no
//! new HTTP/2 stream, no headers, no task per ping. The member answers a
//! beat exactly as it answers a ping (its gate decides), so a beat that is
//! answered proves what an answered ping proves.
//!
//! ```text
//!  unary ping answered ──▶ open the stream (in the background) ─┬─ UNIMPLEMENTED ──▶ calls only, on this channel
//!                                                                └─ open ──▶ next pings are beats
//!  beat sent ─┬─ answer with its seq ──▶ answered
//!             ├─ none within the ping timeout ──▶ timed out
//!             └─ the stream ended (the member refused, stops, or its connection
//!                closed) ──▶ a unary ping instead (it reconnects, and is refused
//!                or answered as any call)
//! ```
//!
//! Guarantees:
//! - at most one beat per member is in flight (the holder never pings a
//!   member whose ping is still running), and an answer counts only for
//!   the beat whose `seq` it carries;
//! - a beat's timeout is the ping timeout, so a hung member is found as
//!   fast as by calls; a dead one is found by its connection's close, as
//!   before (`closes.rs`);
//! - a beat's round trip and answer instant are taken as its answer is
//!   read, however late the holder collects it (a beat carried into the
//!   next cycle), and an answer read after the timeout is a timeout;
//! - a stream that ends, or cannot take a beat, never fails a ping by
//!   itself: that ping is a call instead;
//! - every [`CALL_EVERY`]th ping of a member is a call anyway: a server
//!   that drains (`GOAWAY`) keeps its open streams but refuses new ones, and
//!   only a call finds that out (a new connection, refused once it exits).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use tokio::sync::{mpsc, oneshot};
use tonic::transport::Channel;

use crate::edge::clock;
use crate::proto::Beat;
use crate::proto::liveness_client::LivenessClient;

/// What a channel knows of its member's beat stream.
pub(super) enum Link {
    /// Not tried on this channel yet, or the last stream ended.
    Untried,
    /// The last try failed (no headers within the timeout, or an error):
    /// tried again [`RETRY_OPEN`] after it.
    Failed(Instant),
    /// Being opened.
    Opening,
    /// Open: pings are beats.
    Open(Stream),
    /// The member answered `UNIMPLEMENTED`: calls only, on this channel.
    Unsupported,
}

/// Of this many pings of a member, one is a call (see the guarantees).
pub(super) const CALL_EVERY: u32 = 32;

/// How long after a failed try a stream is opened again: a server that
/// accepts the stream but never answers it costs one try per this long.
pub(super) const RETRY_OPEN: Duration = Duration::from_secs(30);

impl Link {
    /// Whether a call the member answered should open a stream now.
    pub(super) fn to_open(&self, now: Instant) -> bool {
        match self {
            Link::Untried => true,
            Link::Failed(at) => now.saturating_duration_since(*at) >= RETRY_OPEN,
            Link::Opening | Link::Open(_) | Link::Unsupported => false,
        }
    }
}

/// A beat's answer: the instant it was read (a refusal ends the stream
/// instead).
type Answer = Instant;

/// The beat in flight, if any: its `seq`, and where its answer goes.
type Waiting = Arc<Mutex<Option<(u64, oneshot::Sender<Answer>)>>>;

/// An open beat stream.
pub(super) struct Stream {
    beats: mpsc::Sender<Beat>,
    waiting: Waiting,
    ended: Arc<AtomicBool>,
    /// The holder's view the last beat carried: a beat carries it only
    /// when it changed (the member keeps the stream's last one).
    said: Mutex<Arc<str>>,
}

/// Numbers beats: unique per process, so an answer is never mistaken for
/// another beat's.
static SEQ: AtomicU64 = AtomicU64::new(1);

impl Stream {
    /// Opens the stream on `channel`, bounded by `timeout`; the reading
    /// runs in a task `spawn` starts. `Ok(None)`: the member does not serve
    /// beats.
    pub(super) async fn open(
        channel: Channel,
        timeout: Duration,
        spawn: impl FnOnce(BoxFuture<'static, ()>),
    ) -> Result<Option<Stream>, ()> {
        // One beat at most is in flight; room for two never blocks a send.
        let (beats, rx) = mpsc::channel::<Beat>(2);
        let outbound =
            futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|b| (b, rx)) });
        let mut client = LivenessClient::new(channel);
        let answers = match tokio::time::timeout(timeout, client.beats(outbound)).await {
            Ok(Ok(response)) => response.into_inner(),
            Ok(Err(status)) if status.code() == tonic::Code::Unimplemented => return Ok(None),
            _ => return Err(()),
        };
        let waiting = Waiting::default();
        let ended = Arc::new(AtomicBool::new(false));
        let (w, e) = (Arc::clone(&waiting), Arc::clone(&ended));
        spawn(Box::pin(read(answers, w, e)));
        Ok(Some(Stream {
            beats,
            waiting,
            ended,
            said: Mutex::new(Arc::from("")),
        }))
    }

    /// Whether the stream can carry a beat.
    pub(super) fn is_open(&self) -> bool {
        !self.ended.load(Ordering::SeqCst) && !self.beats.is_closed()
    }

    /// Sends one beat, carrying `holder` (the holder's view, encoded; empty
    /// for none) if it changed since the last beat; `None` when the stream
    /// cannot take it (the ping is then a call). The beat's answer arrives
    /// on the receiver; a dropped sender means the stream ended first.
    pub(super) fn send(&self, holder: &Arc<str>) -> Option<(Instant, oneshot::Receiver<Answer>)> {
        if !self.is_open() {
            return None;
        }
        let seq = SEQ.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        *self.waiting.lock().expect("beat waiter poisoned") = Some((seq, tx));
        let sent = clock::now();
        let taken_back = || {
            let mut w = self.waiting.lock().expect("beat waiter poisoned");
            if w.as_ref().is_some_and(|(s, _)| *s == seq) {
                w.take();
            }
        };
        // (A beat cannot say "no view" once it said one: the stream keeps
        // its last. Only a holder pings, and a holder always has a view; a
        // standby's pings are calls.)
        let holder = {
            let mut said = self.said.lock().expect("beat view poisoned");
            if *said == *holder || holder.is_empty() {
                String::new()
            } else {
                *said = Arc::clone(holder);
                holder.to_string()
            }
        };
        let beat = Beat { seq, holder };
        // Ended after the waiter was set: `read` may have looked before it
        // was, so this beat is taken back (SeqCst on both sides: when this
        // load sees the stream open, `read`'s take comes after the set).
        if self.beats.try_send(beat).is_err() || self.ended.load(Ordering::SeqCst) {
            taken_back();
            return None;
        }
        Some((sent, rx))
    }
}

/// Reads a stream's answers until it ends, handing each to its beat.
async fn read(mut answers: tonic::Streaming<Beat>, waiting: Waiting, ended: Arc<AtomicBool>) {
    while let Ok(Some(beat)) = answers.message().await {
        let mut w = waiting.lock().expect("beat waiter poisoned");
        if w.as_ref().is_some_and(|(seq, _)| *seq == beat.seq) {
            let (_, tx) = w.take().expect("checked");
            let _ = tx.send(clock::now());
        }
    }
    ended.store(true, Ordering::SeqCst);
    // The beat in flight, if any, becomes a call.
    waiting.lock().expect("beat waiter poisoned").take();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_try_is_tried_again_only_after_a_while() {
        let now = clock::now();
        assert!(Link::Untried.to_open(now));
        assert!(!Link::Opening.to_open(now));
        assert!(!Link::Unsupported.to_open(now));
        assert!(!Link::Failed(now).to_open(now + RETRY_OPEN / 2));
        assert!(Link::Failed(now).to_open(now + RETRY_OPEN));
    }
}
