//! The mass-failure guard: when most of a group fails at once, the likelier
//! cause is the holder's own network, not the workers. The holder must not act
//! on its own view alone: it keeps those members' units, records them as
//! *suspects* (persisted in `{T}:suspects`, so the next holder knows), and
//! hands the lease over so that another replica can look.
//!
//! Pure. A suspect's failure is confirmed, and its units move, when:
//! - a holder other than the replica that suspected it pings it and fails too
//!   (two views agree); or
//! - `confirm` has passed since it was suspected (a lone replica cannot ask
//!   anyone else).
//!
//! A suspect that answers is cleared: it was the holder's network.
//!
//! ```text
//!  holder A (cut off)              Redis                    holder B
//!  ──────────────────              ─────                    ────────
//!  3 of 4 fail in one cycle
//!  keep their units ─────────▶ {T}:suspects = 3 (by A)
//!  release the lease ────────▶ lease free ───────────────▶ acquires
//!                                                          pings the 3:
//!                                                          answer → cleared, table unchanged
//!                                                          fail   → confirmed, units move
//! ```

#[cfg(test)]
use std::collections::BTreeSet;
use std::collections::{BTreeMap, HashMap, HashSet};

use crate::core::inputs::GroupMembers;

/// One suspected member, as persisted: `replica since_ms`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Suspect {
    /// The replica that suspected it.
    pub replica: String,
    /// Unix ms of the suspicion.
    pub since_ms: u64,
}

impl Suspect {
    pub fn encode(&self) -> String {
        format!("{} {}", self.since_ms, self.replica)
    }

    pub fn decode(s: &str) -> Option<Suspect> {
        let (since, replica) = s.split_once(' ')?;
        Some(Suspect {
            replica: replica.to_string(),
            since_ms: since.parse().ok()?,
        })
    }
}

/// Suspects to record and to clear in Redis, accumulated until a write
/// succeeds (like liveness changes).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SuspectChanges {
    pub set: BTreeMap<String, Suspect>,
    pub removed: std::collections::BTreeSet<String>,
}

/// No change to the suspects, for writes that carry none.
pub static NO_SUSPECTS: SuspectChanges = SuspectChanges {
    set: BTreeMap::new(),
    removed: std::collections::BTreeSet::new(),
};

impl SuspectChanges {
    pub fn is_empty(&self) -> bool {
        self.set.is_empty() && self.removed.is_empty()
    }

    /// The changes that make `stored` (as persisted) hold exactly `suspects`:
    /// how the holder brings Redis back to what it knows after a write of
    /// unknown outcome.
    pub fn between(
        stored: &BTreeMap<String, Suspect>,
        suspects: &BTreeMap<String, Suspect>,
    ) -> SuspectChanges {
        SuspectChanges {
            set: suspects
                .iter()
                .filter(|(m, s)| stored.get(*m) != Some(*s))
                .map(|(m, s)| (m.clone(), s.clone()))
                .collect(),
            removed: stored
                .keys()
                .filter(|m| !suspects.contains_key(*m))
                .cloned()
                .collect(),
        }
    }

    /// Records what `review` did to `suspects`: the last word on each wins.
    pub fn record(&mut self, review: &Review, suspects: &BTreeMap<String, Suspect>) {
        for (_, failed, _) in &review.episodes {
            for m in failed {
                self.removed.remove(m);
                if let Some(s) = suspects.get(m) {
                    self.set.insert(m.clone(), s.clone());
                }
            }
        }
        for m in review.confirmed.iter().chain(&review.cleared) {
            self.set.remove(m);
            self.removed.insert(m.clone());
        }
    }
}

/// The guard's settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Guard {
    /// More than this percent of a group's live members failing in one cycle
    /// is a mass failure; 100 turns the guard off.
    pub percent: u32,
    /// How long a suspicion stands before its suspecting replica may confirm
    /// it alone.
    pub confirm_ms: u64,
    /// Failures this close together count as one: a member failed alone in
    /// a round (its units moved at once) counts, for this long after, as
    /// failed and live before in a later round's judgement, so that a burst
    /// of deaths split over rounds is judged as one
    /// (`Timing::refusal_settle`).
    pub together_ms: u64,
}

