//! The status page's JSON API (`-http-ui`): `/api/status`, `/api/members`,
//! `/api/changes` and `/api/plan`, on the same server as `/metrics`.
//!
//! Guarantees: read-only (GET only, nothing is written to Redis); bounded
//! answers whatever the fleet's size (counts, one page of at most
//! [`MAX_PER_PAGE`] members, at most [`CHANGES_KEPT`] changes, never the
//! table or the units list); no secret (the Redis URL and its password are
//! never read here, and a Redis error is shown by its kind only). Redis is
//! read by one background task, with the store call `distributor status`
//! uses, at most once per [`MIN_READ_GAP`] and only when the generation this
//! replica saw moved or [`MAX_READ_GAP`] passed: browsers share that view, so
//! any number of them costs Redis nothing more. That read and the report
//! built from it grow with the units (the whole units list and table), and
//! the replica may be the holder: the report is built off the runtime, and
//! the reader pauses at least [`READ_GAP_FACTOR`] times as long as its last
//! read took, so it is busy a tenth of the time at most.
//!
//! `/api/plan` ([`Api::plan`]) is the exception, on demand: a what-if must
//! start from the table as it is, so each request reads Redis once (the
//! same read) and solves off the runtime, one request at a time per
//! replica; it writes nothing, and its answer lists at most
//! [`CHANGES_SHOWN`](crate::report::plan::CHANGES_SHOWN) units and
//! [`MEMBERS_SHOWN`](crate::report::plan::MEMBERS_SHOWN) members, never
//! the table.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Serialize;
use tokio::sync::watch;

use crate::core::history::HistoryEntry;
use crate::core::status::{Role, Status};
use crate::edge::clock;
use crate::edge::redis::Store;
use crate::report::plan::{PlanError, PlanReport, PlanRequest, PlanSettings};
use crate::report::{self, MemberRow, StatusReport, StatusSummary};

/// The most members one `/api/members` page holds.
pub const MAX_PER_PAGE: usize = 500;
/// Members per page when the request does not say.
pub const DEFAULT_PER_PAGE: usize = 100;
/// How many changes `/api/changes` keeps (the newest).
pub const CHANGES_KEPT: usize = 100;
/// Members listed in one change; the count says how many there were.
pub const MEMBERS_PER_CHANGE: usize = 20;
/// Redis is read at most this often.
pub const MIN_READ_GAP: Duration = crate::core::timing::Timing::DEFAULT.min_read_gap;
/// ... and at least this often, for what moves without a new generation
/// (liveness, reports, the census), unless reads are slow (below).
pub const MAX_READ_GAP: Duration = crate::core::timing::Timing::DEFAULT.max_read_gap;
/// After a read that took `d` (Redis, decoding, the report), the next one
/// starts `READ_GAP_FACTOR × d` later at the earliest.
pub const READ_GAP_FACTOR: u32 = 10;

/// How long the reader waits at least after a read that took `took`.
pub fn read_gap(took: Duration) -> Duration {
    MIN_READ_GAP.max(took * READ_GAP_FACTOR)
}

/// What this replica is, as its coordinator last saw it.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct ThisReplica {
    pub id: String,
    /// `holder` or `standby`.
    pub role: &'static str,
    /// How a crash of the holder would be noticed: `fast`, `ttl (why)` or `unknown`.
    pub takeover: String,
    pub census_index: Option<u64>,
    pub census_replicas: Option<u64>,
    /// While it holds the lease but does not act: why (what it cannot read).
    pub holding_blocked: Option<String>,
    /// While it recovers from handoff state Redis may have lost: the
    /// recovery and why.
    pub recovering: Option<String>,
}

impl ThisReplica {
    pub fn of(s: &Status) -> ThisReplica {
        ThisReplica {
            id: s.replica_id.clone(),
            role: match s.role {
                Role::Holder => "holder",
                Role::Standby => "standby",
            },
            takeover: s.takeover.to_string(),
            census_index: s.census.map(|c| c.index),
            census_replicas: s.census.map(|c| c.replicas),
            holding_blocked: s.holding_blocked.clone().filter(|_| s.role == Role::Holder),
            recovering: s.recovering.clone().filter(|_| s.role == Role::Holder),
        }
    }
}

/// `/api/status`.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ApiStatus {
    pub replica: ThisReplica,
    /// Unix ms of the Redis read the rest comes from (`None`: not read yet).
    pub read_at_ms: Option<u64>,
    /// Why the last read failed (the error's kind only), if it did.
    pub read_error: Option<String>,
    /// What `distributor status --json` shows, without the member lists.
    pub status: Option<StatusSummary>,
}

