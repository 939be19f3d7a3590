//! How a member finds Redis and the table, and how it is reached: the
//! options, their checks, and the one table of environment variables that
//! [`MemberOptions::from_env`] reads (the Python package reads the same).
//!
//! Guarantee: no error and no `Debug` output shows a Redis password, also
//! for malformed input.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use crate::core::duration::parse_duration;
use crate::core::handoff::{MAX_DEADLINE, MAX_WEIGHT};
use crate::edge::redis::SentinelOptions;
use crate::edge::redis::url::{display_urls, with_credentials};
use crate::edge::tls::TlsFiles;
use crate::error::MemberError;

/// The longest `load_report_interval`: a holder leaves out loads dated over
/// five minutes ago (`Timing::load_max_age`), so a living member writes
/// several times within that.
pub const MAX_LOAD_REPORT: Duration = Duration::from_secs(60);

/// How a member finds Redis and the table, and how it is reached.
///
/// Build it with named fields over the defaults, or from the environment:
///
/// ```
/// use distributor::MemberOptions;
///
/// let opts = MemberOptions {
///     redis_url: "redis://10.0.0.5:6379".into(),
///     services_key: "crawlers".into(),
///     weight: 2,
///     ..MemberOptions::default()
/// };
/// # let _ = opts;
/// ```
#[derive(Clone)]
pub struct MemberOptions {
    /// A Redis URL (`redis://[user:pass@]host[:port][/db]`, or `rediss://`),
    /// or several comma-separated seed nodes of a Redis Cluster.
    pub redis_url: String,
    /// The services list to register in (its group).
    pub services_key: String,
    /// The matching table key (`-distribution-namespace`).
    pub table_key: String,
    /// Where to serve gRPC; port 0 picks a free port. Unused when the
    /// application serves the member's services on its own server
    /// ([`super::MemberBuilder::start_without_server`]).
    pub listen: SocketAddr,
    /// The address others dial, which is also the member id. Default: `listen`
    /// as bound (with the actual port).
    pub advertise: Option<String>,
    pub reregister_interval: Duration,
    /// Fallback polling of the row, in case a notification is lost. Reads
    /// also extend the holds: at most half the deadline.
    pub poll_interval: Duration,
    /// The fencing deadline (default 10 s, at most 300 s): the hold on a unit
    /// ends this long after the earlier of the last read that showed it and
    /// the last ping. It must exceed the holder's poll interval + lease TTL +
    /// ping timeout (1 s + 2 s + 1 s by default) with margin, or a holder
    /// failover fences every member; a longer one makes moves away from a
    /// member that died or was cut off wait longer.
    pub deadline: Duration,
    /// How long [`super::Member::drain`] waits for the holder to move every
    /// unit away before it stops them itself (default 30 s).
    pub drain_timeout: Duration,
    /// Capacity weight reported to the holder (default 1, at most 1000);
    /// [`super::Member::set_weight`] changes it at run time.
    pub weight: u32,
    /// Half-life of the smoothing of [`super::Member::report_load`]'s samples
    /// (default 60 s; zero: the last sample alone).
    pub load_half_life: Duration,
    /// How often the smoothed loads are written to `{T}:loads` once the
    /// application reported one (default 10 s).
    pub load_report_interval: Duration,
    /// Custom CA / client certificate for a `rediss://` URL.
    pub redis_tls: TlsFiles,
    /// Redis Cluster mode with one seed URL (several comma-separated URLs in
    /// `redis_url` always mean a cluster, unless they name sentinels).
    pub redis_cluster: bool,
    /// Redis Sentinel: `redis_url` lists the sentinels (their user and
    /// password in the URLs), asked for this master, with its credentials.
    pub redis_sentinel: Option<SentinelOptions>,
    /// Serve the ping over TLS with this certificate and key; with a CA, also
    /// require the distributor's client certificate (mTLS).
    pub tls: Option<TlsFiles>,
}

