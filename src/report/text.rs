//! The reports' text rendering: what `distributor status`,
//! `distributor table` and `distributor plan` print on a terminal. Pure: a
//! report in, text out.

use super::model::{ChangeReport, MemberReport, StatusReport, TableReport};
use super::plan::PlanReport;
use crate::core::whatif::Kind;

/// `assignment sticky, last change: 95 moved (minimum 95), 0 placed`.
fn assignment_text(assignment: &Option<String>, change: &Option<ChangeReport>) -> String {
    let mode = assignment.as_deref().unwrap_or("ring");
    match change {
        Some(c) => format!(
            "assignment {mode}; last change: {} moved (minimum {}), {} placed\n",
            c.moved, c.minimum, c.placed
        ),
        None => format!("assignment {mode}\n"),
    }
}

/// What a member's handoff report says, for the text rendering.
fn protocol_text(m: &MemberReport, generation: u64) -> String {
    match (&m.protocol, &m.unreadable_report) {
        (Some(p), _) => {
            let lag = if p.behind == 0 {
                String::new()
            } else {
                match p.owes {
                    // Normal: a generation that only adds units needs no report.
                    0 => format!(
                        " (table at {generation}; owes nothing: only a generation that takes units from it needs a report)"
                    ),
                    n => format!(
                        " (table at {generation}; owes the acknowledgement of {n} units in transit)"
                    ),
                }
            };
            let draining = if p.draining { ", draining" } else { "" };
            let reported = if m.weight == p.weight {
                String::new()
            } else {
                format!(" (override; reported {})", p.weight)
            };
            format!(
                "  weight {}{reported}  applied {}{lag}{draining}",
                m.weight, p.applied
            )
        }
        (None, Some(raw)) => format!("  unreadable report {raw}"),
        (None, None) => "  (no acknowledgements: -handoff-delay)".into(),
    }
}

fn ago(ms: u64) -> String {
    if ms < 10_000 {
        format!("{:.1}s", ms as f64 / 1000.0)
    } else {
        format!("{}s", ms / 1000)
    }
}

