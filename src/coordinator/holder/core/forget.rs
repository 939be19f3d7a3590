//! Whom `-forget-after` removes from the lists: members failing for at least
//! that long, never one that still owes the release of a unit revoked from
//! it, never one that keeps units (live, or suspected of a mass failure),
//! and never in a group that is mostly failing (a mass outage, or the
//! holder's own network). Malformed entries, which never answer, are
//! forgotten like any long-failing member. Pure: the cycle removes the
//! pairs returned, fenced (`forget.lua`).

use super::HolderView;
use crate::core::inputs::Inputs;
use crate::core::suspicion;

impl HolderView {
    /// The (list, entry as listed) pairs to remove at `now_ms`: failing for
    /// `after_ms` or more, as above. `guard_percent`: the mass-failure
    /// guard's percentage (100: off).
    pub(in crate::coordinator::holder) fn forgettable(
        &self,
        inputs: &Inputs,
        after_ms: u64,
        guard_percent: u32,
        now_ms: u64,
    ) -> Vec<(String, Vec<u8>)> {
        // A member that owes the release of a unit revoked from it stays:
        // forgetting removes its report, and with it the proof of what it
        // released; it is forgotten once it owes nothing.
        let owing = self.handoff.owing();
        let failing_long = |m: &str| {
            !owing.contains(m)
                && self.liveness.health(m).is_some_and(|h| {
                    h.failing_since_ms
                        .is_some_and(|s| now_ms.saturating_sub(s) >= after_ms)
                })
        };
        inputs
            .groups
            .iter()
            .filter(|g| {
                !suspicion::mostly_failing(&g.members, |m| self.keeps_units(m), guard_percent)
            })
            .flat_map(|g| {
                let members = g
                    .members
                    .iter()
                    .filter(|m| failing_long(m) && !self.keeps_units(m))
                    .map(|m| (g.name.clone(), m.as_bytes().to_vec()));
                let malformed = g
                    .malformed
                    .iter()
                    .filter(|m| failing_long(&m.name))
                    .map(|m| (g.name.clone(), m.raw.clone()));
                members.chain(malformed)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {

    use super::super::tests::{inputs, live_view, table, with_transit};
    use super::*;

    const AFTER: u64 = 2_000;

    /// `failing` fail from `t` ms on (their first failure), the rest answer.
    fn view(live: &[&str], failing: &[&str], t: u64) -> HolderView {
        let granted = table(&[("a:1", "u1")]);
        let mut v = live_view(live, &granted);
        v.liveness.observe(
            failing.iter().map(|m| (*m, Err("refused"))),
            live.iter().chain(failing).copied(),
            t,
        );
        v
    }

    fn names(pairs: &[(String, Vec<u8>)]) -> Vec<String> {
        pairs
            .iter()
            .map(|(_, m)| String::from_utf8_lossy(m).into_owned())
            .collect()
    }

    #[test]
    fn a_member_failing_long_enough_is_forgotten_and_not_before() {
        let inputs = inputs(&["a:1", "b:2", "c:3", "d:4"], &["u1"]);
        let v = view(&["a:1", "b:2", "c:3"], &["d:4"], 1_000);
        assert!(v.forgettable(&inputs, AFTER, 50, 2_999).is_empty());
        let got = v.forgettable(&inputs, AFTER, 50, 3_000);
        assert_eq!(names(&got), ["d:4"]);
        assert_eq!(got[0].0, "g", "removed from its own list");
    }

    #[test]
    fn a_member_that_owes_a_release_is_never_forgotten() {
        let inputs = inputs(&["a:1", "b:2", "c:3", "d:4"], &["u1"]);
        let mut v = view(&["a:1", "b:2", "c:3"], &["d:4"], 0);
        with_transit(&mut v, table(&[("a:1", "u1")]), "u1", ("d:4", "a:1"), 30, 5);
        assert!(
            v.forgettable(&inputs, AFTER, 50, 60_000).is_empty(),
            "its report proves its releases: it stays while it owes one"
        );
    }

    #[test]
    fn nobody_is_forgotten_in_a_mostly_failing_group() {
        let inputs = inputs(&["a:1", "b:2", "c:3"], &["u1"]);
        let v = view(&["a:1"], &["b:2", "c:3"], 0);
        assert!(v.forgettable(&inputs, AFTER, 50, 60_000).is_empty());
        assert_eq!(
            names(&v.forgettable(&inputs, AFTER, 100, 60_000)),
            ["b:2", "c:3"],
            "with the guard off, a group failing together is forgotten too"
        );
    }

    #[test]
    fn a_suspect_of_a_mass_failure_is_never_forgotten() {
        let inputs = inputs(&["a:1", "b:2", "c:3", "d:4"], &["u1"]);
        let mut v = view(&["a:1", "b:2", "c:3"], &["d:4"], 0);
        v.suspects.insert(
            "d:4".into(),
            crate::core::suspicion::Suspect {
                replica: "r".into(),
                since_ms: 0,
            },
        );
        assert!(v.forgettable(&inputs, AFTER, 50, 60_000).is_empty());
    }

    #[test]
    fn a_malformed_entry_is_forgotten_as_listed() {
        let raw: &[&[u8]] = &[b"a:1", b"b:2", b"c:3", b"no-port"];
        let (groups, _) = crate::core::inputs::normalize_groups(&[(
            "g",
            raw.iter()
                .map(|x| x.to_vec())
                .collect::<Vec<_>>()
                .as_slice(),
        )]);
        let inputs = Inputs {
            groups,
            units: vec!["u1".into()].into(),
            rejections: Vec::new(),
        };
        let bad = inputs.groups[0].malformed[0].name.clone();
        let v = view(&["a:1", "b:2", "c:3"], &[bad.as_str()], 0);
        let got = v.forgettable(&inputs, AFTER, 50, 60_000);
        assert_eq!(got, [("g".to_string(), b"no-port".to_vec())]);
    }
}
