//! What a member's ownership hands its caller: the fencing token a unit
//! was acquired with, a holding (its tenure), why a unit is taken, the
//! steps to run and what a read did. Pure data.

use std::time::Instant;

use crate::core::handoff::{RedisConnection, RunId};

/// The generation of the table at which a member acquired a unit. It grows
/// from one owner of a unit to the next (every move is a new table write), so
/// a downstream system that remembers the highest token it saw per unit can
/// refuse a late write of an earlier owner.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct FencingToken(pub u64);

impl FencingToken {
    /// Whether a request routed by a copy of the table at generation
    /// `routed_by` (a `Lookup`'s) was routed to the holding this token
    /// numbers: the copy is at least as new as the write that granted it. An
    /// older copy may have named another owner, or this member's earlier
    /// holding.
    pub fn admits_route(self, routed_by: u64) -> bool {
        routed_by >= self.0
    }
}

impl std::fmt::Display for FencingToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

/// One holding of a unit: the unit and the token it was acquired with.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Tenure {
    pub unit: String,
    pub token: FencingToken,
}

/// Why a unit is taken from the member.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Revocation {
    /// The table no longer has it in this member's row: it moves to another
    /// member (or was removed from the list). The holder gives it to the next
    /// owner only once this revocation completed and was reported, or the
    /// member's deadline passed.
    Moved,
    /// The same, while this member drains.
    Draining,
    /// The hold ended at `ended` (reads or pings stopped for the deadline, or
    /// the process was paused): the next owner may already have it. Stop at
    /// once.
    Fenced { ended: Instant },
    /// The member stops: a shutdown, a drain that timed out, or a dropped
    /// `Member`.
    Shutdown,
}

impl Revocation {
    /// A short label for logs and events: `moved`, `draining`, `fenced`,
    /// `shutdown`.
    pub fn reason(&self) -> &'static str {
        match self {
            Revocation::Moved => "moved",
            Revocation::Draining => "draining",
            Revocation::Fenced { .. } => "fenced",
            Revocation::Shutdown => "shutdown",
        }
    }
}

/// Work for the caller, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Stop these units; call [`Ownership::revoked`](super::Ownership::revoked) once they are stopped.
    Revoke { units: Vec<Tenure>, why: Revocation },
    /// Start these units: they are owned from now on.
    Acquire { units: Vec<Tenure> },
    /// These units are still being stopped, and their hold ended at `ended`:
    /// the next owner may start them now (log it loudly).
    Overran { units: Vec<Tenure>, ended: Instant },
}

/// What a read did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadOutcome {
    /// Processed (a new generation, or the same one again).
    Processed,
    /// A lower generation than the last processed one: ignored (see the
    /// module documentation).
    Stale { processed: u64 },
    /// Made on another Redis connection than the last written report names
    /// (`named`), while units are owned or stopping: not processed. A report
    /// naming the new connection is due; read again once it is written.
    OtherConnection { named: Option<RedisConnection> },
    /// Made on another Redis server than the one the holder's last ping
    /// names (`holder`): not processed, and not counted as contact (an old
    /// master that the sentinels no longer name, cut off from them, still
    /// answers). Find the master again.
    OtherServer { holder: RunId },
    /// Sent after a ping from the holder's server whose generation
    /// (`pinged`) is above the one read: that server lost writes since.
    /// Ignored, as a lower generation is.
    Behind { pinged: u64 },
}
