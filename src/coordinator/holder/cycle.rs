//! One holder cycle, run as its own task so that renewals never wait on it:
//! read the lists and the stored table's state, ping every member, update
//! liveness and the mass-failure guard, solve the table, and write it (fenced)
//! if it or the liveness history changed. It performs IO through the edges and
//! decides nothing about the lease: the machine (`machine.rs`) started it and
//! takes its [`CycleReport`] back.
//!
//! Pings settle in two phases, so that one hung member (which answers only
//! when its ping times out) never delays what the others already told us:
//!
//! ```text
//!   0 ── answers, refusals (~1 ms) ──▶ grace (50 ms): apply, solve, write if changed
//!                                      still running: carried to the next cycle,
//!                                      whose state stays as it was meanwhile
//! ```
//!
//! One exception: when a live member failed and few others answered by the
//! grace, the cycle waits for this round's pings (up to their timeout), so
//! that a cut of the holder's own network that lands in the middle of a round
//! is seen as one mass failure, not as one failure now and the rest later.
//!
//! Another: when more members are still unheard of (never answered any
//! holder) than heard from, as in a fresh fleet's first cycle, the cycle
//! waits for their first answers (up to a first contact's allowance), so
//! that units are placed once over all of them rather than on the fastest
//! few and then moved.
//!
//! Guarantees: a failed read never produces a write (the last table stays);
//! the table is written only when its digest differs from the stored one; the
//! cycle checks the lease is locally valid (`acts_until`) right before it
//! writes, and Redis re-checks token and epoch in the write itself.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use opentelemetry::trace::TraceContextExt as _;
use tokio::sync::watch;
use tracing::field::Empty;
use tracing::{Instrument as _, Span, info_span};
use tracing_opentelemetry::OpenTelemetrySpanExt as _;

use super::core::{
    CommitPlan, CoreConfig, CycleCore, Finished, InputsRequest, Kind, Now, Outcome, Prefetched,
    Ready, Round,
};
use super::handoff::Refusal;
use super::lists::assemble;
use super::pings::InFlight;
use super::solve::{SolveSettings, desired};
use super::warm::WarmView;
use super::{CycleError, CycleReport, HolderView, mark_error};
use crate::core::balance::Balance;
use crate::core::delta::{ReplacedRows, TableDelta};
use crate::core::handoff;
use crate::core::suspicion::Guard;
use crate::core::table::MatchingTable;
use crate::core::timing::Timing;
use crate::edge::clock;
use crate::edge::clock::WallClock;
use crate::edge::grpc::{PingReport, Pinger};
use crate::edge::pings::MemberPings;
use crate::edge::redis::{Commit, Committed, CostsRead, LeaseGrant, Snapshot, Store};
use crate::edge::store::HoldingStore;
use crate::error::StoreError;
use crate::ops::metrics::Metrics;

/// Everything a cycle task needs, owned, so it runs beside the state machine.
/// Generic over its IO (the store, the pings), so that the simulation runs
/// the same cycle against its in-memory store and simulated members.
pub(in crate::coordinator) struct CycleContext<S = Store, P = Pinger> {
    pub(in crate::coordinator) store: S,
    pub(in crate::coordinator) pinger: P,
    /// Unix ms, for values shared with members.
    pub(in crate::coordinator) wall: WallClock,
    pub(in crate::coordinator) metrics: Arc<Metrics>,
    pub(in crate::coordinator) services: Vec<String>,
    pub(in crate::coordinator) units_key: String,
    pub(in crate::coordinator) replica_id: String,
    pub(in crate::coordinator) forget_after: Option<Duration>,
    /// `-quarantine-after` and `-quarantine-window`.
    pub(in crate::coordinator) quarantine: crate::core::quarantine::QuarantineRule,
    pub(in crate::coordinator) grant: LeaseGrant,
    pub(in crate::coordinator) acts_until: watch::Receiver<Instant>,
    pub(in crate::coordinator) generation_floor: u64,
    /// Pings of earlier cycles still running, and their members.
    pub(in crate::coordinator) carried: InFlight,
    pub(in crate::coordinator) carried_members: HashSet<String>,
    pub(in crate::coordinator) guard: Guard,
    pub(in crate::coordinator) failure_threshold: u32,
    pub(in crate::coordinator) ping_timeout: Duration,
    /// The built-in pacing (the ping round's grace, a first contact's
    /// allowance).
    pub(in crate::coordinator) timing: Timing,
    pub(in crate::coordinator) handoff: handoff::Settings,
    /// The assignment mode and `-max-moves-per-cycle`.
    pub(in crate::coordinator) solve: SolveSettings,
    /// What this replica prepared as a standby, for a new holding's first
    /// cycle (see [`WarmView`]).
    pub(in crate::coordinator) warm: Option<WarmView>,
}

