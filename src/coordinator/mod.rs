//! The coordinator: one replica's state machine, standby or holder.
//!
//! It only decides; Redis IO goes through [`Store`], gRPC through [`Pinger`], and
//! the table comes from the pure [`MatchingTable::solve`]. One `tokio::select!`
//! loop turns timers, notifications and finished cycles into [`Event`]s, and an
//! explicit `match (state, event)` gives the transitions:
//!
//! ```text
//!                 acquired (SET NX PX, epoch+1) + liveness loaded
//!      ┌─────────┐ ─────────────────────────────────────────▶ ┌────────┐
//!  ──▶ │ Standby │                                             │ Holder │──┐ poll timer:
//!      └─────────┘ ◀───────────────────────────────────────── └────────┘  │ read, ping,
//!        ▲   │ lease timer / release notification:   renewal refused,   ◀─┘ solve, write
//!        └───┘ try again when the lease expires      deadline passed,       if changed
//!                                                    or write fenced
//! ```
//!
//! Guarantees:
//! - only a holder whose lease is locally valid (see [`crate::core::lease`]) writes, and
//!   Redis re-checks token and epoch on every write;
//! - the table is written only when its digest differs from the stored one, so a
//!   new holder with the same inputs writes nothing (no reshuffle, no new
//!   generation) and a Redis that lost its data gets the table back;
//! - a failed read never produces a write: the last table stays;
//! - on shutdown the in-flight cycle is dropped and the lease released, which
//!   wakes the standbys at once.

use std::collections::{BTreeMap, HashMap, HashSet};

use futures::StreamExt as _;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio::time::{Instant, sleep_until};
use tokio_util::sync::CancellationToken;
use tracing::field::Empty;
use tracing::{Instrument as _, Span, info_span};
use xxhash_rust::xxh3::Xxh3;

use crate::config::Config;
use crate::core::census::{self, Census, CensusView};
use crate::core::inputs::{self, Inputs};
use crate::core::lease::{self, HeldLease};
use crate::core::liveness::{HealthChanges, Liveness};
use crate::core::status::{Role, Status};
use crate::core::suspicion::{self, GroupMembers, Guard, Review, Suspect, SuspectChanges};
use crate::core::table::MatchingTable;
use crate::edge::grpc::{PingFailure, PingReport, Pinger};
use crate::edge::redis::{
    Acquisition, Claim, Commit, Committed, LeaseGrant, ListLimits, Notification, Renewal, Snapshot,
    Store,
};
use crate::error::{StartError, StoreError};
use crate::ops::metrics::Metrics;
use crate::unix_ms;

/// A short span for one lease transition, so it shows in the trace view.
fn lease_span(replica: &str, transition: &'static str, epoch: u64) -> Span {
    info_span!(
        "lease",
        replica,
        transition,
        epoch,
        otel.status_code = Empty,
        otel.status_message = Empty
    )
}

/// Marks a span failed, for the trace view (`otel.status_code` is read by
/// tracing-opentelemetry).
fn mark_error(span: &Span, message: &str) {
    span.record("otel.status_code", "ERROR");
    span.record("otel.status_message", message);
}

/// A running replica. Dropping it shuts it down gracefully in the background.
pub struct Distributor {
    status: watch::Receiver<Status>,
    metrics: Arc<Metrics>,
    cancel: CancellationToken,
    task: Option<JoinHandle<()>>,
}

impl Distributor {
    /// Starts a replica. Redis is connected lazily: an unreachable Redis is
    /// retried, never fatal. Unusable ping TLS files, or lease timings that
    /// break the holder's safety rule, are.
    pub fn start(config: Config) -> Result<Distributor, StartError> {
        check_timing(&config).map_err(StartError::Config)?;
        let mut pinger = Pinger::new(config.ping_timeout, Some(config.keepalive));
        if let Some(tls) = &config.ping_tls {
            pinger = pinger.with_tls(crate::edge::tls::ping_client(
                &tls.files,
                tls.domain.as_deref(),
            )?);
        }
        let store = Store::connect(
            &config.redis_options(),
            &config.distribution_namespace,
            op_timeout(&config),
        )?;
        let (tx, rx) = watch::channel(Status {
            replica_id: config.replica_id.clone(),
            ..Status::default()
        });
        let cancel = CancellationToken::new();
        let metrics = Arc::new(Metrics::new());
        let coordinator = Coordinator::new(config, store, pinger, tx, metrics.clone());
        let task = tokio::spawn(coordinator.run(cancel.clone()));
        Ok(Distributor {
            status: rx,
            metrics,
            cancel,
            task: Some(task),
        })
    }

    pub fn status(&self) -> watch::Receiver<Status> {
        self.status.clone()
    }

    /// This replica's metrics, for `/metrics`.
    pub fn metrics(&self) -> Arc<Metrics> {
        self.metrics.clone()
    }

    /// Stops acting, releases the lease (waking the standbys) and waits for it.
    pub async fn shutdown(mut self) {
        self.cancel.cancel();
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }

