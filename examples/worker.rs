//! A runnable worker: serves the ping RPC, registers itself, and follows its
//! work units with the handoff protocol.
//!
//! ```text
//! cargo run --example worker -- --listen 127.0.0.1:7001 \
//!     --redis-url redis://127.0.0.1:6379 --services-key sys-robots-list --table sys-matching-table
//! ```
//! It is configured as every member is, by the variables of the README's
//! member table (`MemberOptions::from_env`: `REDIS_URL`,
//! `REDIS_SENTINEL_MASTER`, `REDIS_USER`, `REDIS_PASS`, `MEMBER_WEIGHT`,
//! ...); a flag given wins over its variable. With Redis Sentinel:
//!
//! ```text
//! REDIS_SENTINEL_MASTER=mymaster REDIS_URL=redis://s1:26379,redis://s2:26379,redis://s3:26379 \
//!     cargo run --example worker -- --listen 127.0.0.1:7001
//! ```
//!
//! SIGTERM or Ctrl-C drains it: the holder moves every unit away (each one
//! released here first), then it deregisters and exits 0. Stopping a unit
//! takes `--work-ms` (a simulated flush; a fenced unit stops at once).
//!
//! A worker that cannot use Redis does not run on: when its member is not
//! ready `--ready-timeout` (30 s) after the start (Redis unreachable, or
//! misconfigured: sentinels without `REDIS_SENTINEL_MASTER`, cluster mode
//! against a plain node...), or when the member stops by itself, it stops
//! and exits 1, its last line on stderr saying why (`worker: not ready
//! within 30s: cannot use Redis at redis://10.0.0.5:6379: ...`). Redis lost
//! later on is ridden out: the member fences itself and retries. An
//! invalid flag or variable exits 2, naming it.
//!
//! With `--events`, stdout carries exactly one JSON object per line per
//! ownership change, and nothing else (logs go to stderr):
//!
//! ```text
//! {"event":"acquired","unit":"u","member":"host:port","generation":N,"unix_us":T}
//! {"event":"released","unit":"u","member":"host:port","generation":N,"unix_us":T,"reason":"moved"}
//! ```
//!
//! `generation` is the unit's fencing token (the table generation it was
//! acquired at), the same in both events of one tenure. `unix_us` is the wall
//! clock in microseconds: when the library handed the unit over; when its
//! stop finished; or, for `"reason":"fenced"`, when its hold ended (the
//! monotonic instant converted to wall clock): after a pause (SIGSTOP) that
//! is while the process was frozen, which is when its ownership ended.
//! Reasons: `moved`, `draining`, `fenced`, `shutdown` (the drain timed out).

use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use distributor::core::duration::parse_duration;
use distributor::member::HandoffFuture;
use distributor::{Drained, Handoff, Member, MemberError, MemberOptions, Owned, Revocation};
use std::time::Instant;
use tokio::sync::watch;

#[path = "support/redis_check.rs"]
mod redis_check;

