//! Sticky assignment: the balanced table that moves the fewest units.
//!
//! [`ring::assign`] is a function of the member and unit sets alone, so one
//! join or leave also moves units between members that stayed. [`assign`]
//! here takes the current table as a third input and changes it only as much
//! as the balance rule requires; it adopts any table, including one written
//! by another implementation (unbalanced, a unit in several rows, units no
//! longer listed, rows of members that are gone). Pure like the rest of the
//! core: no IO, no clock, no randomness, and the result depends only on the
//! inputs as *sets*: the order of members, units and rows, and duplicates
//! among them, change nothing.
//!
//! # Balance rule
//!
//! With `U` listed units and live members of weights `w_i` (see
//! [`ring::assign_weighted`]: a name listed twice keeps its largest weight,
//! 0 counts as 1), every row has the floor or the ceiling of its exact share
//! `U × w_i / Σw` ([`ring::shares`]), and the rows partition the units. So
//! `R = U − Σ floor` rows get their ceiling. With every weight 1 that is the
//! classic rule: every row has `⌊U/N⌋` or `⌈U/N⌉` units. Unlike the ring, the
//! rule does not say *which* rows get the ceiling: that choice is one of the
//! ways to move less (see step 2 below).
//!
//! # What counts as a move
//!
//! A *holder* of a listed unit is a live member whose current row contains
//! it (once or more). A unit is
//! * *held* when it has exactly one holder,
//! * *contested* when it has several (only an adopted table does that),
//! * *free* when it has none: a new unit, or one whose members all left.
//!
//! A unit **moves** when it is held and its owner in the result is not its
//! holder ([`moved`] counts them). Free units are *placed*, not moved: they
//! have no owner to move from. Contested units are not counted either: every
//! holder but one loses the unit whatever the result, and none of them has a
//! better claim. They stay with one of their holders when one has room (step
//! 4), but that is best effort, not part of the minimum.
//!
//! # Minimality
//!
//! Let `K_i` be the number of units member `i` holds. A result with row sizes
//! `t_i` moves at least `Σ max(0, K_i − t_i)` units: a row of `t_i` keeps at
//! most `t_i` of them. [`assign`] moves exactly the minimum of that bound
//! over every `t` the balance rule allows (so over every choice of the `R`
//! members that get their ceiling): the tests check it against a brute-force
//! search over those choices, on random histories and adopted tables.
//!
//! # The algorithm
//!
//! 1. If no listed unit has a holder (the first table, or every holder is
//!    gone), the result is [`ring::assign_weighted`]'s: nothing can stay, and
//!    the ring gives a well spread start.
//! 2. Targets: every member gets the floor of its share, and the `R`
//!    ceilings go to members whose share has a fraction, ranked by: holding
//!    more than the floor first (a ceiling there keeps one more unit, and
//!    saves one move, which makes the total minimal), then the larger
//!    fraction, then the smaller [`member_position`] (a hash, so the extra
//!    units do not favour early names), then the name.
//! 3. Keep: each member keeps its held units up to its target. A member
//!    above it gives up the units with the highest *score* `xxh3(unit, seed
//!    = member_position(member))`: a pseudo-random order of its own, so the
//!    units that move are spread over the unit space, independent of names'
//!    order, and the same in every replica.
//! 4. Contested units, in sorted order, stay with the holder with room whose
//!    score for the unit is lowest; with no holder with room, they are free.
//! 5. Free units (new ones, those of departed members, those given up in step
//!    3 or left in step 4) fill the room that remains, which is exactly
//!    their number (targets sum to `U`). The free units are put in the order of
//!    `xxh3(unit, FREE_SEED)`, the room as slots `(member, j)`, `j` below the
//!    member's room, in the order of `xxh3(member, SLOT_SEED + j)`, and the
//!    k-th unit goes to the k-th slot: each free unit lands on a
//!    pseudo-random member with room, members receiving in proportion to
//!    their room, so a departed member's units spread over all the others.
//!
//! With steady inputs the result is a fixed point: solving again from it
//! changes nothing (its rows already meet their targets, and the members
//! holding a ceiling are exactly those ranked first in step 2).
//!
//! # Limiting moves
//!
//! [`limit_moves`] lets at most a given number of held units move in one
//! cycle; the others stay with their holder for now. Free and contested
//! units are never held back. From the limited table the next [`assign`]
//! moves exactly the moves held back (no more: see [`limit_moves`]), so with
//! steady inputs balance is reached after `⌈moves / limit⌉` cycles, moving
//! the same units in total as one unlimited cycle would.
//!
//! # Cost
//!
//! Linear in the units and the table, apart from sorting: the units (as the
//! ring does, skipped when they come sorted and distinct), the free units
//! and the contested pairs. A hash map from unit name to index finds the
//! current rows' units (about 50 bytes a unit, the largest allocation, with
//! 4 bytes a unit for each unit's holder and 16 for the result's rows). No
//! step looks at every member for every unit: 10,000 members and 1,000,000
//! units take a fraction of the ring's time (see the `sticky_timing` tool in
//! the tests). Unit names are hashed with a fixed-seed XXH3 for the map,
//! which leaves the lookups open to names chosen to collide; whoever
//! lists units can overload the distributor in simpler ways.

