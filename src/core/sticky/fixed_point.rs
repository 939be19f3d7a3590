//! When a sticky solve can be skipped. Pure.
//!
//! Guarantee: [`holds_exactly`] is true only when the solver's current view
//! (the stored rows, plus each unit in transit counted as its
//! destination's) is exactly the table the last solve returned. For the
//! same inputs (live members, weights, units) with the count balance, no
//! move limit, no controls but pins and no waiting newcomer,
//! [`super::assign`] of a table it returned is that table: every member
//! holds exactly its target (the ceilings go to the members above their
//! floor, who are exactly the ones given them), so nothing is over, nothing
//! has room, nothing is free or contested, and the rows come back sorted as
//! they were. Pins only set their units apart: the solve of the others is
//! such a solve of its own. The caller
//! checks the inputs (the memo's key); the property test below checks the
//! claim through [`MatchingTable::solve_counted`], the holder's own call.
//!
//! Cost: a comparison of each stored row with the table's, and a pass
//! side by side over the rows that differ or have units coming (the table's
//! rows are checked increasing once per table, and the memoised table is
//! the same one every cycle); no hashing of the table. A handoff cycle after
//! a change no longer solves 100,000 units again to find the table it is
//! already handing off towards.

use std::collections::{BTreeMap, HashMap};

use crate::core::table::{MatchingTable, decode_row};

