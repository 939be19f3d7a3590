//! Connections and bounded calls: the plumbing every Redis call goes through.
//!
//! Guarantees:
//! - every call runs under its own deadline; a call that misses it replaces
//!   both connections (a connection that went silent, as in a partition with
//!   no RST, never errors by itself) and returns [`StoreError::Timeout`];
//! - lease calls and writes go on one connection, big reads on another, so a
//!   megabyte reply never queues a lease renewal behind it;
//! - a pipeline is one round trip on a single node and one pipeline per slot,
//!   all at once, on a cluster; replies come back in the order of the commands;
//! - a `WRONGTYPE` reply is turned into an error naming the offending key;
//! - with [`WaitFor`] set, a write counts only once enough replicas have it:
//!   `WAIT` goes in the write's own pipeline (see `invoke.rs`), so it counts
//!   what the connection that wrote it wrote, never on a connection that
//!   replaced it meanwhile (a reconnect after a timeout, the connection
//!   manager's own, a Sentinel link that moved): `WAIT` from a connection
//!   that wrote nothing counts every connected replica at once. The write's
//!   bound includes the `WAIT`'s timeout;
//! - through Sentinel, a call that fails on its connection, or whose reply
//!   holds a `READONLY` error anywhere, abandons that connection (see
//!   `sentinel.rs`).

use std::sync::Arc;
use std::time::Duration;

use redis::Value;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};

use super::sentinel::{Node, SentinelLink, Sentinels};
use super::{BULK_TIMEOUT, RedisOptions, Store, int, redis_err, reply_err, text};
use crate::error::StoreError;

/// One logical connection: a single node's multiplexed connection that
/// reconnects by itself, or a Redis Cluster connection (connected on first use,
/// routing each command by its key's slot).
#[derive(Clone)]
pub(super) enum Conn {
    Single(ConnectionManager),
    Cluster(Arc<ClusterLink>),
    /// The master the sentinels name, found again after a failover.
    Sentinel(Arc<SentinelLink>),
}

/// A cluster client and its connection, made on first use.
pub(super) struct ClusterLink {
    client: redis::cluster::ClusterClient,
    cell: tokio::sync::OnceCell<redis::cluster_async::ClusterConnection>,
}

impl Conn {
    async fn cluster(
        client: &redis::cluster::ClusterClient,
        cell: &tokio::sync::OnceCell<redis::cluster_async::ClusterConnection>,
    ) -> redis::RedisResult<redis::cluster_async::ClusterConnection> {
        cell.get_or_try_init(|| client.get_async_connection())
            .await
            .cloned()
    }
}

impl Conn {
    /// Whether every command goes to one node (no cluster routing): then a
    /// pipeline is one round trip, and `CLIENT ID` names the connection the
    /// other commands of its transaction ran on.
    pub(super) fn is_one_node(&self) -> bool {
        matches!(self, Conn::Single(_) | Conn::Sentinel(_))
    }
}

impl redis::aio::ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a redis::Cmd) -> redis::RedisFuture<'a, Value> {
        match self {
            Conn::Single(c) => c.req_packed_command(cmd),
            Conn::Cluster(link) => Box::pin(async move {
                Conn::cluster(&link.client, &link.cell)
                    .await?
                    .req_packed_command(cmd)
                    .await
            }),
            Conn::Sentinel(link) => Box::pin(async move {
                let (n, mut c) = link.connection().await?;
                let reply = c.req_packed_command(cmd).await;
                // A server error comes back as a value (redis-rs extracts it
                // later): READONLY is seen here or never.
                link.replied(n, reply.as_ref().map(std::slice::from_ref))
                    .await;
                reply
            }),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> redis::RedisFuture<'a, Vec<Value>> {
        match self {
            Conn::Single(c) => c.req_packed_commands(pipeline, offset, count),
            Conn::Cluster(link) => Box::pin(async move {
                Conn::cluster(&link.client, &link.cell)
                    .await?
                    .req_packed_commands(pipeline, offset, count)
                    .await
            }),
            Conn::Sentinel(link) => Box::pin(async move {
                let (n, mut c) = link.connection().await?;
                let reply = c.req_packed_commands(pipeline, offset, count).await;
                link.replied(n, reply.as_ref().map(Vec::as_slice)).await;
                reply
            }),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Single(c) => c.get_db(),
            Conn::Cluster(_) | Conn::Sentinel(_) => 0,
        }
    }
}

