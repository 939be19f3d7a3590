//! The command line: clap's definition of flags and operator commands, and
//! [`parse`], the whole pipeline from raw arguments to a validated
//! [`Config`]: Go-style flags normalized, clap, then [`config::resolve`].
//!
//! [`parse`] never panics and never exits: any input, non-UTF-8 included,
//! gives a [`CliError`]; `main` prints it and exits (help and version with 0,
//! everything else with 2).

pub mod commands;
pub mod daemon;
pub mod report;

pub use commands::{Command, ServicesOp, UnitsOp};

use std::ffi::OsString;

use clap::{CommandFactory, FromArgMatches, Parser};

use crate::config::{self, Config, ConfigError, Kind, RawConfig};

/// Splits a changing list of work units among live workers; a drop-in
/// replacement for scientificideas/distributor. Every flag also reads an
/// environment variable (see README); Go-style `-flag=value` works too.
#[derive(Parser, Debug)]
#[command(name = "distributor", version)]
pub struct Cli {
    #[command(flatten)]
    pub flags: Flags,
    #[command(subcommand)]
    pub command: Option<Command>,
}

/// Daemon settings; every one also reads an environment variable (README).
/// `Debug` shows values as their settings' kinds allow (no password).
#[derive(clap::Args)]
pub struct Flags {
    #[arg(long, global = true, value_name = "KEYS")]
    pub services_namespaces: Option<String>,
    #[arg(long, global = true, value_name = "KEY")]
    pub workunits_namespace: Option<String>,
    #[arg(long, global = true, value_name = "KEY")]
    pub distribution_namespace: Option<String>,
    #[arg(long, global = true, value_name = "DURATION")]
    pub poll_interval: Option<String>,
    #[arg(long, global = true, value_name = "DURATION")]
    pub ping_timeout: Option<String>,
    #[arg(long, global = true, value_name = "URL")]
    pub redis_url: Option<String>,
    #[arg(long, global = true, value_name = "HOST:PORT")]
    pub redis_addrs: Option<String>,
    #[arg(long, global = true, value_name = "PASSWORD")]
    pub redis_pass: Option<String>,
    #[arg(long, global = true, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true")]
    pub redis_cluster: Option<String>,
    #[arg(long, global = true, value_name = "FILE")]
    pub redis_password_file: Option<String>,
    #[arg(long, global = true, value_name = "USER")]
    pub redis_user: Option<String>,
    #[arg(long, global = true, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true")]
    pub redis_tls: Option<String>,
    #[arg(long, global = true, value_name = "FILES")]
    pub redis_tls_ca: Option<String>,
    #[arg(long, global = true, value_name = "FILES")]
    pub redis_rootca_certs: Option<String>,
    #[arg(long, global = true, value_name = "FILE")]
    pub redis_tls_cert: Option<String>,
    #[arg(long, global = true, value_name = "FILE")]
    pub redis_tls_key: Option<String>,
    #[arg(long, global = true, value_name = "FILE")]
    pub ping_tls_ca: Option<String>,
    #[arg(long, global = true, value_name = "FILE")]
    pub ping_tls_cert: Option<String>,
    #[arg(long, global = true, value_name = "FILE")]
    pub ping_tls_key: Option<String>,
    #[arg(long, global = true, value_name = "NAME")]
    pub ping_tls_domain: Option<String>,
    #[arg(long, global = true, value_name = "N")]
    pub failure_threshold: Option<String>,
    #[arg(long, global = true, value_name = "DURATION")]
    pub forget_after: Option<String>,
    #[arg(long, global = true, value_name = "DURATION")]
    pub lease_ttl: Option<String>,
    #[arg(long, global = true, value_name = "DURATION")]
    pub lease_renew_interval: Option<String>,
    #[arg(long, global = true, value_name = "DURATION")]
    pub lease_renew_deadline: Option<String>,
    #[arg(long, global = true, value_name = "DURATION")]
    pub lease_retry_interval: Option<String>,
    #[arg(long, global = true, value_name = "DURATION")]
    pub census_interval: Option<String>,
    #[arg(long, global = true, value_name = "NAME")]
    pub replica_id: Option<String>,
    #[arg(long, global = true, value_name = "DURATION")]
    pub ka_time: Option<String>,
    #[arg(long, global = true, value_name = "DURATION")]
    pub ka_timeout: Option<String>,
    #[arg(long, global = true, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true")]
    pub ka_permit_without_stream: Option<String>,
    #[arg(long, global = true, value_name = "LEVEL")]
    pub log: Option<String>,
    #[arg(long, global = true, value_name = "IP:PORT|off")]
    pub http_addr: Option<String>,
    #[arg(long, global = true, value_name = "PORT")]
    pub prom_port: Option<String>,
    #[arg(long, global = true, value_name = "text|json")]
    pub log_format: Option<String>,
    #[arg(long, global = true, value_name = "otlp|none")]
    pub traces: Option<String>,
    #[arg(long, global = true, value_name = "N")]
    pub max_list_entries: Option<String>,
    #[arg(long, global = true, value_name = "SIZE")]
    pub max_list_bytes: Option<String>,
    #[arg(long, global = true, value_name = "PERCENT")]
    pub mass_failure_percent: Option<String>,
    #[arg(long, global = true, value_name = "DURATION")]
    pub mass_failure_confirm: Option<String>,
    #[arg(long, global = true, value_name = "N")]
    pub redis_wait_replicas: Option<String>,
    #[arg(long, global = true, value_name = "DURATION")]
    pub redis_wait_timeout: Option<String>,
    #[arg(long, global = true, value_name = "args|env")]
    pub config_type: Option<String>,
}

