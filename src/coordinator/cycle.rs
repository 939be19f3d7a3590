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

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt as _;
use opentelemetry::trace::TraceContextExt as _;
use tokio::sync::watch;
use tokio::time::Instant;
use tracing::field::Empty;
use tracing::{Instrument as _, Span, info_span};
use tracing_opentelemetry::OpenTelemetrySpanExt as _;
use xxhash_rust::xxh3::Xxh3;

use super::handoff_state::{HandoffOutcome, HandoffState, Refusal, Steady};
use crate::core::handoff::{self, PlanInput, Transit, Transits};
use crate::core::inputs::{self, Inputs, Rejection};
use crate::core::liveness::{HealthChanges, Liveness};
use crate::core::suspicion::{self, Guard, Review, Suspect, SuspectChanges};
use crate::core::table::{Assignment, MatchingTable, Moves, Solve};
use crate::edge::grpc::{FIRST_CONTACT, PingFailure, PingReport, Pinger};
use crate::edge::redis::{Commit, Committed, LeaseGrant, ListLimits, ListRead, Snapshot, Store};
use crate::error::StoreError;
use crate::ops::metrics::Metrics;
use crate::unix_ms;

/// The holder's view of the members, handed to each cycle and back.
#[derive(Clone)]
pub(super) struct HolderView {
    pub(super) liveness: Liveness,
    /// Liveness changes not yet persisted (a failed write is retried with the next).
    pub(super) unsaved: HealthChanges,
    /// Members of a mass failure not yet confirmed: their units stay.
    pub(super) suspects: BTreeMap<String, Suspect>,
    pub(super) unsaved_suspects: SuspectChanges,
    /// The table the solver wants (desired), memoised.
    pub(super) memo: Option<Memo>,
    /// Per group (name, live, failed) as the last cycle counted it.
    pub(super) groups: Vec<(String, usize, usize)>,
    pub(super) handoff: HandoffState,
    /// The lists as last read, and the inputs made of them.
    pub(super) lists: Option<ListCache>,
}

/// What the last full cycle made of the lists, by the versions the store
/// gave them (`ListRead::version`): when no list changed, the next cycle
/// reuses the inputs (and so the memoised solve) without normalising or
/// hashing anything; when only some changed, only those are normalised
/// again. Cheap to clone: the view is cloned for every cycle.
#[derive(Clone)]
pub(super) struct ListCache {
    /// Each services list's raw entries (small: one per member), with its
    /// version, in configuration order: groups are normalised together.
    groups: Vec<CachedList>,
    /// The units list's version. Its raw entries are not kept (at a million
    /// units they are tens of MB): its normalised units are in `inputs`.
    units_version: u64,
    inputs: Arc<Inputs>,
    /// The units' part of the memo key ([`units_key`]), computed once.
    units_key: u128,
}

/// A services list as read: `(key, version, entries)`.
type CachedList = (String, u64, Arc<Vec<Vec<u8>>>);

impl ListCache {
    /// The versions this cache holds, for `Store::read_snapshot`.
    fn held(&self, units_list: &str) -> HashMap<String, u64> {
        self.groups
            .iter()
            .map(|(k, v, _)| (k.clone(), *v))
            .chain([(units_list.to_string(), self.units_version)])
            .collect()
    }
}

impl HolderView {
    /// A view that knows nothing yet.
    fn empty(failure_threshold: u32) -> HolderView {
        HolderView {
            liveness: Liveness::new(failure_threshold),
            unsaved: HealthChanges::default(),
            suspects: BTreeMap::new(),
            unsaved_suspects: SuspectChanges::default(),
            memo: None,
            lists: None,
            groups: Vec::new(),
            handoff: HandoffState::default(),
        }
    }

    /// Takes what a standby prepared ([`WarmView`]): the lists as read (by
    /// their versions) and the memoised solve (by its key). Both are checked
    /// before use, as between a holder's own cycles, so a stale warm view
    /// costs a read and a solve, never a wrong table.
    fn warm_from(&mut self, warm: WarmView) {
        self.lists = warm.view.lists;
        self.memo = warm.view.memo;
    }

    /// Whether `member` gets units: live, or suspected of a mass failure that
    /// nobody confirmed yet.
    pub(super) fn keeps_units(&self, member: &str) -> bool {
        self.liveness.is_live(member) || self.suspects.contains_key(member)
    }
}

/// The last solved table and the key of its inputs, to skip re-solving.
#[derive(Clone)]
pub(super) struct Memo {
    key: u128,
    pub(super) table: Arc<MatchingTable>,
}

/// The last solve that changed the table: its moves against the minimum.
#[derive(Clone, Debug, Default)]
pub(super) struct LastChange {
    pub(super) moves: Moves,
    /// Not written to `{T}:meta` yet.
    pub(super) unsaved: bool,
}

pub(super) struct CycleReport {
    pub(super) epoch: u64,
    pub(super) inputs: Arc<Inputs>,
    pub(super) failures: Vec<(String, PingFailure)>,
    /// The view after this cycle (unsaved changes are empty after a write).
    pub(super) view: HolderView,
    pub(super) transitions: Vec<(String, bool)>,
    /// What the mass-failure guard did this cycle.
    pub(super) review: Review,
    /// Per group: (name, live, failed).
    pub(super) groups: Vec<(String, usize, usize)>,
    pub(super) write: Write,
    pub(super) generation_floor: u64,
    /// (member, list) pairs removed by `-forget-after`.
    pub(super) forgotten: Vec<(String, String)>,
    /// Pings still running (hung members): collected by the next cycle.
    pub(super) in_flight: InFlight,
    pub(super) in_flight_members: HashSet<String>,
}

/// Why a cycle did not produce a table; either way the last one stays.
#[derive(Debug, thiserror::Error)]
pub(super) enum CycleError {
    #[error(transparent)]
    Read(StoreError),
    #[error(
        "every one of the {entries} entries of list {key:?} is invalid, {}; keeping the last table",
        first.as_deref().unwrap_or("")
    )]
    Inputs {
        key: String,
        entries: usize,
        first: Option<String>,
    },
    /// A handoff cycle before the holding's first full cycle: nothing to do.
    #[error("no full cycle yet")]
    NotReady,
    /// What the holder must know before it plans could not be read (what
    /// the last holder left, or Redis' state after a write of unknown
    /// outcome): the holding does not act until it can.
    #[error("cannot read what the holder must know before it acts ({0}); not acting until it can")]
    Unreadable(StoreError),
}

impl CycleError {
    pub(super) fn kind(&self) -> &'static str {
        match self {
            CycleError::Read(e) | CycleError::Unreadable(e) => e.kind(),
            CycleError::Inputs { .. } => "invalid_input",
            CycleError::NotReady => "not_ready",
        }
    }
}

/// What became of a cycle's write.
pub(super) enum Write {
    /// Nothing changed: nothing written.
    Unchanged,
    /// The lease is past its renew deadline locally: nothing written.
    NotActing,
    Written {
        generation: Option<u64>,
    },
    /// Redis rejected it: the lease moved on.
    Fenced(String),
    /// Redis refused it before writing anything: something wrote since the
    /// plan's state was read (`version` is `{T}:meta`'s now). The next
    /// cycle reads Redis again before it plans.
    Outdated {
        version: u64,
    },
    /// Nothing written: a read it needed failed, or Redis refused a stored
    /// value before writing anything.
    Failed(StoreError),
    /// It may or may not have been applied (an error or a timeout after it
    /// was sent, or too few replicas acknowledged it): the next cycle reads
    /// Redis again before it plans.
    Unknown(StoreError),
}

/// Pings still in flight when a cycle ended; the next cycle collects them
/// instead of pinging those members again.
pub(super) type InFlight = crate::edge::grpc::PingSet;

/// How long a cycle waits for fast ping results before acting on them. A
/// refused connection answers in about a millisecond; a hung member only when
/// the ping timeout expires, which must not delay everyone else.
const FIRST_PHASE: Duration = Duration::from_millis(50);

