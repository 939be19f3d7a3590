//! The cycle's state machine, step by step, on hand-made outcomes.

use std::time::{Duration, Instant};

use super::super::tests::{live_view, table};
use super::*;
use crate::coordinator::holder::core::ready::Prefetched;
use crate::core::keys::Keys;
use crate::core::suspicion::Guard;
use crate::core::timing::test_t0;
use crate::edge::grpc::PingFailure;
use crate::edge::grpc::PingReport;
use crate::edge::redis::{Inheritance, ListRead, ReportsRead, Snapshot};

fn config(forget_after: Option<Duration>) -> CoreConfig {
    CoreConfig {
        failure_threshold: 1,
        guard: Guard {
            percent: 100,
            confirm_ms: 0,
            together_ms: 0,
        },
        replica_id: "r1".into(),
        forget_after,
        handoff: handoff::Settings {
            handoff_delay: Duration::from_secs(10),
        },
        keys: Keys::new("t"),
        units_key: "units".into(),
        reads_costs: false,
        join_delay: Duration::ZERO,
        generation_floor: 3,
        epoch: 2,
        server: Some(server()),
        recovery_gather: Duration::from_secs(3),
        quarantine: crate::core::quarantine::QuarantineRule::OFF,
    }
}

/// The Redis server the tests' holder writes on, and the state was written
/// on (no recovery).
fn server() -> handoff::RunId {
    handoff::RunId::parse(&"ab".repeat(20)).expect("a run id")
}

/// The clocks at `ms` into the test, the lease valid for a second more.
fn at(t0: Instant, ms: u64) -> Now {
    let at = t0 + Duration::from_millis(ms);
    Now {
        at,
        unix_ms: 1_000_000 + ms,
        acts_until: at + Duration::from_secs(1),
    }
}

fn timeout() -> StoreError {
    StoreError::Timeout {
        op: "read",
        timeout: Duration::from_secs(1),
    }
}

fn list(key: &str, entries: &[&str]) -> ListRead {
    ListRead {
        key: key.into(),
        version: 1,
        entries: Some(entries.iter().map(|e| e.as_bytes().to_vec()).collect()),
    }
}

fn no_reports() -> ReportsRead {
    ReportsRead {
        version: Some(1),
        content: Some(crate::edge::redis::ReportsContent {
            reports: Ok(Vec::new()),
            overrides: None,
            controls: None,
            quarantine: None,
        }),
    }
}

/// What Redis holds: `granted` at generation 7.
fn snapshot(members: &[&str], units: &[&str], granted: &Arc<MatchingTable>) -> Snapshot {
    Snapshot {
        groups: vec![list("svc", members)],
        units: list("units", units),
        stored_digest: Some(granted.digest().to_string()),
        stored_generation: 7,
        stored_table: None,
        reports: no_reports(),
    }
}

/// A view that knows `granted` to be Redis' (its last confirmed write),
/// with `live` live.
fn known_view(live: &[&str], granted: &Arc<MatchingTable>) -> HolderView {
    let mut v = live_view(live, granted);
    v.handoff.ledger.unchanged(Arc::clone(granted), 7);
    v.unsaved = Default::default();
    v
}

/// Takes the inputs read (`snapshot`) at `ms`, assembles their lists,
/// and returns what the cycle asks for next.
async fn lists_taken(core: &mut CycleCore, snapshot: Snapshot, t0: Instant, ms: u64) -> Ready {
    let Ready::AssembleLists {
        cache,
        groups,
        units,
    } = core.step(Outcome::Inputs(Ok(snapshot), None), at(t0, ms))
    else {
        panic!("then assembles the lists");
    };
    let lists = crate::coordinator::holder::lists::assemble(cache, groups, units).await;
    core.step(Outcome::Lists(lists), at(t0, ms + 1))
}

/// Drives a full cycle from its start to its round of pings.
async fn to_pings(core: &mut CycleCore, snapshot: Snapshot, t0: Instant) -> Vec<String> {
    let Ready::ReadInputs(_) = core.step(Outcome::Start, at(t0, 0)) else {
        panic!("a known view reads the inputs first");
    };
    let Ready::Ping { members } = lists_taken(core, snapshot, t0, 1).await else {
        panic!("then pings");
    };
    members
}

