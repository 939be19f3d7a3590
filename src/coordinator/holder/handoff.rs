//! What the holder keeps of the handoff between cycles (see `core::handoff`):
//! the [`Ledger`] of what Redis holds, the members' reports and the
//! operator's weight overrides as last read, and the members proven gone.
//! The cycle feeds it what it read and pinged; the plan reads it as
//! [`MemberFacts`].
//!
//! Guarantees:
//! - a failed read of the reports keeps the reports known (a timeout or a
//!   dropped connection) or keeps them and marks them unread (a key of the
//!   wrong type): a missing fact never shortens a wait, and a revocation
//!   made meanwhile waits the longest any member may ask for;
//! - a member counts as gone for a handoff only after a refusal on a
//!   connection opened for a probe, and as disconnected only once Redis,
//!   asked after that refusal, had no connection the member names;
//! - reports of an applied generation above any Redis knows (a numbering
//!   Redis lost) are never taken as acknowledgements (see
//!   [`HandoffState::lost_numbering`]).

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;

use std::time::Instant;

use super::{LastChange, first_few};
use crate::core::controls::Controls;
use crate::core::handoff::{
    self, Ledger, MemberFacts, MemberReport, Proof, RedisConnection, UNKNOWN_ORIGIN,
};
use crate::core::inputs::{self, Inputs};
use crate::core::table::MatchingTable;
use crate::edge::grpc::{PingFailure, PingReport};
use crate::edge::redis::{Reports, ReportsRead};
use crate::error::StoreError;

/// The highest `applied` a report may claim and still raise the holder's
/// generation floor: half the range of stored counters, so that a hostile
/// report cannot push generations to their end (Redis refuses counters at
/// 2^53).
const MAX_FLOOR_FROM_REPORTS: u64 = 1 << 52;

/// What proves a member gone, by the instant the refused connection was
/// opened (see `core::handoff::Proof`).
#[derive(Clone, Copy, Debug, Default)]
struct Gone {
    /// A refusal on a connection opened for a probe, no answer since.
    refused: Option<Instant>,
    /// Such a refusal after which Redis had none of its connections.
    disconnected: Option<Instant>,
}

/// What a confirmation probe of a member can prove (see
/// [`HandoffState::to_confirm`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(in crate::coordinator) struct Confirm {
    /// The connections recorded with its revocations, for Redis to be asked
    /// about when its report names none any more.
    pub(in crate::coordinator) clients: Vec<RedisConnection>,
    /// Whether a refusal alone releases something (an origin that did not
    /// speak the protocol).
    pub(in crate::coordinator) refusal_helps: bool,
    /// The latest revoking write it must be proven gone after.
    pub(in crate::coordinator) since: Instant,
}

/// A refused probe of a member, with what Redis said of its connection.
#[derive(Clone, Debug)]
pub(in crate::coordinator) struct Refusal {
    pub(in crate::coordinator) report: PingReport,
    /// Redis, asked after the refusal, had no connection the member names.
    pub(in crate::coordinator) disconnected: bool,
}