/// Takes one finished ping; `false` when none is left.
/// Collects finished pings until every member in `awaited` has settled (each
/// leaves it as its result comes), every ping has, or `until`.
async fn collect_awaited(
    pending: &mut InFlight,
    awaited: &mut HashSet<String>,
    all: &mut Vec<PingReport>,
    pending_members: &mut HashSet<String>,
    until: Instant,
) {
    let deadline = tokio::time::sleep_until(until);
    tokio::pin!(deadline);
    while !awaited.is_empty() {
        tokio::select! {
            r = pending.next() => {
                if let Some((member, _)) = &r {
                    awaited.remove(member);
                }
                if !collect(r, all, pending_members) { break }
            }
            _ = &mut deadline => break,
        }
    }
}

fn collect(
    done: Option<(String, Option<PingReport>)>,
    all: &mut Vec<PingReport>,
    pending: &mut HashSet<String>,
) -> bool {
    let Some((member, report)) = done else {
        return false;
    };
    pending.remove(&member);
    // None: the ping task panicked or was cancelled; the member is simply
    // pinged again next cycle.
    all.extend(report);
    true
}

/// A standby's view ahead of a holding: the lists read through the same
/// guards a holder cycle reads them through, the members' reports, the
/// liveness and suspects the holder left, and (ring mode without a move
/// limit) the solve, memoised. Its first cycle as a holder starts from the
/// lists and the memo ([`HolderView::warm_from`]): when nothing changed
/// since, it reads no list and does not solve; when anything did, the list
/// versions and the memo's key say so, and it reads and solves as it would
/// have. It decides nothing and writes nothing.
///
/// ```text
///   standby   prepare ── poll ── prepare ── poll ── …   (reads what changed)
///   lease     ─────────────────────────────────▶ acquired
///   holder                                       first cycle: lists known,
///                                                memo hit, no solve
/// ```
pub(super) struct WarmView {
    view: HolderView,
    /// The table generation this replica had seen when the liveness was
    /// loaded: loaded again when it moves.
    generation: Option<u64>,
    /// Whether the last preparation read a list in full.
    pub(super) read_lists: bool,
}

/// What a standby needs to keep a [`WarmView`].
pub(super) struct Preparer {
    pub(super) store: Store,
    pub(super) metrics: Arc<Metrics>,
    pub(super) services: Vec<String>,
    pub(super) units_key: String,
    pub(super) limits: ListLimits,
    pub(super) failure_threshold: u32,
    pub(super) solve: SolveSettings,
}

impl Preparer {
    /// Brings `warm` up to date: reads the lists and reports that changed
    /// (nothing when none did); when any did, or the table's generation
    /// moved since (`generation`, as this replica last saw it), loads the
    /// liveness again and solves if the memo's key changed.
    pub(super) async fn prepare(
        &self,
        warm: Option<WarmView>,
        generation: u64,
    ) -> Result<WarmView, CycleError> {
        let WarmView {
            mut view,
            generation: loaded_at,
            ..
        } = warm.unwrap_or_else(|| WarmView {
            view: HolderView::empty(self.failure_threshold),
            generation: None,
            read_lists: false,
        });
        let held = view
            .lists
            .as_ref()
            .map(|c| c.held(&self.units_key))
            .unwrap_or_default();
        let (groups, units) = self
            .store
            .read_lists_since(&self.services, &self.units_key, self.limits, &held)
            .await
            .map_err(CycleError::Read)?;
        let read_lists = groups.iter().chain([&units]).any(|l| l.entries.is_some());
        let lists_changed = view.lists.is_none() || read_lists;
        let cache = assemble(view.lists.take(), groups, units).await?;
        let inputs = Arc::clone(&cache.inputs);
        view.lists = Some(cache);
        let reports = self
            .store
            .read_reports_since(view.handoff.reports_version)
            .await;
        let reports_changed = reports.content.is_some();
        // A failed read is read again next time (no version is kept).
        let _ = view.handoff.observe(reports, self.store.keys());
        if !lists_changed && !reports_changed && loaded_at == Some(generation) {
            return Ok(WarmView {
                view,
                generation: loaded_at,
                read_lists,
            });
        }
        let (liveness, suspects) = self.store.read_liveness().await.map_err(CycleError::Read)?;
        // Unreadable entries are the holder's to log.
        (view.liveness, _) = Liveness::restore(self.failure_threshold, liveness);
        view.suspects = suspects;
        if !self.solve.uses_current() {
            let none = Arc::new(MatchingTable::default());
            let (_, solved) = desired(self.solve, &inputs, &mut view, &none).await;
            if solved {
                self.metrics.solve("ahead");
            }
        }
        self.metrics.warm_generation.set(generation);
        Ok(WarmView {
            view,
            generation: Some(generation),
            read_lists,
        })
    }
}

/// What the solve depends on besides the inputs and the view.
#[derive(Clone, Copy)]
pub(super) struct SolveSettings {
    pub(super) assignment: Assignment,
    pub(super) max_moves: usize,
}

impl SolveSettings {
    /// Whether the solve reads the current (granted) table: sticky mode, or
    /// a move limit. Then a standby's warm view cannot solve ahead (it has
    /// no granted table of its own).
    fn uses_current(&self) -> bool {
        self.assignment == Assignment::Sticky || self.max_moves > 0
    }
}

/// The table the solver wants (desired) for these inputs and this view:
/// `view.memo` when its key (everything the solve depends on) is unchanged,
/// else solved again on a blocking thread and memoised. `granted` is the
/// table members hold now, which only sticky mode and a move limit read.
/// Says whether it solved (`false`: the memo).
async fn desired(
    how: SolveSettings,
    inputs: &Arc<Inputs>,
    view: &mut HolderView,
    granted: &Arc<MatchingTable>,
) -> (Arc<MatchingTable>, bool) {
    // Desired: live (or suspected) members that are not draining.
    let eligible = |m: &str| view.keeps_units(m) && !view.handoff.draining(m);
    // The current table, in sticky mode: the granted table the plan
    // starts from (what members hold: this holder's last write, or the
    // stored table on a new holding, whoever wrote it, Go included), plus
    // every unit in transit counted as held by its destination. The
    // destination is where the last solve put it, and no member works on
    // it meanwhile, so keeping it there loses nothing; counting it free
    // instead would let each solve during a handoff re-place the revoked
    // units by hash, changing their destination for nothing. With the
    // destination counted, a solve during a handoff finds the desired
    // table it started from (a fixed point). A unit in transit to nobody
    // is free. The move limit counts moves from the same current table,
    // in both modes. In ring mode without a limit the table does not
    // depend on it (so neither does the memo's key), and it is not read.
    let uses_current = how.uses_current();
    let also_held: Vec<(&str, &str)> = view
        .handoff
        .ledger
        .transit()
        .values()
        .flat_map(|units| units.iter())
        .filter_map(|(u, t)| Some((t.to.as_deref()?, u.as_str())))
        .collect();
    // Moves already in flight (units in transit from a member that still
    // gets units, to another) use up the move limit: it bounds how many
    // held units move at once, not per write. Otherwise every write of a
    // handoff (each acknowledgement triggers one) would let another
    // `-max-moves-per-cycle` go, and with members that do not
    // acknowledge, units would pile up in transit. Units of failed,
    // draining or departed members are never limited, so they use none.
    let in_flight = view
        .handoff
        .ledger
        .transit()
        .values()
        .flat_map(|units| units.values())
        .filter(|t| t.to.is_some() && t.origins().any(&eligible))
        .count();
    // Capacity weights, in both modes: the operator's override, else
    // each member's report (1 without one, or without the field). A
    // changed weight re-solves.
    let weights: HashMap<String, u32> = inputs
        .members()
        .filter(|m| eligible(m))
        .map(|m| (m.to_string(), view.handoff.weight(m)))
        .collect();
    let key = {
        let mut h = Xxh3::new();
        // The units' part is computed once per units list read (see
        // `ListCache`): an idle cycle hashes members, never units.
        let units = match &view.lists {
            Some(c) if Arc::ptr_eq(&c.inputs, inputs) => c.units_key,
            _ => units_key(&inputs.units),
        };
        h.update(&inputs_key(inputs, units, eligible).to_le_bytes());
        h.update(how.assignment.name().as_bytes());
        let mut weighted: Vec<(&String, &u32)> = weights.iter().filter(|&(_, &w)| w != 1).collect();
        weighted.sort_unstable();
        for (m, w) in weighted {
            h.update(&(m.len() as u64).to_le_bytes());
            h.update(m.as_bytes());
            h.update(&w.to_le_bytes());
        }
        if uses_current {
            h.update(&how.max_moves.to_le_bytes());
            h.update(granted.digest().as_bytes());
            for (m, u) in &also_held {
                h.update(&(m.len() as u64).to_le_bytes());
                h.update(m.as_bytes());
                h.update(&(u.len() as u64).to_le_bytes());
                h.update(u.as_bytes());
            }
        }
        h.digest128()
    };
    let mut solved = false;
    let memo = match view.memo.take() {
        Some(m) if m.key == key => m,
        _ => {
            solved = true;
            let inp = Arc::clone(inputs);
            let assign = info_span!(
                "assign",
                units = inputs.units.len(),
                groups = inputs.groups.len(),
                assignment = how.assignment.name(),
            );
            let assignment = how.assignment;
            let max_moves = how.max_moves;
            // Ring mode without a limit does not read the current table:
            // counting its moves for status costs whole-table passes on
            // every new solve (tens of MB at a million units), in the
            // default mode whose memory is budgeted (BENCHMARKS §7).
            let current = uses_current.then(|| Arc::clone(granted));
            let in_flight = if max_moves > 0 { in_flight } else { 0 };
            let also_held: Vec<(String, String)> = also_held
                .iter()
                .map(|(m, u)| (m.to_string(), u.to_string()))
                .collect();
            let table = tokio::task::spawn_blocking(move || {
                let also_held: Vec<(&str, &str)> = also_held
                    .iter()
                    .map(|(m, u)| (m.as_str(), u.as_str()))
                    .collect();
                let weight = |m: &str| weights.get(m).copied().unwrap_or(1);
                let how = Solve {
                    assignment,
                    weight: &weight,
                    current: current.as_deref(),
                    also_held: &also_held,
                    max_moves,
                    in_flight,
                };
                let live = |m: &str| weights.contains_key(m);
                assign.in_scope(|| MatchingTable::solve_counted(&inp, live, &how))
            })
            .await
            .expect("solving the table does not panic");
            let (table, moves) = table;
            if let Some(moves) = moves.filter(|m| m.moved + m.placed > 0) {
                view.handoff.last_change = Some(LastChange {
                    moves,
                    unsaved: true,
                });
            }
            Memo {
                key,
                table: Arc::new(table),
            }
        }
    };
    let desired = Arc::clone(&memo.table);
    view.memo = Some(memo);
    (desired, solved)
}

