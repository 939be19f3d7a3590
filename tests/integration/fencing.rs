//! Fencing: Redis itself rejects a write from anyone but the current holder.

use std::time::Duration;

use distributor::MatchingTable;
use distributor::core::liveness::HealthChanges;
use distributor::edge::redis::scripts::COMMIT;
use distributor::edge::redis::{Acquisition, Claim, Commit, Committed, LostLease, Renewal, Store};

use crate::support::*;

fn claim(ttl: Duration, epoch_floor: u64, holder_id: &str, now_ms: u64) -> Claim<'_> {
    Claim {
        ttl,
        epoch_floor,
        generation_floor: 0,
        holder_id,
        now_ms,
        failure_threshold: 1,
        takeover: None,
    }
}

fn table(rows: &[(&str, &str)]) -> MatchingTable {
    MatchingTable::from_rows(rows.iter().map(|(a, b)| (a.to_string(), b.to_string())))
}

#[tokio::test]
async fn a_stale_holder_cannot_write() {
    let redis = RedisServer::start();
    let store = Store::open(&redis.url(), TABLE, Duration::from_secs(2)).unwrap();
    let ttl = Duration::from_secs(30);
    let Acquisition::Acquired(a) = store.acquire(&claim(ttl, 0, "a", 1)).await.unwrap() else {
        panic!()
    };
    assert_eq!(a.epoch, 1);
    let held = store.acquire(&claim(ttl, 0, "b", 2)).await.unwrap();
    assert!(
        matches!(held, Acquisition::Held { ref holder, epoch: 1, pttl: Some(_), generation: 0, foreign: None, .. } if holder == "a"),
        "{held:?}"
    );

    let none = HealthChanges::default();
    let commit = |t: &'static [(&'static str, &'static str)]| (table(t), none.clone());
    let (t1, h1) = commit(&[("w1", "x,y")]);
    let c = Commit {
        table: Some(&t1),
        now_ms: 3,
        ..bare_commit("a", &h1)
    };
    assert_eq!(
        store.commit(&a, &c).await.unwrap(),
        Committed::Written {
            generation: Some(1),
            version: 1,
        }
    );

    // The lease lapses (a paused process); b takes over with a new epoch.
    let () = redis.cmd(&["DEL", &keys().lease]).await;
    let Acquisition::Acquired(b) = store.acquire(&claim(ttl, 0, "b", 4)).await.unwrap() else {
        panic!()
    };
    assert_eq!(b.epoch, 2);

    // a wakes up and tries to write: rejected inside Redis, table untouched.
    let (t2, h2) = commit(&[("w1", "stale")]);
    let stale = Commit {
        table: Some(&t2),
        now_ms: 5,
        ..bare_commit("a", &h2)
    };
    assert_eq!(
        store.commit(&a, &stale).await.unwrap(),
        Committed::Fenced {
            reason: "lease".into()
        }
    );
    assert_eq!(store.read_table().await.unwrap(), t1);
    assert_eq!(
        store.renew(&a, ttl, Duration::from_secs(1)).await.unwrap(),
        Renewal::Lost(LostLease::Taken)
    );
    assert!(
        !store.release(&a).await.unwrap(),
        "a cannot release b's lease"
    );

    // Right token, wrong epoch: also rejected.
    let forged = distributor::edge::redis::LeaseGrant {
        token: b.token.clone(),
        epoch: 1,
    };
    assert_eq!(
        store.commit(&forged, &stale).await.unwrap(),
        Committed::Fenced {
            reason: "epoch".into()
        }
    );

    // b writes: the whole hash is replaced, stale fields included.
    let (t3, h3) = commit(&[("w2", "x"), ("w3", "y")]);
    let c = Commit {
        table: Some(&t3),
        now_ms: 6,
        ..bare_commit("b", &h3)
    };
    assert_eq!(
        store.commit(&b, &c).await.unwrap(),
        Committed::Written {
            generation: Some(2),
            version: 2,
        }
    );
    assert_eq!(store.read_table().await.unwrap(), t3);
    let digest: String = redis.cmd(&["HGET", &keys().meta, "digest"]).await;
    assert_eq!(digest, t3.digest());
    assert!(store.release(&b).await.unwrap());
}

