//! The executor: the IO around the pure [`Machine`]. One `tokio::select!` loop
//! turns timers, call results, finished cycles, notifications and census views
//! into [`Event`]s, steps the machine, and performs the [`Action`]s it returns:
//! Redis calls and cycles run as their own tasks, so the loop never waits on
//! IO and a slow call never holds up a renewal. It also keeps the books the
//! machine does not need: status, metrics, logs and spans.
//!
//! ```text
//!   timers ──┐                                   ┌──▶ Acquire/Renew/Release (tasks) ──┐
//!   results ─┼─▶ Event ─▶ Machine::step(now) ─▶ Actions                                │
//!   cycles ──┤                                   └──▶ StartCycle (task) ───────────────┤
//!   notices ─┘◀──────────────────────────────────── results, as events ◀───────────────┘
//! ```
//!
//! - `calls`: the machine's Redis calls and their results as events;
//! - `probes`: which members are pinged on a connection of their own, and
//!   what each result asks for (pure, tested);
//! - `books`: a finished cycle taken into status, metrics and logs;
//! - `tasks`: the census, warm and generation tasks beside the loop.

mod books;
mod calls;
mod probes;
mod tasks;

use self::calls::Done;
use self::tasks::{AbortOnDrop, census_task, generation_task, join, prepare_task, warm_task};

use std::collections::HashSet;
use std::sync::Arc;

use futures::StreamExt as _;
use futures::future::BoxFuture;
use futures::stream::FuturesUnordered;
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

use tokio::time::sleep_until;
use tokio_util::sync::CancellationToken;
use tracing::field::Empty;
use tracing::{Instrument as _, Span, info_span};

use self::probes::{Probe, ProbeBook, ProbeCause, Verdict, probe, verdict};
use super::holder::{
    CycleContext, CycleError, CycleReport, HolderView, InFlight, Preparer, Refusal, SolveSettings,
    WarmView,
};
use super::machine::{Action, Event, Machine, Settings};
use crate::config::Config;
use crate::core::lease::LeaseGrant;
use crate::core::status::Status;
use crate::core::suspicion::Guard;
use crate::core::timing::Timing;
use crate::edge::clock;
use crate::edge::grpc::{Closes, PingFailure, PingReport, PingTask, Pinger};
use crate::edge::redis::{ListLimits, Notification, Store};
use crate::error::StoreError;
use crate::ops::metrics::Metrics;

/// What the executor keeps of the current holding (IO state the machine does
/// not need): the members' view carried from cycle to cycle, pings still in
/// flight, and the cycle in flight.
struct Holding {
    epoch: u64,
    /// `None` until the first cycle inherits the last holder's view.
    view: Option<HolderView>,
    in_flight: InFlight,
    in_flight_members: HashSet<String>,
    /// Carried pings that finished between cycles, for the next one (their
    /// members are still in `in_flight_members`).
    settled: InFlight,
    cycle_started: Instant,
    /// The span of the cycle in flight; closed when its results are taken.
    cycle_span: Span,
    /// Whether the cycle running is a handoff cycle.
    handoff_only: bool,
}

pub(super) struct Executor {
    config: Config,
    store: Store,
    pinger: Pinger,
    /// Members whose connection just ended (see `edge/grpc/closes.rs`).
    closes: Option<Closes>,
    /// Members refused on a connection of their own, for the next handoff
    /// cycle: it fails the listed ones (a full cycle pings them itself) and
    /// releases what the refusals prove.
    refused: Vec<Refusal>,
    /// When the refusals gathered so far have settled (see
    /// `Timing::refusal_settle`).
    refusals_due: Option<Instant>,
    /// When the last member connection closed (see [`gathering_until`]).
    last_close: Option<Instant>,
    /// Members' acknowledgements that arrived while a probe ran: held until
    /// it answers (at most until this instant, `Timing::refusal_settle`
    /// after the first), so that a refusal it finds is released by the same
    /// handoff cycle as they are, not by the one after it.
    hints_held: Option<Instant>,
    status: watch::Sender<Status>,
    metrics: Arc<Metrics>,
    /// The lease's local deadline, for the cycle's last check before writing.
    acts_until: watch::Sender<Instant>,
    holding: Option<Holding>,
    /// Fingerprints of the invalid entries already logged.
    known_rejections: HashSet<u64>,
    /// The inputs whose rejections `known_rejections` holds: a cycle that
    /// reused them (no list changed) has nothing new to log, and hashing
    /// every rejection again would cost an idle cycle O(invalid entries).
    logged_inputs: Option<std::sync::Arc<crate::core::inputs::Inputs>>,
    /// Redis trouble is logged once per streak, not once per retry.
    read_failing: bool,
    /// The last failed cycle's error: a streak of the same one is logged once.
    last_cycle_error: Option<String>,
    write_failing: bool,
    acquire_failing: bool,
    /// What this replica prepared as a standby (see [`WarmView`]), for the
    /// first cycle of its next holding.
    warm: Arc<std::sync::Mutex<Option<WarmView>>>,
    /// The built-in pacing.
    timing: Timing,
}

