//! `-balance cost` against a real Redis, real members and a real replica:
//! the table meets the tolerance for the declared costs, follows a change
//! of costs, isolates a hot unit, and survives bad costs; `distributor
//! costs` edits the hash with the daemon's own validation.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use distributor::core::balance::{self, Balance, Costs, Tolerance};
use distributor::core::costs::UnitCosts;
use distributor::core::table::{MatchingTable, decode_row};

use crate::support::*;

fn ok(out: std::process::Output) -> String {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    String::from_utf8(out.stdout).unwrap()
}

fn fails(out: std::process::Output, needle: &str) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains(needle), "{stderr:?} lacks {needle:?}");
}

/// The stored table's loads with the costs in Redis, as the holder sees
/// them (every member with a row is live here).
async fn loads_now(fleet: &Fleet, units: &[String]) -> (MatchingTable, balance::LoadSummary) {
    let t = fleet.table().await;
    let pairs: BTreeMap<String, String> = fleet.redis.cmd(&["HGETALL", &keys().costs]).await;
    let (costs, _) = UnitCosts::decode(pairs);
    let mut sorted = units.to_vec();
    sorted.sort();
    let inputs = distributor::core::inputs::Inputs {
        groups: vec![distributor::core::inputs::Group {
            name: SERVICES.into(),
            members: t.rows().keys().cloned().collect(),
            malformed: vec![],
        }],
        units: sorted.into(),
        rejections: vec![],
    };
    let summary = t.loads(
        &inputs,
        |_| true,
        &|_| 1,
        Costs::Lookup(&|u| costs.of(u)),
        Tolerance::DEFAULT,
    );
    (t, summary)
}

