//! Target 6: the fenced, atomic table write at 10,000 members x 1,000,000 units,
//! through the library's own `Store::commit` (`commit.lua`, rows applied with
//! `HSET` in chunks of 1,000 fields because of Lua's `unpack` limit).
//!
//! The store is opened with the daemon's default Redis call budget (renew
//! deadline - renew interval = 1 s; `commit` adds 1 ms per 10 rows), so a write
//! that would time out in the daemon fails here too. Two different tables
//! (10,000 and 9,999 live members) alternate, so every write really replaces
//! the hash. A concurrent reader polls `HLEN` throughout: it must only ever see
//! one of the two complete tables.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use distributor::MatchingTable;
use distributor::core::liveness::{Health, HealthChanges};
use distributor::edge::redis::{Committed, Store};
use std::time::Instant;

use crate::common::*;

const MEMBERS: usize = 10_000;
const UNITS_N: usize = 1_000_000;
const TRIALS: usize = 6;

pub async fn run() {
    section("table write at scale: 10,000 members x 1,000,000 units (target 6)");
    let redis = redis_server();
    let mut conn = redis.conn().await;
    let store = Store::open(&redis.url(), TABLE, Duration::from_secs(1)).unwrap();
    let grant = hold_lease(&store, "bench").await;

    let mut members: Vec<String> = (0..MEMBERS)
        .map(|i| format!("10.{}.{}.{}:7000", i / 65_536, (i / 256) % 256, i % 256))
        .collect();
    members.sort();
    let inputs = one_group(&members, &unit_names(UNITS_N));
    let t = Instant::now();
    let full = MatchingTable::solve(&inputs, |_| true);
    let solve_full = t.elapsed();
    let missing = members[0].clone();
    let short = MatchingTable::solve(&inputs, |m| m != missing);
    let bytes: usize = full.rows().iter().map(|(m, v)| m.len() + v.len()).sum();
    note(&format!(
        "table: {} rows, {:.1} MB of member + row bytes; MatchingTable::solve took {:.0} ms",
        full.len(),
        bytes as f64 / 1e6,
        ms(solve_full)
    ));
    let tables = [&full, &short];
    // 0: before the first write.
    let rows: BTreeSet<usize> = tables.iter().map(|t| t.len()).chain([0]).collect();

    // A reader that must only ever see complete tables.
    let stop = Arc::new(AtomicBool::new(false));
    let reader = {
        let stop = stop.clone();
        let mut c = redis.conn().await;
        tokio::spawn(async move {
            let mut seen = BTreeSet::new();
            let mut reads = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let n: usize = redis::cmd("HLEN")
                    .arg(TABLE)
                    .query_async(&mut c)
                    .await
                    .unwrap();
                seen.insert(n);
                reads += 1;
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            (seen, reads)
        })
    };

    let no_health = HealthChanges::default();
    let mut client = Vec::new();
    let mut server = Vec::new();
    for trial in 0..TRIALS {
        let table = tables[trial % 2];
        let before = command_calls(&info(&mut conn, "commandstats").await);
        let t = Instant::now();
        let r = commit_as(&store, &grant, "bench", Some(table), &no_health).await;
        let took = t.elapsed();
        let after = command_calls(&info(&mut conn, "commandstats").await);
        match r {
            Ok(Committed::Written {
                generation: Some(_),
                ..
            }) => {}
            other => panic!("write {trial} failed: {other:?}"),
        }
        client.push(ms(took));
        let usec = |m: &std::collections::HashMap<String, (u64, u64)>| {
            ["fcall", "evalsha", "eval"]
                .iter()
                .map(|c| m.get(*c).map_or(0, |v| v.1))
                .sum::<u64>()
        };
        server.push((usec(&after) - usec(&before)) as f64 / 1e3);
        let (hlen, digest): (usize, Option<String>) = redis::pipe()
            .cmd("HLEN")
            .arg(TABLE)
            .cmd("HGET")
            .arg(&keys().meta)
            .arg("digest")
            .query_async(&mut conn)
            .await
            .unwrap();
        assert_eq!(hlen, table.len());
        assert_eq!(digest.as_deref(), Some(table.digest()));
    }
    report(
        "table write: 10,000 x 1,000,000, Store::commit wall",
        "ms",
        &client,
        Target::max(1000.0),
    );
    report(
        "table write: 10,000 x 1,000,000, script time in Redis",
        "ms",
        &server,
        Target::none(),
    );

    // First cycle of a new holder: the table plus 10,000 liveness entries.
    let health = HealthChanges {
        set: members
            .iter()
            .map(|m| {
                (
                    m.clone(),
                    Health {
                        answered: true,
                        ..Health::default()
                    },
                )
            })
            .collect(),
        removed: vec![],
    };
    let t = Instant::now();
    let r = commit_as(&store, &grant, "bench", Some(&full), &health).await;
    assert!(matches!(r, Ok(Committed::Written { .. })), "{r:?}");
    report_one(
        "table write: same, plus 10,000 liveness entries",
        "ms",
        ms(t.elapsed()),
        Target::max(1000.0),
    );

    // Fenced: a stale token is rejected by Redis and changes nothing.
    let stale = distributor::edge::redis::LeaseGrant {
        token: "stale".into(),
        epoch: grant.epoch,
    };
    let t = Instant::now();
    let r = commit_as(&store, &stale, "stale", Some(&short), &no_health).await;
    let fenced = ms(t.elapsed());
    assert!(matches!(r, Ok(Committed::Fenced { .. })), "{r:?}");
    let digest: Option<String> = redis::cmd("HGET")
        .arg(&keys().meta)
        .arg("digest")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(digest.as_deref(), Some(full.digest()));
    report_one(
        "table write: stale token rejected (fenced), 10,000 x 1,000,000",
        "ms",
        fenced,
        Target::none(),
    );

    stop.store(true, Ordering::Relaxed);
    let (seen, reads) = reader.await.unwrap();
    table_check(&store, &redis.url()).await;
    let torn: Vec<usize> = seen.difference(&rows).copied().collect();
    note(&format!(
        "concurrent reader: {reads} HLEN reads saw row counts {seen:?}; torn reads: {}",
        if torn.is_empty() {
            "none".to_string()
        } else {
            format!("{torn:?}")
        }
    ));
    assert!(torn.is_empty(), "a reader saw a partial table");
    let mem = info(&mut conn, "memory").await;
    note(&format!(
        "redis used_memory_peak {} (the table hash plus the script's arguments)",
        mem.get("used_memory_peak_human")
            .cloned()
            .unwrap_or_default()
    ));
}

