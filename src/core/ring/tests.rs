//! Tests of the assignment: golden vectors that pin the on-wire table, and
//! property tests that check the fast path against a literal execution of
//! the definition (plain and weighted), with real and deliberately weak
//! hashes, every partition size and narrow sort keys.

use super::*;
use proptest::prelude::*;
use proptest::sample::Index;

type Table<'a> = BTreeMap<&'a str, Vec<&'a str>>;

/// The definition, executed literally: keep the remaining points in a
/// sorted list, scan it for every pick, delete the picked unit's points.
/// Quadratic and obviously right; the fast path must equal it.
fn reference<'a>(
    members: &[&'a str],
    units: &[&'a str],
    member_pos: impl Fn(&str) -> u64,
    point: impl Fn(&str, u32) -> u64,
) -> Table<'a> {
    let members = sorted_distinct(members).into_owned();
    let units = sorted_distinct(units).into_owned();
    let mut table: Table<'a> = members.iter().map(|m| (*m, Vec::new())).collect();
    if members.is_empty() {
        return table;
    }
    let mut ring = sorted_points(&units, &point);
    while !ring.is_empty() {
        for member in &members {
            if ring.is_empty() {
                break;
            }
            let unit = take_next(&mut ring, member_pos(member));
            table.get_mut(member).unwrap().push(units[unit]);
        }
    }
    for row in table.values_mut() {
        row.sort_unstable();
    }
    table
}

/// Every point of every unit (by index), sorted: the references' ring.
fn sorted_points(units: &[&str], point: &impl Fn(&str, u32) -> u64) -> Vec<(u64, usize)> {
    let mut ring: Vec<(u64, usize)> = units
        .iter()
        .enumerate()
        .flat_map(|(index, unit)| (0..POINTS_PER_UNIT).map(move |i| (point(unit, i), index)))
        .collect();
    ring.sort_unstable();
    ring
}

/// The first unit clockwise from `position` (wrapping), taken off the
/// ring with all its points. The ring must not be empty.
fn take_next(ring: &mut Vec<(u64, usize)>, position: u64) -> usize {
    let &(_, unit) = ring
        .iter()
        .find(|(hash, _)| *hash >= position)
        .unwrap_or(&ring[0]);
    ring.retain(|&(_, other)| other != unit);
    unit
}

