//! Balance by cost: every member's load within a tolerance of its share,
//! moving few units, and only while a member is out of tolerance.
//!
//! Pure like [`sticky`]: no IO, no clock, no randomness; costs are exact
//! integers (thousandths, see `core::costs`) and every sum and comparison is
//! exact, so every replica computes the same table from the same inputs:
//! the current table, the live members and their weights, the units and
//! their costs. Order and duplicates in the inputs change nothing.
//!
//! # The rule
//!
//! A member's *load* is the sum of its units' costs. With `L` the total cost
//! and `W` the total weight, member `i`'s *share* is `s_i = L × w_i / W`.
//!
//! 1. **Hot units.** A unit larger than the share of every member (`c × W >
//!    L × max w`) cannot sit on any member within its share. It is *hot*: it
//!    sits alone on a member, which gets no other unit, and both leave the
//!    computation, so `L` and `W` shrink and the shares are recomputed (the
//!    per-weight share only falls: a hot unit is above it). Repeat until no
//!    unit is hot or one member remains, which then takes every other unit.
//!    A hot unit goes where that moves the fewest units (its own move, plus
//!    every other unit that member held), its holder first among equals,
//!    then the lighter weight, then by position.
//! 2. **The band.** Every other member must end within `[lo_i, hi_i]`:
//!    `s_i × (1 ± tolerance)`, widened where that is narrower to the
//!    multiples of `c_min` on either side of `s_i` (`c_min`: the cheapest
//!    remaining unit). The widening makes the band reachable when units are
//!    coarse: with equal costs it is exactly "the floor or the ceiling of
//!    the count share", the count rule.
//!
//! # The algorithm
//!
//! Units held by one live member stay with it unless the rule needs them
//! elsewhere. Units with no single live holder (new units, those of
//! departed members, contested ones, and those of a member that now
//! isolates a hot unit) are *free*: they are placed, not moved.
//!
//! 1. Hot units, as above.
//! 2. Free units, largest first, each onto the member whose load is the
//!    lowest per weight (longest-processing-time first: within 4/3 of the
//!    best possible busiest member, and near exact when units are small
//!    against shares).
//! 3. Repair, in rounds, until a round moves nothing:
//!    * a member above `hi` gives the receiver with the lowest load per
//!      weight the cheapest unit that alone brings it within the band, or
//!      else its largest unit that fits; nothing that would take it below
//!      `lo` or the receiver above `hi`;
//!    * a member below `lo` takes, from the member with the highest load
//!      per weight, the largest unit that keeps the donor at or above `lo`
//!      and itself at or below `hi`;
//!    * when neither moves anything, a member outside its band swaps one
//!      unit with a partner (the least loaded per weight first when it is
//!      above, the most loaded when below) so that both end within their
//!      bands: two moves.
//!
//! Every move of step 3 strictly reduces the total distance of the loads
//! outside their bands, and touches only a member outside its band, which
//! is the hysteresis: a table whose members are all within their bands
//! moves nothing, whatever the loads inside the bands. Solving again from
//! the result with the same inputs returns it (a fixed point): no unit is
//! free, and no repair move remains.
//!
//! # Fewest moves
//!
//! Choosing the fewest moves is a bin-packing problem; the solver is a
//! greedy that is exact in the common cases (an over-full member that one
//! unit fixes gives exactly that unit). [`Balanced::minimum`] is a lower
//! bound that holds for every table within the bands (with the same hot
//! placement): a member whose kept units exceed `hi` must give up at least
//! as many units as it takes its largest ones to cover the excess. The
//! tests compare both against a brute-force search on small cases.
//!
//! # Cost
//!
//! `O(U log U)` for the units (sorting the free ones, and the units of the
//! members that give), `O(log M)` per placement or move.

use std::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;

use xxhash_rust::xxh3::xxh3_64_with_seed;

use crate::core::ring::{self, member_position, sorted_distinct};
use crate::core::sticky::{CONTESTED, FREE, FREE_SEED, Holders, Table, rows};

/// How far from its share a member's load may be: basis points of the
/// share (`1000` = 10 %).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tolerance(u32);

impl Tolerance {
    /// A percent of the share, `%` optional, to two decimals: `10`,
    /// `2.5%`, from 0 to 100.
    pub fn parse(s: &str) -> Option<Tolerance> {
        let s = s.trim().trim_end_matches('%');
        let (whole, frac) = s.split_once('.').unwrap_or((s, ""));
        let digits = |t: &str| t.bytes().all(|b| b.is_ascii_digit());
        if whole.is_empty() || !digits(whole) || !digits(frac) || frac.len() > 2 {
            return None;
        }
        let whole: u32 = whole.parse().ok().filter(|&w| w <= 100)?;
        let frac: u32 = format!("{frac:0<2}").parse().ok()?;
        Tolerance::from_bp(whole * 100 + frac)
    }