impl Default for MemberOptions {
    /// The daemon's defaults for the shared settings: Redis on
    /// `redis://127.0.0.1:6379`, the list `sys-robots-list`, the table
    /// `sys-matching-table`; serving on a free port of 127.0.0.1.
    fn default() -> MemberOptions {
        MemberOptions {
            redis_url: "redis://127.0.0.1:6379".into(),
            services_key: "sys-robots-list".into(),
            table_key: "sys-matching-table".into(),
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            advertise: None,
            reregister_interval: Duration::from_secs(5),
            poll_interval: Duration::from_secs(1),
            deadline: Duration::from_secs(10),
            drain_timeout: Duration::from_secs(30),
            weight: 1,
            load_half_life: Duration::from_secs(60),
            load_report_interval: Duration::from_secs(10),
            redis_tls: TlsFiles::default(),
            redis_cluster: false,
            redis_sentinel: None,
            tls: None,
        }
    }
}

impl std::fmt::Debug for MemberOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemberOptions")
            .field("redis_url", &display_urls(&self.redis_url))
            .field("services_key", &self.services_key)
            .field("table_key", &self.table_key)
            .field("listen", &self.listen)
            .field("advertise", &self.advertise)
            .field("reregister_interval", &self.reregister_interval)
            .field("poll_interval", &self.poll_interval)
            .field("deadline", &self.deadline)
            .field("drain_timeout", &self.drain_timeout)
            .field("weight", &self.weight)
            .field("load_half_life", &self.load_half_life)
            .field("load_report_interval", &self.load_report_interval)
            .field("redis_tls", &self.redis_tls)
            .field("redis_cluster", &self.redis_cluster)
            .field("redis_sentinel", &self.redis_sentinel)
            .field("tls", &self.tls)
            .finish()
    }
}

/// One environment variable [`MemberOptions::from_env`] reads: its names
/// (the first is documented; the others are aliases), its default, what it
/// sets, and how.
pub struct EnvVar {
    pub names: &'static [&'static str],
    pub default: &'static str,
    pub help: &'static str,
    /// Whether the value may hold a secret: an error about it never quotes it.
    secret: bool,
    apply: fn(&mut MemberOptions, &mut Credentials, &str) -> Result<(), String>,
}

/// `REDIS_USER`, `REDIS_PASS` and `REDIS_SENTINEL_MASTER`: once all is
/// read, the credentials go into every URL, or with Sentinel to the master.
#[derive(Default)]
struct Credentials {
    user: Option<String>,
    pass: Option<String>,
    sentinel_master: Option<String>,
    /// `REDIS_TLS`: `rediss://` for every URL.
    tls: bool,
}

fn duration(s: &str) -> Result<Duration, String> {
    parse_duration(s)
}

fn boolean(s: &str) -> Result<bool, String> {
    match s.trim().to_ascii_lowercase().as_str() {
        "1" | "true" | "yes" | "on" => Ok(true),
        "0" | "false" | "no" | "off" => Ok(false),
        _ => Err("not a boolean (true or false)".into()),
    }
}

fn files(s: &str) -> Vec<PathBuf> {
    s.split(',')
        .map(str::trim)
        .filter(|f| !f.is_empty())
        .map(PathBuf::from)
        .collect()
}

fn ping_tls(o: &mut MemberOptions) -> &mut TlsFiles {
    o.tls.get_or_insert_with(TlsFiles::default)
}

