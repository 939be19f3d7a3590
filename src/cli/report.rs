//! Operator reports: what `distributor status` and `distributor table` print.
//!
//! Pure: an [`Overview`] read from Redis in, serializable reports and their text
//! rendering out. Nothing here prints a secret: reports hold key names, member
//! addresses, counts and replica ids, never the Redis URL.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::core::handoff;
use crate::core::inputs::{RawInputs, Rejection, excerpt, normalize};
use crate::core::liveness::Health;
use crate::core::status::Overview;
use crate::core::table::{MatchingTable, Moves, decode_row};

/// What `distributor status` reports. `G` is how each group is shown: with
/// its member lists ([`GroupReport`], what the text rendering and the status
/// page's change tracking read) or as counts ([`GroupCounts`]: the
/// [`StatusSummary`] that `/api/status` serves and that `status --json`
/// prints beside the member list, see [`StatusJson`]).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct StatusReport<G = GroupReport> {
    pub table: String,
    pub generation: u64,
    pub last_write: Option<LastWrite>,
    pub lease: LeaseReport,
    /// Replicas as recorded by their census steps.
    pub replicas: Vec<ReplicaReport>,
    pub groups: Vec<G>,
    pub work_units: usize,
    /// Distinct invalid entries of the units list.
    pub invalid_work_units: usize,
    /// Units on their way between owners (`{T}:transit`).
    pub in_transit: usize,
    /// The first [`TRANSIT_SHOWN`] of them, oldest first.
    pub transit: Vec<TransitReport>,
    /// `-assignment` of the last table write (`ring` or `sticky`; `None`
    /// before the first write of a version that records it).
    pub assignment: Option<String>,
    /// The last solve that moved or placed units.
    pub last_change: Option<ChangeReport>,
}

/// The last solve that changed the table, as the holder recorded it.
#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq)]
pub struct ChangeReport {
    /// Units that left a live member for another.
    pub moved: usize,
    /// The least any balanced table could have moved.
    pub minimum: usize,
    /// Units without a live owner (new, or of members that left) given one.
    pub placed: usize,
}

/// The mode and last change recorded in `{T}:meta`.
fn assignment_of(o: &Overview) -> (Option<String>, Option<ChangeReport>) {
    let change = o
        .meta
        .get("last_change")
        .and_then(|v| Moves::decode(v))
        .map(|m| ChangeReport {
            moved: m.moved,
            minimum: m.minimum,
            placed: m.placed,
        });
    (o.meta.get("assignment").cloned(), change)
}

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

/// How many units in transit a status report lists.
pub const TRANSIT_SHOWN: usize = 20;

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct TransitReport {
    pub unit: String,
    pub group: String,
    pub from: Vec<String>,
    pub to: Option<String>,
    /// The generation that revoked it.
    pub revoked_at: u64,
    pub for_ms: u64,
}