/// See the module documentation.
#[derive(Clone, Default)]
pub(in crate::coordinator) struct HandoffState {
    pub(in crate::coordinator) ledger: Ledger,
    /// Members refused since they last answered.
    gone: HashMap<String, Gone>,
    /// The members' reports, as last read and decoded.
    pub(in crate::coordinator) reports: HashMap<String, MemberReport>,
    /// Whether the last read of the reports worked.
    reports_read: bool,
    /// Members whose report could not be decoded when last read.
    unreadable: HashSet<String>,
    /// The last report of members whose entry vanished (Redis lost its
    /// data, an operator removed it, the member deregistered) while they
    /// still have a row or owe a release: a fact that goes missing never
    /// turns a member of the protocol into one whose refusal alone releases
    /// its units, or shortens its wait.
    vanished: HashMap<String, MemberReport>,
    /// The version of the reports and overrides hashes these were decoded
    /// from (`ReportsRead::version`): unchanged, they are not read again.
    pub(in crate::coordinator) reports_version: Option<u64>,
    /// Members that reported draining and then removed their report: they
    /// finished their drain and deregistered (`docs/protocol.md`, step 6). The
    /// lists a handoff cycle plans with are the last full cycle's, where such
    /// a member is still listed; without its report it would look like a
    /// member that does not acknowledge, and get units again. It stays out
    /// until a full cycle finds it unlisted or it reports again (a new
    /// process on the same address).
    departed: HashSet<String>,
    /// Unreadable report entries, as last logged (logged again on change).
    pub(in crate::coordinator) bad_reports: BTreeSet<String>,
    /// The operator's weight overrides (`{T}:weights`), as last read and
    /// decoded: they beat the members' reported weights.
    pub(in crate::coordinator) overrides: HashMap<String, u32>,
    /// Unreadable override entries (or the key's error), as last logged.
    bad_overrides: BTreeSet<String>,
    /// The operator's controls (`{T}:controls`), as last read and decoded.
    pub(in crate::coordinator) controls: Arc<Controls>,
    /// Unreadable control entries (or the key's error), as last logged.
    pub(in crate::coordinator) bad_controls: BTreeSet<String>,
    /// Whether `controls` were read (or the key found of another type):
    /// until then a failed read fails the cycle, rather than plan as if
    /// no control were in force (a new holding while paused).
    controls_read: bool,
    /// The group each member was last listed in.
    pub(in crate::coordinator) former_group: HashMap<String, String>,
    /// The last full cycle's inputs, for handoff cycles (which do not read
    /// the lists again).
    pub(in crate::coordinator) inputs: Option<Arc<Inputs>>,
    /// What the last plan did, for status and metrics.
    pub(in crate::coordinator) last: HandoffOutcome,
    /// The last solve that moved or placed units (status: `last_change`).
    pub(in crate::coordinator) last_change: Option<LastChange>,
    /// The last plan, when it changed nothing (see [`Steady`]).
    pub(in crate::coordinator) steady: Option<Steady>,
    /// The trace span of each write that revoked units still in transit, by
    /// generation: the write that grants them links to it, so that a move
    /// reads as revoke → grant in the trace view.
    pub(in crate::coordinator) revocations: BTreeMap<u64, opentelemetry::trace::SpanContext>,
    /// A recovery from possibly lost state, while it runs (see
    /// `holder::recovery`).
    pub(in crate::coordinator) recovery: Option<handoff::Recovery>,
    /// Recoveries begun in this holding (each is tagged with the next).
    pub(in crate::coordinator) recoveries: u32,
    /// Members that answered a ping that named the recovery running.
    pub(in crate::coordinator) recovery_answered: BTreeSet<String>,
    /// The longest deadline of the reports the last holder knew
    /// (`{T}:meta`'s `deadline_max`, a new holding's inheritance).
    pub(in crate::coordinator) deadline_inherited: Option<std::time::Duration>,
    /// Why the last write-back of lost reports failed (logged on change).
    pub(in crate::coordinator) restore_error: Option<String>,
}

/// A plan that changed nothing: nothing in transit, no unit revoked, placed
/// or moved, and the granted table as it came in. Planning again from the
/// same tables, inputs and members that get rows gives the same, so an idle
/// cycle skips it: the plan compares and copies every row (O(table), a few
/// milliseconds at 100,000 units). The tables and inputs are held (not only
/// their addresses), so a match is never a reused allocation.
#[derive(Clone)]
pub(in crate::coordinator) struct Steady {
    pub(in crate::coordinator) desired: Arc<MatchingTable>,
    pub(in crate::coordinator) granted: Arc<MatchingTable>,
    pub(in crate::coordinator) inputs: Arc<Inputs>,
    /// Which listed members get rows (`HolderView::keeps_units`), hashed.
    pub(in crate::coordinator) rows_for: u64,
}

