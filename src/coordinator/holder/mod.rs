//! The holder: what a replica does while it holds the lease, one cycle at
//! a time, and what it keeps between cycles. It decides nothing about the
//! lease (the machine does); a cycle ends in a [`CycleReport`] that the
//! executor feeds back to the machine.
//!
//! - `cycle`: the cycle task: it does what the core asks (reads, a round
//!   of pings, the solve and the digest off the runtime, the fenced write),
//!   with its spans and metrics, and decides nothing;
//! - `core`: the holder's decisions, pure and tested: the cycle as a state
//!   machine (`step`: `CycleCore::step(outcome) -> Ready`), what it makes of
//!   Redis' state when it cannot plan from its own ledger (`inherit`), of a
//!   round of pings (`observe`), the plan and whether to write, what a
//!   write's outcome makes of its view, and whom `-forget-after` removes
//!   (`forget`);
//! - `pings`: collecting a round of pings in phases (`core::round` decides
//!   what each phase waits for);
//! - `solve`: the desired table, memoised by the key of what it depends on;
//! - `lists`: the inputs made of the lists, reused while no list changed;
//! - `warm`: a standby's view prepared ahead of a holding;
//! - `handoff`: what the holder keeps of the handoff between cycles.
//!
//! Guarantee: a cycle that cannot read what it must know writes nothing
//! (the last table stays), and every write is fenced by the lease in Redis.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::time::Instant;

use tracing::Span;

use super::machine::{CycleOutcome, CycleSummary};
use crate::core::inputs::Inputs;
use crate::core::liveness::{HealthChanges, Liveness};
use crate::core::quarantine::Quarantine;
use crate::core::suspicion::{Review, Suspect, SuspectChanges};
use crate::core::table::Moves;
use crate::edge::grpc::PingFailure;
use crate::error::StoreError;

mod core;
mod cycle;
mod handoff;
mod lists;
mod pings;
mod solve;
mod warm;

pub(super) use core::{Excluded, KnownCosts};
pub(super) use cycle::CycleContext;
pub(super) use handoff::{Confirm, HandoffState, Refusal};
pub(super) use lists::ListCache;
pub(super) use pings::InFlight;
pub(super) use solve::{AlignedCosts, Memo, SolveSettings};
pub(super) use warm::{Preparer, WarmView};

/// The holder's view of the members, handed to each cycle and back.
#[derive(Clone)]
pub(in crate::coordinator) struct HolderView {
    pub(in crate::coordinator) liveness: Liveness,
    /// Liveness changes not yet persisted (a failed write is retried with the next).
    pub(in crate::coordinator) unsaved: HealthChanges,
    /// Members of a mass failure not yet confirmed: their units stay.
    pub(in crate::coordinator) suspects: BTreeMap<String, Suspect>,
    pub(in crate::coordinator) unsaved_suspects: SuspectChanges,
    /// Members a round failed alone (not suspected), with the unix ms of
    /// that round, kept for `Guard::together_ms`: a later round of the same
    /// burst counts them (`suspicion::review`).
    pub(in crate::coordinator) recent_failures: BTreeMap<String, u64>,
    /// The table the solver wants (desired), memoised.
    pub(in crate::coordinator) memo: Option<Memo>,
    /// Per group (name, live, failed) as the last cycle counted it.
    pub(in crate::coordinator) groups: Vec<(String, usize, usize)>,
    pub(in crate::coordinator) handoff: HandoffState,
    /// The lists as last read, and the inputs made of them.
    pub(in crate::coordinator) lists: Option<ListCache>,
    /// The unit costs as last read (`-balance cost`).
    pub(in crate::coordinator) costs: KnownCosts,
    /// Those costs in the order of the units list, as last solved with.
    pub(in crate::coordinator) aligned_costs: Option<AlignedCosts>,
    /// Each live member: since when it is live, by this holder's clock
    /// (`-join-delay`).
    pub(in crate::coordinator) joined: HashMap<String, Instant>,
    /// The members live for less than `-join-delay`, as the last full
    /// cycle judged: those of them without units in the table the solve
    /// starts from wait (`holder::solve`).
    pub(in crate::coordinator) waiting: Arc<BTreeSet<String>>,
    /// The highest generation a write of this holding was confirmed to
    /// write: members may have read it even if Redis lost it since (a
    /// failover to a replica that lagged), so the pings never ask less.
    pub(in crate::coordinator) confirmed_generation: u64,
    /// Poison units: deaths counted, quarantined and held units.
    pub(in crate::coordinator) quarantine: Quarantine,
    /// The inputs without the units given to nobody, as last made.
    pub(in crate::coordinator) excluded: Option<Excluded>,
    /// Unreadable fields of `{T}:quarantine` last logged, and the last read
    /// error, so that each is logged once.
    pub(in crate::coordinator) bad_quarantine: usize,
    pub(in crate::coordinator) quarantine_error: Option<String>,
}

