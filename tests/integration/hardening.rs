//! Regressions for defects found by a black-box probe and a code review: each
//! test failed on the code before its fix. Hostile or broken state in Redis
//! never crashes a replica and never loses, empties or half-writes a table; it
//! is reported (error naming key and value, log line, metric) and, where that
//! is safe, repaired.

use std::time::Duration;

use distributor::core::liveness::HealthChanges;
use distributor::edge::redis::{Acquisition, Commit, Store};
use distributor::{MatchingTable, Role, StartError, StoreError};

use crate::support::*;

async fn holder_status(fleet: &Fleet) -> distributor::Status {
    let i = fleet.wait_for_holder().await;
    fleet.statuses()[i].clone()
}

async fn meta(fleet: &Fleet) -> std::collections::HashMap<String, String> {
    fleet.redis.cmd(&["HGETALL", &keys().meta]).await
}

/// Probe item 3: one PUBLISH used to poison every replica's generation floor
/// (`meta.generation` became a float and stopped increasing, and `Member`
/// stopped following its row).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_published_generation_is_only_a_hint() {
    let units = units(12);
    let (mut fleet, _) = Fleet::converged(|_| {}, 3, 2, &units).await;
    let before = fleet.generation().await;
    for payload in [
        "18446744073709551615",
        "9007199254740993",
        "1e300",
        "-5",
        "x",
    ] {
        let _: i64 = fleet
            .redis
            .cmd(&["PUBLISH", &keys().table_channel, payload])
            .await;
    }
    // A change: the next writes take the next generations, integers: the
    // revocation, the grant of the dead member's units (once a ping after
    // the revocation is refused too), and the grant of units moved between
    // the live ones (once they acknowledged), unless two of them coincide.
    fleet.members[0].take().unwrap().abort();
    fleet.wait_for_table(&units, Duration::from_secs(5)).await;
    let m = meta(&fleet).await;
    let after: u64 = m["generation"].parse().expect("an integer");
    assert!(
        (before + 1..=before + 3).contains(&after),
        "the generation goes on from {before}, as an integer: {m:?}"
    );
    // A new holder (that also saw the messages) goes on from there.
    let h = fleet.wait_for_holder().await;
    fleet.replicas[h].take().unwrap().shutdown().await;
    fleet.members[1].take().unwrap().abort();
    fleet.wait_for_table(&units, Duration::from_secs(10)).await;
    let last = fleet.generation().await;
    assert!(
        (after + 1..=after + 3).contains(&last),
        "{after} then {last}"
    );
    // Members follow their rows.
    let table = fleet.table().await;
    for m in fleet.members.iter().flatten() {
        let mut rx = m.assignment();
        let want = table.units_of(m.id()).len();
        wait_for("the member follows its row", Duration::from_secs(5), || {
            let a = rx.borrow_and_update().clone();
            async move { a.units.len() == want && a.generation == last }
        })
        .await;
    }
    fleet.shutdown().await;
}

/// Probe item 4: a hand edit that keeps the row count (`HSET T member HACKED`,
/// or a row swapped for a fake one) survived forever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hand_edited_table_is_healed_on_the_next_cycles() {
    let units = units(12);
    let (fleet, before) = Fleet::converged(|_| {}, 3, 1, &units).await;
    let generation = fleet.generation().await;
    let victim = fleet.member_id(0);
    let () = fleet.redis.cmd(&["HSET", TABLE, &victim, "HACKED"]).await;
    wait_for("the edit is healed", Duration::from_secs(5), || async {
        fleet.table().await == before
    })
    .await;
    // The same length, so that only the content tells.
    let row = before.rows()[&fleet.member_id(1)].clone();
    let same_len: String = row.chars().rev().collect();
    let () = fleet
        .redis
        .cmd(&["HSET", TABLE, &fleet.member_id(1), &same_len])
        .await;
    wait_for(
        "a same-length edit is healed",
        Duration::from_secs(5),
        || async { fleet.table().await == before },
    )
    .await;
    // A row deleted and a fake one added: the row count stays.
    let _: i64 = fleet.redis.cmd(&["HDEL", TABLE, &fleet.member_id(2)]).await;
    let () = fleet
        .redis
        .cmd(&["HSET", TABLE, "10.9.9.9:1", "unit-0000"])
        .await;
    wait_for(
        "a swapped row is healed",
        Duration::from_secs(5),
        || async { fleet.table().await == before },
    )
    .await;
    assert!(fleet.generation().await > generation);
    // Idle again: nothing more is written.
    let healed = fleet.generation().await;
    let s = holder_status(&fleet).await;
    wait_for("ten more cycles", Duration::from_secs(10), || async {
        holder_status(&fleet).await.cycles >= s.cycles + 10
    })
    .await;
    assert_eq!(fleet.generation().await, healed);
    fleet.shutdown().await;
}

