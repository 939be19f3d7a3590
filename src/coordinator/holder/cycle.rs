//! One holder cycle, run as its own task so that renewals never wait on it:
//! read the lists and the stored table's state, ping every member, update
//! liveness and the mass-failure guard, solve the table, and write it (fenced)
//! if it or the liveness history changed. It performs IO through the edges and
//! decides nothing about the lease: the machine (`machine.rs`) started it and
//! takes its [`CycleReport`] back.
//!
//! Pings settle in two phases, so that one hung member (which answers only
//! when its ping times out) never delays what the others already told us:
//!
//! ```text
//!   0 ── answers, refusals (~1 ms) ──▶ grace (50 ms): apply, solve, write if changed
//!                                      still running: carried to the next cycle,
//!                                      whose state stays as it was meanwhile
//! ```
//!
//! One exception: when a live member failed and few others answered by the
//! grace, the cycle waits for this round's pings (up to their timeout), so
//! that a cut of the holder's own network that lands in the middle of a round
//! is seen as one mass failure, not as one failure now and the rest later.
//!
//! Another: when more members are still unheard of (never answered any
//! holder) than heard from, as in a fresh fleet's first cycle, the cycle
//! waits for their first answers (up to a first contact's allowance), so
//! that units are placed once over all of them rather than on the fastest
//! few and then moved.
//!
//! Guarantees: a failed read never produces a write (the last table stays);
//! the table is written only when its digest differs from the stored one; the
//! cycle checks the lease is locally valid (`acts_until`) right before it
//! writes, and Redis re-checks token and epoch in the write itself.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use std::time::Instant;
use tokio::sync::watch;
use tracing::field::Empty;
use tracing::{Instrument as _, Span, info_span};

use super::core::Judge;
use super::handoff::Refusal;
use super::lists::assemble;
use super::pings::{InFlight, Round};
use super::solve::SolveSettings;
use super::warm::WarmView;
use super::{
    CycleError, CycleReport, HolderView, LOG_FIRST, Write, group_counts, listed_entries,
    mark_error, record_counts,
};
use crate::core::handoff;
use crate::core::inputs::Inputs;
use crate::core::suspicion::{Guard, Review};
use crate::core::table::MatchingTable;
use crate::core::timing::Timing;
use crate::edge::clock;
use crate::edge::clock::WallClock;
use crate::edge::grpc::{PingFailure, PingReport, Pinger};
use crate::edge::pings::MemberPings;
use crate::edge::redis::{LeaseGrant, ListLimits, Snapshot, Store};
use crate::edge::store::HoldingStore;
use crate::ops::metrics::Metrics;

/// Everything a cycle task needs, owned, so it runs beside the state machine.
/// Generic over its IO (the store, the pings), so that the simulation runs
/// the same cycle against its in-memory store and simulated members.
pub(in crate::coordinator) struct CycleContext<S = Store, P = Pinger> {
    pub(in crate::coordinator) store: S,
    pub(in crate::coordinator) pinger: P,
    /// Unix ms, for values shared with members.
    pub(in crate::coordinator) wall: WallClock,
    pub(in crate::coordinator) metrics: Arc<Metrics>,
    pub(in crate::coordinator) services: Vec<String>,
    pub(in crate::coordinator) units_key: String,
    pub(in crate::coordinator) limits: ListLimits,
    pub(in crate::coordinator) replica_id: String,
    pub(in crate::coordinator) forget_after: Option<Duration>,
    pub(in crate::coordinator) grant: LeaseGrant,
    pub(in crate::coordinator) acts_until: watch::Receiver<Instant>,
    pub(in crate::coordinator) generation_floor: u64,
    /// Pings of earlier cycles still running, and their members.
    pub(in crate::coordinator) carried: InFlight,
    pub(in crate::coordinator) carried_members: HashSet<String>,
    pub(in crate::coordinator) guard: Guard,
    pub(in crate::coordinator) failure_threshold: u32,
    pub(in crate::coordinator) ping_timeout: Duration,
    /// The built-in pacing (the ping round's grace, a first contact's
    /// allowance).
    pub(in crate::coordinator) timing: Timing,
    pub(in crate::coordinator) handoff: handoff::Settings,
    /// The assignment mode and `-max-moves-per-cycle`.
    pub(in crate::coordinator) solve: SolveSettings,
    /// What this replica prepared as a standby, for a new holding's first
    /// cycle (see [`WarmView`]).
    pub(in crate::coordinator) warm: Option<WarmView>,
}

impl<S: HoldingStore, P: MemberPings> CycleContext<S, P> {
    pub(super) fn may_act(&self) -> bool {
        clock::now() < *self.acts_until.borrow()
    }

