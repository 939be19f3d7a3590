//! The member's task: all of its IO. It reads its row, writes its report,
//! registers, starts the application's [`Handoff`] calls (`calls.rs`), keeps
//! the assignment and the health service current, drains and leaves. What to do is decided
//! by `core::ownership`; this file only carries it out.
//!
//! Guarantees:
//! - one Redis call at a time, in order (a report before a read, a read
//!   before a registration), never blocking the timers: a hold that ends is
//!   revoked at its end even while a call hangs for its deadline;
//! - the assignment without a unit is published before the application's
//!   revocation starts, and the report follows only once it returned;
//! - for one unit, `revoked` never starts before `acquired` returned
//!   (`calls.rs`);
//! - each read carries its Redis connection (client id and server run id) to the state;
//!   once a report naming a new connection is written, the row is read
//!   again at once (reads on it count from then on);
//! - the periodic refresh (with each re-registration) re-writes the report
//!   written last, which restores one lost with Redis' data; after a
//!   start-over that is the new numbering's report, never the old one;
//! - a failing read logs once, then a summary every 30 s, then once when
//!   reads work again: never a line per poll.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use std::time::Instant;
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;
use tonic_health::ServingStatus;
use tonic_health::server::HealthReporter;

use super::calls::{self, Done};
use super::failures::{ReadFailures, log_store_error};
use super::handoff::{Handoff, Shared};
use super::meters::Meters;
use super::{Assignment, MemberOptions};
use crate::core::handoff::{MemberReport, RecoveryTag, RedisConnection, RunId};
use crate::core::ownership::{Ownership, ReadOutcome, Revocation, Step};
use crate::core::timing::Timing;
use crate::edge::clock;
use crate::edge::grpc::PingResponder;
use crate::edge::redis::{Notification, RowRead, Store};
use crate::error::StoreError;
use crate::proto::grpc_pinger_server::GrpcPingerServer;

/// What the [`Member`](super::Member) asks of its task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Mode {
    Run,
    Drain,
    Stop,
}

/// How the task ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Ending {
    /// Drained: the holder took every unit away; deregistered.
    HandedOver,
    /// The drain timed out: every unit was stopped; deregistered.
    TimedOut,
    /// Contact was lost while draining: every hold had ended, nothing was
    /// left to hand over; deregistered (if Redis answered).
    Fenced,
    /// Stopped on request: every unit was stopped; deregistered.
    Stopped,
}

#[derive(Debug, Clone, Copy)]
enum Phase {
    Following,
    Draining {
        until: Instant,
    },
    /// Every unit revoked; waiting for the revocations, then leaving.
    Stopping {
        ending: Ending,
    },
    /// Deregistering.
    Leaving {
        ending: Ending,
    },
}

type ReadResult = Result<RowRead, StoreError>;

/// A finished Redis call.
enum Io {
    Read {
        sent: Instant,
        result: ReadResult,
    },
    Report {
        report: MemberReport,
        announce: bool,
        result: Result<(), StoreError>,
    },
    /// A statement for a holder's recovery was written (or not).
    Held {
        tag: RecoveryTag,
        result: Result<(), StoreError>,
    },
    Registered(Result<bool, StoreError>),
    Transit(Result<bool, StoreError>),
    Left,
}

type IoCall = Pin<Box<dyn Future<Output = Io> + Send>>;

/// How long a failed report waits before it is written again.
const REPORT_RETRY: Duration = Timing::DEFAULT.report_retry;

pub(super) struct Follower {
    pub(super) store: Store,
    pub(super) opts: MemberOptions,
    pub(super) id: String,
    pub(super) shared: Arc<Shared>,
    pub(super) handoff: Arc<dyn Handoff>,
    pub(super) tx: watch::Sender<Assignment>,
    /// Registered, reported and in contact: see [`super::Member::ready`].
    pub(super) ready: watch::Sender<bool>,
    pub(super) health: HealthReporter,
    /// The reporter is the member's own: it also sets the overall status.
    pub(super) own_health: bool,
    pub(super) meters: Meters,
    /// Set once this task deregistered: a dropped [`Member`](super::Member)
    /// then has nothing left to do.
    pub(super) left: Arc<AtomicBool>,
}

