//! The holder's side of `core::quarantine`: the lone deaths of a round
//! counted against the units their rows held, `{T}:quarantine` as read,
//! and the cycle's inputs without the units given to nobody (quarantined,
//! or held for a trial). Pure: the round, the read and the time come in.
//!
//! Guarantees, tested below: a death the mass-failure guard judges (a
//! suspect, or a burst it fired for) counts against nothing; the inputs a
//! plan sees lack exactly the excluded units, and are the same `Arc` while
//! neither the lists nor the excluded set changed (so a steady cycle stays
//! one that plans nothing).

use std::collections::{BTreeSet, HashMap};
use std::hash::BuildHasherDefault;
use std::sync::Arc;

use super::HolderView;
use super::observe::Observed;
use crate::core::inputs::Inputs;
use crate::core::quarantine::QuarantineRule;
use crate::core::row::split_row;
use crate::core::sticky::StrHasher;
use crate::core::table::MatchingTable;
use crate::edge::redis::Reports;

/// The inputs without the excluded units, for the inputs and excluded set
/// they were made of.
#[derive(Clone)]
pub(in crate::coordinator) struct Excluded {
    source: Arc<Inputs>,
    key: u128,
    pub(in crate::coordinator) inputs: Arc<Inputs>,
    /// Their units' part of the solve's memo key (`solve::units_key`).
    pub(in crate::coordinator) units_key: u128,
}

impl HolderView {
    /// Takes `{T}:quarantine` as read with the reports (`None`: not read
    /// this cycle). A key of another type keeps what was known; the first
    /// unreadable field of each change is logged.
    pub(in crate::coordinator::holder) fn observe_quarantine(
        &mut self,
        rule: QuarantineRule,
        read: Option<Reports>,
        key: &str,
    ) {
        self.quarantine.configure(rule);
        let error = match read {
            None => return,
            Some(Ok(pairs)) => {
                let bad = self.quarantine.observe_stored(pairs);
                if bad.len() != self.bad_quarantine {
                    if let Some(b) = bad.first() {
                        tracing::warn!(key, count = bad.len(), field = %b.field, why = b.why, "fields of the quarantine that name no unit are skipped");
                    }
                    self.bad_quarantine = bad.len();
                }
                None
            }
            Some(Err(e)) => Some(e.to_string()),
        };
        if error != self.quarantine_error {
            if let Some(e) = &error {
                tracing::warn!(key, error = %e, "quarantined units unreadable; the ones known stay quarantined");
            }
            self.quarantine_error = error;
        }
    }

    /// Counts the round's lone deaths against the units of the dead
    /// members' rows in `granted` (the table members hold). A burst the
    /// guard fired for retracts the deaths counted within `together_ms`
    /// before it.
    pub(in crate::coordinator::holder) fn count_deaths(
        &mut self,
        rule: QuarantineRule,
        observed: &Observed,
        granted: Option<&MatchingTable>,
        now_ms: u64,
        together_ms: u64,
    ) {
        self.quarantine.configure(rule);
        if !rule.enabled() {
            return;
        }
        if observed.review.new_episode() {
            self.quarantine
                .retract_since(now_ms.saturating_sub(together_ms));
        }
        let Some(granted) = granted else { return };
        let deaths: Vec<(&str, Vec<&str>)> = observed
            .transitions
            .iter()
            .filter(|(m, live)| !live && !self.suspects.contains_key(m))
            .map(|(m, _)| (m.as_str(), granted.units_of(m)))
            .filter(|(_, units)| !units.is_empty())
            .collect();
        if deaths.is_empty() {
            return;
        }
        let quarantined = self.quarantine.observe_deaths(deaths, now_ms);
        for unit in &quarantined {
            let deaths = self.quarantine.quarantined_record(unit);
            tracing::warn!(
                unit = %unit,
                deaths = %deaths,
                "unit quarantined: members holding it kept dying; it goes to nobody until `distributor workunits quarantine release`"
            );
        }
    }

