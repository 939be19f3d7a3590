//! Every built-in timing constant, in one value ([`Timing`]). Settings an
//! operator chooses (the lease's TTL and renewals, the poll interval, the
//! ping timeout, a member's deadline) live in the settings table and
//! `MemberOptions`; the waits of the handoff protocol (`deadline × 1.05 +
//! 100 ms`, the 300 s cap) are the protocol's and live in `core::handoff`.
//! What is here is how the code paces itself.
//!
//! Pure: durations only. Components take the value they need from
//! [`Timing::DEFAULT`] (or a `Timing` handed to them, so that a test or a
//! simulation may shorten it), never from a constant of their own.

use std::time::Duration;

/// How a replica and a member pace themselves (see the module doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timing {
    // The holder's cycle.
    /// How long a cycle waits for fast ping results before acting on them.
    /// A refused connection answers in about a millisecond; a hung member
    /// only when the ping timeout expires, which must not delay everyone
    /// else.
    pub ping_grace: Duration,
    /// The longest a first contact with a member (connection, TLS, ping)
    /// may take, when that is more than the ping timeout.
    pub first_contact: Duration,
    /// The least time between two handoff cycles started by hints.
    pub handoff_spacing: Duration,
    /// How long a holder recovering from possibly lost state waits for the
    /// members to state what they work on before it plans without those
    /// that did not (`core::handoff::Recovery`). It ends earlier once every
    /// member it knows stated; the wait is for members it does not know (a
    /// registration lost too), which notice the loss at their next read of
    /// Redis (`Member` reads every second by default, and at once after a
    /// reconnection).
    pub recovery_gather: Duration,
    /// The least time between the start of a full cycle and an early one
    /// brought forward by a member that went down.
    pub early_cycle_spacing: Duration,

    // The executor's probes.
    /// How close together member deaths count as one burst. A close alone
    /// is acted on as soon as its probe is refused (unless three deaths
    /// turn the mass-failure guard on in the smallest group: a group of
    /// five at 50 %); a second close within this of the previous one opens
    /// a window this long (extended by each
    /// close of the burst) before a handoff cycle fails the refused ones
    /// (once every probe of the window answered): members dying together (a
    /// node, a rollout's batch) close their connections within a
    /// millisecond or two, and are then seen as one round, and a death
    /// acted on alone just before counts in that round's judgement
    /// (`Guard::together_ms`), so that the mass-failure guard
    /// (`core::suspicion`) judges the burst as a full cycle would.
    pub refusal_settle: Duration,
    /// The least time between two confirmation probes of one member, unless
    /// a newer revocation needs one opened after its write: a member whose
    /// refusal proves nothing yet (Redis still has its connection) is looked
    /// at again at this pace, not in a loop of probes and handoff cycles.
    pub confirm_spacing: Duration,

    // Standbys.
    /// How often a standby asks Redis whether the holder's lease connection
    /// still exists. `CLIENT LIST ID <id>` is one lookup by id in Redis (a
    /// radix tree, no scan of the client list) and a reply of one line: at
    /// 20 checks a second per standby the cost to Redis is negligible, and
    /// a crashed holder is noticed 25 ms after its connection closed on
    /// average.
    pub takeover_check: Duration,
    /// After Redis refused `CLIENT` (an ACL without it), how long before
    /// asking again: each refusal is an entry in Redis' `ACL LOG`, and an ACL
    /// is rarely changed, so a replica asks about once a minute rather than
    /// every check.
    pub client_refused_backoff: Duration,
    /// How often, in poll intervals, a standby refreshes its warm channels.
    pub warm_every_polls: u32,

    // Redis calls.
    /// Bound of a read that may carry whole lists (a million units is
    /// ~10 MB). Such reads never hold up the lease: they run on their own
    /// connection and, in the holder, in the cycle task.
    pub bulk_timeout: Duration,
    /// The bounds of a lease call's timeout (the renew deadline less the
    /// renew interval, clamped): it must come back well before the renew
    /// deadline, yet not time out on an ordinary round trip.
    pub lease_call_min: Duration,
    pub lease_call_max: Duration,

    // Members.
    /// The bound of each Redis call of a member.
    pub member_call: Duration,
    /// How long a member's failed report waits before it is written again.
    pub report_retry: Duration,
    /// How often a member's read failure that goes on is summarised in the
    /// log.
    pub failure_summary: Duration,
    /// How long a `Member` dropped without a runtime to run its task waits
    /// for its deregistration (`LREM`, then `HDEL`) on a thread of its own.
    pub leave_bound: Duration,
    /// How long a stopped `Member`'s ping server finishes the calls in
    /// progress before it closes every connection (it holds nothing then).
    pub server_shutdown: Duration,

    // Measured loads (`core::load`).
    /// A `{T}:loads` field dated longer ago than this is left out: its
    /// member stopped writing (members write every `load_report_interval`,
    /// at most a minute).
    pub load_max_age: Duration,
    /// A `{T}:loads` field dated further ahead of the reader's clock than
    /// this is left out until it is not: a member whose clock runs ahead.
    pub load_max_ahead: Duration,

    // Operations.
    /// How long a listed member's pings fail before status, the page and
    /// `distributor_members_failing_long` say it failed for long (with
    /// `-forget-after` off it stays listed and pinged until removed).
    pub failing_long: Duration,
    /// How long the coordinator's loop may go without turning before the
    /// replica counts as wedged. The loop wakes at least every lease timer
    /// (well under a second by default) and each of its awaits is bounded
    /// by seconds.
    pub stall: Duration,
    /// The status page reads Redis at most this often ...
    pub min_read_gap: Duration,
    /// ... and at least this often, for what moves without a new generation
    /// (liveness, reports, the census), unless reads are slow.
    pub max_read_gap: Duration,
}

impl Timing {
    pub const DEFAULT: Timing = Timing {
        ping_grace: Duration::from_millis(50),
        first_contact: Duration::from_secs(2),
        handoff_spacing: Duration::from_millis(2),
        recovery_gather: Duration::from_secs(3),
        early_cycle_spacing: Duration::from_millis(2),
        refusal_settle: Duration::from_millis(5),
        confirm_spacing: Duration::from_millis(250),
        takeover_check: Duration::from_millis(50),
        client_refused_backoff: Duration::from_secs(60),
        warm_every_polls: 5,
        bulk_timeout: Duration::from_secs(10),
        lease_call_min: Duration::from_millis(50),
        lease_call_max: Duration::from_secs(2),
        member_call: Duration::from_secs(2),
        report_retry: Duration::from_millis(250),
        failure_summary: Duration::from_secs(30),
        leave_bound: Duration::from_secs(3),
        server_shutdown: Duration::from_millis(20),
        load_max_age: Duration::from_secs(300),
        load_max_ahead: Duration::from_secs(60),
        failing_long: Duration::from_secs(600),
        stall: Duration::from_secs(30),
        min_read_gap: Duration::from_secs(1),
        max_read_gap: Duration::from_secs(5),
    };
}

impl Timing {
    /// The dates a `{T}:loads` field may carry and count.
    pub const fn load_age(&self) -> crate::core::load::LoadAge {
        crate::core::load::LoadAge {
            max_age: self.load_max_age,
            max_ahead: self.load_max_ahead,
        }
    }
}

impl Default for Timing {
    fn default() -> Timing {
        Timing::DEFAULT
    }
}

/// An arbitrary instant for a pure test to count from: the core reads no
/// clock, so its tests pass `t0 + d` for every moment they need.
#[cfg(test)]
#[allow(clippy::disallowed_methods)]
pub(crate) fn test_t0() -> std::time::Instant {
    std::time::Instant::now()
}