/// Whether this round looks like the holder's own network failing: a member
/// that was live failed, and no more than `100 - percent` percent of the live
/// members answered so far.
fn suspicious(reports: &[PingReport], was_live: &HashSet<String>, percent: u32) -> bool {
    let failed_live = reports
        .iter()
        .any(|r| r.result.is_err() && was_live.contains(&r.member));
    let answered = reports.iter().filter(|r| r.result.is_ok()).count();
    failed_live && answered * 100 <= (100 - percent as usize) * was_live.len()
}

/// Everything a cycle task needs, owned, so it runs beside the state machine.
pub(super) struct CycleContext {
    pub(super) store: Store,
    pub(super) pinger: Pinger,
    pub(super) metrics: Arc<Metrics>,
    pub(super) services: Vec<String>,
    pub(super) units_key: String,
    pub(super) limits: ListLimits,
    pub(super) replica_id: String,
    pub(super) forget_after: Option<Duration>,
    pub(super) grant: LeaseGrant,
    pub(super) acts_until: watch::Receiver<Instant>,
    pub(super) generation_floor: u64,
    /// Pings of earlier cycles still running, and their members.
    pub(super) carried: InFlight,
    pub(super) carried_members: HashSet<String>,
    pub(super) guard: Guard,
    pub(super) failure_threshold: u32,
    pub(super) ping_timeout: Duration,
    pub(super) handoff: handoff::Settings,
    /// The assignment mode and `-max-moves-per-cycle`.
    pub(super) solve: SolveSettings,
    /// What this replica prepared as a standby, for a new holding's first
    /// cycle (see [`WarmView`]).
    pub(super) warm: Option<WarmView>,
}

impl CycleContext {
    fn may_act(&self) -> bool {
        Instant::now() < *self.acts_until.borrow()
    }

    /// Reads what a holder must know before it plans (see
    /// `core::handoff::Ledger`): on a new holding (`view` is `None`), what
    /// the last holder left (liveness history, so that this holder writes
    /// the same table, not a reshuffle; mass-failure suspects; units in
    /// transit, whose handoffs continue); after a write of unknown outcome
    /// (the ledger is stale), Redis' state again, which the view is
    /// reconciled with. What it cannot read fails the cycle
    /// ([`CycleError::Unreadable`]): the holding does not act and retries
    /// next cycle; it never starts from an empty view. Returns the view and
    /// the stored table it read, for the plan.
    async fn fresh_view(
        &mut self,
        view: Option<HolderView>,
    ) -> Result<(HolderView, Option<Arc<MatchingTable>>), CycleError> {
        if view.as_ref().is_some_and(|v| !v.handoff.ledger.stale()) {
            return Ok((view.expect("checked"), None));
        }
        let keys = self.store.keys().clone();
        // A new holding has nothing to reconcile the table with (its first
        // plan reads and verifies it anyway); a resync does.
        let inherited = self
            .store
            .read_holding(view.is_some())
            .await
            .map_err(CycleError::Unreadable)?;
        self.generation_floor = self.generation_floor.max(inherited.generation);
        for (member, value) in &inherited.unreadable_suspects {
            tracing::warn!(key = %keys.suspects, member, value, "ignoring unreadable suspect entry");
        }
        let now = Instant::now();
        let (transit, unreadable) =
            decode_transits(inherited.transit, &self.handoff, now, unix_ms());
        if !unreadable.is_empty() {
            // Written only by holders: an unreadable entry is an operator's
            // edit. Its unit waits the longest any member may ask for (its
            // origins are unknown); one whose field names no unit is
            // dropped, and the table read below is verified instead.
            tracing::warn!(
                key = %keys.transit,
                count = unreadable.len(),
                first = %unreadable.iter().take(LOG_FIRST).cloned().collect::<Vec<_>>().join(" "),
                "unreadable transit entries: their units wait the longest any member may ask for"
            );
        }
        let mut view = match view {
            Some(mut v) => {
                // After a write of unknown outcome: this holder's own
                // observations are the truth; Redis is brought back to them.
                v.unsaved = v.liveness.changes_from(&inherited.liveness);
                v.unsaved_suspects = SuspectChanges::between(&inherited.suspects, &v.suspects);
                v.unsaved_suspects.removed.extend(
                    inherited
                        .unreadable_suspects
                        .iter()
                        .filter(|(m, _)| !v.suspects.contains_key(m))
                        .map(|(m, _)| m.clone()),
                );
                // Reports are read in full again, past their guard.
                v.handoff.reports_version = None;
                self.metrics.resyncs.inc();
                v
            }
            None => {
                let (liveness, bad) = Liveness::restore(self.failure_threshold, inherited.liveness);
                for (member, value) in bad {
                    tracing::warn!(key = %keys.liveness, member, value, "ignoring unreadable liveness entry");
                }
                if !inherited.suspects.is_empty() {
                    tracing::warn!(
                        suspects = inherited.suspects.len(),
                        "inherited members suspected of a mass failure: their units stay until this replica's pings confirm or clear it"
                    );
                }
                let mut v = HolderView {
                    liveness,
                    suspects: inherited.suspects,
                    ..HolderView::empty(self.failure_threshold)
                };
                if let Some(warm) = self.warm.take() {
                    v.warm_from(warm);
                }
                v
            }
        };
        let groups = view
            .handoff
            .inputs
            .as_ref()
            .map(|i| i.group_members())
            .unwrap_or_default();
        // Units in transit: the handoffs continue. Their waits start again
        // now, unless this holder already knew them written (a new holder
        // cannot trust the last one's clock), so a handoff waiting on time
        // is never cut short.
        let table = inherited.table.map(Arc::new);
        let resync = view.handoff.ledger.resync(
            table
                .clone()
                .map(|t| handoff::HeldTable::new(t, Some(inherited.generation))),
            transit,
            inherited.version,
            &groups,
        );
        drop(groups);
        tracing::info!(
            known_members = view.liveness.iter().count(),
            in_transit = view.handoff.ledger.in_transit(),
            restored = resync.restored,
            version = inherited.version,
            applied = ?resync.applied,
            held_tables = view.handoff.ledger.held().len(),
            "read what the holder must know before it plans"
        );
        Ok((view, table))
    }