/// What one cycle did to the suspects.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Review {
    /// Newly suspected, per group: `(group, failed, live before)`.
    pub episodes: Vec<(String, Vec<String>, usize)>,
    /// Confirmed failing: their units move now.
    pub confirmed: Vec<String>,
    /// Answered (or no longer listed): no longer suspects.
    pub cleared: Vec<String>,
}

impl Review {
    /// Whether this cycle started a new mass failure.
    pub fn new_episode(&self) -> bool {
        !self.episodes.is_empty()
    }

    pub fn is_empty(&self) -> bool {
        self.episodes.is_empty() && self.confirmed.is_empty() && self.cleared.is_empty()
    }
}

/// Updates `suspects` with one cycle's ping results.
///
/// - `was_live`: members live before this cycle's results;
/// - `is_live`: liveness after them;
/// - `answered`: this cycle's results (`true` answered, `false` failed;
///   members without a result this cycle are absent);
/// - `recent`: members an earlier round failed alone within
///   [`Guard::together_ms`]: each still failed counts as failed and as live
///   before in its group, never as a new suspect (its units have moved).
#[allow(clippy::too_many_arguments)]
pub fn review(
    guard: Guard,
    suspects: &mut BTreeMap<String, Suspect>,
    groups: &[GroupMembers<'_>],
    was_live: &HashSet<String>,
    is_live: impl Fn(&str) -> bool,
    answered: &HashMap<&str, bool>,
    recent: &HashSet<&str>,
    me: &str,
    now_ms: u64,
) -> Review {
    let mut out = Review::default();
    let listed: HashSet<&str> = groups
        .iter()
        .flat_map(|g| g.members.iter().map(String::as_str))
        .collect();
    suspects.retain(|m, s| match answered.get(m.as_str()) {
        _ if !listed.contains(m.as_str()) => {
            out.cleared.push(m.clone());
            false
        }
        Some(true) => {
            out.cleared.push(m.clone());
            false
        }
        Some(false) if s.replica != me || now_ms.saturating_sub(s.since_ms) >= guard.confirm_ms => {
            out.confirmed.push(m.clone());
            false
        }
        // Failing again by the suspecting replica, or not pinged yet.
        _ => true,
    });
    if guard.percent >= 100 {
        return out;
    }
    for g in groups {
        let earlier = g
            .members
            .iter()
            .filter(|m| {
                recent.contains(m.as_str())
                    && !was_live.contains(*m)
                    && !is_live(m)
                    && !suspects.contains_key(*m)
            })
            .count();
        let live_before = g.members.iter().filter(|m| was_live.contains(*m)).count() + earlier;
        let failed: Vec<String> = g
            .members
            .iter()
            .filter(|m| was_live.contains(*m) && !is_live(m) && !suspects.contains_key(*m))
            .cloned()
            .collect();
        if !failed.is_empty()
            && (failed.len() + earlier) * 100 > guard.percent as usize * live_before
        {
            for m in &failed {
                suspects.insert(
                    m.clone(),
                    Suspect {
                        replica: me.to_string(),
                        since_ms: now_ms,
                    },
                );
            }
            out.episodes.push((g.name.to_string(), failed, live_before));
        }
    }
    out
}

/// Whether a group is "mostly failing" now: more than `percent` of its listed
/// members are not live. `-forget-after` never forgets in such a group: that
/// is a mass failure (or the holder's own network), not a worker gone for good.
pub fn mostly_failing(members: &[String], is_live: impl Fn(&str) -> bool, percent: u32) -> bool {
    let failing = members.iter().filter(|m| !is_live(m)).count();
    percent < 100 && failing > 0 && failing * 100 > percent as usize * members.len()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const GUARD: Guard = Guard {
        percent: 50,
        confirm_ms: 10_000,
        together_ms: 5,
    };

    fn names(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("m{i}:1")).collect()
    }

    #[test]
    fn changes_between_stored_and_known_suspects() {
        let s = |r: &str| Suspect {
            replica: r.into(),
            since_ms: 5,
        };
        let stored = BTreeMap::from([("a".to_string(), s("r1")), ("b".to_string(), s("r1"))]);
        let known = BTreeMap::from([("b".to_string(), s("r2")), ("c".to_string(), s("r2"))]);
        let c = SuspectChanges::between(&stored, &known);
        assert_eq!(c.set, known);
        assert_eq!(c.removed, ["a".to_string()].into());
        assert!(SuspectChanges::between(&known, &known).is_empty());
    }

    struct World {
        members: Vec<String>,
        suspects: BTreeMap<String, Suspect>,
    }

    impl World {
        fn new(n: usize) -> World {
            World {
                members: names(n),
                suspects: BTreeMap::new(),
            }
        }

        /// One cycle seen by `me`: `down` failed now (all were live before,
        /// unless listed in `dead_before`).
        fn cycle(&mut self, me: &str, now: u64, down: &[usize], dead_before: &[usize]) -> Review {
            let was_live: HashSet<String> = self
                .members
                .iter()
                .enumerate()
                .filter(|(i, _)| !dead_before.contains(i))
                .map(|(_, m)| m.clone())
                .collect();
            let down: HashSet<&str> = down.iter().map(|i| self.members[*i].as_str()).collect();
            let answered: HashMap<&str, bool> = self
                .members
                .iter()
                .map(|m| (m.as_str(), !down.contains(m.as_str())))
                .collect();
            let groups = [GroupMembers {
                name: "g",
                members: &self.members,
            }];
            review(
                GUARD,
                &mut self.suspects,
                &groups,
                &was_live,
                |m| !down.contains(m),
                &answered,
                &HashSet::new(),
                me,
                now,
            )
        }
    }

    #[test]
    fn a_few_failures_are_acted_on_at_once() {
        let mut w = World::new(4);
        let r = w.cycle("a", 0, &[1, 2], &[]);
        assert!(!r.new_episode(), "2 of 4 is not more than half: {r:?}");
        assert!(w.suspects.is_empty());
    }

    #[test]
    fn most_of_a_group_failing_at_once_is_suspected() {
        let mut w = World::new(4);
        let r = w.cycle("a", 0, &[0, 1, 2], &[]);
        assert_eq!(r.episodes, [("g".to_string(), names(3), 4)]);
        assert_eq!(w.suspects.len(), 3);
        // The same replica, still failing, within the confirmation time: kept.
        let r = w.cycle("a", 5_000, &[0, 1, 2], &[0, 1, 2]);
        assert!(r.is_empty(), "{r:?}");
        assert_eq!(w.suspects.len(), 3);
        // After it: confirmed.
        let r = w.cycle("a", 10_000, &[0, 1, 2], &[0, 1, 2]);
        assert_eq!(r.confirmed.len(), 3);
        assert!(w.suspects.is_empty());
    }

    #[test]
    fn another_replica_that_sees_the_same_confirms_at_once() {
        let mut w = World::new(4);
        w.cycle("a", 0, &[0, 1, 2], &[]);
        let r = w.cycle("b", 100, &[0, 1, 2], &[0, 1, 2]);
        assert_eq!(r.confirmed.len(), 3);
        assert!(!r.new_episode());
    }

    #[test]
    fn suspects_that_answer_another_replica_are_cleared() {
        let mut w = World::new(4);
        w.cycle("a", 0, &[0, 1, 2], &[]);
        let r = w.cycle("b", 100, &[], &[0, 1, 2]);
        assert_eq!(r.cleared.len(), 3);
        assert!(w.suspects.is_empty());
    }

    #[test]
    fn one_member_alone_is_a_whole_group() {
        let mut w = World::new(1);
        assert!(w.cycle("a", 0, &[0], &[]).new_episode());
        let mut w = World::new(2);
        assert!(
            !w.cycle("a", 0, &[0], &[]).new_episode(),
            "half is not most"
        );
    }

    #[test]
    fn off_at_100_percent() {
        let mut w = World::new(3);
        let mut suspects = BTreeMap::new();
        let groups = [GroupMembers {
            name: "g",
            members: &w.members,
        }];
        let was_live: HashSet<String> = w.members.iter().cloned().collect();
        let off = Guard {
            percent: 100,
            ..GUARD
        };
        let r = review(
            off,
            &mut suspects,
            &groups,
            &was_live,
            |_| false,
            &HashMap::new(),
            &HashSet::new(),
            "a",
            0,
        );
        assert!(r.is_empty() && suspects.is_empty());
        w.suspects = suspects;
    }

    #[test]
    fn mostly_failing_groups_are_never_pruned() {
        let m = names(4);
        assert!(mostly_failing(&m, |x| x == "m0:1", 50));
        assert!(!mostly_failing(&m, |x| x != "m0:1", 50));
        assert!(!mostly_failing(&m, |_| false, 100));
    }

    #[test]
    fn suspects_round_trip() {
        let s = Suspect {
            replica: "replica 7".into(),
            since_ms: 42,
        };
        assert_eq!(Suspect::decode(&s.encode()), Some(s));
        assert_eq!(Suspect::decode("x y"), None);
    }

    proptest! {
        /// Whatever happens, a suspect is never kept past the confirmation
        /// time by the replica that suspected it, and never outlives its
        /// member's answer.
        #[test]
        fn suspicions_end(steps in proptest::collection::vec((0usize..3, proptest::collection::vec(any::<bool>(), 5)), 1..30)) {
            let mut w = World::new(5);
            let mut now = 0;
            let mut dead: Vec<usize> = vec![];
            for (who, alive) in steps {
                now += 1_000;
                let me = ["a", "b", "c"][who];
                let down: Vec<usize> = (0..5).filter(|i| !alive[*i]).collect();
                let r = w.cycle(me, now, &down, &dead);
                for m in &r.cleared {
                    prop_assert!(!w.suspects.contains_key(m));
                }
                for (m, s) in &w.suspects {
                    let i: usize = m[1..m.len() - 2].parse().unwrap();
                    prop_assert!(!alive[i], "an answering member stays suspected");
                    prop_assert!(s.replica != me || now - s.since_ms < GUARD.confirm_ms || s.since_ms == now);
                }
                dead = down;
            }
        }
    }

    proptest! {
        /// A burst of deaths split over rounds, each earlier one failing
        /// alone (its members' units moved at once), is judged as one
        /// round: the guard fires in some round exactly when it fires for
        /// the burst judged at once, and then only for that round's members.
        #[test]
        fn a_burst_split_over_rounds_is_judged_as_one(
            n in 1usize..30,
            burst in 1usize..30,
            cuts in proptest::collection::vec(any::<bool>(), 30),
        ) {
            let burst = burst.min(n);
            let members = names(n);
            let groups = [GroupMembers { name: "g", members: &members }];
            let at_once = burst * 100 > GUARD.percent as usize * n;
            let mut suspects = BTreeMap::new();
            let mut dead: Vec<&str> = Vec::new();
            let mut fired = None;
            let mut start = 0;
            for end in 1..=burst {
                if end < burst && !cuts[end] {
                    continue;
                }
                let round: Vec<&str> = members[start..end].iter().map(String::as_str).collect();
                let was_live: HashSet<String> = members
                    .iter()
                    .filter(|m| !dead.contains(&m.as_str()))
                    .cloned()
                    .collect();
                let answered: HashMap<&str, bool> = round.iter().map(|m| (*m, false)).collect();
                let recent: HashSet<&str> = dead.iter().copied().collect();
                let down = |m: &str| dead.contains(&m) || round.contains(&m);
                let r = review(
                    GUARD, &mut suspects, &groups, &was_live, |m| !down(m), &answered, &recent, "a", 0,
                );
                if r.new_episode() {
                    let suspected: BTreeSet<&str> = suspects.keys().map(String::as_str).collect();
                    let round: BTreeSet<&str> = round.iter().copied().collect();
                    prop_assert_eq!(suspected, round);
                    fired = Some(end);
                    break;
                }
                dead.extend(round);
                start = end;
            }
            prop_assert_eq!(fired.is_some(), at_once, "fired at {:?}", fired);
        }
    }
}
