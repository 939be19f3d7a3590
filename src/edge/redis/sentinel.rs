//! Redis Sentinel: the master the sentinels name, found again after every
//! failover.
//!
//! Guarantees:
//! - every connection goes to the node the sentinels name as the master and
//!   that itself answers `ROLE` with `master` (redis-rs checks both);
//! - a connection that drops, or whose reply holds a `READONLY` error
//!   anywhere (a command's, a pipeline element's, a transaction's: its node
//!   was demoted), is abandoned: the next call asks the sentinels again.
//!   Sentinel kills the clients of every instance it reconfigures, so a
//!   failover surfaces as a dropped connection; a demotion that kills no
//!   client (an operator's `REPLICAOF`, sentinels whose ACL user may not
//!   `CLIENT KILL`) surfaces as the first write's `READONLY`, which that
//!   call returns;
//! - the first URL's user and password authenticate to every sentinel, and
//!   [`SentinelOptions`]' to the master; a `rediss://` URL among them means
//!   TLS to every sentinel and to the master, with the same custom CA and
//!   client certificate;
//! - limit: a connection is re-resolved only when it fails. An old master
//!   cut off from the sentinels but still reachable from here keeps
//!   answering until Sentinel reconfigures it (Redis' own split-brain limit:
//!   `min-replicas-to-write` on the master bounds it). A connection that
//!   only reads never meets `READONLY`: after a demotion that kills no
//!   client it reads the demoted node (a replica of the new master: its
//!   data lags) until it fails.

use std::sync::Arc;
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::sentinel::{SentinelClient, SentinelClientBuilder, SentinelServerType};
use redis::{ConnectionAddr, IntoConnectionInfo, RedisError, RedisResult, TlsMode, Value};

use crate::edge::tls::TlsFiles;

/// Which master to ask the sentinels for, and how to authenticate to it.
#[derive(Clone, PartialEq, Eq, Default)]
pub struct SentinelOptions {
    /// The name the sentinels monitor the master under.
    pub master: String,
    pub username: Option<String>,
    pub password: Option<String>,
}

impl std::fmt::Debug for SentinelOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SentinelOptions")
            .field("master", &self.master)
            .field("username", &self.username)
            .field("password", &self.password.as_ref().map(|_| "***"))
            .finish()
    }
}

/// The sentinels, asked for the master on every (re)connection.
pub(super) struct Sentinels {
    client: tokio::sync::Mutex<SentinelClient>,
    master: String,
}

impl Sentinels {
    /// From the sentinels' URLs. Reasons name no URL (one may hold a
    /// password).
    pub(super) fn new(
        urls: &[String],
        opts: &SentinelOptions,
        tls: &TlsFiles,
    ) -> RedisResult<Sentinels> {
        crate::edge::tls::install_crypto_provider();
        let mut addrs = Vec::new();
        let mut first = None;
        for url in urls {
            let info = url.as_str().into_connection_info()?;
            first.get_or_insert_with(|| info.redis_settings().clone());
            addrs.push(info.addr().clone());
        }
        let Some(sentinel_auth) = first else {
            return Err(RedisError::from((
                redis::ErrorKind::InvalidClientConfig,
                "no sentinel URL",
            )));
        };
        let secure = addrs
            .iter()
            .any(|a| matches!(a, ConnectionAddr::TcpTls { .. }));
        let mut b = SentinelClientBuilder::new(addrs, &opts.master, SentinelServerType::Master)?
            .set_client_to_redis_db(sentinel_auth.db());
        if let Some(u) = sentinel_auth.username() {
            b = b.set_client_to_sentinel_username(u);
        }
        if let Some(p) = sentinel_auth.password() {
            b = b.set_client_to_sentinel_password(p);
        }
        if let Some(u) = &opts.username {
            b = b.set_client_to_redis_username(u);
        }
        if let Some(p) = &opts.password {
            b = b.set_client_to_redis_password(p);
        }
        if secure {
            b = b
                .set_client_to_sentinel_tls_mode(TlsMode::Secure)
                .set_client_to_redis_tls_mode(TlsMode::Secure);
            if !tls.is_empty() {
                let m = tls.load().map_err(|e| {
                    RedisError::from((
                        redis::ErrorKind::InvalidClientConfig,
                        "unusable TLS file",
                        e.to_string(),
                    ))
                })?;
                let certs = || redis::TlsCertificates {
                    client_tls: m.identity.clone().map(|(client_cert, client_key)| {
                        redis::ClientTlsConfig {
                            client_cert,
                            client_key,
                        }
                    }),
                    root_cert: m.ca.clone(),
                };
                b = b
                    .set_client_to_sentinel_certificates(certs())
                    .set_client_to_redis_certificates(certs());
            }
        }
        Ok(Sentinels {
            client: tokio::sync::Mutex::new(b.build()?),
            master: opts.master.clone(),
        })
    }

    /// A client for the current master, as the sentinels name it now.
    pub(super) async fn master(&self) -> RedisResult<redis::Client> {
        let client = self.client.lock().await.async_get_client().await;
        if let Err(e) = &client {
            tracing::debug!(master = %self.master, error = %e, "the sentinels named no usable master");
        }
        client
    }
}

/// One logical connection to the current master: made on first use, and
/// made again (asking the sentinels) after it dropped or found its node
/// demoted.
pub(super) struct SentinelLink {
    sentinels: Arc<Sentinels>,
    /// The connection, numbered: a failure abandons only the one it
    /// happened on, never a newer one another call just made.
    conn: tokio::sync::Mutex<(u64, Option<MultiplexedConnection>)>,
    connect_timeout: Duration,
}