impl Steady {
    pub(in crate::coordinator) fn matches(&self, other: &Steady) -> bool {
        Arc::ptr_eq(&self.desired, &other.desired)
            && Arc::ptr_eq(&self.granted, &other.granted)
            && Arc::ptr_eq(&self.inputs, &other.inputs)
            && self.rows_for == other.rows_for
    }
}

/// What one cycle's handoff did.
#[derive(Clone, Debug, Default)]
pub(in crate::coordinator) struct HandoffOutcome {
    pub(in crate::coordinator) revoked: usize,
    pub(in crate::coordinator) placed: usize,
    /// Units granted after a move.
    pub(in crate::coordinator) moved: Vec<handoff::Moved>,
    pub(in crate::coordinator) in_transit: usize,
    /// When the oldest unit in transit was revoked (wall clock, ms).
    pub(in crate::coordinator) oldest_transit_ms: Option<u64>,
    pub(in crate::coordinator) owing: usize,
    pub(in crate::coordinator) draining: usize,
    pub(in crate::coordinator) acknowledging: usize,
    pub(in crate::coordinator) invalid_reports: usize,
    /// Plan again then: a unit can be released by time.
    pub(in crate::coordinator) next_release: Option<Instant>,
}

impl HandoffState {
    pub(in crate::coordinator) fn facts(&self, member: &str) -> MemberFacts {
        let gone = self.gone.get(member).copied().unwrap_or_default();
        let report = self.reports.get(member);
        let vanished = report
            .is_none()
            .then(|| self.vanished.get(member))
            .flatten();
        MemberFacts {
            refused_since: gone.refused,
            disconnected_since: gone.disconnected,
            report: report.or(vanished).copied(),
            report_vanished: vanished.is_some(),
            reports_read: self.reports_read && !self.unreadable.contains(member),
        }
    }

    /// Whether `member` drains: itself (its report), or by an operator's
    /// `distributor members drain`; or it finished its own drain.
    pub(in crate::coordinator) fn draining(&self, member: &str) -> bool {
        self.reports.get(member).is_some_and(|r| r.draining)
            || self.departed.contains(member)
            || self.controls.drained(member)
    }

    /// Members that units in transit were revoked from and that have not
    /// released them yet.
    pub(in crate::coordinator) fn owing(&self) -> HashSet<&str> {
        self.ledger
            .transit()
            .values()
            .flat_map(|units| units.values())
            .flat_map(|t| t.origins())
            .filter(|m| *m != UNKNOWN_ORIGIN)
            .collect()
    }

    /// A full cycle read the lists: departed members no longer listed are
    /// forgotten (listed again later, they are new registrations), and so
    /// are refusals of members neither listed nor owing anything.
    pub(in crate::coordinator) fn forget_departed(&mut self, inputs: &Inputs) {
        let listed: HashSet<&str> = inputs.members().collect();
        self.departed.retain(|m| listed.contains(m.as_str()));
        if self.gone.keys().any(|m| !listed.contains(m.as_str())) {
            let owing: HashSet<String> = self.owing().into_iter().map(str::to_string).collect();
            self.gone
                .retain(|m, _| listed.contains(m.as_str()) || owing.contains(m));
        }
    }

    /// Members to probe on a connection of their own once a cycle is done:
    /// those that owe a revocation whose write is done, that a refusal (and
    /// Redis) could release, that no probe proved gone since that write,
    /// and that are refused, or no longer listed (no cycle pings them: a
    /// member that deregistered).
    pub(in crate::coordinator) fn to_confirm(
        &self,
        listed: &HashSet<&str>,
    ) -> BTreeMap<String, Confirm> {
        let mut out: BTreeMap<String, Confirm> = BTreeMap::new();
        for t in self.ledger.transit().values().flat_map(|u| u.values()) {
            // (0: its revoking write is not done yet.)
            if t.revoked_at == 0 {
                continue;
            }
            for (m, origin) in &t.from {
                let gone = self.gone.get(m);
                if m == UNKNOWN_ORIGIN || (gone.is_none() && listed.contains(m.as_str())) {
                    continue;
                }
                let after = |at: Option<Instant>| at.is_some_and(|a| a > t.waiting_since);
                let gone = gone.copied().unwrap_or_default();
                let unproven = match origin.proof {
                    Proof::Refusal => !after(gone.refused),
                    Proof::Disconnected(_) => !after(gone.disconnected),
                    Proof::Never => false,
                };
                if !unproven {
                    continue;
                }
                let c = out.entry(m.clone()).or_insert(Confirm {
                    clients: Vec::new(),
                    refusal_helps: false,
                    since: t.waiting_since,
                });
                c.since = c.since.max(t.waiting_since);
                match origin.proof {
                    Proof::Refusal => c.refusal_helps = true,
                    Proof::Disconnected(conn) if !c.clients.contains(&conn) => c.clients.push(conn),
                    _ => {}
                }
            }
        }
        out
    }