/// The task's own bookkeeping.
struct Loop {
    phase: Phase,
    io: Option<IoCall>,
    want_read: bool,
    want_register: bool,
    want_refresh: bool,
    want_transit: bool,
    registered: bool,
    report_wait: Option<Instant>,
    /// Units whose `acquired` call runs, and the signal of its end.
    acquiring: HashMap<String, CancellationToken>,
    serving: bool,
    fenced: bool,
    /// The ownership revision the published assignment shows.
    revision: Option<u64>,
    bad_generation: bool,
    stale: bool,
    /// The connection whose unprocessed read was logged last: one line per
    /// new connection, not per read.
    other_connection: Option<Option<RedisConnection>>,
    /// The server of the last read of another server than the holder's,
    /// logged once.
    other_server: Option<RunId>,
    failures: ReadFailures,
}

impl Follower {
    pub(super) async fn run(self, mut mode: watch::Receiver<Mode>) -> Ending {
        let subscription = CancellationToken::new();
        let _unsubscribe = subscription.clone().drop_guard();
        let mut notes = self.store.subscribe(
            vec![self.store.keys().table_channel.clone()],
            subscription.child_token(),
        );
        let mut poll = tokio::time::interval(self.opts.poll_interval);
        poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut reregister = tokio::time::interval(self.opts.reregister_interval);
        reregister.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let (done_tx, mut done_rx) = mpsc::unbounded_channel();
        let mut mode_open = true;
        let mut notes_open = true;
        let mut l = Loop {
            phase: Phase::Following,
            io: None,
            want_read: true,
            want_register: true,
            want_refresh: false,
            want_transit: false,
            registered: false,
            report_wait: None,
            acquiring: HashMap::new(),
            serving: true,
            fenced: false,
            revision: None,
            bad_generation: false,
            stale: false,
            other_connection: None,
            other_server: None,
            failures: ReadFailures::default(),
        };
        loop {
            self.run_steps(&mut l, &done_tx).await;
            self.publish_ready(&l);
            let now = clock::now();
            match l.phase {
                Phase::Draining { until } if now >= until => {
                    tracing::warn!(
                        member = %self.id,
                        drain_timeout = ?self.opts.drain_timeout,
                        "the drain timed out (no holder emptied this member's row); stopping every unit"
                    );
                    self.shared.lock().stop(now);
                    l.phase = Phase::Stopping {
                        ending: Ending::TimedOut,
                    };
                    continue;
                }
                Phase::Draining { .. }
                    if l.io.is_none() && {
                        let c = self.shared.lock();
                        c.fenced() && c.settled(now)
                    } =>
                {
                    tracing::warn!(member = %self.id, "lost contact while draining: every hold has ended, nothing is left to hand over; deregistering");
                    l.phase = Phase::Leaving {
                        ending: Ending::Fenced,
                    };
                }
                Phase::Stopping { ending } if l.io.is_none() && self.shared.lock().settled(now) => {
                    l.phase = Phase::Leaving { ending };
                }
                _ => {}
            }
            if l.io.is_none() {
                l.io = self.next_io(&mut l, now);
            }
            let wake = [
                self.shared.lock().next_wake(),
                match l.phase {
                    Phase::Draining { until } => Some(until),
                    _ => None,
                },
                l.report_wait,
            ]
            .into_iter()
            .flatten()
            .min();
            tokio::select! {
                biased;
                changed = mode.changed(), if mode_open => {
                    let next = match changed {
                        Ok(()) => *mode.borrow_and_update(),
                        Err(_) => {
                            mode_open = false;
                            Mode::Stop
                        }
                    };
                    self.switch(&mut l, next);
                }
                _ = sleep_until(wake) => {
                    self.shared.lock().tick(clock::now());
                    if l.report_wait.is_some_and(|t| t <= clock::now()) {
                        l.report_wait = None;
                    }
                }
                Some(done) = done_rx.recv() => {
                    // Every call that finished meanwhile, at once: a stop of
                    // thousands of units is one state change, not thousands
                    // (each is O(row)).
                    let mut batch = vec![done];
                    while let Ok(more) = done_rx.try_recv() {
                        batch.push(more);
                    }
                    self.finished(&mut l, batch);
                }
                _ = self.shared.wake.notified() => {}
                io = poll_io(&mut l.io), if l.io.is_some() => {
                    l.io = None;
                    if let Some(ending) = self.handle_io(&mut l, io) {
                        return ending;
                    }
                }
                note = notes.recv(), if notes_open => match note {
                    Some(Notification::Message(..) | Notification::Subscribed) => l.want_read = true,
                    None => notes_open = false,
                },
                _ = poll.tick() => l.want_read = true,
                _ = reregister.tick() => {
                    l.want_register = true;
                    l.want_refresh = true;
                }
            }
        }
    }

