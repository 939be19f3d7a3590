//! The what-if report (`distributor plan`, `/api/plan`): the changes an
//! operator asks about, checked; the fleet as the holder sees it, read from
//! an [`Overview`]; and what the holder would write after those changes
//! ([`crate::core::whatif::predict`]), as a document (its text is
//! `report::text::render_plan`).
//!
//! Pure: an overview read from Redis and a request in, a [`PlanReport`] or
//! a [`PlanError`] naming the flag and the value out. Nothing is written
//! anywhere, any input gives a result (never a panic), and the report holds
//! key names, member addresses, units and counts, never the Redis URL.
//!
//! The fleet is read as the holder reads it: the lists validated as a
//! cycle validates them; a member keeps units when its health (`{T}:liveness`,
//! with the holder's `failure_threshold`) says live, or when it has a row
//! (a suspect of a mass failure); it drains by its report or an operator's
//! drain; its weight is the operator's override, else its report's; units
//! in transit go to their destination; costs and loads are decoded as the
//! holder decodes them. The mode is the one `{T}:meta` records (the
//! holder's), else the settings given (this command's flags);
//! `-max-moves-per-cycle` is always the settings' (the holder does not
//! record it).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use serde::Serialize;

use crate::core::balance::Balance;
use crate::core::controls::{Controls, MemberControl};
use crate::core::costs::UnitCosts;
use crate::core::handoff::{MAX_WEIGHT, MemberReport, decode_weight_override, parse_transit_field};
use crate::core::inputs::{RawInputs, check_member_addr, normalize};
use crate::core::liveness::Health;
use crate::core::status::Overview;
use crate::core::table::{Assignment, Moves};
use crate::core::whatif::{self, Change, Fleet, GroupBalance, InTransit, MemberCount, Mode};

/// The changes to plan for, as given: `--leave ADDR`, `--join
/// ADDR[:WEIGHT]`, `--weight ADDR=WEIGHT`, `--cordon ADDR` (each may
/// repeat) and `--group NAME` (the list a new member joins); `/api/plan`
/// takes the same as query parameters.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PlanRequest {
    pub leave: Vec<String>,
    pub join: Vec<String>,
    pub weight: Vec<String>,
    pub cordon: Vec<String>,
    pub group: Option<String>,
}

/// The solve settings of the process that plans (its flags): used where
/// `{T}:meta` records no mode, and for what it never records.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PlanSettings {
    pub mode: Mode,
    /// `-join-delay`.
    pub join_delay: Duration,
}

/// Why a plan cannot be made: the flag and the value, always.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    #[error("invalid --{flag} {value:?}: {why}")]
    Invalid {
        flag: &'static str,
        value: String,
        why: String,
    },
    #[error("--{flag} {value}: not listed in any services list ({lists})")]
    NotListed {
        flag: &'static str,
        value: String,
        lists: String,
    },
    #[error("--{flag} {value}: {why}")]
    Conflict {
        flag: &'static str,
        value: String,
        why: String,
    },
}

/// A member that joins, or a weight: the member and its weight.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MemberWeight {
    pub member: String,
    pub weight: u32,
}

/// The request, checked.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct PlannedChanges {
    pub leave: Vec<String>,
    pub join: Vec<MemberWeight>,
    pub weight: Vec<MemberWeight>,
    pub cordon: Vec<String>,
    /// The services list new members join.
    pub group: Option<String>,
}

/// How many changed units `/api/plan` lists (the CLI lists all).
pub const CHANGES_SHOWN: usize = 1000;
/// How many members `/api/plan` lists (the CLI lists all).
pub const MEMBERS_SHOWN: usize = 1000;

/// What `distributor plan --json` prints and `/api/plan` answers.
#[derive(Debug, Clone, Serialize)]
pub struct PlanReport {
    /// The matching table's key.
    pub table: String,
    /// The generation of the table planned from.
    pub generation: u64,
    /// The mode solved with, as `{T}:meta` records it (`sticky`, `cost
    /// tolerance=10%`, ...).
    pub assignment: String,
    /// `holder`: the mode `{T}:meta` records; `flags`: none recorded, this
    /// process's `-assignment` and `-balance`.
    pub assignment_from: &'static str,
    /// `-max-moves-per-cycle` as this process has it.
    pub max_moves_per_cycle: usize,
    pub changes: PlannedChanges,
    /// Units moved from a member that still gets units against the least
    /// any balanced table could move, and units placed (of members that
    /// leave or drain); `null` where they cannot be told.
    pub moves: Option<Moves>,
    /// Units whose owner changes, all of them.
    pub units_changed: usize,
    /// The first of them (sorted by group and unit): all in `distributor
    /// plan --json`, the first [`CHANGES_SHOWN`] in `/api/plan`.
    pub units: Vec<Change>,
    /// Members with a row before or after.
    pub members_total: usize,
    /// Those members, sorted by group and member, with their units before
    /// and after: all in `distributor plan --json`, the first
    /// [`MEMBERS_SHOWN`] in `/api/plan`.
    pub members: Vec<MemberCount>,
    /// Each group's balance after the change.
    pub groups: Vec<GroupBalance>,
    /// Solves that changed the table (more than 1 only with a move limit).
    pub batches: usize,
    pub converged: bool,
    /// What the plan assumes, in words.
    pub notes: Vec<String>,
    /// The predicted table, row by row (`distributor plan --json` only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rows: Option<BTreeMap<String, String>>,
}