/// How to make a fresh [`Conn`].
pub(super) enum Dialer {
    Single {
        client: redis::Client,
        config: ConnectionManagerConfig,
    },
    Cluster(redis::cluster::ClusterClient),
    Sentinel {
        sentinels: Arc<Sentinels>,
        connect_timeout: Duration,
    },
}

impl Dialer {
    /// The dialer `opts` ask for: a cluster client through the seed nodes, or
    /// a reconnecting connection to `client`'s node.
    pub(super) fn new(
        opts: &RedisOptions,
        node: &Node,
        op_timeout: Duration,
    ) -> Result<Dialer, StoreError> {
        let client = match node {
            Node::Fixed(client) => client,
            Node::Sentinel(sentinels) => {
                return Ok(Dialer::Sentinel {
                    sentinels: sentinels.clone(),
                    connect_timeout: op_timeout,
                });
            }
        };
        if opts.is_cluster() {
            crate::edge::tls::install_crypto_provider();
            let mut b = redis::cluster::ClusterClientBuilder::new(opts.urls.clone())
                .connection_timeout(op_timeout)
                .response_timeout(BULK_TIMEOUT)
                .retries(2);
            if !opts.tls.is_empty() {
                let m = opts.tls.load().map_err(|e| StoreError::Reply {
                    op: "open",
                    detail: e.to_string(),
                })?;
                b = b.certs(redis::TlsCertificates {
                    client_tls: m.identity.map(|(client_cert, client_key)| {
                        redis::ClientTlsConfig {
                            client_cert,
                            client_key,
                        }
                    }),
                    root_cert: m.ca,
                });
            }
            Ok(Dialer::Cluster(b.build().map_err(redis_err("open"))?))
        } else {
            let config = ConnectionManagerConfig::new()
                .set_connection_timeout(Some(op_timeout))
                // Every call is bounded by its own deadline here (see `bounded`); the
                // library's default 500 ms would cut a big read short.
                .set_response_timeout(None)
                .set_number_of_retries(1)
                .set_min_delay(Duration::from_millis(50))
                .set_max_delay(Duration::from_millis(500));
            Ok(Dialer::Single {
                client: redis::Client::clone(client),
                config,
            })
        }
    }

    fn dial(&self) -> redis::RedisResult<Conn> {
        match self {
            Dialer::Single { client, config } => {
                ConnectionManager::new_lazy_with_config(client.clone(), config.clone())
                    .map(Conn::Single)
            }
            Dialer::Cluster(client) => Ok(Conn::Cluster(Arc::new(ClusterLink {
                client: client.clone(),
                cell: tokio::sync::OnceCell::new(),
            }))),
            Dialer::Sentinel {
                sentinels,
                connect_timeout,
            } => Ok(Conn::Sentinel(Arc::new(SentinelLink::new(
                sentinels.clone(),
                *connect_timeout,
            )))),
        }
    }
}

/// The two connections, replaced wholesale after a timeout: a connection that
/// went silent (a partition, no RST) never errors by itself, so without this
/// every later call would wait on it until the kernel gives up, minutes later.
pub(super) struct Links {
    dialer: Dialer,
    /// Lease calls and writes: small, latency-critical.
    lease: std::sync::Mutex<Conn>,
    /// Cycle and operator reads, which may carry megabytes; on their own
    /// connection so a big reply never queues a lease renewal behind it.
    bulk: std::sync::Mutex<Conn>,
    /// The lease connection replaced last, kept open until a renewal has
    /// recorded the new one's client id (see [`Store::retire_done`]): the
    /// holder's connection record names it until then, and closing it would
    /// tell the standbys that the holder is gone (a live holder taken over
    /// after a slow call, then fenced: safe, but a needless failover).
    retired: std::sync::Mutex<Option<Conn>>,
}

