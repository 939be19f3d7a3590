//! Safe handoff: break before make. When a unit's owner changes, the holder
//! first revokes it (no row of its group has it), waits until the old owner
//! cannot be working on it any more, and only then grants it to the new
//! owner. So a unit never has two owners in a group, also while it moves.
//!
//! Pure. [`plan`] takes the table as granted now, the table the solver wants,
//! the units in transit and what the holder knows of each member, and returns
//! the next granted table and transit set:
//!
//! ```text
//!   granted (A has u) ──revoke──▶ in transit (from A, to B) ──released──▶ granted (B has u)
//!                                  no row has u                  │
//!                                                                ├ A acknowledged a generation ≥ the revocation's
//!                                                                ├ a connection to A, opened after the revoking
//!                                                                │ write was done, was refused (nothing listens)
//!                                                                └ A's wait passed since the revoking write
//!                                                                  was done (A fenced itself by then)
//! ```
//!
//! A member that speaks the protocol (it has an entry in `{T}:members`)
//! acknowledges each table generation it applied, after it stopped every unit
//! the generation took away, and fences itself: its hold on a unit ends its
//! deadline after the last read that showed the unit (or earlier, when pings
//! stop). A member that does not (an old worker that only `HGET`s its row)
//! gets the configured handoff delay instead: it must stop a unit within that
//! delay of the write that took the unit out of its row.
//!
//! Why the revoking write is the instant to count from:
//!
//! ```text
//!   member's hold on u ends ≤ last read showing u + deadline     (its clock)
//!   last read showing u     <  the revoking write                (the read was served before it)
//!   the revoking write      ≤  waiting_since                     (the holder saw it done)
//!   ⇒ hold ends < waiting_since + deadline × (1 + drift) + margin = release
//! ```
//!
//! The last ping is no such bound for the holder: a member that received a
//! ping whose answer was lost (or came after the ping timeout) counts from
//! that ping, and the holder cannot know when it arrived.
//!
//! Why a refusal counts only when the connection was opened after the
//! revoking write: a refusal says that nothing listened *then*, not that
//! nothing will. A worker restarted on the same address can read the old
//! row between the refusal and the write:
//!
//! ```text
//!   holder   probe A: refused ─────────── write g+1: A's units to B ──▶
//!   old A    ✝ (killed)
//!   new A              start, listen, read row (g: A has u), work u ─────▶ overlap with B
//! ```
//!
//! A member serves pings before its first read and for as long as it holds
//! a unit (README, protocol). So a refusal on a connection opened after the
//! revoking write means that no process at that address read a row showing
//! the unit and still lives: one that read before the write would answer,
//! and one that reads after it finds the unit gone.
//!
//! Guarantees, checked by the tests below against simulated members that
//! follow the protocol (or the old one) with random delays, pauses, deaths,
//! drains, holder failovers and unit churn:
//! - no unit is ever in two rows of a group, and a unit in transit is in no
//!   row of its group;
//! - a unit leaves transit for a new owner only once every member it was
//!   revoked from is released;
//! - a unit whose desired owner is the only member it was revoked from goes
//!   back at once (nobody else had it meanwhile);
//! - units removed from the list are revoked the same way, so that one that
//!   comes back is never granted while its last owner may still work on it;
//! - the work done is proportional to the rows that differ from the desired
//!   ones plus the units in transit, not to the table.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::core::inputs::GroupMembers;
use crate::core::table::{MatchingTable, SEPARATOR};

/// A unit on its way from one owner to another (or to none).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transit {
    /// The members it was revoked from: one, or several if a hand-edited
    /// table had given it to several.
    pub from: BTreeSet<String>,
    /// Where it is to go; `None` while no eligible member wants it (or it was
    /// removed from the list).
    pub to: Option<String>,
    /// The table generation that revoked it; an acknowledgement of this
    /// generation or a later one releases it. `0` until the revocation is
    /// written (the write fills it in).
    pub revoked_at: u64,
    /// Unix ms of the revocation, for operators (shared between replicas).
    pub since_ms: u64,
    /// When this holder knew the revocation to be written (local,
    /// monotonic): after the write returned, or when it inherited the entry.
    pub waiting_since: Instant,
}

impl Transit {
    /// The stored value: `revoked_at since_ms to from[,from…]` (`to` is `-`
    /// for none).
    pub fn encode(&self) -> String {
        let from: Vec<&str> = self.from.iter().map(String::as_str).collect();
        format!(
            "{} {} {} {}",
            self.revoked_at,
            self.since_ms,
            self.to.as_deref().unwrap_or("-"),
            from.join(",")
        )
    }