/// Waits until every unit has one owner among the live members, nothing is
/// in transit and every member is within its band.
async fn wait_balanced(fleet: &Fleet, units: &[String], limit: Duration) -> MatchingTable {
    let deadline = Instant::now() + limit;
    loop {
        let (t, summary) = loads_now(fleet, units).await;
        let transit: usize = fleet.redis.cmd(&["HLEN", &keys().transit]).await;
        let mut all: Vec<&str> = t.rows().values().flat_map(|v| decode_row(v)).collect();
        all.sort();
        let mut want: Vec<&str> = units.iter().map(String::as_str).collect();
        want.sort();
        let live = fleet.live_member_ids().len();
        if transit == 0 && all == want && t.len() == live && summary.out_of_band() == 0 {
            return t;
        }
        assert!(
            Instant::now() < deadline,
            "not balanced within {limit:?}: {} out of band, {transit} in transit, {summary:?}",
            summary.out_of_band()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_table_meets_the_tolerance_follows_costs_and_survives_bad_ones() {
    let units = units(120);
    let mut fleet = Fleet::new(RedisServer::start());
    fleet.config.balance = Balance::Cost(Tolerance::DEFAULT);
    fleet.set_units(&units).await;
    // Zipf-like costs: a few large units, many small ones.
    let costs = keys().costs;
    for (k, u) in units.iter().enumerate() {
        let c = format!("{:.3}", 1000.0 / (k as f64 + 5.0));
        let _: i64 = fleet.redis.cmd(&["HSET", &costs, u, &c]).await;
    }
    for _ in 0..4 {
        fleet.add_member().await;
    }
    fleet.add_replica();
    let first = wait_balanced(&fleet, &units, Duration::from_secs(20)).await;
    let meta: BTreeMap<String, String> = fleet.redis.cmd(&["HGETALL", &keys().meta]).await;
    assert_eq!(meta["assignment"], "cost tolerance=10%");
    let status = ok(cli(&fleet.redis.url(), &["status"]));
    assert!(
        status.contains("balance by cost (tolerance 10%)"),
        "{status}"
    );
    assert!(status.contains(", load "), "{status}");

    // One unit becomes costlier than any share: alone on a member.
    let hot = &units[60];
    let _: i64 = fleet.redis.cmd(&["HSET", &costs, hot, "5000"]).await;
    let t = wait_balanced(&fleet, &units, Duration::from_secs(20)).await;
    let alone = t
        .rows()
        .values()
        .filter(|v| v.as_str() == hot.as_str())
        .count();
    assert_eq!(alone, 1, "{t:?}");
    assert!(t != first);
    let status = ok(cli(&fleet.redis.url(), &["status"]));
    assert!(
        status.contains(&format!(
            "hot units (costlier than any share, each alone on a member where possible): {hot}"
        )),
        "{status}"
    );

    // Unreadable entries are skipped and counted; a key of the wrong type
    // does not stop the holder, which follows a new unit list with the
    // costs it knew.
    let _: i64 = fleet.redis.cmd(&["HSET", &costs, &units[1], "NaN"]).await;
    let _: i64 = fleet.redis.cmd(&["HSET", &costs, &units[2], "-3"]).await;
    wait_for(
        "two invalid costs in the holder's status",
        Duration::from_secs(10),
        || async {
            fleet
                .statuses()
                .iter()
                .any(|s| s.balance.as_ref().is_some_and(|b| b.invalid_costs == 2))
        },
    )
    .await;
    let () = fleet.redis.cmd(&["SET", &costs, "not a hash"]).await;
    wait_for(
        "the wrong type reported",
        Duration::from_secs(10),
        || async {
            fleet.statuses().iter().any(|s| {
                s.balance
                    .as_ref()
                    .and_then(|b| b.costs_problem.as_deref())
                    .is_some_and(|p| p.contains(&costs))
            })
        },
    )
    .await;
    fleet.set_units(&units[..100]).await;
    let mut want: Vec<&str> = units[..100].iter().map(String::as_str).collect();
    want.sort();
    wait_for(
        "the table follows the new list",
        Duration::from_secs(20),
        || async {
            let t = fleet.table().await;
            let transit: usize = fleet.redis.cmd(&["HLEN", &keys().transit]).await;
            let mut all: Vec<&str> = t.rows().values().flat_map(|v| decode_row(v)).collect();
            all.sort();
            transit == 0 && all == want
        },
    )
    .await;
    fleet.shutdown().await;
}

#[tokio::test]
async fn costs_set_list_and_unset_with_validation() {
    let redis = RedisServer::start();
    let url = redis.url();
    assert_eq!(ok(cli(&url, &["costs", "set", "a", "3"])), "set a to 3\n");
    assert_eq!(
        ok(cli(&url, &["costs", "set", "b", "0.25"])),
        "set b to 0.25\n"
    );
    let _: i64 = redis.cmd(&["HSET", &keys().costs, "c", "junk"]).await;
    let list = ok(cli(&url, &["costs", "list"]));
    let rows: Vec<Vec<&str>> = list
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(rows[0], ["unit", "cost"]);
    assert_eq!(rows[1], ["a", "3"]);
    assert_eq!(rows[2], ["b", "0.25"]);
    assert!(list.contains("unreadable"), "{list}");
    assert!(
        list.ends_with("2 declared, 1 unreadable; an undeclared unit counts as 1.625\n"),
        "{list}"
    );
    for (args, needle) in [
        (
            &["costs", "set", "a", "0"][..],
            "invalid cost \"0\" for \"a\"",
        ),
        (&["costs", "set", "a", "-1"], "invalid cost \"-1\""),
        (&["costs", "set", "a", "NaN"], "invalid cost \"NaN\""),
        (&["costs", "set", "a", "2e9"], "invalid cost \"2e9\""),
        (&["costs", "set", "x,y", "1"], "invalid work unit \"x,y\""),
    ] {
        fails(cli(&url, args), needle);
    }
    let stored: BTreeMap<String, String> = redis.cmd(&["HGETALL", &keys().costs]).await;
    assert_eq!(stored["a"], "3", "the rejected commands wrote nothing");
    assert_eq!(ok(cli(&url, &["costs", "unset", "a"])), "unset\n");
    assert_eq!(ok(cli(&url, &["costs", "unset", "a"])), "no cost\n");
    let () = redis.cmd(&["SET", &keys().costs, "x"]).await;
    fails(cli(&url, &["costs", "list"]), "costs");
}

/// A fleet balancing by measured load: 40 units, 4 members writing their
/// loads every 200 ms, smoothed with `half_life`, and a replica.
async fn load_fleet(half_life: Duration) -> (Fleet, Vec<String>) {
    let units = units(40);
    let mut fleet = Fleet::new(RedisServer::start());
    fleet.config.balance = Balance::Load(Tolerance::DEFAULT);
    fleet.set_units(&units).await;
    for _ in 0..4 {
        let mut o = fleet.member_options();
        o.load_report_interval = Duration::from_millis(200);
        o.load_half_life = half_life;
        let m = distributor::Member::start(o).await.unwrap();
        fleet.members.push(Some(m));
    }
    fleet.add_replica();
    (fleet, units)
}

/// `-balance load`: members measure their units through
/// `Member::report_load`; the smoothed loads reach `{T}:loads` in the
/// documented format, and a unit that turns out far heavier than any share
/// ends alone on a member. A member that leaves removes its field.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn measured_loads_put_a_heavy_unit_alone_on_a_member() {
    let (mut fleet, units) = load_fleet(Duration::from_secs(1)).await;
    let heavy = units[7].clone();
    let measure = |fleet: &Fleet| {
        for m in fleet.members.iter().flatten() {
            let owned = m.assignment().borrow().units.clone();
            for u in owned {
                let load = if u == heavy { 100.0 } else { 1.0 };
                assert!(m.report_load(&u, load));
            }
        }
    };
    wait_for(
        "the heavy unit alone on a member",
        Duration::from_secs(30),
        || async {
            measure(&fleet);
            let t = fleet.table().await;
            let transit: usize = fleet.redis.cmd(&["HLEN", &keys().transit]).await;
            transit == 0 && t.rows().values().any(|v| *v == heavy)
        },
    )
    .await;
    let loads: BTreeMap<String, String> = fleet.redis.cmd(&["HGETALL", &keys().loads]).await;
    assert!(
        loads
            .values()
            .any(|v| v.contains(&format!("{heavy}=100.000"))),
        "{loads:?}"
    );
    for (member, value) in &loads {
        assert!(
            distributor::core::load::decode_report(value).is_some(),
            "{member}: {value:?}"
        );
    }
    let meta: BTreeMap<String, String> = fleet.redis.cmd(&["HGETALL", &keys().meta]).await;
    assert_eq!(meta["assignment"], "load tolerance=10%");
    let status = ok(cli(&fleet.redis.url(), &["status"]));
    assert!(
        status.contains("balance by load (tolerance 10%)"),
        "{status}"
    );
    assert!(!fleet.members[0].as_ref().unwrap().report_load("x", -1.0));

    let leaving = fleet.members[0].take().unwrap();
    let id = leaving.id().to_string();
    leaving.shutdown().await;
    let loads: BTreeMap<String, String> = fleet.redis.cmd(&["HGETALL", &keys().loads]).await;
    assert!(!loads.contains_key(&id), "{loads:?}");
    fleet.shutdown().await;
}

/// Issue 39, item 8: a `{T}:loads` field dated long ago (a member killed,
/// never forgotten) or far ahead of the holder's clock (a clock running
/// ahead) is left out: the units it claims heavy are not put alone, the
/// holder's status and `distributor status` count it, and once the field
/// ahead comes within bounds by the clock alone (nobody writes), it counts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn loads_dated_out_of_bounds_are_left_out_until_their_date_fits() {
    let (fleet, units) = load_fleet(Duration::ZERO).await;
    let age = distributor::core::timing::Timing::DEFAULT.load_age();
    let now = distributor::unix_ms();
    let (dead, ahead) = (units[3].clone(), units[7].clone());
    // Dated past `max_age`: left out for good. Dated `max_ahead` and 3 s
    // ahead: left out for 3 s, then the newest report of its unit.
    let old = now - age.max_age.as_millis() as u64 - 1_000;
    let soon = now + age.max_ahead.as_millis() as u64 + 3_000;
    let k = keys();
    let (): () = fleet
        .redis
        .cmd(&["HSET", &k.loads, "gone:1", &format!("{old} {dead}=500")])
        .await;
    let (): () = fleet
        .redis
        .cmd(&["HSET", &k.loads, "ahead:1", &format!("{soon} {ahead}=500")])
        .await;
    let measure = |fleet: &Fleet| {
        for m in fleet.members.iter().flatten() {
            for u in m.assignment().borrow().units.clone() {
                assert!(m.report_load(&u, 1.0));
            }
        }
    };
    let alone = |t: &MatchingTable, unit: &str| t.rows().values().any(|v| v == unit);
    wait_for(
        "both stale fields counted by the holder",
        Duration::from_secs(20),
        || async {
            measure(&fleet);
            fleet
                .statuses()
                .iter()
                .any(|s| s.balance.as_ref().is_some_and(|b| b.stale_loads == 2))
        },
    )
    .await;
    assert!(distributor::unix_ms() < soon - age.max_ahead.as_millis() as u64);
    let t = fleet.table().await;
    assert!(!alone(&t, &dead) && !alone(&t, &ahead), "{:?}", t.rows());
    let status = ok(cli(&fleet.redis.url(), &["status"]));
    assert!(
        status.contains("2 members' loads left out for their date"),
        "{status}"
    );
    // The clock alone brings the field ahead within bounds: it counts, and
    // its unit, far heavier than any share, ends alone on a member.
    wait_for(
        "the unit reported ahead alone once its date fits",
        Duration::from_secs(30),
        || async {
            measure(&fleet);
            let t = fleet.table().await;
            let transit: usize = fleet.redis.cmd(&["HLEN", &k.transit]).await;
            transit == 0 && alone(&t, &ahead)
        },
    )
    .await;
    assert!(!alone(&fleet.table().await, &dead));
    let h = fleet.wait_for_holder().await;
    let b = fleet.statuses()[h].balance.clone().unwrap();
    assert_eq!(b.stale_loads, 1, "{b:?}");
    fleet.shutdown().await;
}