impl<S: HoldingStore, P: MemberPings> CycleContext<S, P> {
    /// One full cycle: (on a new holding, or after a write of unknown
    /// outcome, read Redis' state first), read, ping, review mass
    /// failures, solve, write if anything changed, forget.
    pub(in crate::coordinator) async fn run(
        self,
        view: Option<HolderView>,
        refused: Vec<Refusal>,
    ) -> Result<CycleReport, CycleError> {
        self.drive(Kind::Full, view, refused).await
    }

    /// A handoff cycle: reads the members' reports and the table's state,
    /// pings nobody, and plans on the last full cycle's inputs. `refused`:
    /// members whose connection just ended and whose ping sent at once was
    /// refused (their process is gone): they fail now, exactly as a full
    /// cycle's refused ping would make them, without pinging everyone else.
    pub(in crate::coordinator) async fn run_handoff(
        self,
        view: Option<HolderView>,
        refused: Vec<Refusal>,
    ) -> Result<CycleReport, CycleError> {
        self.drive(Kind::Handoff, view, refused).await
    }

    /// The clocks and the lease's bound, for the core.
    fn now(&self) -> Now {
        Now {
            at: clock::now(),
            unix_ms: self.wall.unix_ms(),
            acts_until: *self.acts_until.borrow(),
        }
    }

