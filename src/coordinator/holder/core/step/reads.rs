//! The read phases of a cycle (see `step`): what a new holding or a
//! resync reads of what the last holder left, a full cycle's inputs and
//! round of pings (or, a new holding's first, the inherited liveness in
//! their place), and a handoff cycle's table state and refusals; each ends
//! by asking for the next read or by settling where the plan starts.
//!
//! Guarantee: a read that fails ends the cycle without a write; what was
//! read beside the inheritance is used only if it is exactly what would
//! have been asked for next.

use std::collections::HashSet;
use std::sync::Arc;

use tracing::info_span;

use super::{CycleCore, Phase, Stored, judge};
use crate::coordinator::holder::core::HolderView;
use crate::coordinator::holder::core::ready::{CoreConfig, InputsRequest, Kind, Now, Ready};
use crate::coordinator::holder::core::recover;
use crate::coordinator::holder::lists::ListCache;
use crate::coordinator::holder::{CycleError, listed_entries};
use crate::core::handoff::LossSign;
use crate::core::table::MatchingTable;
use crate::edge::grpc::PingReport;
use crate::edge::redis::{CostsRead, Inheritance, ReportsRead, Snapshot};
use crate::error::StoreError;

impl CycleCore {
    pub(super) fn start(&mut self) -> Ready {
        if self.kind == Kind::Handoff {
            // A new holding's first full cycle comes at once anyway.
            let Some(view) = &self.view else {
                return self.done(Err(CycleError::NotReady));
            };
            if view.handoff.inputs.is_none() {
                return self.done(Err(CycleError::NotReady));
            }
        }
        match &self.view {
            Some(v) if !v.handoff.ledger.stale() => self.read(),
            view => {
                // A new holding has nothing to reconcile the table with (its
                // first plan reads and verifies it anyway); a resync does.
                let with_table = view.is_some();
                // A new holding's inputs do not depend on what it inherits
                // (its view starts empty but for the warm lists): read
                // beside it.
                let inputs = (self.kind == Kind::Full && view.is_none()).then(|| {
                    let lists = self.warm.as_ref().and_then(|w| w.view.lists.as_ref());
                    inputs_request(&self.config, lists, None, None)
                });
                self.phase = Phase::Holding;
                Ready::ReadHolding { with_table, inputs }
            }
        }
    }

    /// The view from Redis' state (see [`HolderView::reconcile`]), and the
    /// log of what it found.
    pub(super) fn reconcile(&mut self, inherited: Inheritance, now: Now) {
        let keys = &self.config.keys;
        // A view to reconcile: a resync after a write of unknown outcome.
        let resync = self.view.is_some();
        // What says that a new holding may not know what members work on:
        // the state was written on another server (or nobody recorded
        // which), a generation is known above the stored table's, entries
        // of `{T}:transit` were lost. (A holding that resyncs keeps its own
        // ledger: what it wrote, members may hold.)
        if !resync {
            self.reports_recorded = inherited.reports_recorded;
        }
        let deadline_recorded = inherited
            .deadline_recorded
            .map(std::time::Duration::from_millis);
        let sign = (!resync)
            .then(|| {
                let known = inherited.generation.max(self.config.generation_floor);
                recover::server_sign(
                    inherited.server,
                    self.config.server,
                    inherited.table_generation,
                )
                .or_else(|| {
                    (known > inherited.table_generation).then_some(LossSign::GenerationLost {
                        stored: inherited.table_generation,
                        known,
                    })
                })
                .or_else(|| {
                    inherited
                        .transit_recorded
                        .filter(|n| *n > inherited.transit.len() as u64)
                        .map(|_| LossSign::KeyLost {
                            key: keys.transit.clone(),
                        })
                })
            })
            .flatten();
        let (mut view, r) = HolderView::reconcile(
            self.view.take(),
            inherited,
            self.config.failure_threshold,
            &self.config.handoff,
            now.at,
            now.unix_ms,
        );
        self.floor = self.floor.max(r.generation);
        self.inherited = !resync;
        r.log(keys);
        if !resync && let Some(warm) = self.warm.take() {
            view.warm_from(warm);
        }
        if !resync {
            view.handoff.deadline_inherited = deadline_recorded;
        }
        r.log_view(&view);
        self.held_table = r.table;
        self.view = Some(view);
        if let Some(why) = sign {
            self.begin_recovery(why, now);
        }
    }