impl From<&Flags> for RawConfig {
    fn from(c: &Flags) -> RawConfig {
        RawConfig {
            services_namespaces: c.services_namespaces.clone(),
            workunits_namespace: c.workunits_namespace.clone(),
            distribution_namespace: c.distribution_namespace.clone(),
            poll_interval: c.poll_interval.clone(),
            ping_timeout: c.ping_timeout.clone(),
            redis_url: c.redis_url.clone(),
            redis_addrs: c.redis_addrs.clone(),
            redis_pass: c.redis_pass.clone(),
            redis_cluster: c.redis_cluster.clone(),
            redis_password_file: c.redis_password_file.clone(),
            redis_user: c.redis_user.clone(),
            redis_tls: c.redis_tls.clone(),
            redis_tls_ca: c.redis_tls_ca.clone(),
            redis_rootca_certs: c.redis_rootca_certs.clone(),
            redis_tls_cert: c.redis_tls_cert.clone(),
            redis_tls_key: c.redis_tls_key.clone(),
            ping_tls_ca: c.ping_tls_ca.clone(),
            ping_tls_cert: c.ping_tls_cert.clone(),
            ping_tls_key: c.ping_tls_key.clone(),
            ping_tls_domain: c.ping_tls_domain.clone(),
            failure_threshold: c.failure_threshold.clone(),
            forget_after: c.forget_after.clone(),
            lease_ttl: c.lease_ttl.clone(),
            lease_renew_interval: c.lease_renew_interval.clone(),
            lease_renew_deadline: c.lease_renew_deadline.clone(),
            lease_retry_interval: c.lease_retry_interval.clone(),
            census_interval: c.census_interval.clone(),
            replica_id: c.replica_id.clone(),
            ka_time: c.ka_time.clone(),
            ka_timeout: c.ka_timeout.clone(),
            ka_permit_without_stream: c.ka_permit_without_stream.clone(),
            log: c.log.clone(),
            http_addr: c.http_addr.clone(),
            prom_port: c.prom_port.clone(),
            log_format: c.log_format.clone(),
            traces: c.traces.clone(),
            max_list_entries: c.max_list_entries.clone(),
            max_list_bytes: c.max_list_bytes.clone(),
            mass_failure_percent: c.mass_failure_percent.clone(),
            mass_failure_confirm: c.mass_failure_confirm.clone(),
            redis_wait_replicas: c.redis_wait_replicas.clone(),
            redis_wait_timeout: c.redis_wait_timeout.clone(),
            config_type: c.config_type.clone(),
        }
    }
}

