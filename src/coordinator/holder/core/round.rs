//! How long a round of pings waits, and what counts as suspicious: pure
//! functions of the liveness before the round and the results so far. The
//! cycle's `pings::Round::gather` only waits, phase by phase:
//!
//! ```text
//!   0 ── answers, refusals (~1 ms) ──▶ grace (50 ms): the round as it stands
//!        a wave of first contacts ───▶ their first answers (≤ patience)
//!        the holder's own network? ──▶ the rest of the round (≤ patience)
//!        still running: carried to the next cycle
//! ```

use std::collections::HashSet;
use std::time::Duration;

use crate::core::liveness::Liveness;
use crate::edge::grpc::PingReport;

/// What one round's waits depend on.
pub(in crate::coordinator::holder) struct Round<'a> {
    /// The liveness before the round.
    pub(in crate::coordinator::holder) liveness: &'a Liveness,
    /// The members live before the round.
    pub(in crate::coordinator::holder) was_live: &'a HashSet<String>,
    /// The mass-failure guard's percentage (100: off).
    pub(in crate::coordinator::holder) guard_percent: u32,
    /// How long the first phase waits for fast results
    /// (`Timing::ping_grace`).
    pub(in crate::coordinator::holder) grace: Duration,
    /// The longest a later phase waits: a ping timeout, at least a first
    /// contact's allowance.
    pub(in crate::coordinator::holder) patience: Duration,
}

/// What [`Round::gather`] saw besides the reports, for the log.
#[derive(Debug, Default, PartialEq, Eq)]
pub(in crate::coordinator::holder) struct Waited {
    /// A wave of first contacts the round waited for: how many members
    /// were unheard of, how many heard from, and how many were still
    /// unheard of when the wait ended.
    pub(in crate::coordinator::holder) first_contacts: Option<(usize, usize, usize)>,
}

