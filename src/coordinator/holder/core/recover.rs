//! The holder's recovery from handoff state Redis may have lost (see
//! `core::handoff::recovery`): when it begins, what it gathers, whom a plan
//! waits for, and when it ends. Pure: the cycle (`step`) reads `{T}:held`
//! and pings; this module decides.
//!
//! Guarantees, tested below:
//! - a recovery begins on any sign of loss: a new holding whose stored
//!   state was written on another Redis server (a failover, a restart) or
//!   on an unrecorded one; a generation known above the stored one (a
//!   member's report or statement, this replica's own floor); a
//!   coordination key of the wrong type;
//! - for the gathering time the holder plans nothing (members state what
//!   they work on meanwhile; one that lost its registration too registers
//!   again);
//! - then every member it knows that stated nothing may work on any unit
//!   no statement names (unless it is proven gone, or is an old worker: it
//!   answered a ping that named the recovery and speaks no protocol): the
//!   plan puts such units in transit from it;
//! - the recovery ends only with a confirmed write of a table numbered
//!   above every generation a member stated, so that every member that
//!   stated processes it (and starts again from it).

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use super::HolderView;
use crate::coordinator::holder::HandoffState;
use crate::core::handoff::{
    HeldReport, LossSign, Recovery, RecoveryClaims, RecoveryTag, RunId, UNKNOWN_ORIGIN,
};
use crate::core::inputs::Inputs;
use crate::core::table::MatchingTable;
use crate::edge::grpc::PingReport;

/// What a new holding's stored state says of a loss: written on another
/// server than `now` (this replica's), or on one nobody recorded while
/// something was written (`stored_generation` above 0).
pub(in crate::coordinator::holder) fn server_sign(
    stored: Option<RunId>,
    now: Option<RunId>,
    stored_generation: u64,
) -> Option<LossSign> {
    let same = stored.is_some() && stored == now;
    (!same && (stored.is_some() || stored_generation > 0))
        .then_some(LossSign::ServerChanged { stored, now })
}

impl HandoffState {
    /// Begins a recovery for `why`, tagged with `epoch` and the next number
    /// of this holding, unless one runs. Returns its tag when it began.
    pub(in crate::coordinator::holder) fn begin_recovery(
        &mut self,
        why: LossSign,
        epoch: u64,
        now: Instant,
        now_ms: u64,
        gather: Duration,
    ) -> Option<RecoveryTag> {
        if self.recovery.is_some() {
            return None;
        }
        self.recoveries += 1;
        let tag = RecoveryTag {
            epoch,
            seq: self.recoveries,
        };
        self.recovery = Some(Recovery::new(tag, why, now, now_ms, gather));
        self.recovery_answered.clear();
        Some(tag)
    }

    /// Takes `{T}:held` as read (member → stored value): the statements of
    /// the recovery running count. Returns the entries that do not decode,
    /// for the log (such a member counts as one that stated nothing).
    pub(in crate::coordinator::holder) fn take_held(
        &mut self,
        raw: Vec<(String, String)>,
    ) -> Vec<(String, String)> {
        let Some(r) = self.recovery.as_mut() else {
            return Vec::new();
        };
        let mut bad = Vec::new();
        let mut good = Vec::new();
        for (m, v) in raw {
            match HeldReport::decode(&v) {
                Some(h) => good.push((m, h)),
                None => bad.push((m, v)),
            }
        }
        r.take(good);
        bad
    }

    /// Takes a round of pings: members that answered one that named the
    /// recovery running.
    pub(in crate::coordinator::holder) fn recovery_pinged(&mut self, reports: &[PingReport]) {
        if self.recovery.is_none() {
            return;
        }
        for r in reports.iter().filter(|r| r.result.is_ok()) {
            self.recovery_answered.insert(r.member.clone());
        }
    }

    /// Ends the recovery (its plan's write was confirmed).
    pub(in crate::coordinator::holder) fn end_recovery(&mut self) -> Option<Recovery> {
        self.recovery_answered.clear();
        self.recovery.take()
    }

    /// Whether `m` need not state what it works on: proven gone (a
    /// refusal, and Redis without its connection where its report names
    /// one), or it answered a ping that named the recovery and has no
    /// report (it does not speak the handoff protocol: it follows its row,
    /// and the recovery cannot ask it).
    fn excused(&self, m: &str) -> bool {
        let f = self.facts(m);
        let gone = match f.report {
            Some(r) if r.client.is_some() => f.disconnected_since.is_some(),
            Some(_) => false,
            None => f.refused_since.is_some(),
        };
        gone || (f.report.is_none() && self.recovery_answered.contains(m))
    }
}

impl HolderView {
    /// Every member this holder knows of: listed, reporting (or whose
    /// report vanished), with a row of `granted`, an origin of a unit in
    /// transit, or in the liveness.
    fn known_members(&self, inputs: &Inputs, granted: &MatchingTable) -> BTreeSet<String> {
        let hs = &self.handoff;
        let mut known: BTreeSet<String> = inputs.members().map(str::to_string).collect();
        known.extend(hs.reports.keys().cloned());
        known.extend(hs.vanished_members().map(str::to_string));
        known.extend(granted.rows().keys().cloned());
        known.extend(
            hs.ledger
                .transit()
                .values()
                .flat_map(|u| u.values())
                .flat_map(|t| t.origins())
                .filter(|m| *m != UNKNOWN_ORIGIN)
                .map(str::to_string),
        );
        known.extend(self.liveness.iter().map(|(m, _)| m.to_string()));
        known
    }

