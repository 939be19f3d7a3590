//! A runnable worker: serves the ping RPC, registers itself, and follows its
//! work units with the handoff protocol.
//!
//! ```text
//! cargo run --example worker -- --listen 127.0.0.1:7001 \
//!     --redis-url redis://127.0.0.1:6379 --services-key sys-robots-list --table sys-matching-table
//! ```
//! SIGTERM or Ctrl-C drains it: the holder moves every unit away (each one
//! released here first), then it deregisters and exits 0. Stopping a unit
//! takes `--work-ms` (a simulated flush; a fenced unit stops at once).
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
use std::net::SocketAddr;
use std::time::Duration;

use clap::Parser;
use distributor::config::parse_duration;
use distributor::member::HandoffFuture;
use distributor::{Drained, Handoff, Member, MemberOptions, Owned, Revocation};
use std::time::Instant;
use tokio::sync::watch;

#[derive(Parser)]
struct Args {
    #[arg(long, env = "REDIS_URL", default_value = "redis://127.0.0.1:6379")]
    redis_url: String,
    /// The services list (group) to join.
    #[arg(long, env = "SERVICES_KEY", default_value = "sys-robots-list")]
    services_key: String,
    #[arg(
        long,
        env = "DISTRIBUTION_NAMESPACE",
        default_value = "sys-matching-table"
    )]
    table: String,
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: SocketAddr,
    /// The address the distributor dials (default: the bound listen address).
    #[arg(long)]
    advertise: Option<String>,
    /// Print ownership changes as JSON lines on stdout (logs on stderr).
    #[arg(long)]
    events: bool,
    /// Fencing deadline: a unit's hold ends this long after the earlier of
    /// the last read showing it and the last ping.
    #[arg(long, env = "MEMBER_DEADLINE", default_value = "10s", value_parser = parse_duration)]
    deadline: Duration,
    /// How long a drain (SIGTERM) waits for the holder before stopping every
    /// unit itself.
    #[arg(long, env = "MEMBER_DRAIN_TIMEOUT", default_value = "30s", value_parser = parse_duration)]
    drain_timeout: Duration,
    /// Fallback polling of the row (at most half the deadline).
    #[arg(long, env = "MEMBER_POLL_INTERVAL", default_value = "1s", value_parser = parse_duration)]
    poll_interval: Duration,
    /// How long stopping one unit takes, in milliseconds (units stop
    /// concurrently; a fenced unit stops at once).
    #[arg(long, default_value_t = 0)]
    work_ms: u64,
}

/// The simulated application: prints what it gets and gives back.
struct Worker {
    /// The member id, known once the member is bound.
    member: watch::Receiver<Option<String>>,
    events: bool,
    work: Duration,
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

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
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
            distributor::ops::telemetry::tracer_provider(true, &|k| std::env::var(k).ok())?;
        Some(distributor::ops::telemetry::init("info", false, provider))
    };
    let mut opts = MemberOptions {
        redis_url: args.redis_url,
        services_key: args.services_key,
        table_key: args.table,
        listen: args.listen,
        ..MemberOptions::default()
    };
    opts.advertise = args.advertise;
    opts.deadline = args.deadline;
    opts.drain_timeout = args.drain_timeout;
    opts.poll_interval = args.poll_interval;
    let (member_id, member_id_rx) = watch::channel(None);
    let worker = Worker {
        member: member_id_rx,
        events: args.events,
        work: Duration::from_millis(args.work_ms),
    };
    let member = Member::start_with(opts, worker).await?;
    member_id.send_replace(Some(member.id().to_string()));
    if args.events {
        tracing::info!(member = member.id(), "worker serving; waiting for work");
    } else {
        println!("worker {} serving; waiting for work", member.id());
    }

    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
    tracing::info!(member = member.id(), "draining");
    match member.drain().await {
        Drained::HandedOver => tracing::info!("drained: every unit handed over"),
        Drained::TimedOut => {
            tracing::warn!("the drain timed out: every unit was stopped here")
        }
        Drained::Fenced => tracing::warn!("out of contact while draining: every hold had ended"),
    }
    if let Some(t) = telemetry {
        t.shutdown(Duration::from_secs(3)).await;
    }
    Ok(())
}