    /// 10 %, `-balance-tolerance`'s default.
    pub const DEFAULT: Tolerance = Tolerance(1000);
    /// The widest tolerance: 100 % of the share.
    pub const MAX_BP: u32 = 10_000;

    /// `bp` basis points of the share, at most [`Tolerance::MAX_BP`].
    pub fn from_bp(bp: u32) -> Option<Tolerance> {
        (bp <= Self::MAX_BP).then_some(Tolerance(bp))
    }

    pub fn bp(self) -> u32 {
        self.0
    }
}

impl std::fmt::Display for Tolerance {
    /// As [`Tolerance::parse`] reads it: `10%`, `2.5%`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (whole, frac) = (self.0 / 100, self.0 % 100);
        match frac {
            0 => write!(f, "{whole}%"),
            _ => write!(f, "{}%", format!("{whole}.{frac:02}").trim_end_matches('0')),
        }
    }
}

/// What the table balances (`-balance`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Balance {
    /// The number of units (weighted): the `-assignment` solver, ring or
    /// sticky, as the Go implementation does.
    #[default]
    Count,
    /// The units' declared costs ([`assign`]), within a tolerance.
    Cost(Tolerance),
}

impl Balance {
    /// Every mode's name, as `-balance` takes it.
    pub const NAMES: &'static [&'static str] = &["count", "cost"];

    pub fn name(self) -> &'static str {
        match self {
            Balance::Count => "count",
            Balance::Cost(_) => "cost",
        }
    }

    /// `-balance` and `-balance-tolerance`.
    pub fn parse(s: &str, tolerance: Tolerance) -> Option<Balance> {
        match s {
            "count" => Some(Balance::Count),
            "cost" => Some(Balance::Cost(tolerance)),
            _ => None,
        }
    }

    /// As `{T}:meta`'s `assignment` records the mode: `ring`, `sticky`, or
    /// `cost tolerance=10%` (which [`Balance::decode`] reads back).
    pub fn describe(self, assignment: &str) -> String {
        match self {
            Balance::Count => assignment.to_string(),
            Balance::Cost(t) => format!("cost tolerance={t}"),
        }
    }

    /// The balance a `{T}:meta` `assignment` value records (see
    /// [`Balance::describe`]); `Count` for `ring`, `sticky` or anything
    /// unreadable.
    pub fn decode(described: &str) -> Balance {
        described
            .strip_prefix("cost tolerance=")
            .and_then(Tolerance::parse)
            .map_or(Balance::Count, Balance::Cost)
    }
}

/// A balanced table and what the solve found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Balanced<'a> {
    pub table: Table<'a>,
    /// Hot units (larger than every share), sorted; each alone on a member
    /// where possible.
    pub hot: Vec<&'a str>,
    /// A lower bound on the moves of every table within the bands, with the
    /// same hot placement (see "Fewest moves" in the module docs).
    pub minimum: usize,
}

/// One member's place in the balance: its load against its band.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberLoad<'a> {
    pub member: &'a str,
    /// The sum of its units' costs (thousandths).
    pub load: u64,
    /// Its share of the load, rounded: for a member isolating a hot unit,
    /// that unit's cost.
    pub share: u64,
    /// The band its load should be in: `lo..=hi`.
    pub lo: u64,
    pub hi: u64,
    /// The hot unit it isolates, if any.
    pub hot: Option<&'a str>,
}

impl MemberLoad<'_> {
    pub fn in_band(&self) -> bool {
        (self.lo..=self.hi).contains(&self.load)
    }
}

/// A table's balance summed over its groups, for status and metrics
/// ([`crate::core::table::MatchingTable::loads`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LoadSummary {
    /// Per member, sorted by name.
    pub members: Vec<MemberSummary>,
    /// Hot units, sorted.
    pub hot: Vec<String>,
}

/// One member's load against its share, summed over its groups.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberSummary {
    pub member: String,
    /// Thousandths of a cost, as `core::costs` keeps them.
    pub load: u64,
    /// Its share; for a member isolating a hot unit, that unit's cost.
    pub share: u64,
    /// Whether its load is within its band in every group.
    pub in_band: bool,
    /// The hot units it isolates.
    pub hot: Vec<String>,
}

impl LoadSummary {
    /// The busiest member's load against its share: `max load ÷ share`
    /// (1 when every member carries exactly its share; a member isolating
    /// a hot unit has that unit's cost as its share). 0 with no load.
    pub fn imbalance(&self) -> f64 {
        self.members
            .iter()
            .filter(|m| m.share > 0)
            .map(|m| m.load as f64 / m.share as f64)
            .fold(0.0, f64::max)
    }

    /// The least busy member's load against its share. 0 with no member.
    pub fn least(&self) -> f64 {
        self.members
            .iter()
            .filter(|m| m.share > 0)
            .map(|m| m.load as f64 / m.share as f64)
            .reduce(f64::min)
            .unwrap_or(0.0)
    }

