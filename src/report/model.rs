//! The reports' model: what `distributor status` and `distributor table`
//! report and what `/api/status`, `/api/members` and `status --json` serve,
//! built from an [`Overview`] read from Redis.
//!
//! Pure. It holds key names, member addresses, counts and replica ids, never
//! the Redis URL, so no report can carry a secret.

use std::collections::BTreeMap;

use serde::Serialize;

use super::controls::ControlsReport;
use crate::core::census::{HolderNote, note_of};
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
    /// With `-balance cost`: the stored table's loads against the shares.
    pub balance: Option<BalanceReport>,
    /// The operator's controls in force (`None`: none).
    pub controls: Option<ControlsReport>,
    /// Units quarantined because members holding them kept dying (`None`:
    /// none), the first [`super::QUARANTINED_SHOWN`] of them listed.
    pub quarantine: Option<super::QuarantineReport>,
}

/// How many hot units a status report lists.
pub const HOT_SHOWN: usize = 20;

/// The stored table's balance by cost, as the last write's mode records it
/// (`cost tolerance=..` in `{T}:meta`), computed with the costs, weights
/// and lists as they are now.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct BalanceReport {
    /// What is balanced: `cost` (declared) or `load` (measured).
    pub by: String,
    /// `-balance-tolerance`, as written: `10%`.
    pub tolerance: String,
    /// The busiest member's load divided by its share.
    pub imbalance: f64,
    /// The least busy member's load divided by its share.
    pub least: f64,
    /// Live members outside their band.
    pub out_of_band: usize,
    /// Units costlier than any share, each alone on a member where
    /// possible: the first [`HOT_SHOWN`], sorted, and how many in all.
    pub hot_units: Vec<String>,
    pub hot_count: usize,
    /// Units with a readable cost (declared, or reported as a load), and
    /// entries that are not readable (with loads: members' fields).
    pub declared_costs: usize,
    pub invalid_costs: usize,
    /// With loads: members' fields left out for their date (older than 5
    /// minutes, or over a minute ahead of this clock).
    pub stale_loads: usize,
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
    /// How many generations the table is ahead of it (normal: a generation
    /// that only adds units needs no report).
    pub behind: u64,
    /// Units in transit from it revoked above `applied`: acknowledgements
    /// the holder waits for.
    pub owes: usize,
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
    /// While it holds the lease and recovers from handoff state Redis may
    /// have lost: the recovery's tag and why.
    pub recovering: Option<String>,
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
    /// Failed for `Timing::failing_long` or more: it stays listed and
    /// pinged until removed or forgotten (`-forget-after`).
    pub failing_long: bool,
    /// Its own report, if it speaks the handoff protocol; `None` for a
    /// member that only reads its row (it gets `-handoff-delay`).
    pub protocol: Option<ProtocolReport>,
    /// Its `{T}:members` entry, when it cannot be read.
    pub unreadable_report: Option<String>,
    /// Its capacity weight: the operator's override, else its report's, 1
    /// without either.
    pub weight: u32,
    /// With `-balance cost`, for a live member: its load (the sum of its
    /// units' costs), its share, whether it is within its band, and the
    /// hot units it isolates.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub load: Option<LoadReport>,
    /// `cordoned` or `drained` by an operator (`None`: neither).
    pub control: Option<&'static str>,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct LoadReport {
    pub load: f64,
    pub share: f64,
    pub in_band: bool,
    pub hot: Vec<String>,
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
                blocked: match note_of(v) {
                    Some(HolderNote::Blocked(why)) => Some(why.to_string()),
                    _ => None,
                },
                recovering: match note_of(v) {
                    Some(HolderNote::Recovering(what)) => Some(what.to_string()),
                    _ => None,
                },
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
    let (balance, loads) = balance_of(o, assignment.as_deref(), &inputs, now_ms);
    let generation = num("generation").unwrap_or(0);
    let controls = super::controls::controls_of(&o.controls, now_ms);
    let quarantine = super::quarantine_of(&o.quarantine, super::QUARANTINED_SHOWN);
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
    // Per member, the generations that revoked units in transit from it,
    // sorted: what it owes is counted by a search, not a scan per member.
    let mut revoked_from: BTreeMap<&str, Vec<u64>> = BTreeMap::new();
    for t in &transit {
        for f in &t.from {
            revoked_from.entry(f).or_default().push(t.revoked_at);
        }
    }
    for gens in revoked_from.values_mut() {
        gens.sort_unstable();
    }
    let member = |id: &str, reason: Option<String>| {
        let raw = o.reports.get(id);
        let decoded = raw.and_then(|v| handoff::MemberReport::decode(v));
        MemberReport {
            id: id.to_string(),
            units: units_of(id),
            reason,
            failing_for_ms: None,
            failing_long: false,
            protocol: decoded.map(|r| ProtocolReport {
                applied: r.applied,
                behind: generation.saturating_sub(r.applied),
                owes: revoked_from.get(id).map_or(0, |gens| {
                    gens.len() - gens.partition_point(|g| *g <= r.applied)
                }),
                draining: r.draining,
                deadline_ms: r.deadline.as_millis() as u64,
                weight: r.weight,
            }),
            weight: o.weight(id),
            load: None,
            control: controls
                .as_ref()
                .and_then(|c| super::controls::control_of(c, id)),
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
                    let mut m = member(id, None);
                    m.load = loads.get(id.as_str()).cloned();
                    report.live.push(m)
                }
                Some(h) => {
                    // The count stops at the threshold: say "at least".
                    let streak = if h.answered {
                        format!("pings failing (at least {} in a row)", h.failures)
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
                    let long = crate::core::timing::Timing::DEFAULT.failing_long;
                    m.failing_long = m
                        .failing_for_ms
                        .is_some_and(|ms| ms >= long.as_millis() as u64);
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
        balance,
        controls,
        quarantine,
    }
}

/// The stored table's balance by cost, when the last write balanced by
/// cost: the summary and each live member's load (by id).
fn balance_of(
    o: &Overview,
    assignment: Option<&str>,
    inputs: &crate::core::inputs::Inputs,
    now_ms: u64,
) -> (Option<BalanceReport>, BTreeMap<String, LoadReport>) {
    use crate::core::balance::Balance;
    use crate::core::costs::{SCALE, UnitCosts};
    let balance = assignment.map_or(Balance::Count, Balance::decode);
    let (costs, unreadable, stale) = match balance {
        Balance::Count => return (None, BTreeMap::new()),
        Balance::Cost(_) => {
            let (costs, unreadable) =
                UnitCosts::decode(o.costs.iter().map(|(u, c)| (u.clone(), c)));
            (costs, unreadable, 0)
        }
        Balance::Load(_) => {
            let d = crate::core::load::decode_loads(
                o.loads.iter(),
                now_ms,
                crate::core::timing::Timing::DEFAULT.load_age(),
            );
            (d.costs, d.unreadable, d.stale.len())
        }
    };
    let tolerance = balance.tolerance().expect("cost or load");
    let table = MatchingTable::from_rows(o.table.clone());
    let summary = table.loads(
        inputs,
        |m| o.table.contains_key(m),
        &|m| o.weight(m),
        crate::core::balance::Costs::Lookup(&|u| costs.of(u)),
        tolerance,
    );
    let scale = |c: u64| c as f64 / SCALE as f64;
    let loads = summary
        .members
        .iter()
        .map(|m| {
            let l = LoadReport {
                load: scale(m.load),
                share: scale(m.share),
                in_band: m.in_band,
                hot: m.hot.clone(),
            };
            (m.member.clone(), l)
        })
        .collect();
    let report = BalanceReport {
        by: balance.name().to_string(),
        tolerance: tolerance.to_string(),
        imbalance: summary.imbalance(),
        least: summary.least(),
        out_of_band: summary.out_of_band(),
        hot_units: summary.hot.iter().take(HOT_SHOWN).cloned().collect(),
        hot_count: summary.hot.len(),
        declared_costs: costs.declared(),
        invalid_costs: unreadable.len(),
        stale_loads: stale,
    };
    (Some(report), loads)
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
            balance: self.balance.clone(),
            controls: self.controls.clone(),
            quarantine: self.quarantine.clone(),
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
            .and_then(crate::core::handoff::RedisConnection::decode)
            .is_some()
    });
    if recorded {
        "fast".into()
    } else {
        "ttl (the holder recorded no lease connection: CLIENT not permitted to it, \
         Redis Cluster, or an older version)"
            .into()
    }
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