/// The Lua digest (used where WATCH is not permitted) and the Rust one agree.
#[tokio::test]
async fn redis_and_the_daemon_compute_the_same_table_digest() {
    let redis = RedisServer::start();
    let t = MatchingTable::from_rows([
        ("10.0.0.1:7001".to_string(), "a,b,c".to_string()),
        ("10.0.0.2:7001".to_string(), String::new()),
        ("[::1]:7001".to_string(), "ü,ß".to_string()),
    ]);
    let mut c = redis.conn().await;
    for (m, v) in t.rows() {
        let () = redis::cmd("HSET")
            .arg(TABLE)
            .arg(m)
            .arg(v)
            .query_async(&mut c)
            .await
            .unwrap();
    }
    let lua = format!(
        "{}\nreturn table_digest(redis.call('HGETALL', KEYS[1]))",
        include_str!("../../src/edge/redis/scripts/prelude.lua")
    );
    let digest: String = redis::Script::new(&lua)
        .key(TABLE)
        .invoke_async(&mut c)
        .await
        .unwrap();
    assert_eq!(digest, t.digest());
}

fn invalid(e: &StoreError) -> (String, String, String) {
    match e {
        StoreError::InvalidState {
            key, field, value, ..
        } => (key.clone(), field.clone(), value.clone()),
        other => panic!("expected an invalid-state error, got {other:?}"),
    }
}

/// Probe item 5: Redis does not roll a script back. With `meta.generation`
/// garbage, `commit.lua` replaced the table and then failed at `math.max`;
/// with `{T}:epoch` garbage, `acquire.lua` set the lease before `INCR` failed.
#[tokio::test]
async fn scripts_validate_everything_before_their_first_write() {
    let redis = RedisServer::start();
    let store = Store::open(&redis.url(), TABLE, Duration::from_secs(2)).unwrap();
    let k = keys();

    // acquire: a bad epoch leaves no lease behind.
    for bad in ["abc", "9223372036854775807", "1.5", "9007199254740992"] {
        let () = redis.cmd(&["SET", &k.epoch, bad]).await;
        let e = store.acquire(&lease_claim("a")).await.unwrap_err();
        assert_eq!(invalid(&e).0, k.epoch, "{e}");
        assert!(e.to_string().contains(bad), "the value is named: {e}");
        let lease: Option<String> = redis.cmd(&["GET", &k.lease]).await;
        assert_eq!(lease, None, "no orphan lease token for epoch {bad:?}");
    }
    let () = redis.cmd(&["SET", &k.epoch, "4"]).await;
    let Acquisition::Acquired(grant) = store.acquire(&lease_claim("a")).await.unwrap() else {
        panic!("acquires once the epoch is fixed")
    };
    assert_eq!(grant.epoch, 5);

    // commit: a bad generation leaves table and meta as they were, and
    // publishes nothing.
    let t1 = MatchingTable::from_rows([("w:1".to_string(), "x".to_string())]);
    let none = HealthChanges::default();
    let commit = |t| Commit {
        table: Some(t),
        ..bare_commit("a", &none)
    };
    store.commit(&grant, &commit(&t1)).await.unwrap();
    let t2 = MatchingTable::from_rows([("w:2".to_string(), "y".to_string())]);
    for (field, bad) in [
        ("generation", "abc"),
        ("generation", "1.8446744073709552e+19"),
        ("generation_floor", "-1"),
        ("generation", "9007199254740991"),
    ] {
        let () = redis.cmd(&["HSET", &k.meta, field, bad]).await;
        let e = store.commit(&grant, &commit(&t2)).await.unwrap_err();
        let (key, f, _) = invalid(&e);
        assert_eq!((key.as_str(), f.as_str()), (k.meta.as_str(), field), "{e}");
        assert_eq!(
            store.read_table().await.unwrap(),
            t1,
            "table untouched ({field}={bad})"
        );
        let _: i64 = redis.cmd(&["HDEL", &k.meta, field]).await;
        let () = redis.cmd(&["HSET", &k.meta, "generation", "1"]).await;
    }
    assert_eq!(
        store.commit(&grant, &commit(&t2)).await.unwrap(),
        distributor::edge::redis::Committed::Written {
            generation: Some(2),
            version: 2,
        }
    );
}

/// Probe item 5, end to end: the daemon reports the real reason, keeps the
/// table, and goes on once the value is fixed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_garbage_generation_is_reported_and_keeps_the_table() {
    let units = units(8);
    let (mut fleet, before) = Fleet::converged(|_| {}, 3, 1, &units).await;
    let () = fleet
        .redis
        .cmd(&["HSET", &keys().meta, "generation", "abc"])
        .await;
    fleet.members[0].take().unwrap().abort();
    wait_for("the reason is reported", Duration::from_secs(5), || async {
        holder_status(&fleet).await.last_error.is_some_and(|e| {
            e.contains(&format!(
                "key {:?} field \"generation\" holds \"abc\"",
                keys().meta
            ))
        })
    })
    .await;
    assert_eq!(fleet.table().await, before, "the last table stays");
    let _: i64 = fleet.redis.cmd(&["HDEL", &keys().meta, "generation"]).await;
    fleet.wait_for_table(&units, Duration::from_secs(5)).await;
    fleet.shutdown().await;
}