impl Executor {
    pub(super) fn new(
        config: Config,
        store: Store,
        pinger: Pinger,
        closes: Closes,
        status: watch::Sender<Status>,
        metrics: Arc<Metrics>,
    ) -> Executor {
        let store = store.with_limits(list_limits(&config));
        Executor {
            config,
            store,
            pinger,
            closes: Some(closes),
            refused: Vec::new(),
            refusals_due: None,
            last_close: None,
            hints_held: None,
            status,
            metrics,
            acts_until: watch::channel(clock::now()).0,
            holding: None,
            known_rejections: HashSet::new(),
            logged_inputs: None,
            read_failing: false,
            last_cycle_error: None,
            write_failing: false,
            acquire_failing: false,
            warm: Arc::default(),
            timing: Timing::DEFAULT,
        }
    }

    /// Keeps a probe's refusal for the next handoff cycle, which runs once
    /// every probe of the window answered.
    fn queue_refusal(
        &mut self,
        member: String,
        failure: PingFailure,
        opened: Instant,
        disconnected: bool,
    ) {
        let now = clock::now();
        self.refused.push(Refusal {
            report: PingReport {
                member,
                result: Err(failure),
                at: now,
                opened: Some(opened),
            },
            disconnected,
        });
        // (A full cycle may have closed the window meanwhile.)
        self.refusals_due.get_or_insert(now);
    }

    /// Changes the status and keeps the gauges in step with it.
    fn update(&self, f: impl FnOnce(&mut Status)) {
        self.status.send_modify(|s| {
            f(s);
            self.metrics.sync(s);
        });
    }

    /// Counts a Redis error; a successful call marks Redis as reachable.
    fn redis_result<T>(&self, r: &Result<T, StoreError>) {
        match r {
            Ok(_) => self.update(|s| s.redis_ok_at = Some(clock::now())),
            Err(e) => self.metrics.redis_error(e.kind()),
        }
    }