impl Links {
    /// Both connections, made lazily: the first call connects.
    pub(super) fn new(dialer: Dialer) -> Result<Links, StoreError> {
        Ok(Links {
            lease: std::sync::Mutex::new(dialer.dial().map_err(redis_err("open"))?),
            bulk: std::sync::Mutex::new(dialer.dial().map_err(redis_err("open"))?),
            retired: std::sync::Mutex::new(None),
            dialer,
        })
    }
}

impl Store {
    pub(super) fn conn(&self) -> Conn {
        self.links.lease.lock().expect("links poisoned").clone()
    }

    pub(super) fn bulk(&self) -> Conn {
        self.links.bulk.lock().expect("links poisoned").clone()
    }

    /// Replaces both connections with fresh ones (connected lazily on next
    /// use). The old lease connection stays open until the new one's client
    /// id is recorded ([`Store::retire_done`]).
    pub(super) fn reconnect(&self) {
        if let (Ok(lease), Ok(bulk)) = (self.links.dialer.dial(), self.links.dialer.dial()) {
            let old = std::mem::replace(
                &mut *self.links.lease.lock().expect("links poisoned"),
                lease,
            );
            *self.links.retired.lock().expect("links poisoned") = Some(old);
            *self.links.bulk.lock().expect("links poisoned") = bulk;
        }
    }

    /// Closes the retired lease connection, if any: the connection record
    /// names the current one now (or this replica holds no lease).
    pub(super) fn retire_done(&self) {
        self.links.retired.lock().expect("links poisoned").take();
    }

    pub(super) async fn bounded<T>(
        &self,
        op: &'static str,
        timeout: Duration,
        fut: impl Future<Output = redis::RedisResult<T>>,
    ) -> Result<T, StoreError> {
        match tokio::time::timeout(timeout, fut).await {
            Ok(r) => r.map_err(redis_err(op)),
            Err(_) => {
                tracing::debug!(op, ?timeout, "redis call timed out; reconnecting");
                self.reconnect();
                Err(StoreError::Timeout { op, timeout })
            }
        }
    }

    /// With [`WaitFor`] set, the `WAIT` that follows a write in its own
    /// pipeline, and how much longer it lets the write's call take.
    pub(super) fn wait_after(&self) -> Option<(redis::Cmd, Duration)> {
        let w = self.wait?;
        let cmd = redis::cmd("WAIT")
            .arg(w.replicas)
            .arg(w.timeout.as_millis() as u64)
            .to_owned();
        Some((cmd, w.timeout))
    }

    /// What the reply of a write's `WAIT` says: an error when fewer replicas
    /// than required acknowledged everything its connection wrote (or the
    /// `WAIT` failed).
    pub(super) fn replicated(&self, op: &'static str, acked: Value) -> Result<(), StoreError> {
        let Some(w) = self.wait else {
            return Ok(());
        };
        if let Value::ServerError(e) = acked {
            return Err(redis_err(op)(e.into()));
        }
        let acked = int(&acked).ok_or_else(|| reply_err(op, &acked))?;
        if acked < i64::from(w.replicas) {
            return Err(StoreError::NotDurable {
                op,
                acked: acked.max(0) as u32,
                wanted: w.replicas,
                timeout: w.timeout,
            });
        }
        Ok(())
    }

    /// Runs `cmds` pipelined: one round trip on a single node; on a cluster, one
    /// pipeline per slot, all at once (a cluster pipeline must stay in one
    /// slot). Replies come back in the order of `cmds`. Each command is given
    /// with the key that routes it.
    pub(super) async fn pipelined(
        &self,
        conn: Conn,
        op: &'static str,
        timeout: Duration,
        cmds: Vec<(String, redis::Cmd)>,
    ) -> Result<Vec<Value>, StoreError> {
        self.pipelines(conn, op, timeout, cmds, false).await
    }