    /// Parses a stored value; a new holder waits from `now` (it cannot know
    /// when the revocation was written in its own clock).
    pub fn decode(value: &str, now: Instant) -> Option<Transit> {
        let mut it = value.split(' ');
        let revoked_at = parse_u53(it.next()?)?;
        let since_ms = parse_u53(it.next()?)?;
        let to = match it.next()? {
            "" => return None,
            "-" => None,
            m => Some(m.to_string()),
        };
        let from: BTreeSet<String> = it.next()?.split(SEPARATOR).map(str::to_string).collect();
        if it.next().is_some() || from.is_empty() || from.iter().any(String::is_empty) {
            return None;
        }
        Some(Transit {
            from,
            to,
            revoked_at,
            since_ms,
            waiting_since: now,
        })
    }
}

/// The field of a transit entry: `<unit>,<group>` (a unit never contains
/// `,`, so the first one separates them).
pub fn transit_field(group: &str, unit: &str) -> String {
    format!("{unit}{SEPARATOR}{group}")
}

/// Splits a transit field into `(group, unit)`.
pub fn parse_transit_field(field: &str) -> Option<(&str, &str)> {
    let (unit, group) = field.split_once(SEPARATOR)?;
    (!unit.is_empty() && !group.is_empty()).then_some((group, unit))
}

fn parse_u53(s: &str) -> Option<u64> {
    if s.is_empty() || s.len() > 16 || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok().filter(|n| *n < 1 << 53)
}

/// Units in transit, by group, then by unit.
pub type Transits = BTreeMap<String, BTreeMap<String, Transit>>;

/// What the holder knows of one member's protocol state.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct MemberFacts {
    /// A ping on a connection opened at this instant (or later) was
    /// refused, and the member has not answered since: nothing listened at
    /// its address then. It releases units whose revoking write was done
    /// before that instant (see the module documentation).
    pub refused_since: Option<Instant>,
    /// From `{T}:members`, if it speaks the protocol.
    pub report: Option<MemberReport>,
}

/// A member's own entry in `{T}:members`:
/// `<applied generation> <draining 0|1> <deadline ms> <weight> [<redis client id>]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemberReport {
    /// The highest table generation it applied: every unit that generation
    /// took from it is stopped.
    pub applied: u64,
    /// It is shutting down: move its units away, give it none.
    pub draining: bool,
    /// It fences itself when it could not read the table, or was not pinged,
    /// for this long.
    pub deadline: Duration,
    /// Its capacity weight (1 by default).
    pub weight: u32,
    /// The Redis client id (`CLIENT ID`) of the connection it reads its row
    /// on, if it tells: a refusal of its address then releases its units
    /// only once Redis has no such connection either.
    pub client: Option<u64>,
}

/// The longest deadline a member may declare: a larger one is capped, so a
/// hostile entry cannot pin a unit in transit for ever.
pub const MAX_DEADLINE: Duration = Duration::from_secs(300);

/// The largest weight a member may declare (a larger one is capped).
pub const MAX_WEIGHT: u32 = 1000;

impl MemberReport {
    pub fn encode(&self) -> String {
        let mut out = format!(
            "{} {} {} {}",
            self.applied,
            u8::from(self.draining),
            self.deadline.as_millis(),
            self.weight
        );
        if let Some(c) = self.client {
            out.push_str(&format!(" {c}"));
        }
        out
    }

    /// Parses an entry; `None` for anything malformed (the holder then waits
    /// for such a member as long as any member may make it wait, and reports
    /// it). A fifth field that is not a client id counts as none; fields
    /// after the fifth are ignored, for later versions.
    pub fn decode(s: &str) -> Option<MemberReport> {
        let mut it = s.split(' ');
        let applied = parse_u53(it.next()?)?;
        let draining = match it.next()? {
            "0" => false,
            "1" => true,
            _ => return None,
        };
        let deadline_ms = parse_u53(it.next()?)?;
        let weight = match it.next() {
            None => 1,
            Some(w) => parse_u53(w)?,
        };
        if weight == 0 || deadline_ms == 0 {
            return None;
        }
        let client = it.next().and_then(parse_u53);
        Some(MemberReport {
            applied,
            draining,
            deadline: Duration::from_millis(deadline_ms).min(MAX_DEADLINE),
            weight: weight.min(u64::from(MAX_WEIGHT)) as u32,
            client,
        })
    }
}