fn answered(members: &[String], failed: &[&str]) -> Vec<PingReport> {
    members
        .iter()
        .map(|m| PingReport {
            member: m.clone(),
            result: if failed.contains(&m.as_str()) {
                Err(PingFailure::Refused("refused".into()))
            } else {
                Ok(Duration::from_millis(1))
            },
            at: test_t0(),
            opened: None,
        })
        .collect()
}

/// Digests the next table if `ready` asks for it.
fn digested(core: &mut CycleCore, ready: Ready, now: Now) -> Ready {
    match ready {
        Ready::Digest { table, history } => {
            let next = Arc::new(table);
            next.digest();
            let record = history.record(&next);
            core.step(Outcome::Digested(next, record), now)
        }
        other => other,
    }
}

fn finished(ready: Ready) -> Finished {
    match ready {
        Ready::Done(r) => match *r {
            Ok(f) => f,
            Err(e) => panic!("the cycle failed: {e}"),
        },
        Ready::ReadHeld => panic!("the cycle goes on: reads {{T}}:held"),
        Ready::RestoreReports { reports } => panic!("the cycle goes on: restores {reports:?}"),
        _ => panic!("the cycle goes on"),
    }
}

#[test]
fn a_new_holding_that_cannot_read_what_it_inherits_does_not_act() {
    let t0 = test_t0();
    let mut core = CycleCore::new(Kind::Full, config(None), None, Vec::new(), None);
    let Ready::ReadHolding {
        with_table: false, ..
    } = core.step(Outcome::Start, at(t0, 0))
    else {
        panic!("a new holding reads what the last holder left first");
    };
    match core.step(Outcome::Holding(Err(timeout()), None), at(t0, 1)) {
        Ready::Done(r) => assert!(matches!(*r, Err(CycleError::Unreadable(_)))),
        _ => panic!("it never goes on from an empty view"),
    }
}

/// What the last holder left: `a:1` live with the table's units,
/// `b:2` failing (per `liveness`), at generation 7.
fn inheritance(liveness: &[(&str, &str)]) -> Inheritance {
    Inheritance {
        table: None,
        version: 3,
        liveness: liveness
            .iter()
            .map(|(m, h)| (m.to_string(), h.to_string()))
            .collect(),
        suspects: Default::default(),
        unreadable_suspects: Vec::new(),
        generation: 7,
        table_generation: 7,
        server: Some(server()),
        transit_recorded: None,
        reports_recorded: None,
        deadline_recorded: None,
        transit: Vec::new(),
    }
}

/// A new holding's cycle through its inheritance to the lists.
async fn inherited_to_lists(core: &mut CycleCore, liveness: &[(&str, &str)]) -> Ready {
    let t0 = test_t0();
    let granted = table(&[("a:1", "u1,u2")]);
    let Ready::ReadHolding {
        with_table: false, ..
    } = core.step(Outcome::Start, at(t0, 0))
    else {
        panic!("a new holding reads what the last holder left first");
    };
    let Ready::ReadInputs(_) =
        core.step(Outcome::Holding(Ok(inheritance(liveness)), None), at(t0, 1))
    else {
        panic!("then its inputs");
    };
    let mut snap = snapshot(&["a:1", "b:2"], &["u1", "u2"], &granted);
    snap.stored_table = Some((*granted).clone());
    lists_taken(core, snap, t0, 2).await
}

