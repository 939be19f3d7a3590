//! Daemon configuration: the settings table, typed values, and validation.
//!
//! Pure, except that files named by settings are read. [`SETTINGS`] is the
//! one table of settings: each declares its flag, environment variables,
//! default, help, value name and its [`Type`] with its bounds. `cli`
//! builds clap's flags from it and parses the command line into
//! [`RawConfig`]; [`resolve`] layers flag over environment over default, reads
//! every setting as its type, and checks the rules between settings, so an
//! invalid value fails at start with a message naming the flag, the variable
//! and the value. Names and defaults follow scientificideas/distributor so
//! that its deployments keep working unchanged.
//!
//! Every type has a [`Kind`], which decides how a value may appear in an error
//! or in `Debug` output: a secret never, a URL with its passwords replaced by
//! `***`. Every [`ConfigError`] is built through that.

use std::collections::BTreeMap;
use std::fmt::Display;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use crate::core::keys::{Keys, check_table_key};
use crate::core::table::Assignment;
use crate::edge::tls::{TlsError, TlsFiles};

/// How a setting's value is shown, and whether the flag needs a value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Shown as given.
    Text,
    /// `true` or `false`, shown as given; as a flag the value may be left out.
    Bool,
    /// Never shown: `***`.
    Secret,
    /// One or several comma-separated URLs (or `host:port`s), shown with the
    /// password of every `user:pass@` replaced by `***`.
    Url,
}

impl Kind {
    /// The value as it may appear in errors and logs.
    pub fn show(self, value: &str) -> String {
        match self {
            Kind::Text | Kind::Bool => value.to_string(),
            Kind::Secret => "***".to_string(),
            Kind::Url => redact_url(value),
        }
    }

    /// The parts of `value` that must never appear anywhere.
    fn secrets(self, value: &str) -> Vec<String> {
        match self {
            Kind::Text | Kind::Bool => Vec::new(),
            Kind::Secret => vec![value.to_string()],
            Kind::Url => {
                let mut secrets: Vec<String> = userinfo_spans(value)
                    .into_iter()
                    .map(|(_, hidden, _)| value[hidden].to_string())
                    .collect();
                // A malformed entry's tail (see [`redact_url`]), as given.
                secrets.extend(
                    value
                        .split(',')
                        .filter_map(|e| malformed_tail(e).map(|r| e[r].to_string())),
                );
                secrets
            }
        }
    }
}

/// One row of the table: its flag, the environment variables that may carry
/// it (first wins), its default (if any), its kind, the name of its value and
/// its help text. Rendered into `--help`; the README's table must match it (a
/// test checks).
#[derive(Debug)]
pub struct Setting {
    /// Its place in [`SETTINGS`].
    id: usize,
    pub flag: &'static str,
    pub env: &'static [&'static str],
    pub default: Option<&'static str>,
    pub kind: Kind,
    /// The value's name in `--help`.
    pub value_name: &'static str,
    pub help: &'static str,
}

/// A setting with its type: [`resolve`] reads it as a `T::Value`.
pub struct Typed<T> {
    setting: Setting,
    ty: T,
}

impl<T> std::ops::Deref for Typed<T> {
    type Target = Setting;
    fn deref(&self) -> &Setting {
        &self.setting
    }
}

/// A setting's type with its bounds: how its text becomes its value.
pub trait Type {
    type Value;
    /// How values are shown, and whether the flag needs one.
    const KIND: Kind = Kind::Text;
    /// The value of `text`, or why it is not one.
    fn parse(&self, text: &str) -> Result<Self::Value, String>;
    /// The value when nothing gives one: that of the empty text, unless [`Opt`].
    fn unset(&self) -> Result<Self::Value, String> {
        self.parse("")
    }
}

macro_rules! settings {
    ($($id:ident: $ty:ty = $parse:expr,
        $flag:literal $env:tt = $default:expr, $value:literal, $help:literal;)*) => {
        #[allow(non_camel_case_types, clippy::upper_case_acronyms)]
        enum Id { $($id),* }
        $(
            #[doc = concat!("`-", $flag, "`.")]
            pub static $id: Typed<$ty> = Typed {
                setting: Setting {
                    id: Id::$id as usize,
                    flag: $flag,
                    env: &$env,
                    default: $default,
                    kind: <$ty as Type>::KIND,
                    value_name: $value,
                    help: $help,
                },
                ty: $parse,
            };
        )*
        /// Every setting, in help order.
        pub static SETTINGS: &[&Setting] = &[$(&$id.setting),*];
    };
}

const NS: Duration = Duration::from_nanos(1);
const fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

settings! {
    SERVICES_NAMESPACES: List = List("services list key"), "services-namespaces" ["SERVICES_NAMESPACE", "SERVICES_NAMESPACES"] = Some("sys-robots-list,sys-parsers-lists"), "KEYS",
        "Comma-separated services list keys; each list is a group that splits all units";
    WORKUNITS_NAMESPACE: Key = Key, "workunits-namespace" ["WORKUNITS_NAMESPACE"] = Some("sys-channels"), "KEY",
        "Work units list key";
    DISTRIBUTION_NAMESPACE: TableKey = TableKey, "distribution-namespace" ["DISTRIBUTION_NAMESPACE"] = Some("sys-matching-table"), "KEY",
        "Matching table hash key; coordination keys share its slot";
    POLL_INTERVAL: Dur = Dur(ms(10)), "poll-interval" ["POLL_INTERVAL"] = Some("1000ms"), "DURATION",
        "How often the holder reads the lists, pings every member and updates the table (at least 10ms)";
    PING_TIMEOUT: Dur = Dur(ms(1)), "ping-timeout" ["PING_TIMEOUT"] = Some("1000ms"), "DURATION",
        "Deadline of one ping, connection included (at least 1ms)";
    REDIS_URL: Urls = Urls, "redis-url" ["REDIS_URL"] = Some("redis://127.0.0.1:6379"), "URL",
        "Redis URL (redis://[user:pass@]host[:port][/db], or rediss://); several comma-separated URLs are cluster seed nodes";
    REDIS_ADDRS: Opt<Urls> = Opt(Urls), "redis-addrs" ["REDIS_ADDRS"] = None, "HOST:PORT",
        "Go-style Redis host:port; overrides the host of --redis-url when given";
    REDIS_PASS: Secret = Secret, "redis-pass" ["REDIS_PASS", "REDIS_PASSWORD"] = None, "PASSWORD",
        "Redis password (prefer the environment to the command line)";
    REDIS_CLUSTER: Bool = Bool, "redis-cluster" ["REDIS_CLUSTER"] = Some("false"), "BOOL",
        "Redis Cluster mode with a single seed node (several nodes always mean cluster)";
    REDIS_PASSWORD_FILE: FileText = FileText, "redis-password-file" ["REDIS_PASSWORD_FILE"] = None, "FILE",
        "File holding the Redis password (a trailing newline is ignored)";
    REDIS_USER: Given = Given, "redis-user" ["REDIS_USER", "REDIS_USERNAME"] = None, "USER",
        "Redis ACL user name (with -redis-pass or -redis-password-file)";
    REDIS_TLS: Bool = Bool, "redis-tls" ["REDIS_TLS"] = Some("false"), "BOOL",
        "Go-compatible: use TLS to Redis (same as a rediss:// URL)";
    REDIS_TLS_CA: Files = Files, "redis-tls-ca" ["REDIS_TLS_CA"] = None, "FILES",
        "Comma-separated PEM CA files to verify Redis (default: system roots)";
    REDIS_ROOTCA_CERTS: Files = Files, "redis-rootca-certs" ["REDIS_ROOTCA_CERTS"] = None, "FILES",
        "Go-compatible alias of -redis-tls-ca";
    REDIS_TLS_CERT: File = File, "redis-tls-cert" ["REDIS_TLS_CERT"] = None, "FILE",
        "PEM client certificate for Redis (mTLS; needs -redis-tls-key)";
    REDIS_TLS_KEY: File = File, "redis-tls-key" ["REDIS_TLS_KEY"] = None, "FILE",
        "PEM client key for Redis (mTLS; needs -redis-tls-cert)";
    PING_TLS_CA: Files = Files, "ping-tls-ca" ["PING_TLS_CA"] = None, "FILE",
        "PEM CA that signs members' certificates; turns on TLS for pings";
    PING_TLS_CERT: File = File, "ping-tls-cert" ["PING_TLS_CERT"] = None, "FILE",
        "PEM client certificate for pings (mTLS; needs -ping-tls-key and -ping-tls-ca)";
    PING_TLS_KEY: File = File, "ping-tls-key" ["PING_TLS_KEY"] = None, "FILE",
        "PEM client key for pings (mTLS; needs -ping-tls-cert and -ping-tls-ca)";
    PING_TLS_DOMAIN: Given = Given, "ping-tls-domain" ["PING_TLS_DOMAIN"] = None, "NAME",
        "Name to verify in members' certificates instead of their address";
    FAILURE_THRESHOLD: Whole<u32> = Whole { min: 1, max: None }, "failure-threshold" ["FAILURE_THRESHOLD"] = Some("1"), "N",
        "Consecutive failed pings before a member loses its units";
    FORGET_AFTER: Opt<Dur> = Opt(Dur(NS)), "forget-after" ["FORGET_AFTER"] = None, "DURATION",
        "Remove a member from its services list after failing this long, once it owes no unit revoked from it (off if unset; at least -poll-interval)";
    LEASE_TTL: Dur = Dur(ms(10)), "lease-ttl" ["LEASE_TTL"] = Some("2s"), "DURATION",
        "Lease duration: a standby takes over at most this long after the holder dies (at least 10ms)";
    LEASE_RENEW_INTERVAL: Dur = Dur(ms(1)), "lease-renew-interval" ["LEASE_RENEW_INTERVAL"] = Some("500ms"), "DURATION",
        "How often the holder renews the lease (at least 1ms, < lease-renew-deadline)";
    LEASE_RENEW_DEADLINE: Dur = Dur(NS), "lease-renew-deadline" ["LEASE_RENEW_DEADLINE"] = Some("1500ms"), "DURATION",
        "The holder stops acting when it has not renewed for this long (< lease-ttl)";
    LEASE_RETRY_INTERVAL: Dur = Dur(ms(1)), "lease-retry-interval" ["LEASE_RETRY_INTERVAL"] = Some("500ms"), "DURATION",
        "Longest wait between a standby's acquisition attempts (at least 1ms)";
    CENSUS_INTERVAL: Dur = Dur(ms(100)), "census-interval" ["CENSUS_INTERVAL"] = Some("5s"), "DURATION",
        "Census interval; keep it well above the clock skew between replicas (at least 100ms)";
    REPLICA_ID: Given = Given, "replica-id" ["REPLICA_ID"] = None, "NAME",
        "This replica's name in status output (default: <hostname>-<pid>-<8 hex>)";
    KA_TIME: Dur = Dur(ms(1000)), "ka-time" ["KA_TIME"] = Some("10s"), "DURATION",
        "gRPC keepalive ping interval towards members (at least 1s: servers reject more frequent pings)";
    KA_TIMEOUT: Dur = Dur(NS), "ka-timeout" ["KA_TIMEOUT"] = Some("20s"), "DURATION",
        "gRPC keepalive timeout";
    KA_PERMIT_WITHOUT_STREAM: Bool = Bool, "ka-permit-without-stream" ["KA_PERMIT_WITHOUT_STREAM"] = Some("false"), "BOOL",
        "Send keepalive pings with no call in flight";
    HTTP_ADDR: HttpAddr = HttpAddr, "http-addr" ["HTTP_ADDR"] = Some("0.0.0.0:9090"), "IP:PORT|off",
        "Address of /metrics, /healthz, /readyz and /version; `off` disables it. The default moves to the next free port up to 9099 when 9090 is taken; an address given explicitly must be free";
    HTTP_UI: Bool = Bool, "http-ui" ["HTTP_UI"] = Some("false"), "BOOL",
        "Serve the read-only status page at / and its JSON API at /api/status, /api/members and /api/changes on the HTTP address (no secrets, no write actions)";
    PROM_PORT: Opt<Port> = Opt(Port), "prom-port" ["PROM_PORT"] = None, "PORT",
        "Go-compatible: serve the HTTP endpoints on 0.0.0.0:<port> (overrides -http-addr)";
    LOG_FORMAT: OneOf = OneOf(&["text", "json"]), "log-format" ["LOG_FORMAT"] = Some("text"), "text|json",
        "Log format: text or json";
    TRACES: OneOf = OneOf(&["otlp", "none"]), "traces" ["OTEL_TRACES_EXPORTER"] = Some("otlp"), "otlp|none",
        "Span export: otlp (when OTEL_EXPORTER_OTLP_ENDPOINT is set) or none";
    MAX_LIST_ENTRIES: Whole<usize> = Whole { min: 1, max: None }, "max-list-entries" ["MAX_LIST_ENTRIES"] = Some("2000000"), "N",
        "Longest services or work-units list read; a longer one skips the cycle with an error";
    MAX_LIST_BYTES: Bytes = Bytes(1 << 10), "max-list-bytes" ["MAX_LIST_BYTES"] = Some("64MiB"), "SIZE",
        "Largest list read, in bytes of Redis memory (MEMORY USAGE); a larger one skips the cycle with an error. Holder memory is about 11 MB + 212 B per unit + 5.5 bytes per list byte: 0.8 GB at the defaults";
    MASS_FAILURE_PERCENT: Percent = Percent, "mass-failure-percent" ["MASS_FAILURE_PERCENT"] = Some("50"), "PERCENT",
        "When more than this percent of a group's live members fail at once, the holder keeps their units until another replica or -mass-failure-confirm confirms it (100: off)";
    MASS_FAILURE_CONFIRM: Dur = Dur(NS), "mass-failure-confirm" ["MASS_FAILURE_CONFIRM"] = Some("10s"), "DURATION",
        "How long a mass failure that no other replica confirmed is held before the holder acts on it";
    HANDOFF_DELAY: Dur = Dur(Duration::ZERO), "handoff-delay" ["HANDOFF_DELAY"] = Some("10s"), "DURATION",
        "How long a member that does not acknowledge (one that only reads its row, as Go workers do) gets to stop a unit after the write that took the unit from its row, before another member gets it; 0: such a member's unit goes to the next member in that same write (members of the protocol still get their own wait)";
    ASSIGNMENT: AssignmentMode = AssignmentMode, "assignment" ["ASSIGNMENT"] = Some("ring"), "ring|sticky",
        "How units are split: ring (a function of the members and units, as the Go implementation does) or sticky (from the current table, moving the fewest units balance needs)";
    MAX_MOVES_PER_CYCLE: Whole<usize> = Whole { min: 0, max: None }, "max-moves-per-cycle" ["MAX_MOVES_PER_CYCLE"] = Some("0"), "N",
        "At most this many units are moving at once (revoked from a live owner, not yet granted to the next), in both modes; the rest follow as those moves complete. Units of failed or departed members are never held back. 0: no limit";
    REDIS_WAIT_REPLICAS: Whole<u32> = Whole { min: 0, max: Some(64) }, "redis-wait-replicas" ["REDIS_WAIT_REPLICAS"] = Some("0"), "N",
        "Redis replicas that must acknowledge a lease acquisition, renewal or table write (WAIT) before it counts";
    REDIS_WAIT_TIMEOUT: Dur = Dur(ms(1)), "redis-wait-timeout" ["REDIS_WAIT_TIMEOUT"] = Some("100ms"), "DURATION",
        "How long to wait for those acknowledgements (at least 1ms; with -redis-wait-replicas, shorter than -lease-renew-deadline minus -lease-renew-interval)";
    LOG: LogFilter = LogFilter, "log" ["LOG"] = Some("info"), "LEVEL",
        "Log level when RUST_LOG is unset: error, warn, info, debug, trace or off, or comma-separated [target=]level directives";
    CONFIG_TYPE: OneOf = OneOf(&["args", "env"]), "config-type" ["CONFIG_TYPE"] = Some("args"), "args|env",
        "Accepted for compatibility; flags and environment are always both read (flag wins)";
}

