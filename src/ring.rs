//! The assignment table: which live worker ("member") owns which work unit.
//!
//! This module is the pure core of the distributor. Given the set of live
//! members and the set of work units it computes, with no IO, no clock, no
//! randomness and no global state, a table `member -> units` that every
//! replica computes identically. The table is what goes on the wire, so the
//! exact output of [`assign`] is part of the protocol (see the golden vectors
//! in the tests).
//!
//! # The algorithm (from the design document)
//!
//! > We enter work units into a hash ring (with the weight of 50 to distribute
//! > them evenly), sort the services list (so that the order in which services
//! > are entered into the list won't affect the result), and then search for
//! > the closest corresponding value for each service. After detecting the
//! > closest corresponding value (a work unit related to this service), the
//! > work unit is deleted from the hash ring to avoid any possible repeated
//! > match.
//!
//! Precisely:
//!
//! 1. Members and units are deduplicated and sorted bytewise. Duplicates and
//!    input order therefore never change the result.
//! 2. Hash is XXH3-64. A member sits at [`member_position`]`(m)` =
//!    `xxh3_64_with_seed(m, 0)`. Unit `u` owns [`POINTS_PER_UNIT`] = 50 points,
//!    point `i` being [`unit_point`]`(u, i)` = `xxh3_64_with_seed(u, i)`. The
//!    ring is ordered by `(point hash, index of the unit in the sorted unit
//!    list)`, so equal hashes are ordered deterministically.
//! 3. Members, in sorted order, take turns round-robin. On its turn a member
//!    takes the closest *remaining* point clockwise from its own position
//!    (the first remaining point with hash `>=` its position, wrapping round
//!    to the smallest one), and that point's whole unit, all 50 of its
//!    points, leaves the ring. Rounds repeat until the ring is empty.
//! 4. Every distinct member appears in the result, possibly with no units;
//!    each row is sorted bytewise. No members gives an empty table; no units
//!    gives a table of empty rows.
//!
//! ```text
//!                     0 (= 2^64, wraps)
//!            p(b,7) .   .   . p(a,3)
//!              .                 .
//!       m2 -> *                   * <- m1
//!             .                   .
//!      p(c,0) .                   . p(b,12)
//!              .                 .
//!          p(a,41) .   .   . p(c,9)
//!
//!   m1, m2: positions of members "w1" < "w2"    p(u,i): point i of unit u
//!   clockwise = increasing hash
//! ```
//!
//! Round 1, members in sorted order: clockwise from m1 the first point is
//! p(b,12), so w1 takes unit b, and every point of b (p(b,7) too) leaves the
//! ring. Clockwise from m2, p(b,7) is gone; the search wraps past 0 to p(a,3),
//! so w2 takes unit a. Round 2: clockwise from m1 the first remaining point
//! is p(c,9), so w1 takes unit c. The ring is empty: w1 has {b, c}, w2 has {a}.
//!
//! # Guarantees
//!
//! * Partition: every distinct unit is in exactly one row; no other string
//!   appears.
//! * Balance: with `S` members and `U` units every row has `U / S` or
//!   `U / S + 1` units, and exactly the first `U mod S` members in sorted order
//!   get the extra one. (The old Go implementation gave the whole remainder to
//!   the last member; this one deliberately does not.)
//! * Determinism: the result depends only on the *sets* of members and units.
//!   Solving the result's own members and units again gives the same table.
//!
//! # How it scales
//!
//! Units only ever leave the ring, so the closest remaining point clockwise
//! of a member is always at or after the one it found last time. Each member
//! keeps a cursor into the sorted point array that only moves forward,
//! skipping points whose unit is already taken (a bitset over units), and
//! never goes more than one lap. With uniform hashes all cursors together
//! move about `U * ln U` steps (measured: 18 million for 1,000,000 units), so
//! the cost is dominated by sorting the `50 * U` points once; see
//! `Ring::build` for how. Memory peaks at 12 bytes a point during that sort
//! (about 600 MB for 1,000,000 units), then 4 bytes a point for the
//! selection. Single-threaded: on the 2-core target, 10,000 members and
//! 1,000,000 units take under a second.