#[tokio::test]
async fn a_new_holding_decides_on_the_inherited_liveness_and_asks_for_its_pings_next() {
    let t0 = test_t0();
    let mut core = CycleCore::new(Kind::Full, config(None), None, Vec::new(), None);
    let ready = inherited_to_lists(&mut core, &[("a:1", "1 0 0"), ("b:2", "1 3 900")]).await;
    // No round of its own: it plans on what it inherited, at once.
    let Ready::Solve { granted } = ready else {
        panic!("a new holding with a liveness to inherit pings nobody first");
    };
    assert_eq!(granted.rows().len(), 1);
    assert!(core.view().liveness.is_live("a:1"), "inherited live");
    assert!(!core.view().liveness.is_live("b:2"), "inherited failing");
    let mut ready = core.step(Outcome::Solved(Arc::clone(&granted)), at(t0, 4));
    ready = digested(&mut core, ready, at(t0, 4));
    if let Ready::Commit(plan) = ready {
        assert!(
            plan.table.is_none_or(|t| t.rows() == granted.rows()),
            "the same table: nothing is reshuffled"
        );
        let written = Committed::Written {
            generation: Some(8),
            version: 4,
        };
        ready = core.step(Outcome::Committed(Ok(written)), at(t0, 5));
    }
    let f = finished(ready);
    assert!(f.unverified, "the machine runs a full cycle at once");
    assert!(f.failures.is_empty() && f.transitions.is_empty());

    // Its next cycle pings everyone, and its own results count.
    let mut core = CycleCore::new(Kind::Full, config(None), Some(f.view), Vec::new(), None);
    let snap = snapshot(&["a:1", "b:2"], &["u1", "u2"], &granted);
    let members = to_pings(&mut core, snap, t0).await;
    assert_eq!(members, ["a:1", "b:2"]);
    core.step(Outcome::Pinged(answered(&members, &["a:1"])), at(t0, 6));
    assert!(!core.view().liveness.is_live("a:1"), "its own refusal");
    assert!(core.view().liveness.is_live("b:2"), "its own answer");
}

#[tokio::test]
async fn a_first_cycle_on_inherited_liveness_forgets_nobody() {
    let t0 = test_t0();
    let after = Some(Duration::from_millis(500));
    let mut core = CycleCore::new(Kind::Full, config(after), None, Vec::new(), None);
    // b:2 failing for long past -forget-after, by what was inherited.
    let ready = inherited_to_lists(&mut core, &[("a:1", "1 0 0"), ("b:2", "1 3 900")]).await;
    let Ready::Solve { granted } = ready else {
        panic!("decides on the inherited liveness");
    };
    let mut ready = core.step(Outcome::Solved(granted), at(t0, 4));
    ready = digested(&mut core, ready, at(t0, 4));
    if let Ready::Commit(_) = ready {
        let written = Committed::Written {
            generation: None,
            version: 4,
        };
        ready = core.step(Outcome::Committed(Ok(written)), at(t0, 5));
    }
    assert!(
        !matches!(ready, Ready::Forget { .. }),
        "its own pings decide first"
    );
    assert!(finished(ready).forgotten.is_empty());
}

#[test]
fn a_new_holding_reads_its_inputs_beside_its_inheritance() {
    let t0 = test_t0();
    let granted = table(&[("a:1", "u1")]);
    for matches in [true, false] {
        let mut core = CycleCore::new(Kind::Full, config(None), None, Vec::new(), None);
        let Ready::ReadHolding {
            with_table: false,
            inputs: Some(mut request),
        } = core.step(Outcome::Start, at(t0, 0))
        else {
            panic!("a new holding reads its inputs beside what it inherits");
        };
        if !matches {
            request.reports_since = Some(3);
        }
        let prefetched = Prefetched {
            request,
            inputs: Ok(snapshot(&["a:1"], &["u1"], &granted)),
            costs: None,
        };
        let ready = core.step(
            Outcome::Holding(
                Ok(inheritance(&[("a:1", "1 0 0")])),
                Some(Box::new(prefetched)),
            ),
            at(t0, 1),
        );
        if matches {
            assert!(matches!(ready, Ready::AssembleLists { .. }), "taken");
        } else {
            assert!(
                matches!(ready, Ready::ReadInputs(_)),
                "not what it would ask for: read again"
            );
        }
    }
}