impl std::fmt::Debug for Flags {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        RawConfig::from(self).fmt(f)
    }
}

/// What the command line asks for.
#[derive(Debug)]
pub struct Invocation {
    pub config: Config,
    /// An operator command; `None` runs the daemon.
    pub command: Option<Command>,
}

/// Why the command line cannot run.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// Rejected by clap, or `--help` / `--version`: [`clap::Error::exit`]
    /// prints it (help and version on stdout, with exit code 0).
    #[error("{0}")]
    Clap(clap::Error),
    /// A setting is invalid (exit code 2).
    #[error("{0}")]
    Config(ConfigError),
}

impl CliError {
    /// The process exit code for this error.
    pub fn exit_code(&self) -> i32 {
        match self {
            CliError::Clap(e) => e.exit_code(),
            CliError::Config(_) => 2,
        }
    }
}

/// The clap command, with each flag's help, environment variables and default
/// taken from the one settings table that the README documents.
pub fn command() -> clap::Command {
    let mut cmd = Cli::command();
    for s in config::SETTINGS {
        let default = s
            .default
            .map(|d| format!(" [default: {d}]"))
            .unwrap_or_default();
        let help = format!("{} [env: {}]{default}", s.help, s.env.join(", "));
        // A value starting with '-' (`-poll-interval -1s`) is the flag's value,
        // as in Go, so that our own check names the flag; a bool's value is
        // optional, so a following flag stays a flag.
        let hyphen_values = s.kind != Kind::Bool;
        cmd = cmd.mut_arg(s.flag.replace('-', "_"), |a| {
            a.help(help).allow_hyphen_values(hyphen_values)
        });
    }
    cmd
}

