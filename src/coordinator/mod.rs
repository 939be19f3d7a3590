//! The coordinator: one replica, standby or holder.
//!
//! - [`machine`] decides, purely: a state machine `step(event, now) ->
//!   actions`, with its guarantees checked by property tests;
//! - `executor` performs the actions (Redis calls, cycles) as tasks, feeds
//!   their results back as events, and keeps status, metrics and logs;
//! - `holder` is what a holder does, one cycle at a time (read, ping,
//!   solve, write if changed), and what it keeps between cycles: what Redis
//!   holds (`core::handoff::Ledger`), the members' reports and which of
//!   them are proven gone.
//!
//! [`Distributor`] is the handle embedders and the daemon hold.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::config::Config;
use crate::core::balance::Balance;
use crate::core::status::Status;
use crate::core::table::Assignment;
use crate::core::timing::Timing;
use crate::edge::grpc::Pinger;
use crate::edge::redis::Store;
use crate::error::StartError;
use crate::ops::metrics::Metrics;

mod executor;
mod holder;
pub mod machine;
#[cfg(any(test, feature = "simulation"))]
pub mod sim;

/// A running replica. Dropping it shuts it down gracefully in the background.
pub struct Distributor {
    status: watch::Receiver<Status>,
    metrics: Arc<Metrics>,
    cancel: CancellationToken,
    task: Option<JoinHandle<()>>,
}

impl Distributor {
    /// Starts a replica. Redis is connected lazily: an unreachable Redis is
    /// retried, never fatal. Unusable ping TLS files, or lease timings that
    /// break the holder's safety rule, are.
    pub fn start(config: Config) -> Result<Distributor, StartError> {
        check_timing(&config).map_err(StartError::Config)?;
        if !config.join_delay.is_zero()
            && (config.assignment != Assignment::Sticky || config.balance != Balance::Count)
        {
            tracing::warn!(
                join_delay = ?config.join_delay,
                "-join-delay applies to -assignment sticky with -balance count only; newcomers do not wait"
            );
        }
        // Pings on threads of their own: a round of thousands must not queue
        // ahead of the cycle and the lease renewals (edge/grpc/pinger.rs).
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get().min(4));
        let mut pinger = Pinger::new(config.ping_timeout, Some(config.keepalive))
            .on_own_runtime(threads)
            .map_err(StartError::PingRuntime)?;
        if let Some(tls) = &config.ping_tls {
            pinger = pinger.with_tls(crate::edge::tls::ping_client(
                &tls.files,
                tls.domain.as_deref(),
            )?);
        }
        // Connections that end tell the holder at once (edge/grpc/closes.rs).
        let (pinger, closes) = pinger.watch_closes();
        let store = Store::connect(
            &config.redis_options(),
            &config.distribution_namespace,
            op_timeout(&config),
        )?;
        let (tx, rx) = watch::channel(Status {
            replica_id: config.replica_id.clone(),
            ..Status::default()
        });
        let cancel = CancellationToken::new();
        let metrics = Arc::new(Metrics::new());
        let executor = executor::Executor::new(config, store, pinger, closes, tx, metrics.clone());
        let task = tokio::spawn(executor.run(cancel.clone()));
        Ok(Distributor {
            status: rx,
            metrics,
            cancel,
            task: Some(task),
        })
    }

    pub fn status(&self) -> watch::Receiver<Status> {
        self.status.clone()
    }

    /// This replica's metrics, for `/metrics`.
    pub fn metrics(&self) -> Arc<Metrics> {
        self.metrics.clone()
    }

    /// Stops acting, releases the lease (waking the standbys) and waits for it.
    pub async fn shutdown(mut self) {
        self.cancel.cancel();
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }

    /// Stops at once without releasing anything, like a crash: its Redis
    /// connections close, so standbys take over as soon as they see the lease
    /// connection gone (after the TTL where they may not ask). For failure
    /// tests.
    pub fn abort(mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

impl Drop for Distributor {
    fn drop(&mut self) {
        self.cancel.cancel();
    }
}

fn op_timeout(config: &Config) -> Duration {
    // A lease call must come back well before the renew deadline.
    (config
        .lease
        .renew_deadline
        .saturating_sub(config.lease.renew_interval))
    .clamp(
        Timing::DEFAULT.lease_call_min,
        Timing::DEFAULT.lease_call_max,
    )
}

/// The timing rules the holder's safety rests on (the daemon's `config`
/// checks them too, with flag names; embedders build `Config` by hand).
fn check_timing(c: &Config) -> Result<(), String> {
    let l = &c.lease;
    if !(l.renew_interval < l.renew_deadline && l.renew_deadline < l.ttl) {
        return Err(format!(
            "lease timing must satisfy renew interval ({:?}) < renew deadline ({:?}) < ttl ({:?})",
            l.renew_interval, l.renew_deadline, l.ttl
        ));
    }
    for (what, d) in [
        ("poll interval", c.poll_interval),
        ("ping timeout", c.ping_timeout),
        ("lease retry interval", l.retry_interval),
        ("census interval", c.census_interval),
    ] {
        if d.is_zero() {
            return Err(format!("{what} must be greater than zero"));
        }
    }
    Ok(())
}
