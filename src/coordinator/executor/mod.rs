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
//! `probes` decides which members are pinged on a connection of their own
//! and what each result asks for.

mod probes;

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt as _;
use futures::future::BoxFuture;
use futures::stream::FuturesUnordered;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio::time::{Instant, sleep_until};
use tokio_util::sync::CancellationToken;
use tracing::field::Empty;
use tracing::{Instrument as _, Span, info_span};

use self::probes::{Probe, ProbeBook, ProbeCause, REFUSAL_SETTLE, Verdict, probe, verdict};
use super::holder::{
    CycleContext, CycleError, CycleReport, HolderView, InFlight, LOG_FIRST, Preparer, Refusal,
    SolveSettings, WarmView, Write, count_by, log_review, mark_error,
};
use super::machine::{Action, CycleOutcome, CycleSummary, Event, Machine, Settings, Transition};
use crate::config::Config;
use crate::core::census::{self, Census, CensusView};
use crate::core::inputs::Rejection;
use crate::core::lease::{Acquisition, Claim, HolderConnection, LeaseGrant, Renewal};
use crate::core::status::{HandoffStatus, Role, Status, Takeover};
use crate::core::suspicion::Guard;
use crate::edge::grpc::{Closes, PingFailure, PingReport, PingTask, Pinger};
use crate::edge::redis::{LeaseClient, ListLimits, Notification, Store};
use crate::error::StoreError;
use crate::ops::metrics::Metrics;
use crate::unix_ms;