    /// A new holding that finds `{T}:members` of another type, or fewer
    /// reports in it than the last writer knew (an edit overwrote the
    /// members' reports, and someone removed it), cannot know which members
    /// speak the protocol, nor their deadlines: it recovers.
    fn reports_lost(&mut self, now: Now) {
        let view = self.view.as_ref().expect("the view is known");
        let fewer = self
            .reports_recorded
            .is_some_and(|n| (view.handoff.reports_read_count() as u64) < n);
        if self.inherited && (!view.handoff.reports_read() || fewer) {
            let key = self.config.keys.members.clone();
            self.begin_recovery(LossSign::KeyLost { key }, now);
        }
    }

    /// The cycle's own read, once the view is known.
    pub(super) fn read(&mut self) -> Ready {
        let refused = std::mem::take(&mut self.refused);
        let view = self.view.as_mut().expect("the view is known");
        match self.kind {
            Kind::Full => {
                // Refusals the executor's probes found: what they prove
                // counts (liveness comes from this cycle's own pings).
                view.handoff.observe_refusals(&refused);
                self.phase = Phase::Inputs;
                Ready::ReadInputs(inputs_request(
                    &self.config,
                    view.lists.as_ref(),
                    view.handoff.reports_version,
                    view.costs.version,
                ))
            }
            Kind::Handoff => {
                self.refused = refused;
                self.phase = Phase::State;
                Ready::ReadState {
                    reports_since: view.handoff.reports_version,
                }
            }
        }
    }

    pub(super) fn inputs_read(
        &mut self,
        r: Result<Snapshot, StoreError>,
        costs: Option<CostsRead>,
        now: Now,
    ) -> Ready {
        let snapshot = match r {
            Ok(s) => s,
            Err(e) => return self.done(Err(CycleError::Read(e))),
        };
        let Snapshot {
            groups,
            units,
            stored_digest,
            stored_generation,
            stored_table,
            reports,
        } = snapshot;
        let mut reports = reports;
        let view = self.view.as_mut().expect("the view is known");
        let quarantine = reports.content.as_mut().and_then(|c| c.quarantine.take());
        view.observe_quarantine(
            self.config.quarantine,
            quarantine,
            &self.config.keys.quarantine,
        );
        // The members' reports first: without them (a read that may work
        // next time) nothing is planned.
        if let Err(e) = view.handoff.observe(reports, &self.config.keys) {
            return self.done(Err(CycleError::Read(e)));
        }
        self.reports_lost(now);
        let view = self.view.as_mut().expect("the view is known");
        if let Some(read) = costs
            && let Err(e) = view.costs.observe(read)
        {
            return self.done(Err(CycleError::Read(e)));
        }
        self.stored = Some(Stored {
            digest: stored_digest,
            generation: stored_generation,
            table: stored_table.map(Arc::new).or(self.held_table.take()),
        });
        self.phase = Phase::Lists;
        Ready::AssembleLists {
            cache: view.lists.take(),
            groups,
            units,
        }
    }

    pub(super) fn lists_made(&mut self, cache: ListCache, now: Now) -> Ready {
        let inputs = Arc::clone(&cache.inputs);
        let view = self.view.as_mut().expect("the view is known");
        view.lists = Some(cache);
        let members: Vec<String> = inputs.members().map(str::to_string).collect();
        self.was_live = members
            .iter()
            .filter(|m| view.liveness.is_live(m))
            .cloned()
            .collect();
        self.inputs = Some(inputs);
        // A new holding with a liveness to inherit decides on it, without
        // waiting for a round of its own (thousands of first contacts take
        // longer than the lease's holder may leave the table alone); its
        // next cycle, at once, pings. Nothing inherited grants a unit: a
        // release needs a report read now or a refusal this holder saw.
        if self.inherited && (!self.was_live.is_empty() || !view.suspects.is_empty()) {
            self.unverified = true;
            return self.round_taken(Vec::new(), now);
        }
        self.phase = Phase::Pings;
        Ready::Ping { members }
    }