/// Whether `rows` (member → stored row), with `also_held` (destination,
/// unit) counted as held by the destination, hold exactly `table`'s units
/// (a sticky result: rows strictly increasing, every unit in one row): the
/// same units per member, each once, and no unit held by a member without
/// a row in `table`.
pub fn holds_exactly(
    rows: &BTreeMap<String, String>,
    also_held: &[(&str, &str)],
    table: &MatchingTable,
) -> bool {
    if !table.rows_increasing() {
        return false;
    }
    let table = table.rows();
    let mut pending: HashMap<&str, Vec<&str>> = HashMap::new();
    for &(m, u) in also_held {
        if !table.contains_key(m) {
            return false;
        }
        pending.entry(m).or_default().push(u);
    }
    let increasing = |r: &[&str]| r.windows(2).all(|w| w[0] < w[1]);
    for (m, row) in rows {
        if !table.contains_key(m) && !row.is_empty() {
            return false;
        }
    }
    for (m, want) in table {
        // A row stored as the table has it, with nothing coming: the same
        // units (increasing, as checked once per table above), compared
        // without decoding. Most rows are such rows.
        if !pending.contains_key(m.as_str()) && rows.get(m) == Some(want) {
            continue;
        }
        let want = decode_row(want);
        let have = rows.get(m).map(|r| decode_row(r)).unwrap_or_default();
        let mut coming = pending.remove(m.as_str()).unwrap_or_default();
        if have.len() + coming.len() != want.len() || !increasing(&want) || !increasing(&have) {
            return false;
        }
        // `have` within `want`, side by side.
        let mut j = 0;
        for h in &have {
            while want.get(j).is_some_and(|w| w < h) {
                j += 1;
            }
            if want.get(j) != Some(h) {
                return false;
            }
            j += 1;
        }
        // The rest, each once, in `want` and not held already: with the
        // sizes equal, held ∪ coming is then exactly `want`.
        coming.sort_unstable();
        if !increasing(&coming)
            || coming
                .iter()
                .any(|u| want.binary_search(u).is_err() || have.binary_search(u).is_ok())
        {
            return false;
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::inputs::Inputs;
    use crate::core::table::MatchingTable;

    fn solve(
        inp: &Inputs,
        current: &MatchingTable,
        also_held: &[(&str, &str)],
        weights: &[u32],
    ) -> MatchingTable {
        crate::core::sticky::tests::solve_sticky(inp, current, also_held, weights, false).0
    }

    /// A table of `(member, unit)` index pairs, as `m<i>` and `u<jj>`.
    fn starting_table(pairs: &[(usize, usize)]) -> MatchingTable {
        let mut rows: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for (m, u) in pairs {
            rows.entry(format!("m{m}"))
                .or_default()
                .push(format!("u{u:02}"));
        }
        MatchingTable::from_rows(rows.into_iter().map(|(m, us)| (m, us.join(","))))
    }

    /// `t` with the units `in_transit` marks taken out of their rows, and
    /// those units as (destination, unit) pairs.
    fn partly_in_transit(
        t: &MatchingTable,
        in_transit: &[bool],
    ) -> (MatchingTable, Vec<(String, String)>) {
        let mut granted = BTreeMap::new();
        let mut also = Vec::new();
        for (m, row) in t.rows() {
            let (moving, kept): (Vec<&str>, Vec<&str>) = decode_row(row)
                .into_iter()
                .partition(|u| in_transit[u[1..].parse::<usize>().unwrap()]);
            also.extend(moving.iter().map(|u| (m.clone(), u.to_string())));
            granted.insert(m.clone(), kept.join(","));
        }
        (MatchingTable::from_rows(granted), also)
    }

    proptest::proptest! {
        /// A sticky result, in any state of its handoff (some units still in
        /// transit towards their member), is recognised, and solving from it
        /// returns it: the skip gives what the solve would.
        #[test]
        fn a_table_handed_off_towards_is_a_fixed_point(
            members in 1..7usize,
            units in 0..60usize,
            start in proptest::collection::vec((0..9usize, 0..60usize), 0..80),
            weights in proptest::collection::vec(1..4u32, 1..4),
            in_transit in proptest::collection::vec(proptest::bool::ANY, 60),
        ) {
            let names: Vec<String> = (0..members).map(|i| format!("m{i}")).collect();
            let unit_names: Vec<String> = (0..units).map(|i| format!("u{i:02}")).collect();
            let inp = Inputs::one_group("g", &names, &unit_names);
            // Any starting table: members that left, units twice, unlisted ones.
            let x = starting_table(&start);
            let t = solve(&inp, &x, &[], &weights);
            proptest::prop_assert!(holds_exactly(t.rows(), &[], &t));
            proptest::prop_assert_eq!(&solve(&inp, &t, &[], &weights), &t);
            // Part of the way there: some units in transit to their member.
            let (granted, also) = partly_in_transit(&t, &in_transit);
            let also: Vec<(&str, &str)> = also.iter().map(|(m, u)| (m.as_str(), u.as_str())).collect();
            proptest::prop_assert!(holds_exactly(granted.rows(), &also, &t));
            proptest::prop_assert_eq!(&solve(&inp, &granted, &also, &weights), &t);
        }
    }

    /// [`solve`] under `controls` (the holder passes a quarantine's
    /// trials as pins).
    fn solve_pinned(
        inp: &Inputs,
        current: &MatchingTable,
        also_held: &[(&str, &str)],
        controls: &crate::core::controls::Controls,
    ) -> MatchingTable {
        use crate::core::table::{Assignment, Solve};
        let how = Solve {
            assignment: Assignment::Sticky,
            current: Some(current),
            also_held,
            controls: Some(controls),
            ..Solve::ring()
        };
        MatchingTable::solve_counted(inp, |_| true, &how).0
    }

    proptest::proptest! {
        /// Pins alone keep the fixed point the holder's skip relies on
        /// (`coordinator::holder::solve`): the pinned units are placed
        /// apart, and the others are a sticky solve of their own. Pins
        /// to members that left count for nothing.
        #[test]
        fn a_table_solved_under_pins_alone_is_a_fixed_point(
            members in 1..7usize,
            units in 1..60usize,
            start in proptest::collection::vec((0..9usize, 0..60usize), 0..80),
            pins in proptest::collection::vec((0..60usize, 0..9usize), 0..6),
            in_transit in proptest::collection::vec(proptest::bool::ANY, 60),
        ) {
            let names: Vec<String> = (0..members).map(|i| format!("m{i}")).collect();
            let unit_names: Vec<String> = (0..units).map(|i| format!("u{i:02}")).collect();
            let inp = Inputs::one_group("g", &names, &unit_names);
            let x = starting_table(&start);
            let mut controls = crate::core::controls::Controls::default();
            for (u, m) in pins {
                controls.pins.insert(format!("u{:02}", u % units), format!("m{m}"));
            }
            let t = solve_pinned(&inp, &x, &[], &controls);
            proptest::prop_assert!(holds_exactly(t.rows(), &[], &t));
            proptest::prop_assert_eq!(&solve_pinned(&inp, &t, &[], &controls), &t);
            let (granted, also) = partly_in_transit(&t, &in_transit);
            let also: Vec<(&str, &str)> = also.iter().map(|(m, u)| (m.as_str(), u.as_str())).collect();
            proptest::prop_assert!(holds_exactly(granted.rows(), &also, &t));
            proptest::prop_assert_eq!(&solve_pinned(&inp, &granted, &also, &controls), &t);
        }
    }

    fn rows(r: &[(&str, &str)]) -> BTreeMap<String, String> {
        r.iter()
            .map(|(m, u)| (m.to_string(), u.to_string()))
            .collect()
    }

    #[test]
    fn anything_else_is_solved_again() {
        let t = MatchingTable::from_rows(rows(&[("a", "u1,u2"), ("b", "u3")]));
        assert!(holds_exactly(t.rows(), &[], &t));
        assert!(holds_exactly(
            &rows(&[("a", "u1"), ("b", "u3")]),
            &[("a", "u2")],
            &t
        ));
        // A unit missing, held twice, held elsewhere, or by a member without a row.
        assert!(!holds_exactly(&rows(&[("a", "u1"), ("b", "u3")]), &[], &t));
        assert!(!holds_exactly(
            &rows(&[("a", "u1,u2"), ("b", "u3")]),
            &[("a", "u2")],
            &t
        ));
        assert!(!holds_exactly(
            &rows(&[("a", "u1,u3"), ("b", "u3")]),
            &[],
            &t
        ));
        assert!(!holds_exactly(
            &rows(&[("a", "u1"), ("b", "u3")]),
            &[("a", "u3")],
            &t
        ));
        assert!(!holds_exactly(
            &rows(&[("a", "u1,u2"), ("b", "u3"), ("c", "u9")]),
            &[],
            &t
        ));
        assert!(!holds_exactly(t.rows(), &[("c", "u9")], &t));
        // A row out of order (not a sticky result) is not recognised.
        let unsorted = MatchingTable::from_rows(rows(&[("a", "u2,u1"), ("b", "u3")]));
        assert!(!holds_exactly(unsorted.rows(), &[], &unsorted));
        // An empty row of a member without one in the table is nothing held.
        assert!(holds_exactly(
            &rows(&[("a", "u1,u2"), ("b", "u3"), ("c", "")]),
            &[],
            &t
        ));
    }
}
