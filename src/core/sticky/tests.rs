//! Tests of the sticky assignment. The property tests run random histories
//! (joins, leaves, weight changes, units added and removed, arbitrary tables
//! adopted, move limits) and check every step against an independent model:
//! the balance rule with exact integer arithmetic, the moves counted from
//! sets, and a lower bound on the moves found by brute force over every
//! choice of the members that get their ceiling. The result must reach that
//! bound, so no balanced table moves fewer units.

use std::collections::{BTreeMap, BTreeSet};

use proptest::prelude::*;
use proptest::sample::Index;

use super::*;

/// A table with owned strings, to carry across steps whose unit lists change.
pub(crate) type Owned = BTreeMap<String, Vec<String>>;

/// The rows of a table as [`assign`] takes them.
pub(crate) fn rows_of<'t, 'a>(
    table: &'t Table<'a>,
) -> impl Iterator<Item = (&'a str, std::iter::Copied<std::slice::Iter<'t, &'a str>>)> + 't {
    table.iter().map(|(m, row)| (*m, row.iter().copied()))
}

pub(crate) fn owned_rows(
    table: &Owned,
) -> impl Iterator<Item = (&str, impl Iterator<Item = &str>)> {
    table
        .iter()
        .map(|(m, row)| (m.as_str(), row.iter().map(String::as_str)))
}

pub(crate) fn to_owned(table: &Table<'_>) -> Owned {
    table
        .iter()
        .map(|(m, row)| (m.to_string(), row.iter().map(|u| u.to_string()).collect()))
        .collect()
}

/// The holder's sticky call (`MatchingTable::solve_counted`) for members
/// named `<letter><index>`, whose weight is `weights[index % len]`:
/// `also_held` counted as held, and `solved` the caller's word that
/// `current` is a table a solve returned (`Solve::current_is_solved`).
pub(crate) fn solve_sticky(
    inp: &crate::core::inputs::Inputs,
    current: &crate::core::table::MatchingTable,
    also_held: &[(&str, &str)],
    weights: &[u32],
    solved: bool,
) -> (
    crate::core::table::MatchingTable,
    Option<crate::core::table::Moves>,
) {
    use crate::core::table::{Assignment, MatchingTable, Solve};
    let weight = |m: &str| {
        let i: usize = m[1..].parse().expect("members are named <letter><index>");
        weights[i % weights.len()]
    };
    let how = Solve {
        assignment: Assignment::Sticky,
        current: Some(current),
        also_held,
        weight: &weight,
        current_is_solved: solved,
        ..Solve::ring()
    };
    MatchingTable::solve_counted(inp, |_| true, &how)
}

fn table<'a>(rows: &[(&'a str, &[&'a str])]) -> Table<'a> {
    rows.iter().map(|(m, us)| (*m, us.to_vec())).collect()
}

fn numbered(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}{i}")).collect()
}

fn refs(strings: &[String]) -> Vec<&str> {
    strings.iter().map(String::as_str).collect()
}

fn unweighted<'a>(members: &[&'a str]) -> Vec<(&'a str, u32)> {
    members.iter().map(|&m| (m, 1)).collect()
}

/// The inputs as the model sees them: live members and their weight (the
/// largest listed, 0 as 1), listed units, and each listed unit's holders.
struct Model<'a> {
    weights: BTreeMap<&'a str, u64>,
    units: BTreeSet<&'a str>,
    holders: BTreeMap<&'a str, BTreeSet<&'a str>>,
}

