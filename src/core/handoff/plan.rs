//! The planner: the next granted table and transit set from the table as
//! granted now, the one the solver wants, the units in transit and what the
//! holder knows of each member (see the module documentation of
//! `core::handoff`). Pure, and proportional to the rows that change plus the
//! units in transit.

use std::collections::{BTreeMap, HashMap, HashSet};

use std::time::Instant;

use super::{Moved, Origin, Plan, PlanInput, Transit, Transits};
use crate::core::held::{Change, Held};
use crate::core::inputs::GroupMembers;
use crate::core::row::split_row;
use crate::core::table::MatchingTable;

/// Plans the next granted table (see the module documentation).
pub fn plan(input: &PlanInput<'_>) -> Plan {
    let mut out = Plan::default();
    let mut transit = input.transit.clone();
    let listed = |u: &str| input.units.binary_search_by(|x| x.as_str().cmp(u)).is_ok();
    let group_of: HashMap<&str, &str> = input
        .groups
        .iter()
        .flat_map(|g| g.members.iter().map(move |m| (m.as_str(), g.name)))
        .collect();
    // Units each member loses before planning (repairs, and rows of members
    // no group lists any more).
    let mut stripped: HashMap<&str, HashSet<&str>> = HashMap::new();

    // Rows of members no group lists any more: every unit is revoked, in the
    // group the member was last seen in. Unknown (a new holder, several
    // groups): in every group where no row has the unit, so that no group
    // grants it while that member may still work on it.
    let orphans: Vec<(&str, &str)> = input
        .granted
        .rows()
        .iter()
        .filter(|(m, _)| !group_of.contains_key(m.as_str()))
        .map(|(m, r)| (m.as_str(), r.as_str()))
        .collect();
    if !orphans.is_empty() {
        let mut held: Option<HashMap<&str, HashMap<&str, Vec<&str>>>> = None;
        for (member, row) in orphans {
            let known = (input.former_group)(member)
                .filter(|g| input.groups.iter().any(|x| x.name == g))
                .or_else(|| (input.groups.len() == 1).then(|| input.groups[0].name.to_string()));
            for u in decode(row) {
                out.revoked += 1;
                if let Some(g) = &known {
                    revoke_into(&mut transit, g, u, member, input);
                    continue;
                }
                // Which group it held the unit in is unknown: it is treated
                // as a second holder in every group, and the unit is revoked
                // from the group's holder too (a repair, as for a unit in two
                // rows), so that no group has it in a row and in transit.
                let held = held.get_or_insert_with(|| held_by_group(input, &group_of));
                for g in input.groups {
                    revoke_into(&mut transit, g.name, u, member, input);
                    for &m in held
                        .get(g.name)
                        .and_then(|h| h.get(u))
                        .into_iter()
                        .flatten()
                    {
                        out.revoked += 1;
                        stripped.entry(m).or_default().insert(u);
                        revoke_into(&mut transit, g.name, u, m, input);
                    }
                }
            }
        }
    }

    // Claims: units members may still work on (they read them from a table
    // Redis held, or may have held) that the stored table took from them
    // without a revocation. The repairs below then revoke them from
    // whoever the stored table gives them to.
    if input.verify {
        claim(input, &group_of, &mut transit, &mut out);
        unanswered(input, &group_of, &mut transit, &mut out);
    }

    // Repairs: a unit in two rows of a group, or in a row and in transit.
    if input.verify {
        for g in input.groups {
            for (u, ms) in conflicts(g, input, transit.get(g.name)) {
                for m in ms {
                    out.revoked += 1;
                    stripped.entry(m).or_default().insert(u);
                    revoke_into(&mut transit, g.name, u, m, input);
                }
            }
        }
    }

    let mut rows: BTreeMap<String, String> = BTreeMap::new();
    for g in input.groups {
        let group_transit = transit.remove(g.name).unwrap_or_default();
        let group_transit = plan_group(
            g,
            group_transit,
            &stripped,
            &listed,
            input,
            &mut out,
            &mut rows,
        );
        if !group_transit.is_empty() {
            out.transit.insert(g.name.to_string(), group_transit);
        }
    }
    // Transit of groups that no longer exist: nothing can grant those units
    // in that group any more; they are forgotten once released.
    for (group, units) in transit {
        let mut kept = BTreeMap::new();
        for (u, t) in units {
            if let Err(at) = input.settings.released(&t, None, input.facts, input.now) {
                out.next_release = Some(out.next_release.map_or(at, |n| n.min(at)));
                kept.insert(u, t);
            } else {
                out.dropped += 1;
            }
        }
        if !kept.is_empty() {
            out.transit.insert(group, kept);
        }
    }
    out.granted = MatchingTable::from_rows(rows);
    out
}