use std::collections::BTreeMap;

use xxhash_rust::xxh3::xxh3_64_with_seed;

/// How many points each work unit has on the ring (its "weight").
pub const POINTS_PER_UNIT: u32 = 50;

/// Member position on the ring.
pub fn member_position(member: &str) -> u64 {
    xxh3_64_with_seed(member.as_bytes(), 0)
}

/// Point `i` (`0..POINTS_PER_UNIT`) of a unit.
pub fn unit_point(unit: &str, i: u32) -> u64 {
    xxh3_64_with_seed(unit.as_bytes(), u64::from(i))
}

/// The pure assignment. Result: member -> sorted units, with every distinct
/// member present (possibly with an empty row). See the module docs for the
/// exact definition.
pub fn assign<'a>(members: &[&'a str], units: &[&'a str]) -> BTreeMap<&'a str, Vec<&'a str>> {
    assign_with(
        members,
        units,
        member_position,
        unit_point,
        Ring::TARGET_PARTITION_LEN,
    )
}

/// [`assign`] with its internals as parameters, for tests: the hash
/// functions, so they can substitute deliberately weak hashes that force the
/// ties the real hash never produces, and the target partition size of
/// [`Ring::build`] (which never changes the result), so that small inputs
/// can span many partitions.
fn assign_with<'a>(
    members: &[&'a str],
    units: &[&'a str],
    member_pos: impl Fn(&str) -> u64,
    point: impl Fn(&str, u32) -> u64,
    partition_len: usize,
) -> BTreeMap<&'a str, Vec<&'a str>> {
    let members = sorted_distinct(members);
    let units = sorted_distinct(units);
    if members.is_empty() {
        return BTreeMap::new();
    }
    if units.is_empty() {
        return members.into_iter().map(|m| (m, Vec::new())).collect();
    }

    let positions: Vec<u64> = members.iter().map(|m| member_pos(m)).collect();
    let (ring, mut cursors) = Ring::build(&units, point, &positions, partition_len);
    let per_member = units.len() / members.len() + 1;
    let mut rows: Vec<Vec<u32>> = vec![Vec::with_capacity(per_member); members.len()];
    let mut taken = vec![0u64; units.len().div_ceil(64)];
    let mut remaining = units.len();

    'rounds: loop {
        for (cursor, row) in cursors.iter_mut().zip(rows.iter_mut()) {
            if remaining == 0 {
                break 'rounds;
            }
            // Points before the cursor (clockwise from the member) all belong
            // to taken units, so the first untaken point from the cursor on is
            // the closest remaining one. Some unit remains, so this ends
            // within one lap.
            let mut k = *cursor;
            let unit = loop {
                let unit = ring.unit_at(k);
                if taken[unit / 64] & (1 << (unit % 64)) == 0 {
                    break unit;
                }
                k += 1;
                if k == ring.len() {
                    k = 0;
                }
            };
            taken[unit / 64] |= 1 << (unit % 64);
            remaining -= 1;
            // `unit < units.len() <= u32::MAX` (checked in `Ring::build`).
            row.push(unit as u32);
            *cursor = k;
        }
    }
    drop(ring);

    members
        .into_iter()
        .zip(rows)
        .map(|(member, mut row)| {
            // Unit indices are positions in the bytewise-sorted unit list, so
            // sorting the indices sorts the row bytewise.
            row.sort_unstable();
            (member, row.into_iter().map(|i| units[i as usize]).collect())
        })
        .collect()
}

/// Bytewise-sorted, duplicate-free copy.
fn sorted_distinct<'a>(items: &[&'a str]) -> Vec<&'a str> {
    let mut items = items.to_vec();
    items.sort_unstable();
    items.dedup();
    items
}

/// Every point of every unit, in ring order, reduced to what the selection
/// needs: the index (in the sorted unit list) of the unit each point belongs
/// to. Hashes are only needed to put the points in order and to place the
/// members, both done in [`Ring::build`].
struct Ring {
    owners: Vec<u32>,
}