impl<'a> Model<'a> {
    fn new(current: &'a Owned, members: &[(&'a str, u32)], units: &[&'a str]) -> Model<'a> {
        let mut weights = BTreeMap::new();
        for &(m, w) in members {
            let w = u64::from(w.max(1));
            let entry = weights.entry(m).or_insert(w);
            *entry = (*entry).max(w);
        }
        let units: BTreeSet<&str> = units.iter().copied().collect();
        let mut holders: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
        for (m, row) in current {
            for u in row {
                if weights.contains_key(m.as_str()) && units.contains(u.as_str()) {
                    holders.entry(u.as_str()).or_default().insert(m.as_str());
                }
            }
        }
        Model {
            weights,
            units,
            holders,
        }
    }

    /// The single holder of a unit, if it has exactly one.
    fn holder(&self, unit: &str) -> Option<&'a str> {
        match self.holders.get(unit) {
            Some(h) if h.len() == 1 => h.first().copied(),
            _ => None,
        }
    }

    /// Units each live member holds alone (`K_i`).
    fn held(&self) -> BTreeMap<&'a str, usize> {
        let mut held: BTreeMap<&str, usize> = self.weights.keys().map(|&m| (m, 0)).collect();
        for u in &self.units {
            if let Some(h) = self.holder(u) {
                *held.get_mut(h).unwrap() += 1;
            }
        }
        held
    }

    /// Floor of each member's share and whether it has a fraction.
    fn shares(&self) -> BTreeMap<&'a str, (usize, bool)> {
        let total: u128 = self.weights.values().map(|&w| u128::from(w)).sum();
        let u = self.units.len() as u128;
        self.weights
            .iter()
            .map(|(&m, &w)| {
                let exact = u * u128::from(w);
                (m, ((exact / total) as usize, !exact.is_multiple_of(total)))
            })
            .collect()
    }

    /// The least number of moves of any balanced result, by brute force
    /// over every set of members that could get their ceiling.
    fn lower_bound(&self) -> usize {
        if self.weights.is_empty() {
            return 0;
        }
        let shares = self.shares();
        let held = self.held();
        let members: Vec<&str> = self.weights.keys().copied().collect();
        let extra = self.units.len() - shares.values().map(|s| s.0).sum::<usize>();
        assert!(members.len() <= 16, "brute force: too many members");
        let mut best = usize::MAX;
        for mask in 0u32..1 << members.len() {
            if mask.count_ones() as usize != extra {
                continue;
            }
            let mut cost = 0;
            let mut allowed = true;
            for (i, m) in members.iter().enumerate() {
                let (floor, fraction) = shares[m];
                let ceil = mask & (1 << i) != 0;
                allowed &= fraction || !ceil;
                cost += held[m].saturating_sub(floor + usize::from(ceil));
            }
            if allowed {
                best = best.min(cost);
            }
        }
        assert_ne!(best, usize::MAX, "no allowed choice of ceilings");
        best
    }

    /// The same bound in closed form: every ceiling given to a member
    /// holding more than its floor saves one move.
    fn lower_bound_closed(&self) -> usize {
        if self.weights.is_empty() {
            return 0;
        }
        let shares = self.shares();
        let held = self.held();
        let extra = self.units.len() - shares.values().map(|s| s.0).sum::<usize>();
        let over: usize = held
            .iter()
            .map(|(m, &k)| k.saturating_sub(shares[m].0))
            .sum();
        let savers = held
            .iter()
            .filter(|&(m, &k)| shares[m].1 && k > shares[m].0)
            .count();
        over - savers.min(extra)
    }

    /// Units moved from the current table to `next`, counted from sets.
    fn moved(&self, next: &Table<'_>) -> usize {
        next.iter()
            .flat_map(|(m, row)| row.iter().map(move |u| (*m, *u)))
            .filter(|&(m, u)| self.holder(u).is_some_and(|h| h != m))
            .count()
    }

    /// Every live member has a row, the rows partition the listed units,
    /// and every row is the floor or the ceiling of its exact share:
    /// `|row × Σw − U × w| < Σw`.
    fn check_balanced(&self, got: &Table<'_>) {
        if self.weights.is_empty() {
            assert!(got.is_empty(), "no members, no rows");
            return;
        }
        assert_eq!(
            got.keys().copied().collect::<Vec<_>>(),
            self.weights.keys().copied().collect::<Vec<_>>()
        );
        let mut all: Vec<&str> = got.values().flatten().copied().collect();
        all.sort_unstable();
        assert_eq!(all, self.units.iter().copied().collect::<Vec<_>>());
        for row in got.values() {
            assert!(row.is_sorted_by(|a, b| a < b), "row not sorted: {row:?}");
        }
        let total: i128 = self.weights.values().map(|&w| i128::from(w)).sum();
        for (m, row) in got {
            let exact = self.units.len() as i128 * i128::from(self.weights[m]);
            assert!(
                (row.len() as i128 * total - exact).abs() < total,
                "{m}: {} units, share {exact}/{total}",
                row.len()
            );
        }
    }

    /// The full check of a sticky result: balanced, exactly the minimal
    /// number of moves, no member losing a unit it holds unless it holds
    /// more than its new row, and [`moved`] agreeing with the model.
    fn check_sticky(&self, current: &Owned, got: &Table<'_>) {
        self.check_balanced(got);
        let bound = self.lower_bound();
        assert_eq!(bound, self.lower_bound_closed(), "closed form");
        let members: Vec<(&str, u32)> = self.weights.iter().map(|(&m, &w)| (m, w as u32)).collect();
        let units: Vec<&str> = self.units.iter().copied().collect();
        assert_eq!(
            min_moves(owned_rows(current), &members, &units),
            bound,
            "min_moves()"
        );
        let moves = self.moved(got);
        assert_eq!(moves, bound, "moves vs the minimum");
        assert_eq!(moved(owned_rows(current), got), moves, "moved()");
        let held = self.held();
        for (m, row) in got {
            let kept = row.iter().filter(|u| self.holder(u) == Some(m)).count();
            assert_eq!(
                kept,
                held[m].min(row.len()),
                "{m} keeps all it holds, up to its row"
            );
        }
    }
}