use std::cmp::Reverse;
use std::collections::{BTreeMap, HashMap};
use std::hash::{BuildHasherDefault, Hasher};

use xxhash_rust::xxh3::xxh3_64_with_seed;

use crate::core::ring::{self, Share, member_position, sorted_distinct};

/// A table: member -> sorted units, as [`ring::assign`] returns it.
pub type Table<'a> = BTreeMap<&'a str, Vec<&'a str>>;

/// Seed of the hash that orders free units (step 5). Any fixed value far
/// from the ring's seeds (`0..50`) does, but the seeds are part of the
/// result, which every replica must compute alike: changing one is a
/// breaking change (see the golden test).
pub const FREE_SEED: u64 = 0x5717_c4f0_f7ee_0001;
/// Base seed of the hashes that order the room's slots (step 5).
pub const SLOT_SEED: u64 = 0x5717_c4f0_510f_0000;
/// Seed of the hash that decides which moves [`limit_moves`] lets through.
pub const LIMIT_SEED: u64 = 0x5717_c4f0_11a1_0001;

/// Marks in [`Holders::of`].
pub(super) const FREE: u32 = u32::MAX;
pub(super) const CONTESTED: u32 = u32::MAX - 1;

/// The sticky assignment: `current` rows (member, units), in any order, a
/// member's row possibly split over several entries; live `members` with
/// their weights; the listed `units`. Every live member is in the result,
/// possibly with an empty row; rows are sorted. See the module docs.
pub fn assign<'a, 'c, R>(
    current: impl IntoIterator<Item = (&'c str, R)>,
    members: &[(&'a str, u32)],
    units: &[&'a str],
) -> Table<'a>
where
    R: IntoIterator<Item = &'c str>,
{
    assign_counted(current, members, units).0
}

/// What [`assign_counted`] counts of its result, as [`moved_and_kept`] and
/// [`min_moves`] would from the same `current`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    pub moved: usize,
    pub kept: usize,
    pub minimum: usize,
}

/// [`assign`], with [`moved_and_kept`] and [`min_moves`] of its result
/// from the one reading of `current` the solve makes (each of them would
/// read it again: the index of every unit is most of a solve's time).
pub fn assign_counted<'a, 'c, R>(
    current: impl IntoIterator<Item = (&'c str, R)>,
    members: &[(&'a str, u32)],
    units: &[&'a str],
) -> (Table<'a>, Counts)
where
    R: IntoIterator<Item = &'c str>,
{
    let (names, weights) = ring::normalize_weighted(members);
    let units = sorted_distinct(units);
    if names.is_empty() {
        return (Table::new(), Counts::default());
    }
    assert!(names.len() < CONTESTED as usize, "too many members");
    let Holders { mut of, contested } = Holders::read(current, &names, &units);
    if contested.is_empty() && of.iter().all(|&h| h == FREE) {
        // Nothing held: nothing moves or stays, and the minimum is 0.
        let members: Vec<(&'a str, u32)> = names.into_iter().zip(weights).collect();
        return (ring::assign_weighted(&members, &units), Counts::default());
    }
    let holders = of.clone();

    let positions: Vec<u64> = names.iter().map(|m| member_position(m)).collect();
    let held = held_alone(&of, names.len());
    let shares = ring::shares(&weights, units.len());
    let minimum = least_moves(&held, &shares, units.len());
    let targets = targets(&shares, &held, &positions, units.len());

    // Step 3: members above their target give up their highest scores.
    let mut excess: Vec<usize> = held
        .iter()
        .zip(&targets)
        .map(|(&k, &t)| k.saturating_sub(t))
        .collect();
    if excess.iter().any(|&e| e > 0) {
        let mut over: Vec<Vec<(u64, u32)>> = vec![Vec::new(); names.len()];
        for (unit, &h) in of.iter().enumerate() {
            if h < CONTESTED && excess[h as usize] > 0 {
                let score = xxh3_64_with_seed(units[unit].as_bytes(), positions[h as usize]);
                over[h as usize].push((score, unit as u32));
            }
        }
        for (scored, e) in over.iter_mut().zip(&mut excess) {
            if *e == 0 {
                continue;
            }
            // Keys are distinct (unit indices are), so the split is exact.
            let keep = scored.len() - *e;
            scored.select_nth_unstable(keep);
            for &(_, unit) in &scored[keep..] {
                of[unit as usize] = FREE;
            }
        }
    }
    let mut room: Vec<usize> = held
        .iter()
        .zip(&targets)
        .map(|(&k, &t)| t.saturating_sub(k))
        .collect();

    // Step 4: contested units stay with the holder with room that scores
    // them lowest.
    for pairs in contested.chunk_by(|a, b| a.0 == b.0) {
        let unit = pairs[0].0 as usize;
        let best = pairs
            .iter()
            .map(|&(_, m)| m as usize)
            .filter(|&m| room[m] > 0)
            .min_by_key(|&m| (xxh3_64_with_seed(units[unit].as_bytes(), positions[m]), m));
        of[unit] = match best {
            Some(m) => {
                room[m] -= 1;
                m as u32
            }
            None => FREE,
        };
    }

    // Step 5: free units, in hash order, into the room's slots, in hash order.
    let mut free: Vec<(u64, u32)> = of
        .iter()
        .enumerate()
        .filter(|&(_, &h)| h == FREE)
        .map(|(unit, _)| {
            (
                xxh3_64_with_seed(units[unit].as_bytes(), FREE_SEED),
                unit as u32,
            )
        })
        .collect();
    let mut slots: Vec<(u64, u32)> = Vec::with_capacity(free.len());
    for (m, &r) in room.iter().enumerate() {
        for j in 0..r as u64 {
            let key = xxh3_64_with_seed(names[m].as_bytes(), SLOT_SEED.wrapping_add(j));
            slots.push((key, m as u32));
        }
    }
    // Targets sum to the unit count, and every unit not free fills one.
    assert_eq!(free.len(), slots.len(), "room and free units differ");
    free.sort_unstable();
    // Equal keys are slots of one member (or a collision of two members'
    // hashes, then ordered by member index): the order stays deterministic.
    slots.sort_unstable();
    for (&(_, unit), &(_, m)) in free.iter().zip(&slots) {
        of[unit as usize] = m;
    }
    let mut counts = Counts {
        minimum,
        ..Counts::default()
    };
    for (&h, &o) in holders.iter().zip(&of) {
        if h == o {
            counts.kept += 1;
        } else if h < CONTESTED {
            counts.moved += 1;
        }
    }
    (rows(&names, &units, &of), counts)
}

/// Step 2: each member's target row size.
fn targets(shares: &[Share], held: &[usize], positions: &[u64], units: usize) -> Vec<usize> {
    let mut targets: Vec<usize> = shares.iter().map(|s| s.floor).collect();
    let extra = units - targets.iter().sum::<usize>();
    let mut ranked: Vec<usize> = (0..shares.len())
        .filter(|&i| shares[i].remainder > 0)
        .collect();
    ranked.sort_unstable_by_key(|&i| {
        (
            Reverse(held[i] > shares[i].floor),
            Reverse(shares[i].remainder),
            positions[i],
            i,
        )
    });
    // Fewer ceilings than fractional shares: the fractions sum to `extra`.
    for &i in &ranked[..extra] {
        targets[i] += 1;
    }
    targets
}

/// How many units move from `current` to `next` (see "What counts as a
/// move" in the module docs): units of `next` held, in `current`, by exactly
/// one member of `next` (its live members), now owned by another. `next`
/// must be a partition (every unit in one row), as [`assign`]'s results are.
pub fn moved<'c, R>(current: impl IntoIterator<Item = (&'c str, R)>, next: &Table<'_>) -> usize
where
    R: IntoIterator<Item = &'c str>,
{
    moved_and_kept(current, next).0
}

/// [`moved`], and how many units of `next` stay with their single holder in
/// `current` (the units neither moved nor placed), from one reading of
/// `current`. `next` must be a partition, as [`assign`]'s results are.
pub fn moved_and_kept<'c, R>(
    current: impl IntoIterator<Item = (&'c str, R)>,
    next: &Table<'_>,
) -> (usize, usize)
where
    R: IntoIterator<Item = &'c str>,
{
    let (names, units, owner) = flatten(next);
    let holders = Holders::read(current, &names, &units);
    let (mut moved, mut kept) = (0, 0);
    for (&h, &o) in holders.of.iter().zip(&owner) {
        if h == o {
            kept += 1;
        } else if h < CONTESTED {
            moved += 1;
        }
    }
    (moved, kept)
}

/// The least number of moves (see "What counts as a move") of any balanced
/// table for these inputs from `current`: what [`assign`] moves. In closed
/// form, without solving: the units held above the floors of the shares,
/// less one for each ceiling that can go to a member holding more than its
/// floor (see "Minimality"). Linear in the units and the table.
pub fn min_moves<'c, R>(
    current: impl IntoIterator<Item = (&'c str, R)>,
    members: &[(&str, u32)],
    units: &[&str],
) -> usize
where
    R: IntoIterator<Item = &'c str>,
{
    let (names, weights) = ring::normalize_weighted(members);
    let units = sorted_distinct(units);
    if names.is_empty() {
        return 0;
    }
    let holders = Holders::read(current, &names, &units);
    let held = held_alone(&holders.of, names.len());
    let shares = ring::shares(&weights, units.len());
    least_moves(&held, &shares, units.len())
}

/// [`min_moves`]' closed form, from what each member holds alone and the
/// shares of `units`.
fn least_moves(held: &[usize], shares: &[Share], units: usize) -> usize {
    let extra = units - shares.iter().map(|s| s.floor).sum::<usize>();
    let over: usize = held
        .iter()
        .zip(shares)
        .map(|(&k, s)| k.saturating_sub(s.floor))
        .sum();
    let savers = held
        .iter()
        .zip(shares)
        .filter(|&(&k, s)| s.remainder > 0 && k > s.floor)
        .count();
    over - savers.min(extra)
}

/// At most `max_moves` of the moves from `current` to `next` (a partition:
/// normally [`assign`]'s result from `current`): the moves with the lowest
/// `xxh3(unit, LIMIT_SEED)` go ahead, every other moving unit stays with its
/// holder. Units of `next` that were free or contested in `current` go
/// where `next` puts them: they have no single live owner to stay with, so
/// they are never held back. Deterministic like [`assign`]; with at most
/// `max_moves` moves it returns `next` itself.
///
/// The rows are then unbalanced until later cycles catch up. From the
/// limited table `L`, [`assign`] with the same inputs moves exactly the `m −
/// k` units held back (`m` moves, `k` let through): `L`'s rows above target
/// hold exactly those, so `m − k` is enough, and no result can need fewer,
/// since a unit that moves from `current` to it either moved to `L` (at most
/// `k` of them) or was still with its holder in `L`. So repeating
/// `limit_moves(L, assign(L, ..), k)` reaches balance in `⌈m / k⌉` cycles and
/// `m` moves in all (the tests check it).
pub fn limit_moves<'a, 'c, R>(
    current: impl IntoIterator<Item = (&'c str, R)>,
    next: &Table<'a>,
    max_moves: usize,
) -> Table<'a>
where
    R: IntoIterator<Item = &'c str>,
{
    let (names, units, mut owner) = flatten(next);
    let holders = Holders::read(current, &names, &units);
    // Equal hashes are ordered by name, not by index: indices follow the
    // rows' order.
    let mut moves: Vec<(u64, &str, u32)> = (0..units.len())
        .filter(|&u| holders.of[u] < CONTESTED && holders.of[u] != owner[u])
        .map(|u| {
            let key = xxh3_64_with_seed(units[u].as_bytes(), LIMIT_SEED);
            (key, units[u], u as u32)
        })
        .collect();
    if moves.len() <= max_moves {
        return next.clone();
    }
    // Keys are distinct: the first `max_moves` after the split are exactly
    // the lowest.
    moves.select_nth_unstable(max_moves);
    for &(_, _, unit) in &moves[max_moves..] {
        owner[unit as usize] = holders.of[unit as usize];
    }
    rows(&names, &units, &owner)
}

/// A table's members (sorted), its units in row order and each unit's owner
/// (member index). No sort: only [`Holders::read`]'s map needs the units,
/// and [`rows`] sorts the rows it builds. The table must be a partition
/// (every unit in one row), as [`assign`]'s results are.
fn flatten<'a>(table: &Table<'a>) -> (Vec<&'a str>, Vec<&'a str>, Vec<u32>) {
    let names: Vec<&'a str> = table.keys().copied().collect();
    let (units, owner) = table
        .values()
        .enumerate()
        .flat_map(|(m, row)| row.iter().map(move |&u| (u, m as u32)))
        .unzip();
    (names, units, owner)
}

/// Rows from each unit's owner, each sorted (already, when the unit indices
/// are in sorted order: then the sort only checks).
pub(super) fn rows<'a>(names: &[&'a str], units: &[&'a str], owner: &[u32]) -> Table<'a> {
    let mut sizes = vec![0usize; names.len()];
    for &m in owner {
        sizes[m as usize] += 1;
    }
    let mut rows: Vec<Vec<&'a str>> = sizes.into_iter().map(Vec::with_capacity).collect();
    for (&unit, &m) in units.iter().zip(owner) {
        rows[m as usize].push(unit);
    }
    for row in &mut rows {
        row.sort_unstable();
    }
    names.iter().copied().zip(rows).collect()
}

/// How many units each of `members` members holds alone, from
/// [`Holders::of`] (free and contested units count for nobody).
pub(super) fn held_alone(of: &[u32], members: usize) -> Vec<usize> {
    let mut held = vec![0usize; members];
    for &h in of {
        if h < CONTESTED {
            held[h as usize] += 1;
        }
    }
    held
}

/// Who holds each listed unit in the current table.
pub(super) struct Holders {
    /// Per unit index: its single holder's member index, [`FREE`] or
    /// [`CONTESTED`].
    pub(super) of: Vec<u32>,
    /// `(unit, member)` for every holder of every contested unit, sorted,
    /// distinct.
    pub(super) contested: Vec<(u32, u32)>,
}

impl Holders {
    /// `names` and `units` sorted and distinct. Rows of other names and
    /// units not in `units` are ignored; each (member, unit) pair counts
    /// once however often it appears.
    pub(super) fn read<'c, R>(
        current: impl IntoIterator<Item = (&'c str, R)>,
        names: &[&str],
        units: &[&str],
    ) -> Holders
    where
        R: IntoIterator<Item = &'c str>,
    {
        u32::try_from(units.len()).expect("more than u32::MAX work units");
        if units.is_empty() {
            // Nothing to look up: the current rows are not read at all.
            return Holders {
                of: Vec::new(),
                contested: Vec::new(),
            };
        }
        let index: HashMap<&str, u32, BuildHasherDefault<StrHasher>> = units
            .iter()
            .enumerate()
            .map(|(i, &u)| (u, i as u32))
            .collect();
        let mut of = vec![FREE; units.len()];
        let mut contested = Vec::new();
        for (member, row) in current {
            let Ok(m) = names.binary_search(&member) else {
                continue;
            };
            let m = m as u32;
            for unit in row {
                let Some(&u) = index.get(unit) else {
                    continue;
                };
                let h = &mut of[u as usize];
                match *h {
                    FREE => *h = m,
                    CONTESTED => contested.push((u, m)),
                    first if first == m => {}
                    first => {
                        contested.push((u, first));
                        contested.push((u, m));
                        *h = CONTESTED;
                    }
                }
            }
        }
        contested.sort_unstable();
        contested.dedup();
        Holders { of, contested }
    }
}

/// XXH3 for the unit index's keys: `str` hashes as its bytes then `0xff`.
#[derive(Default)]
pub(crate) struct StrHasher(u64);

impl Hasher for StrHasher {
    fn write(&mut self, bytes: &[u8]) {
        self.0 = xxh3_64_with_seed(bytes, self.0);
    }

    fn write_u8(&mut self, byte: u8) {
        self.0 = self.0.rotate_left(8) ^ u64::from(byte);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

mod fixed_point;
pub mod reassign;
mod waiting;
pub use fixed_point::holds_exactly;
pub use waiting::assign_waiting;

#[cfg(test)]
pub(crate) mod tests;
