//! A runnable worker: serves the ping RPC, registers itself, and prints its work
//! units whenever its row of the matching table changes.
//!
//! ```text
//! cargo run --example worker -- --listen 127.0.0.1:7001 \
//!     --redis-url redis://127.0.0.1:6379 --services-key sys-robots-list --table sys-matching-table
//! ```
//! Ctrl-C or SIGTERM deregisters it and stops serving.

use std::net::SocketAddr;

use clap::Parser;
use distributor::{Member, MemberOptions};

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
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    // Standard OTEL_* variables turn on span export: pings traced by the
    // distributor then show this worker's handling in the same trace.
    let provider = distributor::ops::telemetry::tracer_provider(true, &|k| std::env::var(k).ok())?;
    let telemetry = distributor::ops::telemetry::init("info", false, provider);
    let args = Args::parse();
    let mut opts = MemberOptions::new(
        &args.redis_url,
        &args.services_key,
        &args.table,
        args.listen,
    );
    opts.advertise = args.advertise;
    let member = Member::start(opts).await?;
    println!("worker {} serving; waiting for work", member.id());

    let mut assignment = member.assignment();
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    loop {
        tokio::select! {
            _ = tokio::signal::ctrl_c() => break,
            _ = term.recv() => break,
            changed = assignment.changed() => {
                if changed.is_err() {
                    break;
                }
                let a = assignment.borrow_and_update().clone();
                println!(
                    "worker {} generation {}: {} units [{}]",
                    member.id(),
                    a.generation,
                    a.units.len(),
                    a.units.join(",")
                );
            }
        }
    }
    println!("worker {} shutting down", member.id());
    member.shutdown().await;
    telemetry.shutdown(std::time::Duration::from_secs(3)).await;
    Ok(())
}