/// Parses and validates a whole command line (`args` includes the program
/// name). `env` reads one environment variable; a value that is not UTF-8 is
/// an error naming it, never ignored.
pub fn parse<I, T>(args: I, env: &dyn Fn(&str) -> Option<OsString>) -> Result<Invocation, CliError>
where
    I: IntoIterator<Item = T>,
    T: Into<OsString>,
{
    let args = config::normalize_go_flags(args);
    let matches = command()
        .try_get_matches_from(args)
        .map_err(CliError::Clap)?;
    let cli = Cli::from_arg_matches(&matches).map_err(CliError::Clap)?;
    for s in config::SETTINGS {
        for name in s.env {
            if let Some(value) = env(name)
                && value.to_str().is_none()
            {
                let mut e = ConfigError::new(s, &value.to_string_lossy(), "not valid UTF-8");
                e.env = name;
                return Err(CliError::Config(e));
            }
        }
    }
    let env = |k: &str| env(k).and_then(|v| v.into_string().ok());
    let config = config::resolve(&RawConfig::from(&cli.flags), &env).map_err(CliError::Config)?;
    Ok(Invocation {
        config,
        command: cli.command,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::os::unix::ffi::OsStringExt;

    fn no_env(_: &str) -> Option<OsString> {
        None
    }

    fn parse_args(args: &[&str]) -> Result<Invocation, CliError> {
        parse(
            std::iter::once("distributor").chain(args.iter().copied()),
            &no_env,
        )
    }

    #[test]
    fn help_and_version_are_errors_that_exit_zero() {
        for arg in ["--help", "-h", "--version", "-V"] {
            let e = parse_args(&[arg]).unwrap_err();
            assert_eq!(e.exit_code(), 0, "{arg}");
        }
        let help = parse_args(&["--help"]).unwrap_err().to_string();
        assert!(
            help.contains("--poll-interval") && help.contains("at least 10ms"),
            "{help}"
        );
        let e = parse_args(&["--no-such-flag"]).unwrap_err();
        assert_eq!(e.exit_code(), 2);
    }

    #[test]
    fn values_starting_with_a_dash_reach_our_checks() {
        for args in [
            &["--poll-interval", "-1s"][..],
            &["-poll-interval", "-1s"],
            &["-poll-interval=-1s"],
            &["status", "--poll-interval", "-1s"],
        ] {
            match parse_args(args) {
                Err(CliError::Config(e)) => {
                    assert_eq!(
                        (e.flag, e.value.as_str()),
                        ("poll-interval", "-1s"),
                        "{args:?}"
                    )
                }
                other => panic!("{args:?}: {other:?}"),
            }
        }
        // A word starting with a dash after a value is a flag again.
        let i = parse_args(&["-log", "debug", "-poll-interval", "2s"]).unwrap();
        assert_eq!(i.config.poll_interval, std::time::Duration::from_secs(2));
        // Bool flags take no value from the next argument when it is a flag.
        let i = parse_args(&["-redis-tls", "-ka-time", "2s"]).unwrap();
        assert!(i.config.redis_url.starts_with("rediss://"));
    }

    #[test]
    fn non_ascii_and_non_utf8_arguments_are_errors() {
        let i = parse_args(&["workunits", "add", "Ünit", "€"]).unwrap();
        assert!(matches!(i.command, Some(Command::Workunits { .. })));
        let bad = OsString::from_vec(vec![b'u', 0xff, 0xfe]);
        for args in [
            vec![
                "distributor".into(),
                "workunits".into(),
                "add".into(),
                bad.clone(),
            ],
            vec!["distributor".into(), "--log".into(), bad.clone()],
            vec!["distributor".into(), bad.clone()],
        ] {
            let e = parse(args.clone(), &no_env).unwrap_err();
            assert_eq!(e.exit_code(), 2, "{args:?}: {e}");
        }
        let env = |k: &str| (k == "REDIS_PASSWORD").then(|| bad.clone());
        match parse(["distributor"], &env) {
            Err(CliError::Config(e)) => {
                assert_eq!((e.env, e.value.as_str()), ("REDIS_PASSWORD", "***"));
                assert!(e.to_string().contains("not valid UTF-8"), "{e}");
            }
            other => panic!("{other:?}"),
        }
    }

    /// One argument: a flag in any of its forms, a subcommand word, a value,
    /// or anything at all, UTF-8 or not.
    fn argument() -> impl Strategy<Value = OsString> {
        let flag =
            prop::sample::select(config::SETTINGS.iter().map(|s| s.flag).collect::<Vec<_>>());
        let word = prop::sample::select(vec![
            "status",
            "table",
            "services",
            "workunits",
            "list",
            "add",
            "remove",
            "set",
            "--json",
            "--help",
            "-h",
            "--version",
            "-V",
            "-",
            "--",
            "=",
            "-=",
            "--=",
            "true",
        ]);
        prop_oneof![
            "\\PC{0,12}".prop_map(OsString::from),
            (flag.clone(), "\\PC{0,8}").prop_map(|(f, v)| format!("-{f}={v}").into()),
            (flag.clone(), "\\PC{0,8}").prop_map(|(f, v)| format!("--{f}={v}").into()),
            flag.clone().prop_map(|f| format!("-{f}").into()),
            flag.prop_map(|f| format!("--{f}").into()),
            word.prop_map(OsString::from),
            "-[a-zé€Ü]{1,4}(=[^\\x00]{0,4})?".prop_map(OsString::from),
            prop::collection::vec(any::<u8>(), 0..8).prop_map(OsString::from_vec),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 2048, ..ProptestConfig::default() })]

        /// The fuzz target of the command line: whatever the arguments, the
        /// whole pipeline returns; help and version are the only exit 0.
        #[test]
        fn any_command_line_gives_a_result_never_a_panic(
            args in prop::collection::vec(argument(), 0..8),
        ) {
            let argv = std::iter::once(OsString::from("distributor")).chain(args);
            match parse(argv, &no_env) {
                Ok(_) => {}
                Err(CliError::Clap(e)) => {
                    let shown = e.render().to_string();
                    prop_assert!(!shown.is_empty());
                    let info = matches!(
                        e.kind(),
                        clap::error::ErrorKind::DisplayHelp | clap::error::ErrorKind::DisplayVersion
                    );
                    prop_assert_eq!(e.exit_code() == 0, info, "{}", shown);
                }
                Err(CliError::Config(e)) => {
                    prop_assert!(e.to_string().starts_with("invalid -"), "{}", e);
                }
            }
        }
    }
}
