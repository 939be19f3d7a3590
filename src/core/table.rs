//! The matching table: member id → comma-joined work units, as stored in Redis.
//!
//! Pure. [`MatchingTable::solve`] runs the ring once per group over the whole unit
//! list and merges the rows; [`MatchingTable::solve_with`] also takes the
//! [`Assignment`] mode, the members' weights and the current table (see
//! [`Solve`]). Guarantees:
//! - within each group every valid unit has exactly one owner among the group's
//!   live members (no gaps, no overlaps), and row sizes differ by at most one
//!   (with weights: each row is the floor or the ceiling of its exact share);
//! - in [`Assignment::Ring`] mode (without a move limit) the table is a
//!   function of the *sets* of live members (and their weights) and units
//!   only; in [`Assignment::Sticky`] mode it also depends on the current
//!   table, and moves the fewest units the balance allows (`core::sticky`);
//! - every live member has a row, an empty one when it has no units (as the Go
//!   implementation writes it): a field means "live and in the table", no
//!   field means "not a member now" (failing, or not listed). Workers that
//!   split on `,` must read `""` as no units;
//! - [`MatchingTable::digest`] identifies the content, so "changed or not" needs no
//!   read of the stored table. Redis computes the same digest in Lua
//!   (`store/prelude.lua`), so the stored table can be checked where it is.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::OnceLock;

use crate::core::balance::{self, Balance};
use crate::core::controls::Controls;
use crate::core::costs::SCALE;
use crate::core::inputs::Inputs;
pub use crate::core::row::{SEPARATOR, decode_row, split_row};
use crate::core::{ring, sticky};

/// How the table is solved (`-assignment`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Assignment {
    /// [`ring::assign_weighted`]: a pure function of the sets, as the Go
    /// implementation computes it (with every weight 1).
    #[default]
    Ring,
    /// [`sticky::assign`]: from the current table, moving the fewest units.
    Sticky,
}

impl Assignment {
    /// Every mode's name, as `-assignment` takes it.
    pub const NAMES: &'static [&'static str] = &["ring", "sticky"];

    pub fn name(self) -> &'static str {
        match self {
            Assignment::Ring => "ring",
            Assignment::Sticky => "sticky",
        }
    }

    pub fn parse(s: &str) -> Option<Assignment> {
        match s {
            "ring" => Some(Assignment::Ring),
            "sticky" => Some(Assignment::Sticky),
            _ => None,
        }
    }
}

/// What [`MatchingTable::solve_with`] takes besides the inputs.
pub struct Solve<'a> {
    pub assignment: Assignment,
    /// What the rows balance: with [`Balance::Cost`] or [`Balance::Load`],
    /// the units' `costs` (declared or measured)
    /// ([`balance::assign`], which always starts from `current`), and
    /// `assignment` is not used.
    pub balance: Balance,
    /// Every unit's cost or load (`None`: every unit 1);
    /// [`balance::Costs::Aligned`] with `inputs.units`.
    pub costs: Option<balance::Costs<'a>>,
    /// A live member's capacity weight (1 by default; 0 counts as 1).
    pub weight: &'a dyn Fn(&str) -> u32,
    /// The table the members hold now, for sticky mode and the move limit,
    /// and to count the moves ([`MatchingTable::solve_counted`]); `None`
    /// when there is none (sticky then starts from the ring).
    pub current: Option<&'a MatchingTable>,
    /// `(member, unit)` pairs counted as held besides `current`'s rows (the
    /// daemon passes units in transit, with their destination).
    pub also_held: &'a [(&'a str, &'a str)],
    /// At most this many held units change owner in this solve, over all
    /// groups in their order (`0`: no limit); needs `current`. Units of
    /// members that left, and new units, are never held back
    /// ([`sticky::limit_moves`]).
    pub max_moves: usize,
    /// Moves already under way (the daemon: units in transit between members
    /// that still get units): they use up `max_moves`, so that the limit
    /// bounds the moves in progress at once, not the moves per solve.
    pub in_flight: usize,
    /// The operator's controls (`None`: none): units pinned or kept are
    /// fixed, cordoned members receive none ([`Controls::split`]); keeping
    /// needs `current`.
    pub controls: Option<&'a Controls>,
    /// Members that wait (`-join-delay`): in sticky count mode no held
    /// unit moves while one waits, and free units go to the members
    /// furthest below their share, the waiting first
    /// ([`sticky::assign_waiting`]); in the other modes they get no units
    /// until they stop waiting.
    pub waiting: Option<&'a BTreeSet<String>>,
    /// The caller vouches that `current` is a table a solve returned for
    /// these units in one group (every listed unit in exactly one row, rows
    /// sorted): a plain sticky solve (pins aside, no controls) then reads
    /// only the rows that change ([`sticky::reassign`]), and gives the same
    /// table.
    pub current_is_solved: bool,
}

