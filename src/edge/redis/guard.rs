//! Key guards: tell a holder, at the cost of two tiny round trips, whether
//! anyone touched a set of keys since the holder last verified (read) their
//! content, so that an edit is noticed on the next cycle without reading the
//! keys every cycle. The table guard covers the matching table and its
//! metadata; each list the holder reads (every services list, the units
//! list) has a guard of its own, since lists may live in different slots of a
//! Redis Cluster.
//!
//! Redis' `WATCH` marks a connection "dirty" when a watched key is modified
//! (by anyone: a write, a delete, a `RENAME` over it, an expiry, `FLUSHALL`),
//! and `EXEC` reports it (a nil reply) but also clears every watch of that
//! connection. So a guard keeps two dedicated connections and arms one before
//! it checks the other, which leaves no instant uncovered:
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
//! `MOVED`) says "unknown", and the caller reads the content in full once,
//! **after** [`KeyGuard::probe`] returned, so after the other connection was
//! armed. That order is the whole guarantee, for lists exactly as for the
//! table:
//!
//! ```text
//!  probe n:   WATCH B ─┐                      (B armed first)
//!  read:               └─ LRANGE list ─ verified(v)   content v, covered by B
//!  someone:                                 LPUSH list   → B dirty
//!  probe n+1: WATCH A, EXEC on B → nil: unknown → read again, after A's WATCH
//! ```
//!
//! Were the read made before the arming, a write landing between the read
//! and the `WATCH` would be covered by neither connection and the stale
//! content would be trusted forever. The holder's own table writes dirty the
//! table's watch too: one full check follows each of them.
//!
//! On Redis Cluster the connections go to the node that serves the keys'
//! slot, found by following `MOVED`. Where `WATCH` is not permitted (an ACL
//! without it), [`KeyGuard::unsupported`] says so and the caller reads the
//! content every cycle instead.

use std::collections::HashMap;
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::{ConnectionAddr, ErrorKind, Value};

use super::sentinel::Node;

/// The watch state of one holder's view of some keys, and the value the
/// caller verified for them (a digest, a content version), valid for as long
/// as the armed watch stays clean.
pub struct KeyGuard<T> {
    client: Node,
    keys: Vec<String>,
    /// What the caller does instead when `WATCH` is not permitted, for the
    /// one log line that says so.
    fallback: String,
    timeout: Duration,
    conns: [Option<MultiplexedConnection>; 2],
    /// The connection whose `WATCH` is live, if any.
    armed: Option<usize>,
    /// What the caller verified, for as long as the armed watch is clean.
    verified: Option<T>,
    unsupported: bool,
}

/// The table guard: the table and its metadata, and the digest verified.
pub type TableGuard = KeyGuard<String>;

impl TableGuard {
    /// A guard of `table` and `meta`; connects on first use.
    pub fn table(client: Node, table: &str, meta: &str, timeout: Duration) -> TableGuard {
        KeyGuard::new(
            client,
            vec![table.to_string(), meta.to_string()],
            "the table's content is checked in Redis every cycle instead".into(),
            timeout,
        )
    }
}