    /// Takes ping results: a member refused stays gone until it answers
    /// again (a later timeout, its channel still tearing the dead connection
    /// down, does not bring the process back; a new process on the address
    /// answers). A refusal counts for a handoff only on a connection opened
    /// for it (`opened`).
    pub(in crate::coordinator) fn observe_pings(&mut self, reports: &[PingReport]) {
        for r in reports {
            match &r.result {
                Err(PingFailure::Refused(_)) => {
                    let gone = self.gone.entry(r.member.clone()).or_default();
                    if let Some(opened) = r.opened {
                        gone.refused = Some(gone.refused.map_or(opened, |s| s.max(opened)));
                    }
                }
                Ok(_) => {
                    self.gone.remove(&r.member);
                }
                Err(_) => {}
            }
        }
    }

    /// Takes refused probes, listed members or not, with what Redis said of
    /// their connections.
    pub(in crate::coordinator) fn observe_refusals(&mut self, refusals: &[Refusal]) {
        for r in refusals {
            self.observe_pings(std::slice::from_ref(&r.report));
            if let (true, Some(opened)) = (r.disconnected, r.report.opened) {
                let gone = self.gone.entry(r.report.member.clone()).or_default();
                gone.disconnected = Some(gone.disconnected.map_or(opened, |s| s.max(opened)));
            }
        }
    }

    /// Takes the reports and overrides a cycle read; unchanged since the
    /// version decoded last, nothing is decoded again (the same content
    /// gives the same state: decoding depends on nothing else). A read of
    /// the reports that failed for any other reason than the key holding
    /// another type (a timeout, a dropped connection, a server error) is
    /// returned: the cycle fails and the next one reads again, rather than
    /// plan without knowing the members' deadlines (which would make every
    /// revocation of that cycle wait the longest any member may ask for).
    pub(in crate::coordinator) fn observe(
        &mut self,
        read: ReportsRead,
        keys: &crate::core::keys::Keys,
    ) -> Result<(), StoreError> {
        self.reports_version = read.version;
        if let Some(c) = read.content {
            self.observe_overrides(c.overrides, &keys.weights);
            if let Err(e) = self.observe_controls(c.controls, &keys.controls) {
                self.reports_read = false;
                return Err(e);
            }
            match c.reports {
                Err(e) if !matches!(e, StoreError::WrongType { .. }) => {
                    self.reports_read = false;
                    return Err(e);
                }
                reports => self.observe_reports(reports, &keys.members),
            }
        }
        Ok(())
    }

