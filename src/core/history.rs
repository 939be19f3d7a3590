//! The change history: what each table write changed, recorded by the
//! holder in the capped Redis stream `{T}:changes` inside the fenced commit,
//! and read back by the page and `distributor history`.
//!
//! Pure: two tables and what the holder knows of their members in, a
//! [`ChangeRecord`] out; stream fields in, a [`HistoryEntry`] out.
//! Guarantees:
//! - a record is bounded whatever the table's size: at most [`LISTED`]
//!   members and [`LISTED`] names per unit list (and [`LISTED_BYTES`]
//!   bytes of names per list), with the full counts beside them;
//! - it depends only on the two tables and the sets passed in, never on
//!   row or unit order;
//! - decoding never fails: an entry someone else wrote, or one cut short,
//!   comes back with what could be read and the reason for the rest.

use std::collections::{BTreeSet, HashMap};
use std::hash::BuildHasherDefault;

use crate::core::held::{Change, Held};
use crate::core::sticky::StrHasher;
use crate::core::table::{MatchingTable, Moves, decode_row, split_row};

/// Entries the stream keeps (`XADD ... MAXLEN`): the newest.
pub const HISTORY_KEPT: usize = 1000;
/// Members, and names per unit list, that one record lists.
pub const LISTED: usize = 100;
/// Bytes of names one list holds at most (units are up to 4 KiB), so an
/// entry stays under about 16 KiB and the stream under about 16 MiB.
pub const LISTED_BYTES: usize = 4096;

/// Why a member appears in a change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[cfg_attr(
    feature = "daemon",
    derive(serde::Serialize),
    serde(rename_all = "lowercase")
)]
pub enum Why {
    /// Got a row: newly listed and live, or live again.
    Join,
    /// Lost its row while live and not draining: no longer listed.
    Leave,
    /// Failed: its units went to others.
    Failure,
    /// Draining (itself, or `distributor members drain`).
    Drain,
    /// Its units changed for none of the above: another member's doing.
    Rebalance,
}

impl Why {
    pub fn name(self) -> &'static str {
        match self {
            Why::Join => "join",
            Why::Leave => "leave",
            Why::Failure => "failure",
            Why::Drain => "drain",
            Why::Rebalance => "rebalance",
        }
    }

    pub fn parse(s: &str) -> Option<Why> {
        [
            Why::Join,
            Why::Leave,
            Why::Failure,
            Why::Drain,
            Why::Rebalance,
        ]
        .into_iter()
        .find(|w| w.name() == s)
    }
}

/// One member's part in a change: its units before and after.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "daemon", derive(serde::Serialize))]
pub struct MemberChange {
    pub id: String,
    pub why: Why,
    pub units_before: usize,
    pub units_after: usize,
}

/// Units of one kind of change: how many, and the first names (sorted).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[cfg_attr(feature = "daemon", derive(serde::Serialize))]
pub struct Listed {
    pub count: usize,
    pub units: Vec<String>,
}

impl Listed {
    fn of(mut names: Vec<&str>) -> Listed {
        names.sort_unstable();
        let count = names.len();
        let mut bytes = 0;
        let units = names
            .into_iter()
            .take(LISTED)
            .take_while(|u| {
                bytes += u.len() + 1;
                bytes <= LISTED_BYTES
            })
            .map(str::to_string)
            .collect();
        Listed { count, units }
    }

    /// Whether `unit` is listed (a record lists some names only).
    pub fn names(&self, unit: &str) -> bool {
        self.units.iter().any(|u| u == unit)
    }