    pub(super) async fn run(mut self, cancel: CancellationToken) {
        let keys = self.store.keys().clone();
        let channels = vec![
            keys.lease_channel.clone(),
            keys.table_channel.clone(),
            keys.acked_channel.clone(),
        ];
        let mut notifications = self.store.subscribe(channels.clone(), cancel.child_token());
        let mut listening = true;
        // Background steps that must never hold up a renewal report back here.
        let (census_tx, mut census_rx) = mpsc::channel(4);
        let _census = AbortOnDrop(tokio::spawn(census_task(
            self.store.clone(),
            self.config.replica_id.clone(),
            self.config.census_interval,
            self.status.subscribe(),
            census_tx,
        )));
        let _warm = AbortOnDrop(tokio::spawn(warm_task(
            self.store.clone(),
            self.pinger.clone(),
            self.config.services_namespaces.clone(),
            self.config.poll_interval * self.timing.warm_every_polls,
            self.status.subscribe(),
        )));
        let _prepare = AbortOnDrop(tokio::spawn(prepare_task(
            Preparer {
                store: self.store.clone(),
                metrics: self.metrics.clone(),
                services: self.config.services_namespaces.clone(),
                units_key: self.config.workunits_namespace.clone(),
                failure_threshold: self.config.failure_threshold,
                solve: solve_settings(&self.config),
            },
            self.config.poll_interval,
            self.timing.warm_every_polls,
            self.status.subscribe(),
            Arc::clone(&self.warm),
        )));
        let (floor_tx, mut floor_rx) = mpsc::channel(1);
        let (hint_tx, hint_rx) = mpsc::channel(1);
        let _floors = AbortOnDrop(tokio::spawn(generation_task(
            self.store.clone(),
            hint_rx,
            floor_tx,
        )));
        if self.config.redis_wait_replicas == 0 {
            let store = self.store.clone();
            tokio::spawn(async move {
                if let Some(n) = store.connected_replicas().await.filter(|n| *n > 0) {
                    tracing::warn!(
                        replicas = n,
                        "redis has replicas but -redis-wait-replicas is 0: a failover of redis \
                         can lose the lease and let two replicas act for up to one TTL"
                    );
                }
            });
        }

        let settings = Settings {
            lease: self.config.lease,
            poll_interval: self.config.poll_interval,
            takeover_check: Some(self.timing.takeover_check),
            timing: self.timing,
        };
        let mut machine = Machine::new(settings, clock::now());
        let mut calls: FuturesUnordered<BoxFuture<'static, Done>> = FuturesUnordered::new();
        let mut cycle: Option<JoinHandle<Result<CycleReport, CycleError>>> = None;
        let mut shutting_down = false;
        let mut closes = self.closes.take().expect("run once");
        // Pings on connections of their own (see `probes`).
        let mut probes: FuturesUnordered<BoxFuture<'static, Probe>> = FuturesUnordered::new();
        let mut book = ProbeBook::new(self.timing.confirm_spacing);
        tracing::info!(replica = %self.config.replica_id, table = %keys.table, "replica started as standby");

        loop {
            // Liveness for /healthz: this loop still turns. Written without
            // waking the status receivers.
            self.status.send_if_modified(|s| {
                s.heartbeat = Some(clock::now());
                false
            });
            let wake = machine.next_wake();
            // Between cycles, pings carried from the last one (hung members)
            // are watched too: one that fails is a reason to cycle now, not at
            // the next poll (which could come up to a poll interval after its
            // timeout).
            let mut carried = self
                .holding
                .as_mut()
                .filter(|_| cycle.is_none())
                .map(|h| &mut h.in_flight)
                .filter(|f| !f.is_empty());
            let event = tokio::select! {
                biased;
                _ = cancel.cancelled(), if !shutting_down => {
                    shutting_down = true;
                    Event::Shutdown
                }
                Some(done) = calls.next() => self.done(done),
                r = join(&mut cycle), if cycle.is_some() => {
                    cycle = None;
                    let summary = self.finish_cycle(r);
                    // Members that owe units this holder revoked and that
                    // are refused, or no longer listed: a refusal counts
                    // once a connection opened after the revoking write is
                    // refused (a process restarted on the address meanwhile
                    // answers instead), and, for a member that names its
                    // Redis connection, once Redis has it no more.
                    if let Some(view) = self.holding.as_ref().and_then(|h| h.view.as_ref()) {
                        let listed: HashSet<&str> = view
                            .handoff
                            .inputs
                            .as_ref()
                            .map(|i| i.members().collect())
                            .unwrap_or_default();
                        let due = book.confirmations(view.handoff.to_confirm(&listed), clock::now());
                        for (member, c) in due {
                            book.start(&member);
                            probe(&self.pinger, &self.store, member, ProbeCause::Confirm(c), &mut probes);
                        }
                    }
                    match summary {
                        Some(summary) => Event::CycleDone(summary),
                        None => continue,
                    }
                }
                _ = reached(wake.unwrap_or_else(clock::now)), if wake.is_some() => Event::Tick,
                n = notifications.recv(), if listening => match n {
                    Some(Notification::Message(ch, payload)) if ch == keys.lease_channel => {
                        Event::ReleaseNotice { epoch: payload.parse().ok() }
                    }
                    // A member wrote its report: its payload is never read.
                    Some(Notification::Message(ch, _)) if ch == keys.acked_channel => {
                        if self.holding.is_some() && !book.idle() {
                            let until = clock::now() + self.timing.refusal_settle;
                            self.hints_held.get_or_insert(until);
                            continue;
                        }
                        Event::HandoffHint
                    }
                    // A table write by some holder, or a new subscription (a
                    // write may have been missed): a hint to re-read the
                    // generation from Redis. Its payload is never trusted.
                    Some(_) => {
                        let _ = hint_tx.try_send(());
                        continue;
                    }
                    // Shutting down: the subscriber ended because `cancel`
                    // did; stop listening (a new subscription would end at
                    // once, in a busy loop until the lease is released).
                    None if cancel.is_cancelled() => {
                        listening = false;
                        continue;
                    }
                    None => {
                        // The subscriber task ended without being cancelled (it
                        // never should): subscribe again rather than stop.
                        tracing::error!("the notification subscription ended; subscribing again");
                        notifications = self.store.subscribe(channels.clone(), cancel.child_token());
                        continue;
                    }
                },
                // A member's connection ended: ping it now. Only a holder
                // acts on it; one probe per member at a time.
                Some(closed) = closes.recv() => {
                    // The channel is forgotten: the next ping (or a standby's
                    // next warm round) opens a new connection.
                    if !self.pinger.closed(&closed) {
                        continue;
                    }
                    let member = closed.member;
                    if self.holding.is_some() && book.start(&member) {
                        let now = clock::now();
                        let settle = self.timing.refusal_settle;
                        let mut due = gathering_until(self.last_close, self.refusals_due, now, settle);
                        let smallest = self.status.borrow().groups.iter().map(|g| g.1).min();
                        if burst_may_turn_on(self.config.mass_failure_percent, smallest) {
                            due = due.max(now + settle);
                        }
                        self.refusals_due = Some(due);
                        self.last_close = Some(now);
                        probe(&self.pinger, &self.store, member, ProbeCause::Closed, &mut probes);
                    }
                    continue;
                }
                Some(Probe { member, cause, opened, result, disconnected }) = probes.next() => {
                    book.finished(&member);
                    let closed = cause == ProbeCause::Closed;
                    if closed {
                        let reason = result.as_ref().err().map_or("answered", PingFailure::reason);
                        self.metrics.connection_closed(reason);
                    }
                    match (verdict(&cause, &result, disconnected), result) {
                        (Verdict::Refused { disconnected }, Err(failure)) => {
                            tracing::debug!(member, disconnected, closed, %failure, "a member is refused on a connection of its own: a handoff cycle takes it");
                            self.queue_refusal(member, failure, opened, disconnected);
                            continue;
                        }
                        (Verdict::Reopen, _) => {
                            tracing::debug!(member, "a member's connection ended; it answers on a new one");
                            // Reopen the watched connection now, so that the
                            // member's next close is seen too (its result
                            // does not count: cycles ping it as usual).
                            let pinger = self.pinger.clone();
                            tokio::spawn(async move {
                                let _ = pinger.ping(&member).await;
                            });
                            continue;
                        }
                        (Verdict::Again, result) => {
                            tracing::debug!(member, ?result, "a member's connection ended and a probe was reset; probing once more");
                            if book.start(&member) {
                                probe(&self.pinger, &self.store, member, ProbeCause::ClosedAgain, &mut probes);
                            }
                            continue;
                        }
                        (Verdict::Cycle, result) => {
                            tracing::debug!(member, ?result, "a member's connection ended and it does not answer; cycling now");
                            Event::MemberDown
                        }
                        (verdict, result) => {
                            tracing::debug!(member, ?result, ?verdict, "probe");
                            continue;
                        }
                    }
                }
                Some((member, report)) = async { carried.as_mut()?.next().await }, if carried.is_some() => {
                    let Some(h) = self.holding.as_mut() else { continue };
                    let Some(report) = report else {
                        // The ping task failed: pinged again next cycle.
                        h.in_flight_members.remove(&member);
                        continue;
                    };
                    let failed = report.result.is_err();
                    // Kept aside, ready: the next cycle takes it at once.
                    h.settled.push(PingTask::new(member, tokio::spawn(async move { report })));
                    if failed {
                        Event::MemberDown
                    } else {
                        continue;
                    }
                }
                // The window closed and every probe of it answered: a handoff
                // cycle fails the refused ones together.
                _ = reached(self.refusals_due.unwrap_or_else(clock::now)), if self.refusals_due.is_some() && book.idle() => {
                    self.refusals_due = None;
                    if self.refused.is_empty() {
                        continue;
                    }
                    self.hints_held = None;
                    Event::HandoffHint
                }
                // Acknowledgements held for a probe: every probe answered
                // (without a refusal to act on, or the arm above took them
                // along), or the wait ran out.
                _ = reached(if book.idle() { clock::now() } else { self.hints_held.unwrap_or_else(clock::now) }), if self.hints_held.is_some() && (self.refusals_due.is_none() || !book.idle()) => {
                    self.hints_held = None;
                    Event::HandoffHint
                }
                Some(step) = census_rx.recv() => {
                    self.redis_result(&step);
                    match step {
                        Ok(Some(view)) => {
                            self.update(|s| s.census = Some(view));
                            Event::Census(view)
                        }
                        _ => continue,
                    }
                }
                Some(floor) = floor_rx.recv() => {
                    self.redis_result(&floor);
                    match floor {
                        Ok(g) => Event::Generation(g),
                        Err(e) => {
                            tracing::debug!(error = %e, "could not re-read the generation");
                            continue;
                        }
                    }
                }
            };
            let actions = machine.step(event, clock::now());
            for action in actions {
                match action {
                    Action::Stop => {
                        tracing::info!(replica = %self.config.replica_id, "replica stopped");
                        return;
                    }
                    Action::AbortCycle => {
                        if let Some(c) = cycle.take() {
                            c.abort();
                        }
                    }
                    Action::StartCycle {
                        grant,
                        acts_until,
                        generation_floor,
                        handoff_only,
                    } => {
                        self.acts_until.send_replace(acts_until);
                        cycle = Some(self.start_cycle(grant, generation_floor, handoff_only));
                    }
                    other => self.perform(other, &mut calls),
                }
            }
            let floor = machine.generation_floor();
            if floor > self.status.borrow().generation {
                self.update(|s| s.generation = floor);
            }
        }
    }

