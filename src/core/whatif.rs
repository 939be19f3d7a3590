//! What-if: the table the holder would write after a change of the fleet
//! (`distributor plan`, `/api/plan`), solved with the holder's own solve.
//!
//! Pure: a [`Fleet`] (what a holder plans from: the lists, the granted
//! table, who keeps units, who drains, the controls, the weights, the units
//! in transit and the costs, with the change already applied) and the
//! solve's [`Mode`] in, a [`Prediction`] out. No IO, no clock. Guarantees:
//! - [`solve_as_holder`] builds the solve exactly as the holder's
//!   `desired` (`coordinator/holder/solve.rs`) does: the granted table as
//!   the current one where the holder reads it (sticky mode, a move limit,
//!   cost or load balance, a control that keeps units), every unit in
//!   transit counted as held by its destination, the moves in flight
//!   against `-max-moves-per-cycle`, the operator's controls, weights only
//!   for the members that get units (live or suspected, and not draining),
//!   and the costs in the units' order; the holder's memo and its
//!   shortcuts (`sticky::reassign`) give the same table, so they are left
//!   out;
//! - [`predict`] is the table once the holder is done: every move
//!   completed, no newcomer waiting (`-join-delay` over), and the solve
//!   repeated from each result as the holder does after each completed
//!   handoff, until it returns its own input (at most [`MAX_BATCHES`]
//!   solves; `Prediction::converged` says whether it got there). A live
//!   member that drains keeps an empty row, as the handoff planner writes
//!   it (`rows_for`);
//! - equal arguments give equal predictions.
//!
//! The holder builds its `Solve` in `holder::solve` and this module builds
//! the same one here: a change to either must be made to both, and
//! `tests/integration/plan.rs` fails when they part (each change planned,
//! then made, and the holder's table compared with the plan's).

use std::collections::{BTreeMap, BTreeSet, HashMap};

use crate::core::balance::{Balance, Costs};
use crate::core::controls::Controls;
use crate::core::costs::UnitCosts;
use crate::core::inputs::Inputs;
use crate::core::row::decode_row;
use crate::core::table::{Assignment, MatchingTable, Moves, Solve};

/// The most solves [`predict`] runs: with `-max-moves-per-cycle`, one per
/// batch of moves.
pub const MAX_BATCHES: usize = 200;

/// How the holder solves: `-assignment`, `-balance` (with its tolerance)
/// and `-max-moves-per-cycle`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Mode {
    pub assignment: Assignment,
    pub balance: Balance,
    pub max_moves: usize,
}

impl Mode {
    /// Whether the holder's solve reads the granted table
    /// (`SolveSettings::uses_current`, plus the controls that keep units).
    pub fn uses_current(&self, controls: &Controls) -> bool {
        self.assignment == Assignment::Sticky
            || self.max_moves > 0
            || self.balance.tolerance().is_some()
            || controls.keeps_units()
    }
}

/// A unit in transit (`{T}:transit`): revoked from `from`, on its way to
/// `to` (`None`: nobody yet).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InTransit {
    pub group: String,
    pub unit: String,
    pub from: Vec<String>,
    pub to: Option<String>,
}

/// What the holder plans from, after the change.
#[derive(Debug, Clone, Default)]
pub struct Fleet {
    /// The lists, validated (`inputs::normalize`).
    pub inputs: Inputs,
    /// The table members hold now.
    pub granted: MatchingTable,
    /// Members that keep units: live, or suspected of a mass failure.
    pub keeps_units: BTreeSet<String>,
    /// Members that drain: their report, or an operator's drain.
    pub draining: BTreeSet<String>,
    pub controls: Controls,
    /// Each member's weight: the operator's override, else its report's
    /// (absent: 1).
    pub weights: BTreeMap<String, u32>,
    pub transit: Vec<InTransit>,
    /// The units' costs (`-balance cost`) or loads (`-balance load`).
    pub costs: UnitCosts,
}

impl Fleet {
    /// Whether `member` gets units: it keeps units and does not drain.
    pub fn eligible(&self, member: &str) -> bool {
        self.keeps_units.contains(member) && !self.draining.contains(member)
    }