/// Declares types: `Name(bounds) => Value as Kind: |bounds, text| value`
/// (`as Kind` left out: [`Kind::Text`]).
macro_rules! types {
    ($($(#[$doc:meta])* $name:ident $(($($bound:ty),*))? => $value:ty $(as $kind:ident)?:
        |$this:pat, $s:ident| $parse:expr;)*) => {$(
        $(#[$doc])*
        pub struct $name $(($(pub $bound),*))?;
        impl Type for $name {
            type Value = $value;
            $(const KIND: Kind = Kind::$kind;)?
            fn parse(&self, $s: &str) -> Result<$value, String> {
                let $this = self;
                $parse
            }
        }
    )*};
}

types! {
    /// A Redis URL, or several comma-separated ones, shown with their
    /// passwords hidden; checked with the other Redis settings in [`resolve`].
    Urls => String as Url: |_, s| Ok(s.to_string());
    /// Text; empty is `None`.
    Given => Option<String>: |_, s| Ok((!s.is_empty()).then(|| s.to_string()));
    /// Text that is never shown; empty is `None`.
    Secret => Option<String> as Secret: |_, s| Given.parse(s);
    /// `true` or `false` (also `1`/`0`, `t`/`f`, `yes`/`no`).
    Bool => bool as Bool: |_, s| match s.to_ascii_lowercase().as_str() {
        "1" | "t" | "true" | "yes" => Ok(true),
        "0" | "f" | "false" | "no" => Ok(false),
        _ => Err("expected true or false".into()),
    };
    /// A Go-style duration (`500ms`, `1m30s`) of at least this.
    Dur(Duration) => Duration: |Dur(min), s| match parse_duration(s)? {
        d if d < *min => Err(format!("must be at least {min:?}")),
        d => Ok(d),
    };
    /// A whole percent from 0 to 100, `%` optional.
    Percent => u32: |_, s| Whole { min: 0, max: Some(100) }.parse(s.trim_end_matches('%'));
    /// A size of at least this many bytes, such as `256MiB` ([`parse_bytes`]).
    Bytes(u64) => u64: |Bytes(min), s| parse_bytes(s)
        .filter(|n| n >= min)
        .ok_or_else(|| format!("expected a size >= {}KiB, such as 256MiB", min >> 10));
    /// One of these words.
    OneOf(&'static [&'static str]) => &'static str: |OneOf(words), s| words
        .iter()
        .copied()
        .find(|w| *w == s)
        .ok_or_else(|| format!("expected {}", words.join(" or ")));
    /// `-assignment`: `ring` or `sticky`.
    AssignmentMode => Assignment: |_, s| Assignment::parse(s)
        .ok_or_else(|| format!("expected {}", Assignment::NAMES.join(" or ")));
    /// A TCP port number.
    Port => u16: |_, s| s.parse().map_err(|_| "expected a port number".into());
    /// `ip:port`, or `off` (or empty) for none.
    HttpAddr => Option<SocketAddr>: |_, s| match s {
        "off" | "" => Ok(None),
        _ => s.parse().map(Some).map_err(|_| "expected ip:port or off".into()),
    };
    /// A log level, or `[target=]level` directives ([`check_log_filter`]).
    LogFilter => String: |_, s| check_log_filter(s).map(|()| s.to_string());
    /// A comma-separated list of at least one of these (blank entries dropped).
    List(&'static str) => Vec<String>: |List(what), s| Some(split_list(s))
        .filter(|list| !list.is_empty())
        .ok_or_else(|| format!("needs at least one {what}"));
    /// A Redis key that is not empty.
    Key => String: |_, s| match s {
        "" => Err("must not be empty".into()),
        _ => Ok(s.to_string()),
    };
    /// The matching table's Redis key ([`check_table_key`]).
    TableKey => String: |_, s| check_table_key(s).map(|()| s.to_string()).map_err(Into::into);
    /// A file path; blank is `None`.
    File => Option<PathBuf>: |_, s| Ok((!s.trim().is_empty()).then(|| s.into()));
    /// Comma-separated file paths.
    Files => Vec<PathBuf>: |_, s| Ok(split_list(s).into_iter().map(Into::into).collect());
    /// The text of the file named, a trailing newline dropped; `None` when
    /// none is named.
    FileText => Option<String>: |_, path| match path {
        "" => Ok(None),
        _ => std::fs::read_to_string(path)
            .map(|text| Some(text.trim_end_matches(['\r', '\n']).to_string()))
            .map_err(|e| format!("cannot read it: {e}")),
    };
}

/// `None` when unset; when given, a valid `T`.
pub struct Opt<T>(pub T);

impl<T: Type> Type for Opt<T> {
    type Value = Option<T::Value>;
    const KIND: Kind = T::KIND;
    fn parse(&self, s: &str) -> Result<Self::Value, String> {
        self.0.parse(s).map(Some)
    }
    fn unset(&self) -> Result<Self::Value, String> {
        Ok(None)
    }
}

/// A whole number from `min` to `max` (unbounded when `None`).
pub struct Whole<N> {
    pub min: N,
    pub max: Option<N>,
}

impl<N: FromStr + PartialOrd + Display + Copy> Type for Whole<N> {
    type Value = N;
    fn parse(&self, s: &str) -> Result<N, String> {
        let Whole { min, max } = *self;
        let within = |n: &N| *n >= min && max.is_none_or(|max| *n <= max);
        s.parse().ok().filter(within).ok_or_else(|| match max {
            None => format!("expected a whole number >= {min}"),
            Some(max) => format!("expected a whole number from {min} to {max}"),
        })
    }
}

/// The entries of a comma-separated list, trimmed, blank ones dropped.
fn split_list(s: &str) -> Vec<String> {
    s.split(',')
        .map(str::trim)
        .filter(|x| !x.is_empty())
        .map(str::to_string)
        .collect()
}

/// Raw values as given on the command line (absent = not given). `Debug`
/// shows each value as its setting's [`Kind`] allows.
#[derive(Clone, Default)]
pub struct RawConfig(BTreeMap<usize, String>);

impl RawConfig {
    /// With `value` given for `setting`.
    pub fn with(mut self, setting: &Setting, value: impl Into<String>) -> RawConfig {
        self.0.insert(setting.id, value.into());
        self
    }

    fn get(&self, setting: &Setting) -> Option<&str> {
        self.0.get(&setting.id).map(String::as_str)
    }
}

impl std::fmt::Debug for RawConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let shown = SETTINGS
            .iter()
            .filter_map(|s| Some((s.flag, s.kind.show(self.get(s)?))));
        f.debug_map().entries(shown).finish()
    }
}