/// How a solve changed the current table, summed over the groups.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(feature = "daemon", derive(serde::Serialize))]
pub struct Moves {
    /// Units held by one live member that now have another owner
    /// ([`sticky::moved`]).
    pub moved: usize,
    /// The least any balanced table could move ([`sticky::min_moves`]): what
    /// sticky mode moves without a move limit; with one, `moved` can be
    /// lower (the rest follows in later solves).
    pub minimum: usize,
    /// Units that had no single live holder (new units, units of members
    /// that left or drain) and got an owner.
    pub placed: usize,
}

/// `{T}:meta`'s `last_change` for a change whose moves were not counted
/// (ring mode without a move limit): [`Moves::decode`] reads no count.
pub const UNCOUNTED: &str = "uncounted";

impl Moves {
    /// As `{T}:meta` stores it: `moved=<n> minimum=<n> placed=<n>`.
    pub fn encode(&self) -> String {
        format!(
            "moved={} minimum={} placed={}",
            self.moved, self.minimum, self.placed
        )
    }

    pub fn decode(s: &str) -> Option<Moves> {
        let mut m = Moves::default();
        let mut seen = 0;
        for field in s.split(' ') {
            let (k, v) = field.split_once('=')?;
            let v: usize = v.parse().ok()?;
            match k {
                "moved" => m.moved = v,
                "minimum" => m.minimum = v,
                "placed" => m.placed = v,
                _ => continue,
            }
            seen += 1;
        }
        (seen == 3).then_some(m)
    }
}

impl Solve<'_> {
    /// Ring mode, every weight 1, no limit: what [`MatchingTable::solve`] does.
    pub fn ring() -> Solve<'static> {
        Solve {
            assignment: Assignment::Ring,
            balance: Balance::Count,
            costs: None,
            weight: &|_| 1,
            current: None,
            also_held: &[],
            max_moves: 0,
            in_flight: 0,
            controls: None,
            waiting: None,
            current_is_solved: false,
        }
    }
}

#[derive(Clone, Default)]
pub struct MatchingTable {
    rows: BTreeMap<String, String>,
    /// Computed once: a table is immutable once built.
    digest: OnceLock<String>,
    /// Whether every row's units are strictly increasing, as every solve
    /// writes them; computed once, like the digest.
    increasing: OnceLock<bool>,
}

impl PartialEq for MatchingTable {
    fn eq(&self, other: &Self) -> bool {
        self.rows == other.rows
    }
}

impl Eq for MatchingTable {}

impl std::fmt::Debug for MatchingTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map().entries(&self.rows).finish()
    }
}

impl MatchingTable {
    /// Splits all units among the live members of every group, with the
    /// ring (every weight 1).
    pub fn solve(inputs: &Inputs, is_live: impl Fn(&str) -> bool) -> MatchingTable {
        MatchingTable::solve_with(inputs, is_live, &Solve::ring())
    }

    /// Splits all units among the live members of every group, as `how`
    /// says. Pure: equal arguments give equal tables, in every replica.
    pub fn solve_with(
        inputs: &Inputs,
        is_live: impl Fn(&str) -> bool,
        how: &Solve<'_>,
    ) -> MatchingTable {
        MatchingTable::solve_counted(inputs, is_live, how).0
    }

