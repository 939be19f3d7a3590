//! One round of ping results taken into the holder's view: liveness (with
//! the changes still to save), each member's group, and the mass-failure
//! guard's review. Pure: the cycle collects the round and passes its
//! results in.
//!
//! Guarantees, tested below: a member listed without a result this round
//! keeps its state; a member no longer listed is forgotten; malformed list
//! entries fail in a full round only (they never answer); most of a group
//! failing at once makes its members suspects (their units stay) until a
//! later round confirms or clears them, and what changed is kept to save.

use std::collections::{HashMap, HashSet};

use super::HolderView;
use crate::core::inputs::Inputs;
use crate::core::suspicion::{self, Guard, Review};
use crate::edge::grpc::{PingFailure, PingReport};

/// What one round's results are judged with.
#[derive(Debug, Clone, Copy)]
pub(in crate::coordinator::holder) struct Judge<'a> {
    pub(in crate::coordinator::holder) guard: Guard,
    /// This replica, named in the suspects it records.
    pub(in crate::coordinator::holder) replica_id: &'a str,
    pub(in crate::coordinator::holder) now_ms: u64,
}

/// What a round of pings (or of refusals) did to the view.
#[derive(Default)]
pub(in crate::coordinator::holder) struct Observed {
    pub(in crate::coordinator::holder) review: Review,
    /// Members whose liveness changed: (member, live now).
    pub(in crate::coordinator::holder) transitions: Vec<(String, bool)>,
    pub(in crate::coordinator::holder) failures: Vec<(String, PingFailure)>,
}

impl HolderView {
    /// Takes one round of ping reports into the view: refusals (`gone`) to
    /// the handoff, then liveness and the mass-failure guard
    /// ([`HolderView::observe_round`]); returns what changed.
    pub(in crate::coordinator::holder) fn take_round(
        &mut self,
        inputs: &Inputs,
        listed: &[String],
        reports: Vec<PingReport>,
        was_live: &HashSet<String>,
        full: bool,
        judge: Judge<'_>,
    ) -> Observed {
        let why_failed: Vec<String> = reports
            .iter()
            .map(|r| {
                r.result
                    .as_ref()
                    .err()
                    .map(ToString::to_string)
                    .unwrap_or_default()
            })
            .collect();
        let results: Vec<(&str, Result<(), &str>)> = reports
            .iter()
            .zip(&why_failed)
            .map(|(r, why)| {
                (
                    r.member.as_str(),
                    r.result.as_ref().map(|_| ()).map_err(|_| why.as_str()),
                )
            })
            .collect();
        self.handoff.observe_pings(&reports);
        let review = self.observe_round(inputs, listed, &results, was_live, full, judge);
        drop(results);
        let transitions = inputs
            .members()
            .filter(|m| self.liveness.is_live(m) != was_live.contains(*m))
            .map(|m| (m.to_string(), self.liveness.is_live(m)))
            .collect();
        let failures = reports
            .into_iter()
            .filter_map(|r| r.result.err().map(|e| (r.member, e)))
            .collect();
        Observed {
            review,
            transitions,
            failures,
        }
    }

    /// Takes one round into the view and returns the guard's review.
    /// `results`: each member with a result this round (`Err`: why it
    /// failed); `listed`: every listed member; `was_live`: the members live
    /// before the round; `full`: a full round, whose malformed entries fail
    /// too (a handoff cycle's refusals are not one).
    pub(in crate::coordinator::holder) fn observe_round(
        &mut self,
        inputs: &Inputs,
        listed: &[String],
        results: &[(&str, Result<(), &str>)],
        was_live: &HashSet<String>,
        full: bool,
        judge: Judge<'_>,
    ) -> Review {
        let malformed = inputs
            .groups
            .iter()
            .filter(|_| full)
            .flat_map(|g| g.malformed.iter().map(|m| (m.name.as_str(), Err(m.reason))));
        for g in &inputs.groups {
            for m in &g.members {
                // Allocates only for a member new to its group.
                if self.handoff.former_group.get(m) != Some(&g.name) {
                    self.handoff.former_group.insert(m.clone(), g.name.clone());
                }
            }
        }
        let changes = self.liveness.observe(
            results.iter().copied().chain(malformed),
            listed.iter().map(String::as_str),
            judge.now_ms,
        );
        self.unsaved.merge(changes);
        // Most of a group failing at once: keep their units until confirmed.
        // Members failed alone shortly before count with this round, so
        // that a burst split over rounds is judged as one.
        let answered: HashMap<&str, bool> = results.iter().map(|(m, r)| (*m, r.is_ok())).collect();
        let groups = inputs.group_members();
        let together = judge.guard.together_ms;
        self.recent_failures
            .retain(|_, at| judge.now_ms.saturating_sub(*at) <= together);
        let recent: HashSet<&str> = self.recent_failures.keys().map(String::as_str).collect();
        let liveness = &self.liveness;
        let review = suspicion::review(
            judge.guard,
            &mut self.suspects,
            &groups,
            was_live,
            |m| liveness.is_live(m),
            &answered,
            &recent,
            judge.replica_id,
            judge.now_ms,
        );
        drop(recent);
        if together > 0 {
            for (m, _) in results.iter().filter(|(_, r)| r.is_err()) {
                if was_live.contains(*m)
                    && !self.liveness.is_live(m)
                    && !self.suspects.contains_key(*m)
                {
                    self.recent_failures.insert(m.to_string(), judge.now_ms);
                }
            }
        }
        self.unsaved_suspects.record(&review, &self.suspects);
        review
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{inputs, live_view, table};
    use super::*;

    const JUDGE: Judge<'static> = Judge {
        guard: Guard {
            percent: 50,
            confirm_ms: 10_000,
            together_ms: 5,
        },
        replica_id: "r1",
        now_ms: 1_000,
    };