/// A Redis call started for the machine, finished.
enum Done {
    Acquire(Result<Acquisition, StoreError>),
    Renew {
        sent_at: Instant,
        epoch: u64,
        result: Result<Renewal, StoreError>,
    },
    Release {
        epoch: u64,
        result: Result<bool, StoreError>,
    },
    CheckHolder {
        client: u64,
        result: Result<HolderConnection, StoreError>,
    },
}

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
    /// [`REFUSAL_SETTLE`]).
    refusals_due: Option<Instant>,
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
        Executor {
            config,
            store,
            pinger,
            closes: Some(closes),
            refused: Vec::new(),
            refusals_due: None,
            status,
            metrics,
            acts_until: watch::channel(Instant::now()).0,
            holding: None,
            known_rejections: HashSet::new(),
            logged_inputs: None,
            read_failing: false,
            last_cycle_error: None,
            write_failing: false,
            acquire_failing: false,
            warm: Arc::default(),
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
        let now = Instant::now();
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
            Ok(_) => self.update(|s| s.redis_ok_at = Some(Instant::now())),
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
            self.config.poll_interval * WARM_EVERY_POLLS,
            self.status.subscribe(),
        )));
        let _prepare = AbortOnDrop(tokio::spawn(prepare_task(
            Preparer {
                store: self.store.clone(),
                metrics: self.metrics.clone(),
                services: self.config.services_namespaces.clone(),
                units_key: self.config.workunits_namespace.clone(),
                limits: list_limits(&self.config),
                failure_threshold: self.config.failure_threshold,
                solve: solve_settings(&self.config),
            },
            self.config.poll_interval,
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
            takeover_check: Some(crate::core::lease::TAKEOVER_CHECK),
        };
        let mut machine = Machine::new(settings, Instant::now());
        let mut calls: FuturesUnordered<BoxFuture<'static, Done>> = FuturesUnordered::new();
        let mut cycle: Option<JoinHandle<Result<CycleReport, CycleError>>> = None;
        let mut shutting_down = false;
        let mut closes = self.closes.take().expect("run once");
        // Pings on connections of their own (see `probes`).
        let mut probes: FuturesUnordered<BoxFuture<'static, Probe>> = FuturesUnordered::new();
        let mut book = ProbeBook::default();
        tracing::info!(replica = %self.config.replica_id, table = %keys.table, "replica started as standby");

        loop {
            // Liveness for /healthz: this loop still turns. Written without
            // waking the status receivers.
            self.status.send_if_modified(|s| {
                s.heartbeat = Some(Instant::now());
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
                        let due = book.confirmations(view.handoff.to_confirm(&listed), Instant::now());
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
                _ = sleep_until(wake.unwrap_or_else(Instant::now)), if wake.is_some() => Event::Tick,
                n = notifications.recv(), if listening => match n {
                    Some(Notification::Message(ch, payload)) if ch == keys.lease_channel => {
                        Event::ReleaseNotice { epoch: payload.parse().ok() }
                    }
                    // A member wrote its report: its payload is never read.
                    Some(Notification::Message(ch, _)) if ch == keys.acked_channel => {
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
                        // The gathering window opens with the first close.
                        self.refusals_due.get_or_insert(Instant::now() + REFUSAL_SETTLE);
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
                _ = sleep_until(self.refusals_due.unwrap_or_else(Instant::now)), if self.refusals_due.is_some() && book.idle() => {
                    self.refusals_due = None;
                    if self.refused.is_empty() {
                        continue;
                    }
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
            let actions = machine.step(event, Instant::now());
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

    /// Performs an action that needs no loop state.
    fn perform(&mut self, action: Action, calls: &mut FuturesUnordered<BoxFuture<'static, Done>>) {
        match action {
            Action::CheckHolder { client } => {
                let store = self.store.clone();
                calls.push(Box::pin(async move {
                    let result = store.holder_connection(client).await;
                    Done::CheckHolder { client, result }
                }));
            }
            Action::Acquire {
                epoch_floor,
                generation_floor,
                takeover,
            } => {
                let (store, timing) = (self.store.clone(), self.config.lease);
                let (id, threshold) = (
                    self.config.replica_id.clone(),
                    self.config.failure_threshold,
                );
                calls.push(Box::pin(async move {
                    let claim = Claim {
                        ttl: timing.ttl,
                        epoch_floor,
                        generation_floor,
                        holder_id: &id,
                        now_ms: unix_ms(),
                        failure_threshold: threshold,
                        takeover: takeover.as_ref(),
                    };
                    Done::Acquire(store.acquire(&claim).await)
                }));
            }
            Action::Renew {
                grant,
                budget,
                sent_at,
            } => {
                let (store, ttl) = (self.store.clone(), self.config.lease.ttl);
                calls.push(Box::pin(async move {
                    let result = store.renew(&grant, ttl, budget).await;
                    Done::Renew {
                        sent_at,
                        epoch: grant.epoch,
                        result,
                    }
                }));
            }
            Action::Release { grant } => {
                let store = self.store.clone();
                calls.push(Box::pin(async move {
                    let result = store.release(&grant).await;
                    Done::Release {
                        epoch: grant.epoch,
                        result,
                    }
                }));
            }
            Action::ActsUntil(at) => {
                self.acts_until.send_replace(at);
            }
            Action::BecameHolder { epoch } => {
                self.metrics.lease("acquired");
                // The warm view is this holding's first cycle's now.
                self.metrics.warm_generation.set(0);
                lease_span(&self.config.replica_id, "acquired", epoch).in_scope(|| {
                    tracing::info!(replica = %self.config.replica_id, epoch, "lease acquired; acting as holder")
                });
                // Refusals seen in an earlier holding are that holding's.
                self.refused.clear();
                self.refusals_due = None;
                self.holding = Some(Holding {
                    epoch,
                    view: None,
                    in_flight: InFlight::new(),
                    in_flight_members: HashSet::new(),
                    settled: InFlight::new(),
                    cycle_started: Instant::now(),
                    cycle_span: Span::none(),
                    handoff_only: false,
                });
                self.update(|s| {
                    s.lease_problem = None;
                    s.holding_blocked = None;
                    s.role = Role::Holder;
                    s.epoch = epoch;
                    s.holder = Some(self.config.replica_id.clone());
                    s.lease_acquisitions += 1;
                });
            }
            Action::SteppedDown {
                epoch,
                transition,
                detail,
            } => {
                self.metrics.lease(transition.label());
                let why = match transition {
                    Transition::Lapsed => "could not renew the lease within the renew deadline",
                    Transition::Lost => detail.unwrap_or("the lease is someone else's"),
                    Transition::Fenced => "a write was fenced by redis",
                    Transition::Abdicated => {
                        "most of a group failed at once, which this replica's own network may \
                         cause: handing the lease over so that another replica can confirm"
                    }
                    Transition::Released => "shutting down",
                };
                lease_span(&self.config.replica_id, transition.label(), epoch).in_scope(|| {
                    if transition == Transition::Released {
                        tracing::info!(replica = %self.config.replica_id, epoch, "releasing the lease")
                    } else {
                        tracing::warn!(replica = %self.config.replica_id, epoch, reason = why, "stepping down to standby")
                    }
                });
                self.holding = None;
                // The connections to members stay: a standby keeps them warm
                // (its warm task drops unlisted members'), so that a replica
                // that lapsed under load takes the lease back with warm
                // channels, not 10,000 new connections.
                self.update(|s| {
                    s.role = Role::Standby;
                    s.holder = None;
                });
            }
            Action::SawHolder {
                holder,
                epoch,
                generation,
                foreign,
                watchable,
            } => {
                if !watchable && foreign.is_none() {
                    self.set_takeover(Takeover::Ttl(
                        "the holder recorded no lease connection (CLIENT not permitted to it, \
                         a cluster, or an older version)"
                            .into(),
                    ));
                }
                if let Some(why) = &foreign
                    && self.status.borrow().lease_problem.as_ref() != Some(why)
                {
                    self.metrics.lease("foreign");
                    tracing::warn!(
                        key = %self.store.keys().lease,
                        problem = %why,
                        "the lease key was not written by a replica; it was given a TTL and will lapse"
                    );
                }
                self.update(|s| {
                    s.holder = (!holder.is_empty()).then(|| holder.clone());
                    s.epoch = epoch;
                    bump(&mut s.generation, generation);
                    s.lease_problem = foreign.clone();
                });
            }
            Action::Stop | Action::AbortCycle | Action::StartCycle { .. } => {
                unreachable!("handled by the loop")
            }
        }
    }

    /// Records how a crashed holder would be replaced; logs a change to or
    /// from the TTL fallback once.
    fn set_takeover(&self, takeover: Takeover) {
        let before = self.status.borrow().takeover.clone();
        if before == takeover {
            return;
        }
        match &takeover {
            Takeover::Ttl(why) => tracing::warn!(
                reason = %why,
                "fast takeover unavailable: a crashed holder is replaced only when its lease \
                 expires (up to one TTL)"
            ),
            Takeover::Fast if before != Takeover::Unknown => {
                tracing::info!("fast takeover available again")
            }
            _ => {}
        }
        self.update(|s| s.takeover = takeover);
    }

    /// The takeover mode this holder's own lease connection allows.
    fn own_takeover(&self) {
        match self.store.lease_client() {
            LeaseClient::Id(_) => self.set_takeover(Takeover::Fast),
            LeaseClient::Refused { why, .. } => self.set_takeover(Takeover::Ttl(why)),
            LeaseClient::Unknown => {}
        }
    }

    /// Turns a finished call into the machine's event, logging and counting.
    fn done(&mut self, done: Done) -> Event {
        match done {
            Done::CheckHolder { client, result } => {
                self.redis_result(&result);
                match &result {
                    Ok(HolderConnection::Refused) => self.set_takeover(Takeover::Ttl(
                        "CLIENT not permitted or not available".into(),
                    )),
                    Ok(_) => self.set_takeover(Takeover::Fast),
                    Err(e) => {
                        tracing::debug!(error = %e, client, "could not check the holder's connection")
                    }
                }
                if matches!(result, Ok(HolderConnection::Closed)) {
                    tracing::info!(
                        client,
                        "the holder's lease connection is closed; taking the lease over"
                    );
                }
                Event::HolderChecked {
                    client,
                    result: result.map_err(|_| ()),
                }
            }
            Done::Acquire(result) => {
                self.redis_result(&result);
                if let Ok(Acquisition::Acquired(_)) = &result {
                    self.own_takeover();
                }
                match result {
                    Ok(a) => {
                        if std::mem::take(&mut self.acquire_failing) {
                            tracing::info!("redis reachable again");
                        }
                        Event::Acquired(Ok(a))
                    }
                    Err(e) => {
                        if !std::mem::replace(&mut self.acquire_failing, true) || !e.is_retryable()
                        {
                            tracing::warn!(error = %e, kind = e.kind(), "lease acquisition failed; retrying every retry interval");
                        }
                        if !e.is_retryable() {
                            self.update(|s| s.last_error = Some(e.to_string()));
                        }
                        Event::Acquired(Err(()))
                    }
                }
            }
            Done::Renew {
                sent_at,
                epoch,
                result,
            } => {
                self.redis_result(&result);
                if result.is_ok() {
                    self.own_takeover();
                }
                if let Err(e) = &result {
                    let span = lease_span(&self.config.replica_id, "renew_failed", epoch);
                    mark_error(&span, &e.to_string());
                    span.in_scope(|| {
                        tracing::warn!(error = %e, kind = e.kind(), epoch, "lease renewal failed; retrying until the renew deadline")
                    });
                }
                Event::Renewed {
                    sent_at,
                    result: result.map_err(|_| ()),
                }
            }
            Done::Release { epoch, result } => {
                self.redis_result(&result);
                match result {
                    Ok(true) => {
                        lease_span(&self.config.replica_id, "released", epoch)
                            .in_scope(|| tracing::info!(epoch, "lease released"));
                    }
                    Ok(false) => tracing::info!(epoch, "lease was no longer ours"),
                    Err(e) => {
                        tracing::warn!(error = %e, epoch, "could not release the lease; it will lapse")
                    }
                }
                Event::ReleaseDone
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
        h.cycle_started = Instant::now();
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
            metrics: self.metrics.clone(),
            services: self.config.services_namespaces.clone(),
            units_key: self.config.workunits_namespace.clone(),
            limits: list_limits(&self.config),
            replica_id: self.config.replica_id.clone(),
            forget_after: self.config.forget_after,
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
            },
            failure_threshold: self.config.failure_threshold,
            ping_timeout: self.config.ping_timeout,
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

    /// Takes a finished cycle's results into the books (status, metrics,
    /// logs) and the holding's view, and summarises it for the machine.
    /// `None` when the cycle belongs to no current holding.
    fn finish_cycle(&mut self, report: Result<CycleReport, CycleError>) -> Option<CycleSummary> {
        let h = self.holding.as_mut()?;
        let took = h.cycle_started.elapsed();
        let epoch = h.epoch;
        // Closed (and exported) when this function returns.
        let span = std::mem::replace(&mut h.cycle_span, Span::none());
        let handoff_only = h.handoff_only;
        if matches!(report, Err(CycleError::NotReady)) {
            return Some(CycleSummary {
                epoch,
                outcome: CycleOutcome::Skipped,
                generation_floor: 0,
                own_suspicions: false,
                next_release: None,
            });
        }
        // A cycle whose reads worked but whose write failed did not reach
        // Redis as it should: it refreshes nothing and counts as a failure.
        match &report {
            Ok(r) => match &r.write {
                Write::Failed(e) | Write::Unknown(e) => self.metrics.redis_error(e.kind()),
                _ => self.redis_result(&Ok::<(), StoreError>(())),
            },
            Err(CycleError::Read(e) | CycleError::Unreadable(e)) => {
                self.metrics.redis_error(e.kind())
            }
            Err(CycleError::Inputs { .. } | CycleError::NotReady) => {
                self.redis_result(&Ok::<(), StoreError>(()))
            }
        }
        let report = match report {
            Ok(r) => {
                if std::mem::take(&mut self.read_failing) {
                    tracing::info!("cycles recovered");
                }
                self.last_cycle_error = None;
                if self.status.borrow().holding_blocked.is_some() {
                    tracing::info!("read what the holder must know: acting again");
                    self.update(|s| s.holding_blocked = None);
                }
                r
            }
            Err(e) => {
                let text = e.to_string();
                if self.last_cycle_error.as_deref() != Some(text.as_str()) {
                    span.in_scope(|| {
                        tracing::warn!(error = %e, kind = e.kind(), "cycle skipped; keeping the last table")
                    });
                }
                self.last_cycle_error = Some(text);
                self.read_failing = true;
                let outcome = match e {
                    CycleError::Read(_) | CycleError::Unreadable(_) => "read_error",
                    CycleError::Inputs { .. } | CycleError::NotReady => "input_error",
                };
                self.metrics.cycle(outcome, took);
                let blocked = matches!(e, CycleError::Unreadable(_)).then(|| e.to_string());
                self.update(|s| {
                    s.failed_cycles += 1;
                    s.last_error = Some(e.to_string());
                    if blocked.is_some() {
                        s.holding_blocked = blocked;
                    }
                });
                return Some(CycleSummary {
                    epoch,
                    outcome: CycleOutcome::Skipped,
                    generation_floor: 0,
                    own_suspicions: false,
                    next_release: None,
                });
            }
        };
        if report.epoch != epoch {
            return None;
        }
        span.in_scope(|| self.log_inputs(&report));
        span.in_scope(|| log_review(&report.review, &report.view));
        // While this replica holds suspicions of its own, another replica
        // should look (checked every cycle: the census may only count the
        // others after the episode began).
        let me = self.config.replica_id.as_str();
        let own_suspicions = report.view.suspects.values().any(|s| s.replica == me);
        let h = self.holding.as_mut().expect("checked above");
        h.in_flight = report.in_flight;
        h.in_flight_members = report.in_flight_members;
        // What is written: the granted table (the desired one minus units
        // in transit), known after a confirmed write.
        let table = report.view.handoff.ledger.granted().cloned();
        let suspects = report.view.suspects.len();
        let handoff = report.view.handoff.last.clone();
        h.view = Some(report.view);
        for (member, list) in &report.forgotten {
            span.in_scope(|| {
                tracing::info!(member, list, "forgot a long-failing member (-forget-after)")
            });
        }
        let outcome = match report.write {
            Write::Unchanged => Ok(CycleOutcome::Unchanged),
            Write::NotActing => Ok(CycleOutcome::NotActing),
            Write::Written { generation: None } => Ok(CycleOutcome::Written { table: false }),
            Write::Written {
                generation: Some(g),
            } => {
                self.metrics.table_writes.inc();
                let table = table.unwrap_or_default();
                let bytes: usize = table.rows().iter().map(|(m, v)| m.len() + v.len()).sum();
                self.metrics.table_bytes.set(bytes as u64);
                span.in_scope(|| {
                    tracing::info!(
                        epoch,
                        generation = g,
                        members = table.len(),
                        assignments = table.assignments(),
                        units = report.inputs.units.len(),
                        revoked = handoff.revoked,
                        moved = handoff.moved.len(),
                        placed = handoff.placed,
                        in_transit = handoff.in_transit,
                        "matching table written"
                    )
                });
                // Handoffs completed by this write: revocation to grant.
                let now_ms = unix_ms();
                for m in &handoff.moved {
                    let secs = now_ms.saturating_sub(m.since_ms) as f64 / 1000.0;
                    self.metrics.handoff_duration.observe(secs);
                }
                self.update(|s| {
                    bump(&mut s.generation, g);
                    s.last_write_ms = Some(unix_ms());
                    s.table_writes += 1;
                });
                Ok(CycleOutcome::Written { table: true })
            }
            Write::Fenced(reason) => {
                self.metrics.fenced_writes.inc();
                self.update(|s| s.fenced_writes += 1);
                span.in_scope(|| {
                    tracing::warn!(
                        epoch,
                        reason,
                        "table write rejected by redis: this replica is no longer the holder"
                    )
                });
                Ok(CycleOutcome::Fenced)
            }
            Write::Failed(e) | Write::Unknown(e) => {
                if !self.write_failing || !e.is_retryable() {
                    span.in_scope(|| tracing::warn!(error = %e, kind = e.kind(), "table write failed; the next cycle reads redis' state again before it plans"));
                }
                Err(("write_error", e.to_string()))
            }
            Write::Outdated { version } => {
                span.in_scope(|| tracing::warn!(version, "table write refused by redis: its state changed since this plan read it (a late write, or an edit); the next cycle reads it again before it plans"));
                Err((
                    "write_outdated",
                    format!(
                        "table write refused: redis' state changed since it was read (version {version})"
                    ),
                ))
            }
        };
        let outcome = match outcome {
            Ok(outcome) => outcome,
            Err((label, error)) => {
                self.write_failing = true;
                self.metrics.cycle(label, took);
                self.update(|s| {
                    s.cycles += 1;
                    s.failed_cycles += 1;
                    s.last_error = Some(error);
                });
                return Some(CycleSummary {
                    epoch,
                    outcome: CycleOutcome::Failed,
                    generation_floor: report.generation_floor,
                    own_suspicions,
                    next_release: None,
                });
            }
        };
        if outcome != CycleOutcome::Fenced {
            if std::mem::take(&mut self.write_failing) {
                tracing::info!("table writes recovered");
            }
            self.metrics
                .cycle(if handoff_only { "handoff" } else { "ok" }, took);
            let by_kind = Rejection::KINDS
                .into_iter()
                .map(|k| {
                    let n = report
                        .inputs
                        .rejections
                        .iter()
                        .filter(|r| r.kind() == k)
                        .count();
                    (k, n)
                })
                .collect();
            self.update(|s| {
                s.cycles += 1;
                s.last_error = None;
                s.units = report.inputs.units.len();
                s.invalid_inputs = report.inputs.rejections.len();
                s.invalid_by_kind = by_kind;
                s.groups = report.groups;
                s.suspects = suspects;
                s.handoff = HandoffStatus {
                    in_transit: handoff.in_transit,
                    owing: handoff.owing,
                    draining: handoff.draining,
                    acknowledging: handoff.acknowledging,
                    invalid_reports: handoff.invalid_reports,
                };
            });
        }
        Some(CycleSummary {
            epoch,
            outcome,
            generation_floor: report.generation_floor,
            own_suspicions,
            next_release: handoff.next_release,
        })
    }

    /// Logs the rejections of `report`'s inputs not logged before.
    fn log_rejections(&mut self, report: &CycleReport) {
        let fingerprint = |r: &Rejection| xxhash_rust::xxh3::xxh3_64(r.to_string().as_bytes());
        let current: HashSet<u64> = report.inputs.rejections.iter().map(fingerprint).collect();
        let new: Vec<&Rejection> = report
            .inputs
            .rejections
            .iter()
            .filter(|r| !self.known_rejections.contains(&fingerprint(r)))
            .collect();
        for r in new.iter().take(LOG_FIRST) {
            tracing::warn!(kind = r.kind(), "invalid input: {r}");
        }
        if new.len() > LOG_FIRST {
            let by_kind = count_by(new.iter().map(|r| r.kind()));
            tracing::warn!(
                more = new.len() - LOG_FIRST,
                by_kind,
                total_invalid = current.len(),
                "more new invalid inputs (only the first {LOG_FIRST} are logged)"
            );
        }
        self.known_rejections = current;
    }

    /// Logs what changed in the inputs and in liveness, summarised: a burst
    /// (100,000 bad units, 10,000 members failing at once) gives the first
    /// few lines and one count, and a state that persists is not repeated.
    fn log_inputs(&mut self, report: &CycleReport) {
        let same = self
            .logged_inputs
            .as_ref()
            .is_some_and(|i| std::sync::Arc::ptr_eq(i, &report.inputs));
        if !same {
            self.log_rejections(report);
            self.logged_inputs = Some(std::sync::Arc::clone(&report.inputs));
        }

        let reasons: std::collections::HashMap<&str, &PingFailure> = report
            .failures
            .iter()
            .map(|(m, f)| (m.as_str(), f))
            .collect();
        let (back, failing): (Vec<_>, Vec<_>) =
            report.transitions.iter().partition(|(_, live)| *live);
        for (member, _) in back.iter().take(LOG_FIRST) {
            tracing::info!(member, "member answers: it gets work");
        }
        if back.len() > LOG_FIRST {
            tracing::info!(
                more = back.len() - LOG_FIRST,
                "more members answer again (only the first {LOG_FIRST} are logged)"
            );
        }
        for (member, _) in failing.iter().take(LOG_FIRST) {
            let reason = reasons
                .get(member.as_str())
                .map(|f| f.to_string())
                .unwrap_or_default();
            tracing::warn!(member, reason, "member failing: its work is redistributed");
        }
        if failing.len() > LOG_FIRST {
            let by_reason = count_by(
                failing
                    .iter()
                    .map(|(m, _)| reasons.get(m.as_str()).map_or("unknown", |f| f.reason())),
            );
            tracing::warn!(
                more = failing.len() - LOG_FIRST,
                by_reason,
                "more members failing (only the first {LOG_FIRST} are logged)"
            );
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
        max_moves: config.max_moves_per_cycle,
    }
}

/// Aborts a background task when its owner goes away (also on panic).
struct AbortOnDrop<T>(JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// How often, in poll intervals, a standby refreshes its warm channels.
const WARM_EVERY_POLLS: u32 = 5;

/// Warm standby: while this replica is not the holder, it keeps a connection
/// open to every listed member (see [`Pinger::warm`]), judging nothing, so
/// that its first cycle as a holder pings over open connections. The members
/// lists are read (O(members)) every `interval`; a round whose read fails is
/// skipped.
async fn warm_task(
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
        let answered = pinger.warm(&members).await;
        tracing::trace!(listed = members.len(), answered, "warm channels refreshed");
    }
}

/// Warm view: while this replica is a standby, it keeps what its first
/// cycle as a holder would read and solve (see [`WarmView`]), brought up to
/// date every `interval`: with nothing changed, a guard probe per list and
/// one for the reports. After a preparation that read a list in full, the
/// next waits [`WARM_EVERY_POLLS`] intervals, so that where Redis does not
/// permit `WATCH` (every list read every time) a standby reads a fifth as
/// often as the holder. While this
/// replica holds, the slot is emptied (the holding's own view is newer, and
/// a second copy of the inputs would double the memory of a large fleet).
async fn prepare_task(
    preparer: Preparer,
    interval: Duration,
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
                    pause = interval * WARM_EVERY_POLLS;
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
/// (`status.holding_blocked`), so that `distributor status` shows it.
async fn census_task(
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
        let blocked = {
            let s = status.borrow();
            s.holding_blocked.clone().filter(|_| s.role == Role::Holder)
        };
        if let Some(why) = blocked {
            report += &census::blocked_suffix(&why);
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
async fn generation_task(
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

fn bump(slot: &mut u64, value: u64) -> bool {
    let changed = value > *slot;
    *slot = (*slot).max(value);
    changed
}

async fn join<T>(handle: &mut Option<JoinHandle<T>>) -> T
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
