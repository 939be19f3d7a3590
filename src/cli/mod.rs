//! The command line: clap's flags (built from [`config::SETTINGS`]) and
//! operator commands ([`commands`]; `distributor plan` in [`plan`]), and
//! [`parse`], the whole pipeline from raw arguments to a validated
//! [`Config`]: Go-style flags normalized, clap, then [`config::resolve`].
//! The daemon itself is [`daemon`].
//!
//! [`parse`] never panics and never exits: any input, non-UTF-8 included,
//! gives a [`CliError`]; `main` prints it and exits (help and version with 0,
//! everything else with 2).

mod checks;
pub mod commands;
pub mod controls;
pub mod daemon;
pub mod plan;
pub mod quarantine;

pub use commands::{Command, CostsOp, ServicesOp, UnitsOp, WeightsOp};

use std::ffi::OsString;

use clap::{Arg, CommandFactory, FromArgMatches, Parser};

use crate::config::{self, Config, ConfigError, Kind, RawConfig, Setting};

/// Splits a changing list of work units among live workers; a drop-in
/// replacement for scientificideas/distributor. Every flag also reads an
/// environment variable (see README); Go-style `-flag=value` works too.
#[derive(Parser, Debug)]
#[command(name = "distributor", version)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,
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

/// The clap command: the operator commands, and one global flag per setting
/// of the table that the README documents, its help with the environment
/// variables and the default.
pub fn command() -> clap::Command {
    config::SETTINGS
        .iter()
        .fold(Cli::command(), |cmd, s| cmd.arg(flag(s)))
}

fn flag(s: &'static Setting) -> Arg {
    let default = s
        .default
        .map(|d| format!(" [default: {d}]"))
        .unwrap_or_default();
    let arg = Arg::new(s.flag)
        .long(s.flag)
        .global(true)
        .value_name(s.value_name)
        .help(format!("{} [env: {}]{default}", s.help, s.env.join(", ")));
    // A value starting with '-' (`-poll-interval -1s`) is the flag's value, as
    // in Go, so that our own check names the flag; a bool's value is optional,
    // so a following flag stays a flag.
    match s.kind {
        Kind::Bool => arg.num_args(0..=1).default_missing_value("true"),
        _ => arg.allow_hyphen_values(true),
    }
}

/// Parses and validates a whole command line (`args` includes the program
/// name). `env` reads one environment variable; a value that is not UTF-8 is
/// an error naming it, never ignored.
pub fn parse<I, T>(args: I, env: &dyn Fn(&str) -> Option<OsString>) -> Result<Invocation, CliError>
where
    I: IntoIterator<Item = T>,
    T: Into<OsString>,
{
    let args = normalize_go_flags(args);
    let matches = command()
        .try_get_matches_from(args)
        .map_err(CliError::Clap)?;
    let cli = Cli::from_arg_matches(&matches).map_err(CliError::Clap)?;
    // The flags given, and no environment variable that is not UTF-8.
    let mut raw = RawConfig::default();
    for s in config::SETTINGS {
        if let Some(value) = matches.get_one::<String>(s.flag) {
            raw = raw.with(s, value);
        }
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
    let config = config::resolve(&raw, &env).map_err(CliError::Config)?;
    Ok(Invocation {
        config,
        command: cli.command,
    })
}

/// Rewrites Go-style single-dash long flags (`-poll-interval=1s`) to clap's
/// `--poll-interval=1s`. Single-letter flags (`-h`), values and arguments that
/// are not UTF-8 are left alone; so is the argument after a setting that takes
/// a value (`-poll-interval -1s`: `-1s` is the value, as in Go).
fn normalize_go_flags<S: Into<OsString>>(args: impl IntoIterator<Item = S>) -> Vec<OsString> {
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
        next_is_value = !name.contains('=')
            && config::SETTINGS
                .iter()
                .any(|s| s.flag == name && s.kind != Kind::Bool);
        if go_style {
            out.push(format!("-{text}").into());
        } else {
            out.push(arg);
        }
    }
    out
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
            "weights",
            "unset",
            "list",
            "add",
            "remove",
            "set",
            "plan",
            "--leave",
            "--join",
            "--weight",
            "--cordon",
            "--group",
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
