//! Rolling restarts (issue 23): 10 old-protocol workers (plain ping
//! servers, one process each) share 1,000 units; each step starts a new
//! worker, waits until the table settles, then stops an old one (SIGKILL
//! and removed from the services list, as a deregistering shutdown does),
//! and waits again. The figure is how often units changed owner over the
//! whole restart, per unit, counted from the change history
//! (`{T}:changes`: each write's `placed` and `moved` counts), for `sticky`
//! without and with `-join-delay 5s`, and `ring`, in the same run.
//! `-handoff-delay 0` lets each step settle at once (it changes when a unit
//! moves, not how often).

use std::time::Duration;

use std::time::Instant;

use crate::common::*;

const WORKERS: usize = 10;
const UNIT_COUNT: usize = 1000;
/// Restarts per case (the ring's figure depends on the workers' ports).
const TRIALS: usize = 3;

pub async fn run() {
    section("rolling restart: 10 old-protocol workers × 1,000 units, owner changes per unit");
    // `-join-delay` is ignored in ring mode (see `SolveSettings::join_delay`).
    for (assignment, delay) in [("sticky", "0s"), ("sticky", "5s"), ("ring", "0s")] {
        let mut ratios = Vec::new();
        for _ in 0..TRIALS {
            ratios.push(one(assignment, delay).await);
        }
        ratios.sort_by(f64::total_cmp);
        let target = if (assignment, delay) == ("sticky", "5s") {
            Target::max(1.0)
        } else {
            Target::none()
        };
        report(
            &format!("rolling restart, {assignment}, -join-delay {delay}: owner changes per unit"),
            "×",
            &ratios,
            target,
        );
    }
}

/// Waits until every unit is in exactly one row, nothing is in transit, the
/// rows are `live` exactly, and the generation stayed for 600 ms.
async fn settle(conn: &redis::aio::MultiplexedConnection, live: &[String]) {
    let mut want: Vec<&str> = live.iter().map(String::as_str).collect();
    want.sort();
    let mut last = (u64::MAX, Instant::now());
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let mut c = conn.clone();
        let rows: std::collections::BTreeMap<String, String> = redis::cmd("HGETALL")
            .arg(TABLE)
            .query_async(&mut c)
            .await
            .unwrap();
        let owned: usize = rows
            .values()
            .map(|v| v.split(',').filter(|u| !u.is_empty()).count())
            .sum();
        let members: Vec<&str> = rows.keys().map(String::as_str).collect();
        let g = generation(&mut c).await;
        if g != last.0 {
            last = (g, Instant::now());
        }
        let steady = owned == UNIT_COUNT
            && in_transit(&mut c).await == Some(0)
            && members == want
            && last.1.elapsed() >= Duration::from_millis(600);
        if steady {
            return;
        }
        assert!(Instant::now() < deadline, "the table did not settle");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Owner changes per unit over one rolling restart.
async fn one(assignment: &str, delay: &str) -> f64 {
    let redis = redis_server();
    let mut conn = redis.conn().await;
    set_list(&mut conn, UNITS, &unit_names(UNIT_COUNT)).await;
    let mut workers: Vec<(Proc, String)> = (0..WORKERS)
        .map(|_| {
            let (p, mut a) = spawn_servers(1);
            (p, a.remove(0))
        })
        .collect();
    let addrs: Vec<String> = workers.iter().map(|(_, a)| a.clone()).collect();
    set_list(&mut conn, SERVICES, &addrs).await;
    let t = Timing::defaults(Duration::from_millis(200), Duration::from_millis(500));
    let mut replica = spawn_replica_with(
        &redis.url(),
        &format!("rolling-{assignment}-{delay}"),
        &t,
        &[
            &format!("-assignment={assignment}"),
            &format!("-join-delay={delay}"),
            "-handoff-delay=0s",
        ],
    );
    let mut live = addrs.clone();
    settle(&conn, &live).await;
    let start = generation(&mut conn).await;
    let begun = Instant::now();
    for _ in 0..WORKERS {
        let (p, mut a) = spawn_servers(1);
        let new = a.remove(0);
        let _: i64 = redis::cmd("RPUSH")
            .arg(SERVICES)
            .arg(&new)
            .query_async(&mut conn)
            .await
            .unwrap();
        live.push(new.clone());
        settle(&conn, &live).await;
        let (mut old, gone) = workers.remove(0);
        old.kill();
        let _: i64 = redis::cmd("LREM")
            .arg(SERVICES)
            .arg(0)
            .arg(&gone)
            .query_async(&mut conn)
            .await
            .unwrap();
        live.retain(|m| *m != gone);
        workers.push((p, new));
        settle(&conn, &live).await;
    }
    let took = begun.elapsed();
    // Every write since the start is in the history (1,000 kept).
    let entries: Vec<(String, Vec<(String, String)>)> = redis::cmd("XREVRANGE")
        .arg(keys().changes)
        .arg("+")
        .arg("-")
        .query_async(&mut conn)
        .await
        .unwrap();
    let mut changes = 0usize;
    let mut writes = 0usize;
    for (id, fields) in &entries {
        let e = distributor::core::history::decode(id, fields);
        if e.generation > start {
            changes += e.record.placed.count + e.record.moved.count;
            writes += 1;
        }
    }
    note(&format!(
        "{assignment}, -join-delay {delay}: {changes} owner changes over {UNIT_COUNT} units in {writes} writes, {:.1} s",
        took.as_secs_f64()
    ));
    replica.proc.kill();
    for (mut p, _) in workers {
        p.kill();
    }
    changes as f64 / UNIT_COUNT as f64
}