/// Parses an operator's weight override (a value of `{T}:weights`): a
/// decimal integer from 1 to [`MAX_WEIGHT`], digits only. `None` for anything
/// else (garbage, 0, over the maximum): the holder skips such an entry and
/// uses the member's own report. Unlike a report's weight, an override over
/// the maximum is not capped: the operator's command refuses it, so such an
/// entry was written by something else.
pub fn decode_weight_override(s: &str) -> Option<u32> {
    if s.is_empty() || s.len() > 4 || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok().filter(|w| (1..=MAX_WEIGHT).contains(w))
}

/// Added to a member's deadline for clock-rate drift between the member and
/// the holder: `deadline × (1 + DRIFT_PERMILLE / 1000) + MARGIN`.
pub const DRIFT_PERMILLE: u32 = 50;
pub const MARGIN: Duration = Duration::from_millis(100);

/// The holder's handoff settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Settings {
    /// How long a member that does not speak the protocol gets to stop a unit
    /// after the write that took it out of its row.
    pub handoff_delay: Duration,
}

impl Settings {
    /// How long after the write that revoked a unit a member can still be
    /// working on it.
    pub fn wait(&self, m: &MemberFacts) -> Duration {
        match &m.report {
            Some(r) => r.deadline + r.deadline * DRIFT_PERMILLE / 1000 + MARGIN,
            None => self.handoff_delay,
        }
    }

    /// Whether `t` is released by every member it was revoked from except
    /// `to` (a unit going back to one of them); else when it will be by time.
    pub fn released(
        &self,
        t: &Transit,
        to: Option<&str>,
        facts: &dyn Fn(&str) -> MemberFacts,
        now: Instant,
    ) -> Result<(), Instant> {
        let mut at: Option<Instant> = None;
        for from in t.from.iter().filter(|f| Some(f.as_str()) != to) {
            let f = facts(from);
            if f.refused_since.is_some_and(|at| at > t.waiting_since) {
                continue;
            }
            if let Some(r) = &f.report
                && t.revoked_at != 0
                && r.applied >= t.revoked_at
            {
                continue;
            }
            let until = t.waiting_since + self.wait(&f);
            if now < until {
                at = Some(at.map_or(until, |a| a.max(until)));
            }
        }
        match at {
            Some(at) => Err(at),
            None => Ok(()),
        }
    }
}

/// Where a plan starts from when the stored table is not the one this
/// holder wrote last.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StartingPoint {
    /// What Redis holds (a new holding, a write of unknown outcome, an edit).
    Stored,
    /// What this holder wrote last: the stored table is gone (Redis lost its
    /// data, or a `DEL`), and members may still work on what it granted.
    LastWritten,
}

/// Picks the granted table to plan from (verify it: see [`PlanInput::verify`]).
pub fn starting_point(
    last_written: Option<&Arc<MatchingTable>>,
    stored: MatchingTable,
) -> (StartingPoint, Arc<MatchingTable>) {
    match last_written {
        Some(last) if stored.is_empty() && !last.is_empty() => {
            (StartingPoint::LastWritten, Arc::clone(last))
        }
        _ => (StartingPoint::Stored, Arc::new(stored)),
    }
}

/// A unit granted to its next owner after its revocation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Moved {
    pub group: String,
    pub unit: String,
    pub to: String,
    /// Unix ms of its revocation.
    pub since_ms: u64,
    /// The generation of its revocation (0: revoked and released in this
    /// very plan, with a zero wait).
    pub revoked_at: u64,
}

/// What one round of planning gives.
#[derive(Debug, Clone, Default)]
pub struct Plan {
    /// The next granted table.
    pub granted: MatchingTable,
    pub transit: Transits,
    /// Units revoked by this plan.
    pub revoked: usize,
    /// Units granted by this plan after a move, for the handoff duration
    /// and the trace.
    pub moved: Vec<Moved>,
    /// Units granted for the first time (new units, or units of no owner).
    pub placed: usize,
    /// Units removed from the list whose transit ended.
    pub dropped: usize,
    /// The earliest instant at which a transit can be released by time alone,
    /// if any: plan again then.
    pub next_release: Option<Instant>,
}

impl Plan {
    pub fn transit_len(&self) -> usize {
        self.transit.values().map(BTreeMap::len).sum()
    }
}

