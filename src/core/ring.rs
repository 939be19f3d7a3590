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
//! # Capacity weights
//!
//! [`assign_weighted`] gives each member a weight (an integer, 0 counting as
//! 1; the daemon caps reported weights at 1,000). It changes two things and
//! nothing else, so that with every weight 1 it *is* [`assign`], bit for bit:
//!
//! 1. Quotas first. Member `i`'s exact share is `U × w_i / Σw` (see
//!    [`shares`]); its quota is the floor of it, and the `R = U − Σ floor`
//!    units left over go one each to the `R` members with the largest
//!    fractional parts, ties to the earlier member in sorted order (the
//!    largest-remainder method, [`quotas`]). So every row is the floor or the
//!    ceiling of its exact share. With equal weights every fraction is equal
//!    and the extra units go to the first `U mod S` members, as above.
//! 2. Then the same walk, where on its turn member `i` makes up to `w_i`
//!    picks in a row (each the closest remaining point clockwise from its
//!    cursor, as above) and a member whose quota is full passes. Weights are
//!    first divided by their greatest common divisor, so only their ratios
//!    matter: equal weights, whatever their value, give [`assign`]'s table.
//!
//! # How it scales
//!
//! Units only ever leave the ring, so the closest remaining point clockwise
//! of a member is always at or after the one it found last time. Each member
//! keeps a cursor into the sorted point array that only moves forward,
//! skipping points whose unit is already taken (a bitset over units), and
//! never goes more than one lap. With uniform hashes all cursors together
//! move about `U * ln U` steps (measured: 18 million for 1,000,000 units), so
//! the cost is dominated by putting the `50 * U` points in ring order once;
//! see `Ring::build` for how.
//!
//! The ring holds no hashes: for each point only the index of its unit,
//! packed in as many bits as the largest index needs (at least 6): 20 bits,
//! 125 bytes a unit, at 1,000,000 units. Building it adds the sort keys of
//! one partition of the points (8 bytes a point of the partition: 12.5
//! bytes a unit at 1,000,000 units), and `assign` adds a copy of the unit
//! list (16 bytes a unit) unless the units come sorted and distinct, as the
//! daemon's do. The measured peak RSS of `assign` above its inputs is about
//! 154 bytes a unit at 1,000,000 and 2,000,000 units (138 with sorted
//! units) and 135 at 100,000, where sorting 12-byte `(hash, unit)` pairs
//! took 621. The selection then needs the ring, the rows (4 bytes a unit)
//! and the bitset. Single-threaded: the build hashes every point three
//! times rather than twice, but moves less memory, and on the 2-core target
//! 10,000 members and 1,000,000 units took about a tenth less time than
//! with the 12-byte pairs.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::ops::Range;

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