    /// [`MatchingTable::solve_with`], and how the result differs from
    /// `how.current` (`None` without a current table).
    pub fn solve_counted(
        inputs: &Inputs,
        is_live: impl Fn(&str) -> bool,
        how: &Solve<'_>,
    ) -> (MatchingTable, Option<Moves>) {
        if let Some(reassigned) = MatchingTable::reassign(inputs, &is_live, how) {
            return reassigned;
        }
        let units: Vec<&str> = inputs.units.iter().map(String::as_str).collect();
        // The current rows as the sticky solver reads them: a member's row
        // may be split over several entries, and rows of members outside a
        // group are ignored there.
        // Decoded once per solve: every group's calls read the same rows.
        let current_rows: Vec<(&str, Vec<&str>)> = how
            .current
            .into_iter()
            .flat_map(|t| t.rows.iter().map(|(m, v)| (m.as_str(), decode_row(v))))
            .chain(how.also_held.iter().map(|&(m, u)| (m, vec![u])))
            .collect();
        let current = || {
            current_rows
                .iter()
                .map(|(m, units)| (*m, units.iter().copied()))
        };
        let mut budget = how.max_moves.saturating_sub(how.in_flight);
        let mut moves = Moves::default();
        let mut rows = BTreeMap::new();
        let controls = how.controls.filter(|c| !c.is_empty());
        for group in &inputs.groups {
            let live = live_weighted(group, &is_live, how.weight);
            // Under the controls, the solver gets the units nothing fixes
            // and the members that may receive them; the fixed ones join
            // its table after.
            // Kept means held: units in transit towards a member (counted
            // as its own by the solver) are not yet, so a cordon or a
            // pause does not hand them to it.
            let split = controls.map(|c| {
                let held = current_rows[..current_rows.len() - how.also_held.len()]
                    .iter()
                    .map(|(m, units)| (*m, units.iter().copied()));
                c.split(&live, &units, held)
            });
            let free_units: Vec<&str>;
            let free_costs: Vec<u64>;
            let (solve_live, solve_units, solve_costs) = match &split {
                None => (&live[..], &units[..], how.costs),
                Some(s) => {
                    free_units = s.free.iter().map(|&i| units[i]).collect();
                    let costs = match how.costs {
                        Some(balance::Costs::Aligned(a)) => {
                            free_costs = s.free.iter().map(|&i| a[i]).collect();
                            Some(balance::Costs::Aligned(&free_costs))
                        }
                        other => other,
                    };
                    (&s.receivers[..], &free_units[..], costs)
                }
            };
            // Newcomers that wait, in this group.
            let waiting: BTreeSet<&str> = match how.waiting {
                Some(w) if !w.is_empty() => solve_live
                    .iter()
                    .map(|(m, _)| *m)
                    .filter(|m| w.contains(*m))
                    .collect(),
                _ => BTreeSet::new(),
            };
            let sticky_wait = !waiting.is_empty()
                && how.balance == Balance::Count
                && how.assignment == Assignment::Sticky;
            let without_waiting: Vec<(&str, u32)>;
            let solve_live = if waiting.is_empty() || sticky_wait {
                solve_live
            } else {
                without_waiting = solve_live
                    .iter()
                    .filter(|(m, _)| !waiting.contains(m))
                    .copied()
                    .collect();
                &without_waiting[..]
            };
            let mut cost_minimum = None;
            // The sticky solver counts its moves from its own reading of
            // the current rows, when nothing changes its table after it.
            let mut counted = None;
            let mut solved = match (how.balance, how.assignment) {
                _ if sticky_wait => {
                    sticky::assign_waiting(current(), solve_live, &waiting, solve_units)
                }
                (Balance::Cost(tolerance) | Balance::Load(tolerance), _) => {
                    let costs = solve_costs.unwrap_or(balance::Costs::Lookup(&|_| SCALE));
                    let b = balance::assign(current(), solve_live, solve_units, costs, tolerance);
                    cost_minimum = Some(b.minimum);
                    b.table
                }
                (Balance::Count, Assignment::Ring) => {
                    ring::assign_weighted(solve_live, solve_units)
                }
                (Balance::Count, Assignment::Sticky)
                    if how.max_moves == 0 && how.current.is_some() =>
                {
                    let (table, counts) =
                        sticky::assign_counted(current(), solve_live, solve_units);
                    counted = Some(counts);
                    table
                }
                (Balance::Count, Assignment::Sticky) => {
                    sticky::assign(current(), solve_live, solve_units)
                }
            };
            // A waiting newcomer is live: it has a row, empty meanwhile.
            for m in &waiting {
                solved.entry(m).or_default();
            }
            if let Some(s) = &split {
                for (m, _) in &live {
                    solved.entry(m).or_default();
                }
                let mut touched = Vec::new();
                for &(m, u) in &s.fixed {
                    solved.entry(m).or_default().push(u);
                    touched.push(m);
                }
                touched.sort_unstable();
                touched.dedup();
                for m in touched {
                    solved.get_mut(m).expect("inserted above").sort_unstable();
                }
                // The bound on the solver's part, plus every fixed unit
                // that changes owner (a pin).
                let pinned_moves = sticky::moved_and_kept(
                    current(),
                    &s.fixed.iter().fold(sticky::Table::new(), |mut t, &(m, u)| {
                        t.entry(m).or_default().push(u);
                        t
                    }),
                )
                .0;
                let solver_minimum = cost_minimum
                    .or(counted.map(|c| c.minimum))
                    .unwrap_or_else(|| sticky::min_moves(current(), solve_live, solve_units));
                cost_minimum = Some(solver_minimum + pinned_moves);
                // The solver counted its own units against the receivers.
                // When the receivers are every row of the result, a unit's
                // holder reads the same against either, so the fixed units,
                // counted apart, complete the count; otherwise (a cordoned
                // member has a row) the whole table is read again below.
                counted = counted.and_then(|c| {
                    let receivers: BTreeSet<&str> = s.receivers.iter().map(|(m, _)| *m).collect();
                    (receivers.len() == solved.len()).then(|| {
                        let (moved, kept) = fixed_counts(current(), &solved, &s.fixed);
                        sticky::Counts {
                            moved: c.moved + moved,
                            kept: c.kept + kept,
                            minimum: solver_minimum + pinned_moves,
                        }
                    })
                });
            }
            if how.max_moves > 0 && how.current.is_some() {
                solved = sticky::limit_moves(current(), &solved, budget);
            }
            if how.current.is_some() {
                let (moved, kept, minimum) = match counted {
                    Some(c) => (c.moved, c.kept, c.minimum),
                    None => {
                        let (moved, kept) = sticky::moved_and_kept(current(), &solved);
                        let minimum = cost_minimum
                            .unwrap_or_else(|| sticky::min_moves(current(), &live, &units));
                        (moved, kept, minimum)
                    }
                };
                if how.max_moves > 0 {
                    budget -= moved.min(budget);
                }
                // The rest had no single live holder: placed, not moved.
                let assigned: usize = solved.values().map(Vec::len).sum();
                let placed = assigned - kept - moved;
                moves.moved += moved;
                moves.minimum += minimum;
                moves.placed += placed;
            }
            for (member, owned) in solved {
                rows.insert(member.to_string(), owned.join(","));
            }
        }
        let moves = how.current.is_some().then_some(moves);
        (MatchingTable::from_rows(rows), moves)
    }