/// Every flag but `--events`, `--work-ms` and `--ready-timeout` sets a
/// variable of the member table (`MemberOptions::from_env`), and wins over
/// it; every other variable of that table is read as well.
#[derive(Parser)]
#[command(
    about = "A distributor worker: serves the ping, registers, follows its units with the handoff protocol",
    after_help = "Configured by the member variables of the README (REDIS_URL, REDIS_SENTINEL_MASTER, \
                  REDIS_USER, REDIS_PASS, REDIS_TLS, MEMBER_WEIGHT, MEMBER_TLS_CERT, ...); a flag wins over \
                  its variable. SERVICES_KEY is read when MEMBER_SERVICES_KEY is unset."
)]
struct Args {
    /// Redis URL; several comma-separated: Redis Cluster seed nodes, or the
    /// sentinels with --redis-sentinel-master [env: REDIS_URL] [default:
    /// redis://127.0.0.1:6379]
    #[arg(long)]
    redis_url: Option<String>,
    /// Redis Sentinel: the master's name; --redis-url then lists the
    /// sentinels [env: REDIS_SENTINEL_MASTER]
    #[arg(long)]
    redis_sentinel_master: Option<String>,
    /// The services list (group) to join [env: MEMBER_SERVICES_KEY, or
    /// SERVICES_KEY] [default: sys-robots-list]
    #[arg(long)]
    services_key: Option<String>,
    /// The matching table key [env: DISTRIBUTION_NAMESPACE] [default:
    /// sys-matching-table]
    #[arg(long)]
    table: Option<String>,
    /// IP:PORT to serve the ping on; port 0: a free one [env: MEMBER_LISTEN]
    /// [default: 127.0.0.1:0]
    #[arg(long)]
    listen: Option<String>,
    /// The address the distributor dials (default: the bound listen
    /// address) [env: MEMBER_ADVERTISE]
    #[arg(long)]
    advertise: Option<String>,
    /// Print ownership changes as JSON lines on stdout (logs on stderr).
    #[arg(long)]
    events: bool,
    /// Fencing deadline: a unit's hold ends this long after the earlier of
    /// the last read showing it and the last ping [env: MEMBER_DEADLINE]
    /// [default: 10s]
    #[arg(long)]
    deadline: Option<String>,
    /// How long a drain (SIGTERM) waits for the holder before stopping every
    /// unit itself [env: MEMBER_DRAIN_TIMEOUT] [default: 30s]
    #[arg(long)]
    drain_timeout: Option<String>,
    /// Fallback polling of the row, at most half the deadline [env:
    /// MEMBER_POLL_INTERVAL] [default: 1s]
    #[arg(long)]
    poll_interval: Option<String>,
    /// How long stopping one unit takes, in milliseconds (units stop
    /// concurrently; a fenced unit stops at once).
    #[arg(long, default_value_t = 0)]
    work_ms: u64,
    /// Give up (exit 1, the reason on stderr) when the member is not ready
    /// (registered, its report written, in contact) this long after the
    /// start: Redis unreachable or misconfigured. 0: wait for ever.
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    ready_timeout: Duration,
    /// Abort the process (SIGABRT) on acquiring this unit: a "poison" unit,
    /// to try the holder's quarantine (`-quarantine-after`).
    #[arg(long)]
    crash_on: Option<String>,
}

impl Args {
    /// The flags that set a member variable: (variable, flag, value given).
    fn member_flags(&self) -> [(&'static str, &'static str, Option<&str>); 9] {
        [
            ("REDIS_URL", "--redis-url", self.redis_url.as_deref()),
            (
                "REDIS_SENTINEL_MASTER",
                "--redis-sentinel-master",
                self.redis_sentinel_master.as_deref(),
            ),
            (
                "MEMBER_SERVICES_KEY",
                "--services-key",
                self.services_key.as_deref(),
            ),
            ("DISTRIBUTION_NAMESPACE", "--table", self.table.as_deref()),
            ("MEMBER_LISTEN", "--listen", self.listen.as_deref()),
            ("MEMBER_ADVERTISE", "--advertise", self.advertise.as_deref()),
            ("MEMBER_DEADLINE", "--deadline", self.deadline.as_deref()),
            (
                "MEMBER_DRAIN_TIMEOUT",
                "--drain-timeout",
                self.drain_timeout.as_deref(),
            ),
            (
                "MEMBER_POLL_INTERVAL",
                "--poll-interval",
                self.poll_interval.as_deref(),
            ),
        ]
    }