    /// Reads what a holder must know before it plans (see
    /// `core::handoff::Ledger`): on a new holding (`view` is `None`), what
    /// the last holder left (liveness history, so that this holder writes
    /// the same table, not a reshuffle; mass-failure suspects; units in
    /// transit, whose handoffs continue); after a write of unknown outcome
    /// (the ledger is stale), Redis' state again, which the view is
    /// reconciled with. What it cannot read fails the cycle
    /// ([`CycleError::Unreadable`]): the holding does not act and retries
    /// next cycle; it never starts from an empty view. Returns the view and
    /// the stored table it read, for the plan.
    async fn fresh_view(
        &mut self,
        view: Option<HolderView>,
    ) -> Result<(HolderView, Option<Arc<MatchingTable>>), CycleError> {
        if view.as_ref().is_some_and(|v| !v.handoff.ledger.stale()) {
            return Ok((view.expect("checked"), None));
        }
        let keys = self.store.keys().clone();
        // A new holding has nothing to reconcile the table with (its first
        // plan reads and verifies it anyway); a resync does.
        let inherited = self
            .store
            .read_holding(view.is_some())
            .await
            .map_err(CycleError::Unreadable)?;
        let resyncing = view.is_some();
        let (mut view, r) = HolderView::reconcile(
            view,
            inherited,
            self.failure_threshold,
            &self.handoff,
            clock::now(),
            self.wall.unix_ms(),
        );
        self.generation_floor = self.generation_floor.max(r.generation);
        for (member, value) in &r.unreadable_suspects {
            tracing::warn!(key = %keys.suspects, member, value, "ignoring unreadable suspect entry");
        }
        for (member, value) in &r.unreadable_liveness {
            tracing::warn!(key = %keys.liveness, member, value, "ignoring unreadable liveness entry");
        }
        if !r.unreadable_transit.is_empty() {
            // Written only by holders: an unreadable entry is an operator's
            // edit.
            tracing::warn!(
                key = %keys.transit,
                count = r.unreadable_transit.len(),
                first = %r.unreadable_transit.iter().take(LOG_FIRST).cloned().collect::<Vec<_>>().join(" "),
                "unreadable transit entries: their units wait the longest any member may ask for"
            );
        }
        if r.inherited_suspects > 0 {
            tracing::warn!(
                suspects = r.inherited_suspects,
                "inherited members suspected of a mass failure: their units stay until this replica's pings confirm or clear it"
            );
        }
        if resyncing {
            self.metrics.resyncs.inc();
        } else if let Some(warm) = self.warm.take() {
            view.warm_from(warm);
        }
        let (table, resync) = (r.table, r.resync);
        tracing::info!(
            known_members = view.liveness.iter().count(),
            in_transit = view.handoff.ledger.in_transit(),
            restored = resync.restored,
            version = r.version,
            applied = ?resync.applied,
            held_tables = view.handoff.ledger.held().len(),
            "read what the holder must know before it plans"
        );
        Ok((view, table))
    }

