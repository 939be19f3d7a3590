//! Tests of the cost balance: partition and band on random inputs, the
//! hysteresis (a fixed point, and nothing moves while every member is in its
//! band), the count rule with equal costs, and a brute-force search over
//! every table on small cases for the fewest moves and the lower bound.

use std::collections::{BTreeMap, BTreeSet};

use proptest::prelude::*;

use super::*;
use crate::core::sticky;
use crate::core::sticky::tests::{Owned, owned_rows, rows_of, to_owned};
use proptest::strategy::ValueTree;

fn numbered(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}{i:04}")).collect()
}

fn refs(strings: &[String]) -> Vec<&str> {
    strings.iter().map(String::as_str).collect()
}

/// Zipf(s) costs over `n` units, in thousandths: unit k costs `10^6 / k^s`.
fn zipf(n: usize, s: f64) -> Vec<u64> {
    (1..=n)
        .map(|k| ((1e6 / (k as f64).powf(s)).round() as u64).max(1))
        .collect()
}

fn cost_fn<'a>(units: &'a [String], costs: &'a [u64]) -> impl Fn(&str) -> u64 + 'a {
    let map: BTreeMap<&str, u64> = units
        .iter()
        .map(String::as_str)
        .zip(costs.iter().copied())
        .collect();
    move |u| map.get(u).copied().unwrap_or(1)
}

/// Units moved from `current` to `next`: held by exactly one live member,
/// now owned by another (as `sticky::moved` counts).
fn moves(current: &Owned, next: &Table<'_>) -> usize {
    sticky::moved(owned_rows(current), next)
}

fn check_partition(t: &Table<'_>, members: &[&str], units: &[&str]) {
    let live: BTreeSet<&str> = members.iter().copied().collect();
    assert_eq!(t.keys().copied().collect::<BTreeSet<_>>(), live);
    let mut seen = BTreeSet::new();
    for row in t.values() {
        for u in row {
            assert!(seen.insert(*u), "{u} twice");
        }
    }
    assert_eq!(seen, units.iter().copied().collect());
}

/// Every open member's load within its band.
fn in_band(loads: &[MemberLoad<'_>]) -> bool {
    loads.iter().all(|l| l.hot.is_some() || l.in_band())
}

fn weighted<'a>(members: &[&'a str]) -> Vec<(&'a str, u32)> {
    members.iter().map(|&m| (m, 1)).collect()
}