/// Every variable [`MemberOptions::from_env`] reads. The Redis ones have
/// the daemon's names, so that one environment can serve both.
pub static MEMBER_ENV: &[EnvVar] = &[
    EnvVar {
        names: &["REDIS_URL"],
        default: "redis://127.0.0.1:6379",
        help: "Redis URL, or comma-separated Redis Cluster seed URLs",
        secret: true,
        apply: |o, _, v| {
            o.redis_url = v.trim().to_string();
            Ok(())
        },
    },
    EnvVar {
        names: &["REDIS_USER", "REDIS_USERNAME"],
        default: "",
        help: "Redis ACL user (replaces the URLs' user)",
        secret: false,
        apply: |_, c, v| {
            c.user = Some(v.to_string());
            Ok(())
        },
    },
    EnvVar {
        names: &["REDIS_PASS", "REDIS_PASSWORD"],
        default: "",
        help: "Redis password (replaces the URLs' password)",
        secret: true,
        apply: |_, c, v| {
            c.pass = Some(v.to_string());
            Ok(())
        },
    },
    EnvVar {
        names: &["REDIS_PASSWORD_FILE"],
        default: "",
        help: "File holding the Redis password (a trailing newline is ignored); REDIS_PASS wins",
        secret: false,
        apply: |_, c, v| {
            let text =
                std::fs::read_to_string(v.trim()).map_err(|e| format!("cannot read it: {e}"))?;
            let pass = text.strip_suffix('\n').unwrap_or(&text);
            let pass = pass.strip_suffix('\r').unwrap_or(pass);
            c.pass.get_or_insert_with(|| pass.to_string());
            Ok(())
        },
    },
    EnvVar {
        names: &["REDIS_TLS"],
        default: "false",
        help: "TLS to Redis, as rediss:// URLs",
        secret: false,
        apply: |_, c, v| {
            c.tls = boolean(v)?;
            Ok(())
        },
    },
    EnvVar {
        names: &["REDIS_ADDRS"],
        default: "",
        help: "The daemon's Go-style host:port list; not read by members, which refuse it (put the hosts in REDIS_URL)",
        secret: false,
        apply: |_, _, _| {
            Err("members take their Redis hosts from REDIS_URL only; unset REDIS_ADDRS or give the same hosts as URLs".into())
        },
    },
    EnvVar {
        names: &["REDIS_CLUSTER"],
        default: "false",
        help: "Redis Cluster mode with a single seed URL",
        secret: false,
        apply: |o, _, v| {
            o.redis_cluster = boolean(v)?;
            Ok(())
        },
    },
    EnvVar {
        names: &["REDIS_SENTINEL_MASTER"],
        default: "",
        help: "Redis Sentinel: the master name; REDIS_URL then lists the sentinels, and REDIS_USER and REDIS_PASS are the master's",
        secret: false,
        apply: |_, c, v| {
            c.sentinel_master = Some(v.trim().to_string());
            Ok(())
        },
    },
    EnvVar {
        names: &["REDIS_TLS_CA", "REDIS_ROOTCA_CERTS"],
        default: "",
        help: "Comma-separated PEM CA files to verify Redis (default: system roots)",
        secret: false,
        apply: |o, _, v| {
            o.redis_tls.ca = files(v);
            Ok(())
        },
    },
    EnvVar {
        names: &["REDIS_TLS_CERT"],
        default: "",
        help: "PEM client certificate for Redis (with REDIS_TLS_KEY)",
        secret: false,
        apply: |o, _, v| {
            o.redis_tls.cert = Some(v.trim().into());
            Ok(())
        },
    },
    EnvVar {
        names: &["REDIS_TLS_KEY"],
        default: "",
        help: "PEM client key for Redis (with REDIS_TLS_CERT)",
        secret: false,
        apply: |o, _, v| {
            o.redis_tls.key = Some(v.trim().into());
            Ok(())
        },
    },
    EnvVar {
        names: &["DISTRIBUTION_NAMESPACE"],
        default: "sys-matching-table",
        help: "The matching table key",
        secret: false,
        apply: |o, _, v| {
            o.table_key = v.trim().to_string();
            Ok(())
        },
    },
    EnvVar {
        names: &["MEMBER_SERVICES_KEY"],
        default: "sys-robots-list",
        help: "The services list (group) to register in",
        secret: false,
        apply: |o, _, v| {
            o.services_key = v.trim().to_string();
            Ok(())
        },
    },
    EnvVar {
        names: &["MEMBER_LISTEN"],
        default: "127.0.0.1:0",
        help: "IP:PORT to serve the ping on (port 0: a free one)",
        secret: false,
        apply: |o, _, v| {
            o.listen = v.trim().parse().map_err(|_| "not an IP:PORT".to_string())?;
            Ok(())
        },
    },
    EnvVar {
        names: &["MEMBER_ADVERTISE"],
        default: "",
        help: "host:port the distributor dials, and the member id (needed when listening on all interfaces)",
        secret: false,
        apply: |o, _, v| {
            o.advertise = Some(v.trim().to_string());
            Ok(())
        },
    },
    EnvVar {
        names: &["MEMBER_WEIGHT"],
        default: "1",
        help: "Capacity weight, 1 to 1000",
        secret: false,
        apply: |o, _, v| {
            o.weight = v
                .trim()
                .parse()
                .map_err(|_| "not a whole number".to_string())?;
            Ok(())
        },
    },
    EnvVar {
        names: &["MEMBER_DEADLINE"],
        default: "10s",
        help: "Fencing deadline (at most 300s)",
        secret: false,
        apply: |o, _, v| {
            o.deadline = duration(v)?;
            Ok(())
        },
    },
    EnvVar {
        names: &["MEMBER_POLL_INTERVAL"],
        default: "1s",
        help: "Fallback polling of the row (at most half the deadline)",
        secret: false,
        apply: |o, _, v| {
            o.poll_interval = duration(v)?;
            Ok(())
        },
    },
    EnvVar {
        names: &["MEMBER_REREGISTER_INTERVAL"],
        default: "5s",
        help: "How often the member registers again (healing a Redis that lost its data)",
        secret: false,
        apply: |o, _, v| {
            o.reregister_interval = duration(v)?;
            Ok(())
        },
    },
    EnvVar {
        names: &["MEMBER_DRAIN_TIMEOUT"],
        default: "30s",
        help: "How long a drain waits for the holder before stopping every unit itself",
        secret: false,
        apply: |o, _, v| {
            o.drain_timeout = duration(v)?;
            Ok(())
        },
    },
    EnvVar {
        names: &["MEMBER_LOAD_HALF_LIFE"],
        default: "60s",
        help: "Half-life of the smoothing of reported loads",
        secret: false,
        apply: |o, _, v| {
            o.load_half_life = duration(v)?;
            Ok(())
        },
    },
    EnvVar {
        names: &["MEMBER_LOAD_REPORT_INTERVAL"],
        default: "10s",
        help: "How often smoothed loads are written to {T}:loads (at most 1m)",
        secret: false,
        apply: |o, _, v| {
            o.load_report_interval = duration(v)?;
            Ok(())
        },
    },
    EnvVar {
        names: &["MEMBER_TLS_CERT"],
        default: "",
        help: "PEM certificate to serve the ping over TLS (with MEMBER_TLS_KEY)",
        secret: false,
        apply: |o, _, v| {
            ping_tls(o).cert = Some(v.trim().into());
            Ok(())
        },
    },
    EnvVar {
        names: &["MEMBER_TLS_KEY"],
        default: "",
        help: "PEM key for MEMBER_TLS_CERT",
        secret: false,
        apply: |o, _, v| {
            ping_tls(o).key = Some(v.trim().into());
            Ok(())
        },
    },
    EnvVar {
        names: &["MEMBER_TLS_CA"],
        default: "",
        help: "PEM CA of the distributor's client certificates: requires them (mTLS)",
        secret: false,
        apply: |o, _, v| {
            ping_tls(o).ca = files(v);
            Ok(())
        },
    },
];