/// The weighted definition, executed literally: quotas by the largest
/// remainder (computed here with exact rationals, compared by cross
/// multiplication), weights divided by their gcd, then turns of up to
/// `w` picks over a sorted point list, as in [`reference`].
fn reference_weighted<'a>(
    members: &[(&'a str, u32)],
    units: &[&'a str],
    member_pos: impl Fn(&str) -> u64,
    point: impl Fn(&str, u32) -> u64,
) -> Table<'a> {
    let mut by_name: BTreeMap<&str, u32> = BTreeMap::new();
    for &(m, w) in members {
        let w = w.max(1);
        by_name
            .entry(m)
            .and_modify(|x| *x = (*x).max(w))
            .or_insert(w);
    }
    let units = sorted_distinct(units).into_owned();
    let mut table: Table<'a> = by_name.keys().map(|m| (*m, Vec::new())).collect();
    if by_name.is_empty() {
        return table;
    }
    let names: Vec<&'a str> = by_name.keys().copied().collect();
    let mut weights: Vec<u64> = by_name.values().map(|&w| u64::from(w)).collect();
    let g = weights.iter().fold(0, |g, &w| {
        let (mut a, mut b) = (g, w);
        while b != 0 {
            (a, b) = (b, a % b);
        }
        a
    });
    weights.iter_mut().for_each(|w| *w /= g);
    let total: u64 = weights.iter().sum();
    let u = units.len() as u64;
    let mut quota: Vec<u64> = weights.iter().map(|w| u * w / total).collect();
    // One more at a time to the largest remaining fraction (earliest on
    // ties) among those not yet given one.
    let mut given = vec![false; names.len()];
    while quota.iter().sum::<u64>() < u {
        let best = (0..names.len())
            .filter(|&i| !given[i])
            .max_by(|&a, &b| {
                let fa = u * weights[a] - quota[a] * total;
                let fb = u * weights[b] - quota[b] * total;
                fa.cmp(&fb).then(b.cmp(&a))
            })
            .unwrap();
        given[best] = true;
        quota[best] += 1;
    }
    let mut ring = sorted_points(&units, &point);
    while !ring.is_empty() {
        for (j, member) in names.iter().enumerate() {
            for _ in 0..weights[j] {
                let row = table.get_mut(member).unwrap();
                if ring.is_empty() || row.len() as u64 == quota[j] {
                    break;
                }
                let unit = take_next(&mut ring, member_pos(member));
                row.push(units[unit]);
            }
        }
    }
    for row in table.values_mut() {
        row.sort_unstable();
    }
    table
}

/// Every row is the floor or the ceiling of its exact share
/// `U × w / Σw`, i.e. `|row × Σw − U × w| < Σw`, and the rows partition
/// the units.
fn check_weighted(members: &[(&str, u32)], units: &[&str], got: &Table<'_>) {
    let mut by_name: BTreeMap<&str, u32> = BTreeMap::new();
    for &(m, w) in members {
        let w = w.max(1);
        by_name
            .entry(m)
            .and_modify(|x| *x = (*x).max(w))
            .or_insert(w);
    }
    assert_eq!(
        got.keys().collect::<Vec<_>>(),
        by_name.keys().collect::<Vec<_>>()
    );
    let units = sorted_distinct(units).into_owned();
    if by_name.is_empty() {
        return;
    }
    let total: i128 = by_name.values().map(|&w| i128::from(w)).sum();
    for (m, row) in got {
        let exact = units.len() as i128 * i128::from(by_name[m]);
        assert!(
            (row.len() as i128 * total - exact).abs() < total,
            "{m}: {} units, share {exact}/{total}",
            row.len()
        );
    }
    let mut all: Vec<&str> = got.values().flatten().copied().collect();
    all.sort_unstable();
    assert_eq!(all, units);
}

fn reference_real<'a>(members: &[&'a str], units: &[&'a str]) -> Table<'a> {
    reference(members, units, member_position, unit_point)
}

/// Builds a table from literal rows.
fn table<'a>(rows: &[(&'a str, &[&'a str])]) -> Table<'a> {
    rows.iter().map(|(m, us)| (*m, us.to_vec())).collect()
}

fn numbered(prefix: &str, range: std::ops::RangeInclusive<usize>) -> Vec<String> {
    range.map(|i| format!("{prefix}{i}")).collect()
}

fn refs(strings: &[String]) -> Vec<&str> {
    strings.iter().map(String::as_str).collect()
}

/// Weak hashes squeeze the real hash into few values so that member
/// positions and points collide often: ties, a point exactly at a
/// member's position, the first and last partitions and wrap-around all
/// get exercised. Not too few values, though: with only a handful, every
/// unit has a point at every value and any pick degenerates to "the
/// smallest remaining unit", which hides mistakes.
fn weaken(kind: u8, hash: u64) -> u64 {
    match kind {
        // Spread over the whole ring.
        0 => (hash % 61) << 58,
        // All near 0: everything in the first partition.
        1 => hash % 97,
        // All near the top: the last partition, wrap-around.
        2 => u64::MAX - hash % 97,
        // Everything equal: pure tie-breaking by unit index.
        _ => 7,
    }
}

/// Target partition sizes for [`Ring::build`]: one point (as many
/// partitions as `MAX_COARSE_BITS` allows, most of them empty or a
/// single bucket), small ones, and the production default.
const PARTITION_LENS: [usize; 4] = [1, 64, 1000, Ring::TARGET_PARTITION_LEN];

/// The fast path with every size in [`PARTITION_LENS`], which must all
/// agree.
fn fast<'a>(
    members: &[&'a str],
    units: &[&'a str],
    member_pos: impl Fn(&str) -> u64 + Copy,
    point: impl Fn(&str, u32) -> u64 + Copy,
) -> Table<'a> {
    let [first, rest @ ..] = PARTITION_LENS
        .map(|partition_len| assign_with(members, units, member_pos, point, partition_len));
    for (other, partition_len) in rest.iter().zip(&PARTITION_LENS[1..]) {
        assert_eq!(&first, other, "partition_len {partition_len}");
    }
    first
}

/// The fast path and the reference, with a weakened hash.
fn weak_assign<'a>(kind: u8, members: &[&'a str], units: &[&'a str]) -> (Table<'a>, Table<'a>) {
    let pos = |m: &str| weaken(kind, member_position(m));
    let point = |u: &str, i| weaken(kind, unit_point(u, i));
    (
        fast(members, units, pos, point),
        reference(members, units, pos, point),
    )
}

fn check_invariants(members: &[&str], units: &[&str], got: &Table<'_>) {
    let members = sorted_distinct(members).into_owned();
    let units = sorted_distinct(units).into_owned();
    if members.is_empty() {
        assert!(got.is_empty());
        return;
    }
    assert_eq!(got.keys().copied().collect::<Vec<_>>(), members);
    // Balance: the first (U mod S) sorted members get one extra unit.
    let (base, extra) = (units.len() / members.len(), units.len() % members.len());
    for (j, row) in got.values().enumerate() {
        assert_eq!(row.len(), base + usize::from(j < extra), "row {j}");
        assert!(row.windows(2).all(|w| w[0] < w[1]), "row {j} not sorted");
    }
    // Partition: every unit exactly once, nothing else.
    let mut all: Vec<&str> = got.values().flatten().copied().collect();
    all.sort_unstable();
    assert_eq!(all, units);
}

/// Golden vectors. These pin the on-wire table: every replica, and the
/// clients reading the table, rely on this exact output. A change to any
/// literal below is a breaking change of the protocol, never a test fix.
/// (Generated from `reference`, and cross-checked against an independent
/// implementation of the definition over another XXH3 library.)
#[test]
fn golden_hashes() {
    assert_eq!(member_position("service1"), 0x993f_2e23_25ab_1055);
    assert_eq!(unit_point("workunit1", 0), 0x5ce8_332b_f5e8_a617);
    assert_eq!(unit_point("workunit1", 49), 0xe500_11a2_9880_fd3b);
}

/// Same contract as [`golden_hashes`]: breaking change if it changes.
#[test]
fn golden_tables() {
    let check = |members: &[&str], units: &[&str], want: Table<'_>| {
        assert_eq!(reference_real(members, units), want, "reference");
        assert_eq!(assign(members, units), want, "assign");
    };

    let units6 = numbered("workunit", 1..=6);
    let services3 = ["service1", "service2", "service3"];
    check(
        &services3,
        &refs(&units6),
        table(&[
            ("service1", &["workunit5", "workunit6"]),
            ("service2", &["workunit1", "workunit4"]),
            ("service3", &["workunit2", "workunit3"]),
        ]),
    );

    // Uneven: the first member in sorted order gets the extra unit.
    let units7 = numbered("workunit", 1..=7);
    check(
        &services3,
        &refs(&units7),
        table(&[
            ("service1", &["workunit5", "workunit6", "workunit7"]),
            ("service2", &["workunit1", "workunit4"]),
            ("service3", &["workunit2", "workunit3"]),
        ]),
    );

    let units20 = numbered("workunit", 1..=20);
    check(
        &["alpha", "bravo", "charlie", "delta"],
        &refs(&units20),
        table(&[
            (
                "alpha",
                &[
                    "workunit11",
                    "workunit17",
                    "workunit18",
                    "workunit20",
                    "workunit9",
                ],
            ),
            (
                "bravo",
                &[
                    "workunit1",
                    "workunit12",
                    "workunit14",
                    "workunit5",
                    "workunit8",
                ],
            ),
            (
                "charlie",
                &[
                    "workunit10",
                    "workunit13",
                    "workunit3",
                    "workunit6",
                    "workunit7",
                ],
            ),
            (
                "delta",
                &[
                    "workunit15",
                    "workunit16",
                    "workunit19",
                    "workunit2",
                    "workunit4",
                ],
            ),
        ]),
    );

    check(
        &["solo"],
        &refs(&units6),
        table(&[("solo", &refs(&units6))]),
    );

    // More members than units: the last ones get empty rows.
    let members5 = numbered("service", 1..=5);
    let units3 = numbered("workunit", 1..=3);
    check(
        &refs(&members5),
        &refs(&units3),
        table(&[
            ("service1", &["workunit2"]),
            ("service2", &["workunit1"]),
            ("service3", &["workunit3"]),
            ("service4", &[]),
            ("service5", &[]),
        ]),
    );

    check(&["a", "b"], &[], table(&[("a", &[]), ("b", &[])]));
    check(&[], &refs(&units6), table(&[]));
    check(&[], &[], table(&[]));
}