pub use crate::core::lease::LeaseTiming;

pub use crate::edge::grpc::Keepalive;

/// Where [`Config::http_addr`] came from: only the built-in default may move
/// to another port when it is taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HttpAddrOrigin {
    /// The built-in `0.0.0.0:9090`: several replicas on one host must not
    /// kill each other, so the server moves to the next free port (to 9099).
    Default,
    /// `-http-addr` / `HTTP_ADDR`: must be free.
    HttpAddr,
    /// `-prom-port` / `PROM_PORT`: must be free.
    PromPort,
}

impl HttpAddrOrigin {
    /// The flag to name when the address cannot be used.
    pub fn flag(self) -> &'static str {
        match self {
            HttpAddrOrigin::Default | HttpAddrOrigin::HttpAddr => "-http-addr",
            HttpAddrOrigin::PromPort => "-prom-port",
        }
    }
}

/// A validated daemon configuration. `Debug` shows the Redis URL redacted.
#[derive(Clone, PartialEq, Eq)]
pub struct Config {
    pub redis_url: String,
    pub services_namespaces: Vec<String>,
    pub workunits_namespace: String,
    pub distribution_namespace: String,
    pub poll_interval: Duration,
    pub ping_timeout: Duration,
    pub failure_threshold: u32,
    pub forget_after: Option<Duration>,
    pub lease: LeaseTiming,
    pub census_interval: Duration,
    pub replica_id: String,
    pub keepalive: Keepalive,
    pub log: String,
    /// Where the operations HTTP server listens; `None` when disabled.
    pub http_addr: Option<std::net::SocketAddr>,
    /// Whether `http_addr` is the built-in default (which may move) or given.
    pub http_addr_origin: HttpAddrOrigin,
    /// Serve the status page and its JSON API (`-http-ui`).
    pub http_ui: bool,
    pub log_json: bool,
    /// Export spans over OTLP when the standard environment names an endpoint.
    pub traces: bool,
    /// Bound on every list read, so a runaway producer cannot make a cycle unbounded.
    pub max_list_entries: usize,
    /// Bound on the bytes of every list read (Redis' `MEMORY USAGE`).
    pub max_list_bytes: u64,
    /// A group in which more than this percent of the live members fail in one
    /// cycle is a mass failure: held until confirmed (100 turns the guard off).
    pub mass_failure_percent: u32,
    /// How long a lone holder holds an unconfirmed mass failure.
    pub mass_failure_confirm: Duration,
    /// How long a member that does not acknowledge gets to stop a revoked unit.
    pub handoff_delay: Duration,
    /// How the table is solved: ring or sticky.
    pub assignment: Assignment,
    /// At most this many moves per solve (0: no limit).
    pub max_moves_per_cycle: usize,
    /// Redis replicas that must acknowledge (WAIT) lease and table writes.
    pub redis_wait_replicas: u32,
    pub redis_wait_timeout: Duration,
    /// Custom CA / client certificate for `rediss://`.
    pub redis_tls: TlsFiles,
    /// TLS for pings, when configured.
    pub ping_tls: Option<PingTls>,
    /// Redis Cluster mode (several seed URLs in `redis_url`, or forced).
    pub redis_cluster: bool,
}

impl std::fmt::Debug for Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Destructured so that a new field cannot be forgotten here.
        let Config {
            redis_url: _,
            services_namespaces,
            workunits_namespace,
            distribution_namespace,
            poll_interval,
            ping_timeout,
            failure_threshold,
            forget_after,
            lease,
            census_interval,
            replica_id,
            keepalive,
            log,
            http_addr,
            http_addr_origin,
            http_ui,
            log_json,
            traces,
            max_list_entries,
            max_list_bytes,
            mass_failure_percent,
            mass_failure_confirm,
            handoff_delay,
            assignment,
            max_moves_per_cycle,
            redis_wait_replicas,
            redis_wait_timeout,
            redis_tls,
            ping_tls,
            redis_cluster,
        } = self;
        f.debug_struct("Config")
            .field("redis_url", &self.redis_url_redacted())
            .field("services_namespaces", services_namespaces)
            .field("workunits_namespace", workunits_namespace)
            .field("distribution_namespace", distribution_namespace)
            .field("poll_interval", poll_interval)
            .field("ping_timeout", ping_timeout)
            .field("failure_threshold", failure_threshold)
            .field("forget_after", forget_after)
            .field("lease", lease)
            .field("census_interval", census_interval)
            .field("replica_id", replica_id)
            .field("keepalive", keepalive)
            .field("log", log)
            .field("http_addr", http_addr)
            .field("http_addr_origin", http_addr_origin)
            .field("http_ui", http_ui)
            .field("log_json", log_json)
            .field("traces", traces)
            .field("max_list_entries", max_list_entries)
            .field("max_list_bytes", max_list_bytes)
            .field("mass_failure_percent", mass_failure_percent)
            .field("mass_failure_confirm", mass_failure_confirm)
            .field("handoff_delay", handoff_delay)
            .field("assignment", assignment)
            .field("max_moves_per_cycle", max_moves_per_cycle)
            .field("redis_wait_replicas", redis_wait_replicas)
            .field("redis_wait_timeout", redis_wait_timeout)
            .field("redis_tls", redis_tls)
            .field("ping_tls", ping_tls)
            .field("redis_cluster", redis_cluster)
            .finish()
    }
}

/// TLS for the holder's pings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PingTls {
    pub files: TlsFiles,
    pub domain: Option<String>,
}
impl Config {
    /// The defaults, for embedders and tests; the daemon goes through [`resolve`].
    pub fn new(
        redis_url: &str,
        services_namespaces: &[&str],
        workunits_namespace: &str,
        distribution_namespace: &str,
    ) -> Config {
        let mut c = resolve(&RawConfig::default(), &|_| None).expect("defaults are valid");
        c.redis_url = redis_url.to_string();
        c.services_namespaces = services_namespaces.iter().map(|s| s.to_string()).collect();
        c.workunits_namespace = workunits_namespace.to_string();
        c.distribution_namespace = distribution_namespace.to_string();
        c
    }

    /// The Redis URL with any password replaced, for logs and status output.
    pub fn redis_url_redacted(&self) -> String {
        redact_url(&self.redis_url)
    }

    /// How the store reaches Redis.
    pub fn redis_options(&self) -> crate::edge::redis::RedisOptions {
        crate::edge::redis::RedisOptions {
            cluster: self.redis_cluster,
            tls: self.redis_tls.clone(),
            wait: (self.redis_wait_replicas > 0).then_some(crate::edge::redis::WaitFor {
                replicas: self.redis_wait_replicas,
                timeout: self.redis_wait_timeout,
            }),
            ..crate::edge::redis::RedisOptions::from_urls(&self.redis_url)
        }
    }
}

/// A configuration error, naming the setting and the offending value (shown
/// as the setting's [`Kind`] allows: never a secret, never a password).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid -{flag} (env {env}) value {value:?}: {reason}")]
pub struct ConfigError {
    pub flag: &'static str,
    pub env: &'static str,
    pub value: String,
    pub reason: String,
}

impl ConfigError {
    /// The error for `value` of `setting`: the value is redacted as its kind
    /// says, and any secret part of it is scrubbed from `reason` as well.
    pub fn new(setting: &'static Setting, value: &str, reason: impl Into<String>) -> ConfigError {
        let mut reason = reason.into();
        for secret in setting.kind.secrets(value) {
            if !secret.is_empty() {
                reason = reason.replace(&secret, "***");
            }
        }
        ConfigError {
            flag: setting.flag,
            env: setting.env[0],
            value: setting.kind.show(value),
            reason,
        }
    }
}

/// Parses a Go-style duration: `500ms`, `2s`, `1m30s`, `1.5h`, `250us`, `0`.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    if s == "0" {
        return Ok(Duration::ZERO);
    }
    if s.is_empty() {
        return Err("empty duration".into());
    }
    let mut total = 0f64;
    let mut rest = s;
    while !rest.is_empty() {
        let num_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        if num_len == 0 {
            return Err(format!(
                "expected a number at {rest:?} (example: 500ms, 2s, 1m30s)"
            ));
        }
        let number: f64 = rest[..num_len]
            .parse()
            .map_err(|_| format!("bad number {:?}", &rest[..num_len]))?;
        rest = &rest[num_len..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let nanos_per = match &rest[..unit_len] {
            "ns" => 1.0,
            "us" | "µs" => 1e3,
            "ms" => 1e6,
            "s" => 1e9,
            "m" => 60e9,
            "h" => 3600e9,
            "" => return Err("missing unit (ns, us, ms, s, m, h)".into()),
            other => return Err(format!("unknown unit {other:?} (ns, us, ms, s, m, h)")),
        };
        rest = &rest[unit_len..];
        total += number * nanos_per;
    }
    if !total.is_finite() || total > u64::MAX as f64 {
        return Err("duration too large".into());
    }
    Ok(Duration::from_nanos(total.round() as u64))
}

/// Parses a size: a whole number of bytes, or with a unit `B`, `KiB`, `MiB`,
/// `GiB` (also `KB`, `MB`, `GB`, taken as powers of 1024).
pub fn parse_bytes(s: &str) -> Option<u64> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (number, unit) = s.split_at(split);
    let n: u64 = number.parse().ok()?;
    let scale: u64 = match unit.trim() {
        "" | "B" => 1,
        "KiB" | "KB" | "K" => 1 << 10,
        "MiB" | "MB" | "M" => 1 << 20,
        "GiB" | "GB" | "G" => 1 << 30,
        _ => return None,
    };
    n.checked_mul(scale)
}

