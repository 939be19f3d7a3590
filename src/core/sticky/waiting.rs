//! Sticky assignment while newcomers wait (`-join-delay`): no unit a live
//! member holds moves; the free units (new ones, those of members that
//! left, failed or drain) go to the members furthest below their share,
//! which puts them on the waiting newcomers first.
//!
//! Pure, and like [`super::assign`] a function of its inputs as sets. A
//! rolling restart (start a newcomer, stop an old member, repeat) then
//! moves each unit once: the old member's units go to the newcomer that
//! waits, which is exactly as far below its share as the old member's
//! departure left.

use std::cmp::Reverse;
use std::collections::{BTreeSet, BinaryHeap};

use xxhash_rust::xxh3::xxh3_64_with_seed;

use super::{FREE, FREE_SEED, Holders, Table, held_alone, rows, targets};
use crate::core::ring::{self, member_position, sorted_distinct};

/// The table while the members in `waiting` wait: every held unit stays
/// with its holder, a contested unit with the holder that scores it
/// lowest, and each free unit (in the order of `xxh3(unit, FREE_SEED)`)
/// goes to the member with the largest deficit below its target (the
/// balanced row size of [`super::assign`]), a waiting member first on a
/// tie. Every live member is in the result; rows are sorted.
pub fn assign_waiting<'a, 'c, R>(
    current: impl IntoIterator<Item = (&'c str, R)>,
    members: &[(&'a str, u32)],
    waiting: &BTreeSet<&str>,
    units: &[&'a str],
) -> Table<'a>
where
    R: IntoIterator<Item = &'c str>,
{
    let (names, weights) = ring::normalize_weighted(members);
    let units = sorted_distinct(units);
    if names.is_empty() {
        return Table::new();
    }
    let Holders { mut of, contested } = Holders::read(current, &names, &units);
    let positions: Vec<u64> = names.iter().map(|m| member_position(m)).collect();
    for pairs in contested.chunk_by(|a, b| a.0 == b.0) {
        let unit = pairs[0].0 as usize;
        let best = pairs
            .iter()
            .map(|&(_, m)| m as usize)
            .min_by_key(|&m| (xxh3_64_with_seed(units[unit].as_bytes(), positions[m]), m))
            .expect("a contested unit has holders");
        of[unit] = best as u32;
    }
    let count = held_alone(&of, names.len());
    let shares = ring::shares(&weights, units.len());
    let targets = targets(&shares, &count, &positions, units.len());
    // Largest deficit first; then a waiting member; then the ring's order.
    let mut heap: BinaryHeap<(i64, bool, Reverse<u64>, Reverse<usize>)> = (0..names.len())
        .map(|m| {
            let deficit = targets[m] as i64 - count[m] as i64;
            (
                deficit,
                waiting.contains(names[m]),
                Reverse(positions[m]),
                Reverse(m),
            )
        })
        .collect();
    let mut free: Vec<(u64, usize)> = of
        .iter()
        .enumerate()
        .filter(|&(_, &h)| h == FREE)
        .map(|(u, _)| (xxh3_64_with_seed(units[u].as_bytes(), FREE_SEED), u))
        .collect();
    free.sort_unstable();
    for (_, unit) in free {
        let (deficit, w, p, Reverse(m)) = heap.pop().expect("members");
        of[unit] = m as u32;
        heap.push((deficit - 1, w, p, Reverse(m)));
    }
    rows(&names, &units, &of)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn rows_of<'a>(t: &Table<'a>, m: &str) -> Vec<&'a str> {
        t.get(m).cloned().unwrap_or_default()
    }

    #[test]
    fn a_leave_while_a_newcomer_waits_moves_its_units_to_the_newcomer_only() {
        let units: Vec<String> = (0..30).map(|u| format!("u{u:02}")).collect();
        let units: Vec<&str> = units.iter().map(String::as_str).collect();
        let members = [("a:1", 1), ("b:1", 1), ("c:1", 1)];
        let before =
            super::super::assign(std::iter::empty::<(&str, Vec<&str>)>(), &members, &units);
        // c leaves, n waits: a and b keep theirs, n gets all of c's.
        let current: Vec<(&str, Vec<&str>)> = before.iter().map(|(m, u)| (*m, u.clone())).collect();
        let live = [("a:1", 1), ("b:1", 1), ("n:1", 1)];
        let waiting = BTreeSet::from(["n:1"]);
        let t = assign_waiting(
            current.iter().map(|(m, u)| (*m, u.iter().copied())),
            &live,
            &waiting,
            &units,
        );
        assert_eq!(rows_of(&t, "a:1"), before["a:1"]);
        assert_eq!(rows_of(&t, "b:1"), before["b:1"]);
        assert_eq!(rows_of(&t, "n:1"), before["c:1"]);
        // Nothing left, nothing moves: a waiting newcomer takes no unit.
        let steady: Vec<(&str, Vec<&str>)> = before.iter().map(|(m, u)| (*m, u.clone())).collect();
        let all = [("a:1", 1), ("b:1", 1), ("c:1", 1), ("n:1", 1)];
        let t = assign_waiting(
            steady.iter().map(|(m, u)| (*m, u.iter().copied())),
            &all,
            &waiting,
            &units,
        );
        for m in ["a:1", "b:1", "c:1"] {
            assert_eq!(rows_of(&t, m), before[m]);
        }
        assert!(rows_of(&t, "n:1").is_empty());
    }

    mod properties {
        use super::*;
        use proptest::prelude::*;

        const MEMBERS: [&str; 6] = ["a:1", "b:1", "c:1", "d:1", "e:1", "f:1"];

        proptest! {
            /// A partition of the units over the live members; every unit
            /// one live member held stays; every row is within its target
            /// or holds no free unit above it (free units only fill
            /// deficits while any is left); with nothing free, a waiting
            /// member gets nothing.
            #[test]
            fn nothing_held_moves_and_free_units_fill_the_deficits(
                rows in prop::collection::vec((0..6usize, prop::collection::vec(0..30usize, 0..12)), 0..7),
                live in prop::collection::vec(prop::bool::weighted(0.8), 6),
                waiting in prop::collection::vec(prop::bool::weighted(0.3), 6),
                n_units in 1..30usize,
            ) {
                let names: Vec<String> = (0..30).map(|u| format!("u{u:02}")).collect();
                let units: Vec<&str> = names[..n_units].iter().map(String::as_str).collect();
                let current: Vec<(&str, Vec<&str>)> = rows
                    .iter()
                    .map(|(m, us)| (MEMBERS[*m], us.iter().map(|&u| names[u].as_str()).collect()))
                    .collect();
                let members: Vec<(&str, u32)> = MEMBERS
                    .iter()
                    .zip(&live)
                    .filter(|(_, l)| **l)
                    .map(|(m, _)| (*m, 1))
                    .collect();
                prop_assume!(!members.is_empty());
                let waits: BTreeSet<&str> = MEMBERS
                    .iter()
                    .zip(&waiting)
                    .filter(|(_, w)| **w)
                    .map(|(m, _)| *m)
                    .collect();
                let t = assign_waiting(
                    current.iter().map(|(m, u)| (*m, u.iter().copied())),
                    &members,
                    &waits,
                    &units,
                );
                let mut all: Vec<&str> = t.values().flatten().copied().collect();
                all.sort_unstable();
                prop_assert_eq!(&all, &units, "a partition");
                prop_assert_eq!(t.len(), members.len(), "a row per live member");
                let is_live = |m: &str| members.iter().any(|(x, _)| *x == m);
                let mut holders: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
                for (m, us) in &current {
                    for u in us {
                        if is_live(m) && units.contains(u) {
                            holders.entry(*u).or_default().insert(*m);
                        }
                    }
                }
                let mut free = 0;
                for u in &units {
                    match holders.get(u) {
                        Some(h) if h.len() == 1 => {
                            let m = h.iter().next().unwrap();
                            prop_assert!(t[m].contains(u), "{} stays with {}", u, m);
                        }
                        Some(_) => {}
                        None => free += 1,
                    }
                }
                if free == 0 && holders.values().all(|h| h.len() == 1) {
                    for w in &waits {
                        if is_live(w) {
                            let held = current.iter().any(|(m, us)| m == w && us.iter().any(|u| units.contains(u)));
                            prop_assert!(held || t[w].is_empty(), "{} took units while waiting", w);
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn free_units_beyond_the_newcomers_share_go_to_the_others() {
        let units: Vec<String> = (0..40).map(|u| format!("u{u:02}")).collect();
        let units: Vec<&str> = units.iter().map(String::as_str).collect();
        // a holds 10; 30 are free (two members left); n waits.
        let current = [("a:1", units[..10].to_vec())];
        let live = [("a:1", 1), ("b:1", 1), ("n:1", 1)];
        let waiting = BTreeSet::from(["n:1"]);
        let t = assign_waiting(
            current.iter().map(|(m, u)| (*m, u.iter().copied())),
            &live,
            &waiting,
            &units,
        );
        let sizes: Vec<usize> = ["a:1", "b:1", "n:1"]
            .iter()
            .map(|m| rows_of(&t, m).len())
            .collect();
        assert_eq!(sizes.iter().sum::<usize>(), 40);
        assert!(sizes.iter().all(|&s| (13..=14).contains(&s)), "{sizes:?}");
        assert_eq!(rows_of(&t, "a:1").len(), 13);
        assert!(
            units[..10].iter().all(|u| rows_of(&t, "a:1").contains(u)),
            "a keeps its own"
        );
    }
}
