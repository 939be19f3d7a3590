//! The matching table: member id → comma-joined work units, as stored in Redis.
//!
//! Pure. [`MatchingTable::solve`] runs the ring once per group over the whole unit
//! list and merges the rows. Guarantees:
//! - within each group every valid unit has exactly one owner among the group's
//!   live members (no gaps, no overlaps), and row sizes differ by at most one;
//! - the table is a function of the *sets* of live members and units only;
//! - a member with no units has no row (Redis hashes cannot hold an empty value
//!   usefully, and `HGET` of a missing field is how a worker learns it has no work).
//! - [`MatchingTable::digest`] identifies the content, so "changed or not" needs no
//!   read of the stored table.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use xxhash_rust::xxh3::Xxh3;

use crate::inputs::Inputs;
use crate::ring;

/// Separator between units in a row. Units containing it are rejected on input.
pub const SEPARATOR: char = ',';

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MatchingTable {
    rows: BTreeMap<String, String>,
}

impl MatchingTable {
    /// Splits all units among the live members of every group.
    pub fn solve(inputs: &Inputs, is_live: impl Fn(&str) -> bool) -> MatchingTable {
        let units: Vec<&str> = inputs.units.iter().map(String::as_str).collect();
        let mut rows = BTreeMap::new();
        for group in &inputs.groups {
            let live: Vec<&str> = group
                .members
                .iter()
                .map(String::as_str)
                .filter(|m| is_live(m))
                .collect();
            for (member, owned) in ring::assign(&live, &units) {
                if !owned.is_empty() {
                    rows.insert(member.to_string(), owned.join(","));
                }
            }
        }
        MatchingTable { rows }
    }

    /// Builds a table from stored rows (for tests, status and diffs).
    pub fn from_rows(rows: impl IntoIterator<Item = (String, String)>) -> MatchingTable {
        MatchingTable {
            rows: rows.into_iter().filter(|(_, v)| !v.is_empty()).collect(),
        }
    }

    pub fn rows(&self) -> &BTreeMap<String, String> {
        &self.rows
    }

    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// Number of members with at least one unit.
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    /// Total number of (member, unit) assignments across all groups.
    pub fn assignments(&self) -> usize {
        self.rows.values().map(|v| decode_row(v).len()).sum()
    }

    pub fn units_of(&self, member: &str) -> Vec<&str> {
        self.rows
            .get(member)
            .map(|v| decode_row(v))
            .unwrap_or_default()
    }

    /// A 128-bit content digest (XXH3-128 over length-prefixed rows), hex encoded.
    pub fn digest(&self) -> String {
        let mut h = Xxh3::new();
        for (member, value) in &self.rows {
            h.update(&(member.len() as u64).to_le_bytes());
            h.update(member.as_bytes());
            h.update(&(value.len() as u64).to_le_bytes());
            h.update(value.as_bytes());
        }
        let mut out = String::with_capacity(32);
        write!(out, "{:032x}", h.digest128()).expect("writing to a String");
        out
    }

    /// How many units change owner (or appear, or disappear) from `self` to `next`.
    pub fn moved_units(&self, next: &MatchingTable) -> usize {
        fn owners(t: &MatchingTable) -> std::collections::BTreeSet<(&str, &str)> {
            t.rows
                .iter()
                .flat_map(|(m, v)| decode_row(v).into_iter().map(move |u| (u, m.as_str())))
                .collect()
        }
        let (a, b) = (owners(self), owners(next));
        a.symmetric_difference(&b).count()
    }
}

/// Splits a stored row. An empty or missing row means "no units".
pub fn decode_row(value: &str) -> Vec<&str> {
    if value.is_empty() {
        Vec::new()
    } else {
        value.split(SEPARATOR).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inputs::{Group, Inputs};

    fn inputs(groups: &[(&str, &[&str])], units: &[&str]) -> Inputs {
        Inputs {
            groups: groups
                .iter()
                .map(|(n, m)| Group {
                    name: n.to_string(),
                    members: m.iter().map(|s| s.to_string()).collect(),
                    malformed: vec![],
                })
                .collect(),
            units: units.iter().map(|s| s.to_string()).collect(),
            rejections: vec![],
        }
    }

    #[test]
    fn every_group_splits_every_unit() {
        let units: Vec<String> = (0..10).map(|i| format!("u{i}")).collect();
        let refs: Vec<&str> = units.iter().map(String::as_str).collect();
        let inp = inputs(
            &[("a", &["a:1", "a:2", "a:3"]), ("b", &["b:1", "b:2"])],
            &refs,
        );
        let t = MatchingTable::solve(&inp, |_| true);
        for group in &inp.groups {
            let mut all: Vec<&str> = group.members.iter().flat_map(|m| t.units_of(m)).collect();
            all.sort();
            assert_eq!(all, refs, "group {}", group.name);
            let sizes: Vec<usize> = group.members.iter().map(|m| t.units_of(m).len()).collect();
            assert!(
                sizes.iter().max().unwrap() - sizes.iter().min().unwrap() <= 1,
                "{sizes:?}"
            );
        }
        assert_eq!(t.assignments(), 20);
    }

    #[test]
    fn dead_members_get_nothing_and_empty_rows_are_omitted() {
        let inp = inputs(&[("a", &["a:1", "a:2", "a:3"])], &["x"]);
        let t = MatchingTable::solve(&inp, |m| m != "a:2");
        assert_eq!(t.len(), 1);
        assert!(t.units_of("a:2").is_empty());
        assert!(MatchingTable::solve(&inputs(&[("a", &[])], &["x"]), |_| true).is_empty());
        assert!(MatchingTable::solve(&inputs(&[("a", &["a:1"])], &[]), |_| true).is_empty());
    }

    #[test]
    fn digest_tracks_content() {
        let inp = inputs(&[("a", &["a:1", "a:2"])], &["x", "y", "z"]);
        let t1 = MatchingTable::solve(&inp, |_| true);
        let t2 = MatchingTable::solve(&inp, |_| true);
        assert_eq!(t1.digest(), t2.digest());
        assert_eq!(t1.digest().len(), 32);
        let t3 = MatchingTable::solve(&inp, |m| m == "a:1");
        assert_ne!(t1.digest(), t3.digest());
        assert_eq!(t1.moved_units(&t1), 0);
        assert!(t1.moved_units(&t3) > 0);
        // Length prefixes keep ("ab","c") and ("a","bc") apart.
        let p = MatchingTable::from_rows([("ab".to_string(), "c".to_string())]);
        let q = MatchingTable::from_rows([("a".to_string(), "bc".to_string())]);
        assert_ne!(p.digest(), q.digest());
    }

    #[test]
    fn decode() {
        assert!(decode_row("").is_empty());
        assert_eq!(decode_row("a,b"), ["a", "b"]);
    }
}
