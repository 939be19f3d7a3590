//! `Lookup` (issue 41): who owns a unit, for callers that are not members,
//! from a local copy that follows the table; against a real Redis and, where
//! the holder matters, real replicas and members.

use std::collections::HashMap;
use std::time::Duration;

use distributor::core::keys::Keys;
use distributor::{Lookup, LookupOptions, MatchingTable, Placement};

use crate::support::*;

/// What the table (and transit fields) say of `unit`, by a plain scan.
fn expected(table: &MatchingTable, transit: &[String], unit: &str) -> Placement {
    if transit.iter().any(|f| f.split(',').next() == Some(unit)) {
        return Placement::InTransit;
    }
    let owners: Vec<&String> = table
        .rows()
        .iter()
        .filter(|(_, row)| row.split(',').any(|u| u == unit))
        .map(|(m, _)| m)
        .collect();
    match owners.as_slice() {
        [] => Placement::Unowned,
        [one] => Placement::Owned(one.as_str().into()),
        _ => Placement::InTransit,
    }
}

/// Waits until the lookup's copy is at Redis' generation and agrees with
/// the stored table on every unit of `units` (and one never listed).
async fn wait_agreement(fleet: &Fleet, lookup: &Lookup, units: &[String], limit: Duration) {
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        let g = fleet.generation().await;
        let table = fleet.table().await;
        let transit: Vec<String> = fleet.redis.cmd(&["HKEYS", &keys().transit]).await;
        let copy = lookup.table();
        let disagreement = if copy.generation() != Some(g) {
            Some(format!("copy at {:?}, Redis at {g}", copy.generation()))
        } else {
            units
                .iter()
                .map(String::as_str)
                .chain(["never-listed"])
                .find_map(|u| {
                    let (got, want) = (copy.owner(u), expected(&table, &transit, u));
                    (got != want).then(|| format!("{u}: lookup says {got:?}, the table {want:?}"))
                })
        };
        let Some(why) = disagreement else { return };
        assert!(
            tokio::time::Instant::now() < deadline,
            "the lookup never agreed with the table: {why}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

fn options(fleet: &Fleet) -> LookupOptions {
    LookupOptions::from(&fleet.member_options())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lookup_agrees_with_the_table_and_follows_a_killed_worker() {
    let units = units(300);
    let (mut fleet, table) = Fleet::converged(|_| {}, 4, 1, &units).await;
    let lookup = Lookup::connect(options(&fleet)).await.unwrap();
    wait_agreement(&fleet, &lookup, &units, Duration::from_secs(5)).await;
    let victim = fleet.member_id(0);
    let before = table.units_of(&victim).len();
    assert!(before > 0);
    // The first subscription reads the table whole once more (messages may
    // have been missed before it): wait for it.
    let subscribed = wait_until(Duration::from_secs(5), Duration::from_millis(5), || async {
        lookup.reads().whole >= 2
    })
    .await;
    assert!(subscribed, "{:?}", lookup.reads());
    let before = lookup.reads();
    let mut copies = lookup.copies();
    copies.borrow_and_update();
    let mut generations = lookup.generations();
    let killed_at = *generations.borrow_and_update();
    fleet.members[0].take().unwrap().abort();
    // Every unit of the victim with a live owner in the lookup, and the
    // lookup at the table's generation, agreeing on every unit.
    let live = fleet.live_member_ids();
    fleet.wait_for_table(&units, Duration::from_secs(20)).await;
    wait_agreement(&fleet, &lookup, &units, Duration::from_secs(5)).await;
    for u in table.units_of(&victim) {
        match lookup.owner(u) {
            Placement::Owned(m) => assert!(live.contains(&m.to_string()), "{u} at {m}"),
            other => panic!("{u}: {other:?}"),
        }
    }
    assert!(
        copies.has_changed().unwrap(),
        "the copies receiver saw no new copy"
    );
    assert!(generations.has_changed().unwrap());
    assert!(*generations.borrow() > killed_at);
    // The holder's writes are followed by the rows they wrote (that none
    // was read whole is the bench's to show: a busy host may let the table
    // move on between a generation's read and its rows' three times over).
    let reads = lookup.reads();
    assert!(reads.rows > before.rows, "{before:?} then {reads:?}");
    fleet.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lookup_follows_a_redis_restart() {
    let units = units(120);
    let (mut fleet, _) = Fleet::converged(|_| {}, 3, 1, &units).await;
    let lookup = Lookup::connect(options(&fleet)).await.unwrap();
    wait_agreement(&fleet, &lookup, &units, Duration::from_secs(5)).await;
    // Everything lost: the lists are written again, the holder and the
    // members recover, and the lookup reads the new table whole.
    fleet.redis.restart();
    fleet.set_units(&units).await;
    fleet.wait_for_table(&units, Duration::from_secs(30)).await;
    wait_agreement(&fleet, &lookup, &units, Duration::from_secs(10)).await;
    fleet.shutdown().await;
}

/// A table written by hand (no holder): units in transit are neither owned
/// nor unowned, and a change without a notification is followed by the
/// poll.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_unit_in_transit_is_told_apart_and_an_unannounced_change_is_polled() {
    let redis = RedisServer::start();
    let k = Keys::new(TABLE);
    let cmd = |args: &[&str]| {
        let url = redis.url();
        let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        async move {
            let a: Vec<&str> = args.iter().map(String::as_str).collect();
            let _: redis::Value = ask(&url, &a).await.unwrap();
        }
    };
    cmd(&["HSET", TABLE, "a:1", "u1,u2", "b:2", "u4"]).await;
    cmd(&["HSET", &k.meta, "generation", "5"]).await;
    cmd(&["HSET", &k.transit, "u3,workers", "5 0 b:2 a:1 0 0"]).await;
    let opts = LookupOptions {
        redis_url: redis.url(),
        table_key: TABLE.into(),
        poll_interval: Duration::from_millis(50),
        ..LookupOptions::default()
    };
    let lookup = Lookup::connect(opts).await.unwrap();
    assert_eq!(lookup.generation(), Some(5));
    assert_eq!(lookup.owner("u1"), Placement::Owned("a:1".into()));
    assert_eq!(lookup.owner("u4"), Placement::Owned("b:2".into()));
    assert_eq!(lookup.owner("u3"), Placement::InTransit);
    assert_eq!(lookup.owner("u9"), Placement::Unowned);
    // The move completes, with no notification.
    cmd(&["HSET", TABLE, "b:2", "u3,u4"]).await;
    cmd(&["DEL", &k.transit]).await;
    cmd(&["HSET", &k.meta, "generation", "6"]).await;
    let followed = wait_until(
        Duration::from_secs(5),
        Duration::from_millis(10),
        || async { lookup.generation() == Some(6) },
    )
    .await;
    assert!(followed, "the poll did not follow generation 6");
    assert_eq!(lookup.owner("u3"), Placement::Owned("b:2".into()));
    // A generation that is not a counter: an error naming the key and the
    // value, and the last copy kept.
    cmd(&["HSET", &k.meta, "generation", "x7"]).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(lookup.generation(), Some(6));
    assert_eq!(lookup.owner("u1"), Placement::Owned("a:1".into()));
    let err = match Lookup::connect(LookupOptions {
        redis_url: redis.url(),
        table_key: TABLE.into(),
        ..LookupOptions::default()
    })
    .await
    {
        Ok(_) => panic!("a lookup started on a generation of x7"),
        Err(e) => e.to_string(),
    };
    assert!(err.contains("x7") && err.contains(&k.meta), "{err}");
}

/// A member tells a request routed by a copy that predates its holding.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_refuses_a_request_routed_by_an_older_copy() {
    let units = units(20);
    let (fleet, _) = Fleet::converged(|_| {}, 2, 1, &units).await;
    let lookup = Lookup::connect(options(&fleet)).await.unwrap();
    wait_agreement(&fleet, &lookup, &units, Duration::from_secs(5)).await;
    let member = fleet.members[0].as_ref().unwrap();
    let mine: HashMap<String, u64> = {
        let mut held = HashMap::new();
        let ok = wait_until(Duration::from_secs(10), Duration::from_millis(10), || {
            held = units
                .iter()
                .filter_map(|u| member.holds(u).map(|t| (u.clone(), t.0)))
                .collect();
            let n = held.len();
            async move { n > 0 }
        })
        .await;
        assert!(ok, "the member never held a unit");
        held
    };
    let g = lookup.generation().unwrap();
    for (unit, token) in &mine {
        assert!(
            member.routed_current(unit, g),
            "{unit} at {g} (token {token})"
        );
        assert!(member.routed_current(unit, *token));
        if *token > 0 {
            assert!(!member.routed_current(unit, token - 1));
        }
    }
    let theirs = units.iter().find(|u| !mine.contains_key(*u)).unwrap();
    assert!(!member.routed_current(theirs, g));
    fleet.shutdown().await;
}