    pub fn weight(&self, member: &str) -> u32 {
        self.weights.get(member).copied().unwrap_or(1)
    }

    /// Units in transit with a destination, as `(destination, unit)`: the
    /// solver counts them as held there.
    fn also_held(&self) -> Vec<(&str, &str)> {
        self.transit
            .iter()
            .filter_map(|t| Some((t.to.as_deref()?, t.unit.as_str())))
            .collect()
    }

    /// Moves under way: units in transit to a member from one that still
    /// gets units (they use up the move limit).
    fn in_flight(&self) -> usize {
        self.transit
            .iter()
            .filter(|t| t.to.is_some() && t.from.iter().any(|m| self.eligible(m)))
            .count()
    }
}

/// One solve, built as the holder's `desired` builds it (see the module
/// docs), from `current` (the granted table) and `also_held` (units in
/// transit, with their destination), `in_flight` moves under way. No
/// newcomer waits. `force_current`: give the solver the current table
/// even where the holder does not (ring mode without a limit), to count
/// the moves.
fn solve(
    fleet: &Fleet,
    mode: Mode,
    current: &MatchingTable,
    also_held: &[(&str, &str)],
    in_flight: usize,
    force_current: bool,
) -> (MatchingTable, Option<Moves>) {
    let inputs = &fleet.inputs;
    let weights: HashMap<&str, u32> = inputs
        .members()
        .filter(|m| fleet.eligible(m))
        .map(|m| (m, fleet.weight(m)))
        .collect();
    let weight = |m: &str| weights.get(m).copied().unwrap_or(1);
    let aligned: Option<Vec<u64>> = match mode.balance {
        Balance::Count => None,
        Balance::Cost(_) | Balance::Load(_) => {
            Some(inputs.units.iter().map(|u| fleet.costs.of(u)).collect())
        }
    };
    let uses_current = mode.uses_current(&fleet.controls) || force_current;
    let waiting = BTreeSet::new();
    let how = Solve {
        assignment: mode.assignment,
        balance: mode.balance,
        costs: aligned.as_deref().map(Costs::Aligned),
        weight: &weight,
        current: uses_current.then_some(current),
        also_held,
        max_moves: mode.max_moves,
        in_flight: if mode.max_moves > 0 { in_flight } else { 0 },
        controls: Some(&fleet.controls),
        waiting: Some(&waiting),
        current_is_solved: false,
    };
    MatchingTable::solve_counted(inputs, |m| weights.contains_key(m), &how)
}

/// The table the holder's next solve gives for `fleet`, and its moves
/// against the granted table (`None` where the holder does not count
/// them: ring mode without a limit).
pub fn solve_as_holder(fleet: &Fleet, mode: Mode) -> (MatchingTable, Option<Moves>) {
    let also_held = fleet.also_held();
    solve(
        fleet,
        mode,
        &fleet.granted,
        &also_held,
        fleet.in_flight(),
        false,
    )
}

/// How one unit's owner changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
#[cfg_attr(
    feature = "daemon",
    derive(serde::Serialize),
    serde(rename_all = "lowercase")
)]
pub enum Kind {
    /// From a member that still gets units to another.
    Moved,
    /// From nobody, or from a member that leaves, fails or drains.
    Placed,
    /// To nobody (every member that could take it is cordoned).
    Unowned,
}

/// One unit whose owner changes. `from` is every member holding it now
/// (a unit in transit counts as its destination's, as the solver counts
/// it); `to` its owner once the holder is done.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
#[cfg_attr(feature = "daemon", derive(serde::Serialize))]
pub struct Change {
    pub group: String,
    pub unit: String,
    pub from: Vec<String>,
    pub to: Option<String>,
    pub kind: Kind,
}

/// One member's units before and after.
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(feature = "daemon", derive(serde::Serialize))]
pub struct MemberCount {
    pub group: String,
    pub member: String,
    pub before: usize,
    pub after: usize,
    /// Its weight after the change.
    pub weight: u32,
    /// Whether it gets units after the change (live, not draining).
    pub eligible: bool,
    /// Its exact weighted share of the group's units after the change,
    /// among the members that get units.
    pub share: Option<f64>,
}