impl Round<'_> {
    /// The members the first phase waits for: those pinged afresh that are
    /// not already failing. Carried pings (hung members) and members already
    /// failing never hold up everyone else's verdicts.
    pub(in crate::coordinator::holder) fn first_awaited(
        &self,
        fresh: &HashSet<String>,
    ) -> HashSet<String> {
        fresh
            .iter()
            .filter(|m| self.liveness.health(m).is_none_or(|h| h.failures == 0))
            .cloned()
            .collect()
    }

    /// After the grace: the members still unheard of (never answered any
    /// holder, never failed, no result yet) when they outnumber the members
    /// heard from (known live, or answering in this round). That is a fresh
    /// fleet's first cycle, or a fleet scaled up many times over: acting now
    /// would place every unit on the few that answered within the grace, and
    /// then move almost all of them as the others answer (98,730 of 100,000
    /// units in transit at 10,000 members, BENCHMARKS.md, "First table of a
    /// fresh 10,000-member fleet"). A steady fleet never waits, nor a fresh
    /// one with a hung member or two: they are fewer than the members heard
    /// from, and a later cycle takes them.
    /// Returns `(unheard, heard)` and the members to wait for.
    pub(in crate::coordinator::holder) fn first_contacts(
        &self,
        awaited: &HashSet<String>,
        pending: &HashSet<String>,
        reports: &[PingReport],
    ) -> Option<(usize, usize, HashSet<String>)> {
        let unheard: HashSet<String> = awaited
            .iter()
            .filter(|m| {
                pending.contains(*m)
                    && self
                        .liveness
                        .health(m)
                        .is_none_or(|h| !h.answered && h.failures == 0)
            })
            .cloned()
            .collect();
        let heard = self.was_live.len()
            + reports
                .iter()
                .filter(|r| r.result.is_ok() && !self.was_live.contains(&r.member))
                .count();
        (unheard.len() > heard).then_some((unheard.len(), heard, unheard))
    }

    /// Whether the round must wait for the rest of its pings: a live member
    /// just failed while few others answered, which may be this holder's own
    /// network (a cut that landed in the middle of a ping round). Waiting for
    /// the pings in flight (this round's and those carried over) lets a mass
    /// failure be seen in one cycle and held as one (see `core::suspicion`).
    /// A healthy holder never waits: the others' answers come within the
    /// grace.
    pub(in crate::coordinator::holder) fn hold_for_the_rest(
        &self,
        reports: &[PingReport],
        pending: usize,
    ) -> bool {
        self.guard_percent < 100
            && pending > 0
            && suspicious(reports, self.was_live, self.guard_percent)
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::edge::grpc::PingFailure;

    fn set(items: &[&str]) -> HashSet<String> {
        items.iter().map(|s| s.to_string()).collect()
    }

    fn report(m: &str, result: Result<Duration, PingFailure>) -> PingReport {
        PingReport {
            member: m.into(),
            result,
            at: crate::core::timing::test_t0(),
            opened: None,
        }
    }

    fn ok(m: &str) -> PingReport {
        report(m, Ok(Duration::from_millis(1)))
    }

    fn refused(m: &str) -> PingReport {
        report(m, Err(PingFailure::Refused("refused".into())))
    }

    /// Liveness where `live` answered, `failing` failed once, the rest are
    /// unknown.
    fn liveness(live: &[&str], failing: &[&str]) -> Liveness {
        let mut l = Liveness::new(3);
        let results = live
            .iter()
            .map(|m| (*m, Ok(())))
            .chain(failing.iter().map(|m| (*m, Err("refused"))));
        let listed: Vec<&str> = live.iter().chain(failing).copied().collect();
        l.observe(results, listed.iter().copied(), 0);
        l
    }

    /// A round over `l` and `was_live`, with the guard at `guard_percent`.
    fn round<'a>(l: &'a Liveness, was_live: &'a HashSet<String>, guard_percent: u32) -> Round<'a> {
        Round {
            liveness: l,
            was_live,
            guard_percent,
            grace: Duration::from_millis(50),
            patience: Duration::from_secs(1),
        }
    }

    #[test]
    fn the_grace_waits_for_fresh_members_that_are_not_failing() {
        let l = liveness(&["a"], &["f"]);
        let was_live = set(&["a"]);
        let round = round(&l, &was_live, 50);
        assert_eq!(
            round.first_awaited(&set(&["a", "f", "new"])),
            set(&["a", "new"])
        );
    }

    #[test]
    fn first_contacts_are_awaited_only_when_they_outnumber_the_members_heard_from() {
        let l = liveness(&["a", "b"], &[]);
        let was_live = set(&["a", "b"]);
        let round = round(&l, &was_live, 50);
        let new = set(&["n1", "n2", "n3"]);
        // Two heard (known live), three unheard of and still pending.
        let (unheard, heard, awaited) = round
            .first_contacts(&new, &new, &[ok("a")])
            .expect("more unheard than heard");
        assert_eq!((unheard, heard, awaited), (3, 2, new.clone()));
        // One of them answered: two unheard, three heard.
        let pending = set(&["n2", "n3"]);
        assert_eq!(round.first_contacts(&new, &pending, &[ok("n1")]), None);
        // Known live members are never unheard of.
        let known = set(&["a", "b"]);
        assert_eq!(round.first_contacts(&known, &known, &[]), None);
    }

    #[test]
    fn the_rest_of_a_round_is_awaited_only_when_a_live_member_failed_and_few_answered() {
        let l = liveness(&["a", "b", "c", "d"], &[]);
        let was_live = set(&["a", "b", "c", "d"]);
        let with_guard = |guard_percent| round(&l, &was_live, guard_percent);
        let r = with_guard(50);
        assert!(r.hold_for_the_rest(&[refused("a")], 3));
        assert!(r.hold_for_the_rest(&[refused("a"), ok("b"), ok("c")], 1));
        assert!(
            !r.hold_for_the_rest(&[refused("a"), ok("b"), ok("c"), ok("d")], 1),
            "most answered"
        );
        assert!(!r.hold_for_the_rest(&[ok("a")], 3), "nobody live failed");
        assert!(
            !r.hold_for_the_rest(&[refused("new")], 3),
            "not a live member"
        );
        assert!(!r.hold_for_the_rest(&[refused("a")], 0), "nothing pending");
        assert!(
            !with_guard(100).hold_for_the_rest(&[refused("a")], 3),
            "guard off"
        );
    }
}
