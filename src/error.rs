//! Library errors, classified retryable or fatal.
//!
//! The daemon never exits on a [`StoreError`]: a retryable one is retried with
//! backoff on the next tick; a non-retryable one (a key of the wrong type, a
//! permission error) is logged, counted and skipped, keeping the last table.

use std::path::PathBuf;
use std::time::Duration;

/// Errors of the Redis store.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The server did not answer in time.
    #[error("redis did not answer {op} within {timeout:?}")]
    Timeout { op: &'static str, timeout: Duration },
    /// A key holds another Redis type than the protocol expects.
    #[error("key {key:?} holds a {actual}, expected a {expected}")]
    WrongType {
        key: String,
        expected: &'static str,
        actual: String,
    },
    /// A list or hash holds more entries (or bytes) than its setting allows.
    #[error("{container} {key:?} has more than {limit} {what} ({setting}); refusing to read it")]
    TooLong {
        /// `list` or `hash`.
        container: &'static str,
        key: String,
        what: &'static str,
        limit: u64,
        setting: &'static str,
    },
    /// Any other error reported by redis-rs (connection, server, protocol).
    #[error("redis {op} failed: {source}")]
    Redis {
        op: &'static str,
        #[source]
        source: redis::RedisError,
    },
    /// A reply of an unexpected shape (a script from another version?).
    #[error("unexpected reply to {op}: {detail}")]
    Reply { op: &'static str, detail: String },
    /// A write that fewer Redis replicas acknowledged than `-redis-wait-replicas`
    /// asks: it may be lost with a failed-over master, so it does not count.
    #[error(
        "{op}: only {acked} of {wanted} redis replicas acknowledged within {timeout:?} (-redis-wait-replicas)"
    )]
    NotDurable {
        op: &'static str,
        acked: u32,
        wanted: u32,
        timeout: Duration,
    },
    /// A fenced call refused by Redis: this replica no longer holds the lease.
    #[error("redis refused {op}: the lease moved on ({reason})")]
    Fenced { op: &'static str, reason: String },
    /// A stored value that a script refuses to use (or, with key `ARGV`, an
    /// argument); the script wrote nothing. `value` is escaped and shortened.
    #[error(
        "{}{} holds {value}, expected {expected}",
        quoted(key),
        field_part(field)
    )]
    InvalidState {
        key: String,
        field: String,
        value: String,
        expected: String,
    },
}

fn quoted(key: &str) -> String {
    if key == "ARGV" {
        "script argument".to_string()
    } else {
        format!("key {key:?}")
    }
}

fn field_part(field: &str) -> String {
    if field.is_empty() {
        String::new()
    } else {
        format!(" field {field:?}")
    }
}

impl StoreError {
    /// `container` (`list` or `hash`) `key` over `limit` of `what`
    /// (`entries` or `bytes`), naming the setting that bounds it.
    pub fn too_long(
        container: &'static str,
        key: &str,
        what: &'static str,
        limit: u64,
    ) -> StoreError {
        StoreError::TooLong {
            container,
            key: key.to_string(),
            what,
            limit,
            setting: if what == "bytes" {
                "-max-list-bytes"
            } else {
                "-max-list-entries"
            },
        }
    }

    /// Whether the same call may succeed later without anyone changing anything.
    pub fn is_retryable(&self) -> bool {
        match self {
            StoreError::Timeout { .. } | StoreError::NotDurable { .. } => true,
            StoreError::WrongType { .. }
            | StoreError::Reply { .. }
            | StoreError::TooLong { .. }
            | StoreError::InvalidState { .. }
            | StoreError::Fenced { .. } => false,
            StoreError::Redis { source, .. } => {
                use redis::RetryMethod::*;
                !matches!(source.retry_method(), NoRetry) || source.is_io_error()
            }
        }
    }

    /// The server's error code (`WRONGTYPE`, `NOPERM`, ...), also inside a
    /// pipeline's or a transaction's failure.
    pub fn server_code(&self) -> Option<&'static str> {
        let StoreError::Redis { source, .. } = self else {
            return None;
        };
        let errors = source.clone().into_server_errors()?;
        ["WRONGTYPE", "NOPERM", "NOSCRIPT", "READONLY", "LOADING"]
            .into_iter()
            .find(|code| errors.iter().any(|(_, e)| e.code() == *code))
    }

    /// Every [`StoreError::kind`], so that metrics can show each at 0.
    pub const KINDS: [&'static str; 10] = [
        "timeout",
        "wrong_type",
        "too_long",
        "reply",
        "invalid_state",
        "fenced",
        "not_durable",
        "io",
        "no_permission",
        "server",
    ];

    /// A short label for metrics and logs.
    pub fn kind(&self) -> &'static str {
        match self {
            StoreError::Timeout { .. } => "timeout",
            StoreError::WrongType { .. } => "wrong_type",
            StoreError::TooLong { .. } => "too_long",
            StoreError::Reply { .. } => "reply",
            StoreError::InvalidState { .. } => "invalid_state",
            StoreError::Fenced { .. } => "fenced",
            StoreError::NotDurable { .. } => "not_durable",
            StoreError::Redis { source, .. } if source.is_io_error() => "io",
            StoreError::Redis { .. } if self.server_code() == Some("NOPERM") => "no_permission",
            StoreError::Redis { .. } => "server",
        }
    }
}