    /// Takes the members' reports; logs unreadable ones when they change.
    pub(in crate::coordinator) fn observe_reports(&mut self, reports: Reports, key: &str) {
        let raw = match reports {
            Ok(raw) => raw,
            Err(e) => {
                // Members can write this key (another type: `observe`
                // fails the cycle on any other error): the reports known
                // stay (an acknowledgement they show was true when read,
                // and a member cannot write a new one meanwhile), and
                // revocations of members without one wait the longest
                // (`reports_read`), not the handoff delay.
                if self.bad_reports.insert(format!("\0{e}")) {
                    tracing::warn!(error = %e, key, "member reports unreadable; units revoked meanwhile wait the longest any member may ask for");
                }
                self.reports_read = false;
                return;
            }
        };
        self.reports_read = true;
        let was_draining: Vec<String> = self
            .reports
            .iter()
            .filter(|(_, r)| r.draining)
            .map(|(m, _)| m.clone())
            .collect();
        let before = std::mem::take(&mut self.reports);
        let unreadable = decode_entries(raw, MemberReport::decode, &mut self.reports);
        for (m, r) in before {
            if !self.reports.contains_key(&m) && !unreadable.contains_key(&m) {
                self.vanished.insert(m, r);
            }
        }
        let reports = &self.reports;
        self.vanished.retain(|m, _| !reports.contains_key(m));
        let bad = lines(&unreadable);
        if bad != self.bad_reports && !bad.is_empty() {
            tracing::warn!(
                key,
                count = bad.len(),
                first = %first_few(&bad, " "),
                "unreadable member reports (expected `applied draining deadline_ms weight [client]`); units revoked from those members wait the longest any member may ask for"
            );
        }
        // A member whose report is unreadable may speak the protocol with
        // any deadline: its revocations wait the longest.
        self.unreadable = unreadable.into_keys().collect();
        self.bad_reports = bad;
        for m in was_draining {
            if !self.reports.contains_key(&m) {
                self.departed.insert(m);
            }
        }
        let reports = &self.reports;
        self.departed.retain(|m| !reports.contains_key(m));
    }

    /// Takes the operator's weight overrides; logs unreadable entries (and a
    /// key of the wrong type) when they change. `None`, or any error but a
    /// key of another type (a timeout, a server error), keeps the overrides
    /// known: a read that failed does not move units.
    pub(in crate::coordinator) fn observe_overrides(
        &mut self,
        overrides: Option<Reports>,
        key: &str,
    ) {
        let raw = match overrides {
            None => return,
            Some(Err(e)) if !matches!(e, StoreError::WrongType { .. }) => return,
            Some(Err(e)) => {
                // An operator key of the wrong type must not stop the holder:
                // no overrides, every member's report counts.
                let bad = BTreeSet::from([format!("\0{e}")]);
                if bad != self.bad_overrides {
                    tracing::warn!(error = %e, key, "weight overrides unreadable; the members' reported weights are used");
                }
                self.bad_overrides = bad;
                self.overrides.clear();
                return;
            }
            Some(Ok(raw)) => raw,
        };
        let bad = lines(&decode_entries(
            raw,
            handoff::decode_weight_override,
            &mut self.overrides,
        ));
        if bad != self.bad_overrides && !bad.is_empty() {
            tracing::warn!(
                key,
                count = bad.len(),
                first = %first_few(&bad, " "),
                "unreadable weight overrides (expected an integer from 1 to {}); those members' reported weights are used",
                handoff::MAX_WEIGHT
            );
        }
        self.bad_overrides = bad;
    }

    /// Takes the operator's controls, as [`Self::observe_overrides`] takes
    /// the overrides: a failed read keeps the controls known (a read that
    /// failed does not move units), a key of another type means none, and
    /// unreadable entries are skipped and logged when they change. A read
    /// that failed before any worked is returned: the cycle fails and the
    /// next reads again (`None`: the round trip failed, and the reports'
    /// error fails the cycle).
    pub(in crate::coordinator) fn observe_controls(
        &mut self,
        controls: Option<Reports>,
        key: &str,
    ) -> Result<(), StoreError> {
        let raw = match controls {
            None => return Ok(()),
            Some(Err(e)) if !matches!(e, StoreError::WrongType { .. }) => {
                return if self.controls_read { Ok(()) } else { Err(e) };
            }
            Some(Err(e)) => {
                let bad = BTreeSet::from([format!("\0{e}")]);
                if bad != self.bad_controls {
                    tracing::warn!(error = %e, key, "controls unreadable; none is in force");
                }
                self.bad_controls = bad;
                self.controls = Arc::default();
                self.controls_read = true;
                return Ok(());
            }
            Some(Ok(raw)) => raw,
        };
        self.controls_read = true;
        let (controls, unreadable) = Controls::decode(raw);
        let bad: BTreeSet<String> = unreadable.iter().map(ToString::to_string).collect();
        if bad != self.bad_controls && !bad.is_empty() {
            tracing::warn!(
                key,
                count = bad.len(),
                first = %first_few(&bad, " "),
                "unreadable controls skipped"
            );
        }
        self.bad_controls = bad;
        if *self.controls != controls {
            self.controls = Arc::new(controls);
        }
        Ok(())
    }