    /// The inputs a plan sees: `inputs` without the units given to nobody
    /// (the trials moved on first, by `granted` and `now_ms`); `inputs`
    /// itself when none is.
    pub(in crate::coordinator::holder) fn without_excluded(
        &mut self,
        inputs: &Arc<Inputs>,
        granted: &MatchingTable,
        now_ms: u64,
    ) -> Arc<Inputs> {
        let before: BTreeSet<String> = self.quarantine.trials().map(str::to_string).collect();
        // A trial goes to a member that may take units now.
        let eligible: Vec<&str> = inputs
            .members()
            .filter(|m| {
                self.keeps_units(m)
                    && !self.handoff.draining(m)
                    && !self.handoff.controls.cordoned(m)
            })
            .collect();
        // One pass over the table finds every trial's owner: the tick asks
        // only of units on trial when it starts (it never adds a trial
        // before it asks).
        let owners = owners_of(granted, &before);
        self.quarantine.tick(
            now_ms,
            |u| {
                debug_assert!(before.contains(u), "{u} was not on trial");
                owners.get(u).copied().flatten().map(str::to_string)
            },
            &eligible,
        );
        for (unit, member) in self.quarantine.trial_pins() {
            if !before.contains(unit) {
                tracing::info!(
                    unit,
                    member,
                    held = self.quarantine.held().len(),
                    "trying a held unit alone on a member, to see whether it dies"
                );
            }
        }
        let key = self.quarantine.key();
        if key == 0 {
            self.excluded = None;
            return Arc::clone(inputs);
        }
        if let Some(e) = &self.excluded
            && e.key == key
            && Arc::ptr_eq(&e.source, inputs)
        {
            return Arc::clone(&e.inputs);
        }
        // The same units under other members (a join, a death): the units
        // left are those of the last time, shared.
        let (units, units_key) = match &self.excluded {
            Some(e) if e.key == key && Arc::ptr_eq(&e.source.units, &inputs.units) => {
                (Arc::clone(&e.inputs.units), e.units_key)
            }
            _ => {
                let excluded = self.quarantine.excluded();
                let units: Vec<String> = inputs
                    .units
                    .iter()
                    .filter(|u| !excluded.contains(u.as_str()))
                    .cloned()
                    .collect();
                let units_key = crate::coordinator::holder::solve::units_key(&units);
                (Arc::new(units), units_key)
            }
        };
        let without = Arc::new(Inputs {
            groups: inputs.groups.clone(),
            units,
            rejections: inputs.rejections.clone(),
        });
        self.excluded = Some(Excluded {
            source: Arc::clone(inputs),
            key,
            inputs: Arc::clone(&without),
            units_key,
        });
        without
    }
}

/// The member whose row in `table` holds each of `units` (the first, by
/// id), in one pass over the rows that ends once every unit is found: the
/// rows are read in id order, so the first row found holding a unit is its
/// first by id.
fn owners_of<'t, 'u>(
    table: &'t MatchingTable,
    units: &'u BTreeSet<String>,
) -> HashMap<&'u str, Option<&'t str>, BuildHasherDefault<StrHasher>> {
    let mut owners: HashMap<&'u str, Option<&'t str>, BuildHasherDefault<StrHasher>> =
        units.iter().map(|u| (u.as_str(), None)).collect();
    let mut missing = owners.len();
    for (member, row) in table.rows() {
        if missing == 0 {
            break;
        }
        for unit in split_row(row) {
            if let Some(owner @ None) = owners.get_mut(unit) {
                *owner = Some(member.as_str());
                missing -= 1;
            }
        }
    }
    owners
}

#[cfg(test)]
mod tests {
    use super::super::tests::{inputs, live_view, table};
    use super::*;
    use crate::core::suspicion::Review;

    const RULE: QuarantineRule = QuarantineRule {
        after: 2,
        window_ms: 60_000,
        probation_ms: 1_000,
    };

    fn died(m: &str) -> Observed {
        Observed {
            review: Review::default(),
            transitions: vec![(m.to_string(), false)],
            failures: Vec::new(),
        }
    }