    /// Does what the core asks, one request at a time, until it is done.
    async fn drive(
        mut self,
        kind: Kind,
        view: Option<HolderView>,
        refused: Vec<Refusal>,
    ) -> Result<CycleReport, CycleError> {
        let config = CoreConfig {
            failure_threshold: self.failure_threshold,
            guard: self.guard,
            replica_id: self.replica_id.clone(),
            forget_after: self.forget_after,
            handoff: self.handoff,
            keys: self.store.keys().clone(),
            units_key: self.units_key.clone(),
            generation_floor: self.generation_floor,
            reads_costs: self.solve.reads_costs(),
            join_delay: self.solve.join_delay(),
            epoch: self.grant.epoch,
            server: self.store.server(),
            recovery_gather: self.timing.recovery_gather,
            quarantine: self.quarantine,
        };
        let mut core = CycleCore::new(kind, config, view, refused, self.warm.take());
        // Pings of earlier cycles still running (hung members): collected
        // by this round, never sent again.
        let mut pending = std::mem::take(&mut self.carried);
        let mut pending_members = std::mem::take(&mut self.carried_members);
        let mut write_span: Option<Span> = None;
        // The last digested delta's tables and replaced rows' hashes: the
        // commit of the same tables builds its delta from them instead of
        // hashing those rows again.
        let mut digested: Option<(Arc<MatchingTable>, Arc<MatchingTable>, ReplacedRows)> = None;
        let mut outcome = Outcome::Start;
        // Per-step timings, only when asked for (`RUST_LOG=distributor::cycle_steps=debug`).
        let mut steps =
            tracing::enabled!(target: "distributor::cycle_steps", tracing::Level::DEBUG)
                .then(StepTimes::default);
        loop {
            let stepped = steps.is_some().then(clock::now);
            let mut ready = core.step(outcome, self.now());
            if let Some(span) = write_span.take() {
                self.record_write(&mut core, &mut ready, &span);
            }
            if let (Some(t), Some(stepped)) = (steps.as_mut(), stepped) {
                t.core += clock::now().saturating_duration_since(stepped);
                t.io_from = Some(clock::now());
                t.name = ready.name();
                if let Ready::Done(_) = ready {
                    t.log(kind);
                }
            }
            outcome = match ready {
                Ready::ReadHolding { with_table, inputs } => {
                    let prefetch = async {
                        match inputs {
                            Some(request) => {
                                let (inputs, costs) = self.fetch_inputs(&request).await;
                                Some(Box::new(Prefetched {
                                    request,
                                    inputs,
                                    costs,
                                }))
                            }
                            None => None,
                        }
                    };
                    let (r, prefetched) =
                        tokio::join!(self.store.read_holding(with_table), prefetch);
                    if with_table && r.is_ok() {
                        self.metrics.resyncs.inc();
                    }
                    Outcome::Holding(r, prefetched)
                }
                Ready::ReadInputs(request) => {
                    let (inputs, costs) = self.fetch_inputs(&request).await;
                    Outcome::Inputs(inputs, costs)
                }
                Ready::AssembleLists {
                    cache,
                    groups,
                    units,
                } => Outcome::Lists(assemble(cache, groups, units).await),
                Ready::ReadState { reports_since } => {
                    let (state, reports) = tokio::join!(
                        self.store.read_table_state(),
                        self.store.read_reports_since(reports_since)
                    );
                    Outcome::State(state, reports)
                }
                Ready::Ping { members } => {
                    // Every ping tells the members what this holder knows.
                    self.pinger.set_view(Some(core.ping_view()));
                    let reports = self
                        .ping_round(&core, &members, &mut pending, &mut pending_members)
                        .await;
                    Outcome::Pinged(reports)
                }
                Ready::ReadTable => Outcome::Table(self.store.read_table().await),
                Ready::ReadHeld => Outcome::Held(self.store.read_held().await),
                Ready::Solve { granted } => {
                    let inputs = Arc::clone(core.inputs());
                    let (desired, solved) =
                        desired(self.solve, &inputs, core.view_mut(), &granted).await;
                    self.metrics
                        .solve(if solved { "solved" } else { "memoised" });
                    Outcome::Solved(desired)
                }
                Ready::Digest { table, history } => {
                    // A new table's digest (from the previous one's, by the
                    // rows that differ) and change record are computed on a
                    // blocking thread.
                    let base = Arc::clone(&history.previous);
                    let small = table.bytes().max(base.bytes()) <= super::INLINE_BYTES;
                    let (next, record, replaced) = super::blocking_unless(small, move || {
                        let table = Arc::new(table);
                        let replaced = TableDelta::between(&history.previous, &table).replaced();
                        let record = history.record(&table);
                        (table, record, replaced)
                    })
                    .await;
                    digested = Some((base, Arc::clone(&next), replaced));
                    Outcome::Digested(next, record)
                }
                Ready::Commit(plan) => {
                    let span = self.write_span(&core, &plan);
                    let delta =
                        plan.table
                            .as_deref()
                            .zip(plan.base.as_deref())
                            .map(|(next, base)| match &digested {
                                Some((b, n, replaced))
                                    if std::ptr::eq(&**b, base) && std::ptr::eq(&**n, next) =>
                                {
                                    TableDelta::again(base, next, replaced)
                                }
                                _ => TableDelta::between(base, next),
                            });
                    let view = core.view();
                    let described = self.solve.describe();
                    let commit = Commit {
                        table: plan.table.as_deref(),
                        delta: delta.as_ref(),
                        health: &view.unsaved,
                        suspects: &view.unsaved_suspects,
                        transit: plan.transit.as_deref(),
                        generation_floor: plan.generation_floor,
                        holder_id: &self.replica_id,
                        now_ms: plan.now_ms,
                        assignment: &described,
                        last_change: plan.last_change.as_deref(),
                        expected_version: plan.expected_version,
                        history: plan.history.as_deref(),
                        server: self.store.server(),
                        reports: view.handoff.reports_known(),
                        deadline_max: view.handoff.deadline_max().unwrap_or_default(),
                    };
                    if let Some((kind, _, bytes)) = commit.table_sent() {
                        span.record("write", kind);
                        span.record("bytes", bytes);
                        self.metrics.table_write(kind, bytes);
                    }
                    let r = self
                        .store
                        .commit(&self.grant, &commit)
                        .instrument(span.clone())
                        .await;
                    if let (
                        Ok(Committed::Written {
                            generation: Some(_),
                            ..
                        }),
                        Some(t),
                    ) = (&r, &plan.table)
                    {
                        self.store.wrote_table(Arc::clone(t));
                    }
                    write_span = Some(span);
                    Outcome::Committed(r)
                }
                Ready::Forget { pairs } => {
                    Outcome::Forgotten(self.store.forget_many(&self.grant, &pairs).await)
                }
                Ready::RecordQuarantine { records } => Outcome::QuarantineRecorded(
                    self.store.record_quarantine(&self.grant, &records).await,
                ),
                Ready::RestoreReports { reports } => {
                    Outcome::Restored(self.store.restore_reports(&reports).await)
                }
                Ready::Done(r) => return self.report(kind, *r, pending, pending_members),
            };
            if let Some(t) = steps.as_mut() {
                t.done();
            }
        }
    }

