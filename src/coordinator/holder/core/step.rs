//! One holder cycle as a pure state machine, in the raft-rs shape: the
//! cycle task asks [`CycleCore::step`] what to do next, does it (a read, a
//! round of pings, a CPU-bound solve or digest, the fenced write), and
//! passes back what happened as an [`Outcome`], until [`Ready::Done`]. Every
//! decision of the cycle is here or in the pure functions of the view it
//! calls; the task only does IO, spans and metrics.
//!
//! ```text
//!  (stale or new) ReadHolding ─▶ ReadInputs ─▶ AssembleLists ─▶ Ping ─┐   full
//!  (stale)        ReadHolding ─▶ ReadState ──────────────────────────┤   handoff
//!     ┌──────────────────────────────────────────────────────────────┘
//!     └▶ [ReadTable] ─▶ Solve ─▶ [Digest] ─▶ [Commit] ─▶ [Forget] ─▶ Done
//! ```
//!
//! A new holding that inherits a liveness (anyone live or suspected) skips
//! its `Ping`: it decides on what the last holder left, and its summary
//! asks the machine for the next full cycle at once, whose pings verify it.
//!
//! Guarantees, tested below:
//! - a cycle that cannot read what it must know writes nothing: a failed
//!   read of the holding, the inputs, the reports or the table state ends
//!   it (the last table stays), and a failed read of the stored table ends
//!   its write;
//! - the write is asked for only when something changed and only while the
//!   lease lets this holder act (`acts_until`, passed in with every
//!   outcome); Redis re-checks token and epoch in the write itself;
//! - whatever the write's outcome, the view takes it as
//!   [`HolderView::advance`] says (only a confirmed write lets the next
//!   plan start from it);
//! - `-forget-after` removes members only after a confirmed or unneeded
//!   write, while the lease lets this holder act;
//! - a first cycle on inherited liveness fails, revives and releases
//!   nothing by it: members keep their inherited state, and a release needs
//!   a report read now, a refusal this holder saw, or a wait counted from
//!   this holder's own start (`core::inherit`).

use std::collections::HashSet;
use std::sync::Arc;

use tracing::info_span;

use super::ready::{
    CommitNote, CommitPlan, CoreConfig, Finished, HistoryBasis, InputsRequest, Kind, Now, Outcome,
    Prefetched, Ready,
};
use super::{Changes, HolderView, Judge, Observed, Planned, Sent};
use crate::coordinator::holder::handoff::Refusal;
use crate::coordinator::holder::lists::ListCache;
use crate::coordinator::holder::warm::WarmView;
use crate::coordinator::holder::{CycleError, Write, group_counts, listed_entries, record_counts};
use crate::core::handoff::{self, StartingPoint};
use crate::core::history::{ChangeRecord, MemberStates};
use crate::core::inputs::Inputs;
use crate::core::table::{MatchingTable, Moves};
use crate::edge::grpc::PingReport;
use crate::edge::redis::{Committed, CostsRead, Inheritance, ReportsRead, Snapshot};
use crate::error::StoreError;

/// The stored table's state as the cycle read it.
struct Stored {
    digest: Option<String>,
    generation: u64,
    /// The table itself, when it was read (by this cycle or its resync).
    table: Option<Arc<MatchingTable>>,
}

/// The write in progress: where it started and what it planned.
struct Planning {
    granted: Arc<MatchingTable>,
    verify: bool,
    plan: Option<handoff::Plan>,
    next: Option<Arc<MatchingTable>>,
    table_changed: bool,
    /// What the next table changes, once digested.
    history: Option<ChangeRecord>,
}

/// Where the cycle is.
enum Phase {
    Start,
    Holding,
    Inputs,
    Lists,
    State,
    Pings,
    Table,
    Solve,
    Digest,
    Commit,
    Forget,
    Done,
}

/// One cycle's decisions; see the module documentation.
pub(in crate::coordinator::holder) struct CycleCore {
    kind: Kind,
    config: CoreConfig,
    phase: Phase,
    /// `None` until the view to plan from is known (a new holding).
    view: Option<HolderView>,
    warm: Option<WarmView>,
    refused: Vec<Refusal>,
    held_table: Option<Arc<MatchingTable>>,
    inputs: Option<Arc<Inputs>>,
    stored: Option<Stored>,
    was_live: HashSet<String>,
    observed: Observed,
    floor: u64,
    /// A numbering Redis lost: the next write renumbers (see
    /// [`HolderView::renumber_lost`]).
    renumber: bool,
    planning: Option<Planning>,
    write: Option<Write>,
    forgotten: Vec<(String, String)>,
    claimed: usize,
    note: Option<CommitNote>,
    /// A new holding's first cycle: its view is what the last holder left.
    inherited: bool,
    /// It decided on the inherited liveness without pinging.
    unverified: bool,
}

impl CycleCore {
    /// A cycle of `kind` from `view` (`None`: a new holding's first), with
    /// the refusals the executor's probes found and the warm view a standby
    /// prepared (taken on a new holding).
    pub(in crate::coordinator::holder) fn new(
        kind: Kind,
        config: CoreConfig,
        view: Option<HolderView>,
        refused: Vec<Refusal>,
        warm: Option<WarmView>,
    ) -> CycleCore {
        let floor = config.generation_floor;
        CycleCore {
            kind,
            config,
            phase: Phase::Start,
            view,
            warm,
            refused,
            held_table: None,
            inputs: None,
            stored: None,
            was_live: HashSet::new(),
            observed: Observed::default(),
            floor,
            renumber: false,
            planning: None,
            write: None,
            forgotten: Vec::new(),
            claimed: 0,
            note: None,
            inherited: false,
            unverified: false,
        }
    }

    /// The view, once known.
    pub(in crate::coordinator::holder) fn view(&self) -> &HolderView {
        self.view.as_ref().expect("asked once the view is known")
    }