/// Solves and checks, including that solving again from the result changes
/// nothing.
fn solve_checked<'a>(current: &Owned, members: &[(&'a str, u32)], units: &[&'a str]) -> Table<'a> {
    let (got, counts) = assign_counted(owned_rows(current), members, units);
    // Its counts are what the separate readings of `current` find.
    let (moved, kept) = moved_and_kept(owned_rows(current), &got);
    let minimum = min_moves(owned_rows(current), members, units);
    assert_eq!(
        counts,
        Counts {
            moved,
            kept,
            minimum
        }
    );
    Model::new(current, members, units).check_sticky(current, &got);
    assert_eq!(assign(rows_of(&got), members, units), got, "fixed point");
    got
}

#[test]
fn no_table_is_the_ring() {
    let members = numbered("m", 5);
    let units = numbered("u", 23);
    let (members, units) = (refs(&members), refs(&units));
    let none = || std::iter::empty::<(&str, Vec<&str>)>();
    let got = assign(none(), &unweighted(&members), &units);
    assert_eq!(got, ring::assign(&members, &units));
    let weighted: Vec<(&str, u32)> = members.iter().zip(1..).map(|(&m, w)| (m, w)).collect();
    let got = assign(none(), &weighted, &units);
    assert_eq!(got, ring::assign_weighted(&weighted, &units));
    // A table whose units are all unlisted, or all in rows of departed
    // members, keeps nothing: the ring again.
    let stale = table(&[("m1", &["x", "y"]), ("gone", &["u1", "u2"])]);
    assert_eq!(
        assign(rows_of(&stale), &unweighted(&members), &units),
        ring::assign(&members, &units)
    );
    assert!(assign(none(), &[], &units).is_empty());
    let empty = assign(none(), &unweighted(&members), &[]);
    assert!(empty.len() == 5 && empty.values().all(Vec::is_empty));
}

/// Pins the tie-breaking: every replica must compute the same table from
/// the same inputs, so a change here is a breaking change, not a test fix.
#[test]
fn golden() {
    let units = numbered("workunit", 14);
    let units = refs(&units);
    let start = ring::assign(&["service1", "service2", "service3"], &units[..12]);
    // service2 leaves, service4 (weight 2) and service5 join, two units are
    // added. Shares of 14: 2.8, 2.8, 5.6, 2.8; the three ceilings go to
    // service1 and service3 (they hold 4 > 2), then service5 (the larger
    // fraction); service1 and service3 give up one unit each.
    let members = [
        ("service1", 1),
        ("service3", 1),
        ("service4", 2),
        ("service5", 1),
    ];
    let got = assign(rows_of(&start), &members, &units);
    let want = table(&[
        ("service1", &["workunit11", "workunit6", "workunit7"]),
        ("service3", &["workunit1", "workunit2", "workunit3"]),
        (
            "service4",
            &[
                "workunit0",
                "workunit10",
                "workunit13",
                "workunit4",
                "workunit8",
            ],
        ),
        ("service5", &["workunit12", "workunit5", "workunit9"]),
    ]);
    assert_eq!(got, want);
    assert_eq!(moved(rows_of(&start), &got), 2);
    // One move at a time: workunit5 goes first, workunit0 waits with
    // service1; the units of service2 and the new ones are placed at once.
    let limited = limit_moves(rows_of(&start), &got, 1);
    let want = table(&[
        (
            "service1",
            &["workunit0", "workunit11", "workunit6", "workunit7"],
        ),
        ("service3", &["workunit1", "workunit2", "workunit3"]),
        (
            "service4",
            &["workunit10", "workunit13", "workunit4", "workunit8"],
        ),
        ("service5", &["workunit12", "workunit5", "workunit9"]),
    ]);
    assert_eq!(limited, want);
}

#[test]
fn a_leave_moves_nothing_that_stays() {
    let start = table(&[
        ("a", &["u1", "u2", "u3"]),
        ("b", &["u4", "u5", "u6"]),
        ("c", &["u7", "u8", "u9"]),
    ]);
    let units = ["u1", "u2", "u3", "u4", "u5", "u6", "u7", "u8", "u9"];
    let got = assign(rows_of(&start), &unweighted(&["a", "b"]), &units);
    for m in ["a", "b"] {
        for u in &start[m] {
            assert!(got[m].contains(u), "{m} keeps {u}");
        }
    }
    let sizes: Vec<usize> = got.values().map(Vec::len).collect();
    assert!(sizes == [4, 5] || sizes == [5, 4], "{sizes:?}");
    assert_eq!(moved(rows_of(&start), &got), 0);
}

#[test]
fn a_join_takes_the_minimum() {
    let start = table(&[
        ("a", &["u1", "u2", "u3", "u4"]),
        ("b", &["u5", "u6", "u7", "u8"]),
    ]);
    let units = ["u1", "u2", "u3", "u4", "u5", "u6", "u7", "u8"];
    let members = unweighted(&["a", "b", "c", "d"]);
    let got = assign(rows_of(&start), &members, &units);
    for row in got.values() {
        assert_eq!(row.len(), 2);
    }
    assert_eq!(moved(rows_of(&start), &got), 4);
    // Three members: 8 = 3 + 3 + 2; a and b both hold 4 > 2, so both get a
    // ceiling (3), and c takes one from each.
    let got = assign(rows_of(&start), &members[..3], &units);
    assert_eq!((got["a"].len(), got["b"].len(), got["c"].len()), (3, 3, 2));
    assert_eq!(moved(rows_of(&start), &got), 2);
}

#[test]
fn adopts_duplicates_unlisted_units_and_departed_rows() {
    // x is in a's and b's rows, twice in a's; "old" is no longer listed;
    // "gone" left; a holds far too many.
    let start = table(&[
        ("a", &["p", "q", "r", "s", "t", "x", "x", "old"]),
        ("b", &["x", "y"]),
        ("gone", &["z", "w"]),
    ]);
    let units = ["p", "q", "r", "s", "t", "x", "y", "z", "w"];
    let members = unweighted(&["a", "b", "c"]);
    let got = assign(rows_of(&start), &members, &units);
    let owned = to_owned(&start);
    let (members, units) = (&members[..], &units[..]);
    Model::new(&owned, members, units).check_sticky(&owned, &got);
    // 9 units, 3 each: a keeps 3 of its 5 held, b keeps y and may keep x
    // (it has room; a has none), c gets the rest.
    assert_eq!(got["a"].len(), 3);
    assert!(got["b"].contains(&"y"));
    assert_eq!(moved(rows_of(&start), &got), 2);
    assert!(got["b"].contains(&"x"), "the contested unit stays with b");
}

#[test]
fn weights_give_proportional_rows() {
    let units = numbered("u", 100);
    let units = refs(&units);
    let start = ring::assign_weighted(&[("a", 1), ("b", 1)], &units);
    // b's capacity doubles: 100 × 2/3 = 66.7, so b gets 66 or 67.
    let members = [("a", 1), ("b", 2)];
    let got = assign(rows_of(&start), &members, &units);
    let owned = to_owned(&start);
    Model::new(&owned, &members, &units).check_sticky(&owned, &got);
    // a holds 50 > 33: it gets the ceiling 34 and gives up 16.
    assert_eq!((got["a"].len(), got["b"].len()), (34, 66));
    assert_eq!(moved(rows_of(&start), &got), 16);
}

#[test]
fn limit_holds_moves_back_and_catches_up() {
    let units = numbered("u", 60);
    let units = refs(&units);
    let members = numbered("m", 6);
    let members = refs(&members);
    let start = ring::assign(&members[..3], &units);
    let all = unweighted(&members);
    let next = assign(rows_of(&start), &all, &units);
    let m = moved(rows_of(&start), &next);
    assert_eq!(m, 30);
    let limited = limit_moves(rows_of(&start), &next, 7);
    assert_eq!(moved(rows_of(&start), &limited), 7);
    for (member, row) in &limited {
        for u in row {
            let was = start.iter().find(|(_, r)| r.contains(u)).map(|(m, _)| *m);
            let goes = next.iter().find(|(_, r)| r.contains(u)).map(|(m, _)| *m);
            assert!(Some(*member) == was || Some(*member) == goes);
        }
    }
    assert_eq!(limit_moves(rows_of(&start), &next, 30), next);
    assert_eq!(limit_moves(rows_of(&start), &next, 100), next);
}

/// With steady inputs, cycles limited to `k` moves each reach the balanced
/// table in `⌈m / k⌉` cycles and `m` moves in all.
fn converge(start: &Owned, members: &[(&str, u32)], units: &[&str], k: usize) {
    let first = assign(owned_rows(start), members, units);
    let m = moved(owned_rows(start), &first);
    let mut table = start.clone();
    let (mut cycles, mut total) = (0, 0);
    loop {
        let next = assign(owned_rows(&table), members, units);
        let moves = moved(owned_rows(&table), &next);
        let limited = limit_moves(owned_rows(&table), &next, k);
        let done = moves <= k;
        assert_eq!(done, limited == next);
        total += moved(owned_rows(&table), &limited);
        if moves > 0 {
            cycles += 1;
        }
        table = to_owned(&limited);
        if done {
            break;
        }
        assert!(cycles <= m, "no progress");
    }
    assert_eq!(total, m, "moves in all");
    assert_eq!(cycles, m.div_ceil(k.max(1)), "cycles for {m} moves by {k}");
    let last: Vec<(&str, Vec<&str>)> = table.iter().map(|(m, r)| (m.as_str(), refs(r))).collect();
    let table: Table<'_> = last.into_iter().collect();
    assert_eq!(assign(rows_of(&table), members, units), table, "balanced");
}

#[test]
fn limited_cycles_converge() {
    let units = numbered("u", 200);
    let units = refs(&units);
    let members = numbered("m", 9);
    let members = refs(&members);
    let start = to_owned(&ring::assign(&members[..4], &units));
    let mut all = unweighted(&members);
    all[7].1 = 3;
    for k in [1, 5, 13, 1000] {
        converge(&start, &all, &units, k);
    }
}

/// Names from a small set, so that joins, leaves and adopted rows meet.
fn member_name(i: u8) -> String {
    format!("m{i}")
}

fn unit_name(i: u8) -> String {
    format!("u{i}")
}

fn weight() -> impl Strategy<Value = u32> {
    prop_oneof![4 => Just(1u32), 3 => 1u32..=4, 1 => 0u32..=1000]
}

/// An arbitrary table: members live or not, units listed or not, the same
/// unit in several rows and several times in one.
fn arbitrary_table() -> impl Strategy<Value = Owned> {
    proptest::collection::vec((0u8..12, proptest::collection::vec(0u8..70, 0..20)), 0..8).prop_map(
        |rows| {
            let mut table = Owned::new();
            for (m, units) in rows {
                table
                    .entry(member_name(m))
                    .or_default()
                    .extend(units.into_iter().map(unit_name));
            }
            table
        },
    )
}

#[derive(Debug, Clone)]
enum Op {
    Join(u8, u32),
    Leave(Index),
    Reweight(Index, u32),
    AddUnits(Vec<u8>),
    RemoveUnits(Vec<Index>),
    Adopt(Owned),
    /// The next step goes through [`limit_moves`] with this limit.
    Limit(usize),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0u8..10, weight()).prop_map(|(m, w)| Op::Join(m, w)),
        2 => any::<Index>().prop_map(Op::Leave),
        1 => (any::<Index>(), weight()).prop_map(|(i, w)| Op::Reweight(i, w)),
        2 => proptest::collection::vec(0u8..60, 1..12).prop_map(Op::AddUnits),
        2 => proptest::collection::vec(any::<Index>(), 1..8).prop_map(Op::RemoveUnits),
        1 => arbitrary_table().prop_map(Op::Adopt),
        2 => (0usize..6).prop_map(Op::Limit),
    ]
}

