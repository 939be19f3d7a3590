//! Balance by cost: every member's load within a tolerance of its share,
//! moving few units, and only while a member is out of tolerance.
//!
//! Pure like `core::sticky`: no IO, no clock, no randomness; costs are exact
//! integers (thousandths, see `core::costs`) and every sum and comparison is
//! exact, so every replica computes the same table from the same inputs:
//! the current table, the live members and their weights, the units and
//! their costs. Order and duplicates in the inputs change nothing.
//!
//! ```text
//!  mod.rs      the modes (Balance, Tolerance), the costs' forms, assign, loads
//!  bands.rs    step 1: hot units, and every other member's band
//!  solver.rs   steps 2 and 3: placing free units, the repair rounds
//!  solver/chain.rs  step 3's last resort: chains through an intermediary
//!  summary.rs  loads against shares, for status, the page and metrics
//! ```
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
//!    * a member above its band that no single unit fixes first looks for
//!      a swap (below), two moves, before it gives several units;
//!    * when neither moves anything, a member outside its band swaps one
//!      unit with a partner (the least loaded per weight first when it is
//!      above, the most loaded when below) so that both end within their
//!      bands: two moves;
//!    * when no swap does it either, a chain: a member above its band gives
//!      one unit to an intermediary (or swaps one for a cheaper one of
//!      its), which passes smaller units on to members with room (below
//!      its band: takes one, or swaps for a costlier one, and the
//!      intermediary takes smaller ones from members with load to spare),
//!      so that both end within their bands and no other member leaves its
//!      band. Tight bands over coarse units need it: when every member has
//!      less room than any unit that fixes the one outside.
//!
//! Every repair of step 3 strictly reduces the total distance of the loads
//! outside their bands, and starts only from a member outside its band, which
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

use crate::core::ring::{self, member_position, sorted_distinct};
use crate::core::sticky::{CONTESTED, FREE, Holders, Table, rows};

mod bands;
mod solver;
mod summary;

use bands::Bands;
use solver::Solver;
pub use summary::{LoadSummary, MemberLoad, MemberSummary};

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
    /// The units' loads as members measure them (`core::load`), balanced
    /// as costs are.
    Load(Tolerance),
}

impl Balance {
    /// Every mode's name, as `-balance` takes it.
    pub const NAMES: &'static [&'static str] = &["count", "cost", "load"];

    pub fn name(self) -> &'static str {
        match self {
            Balance::Count => "count",
            Balance::Cost(_) => "cost",
            Balance::Load(_) => "load",
        }
    }

    /// `-balance` and `-balance-tolerance`.
    pub fn parse(s: &str, tolerance: Tolerance) -> Option<Balance> {
        match s {
            "count" => Some(Balance::Count),
            "cost" => Some(Balance::Cost(tolerance)),
            "load" => Some(Balance::Load(tolerance)),
            _ => None,
        }
    }

    /// As `{T}:meta`'s `assignment` records the mode: `ring`, `sticky`,
    /// `cost tolerance=10%` or `load tolerance=10%` (which
    /// [`Balance::decode`] reads back).
    pub fn describe(self, assignment: &str) -> String {
        match self {
            Balance::Count => assignment.to_string(),
            Balance::Cost(t) | Balance::Load(t) => format!("{} tolerance={t}", self.name()),
        }
    }

    /// The tolerance, when balancing by cost or load.
    pub fn tolerance(self) -> Option<Tolerance> {
        match self {
            Balance::Count => None,
            Balance::Cost(t) | Balance::Load(t) => Some(t),
        }
    }

    /// The balance a `{T}:meta` `assignment` value records (see
    /// [`Balance::describe`]); `Count` for `ring`, `sticky` or anything
    /// unreadable.
    pub fn decode(described: &str) -> Balance {
        let (mode, tolerance) = described.split_once(" tolerance=").unwrap_or(("", ""));
        match Tolerance::parse(tolerance) {
            Some(t) => Balance::parse(mode, t).unwrap_or(Balance::Count),
            None => Balance::Count,
        }
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

/// The largest total cost a solve works with (see [`Costs`]): far below
/// `u64::MAX`, so that a load plus any unit's cost, and loads times the
/// tolerance's scale in `u128`, never overflow.
pub const MAX_TOTAL: u64 = 1 << 62;

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
    ///
    /// Loads are sums of costs in a `u64`: when the total would pass
    /// [`MAX_TOTAL`] (tens of millions of units at the largest cost), every
    /// cost is divided by the same factor (at least 1 each), which keeps
    /// their ratios and every sum exact.
    fn of(self, units: &[&str], given: bool) -> Vec<u64> {
        let mut costs: Vec<u64> = match self {
            Costs::Lookup(f) => units.iter().map(|u| f(u).max(1)).collect(),
            Costs::Aligned(c) => {
                assert!(
                    given && c.len() == units.len(),
                    "aligned costs need sorted, distinct units, one cost each"
                );
                c.iter().map(|&c| c.max(1)).collect()
            }
        };
        let total: u128 = costs.iter().map(|&c| u128::from(c)).sum();
        if total > u128::from(MAX_TOTAL) {
            let factor = total.div_ceil(u128::from(MAX_TOTAL)) as u64;
            for c in &mut costs {
                *c = (*c / factor).max(1);
            }
        }
        costs
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

#[cfg(test)]
mod tests;
