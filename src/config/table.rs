//! The settings table: every setting's flag, environment variables, default,
//! help and [`Type`] with its bounds, and [`RawConfig`], the values given on
//! the command line.
//!
//! Pure. A value appears in errors and `Debug` output only as its setting's
//! [`Kind`] allows: a secret never, a URL with its passwords replaced by `***`.

use std::collections::BTreeMap;
use std::fmt::Display;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use crate::core::balance::{Balance, Tolerance};
use crate::core::keys::check_table_key;
use crate::core::table::Assignment;

use super::redis_url::{malformed_tail, redact_url, userinfo_spans};
#[cfg(doc)]
use super::resolve;
use super::values::{check_log_filter, parse_bytes, parse_duration};

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
    pub(super) fn secrets(self, value: &str) -> Vec<String> {
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
    pub(super) setting: Setting,
    pub(super) ty: T,
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
    REDIS_SENTINEL_MASTER: Given = Given, "redis-sentinel-master" ["REDIS_SENTINEL_MASTER"] = None, "NAME",
        "Redis Sentinel: the master name to ask the sentinels for; -redis-url then lists the sentinels (their user and password in the URLs), and -redis-user, -redis-pass or -redis-password-file authenticate to the master";
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
        "Most entries of a services or work-units list, or of a hash a holder reads whole ({T}:members, :loads, :costs, :controls, :weights, :transit); a longer one skips the cycle with an error naming it, and the table stays";
    MAX_LIST_BYTES: Bytes = Bytes(1 << 10), "max-list-bytes" ["MAX_LIST_BYTES"] = Some("64MiB"), "SIZE",
        "Largest list, or hash read whole, in bytes of Redis memory (MEMORY USAGE); a larger one skips the cycle with an error. Holder memory is about 11 MB + 212 B per unit + 5.5 bytes per list byte: 0.8 GB at the defaults";
    MASS_FAILURE_PERCENT: Percent = Percent, "mass-failure-percent" ["MASS_FAILURE_PERCENT"] = Some("50"), "PERCENT",
        "When more than this percent of a group's live members fail at once, the holder keeps their units until another replica or -mass-failure-confirm confirms it (100: off)";
    MASS_FAILURE_CONFIRM: Dur = Dur(NS), "mass-failure-confirm" ["MASS_FAILURE_CONFIRM"] = Some("10s"), "DURATION",
        "How long a mass failure that no other replica confirmed is held before the holder acts on it";
    HANDOFF_DELAY: Dur = Dur(Duration::ZERO), "handoff-delay" ["HANDOFF_DELAY"] = Some("10s"), "DURATION",
        "How long a member that does not acknowledge (one that only reads its row, as Go workers do) gets to stop a unit after the write that took the unit from its row, before another member gets it; 0: such a member's unit goes to the next member in that same write (members of the protocol still get their own wait)";
    ASSIGNMENT: AssignmentMode = AssignmentMode, "assignment" ["ASSIGNMENT"] = Some("ring"), "ring|sticky",
        "How units are split: ring (a function of the members and units, as the Go implementation does) or sticky (from the current table, moving the fewest units balance needs)";
    BALANCE: OneOf = OneOf(Balance::NAMES), "balance" ["BALANCE"] = Some("count"), "count|cost|load",
        "What the split balances: count (the number of units, weighted, as -assignment solves it; Go-compatible), cost (the units' costs in {T}:costs) or load (the loads members measure, in {T}:loads): with cost or load, each member within -balance-tolerance of its weighted share, moving the fewest units it can";
    BALANCE_TOLERANCE: TolerancePercent = TolerancePercent, "balance-tolerance" ["BALANCE_TOLERANCE"] = Some("10%"), "PERCENT",
        "With -balance cost or load: how far from its share a member's load may be before units move (0 to 100, to two decimals)";
    MAX_MOVES_PER_CYCLE: Whole<usize> = Whole { min: 0, max: None }, "max-moves-per-cycle" ["MAX_MOVES_PER_CYCLE"] = Some("0"), "N",
        "At most this many units are moving at once (revoked from a live owner, not yet granted to the next), in both modes; the rest follow as those moves complete. Units of failed or departed members are never held back. 0: no limit";
    JOIN_DELAY: Dur = Dur(Duration::ZERO), "join-delay" ["JOIN_DELAY"] = Some("0s"), "DURATION",
        "With -assignment sticky and -balance count: how long a member that becomes live without units waits before it takes units from live members; a member that leaves, fails or drains meanwhile gives its units to the waiting newcomers first, so a rolling restart moves each unit once. 0: a newcomer gets its share at once";
    QUARANTINE_AFTER: Whole<u32> = Whole { min: 0, max: Some(1000) }, "quarantine-after" ["QUARANTINE_AFTER"] = Some("3"), "N",
        "Quarantine a unit after this many deaths of members holding it (alone, not in a mass failure; of two members at least) within -quarantine-window: it goes to nobody, recorded in {T}:quarantine until `distributor workunits quarantine release`. A unit one death short is tried alone on another member first. 0: off; 1 is refused (it would quarantine every unit of any member that dies)";
    QUARANTINE_WINDOW: Dur = Dur(ms(1000)), "quarantine-window" ["QUARANTINE_WINDOW"] = Some("10m"), "DURATION",
        "How long a member's death counts against the units it held (-quarantine-after)";
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
    /// `-balance-tolerance`: a percent to two decimals, `%` optional.
    TolerancePercent => Tolerance: |_, s| Tolerance::parse(s)
        .ok_or_else(|| "expected a percent from 0 to 100, such as 10% or 2.5%".into());
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
pub(super) fn split_list(s: &str) -> Vec<String> {
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

    pub(super) fn get(&self, setting: &Setting) -> Option<&str> {
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

/// The settings as a Markdown table (flag, environment, default, meaning),
/// as the README shows it.
pub fn markdown_table() -> String {
    let cell = |t: &str| t.replace('|', "\\|");
    let mut out = String::from("| flag | environment | default | meaning |\n|---|---|---|---|\n");
    for s in SETTINGS {
        let env: Vec<String> = s.env.iter().map(|e| format!("`{e}`")).collect();
        let default = s
            .default
            .map_or("unset".to_string(), |d| format!("`{}`", cell(d)));
        out.push_str(&format!(
            "| `-{}` | {} | {} | {} |\n",
            s.flag,
            env.join(", "),
            default,
            cell(s.help)
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::tests_support::with_env;

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

    /// The README's configuration table is this table, rendered: rewrite it
    /// with `UPDATE_README=1 cargo test --lib the_readme_table`.
    #[test]
    fn the_readme_table_is_the_settings_table() {
        crate::doc_links::generated_block(
            "README.md",
            "| flag | environment | default | meaning |",
            &markdown_table(),
        );
    }
}
