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
use crate::core::history::{ChangeRecord, MemberStates};
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
mod tests;
