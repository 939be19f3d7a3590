//! The table the solver wants (desired): memoised by a key of everything
//! the solve depends on, so an unchanged key never solves again, and solved
//! off the runtime's workers when it changed. In plain sticky mode a solve
//! whose only changed input is the current table is skipped too when that
//! table is the one the last solve returned, handed off or on its way
//! (`sticky::holds_exactly`: the solve would return it unchanged).

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use tracing::info_span;
use xxhash_rust::xxh3::Xxh3;

use super::{HolderView, LastChange};
use crate::core::balance::{Balance, Costs, LoadSummary};
use crate::core::inputs::Inputs;
use crate::core::sticky;
use crate::core::table::{Assignment, MatchingTable, Solve};

/// The last solved table and the key of its inputs, to skip re-solving.
#[derive(Clone)]
pub(in crate::coordinator) struct Memo {
    key: u128,
    /// The key without the current table's part (see `desired`).
    base: u128,
    pub(in crate::coordinator) table: Arc<MatchingTable>,
    /// The units key (`units_key`) of the list `table` partitions, when it
    /// was solved for one group (every such solve returns a partition).
    partitions: Option<u128>,
    /// With `-balance cost` or `load`: the table's loads against the shares.
    pub(in crate::coordinator) loads: Option<Arc<LoadSummary>>,
}

/// Each unit's cost in the order of the units list, for the units and
/// costs of these digests (`units_key`, `UnitCosts::digest`).
#[derive(Clone)]
pub(in crate::coordinator) struct AlignedCosts {
    units: u128,
    costs: u128,
    values: Arc<Vec<u64>>,
}

/// What the solve depends on besides the inputs and the view.
#[derive(Clone, Copy)]
pub(in crate::coordinator) struct SolveSettings {
    pub(in crate::coordinator) assignment: Assignment,
    pub(in crate::coordinator) balance: Balance,
    pub(in crate::coordinator) max_moves: usize,
    /// `-join-delay`: how long a member that becomes live without units
    /// waits before it takes units from live members.
    pub(in crate::coordinator) join_delay: std::time::Duration,
}

impl SolveSettings {
    /// Whether the solve needs the unit costs.
    pub(in crate::coordinator) fn reads_costs(&self) -> bool {
        self.balance.tolerance().is_some()
    }

    /// How long newcomers wait: `-join-delay` in sticky count mode, whose
    /// solver gives a leaver's units to the waiting newcomers
    /// (`sticky::assign_waiting`); 0 in the other modes. There a waiting
    /// newcomer would only join later, in a change of its own: the ring is
    /// a function of the members (measured: 2.5× owner changes per unit
    /// over a rolling restart without a delay, 3.1× with 5 s), and the cost
    /// solver has no waiting rule yet.
    pub(in crate::coordinator) fn join_delay(&self) -> std::time::Duration {
        if self.assignment == Assignment::Sticky && self.balance == Balance::Count {
            self.join_delay
        } else {
            std::time::Duration::ZERO
        }
    }

    /// The mode as `{T}:meta` records it (`Balance::describe`).
    pub(in crate::coordinator) fn describe(&self) -> String {
        self.balance.describe(self.assignment.name())
    }

    /// Whether the solve reads the current (granted) table: sticky mode, or
    /// a move limit. Then a standby's warm view cannot solve ahead (it has
    /// no granted table of its own).
    pub(super) fn uses_current(&self) -> bool {
        self.assignment == Assignment::Sticky || self.max_moves > 0 || self.reads_costs()
    }
}