    /// Units of the given names (sorted, bounded as every list of a record).
    pub fn named(names: &[String]) -> Listed {
        Listed::of(names.iter().map(String::as_str).collect())
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Whether every unit of this kind is named.
    pub fn complete(&self) -> bool {
        self.units.len() == self.count
    }

    fn encode(&self) -> (String, String) {
        (self.count.to_string(), self.units.join(","))
    }

    fn decode(count: Option<&str>, units: Option<&str>) -> Result<Listed, String> {
        let count = match count {
            Some(c) => c.parse().map_err(|_| format!("count {c:?}"))?,
            None => 0,
        };
        let units: Vec<String> = units
            .filter(|u| !u.is_empty())
            .map(|u| split_row(u).map(str::to_string).collect())
            .unwrap_or_default();
        Ok(Listed {
            count: count.max(units.len()),
            units,
        })
    }
}

/// What one table write changed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[cfg_attr(feature = "daemon", derive(serde::Serialize))]
pub struct ChangeRecord {
    /// Every reason among its members, sorted.
    pub why: Vec<Why>,
    /// The first [`LISTED`] members whose row came, went or changed, by id.
    pub members: Vec<MemberChange>,
    /// How many members changed.
    pub members_changed: usize,
    /// Units that went from one owner to another in this write (their
    /// owner failed or left, or ring mode without a handoff).
    pub moved: Listed,
    /// Units that got an owner without losing one in this write: new units,
    /// and the second half of a handoff (granted after the revocation).
    pub placed: Listed,
    /// Units taken from their owner without a new one in this write: the
    /// first half of a handoff, or units no longer listed.
    pub revoked: Listed,
    /// The solver's own account of its last solve (`{T}:meta` `last_change`).
    pub moves: Option<Moves>,
    /// Units quarantined since the last table write (`core::quarantine`):
    /// given to nobody from this write on.
    #[cfg_attr(feature = "daemon", serde(skip_serializing_if = "Listed::is_empty"))]
    pub quarantined: Listed,
}

/// What the holder knew of the members when it planned the write.
#[derive(Debug, Clone, Default)]
pub struct MemberStates {
    /// Listed members that are not live.
    pub failed: BTreeSet<String>,
    /// Members that drain (themselves, or by an operator's drain).
    pub draining: BTreeSet<String>,
}

/// What changed from `previous` (the table members held) to `next`.
pub fn record(
    previous: &MatchingTable,
    next: &MatchingTable,
    states: &MemberStates,
    moves: Option<Moves>,
) -> ChangeRecord {
    // Members: rows that came, went or changed.
    let mut members = Vec::new();
    let mut changed = Vec::new();
    let ids: BTreeSet<&String> = previous.rows().keys().chain(next.rows().keys()).collect();
    for id in ids {
        let before = previous.rows().get(id);
        let after = next.rows().get(id);
        if before == after {
            continue;
        }
        changed.push((before, after));
        let count = |v: Option<&String>| v.map_or(0, |v| decode_row(v).len());
        let (units_before, units_after) = (count(before), count(after));
        let why = if states.failed.contains(id) {
            Why::Failure
        } else if states.draining.contains(id) {
            Why::Drain
        } else if before.is_none() {
            Why::Join
        } else if after.is_none() {
            Why::Leave
        } else {
            Why::Rebalance
        };
        members.push(MemberChange {
            id: id.clone(),
            why,
            units_before,
            units_after,
        });
    }
    let mut why: Vec<Why> = members.iter().map(|m| m.why).collect();
    why.sort_unstable();
    why.dedup();
    let members_changed = members.len();
    let mut bytes = 0;
    let listed = members
        .iter()
        .take(LISTED)
        .take_while(|m| {
            bytes += m.id.len() + 24;
            bytes <= LISTED_BYTES
        })
        .count();
    members.truncate(listed);

    // Units: whether some member gained each, and whether some member lost
    // it (one owner per group, so possibly several). Only a changed row can
    // gain or lose a unit, so only changed rows are read: O(their units).
    type Seen<'a> = HashMap<&'a str, (bool, bool), BuildHasherDefault<StrHasher>>;
    let mut seen: Seen<'_> = HashMap::default();
    fn units(v: Option<&String>) -> Vec<&str> {
        v.map(|v| decode_row(v)).unwrap_or_default()
    }
    for (before, after) in changed {
        let after = units(after);
        Held::of(units(before), &after).diff(&after, |u, change| {
            let (gained, lost) = seen.entry(u).or_default();
            match change {
                Change::Incoming => *gained = true,
                Change::Leaving => *lost = true,
            }
        });
    }
    let (mut moved, mut placed, mut revoked) = (vec![], vec![], vec![]);
    for (unit, gained_lost) in seen {
        match gained_lost {
            (true, true) => moved.push(unit),
            (true, false) => placed.push(unit),
            (false, true) => revoked.push(unit),
            (false, false) => {}
        }
    }
    ChangeRecord {
        why,
        members,
        members_changed,
        moved: Listed::of(moved),
        placed: Listed::of(placed),
        revoked: Listed::of(revoked),
        moves,
        quarantined: Listed::default(),
    }
}

impl ChangeRecord {
    /// The stream fields this record writes (the commit adds `generation`,
    /// `previous_generation`, `at_ms`, `epoch` and `writer`).
    pub fn fields(&self) -> Vec<(&'static str, String)> {
        let members = self
            .members
            .iter()
            .map(|m| {
                format!(
                    "{} {} {} {}",
                    m.why.name(),
                    m.id,
                    m.units_before,
                    m.units_after
                )
            })
            .collect::<Vec<_>>()
            .join(",");
        let why = self
            .why
            .iter()
            .map(|w| w.name())
            .collect::<Vec<_>>()
            .join(",");
        let mut f = vec![
            ("why", why),
            ("members", members),
            ("members_changed", self.members_changed.to_string()),
        ];
        for (name, listed) in [
            (("moved", "moved_units"), &self.moved),
            (("placed", "placed_units"), &self.placed),
            (("revoked", "revoked_units"), &self.revoked),
        ] {
            let (count, units) = listed.encode();
            f.push((name.0, count));
            f.push((name.1, units));
        }
        if let Some(m) = self.moves {
            f.push(("last_change", m.encode()));
        }
        if !self.quarantined.is_empty() {
            let (count, units) = self.quarantined.encode();
            f.push(("quarantined", count));
            f.push(("quarantined_units", units));
        }
        f
    }
}

/// One entry of `{T}:changes` as read back.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[cfg_attr(feature = "daemon", derive(serde::Serialize))]
pub struct HistoryEntry {
    /// The stream entry's id (`<unix_ms>-<seq>`, Redis' clock).
    pub id: String,
    pub generation: u64,
    pub previous_generation: u64,
    /// Unix ms of the write, by the holder's clock.
    pub at_ms: u64,
    pub epoch: u64,
    pub writer: String,
    /// The members whose rows the write set or deleted (`commit.lua`'s
    /// `rows`); `None`: not known (a whole write, too many, or an entry of
    /// an older holder). What a lookup reads to follow the table.
    #[cfg_attr(feature = "daemon", serde(skip))]
    pub rows: Option<Vec<String>>,
    #[cfg_attr(feature = "daemon", serde(flatten))]
    pub record: ChangeRecord,
    /// What could not be read (an entry someone else wrote, or cut short).
    #[cfg_attr(feature = "daemon", serde(skip_serializing_if = "Option::is_none"))]
    pub unreadable: Option<String>,
}

/// Decodes one stream entry; what does not parse is named in `unreadable`
/// (field and value, shortened) and left at its default.
pub fn decode(id: &str, fields: &[(String, String)]) -> HistoryEntry {
    let get = |name: &str| {
        fields
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    };
    let mut bad: Vec<String> = Vec::new();
    let mut complain = |field: &str, value: &str| {
        let short: String = value.chars().take(40).collect();
        let more = if short.len() < value.len() { "…" } else { "" };
        bad.push(format!("{field}={short:?}{more}"));
    };
    let mut number = |name: &str| -> u64 {
        match get(name) {
            Some(v) => v.parse().unwrap_or_else(|_| {
                complain(name, v);
                0
            }),
            None => {
                complain(name, "");
                0
            }
        }
    };
    let generation = number("generation");
    let previous_generation = number("previous_generation");
    let at_ms = number("at_ms");
    let epoch = number("epoch");
    let members_changed = number("members_changed") as usize;
    let mut why = Vec::new();
    for w in get("why")
        .unwrap_or("")
        .split(',')
        .filter(|w| !w.is_empty())
    {
        match Why::parse(w) {
            Some(w) => why.push(w),
            None => complain("why", w),
        }
    }
    let mut members = Vec::new();
    for m in get("members")
        .unwrap_or("")
        .split(',')
        .filter(|m| !m.is_empty())
    {
        let parts: Vec<&str> = m.split(' ').collect();
        let parsed = match parts.as_slice() {
            [w, id, b, a] => Why::parse(w).zip(b.parse().ok()).zip(a.parse().ok()).map(
                |((why, units_before), units_after)| MemberChange {
                    id: id.to_string(),
                    why,
                    units_before,
                    units_after,
                },
            ),
            _ => None,
        };
        match parsed {
            Some(p) => members.push(p),
            None => complain("members", m),
        }
    }
    let mut listed = |count: &str, units: &str| {
        Listed::decode(get(count), get(units)).unwrap_or_else(|e| {
            complain(count, &e);
            Listed::default()
        })
    };
    let moved = listed("moved", "moved_units");
    let placed = listed("placed", "placed_units");
    let revoked = listed("revoked", "revoked_units");
    let quarantined = listed("quarantined", "quarantined_units");
    let moves = get("last_change").and_then(|v| {
        let m = Moves::decode(v);
        if m.is_none() {
            complain("last_change", v);
        }
        m
    });
    HistoryEntry {
        id: id.to_string(),
        generation,
        previous_generation,
        at_ms,
        epoch,
        writer: get("writer").unwrap_or("").to_string(),
        rows: get("rows").filter(|r| *r != "*").map(|r| {
            split_row(r)
                .filter(|m| !m.is_empty())
                .map(str::to_string)
                .collect()
        }),
        record: ChangeRecord {
            why,
            members_changed: members_changed.max(members.len()),
            members,
            moved,
            placed,
            revoked,
            moves,
            quarantined,
        },
        unreadable: (!bad.is_empty()).then(|| bad.join(", ")),
    }
}

/// What the history says of when a unit's current state began.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Since<'a> {
    /// The entry that gave it to its owner (or, for a unit nobody owns,
    /// the one that took it from its last owner).
    Entry(&'a HistoryEntry),
    /// This entry may have: it names only some of its units.
    Unknown { generation: u64 },
    /// Before the oldest entry kept (this generation).
    Before { generation: u64 },
    /// Nothing recorded.
    Nothing,
}

/// When `unit` got its owner (`owned`), or lost its last one (not
/// `owned`), by `entries` (newest first, as read).
pub fn since<'a>(entries: &'a [HistoryEntry], unit: &str, owned: bool) -> Since<'a> {
    for e in entries {
        let r = &e.record;
        let lists: &[&Listed] = if owned {
            &[&r.placed, &r.moved]
        } else {
            &[&r.revoked, &r.moved]
        };
        if lists.iter().any(|l| l.names(unit)) {
            return Since::Entry(e);
        }
        if lists.iter().any(|l| !l.complete()) {
            return Since::Unknown {
                generation: e.generation,
            };
        }
    }
    match entries.last() {
        Some(e) => Since::Before {
            generation: e.generation,
        },
        None => Since::Nothing,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(rows: &[(&str, &str)]) -> MatchingTable {
        MatchingTable::from_rows(rows.iter().map(|(m, u)| (m.to_string(), u.to_string())))
    }

    fn states(failed: &[&str], draining: &[&str]) -> MemberStates {
        MemberStates {
            failed: failed.iter().map(|s| s.to_string()).collect(),
            draining: draining.iter().map(|s| s.to_string()).collect(),
        }
    }

    #[test]
    fn a_record_says_who_came_went_failed_and_what_moved() {
        let before = table(&[
            ("a:1", "u1,u2"),
            ("b:2", "u3,u4"),
            ("c:3", "u5"),
            ("d:4", "u6"),
        ]);
        let after = table(&[("a:1", "u1,u2,u3,u4,u7"), ("c:3", ""), ("e:5", "u5")]);
        // b failed (its units went straight to a), c drains (u5 to e, a
        // newcomer), d left (u6 no longer listed), u7 is new.
        let r = record(&before, &after, &states(&["b:2"], &["c:3"]), None);
        let whys: Vec<(&str, Why, usize, usize)> = r
            .members
            .iter()
            .map(|m| (m.id.as_str(), m.why, m.units_before, m.units_after))
            .collect();
        assert_eq!(
            whys,
            vec![
                ("a:1", Why::Rebalance, 2, 5),
                ("b:2", Why::Failure, 2, 0),
                ("c:3", Why::Drain, 1, 0),
                ("d:4", Why::Leave, 1, 0),
                ("e:5", Why::Join, 0, 1),
            ]
        );
        assert_eq!(
            r.why,
            vec![
                Why::Join,
                Why::Leave,
                Why::Failure,
                Why::Drain,
                Why::Rebalance
            ]
        );
        assert_eq!(r.moved.units, ["u3", "u4", "u5"]);
        assert_eq!(r.placed.units, ["u7"]);
        assert_eq!(r.revoked.units, ["u6"]);
        assert!(r.moved.complete());
    }

    #[test]
    fn a_handoff_is_a_revocation_then_a_placement() {
        let t0 = table(&[("a:1", "u1,u2"), ("b:2", "")]);
        let t1 = table(&[("a:1", "u1"), ("b:2", "")]);
        let t2 = table(&[("a:1", "u1"), ("b:2", "u2")]);
        let none = MemberStates::default();
        let r1 = record(&t0, &t1, &none, None);
        assert_eq!(
            (r1.revoked.count, r1.placed.count, r1.moved.count),
            (1, 0, 0)
        );
        let r2 = record(&t1, &t2, &none, None);
        assert_eq!(
            (r2.revoked.count, r2.placed.count, r2.moved.count),
            (0, 1, 0)
        );
        assert_eq!(r2.why, vec![Why::Rebalance]);
    }

    #[test]
    fn a_unit_owned_in_two_groups_moves_in_one() {
        let before = table(&[("a:1", "u1"), ("x:1", "u1")]);
        let after = table(&[("a:1", "u1"), ("y:1", "u1")]);
        let r = record(&before, &after, &MemberStates::default(), None);
        assert_eq!(r.moved.units, ["u1"]);
        assert_eq!((r.placed.count, r.revoked.count), (0, 0));
    }

    #[test]
    fn records_are_bounded_and_count_everything() {
        let units: Vec<String> = (0..5000).map(|i| format!("unit-{i:05}")).collect();
        let after = table(&[("a:1", &units.join(","))]);
        let members: Vec<(String, String)> = (0..300)
            .map(|i| (format!("m{i:03}:1"), String::new()))
            .collect();
        let before = MatchingTable::from_rows(members);
        let r = record(&before, &after, &MemberStates::default(), None);
        assert_eq!(r.placed.count, 5000);
        assert_eq!(r.placed.units.len(), LISTED);
        assert!(!r.placed.complete());
        assert_eq!(r.members_changed, 301);
        assert_eq!(r.members.len(), LISTED);
        let encoded = r
            .fields()
            .iter()
            .map(|(k, v)| k.len() + v.len())
            .sum::<usize>();
        assert!(encoded < 4 * LISTED_BYTES, "{encoded}");
        let long: Vec<String> = (0..50)
            .map(|i| format!("{i:02}{}", "x".repeat(1000)))
            .collect();
        let r = record(
            &MatchingTable::default(),
            &table(&[("a:1", &long.join(","))]),
            &MemberStates::default(),
            None,
        );
        let bytes: usize = r.placed.units.iter().map(|u| u.len() + 1).sum();
        assert!(
            bytes <= LISTED_BYTES && !r.placed.units.is_empty(),
            "{bytes}"
        );
        assert_eq!(r.placed.count, 50);
    }

    #[test]
    fn since_finds_the_write_that_gave_a_unit_to_its_owner() {
        let t0 = table(&[("a:1", "u1,u2"), ("b:2", "")]);
        let t1 = table(&[("a:1", "u1"), ("b:2", "")]);
        let t2 = table(&[("a:1", "u1"), ("b:2", "u2")]);
        let none = MemberStates::default();
        let entry = |g: u64, before: &MatchingTable, after: &MatchingTable| HistoryEntry {
            generation: g,
            previous_generation: g - 1,
            record: record(before, after, &none, None),
            ..HistoryEntry::default()
        };
        let first = entry(1, &MatchingTable::default(), &t0);
        let entries = vec![entry(3, &t1, &t2), entry(2, &t0, &t1), first.clone()];
        let at = |unit, owned| match since(&entries, unit, owned) {
            Since::Entry(e) => Some(e.generation),
            _ => None,
        };
        assert_eq!(at("u2", true), Some(3), "granted to b after its revocation");
        assert_eq!(at("u1", true), Some(1), "held since the first table");
        assert_eq!(at("u2", false), Some(2), "the revocation");
        assert_eq!(
            since(&entries[..2], "u1", true),
            Since::Before { generation: 2 }
        );
        assert_eq!(since(&[], "u1", true), Since::Nothing);
        // An entry that names some of its units only: unknown from there.
        let mut partial = first;
        partial.record.placed.units.clear();
        assert_eq!(
            since(std::slice::from_ref(&partial), "u1", true),
            Since::Unknown { generation: 1 }
        );
    }

    #[test]
    fn a_record_reads_back_as_written() {
        let before = table(&[("a:1", "u1,u2"), ("b:2", "u3")]);
        let after = table(&[("a:1", "u1,u2,u3"), ("c:3", "u4")]);
        let moves = Moves {
            moved: 1,
            minimum: 1,
            placed: 1,
        };
        let r = record(&before, &after, &states(&["b:2"], &[]), Some(moves));
        let mut fields: Vec<(String, String)> = r
            .fields()
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect();
        for (k, v) in [
            ("generation", "7"),
            ("previous_generation", "6"),
            ("at_ms", "1700000000000"),
            ("epoch", "3"),
            ("writer", "r1"),
        ] {
            fields.push((k.to_string(), v.to_string()));
        }
        let e = decode("1700000000000-0", &fields);
        assert_eq!(e.unreadable, None);
        assert_eq!(e.record, r);
        assert_eq!((e.generation, e.previous_generation, e.epoch), (7, 6, 3));
        assert_eq!(e.writer, "r1");
    }

    #[test]
    fn an_entry_someone_else_wrote_reads_as_far_as_it_can() {
        let fields: Vec<(String, String)> = [
            ("generation", "x"),
            ("why", "join,party"),
            ("members", "join a:1 0 2,nonsense"),
            ("moved", "many"),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let e = decode("1-0", &fields);
        let bad = e.unreadable.expect("named");
        for part in [
            "generation=\"x\"",
            "why=\"party\"",
            "members=\"nonsense\"",
            "moved=",
        ] {
            assert!(bad.contains(part), "{bad}");
        }
        assert_eq!(e.record.why, vec![Why::Join]);
        assert_eq!(e.record.members.len(), 1);
    }

    /// What every owner held before and after, unit by unit: the definition
    /// the record's counts must meet (it reads only changed rows).
    fn reference(previous: &MatchingTable, next: &MatchingTable) -> [Vec<String>; 3] {
        let owners = |t: &MatchingTable| {
            let mut by_unit: HashMap<String, BTreeSet<String>> = HashMap::new();
            for (m, row) in t.rows() {
                for u in decode_row(row) {
                    by_unit.entry(u.to_string()).or_default().insert(m.clone());
                }
            }
            by_unit
        };
        let (before, after) = (owners(previous), owners(next));
        let units: BTreeSet<&String> = before.keys().chain(after.keys()).collect();
        let mut out: [Vec<String>; 3] = Default::default();
        for u in units {
            let (old, new) = (
                before.get(u).cloned().unwrap_or_default(),
                after.get(u).cloned().unwrap_or_default(),
            );
            let gained = new.difference(&old).next().is_some();
            let lost = old.difference(&new).next().is_some();
            match (gained, lost) {
                (true, true) => out[0].push(u.clone()),
                (true, false) => out[1].push(u.clone()),
                (false, true) => out[2].push(u.clone()),
                (false, false) => {}
            }
        }
        out
    }

    proptest::proptest! {
        /// Moved, placed and revoked units are those of the definition, for
        /// tables whose units may have several owners (several groups) and
        /// whose rows may repeat a unit.
        #[test]
        fn the_record_counts_units_as_owners_changed(
            before in proptest::collection::btree_map(0..6u8, proptest::collection::vec(0..20u8, 0..8), 0..6),
            after in proptest::collection::btree_map(0..6u8, proptest::collection::vec(0..20u8, 0..8), 0..6),
        ) {
            let t = |rows: &std::collections::BTreeMap<u8, Vec<u8>>| {
                MatchingTable::from_rows(rows.iter().map(|(m, us)| {
                    let row: Vec<String> = us.iter().map(|u| format!("u{u}")).collect();
                    (format!("m{m}:1"), row.join(","))
                }))
            };
            let (previous, next) = (t(&before), t(&after));
            let r = record(&previous, &next, &MemberStates::default(), None);
            let [moved, placed, revoked] = reference(&previous, &next);
            proptest::prop_assert_eq!(r.moved.count, moved.len());
            proptest::prop_assert_eq!(r.placed.count, placed.len());
            proptest::prop_assert_eq!(r.revoked.count, revoked.len());
            proptest::prop_assert_eq!(&r.moved.units, &moved);
            proptest::prop_assert_eq!(&r.placed.units, &placed);
            proptest::prop_assert_eq!(&r.revoked.units, &revoked);
        }
    }
}
