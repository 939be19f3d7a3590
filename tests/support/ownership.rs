//! The ownership checker: from the ownership events workers print (one JSON
//! object per line, `examples/python/worker.py --events`) and a few markers
//! the test adds, it finds every moment a work unit had two owners, and every
//! listed unit left without an owner for too long. Pure: lines in, a
//! [`Report`] out.
//!
//! Lines (fields in any order, unknown fields ignored):
//!
//! ```text
//! {"event":"acquired","unit":"u","member":"m","generation":7,"unix_us":T}   m hands u to its application
//! {"event":"released","unit":"u","member":"m","generation":7,"unix_us":T}   its stop finished (T may be
//!                                                                            earlier than the line: a fenced
//!                                                                            release is dated at the hold's end)
//! {"event":"exited","member":"m","unix_us":T}      marker: m's process is gone (SIGKILL), holding nothing after T
//! {"event":"listed","units":["u",...],"unix_us":T} marker: the work-unit list from T on
//! {"event":"end","unix_us":T}                      marker: the end of the observation
//! ```
//!
//! One member's lines must come in the order it printed them, and an
//! `exited` marker after the last line of the process it ends (a member id
//! may be used again by a new process afterwards). Lines of different
//! members may interleave in any way: only `unix_us` orders them.
//!
//! Rules:
//! - **one owner**: for each unit, the intervals `[acquired, released]` of
//!   different members never overlap (touching is allowed); an interval
//!   still open runs to the end;
//! - **well formed**: every line is an event; a member never acquires a unit
//!   it holds, never releases one it does not, releases it with the
//!   generation it acquired it with, and not before it acquired it;
//! - **fencing tokens grow**: a unit's next owner acquired it with a higher
//!   generation than its previous owner did;
//! - **owned again in time**: while a unit is listed, it is never without an
//!   owner for longer than `Bounds::reown` (counted from its release, from
//!   its listing, or from its owner's exit), and an owner releases a unit
//!   at most `Bounds::reown` after it left the list. Liveness is checked only
//!   from the first `listed` marker on.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

/// How long a listed unit may stay without an owner.
#[derive(Debug, Clone, Copy)]
pub struct Bounds {
    pub reown: Duration,
}

/// One owner's hold on one unit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Interval {
    pub unit: String,
    pub member: String,
    pub generation: u64,
    pub from_us: u64,
    /// `None` while still held at the end.
    pub to_us: Option<u64>,
    /// Released by the member's fence, or ended by its exit.
    pub fenced: bool,
    pub exited: bool,
}

/// What the checker found.
#[derive(Debug, Clone, Default)]
pub struct Report {
    pub violations: Vec<String>,
    pub intervals: Vec<Interval>,
    /// Units going from one member to another (consecutive intervals of a
    /// unit with different members): the ownership changes checked.
    pub handoffs: usize,
    /// Pairs of intervals of different members compared for overlap.
    pub pairs_compared: usize,
    /// Ownerless stretches of listed units (µs), each from its start.
    pub gaps_us: Vec<u64>,
    pub fenced_releases: usize,
}

impl Report {
    pub fn max_gap(&self) -> Duration {
        Duration::from_micros(self.gaps_us.iter().copied().max().unwrap_or(0))
    }

    /// One line for a test log.
    pub fn summary(&self) -> String {
        let mut gaps = self.gaps_us.clone();
        gaps.sort_unstable();
        let pct = |p: usize| {
            gaps.get((gaps.len() * p / 100).min(gaps.len().saturating_sub(1)))
                .map_or(0, |g| g / 1000)
        };
        format!(
            "{} intervals, {} handoffs, {} interval pairs compared, {} fenced releases, {} ownerless stretches (p50 {} ms, max {} ms), {} violations",
            self.intervals.len(),
            self.handoffs,
            self.pairs_compared,
            self.fenced_releases,
            gaps.len(),
            pct(50),
            self.max_gap().as_millis(),
            self.violations.len()
        )
    }
}

/// Microseconds since the Unix epoch, as the workers print them.
pub fn unix_us_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970")
        .as_micros() as u64
}

/// An `acquired` or `released` line (for owners the test observes itself).
pub fn event_line(event: &str, unit: &str, member: &str, generation: u64, unix_us: u64) -> String {
    serde_json::json!({"event": event, "unit": unit, "member": member, "generation": generation, "unix_us": unix_us})
        .to_string()
}