/// The units of group `g` in two rows or more, or in a row and in transit,
/// with every member whose row has them (in the group's order). One pass
/// over the rows, allocating only for conflicts (a table written by a
/// holder has none).
fn conflicts<'a>(
    g: &GroupMembers<'a>,
    input: &PlanInput<'a>,
    transit: Option<&BTreeMap<String, Transit>>,
) -> Vec<(&'a str, Vec<&'a str>)> {
    let granted = input.granted;
    let mut first: HashMap<&str, &str> = HashMap::with_capacity(input.units.len());
    let mut shared: HashMap<&str, Vec<&str>> = HashMap::new();
    for m in g.members {
        let Some(r) = granted.rows().get(m) else {
            continue;
        };
        for u in decode(r) {
            match first.entry(u) {
                std::collections::hash_map::Entry::Vacant(e) => {
                    e.insert(m);
                }
                std::collections::hash_map::Entry::Occupied(e) => {
                    shared.entry(u).or_insert_with(|| vec![*e.get()]).push(m);
                }
            }
        }
    }
    for u in transit.into_iter().flat_map(BTreeMap::keys) {
        if let Some((u, &m)) = first.get_key_value(u.as_str()) {
            shared.entry(u).or_insert_with(|| vec![m]);
        }
    }
    shared.into_iter().collect()
}

/// See [`PlanInput::held_before`]: each unit of a row of a held table that
/// the member's stored row lacks is revoked from that member, in the
/// member's group (the group it was last seen in, or, unknown, every group),
/// unless a revocation from it numbered after that table covers it.
/// Proportional to the held rows that differ from the stored ones.
fn claim(
    input: &PlanInput<'_>,
    group_of: &HashMap<&str, &str>,
    transit: &mut Transits,
    out: &mut Plan,
) {
    let mut claimed: HashSet<(&str, &str)> = HashSet::new();
    let stated = input.recovery.map(|r| &r.stated);
    for held in input.held_before.iter().chain(stated) {
        for (member, row) in held.table.rows() {
            let stored = input.granted.rows().get(member);
            if stored == Some(row) {
                continue;
            }
            let still: HashSet<&str> = stored.map(|r| decode(r).collect()).unwrap_or_default();
            let groups: Vec<String> = match group_of.get(member.as_str()) {
                Some(g) => vec![g.to_string()],
                None => match (input.former_group)(member)
                    .filter(|g| input.groups.iter().any(|x| x.name == g))
                {
                    Some(g) => vec![g],
                    None => input.groups.iter().map(|g| g.name.to_string()).collect(),
                },
            };
            for u in decode(row).filter(|u| !still.contains(u)) {
                for g in &groups {
                    let covered = transit
                        .get(g.as_str())
                        .and_then(|t| t.get(u))
                        .is_some_and(|t| {
                            t.from.contains_key(member.as_str()) && held.revoked_since(t.revoked_at)
                        });
                    if !covered {
                        if claimed.insert((member.as_str(), u)) {
                            out.claimed += 1;
                            out.revoked += 1;
                        }
                        revoke_into(transit, g, u, member, input);
                    }
                }
            }
        }
    }
}