/// The mode solved with, and where it comes from.
fn mode_of(o: &Overview, settings: &PlanSettings) -> (Mode, &'static str) {
    let recorded = o.meta.get("assignment").and_then(|a| {
        let balance = Balance::decode(a);
        match (Assignment::parse(a), balance) {
            (Some(assignment), _) => Some((assignment, Balance::Count)),
            (None, Balance::Count) => None,
            (None, b) => Some((settings.mode.assignment, b)),
        }
    });
    match recorded {
        Some((assignment, balance)) => (
            Mode {
                assignment,
                balance,
                max_moves: settings.mode.max_moves,
            },
            "holder",
        ),
        None => (settings.mode, "flags"),
    }
}

/// The fleet as the holder sees it now (see the module docs).
fn fleet_of(o: &Overview, balance: Balance, now_ms: u64) -> Fleet {
    // Quarantined units are given to nobody: the holder solves without
    // them (`core::quarantine`), and so does the plan.
    let inputs = normalize(&RawInputs {
        groups: o.groups.clone(),
        units_key: String::new(),
        units: o
            .units
            .iter()
            .filter(|u| std::str::from_utf8(u).map_or(true, |u| !o.quarantine.contains_key(u)))
            .cloned()
            .collect(),
    });
    let threshold = o
        .meta
        .get("failure_threshold")
        .and_then(|v| v.parse::<u32>().ok())
        .unwrap_or(1)
        .max(1);
    let granted = crate::core::table::MatchingTable::from_rows(o.table.clone());
    let live = |m: &str| {
        o.liveness
            .get(m)
            .and_then(|v| Health::decode(v))
            .is_some_and(|h| h.answered && h.failures < threshold)
    };
    let (controls, _) = Controls::decode(
        o.controls
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
    );
    let report = |m: &str| o.reports.get(m).and_then(|v| MemberReport::decode(v));
    let listed: Vec<&str> = inputs.members().collect();
    let keeps_units = listed
        .iter()
        .filter(|m| live(m) || granted.rows().contains_key(**m))
        .map(|m| m.to_string())
        .collect();
    let draining = listed
        .iter()
        .filter(|m| report(m).is_some_and(|r| r.draining) || controls.drained(m))
        .map(|m| m.to_string())
        .collect();
    let weights = listed
        .iter()
        .map(|m| (m.to_string(), o.weight(m)))
        .collect();
    let transit = o
        .transit
        .iter()
        .filter_map(|(field, value)| {
            let (group, unit) = parse_transit_field(field)?;
            let mut it = value.split(' ').skip(2);
            let to = it.next().filter(|t| *t != "-" && !t.is_empty());
            let from = it.next()?.split(',').map(str::to_string).collect();
            Some(InTransit {
                group: group.to_string(),
                unit: unit.to_string(),
                from,
                to: to.map(str::to_string),
            })
        })
        .collect();
    let costs = match balance {
        Balance::Count => UnitCosts::default(),
        Balance::Cost(_) => UnitCosts::decode(o.costs.iter().map(|(u, c)| (u.clone(), c))).0,
        Balance::Load(_) => {
            let age = crate::core::timing::Timing::DEFAULT.load_age();
            crate::core::load::decode_loads(o.loads.iter(), now_ms, age).costs
        }
    };
    Fleet {
        inputs,
        granted,
        keeps_units,
        draining,
        controls,
        weights,
        transit,
        costs,
    }
}

/// A weight as `weights set` takes it.
fn weight_of(flag: &'static str, value: &str, w: &str) -> Result<u32, PlanError> {
    decode_weight_override(w).ok_or_else(|| PlanError::Invalid {
        flag,
        value: value.to_string(),
        why: format!("the weight must be an integer from 1 to {MAX_WEIGHT}"),
    })
}

/// A member address as the daemon reads it.
fn addr_of(flag: &'static str, value: &str) -> Result<String, PlanError> {
    check_member_addr(value.as_bytes())
        .map(str::to_string)
        .map_err(|why| PlanError::Invalid {
            flag,
            value: value.to_string(),
            why: format!("not a member address: {why}"),
        })
}