    /// [`MatchingTable::solve_counted`] of a plain sticky solve (one group,
    /// the count balance, no limit, no controls but pins, no waiting
    /// newcomer or unit in transit) from a table a solve returned for these
    /// units and pins: only the rows that change (and those holding pinned
    /// units) are decoded and encoded again. `None` where the full solve
    /// runs.
    fn reassign(
        inputs: &Inputs,
        is_live: &impl Fn(&str) -> bool,
        how: &Solve<'_>,
    ) -> Option<(MatchingTable, Option<Moves>)> {
        let plain = how.assignment == Assignment::Sticky
            && how.balance == Balance::Count
            && how.max_moves == 0
            && how.also_held.is_empty()
            && how.controls.is_none_or(Controls::pins_only)
            && how.waiting.is_none_or(BTreeSet::is_empty);
        let [group] = &inputs.groups[..] else {
            return None;
        };
        let current = how.current.filter(|_| plain && how.current_is_solved)?;
        let live = live_weighted(group, is_live, how.weight);
        // What `Controls::split` fixes under pins alone (nothing without
        // pins: the plain case reads no member twice).
        let fixed: Vec<(&str, &str)> = match how.controls {
            Some(c) if !c.pins.is_empty() => {
                let member: HashMap<&str, &str> = live.iter().map(|(m, _)| (*m, *m)).collect();
                c.live_pins(&inputs.units, |to| member.get(to).copied())
                    .map(|(i, m)| (m, inputs.units[i].as_str()))
                    .collect()
            }
            _ => Vec::new(),
        };
        let r = sticky::reassign::reassign_fixed(&current.rows, &live, inputs.units.len(), &fixed)?;
        let rows = r.rows.into_iter().map(|(member, row)| {
            let row = match row {
                sticky::reassign::Row::Same(row) => row.to_string(),
                sticky::reassign::Row::New(row) => row,
            };
            (member.to_string(), row)
        });
        let moves = Moves {
            moved: r.counts.moved,
            minimum: r.counts.minimum,
            placed: inputs.units.len() - r.counts.kept - r.counts.moved,
        };
        Some((MatchingTable::from_rows(rows), Some(moves)))
    }