impl Ring {
    /// Aim for about this many points per bucket of the fine counting sort,
    /// so that the insertion sort that finishes it has almost nothing to do.
    const TARGET_BUCKET_LEN: usize = 1;
    /// Aim for about this many points per coarse partition (the default of
    /// `partition_len` in [`Ring::build`]), so that the fine sort of one
    /// partition (28 bytes a point plus 8 a bucket) works within the L2 cache,
    /// up to the cap below.
    const TARGET_PARTITION_LEN: usize = 1 << 14;
    /// But at most this many bits for the coarse partition: more than 256
    /// write streams (times two arrays) in the coarse scatter thrash the
    /// cache and TLB, and cost more than fine-sorting bigger partitions from
    /// L3. (Both limits measured on the 2-core target machine.)
    const MAX_COARSE_BITS: u32 = 8;
    /// A bucket this full means the hashes are far from uniform (only seen
    /// with test hashes): finish with a general sort instead of the
    /// insertion sort, which would go quadratic.
    const MAX_INSERTION_BUCKET: usize = 64;

    /// Builds the ring for a non-empty, sorted, duplicate-free unit list, and
    /// finds for each of `positions` the index of the first point with hash
    /// `>= position` (0 if there is none: the ring wraps).
    ///
    /// A two-level radix sort on the top hash bits, each level a counting
    /// sort:
    ///
    /// 1. Coarse: the top `C <= 8` bits split the points into partitions laid
    ///    out in ring order. With so few write streams this pass writes
    ///    memory nearly sequentially; a one-level scatter into millions of
    ///    buckets was cache-miss bound and took twice as long. Hashes and unit
    ///    indices go to two parallel arrays (12 bytes a point: the peak of
    ///    the whole assignment).
    /// 2. Fine, one partition at a time: a counting sort on the next bits
    ///    (about one bucket per point) into a scratch buffer of
    ///    `(hash, unit)` keys leaves only tiny runs out of order, so one
    ///    insertion sort pass over the partition finishes it. The member
    ///    positions in the partition are looked up by binary search, then the
    ///    unit indices are written back in ring order. (This replaced a
    ///    packed one-word-per-point format that needed a sort call per bucket:
    ///    the per-bucket calls took a third of the build.)
    ///
    /// Points are hashed twice (count, then scatter) rather than kept from a
    /// first pass: that would add another 8 bytes a point to the peak.
    fn build(
        units: &[&str],
        point: impl Fn(&str, u32) -> u64,
        positions: &[u64],
        partition_len: usize,
    ) -> (Ring, Vec<usize>) {
        let unit_count = u32::try_from(units.len()).expect("more than u32::MAX work units");
        let len = units
            .len()
            .checked_mul(POINTS_PER_UNIT as usize)
            .expect("point count overflows usize");
        // `len >= POINTS_PER_UNIT`, so `1 <= sort_bits < 64`.
        let sort_bits = bits_to_hold(len / Self::TARGET_BUCKET_LEN);
        let coarse_bits = sort_bits
            .min(bits_to_hold(len / partition_len.max(1)))
            .min(Self::MAX_COARSE_BITS);
        let fine_bits = sort_bits - coarse_bits;
        // `checked_shr`: with no coarse bits the shift would be by 64.
        let coarse_of = |hash: u64| hash.checked_shr(64 - coarse_bits).unwrap_or(0) as usize;
        let fine_mask = (1usize << fine_bits) - 1;
        let fine_of = |hash: u64| (hash >> (64 - sort_bits)) as usize & fine_mask;

        // Level 1: count, then scatter hashes and their unit indices.
        let mut partition_start = vec![0usize; (1 << coarse_bits) + 1];
        for unit in units {
            for i in 0..POINTS_PER_UNIT {
                partition_start[coarse_of(point(unit, i)) + 1] += 1;
            }
        }
        for c in 1..partition_start.len() {
            partition_start[c] += partition_start[c - 1];
        }
        let mut next = partition_start.clone();
        let mut hashes = vec![0u64; len];
        let mut owners = vec![0u32; len];
        for (index, unit) in (0..unit_count).zip(units) {
            for i in 0..POINTS_PER_UNIT {
                let hash = point(unit, i);
                let slot = &mut next[coarse_of(hash)];
                hashes[*slot] = hash;
                owners[*slot] = index;
                *slot += 1;
            }
        }
        drop(next);

        // Level 2, one partition at a time, visiting the member positions in
        // increasing order alongside.
        let mut by_position: Vec<usize> = (0..positions.len()).collect();
        by_position.sort_unstable_by_key(|&m| positions[m]);
        let mut by_position = by_position.into_iter().peekable();
        let mut starts = vec![0usize; positions.len()];
        let mut bucket_start = vec![0usize; 1 << fine_bits];
        // `(hash << 32) | unit`: integer order is ring order.
        let key = |hash: u64, unit: u32| (u128::from(hash) << 32) | u128::from(unit);
        let mut scratch: Vec<u128> = Vec::new();
        for (c, range) in partition_start.windows(2).enumerate() {
            let (lo, hi) = (range[0], range[1]);
            let (hashes, owners) = (&hashes[lo..hi], &mut owners[lo..hi]);
            bucket_start.fill(0);
            for &hash in hashes {
                bucket_start[fine_of(hash)] += 1;
            }
            let mut total = 0;
            let mut largest = 0;
            for slot in &mut bucket_start {
                largest = largest.max(*slot);
                (*slot, total) = (total, total + *slot);
            }
            scratch.clear();
            scratch.resize(hashes.len(), 0);
            for (&hash, &owner) in hashes.iter().zip(owners.iter()) {
                let slot = &mut bucket_start[fine_of(hash)];
                scratch[*slot] = key(hash, owner);
                *slot += 1;
            }
            // Buckets are in order, so every key is out of place only
            // within its own tiny bucket.
            if largest <= Self::MAX_INSERTION_BUCKET {
                insertion_sort(&mut scratch);
            } else {
                scratch.sort_unstable();
            }
            while let Some(m) = by_position.next_if(|&m| coarse_of(positions[m]) == c) {
                // Unit index 0 makes this the smallest key with this hash.
                let k = lo + scratch.partition_point(|&e| e < key(positions[m], 0));
                starts[m] = if k == len { 0 } else { k };
            }
            for (owner, &key) in owners.iter_mut().zip(&scratch) {
                // The low 32 bits are the unit index.
                *owner = key as u32;
            }
        }
        (Ring { owners }, starts)
    }