    /// One cycle: (on a new holding, load what the last holder left), read,
    /// ping, review mass failures, solve, and write if anything changed.
    pub(super) async fn run(
        mut self,
        view: Option<HolderView>,
        refused: Vec<Refusal>,
    ) -> Result<CycleReport, CycleError> {
        let (mut view, held_table) = self.fresh_view(view).await?;
        // Refusals the executor's probes found: what they prove counts
        // (liveness comes from this cycle's own pings).
        view.handoff.observe_refusals(&refused);
        let read = info_span!(
            "read_inputs",
            lists = self.services.len() + 1,
            otel.status_code = Empty,
            otel.status_message = Empty
        );
        let held = view
            .lists
            .as_ref()
            .map(|c| c.held(&self.units_key))
            .unwrap_or_default();
        let snapshot = match self
            .store
            .read_snapshot(
                &self.services,
                &self.units_key,
                self.limits,
                &held,
                view.handoff.reports_version,
            )
            .instrument(read.clone())
            .await
        {
            Ok(s) => s,
            Err(e) => {
                mark_error(&read, &e.to_string());
                mark_error(&Span::current(), &e.to_string());
                return Err(CycleError::Read(e));
            }
        };
        drop(read);
        let Snapshot {
            groups,
            units,
            stored_digest,
            stored_generation,
            stored_table,
            reports,
        } = snapshot;
        // The members' reports first: without them (a read that may work
        // next time) nothing is planned.
        if let Err(e) = view.handoff.observe(reports, self.store.keys()) {
            mark_error(&Span::current(), &e.to_string());
            return Err(CycleError::Read(e));
        }
        let read_lists = groups
            .iter()
            .chain([&units])
            .filter(|l| l.entries.is_some());
        let read_count = read_lists.count() as u64;
        self.metrics.list_reads("read", read_count);
        self.metrics
            .list_reads("cached", groups.len() as u64 + 1 - read_count);
        let cache = match assemble(view.lists.take(), groups, units).await {
            Ok(c) => c,
            Err(e) => {
                mark_error(&Span::current(), &e.to_string());
                return Err(e);
            }
        };
        let inputs = Arc::clone(&cache.inputs);
        view.lists = Some(cache);
        let members: Vec<String> = inputs.members().map(str::to_string).collect();
        let was_live: HashSet<String> = members
            .iter()
            .filter(|m| view.liveness.is_live(m))
            .cloned()
            .collect();
        let listed = listed_entries(&inputs);
        let mut stored_digest = stored_digest;
        let mut generation_floor = self.generation_floor.max(stored_generation);

        let ping = info_span!(
            "ping",
            members = members.len(),
            ok = Empty,
            failed = Empty,
            otel.status_code = Empty,
            otel.status_message = Empty
        );
        // Members whose ping from an earlier cycle still runs (hung ones) are
        // not pinged again: that ping's result is collected when it comes.
        let carried = std::mem::take(&mut self.carried);
        let mut pending_members = std::mem::take(&mut self.carried_members);
        let fresh: HashSet<String> = members
            .iter()
            .filter(|m| !pending_members.contains(*m))
            .cloned()
            .collect();
        let fresh_list: Vec<String> = fresh.iter().cloned().collect();
        let mut pending = ping.in_scope(|| self.pinger.ping_tasks(&fresh_list));
        pending_members.extend(fresh.iter().cloned());
        for task in carried {
            pending.push(task);
        }
        let mut all_reports: Vec<PingReport> = Vec::with_capacity(members.len());
        // First phase: what is known after a short grace. It ends early once
        // every member pinged afresh that is not already failing has
        // settled: carried pings (hung members) and members already failing
        // never hold up everyone else's verdicts.
        let mut awaited: HashSet<String> = fresh
            .iter()
            .filter(|m| view.liveness.health(m).is_none_or(|h| h.failures == 0))
            .cloned()
            .collect();
        collect_awaited(
            &mut pending,
            &mut awaited,
            &mut all_reports,
            &mut pending_members,
            Instant::now() + FIRST_PHASE,
        )
        .await;
        // Whatever else has already settled is taken too.
        while let Some(Some(r)) = futures::FutureExt::now_or_never(pending.next()) {
            collect(Some(r), &mut all_reports, &mut pending_members);
        }
        // A wave of first contacts: more members still unheard of (never
        // answered any holder, never failed) than members heard from (known
        // live, or answering in this round): a fresh fleet's first cycle, or
        // a fleet scaled up many times over. Acting now would place every
        // unit on the few that answered within the grace, and then move
        // almost all of them as the others answer: 98,730 of 100,000 units
        // in transit at 10,000 members (BENCHMARKS §11). So wait for their
        // first answers, up to a first contact's allowance. A steady fleet
        // never waits here, nor a fresh one with a hung member or two: they
        // are fewer than the members heard from, and a later cycle takes
        // them.
        awaited.retain(|m| {
            pending_members.contains(m)
                && view
                    .liveness
                    .health(m)
                    .is_none_or(|h| !h.answered && h.failures == 0)
        });
        let heard = was_live.len()
            + all_reports
                .iter()
                .filter(|r| r.result.is_ok() && !was_live.contains(&r.member))
                .count();
        if awaited.len() > heard {
            let unheard = awaited.len();
            collect_awaited(
                &mut pending,
                &mut awaited,
                &mut all_reports,
                &mut pending_members,
                Instant::now() + self.ping_timeout.max(FIRST_CONTACT),
            )
            .await;
            tracing::info!(
                unheard,
                heard,
                still_unheard = awaited.len(),
                "waited for first contacts before placing units"
            );
        }
        // Second phase, only when a live member just failed while few others
        // answered: that may be this holder's own network (a cut that landed
        // in the middle of a ping round). Wait for the pings in flight (this
        // round's and those carried over), up to a ping timeout, so that a
        // mass failure is seen in one cycle and held as one (see
        // core::suspicion). A healthy holder never waits here: the others'
        // answers arrive within the grace.
        let hold_until = Instant::now() + self.ping_timeout.max(FIRST_CONTACT);
        while self.guard.percent < 100
            && suspicious(&all_reports, &was_live, self.guard.percent)
            && !pending_members.is_empty()
        {
            tokio::select! {
                r = pending.next() => if !collect(r, &mut all_reports, &mut pending_members) { break },
                _ = tokio::time::sleep_until(hold_until) => break,
            }
        }
        for r in &all_reports {
            match &r.result {
                Ok(rtt) => self.metrics.ping_ok(*rtt),
                Err(f) => self.metrics.ping_failed(f.reason()),
            }
        }
        let review = self.observe_round(&mut view, &inputs, &listed, &all_reports, &was_live, true);
        view.handoff.forget_departed(&inputs);
        view.handoff.inputs = Some(Arc::clone(&inputs));
        let write = self
            .settle(
                &inputs,
                &mut view,
                &mut stored_digest,
                &mut generation_floor,
                stored_generation,
                stored_table.map(Arc::new).or(held_table),
            )
            .await;
        let mut reasons: std::collections::BTreeMap<&'static str, usize> = Default::default();
        for r in &all_reports {
            if let Err(f) = &r.result {
                *reasons.entry(f.reason()).or_default() += 1;
            }
        }
        let failed: usize = reasons.values().sum();
        ping.record("ok", all_reports.len() - failed);
        ping.record("failed", failed);
        if failed > 0 {
            // Every cycle while a member stays down: debug only. Its failure is
            // logged once, when it changes state.
            ping.in_scope(|| {
                for (reason, count) in &reasons {
                    tracing::debug!(reason, count, "pings failed");
                }
            });
            mark_error(
                &ping,
                &format!("{failed} of {} pings failed", all_reports.len()),
            );
        }
        drop(ping);
        let listed_now: HashSet<&str> = inputs.members().collect();
        self.pinger.retain(&listed_now);

        let transitions = members
            .iter()
            .filter(|m| view.liveness.is_live(m) != was_live.contains(*m))
            .map(|m| (m.clone(), view.liveness.is_live(m)))
            .collect();
        let failures = all_reports
            .into_iter()
            .filter_map(|r| r.result.err().map(|e| (r.member, e)))
            .collect();
        let groups = group_counts(&inputs, &view);
        record_counts(&inputs, &mut view, &groups, &write);

        let mut forgotten = Vec::new();
        if let Some(after) = self.forget_after
            && matches!(write, Write::Unchanged | Write::Written { .. })
            && self.may_act()
        {
            let now = unix_ms();
            let after_ms = after.as_millis() as u64;
            let view = &view;
            // A member that owes the release of a unit revoked from it stays:
            // forgetting removes its report, and its wait is the stored one
            // anyway; it is forgotten once it owes nothing.
            let owing = view.handoff.owing();
            let failing_long = |m: &str| {
                !owing.contains(m)
                    && view.liveness.health(m).is_some_and(|h| {
                        h.failing_since_ms
                            .is_some_and(|s| now.saturating_sub(s) >= after_ms)
                    })
            };
            // Never in a group that is mostly failing (the holder's own network,
            // or a mass outage), and never a suspect of a mass failure.
            let pairs: Vec<(String, Vec<u8>)> = inputs
                .groups
                .iter()
                .filter(|g| {
                    !suspicion::mostly_failing(
                        &g.members,
                        |m| view.keeps_units(m),
                        self.guard.percent,
                    )
                })
                .flat_map(|g| {
                    let members = g
                        .members
                        .iter()
                        .filter(|m| failing_long(m) && !view.keeps_units(m))
                        .map(|m| (g.name.clone(), m.as_bytes().to_vec()));
                    let malformed = g
                        .malformed
                        .iter()
                        .filter(|m| failing_long(&m.name))
                        .map(|m| (g.name.clone(), m.raw.clone()));
                    members.chain(malformed)
                })
                .collect();
            if !pairs.is_empty() {
                match self.store.forget_many(&self.grant, &pairs).await {
                    Ok(removed) => {
                        forgotten = removed
                            .into_iter()
                            .map(|(list, m)| (crate::core::inputs::excerpt(&m), list))
                            .collect()
                    }
                    Err(e) => tracing::warn!(error = %e, "could not forget long-failing members"),
                }
            }
        }

        Ok(CycleReport {
            epoch: self.grant.epoch,
            inputs,
            failures,
            view,
            transitions,
            review,
            groups,
            write,
            generation_floor,
            forgotten,
            in_flight: pending,
            in_flight_members: pending_members,
        })
    }