/// What noticing a hand edit costs at 10,000 x 1,000,000 (probe item 4): the
/// holder's idle check (the WATCH guard: two tiny round trips, nothing read),
/// the full verification after a change (the table read and hashed by the
/// holder), and the fallback where WATCH is not permitted (the content hashed
/// in Redis, by `table_state.lua`, every cycle).
async fn table_check(store: &Store, url: &str) {
    use distributor::edge::redis::ListLimits;
    // A connection without a reply deadline: the in-Redis check at this scale
    // takes longer than the client library's default half second.
    let config = redis::AsyncConnectionConfig::new().set_response_timeout(None);
    let mut conn = redis::Client::open(url)
        .unwrap()
        .get_multiplexed_async_connection_with_config(&config)
        .await
        .unwrap();
    let conn = &mut conn;
    let store = store.clone().with_limits(ListLimits {
        entries: 2_000_000,
        bytes: 1 << 30,
    });
    let services = [SERVICES.to_string()];
    // The first read after the writes verifies the content once.
    let member = "10.0.0.0:7000";
    let original: String = redis::cmd("HGET")
        .arg(TABLE)
        .arg(member)
        .query_async(conn)
        .await
        .unwrap();
    let mut full = Vec::new();
    for _ in 0..3 {
        let _: i64 = redis::cmd("HSET")
            .arg(TABLE)
            .arg(member)
            .arg("edited")
            .query_async(conn)
            .await
            .unwrap();
        let t = Instant::now();
        let snap = store
            .read_snapshot(&services, UNITS, &Default::default(), None)
            .await
            .unwrap();
        full.push(ms(t.elapsed()));
        assert!(snap.stored_digest.is_none(), "an edit is noticed");
        // Put the row back as written, and let the guard verify it.
        let _: i64 = redis::cmd("HSET")
            .arg(TABLE)
            .arg(member)
            .arg(&original)
            .query_async(conn)
            .await
            .unwrap();
        store
            .read_snapshot(&services, UNITS, &Default::default(), None)
            .await
            .unwrap();
    }
    report(
        "table check after a change (read + hash the table), 10,000 x 1,000,000",
        "ms",
        &full,
        Target::none(),
    );
    let before = info(conn, "stats").await;
    let mut idle = Vec::new();
    for _ in 0..20 {
        let t = Instant::now();
        let snap = store
            .read_snapshot(&services, UNITS, &Default::default(), None)
            .await
            .unwrap();
        idle.push(ms(t.elapsed()));
        assert!(snap.stored_digest.is_some());
    }
    let after = info(conn, "stats").await;
    let out = num(&after, "total_net_output_bytes") - num(&before, "total_net_output_bytes");
    report(
        "idle cycle's reads incl. the table check (WATCH guard), 10,000 x 1,000,000",
        "ms",
        &idle,
        Target::none(),
    );
    note(&format!(
        "idle reads sent {} bytes per cycle from Redis (every connection, INFO replies included)",
        out / 20
    ));
    // Where WATCH is not permitted: the content check runs in Redis.
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("slowlog-log-slower-than")
        .arg(0)
        .query_async(conn)
        .await
        .unwrap();
    let mut in_redis = Vec::new();
    for _ in 0..3 {
        let _: () = redis::cmd("SLOWLOG")
            .arg("RESET")
            .query_async(conn)
            .await
            .unwrap();
        let v: redis::Value = redis::Script::new(distributor::edge::redis::scripts::TABLE_STATE)
            .key(TABLE)
            .key(&keys().meta)
            .arg("1")
            .invoke_async(conn)
            .await
            .unwrap();
        assert!(
            matches!(&v, redis::Value::Array(f) if f.len() == 2),
            "the content check answers (digest, generation): {v:?}"
        );
        let log: Vec<redis::Value> = redis::cmd("SLOWLOG")
            .arg("GET")
            .arg(10)
            .query_async(conn)
            .await
            .unwrap();
        let micros = log
            .iter()
            .filter_map(|e| match e {
                redis::Value::Array(f) if f.len() > 3 => match (&f[2], &f[3]) {
                    (redis::Value::Int(us), redis::Value::Array(args))
                        if format!("{args:?}").contains("EVAL") =>
                    {
                        Some(*us)
                    }
                    _ => None,
                },
                _ => None,
            })
            .max()
            .unwrap_or(0);
        in_redis.push(micros as f64 / 1000.0);
    }
    report(
        "fallback without WATCH: content check in Redis per cycle, 10,000 x 1,000,000",
        "ms",
        &in_redis,
        Target::none(),
    );
}