impl SentinelLink {
    pub(super) fn new(sentinels: Arc<Sentinels>, connect_timeout: Duration) -> SentinelLink {
        SentinelLink {
            sentinels,
            conn: tokio::sync::Mutex::new((0, None)),
            connect_timeout,
        }
    }

    /// The connection to the master and its number, made now if there is
    /// none.
    pub(super) async fn connection(&self) -> RedisResult<(u64, MultiplexedConnection)> {
        let mut conn = self.conn.lock().await;
        if let (n, Some(c)) = &*conn {
            return Ok((*n, c.clone()));
        }
        let client = self.sentinels.master().await?;
        let config = redis::AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.connect_timeout))
            // Every call is bounded by the store's own deadline.
            .set_response_timeout(None);
        let c = client
            .get_multiplexed_async_connection_with_config(&config)
            .await?;
        conn.0 += 1;
        conn.1 = Some(c.clone());
        Ok((conn.0, c))
    }

    /// After a call on connection `n` returned `reply` (a value per
    /// command): abandons the connection if the reply says it is gone or
    /// its node is no longer the master.
    pub(super) async fn replied(&self, n: u64, reply: Result<&[Value], &RedisError>) {
        let gone = match reply {
            Ok(values) => values.iter().any(read_only),
            Err(e) => failed_for_good(e),
        };
        if !gone {
            return;
        }
        let mut conn = self.conn.lock().await;
        if conn.0 == n && conn.1.is_some() {
            match reply {
                Ok(_) => {
                    tracing::debug!(master = %self.sentinels.master, "the master refused a write as READONLY (demoted); asking the sentinels again")
                }
                Err(e) => {
                    tracing::debug!(master = %self.sentinels.master, error = %e, "abandoning the connection to the master; asking the sentinels again")
                }
            }
            conn.1 = None;
        }
    }
}

/// Whether `v` holds a `READONLY` error reply (the node is a replica now),
/// at any depth: a command's reply, a transaction's `EXEC` array, a script's
/// error. redis-rs returns error replies as values, so that a pipeline
/// keeps its other replies.
fn read_only(v: &Value) -> bool {
    match v {
        Value::ServerError(e) => e.code() == "READONLY",
        Value::Array(items) | Value::Set(items) => items.iter().any(read_only),
        Value::Map(pairs) => pairs.iter().any(|(k, v)| read_only(k) || read_only(v)),
        Value::Attribute { data, .. } => read_only(data),
        _ => false,
    }
}

/// Whether a failed call says its connection is useless: dropped, broken,
/// or on a node that refuses writes as a replica (`READONLY`, or a
/// transaction discarded for one: redis-rs turns `EXECABORT` into an error
/// listing the refused commands).
fn failed_for_good(e: &RedisError) -> bool {
    e.is_connection_dropped()
        || e.is_io_error()
        || e.is_unrecoverable_error()
        || e.code() == Some("READONLY")
        || e.clone()
            .into_server_errors()
            .is_some_and(|errors| errors.iter().any(|(_, e)| e.code() == "READONLY"))
}

/// Where a store opens a connection of its own (table guards, pub/sub): a
/// fixed node, or the master the sentinels name now.
#[derive(Clone)]
pub(super) enum Node {
    Fixed(Arc<redis::Client>),
    Sentinel(Arc<Sentinels>),
}

impl Node {
    /// A client for the node: boxed, since asking the sentinels is a deep
    /// future that would otherwise grow every caller's.
    pub(super) fn client(
        &self,
    ) -> std::pin::Pin<Box<dyn Future<Output = RedisResult<redis::Client>> + Send + '_>> {
        match self {
            Node::Fixed(c) => Box::pin(std::future::ready(Ok(redis::Client::clone(c)))),
            Node::Sentinel(s) => Box::pin(s.master()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(resp: &str) -> Value {
        redis::parse_redis_value(resp.as_bytes()).expect("RESP")
    }

    #[test]
    fn a_read_only_reply_is_found_wherever_it_is() {
        let refused = "-READONLY You can't write against a read only replica.\r\n";
        assert!(read_only(&parsed(refused)));
        // A pipeline's element, a transaction's EXEC array, nested deeper.
        let exec = format!("*2\r\n:1\r\n{refused}");
        assert!(read_only(&parsed(&exec)));
        assert!(read_only(&parsed(&format!("*2\r\n+OK\r\n{exec}"))));
        // Other errors, and data that merely says READONLY, are not.
        assert!(!read_only(&parsed("-ERR READONLY in the text\r\n")));
        assert!(!read_only(&parsed("*2\r\n$8\r\nREADONLY\r\n+READONLY\r\n")));
        assert!(!read_only(&parsed("-NOPERM no\r\n")));
    }

    #[test]
    fn a_failed_call_abandons_only_for_a_dead_link_or_a_demotion() {
        let Value::ServerError(e) = parsed("-READONLY You can't write.\r\n") else {
            panic!("an error reply")
        };
        assert!(failed_for_good(&RedisError::from(e)));
        let Value::ServerError(e) = parsed("-WRONGTYPE Operation against a key\r\n") else {
            panic!("an error reply")
        };
        assert!(!failed_for_good(&RedisError::from(e)));
        let io = std::io::Error::new(std::io::ErrorKind::ConnectionReset, "reset");
        assert!(failed_for_good(&RedisError::from(io)));
    }
}
