//! What one replica knows about itself and the distribution, as its
//! coordinator last saw it: for `/readyz`, `/healthz`, metrics, status output
//! and embedders (`Distributor::status`). A plain record, written only by the
//! coordinator.

use std::time::Duration;

use std::time::Instant;

use crate::core::census::CensusView;

/// Whether this replica currently acts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Role {
    #[default]
    Standby,
    Holder,
}

/// How a crashed holder would be replaced, as this replica last saw it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Takeover {
    /// Not known yet (no holder seen, no answer from Redis yet).
    #[default]
    Unknown,
    /// As soon as the holder's lease connection closes (checked every
    /// `Timing::takeover_check`).
    Fast,
    /// Only when the lease expires, for this reason (`CLIENT` not permitted,
    /// the holder records no connection, ...).
    Ttl(String),
}

impl std::fmt::Display for Takeover {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Takeover::Unknown => f.write_str("unknown"),
            Takeover::Fast => f.write_str("fast"),
            Takeover::Ttl(why) => write!(f, "ttl ({why})"),
        }
    }
}

/// What a replica knows, for status output and embedders.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Status {
    pub replica_id: String,
    pub role: Role,
    /// This replica's epoch while it holds the lease, else the last one it saw.
    pub epoch: u64,
    /// The holder as last seen (this replica's id while it holds).
    pub holder: Option<String>,
    pub census: Option<CensusView>,
    /// Highest table generation seen.
    pub generation: u64,
    /// Unix ms of this replica's last table write.
    pub last_write_ms: Option<u64>,
    /// Per group: (name, live, failed), from the last cycle.
    pub groups: Vec<(String, usize, usize)>,
    pub units: usize,
    pub invalid_inputs: usize,
    /// Invalid inputs of the last cycle by kind (`unit`, `address`, `duplicate_member`).
    pub invalid_by_kind: Vec<(&'static str, usize)>,
    /// When Redis last answered, for readiness.
    pub redis_ok_at: Option<Instant>,
    /// When the coordinator's loop last turned, for health.
    pub heartbeat: Option<Instant>,
    pub cycles: u64,
    /// Cycles that could not read their inputs (the table was kept).
    pub failed_cycles: u64,
    /// The last error of a cycle, cleared by the next good one.
    pub last_error: Option<String>,
    pub table_writes: u64,
    pub fenced_writes: u64,
    pub lease_acquisitions: u64,
    /// Members kept in the table although they fail, as suspects of a mass
    /// failure that is not confirmed yet.
    pub suspects: usize,
    /// Listed members whose pings have failed for `Timing::failing_long`
    /// or more (holder only).
    pub failing_long: usize,
    /// Why no replica can hold the lease, when its key is not a replica's
    /// (no TTL, another type): seen by the last acquisition attempt.
    pub lease_problem: Option<String>,
    /// The handoff, as the holder's last cycle saw it.
    pub handoff: HandoffStatus,
    /// Whether a crash of the holder is noticed at once or after the TTL.
    pub takeover: Takeover,
    /// Why this replica holds the lease but does not act: what the last
    /// holder left (or Redis' state after a write of unknown outcome) could
    /// not be read; it retries every poll interval.
    pub holding_blocked: Option<String>,
    /// While the holder recovers from handoff state Redis may have lost
    /// (`core::handoff::Recovery`): its tag and why.
    pub recovering: Option<String>,
    /// With `-balance cost`, as the holder's last cycle saw it.
    pub balance: Option<BalanceStatus>,
    /// The operator's controls in force, as the holder's last cycle read them.
    pub controls: ControlsStatus,
    /// Poison units (`core::quarantine`), as the holder's last cycle knew them.
    pub quarantine: QuarantineStatus,
}

/// Poison units (`core::quarantine`), counted.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct QuarantineStatus {
    /// Units given to nobody until released (`{T}:quarantine`).
    pub quarantined: usize,
    /// Units one death short of quarantine: held, trials included.
    pub held: usize,
    /// Held units placed now, each alone on a member, to see whether it
    /// dies.
    pub trials: usize,
    /// Units quarantined by this replica since it started.
    pub quarantined_here: u64,
    /// Fields of `{T}:quarantine` that name no unit, skipped.
    pub unreadable: usize,
}

/// The operator's controls in force (`core::controls`), counted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ControlsStatus {
    pub paused: bool,
    pub cordoned: usize,
    pub drained: usize,
    pub pinned: usize,
    /// Unreadable entries of `{T}:controls`, skipped.
    pub unreadable: usize,
}

