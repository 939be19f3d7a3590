//! The operator's controls in force (`{T}:controls`, `core::controls`), as
//! `distributor status`, `/api/status` and the page show them.

use serde::Serialize;

use crate::core::controls::{Controls, MemberControl};

/// How many pins a status report lists.
pub const PINS_SHOWN: usize = 20;

/// The controls in force; `None` in a report when there are none.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct ControlsReport {
    /// Unix ms since voluntary moves are paused (`0`: not recorded).
    pub paused_since_ms: Option<u64>,
    /// For how long, when the time is recorded (moves with the clock).
    pub paused_for_ms: Option<u64>,
    /// Members that get no new units, sorted.
    pub cordoned: Vec<String>,
    /// Members whose units an operator moves away, sorted.
    pub drained: Vec<String>,
    /// Pinned units: how many, and the first [`PINS_SHOWN`] (unit, member).
    pub pins: usize,
    pub pinned: Vec<Pin>,
    /// Entries skipped as unreadable.
    pub unreadable: usize,
}

#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Pin {
    pub unit: String,
    pub member: String,
}

/// The report of the `{T}:controls` hash as read.
pub fn controls_of<'a>(
    raw: impl IntoIterator<Item = (&'a String, &'a String)>,
    now_ms: u64,
) -> Option<ControlsReport> {
    let pairs: Vec<(String, String)> = raw
        .into_iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    if pairs.is_empty() {
        return None;
    }
    let (c, unreadable) = Controls::decode(pairs);
    Some(report(&c, unreadable.len(), now_ms))
}

fn report(c: &Controls, unreadable: usize, now_ms: u64) -> ControlsReport {
    let list = |k| c.with(k).map(str::to_string).collect();
    ControlsReport {
        paused_since_ms: c.paused_since,
        paused_for_ms: c
            .paused_since
            .filter(|&s| s > 0)
            .map(|s| now_ms.saturating_sub(s)),
        cordoned: list(MemberControl::Cordon),
        drained: list(MemberControl::Drain),
        pins: c.pins.len(),
        pinned: c
            .pins
            .iter()
            .take(PINS_SHOWN)
            .map(|(u, m)| Pin {
                unit: u.clone(),
                member: m.clone(),
            })
            .collect(),
        unreadable,
    }
}

/// The member's control as a status line shows it, if any.
pub fn control_of(c: &ControlsReport, member: &str) -> Option<&'static str> {
    if c.drained.iter().any(|m| m == member) {
        Some("drained")
    } else if c.cordoned.iter().any(|m| m == member) {
        Some("cordoned")
    } else {
        None
    }
}

/// `controls: ...` lines for `distributor status` (none without controls).
pub fn controls_text(c: &Option<ControlsReport>) -> String {
    let Some(c) = c else { return String::new() };
    let mut out = String::new();
    if c.paused_since_ms.is_some() {
        let ago = c
            .paused_for_ms
            .map(|ms| format!(" for {}s", ms / 1000))
            .unwrap_or_default();
        out += &format!(
            "paused{ago}: no voluntary moves (joins, weights, costs, balance); failures and drains are still handled\n"
        );
    }
    if !c.cordoned.is_empty() {
        out += &format!("cordoned: {}\n", c.cordoned.join(", "));
    }
    if !c.drained.is_empty() {
        out += &format!("drained: {}\n", c.drained.join(", "));
    }
    if c.pins > 0 {
        let shown: Vec<String> = c
            .pinned
            .iter()
            .map(|p| format!("{}→{}", p.unit, p.member))
            .collect();
        let more = c.pins - shown.len();
        let more = if more > 0 {
            format!(", … {more} more")
        } else {
            String::new()
        };
        out += &format!("pinned ({}): {}{more}\n", c.pins, shown.join(", "));
    }
    if c.unreadable > 0 {
        out += &format!("controls: {} unreadable entries skipped\n", c.unreadable);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_control_in_force_is_shown() {
        let raw: Vec<(String, String)> = [
            ("pause", "1000"),
            ("member:a:1", "cordon 5"),
            ("member:b:1", "drain 6"),
            ("pin:u1", "a:1"),
            ("junk", "x"),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let c = controls_of(raw.iter().map(|(k, v)| (k, v)), 11_000).unwrap();
        assert_eq!(control_of(&c, "a:1"), Some("cordoned"));
        assert_eq!(control_of(&c, "b:1"), Some("drained"));
        assert_eq!(control_of(&c, "c:1"), None);
        let text = controls_text(&Some(c));
        assert_eq!(
            text,
            "paused for 10s: no voluntary moves (joins, weights, costs, balance); failures and drains are still handled\n\
             cordoned: a:1\ndrained: b:1\npinned (1): u1→a:1\ncontrols: 1 unreadable entries skipped\n"
        );
        assert_eq!(controls_of(std::iter::empty(), 0), None);
    }
}
