//! Idle holder cycles read no list (project issue 13): each list has a WATCH
//! guard, and a list is transferred again only when its guard cannot tell
//! that nobody touched it. These tests check that an idle holder does not
//! re-read, and that every way of changing a list, or of losing the guard,
//! is still picked up by the next cycles.

use std::time::Duration;

use crate::support::*;

/// The holder's `distributor_list_reads_total` by outcome: (read, cached).
fn list_reads(fleet: &Fleet) -> (f64, f64) {
    let i = fleet.holder().expect("a holder");
    let text = fleet.replicas[i].as_ref().unwrap().metrics().encode();
    let samples = parse_metrics(&text);
    let get = |outcome| {
        metric(
            &samples,
            "distributor_list_reads_total",
            &[("outcome", outcome)],
        )
        .unwrap_or(0.0)
    };
    (get("read"), get("cached"))
}

/// Calls of one command since Redis started or `CONFIG RESETSTAT`
/// (`INFO commandstats`; commands run by scripts count too).
async fn calls(fleet: &Fleet, command: &str) -> u64 {
    let info: String = fleet.redis.cmd(&["INFO", "commandstats"]).await;
    count_in(&info, command)
}

/// A command's calls in one `INFO commandstats` reply.
pub(crate) fn count_in(info: &str, command: &str) -> u64 {
    let prefix = format!("cmdstat_{command}:calls=");
    info.lines()
        .find_map(|l| l.strip_prefix(prefix.as_str()))
        .and_then(|v| v.split(',').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// The holder's completed cycles so far.
fn cycles(fleet: &Fleet) -> u64 {
    let i = fleet.holder().expect("a holder");
    fleet.statuses()[i].cycles
}

/// Waits until the holder completed `n` more cycles.
async fn more_cycles(fleet: &Fleet, n: u64) {
    fleet.wait_for_holder().await;
    let from = cycles(fleet);
    wait_for("more cycles", Duration::from_secs(10), || async {
        fleet.holder().is_some() && cycles(fleet) >= from + n
    })
    .await;
}

/// Members of the services group the holder counts as failed.
fn failed_members(fleet: &Fleet) -> usize {
    let i = fleet.holder().expect("a holder");
    fleet.statuses()[i]
        .groups
        .iter()
        .map(|(_, _, failed)| *failed)
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_holder_reads_no_list_and_any_change_is_read_on_the_next_cycle() {
    let all = units(40);
    let (fleet, _) = Fleet::converged(|_| {}, 3, 1, &all[..20]).await;
    more_cycles(&fleet, 2).await;

    // (a) Idle: no LRANGE at all, every list known unchanged.
    let (read, cached) = list_reads(&fleet);
    let lranges = calls(&fleet, "lrange").await;
    let from = cycles(&fleet);
    more_cycles(&fleet, 10).await;
    let ran = cycles(&fleet) - from;
    let (read_after, cached_after) = list_reads(&fleet);
    assert_eq!(read_after, read, "an idle holder read a list");
    assert_eq!(calls(&fleet, "lrange").await, lranges);
    assert!(
        cached_after - cached >= 2.0 * ran as f64,
        "two lists per cycle known unchanged: {cached} -> {cached_after} in {ran} cycles"
    );

    // (b) Every kind of change by another client is read.
    let () = fleet.redis.cmd(&["LPUSH", UNITS, &all[20]]).await;
    fleet
        .wait_for_table(&all[..21], Duration::from_secs(5))
        .await;
    let _: i64 = fleet.redis.cmd(&["LREM", UNITS, "0", &all[20]]).await;
    fleet
        .wait_for_table(&all[..20], Duration::from_secs(5))
        .await;
    let _: i64 = fleet.redis.cmd(&["DEL", UNITS]).await;
    fleet.wait_for_table(&[], Duration::from_secs(5)).await;
    // A list renamed over it.
    let mut replacement = vec!["RPUSH", "other-list"];
    replacement.extend(all[10..30].iter().map(String::as_str));
    let _: i64 = fleet.redis.cmd(&replacement).await;
    let () = fleet.redis.cmd(&["RENAME", "other-list", UNITS]).await;
    fleet
        .wait_for_table(&all[10..30], Duration::from_secs(5))
        .await;
    // A key of the wrong type: the cycle fails and the table stays.
    let before = fleet.table().await;
    let _: i64 = fleet.redis.cmd(&["DEL", UNITS]).await;
    let () = fleet.redis.cmd(&["SET", UNITS, "not a list"]).await;
    wait_for("the wrong type is reported", Duration::from_secs(5), || {
        let s = fleet.statuses()[fleet.holder().unwrap()].clone();
        async move { s.last_error.is_some_and(|e| e.contains(UNITS)) }
    })
    .await;
    assert_eq!(fleet.table().await, before, "a failed read writes nothing");
    fleet.set_units(&all[..5]).await;
    fleet
        .wait_for_table(&all[..5], Duration::from_secs(5))
        .await;
    // The services list: an address nobody serves is listed, then removed.
    let _: i64 = fleet.redis.cmd(&["RPUSH", SERVICES, "127.0.0.1:1"]).await;
    wait_for("the new member is counted", Duration::from_secs(5), || {
        let n = failed_members(&fleet);
        async move { n == 1 }
    })
    .await;
    let _: i64 = fleet
        .redis
        .cmd(&["LREM", SERVICES, "0", "127.0.0.1:1"])
        .await;
    wait_for("the member is gone", Duration::from_secs(5), || {
        let n = failed_members(&fleet);
        async move { n == 0 }
    })
    .await;
    // FLUSHALL: everything is gone (the lease too); members register again.
    let () = fleet.redis.cmd(&["FLUSHALL"]).await;
    fleet.wait_for_table(&[], Duration::from_secs(10)).await;
    fleet.set_units(&all[..12]).await;
    fleet
        .wait_for_table(&all[..12], Duration::from_secs(10))
        .await;

    // Idle again: no list read.
    more_cycles(&fleet, 2).await;
    let (read, _) = list_reads(&fleet);
    more_cycles(&fleet, 5).await;
    assert_eq!(list_reads(&fleet).0, read);
    fleet.shutdown().await;
}

/// (c) The guards' connections killed by Redis: the next cycle cannot tell
/// that nothing changed, reads every list again, and a change made at the
/// same moment is not lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_guard_connection_means_the_lists_are_read_again() {
    let all = units(30);
    let (fleet, _) = Fleet::converged(|_| {}, 3, 1, &all[..20]).await;
    more_cycles(&fleet, 2).await;
    for round in 0..3 {
        let (read, _) = list_reads(&fleet);
        // Guard connections are the ones whose last command was WATCH or
        // EXEC: two per list once the guards re-armed after the last round's
        // kill (a cycle or two later).
        let guard_ids = || async {
            let clients: String = fleet.redis.cmd(&["CLIENT", "LIST"]).await;
            clients
                .lines()
                .filter(|l| {
                    l.split(' ')
                        .any(|f| matches!(f, "cmd=watch" | "cmd=exec" | "cmd=multi"))
                })
                .filter_map(|l| l.split(' ').find_map(|f| f.strip_prefix("id=")))
                .map(str::to_string)
                .collect::<Vec<String>>()
        };
        wait_for(
            "two guard connections per list",
            Duration::from_secs(10),
            || async { guard_ids().await.len() >= 4 },
        )
        .await;
        let guards = guard_ids().await;
        for id in &guards {
            let _: i64 = fleet.redis.cmd(&["CLIENT", "KILL", "ID", id]).await;
        }
        let unit = &all[20 + round];
        let () = fleet.redis.cmd(&["RPUSH", UNITS, unit]).await;
        let expected: Vec<String> = all[..21 + round].to_vec();
        fleet
            .wait_for_table(&expected, Duration::from_secs(5))
            .await;
        assert!(list_reads(&fleet).0 > read, "the lists were read again");
    }
    // Everyone's connections killed at once: the holder recovers too.
    let _: i64 = fleet.redis.cmd(&["CLIENT", "KILL", "TYPE", "normal"]).await;
    fleet.set_units(&all[..10]).await;
    fleet
        .wait_for_table(&all[..10], Duration::from_secs(10))
        .await;
    more_cycles(&fleet, 2).await;
    let (read, _) = list_reads(&fleet);
    more_cycles(&fleet, 5).await;
    assert_eq!(list_reads(&fleet).0, read, "idle again after the reconnect");
    fleet.shutdown().await;
}

/// (d) An ACL without WATCH: every list is read every cycle, as before the
/// guards, and changes are still picked up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_watch_every_list_is_read_every_cycle() {
    use crate::security::{ADMIN_PASSWORD, PASSWORD, create_acl_user_with};
    let redis = RedisServer::start_with(&["--requirepass", ADMIN_PASSWORD]);
    create_acl_user_with(&redis, "+llen +memory|usage").await;
    let url = format!("redis://distributor:{PASSWORD}@127.0.0.1:{}", redis.port());
    let all = units(20);
    let (fleet, _) = Fleet::converged_on(redis, |c| c.redis_url = url, 3, 1, &all[..10]).await;
    more_cycles(&fleet, 2).await;
    let (read, cached) = list_reads(&fleet);
    let from = cycles(&fleet);
    more_cycles(&fleet, 5).await;
    let ran = cycles(&fleet) - from;
    let (read_after, cached_after) = list_reads(&fleet);
    assert_eq!(cached_after, cached, "nothing can be known unchanged");
    assert!(read_after - read >= 2.0 * ran as f64);
    let () = fleet.redis.cmd(&["RPUSH", UNITS, &all[10]]).await;
    fleet
        .wait_for_table(&all[..11], Duration::from_secs(5))
        .await;
    let s = fleet.statuses()[fleet.wait_for_holder().await].clone();
    assert_eq!(s.last_error, None);
    fleet.shutdown().await;
}

/// (e) Scripts go by `FCALL` of the library (by `EVALSHA` where Functions
/// are refused: `functions.rs`), never as a plain `EVAL` (BENCHMARKS.md,
/// "Redis cost per cycle"), and `FUNCTION FLUSH` does not break cycles,
/// renewals or writes: a "function not found" reply loads the library again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scripts_go_by_fcall_and_survive_a_function_flush() {
    let all = units(20);
    let (fleet, _) = Fleet::converged(|_| {}, 3, 1, &all[..10]).await;
    let () = fleet.redis.cmd(&["CONFIG", "RESETSTAT"]).await;
    more_cycles(&fleet, 5).await;
    assert_eq!(calls(&fleet, "eval").await, 0, "a script sent in full");
    assert_eq!(calls(&fleet, "evalsha").await, 0);
    assert!(calls(&fleet, "fcall").await > 0);
    for round in 0..3 {
        let () = fleet.redis.cmd(&["FUNCTION", "FLUSH"]).await;
        let () = fleet.redis.cmd(&["RPUSH", UNITS, &all[10 + round]]).await;
        fleet
            .wait_for_table(&all[..11 + round], Duration::from_secs(5))
            .await;
    }
    let generation = fleet.generation().await;
    let holder = fleet.wait_for_holder().await;
    let () = fleet.redis.cmd(&["FUNCTION", "FLUSH"]).await;
    more_cycles(&fleet, 5).await;
    assert_eq!(fleet.holder(), Some(holder), "renewals went on");
    assert_eq!(
        fleet.generation().await,
        generation,
        "idle: nothing written"
    );
    assert_eq!(fleet.statuses()[holder].last_error, None);
    assert_eq!(calls(&fleet, "eval").await, 0);
    assert_eq!(calls(&fleet, "evalsha").await, 0);
    fleet.shutdown().await;
}