    /// One cycle: (on a new holding, load what the last holder left), read,
    /// ping, review mass failures, solve, and write if anything changed.
    pub(in crate::coordinator) async fn run(
        mut self,
        view: Option<HolderView>,
        refused: Vec<Refusal>,
    ) -> Result<CycleReport, CycleError> {
        let (mut view, held_table) = self.fresh_view(view).await?;
        // Refusals the executor's probes found: what they prove counts
        // (liveness comes from this cycle's own pings).
        view.handoff.observe_refusals(&refused);
        let read = info_span!(
            "read_inputs",
            lists = self.services.len() + 1,
            otel.status_code = Empty,
            otel.status_message = Empty
        );
        let held = view
            .lists
            .as_ref()
            .map(|c| c.held(&self.units_key))
            .unwrap_or_default();
        let snapshot = match self
            .store
            .read_snapshot(
                &self.services,
                &self.units_key,
                self.limits,
                &held,
                view.handoff.reports_version,
            )
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
            groups,
            units,
            stored_digest,
            stored_generation,
            stored_table,
            reports,
        } = snapshot;
        // The members' reports first: without them (a read that may work
        // next time) nothing is planned.
        if let Err(e) = view.handoff.observe(reports, self.store.keys()) {
            mark_error(&Span::current(), &e.to_string());
            return Err(CycleError::Read(e));
        }
        let read_lists = groups
            .iter()
            .chain([&units])
            .filter(|l| l.entries.is_some());
        let read_count = read_lists.count() as u64;
        self.metrics.list_reads("read", read_count);
        self.metrics
            .list_reads("cached", groups.len() as u64 + 1 - read_count);
        let cache = match assemble(view.lists.take(), groups, units).await {
            Ok(c) => c,
            Err(e) => {
                mark_error(&Span::current(), &e.to_string());
                return Err(e);
            }
        };
        let inputs = Arc::clone(&cache.inputs);
        view.lists = Some(cache);
        let members: Vec<String> = inputs.members().map(str::to_string).collect();
        let was_live: HashSet<String> = members
            .iter()
            .filter(|m| view.liveness.is_live(m))
            .cloned()
            .collect();
        let listed = listed_entries(&inputs);
        let stored = Stored {
            digest: stored_digest,
            generation: stored_generation,
            table: stored_table.map(Arc::new).or(held_table),
        };

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
        // In list order: the same lists ping in the same order (the
        // simulation replays a seed exactly).
        let fresh_list: Vec<String> = members
            .iter()
            .filter(|m| !pending_members.contains(*m))
            .cloned()
            .collect();
        let mut pending = ping.in_scope(|| self.pinger.ping_tasks(&fresh_list));
        pending_members.extend(fresh_list.iter().cloned());
        let fresh: HashSet<String> = fresh_list.into_iter().collect();
        for task in carried {
            pending.push(task);
        }
        let mut all_reports: Vec<PingReport> = Vec::with_capacity(members.len());
        let round = Round {
            liveness: &view.liveness,
            was_live: &was_live,
            guard_percent: self.guard.percent,
            grace: self.timing.ping_grace,
            patience: self.ping_timeout.max(self.timing.first_contact),
        };
        let waited = round
            .gather(&mut pending, &mut pending_members, &fresh, &mut all_reports)
            .await;
        if let Some((unheard, heard, still_unheard)) = waited.first_contacts {
            tracing::info!(
                unheard,
                heard,
                still_unheard,
                "waited for first contacts before placing units"
            );
        }
        for r in &all_reports {
            match &r.result {
                Ok(rtt) => self.metrics.ping_ok(*rtt),
                Err(f) => self.metrics.ping_failed(f.reason()),
            }
        }
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
        let observed =
            self.observe_round(&mut view, &inputs, &listed, all_reports, &was_live, true);
        view.handoff.forget_departed(&inputs);
        view.handoff.inputs = Some(Arc::clone(&inputs));
        let (write, generation_floor) = self.settle_stored(&inputs, &mut view, stored).await;
        drop(ping);
        let listed_now: HashSet<&str> = inputs.members().collect();
        self.pinger.retain(&listed_now);
        let groups = group_counts(&inputs, &view);
        record_counts(&inputs, &mut view, &groups, &write);

