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
//!   write, while the lease lets this holder act.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tracing::info_span;

use super::{Changes, HolderView, Judge, Planned, Sent};
use crate::coordinator::holder::handoff::Refusal;
use crate::coordinator::holder::lists::ListCache;
use crate::coordinator::holder::warm::WarmView;
use crate::coordinator::holder::{
    CycleError, LOG_FIRST, Write, group_counts, listed_entries, record_counts,
};
use crate::core::handoff::{self, StartingPoint};
use crate::core::inputs::Inputs;
use crate::core::keys::Keys;
use crate::core::suspicion::{Guard, Review};
use crate::core::table::MatchingTable;
use crate::edge::grpc::{PingFailure, PingReport};
use crate::edge::redis::{Committed, Inheritance, ListRead, ReportsRead, Snapshot};
use crate::error::StoreError;

/// Which cycle: a full one (lists, pings, forget), or a handoff cycle
/// (the table state and reports only, planned on the last full cycle's
/// inputs, with the refusals the executor's probes found).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::coordinator::holder) enum Kind {
    Full,
    Handoff,
}

/// What the decisions depend on besides the view.
#[derive(Debug, Clone)]
pub(in crate::coordinator::holder) struct CoreConfig {
    pub(in crate::coordinator::holder) failure_threshold: u32,
    pub(in crate::coordinator::holder) guard: Guard,
    pub(in crate::coordinator::holder) replica_id: String,
    pub(in crate::coordinator::holder) forget_after: Option<Duration>,
    pub(in crate::coordinator::holder) handoff: handoff::Settings,
    /// The key names, for the log.
    pub(in crate::coordinator::holder) keys: Keys,
    pub(in crate::coordinator::holder) units_key: String,
    /// The highest generation this holding knows of.
    pub(in crate::coordinator::holder) generation_floor: u64,
}

/// The clocks, passed in with every outcome.
#[derive(Debug, Clone, Copy)]
pub(in crate::coordinator::holder) struct Now {
    pub(in crate::coordinator::holder) at: Instant,
    pub(in crate::coordinator::holder) unix_ms: u64,
    /// Until when the lease lets this holder act (see `core::lease`).
    pub(in crate::coordinator::holder) acts_until: Instant,
}

impl Now {
    fn may_act(&self) -> bool {
        self.at < self.acts_until
    }
}

/// What the cycle task must do next.
pub(in crate::coordinator::holder) enum Ready {
    /// Read what the last holder left (a new holding), or Redis' state
    /// after a write of unknown outcome (`with_table`: a resync).
    ReadHolding {
        with_table: bool,
    },
    /// A full cycle's read: the lists (unless unchanged since `held`), the
    /// table state and the reports (unless unchanged since
    /// `reports_since`).
    ReadInputs {
        held: HashMap<String, u64>,
        reports_since: Option<u64>,
    },
    /// Make the inputs of the lists read (CPU-bound for large lists).
    AssembleLists {
        cache: Option<ListCache>,
        groups: Vec<ListRead>,
        units: ListRead,
    },
    /// A handoff cycle's read: the table state and the reports.
    ReadState {
        reports_since: Option<u64>,
    },
    /// Ping a round of these members (in list order).
    Ping {
        members: Vec<String>,
    },
    /// Read the stored table: the plan must start from it.
    ReadTable,
    /// Solve the desired table (`holder::solve`, memoised in the view).
    Solve {
        granted: Arc<MatchingTable>,
    },
    /// Digest the next granted table (CPU-bound).
    Digest {
        table: MatchingTable,
    },
    /// Write, fenced.
    Commit(CommitPlan),
    /// Remove these (list, entry) pairs, fenced (`-forget-after`).
    Forget {
        pairs: Vec<(String, Vec<u8>)>,
    },
    Done(Box<Result<Finished, CycleError>>),
}

/// What the cycle task did, for [`CycleCore::step`].
pub(in crate::coordinator::holder) enum Outcome {
    /// Nothing yet: the cycle starts.
    Start,
    Holding(Result<Inheritance, StoreError>),
    Inputs(Result<Snapshot, StoreError>),
    Lists(Result<ListCache, CycleError>),
    State(
        Result<(Option<String>, u64, Option<MatchingTable>), StoreError>,
        ReportsRead,
    ),
    Pinged(Vec<PingReport>),
    Table(Result<MatchingTable, StoreError>),
    Solved(Arc<MatchingTable>),
    Digested(Arc<MatchingTable>),
    Committed(Result<Committed, StoreError>),
    Forgotten(Result<Vec<(String, Vec<u8>)>, StoreError>),
}

