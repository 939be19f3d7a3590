//! Per-member liveness: who may receive work, from the history of ping results.
//!
//! Pure. The holder feeds one observation per member per cycle; the state is
//! persisted in Redis (`{table}:liveness`) so that a new holder after a failover
//! starts from the same view and writes the same table, not a reshuffle.
//!
//! Rules:
//! - a member is live once it has answered at least one ping, until it fails
//!   `threshold` consecutive pings (default 1: the seed's "every unsuccessful
//!   request is a denial");
//! - one answer makes it live again;
//! - the failure counter saturates at `threshold`, and `failing_since` is set once,
//!   so a member that stays dead changes nothing: idle cycles write nothing.

use std::collections::{BTreeMap, HashMap};

/// The liveness state of one member, as persisted.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Health {
    /// Has it ever answered? A member that never answered gets no work.
    pub answered: bool,
    /// Consecutive failed pings, saturated at the threshold.
    pub failures: u32,
    /// Unix milliseconds of the first failure of the current streak.
    pub failing_since_ms: Option<u64>,
    /// Why the first ping of the current streak failed, for operators.
    pub reason: Option<String>,
}

/// Longest failure reason kept, in characters.
const MAX_REASON: usize = 160;

impl Health {
    /// Persisted form: `answered failures failing_since_ms [reason]`
    /// (0 = not failing; the reason is the rest of the line).
    pub fn encode(&self) -> String {
        let mut out = format!(
            "{} {} {}",
            u8::from(self.answered),
            self.failures,
            self.failing_since_ms.unwrap_or(0)
        );
        if let Some(r) = &self.reason {
            out.push(' ');
            out.push_str(r);
        }
        out
    }

    pub fn decode(s: &str) -> Option<Health> {
        let mut it = s.splitn(4, ' ');
        let answered = match it.next()? {
            "0" => false,
            "1" => true,
            _ => return None,
        };
        let failures = it.next()?.parse().ok()?;
        let since: u64 = it.next()?.parse().ok()?;
        Some(Health {
            answered,
            failures,
            failing_since_ms: (since != 0).then_some(since),
            reason: it.next().map(clean_reason).filter(|r| !r.is_empty()),
        })
    }
}

/// A reason fit for one line of a status report: no control characters,
/// shortened.
fn clean_reason(r: &str) -> String {
    r.chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .take(MAX_REASON)
        .collect::<String>()
        .trim()
        .to_string()
}

/// Liveness of every listed member.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Liveness {
    threshold: u32,
    members: HashMap<String, Health>,
}

/// What changed in one cycle, to persist: upserts and removals.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HealthChanges {
    pub set: BTreeMap<String, Health>,
    pub removed: Vec<String>,
}

impl HealthChanges {
    pub fn is_empty(&self) -> bool {
        self.set.is_empty() && self.removed.is_empty()
    }

    /// Folds `later` into `self`, so unsaved changes can be retried with the next
    /// write: the last word on each member wins.
    pub fn merge(&mut self, later: HealthChanges) {
        for m in &later.removed {
            self.set.remove(m);
        }
        for m in later.set.keys() {
            self.removed.retain(|r| r != m);
        }
        self.set.extend(later.set);
        self.removed.extend(later.removed);
        self.removed.sort();
        self.removed.dedup();
    }
}

impl Liveness {
    pub fn new(threshold: u32) -> Liveness {
        Liveness {
            threshold: threshold.max(1),
            members: HashMap::new(),
        }
    }

    /// Restores persisted state; entries that do not parse are ignored (and re-learnt
    /// from the next ping), and reported back so the caller can log them.
    pub fn restore(
        threshold: u32,
        stored: impl IntoIterator<Item = (String, String)>,
    ) -> (Liveness, Vec<(String, String)>) {
        let mut live = Liveness::new(threshold);
        let mut bad = Vec::new();
        for (member, value) in stored {
            match Health::decode(&value) {
                Some(mut h) => {
                    h.failures = h.failures.min(live.threshold);
                    live.members.insert(member, h);
                }
                None => bad.push((member, value)),
            }
        }
        (live, bad)
    }

