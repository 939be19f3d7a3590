//! The holder's side of the safe handoff, against a real Redis and real gRPC
//! pings. The members here are plain ping servers ([`FlakyWorker`]); the test
//! plays their protocol part by hand (reports in `{T}:members`, `PUBLISH
//! {T}:acked`), so that every step of a move can be observed and held.
//! (The `Member` library's side is tested in `member_handoff.rs`.)

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use distributor::core::handoff::{
    MemberReport, RedisConnection, RunId, Transit, parse_transit_field,
};
use distributor::core::table::decode_row;
use std::time::Instant;

use crate::support::*;

/// A long deadline: moves of these members wait for their acknowledgement,
/// never for time.
const PATIENT: Duration = Duration::from_secs(120);

/// Writes a member's report and publishes the `{T}:acked` hint, as a member would.
pub(crate) async fn report(
    fleet: &Fleet,
    member: &str,
    applied: u64,
    draining: bool,
    deadline: Duration,
) {
    report_naming(fleet, member, applied, draining, deadline, None).await;
}

/// [`report`], naming `client` as the Redis connection the member reads on:
/// then a refusal of its address releases its units only once Redis has no
/// such connection either.
pub(crate) async fn report_naming(
    fleet: &Fleet,
    member: &str,
    applied: u64,
    draining: bool,
    deadline: Duration,
    client: Option<RedisConnection>,
) {
    let r = MemberReport {
        applied,
        draining,
        deadline,
        weight: 1,
        client,
    };
    let k = keys();
    let _: i64 = fleet
        .redis
        .cmd(&["HSET", &k.members, member, &r.encode()])
        .await;
    let _: i64 = fleet
        .redis
        .cmd(&["PUBLISH", &k.acked_channel, member])
        .await;
}

/// A Redis connection of the test's own, named as `Member` names the one it
/// reads its row on (client id and run id, asked on it in one transaction),
/// to stand for the connection of a hand-played member.
pub(crate) async fn reading_connection(
    fleet: &Fleet,
) -> (redis::aio::MultiplexedConnection, RedisConnection) {
    let mut c = fleet.redis.conn().await;
    let (id, info): (u64, String) = redis::pipe()
        .atomic()
        .cmd("CLIENT")
        .arg("ID")
        .cmd("INFO")
        .arg("server")
        .query_async(&mut c)
        .await
        .unwrap();
    let server = RunId::from_info(&info).expect("a run id");
    (c, RedisConnection::on(id, server))
}

/// `{T}:transit` as (unit → entry).
async fn transit(fleet: &Fleet) -> BTreeMap<String, Transit> {
    let raw: BTreeMap<String, String> = fleet.redis.cmd(&["HGETALL", &keys().transit]).await;
    raw.iter()
        .map(|(f, v)| {
            let (_, unit) = parse_transit_field(f).expect("a transit field");
            (
                unit.to_string(),
                Transit::decode(v, std::time::Instant::now()).expect("a transit value"),
            )
        })
        .collect()
}

/// Table, transit and generation read together (one MULTI), checked: no unit
/// in two rows, none in a row and in transit, and rows plus transit hold
/// every unit exactly once.
async fn snapshot(
    fleet: &Fleet,
    units: &[String],
) -> (BTreeMap<String, String>, BTreeMap<String, Transit>, u64) {
    let k = keys();
    let (rows, raw, g): (
        BTreeMap<String, String>,
        BTreeMap<String, String>,
        Option<u64>,
    ) = fleet
        .redis
        .multi(&[
            &["HGETALL", &k.table],
            &["HGETALL", &k.transit],
            &["HGET", &k.meta, "generation"],
        ])
        .await;
    let transit: BTreeMap<String, Transit> = raw
        .iter()
        .map(|(f, v)| {
            let (_, unit) = parse_transit_field(f).unwrap();
            (
                unit.to_string(),
                Transit::decode(v, Instant::now()).unwrap(),
            )
        })
        .collect();
    let mut seen = BTreeSet::new();
    for (m, row) in &rows {
        for u in decode_row(row) {
            assert!(seen.insert(u.to_string()), "unit {u} in two rows ({m})");
            assert!(
                !transit.contains_key(u),
                "unit {u} in {m}'s row and in transit"
            );
        }
    }
    let all: BTreeSet<String> = seen.into_iter().chain(transit.keys().cloned()).collect();
    let want: BTreeSet<String> = units.iter().cloned().collect();
    assert_eq!(all, want, "rows and transit hold every unit once");
    (rows, transit, g.unwrap_or(0))
}