/// With every hash equal, ring order is unit order and each pick takes
/// the smallest remaining unit: a pure test of tie-breaking.
#[test]
fn all_ties_follow_unit_order() {
    let units = ["u0", "u1", "u2", "u3", "u4", "u5", "u6"];
    let got = fast(&["b", "a", "c"], &units, |_| 0, |_, _| 0);
    let want = table(&[
        ("a", &["u0", "u3", "u6"]),
        ("b", &["u1", "u4"]),
        ("c", &["u2", "u5"]),
    ]);
    assert_eq!(got, want);
    assert_eq!(reference(&["b", "a", "c"], &units, |_| 0, |_, _| 0), want);
}

/// The example drawn in the module docs, positions on a clock face.
#[test]
fn module_doc_example() {
    let at = |hour: u64| hour * (u64::MAX / 12);
    let pos = |m: &str| if m == "w1" { at(2) } else { at(10) };
    // Each unit's points alternate between its two places in the drawing.
    let point = |u: &str, i: u32| {
        let (odd, even) = match u {
            "a" => (1, 7),
            "b" => (3, 11),
            _ => (5, 9),
        };
        at(if i % 2 == 1 { odd } else { even })
    };
    let want = table(&[("w1", &["b", "c"]), ("w2", &["a"])]);
    assert_eq!(fast(&["w2", "w1"], &["c", "b", "a"], pos, point), want);
    assert_eq!(reference(&["w2", "w1"], &["c", "b", "a"], pos, point), want);
}

