//! `distributor history`: the change history (`core::history`) as text and
//! as JSON, newest first.

use serde::Serialize;

use crate::core::history::{HistoryEntry, Listed, Since, since};
use crate::core::table::MatchingTable;

/// `distributor history --json`.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct HistoryReport {
    /// `{T}:changes`, newest first.
    pub entries: Vec<HistoryEntry>,
    /// The last table write could not add its entry: `<generation>
    /// <error>` (an ACL without `xadd`); `None` when it could.
    pub error: Option<String>,
}

/// Names at most this many members or units per line of text.
const SHOWN: usize = 8;

fn listed(name: &str, l: &Listed) -> String {
    let mut s = format!("{name} {}", l.count);
    if l.count > 0 {
        let shown: Vec<&str> = l.units.iter().take(SHOWN).map(String::as_str).collect();
        let more = l.count - shown.len();
        s.push_str(&format!(" ({}", shown.join(",")));
        if more > 0 {
            s.push_str(&format!(", … {more} more"));
        }
        s.push(')');
    }
    s
}

/// One paragraph per entry, newest first; `now_ms` for the ages.
pub fn render_history(r: &HistoryReport, now_ms: u64) -> String {
    let mut out = String::new();
    if let Some(e) = &r.error {
        out.push_str(&format!(
            "warning: the last table write was not recorded: {e}\n"
        ));
    }
    if r.entries.is_empty() {
        out.push_str("no changes recorded\n");
    }
    for e in &r.entries {
        let why: Vec<&str> = e.record.why.iter().map(|w| w.name()).collect();
        let why = if why.is_empty() {
            "rewritten".to_string()
        } else {
            why.join(", ")
        };
        out.push_str(&format!(
            "generation {} (after {}), {}s ago, epoch {} by {}: {why}\n",
            e.generation,
            e.previous_generation,
            now_ms.saturating_sub(e.at_ms) / 1000,
            e.epoch,
            e.writer,
        ));
        if !e.record.members.is_empty() {
            let shown: Vec<String> = e
                .record
                .members
                .iter()
                .take(SHOWN)
                .map(|m| {
                    format!(
                        "{} {} {}→{}",
                        m.why.name(),
                        m.id,
                        m.units_before,
                        m.units_after
                    )
                })
                .collect();
            let more = e.record.members_changed - shown.len();
            let more = if more > 0 {
                format!("; … {more} more")
            } else {
                String::new()
            };
            out.push_str(&format!("  members: {}{more}\n", shown.join("; ")));
        }
        out.push_str(&format!(
            "  units: {}; {}; {}\n",
            listed("moved", &e.record.moved),
            listed("placed", &e.record.placed),
            listed("revoked", &e.record.revoked)
        ));
        if let Some(m) = e.record.moves {
            out.push_str(&format!(
                "  solve: moved {} (minimum {}), placed {}\n",
                m.moved, m.minimum, m.placed
            ));
        }
        if let Some(u) = &e.unreadable {
            out.push_str(&format!("  unreadable: {u}\n"));
        }
    }
    out
}

/// `distributor owner UNIT [--json]`.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct OwnerReport {
    pub unit: String,
    /// Whether the work-unit list holds it.
    pub listed: bool,
    /// The table's generation as read.
    pub generation: u64,
    /// The members whose row holds it (one per group; none while it is in
    /// transit, or not listed).
    pub owners: Vec<String>,
    /// The write that gave it to its owner (with no owner: the one that
    /// took it from its last), by the history.
    pub since_generation: Option<u64>,
    /// Unix ms of that write (the holder's clock).
    pub since_ms: Option<u64>,
    /// The owner's fencing token for it: the generation it started the
    /// unit at, which is `since_generation` when it read that generation
    /// (a member that first read a later one holds that later one).
    pub token: Option<u64>,
    /// Why `since_generation` is not known, when it is not.
    pub note: Option<String>,
}

/// Who owns `unit` in `table`, and since when by `entries` (newest first).
pub fn owner_report(
    unit: &str,
    listed: bool,
    table: &MatchingTable,
    generation: u64,
    entries: &[HistoryEntry],
) -> OwnerReport {
    let owners: Vec<String> = table
        .rows()
        .iter()
        .filter(|(_, row)| row.split(',').any(|u| u == unit))
        .map(|(m, _)| m.clone())
        .collect();
    let owned = !owners.is_empty();
    let (entry, note) = match since(entries, unit, owned) {
        Since::Entry(e) => (Some(e), None),
        Since::Unknown { generation } => (
            None,
            Some(format!(
                "generation {generation} changed more units than its history entry names"
            )),
        ),
        Since::Before { generation } => (
            None,
            Some(format!(
                "before generation {generation}, the oldest change kept"
            )),
        ),
        Since::Nothing => (None, Some("no change recorded".to_string())),
    };
    OwnerReport {
        unit: unit.to_string(),
        listed,
        generation,
        since_generation: entry.map(|e| e.generation),
        since_ms: entry.map(|e| e.at_ms),
        token: entry.filter(|_| owned).map(|e| e.generation),
        owners,
        note,
    }
}