/// See [`RecoveryClaims`](super::RecoveryClaims): every unit of a group
/// (listed, in a row of its members, or in its transit) that no statement
/// names goes into transit from each member that stated nothing, but for
/// the one whose row alone has it when it is the only such member. The
/// repairs then revoke it from the rows that have it. Proportional to the
/// table, once per recovery.
fn unanswered(
    input: &PlanInput<'_>,
    group_of: &HashMap<&str, &str>,
    transit: &mut Transits,
    out: &mut Plan,
) {
    let Some(r) = input.recovery else {
        return;
    };
    if r.unanswered.is_empty() {
        return;
    }
    let stated: HashSet<&str> = r
        .stated
        .table
        .rows()
        .values()
        .flat_map(|row| decode(row))
        .collect();
    for g in input.groups {
        // The members that stated nothing and may hold units of this group:
        // listed in it, else last seen in it, else (unknown) of every group.
        let silent: Vec<&str> = r
            .unanswered
            .iter()
            .map(String::as_str)
            .filter(|m| match group_of.get(m) {
                Some(x) => *x == g.name,
                None => (input.former_group)(m).is_none_or(|f| f == g.name),
            })
            .collect();
        if silent.is_empty() {
            continue;
        }
        // Every unit of the group, with the rows that have it.
        let mut units: HashMap<&str, Vec<&str>> = HashMap::new();
        for u in input.units {
            units.entry(u.as_str()).or_default();
        }
        for m in g.members {
            if let Some(row) = input.granted.rows().get(m) {
                for u in decode(row) {
                    units.entry(u).or_default().push(m);
                }
            }
        }
        let in_transit: Vec<String> = transit
            .get(g.name)
            .map(|t| t.keys().cloned().collect())
            .unwrap_or_default();
        for u in &in_transit {
            units.entry(u.as_str()).or_default();
        }
        for (u, owners) in units {
            if stated.contains(u) {
                continue;
            }
            let keeper = match owners.as_slice() {
                [only] if silent.len() == 1 && silent[0] == *only => Some(*only),
                _ => None,
            };
            for &m in silent.iter().filter(|m| Some(**m) != keeper) {
                out.revoked += 1;
                revoke_into(transit, g.name, u, m, input);
            }
        }
    }
}

fn decode(row: &str) -> impl Iterator<Item = &str> {
    split_row(row).filter(|u| !u.is_empty())
}

/// Per group, which members' rows have each unit (a full pass over the
/// table: only for the rare row of an unlisted member of unknown group).
fn held_by_group<'a>(
    input: &PlanInput<'a>,
    group_of: &HashMap<&str, &'a str>,
) -> HashMap<&'a str, HashMap<&'a str, Vec<&'a str>>> {
    let mut held: HashMap<&str, HashMap<&str, Vec<&str>>> = HashMap::new();
    for (m, r) in input.granted.rows() {
        if let Some(g) = group_of.get(m.as_str()) {
            let g = held.entry(g).or_default();
            for u in decode(r) {
                g.entry(u).or_default().push(m);
            }
        }
    }
    held
}

/// Adds `member` to the origins of `unit`'s transit in `group`.
fn revoke_into(
    transit: &mut Transits,
    group: &str,
    unit: &str,
    member: &str,
    input: &PlanInput<'_>,
) {
    let t = transit
        .entry(group.to_string())
        .or_default()
        .entry(unit.to_string())
        .or_insert_with(|| fresh(input));
    add_origin(t, member, input);
}

/// A transit entry for a unit this plan revokes.
fn fresh(input: &PlanInput<'_>) -> Transit {
    Transit {
        from: BTreeMap::new(),
        to: None,
        revoked_at: 0,
        since_ms: input.now_ms,
        waiting_since: input.now,
    }
}

/// Revokes `t`'s unit from `member` by this plan's write: its wait (fixed
/// now, from what the holder knows of it) starts once that write is done,
/// and so does every other origin's wait again. A member that is an origin
/// already holds the unit again (it is in its row, or in a table it may
/// work from, after that revocation): the revocation is made anew, its
/// wait only ever lengthened.
fn add_origin(t: &mut Transit, member: &str, input: &PlanInput<'_>) {
    // An entry of an older version stored no waits: its origins' are fixed
    // now, from the facts of now, so that the entry is written whole.
    for (m, o) in t.from.iter_mut().filter(|(_, o)| o.wait.is_none()) {
        o.wait = Some(input.settings.wait(&(input.facts)(m)));
    }
    let facts = (input.facts)(member);
    let origin = match t.from.get(member) {
        Some(known) => Origin {
            // Revoked anew: numbered by this write.
            numbered: 0,
            ..input.settings.effective(known, &facts)
        },
        None => input.settings.origin(&facts),
    };
    // The other origins' revocations keep the generation that numbered
    // them: an acknowledgement of it still counts.
    t.pin_numbering();
    t.from.insert(member.to_string(), origin);
    t.revoked_at = 0;
    t.waiting_since = input.now;
}

fn note_release(out: &mut Plan, at: Instant) {
    out.next_release = Some(out.next_release.map_or(at, |n| n.min(at)));
}