#[tokio::test]
async fn a_new_holding_with_nobody_live_to_inherit_pings_first() {
    // A fresh fleet (nothing inherited), or every member failing: its
    // own round decides.
    for liveness in [&[][..], &[("a:1", "1 3 900")][..]] {
        let mut c = CycleCore::new(Kind::Full, config(None), None, Vec::new(), None);
        let Ready::Ping { members } = inherited_to_lists(&mut c, liveness).await else {
            panic!("nobody inherited live: it pings before it plans");
        };
        assert_eq!(members, ["a:1", "b:2"]);
    }
    // A resync (a write of unknown outcome) is not a new holding.
    let granted = table(&[("a:1", "u1")]);
    let mut view = known_view(&["a:1"], &granted);
    view.handoff.ledger.unknown(None);
    let mut core = CycleCore::new(Kind::Full, config(None), Some(view), Vec::new(), None);
    let t0 = test_t0();
    assert!(matches!(
        core.step(Outcome::Start, at(t0, 0)),
        Ready::ReadHolding {
            with_table: true,
            ..
        }
    ));
    let mut inh = inheritance(&[("a:1", "1 0 0")]);
    inh.table = Some((*granted).clone());
    let Ready::ReadInputs(_) = core.step(Outcome::Holding(Ok(inh), None), at(t0, 1)) else {
        panic!("then its inputs");
    };
    let snap = snapshot(&["a:1"], &["u1"], &granted);
    assert!(
        matches!(
            lists_taken(&mut core, snap, t0, 2).await,
            Ready::Ping { .. }
        ),
        "a resync pings as every full cycle does"
    );
}

#[test]
fn a_stale_view_reads_redis_again_with_the_table() {
    let t0 = test_t0();
    let granted = table(&[("a:1", "u1")]);
    let mut view = known_view(&["a:1"], &granted);
    view.handoff.ledger.unknown(None);
    assert!(view.handoff.ledger.stale());
    let mut core = CycleCore::new(Kind::Full, config(None), Some(view), Vec::new(), None);
    assert!(matches!(
        core.step(Outcome::Start, at(t0, 0)),
        Ready::ReadHolding {
            with_table: true,
            ..
        }
    ));
}

#[test]
fn a_handoff_cycle_before_any_full_cycle_does_nothing() {
    let t0 = test_t0();
    let mut core = CycleCore::new(Kind::Handoff, config(None), None, Vec::new(), None);
    match core.step(Outcome::Start, at(t0, 0)) {
        Ready::Done(r) => assert!(matches!(*r, Err(CycleError::NotReady))),
        _ => panic!("nothing to hand off yet"),
    }
}

#[test]
fn a_failed_read_of_the_inputs_ends_the_cycle_without_a_write() {
    let t0 = test_t0();
    let granted = table(&[("a:1", "u1")]);
    let view = known_view(&["a:1"], &granted);
    let mut core = CycleCore::new(Kind::Full, config(None), Some(view), Vec::new(), None);
    assert!(matches!(
        core.step(Outcome::Start, at(t0, 0)),
        Ready::ReadInputs(_)
    ));
    match core.step(Outcome::Inputs(Err(timeout()), None), at(t0, 1)) {
        Ready::Done(r) => assert!(matches!(*r, Err(CycleError::Read(_)))),
        _ => panic!("no plan without the inputs"),
    }
}

#[tokio::test]
async fn an_idle_cycle_writes_nothing() {
    let t0 = test_t0();
    let granted = table(&[("a:1", "u1")]);
    let view = known_view(&["a:1"], &granted);
    let mut core = CycleCore::new(Kind::Full, config(None), Some(view), Vec::new(), None);
    let members = to_pings(&mut core, snapshot(&["a:1"], &["u1"], &granted), t0).await;
    assert_eq!(members, ["a:1"]);
    let Ready::Solve { granted: from } =
        core.step(Outcome::Pinged(answered(&members, &[])), at(t0, 3))
    else {
        panic!("then solves");
    };
    assert_eq!(from, granted, "from the table it knows Redis holds");
    let f = finished(core.step(Outcome::Solved(Arc::clone(&granted)), at(t0, 4)));
    assert!(matches!(f.write, Write::Unchanged));
    assert_eq!(f.generation_floor, 7, "raised to the stored generation");
}