/// The events of an owner the test observes itself (a Rust member's
/// assignment, an old-protocol worker's reads): from the units it `held`
/// (unit → generation acquired) to the units it holds `now`, at `unix_us`.
/// Updates `held`; releases come before acquisitions.
pub fn change_lines(
    member: &str,
    held: &mut BTreeMap<String, u64>,
    now: &[String],
    generation: u64,
    unix_us: u64,
) -> Vec<String> {
    let mut lines = Vec::new();
    let keep: BTreeSet<&String> = now.iter().collect();
    held.retain(|u, g| {
        let stays = keep.contains(u);
        if !stays {
            lines.push(event_line("released", u, member, *g, unix_us));
        }
        stays
    });
    for u in now {
        if !held.contains_key(u) {
            held.insert(u.clone(), generation);
            lines.push(event_line("acquired", u, member, generation, unix_us));
        }
    }
    lines
}

pub fn exited_line(member: &str, unix_us: u64) -> String {
    serde_json::json!({"event": "exited", "member": member, "unix_us": unix_us}).to_string()
}

pub fn listed_line(units: &[String], unix_us: u64) -> String {
    serde_json::json!({"event": "listed", "units": units, "unix_us": unix_us}).to_string()
}

pub fn end_line(unix_us: u64) -> String {
    serde_json::json!({"event": "end", "unix_us": unix_us}).to_string()
}

enum Line {
    Own {
        acquired: bool,
        unit: String,
        member: String,
        generation: u64,
        at: u64,
        fenced: bool,
    },
    Exited {
        member: String,
        at: u64,
    },
    Listed {
        units: BTreeSet<String>,
        at: u64,
    },
    End {
        at: u64,
    },
}

fn parse(line: &str) -> Result<Line, String> {
    let v: serde_json::Value =
        serde_json::from_str(line).map_err(|e| format!("not JSON ({e}): {line:?}"))?;
    let text = |k: &str| {
        v.get(k)
            .and_then(|x| x.as_str())
            .map(str::to_string)
            .ok_or_else(|| format!("no text field {k:?}: {line}"))
    };
    let number = |k: &str| {
        v.get(k)
            .and_then(|x| x.as_u64())
            .ok_or_else(|| format!("no whole-number field {k:?}: {line}"))
    };
    let at = number("unix_us")?;
    match text("event")?.as_str() {
        e @ ("acquired" | "released") => Ok(Line::Own {
            acquired: e == "acquired",
            unit: text("unit")?,
            member: text("member")?,
            generation: number("generation")?,
            at,
            fenced: v.get("reason").and_then(|r| r.as_str()) == Some("fenced"),
        }),
        "exited" => Ok(Line::Exited {
            member: text("member")?,
            at,
        }),
        "listed" => Ok(Line::Listed {
            units: v
                .get("units")
                .and_then(|u| u.as_array())
                .ok_or_else(|| format!("no units array: {line}"))?
                .iter()
                .map(|u| u.as_str().map(str::to_string))
                .collect::<Option<_>>()
                .ok_or_else(|| format!("a unit that is not text: {line}"))?,
            at,
        }),
        "end" => Ok(Line::End { at }),
        other => Err(format!("unknown event {other:?}: {line}")),
    }
}