/// A group's balance after the change, over the members that get units.
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(feature = "daemon", derive(serde::Serialize))]
pub struct GroupBalance {
    pub group: String,
    pub members: usize,
    pub min: usize,
    pub max: usize,
    /// The largest distance of a row from its exact weighted share (below
    /// 1 where every row is the floor or the ceiling of its share).
    pub max_off_share: f64,
}

/// What [`predict`] returns.
#[derive(Debug, Clone)]
pub struct Prediction {
    /// The table once the holder is done.
    pub table: MatchingTable,
    /// The first solve's moves against the minimum (the solver's own
    /// count; over several batches `moved` and `placed` count the units
    /// whose owner differs at the end); `None` where they cannot be told.
    pub moves: Option<Moves>,
    /// Every unit whose owner changes, sorted by group and unit.
    pub changes: Vec<Change>,
    /// Every member with a row before or after, sorted by group and member.
    pub members: Vec<MemberCount>,
    pub groups: Vec<GroupBalance>,
    /// Solves that changed the table (1 without a move limit).
    pub batches: usize,
    /// Whether the last solve returned its input (else [`MAX_BATCHES`]
    /// ran out).
    pub converged: bool,
}

/// `table` with an empty row for every listed member that keeps units but
/// gets none (a live member that drains), as the handoff planner writes it.
fn with_kept_rows(fleet: &Fleet, table: MatchingTable) -> MatchingTable {
    let missing: Vec<&str> = fleet
        .inputs
        .members()
        .filter(|m| fleet.keeps_units.contains(*m) && !table.rows().contains_key(*m))
        .collect();
    if missing.is_empty() {
        return table;
    }
    let mut rows = table.rows().clone();
    for m in missing {
        rows.insert(m.to_string(), String::new());
    }
    MatchingTable::from_rows(rows)
}

/// The table the holder writes for `fleet` once every move is done, and
/// what changes (see the module docs).
pub fn predict(fleet: &Fleet, mode: Mode) -> Prediction {
    let (first, mut moves) = solve_as_holder(fleet, mode);
    if moves.is_none() {
        // Counted from the same current table; the ring reads none, so the
        // table is the same (checked).
        let also_held = fleet.also_held();
        let (t, m) = solve(
            fleet,
            mode,
            &fleet.granted,
            &also_held,
            fleet.in_flight(),
            true,
        );
        moves = m.filter(|_| t == first);
    }
    let mut table = with_kept_rows(fleet, first);
    let mut batches = 1;
    let mut converged = false;
    for _ in 1..MAX_BATCHES {
        let (next, _) = solve(fleet, mode, &table, &[], 0, false);
        let next = with_kept_rows(fleet, next);
        if next == table {
            converged = true;
            break;
        }
        table = next;
        batches += 1;
    }
    let before = owners(fleet, &fleet.granted, &fleet.also_held());
    let after = owners(fleet, &table, &[]);
    let changes = changes(fleet, &before, &after);
    if batches > 1 {
        let count = |k: Kind| changes.iter().filter(|c| c.kind == k).count();
        moves = moves.map(|m| Moves {
            moved: count(Kind::Moved),
            placed: count(Kind::Placed),
            ..m
        });
    }
    let (members, groups) = balance(fleet, &before, &table);
    Prediction {
        table,
        moves,
        changes,
        members,
        groups,
        batches,
        converged,
    }
}

/// (group, unit) → the members holding it, in `table` and `also_held`.
type Owners<'a> = BTreeMap<(&'a str, &'a str), Vec<&'a str>>;