/// Probe item 6: a lease key without a TTL (or of another type) stopped every
/// replica silently and forever, with `/readyz` at 200.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_foreign_lease_key_is_reported_and_lapses() {
    let units = units(6);
    for intruder in [
        &["SET", "LEASE", "intruder"][..],
        &["HSET", "LEASE", "a", "b"],
    ] {
        let mut fleet = Fleet::new(RedisServer::start());
        fleet.set_units(&units).await;
        fleet.add_member().await;
        let cmd: Vec<String> = intruder
            .iter()
            .map(|a| a.replace("LEASE", &keys().lease))
            .collect();
        let cmd: Vec<&str> = cmd.iter().map(String::as_str).collect();
        let _: redis::Value = fleet.redis.cmd(&cmd).await;
        fleet.add_replica();
        wait_for(
            "the problem is reported",
            Duration::from_secs(5),
            || async { fleet.statuses()[0].lease_problem.is_some() },
        )
        .await;
        let pttl: i64 = fleet.redis.cmd(&["PTTL", &keys().lease]).await;
        assert!(pttl > 0, "the foreign key was given a TTL: {pttl}");
        // It lapses after one TTL (1 s here), and a replica takes over.
        fleet.wait_for_table(&units, Duration::from_secs(10)).await;
        assert_eq!(fleet.statuses()[0].role, Role::Holder);
        assert_eq!(fleet.statuses()[0].lease_problem, None);
        let samples = parse_metrics(&fleet.replicas[0].as_ref().unwrap().metrics().encode());
        assert_eq!(
            metric(
                &samples,
                "distributor_lease_transitions_total",
                &[("transition", "foreign")]
            ),
            Some(1.0)
        );
        fleet.shutdown().await;
    }
}

/// Probe item 7: a units list whose every entry is invalid emptied the table.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_units_list_of_only_invalid_entries_keeps_the_last_table() {
    let units = units(8);
    let (fleet, before) = Fleet::converged(|_| {}, 2, 1, &units).await;
    let bad: Vec<String> = vec!["a,b".into(), "".into(), "c\u{7}".into()];
    fleet.set_units(&bad).await;
    wait_for(
        "the problem is reported",
        Duration::from_secs(5),
        || async {
            holder_status(&fleet).await.last_error.is_some_and(|e| {
                e.contains("every one of the 3 entries of list \"test-units\" is invalid")
            })
        },
    )
    .await;
    assert_eq!(fleet.table().await, before);
    // An empty list still means "no units".
    fleet.set_units(&[]).await;
    wait_for("no units", Duration::from_secs(5), || async {
        fleet.table().await.assignments() == 0
    })
    .await;
    fleet.shutdown().await;
}

/// Review item 16: a failed write counted as `cycles{outcome="ok"}`, cleared
/// `last_error` and refreshed readiness.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_write_is_a_failed_cycle() {
    let units = units(8);
    let (mut fleet, before) = Fleet::converged(|_| {}, 3, 1, &units).await;
    // Reads work (the floor is only checked by writes); every write fails.
    let () = fleet
        .redis
        .cmd(&["HSET", &keys().meta, "generation_floor", "x"])
        .await;
    fleet.members[0].take().unwrap().abort();
    let h = fleet.wait_for_holder().await;
    let replica = fleet.replicas[h].as_ref().unwrap();
    wait_for(
        "failed writes are counted",
        Duration::from_secs(5),
        || async {
            let s = replica.status().borrow().clone();
            s.failed_cycles >= 3
                && s.last_error
                    .as_deref()
                    .is_some_and(|e| e.contains("generation_floor"))
        },
    )
    .await;
    let samples = parse_metrics(&replica.metrics().encode());
    assert!(
        metric(
            &samples,
            "distributor_cycles_total",
            &[("outcome", "write_error")]
        )
        .unwrap()
            >= 3.0
    );
    let ok_before = metric(&samples, "distributor_cycles_total", &[("outcome", "ok")]);
    wait_for("more failed cycles", Duration::from_secs(5), || async {
        replica.status().borrow().failed_cycles >= 6
    })
    .await;
    let samples = parse_metrics(&replica.metrics().encode());
    assert_eq!(
        metric(&samples, "distributor_cycles_total", &[("outcome", "ok")]),
        ok_before,
        "failed writes are not ok cycles"
    );
    assert_eq!(fleet.table().await, before);
    // Readiness: a failed write no longer refreshes `redis_ok_at` (only calls
    // that succeeded do, `Executor::redis_result`); here renewals still
    // succeed, so readiness rightly stays up and is not asserted.
    let _: i64 = fleet
        .redis
        .cmd(&["HDEL", &keys().meta, "generation_floor"])
        .await;
    fleet.wait_for_table(&units, Duration::from_secs(5)).await;
    wait_for("the error clears", Duration::from_secs(5), || async {
        holder_status(&fleet).await.last_error.is_none()
    })
    .await;
    fleet.shutdown().await;
}

