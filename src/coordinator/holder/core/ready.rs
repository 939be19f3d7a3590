//! The vocabulary between the holder core and the cycle task: what the
//! core asks for ([`Ready`]), what the task found ([`Outcome`]), the
//! clocks it passes in ([`Now`]), and what a cycle ends with
//! ([`Finished`]). Data only.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::HolderView;
use crate::coordinator::holder::lists::ListCache;
use crate::coordinator::holder::{CycleError, Write};
use crate::core::handoff;
use crate::core::history::{self, ChangeRecord, MemberStates};
use crate::core::inputs::Inputs;
use crate::core::keys::Keys;
use crate::core::quarantine::QuarantineRule;
use crate::core::suspicion::{Guard, Review};
use crate::core::table::MatchingTable;
use crate::edge::grpc::{PingFailure, PingReport};
use crate::edge::redis::{Committed, CostsRead, Inheritance, ListRead, ReportsRead, Snapshot};
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
    /// Whether the solve needs the unit costs (`-balance cost`).
    pub(in crate::coordinator::holder) reads_costs: bool,
    /// `-join-delay` in sticky count mode, else 0 (see `SolveSettings::
    /// join_delay`).
    pub(in crate::coordinator::holder) join_delay: Duration,
    /// The holding's epoch (it tags its recoveries).
    pub(in crate::coordinator::holder) epoch: u64,
    /// The run id of the Redis server this replica writes on, if known.
    pub(in crate::coordinator::holder) server: Option<handoff::RunId>,
    /// How long a recovery waits for members to state what they hold
    /// (`Timing::recovery_gather`).
    pub(in crate::coordinator::holder) recovery_gather: Duration,
    /// `-quarantine-after` and `-quarantine-window`.
    pub(in crate::coordinator::holder) quarantine: QuarantineRule,
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
    pub(in crate::coordinator::holder) fn may_act(&self) -> bool {
        self.at < self.acts_until
    }
}

/// A full cycle's read: the lists (unless unchanged since `held`), the
/// table state and the reports (unless unchanged since `reports_since`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(in crate::coordinator::holder) struct InputsRequest {
    pub(in crate::coordinator::holder) held: HashMap<String, u64>,
    pub(in crate::coordinator::holder) reports_since: Option<u64>,
    /// Read the unit costs too, unless unchanged since the version given;
    /// `None`: the solve does not need them.
    pub(in crate::coordinator::holder) costs_since: Option<Option<u64>>,
}

/// Inputs read beside a new holding's inheritance, with what was asked.
pub(in crate::coordinator::holder) struct Prefetched {
    pub(in crate::coordinator::holder) request: InputsRequest,
    pub(in crate::coordinator::holder) inputs: Result<Snapshot, StoreError>,
    pub(in crate::coordinator::holder) costs: Option<CostsRead>,
}

/// What the cycle task must do next.
pub(in crate::coordinator::holder) enum Ready {
    /// Read what the last holder left (a new holding), or Redis' state
    /// after a write of unknown outcome (`with_table`: a resync); a new
    /// holding's full cycle reads its inputs beside it (`inputs`), which
    /// the core takes if they are what it would have asked for next.
    ReadHolding {
        with_table: bool,
        inputs: Option<InputsRequest>,
    },
    ReadInputs(InputsRequest),
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
    /// Read the members' statements for the recovery running (`{T}:held`).
    ReadHeld,
    /// Solve the desired table (`holder::solve`, memoised in the view).
    Solve {
        granted: Arc<MatchingTable>,
    },
    /// Digest the next granted table, and record what it changes from
    /// the last (both CPU-bound: `core::history::record`).
    Digest {
        table: MatchingTable,
        history: HistoryBasis,
    },
    /// Write, fenced.
    Commit(CommitPlan),
    /// Remove these (list, entry) pairs, fenced (`-forget-after`).
    Forget {
        pairs: Vec<(String, Vec<u8>)>,
    },
    /// Record these quarantined units (unit, encoded record), fenced.
    RecordQuarantine {
        records: Vec<(String, String)>,
    },
    /// Write these members' last known reports back where `{T}:members`
    /// has none (Redis lost them): member, encoded report.
    RestoreReports {
        reports: Vec<(String, String)>,
    },
    Done(Box<Result<Finished, CycleError>>),
}

