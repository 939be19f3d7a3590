//! Connection-close watching: the pinger's connector, which tells the holder
//! the moment a member's connection ends, instead of at its next ping.
//!
//! When a worker process dies, its kernel closes its sockets at once: the
//! holder's HTTP/2 connection to it reads end-of-stream (a FIN) or an error (a
//! reset) within a network round trip. hyper reads every connection all the
//! time, so the wrapper below sees that read the moment it happens and names
//! the member on [`Closes`]. The holder then pings the member at once (see the
//! executor): a refused connection means the process is gone, and the table
//! follows within milliseconds, not at the next poll.
//!
//! ```text
//!  worker dies ── FIN/RST ──▶ read = EOF/error ──▶ Closes ──▶ ping now, ─┬─ refused ──▶ handoff cycle now: fails it alone,
//!                                                            own conn.   │               revokes its units (write 1), then
//!                                                                        │               ping again, own conn. ── refused ──▶
//!                                                                        │               handoff cycle grants them (write 2)
//!                                                                        ├─ no answer ─▶ full cycle now (pings everyone)
//!                                                                        └─ answered ──▶ reopen the watched connection
//! ```
//!
//! (The second refusal must come on a connection opened after write 1: a
//! worker restarted on the address in between may have read its old row,
//! and answers instead; see `core::handoff`.)
//!
//! Guarantees:
//! - a connection names its member exactly once: on the first read that shows
//!   its end (EOF with room in the buffer, or a read or write error), or else
//!   when hyper drops it (after the peer's `GOAWAY`, or an unanswered
//!   keepalive);
//! - a close is only a hint to look now: a connection ended by anything
//!   other than death (a proxy closing idle connections, a member restarting
//!   its server) costs one ping that is answered, and nothing else;
//! - the hint channel is bounded; when it is full the hint is dropped, and
//!   the next regular cycle detects the failure as before.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use futures::future::BoxFuture;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tonic::codegen::http::Uri;

/// How many close hints may wait for the holder before new ones are dropped.
const BACKLOG: usize = 4096;

/// The receiving end: the members whose connection just ended.
pub type Closes = mpsc::Receiver<Closed>;

/// A connection that ended: its member, and the pinger channel it belonged
/// to (a channel the pinger already replaced says nothing of the member).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Closed {
    pub member: String,
    pub channel: u64,
}

/// The sending end, shared by every connection of a pinger.
#[derive(Clone, Debug)]
pub(super) struct CloseHints(mpsc::Sender<Closed>);

impl CloseHints {
    pub(super) fn new() -> (CloseHints, Closes) {
        let (tx, rx) = mpsc::channel(BACKLOG);
        (CloseHints(tx), rx)
    }
}

/// tonic's plain TCP connector (as `Endpoint::connect_lazy` builds it), with
/// every connection it opens wrapped in [`Watched`]. TLS, when configured,
/// is layered on top by tonic, so the watch sees the TCP stream below it.
#[derive(Clone)]
pub(super) struct WatchingConnector {
    http: HttpConnector,
    member: Arc<str>,
    channel: u64,
    hints: CloseHints,
}

impl WatchingConnector {
    pub(super) fn new(
        member: &str,
        channel: u64,
        connect_timeout: Duration,
        hints: CloseHints,
    ) -> Self {
        let mut http = HttpConnector::new();
        http.enforce_http(false);
        http.set_nodelay(true);
        http.set_connect_timeout(Some(connect_timeout));
        WatchingConnector {
            http,
            member: member.into(),
            channel,
            hints,
        }
    }
}

impl tower_service::Service<Uri> for WatchingConnector {
    type Response = TokioIo<Watched>;
    type Error = Box<dyn std::error::Error + Send + Sync>;
    type Future = BoxFuture<'static, Result<Self::Response, Self::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.http.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let connecting = self.http.call(uri);
        let (member, channel, hints) = (self.member.clone(), self.channel, self.hints.clone());
        Box::pin(async move {
            let tcp = connecting.await?.into_inner();
            Ok(TokioIo::new(Watched {
                tcp,
                member,
                channel,
                hints: Some(hints),
            }))
        })
    }
}