/// [`assign`] with capacity weights: `(member, weight)` pairs. A member
/// listed more than once counts once, with its largest weight. See
/// "Capacity weights" in the module docs; with every weight equal this is
/// exactly [`assign`].
pub fn assign_weighted<'a>(
    members: &[(&'a str, u32)],
    units: &[&'a str],
) -> BTreeMap<&'a str, Vec<&'a str>> {
    weighted_with(
        members,
        units,
        member_position,
        unit_point,
        Ring::TARGET_PARTITION_LEN,
    )
}

/// A member's exact share of the units, `units × w / Σw`, as its floor and
/// the numerator of its fractional part (over `Σw`, the same for every
/// member, so remainders compare directly).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Share {
    pub floor: usize,
    pub remainder: u64,
}

/// Each weight's exact share of `units` (weight 0 counts as 1). The floors
/// sum to at most `units`, and the difference, the number of rows that get
/// their ceiling, is less than the number of shares with a remainder (or
/// zero): the fractional parts sum to it, and each is below 1.
pub fn shares(weights: &[u32], units: usize) -> Vec<Share> {
    let total: u64 = weights.iter().map(|&w| u64::from(w.max(1))).sum();
    weights
        .iter()
        .map(|&w| {
            // `units × w` fits in 96 bits, `total` in 64 (fewer than 2^32
            // members), so the floor fits a `usize` (it is at most `units`)
            // and the remainder a `u64`.
            let product = units as u128 * u128::from(w.max(1));
            Share {
                floor: (product / u128::from(total)) as usize,
                remainder: (product % u128::from(total)) as u64,
            }
        })
        .collect()
}

/// Row sizes by the largest-remainder method: each weight's share rounded
/// down, then one more for the members with the largest fractional parts,
/// ties to the earlier index, until the quotas sum to `units`. Equal weights
/// give `units / n` to all and one more to the first `units mod n`.
pub fn quotas(weights: &[u32], units: usize) -> Vec<usize> {
    let shares = shares(weights, units);
    let mut quotas: Vec<usize> = shares.iter().map(|s| s.floor).collect();
    let extra = units - quotas.iter().sum::<usize>();
    let mut order: Vec<usize> = (0..shares.len()).collect();
    // Stable: equal remainders keep index order.
    order.sort_by_key(|&i| std::cmp::Reverse(shares[i].remainder));
    for &i in &order[..extra] {
        quotas[i] += 1;
    }
    quotas
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
    assign_tuned(members, units, member_pos, point, partition_len, 0)
}

/// [`assign_with`], and for tests `min_width`, the least number of bits
/// [`Ring::build`] gives a unit index (which never changes the result
/// either): wide unit indices leave fewer hash bits in a sort key, so that
/// small inputs get the ties between keys that only large ones get with the
/// real hash.
fn assign_tuned<'a>(
    members: &[&'a str],
    units: &[&'a str],
    member_pos: impl Fn(&str) -> u64,
    point: impl Fn(&str, u32) -> u64,
    partition_len: usize,
    min_width: u32,
) -> BTreeMap<&'a str, Vec<&'a str>> {
    let members = sorted_distinct(members).into_owned();
    let weights = vec![1; members.len()];
    solve(
        members,
        &weights,
        units,
        member_pos,
        point,
        partition_len,
        min_width,
    )
}

/// [`assign_weighted`] with the internals of [`assign_with`] as parameters.
fn weighted_with<'a>(
    members: &[(&'a str, u32)],
    units: &[&'a str],
    member_pos: impl Fn(&str) -> u64,
    point: impl Fn(&str, u32) -> u64,
    partition_len: usize,
) -> BTreeMap<&'a str, Vec<&'a str>> {
    let (members, weights) = normalize_weighted(members);
    solve(
        members,
        &weights,
        units,
        member_pos,
        point,
        partition_len,
        0,
    )
}

/// Weighted members as sorted distinct names and their weights: a name
/// listed twice keeps its largest weight, 0 counts as 1, and the weights are
/// divided by their greatest common divisor (only ratios matter, and with
/// equal weights the walk is then [`assign`]'s, one pick per turn).
pub(crate) fn normalize_weighted<'a>(members: &[(&'a str, u32)]) -> (Vec<&'a str>, Vec<u32>) {
    let mut members = members.to_vec();
    // Largest weight first within a name, so `dedup_by_key` keeps it.
    members.sort_unstable_by(|a, b| a.0.cmp(b.0).then(b.1.cmp(&a.1)));
    members.dedup_by_key(|m| m.0);
    let divisor = members.iter().fold(0, |g, m| gcd(g, m.1.max(1)));
    members
        .into_iter()
        .map(|(m, w)| (m, w.max(1) / divisor.max(1)))
        .unzip()
}

fn gcd(mut a: u32, mut b: u32) -> u32 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

/// The walk of the module docs over sorted distinct `members` with their
/// `weights` (all 1 for [`assign`]).
fn solve<'a>(
    members: Vec<&'a str>,
    weights: &[u32],
    units: &[&'a str],
    member_pos: impl Fn(&str) -> u64,
    point: impl Fn(&str, u32) -> u64,
    partition_len: usize,
    min_width: u32,
) -> BTreeMap<&'a str, Vec<&'a str>> {
    let units = sorted_distinct(units);
    if members.is_empty() {
        return BTreeMap::new();
    }
    if units.is_empty() {
        return members.into_iter().map(|m| (m, Vec::new())).collect();
    }

    let positions: Vec<u64> = members.iter().map(|m| member_pos(m)).collect();
    let (ring, mut cursors) = Ring::build(&units, point, &positions, partition_len, min_width);
    // With equal weights: `U / S` for all, one more for the first `U mod S`,
    // exactly the rows the unweighted walk fills before the units run out.
    let quotas = quotas(weights, units.len());
    let mut rows: Vec<Vec<u32>> = quotas.iter().map(|&q| Vec::with_capacity(q)).collect();
    let mut taken = vec![0u64; units.len().div_ceil(64)];
    let mut remaining = units.len();

    'rounds: loop {
        for (((cursor, row), &quota), &weight) in cursors
            .iter_mut()
            .zip(rows.iter_mut())
            .zip(&quotas)
            .zip(weights)
        {
            // A full row passes its turn; quotas sum to the unit count, so
            // while units remain some row is not full.
            for _ in 0..weight.min((quota - row.len()) as u32) {
                // Points before the cursor (clockwise from the member) all
                // belong to taken units, so the first untaken point from the
                // cursor on is the closest remaining one. Some unit remains,
                // so this ends within one lap.
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
                if remaining == 0 {
                    break 'rounds;
                }
            }
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

/// Bytewise-sorted and distinct, without a copy when they already are (as
/// the daemon passes units: a copy costs 16 bytes a unit).
pub(super) fn sorted_distinct<'s, 'a>(items: &'s [&'a str]) -> Cow<'s, [&'a str]> {
    if items.is_sorted_by(|a, b| a < b) {
        Cow::Borrowed(items)
    } else {
        let mut items = items.to_vec();
        items.sort_unstable();
        items.dedup();
        Cow::Owned(items)
    }
}

/// Every point of every unit, in ring order, reduced to what the selection
/// needs: the index (in the sorted unit list) of the unit each point belongs
/// to, packed in as few bits as the largest index needs. Hashes are only
/// needed to put the points in order and to place the members, both done in
/// [`Ring::build`].
struct Ring {
    owners: Packed,
}

impl Ring {
    /// Aim for about this many points per bucket of the fine counting sort,
    /// so that the insertion sort that finishes it has almost nothing to do.
    const TARGET_BUCKET_LEN: usize = 1;
    /// Aim for about this many points per coarse partition (the default of
    /// `partition_len` in [`Ring::build`]), within the limits below. The
    /// sort keys of one partition, 8 bytes a point, are the build's only
    /// temporary memory that grows with the input.
    const TARGET_PARTITION_LEN: usize = 1 << 21;
    /// But at least this many bits for the coarse partition, once there is
    /// more than one: each partition hashes its points again, reading the
    /// unit strings of its points in unit order, and with 32 partitions or
    /// fewer it reads most of them, nearly sequentially. With more, fewer
    /// and farther apart, so that cache misses dominate: 256 partitions
    /// took five times as long as 32 for that pass at 1,000,000 units.
    const MIN_COARSE_BITS: u32 = 5;
    /// And at most this many: more write streams in the coarse scatter
    /// thrash the cache and TLB.
    const MAX_COARSE_BITS: u32 = 8;
    /// Aim for about this many points per bucket of the middle level (a
    /// scatter within the partition's keys), so that the fine sort of a
    /// bucket works within the L1 and L2 caches, up to the cap below.
    const TARGET_MIDDLE_LEN: usize = 1 << 12;
    /// At most this many bits for the middle level: more write streams
    /// thrash the cache.
    const MAX_MIDDLE_BITS: u32 = 8;
    /// A bucket this full means the hashes are far from uniform (only seen
    /// with test hashes): finish with a general sort instead of the
    /// insertion sort, which would go quadratic.
    const MAX_INSERTION_BUCKET: usize = 64;
    /// Bits of a point's index (`0..POINTS_PER_UNIT`) in a code.
    const POINT_BITS: u32 = 6;

    /// Builds the ring for a non-empty, sorted, duplicate-free unit list, and
    /// finds for each of `positions` the index of the first point with hash
    /// `>= position` (0 if there is none: the ring wraps).
    ///
    /// A three-level radix sort on the top hash bits, each level a counting
    /// sort, which never holds a hash for every point (that alone would be
    /// 8 bytes a point). The ring itself is a packed array of `W`-bit slots,
    /// one per point, `W` the bits of the largest unit index (at least 6,
    /// at most `min_width`): 20 bits at 1,000,000 units. It holds a code for
    /// each point until level 3 writes the unit indices over the codes.
    ///
    /// 1. Coarse: the top `C` bits (0, or 5 to 8) split the points into
    ///    partitions laid out in ring order. A first pass hashes every point
    ///    and counts the points of each partition (and of each bucket, for
    ///    level 2); a second hashes them again and scatters a code for each,
    ///    into the slots of its partition. The codes must fit in `W` bits, so
    ///    the units are split into at most 64 groups of consecutive indices,
    ///    and each partition is laid out group by group: where a slot is
    ///    tells its group, and the code holds the unit index within the
    ///    group (`W - 6` bits) and the point index (6 bits). With a single
    ///    partition the points are in unit order already, and the scatter is
    ///    skipped.
    /// 2. Middle, one partition at a time: the partition's points are hashed
    ///    a third time, from their codes, in unit order, and their sort keys
    ///    (8 bytes each: see `key` below) scattered by the next `M <= 8` bits
    ///    into buckets, in a buffer the size of the largest partition.
    /// 3. Fine, one bucket at a time: a counting sort on the next bits
    ///    (about one bucket per point) into a second, bucket-sized buffer
    ///    leaves only tiny runs out of order, and one insertion sort pass
    ///    finishes it. Keys that tie on their hash bits are put in order by
    ///    [`Ring::resolve`]. The member positions in the bucket are looked
    ///    up by binary search, then the unit indices are written over the
    ///    partition's codes, in ring order.
    ///
    /// So the peak is the packed array plus one partition's keys: about 125
    /// plus 12.5 bytes a unit at 1,000,000 units (32 partitions). Hashing
    /// every point three times rather than twice costs about a tenth of the
    /// time; packing codes and keys into fewer bytes than the 12 a point of
    /// a plain `(hash, unit)` sort also moves less memory, and the whole
    /// takes no longer than that sort did.
    fn build(
        units: &[&str],
        point: impl Fn(&str, u32) -> u64,
        positions: &[u64],
        partition_len: usize,
        min_width: u32,
    ) -> (Ring, Vec<usize>) {
        const {
            assert!(POINTS_PER_UNIT <= 1 << Self::POINT_BITS);
        }
        u32::try_from(units.len()).expect("more than u32::MAX work units");
        let len = units
            .len()
            .checked_mul(POINTS_PER_UNIT as usize)
            .expect("point count overflows usize");
        // Bits per slot: enough for every unit index (the final content),
        // and at least `POINT_BITS` (a code holds a point index).
        let width = bits_to_hold(units.len() - 1)
            .max(Self::POINT_BITS)
            .max(min_width.min(32));
        let unit_mask = (1u64 << width) - 1;
        // A code is `(unit index within its group) << POINT_BITS | i`.
        let group_bits = width - Self::POINT_BITS;
        let groups = ((units.len() - 1) >> group_bits) + 1;
        // `len >= POINTS_PER_UNIT`, so `1 <= sort_bits < 64`.
        let sort_bits = bits_to_hold(len / Self::TARGET_BUCKET_LEN);
        let coarse_bits = match bits_to_hold(len / partition_len.max(1)) {
            0 => 0,
            bits => bits.clamp(Self::MIN_COARSE_BITS, Self::MAX_COARSE_BITS),
        }
        .min(sort_bits);
        let middle_bits = bits_to_hold((len >> coarse_bits) / Self::TARGET_MIDDLE_LEN)
            .min(Self::MAX_MIDDLE_BITS)
            .min(sort_bits - coarse_bits);
        let fine_bits = sort_bits - coarse_bits - middle_bits;
        let partitions = 1usize << coarse_bits;
        let middles = 1usize << middle_bits;
        // A bucket: the points whose hashes share their top `bucket_bits`;
        // its index is those bits. Partition `c` has buckets
        // `c * middles..(c + 1) * middles`.
        let bucket_bits = coarse_bits + middle_bits;
        let bucket_of = |hash: u64| top(hash, bucket_bits);
        let coarse_of = |hash: u64| top(hash, coarse_bits);
        // Sort key of a point within its bucket: the hash bits below the
        // bucket's, but with the unit index in the low `width` bits, over
        // the lowest hash bits if `width > bucket_bits` (7 of them at
        // 1,000,000 units). Integer order is ring order, except among keys
        // with equal hash bits (`key >> width`): see `Ring::resolve`.
        let key = |hash: u64, unit: usize| ((hash << bucket_bits) & !unit_mask) | unit as u64;
        let fine_of = |key: u64| top(key, fine_bits);
        let point = &point;

        // Level 1: count per group and partition, and per bucket.
        // `counts[g * partitions + c]`: points of group `g` in partition `c`.
        let mut counts = vec![0usize; groups * partitions];
        let mut bucket_len = vec![0usize; partitions * middles];
        for (index, unit) in units.iter().enumerate() {
            let row = &mut counts[(index >> group_bits) * partitions..][..partitions];
            for i in 0..POINTS_PER_UNIT {
                let hash = point(unit, i);
                row[coarse_of(hash)] += 1;
                bucket_len[bucket_of(hash)] += 1;
            }
        }
        // Partitions in ring order, each one group by group.
        // `region_start[g * partitions + c]`: where group `g` starts in
        // partition `c`.
        let mut partition_start = Vec::with_capacity(partitions + 1);
        let mut region_start = vec![0usize; groups * partitions];
        let mut total = 0;
        for c in 0..partitions {
            partition_start.push(total);
            for g in 0..groups {
                region_start[g * partitions + c] = total;
                total += counts[g * partitions + c];
            }
        }
        partition_start.push(total);
        // Scatter the codes. With a single partition, point `k` in unit
        // order belongs at slot `k`: nothing to write.
        let mut owners = Packed::zeroed(len, width);
        if partitions > 1 {
            let mut next = region_start.clone();
            let low_mask = (1usize << group_bits) - 1;
            for (index, unit) in units.iter().enumerate() {
                let next = &mut next[(index >> group_bits) * partitions..][..partitions];
                let base = ((index & low_mask) as u64) << Self::POINT_BITS;
                for i in 0..POINTS_PER_UNIT {
                    let slot = &mut next[coarse_of(point(unit, i))];
                    owners.or(*slot, base | u64::from(i));
                    *slot += 1;
                }
            }
        }

        // Levels 2 and 3, one partition at a time, visiting the member
        // positions in increasing order alongside.
        let mut by_position: Vec<usize> = (0..positions.len()).collect();
        by_position.sort_unstable_by_key(|&m| positions[m]);
        let mut by_position = by_position.into_iter().peekable();
        let mut starts = vec![0usize; positions.len()];
        let largest_partition = partition_start.windows(2).map(|w| w[1] - w[0]).max();
        let mut keys = vec![0u64; largest_partition.unwrap_or(0)];
        let mut sorted = vec![0u64; bucket_len.iter().copied().max().unwrap_or(0)];
        let mut middle_next = vec![0usize; middles];
        let mut fine_start = vec![0usize; 1 << fine_bits];
        for c in 0..partitions {
            let (lo, hi) = (partition_start[c], partition_start[c + 1]);
            let buckets = c * middles..(c + 1) * middles;
            let mut total = 0;
            for (next, &len) in middle_next.iter_mut().zip(&bucket_len[buckets.clone()]) {
                (*next, total) = (total, total + len);
            }
            // Level 2: hash the partition's points again and scatter their
            // keys by bucket.
            let keys = &mut keys[..hi - lo];
            let mut scatter = |unit: usize, i: u32| {
                let hash = point(units[unit], i);
                let slot = &mut middle_next[bucket_of(hash) & (middles - 1)];
                keys[*slot] = key(hash, unit);
                *slot += 1;
            };
            if partitions == 1 {
                for unit in 0..units.len() {
                    for i in 0..POINTS_PER_UNIT {
                        scatter(unit, i);
                    }
                }
            } else {
                for g in 0..groups {
                    let start = region_start[g * partitions + c];
                    for k in start..start + counts[g * partitions + c] {
                        let code = owners.get(k);
                        let unit = (g << group_bits) | (code >> Self::POINT_BITS) as usize;
                        scatter(unit, (code & ((1 << Self::POINT_BITS) - 1)) as u32);
                    }
                }
            }
            // Level 3, one bucket at a time. The codes are all read: the
            // unit indices replace them.
            owners.clear(lo..hi);
            let mut writer = owners.writer(lo);
            let mut bucket_lo = 0;
            for bucket in buckets {
                let bucket_keys = &keys[bucket_lo..bucket_lo + bucket_len[bucket]];
                let base = lo + bucket_lo;
                bucket_lo += bucket_keys.len();
                fine_start.fill(0);
                for &key in bucket_keys {
                    fine_start[fine_of(key)] += 1;
                }
                let mut total = 0;
                let mut largest = 0;
                for slot in &mut fine_start {
                    largest = largest.max(*slot);
                    (*slot, total) = (total, total + *slot);
                }
                let sorted = &mut sorted[..bucket_keys.len()];
                for &key in bucket_keys {
                    let slot = &mut fine_start[fine_of(key)];
                    sorted[*slot] = key;
                    *slot += 1;
                }
                // Fine buckets are in order, so every key is out of place
                // only within its own tiny one.
                if largest <= Self::MAX_INSERTION_BUCKET {
                    insertion_sort(sorted);
                } else {
                    sorted.sort_unstable();
                }
                let resolve =
                    |run: &[u64]| Self::resolve(run, bucket, bucket_bits, width, units, point);
                // Runs of keys with equal hash bits: put them in ring order.
                let mut run_lo = sorted
                    .windows(2)
                    .position(|pair| pair[0] >> width == pair[1] >> width)
                    .unwrap_or(sorted.len());
                while run_lo < sorted.len() {
                    let bits = sorted[run_lo] >> width;
                    let run_len = sorted[run_lo..]
                        .iter()
                        .position(|&key| key >> width != bits)
                        .unwrap_or(sorted.len() - run_lo);
                    if run_len > 1 {
                        let run = &mut sorted[run_lo..run_lo + run_len];
                        let points = resolve(run);
                        for (key, (_, unit)) in run.iter_mut().zip(points) {
                            *key = (bits << width) | u64::from(unit);
                        }
                    }
                    run_lo += run_len;
                }
                while let Some(m) = by_position.next_if(|&m| bucket_of(positions[m]) == bucket) {
                    let position = positions[m];
                    // Unit index 0 makes this the smallest key with these
                    // hash bits: the keys before `k` have smaller hashes.
                    let target = key(position, 0);
                    let mut k = sorted.partition_point(|&key| key < target);
                    let run_len = sorted[k..]
                        .iter()
                        .position(|&key| key >> width != target >> width)
                        .unwrap_or(sorted.len() - k);
                    if run_len > 0 {
                        // The same hash bits as the position: compare whole
                        // hashes.
                        let run = resolve(&sorted[k..k + run_len]);
                        k += run.iter().filter(|&&(hash, _)| hash < position).count();
                    }
                    let k = base + k;
                    starts[m] = if k == len { 0 } else { k };
                }
                for &key in sorted.iter() {
                    owners.push(&mut writer, key & unit_mask);
                }
            }
            owners.finish(writer);
        }
        (Ring { owners }, starts)
    }

    /// The points of a run of keys of `bucket` with equal hash bits, as
    /// `(hash, unit index)` in ring order. A key has lost its point index
    /// and perhaps the lowest hash bits, so this hashes every point of the
    /// run's units again and keeps those that fall in the run: as many, for
    /// each unit, as it has keys in the run. With the real hash a run is
    /// rare (at 1,000,000 units, two points in a bucket of about 6,000 with
    /// 44 more equal bits: about once in a hundred builds).
    fn resolve(
        run: &[u64],
        bucket: usize,
        bucket_bits: u32,
        width: u32,
        units: &[&str],
        point: impl Fn(&str, u32) -> u64,
    ) -> Vec<(u64, u32)> {
        let bits = run[0] >> width;
        let unit_mask = (1u64 << width) - 1;
        let mut of_run: Vec<u32> = run.iter().map(|&key| (key & unit_mask) as u32).collect();
        of_run.sort_unstable();
        of_run.dedup();
        let mut points = Vec::with_capacity(run.len());
        for unit in of_run {
            for i in 0..POINTS_PER_UNIT {
                let hash = point(units[unit as usize], i);
                // The same test as the key's, `(hash << bucket_bits) >> width`.
                let in_run = top(hash, bucket_bits) == bucket
                    && (hash << bucket_bits) & !unit_mask == bits << width;
                if in_run {
                    points.push((hash, unit));
                }
            }
        }
        debug_assert_eq!(points.len(), run.len());
        points.sort_unstable();
        points
    }

    /// Unit index of the point at `k`.
    fn unit_at(&self, k: usize) -> usize {
        self.owners.get(k) as usize
    }

    fn len(&self) -> usize {
        self.owners.len
    }
}

/// The top `bits` bits of `hash` (0 for none).
fn top(hash: u64, bits: u32) -> usize {
    // `checked_shr`: with no bits the shift would be by 64.
    hash.checked_shr(64 - bits).unwrap_or(0) as usize
}

/// `len` unsigned integers of `width` bits each (`1..=32`), packed end to
/// end, little-endian, into bytes. A value is read and set as one unaligned
/// `u64` (it starts at most 7 bits into its first byte, and `7 + 32` bits
/// fit), which is why 7 bytes of padding follow.
struct Packed {
    bytes: Vec<u8>,
    width: u32,
    len: usize,
}

/// Where [`Packed::push`] writes next.
struct Writer {
    /// The first byte not written yet.
    byte: usize,
    /// The bits not written yet, from that byte's bit 0 on, and how many
    /// (counting those below the first value, which stay 0).
    acc: u64,
    filled: u32,
}

impl Packed {
    /// `len` zeros.
    fn zeroed(len: usize, width: u32) -> Self {
        assert!((1..=32).contains(&width), "packed width {width}");
        let bits = len
            .checked_mul(width as usize)
            .expect("packed size overflows usize");
        Packed {
            bytes: vec![0; bits.div_ceil(8) + 7],
            width,
            len,
        }
    }

    /// The byte where value `k` starts, and its bit offset in that byte.
    fn locate(&self, k: usize) -> (usize, u32) {
        debug_assert!(k < self.len);
        let bit = k * self.width as usize;
        (bit / 8, (bit % 8) as u32)
    }

    fn word(&self, byte: usize) -> u64 {
        u64::from_le_bytes(self.bytes[byte..byte + 8].try_into().unwrap())
    }

    fn mask(&self) -> u64 {
        (1 << self.width) - 1
    }

    /// Value `k`.
    fn get(&self, k: usize) -> u64 {
        let (byte, shift) = self.locate(k);
        (self.word(byte) >> shift) & self.mask()
    }

    /// Sets value `k`, which is still zero, to `value`. (Setting the
    /// values of one range in order is faster with [`Packed::writer`]:
    /// this reads bytes the previous call has just written.)
    fn or(&mut self, k: usize, value: u64) {
        debug_assert!(value <= self.mask() && self.get(k) == 0);
        let (byte, shift) = self.locate(k);
        let word = self.word(byte) | (value << shift);
        self.bytes[byte..byte + 8].copy_from_slice(&word.to_le_bytes());
    }

    /// Sets values `range` to zero.
    fn clear(&mut self, range: Range<usize>) {
        let width = self.width as usize;
        let (mut bit, end) = (range.start * width, range.end * width);
        while bit < end && bit % 8 != 0 {
            self.bytes[bit / 8] &= !(1 << (bit % 8));
            bit += 1;
        }
        if bit < end / 8 * 8 {
            self.bytes[bit / 8..end / 8].fill(0);
            bit = end / 8 * 8;
        }
        while bit < end {
            self.bytes[bit / 8] &= !(1 << (bit % 8));
            bit += 1;
        }
    }

    /// Starts setting values in order from `k` on. They must be zero (see
    /// [`Packed::clear`]): a writer only sets bits, so it leaves the bits
    /// of the values before `k` and after its last one as they are.
    fn writer(&self, k: usize) -> Writer {
        let bit = k * self.width as usize;
        Writer {
            byte: bit / 8,
            acc: 0,
            filled: (bit % 8) as u32,
        }
    }

    /// Sets the writer's next value.
    fn push(&mut self, writer: &mut Writer, value: u64) {
        debug_assert!(value <= self.mask());
        writer.acc |= value << writer.filled;
        writer.filled += self.width;
        if writer.filled >= 32 {
            let bytes = &mut self.bytes[writer.byte..writer.byte + 4];
            let word = u32::from_le_bytes(bytes.try_into().unwrap()) | writer.acc as u32;
            bytes.copy_from_slice(&word.to_le_bytes());
            writer.byte += 4;
            writer.acc >>= 32;
            writer.filled -= 32;
        }
    }

    /// Writes the bits the writer still holds.
    fn finish(&mut self, mut writer: Writer) {
        while writer.filled > 0 {
            self.bytes[writer.byte] |= writer.acc as u8;
            writer.byte += 1;
            writer.acc >>= 8;
            writer.filled = writer.filled.saturating_sub(8);
        }
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

        #[test]
        fn packed_values_round_trip(
            width in 1u32..=32,
            values in proptest::collection::vec(any::<u32>(), 0..80),
            (from, to) in (0usize..80, 0usize..80),
        ) {
            let mask = (1u64 << width) - 1;
            let values: Vec<u64> = values.iter().map(|&v| u64::from(v) & mask).collect();
            let mut packed = Packed::zeroed(values.len(), width);
            for (k, &value) in values.iter().enumerate() {
                packed.or(k, value);
            }
            let got: Vec<u64> = (0..values.len()).map(|k| packed.get(k)).collect();
            prop_assert_eq!(&got, &values);
            // Overwrite a range, in place, with new values.
            let (from, to) = (from.min(to).min(values.len()), from.max(to).min(values.len()));
            let new = |k: usize| !values[k] & mask;
            packed.clear(from..to);
            let mut writer = packed.writer(from);
            for k in from..to {
                packed.push(&mut writer, new(k));
            }
            packed.finish(writer);
            let want: Vec<u64> = (0..values.len())
                .map(|k| if (from..to).contains(&k) { new(k) } else { values[k] })
                .collect();
            let got: Vec<u64> = (0..values.len()).map(|k| packed.get(k)).collect();
            prop_assert_eq!(got, want);
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
        let [first, rest @ ..] = PARTITION_LENS.map(|partition_len| {
            assign_tuned(members, units, member_pos, point, partition_len, 32)
        });
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
}
