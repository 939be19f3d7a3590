//! `-join-delay` against a real Redis and real members: a rolling restart
//! in sticky mode (start a newcomer, stop an old member, repeat) changes
//! each unit's owner once, as the change history records it; a newcomer
//! nobody makes room for gets its share when its delay ends.

use std::collections::BTreeMap;
use std::time::Duration;

use distributor::core::table::Assignment;
use serde_json::Value;

use crate::support::*;

const LIMIT: Duration = Duration::from_secs(20);

/// Every table write's entry since `after` (exclusive), oldest first.
fn changes_since(fleet: &Fleet, after: u64) -> Vec<Value> {
    let out = cli(
        &fleet.redis.url(),
        &["history", "--json", "--limit", "1000"],
    );
    assert!(out.status.success());
    let h: Value = serde_json::from_slice(&out.stdout).unwrap();
    let mut e: Vec<Value> = h["entries"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["generation"].as_u64().unwrap() > after)
        .cloned()
        .collect();
    e.reverse();
    e
}

/// How often each unit got a new owner in `entries` (placed or moved).
fn owner_changes(entries: &[Value]) -> BTreeMap<String, usize> {
    let mut n = BTreeMap::new();
    for e in entries {
        for kind in ["placed", "moved"] {
            let l = &e[kind];
            assert_eq!(
                l["count"].as_u64().unwrap() as usize,
                l["units"].as_array().unwrap().len(),
                "every unit named: {e}"
            );
            for u in l["units"].as_array().unwrap() {
                *n.entry(u.as_str().unwrap().to_string()).or_insert(0) += 1;
            }
        }
    }
    n
}

/// Every unit in exactly one row, every row a live member's.
async fn settled(fleet: &Fleet, all: &[String]) -> bool {
    let t = fleet.table().await;
    let live = fleet.live_member_ids();
    let mut owned: Vec<String> = t
        .rows()
        .values()
        .flat_map(|v| v.split(',').filter(|u| !u.is_empty()).map(str::to_string))
        .collect();
    owned.sort();
    let transit: usize = fleet.redis.cmd(&["HLEN", &keys().transit]).await;
    owned == all && transit == 0 && t.rows().keys().all(|m| live.contains(m))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolling_restart_moves_each_unit_once() {
    let mut all = units(48);
    all.sort();
    let mut fleet = Fleet::new(RedisServer::start());
    fleet.config.assignment = Assignment::Sticky;
    fleet.config.join_delay = Duration::from_secs(5);
    fleet.set_units(&all).await;
    for _ in 0..4 {
        fleet.add_member().await;
    }
    fleet.add_replica();
    wait_for("the first table", LIMIT, || async {
        settled(&fleet, &all).await && fleet.table().await.len() == 4
    })
    .await;
    let start = fleet.generation().await;

    // Each step: a newcomer starts and becomes live (an empty row: it
    // waits), then an old member drains and exits.
    for old in 0..4 {
        let new = fleet.add_member().await;
        let id = fleet.member_id(new);
        wait_for("the newcomer's row", LIMIT, || async {
            fleet.table().await.rows().contains_key(&id)
        })
        .await;
        assert!(
            fleet.table().await.units_of(&id).is_empty(),
            "a newcomer takes nothing from live members while it waits"
        );
        fleet.members[old].take().unwrap().shutdown().await;
        wait_for("the old member's units on the newcomer", LIMIT, || async {
            settled(&fleet, &all).await && fleet.table().await.units_of(&id).len() == 12
        })
        .await;
    }
    let changes = owner_changes(&changes_since(&fleet, start));
    let total: usize = changes.values().sum();
    eprintln!(
        "join_delay: rolling restart of 4 members over {} units: {total} owner changes ({:.2}× units)",
        all.len(),
        total as f64 / all.len() as f64
    );
    assert_eq!(
        changes.len(),
        all.len(),
        "every unit changed owner: {changes:?}"
    );
    assert!(
        changes.values().all(|&n| n == 1),
        "each unit once: {changes:?}"
    );

    // A newcomer that nobody leaves for gets its share when its delay ends.
    let late = fleet.add_member().await;
    let id = fleet.member_id(late);
    wait_for("the newcomer's row", LIMIT, || async {
        fleet.table().await.rows().contains_key(&id)
    })
    .await;
    let joined = std::time::Instant::now();
    wait_for("the newcomer's share after its delay", LIMIT, || async {
        let t = fleet.table().await;
        settled(&fleet, &all).await && (9..=10).contains(&t.units_of(&id).len())
    })
    .await;
    assert!(
        joined.elapsed() >= Duration::from_secs(4),
        "it waited: {:?}",
        joined.elapsed()
    );
    fleet.shutdown().await;
}