/// A sticky step through [`limit_moves`]: at most `k` moves, every unit
/// either where `next` puts it or, if it moves there, still with its
/// holder; units without a single holder always where `next` puts them.
fn check_limited(current: &Owned, members: &[(&str, u32)], units: &[&str], k: usize) -> Owned {
    let model = Model::new(current, members, units);
    let next = assign(owned_rows(current), members, units);
    let limited = limit_moves(owned_rows(current), &next, k);
    assert_eq!(
        limited.keys().collect::<Vec<_>>(),
        next.keys().collect::<Vec<_>>()
    );
    let owner_next: BTreeMap<&str, &str> = next
        .iter()
        .flat_map(|(m, r)| r.iter().map(move |u| (*u, *m)))
        .collect();
    let mut all: Vec<&str> = vec![];
    for (m, row) in &limited {
        assert!(row.is_sorted_by(|a, b| a < b));
        for u in row {
            all.push(u);
            if owner_next[u] != *m {
                assert_eq!(model.holder(u), Some(*m), "{u} held back by its holder");
            }
        }
    }
    all.sort_unstable();
    assert_eq!(all, owner_next.keys().copied().collect::<Vec<_>>());
    let moves = model.moved(&limited);
    assert_eq!(moves, model.moved(&next).min(k));
    assert_eq!(moved(owned_rows(current), &limited), moves);
    to_owned(&limited)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Random histories: every step is minimal, balanced, a fixed point, and
    /// limited steps keep to their limit.
    #[test]
    fn histories_move_the_minimum(
        start_members in proptest::collection::vec((0u8..10, weight()), 0..6),
        start_units in proptest::collection::vec(0u8..60, 0..40),
        ops in proptest::collection::vec(op(), 1..14),
    ) {
        let mut members: BTreeMap<String, u32> = start_members
            .into_iter()
            .map(|(m, w)| (member_name(m), w))
            .collect();
        let mut units: BTreeSet<String> = start_units.into_iter().map(unit_name).collect();
        let mut table = Owned::new();
        let mut limit = None;
        for op in ops {
            match op {
                Op::Join(m, w) => {
                    members.insert(member_name(m), w);
                }
                Op::Leave(i) if !members.is_empty() => {
                    let m = members.keys().nth(i.index(members.len())).unwrap().clone();
                    members.remove(&m);
                }
                Op::Reweight(i, w) if !members.is_empty() => {
                    let len = members.len();
                    *members.values_mut().nth(i.index(len)).unwrap() = w;
                }
                Op::AddUnits(new) => units.extend(new.into_iter().map(unit_name)),
                Op::RemoveUnits(gone) if !units.is_empty() => {
                    let list: Vec<String> = units.iter().cloned().collect();
                    for i in gone {
                        units.remove(&list[i.index(list.len())]);
                    }
                }
                Op::Adopt(adopted) => table = adopted,
                Op::Limit(k) => limit = Some(k),
                _ => {}
            }
            let listed: Vec<(&str, u32)> = members.iter().map(|(m, &w)| (m.as_str(), w)).collect();
            let unit_list: Vec<&str> = units.iter().map(String::as_str).collect();
            table = match limit.take() {
                Some(k) => check_limited(&table, &listed, &unit_list, k),
                None => to_owned(&solve_checked(&table, &listed, &unit_list)),
            };
        }
    }

    /// Adopting an arbitrary table directly, with members and weights that
    /// may or may not match its rows.
    #[test]
    fn adopting_any_table_moves_the_minimum(
        current in arbitrary_table(),
        members in proptest::collection::vec((0u8..12, weight()), 0..9),
        units in proptest::collection::vec(0u8..70, 0..50),
    ) {
        let members: Vec<(String, u32)> =
            members.into_iter().map(|(m, w)| (member_name(m), w)).collect();
        let members: Vec<(&str, u32)> = members.iter().map(|(m, w)| (m.as_str(), *w)).collect();
        let units: Vec<String> = units.into_iter().map(unit_name).collect();
        solve_checked(&current, &members, &refs(&units));
    }

    /// Order and duplicates never matter: members (with smaller weights
    /// listed again), units, rows split in several entries and repeated.
    #[test]
    fn order_and_duplicates_do_not_matter(
        current in arbitrary_table(),
        members in proptest::collection::vec((0u8..12, weight()), 0..9),
        units in proptest::collection::vec(0u8..70, 0..50),
        seed in any::<u64>(),
    ) {
        let members: Vec<(String, u32)> =
            members.into_iter().map(|(m, w)| (member_name(m), w)).collect();
        let members: Vec<(&str, u32)> = members.iter().map(|(m, w)| (m.as_str(), *w)).collect();
        let units: Vec<String> = units.into_iter().map(unit_name).collect();
        let units = refs(&units);
        let want = assign(owned_rows(&current), &members, &units);

        // A deterministic shuffle from the seed.
        let mut state = seed | 1;
        let mut next = move |n: usize| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state % n.max(1) as u64) as usize
        };
        fn shuffle<T>(v: &mut [T], next: &mut impl FnMut(usize) -> usize) {
            for i in (1..v.len()).rev() {
                v.swap(i, next(i + 1));
            }
        }
        let mut members2: Vec<(&str, u32)> = members.clone();
        members2.extend(members.iter().map(|&(m, _)| (m, 0)));
        shuffle(&mut members2, &mut next);
        let mut units2 = units.clone();
        units2.extend(units.iter().step_by(3));
        shuffle(&mut units2, &mut next);
        // Every row split in two entries, some repeated, all shuffled.
        let mut rows2: Vec<(&str, Vec<&str>)> = Vec::new();
        for (m, row) in &current {
            let mut row = refs(row);
            shuffle(&mut row, &mut next);
            let cut = next(row.len() + 1);
            rows2.push((m.as_str(), row[..cut].to_vec()));
            rows2.push((m.as_str(), row[cut..].to_vec()));
            if next(3) == 0 {
                rows2.push((m.as_str(), row.clone()));
            }
        }
        shuffle(&mut rows2, &mut next);
        let got = assign(rows2.iter().map(|(m, r)| (*m, r.iter().copied())), &members2, &units2);
        prop_assert_eq!(&got, &want);

        // Limits likewise, for any order of the current rows.
        let limited = limit_moves(owned_rows(&current), &want, 2);
        let again = limit_moves(rows2.iter().map(|(m, r)| (*m, r.iter().copied())), &want, 2);
        prop_assert_eq!(limited, again);
    }

    #[test]
    fn limited_cycles_converge_from_any_table(
        current in arbitrary_table(),
        members in proptest::collection::vec((0u8..12, weight()), 1..9),
        units in proptest::collection::vec(0u8..70, 0..50),
        k in 1usize..5,
    ) {
        let members: Vec<(String, u32)> =
            members.into_iter().map(|(m, w)| (member_name(m), w)).collect();
        let members: Vec<(&str, u32)> = members.iter().map(|(m, w)| (m.as_str(), *w)).collect();
        let units: Vec<String> = units.into_iter().map(unit_name).collect();
        converge(&current, &members, &refs(&units), k);
    }
}

