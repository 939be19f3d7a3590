//! The holder when it cannot see what happened: a write Redis applied whose
//! reply was an error, a takeover that cannot read what the last holder
//! left, facts that go missing (a forgotten member, a report read that timed
//! out), refusals that are not deaths, and reports from a numbering Redis
//! lost. Each test watches the table from outside and checks that no unit
//! revoked from a member reaches another before that member's wait is over
//! (docs/guarantees.md).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use distributor::MatchingTable;
use distributor::core::handoff::{MemberReport, RedisConnection};
use distributor::core::table::decode_row;
use distributor::edge::redis::Store;
use distributor::edge::redis::scripts::COMMIT;
use std::time::Instant;

use crate::handoff::reading_connection;
use crate::support::fault_proxy::{Action, FaultProxy, Match, Occurrence, Rule};
use crate::support::*;

/// A unit that changed owner, as seen from outside: it left `from`'s row at
/// `left` and reached `to`'s at `granted` (first observations of each).
#[derive(Debug, Clone)]
struct Move {
    unit: String,
    from: String,
    to: String,
    left: Instant,
    granted: Instant,
}

/// Samples the table every few milliseconds and records every move.
struct Moves {
    moves: Arc<Mutex<Vec<Move>>>,
    /// Samples taken so far.
    samples: tokio::sync::watch::Receiver<u64>,
    task: tokio::task::JoinHandle<()>,
}