    /// Solves the table the members should have (desired), plans the next
    /// granted table from it with the handoff (break before make), and writes
    /// it (fenced) if it, the units in transit or the liveness history
    /// changed. The plan starts from what the ledger knows Redis holds;
    /// after any outcome but a confirmed write, the ledger is stale and the
    /// next cycle reads Redis first (`fresh_view`).
    async fn settle(
        &self,
        inputs: &Arc<Inputs>,
        view: &mut HolderView,
        stored_digest: &mut Option<String>,
        generation_floor: &mut u64,
        stored_generation: u64,
        stored_table: Option<Arc<MatchingTable>>,
    ) -> Write {
        // Reports of a generation above the table Redis holds come from a
        // numbering Redis lost (a write applied, read and lost again): the
        // next writes are numbered above it, and what those reports would
        // acknowledge is revoked again, every plan until a write above it
        // is done (a renumbering whose write failed is never forgotten).
        let lost_numbering = view.handoff.lost_numbering(stored_generation);
        if let Some(applied) = lost_numbering {
            let renumbered = view.handoff.ledger.renumber_up_to(applied);
            if applied > *generation_floor || renumbered > 0 {
                tracing::warn!(
                    applied,
                    stored = stored_generation,
                    renumbered,
                    "a member reports a generation above the table Redis holds (Redis lost a write, its data, or a lagging replica was promoted): numbering writes above it"
                );
            }
            *generation_floor = (*generation_floor).max(applied);
        }
        // Granted: what this holder knows Redis holds (its last confirmed
        // write), if Redis still has exactly that; else what Redis has (a
        // new holding, a write whose outcome was unknown, an edit),
        // verified by the plan.
        let known = view.handoff.ledger.granted();
        let (granted, verify) = match known.filter(|g| stored_digest.as_deref() == Some(g.digest()))
        {
            Some(g) => (Arc::clone(g), false),
            None => {
                let stored = match stored_table {
                    Some(t) => t,
                    None => match self.store.read_table().await {
                        Ok(t) => Arc::new(t),
                        Err(e) => return Write::Failed(e),
                    },
                };
                let last = view.handoff.ledger.last_written();
                let (from, start) = handoff::starting_point(last, stored);
                if from == handoff::StartingPoint::LastWritten {
                    tracing::warn!(
                        key = %self.store.keys().table,
                        "the matching table is gone; handing off from the table this holder wrote last"
                    );
                } else {
                    // Members may have read it: held until a confirmed
                    // write supersedes it.
                    view.handoff.ledger.saw(&start, stored_generation);
                }
                (start, true)
            }
        };

        let (desired, solved) = desired(self.solve, inputs, view, &granted).await;
        self.metrics
            .solve(if solved { "solved" } else { "memoised" });

        let now = Instant::now();
        let now_ms = unix_ms();
        let groups = inputs.group_members();
        let hs = &view.handoff;
        let facts = |m: &str| hs.facts(m);
        let rows_for = |m: &str| view.keeps_units(m);
        let former = |m: &str| hs.former_group.get(m).cloned();
        let here = Steady {
            desired: Arc::clone(&desired),
            granted: Arc::clone(&granted),
            inputs: Arc::clone(inputs),
            rows_for: {
                let mut h = Xxh3::new();
                for m in inputs.members().filter(|m| rows_for(m)) {
                    h.update(&(m.len() as u64).to_le_bytes());
                    h.update(m.as_bytes());
                }
                h.digest()
            },
        };
        let known_transit = hs.ledger.transit();
        let steady = !verify
            && known_transit.is_empty()
            && hs.steady.as_ref().is_some_and(|s| s.matches(&here));
        let plan = if steady {
            handoff::Plan::default()
        } else {
            info_span!("handoff", verify).in_scope(|| {
                handoff::plan(&PlanInput {
                    granted: &granted,
                    verify,
                    held_before: if verify { hs.ledger.held() } else { &[] },
                    desired: &desired,
                    transit: known_transit,
                    groups: &groups,
                    former_group: &former,
                    units: &inputs.units,
                    facts: &facts,
                    rows_for: &rows_for,
                    settings: self.handoff,
                    now,
                    now_ms,
                })
            })
        };
        if plan.claimed > 0 {
            self.metrics.claimed_units.inc_by(plan.claimed as u64);
            tracing::warn!(
                key = %self.store.keys().table,
                claimed = plan.claimed,
                "the stored table took units from members that may still work on them, without a revocation (redis lost a write, a lagging replica was promoted, or an edit): they wait for those members first"
            );
        }
        let owing = plan
            .transit
            .values()
            .flat_map(|t| t.values())
            .flat_map(|t| t.origins())
            .filter(|m| *m != handoff::UNKNOWN_ORIGIN)
            .collect::<HashSet<&str>>()
            .len();
        let outcome = HandoffOutcome {
            revoked: plan.revoked,
            placed: plan.placed,
            moved: plan.moved.clone(),
            in_transit: plan.transit_len(),
            owing,
            draining: inputs
                .members()
                .filter(|m| view.liveness.is_live(m) && hs.draining(m))
                .count(),
            acknowledging: inputs
                .members()
                .filter(|m| hs.reports.contains_key(*m))
                .count(),
            invalid_reports: hs.bad_reports.len(),
            next_release: plan.next_release,
        };
        // Nothing to hand off (an idle cycle): the granted table stays, and
        // with it its digest, computed once; a new table's digest (O(table))
        // is computed on a blocking thread.
        let unchanged = steady || plan.granted == *granted;
        view.handoff.steady = (unchanged
            && !verify
            && plan.transit.is_empty()
            && plan.revoked == 0
            && plan.placed == 0
            && plan.moved.is_empty()
            && plan.next_release.is_none())
        .then_some(here);
        let next = if unchanged {
            Arc::clone(&granted)
        } else {
            let table = plan.granted;
            tokio::task::spawn_blocking(move || {
                let table = Arc::new(table);
                table.digest();
                table
            })
            .await
            .expect("hashing a table does not panic")
        };
        // A revocation is numbered by a table write (commit.lua): one not
        // numbered yet (this plan's, or one renumbered or restored above)
        // rewrites the table, changed or not; and so does a lost numbering,
        // so that members that applied it (and ignore a lower generation)
        // move on to one above it.
        let numbering = lost_numbering.is_some()
            || plan
                .transit
                .values()
                .flat_map(|u| u.values())
                .any(|t| t.revoked_at == 0);
        let table_changed = stored_digest.as_deref() != Some(next.digest()) || numbering;
        let transit_changed = plan.transit != *view.handoff.ledger.transit() || verify;
        view.handoff.last = outcome;
        if !table_changed
            && !transit_changed
            && view.unsaved.is_empty()
            && view.unsaved_suspects.is_empty()
        {
            view.handoff.ledger.unchanged(next, stored_generation);
            view.handoff.retire_vanished();
            return Write::Unchanged;
        }
        if !self.may_act() {
            return Write::NotActing;
        }
        let encoded: Vec<(String, String)> = plan
            .transit
            .iter()
            .flat_map(|(g, units)| {
                units
                    .iter()
                    .map(move |(u, t)| (handoff::transit_field(g, u), t.encode()))
            })
            .collect();
        let last_change = view
            .handoff
            .last_change
            .as_ref()
            .filter(|c| c.unsaved)
            .map(|c| c.moves.encode());
        let commit = Commit {
            table: table_changed.then_some(&*next),
            health: &view.unsaved,
            suspects: &view.unsaved_suspects,
            transit: transit_changed.then_some(encoded.as_slice()),
            generation_floor: *generation_floor,
            holder_id: &self.replica_id,
            now_ms,
            assignment: self.solve.assignment.name(),
            last_change: last_change.as_deref(),
            expected_version: view.handoff.ledger.version(),
        };
        let span = info_span!(
            "write_table",
            epoch = self.grant.epoch,
            table = table_changed,
            rows = next.len(),
            health_changes = view.unsaved.set.len() + view.unsaved.removed.len(),
            revoked = view.handoff.last.revoked,
            moved = view.handoff.last.moved.len(),
            in_transit = view.handoff.last.in_transit,
            generation = Empty,
            otel.status_code = Empty,
            otel.status_message = Empty,
        );
        // A grant links to the writes that revoked what it grants.
        let linked: BTreeSet<u64> = view
            .handoff
            .last
            .moved
            .iter()
            .map(|m| m.revoked_at)
            .collect();
        for g in linked {
            if let Some(cx) = view.handoff.revocations.get(&g) {
                span.add_link(cx.clone());
            }
        }
        let committed = self
            .store
            .commit(&self.grant, &commit)
            .instrument(span.clone())
            .await;
        match committed {
            Ok(Committed::Written {
                generation,
                version,
            }) => {
                if let Some(g) = generation {
                    span.record("generation", g);
                    Span::current().record("generation", g);
                    *generation_floor = (*generation_floor).max(g);
                    *stored_digest = Some(next.digest().to_string());
                }
                let revoked_here = view.handoff.ledger.written(
                    next,
                    stored_generation,
                    plan.transit,
                    generation,
                    version,
                    Instant::now(),
                );
                if let (true, Some(g)) = (revoked_here, generation) {
                    let cx = span.context().span().span_context().clone();
                    view.handoff.revocations.insert(g, cx);
                }
                let open: BTreeSet<u64> = view
                    .handoff
                    .ledger
                    .transit()
                    .values()
                    .flat_map(|u| u.values().map(|t| t.revoked_at))
                    .collect();
                view.handoff.revocations.retain(|g, _| open.contains(g));
                if generation.is_some()
                    && let Some(c) = &mut view.handoff.last_change
                {
                    c.unsaved = false;
                }
                view.unsaved = HealthChanges::default();
                view.unsaved_suspects = SuspectChanges::default();
                view.handoff.retire_vanished();
                Write::Written { generation }
            }
            Ok(Committed::Fenced { reason }) => {
                mark_error(&span, &format!("fenced by redis: {reason}"));
                view.handoff.ledger.refused();
                Write::Fenced(reason)
            }
            // Something wrote since this plan's state was read (a write of
            // this holder that timed out and landed late, an edit of the
            // metadata): nothing was written; read Redis again and plan
            // from what it holds.
            Ok(Committed::Outdated { version }) => {
                let expected = view.handoff.ledger.version();
                mark_error(
                    &span,
                    &format!("outdated: version {version}, planned on {expected:?}"),
                );
                view.handoff.ledger.refused();
                Write::Outdated { version }
            }
            // A stored value the script refused before its first write:
            // nothing was written, and Redis holds what the ledger knows.
            Err(e @ StoreError::InvalidState { .. }) => {
                mark_error(&span, &e.to_string());
                Write::Failed(e)
            }
            // Applied or not, nobody knows: what it revoked may be in no
            // row; the next cycle reads Redis again before it plans. Its
            // generation (known, or at most one above the last) is never
            // reused.
            Ok(Committed::Unconfirmed { generation, error }) => {
                mark_error(&span, &error.to_string());
                view.handoff.ledger.unknown(
                    table_changed.then(|| handoff::HeldTable::new(Arc::clone(&next), generation)),
                );
                if let Some(g) = generation {
                    *generation_floor = (*generation_floor).max(g);
                }
                Write::Unknown(error)
            }
            Err(e) => {
                mark_error(&span, &e.to_string());
                view.handoff.ledger.unknown(
                    table_changed.then(|| handoff::HeldTable::new(Arc::clone(&next), None)),
                );
                if table_changed {
                    *generation_floor += 1;
                }
                Write::Unknown(e)
            }
        }
    }