impl MemberOptions {
    /// The options from the process environment ([`MEMBER_ENV`]), over the
    /// defaults, checked. An empty variable counts as unset.
    pub fn from_env() -> Result<MemberOptions, MemberError> {
        MemberOptions::from_lookup(|name| std::env::var(name).ok())
    }

    /// [`MemberOptions::from_env`] with variables from `lookup`.
    pub fn from_lookup(
        lookup: impl Fn(&str) -> Option<String>,
    ) -> Result<MemberOptions, MemberError> {
        let mut opts = MemberOptions::default();
        let mut credentials = Credentials::default();
        for var in MEMBER_ENV {
            let Some((name, value)) = var
                .names
                .iter()
                .find_map(|n| lookup(n).filter(|v| !v.is_empty()).map(|v| (*n, v)))
            else {
                continue;
            };
            (var.apply)(&mut opts, &mut credentials, &value).map_err(|reason| {
                MemberError::Env {
                    var: name,
                    value: if var.secret {
                        "(hidden)".into()
                    } else {
                        value.clone()
                    },
                    reason,
                }
            })?;
        }
        if credentials.tls {
            opts.redis_url = opts
                .redis_url
                .split(',')
                .map(|u| match u.trim().strip_prefix("redis://") {
                    Some(rest) => format!("rediss://{rest}"),
                    None => u.trim().to_string(),
                })
                .collect::<Vec<_>>()
                .join(",");
        }
        if let Some(master) = credentials.sentinel_master {
            opts.redis_sentinel = Some(SentinelOptions {
                master,
                username: credentials.user,
                password: credentials.pass,
            });
        } else if credentials.user.is_some() || credentials.pass.is_some() {
            opts.redis_url = opts
                .redis_url
                .split(',')
                .map(|u| {
                    with_credentials(
                        u.trim(),
                        credentials.user.as_deref(),
                        credentials.pass.as_deref(),
                    )
                })
                .collect::<Vec<_>>()
                .join(",");
        }
        opts.check()?;
        Ok(opts)
    }

