//! Probes: pings on a connection of their own, to a member whose watched
//! connection ended, or to confirm that a member that owes units is gone
//! after the write that revoked them. [`probe`] only does the IO (the ping,
//! and for a refused confirmation the question to Redis); which members are
//! probed and what a result asks for are decided by the pure [`ProbeBook`]
//! and [`verdict`], tested below.
//!
//! Guarantees: one probe per member at a time; a member whose refusal
//! proves nothing yet is probed again at most every
//! `Timing::confirm_spacing` (unless a newer revocation needs a connection
//! opened after its write);
//! a refusal releases units only as `core::handoff::Proof` allows.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::Duration;

use futures::future::BoxFuture;
use futures::stream::FuturesUnordered;
use std::time::Instant;

use crate::coordinator::holder::Confirm;
use crate::edge::clock;
use crate::edge::grpc::{PingFailure, Pinger};
use crate::edge::redis::Store;

/// A finished probe.
pub(super) struct Probe {
    pub(super) member: String,
    pub(super) cause: ProbeCause,
    /// The instant before the connection was opened.
    pub(super) opened: Instant,
    pub(super) result: Result<Duration, PingFailure>,
    /// For a refused confirmation: Redis, asked after the refusal, had no
    /// connection the member names (see `core::handoff::Proof`).
    pub(super) disconnected: bool,
}

/// Why a member is probed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum ProbeCause {
    /// Its watched connection ended.
    Closed,
    /// Its watched connection ended and the first probe's connection was
    /// reset: a process being torn down accepts, then resets, until its
    /// listener is gone. Probed once more, at once.
    ClosedAgain,
    /// It owes units whose revoking write is done, and a refusal (with
    /// Redis, for the connections recorded with them) could release them.
    Confirm(Confirm),
}

/// Which members are being probed, and when each was last probed to
/// confirm it gone.
pub(super) struct ProbeBook {
    probing: HashSet<String>,
    confirmed: HashMap<String, Instant>,
    /// `Timing::confirm_spacing`.
    spacing: Duration,
}

impl ProbeBook {
    pub(super) fn new(spacing: Duration) -> ProbeBook {
        ProbeBook {
            probing: HashSet::new(),
            confirmed: HashMap::new(),
            spacing,
        }
    }

    /// Starts a probe of `member`: `false` when one already runs.
    pub(super) fn start(&mut self, member: &str) -> bool {
        self.probing.insert(member.to_string())
    }

    pub(super) fn finished(&mut self, member: &str) {
        self.probing.remove(member);
    }

    /// Whether no probe runs.
    pub(super) fn idle(&self) -> bool {
        self.probing.is_empty()
    }

    /// Of the members a cycle says to confirm (`HandoffState::to_confirm`),
    /// those to probe now: none probed yet, none since the latest revoking
    /// write it owes (`since`), or none for the spacing; never one
    /// whose probe runs. Records them as confirmed now, and forgets members
    /// not probed for a while.
    pub(super) fn confirmations(
        &mut self,
        to_confirm: BTreeMap<String, Confirm>,
        now: Instant,
    ) -> Vec<(String, Confirm)> {
        let mut due = Vec::new();
        for (member, c) in to_confirm {
            let last = self.confirmed.get(&member).copied();
            let spaced = last.is_none_or(|l| l < c.since || now >= l + self.spacing);
            if spaced && !self.probing.contains(&member) {
                self.confirmed.insert(member.clone(), now);
                due.push((member, c));
            }
        }
        let keep = self.spacing * 4;
        self.confirmed.retain(|_, l| now < *l + keep);
        due
    }
}

/// What a finished probe asks of the executor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Verdict {
    /// A refusal that proves something: kept for the next handoff cycle
    /// (`disconnected`: Redis had none of the member's connections).
    Refused { disconnected: bool },
    /// A member whose connection ended answers on a new one (a proxy, a
    /// restarted server): its watched connection is opened again.
    Reopen,
    /// A member whose connection ended does not answer: a full cycle now.
    Cycle,
    /// A member whose connection ended reset the probe's connection: probe
    /// it once more ([`ProbeCause::ClosedAgain`]).
    Again,
    /// Nothing to do, and why (for the debug log).
    Nothing(&'static str),
}

/// What a probe's result asks for.
pub(super) fn verdict(
    cause: &ProbeCause,
    result: &Result<Duration, PingFailure>,
    disconnected: bool,
) -> Verdict {
    match (cause, result) {
        // Still nothing listens, now after the revoking write: a handoff
        // cycle releases what that proves (with Redis, for a member that
        // names its connection).
        (ProbeCause::Confirm(c), Err(PingFailure::Refused(_)))
            if disconnected || c.refusal_helps =>
        {
            Verdict::Refused { disconnected }
        }
        // A refusal that proves nothing starts no cycle.
        (ProbeCause::Confirm(_), Err(PingFailure::Refused(_))) => Verdict::Nothing(
            "a member that owes units is refused, but redis still has its connection: waiting for its acknowledgement or its deadline",
        ),
        // A new process answers on the address: its units wait for its
        // acknowledgement or its deadline, and the next full cycle pings it.
        (ProbeCause::Confirm(_), Ok(_)) => {
            Verdict::Nothing("a gone member answers again: a new process on its address")
        }
        (ProbeCause::Confirm(_), Err(_)) => {
            Verdict::Nothing("a gone member's confirmation probe failed")
        }
        (ProbeCause::Closed | ProbeCause::ClosedAgain, Ok(_)) => Verdict::Reopen,
        // Refused: the process is gone. A handoff cycle fails it alone,
        // pinging nobody else (O(1), not O(members)).
        (ProbeCause::Closed | ProbeCause::ClosedAgain, Err(PingFailure::Refused(_))) => {
            Verdict::Refused {
                disconnected: false,
            }
        }
        // Reset: perhaps a process still being torn down; asked once more
        // before every member is pinged. A second reset proves nothing
        // either, so it is treated as silence.
        (ProbeCause::Closed, Err(PingFailure::Unavailable(_))) => Verdict::Again,
        // Silent or unavailable: a full cycle looks at everyone.
        (ProbeCause::Closed | ProbeCause::ClosedAgain, Err(_)) => Verdict::Cycle,
    }
}

