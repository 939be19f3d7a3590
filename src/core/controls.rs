//! Operator controls (`{T}:controls`, written by `distributor members
//! cordon|uncordon|drain`, `workunits pin|unpin` and `pause|resume`): what
//! the solver must keep, and whom it must not give units.
//!
//! Pure: the hash's fields in, [`Controls`] out; a group's problem in, the
//! units fixed to a member and the smaller problem left to the solver out.
//! Guarantees:
//! - decoding never fails: an entry that does not parse is skipped and
//!   named (field and value, shortened), never half-applied;
//! - [`Controls::split`] depends only on the controls, the live members,
//!   the units and the current rows as sets: every replica computes the
//!   same;
//! - a control never takes a unit from a live member by itself except a
//!   pin (to the pinned member) and a drain (through the handoff, as a
//!   member's own drain); cordon and pause only keep and withhold.
//!
//! Precedence for one unit: a pin to a live member of the group wins; then
//! a cordoned member keeps what it holds, and while paused every live
//! member does; the rest goes to the solver, among the members that are
//! not cordoned.

use std::collections::{BTreeMap, HashMap};

use xxhash_rust::xxh3::Xxh3;

use crate::core::inputs::{check_member_addr, check_unit, excerpt};

/// The field of a member's control: `member:<addr>`.
pub const MEMBER_PREFIX: &str = "member:";
/// The field of a unit's pin: `pin:<unit>` → the member's address.
pub const PIN_PREFIX: &str = "pin:";
/// The field that pauses voluntary moves: `pause` → unix ms it was set.
pub const PAUSE_FIELD: &str = "pause";

/// What an operator did to one member.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum MemberControl {
    /// Gets no new units, keeps its own.
    Cordon,
    /// Its units move away through the handoff while it runs; it stays
    /// cordoned (no units) until uncordoned.
    Drain,
}

impl MemberControl {
    pub fn name(self) -> &'static str {
        match self {
            MemberControl::Cordon => "cordon",
            MemberControl::Drain => "drain",
        }
    }

    /// A member field's value: `<cordon|drain> <unix_ms>`.
    pub fn encode(self, now_ms: u64) -> String {
        format!("{} {now_ms}", self.name())
    }
}

/// The controls in force, as last read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Controls {
    /// Member → its control and since when (unix ms, when recorded).
    pub members: BTreeMap<String, (MemberControl, Option<u64>)>,
    /// Unit → the member it is pinned to.
    pub pins: BTreeMap<String, String>,
    /// Since when voluntary moves are paused (unix ms; `Some(0)` when the
    /// value does not say).
    pub paused_since: Option<u64>,
}

/// One field of `{T}:controls` that could not be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnreadableControl {
    pub field: String,
    pub value: String,
    pub why: &'static str,
}

impl std::fmt::Display for UnreadableControl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}={}: {}", self.field, self.value, self.why)
    }
}

/// The units of one group fixed to a member by the controls, and what is
/// left to the solver ([`Controls::split`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Split<'a> {
    /// (member, unit): kept or pinned.
    pub fixed: Vec<(&'a str, &'a str)>,
    /// Live members that may receive units (not cordoned), with weights.
    pub receivers: Vec<(&'a str, u32)>,
    /// Positions (in the units given) of the units left to the solver.
    pub free: Vec<usize>,
}

impl Controls {
    /// Decodes the hash; unusable fields are skipped and returned.
    pub fn decode(pairs: Vec<(String, String)>) -> (Controls, Vec<UnreadableControl>) {
        let mut c = Controls::default();
        let mut bad = Vec::new();
        let mut skip = |field: &str, value: &str, why| {
            bad.push(UnreadableControl {
                field: excerpt(field.as_bytes()),
                value: excerpt(value.as_bytes()),
                why,
            });
        };
        for (field, value) in pairs {
            if field == PAUSE_FIELD {
                match value.parse::<u64>() {
                    Ok(ms) => c.paused_since = Some(ms),
                    // Paused whatever the value says: the field is the switch.
                    Err(_) => c.paused_since = Some(0),
                }
            } else if let Some(addr) = field.strip_prefix(MEMBER_PREFIX) {
                if let Err(why) = check_member_addr(addr.as_bytes()) {
                    skip(&field, &value, why);
                    continue;
                }
                let mut words = value.split(' ');
                let control = match words.next() {
                    Some("cordon") => MemberControl::Cordon,
                    Some("drain") => MemberControl::Drain,
                    _ => {
                        skip(
                            &field,
                            &value,
                            "expected `cordon <unix_ms>` or `drain <unix_ms>`",
                        );
                        continue;
                    }
                };
                let since = words.next().and_then(|w| w.parse().ok());
                c.members.insert(addr.to_string(), (control, since));
            } else if let Some(unit) = field.strip_prefix(PIN_PREFIX) {
                if let Err(why) = check_unit(unit.as_bytes()) {
                    skip(&field, &value, why);
                    continue;
                }
                if let Err(why) = check_member_addr(value.as_bytes()) {
                    skip(&field, &value, why);
                    continue;
                }
                c.pins.insert(unit.to_string(), value);
            } else {
                skip(
                    &field,
                    &value,
                    "unknown field (expected `pause`, `member:<addr>` or `pin:<unit>`)",
                );
            }
        }
        (c, bad)
    }