    /// Starts one holder cycle as its own task.
    fn start_cycle(
        &mut self,
        grant: LeaseGrant,
        generation_floor: u64,
        handoff_only: bool,
    ) -> JoinHandle<Result<CycleReport, CycleError>> {
        let h = self.holding.as_mut().expect("a cycle starts while holding");
        h.cycle_started = clock::now();
        h.handoff_only = handoff_only;
        h.cycle_span = info_span!(
            "cycle",
            handoff_only,
            replica = %self.config.replica_id,
            epoch = grant.epoch,
            members = Empty,
            live = Empty,
            failed = Empty,
            units = Empty,
            changed = Empty,
            generation = Empty,
            otel.status_code = Empty,
            otel.status_message = Empty,
        );
        let ctx = CycleContext {
            store: self.store.clone(),
            pinger: self.pinger.clone(),
            wall: crate::edge::clock::WallClock::System,
            metrics: self.metrics.clone(),
            services: self.config.services_namespaces.clone(),
            units_key: self.config.workunits_namespace.clone(),
            replica_id: self.config.replica_id.clone(),
            forget_after: self.config.forget_after,
            quarantine: self.config.quarantine,
            grant,
            acts_until: self.acts_until.subscribe(),
            generation_floor,
            carried: {
                let mut carried = std::mem::take(&mut h.in_flight);
                carried.extend(std::mem::take(&mut h.settled));
                carried
            },
            carried_members: std::mem::take(&mut h.in_flight_members),
            guard: Guard {
                percent: self.config.mass_failure_percent,
                confirm_ms: self.config.mass_failure_confirm.as_millis() as u64,
                together_ms: self.timing.refusal_settle.as_millis() as u64,
            },
            failure_threshold: self.config.failure_threshold,
            ping_timeout: self.config.ping_timeout,
            timing: self.timing,
            handoff: crate::core::handoff::Settings {
                handoff_delay: self.config.handoff_delay,
            },
            solve: solve_settings(&self.config),
            // A new holding's first full cycle starts from what this replica
            // prepared as a standby.
            warm: (h.view.is_none() && !handoff_only)
                .then(|| self.warm.lock().expect("warm view lock").take())
                .flatten(),
        };
        let view = h.view.clone();
        // A full cycle pings everyone itself (it takes only what the
        // refusals prove for the handoff); a handoff cycle fails them all
        // once they settled, as one round, and none while they are still
        // settling (a handoff cycle started by an acknowledgement meanwhile
        // leaves them to their own).
        let settling = handoff_only && self.refusals_due.is_some();
        let refused = if settling {
            Vec::new()
        } else {
            self.refusals_due = None;
            std::mem::take(&mut self.refused)
        };
        if handoff_only {
            tokio::spawn(
                ctx.run_handoff(view, refused)
                    .instrument(h.cycle_span.clone()),
            )
        } else {
            tokio::spawn(ctx.run(view, refused).instrument(h.cycle_span.clone()))
        }
    }
}