/// Review item 17: a coordinator that died (a panic) left `/healthz` at 200.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_fails_once_the_coordinator_is_gone() {
    let redis = RedisServer::start();
    let replica = distributor::Distributor::start(fast_config(&redis.url(), "r")).unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let stop = tokio_util::sync::CancellationToken::new();
    let server = tokio::spawn(distributor::ops::http::serve(
        listener,
        replica.status(),
        replica.metrics(),
        Duration::from_secs(5),
        stop.clone().cancelled_owned(),
    ));
    wait_for("healthy", Duration::from_secs(5), || async {
        http_get(port, "/healthz")
            .await
            .is_ok_and(|(c, _)| c == 200)
    })
    .await;
    // The coordinator task ends without a shutdown (as after a panic).
    replica.abort();
    wait_for("unhealthy", Duration::from_secs(5), || async {
        http_get(port, "/healthz")
            .await
            .is_ok_and(|(c, body)| c == 503 && body.contains("coordinator stopped"))
    })
    .await;
    stop.cancel();
    server.await.unwrap().unwrap();
}

/// Review item 18: ping TLS files that fail to load made an embedded replica
/// ping in plaintext; and lease timings that break the safety rule panicked.
#[tokio::test]
async fn an_embedder_gets_an_error_for_unusable_settings() {
    let redis = RedisServer::start();
    let mut c = fast_config(&redis.url(), "r");
    c.ping_tls = Some(distributor::config::PingTls {
        files: distributor::edge::tls::TlsFiles {
            ca: vec!["/nonexistent/ca.pem".into()],
            cert: None,
            key: None,
        },
        domain: None,
    });
    assert!(matches!(
        distributor::Distributor::start(c),
        Err(StartError::Tls(_))
    ));
    let mut c = fast_config(&redis.url(), "r");
    c.lease.renew_interval = c.lease.renew_deadline + Duration::from_millis(1);
    let e = distributor::Distributor::start(c).err().expect("refused");
    assert!(e.to_string().contains("renew interval"), "{e}");
}

/// Probe item 11: `workunits set` replaced a key of another type (printing
/// `set 2 units`).
#[tokio::test]
async fn workunits_set_refuses_a_key_of_another_type() {
    let redis = RedisServer::start();
    let () = redis.cmd(&["HSET", UNITS, "keep", "me"]).await;
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_distributor"))
        .args([
            &format!("-redis-url={}", redis.url()),
            &format!("-workunits-namespace={UNITS}"),
            "workunits",
            "set",
            "a",
            "b",
        ])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "must fail: {stderr}");
    assert!(
        stderr.contains(&format!("key {UNITS:?} holds a hash, expected a list")),
        "{stderr}"
    );
    let kept: String = redis.cmd(&["HGET", UNITS, "keep"]).await;
    assert_eq!(kept, "me", "the hash is untouched");
    // A list (or nothing) is replaced as before.
    let _: i64 = redis.cmd(&["DEL", UNITS]).await;
    let store = Store::open(&redis.url(), TABLE, Duration::from_secs(2)).unwrap();
    let many: Vec<String> = (0..2500).map(|i| format!("u{i}")).collect();
    store.replace_list(UNITS, &many).await.unwrap();
    let stored: Vec<String> = redis.cmd(&["LRANGE", UNITS, "0", "-1"]).await;
    assert_eq!(stored, many);
}

/// Review item 23: `status` said only "has never answered a ping", not why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_says_why_a_member_fails() {
    let units = units(4);
    let (fleet, _) = Fleet::converged(|_| {}, 1, 1, &units).await;
    // Port 1 on loopback refuses connections.
    let () = fleet.redis.cmd(&["RPUSH", SERVICES, "127.0.0.1:1"]).await;
    wait_for(
        "the failure is recorded",
        Duration::from_secs(5),
        || async {
            let h: Option<String> = fleet
                .redis
                .cmd(&["HGET", &keys().liveness, "127.0.0.1:1"])
                .await;
            h.is_some()
        },
    )
    .await;
    let out = cli(&fleet.redis.url(), &["status"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("127.0.0.1:1")
            && text.contains("has never answered a ping: connection refused"),
        "{text}"
    );
    fleet.shutdown().await;
}

/// Probe item 3, member side: with an unreadable `meta.generation` (the float
/// the old poisoning left behind), `Member` stopped following its row. It
/// follows it, stopping what the row lacks, but starts nothing until a read
/// shows the generation: the token of a unit it started would be its last
/// generation, maybe the last owner's (the fleet simulation found that).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_follows_its_row_even_with_an_unreadable_generation() {
    let units = units(6);
    let (fleet, _) = Fleet::converged(|_| {}, 2, 1, &units).await;
    let () = fleet
        .redis
        .cmd(&["HSET", &keys().meta, "generation", "1.8446744073709552e+19"])
        .await;
    let member = fleet.members[0].as_ref().unwrap();
    let () = fleet
        .redis
        .cmd(&["HSET", TABLE, member.id(), "moved-here"])
        .await;
    let mut rx = member.assignment();
    wait_for(
        "the member stops what its row lacks",
        Duration::from_secs(5),
        || {
            let a = rx.borrow_and_update().clone();
            async move {
                assert!(
                    !a.units.iter().any(|u| u == "moved-here"),
                    "started a unit without its generation: {a:?}"
                );
                a.units.is_empty() && a.in_table
            }
        },
    )
    .await;
    fleet.shutdown().await;
}