/// The table the solver wants (desired) for these inputs and this view:
/// `view.memo` when its key (everything the solve depends on) is unchanged,
/// else solved again on a blocking thread and memoised. `granted` is the
/// table members hold now, which only sticky mode and a move limit read.
/// Says whether it solved (`false`: the memo).
pub(super) async fn desired(
    how: SolveSettings,
    inputs: &Arc<Inputs>,
    view: &mut HolderView,
    granted: &Arc<MatchingTable>,
) -> (Arc<MatchingTable>, bool) {
    // Desired: live (or suspected) members that are not draining.
    let eligible = |m: &str| view.keeps_units(m) && !view.handoff.draining(m);
    // The current table, in sticky mode: the granted table the plan
    // starts from (what members hold: this holder's last write, or the
    // stored table on a new holding, whoever wrote it, Go included), plus
    // every unit in transit counted as held by its destination. The
    // destination is where the last solve put it, and no member works on
    // it meanwhile, so keeping it there loses nothing; counting it free
    // instead would let each solve during a handoff re-place the revoked
    // units by hash, changing their destination for nothing. With the
    // destination counted, a solve during a handoff finds the desired
    // table it started from (a fixed point). A unit in transit to nobody
    // is free. The move limit counts moves from the same current table,
    // in both modes. In ring mode without a limit the table does not
    // depend on it (so neither does the memo's key), and it is not read.
    // The operator's controls: cordoned and paused members keep what they
    // hold, so the solve reads the current table then.
    // A held unit on trial (`core::quarantine`) goes to the member it is
    // pinned to, as an operator's pin would send it.
    let pins: Vec<(&str, &str)> = view.quarantine.trial_pins().collect();
    let controls = if pins.is_empty() {
        Arc::clone(&view.handoff.controls)
    } else {
        let mut c = (*view.handoff.controls).clone();
        for (unit, member) in pins {
            c.pins.insert(unit.to_string(), member.to_string());
        }
        Arc::new(c)
    };
    // Newcomers that wait (`-join-delay`): members live for less than the
    // delay that hold no unit in the table this solve starts from (units
    // in transit towards one do not count: it waits while they arrive).
    // In sticky mode no held unit moves meanwhile, so the solve reads the
    // current table.
    let waiting: Arc<BTreeSet<String>> = Arc::new(
        view.waiting
            .iter()
            .filter(|m| granted.units_of(m).is_empty())
            .cloned()
            .collect(),
    );
    let uses_current = how.uses_current() || controls.keeps_units() || !waiting.is_empty();
    // The costs as last read (`-balance cost` or `load`; none declared else).
    let costs = view.costs.costs();
    let costs_digest = costs.costs.digest();
    let also_held: Vec<(&str, &str)> = view
        .handoff
        .ledger
        .transit()
        .values()
        .flat_map(|units| units.iter())
        .filter_map(|(u, t)| Some((t.to.as_deref()?, u.as_str())))
        .collect();
    // Moves already in flight (units in transit from a member that still
    // gets units, to another) use up the move limit: it bounds how many
    // held units move at once, not per write. Otherwise every write of a
    // handoff (each acknowledgement triggers one) would let another
    // `-max-moves-per-cycle` go, and with members that do not
    // acknowledge, units would pile up in transit. Units of failed,
    // draining or departed members are never limited, so they use none.
    let in_flight = view
        .handoff
        .ledger
        .transit()
        .values()
        .flat_map(|units| units.values())
        .filter(|t| t.to.is_some() && t.origins().any(&eligible))
        .count();
    // Capacity weights, in both modes: the operator's override, else
    // each member's report (1 without one, or without the field). A
    // changed weight re-solves.
    let weights: HashMap<String, u32> = inputs
        .members()
        .filter(|m| eligible(m))
        .map(|m| (m.to_string(), view.handoff.weight(m)))
        .collect();
    // The units' part is computed once per units list read (see
    // `ListCache`): an idle cycle hashes members, never units.
    let units_part = match (&view.lists, &view.excluded) {
        (_, Some(e)) if Arc::ptr_eq(&e.inputs, inputs) => e.units_key,
        (Some(c), _) if Arc::ptr_eq(&c.inputs, inputs) => c.units_key,
        _ => units_key(&inputs.units),
    };
    // Each unit's cost in the units' order, looked up once per units list
    // and costs read (a million lookups cost more than the solve).
    let aligned = match (how.balance, &view.aligned_costs) {
        (Balance::Cost(_) | Balance::Load(_), Some(a))
            if a.units == units_part && a.costs == costs_digest =>
        {
            Some(Arc::clone(&a.values))
        }
        _ => None,
    };
    let base;
    let key = {
        let mut h = Xxh3::new();
        // The units' part is computed once per units list read (see
        // `ListCache`): an idle cycle hashes members, never units.
        h.update(&inputs_key(inputs, units_part, eligible).to_le_bytes());
        h.update(how.assignment.name().as_bytes());
        if !controls.is_empty() {
            h.update(&controls.key().to_le_bytes());
        }
        for m in waiting.iter() {
            h.update(&[6]);
            h.update(&(m.len() as u64).to_le_bytes());
            h.update(m.as_bytes());
        }
        if let Some(t) = how.balance.tolerance() {
            h.update(how.balance.name().as_bytes());
            h.update(&t.bp().to_le_bytes());
            h.update(&costs_digest.to_le_bytes());
        }
        let mut weighted: Vec<(&String, &u32)> = weights.iter().filter(|&(_, &w)| w != 1).collect();
        weighted.sort_unstable();
        for (m, w) in weighted {
            h.update(&(m.len() as u64).to_le_bytes());
            h.update(m.as_bytes());
            h.update(&w.to_le_bytes());
        }
        base = h.digest128();
        if uses_current {
            h.update(&how.max_moves.to_le_bytes());
            h.update(granted.digest().as_bytes());
            for (m, u) in &also_held {
                h.update(&(m.len() as u64).to_le_bytes());
                h.update(m.as_bytes());
                h.update(&(u.len() as u64).to_le_bytes());
                h.update(u.as_bytes());
            }
        }
        h.digest128()
    };
    // A sticky solve from the table the last one returned, for the same
    // inputs, returns that table (`sticky::holds_exactly`): during a
    // handoff, and once it is done, the solve is skipped. Only where the
    // solver is plain sticky: a move limit, a cordon, a pause or waiting
    // newcomers make a table that later solves change. Pins alone (a
    // quarantine's trials) do not: the pinned units are placed apart and
    // the others solved from the result alone (`sticky::fixed_point`).
    let pins_only = controls.pins_only();
    let plain_sticky = how.assignment == Assignment::Sticky
        && how.balance == Balance::Count
        && how.max_moves == 0
        && pins_only
        && waiting.is_empty()
        && inputs.groups.len() == 1;
    let mut solved = false;
    let memo = match view.memo.take() {
        Some(m) if m.key == key => m,
        Some(m)
            if plain_sticky
                && m.base == base
                && sticky::holds_exactly(granted.rows(), &also_held, &m.table) =>
        {
            Memo { key, ..m }
        }
        previous => {
            solved = true;
            // The solver's view (the granted table, units in transit
            // counted as their destination's) is the table the last solve
            // returned, for this units list: a plain sticky solve then
            // starts from that table and reads only the rows that change
            // (`sticky::reassign`), for the same result.
            let solved_view = previous
                .filter(|m| plain_sticky && m.partitions == Some(units_part))
                .map(|m| m.table)
                .filter(|t| sticky::holds_exactly(granted.rows(), &also_held, t));
            let current_is_solved = solved_view.is_some();
            let inp = Arc::clone(inputs);
            let assign = info_span!(
                "assign",
                units = inputs.units.len(),
                groups = inputs.groups.len(),
                assignment = how.assignment.name(),
                balance = how.balance.name(),
                current_is_solved,
            );
            let assignment = how.assignment;
            let balance = how.balance;
            let max_moves = how.max_moves;
            // Ring mode without a limit does not read the current table:
            // counting its moves for status costs whole-table passes on
            // every new solve (tens of MB at a million units), in the
            // default mode whose memory is budgeted (BENCHMARKS.md, "Holder
            // memory").
            let current = solved_view.or_else(|| uses_current.then(|| Arc::clone(granted)));
            let in_flight = if max_moves > 0 { in_flight } else { 0 };
            let also_held: Vec<(String, String)> = also_held
                .iter()
                .filter(|_| !current_is_solved)
                .map(|(m, u)| (m.to_string(), u.to_string()))
                .collect();
            let held = Arc::clone(granted);
            let small = inputs.units.len() <= super::INLINE_UNITS;
            let table = super::blocking_unless(small, move || {
                let also_held: Vec<(&str, &str)> = also_held
                    .iter()
                    .map(|(m, u)| (m.as_str(), u.as_str()))
                    .collect();
                let weight = |m: &str| weights.get(m).copied().unwrap_or(1);
                let aligned = match (balance, aligned) {
                    (Balance::Count, _) => None,
                    (_, Some(a)) => Some(a),
                    (_, None) => Some(Arc::new(
                        inp.units
                            .iter()
                            .map(|u| costs.costs.of(u))
                            .collect::<Vec<u64>>(),
                    )),
                };
                let how = Solve {
                    assignment,
                    balance,
                    costs: aligned.as_deref().map(|a| Costs::Aligned(a)),
                    weight: &weight,
                    current: current.as_deref(),
                    also_held: &also_held,
                    max_moves,
                    in_flight,
                    controls: Some(&controls),
                    waiting: Some(&waiting),
                    current_is_solved,
                };
                let live = |m: &str| weights.contains_key(m);
                let (table, moves) =
                    assign.in_scope(|| MatchingTable::solve_counted(&inp, live, &how));
                // Not counted (ring): a change if the table is not the one
                // held. Digests are kept, and the write needs this one.
                let uncounted_change = moves.is_none() && table.digest() != held.digest();
                let loads = match balance {
                    Balance::Cost(t) | Balance::Load(t) => {
                        let c = Costs::Aligned(aligned.as_deref().expect("cost mode"));
                        Some(Arc::new(table.loads(&inp, live, &weight, c, t)))
                    }
                    Balance::Count => None,
                };
                (table, moves, loads, aligned, uncounted_change)
            })
            .await;
            let (table, moves, loads, aligned, uncounted_change) = table;
            view.aligned_costs = aligned.map(|values| AlignedCosts {
                units: units_part,
                costs: costs_digest,
                values,
            });
            let changed = match &moves {
                Some(m) => m.moved + m.placed > 0,
                None => uncounted_change,
            };
            if changed {
                view.handoff.last_change = Some(LastChange {
                    moves,
                    unsaved: true,
                });
            }
            Memo {
                key,
                base,
                table: Arc::new(table),
                partitions: (inputs.groups.len() == 1).then_some(units_part),
                loads,
            }
        }
    };
    let desired = Arc::clone(&memo.table);
    view.memo = Some(memo);
    (desired, solved)
}

/// Identifies what the table depends on: the live members of each group and the
/// units (their part, [`units_key`], computed once per units list read).
/// Equal keys mean an equal table, so solving can be skipped.
fn inputs_key(inputs: &Inputs, units: u128, keeps_units: impl Fn(&str) -> bool) -> u128 {
    let mut h = Xxh3::new();
    let mut put = |tag: u8, s: &str| {
        h.update(&[tag]);
        h.update(&(s.len() as u64).to_le_bytes());
        h.update(s.as_bytes());
    };
    for g in &inputs.groups {
        put(1, &g.name);
        for m in g.members.iter().filter(|m| keeps_units(m)) {
            put(2, m);
        }
    }
    h.update(&[3]);
    h.update(&units.to_le_bytes());
    h.digest128()
}

/// The units' part of [`inputs_key`]: O(units), so computed when the units
/// list is read, on a blocking thread, never on an idle cycle.
pub(super) fn units_key(units: &[String]) -> u128 {
    let mut h = Xxh3::new();
    for u in units {
        h.update(&(u.len() as u64).to_le_bytes());
        h.update(u.as_bytes());
    }
    h.digest128()
}