impl ControlsStatus {
    /// The metric's label values (`distributor_controls{kind}`), in order.
    pub const KINDS: [&'static str; 5] = ["paused", "cordoned", "drained", "pinned", "unreadable"];

    /// Each kind's count, in [`Self::KINDS`]' order.
    pub fn counts(&self) -> [usize; 5] {
        [
            usize::from(self.paused),
            self.cordoned,
            self.drained,
            self.pinned,
            self.unreadable,
        ]
    }

    pub fn of(c: &crate::core::controls::Controls, unreadable: usize) -> ControlsStatus {
        use crate::core::controls::MemberControl;
        ControlsStatus {
            paused: c.paused(),
            cordoned: c.with(MemberControl::Cordon).count(),
            drained: c.with(MemberControl::Drain).count(),
            pinned: c.pins.len(),
            unreadable,
        }
    }
}

/// The cost balance as the holder's last cycle saw it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BalanceStatus {
    /// The loads of the table the holder solved (`None` before a solve).
    pub loads: Option<std::sync::Arc<crate::core::balance::LoadSummary>>,
    /// Unreadable `{T}:costs` entries, skipped.
    pub invalid_costs: usize,
    /// `{T}:loads` fields left out for their date (`core::load`).
    pub stale_loads: usize,
    /// Why `{T}:costs` could not be read, while that lasts (the costs
    /// known are used meanwhile).
    pub costs_problem: Option<String>,
}

/// The handoff as the holder's last cycle saw it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HandoffStatus {
    /// Units revoked and not granted to their next owner yet.
    pub in_transit: usize,
    /// When the oldest of them was revoked (wall clock, unix ms).
    pub oldest_transit_ms: Option<u64>,
    /// Members that have not released units revoked from them.
    pub owing: usize,
    /// Live members that reported draining.
    pub draining: usize,
    /// Newcomers that wait (`-join-delay`) before taking units from live
    /// members.
    pub waiting: usize,
    /// Members that speak the protocol (a readable `{T}:members` entry).
    pub acknowledging: usize,
    /// Unreadable `{T}:members` entries.
    pub invalid_reports: usize,
}

/// What `distributor status` and `distributor table` show, read in one go.
#[derive(Debug, Clone, Default)]
pub struct Overview {
    pub meta: std::collections::BTreeMap<String, String>,
    pub lease_pttl: Option<Duration>,
    /// The lease's token (`{T}:lease`), to tell whether `meta.holder_conn`
    /// describes the current holding.
    pub lease_token: Option<String>,
    pub epoch: u64,
    pub replicas: std::collections::BTreeMap<String, String>,
    pub liveness: std::collections::BTreeMap<String, String>,
    pub table: std::collections::BTreeMap<String, String>,
    pub units: Vec<Vec<u8>>,
    pub groups: Vec<(String, Vec<Vec<u8>>)>,
    /// `{T}:members`: the members' own reports, undecoded.
    pub reports: std::collections::BTreeMap<String, String>,
    /// `{T}:transit`: units in transit, undecoded.
    pub transit: std::collections::BTreeMap<String, String>,
    /// `{T}:weights`: the operator's weight overrides, undecoded.
    pub weights: std::collections::BTreeMap<String, String>,
    /// `{T}:costs`: the unit costs, undecoded.
    pub costs: std::collections::BTreeMap<String, String>,
    /// `{T}:loads`: the members' measured loads, undecoded.
    pub loads: std::collections::BTreeMap<String, String>,
    /// `{T}:controls`: the operator's controls, undecoded.
    pub controls: std::collections::BTreeMap<String, String>,
    /// `{T}:quarantine`: quarantined units and their records, undecoded.
    pub quarantine: std::collections::BTreeMap<String, String>,
}

impl Overview {
    /// A member's capacity weight as the holder takes it: the operator's
    /// override when readable, else its report's, else 1.
    pub fn weight(&self, member: &str) -> u32 {
        use crate::core::handoff::{MemberReport, decode_weight_override};
        self.weights
            .get(member)
            .and_then(|v| decode_weight_override(v))
            .or_else(|| {
                self.reports
                    .get(member)
                    .and_then(|v| MemberReport::decode(v))
                    .map(|r| r.weight)
            })
            .unwrap_or(1)
    }
}