/// Review item 20: a holder that could not reach the workers emptied the
/// table. Most of a group failing at once is held until confirmed; alone, a
/// replica confirms it after `-mass-failure-confirm`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lone_holder_holds_a_mass_failure_until_it_is_confirmed() {
    let units = units(16);
    let confirm = Duration::from_millis(1500);
    let (mut fleet, before) =
        Fleet::converged(|c| c.mass_failure_confirm = confirm, 4, 1, &units).await;
    let t0 = std::time::Instant::now();
    for i in 0..3 {
        fleet.members[i].take().unwrap().abort();
    }
    wait_for(
        "the suspects are reported",
        Duration::from_secs(5),
        || async { holder_status(&fleet).await.suspects == 3 },
    )
    .await;
    // Until the confirmation time, the table stays as it was.
    while t0.elapsed() < confirm - Duration::from_millis(300) {
        assert_eq!(fleet.table().await, before, "acted before confirmation");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let table = fleet.wait_for_table(&units, Duration::from_secs(5)).await;
    assert!(
        t0.elapsed() >= confirm,
        "confirmed after {:?}",
        t0.elapsed()
    );
    assert_eq!(table.len(), 1);
    assert_eq!(holder_status(&fleet).await.suspects, 0);
    fleet.shutdown().await;
}

/// Review item 20: the next holder clears suspects that answer it, without
/// moving a unit (their units were kept), and confirms at once those that
/// fail for it too (the suspecting holder hands the lease over).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_replica_clears_or_confirms_a_mass_failure() {
    let units = units(16);
    let (mut fleet, before) = Fleet::converged(
        |c| c.mass_failure_confirm = Duration::from_secs(60),
        4,
        1,
        &units,
    )
    .await;
    let generation = fleet.generation().await;
    // A holder that could not reach three live members suspected them (and
    // recorded them failing), then handed over.
    fleet.replicas[0].take().unwrap().shutdown().await;
    let now = distributor::unix_ms();
    for i in 0..3 {
        let m = fleet.member_id(i);
        let () = fleet
            .redis
            .cmd(&[
                "HSET",
                &keys().suspects,
                &m,
                &format!("{now} replica-cut-off"),
            ])
            .await;
        let () = fleet
            .redis
            .cmd(&["HSET", &keys().liveness, &m, &format!("1 1 {now} timeout")])
            .await;
    }
    fleet.add_replica();
    let h = fleet.wait_for_holder().await;
    wait_for(
        "the suspects are cleared",
        Duration::from_secs(5),
        || async {
            let n: usize = fleet.redis.cmd(&["HLEN", &keys().suspects]).await;
            n == 0 && fleet.replicas[h].as_ref().unwrap().status().borrow().cycles >= 2
        },
    )
    .await;
    assert_eq!(fleet.table().await, before, "no unit moved");
    assert_eq!(fleet.generation().await, generation, "no table was written");
    fleet.shutdown().await;

    // Three of four fail for real, with two replicas: the holder suspects
    // them and hands over; the other confirms at once, long before the 60 s a
    // lone replica would wait.
    let mut fleet = Fleet::new(RedisServer::start());
    fleet.config.mass_failure_confirm = Duration::from_secs(60);
    fleet.set_units(&units).await;
    // Three share one switch, so that every cycle sees all three or none.
    let three = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let mut flaky = Vec::new();
    for _ in 0..3 {
        flaky.push(FlakyWorker::start_sharing(&fleet, three.clone()).await);
    }
    flaky.push(FlakyWorker::start(&fleet).await);
    fleet.add_replica();
    fleet.add_replica();
    let all: Vec<String> = flaky.iter().map(|f| f.addr.clone()).collect();
    fleet
        .wait_for_table_with(&units, &all, Duration::from_secs(10))
        .await;
    let first = fleet.wait_for_holder().await;
    let t0 = std::time::Instant::now();
    flaky[0].set_healthy(false);
    fleet
        .wait_for_table_with(&units, &all[3..], Duration::from_secs(10))
        .await;
    eprintln!(
        "a mass failure confirmed by another replica in {:?}",
        t0.elapsed()
    );
    let samples = parse_metrics(&fleet.replicas[first].as_ref().unwrap().metrics().encode());
    assert_eq!(
        metric(
            &samples,
            "distributor_lease_transitions_total",
            &[("transition", "abdicated")]
        ),
        Some(1.0)
    );
    assert_ne!(fleet.wait_for_holder().await, first);
    fleet.shutdown().await;
}