    fn switch(&self, l: &mut Loop, mode: Mode) {
        let now = clock::now();
        match (mode, l.phase) {
            (Mode::Drain, Phase::Following) => {
                tracing::info!(member = %self.id, drain_timeout = ?self.opts.drain_timeout, "draining: reporting it and waiting for the holder to move every unit away");
                self.shared.lock().drain(now);
                l.phase = Phase::Draining {
                    until: now + self.opts.drain_timeout,
                };
            }
            (Mode::Stop, Phase::Following | Phase::Draining { .. }) => {
                tracing::info!(member = %self.id, "stopping: revoking every unit, then deregistering");
                self.shared.lock().stop(now);
                l.phase = Phase::Stopping {
                    ending: Ending::Stopped,
                };
            }
            _ => {}
        }
    }

    /// Carries out what the state asks: publishes the assignment, then
    /// starts the handler calls; keeps the health service in step.
    async fn run_steps(&self, l: &mut Loop, done: &mpsc::UnboundedSender<Done>) {
        let (steps, assignment, fenced) = {
            let mut c = self.shared.lock();
            // Rebuilt only when it changed: a row may hold many units, and
            // every ping wakes this loop.
            let assignment =
                (l.revision != Some(c.revision())).then(|| (c.revision(), assignment_of(&c)));
            (c.take_steps(), assignment, c.fenced())
        };
        if let Some((revision, assignment)) = assignment {
            l.revision = Some(revision);
            self.meters.units.set(assignment.units.len() as f64);
            self.tx.send_if_modified(|a| {
                let changed = *a != assignment;
                *a = assignment;
                changed
            });
        }
        for step in steps {
            match step {
                Step::Revoke { units, why } => {
                    let now = clock::now();
                    match why {
                        Revocation::Fenced { ended } => tracing::warn!(
                            member = %self.id,
                            units = units.len(),
                            first = %units[0].unit,
                            ended_ago = ?now.saturating_duration_since(ended),
                            deadline = ?self.opts.deadline,
                            "hold ended (no successful read or no ping within the deadline, or the process was paused): revoking at once"
                        ),
                        why => {
                            tracing::debug!(member = %self.id, units = units.len(), reason = why.reason(), "revoking")
                        }
                    }
                    // One task per unit: a slow stop delays no other unit's.
                    for owned in self.shared.owned(units) {
                        let acquiring = l.acquiring.get(&owned.unit).cloned();
                        tokio::spawn(calls::revoke(
                            self.handoff.clone(),
                            owned,
                            why,
                            acquiring,
                            self.id.clone(),
                            self.meters.clone(),
                            done.clone(),
                        ));
                    }
                }
                Step::Acquire { units } => {
                    tracing::debug!(member = %self.id, units = units.len(), token = %units[0].token, "acquired");
                    self.meters.acquired.increment(units.len() as u64);
                    for owned in self.shared.owned(units) {
                        let finished = CancellationToken::new();
                        l.acquiring.insert(owned.unit.clone(), finished.clone());
                        tokio::spawn(calls::acquire(
                            self.handoff.clone(),
                            owned,
                            finished,
                            self.id.clone(),
                            done.clone(),
                        ));
                    }
                }
                Step::Overran { units, ended } => {
                    let names: Vec<&str> = units.iter().map(|t| t.unit.as_str()).collect();
                    tracing::error!(
                        member = %self.id,
                        units = ?names,
                        ended_ago = ?clock::now().saturating_duration_since(ended),
                        deadline = ?self.opts.deadline,
                        "a revocation is still running after the hold ended: the next owner may already work on these units (make revocations finish within the deadline)"
                    );
                }
            }
        }
        if fenced != l.fenced {
            l.fenced = fenced;
            let (read, ping) = self.shared.lock().last_contact();
            let ago = |t: Option<Instant>| t.map(|t| t.elapsed());
            if fenced && !matches!(l.phase, Phase::Stopping { .. } | Phase::Leaving { .. }) {
                tracing::warn!(member = %self.id, since_read = ?ago(read), since_ping = ?ago(ping), deadline = ?self.opts.deadline, "fenced: no successful read of the table or no ping within the deadline; holding nothing and answering pings UNAVAILABLE");
            } else if !fenced {
                tracing::info!(member = %self.id, "in contact again: reads and pings within the deadline");
            }
        }
        let serve = !fenced;
        if serve != l.serving {
            l.serving = serve;
            let status = if serve {
                ServingStatus::Serving
            } else {
                ServingStatus::NotServing
            };
            if self.own_health {
                self.health.set_service_status("", status).await;
            }
            if serve {
                self.health
                    .set_serving::<GrpcPingerServer<PingResponder>>()
                    .await;
            } else {
                self.health
                    .set_not_serving::<GrpcPingerServer<PingResponder>>()
                    .await;
            }
        }
    }