    /// The claims a plan of the recovery running takes from `granted` (the
    /// stored table), or, while members may still state what they work on,
    /// when to look again (`Err`). `None`: no recovery runs.
    pub(in crate::coordinator::holder) fn recovery_claims(
        &self,
        inputs: &Inputs,
        granted: &MatchingTable,
        now: Instant,
    ) -> Option<Result<RecoveryClaims, Instant>> {
        let r = self.handoff.recovery.as_ref()?;
        if !r.gathered(now) {
            return Some(Err(r.gather_until));
        }
        let known = self.known_members(inputs, granted);
        let excused = |m: &str| self.handoff.excused(m);
        Some(Ok(r.claims(
            r.unanswered(known.iter().map(String::as_str), &excused),
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{inputs, live_view, table};
    use super::*;
    use crate::core::handoff::MemberReport;
    use crate::core::timing::test_t0;
    use crate::edge::grpc::PingFailure;

    #[test]
    fn a_new_holding_recovers_unless_the_state_was_written_on_its_own_server() {
        let (a, b) = (Some(RunId::repeated('a')), Some(RunId::repeated('b')));
        assert_eq!(server_sign(a, a, 9), None);
        assert!(server_sign(a, b, 9).is_some(), "a failover or a restart");
        assert!(server_sign(None, a, 9).is_some(), "nobody recorded it");
        assert!(
            server_sign(a, None, 9).is_some(),
            "this replica cannot tell"
        );
        assert_eq!(server_sign(None, a, 0), None, "nothing was ever written");
    }

    fn report(client: Option<u64>) -> MemberReport {
        MemberReport {
            applied: 3,
            draining: false,
            deadline: Duration::from_secs(1),
            weight: 1,
            client: client.map(crate::core::handoff::RedisConnection::id),
        }
    }

    #[test]
    fn the_plan_waits_out_the_gathering_and_then_for_members_that_stated_nothing() {
        let t0 = test_t0();
        let granted = table(&[("a:1", "u1"), ("b:2", "u2"), ("c:3", "u3")]);
        let ins = inputs(&["a:1", "b:2", "c:3", "d:4"], &["u1", "u2", "u3"]);
        let mut v = live_view(&["a:1", "b:2", "c:3", "d:4"], &granted);
        v.handoff.reports.insert("a:1".into(), report(Some(7)));
        v.handoff.reports.insert("b:2".into(), report(Some(8)));
        let why = LossSign::GenerationLost {
            stored: 1,
            known: 5,
        };
        let gather = Duration::from_secs(3);
        let tag = v
            .handoff
            .begin_recovery(why.clone(), 4, t0, 0, gather)
            .expect("began");
        assert_eq!(tag, RecoveryTag { epoch: 4, seq: 1 });
        assert!(v.handoff.begin_recovery(why, 4, t0, 0, gather).is_none());
        assert_eq!(
            v.recovery_claims(&ins, &granted, t0).map(|c| c.err()),
            Some(Some(t0 + gather)),
            "gathering"
        );
        // a:1 states; d:4 answers a ping naming the recovery and speaks no
        // protocol (no report): an old worker, excused; b:2 states in
        // another recovery's name (ignored); c:3 (no report) says nothing.
        let stmt = |tag: RecoveryTag, units: &[(&str, u64)]| {
            HeldReport {
                tag,
                processed: 5,
                units: units.iter().map(|(u, t)| (u.to_string(), *t)).collect(),
            }
            .encode()
        };
        let other = RecoveryTag { epoch: 3, seq: 1 };
        let bad = v.handoff.take_held(vec![
            ("a:1".into(), stmt(tag, &[("u1", 2), ("u9", 5)])),
            ("b:2".into(), stmt(other, &[])),
            ("e:5".into(), "junk".into()),
        ]);
        assert_eq!(bad, vec![("e:5".to_string(), "junk".to_string())]);
        let ok = |m: &str| PingReport {
            member: m.into(),
            result: Ok(Duration::from_millis(1)),
            at: t0,
            opened: None,
        };
        let refused = PingReport {
            member: "c:3".into(),
            result: Err(PingFailure::Refused("refused".into())),
            at: t0,
            opened: Some(t0),
        };
        v.handoff.recovery_pinged(&[ok("d:4"), ok("b:2")]);
        // c:3 is refused (no report: gone).
        v.handoff.observe_pings(&[refused]);
        assert!(v.recovery_claims(&ins, &granted, t0).unwrap().is_err());
        // The gathering time passes: b:2 (it reports, and stated nothing
        // of this recovery) is the one that stated nothing.
        let claims = v
            .recovery_claims(&ins, &granted, t0 + gather)
            .unwrap()
            .unwrap();
        assert_eq!(claims.unanswered, BTreeSet::from(["b:2".to_string()]));
        assert_eq!(
            claims.stated.table.rows().get("a:1").map(String::as_str),
            Some("u1,u9")
        );
        assert_eq!(claims.stated.generation, None);
        assert!(v.handoff.end_recovery().is_some());
        assert!(v.recovery_claims(&ins, &granted, t0).is_none());
    }
}