/// Review item 19: `-forget-after` acted on one replica's view and was not
/// fenced, and malformed entries were never forgotten.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forget_after_is_fenced_spares_mass_failures_and_covers_malformed_entries() {
    let units = units(8);
    let (mut fleet, _) = Fleet::converged(
        |c| {
            c.forget_after = Some(Duration::from_millis(300));
            c.mass_failure_confirm = Duration::from_millis(500);
        },
        4,
        1,
        &units,
    )
    .await;
    // Malformed entries, one of them not UTF-8, are forgotten like failing members.
    let mut c = fleet.redis.conn().await;
    let () = redis::cmd("RPUSH")
        .arg(SERVICES)
        .arg("nonsense")
        .arg(&b"bad\xff:1"[..])
        .query_async(&mut c)
        .await
        .unwrap();
    wait_for(
        "malformed entries are forgotten",
        Duration::from_secs(5),
        || async {
            let listed: Vec<Vec<u8>> = fleet.redis.cmd(&["LRANGE", SERVICES, "0", "-1"]).await;
            listed.len() == 4
        },
    )
    .await;

    // Three of four die at once: confirmed (alone) after 500 ms, but the group
    // is mostly failing, so nobody is forgotten.
    for i in 0..3 {
        fleet.members[i].take().unwrap().abort();
    }
    let live = fleet.live_member_ids();
    fleet
        .wait_for_table_with(&units, &[], Duration::from_secs(5))
        .await;
    let s = holder_status(&fleet).await;
    wait_for("ten more cycles", Duration::from_secs(10), || async {
        holder_status(&fleet).await.cycles >= s.cycles + 10
    })
    .await;
    let listed: Vec<String> = fleet.redis.cmd(&["LRANGE", SERVICES, "0", "-1"]).await;
    assert_eq!(
        listed.len(),
        4,
        "nobody forgotten in a mostly failing group: {listed:?}"
    );
    assert_eq!(live.len(), 1);

    // A stale holder's grant cannot forget anyone.
    let store = Store::open(&fleet.redis.url(), TABLE, Duration::from_secs(2)).unwrap();
    let stale = distributor::edge::redis::LeaseGrant {
        token: "not-the-holder".into(),
        epoch: 1,
    };
    let e = store
        .forget_many(
            &stale,
            &[(SERVICES.to_string(), listed[0].as_bytes().to_vec())],
        )
        .await
        .unwrap_err();
    assert!(matches!(e, StoreError::Fenced { .. }), "{e}");
    let after: Vec<String> = fleet.redis.cmd(&["LRANGE", SERVICES, "0", "-1"]).await;
    assert_eq!(after, listed);
    fleet.shutdown().await;
}

/// Review item 21: with Redis replication, a lease or table write not yet on
/// a replica can be lost with a failed-over master. With
/// `-redis-wait-replicas`, nothing counts until a replica has it: a holder
/// whose replica is gone stops acting, and what it acted on is on the replica.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_count_only_once_a_replica_has_them() {
    let master = RedisServer::start();
    let replica_args = ["--replicaof", "127.0.0.1", &master.port().to_string()];
    let mut replica = RedisServer::start_with(&replica_args);
    wait_for(
        "the replica is in sync",
        Duration::from_secs(10),
        || async {
            let info: String = replica.cmd(&["INFO", "replication"]).await;
            info.contains("master_link_status:up")
        },
    )
    .await;
    let units = units(8);
    let (mut fleet, before) = Fleet::converged_on(
        master,
        |c| {
            c.redis_wait_replicas = 1;
            c.redis_wait_timeout = Duration::from_millis(100);
        },
        2,
        2,
        &units,
    )
    .await;
    // What the holder acts on is on the replica: lease, epoch, table.
    let h = fleet.wait_for_holder().await;
    let k = keys();
    let on_master: Vec<Option<String>> = fleet.redis.cmd(&["MGET", &k.lease, &k.epoch]).await;
    wait_for(
        "the replica has the lease",
        Duration::from_secs(2),
        || async {
            let on_replica: Vec<Option<String>> = replica.cmd(&["MGET", &k.lease, &k.epoch]).await;
            on_replica == on_master
        },
    )
    .await;
    let replica_table: std::collections::HashMap<String, String> =
        replica.cmd(&["HGETALL", TABLE]).await;
    assert_eq!(MatchingTable::from_rows(replica_table), before);

    // The replica goes away: renewals are not acknowledged, the holder steps
    // down before its lease could expire, and nobody else can act either.
    replica.kill();
    wait_for("nobody acts", Duration::from_secs(5), || async {
        fleet.holder().is_none()
    })
    .await;
    let s = fleet.statuses()[h].clone();
    assert_eq!(s.role, Role::Standby);
    fleet.members[0].take().unwrap().abort();
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        fleet.table().await,
        before,
        "nobody wrote without a replica"
    );

    // The replica is back: a holder acts again.
    replica = RedisServer::start_with(&replica_args);
    wait_for("a holder again", Duration::from_secs(10), || async {
        fleet.holder().is_some()
    })
    .await;
    fleet.wait_for_table(&units, Duration::from_secs(10)).await;
    drop(replica);
    fleet.shutdown().await;
}