    /// Each live member's load against its share in this table, with
    /// these costs and weights, as the cost balance sees it (its hot units
    /// and bands), summed over the groups of `inputs`.
    pub fn loads(
        &self,
        inputs: &Inputs,
        is_live: impl Fn(&str) -> bool,
        weight: &dyn Fn(&str) -> u32,
        costs: balance::Costs<'_>,
        tolerance: balance::Tolerance,
    ) -> balance::LoadSummary {
        let units: Vec<&str> = inputs.units.iter().map(String::as_str).collect();
        let rows: sticky::Table<'_> = self
            .rows
            .iter()
            .map(|(m, v)| (m.as_str(), decode_row(v)))
            .collect();
        let mut summary = balance::LoadSummary::default();
        for group in &inputs.groups {
            let live = live_weighted(group, &is_live, weight);
            // Rows of members outside the group are ignored there.
            summary.add(&balance::loads(&rows, &live, &units, costs, tolerance));
        }
        summary
    }

    /// Builds a table from stored rows (for tests, status and diffs). Empty
    /// rows are kept: they mean "live, no units".
    pub fn from_rows(rows: impl IntoIterator<Item = (String, String)>) -> MatchingTable {
        MatchingTable {
            rows: rows.into_iter().collect(),
            digest: OnceLock::new(),
            increasing: OnceLock::new(),
        }
    }

    /// Whether every row's units are strictly increasing (sorted, no unit
    /// twice in a row), as every solve writes them. Computed once per
    /// table: a memoised table is asked every handoff cycle.
    pub fn rows_increasing(&self) -> bool {
        *self.increasing.get_or_init(|| {
            self.rows
                .values()
                .all(|row| split_row(row).is_sorted_by(|a, b| a < b))
        })
    }

    pub fn rows(&self) -> &BTreeMap<String, String> {
        &self.rows
    }

    /// Records a digest computed elsewhere (from another table's, by
    /// [`crate::core::delta::TableDelta`]); a digest known already stays.
    pub(crate) fn set_digest(&self, digest: String) {
        let _ = self.digest.set(digest);
    }

    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// The bytes of its member ids and rows: what a whole write sends.
    pub fn bytes(&self) -> usize {
        self.rows.iter().map(|(m, v)| m.len() + v.len()).sum()
    }

    /// Number of rows: live members, with or without units.
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    /// Total number of (member, unit) assignments across all groups.
    pub fn assignments(&self) -> usize {
        self.rows.values().map(|v| decode_row(v).len()).sum()
    }

    pub fn units_of(&self, member: &str) -> Vec<&str> {
        self.rows
            .get(member)
            .map(|v| decode_row(v))
            .unwrap_or_default()
    }

    /// The content digest, 40 hex digits: for each row, SHA-1 of
    /// `<field length>:<field><value>`, XOR-combined (so row order does not
    /// matter, and Redis can compute the same in Lua over `HGETALL`).
    pub fn digest(&self) -> &str {
        self.digest
            .get_or_init(|| digest_of(self.rows.iter().map(|(m, v)| (m.as_bytes(), v.as_bytes()))))
    }