impl Moves {
    async fn watch(fleet: &Fleet) -> Moves {
        let moves = Arc::new(Mutex::new(Vec::new()));
        let mut conn = fleet.redis.conn().await;
        let out = moves.clone();
        let (sampled, mut samples) = tokio::sync::watch::channel(0u64);
        let task = tokio::spawn(async move {
            // unit → (its owner, or the last one and when it left)
            let mut owner: HashMap<String, Result<String, (String, Instant)>> = HashMap::new();
            loop {
                let rows: redis::RedisResult<HashMap<String, String>> = redis::cmd("HGETALL")
                    .arg(TABLE)
                    .query_async(&mut conn)
                    .await;
                let now = Instant::now();
                if let Ok(rows) = rows {
                    let mut seen: HashMap<&str, &str> = HashMap::new();
                    for (m, row) in &rows {
                        for u in decode_row(row) {
                            seen.insert(u, m);
                        }
                    }
                    for (u, state) in owner.iter_mut() {
                        if let Ok(m) = state
                            && !seen.contains_key(u.as_str())
                        {
                            *state = Err((m.clone(), now));
                        }
                    }
                    for (u, m) in seen {
                        match owner.get(u) {
                            Some(Err((from, left))) if from != m => {
                                out.lock().unwrap().push(Move {
                                    unit: u.to_string(),
                                    from: from.clone(),
                                    to: m.to_string(),
                                    left: *left,
                                    granted: now,
                                });
                            }
                            Some(Ok(held)) if held != m => {
                                // Moved between two samples: in no row for
                                // less than a sample, which the checks below
                                // count as no wait at all.
                                out.lock().unwrap().push(Move {
                                    unit: u.to_string(),
                                    from: held.clone(),
                                    to: m.to_string(),
                                    left: now,
                                    granted: now,
                                });
                            }
                            _ => {}
                        }
                        owner.insert(u.to_string(), Ok(m.to_string()));
                    }
                    sampled.send_modify(|n| *n += 1);
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        });
        // The first sample is taken before `watch` returns: a move right
        // after it is never missed.
        samples
            .wait_for(|n| *n > 0)
            .await
            .expect("the table is read");
        Moves {
            moves,
            samples,
            task,
        }
    }

    /// Every move up to now: what a sample begun after this call shows.
    async fn all(&self) -> Vec<Move> {
        let mut samples = self.samples.clone();
        let now = *samples.borrow_and_update();
        samples
            .wait_for(|n| *n >= now + 2)
            .await
            .expect("the table is read");
        self.moves.lock().unwrap().clone()
    }

    /// Moves away from `from` up to now.
    async fn from(&self, from: &str) -> Vec<Move> {
        let all = self.all().await;
        all.into_iter().filter(|m| m.from == from).collect()
    }
}

impl Drop for Moves {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Every move away from `from` took at least `wait` (less the sampling
/// error); the moves are printed.
fn assert_waited(moves: &[Move], from: &str, wait: Duration) {
    for m in moves.iter().filter(|m| m.from == from) {
        let took = m.granted.duration_since(m.left);
        eprintln!("{} {} -> {} after {took:?}", m.unit, m.from, m.to);
        assert!(
            took + Duration::from_millis(60) >= wait,
            "{} went from {} to {} {took:?} after it left {}'s row; {from} was owed {wait:?}",
            m.unit,
            m.from,
            m.to,
            m.from
        );
    }
}

/// `redis-server` stopped (`SIGSTOP`) or continued.
fn signal(server: &RedisServer, sig: &str) {
    let pid = server.pid().expect("a running redis-server");
    let ok = std::process::Command::new("kill")
        .args([sig, &pid.to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok, "kill {sig} {pid}");
}

/// Issue 20, finding 1: with `-redis-wait-replicas 1`, a write that revokes
/// units lands on the master, but its `WAIT` times out (the replica is
/// paused). The holder used to count it as not written, so its next cycle
/// planned from its old memory, found the revoked units in no row and not in
/// transit, and granted them about 400 ms after their revocation, while
/// their old owners (old-protocol workers) were entitled to `-handoff-delay`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revocation_whose_wait_for_replicas_timed_out_is_waited_for_in_full() {
    const DELAY: Duration = Duration::from_secs(3);
    let master = RedisServer::start();
    let replica =
        RedisServer::start_with(&["--replicaof", "127.0.0.1", &master.port().to_string()]);
    wait_for(
        "the replica is in sync",
        Duration::from_secs(10),
        || async {
            let info: String = replica.cmd(&["INFO", "replication"]).await;
            info.contains("master_link_status:up")
        },
    )
    .await;
    let units = units(30);
    let mut fleet = Fleet::new(master);
    fleet.config.redis_wait_replicas = 1;
    fleet.config.redis_wait_timeout = Duration::from_millis(100);
    fleet.config.handoff_delay = DELAY;
    fleet.set_units(&units).await;
    let old = [
        FlakyWorker::start(&fleet).await,
        FlakyWorker::start(&fleet).await,
    ];
    fleet.add_replica();
    let ids: Vec<String> = old.iter().map(|w| w.addr.clone()).collect();
    fleet
        .wait_for_table_with(&units, &ids, Duration::from_secs(10))
        .await;
    let moves = Moves::watch(&fleet).await;

    // The replica stops acknowledging while a third worker joins: the
    // revoking write is applied on the master, and its WAIT times out.
    signal(&replica, "-STOP");
    let joiner = FlakyWorker::start(&fleet).await;
    let failed = wait_until(
        Duration::from_secs(2),
        Duration::from_millis(10),
        || async {
            fleet.statuses()[0]
                .last_error
                .as_deref()
                .is_some_and(|e| e.contains("replicas acknowledged"))
        },
    )
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    signal(&replica, "-CONT");
    assert!(
        failed,
        "the revoking write's WAIT did not time out; the test proves nothing"
    );

    // Every unit reaches the joiner, none before its owner's delay.
    let mut all = ids.clone();
    all.push(joiner.addr.clone());
    fleet.wait_for_table_with(&units, &all, DELAY * 4).await;
    let seen = moves.all().await;
    assert!(
        seen.iter().any(|m| m.to == joiner.addr),
        "nothing moved to the joiner: {seen:?}"
    );
    for w in &old {
        assert_waited(&seen, &w.addr, DELAY);
    }
    drop(replica);
    fleet.shutdown().await;
}

/// Issue 20, finding 2: units in transit when the holder dies, and
/// `{T}:liveness` of the wrong type. The next holder could not read the
/// liveness, "started without it", and without `{T}:transit` too: it granted
/// every unit in transit at once. A holding that cannot read what the last
/// holder left must not act until it can.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_takeover_that_cannot_read_liveness_acts_only_once_it_can() {
    const DELAY: Duration = Duration::from_secs(3);
    let units = units(30);
    let mut fleet = Fleet::new(RedisServer::start());
    fleet.config.handoff_delay = DELAY;
    fleet.set_units(&units).await;
    let old = [
        FlakyWorker::start(&fleet).await,
        FlakyWorker::start(&fleet).await,
    ];
    fleet.add_replica();
    fleet.add_replica();
    let ids: Vec<String> = old.iter().map(|w| w.addr.clone()).collect();
    fleet
        .wait_for_table_with(&units, &ids, Duration::from_secs(10))
        .await;
    let h = fleet.wait_for_holder().await;
    let moves = Moves::watch(&fleet).await;
    let k = keys();

    // A join puts units in transit; then the liveness hash turns into a
    // string and the holder dies.
    let joiner = FlakyWorker::start(&fleet).await;
    wait_for("units in transit", Duration::from_secs(5), || async {
        let n: u64 = fleet.redis.cmd(&["HLEN", &k.transit]).await;
        n > 0
    })
    .await;
    let () = fleet.redis.cmd(&["SET", &k.liveness, "not a hash"]).await;
    fleet.replicas[h].take().unwrap().abort();
    let killed = Instant::now();

    // The next holder takes the lease but does not act: it says why.
    let next = wait_until(
        Duration::from_secs(5),
        Duration::from_millis(20),
        || async { fleet.holder().is_some() },
    )
    .await;
    assert!(next, "no replica took the lease over");
    let n = fleet.holder().unwrap();
    tokio::time::sleep(DELAY + Duration::from_millis(500)).await;
    let early: Vec<Move> = moves
        .all()
        .await
        .into_iter()
        .filter(|m| m.to == joiner.addr)
        .collect();
    assert!(
        early.is_empty(),
        "granted while the new holder could not read what the last one left: {early:?}"
    );
    let transit: u64 = fleet.redis.cmd(&["HLEN", &k.transit]).await;
    assert!(transit > 0, "the blocked holder released units in transit");
    let why = fleet.replicas[n]
        .as_ref()
        .unwrap()
        .status()
        .borrow()
        .holding_blocked
        .clone();
    assert!(
        why.as_deref().is_some_and(|why| why.contains(&k.liveness)),
        "the new holder does not say what it cannot read: {why:?}"
    );

    // Readable again: it acts, and the units reach the joiner only after
    // their delay, counted again from that holder's start.
    let () = fleet.redis.cmd(&["DEL", &k.liveness]).await;
    let mut all = ids.clone();
    all.push(joiner.addr.clone());
    fleet.wait_for_table_with(&units, &all, DELAY * 4).await;
    let seen = moves.all().await;
    for m in seen.iter().filter(|m| m.to == joiner.addr) {
        assert!(
            m.granted.duration_since(killed) >= DELAY,
            "{m:?} granted {:?} after the holder died",
            m.granted.duration_since(killed)
        );
    }
    for w in &old {
        assert_waited(&seen, &w.addr, DELAY);
    }
    assert!(
        fleet.replicas[n]
            .as_ref()
            .unwrap()
            .status()
            .borrow()
            .holding_blocked
            .is_none()
    );
    fleet.shutdown().await;
}

/// A member that speaks the protocol, played by hand: it answers pings (or
/// not) and has written a report with `deadline` (and `client`).
async fn protocol_worker(
    fleet: &Fleet,
    deadline: Duration,
    client: Option<RedisConnection>,
) -> FlakyWorker {
    let w = FlakyWorker::start(fleet).await;
    crate::handoff::report_naming(fleet, &w.addr, 0, false, deadline, client).await;
    w
}

/// Issue 20, finding 3: a member with a long deadline stops answering
/// (frozen); `-forget-after` removed it from its list and deleted its report,
/// and the holder then counted its units' wait as `-handoff-delay`: they
/// were granted long before its hold ended. Its wait is stored with the
/// revocation, and a member that owes revocations is not forgotten.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_members_wait_survives_forget_after() {
    const DEADLINE: Duration = Duration::from_secs(4);
    let wait = DEADLINE + DEADLINE / 20 + Duration::from_millis(100);
    let units = units(20);
    let mut fleet = Fleet::new(RedisServer::start());
    fleet.config.handoff_delay = Duration::from_millis(1000);
    fleet.config.forget_after = Some(Duration::from_millis(300));
    fleet.set_units(&units).await;
    let frozen = protocol_worker(&fleet, DEADLINE, None).await;
    let other = protocol_worker(&fleet, DEADLINE, None).await;
    fleet.add_replica();
    let ids = vec![frozen.addr.clone(), other.addr.clone()];
    fleet
        .wait_for_table_with(&units, &ids, Duration::from_secs(10))
        .await;
    let moves = Moves::watch(&fleet).await;
    // Frozen: its pings go unanswered.
    frozen
        .answer_delay_ms
        .store(60_000, std::sync::atomic::Ordering::SeqCst);
    let k = keys();
    let listed = |m: String| {
        let fleet = &fleet;
        async move {
            let list: Vec<String> = fleet.redis.cmd(&["LRANGE", SERVICES, "0", "-1"]).await;
            list.contains(&m)
        }
    };
    // Its units reach the other worker, after its whole wait; meanwhile it
    // stays listed and keeps its report.
    let deadline = Instant::now() + wait * 3;
    loop {
        let table = fleet.table().await;
        let done = table
            .rows()
            .get(&other.addr)
            .is_some_and(|r| decode_row(r).len() == units.len());
        if done {
            break;
        }
        assert!(Instant::now() < deadline, "its units never moved");
        if !moves.from(&frozen.addr).await.is_empty() {
            break;
        }
        assert!(
            listed(frozen.addr.clone()).await,
            "forgotten while it still owes its units"
        );
        let report: Option<String> = fleet.redis.cmd(&["HGET", &k.members, &frozen.addr]).await;
        assert!(
            report.is_some(),
            "its report was removed while it owes units"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    fleet
        .wait_for_table_with(&units, std::slice::from_ref(&other.addr), wait * 3)
        .await;
    assert_waited(&moves.all().await, &frozen.addr, wait);
    // Once it owes nothing, -forget-after forgets it.
    wait_for(
        "the frozen member is forgotten",
        Duration::from_secs(5),
        || {
            let m = frozen.addr.clone();
            let listed = &listed;
            async move { !listed(m).await }
        },
    )
    .await;
    fleet.shutdown().await;
}

/// Issue 20, finding 5: a worker that removed itself from its list and then
/// exited. The cycle that saw its `LREM` revoked its units; once its process
/// is gone, a refusal on a new connection proves it, and its units move
/// within a poll interval or two, not after `-handoff-delay`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_that_deregistered_then_exited_hands_off_at_once() {
    const DELAY: Duration = Duration::from_secs(6);
    let units = units(20);
    let mut fleet = Fleet::new(RedisServer::start());
    fleet.config.handoff_delay = DELAY;
    fleet.set_units(&units).await;
    let mut leaving = FlakyWorker::start(&fleet).await;
    let staying = FlakyWorker::start(&fleet).await;
    fleet.add_replica();
    let ids = vec![leaving.addr.clone(), staying.addr.clone()];
    fleet
        .wait_for_table_with(&units, &ids, Duration::from_secs(10))
        .await;
    let k = keys();
    // Deregistered, still running: the holder revokes its units.
    let _: i64 = fleet
        .redis
        .cmd(&["LREM", SERVICES, "0", &leaving.addr])
        .await;
    wait_for("its row is gone", Duration::from_secs(5), || async {
        !fleet.table().await.rows().contains_key(&leaving.addr)
    })
    .await;
    let n: u64 = fleet.redis.cmd(&["HLEN", &k.transit]).await;
    assert!(n > 0, "its units are in transit");
    // Then it exits.
    leaving.kill().await;
    let exited = Instant::now();
    fleet
        .wait_for_table_with(&units, std::slice::from_ref(&staying.addr), DELAY * 2)
        .await;
    let took = exited.elapsed();
    assert!(
        took < Duration::from_secs(2),
        "its units moved {took:?} after it exited (-handoff-delay is {DELAY:?})"
    );
    fleet.shutdown().await;
}

/// Issue 20, finding 7: a refusal is not always a death. A firewall that
/// REJECTs the holder's pings (a TCP reset or an ICMP port-unreachable both
/// read as "connection refused") leaves the member running and reading
/// Redis. For a member that names its Redis connection in its report, a
/// refusal releases its units only once Redis has no such connection either;
/// while it has, they wait for its acknowledgement or its deadline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_member_whose_redis_connection_lives_is_not_taken_for_dead() {
    const DEADLINE: Duration = Duration::from_secs(3);
    let wait = DEADLINE + DEADLINE / 20 + Duration::from_millis(100);
    let units = units(20);
    let mut fleet = Fleet::new(RedisServer::start());
    // Two members die one after the other holding the same units: the
    // quarantine (on by default) would hold those for a trial each before
    // placing them (`core::quarantine`), and this test times how fast a
    // proven death's units move.
    fleet.config.quarantine = distributor::core::quarantine::QuarantineRule::OFF;
    fleet.set_units(&units).await;
    let (alive_conn, alive_id) = reading_connection(&fleet).await;
    let (dead_conn, dead_id) = reading_connection(&fleet).await;
    let mut alive = protocol_worker(&fleet, DEADLINE, Some(alive_id)).await;
    let mut dead = protocol_worker(&fleet, DEADLINE, Some(dead_id)).await;
    let staying = protocol_worker(&fleet, DEADLINE, None).await;
    fleet.add_replica();
    let ids = vec![alive.addr.clone(), dead.addr.clone(), staying.addr.clone()];
    fleet
        .wait_for_table_with(&units, &ids, Duration::from_secs(10))
        .await;
    let moves = Moves::watch(&fleet).await;

    // Refused while its Redis connection lives (a firewall on the ping path):
    // its units wait for its deadline.
    alive.kill().await;
    let refused = Instant::now();
    tokio::time::sleep(wait / 2).await;
    assert!(
        moves.from(&alive.addr).await.is_empty(),
        "granted {:?} after a refusal while the member's Redis connection lives: {:?}",
        refused.elapsed(),
        moves.from(&alive.addr).await
    );
    let rest = vec![dead.addr.clone(), staying.addr.clone()];
    fleet.wait_for_table_with(&units, &rest, wait * 3).await;
    assert_waited(&moves.all().await, &alive.addr, wait);
    drop(alive_conn);

    // Refused, and its Redis connection is gone too (the process died): its
    // units move at once.
    drop(dead_conn);
    dead.kill().await;
    let died = Instant::now();
    fleet
        .wait_for_table_with(&units, std::slice::from_ref(&staying.addr), wait * 3)
        .await;
    let took = died.elapsed();
    assert!(
        took < Duration::from_secs(1),
        "a dead member's units moved {took:?} after it died"
    );
    fleet.shutdown().await;
}

/// Found by chaos 10 (a Redis master killed, its replica promoted): client
/// ids are numbered per server, from 1 at every start, so the id a dead
/// member's report named on the old master can be the id of another, live
/// connection of the promoted one. Asked by id alone, the new master vouched
/// for the dead member: its units waited for its deadline instead of moving
/// on its refusal. A report names the server too (its run id); a connection
/// named on another server is gone from this one, whatever ids it has.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_members_client_id_reused_by_a_promoted_replica_does_not_keep_it_alive() {
    const MEMBER: &str = "127.0.0.1:1";
    let master = RedisServer::start();
    let replica =
        RedisServer::start_with(&["--replicaof", "127.0.0.1", &master.port().to_string()]);
    // Connections of others first, so that the member's client id on the
    // master is above every id the replica has given yet.
    let mut others = Vec::new();
    for _ in 0..100 {
        others.push(master.conn().await);
    }
    // The member, on the master, as `Member` reads and reports.
    let member = Store::open(&master.url(), TABLE, Duration::from_secs(2)).unwrap();
    let read = member.read_row(MEMBER).await.unwrap();
    let named = read.client.expect("the member's connection");
    assert_eq!(named.server, Some(master.run_id().await));
    let report = MemberReport {
        applied: 0,
        draining: false,
        deadline: Duration::from_secs(30),
        weight: 1,
        client: Some(named),
    };
    member.write_report(MEMBER, &report, false).await.unwrap();
    // One connection to the replica for every command of the test's own, so
    // that the replica's client ids stay below the member's.
    let mut admin = replica.conn().await;
    let mut on_replica = async |args: &[&str]| -> redis::Value {
        command(args).query_async(&mut admin).await.unwrap()
    };
    let encoded = redis::Value::BulkString(report.encode().into_bytes());
    let deadline = Instant::now() + Duration::from_secs(10);
    while on_replica(&["HGET", &keys().members, MEMBER]).await != encoded {
        assert!(Instant::now() < deadline, "the report did not replicate");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // The master dies with the member; the replica is promoted, and a live
    // connection of its own gets the id the member's report names.
    drop(member);
    drop(others);
    drop(master);
    on_replica(&["REPLICAOF", "NO", "ONE"]).await;
    let mut reusing = None;
    for _ in 0..=named.client {
        let mut c = replica.conn().await;
        let id: u64 = redis::cmd("CLIENT")
            .arg("ID")
            .query_async(&mut c)
            .await
            .unwrap();
        assert!(
            id <= named.client,
            "the replica's ids passed {}",
            named.client
        );
        if id == named.client {
            reusing = Some(c);
            break;
        }
    }
    let _reusing = reusing.expect("a connection of the replica with the member's id");

    let holder = Store::open(&replica.url(), TABLE, Duration::from_secs(2)).unwrap();
    assert_eq!(
        holder.member_disconnected(MEMBER, &[]).await.unwrap(),
        Some(true),
        "the member's connection was on the old master"
    );
    // The same when its report is gone and a connection named with its
    // server is all that is known (the store's side: revocations record the
    // client id alone, checked below).
    on_replica(&["HDEL", &keys().members, MEMBER]).await;
    assert_eq!(
        holder.member_disconnected(MEMBER, &[named]).await.unwrap(),
        Some(true)
    );
    // A connection named without a run id (a member of an older version) is
    // looked for by its id: the live one with that id keeps it.
    assert_eq!(
        holder
            .member_disconnected(MEMBER, &[RedisConnection::id(named.client)])
            .await
            .unwrap(),
        Some(false)
    );
    // A member that reads on the promoted replica now names it, and lives.
    let live = Store::open(&replica.url(), TABLE, Duration::from_secs(2)).unwrap();
    let on_replica = live.read_row(MEMBER).await.unwrap().client.unwrap();
    assert_eq!(on_replica.server, Some(replica.run_id().await));
    let report = MemberReport {
        client: Some(on_replica),
        ..report
    };
    live.write_report(MEMBER, &report, false).await.unwrap();
    assert_eq!(
        holder.member_disconnected(MEMBER, &[named]).await.unwrap(),
        Some(false),
        "its report names a live connection of this server"
    );
}

/// Issue 20, finding 6 (the holder's side): a member remembers applied = 500
/// from a numbering Redis lost, and its periodic report rewrites it. The
/// holder must not read that as an acknowledgement of revocations made in the
/// new numbering, and must number its next writes above it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_report_from_a_lost_numbering_acknowledges_nothing() {
    const DEADLINE: Duration = Duration::from_secs(3);
    let wait = DEADLINE + DEADLINE / 20 + Duration::from_millis(100);
    let units = units(20);
    let mut fleet = Fleet::new(RedisServer::start());
    fleet.set_units(&units).await;
    let stale = FlakyWorker::start(&fleet).await;
    crate::handoff::report_naming(&fleet, &stale.addr, 500, false, DEADLINE, None).await;
    fleet.add_replica();
    fleet
        .wait_for_table_with(
            &units,
            std::slice::from_ref(&stale.addr),
            Duration::from_secs(10),
        )
        .await;
    let moves = Moves::watch(&fleet).await;
    // A join takes some of its units; it never acknowledges (its report
    // stays at 500).
    let joiner = protocol_worker(&fleet, DEADLINE, None).await;
    let ids = vec![stale.addr.clone(), joiner.addr.clone()];
    fleet.wait_for_table_with(&units, &ids, wait * 3).await;
    assert_waited(&moves.all().await, &stale.addr, wait);
    let g = fleet.generation().await;
    assert!(g > 500, "the next writes are numbered above 500, not {g}");
    fleet.shutdown().await;
}

/// Issue 20, item 5 (found by `unknown_outcomes_stress`, seed 854494): a
/// table write the holder gave up on (its Redis call deadline passed) is
/// still on its way; the holder reads Redis again, plans from what it read
/// and writes that; then the old write lands. Redis fenced it by the lease
/// token and epoch only, which had not changed, so it was applied: its
/// table, planned before, put units the newer write granted to one member
/// straight into another member's row, with no revocation between. Every
/// write now expects `{T}:meta`'s version its plan read: the late one is
/// refused.
///
/// Here A drains, and its units wait for its deadline (it never
/// acknowledges); the write that grants them to X and Y at the end of the
/// wait is held in a proxy past the holder's call deadline (2 s, inside a
/// 4.5 s renew deadline, so the holder keeps its lease); meanwhile X drains
/// too, so the next plan gives every unit of A's to Y; then the held write
/// lands.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_the_holder_gave_up_on_does_not_land_after_its_next_write() {
    const DEADLINE: Duration = Duration::from_millis(500);
    const HELD: Duration = Duration::from_millis(3500);
    let wait = DEADLINE + DEADLINE / 20 + Duration::from_millis(100);
    let units = units(30);
    let redis = RedisServer::start();
    let proxy = FaultProxy::start(redis.port()).await;
    let mut fleet = Fleet::new(redis);
    fleet.config.redis_url = proxy.url();
    fleet.config.lease.ttl = Duration::from_secs(6);
    fleet.config.lease.renew_interval = Duration::from_millis(500);
    fleet.config.lease.renew_deadline = Duration::from_millis(4500);
    fleet.set_units(&units).await;
    let a = protocol_worker(&fleet, DEADLINE, None).await;
    let x = protocol_worker(&fleet, DEADLINE, None).await;
    let y = protocol_worker(&fleet, DEADLINE, None).await;
    fleet.add_replica();
    let ids = vec![a.addr.clone(), x.addr.clone(), y.addr.clone()];
    let table = fleet
        .wait_for_table_with(&units, &ids, Duration::from_secs(10))
        .await;
    let of_a: Vec<String> = decode_row(&table.rows()[&a.addr])
        .into_iter()
        .map(str::to_string)
        .collect();
    let moves = Moves::watch(&fleet).await;
    let k = keys();