/// A member whose position is past every point wraps round to the start.
#[test]
fn wraps_past_the_top() {
    let units = ["x", "y"];
    let point = |u: &str, _| if u == "x" { 10 } else { 20 };
    let got = fast(
        &["m", "n"],
        &units,
        |m| if m == "m" { 15 } else { 30 },
        point,
    );
    // m (at 15) takes y (at 20); n (at 30) wraps and takes x (at 10).
    assert_eq!(got, table(&[("m", &["y"]), ("n", &["x"])]));
}

/// Larger than the proptest inputs: hundreds of partitions at the
/// smaller `PARTITION_LENS`, long cursor runs, many rounds.
#[test]
fn fast_equals_reference_larger() {
    let members = numbered("worker-", 1..=13);
    let units = numbered("unit-", 1..=300);
    let (members, units) = (refs(&members), refs(&units));
    let got = fast(&members, &units, member_position, unit_point);
    check_invariants(&members, &units, &got);
    assert_eq!(got, reference_real(&members, &units));
    for kind in 0..4 {
        let (got, want) = weak_assign(kind, &members[..5], &units[..100]);
        assert_eq!(got, want, "weak hash {kind}");
    }
}

fn name() -> impl Strategy<Value = String> {
    // A tiny alphabet so duplicates and the empty string are common.
    "[a-d]{0,3}"
}