/// A short span for one lease transition, so it shows in the trace view.
fn lease_span(replica: &str, transition: &'static str, epoch: u64) -> Span {
    info_span!(
        "lease",
        replica,
        transition,
        epoch,
        otel.status_code = Empty,
        otel.status_message = Empty
    )
}

/// Until when refusals are gathered before a handoff cycle fails them, on
/// a close at `now`: a close alone is acted on as soon as its probe answers
/// (the guard's judgement of a burst does not need it held back: a later
/// round counts it, `Guard::together_ms`); a close within `settle` of the
/// previous one opens (or extends) a window of `settle`, so that the rest
/// of a burst is seen as one round.
fn gathering_until(
    last_close: Option<Instant>,
    due: Option<Instant>,
    now: Instant,
    settle: Duration,
) -> Instant {
    let until = match last_close {
        Some(last) if now.saturating_duration_since(last) < settle => now + settle,
        _ => now,
    };
    due.map_or(until, |d| d.max(until))
}

/// Ready once `at` has come: at once where it has (tokio's timer rounds a
/// deadline up to its next millisecond tick, so a sleep until now waits up
/// to a millisecond more: on a refusal's path, about a tenth of a killed
/// worker's time to owned again), else a sleep until then.
async fn reached(at: Instant) {
    if at > clock::now() {
        sleep_until(at.into()).await;
    }
}