    /// A handoff cycle: no list read and no pings, only the members' reports
    /// and the table's state, then the same plan and write as a full cycle,
    /// on the last full cycle's inputs and liveness. Run when a member
    /// acknowledged (`{T}:acked`) or a wait ends, so that a move completes in
    /// milliseconds rather than at the next poll.
    /// Takes one round of ping results into the view: refusals (`gone`),
    /// liveness, and the mass-failure guard, whose review it returns.
    /// Members `listed` without a result this round keep their state;
    /// members no longer listed are forgotten. `malformed`: the lists'
    /// malformed entries fail this round too (full cycles: they never answer,
    /// so they show their reason and can be forgotten like any failing member).
    fn observe_round(
        &self,
        view: &mut HolderView,
        inputs: &Inputs,
        listed: &[String],
        reports: &[PingReport],
        was_live: &HashSet<String>,
        malformed: bool,
    ) -> Review {
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
        let malformed = inputs
            .groups
            .iter()
            .filter(|_| malformed)
            .flat_map(|g| g.malformed.iter().map(|m| (m.name.as_str(), Err(m.reason))));
        let results = reports
            .iter()
            .zip(&why_failed)
            .map(|(r, why)| {
                let result = match r.result {
                    Ok(_) => Ok(()),
                    Err(_) => Err(why.as_str()),
                };
                (r.member.as_str(), result)
            })
            .chain(malformed);
        let now_ms = unix_ms();
        view.handoff.observe_pings(reports);
        for g in &inputs.groups {
            for m in &g.members {
                view.handoff.former_group.insert(m.clone(), g.name.clone());
            }
        }
        let changes = view
            .liveness
            .observe(results, listed.iter().map(String::as_str), now_ms);
        view.unsaved.merge(changes);
        // Most of a group failing at once: keep their units until confirmed.
        let answered: HashMap<&str, bool> = reports
            .iter()
            .map(|r| (r.member.as_str(), r.result.is_ok()))
            .collect();
        let groups = inputs.group_members();
        let liveness = &view.liveness;
        let review = suspicion::review(
            self.guard,
            &mut view.suspects,
            &groups,
            was_live,
            |m| liveness.is_live(m),
            &answered,
            &self.replica_id,
            now_ms,
        );
        view.unsaved_suspects.record(&review, &view.suspects);
        review
    }

