//! Daemon configuration: defaults, environment variables and validation.
//!
//! Pure. [`crate::cli`] parses the command line (clap) into [`RawConfig`];
//! [`resolve`] layers flag over environment over default and validates
//! everything, so an invalid value fails at start with a message naming the
//! flag, the variable and the value. Names and defaults follow
//! scientificideas/distributor so that its deployments keep working unchanged.
//!
//! Every setting declares a [`Kind`], which decides how its value may appear in
//! an error or in `Debug` output: a secret never, a URL with its passwords
//! replaced by `***`. Every [`ConfigError`] is built through that.

use std::ffi::OsString;
use std::time::Duration;

use crate::core::keys::{Keys, check_table_key};
use crate::edge::tls::{TlsError, TlsFiles};

/// What a setting's value is, which decides how it is shown and whether the
/// flag needs a value.
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
            Kind::Url => userinfo_spans(value)
                .into_iter()
                .map(|(_, hidden, _)| value[hidden].to_string())
                .collect(),
        }
    }
}

/// One setting: its flag, the environment variables that may carry it (first wins),
/// its default (if any), its kind and its help text. Rendered into `--help`;
/// the README's table must match it (a test checks).
pub struct Setting {
    pub flag: &'static str,
    pub env: &'static [&'static str],
    pub default: Option<&'static str>,
    pub kind: Kind,
    /// The value's name in `--help`.
    pub value_name: &'static str,
    pub help: &'static str,
}

macro_rules! settings {
    ($($id:ident: $flag:literal, [$($env:literal),*], $default:expr, $kind:ident, $value:literal, $help:literal;)*) => {
        /// Every setting, in help order.
        pub const SETTINGS: &[Setting] = &[
            $(Setting { flag: $flag, env: &[$($env),*], default: $default, kind: Kind::$kind, value_name: $value, help: $help },)*
        ];
    };
}

/// Raw values as given on the command line, by flag (absent = not given).
/// `Debug` shows each value as its [`Kind`] allows.
#[derive(Clone, Default)]
pub struct RawConfig(std::collections::BTreeMap<&'static str, String>);

impl RawConfig {
    /// `value` given for the setting of `flag`.
    pub fn with(mut self, flag: &'static str, value: impl Into<String>) -> RawConfig {
        self.0.insert(flag, value.into());
        self
    }

    fn get(&self, flag: &str) -> Option<&String> {
        self.0.get(flag)
    }
}

impl std::fmt::Debug for RawConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let shown = SETTINGS
            .iter()
            .filter_map(|s| Some((s.flag, s.kind.show(self.get(s.flag)?))));
        f.debug_map().entries(shown).finish()
    }
}