/// Renders the status report for a terminal.
pub fn render_status(r: &StatusReport) -> String {
    let mut out = String::new();
    let write = match &r.last_write {
        Some(w) => format!(
            "written by {} at epoch {}",
            if w.by.is_empty() { "?" } else { &w.by },
            w.epoch
        ),
        None => "never written".into(),
    };
    out += &format!(
        "table {}  generation {}  {}\n",
        r.table, r.generation, write
    );
    out += &assignment_text(&r.assignment, &r.last_change);
    out += &super::controls::controls_text(&r.controls);
    if let Some(q) = &r.quarantine {
        out += &format!(
            "quarantined ({}): given to nobody (distributor workunits quarantine list | release UNIT)\n",
            q.units
        );
        for line in super::quarantine_text(&r.quarantine, None).lines() {
            out += &format!("  {line}\n");
        }
    }
    out += &match (&r.lease.holder, r.lease.expires_in_ms) {
        (Some(h), Some(ms)) => format!(
            "lease held by {h}, epoch {}, expires in {}\n",
            r.lease.epoch,
            ago(ms)
        ),
        (None, Some(ms)) => format!(
            "lease held, epoch {}, expires in {}\n",
            r.lease.epoch,
            ago(ms)
        ),
        _ => format!(
            "lease free (last epoch {}): no replica is acting\n",
            r.lease.epoch
        ),
    };
    if let Some(t) = &r.lease.takeover {
        out += &format!("takeover: {t}\n");
    }
    out += &format!("replicas ({}):\n", r.replicas.len());
    for rep in &r.replicas {
        let place = match (rep.index, rep.replicas) {
            (Some(i), Some(n)) => format!("index {i} of {n}"),
            _ => "census pending".into(),
        };
        let role = if r.lease.holder.as_deref() == Some(rep.id.as_str()) {
            "  holder"
        } else {
            ""
        };
        out += &format!(
            "  {:<24} {:<16} seen {} ago{}\n",
            rep.id,
            place,
            ago(rep.seen_ms_ago),
            role
        );
        if let Some(why) = &rep.blocked {
            out += &format!("    not acting: {why}\n");
        }
        if let Some(what) = &rep.recovering {
            out += &format!("    recovering from state Redis may have lost: {what}\n");
        }
    }
    for g in &r.groups {
        out += &format!(
            "group {}: {} live, {} failed\n",
            g.name,
            g.live.len(),
            g.failed.len()
        );
        for m in &g.live {
            out += &format!(
                "  live    {:<28} {} units{}{}{}\n",
                m.id,
                m.units,
                load_text(m),
                protocol_text(m, r.generation),
                m.control.map(|c| format!(", {c}")).unwrap_or_default()
            );
        }
        let long = crate::core::timing::Timing::DEFAULT.failing_long;
        let mut failing_long = 0;
        for m in &g.failed {
            let since = m
                .failing_for_ms
                .map(|ms| format!(", for {}", ago(ms)))
                .unwrap_or_default();
            failing_long += usize::from(m.failing_long);
            out += &format!(
                "  failed  {:<28} {}{}\n",
                m.id,
                m.reason.as_deref().unwrap_or(""),
                since
            );
        }
        if failing_long > 0 {
            out += &format!(
                "  hint: {failing_long} failed for {} minutes or more; a failed member stays listed and pinged until it is removed (distributor services remove {} ADDR) or forgotten (-forget-after)\n",
                long.as_secs() / 60,
                g.name
            );
        }
    }
    out += &format!(
        "work units: {} valid, {} invalid\n",
        r.work_units, r.invalid_work_units
    );
    if let Some(b) = &r.balance {
        out += &format!(
            "balance by {} (tolerance {}): busiest {:.2}x its share, least busy {:.2}x, {} outside the tolerance; {} units with a {}, {} unreadable entries\n",
            b.by,
            b.tolerance,
            b.imbalance,
            b.least,
            b.out_of_band,
            b.declared_costs,
            b.by,
            b.invalid_costs
        );
        if b.stale_loads > 0 {
            out += &format!(
                "{} members' loads left out for their date: older than 5 minutes (stopped writing; see -forget-after) or over a minute ahead of this clock\n",
                b.stale_loads
            );
        }
        if b.hot_count > 0 {
            let more = b.hot_count - b.hot_units.len();
            out += &format!(
                "hot units (costlier than any share, each alone on a member where possible): {}{}\n",
                b.hot_units.join(", "),
                if more > 0 {
                    format!(" and {more} more")
                } else {
                    String::new()
                }
            );
        }
    }
    if r.in_transit > 0 {
        out += &format!(
            "in transit: {} units (revoked, not yet granted to their next owner)\n",
            r.in_transit
        );
        for t in &r.transit {
            out += &format!(
                "  {:<24} group {} from {} to {}, revoked at generation {}, {} ago\n",
                t.unit,
                t.group,
                t.from.join(","),
                t.to.as_deref().unwrap_or("(none yet)"),
                t.revoked_at,
                ago(t.for_ms)
            );
        }
        if r.in_transit > r.transit.len() {
            out += &format!("  ... and {} more\n", r.in_transit - r.transit.len());
        }
    }
    out
}

pub fn render_table(r: &TableReport) -> String {
    let mut out = format!(
        "{:<32} {:>8} {:>8} {:>7}\n",
        "member", "units", "share", "weight"
    );
    for row in &r.rows {
        out += &format!(
            "{:<32} {:>8} {:>7.2}% {:>7}\n",
            row.id, row.units, row.share, row.weight
        );
    }
    out += &format!(
        "{} members, {} assignments, min {} max {} (balance {}), generation {}\n",
        r.total, r.assignments, r.min, r.max, r.balance, r.generation
    );
    out += &assignment_text(&r.assignment, &r.last_change);
    out
}

