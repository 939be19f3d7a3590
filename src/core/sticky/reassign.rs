//! The sticky solve of a membership change, from the table a solve
//! returned: it reads only the rows that change. Pure.
//!
//! Guarantee: when `current` partitions the `units` listed units (every
//! listed unit in exactly one row, each row strictly increasing, as every
//! single-group solve returns its table), [`reassign`] returns exactly the
//! rows and the [`Counts`] that [`super::assign_counted`] returns for the
//! same live members and units (a property test compares the two through
//! [`crate::core::table::MatchingTable::solve_counted`]). The units list
//! must be the one `current` was solved for: a unit listed or unlisted
//! since goes through the full solve.
//!
//! Under pins (a quarantine's trials), [`reassign_fixed`] returns what the
//! full solve under them returns: that solve sets each pinned unit apart
//! and solves the others from the rows without it, which is [`reassign`]
//! of those rows when `current` was solved under the same pins (each
//! pinned unit in its member's row). A second property test compares them.
//!
//! Why it is the same: in a partition nothing is contested, a unit is free
//! exactly when its row's member left, and a live member holds its whole
//! row. So the full solve's steps need, per member, only its row's length
//! (targets, the minimum), the units of the rows that give some up (step
//! 3) and of the rows that left (step 5); its orders on unit indices are
//! orders on the names, since the listed units are sorted and distinct.
//!
//! Cost: a byte count over the table (each row's length, and the check that
//! the rows hold `units` units), then O(members, units that move and rows
//! that change): a member leaving 1,000 × 100,000 decodes its 100 units,
//! not 100,000. A row that changes is decoded and encoded whole (one hash
//! field per member is the stored layout).

use std::collections::BTreeMap;

use xxhash_rust::xxh3::xxh3_64_with_seed;

use super::{Counts, FREE_SEED, SLOT_SEED, least_moves, targets};
use crate::core::ring::{self, member_position};
use crate::core::row::{SEPARATOR, decode_row};

/// A live member's row in the result.
#[derive(Debug, PartialEq, Eq)]
pub enum Row<'c> {
    /// Its stored row, unchanged (`""` for a new member that gets nothing).
    Same(&'c str),
    /// Its new row, encoded (units sorted).
    New(String),
}

/// [`reassign`]'s result: every live member's row, in name order, and
/// what [`super::assign_counted`] counts of it.
#[derive(Debug)]
pub struct Reassigned<'a, 'c> {
    pub rows: Vec<(&'a str, Row<'c>)>,
    pub counts: Counts,
}

