//! The write half of a holder cycle: solve the desired table, plan the next
//! granted table from what Redis holds with the handoff (break before make),
//! and write it, fenced, when anything changed. After any outcome but a
//! confirmed write, the ledger is stale and the next cycle reads Redis
//! before it plans.

use std::collections::BTreeSet;
use std::sync::Arc;

use opentelemetry::trace::TraceContextExt as _;
use tracing::field::Empty;
use tracing::{Instrument as _, Span, info_span};
use tracing_opentelemetry::OpenTelemetrySpanExt as _;

use super::core::{Changes, Planned, Sent};
use super::solve::desired;
use super::{CycleContext, HolderView, Write, mark_error};
use crate::core::handoff;
use crate::core::inputs::Inputs;
use crate::core::table::MatchingTable;
use crate::edge::clock;
use crate::edge::pings::MemberPings;
use crate::edge::redis::Commit;
use crate::edge::store::HoldingStore;

impl<S: HoldingStore, P: MemberPings> CycleContext<S, P> {
    /// Solves the table the members should have (desired), plans the next
    /// granted table from it with the handoff (break before make), and writes
    /// it (fenced) if it, the units in transit or the liveness history
    /// changed. The plan starts from what the ledger knows Redis holds;
    /// after any outcome but a confirmed write, the ledger is stale and the
    /// next cycle reads Redis first (`fresh_view`).
    pub(super) async fn settle(
        &self,
        inputs: &Arc<Inputs>,
        view: &mut HolderView,
        stored_digest: &mut Option<String>,
        generation_floor: &mut u64,
        stored_generation: u64,
        stored_table: Option<Arc<MatchingTable>>,
    ) -> Write {
        let lost_numbering = view.renumber_lost(stored_generation, generation_floor);
        if let Some(lost) = lost_numbering
            && (lost.raised || lost.renumbered > 0)
        {
            tracing::warn!(
                applied = lost.applied,
                stored = stored_generation,
                renumbered = lost.renumbered,
                "a member reports a generation above the table Redis holds (Redis lost a write, its data, or a lagging replica was promoted): numbering writes above it"
            );
        }
        let (granted, verify) = match view.known_granted(stored_digest.as_deref()) {
            Some(g) => (g, false),
            None => {
                let stored = match stored_table {
                    Some(t) => t,
                    None => match self.store.read_table().await {
                        Ok(t) => Arc::new(t),
                        Err(e) => return Write::Failed(e),
                    },
                };
                let (from, start) = view.start_from_stored(stored, stored_generation);
                if from == handoff::StartingPoint::LastWritten {
                    tracing::warn!(
                        key = %self.store.keys().table,
                        "the matching table is gone; handing off from the table this holder wrote last"
                    );
                }
                (start, true)
            }
        };

        let (desired, solved) = desired(self.solve, inputs, view, &granted).await;
        self.metrics
            .solve(if solved { "solved" } else { "memoised" });

        let now_ms = self.wall.unix_ms();
        let Planned { plan, unchanged } = info_span!("handoff", verify).in_scope(|| {
            view.plan(
                inputs,
                &granted,
                verify,
                &desired,
                self.handoff,
                clock::now(),
                now_ms,
            )
        });
        if plan.claimed > 0 {
            self.metrics.claimed_units.inc_by(plan.claimed as u64);
            tracing::warn!(
                key = %self.store.keys().table,
                claimed = plan.claimed,
                "the stored table took units from members that may still work on them, without a revocation (redis lost a write, a lagging replica was promoted, or an edit): they wait for those members first"
            );
        }
        // Nothing to hand off (an idle cycle): the granted table stays, and
        // with it its digest, computed once; a new table's digest (O(table))
        // is computed on a blocking thread.
        let next = if unchanged {
            Arc::clone(&granted)
        } else {
            let table = plan.granted;
            super::blocking(move || {
                let table = Arc::new(table);
                table.digest();
                table
            })
            .await
        };
        let Some(Changes {
            table: table_changed,
            transit: transit_changed,
        }) = view.changes(
            &next,
            &plan.transit,
            lost_numbering.is_some(),
            verify,
            stored_digest.as_deref(),
            stored_generation,
        )
        else {
            return Write::Unchanged;
        };
        if !self.may_act() {
            return Write::NotActing;
        }
        let (encoded, last_change) = view.encoded(&plan.transit);
        let commit = Commit {
            table: table_changed.then_some(&*next),
            health: &view.unsaved,
            suspects: &view.unsaved_suspects,
            transit: transit_changed.then_some(encoded.as_slice()),
            generation_floor: *generation_floor,
            holder_id: &self.replica_id,
            now_ms,
            assignment: self.solve.assignment.name(),
            last_change: last_change.as_deref(),
            expected_version: view.handoff.ledger.version(),
        };
        let span = info_span!(
            "write_table",
            epoch = self.grant.epoch,
            table = table_changed,
            rows = next.len(),
            health_changes = view.unsaved.set.len() + view.unsaved.removed.len(),
            revoked = view.handoff.last.revoked,
            moved = view.handoff.last.moved.len(),
            in_transit = view.handoff.last.in_transit,
            generation = Empty,
            otel.status_code = Empty,
            otel.status_message = Empty,
        );
        // A grant links to the writes that revoked what it grants.
        let linked: BTreeSet<u64> = view
            .handoff
            .last
            .moved
            .iter()
            .map(|m| m.revoked_at)
            .collect();
        for g in linked {
            if let Some(cx) = view.handoff.revocations.get(&g) {
                span.add_link(cx.clone());
            }
        }
        let committed = self
            .store
            .commit(&self.grant, &commit)
            .instrument(span.clone())
            .await;
        let sent = Sent {
            next,
            transit: plan.transit,
            table_changed,
            stored_generation,
        };
        let advanced = view.advance(
            sent,
            committed,
            generation_floor,
            stored_digest,
            clock::now(),
        );
        if let Write::Written {
            generation: Some(g),
        } = advanced.write
        {
            span.record("generation", g);
            Span::current().record("generation", g);
        }
        if let Some(g) = advanced.revoked_at {
            let cx = span.context().span().span_context().clone();
            view.handoff.revocations.insert(g, cx);
        }
        if let Some(e) = &advanced.error {
            mark_error(&span, e);
        }
        advanced.write
    }
}