/// Each unit's holders per group: the rows of the group's members (rows of
/// members no group lists count under the empty group).
fn owners<'a>(
    fleet: &'a Fleet,
    table: &'a MatchingTable,
    also: &[(&'a str, &'a str)],
) -> Owners<'a> {
    let group_of: HashMap<&str, &str> = fleet
        .inputs
        .groups
        .iter()
        .flat_map(|g| g.members.iter().map(move |m| (m.as_str(), g.name.as_str())))
        .collect();
    let mut out: Owners<'a> = BTreeMap::new();
    let rows = table
        .rows()
        .iter()
        .flat_map(|(m, v)| decode_row(v).into_iter().map(move |u| (m.as_str(), u)));
    for (m, u) in rows.chain(also.iter().copied()) {
        let g = group_of.get(m).copied().unwrap_or("");
        let holders = out.entry((g, u)).or_default();
        if !holders.contains(&m) {
            holders.push(m);
        }
    }
    for holders in out.values_mut() {
        holders.sort_unstable();
    }
    out
}

fn changes(fleet: &Fleet, before: &Owners<'_>, after: &Owners<'_>) -> Vec<Change> {
    let mut out = Vec::new();
    let keys: BTreeSet<&(&str, &str)> = before.keys().chain(after.keys()).collect();
    for key in keys {
        let (group, unit) = *key;
        let from = before.get(key).map_or(&[][..], Vec::as_slice);
        let to = after.get(key).and_then(|h| h.first().copied());
        if to.is_some_and(|t| from.contains(&t)) || (to.is_none() && from.is_empty()) {
            continue;
        }
        // A unit no longer listed leaves every row; the plan changes no list.
        if to.is_none()
            && fleet
                .inputs
                .units
                .binary_search_by(|u| u.as_str().cmp(unit))
                .is_err()
        {
            continue;
        }
        let kind = match (from, to) {
            (_, None) => Kind::Unowned,
            ([single], Some(_)) if fleet.eligible(single) => Kind::Moved,
            _ => Kind::Placed,
        };
        out.push(Change {
            group: group.to_string(),
            unit: unit.to_string(),
            from: from.iter().map(|m| m.to_string()).collect(),
            to: to.map(str::to_string),
            kind,
        });
    }
    out
}

/// Each member's count before and after, and each group's balance after.
fn balance(
    fleet: &Fleet,
    before: &Owners<'_>,
    table: &MatchingTable,
) -> (Vec<MemberCount>, Vec<GroupBalance>) {
    let mut held_before: HashMap<&str, usize> = HashMap::new();
    for holders in before.values() {
        for m in holders {
            *held_before.entry(m).or_default() += 1;
        }
    }
    let units = fleet.inputs.units.len() as f64;
    let mut members = Vec::new();
    let mut groups = Vec::new();
    for g in &fleet.inputs.groups {
        let receivers: Vec<&str> = g
            .members
            .iter()
            .map(String::as_str)
            .filter(|m| fleet.eligible(m))
            .collect();
        let total: u64 = receivers
            .iter()
            .map(|m| u64::from(fleet.weight(m).max(1)))
            .sum();
        let share = |m: &str| {
            (fleet.eligible(m) && total > 0)
                .then(|| units * f64::from(fleet.weight(m).max(1)) / total as f64)
        };
        let mut counts = Vec::new();
        for m in &g.members {
            let (b, a) = (
                held_before.get(m.as_str()).copied().unwrap_or(0),
                table.units_of(m).len(),
            );
            let in_table = fleet.granted.rows().contains_key(m) || table.rows().contains_key(m);
            if !in_table && b == 0 {
                continue;
            }
            let c = MemberCount {
                group: g.name.clone(),
                member: m.clone(),
                before: b,
                after: a,
                weight: fleet.weight(m),
                eligible: fleet.eligible(m),
                share: share(m),
            };
            if c.eligible {
                counts.push((a, c.share.unwrap_or(0.0)));
            }
            members.push(c);
        }
        groups.push(GroupBalance {
            group: g.name.clone(),
            members: counts.len(),
            min: counts.iter().map(|c| c.0).min().unwrap_or(0),
            max: counts.iter().map(|c| c.0).max().unwrap_or(0),
            max_off_share: counts
                .iter()
                .map(|(a, s)| (*a as f64 - s).abs())
                .fold(0.0, f64::max),
        });
    }
    (members, groups)
}

#[cfg(test)]
mod tests;