/// `/api/members`.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct MembersPage {
    /// 1-based.
    pub page: usize,
    pub per_page: usize,
    pub total: usize,
    pub pages: usize,
    pub generation: u64,
    pub members: Vec<MemberRow>,
}

/// `/api/changes`: the newest entries of the change history
/// (`{T}:changes`, `core::history`), the same on every replica and across
/// restarts. Each lists at most [`MEMBERS_PER_CHANGE`] members and no unit
/// names (their counts only; `distributor history` names them), so the
/// answer stays small.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Changes {
    /// The most this answer holds.
    pub kept: usize,
    pub changes: Vec<HistoryEntry>,
    /// The last table write could not add its entry (`<generation>
    /// <error>`: an ACL without `xadd`).
    pub error: Option<String>,
}

/// An entry as `/api/changes` shows it: members and unit names cut.
pub fn shown(mut e: HistoryEntry) -> HistoryEntry {
    e.record.members.truncate(MEMBERS_PER_CHANGE);
    for l in [
        &mut e.record.moved,
        &mut e.record.placed,
        &mut e.record.revoked,
    ] {
        l.units.clear();
    }
    e
}

#[derive(Default)]
struct View {
    report: Option<Arc<StatusReport>>,
    /// `report`'s members, sorted once per read, not once per request.
    members: Option<Arc<Members>>,
    read_at_ms: Option<u64>,
    read_error: Option<String>,
    changes: Vec<HistoryEntry>,
    history_error: Option<String>,
}

/// The API's state: the last view read from Redis and the changes seen.
#[derive(Clone)]
pub struct Api {
    status: watch::Receiver<Status>,
    view: Arc<Mutex<View>>,
    source: Arc<Source>,
    /// `/api/plan`'s settings, when it is served ([`Api::with_plan`]).
    plan: Option<PlanSettings>,
}

/// Where the API reads: the store and the keys.
struct Source {
    store: Store,
    services: Vec<String>,
    units_key: String,
    /// One plan at a time: each reads Redis and solves.
    planning: tokio::sync::Mutex<()>,
}

/// Why `/api/plan` has no plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PlanFailure {
    /// Not served: the API was started without [`Api::with_plan`].
    Off,
    /// The request's changes are refused (400).
    Refused(PlanError),
    /// Redis could not be read: the error's kind only (503).
    Unavailable(String),
}