/// Names shaped like real ones, in a scrambled order (as the ring bench).
fn names(prefix: &str, count: usize) -> Vec<String> {
    let mut names: Vec<String> = (0..count).map(|i| format!("{prefix}-{i:08}")).collect();
    let mut state = 0x9e37_79b9_7f4a_7c15_u64 ^ count as u64;
    for i in (1..names.len()).rev() {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        names.swap(i, (state % (i as u64 + 1)) as usize);
    }
    names
}

/// The churn table: for one leave and one join from a ring table, the
/// moves (units taken from a live member that held them) by the ring and by
/// sticky against the minimum, and the units that change owner in all
/// (moves plus the departed member's units, which must be placed anyway)
/// against the least possible. A tool, not a timed test:
/// `cargo test --lib sticky_churn -- --ignored --nocapture`.
#[test]
#[ignore]
fn sticky_churn_table() {
    let units = names("unit", 10_000);
    let units = refs(&units);
    println!("10,000 units, from the ring's table for N members");
    println!(
        "{:>4} {:<6} {:>7} | {:>7} {:>6} {:>6} | {:>10} {:>12}",
        "N", "event", "placed", "min", "ring", "sticky", "ring/least", "sticky/least"
    );
    for n in [10, 20, 50, 100, 1000] {
        let members = names("member", n + 1);
        let members = refs(&members);
        let (before, joiner) = (&members[..n], members[n]);
        let start = ring::assign(before, &units);
        let owned = to_owned(&start);
        let left: Vec<&str> = before
            .iter()
            .copied()
            .filter(|&m| m != before[n / 2])
            .collect();
        let joined: Vec<&str> = before.iter().copied().chain([joiner]).collect();
        for (event, after) in [("leave", left), ("join", joined)] {
            let weighted = unweighted(&after);
            let model = Model::new(&owned, &weighted, &units);
            let minimum = model.lower_bound_closed();
            let placed = units.len() - model.holders.len();
            let ring_moves = moved(rows_of(&start), &ring::assign(&after, &units));
            let sticky = assign(rows_of(&start), &weighted, &units);
            let sticky_moves = moved(rows_of(&start), &sticky);
            let least = (minimum + placed) as f64;
            println!(
                "{n:>4} {event:<6} {placed:>7} | {minimum:>7} {ring_moves:>6} {sticky_moves:>6} | {:>10.2} {:>12.2}",
                (ring_moves + placed) as f64 / least,
                (sticky_moves + placed) as f64 / least,
            );
            assert_eq!(sticky_moves, minimum);
        }
    }
}