    /// A full cycle's read, and the costs or loads when the solve needs
    /// them.
    async fn fetch_inputs(
        &self,
        request: &InputsRequest,
    ) -> (Result<Snapshot, StoreError>, Option<CostsRead>) {
        let costs = async {
            match (request.costs_since, self.solve.balance) {
                (Some(held), Balance::Load(_)) => Some(self.store.read_loads_since(held).await),
                (Some(held), _) => Some(self.store.read_costs_since(held).await),
                (None, _) => None,
            }
        };
        tokio::join!(
            self.read_inputs(&request.held, request.reports_since),
            costs
        )
    }

    /// A full cycle's read: the lists, the table's state and the reports.
    async fn read_inputs(
        &self,
        held: &HashMap<String, u64>,
        reports_since: Option<u64>,
    ) -> Result<Snapshot, StoreError> {
        let read = info_span!(
            "read_inputs",
            lists = self.services.len() + 1,
            otel.status_code = Empty,
            otel.status_message = Empty
        );
        let r = self
            .store
            .read_snapshot(&self.services, &self.units_key, held, reports_since)
            .instrument(read.clone())
            .await;
        match &r {
            Ok(s) => {
                let read_count = s
                    .groups
                    .iter()
                    .chain([&s.units])
                    .filter(|l| l.entries.is_some())
                    .count() as u64;
                self.metrics.list_reads("read", read_count);
                self.metrics
                    .list_reads("cached", s.groups.len() as u64 + 1 - read_count);
            }
            Err(e) => mark_error(&read, &e.to_string()),
        }
        r
    }

    /// One round of pings to `members` (those whose earlier ping still
    /// runs are not pinged again: their result is collected as it comes),
    /// in phases (`pings::Round`). Pings that have not settled stay in
    /// `pending`, for the next cycle.
    async fn ping_round(
        &self,
        core: &CycleCore,
        members: &[String],
        pending: &mut InFlight,
        pending_members: &mut HashSet<String>,
    ) -> Vec<PingReport> {
        let ping = info_span!(
            "ping",
            members = members.len(),
            beats = Empty,
            ok = Empty,
            failed = Empty,
            otel.status_code = Empty,
            otel.status_message = Empty
        );
        // In list order: the same lists ping in the same order (the
        // simulation replays a seed exactly).
        let fresh_list: Vec<String> = members
            .iter()
            .filter(|m| !pending_members.contains(*m))
            .cloned()
            .collect();
        let carried = std::mem::take(pending);
        let beats_before = self.pinger.beats_sent();
        *pending = ping.in_scope(|| self.pinger.ping_tasks(&fresh_list));
        let beats = self.pinger.beats_sent().saturating_sub(beats_before);
        ping.record("beats", beats);
        self.metrics.ping_beats(beats);
        pending_members.extend(fresh_list.iter().cloned());
        let fresh: HashSet<String> = fresh_list.into_iter().collect();
        for task in carried {
            pending.push(task);
        }
        let mut reports: Vec<PingReport> = Vec::with_capacity(members.len());
        let round = Round {
            liveness: &core.view().liveness,
            was_live: core.was_live(),
            guard_percent: self.guard.percent,
            grace: self.timing.ping_grace,
            patience: self.ping_timeout.max(self.timing.first_contact),
        };
        let waited = round
            .gather(pending, pending_members, &fresh, &mut reports)
            .await;
        if let Some((unheard, heard, still_unheard)) = waited.first_contacts {
            tracing::info!(
                unheard,
                heard,
                still_unheard,
                "waited for first contacts before placing units"
            );
        }
        let mut reasons: std::collections::BTreeMap<&'static str, usize> = Default::default();
        for r in &reports {
            match &r.result {
                Ok(rtt) => self.metrics.ping_ok(*rtt),
                Err(f) => {
                    self.metrics.ping_failed(f.reason());
                    *reasons.entry(f.reason()).or_default() += 1;
                }
            }
        }
        let failed: usize = reasons.values().sum();
        ping.record("ok", reports.len() - failed);
        ping.record("failed", failed);
        if failed > 0 {
            // Every cycle while a member stays down: debug only. Its failure
            // is logged once, when it changes state.
            ping.in_scope(|| {
                for (reason, count) in &reasons {
                    tracing::debug!(reason, count, "pings failed");
                }
            });
            mark_error(
                &ping,
                &format!("{failed} of {} pings failed", reports.len()),
            );
        }
        reports
    }