/// The first table (no current one) at the default tolerance.
fn first_table<'a>(
    m: &[(&'a str, u32)],
    us: &[&'a str],
    cost: &dyn Fn(&str) -> u64,
) -> Balanced<'a> {
    let none = std::iter::empty::<(&str, Vec<&str>)>();
    assign(none, m, us, Costs::Lookup(cost), Tolerance::DEFAULT)
}

#[test]
fn zipf_costs_meet_the_tolerance_from_scratch_and_after_a_leave() {
    let members = numbered("w", 10);
    let units = numbered("u", 1000);
    let costs = zipf(1000, 1.0);
    let cost = cost_fn(&units, &costs);
    let m = weighted(&refs(&members));
    let us = refs(&units);
    let first = first_table(&m, &us, &cost);
    check_partition(&first.table, &refs(&members), &us);
    assert_eq!(
        first.hot,
        ["u0000"],
        "the largest Zipf(1) unit is 13 % of 10"
    );
    let loads = loads(
        &first.table,
        &m,
        &us,
        Costs::Lookup(&cost),
        Tolerance::DEFAULT,
    );
    assert!(in_band(&loads), "{loads:#?}");
    let total: u64 = costs.iter().sum();
    let busiest = loads.iter().map(|l| l.load).max().unwrap();
    let bound = (total / 10).max(costs[0]);
    assert!(busiest as f64 / bound as f64 <= 1.10, "{busiest} / {bound}");

    // A member that does not isolate the hot unit leaves.
    let gone = loads.iter().find(|l| l.hot.is_none()).unwrap().member;
    let before = to_owned(&first.table);
    let rest: Vec<(&str, u32)> = m.iter().copied().filter(|&(x, _)| x != gone).collect();
    let next = assign(
        owned_rows(&before),
        &rest,
        &us,
        Costs::Lookup(&cost),
        Tolerance::DEFAULT,
    );
    let departed = before[gone].len();
    assert!(
        moves(&before, &next.table) as f64 <= 0.1 * departed as f64,
        "its units are placed, hardly any other moves"
    );
    assert!(in_band(&loads_of(&next.table, &rest, &us, &cost)));
}

fn loads_of<'a>(
    t: &Table<'a>,
    m: &[(&'a str, u32)],
    us: &[&'a str],
    cost: &dyn Fn(&str) -> u64,
) -> Vec<MemberLoad<'a>> {
    loads(t, m, us, Costs::Lookup(cost), Tolerance::DEFAULT)
}

#[test]
fn costs_whose_sum_would_overflow_are_scaled_alike() {
    // Four units at the largest u64 cost: a sum would wrap.
    let units = numbered("u", 4);
    let us = refs(&units);
    let m = [("a", 1), ("b", 1)];
    let t = first_table(&m, &us, &|_| u64::MAX).table;
    check_partition(&t, &["a", "b"], &us);
    assert!(t.values().all(|r| r.len() == 2), "{t:?}");
    let l = loads(
        &t,
        &m,
        &us,
        Costs::Lookup(&|_| u64::MAX),
        Tolerance::DEFAULT,
    );
    assert!(in_band(&l), "{l:?}");
}

#[test]
fn equal_costs_give_the_count_rule() {
    let members = numbered("w", 7);
    let units = numbered("u", 100);
    let m = weighted(&refs(&members));
    let us = refs(&units);
    let t = first_table(&m, &us, &|_| 1000).table;
    for row in t.values() {
        assert!(row.len() == 14 || row.len() == 15, "{}", row.len());
    }
}

#[test]
fn a_table_in_its_bands_does_not_move_even_when_uneven_inside_them() {
    // Shares of 10; band 9..=11 (10 %). Loads 11 and 9 are inside.
    let current: Owned = [
        (
            "a".to_string(),
            vec!["1".into(), "2".into(), "3".into(), "6".into()],
        ),
        ("b".to_string(), vec!["4".into(), "5".into()]),
    ]
    .into_iter()
    .collect();
    let cost = |u: &str| match u {
        "1" | "4" => 5000,
        "2" | "5" => 4000,
        _ => 1000,
    };
    let us = ["1", "2", "3", "4", "5", "6"];
    let m = [("a", 1), ("b", 1)];
    let next = assign(
        owned_rows(&current),
        &m,
        &us,
        Costs::Lookup(&cost),
        Tolerance::DEFAULT,
    );
    assert_eq!(to_owned(&next.table), current);
    assert_eq!(next.minimum, 0);
    // At 5 % the band is 9.5..=10.5: one unit of 1 moves.
    let tight = Tolerance::from_bp(500).unwrap();
    let next = assign(owned_rows(&current), &m, &us, Costs::Lookup(&cost), tight);
    assert_eq!(moves(&current, &next.table), 1);
    assert_eq!(next.minimum, 1);
    assert_eq!(
        next.table["a"].len() + 1,
        current["a"].len(),
        "{:?}",
        next.table
    );
}

#[test]
fn hot_units_sit_alone_and_stay_with_their_holder() {
    let cost = |u: &str| if u == "big" { 100_000 } else { 1000 };
    let units: Vec<String> = std::iter::once("big".to_string())
        .chain(numbered("u", 20))
        .collect();
    let us = refs(&units);
    let m = [("a", 1), ("b", 1), ("c", 1)];
    let first = first_table(&m, &us, &cost);
    assert_eq!(first.hot, ["big"]);
    let alone: Vec<_> = first
        .table
        .values()
        .filter(|r| r == &&vec!["big"])
        .collect();
    assert_eq!(alone.len(), 1, "{:?}", first.table);
    // Its holder keeps it: solving again moves nothing.
    let again = assign(
        rows_of(&first.table),
        &m,
        &us,
        Costs::Lookup(&cost),
        Tolerance::DEFAULT,
    );
    assert_eq!(again.table, first.table);
    // Held by a member with other units: it stays there, they move.
    let current: Owned = [
        ("a".to_string(), units[..8].to_vec()),
        ("b".to_string(), units[8..15].to_vec()),
        ("c".to_string(), units[15..].to_vec()),
    ]
    .into_iter()
    .collect();
    let next = assign(
        owned_rows(&current),
        &m,
        &us,
        Costs::Lookup(&cost),
        Tolerance::DEFAULT,
    );
    assert_eq!(next.table["a"], ["big"]);
    assert_eq!(moves(&current, &next.table), 7);
    assert_eq!(next.minimum, 7);
}

/// Random inputs: members with weights, units with costs, a current table
/// over some of them (units possibly in several rows, rows of members that
/// left), and a tolerance.
#[derive(Debug, Clone)]
struct Case {
    members: Vec<(String, u32)>,
    units: Vec<(String, u64)>,
    current: Owned,
    tolerance: u32,
}

fn case(max_members: usize, max_units: usize, max_cost: u64) -> impl Strategy<Value = Case> {
    (1..=max_members, 0..=max_units, 0u32..=3000).prop_flat_map(move |(m, u, tolerance)| {
        (
            proptest::collection::vec(1u32..=3, m),
            proptest::collection::vec(1..=max_cost, u),
            // Per unit: its holders, as member indices (0..m+1: m is gone).
            proptest::collection::vec(proptest::collection::vec(0..=m, 0..=2), u),
        )
            .prop_map(move |(weights, costs, holders)| {
                let members: Vec<(String, u32)> = weights
                    .into_iter()
                    .enumerate()
                    .map(|(i, w)| (format!("m{i}"), w))
                    .collect();
                let units: Vec<(String, u64)> = costs
                    .into_iter()
                    .enumerate()
                    .map(|(i, c)| (format!("u{i}"), c * 1000))
                    .collect();
                let mut current = Owned::new();
                for (u, hs) in holders.iter().enumerate() {
                    for &h in hs {
                        current
                            .entry(format!("m{h}"))
                            .or_default()
                            .push(units[u].0.clone());
                    }
                }
                Case {
                    members,
                    units,
                    current,
                    tolerance,
                }
            })
    })
}

impl Case {
    fn solve(&self) -> (Balanced<'_>, Vec<MemberLoad<'_>>) {
        let m: Vec<(&str, u32)> = self.members.iter().map(|(n, w)| (n.as_str(), *w)).collect();
        let us: Vec<&str> = self.units.iter().map(|(u, _)| u.as_str()).collect();
        let cost = |u: &str| self.cost(u);
        let t = Tolerance::from_bp(self.tolerance).unwrap();
        let b = assign(owned_rows(&self.current), &m, &us, Costs::Lookup(&cost), t);
        let l = loads(&b.table, &m, &us, Costs::Lookup(&cost), t);
        (b, l)
    }

    fn cost(&self, u: &str) -> u64 {
        self.units
            .iter()
            .find(|(n, _)| n == u)
            .map_or(1, |&(_, c)| c)
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn partition_fixed_point_and_order_free(c in case(8, 60, 50)) {
        let (b, loads) = c.solve();
        let m: Vec<&str> = c.members.iter().map(|(n, _)| n.as_str()).collect();
        let us: Vec<&str> = c.units.iter().map(|(u, _)| u.as_str()).collect();
        check_partition(&b.table, &m, &us);
        // The bound holds for every table within the bands.
        if in_band(&loads) {
            prop_assert!(moves(&c.current, &b.table) >= b.minimum);
        }
        // Solving again from the result changes nothing.
        let again = Case { current: to_owned(&b.table), ..c.clone() };
        let (b2, _) = again.solve();
        prop_assert_eq!(&b2.table, &b.table);
        // Order and duplicates of the inputs change nothing.
        let mut shuffled = c.clone();
        shuffled.members.reverse();
        shuffled.members.extend(c.members.first().cloned());
        shuffled.units.reverse();
        let (b3, _) = shuffled.solve();
        prop_assert_eq!(&b3.table, &b.table);
    }

    #[test]
    fn small_units_always_fit_the_band(c in case(6, 200, 3)) {
        // Many units, each far below a share: the band is always reached.
        let (b, loads) = c.solve();
        let total: u64 = c.units.iter().map(|u| u.1).sum();
        let wsum: u64 = c.members.iter().map(|m| u64::from(m.1)).sum();
        let small = c.units.iter().all(|u| u.1 * wsum * 4 <= total);
        if small && c.units.len() >= 20 * c.members.len() {
            prop_assert!(in_band(&loads), "{:#?} {:?}", loads, b.table);
        }
    }
}

/// Every table over `members` (some isolating hot units) and `units`, by
/// brute force: the fewest moves of those within the bands, if any is.
fn brute_force(c: &Case, loads: &[MemberLoad<'_>]) -> Option<usize> {
    let m: Vec<&str> = loads.iter().map(|l| l.member).collect();
    let hot: BTreeMap<&str, usize> = loads
        .iter()
        .enumerate()
        .filter_map(|(i, l)| Some((l.hot?, i)))
        .collect();
    let us: Vec<&str> = c.units.iter().map(|(u, _)| u.as_str()).collect();
    let mut best: Option<usize> = None;
    let n = us.len() as u32;
    let open: Vec<usize> = (0..m.len()).filter(|&i| loads[i].hot.is_none()).collect();
    if open.is_empty() {
        return None;
    }
    let k = open.len();
    let free: Vec<&str> = us
        .iter()
        .copied()
        .filter(|u| !hot.contains_key(u))
        .collect();
    for code in 0..(k as u64).pow(free.len() as u32) {
        let mut t: Table<'_> = m.iter().map(|&x| (x, Vec::new())).collect();
        for (&u, &i) in &hot {
            t.get_mut(m[i]).unwrap().push(u);
        }
        let mut x = code;
        let mut load = vec![0u64; m.len()];
        for &u in &free {
            let i = open[(x % k as u64) as usize];
            x /= k as u64;
            t.get_mut(m[i]).unwrap().push(u);
            load[i] += c.cost(u);
        }
        if open
            .iter()
            .all(|&i| (loads[i].lo..=loads[i].hi).contains(&load[i]))
        {
            let mv = moves(&c.current, &t);
            best = Some(best.map_or(mv, |b| b.min(mv)));
        }
    }
    let _ = n;
    best
}

#[test]
fn against_brute_force_on_small_cases() {
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let strategy = case(3, 7, 9);
    let (mut feasible, mut reached, mut optimal, mut extra) = (0, 0, 0, 0usize);
    for _ in 0..3000 {
        let c = strategy.new_tree(&mut runner).unwrap().current();
        let (b, loads) = c.solve();
        let Some(best) = brute_force(&c, &loads) else {
            continue;
        };
        feasible += 1;
        let mv = moves(&c.current, &b.table);
        assert!(
            b.minimum <= best,
            "the bound {} above the best {best}: {c:?}",
            b.minimum
        );
        if in_band(&loads) {
            reached += 1;
            assert!(mv >= best);
            if mv == best {
                optimal += 1;
            }
            extra += mv - best;
        } else if std::env::var("SHOW").is_ok() && feasible % 10 == 0 {
            eprintln!(
                "UNREACHED best {best}: loads {:?}\n current {:?}\n got {:?}\n costs {:?}",
                loads
                    .iter()
                    .map(|l| (l.member, l.load, l.lo, l.hi, l.hot))
                    .collect::<Vec<_>>(),
                c.current,
                b.table,
                c.units
            );
        }
    }
    eprintln!("feasible {feasible}, reached {reached}, optimal {optimal}, extra moves {extra}");
    assert!(feasible > 1000);
    assert!(reached * 100 >= feasible * 95, "{reached} of {feasible}");
    assert!(optimal * 100 >= reached * 90, "{optimal} of {reached}");
}

/// A case from rows: per member its weight and held units as `(cost in
/// thousandths, how many)`; units are numbered across rows.
/// A member's row for [`held`]: its name, weight and `(cost, how many)`.
type HeldRow<'a> = (&'a str, u32, &'a [(u64, usize)]);

fn held(rows: &[HeldRow<'_>], tolerance: u32) -> Case {
    let mut c = Case {
        members: Vec::new(),
        units: Vec::new(),
        current: Owned::new(),
        tolerance,
    };
    for &(member, weight, holds) in rows {
        c.members.push((member.to_string(), weight));
        for &(cost, n) in holds {
            for _ in 0..n {
                let u = format!("u{}", c.units.len());
                c.units.push((u.clone(), cost));
                c.current.entry(member.to_string()).or_default().push(u);
            }
        }
    }
    c
}

/// Found by `small_units_always_fit_the_band`: `b` is over its band by
/// between 1,906 and 3,000, but every other member has less than 2,000 of
/// room, so no single move and no swap lands it. `m0` takes a 2,000 unit
/// and passes 1,000 on (a chain).
#[test]
fn a_chain_passes_a_unit_on_when_no_member_has_room_for_one() {
    let c = held(
        &[
            ("m0", 3, &[(1000, 68)]),
            ("b", 1, &[(3000, 7), (2000, 2)]),
            ("m2", 3, &[(1000, 68)]),
            ("m3", 2, &[(1000, 45)]),
            ("m4", 2, &[(1000, 45)]),
        ],
        121,
    );
    let (b, loads) = c.solve();
    assert!(in_band(&loads), "{loads:#?}");
    assert_eq!(moves(&c.current, &b.table), 2, "{:?}", b.table);
}

/// Also found by that test: `a` holds only 3,000 units and must lose
/// 2,000; `m3` and `m4` are 1,000 under. A swap with `m3` (3,000 for 1,000)
/// takes `m3` 1,000 over, which it passes on to `m4`.
#[test]
fn a_chain_can_start_with_a_swap() {
    let c = held(
        &[
            ("a", 1, &[(3000, 8)]),
            ("m1", 2, &[(2000, 22)]),
            ("m2", 3, &[(3000, 22)]),
            ("m3", 3, &[(1000, 65)]),
            ("m4", 3, &[(1000, 65)]),
        ],
        137,
    );
    let (b, loads) = c.solve();
    assert!(in_band(&loads), "{loads:#?}");
    assert_eq!(moves(&c.current, &b.table), 3, "{:?}", b.table);
}
