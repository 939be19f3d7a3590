//! Prometheus metrics of one replica.
//!
//! All instruments live in one [`Metrics`] value that the coordinator updates
//! as things happen; [`Metrics::encode`] renders the text exposition format for
//! `/metrics`. Names follow Prometheus conventions: `distributor_` prefix,
//! `_total` for counters, `_seconds` for durations, labels for the dimension.
//! No label ever carries a secret or an unbounded value (member addresses are
//! not labels: a fleet of 10,000 members must not create 10,000 series).

use std::sync::atomic::AtomicU64;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use crate::core::status::{ControlsStatus, Role, Status};
use crate::edge::grpc::PingFailure;
use crate::error::StoreError;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct GroupState {
    pub group: String,
    /// `live` or `failed`.
    pub state: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct Kind {
    pub kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct Reason {
    pub reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct Transition {
    pub transition: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct Outcome {
    pub outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct Build {
    pub version: &'static str,
}

/// Every metric of a replica.
pub struct Metrics {
    registry: Registry,
    pub holder: Gauge,
    pub fast_takeover: Gauge,
    pub epoch: Gauge,
    pub generation: Gauge,
    pub census_replicas: Gauge,
    pub census_index: Gauge,
    pub members: Family<GroupState, Gauge>,
    pub work_units: Gauge,
    pub suspects: Gauge,
    pub units_quarantined: Gauge,
    pub units_held: Gauge,
    pub quarantine_unreadable: Gauge,
    pub quarantines: Counter,
    pub failing_long: Gauge,
    pub invalid_inputs: Family<Kind, Gauge>,
    pub controls: Family<Kind, Gauge>,
    pub table_writes: Counter,
    pub fenced_writes: Counter,
    pub ping_duration: Histogram,
    pub ping_failures: Family<Reason, Counter>,
    pub ping_beats: Counter,
    pub connection_closes: Family<Outcome, Counter>,
    pub cycle_duration: Histogram,
    pub cycles: Family<Outcome, Counter>,
    pub lease_transitions: Family<Transition, Counter>,
    pub redis_errors: Family<Kind, Counter>,
    pub list_reads: Family<Outcome, Counter>,
    pub solves: Family<Outcome, Counter>,
    pub table_bytes: Gauge<u64, AtomicU64>,
    pub table_writes_sent: Family<Kind, Counter>,
    pub table_write_bytes: Family<Kind, Counter>,
    pub warm_generation: Gauge<u64, AtomicU64>,
    pub handoff_duration: Histogram,
    pub units_in_transit: Gauge,
    pub transit_oldest: Gauge<f64, AtomicU64>,
    pub members_owing: Gauge,
    pub members_draining: Gauge,
    pub members_waiting: Gauge,
    pub holding_blocked: Gauge,
    pub resyncs: Counter,
    pub claimed_units: Counter,
    pub recovering: Gauge,
    pub recoveries: Counter,
    pub load_imbalance: Gauge<f64, AtomicU64>,
    pub load_least: Gauge<f64, AtomicU64>,
    pub members_out_of_band: Gauge,
    pub hot_units: Gauge,
    pub invalid_costs: Gauge,
    pub stale_loads: Gauge,
    /// Groups that have `members` series now.
    member_groups: std::sync::Mutex<std::collections::BTreeSet<String>>,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl Metrics {
    pub fn new() -> Metrics {
        let mut r = Registry::with_prefix("distributor");
        let holder = Gauge::default();
        r.register(
            "holder",
            "1 while this replica holds the lease and acts",
            holder.clone(),
        );
        let fast_takeover = Gauge::default();
        r.register(
            "fast_takeover",
            "1 while a crashed holder would be replaced as soon as its redis connection closes, \
             0 while only when its lease expires (CLIENT not permitted, ...), -1 while unknown",
            fast_takeover.clone(),
        );
        let epoch = Gauge::default();
        r.register(
            "epoch",
            "Fencing epoch held, or last seen while standby",
            epoch.clone(),
        );
        let generation = Gauge::default();
        r.register(
            "generation",
            "Highest matching table generation seen",
            generation.clone(),
        );
        let census_replicas = Gauge::default();
        r.register(
            "census_replicas",
            "Replicas counted by the census",
            census_replicas.clone(),
        );
        let census_index = Gauge::default();
        r.register(
            "census_index",
            "This replica's census index",
            census_index.clone(),
        );
        let members = Family::<GroupState, Gauge>::default();
        r.register(
            "members",
            "Listed members per group by state (holder only)",
            members.clone(),
        );
        let work_units = Gauge::default();
        r.register(
            "work_units",
            "Distinct valid work units (holder only)",
            work_units.clone(),
        );
        let units_quarantined = Gauge::default();
        r.register(
            "units_quarantined",
            "Work units given to nobody because members holding them kept dying, until released ({T}:quarantine; holder only)",
            units_quarantined.clone(),
        );
        let units_held = Gauge::default();
        r.register(
            "units_held",
            "Work units one death short of quarantine, given to nobody until each is tried alone on a member (holder only)",
            units_held.clone(),
        );
        let quarantine_unreadable = Gauge::default();
        r.register(
            "quarantine_unreadable",
            "Fields of {T}:quarantine that name no work unit, skipped (holder only)",
            quarantine_unreadable.clone(),
        );
        let quarantines = Counter::default();
        r.register(
            "quarantines",
            "Work units this replica quarantined",
            quarantines.clone(),
        );
        let suspects = Gauge::default();
        r.register(
            "suspected_members",
            "Failing members kept in the table as suspects of an unconfirmed mass failure (holder only)",
            suspects.clone(),
        );
        let failing_long = Gauge::default();
        r.register(
            "members_failing_long",
            "Listed members whose pings have failed for 10 minutes or more: with -forget-after off they stay listed and pinged until removed (holder only)",
            failing_long.clone(),
        );
        let invalid_inputs = Family::<Kind, Gauge>::default();
        r.register(
            "invalid_inputs",
            "Invalid list entries in the last cycle, by kind",
            invalid_inputs.clone(),
        );
        let controls = Family::<Kind, Gauge>::default();
        r.register(
            "controls",
            "Operator controls in force ({T}:controls) by kind: paused (0 or 1), cordoned and drained members, pinned units, unreadable entries (holder only)",
            controls.clone(),
        );
        for kind in ControlsStatus::KINDS {
            controls.get_or_create(&Kind { kind }).set(0);
        }
        let table_writes = Counter::default();
        r.register(
            "table_writes",
            "Matching table writes",
            table_writes.clone(),
        );
        let fenced_writes = Counter::default();
        r.register(
            "fenced_writes",
            "Writes rejected by Redis because the lease moved on",
            fenced_writes.clone(),
        );
        let ping_duration = Histogram::new([
            0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
        ]);
        r.register_with_unit(
            "ping_duration",
            "Round-trip time of successful pings",
            prometheus_client::registry::Unit::Seconds,
            ping_duration.clone(),
        );
        let ping_failures = Family::<Reason, Counter>::default();
        r.register(
            "ping_failures",
            "Failed pings by reason",
            ping_failures.clone(),
        );
        let ping_beats = Counter::default();
        r.register(
            "ping_beats",
            "Pings sent as beats on members' streams (the others are calls)",
            ping_beats.clone(),
        );
        let connection_closes = Family::<Outcome, Counter>::default();
        r.register(
            "member_connection_closes",
            "Members' connections that ended, by what the ping sent at once found: answered, or the failure's reason (anything else runs a cycle at once)",
            connection_closes.clone(),
        );
        let cycle_duration = Histogram::new([
            0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
        ]);
        r.register_with_unit(
            "cycle_duration",
            "Holder cycle duration: read, ping, solve",
            prometheus_client::registry::Unit::Seconds,
            cycle_duration.clone(),
        );
        let cycles = Family::<Outcome, Counter>::default();
        r.register("cycles", "Holder cycles by outcome", cycles.clone());
        let lease_transitions = Family::<Transition, Counter>::default();
        r.register(
            "lease_transitions",
            "Lease transitions of this replica",
            lease_transitions.clone(),
        );
        let redis_errors = Family::<Kind, Counter>::default();
        r.register("redis_errors", "Redis errors by kind", redis_errors.clone());
        let list_reads = Family::<Outcome, Counter>::default();
        r.register(
            "list_reads",
            "Lists a holder cycle needed: read from Redis in full, or known unchanged (cached)",
            list_reads.clone(),
        );
        let solves = Family::<Outcome, Counter>::default();
        r.register(
            "solves",
            "Table solves: by a holder cycle (solved), skipped because nothing it depends on changed (memoised), or by a standby ahead of a holding (ahead)",
            solves.clone(),
        );
        let warm_generation = Gauge::<u64, AtomicU64>::default();
        r.register(
            "warm_view_generation",
            "A standby's warm view: the table generation whose liveness it holds and solved for (0: none, or this replica holds)",
            warm_generation.clone(),
        );
        let table_bytes = Gauge::<u64, AtomicU64>::default();
        r.register_with_unit(
            "table_size",
            "Bytes of member ids and rows in the last table written",
            prometheus_client::registry::Unit::Bytes,
            table_bytes.clone(),
        );
        let table_writes_sent = Family::<Kind, Counter>::default();
        r.register(
            "table_writes_sent",
            "Table writes sent, confirmed or not: the rows that changed (rows) or the whole table (whole: a first table, a healed edit, a new holding's first write)",
            table_writes_sent.clone(),
        );
        let table_write_bytes = Family::<Kind, Counter>::default();
        r.register_with_unit(
            "table_write",
            "Bytes of member ids and rows sent in table writes, by kind (rows or whole)",
            prometheus_client::registry::Unit::Bytes,
            table_write_bytes.clone(),
        );
        let handoff_duration = Histogram::new([
            0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
        ]);
        r.register_with_unit(
            "handoff_duration",
            "From a unit's revocation to its grant to the next owner (holder only)",
            prometheus_client::registry::Unit::Seconds,
            handoff_duration.clone(),
        );
        let units_in_transit = Gauge::default();
        r.register(
            "units_in_transit",
            "Units revoked from a member and not yet granted to the next (holder only)",
            units_in_transit.clone(),
        );
        let members_owing = Gauge::default();
        r.register(
            "members_owing",
            "Members with revoked units they have not released yet: no acknowledgement, and their wait not over (holder only)",
            members_owing.clone(),
        );
        let members_draining = Gauge::default();
        r.register(
            "members_draining",
            "Live members that drain: they reported draining, or an operator drains them (distributor members drain) (holder only)",
            members_draining.clone(),
        );
        let members_waiting = Gauge::default();
        r.register(
            "members_waiting",
            "Newcomers that wait (-join-delay) before taking units from live members (holder only)",
            members_waiting.clone(),
        );
        let holding_blocked = Gauge::default();
        r.register(
            "holding_blocked",
            "1 while this replica holds the lease but does not act: what it must know before it plans (what the last holder left, or Redis' state after a write of unknown outcome) cannot be read; status and /readyz say which key",
            holding_blocked.clone(),
        );
        let resyncs = Counter::default();
        r.register(
            "resyncs",
            "Reads of Redis' state (table, units in transit, liveness, suspects, reports, version) after a write whose outcome was unknown (an error or timeout after it was sent, or too few replicas) or that Redis refused as outdated, before the next plan",
            resyncs.clone(),
        );
        let claimed_units = Counter::default();
        r.register(
            "claimed_units",
            "Units the stored table took from a member that may still work on them, without a revocation (Redis lost a write, a lagging replica was promoted, a hand edit): revoked from it (and from whoever the table gives them to) before anyone gets them",
            claimed_units.clone(),
        );
        let recovering = Gauge::default();
        r.register(
            "recovering",
            "1 while the holder recovers from handoff state Redis may have lost (a failover, a restart, an edit): it asks every member what it works on and plans only after the gathering time (holder only)",
            recovering.clone(),
        );
        let recoveries = Counter::default();
        r.register(
            "recoveries",
            "Recoveries from handoff state Redis may have lost that this replica began (see distributor_recovering)",
            recoveries.clone(),
        );
        let transit_oldest = Gauge::<f64, AtomicU64>::default();
        r.register(
            "transit_oldest_seconds",
            "Age of the oldest unit in transit (revoked from a member, not yet granted to the next), 0 with none (holder only)",
            transit_oldest.clone(),
        );
        let load_imbalance = Gauge::<f64, AtomicU64>::default();
        r.register(
            "load_imbalance",
            "With -balance cost or load: the busiest member's load divided by its share (1: exactly its share; a member isolating a hot unit counts that unit as its share), in the table the holder solved (holder only)",
            load_imbalance.clone(),
        );
        let load_least = Gauge::<f64, AtomicU64>::default();
        r.register(
            "load_least",
            "With -balance cost or load: the least busy member's load divided by its share (holder only)",
            load_least.clone(),
        );
        let members_out_of_band = Gauge::default();
        r.register(
            "members_out_of_band",
            "With -balance cost or load: members whose load is outside -balance-tolerance of their share (holder only)",
            members_out_of_band.clone(),
        );
        let hot_units = Gauge::default();
        r.register(
            "hot_units",
            "With -balance cost or load: units costlier than any member's share, each alone on a member where possible (holder only)",
            hot_units.clone(),
        );
        let stale_loads = Gauge::default();
        r.register(
            "stale_loads",
            "With -balance load: fields of {T}:loads left out for their date, older than 5 minutes (a member that stopped writing) or over a minute ahead of the holder's clock (holder only)",
            stale_loads.clone(),
        );
        let invalid_costs = Gauge::default();
        r.register(
            "invalid_costs",
            "With -balance cost or load: unreadable entries of {T}:costs (or fields of {T}:loads), skipped (holder only)",
            invalid_costs.clone(),
        );
        // Counters with known labels start at 0: a series that appears only
        // with its first event leaves rate() panels and alerts empty (no
        // data) instead of showing zero.
        for reason in PingFailure::REASONS {
            let _ = ping_failures.get_or_create(&Reason { reason });
        }
        for outcome in std::iter::once("answered").chain(PingFailure::REASONS) {
            let _ = connection_closes.get_or_create(&Outcome { outcome });
        }
        for kind in StoreError::KINDS {
            let _ = redis_errors.get_or_create(&Kind { kind });
        }
        let build = Family::<Build, Gauge>::default();
        build
            .get_or_create(&Build {
                version: env!("CARGO_PKG_VERSION"),
            })
            .set(1);
        r.register("build_info", "Build information", build);
        Metrics {
            registry: r,
            holder,
            fast_takeover,
            epoch,
            generation,
            census_replicas,
            census_index,
            members,
            work_units,
            suspects,
            units_quarantined,
            units_held,
            quarantine_unreadable,
            quarantines,
            failing_long,
            invalid_inputs,
            controls,
            table_writes,
            fenced_writes,
            ping_duration,
            ping_failures,
            ping_beats,
            connection_closes,
            cycle_duration,
            cycles,
            lease_transitions,
            redis_errors,
            list_reads,
            solves,
            table_bytes,
            table_writes_sent,
            table_write_bytes,
            warm_generation,
            handoff_duration,
            units_in_transit,
            transit_oldest,
            members_owing,
            members_draining,
            members_waiting,
            holding_blocked,
            resyncs,
            claimed_units,
            recovering,
            recoveries,
            load_imbalance,
            load_least,
            members_out_of_band,
            hot_units,
            invalid_costs,
            stale_loads,
            member_groups: Default::default(),
        }
    }

    /// The text exposition format (OpenMetrics, which Prometheus scrapes).
    pub fn encode(&self) -> String {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry)
            .expect("writing to a String");
        out
    }

    pub fn lease(&self, transition: &'static str) {
        self.lease_transitions
            .get_or_create(&Transition { transition })
            .inc();
    }

    pub fn redis_error(&self, kind: &'static str) {
        self.redis_errors.get_or_create(&Kind { kind }).inc();
    }

    /// `n` lists a cycle read in full (`read`) or knew unchanged (`cached`).
    pub fn list_reads(&self, outcome: &'static str, n: u64) {
        self.list_reads
            .get_or_create(&Outcome { outcome })
            .inc_by(n);
    }

    /// One table write sent: `rows` or `whole`, with the bytes of its rows.
    pub fn table_write(&self, kind: &'static str, bytes: usize) {
        self.table_writes_sent.get_or_create(&Kind { kind }).inc();
        self.table_write_bytes
            .get_or_create(&Kind { kind })
            .inc_by(bytes as u64);
    }

    /// One table solve: `solved`, `memoised` or `ahead` (see the help text).
    pub fn solve(&self, outcome: &'static str) {
        self.solves.get_or_create(&Outcome { outcome }).inc();
    }

    pub fn ping_ok(&self, rtt: Duration) {
        self.ping_duration.observe(rtt.as_secs_f64());
    }

    pub fn ping_failed(&self, reason: &'static str) {
        self.ping_failures.get_or_create(&Reason { reason }).inc();
    }

    /// `n` more pings went as beats.
    pub fn ping_beats(&self, n: u64) {
        self.ping_beats.inc_by(n);
    }

    /// A member's connection ended; `outcome` is what the ping sent at once
    /// found (`answered`, or a failure's reason).
    pub fn connection_closed(&self, outcome: &'static str) {
        self.connection_closes
            .get_or_create(&Outcome { outcome })
            .inc();
    }

    pub fn cycle(&self, outcome: &'static str, took: Duration) {
        self.cycles.get_or_create(&Outcome { outcome }).inc();
        self.cycle_duration.observe(took.as_secs_f64());
    }

    /// Sets the per-group member gauges. Groups that went away lose their
    /// series; the others are updated in place, never cleared, so a scrape
    /// always sees every current group.
    pub fn set_members(&self, groups: &[(String, usize, usize)]) {
        let mut shown = self.member_groups.lock().expect("metrics lock poisoned");
        for group in shown.iter() {
            if !groups.iter().any(|(g, ..)| g == group) {
                for state in ["live", "failed"] {
                    self.members.remove(&GroupState {
                        group: group.clone(),
                        state,
                    });
                }
            }
        }
        shown.clear();
        for (group, live, failed) in groups {
            for (state, n) in [("live", live), ("failed", failed)] {
                self.members
                    .get_or_create(&GroupState {
                        group: group.clone(),
                        state,
                    })
                    .set(*n as i64);
            }
            shown.insert(group.clone());
        }
    }

    /// Sets every gauge that mirrors the replica's status.
    pub fn sync(&self, s: &Status) {
        self.holder.set(i64::from(s.role == Role::Holder));
        self.fast_takeover.set(match s.takeover {
            crate::core::status::Takeover::Fast => 1,
            crate::core::status::Takeover::Ttl(_) => 0,
            crate::core::status::Takeover::Unknown => -1,
        });
        self.epoch.set(s.epoch as i64);
        self.generation.set(s.generation as i64);
        self.holding_blocked.set(i64::from(
            s.role == Role::Holder && s.holding_blocked.is_some(),
        ));
        self.recovering
            .set(i64::from(s.role == Role::Holder && s.recovering.is_some()));
        if let Some(c) = s.census {
            self.census_replicas.set(c.replicas as i64);
            self.census_index.set(c.index as i64);
        }
        if s.role == Role::Holder {
            self.work_units.set(s.units as i64);
            self.suspects.set(s.suspects as i64);
            self.units_quarantined.set(s.quarantine.quarantined as i64);
            self.units_held.set(s.quarantine.held as i64);
            self.quarantine_unreadable
                .set(s.quarantine.unreadable as i64);
            let counted = self.quarantines.get();
            if s.quarantine.quarantined_here > counted {
                self.quarantines
                    .inc_by(s.quarantine.quarantined_here - counted);
            }
            self.failing_long.set(s.failing_long as i64);
            self.set_members(&s.groups);
            self.units_in_transit.set(s.handoff.in_transit as i64);
            let age_ms = s
                .handoff
                .oldest_transit_ms
                .map_or(0, |since| crate::unix_ms().saturating_sub(since));
            self.transit_oldest.set(age_ms as f64 / 1000.0);
            self.members_owing.set(s.handoff.owing as i64);
            self.members_draining.set(s.handoff.draining as i64);
            self.members_waiting.set(s.handoff.waiting as i64);
            self.sync_balance(s);
            self.sync_controls(s.controls);
            for kind in crate::core::inputs::Rejection::KINDS {
                let n: usize = s
                    .invalid_by_kind
                    .iter()
                    .filter(|(k, _)| *k == kind)
                    .map(|(_, n)| n)
                    .sum();
                self.invalid_inputs
                    .get_or_create(&Kind { kind })
                    .set(n as i64);
            }
        } else {
            // Only the holder observes members; a standby's view would be stale.
            self.set_members(&[]);
            self.suspects.set(0);
            self.units_quarantined.set(0);
            self.units_held.set(0);
            self.quarantine_unreadable.set(0);
            self.failing_long.set(0);
            self.units_in_transit.set(0);
            self.transit_oldest.set(0.0);
            self.members_owing.set(0);
            self.members_draining.set(0);
            self.members_waiting.set(0);
            self.sync_balance(&Status::default());
            self.sync_controls(ControlsStatus::default());
        }
    }

    /// `distributor_controls{kind}` (all 0 on a standby).
    fn sync_controls(&self, c: ControlsStatus) {
        for (kind, n) in ControlsStatus::KINDS.into_iter().zip(c.counts()) {
            self.controls.get_or_create(&Kind { kind }).set(n as i64);
        }
    }

    /// The cost balance's gauges (all 0 in count mode and on a standby).
    fn sync_balance(&self, s: &Status) {
        let b = s.balance.as_ref();
        let loads = b.and_then(|b| b.loads.as_deref());
        self.load_imbalance
            .set(loads.map_or(0.0, |l| l.imbalance()));
        self.load_least.set(loads.map_or(0.0, |l| l.least()));
        self.members_out_of_band
            .set(loads.map_or(0, |l| l.out_of_band()) as i64);
        self.hot_units.set(loads.map_or(0, |l| l.hot.len()) as i64);
        self.invalid_costs
            .set(b.map_or(0, |b| b.invalid_costs) as i64);
        self.stale_loads.set(b.map_or(0, |b| b.stale_loads) as i64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_with_known_labels_are_served_at_zero_before_any_event() {
        let text = Metrics::new().encode();
        for reason in PingFailure::REASONS {
            let line = format!("distributor_ping_failures_total{{reason=\"{reason}\"}} 0");
            assert!(text.contains(&line), "{line}");
            let line =
                format!("distributor_member_connection_closes_total{{outcome=\"{reason}\"}} 0");
            assert!(text.contains(&line), "{line}");
        }
        assert!(
            text.contains("distributor_member_connection_closes_total{outcome=\"answered\"} 0")
        );
        for kind in StoreError::KINDS {
            let line = format!("distributor_redis_errors_total{{kind=\"{kind}\"}} 0");
            assert!(text.contains(&line), "{line}");
        }
    }

    #[test]
    fn a_scrape_never_misses_a_group_while_gauges_are_updated() {
        let m = std::sync::Arc::new(Metrics::new());
        let groups = vec![("g".to_string(), 3, 1)];
        m.set_members(&groups);
        let writer = {
            let m = m.clone();
            std::thread::spawn(move || {
                for i in 0..20_000 {
                    m.set_members(&[("g".to_string(), 3 + i % 2, 1)]);
                }
            })
        };
        let mut scrapes = 0;
        while !writer.is_finished() {
            let text = m.encode();
            assert!(
                text.contains("distributor_members{group=\"g\",state=\"live\"}"),
                "a scrape saw no series for a current group"
            );
            scrapes += 1;
        }
        writer.join().unwrap();
        assert!(scrapes > 0);
        // A group that goes away loses its series.
        m.set_members(&[("h".to_string(), 1, 0)]);
        let text = m.encode();
        assert!(!text.contains("group=\"g\""), "{text}");
        assert!(text.contains("group=\"h\""), "{text}");
    }

    #[test]
    fn the_handoff_gauges_mirror_the_holders_status() {
        let m = Metrics::new();
        let mut s = Status {
            role: Role::Holder,
            ..Status::default()
        };
        s.handoff.in_transit = 7;
        s.handoff.owing = 2;
        s.handoff.draining = 1;
        s.failing_long = 3;
        m.sync(&s);
        let text = m.encode();
        for line in [
            "distributor_units_in_transit 7",
            "distributor_members_owing 2",
            "distributor_members_draining 1",
            "distributor_members_failing_long 3",
        ] {
            assert!(text.contains(line), "{line}\n{text}");
        }
        // A standby shows none: its view would be stale.
        s.role = Role::Standby;
        m.sync(&s);
        assert!(m.encode().contains("distributor_units_in_transit 0"));
        assert!(m.encode().contains("distributor_members_failing_long 0"));
    }
}