    /// Stops at once without releasing anything, like a crash: the lease lapses
    /// after its TTL. For failure tests.
    pub fn abort(mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

impl Drop for Distributor {
    fn drop(&mut self) {
        self.cancel.cancel();
    }
}

fn op_timeout(config: &Config) -> Duration {
    // A lease call must come back well before the renew deadline.
    (config
        .lease
        .renew_deadline
        .saturating_sub(config.lease.renew_interval))
    .clamp(Duration::from_millis(50), Duration::from_secs(2))
}

/// The timing rules the holder's safety rests on (the daemon's `config`
/// checks them too, with flag names; embedders build `Config` by hand).
fn check_timing(c: &Config) -> Result<(), String> {
    let l = &c.lease;
    if !(l.renew_interval < l.renew_deadline && l.renew_deadline < l.ttl) {
        return Err(format!(
            "lease timing must satisfy renew interval ({:?}) < renew deadline ({:?}) < ttl ({:?})",
            l.renew_interval, l.renew_deadline, l.ttl
        ));
    }
    for (what, d) in [
        ("poll interval", c.poll_interval),
        ("ping timeout", c.ping_timeout),
        ("lease retry interval", l.retry_interval),
        ("census interval", c.census_interval),
    ] {
        if d.is_zero() {
            return Err(format!("{what} must be greater than zero"));
        }
    }
    Ok(())
}

enum State {
    Standby { next_attempt: Instant },
    Holder(Box<Holding>),
}

struct Holding {
    lease: HeldLease,
    /// The lease's local deadline, for the cycle task's last check before writing.
    acts_until: watch::Sender<Instant>,
    /// What the cycles carry from one to the next.
    view: HolderView,
    next_cycle: Instant,
    cycle_started: Instant,
    /// The span of the cycle in flight; closed when its results are written.
    cycle_span: Span,
    /// Pings still running from the last cycle, for the next one.
    in_flight: InFlight,
    in_flight_members: HashSet<String>,
}

/// The holder's view of the members, handed to each cycle and back.
#[derive(Clone)]
struct HolderView {
    liveness: Liveness,
    /// Liveness changes not yet persisted (a failed write is retried with the next).
    unsaved: HealthChanges,
    /// Members of a mass failure not yet confirmed: their units stay.
    suspects: BTreeMap<String, Suspect>,
    unsaved_suspects: SuspectChanges,
    memo: Option<Memo>,
}

impl HolderView {
    /// Whether `member` gets units: live, or suspected of a mass failure that
    /// nobody confirmed yet.
    fn keeps_units(&self, member: &str) -> bool {
        self.liveness.is_live(member) || self.suspects.contains_key(member)
    }
}

/// The last solved table and the key of its inputs, to skip re-solving.
#[derive(Clone)]
struct Memo {
    key: u128,
    table: Arc<MatchingTable>,
}

enum Event {
    Shutdown,
    LeaseTimer,
    /// A holder released the lease; the payload is its epoch.
    Released(String),
    Notified(Notification),
    CycleTimer,
    CycleDone(Box<Result<CycleReport, CycleError>>),
    /// A census step finished: the view it emitted, if any.
    Census(Result<Option<CensusView>, StoreError>),
    /// The generation re-read after a table-change notification.
    Floor(Result<u64, StoreError>),
    /// The notification subscriber ended on its own.
    SubscriptionLost,
}

struct CycleReport {
    epoch: u64,
    inputs: Arc<Inputs>,
    failures: Vec<(String, PingFailure)>,
    /// The view after this cycle (unsaved changes are empty after a write).
    view: HolderView,
    transitions: Vec<(String, bool)>,
    /// What the mass-failure guard did this cycle.
    review: Review,
    /// Per group: (name, live, failed).
    groups: Vec<(String, usize, usize)>,
    write: Write,
    generation_floor: u64,
    /// (member, list) pairs removed by `-forget-after`.
    forgotten: Vec<(String, String)>,
    /// Pings still running (hung members): collected by the next cycle.
    in_flight: InFlight,
    in_flight_members: HashSet<String>,
}

/// Why a cycle did not produce a table; either way the last one stays.
#[derive(Debug, thiserror::Error)]
enum CycleError {
    #[error(transparent)]
    Read(StoreError),
    #[error(
        "every one of the {entries} entries of list {key:?} is invalid, {}; keeping the last table",
        first.as_deref().unwrap_or("")
    )]
    Inputs {
        key: String,
        entries: usize,
        first: Option<String>,
    },
}

impl CycleError {
    fn kind(&self) -> &'static str {
        match self {
            CycleError::Read(e) => e.kind(),
            CycleError::Inputs { .. } => "invalid_input",
        }
    }
}

/// What became of a cycle's write.
enum Write {
    /// Nothing changed: nothing written.
    Unchanged,
    /// The lease is past its renew deadline locally: nothing written.
    NotActing,
    Written {
        generation: Option<u64>,
    },
    /// Redis rejected it: the lease moved on.
    Fenced(String),
    Failed(StoreError),
}

/// Pings still in flight when a cycle ended; the next cycle collects them
/// instead of pinging those members again.
type InFlight = crate::edge::grpc::PingSet;

/// How long a cycle waits for fast ping results before acting on them. A
/// refused connection answers in about a millisecond; a hung member only when
/// the ping timeout expires, which must not delay everyone else.
const FIRST_PHASE: Duration = Duration::from_millis(50);

/// Everything a cycle task needs, owned, so it runs beside the state machine.
struct CycleContext {
    store: Store,
    pinger: Pinger,
    metrics: Arc<Metrics>,
    services: Vec<String>,
    units_key: String,
    limits: ListLimits,
    replica_id: String,
    forget_after: Option<Duration>,
    grant: LeaseGrant,
    acts_until: watch::Receiver<Instant>,
    generation_floor: u64,
    /// Pings of earlier cycles still running, and their members.
    carried: InFlight,
    carried_members: HashSet<String>,
    guard: Guard,
}

impl CycleContext {
    fn may_act(&self) -> bool {
        Instant::now() < *self.acts_until.borrow()
    }