fn inputs(
    max_members: usize,
    max_units: usize,
) -> impl Strategy<Value = (Vec<String>, Vec<String>)> {
    (
        proptest::collection::vec(name(), 0..=max_members),
        proptest::collection::vec("[a-z0-9]{0,5}", 0..=max_units),
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn balanced_partition((members, units) in inputs(8, 60)) {
        let (members, units) = (refs(&members), refs(&units));
        check_invariants(&members, &units, &assign(&members, &units));
    }

    #[test]
    fn fast_equals_reference((members, units) in inputs(8, 40)) {
        let (members, units) = (refs(&members), refs(&units));
        let got = fast(&members, &units, member_position, unit_point);
        prop_assert_eq!(&got, &assign(&members, &units));
        prop_assert_eq!(got, reference_real(&members, &units));
    }

    #[test]
    fn fast_equals_reference_with_ties(kind in 0u8..4, (members, units) in inputs(6, 12)) {
        let (members, units) = (refs(&members), refs(&units));
        let (fast, slow) = weak_assign(kind, &members, &units);
        check_invariants(&members, &units, &fast);
        prop_assert_eq!(fast, slow);
    }

    #[test]
    fn order_and_duplicates_do_not_matter(
        (members, units, shuffled_members, shuffled_units, dups) in inputs(8, 40)
            .prop_flat_map(|(m, u)| (
                Just(m.clone()),
                Just(u.clone()),
                Just(m).prop_shuffle(),
                Just(u).prop_shuffle(),
                proptest::collection::vec(any::<Index>(), 0..10),
            ))
    ) {
        let mut shuffled_members = refs(&shuffled_members);
        let mut shuffled_units = refs(&shuffled_units);
        for (n, dup) in dups.iter().enumerate() {
            if n % 2 == 0 && !shuffled_members.is_empty() {
                shuffled_members.push(shuffled_members[dup.index(shuffled_members.len())]);
            } else if !shuffled_units.is_empty() {
                let at = dup.index(shuffled_units.len());
                shuffled_units.insert(at, shuffled_units[at]);
            }
        }
        prop_assert_eq!(
            assign(&refs(&members), &refs(&units)),
            assign(&shuffled_members, &shuffled_units)
        );
    }

    #[test]
    fn resolving_the_output_changes_nothing((members, units) in inputs(8, 40)) {
        let first = assign(&refs(&members), &refs(&units));
        let members: Vec<&str> = first.keys().copied().collect();
        let units: Vec<&str> = first.values().flatten().copied().collect();
        prop_assert_eq!(assign(&members, &units), first);
    }

    #[test]
    fn narrow_keys_equal_reference((members, units) in inputs(8, 40)) {
        let (members, units) = (refs(&members), refs(&units));
        let want = reference_real(&members, &units);
        prop_assert_eq!(narrow(&members, &units, member_position, unit_point), want);
    }

    #[test]
    fn narrow_keys_equal_reference_with_ties(
        kind in 0u8..4,
        (members, units) in inputs(6, 12),
    ) {
        let (members, units) = (refs(&members), refs(&units));
        let pos = |m: &str| weaken(kind, member_position(m));
        let point = |u: &str, i| weaken(kind, unit_point(u, i));
        let want = reference(&members, &units, pos, point);
        prop_assert_eq!(narrow(&members, &units, pos, point), want);
    }

    #[test]
    fn weighted_equals_reference(
        (members, units) in inputs(6, 40),
        weights in proptest::collection::vec(1u32..=5, 6),
        kind in 0u8..5,
    ) {
        let members: Vec<(&str, u32)> =
            members.iter().zip(&weights).map(|(m, &w)| (m.as_str(), w)).collect();
        let units = refs(&units);
        let got = assign_weighted(&members, &units);
        check_weighted(&members, &units, &got);
        prop_assert_eq!(
            &got,
            &reference_weighted(&members, &units, member_position, unit_point)
        );
        for partition_len in PARTITION_LENS {
            let again =
                weighted_with(&members, &units, member_position, unit_point, partition_len);
            prop_assert_eq!(&again, &got);
        }
        if kind < 4 {
            let pos = |m: &str| weaken(kind, member_position(m));
            let point = |u: &str, i| weaken(kind, unit_point(u, i));
            let units = &units[..units.len().min(12)];
            prop_assert_eq!(
                weighted_with(&members, units, pos, point, 64),
                reference_weighted(&members, units, pos, point)
            );
        }
    }

    #[test]
    fn weighted_rows_follow_shares(
        (members, units) in inputs(8, 60),
        weights in proptest::collection::vec(prop_oneof![1u32..=3, 1u32..=1000, Just(0)], 8),
    ) {
        let members: Vec<(&str, u32)> =
            members.iter().zip(&weights).map(|(m, &w)| (m.as_str(), w)).collect();
        let units = refs(&units);
        check_weighted(&members, &units, &assign_weighted(&members, &units));
    }

    /// Only ratios matter, and equal weights are the unweighted table,
    /// whatever their value.
    #[test]
    fn equal_weights_are_assign(
        (members, units) in inputs(8, 60),
        weight in prop_oneof![Just(1u32), 0u32..=1000, Just(u32::MAX)],
    ) {
        let (members, units) = (refs(&members), refs(&units));
        let weighted: Vec<(&str, u32)> = members.iter().map(|&m| (m, weight)).collect();
        prop_assert_eq!(assign_weighted(&weighted, &units), assign(&members, &units));
    }

    #[test]
    fn scaled_weights_change_nothing(
        (members, units) in inputs(6, 40),
        weights in proptest::collection::vec(1u32..=5, 6),
        scale in 2u32..=200,
    ) {
        let units = refs(&units);
        let members: Vec<(&str, u32)> =
            members.iter().zip(&weights).map(|(m, &w)| (m.as_str(), w)).collect();
        let scaled: Vec<(&str, u32)> = members.iter().map(|&(m, w)| (m, w * scale)).collect();
        prop_assert_eq!(assign_weighted(&scaled, &units), assign_weighted(&members, &units));
    }

    #[test]
    fn weighted_order_and_duplicates_do_not_matter(
        (members, shuffled, units) in (inputs(6, 30), proptest::collection::vec(1u32..=4, 6))
            .prop_flat_map(|((m, u), w)| {
                let members: Vec<(String, u32)> = m.into_iter().zip(w).collect();
                (Just(members.clone()), Just(members).prop_shuffle(), Just(u))
            })
    ) {
        let members: Vec<(&str, u32)> = members.iter().map(|(m, w)| (m.as_str(), *w)).collect();
        let mut shuffled: Vec<(&str, u32)> =
            shuffled.iter().map(|(m, w)| (m.as_str(), *w)).collect();
        // Extra entries with smaller weights than a name's largest.
        let extra: Vec<(&str, u32)> = shuffled.iter().map(|&(m, _)| (m, 1)).collect();
        shuffled.extend(extra);
        let units = refs(&units);
        let reversed: Vec<&str> = units.iter().rev().copied().collect();
        prop_assert_eq!(
            assign_weighted(&shuffled, &reversed),
            assign_weighted(&members, &units)
        );
    }
}

/// The fast path with 32-bit unit indices in the sort keys (see
/// [`assign_tuned`]) and every size in [`PARTITION_LENS`], which must
/// all agree.
fn narrow<'a>(
    members: &[&'a str],
    units: &[&'a str],
    member_pos: impl Fn(&str) -> u64 + Copy,
    point: impl Fn(&str, u32) -> u64 + Copy,
) -> Table<'a> {
    let [first, rest @ ..] = PARTITION_LENS
        .map(|partition_len| assign_tuned(members, units, member_pos, point, partition_len, 32));
    for (other, partition_len) in rest.iter().zip(&PARTITION_LENS[1..]) {
        assert_eq!(&first, other, "partition_len {partition_len}");
    }
    first
}

/// Ties on the hash bits of sort keys, between points whose hashes
/// differ only in the bits the unit index replaces, and between member
/// positions and points: with 32-bit unit indices and hashes that
/// differ mostly in their lowest bits, every bucket is full of them.
#[test]
fn narrow_keys_larger() {
    let members = numbered("worker-", 1..=13);
    let units = numbered("unit-", 1..=300);
    let (members, units) = (refs(&members), refs(&units));
    let got = narrow(&members, &units, member_position, unit_point);
    assert_eq!(got, reference_real(&members, &units));
    // Only the top 8 and the low 16 bits vary.
    let low = |hash: u64| hash & 0xff00_0000_0000_ffff;
    let pos = |m: &str| low(member_position(m));
    let point = |u: &str, i| low(unit_point(u, i));
    let got = narrow(&members, &units, pos, point);
    check_invariants(&members, &units, &got);
    assert_eq!(got, reference(&members, &units, pos, point));
    for kind in 0..4 {
        let pos = |m: &str| weaken(kind, member_position(m));
        let point = |u: &str, i| weaken(kind, unit_point(u, i));
        let got = narrow(&members[..5], &units[..100], pos, point);
        assert_eq!(got, reference(&members[..5], &units[..100], pos, point));
    }
}

#[test]
fn weighted_examples() {
    let units = numbered("u", 1..=12);
    let units = refs(&units);
    let got = assign_weighted(&[("a", 1), ("b", 2), ("c", 3)], &units);
    let sizes: Vec<usize> = got.values().map(Vec::len).collect();
    assert_eq!(sizes, [2, 4, 6]);
    // 10 units, weights 1:1:3: shares 2, 2, 6 exactly.
    let got = assign_weighted(&[("a", 1), ("b", 1), ("c", 3)], &units[..10]);
    let sizes: Vec<usize> = got.values().map(Vec::len).collect();
    assert_eq!(sizes, [2, 2, 6]);
    // 8 units, weights 1:1:1:4: shares 8/7 (floor 1, fraction 1/7) and
    // 32/7 (floor 4, fraction 4/7). The floors sum to 7: the one unit
    // left goes to the largest fraction.
    let got = assign_weighted(&[("a", 1), ("b", 1), ("c", 1), ("d", 4)], &units[..8]);
    let sizes: Vec<usize> = got.values().map(Vec::len).collect();
    assert_eq!(sizes, [1, 1, 1, 5]);
    // Quotas: ties of the fraction go to the earlier member.
    assert_eq!(quotas(&[1, 1, 1], 5), [2, 2, 1]);
    assert_eq!(quotas(&[2, 1, 2], 6), [3, 1, 2]);
    assert_eq!(quotas(&[], 0), Vec::<usize>::new());
    assert_eq!(quotas(&[0, 0], 3), [2, 1]);
}

/// Units already sorted and distinct are used as they are, without a
/// copy; the result is the same.
#[test]
fn sorted_units_need_no_copy() {
    let members = numbered("worker-", 1..=7);
    let units = numbered("unit-", 1..=200);
    let (members, mut units) = (refs(&members), refs(&units));
    let shuffled = assign(&members, &units);
    units.sort_unstable();
    assert_eq!(assign(&members, &units), shuffled);
    assert_eq!(shuffled, reference_real(&members, &units));
}
