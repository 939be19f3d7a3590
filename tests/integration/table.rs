//! The table is correct, follows members that die and join, and reaches members.

use std::time::Duration;

use crate::support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_replicas_five_members_get_the_solvers_table() {
    let units = units(23);
    let (fleet, table) = Fleet::converged(|_| {}, 5, 3, &units).await;

    // A partition of all units over the five members, balanced within one.
    let mut all: Vec<&str> = table.rows().values().flat_map(|v| v.split(',')).collect();
    all.sort();
    assert_eq!(all, units.iter().map(String::as_str).collect::<Vec<_>>());
    let sizes: Vec<usize> = table
        .rows()
        .values()
        .map(|v| v.split(',').count())
        .collect();
    assert_eq!(sizes.len(), 5);
    assert!(
        sizes.iter().max().unwrap() - sizes.iter().min().unwrap() <= 1,
        "{sizes:?}"
    );

    // Every member's watch receiver shows exactly its own row.
    for m in fleet.members.iter().flatten() {
        let want: Vec<String> = table
            .units_of(m.id())
            .iter()
            .map(|s| s.to_string())
            .collect();
        let mut rx = m.assignment();
        wait_for("member sees its row", Duration::from_secs(5), || {
            let ok = rx.borrow_and_update().units == want;
            async move { ok }
        })
        .await;
        assert!(rx.borrow().generation >= 1);
    }
    let holder = fleet.wait_for_holder().await;
    assert_eq!(
        fleet
            .statuses()
            .iter()
            .filter(|s| s.role == distributor::Role::Holder)
            .count(),
        1
    );
    assert!(fleet.statuses()[holder].table_writes >= 1);
    fleet.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_member_loses_its_units_and_a_new_member_gets_some() {
    let units = units(40);
    let (mut fleet, _) = Fleet::converged(|_| {}, 5, 1, &units).await;

    // Crash one member: poll 100 ms + ping timeout 250 ms + slack.
    let victim = fleet.member_id(2);
    fleet.members[2].take().unwrap().abort();
    let started = std::time::Instant::now();
    let table = fleet.wait_for_table(&units, Duration::from_secs(5)).await;
    assert!(table.units_of(&victim).is_empty());
    eprintln!(
        "member death reflected in the table after {:?}",
        started.elapsed()
    );
    // It stays listed: the distributor does not LREM a failing member.
    let listed: Vec<String> = fleet.redis.cmd(&["LRANGE", SERVICES, "0", "-1"]).await;
    assert!(listed.contains(&victim), "{listed:?}");

    // A new member joins and gets its share.
    let i = fleet.add_member().await;
    let table = fleet.wait_for_table(&units, Duration::from_secs(5)).await;
    assert!(!table.units_of(&fleet.member_id(i)).is_empty());
    fleet.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_that_answers_again_comes_back() {
    let mut fleet = Fleet::new(RedisServer::start());
    let units = units(10);
    fleet.set_units(&units).await;
    // A member at a fixed port, so it can come back at the same address.
    let port = free_port();
    let mut opts = fleet.member_options();
    opts.listen = ([127, 0, 0, 1], port).into();
    fleet.members.push(Some(
        distributor::Member::start(opts.clone()).await.unwrap(),
    ));
    fleet.add_member().await;
    fleet.add_replica();
    fleet.wait_for_table(&units, Duration::from_secs(10)).await;
    let id = fleet.member_id(0);

    fleet.members[0].take().unwrap().abort();
    fleet.wait_for_table(&units, Duration::from_secs(5)).await;
    assert!(fleet.table().await.units_of(&id).is_empty());

    fleet.members[0] = Some(distributor::Member::start(opts).await.unwrap());
    let table = fleet.wait_for_table(&units, Duration::from_secs(5)).await;
    assert!(!table.units_of(&id).is_empty());
    fleet.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn census_reports_three_replicas() {
    let mut fleet = Fleet::new(RedisServer::start());
    for _ in 0..3 {
        fleet.add_replica();
    }
    // Census interval 400 ms: the first result comes within two intervals.
    wait_for(
        "every replica counts 3 replicas",
        Duration::from_secs(10),
        || {
            let s = fleet.statuses();
            async move { s.iter().all(|s| s.census.is_some_and(|c| c.replicas == 3)) }
        },
    )
    .await;
    let mut indexes: Vec<u64> = fleet
        .statuses()
        .iter()
        .map(|s| s.census.unwrap().index)
        .collect();
    indexes.sort();
    // Views may come from different intervals, but indexes are always < replicas.
    assert!(indexes.iter().all(|i| *i < 3), "{indexes:?}");
    let recorded: std::collections::HashMap<String, String> =
        fleet.redis.cmd(&["HGETALL", &keys().replicas]).await;
    assert_eq!(recorded.len(), 3, "{recorded:?}");
    fleet.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn census_indexes_are_distinct_within_an_interval() {
    let mut fleet = Fleet::new(RedisServer::start());
    for _ in 0..3 {
        fleet.add_replica();
    }
    // Every view each replica emits, by interval: (interval, replica) -> index.
    let mut seen: std::collections::BTreeMap<u64, std::collections::BTreeMap<usize, u64>> =
        Default::default();
    wait_for(
        "six intervals seen by all three replicas",
        Duration::from_secs(20),
        || {
            for (r, s) in fleet.statuses().iter().enumerate() {
                if let Some(v) = s.census {
                    seen.entry(v.interval).or_default().insert(r, v.index);
                }
            }
            let full = seen.values().filter(|m| m.len() == 3).count();
            async move { full >= 6 }
        },
    )
    .await;
    for (interval, views) in &seen {
        let mut indexes: Vec<u64> = views.values().copied().collect();
        indexes.sort();
        indexes.dedup();
        assert_eq!(
            indexes.len(),
            views.len(),
            "interval {interval}: two replicas share an index: {views:?}"
        );
    }
    fleet.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_cycles_write_nothing() {
    let mut fleet = Fleet::new(RedisServer::start());
    let units = units(30);
    fleet.set_units(&units).await;
    for _ in 0..3 {
        fleet.add_member().await;
    }
    let r = fleet.add_replica();
    fleet.wait_for_table(&units, Duration::from_secs(10)).await;
    let generation = fleet.generation().await;
    let writes = fleet.statuses()[r].table_writes;
    let cycles = fleet.statuses()[r].cycles;
    // Let at least ten more cycles run.
    wait_for("ten more cycles", Duration::from_secs(10), || {
        let c = fleet.statuses()[r].cycles;
        async move { c >= cycles + 10 }
    })
    .await;
    assert_eq!(fleet.generation().await, generation);
    assert_eq!(fleet.statuses()[r].table_writes, writes);
    fleet.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forget_after_prunes_long_failing_members() {
    let units = units(6);
    let (mut fleet, _) = Fleet::converged(
        |c| c.forget_after = Some(Duration::from_millis(500)),
        2,
        1,
        &units,
    )
    .await;
    let victim = fleet.member_id(0);
    fleet.members[0].take().unwrap().abort();
    wait_for(
        "the dead member is removed from its list",
        Duration::from_secs(10),
        || async {
            let listed: Vec<String> = fleet.redis.cmd(&["LRANGE", SERVICES, "0", "-1"]).await;
            !listed.contains(&victim)
        },
    )
    .await;
    let listed: Vec<String> = fleet.redis.cmd(&["LRANGE", SERVICES, "0", "-1"]).await;
    assert_eq!(listed, [fleet.member_id(1)], "the live member stays");
    fleet.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_member_does_not_delay_detecting_a_dead_one() {
    // A "hung" member: it accepts connections and never answers, so its ping
    // only fails when the (long) ping timeout expires.
    let hung = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let hung_addr = hung.local_addr().unwrap().to_string();
    let sink = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((s, _)) = hung.accept().await {
            held.push(s);
        }
    });
    let units = units(20);
    let mut fleet = Fleet::new(RedisServer::start());
    fleet.config.ping_timeout = Duration::from_secs(5);
    fleet.set_units(&units).await;
    // Listed from the start: every cycle includes its never-ending ping.
    let () = fleet.redis.cmd(&["RPUSH", SERVICES, &hung_addr]).await;
    for _ in 0..3 {
        fleet.add_member().await;
    }
    fleet.add_replica();
    fleet.wait_for_table(&units, Duration::from_secs(10)).await;

    // A member dies while every cycle now waits 5 s on the hung one.
    let dead = fleet.member_id(0);
    fleet.members[0].take().unwrap().abort();
    let started = std::time::Instant::now();
    // If cycles waited for every ping, this would take up to the 5 s timeout.
    wait_for(
        "the dead member loses its units",
        Duration::from_secs(4),
        || async { fleet.table().await.units_of(&dead).is_empty() },
    )
    .await;
    eprintln!("detected behind a hung member in {:?}", started.elapsed());
    assert!(fleet.table().await.units_of(&hung_addr).is_empty());
    sink.abort();
    fleet.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_field_means_live_and_no_field_means_not_a_member() {
    // Three members, two units: the third live member has an empty field, as
    // the Go implementation writes it (its workers HGET and treat nil as an
    // error). A failing member and an unlisted one have no field.
    let units = units(2);
    let (mut fleet, _) = Fleet::converged(|_| {}, 3, 1, &units).await;
    let rows = fleet.table().await.rows().clone();
    assert_eq!(rows.len(), 3, "{rows:?}");
    assert_eq!(
        rows.values().filter(|v| v.is_empty()).count(),
        1,
        "{rows:?}"
    );
    for m in fleet.members.iter().flatten() {
        let row: Option<String> = fleet.redis.cmd(&["HGET", TABLE, m.id()]).await;
        assert!(row.is_some(), "live member {} has a field", m.id());
    }

    // A member that dies loses its field.
    let dead = fleet.member_id(0);
    fleet.members[0].take().unwrap().abort();
    fleet.wait_for_table(&units, Duration::from_secs(5)).await;
    let row: Option<String> = fleet.redis.cmd(&["HGET", TABLE, &dead]).await;
    assert_eq!(row, None, "a failing member has no field");

    // A live server that is not listed has no field: only listed members are
    // pinged. (The member re-registers itself, so use a bare ping server.)
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let stranger = listener.local_addr().unwrap().to_string();
    let server = tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(distributor::edge::grpc::ping_service())
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
    );
    let () = fleet.redis.cmd(&["RPUSH", SERVICES, &stranger]).await;
    fleet
        .wait_for_table_with(
            &units,
            std::slice::from_ref(&stranger),
            Duration::from_secs(5),
        )
        .await;
    let () = fleet.redis.cmd(&["LREM", SERVICES, "0", &stranger]).await;
    fleet.wait_for_table(&units, Duration::from_secs(5)).await;
    let row: Option<String> = fleet.redis.cmd(&["HGET", TABLE, &stranger]).await;
    assert_eq!(row, None, "an unlisted member has no field");

    // The member library reads an empty field as "no units".
    for m in fleet.members.iter().flatten() {
        let want = fleet.table().await.units_of(m.id()).len();
        let mut rx = m.assignment();
        wait_for("the member follows its row", Duration::from_secs(5), || {
            let ok = rx.borrow_and_update().units.len() == want;
            async move { ok }
        })
        .await;
    }
    server.abort();
    fleet.shutdown().await;
}

/// A fresh fleet whose members mostly answer their first ping after the
/// holder's 50 ms grace (cold connections on a loaded machine, or 10,000 of
/// them at once): the first table already spreads the units over all of
/// them. It used to place every unit on the few that answered first and then
/// move almost all of them (98,730 of 100,000 units in transit at 10,000
/// members, BENCHMARKS.md, "First table of a fresh 10,000-member fleet").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fresh_fleets_first_table_waits_for_slow_first_contacts() {
    let units = units(60);
    let mut fleet = Fleet::new(RedisServer::start());
    // No second full cycle within the test: only the first one places units.
    fleet.config.poll_interval = Duration::from_secs(30);
    fleet.config.ping_timeout = Duration::from_secs(1);
    fleet.config.handoff_delay = Duration::from_secs(120);
    fleet.set_units(&units).await;
    let mut workers = Vec::new();
    for i in 0..12 {
        let w = FlakyWorker::serve(std::sync::Arc::new(std::sync::atomic::AtomicBool::new(
            true,
        )))
        .await;
        // 3 answer at once; 9 after the grace, well within a ping timeout.
        if i >= 3 {
            w.answer_delay_ms
                .store(300, std::sync::atomic::Ordering::SeqCst);
        }
        let () = fleet.redis.cmd(&["RPUSH", SERVICES, &w.addr]).await;
        workers.push(w);
    }
    let ids: Vec<String> = workers.iter().map(|w| w.addr.clone()).collect();
    fleet.add_replica();
    fleet
        .wait_for_table_with(&units, &ids, Duration::from_secs(15))
        .await;
    // Placed once, in the first write: nothing moved, nothing in transit.
    let in_transit: u64 = fleet.redis.cmd(&["HLEN", &keys().transit]).await;
    assert_eq!(in_transit, 0);
    assert_eq!(fleet.generation().await, 1);
    fleet.shutdown().await;
}