    async fn run(mut self, mut view: HolderView) -> Result<CycleReport, CycleError> {
        let read = info_span!(
            "read_inputs",
            lists = self.services.len() + 1,
            otel.status_code = Empty,
            otel.status_message = Empty
        );
        let snapshot = match self
            .store
            .read_snapshot(&self.services, &self.units_key, self.limits)
            .instrument(read.clone())
            .await
        {
            Ok(s) => s,
            Err(e) => {
                mark_error(&read, &e.to_string());
                mark_error(&Span::current(), &e.to_string());
                return Err(CycleError::Read(e));
            }
        };
        drop(read);
        let Snapshot {
            raw,
            stored_digest,
            stored_generation,
        } = snapshot;
        // Shared with the solver's blocking thread, never copied: at a million
        // units a copy is tens of megabytes.
        let inputs = Arc::new(inputs::normalize(&raw));
        // A units list whose every entry is invalid is a broken producer, not
        // "no work": keep the last table (an empty list still means no units).
        if !raw.units.is_empty() && inputs.units.is_empty() {
            let e = CycleError::Inputs {
                key: raw.units_key.clone(),
                entries: raw.units.len(),
                first: inputs.rejections.first().map(ToString::to_string),
            };
            mark_error(&Span::current(), &e.to_string());
            return Err(e);
        }
        // The raw lists can be as big as the inputs: free them before solving.
        drop(raw);
        let members: Vec<String> = inputs.members().map(str::to_string).collect();
        let was_live: HashSet<String> = members
            .iter()
            .filter(|m| view.liveness.is_live(m))
            .cloned()
            .collect();
        let listed: Vec<String> = inputs
            .members()
            .chain(
                inputs
                    .groups
                    .iter()
                    .flat_map(|g| g.malformed.iter().map(|m| m.name.as_str())),
            )
            .map(str::to_string)
            .collect();
        let mut stored_digest = stored_digest;
        let mut generation_floor = self.generation_floor.max(stored_generation);

        // Pings settle in two phases, so that one hung member (which takes the
        // whole ping timeout) never delays what the others already told us:
        //
        //   0 ─── answers and refusals ──▶ grace: apply what is known, write if changed
        //         (a refusal takes ~1 ms)        pending pings keep their old state
        //   grace ── slow answers, timeouts ──▶ all done: apply the rest, write if changed
        let ping = info_span!(
            "ping",
            members = members.len(),
            ok = Empty,
            failed = Empty,
            otel.status_code = Empty,
            otel.status_message = Empty
        );
        // Members whose ping from an earlier cycle still runs (hung ones) are
        // not pinged again: that ping's result is collected when it comes.
        let carried = std::mem::take(&mut self.carried);
        let mut pending_members = std::mem::take(&mut self.carried_members);
        let fresh: Vec<String> = members
            .iter()
            .filter(|m| !pending_members.contains(*m))
            .cloned()
            .collect();
        let mut pending = ping.in_scope(|| self.pinger.ping_tasks(&fresh));
        pending_members.extend(fresh);
        for task in carried {
            pending.push(task);
        }
        // Act on what is known after a short grace, so one hung member (which
        // answers only when its ping times out) never delays the others:
        //
        //   0 ── answers, refusals (~1 ms) ──▶ grace: apply, solve, write if changed
        //                                      still running: carried to the next cycle,
        //                                      whose state stays as it was meanwhile
        let grace = tokio::time::sleep(FIRST_PHASE);
        tokio::pin!(grace);
        let mut all_reports: Vec<PingReport> = Vec::with_capacity(members.len());
        loop {
            tokio::select! {
                r = pending.next() => match r {
                    Some((member, report)) => {
                        pending_members.remove(&member);
                        // None: the ping task panicked or was cancelled; the
                        // member is simply pinged again next cycle.
                        all_reports.extend(report);
                    }
                    None => break,
                },
                _ = &mut grace => break,
            }
        }
        for r in &all_reports {
            match &r.result {
                Ok(rtt) => self.metrics.ping_ok(*rtt),
                Err(f) => self.metrics.ping_failed(f.reason()),
            }
        }
        let why_failed: Vec<String> = all_reports
            .iter()
            .map(|r| {
                r.result
                    .as_ref()
                    .err()
                    .map(ToString::to_string)
                    .unwrap_or_default()
            })
            .collect();
        let malformed = inputs
            .groups
            .iter()
            .flat_map(|g| g.malformed.iter().map(|m| (m.name.as_str(), Err(m.reason))));
        // Malformed entries never answer: they fail every cycle, so that they
        // show their reason and can be forgotten like any failing member.
        let results = all_reports
            .iter()
            .zip(&why_failed)
            .map(|(r, why)| {
                let result = match r.result {
                    Ok(_) => Ok(()),
                    Err(_) => Err(why.as_str()),
                };
                (r.member.as_str(), result)
            })
            .chain(malformed);
        let now_ms = unix_ms();
        let changes = view
            .liveness
            .observe(results, listed.iter().map(String::as_str), now_ms);
        view.unsaved.merge(changes);
        // Most of a group failing at once: keep their units until confirmed.
        let answered: HashMap<&str, bool> = all_reports
            .iter()
            .map(|r| (r.member.as_str(), r.result.is_ok()))
            .collect();
        let groups: Vec<GroupMembers<'_>> = inputs
            .groups
            .iter()
            .map(|g| GroupMembers {
                name: &g.name,
                members: &g.members,
            })
            .collect();
        let liveness = &view.liveness;
        let review = suspicion::review(
            self.guard,
            &mut view.suspects,
            &groups,
            &was_live,
            |m| liveness.is_live(m),
            &answered,
            &self.replica_id,
            now_ms,
        );
        view.unsaved_suspects.record(&review, &view.suspects);
        let write = self
            .settle(
                &inputs,
                &mut view,
                &mut stored_digest,
                &mut generation_floor,
            )
            .await;
        let mut reasons: std::collections::BTreeMap<&'static str, usize> = Default::default();
        for r in &all_reports {
            if let Err(f) = &r.result {
                *reasons.entry(f.reason()).or_default() += 1;
            }
        }
        let failed: usize = reasons.values().sum();
        ping.record("ok", all_reports.len() - failed);
        ping.record("failed", failed);
        if failed > 0 {
            // Every cycle while a member stays down: debug only. Its failure is
            // logged once, when it changes state.
            ping.in_scope(|| {
                for (reason, count) in &reasons {
                    tracing::debug!(reason, count, "pings failed");
                }
            });
            mark_error(
                &ping,
                &format!("{failed} of {} pings failed", all_reports.len()),
            );
        }
        drop(ping);
        let listed_now: HashSet<&str> = inputs.members().collect();
        self.pinger.retain(&listed_now);

        let transitions = members
            .iter()
            .filter(|m| view.liveness.is_live(m) != was_live.contains(*m))
            .map(|m| (m.clone(), view.liveness.is_live(m)))
            .collect();
        let failures = all_reports
            .into_iter()
            .filter_map(|r| r.result.err().map(|e| (r.member, e)))
            .collect();
        let groups: Vec<(String, usize, usize)> = inputs
            .groups
            .iter()
            .map(|g| {
                let live = g.members.iter().filter(|m| view.keeps_units(m)).count();
                (
                    g.name.clone(),
                    live,
                    g.members.len() + g.malformed.len() - live,
                )
            })
            .collect();
        let cycle = Span::current();
        cycle.record("members", groups.iter().map(|g| g.1 + g.2).sum::<usize>());
        cycle.record("live", groups.iter().map(|g| g.1).sum::<usize>());
        cycle.record("failed", groups.iter().map(|g| g.2).sum::<usize>());
        cycle.record("units", inputs.units.len());
        cycle.record(
            "changed",
            matches!(
                write,
                Write::Written {
                    generation: Some(_)
                }
            ),
        );
        for (group, live, failed) in &groups {
            tracing::debug!(group, live, failed, "group");
        }

        let mut forgotten = Vec::new();
        if let Some(after) = self.forget_after
            && !matches!(write, Write::Fenced(_) | Write::NotActing)
            && self.may_act()
        {
            let now = unix_ms();
            let after_ms = after.as_millis() as u64;
            let view = &view;
            let failing_long = |m: &str| {
                view.liveness.health(m).is_some_and(|h| {
                    h.failing_since_ms
                        .is_some_and(|s| now.saturating_sub(s) >= after_ms)
                })
            };
            // Never in a group that is mostly failing (the holder's own network,
            // or a mass outage), and never a suspect of a mass failure.
            let pairs: Vec<(String, Vec<u8>)> = inputs
                .groups
                .iter()
                .filter(|g| {
                    !suspicion::mostly_failing(
                        &g.members,
                        |m| view.keeps_units(m),
                        self.guard.percent,
                    )
                })
                .flat_map(|g| {
                    let members = g
                        .members
                        .iter()
                        .filter(|m| failing_long(m) && !view.keeps_units(m))
                        .map(|m| (g.name.clone(), m.as_bytes().to_vec()));
                    let malformed = g
                        .malformed
                        .iter()
                        .filter(|m| failing_long(&m.name))
                        .map(|m| (g.name.clone(), m.raw.clone()));
                    members.chain(malformed)
                })
                .collect();
            if !pairs.is_empty() {
                match self.store.forget_many(&self.grant, &pairs).await {
                    Ok(removed) => {
                        forgotten = removed
                            .into_iter()
                            .map(|(list, m)| (crate::core::inputs::excerpt(&m), list))
                            .collect()
                    }
                    Err(e) => tracing::warn!(error = %e, "could not forget long-failing members"),
                }
            }
        }

        Ok(CycleReport {
            epoch: self.grant.epoch,
            inputs,
            failures,
            view,
            transitions,
            review,
            groups,
            write,
            generation_floor,
            forgotten,
            in_flight: pending,
            in_flight_members: pending_members,
        })
    }