/// `ADDR` or `ADDR:WEIGHT`.
fn join_of(value: &str) -> Result<(String, Option<u32>), PlanError> {
    match addr_of("join", value) {
        Ok(addr) => Ok((addr, None)),
        Err(e) => match value.rsplit_once(':') {
            Some((addr, w)) if check_member_addr(addr.as_bytes()).is_ok() => {
                Ok((addr.to_string(), Some(weight_of("join", value, w)?)))
            }
            _ => Err(e),
        },
    }
}

/// Inserts `(key, value)`, or fails when `key` is there with another value.
fn once<V: PartialEq + Copy>(
    map: &mut BTreeMap<String, V>,
    flag: &'static str,
    key: String,
    value: V,
) -> Result<(), PlanError> {
    match map.get(&key) {
        Some(v) if *v != value => Err(PlanError::Conflict {
            flag,
            value: key,
            why: "given twice with different values".into(),
        }),
        _ => {
            map.insert(key, value);
            Ok(())
        }
    }
}

/// Checks `request` against the fleet and applies it; returns the changes
/// as applied.
fn apply(
    fleet: &mut Fleet,
    o: &Overview,
    request: &PlanRequest,
) -> Result<PlannedChanges, PlanError> {
    let lists: Vec<&str> = o.groups.iter().map(|(g, _)| g.as_str()).collect();
    let lists_text = || {
        if lists.is_empty() {
            "none configured".to_string()
        } else {
            lists.join(", ")
        }
    };
    let group = match &request.group {
        Some(g) if !lists.contains(&g.as_str()) => {
            return Err(PlanError::Invalid {
                flag: "group",
                value: g.clone(),
                why: format!("not a configured services list ({})", lists_text()),
            });
        }
        g => g.clone(),
    };
    let group_of = |m: &str, fleet: &Fleet| {
        fleet
            .inputs
            .groups
            .iter()
            .find(|g| g.members.iter().any(|x| x == m))
            .map(|g| g.name.clone())
    };
    let mut leave = BTreeSet::new();
    for v in &request.leave {
        leave.insert(addr_of("leave", v)?);
    }
    let mut join: BTreeMap<String, Option<u32>> = BTreeMap::new();
    for v in &request.join {
        let (addr, w) = join_of(v)?;
        once(&mut join, "join", addr, w)?;
    }
    let mut weight: BTreeMap<String, u32> = BTreeMap::new();
    for v in &request.weight {
        let Some((addr, w)) = v.split_once('=') else {
            return Err(PlanError::Invalid {
                flag: "weight",
                value: v.clone(),
                why: "expected ADDR=WEIGHT".into(),
            });
        };
        let addr = addr_of("weight", addr)?;
        let w = weight_of("weight", v, w)?;
        once(&mut weight, "weight", addr, w)?;
    }
    let mut cordon = BTreeSet::new();
    for v in &request.cordon {
        cordon.insert(addr_of("cordon", v)?);
    }
    let not_listed = |flag, m: &str| PlanError::NotListed {
        flag,
        value: m.to_string(),
        lists: lists_text(),
    };
    let leaves = |flag, m: &str| PlanError::Conflict {
        flag,
        value: m.to_string(),
        why: "it also leaves (--leave)".into(),
    };
    for m in &leave {
        if group_of(m, fleet).is_none() {
            return Err(not_listed("leave", m));
        }
    }
    // Joins: a listed member comes back (in its own list); a new one is
    // added to --group, or to the only list.
    let mut joined = Vec::new();
    for (m, w) in &join {
        if leave.contains(m) {
            return Err(leaves("join", m));
        }
        match group_of(m, fleet) {
            Some(g) if group.as_ref().is_some_and(|x| *x != g) => {
                return Err(PlanError::Conflict {
                    flag: "join",
                    value: m.clone(),
                    why: format!("already listed in {g}, not in --group"),
                });
            }
            Some(g) if fleet.eligible(m) => {
                return Err(PlanError::Conflict {
                    flag: "join",
                    value: m.clone(),
                    why: format!("already a live member of {g}"),
                });
            }
            Some(_) => {}
            None => {
                let target = match (&group, &lists[..]) {
                    (Some(g), _) => g.clone(),
                    (None, [only]) => only.to_string(),
                    (None, _) => {
                        return Err(PlanError::Conflict {
                            flag: "join",
                            value: m.clone(),
                            why: format!(
                                "which services list? name one with --group ({})",
                                lists_text()
                            ),
                        });
                    }
                };
                if let Some(g) = fleet.inputs.groups.iter_mut().find(|g| g.name == target) {
                    let at = g.members.binary_search(m).unwrap_or_else(|at| at);
                    g.members.insert(at, m.clone());
                }
            }
        }
        // A new process: its own report (its weight, not draining); an
        // override still wins, as an operator's drain does.
        fleet.keeps_units.insert(m.clone());
        if !fleet.controls.drained(m) {
            fleet.draining.remove(m);
        }
        let reported = w.unwrap_or(1);
        let weight = o
            .weights
            .get(m)
            .and_then(|v| decode_weight_override(v))
            .unwrap_or(reported);
        fleet.weights.insert(m.clone(), weight);
        joined.push(MemberWeight {
            member: m.clone(),
            weight,
        });
    }
    for m in &leave {
        fleet.keeps_units.remove(m);
    }
    for (m, w) in &weight {
        if leave.contains(m) {
            return Err(leaves("weight", m));
        }
        if group_of(m, fleet).is_none() {
            return Err(not_listed("weight", m));
        }
        fleet.weights.insert(m.clone(), *w);
    }
    for m in &cordon {
        if leave.contains(m) {
            return Err(leaves("cordon", m));
        }
        if group_of(m, fleet).is_none() {
            return Err(not_listed("cordon", m));
        }
        if !fleet.controls.cordoned(m) {
            fleet
                .controls
                .members
                .insert(m.clone(), (MemberControl::Cordon, None));
        }
    }
    Ok(PlannedChanges {
        leave: leave.into_iter().collect(),
        join: joined,
        weight: weight
            .into_iter()
            .map(|(member, weight)| MemberWeight { member, weight })
            .collect(),
        cordon: cordon.into_iter().collect(),
        group: if join.is_empty() { None } else { group },
    })
}

