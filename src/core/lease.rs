//! Lease timing, pure: when the holder renews, when it must stop acting, and
//! when a standby tries again.
//!
//! The holder measures everything from the moment it *sent* its last successful
//! renewal; Redis started the new TTL later than that, so the local view is
//! always the more pessimistic one (client-go's rule: renew deadline < lease
//! duration):
//!
//! ```text
//!  sent  renew      renew      renew deadline           ttl
//!   │   interval   interval          │                   │
//!   ├─────┼──────────┼───────────────┼───────────────────┤
//!   ▲     ▲ retries while failing...  ▲ stops acting     ▲ Redis may expire the
//!   │                                   (no writes)        lease; a standby
//!   last successful renewal                                 takes over from here
//! ```
//!
//! Between "stops acting" and "expires" nobody writes: no overlap, at the price
//! of a short gap. Even if a paused process wakes up late and tries anyway, the
//! write script checks token and epoch inside Redis and rejects it.
//!
//! Fast takeover: a holder that crashes does not release, but Redis closes its
//! connections at once. The holder records the Redis client id of the
//! connection it renews on beside the lease ([`HolderRecord`]); a standby asks
//! Redis every `Timing::takeover_check` whether that connection still exists, and
//! when it is gone takes the lease over with a compare-and-set on exactly the
//! record it saw, opening a new epoch like any acquisition. A holder that is
//! alive but lost that connection (and did not renew over a new one yet) may
//! still believe it holds the lease until its renewal says `Taken`: its writes
//! are refused by the token and epoch check, so at most one holder's writes
//! are ever accepted, whatever the timing. Where Redis does not let us ask
//! (`CLIENT` not permitted, renamed, a cluster), standbys wait out the TTL.
//!
//! The record names the server too (its run id, from `INFO server`): client
//! ids are numbered per server process, so after a replica's promotion or a
//! restart the id names nothing (or another connection) on the server a
//! standby now asks, while the holder may be alive and about to renew over a
//! new connection. A record of another server, or one a standby cannot match
//! to its server, is never read as closed: the standby waits for the
//! holder's next record or the TTL. (A record without a run id, from a holder
//! that may not ask `INFO` or an older version, is looked for by its id
//! alone, as before.)

use std::time::Duration;
use std::time::Instant;

use crate::core::handoff::RedisConnection;

/// Lease timing; see the timeline above.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaseTiming {
    pub ttl: Duration,
    pub renew_interval: Duration,
    pub renew_deadline: Duration,
    pub retry_interval: Duration,
}

/// The proof of holding the lease that every fenced call carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseGrant {
    pub token: String,
    pub epoch: u64,
}

/// The current holding as a standby saw it: its token, its epoch and the
/// Redis connection its holder renews on (`meta.holder_conn`, bound to the
/// token): the client id and, where the holder could tell, the run id of the
/// server that connection is on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HolderRecord {
    pub token: String,
    pub epoch: u64,
    pub client: RedisConnection,
}

/// What Redis said about a holder's lease connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HolderConnection {
    /// It exists, or Redis cannot say: the record names another server
    /// (its run id differs: a failover or a restart since it was written,
    /// and the holder may be alive and reconnecting) or names a server and
    /// this one's run id is not known. The takeover then waits for a new
    /// record or the TTL, which is safe.
    Open,
    /// The server the record names has no connection with that id: the
    /// holder's process or its connection is gone.
    Closed,
    /// Redis refuses the question (`CLIENT` not permitted or renamed): fall
    /// back to the TTL.
    Refused,
}

/// What a replica brings to an acquisition attempt.
#[derive(Debug, Clone)]
pub struct Claim<'a> {
    pub ttl: Duration,
    /// Highest epoch this replica has seen (keeps epochs increasing across data loss).
    pub epoch_floor: u64,
    /// Highest table generation this replica has seen.
    pub generation_floor: u64,
    pub holder_id: &'a str,
    pub now_ms: u64,
    /// Recorded in the metadata so operators' tools can judge liveness.
    pub failure_threshold: u32,
    /// Take over this holding, whose lease connection was seen closed: the
    /// lease is taken only if it still holds exactly this record.
    pub takeover: Option<&'a HolderRecord>,
}

/// The outcome of an acquisition attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Acquisition {
    Acquired(LeaseGrant),
    /// Someone else holds it; it expires in `pttl` at the latest. `epoch` and
    /// `generation` are the current ones, so standbys keep their floors up to date.
    Held {
        pttl: Option<Duration>,
        holder: String,
        epoch: u64,
        generation: u64,
        /// Why the lease key cannot be a holder's (no TTL, another type); the
        /// script gave it a TTL, so it lapses.
        foreign: Option<String>,
        /// The holding with its lease connection, when its holder recorded
        /// one: a standby can then watch that connection.
        record: Option<HolderRecord>,
    },
}

/// The outcome of a renewal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Renewal {
    Renewed,
    Lost(LostLease),
}

/// Why a renewal found the lease gone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LostLease {
    /// The lease key expired or was deleted.
    Expired,
    /// Another token holds it: another replica acquired it.
    Taken,
    /// The epoch moved on: a replica that saw a higher epoch fenced this one.
    Epoch,
    /// The lease key is of another type than a string.
    Foreign,
}