    /// A handoff cycle: reads the members' reports and the table's state,
    /// pings nobody, and plans on the last full cycle's inputs. `refused`:
    /// members whose connection just ended and whose ping sent at once was
    /// refused (their process is gone): they fail now, exactly as a full
    /// cycle's refused ping would make them, without pinging everyone else.
    pub(super) async fn run_handoff(
        mut self,
        view: Option<HolderView>,
        refused: Vec<Refusal>,
    ) -> Result<CycleReport, CycleError> {
        let Some(view) = view else {
            // A new holding: its first full cycle comes at once anyway.
            return Err(CycleError::NotReady);
        };
        let Some(inputs) = view.handoff.inputs.clone() else {
            return Err(CycleError::NotReady);
        };
        let (mut view, held_table) = self.fresh_view(Some(view)).await?;
        let (state, reports) = tokio::join!(
            self.store.read_table_state(),
            self.store.read_reports_since(view.handoff.reports_version)
        );
        let (mut stored_digest, stored_generation, stored_table) =
            state.map_err(CycleError::Read)?;
        view.handoff
            .observe(reports, self.store.keys())
            .map_err(CycleError::Read)?;
        let mut generation_floor = self.generation_floor.max(stored_generation);
        let (mut failures, mut transitions, mut review) =
            (Vec::new(), Vec::new(), Review::default());
        let listed = listed_entries(&inputs);
        // Every refusal counts for the handoff (a member that deregistered
        // and exited still owes its units); liveness and the mass-failure
        // guard count listed members only.
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
            for r in &refused {
                if let Err(f) = &r.result {
                    self.metrics.ping_failed(f.reason());
                }
            }
            // The pings were sent when the connections closed (the
            // executor's probes); this span shows their verdicts in the cycle.
            let probes = info_span!(
                "refused",
                members = refused.len(),
                otel.status_code = Empty,
                otel.status_message = Empty
            );
            mark_error(
                &probes,
                &format!(
                    "{} members refused after their connection ended",
                    refused.len()
                ),
            );
            review = probes.in_scope(|| {
                self.observe_round(&mut view, &inputs, &listed, &refused, &was_live, false)
            });
            transitions = refused
                .iter()
                .filter(|r| view.liveness.is_live(&r.member) != was_live.contains(&r.member))
                .map(|r| (r.member.clone(), view.liveness.is_live(&r.member)))
                .collect();
            failures = refused
                .into_iter()
                .filter_map(|r| r.result.err().map(|e| (r.member, e)))
                .collect();
        }
        let write = self
            .settle(
                &inputs,
                &mut view,
                &mut stored_digest,
                &mut generation_floor,
                stored_generation,
                stored_table.map(Arc::new).or(held_table),
            )
            .await;
        let groups = if failures.is_empty() {
            view.groups.clone()
        } else {
            let groups = group_counts(&inputs, &view);
            record_counts(&inputs, &mut view, &groups, &write);
            groups
        };
        Ok(CycleReport {
            epoch: self.grant.epoch,
            inputs,
            failures,
            view,
            transitions,
            review,
            groups,
            write,
            generation_floor,
            forgotten: Vec::new(),
            in_flight: std::mem::take(&mut self.carried),
            in_flight_members: std::mem::take(&mut self.carried_members),
        })
    }
}

/// Records a cycle's counts on its span, and logs (on the span) each group
/// whose counts changed since the last cycle, not every cycle.
fn record_counts(
    inputs: &Inputs,
    view: &mut HolderView,
    groups: &[(String, usize, usize)],
    write: &Write,
) {
    let cycle = Span::current();
    cycle.record("members", groups.iter().map(|g| g.1 + g.2).sum::<usize>());
    cycle.record("live", groups.iter().map(|g| g.1).sum::<usize>());
    cycle.record("failed", groups.iter().map(|g| g.2).sum::<usize>());
    cycle.record("units", inputs.units.len());
    cycle.record(
        "changed",
        matches!(
            write,
            Write::Written {
                generation: Some(_)
            }
        ),
    );
    for (group, live, failed) in groups {
        if !view
            .groups
            .iter()
            .any(|g| g.0 == *group && (g.1, g.2) == (*live, *failed))
        {
            tracing::info!(group, live, failed, "group");
        }
    }
    view.groups = groups.to_vec();
}

/// Every entry of the lists, members and malformed ones: what liveness keeps.
fn listed_entries(inputs: &Inputs) -> Vec<String> {
    inputs
        .members()
        .chain(
            inputs
                .groups
                .iter()
                .flat_map(|g| g.malformed.iter().map(|m| m.name.as_str())),
        )
        .map(str::to_string)
        .collect()
}

/// Per group: (name, members that keep units, the other entries).
fn group_counts(inputs: &Inputs, view: &HolderView) -> Vec<(String, usize, usize)> {
    inputs
        .groups
        .iter()
        .map(|g| {
            let live = g.members.iter().filter(|m| view.keeps_units(m)).count();
            (
                g.name.clone(),
                live,
                g.members.len() + g.malformed.len() - live,
            )
        })
        .collect()
}

/// Logs what the mass-failure guard did in one cycle.
pub(super) fn log_review(review: &Review, view: &HolderView) {
    for (group, failed, live_before) in &review.episodes {
        tracing::warn!(
            group,
            failed = failed.len(),
            live_before,
            first = %failed.iter().take(LOG_FIRST).cloned().collect::<Vec<_>>().join(","),
            "mass failure: most of a group failed at once; keeping their units until another replica confirms it or -mass-failure-confirm passes"
        );
    }
    if !review.confirmed.is_empty() {
        tracing::warn!(
            confirmed = review.confirmed.len(),
            first = %review.confirmed.iter().take(LOG_FIRST).cloned().collect::<Vec<_>>().join(","),
            "mass failure confirmed: their units move"
        );
    }
    if !review.cleared.is_empty() {
        tracing::info!(
            cleared = review.cleared.len(),
            still_suspected = view.suspects.len(),
            "suspects answer again (the failure was not theirs): their units stay"
        );
    }
}

/// How many lines a burst of similar events gets before one summary line.
pub(super) const LOG_FIRST: usize = 5;