    /// Every option in range; the reason names the option and its value.
    pub fn check(&self) -> Result<(), MemberError> {
        let bad = |name: &'static str, reason: String| Err(MemberError::Option { name, reason });
        for url in self.redis_url.split(',') {
            if redis::parse_redis_url(url.trim()).is_none() {
                return bad(
                    "redis_url",
                    format!("{} is not a redis:// or rediss:// URL", display_urls(url)),
                );
            }
        }
        for (name, key) in [
            ("services_key", &self.services_key),
            ("table_key", &self.table_key),
        ] {
            if key.trim().is_empty() {
                return bad(name, "must not be empty".into());
            }
        }
        if self.deadline.is_zero() || self.deadline > MAX_DEADLINE {
            return bad(
                "deadline",
                format!("{:?} is not in (0, {MAX_DEADLINE:?}]", self.deadline),
            );
        }
        if self.poll_interval.is_zero() || self.poll_interval * 2 > self.deadline {
            return bad(
                "poll_interval",
                format!(
                    "{:?} must be positive and at most half the deadline ({:?}): reads extend the holds",
                    self.poll_interval, self.deadline
                ),
            );
        }
        if self.reregister_interval.is_zero() {
            return bad("reregister_interval", "must be positive".into());
        }
        let stale = crate::core::timing::Timing::DEFAULT.load_max_age;
        if self.load_report_interval.is_zero() || self.load_report_interval > MAX_LOAD_REPORT {
            return bad(
                "load_report_interval",
                format!(
                    "{:?} must be positive and at most {MAX_LOAD_REPORT:?}: a holder leaves out loads older than {stale:?}",
                    self.load_report_interval
                ),
            );
        }
        check_weight(self.weight)?;
        if let Some(s) = &self.redis_sentinel {
            if s.master.trim().is_empty() {
                return bad("redis_sentinel", "the master name must not be empty".into());
            }
            if self.redis_cluster {
                return bad(
                    "redis_sentinel",
                    "Sentinel and redis_cluster exclude each other".into(),
                );
            }
        }
        if let Some(tls) = &self.tls
            && tls.cert.is_some() != tls.key.is_some()
        {
            return bad(
                "tls",
                "a certificate needs its key, and a key its certificate".into(),
            );
        }
        Ok(())
    }
}