    /// The view, for the solve (which memoises in it) and the write's span
    /// links.
    pub(in crate::coordinator::holder) fn view_mut(&mut self) -> &mut HolderView {
        self.view.as_mut().expect("asked once the view is known")
    }

    /// The inputs of this cycle, once known.
    pub(in crate::coordinator::holder) fn inputs(&self) -> &Arc<Inputs> {
        self.inputs
            .as_ref()
            .expect("asked once the inputs are known")
    }

    /// The members live before this round's pings.
    pub(in crate::coordinator::holder) fn was_live(&self) -> &HashSet<String> {
        &self.was_live
    }

    /// What the last write's outcome was (taken once).
    pub(in crate::coordinator::holder) fn take_note(&mut self) -> Option<CommitNote> {
        self.note.take()
    }

    /// Takes what the last request found and says what to do next.
    pub(in crate::coordinator::holder) fn step(&mut self, outcome: Outcome, now: Now) -> Ready {
        let phase = std::mem::replace(&mut self.phase, Phase::Done);
        match (phase, outcome) {
            (Phase::Start, Outcome::Start) => self.start(),
            (Phase::Holding, Outcome::Holding(r, prefetched)) => match r {
                Ok(inherited) => {
                    self.reconcile(inherited, now);
                    match (self.read(), prefetched) {
                        (Ready::ReadInputs(asked), Some(p)) if p.request == asked => {
                            let Prefetched { inputs, costs, .. } = *p;
                            self.inputs_read(inputs, costs)
                        }
                        (ready, _) => ready,
                    }
                }
                Err(e) => self.done(Err(CycleError::Unreadable(e))),
            },
            (Phase::Inputs, Outcome::Inputs(r, costs)) => self.inputs_read(r, costs),
            (Phase::Lists, Outcome::Lists(r)) => match r {
                Ok(cache) => self.lists_made(cache, now),
                Err(e) => self.done(Err(e)),
            },
            (Phase::State, Outcome::State(state, reports)) => self.state_read(state, reports, now),
            (Phase::Pings, Outcome::Pinged(reports)) => self.round_taken(reports, now),
            (Phase::Table, Outcome::Table(r)) => match r {
                Ok(t) => {
                    let generation = self.stored.as_ref().map_or(0, |s| s.generation);
                    self.start_from_stored(Arc::new(t), generation)
                }
                Err(e) => self.written(Write::Failed(e), now),
            },
            (Phase::Solve, Outcome::Solved(desired)) => self.plan(desired, now),
            (Phase::Digest, Outcome::Digested(next, record)) => {
                if let Some(p) = self.planning.as_mut() {
                    p.history = Some(record);
                }
                self.changes(next, now)
            }
            (Phase::Commit, Outcome::Committed(r)) => self.committed(r, now),
            (Phase::Forget, Outcome::Forgotten(r)) => {
                match r {
                    Ok(removed) => {
                        self.forgotten = removed
                            .into_iter()
                            .map(|(list, m)| (crate::core::inputs::excerpt(&m), list))
                            .collect()
                    }
                    Err(e) => tracing::warn!(error = %e, "could not forget long-failing members"),
                }
                self.finish()
            }
            (_, _) => unreachable!("the cycle task answers each request with its outcome"),
        }
    }

    fn done(&mut self, r: Result<Finished, CycleError>) -> Ready {
        self.phase = Phase::Done;
        Ready::Done(Box::new(r))
    }

    fn start(&mut self) -> Ready {
        if self.kind == Kind::Handoff {
            // A new holding's first full cycle comes at once anyway.
            let Some(view) = &self.view else {
                return self.done(Err(CycleError::NotReady));
            };
            if view.handoff.inputs.is_none() {
                return self.done(Err(CycleError::NotReady));
            }
        }
        match &self.view {
            Some(v) if !v.handoff.ledger.stale() => self.read(),
            view => {
                // A new holding has nothing to reconcile the table with (its
                // first plan reads and verifies it anyway); a resync does.
                let with_table = view.is_some();
                // A new holding's inputs do not depend on what it inherits
                // (its view starts empty but for the warm lists): read
                // beside it.
                let inputs = (self.kind == Kind::Full && view.is_none()).then(|| InputsRequest {
                    held: self
                        .warm
                        .as_ref()
                        .and_then(|w| w.view.lists.as_ref())
                        .map(|c| c.held(&self.config.units_key))
                        .unwrap_or_default(),
                    reports_since: None,
                    costs_since: self.config.reads_costs.then_some(None),
                });
                self.phase = Phase::Holding;
                Ready::ReadHolding { with_table, inputs }
            }
        }
    }

    /// The view from Redis' state (see [`HolderView::reconcile`]), and the
    /// log of what it found.
    fn reconcile(&mut self, inherited: Inheritance, now: Now) {
        let keys = &self.config.keys;
        // A view to reconcile: a resync after a write of unknown outcome.
        let resync = self.view.is_some();
        let (mut view, r) = HolderView::reconcile(
            self.view.take(),
            inherited,
            self.config.failure_threshold,
            &self.config.handoff,
            now.at,
            now.unix_ms,
        );
        self.floor = self.floor.max(r.generation);
        self.inherited = !resync;
        r.log(keys);
        if !resync && let Some(warm) = self.warm.take() {
            view.warm_from(warm);
        }
        r.log_view(&view);
        self.held_table = r.table;
        self.view = Some(view);
    }

    /// The cycle's own read, once the view is known.
    fn read(&mut self) -> Ready {
        let refused = std::mem::take(&mut self.refused);
        let view = self.view.as_mut().expect("the view is known");
        match self.kind {
            Kind::Full => {
                // Refusals the executor's probes found: what they prove
                // counts (liveness comes from this cycle's own pings).
                view.handoff.observe_refusals(&refused);
                self.phase = Phase::Inputs;
                Ready::ReadInputs(InputsRequest {
                    held: view
                        .lists
                        .as_ref()
                        .map(|c| c.held(&self.config.units_key))
                        .unwrap_or_default(),
                    reports_since: view.handoff.reports_version,
                    costs_since: self.config.reads_costs.then_some(view.costs.version),
                })
            }
            Kind::Handoff => {
                self.refused = refused;
                self.phase = Phase::State;
                Ready::ReadState {
                    reports_since: view.handoff.reports_version,
                }
            }
        }
    }