    /// The member's options: the environment as `MemberOptions::from_env`
    /// reads it, with the flags given in place of their variables (so that
    /// `--redis-url` still gets `REDIS_USER` and `REDIS_PASS`). An invalid
    /// value names the flag it came from, or else its variable.
    fn member_options(&self) -> Result<MemberOptions, String> {
        let flags = self.member_flags();
        // The flag that set `var`, and its value.
        let flag = |var: &str| {
            flags
                .iter()
                .find(|(v, _, _)| *v == var)
                .and_then(|(_, flag, given)| Some((*flag, (*given)?)))
        };
        let env = |var: &str| std::env::var(var).ok().filter(|v| !v.is_empty());
        MemberOptions::from_lookup(|var| match flag(var) {
            Some((_, value)) => Some(value.to_string()),
            // This worker's older name of the services list variable.
            None if var == "MEMBER_SERVICES_KEY" => env(var).or_else(|| env("SERVICES_KEY")),
            None => env(var),
        })
        .map_err(|e| {
            if let MemberError::Env { var, value, reason } = &e
                && let Some((flag, _)) = flag(var)
            {
                return format!("invalid {flag} {value:?}: {reason}");
            }
            e.to_string()
        })
    }
}

/// The simulated application: prints what it gets and gives back.
struct Worker {
    /// The member id, known once the member is bound.
    member: watch::Receiver<Option<String>>,
    events: bool,
    work: Duration,
    crash_on: Option<String>,
}

impl Worker {
    async fn member(&self) -> String {
        let mut rx = self.member.clone();
        match rx.wait_for(Option::is_some).await {
            Ok(id) => id.clone().unwrap_or_default(),
            Err(_) => String::new(),
        }
    }

    fn event(&self, event: &str, unit: &Owned, member: &str, unix_us: u128, reason: Option<&str>) {
        let reason = reason
            .map(|r| format!(r#","reason":{}"#, json(r)))
            .unwrap_or_default();
        let line = format!(
            r#"{{"event":"{event}","unit":{},"member":{},"generation":{},"unix_us":{unix_us}{reason}}}"#,
            json(&unit.unit),
            json(member),
            unit.token,
        );
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{line}");
        let _ = out.flush();
    }
}

impl Handoff for Worker {
    fn acquired(&self, unit: Owned) -> HandoffFuture<'_> {
        Box::pin(async move {
            let member = self.member().await;
            if self.crash_on.as_deref() == Some(unit.unit.as_str()) {
                eprintln!(
                    "worker {member}: acquired {}: crashing, as --crash-on asks",
                    unit.unit
                );
                std::process::abort();
            }
            if self.events {
                self.event("acquired", &unit, &member, unix_us(), None);
            } else {
                println!(
                    "worker {member}: acquired {} (token {})",
                    unit.unit, unit.token
                );
            }
        })
    }

    fn revoked(&self, unit: Owned, why: Revocation) -> HandoffFuture<'_> {
        Box::pin(async move {
            let member = self.member().await;
            let at = match why {
                // The hold is over: stop at once. Ownership ended at the hold's
                // end, even if this process only runs now (after a pause).
                Revocation::Fenced { ended } => wall_clock_of(ended),
                _ => {
                    tokio::time::sleep(self.work).await;
                    unix_us()
                }
            };
            if self.events {
                self.event("released", &unit, &member, at, Some(why.reason()));
            } else {
                println!(
                    "worker {member}: released {} (token {}, {})",
                    unit.unit,
                    unit.token,
                    why.reason()
                );
            }
        })
    }
}

fn json(s: &str) -> String {
    serde_json::to_string(s).expect("a string serializes")
}

fn unix_us() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros())
}

/// The wall clock (µs) of a past monotonic instant. A worker runs on real
/// time, so std's clock is the right one (the crate's own code reads tokio's,
/// which its tests pause).
#[allow(clippy::disallowed_methods)]
fn wall_clock_of(at: Instant) -> u128 {
    unix_us().saturating_sub(Instant::now().saturating_duration_since(at).as_micros())
}

/// How the worker ends.
enum End {
    /// SIGTERM or Ctrl-C: drain, exit 0.
    Signal,
    /// Not ready within `--ready-timeout`, or the member stopped by itself
    /// (its server ended): exit 1, with the reason on stderr.
    Failed(String),
}