/// Probe item 13: 100,000 distinct bad units gave 100,000 WARN lines in one
/// cycle, and a dead member a WARN every cycle forever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bursts_and_lasting_failures_are_logged_summarised() {
    let mut fleet = Fleet::new(RedisServer::start());
    let mut units = units(10);
    units.extend((0..100_000).map(|i| format!("bad,{i}")));
    fleet.set_units(&units).await;
    fleet.add_member().await;
    fleet.add_member().await;
    // A member that refuses every ping, for many cycles.
    let () = fleet.redis.cmd(&["RPUSH", SERVICES, "127.0.0.1:1"]).await;
    let dir = std::env::temp_dir().join(format!("distributor-logs-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let log_path = dir.join("daemon.log");
    let log = std::fs::File::create(&log_path).unwrap();
    let http = free_port();
    let mut daemon = std::process::Command::new(env!("CARGO_BIN_EXE_distributor"))
        .args([
            &format!("-redis-url={}", fleet.redis.url()),
            &format!("-services-namespaces={SERVICES}"),
            &format!("-workunits-namespace={UNITS}"),
            &format!("-distribution-namespace={TABLE}"),
            "-poll-interval=50ms",
            "-census-interval=500ms",
            &format!("-http-addr=127.0.0.1:{http}"),
            "-log=warn",
        ])
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .unwrap();
    let live: Vec<String> = fleet.live_member_ids();
    let good = &units[..10];
    fleet
        .wait_for_table_with(good, &[], Duration::from_secs(20))
        .await;
    // Ten more cycles (each re-reads the 100,000 bad units).
    let cycles = |body: &str| {
        metric(
            &parse_metrics(body),
            "distributor_cycles_total",
            &[("outcome", "ok")],
        )
        .unwrap_or(0.0)
    };
    let start = cycles(&http_get(http, "/metrics").await.unwrap().1);
    wait_for("ten more cycles", Duration::from_secs(60), || async {
        http_get(http, "/metrics")
            .await
            .is_ok_and(|(_, b)| cycles(&b) >= start + 10.0)
    })
    .await;
    let _ = std::process::Command::new("kill")
        .args(["-TERM", &daemon.id().to_string()])
        .status();
    daemon.wait().unwrap();
    let text = std::fs::read_to_string(&log_path).unwrap();
    let warns: Vec<&str> = text.lines().filter(|l| l.contains("WARN")).collect();
    let invalid = warns.iter().filter(|l| l.contains("invalid input")).count();
    assert!(invalid <= 6, "{invalid} lines about invalid input");
    assert!(
        warns
            .iter()
            .any(|l| l.contains("more new invalid inputs") && l.contains("99995")),
        "a count of the rest: {warns:#?}"
    );
    let refused = warns.iter().filter(|l| l.contains("127.0.0.1:1")).count();
    assert!(
        refused <= 1,
        "the dead member is logged once, not every cycle: {refused}"
    );
    assert!(
        warns.len() < 30,
        "{} WARN lines:\n{}",
        warns.len(),
        warns.join("\n")
    );
    assert_eq!(live.len(), 2);
    std::fs::remove_dir_all(&dir).unwrap();
    fleet.shutdown().await;
}

/// Review item 14: the census ran inside the coordinator's loop, on the lease
/// connection: a slow census step held up renewals, and a healthy holder
/// lapsed. Here every connection that carries a census step answers 1.5 s
/// late (longer than the renew deadline of 700 ms) from then on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_census_never_delays_a_renewal() {
    let redis = RedisServer::start();
    let proxy =
        DelayingProxy::start(redis.port(), b"$4\r\nINCR\r\n", Duration::from_millis(1500)).await;
    let url = format!("redis://127.0.0.1:{}", proxy.port);
    let units = units(6);
    let (fleet, _) = Fleet::converged_on(redis, |c| c.redis_url = url, 2, 1, &units).await;
    let h = fleet.wait_for_holder().await;
    let epoch = fleet.statuses()[h].epoch;
    // Census steps every 400 ms, each answered 1.5 s late (so they time out):
    // for five seconds the holder must keep renewing.
    let until = std::time::Instant::now() + Duration::from_secs(5);
    while std::time::Instant::now() < until {
        let s = fleet.statuses()[h].clone();
        assert_eq!(
            (s.role, s.epoch),
            (Role::Holder, epoch),
            "the holder lapsed"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let s = fleet.statuses()[h].clone();
    assert_eq!(
        (s.role, s.epoch),
        (Role::Holder, epoch),
        "the holder never lapsed"
    );
    let samples = parse_metrics(&fleet.replicas[h].as_ref().unwrap().metrics().encode());
    assert_eq!(
        metric(
            &samples,
            "distributor_lease_transitions_total",
            &[("transition", "lapsed")]
        ),
        None
    );
    drop(proxy);
    fleet.shutdown().await;
}

/// A worker whose pings take `delay`, and that stops answering at all (the
/// request hangs, as behind a dropped route) while `cut` holds, also for a
/// ping already in flight when the cut comes.
struct CuttableWorker {
    addr: String,
    server: tokio::task::JoinHandle<()>,
}

#[derive(Clone)]
struct Cuttable {
    cut: std::sync::Arc<std::sync::atomic::AtomicBool>,
    delay: Duration,
    /// Told when a ping arrives.
    arrived: Option<tokio::sync::mpsc::Sender<()>>,
}

#[tonic::async_trait]
impl distributor::proto::grpc_pinger_server::GrpcPinger for Cuttable {
    async fn ping(&self, _: tonic::Request<()>) -> Result<tonic::Response<()>, tonic::Status> {
        if let Some(tx) = &self.arrived {
            let _ = tx.try_send(());
        }
        tokio::time::sleep(self.delay).await;
        while self.cut.load(std::sync::atomic::Ordering::SeqCst) {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        Ok(tonic::Response::new(()))
    }
}

impl CuttableWorker {
    async fn start(
        fleet: &Fleet,
        cut: std::sync::Arc<std::sync::atomic::AtomicBool>,
        delay: Duration,
        arrived: Option<tokio::sync::mpsc::Sender<()>>,
    ) -> CuttableWorker {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let service = distributor::proto::grpc_pinger_server::GrpcPingerServer::new(Cuttable {
            cut,
            delay,
            arrived,
        });
        let incoming = tokio_stream::wrappers::TcpListenerStream::new(listener);
        let server = tokio::spawn(async move {
            let _ = tonic::transport::Server::builder()
                .add_service(service)
                .serve_with_incoming(incoming)
                .await;
        });
        let () = fleet.redis.cmd(&["RPUSH", SERVICES, &addr]).await;
        CuttableWorker { addr, server }
    }
}

/// Found by chaos scenario 9b: a cut of the holder's network that lands in
/// the middle of a ping round failed one worker (whose ping was in flight)
/// one cycle before the others: 1 of 5 is no mass failure, so its units
/// moved at once. Now the cycle that sees a live member fail while few others
/// answered waits for its round, and the whole cut is one mass failure.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_in_the_middle_of_a_ping_round_moves_no_unit() {
    let units = units(20);
    let mut fleet = Fleet::new(RedisServer::start());
    fleet.config.mass_failure_confirm = Duration::from_secs(60);
    fleet.set_units(&units).await;
    let cut = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut workers = Vec::new();
    // One slow worker (its ping is in flight when the cut comes), four fast.
    let (tx, mut arrived) = tokio::sync::mpsc::channel(64);
    workers.push(
        CuttableWorker::start(&fleet, cut.clone(), Duration::from_millis(60), Some(tx)).await,
    );
    for _ in 0..4 {
        workers.push(CuttableWorker::start(&fleet, cut.clone(), Duration::ZERO, None).await);
    }
    let all: Vec<String> = workers.iter().map(|w| w.addr.clone()).collect();
    fleet.add_replica();
    let before = fleet
        .wait_for_table_with(&units, &all, Duration::from_secs(10))
        .await;
    let generation = fleet.generation().await;
    let h = fleet.wait_for_holder().await;
    let replica = fleet.replicas[h].as_ref().unwrap();
    // Cut 20 ms into a round: the fast pings are answered, the slow one is lost.
    while arrived.try_recv().is_ok() {}
    arrived.recv().await.unwrap();
    tokio::time::sleep(Duration::from_millis(20)).await;
    let since = std::time::Instant::now();
    cut.store(true, std::sync::atomic::Ordering::SeqCst);
    wait_for("all five suspected", Duration::from_secs(10), || async {
        replica.status().borrow().suspects == 5
    })
    .await;
    assert_eq!(fleet.table().await, before, "no unit moved");
    assert_eq!(fleet.generation().await, generation, "no table was written");
    eprintln!("mass failure held {:?} after the cut", since.elapsed());
    cut.store(false, std::sync::atomic::Ordering::SeqCst);
    for w in workers {
        w.server.abort();
    }
    fleet.shutdown().await;
}

/// Review item 23: the `TYPE` call that names a wrong-typed key in an error
/// is bounded like every other call. A Redis that answers it late gives the
/// error within the call deadline (as the plain `WRONGTYPE` reply), never a
/// hang of the caller.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_type_lookup_after_a_wrongtype_reply_is_bounded() {
    let redis = RedisServer::start();
    let () = redis.cmd(&["HSET", UNITS, "keep", "me"]).await;
    let proxy =
        DelayingProxy::start(redis.port(), b"$4\r\nTYPE\r\n", Duration::from_secs(30)).await;
    let url = format!("redis://127.0.0.1:{}", proxy.port);
    let store = Store::open(&url, TABLE, Duration::from_millis(500)).unwrap();
    // Unbounded, this would wait for the delayed TYPE reply (30 s).
    let r = tokio::time::timeout(Duration::from_secs(10), store.list(UNITS))
        .await
        .expect("the TYPE lookup is bounded by the call deadline");
    let e = r.expect_err("a hash is not a list");
    assert!(e.to_string().to_lowercase().contains("wrongtype"), "{e}");
    // Without the delay, the same call names the key and its type.
    let store = Store::open(&redis.url(), TABLE, Duration::from_millis(500)).unwrap();
    let e = store.list(UNITS).await.expect_err("a hash is not a list");
    assert!(
        e.to_string()
            .contains(&format!("key {UNITS:?} holds a hash")),
        "{e}"
    );
}