    /// Solves the table for what is known now and writes it (fenced) if it or
    /// the liveness history changed.
    async fn settle(
        &self,
        inputs: &Arc<Inputs>,
        view: &mut HolderView,
        stored_digest: &mut Option<String>,
        generation_floor: &mut u64,
    ) -> Write {
        let key = inputs_key(inputs, |m| view.keeps_units(m));
        let memo = match view.memo.take() {
            Some(m) if m.key == key => m,
            _ => {
                let inp = Arc::clone(inputs);
                let live: HashSet<String> = inputs
                    .members()
                    .filter(|m| view.keeps_units(m))
                    .map(str::to_string)
                    .collect();
                let assign = info_span!(
                    "assign",
                    units = inputs.units.len(),
                    groups = inputs.groups.len()
                );
                let table = tokio::task::spawn_blocking(move || {
                    assign.in_scope(|| MatchingTable::solve(&inp, |m| live.contains(m)))
                })
                .await
                .expect("solving the table does not panic");
                Memo {
                    key,
                    table: Arc::new(table),
                }
            }
        };
        let table = memo.table.clone();
        view.memo = Some(memo);
        let digest = table.digest();
        let table_changed = stored_digest.as_deref() != Some(digest);
        if !table_changed && view.unsaved.is_empty() && view.unsaved_suspects.is_empty() {
            return Write::Unchanged;
        }
        if !self.may_act() {
            return Write::NotActing;
        }
        let commit = Commit {
            table: table_changed.then_some(&*table),
            health: &view.unsaved,
            suspects: &view.unsaved_suspects,
            generation_floor: *generation_floor,
            holder_id: &self.replica_id,
            now_ms: unix_ms(),
        };
        let span = info_span!(
            "write_table",
            epoch = self.grant.epoch,
            table = table_changed,
            rows = table.len(),
            health_changes = view.unsaved.set.len() + view.unsaved.removed.len(),
            generation = Empty,
            otel.status_code = Empty,
            otel.status_message = Empty,
        );
        match self
            .store
            .commit(&self.grant, &commit)
            .instrument(span.clone())
            .await
        {
            Ok(Committed::Written { generation }) => {
                if let Some(g) = generation {
                    span.record("generation", g);
                    Span::current().record("generation", g);
                    *generation_floor = (*generation_floor).max(g);
                    *stored_digest = Some(digest.to_string());
                }
                view.unsaved = HealthChanges::default();
                view.unsaved_suspects = SuspectChanges::default();
                Write::Written { generation }
            }
            Ok(Committed::Fenced { reason }) => {
                mark_error(&span, &format!("fenced by redis: {reason}"));
                Write::Fenced(reason)
            }
            Err(e) => {
                mark_error(&span, &e.to_string());
                Write::Failed(e)
            }
        }
    }
}

struct Coordinator {
    config: Config,
    store: Store,
    pinger: Pinger,
    status: watch::Sender<Status>,
    metrics: Arc<Metrics>,
    epoch_floor: u64,
    generation_floor: u64,
    /// Fingerprints of the invalid entries already logged.
    known_rejections: HashSet<u64>,
    /// Redis trouble is logged once per streak, not once per retry.
    read_failing: bool,
    /// The last failed cycle's error: a streak of the same one is logged once.
    last_cycle_error: Option<String>,
    write_failing: bool,
    acquire_failing: bool,
    /// The epoch this replica last released, to ignore its own notification.
    released_epoch: Option<u64>,
}

impl Coordinator {
    fn new(
        config: Config,
        store: Store,
        pinger: Pinger,
        status: watch::Sender<Status>,
        metrics: Arc<Metrics>,
    ) -> Coordinator {
        Coordinator {
            config,
            store,
            pinger,
            status,
            metrics,
            epoch_floor: 0,
            generation_floor: 0,
            known_rejections: HashSet::new(),
            read_failing: false,
            last_cycle_error: None,
            write_failing: false,
            acquire_failing: false,
            released_epoch: None,
        }
    }

    /// Changes the status and keeps the gauges in step with it.
    fn update(&self, f: impl FnOnce(&mut Status)) {
        self.status.send_modify(|s| {
            f(s);
            self.metrics.sync(s);
        });
    }

    /// Counts a Redis error; a successful call marks Redis as reachable.
    fn redis_result<T>(&self, r: &Result<T, StoreError>) {
        match r {
            Ok(_) => self.update(|s| s.redis_ok_at = Some(Instant::now())),
            Err(e) => self.metrics.redis_error(e.kind()),
        }
    }