/// The sticky solve for live `members` (with weights) from `current`
/// (member → stored row), a partition of `units` listed units; see the
/// module docs. `None` where the full solve must run: no live member, no
/// unit held by one (the full solve starts from the ring then), or rows
/// that do not hold `units` units between them (so not that partition).
pub fn reassign<'a, 'c>(
    current: &'c BTreeMap<String, String>,
    members: &[(&'a str, u32)],
    units: usize,
) -> Option<Reassigned<'a, 'c>> {
    reassign_fixed(current, members, units, &[])
}

/// [`reassign`] with `fixed` (live member, unit) pairs set apart, as the
/// full solve sets pinned units apart (`Controls::split`): the other units
/// are reassigned from the rows without the fixed ones, and each fixed unit
/// joins its member's row after; it counts as kept. `current` must
/// partition all `units`, fixed ones included, with every fixed unit in
/// its member's row (a table solved under these pins): `None` where one is
/// not (a pin set since), and the full solve runs.
///
/// Cost: [`reassign`]'s, plus decoding the rows of the members with fixed
/// units (a quarantine's trials: a few rows).
pub fn reassign_fixed<'a, 'c>(
    current: &'c BTreeMap<String, String>,
    members: &[(&'a str, u32)],
    units: usize,
    fixed: &[(&'a str, &str)],
) -> Option<Reassigned<'a, 'c>> {
    // Each member's fixed units, and its row without them.
    let mut apart: BTreeMap<&str, (Vec<&str>, String)> = BTreeMap::new();
    for &(m, u) in fixed {
        apart.entry(m).or_default().0.push(u);
    }
    for (m, (fixed_units, without)) in &mut apart {
        fixed_units.sort_unstable();
        let row = decode_row(current.get(*m)?);
        let mut left = Vec::with_capacity(row.len());
        let mut wanted = fixed_units.iter().peekable();
        for unit in row {
            if wanted.next_if(|&&f| f == unit).is_none() {
                left.push(unit);
            }
        }
        if wanted.next().is_some() {
            return None;
        }
        *without = encode(left.into_iter(), 0);
    }
    let row_of = |m: &str| match apart.get(m) {
        Some((_, without)) => Some(without.as_str()),
        None => current.get(m).map(String::as_str),
    };
    let rows = current.iter().map(|(m, row)| {
        let row = apart
            .get(m.as_str())
            .map_or(row.as_str(), |(_, w)| w.as_str());
        (m.as_str(), row)
    });
    let free_units = units.checked_sub(fixed.len())?;
    let (names, new, mut counts) = reassign_rows(row_of, rows, members, free_units)?;
    counts.kept += fixed.len();
    let rows = names
        .into_iter()
        .zip(new)
        .map(|(name, new)| {
            let same = current.get(name).map_or("", String::as_str);
            let row = match (new, apart.get(name)) {
                (None, _) => Row::Same(same),
                (Some(new), None) => Row::New(new),
                (Some(new), Some((fixed_units, _))) => {
                    let merged = Merge {
                        a: decode_row(&new).into_iter().peekable(),
                        b: fixed_units.iter().copied().peekable(),
                    };
                    let extra: usize = fixed_units.iter().map(|u| u.len() + 1).sum();
                    Row::New(encode(merged, new.len() + extra))
                }
            };
            (name, row)
        })
        .collect();
    Some(Reassigned { rows, counts })
}

/// The reassignment itself, over rows given by `row_of` (a live member's
/// stored row) and `stored_rows` (every stored row, for those of members
/// that left):
/// the live members in name order, each one's new row (`None`: its stored
/// one), and the counts.
#[allow(clippy::type_complexity)]
fn reassign_rows<'a, 's>(
    row_of: impl Fn(&str) -> Option<&'s str>,
    stored_rows: impl Iterator<Item = (&'s str, &'s str)>,
    members: &[(&'a str, u32)],
    units: usize,
) -> Option<(Vec<&'a str>, Vec<Option<String>>, Counts)> {
    let (names, weights) = ring::normalize_weighted(members);
    if names.is_empty() {
        return None;
    }
    let stored: Vec<&'s str> = names.iter().map(|m| row_of(m).unwrap_or("")).collect();
    let held: Vec<usize> = stored.iter().map(|row| row_len(row)).collect();
    // Step 5's free units start as the rows of members that left.
    let mut free: Vec<&'s str> = Vec::new();
    for (m, row) in stored_rows {
        if names.binary_search(&m).is_err() {
            free.extend(decode_row(row));
        }
    }
    let departed = free.len();
    let kept_before: usize = held.iter().sum();
    if kept_before == 0 || kept_before + departed != units {
        return None;
    }

    let positions: Vec<u64> = names.iter().map(|m| member_position(m)).collect();
    let shares = ring::shares(&weights, units);
    let minimum = least_moves(&held, &shares, units);
    let targets = targets(&shares, &held, &positions, units);

    // Step 3: a row above its target gives up its highest scores (unit
    // names order equal scores as the full solve's unit indices do).
    let mut rows: Vec<Option<String>> = vec![None; names.len()];
    for m in 0..names.len() {
        let excess = held[m].saturating_sub(targets[m]);
        if excess == 0 {
            continue;
        }
        let mut scored: Vec<(u64, &'s str)> = decode_row(stored[m])
            .into_iter()
            .map(|u| (xxh3_64_with_seed(u.as_bytes(), positions[m]), u))
            .collect();
        let keep = scored.len() - excess;
        scored.select_nth_unstable(keep);
        free.extend(scored[keep..].iter().map(|&(_, u)| u));
        let mut kept: Vec<&'s str> = scored[..keep].iter().map(|&(_, u)| u).collect();
        kept.sort_unstable();
        rows[m] = Some(encode(kept.iter().copied(), stored[m].len()));
    }
    let given_up = free.len() - departed;

    // Step 5 (step 4 has nothing to do: no unit is contested): free units
    // in hash order into the room's slots in hash order.
    let mut order: Vec<(u64, &'s str)> = free
        .iter()
        .map(|&u| (xxh3_64_with_seed(u.as_bytes(), FREE_SEED), u))
        .collect();
    let mut slots: Vec<(u64, u32)> = Vec::with_capacity(order.len());
    for m in 0..names.len() {
        for j in 0..targets[m].saturating_sub(held[m]) as u64 {
            let key = xxh3_64_with_seed(names[m].as_bytes(), SLOT_SEED.wrapping_add(j));
            slots.push((key, m as u32));
        }
    }
    // Targets sum to the units, and every kept unit fills one.
    assert_eq!(order.len(), slots.len(), "room and free units differ");
    order.sort_unstable();
    slots.sort_unstable();
    let mut received: BTreeMap<u32, Vec<&'s str>> = BTreeMap::new();
    for (&(_, unit), &(_, m)) in order.iter().zip(&slots) {
        received.entry(m).or_default().push(unit);
    }
    // A member with room gave nothing up: its row is its stored one, with
    // the units it receives merged in.
    for (m, mut new) in received {
        let m = m as usize;
        new.sort_unstable();
        let extra: usize = new.iter().map(|u| u.len() + 1).sum();
        let merged = Merge {
            a: decode_row(stored[m]).into_iter().peekable(),
            b: new.into_iter().peekable(),
        };
        rows[m] = Some(encode(merged, stored[m].len() + extra));
    }

    let counts = Counts {
        moved: given_up,
        kept: kept_before - given_up,
        minimum,
    };
    Some((names, rows, counts))
}

/// Sorted units as a stored row.
fn encode<'c>(units: impl Iterator<Item = &'c str>, capacity: usize) -> String {
    let mut row = String::with_capacity(capacity);
    for unit in units {
        if !row.is_empty() {
            row.push(SEPARATOR);
        }
        row.push_str(unit);
    }
    row
}

/// Two sorted, disjoint sequences of units, merged in order.
struct Merge<A: Iterator, B: Iterator> {
    a: std::iter::Peekable<A>,
    b: std::iter::Peekable<B>,
}

impl<'c, A: Iterator<Item = &'c str>, B: Iterator<Item = &'c str>> Iterator for Merge<A, B> {
    type Item = &'c str;

    fn next(&mut self) -> Option<&'c str> {
        match (self.a.peek(), self.b.peek()) {
            (Some(a), Some(b)) if b < a => self.b.next(),
            (Some(_), _) => self.a.next(),
            (None, _) => self.b.next(),
        }
    }
}

/// How many units a stored row holds, without decoding it.
fn row_len(row: &str) -> usize {
    if row.is_empty() {
        0
    } else {
        let separators = row.bytes().filter(|&b| b == SEPARATOR as u8).count();
        separators + 1
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::core::inputs::Inputs;
    use crate::core::sticky::tests::solve_sticky;
    use crate::core::table::MatchingTable;

    fn names(prefix: &str, picked: &[bool]) -> Vec<String> {
        picked
            .iter()
            .enumerate()
            .filter(|&(_, &p)| p)
            .map(|(i, _)| format!("{prefix}{i}"))
            .collect()
    }

    /// `units` over `members` (not empty), each to the member its `owners`
    /// index picks.
    fn partition(
        members: &[String],
        units: &[String],
        owners: &[proptest::sample::Index],
    ) -> MatchingTable {
        let mut rows: BTreeMap<String, Vec<&str>> =
            members.iter().map(|m| (m.clone(), Vec::new())).collect();
        for (u, owner) in units.iter().zip(owners) {
            rows.get_mut(&members[owner.index(members.len())])
                .unwrap()
                .push(u);
        }
        MatchingTable::from_rows(rows.into_iter().map(|(m, r)| (m, r.join(","))))
    }

    /// `members` with the weight `solve_sticky` gives each (by its index).
    fn weighted<'a>(members: &'a [String], weights: &[u32]) -> Vec<(&'a str, u32)> {
        members
            .iter()
            .map(|m| {
                (
                    m.as_str(),
                    weights[m[1..].parse::<usize>().unwrap() % weights.len()],
                )
            })
            .collect()
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        /// From any partition of the units over any members (balanced or
        /// not, solved or not), after any change of the members and their
        /// weights, the rows read alone give the full solve's table and
        /// counts.
        #[test]
        fn gives_what_the_full_solve_gives(
            before in proptest::collection::vec(any::<bool>(), 1..12),
            after in proptest::collection::vec(any::<bool>(), 1..12),
            units in 0usize..80,
            owners in proptest::collection::vec(any::<proptest::sample::Index>(), 80),
            weights in proptest::collection::vec(1u32..5, 1..6),
            solve_first in any::<bool>(),
        ) {
            let before = names("m", &before);
            let after = names("m", &after);
            let units: Vec<String> = (0..units).map(|i| format!("u{i:03}")).collect();
            prop_assume!(!before.is_empty());
            let mut current = partition(&before, &units, &owners);
            if solve_first {
                current = solve_sticky(&Inputs::one_group("g", &before, &units), &current, &[], &weights, false).0;
            }
            let inp = Inputs::one_group("g", &after, &units);
            // The shortcut is taken whenever a live member holds a unit.
            let live = weighted(&after, &weights);
            let holds = after.iter().any(|m| !current.units_of(m).is_empty());
            prop_assert_eq!(reassign(current.rows(), &live, units.len()).is_some(), holds);
            let full = solve_sticky(&inp, &current, &[], &weights, false);
            let fast = solve_sticky(&inp, &current, &[], &weights, true);
            prop_assert_eq!(fast, full);
        }
    }

    /// [`MatchingTable::solve_counted`] of a sticky solve under `pins`
    /// (unit → member), weights by member index as `solve_sticky` gives
    /// them; `solved` vouches for `current` as the last solve's table.
    fn solve_pinned(
        inp: &Inputs,
        current: &MatchingTable,
        pins: &[(String, String)],
        weights: &[u32],
        solved: bool,
    ) -> (MatchingTable, Option<crate::core::table::Moves>) {
        use crate::core::controls::Controls;
        use crate::core::table::{Assignment, Solve};
        let weight = |m: &str| weights[m[1..].parse::<usize>().unwrap() % weights.len()];
        let mut controls = Controls::default();
        controls.pins.extend(pins.iter().cloned());
        let how = Solve {
            assignment: Assignment::Sticky,
            current: Some(current),
            weight: &weight,
            controls: Some(&controls),
            current_is_solved: solved,
            ..Solve::ring()
        };
        MatchingTable::solve_counted(inp, |_| true, &how)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        /// Under pins (a quarantine's trials), from a table solved under
        /// the same pins, after any change of the members and weights, the
        /// rows read alone give the full solve's table and counts; the
        /// shortcut declines a pin set since (its unit elsewhere), and the
        /// full solve runs.
        #[test]
        fn under_pins_gives_what_the_full_solve_gives(
            before in proptest::collection::vec(any::<bool>(), 1..12),
            after in proptest::collection::vec(any::<bool>(), 1..12),
            units in 0usize..80,
            owners in proptest::collection::vec(any::<proptest::sample::Index>(), 80),
            weights in proptest::collection::vec(1u32..5, 1..6),
            pins_before in proptest::collection::vec((0..80usize, 0..12usize), 0..6),
            pins_after in proptest::collection::vec((0..80usize, 0..12usize), 0..6),
            same_pins in any::<bool>(),
        ) {
            let before = names("m", &before);
            let after = names("m", &after);
            prop_assume!(!before.is_empty() && units > 0);
            let units: Vec<String> = (0..units).map(|i| format!("u{i:03}")).collect();
            let pins = |p: &[(usize, usize)]| -> Vec<(String, String)> {
                p.iter().map(|&(u, m)| (units[u % units.len()].clone(), format!("m{m}"))).collect()
            };
            let (pins_before, pins_after) = (pins(&pins_before), pins(&pins_after));
            let start = partition(&before, &units, &owners);
            let before_inp = Inputs::one_group("g", &before, &units);
            let (current, _) = solve_pinned(&before_inp, &start, &pins_before, &weights, false);
            let pins_now = if same_pins { &pins_before } else { &pins_after };
            let inp = Inputs::one_group("g", &after, &units);
            let full = solve_pinned(&inp, &current, pins_now, &weights, false);
            let fast = solve_pinned(&inp, &current, pins_now, &weights, true);
            prop_assert_eq!(&fast, &full);
            // The shortcut is taken where it applies: the same pins, each
            // fixed unit's member fixed at the first solve too, and a live
            // member holding a unit that is not fixed.
            let pinned: BTreeMap<&str, &str> =
                pins_now.iter().map(|(u, m)| (u.as_str(), m.as_str())).collect();
            let fixed: Vec<(&str, &str)> = pinned
                .iter()
                .filter(|(_, m)| after.iter().any(|a| a == *m))
                .map(|(u, m)| (*m, *u))
                .collect();
            let live = weighted(&after, &weights);
            let holds_free = after.iter().any(|m| {
                current.units_of(m).iter().any(|&u| !fixed.contains(&(m.as_str(), u)))
            });
            let applies = same_pins && fixed.iter().all(|(m, _)| before.iter().any(|b| b == m)) && holds_free;
            let taken = reassign_fixed(current.rows(), &live, units.len(), &fixed).is_some();
            if applies {
                prop_assert!(taken);
            }
        }
    }

    /// The shortcut is taken where it applies and declines where the rows
    /// are not a partition of the units: the count check, and a table of
    /// nobody's units (the full solve starts from the ring then).
    #[test]
    fn declines_what_is_not_its_case() {
        let current = MatchingTable::from_rows([
            ("a".to_string(), "u1,u3".to_string()),
            ("b".to_string(), "u2".to_string()),
        ]);
        let live = [("a", 1), ("c", 1)];
        let r = reassign(current.rows(), &live, 3).expect("a partition of 3 units");
        assert_eq!(r.counts.kept, 2);
        assert_eq!(r.rows.len(), 2);
        assert_eq!(r.rows[0], ("a", Row::Same("u1,u3")));
        assert_eq!(r.rows[1], ("c", Row::New("u2".to_string())));
        // A unit missing, or one more listed: not that partition.
        assert!(reassign(current.rows(), &live, 4).is_none());
        assert!(reassign(current.rows(), &live, 2).is_none());
        // Every holder gone, or nobody live.
        assert!(reassign(current.rows(), &[("c", 1)], 3).is_none());
        assert!(reassign(current.rows(), &[], 3).is_none());
    }
}