/// Checks `lines` (see the module documentation).
pub fn check(lines: &[String], bounds: &Bounds) -> Report {
    let mut report = Report::default();
    let mut open: HashMap<String, BTreeMap<String, (u64, u64)>> = HashMap::new();
    let mut listings: Vec<(u64, BTreeSet<String>)> = Vec::new();
    let mut end = 0u64;
    for line in lines {
        let parsed = match parse(line) {
            Ok(l) => l,
            Err(e) => {
                report.violations.push(e);
                continue;
            }
        };
        match parsed {
            Line::Own {
                acquired: true,
                unit,
                member,
                generation,
                at,
                ..
            } => {
                end = end.max(at);
                let held = open.entry(member.clone()).or_default();
                if held.contains_key(&unit) {
                    report
                        .violations
                        .push(format!("{member} acquired {unit} again while holding it"));
                }
                held.insert(unit, (generation, at));
            }
            Line::Own {
                acquired: false,
                unit,
                member,
                generation,
                at,
                fenced,
            } => {
                end = end.max(at);
                match open.get_mut(&member).and_then(|h| h.remove(&unit)) {
                    None => report
                        .violations
                        .push(format!("{member} released {unit}, which it did not hold")),
                    Some((g, from)) => {
                        if g != generation {
                            report.violations.push(format!(
                                "{member} released {unit} with generation {generation}, acquired with {g}"
                            ));
                        }
                        if at < from {
                            report.violations.push(format!(
                                "{member} released {unit} {} µs before it acquired it",
                                from - at
                            ));
                        }
                        report.fenced_releases += usize::from(fenced);
                        report.intervals.push(Interval {
                            unit,
                            member,
                            generation: g,
                            from_us: from,
                            to_us: Some(at.max(from)),
                            fenced,
                            exited: false,
                        });
                    }
                }
            }
            Line::Exited { member, at } => {
                end = end.max(at);
                for (unit, (generation, from)) in open.remove(&member).unwrap_or_default() {
                    report.intervals.push(Interval {
                        unit,
                        member: member.clone(),
                        generation,
                        from_us: from,
                        to_us: Some(at.max(from)),
                        fenced: false,
                        exited: true,
                    });
                }
            }
            Line::Listed { units, at } => {
                end = end.max(at);
                listings.push((at, units));
            }
            Line::End { at } => end = end.max(at),
        }
    }
    for (member, held) in open {
        for (unit, (generation, from)) in held {
            report.intervals.push(Interval {
                unit,
                member: member.clone(),
                generation,
                from_us: from,
                to_us: None,
                fenced: false,
                exited: false,
            });
        }
    }
    let mut by_unit: BTreeMap<&str, Vec<&Interval>> = BTreeMap::new();
    for i in &report.intervals {
        by_unit.entry(i.unit.as_str()).or_default().push(i);
    }
    listings.sort_by_key(|(at, _)| *at);
    let mut violations = Vec::new();
    for (unit, intervals) in &mut by_unit {
        intervals.sort_by_key(|i| (i.from_us, i.to_us.unwrap_or(u64::MAX)));
        let until = |i: &Interval| i.to_us.unwrap_or(u64::MAX);
        for (n, a) in intervals.iter().enumerate() {
            for b in &intervals[n + 1..] {
                if a.member == b.member {
                    continue;
                }
                report.pairs_compared += 1;
                if b.from_us < until(a) {
                    violations.push(format!(
                        "{unit} had two owners for {} µs: {} (generation {}, {}..{}) and {} (generation {}, {}..{})",
                        until(a).min(until(b)) - b.from_us,
                        a.member,
                        a.generation,
                        a.from_us,
                        a.to_us.map_or("end".to_string(), |t| t.to_string()),
                        b.member,
                        b.generation,
                        b.from_us,
                        b.to_us.map_or("end".to_string(), |t| t.to_string()),
                    ));
                }
            }
        }
        for w in intervals.windows(2) {
            if w[0].member != w[1].member {
                report.handoffs += 1;
                if w[1].generation <= w[0].generation {
                    violations.push(format!(
                        "{unit}: {} acquired it with generation {} after {} had it with generation {}",
                        w[1].member, w[1].generation, w[0].member, w[0].generation
                    ));
                }
            }
        }
        liveness(
            unit,
            intervals,
            &listings,
            end,
            bounds,
            &mut report.gaps_us,
            &mut violations,
        );
    }
    report.violations.extend(violations);
    report
}

/// The "owned again in time" rule for one unit.
fn liveness(
    unit: &str,
    intervals: &[&Interval],
    listings: &[(u64, BTreeSet<String>)],
    end: u64,
    bounds: &Bounds,
    gaps: &mut Vec<u64>,
    violations: &mut Vec<String>,
) {
    let bound = bounds.reown.as_micros() as u64;
    // Stretches in which the unit is listed, and in which it is not:
    // (from, to, listed), merged across markers that do not change it.
    let mut periods: Vec<(u64, u64, bool)> = Vec::new();
    for (n, (at, units)) in listings.iter().enumerate() {
        let to = listings.get(n + 1).map_or(end, |(t, _)| *t).max(*at);
        let listed = units.contains(unit);
        match periods.last_mut() {
            Some(p) if p.2 == listed => p.1 = to,
            _ => periods.push((*at, to, listed)),
        }
    }
    for &(from, to, _) in periods.iter().filter(|p| !p.2) {
        // Not listed: every hold ends by `from + bound`.
        for i in intervals {
            let held = i.to_us.unwrap_or(end).min(to);
            if i.from_us < to && held > from + bound {
                violations.push(format!(
                    "{unit}: {} still held it {} ms after it left the list",
                    i.member,
                    (held - from) / 1000
                ));
            }
        }
    }
    for &(from, to, _) in periods.iter().filter(|p| p.2) {
        // Walk the covered stretches in order of start.
        let mut covered = from;
        for i in intervals {
            let (a, b) = (i.from_us, i.to_us.unwrap_or(u64::MAX));
            if b <= covered || a >= to {
                continue;
            }
            if a > covered {
                gap(unit, covered, a, bound, gaps, violations);
            }
            covered = covered.max(b);
        }
        if covered < to {
            gap(unit, covered, to, bound, gaps, violations);
        }
    }
}