/// A joining member: the cycle plans, digests and asks for a write.
async fn to_commit(core: &mut CycleCore, t0: Instant, lease_ms: u64) -> Ready {
    let granted = table(&[("a:1", "u1,u2")]);
    let members = to_pings(core, snapshot(&["a:1", "b:2"], &["u1", "u2"], &granted), t0).await;
    let Ready::Solve { .. } = core.step(Outcome::Pinged(answered(&members, &[])), at(t0, 3)) else {
        panic!("then solves");
    };
    let desired = table(&[("a:1", "u1"), ("b:2", "u2")]);
    let Ready::Digest {
        table: next,
        history,
    } = core.step(Outcome::Solved(desired), at(t0, 4))
    else {
        panic!("a changed table is digested");
    };
    let next = Arc::new(next);
    next.digest();
    let record = history.record(&next);
    let mut now = at(t0, 5);
    now.acts_until = t0 + Duration::from_millis(lease_ms);
    core.step(Outcome::Digested(next, record), now)
}

fn joining_core(forget_after: Option<Duration>) -> CycleCore {
    let granted = table(&[("a:1", "u1,u2")]);
    let mut view = known_view(&["a:1", "b:2"], &granted);
    view.handoff.reports.insert(
        "a:1".into(),
        handoff::MemberReport {
            applied: 7,
            draining: false,
            deadline: Duration::from_secs(1),
            weight: 1,
            client: None,
        },
    );
    CycleCore::new(
        Kind::Full,
        config(forget_after),
        Some(view),
        Vec::new(),
        None,
    )
}

/// Answers the cycle's write-back of a:1's report, which vanished from
/// Redis (the tests' reads hold no report) while it has a row.
fn restored(core: &mut CycleCore, ready: Ready, now: Now) -> Ready {
    match ready {
        Ready::RestoreReports { reports } => {
            assert_eq!(reports, [("a:1".to_string(), "7 0 1000 1".to_string())]);
            core.step(Outcome::Restored(Ok(())), now)
        }
        other => other,
    }
}

#[tokio::test]
async fn a_change_is_written_revoking_first_and_only_while_the_lease_lets_it() {
    let t0 = test_t0();
    let mut core = joining_core(None);
    let Ready::Commit(plan) = to_commit(&mut core, t0, 1_000).await else {
        panic!("a change is written");
    };
    let written = plan.table.expect("the table changed");
    assert_eq!(
        written.rows().get("b:2").map(String::as_str),
        Some(""),
        "u2 is revoked from a:1 before b:2 gets it"
    );
    assert!(plan.transit.is_some_and(|t| t.len() == 1));
    assert_eq!(plan.generation_floor, 7);

    let mut late = joining_core(None);
    let r = to_commit(&mut late, t0, 5).await;
    let f = finished(restored(&mut late, r, at(t0, 5)));
    assert!(
        matches!(f.write, Write::NotActing),
        "past the lease's bound nothing is written"
    );
}

#[tokio::test]
async fn a_write_of_unknown_outcome_makes_the_next_cycle_read_redis_first() {
    let t0 = test_t0();
    let mut core = joining_core(None);
    let Ready::Commit(_) = to_commit(&mut core, t0, 1_000).await else {
        panic!("a change is written");
    };
    let r = core.step(Outcome::Committed(Err(timeout())), at(t0, 6));
    let f = finished(restored(&mut core, r, at(t0, 6)));
    assert!(matches!(f.write, Write::Unknown(_)));
    assert!(f.view.handoff.ledger.stale());
    assert!(f.generation_floor > 7, "its generation is never reused");
    let mut next = CycleCore::new(Kind::Full, config(None), Some(f.view), Vec::new(), None);
    assert!(matches!(
        next.step(Outcome::Start, at(t0, 7)),
        Ready::ReadHolding {
            with_table: true,
            ..
        }
    ));
}

#[tokio::test]
async fn a_confirmed_write_is_what_the_next_plan_starts_from() {
    let t0 = test_t0();
    let mut core = joining_core(None);
    let Ready::Commit(plan) = to_commit(&mut core, t0, 1_000).await else {
        panic!("a change is written");
    };
    let written = plan.table.expect("the table changed");
    let r = core.step(
        Outcome::Committed(Ok(Committed::Written {
            generation: Some(8),
            version: 2,
        })),
        at(t0, 6),
    );
    let f = finished(restored(&mut core, r, at(t0, 6)));
    assert!(matches!(
        f.write,
        Write::Written {
            generation: Some(8)
        }
    ));
    assert!(!f.view.handoff.ledger.stale());
    assert_eq!(f.view.known_granted(Some(written.digest())), Some(written));
    assert_eq!(core.take_note().and_then(|n| n.revoked_at), Some(8));
}