/// A member's TCP stream that names the member once, when it reads its end.
pub(super) struct Watched {
    tcp: TcpStream,
    member: Arc<str>,
    channel: u64,
    /// Taken by the first close seen: one hint per connection.
    hints: Option<CloseHints>,
}

impl Watched {
    fn closed(&mut self) {
        if let Some(CloseHints(tx)) = self.hints.take() {
            // Full: dropped; the next regular cycle sees the failure anyway.
            let _ = tx.try_send(Closed {
                member: self.member.to_string(),
                channel: self.channel,
            });
        }
    }
}

impl Drop for Watched {
    /// hyper drops a connection on its own when the peer sent `GOAWAY` (a
    /// server stopping, as a process exiting gracefully does) before any end
    /// is read; and when a keepalive ping went unanswered. Both are worth a
    /// look now. A connection dropped because the pinger forgot the member,
    /// or at shutdown, costs one ping at most.
    fn drop(&mut self) {
        self.closed();
    }
}

impl AsyncRead for Watched {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let room = buf.remaining() > 0;
        let polled = Pin::new(&mut self.tcp).poll_read(cx, buf);
        match &polled {
            // Nothing read into a buffer with room: end of stream.
            Poll::Ready(Ok(())) if room && buf.filled().len() == before => self.closed(),
            Poll::Ready(Err(_)) => self.closed(),
            _ => {}
        }
        polled
    }
}

impl AsyncWrite for Watched {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let polled = Pin::new(&mut self.tcp).poll_write(cx, data);
        if let Poll::Ready(Err(_)) = &polled {
            self.closed();
        }
        polled
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let polled = Pin::new(&mut self.tcp).poll_write_vectored(cx, bufs);
        if let Poll::Ready(Err(_)) = &polled {
            self.closed();
        }
        polled
    }

    fn is_write_vectored(&self) -> bool {
        self.tcp.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.tcp).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.tcp).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    use tower_service::Service as _;

    fn closed() -> Closed {
        Closed {
            member: "m:1".into(),
            channel: 7,
        }
    }

    async fn connect(hints: CloseHints) -> (Watched, TcpStream) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let mut connector = WatchingConnector::new("m:1", 7, Duration::from_secs(5), hints);
        std::future::poll_fn(|cx| connector.poll_ready(cx))
            .await
            .unwrap();
        let uri: Uri = format!("http://{addr}").parse().unwrap();
        let (io, accepted) = tokio::join!(connector.call(uri), listener.accept());
        (io.unwrap().into_inner(), accepted.unwrap().0)
    }

    #[tokio::test]
    async fn the_peer_closing_names_the_member_once() {
        let (hints, mut closes) = CloseHints::new();
        let (mut watched, mut peer) = connect(hints).await;
        peer.write_all(b"hello").await.unwrap();
        let mut buf = [0u8; 5];
        watched.read_exact(&mut buf).await.unwrap();
        assert!(closes.try_recv().is_err(), "data is not a close");
        drop(peer);
        assert_eq!(watched.read(&mut buf).await.unwrap(), 0);
        assert_eq!(closes.recv().await, Some(closed()));
        // Reading the end again says nothing new.
        assert_eq!(watched.read(&mut buf).await.unwrap(), 0);
        drop(watched);
        assert!(closes.recv().await.is_none(), "one hint per connection");
    }

    #[tokio::test]
    async fn a_reset_names_the_member() {
        let (hints, mut closes) = CloseHints::new();
        let (mut watched, peer) = connect(hints).await;
        // Linger 0: close with a reset, as a kernel does for a socket with
        // unread data.
        peer.set_zero_linger().unwrap();
        drop(peer);
        let mut buf = [0u8; 5];
        let _ = watched.read(&mut buf).await;
        assert_eq!(closes.recv().await, Some(closed()));
    }

    #[tokio::test]
    async fn dropping_the_connection_names_the_member_once() {
        let (hints, mut closes) = CloseHints::new();
        let (watched, _peer) = connect(hints).await;
        drop(watched);
        assert_eq!(closes.recv().await, Some(closed()));
        assert!(closes.recv().await.is_none());
    }
}
