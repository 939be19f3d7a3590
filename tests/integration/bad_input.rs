//! Bad input never crashes the daemon and never loses, empties or half-writes
//! a table: it is skipped, reported, and the rest goes on.

use std::time::Duration;

use distributor::Role;

use crate::support::*;

async fn holder_status(fleet: &Fleet) -> distributor::Status {
    let i = fleet.wait_for_holder().await;
    fleet.statuses()[i].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_units_are_skipped_and_counted() {
    let mut fleet = Fleet::new(RedisServer::start());
    let good = units(6);
    let mut raw = good.clone();
    raw.extend(["".to_string(), "has,comma".to_string(), good[0].clone()]);
    fleet.set_units(&raw).await;
    fleet.add_member().await;
    fleet.add_member().await;
    fleet.add_replica();
    let table = fleet.wait_for_table(&good, Duration::from_secs(10)).await;
    assert_eq!(table.assignments(), 6);
    wait_for("invalid inputs counted", Duration::from_secs(5), || async {
        holder_status(&fleet).await.invalid_inputs == 2
    })
    .await;
    fleet.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_addresses_count_as_failing() {
    let mut fleet = Fleet::new(RedisServer::start());
    let units = units(8);
    fleet.set_units(&units).await;
    for bad in ["not-an-address", "host:99999", "http://x:1", "127.0.0.1:1"] {
        let () = fleet.redis.cmd(&["RPUSH", SERVICES, bad]).await;
    }
    fleet.add_member().await;
    fleet.add_replica();
    let table = fleet.wait_for_table(&units, Duration::from_secs(10)).await;
    assert_eq!(table.len(), 1, "only the real member has work: {table:?}");
    wait_for(
        "3 malformed + 1 refused counted as failed",
        Duration::from_secs(5),
        || async { holder_status(&fleet).await.groups == vec![(SERVICES.to_string(), 1, 4)] },
    )
    .await;
    fleet.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_of_the_wrong_type_keeps_the_last_table() {
    let units = units(10);
    let (fleet, before) = Fleet::converged(|_| {}, 2, 1, &units).await;
    let generation = fleet.generation().await;
    let failed = holder_status(&fleet).await.failed_cycles;

    let () = fleet.redis.cmd(&["DEL", UNITS]).await;
    let () = fleet.redis.cmd(&["SET", UNITS, "oops"]).await;
    // Several cycles fail to read; the replica stays holder, the error names
    // the key and its type, and the table stays as it was.
    wait_for("three failed cycles", Duration::from_secs(5), || async {
        holder_status(&fleet).await.failed_cycles >= failed + 3
    })
    .await;
    let s = holder_status(&fleet).await;
    assert_eq!(s.role, Role::Holder);
    let error = s.last_error.unwrap_or_default();
    assert!(
        error.contains("\"test-units\" holds a string, expected a list"),
        "{error}"
    );
    assert_eq!(fleet.table().await, before);
    assert_eq!(fleet.generation().await, generation);

    // The same for a services list of the wrong type.
    let () = fleet.redis.cmd(&["DEL", UNITS]).await;
    fleet.set_units(&units).await;
    let members: Vec<String> = fleet.redis.cmd(&["LRANGE", SERVICES, "0", "-1"]).await;
    let () = fleet.redis.cmd(&["DEL", SERVICES]).await;
    let () = fleet.redis.cmd(&["HSET", SERVICES, "not", "a list"]).await;
    let failed = holder_status(&fleet).await.failed_cycles;
    wait_for(
        "failed cycles on the services key",
        Duration::from_secs(5),
        || async {
            let s = holder_status(&fleet).await;
            s.failed_cycles >= failed + 3
                && s.last_error
                    .is_some_and(|e| e.contains("\"test-services\" holds a hash, expected a list"))
        },
    )
    .await;
    assert_eq!(fleet.table().await, before);
    let () = fleet.redis.cmd(&["DEL", SERVICES]).await;
    for m in &members {
        let () = fleet.redis.cmd(&["RPUSH", SERVICES, m]).await;
    }

    // Fixed by the operator: work resumes.
    let () = fleet.redis.cmd(&["DEL", UNITS]).await;
    fleet.set_units(&units[..5]).await;
    fleet
        .wait_for_table(&units[..5], Duration::from_secs(5))
        .await;
    fleet.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn empty_lists_leave_only_empty_rows() {
    let units = units(4);
    let (mut fleet, _) = Fleet::converged(|_| {}, 1, 1, &units).await;
    let member = fleet.member_id(0);

    // No units: the live member keeps its field, empty (live, no work).
    fleet.set_units(&[]).await;
    wait_for("an empty row", Duration::from_secs(5), || async {
        let row: Option<String> = fleet.redis.cmd(&["HGET", TABLE, &member]).await;
        row.as_deref() == Some("")
    })
    .await;
    assert_eq!(fleet.table().await.assignments(), 0);

    // Units back, then no services: no field at all.
    fleet.set_units(&units).await;
    fleet.wait_for_table(&units, Duration::from_secs(5)).await;
    let () = fleet.redis.cmd(&["DEL", SERVICES]).await;
    let m = fleet.members[0].take().unwrap();
    m.abort();
    wait_for("empty table", Duration::from_secs(5), || async {
        fleet.table().await.is_empty()
    })
    .await;
    let exists: u64 = fleet.redis.cmd(&["EXISTS", TABLE]).await;
    assert_eq!(exists, 0);
    fleet.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn huge_lists_with_duplicates_are_handled() {
    let mut fleet = Fleet::new(RedisServer::start());
    let units = units(100_000);
    let mut raw = units.clone();
    raw.extend(std::iter::repeat_n(units[0].clone(), 50_000));
    fleet.set_units(&raw).await;
    for _ in 0..5 {
        fleet.add_member().await;
    }
    fleet.add_replica();
    let table = fleet.wait_for_table(&units, Duration::from_secs(60)).await;
    assert_eq!(table.assignments(), 100_000);
    fleet.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_listed_in_two_groups_is_kept_in_one() {
    let redis = RedisServer::start();
    let mut fleet = Fleet::new(redis);
    fleet.config.services_namespaces = vec!["zeta".into(), "alpha".into()];
    let units = units(6);
    fleet.set_units(&units).await;
    let mut opts = fleet.member_options();
    opts.services_key = "alpha".into();
    let shared = distributor::Member::start(opts).await.unwrap();
    let () = fleet.redis.cmd(&["RPUSH", "zeta", shared.id()]).await;
    let mut opts = fleet.member_options();
    opts.services_key = "zeta".into();
    let z = distributor::Member::start(opts).await.unwrap();
    fleet.add_replica();
    // alpha sorts first: the shared member works for alpha (all 6 units), and
    // zeta's own member gets all 6 for zeta.
    wait_for(
        "both groups split all units",
        Duration::from_secs(10),
        || async {
            let t = fleet.table().await;
            t.units_of(shared.id()).len() == 6 && t.units_of(z.id()).len() == 6
        },
    )
    .await;
    wait_for("duplicate reported", Duration::from_secs(5), || async {
        holder_status(&fleet).await.invalid_inputs == 1
    })
    .await;
    shared.shutdown().await;
    z.shutdown().await;
    fleet.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_list_contents_are_bounded_and_reported() {
    let mut fleet = Fleet::new(RedisServer::start());
    let good = units(5);
    let mut c = fleet.redis.conn().await;
    let () = redis::cmd("RPUSH")
        .arg(UNITS)
        .arg(&good)
        .query_async(&mut c)
        .await
        .unwrap();
    // A million copies of one unit, a 1 MB unit, terminal escape codes.
    for _ in 0..10 {
        let dups = vec![good[0].as_str(); 100_000];
        let () = redis::cmd("RPUSH")
            .arg(UNITS)
            .arg(&dups)
            .query_async(&mut c)
            .await
            .unwrap();
    }
    let big = "x".repeat(1 << 20);
    let () = redis::cmd("RPUSH")
        .arg(UNITS)
        .arg(&big)
        .arg("evil\u{1b}[31m")
        .query_async(&mut c)
        .await
        .unwrap();
    // Members: a 1 MB address, and an address whose port speaks Redis, not gRPC.
    let redis_port = format!("127.0.0.1:{}", fleet.redis.port());
    let () = redis::cmd("RPUSH")
        .arg(SERVICES)
        .arg(&big)
        .arg(&redis_port)
        .query_async(&mut c)
        .await
        .unwrap();
    fleet.add_member().await;
    fleet.add_member().await;
    fleet.add_replica();

    let table = fleet.wait_for_table(&good, Duration::from_secs(30)).await;
    assert_eq!(table.assignments(), 5);
    assert!(table.units_of(&redis_port).is_empty());
    wait_for(
        "hostile entries counted",
        Duration::from_secs(10),
        || async {
            let s = holder_status(&fleet).await;
            // big unit + escape codes; big address; the Redis port answers no ping.
            s.invalid_by_kind == vec![("unit", 2), ("address", 1), ("duplicate_member", 0)]
                && s.groups == vec![(SERVICES.to_string(), 2, 2)]
        },
    )
    .await;
    fleet.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_list_over_the_limit_skips_the_cycle_and_keeps_the_table() {
    let units = units(40);
    let (fleet, before) = Fleet::converged(|c| c.max_list_entries = 50, 2, 1, &units).await;
    let generation = fleet.generation().await;
    let more: Vec<String> = (0..20).map(|i| format!("extra-{i}")).collect();
    let mut all = units.clone();
    all.extend(more);
    fleet.set_units(&all).await;
    wait_for("the limit is reported", Duration::from_secs(5), || async {
        holder_status(&fleet).await.last_error.is_some_and(|e| {
            e.contains("\"test-units\" has more than 50 entries (-max-list-entries)")
        })
    })
    .await;
    assert_eq!(fleet.table().await, before);
    assert_eq!(fleet.generation().await, generation);
    fleet.set_units(&units[..30]).await;
    fleet
        .wait_for_table(&units[..30], Duration::from_secs(5))
        .await;
    fleet.shutdown().await;
}

/// Redis's bytes sent so far (`INFO stats`).
async fn net_output_bytes(fleet: &Fleet) -> u64 {
    let info: String = fleet.redis.cmd(&["INFO", "stats"]).await;
    info.lines()
        .find_map(|l| l.strip_prefix("total_net_output_bytes:"))
        .and_then(|v| v.trim().parse().ok())
        .expect("INFO stats has total_net_output_bytes")
}

/// A list over either limit is measured (`LLEN`, `MEMORY USAGE`), never
/// transferred: over several skipped cycles Redis sends less than one copy
/// of it (hardening item 8: bound what is read, and bound bytes).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_list_over_a_limit_is_never_transferred() {
    let units = units(20);
    let (fleet, before) = Fleet::converged(
        |c| {
            c.max_list_entries = 3_000;
            c.max_list_bytes = 256 * 1024;
        },
        2,
        1,
        &units,
    )
    .await;
    let long =
        |n: usize, len: usize| -> Vec<String> { (0..n).map(|i| format!("{i:0len$}")).collect() };
    // Phase 1: too many entries (4,000 x 100 bytes: 400 kB).
    // Phase 2: few enough entries, too many bytes (2,000 x 200 bytes: 400 kB).
    for (list, setting) in [
        (long(4_000, 100), "-max-list-entries"),
        (long(2_000, 200), "-max-list-bytes"),
    ] {
        let list_bytes: usize = list.iter().map(String::len).sum();
        fleet.set_units(&list).await;
        wait_for("the limit is reported", Duration::from_secs(5), || async {
            holder_status(&fleet)
                .await
                .last_error
                .is_some_and(|e| e.contains("\"test-units\"") && e.contains(setting))
        })
        .await;
        let failed = holder_status(&fleet).await.failed_cycles;
        let sent = net_output_bytes(&fleet).await;
        wait_for(
            "five more skipped cycles",
            Duration::from_secs(10),
            || async { holder_status(&fleet).await.failed_cycles >= failed + 5 },
        )
        .await;
        let during = net_output_bytes(&fleet).await - sent;
        assert!(
            during < list_bytes as u64,
            "{setting}: Redis sent {during} bytes in five skipped cycles, the list is {list_bytes}"
        );
        assert_eq!(fleet.table().await, before, "{setting}: the table is kept");
    }
    fleet.set_units(&units[..10]).await;
    fleet
        .wait_for_table(&units[..10], Duration::from_secs(5))
        .await;
    fleet.shutdown().await;
}

/// Issue 39, item 8: every hash a holder reads whole is bounded by
/// `-max-list-entries` and `-max-list-bytes`, measured before it is read.
/// Members' reports (or controls) past a limit skip the cycle and keep the
/// last table, saying why; the costs, the loads and the units in transit
/// are refused the same way, naming the key and the setting.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hash_over_a_limit_skips_the_cycle_and_keeps_the_table() {
    let units = units(40);
    let (fleet, before) = Fleet::converged(
        |c| {
            c.max_list_entries = 50;
            c.max_list_bytes = 64 * 1024;
        },
        2,
        1,
        &units,
    )
    .await;
    let generation = fleet.generation().await;
    let k = keys();
    let junk = |n: usize, len: usize| -> Vec<String> {
        (0..n)
            .flat_map(|i| [format!("junk-{i}:1"), "x".repeat(len)])
            .collect()
    };
    let hset = |key: String, fields: Vec<String>| {
        let redis = &fleet.redis;
        async move {
            let mut args = vec!["HSET".to_string(), key];
            args.extend(fields);
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let _: i64 = redis.cmd(&args).await;
        }
    };
    for (key, fields, setting) in [
        (k.members.clone(), junk(60, 1), "-max-list-entries"),
        (k.controls.clone(), junk(60, 1), "-max-list-entries"),
        (k.members.clone(), junk(2, 100_000), "-max-list-bytes"),
    ] {
        hset(key.clone(), fields.clone()).await;
        // A change the holder would act on, if it read.
        fleet.set_units(&units[..30]).await;
        let says = format!("hash {key:?} has more than");
        wait_for("the limit is reported", Duration::from_secs(5), || async {
            holder_status(&fleet)
                .await
                .last_error
                .is_some_and(|e| e.contains(&says) && e.contains(setting))
        })
        .await;
        let failed = holder_status(&fleet).await.failed_cycles;
        wait_for(
            "three more skipped cycles",
            Duration::from_secs(10),
            || async { holder_status(&fleet).await.failed_cycles >= failed + 3 },
        )
        .await;
        assert_eq!(fleet.table().await, before, "{key}: the table is kept");
        assert_eq!(fleet.generation().await, generation);
        // The units as the table has them first: no cycle acts on the
        // change once the hash is within the limit again.
        fleet.set_units(&units).await;
        let mut del = vec!["HDEL".to_string(), key.clone()];
        del.extend(fields.iter().step_by(2).cloned());
        let del: Vec<&str> = del.iter().map(String::as_str).collect();
        let _: i64 = fleet.redis.cmd(&del).await;
    }
    fleet.set_units(&units[..30]).await;
    fleet
        .wait_for_table(&units[..30], Duration::from_secs(5))
        .await;

    // The store's other whole-hash reads: costs, loads, units in transit.
    let limits = distributor::edge::redis::ListLimits {
        entries: 50,
        bytes: 64 * 1024,
    };
    let store =
        distributor::edge::redis::Store::open(&fleet.redis.url(), TABLE, Duration::from_secs(2))
            .unwrap()
            .with_limits(limits);
    hset(k.costs.clone(), junk(60, 1)).await;
    let costs = store.read_costs_since(None).await.content.unwrap();
    assert!(
        matches!(&costs, Err(e) if e.to_string().contains(&format!("hash {:?} has more than 50 entries (-max-list-entries)", k.costs))),
        "{costs:?}"
    );
    hset(k.loads.clone(), junk(1, 100_000)).await;
    let loads = store.read_loads_since(None).await.content.unwrap();
    assert!(
        matches!(&loads, Err(e) if e.to_string().contains("-max-list-bytes")),
        "{loads:?}"
    );
    hset(k.transit.clone(), junk(60, 1)).await;
    let holding = store.read_holding(false).await;
    assert!(
        matches!(&holding, Err(e) if e.to_string().contains(&format!("hash {:?}", k.transit))),
        "{:?}",
        holding.err()
    );
    fleet.shutdown().await;
}
