//! The member's metrics, through the `metrics` facade: the application
//! installs a recorder (a Prometheus exporter, or any other) and sees them
//! there; without one they cost an atomic add each. Every metric carries
//! the label `member` (its id), so one process may run several members.
//!
//! The handles are registered when the member starts, with the global
//! recorder (install it first) or the one given to
//! [`super::MemberBuilder::metrics_recorder`].

use std::time::Duration;

use metrics::{Counter, Gauge, Histogram, Recorder};

/// Every metric's name and help, for the application's documentation and
/// for `describe_*` (see [`describe`]).
pub const MEMBER_METRICS: &[(&str, &str)] = &[
    (
        "distributor_member_acquired_total",
        "Units handed to the application",
    ),
    (
        "distributor_member_revoked_total",
        "Units taken back, by reason (moved, draining, fenced, shutdown)",
    ),
    (
        "distributor_member_revocation_seconds",
        "How long the application took to stop a unit",
    ),
    (
        "distributor_member_revocations_late_total",
        "Stops that finished after the unit's hold had ended (the next owner may have started)",
    ),
    (
        "distributor_member_revocations_failed_total",
        "Stops whose handler panicked: each unit counted as stopped only once its hold ended",
    ),
    ("distributor_member_units", "Units this member owns now"),
    (
        "distributor_member_fenced",
        "1 while out of contact (no read or no ping within the deadline): holding nothing",
    ),
    (
        "distributor_member_ready",
        "1 once registered, reported and in contact",
    ),
    (
        "distributor_member_weight",
        "The capacity weight this member reports",
    ),
    (
        "distributor_member_read_failures_total",
        "Failed reads of the member's row",
    ),
    (
        "distributor_member_reports_total",
        "Reports written to {T}:members",
    ),
    (
        "distributor_member_report_failures_total",
        "Reports that could not be written (retried)",
    ),
];

/// Describes every metric to `recorder` (or the global one).
pub fn describe(recorder: Option<&dyn Recorder>) {
    let run = || {
        for (name, help) in MEMBER_METRICS {
            if name.ends_with("_seconds") {
                metrics::describe_histogram!(*name, metrics::Unit::Seconds, *help);
            } else if name.ends_with("_total") {
                metrics::describe_counter!(*name, *help);
            } else {
                metrics::describe_gauge!(*name, *help);
            }
        }
    };
    match recorder {
        Some(r) => metrics::with_local_recorder(r, run),
        None => run(),
    }
}

/// One member's metric handles.
#[derive(Clone)]
pub(super) struct Meters {
    pub acquired: Counter,
    revoked: [(&'static str, Counter); 4],
    pub revocation_seconds: Histogram,
    pub revocations_late: Counter,
    pub revocations_failed: Counter,
    pub units: Gauge,
    pub fenced: Gauge,
    pub ready: Gauge,
    pub weight: Gauge,
    pub read_failures: Counter,
    pub reports: Counter,
    pub report_failures: Counter,
}

impl Meters {
    pub(super) fn new(member: &str, recorder: Option<&dyn Recorder>) -> Meters {
        let member = member.to_string();
        let register = || {
            let m = || ("member", member.clone());
            let revoked = |reason: &'static str| {
                (
                    reason,
                    metrics::counter!(
                        "distributor_member_revoked_total",
                        &[m(), ("reason", reason.to_string())]
                    ),
                )
            };
            Meters {
                acquired: metrics::counter!("distributor_member_acquired_total", &[m()]),
                revoked: [
                    revoked("moved"),
                    revoked("draining"),
                    revoked("fenced"),
                    revoked("shutdown"),
                ],
                revocation_seconds: metrics::histogram!(
                    "distributor_member_revocation_seconds",
                    &[m()]
                ),
                revocations_late: metrics::counter!(
                    "distributor_member_revocations_late_total",
                    &[m()]
                ),
                revocations_failed: metrics::counter!(
                    "distributor_member_revocations_failed_total",
                    &[m()]
                ),
                units: metrics::gauge!("distributor_member_units", &[m()]),
                fenced: metrics::gauge!("distributor_member_fenced", &[m()]),
                ready: metrics::gauge!("distributor_member_ready", &[m()]),
                weight: metrics::gauge!("distributor_member_weight", &[m()]),
                read_failures: metrics::counter!("distributor_member_read_failures_total", &[m()]),
                reports: metrics::counter!("distributor_member_reports_total", &[m()]),
                report_failures: metrics::counter!(
                    "distributor_member_report_failures_total",
                    &[m()]
                ),
            }
        };
        match recorder {
            Some(r) => metrics::with_local_recorder(r, register),
            None => register(),
        }
    }

    /// A unit revoked for `reason` ([`crate::core::ownership::Revocation::reason`]),
    /// whose stop took `took`.
    pub(super) fn revoked(&self, reason: &str, took: Duration) {
        if let Some((_, c)) = self.revoked.iter().find(|(r, _)| *r == reason) {
            c.increment(1);
        }
        self.revocation_seconds.record(took.as_secs_f64());
    }
}
