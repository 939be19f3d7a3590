//! Failover: a killed holder is replaced with the same table, a stopped one hands
//! over at once, and liveness survives the change of holder.

use std::time::Duration;

use distributor::Role;

use crate::support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_holder_is_replaced_without_a_reshuffle() {
    let units = units(50);
    let (mut fleet, before) = Fleet::converged(|_| {}, 5, 3, &units).await;
    let generation = fleet.generation().await;
    let old = fleet.wait_for_holder().await;
    let old_epoch = fleet.statuses()[old].epoch;

    fleet.replicas[old].take().unwrap().abort();
    let started = tokio::time::Instant::now();
    // TTL is 1 s; allow generous slack for a loaded CI machine.
    wait_for("a new holder", Duration::from_secs(10), || async {
        fleet.replicas.iter().flatten().any(|r| {
            let s = r.status().borrow().clone();
            s.role == Role::Holder && s.epoch > old_epoch && s.cycles >= 3
        })
    })
    .await;
    eprintln!("new holder after {:?} (ttl 1s)", started.elapsed());
    assert_eq!(fleet.table().await, before, "identical table");
    assert_eq!(
        fleet.generation().await,
        generation,
        "no write at all: nothing changed"
    );
    fleet.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn graceful_shutdown_hands_over_at_once() {
    let units = units(20);
    let (mut fleet, before) = Fleet::converged(|_| {}, 3, 3, &units).await;
    let old = fleet.wait_for_holder().await;
    let lease: Option<String> = fleet
        .redis
        .cmd(&["GET", &format!("{{{TABLE}}}:lease")])
        .await;
    assert!(lease.is_some());

    let started = tokio::time::Instant::now();
    fleet.replicas[old].take().unwrap().shutdown().await;
    wait_for("a new holder", Duration::from_secs(5), || async {
        fleet.holder().is_some()
    })
    .await;
    let handover = started.elapsed();
    eprintln!("graceful handover took {handover:?} (ttl 1s, retry 300ms)");
    // Released and taken over by notification: well before the TTL or a retry tick.
    assert!(handover < Duration::from_millis(900), "{handover:?}");
    assert_eq!(fleet.table().await, before);
    fleet.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn liveness_survives_failover() {
    // Three strikes: a fresh holder without the stored history would count a
    // dead member's first failure as 1 of 3 and give it work again.
    let units = units(30);
    let (mut fleet, _) = Fleet::converged(|c| c.failure_threshold = 3, 4, 2, &units).await;
    let dead = fleet.member_id(0);
    fleet.members[0].take().unwrap().abort();
    let without = fleet.wait_for_table(&units, Duration::from_secs(10)).await;
    let generation = fleet.generation().await;

    let old = fleet.wait_for_holder().await;
    fleet.replicas[old].take().unwrap().abort();
    // Watch the table through the takeover and a few cycles of the new holder.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let t = fleet.table().await;
        assert!(
            t.units_of(&dead).is_empty(),
            "dead member got work back after failover: {t:?}"
        );
        assert_eq!(t, without);
        if fleet
            .statuses()
            .iter()
            .any(|s| s.role == Role::Holder && s.cycles >= 5)
        {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "no new holder");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(fleet.generation().await, generation);
    fleet.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_losing_its_data_heals() {
    let units = units(20);
    let (mut fleet, before) = Fleet::converged(|_| {}, 3, 2, &units).await;
    let generation = fleet.generation().await;
    let epoch = fleet.statuses().iter().map(|s| s.epoch).max().unwrap();

    // Redis goes away: the holder cannot renew and stops acting before its lease
    // could expire; nobody crashes.
    fleet.redis.kill();
    wait_for(
        "every replica steps down",
        Duration::from_secs(5),
        || async { fleet.statuses().iter().all(|s| s.role == Role::Standby) },
    )
    .await;
    fleet.redis.restart();
    // The unit list is written by "some other process": it writes it again.
    fleet.set_units(&units).await;
    // Members re-register on their own; the holder re-acquires and rewrites.
    let after = fleet.wait_for_table(&units, Duration::from_secs(15)).await;
    assert_eq!(after, before);
    assert!(
        fleet.generation().await > generation,
        "generation never goes back"
    );
    let new_epoch: u64 = fleet
        .redis
        .cmd(&["GET", &format!("{{{TABLE}}}:epoch")])
        .await;
    assert!(
        new_epoch > epoch,
        "epoch never goes back: {new_epoch} <= {epoch}"
    );
    fleet.shutdown().await;
}