const LEVELS: [&str; 6] = ["error", "warn", "info", "debug", "trace", "off"];

/// Checks a `-log` value: a level, or comma-separated `[target=]level`
/// directives (`info,distributor=debug`). Anything else would make the log
/// filter silently drop every line.
pub fn check_log_filter(s: &str) -> Result<(), String> {
    let expected = "expected error, warn, info, debug, trace or off, or comma-separated [target=]level directives such as info,distributor=debug";
    if s.trim().is_empty() {
        return Err(expected.into());
    }
    for directive in s.split(',').map(str::trim).filter(|d| !d.is_empty()) {
        let (target, level) = match directive.rsplit_once('=') {
            Some((target, level)) => (Some(target.trim()), level.trim()),
            None => (None, directive),
        };
        if !LEVELS.iter().any(|l| l.eq_ignore_ascii_case(level)) {
            return Err(format!("unknown level {level:?}; {expected}"));
        }
        if let Some(target) = target {
            let ok = !target.is_empty()
                && target
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | ':' | '-' | '.'));
            if !ok {
                return Err(format!("bad target {target:?}; {expected}"));
            }
        }
    }
    Ok(())
}

/// A userinfo's user, its hidden password and the `@` that ends it.
type Span = (std::ops::Range<usize>, std::ops::Range<usize>, usize);

/// Where the userinfo of every `user:pass@` in `s` lies: for each, the byte
/// ranges of the user (kept), of what is hidden (the password, or the whole
/// userinfo when it has no `:`), and the index of its `@`.
///
/// Conservative on malformed input: a userinfo runs back from its `@` to the
/// `redis://` or `rediss://` of the last entry since the previous `@` that has
/// one (to the start of an entry with another scheme), else to the first `,`
/// since the previous `@`, else to the start. An `@` with no new entry since
/// the previous one extends that userinfo, and so does one after an empty
/// password or right after a `,`. So a password holding `@`, `/`, `,` or
/// `://` is never shown whole; only one holding `,redis://` cannot be told
/// from a list of URLs.
fn userinfo_spans(s: &str) -> Vec<Span> {
    let mut spans: Vec<Span> = Vec::new();
    let mut start = 0;
    while let Some(at) = s[start..].find('@').map(|i| start + i) {
        let range = &s[start..at];
        // The last entry of the range that starts with a scheme: its userinfo
        // starts after the first "://" (a password may hold ',' or "://").
        let mut info_start = None;
        let mut offset = start;
        for entry in range.split(',') {
            let trimmed = entry.trim_start();
            let lead = entry.len() - trimmed.len();
            if let Some(i) = trimmed.find("://")
                && is_scheme(&trimmed[..i])
            {
                // Past a scheme Redis does not take, a `user:` may be the
                // start of a password (`u://pw@h` from `u:` + `//pw`).
                let known = matches!(&trimmed[..i], "redis" | "rediss");
                info_start = Some(offset + lead + if known { i + 3 } else { 0 });
            }
            offset += entry.len() + 1;
        }
        // A userinfo with an empty password is not ended by an '@' that
        // another follows without a new scheme: the password starts with
        // '@' (and may hold ',').
        // Nor does a ',' right before this '@' start an entry: the password
        // holds ",@".
        let previous_empty = spans
            .last()
            .is_some_and(|(_, hidden, _): &Span| hidden.is_empty());
        let no_entry = range
            .rsplit(',')
            .next()
            .is_some_and(|e| e.trim().is_empty());
        if let (None, false, Some(last)) = (
            info_start,
            range.contains(',') && !previous_empty && !no_entry,
            spans.last_mut(),
        ) {
            // No new entry since the previous '@': the password holds an '@'
            // (as the URL standard reads it, the userinfo ends at the last one).
            let (_, hidden, last_at) = last;
            hidden.end = at;
            *last_at = at;
            start = at + 1;
            continue;
        }
        // Without a scheme: the previous entry's host ends at the first ','
        // (a host has none; a password may).
        let info_start = info_start
            .or_else(|| (start > 0).then(|| range.find(',').map(|i| start + i + 1))?)
            .unwrap_or(start);
        let info = &s[info_start..at];
        match info.find(':') {
            Some(colon) => spans.push((
                info_start..info_start + colon,
                info_start + colon + 1..at,
                at,
            )),
            None => spans.push((info_start..info_start, info_start..at, at)),
        }
        start = at + 1;
    }
    spans
}

fn is_scheme(s: &str) -> bool {
    s.starts_with(|c: char| c.is_ascii_alphabetic())
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
}