#[tokio::test]
async fn epochs_and_generations_survive_redis_data_loss() {
    let mut redis = RedisServer::start();
    let store = Store::open(&redis.url(), TABLE, Duration::from_secs(2)).unwrap();
    let ttl = Duration::from_secs(30);
    redis.restart();
    // The caller remembers epoch 7 and generation 41 from before the loss.
    let got = loop {
        match store.acquire(&claim(ttl, 7, "a", 1)).await {
            Ok(Acquisition::Acquired(g)) => break g,
            Ok(other) => panic!("{other:?}"),
            Err(e) => assert!(e.is_retryable(), "{e}"),
        }
    };
    assert_eq!(got.epoch, 8);
    let none = HealthChanges::default();
    let t = table(&[("w", "u")]);
    let c = Commit {
        table: Some(&t),
        generation_floor: 41,
        ..bare_commit("a", &none)
    };
    assert_eq!(
        store.commit(&got, &c).await.unwrap(),
        Committed::Written {
            generation: Some(42),
            version: 1,
        }
    );
}

#[tokio::test]
async fn big_tables_are_written_in_one_script_call() {
    let redis = RedisServer::start();
    let store = Store::open(&redis.url(), TABLE, Duration::from_secs(5)).unwrap();
    let Acquisition::Acquired(g) = store
        .acquire(&claim(Duration::from_secs(30), 0, "a", 1))
        .await
        .unwrap()
    else {
        panic!()
    };
    // More fields than Lua's unpack() takes at once: the script must chunk.
    let rows: Vec<(String, String)> = (0..20_000)
        .map(|i| (format!("m{i}:1"), format!("u{i}")))
        .collect();
    let t = MatchingTable::from_rows(rows);
    let none = HealthChanges::default();
    let c = Commit {
        table: Some(&t),
        ..bare_commit("a", &none)
    };
    assert_eq!(
        store.commit(&g, &c).await.unwrap(),
        Committed::Written {
            generation: Some(1),
            version: 1,
        }
    );
    let n: usize = redis.cmd(&["HLEN", TABLE]).await;
    assert_eq!(n, 20_000);
    assert_eq!(store.read_table().await.unwrap(), t);
}

#[tokio::test]
async fn a_replica_that_saw_a_higher_epoch_fences_a_holder_below_it() {
    let redis = RedisServer::start();
    let store = Store::open(&redis.url(), TABLE, Duration::from_secs(2)).unwrap();
    let ttl = Duration::from_secs(30);
    // After a data loss a fresh replica acquires epoch 1, while another replica
    // still remembers epoch 42 and generation 100.
    let Acquisition::Acquired(fresh) = store.acquire(&claim(ttl, 0, "fresh", 1)).await.unwrap()
    else {
        panic!()
    };
    assert_eq!(fresh.epoch, 1);
    let veteran = Claim {
        generation_floor: 100,
        ..claim(ttl, 42, "veteran", 2)
    };
    let held = store.acquire(&veteran).await.unwrap();
    assert!(
        matches!(held, Acquisition::Held { epoch: 42, .. }),
        "{held:?}"
    );
    // The low epoch is fenced: it can neither renew nor write.
    assert_eq!(
        store
            .renew(&fresh, ttl, Duration::from_secs(1))
            .await
            .unwrap(),
        Renewal::Lost(LostLease::Epoch)
    );
    let none = HealthChanges::default();
    let t = table(&[("w", "u")]);
    let c = Commit {
        table: Some(&t),
        now_ms: 3,
        ..bare_commit("fresh", &none)
    };
    assert_eq!(
        store.commit(&fresh, &c).await.unwrap(),
        Committed::Fenced {
            reason: "epoch".into()
        }
    );
    let floor: u64 = redis.cmd(&["HGET", &keys().meta, "generation_floor"]).await;
    assert_eq!(floor, 100, "the generation floor is recorded too");
    let generation: Option<String> = redis.cmd(&["HGET", &keys().meta, "generation"]).await;
    assert_eq!(
        generation, None,
        "a floor is not a table generation: readers never see it as one"
    );
    // Once the lease is free, the next epoch is above everything seen.
    let () = redis.cmd(&["DEL", &keys().lease]).await;
    let Acquisition::Acquired(next) = store.acquire(&veteran).await.unwrap() else {
        panic!()
    };
    assert_eq!(next.epoch, 43);
    let c = Commit {
        table: Some(&t),
        now_ms: 4,
        ..bare_commit("veteran", &none)
    };
    assert_eq!(
        store.commit(&next, &c).await.unwrap(),
        Committed::Written {
            generation: Some(101),
            version: 1,
        }
    );
}

