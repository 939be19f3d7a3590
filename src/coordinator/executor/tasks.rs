//! Background tasks beside the select loop: the census, a standby's warm
//! pings and prepared view, and the generation re-reads. None of them ever
//! holds up a renewal; each ends when its owner drops it.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tracing::info_span;

use crate::coordinator::holder::{Preparer, WarmView};
use crate::core::census::{self, Census, CensusView};
use crate::core::status::{Role, Status};
use crate::edge::grpc::Pinger;
use crate::edge::redis::Store;
use crate::error::StoreError;
use crate::unix_ms;

/// Aborts a background task when its owner goes away (also on panic).
pub(super) struct AbortOnDrop<T>(pub(super) JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Warm standby: while this replica is not the holder, it keeps a connection
/// open to every listed member (see [`Pinger::warm`]), judging nothing, so
/// that its first cycle as a holder pings over open connections. The members
/// lists are read (O(members)) every `interval`; a round whose read fails is
/// skipped.
pub(super) async fn warm_task(
    store: Store,
    pinger: Pinger,
    services: Vec<String>,
    interval: Duration,
    status: watch::Receiver<Status>,
) {
    'rounds: loop {
        tokio::time::sleep(interval).await;
        if status.borrow().role == Role::Holder {
            continue;
        }
        let mut members = Vec::new();
        for key in &services {
            match store.list(key).await {
                Ok(entries) => members.extend(
                    entries
                        .into_iter()
                        .filter_map(|e| String::from_utf8(e).ok()),
                ),
                Err(e) => {
                    tracing::debug!(error = %e, key, "could not read a members list to warm channels");
                    continue 'rounds;
                }
            }
        }
        members.sort_unstable();
        members.dedup();
        let opened = pinger.warm(&members).await;
        tracing::trace!(listed = members.len(), opened, "warm channels refreshed");
    }
}

/// Warm view: while this replica is a standby, it keeps what its first
/// cycle as a holder would read and solve (see [`WarmView`]), brought up to
/// date every `interval`: with nothing changed, a guard probe per list and
/// one for the reports. After a preparation that read a list in full, the
/// next waits `Timing::warm_every_polls` intervals, so that where Redis does not
/// permit `WATCH` (every list read every time) a standby reads a fifth as
/// often as the holder. While this
/// replica holds, the slot is emptied (the holding's own view is newer, and
/// a second copy of the inputs would double the memory of a large fleet).
pub(super) async fn prepare_task(
    preparer: Preparer,
    interval: Duration,
    warm_every_polls: u32,
    status: watch::Receiver<Status>,
    slot: Arc<std::sync::Mutex<Option<WarmView>>>,
) {
    let mut failing = false;
    let mut pause = interval;
    loop {
        tokio::time::sleep(pause).await;
        pause = interval;
        let (role, generation) = {
            let s = status.borrow();
            (s.role, s.generation)
        };
        if role == Role::Holder {
            slot.lock().expect("warm view lock").take();
            preparer.metrics.warm_generation.set(0);
            continue;
        }
        let warm = slot.lock().expect("warm view lock").take();
        match preparer.prepare(warm, generation).await {
            Ok(w) => {
                failing = false;
                if w.read_lists {
                    pause = interval * warm_every_polls;
                }
                *slot.lock().expect("warm view lock") = Some(w);
            }
            Err(e) => {
                // The holder logs Redis and input trouble; once per streak here.
                if !failing {
                    tracing::debug!(error = %e, "could not prepare the warm view; its next holding starts cold");
                }
                failing = true;
            }
        }
    }
}

/// The census (seed 002), as its own task so that a slow Redis never holds up
/// a lease renewal: one step per scheduled instant, each numbered by the
/// instant it was scheduled for (see [`census::Schedule`]). Reports every
/// step's outcome, and the view when one is emitted.
///
/// The report also says when this replica holds the lease but does not act
/// (`status.holding_blocked`) or recovers (`status.recovering`), so that
/// `distributor status` shows it.
pub(super) async fn census_task(
    store: Store,
    replica_id: String,
    interval: Duration,
    status: watch::Receiver<Status>,
    out: mpsc::Sender<Result<Option<CensusView>, StoreError>>,
) {
    let schedule = census::Schedule::new(interval, census::random_skew(interval));
    let mut census = Census::default();
    let mut last = 0;
    loop {
        let now = unix_ms();
        let at = schedule.next_after(now.max(last));
        tokio::time::sleep(Duration::from_millis(at - now)).await;
        last = at;
        let number = schedule.number(at);
        let mut report = match census.current() {
            Some(v) => format!("{} {} {} {}", v.index, v.replicas, unix_ms(), v.interval),
            None => format!("- - {} -", unix_ms()),
        };
        let note = {
            let s = status.borrow();
            match (s.role, &s.holding_blocked, &s.recovering) {
                (Role::Holder, Some(why), _) => {
                    Some(census::note_suffix(&census::HolderNote::Blocked(why)))
                }
                (Role::Holder, None, Some(what)) => {
                    Some(census::note_suffix(&census::HolderNote::Recovering(what)))
                }
                _ => None,
            }
        };
        if let Some(note) = note {
            report += &note;
        }
        let step = store
            .census_step(number, interval, &replica_id, &report)
            .await
            .map(|reply| {
                let before = census.current();
                let view = census.step(number, reply)?;
                if before.map(|b| (b.index, b.replicas)) != Some((view.index, view.replicas)) {
                    info_span!("census", replica = %replica_id, index = view.index, replicas = view.replicas)
                        .in_scope(|| tracing::info!(index = view.index, replicas = view.replicas, "census changed"));
                }
                Some(view)
            });
        if let Err(e) = &step {
            tracing::debug!(error = %e, "census step failed");
        }
        if out.send(step).await.is_err() {
            return;
        }
    }
}

/// Re-reads the stored generation on each hint (a table-change notification),
/// so that a standby's floor follows every write without trusting what was
/// published.
pub(super) async fn generation_task(
    store: Store,
    mut hints: mpsc::Receiver<()>,
    out: mpsc::Sender<Result<u64, StoreError>>,
) {
    while hints.recv().await.is_some() {
        if out.send(store.read_generation().await).await.is_err() {
            return;
        }
    }
}

pub(super) fn bump(slot: &mut u64, value: u64) -> bool {
    let changed = value > *slot;
    *slot = (*slot).max(value);
    changed
}

pub(super) async fn join<T>(handle: &mut Option<JoinHandle<T>>) -> T
where
    T: Send + 'static,
{
    match handle {
        Some(h) => match h.await {
            Ok(v) => v,
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            Err(_) => std::future::pending().await,
        },
        None => std::future::pending().await,
    }
}