/// Plans one group: adds its rows to `rows`, returns its transit.
fn plan_group(
    g: &GroupMembers<'_>,
    mut transit: BTreeMap<String, Transit>,
    stripped: &HashMap<&str, HashSet<&str>>,
    listed: &dyn Fn(&str) -> bool,
    input: &PlanInput<'_>,
    out: &mut Plan,
    rows: &mut BTreeMap<String, String>,
) -> BTreeMap<String, Transit> {
    let granted_row = |m: &str| input.granted.rows().get(m).map(String::as_str);
    let desired_row = |m: &str| input.desired.rows().get(m).map(String::as_str);
    // Members whose row must change: its granted row differs from the desired
    // one (or lost units to a repair, or is missing for a live member). The
    // others keep their row as it is, untouched: the work is proportional to
    // what changes.
    let changed: Vec<&str> = g
        .members
        .iter()
        .map(String::as_str)
        .filter(|m| {
            granted_row(m) != desired_row(m)
                || stripped.contains_key(m)
                || (granted_row(m).is_none() && (input.rows_for)(m))
        })
        .collect();
    // Units leaving a member (granted, not desired there) and units coming
    // to one (desired, not granted there).
    let mut leaving: HashMap<&str, Vec<&str>> = HashMap::new();
    let mut incoming: HashMap<&str, &str> = HashMap::new();
    // What each changed member holds now (a unit of its desired row that it
    // holds is kept).
    let mut held: HashMap<&str, Held<'_>> = HashMap::new();
    for &m in &changed {
        let gone = stripped.get(m);
        let have: Vec<&str> = granted_row(m)
            .map(|r| {
                decode(r)
                    .filter(|u| !gone.is_some_and(|x| x.contains(u)))
                    .collect()
            })
            .unwrap_or_default();
        let want: Vec<&str> = desired_row(m)
            .map(|r| decode(r).collect())
            .unwrap_or_default();
        let h = Held::of(have, &want);
        h.diff(&want, |u, change| match change {
            Change::Leaving => leaving.entry(u).or_default().push(m),
            Change::Incoming => {
                incoming.insert(u, m);
            }
        });
        held.insert(m, h);
    }

    // Revocations.
    for (&u, from) in &leaving {
        let t = transit.entry(u.to_string()).or_insert_with(|| fresh(input));
        for &m in from {
            out.revoked += 1;
            add_origin(t, m, input);
        }
    }

    // Grants: a unit no member may still work on goes to its desired owner.
    let mut granted_now: HashMap<&str, HashSet<&str>> = HashMap::new();
    for (&u, &to) in &incoming {
        let Some(t) = transit.get_mut(u) else {
            out.placed += 1;
            granted_now.entry(to).or_default().insert(u);
            continue;
        };
        // (Revoked by this very plan, it is released at once only with a
        // zero wait: one write then. A member that is gone is confirmed
        // gone after the revoking write: see the module documentation.)
        match input.settings.released(t, Some(to), input.facts, input.now) {
            Ok(()) => {
                let t = transit.remove(u).expect("looked up above");
                if !(t.from.len() == 1 && t.from.contains_key(to)) {
                    out.moved.push(Moved {
                        group: g.name.to_string(),
                        unit: u.to_string(),
                        to: to.to_string(),
                        since_ms: t.since_ms,
                        revoked_at: t.revoked_at,
                    });
                }
                granted_now.entry(to).or_default().insert(u);
            }
            Err(at) => {
                t.to = Some(to.to_string());
                note_release(out, at);
            }
        }
    }

    // Units in transit that no member of this group wants now: removed from
    // the list, or no eligible member. Removed ones are forgotten once
    // released; listed ones wait (released or not) for a member.
    transit.retain(|u, t| {
        if incoming.contains_key(u.as_str()) {
            return true;
        }
        t.to = None;
        match input.settings.released(t, None, input.facts, input.now) {
            Ok(()) if !listed(u) && !leaving.contains_key(u.as_str()) => {
                out.dropped += 1;
                false
            }
            Ok(()) => true,
            Err(at) => {
                note_release(out, at);
                true
            }
        }
    });

    // Rows: unchanged members keep theirs; changed ones get the desired row
    // filtered to what they hold now, in the desired order, so that a row
    // whose moves are all done is exactly the desired one.
    for m in g.members.iter().map(String::as_str) {
        let row = match held.get(m) {
            Some(k) => {
                let now = granted_now.get(m);
                let want: Vec<&str> = desired_row(m)
                    .map(|r| decode(r).collect())
                    .unwrap_or_default();
                let units = k.kept(&want, |u| now.is_some_and(|n| n.contains(u)));
                if units.is_empty() && !(input.rows_for)(m) {
                    continue;
                }
                units.join(",")
            }
            None => match granted_row(m) {
                Some(r) => r.to_string(),
                None => continue,
            },
        };
        rows.insert(m.to_string(), row);
    }
    transit
}