    /// How many units change owner (or appear, or disappear) from `self` to `next`.
    #[cfg(test)]
    pub fn moved_units(&self, next: &MatchingTable) -> usize {
        fn owners(t: &MatchingTable) -> std::collections::BTreeSet<(&str, &str)> {
            t.rows
                .iter()
                .flat_map(|(m, v)| decode_row(v).into_iter().map(move |u| (u, m.as_str())))
                .collect()
        }
        let (a, b) = (owners(self), owners(next));
        a.symmetric_difference(&b).count()
    }
}

/// The digest of a table's `(field, value)` pairs, in any order (see
/// [`MatchingTable::digest`]; `scripts/prelude.lua`'s `table_digest`).
pub fn digest_of<'a>(rows: impl Iterator<Item = (&'a [u8], &'a [u8])>) -> String {
    let mut acc = [0u8; 20];
    for (field, value) in rows {
        xor_into(&mut acc, &row_hash(field, value));
    }
    hex(&acc)
}

/// One row's part of the digest: SHA-1 of `<field length>:<field><value>`.
pub fn row_hash(field: &[u8], value: &[u8]) -> [u8; 20] {
    use sha1::Digest as _;
    let mut h = sha1::Sha1::new();
    h.update(field.len().to_string().as_bytes());
    h.update(b":");
    h.update(field);
    h.update(value);
    h.finalize().into()
}

pub(crate) fn xor_into(acc: &mut [u8; 20], h: &[u8; 20]) {
    for (a, b) in acc.iter_mut().zip(h) {
        *a ^= b;
    }
}

/// Lowercase hex, as Redis' `sha1hex` writes it.
pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A group's live members with their weights, as the solvers take them.
fn live_weighted<'g>(
    group: &'g crate::core::inputs::Group,
    is_live: &impl Fn(&str) -> bool,
    weight: &dyn Fn(&str) -> u32,
) -> Vec<(&'g str, u32)> {
    group
        .members
        .iter()
        .map(String::as_str)
        .filter(|m| is_live(m))
        .map(|m| (m, weight(m)))
        .collect()
}