    /// [`pipelined`](Self::pipelined), with each command's error reply in its
    /// place (`Value::ServerError`) instead of failing the whole call.
    pub(super) async fn pipelined_lenient(
        &self,
        conn: Conn,
        op: &'static str,
        timeout: Duration,
        cmds: Vec<(String, redis::Cmd)>,
    ) -> Result<Vec<Value>, StoreError> {
        self.pipelines(conn, op, timeout, cmds, true).await
    }

    async fn pipelines(
        &self,
        conn: Conn,
        op: &'static str,
        timeout: Duration,
        cmds: Vec<(String, redis::Cmd)>,
        lenient: bool,
    ) -> Result<Vec<Value>, StoreError> {
        let new_pipe = || {
            let mut pipe = redis::pipe();
            if lenient {
                pipe.ignore_errors();
            }
            pipe
        };
        let run = async move {
            // One node (fixed, or the master the sentinels name): one pipeline.
            if conn.is_one_node() {
                let mut pipe = new_pipe();
                for (_, cmd) in &cmds {
                    pipe.add_command(cmd.clone());
                }
                let mut conn = conn;
                return pipe.query_async::<Vec<Value>>(&mut conn).await;
            }
            let mut by_slot: std::collections::BTreeMap<u16, Vec<usize>> = Default::default();
            for (i, (key, _)) in cmds.iter().enumerate() {
                by_slot
                    .entry(crate::core::keys::slot(key))
                    .or_default()
                    .push(i);
            }
            let batches = by_slot.into_values().map(|idx| {
                let mut pipe = new_pipe();
                for &i in &idx {
                    pipe.add_command(cmds[i].1.clone());
                }
                let mut conn = conn.clone();
                async move {
                    pipe.query_async::<Vec<Value>>(&mut conn)
                        .await
                        .map(|v| (idx, v))
                }
            });
            let mut out = vec![Value::Nil; cmds.len()];
            for batch in futures::future::join_all(batches).await {
                let (idx, values) = batch?;
                for (i, v) in idx.into_iter().zip(values) {
                    out[i] = v;
                }
            }
            Ok(out)
        };
        self.bounded(op, timeout, run).await
    }

    /// Names the first of `keys` that is not of type `expected`, for a WRONGTYPE reply.
    pub(super) async fn find_wrong_type(
        &self,
        keys: &[&str],
        expected: &'static str,
    ) -> Option<StoreError> {
        let cmds = keys
            .iter()
            .map(|k| (k.to_string(), redis::cmd("TYPE").arg(*k).to_owned()))
            .collect();
        let types: Vec<String> = self
            .pipelined(self.conn(), "TYPE", self.op_timeout, cmds)
            .await
            .ok()?
            .iter()
            .map(|v| text(v).unwrap_or_default())
            .collect();
        keys.iter()
            .zip(types)
            .find(|(_, t)| t != expected && t != "none")
            .map(|(k, t)| StoreError::WrongType {
                key: k.to_string(),
                expected,
                actual: t,
            })
    }

    pub(super) async fn classify(
        &self,
        e: StoreError,
        keys: &[&str],
        expected: &'static str,
    ) -> StoreError {
        if e.server_code() == Some("WRONGTYPE") {
            return self.find_wrong_type(keys, expected).await.unwrap_or(e);
        }
        e
    }

    /// How many replicas the master serving the table reports
    /// (`INFO replication`), or `None` where Redis does not say (no
    /// permission, a cluster).
    pub async fn connected_replicas(&self) -> Option<u32> {
        let mut c = self.conn();
        if !c.is_one_node() {
            return None;
        }
        let info: String = self
            .bounded(
                "read replication info",
                self.op_timeout,
                redis::cmd("INFO").arg("replication").query_async(&mut c),
            )
            .await
            .ok()?;
        info.lines()
            .find_map(|l| l.strip_prefix("connected_slaves:"))
            .and_then(|n| n.trim().parse().ok())
    }
}