/// `kind=count` pairs, sorted, for a summary line.
pub(super) fn count_by<'a>(kinds: impl Iterator<Item = &'a str>) -> String {
    let mut counts = std::collections::BTreeMap::<&str, usize>::new();
    for k in kinds {
        *counts.entry(k).or_default() += 1;
    }
    counts
        .iter()
        .map(|(k, n)| format!("{k}={n}"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Identifies what the table depends on: the live members of each group and the
/// units (their part, [`units_key`], computed once per units list read).
/// Equal keys mean an equal table, so solving can be skipped.
fn inputs_key(inputs: &Inputs, units: u128, keeps_units: impl Fn(&str) -> bool) -> u128 {
    let mut h = Xxh3::new();
    let mut put = |tag: u8, s: &str| {
        h.update(&[tag]);
        h.update(&(s.len() as u64).to_le_bytes());
        h.update(s.as_bytes());
    };
    for g in &inputs.groups {
        put(1, &g.name);
        for m in g.members.iter().filter(|m| keeps_units(m)) {
            put(2, m);
        }
    }
    h.update(&[3]);
    h.update(&units.to_le_bytes());
    h.digest128()
}

/// The units' part of [`inputs_key`]: O(units), so computed when the units
/// list is read, on a blocking thread, never on an idle cycle.
fn units_key(units: &[String]) -> u128 {
    let mut h = Xxh3::new();
    for u in units {
        h.update(&(u.len() as u64).to_le_bytes());
        h.update(u.as_bytes());
    }
    h.digest128()
}

/// This cycle's inputs from the lists the store read: when it read none
/// (every list known unchanged at the versions of `cache`), the cached
/// inputs as they are, without touching a unit; else rebuilt on a blocking
/// thread (normalising is O(entries): a million units take a good part of a
/// second, which must not stall the runtime's workers), normalising again
/// only the lists that were read.
async fn assemble(
    cache: Option<ListCache>,
    groups: Vec<ListRead>,
    units: ListRead,
) -> Result<ListCache, CycleError> {
    if let Some(c) = &cache
        && unchanged(c, &groups, &units)
    {
        return Ok(cache.expect("checked above"));
    }
    tokio::task::spawn_blocking(move || rebuild(cache, groups, units))
        .await
        .expect("normalising the inputs does not panic")
}

/// Whether `groups` and `units` are exactly the lists `cache` was made of,
/// none of them read again.
fn unchanged(cache: &ListCache, groups: &[ListRead], units: &ListRead) -> bool {
    units.entries.is_none()
        && units.version == cache.units_version
        && groups.len() == cache.groups.len()
        && groups
            .iter()
            .zip(&cache.groups)
            .all(|(g, (key, version, _))| {
                g.entries.is_none() && g.key == *key && g.version == *version
            })
}

/// [`assemble`]'s work when some list was read.
fn rebuild(
    cache: Option<ListCache>,
    groups: Vec<ListRead>,
    units: ListRead,
) -> Result<ListCache, CycleError> {
    // The store reports a list unchanged only at a version the cycle said it
    // holds, so this is a bug, not a state of Redis: fail the cycle (the last
    // table stays) and the next one reads everything.
    let missing = |key: &str| {
        CycleError::Read(StoreError::Reply {
            op: "read lists",
            detail: format!("list {key:?} reported unchanged at a version not held"),
        })
    };
    let mut raw_groups = Vec::with_capacity(groups.len());
    for g in groups {
        let entries = match g.entries {
            Some(e) => Arc::new(e),
            None => cache
                .as_ref()
                .and_then(|c| {
                    c.groups
                        .iter()
                        .find(|(k, v, _)| *k == g.key && *v == g.version)
                })
                .map(|(_, _, e)| Arc::clone(e))
                .ok_or_else(|| missing(&g.key))?,
        };
        raw_groups.push((g.key, g.version, entries));
    }
    let (unit_list, mut rejections, units_hash) = match units.entries {
        Some(entries) => {
            let (list, rejections) = inputs::normalize_units(&units.key, &entries);
            // A units list whose every entry is invalid is a broken producer,
            // not "no work": keep the last table (an empty list still means
            // no units).
            if !entries.is_empty() && list.is_empty() {
                return Err(CycleError::Inputs {
                    key: units.key,
                    entries: entries.len(),
                    first: rejections.first().map(ToString::to_string),
                });
            }
            // The raw list can be as big as the inputs: freed before solving.
            drop(entries);
            let hash = units_key(&list);
            (list, rejections, hash)
        }
        None => {
            // Only a services list changed: the units are the last ones.
            let c = cache
                .as_ref()
                .filter(|c| c.units_version == units.version)
                .ok_or_else(|| missing(&units.key))?;
            let rejections = c
                .inputs
                .rejections
                .iter()
                .filter(|r| matches!(r, Rejection::Unit { .. }))
                .cloned()
                .collect();
            (c.inputs.units.clone(), rejections, c.units_key)
        }
    };
    let lists: Vec<(&str, &[Vec<u8>])> = raw_groups
        .iter()
        .map(|(k, _, e)| (k.as_str(), e.as_slice()))
        .collect();
    let (groups, group_rejections) = inputs::normalize_groups(&lists);
    rejections.extend(group_rejections);
    Ok(ListCache {
        groups: raw_groups,
        units_version: units.version,
        inputs: Arc::new(Inputs {
            groups,
            units: unit_list,
            rejections,
        }),
        units_key: units_hash,
    })
}

/// Decodes `{T}:transit`: an entry whose field names a unit is in transit as
/// stored, or, when its value does not decode, from members nobody knows,
/// waiting the longest any member may ask for (it only counts from `now`).
/// The unreadable ones are returned, excerpted, for the log; those whose
/// field names no unit are dropped.
fn decode_transits(
    raw: Vec<(String, String)>,
    settings: &handoff::Settings,
    now: Instant,
    now_ms: u64,
) -> (Transits, Vec<String>) {
    let mut transit = Transits::new();
    let mut unreadable = Vec::new();
    for (field, value) in raw {
        let Some((group, unit)) = handoff::parse_transit_field(&field) else {
            unreadable.push(inputs::excerpt(field.as_bytes()));
            continue;
        };
        let t = match Transit::decode(&value, now) {
            Some(mut t) => {
                t.cap_waits(settings.longest_wait());
                t
            }
            None => {
                unreadable.push(format!(
                    "{}={}",
                    inputs::excerpt(field.as_bytes()),
                    inputs::excerpt(value.as_bytes())
                ));
                Transit::unknown(settings, now, now_ms)
            }
        };
        transit
            .entry(group.to_string())
            .or_default()
            .insert(unit.to_string(), t);
    }
    (transit, unreadable)
}

/// Marks a span failed, for the trace view (`otel.status_code` is read by
/// tracing-opentelemetry).
pub(super) fn mark_error(span: &Span, message: &str) {
    span.record("otel.status_code", "ERROR");
    span.record("otel.status_message", message);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(key: &str, version: u64, entries: Option<&[&str]>) -> ListRead {
        ListRead {
            key: key.into(),
            version,
            entries: entries.map(|e| e.iter().map(|s| s.as_bytes().to_vec()).collect()),
        }
    }

    /// What `inputs::normalize` makes of the same lists read in full.
    fn normalized(groups: &[(&str, &[&str])], units: &[&str]) -> Inputs {
        let bytes = |v: &[&str]| v.iter().map(|s| s.as_bytes().to_vec()).collect();
        inputs::normalize(&inputs::RawInputs {
            groups: groups
                .iter()
                .map(|(k, v)| (k.to_string(), bytes(v)))
                .collect(),
            units_key: "u".into(),
            units: bytes(units),
        })
    }

    #[test]
    fn lists_known_unchanged_reuse_the_inputs_and_the_rest_is_normalised_again() {
        let (g1, g2, u) = (
            ["a:1", "b:1", "bad"].as_slice(),
            ["c:1", "a:1"].as_slice(),
            ["x", "y", "has,comma", "x"].as_slice(),
        );
        let first = rebuild(
            None,
            vec![list("s1", 1, Some(g1)), list("s2", 2, Some(g2))],
            list("u", 3, Some(u)),
        )
        .unwrap();
        assert_eq!(*first.inputs, normalized(&[("s1", g1), ("s2", g2)], u));
        assert_eq!(first.units_key, units_key(&first.inputs.units));

        // Nothing read: the same inputs, not a copy.
        let groups = vec![list("s1", 1, None), list("s2", 2, None)];
        let units = list("u", 3, None);
        assert!(unchanged(&first, &groups, &units));
        let same = rebuild(Some(first.clone()), groups, units).unwrap();
        assert_eq!(same.inputs, first.inputs);

        // A services list changed: the units (and their rejections) carry over.
        let g2b = ["c:1", "d:1"].as_slice();
        let groups = vec![list("s1", 1, None), list("s2", 4, Some(g2b))];
        assert!(!unchanged(&first, &groups, &list("u", 3, None)));
        let next = rebuild(Some(first.clone()), groups, list("u", 3, None)).unwrap();
        assert_eq!(*next.inputs, normalized(&[("s1", g1), ("s2", g2b)], u));
        assert_eq!(next.units_key, first.units_key);

        // The units changed: the cached services lists are used as they were.
        let ub = ["z"].as_slice();
        let groups = vec![list("s1", 1, None), list("s2", 4, None)];
        let after = rebuild(Some(next.clone()), groups, list("u", 5, Some(ub))).unwrap();
        assert_eq!(*after.inputs, normalized(&[("s1", g1), ("s2", g2b)], ub));
        assert_ne!(after.units_key, next.units_key);

        // A version the cache does not hold is a failed cycle, never a guess.
        let missing = rebuild(
            Some(after.clone()),
            vec![list("s1", 9, None), list("s2", 4, None)],
            list("u", 5, None),
        );
        assert!(matches!(missing, Err(CycleError::Read(_))));
        let missing = rebuild(None, vec![], list("u", 5, None));
        assert!(matches!(missing, Err(CycleError::Read(_))));

        // A units list of nothing but invalid entries keeps the last table.
        let bad = rebuild(None, vec![], list("u", 6, Some(&["a,b", ""])));
        assert!(matches!(bad, Err(CycleError::Inputs { entries: 2, .. })));
        // An empty one means no units.
        let empty = rebuild(None, vec![], list("u", 7, Some(&[]))).unwrap();
        assert!(empty.inputs.units.is_empty());
    }
}
