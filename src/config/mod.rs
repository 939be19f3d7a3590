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

mod redis_url;
mod table;
#[cfg(test)]
mod tests_support;
mod tls;
mod values;

use std::net::SocketAddr;
use std::time::Duration;

use crate::core::balance::Balance;
use crate::core::keys::Keys;
use crate::core::table::Assignment;
use crate::edge::tls::TlsFiles;

pub use crate::core::lease::LeaseTiming;
pub use crate::edge::grpc::Keepalive;
pub use redis_url::redact_url;
pub use table::*;
pub use values::{check_log_filter, parse_bytes, parse_duration};

use redis_url::redis_urls;
use tls::{ping_tls, redis_tls};

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
    /// What the split balances: count, or cost within a tolerance.
    pub balance: Balance,
    /// At most this many moves per solve (0: no limit).
    pub max_moves_per_cycle: usize,
    /// How long a member that becomes live without units waits before it
    /// takes units from live members (0: not at all).
    pub join_delay: Duration,
    /// `-quarantine-after` and `-quarantine-window`.
    pub quarantine: crate::core::quarantine::QuarantineRule,
    /// Redis replicas that must acknowledge (WAIT) lease and table writes.
    pub redis_wait_replicas: u32,
    pub redis_wait_timeout: Duration,
    /// Custom CA / client certificate for `rediss://`.
    pub redis_tls: TlsFiles,
    /// TLS for pings, when configured.
    pub ping_tls: Option<PingTls>,
    /// Redis Cluster mode (several seed URLs in `redis_url`, or forced).
    pub redis_cluster: bool,
    /// Redis Sentinel: `redis_url` lists the sentinels, asked for this master.
    pub redis_sentinel: Option<crate::edge::redis::SentinelOptions>,
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
            balance,
            max_moves_per_cycle,
            join_delay,
            quarantine,
            redis_wait_replicas,
            redis_wait_timeout,
            redis_tls,
            ping_tls,
            redis_cluster,
            redis_sentinel,
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
            .field("balance", balance)
            .field("max_moves_per_cycle", max_moves_per_cycle)
            .field("join_delay", join_delay)
            .field("quarantine", quarantine)
            .field("redis_wait_replicas", redis_wait_replicas)
            .field("redis_wait_timeout", redis_wait_timeout)
            .field("redis_tls", redis_tls)
            .field("ping_tls", ping_tls)
            .field("redis_cluster", redis_cluster)
            .field("redis_sentinel", redis_sentinel)
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
            sentinel: self.redis_sentinel.clone(),
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

    let quarantine_after = l.get(&QUARANTINE_AFTER)?;
    l.rule(quarantine_after != 1, &QUARANTINE_AFTER, || {
        "must be 0 (off) or at least 2: 1 would quarantine every unit of any member that dies"
            .to_string()
    })?;
    let quarantine = crate::core::quarantine::QuarantineRule {
        after: quarantine_after,
        window_ms: l.get(&QUARANTINE_WINDOW)?.as_millis() as u64,
        probation_ms: crate::core::quarantine::QuarantineRule::probation_for(
            poll_interval * failure_threshold + ping_timeout,
        ),
    };

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
    let redis_sentinel = redis_url::redis_sentinel(&l)?;
    let redis_cluster = redis_sentinel.is_none() && (l.get(&REDIS_CLUSTER)? || urls.len() > 1);
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
        balance: Balance::parse(l.get(&BALANCE)?, l.get(&BALANCE_TOLERANCE)?)
            .expect("a name of Balance::NAMES"),
        max_moves_per_cycle: l.get(&MAX_MOVES_PER_CYCLE)?,
        join_delay: l.get(&JOIN_DELAY)?,
        quarantine,
        redis_wait_replicas: l.get(&REDIS_WAIT_REPLICAS)?,
        redis_wait_timeout: l.get(&REDIS_WAIT_TIMEOUT)?,
        redis_tls,
        ping_tls,
        redis_cluster,
        redis_sentinel,
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::tests_support::{no_env, with_env};

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
        // A store given no limits (the CLI, a member) bounds reads as the
        // settings' defaults do.
        let d = crate::edge::redis::ListLimits::DEFAULT;
        assert_eq!((c.max_list_entries, c.max_list_bytes), (d.entries, d.bytes));
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
}