/// A cycle under `-forget-after` in which b:2 failed long ago and c:3
/// joins, up to the write of c:3's new row.
async fn forgetting_core(t0: Instant) -> CycleCore {
    let granted = table(&[("a:1", "u1,u2")]);
    let after = Some(Duration::from_millis(500));
    let mut view = known_view(&["a:1", "c:3"], &granted);
    view.liveness
        .observe([("b:2", Err("refused"))], ["a:1", "b:2", "c:3"], 0);
    view.unsaved = Default::default();
    let mut core = CycleCore::new(Kind::Full, config(after), Some(view), Vec::new(), None);
    let members = to_pings(
        &mut core,
        snapshot(&["a:1", "b:2", "c:3"], &["u1", "u2"], &granted),
        t0,
    )
    .await;
    let Ready::Solve { .. } = core.step(Outcome::Pinged(answered(&members, &["b:2"])), at(t0, 3))
    else {
        panic!("then solves");
    };
    let r = core.step(Outcome::Solved(granted), at(t0, 4));
    let Ready::Commit(_) = digested(&mut core, r, at(t0, 4)) else {
        panic!("c:3's new row is written");
    };
    core
}

#[tokio::test]
async fn forget_after_waits_for_a_settled_write() {
    let t0 = test_t0();
    let mut core = forgetting_core(t0).await;
    let written = Outcome::Committed(Ok(Committed::Written {
        generation: None,
        version: 2,
    }));
    match core.step(written, at(t0, 5)) {
        Ready::Forget { pairs } => assert_eq!(pairs, [("svc".to_string(), b"b:2".to_vec())]),
        _ => panic!("a member failing past -forget-after is forgotten"),
    }
    let f = finished(core.step(
        Outcome::Forgotten(Ok(vec![("svc".into(), b"b:2".to_vec())])),
        at(t0, 6),
    ));
    assert_eq!(f.forgotten, [("\"b:2\"".to_string(), "svc".to_string())]);

    // The same cycle whose write's outcome is unknown forgets nobody.
    let mut core = forgetting_core(t0).await;
    let f = finished(core.step(Outcome::Committed(Err(timeout())), at(t0, 5)));
    assert!(f.forgotten.is_empty());
}