/// Everything [`plan`] reads.
pub struct PlanInput<'a> {
    /// The rows as written now (every group).
    pub granted: &'a MatchingTable,
    /// Whether `granted` was read from Redis rather than written by this
    /// holder's last plan (a new holding, or a table edited by hand): then it
    /// may break the invariants (a unit in two rows, or in a row and in
    /// transit), and the plan repairs that first, by revoking from every
    /// member involved.
    pub verify: bool,
    /// The rows the solver gives (eligible members only: live, or suspects,
    /// and not draining).
    pub desired: &'a MatchingTable,
    pub transit: &'a Transits,
    pub groups: &'a [GroupMembers<'a>],
    /// The group each member was last seen in, for rows of members no group
    /// lists any more.
    pub former_group: &'a dyn Fn(&str) -> Option<String>,
    /// The units listed now, sorted.
    pub units: &'a [String],
    /// What the holder knows of a member; an unknown member counts as not
    /// gone, never answered, not speaking the protocol.
    pub facts: &'a dyn Fn(&str) -> MemberFacts,
    /// Members that get a row even if empty (live ones, suspects).
    pub rows_for: &'a dyn Fn(&str) -> bool,
    pub settings: Settings,
    pub now: Instant,
    pub now_ms: u64,
}

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

    // Repairs: a unit in two rows of a group, or in a row and in transit.
    if input.verify {
        for g in input.groups {
            let mut owners: HashMap<&str, Vec<&str>> = HashMap::new();
            for m in g.members {
                if let Some(r) = input.granted.rows().get(m) {
                    for u in decode(r) {
                        owners.entry(u).or_default().push(m);
                    }
                }
            }
            let conflicts: Vec<(&str, Vec<&str>)> = owners
                .into_iter()
                .filter(|(u, ms)| {
                    ms.len() > 1 || transit.get(g.name).is_some_and(|t| t.contains_key(*u))
                })
                .collect();
            for (u, ms) in conflicts {
                {
                    for m in ms {
                        out.revoked += 1;
                        stripped.entry(m).or_default().insert(u);
                        revoke_into(&mut transit, g.name, u, m, input);
                    }
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

fn decode(row: &str) -> impl Iterator<Item = &str> {
    row.split(SEPARATOR).filter(|u| !u.is_empty())
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
        .or_insert_with(|| Transit {
            from: BTreeSet::new(),
            to: None,
            revoked_at: 0,
            since_ms: input.now_ms,
            waiting_since: input.now,
        });
    if t.from.insert(member.to_string()) {
        // A new origin: this plan's write revokes it, and the wait starts
        // once that write is done.
        t.revoked_at = 0;
        t.waiting_since = input.now;
    }
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
    let mut kept: HashMap<&str, HashSet<&str>> = HashMap::new();
    for &m in &changed {
        let gone = stripped.get(m);
        let have: HashSet<&str> = granted_row(m)
            .map(|r| {
                decode(r)
                    .filter(|u| !gone.is_some_and(|x| x.contains(u)))
                    .collect()
            })
            .unwrap_or_default();
        let want: HashSet<&str> = desired_row(m)
            .map(|r| decode(r).collect())
            .unwrap_or_default();
        for &u in have.difference(&want) {
            leaving.entry(u).or_default().push(m);
        }
        for &u in want.difference(&have) {
            incoming.insert(u, m);
        }
        kept.insert(m, have.intersection(&want).copied().collect());
    }

    // Revocations.
    for (&u, from) in &leaving {
        let t = transit.entry(u.to_string()).or_insert_with(|| Transit {
            from: BTreeSet::new(),
            to: None,
            revoked_at: 0,
            since_ms: input.now_ms,
            waiting_since: input.now,
        });
        for &m in from {
            out.revoked += 1;
            if t.from.insert(m.to_string()) {
                t.revoked_at = 0;
                t.waiting_since = input.now;
            }
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
                if !(t.from.len() == 1 && t.from.contains(to)) {
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
        let row = match kept.get(m) {
            Some(k) => {
                let now = granted_now.get(m);
                let units: Vec<&str> = desired_row(m)
                    .map(|r| {
                        decode(r)
                            .filter(|u| k.contains(u) || now.is_some_and(|n| n.contains(u)))
                            .collect()
                    })
                    .unwrap_or_default();
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

#[cfg(test)]
mod tests;