settings! {
    services_namespaces: "services-namespaces", ["SERVICES_NAMESPACE", "SERVICES_NAMESPACES"],
        Some("sys-robots-list,sys-parsers-lists"), Text, "KEYS",
        "Comma-separated services list keys; each list is a group that splits all units";
    workunits_namespace: "workunits-namespace", ["WORKUNITS_NAMESPACE"], Some("sys-channels"), Text, "KEY",
        "Work units list key";
    distribution_namespace: "distribution-namespace", ["DISTRIBUTION_NAMESPACE"],
        Some("sys-matching-table"), Text, "KEY", "Matching table hash key; coordination keys share its slot";
    poll_interval: "poll-interval", ["POLL_INTERVAL"], Some("1000ms"), Text, "DURATION",
        "How often the holder reads the lists, pings every member and updates the table (at least 10ms)";
    ping_timeout: "ping-timeout", ["PING_TIMEOUT"], Some("1000ms"), Text, "DURATION",
        "Deadline of one ping, connection included (at least 1ms)";
    redis_url: "redis-url", ["REDIS_URL"], Some("redis://127.0.0.1:6379"), Url, "URL",
        "Redis URL (redis://[user:pass@]host[:port][/db], or rediss://); several comma-separated URLs are cluster seed nodes";
    redis_addrs: "redis-addrs", ["REDIS_ADDRS"], None, Url, "HOST:PORT",
        "Go-style Redis host:port; overrides the host of --redis-url when given";
    redis_pass: "redis-pass", ["REDIS_PASS", "REDIS_PASSWORD"], None, Secret, "PASSWORD",
        "Redis password (prefer the environment to the command line)";
    redis_cluster: "redis-cluster", ["REDIS_CLUSTER"], Some("false"), Bool, "BOOL",
        "Redis Cluster mode with a single seed node (several nodes always mean cluster)";
    redis_password_file: "redis-password-file", ["REDIS_PASSWORD_FILE"], None, Text, "FILE",
        "File holding the Redis password (a trailing newline is ignored)";
    redis_user: "redis-user", ["REDIS_USER", "REDIS_USERNAME"], None, Text, "USER",
        "Redis ACL user name (with -redis-pass or -redis-password-file)";
    redis_tls: "redis-tls", ["REDIS_TLS"], Some("false"), Bool, "BOOL",
        "Go-compatible: use TLS to Redis (same as a rediss:// URL)";
    redis_tls_ca: "redis-tls-ca", ["REDIS_TLS_CA"], None, Text, "FILES",
        "Comma-separated PEM CA files to verify Redis (default: system roots)";
    redis_rootca_certs: "redis-rootca-certs", ["REDIS_ROOTCA_CERTS"], None, Text, "FILES",
        "Go-compatible alias of -redis-tls-ca";
    redis_tls_cert: "redis-tls-cert", ["REDIS_TLS_CERT"], None, Text, "FILE",
        "PEM client certificate for Redis (mTLS; needs -redis-tls-key)";
    redis_tls_key: "redis-tls-key", ["REDIS_TLS_KEY"], None, Text, "FILE",
        "PEM client key for Redis (mTLS; needs -redis-tls-cert)";
    ping_tls_ca: "ping-tls-ca", ["PING_TLS_CA"], None, Text, "FILE",
        "PEM CA that signs members' certificates; turns on TLS for pings";
    ping_tls_cert: "ping-tls-cert", ["PING_TLS_CERT"], None, Text, "FILE",
        "PEM client certificate for pings (mTLS; needs -ping-tls-key and -ping-tls-ca)";
    ping_tls_key: "ping-tls-key", ["PING_TLS_KEY"], None, Text, "FILE",
        "PEM client key for pings (mTLS; needs -ping-tls-cert and -ping-tls-ca)";
    ping_tls_domain: "ping-tls-domain", ["PING_TLS_DOMAIN"], None, Text, "NAME",
        "Name to verify in members' certificates instead of their address";
    failure_threshold: "failure-threshold", ["FAILURE_THRESHOLD"], Some("1"), Text, "N",
        "Consecutive failed pings before a member loses its units";
    forget_after: "forget-after", ["FORGET_AFTER"], None, Text, "DURATION",
        "Remove a member from its services list after failing this long (off if unset; at least -poll-interval)";
    lease_ttl: "lease-ttl", ["LEASE_TTL"], Some("2s"), Text, "DURATION",
        "Lease duration: a standby takes over at most this long after the holder dies (at least 10ms)";
    lease_renew_interval: "lease-renew-interval", ["LEASE_RENEW_INTERVAL"], Some("500ms"), Text, "DURATION",
        "How often the holder renews the lease (at least 1ms, < lease-renew-deadline)";
    lease_renew_deadline: "lease-renew-deadline", ["LEASE_RENEW_DEADLINE"], Some("1500ms"), Text, "DURATION",
        "The holder stops acting when it has not renewed for this long (< lease-ttl)";
    lease_retry_interval: "lease-retry-interval", ["LEASE_RETRY_INTERVAL"], Some("500ms"), Text, "DURATION",
        "Longest wait between a standby's acquisition attempts (at least 1ms)";
    census_interval: "census-interval", ["CENSUS_INTERVAL"], Some("5s"), Text, "DURATION",
        "Census interval; keep it well above the clock skew between replicas (at least 100ms)";
    replica_id: "replica-id", ["REPLICA_ID"], None, Text, "NAME",
        "This replica's name in status output (default: <hostname>-<pid>-<8 hex>)";
    ka_time: "ka-time", ["KA_TIME"], Some("10s"), Text, "DURATION",
        "gRPC keepalive ping interval towards members (at least 1s: servers reject more frequent pings)";
    ka_timeout: "ka-timeout", ["KA_TIMEOUT"], Some("20s"), Text, "DURATION", "gRPC keepalive timeout";
    ka_permit_without_stream: "ka-permit-without-stream", ["KA_PERMIT_WITHOUT_STREAM"],
        Some("false"), Bool, "BOOL", "Send keepalive pings with no call in flight";
    http_addr: "http-addr", ["HTTP_ADDR"], Some("0.0.0.0:9090"), Text, "IP:PORT|off",
        "Address of /metrics, /healthz, /readyz and /version; `off` disables it. The default moves to the next free port up to 9099 when 9090 is taken; an address given explicitly must be free";
    prom_port: "prom-port", ["PROM_PORT"], None, Text, "PORT",
        "Go-compatible: serve the HTTP endpoints on 0.0.0.0:<port> (overrides -http-addr)";
    log_format: "log-format", ["LOG_FORMAT"], Some("text"), Text, "text|json", "Log format: text or json";
    traces: "traces", ["OTEL_TRACES_EXPORTER"], Some("otlp"), Text, "otlp|none",
        "Span export: otlp (when OTEL_EXPORTER_OTLP_ENDPOINT is set) or none";
    max_list_entries: "max-list-entries", ["MAX_LIST_ENTRIES"], Some("2000000"), Text, "N",
        "Longest services or work-units list read; a longer one skips the cycle with an error";
    max_list_bytes: "max-list-bytes", ["MAX_LIST_BYTES"], Some("256MiB"), Text, "SIZE",
        "Largest list read, in bytes of Redis memory (MEMORY USAGE); a larger one skips the cycle with an error";
    mass_failure_percent: "mass-failure-percent", ["MASS_FAILURE_PERCENT"], Some("50"), Text, "PERCENT",
        "When more than this percent of a group's live members fail at once, the holder keeps their units until another replica or -mass-failure-confirm confirms it (100: off)";
    mass_failure_confirm: "mass-failure-confirm", ["MASS_FAILURE_CONFIRM"], Some("10s"), Text, "DURATION",
        "How long a mass failure that no other replica confirmed is held before the holder acts on it";
    redis_wait_replicas: "redis-wait-replicas", ["REDIS_WAIT_REPLICAS"], Some("0"), Text, "N",
        "Redis replicas that must acknowledge a lease acquisition, renewal or table write (WAIT) before it counts";
    redis_wait_timeout: "redis-wait-timeout", ["REDIS_WAIT_TIMEOUT"], Some("100ms"), Text, "DURATION",
        "How long to wait for those acknowledgements (at least 1ms; with -redis-wait-replicas, shorter than -lease-renew-deadline minus -lease-renew-interval)";
    log: "log", ["LOG"], Some("info"), Text, "LEVEL",
        "Log level when RUST_LOG is unset: error, warn, info, debug, trace or off, or comma-separated [target=]level directives";
    config_type: "config-type", ["CONFIG_TYPE"], Some("args"), Text, "args|env",
        "Accepted for compatibility; flags and environment are always both read (flag wins)";
}