fn gap(
    unit: &str,
    from: u64,
    to: u64,
    bound: u64,
    gaps: &mut Vec<u64>,
    violations: &mut Vec<String>,
) {
    gaps.push(to - from);
    if to - from > bound {
        violations.push(format!(
            "{unit} had no owner for {} ms from {from} (bound {} ms)",
            (to - from) / 1000,
            bound / 1000
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const B: Bounds = Bounds {
        reown: Duration::from_secs(1),
    };
    const S: u64 = 1_000_000;

    #[test]
    fn observed_changes_release_first_then_acquire_with_their_generation() {
        let mut held = BTreeMap::from([("a".to_string(), 1), ("b".to_string(), 1)]);
        let lines = change_lines("m", &mut held, &["b".into(), "c".into()], 3, 7);
        assert_eq!(
            lines,
            [
                event_line("released", "a", "m", 1, 7),
                event_line("acquired", "c", "m", 3, 7),
            ]
        );
        assert_eq!(
            held,
            BTreeMap::from([("b".to_string(), 1), ("c".to_string(), 3)])
        );
    }

    fn acq(u: &str, m: &str, g: u64, t: u64) -> String {
        event_line("acquired", u, m, g, t)
    }
    fn rel(u: &str, m: &str, g: u64, t: u64) -> String {
        event_line("released", u, m, g, t)
    }
    fn units(u: &[&str]) -> Vec<String> {
        u.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn a_clean_handoff_passes_and_is_counted() {
        let r = check(
            &[
                listed_line(&units(&["u"]), 0),
                acq("u", "a", 1, 10),
                rel("u", "a", 1, 100),
                acq("u", "b", 3, 100), // touching is fine
                end_line(200),
            ],
            &B,
        );
        assert!(r.violations.is_empty(), "{:?}", r.violations);
        assert_eq!((r.intervals.len(), r.handoffs, r.pairs_compared), (2, 1, 1));
        assert_eq!(r.gaps_us, vec![10]);
    }

    #[test]
    fn an_overlap_is_found_whatever_the_line_order() {
        let lines = vec![
            acq("u", "b", 3, 50),
            acq("u", "a", 1, 10),
            rel("u", "a", 1, 60),
        ];
        let r = check(&lines, &B);
        assert_eq!(r.violations.len(), 1, "{:?}", r.violations);
        assert!(
            r.violations[0].contains("two owners for 10 µs"),
            "{:?}",
            r.violations
        );
    }

    #[test]
    fn an_open_interval_runs_to_the_end() {
        let r = check(&[acq("u", "a", 1, 10), acq("u", "b", 2, 5 * S)], &B);
        assert_eq!(r.violations.len(), 1, "{:?}", r.violations);
    }

    #[test]
    fn an_exit_closes_the_members_intervals_and_its_id_can_come_back() {
        let r = check(
            &[
                acq("u", "a", 1, 10),
                exited_line("a", 100),
                acq("u", "b", 2, 150),
                rel("u", "b", 2, 300),
                acq("u", "a", 4, 300),
            ],
            &B,
        );
        assert!(r.violations.is_empty(), "{:?}", r.violations);
        assert_eq!(r.handoffs, 2);
        assert!(r.intervals.iter().any(|i| i.exited && i.to_us == Some(100)));
    }

    #[test]
    fn a_fenced_release_is_dated_at_the_holds_end_even_when_printed_later() {
        // a froze; b got the unit after a's hold ended (at 2 s); a, thawed,
        // prints its release later, dated at the hold's end.
        let fenced = r#"{"event":"released","unit":"u","member":"a","generation":1,"unix_us":2000000,"reason":"fenced"}"#;
        let r = check(
            &[
                acq("u", "a", 1, 10),
                acq("u", "b", 5, 2_300_000),
                fenced.to_string(),
            ],
            &B,
        );
        assert!(r.violations.is_empty(), "{:?}", r.violations);
        assert_eq!(r.fenced_releases, 1);
        // Dated after b's acquisition, it would be an overlap.
        let late = fenced.replace("2000000", "2400000");
        let r = check(
            &[acq("u", "a", 1, 10), acq("u", "b", 5, 2_300_000), late],
            &B,
        );
        assert_eq!(r.violations.len(), 1, "{:?}", r.violations);
    }

    #[test]
    fn malformed_lines_and_unmatched_events_are_violations() {
        let r = check(
            &[
                "worker started".to_string(),
                r#"{"event":"acquired","unit":"u"}"#.to_string(),
                r#"{"event":"moved","unix_us":1}"#.to_string(),
                rel("u", "a", 1, 10),
                acq("v", "a", 1, 10),
                acq("v", "a", 1, 20),
                rel("v", "a", 2, 30),
                acq("w", "a", 1, 50),
                rel("w", "a", 1, 40),
            ],
            &B,
        );
        let v = r.violations.join("\n");
        for needle in [
            "not JSON",
            "no whole-number field \"unix_us\"",
            "unknown event \"moved\"",
            "a released u, which it did not hold",
            "a acquired v again",
            "with generation 2, acquired with 1",
            "10 µs before it acquired it",
        ] {
            assert!(v.contains(needle), "{needle:?} not in:\n{v}");
        }
        assert_eq!(r.violations.len(), 7, "{v}");
    }

    #[test]
    fn the_next_owner_needs_a_higher_generation() {
        let r = check(
            &[
                acq("u", "a", 4, 10),
                rel("u", "a", 4, 20),
                acq("u", "b", 4, 30),
                rel("u", "b", 4, 40),
                acq("u", "b", 4, 50), // the same member again: fine
            ],
            &B,
        );
        assert_eq!(r.violations.len(), 1, "{:?}", r.violations);
        assert!(r.violations[0].contains("generation 4 after a had it with generation 4"));
    }

    #[test]
    fn a_listed_unit_must_be_owned_again_within_the_bound() {
        let base = |t: u64| {
            vec![
                listed_line(&units(&["u", "v"]), 0),
                acq("u", "a", 1, 100),
                acq("v", "a", 1, 100),
                rel("u", "a", 1, S),
                acq("u", "b", 2, S + 900_000),
                end_line(t),
            ]
        };
        // v is held all along; u waits 0.9 s: fine. At the end nothing waits.
        let r = check(&base(3 * S), &B);
        assert!(r.violations.is_empty(), "{:?}", r.violations);
        assert_eq!(r.gaps_us.iter().max(), Some(&900_000));
        // A unit nobody takes.
        let mut lines = base(3 * S);
        lines.push(rel("v", "a", 1, S));
        let r = check(&lines, &B);
        assert_eq!(r.violations.len(), 1, "{:?}", r.violations);
        assert!(r.violations[0].contains("v had no owner for 2000 ms"));
        // A unit listed later must be taken within the bound too.
        let lines = vec![
            listed_line(&units(&[]), 0),
            listed_line(&units(&["u"]), S),
            acq("u", "a", 1, 2 * S + 500_000),
        ];
        let r = check(&lines, &B);
        assert_eq!(r.violations.len(), 1, "{:?}", r.violations);
        assert!(
            r.violations[0].contains("from 1000000"),
            "{:?}",
            r.violations
        );
    }

    #[test]
    fn a_unit_that_left_the_list_must_be_released_within_the_bound() {
        let lines = |release: u64| {
            vec![
                listed_line(&units(&["u"]), 0),
                acq("u", "a", 1, 10),
                listed_line(&units(&[]), S),
                rel("u", "a", 1, release),
                end_line(5 * S),
            ]
        };
        let r = check(&lines(S + 500_000), &B);
        assert!(r.violations.is_empty(), "{:?}", r.violations);
        let r = check(&lines(3 * S), &B);
        assert_eq!(r.violations.len(), 1, "{:?}", r.violations);
        assert!(r.violations[0].contains("still held it 2000 ms after it left the list"));
        // Unlisted units need no owner.
        let r = check(
            &[
                listed_line(&units(&["u"]), 0),
                acq("u", "a", 1, 10),
                rel("u", "a", 1, 20),
                listed_line(&units(&[]), 30),
                end_line(10 * S),
            ],
            &B,
        );
        assert!(r.violations.is_empty(), "{:?}", r.violations);
    }
}
