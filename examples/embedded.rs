//! A Rust application that embeds a [`Member`] in what it already runs: its
//! own tonic server (the member's services next to the application's), its
//! own Redis client, its health reporter, and options from the environment
//! (`MemberOptions::from_env`, `docs/protocol.md`'s variables).
//!
//! ```text
//! MEMBER_ADVERTISE=127.0.0.1:7001 REDIS_URL=redis://127.0.0.1:6379 \
//!     cargo run --example embedded --no-default-features --features member
//! ```
//!
//! Every variable of the README's member table applies: with Redis
//! Sentinel, `REDIS_SENTINEL_MASTER=mymaster REDIS_URL=redis://s1:26379,...`.
//!
//! Each unit is "crawled" by a task of its own that checks its hold before
//! every side effect and stops when the hold ends. SIGTERM or Ctrl-C drains
//! the member first (its units move to other members), then stops the
//! server: in that order, since the distributor's beat stream on the server
//! ends only once the member stops. A member not ready within
//! [`READY_TIMEOUT`] (Redis unreachable or misconfigured) stops the
//! application: exit 1, one line on stderr saying why.

use std::collections::HashMap;
use std::process::ExitCode;
use std::sync::Mutex;
use std::time::Duration;

use distributor::member::HandoffFuture;
use distributor::{Handoff, Member, MemberOptions, Owned, Revocation};

#[path = "support/redis_check.rs"]
mod redis_check;

/// How long the member may take to become ready (registered, reported, in
/// contact) before the application gives up.
const READY_TIMEOUT: Duration = Duration::from_secs(30);

/// The application: one crawl task per unit it owns.
#[derive(Default)]
struct Crawler {
    tasks: Mutex<HashMap<String, tokio::task::JoinHandle<()>>>,
}

impl Handoff for Crawler {
    fn acquired(&self, unit: Owned) -> HandoffFuture<'_> {
        let name = unit.unit.clone();
        let task = tokio::spawn(async move {
            let mut page = 0u64;
            loop {
                tokio::select! {
                    () = unit.cancelled() => return,
                    () = tokio::time::sleep(Duration::from_millis(500)) => {}
                }
                // Check before the side effect; stamp it with the token so a
                // store that keeps the highest token per unit refuses a late
                // write of a former owner.
                let Ok(token) = unit.hold.check() else { return };
                page += 1;
                println!("{} page {page} (token {token})", unit.unit);
            }
        });
        self.tasks.lock().unwrap().insert(name, task);
        Box::pin(std::future::ready(()))
    }

    fn revoked(&self, unit: Owned, why: Revocation) -> HandoffFuture<'_> {
        let task = self.tasks.lock().unwrap().remove(&unit.unit);
        Box::pin(async move {
            if let Some(task) = task {
                task.abort();
                let _ = task.await;
            }
            println!("{} stopped ({})", unit.unit, why.reason());
        })
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    match run().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("embedded: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run() -> Result<(), Box<dyn std::error::Error>> {
    let opts = MemberOptions::from_env()?;
    let Some(advertise) = opts.advertise.clone() else {
        return Err("set MEMBER_ADVERTISE to the host:port this server is reached at".into());
    };
    let listen: std::net::SocketAddr = match std::env::var("MEMBER_LISTEN") {
        Ok(l) => l.parse()?,
        Err(_) => advertise.parse()?,
    };
    // The application's own Redis client (one node; with Sentinel or a
    // cluster the member connects by its options) and health reporter.
    let one_node =
        opts.redis_sentinel.is_none() && !opts.redis_cluster && !opts.redis_url.contains(',');
    let mut builder = Member::builder().options(opts.clone());
    if one_node {
        builder = builder.redis_client(redis::Client::open(opts.redis_url.as_str())?);
    }
    let (health, health_service) = tonic_health::server::health_reporter();
    let (member, services) = builder
        .health_reporter(health)
        .handoff(Crawler::default())
        .start_without_server()
        .await?;

    let (stop_server, server_stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(health_service)
            .add_service(services.pinger)
            .add_service(services.beats)
            .serve_with_shutdown(listen, async {
                let _ = server_stopped.await;
            }),
    );
    // The member retries Redis for as long as it runs; the application
    // bounds the start, and says why it gives up.
    let not_ready = match tokio::time::timeout(READY_TIMEOUT, member.ready()).await {
        Ok(Ok(())) => None,
        Ok(Err(_)) => Some("the member stopped before it was ready".to_string()),
        Err(_) => Some(format!("not ready within {READY_TIMEOUT:?}")),
    };
    if let Some(why) = not_ready {
        let problem = redis_check::redis_problem(&opts).await;
        member.shutdown().await;
        let _ = stop_server.send(());
        let _ = server.await;
        return Err(match problem {
            Some(p) => format!("{why}: {p}"),
            None => format!("{why} (Redis answers)"),
        }
        .into());
    }
    println!("member {} ready", member.id());

    distributor::member::shutdown_signal().await;
    println!("draining: {:?}", member.drain().await);
    let _ = stop_server.send(());
    server.await??;
    Ok(())
}