    async fn run(mut self, cancel: CancellationToken) {
        let keys = self.store.keys().clone();
        let channels = vec![keys.lease_channel.clone(), keys.table_channel.clone()];
        let mut notifications = self.store.subscribe(channels.clone(), cancel.child_token());
        // Background steps that must never hold up a renewal report back here.
        let (census_tx, mut census_rx) = mpsc::channel(4);
        let census = tokio::spawn(census_task(
            self.store.clone(),
            self.config.replica_id.clone(),
            self.config.census_interval,
            census_tx,
        ));
        let _census = AbortOnDrop(census);
        let (floor_tx, mut floor_rx) = mpsc::channel(1);
        let (hint_tx, hint_rx) = mpsc::channel(1);
        let _floors = AbortOnDrop(tokio::spawn(generation_task(
            self.store.clone(),
            hint_rx,
            floor_tx,
        )));
        if self.config.redis_wait_replicas == 0 {
            let store = self.store.clone();
            tokio::spawn(async move {
                if let Some(n) = store.connected_replicas().await.filter(|n| *n > 0) {
                    tracing::warn!(
                        replicas = n,
                        "redis has replicas but -redis-wait-replicas is 0: a failover of redis \
                         can lose the lease and let two replicas act for up to one TTL"
                    );
                }
            });
        }
        let mut state = State::Standby {
            next_attempt: Instant::now(),
        };
        let mut cycle: Option<JoinHandle<Result<CycleReport, CycleError>>> = None;
        tracing::info!(replica = %self.config.replica_id, table = %keys.table, "replica started as standby");

        loop {
            // Liveness for /healthz: this loop still turns. Written without
            // waking the status receivers.
            self.status.send_if_modified(|s| {
                s.heartbeat = Some(Instant::now());
                false
            });
            let (lease_at, cycle_at) = match &state {
                State::Standby { next_attempt } => (*next_attempt, None),
                State::Holder(h) => (h.lease.next_renewal(), Some(h.next_cycle)),
            };
            let event = tokio::select! {
                biased;
                _ = cancel.cancelled() => Event::Shutdown,
                r = join(&mut cycle), if cycle.is_some() => {
                    cycle = None;
                    Event::CycleDone(Box::new(r))
                }
                _ = sleep_until(lease_at) => Event::LeaseTimer,
                n = notifications.recv() => match n {
                    Some(Notification::Message(ch, epoch)) if ch == keys.lease_channel => Event::Released(epoch),
                    Some(n) => Event::Notified(n),
                    None => Event::SubscriptionLost,
                },
                _ = sleep_until(cycle_at.unwrap_or(lease_at)), if cycle_at.is_some() && cycle.is_none() => Event::CycleTimer,
                Some(step) = census_rx.recv() => Event::Census(step),
                Some(floor) = floor_rx.recv() => Event::Floor(floor),
            };

            state = match (state, event) {
                (state, Event::Shutdown) => {
                    if let Some(c) = cycle.take() {
                        c.abort();
                    }
                    if let State::Holder(h) = state {
                        self.release(&h.lease).await;
                    }
                    tracing::info!(replica = %self.config.replica_id, "replica stopped");
                    return;
                }
                (state, Event::SubscriptionLost) => {
                    // The subscriber task ended without being cancelled (it
                    // never should): subscribe again rather than stop acting.
                    tracing::error!("the notification subscription ended; subscribing again");
                    notifications = self.store.subscribe(channels.clone(), cancel.child_token());
                    state
                }
                (state, Event::Census(step)) => {
                    self.redis_result(&step);
                    if let Ok(Some(view)) = step {
                        self.update(|s| s.census = Some(view));
                    }
                    state
                }
                (state, Event::Floor(floor)) => {
                    self.redis_result(&floor);
                    match floor {
                        Ok(g) => {
                            self.generation_floor = self.generation_floor.max(g);
                            self.update(|s| {
                                bump(&mut s.generation, g);
                            });
                        }
                        Err(e) => tracing::debug!(error = %e, "could not re-read the generation"),
                    }
                    state
                }
                // A table write by some holder: a hint to re-read the
                // generation from Redis (its payload is not trusted: any client
                // allowed to publish could send anything). A hint that finds a
                // read pending is dropped: that read covers it.
                (state, Event::Notified(Notification::Message(..))) => {
                    let _ = hint_tx.try_send(());
                    state
                }
                (state, Event::Notified(Notification::Subscribed)) => {
                    let _ = hint_tx.try_send(());
                    state
                }
                (State::Standby { .. }, Event::LeaseTimer) => self.try_acquire().await,
                (State::Standby { next_attempt }, Event::Released(epoch)) => {
                    // Our own release (we stepped down) is no reason to come back at
                    // once: that would spin if whatever made us step down persists.
                    if epoch.parse().ok() == self.released_epoch {
                        State::Standby { next_attempt }
                    } else {
                        self.try_acquire().await
                    }
                }
                (State::Standby { next_attempt }, Event::CycleTimer) => {
                    State::Standby { next_attempt }
                }
                (State::Standby { next_attempt }, Event::CycleDone(_)) => {
                    // A cycle of an earlier holding; its results are void.
                    State::Standby { next_attempt }
                }
                (State::Holder(h), Event::Released(_)) => State::Holder(h),
                (State::Holder(h), Event::LeaseTimer) => {
                    let next = self.renew(h).await;
                    if matches!(next, State::Standby { .. })
                        && let Some(c) = cycle.take()
                    {
                        c.abort();
                    }
                    next
                }
                (State::Holder(mut h), Event::CycleTimer) => {
                    if h.lease.may_act(Instant::now()) {
                        h.cycle_started = Instant::now();
                        h.cycle_span = info_span!(
                            "cycle",
                            replica = %self.config.replica_id,
                            epoch = h.lease.epoch(),
                            members = Empty,
                            live = Empty,
                            failed = Empty,
                            units = Empty,
                            changed = Empty,
                            generation = Empty,
                            otel.status_code = Empty,
                            otel.status_message = Empty,
                        );
                        let task = self.cycle_task(&mut h).instrument(h.cycle_span.clone());
                        cycle = Some(tokio::spawn(task));
                    }
                    let poll = self.config.poll_interval;
                    h.next_cycle = (h.next_cycle + poll).max(Instant::now());
                    State::Holder(h)
                }
                (State::Holder(h), Event::CycleDone(report)) => self.finish_cycle(h, *report),
            };
        }
    }

    /// Stops acting. A lease that lapsed locally may still be ours in Redis:
    /// give it back (best effort, fenced by its token) so that a standby need
    /// not wait out the TTL.
    fn step_down(
        &mut self,
        transition: &'static str,
        why: &str,
        lease: Option<&HeldLease>,
    ) -> State {
        let epoch = lease.map_or(0, HeldLease::epoch);
        self.metrics.lease(transition);
        lease_span(&self.config.replica_id, transition, epoch).in_scope(|| {
            tracing::warn!(replica = %self.config.replica_id, epoch, reason = why, "stepping down to standby")
        });
        // A lease that lapsed locally may still be ours in Redis, and one we
        // hand over is: give it back (fenced by its token), so that a standby
        // need not wait out the TTL.
        if let Some(lease) = lease.filter(|_| matches!(transition, "lapsed" | "abdicated")) {
            let (store, grant) = (self.store.clone(), lease.grant.clone());
            self.released_epoch = Some(grant.epoch);
            tokio::spawn(async move {
                if let Ok(true) = store.release(&grant).await {
                    tracing::info!(epoch = grant.epoch, "lease given back");
                }
            });
        }
        // A standby pings nobody: drop the cached connections to members.
        self.pinger.retain(&HashSet::new());
        self.update(|s| {
            s.role = Role::Standby;
            s.holder = None;
        });
        State::Standby {
            next_attempt: Instant::now() + self.config.lease.retry_interval,
        }
    }