/// Replaces the password of every `user:pass@` in a URL, a comma-separated
/// list of URLs or a scheme-less `user:pass@host:port` with `***` (a userinfo
/// without `:` is replaced whole). An entry of the list that is neither a
/// Redis URL nor a `host:port` (after that) shows nothing past its first `:`
/// (after its `redis://`): it may be a password typed where a URL belongs
/// (`redis://h:1,garbage:Sup3rSecret`).
pub fn redact_url(url: &str) -> String {
    let mut out = String::new();
    let mut from = 0;
    for (user, hidden, at) in userinfo_spans(url) {
        out.push_str(&url[from..user.end]);
        if hidden.start > user.end {
            out.push(':');
        }
        out.push_str("***");
        from = at;
    }
    out.push_str(&url[from..]);
    // Every password is `***` now, so a ',' left separates entries.
    out.split(',')
        .map(|entry| match malformed_tail(entry) {
            Some(tail) => format!("{}***", &entry[..tail.start]),
            None => entry.to_string(),
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// Where the part of a URL-list entry that may hold a secret starts and ends,
/// when the entry is malformed: everything after its first `:` after a
/// `redis://` or `rediss://` (all after that when there is none), after its
/// first `:` otherwise (a password may start with `//`), or all of a bare
/// word. `None` for a well-formed entry and one with a userinfo (`@`: its
/// password is what [`userinfo_spans`] finds).
fn malformed_tail(entry: &str) -> Option<std::ops::Range<usize>> {
    let trimmed = entry.trim();
    if trimmed.is_empty()
        || trimmed.contains('@')
        || check_redis_url(trimmed, true).is_ok()
        || check_host_port(trimmed, true).is_ok()
    {
        return None;
    }
    let scheme = entry
        .find("://")
        .filter(|&i| matches!(entry[..i].trim_start(), "redis" | "rediss"));
    let after_scheme = scheme.map_or(0, |i| i + 3);
    match entry[after_scheme..].find(':') {
        Some(colon) => Some(after_scheme + colon + 1..entry.len()),
        // A bare word may be a password pasted after a ','.
        None if scheme.is_none() => Some(entry.len() - entry.trim_start().len()..entry.len()),
        // A password may itself begin with `//` (`garbage://pw`): all after
        // the scheme of a malformed entry may be secret.
        None => Some(after_scheme..entry.len()).filter(|r| !r.is_empty()),
    }
}

/// Percent-encodes a password for use in a Redis URL.
fn encode_userinfo(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Checks `host[:port]` (`[v6]` too). Reasons never quote the input, which may
/// hold a password when the URL is malformed.
fn check_host_port(hp: &str, port_required: bool) -> Result<(), String> {
    let (host, port) = if let Some(v6) = hp.strip_prefix('[') {
        let (addr, after) = v6
            .split_once(']')
            .ok_or("an IPv6 host needs its closing ]")?;
        if addr.parse::<std::net::Ipv6Addr>().is_err() {
            return Err("the host in [] is not an IPv6 address".into());
        }
        match after {
            "" => (addr, None),
            p => (
                addr,
                Some(
                    p.strip_prefix(':')
                        .ok_or("expected :port after the IPv6 host")?,
                ),
            ),
        }
    } else {
        match hp.split_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (hp, None),
        }
    };
    if host.is_empty() {
        return Err("the host is missing".into());
    }
    if host.contains(|c: char| c.is_whitespace() || matches!(c, '@' | '/' | '?' | '#' | ',')) {
        return Err("the host has characters a host name cannot have".into());
    }
    match port {
        None if port_required => Err("the port is missing".into()),
        None => Ok(()),
        Some(p) => match p.parse::<u16>() {
            Ok(n) if n >= 1 && p.bytes().all(|b| b.is_ascii_digit()) => Ok(()),
            _ => Err("the port must be a number from 1 to 65535".into()),
        },
    }
}

/// Checks one Redis URL as redis-rs reads it: scheme `redis` or `rediss`,
/// optional userinfo, a host (unless `-redis-addrs` replaces it), a port from
/// 1 to 65535 if given, an optional `/db` number, and a query string. Reasons
/// never quote the URL.
fn check_redis_url(url: &str, host_required: bool) -> Result<(), String> {
    let form = "expected redis://[user:pass@]host[:port][/db] or rediss://...";
    let Some((scheme, rest)) = url.split_once("://") else {
        return Err(form.into());
    };
    if scheme != "redis" && scheme != "rediss" {
        return Err(format!("the scheme must be redis or rediss; {form}"));
    }
    // As the URL standard (and so redis-rs) reads it: the authority ends at the
    // first '/', '?' or '#', and its userinfo at the last '@' in it.
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    if host_required {
        check_host_port(host_port, false).map_err(|e| format!("{e}; {form}"))?;
    }
    let path = &tail[..tail.find(['?', '#']).unwrap_or(tail.len())];
    let db = path.trim_matches('/');
    if !db.is_empty() && (db.parse::<u32>().is_err() || !db.bytes().all(|b| b.is_ascii_digit())) {
        return Err(format!("the database must be a whole number; {form}"));
    }
    if host_required {
        // What is left (query parameters, a fragment, percent-encoding) is
        // redis-rs' own business: ask it, so that a URL that passes here
        // also opens. Its messages never quote the URL.
        redis::IntoConnectionInfo::into_connection_info(url)
            .map_err(|e| format!("redis cannot use it: {e}"))?;
    }
    Ok(())
}

/// Where a setting's text comes from: its flag, else the first of its
/// environment variables that is set, else its default.
struct Layers<'a> {
    raw: &'a RawConfig,
    env: &'a dyn Fn(&str) -> Option<String>,
}

impl Layers<'_> {
    fn text(&self, s: &Setting) -> Option<String> {
        let env = || s.env.iter().find_map(|e| (self.env)(e));
        let flag = self.raw.get(s).map(str::to_string);
        flag.or_else(env).or_else(|| s.default.map(str::to_string))
    }

    /// Given on the command line or in the environment (not the default).
    fn given(&self, s: &Setting) -> bool {
        self.raw.get(s).is_some() || s.env.iter().any(|e| (self.env)(e).is_some())
    }

    /// The value of `s` as its type reads it, or the error naming it.
    fn get<T: Type>(&self, s: &'static Typed<T>) -> Result<T::Value, ConfigError> {
        match self.text(s) {
            Some(text) => s.ty.parse(&text).map_err(|e| ConfigError::new(s, &text, e)),
            None => s.ty.unset().map_err(|e| ConfigError::new(s, "", e)),
        }
    }

    /// The error on the value that `s` has.
    fn invalid(&self, s: &'static Setting, reason: impl Into<String>) -> ConfigError {
        ConfigError::new(s, &self.text(s).unwrap_or_default(), reason)
    }

    /// A rule: when it does not hold, the error on the value of `s`.
    fn rule(
        &self,
        holds: bool,
        s: &'static Setting,
        reason: impl FnOnce() -> String,
    ) -> Result<(), ConfigError> {
        if holds {
            Ok(())
        } else {
            Err(self.invalid(s, reason()))
        }
    }
}

/// Layers flag over environment over default, reads every setting as its
/// type, then checks the rules between settings.
pub fn resolve(
    raw: &RawConfig,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Config, ConfigError> {
    let l = Layers { raw, env };
    let services_namespaces = l.get(&SERVICES_NAMESPACES)?;
    let workunits_namespace = l.get(&WORKUNITS_NAMESPACE)?;
    let distribution_namespace = l.get(&DISTRIBUTION_NAMESPACE)?;
    check_keys(
        &l,
        &services_namespaces,
        &workunits_namespace,
        &distribution_namespace,
    )?;

    let poll_interval = l.get(&POLL_INTERVAL)?;
    let ping_timeout = l.get(&PING_TIMEOUT)?;
    let failure_threshold = l.get(&FAILURE_THRESHOLD)?;
    let forget_after = l.get(&FORGET_AFTER)?;
    l.rule(
        forget_after.is_none_or(|d| d >= poll_interval),
        &FORGET_AFTER,
        || format!("must be at least -poll-interval ({poll_interval:?})"),
    )?;

    let lease = LeaseTiming {
        ttl: l.get(&LEASE_TTL)?,
        renew_interval: l.get(&LEASE_RENEW_INTERVAL)?,
        renew_deadline: l.get(&LEASE_RENEW_DEADLINE)?,
        retry_interval: l.get(&LEASE_RETRY_INTERVAL)?,
    };
    l.rule(lease.renew_deadline < lease.ttl, &LEASE_RENEW_DEADLINE, || {
        format!(
            "must be shorter than -lease-ttl ({:?}) so the holder steps down before its lease can expire",
            lease.ttl
        )
    })?;
    l.rule(
        lease.renew_interval < lease.renew_deadline,
        &LEASE_RENEW_INTERVAL,
        || {
            format!(
                "must be shorter than -lease-renew-deadline ({:?}) so a renewal can be retried",
                lease.renew_deadline
            )
        },
    )?;
    let census_interval = l.get(&CENSUS_INTERVAL)?;

    let urls = redis_urls(&l)?;
    let redis_cluster = l.get(&REDIS_CLUSTER)? || urls.len() > 1;
    let redis_tls = redis_tls(&l, &urls)?;
    let ping_tls = ping_tls(&l)?;
    let keepalive = Keepalive {
        interval: l.get(&KA_TIME)?,
        timeout: l.get(&KA_TIMEOUT)?,
        while_idle: l.get(&KA_PERMIT_WITHOUT_STREAM)?,
    };
    let replica_id = l
        .get(&REPLICA_ID)?
        .unwrap_or_else(crate::edge::redis::default_replica_id);
    l.get(&CONFIG_TYPE)?;

    // Go's -prom-port wins; only the built-in default address may move.
    let (http_addr, http_addr_origin) = match l.get(&PROM_PORT)? {
        Some(port) => (
            Some(SocketAddr::from(([0, 0, 0, 0], port))),
            HttpAddrOrigin::PromPort,
        ),
        None => match l.get(&HTTP_ADDR)? {
            Some(addr) if !l.given(&HTTP_ADDR) => (Some(addr), HttpAddrOrigin::Default),
            addr => (addr, HttpAddrOrigin::HttpAddr),
        },
    };
    // A WAIT must fit in a renewal's budget: what is left of the deadline
    // after the renewal interval.
    let budget = lease.renew_deadline - lease.renew_interval;
    let config = Config {
        redis_url: urls.join(","),
        services_namespaces,
        workunits_namespace,
        distribution_namespace,
        poll_interval,
        ping_timeout,
        failure_threshold,
        forget_after,
        lease,
        census_interval,
        replica_id,
        keepalive,
        http_addr,
        http_addr_origin,
        http_ui: l.get(&HTTP_UI)?,
        log: l.get(&LOG)?,
        log_json: l.get(&LOG_FORMAT)? == "json",
        traces: l.get(&TRACES)? == "otlp",
        max_list_entries: l.get(&MAX_LIST_ENTRIES)?,
        max_list_bytes: l.get(&MAX_LIST_BYTES)?,
        mass_failure_percent: l.get(&MASS_FAILURE_PERCENT)?,
        mass_failure_confirm: l.get(&MASS_FAILURE_CONFIRM)?,
        handoff_delay: l.get(&HANDOFF_DELAY)?,
        assignment: l.get(&ASSIGNMENT)?,
        max_moves_per_cycle: l.get(&MAX_MOVES_PER_CYCLE)?,
        redis_wait_replicas: l.get(&REDIS_WAIT_REPLICAS)?,
        redis_wait_timeout: l.get(&REDIS_WAIT_TIMEOUT)?,
        redis_tls,
        ping_tls,
        redis_cluster,
    };
    l.rule(
        config.redis_wait_replicas == 0 || config.redis_wait_timeout < budget,
        &REDIS_WAIT_TIMEOUT,
        || format!(
            "must be shorter than -lease-renew-deadline minus -lease-renew-interval ({budget:?}) so that a WAIT fits in a renewal"
        ),
    )?;
    Ok(config)
}

/// The table key differs from the list keys, no list key is one of the
/// table's coordination keys, and the work units key is no services key.
fn check_keys(
    l: &Layers,
    services: &[String],
    units: &String,
    table: &str,
) -> Result<(), ConfigError> {
    if let Some(key) = services.iter().chain([units]).find(|k| *k == table) {
        let reason = "must differ from the services and work units keys";
        return Err(ConfigError::new(&DISTRIBUTION_NAMESPACE, key, reason));
    }
    let keys = Keys::new(table);
    let lists = services
        .iter()
        .map(|k| (&SERVICES_NAMESPACES.setting, k))
        .chain([(&WORKUNITS_NAMESPACE.setting, units)]);
    for (s, key) in lists {
        if keys.is_reserved(key) {
            let reason = format!(
                "is reserved for the coordination keys of -distribution-namespace {table:?}"
            );
            return Err(ConfigError::new(s, key, reason));
        }
    }
    l.rule(!services.contains(units), &SERVICES_NAMESPACES, || {
        format!("must not contain the work units key {units:?} (-workunits-namespace)")
    })
}

/// The Redis URLs: `-redis-url` (one, or seed nodes of a Redis Cluster) with
/// its host replaced by each `-redis-addrs` entry, the user and password of
/// `-redis-user` and `-redis-pass` or `-redis-password-file` (so it never has
/// to sit on a command line) over the URL's own, and `rediss://` with
/// `-redis-tls`.
fn redis_urls(l: &Layers) -> Result<Vec<String>, ConfigError> {
    let list = l.get(&REDIS_URL)?;
    let mut urls = split_list(&list);
    if urls.is_empty() {
        return Err(ConfigError::new(
            &REDIS_URL,
            "",
            "expected redis://host:port",
        ));
    }
    let addrs = l.get(&REDIS_ADDRS)?;
    for url in &urls {
        // -redis-addrs replaces the host, so only the rest of the URL counts then.
        check_redis_url(url, addrs.is_none())
            .map_err(|e| ConfigError::new(&REDIS_URL, &entry(&list, url), e))?;
    }
    if let Some(addrs) = addrs {
        let expected = "expected host:port[,host:port...]";
        let hosts = split_list(&addrs);
        if hosts.is_empty() {
            return Err(l.invalid(&REDIS_ADDRS, expected));
        }
        for h in &hosts {
            check_host_port(h, true).map_err(|e| {
                ConfigError::new(&REDIS_ADDRS, &entry(&addrs, h), format!("{e}; {expected}"))
            })?;
        }
        // Only the host changes: scheme (TLS), user, password and db stay.
        let (scheme, rest) = urls[0].split_once("://").expect("checked above");
        let (auth, host_and_db) = match rest.rsplit_once('@') {
            Some((a, h)) => (format!("{a}@"), h),
            None => (String::new(), rest),
        };
        let db = host_and_db.find('/').map_or("", |i| &host_and_db[i..]);
        urls = hosts
            .iter()
            .map(|h| format!("{scheme}://{auth}{h}{db}"))
            .collect();
        for url in &urls {
            check_redis_url(url, true).map_err(|e| ConfigError::new(&REDIS_ADDRS, url, e))?;
        }
    }
    let file_pass = l.get(&REDIS_PASSWORD_FILE)?;
    let pass = l.get(&REDIS_PASS)?.or(file_pass);
    let user = l.get(&REDIS_USER)?;
    let force_tls = l.get(&REDIS_TLS)?;
    for url in &mut urls {
        if pass.is_some() || user.is_some() {
            let (scheme, rest) = url.split_once("://").expect("checked above");
            let (auth, host) = rest.rsplit_once('@').unwrap_or(("", rest));
            let (url_user, url_pass) = auth.split_once(':').unwrap_or((auth, ""));
            let user = user
                .as_deref()
                .map_or_else(|| url_user.to_string(), encode_userinfo);
            let pass = pass
                .as_deref()
                .map_or_else(|| url_pass.to_string(), encode_userinfo);
            *url = format!("{scheme}://{user}:{pass}@{host}");
        }
        if force_tls && url.starts_with("redis://") {
            *url = url.replacen("redis://", "rediss://", 1);
        }
    }
    Ok(urls)
}

/// An entry of a list for an error, unless a password holds a ',' (then the
/// entry would show a piece of it): then the whole list, redacted.
fn entry(list: &str, entry: &str) -> String {
    if Kind::Url.secrets(list).iter().any(|p| p.contains(',')) {
        list.to_string()
    } else {
        entry.to_string()
    }
}

/// Our own CA and a client certificate for Redis, read now so that a bad path
/// fails here; they need a `rediss://` URL (or `-redis-tls`).
fn redis_tls(l: &Layers, urls: &[String]) -> Result<TlsFiles, ConfigError> {
    let cas = [&REDIS_TLS_CA, &REDIS_ROOTCA_CERTS];
    let files = tls_files(l, &cas, &REDIS_TLS_CERT, &REDIS_TLS_KEY)?;
    let settings = [
        &REDIS_TLS_CA.setting,
        &REDIS_ROOTCA_CERTS.setting,
        &REDIS_TLS_CERT.setting,
        &REDIS_TLS_KEY.setting,
    ];
    if !files.is_empty() {
        if !urls.iter().all(|u| u.starts_with("rediss://")) {
            let given = settings.into_iter().find(|s| given_text(l, s).is_some());
            let s = given.expect("some TLS file is given");
            return Err(l.invalid(s, "TLS files need a rediss:// URL or -redis-tls"));
        }
        files.load().map_err(|e| blame(l, &e, &settings))?;
    }
    Ok(files)
}

/// TLS for pings, when a CA to verify members is given.
fn ping_tls(l: &Layers) -> Result<Option<PingTls>, ConfigError> {
    let files = tls_files(l, &[&PING_TLS_CA], &PING_TLS_CERT, &PING_TLS_KEY)?;
    if files.is_empty() {
        return Ok(None);
    }
    if files.ca.is_empty() {
        let s = if files.cert.is_some() {
            &PING_TLS_CERT
        } else {
            &PING_TLS_KEY
        };
        return Err(l.invalid(
            s,
            format!(
                "-ping-tls-ca is required with -{}: pings verify members with it",
                s.flag
            ),
        ));
    }
    let settings = [
        &PING_TLS_CA.setting,
        &PING_TLS_CERT.setting,
        &PING_TLS_KEY.setting,
    ];
    crate::edge::tls::ping_client(&files, None).map_err(|e| blame(l, &e, &settings))?;
    Ok(Some(PingTls {
        files,
        domain: l.get(&PING_TLS_DOMAIN)?,
    }))
}

/// CA files, and a certificate with its key: each of the pair needs the other.
fn tls_files(
    l: &Layers,
    cas: &[&'static Typed<Files>],
    cert: &'static Typed<File>,
    key: &'static Typed<File>,
) -> Result<TlsFiles, ConfigError> {
    let (cert_file, key_file) = (l.get(cert)?, l.get(key)?);
    let needs = |s: &'static Setting, other: &Setting| {
        l.invalid(s, format!("-{} is required with -{}", other.flag, s.flag))
    };
    match (&cert_file, &key_file) {
        (Some(_), None) => return Err(needs(cert, key)),
        (None, Some(_)) => return Err(needs(key, cert)),
        _ => {}
    }
    let mut ca = Vec::new();
    for s in cas {
        ca.extend(l.get(*s)?);
    }
    Ok(TlsFiles {
        ca,
        cert: cert_file,
        key: key_file,
    })
}

/// The text of `s` unless it is blank.
fn given_text(l: &Layers, s: &Setting) -> Option<String> {
    l.text(s).filter(|v| !v.trim().is_empty())
}

/// The error for an unusable TLS file, on the setting among `settings` that
/// names it (else the first given).
fn blame(l: &Layers, e: &TlsError, settings: &[&'static Setting]) -> ConfigError {
    let path = match e {
        TlsError::Read { path, .. } | TlsError::NotPem { path, .. } => Some(path),
        _ => None,
    };
    let names = |s: &&&Setting| {
        let paths = given_text(l, s).map(|v| split_list(&v)).unwrap_or_default();
        path.is_some_and(|p| paths.iter().any(|x| p == std::path::Path::new(x)))
    };
    let s = settings
        .iter()
        .find(names)
        .or_else(|| settings.iter().find(|s| given_text(l, s).is_some()))
        .unwrap_or(&settings[0]);
    ConfigError::new(s, &given_text(l, s).unwrap_or_default(), e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn no_env(_: &str) -> Option<String> {
        None
    }

    #[test]
    fn defaults_match_the_go_implementation() {
        let c = resolve(&RawConfig::default(), &no_env).unwrap();
        assert_eq!(
            c.services_namespaces,
            ["sys-robots-list", "sys-parsers-lists"]
        );
        assert_eq!(c.workunits_namespace, "sys-channels");
        assert_eq!(c.distribution_namespace, "sys-matching-table");
        assert_eq!(c.poll_interval, Duration::from_millis(1000));
        assert_eq!(c.ping_timeout, Duration::from_millis(1000));
        assert_eq!(c.failure_threshold, 1);
        assert_eq!(c.forget_after, None);
        assert!(
            c.lease.renew_interval < c.lease.renew_deadline && c.lease.renew_deadline < c.lease.ttl
        );
    }

    #[test]
    fn flag_beats_env_beats_default_and_both_env_names_work() {
        let env = |k: &str| match k {
            "SERVICES_NAMESPACES" => Some("from-plural".to_string()),
            "POLL_INTERVAL" => Some("250ms".to_string()),
            "PING_TIMEOUT" => Some("300ms".to_string()),
            _ => None,
        };
        let raw = RawConfig::default().with(&PING_TIMEOUT, "2s");
        let c = resolve(&raw, &env).unwrap();
        assert_eq!(c.services_namespaces, ["from-plural"]);
        assert_eq!(c.poll_interval, Duration::from_millis(250));
        assert_eq!(c.ping_timeout, Duration::from_secs(2));
        let env2 = |k: &str| match k {
            "SERVICES_NAMESPACE" => Some("singular".to_string()),
            "SERVICES_NAMESPACES" => Some("plural".to_string()),
            _ => None,
        };
        assert_eq!(
            resolve(&RawConfig::default(), &env2)
                .unwrap()
                .services_namespaces,
            ["singular"]
        );
    }

    #[test]
    fn invalid_values_name_the_flag_and_value() {
        let bad = |raw: RawConfig| resolve(&raw, &no_env).unwrap_err();
        let e = bad(RawConfig::default().with(&POLL_INTERVAL, "fast"));
        assert_eq!(
            (e.flag, e.env, e.value.as_str()),
            ("poll-interval", "POLL_INTERVAL", "fast")
        );
        assert!(
            e.to_string()
                .starts_with("invalid -poll-interval (env POLL_INTERVAL) value \"fast\""),
            "{e}"
        );
        let e = bad(RawConfig::default().with(&PING_TIMEOUT, "0s"));
        assert_eq!(e.flag, "ping-timeout");
        let e = bad(RawConfig::default().with(&LEASE_RENEW_DEADLINE, "3s"));
        assert_eq!(e.flag, "lease-renew-deadline");
        let e = bad(RawConfig::default().with(&FAILURE_THRESHOLD, "0"));
        assert_eq!(e.flag, "failure-threshold");
        let e = bad(RawConfig::default().with(&SERVICES_NAMESPACES, " , "));
        assert_eq!(e.flag, "services-namespaces");
        let e = bad(RawConfig::default().with(&DISTRIBUTION_NAMESPACE, "a{}b"));
        assert_eq!(e.flag, "distribution-namespace");
        let e = bad(RawConfig::default().with(&REDIS_URL, "http://x"));
        assert_eq!(e.flag, "redis-url");
        let e = bad(RawConfig::default().with(&HTTP_ADDR, "localhost"));
        assert_eq!(e.flag, "http-addr");
        let e = bad(RawConfig::default().with(&PROM_PORT, "99999"));
        assert_eq!(e.flag, "prom-port");
        let e = bad(RawConfig::default().with(&LOG_FORMAT, "xml"));
        assert_eq!(e.flag, "log-format");
        let e = bad(RawConfig::default().with(&KA_PERMIT_WITHOUT_STREAM, "maybe"));
        assert_eq!(e.flag, "ka-permit-without-stream");
    }

    #[test]
    fn http_address() {
        let addr = |raw: RawConfig| {
            resolve(&raw, &no_env)
                .unwrap()
                .http_addr
                .map(|a| a.to_string())
        };
        assert_eq!(addr(RawConfig::default()).as_deref(), Some("0.0.0.0:9090"));
        assert_eq!(addr(RawConfig::default().with(&HTTP_ADDR, "off")), None);
        let go = RawConfig::default()
            .with(&PROM_PORT, "9100")
            .with(&HTTP_ADDR, "127.0.0.1:1");
        assert_eq!(addr(go).as_deref(), Some("0.0.0.0:9100"));
    }

    #[test]
    fn password_from_a_file_and_acl_user() {
        let dir = std::env::temp_dir().join(format!("distributor-config-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("redis-password");
        std::fs::write(&file, "s3cr:t\n").unwrap();
        let env = |k: &str| match k {
            "REDIS_PASSWORD_FILE" => Some(file.display().to_string()),
            "REDIS_USER" => Some("distributor".to_string()),
            _ => None,
        };
        let c = resolve(&RawConfig::default(), &env).unwrap();
        assert_eq!(c.redis_url, "redis://distributor:s3cr%3At@127.0.0.1:6379");
        assert_eq!(
            c.redis_url_redacted(),
            "redis://distributor:***@127.0.0.1:6379"
        );
        // A user in the URL stays when only the password comes from elsewhere.
        let raw = RawConfig::default()
            .with(&REDIS_URL, "redis://app@h:1")
            .with(&REDIS_PASS, "p");
        assert_eq!(
            resolve(&raw, &no_env).unwrap().redis_url,
            "redis://app:p@h:1"
        );
        let missing = RawConfig::default().with(&REDIS_PASSWORD_FILE, "/nonexistent/pw");
        let e = resolve(&missing, &no_env).unwrap_err();
        assert_eq!(e.flag, "redis-password-file");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn redis_addrs_replaces_only_the_host() {
        let raw = RawConfig::default()
            .with(&REDIS_URL, "rediss://app:pw@old:6379/3")
            .with(&REDIS_ADDRS, "new:6380");
        assert_eq!(
            resolve(&raw, &no_env).unwrap().redis_url,
            "rediss://app:pw@new:6380/3"
        );
    }

    #[test]
    fn several_nodes_mean_cluster() {
        let raw = RawConfig::default()
            .with(&REDIS_ADDRS, "a:7000, b:7001,c:7002")
            .with(&REDIS_PASS, "pw");
        let c = resolve(&raw, &no_env).unwrap();
        assert!(c.redis_cluster);
        assert_eq!(
            c.redis_url,
            "redis://:pw@a:7000,redis://:pw@b:7001,redis://:pw@c:7002"
        );
        assert_eq!(
            c.redis_url_redacted(),
            "redis://:***@a:7000,redis://:***@b:7001,redis://:***@c:7002"
        );
        assert_eq!(c.redis_options().urls.len(), 3);
        let one = RawConfig::default().with(&REDIS_CLUSTER, "true");
        let c = resolve(&one, &no_env).unwrap();
        assert!(c.redis_cluster && c.redis_options().is_cluster());
        let bad = RawConfig::default().with(&REDIS_URL, "redis://a:1,http://b:2");
        assert_eq!(resolve(&bad, &no_env).unwrap_err().flag, "redis-url");
    }

    #[test]
    fn redis_addrs_and_password() {
        let raw = RawConfig::default()
            .with(&REDIS_ADDRS, "10.0.0.5:6380")
            .with(&REDIS_PASS, "p@ss:w/rd");
        let c = resolve(&raw, &no_env).unwrap();
        assert_eq!(c.redis_url, "redis://:p%40ss%3Aw%2Frd@10.0.0.5:6380");
        assert_eq!(c.redis_url_redacted(), "redis://:***@10.0.0.5:6380");
        assert_eq!(redact_url("redis://u:secret@h:1/0"), "redis://u:***@h:1/0");
        assert_eq!(redact_url("redis://h:1"), "redis://h:1");
    }

    #[test]
    fn durations() {
        let ms = |s: &str| parse_duration(s).map(|d| d.as_millis());
        assert_eq!(ms("500ms"), Ok(500));
        assert_eq!(ms("2s"), Ok(2000));
        assert_eq!(ms("1m30s"), Ok(90_000));
        assert_eq!(ms("1.5h"), Ok(5_400_000));
        assert_eq!(ms("0"), Ok(0));
        assert_eq!(parse_duration("250us").unwrap(), Duration::from_micros(250));
        assert!(parse_duration("10").unwrap_err().contains("missing unit"));
        assert!(parse_duration("10d").unwrap_err().contains("unknown unit"));
        assert!(parse_duration("").is_err());
        assert!(parse_duration("ms").is_err());
    }

    /// Resolves with the environment `vars` (name, value).
    fn with_env(vars: &[(&str, &str)]) -> Result<Config, ConfigError> {
        let vars: Vec<(String, String)> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        resolve(&RawConfig::default(), &move |k| {
            vars.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone())
        })
    }

    const PW: &str = "hunter2-Sekr3t";

    fn assert_no_password(what: &str, texts: &[String]) {
        for text in texts {
            assert!(!text.contains(PW), "{what}: the password shows in {text}");
        }
    }

    #[test]
    fn passwords_never_appear_in_errors_or_debug() {
        // Malformed forms of the URL settings, each with the password inside.
        let url_forms = [
            format!("redis://user:{PW}@host:99999"),
            format!("redis://user:{PW}@host:0"),
            format!("redis://user:{PW}@host:1/notadb"),
            format!("redis://user:{PW}@:1"),
            format!("redis://user:{PW}@"),
            format!("user:{PW}@host:1"),
            format!("http://user:{PW}@host:1"),
            format!("redis://a:1,http://user:{PW}@b:2"),
            format!("redis://a:1,user:{PW}@b:2"),
            format!("redis://:{PW}@host:1 , redis://:{PW}@host:x"),
            format!("redis://user:{PW}@[::1:1"),
            format!("redis://user:x@{PW}@h:99999"),
            format!("redis://user:{PW}/x@h:99999"),
            format!("rediss://user:{PW}@h:1?protocol=resp9"),
            format!("redis://{PW}@h:99999"),
            format!("redis://:{PW},x@h:99999"),
            format!("{PW}@h:1"),
            format!("h:1,user:{PW}@h:2"),
            format!("user:{PW}@h"),
            format!("user:{PW}@h:1/0"),
        ];
        let plain_forms = [
            "bad value",
            "-1s",
            "",
            " , ",
            "0",
            "1ns",
            "x{}y",
            "redis://h:0",
        ];
        let background = [
            ("REDIS_URL", format!("redis://user:{PW}@h:1")),
            ("REDIS_PASSWORD", PW.to_string()),
        ];
        let mut errors = 0;
        for s in SETTINGS {
            let forms: Vec<String> = match s.kind {
                Kind::Url => url_forms.to_vec(),
                Kind::Secret => vec![PW.to_string(), format!("{PW}@h:1")],
                Kind::Text | Kind::Bool => plain_forms.iter().map(|f| f.to_string()).collect(),
            };
            for form in forms {
                // The setting under test, through each of its variables, over a
                // background that holds the password in the URL and REDIS_PASSWORD.
                for env_name in s.env {
                    let mut vars: Vec<(&str, &str)> =
                        background.iter().map(|(k, v)| (*k, v.as_str())).collect();
                    vars.retain(|(k, _)| k != env_name);
                    vars.push((env_name, &form));
                    if s.kind == Kind::Secret {
                        // A secret is never checked: make something else fail.
                        vars.push(("POLL_INTERVAL", "fast"));
                    }
                    let what = format!("{env_name}={form:?}");
                    match with_env(&vars) {
                        Err(e) => {
                            errors += 1;
                            assert_no_password(&what, &[e.to_string(), format!("{e:?}")]);
                        }
                        Ok(c) => assert_no_password(&what, &[format!("{c:?}")]),
                    }
                }
            }
        }
        assert!(
            errors > 100,
            "only {errors} errors: the forms do not exercise the checks"
        );
        // Every malformed URL form is refused, naming its flag.
        for form in &url_forms {
            let e = with_env(&[("REDIS_URL", form)]).unwrap_err();
            assert_eq!(e.flag, "redis-url", "{form}: {e}");
        }
        let e = with_env(&[("REDIS_ADDRS", &format!("user:{PW}@h:1"))]).unwrap_err();
        assert_eq!((e.flag, e.value.as_str()), ("redis-addrs", "user:***@h:1"));
        let e = with_env(&[("REDIS_URL", &format!("redis://user:{PW}@host:99999"))]).unwrap_err();
        assert_eq!(e.value, "redis://user:***@host:99999");

        // A valid configuration with a password, and the raw values.
        let c = with_env(&[("REDIS_URL", &format!("redis://user:{PW}@h:1/2"))]).unwrap();
        assert_no_password("valid config", &[format!("{c:?}"), c.redis_url_redacted()]);
        assert!(format!("{c:?}").contains("redis://user:***@h:1/2"), "{c:?}");
        let c = with_env(&[("REDIS_PASS", PW), ("REDIS_ADDRS", "a:1,b:2")]).unwrap();
        assert_no_password("cluster config", &[format!("{c:?}")]);
        let raw = RawConfig::default()
            .with(&REDIS_PASS, PW)
            .with(&REDIS_URL, format!("redis://u:{PW}@h:1"))
            .with(&REDIS_ADDRS, format!("u:{PW}@h:1"));
        assert_no_password("raw config", &[format!("{raw:?}")]);
    }

    #[test]
    fn redaction_hides_every_password() {
        for (url, shown) in [
            ("redis://u:secret@h:1/0", "redis://u:***@h:1/0"),
            ("redis://h:1", "redis://h:1"),
            ("u:secret@h:1", "u:***@h:1"),
            ("redis://secret@h:1", "redis://***@h:1"),
            ("redis://:secret@h:1", "redis://:***@h:1"),
            ("redis://u:sec@ret@h:1", "redis://u:***@h:1"),
            ("redis://u:a@b:c@h:1", "redis://u:***@h:1"),
            ("u:a@b:c@h:1,v:d@h:2", "u:***@h:1,v:***@h:2"),
            ("redis://u:sec,ret@h:1", "redis://u:***@h:1"),
            ("redis://u:a://b@h:1", "redis://u:***@h:1"),
            (
                "redis://a:1,http://u:secret@b:2",
                "redis://a:1,http:***@b:2",
            ),
            ("u://a=!:@h:1", "u:***@h:1"),
            (
                " redis://a:1, redis://:secret@b:2",
                " redis://a:1, redis://:***@b:2",
            ),
            ("h:1,u:secret@h:2", "h:***@h:2"),
            // A malformed entry may be a password where a URL belongs.
            (
                "redis://127.0.0.1:6379,garbage:Sup3rSecretPW",
                "redis://127.0.0.1:6379,garbage:***",
            ),
            ("redis://h:1, garbage:a:b", "redis://h:1, garbage:***"),
            ("redis://h:x,y", "redis://h:***,***"),
            ("redis://h:1, Sup3rSecret", "redis://h:1, ***"),
            ("redis://a:1,garbage://a#0_", "redis://a:1,garbage:***"),
            ("redis://a:1,redis://a b", "redis://a:1,redis://***"),
            ("redis://u:@#~~0,@h:1", "redis://u:***@h:1"),
            ("redis://u:@,!#a:@h:1", "redis://u:***@h:1"),
            ("u:@,a:@h:1", "u:***@h:1"),
            ("redis://u:*@aAA,@h:1", "redis://u:***@h:1"),
            ("u:a,b:c@h:1", "u:***@h:1"),
            (
                "redis://:a@h:1,redis://:b@h:2,c:d@h:3",
                "redis://:***@h:1,redis://:***@h:2,c:***@h:3",
            ),
        ] {
            assert_eq!(redact_url(url), shown);
        }
    }

    #[test]
    fn log_levels_and_directives() {
        for good in [
            "info",
            "WARN",
            "off",
            "info,distributor=debug",
            "distributor::edge::redis=trace",
        ] {
            with_env(&[("LOG", good)]).unwrap_or_else(|e| panic!("{good}: {e}"));
        }
        for bad in [
            "verbose",
            "",
            " ",
            "info,verbose",
            "distributor=loud",
            "=debug",
            "a b=info",
        ] {
            let e = with_env(&[("LOG", bad)]).unwrap_err();
            assert_eq!((e.flag, e.env, e.value.as_str()), ("log", "LOG", bad));
            assert!(
                e.reason.contains("error, warn, info, debug, trace or off"),
                "{e}"
            );
        }
    }

    #[test]
    fn list_keys_must_not_collide() {
        let e = with_env(&[
            ("SERVICES_NAMESPACES", "a,units"),
            ("WORKUNITS_NAMESPACE", "units"),
        ])
        .unwrap_err();
        assert_eq!(e.flag, "services-namespaces", "{e}");
        for (var, key, flag) in [
            (
                "SERVICES_NAMESPACES",
                "{sys-matching-table}:lease",
                "services-namespaces",
            ),
            (
                "WORKUNITS_NAMESPACE",
                "{sys-matching-table}:epoch",
                "workunits-namespace",
            ),
            (
                "WORKUNITS_NAMESPACE",
                "{sys-matching-table}:census:7",
                "workunits-namespace",
            ),
        ] {
            let e = with_env(&[(var, key)]).unwrap_err();
            assert_eq!((e.flag, e.value.as_str()), (flag, key), "{e}");
        }
        let e = with_env(&[
            ("DISTRIBUTION_NAMESPACE", "app:{t}:table"),
            ("WORKUNITS_NAMESPACE", "app:{t}:table:meta"),
        ])
        .unwrap_err();
        assert_eq!(e.flag, "workunits-namespace", "{e}");
        // Near misses are fine.
        with_env(&[("WORKUNITS_NAMESPACE", "{sys-matching-table}")]).unwrap();
        with_env(&[("SERVICES_NAMESPACES", "sys-matching-table-x")]).unwrap();
    }

    #[test]
    fn redis_urls_are_checked_in_full() {
        for bad in [
            "redis://host:99999",
            "redis://host:0",
            "redis://host:x",
            "redis://host:",
            "redis://:6379",
            "redis://",
            "redis://h:1/db",
            "redis://h:1/-1",
            "host:6379",
            "unix:///tmp/redis.sock",
            "redis://0.0.0.0:6379",
            "redis://[::1:6379",
            "rediss://h:1?protocol=resp9",
            "redis://h:1,redis://h:99999",
        ] {
            let e = with_env(&[("REDIS_URL", bad)]).unwrap_err();
            // Shown redacted: a malformed entry may hold a password.
            let shown = redact_url(bad.rsplit(',').next().unwrap());
            assert_eq!((e.flag, e.value.as_str()), ("redis-url", shown.as_str()));
        }
        for good in [
            "redis://h",
            "redis://h:6379/0",
            "redis://h:6379/",
            "rediss://u:p@h:1/15?protocol=resp3",
            "redis://[::1]:6379",
            "redis://u@h:1",
            "rediss://h:1#insecure",
            "redis://:p%40ss@h:1",
        ] {
            with_env(&[("REDIS_URL", good)]).unwrap_or_else(|e| panic!("{good}: {e}"));
        }
        for bad in ["h:99999", "h", ":1", "h:0", "h:1/0", "[::1]", "a:1,b"] {
            let e = with_env(&[("REDIS_ADDRS", bad)]).unwrap_err();
            assert_eq!(e.flag, "redis-addrs", "{bad}: {e}");
        }
        // -redis-addrs replaces the host, so the URL needs none then.
        let c = with_env(&[("REDIS_URL", "rediss://:pw@/2"), ("REDIS_ADDRS", "h:7")]).unwrap();
        assert_eq!(c.redis_url, "rediss://:pw@h:7/2");
    }

    #[test]
    fn a_tls_half_names_the_flag_given() {
        for (vars, flag, value, reason) in [
            (
                vec![
                    ("REDIS_URL", "rediss://h:1"),
                    ("REDIS_TLS_CERT", "/x/c.pem"),
                ],
                "redis-tls-cert",
                "/x/c.pem",
                "-redis-tls-key is required with -redis-tls-cert",
            ),
            (
                vec![("REDIS_URL", "rediss://h:1"), ("REDIS_TLS_KEY", "/x/k.pem")],
                "redis-tls-key",
                "/x/k.pem",
                "-redis-tls-cert is required with -redis-tls-key",
            ),
            (
                vec![("PING_TLS_CERT", "/x/c.pem")],
                "ping-tls-cert",
                "/x/c.pem",
                "-ping-tls-key is required with -ping-tls-cert",
            ),
            (
                vec![("PING_TLS_KEY", "/x/k.pem")],
                "ping-tls-key",
                "/x/k.pem",
                "-ping-tls-cert is required with -ping-tls-key",
            ),
            (
                vec![("PING_TLS_CERT", "/x/c.pem"), ("PING_TLS_KEY", "/x/k.pem")],
                "ping-tls-cert",
                "/x/c.pem",
                "-ping-tls-ca is required with -ping-tls-cert",
            ),
            (
                vec![
                    ("REDIS_TLS_KEY", "/x/k.pem"),
                    ("REDIS_TLS_CERT", "/x/c.pem"),
                ],
                "redis-tls-cert",
                "/x/c.pem",
                "TLS files need a rediss:// URL",
            ),
            (
                vec![
                    ("REDIS_URL", "rediss://h:1"),
                    ("REDIS_TLS_KEY", "/x/k.pem"),
                    ("REDIS_TLS_CERT", "/x/c.pem"),
                ],
                "redis-tls-cert",
                "/x/c.pem",
                "cannot read certificate",
            ),
        ] {
            let e = with_env(&vars).unwrap_err();
            assert_eq!((e.flag, e.value.as_str()), (flag, value), "{e}");
            assert!(e.reason.contains(reason), "{e}");
        }
    }

    #[test]
    fn durations_have_floors() {
        for (var, too_small, enough) in [
            ("POLL_INTERVAL", "9ms", "10ms"),
            ("PING_TIMEOUT", "999us", "1ms"),
            ("LEASE_RENEW_INTERVAL", "1ns", "1ms"),
            ("LEASE_RETRY_INTERVAL", "500us", "1ms"),
            ("KA_TIME", "999ms", "1s"),
            ("CENSUS_INTERVAL", "99ms", "100ms"),
            ("REDIS_WAIT_TIMEOUT", "999us", "1ms"),
            ("FORGET_AFTER", "999ms", "1s"),
        ] {
            let e = with_env(&[(var, too_small)]).unwrap_err();
            assert_eq!((e.env, e.value.as_str()), (var, too_small), "{e}");
            assert!(e.reason.starts_with("must be at least"), "{e}");
            with_env(&[(var, enough)]).unwrap_or_else(|e| panic!("{var}={enough}: {e}"));
        }
        let e = with_env(&[("POLL_INTERVAL", "1ns")]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "invalid -poll-interval (env POLL_INTERVAL) value \"1ns\": must be at least 10ms"
        );
        // forget-after follows the poll interval.
        let e = with_env(&[("POLL_INTERVAL", "2s"), ("FORGET_AFTER", "1s")]).unwrap_err();
        assert_eq!(e.flag, "forget-after");
        // With WAIT, a WAIT must fit in a renewal: deadline 1500ms - interval 500ms.
        let wait = |t: &str| with_env(&[("REDIS_WAIT_REPLICAS", "1"), ("REDIS_WAIT_TIMEOUT", t)]);
        assert_eq!(wait("1s").unwrap_err().flag, "redis-wait-timeout");
        assert!(wait("999ms").is_ok());
        assert!(
            with_env(&[("REDIS_WAIT_TIMEOUT", "5s")]).is_ok(),
            "no WAIT, no budget"
        );
    }

    #[test]
    fn the_readme_documents_every_setting() {
        let readme = include_str!("../README.md");
        let section = readme
            .split("\n## Configuration\n")
            .nth(1)
            .and_then(|s| s.split("\n## ").next())
            .expect("a Configuration section");
        let rows: Vec<&str> = section.lines().filter(|l| l.starts_with("| `-")).collect();
        for s in SETTINGS {
            let flag = format!("`-{}`", s.flag);
            let first_cell = |row: &&&str| row.split('|').nth(1).is_some_and(|c| c.contains(&flag));
            let row = rows
                .iter()
                .find(first_cell)
                .or_else(|| rows.iter().find(|r| r.contains(&flag)))
                .unwrap_or_else(|| panic!("README: no row for -{}", s.flag));
            for env in s.env {
                assert!(
                    row.contains(&format!("`{env}`")),
                    "README -{}: no {env}",
                    s.flag
                );
            }
            if let Some(default) = s.default {
                assert!(
                    row.contains(&format!("`{default}`")),
                    "README -{}: default should be `{default}`: {row}",
                    s.flag
                );
            }
        }
    }

    #[test]
    fn only_the_built_in_http_address_is_a_default() {
        assert_eq!(
            with_env(&[]).unwrap().http_addr_origin,
            HttpAddrOrigin::Default
        );
        let c = with_env(&[("HTTP_ADDR", "0.0.0.0:9090")]).unwrap();
        assert_eq!(c.http_addr_origin, HttpAddrOrigin::HttpAddr);
        let raw = RawConfig::default().with(&HTTP_ADDR, "0.0.0.0:9090");
        assert_eq!(
            resolve(&raw, &no_env).unwrap().http_addr_origin,
            HttpAddrOrigin::HttpAddr
        );
        let c = with_env(&[("PROM_PORT", "9090")]).unwrap();
        assert_eq!(c.http_addr_origin, HttpAddrOrigin::PromPort);
        assert_eq!(c.http_addr_origin.flag(), "-prom-port");
    }

    /// A password without the characters that would end a list entry or
    /// make it a userinfo.
    fn plain(pw: &str) -> String {
        pw.replace(['@', ','], "x")
    }

    proptest! {
        #[test]
        fn duration_round_trip(ms in 0u64..10_000_000) {
            prop_assert_eq!(parse_duration(&format!("{ms}ms")).unwrap(), Duration::from_millis(ms));
            let (s, rest) = (ms / 1000, ms % 1000);
            prop_assert_eq!(parse_duration(&format!("{s}s{rest}ms")).unwrap(), Duration::from_millis(ms));
        }

        /// Whatever a password holds, no URL form shows it whole, and no
        /// error over such a URL does.
        #[test]
        fn no_password_survives_redaction(
            pw in "[A-Za-z0-9!#$%&*+,;=@:/._~-]{6,20}",
            port in prop::sample::select(vec!["1", "99999", "", "x"]),
        ) {
            for url in [
                format!("redis://u:{pw}@h:{port}"),
                format!("redis://:{pw}@h:{port}/0"),
                format!("u:{pw}@h:{port}"),
                format!("redis://a:1,redis://:{pw}@h:{port}"),
                format!("redis://:{pw}@h:{port},redis://b:2"),
                format!("rediss://u:{pw}@h:{port}#insecure"),
                // A password typed where a URL of the list belongs (with
                // an '@' it reads as a userinfo, redacted above; a ',' would
                // end the entry).
                format!("redis://a:1,garbage:{}", plain(&pw)),
                format!("garbage:{},redis://a:1", plain(&pw)),
            ] {
                let pw = if url.contains("garbage") { plain(&pw) } else { pw.clone() };
                let shown = redact_url(&url);
                prop_assert!(!shown.contains(&pw), "{} shown as {}", url, shown);
                for var in ["REDIS_URL", "REDIS_ADDRS"] {
                    let vars = [(var, url.as_str()), ("REDIS_PASS", pw.as_str())];
                    let text = match with_env(&vars) {
                        Ok(c) => format!("{c:?}"),
                        Err(e) => format!("{e} {e:?}"),
                    };
                    prop_assert!(!text.contains(&pw), "{}={}: {}", var, url, text);
                }
            }
        }

        #[test]
        fn parse_duration_never_panics(s in "\\PC{0,12}") {
            let _ = parse_duration(&s);
        }
    }
}
