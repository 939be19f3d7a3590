//! The books of a finished cycle: what it did, taken into the status, the
//! metrics and the logs (each a summary, never a flood), and summarised for
//! the machine.

use std::collections::HashSet;

use tracing::Span;

use crate::coordinator::holder::{
    CycleError, CycleReport, HolderView, LOG_FIRST, Write, count_by, first_few, log_review,
    summarize,
};
use crate::coordinator::machine::{CycleOutcome, CycleSummary};
use crate::core::inputs::Rejection;
use crate::core::status::{BalanceStatus, ControlsStatus, HandoffStatus, QuarantineStatus};
use crate::core::timing::Timing;
use crate::edge::grpc::PingFailure;
use crate::error::StoreError;
use crate::unix_ms;

use super::Executor;
use super::tasks::bump;

impl Executor {
    /// Takes a finished cycle's results into the books (status, metrics,
    /// logs) and the holding's view, and summarises it for the machine.
    /// `None` when the cycle belongs to no current holding.
    pub(super) fn finish_cycle(
        &mut self,
        report: Result<CycleReport, CycleError>,
    ) -> Option<CycleSummary> {
        let h = self.holding.as_mut()?;
        let took = h.cycle_started.elapsed();
        let epoch = h.epoch;
        let summary = summarize(&report, epoch, &self.config.replica_id);
        // Closed (and exported) when this function returns.
        let span = std::mem::replace(&mut h.cycle_span, Span::none());
        let handoff_only = h.handoff_only;
        if matches!(report, Err(CycleError::NotReady)) {
            return summary;
        }
        // A cycle whose reads worked but whose write failed did not reach
        // Redis as it should: it refreshes nothing and counts as a failure.
        match &report {
            Ok(r) => match &r.write {
                Write::Failed(e) | Write::Unknown(e) => self.metrics.redis_error(e.kind()),
                _ => self.redis_result(&Ok::<(), StoreError>(())),
            },
            Err(CycleError::Read(e) | CycleError::Unreadable(e)) => {
                self.metrics.redis_error(e.kind())
            }
            Err(CycleError::Inputs { .. } | CycleError::NotReady) => {
                self.redis_result(&Ok::<(), StoreError>(()))
            }
        }
        let mut report = match report {
            Ok(r) => {
                if std::mem::take(&mut self.read_failing) {
                    tracing::info!("cycles recovered");
                }
                self.last_cycle_error = None;
                if self.status.borrow().holding_blocked.is_some() {
                    tracing::info!("read what the holder must know: acting again");
                    self.update(|s| s.holding_blocked = None);
                }
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
                    CycleError::Read(_) | CycleError::Unreadable(_) => "read_error",
                    CycleError::Inputs { .. } | CycleError::NotReady => "input_error",
                };
                self.metrics.cycle(outcome, took);
                let blocked = matches!(e, CycleError::Unreadable(_)).then(|| e.to_string());
                self.update(|s| {
                    s.failed_cycles += 1;
                    s.last_error = Some(e.to_string());
                    if blocked.is_some() {
                        s.holding_blocked = blocked;
                    }
                });
                return summary;
            }
        };
        if report.epoch != epoch {
            return summary;
        }
        span.in_scope(|| self.log_inputs(&report));
        span.in_scope(|| log_review(&report.review, &report.view));
        // While this replica holds suspicions of its own, another replica
        // should look (checked every cycle: the census may only count the
        // others after the episode began).
        let h = self.holding.as_mut().expect("checked above");
        h.in_flight = report.in_flight;
        h.in_flight_members = report.in_flight_members;
        // What is written: the granted table (the desired one minus units
        // in transit), known after a confirmed write.
        let table = report.view.handoff.ledger.granted().cloned();
        let suspects = report.view.suspects.len();
        let handoff = report.view.handoff.last.clone();
        let balance = balance_status(&report.view);
        // Newcomers within -join-delay that hold no unit yet: those wait.
        let waiting = report
            .view
            .waiting
            .iter()
            .filter(|m| table.as_ref().is_none_or(|t| t.units_of(m).is_empty()))
            .count();
        let controls = ControlsStatus::of(
            &report.view.handoff.controls,
            report.view.handoff.bad_controls.len(),
        );
        let events = report.view.quarantine.take_events();
        let quarantine = QuarantineStatus {
            quarantined: report.view.quarantine.quarantined().len(),
            held: report.view.quarantine.held().len(),
            trials: report.view.quarantine.trials().count(),
            quarantined_here: self.status.borrow().quarantine.quarantined_here
                + events.quarantined.len() as u64,
            unreadable: report.view.bad_quarantine,
        };
        for unit in &events.released {
            tracing::info!(unit = %unit, "quarantined unit released: placed again, its count restarted");
        }
        let recovering = report
            .view
            .handoff
            .recovery
            .as_ref()
            .map(|r| format!("{} ({})", r.tag, r.why));
        // Listed members failing for long (wall clock: `failing_since_ms`
        // is shared between replicas).
        let long_ms = Timing::DEFAULT.failing_long.as_millis() as u64;
        let now_ms = unix_ms();
        let failing_long = report
            .inputs
            .members()
            .filter(|m| {
                report
                    .view
                    .liveness
                    .health(m)
                    .and_then(|h| h.failing_since_ms)
                    .is_some_and(|since| now_ms.saturating_sub(since) >= long_ms)
            })
            .count();
        let costs_key = self.store.keys().costs.clone();
        span.in_scope(|| log_costs(&report.view, &costs_key));
        h.view = Some(report.view);
        if recovering.is_some() && self.status.borrow().recovering != recovering {
            self.metrics.recoveries.inc();
        }
        self.update(|s| s.recovering = recovering);
        for (member, list) in &report.forgotten {
            span.in_scope(|| {
                tracing::info!(member, list, "forgot a long-failing member (-forget-after)")
            });
        }
        // The books of the write; what it makes of the cycle is `summary`'s.
        let written = match report.write {
            Write::Unchanged
            | Write::NotActing
            | Write::Recovering
            | Write::Written { generation: None } => Ok(()),
            Write::Written {
                generation: Some(g),
            } => {
                self.metrics.table_writes.inc();
                let table = table.unwrap_or_default();
                self.metrics.table_bytes.set(table.bytes() as u64);
                span.in_scope(|| {
                    tracing::info!(
                        epoch,
                        generation = g,
                        members = table.len(),
                        assignments = table.assignments(),
                        units = report.inputs.units.len(),
                        revoked = handoff.revoked,
                        moved = handoff.moved.len(),
                        placed = handoff.placed,
                        in_transit = handoff.in_transit,
                        "matching table written"
                    )
                });
                // Handoffs completed by this write: revocation to grant.
                let now_ms = unix_ms();
                for m in &handoff.moved {
                    let secs = now_ms.saturating_sub(m.since_ms) as f64 / 1000.0;
                    self.metrics.handoff_duration.observe(secs);
                }
                self.update(|s| {
                    bump(&mut s.generation, g);
                    s.last_write_ms = Some(unix_ms());
                    s.table_writes += 1;
                });
                Ok(())
            }
            Write::Fenced(reason) => {
                self.metrics.fenced_writes.inc();
                self.update(|s| s.fenced_writes += 1);
                span.in_scope(|| {
                    tracing::warn!(
                        epoch,
                        reason,
                        "table write rejected by redis: this replica is no longer the holder"
                    )
                });
                Ok(())
            }
            Write::Failed(e) | Write::Unknown(e) => {
                if !self.write_failing || !e.is_retryable() {
                    span.in_scope(|| tracing::warn!(error = %e, kind = e.kind(), "table write failed; the next cycle reads redis' state again before it plans"));
                }
                Err(("write_error", e.to_string()))
            }
            Write::Outdated { version, differs } => {
                span.in_scope(|| tracing::warn!(version, differs = differs.as_deref(), "table write refused by redis: its state changed since this plan read it (a late write, or an edit); the next cycle reads it again before it plans"));
                let what = differs
                    .as_deref()
                    .map_or(String::new(), |d| format!(": {d} differs"));
                Err((
                    "write_outdated",
                    format!(
                        "table write refused: redis' state changed since it was read (version {version}{what})"
                    ),
                ))
            }
        };
        if let Err((label, error)) = written {
            self.write_failing = true;
            self.metrics.cycle(label, took);
            self.update(|s| {
                s.cycles += 1;
                s.failed_cycles += 1;
                s.last_error = Some(error);
            });
            return summary;
        }
        if summary
            .as_ref()
            .is_some_and(|s| s.outcome != CycleOutcome::Fenced)
        {
            if std::mem::take(&mut self.write_failing) {
                tracing::info!("table writes recovered");
            }
            self.metrics
                .cycle(if handoff_only { "handoff" } else { "ok" }, took);
            let by_kind = Rejection::KINDS
                .into_iter()
                .map(|k| {
                    let n = report
                        .inputs
                        .rejections
                        .iter()
                        .filter(|r| r.kind() == k)
                        .count();
                    (k, n)
                })
                .collect();
            self.update(|s| {
                s.cycles += 1;
                s.last_error = None;
                s.balance = balance;
                s.units = report.inputs.units.len();
                s.invalid_inputs = report.inputs.rejections.len();
                s.invalid_by_kind = by_kind;
                s.groups = report.groups;
                s.suspects = suspects;
                s.failing_long = failing_long;
                s.controls = controls;
                s.quarantine = quarantine;
                s.handoff = HandoffStatus {
                    in_transit: handoff.in_transit,
                    oldest_transit_ms: handoff.oldest_transit_ms,
                    owing: handoff.owing,
                    draining: handoff.draining,
                    waiting,
                    acknowledging: handoff.acknowledging,
                    invalid_reports: handoff.invalid_reports,
                };
            });
        }
        summary
    }

    /// Logs the rejections of `report`'s inputs not logged before.
    fn log_rejections(&mut self, report: &CycleReport) {
        let fingerprint = |r: &Rejection| xxhash_rust::xxh3::xxh3_64(r.to_string().as_bytes());
        let current: HashSet<u64> = report.inputs.rejections.iter().map(fingerprint).collect();
        let new: Vec<&Rejection> = report
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
    }

    /// Logs what changed in the inputs and in liveness, summarised: a burst
    /// (100,000 bad units, 10,000 members failing at once) gives the first
    /// few lines and one count, and a state that persists is not repeated.
    fn log_inputs(&mut self, report: &CycleReport) {
        let same = self
            .logged_inputs
            .as_ref()
            .is_some_and(|i| std::sync::Arc::ptr_eq(i, &report.inputs));
        if !same {
            self.log_rejections(report);
            self.logged_inputs = Some(std::sync::Arc::clone(&report.inputs));
        }

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

/// The cost balance a cycle saw: `None` unless the holder reads costs.
fn balance_status(view: &HolderView) -> Option<BalanceStatus> {
    let costs = &view.costs;
    let loads = view.memo.as_ref().and_then(|m| m.loads.clone());
    if costs.decoded.is_none() && loads.is_none() {
        return None;
    }
    Some(BalanceStatus {
        loads,
        invalid_costs: costs.decoded.as_ref().map_or(0, |d| d.unreadable.len()),
        stale_loads: costs.decoded.as_ref().map_or(0, |d| d.stale.len()),
        costs_problem: costs.problem.clone(),
    })
}

/// Logs what a read of `{T}:costs` found wrong, once per read (or per new
/// problem), summarised: the first few entries and a count.
fn log_costs(view: &HolderView, key: &str) {
    let costs = &view.costs;
    if !costs.news {
        return;
    }
    if let Some(problem) = &costs.problem {
        tracing::warn!(
            key,
            error = %problem,
            "unit costs or loads unreadable; the holder balances with those it knew (none if it knew none)"
        );
    }
    let Some(decoded) = costs.decoded.as_ref() else {
        return;
    };
    if !decoded.stale.is_empty() {
        let first = first_few(
            decoded
                .stale
                .iter()
                .map(|s| format!("{}({}ms)", s.member, s.age_ms)),
            " ",
        );
        let age = crate::core::timing::Timing::DEFAULT.load_age();
        tracing::warn!(
            key,
            count = decoded.stale.len(),
            first = %first,
            "measured loads left out for their date (age in ms; negative: ahead of this holder's clock): older than {:?} (a member that stopped writing) or more than {:?} ahead (a clock running ahead); their units count as the mean",
            age.max_age,
            age.max_ahead
        );
    }
    if decoded.unreadable.is_empty() {
        return;
    }
    let first = first_few(
        decoded
            .unreadable
            .iter()
            .map(|u| format!("{}={}", u.unit, u.value)),
        " ",
    );
    tracing::warn!(
        key,
        count = decoded.unreadable.len(),
        first = %first,
        "unreadable entries skipped: a cost is a number above 0 and at most 1e9 (those units count as the mean of the others); a load report is `<unix_ms> <unit>=<load>,...`"
    );
}