    async fn try_acquire(&mut self) -> State {
        let timing = self.config.lease;
        let sent_at = Instant::now();
        let claim = Claim {
            ttl: timing.ttl,
            epoch_floor: self.epoch_floor,
            generation_floor: self.generation_floor,
            holder_id: &self.config.replica_id,
            now_ms: unix_ms(),
            failure_threshold: self.config.failure_threshold,
        };
        let attempt = self.store.acquire(&claim).await;
        self.redis_result(&attempt);
        if attempt.is_ok() && std::mem::take(&mut self.acquire_failing) {
            tracing::info!("redis reachable again");
        }
        match attempt {
            Ok(Acquisition::Acquired(grant)) => {
                self.epoch_floor = self.epoch_floor.max(grant.epoch);
                let lease = HeldLease::new(grant, timing, sent_at);
                self.metrics.lease("acquired");
                // Liveness history lets this holder write the same table as the
                // last one. If it cannot be read, start without it (logged):
                // giving the lease back would only make every replica retry.
                let loaded = self.store.load_holding().await;
                self.redis_result(&loaded);
                let inherited = loaded.unwrap_or_else(|e| {
                    tracing::error!(error = %e, key = %self.store.keys().liveness, "could not load liveness history; starting without it");
                    Default::default()
                });
                let (liveness, bad) =
                    Liveness::restore(self.config.failure_threshold, inherited.liveness);
                for (member, value) in bad {
                    tracing::warn!(key = %self.store.keys().liveness, member, value, "ignoring unreadable liveness entry");
                }
                for (member, value) in &inherited.unreadable_suspects {
                    tracing::warn!(key = %self.store.keys().suspects, member, value, "ignoring unreadable suspect entry");
                }
                if !inherited.suspects.is_empty() {
                    tracing::warn!(
                        suspects = inherited.suspects.len(),
                        "inherited members suspected of a mass failure: their units stay until this replica's pings confirm or clear it"
                    );
                }
                let generation = inherited.generation;
                let h_count = liveness.iter().count();
                self.generation_floor = self.generation_floor.max(generation);
                lease_span(&self.config.replica_id, "acquired", lease.epoch()).in_scope(|| {
                    tracing::info!(
                        replica = %self.config.replica_id,
                        epoch = lease.epoch(),
                        known_members = h_count,
                        "lease acquired; acting as holder"
                    )
                });
                self.update(|s| {
                    s.lease_problem = None;
                    s.role = Role::Holder;
                    s.epoch = lease.epoch();
                    s.holder = Some(self.config.replica_id.clone());
                    s.lease_acquisitions += 1;
                    bump(&mut s.generation, generation);
                });
                let (acts_until, _) = watch::channel(lease.acts_until());
                State::Holder(Box::new(Holding {
                    lease,
                    acts_until,
                    view: HolderView {
                        liveness,
                        unsaved: HealthChanges::default(),
                        suspects: inherited.suspects,
                        unsaved_suspects: SuspectChanges::default(),
                        memo: None,
                    },
                    next_cycle: Instant::now(),
                    cycle_started: Instant::now(),
                    cycle_span: Span::none(),
                    in_flight: InFlight::new(),
                    in_flight_members: HashSet::new(),
                }))
            }
            Ok(Acquisition::Held {
                pttl,
                holder,
                epoch,
                generation,
                foreign,
            }) => {
                self.epoch_floor = self.epoch_floor.max(epoch);
                // Every attempt refreshes the floors: notifications are hints
                // only (anyone may publish on their channels), and can be missed.
                self.generation_floor = self.generation_floor.max(generation);
                if let Some(why) = &foreign
                    && self.status.borrow().lease_problem.as_ref() != Some(why)
                {
                    self.metrics.lease("foreign");
                    tracing::warn!(
                        key = %self.store.keys().lease,
                        problem = %why,
                        "the lease key was not written by a replica; it was given a TTL and will lapse"
                    );
                }
                self.update(|s| {
                    s.holder = (!holder.is_empty()).then(|| holder.clone());
                    s.epoch = epoch;
                    bump(&mut s.generation, generation);
                    s.lease_problem = foreign.clone();
                });
                State::Standby {
                    next_attempt: lease::next_attempt(Instant::now(), pttl, timing.retry_interval),
                }
            }
            Err(e) => {
                if !std::mem::replace(&mut self.acquire_failing, true) || !e.is_retryable() {
                    tracing::warn!(error = %e, kind = e.kind(), "lease acquisition failed; retrying every retry interval");
                }
                State::Standby {
                    next_attempt: Instant::now() + timing.retry_interval,
                }
            }
        }
    }

    async fn renew(&mut self, mut h: Box<Holding>) -> State {
        let now = Instant::now();
        let epoch = h.lease.epoch();
        if !h.lease.may_act(now) {
            return self.step_down(
                "lapsed",
                "could not renew the lease within the renew deadline",
                Some(&h.lease),
            );
        }
        let budget = h.lease.renewal_budget(now);
        let renewal = self
            .store
            .renew(&h.lease.grant, self.config.lease.ttl, budget)
            .await;
        self.redis_result(&renewal);
        match renewal {
            Ok(Renewal::Renewed) => {
                h.lease.renewed(now);
                h.acts_until.send_replace(h.lease.acts_until());
                State::Holder(h)
            }
            Ok(Renewal::Lost(why)) => self.step_down("lost", why.describe(), Some(&h.lease)),
            Err(e) => {
                let span = lease_span(&self.config.replica_id, "renew_failed", epoch);
                mark_error(&span, &e.to_string());
                span.in_scope(|| {
                    tracing::warn!(error = %e, kind = e.kind(), epoch, "lease renewal failed; retrying until the renew deadline")
                });
                h.lease.renewal_failed(Instant::now());
                if h.lease.may_act(Instant::now()) {
                    State::Holder(h)
                } else {
                    self.step_down(
                        "lapsed",
                        "could not renew the lease within the renew deadline",
                        Some(&h.lease),
                    )
                }
            }
        }
    }

    async fn release(&self, lease: &HeldLease) {
        let released = self.store.release(&lease.grant).await;
        self.redis_result(&released);
        match released {
            Ok(true) => {
                self.metrics.lease("released");
                lease_span(&self.config.replica_id, "released", lease.epoch())
                    .in_scope(|| tracing::info!(epoch = lease.epoch(), "lease released"));
            }
            Ok(false) => tracing::info!(epoch = lease.epoch(), "lease was no longer ours"),
            Err(e) => {
                tracing::warn!(error = %e, epoch = lease.epoch(), "could not release the lease; it will lapse")
            }
        }
    }