    fn inputs_read(&mut self, r: Result<Snapshot, StoreError>, costs: Option<CostsRead>) -> Ready {
        let snapshot = match r {
            Ok(s) => s,
            Err(e) => return self.done(Err(CycleError::Read(e))),
        };
        let Snapshot {
            groups,
            units,
            stored_digest,
            stored_generation,
            stored_table,
            reports,
        } = snapshot;
        let view = self.view.as_mut().expect("the view is known");
        // The members' reports first: without them (a read that may work
        // next time) nothing is planned.
        if let Err(e) = view.handoff.observe(reports, &self.config.keys) {
            return self.done(Err(CycleError::Read(e)));
        }
        if let Some(read) = costs
            && let Err(e) = view.costs.observe(read)
        {
            return self.done(Err(CycleError::Read(e)));
        }
        self.stored = Some(Stored {
            digest: stored_digest,
            generation: stored_generation,
            table: stored_table.map(Arc::new).or(self.held_table.take()),
        });
        self.phase = Phase::Lists;
        Ready::AssembleLists {
            cache: view.lists.take(),
            groups,
            units,
        }
    }

    fn lists_made(&mut self, cache: ListCache, now: Now) -> Ready {
        let inputs = Arc::clone(&cache.inputs);
        let view = self.view.as_mut().expect("the view is known");
        view.lists = Some(cache);
        let members: Vec<String> = inputs.members().map(str::to_string).collect();
        self.was_live = members
            .iter()
            .filter(|m| view.liveness.is_live(m))
            .cloned()
            .collect();
        self.inputs = Some(inputs);
        // A new holding with a liveness to inherit decides on it, without
        // waiting for a round of its own (thousands of first contacts take
        // longer than the lease's holder may leave the table alone); its
        // next cycle, at once, pings. Nothing inherited grants a unit: a
        // release needs a report read now or a refusal this holder saw.
        if self.inherited && (!self.was_live.is_empty() || !view.suspects.is_empty()) {
            self.unverified = true;
            return self.round_taken(Vec::new(), now);
        }
        self.phase = Phase::Pings;
        Ready::Ping { members }
    }

    /// Takes a round of pings into the view (none: the inherited liveness
    /// stands), then settles where the plan starts.
    fn round_taken(&mut self, reports: Vec<PingReport>, now: Now) -> Ready {
        let inputs = Arc::clone(self.inputs());
        let listed = listed_entries(&inputs);
        let view = self.view.as_mut().expect("the view is known");
        let judge = judge(&self.config, now);
        self.observed = view.take_round(&inputs, &listed, reports, &self.was_live, true, judge);
        view.note_joins(&inputs, now.at, self.config.join_delay);
        view.handoff.forget_departed(&inputs);
        view.handoff.inputs = Some(inputs);
        self.settle()
    }

    fn state_read(
        &mut self,
        state: Result<(Option<String>, u64, Option<MatchingTable>), StoreError>,
        reports: ReportsRead,
        now: Now,
    ) -> Ready {
        let (digest, generation, table) = match state {
            Ok(s) => s,
            Err(e) => return self.done(Err(CycleError::Read(e))),
        };
        let view = self.view.as_mut().expect("the view is known");
        if let Err(e) = view.handoff.observe(reports, &self.config.keys) {
            return self.done(Err(CycleError::Read(e)));
        }
        self.stored = Some(Stored {
            digest,
            generation,
            table: table.map(Arc::new).or(self.held_table.take()),
        });
        let inputs = view.handoff.inputs.clone().expect("checked at the start");
        let listed = listed_entries(&inputs);
        // Every refusal counts for the handoff (a member that deregistered
        // and exited still owes its units); liveness and the mass-failure
        // guard count listed members only.
        let refused = std::mem::take(&mut self.refused);
        view.handoff.observe_refusals(&refused);
        let refused: Vec<PingReport> = refused
            .into_iter()
            .map(|r| r.report)
            .filter(|r| listed.contains(&r.member))
            .collect();
        if !refused.is_empty() {
            let was_live: HashSet<String> = inputs
                .members()
                .filter(|m| view.liveness.is_live(m))
                .map(str::to_string)
                .collect();
            // The pings were sent when the connections closed (the
            // executor's probes); this span shows their verdicts in the
            // cycle.
            let probes = info_span!(
                "refused",
                members = refused.len(),
                otel.status_code = tracing::field::Empty,
                otel.status_message = tracing::field::Empty
            );
            crate::coordinator::holder::mark_error(
                &probes,
                &format!(
                    "{} members refused after their connection ended",
                    refused.len()
                ),
            );
            let judge = judge(&self.config, now);
            self.observed = probes
                .in_scope(|| view.take_round(&inputs, &listed, refused, &was_live, false, judge));
        }
        self.inputs = Some(inputs);
        self.settle()
    }

    /// The write's first decisions: the numbering (a numbering Redis lost
    /// renumbers) and where the plan starts.
    fn settle(&mut self) -> Ready {
        let stored = self.stored.as_ref().expect("the state was read");
        let (generation, digest) = (stored.generation, stored.digest.clone());
        self.floor = self.floor.max(generation);
        let view = self.view.as_mut().expect("the view is known");
        let lost = view.renumber_lost(generation, &mut self.floor);
        if let Some(lost) = lost
            && (lost.raised || lost.renumbered > 0)
        {
            tracing::warn!(
                applied = lost.applied,
                stored = generation,
                renumbered = lost.renumbered,
                "a member reports a generation above the table Redis holds (Redis lost a write, its data, or a lagging replica was promoted): numbering writes above it"
            );
        }
        self.renumber = lost.is_some();
        match view.known_granted(digest.as_deref()) {
            Some(granted) => self.solve(granted, false),
            None => match self.stored.as_mut().and_then(|s| s.table.take()) {
                Some(t) => self.start_from_stored(t, generation),
                None => {
                    self.phase = Phase::Table;
                    Ready::ReadTable
                }
            },
        }
    }