    /// Publishes readiness: registered, a report written, in contact, and
    /// not leaving.
    fn publish_ready(&self, l: &Loop) {
        // A read of the state: it must not wake the holds' waiters.
        let (reported, fenced, weight) = {
            let c = self.shared.peek();
            (c.written_report().is_some(), c.fenced(), c.weight())
        };
        let leaving = matches!(l.phase, Phase::Stopping { .. } | Phase::Leaving { .. });
        self.meters.weight.set(f64::from(weight));
        // Stopping counts as fenced in the state; the gauge says out of contact.
        self.meters
            .fenced
            .set(if fenced && !leaving { 1.0 } else { 0.0 });
        let reported = reported && !fenced;
        let ready = l.registered && matches!(l.phase, Phase::Following) && reported;
        self.meters.ready.set(if ready { 1.0 } else { 0.0 });
        self.ready
            .send_if_modified(|r| std::mem::replace(r, ready) != ready);
    }

    fn finished(&self, l: &mut Loop, batch: Vec<Done>) {
        let mut revoked = Vec::new();
        let mut failed = Vec::new();
        for done in batch {
            match done {
                Done::Revoked(unit) => revoked.push(unit),
                Done::StopFailed(unit) => failed.push(unit),
                Done::Acquired(unit) => {
                    if l.acquiring.get(&unit).is_some_and(|t| t.is_cancelled()) {
                        l.acquiring.remove(&unit);
                    }
                }
            }
        }
        if !failed.is_empty() {
            let now = clock::now();
            let end = self.shared.lock().stop_failed(now, &failed);
            tracing::warn!(
                member = %self.id,
                units = failed.len(),
                first = %failed[0],
                counts_as_stopped_in = ?end.map(|e| e.saturating_duration_since(now)),
                "units whose stop failed count as stopped when their hold ends"
            );
        }
        if revoked.is_empty() {
            return;
        }
        let late = self.shared.lock().revoked(clock::now(), &revoked);
        self.meters.revocations_late.increment(late.len() as u64);
        for (t, by) in late {
            tracing::error!(member = %self.id, unit = %t.unit, token = %t.token, late = ?by, "a revocation finished after the unit's hold had ended: it may have overlapped with the next owner");
        }
    }