/// Two workers that acknowledge, converged; returns them and the generation.
async fn two_acking(
    units: &[String],
    tune: impl FnOnce(&mut Fleet),
) -> (Fleet, Vec<FlakyWorker>, u64) {
    let mut fleet = Fleet::new(RedisServer::start());
    tune(&mut fleet);
    fleet.set_units(units).await;
    let workers = vec![
        FlakyWorker::start(&fleet).await,
        FlakyWorker::start(&fleet).await,
    ];
    for w in &workers {
        report(&fleet, &w.addr, 0, false, PATIENT).await;
    }
    fleet.add_replica();
    let ids: Vec<String> = workers.iter().map(|w| w.addr.clone()).collect();
    // A first cycle that heard from one worker only within its grace (a
    // loaded machine) places every unit there, then moves half: these
    // workers acknowledge each revocation, as their name says.
    let acking = async {
        let mut acked = 0;
        loop {
            let in_transit: u64 = fleet.redis.cmd(&["HLEN", &keys().transit]).await;
            let g = fleet.generation().await;
            if in_transit > 0 && g > acked {
                for w in &workers {
                    report(&fleet, &w.addr, g, false, PATIENT).await;
                }
                acked = g;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    tokio::select! {
        _ = fleet.wait_for_table_with(units, &ids, Duration::from_secs(10)) => {}
        () = acking => unreachable!("acknowledges until the table converges"),
    }
    let g = fleet.generation().await;
    (fleet, workers, g)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_move_is_revoked_first_and_granted_after_the_acknowledgement() {
    let units = units(24);
    let (fleet, mut workers, _) = two_acking(&units, |_| {}).await;
    // A third worker joins: the ring moves some units to it.
    let w2 = FlakyWorker::start(&fleet).await;
    report(&fleet, &w2.addr, 0, false, PATIENT).await;
    wait_for("the revocation", Duration::from_secs(10), || async {
        let (rows, t, _) = snapshot(&fleet, &units).await;
        !t.is_empty() && rows.get(&w2.addr).is_some_and(|r| r.is_empty())
    })
    .await;
    let (_, moving, g) = snapshot(&fleet, &units).await;
    let revoked_at = moving.values().map(|t| t.revoked_at).max().unwrap();
    let (a, b) = (workers[0].addr.clone(), workers[1].addr.clone());
    let ids = vec![a.clone(), b.clone(), w2.addr.clone()];
    for (u, t) in &moving {
        assert!(
            t.to.as_ref().is_some_and(|to| ids.contains(to)),
            "{u}: {t:?}"
        );
        assert!(t.revoked_at > 0 && t.revoked_at <= g, "{u}: {t:?}");
    }
    // Without acknowledgements nothing is granted, however long it takes
    // (observed for a second: ten poll intervals).
    let until = Instant::now() + Duration::from_secs(1);
    while Instant::now() < until {
        let (rows, t, _) = snapshot(&fleet, &units).await;
        assert_eq!(t.len(), moving.len(), "granted without an acknowledgement");
        assert_eq!(rows.get(&w2.addr).map(String::as_str), Some(""));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // One of the two acknowledges: only the units it held move on.
    let from_a: BTreeSet<&String> = moving
        .iter()
        .filter(|(_, t)| t.from.contains_key(&a))
        .map(|(u, _)| u)
        .collect();
    assert!(!from_a.is_empty(), "{moving:?}");
    let acked = Instant::now();
    report(&fleet, &a, revoked_at, false, PATIENT).await;
    wait_for("a's units granted", Duration::from_secs(5), || async {
        let (_, t, _) = snapshot(&fleet, &units).await;
        from_a.iter().all(|u| !t.contains_key(*u))
    })
    .await;
    eprintln!("acknowledgement to grant: {:?}", acked.elapsed());
    let (rows, t, _) = snapshot(&fleet, &units).await;
    assert!(t.values().all(|t| t.from.contains_key(&b)), "{t:?}");
    for u in &from_a {
        let to = moving[*u].to.as_ref().unwrap();
        assert!(
            decode_row(&rows[to]).contains(&u.as_str()),
            "{u} not granted to {to}"
        );
    }
    report(&fleet, &b, revoked_at, false, PATIENT).await;
    fleet
        .wait_for_table_with(&units, &ids, Duration::from_secs(5))
        .await;
    assert!(transit(&fleet).await.is_empty());
    workers.push(w2);
    fleet.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_that_does_not_acknowledge_gets_the_handoff_delay() {
    const DELAY: Duration = Duration::from_millis(1500);
    let units = units(24);
    let mut fleet = Fleet::new(RedisServer::start());
    fleet.config.handoff_delay = DELAY;
    fleet.set_units(&units).await;
    // Old workers: no reports.
    let workers = [
        FlakyWorker::start(&fleet).await,
        FlakyWorker::start(&fleet).await,
    ];
    fleet.add_replica();
    let ids: Vec<String> = workers.iter().map(|w| w.addr.clone()).collect();
    fleet
        .wait_for_table_with(&units, &ids, Duration::from_secs(10))
        .await;
    let w2 = FlakyWorker::start(&fleet).await;
    wait_for("the revocation", Duration::from_secs(10), || async {
        !snapshot(&fleet, &units).await.1.is_empty()
    })
    .await;
    let seen = Instant::now();
    let mut ids = ids;
    ids.push(w2.addr.clone());
    loop {
        let (_, t, _) = snapshot(&fleet, &units).await;
        if t.is_empty() {
            break;
        }
        assert!(seen.elapsed() < DELAY * 4, "never granted");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Seen in transit after the revoking write returned to the holder, so
    // at most a write's latency early.
    assert!(
        seen.elapsed() >= DELAY - Duration::from_millis(100),
        "granted {:?} after the revocation, before the {DELAY:?} handoff delay",
        seen.elapsed()
    );
    fleet
        .wait_for_table_with(&units, &ids, Duration::from_secs(5))
        .await;
    fleet.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_worker_hands_off_at_once() {
    let units = units(24);
    let (fleet, mut workers, g) = two_acking(&units, |_| {}).await;
    let (conn, client) = reading_connection(&fleet).await;
    report_naming(&fleet, &workers[1].addr, g, false, PATIENT, Some(client)).await;
    // Its process is gone: nothing listens, and Redis has its connection no
    // more. No acknowledgement can come and none is needed (its deadline is
    // two minutes).
    drop(conn);
    workers[1].kill().await;
    let survivor = vec![workers[0].addr.clone()];
    fleet
        .wait_for_table_with(&units, &survivor, Duration::from_secs(5))
        .await;
    assert!(transit(&fleet).await.is_empty());
    fleet.shutdown().await;
}

/// A member that stops without draining (`Member::shutdown`, a drain that
/// timed out) deregisters: it leaves its list and removes its report. No
/// cycle pings it as a member any more, but the holder pings it while it
/// owes revocations: a refused connection moves its units at once, not
/// after `-handoff-delay`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_that_deregistered_without_draining_hands_off_when_refused() {
    let units = units(24);
    let (fleet, mut workers, _) = two_acking(&units, |f| {
        f.config.handoff_delay = Duration::from_secs(60);
    })
    .await;
    let gone = workers[1].addr.clone();
    // It names its reading connection, as `Member` does: a member that
    // removed its report is waited for by the report the holder knew, and
    // its refusal releases only with Redis' word that the connection is gone.
    let (conn, client) = reading_connection(&fleet).await;
    let g = fleet.generation().await;
    let h = fleet.wait_for_holder().await;
    let cycles = fleet.statuses()[h].cycles;
    report_naming(&fleet, &gone, g, false, PATIENT, Some(client)).await;
    // Two full cycles later the holder read it.
    wait_for(
        "the holder reads the report",
        Duration::from_secs(5),
        || async { fleet.statuses()[h].cycles >= cycles + 2 },
    )
    .await;
    let k = keys();
    let _: i64 = fleet.redis.cmd(&["LREM", SERVICES, "0", &gone]).await;
    let _: i64 = fleet.redis.cmd(&["HDEL", &k.members, &gone]).await;
    drop(conn);
    workers[1].kill().await;
    let survivor = vec![workers[0].addr.clone()];
    fleet
        .wait_for_table_with(&units, &survivor, Duration::from_secs(10))
        .await;
    assert!(transit(&fleet).await.is_empty());
    fleet.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_worker_is_released_by_its_deadline() {
    let units = units(12);
    let (fleet, workers, _) = two_acking(&units, |_| {}).await;
    // A short deadline for worker 1, then it hangs (pings fail, not refused).
    let deadline = Duration::from_millis(800);
    report(
        &fleet,
        &workers[1].addr,
        fleet.generation().await,
        false,
        deadline,
    )
    .await;
    let hung = Instant::now();
    workers[1].set_healthy(false);
    wait_for("the revocation", Duration::from_secs(5), || async {
        !snapshot(&fleet, &units).await.1.is_empty()
    })
    .await;
    let survivor = vec![workers[0].addr.clone()];
    fleet
        .wait_for_table_with(&units, &survivor, Duration::from_secs(10))
        .await;
    // The release comes no earlier than its deadline (with drift margin)
    // after the write that revoked its units, which came after it hung.
    assert!(
        hung.elapsed() >= deadline,
        "released {:?} after the hang, before its {deadline:?} deadline",
        hung.elapsed()
    );
    fleet.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_holder_continues_a_handoff_and_never_restarts_it() {
    let units = units(24);
    let (mut fleet, workers, _) = two_acking(&units, |f| {
        f.add_replica();
    })
    .await;
    let w2 = FlakyWorker::start(&fleet).await;
    report(&fleet, &w2.addr, 0, false, PATIENT).await;
    wait_for("the revocation", Duration::from_secs(10), || async {
        !snapshot(&fleet, &units).await.1.is_empty()
    })
    .await;
    let (_, before, _) = snapshot(&fleet, &units).await;
    // The holder goes; the other replica takes over mid-handoff.
    let h = fleet.wait_for_holder().await;
    let old_epoch = fleet.statuses()[h].epoch;
    fleet.replicas[h].take().unwrap().shutdown().await;
    wait_for("a new holder", Duration::from_secs(10), || async {
        fleet
            .statuses()
            .iter()
            .any(|s| s.role == distributor::Role::Holder && s.epoch > old_epoch)
    })
    .await;
    // It keeps the same units in transit, revoked at the same generation.
    let until = Instant::now() + Duration::from_millis(800);
    while Instant::now() < until {
        let (_, t, _) = snapshot(&fleet, &units).await;
        assert_eq!(
            t.iter().map(|(u, t)| (u, t.revoked_at)).collect::<Vec<_>>(),
            before
                .iter()
                .map(|(u, t)| (u, t.revoked_at))
                .collect::<Vec<_>>(),
            "the new holder changed the handoff"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let g = before.values().map(|t| t.revoked_at).max().unwrap();
    for w in &workers {
        report(&fleet, &w.addr, g, false, PATIENT).await;
    }
    let ids = vec![
        workers[0].addr.clone(),
        workers[1].addr.clone(),
        w2.addr.clone(),
    ];
    fleet
        .wait_for_table_with(&units, &ids, Duration::from_secs(5))
        .await;
    fleet.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_draining_worker_is_emptied_with_the_same_handoff() {
    let units = units(16);
    let (fleet, workers, g) = two_acking(&units, |_| {}).await;
    let (a, b) = (workers[0].addr.clone(), workers[1].addr.clone());
    report(&fleet, &b, g, true, PATIENT).await;
    // Its units are revoked (its row stays, empty: it is live).
    wait_for("the revocation", Duration::from_secs(5), || async {
        let (rows, t, _) = snapshot(&fleet, &units).await;
        !t.is_empty() && rows.get(&b).is_some_and(|r| r.is_empty())
    })
    .await;
    let (_, t, _) = snapshot(&fleet, &units).await;
    let revoked_at = t.values().map(|t| t.revoked_at).max().unwrap();
    report(&fleet, &b, revoked_at, true, PATIENT).await;
    wait_for(
        "everything on the other worker",
        Duration::from_secs(5),
        || async {
            let (rows, t, _) = snapshot(&fleet, &units).await;
            t.is_empty()
                && rows.get(&b).is_some_and(|r| r.is_empty())
                && rows
                    .get(&a)
                    .is_some_and(|r| decode_row(r).len() == units.len())
        },
    )
    .await;
    fleet.shutdown().await;
}

/// A drained member deregisters (`LREM`, `HDEL` of its report: protocol
/// step 6). Handoff cycles plan with the lists of the last full cycle, where
/// it is still listed: without its report it must not look like a member
/// that does not acknowledge and get units back (found by chaos scenario
/// 11, a rolling restart of the workers).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drained_member_that_deregistered_gets_no_units_back() {
    let units = units(16);
    // Full cycles rarely: what happens between them is handoff cycles.
    let (fleet, workers, g) = two_acking(&units, |f| {
        f.config.poll_interval = Duration::from_secs(4);
    })
    .await;
    let (a, b) = (workers[0].addr.clone(), workers[1].addr.clone());
    report(&fleet, &b, g, true, PATIENT).await;
    wait_for("the revocation", Duration::from_secs(5), || async {
        let (rows, t, _) = snapshot(&fleet, &units).await;
        !t.is_empty() && rows.get(&b).is_some_and(|r| r.is_empty())
    })
    .await;
    let (_, t, _) = snapshot(&fleet, &units).await;
    let revoked_at = t.values().map(|t| t.revoked_at).max().unwrap();
    report(&fleet, &b, revoked_at, true, PATIENT).await;
    let all_on_a = || async {
        let (rows, t, _) = snapshot(&fleet, &units).await;
        t.is_empty()
            && rows.get(&b).is_none_or(|r| r.is_empty())
            && rows
                .get(&a)
                .is_some_and(|r| decode_row(r).len() == units.len())
    };
    wait_for("everything on a", Duration::from_secs(5), all_on_a).await;
    // b deregisters, as its drain ends; a's next report is a hint that
    // makes the holder plan again before its next full cycle.
    let k = keys();
    let _: i64 = fleet.redis.cmd(&["LREM", SERVICES, "0", &b]).await;
    let _: i64 = fleet.redis.cmd(&["HDEL", &k.members, &b]).await;
    let h = fleet.wait_for_holder().await;
    let handoff_cycles = || {
        let samples = parse_metrics(&fleet.replicas[h].as_ref().unwrap().metrics().encode());
        metric(
            &samples,
            "distributor_cycles_total",
            &[("outcome", "handoff")],
        )
        .unwrap_or(0.0)
    };
    let before = handoff_cycles();
    report(&fleet, &a, fleet.generation().await, false, PATIENT).await;
    wait_for("a handoff cycle", Duration::from_secs(3), || async {
        handoff_cycles() > before
    })
    .await;
    assert!(all_on_a().await, "{:?}", snapshot(&fleet, &units).await);
    fleet.shutdown().await;
}

/// Reports are written by members: garbage, a hostile deadline or a key of
/// the wrong type never stop the holder, and never shorten a wait (issue 20,
/// finding 4). While the hash cannot be read, a member whose report the
/// holder knew is waited for by that report (a member cannot write a new one
/// meanwhile, so it acquired nothing since); one it never knew, the longest
/// any member may ask for, not the handoff delay. An acknowledgement still
/// releases at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreadable_reports_never_shorten_a_wait() {
    const DEADLINE: Duration = Duration::from_millis(1000);
    let wait = DEADLINE + DEADLINE / 20 + Duration::from_millis(100);
    let units = units(12);
    let (mut fleet, workers, _) = two_acking(&units, |f| {
        f.config.handoff_delay = Duration::from_millis(300)
    })
    .await;
    for w in &workers {
        report(&fleet, &w.addr, 0, false, DEADLINE).await;
    }
    // A worker the holder never knows a report of, with units.
    let unknown = FlakyWorker::start(&fleet).await;
    let mut ids: Vec<String> = workers.iter().map(|w| w.addr.clone()).collect();
    ids.push(unknown.addr.clone());
    fleet
        .wait_for_table_with(&units, &ids, Duration::from_secs(10))
        .await;
    let k = keys();
    let _: i64 = fleet
        .redis
        .cmd(&["HSET", &k.members, &workers[0].addr, "garbage \u{1}"])
        .await;
    let _: () = fleet.redis.cmd(&["DEL", &k.members]).await;
    let _: () = fleet.redis.cmd(&["SET", &k.members, "not a hash"]).await;
    let h = fleet.wait_for_holder().await;
    // Worker 1 stops answering: its units wait its known deadline, not the
    // handoff delay.
    workers[1].set_healthy(false);
    let failed = Instant::now();
    wait_for("the revocation", Duration::from_secs(5), || async {
        !snapshot(&fleet, &units).await.1.is_empty()
    })
    .await;
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert!(
        !snapshot(&fleet, &units).await.1.is_empty(),
        "released after the handoff delay, before the member's deadline"
    );
    // Only worker 1's units: the ring may also move one of the unknown
    // worker's units to worker 0, and that one waits the longest.
    let gone = workers[1].addr.clone();
    wait_for("worker 1's units granted", wait * 4, || async {
        let (rows, moving, _) = snapshot(&fleet, &units).await;
        !rows.contains_key(&gone) && moving.values().all(|t| !t.from.contains_key(&gone))
    })
    .await;
    assert!(failed.elapsed() >= wait, "released before its wait");
    let (_, moving, _) = snapshot(&fleet, &units).await;
    assert!(
        moving.values().all(|t| t.from.contains_key(&unknown.addr)),
        "only the unknown worker's units may still wait: {moving:?}"
    );
    // The unknown worker stops answering: its units wait the longest.
    unknown.set_healthy(false);
    wait_for("the revocation", Duration::from_secs(5), || async {
        !snapshot(&fleet, &units).await.1.is_empty()
    })
    .await;
    tokio::time::sleep(wait * 2).await;
    let (_, moving, revoked_at) = snapshot(&fleet, &units).await;
    assert!(!moving.is_empty(), "released before the longest wait");
    assert!(
        fleet.statuses()[h].last_error.is_none(),
        "{:?}",
        fleet.statuses()[h]
    );
    // Readable again, and acknowledged: they move.
    let _: () = fleet.redis.cmd(&["DEL", &k.members]).await;
    report(&fleet, &unknown.addr, revoked_at, false, DEADLINE).await;
    fleet
        .wait_for_table_with(
            &units,
            &workers[..1]
                .iter()
                .map(|w| w.addr.clone())
                .collect::<Vec<_>>(),
            Duration::from_secs(10),
        )
        .await;
    fleet.replicas[h].take();
    fleet.shutdown().await;
}

/// `-forget-after` removes a long-failing member's report and measured
/// loads with its list entry (fenced, in the same script), so that
/// `{T}:members` and `{T}:loads` do not grow with every address a worker
/// ever had.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forgotten_member_takes_its_report_and_loads_along() {
    let units = units(6);
    let (mut fleet, mut workers, _) = two_acking(&units, |f| {
        f.config.forget_after = Some(Duration::from_millis(300));
    })
    .await;
    let w2 = FlakyWorker::start(&fleet).await;
    report(&fleet, &w2.addr, 0, false, PATIENT).await;
    workers.push(w2);
    let k = keys();
    for w in &workers {
        let value = format!("{} ", distributor::unix_ms());
        let (): () = fleet.redis.cmd(&["HSET", &k.loads, &w.addr, &value]).await;
    }
    let gone = workers[2].addr.clone();
    workers[2].kill().await;
    wait_for(
        "the member, its report and its loads forgotten",
        Duration::from_secs(10),
        || async {
            let listed: Vec<String> = fleet.redis.cmd(&["LRANGE", SERVICES, "0", "-1"]).await;
            let report: Option<String> = fleet.redis.cmd(&["HGET", &k.members, &gone]).await;
            let loads: Option<String> = fleet.redis.cmd(&["HGET", &k.loads, &gone]).await;
            !listed.contains(&gone) && report.is_none() && loads.is_none()
        },
    )
    .await;
    // The others keep theirs.
    for w in &workers[..2] {
        let r: Option<String> = fleet.redis.cmd(&["HGET", &k.members, &w.addr]).await;
        assert!(r.is_some(), "{} lost its report", w.addr);
        let l: Option<String> = fleet.redis.cmd(&["HGET", &k.loads, &w.addr]).await;
        assert!(l.is_some(), "{} lost its loads", w.addr);
    }
    fleet.replicas.truncate(1);
    fleet.shutdown().await;
}

/// The table vanishes (a `DEL`, or Redis losing its data while the holder
/// keeps its lease) in the same instant as a member joins: the holder hands
/// off from what it wrote last, so the joiner's units still wait for their
/// owners' acknowledgements instead of being granted at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vanished_table_does_not_cut_a_handoff_short() {
    let units = units(24);
    let (fleet, workers, g) = two_acking(&units, |_| {}).await;
    let w2 = FlakyWorker::serve(Default::default()).await;
    w2.set_healthy(true);
    report(&fleet, &w2.addr, 0, false, PATIENT).await;
    let k = keys();
    let (): () = fleet
        .redis
        .multi(&[
            &["DEL", &k.table, &k.transit],
            &["RPUSH", SERVICES, &w2.addr],
        ])
        .await;
    wait_for("the revocation", Duration::from_secs(10), || async {
        let n: usize = fleet.redis.cmd(&["HLEN", &k.table]).await;
        n > 0 && !snapshot(&fleet, &units).await.1.is_empty()
    })
    .await;
    let (_, before, _) = snapshot(&fleet, &units).await;
    let until = Instant::now() + Duration::from_millis(800);
    while Instant::now() < until {
        let (rows, t, _) = snapshot(&fleet, &units).await;
        assert_eq!(
            t.keys().collect::<Vec<_>>(),
            before.keys().collect::<Vec<_>>()
        );
        assert_eq!(
            rows.get(&w2.addr).map(String::as_str),
            Some(""),
            "granted before any acknowledgement"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let g = before.values().map(|t| t.revoked_at).max().unwrap().max(g);
    for w in &workers {
        report(&fleet, &w.addr, g, false, PATIENT).await;
    }
    let ids = vec![
        workers[0].addr.clone(),
        workers[1].addr.clone(),
        w2.addr.clone(),
    ];
    fleet
        .wait_for_table_with(&units, &ids, Duration::from_secs(5))
        .await;
    fleet.shutdown().await;
}

/// `distributor status` shows units in transit, each member's applied
/// generation against the table's, and members draining; so does the
/// holder's status (which `/metrics` mirrors).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_and_metrics_show_the_handoff() {
    let units = units(24);
    let (fleet, workers, g) = two_acking(&units, |_| {}).await;
    let w2 = FlakyWorker::start(&fleet).await;
    report(&fleet, &w2.addr, g, false, PATIENT).await;
    wait_for("the revocation", Duration::from_secs(10), || async {
        !snapshot(&fleet, &units).await.1.is_empty()
    })
    .await;
    let (_, moving, generation) = snapshot(&fleet, &units).await;
    let status = |json: bool| {
        let args: &[&str] = if json {
            &["status", "--json"]
        } else {
            &["status"]
        };
        let out = cli(&fleet.redis.url(), args);
        assert!(out.status.success(), "{out:?}");
        String::from_utf8(out.stdout).unwrap()
    };
    let text = status(false);
    assert!(
        text.contains(&format!("in transit: {} units", moving.len())),
        "{text}"
    );
    // The joiner is behind and owes nothing; those that lose units owe.
    assert!(
        text.contains(&format!(
            "applied {g} (table at {generation}; owes nothing: "
        )),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "(table at {generation}; owes the acknowledgement of "
        )),
        "{text}"
    );
    let json: serde_json::Value = serde_json::from_str(&status(true)).unwrap();
    assert_eq!(json["in_transit"], moving.len());
    let h = fleet.wait_for_holder().await;
    let s = fleet.statuses()[h].handoff.clone();
    assert_eq!(s.in_transit, moving.len(), "{s:?}");
    assert_eq!(s.acknowledging, 3);
    // Draining shows too.
    report(&fleet, &workers[1].addr, generation, true, PATIENT).await;
    wait_for("draining in status", Duration::from_secs(5), || async {
        status(false).contains("draining")
    })
    .await;
    fleet.shutdown().await;
}

/// A worker killed and restarted on the same address while the holder's
/// write is held up. The holder's refusal came before the new process, which
/// then read its old row: the refusal proves nothing about it. Its units
/// must wait for its acknowledgement, not move in the write that revokes
/// them (found by `ownership_stress`, seed 358904: a restarted worker and
/// the new owners worked the same units for 80 ms).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_restarted_on_its_address_before_the_revoking_write_is_waited_for() {
    let units = units(24);
    let (fleet, mut workers, _) = two_acking(&units, |f| {
        // Only the close makes the holder look (no full cycle meanwhile),
        // and a lease that outlives the paused writes.
        f.config.poll_interval = Duration::from_secs(10);
        f.config.lease.ttl = Duration::from_secs(6);
        f.config.lease.renew_deadline = Duration::from_secs(4);
    })
    .await;
    let (addr, survivor) = (workers[1].addr.clone(), workers[0].addr.clone());
    let (conn, client) = reading_connection(&fleet).await;
    let g = fleet.generation().await;
    report_naming(&fleet, &addr, g, false, PATIENT, Some(client)).await;
    let (rows, _, _) = snapshot(&fleet, &units).await;
    let held: BTreeSet<String> = decode_row(&rows[&addr])
        .into_iter()
        .map(str::to_string)
        .collect();
    assert!(!held.is_empty());
    let refusals = || {
        let samples = parse_metrics(&fleet.replicas[0].as_ref().unwrap().metrics().encode());
        metric(
            &samples,
            "distributor_member_connection_closes_total",
            &[("outcome", "refused")],
        )
        .unwrap_or(0.0)
    };
    let before = refusals();

    // Writes wait (reads go on) while the worker dies, the holder finds its
    // address refused, and a new process starts there and reads its row.
    let () = fleet.redis.cmd(&["CLIENT", "PAUSE", "3000", "WRITE"]).await;
    drop(conn);
    workers[1].kill().await;
    wait_for(
        "the holder's refused probe",
        Duration::from_secs(2),
        || async { refusals() > before },
    )
    .await;
    let restarted = FlakyWorker::restart_on(&addr).await;
    let row: Option<String> = fleet.redis.cmd(&["HGET", TABLE, &addr]).await;
    let read: BTreeSet<String> = row
        .iter()
        .flat_map(|r| decode_row(r))
        .map(str::to_string)
        .collect();
    assert_eq!(
        read, held,
        "the new process reads the old row before any write"
    );
    let () = fleet.redis.cmd(&["CLIENT", "UNPAUSE"]).await;

    // The write revokes them; it must not grant them.
    wait_for("the revocation", Duration::from_secs(5), || async {
        let (rows, _, _) = snapshot(&fleet, &units).await;
        rows.get(&addr).is_none_or(|r| decode_row(r).is_empty())
    })
    .await;
    let (rows, transit, revoked_at) = snapshot(&fleet, &units).await;
    let granted: BTreeSet<String> = rows
        .get(&survivor)
        .iter()
        .flat_map(|r| decode_row(r))
        .map(str::to_string)
        .collect();
    assert!(
        granted.is_disjoint(&held),
        "units of the restarted worker granted before it acknowledged: {:?}",
        granted.intersection(&held).collect::<Vec<_>>()
    );
    assert!(held.iter().all(|u| transit[u].from.contains_key(&addr)));
    // The holder confirms on a connection opened after the write: the new
    // process answers, so nothing moves until it acknowledges.
    wait_for("the confirmation probe", Duration::from_secs(5), || async {
        restarted.pings.load(std::sync::atomic::Ordering::SeqCst) > 0
    })
    .await;
    let (_, transit, _) = snapshot(&fleet, &units).await;
    assert!(
        held.iter().all(|u| transit.contains_key(u)),
        "still in transit"
    );

    // It applies the revoking generation: then they move.
    report(&fleet, &addr, revoked_at, false, PATIENT).await;
    wait_for(
        "the grant after the acknowledgement",
        Duration::from_secs(5),
        || async {
            let (rows, _, _) = snapshot(&fleet, &units).await;
            rows.get(&survivor)
                .is_some_and(|r| held.iter().all(|u| decode_row(r).contains(&u.as_str())))
        },
    )
    .await;
    fleet.shutdown().await;
}