/// Issue 20: a write whose reply timed out may land later, after the holder
/// read Redis again and wrote on. Every write expects `{T}:meta`'s version
/// its plan read: the late one finds another and is refused, so it never
/// overwrites a state its planner did not read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_that_lands_late_is_refused_by_its_version() {
    use crate::support::fault_proxy::{Action, FaultProxy, Match, Occurrence, Rule};

    let redis = RedisServer::start();
    let proxy = FaultProxy::start(redis.port()).await;
    let direct = Store::open(&redis.url(), TABLE, Duration::from_secs(2)).unwrap();
    let late = Store::open(&proxy.url(), TABLE, Duration::from_millis(300)).unwrap();
    let ttl = Duration::from_secs(30);
    let Acquisition::Acquired(grant) = direct.acquire(&claim(ttl, 0, "a", 1)).await.unwrap() else {
        panic!()
    };
    let none = HealthChanges::default();
    let commit = |t: &'static MatchingTable, expected_version: Option<u64>| Commit {
        table: Some(t),
        expected_version,
        ..bare_commit("a", &none)
    };
    let first: &'static MatchingTable = Box::leak(Box::new(table(&[("w1", "x,y")])));
    let lost: &'static MatchingTable = Box::leak(Box::new(table(&[("w2", "x,y")])));
    let next: &'static MatchingTable = Box::leak(Box::new(table(&[("w1", "x"), ("w3", "y")])));
    // The proxied store loads its scripts first, so that the delayed call
    // is the write itself.
    assert_eq!(
        late.commit(&grant, &commit(first, None)).await.unwrap(),
        Committed::Written {
            generation: Some(1),
            version: 1
        }
    );
    // Its next write is held on the way for 1.5 s: the caller times out.
    let held = proxy.add(Rule::new(
        Match::Script(sha1_smol::Sha1::from(COMMIT).digest().to_string()),
        Occurrence::Next(1),
        Action::Delay(Duration::from_millis(1500)),
    ));
    let timed_out = late.commit(&grant, &commit(lost, Some(1))).await;
    assert!(timed_out.is_err(), "{timed_out:?}");
    // The holder reads Redis again (version 1: not applied) and writes on.
    assert_eq!(
        direct.commit(&grant, &commit(next, Some(1))).await.unwrap(),
        Committed::Written {
            generation: Some(2),
            version: 2
        }
    );
    // The late write reaches Redis, and finds version 2.
    wait_for(
        "the delayed write is forwarded",
        Duration::from_secs(5),
        || async { held.fired() == 1 },
    )
    .await;
    // A read on the same connection queues behind it: once it answers,
    // Redis ran the late write.
    let after = late.read_table().await.unwrap();
    assert_eq!(after, *next);
    assert_eq!(direct.read_table().await.unwrap(), *next);
    let version: u64 = redis.cmd(&["HGET", &keys().meta, "version"]).await;
    assert_eq!(version, 2, "the late write changed nothing");
    // Without an expectation (an older holder), a write is not checked.
    assert_eq!(
        direct.commit(&grant, &commit(first, None)).await.unwrap(),
        Committed::Written {
            generation: Some(3),
            version: 3
        }
    );
    // An expectation of another version is refused before any write.
    assert_eq!(
        direct.commit(&grant, &commit(next, Some(2))).await.unwrap(),
        Committed::Outdated {
            version: 3,
            differs: None,
        }
    );
    assert_eq!(direct.read_table().await.unwrap(), *first);
}

/// A revocation is numbered with its write's generation in decimal, also
/// from 10^14 on, where Lua's `tostring` switches to exponent form
/// ("1.2345678901234e+14", which no reader parses back: the unit would wait
/// the longest wait).
#[tokio::test]
async fn a_revocation_above_1e14_is_numbered_in_decimal() {
    let redis = RedisServer::start();
    let store = Store::open(&redis.url(), TABLE, Duration::from_secs(2)).unwrap();
    let Acquisition::Acquired(g) = store
        .acquire(&claim(Duration::from_secs(30), 0, "a", 1))
        .await
        .unwrap()
    else {
        panic!()
    };
    let t = table(&[("w2", "x")]);
    let transit = [("x,g".to_string(), "0 1700000000000 w2 w1".to_string())];
    let none = HealthChanges::default();
    let c = Commit {
        table: Some(&t),
        transit: Some(&transit),
        generation_floor: 123_456_789_012_345,
        ..bare_commit("a", &none)
    };
    assert_eq!(
        store.commit(&g, &c).await.unwrap(),
        Committed::Written {
            generation: Some(123_456_789_012_346),
            version: 1,
        }
    );
    let v: String = redis.cmd(&["HGET", &keys().transit, "x,g"]).await;
    assert_eq!(v, "123456789012346 1700000000000 w2 w1");
}