    /// The highest generation a member reports having applied above `known`
    /// (the highest Redis and this replica know): such a report comes from
    /// a numbering Redis lost (its data, or a promoted replica that lagged).
    /// The holder then numbers its writes above it, and revokes again what
    /// it would acknowledge (`Ledger::renumber_up_to`).
    pub(in crate::coordinator) fn lost_numbering(&self, known: u64) -> Option<u64> {
        let stated = self
            .recovery
            .iter()
            .flat_map(|r| r.held.values().map(|h| h.processed));
        self.reports
            .values()
            .map(|r| r.applied)
            .chain(stated)
            .filter(|a| *a > known && *a < MAX_FLOOR_FROM_REPORTS)
            .max()
    }

    /// How many members' reports this holder knows: read, or vanished
    /// (lost while the member had a row or owed a unit), not of members
    /// that finished their drain.
    pub(in crate::coordinator) fn reports_known(&self) -> usize {
        self.reports.len()
            + self
                .vanished
                .keys()
                .filter(|m| !self.departed.contains(*m))
                .count()
    }

    /// The longest deadline of the reports this holder knows (read,
    /// vanished, or inherited from the last holder's record).
    pub(in crate::coordinator) fn deadline_max(&self) -> Option<std::time::Duration> {
        self.reports
            .values()
            .chain(self.vanished.values())
            .map(|r| r.deadline)
            .chain(self.deadline_inherited)
            .max()
    }

    /// How many reports the last read found (decoded or not).
    pub(in crate::coordinator) fn reports_read_count(&self) -> usize {
        self.reports.len() + self.unreadable.len()
    }

    /// Whether the last read of the reports worked (else `{T}:members`
    /// holds another type, or the read failed).
    pub(in crate::coordinator) fn reports_read(&self) -> bool {
        self.reports_read
    }

    /// Members whose report vanished while they had a row or owed a unit.
    pub(in crate::coordinator) fn vanished_members(&self) -> impl Iterator<Item = &str> {
        self.vanished.keys().map(String::as_str)
    }

    /// The vanished reports to write back (see `step::restore`), encoded:
    /// only while the reports were read (a key of another type holds none).
    pub(in crate::coordinator) fn to_restore(&self) -> Vec<(String, String)> {
        if !self.reports_read {
            return Vec::new();
        }
        self.vanished
            .iter()
            .filter(|(m, _)| !self.departed.contains(*m))
            .map(|(m, r)| (m.clone(), r.encode()))
            .collect()
    }

    /// Forgets the vanished reports of members that have no row in the table
    /// Redis holds (as the ledger knows it) and owe nothing.
    pub(in crate::coordinator) fn retire_vanished(&mut self) {
        if self.vanished.is_empty() {
            return;
        }
        let owing: HashSet<String> = self.owing().into_iter().map(str::to_string).collect();
        let rows = self.ledger.granted().map(|g| g.rows());
        self.vanished
            .retain(|m, _| owing.contains(m) || rows.is_none_or(|r| r.contains_key(m)));
    }

    /// A member's capacity weight: the operator's override, else its report's,
    /// else 1.
    pub(in crate::coordinator) fn weight(&self, member: &str) -> u32 {
        self.overrides
            .get(member)
            .copied()
            .or_else(|| self.reports.get(member).map(|r| r.weight))
            .unwrap_or(1)
    }
}