/// One sticky solve at scale after a leave and after a join, next to the
/// ring's. A tool: `cargo test --release --lib sticky_timing -- --ignored
/// --nocapture`; `STICKY_SIZE=<members>x<units>` (default 10000x1000000).
#[test]
#[ignore]
fn sticky_timing() {
    let size = std::env::var("STICKY_SIZE").unwrap_or_else(|_| "10000x1000000".into());
    let (m, u) = size.split_once('x').expect("STICKY_SIZE=<members>x<units>");
    let (m, u): (usize, usize) = (m.parse().unwrap(), u.parse().unwrap());
    let members = names("member", m + 1);
    let members = refs(&members);
    let units = names("unit", u);
    let mut units = refs(&units);
    // The daemon passes units sorted.
    units.sort_unstable();
    // Times one solve; the moves are counted after the clock stops.
    fn time<T>(what: &str, f: impl FnOnce() -> T) -> T {
        let t = crate::core::timing::test_t0();
        let got = f();
        let elapsed = t.elapsed().as_secs_f64();
        println!("{what:<24} {elapsed:>7.3} s");
        got
    }
    let before = &members[..m];
    let start = time("ring", || ring::assign(before, &units));
    let left: Vec<(&str, u32)> = unweighted(before)
        .into_iter()
        .filter(|&(x, _)| x != before[m / 2])
        .collect();
    let joined = unweighted(&members);
    let weighted: Vec<(&str, u32)> = unweighted(before)
        .into_iter()
        .map(|(x, _)| (x, 1 + (xxh3_64_with_seed(x.as_bytes(), 9) % 4) as u32))
        .collect();
    let cases = [
        ("sticky, one leave", left),
        ("sticky, one join", joined),
        ("sticky, unchanged", unweighted(before)),
        ("sticky, weights 1..=4", weighted),
    ];
    for (what, after) in cases {
        let got = time(what, || assign(rows_of(&start), &after, &units));
        println!("{:<24} moves {}", "", moved(rows_of(&start), &got));
    }
    time("moved() alone", || moved(rows_of(&start), &start));
    let next = assign(rows_of(&start), &unweighted(&members), &units);
    let limited = time("limit_moves(10), a join", || {
        limit_moves(rows_of(&start), &next, 10)
    });
    println!("{:<24} moves {}", "", moved(rows_of(&start), &limited));
}