/// One line: the owner, since when, and its token.
pub fn render_owner(r: &OwnerReport, now_ms: u64) -> String {
    let when = match (r.since_generation, r.since_ms) {
        (Some(g), Some(ms)) => format!("generation {g}, {}s ago", now_ms.saturating_sub(ms) / 1000),
        _ => r.note.clone().unwrap_or_default(),
    };
    if r.owners.is_empty() && !r.listed {
        return format!(
            "{}: not listed (not in the work-unit list): no member owns it, in generation {}\n",
            r.unit, r.generation
        );
    }
    if r.owners.is_empty() {
        return format!(
            "{}: no owner in generation {} (in transit, or not listed); last taken from its owner: {when}\n",
            r.unit, r.generation
        );
    }
    let token = r
        .token
        .map_or_else(|| "unknown".to_string(), |t| t.to_string());
    let unlisted = if r.listed {
        ""
    } else {
        " (no longer listed: its owner is told to stop it at the next write)"
    };
    format!(
        "{}: owned by {} since {when}; fencing token {token}{unlisted}\n",
        r.unit,
        r.owners.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::history::{MemberStates, record};
    use crate::core::table::MatchingTable;

    #[test]
    fn owner_says_who_since_when_and_the_token() {
        let t1 = MatchingTable::from_rows([("a:1".to_string(), "u1,u2".to_string())]);
        let t2 = MatchingTable::from_rows([
            ("a:1".to_string(), "u1".to_string()),
            ("b:2".to_string(), String::new()),
        ]);
        let none = MemberStates::default();
        let entries = vec![
            HistoryEntry {
                generation: 2,
                at_ms: 2_000,
                record: record(&t1, &t2, &none, None),
                ..HistoryEntry::default()
            },
            HistoryEntry {
                generation: 1,
                at_ms: 1_000,
                record: record(&MatchingTable::default(), &t1, &none, None),
                ..HistoryEntry::default()
            },
        ];
        let r = owner_report("u1", true, &t2, 2, &entries);
        assert_eq!((r.since_generation, r.token), (Some(1), Some(1)));
        assert_eq!(
            render_owner(&r, 11_000),
            "u1: owned by a:1 since generation 1, 10s ago; fencing token 1\n"
        );
        let gone = owner_report("u2", true, &t2, 2, &entries);
        assert_eq!((gone.since_generation, gone.token), (Some(2), None));
        assert!(render_owner(&gone, 3_000).starts_with("u2: no owner in generation 2"));
        let old = owner_report("u1", true, &t2, 2, &entries[..1]);
        assert_eq!(old.token, None);
        assert_eq!(
            render_owner(&old, 3_000),
            "u1: owned by a:1 since before generation 2, the oldest change kept; fencing token unknown\n"
        );
        let never = owner_report("u9", false, &t2, 2, &entries);
        assert_eq!(
            render_owner(&never, 3_000),
            "u9: not listed (not in the work-unit list): no member owns it, in generation 2\n"
        );
        let removed = owner_report("u1", false, &t2, 2, &entries);
        assert!(render_owner(&removed, 11_000).ends_with(
            "fencing token 1 (no longer listed: its owner is told to stop it at the next write)\n"
        ));
    }

    #[test]
    fn history_text_names_who_and_what_and_counts_the_rest() {
        let before = MatchingTable::from_rows([("a:1".to_string(), "u1,u2".to_string())]);
        let units: Vec<String> = (0..20).map(|i| format!("u{i:02}")).collect();
        let after = MatchingTable::from_rows([
            ("a:1".to_string(), String::new()),
            ("b:2".to_string(), units.join(",")),
        ]);
        let r = record(&before, &after, &MemberStates::default(), None);
        let entry = HistoryEntry {
            id: "1-0".into(),
            generation: 5,
            previous_generation: 4,
            at_ms: 1_000,
            epoch: 2,
            writer: "r1".into(),
            rows: None,
            record: r,
            unreadable: None,
        };
        let text = render_history(
            &HistoryReport {
                entries: vec![entry],
                error: Some("5 NOPERM".into()),
            },
            4_000,
        );
        assert!(text.starts_with("warning: the last table write was not recorded: 5 NOPERM\n"));
        assert!(
            text.contains("generation 5 (after 4), 3s ago, epoch 2 by r1: join, rebalance\n"),
            "{text}"
        );
        assert!(
            text.contains("members: rebalance a:1 2→0; join b:2 0→20\n"),
            "{text}"
        );
        assert!(
            text.contains("placed 20 (u00,u01,u02,u03,u04,u05,u06,u07, … 12 more)"),
            "{text}"
        );
        assert!(text.contains("revoked 2 (u1,u2)"), "{text}");
    }
}