/// What the holder would write after `request`'s changes, from what `o`
/// holds (read at `now_ms`); `all_units`: every changed unit, every
/// member and the predicted rows (the CLI), else the first
/// [`CHANGES_SHOWN`] units, the first [`MEMBERS_SHOWN`] members and no
/// rows (the API, whose answers stay bounded).
pub fn plan(
    o: &Overview,
    table_key: &str,
    request: &PlanRequest,
    settings: &PlanSettings,
    now_ms: u64,
    all_units: bool,
) -> Result<PlanReport, PlanError> {
    let (mode, assignment_from) = mode_of(o, settings);
    let mut fleet = fleet_of(o, mode.balance, now_ms);
    let changes = apply(&mut fleet, o, request)?;
    let p = whatif::predict(&fleet, mode);
    let mut notes = Vec::new();
    if assignment_from == "flags" {
        notes.push(
            "{T}:meta records no mode (no holder wrote a table yet): solved as this command's -assignment and -balance say".to_string(),
        );
    }
    if mode.max_moves > 0 {
        notes.push(format!(
            "-max-moves-per-cycle {}: the holder moves at most that many units at once; this is the table once every batch is done",
            mode.max_moves
        ));
    }
    let delay = settings.join_delay;
    let sticky_count = mode.assignment == Assignment::Sticky && mode.balance == Balance::Count;
    if !delay.is_zero() && sticky_count {
        notes.push(format!(
            "-join-delay {}ms: a member that becomes live without units first waits that long (meanwhile it only takes the units of members that leave); this is the table once no member waits",
            delay.as_millis()
        ));
    }
    if !fleet.transit.is_empty() {
        notes.push(format!(
            "{} units are in transit: each counts as its destination's, as the holder counts it",
            fleet.transit.len()
        ));
    }
    if fleet.controls.paused() {
        notes.push("voluntary moves are paused (distributor pause): members keep what they hold; only units without a live owner are placed".into());
    }
    if o.lease_pttl.is_none() {
        notes.push("no replica holds the lease now: planned from the last holder's table".into());
    }
    if !p.converged {
        notes.push(format!(
            "the solve did not settle within {} batches: the table shown is the last one",
            whatif::MAX_BATCHES
        ));
    }
    let units_changed = p.changes.len();
    let members_total = p.members.len();
    let (shown, members_shown) = if all_units {
        (units_changed, members_total)
    } else {
        (CHANGES_SHOWN, MEMBERS_SHOWN)
    };
    Ok(PlanReport {
        table: table_key.to_string(),
        generation: o
            .meta
            .get("generation")
            .and_then(|g| g.parse().ok())
            .unwrap_or(0),
        assignment: mode.balance.describe(mode.assignment.name()),
        assignment_from,
        max_moves_per_cycle: mode.max_moves,
        changes,
        moves: p.moves,
        units_changed,
        units: p.changes.into_iter().take(shown).collect(),
        members_total,
        members: p.members.into_iter().take(members_shown).collect(),
        groups: p.groups,
        batches: p.batches,
        converged: p.converged,
        notes,
        rows: all_units.then(|| p.table.rows().clone()),
    })
}

#[cfg(test)]
mod tests;