    fn start_from_stored(&mut self, stored: Arc<MatchingTable>, generation: u64) -> Ready {
        let view = self.view.as_mut().expect("the view is known");
        let (from, start) = view.start_from_stored(stored, generation);
        if from == StartingPoint::LastWritten {
            tracing::warn!(
                key = %self.config.keys.table,
                "the matching table is gone; handing off from the table this holder wrote last"
            );
        }
        self.solve(start, true)
    }

    fn solve(&mut self, granted: Arc<MatchingTable>, verify: bool) -> Ready {
        self.planning = Some(Planning {
            granted: Arc::clone(&granted),
            verify,
            plan: None,
            next: None,
            table_changed: false,
            history: None,
        });
        self.phase = Phase::Solve;
        Ready::Solve { granted }
    }

    /// Plans the next granted table towards `desired` with the handoff.
    fn plan(&mut self, desired: Arc<MatchingTable>, now: Now) -> Ready {
        let inputs = Arc::clone(self.inputs());
        let planning = self.planning.as_mut().expect("a write is planned");
        let view = self.view.as_mut().expect("the view is known");
        let Planned { plan, unchanged } =
            info_span!("handoff", verify = planning.verify).in_scope(|| {
                view.plan(
                    &inputs,
                    &planning.granted,
                    planning.verify,
                    &desired,
                    self.config.handoff,
                    now.at,
                    now.unix_ms,
                )
            });
        if plan.claimed > 0 {
            self.claimed = plan.claimed;
            tracing::warn!(
                key = %self.config.keys.table,
                claimed = plan.claimed,
                "the stored table took units from members that may still work on them, without a revocation (redis lost a write, a lagging replica was promoted, or an edit): they wait for those members first"
            );
        }
        // Nothing to hand off (an idle cycle): the granted table stays, and
        // with it its digest, computed once.
        if unchanged {
            let next = Arc::clone(&planning.granted);
            planning.plan = Some(plan);
            return self.changes(next, now);
        }
        let mut plan = plan;
        let table = std::mem::take(&mut plan.granted);
        planning.plan = Some(plan);
        // What the history records of each member whose row changes.
        let mut states = MemberStates::default();
        for m in inputs.members() {
            if !view.liveness.is_live(m) {
                states.failed.insert(m.to_string());
            } else if view.handoff.draining(m) {
                states.draining.insert(m.to_string());
            }
        }
        let history = HistoryBasis {
            previous: Arc::clone(&planning.granted),
            states,
        };
        self.phase = Phase::Digest;
        Ready::Digest { table, history }
    }

    /// Whether anything must be written for `next`, and the write if so.
    fn changes(&mut self, next: Arc<MatchingTable>, now: Now) -> Ready {
        let planning = self.planning.as_mut().expect("a write is planned");
        let plan = planning.plan.as_ref().expect("planned");
        let stored = self.stored.as_ref().expect("the state was read");
        let view = self.view.as_mut().expect("the view is known");
        let Some(Changes {
            table: table_changed,
            transit: transit_changed,
        }) = view.changes(
            &next,
            &plan.transit,
            self.renumber,
            planning.verify,
            stored.digest.as_deref(),
            stored.generation,
        )
        else {
            return self.written(Write::Unchanged, now);
        };
        if !now.may_act() {
            return self.written(Write::NotActing, now);
        }
        let (encoded, last_change) = view.encoded(&plan.transit);
        // Every table write is recorded: one the plan left unchanged (an
        // edit healed, a lost numbering) with an empty record.
        let history = table_changed.then(|| {
            let mut record = planning.history.take().unwrap_or_default();
            record.moves = last_change.as_deref().and_then(Moves::decode);
            record.fields()
        });
        // A grant links to the writes that revoked what it grants.
        let mut links: Vec<u64> = view
            .handoff
            .last
            .moved
            .iter()
            .map(|m| m.revoked_at)
            .collect();
        links.sort_unstable();
        links.dedup();
        // A plan that started from the table Redis holds (its digest
        // verified, not a start from a stored table to verify) writes the
        // rows that differ from it; the first table, a healed edit and a new
        // holding's first write replace it whole.
        let base = (table_changed
            && !planning.verify
            && stored.digest.as_deref() == Some(planning.granted.digest()))
        .then(|| Arc::clone(&planning.granted));
        let commit = CommitPlan {
            table: table_changed.then(|| Arc::clone(&next)),
            base,
            transit: transit_changed.then_some(encoded),
            last_change,
            history,
            generation_floor: self.floor,
            expected_version: view.handoff.ledger.version(),
            now_ms: now.unix_ms,
            rows: next.len(),
            links,
        };
        planning.next = Some(next);
        planning.table_changed = table_changed;
        self.phase = Phase::Commit;
        Ready::Commit(commit)
    }

    fn committed(&mut self, outcome: Result<Committed, StoreError>, now: Now) -> Ready {
        let planning = self.planning.take().expect("a write was sent");
        let stored = self.stored.as_ref().expect("the state was read");
        let mut digest = stored.digest.clone();
        let sent = Sent {
            next: planning.next.expect("a write was sent"),
            transit: planning.plan.expect("planned").transit,
            table_changed: planning.table_changed,
            stored_generation: stored.generation,
        };
        let view = self.view.as_mut().expect("the view is known");
        let advanced = view.advance(sent, outcome, &mut self.floor, &mut digest, now.at);
        self.note = Some(CommitNote {
            generation: match advanced.write {
                Write::Written { generation } => generation,
                _ => None,
            },
            revoked_at: advanced.revoked_at,
            error: advanced.error,
        });
        self.written(advanced.write, now)
    }