/// Whether one close should be held back for the rest of a possible burst
/// even alone: where the mass-failure guard turns on for a burst of three
/// or fewer (a group of five live members at the default 50 %), a death is
/// a large share of its group and of the units, so acting on it before the
/// burst is seen would move much of what the guard is there to keep. Also
/// while no group is known yet. (Elsewhere a later round of the burst
/// counts it: `Guard::together_ms`.)
fn burst_may_turn_on(percent: u32, smallest_live: Option<usize>) -> bool {
    let Some(live) = smallest_live else {
        return percent < 100;
    };
    // The fewest failures that turn the guard on: k with k * 100 > p * live.
    let needed = percent as usize * live / 100 + 1;
    percent < 100 && needed <= 3
}

/// The bounds on every list a cycle (or a warm view) reads.
fn list_limits(config: &Config) -> ListLimits {
    ListLimits {
        entries: config.max_list_entries,
        bytes: config.max_list_bytes,
    }
}

/// What a solve depends on besides its inputs.
fn solve_settings(config: &Config) -> SolveSettings {
    SolveSettings {
        assignment: config.assignment,
        balance: config.balance,
        max_moves: config.max_moves_per_cycle,
        join_delay: config.join_delay,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::timing::test_t0;

    #[test]
    fn a_close_is_held_back_alone_only_where_three_deaths_are_a_mass_failure() {
        assert!(burst_may_turn_on(50, Some(4)), "3 of 4");
        assert!(burst_may_turn_on(50, Some(5)), "3 of 5");
        assert!(!burst_may_turn_on(50, Some(6)), "4 of 6 needed");
        assert!(!burst_may_turn_on(50, Some(10)));
        assert!(burst_may_turn_on(20, Some(10)), "3 of 10 at 20 %");
        assert!(burst_may_turn_on(50, None), "no group known yet");
        assert!(!burst_may_turn_on(100, Some(2)), "the guard is off");
    }

    #[test]
    fn a_lone_close_is_not_held_back_and_a_second_one_opens_the_window() {
        let (t0, settle) = (test_t0(), Duration::from_millis(5));
        let ms = Duration::from_millis;
        assert_eq!(gathering_until(None, None, t0, settle), t0, "alone");
        assert_eq!(
            gathering_until(Some(t0 - ms(6)), None, t0, settle),
            t0,
            "the last close is past the window"
        );
        let second = t0 + ms(1);
        assert_eq!(
            gathering_until(Some(t0), Some(t0), second, settle),
            second + settle,
            "a burst: the rest is gathered"
        );
        assert_eq!(
            gathering_until(Some(second), Some(second + settle), t0 + ms(2), settle),
            t0 + ms(2) + settle,
            "each close of the burst extends it"
        );
        assert_eq!(
            gathering_until(None, Some(t0 + ms(9)), t0, settle),
            t0 + ms(9),
            "never shortened"
        );
    }
}