    /// The IO half of a cycle, run as its own task so renewals never wait on it.
    /// One holder cycle, run as its own task so renewals never wait on it:
    /// read, ping, solve, and write if the table or liveness changed. The write
    /// is fenced by Redis; the task also checks the lease is locally valid
    /// (`acts_until`) right before writing.
    fn cycle_task(
        &self,
        h: &mut Holding,
    ) -> impl Future<Output = Result<CycleReport, CycleError>> + Send + 'static {
        let ctx = CycleContext {
            store: self.store.clone(),
            pinger: self.pinger.clone(),
            metrics: self.metrics.clone(),
            services: self.config.services_namespaces.clone(),
            units_key: self.config.workunits_namespace.clone(),
            limits: ListLimits {
                entries: self.config.max_list_entries,
                bytes: self.config.max_list_bytes,
            },
            replica_id: self.config.replica_id.clone(),
            forget_after: self.config.forget_after,
            grant: h.lease.grant.clone(),
            acts_until: h.acts_until.subscribe(),
            generation_floor: self.generation_floor,
            carried: std::mem::take(&mut h.in_flight),
            carried_members: std::mem::take(&mut h.in_flight_members),
            guard: Guard {
                percent: self.config.mass_failure_percent,
                confirm_ms: self.config.mass_failure_confirm.as_millis() as u64,
            },
        };
        ctx.run(h.view.clone())
    }

    /// Takes a finished cycle's results into the holder's state.
    fn finish_cycle(
        &mut self,
        mut h: Box<Holding>,
        report: Result<CycleReport, CycleError>,
    ) -> State {
        let took = h.cycle_started.elapsed();
        // Closed (and exported) when this function returns.
        let span = std::mem::replace(&mut h.cycle_span, Span::none());
        // A cycle whose reads worked but whose write failed did not reach
        // Redis as it should: it refreshes nothing and counts as a failure.
        match &report {
            Ok(r) => match &r.write {
                Write::Failed(e) => self.metrics.redis_error(e.kind()),
                _ => self.redis_result(&Ok::<(), StoreError>(())),
            },
            Err(CycleError::Read(e)) => self.metrics.redis_error(e.kind()),
            Err(CycleError::Inputs { .. }) => self.redis_result(&Ok::<(), StoreError>(())),
        }
        let report = match report {
            Ok(r) => {
                if std::mem::take(&mut self.read_failing) {
                    tracing::info!("cycles recovered");
                }
                self.last_cycle_error = None;
                r
            }
            Err(e) => {
                let text = e.to_string();
                if self.last_cycle_error.as_deref() != Some(text.as_str()) {
                    span.in_scope(|| {
                        tracing::warn!(error = %e, kind = e.kind(), "cycle skipped; keeping the last table")
                    });
                }
                self.last_cycle_error = Some(text);
                self.read_failing = true;
                let outcome = match e {
                    CycleError::Read(_) => "read_error",
                    CycleError::Inputs { .. } => "input_error",
                };
                self.metrics.cycle(outcome, took);
                self.update(|s| {
                    s.failed_cycles += 1;
                    s.last_error = Some(e.to_string());
                });
                return State::Holder(h);
            }
        };
        if report.epoch != h.lease.epoch() {
            return State::Holder(h);
        }
        span.in_scope(|| self.log_inputs(&report));
        span.in_scope(|| log_review(&report.review, &report.view));
        h.view = report.view;
        h.in_flight = report.in_flight;
        h.in_flight_members = report.in_flight_members;
        let table = h.view.memo.as_ref().expect("settled").table.clone();
        let abdicate = report.review.new_episode()
            && matches!(report.write, Write::Written { .. })
            && self.status.borrow().census.is_none_or(|c| c.replicas > 1);
        self.generation_floor = self.generation_floor.max(report.generation_floor);
        for (member, list) in &report.forgotten {
            span.in_scope(|| {
                tracing::info!(member, list, "forgot a long-failing member (-forget-after)")
            });
        }
        match report.write {
            Write::Unchanged | Write::NotActing => {}
            Write::Written { generation: None } => {}
            Write::Written {
                generation: Some(g),
            } => {
                self.generation_floor = self.generation_floor.max(g);
                self.metrics.table_writes.inc();
                let bytes: usize = table.rows().iter().map(|(m, v)| m.len() + v.len()).sum();
                self.metrics.table_bytes.set(bytes as u64);
                span.in_scope(|| {
                    tracing::info!(
                        epoch = h.lease.epoch(),
                        generation = g,
                        members = table.len(),
                        assignments = table.assignments(),
                        units = report.inputs.units.len(),
                        "matching table written"
                    )
                });
                self.update(|s| {
                    bump(&mut s.generation, g);
                    s.last_write_ms = Some(unix_ms());
                    s.table_writes += 1;
                });
            }
            Write::Fenced(reason) => {
                self.metrics.fenced_writes.inc();
                self.update(|s| s.fenced_writes += 1);
                let epoch = h.lease.epoch();
                span.in_scope(|| {
                    tracing::warn!(
                        epoch,
                        reason,
                        "table write rejected by redis: this replica is no longer the holder"
                    )
                });
                drop(span);
                let _ = epoch;
                return self.step_down("fenced", "write fenced", Some(&h.lease));
            }
            Write::Failed(e) => {
                if !self.write_failing || !e.is_retryable() {
                    span.in_scope(|| tracing::warn!(error = %e, kind = e.kind(), "table write failed; keeping the last table and retrying next cycle"));
                }
                self.write_failing = true;
                self.metrics.cycle("write_error", took);
                self.update(|s| {
                    s.cycles += 1;
                    s.failed_cycles += 1;
                    s.last_error = Some(e.to_string());
                });
                return State::Holder(h);
            }
        }
        if std::mem::take(&mut self.write_failing) {
            tracing::info!("table writes recovered");
        }
        self.metrics.cycle("ok", took);
        let by_kind = ["unit", "address", "duplicate_member"]
            .into_iter()
            .map(|k| {
                (
                    k,
                    report
                        .inputs
                        .rejections
                        .iter()
                        .filter(|r| r.kind() == k)
                        .count(),
                )
            })
            .collect();
        self.update(|s| {
            s.cycles += 1;
            s.last_error = None;
            s.units = report.inputs.units.len();
            s.invalid_inputs = report.inputs.rejections.len();
            s.invalid_by_kind = by_kind;
            s.groups = report.groups;
            s.suspects = h.view.suspects.len();
        });
        if abdicate {
            return self.step_down(
                "abdicated",
                "most of a group failed at once, which this replica's own network may cause: \
                 handing the lease over so that another replica can confirm",
                Some(&h.lease),
            );
        }
        State::Holder(h)
    }

    /// Logs what changed in the inputs and in liveness, summarised: a burst
    /// (100,000 bad units, 10,000 members failing at once) gives the first
    /// few lines and one count, and a state that persists is not repeated.
    fn log_inputs(&mut self, report: &CycleReport) {
        let fingerprint = |r: &crate::core::inputs::Rejection| {
            xxhash_rust::xxh3::xxh3_64(r.to_string().as_bytes())
        };
        let current: HashSet<u64> = report.inputs.rejections.iter().map(fingerprint).collect();
        let new: Vec<&crate::core::inputs::Rejection> = report
            .inputs
            .rejections
            .iter()
            .filter(|r| !self.known_rejections.contains(&fingerprint(r)))
            .collect();
        for r in new.iter().take(LOG_FIRST) {
            tracing::warn!(kind = r.kind(), "invalid input: {r}");
        }
        if new.len() > LOG_FIRST {
            let by_kind = count_by(new.iter().map(|r| r.kind()));
            tracing::warn!(
                more = new.len() - LOG_FIRST,
                by_kind,
                total_invalid = current.len(),
                "more new invalid inputs (only the first {LOG_FIRST} are logged)"
            );
        }
        self.known_rejections = current;

        let reasons: std::collections::HashMap<&str, &PingFailure> = report
            .failures
            .iter()
            .map(|(m, f)| (m.as_str(), f))
            .collect();
        let (back, failing): (Vec<_>, Vec<_>) =
            report.transitions.iter().partition(|(_, live)| *live);
        for (member, _) in back.iter().take(LOG_FIRST) {
            tracing::info!(member, "member answers: it gets work");
        }
        if back.len() > LOG_FIRST {
            tracing::info!(
                more = back.len() - LOG_FIRST,
                "more members answer again (only the first {LOG_FIRST} are logged)"
            );
        }
        for (member, _) in failing.iter().take(LOG_FIRST) {
            let reason = reasons
                .get(member.as_str())
                .map(|f| f.to_string())
                .unwrap_or_default();
            tracing::warn!(member, reason, "member failing: its work is redistributed");
        }
        if failing.len() > LOG_FIRST {
            let by_reason = count_by(
                failing
                    .iter()
                    .map(|(m, _)| reasons.get(m.as_str()).map_or("unknown", |f| f.reason())),
            );
            tracing::warn!(
                more = failing.len() - LOG_FIRST,
                by_reason,
                "more members failing (only the first {LOG_FIRST} are logged)"
            );
        }
    }
}