    /// Takes a round of pings into the view (none: the inherited liveness
    /// stands), then settles where the plan starts.
    pub(super) fn round_taken(&mut self, reports: Vec<PingReport>, now: Now) -> Ready {
        let inputs = Arc::clone(self.inputs());
        let listed = listed_entries(&inputs);
        let view = self.view.as_mut().expect("the view is known");
        view.handoff.recovery_pinged(&reports);
        let judge = judge(&self.config, now);
        self.observed = view.take_round(&inputs, &listed, reports, &self.was_live, true, judge);
        self.count_deaths(now);
        let view = self.view.as_mut().expect("the view is known");
        view.note_joins(&inputs, now.at, self.config.join_delay);
        view.handoff.forget_departed(&inputs);
        view.handoff.inputs = Some(inputs);
        self.settle(now)
    }

    pub(super) fn state_read(
        &mut self,
        state: Result<(Option<String>, u64, Option<MatchingTable>), StoreError>,
        reports: ReportsRead,
        now: Now,
    ) -> Ready {
        let (digest, generation, table) = match state {
            Ok(s) => s,
            Err(e) => return self.done(Err(CycleError::Read(e))),
        };
        let mut reports = reports;
        let view = self.view.as_mut().expect("the view is known");
        let quarantine = reports.content.as_mut().and_then(|c| c.quarantine.take());
        view.observe_quarantine(
            self.config.quarantine,
            quarantine,
            &self.config.keys.quarantine,
        );
        if let Err(e) = view.handoff.observe(reports, &self.config.keys) {
            return self.done(Err(CycleError::Read(e)));
        }
        self.reports_lost(now);
        let view = self.view.as_mut().expect("the view is known");
        self.stored = Some(Stored {
            digest,
            generation,
            table: table.map(Arc::new).or(self.held_table.take()),
        });
        let inputs = view.handoff.inputs.clone().expect("checked at the start");
        let listed = listed_entries(&inputs);
        // Every refusal counts for the handoff (a member that deregistered
        // and exited still owes its units); liveness and the mass-failure
        // guard count listed members only.
        let refused = std::mem::take(&mut self.refused);
        view.handoff.observe_refusals(&refused);
        let refused: Vec<PingReport> = refused
            .into_iter()
            .map(|r| r.report)
            .filter(|r| listed.contains(&r.member))
            .collect();
        if !refused.is_empty() {
            let was_live: HashSet<String> = inputs
                .members()
                .filter(|m| view.liveness.is_live(m))
                .map(str::to_string)
                .collect();
            // The pings were sent when the connections closed (the
            // executor's probes); this span shows their verdicts in the
            // cycle.
            let probes = info_span!(
                "refused",
                members = refused.len(),
                otel.status_code = tracing::field::Empty,
                otel.status_message = tracing::field::Empty
            );
            crate::coordinator::holder::mark_error(
                &probes,
                &format!(
                    "{} members refused after their connection ended",
                    refused.len()
                ),
            );
            let judge = judge(&self.config, now);
            self.observed = probes
                .in_scope(|| view.take_round(&inputs, &listed, refused, &was_live, false, judge));
            self.count_deaths(now);
        }
        self.inputs = Some(inputs);
        self.settle(now)
    }
}

/// A full cycle's read, given the lists it holds and the versions of the
/// reports and costs it knows (costs only when the solve needs them).
fn inputs_request(
    config: &CoreConfig,
    lists: Option<&ListCache>,
    reports_since: Option<u64>,
    costs_since: Option<u64>,
) -> InputsRequest {
    InputsRequest {
        held: lists.map(|c| c.held(&config.units_key)).unwrap_or_default(),
        reports_since,
        costs_since: config.reads_costs.then_some(costs_since),
    }
}