impl Api {
    /// Starts the background reader (stopped when `shutdown` resolves).
    pub fn start(
        store: Store,
        services: Vec<String>,
        units_key: String,
        status: watch::Receiver<Status>,
        shutdown: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> Api {
        let api = Api {
            status,
            view: Arc::default(),
            source: Arc::new(Source {
                store: store.clone(),
                services: services.clone(),
                units_key: units_key.clone(),
                planning: tokio::sync::Mutex::new(()),
            }),
            plan: None,
        };
        let reader = api.clone();
        tokio::spawn(async move {
            tokio::select! {
                () = reader.read_loop(store, services, units_key) => {}
                () = shutdown => {}
            }
        });
        api
    }

    /// Serves `/api/plan` too, with `settings` (the daemon's flags) where
    /// `{T}:meta` records no mode.
    pub fn with_plan(mut self, settings: PlanSettings) -> Api {
        self.plan = Some(settings);
        self
    }

    /// `/api/plan`: what the holder would write after `request`'s changes,
    /// from one read of Redis now (`distributor plan`'s, bounded: see the
    /// module docs). Writes nothing.
    pub async fn plan(&self, request: PlanRequest) -> Result<PlanReport, PlanFailure> {
        let settings = self.plan.ok_or(PlanFailure::Off)?;
        let src = &self.source;
        let _one_at_a_time = src.planning.lock().await;
        let o = src
            .store
            .read_overview(&src.services, &src.units_key)
            .await
            .map_err(|e| PlanFailure::Unavailable(format!("redis error ({})", e.kind())))?;
        let table = src.store.keys().table.clone();
        // A solve of the whole table: off the runtime, as the status
        // page's report.
        tokio::task::spawn_blocking(move || {
            report::plan::plan(&o, &table, &request, &settings, crate::unix_ms(), false)
        })
        .await
        .map_err(|_| PlanFailure::Unavailable("the plan failed".into()))?
        .map_err(PlanFailure::Refused)
    }

    async fn read_loop(&self, store: Store, services: Vec<String>, units_key: String) {
        let mut status = self.status.clone();
        let table = store.keys().table.clone();
        loop {
            let seen = status.borrow_and_update().generation;
            let started = clock::now();
            match store.read_overview(&services, &units_key).await {
                Ok(o) => {
                    let table = table.clone();
                    // At 1,000,000 units this is hundreds of ms of CPU (every
                    // unit validated as the daemon does): not on the runtime
                    // that the holder's lease renewals and pings run on.
                    let (report, members, now) = tokio::task::spawn_blocking(move || {
                        let now = crate::unix_ms();
                        let report = Arc::new(report::status(&o, &table, now));
                        let members = Arc::new(Members::of(&report));
                        (report, members, now)
                    })
                    .await
                    .expect("the status page's report panicked");
                    let history = store.read_history(CHANGES_KEPT).await;
                    let mut v = self.view.lock().expect("api view lock");
                    // A failed history read keeps the entries last read,
                    // and shows as the read's error.
                    let history_failed = match history {
                        Ok(h) => {
                            v.changes = h.entries.into_iter().map(shown).collect();
                            v.history_error = h.error;
                            None
                        }
                        Err(e) => Some(format!("redis error ({})", e.kind())),
                    };
                    v.report = Some(report);
                    v.members = Some(members);
                    v.read_at_ms = Some(now);
                    v.read_error = history_failed;
                }
                Err(e) => {
                    self.view.lock().expect("api view lock").read_error =
                        Some(format!("redis error ({})", e.kind()));
                }
            }
            let gap = read_gap(started.elapsed());
            tokio::time::sleep(gap).await;
            // Until the generation moves, or MAX_READ_GAP.
            let _ = tokio::time::timeout(
                MAX_READ_GAP.saturating_sub(gap),
                status.wait_for(|s| s.generation != seen),
            )
            .await;
        }
    }

    pub fn status(&self) -> ApiStatus {
        let replica = ThisReplica::of(&self.status.borrow());
        let v = self.view.lock().expect("api view lock");
        ApiStatus {
            replica,
            read_at_ms: v.read_at_ms,
            read_error: v.read_error.clone(),
            status: v.report.as_ref().map(|r| r.summary()),
        }
    }

    /// Page `page` (1-based; 0 counts as 1) of `per_page` members (at most
    /// [`MAX_PER_PAGE`]; 0 counts as [`DEFAULT_PER_PAGE`]).
    pub fn members(&self, page: usize, per_page: usize) -> MembersPage {
        let members = self.view.lock().expect("api view lock").members.clone();
        page_of(members.as_deref(), page, per_page)
    }

    /// The newest `limit` changes (0, or more than are kept: all kept).
    pub fn changes(&self, limit: usize) -> Changes {
        let limit = if limit == 0 { CHANGES_KEPT } else { limit };
        let v = self.view.lock().expect("api view lock");
        Changes {
            kept: CHANGES_KEPT,
            changes: v.changes.iter().take(limit).cloned().collect(),
            error: v.history_error.clone(),
        }
    }
}

/// A report's members in `/api/members` order ([`StatusReport::member_rows`]),
/// built once per read: a request then costs one page, not every member.
#[derive(Debug, Clone, PartialEq)]
pub struct Members {
    pub generation: u64,
    pub rows: Vec<MemberRow>,
}

impl Members {
    pub fn of(report: &StatusReport) -> Members {
        Members {
            generation: report.generation,
            rows: report.member_rows(),
        }
    }
}

/// One page of a report's members (see [`Api::members`]).
pub fn page_of(members: Option<&Members>, page: usize, per_page: usize) -> MembersPage {
    let per_page = match per_page {
        0 => DEFAULT_PER_PAGE,
        n => n.min(MAX_PER_PAGE),
    };
    let page = page.max(1);
    let rows = members.map_or(&[][..], |m| &m.rows);
    let total = rows.len();
    MembersPage {
        page,
        per_page,
        total,
        pages: total.div_ceil(per_page),
        generation: members.map_or(0, |m| m.generation),
        members: rows
            .iter()
            .skip((page - 1).saturating_mul(per_page))
            .take(per_page)
            .cloned()
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::{ChangeReport, GroupReport, LeaseReport, MemberReport};

    fn member(id: &str, units: usize) -> MemberReport {
        MemberReport {
            id: id.into(),
            units,
            reason: None,
            failing_for_ms: None,
            failing_long: false,
            protocol: None,
            unreadable_report: None,
            weight: 1,
            load: None,
            control: None,
        }
    }

    fn report(generation: u64, live: &[(&str, usize)], failed: &[&str]) -> StatusReport {
        StatusReport {
            table: "t".into(),
            generation,
            last_write: None,
            lease: LeaseReport {
                holder: None,
                epoch: 1,
                expires_in_ms: None,
                takeover: None,
            },
            replicas: vec![],
            groups: vec![GroupReport {
                name: "g".into(),
                live: live.iter().map(|(id, n)| member(id, *n)).collect(),
                failed: failed.iter().map(|id| member(id, 0)).collect(),
            }],
            work_units: 12,
            invalid_work_units: 0,
            in_transit: 0,
            transit: vec![],
            assignment: None,
            last_change: Some(ChangeReport {
                moved: 3,
                minimum: 3,
                placed: 0,
            }),
            balance: None,
            controls: None,
            quarantine: None,
        }
    }

    /// At 10,000 members the answers stay small: the status counts them and
    /// a page holds 100 (500 at most).
    #[test]
    fn answers_stay_small_at_ten_thousand_members() {
        let live: Vec<(String, usize)> = (0..10_000)
            .map(|i| (format!("10.0.{}.{}:7001", i / 250, i % 250), 100))
            .collect();
        let live: Vec<(&str, usize)> = live.iter().map(|(s, n)| (s.as_str(), *n)).collect();
        let r = report(9, &live, &[]);
        let size = |v: &dyn erased::Json| v.len();
        let status = size(&r.summary());
        let members = Members::of(&r);
        let page = size(&page_of(Some(&members), 1, 0));
        let biggest = size(&page_of(Some(&members), 1, MAX_PER_PAGE));
        // The most /api/changes holds: CHANGES_KEPT changes that each moved
        // units of every member (a rebalance), MEMBERS_PER_CHANGE listed.
        let rows = |extra: usize| {
            crate::core::table::MatchingTable::from_rows(live.iter().enumerate().map(
                |(i, (id, n))| {
                    let units: Vec<String> =
                        (0..n + extra).map(|k| format!("unit-{i}-{k}")).collect();
                    (id.to_string(), units.join(","))
                },
            ))
        };
        let record = crate::core::history::record(
            &rows(0),
            &rows(1),
            &crate::core::history::MemberStates::default(),
            None,
        );
        let c = shown(HistoryEntry {
            record,
            ..HistoryEntry::default()
        });
        assert_eq!(
            (c.record.members.len(), c.record.members_changed),
            (MEMBERS_PER_CHANGE, 10_000)
        );
        assert_eq!(c.record.placed.count, 10_000);
        let changes = size(&Changes {
            kept: CHANGES_KEPT,
            changes: vec![c; CHANGES_KEPT],
            error: None,
        });
        eprintln!(
            "10,000 members: /api/status {status} B, /api/members default page {page} B, largest page {biggest} B, /api/changes at most {changes} B"
        );
        assert!(status < 2_000, "{status}");
        assert!(page < 30_000, "{page}");
        assert!(biggest < 150_000, "{biggest}");
        assert!(changes < 300_000, "{changes}");
    }

    mod erased {
        pub trait Json {
            fn len(&self) -> usize;
        }
        impl<T: serde::Serialize> Json for T {
            fn len(&self) -> usize {
                serde_json::to_string(self).unwrap().len()
            }
        }
    }

    #[test]
    fn slow_reads_are_spaced_out() {
        assert_eq!(read_gap(Duration::from_millis(5)), MIN_READ_GAP);
        assert_eq!(read_gap(Duration::from_millis(400)), Duration::from_secs(4));
        assert_eq!(read_gap(Duration::from_millis(900)), Duration::from_secs(9));
    }

    #[test]
    fn members_come_a_bounded_page_at_a_time() {
        let live: Vec<(String, usize)> = (0..1234).map(|i| (format!("m{i:05}"), 1)).collect();
        let live: Vec<(&str, usize)> = live.iter().map(|(s, n)| (s.as_str(), *n)).collect();
        let r = report(5, &live, &["zz"]);
        let r = Members::of(&r);
        let p = page_of(Some(&r), 3, 10_000);
        assert_eq!((p.per_page, p.total, p.pages), (MAX_PER_PAGE, 1235, 3));
        assert_eq!(p.members.len(), 1235 - 2 * MAX_PER_PAGE);
        assert_eq!(p.members.last().unwrap().member.id, "zz");
        assert!(!p.members.last().unwrap().live);
        let p = page_of(Some(&r), 0, 0);
        assert_eq!((p.page, p.per_page), (1, DEFAULT_PER_PAGE));
        assert_eq!(p.members[0].member.id, "m00000");
        assert!(page_of(Some(&r), 999, 10).members.is_empty());
        assert_eq!(page_of(None, 1, 10).total, 0);
    }
}