    fn listed(inputs: &Inputs) -> Vec<String> {
        inputs.members().map(str::to_string).collect()
    }

    fn live(v: &HolderView, inputs: &Inputs) -> HashSet<String> {
        inputs
            .members()
            .filter(|m| v.liveness.is_live(m))
            .map(str::to_string)
            .collect()
    }

    #[test]
    fn a_failure_is_unsaved_until_written_and_a_silent_member_keeps_its_state() {
        let inputs = inputs(&["a:1", "b:2", "c:3", "d:4"], &["u1"]);
        let mut v = live_view(&["a:1", "b:2", "c:3", "d:4"], &table(&[]));
        v.unsaved = Default::default();
        let was = live(&v, &inputs);
        let review = v.observe_round(
            &inputs,
            &listed(&inputs),
            &[("a:1", Ok(())), ("d:4", Err("refused"))],
            &was,
            true,
            JUDGE,
        );
        assert!(!review.new_episode(), "one of four is no mass failure");
        assert!(!v.liveness.is_live("d:4"), "threshold 1: failed at once");
        assert!(v.liveness.is_live("b:2"), "no result: its state stays");
        assert!(v.unsaved.set.contains_key("d:4"), "to be saved");
        assert_eq!(
            v.handoff.former_group.get("d:4").map(String::as_str),
            Some("g")
        );
    }

    #[test]
    fn most_of_a_group_failing_at_once_makes_suspects_not_failures() {
        let inputs = inputs(&["a:1", "b:2", "c:3", "d:4"], &["u1"]);
        let mut v = live_view(&["a:1", "b:2", "c:3", "d:4"], &table(&[]));
        let was = live(&v, &inputs);
        let review = v.observe_round(
            &inputs,
            &listed(&inputs),
            &[
                ("a:1", Ok(())),
                ("b:2", Err("timeout")),
                ("c:3", Err("timeout")),
                ("d:4", Err("timeout")),
            ],
            &was,
            true,
            JUDGE,
        );
        assert!(review.new_episode());
        assert!(
            ["b:2", "c:3", "d:4"].iter().all(|m| v.keeps_units(m)),
            "units stay"
        );
        assert_eq!(v.suspects["b:2"].replica, "r1");
        assert!(
            !v.unsaved_suspects.is_empty(),
            "the suspects are saved with the next write"
        );
    }

    /// Issue 40, item 2: a lone refusal is acted on in its own round (no
    /// gathering window); the rest of its burst, a few ms later, is judged
    /// with it as one, and the guard fires for them as it would have for
    /// all at once. Past `together_ms`, the earlier failure no longer counts.
    #[test]
    fn a_burst_whose_first_death_was_acted_on_alone_is_judged_as_one() {
        let members = ["a:1", "b:2", "c:3", "d:4", "e:5"];
        let inputs = inputs(&members, &["u1"]);
        for (later_ms, fires) in [(4, true), (6, false)] {
            let mut v = live_view(&members, &table(&[]));
            let was = live(&v, &inputs);
            let first = v.observe_round(
                &inputs,
                &listed(&inputs),
                &[("e:5", Err("refused"))],
                &was,
                false,
                JUDGE,
            );
            assert!(!first.new_episode(), "one of five");
            assert!(!v.keeps_units("e:5"), "failed at once: its units move");
            // Two more: 3 of 5 together is most of the group; 2 of 4 is not.
            let was = live(&v, &inputs);
            let later = Judge {
                now_ms: JUDGE.now_ms + later_ms,
                ..JUDGE
            };
            let burst = v.observe_round(
                &inputs,
                &listed(&inputs),
                &[("c:3", Err("refused")), ("d:4", Err("refused"))],
                &was,
                false,
                later,
            );
            assert_eq!(burst.new_episode(), fires, "{later_ms} ms later");
            assert_eq!(v.keeps_units("c:3"), fires);
            assert!(!v.suspects.contains_key("e:5"), "its units moved already");
        }
    }

    #[test]
    fn malformed_entries_fail_in_full_rounds_only() {
        let raw: Vec<Vec<u8>> = [&b"a:1"[..], b"no-port"]
            .iter()
            .map(|x| x.to_vec())
            .collect();
        let (groups, _) = crate::core::inputs::normalize_groups(&[("g", raw.as_slice())]);
        let inputs = Inputs {
            groups,
            units: vec!["u1".into()].into(),
            rejections: Vec::new(),
        };
        let bad = inputs.groups[0].malformed[0].name.clone();
        let mut listed = listed(&inputs);
        listed.push(bad.clone());
        let mut v = live_view(&["a:1"], &table(&[]));
        let was = live(&v, &inputs);
        let no_guard = Judge {
            guard: Guard {
                percent: 100,
                confirm_ms: 0,
                together_ms: 0,
            },
            ..JUDGE
        };
        v.observe_round(&inputs, &listed, &[], &was, false, no_guard);
        assert!(
            v.liveness.health(&bad).is_none(),
            "a handoff cycle leaves it"
        );
        v.observe_round(&inputs, &listed, &[], &was, true, no_guard);
        let health = v.liveness.health(&bad).expect("a full round fails it");
        assert!(health.failures > 0 && !health.answered);
    }

    #[test]
    fn a_member_no_longer_listed_is_forgotten() {
        let before = inputs(&["a:1", "b:2"], &["u1"]);
        let mut v = live_view(&["a:1", "b:2"], &table(&[]));
        let was = live(&v, &before);
        let after = inputs(&["a:1"], &["u1"]);
        v.observe_round(
            &after,
            &listed(&after),
            &[("a:1", Ok(()))],
            &was,
            true,
            JUDGE,
        );
        assert!(v.liveness.health("b:2").is_none());
    }
}
