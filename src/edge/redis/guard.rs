//! The table guard: tells the holder, at the cost of two tiny round trips,
//! whether anyone touched the matching table (or its metadata) since the
//! holder last verified its content, so that a hand edit is noticed on the
//! next cycle without reading the table every cycle.
//!
//! Redis' `WATCH` marks a connection "dirty" when a watched key is modified
//! (by anyone: a write, a delete, an expiry, `FLUSHALL`), and `EXEC` reports it
//! (a nil reply) but also clears every watch of that connection. So the guard
//! keeps two dedicated connections and arms one before it checks the other,
//! which leaves no instant uncovered:
//!
//! ```text
//!  conn A  WATCH ───────────────────── MULTI/EXEC (clean?) ···· WATCH ──────── MULTI/EXEC
//!  conn B                 WATCH ──────────────────────────── MULTI/EXEC  ······
//!          │  cycle n: arm B, then check A │ cycle n+1: arm A, then check B │
//! ```
//!
//! A clean check covers the whole span from that connection's `WATCH` to the
//! check, which includes the other connection's `WATCH`, so the verified
//! content carries over. A dirty check (or a failed call, a reconnect, a
//! `MOVED`) says "unknown", and the caller verifies the content in full once,
//! after the other connection was armed. The holder's own table writes dirty
//! the watch too: one full check follows each of them.
//!
//! On Redis Cluster the connections go to the node that serves the table's
//! slot, found by following `MOVED`. Where `WATCH` is not permitted (an ACL
//! without it), [`TableGuard::unsupported`] says so and the caller checks the
//! content in Redis every cycle instead.

use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::{ConnectionAddr, ErrorKind, ServerErrorKind, Value};

/// The watch state of one holder's view of the table.
pub struct TableGuard {
    client: redis::Client,
    keys: [String; 2],
    timeout: Duration,
    conns: [Option<MultiplexedConnection>; 2],
    /// The connection whose `WATCH` is live, if any.
    armed: Option<usize>,
    /// The table digest known intact for as long as the armed watch is clean.
    verified: Option<String>,
    unsupported: bool,
}

impl TableGuard {
    /// A guard of `table` and `meta`; connects on first use.
    pub fn new(client: redis::Client, table: &str, meta: &str, timeout: Duration) -> TableGuard {
        TableGuard {
            client,
            keys: [table.to_string(), meta.to_string()],
            timeout,
            conns: [None, None],
            armed: None,
            verified: None,
            unsupported: false,
        }
    }

    /// Whether Redis refused `WATCH` (an ACL without it): then the caller must
    /// check the content every cycle.
    pub fn unsupported(&self) -> bool {
        self.unsupported
    }

    /// Arms the idle connection, then checks the armed one. Returns the
    /// verified digest when nobody touched the table since it was verified;
    /// `None` when that is unknown, and a full check is due (the guard is then
    /// armed, if Redis allows it, so a check made after this call is covered).
    pub async fn probe(&mut self) -> Option<String> {
        if self.unsupported {
            return None;
        }
        let next = self.armed.map_or(0, |a| 1 - a);
        let previous = self.armed.take();
        let arming = self.arm(next).await;
        let clean = match previous {
            Some(p) => self.still_clean(p).await,
            None => false,
        };
        match arming {
            Ok(()) => self.armed = Some(next),
            Err(e) => {
                if e.code() == Some("NOPERM") {
                    tracing::warn!(
                        error = %e,
                        "WATCH is not permitted: the table's content is checked in Redis every cycle instead"
                    );
                    self.unsupported = true;
                }
                self.conns[next] = None;
            }
        }
        if !clean || self.armed.is_none() {
            self.verified = None;
        }
        self.verified.clone()
    }

    /// Records that a full check, made after the last [`probe`](Self::probe),
    /// found the table intact with `digest`.
    pub fn verified(&mut self, digest: String) {
        if self.armed.is_some() {
            self.verified = Some(digest);
        }
    }

    async fn arm(&mut self, slot: usize) -> redis::RedisResult<()> {
        // A stale WATCH on this connection (from before a failed check) is
        // replaced: UNWATCH first, so the new one starts clean.
        for _ in 0..3 {
            let mut conn = self.connection(slot).await?;
            let mut pipe = redis::pipe();
            pipe.cmd("UNWATCH").ignore();
            pipe.cmd("WATCH").arg(&self.keys).ignore();
            match bounded(self.timeout, pipe.query_async::<()>(&mut conn)).await {
                Ok(()) => return Ok(()),
                Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::Moved) => {
                    let Some((host, port)) = e.redirect_node() else {
                        return Err(e);
                    };
                    self.conns[slot] = None;
                    self.client = redirected(&self.client, host, port)?;
                }
                Err(e) => {
                    self.conns[slot] = None;
                    return Err(e);
                }
            }
        }
        Err((ErrorKind::Io, "the table's slot keeps moving").into())
    }

    /// `MULTI`/`EXEC` on an armed connection: an empty array when no watched
    /// key was touched since its `WATCH`, nil when one was.
    async fn still_clean(&mut self, slot: usize) -> bool {
        let Some(conn) = self.conns[slot].as_mut() else {
            return false;
        };
        let mut pipe = redis::pipe();
        pipe.cmd("MULTI").ignore();
        pipe.cmd("EXEC");
        let reply = tokio::time::timeout(self.timeout, pipe.query_async::<Vec<Value>>(conn)).await;
        match reply {
            Ok(Ok(v)) => matches!(v.as_slice(), [Value::Array(a)] if a.is_empty()),
            _ => {
                self.conns[slot] = None;
                false
            }
        }
    }

    async fn connection(&mut self, slot: usize) -> redis::RedisResult<MultiplexedConnection> {
        if let Some(c) = &self.conns[slot] {
            return Ok(c.clone());
        }
        let conn = bounded(self.timeout, self.client.get_multiplexed_async_connection()).await?;
        self.conns[slot] = Some(conn.clone());
        Ok(conn)
    }
}

async fn bounded<T>(
    timeout: Duration,
    fut: impl Future<Output = redis::RedisResult<T>>,
) -> redis::RedisResult<T> {
    match tokio::time::timeout(timeout, fut).await {
        Ok(r) => r,
        Err(_) => Err((ErrorKind::Io, "redis did not answer in time").into()),
    }
}

/// The same client (credentials, TLS) for another node.
fn redirected(client: &redis::Client, host: &str, port: u16) -> redis::RedisResult<redis::Client> {
    let info = client.get_connection_info().clone();
    let addr = match info.addr() {
        ConnectionAddr::TcpTls {
            insecure,
            tls_params,
            ..
        } => ConnectionAddr::TcpTls {
            host: host.to_string(),
            port,
            insecure: *insecure,
            tls_params: tls_params.clone(),
        },
        _ => ConnectionAddr::Tcp(host.to_string(), port),
    };
    redis::Client::open(info.set_addr(addr))
}