impl<T: Clone> KeyGuard<T> {
    /// A guard of `keys` (all in one Cluster slot); connects on first use.
    pub fn new(
        client: Node,
        keys: Vec<String>,
        fallback: String,
        timeout: Duration,
    ) -> KeyGuard<T> {
        KeyGuard {
            client,
            keys,
            fallback,
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

    /// Arms the idle connection, then checks the armed one. Returns what was
    /// verified when nobody touched the keys since it was; `None` when that
    /// is unknown, and a full read is due (the guard is then armed, if Redis
    /// allows it, so a read made after this call is covered).
    pub async fn probe(&mut self) -> Option<T> {
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
                if server_error(&e).is_some_and(|(code, _)| code == "NOPERM") {
                    tracing::warn!(
                        error = %e,
                        "WATCH is not permitted: {}",
                        self.fallback
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

    /// Records that a full read, made after the last [`probe`](Self::probe),
    /// found `value` (a digest, a version of the content).
    pub fn verified(&mut self, value: T) {
        if self.armed.is_some() {
            self.verified = Some(value);
        }
    }

    /// Forgets what was verified: a read after the probe failed, so nothing
    /// is known (the next probe then asks for a full read).
    pub fn forget(&mut self) {
        self.verified = None;
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
                Err(e) => {
                    self.conns[slot] = None;
                    let Some((host, port)) = moved_to(&e) else {
                        return Err(e);
                    };
                    // Only a cluster moves slots, and a cluster's nodes are fixed.
                    if let Node::Fixed(client) = &self.client {
                        self.client = Node::Fixed(redirected(client, &host, port)?.into());
                    }
                }
            }
        }
        Err((ErrorKind::Io, "the watched keys' slot keeps moving").into())
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
        let conn = bounded(self.timeout, async {
            self.client
                .client()
                .await?
                .get_multiplexed_async_connection()
                .await
        })
        .await?;
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

/// The first server error of a reply, as `(code, details)`: in a pipeline's
/// error too, where `RedisError::code` and `redirect_node` see nothing (a
/// `MOVED` in the guard's `UNWATCH`/`WATCH` pipeline went unfollowed that way).
fn server_error(e: &redis::RedisError) -> Option<(String, String)> {
    let errors = e.clone().into_server_errors()?;
    let (_, first) = errors.first()?;
    Some((
        first.code().to_string(),
        first.details().unwrap_or_default().to_string(),
    ))
}

/// The node a `MOVED` error points to: `MOVED <slot> <host>:<port>`.
fn moved_to(e: &redis::RedisError) -> Option<(String, u16)> {
    let (code, details) = server_error(e)?;
    if code != "MOVED" {
        return None;
    }
    let addr = details.split_ascii_whitespace().nth(1)?;
    let (host, port) = addr.rsplit_once(':')?;
    Some((host.to_string(), port.parse().ok()?))
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

/// One [`KeyGuard`] per list the holder reads, and the version of each
/// list's content as last read under it. A version names one read: equal
/// versions, equal content, and a re-read always gets a new one.
pub struct ListGuards {
    client: Node,
    timeout: Duration,
    guards: HashMap<String, KeyGuard<u64>>,
    next_version: u64,
}

impl ListGuards {
    pub fn new(client: Node, timeout: Duration) -> ListGuards {
        ListGuards {
            client,
            timeout,
            guards: HashMap::new(),
            next_version: 1,
        }
    }

    /// Probes the guard of every list in `keys`, concurrently: per list, the
    /// version of the content known unchanged since it was read, or `None`
    /// when it must be read again (first use, touched, a reconnect, a
    /// `MOVED`, an error, `WATCH` not permitted). Every guard is armed when
    /// this returns, so a read made after it is covered. Guards of lists no
    /// longer asked for are dropped.
    pub async fn probe(&mut self, keys: &[&str]) -> Vec<Option<u64>> {
        self.guards.retain(|k, _| keys.contains(&k.as_str()));
        for key in keys {
            if !self.guards.contains_key(*key) {
                let fallback = format!("list {key:?} is read in full every cycle instead");
                let guard = KeyGuard::new(
                    self.client.clone(),
                    vec![key.to_string()],
                    fallback,
                    self.timeout,
                );
                self.guards.insert(key.to_string(), guard);
            }
        }
        let mut probes: HashMap<&str, Option<u64>> = futures::future::join_all(
            self.guards
                .iter_mut()
                .map(|(k, g)| async move { (k.as_str(), g.probe().await) }),
        )
        .await
        .into_iter()
        .collect();
        keys.iter().map(|k| probes.remove(k).flatten()).collect()
    }

    /// Records that `key` was read in full after the last probe: its new
    /// version, which stays valid while the list's watch stays clean.
    pub fn read(&mut self, key: &str) -> u64 {
        let version = self.next_version;
        self.next_version += 1;
        if let Some(g) = self.guards.get_mut(key) {
            g.verified(version);
        }
        version
    }

    /// Forgets what is known of `key` (a read of it failed): read again next.
    pub fn forget(&mut self, key: &str) {
        if let Some(g) = self.guards.get_mut(key) {
            g.forget();
        }
    }
}

/// A [`KeyGuard`] and the versions it hands out: for content read as one
/// (the members' reports and the weight overrides).
pub struct Versioned {
    pub guard: KeyGuard<u64>,
    next_version: u64,
    /// For content whose decoding changes with the clock (`{T}:loads`):
    /// the unix ms from which the last read's decoding no longer holds.
    pub fresh_until: Option<u64>,
}

impl Versioned {
    pub fn new(guard: KeyGuard<u64>) -> Versioned {
        Versioned {
            guard,
            next_version: 1,
            fresh_until: None,
        }
    }

    /// Records a full read made after the last probe: its new version.
    pub fn read(&mut self) -> u64 {
        let version = self.next_version;
        self.next_version += 1;
        self.guard.verified(version);
        version
    }
}

/// Which lists a cycle must read: those whose content is not known
/// unchanged (`known`, from [`ListGuards::probe`]) at a version the caller
/// still holds (`held`).
pub fn must_read(keys: &[&str], known: &[Option<u64>], held: &HashMap<String, u64>) -> Vec<bool> {
    keys.iter()
        .zip(known)
        .map(|(k, v)| v.is_none() || held.get(*k) != v.as_ref())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_list_is_read_unless_known_unchanged_at_a_version_the_caller_holds() {
        let keys = ["a", "b", "c", "d"];
        let known = [Some(3), Some(4), None, Some(7)];
        let held = HashMap::from([
            ("a".to_string(), 3),
            ("b".to_string(), 2),
            ("c".to_string(), 5),
        ]);
        // a: unchanged and held; b: held at an older version; c: unknown
        // (touched, reconnected, no WATCH); d: the caller lost it.
        assert_eq!(must_read(&keys, &known, &held), [false, true, true, true]);
        assert_eq!(
            must_read(&keys, &known, &HashMap::new()),
            [true, true, true, true]
        );
    }
}