/// A rows write sends only the rows that differ from the table its plan read,
/// and lands only on that table: the stored digest and every row it replaces
/// are checked in Redis first. An edit of a replaced row, or of the digest,
/// refuses it whole (`Outdated`, naming what differs), with nothing written.
#[tokio::test]
async fn a_rows_write_lands_only_on_the_table_its_plan_read() {
    use distributor::core::delta::TableDelta;

    let redis = RedisServer::start();
    let store = Store::open(&redis.url(), TABLE, Duration::from_secs(2)).unwrap();
    let Acquisition::Acquired(grant) = store
        .acquire(&claim(Duration::from_secs(30), 0, "a", 1))
        .await
        .unwrap()
    else {
        panic!()
    };
    let none = HealthChanges::default();
    let commit = |t: &'static MatchingTable, delta: Option<&'static TableDelta<'static>>| Commit {
        table: Some(t),
        delta,
        assignment: "sticky",
        ..bare_commit("a", &none)
    };
    let leak =
        |rows: &[(&str, &str)]| -> &'static MatchingTable { Box::leak(Box::new(table(rows))) };
    let first = leak(&[("w1", "a,b"), ("w2", "c"), ("w3", "d,e")]);
    assert!(matches!(
        store.commit(&grant, &commit(first, None)).await.unwrap(),
        Committed::Written { .. }
    ));

    // w3 leaves; w4 joins; w1 keeps its row.
    let second = leak(&[("w1", "a,b"), ("w2", "c,d"), ("w4", "e")]);
    let delta: &'static TableDelta<'static> =
        Box::leak(Box::new(TableDelta::between(first, second)));
    assert_eq!(delta.rows(), 3, "{delta:?}");
    assert_eq!(
        store
            .commit(&grant, &commit(second, Some(delta)))
            .await
            .unwrap(),
        Committed::Written {
            generation: Some(2),
            version: 2
        }
    );
    assert_eq!(store.read_table().await.unwrap(), *second);
    let meta: std::collections::HashMap<String, String> =
        redis.cmd(&["HGETALL", &keys().meta]).await;
    assert_eq!(meta["digest"], second.digest());
    assert_eq!(meta["members"], "3");
    assert_eq!(meta["generation"], "2");
    // Redis computes the same digest over what it holds, and counts its rows.
    let (digest, _): (Option<String>, Option<String>) = redis
        .cmd(&[
            "EVAL",
            distributor::edge::redis::scripts::TABLE_STATE,
            "2",
            TABLE,
            &keys().meta,
            "1",
        ])
        .await;
    assert_eq!(digest.as_deref(), Some(second.digest()));

    // An edit of a row the next write replaces: refused, nothing written.
    let third = leak(&[("w1", "a"), ("w2", "b,c,d"), ("w4", "e")]);
    let delta: &'static TableDelta<'static> =
        Box::leak(Box::new(TableDelta::between(second, third)));
    // Each refusal names what differs.
    let refused = async |differs: String| {
        let outcome = store
            .commit(&grant, &commit(third, Some(delta)))
            .await
            .unwrap();
        assert_eq!(
            outcome,
            Committed::Outdated {
                version: 2,
                differs: Some(differs),
            }
        );
    };
    let () = redis.cmd(&["HSET", TABLE, "w2", "c,d,x"]).await;
    refused(format!("{TABLE} w2")).await;
    let stored = store.read_table().await.unwrap();
    assert_eq!(stored.rows()["w2"], "c,d,x");
    assert_eq!(stored.rows()["w1"], "a,b", "nothing was written");
    // A row removed by hand, which the write replaces: refused too (the
    // row count shows it first).
    let () = redis.cmd(&["HSET", TABLE, "w2", "c,d"]).await;
    let () = redis.cmd(&["HDEL", TABLE, "w1"]).await;
    refused(format!("{} members", keys().meta)).await;
    let () = redis.cmd(&["HSET", TABLE, "w1", "a,b"]).await;
    // Another digest stored (another writer's table): refused.
    let () = redis.cmd(&["HSET", &keys().meta, "digest", "0000"]).await;
    refused(format!("{} digest", keys().meta)).await;
    let () = redis
        .cmd(&["HSET", &keys().meta, "digest", second.digest()])
        .await;
    // A row added by hand (a field no replaced row names): the row count
    // stored with the digest shows it.
    let () = redis.cmd(&["HSET", TABLE, "w9", "z"]).await;
    refused(format!("{} members", keys().meta)).await;
    let () = redis.cmd(&["HDEL", TABLE, "w9"]).await;
    // The table as the plan read it again: written.
    assert!(matches!(
        store
            .commit(&grant, &commit(third, Some(delta)))
            .await
            .unwrap(),
        Committed::Written {
            generation: Some(3),
            ..
        }
    ));
    assert_eq!(store.read_table().await.unwrap(), *third);
    let members: String = redis.cmd(&["HGET", &keys().meta, "members"]).await;
    assert_eq!(members, "3");
}