/// A capacity weight in range, or the error naming it.
pub(super) fn check_weight(weight: u32) -> Result<(), MemberError> {
    if (1..=MAX_WEIGHT).contains(&weight) {
        Ok(())
    } else {
        Err(MemberError::Option {
            name: "weight",
            reason: format!("{weight} is not in 1..={MAX_WEIGHT}"),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    /// [`MEMBER_ENV`] as a Markdown table (variable, default, meaning), as the
    /// README shows it.
    fn env_markdown_table() -> String {
        let mut out = String::from("| variable | default | meaning |\n|---|---|---|\n");
        for v in MEMBER_ENV {
            let names: Vec<String> = v.names.iter().map(|n| format!("`{n}`")).collect();
            let default = if v.default.is_empty() {
                "unset".to_string()
            } else {
                format!("`{}`", v.default)
            };
            out.push_str(&format!(
                "| {} | {default} | {} |\n",
                names.join(", "),
                v.help.replace('|', "\\|")
            ));
        }
        out
    }

    fn from(vars: &[(&str, &str)]) -> Result<MemberOptions, MemberError> {
        let vars: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        MemberOptions::from_lookup(|n| vars.get(n).cloned())
    }

    /// The README's table of variables is [`MEMBER_ENV`], rendered
    /// (`UPDATE_README=1 cargo test --lib` rewrites it).
    #[test]
    fn the_readme_lists_the_variables() {
        crate::doc_links::generated_block(
            "README.md",
            "| variable | default | meaning |",
            &env_markdown_table(),
        );
    }

    #[test]
    fn no_variable_gives_the_defaults() {
        let o = from(&[]).unwrap();
        let d = MemberOptions::default();
        assert_eq!(format!("{o:?}"), format!("{d:?}"));
    }

    #[test]
    fn every_variable_sets_its_option() {
        let file = std::env::temp_dir().join(format!("member-env-pw-{}", std::process::id()));
        std::fs::write(&file, "from-file\n").unwrap();
        let file = file.to_string_lossy().to_string();
        let given = [
            ("REDIS_URL", "redis://a:1,redis://b:2"),
            ("REDIS_PASSWORD_FILE", file.as_str()),
            ("REDIS_TLS", "true"),
            ("REDIS_USERNAME", "app"),
            ("REDIS_PASSWORD", "p@ss"),
            ("REDIS_CLUSTER", "true"),
            ("REDIS_TLS_CA", "/ca1.pem, /ca2.pem"),
            ("REDIS_TLS_CERT", "/c.pem"),
            ("REDIS_TLS_KEY", "/k.pem"),
            ("DISTRIBUTION_NAMESPACE", "table"),
            ("MEMBER_SERVICES_KEY", "crawlers"),
            ("MEMBER_LISTEN", "0.0.0.0:7001"),
            ("MEMBER_ADVERTISE", "10.0.0.7:7001"),
            ("MEMBER_WEIGHT", "3"),
            ("MEMBER_DEADLINE", "20s"),
            ("MEMBER_POLL_INTERVAL", "500ms"),
            ("MEMBER_REREGISTER_INTERVAL", "7s"),
            ("MEMBER_DRAIN_TIMEOUT", "1m"),
            ("MEMBER_LOAD_HALF_LIFE", "0"),
            ("MEMBER_LOAD_REPORT_INTERVAL", "2s"),
            ("MEMBER_TLS_CERT", "/m.pem"),
            ("MEMBER_TLS_KEY", "/mk.pem"),
            ("MEMBER_TLS_CA", "/mca.pem"),
        ];
        // Every variable of the table is given here (a new one must be too),
        // but Sentinel's, which excludes a cluster, and the refused one (below).
        for var in MEMBER_ENV {
            assert!(
                ["REDIS_SENTINEL_MASTER", "REDIS_ADDRS"].contains(&var.names[0])
                    || given.iter().any(|(n, _)| var.names.contains(n)),
                "{} is not tested",
                var.names[0]
            );
        }
        let o = from(&given).unwrap();
        // REDIS_PASSWORD wins over the file; REDIS_TLS makes every URL rediss.
        assert_eq!(
            o.redis_url,
            "rediss://app:p%40ss@a:1,rediss://app:p%40ss@b:2"
        );
        let o2 = from(&[("REDIS_URL", "redis://h:1"), ("REDIS_PASSWORD_FILE", &file)]).unwrap();
        assert_eq!(o2.redis_url, "redis://:from-file@h:1");
        let e = from(&[("REDIS_ADDRS", "h:1")]).unwrap_err().to_string();
        assert!(e.contains("REDIS_ADDRS") && e.contains("REDIS_URL"), "{e}");
        assert!(o.redis_cluster);
        assert_eq!(
            o.redis_tls,
            TlsFiles {
                ca: vec!["/ca1.pem".into(), "/ca2.pem".into()],
                cert: Some("/c.pem".into()),
                key: Some("/k.pem".into()),
            }
        );
        assert_eq!(
            (o.table_key.as_str(), o.services_key.as_str()),
            ("table", "crawlers")
        );
        assert_eq!(o.listen, "0.0.0.0:7001".parse().unwrap());
        assert_eq!(o.advertise.as_deref(), Some("10.0.0.7:7001"));
        assert_eq!(o.weight, 3);
        let s = Duration::from_secs;
        assert_eq!(
            (
                o.deadline,
                o.poll_interval,
                o.reregister_interval,
                o.drain_timeout
            ),
            (s(20), Duration::from_millis(500), s(7), s(60))
        );
        assert_eq!((o.load_half_life, o.load_report_interval), (s(0), s(2)));
        assert_eq!(
            o.tls,
            Some(TlsFiles {
                ca: vec!["/mca.pem".into()],
                cert: Some("/m.pem".into()),
                key: Some("/mk.pem".into()),
            })
        );
    }

    #[test]
    fn with_sentinel_the_urls_name_sentinels_and_the_credentials_are_the_masters() {
        let o = from(&[
            (
                "REDIS_URL",
                "redis://:sentinel-pw@s1:26379,redis://s2:26379",
            ),
            ("REDIS_SENTINEL_MASTER", "main"),
            ("REDIS_USER", "app"),
            ("REDIS_PASS", "master-pw"),
        ])
        .unwrap();
        assert_eq!(
            o.redis_url,
            "redis://:sentinel-pw@s1:26379,redis://s2:26379"
        );
        assert_eq!(
            o.redis_sentinel,
            Some(SentinelOptions {
                master: "main".into(),
                username: Some("app".into()),
                password: Some("master-pw".into()),
            })
        );
        let shown = format!("{o:?}");
        assert!(
            !shown.contains("sentinel-pw") && !shown.contains("master-pw"),
            "{shown}"
        );
        let e = from(&[("REDIS_SENTINEL_MASTER", "main"), ("REDIS_CLUSTER", "1")]).unwrap_err();
        assert!(e.to_string().contains("exclude each other"), "{e}");
    }

    #[test]
    fn a_bad_value_names_its_variable_and_value() {
        for (var, value, says) in [
            ("MEMBER_WEIGHT", "heavy", "not a whole number"),
            ("MEMBER_DEADLINE", "10", "missing unit"),
            ("MEMBER_LISTEN", "localhost", "not an IP:PORT"),
            ("REDIS_CLUSTER", "maybe", "not a boolean"),
        ] {
            let e = from(&[(var, value)]).unwrap_err().to_string();
            assert!(
                e.contains(var) && e.contains(value) && e.contains(says),
                "{e}"
            );
        }
        let e = from(&[("MEMBER_WEIGHT", "1001")]).unwrap_err().to_string();
        assert!(e.contains("weight") && e.contains("1001"), "{e}");
        let e = from(&[("MEMBER_POLL_INTERVAL", "6s")])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("poll_interval") && e.contains("half the deadline"),
            "{e}"
        );
        let e = from(&[("MEMBER_LOAD_REPORT_INTERVAL", "61s")])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("load_report_interval") && e.contains("61s") && e.contains("at most 60s"),
            "{e}"
        );
        assert!(from(&[("MEMBER_LOAD_REPORT_INTERVAL", "60s")]).is_ok());
    }

    #[test]
    fn no_error_and_no_debug_output_shows_a_password() {
        for url in [
            "redis://u:Sup3rSecret@h:1,garbage:Sup3rSecret",
            "redis://:Sup3r,Secret@h:1",
            "http://u:Sup3rSecret@h",
        ] {
            let e = from(&[("REDIS_URL", url)]).unwrap_err();
            for text in [e.to_string(), format!("{e:?}")] {
                assert!(
                    !text.contains("Sup3r") && !text.contains("Secret"),
                    "{text}"
                );
            }
        }
        let o = from(&[("REDIS_URL", "redis://h:1"), ("REDIS_PASS", "Sup3rSecret")]).unwrap();
        assert!(!format!("{o:?}").contains("Sup3rSecret"), "{o:?}");
    }
}