    /// The next Redis call, if any is wanted now.
    fn next_io(&self, l: &mut Loop, now: Instant) -> Option<IoCall> {
        let store = self.store.clone();
        let id = self.id.clone();
        match l.phase {
            Phase::Leaving { .. } => {
                let list = self.opts.services_key.clone();
                return Some(Box::pin(async move {
                    leave(&store, &list, &id).await;
                    Io::Left
                }));
            }
            Phase::Stopping { .. } => return None,
            Phase::Following | Phase::Draining { .. } => {}
        }
        // A holder recovering from lost state asks what this member works
        // on: the statement goes first (nothing starts meanwhile), at the
        // report's pace after a failure.
        let held = if l.report_wait.is_none_or(|t| now >= t) {
            let mut c = self.shared.lock();
            c.held_due(now).map(|h| (h, c.written_report()))
        } else {
            None
        };
        if let Some((held, report)) = held {
            return Some(Box::pin(async move {
                let tag = held.tag;
                let result = store.write_held(&id, &held, report.as_ref()).await;
                Io::Held { tag, result }
            }));
        }
        if l.report_wait.is_none_or(|t| now >= t) {
            l.report_wait = None;
            let (due, written) = {
                let c = self.shared.lock();
                (c.report_due(), c.written_report())
            };
            // The refresh writes the report written last (after a start-over,
            // the new one once written: never one of the old numbering).
            let refresh = l.want_refresh.then_some(written).flatten();
            if let Some((report, announce)) = due.map(|r| (r, true)).or(refresh.map(|r| (r, false)))
            {
                l.want_refresh = false;
                return Some(Box::pin(async move {
                    let result = store.write_report(&id, &report, announce).await;
                    Io::Report {
                        report,
                        announce,
                        result,
                    }
                }));
            }
        }
        if l.want_read {
            l.want_read = false;
            return Some(Box::pin(async move {
                let sent = clock::now();
                let result = store.read_row(&id).await;
                Io::Read { sent, result }
            }));
        }
        if l.want_register {
            l.want_register = false;
            let list = self.opts.services_key.clone();
            return Some(Box::pin(async move {
                Io::Registered(store.register(&list, &id).await)
            }));
        }
        if l.want_transit
            && matches!(l.phase, Phase::Draining { .. })
            && self.shared.lock().drained()
        {
            l.want_transit = false;
            return Some(Box::pin(async move {
                Io::Transit(store.transit_waits_on(&id).await)
            }));
        }
        None
    }

    /// Takes a finished Redis call; `Some` when the task is done.
    fn handle_io(&self, l: &mut Loop, io: Io) -> Option<Ending> {
        let now = clock::now();
        match io {
            Io::Read { sent, result } => match result {
                Ok(RowRead {
                    row,
                    generation,
                    client,
                }) => {
                    l.failures.recovered(&self.id);
                    // A missing generation is unknown, as an unreadable one:
                    // the row is followed, nothing starts (a token must be
                    // above the previous owner's).
                    let generation = match generation {
                        Ok(Some(g)) => {
                            l.bad_generation = false;
                            Some(g)
                        }
                        Ok(None) => {
                            if !l.bad_generation {
                                tracing::warn!(key = %self.store.keys().meta, "the table has no generation (its metadata was lost or removed); following the row at the last generation and starting nothing until it is back");
                            }
                            l.bad_generation = true;
                            None
                        }
                        Err(e) => {
                            if !l.bad_generation {
                                tracing::warn!(error = %e, "the table's generation is unreadable; following the row at the last generation");
                            }
                            l.bad_generation = true;
                            None
                        }
                    };
                    let outcome =
                        self.shared
                            .lock()
                            .read(now, sent, generation, row.as_deref(), client);
                    match outcome {
                        ReadOutcome::Processed => l.stale = false,
                        ReadOutcome::Stale { processed } => {
                            if !l.stale {
                                tracing::warn!(member = %self.id, read = ?generation, processed, "the table's generation went back (Redis lost writes: its data, or a lagging replica was promoted); ignoring rows until the holder writes one above the last processed one (it does once it reads this member's report)");
                            }
                            l.stale = true;
                        }
                        ReadOutcome::OtherConnection { named } => {
                            if l.other_connection != Some(client) {
                                tracing::info!(member = %self.id, ?client, ?named, "this member's Redis connection changed: naming the new one in a report before its reads extend any hold");
                            }
                            l.other_connection = Some(client);
                        }
                        ReadOutcome::OtherServer { holder } => {
                            let read = client.and_then(|c| c.server);
                            if l.other_server != read {
                                tracing::warn!(member = %self.id, holder = %holder, read = ?read, "this member reads another Redis server than the one the holder writes on (an old master still answering): its reads extend no hold; finding the master again");
                            }
                            l.other_server = read;
                            self.store.find_master_again();
                            // (The report written last is due again, and a
                            // registration, on the server it reads.)
                        }
                        ReadOutcome::Behind { pinged } => {
                            if !l.stale {
                                tracing::warn!(member = %self.id, read = ?generation, pinged, "the table's generation is below the one the holder's ping named (Redis lost writes): ignoring rows until the holder writes one above it");
                            }
                            l.stale = true;
                        }
                    }
                    if !matches!(outcome, ReadOutcome::OtherServer { .. }) {
                        l.other_server = None;
                    }
                    if self.shared.lock().reassert_due() {
                        // Redis lost writes: register again now (the list
                        // may have lost this member), and the report written
                        // last is due again.
                        l.want_register = true;
                    }
                    l.want_transit = true;
                }
                Err(e) => {
                    self.meters.read_failures.increment(1);
                    l.failures.failed(&self.id, &e);
                }
            },
            Io::Report {
                report,
                announce,
                result,
            } => match result {
                Ok(()) => {
                    self.meters.reports.increment(1);
                    let before = {
                        let mut c = self.shared.lock();
                        let before = c.written_report().map(|r| r.client);
                        c.reported(now, report);
                        before
                    };
                    // Reads on the connection this report names count from
                    // now on: read at once rather than at the next poll.
                    if before.is_some_and(|b| b != report.client) {
                        l.want_read = true;
                    }
                    if announce {
                        tracing::debug!(member = %self.id, applied = report.applied, draining = report.draining, "reported");
                    }
                }
                Err(e) => {
                    self.meters.report_failures.increment(1);
                    log_store_error(&e, "could not write this member's report; retrying");
                    l.report_wait = Some(now + REPORT_RETRY);
                }
            },
            Io::Held { tag, result } => {
                let ok = result.is_ok();
                match result {
                    Ok(()) => {
                        tracing::info!(member = %self.id, recovery = %tag, "stated what this member works on, for the holder's recovery");
                    }
                    Err(e) => {
                        log_store_error(
                            &e,
                            "could not state what this member works on for the holder's recovery; retrying",
                        );
                        l.report_wait = Some(now + REPORT_RETRY);
                    }
                }
                self.shared.lock().held_written(tag, ok);
            }
            Io::Registered(result) => match result {
                Ok(added) => {
                    if added && l.registered {
                        tracing::info!(member = %self.id, list = %self.opts.services_key, "re-registered (the list had lost this member)");
                    } else if added {
                        tracing::info!(member = %self.id, list = %self.opts.services_key, "registered");
                    }
                    l.registered = true;
                }
                Err(e) => log_store_error(&e, "could not register; retrying"),
            },
            Io::Transit(result) => match result {
                Ok(false) if self.shared.lock().drained() => {
                    if let Phase::Draining { .. } = l.phase {
                        tracing::info!(member = %self.id, "drained: the holder moved every unit away; deregistering");
                        l.phase = Phase::Leaving {
                            ending: Ending::HandedOver,
                        };
                    }
                }
                Ok(_) => {
                    tracing::debug!(member = %self.id, "drained, but the holder still waits on units revoked from this member")
                }
                Err(e) => log_store_error(&e, "could not read the units in transit; retrying"),
            },
            Io::Left => {
                self.left.store(true, Ordering::SeqCst);
                if let Phase::Leaving { ending } = l.phase {
                    return Some(ending);
                }
            }
        }
        None
    }
}