impl LostLease {
    /// From the reason `renew.lua` gives.
    pub fn from_reason(reason: &str) -> LostLease {
        match reason {
            "expired" => LostLease::Expired,
            "taken" => LostLease::Taken,
            "epoch" => LostLease::Epoch,
            _ => LostLease::Foreign,
        }
    }

    /// What to tell an operator.
    pub fn describe(self) -> &'static str {
        match self {
            LostLease::Expired => "the lease key expired or was deleted",
            LostLease::Taken => "another replica holds the lease now",
            LostLease::Epoch => "a replica that saw a higher epoch fenced this one",
            LostLease::Foreign => "the lease key holds another type than a string",
        }
    }
}

/// The lease as its holder sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeldLease {
    pub grant: LeaseGrant,
    timing: LeaseTiming,
    renewed_at: Instant,
    next_renewal: Instant,
}

impl HeldLease {
    /// A lease acquired by a call sent at `sent_at`.
    pub fn new(grant: LeaseGrant, timing: LeaseTiming, sent_at: Instant) -> HeldLease {
        HeldLease {
            grant,
            timing,
            renewed_at: sent_at,
            next_renewal: sent_at + timing.renew_interval,
        }
    }

    pub fn epoch(&self) -> u64 {
        self.grant.epoch
    }

    /// A renewal sent at `sent_at` succeeded.
    pub fn renewed(&mut self, sent_at: Instant) {
        self.renewed_at = self.renewed_at.max(sent_at);
        self.next_renewal = self.renewed_at + self.timing.renew_interval;
    }

    /// A renewal failed without an answer (timeout, connection): retry soon, so
    /// that one lost packet does not cost the lease.
    pub fn renewal_failed(&mut self, now: Instant) {
        let soon = now + (self.timing.renew_interval / 4).max(Duration::from_millis(10));
        self.next_renewal = soon.min(self.acts_until());
    }

    pub fn next_renewal(&self) -> Instant {
        self.next_renewal
    }

    /// The holder must not act (ping, write) from this instant on.
    pub fn acts_until(&self) -> Instant {
        self.renewed_at + self.timing.renew_deadline
    }

    pub fn may_act(&self, now: Instant) -> bool {
        now < self.acts_until()
    }

    /// How long a renewal call may take and still be useful.
    pub fn renewal_budget(&self, now: Instant) -> Duration {
        self.acts_until()
            .saturating_duration_since(now)
            .max(Duration::from_millis(1))
    }
}

/// When a standby should try again, given what the failed attempt told it.
///
/// If Redis said when the lease expires, try right then (plus a millisecond),
/// so that a crashed holder is replaced about one TTL after its last renewal;
/// never wait longer than the retry interval, in case the holder released it.
pub fn next_attempt(now: Instant, held_pttl: Option<Duration>, retry: Duration) -> Instant {
    let wait = match held_pttl {
        Some(pttl) => (pttl + Duration::from_millis(1)).min(retry),
        None => retry,
    };
    now + wait
}

#[cfg(test)]
mod tests {
    use super::*;

    fn timing() -> LeaseTiming {
        LeaseTiming {
            ttl: Duration::from_millis(2000),
            renew_interval: Duration::from_millis(500),
            renew_deadline: Duration::from_millis(1500),
            retry_interval: Duration::from_millis(500),
        }
    }

    fn grant() -> LeaseGrant {
        LeaseGrant {
            token: "t".into(),
            epoch: 7,
        }
    }

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn holder_stops_acting_before_the_ttl_can_expire() {
        let t0 = crate::core::timing::test_t0();
        let mut lease = HeldLease::new(grant(), timing(), t0);
        assert_eq!(lease.next_renewal(), t0 + ms(500));
        assert!(lease.may_act(t0 + ms(1499)));
        assert!(!lease.may_act(t0 + ms(1500)), "renew deadline reached");
        assert!(lease.acts_until() < t0 + timing().ttl);

        lease.renewed(t0 + ms(1500));
        assert!(lease.may_act(t0 + ms(1500)));
        assert_eq!(lease.acts_until(), t0 + ms(3000));
    }

    #[test]
    fn failed_renewals_are_retried_before_the_deadline() {
        let t0 = crate::core::timing::test_t0();
        let mut lease = HeldLease::new(grant(), timing(), t0);
        lease.renewal_failed(t0 + ms(500));
        assert_eq!(lease.next_renewal(), t0 + ms(625));
        lease.renewal_failed(t0 + ms(1490));
        assert_eq!(
            lease.next_renewal(),
            lease.acts_until(),
            "never scheduled past the deadline"
        );
        assert_eq!(lease.renewal_budget(t0 + ms(1490)), ms(10));
    }

    #[test]
    fn late_answers_never_move_the_lease_backwards() {
        let t0 = crate::core::timing::test_t0();
        let mut lease = HeldLease::new(grant(), timing(), t0 + ms(100));
        lease.renewed(t0);
        assert_eq!(lease.acts_until(), t0 + ms(1600));
    }

    #[test]
    fn standby_tries_when_the_lease_expires() {
        let now = crate::core::timing::test_t0();
        let retry = Duration::from_millis(500);
        assert_eq!(
            next_attempt(now, Some(Duration::from_millis(120)), retry),
            now + Duration::from_millis(121)
        );
        assert_eq!(
            next_attempt(now, Some(Duration::from_secs(5)), retry),
            now + retry
        );
        assert_eq!(next_attempt(now, None, retry), now + retry);
    }
}