/// Pings `member` on a connection of its own. A refused confirmation then
/// asks Redis whether the member's connection is gone too. The caller
/// checked with [`ProbeBook::start`] that no probe of it runs.
pub(super) fn probe(
    pinger: &Pinger,
    store: &Store,
    member: String,
    cause: ProbeCause,
    probes: &mut FuturesUnordered<BoxFuture<'static, Probe>>,
) {
    let (pinger, store) = (pinger.clone(), store.clone());
    probes.push(Box::pin(async move {
        let opened = clock::now();
        let result = pinger.probe(&member).await;
        let mut disconnected = false;
        if let (ProbeCause::Confirm(c), Err(PingFailure::Refused(_))) = (&cause, &result) {
            match store.member_disconnected(&member, &c.clients).await {
                Ok(gone) => disconnected = gone == Some(true),
                Err(e) => {
                    tracing::debug!(member, error = %e, "could not ask redis for a refused member's connection")
                }
            }
        }
        Probe {
            member,
            cause,
            opened,
            result,
            disconnected,
        }
    }));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::timing::Timing;

    fn confirm(since: Instant, refusal_helps: bool) -> Confirm {
        Confirm {
            clients: Vec::new(),
            refusal_helps,
            since,
        }
    }

    fn refused() -> Result<Duration, PingFailure> {
        Err(PingFailure::Refused("connection refused".into()))
    }

    #[test]
    fn a_member_is_probed_to_confirm_at_most_every_spacing_unless_a_newer_write_needs_it() {
        let t = clock::now();
        const CONFIRM_SPACING: Duration = Timing::DEFAULT.confirm_spacing;
        let mut book = ProbeBook::new(CONFIRM_SPACING);
        let a = || BTreeMap::from([("a".to_string(), confirm(t, false))]);
        assert_eq!(book.confirmations(a(), t).len(), 1);
        let soon = t + CONFIRM_SPACING / 2;
        assert!(book.confirmations(a(), soon).is_empty(), "spaced");
        // A revocation written after the last probe needs a connection
        // opened after it: at once.
        let newer = BTreeMap::from([("a".to_string(), confirm(soon, false))]);
        assert_eq!(book.confirmations(newer, soon).len(), 1);
        let later = soon + CONFIRM_SPACING;
        assert!(book.start("a"));
        assert!(
            book.confirmations(a(), later).is_empty(),
            "never while its probe runs"
        );
        assert!(!book.start("a"), "one probe per member");
        book.finished("a");
        assert!(book.idle());
        assert_eq!(book.confirmations(a(), later).len(), 1);
    }

    #[test]
    fn a_refusal_counts_only_where_it_proves_something() {
        let t = clock::now();
        let plain = ProbeCause::Confirm(confirm(t, false));
        let old_protocol = ProbeCause::Confirm(confirm(t, true));
        assert_eq!(
            verdict(&plain, &refused(), true),
            Verdict::Refused { disconnected: true }
        );
        assert!(matches!(
            verdict(&plain, &refused(), false),
            Verdict::Nothing(_)
        ));
        assert_eq!(
            verdict(&old_protocol, &refused(), false),
            Verdict::Refused {
                disconnected: false
            }
        );
        assert!(matches!(
            verdict(&plain, &Ok(Duration::ZERO), false),
            Verdict::Nothing(_)
        ));
        let timeout = Err(PingFailure::Timeout);
        assert!(matches!(
            verdict(&plain, &timeout, false),
            Verdict::Nothing(_)
        ));
        assert_eq!(
            verdict(&ProbeCause::Closed, &refused(), false),
            Verdict::Refused {
                disconnected: false
            }
        );
        assert_eq!(
            verdict(&ProbeCause::Closed, &Ok(Duration::ZERO), false),
            Verdict::Reopen
        );
        assert_eq!(
            verdict(&ProbeCause::Closed, &timeout, false),
            Verdict::Cycle
        );
    }

    #[test]
    fn a_reset_probe_after_a_close_is_asked_once_more_and_then_treated_as_silence() {
        let reset = Err(PingFailure::Unavailable("connection reset".into()));
        assert_eq!(verdict(&ProbeCause::Closed, &reset, false), Verdict::Again);
        assert_eq!(
            verdict(&ProbeCause::ClosedAgain, &reset, false),
            Verdict::Cycle
        );
        assert_eq!(
            verdict(&ProbeCause::ClosedAgain, &refused(), false),
            Verdict::Refused {
                disconnected: false
            }
        );
        assert_eq!(
            verdict(&ProbeCause::ClosedAgain, &Ok(Duration::ZERO), false),
            Verdict::Reopen
        );
        let timeout = Err(PingFailure::Timeout);
        assert_eq!(
            verdict(&ProbeCause::Closed, &timeout, false),
            Verdict::Cycle,
            "a timeout is not asked again: it took a whole ping timeout"
        );
    }
}