/// Deregisters: `LREM` from the services list, then `HDEL` of the report.
/// Failures are logged: the distributor then sees the member fail.
pub(super) async fn leave(store: &Store, list: &str, id: &str) {
    match store.deregister(list, id).await {
        Ok(_) => tracing::info!(member = %id, list, "deregistered"),
        Err(e) => {
            tracing::warn!(error = %e, member = %id, "could not deregister; the distributor will see it fail")
        }
    }
    if let Err(e) = store.remove_report(id).await {
        tracing::warn!(error = %e, member = %id, "could not remove this member's report");
    }
    if let Err(e) = store.remove_loads(id).await {
        tracing::warn!(error = %e, member = %id, "could not remove this member's measured loads");
    }
}

fn assignment_of(c: &Ownership) -> Assignment {
    let owned = c.owned();
    Assignment {
        in_table: c.in_table(),
        units: owned.iter().map(|t| t.unit.clone()).collect(),
        tokens: owned.into_iter().map(|t| (t.unit, t.token)).collect(),
        generation: c.generation(),
        fenced: c.fenced(),
    }
}

async fn sleep_until(wake: Option<Instant>) {
    match wake {
        Some(w) => tokio::time::sleep_until(w.into()).await,
        None => std::future::pending().await,
    }
}

async fn poll_io(io: &mut Option<IoCall>) -> Io {
    match io {
        Some(call) => call.await,
        None => std::future::pending().await,
    }
}