impl HolderView {
    /// A view that knows nothing yet.
    fn empty(failure_threshold: u32) -> HolderView {
        HolderView {
            liveness: Liveness::new(failure_threshold),
            unsaved: HealthChanges::default(),
            suspects: BTreeMap::new(),
            unsaved_suspects: SuspectChanges::default(),
            recent_failures: BTreeMap::new(),
            memo: None,
            lists: None,
            groups: Vec::new(),
            handoff: HandoffState::default(),
            costs: KnownCosts::default(),
            aligned_costs: None,
            joined: HashMap::new(),
            waiting: Arc::default(),
            confirmed_generation: 0,
            quarantine: Quarantine::default(),
            excluded: None,
            bad_quarantine: 0,
            quarantine_error: None,
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

    /// Notes the members that became live (`-join-delay`), from `now`, and
    /// those live for less than the delay. Members no longer live are
    /// forgotten, so a member that comes back is new again. A new holding
    /// counts every member from its own first cycle: whether one waits is
    /// decided at the solve, by whether it holds units in the table the
    /// solve starts from (`holder::solve`), so that a member with units
    /// never waits and a newcomer without them waits across a failover.
    pub(in crate::coordinator) fn note_joins(
        &mut self,
        inputs: &Inputs,
        now: Instant,
        join_delay: std::time::Duration,
    ) {
        if join_delay.is_zero() {
            if !self.waiting.is_empty() {
                self.waiting = Arc::default();
            }
            return;
        }
        let live: HashSet<&str> = inputs.members().filter(|m| self.keeps_units(m)).collect();
        self.joined.retain(|m, _| live.contains(m.as_str()));
        for m in live {
            self.joined.entry(m.to_string()).or_insert(now);
        }
        let waiting: BTreeSet<String> = self
            .joined
            .iter()
            .filter(|(_, since)| now < **since + join_delay)
            .map(|(m, _)| m.clone())
            .collect();
        if *self.waiting != waiting {
            self.waiting = Arc::new(waiting);
        }
    }

    /// Whether `member` gets units: live, or suspected of a mass failure that
    /// nobody confirmed yet.
    pub(in crate::coordinator) fn keeps_units(&self, member: &str) -> bool {
        self.liveness.is_live(member) || self.suspects.contains_key(member)
    }
}

/// The last solve that changed the table: its moves against the minimum,
/// or `None` where the solve does not count them (ring mode without a move
/// limit: `{T}:meta` then says `uncounted`, so that no older count passes
/// for this change).
#[derive(Clone, Debug, Default)]
pub(in crate::coordinator) struct LastChange {
    pub(in crate::coordinator) moves: Option<Moves>,
    /// Not written to `{T}:meta` yet.
    pub(in crate::coordinator) unsaved: bool,
}

pub(in crate::coordinator) struct CycleReport {
    pub(in crate::coordinator) epoch: u64,
    pub(in crate::coordinator) inputs: Arc<Inputs>,
    pub(in crate::coordinator) failures: Vec<(String, PingFailure)>,
    /// The view after this cycle (unsaved changes are empty after a write).
    pub(in crate::coordinator) view: HolderView,
    pub(in crate::coordinator) transitions: Vec<(String, bool)>,
    /// What the mass-failure guard did this cycle.
    pub(in crate::coordinator) review: Review,
    /// Per group: (name, live, failed).
    pub(in crate::coordinator) groups: Vec<(String, usize, usize)>,
    pub(in crate::coordinator) write: Write,
    pub(in crate::coordinator) generation_floor: u64,
    /// (member, list) pairs removed by `-forget-after`.
    pub(in crate::coordinator) forgotten: Vec<(String, String)>,
    /// Pings still running (hung members): collected by the next cycle.
    pub(in crate::coordinator) in_flight: InFlight,
    pub(in crate::coordinator) in_flight_members: HashSet<String>,
    /// The cycle decided on the liveness it inherited, pinging nobody.
    pub(in crate::coordinator) unverified: bool,
}

thread_local! {
    /// Set by the simulation on its one thread: CPU-bound steps run inline
    /// there, so that no other thread's timing decides what runs next.
    static INLINE_BLOCKING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Runs CPU-bound `f` (a solve, a digest, the inputs' normalisation) on
/// tokio's blocking pool, off the runtime's threads; inline on a thread
/// that asked for it ([`run_inline`]).
pub(in crate::coordinator) async fn blocking<R: Send + 'static>(
    f: impl FnOnce() -> R + Send + 'static,
) -> R {
    if INLINE_BLOCKING.with(std::cell::Cell::get) {
        return f();
    }
    tokio::task::spawn_blocking(f)
        .await
        .expect("the holder's CPU-bound steps do not panic")
}

/// Up to this many units (or [`INLINE_BYTES`] of table), a CPU-bound step
/// runs inline on the cycle's task: the hop to the blocking pool and back
/// wakes a thread each way, which on a loaded 2-core host costs more than
/// solving or digesting a table this small (BENCHMARKS.md, "A lone death
/// without the gathering window"). Above it, the step could stall the
/// runtime's workers (renewals, pings) for milliseconds.
pub(in crate::coordinator) const INLINE_UNITS: usize = 20_000;
/// [`INLINE_UNITS`] of about 12-byte names, for steps sized by table bytes.
pub(in crate::coordinator) const INLINE_BYTES: usize = 256 * 1024;

/// [`blocking`], or inline when the caller found the step `small`
/// ([`INLINE_UNITS`], [`INLINE_BYTES`]).
pub(in crate::coordinator) async fn blocking_unless<R: Send + 'static>(
    small: bool,
    f: impl FnOnce() -> R + Send + 'static,
) -> R {
    if small {
        return f();
    }
    blocking(f).await
}

/// Makes [`blocking`] run inline on this thread (the simulation's).
#[cfg(any(test, feature = "simulation"))]
pub(in crate::coordinator) fn run_inline() {
    INLINE_BLOCKING.with(|c| c.set(true));
}

/// What a finished cycle tells the machine: `None` for a cycle of another
/// holding (`epoch` is the current one's); `me` is this replica's id (its
/// own suspicions ask another replica to look).
pub(in crate::coordinator) fn summarize(
    report: &Result<CycleReport, CycleError>,
    epoch: u64,
    me: &str,
) -> Option<CycleSummary> {
    let r = match report {
        Ok(r) => r,
        Err(_) => {
            return Some(CycleSummary {
                epoch,
                outcome: CycleOutcome::Skipped,
                generation_floor: 0,
                own_suspicions: false,
                next_release: None,
                verify_now: false,
            });
        }
    };
    if r.epoch != epoch {
        return None;
    }
    let release = r.view.handoff.last.next_release;
    let (outcome, next_release) = match &r.write {
        Write::Unchanged => (CycleOutcome::Unchanged, release),
        Write::NotActing => (CycleOutcome::NotActing, release),
        Write::Recovering => (CycleOutcome::Unchanged, release),
        Write::Written { generation } => (
            CycleOutcome::Written {
                table: generation.is_some(),
            },
            release,
        ),
        Write::Fenced(_) => (CycleOutcome::Fenced, release),
        Write::Failed(_) | Write::Unknown(_) | Write::Outdated { .. } => {
            (CycleOutcome::Failed, None)
        }
    };
    Some(CycleSummary {
        epoch,
        outcome,
        generation_floor: r.generation_floor,
        own_suspicions: r.view.suspects.values().any(|s| s.replica == me),
        next_release,
        verify_now: r.unverified,
    })
}

/// Why a cycle did not produce a table; either way the last one stays.
#[derive(Debug, thiserror::Error)]
pub(in crate::coordinator) enum CycleError {
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
    pub(in crate::coordinator) fn kind(&self) -> &'static str {
        match self {
            CycleError::Read(e) | CycleError::Unreadable(e) => e.kind(),
            CycleError::Inputs { .. } => "invalid_input",
            CycleError::NotReady => "not_ready",
        }
    }
}

/// What became of a cycle's write.
pub(in crate::coordinator) enum Write {
    /// Nothing changed: nothing written.
    Unchanged,
    /// The lease is past its renew deadline locally: nothing written.
    NotActing,
    /// A recovery from possibly lost state waits for members to state what
    /// they work on: nothing planned, nothing written.
    Recovering,
    Written {
        generation: Option<u64>,
    },
    /// Redis rejected it: the lease moved on.
    Fenced(String),
    /// Redis refused it before writing anything: something wrote since the
    /// plan's state was read (`version` is `{T}:meta`'s now), or a rows
    /// write's base is not what Redis holds (`differs`: the key and field,
    /// an edit). The next cycle reads Redis again before it plans.
    Outdated {
        version: u64,
        differs: Option<String>,
    },
    /// Nothing written: a read it needed failed, or Redis refused a stored
    /// value before writing anything.
    Failed(StoreError),
    /// It may or may not have been applied (an error or a timeout after it
    /// was sent, or too few replicas acknowledged it): the next cycle reads
    /// Redis again before it plans.
    Unknown(StoreError),
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
pub(in crate::coordinator) fn log_review(review: &Review, view: &HolderView) {
    for (group, failed, live_before) in &review.episodes {
        tracing::warn!(
            group,
            failed = failed.len(),
            live_before,
            first = %first_few(failed.iter(), ","),
            "mass failure: most of a group failed at once; keeping their units until another replica confirms it or -mass-failure-confirm passes"
        );
    }
    if !review.confirmed.is_empty() {
        tracing::warn!(
            confirmed = review.confirmed.len(),
            first = %first_few(&review.confirmed, ","),
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
pub(in crate::coordinator) const LOG_FIRST: usize = 5;

/// The first [`LOG_FIRST`] of `items`, joined by `sep`, for a summary line.
pub(in crate::coordinator) fn first_few<T: std::fmt::Display>(
    items: impl IntoIterator<Item = T>,
    sep: &str,
) -> String {
    let first: Vec<String> = items
        .into_iter()
        .take(LOG_FIRST)
        .map(|x| x.to_string())
        .collect();
    first.join(sep)
}

/// `kind=count` pairs, sorted, for a summary line.
pub(in crate::coordinator) fn count_by<'a>(kinds: impl Iterator<Item = &'a str>) -> String {
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

/// Marks a span failed, for the trace view (`otel.status_code` is read by
/// tracing-opentelemetry).
pub(in crate::coordinator) fn mark_error(span: &Span, message: &str) {
    span.record("otel.status_code", "ERROR");
    span.record("otel.status_message", message);
}