    /// Unit index of the point at `k`.
    fn unit_at(&self, k: usize) -> usize {
        self.owners[k] as usize
    }

    fn len(&self) -> usize {
        self.owners.len()
    }
}

/// Sorts a slice in which every element is at most a few places from where
/// it belongs; then this is linear, and beats any general sort.
fn insertion_sort<T: Ord + Copy>(v: &mut [T]) {
    for k in 1..v.len() {
        let x = v[k];
        let mut j = k;
        while j > 0 && v[j - 1] > x {
            v[j] = v[j - 1];
            j -= 1;
        }
        v[j] = x;
    }
}

/// Number of bits needed to represent `n` (0 for 0).
fn bits_to_hold(n: usize) -> u32 {
    usize::BITS - n.leading_zeros()
}

#[cfg(test)]
mod tests {
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
        let members = sorted_distinct(members);
        let units = sorted_distinct(units);
        let mut table: Table<'a> = members.iter().map(|m| (*m, Vec::new())).collect();
        if members.is_empty() {
            return table;
        }
        let point = &point;
        let mut ring: Vec<(u64, usize)> = units
            .iter()
            .enumerate()
            .flat_map(|(index, unit)| (0..POINTS_PER_UNIT).map(move |i| (point(unit, i), index)))
            .collect();
        ring.sort_unstable();
        while !ring.is_empty() {
            for member in &members {
                if ring.is_empty() {
                    break;
                }
                let position = member_pos(member);
                let &(_, unit) = ring
                    .iter()
                    .find(|(hash, _)| *hash >= position)
                    .unwrap_or(&ring[0]);
                ring.retain(|&(_, other)| other != unit);
                table.get_mut(member).unwrap().push(units[unit]);
            }
        }
        for row in table.values_mut() {
            row.sort_unstable();
        }
        table
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
        let members = sorted_distinct(members);
        let units = sorted_distinct(units);
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
    }
}