/// The first SIGTERM or Ctrl-C.
async fn signalled(term: &mut tokio::signal::unix::Signal) {
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}

/// Runs until a signal, or until the member fails: not ready within
/// `ready_timeout` (0: no bound), or stopped by itself.
async fn run(member: &Member, ready_timeout: Duration) -> End {
    let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(t) => t,
        Err(e) => return End::Failed(format!("cannot handle SIGTERM: {e}")),
    };
    let failed = async {
        let ready = async {
            if ready_timeout.is_zero() {
                Ok(member.ready().await)
            } else {
                tokio::time::timeout(ready_timeout, member.ready()).await
            }
        };
        match ready.await {
            Err(_) => return format!("not ready within {ready_timeout:?}"),
            Ok(Err(_)) => return "the member stopped before it was ready".to_string(),
            Ok(Ok(())) => tracing::info!(member = member.id(), "ready"),
        }
        // Readiness is published until the member's task ends: only a stop
        // of its own (its server ended) ends it before a signal.
        let mut readiness = member.readiness();
        while readiness.changed().await.is_ok() {}
        "the member stopped by itself".to_string()
    };
    tokio::select! {
        () = signalled(&mut term) => End::Signal,
        why = failed => End::Failed(why),
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    // One line, last on stderr: what an operator or a supervisor reads.
    let opts = match args.member_options() {
        Ok(o) => o,
        Err(why) => {
            eprintln!("worker: {why}");
            return ExitCode::from(2);
        }
    };
    match worker(args, opts).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(why) => {
            eprintln!("worker: {why}");
            ExitCode::FAILURE
        }
    }
}

async fn worker(args: Args, opts: MemberOptions) -> Result<(), String> {
    // Standard OTEL_* variables turn on span export: pings traced by the
    // distributor then show this worker's handling in the same trace. With
    // --events stdout is for events only: plain logs on stderr.
    let telemetry = if args.events {
        let filter = tracing_subscriber::EnvFilter::try_from_default_env()
            .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
        tracing_subscriber::fmt()
            .with_writer(std::io::stderr)
            .with_ansi(false)
            .with_env_filter(filter)
            .init();
        None
    } else {
        let provider =
            distributor::ops::telemetry::tracer_provider(true, &|k| std::env::var(k).ok())
                .map_err(|e| format!("span export: {e:#}"))?;
        Some(distributor::ops::telemetry::init("info", false, provider))
    };
    let (member_id, member_id_rx) = watch::channel(None);
    let worker = Worker {
        member: member_id_rx,
        events: args.events,
        work: Duration::from_millis(args.work_ms),
        crash_on: args.crash_on.clone(),
    };
    let member = Member::start_with(opts.clone(), worker)
        .await
        .map_err(|e| e.to_string())?;
    member_id.send_replace(Some(member.id().to_string()));
    if args.events {
        tracing::info!(member = member.id(), "worker serving; waiting for work");
    } else {
        println!("worker {} serving; waiting for work", member.id());
    }

    let result = match run(&member, args.ready_timeout).await {
        End::Signal => {
            tracing::info!(member = member.id(), "draining");
            match member.drain().await {
                Drained::HandedOver => tracing::info!("drained: every unit handed over"),
                Drained::TimedOut => {
                    tracing::warn!("the drain timed out: every unit was stopped here")
                }
                Drained::Fenced => {
                    tracing::warn!("out of contact while draining: every hold had ended")
                }
            }
            Ok(())
        }
        End::Failed(why) => {
            // Asked while the member still runs: its reason is the current one.
            let redis = redis_check::redis_problem(&opts).await;
            tracing::error!(member = member.id(), "{why}: stopping");
            member.shutdown().await;
            Err(match redis {
                Some(problem) => format!("{why}: {problem}"),
                None => format!("{why} (Redis answers; see the log above)"),
            })
        }
    };
    if let Some(t) = telemetry {
        t.shutdown(Duration::from_secs(3)).await;
    }
    result
}