/// A new holding whose inherited state was written on another Redis server
/// (a failover or a restart since) recovers: its first cycle asks for a
/// full cycle at once (whose pings name the recovery), reads the members'
/// statements and plans nothing during the gathering; then it plans with
/// them, numbered above every generation a member stated, and a confirmed
/// write ends the recovery.
#[tokio::test]
async fn a_new_holding_on_another_server_recovers_before_it_plans() {
    let t0 = test_t0();
    let mut config = config(None);
    config.server = handoff::RunId::parse(&"cd".repeat(20));
    let gather = config.recovery_gather;
    let mut core = CycleCore::new(Kind::Full, config.clone(), None, Vec::new(), None);
    // The inherited liveness: a:1 live, b:2 failing.
    let ready = inherited_to_lists(&mut core, &[("a:1", "1 0 0"), ("b:2", "1 3 900")]).await;
    let tag = core
        .view()
        .handoff
        .recovery
        .as_ref()
        .expect("a recovery began")
        .tag;
    assert_eq!(tag.epoch, config.epoch);
    assert_eq!(core.ping_view().recovery, Some(tag), "pings name it");
    let Ready::ReadHeld = ready else {
        panic!("a recovery reads the members' statements first");
    };
    let stated = |units: &str| format!("{} 12 {units}", tag.encode());
    let ready = core.step(
        Outcome::Held(Ok(vec![("a:1".into(), stated("u1=7"))])),
        at(t0, 3),
    );
    let Ready::Solve { granted } = ready else {
        panic!("then solves");
    };
    let ready = core.step(Outcome::Solved(Arc::clone(&granted)), at(t0, 4));
    let f = finished(ready);
    assert!(matches!(f.write, Write::Recovering), "nothing planned yet");
    assert!(f.unverified, "a full cycle at once");
    assert!(f.view.handoff.last.next_release.is_some());

    // After the gathering time: planned with the statements. b:2 said
    // nothing: u2 (in no statement) waits for it; the table is written
    // above generation 12 (a:1's).
    let later = gather.as_millis() as u64 + 10;
    let mut core = CycleCore::new(Kind::Full, config, Some(f.view), Vec::new(), None);
    let members = to_pings(
        &mut core,
        snapshot(&["a:1", "b:2"], &["u1", "u2"], &table(&[("a:1", "u1,u2")])),
        t0,
    )
    .await;
    // b:2 does not answer (hung: not proven gone, and it may speak the
    // protocol).
    let mut pinged = answered(&members, &[]);
    for r in pinged.iter_mut().filter(|r| r.member == "b:2") {
        r.result = Err(PingFailure::Timeout);
    }
    let ready = core.step(Outcome::Pinged(pinged), at(t0, later));
    let Ready::ReadHeld = ready else {
        panic!("each cycle of a recovery reads the statements");
    };
    let ready = core.step(
        Outcome::Held(Ok(vec![("a:1".into(), stated("u1=7"))])),
        at(t0, later),
    );
    let ready = match ready {
        Ready::ReadTable => core.step(
            Outcome::Table(Ok((*table(&[("a:1", "u1,u2")])).clone())),
            at(t0, later),
        ),
        other => other,
    };
    let Ready::Solve { granted } = ready else {
        panic!("then solves");
    };
    let ready = core.step(Outcome::Solved(granted), at(t0, later));
    let Ready::Commit(plan) = digested(&mut core, ready, at(t0, later)) else {
        panic!("the recovery's plan is written");
    };
    assert!(
        plan.generation_floor >= 12,
        "numbered above what a:1 stated"
    );
    let transit: Vec<&(String, String)> = plan.transit.as_ref().expect("transit").iter().collect();
    assert!(
        transit
            .iter()
            .any(|(f, v)| f.starts_with("u2,") && v.contains("b:2")),
        "u2 waits for b:2, which stated nothing: {transit:?}"
    );
    let ready = core.step(
        Outcome::Committed(Ok(Committed::Written {
            generation: Some(13),
            version: 4,
        })),
        at(t0, later + 1),
    );
    let f = finished(restored_any(&mut core, ready, at(t0, later + 1)));
    assert!(f.view.handoff.recovery.is_none(), "the recovery is over");
}

/// Answers a write-back of vanished reports, whichever.
fn restored_any(core: &mut CycleCore, ready: Ready, now: Now) -> Ready {
    match ready {
        Ready::RestoreReports { .. } => core.step(Outcome::Restored(Ok(())), now),
        other => other,
    }
}

/// Seed 390 of the simulation: Redis failed over to a replica that lagged
/// and lost generations this holding was confirmed to write. A member's
/// fresh process read the older table and started units under a lower
/// token than the last owner's. The pings ask for the highest confirmed
/// generation, and the next write numbers above it though the table is
/// unchanged.
#[tokio::test]
async fn a_confirmed_write_redis_lost_is_what_the_pings_ask_for_and_written_again() {
    let t0 = test_t0();
    let granted = table(&[("a:1", "u1")]);
    let mut view = known_view(&["a:1"], &granted);
    view.confirmed_generation = 9;
    let mut core = CycleCore::new(Kind::Full, config(None), Some(view), Vec::new(), None);
    let members = to_pings(&mut core, snapshot(&["a:1"], &["u1"], &granted), t0).await;
    assert_eq!(core.ping_view().generation, 9, "not Redis' 7");
    let Ready::Solve { granted: from } =
        core.step(Outcome::Pinged(answered(&members, &[])), at(t0, 2))
    else {
        panic!("then solves");
    };
    let ready = core.step(Outcome::Solved(Arc::clone(&from)), at(t0, 3));
    let Ready::Commit(plan) = digested(&mut core, ready, at(t0, 3)) else {
        panic!("a write, numbered above the lost ones");
    };
    assert!(plan.table.is_some_and(|t| t.rows() == granted.rows()));
    assert!(plan.generation_floor >= 9);
}
