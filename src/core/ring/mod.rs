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

use xxhash_rust::xxh3::xxh3_64_with_seed;

mod build;
mod packed;

use build::Ring;

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

#[cfg(test)]
mod tests;