    /// The write is settled: the counts, then `-forget-after`.
    fn written(&mut self, write: Write, now: Now) -> Ready {
        let inputs = Arc::clone(self.inputs());
        let view = self.view.as_mut().expect("the view is known");
        let counts = self.kind == Kind::Full || !self.observed.failures.is_empty();
        let groups = if counts {
            let groups = group_counts(&inputs, view);
            record_counts(&inputs, view, &groups, &write);
            groups
        } else {
            view.groups.clone()
        };
        view.groups = groups;
        // A cycle on inherited liveness removes nobody from the lists: its
        // own pings, a moment later, decide.
        let forget = match (self.kind, self.config.forget_after) {
            (Kind::Full, Some(after))
                if matches!(write, Write::Unchanged | Write::Written { .. })
                    && now.may_act()
                    && !self.unverified =>
            {
                view.forgettable(
                    &inputs,
                    after.as_millis() as u64,
                    self.config.guard.percent,
                    now.unix_ms,
                )
            }
            _ => Vec::new(),
        };
        self.write = Some(write);
        if forget.is_empty() {
            return self.finish();
        }
        self.phase = Phase::Forget;
        Ready::Forget { pairs: forget }
    }

    fn finish(&mut self) -> Ready {
        let view = self.view.take().expect("the view is known");
        let observed = std::mem::take(&mut self.observed);
        let finished = Finished {
            inputs: Arc::clone(self.inputs()),
            failures: observed.failures,
            groups: view.groups.clone(),
            view,
            transitions: observed.transitions,
            review: observed.review,
            write: self.write.take().expect("the write is settled"),
            generation_floor: self.floor,
            forgotten: std::mem::take(&mut self.forgotten),
            claimed: self.claimed,
            unverified: self.unverified,
        };
        self.done(Ok(finished))
    }
}

