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

mod reads;

use std::collections::HashSet;
use std::sync::Arc;

use tracing::info_span;

use super::ready::{
    CommitNote, CommitPlan, CoreConfig, Finished, HistoryBasis, Kind, Now, Outcome, Prefetched,
    Ready,
};
use super::{Changes, HolderView, Judge, Observed, Planned, Sent};
use crate::coordinator::holder::handoff::Refusal;
use crate::coordinator::holder::warm::WarmView;
use crate::coordinator::holder::{CycleError, Write, group_counts, record_counts};
use crate::core::handoff::{self, StartingPoint};
use crate::core::history::{ChangeRecord, Listed, MemberStates};
use crate::core::inputs::Inputs;
use crate::core::table::{MatchingTable, Moves};
use crate::edge::redis::Committed;
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
    Held,
    Solve,
    Digest,
    Commit,
    Forget,
    Quarantine,
    Restore,
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
    /// The quarantine records being written.
    recording: Vec<(String, String)>,
    /// The quarantined units the table write's history entry names.
    naming: Vec<String>,
    claimed: usize,
    note: Option<CommitNote>,
    /// A new holding's first cycle: its view is what the last holder left.
    inherited: bool,
    /// It decided on the inherited liveness without pinging, or began a
    /// recovery: a full cycle should ping at once.
    unverified: bool,
    /// The members' statements for the recovery running were read.
    held_read: bool,
    /// This cycle's plan took the recovery's claims.
    recovery_planned: bool,
    /// How many members' reports the last writer knew (a new holding's
    /// inheritance).
    reports_recorded: Option<u64>,
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
            recording: Vec::new(),
            naming: Vec::new(),
            claimed: 0,
            note: None,
            inherited: false,
            unverified: false,
            held_read: false,
            recovery_planned: false,
            reports_recorded: None,
        }
    }

    /// What this cycle's pings tell the members of the holder: its epoch,
    /// the generation Redis holds as this cycle read it (or, above it, the
    /// highest this holding was confirmed to write: Redis lost that write,
    /// a member may have read it, and a read of the older table must not
    /// start or extend a hold, not even a new process's, until the holder
    /// writes above it), the server it writes on, and the recovery it runs.
    pub(in crate::coordinator::holder) fn ping_view(&self) -> handoff::PingView {
        let confirmed = self.view.as_ref().map_or(0, |v| v.confirmed_generation);
        handoff::PingView {
            epoch: self.config.epoch,
            generation: self
                .stored
                .as_ref()
                .map_or(0, |s| s.generation)
                .max(confirmed),
            server: self.config.server,
            recovery: self
                .view
                .as_ref()
                .and_then(|v| v.handoff.recovery.as_ref())
                .map(|r| r.tag),
        }
    }

    /// Begins a recovery from possibly lost state (see `core::recover`),
    /// unless one runs; its next full cycle pings at once (the pings name
    /// it).
    fn begin_recovery(&mut self, why: handoff::LossSign, now: Now) {
        let view = self.view.as_mut().expect("the view is known");
        if let Some(tag) = view.handoff.begin_recovery(
            why.clone(),
            self.config.epoch,
            now.at,
            now.unix_ms,
            self.config.recovery_gather,
        ) {
            tracing::warn!(
                recovery = %tag,
                why = %why,
                gather = ?self.config.recovery_gather,
                "redis may have lost handoff state: asking every member what it works on before planning"
            );
            self.unverified = true;
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
                            self.inputs_read(inputs, costs, now)
                        }
                        (ready, _) => ready,
                    }
                }
                Err(e) => self.done(Err(CycleError::Unreadable(e))),
            },
            (Phase::Inputs, Outcome::Inputs(r, costs)) => self.inputs_read(r, costs, now),
            (Phase::Lists, Outcome::Lists(r)) => match r {
                Ok(cache) => self.lists_made(cache, now),
                Err(e) => self.done(Err(e)),
            },
            (Phase::State, Outcome::State(state, reports)) => self.state_read(state, reports, now),
            (Phase::Held, Outcome::Held(r)) => {
                self.held_read = true;
                match r {
                    Ok(raw) => {
                        let view = self.view.as_mut().expect("the view is known");
                        let bad = view.handoff.take_held(raw);
                        if let Some((m, v)) = bad.first() {
                            tracing::warn!(
                                key = %self.config.keys.held,
                                count = bad.len(),
                                member = %m,
                                value = %crate::core::inputs::excerpt(v.as_bytes()),
                                "unreadable statements for the recovery: those members count as ones that stated nothing"
                            );
                        }
                    }
                    Err(e) => {
                        tracing::warn!(key = %self.config.keys.held, error = %e, "could not read the members' statements for the recovery; planning waits")
                    }
                }
                self.settle(now)
            }
            (Phase::Pings, Outcome::Pinged(reports)) => self.round_taken(reports, now),
            (Phase::Table, Outcome::Table(r)) => match r {
                Ok(t) => {
                    let generation = self.stored.as_ref().map_or(0, |s| s.generation);
                    self.start_from_stored(Arc::new(t), generation, now)
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
                self.record_quarantine(now)
            }
            (Phase::Quarantine, Outcome::QuarantineRecorded(r)) => {
                let view = self.view.as_mut().expect("the view is known");
                match r {
                    Ok(_) => {
                        let units: Vec<String> = self.recording.drain(..).map(|(u, _)| u).collect();
                        view.quarantine.saved(&units);
                    }
                    // Kept unsaved: the next cycle writes them again (the
                    // units stay given to nobody meanwhile).
                    Err(e) => {
                        self.recording.clear();
                        tracing::warn!(key = %self.config.keys.quarantine, error = %e, "could not record quarantined units; trying again next cycle")
                    }
                }
                self.restore()
            }
            (Phase::Restore, Outcome::Restored(r)) => {
                // Logged when the outcome changes, not every cycle (an ACL
                // without HSETNX refuses it every time).
                let view = self.view.as_mut().expect("the view is known");
                let error = r.err().map(|e| e.to_string());
                if error != view.handoff.restore_error {
                    match &error {
                        Some(e) => {
                            tracing::warn!(key = %self.config.keys.members, error = %e, "could not write lost member reports back; a later holder learns them when each member reports again (trying again every cycle)")
                        }
                        None => {
                            tracing::info!(key = %self.config.keys.members, "lost member reports written back")
                        }
                    }
                    view.handoff.restore_error = error;
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

    /// The write's first decisions: the numbering (a numbering Redis lost
    /// renumbers, and begins a recovery), the members' statements while a
    /// recovery runs, and where the plan starts (a recovery verifies the
    /// stored table).
    fn settle(&mut self, now: Now) -> Ready {
        let stored = self.stored.as_ref().expect("the state was read");
        let (generation, digest) = (stored.generation, stored.digest.clone());
        self.floor = self.floor.max(generation);
        let view = self.view.as_mut().expect("the view is known");
        // Redis holds less than this holding was confirmed to write (a
        // failover to a replica that lagged): the pings ask for that much
        // (`ping_view`), so the next write must number above it, changed
        // table or not.
        let behind = generation < view.confirmed_generation;
        self.floor = self.floor.max(view.confirmed_generation);
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
        self.renumber = lost.is_some() || behind;
        if let Some(lost) = lost {
            self.begin_recovery(
                handoff::LossSign::GenerationLost {
                    stored: generation,
                    known: lost.applied,
                },
                now,
            );
        }
        let view = self.view.as_mut().expect("the view is known");
        let recovering = view.handoff.recovery.is_some();
        if recovering && !self.held_read {
            self.phase = Phase::Held;
            return Ready::ReadHeld;
        }
        let known = if recovering {
            None
        } else {
            view.known_granted(digest.as_deref())
        };
        match known {
            Some(granted) => self.solve(granted, false, now),
            None => match self.stored.as_mut().and_then(|s| s.table.take()) {
                Some(t) => self.start_from_stored(t, generation, now),
                None => {
                    self.phase = Phase::Table;
                    Ready::ReadTable
                }
            },
        }
    }

    fn start_from_stored(
        &mut self,
        stored: Arc<MatchingTable>,
        generation: u64,
        now: Now,
    ) -> Ready {
        let view = self.view.as_mut().expect("the view is known");
        let (from, start) = view.start_from_stored(stored, generation);
        if from == StartingPoint::LastWritten {
            tracing::warn!(
                key = %self.config.keys.table,
                "the matching table is gone; handing off from the table this holder wrote last"
            );
        }
        self.solve(start, true, now)
    }

    fn solve(&mut self, granted: Arc<MatchingTable>, verify: bool, now: Now) -> Ready {
        // The units given to nobody (quarantined, or held for a trial) are
        // out of this cycle's inputs: the plan takes them from their rows
        // as it does units no longer listed.
        let view = self.view.as_mut().expect("the view is known");
        let inputs = self.inputs.as_ref().expect("the inputs are known");
        self.inputs = Some(view.without_excluded(inputs, &granted, now.unix_ms));
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
        // A recovery plans once the members stated what they work on (or
        // the gathering time passed), and writes a table numbered above
        // every generation they stated, so that each starts again from it.
        let claims = match view.recovery_claims(&inputs, &planning.granted, now.at) {
            None => None,
            Some(Err(until)) => {
                let r = view.handoff.recovery.as_ref().expect("recovering");
                tracing::debug!(recovery = %r.tag, stated = r.held.len(), "waiting for members to state what they work on");
                // Nothing is planned: look again when the gathering ends
                // (what an earlier plan said of its releases waits too).
                view.handoff.last.next_release = Some(until);
                self.planning = None;
                return self.written(Write::Recovering, now);
            }
            Some(Ok(claims)) => {
                let r = view.handoff.recovery.as_ref().expect("recovering");
                tracing::info!(
                    recovery = %r.tag,
                    stated = r.held.len(),
                    silent = claims.unanswered.len(),
                    first_silent = ?claims.unanswered.iter().next(),
                    "planning the recovery: units no member stated wait for the members that stated nothing"
                );
                self.renumber = true;
                self.recovery_planned = true;
                Some(claims)
            }
        };
        let Planned { plan, unchanged } =
            info_span!("handoff", verify = planning.verify).in_scope(|| {
                view.plan(
                    &inputs,
                    &planning.granted,
                    planning.verify,
                    claims.as_ref(),
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
        let unrecorded = view.quarantine.unrecorded();
        let history = table_changed.then(|| {
            let mut record = planning.history.take().unwrap_or_default();
            record.moves = last_change.as_deref().and_then(Moves::decode);
            record.quarantined = Listed::named(&unrecorded);
            record.fields()
        });
        self.naming = if table_changed {
            unrecorded
        } else {
            Vec::new()
        };
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
        let naming = std::mem::take(&mut self.naming);
        if matches!(advanced.write, Write::Written { .. }) {
            view.quarantine.recorded(&naming);
        }
        // The recovery's plan is in Redis now (its claims are in transit,
        // numbered above every generation a member stated): it is over.
        if let Write::Written {
            generation: Some(g),
        } = advanced.write
            && let Some(r) = view.handoff.recovery.as_ref()
            && self.recovery_planned
        {
            tracing::info!(recovery = %r.tag, generation = g, stated = r.held.len(), "recovered: the table and the units in transit hold what the members stated");
            view.handoff.end_recovery();
        }
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
            return self.record_quarantine(now);
        }
        self.phase = Phase::Forget;
        Ready::Forget { pairs: forget }
    }

    /// Records the units quarantined and not yet known to be in Redis,
    /// fenced, while the lease lets this holder act.
    fn record_quarantine(&mut self, now: Now) -> Ready {
        let view = self.view.as_ref().expect("the view is known");
        let records = view.quarantine.unsaved();
        if records.is_empty() || !now.may_act() {
            return self.restore();
        }
        self.recording = records.clone();
        self.phase = Phase::Quarantine;
        Ready::RecordQuarantine { records }
    }

    /// Counts the round's lone deaths against the units the dead members
    /// held (the table members hold, as this holder knows it).
    fn count_deaths(&mut self, now: Now) {
        let view = self.view.as_mut().expect("the view is known");
        let granted = view
            .handoff
            .ledger
            .granted()
            .or(view.handoff.ledger.last_written())
            .cloned();
        view.count_deaths(
            self.config.quarantine,
            &self.observed,
            granted.as_deref(),
            now.unix_ms,
            self.config.guard.together_ms,
        );
    }

    /// Writes back the reports Redis lost of members that still have a row
    /// or owe a unit (where `{T}:members` has none): a holder that follows
    /// this one then knows them as members of the protocol (their
    /// deadline, their connection), not as old workers.
    fn restore(&mut self) -> Ready {
        let view = self.view.as_ref().expect("the view is known");
        let reports = view.handoff.to_restore();
        if reports.is_empty() {
            return self.finish();
        }
        tracing::debug!(
            key = %self.config.keys.members,
            count = reports.len(),
            first = %reports[0].0,
            "writing back member reports redis lost (where the member wrote none since)"
        );
        self.phase = Phase::Restore;
        Ready::RestoreReports { reports }
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
mod tests;