/// A write, owned: the cycle task builds the store's `Commit` from it and
/// the view's unsaved changes.
pub(in crate::coordinator::holder) struct CommitPlan {
    /// The new table, when it changed.
    pub(in crate::coordinator::holder) table: Option<Arc<MatchingTable>>,
    /// `{T}:transit` whole, when it changed.
    pub(in crate::coordinator::holder) transit: Option<Vec<(String, String)>>,
    pub(in crate::coordinator::holder) last_change: Option<String>,
    pub(in crate::coordinator::holder) generation_floor: u64,
    pub(in crate::coordinator::holder) expected_version: Option<u64>,
    pub(in crate::coordinator::holder) now_ms: u64,
    /// For the write's span: its rows, and the revocations whose grants it
    /// makes (linked).
    pub(in crate::coordinator::holder) rows: usize,
    pub(in crate::coordinator::holder) links: Vec<u64>,
}

/// What the last write's outcome was, for the write's span.
#[derive(Debug, Clone, Default)]
pub(in crate::coordinator::holder) struct CommitNote {
    pub(in crate::coordinator::holder) generation: Option<u64>,
    /// The generation of a confirmed write that revoked units.
    pub(in crate::coordinator::holder) revoked_at: Option<u64>,
    pub(in crate::coordinator::holder) error: Option<String>,
}

/// A finished cycle, but for the pings still in flight (the task's).
pub(in crate::coordinator::holder) struct Finished {
    pub(in crate::coordinator::holder) inputs: Arc<Inputs>,
    pub(in crate::coordinator::holder) failures: Vec<(String, PingFailure)>,
    pub(in crate::coordinator::holder) view: HolderView,
    pub(in crate::coordinator::holder) transitions: Vec<(String, bool)>,
    pub(in crate::coordinator::holder) review: Review,
    pub(in crate::coordinator::holder) groups: Vec<(String, usize, usize)>,
    pub(in crate::coordinator::holder) write: Write,
    pub(in crate::coordinator::holder) generation_floor: u64,
    pub(in crate::coordinator::holder) forgotten: Vec<(String, String)>,
    /// Units the stored table took from members without a revocation.
    pub(in crate::coordinator::holder) claimed: usize,
}

/// The stored table's state as the cycle read it.
struct Stored {
    digest: Option<String>,
    generation: u64,
    /// The table itself, when it was read (by this cycle or its resync).
    table: Option<Arc<MatchingTable>>,
}

/// What a round of pings (or of refusals) did to the view.
#[derive(Default)]
struct Observed {
    review: Review,
    transitions: Vec<(String, bool)>,
    failures: Vec<(String, PingFailure)>,
}