/// Decodes a member-keyed hash (reports, weight overrides) into `into`,
/// replacing what it held; returns the unreadable entries, member →
/// excerpt of the value, for a log that is repeated only when they change.
fn decode_entries<T>(
    raw: Vec<(String, String)>,
    decode: impl Fn(&str) -> Option<T>,
    into: &mut HashMap<String, T>,
) -> BTreeMap<String, String> {
    let mut bad = BTreeMap::new();
    into.clear();
    for (member, value) in raw {
        match decode(&value) {
            Some(v) => {
                into.insert(member, v);
            }
            None => {
                bad.insert(member, inputs::excerpt(value.as_bytes()));
            }
        }
    }
    bad
}

/// Unreadable entries as `member=excerpt` lines, for logs.
fn lines(bad: &BTreeMap<String, String>) -> BTreeSet<String> {
    bad.iter().map(|(m, v)| format!("{m}={v}")).collect()
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn pairs(v: &[(&str, &str)]) -> Reports {
        Ok(v.iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect())
    }

    #[test]
    fn overrides_beat_reports_and_unreadable_ones_are_skipped() {
        let mut h = HandoffState::default();
        h.observe_reports(pairs(&[("a:1", "1 0 5000 2"), ("b:1", "1 0 5000 3")]), "m");
        h.observe_overrides(
            Some(pairs(&[
                ("a:1", "7"),
                ("b:1", "0"),
                ("c:1", "x"),
                ("d:1", "1001"),
            ])),
            "w",
        );
        assert_eq!(h.weight("a:1"), 7, "the override wins");
        assert_eq!(h.weight("b:1"), 3, "out of range: the report counts");
        assert_eq!(h.weight("c:1"), 1, "garbage, no report: 1");
        assert_eq!(h.weight("d:1"), 1);
        assert_eq!(h.bad_overrides.len(), 3);

        // A failed read (None, or a timeout) keeps what was known.
        h.observe_overrides(None, "w");
        assert_eq!(h.weight("a:1"), 7);
        let timeout = StoreError::Timeout {
            op: "read",
            timeout: Duration::from_secs(1),
        };
        h.observe_overrides(Some(Err(timeout)), "w");
        assert_eq!(h.weight("a:1"), 7);

        // A key of the wrong type: no overrides.
        let wrong = StoreError::WrongType {
            key: "w".into(),
            expected: "hash",
            actual: "string".into(),
        };
        h.observe_overrides(Some(Err(wrong)), "w");
        assert_eq!(h.weight("a:1"), 2);
        assert!(h.overrides.is_empty());
        h.observe_overrides(Some(pairs(&[])), "w");
        assert!(h.bad_overrides.is_empty());
        assert_eq!(h.weight("b:1"), 3);
    }

    #[test]
    fn a_failed_controls_read_fails_the_cycle_until_one_worked_and_then_keeps_them() {
        let mut h = HandoffState::default();
        let timeout = || StoreError::Timeout {
            op: "read",
            timeout: Duration::from_secs(1),
        };
        // A new holding while paused must not plan as if nothing were.
        assert!(h.observe_controls(Some(Err(timeout())), "c").is_err());
        h.observe_controls(
            Some(pairs(&[("pause", "1"), ("member:a:1", "drain 1")])),
            "c",
        )
        .unwrap();
        assert!(h.controls.paused() && h.draining("a:1"));
        h.observe_controls(Some(Err(timeout())), "c").unwrap();
        h.observe_controls(None, "c").unwrap();
        assert!(h.controls.paused(), "a failed read keeps what was known");
        let wrong = StoreError::WrongType {
            key: "c".into(),
            expected: "hash",
            actual: "string".into(),
        };
        h.observe_controls(Some(Err(wrong)), "c").unwrap();
        assert!(
            h.controls.is_empty() && !h.draining("a:1"),
            "another type: none"
        );
        assert_eq!(h.bad_controls.len(), 1);
    }

    /// Issue 20, finding 4: a report read that timed out cleared every
    /// report, so a member with a 30 s deadline was waited for as one
    /// without a report (`-handoff-delay`). Reports survive a failed read,
    /// and while they are not read a revocation waits the longest.
    #[test]
    fn a_failed_report_read_never_shortens_a_wait() {
        let settings = handoff::Settings {
            handoff_delay: Duration::from_secs(10),
        };
        let mut h = HandoffState::default();
        h.observe_reports(pairs(&[("a:1", "4 0 30000 1")]), "m");
        let before = settings.wait(&h.facts("a:1"));
        assert_eq!(before, handoff::deadline_wait(Duration::from_secs(30)));
        let timeout = StoreError::Timeout {
            op: "read member reports",
            timeout: Duration::from_secs(1),
        };
        h.observe_reports(Err(timeout), "m");
        assert_eq!(h.facts("a:1").report.map(|r| r.applied), Some(4));
        assert_eq!(settings.wait(&h.facts("a:1")), before);
        // A member never seen: the longest, not the handoff delay.
        assert_eq!(settings.wait(&h.facts("b:1")), settings.longest_wait());
        let wrong = StoreError::WrongType {
            key: "m".into(),
            expected: "hash",
            actual: "string".into(),
        };
        h.observe_reports(Err(wrong), "m");
        assert_eq!(settings.wait(&h.facts("a:1")), before);
        assert_eq!(settings.wait(&h.facts("b:1")), settings.longest_wait());
        // Read again: a member without a report is an old worker.
        h.observe_reports(pairs(&[("a:1", "5 0 30000 1")]), "m");
        assert_eq!(settings.wait(&h.facts("b:1")), settings.handoff_delay);
    }

    /// A report that vanishes (Redis lost its data, an operator removed it)
    /// still counts for a member that has a row or owes a release: its
    /// revocations keep its wait and its proof, not an old worker's.
    #[test]
    fn a_vanished_report_still_counts_while_the_member_holds_anything() {
        let settings = handoff::Settings {
            handoff_delay: Duration::from_secs(1),
        };
        let mut h = HandoffState::default();
        h.observe_reports(pairs(&[("a:1", "4 0 30000 1 17")]), "m");
        h.observe_reports(pairs(&[]), "m");
        let f = h.facts("a:1");
        assert_eq!(
            settings.wait(&f),
            handoff::deadline_wait(Duration::from_secs(30))
        );
        assert_eq!(
            settings.proof(&f),
            Proof::Disconnected(RedisConnection::id(17))
        );
        // No row and nothing owed (the ledger knows no table yet counts as
        // unknown: kept); with a table that has no row for it: forgotten.
        h.retire_vanished();
        assert!(h.facts("a:1").report.is_some());
        h.ledger.unchanged(Arc::new(MatchingTable::default()), 0);
        h.retire_vanished();
        assert_eq!(h.facts("a:1").report, None);
        assert_eq!(settings.proof(&h.facts("a:1")), Proof::Refusal);
    }

    /// A transit entry records the client id alone (`c17`), the form every
    /// holder version reads; the run id is looked at in the report.
    #[test]
    fn a_revocation_records_the_client_id_alone() {
        let settings = handoff::Settings {
            handoff_delay: Duration::from_secs(1),
        };
        let mut h = HandoffState::default();
        let report = format!("4 0 30000 1 17 {}", "a".repeat(40));
        h.observe_reports(pairs(&[("a:1", &report)]), "m");
        let f = h.facts("a:1");
        assert!(f.report.unwrap().client.unwrap().server.is_some());
        assert_eq!(
            settings.proof(&f),
            Proof::Disconnected(RedisConnection::id(17))
        );
    }

    #[test]
    fn reports_above_every_known_generation_are_a_lost_numbering() {
        let mut h = HandoffState::default();
        h.observe_reports(
            pairs(&[
                ("a:1", "500 0 5000 1"),
                ("b:1", "7 0 5000 1"),
                ("c:1", "5000000000000000 0 5000 1"),
            ]),
            "m",
        );
        assert_eq!(h.lost_numbering(10), Some(500));
        assert_eq!(h.lost_numbering(500), None);
    }
}