/// The members' reports and the weight overrides have a guard too: an idle
/// holder does not read them, and an operator's override (or a member's new
/// report) is read on the next cycle.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_holder_reads_reports_and_overrides_only_after_they_change() {
    let all = units(90);
    let mut fleet = Fleet::new(RedisServer::start());
    fleet.set_units(&all).await;
    for _ in 0..3 {
        // No periodic refresh of the report during the test.
        let mut o = fleet.member_options();
        o.reregister_interval = Duration::from_secs(600);
        fleet
            .members
            .push(Some(distributor::Member::start(o).await.unwrap()));
    }
    fleet.add_replica();
    fleet.wait_for_table(&all, Duration::from_secs(10)).await;
    more_cycles(&fleet, 3).await;
    // HGETALL by anyone but the census (one per step, counted by its INCR).
    // Both counts come from one INFO reply: read apart, a census step
    // between the two reads would count as a read of the reports.
    let reads = || async {
        let info: String = fleet.redis.cmd(&["INFO", "commandstats"]).await;
        count_in(&info, "hgetall") - count_in(&info, "incr")
    };
    let before = reads().await;
    more_cycles(&fleet, 10).await;
    assert_eq!(reads().await, before, "an idle holder read the reports");

    let member = fleet.member_id(0);
    let share = |t: &distributor::MatchingTable| t.units_of(&member).len();
    let () = fleet
        .redis
        .cmd(&["HSET", &keys().weights, &member, "8"])
        .await;
    wait_for(
        "the override is applied",
        Duration::from_secs(5),
        || async { share(&fleet.table().await) >= 60 },
    )
    .await;
    let _: i64 = fleet.redis.cmd(&["HDEL", &keys().weights, &member]).await;
    wait_for("the override is gone", Duration::from_secs(5), || async {
        share(&fleet.table().await) <= 40
    })
    .await;
    fleet.shutdown().await;
}