/// The write in progress: where it started and what it planned.
struct Planning {
    granted: Arc<MatchingTable>,
    verify: bool,
    plan: Option<handoff::Plan>,
    next: Option<Arc<MatchingTable>>,
    table_changed: bool,
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
    resynced: bool,
    note: Option<CommitNote>,
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
            resynced: false,
            note: None,
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
            (Phase::Holding, Outcome::Holding(r)) => match r {
                Ok(inherited) => {
                    self.reconcile(inherited, now);
                    self.read()
                }
                Err(e) => self.done(Err(CycleError::Unreadable(e))),
            },
            (Phase::Inputs, Outcome::Inputs(r)) => self.inputs_read(r),
            (Phase::Lists, Outcome::Lists(r)) => match r {
                Ok(cache) => self.lists_made(cache),
                Err(e) => self.done(Err(e)),
            },
            (Phase::State, Outcome::State(state, reports)) => self.state_read(state, reports, now),
            (Phase::Pings, Outcome::Pinged(reports)) => {
                let inputs = Arc::clone(self.inputs());
                let listed = listed_entries(&inputs);
                let was_live = std::mem::take(&mut self.was_live);
                self.observed = self.observe(&inputs, &listed, reports, &was_live, true, now);
                self.was_live = was_live;
                let view = self.view.as_mut().expect("the view is known");
                view.handoff.forget_departed(&inputs);
                view.handoff.inputs = Some(inputs);
                self.settle()
            }
            (Phase::Table, Outcome::Table(r)) => match r {
                Ok(t) => {
                    let generation = self.stored.as_ref().map_or(0, |s| s.generation);
                    self.start_from_stored(Arc::new(t), generation)
                }
                Err(e) => self.written(Write::Failed(e), now),
            },
            (Phase::Solve, Outcome::Solved(desired)) => self.plan(desired, now),
            (Phase::Digest, Outcome::Digested(next)) => self.changes(next, now),
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
                self.resynced = with_table;
                self.phase = Phase::Holding;
                Ready::ReadHolding { with_table }
            }
        }
    }

    /// The view from Redis' state (see [`HolderView::reconcile`]), and the
    /// log of what it found.
    fn reconcile(&mut self, inherited: Inheritance, now: Now) {
        let keys = &self.config.keys;
        let (mut view, r) = HolderView::reconcile(
            self.view.take(),
            inherited,
            self.config.failure_threshold,
            &self.config.handoff,
            now.at,
            now.unix_ms,
        );
        self.floor = self.floor.max(r.generation);
        for (member, value) in &r.unreadable_suspects {
            tracing::warn!(key = %keys.suspects, member, value, "ignoring unreadable suspect entry");
        }
        for (member, value) in &r.unreadable_liveness {
            tracing::warn!(key = %keys.liveness, member, value, "ignoring unreadable liveness entry");
        }
        if !r.unreadable_transit.is_empty() {
            // Written only by holders: an unreadable entry is an operator's
            // edit.
            tracing::warn!(
                key = %keys.transit,
                count = r.unreadable_transit.len(),
                first = %r.unreadable_transit.iter().take(LOG_FIRST).cloned().collect::<Vec<_>>().join(" "),
                "unreadable transit entries: their units wait the longest any member may ask for"
            );
        }
        if r.inherited_suspects > 0 {
            tracing::warn!(
                suspects = r.inherited_suspects,
                "inherited members suspected of a mass failure: their units stay until this replica's pings confirm or clear it"
            );
        }
        if !self.resynced
            && let Some(warm) = self.warm.take()
        {
            view.warm_from(warm);
        }
        tracing::info!(
            known_members = view.liveness.iter().count(),
            in_transit = view.handoff.ledger.in_transit(),
            restored = r.resync.restored,
            version = r.version,
            applied = ?r.resync.applied,
            held_tables = view.handoff.ledger.held().len(),
            "read what the holder must know before it plans"
        );
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
                Ready::ReadInputs {
                    held: view
                        .lists
                        .as_ref()
                        .map(|c| c.held(&self.config.units_key))
                        .unwrap_or_default(),
                    reports_since: view.handoff.reports_version,
                }
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

    fn inputs_read(&mut self, r: Result<Snapshot, StoreError>) -> Ready {
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

    fn lists_made(&mut self, cache: ListCache) -> Ready {
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
        self.phase = Phase::Pings;
        Ready::Ping { members }
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
            self.observed =
                probes.in_scope(|| self.observe(&inputs, &listed, refused, &was_live, false, now));
        }
        self.inputs = Some(inputs);
        self.settle()
    }

    /// Takes one round of ping reports into the view: refusals (`gone`) to
    /// the handoff, then liveness and the mass-failure guard
    /// ([`HolderView::observe_round`]). `full`: a full round (see there).
    fn observe(
        &mut self,
        inputs: &Inputs,
        listed: &[String],
        reports: Vec<PingReport>,
        was_live: &HashSet<String>,
        full: bool,
        now: Now,
    ) -> Observed {
        let why_failed: Vec<String> = reports
            .iter()
            .map(|r| {
                r.result
                    .as_ref()
                    .err()
                    .map(ToString::to_string)
                    .unwrap_or_default()
            })
            .collect();
        let results: Vec<(&str, Result<(), &str>)> = reports
            .iter()
            .zip(&why_failed)
            .map(|(r, why)| {
                let result = match r.result {
                    Ok(_) => Ok(()),
                    Err(_) => Err(why.as_str()),
                };
                (r.member.as_str(), result)
            })
            .collect();
        let view = self.view.as_mut().expect("the view is known");
        view.handoff.observe_pings(&reports);
        let judge = Judge {
            guard: self.config.guard,
            replica_id: &self.config.replica_id,
            now_ms: now.unix_ms,
        };
        let review = view.observe_round(inputs, listed, &results, was_live, full, judge);
        drop(results);
        let transitions = inputs
            .members()
            .filter(|m| view.liveness.is_live(m) != was_live.contains(*m))
            .map(|m| (m.to_string(), view.liveness.is_live(m)))
            .collect();
        let failures = reports
            .into_iter()
            .filter_map(|r| r.result.err().map(|e| (r.member, e)))
            .collect();
        Observed {
            review,
            transitions,
            failures,
        }
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
        self.phase = Phase::Digest;
        Ready::Digest { table }
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
        let commit = CommitPlan {
            table: table_changed.then(|| Arc::clone(&next)),
            transit: transit_changed.then_some(encoded),
            last_change,
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
        let forget = match (self.kind, self.config.forget_after) {
            (Kind::Full, Some(after))
                if matches!(write, Write::Unchanged | Write::Written { .. }) && now.may_act() =>
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
        };
        self.done(Ok(finished))
    }
}