    /// The write's span, linked to the writes that revoked what it grants.
    fn write_span(&self, core: &CycleCore, plan: &CommitPlan) -> Span {
        let view = core.view();
        let span = info_span!(
            "write_table",
            epoch = self.grant.epoch,
            table = plan.table.is_some(),
            rows = plan.rows,
            write = Empty,
            bytes = Empty,
            health_changes = view.unsaved.set.len() + view.unsaved.removed.len(),
            revoked = view.handoff.last.revoked,
            moved = view.handoff.last.moved.len(),
            in_transit = view.handoff.last.in_transit,
            generation = Empty,
            otel.status_code = Empty,
            otel.status_message = Empty,
        );
        for g in &plan.links {
            if let Some(cx) = view.handoff.revocations.get(g) {
                span.add_link(cx.clone());
            }
        }
        span
    }

    /// What the write's outcome was, on its span; a confirmed revocation's
    /// span is kept, for the grants that follow to link to.
    fn record_write(&self, core: &mut CycleCore, ready: &mut Ready, span: &Span) {
        let Some(note) = core.take_note() else {
            return;
        };
        if let Some(g) = note.generation {
            span.record("generation", g);
            Span::current().record("generation", g);
        }
        if let Some(g) = note.revoked_at {
            let cx = span.context().span().span_context().clone();
            // The view is the core's, or the finished cycle's.
            let view = match ready {
                Ready::Done(r) => r.as_mut().as_mut().ok().map(|f| &mut f.view),
                _ => Some(core.view_mut()),
            };
            if let Some(view) = view {
                view.handoff.revocations.insert(g, cx);
            }
        }
        if let Some(e) = &note.error {
            mark_error(span, e);
        }
    }

    /// The cycle's report, with the pings still in flight.
    fn report(
        &self,
        kind: Kind,
        finished: Result<Finished, CycleError>,
        in_flight: InFlight,
        in_flight_members: HashSet<String>,
    ) -> Result<CycleReport, CycleError> {
        let f = match finished {
            Ok(f) => f,
            Err(e) => {
                if matches!(e, CycleError::Read(_) | CycleError::Inputs { .. }) {
                    mark_error(&Span::current(), &e.to_string());
                }
                return Err(e);
            }
        };
        if f.claimed > 0 {
            self.metrics.claimed_units.inc_by(f.claimed as u64);
        }
        match kind {
            Kind::Full => {
                let listed_now: HashSet<&str> = f.inputs.members().collect();
                self.pinger.retain(&listed_now);
            }
            Kind::Handoff => {
                for (_, failure) in &f.failures {
                    self.metrics.ping_failed(failure.reason());
                }
            }
        }
        Ok(CycleReport {
            epoch: self.grant.epoch,
            inputs: f.inputs,
            failures: f.failures,
            view: f.view,
            transitions: f.transitions,
            review: f.review,
            groups: f.groups,
            write: f.write,
            generation_floor: f.generation_floor,
            forgotten: f.forgotten,
            in_flight,
            in_flight_members,
            unverified: f.unverified,
        })
    }
}

/// A cycle's time by step, logged once at its end (debug, target
/// `distributor::cycle_steps`): where a cycle's milliseconds go.
#[derive(Default)]
struct StepTimes {
    core: Duration,
    name: &'static str,
    io_from: Option<Instant>,
    io: Vec<(&'static str, Duration)>,
}

impl StepTimes {
    fn done(&mut self) {
        if let Some(from) = self.io_from.take() {
            self.io
                .push((self.name, clock::now().saturating_duration_since(from)));
        }
    }

    fn log(&self, kind: Kind) {
        let steps: Vec<String> = self
            .io
            .iter()
            .map(|(name, d)| format!("{name}={:.2}", d.as_secs_f64() * 1e3))
            .collect();
        tracing::debug!(
            target: "distributor::cycle_steps",
            ?kind,
            core_ms = self.core.as_secs_f64() * 1e3,
            steps = %steps.join(" "),
            "cycle steps (ms)"
        );
    }
}