/// The setting of `flag` (without dashes).
pub fn setting(flag: &str) -> Option<&'static Setting> {
    SETTINGS.iter().find(|s| s.flag == flag)
}

pub use crate::core::lease::LeaseTiming;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Keepalive {
    pub interval: Duration,
    pub timeout: Duration,
    pub while_idle: bool,
}

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
            log_json,
            traces,
            max_list_entries,
            max_list_bytes,
            mass_failure_percent,
            mass_failure_confirm,
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
            .field("log_json", log_json)
            .field("traces", traces)
            .field("max_list_entries", max_list_entries)
            .field("max_list_bytes", max_list_bytes)
            .field("mass_failure_percent", mass_failure_percent)
            .field("mass_failure_confirm", mass_failure_confirm)
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

/// Rewrites Go-style single-dash long flags (`-poll-interval=1s`) to clap's
/// `--poll-interval=1s`. Single-letter flags (`-h`), values and arguments that
/// are not UTF-8 are left alone; so is the argument after a setting that takes
/// a value (`-poll-interval -1s`: `-1s` is the value, as in Go).
pub fn normalize_go_flags<S: Into<OsString>>(args: impl IntoIterator<Item = S>) -> Vec<OsString> {
    let mut out = Vec::new();
    let mut rest_are_values = false;
    let mut next_is_value = false;
    for (i, arg) in args.into_iter().enumerate() {
        let arg: OsString = arg.into();
        if i == 0 || rest_are_values || std::mem::take(&mut next_is_value) {
            out.push(arg);
            continue;
        }
        let Some(text) = arg.to_str() else {
            out.push(arg);
            continue;
        };
        if text == "--" {
            rest_are_values = true;
            out.push(arg);
            continue;
        }
        let long = match text.strip_prefix("--") {
            Some(long) => Some((long, false)),
            None => text
                .strip_prefix('-')
                .filter(|name| {
                    let name_len = name.split('=').next().map_or(0, str::len);
                    name_len > 1 && name.starts_with(|c: char| c.is_ascii_alphabetic())
                })
                .map(|name| (name, true)),
        };
        let Some((name, go_style)) = long else {
            out.push(arg);
            continue;
        };
        next_is_value = !name.contains('=') && setting(name).is_some_and(|s| s.kind != Kind::Bool);
        if go_style {
            out.push(format!("-{text}").into());
        } else {
            out.push(arg);
        }
    }
    out
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

fn parse_bool(s: &str) -> Result<bool, String> {
    match s.to_ascii_lowercase().as_str() {
        "1" | "t" | "true" | "yes" => Ok(true),
        "0" | "f" | "false" | "no" => Ok(false),
        _ => Err("expected true or false".into()),
    }
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

/// Where the userinfo of every `user:pass@` in `s` lies: for each, the byte
/// ranges of the user (kept), of what is hidden (the password, or the whole
/// userinfo when it has no `:`), and the index of its `@`.
///
/// Conservative on malformed input: a userinfo runs back from its `@` to the
/// `scheme://` of the last entry since the previous `@` that has one, else to
/// the first `,` since the previous `@`, else to the start; an `@` with no new
/// entry since the previous one extends that userinfo. So a password holding
/// `@`, `/`, `,` or `://` is hidden whole (with more, at worst); only one
/// holding `,scheme://` cannot be told from a list of URLs.
fn userinfo_spans(s: &str) -> Vec<(std::ops::Range<usize>, std::ops::Range<usize>, usize)> {
    let mut spans = Vec::new();
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
                info_start = Some(offset + lead + i + 3);
            }
            offset += entry.len() + 1;
        }
        if let (None, false, Some(last)) = (info_start, range.contains(','), spans.last_mut()) {
            // No new entry since the previous '@': the password holds an '@'
            // (as the URL standard reads it, the userinfo ends at the last one).
            let (_, hidden, last_at): &mut (_, std::ops::Range<usize>, usize) = last;
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
/// without `:` is replaced whole).
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
    out
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

/// Layers flag over environment over default, then validates.
pub fn resolve(
    raw: &RawConfig,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Config, ConfigError> {
    let setting = |flag: &'static str| setting(flag).expect("known setting");
    let lookup = |flag: &'static str| -> (Option<String>, &'static Setting) {
        let s = setting(flag);
        let value = raw
            .get(flag)
            .cloned()
            .or_else(|| s.env.iter().find_map(|e| env(e)))
            .or_else(|| s.default.map(str::to_string));
        (value, s)
    };
    // Given on the command line or in the environment (not the default).
    let given = |flag: &'static str| {
        raw.get(flag).is_some() || setting(flag).env.iter().any(|e| env(e).is_some())
    };
    let err = |s: &'static Setting, value: &str, reason: String| ConfigError::new(s, value, reason);
    let text = |flag| lookup(flag).0;
    // A duration of at least `min` (`None` when unset and without a default).
    let duration =
        |flag: &'static str, min: Duration| -> Result<Option<(Duration, String)>, ConfigError> {
            let (value, s) = lookup(flag);
            let Some(v) = value else { return Ok(None) };
            let d = parse_duration(&v).map_err(|e| err(s, &v, e))?;
            if d < min {
                return Err(err(s, &v, format!("must be at least {min:?}")));
            }
            Ok(Some((d, v)))
        };
    let required = |flag: &'static str, min: Duration| -> Result<Duration, ConfigError> {
        Ok(duration(flag, min)?.expect("has a default").0)
    };
    const NS: Duration = Duration::from_nanos(1);
    const MS: Duration = Duration::from_millis(1);

    let (services, s) = lookup("services-namespaces");
    let services = services.unwrap_or_default();
    let services_namespaces: Vec<String> = services
        .split(',')
        .map(str::trim)
        .filter(|x| !x.is_empty())
        .map(str::to_string)
        .collect();
    if services_namespaces.is_empty() {
        return Err(err(
            s,
            &services,
            "needs at least one services list key".into(),
        ));
    }
    let workunits_namespace = text("workunits-namespace").unwrap_or_default();
    if workunits_namespace.is_empty() {
        return Err(err(
            setting("workunits-namespace"),
            "",
            "must not be empty".into(),
        ));
    }
    let (table, s) = lookup("distribution-namespace");
    let distribution_namespace = table.unwrap_or_default();
    check_table_key(&distribution_namespace)
        .map_err(|e| err(s, &distribution_namespace, e.into()))?;
    for key in services_namespaces.iter().chain([&workunits_namespace]) {
        if *key == distribution_namespace {
            return Err(err(
                s,
                key,
                "must differ from the services and work units keys".into(),
            ));
        }
    }
    // A list key must not be the table or one of its coordination keys.
    let keys = Keys::new(&distribution_namespace);
    let lists = services_namespaces
        .iter()
        .map(|k| ("services-namespaces", k))
        .chain([("workunits-namespace", &workunits_namespace)]);
    for (flag, key) in lists {
        if keys.is_reserved(key) {
            return Err(err(
                setting(flag),
                key,
                format!(
                    "is reserved for the coordination keys of -distribution-namespace {distribution_namespace:?}"
                ),
            ));
        }
    }
    if services_namespaces.contains(&workunits_namespace) {
        return Err(err(
            setting("services-namespaces"),
            &services,
            format!(
                "must not contain the work units key {workunits_namespace:?} (-workunits-namespace)"
            ),
        ));
    }

    let poll_interval = required("poll-interval", Duration::from_millis(10))?;
    let ping_timeout = required("ping-timeout", MS)?;
    let (threshold, s) = lookup("failure-threshold");
    let threshold = threshold.unwrap_or_default();
    let failure_threshold: u32 = threshold
        .parse()
        .ok()
        .filter(|n| *n >= 1)
        .ok_or_else(|| err(s, &threshold, "expected a whole number >= 1".into()))?;
    let forget_after = match duration("forget-after", NS)? {
        Some((d, v)) if d < poll_interval => {
            return Err(err(
                setting("forget-after"),
                &v,
                format!("must be at least -poll-interval ({poll_interval:?})"),
            ));
        }
        other => other.map(|(d, _)| d),
    };

    let lease = LeaseTiming {
        ttl: required("lease-ttl", Duration::from_millis(10))?,
        renew_interval: required("lease-renew-interval", MS)?,
        renew_deadline: required("lease-renew-deadline", NS)?,
        retry_interval: required("lease-retry-interval", MS)?,
    };
    if lease.renew_deadline >= lease.ttl {
        let v = text("lease-renew-deadline").unwrap_or_default();
        return Err(err(
            setting("lease-renew-deadline"),
            &v,
            format!(
                "must be shorter than -lease-ttl ({:?}) so the holder steps down before its lease can expire",
                lease.ttl
            ),
        ));
    }
    if lease.renew_interval >= lease.renew_deadline {
        let v = text("lease-renew-interval").unwrap_or_default();
        return Err(err(
            setting("lease-renew-interval"),
            &v,
            format!(
                "must be shorter than -lease-renew-deadline ({:?}) so a renewal can be retried",
                lease.renew_deadline
            ),
        ));
    }
    let census_interval = required("census-interval", Duration::from_millis(100))?;

    let (url, s) = lookup("redis-url");
    let redis_url = url.unwrap_or_default();
    // One URL, or several seed nodes of a Redis Cluster (comma-separated).
    let mut urls: Vec<String> = redis_url
        .split(',')
        .map(str::trim)
        .filter(|u| !u.is_empty())
        .map(str::to_string)
        .collect();
    if urls.is_empty() {
        return Err(err(s, "", "expected redis://host:port".into()));
    }
    // An error shows the bad entry of a list, unless a password holds a ','
    // (then the entry would show a piece of it): then the whole list, redacted.
    let entry = |list: &str, entry: &str| -> String {
        if Kind::Url.secrets(list).iter().any(|p| p.contains(',')) {
            list.to_string()
        } else {
            entry.to_string()
        }
    };
    let addrs = text("redis-addrs");
    for url in &urls {
        // -redis-addrs replaces the host, so only the rest of the URL counts then.
        check_redis_url(url, addrs.is_none()).map_err(|e| err(s, &entry(&redis_url, url), e))?;
    }
    if let Some(addrs) = addrs {
        let sa = setting("redis-addrs");
        let hosts: Vec<&str> = addrs
            .split(',')
            .map(str::trim)
            .filter(|a| !a.is_empty())
            .collect();
        if hosts.is_empty() {
            return Err(err(sa, &addrs, "expected host:port[,host:port...]".into()));
        }
        for h in &hosts {
            check_host_port(h, true).map_err(|e| {
                err(
                    sa,
                    &entry(&addrs, h),
                    format!("{e}; expected host:port[,host:port...]"),
                )
            })?;
        }
        // Only the host changes: scheme (TLS), user, password and db stay.
        let template = urls[0].clone();
        let (scheme, rest) = template.split_once("://").expect("checked above");
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
            check_redis_url(url, true).map_err(|e| err(sa, url, e))?;
        }
    }
    // The password may come from the URL, -redis-pass / REDIS_PASSWORD, or a
    // file (so it never has to sit on a command line); the last two win.
    let file_pass = match lookup("redis-password-file") {
        (Some(path), s) if !path.is_empty() => {
            let raw = std::fs::read_to_string(&path)
                .map_err(|e| err(s, &path, format!("cannot read it: {e}")))?;
            Some(raw.trim_end_matches(['\r', '\n']).to_string())
        }
        _ => None,
    };
    let pass = text("redis-pass").filter(|p| !p.is_empty()).or(file_pass);
    let user = text("redis-user").filter(|u| !u.is_empty());
    let (tls_flag, s) = lookup("redis-tls");
    let tls_flag = tls_flag.unwrap_or_default();
    let force_tls = parse_bool(&tls_flag).map_err(|e| err(s, &tls_flag, e))?;
    for url in &mut urls {
        if pass.is_some() || user.is_some() {
            let (scheme, rest) = url.split_once("://").expect("checked above");
            let (auth, host) = rest.rsplit_once('@').unwrap_or(("", rest));
            let (url_user, url_pass) = auth.split_once(':').unwrap_or((auth, ""));
            let user = user
                .as_deref()
                .map(encode_userinfo)
                .unwrap_or_else(|| url_user.to_string());
            let pass = pass
                .as_deref()
                .map(encode_userinfo)
                .unwrap_or_else(|| url_pass.to_string());
            *url = format!("{scheme}://{user}:{pass}@{host}");
        }
        // TLS to Redis: a rediss:// URL or -redis-tls.
        if force_tls && url.starts_with("redis://") {
            *url = url.replacen("redis://", "rediss://", 1);
        }
    }
    let (cluster, s) = lookup("redis-cluster");
    let cluster = cluster.unwrap_or_default();
    let redis_cluster = parse_bool(&cluster).map_err(|e| err(s, &cluster, e))? || urls.len() > 1;
    let redis_url = urls.join(",");

    // Our own CA and a client certificate; files are read now, so a bad path
    // fails here, naming the flag of that path.
    let given_text = |flag: &'static str| text(flag).filter(|v| !v.trim().is_empty());
    let paths = |flag: &'static str| -> Vec<std::path::PathBuf> {
        given_text(flag)
            .map(|v| {
                v.split(',')
                    .map(str::trim)
                    .filter(|p| !p.is_empty())
                    .map(Into::into)
                    .collect()
            })
            .unwrap_or_default()
    };
    // A certificate needs its key and a key its certificate: name the one given.
    let pair = |cert: &'static str, key: &'static str| -> Result<(), ConfigError> {
        match (given_text(cert), given_text(key)) {
            (Some(c), None) => Err(err(
                setting(cert),
                &c,
                format!("-{key} is required with -{cert}"),
            )),
            (None, Some(k)) => Err(err(
                setting(key),
                &k,
                format!("-{cert} is required with -{key}"),
            )),
            _ => Ok(()),
        }
    };
    // The flag that named `path` among `flags`, for an unusable file.
    let blame = |e: &TlsError, flags: &[&'static str]| -> ConfigError {
        let path = match e {
            TlsError::Read { path, .. } | TlsError::NotPem { path, .. } => Some(path.clone()),
            _ => None,
        };
        let flag = flags
            .iter()
            .copied()
            .find(|f| path.as_ref().is_some_and(|p| paths(f).contains(p)))
            .or_else(|| flags.iter().copied().find(|f| given_text(f).is_some()))
            .unwrap_or(flags[0]);
        err(
            setting(flag),
            &given_text(flag).unwrap_or_default(),
            e.to_string(),
        )
    };
    let redis_tls_flags = [
        "redis-tls-ca",
        "redis-rootca-certs",
        "redis-tls-cert",
        "redis-tls-key",
    ];
    pair("redis-tls-cert", "redis-tls-key")?;
    let mut ca = paths("redis-tls-ca");
    ca.extend(paths("redis-rootca-certs"));
    let redis_tls = TlsFiles {
        ca,
        cert: given_text("redis-tls-cert").map(Into::into),
        key: given_text("redis-tls-key").map(Into::into),
    };
    if !redis_tls.is_empty() {
        if !urls.iter().all(|u| u.starts_with("rediss://")) {
            let flag = redis_tls_flags
                .into_iter()
                .find(|f| given_text(f).is_some())
                .expect("some TLS file is given");
            return Err(err(
                setting(flag),
                &given_text(flag).unwrap_or_default(),
                "TLS files need a rediss:// URL or -redis-tls".into(),
            ));
        }
        redis_tls.load().map_err(|e| blame(&e, &redis_tls_flags))?;
    }
    let ping_tls_flags = ["ping-tls-ca", "ping-tls-cert", "ping-tls-key"];
    pair("ping-tls-cert", "ping-tls-key")?;
    let ping_files = TlsFiles {
        ca: paths("ping-tls-ca"),
        cert: given_text("ping-tls-cert").map(Into::into),
        key: given_text("ping-tls-key").map(Into::into),
    };
    let ping_tls = if ping_files.is_empty() {
        None
    } else {
        if ping_files.ca.is_empty() {
            let flag = if ping_files.cert.is_some() {
                "ping-tls-cert"
            } else {
                "ping-tls-key"
            };
            return Err(err(
                setting(flag),
                &given_text(flag).unwrap_or_default(),
                format!("-ping-tls-ca is required with -{flag}: pings verify members with it"),
            ));
        }
        crate::edge::tls::ping_client(&ping_files, None).map_err(|e| blame(&e, &ping_tls_flags))?;
        Some(PingTls {
            files: ping_files,
            domain: text("ping-tls-domain").filter(|d| !d.is_empty()),
        })
    };

    let keepalive = Keepalive {
        interval: required("ka-time", Duration::from_secs(1))?,
        timeout: required("ka-timeout", NS)?,
        while_idle: {
            let (v, s) = lookup("ka-permit-without-stream");
            let v = v.unwrap_or_default();
            parse_bool(&v).map_err(|e| err(s, &v, e))?
        },
    };
    let replica_id = text("replica-id")
        .filter(|s| !s.is_empty())
        .unwrap_or_else(crate::edge::redis::default_replica_id);
    let (config_type, s) = lookup("config-type");
    let config_type = config_type.unwrap_or_default();
    if !matches!(config_type.as_str(), "args" | "env") {
        return Err(err(s, &config_type, "expected args or env".into()));
    }

    let (http_addr, http_addr_origin) = match (text("prom-port"), lookup("http-addr")) {
        (Some(port), _) => {
            let s = setting("prom-port");
            let port: u16 = port
                .parse()
                .map_err(|_| err(s, &port, "expected a port number".into()))?;
            (
                Some(std::net::SocketAddr::from(([0, 0, 0, 0], port))),
                HttpAddrOrigin::PromPort,
            )
        }
        (None, (Some(v), _)) if v == "off" || v.is_empty() => (None, HttpAddrOrigin::HttpAddr),
        (None, (Some(v), s)) => (
            Some(
                v.parse()
                    .map_err(|_| err(s, &v, "expected ip:port or off".into()))?,
            ),
            if given("http-addr") {
                HttpAddrOrigin::HttpAddr
            } else {
                HttpAddrOrigin::Default
            },
        ),
        (None, (None, _)) => (None, HttpAddrOrigin::HttpAddr),
    };
    let (log, s) = lookup("log");
    let log = log.unwrap_or_default();
    check_log_filter(&log).map_err(|e| err(s, &log, e))?;
    let (format, s) = lookup("log-format");
    let format = format.unwrap_or_default();
    let log_json = match format.as_str() {
        "text" => false,
        "json" => true,
        _ => return Err(err(s, &format, "expected text or json".into())),
    };

    let (traces, s) = lookup("traces");
    let traces = traces.unwrap_or_default();
    let traces = match traces.as_str() {
        "otlp" => true,
        "none" => false,
        _ => return Err(err(s, &traces, "expected otlp or none".into())),
    };
    let (max, s) = lookup("max-list-entries");
    let max = max.unwrap_or_default();
    let max_list_entries: usize = max
        .parse()
        .ok()
        .filter(|n| *n >= 1)
        .ok_or_else(|| err(s, &max, "expected a whole number >= 1".into()))?;
    let (bytes, s) = lookup("max-list-bytes");
    let bytes = bytes.unwrap_or_default();
    let max_list_bytes = parse_bytes(&bytes)
        .filter(|n| *n >= 1024)
        .ok_or_else(|| err(s, &bytes, "expected a size >= 1KiB, such as 256MiB".into()))?;
    let (percent, s) = lookup("mass-failure-percent");
    let percent = percent.unwrap_or_default();
    let mass_failure_percent: u32 = percent
        .trim_end_matches('%')
        .parse()
        .ok()
        .filter(|n| *n <= 100)
        .ok_or_else(|| err(s, &percent, "expected a whole number from 0 to 100".into()))?;
    let mass_failure_confirm = required("mass-failure-confirm", NS)?;
    let (replicas, s) = lookup("redis-wait-replicas");
    let replicas = replicas.unwrap_or_default();
    let redis_wait_replicas: u32 = replicas
        .parse()
        .ok()
        .filter(|n| *n <= 64)
        .ok_or_else(|| err(s, &replicas, "expected a whole number from 0 to 64".into()))?;
    let (redis_wait_timeout, v) = duration("redis-wait-timeout", MS)?.expect("has a default");
    // A WAIT must fit in a renewal's budget: what is left of the deadline
    // after the renewal interval.
    let budget = lease.renew_deadline - lease.renew_interval;
    if redis_wait_replicas > 0 && redis_wait_timeout >= budget {
        return Err(err(
            setting("redis-wait-timeout"),
            &v,
            format!(
                "must be shorter than -lease-renew-deadline minus -lease-renew-interval ({budget:?}) so that a WAIT fits in a renewal"
            ),
        ));
    }
    Ok(Config {
        redis_url,
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
        log_json,
        traces,
        max_list_entries,
        max_list_bytes,
        mass_failure_percent,
        mass_failure_confirm,
        redis_wait_replicas,
        redis_wait_timeout,
        redis_tls,
        ping_tls,
        redis_cluster,
    })
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
        let raw = RawConfig::default().with("ping-timeout", "2s");
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
        let e = bad(RawConfig::default().with("poll-interval", "fast"));
        assert_eq!(
            (e.flag, e.env, e.value.as_str()),
            ("poll-interval", "POLL_INTERVAL", "fast")
        );
        assert!(
            e.to_string()
                .starts_with("invalid -poll-interval (env POLL_INTERVAL) value \"fast\""),
            "{e}"
        );
        let e = bad(RawConfig::default().with("ping-timeout", "0s"));
        assert_eq!(e.flag, "ping-timeout");
        let e = bad(RawConfig::default().with("lease-renew-deadline", "3s"));
        assert_eq!(e.flag, "lease-renew-deadline");
        let e = bad(RawConfig::default().with("failure-threshold", "0"));
        assert_eq!(e.flag, "failure-threshold");
        let e = bad(RawConfig::default().with("services-namespaces", " , "));
        assert_eq!(e.flag, "services-namespaces");
        let e = bad(RawConfig::default().with("distribution-namespace", "a{}b"));
        assert_eq!(e.flag, "distribution-namespace");
        let e = bad(RawConfig::default().with("redis-url", "http://x"));
        assert_eq!(e.flag, "redis-url");
        let e = bad(RawConfig::default().with("http-addr", "localhost"));
        assert_eq!(e.flag, "http-addr");
        let e = bad(RawConfig::default().with("prom-port", "99999"));
        assert_eq!(e.flag, "prom-port");
        let e = bad(RawConfig::default().with("log-format", "xml"));
        assert_eq!(e.flag, "log-format");
        let e = bad(RawConfig::default().with("ka-permit-without-stream", "maybe"));
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
        assert_eq!(addr(RawConfig::default().with("http-addr", "off")), None);
        let go = RawConfig::default()
            .with("prom-port", "9100")
            .with("http-addr", "127.0.0.1:1");
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
            .with("redis-url", "redis://app@h:1")
            .with("redis-pass", "p");
        assert_eq!(
            resolve(&raw, &no_env).unwrap().redis_url,
            "redis://app:p@h:1"
        );
        let missing = RawConfig::default().with("redis-password-file", "/nonexistent/pw");
        let e = resolve(&missing, &no_env).unwrap_err();
        assert_eq!(e.flag, "redis-password-file");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn redis_addrs_replaces_only_the_host() {
        let raw = RawConfig::default()
            .with("redis-url", "rediss://app:pw@old:6379/3")
            .with("redis-addrs", "new:6380");
        assert_eq!(
            resolve(&raw, &no_env).unwrap().redis_url,
            "rediss://app:pw@new:6380/3"
        );
    }

    #[test]
    fn several_nodes_mean_cluster() {
        let raw = RawConfig::default()
            .with("redis-addrs", "a:7000, b:7001,c:7002")
            .with("redis-pass", "pw");
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
        let one = RawConfig::default().with("redis-cluster", "true");
        let c = resolve(&one, &no_env).unwrap();
        assert!(c.redis_cluster && c.redis_options().is_cluster());
        let bad = RawConfig::default().with("redis-url", "redis://a:1,http://b:2");
        assert_eq!(resolve(&bad, &no_env).unwrap_err().flag, "redis-url");
    }

    #[test]
    fn redis_addrs_and_password() {
        let raw = RawConfig::default()
            .with("redis-addrs", "10.0.0.5:6380")
            .with("redis-pass", "p@ss:w/rd");
        let c = resolve(&raw, &no_env).unwrap();
        assert_eq!(c.redis_url, "redis://:p%40ss%3Aw%2Frd@10.0.0.5:6380");
        assert_eq!(c.redis_url_redacted(), "redis://:***@10.0.0.5:6380");
        assert_eq!(redact_url("redis://u:secret@h:1/0"), "redis://u:***@h:1/0");
        assert_eq!(redact_url("redis://h:1"), "redis://h:1");
    }

    #[test]
    fn go_style_flags_are_normalized() {
        let args = [
            "distributor",
            "-poll-interval=500ms",
            "-ping-timeout",
            "1s",
            "-h",
            "--log",
            "debug",
            "-5",
        ];
        let out = normalize_go_flags(args.iter().map(|s| s.to_string()));
        assert_eq!(
            out,
            [
                "distributor",
                "--poll-interval=500ms",
                "--ping-timeout",
                "1s",
                "-h",
                "--log",
                "debug",
                "-5"
            ]
        );
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
            .with("redis-pass", PW)
            .with("redis-url", format!("redis://u:{PW}@h:1"))
            .with("redis-addrs", format!("u:{PW}@h:1"));
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
                "redis://a:1,http://u:***@b:2",
            ),
            (
                " redis://a:1, redis://:secret@b:2",
                " redis://a:1, redis://:***@b:2",
            ),
            ("h:1,u:secret@h:2", "h:***@h:2"),
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
            assert_eq!(
                (e.flag, e.value.as_str()),
                ("redis-url", bad.rsplit(',').next().unwrap())
            );
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
    fn normalizing_never_slices_inside_a_character() {
        let args = [
            "distributor",
            "workunits",
            "add",
            "Ünit",
            "-é",
            "-Ü=1",
            "-",
            "-ab€",
        ];
        let out = normalize_go_flags(args.iter().map(|s| s.to_string()));
        assert_eq!(
            out,
            [
                "distributor",
                "workunits",
                "add",
                "Ünit",
                "-é",
                "-Ü=1",
                "-",
                "--ab€"
            ]
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
        let raw = RawConfig::default().with("http-addr", "0.0.0.0:9090");
        assert_eq!(
            resolve(&raw, &no_env).unwrap().http_addr_origin,
            HttpAddrOrigin::HttpAddr
        );
        let c = with_env(&[("PROM_PORT", "9090")]).unwrap();
        assert_eq!(c.http_addr_origin, HttpAddrOrigin::PromPort);
        assert_eq!(c.http_addr_origin.flag(), "-prom-port");
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
            ] {
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
