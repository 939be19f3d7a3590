//! `distributor history`: the change history (`core::history`) as text and
//! as JSON, newest first.

use serde::Serialize;

use crate::core::history::{HistoryEntry, Listed};

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::history::{MemberStates, record};
    use crate::core::table::MatchingTable;

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