    #[test]
    fn lone_deaths_quarantine_and_the_inputs_lack_the_unit_until_released() {
        let inputs = Arc::new(inputs(&["a:1", "b:1", "c:1"], &["p", "u1", "u2"]));
        let mut v = live_view(&["a:1", "b:1", "c:1"], &table(&[]));
        v.observe_quarantine(RULE, Some(Ok(vec![])), "q");
        let t1 = table(&[("a:1", "p,u1"), ("b:1", "u2")]);
        v.count_deaths(RULE, &died("a:1"), Some(&t1), 1_000, 5);
        let same = v.without_excluded(&inputs, &t1, 1_000);
        assert!(
            Arc::ptr_eq(&same, &inputs),
            "nothing excluded: the same inputs"
        );
        let t2 = table(&[("b:1", "p,u2"), ("c:1", "u1")]);
        v.count_deaths(RULE, &died("b:1"), Some(&t2), 2_000, 5);
        let without = v.without_excluded(&inputs, &t2, 2_000);
        assert_eq!(*without.units, vec!["u1".to_string(), "u2".to_string()]);
        let again = v.without_excluded(&inputs, &t2, 2_001);
        assert!(Arc::ptr_eq(&again, &without), "unchanged: the same Arc");
        // Another member list over the same units (a join): new inputs,
        // the units left shared rather than copied again.
        let mut joined =
            (*super::super::tests::inputs(&["a:1", "b:1", "c:1", "d:1"], &["p", "u1", "u2"]))
                .clone();
        joined.units = Arc::clone(&inputs.units);
        let joined = Arc::new(joined);
        let after_join = v.without_excluded(&joined, &t2, 2_002);
        assert_eq!(after_join.groups, joined.groups);
        assert!(Arc::ptr_eq(&after_join.units, &without.units));
        assert_eq!(v.quarantine.unsaved().len(), 1);
        v.quarantine.saved(&["p".to_string()]);
        // Released by an operator: placed again.
        v.observe_quarantine(RULE, Some(Ok(vec![])), "q");
        let back = v.without_excluded(&inputs, &t2, 3_000);
        assert!(Arc::ptr_eq(&back, &inputs));
    }

    #[test]
    fn a_suspects_death_and_a_bursts_deaths_count_for_nothing() {
        let mut v = live_view(&["a:1", "b:1", "c:1"], &table(&[]));
        let t = table(&[("a:1", "p"), ("b:1", "p"), ("c:1", "p")]);
        v.suspects.insert(
            "a:1".into(),
            crate::core::suspicion::Suspect {
                replica: "r".into(),
                since_ms: 0,
            },
        );
        v.count_deaths(RULE, &died("a:1"), Some(&t), 1_000, 5);
        assert_eq!(v.quarantine.deaths_of("p"), 0, "a suspect");
        v.count_deaths(RULE, &died("b:1"), Some(&t), 2_000, 5);
        assert_eq!(v.quarantine.deaths_of("p"), 1);
        // The guard fires for a burst 3 ms later: b:1's death was in it.
        let mut burst = died("c:1");
        v.suspects.insert(
            "c:1".into(),
            crate::core::suspicion::Suspect {
                replica: "r".into(),
                since_ms: 2_003,
            },
        );
        burst.review = Review {
            episodes: vec![("g".into(), vec!["c:1".into()], 3)],
            ..Review::default()
        };
        v.count_deaths(RULE, &burst, Some(&t), 2_003, 5);
        assert_eq!(v.quarantine.deaths_of("p"), 0);
    }

    /// The member whose row in `table` holds `unit` (the first, by id),
    /// by a scan of its own.
    fn owner_of<'t>(table: &'t MatchingTable, unit: &str) -> Option<&'t str> {
        table
            .rows()
            .iter()
            .find(|(_, row)| split_row(row).any(|u| u == unit))
            .map(|(m, _)| m.as_str())
    }

    #[test]
    fn one_pass_finds_each_trials_first_owner_by_id_as_the_scan_of_each_does() {
        // `u1` in two rows (a hand edit): the first by id owns it.
        let t = table(&[("a:1", "u0,u1"), ("b:1", "u1,u2"), ("c:1", "u3")]);
        let wanted: BTreeSet<String> = ["u1", "u2", "u3", "gone"]
            .iter()
            .map(|u| u.to_string())
            .collect();
        let owners = owners_of(&t, &wanted);
        for u in &wanted {
            assert_eq!(owners[u.as_str()], owner_of(&t, u), "{u}");
        }
        assert_eq!(owners["u1"], Some("a:1"));
        assert_eq!(owners["gone"], None);
        assert!(owners_of(&t, &BTreeSet::new()).is_empty());
    }
}