/// Logs what the mass-failure guard did in one cycle.
fn log_review(review: &Review, view: &HolderView) {
    for (group, failed, live_before) in &review.episodes {
        tracing::warn!(
            group,
            failed = failed.len(),
            live_before,
            first = %failed.iter().take(LOG_FIRST).cloned().collect::<Vec<_>>().join(","),
            "mass failure: most of a group failed at once; keeping their units until another replica confirms it or -mass-failure-confirm passes"
        );
    }
    if !review.confirmed.is_empty() {
        tracing::warn!(
            confirmed = review.confirmed.len(),
            first = %review.confirmed.iter().take(LOG_FIRST).cloned().collect::<Vec<_>>().join(","),
            "mass failure confirmed: their units move"
        );
    }
    if !review.cleared.is_empty() {
        tracing::info!(
            cleared = review.cleared.len(),
            still_suspected = view.suspects.len(),
            "suspects answer again (the failure was not theirs): their units stay"
        );
    }
}

/// How many lines a burst of similar events gets before one summary line.
const LOG_FIRST: usize = 5;

/// `kind=count` pairs, sorted, for a summary line.
fn count_by<'a>(kinds: impl Iterator<Item = &'a str>) -> String {
    let mut counts = std::collections::BTreeMap::<&str, usize>::new();
    for k in kinds {
        *counts.entry(k).or_default() += 1;
    }
    counts
        .iter()
        .map(|(k, n)| format!("{k}={n}"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Aborts a background task when its owner goes away (also on panic).
struct AbortOnDrop<T>(JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The census (seed 002), as its own task so that a slow Redis never holds up
/// a lease renewal: one step per scheduled instant, each numbered by the
/// instant it was scheduled for (see [`census::Schedule`]). Reports every
/// step's outcome, and the view when one is emitted.
async fn census_task(
    store: Store,
    replica_id: String,
    interval: Duration,
    out: mpsc::Sender<Result<Option<CensusView>, StoreError>>,
) {
    let schedule = census::Schedule::new(interval, census::random_skew(interval));
    let mut census = Census::default();
    let mut last = 0;
    loop {
        let now = unix_ms();
        let at = schedule.next_after(now.max(last));
        tokio::time::sleep(Duration::from_millis(at - now)).await;
        last = at;
        let number = schedule.number(at);
        let report = match census.current() {
            Some(v) => format!("{} {} {} {}", v.index, v.replicas, unix_ms(), v.interval),
            None => format!("- - {}", unix_ms()),
        };
        let step = store
            .census_step(number, interval, &replica_id, &report)
            .await
            .map(|reply| {
                let before = census.current();
                let view = census.step(number, reply)?;
                if before.map(|b| (b.index, b.replicas)) != Some((view.index, view.replicas)) {
                    info_span!("census", replica = %replica_id, index = view.index, replicas = view.replicas)
                        .in_scope(|| tracing::info!(index = view.index, replicas = view.replicas, "census changed"));
                }
                Some(view)
            });
        if let Err(e) = &step {
            tracing::debug!(error = %e, "census step failed");
        }
        if out.send(step).await.is_err() {
            return;
        }
    }
}

/// Re-reads the stored generation on each hint (a table-change notification),
/// so that a standby's floor follows every write without trusting what was
/// published.
async fn generation_task(
    store: Store,
    mut hints: mpsc::Receiver<()>,
    out: mpsc::Sender<Result<u64, StoreError>>,
) {
    while hints.recv().await.is_some() {
        if out.send(store.read_generation().await).await.is_err() {
            return;
        }
    }
}

fn bump(slot: &mut u64, value: u64) -> bool {
    let changed = value > *slot;
    *slot = (*slot).max(value);
    changed
}

async fn join<T>(handle: &mut Option<JoinHandle<T>>) -> T
where
    T: Send + 'static,
{
    match handle {
        Some(h) => match h.await {
            Ok(v) => v,
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            Err(_) => std::future::pending().await,
        },
        None => std::future::pending().await,
    }
}

/// Identifies what the table depends on: the live members of each group and the
/// units. Equal keys mean an equal table, so solving can be skipped.
fn inputs_key(inputs: &Inputs, keeps_units: impl Fn(&str) -> bool) -> u128 {
    let mut h = Xxh3::new();
    let mut put = |tag: u8, s: &str| {
        h.update(&[tag]);
        h.update(&(s.len() as u64).to_le_bytes());
        h.update(s.as_bytes());
    };
    for g in &inputs.groups {
        put(1, &g.name);
        for m in g.members.iter().filter(|m| keeps_units(m)) {
            put(2, m);
        }
    }
    for u in &inputs.units {
        put(3, u);
    }
    h.digest128()
}