/// What a round's results are judged with.
fn judge(config: &CoreConfig, now: Now) -> Judge<'_> {
    Judge {
        guard: config.guard,
        replica_id: &config.replica_id,
        now_ms: now.unix_ms,
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::super::tests::{live_view, table};
    use super::*;
    use crate::core::keys::Keys;
    use crate::core::suspicion::Guard;
    use crate::core::timing::test_t0;
    use crate::edge::grpc::PingFailure;
    use crate::edge::redis::ListRead;

    fn config(forget_after: Option<Duration>) -> CoreConfig {
        CoreConfig {
            failure_threshold: 1,
            guard: Guard {
                percent: 100,
                confirm_ms: 0,
            },
            replica_id: "r1".into(),
            forget_after,
            handoff: handoff::Settings {
                handoff_delay: Duration::from_secs(10),
            },
            keys: Keys::new("t"),
            units_key: "units".into(),
            reads_costs: false,
            join_delay: Duration::ZERO,
            generation_floor: 3,
        }
    }

    /// The clocks at `ms` into the test, the lease valid for a second more.
    fn at(t0: Instant, ms: u64) -> Now {
        let at = t0 + Duration::from_millis(ms);
        Now {
            at,
            unix_ms: 1_000_000 + ms,
            acts_until: at + Duration::from_secs(1),
        }
    }

    fn timeout() -> StoreError {
        StoreError::Timeout {
            op: "read",
            timeout: Duration::from_secs(1),
        }
    }

    fn list(key: &str, entries: &[&str]) -> ListRead {
        ListRead {
            key: key.into(),
            version: 1,
            entries: Some(entries.iter().map(|e| e.as_bytes().to_vec()).collect()),
        }
    }

    fn no_reports() -> ReportsRead {
        ReportsRead {
            version: Some(1),
            content: Some(crate::edge::redis::ReportsContent {
                reports: Ok(Vec::new()),
                overrides: None,
                controls: None,
            }),
        }
    }

    /// What Redis holds: `granted` at generation 7.
    fn snapshot(members: &[&str], units: &[&str], granted: &Arc<MatchingTable>) -> Snapshot {
        Snapshot {
            groups: vec![list("svc", members)],
            units: list("units", units),
            stored_digest: Some(granted.digest().to_string()),
            stored_generation: 7,
            stored_table: None,
            reports: no_reports(),
        }
    }

    /// A view that knows `granted` to be Redis' (its last confirmed write),
    /// with `live` live.
    fn known_view(live: &[&str], granted: &Arc<MatchingTable>) -> HolderView {
        let mut v = live_view(live, granted);
        v.handoff.ledger.unchanged(Arc::clone(granted), 7);
        v.unsaved = Default::default();
        v
    }

    /// Takes the inputs read (`snapshot`) at `ms`, assembles their lists,
    /// and returns what the cycle asks for next.
    async fn lists_taken(core: &mut CycleCore, snapshot: Snapshot, t0: Instant, ms: u64) -> Ready {
        let Ready::AssembleLists {
            cache,
            groups,
            units,
        } = core.step(Outcome::Inputs(Ok(snapshot), None), at(t0, ms))
        else {
            panic!("then assembles the lists");
        };
        let lists = crate::coordinator::holder::lists::assemble(cache, groups, units).await;
        core.step(Outcome::Lists(lists), at(t0, ms + 1))
    }

    /// Drives a full cycle from its start to its round of pings.
    async fn to_pings(core: &mut CycleCore, snapshot: Snapshot, t0: Instant) -> Vec<String> {
        let Ready::ReadInputs(_) = core.step(Outcome::Start, at(t0, 0)) else {
            panic!("a known view reads the inputs first");
        };
        let Ready::Ping { members } = lists_taken(core, snapshot, t0, 1).await else {
            panic!("then pings");
        };
        members
    }

    fn answered(members: &[String], failed: &[&str]) -> Vec<PingReport> {
        members
            .iter()
            .map(|m| PingReport {
                member: m.clone(),
                result: if failed.contains(&m.as_str()) {
                    Err(PingFailure::Refused("refused".into()))
                } else {
                    Ok(Duration::from_millis(1))
                },
                at: test_t0(),
                opened: None,
            })
            .collect()
    }

    /// Digests the next table if `ready` asks for it.
    fn digested(core: &mut CycleCore, ready: Ready, now: Now) -> Ready {
        match ready {
            Ready::Digest { table, history } => {
                let next = Arc::new(table);
                next.digest();
                let record = history.record(&next);
                core.step(Outcome::Digested(next, record), now)
            }
            other => other,
        }
    }

    fn finished(ready: Ready) -> Finished {
        match ready {
            Ready::Done(r) => match *r {
                Ok(f) => f,
                Err(e) => panic!("the cycle failed: {e}"),
            },
            _ => panic!("the cycle goes on"),
        }
    }

    #[test]
    fn a_new_holding_that_cannot_read_what_it_inherits_does_not_act() {
        let t0 = test_t0();
        let mut core = CycleCore::new(Kind::Full, config(None), None, Vec::new(), None);
        let Ready::ReadHolding {
            with_table: false, ..
        } = core.step(Outcome::Start, at(t0, 0))
        else {
            panic!("a new holding reads what the last holder left first");
        };
        match core.step(Outcome::Holding(Err(timeout()), None), at(t0, 1)) {
            Ready::Done(r) => assert!(matches!(*r, Err(CycleError::Unreadable(_)))),
            _ => panic!("it never goes on from an empty view"),
        }
    }

    /// What the last holder left: `a:1` live with the table's units,
    /// `b:2` failing (per `liveness`), at generation 7.
    fn inheritance(liveness: &[(&str, &str)]) -> Inheritance {
        Inheritance {
            table: None,
            version: 3,
            liveness: liveness
                .iter()
                .map(|(m, h)| (m.to_string(), h.to_string()))
                .collect(),
            suspects: Default::default(),
            unreadable_suspects: Vec::new(),
            generation: 7,
            transit: Vec::new(),
        }
    }

    /// A new holding's cycle through its inheritance to the lists.
    async fn inherited_to_lists(core: &mut CycleCore, liveness: &[(&str, &str)]) -> Ready {
        let t0 = test_t0();
        let granted = table(&[("a:1", "u1,u2")]);
        let Ready::ReadHolding {
            with_table: false, ..
        } = core.step(Outcome::Start, at(t0, 0))
        else {
            panic!("a new holding reads what the last holder left first");
        };
        let Ready::ReadInputs(_) =
            core.step(Outcome::Holding(Ok(inheritance(liveness)), None), at(t0, 1))
        else {
            panic!("then its inputs");
        };
        let mut snap = snapshot(&["a:1", "b:2"], &["u1", "u2"], &granted);
        snap.stored_table = Some((*granted).clone());
        lists_taken(core, snap, t0, 2).await
    }

    #[tokio::test]
    async fn a_new_holding_decides_on_the_inherited_liveness_and_asks_for_its_pings_next() {
        let t0 = test_t0();
        let mut core = CycleCore::new(Kind::Full, config(None), None, Vec::new(), None);
        let ready = inherited_to_lists(&mut core, &[("a:1", "1 0 0"), ("b:2", "1 3 900")]).await;
        // No round of its own: it plans on what it inherited, at once.
        let Ready::Solve { granted } = ready else {
            panic!("a new holding with a liveness to inherit pings nobody first");
        };
        assert_eq!(granted.rows().len(), 1);
        assert!(core.view().liveness.is_live("a:1"), "inherited live");
        assert!(!core.view().liveness.is_live("b:2"), "inherited failing");
        let mut ready = core.step(Outcome::Solved(Arc::clone(&granted)), at(t0, 4));
        ready = digested(&mut core, ready, at(t0, 4));
        if let Ready::Commit(plan) = ready {
            assert!(
                plan.table.is_none_or(|t| t.rows() == granted.rows()),
                "the same table: nothing is reshuffled"
            );
            let written = Committed::Written {
                generation: Some(8),
                version: 4,
            };
            ready = core.step(Outcome::Committed(Ok(written)), at(t0, 5));
        }
        let f = finished(ready);
        assert!(f.unverified, "the machine runs a full cycle at once");
        assert!(f.failures.is_empty() && f.transitions.is_empty());

        // Its next cycle pings everyone, and its own results count.
        let mut core = CycleCore::new(Kind::Full, config(None), Some(f.view), Vec::new(), None);
        let snap = snapshot(&["a:1", "b:2"], &["u1", "u2"], &granted);
        let members = to_pings(&mut core, snap, t0).await;
        assert_eq!(members, ["a:1", "b:2"]);
        core.step(Outcome::Pinged(answered(&members, &["a:1"])), at(t0, 6));
        assert!(!core.view().liveness.is_live("a:1"), "its own refusal");
        assert!(core.view().liveness.is_live("b:2"), "its own answer");
    }

    #[tokio::test]
    async fn a_first_cycle_on_inherited_liveness_forgets_nobody() {
        let t0 = test_t0();
        let after = Some(Duration::from_millis(500));
        let mut core = CycleCore::new(Kind::Full, config(after), None, Vec::new(), None);
        // b:2 failing for long past -forget-after, by what was inherited.
        let ready = inherited_to_lists(&mut core, &[("a:1", "1 0 0"), ("b:2", "1 3 900")]).await;
        let Ready::Solve { granted } = ready else {
            panic!("decides on the inherited liveness");
        };
        let mut ready = core.step(Outcome::Solved(granted), at(t0, 4));
        ready = digested(&mut core, ready, at(t0, 4));
        if let Ready::Commit(_) = ready {
            let written = Committed::Written {
                generation: None,
                version: 4,
            };
            ready = core.step(Outcome::Committed(Ok(written)), at(t0, 5));
        }
        assert!(
            !matches!(ready, Ready::Forget { .. }),
            "its own pings decide first"
        );
        assert!(finished(ready).forgotten.is_empty());
    }

    #[test]
    fn a_new_holding_reads_its_inputs_beside_its_inheritance() {
        let t0 = test_t0();
        let granted = table(&[("a:1", "u1")]);
        for matches in [true, false] {
            let mut core = CycleCore::new(Kind::Full, config(None), None, Vec::new(), None);
            let Ready::ReadHolding {
                with_table: false,
                inputs: Some(mut request),
            } = core.step(Outcome::Start, at(t0, 0))
            else {
                panic!("a new holding reads its inputs beside what it inherits");
            };
            if !matches {
                request.reports_since = Some(3);
            }
            let prefetched = Prefetched {
                request,
                inputs: Ok(snapshot(&["a:1"], &["u1"], &granted)),
                costs: None,
            };
            let ready = core.step(
                Outcome::Holding(
                    Ok(inheritance(&[("a:1", "1 0 0")])),
                    Some(Box::new(prefetched)),
                ),
                at(t0, 1),
            );
            if matches {
                assert!(matches!(ready, Ready::AssembleLists { .. }), "taken");
            } else {
                assert!(
                    matches!(ready, Ready::ReadInputs(_)),
                    "not what it would ask for: read again"
                );
            }
        }
    }

    #[tokio::test]
    async fn a_new_holding_with_nobody_live_to_inherit_pings_first() {
        // A fresh fleet (nothing inherited), or every member failing: its
        // own round decides.
        for liveness in [&[][..], &[("a:1", "1 3 900")][..]] {
            let mut c = CycleCore::new(Kind::Full, config(None), None, Vec::new(), None);
            let Ready::Ping { members } = inherited_to_lists(&mut c, liveness).await else {
                panic!("nobody inherited live: it pings before it plans");
            };
            assert_eq!(members, ["a:1", "b:2"]);
        }
        // A resync (a write of unknown outcome) is not a new holding.
        let granted = table(&[("a:1", "u1")]);
        let mut view = known_view(&["a:1"], &granted);
        view.handoff.ledger.unknown(None);
        let mut core = CycleCore::new(Kind::Full, config(None), Some(view), Vec::new(), None);
        let t0 = test_t0();
        assert!(matches!(
            core.step(Outcome::Start, at(t0, 0)),
            Ready::ReadHolding {
                with_table: true,
                ..
            }
        ));
        let mut inh = inheritance(&[("a:1", "1 0 0")]);
        inh.table = Some((*granted).clone());
        let Ready::ReadInputs(_) = core.step(Outcome::Holding(Ok(inh), None), at(t0, 1)) else {
            panic!("then its inputs");
        };
        let snap = snapshot(&["a:1"], &["u1"], &granted);
        assert!(
            matches!(
                lists_taken(&mut core, snap, t0, 2).await,
                Ready::Ping { .. }
            ),
            "a resync pings as every full cycle does"
        );
    }

    #[test]
    fn a_stale_view_reads_redis_again_with_the_table() {
        let t0 = test_t0();
        let granted = table(&[("a:1", "u1")]);
        let mut view = known_view(&["a:1"], &granted);
        view.handoff.ledger.unknown(None);
        assert!(view.handoff.ledger.stale());
        let mut core = CycleCore::new(Kind::Full, config(None), Some(view), Vec::new(), None);
        assert!(matches!(
            core.step(Outcome::Start, at(t0, 0)),
            Ready::ReadHolding {
                with_table: true,
                ..
            }
        ));
    }

    #[test]
    fn a_handoff_cycle_before_any_full_cycle_does_nothing() {
        let t0 = test_t0();
        let mut core = CycleCore::new(Kind::Handoff, config(None), None, Vec::new(), None);
        match core.step(Outcome::Start, at(t0, 0)) {
            Ready::Done(r) => assert!(matches!(*r, Err(CycleError::NotReady))),
            _ => panic!("nothing to hand off yet"),
        }
    }

    #[test]
    fn a_failed_read_of_the_inputs_ends_the_cycle_without_a_write() {
        let t0 = test_t0();
        let granted = table(&[("a:1", "u1")]);
        let view = known_view(&["a:1"], &granted);
        let mut core = CycleCore::new(Kind::Full, config(None), Some(view), Vec::new(), None);
        assert!(matches!(
            core.step(Outcome::Start, at(t0, 0)),
            Ready::ReadInputs(_)
        ));
        match core.step(Outcome::Inputs(Err(timeout()), None), at(t0, 1)) {
            Ready::Done(r) => assert!(matches!(*r, Err(CycleError::Read(_)))),
            _ => panic!("no plan without the inputs"),
        }
    }

    #[tokio::test]
    async fn an_idle_cycle_writes_nothing() {
        let t0 = test_t0();
        let granted = table(&[("a:1", "u1")]);
        let view = known_view(&["a:1"], &granted);
        let mut core = CycleCore::new(Kind::Full, config(None), Some(view), Vec::new(), None);
        let members = to_pings(&mut core, snapshot(&["a:1"], &["u1"], &granted), t0).await;
        assert_eq!(members, ["a:1"]);
        let Ready::Solve { granted: from } =
            core.step(Outcome::Pinged(answered(&members, &[])), at(t0, 3))
        else {
            panic!("then solves");
        };
        assert_eq!(from, granted, "from the table it knows Redis holds");
        let f = finished(core.step(Outcome::Solved(Arc::clone(&granted)), at(t0, 4)));
        assert!(matches!(f.write, Write::Unchanged));
        assert_eq!(f.generation_floor, 7, "raised to the stored generation");
    }

    /// A joining member: the cycle plans, digests and asks for a write.
    async fn to_commit(core: &mut CycleCore, t0: Instant, lease_ms: u64) -> Ready {
        let granted = table(&[("a:1", "u1,u2")]);
        let members = to_pings(core, snapshot(&["a:1", "b:2"], &["u1", "u2"], &granted), t0).await;
        let Ready::Solve { .. } = core.step(Outcome::Pinged(answered(&members, &[])), at(t0, 3))
        else {
            panic!("then solves");
        };
        let desired = table(&[("a:1", "u1"), ("b:2", "u2")]);
        let Ready::Digest {
            table: next,
            history,
        } = core.step(Outcome::Solved(desired), at(t0, 4))
        else {
            panic!("a changed table is digested");
        };
        let next = Arc::new(next);
        next.digest();
        let record = history.record(&next);
        let mut now = at(t0, 5);
        now.acts_until = t0 + Duration::from_millis(lease_ms);
        core.step(Outcome::Digested(next, record), now)
    }

    fn joining_core(forget_after: Option<Duration>) -> CycleCore {
        let granted = table(&[("a:1", "u1,u2")]);
        let mut view = known_view(&["a:1", "b:2"], &granted);
        view.handoff.reports.insert(
            "a:1".into(),
            handoff::MemberReport {
                applied: 7,
                draining: false,
                deadline: Duration::from_secs(1),
                weight: 1,
                client: None,
            },
        );
        CycleCore::new(
            Kind::Full,
            config(forget_after),
            Some(view),
            Vec::new(),
            None,
        )
    }

    #[tokio::test]
    async fn a_change_is_written_revoking_first_and_only_while_the_lease_lets_it() {
        let t0 = test_t0();
        let mut core = joining_core(None);
        let Ready::Commit(plan) = to_commit(&mut core, t0, 1_000).await else {
            panic!("a change is written");
        };
        let written = plan.table.expect("the table changed");
        assert_eq!(
            written.rows().get("b:2").map(String::as_str),
            Some(""),
            "u2 is revoked from a:1 before b:2 gets it"
        );
        assert!(plan.transit.is_some_and(|t| t.len() == 1));
        assert_eq!(plan.generation_floor, 7);

        let mut late = joining_core(None);
        let f = finished(to_commit(&mut late, t0, 5).await);
        assert!(
            matches!(f.write, Write::NotActing),
            "past the lease's bound nothing is written"
        );
    }

    #[tokio::test]
    async fn a_write_of_unknown_outcome_makes_the_next_cycle_read_redis_first() {
        let t0 = test_t0();
        let mut core = joining_core(None);
        let Ready::Commit(_) = to_commit(&mut core, t0, 1_000).await else {
            panic!("a change is written");
        };
        let f = finished(core.step(Outcome::Committed(Err(timeout())), at(t0, 6)));
        assert!(matches!(f.write, Write::Unknown(_)));
        assert!(f.view.handoff.ledger.stale());
        assert!(f.generation_floor > 7, "its generation is never reused");
        let mut next = CycleCore::new(Kind::Full, config(None), Some(f.view), Vec::new(), None);
        assert!(matches!(
            next.step(Outcome::Start, at(t0, 7)),
            Ready::ReadHolding {
                with_table: true,
                ..
            }
        ));
    }

    #[tokio::test]
    async fn a_confirmed_write_is_what_the_next_plan_starts_from() {
        let t0 = test_t0();
        let mut core = joining_core(None);
        let Ready::Commit(plan) = to_commit(&mut core, t0, 1_000).await else {
            panic!("a change is written");
        };
        let written = plan.table.expect("the table changed");
        let f = finished(core.step(
            Outcome::Committed(Ok(Committed::Written {
                generation: Some(8),
                version: 2,
            })),
            at(t0, 6),
        ));
        assert!(matches!(
            f.write,
            Write::Written {
                generation: Some(8)
            }
        ));
        assert!(!f.view.handoff.ledger.stale());
        assert_eq!(f.view.known_granted(Some(written.digest())), Some(written));
        assert_eq!(core.take_note().and_then(|n| n.revoked_at), Some(8));
    }

    /// A cycle under `-forget-after` in which b:2 failed long ago and c:3
    /// joins, up to the write of c:3's new row.
    async fn forgetting_core(t0: Instant) -> CycleCore {
        let granted = table(&[("a:1", "u1,u2")]);
        let after = Some(Duration::from_millis(500));
        let mut view = known_view(&["a:1", "c:3"], &granted);
        view.liveness
            .observe([("b:2", Err("refused"))], ["a:1", "b:2", "c:3"], 0);
        view.unsaved = Default::default();
        let mut core = CycleCore::new(Kind::Full, config(after), Some(view), Vec::new(), None);
        let members = to_pings(
            &mut core,
            snapshot(&["a:1", "b:2", "c:3"], &["u1", "u2"], &granted),
            t0,
        )
        .await;
        let Ready::Solve { .. } =
            core.step(Outcome::Pinged(answered(&members, &["b:2"])), at(t0, 3))
        else {
            panic!("then solves");
        };
        let r = core.step(Outcome::Solved(granted), at(t0, 4));
        let Ready::Commit(_) = digested(&mut core, r, at(t0, 4)) else {
            panic!("c:3's new row is written");
        };
        core
    }

    #[tokio::test]
    async fn forget_after_waits_for_a_settled_write() {
        let t0 = test_t0();
        let mut core = forgetting_core(t0).await;
        let written = Outcome::Committed(Ok(Committed::Written {
            generation: None,
            version: 2,
        }));
        match core.step(written, at(t0, 5)) {
            Ready::Forget { pairs } => assert_eq!(pairs, [("svc".to_string(), b"b:2".to_vec())]),
            _ => panic!("a member failing past -forget-after is forgotten"),
        }
        let f = finished(core.step(
            Outcome::Forgotten(Ok(vec![("svc".into(), b"b:2".to_vec())])),
            at(t0, 6),
        ));
        assert_eq!(f.forgotten, [("\"b:2\"".to_string(), "svc".to_string())]);

        // The same cycle whose write's outcome is unknown forgets nobody.
        let mut core = forgetting_core(t0).await;
        let f = finished(core.step(Outcome::Committed(Err(timeout())), at(t0, 5)));
        assert!(f.forgotten.is_empty());
    }
}