/// Errors of the member library.
#[derive(Debug, thiserror::Error)]
pub enum MemberError {
    #[error("invalid member address {addr:?}: {reason}")]
    Address { addr: String, reason: &'static str },
    #[error("failed to listen on {addr}: {source}")]
    Listen {
        addr: std::net::SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("member TLS: {0}")]
    Tls(TlsError),
    #[error("invalid member option {name}: {reason}")]
    Option { name: &'static str, reason: String },
    /// A variable of [`crate::member::MEMBER_ENV`] that cannot be read; the
    /// value is `(hidden)` for one that may hold a secret.
    #[error("invalid environment variable {var}={value:?}: {reason}")]
    Env {
        var: &'static str,
        value: String,
        reason: String,
    },
    /// The member stopped (its task ended) before what was awaited.
    #[error("the member stopped")]
    Stopped,
}

impl MemberError {
    /// Whether trying again may succeed: Redis being unreachable or slow,
    /// and an address that cannot be bound now (it may be freed).
    /// Everything else is the configuration or the process.
    pub fn is_retryable(&self) -> bool {
        match self {
            MemberError::Store(e) => e.is_retryable(),
            MemberError::Listen { .. } => true,
            _ => false,
        }
    }
}

/// Why a replica could not start (`Distributor::start`).
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(transparent)]
    Store(#[from] StoreError),
    /// Ping TLS was configured but its files cannot be used: pinging without
    /// it would be refused by members (or, worse, accepted in plaintext).
    #[error("ping TLS: {0}")]
    Tls(#[from] TlsError),
    /// Settings the coordinator cannot run with (embedders; the daemon's
    /// configuration is checked before).
    #[error("invalid configuration: {0}")]
    Config(String),
    /// The pings' runtime could not be started (threads refused).
    #[error("cannot start the ping runtime: {0}")]
    PingRuntime(#[source] std::io::Error),
}

/// A TLS file that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("cannot read {what} {path:?}: {source}")]
    Read {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{what} {path:?} holds no PEM block")]
    NotPem { what: &'static str, path: PathBuf },
    #[error("a TLS certificate needs its key, and a key its certificate")]
    Unpaired,
    #[error("ping TLS needs a CA certificate to verify members (-ping-tls-ca)")]
    NoCa,
    #[error("TLS configuration rejected: {0}")]
    Rejected(String),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_is_listed_for_the_metrics() {
        let s = String::new;
        let redis = |e: redis::RedisError| StoreError::Redis { op: "x", source: e };
        let io = redis::RedisError::from(std::io::Error::other("gone"));
        let server = redis::RedisError::from((redis::ErrorKind::InvalidClientConfig, "x"));
        let errors = [
            StoreError::Timeout {
                op: "x",
                timeout: Duration::ZERO,
            },
            StoreError::WrongType {
                key: s(),
                expected: "hash",
                actual: s(),
            },
            StoreError::TooLong {
                container: "list",
                key: s(),
                what: "entries",
                limit: 1,
                setting: "-x",
            },
            StoreError::Reply {
                op: "x",
                detail: s(),
            },
            StoreError::InvalidState {
                key: s(),
                field: s(),
                value: s(),
                expected: s(),
            },
            StoreError::Fenced {
                op: "x",
                reason: s(),
            },
            StoreError::NotDurable {
                op: "x",
                acked: 0,
                wanted: 1,
                timeout: Duration::ZERO,
            },
            redis(io),
            redis(server),
        ];
        let mut kinds: Vec<&str> = errors.iter().map(StoreError::kind).collect();
        // NOPERM needs a server's reply to build; it is listed by hand.
        kinds.push("no_permission");
        kinds.sort_unstable();
        let mut listed = StoreError::KINDS;
        listed.sort_unstable();
        assert_eq!(kinds, listed);
    }
}