/// A member's own report (handoff protocol).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ProtocolReport {
    /// The highest generation it applied.
    pub applied: u64,
    /// How many generations the table is ahead of it.
    pub behind: u64,
    pub draining: bool,
    pub deadline_ms: u64,
    pub weight: u32,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct LastWrite {
    pub unix_ms: u64,
    pub by: String,
    pub epoch: u64,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct LeaseReport {
    /// The current holder, if the lease is held.
    pub holder: Option<String>,
    pub epoch: u64,
    pub expires_in_ms: Option<u64>,
    /// While the lease is held: how a crash of its holder would be noticed,
    /// `fast` (standbys watch the holder's Redis connection) or `ttl (why)`.
    pub takeover: Option<String>,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ReplicaReport {
    pub id: String,
    pub index: Option<u64>,
    pub replicas: Option<u64>,
    pub seen_ms_ago: u64,
    /// While it holds the lease but does not act: why (it cannot read what
    /// it must know before it plans).
    pub blocked: Option<String>,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct GroupReport {
    pub name: String,
    pub live: Vec<MemberReport>,
    pub failed: Vec<MemberReport>,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct MemberReport {
    pub id: String,
    pub units: usize,
    /// Why it gets no work, for failed members.
    pub reason: Option<String>,
    pub failing_for_ms: Option<u64>,
    /// Its own report, if it speaks the handoff protocol; `None` for a
    /// member that only reads its row (it gets `-handoff-delay`).
    pub protocol: Option<ProtocolReport>,
    /// Its `{T}:members` entry, when it cannot be read.
    pub unreadable_report: Option<String>,
    /// Its capacity weight: the operator's override, else its report's, 1
    /// without either.
    pub weight: u32,
}

/// Builds the status report from what Redis holds.
pub fn status(o: &Overview, table_key: &str, now_ms: u64) -> StatusReport {
    let num = |k: &str| o.meta.get(k).and_then(|v| v.parse::<u64>().ok());
    let (assignment, last_change) = assignment_of(o);
    let threshold = num("failure_threshold").unwrap_or(1).max(1) as u32;
    let last_write = num("written_at_ms").map(|unix_ms| LastWrite {
        unix_ms,
        by: o.meta.get("writer").cloned().unwrap_or_default(),
        epoch: num("epoch").unwrap_or(0),
    });
    let holder = o
        .lease_pttl
        .and(o.meta.get("holder").filter(|h| !h.is_empty()).cloned());
    let replicas = o
        .replicas
        .iter()
        .map(|(id, v)| {
            let mut it = v.split(' ');
            let index = it.next().and_then(|x| x.parse().ok());
            let replicas = it.next().and_then(|x| x.parse().ok());
            let seen = it.next().and_then(|x| x.parse::<u64>().ok()).unwrap_or(0);
            ReplicaReport {
                id: id.clone(),
                index,
                replicas,
                seen_ms_ago: now_ms.saturating_sub(seen),
                blocked: crate::core::census::blocked_of(v).map(str::to_string),
            }
        })
        .collect();
    // The daemon's own reading of the lists: the same validation, the same
    // rule for a member listed in two groups, so that status never disagrees
    // with what the holder does.
    let inputs = normalize(&RawInputs {
        groups: o.groups.clone(),
        units_key: String::new(),
        units: o.units.clone(),
    });
    let units_of = |id: &str| o.table.get(id).map_or(0, |v| decode_row(v).len());
    let generation = num("generation").unwrap_or(0);
    let member = |id: &str, reason: Option<String>| {
        let raw = o.reports.get(id);
        let decoded = raw.and_then(|v| handoff::MemberReport::decode(v));
        MemberReport {
            id: id.to_string(),
            units: units_of(id),
            reason,
            failing_for_ms: None,
            protocol: decoded.map(|r| ProtocolReport {
                applied: r.applied,
                behind: generation.saturating_sub(r.applied),
                draining: r.draining,
                deadline_ms: r.deadline.as_millis() as u64,
                weight: r.weight,
            }),
            weight: o.weight(id),
            unreadable_report: raw
                .filter(|_| decoded.is_none())
                .map(|v| excerpt(v.as_bytes())),
        }
    };
    let mut groups = Vec::new();
    for g in &inputs.groups {
        let mut report = GroupReport {
            name: g.name.clone(),
            live: vec![],
            failed: vec![],
        };
        for id in &g.members {
            match o.liveness.get(id).and_then(|v| Health::decode(v)) {
                Some(h) if h.answered && h.failures < threshold => {
                    report.live.push(member(id, None))
                }
                Some(h) => {
                    let streak = if h.answered {
                        format!("{} failed pings in a row", h.failures)
                    } else {
                        "has never answered a ping".into()
                    };
                    let mut m = member(
                        id,
                        Some(match &h.reason {
                            Some(why) => format!("{streak}: {why}"),
                            None => streak,
                        }),
                    );
                    m.failing_for_ms = h.failing_since_ms.map(|s| now_ms.saturating_sub(s));
                    report.failed.push(m);
                }
                None => report
                    .failed
                    .push(member(id, Some("not pinged yet".into()))),
            }
        }
        for bad in &g.malformed {
            let why = format!("malformed address: {}", bad.reason);
            report.failed.push(member(&bad.name, Some(why)));
        }
        for r in &inputs.rejections {
            if let Rejection::DuplicateMember {
                member: id,
                kept_in,
                dropped_from,
            } = r
                && *dropped_from == g.name
            {
                let why =
                    format!("listed in {kept_in:?} too; works for {kept_in:?} (the first by name)");
                report.failed.push(member(id, Some(why)));
            }
        }
        groups.push(report);
    }
    let invalid = inputs
        .rejections
        .iter()
        .filter(|r| r.kind() == "unit")
        .count();
    let mut transit: Vec<TransitReport> = o
        .transit
        .iter()
        .map(|(field, value)| {
            let (group, unit) = handoff::parse_transit_field(field).unwrap_or(("?", field));
            let mut it = value.split(' ');
            let revoked_at = it.next().and_then(|x| x.parse().ok()).unwrap_or(0);
            let since: u64 = it.next().and_then(|x| x.parse().ok()).unwrap_or(now_ms);
            let to = it.next().filter(|t| *t != "-").map(str::to_string);
            let from = it
                .next()
                .map(|f| f.split(',').map(str::to_string).collect())
                .unwrap_or_default();
            TransitReport {
                unit: unit.to_string(),
                group: group.to_string(),
                from,
                to,
                revoked_at,
                for_ms: now_ms.saturating_sub(since),
            }
        })
        .collect();
    transit.sort_by(|a, b| b.for_ms.cmp(&a.for_ms).then_with(|| a.unit.cmp(&b.unit)));
    let in_transit = transit.len();
    transit.truncate(TRANSIT_SHOWN);
    StatusReport {
        table: table_key.to_string(),
        generation,
        last_write,
        lease: LeaseReport {
            holder,
            epoch: o.epoch,
            expires_in_ms: o.lease_pttl.map(|d| d.as_millis() as u64),
            takeover: o.lease_pttl.map(|_| takeover(o)),
        },
        replicas,
        groups,
        work_units: inputs.units.len(),
        invalid_work_units: invalid,
        in_transit,
        transit,
        assignment,
        last_change,
    }
}

/// [`StatusReport`] without its member lists: what `/api/status` of the
/// status page serves (the members come a page at a time from
/// `/api/members`). Every other field is the report's, under the same name.
pub type StatusSummary = StatusReport<GroupCounts>;

/// What `distributor status --json` prints: `/api/status`'s `status`, field
/// for field, and every member as `/api/members` lists them (the same rows in
/// the same order), all at once instead of a page at a time. One document
/// shape for the CLI and the API: a field never holds a list in one and a
/// count in the other.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct StatusJson {
    #[serde(flatten)]
    pub status: StatusSummary,
    pub members: Vec<MemberRow>,
}

#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct GroupCounts {
    pub name: String,
    pub live: usize,
    pub failed: usize,
    /// Live members that reported draining.
    pub draining: usize,
}

/// One member as `/api/members` lists it: its [`MemberReport`], its group
/// and whether it is live.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct MemberRow {
    pub group: String,
    pub live: bool,
    #[serde(flatten)]
    pub member: MemberReport,
}

impl StatusReport {
    /// `distributor status --json` (see [`StatusJson`]).
    pub fn json(&self) -> StatusJson {
        StatusJson {
            status: self.summary(),
            members: self.member_rows(),
        }
    }

    pub fn summary(&self) -> StatusSummary {
        StatusReport {
            table: self.table.clone(),
            generation: self.generation,
            last_write: self.last_write.clone(),
            lease: self.lease.clone(),
            replicas: self.replicas.clone(),
            groups: self
                .groups
                .iter()
                .map(|g| GroupCounts {
                    name: g.name.clone(),
                    live: g.live.len(),
                    failed: g.failed.len(),
                    draining: g
                        .live
                        .iter()
                        .filter(|m| m.protocol.as_ref().is_some_and(|p| p.draining))
                        .count(),
                })
                .collect(),
            work_units: self.work_units,
            invalid_work_units: self.invalid_work_units,
            in_transit: self.in_transit,
            transit: self.transit.clone(),
            assignment: self.assignment.clone(),
            last_change: self.last_change,
        }
    }

    /// Every member, sorted by group then id.
    pub fn member_rows(&self) -> Vec<MemberRow> {
        let mut rows: Vec<MemberRow> = self
            .groups
            .iter()
            .flat_map(|g| {
                let live = g.live.iter().map(move |m| (g, true, m));
                let failed = g.failed.iter().map(move |m| (g, false, m));
                live.chain(failed)
            })
            .map(|(g, live, m)| MemberRow {
                group: g.name.clone(),
                live,
                member: m.clone(),
            })
            .collect();
        rows.sort_by(|a, b| (&a.group, &a.member.id).cmp(&(&b.group, &b.member.id)));
        rows
    }
}

/// What a member's handoff report says, for the text rendering.
fn protocol_text(m: &MemberReport, generation: u64) -> String {
    match (&m.protocol, &m.unreadable_report) {
        (Some(p), _) => {
            let lag = if p.behind == 0 {
                String::new()
            } else {
                format!(" ({} behind generation {generation})", p.behind)
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

/// How a crash of the current holder would be noticed: `fast` when it
/// recorded the Redis connection it renews on (`meta.holder_conn`, bound to
/// its token), so that standbys take over as soon as that connection closes;
/// else only when the lease expires. (A standby that may not ask about
/// connections falls back to the TTL too; each replica's status says so.)
fn takeover(o: &Overview) -> String {
    let recorded = o.lease_token.as_ref().is_some_and(|token| {
        o.meta
            .get("holder_conn")
            .and_then(|c| c.strip_prefix(token.as_str()))
            .and_then(|c| c.strip_prefix(' '))
            .is_some_and(|id| !id.is_empty() && id.bytes().all(|b| b.is_ascii_digit()))
    });
    if recorded {
        "fast".into()
    } else {
        "ttl (the holder recorded no lease connection: CLIENT not permitted to it, \
         Redis Cluster, or an older version)"
            .into()
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
                "  live    {:<28} {} units{}\n",
                m.id,
                m.units,
                protocol_text(m, r.generation)
            );
        }
        for m in &g.failed {
            let since = m
                .failing_for_ms
                .map(|ms| format!(", for {}", ago(ms)))
                .unwrap_or_default();
            out += &format!(
                "  failed  {:<28} {}{}\n",
                m.id,
                m.reason.as_deref().unwrap_or(""),
                since
            );
        }
    }
    out += &format!(
        "work units: {} valid, {} invalid\n",
        r.work_units, r.invalid_work_units
    );
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

/// What `distributor table` reports: the matching table's rows. A member's
/// fields are named as in `/api/members` and `status --json` (`id`, `units`,
/// `weight`), and `total` counts the rows as `/api/members`' `total` counts
/// its list.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct TableReport {
    pub table: String,
    pub generation: u64,
    pub rows: Vec<TableRow>,
    /// Rows (members with a row: the live ones).
    pub total: usize,
    pub assignments: usize,
    pub min: usize,
    pub max: usize,
    /// `max - min`: 0 or 1 in a single group with equal weights.
    pub balance: usize,
    pub assignment: Option<String>,
    pub last_change: Option<ChangeReport>,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct TableRow {
    pub id: String,
    pub units: usize,
    /// Percent of all assignments.
    pub share: f64,
    /// Its capacity weight: the operator's override, else its report's, 1
    /// without either.
    pub weight: u32,
}

pub fn table(o: &Overview, table_key: &str) -> TableReport {
    let (assignment, last_change) = assignment_of(o);
    let t = MatchingTable::from_rows(o.table.clone());
    let counts: BTreeMap<&str, usize> = t
        .rows()
        .iter()
        .map(|(m, v)| (m.as_str(), decode_row(v).len()))
        .collect();
    let assignments: usize = counts.values().sum();
    let rows = counts
        .iter()
        .map(|(m, n)| TableRow {
            id: m.to_string(),
            units: *n,
            weight: o.weight(m),
            share: if assignments == 0 {
                0.0
            } else {
                100.0 * *n as f64 / assignments as f64
            },
        })
        .collect();
    let min = counts.values().copied().min().unwrap_or(0);
    let max = counts.values().copied().max().unwrap_or(0);
    TableReport {
        table: table_key.to_string(),
        generation: o
            .meta
            .get("generation")
            .and_then(|g| g.parse().ok())
            .unwrap_or(0),
        rows,
        total: counts.len(),
        assignments,
        min,
        max,
        balance: max - min,
        assignment,
        last_change,
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn overview() -> Overview {
        let s = |a: &str, b: &str| (a.to_string(), b.to_string());
        Overview {
            meta: [
                s("generation", "7"),
                s("holder", "r1"),
                s("written_at_ms", "1000"),
                s("epoch", "3"),
                s("writer", "r1"),
                s("failure_threshold", "2"),
                s("assignment", "sticky"),
                s("last_change", "moved=3 minimum=3 placed=1"),
                s("holder_conn", "tok 42"),
            ]
            .into(),
            lease_pttl: Some(Duration::from_millis(1500)),
            lease_token: Some("tok".into()),
            epoch: 3,
            replicas: [s("r1", "0 2 9000"), s("r2", "- - 9500")].into(),
            liveness: [
                s("h:1", "1 0 0"),
                s("h:2", "1 1 8000"),
                s("h:3", "1 2 5000"),
                s("h:4", "0 1 9000 unavailable: connection refused"),
            ]
            .into(),
            table: [s("h:1", "a,b"), s("h:2", "c")].into(),
            units: ["a", "b", "c", "", "x,y"]
                .iter()
                .map(|u| u.as_bytes().to_vec())
                .collect(),
            groups: vec![(
                "g".into(),
                ["h:1", "h:2", "h:3", "h:4", "h:5", "bad", "h:1"]
                    .iter()
                    .map(|m| m.as_bytes().to_vec())
                    .collect(),
            )],
            reports: Default::default(),
            transit: Default::default(),
            weights: Default::default(),
        }
    }

    #[test]
    fn status_json_is_the_api_summary_plus_every_member_row() {
        let r = status(&overview(), "t", 10_000);
        let json = serde_json::to_value(r.json()).unwrap();
        let summary = serde_json::to_value(r.summary()).unwrap();
        let (json, summary) = (json.as_object().unwrap(), summary.as_object().unwrap());
        // The summary's fields and the members: nothing else.
        let mut keys: Vec<&str> = summary.keys().map(String::as_str).collect();
        keys.push("members");
        keys.sort();
        assert_eq!(json.keys().map(String::as_str).collect::<Vec<_>>(), keys);
        for (k, v) in summary {
            assert_eq!(&json[k], v, "{k}");
        }
        // Groups counted, as /api/status counts them.
        for (g, counts) in r.groups.iter().zip(r.summary().groups) {
            assert_eq!((g.live.len(), g.failed.len()), (counts.live, counts.failed));
        }
        assert_eq!(json["groups"][0]["live"], 2);
        // Every member once, as /api/members shows it, with its group.
        let rows = r.member_rows();
        assert_eq!(json["members"], serde_json::to_value(&rows).unwrap());
        let n: usize = r.groups.iter().map(|g| g.live.len() + g.failed.len()).sum();
        assert_eq!(rows.len(), n);
        let row = serde_json::to_value(&rows[0]).unwrap();
        let listed = r.groups.iter().flat_map(|g| g.live.iter().chain(&g.failed));
        let m = listed
            .into_iter()
            .find(|m| m.id == rows[0].member.id)
            .unwrap();
        for (k, v) in serde_json::to_value(m).unwrap().as_object().unwrap() {
            assert_eq!(&row[k], v, "{k}");
        }
        let live = r.groups[0].live.iter().any(|l| l.id == m.id);
        assert_eq!((&row["group"], &row["live"]), (&"g".into(), &live.into()));
    }

    #[test]
    fn status_sorts_members_into_live_and_failed_with_reasons() {
        let r = status(&overview(), "t", 10_000);
        assert_eq!(r.generation, 7);
        assert_eq!(r.lease.holder.as_deref(), Some("r1"));
        assert_eq!(r.lease.expires_in_ms, Some(1500));
        assert_eq!(r.work_units, 3);
        assert_eq!(r.invalid_work_units, 2);
        let g = &r.groups[0];
        let ids = |v: &[MemberReport]| v.iter().map(|m| m.id.clone()).collect::<Vec<_>>();
        assert_eq!(
            ids(&g.live),
            ["h:1", "h:2"],
            "one failure of two is still live"
        );
        assert_eq!(ids(&g.failed), ["h:3", "h:4", "h:5", "bad"]);
        assert_eq!(
            g.failed[0].reason.as_deref(),
            Some("2 failed pings in a row")
        );
        assert_eq!(g.failed[0].failing_for_ms, Some(5000));
        assert_eq!(
            g.failed[1].reason.as_deref(),
            Some("has never answered a ping: unavailable: connection refused")
        );
        assert_eq!(g.failed[2].reason.as_deref(), Some("not pinged yet"));
        assert!(
            g.failed[3]
                .reason
                .as_deref()
                .unwrap()
                .starts_with("malformed address")
        );
        assert_eq!(
            r.replicas[0],
            ReplicaReport {
                id: "r1".into(),
                index: Some(0),
                replicas: Some(2),
                seen_ms_ago: 1000,
                blocked: None,
            }
        );
        assert_eq!(r.replicas[1].index, None);
        let text = render_status(&r);
        assert!(text.contains("lease held by r1, epoch 3"), "{text}");
        assert!(text.contains("takeover: fast\n"), "{text}");
        assert!(text.contains("group g: 2 live, 4 failed"), "{text}");
        assert!(
            text.contains("assignment sticky; last change: 3 moved (minimum 3), 1 placed"),
            "{text}"
        );
        assert_eq!(g.live[0].weight, 1, "no report: weight 1");
    }

    #[test]
    fn status_reads_the_lists_as_the_daemon_does() {
        // The daemon keeps a member listed in two groups in the first by name
        // (not by configuration order), treats malformed entries as failing
        // even when listed twice, and counts distinct invalid units.
        let mut o = overview();
        let list = |v: &[&str]| v.iter().map(|m| m.as_bytes().to_vec()).collect();
        o.groups = vec![
            ("zeta".into(), list(&["h:1", "h:2", "bad"])),
            ("alpha".into(), list(&["h:1", "bad"])),
        ];
        o.units = list(&["a", "", "", "x,y"]);
        let r = status(&o, "t", 10_000);
        let zeta = &r.groups[0];
        assert_eq!(zeta.name, "zeta", "configuration order is kept for display");
        let ids = |v: &[MemberReport]| v.iter().map(|m| m.id.clone()).collect::<Vec<_>>();
        assert_eq!(ids(&zeta.live), ["h:2"]);
        assert_eq!(ids(&zeta.failed), ["bad", "h:1"]);
        assert!(
            zeta.failed[0]
                .reason
                .as_deref()
                .unwrap()
                .starts_with("malformed address")
        );
        assert!(
            zeta.failed[1]
                .reason
                .as_deref()
                .unwrap()
                .contains("works for \"alpha\""),
            "{:?}",
            zeta.failed[1]
        );
        assert_eq!(ids(&r.groups[1].live), ["h:1"]);
        assert_eq!((r.work_units, r.invalid_work_units), (1, 2));
    }

    #[test]
    fn a_holder_without_a_connection_record_is_replaced_after_its_ttl() {
        // A record of an earlier holding (another token), or none at all.
        for conn in [Some("old 42"), Some("tok "), None] {
            let mut o = overview();
            match conn {
                Some(c) => o.meta.insert("holder_conn".into(), c.into()),
                None => o.meta.remove("holder_conn"),
            };
            let r = status(&o, "t", 10_000);
            let t = r.lease.takeover.as_deref().unwrap();
            assert!(
                t.starts_with("ttl (the holder recorded no lease connection"),
                "{t}"
            );
            assert!(render_status(&r).contains("takeover: ttl ("));
        }
    }

    #[test]
    fn a_free_lease_has_no_holder() {
        let mut o = overview();
        o.lease_pttl = None;
        let r = status(&o, "t", 10_000);
        assert_eq!(r.lease.holder, None);
        assert_eq!(r.lease.takeover, None, "nobody to take over from");
        assert!(render_status(&r).contains("lease free"));
    }

    #[test]
    fn table_report_counts_shares_and_balance() {
        let r = table(&overview(), "t");
        assert_eq!(r.total, 2);
        assert_eq!(r.assignments, 3);
        assert_eq!((r.min, r.max, r.balance), (1, 2, 1));
        assert!((r.rows[0].share - 66.666).abs() < 0.01);
        let text = render_table(&r);
        assert!(
            text.contains("2 members, 3 assignments, min 1 max 2 (balance 1), generation 7"),
            "{text}"
        );
        assert!(text.contains("assignment sticky; last change"), "{text}");
        let mut o = overview();
        o.reports.insert("h:1".into(), "4 0 3000 5".to_string());
        assert_eq!(table(&o, "t").rows[0].weight, 5);
        // An operator's override beats the report; an unreadable one does not.
        o.weights.insert("h:1".into(), "9".to_string());
        assert_eq!(table(&o, "t").rows[0].weight, 9);
        let text = render_status(&status(&o, "t", 10_000));
        assert!(text.contains("weight 9 (override; reported 5)"), "{text}");
        o.weights.insert("h:1".into(), "0".to_string());
        assert_eq!(table(&o, "t").rows[0].weight, 5);
        o.weights.insert("h:2".into(), "3".to_string());
        assert_eq!(table(&o, "t").rows[1].weight, 3, "no report");
    }
}