    // A drains: its units are revoked, and wait for its deadline.
    crate::handoff::report_naming(&fleet, &a.addr, 0, true, DEADLINE, None).await;
    wait_for("A's units in transit", Duration::from_secs(5), || async {
        let n: u64 = fleet.redis.cmd(&["HLEN", &k.transit]).await;
        n > 0
    })
    .await;
    // The next write grants them, to X and Y: held past the call deadline.
    let held = proxy.add(Rule::new(
        Match::Script(sha1_smol::Sha1::from(COMMIT).digest().to_string()),
        Occurrence::Next(1),
        Action::Delay(HELD),
    ));
    assert!(
        held.wait_taken(1, wait * 4).await,
        "no write after A's units' wait"
    );
    // Sent, not applied; X drains now, so the next plan gives them to Y.
    crate::handoff::report_naming(&fleet, &x.addr, 0, true, DEADLINE, None).await;
    let in_y = |table: MatchingTable| {
        let row: Vec<String> = table
            .rows()
            .get(&y.addr)
            .map(|r| decode_row(r).into_iter().map(str::to_string).collect())
            .unwrap_or_default();
        of_a.iter().all(|u| row.contains(u))
    };
    wait_for(
        "the next plan written while the held write is on its way",
        HELD,
        || async { in_y(fleet.table().await) && held.fired() == 0 },
    )
    .await;
    assert!(
        held.wait_fired(1, HELD).await,
        "the held write never landed"
    );

    // Every unit reaches Y; none left Y's row before Y's wait was over.
    wait_for("every unit in Y's row", Duration::from_secs(20), || async {
        let t = fleet.table().await;
        t.rows()
            .get(&y.addr)
            .is_some_and(|r| decode_row(r).len() == units.len())
    })
    .await;
    assert_waited(&moves.all().await, &y.addr, wait);
    fleet.shutdown().await;
}