    /// The changes that make `stored` (as persisted, undecoded) say what this
    /// liveness says: entries that differ or are missing, and stored members
    /// it does not know. The holder's own observations are the truth; this
    /// is how it brings Redis back to them after a write of unknown outcome.
    pub fn changes_from(&self, stored: &HashMap<String, String>) -> HealthChanges {
        let mut out = HealthChanges::default();
        for (m, h) in &self.members {
            let encoded = h.encode();
            if stored.get(m) != Some(&encoded) {
                out.set.insert(m.clone(), h.clone());
            }
        }
        out.removed = stored
            .keys()
            .filter(|m| !self.members.contains_key(*m))
            .cloned()
            .collect();
        out.removed.sort();
        out
    }

    pub fn is_live(&self, member: &str) -> bool {
        self.members
            .get(member)
            .is_some_and(|h| h.answered && h.failures < self.threshold)
    }

    pub fn health(&self, member: &str) -> Option<&Health> {
        self.members.get(member)
    }

    /// Applies one cycle of ping results: `Ok(())` for an answer, `Err(why)`
    /// for a failure. `listed` is every member still listed (including
    /// malformed ones, which never answer); state of members no longer listed
    /// is dropped. Returns what changed.
    pub fn observe<'a>(
        &mut self,
        results: impl IntoIterator<Item = (&'a str, Result<(), &'a str>)>,
        listed: impl IntoIterator<Item = &'a str>,
        now_ms: u64,
    ) -> HealthChanges {
        let mut changes = HealthChanges::default();
        for (member, result) in results {
            let before = self.members.get(member);
            let mut h = before.cloned().unwrap_or_default();
            match result {
                Ok(()) => {
                    h = Health {
                        answered: true,
                        ..Health::default()
                    }
                }
                Err(why) => {
                    h.failures = (h.failures + 1).min(self.threshold);
                    if h.failing_since_ms.is_none() {
                        h.failing_since_ms = Some(now_ms);
                        h.reason = Some(clean_reason(why));
                    }
                }
            }
            if before != Some(&h) {
                self.members.insert(member.to_string(), h.clone());
                changes.set.insert(member.to_string(), h);
            }
        }
        let listed: std::collections::HashSet<&str> = listed.into_iter().collect();
        let gone: Vec<String> = self
            .members
            .keys()
            .filter(|m| !listed.contains(m.as_str()))
            .cloned()
            .collect();
        for m in gone {
            self.members.remove(&m);
            changes.set.remove(&m);
            changes.removed.push(m);
        }
        changes.removed.sort();
        changes
    }

    /// Members that have been failing for at least `after_ms`, for `--forget-after`.
    pub fn forgettable(&self, now_ms: u64, after_ms: u64) -> Vec<String> {
        let mut v: Vec<String> = self
            .members
            .iter()
            .filter(|(_, h)| {
                h.failing_since_ms
                    .is_some_and(|s| now_ms.saturating_sub(s) >= after_ms)
            })
            .map(|(m, _)| m.clone())
            .collect();
        v.sort();
        v
    }

    pub fn iter(&self) -> impl Iterator<Item = (&str, &Health)> {
        self.members.iter().map(|(m, h)| (m.as_str(), h))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const OK: Result<(), &str> = Ok(());
    const FAIL: Result<(), &str> = Err("timeout");

    #[test]
    fn changes_from_the_stored_form_bring_it_back_to_this_liveness() {
        let mut l = Liveness::new(1);
        l.observe([("a", OK), ("b", OK)], ["a", "b"], 1);
        l.observe([("b", FAIL)], ["a", "b"], 2);
        let b = l.health("b").unwrap().clone();
        let stored: HashMap<String, String> = [
            ("a".to_string(), l.health("a").unwrap().encode()),
            ("b".to_string(), "1 0 0".to_string()),
            ("gone".to_string(), "1 0 0".to_string()),
        ]
        .into();
        let c = l.changes_from(&stored);
        assert_eq!(c.set, BTreeMap::from([("b".to_string(), b)]));
        assert_eq!(c.removed, ["gone"]);
        let mut applied = stored.clone();
        for (m, h) in &c.set {
            applied.insert(m.clone(), h.encode());
        }
        for m in &c.removed {
            applied.remove(m);
        }
        assert!(l.changes_from(&applied).is_empty());
    }

    #[test]
    fn default_threshold_is_one_failure() {
        let mut l = Liveness::new(1);
        assert!(!l.is_live("a"), "never answered");
        l.observe([("a", OK)], ["a"], 1);
        assert!(l.is_live("a"));
        l.observe([("a", FAIL)], ["a"], 2);
        assert!(!l.is_live("a"));
        l.observe([("a", OK)], ["a"], 3);
        assert!(l.is_live("a"), "one answer brings it back");
    }

    #[test]
    fn threshold_and_saturation() {
        let mut l = Liveness::new(3);
        l.observe([("a", OK)], ["a"], 0);
        for t in 1..=2 {
            let c = l.observe([("a", FAIL)], ["a"], t);
            assert!(!c.is_empty());
            assert!(l.is_live("a"), "failure {t} of 3");
        }
        assert!(!l.observe([("a", FAIL)], ["a"], 3).is_empty());
        assert!(!l.is_live("a"));
        // Dead and staying dead: nothing changes, nothing to write.
        assert!(l.observe([("a", FAIL)], ["a"], 4).is_empty());
        assert_eq!(l.health("a").unwrap().failing_since_ms, Some(1));
        // Never answered: failing from the first ping, yet not live below threshold.
        l.observe([("b", FAIL)], ["a", "b"], 5);
        assert!(!l.is_live("b"));
    }

    #[test]
    fn unlisted_members_are_dropped() {
        let mut l = Liveness::new(1);
        l.observe([("a", OK), ("b", OK)], ["a", "b"], 0);
        let c = l.observe([("a", OK)], ["a"], 1);
        assert_eq!(c.removed, ["b"]);
        assert!(c.set.is_empty());
        assert!(l.health("b").is_none());
    }

    #[test]
    fn persisted_state_round_trips() {
        let mut l = Liveness::new(2);
        l.observe([("a", OK), ("b", FAIL), ("c", OK)], ["a", "b", "c"], 10);
        l.observe([("c", FAIL)], ["a", "b", "c"], 11);
        let stored: Vec<(String, String)> =
            l.iter().map(|(m, h)| (m.to_string(), h.encode())).collect();
        let (r, bad) =
            Liveness::restore(2, stored.into_iter().chain([("x".into(), "junk".into())]));
        assert_eq!(bad, [("x".to_string(), "junk".to_string())]);
        assert_eq!(r, l);
        for m in ["a", "b", "c"] {
            assert_eq!(r.is_live(m), l.is_live(m), "{m}");
        }
        assert_eq!(
            Health::decode("1 0 0"),
            Some(Health {
                answered: true,
                ..Health::default()
            })
        );
        let h = Health::decode("0 1 9 unavailable: connection refused\u{1b}[31m").unwrap();
        assert_eq!(
            h.reason.as_deref(),
            Some("unavailable: connection refused [31m")
        );
        assert_eq!(Health::decode(&h.encode()), Some(h));
        assert_eq!(Health::decode("1 0"), None);
        assert_eq!(Health::decode("2 0 0"), None);
    }

    #[test]
    fn unsaved_changes_merge_last_word_wins() {
        let h = |f| Health {
            answered: true,
            failures: f,
            ..Health::default()
        };
        let mut a = HealthChanges {
            set: [("x".into(), h(1))].into(),
            removed: vec!["y".into()],
        };
        a.merge(HealthChanges {
            set: [("y".into(), h(0))].into(),
            removed: vec!["x".into()],
        });
        assert_eq!(a.set.keys().collect::<Vec<_>>(), ["y"]);
        assert_eq!(a.removed, ["x"]);
    }

    #[test]
    fn forgettable_after_duration() {
        let mut l = Liveness::new(1);
        l.observe([("a", FAIL), ("b", OK)], ["a", "b"], 1_000);
        assert!(l.forgettable(1_500, 1_000).is_empty());
        assert_eq!(l.forgettable(2_000, 1_000), ["a"]);
    }
}