/// A live member's load against its share (`-balance cost`), or nothing.
fn load_text(m: &MemberReport) -> String {
    let Some(l) = &m.load else {
        return String::new();
    };
    let mut out = format!(", load {} of share {}", number(l.load), number(l.share));
    if !l.in_band {
        out += " (outside the tolerance)";
    }
    if !l.hot.is_empty() {
        out += &format!(", hot: {}", l.hot.join(","));
    }
    out
}

/// A cost as an operator reads it: at most three decimals, no trailing zeros.
fn number(x: f64) -> String {
    let s = format!("{x:.3}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// How many changed units the text lists.
pub const UNITS_LISTED: usize = 50;

/// Renders a plan for a terminal: the changes, the moves against the
/// minimum, each member's units before and after, each group's balance,
/// and the first [`UNITS_LISTED`] units that change owner.
pub fn render_plan(r: &PlanReport) -> String {
    let mut out = format!(
        "plan for {} at generation {}\nmode: {} ({}); -max-moves-per-cycle {} (this command's: the holder does not record its own)\n",
        r.table,
        r.generation,
        r.assignment,
        match r.assignment_from {
            "holder" => "as the holder records it",
            _ => "this command's flags: the holder records none",
        },
        r.max_moves_per_cycle
    );
    let c = &r.changes;
    let mut asked: Vec<String> = Vec::new();
    asked.extend(c.leave.iter().map(|m| format!("leave {m}")));
    asked.extend(
        c.join
            .iter()
            .map(|j| format!("join {} (weight {})", j.member, j.weight)),
    );
    asked.extend(
        c.weight
            .iter()
            .map(|w| format!("weight {}={}", w.member, w.weight)),
    );
    asked.extend(c.cordon.iter().map(|m| format!("cordon {m}")));
    if asked.is_empty() {
        asked.push("none (the table the holder converges to as things are)".into());
    }
    out += &format!("changes: {}\n", asked.join("; "));
    out += &match r.moves {
        Some(m) => format!(
            "result: {} units change owner: {} moved between members that stay (minimum {}), {} placed\n",
            r.units_changed, m.moved, m.minimum, m.placed
        ),
        None => format!("result: {} units change owner\n", r.units_changed),
    };
    if r.batches > 1 {
        out += &format!("in {} batches (-max-moves-per-cycle)\n", r.batches);
    }
    for n in &r.notes {
        out += &format!("note: {n}\n");
    }
    for g in &r.groups {
        out += &format!(
            "\ngroup {}: {} members get units, {} to {} each (at most {:.2} from a weighted share)\n",
            g.group, g.members, g.min, g.max, g.max_off_share
        );
        let members: Vec<_> = r.members.iter().filter(|m| m.group == g.group).collect();
        if !members.is_empty() {
            out += &format!(
                "  {:<32} {:>7} {:>7} {:>7} {:>9}\n",
                "member", "before", "after", "weight", "share"
            );
        }
        for m in members {
            let share = match (m.share, m.eligible) {
                (Some(s), _) => format!("{s:.2}"),
                (None, false) => "no units".into(),
                (None, true) => "-".into(),
            };
            out += &format!(
                "  {:<32} {:>7} {:>7} {:>7} {:>9}\n",
                m.member, m.before, m.after, m.weight, share
            );
        }
    }
    if r.units_changed > 0 {
        out += &format!("\nunits that change owner ({}):\n", r.units_changed);
        for u in r.units.iter().take(UNITS_LISTED) {
            let from = if u.from.is_empty() {
                "nobody".to_string()
            } else {
                u.from.join(",")
            };
            let to = u.to.as_deref().unwrap_or("nobody");
            let kind = match u.kind {
                Kind::Moved => "moved",
                Kind::Placed => "placed",
                Kind::Unowned => "unowned",
            };
            // With several groups a unit is placed once in each: say which.
            let unit = if r.groups.len() > 1 {
                format!("{} ({})", u.unit, u.group)
            } else {
                u.unit.clone()
            };
            out += &format!("  {unit:<32} {from} -> {to} ({kind})\n");
        }
        if r.units_changed > UNITS_LISTED {
            out += &format!("  and {} more\n", r.units_changed - UNITS_LISTED);
        }
    }
    out
}