    /// Members whose load is outside their band.
    pub fn out_of_band(&self) -> usize {
        self.members.iter().filter(|m| !m.in_band).count()
    }

    /// Adds one group's loads ([`loads`]).
    pub fn add(&mut self, group: &[MemberLoad<'_>]) {
        for l in group {
            match self
                .members
                .binary_search_by(|m| m.member.as_str().cmp(l.member))
            {
                Ok(i) => {
                    let m = &mut self.members[i];
                    m.load += l.load;
                    m.share += l.share;
                    m.in_band &= l.hot.is_some() || l.in_band();
                    m.hot.extend(l.hot.map(str::to_string));
                }
                Err(i) => self.members.insert(
                    i,
                    MemberSummary {
                        member: l.member.to_string(),
                        load: l.load,
                        share: l.share,
                        in_band: l.hot.is_some() || l.in_band(),
                        hot: l.hot.map(str::to_string).into_iter().collect(),
                    },
                ),
            }
            if let Some(u) = l.hot
                && let Err(i) = self.hot.binary_search_by(|h| h.as_str().cmp(u))
            {
                self.hot.insert(i, u.to_string());
            }
        }
    }
}

/// Each unit's cost, in thousandths (0 counts as 1).
#[derive(Clone, Copy)]
pub enum Costs<'c> {
    /// Looked up by name, for every unit.
    Lookup(&'c dyn Fn(&str) -> u64),
    /// `costs[i]` is the cost of `units[i]`: the units must be given
    /// sorted and distinct (as `Inputs` holds them), so that a caller
    /// that solves often looks every cost up once, not once a solve.
    Aligned(&'c [u64]),
}

impl Costs<'_> {
    /// The costs of `units` (sorted and distinct; `given`: as the caller
    /// gave them, not sorted here), in their order.
    fn of(self, units: &[&str], given: bool) -> Vec<u64> {
        match self {
            Costs::Lookup(f) => units.iter().map(|u| f(u).max(1)).collect(),
            Costs::Aligned(c) => {
                assert!(
                    given && c.len() == units.len(),
                    "aligned costs need sorted, distinct units, one cost each"
                );
                c.iter().map(|&c| c.max(1)).collect()
            }
        }
    }
}

/// The cost-balanced table (see the module docs): `current` rows (member,
/// units) in any order, live `members` with their weights, the listed
/// `units` and each unit's `cost` (thousandths, 0 counts as 1).
pub fn assign<'a, 'c, R>(
    current: impl IntoIterator<Item = (&'c str, R)>,
    members: &[(&'a str, u32)],
    units: &[&'a str],
    cost: Costs<'_>,
    tolerance: Tolerance,
) -> Balanced<'a>
where
    R: IntoIterator<Item = &'c str>,
{
    let (names, weights) = ring::normalize_weighted(members);
    let units = sorted_distinct(units);
    if names.is_empty() {
        return Balanced {
            table: Table::new(),
            hot: Vec::new(),
            minimum: 0,
        };
    }
    assert!(names.len() < CONTESTED as usize, "too many members");
    let mut of = Holders::read(current, &names, &units).of;
    // A contested unit has no single holder with a better claim: free.
    for h in &mut of {
        if *h == CONTESTED {
            *h = FREE;
        }
    }
    let costs = cost.of(&units, matches!(units, std::borrow::Cow::Borrowed(_)));
    let mut s = Solver::new(&names, weights, &units, costs, of, tolerance);
    let minimum = s.minimum();
    s.place_free();
    for _ in 0..MAX_ROUNDS {
        if s.shed_over() + s.fill_under() == 0 && s.swap() == 0 {
            break;
        }
    }
    let mut hot: Vec<&'a str> = s.bands.hot.iter().map(|&u| units[u as usize]).collect();
    hot.sort_unstable();
    Balanced {
        table: rows(&names, &units, &s.owner),
        hot,
        minimum,
    }
}

/// Each live member's load against its band in `table` (rows of members
/// that are not live are ignored, as are units not listed), as the solver
/// sees it: the same hot units, shares and bands. For status and metrics.
pub fn loads<'a>(
    table: &Table<'a>,
    members: &[(&'a str, u32)],
    units: &[&'a str],
    cost: Costs<'_>,
    tolerance: Tolerance,
) -> Vec<MemberLoad<'a>> {
    let (names, weights) = ring::normalize_weighted(members);
    let units = sorted_distinct(units);
    let of = Holders::read(
        table.iter().map(|(m, r)| (*m, r.iter().copied())),
        &names,
        &units,
    )
    .of;
    let costs = cost.of(&units, matches!(units, std::borrow::Cow::Borrowed(_)));
    let mut load = vec![0u64; names.len()];
    for (&h, &c) in of.iter().zip(&costs) {
        if h < CONTESTED {
            load[h as usize] += c;
        }
    }
    let positions: Vec<u64> = names.iter().map(|m| member_position(m)).collect();
    let bands = Bands::new(&weights, &positions, &costs, &of, tolerance);
    names
        .iter()
        .enumerate()
        .map(|(i, &member)| {
            let (share, lo, hi, hot) = match bands.isolating[i] {
                Some(u) => {
                    let c = costs[u as usize];
                    (c, c, c, Some(units[u as usize]))
                }
                None => (bands.share(i, &weights), bands.lo[i], bands.hi[i], None),
            };
            MemberLoad {
                member,
                load: load[i],
                share,
                lo,
                hi,
                hot,
            }
        })
        .collect()
}

/// Repair rounds at most: each strictly reduces the distance outside the
/// bands, and a later solve goes on where this one stopped.
const MAX_ROUNDS: usize = 16;

/// Donors a receiver tries, at most, before it gives up in this round.
const MAX_DONORS_TRIED: usize = 64;

/// Hot units and the bands of the other members.
struct Bands {
    /// Per member: the hot unit it isolates.
    isolating: Vec<Option<u32>>,
    /// Hot units, in the order they were found.
    hot: Vec<u32>,
    /// Hot units whose single live holder is not the member that isolates
    /// them: each is a move.
    hot_moved: usize,
    /// The total cost and weight of the members that isolate nothing.
    total: u128,
    wsum: u128,
    lo: Vec<u64>,
    hi: Vec<u64>,
}

impl Bands {
    /// Step 1 and the bands, from each unit's holder `of` (an index or
    /// [`FREE`]/[`CONTESTED`]).
    fn new(weights: &[u32], positions: &[u64], costs: &[u64], of: &[u32], t: Tolerance) -> Bands {
        let m = weights.len();
        let mut held = vec![0usize; m];
        for &h in of {
            if h < CONTESTED {
                held[h as usize] += 1;
            }
        }
        let mut isolating: Vec<Option<u32>> = vec![None; m];
        let mut total: u128 = costs.iter().map(|&c| u128::from(c)).sum();
        let mut wsum: u128 = weights.iter().map(|&w| u128::from(w)).sum();
        let mut by_weight: Vec<u32> = (0..m as u32).collect();
        by_weight.sort_unstable_by_key(|&i| (Reverse(weights[i as usize]), i));
        let mut heaviest = 0;
        let mut biggest: BinaryHeap<(u64, Reverse<u32>)> = costs
            .iter()
            .enumerate()
            .map(|(u, &c)| (c, Reverse(u as u32)))
            .collect();
        let mut hot = Vec::new();
        let mut hot_moved = 0;
        let mut remaining = m;
        while remaining > 1 {
            let Some(&(c, Reverse(u))) = biggest.peek() else {
                break;
            };
            while isolating[by_weight[heaviest] as usize].is_some() {
                heaviest += 1;
            }
            let wmax = u128::from(weights[by_weight[heaviest] as usize]);
            if u128::from(c) * wsum <= total * wmax {
                break;
            }
            biggest.pop();
            let holder = of[u as usize];
            let moves = |j: usize| {
                let own = holder == j as u32;
                held[j] - usize::from(own) + usize::from(holder < CONTESTED && !own)
            };
            let j = (0..m)
                .filter(|&j| isolating[j].is_none())
                .min_by_key(|&j| (moves(j), holder != j as u32, weights[j], positions[j], j))
                .expect("a member remains");
            isolating[j] = Some(u);
            hot.push(u);
            hot_moved += usize::from(holder < CONTESTED && holder != j as u32);
            remaining -= 1;
            wsum -= u128::from(weights[j]);
            total -= u128::from(c);
        }
        // Hot units are the costliest: unless every unit is hot, the
        // cheapest unit is not.
        let c_min = match hot.len() < costs.len() {
            true => costs.iter().map(|&c| u128::from(c)).min().unwrap_or(0),
            false => 0,
        };
        let (mut lo, mut hi) = (vec![0u64; m], vec![0u64; m]);
        let bp = u128::from(t.0);
        let scale = u128::from(Tolerance::MAX_BP);
        for i in 0..m {
            if isolating[i].is_some() {
                continue;
            }
            let share = total * u128::from(weights[i]); // over `wsum`
            let hi_t = (scale + bp) * share / (scale * wsum);
            // The multiples of `c_min` around the share.
            let step = c_min * wsum;
            let hi_c = share.div_ceil(step.max(1)) * c_min;
            let lo_t = ((scale - bp) * share).div_ceil(scale * wsum);
            let lo_c = share / step.max(1) * c_min;
            hi[i] = hi_t.max(hi_c) as u64;
            lo[i] = lo_t.min(lo_c) as u64;
        }
        Bands {
            isolating,
            hot,
            hot_moved,
            total,
            wsum,
            lo,
            hi,
        }
    }

    /// Member `i`'s share, rounded (it isolates nothing).
    fn share(&self, i: usize, weights: &[u32]) -> u64 {
        let num = self.total * u128::from(weights[i]);
        ((2 * num + self.wsum) / (2 * self.wsum)) as u64
    }
}

/// Orders members by load per weight (`load_a × w_b` against `load_b ×
/// w_a`), then by position and index: a total order, the same everywhere.
#[derive(Clone, Copy, PartialEq, Eq)]
struct ByLoad {
    load: u64,
    weight: u32,
    position: u64,
    member: u32,
}

impl Ord for ByLoad {
    fn cmp(&self, o: &Self) -> Ordering {
        let a = u128::from(self.load) * u128::from(o.weight);
        let b = u128::from(o.load) * u128::from(self.weight);
        a.cmp(&b)
            .then(self.position.cmp(&o.position))
            .then(self.member.cmp(&o.member))
    }
}

impl PartialOrd for ByLoad {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}

/// A member's units, for giving: `(cost, Reverse(score), unit)` ascending,
/// so that among equal costs the highest score goes first (as in sticky).
type Units = Vec<(u64, Reverse<u64>, u32)>;

/// A member's units: unsorted until it gives one, then sorted.
enum Held {
    Bucket(Vec<u32>),
    Sorted(Units),
}

struct Solver<'n, 'u> {
    names: &'n [&'n str],
    weights: Vec<u32>,
    positions: Vec<u64>,
    units: &'u [&'u str],
    costs: Vec<u64>,
    /// Each unit's owner so far, or [`FREE`].
    owner: Vec<u32>,
    load: Vec<u64>,
    bands: Bands,
    /// Moves the hot placement forces: hot units that change member, and
    /// the other units of the members that isolate them.
    forced: usize,
    /// Per member that isolates nothing: its units, bucketed at the first
    /// repair, sorted once it gives (most members never do).
    lists: Option<Vec<Held>>,
}

impl<'n, 'u> Solver<'n, 'u> {
    fn new(
        names: &'n [&'n str],
        weights: Vec<u32>,
        units: &'u [&'u str],
        costs: Vec<u64>,
        mut owner: Vec<u32>,
        t: Tolerance,
    ) -> Self {
        let positions: Vec<u64> = names.iter().map(|m| member_position(m)).collect();
        let bands = Bands::new(&weights, &positions, &costs, &owner, t);
        let mut hot = bands.hot.clone();
        hot.sort_unstable();
        let mut forced = bands.hot_moved;
        // The other units of a member that isolates a hot unit are free;
        // each that is not hot itself (counted above) was held: a move.
        for (u, h) in owner.iter_mut().enumerate() {
            if *h < CONTESTED
                && let Some(own) = bands.isolating[*h as usize]
                && own != u as u32
            {
                *h = FREE;
                forced += usize::from(hot.binary_search(&(u as u32)).is_err());
            }
        }
        for (j, isolated) in bands.isolating.iter().enumerate() {
            if let &Some(u) = isolated {
                owner[u as usize] = j as u32;
            }
        }
        let mut load = vec![0u64; names.len()];
        for (u, &h) in owner.iter().enumerate() {
            if h < CONTESTED {
                load[h as usize] += costs[u];
            }
        }
        Solver {
            names,
            weights,
            positions,
            units,
            costs,
            owner,
            load,
            bands,
            forced,
            lists: None,
        }
    }

    /// Whether member `i` isolates nothing: the bands apply to it.
    fn open(&self, i: usize) -> bool {
        self.bands.isolating[i].is_none()
    }

    fn by_load(&self, i: usize) -> ByLoad {
        ByLoad {
            load: self.load[i],
            weight: self.weights[i],
            position: self.positions[i],
            member: i as u32,
        }
    }

    fn entry(&self, member: usize, u: u32) -> (u64, Reverse<u64>, u32) {
        let score = xxh3_64_with_seed(self.units[u as usize].as_bytes(), self.positions[member]);
        (self.costs[u as usize], Reverse(score), u)
    }

    /// The lower bound of "Fewest moves", before any free unit is placed:
    /// the hot placement's moves, plus the larger of two bounds (a move
    /// takes one unit from one member and gives it to one):
    /// - giving: for each member whose kept units exceed `hi`, the fewest
    ///   of its units that cover the excess (its largest ones);
    /// - taking: the load members below `lo` lack, less the free units'
    ///   load (placed, not moved), over the costliest unit anyone holds.
    fn minimum(&self) -> usize {
        let m = self.names.len();
        let over: Vec<bool> = (0..m)
            .map(|i| self.open(i) && self.load[i] > self.bands.hi[i])
            .collect();
        let lacking: u128 = (0..m)
            .filter(|&i| self.open(i))
            .map(|i| u128::from(self.bands.lo[i].saturating_sub(self.load[i])))
            .sum();
        let taking = if lacking > 0 {
            let (mut free, mut largest) = (0u128, 0u128);
            for (u, &h) in self.owner.iter().enumerate() {
                let c = u128::from(self.costs[u]);
                if h == FREE {
                    free += c;
                } else if h < CONTESTED && self.open(h as usize) {
                    largest = largest.max(c);
                }
            }
            match largest {
                0 => 0,
                _ => lacking.saturating_sub(free).div_ceil(largest) as usize,
            }
        } else {
            0
        };
        if !over.contains(&true) {
            return self.forced + taking;
        }
        let mut held: Vec<Vec<u64>> = vec![Vec::new(); m];
        for (u, &h) in self.owner.iter().enumerate() {
            if h < CONTESTED && over[h as usize] {
                held[h as usize].push(self.costs[u]);
            }
        }
        let mut giving = 0;
        for (i, mut costs) in held.into_iter().enumerate() {
            if !over[i] {
                continue;
            }
            costs.sort_unstable_by(|a, b| b.cmp(a));
            let excess = self.load[i] - self.bands.hi[i];
            let mut covered = 0u64;
            for c in costs {
                if covered >= excess {
                    break;
                }
                covered += c;
                giving += 1;
            }
        }
        self.forced + giving.max(taking)
    }

    /// Step 2: free units, largest first, onto the lowest load per weight.
    fn place_free(&mut self) {
        let mut free: Vec<(Reverse<u64>, u64, u32)> = self
            .owner
            .iter()
            .enumerate()
            .filter(|&(_, &h)| h == FREE)
            .map(|(u, _)| {
                let key = xxh3_64_with_seed(self.units[u].as_bytes(), FREE_SEED);
                (Reverse(self.costs[u]), key, u as u32)
            })
            .collect();
        if free.is_empty() {
            return;
        }
        free.sort_unstable();
        let mut heap: BinaryHeap<Reverse<ByLoad>> = (0..self.names.len())
            .filter(|&i| self.open(i))
            .map(|i| Reverse(self.by_load(i)))
            .collect();
        for (_, _, u) in free {
            // The least loaded per weight where the unit fits below `hi`,
            // else the least loaded.
            let c = self.costs[u as usize];
            let mut tried: Vec<Reverse<ByLoad>> = Vec::new();
            let mut to = None;
            while tried.len() < MAX_DONORS_TRIED {
                let Some(Reverse(e)) = heap.pop() else {
                    break;
                };
                let i = e.member as usize;
                if c <= self.bands.hi[i].saturating_sub(self.load[i]) {
                    to = Some(i);
                    break;
                }
                tried.push(Reverse(e));
            }
            let i = match to {
                Some(i) => i,
                None => {
                    let Reverse(least) = tried.remove(0);
                    least.member as usize
                }
            };
            heap.extend(tried);
            self.give(u, i);
            heap.push(Reverse(self.by_load(i)));
        }
    }

    /// Gives unit `u`, free or owned, to member `to`.
    fn give(&mut self, u: u32, to: usize) {
        let c = self.costs[u as usize];
        let from = self.owner[u as usize];
        if from < CONTESTED {
            self.load[from as usize] -= c;
            let e = self.entry(from as usize, u);
            match self.lists.as_mut().map(|l| &mut l[from as usize]) {
                Some(Held::Sorted(list)) => {
                    let at = list.binary_search(&e).expect("listed with its owner");
                    list.remove(at);
                }
                Some(Held::Bucket(bucket)) => {
                    let at = bucket.iter().position(|&x| x == u).expect("in its bucket");
                    bucket.swap_remove(at);
                }
                None => {}
            }
        }
        self.owner[u as usize] = to as u32;
        self.load[to] += c;
        let e = self.entry(to, u);
        match self.lists.as_mut().map(|l| &mut l[to]) {
            Some(Held::Sorted(list)) => {
                let at = list.binary_search(&e).unwrap_err();
                list.insert(at, e);
            }
            Some(Held::Bucket(bucket)) => bucket.push(u),
            None => {}
        }
    }

    /// Buckets every member's units, once: a counting pass, no sort.
    fn build_lists(&mut self) {
        if self.lists.is_some() {
            return;
        }
        let mut sizes = vec![0usize; self.names.len()];
        for &h in &self.owner {
            if h < CONTESTED {
                sizes[h as usize] += 1;
            }
        }
        let mut buckets: Vec<Vec<u32>> = sizes.into_iter().map(Vec::with_capacity).collect();
        for (u, &h) in self.owner.iter().enumerate() {
            if h < CONTESTED {
                buckets[h as usize].push(u as u32);
            }
        }
        self.lists = Some(buckets.into_iter().map(Held::Bucket).collect());
    }

    /// Sorts member `i`'s units, if they are not yet: before it gives.
    fn sort_list(&mut self, i: usize) {
        self.build_lists();
        let Some(Held::Bucket(bucket)) = self.lists.as_mut().map(|l| &mut l[i]) else {
            return;
        };
        let bucket = std::mem::take(bucket);
        let mut list: Units = bucket.into_iter().map(|u| self.entry(i, u)).collect();
        list.sort_unstable();
        self.lists.as_mut().expect("built")[i] = Held::Sorted(list);
    }

    /// Member `i`'s sorted units ([`Solver::sort_list`] first).
    fn list(&self, i: usize) -> &Units {
        match &self.lists.as_ref().expect("built")[i] {
            Held::Sorted(list) => list,
            Held::Bucket(_) => unreachable!("sorted before it gives"),
        }
    }

    /// Step 3, members above `hi`: each gives to the lowest load per
    /// weight. Returns the moves made.
    fn shed_over(&mut self) -> usize {
        let mut over: Vec<ByLoad> = (0..self.names.len())
            .filter(|&i| self.open(i) && self.load[i] > self.bands.hi[i])
            .map(|i| self.by_load(i))
            .collect();
        if over.is_empty() {
            return 0;
        }
        self.build_lists();
        // The heaviest (per weight) first.
        over.sort_unstable_by(|a, b| b.cmp(a));
        let mut heap: BinaryHeap<Reverse<ByLoad>> = (0..self.names.len())
            .filter(|&i| self.open(i))
            .map(|i| Reverse(self.by_load(i)))
            .collect();
        let mut moves = 0;
        for giver in over {
            let i = giver.member as usize;
            self.sort_list(i);
            while self.load[i] > self.bands.hi[i] {
                let Some((u, j)) = self.shed_one(i, &mut heap) else {
                    break;
                };
                self.give(u, j);
                heap.push(Reverse(self.by_load(j)));
                moves += 1;
            }
        }
        moves
    }

    /// The unit over-full member `i` gives and its receiver: the first
    /// receiver, by load per weight, that can take a unit of `i` without
    /// leaving its band, and of `i`'s units the cheapest that brings `i`
    /// within its band, or else the largest that fits. The receiver's heap
    /// entry is popped; every other is left in `heap`.
    fn shed_one(&self, i: usize, heap: &mut BinaryHeap<Reverse<ByLoad>>) -> Option<(u32, usize)> {
        let mut tried = Vec::new();
        let mut found = None;
        while tried.len() < MAX_DONORS_TRIED {
            let Some(j) = self.least(heap, i) else {
                break;
            };
            let room = self.bands.hi[j].saturating_sub(self.load[j]);
            let spare = self.load[i] - self.bands.lo[i];
            let limit = room.min(spare);
            let excess = self.load[i] - self.bands.hi[i];
            let toward = self.load[i].saturating_sub(self.bands.share(i, &self.weights));
            let list = self.list(i);
            let fits = list.partition_point(|e| e.0 <= limit);
            if let Some(at) = nearest(list, excess, limit, toward) {
                found = Some((list[at].2, j));
            } else if fits > 0 {
                found = Some((list[fits - 1].2, j));
            } else {
                tried.push(Reverse(self.by_load(j)));
                continue;
            }
            break;
        }
        heap.extend(tried);
        found
    }

    /// Step 3's swaps: each member outside its band, heaviest first, swaps
    /// one unit with the first partner that lets both end within their
    /// bands. Returns the moves made (two per swap).
    fn swap(&mut self) -> usize {
        let out: Vec<usize> = (0..self.names.len())
            .filter(|&i| {
                self.open(i) && !(self.bands.lo[i]..=self.bands.hi[i]).contains(&self.load[i])
            })
            .collect();
        if out.is_empty() {
            return 0;
        }
        self.build_lists();
        let mut order: Vec<ByLoad> = (0..self.names.len())
            .filter(|&i| self.open(i))
            .map(|i| self.by_load(i))
            .collect();
        order.sort_unstable();
        let mut moves = 0;
        for a in out {
            if (self.bands.lo[a]..=self.bands.hi[a]).contains(&self.load[a]) {
                continue;
            }
            let over = self.load[a] > self.bands.hi[a];
            let partners: Vec<usize> = if over {
                order.iter().map(|e| e.member as usize).collect()
            } else {
                order.iter().rev().map(|e| e.member as usize).collect()
            };
            self.sort_list(a);
            for b in partners
                .into_iter()
                .filter(|&b| b != a)
                .take(MAX_DONORS_TRIED)
            {
                self.sort_list(b);
                if let Some((x, y)) = self.swap_pair(a, b) {
                    self.give(x, b);
                    self.give(y, a);
                    moves += 2;
                    break;
                }
            }
        }
        moves
    }

    /// A unit `x` of `a` and `y` of `b` whose exchange leaves both within
    /// their bands: `c_x − c_y` within the range that allows. Of `a`'s
    /// units, the first in its order that has a partner.
    fn swap_pair(&self, a: usize, b: usize) -> Option<(u32, u32)> {
        let (la, lb) = (i128::from(self.load[a]), i128::from(self.load[b]));
        let (lo_a, hi_a) = (i128::from(self.bands.lo[a]), i128::from(self.bands.hi[a]));
        let (lo_b, hi_b) = (i128::from(self.bands.lo[b]), i128::from(self.bands.hi[b]));
        // a: la − d ∈ [lo_a, hi_a]; b: lb + d ∈ [lo_b, hi_b].
        let low = (la - hi_a).max(lo_b - lb);
        let high = (la - lo_a).min(hi_b - lb);
        if low > high {
            return None;
        }
        let (xs, ys) = (self.list(a), self.list(b));
        for &(cx, _, x) in xs.iter().rev() {
            // c_y ∈ [c_x − high, c_x − low], and at least 1.
            let from = (i128::from(cx) - high).max(1);
            let to = i128::from(cx) - low;
            if to < from {
                continue;
            }
            let at = ys.partition_point(|e| i128::from(e.0) < from);
            if let Some(&(cy, _, y)) = ys.get(at)
                && i128::from(cy) <= to
            {
                return Some((x, y));
            }
        }
        None
    }

    /// Pops `heap`'s least loaded open member other than `not`, skipping
    /// stale entries (a member whose load changed was pushed again).
    fn least(&self, heap: &mut BinaryHeap<Reverse<ByLoad>>, not: usize) -> Option<usize> {
        let mut skipped = None;
        let found = loop {
            let Reverse(e) = heap.pop()?;
            let j = e.member as usize;
            if e.load != self.load[j] {
                continue;
            }
            if j == not {
                skipped = Some(e);
                continue;
            }
            break Some(j);
        };
        if let Some(e) = skipped {
            heap.push(Reverse(e));
        }
        found
    }

    /// Step 3, members below `lo`: each takes from the highest load per
    /// weight. Returns the moves made.
    fn fill_under(&mut self) -> usize {
        let mut under: Vec<ByLoad> = (0..self.names.len())
            .filter(|&i| self.open(i) && self.load[i] < self.bands.lo[i])
            .map(|i| self.by_load(i))
            .collect();
        if under.is_empty() {
            return 0;
        }
        self.build_lists();
        // The lightest (per weight) first.
        under.sort_unstable();
        let mut donors: BinaryHeap<ByLoad> = (0..self.names.len())
            .filter(|&i| self.open(i))
            .map(|i| self.by_load(i))
            .collect();
        let mut moves = 0;
        for taker in under {
            let r = taker.member as usize;
            let mut tried = Vec::new();
            while self.load[r] < self.bands.lo[r] && tried.len() < MAX_DONORS_TRIED {
                let Some(d) = donors.pop() else {
                    break;
                };
                let di = d.member as usize;
                if d.load != self.load[di] {
                    continue;
                }
                if di == r || self.load[di] <= self.bands.lo[di] {
                    tried.push(d);
                    continue;
                }
                let limit =
                    (self.bands.hi[r] - self.load[r]).min(self.load[di] - self.bands.lo[di]);
                self.sort_list(di);
                let list = self.list(di);
                let fits = list.partition_point(|e| e.0 <= limit);
                if fits == 0 {
                    tried.push(d);
                    continue;
                }
                let deficit = self.bands.lo[r] - self.load[r];
                let toward = self
                    .bands
                    .share(r, &self.weights)
                    .saturating_sub(self.load[r]);
                let at = nearest(list, deficit, limit, toward).unwrap_or(fits - 1);
                let u = list[at].2;
                self.give(u, r);
                donors.push(self.by_load(di));
                moves += 1;
            }
            donors.extend(tried);
            // Its own entry is stale now; push the current one.
            donors.push(self.by_load(r));
        }
        moves
    }
}

/// In `list` (sorted by cost), the unit whose cost is within `low..=high`
/// and nearest `toward` (the cheaper of two as near): one move that lands
/// a member within its band and as near its share as one unit can, so
/// that the next small change of costs does not take it out again.
fn nearest(list: &Units, low: u64, high: u64, toward: u64) -> Option<usize> {
    let from = list.partition_point(|e| e.0 < low);
    let to = list.partition_point(|e| e.0 <= high);
    if from >= to {
        return None;
    }
    let at = list[from..to].partition_point(|e| e.0 < toward) + from;
    let above = (at < to).then_some(at);
    // The cheapest entry of the nearest cost below: the first of its run.
    let below = (at > from).then(|| {
        let c = list[at - 1].0;
        list[from..at].partition_point(|e| e.0 < c) + from
    });
    match (below, above) {
        (Some(b), Some(a)) => Some(if toward - list[b].0 <= list[a].0 - toward {
            b
        } else {
            a
        }),
        (b, a) => b.or(a),
    }
}

#[cfg(test)]
mod tests;
