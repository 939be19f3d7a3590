//! Redis Cluster: the core scenarios against a real 3-master cluster. The
//! lists live in other slots than the table; coordination keys share its slot.

use std::time::Duration;

use distributor::core::keys::slot;
use distributor::edge::redis::{
    Acquisition, Claim, Commit, Committed, ListLimits, RedisOptions, Store,
};
use distributor::{MatchingTable, Role};
use redis::AsyncCommands;

use crate::support::*;

const LIMITS: ListLimits = ListLimits {
    entries: 100,
    bytes: 1 << 20,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_table_member_death_and_holder_failover() {
    let units = units(30);
    // The point of the exercise: lists and table in different slots.
    assert_ne!(slot(SERVICES), slot(TABLE));
    assert_ne!(slot(UNITS), slot(TABLE));
    let (mut fleet, before) =
        Fleet::converged_on(RedisCluster::start(3), |_| {}, 4, 3, &units).await;

    // A member dies: its units move, on the cluster too.
    fleet.members[0].take().unwrap().abort();
    let after_death = fleet.wait_for_table(&units, Duration::from_secs(15)).await;
    assert_ne!(after_death, before);

    // The holder crashes: the standby takes over with the identical table.
    wait_for("a holder", Duration::from_secs(10), || async {
        fleet.holder().is_some()
    })
    .await;
    let generation = fleet.generation().await;
    let old = fleet.holder().unwrap();
    let old_epoch = fleet.replicas[old]
        .as_ref()
        .unwrap()
        .status()
        .borrow()
        .epoch;
    fleet.replicas[old].take().unwrap().abort();
    wait_for(
        "a new holder with a few cycles",
        Duration::from_secs(10),
        || async {
            fleet.replicas.iter().flatten().any(|r| {
                let s = r.status().borrow().clone();
                s.role == Role::Holder && s.epoch > old_epoch && s.cycles >= 3
            })
        },
    )
    .await;
    assert_eq!(fleet.table().await, after_death);
    assert_eq!(
        fleet.generation().await,
        generation,
        "no reshuffle, no write"
    );
    // A graceful stop hands over by notification (classic pub/sub crosses the
    // cluster bus), well before a retry interval (300 ms) or the TTL (1 s).
    let h = fleet.holder().unwrap();
    let epoch = fleet.replicas[h].as_ref().unwrap().status().borrow().epoch;
    fleet.replicas[h].take().unwrap().shutdown().await;
    let started = std::time::Instant::now();
    wait_for("handover", Duration::from_secs(5), || async {
        fleet.replicas.iter().flatten().any(|r| {
            let s = r.status().borrow().clone();
            s.role == Role::Holder && s.epoch > epoch
        })
    })
    .await;
    let handover = started.elapsed();
    assert!(
        handover < Duration::from_millis(250),
        "handover took {handover:?}: no notification?"
    );
    assert_eq!(fleet.table().await, after_death);
    // The census works on the cluster too.
    wait_for("census", Duration::from_secs(10), || async {
        fleet
            .replicas
            .iter()
            .flatten()
            .all(|r| r.status().borrow().census.is_some())
    })
    .await;
    fleet.shutdown().await;
}

#[tokio::test]
async fn cluster_fences_a_stale_holder() {
    let cluster = RedisCluster::start(3);
    let opts = RedisOptions {
        cluster: true,
        ..RedisOptions::from_urls(&cluster.urls())
    };
    let store = Store::connect(&opts, TABLE, Duration::from_secs(2))
        .unwrap()
        .with_limits(LIMITS);
    let claim = |id| Claim {
        ttl: Duration::from_secs(30),
        epoch_floor: 0,
        generation_floor: 0,
        holder_id: id,
        now_ms: 1,
        failure_threshold: 1,
        takeover: None,
    };
    let Acquisition::Acquired(a) = store.acquire(&claim("a")).await.unwrap() else {
        panic!()
    };
    let mut c = cluster.conn().await;
    let () = c.del(keys().lease).await.unwrap();
    let Acquisition::Acquired(b) = store.acquire(&claim("b")).await.unwrap() else {
        panic!()
    };
    assert_eq!(b.epoch, a.epoch + 1);
    let none = distributor::core::liveness::HealthChanges::default();
    let t = MatchingTable::from_rows([("w:1".to_string(), "u".to_string())]);
    let commit = |id| Commit {
        table: Some(&t),
        now_ms: 2,
        ..bare_commit(id, &none)
    };
    assert_eq!(
        store.commit(&a, &commit("a")).await.unwrap(),
        Committed::Fenced {
            reason: "lease".into()
        }
    );
    assert_eq!(
        store.commit(&b, &commit("b")).await.unwrap(),
        Committed::Written {
            generation: Some(1),
            version: 1,
        }
    );
    // Multi-slot reads work: lists in other slots, table state in the table's.
    let () = c.rpush(UNITS, "x").await.unwrap();
    let services = [SERVICES.to_string()];
    let none = std::collections::HashMap::new();
    let snap = store
        .read_snapshot(&services, UNITS, &none, None)
        .await
        .unwrap();
    assert_eq!(snap.units.entries, Some(vec![b"x".to_vec()]));
    assert_eq!(snap.stored_digest.as_deref(), Some(t.digest()));
    // Each list's guard follows MOVED to its own slot's node: unchanged lists
    // are not read again, a changed one is.
    let held: std::collections::HashMap<String, u64> = snap
        .groups
        .iter()
        .chain([&snap.units])
        .map(|l| (l.key.clone(), l.version))
        .collect();
    let again = store
        .read_snapshot(&services, UNITS, &held, None)
        .await
        .unwrap();
    assert_eq!(again.units.entries, None);
    assert_eq!(again.units.version, snap.units.version);
    assert_eq!(again.groups[0].entries, None);
    let () = c.rpush(UNITS, "y").await.unwrap();
    let changed = store
        .read_snapshot(&services, UNITS, &held, None)
        .await
        .unwrap();
    assert_eq!(
        changed.units.entries,
        Some(vec![b"x".to_vec(), b"y".to_vec()])
    );
    assert_eq!(changed.groups[0].entries, None);
    // A member's row read on a cluster names no connection: `CLIENT ID` has
    // no key to route it to the row's node by.
    assert_eq!(
        {
            let r = store.read_row("w:1").await.unwrap();
            (r.row, r.generation.unwrap(), r.client)
        },
        (Some("u".to_string()), Some(1), None)
    );
}