impl Ready {
    /// The step's name, for the cycle's step timings (`cycle steps`).
    pub(in crate::coordinator::holder) fn name(&self) -> &'static str {
        match self {
            Ready::ReadHolding { .. } => "read_holding",
            Ready::ReadInputs(_) => "read_inputs",
            Ready::AssembleLists { .. } => "assemble",
            Ready::ReadState { .. } => "read_state",
            Ready::Ping { .. } => "ping",
            Ready::ReadTable => "read_table",
            Ready::ReadHeld => "read_held",
            Ready::Solve { .. } => "solve",
            Ready::Digest { .. } => "digest",
            Ready::Commit(_) => "commit",
            Ready::Forget { .. } => "forget",
            Ready::RecordQuarantine { .. } => "record_quarantine",
            Ready::RestoreReports { .. } => "restore_reports",
            Ready::Done(_) => "done",
        }
    }
}

/// What the cycle task did, for [`CycleCore::step`].
pub(in crate::coordinator::holder) enum Outcome {
    /// Nothing yet: the cycle starts.
    Start,
    Holding(Result<Inheritance, StoreError>, Option<Box<Prefetched>>),
    /// The inputs, and the costs when asked for.
    Inputs(Result<Snapshot, StoreError>, Option<CostsRead>),
    Lists(Result<ListCache, CycleError>),
    State(
        Result<(Option<String>, u64, Option<MatchingTable>), StoreError>,
        ReportsRead,
    ),
    Pinged(Vec<PingReport>),
    Table(Result<MatchingTable, StoreError>),
    /// `{T}:held`, undecoded.
    Held(Result<Vec<(String, String)>, StoreError>),
    Solved(Arc<MatchingTable>),
    /// The digested table and what it changes.
    Digested(Arc<MatchingTable>, ChangeRecord),
    Committed(Result<Committed, StoreError>),
    Forgotten(Result<Vec<(String, Vec<u8>)>, StoreError>),
    /// The quarantine's records: how many were new to `{T}:quarantine`.
    QuarantineRecorded(Result<u64, StoreError>),
    Restored(Result<(), StoreError>),
}

/// A write, owned: the cycle task builds the store's `Commit` from it and
/// the view's unsaved changes.
pub(in crate::coordinator::holder) struct CommitPlan {
    /// The new table, when it changed.
    pub(in crate::coordinator::holder) table: Option<Arc<MatchingTable>>,
    /// The table Redis holds, digest verified, when the plan started from
    /// it: the write then carries only the rows that differ (see
    /// `edge::redis::Commit::base`). `None`: the table is written whole.
    pub(in crate::coordinator::holder) base: Option<Arc<MatchingTable>>,
    /// `{T}:transit` whole, when it changed.
    pub(in crate::coordinator::holder) transit: Option<Vec<(String, String)>>,
    pub(in crate::coordinator::holder) last_change: Option<String>,
    /// The `{T}:changes` entry, with a table write.
    pub(in crate::coordinator::holder) history: Option<Vec<(&'static str, String)>>,
    pub(in crate::coordinator::holder) generation_floor: u64,
    pub(in crate::coordinator::holder) expected_version: Option<u64>,
    pub(in crate::coordinator::holder) now_ms: u64,
    /// For the write's span: its rows, and the revocations whose grants it
    /// makes (linked).
    pub(in crate::coordinator::holder) rows: usize,
    pub(in crate::coordinator::holder) links: Vec<u64>,
}

/// What a change record compares the next table with: the table members
/// hold, and what the holder knows of its members.
pub(in crate::coordinator::holder) struct HistoryBasis {
    pub(in crate::coordinator::holder) previous: Arc<MatchingTable>,
    pub(in crate::coordinator::holder) states: MemberStates,
}

impl HistoryBasis {
    /// What `next` changes (O(table)).
    pub(in crate::coordinator::holder) fn record(&self, next: &MatchingTable) -> ChangeRecord {
        history::record(&self.previous, next, &self.states, None)
    }
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
    /// It decided on the liveness it inherited, pinging nobody (a new
    /// holding's first cycle): a full cycle should verify it at once.
    pub(in crate::coordinator::holder) unverified: bool,
}