/// [`sticky::moved_and_kept`] of the `fixed` (member, unit) pairs alone,
/// with every row of `solved` (which holds them) as the members a unit's
/// holder is read against: the fixed units' share of the whole table's
/// count, which reads the current rows against those few units only.
fn fixed_counts<'c, R>(
    current: impl IntoIterator<Item = (&'c str, R)>,
    solved: &sticky::Table<'_>,
    fixed: &[(&str, &str)],
) -> (usize, usize)
where
    R: IntoIterator<Item = &'c str>,
{
    if fixed.is_empty() {
        return (0, 0);
    }
    let mut only: sticky::Table<'_> = solved.keys().map(|m| (*m, Vec::new())).collect();
    for &(m, u) in fixed {
        only.entry(m).or_default().push(u);
    }
    sticky::moved_and_kept(current, &only)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::inputs::{Group, Inputs};

    fn inputs(groups: &[(&str, &[&str])], units: &[&str]) -> Inputs {
        Inputs {
            groups: groups
                .iter()
                .map(|(n, m)| Group {
                    name: n.to_string(),
                    members: m.iter().map(|s| s.to_string()).collect(),
                    malformed: vec![],
                })
                .collect(),
            units: units
                .iter()
                .map(|s| s.to_string())
                .collect::<Vec<_>>()
                .into(),
            rejections: vec![],
        }
    }

    #[test]
    fn a_row_hash_is_sha1_of_the_length_the_field_and_the_row_as_lua_computes_it() {
        // Values from Python's hashlib: `redis.sha1hex` in the scripts must
        // find the same, whichever SHA-1 code computes it here.
        assert_eq!(
            hex(&row_hash(b"10.0.0.1:7", b"unit-1,unit-2")),
            "704fbd7b76921aee3d2853b3294710f88711edd9"
        );
        assert_eq!(
            hex(&row_hash(b"", b"")),
            "b44b82a4bc6c35f6ad5e9fceefef9509c17fba74"
        );
        let long = vec![b'x'; 100_000];
        assert_eq!(
            hex(&row_hash(b"a", &long)),
            "ecfd8de334694ffad4f3a990e31f4be5a9634d8f"
        );
    }

    #[test]
    fn every_group_splits_every_unit() {
        let units: Vec<String> = (0..10).map(|i| format!("u{i}")).collect();
        let refs: Vec<&str> = units.iter().map(String::as_str).collect();
        let inp = inputs(
            &[("a", &["a:1", "a:2", "a:3"]), ("b", &["b:1", "b:2"])],
            &refs,
        );
        let t = MatchingTable::solve(&inp, |_| true);
        for group in &inp.groups {
            let mut all: Vec<&str> = group.members.iter().flat_map(|m| t.units_of(m)).collect();
            all.sort();
            assert_eq!(all, refs, "group {}", group.name);
            let sizes: Vec<usize> = group.members.iter().map(|m| t.units_of(m).len()).collect();
            assert!(
                sizes.iter().max().unwrap() - sizes.iter().min().unwrap() <= 1,
                "{sizes:?}"
            );
        }
        assert_eq!(t.assignments(), 20);
    }

    #[test]
    fn dead_members_have_no_row_and_live_ones_an_empty_row() {
        let inp = inputs(&[("a", &["a:1", "a:2", "a:3"])], &["x"]);
        let t = MatchingTable::solve(&inp, |m| m != "a:2");
        assert_eq!(t.len(), 2, "a:1 and a:3 are live: {t:?}");
        assert!(!t.rows().contains_key("a:2"), "no field: not a member now");
        let empty: Vec<&String> = t
            .rows()
            .iter()
            .filter(|(_, v)| v.is_empty())
            .map(|(m, _)| m)
            .collect();
        assert_eq!(
            empty.len(),
            1,
            "the live member without units has an empty row"
        );
        assert!(MatchingTable::solve(&inputs(&[("a", &[])], &["x"]), |_| true).is_empty());
        let no_units = MatchingTable::solve(&inputs(&[("a", &["a:1"])], &[]), |_| true);
        assert_eq!(no_units.rows().get("a:1").map(String::as_str), Some(""));
        assert_eq!(no_units.assignments(), 0);
    }

    #[test]
    fn digest_tracks_content() {
        let inp = inputs(&[("a", &["a:1", "a:2"])], &["x", "y", "z"]);
        let t1 = MatchingTable::solve(&inp, |_| true);
        let t2 = MatchingTable::solve(&inp, |_| true);
        assert_eq!(t1.digest(), t2.digest());
        assert_eq!(t1.digest().len(), 40);
        // Fixed value, the same as Redis computes in Lua (store/prelude.lua)
        // over `HSET F h:1 a,b h:2 ""`; integration tests compare the two.
        let fixed = MatchingTable::from_rows([
            ("h:1".to_string(), "a,b".to_string()),
            ("h:2".to_string(), String::new()),
        ]);
        assert_eq!(fixed.digest(), "95eb047f3fb851cc00349396261f5e845c12132e");
        assert_eq!(MatchingTable::default().digest(), "0".repeat(40));
        let t3 = MatchingTable::solve(&inp, |m| m == "a:1");
        assert_ne!(t1.digest(), t3.digest());
        assert_eq!(t1.moved_units(&t1), 0);
        assert!(t1.moved_units(&t3) > 0);
        // Length prefixes keep ("ab","c") and ("a","bc") apart.
        let p = MatchingTable::from_rows([("ab".to_string(), "c".to_string())]);
        let q = MatchingTable::from_rows([("a".to_string(), "bc".to_string())]);
        assert_ne!(p.digest(), q.digest());
    }

    #[test]
    fn ring_mode_with_weights_one_is_the_ring() {
        let units: Vec<String> = (0..50).map(|i| format!("u{i}")).collect();
        let refs: Vec<&str> = units.iter().map(String::as_str).collect();
        let inp = inputs(&[("a", &["a:1", "a:2", "a:3"]), ("b", &["b:1"])], &refs);
        let plain = MatchingTable::solve(&inp, |_| true);
        let members = ["a:1", "a:2", "a:3"];
        let ring = ring::assign(&members, &refs);
        for m in members {
            assert_eq!(plain.units_of(m), ring[m]);
        }
        // Weights: a:3 has weight 3, so 30 of 50 units; the others 10 each.
        let weighted = MatchingTable::solve_with(
            &inp,
            |_| true,
            &Solve {
                weight: &|m| if m == "a:3" { 3 } else { 1 },
                ..Solve::ring()
            },
        );
        let sizes: Vec<usize> = members.iter().map(|m| weighted.units_of(m).len()).collect();
        assert_eq!(sizes, [10, 10, 30]);
        assert_eq!(weighted.units_of("b:1").len(), 50);
    }

    #[test]
    fn sticky_mode_moves_only_the_minimum_and_limits_moves() {
        let units: Vec<String> = (0..60).map(|i| format!("u{i}")).collect();
        let refs: Vec<&str> = units.iter().map(String::as_str).collect();
        let three = inputs(&[("a", &["a:1", "a:2", "a:3"])], &refs);
        let four = inputs(&[("a", &["a:1", "a:2", "a:3", "a:4"])], &refs);
        let sticky = |current| Solve {
            assignment: Assignment::Sticky,
            current,
            ..Solve::ring()
        };
        // No current table: the ring.
        let start = MatchingTable::solve_with(&three, |_| true, &sticky(None));
        assert_eq!(start, MatchingTable::solve(&three, |_| true));
        // A join takes exactly its 15 units, all from the others.
        let joined = MatchingTable::solve_with(&four, |_| true, &sticky(Some(&start)));
        assert_eq!(joined.units_of("a:4").len(), 15);
        assert_eq!(start.moved_units(&joined), 2 * 15);
        let (_, moves) = MatchingTable::solve_counted(&four, |_| true, &sticky(Some(&start)));
        let want = Moves {
            moved: 15,
            minimum: 15,
            placed: 0,
        };
        assert_eq!(moves, Some(want));
        assert_eq!(Moves::decode(&want.encode()), Some(want));
        assert_eq!(Moves::decode("moved=1 minimum=2"), None);
        // A leave places the leaver's units and moves nothing.
        let (_, moves) = MatchingTable::solve_counted(&three, |_| true, &sticky(Some(&joined)));
        assert_eq!(
            moves,
            Some(Moves {
                moved: 0,
                minimum: 0,
                placed: 15
            })
        );
        // The ring from the same table moves more than the minimum.
        let ring_from = Solve {
            assignment: Assignment::Ring,
            ..sticky(Some(&start))
        };
        let (_, moves) = MatchingTable::solve_counted(&four, |_| true, &ring_from);
        let moves = moves.unwrap();
        assert_eq!(moves.minimum, 15);
        assert!(moves.moved >= 15, "{moves:?}");
        // A unit in transit counts as held by its destination.
        let u = joined.units_of("a:4")[0].to_string();
        let mut rows = joined.rows().clone();
        let rest: Vec<&str> = joined.units_of("a:4")[1..].to_vec();
        rows.insert("a:4".to_string(), rest.join(","));
        let without = MatchingTable::from_rows(rows);
        let again = MatchingTable::solve_with(
            &four,
            |_| true,
            &Solve {
                also_held: &[("a:4", u.as_str())],
                ..sticky(Some(&without))
            },
        );
        assert_eq!(again, joined, "a fixed point through the handoff");
        // A limit of 4 moves: 4 now, the rest in later solves.
        fn limited(current: &MatchingTable) -> Solve<'_> {
            Solve {
                assignment: Assignment::Sticky,
                current: Some(current),
                max_moves: 4,
                ..Solve::ring()
            }
        }
        let mut t = start.clone();
        let mut solves = 0;
        while t != joined {
            let next = MatchingTable::solve_with(&four, |_| true, &limited(&t));
            assert!(t.moved_units(&next) <= 2 * 4, "{solves}");
            t = next;
            solves += 1;
        }
        assert_eq!(solves, 4, "15 moves, 4 a solve");
        // A leave is never limited: its units have no live holder.
        let left = MatchingTable::solve_with(&three, |_| true, &limited(&joined));
        assert_eq!(left.units_of("a:4").len(), 0);
        assert_eq!(left.assignments(), 60);
    }

    #[test]
    fn decode() {
        assert!(decode_row("").is_empty());
        assert_eq!(decode_row("a,b"), ["a", "b"]);
    }
}
