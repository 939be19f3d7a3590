//! One member's row against another of its rows: the units it loses, the
//! units it gains, and the units of the other row it keeps. Pure.
//!
//! Rows are sorted (every solver writes them so, and the planner keeps the
//! desired order): then both are walked side by side, with no hashing, so a
//! row that gains a few units costs one pass over it. Rows out of order (a
//! hand edit, an older writer) or with a unit twice are compared as sets,
//! with the same answers (a property test checks it). Used by the planner
//! and by the change history, the two places that compare rows on every
//! change.

use std::collections::HashSet;
use std::hash::BuildHasherDefault;

use crate::core::sticky::StrHasher;

/// Which way a unit goes, from the held row to the other.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Change {
    /// Held, not in the other row.
    Leaving,
    /// In the other row, not held.
    Incoming,
}

/// A row's units as a set (XXH3: rows of thousands of units are hashed on
/// every change).
pub(crate) type Units<'a> = HashSet<&'a str, BuildHasherDefault<StrHasher>>;

/// What a member holds, against another row of it (the row it should have,
/// or the one it has after a write).
pub(crate) enum Held<'a> {
    /// Strictly increasing, as is the desired row.
    Sorted(Vec<&'a str>),
    Set(Units<'a>),
}

impl<'a> Held<'a> {
    pub(crate) fn of(have: Vec<&'a str>, want: &[&'a str]) -> Held<'a> {
        let increasing = |r: &[&str]| r.windows(2).all(|w| w[0] < w[1]);
        if increasing(&have) && increasing(want) {
            Held::Sorted(have)
        } else {
            Held::Set(have.into_iter().collect())
        }
    }

    /// Calls `change(unit, Change::Leaving)` for each unit held and not
    /// wanted, and `change(unit, Change::Incoming)` for each wanted and not
    /// held.
    pub(crate) fn diff(&self, want: &[&'a str], mut change: impl FnMut(&'a str, Change)) {
        match self {
            Held::Sorted(have) => {
                let (mut i, mut j) = (0, 0);
                while i < have.len() || j < want.len() {
                    match (have.get(i), want.get(j)) {
                        (Some(h), Some(w)) if h == w => {
                            i += 1;
                            j += 1;
                        }
                        (Some(h), Some(w)) if h < w => {
                            change(h, Change::Leaving);
                            i += 1;
                        }
                        (Some(h), None) => {
                            change(h, Change::Leaving);
                            i += 1;
                        }
                        (_, Some(w)) => {
                            change(w, Change::Incoming);
                            j += 1;
                        }
                        (None, None) => unreachable!("the loop condition"),
                    }
                }
            }
            Held::Set(have) => {
                let wanted: Units<'a> = want.iter().copied().collect();
                for &u in have.difference(&wanted) {
                    change(u, Change::Leaving);
                }
                for &u in wanted.difference(have) {
                    change(u, Change::Incoming);
                }
            }
        }
    }

    /// The desired row `want`, in its order, filtered to the units held or
    /// `granted_now`.
    pub(crate) fn kept(
        &self,
        want: &[&'a str],
        granted_now: impl Fn(&str) -> bool,
    ) -> Vec<&'a str> {
        match self {
            Held::Sorted(have) => {
                let mut i = 0;
                want.iter()
                    .copied()
                    .filter(|w| {
                        while have.get(i).is_some_and(|h| h < w) {
                            i += 1;
                        }
                        have.get(i) == Some(w) || granted_now(w)
                    })
                    .collect()
            }
            Held::Set(have) => want
                .iter()
                .copied()
                .filter(|u| have.contains(u) || granted_now(u))
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn walk(h: &Held<'_>, want: &[&str]) -> (Vec<String>, Vec<String>, Vec<String>) {
        let (mut leaving, mut incoming) = (vec![], vec![]);
        h.diff(want, |u, c| match c {
            Change::Leaving => leaving.push(u.to_string()),
            Change::Incoming => incoming.push(u.to_string()),
        });
        leaving.sort();
        incoming.sort();
        let kept = h
            .kept(want, |u| u.ends_with('7'))
            .iter()
            .map(|u| u.to_string())
            .collect();
        (leaving, incoming, kept)
    }

    proptest::proptest! {
        /// The side-by-side walk of sorted rows finds what the sets find.
        #[test]
        fn sorted_rows_diff_as_sets_do(
            have in proptest::collection::btree_set(0..40u8, 0..20),
            want in proptest::collection::btree_set(0..40u8, 0..20),
        ) {
            let names = |s: &std::collections::BTreeSet<u8>| -> Vec<String> {
                let mut v: Vec<String> = s.iter().map(|u| format!("u{u:02}")).collect();
                v.sort();
                v
            };
            let (have, want) = (names(&have), names(&want));
            let have: Vec<&str> = have.iter().map(String::as_str).collect();
            let want: Vec<&str> = want.iter().map(String::as_str).collect();
            let sorted = Held::of(have.clone(), &want);
            proptest::prop_assert!(matches!(sorted, Held::Sorted(_)));
            let set = Held::Set(have.iter().copied().collect());
            proptest::prop_assert_eq!(walk(&sorted, &want), walk(&set, &want));
        }
    }

    #[test]
    fn rows_out_of_order_or_with_repeats_are_compared_as_sets() {
        assert!(matches!(Held::of(vec!["b", "a"], &["a"]), Held::Set(_)));
        assert!(matches!(Held::of(vec!["a", "a"], &["a"]), Held::Set(_)));
        assert!(matches!(Held::of(vec!["a"], &["b", "a"]), Held::Set(_)));
        let h = Held::of(vec!["a", "a", "c"], &["a", "b"]);
        assert_eq!(
            walk(&h, &["a", "b"]),
            (vec!["c".into()], vec!["b".into()], vec!["a".into()])
        );
    }
}