    /// Whether no control is in force.
    pub fn is_empty(&self) -> bool {
        self.members.is_empty() && self.pins.is_empty() && self.paused_since.is_none()
    }

    /// Whether the solve needs the current table: something keeps units.
    pub fn keeps_units(&self) -> bool {
        self.paused_since.is_some()
            || self
                .members
                .values()
                .any(|(c, _)| *c == MemberControl::Cordon)
    }

    pub fn paused(&self) -> bool {
        self.paused_since.is_some()
    }

    /// Whether pins are all there is (no member control, no pause): the
    /// pinned units are set apart and the rest is a plain solve of its own.
    pub fn pins_only(&self) -> bool {
        self.members.is_empty() && !self.paused()
    }

    /// The pins that fix a unit: each pinned unit listed in `units`
    /// (sorted), with its position there, and the member `live` names for
    /// its pin (`None`: not live, and the pin counts for nothing). Found by
    /// binary search: a few pins, such as a quarantine's trials, cost
    /// nothing per unit.
    pub fn live_pins<'a, 'm>(
        &'a self,
        units: &'a [impl AsRef<str>],
        live: impl Fn(&str) -> Option<&'m str> + 'a,
    ) -> impl Iterator<Item = (usize, &'m str)> + 'a {
        self.pins.iter().filter_map(move |(unit, to)| {
            let i = units
                .binary_search_by(|u| u.as_ref().cmp(unit.as_str()))
                .ok()?;
            Some((i, live(to)?))
        })
    }

    /// Whether `member` gets no new units (cordoned or drained).
    pub fn cordoned(&self, member: &str) -> bool {
        self.members.contains_key(member)
    }

    /// Whether an operator drains `member`.
    pub fn drained(&self, member: &str) -> bool {
        matches!(self.members.get(member), Some((MemberControl::Drain, _)))
    }

    /// Members under `control`, sorted.
    pub fn with(&self, control: MemberControl) -> impl Iterator<Item = &str> {
        self.members
            .iter()
            .filter(move |(_, (c, _))| *c == control)
            .map(|(m, _)| m.as_str())
    }

    /// Identifies everything the solve reads of the controls.
    pub fn key(&self) -> u128 {
        let mut h = Xxh3::new();
        let mut put = |tag: u8, s: &str| {
            h.update(&[tag]);
            h.update(&(s.len() as u64).to_le_bytes());
            h.update(s.as_bytes());
        };
        for (m, (c, _)) in &self.members {
            put(1, m);
            put(2, c.name());
        }
        for (u, m) in &self.pins {
            put(3, u);
            put(4, m);
        }
        put(5, if self.paused() { "paused" } else { "" });
        h.digest128()
    }

    /// One group's problem under the controls: `live` members (with their
    /// weights), the listed `units` (sorted, distinct) and the `current`
    /// rows (member, units), in any order.
    pub fn split<'a, 'c, R>(
        &self,
        live: &[(&'a str, u32)],
        units: &[&'a str],
        current: impl IntoIterator<Item = (&'c str, R)>,
    ) -> Split<'a>
    where
        R: IntoIterator<Item = &'c str>,
    {
        let member: HashMap<&str, &'a str> = live.iter().map(|(m, _)| (*m, *m)).collect();
        // Only a pause or a cordon reads every held unit by name.
        debug_assert!(units.is_sorted(), "units must be sorted");
        let mut owner: Vec<Option<&'a str>> = vec![None; units.len()];
        for (i, m) in self.live_pins(units, |to| member.get(to).copied()) {
            owner[i] = Some(m);
        }
        if self.keeps_units() {
            let position: HashMap<&str, usize> =
                units.iter().enumerate().map(|(i, u)| (*u, i)).collect();
            // The lowest member wins a unit two rows hold (a hand edit), so
            // that the row order does not matter.
            for (m, held) in current {
                let Some(&m) = member.get(m) else { continue };
                if !(self.paused() || self.cordoned(m)) {
                    continue;
                }
                for u in held {
                    if let Some(&i) = position.get(u) {
                        let pinned = self
                            .pins
                            .get(units[i])
                            .is_some_and(|p| member.contains_key(p.as_str()));
                        if !pinned && owner[i].is_none_or(|o| m < o) {
                            owner[i] = Some(m);
                        }
                    }
                }
            }
        }
        let mut fixed = Vec::new();
        let mut free = Vec::new();
        for (i, o) in owner.iter().enumerate() {
            match o {
                Some(m) => fixed.push((*m, units[i])),
                None => free.push(i),
            }
        }
        Split {
            fixed,
            receivers: live
                .iter()
                .filter(|(m, _)| !self.cordoned(m))
                .copied()
                .collect(),
            free,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(p: &[(&str, &str)]) -> Vec<(String, String)> {
        p.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn decoding_keeps_what_parses_and_names_the_rest() {
        let (c, bad) = Controls::decode(pairs(&[
            ("member:10.0.0.1:7001", "cordon 1700000000000"),
            ("member:10.0.0.2:7001", "drain"),
            ("member:no-port", "cordon 1"),
            ("member:10.0.0.3:7001", "evict"),
            ("pin:u1", "10.0.0.2:7001"),
            ("pin:a,b", "10.0.0.2:7001"),
            ("pin:u2", "nowhere"),
            ("pause", "17"),
            ("colour", "blue"),
        ]));
        assert_eq!(
            c.members.get("10.0.0.1:7001"),
            Some(&(MemberControl::Cordon, Some(1_700_000_000_000)))
        );
        assert!(c.drained("10.0.0.2:7001") && c.cordoned("10.0.0.2:7001"));
        assert!(!c.drained("10.0.0.1:7001"));
        assert_eq!(c.pins.len(), 1);
        assert_eq!(c.paused_since, Some(17));
        let fields: Vec<&str> = bad.iter().map(|b| b.field.as_str()).collect();
        assert_eq!(
            fields,
            [
                "\"member:no-port\"",
                "\"member:10.0.0.3:7001\"",
                "\"pin:a,b\"",
                "\"pin:u2\"",
                "\"colour\""
            ]
        );
        assert!(bad[2].to_string().contains("','"), "{}", bad[2]);
        let (c, _) = Controls::decode(pairs(&[("pause", "soon")]));
        assert!(c.paused(), "the field is the switch");
    }

    fn split<'a>(
        c: &Controls,
        live: &[(&'a str, u32)],
        units: &[&'a str],
        current: &[(&'static str, &[&'static str])],
    ) -> (Vec<(&'a str, &'a str)>, Vec<&'a str>, Vec<&'a str>) {
        let s = c.split(
            live,
            units,
            current.iter().map(|(m, u)| (*m, u.iter().copied())),
        );
        (
            s.fixed,
            s.receivers.iter().map(|(m, _)| *m).collect(),
            s.free.iter().map(|&i| units[i]).collect(),
        )
    }

    #[test]
    fn a_cordoned_member_keeps_its_units_and_receives_none() {
        let (c, _) = Controls::decode(pairs(&[("member:a:1", "cordon 1")]));
        let live = [("a:1", 1), ("b:1", 1)];
        let (fixed, receivers, free) = split(
            &c,
            &live,
            &["u1", "u2", "u3"],
            &[("a:1", &["u1", "u9"]), ("b:1", &["u2"])],
        );
        assert_eq!(fixed, [("a:1", "u1")]);
        assert_eq!(receivers, ["b:1"]);
        assert_eq!(free, ["u2", "u3"]);
    }

    #[test]
    fn paused_every_live_member_keeps_its_units_and_the_rest_is_free() {
        let (c, _) = Controls::decode(pairs(&[("pause", "1")]));
        let live = [("a:1", 1), ("c:1", 1)];
        // b:1 failed: its u2 is free, as is the new u3.
        let (fixed, receivers, free) = split(
            &c,
            &live,
            &["u1", "u2", "u3"],
            &[("a:1", &["u1"]), ("b:1", &["u2"])],
        );
        assert_eq!(fixed, [("a:1", "u1")]);
        assert_eq!(receivers, ["a:1", "c:1"]);
        assert_eq!(free, ["u2", "u3"]);
    }

    #[test]
    fn a_pin_wins_while_its_member_is_live_and_is_ignored_otherwise() {
        let (c, _) = Controls::decode(pairs(&[
            ("pin:u1", "b:1"),
            ("pin:u2", "gone:1"),
            ("member:a:1", "cordon 1"),
            ("member:b:1", "cordon 1"),
        ]));
        let live = [("a:1", 1), ("b:1", 1), ("c:1", 1)];
        let (fixed, receivers, free) =
            split(&c, &live, &["u1", "u2", "u3"], &[("a:1", &["u1", "u2"])]);
        // u1 goes to b (pinned, even cordoned); a keeps u2 (its pin's
        // member is gone); u3 is free among the uncordoned.
        assert_eq!(fixed, [("b:1", "u1"), ("a:1", "u2")]);
        assert_eq!(receivers, ["c:1"]);
        assert_eq!(free, ["u3"]);
    }

    #[test]
    fn the_split_does_not_depend_on_row_order() {
        let (c, _) = Controls::decode(pairs(&[("pause", "1")]));
        let live = [("a:1", 1), ("b:1", 1)];
        let one = split(&c, &live, &["u1"], &[("a:1", &["u1"]), ("b:1", &["u1"])]);
        let two = split(&c, &live, &["u1"], &[("b:1", &["u1"]), ("a:1", &["u1"])]);
        assert_eq!(one, two);
        assert_eq!(one.0, [("a:1", "u1")]);
    }

    mod properties {
        use super::*;
        use crate::core::inputs::{Group, Inputs};
        use crate::core::sticky;
        use crate::core::table::{Assignment, MatchingTable, Solve, decode_row};
        use proptest::prelude::*;

        const MEMBERS: [&str; 5] = ["a:1", "b:1", "c:1", "d:1", "e:1"];

        /// Controls, current rows (member → units) and which members are
        /// live, over 5 members and 12 units.
        /// Controls, current rows (member index, unit indexes), whether
        /// each member is live, and sticky (else ring).
        type Case = (Controls, Vec<(usize, Vec<usize>)>, Vec<bool>, bool);

        fn case() -> impl Strategy<Value = Case> {
            let member_controls = prop::collection::vec(0..3u8, 5);
            let pins = prop::collection::vec(prop::option::of(0..5usize), 12);
            let rows =
                prop::collection::vec((0..5usize, prop::collection::vec(0..14usize, 0..6)), 0..6);
            let live = prop::collection::vec(prop::bool::weighted(0.8), 5);
            (
                member_controls,
                pins,
                any::<bool>(),
                rows,
                live,
                any::<bool>(),
            )
                .prop_map(|(mc, pins, paused, rows, live, sticky)| {
                    let mut c = Controls::default();
                    for (m, k) in MEMBERS.iter().zip(mc) {
                        match k {
                            1 => drop(
                                c.members
                                    .insert(m.to_string(), (MemberControl::Cordon, None)),
                            ),
                            2 => drop(
                                c.members
                                    .insert(m.to_string(), (MemberControl::Drain, None)),
                            ),
                            _ => {}
                        }
                    }
                    for (u, p) in pins.iter().enumerate() {
                        if let Some(m) = p {
                            c.pins.insert(format!("u{u:02}"), MEMBERS[*m].to_string());
                        }
                    }
                    c.paused_since = paused.then_some(1);
                    (c, rows, live, sticky)
                })
        }

        proptest! {
            /// The solve under controls: every unit has one owner among
            /// the members that may hold it; a pinned unit is on its live
            /// member; a cordoned member gains only pinned units, loses
            /// only units pinned elsewhere; paused, no live member loses a
            /// unit it alone held but to a pin; drained members get no row.
            #[test]
            fn the_solve_keeps_every_control(
                (c, rows, live, sticky) in case(),
                transit in prop::collection::vec((0..5usize, 0..12usize), 0..4),
            ) {
                let units: Vec<String> = (0..12).map(|u| format!("u{u:02}")).collect();
                let current = MatchingTable::from_rows(rows.iter().map(|(m, us)| {
                    let us: Vec<String> = us.iter().map(|u| format!("u{u:02}")).collect();
                    (MEMBERS[*m].to_string(), us.join(","))
                }));
                let inputs = Inputs {
                    groups: vec![Group {
                        name: "g".into(),
                        members: MEMBERS.iter().map(|m| m.to_string()).collect(),
                        malformed: vec![],
                    }],
                    units: units.clone().into(),
                    rejections: vec![],
                };
                // Who gets units: live and not drained (the daemon's rule).
                let eligible = |m: &str| {
                    MEMBERS.iter().position(|x| *x == m).is_some_and(|i| live[i]) && !c.drained(m)
                };
                let transit_units: Vec<String> =
                    transit.iter().map(|(_, u)| format!("u{u:02}")).collect();
                let also_held: Vec<(&str, &str)> = transit
                    .iter()
                    .zip(&transit_units)
                    .map(|((m, _), u)| (MEMBERS[*m], u.as_str()))
                    .collect();
                let how = Solve {
                    assignment: if sticky { Assignment::Sticky } else { Assignment::Ring },
                    current: Some(&current),
                    // Units in transit towards a member count as its own
                    // for the solver, never as held by a cordon or pause.
                    also_held: &also_held,
                    controls: Some(&c),
                    ..Solve::ring()
                };
                let (next, moves) = MatchingTable::solve_counted(&inputs, eligible, &how);
                // The counts are the whole table's, read against the
                // current rows and the units in transit: the sticky solver
                // counts its units apart from the fixed ones.
                let held: Vec<(&str, Vec<&str>)> = current
                    .rows()
                    .iter()
                    .map(|(m, v)| (m.as_str(), decode_row(v)))
                    .chain(also_held.iter().map(|&(m, u)| (m, vec![u])))
                    .collect();
                let read = || held.iter().map(|(m, us)| (*m, us.iter().copied()));
                let rows: sticky::Table<'_> =
                    next.rows().iter().map(|(m, v)| (m.as_str(), decode_row(v))).collect();
                let (moved, kept) = sticky::moved_and_kept(read(), &rows);
                let moves = moves.expect("a current table");
                prop_assert_eq!(moves.moved, moved, "moved");
                prop_assert_eq!(moves.placed, next.assignments() - moved - kept, "placed");
                let live_all: Vec<(&str, u32)> =
                    MEMBERS.iter().filter(|m| eligible(m)).map(|m| (*m, 1)).collect();
                let unit_refs: Vec<&str> = units.iter().map(String::as_str).collect();
                // The split reads the current rows alone: units in transit
                // are never kept by a cordon or a pause.
                let rows_only = held[..held.len() - also_held.len()]
                    .iter()
                    .map(|(m, us)| (*m, us.iter().copied()));
                let s = c.split(&live_all, &unit_refs, rows_only);
                let free: Vec<&str> = s.free.iter().map(|&i| unit_refs[i]).collect();
                let fixed = s.fixed.iter().fold(sticky::Table::new(), |mut t, &(m, u)| {
                    t.entry(m).or_default().push(u);
                    t
                });
                if sticky {
                    let minimum = sticky::min_moves(read(), &s.receivers, &free)
                        + sticky::moved_and_kept(read(), &fixed).0;
                    prop_assert_eq!(moves.minimum, minimum, "minimum");
                }
                let holders = |t: &MatchingTable, u: &str| -> Vec<String> {
                    t.rows().keys().filter(|m| t.units_of(m).contains(&u)).cloned().collect()
                };
                let receivers = MEMBERS.iter().filter(|m| eligible(m) && !c.cordoned(m)).count();
                for u in &units {
                    let now = holders(&next, u);
                    let before = holders(&current, u);
                    let pinned = c.pins.get(u).filter(|m| eligible(m));
                    if let Some(p) = pinned {
                        prop_assert_eq!(&now, &vec![p.clone()], "{} pinned", u);
                        continue;
                    }
                    // Kept: by its lowest live holder that keeps (a unit
                    // two rows hold, after a hand edit or a failure).
                    let kept = before
                        .iter()
                        .filter(|m| eligible(m) && (c.paused() || c.cordoned(m)))
                        .min()
                        .cloned();
                    if let Some(k) = &kept {
                        prop_assert_eq!(&now, &vec![k.clone()], "{} kept", u);
                        continue;
                    }
                    if receivers > 0 {
                        prop_assert_eq!(now.len(), 1, "{} owned once: {:?}", u, now);
                        prop_assert!(!c.cordoned(&now[0]), "{} went to cordoned {}", u, now[0]);
                    } else {
                        prop_assert!(now.is_empty(), "{} with no receiver: {:?}", u, now);
                    }
                }
                for m in MEMBERS {
                    prop_assert_eq!(next.rows().contains_key(m), eligible(m), "{}'s row", m);
                }
            }
        }
    }

    #[test]
    fn the_key_changes_with_what_the_solve_reads_only() {
        let (a, _) = Controls::decode(pairs(&[("member:a:1", "cordon 1")]));
        let (b, _) = Controls::decode(pairs(&[("member:a:1", "cordon 2")]));
        let (d, _) = Controls::decode(pairs(&[("member:a:1", "drain 1")]));
        assert_eq!(a.key(), b.key(), "the time is not read");
        assert_ne!(a.key(), d.key());
        assert_ne!(Controls::default().key(), a.key());
    }
}