        let mut forgotten = Vec::new();
        if let Some(after) = self.forget_after
            && matches!(write, Write::Unchanged | Write::Written { .. })
            && self.may_act()
        {
            let pairs = view.forgettable(
                &inputs,
                after.as_millis() as u64,
                self.guard.percent,
                self.wall.unix_ms(),
            );
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
            failures: observed.failures,
            view,
            transitions: observed.transitions,
            review: observed.review,
            groups,
            write,
            generation_floor,
            forgotten,
            in_flight: pending,
            in_flight_members: pending_members,
        })
    }
    /// Takes one round of ping reports into the view: refusals (`gone`) to
    /// the handoff, then liveness and the mass-failure guard
    /// ([`HolderView::observe_round`]). `was_live`: the listed members live
    /// before the round.
    fn observe_round(
        &self,
        view: &mut HolderView,
        inputs: &Inputs,
        listed: &[String],
        reports: Vec<PingReport>,
        was_live: &HashSet<String>,
        full: bool,
    ) -> Observed {
        let why_failed: Vec<String> = reports
            .iter()
            .map(|r| {
                r.result
                    .as_ref()
                    .err()
                    .map(ToString::to_string)
                    .unwrap_or_default()
            })
            .collect();
        let results: Vec<(&str, Result<(), &str>)> = reports
            .iter()
            .zip(&why_failed)
            .map(|(r, why)| {
                let result = match r.result {
                    Ok(_) => Ok(()),
                    Err(_) => Err(why.as_str()),
                };
                (r.member.as_str(), result)
            })
            .collect();
        view.handoff.observe_pings(&reports);
        let judge = Judge {
            guard: self.guard,
            replica_id: &self.replica_id,
            now_ms: self.wall.unix_ms(),
        };
        let review = view.observe_round(inputs, listed, &results, was_live, full, judge);
        drop(results);
        let transitions = inputs
            .members()
            .filter(|m| view.liveness.is_live(m) != was_live.contains(*m))
            .map(|m| (m.to_string(), view.liveness.is_live(m)))
            .collect();
        let failures = reports
            .into_iter()
            .filter_map(|r| r.result.err().map(|e| (r.member, e)))
            .collect();
        Observed {
            review,
            transitions,
            failures,
        }
    }

    /// Writes what the view makes of `stored` (see `settle`), starting from
    /// the floor this holding knows and the stored generation. Returns the
    /// write and the generation floor after it.
    async fn settle_stored(
        &self,
        inputs: &Arc<Inputs>,
        view: &mut HolderView,
        stored: Stored,
    ) -> (Write, u64) {
        let mut digest = stored.digest;
        let mut floor = self.generation_floor.max(stored.generation);
        let write = self
            .settle(
                inputs,
                view,
                &mut digest,
                &mut floor,
                stored.generation,
                stored.table,
            )
            .await;
        (write, floor)
    }

    /// A handoff cycle: reads the members' reports and the table's state,
    /// pings nobody, and plans on the last full cycle's inputs. `refused`:
    /// members whose connection just ended and whose ping sent at once was
    /// refused (their process is gone): they fail now, exactly as a full
    /// cycle's refused ping would make them, without pinging everyone else.
    pub(in crate::coordinator) async fn run_handoff(
        mut self,
        view: Option<HolderView>,
        refused: Vec<Refusal>,
    ) -> Result<CycleReport, CycleError> {
        let Some(view) = view else {
            // A new holding: its first full cycle comes at once anyway.
            return Err(CycleError::NotReady);
        };
        let Some(inputs) = view.handoff.inputs.clone() else {
            return Err(CycleError::NotReady);
        };
        let (mut view, held_table) = self.fresh_view(Some(view)).await?;
        let (state, reports) = tokio::join!(
            self.store.read_table_state(),
            self.store.read_reports_since(view.handoff.reports_version)
        );
        let (digest, generation, table) = state.map_err(CycleError::Read)?;
        let stored = Stored {
            digest,
            generation,
            table: table.map(Arc::new).or(held_table),
        };
        view.handoff
            .observe(reports, self.store.keys())
            .map_err(CycleError::Read)?;
        let listed = listed_entries(&inputs);
        // Every refusal counts for the handoff (a member that deregistered
        // and exited still owes its units); liveness and the mass-failure
        // guard count listed members only.
        view.handoff.observe_refusals(&refused);
        let refused: Vec<PingReport> = refused
            .into_iter()
            .map(|r| r.report)
            .filter(|r| listed.contains(&r.member))
            .collect();
        let mut observed = Observed::default();
        if !refused.is_empty() {
            let was_live: HashSet<String> = inputs
                .members()
                .filter(|m| view.liveness.is_live(m))
                .map(str::to_string)
                .collect();
            for r in &refused {
                if let Err(f) = &r.result {
                    self.metrics.ping_failed(f.reason());
                }
            }
            // The pings were sent when the connections closed (the
            // executor's probes); this span shows their verdicts in the cycle.
            let probes = info_span!(
                "refused",
                members = refused.len(),
                otel.status_code = Empty,
                otel.status_message = Empty
            );
            mark_error(
                &probes,
                &format!(
                    "{} members refused after their connection ended",
                    refused.len()
                ),
            );
            observed = probes.in_scope(|| {
                self.observe_round(&mut view, &inputs, &listed, refused, &was_live, false)
            });
        }
        let (write, generation_floor) = self.settle_stored(&inputs, &mut view, stored).await;
        let groups = if observed.failures.is_empty() {
            view.groups.clone()
        } else {
            let groups = group_counts(&inputs, &view);
            record_counts(&inputs, &mut view, &groups, &write);
            groups
        };
        Ok(CycleReport {
            epoch: self.grant.epoch,
            inputs,
            failures: observed.failures,
            view,
            transitions: observed.transitions,
            review: observed.review,
            groups,
            write,
            generation_floor,
            forgotten: Vec::new(),
            in_flight: std::mem::take(&mut self.carried),
            in_flight_members: std::mem::take(&mut self.carried_members),
        })
    }
}

/// What a round of pings (or of refusals) did to the view.
#[derive(Default)]
struct Observed {
    review: Review,
    /// Members whose liveness changed: (member, live now).
    transitions: Vec<(String, bool)>,
    failures: Vec<(String, PingFailure)>,
}

/// The stored table's state as a cycle read it.
struct Stored {
    digest: Option<String>,
    generation: u64,
    /// The table itself, when it was read (by this cycle or its resync).
    table: Option<Arc<MatchingTable>>,
}
