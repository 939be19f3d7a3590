//! `distributor plan` against a real Redis, a real replica and real members,
//! in both modes: for each change (a member crashes, one joins with a
//! weight, a weight override, a cordon, a leave while cordoned) the plan
//! made before the change is exactly the table the holder writes once the
//! change is done, and the units it lists are exactly those whose owner
//! changed. The plan is made through the library call the CLI makes, and
//! also by the binary (`--json`) and `/api/plan`, which must agree with it.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use distributor::MatchingTable;
use distributor::cli::plan::report;
use distributor::core::table::Assignment;
use distributor::edge::redis::Store;
use distributor::report::plan::{PlanReport, PlanRequest};
use serde_json::Value;

use crate::support::*;

const LIMIT: Duration = Duration::from_secs(20);

/// The holder's cycle count (0 while no replica holds).
fn cycles(fleet: &Fleet) -> u64 {
    fleet.holder().map_or(0, |h| fleet.statuses()[h].cycles)
}

async fn transit(fleet: &Fleet) -> usize {
    fleet.redis.cmd(&["HLEN", &keys().transit]).await
}

/// Waits until the holder is done: nothing in transit and neither the
/// generation nor the table changed over three holder cycles. The table.
async fn quiet(fleet: &Fleet) -> MatchingTable {
    let deadline = Instant::now() + LIMIT;
    loop {
        let (g, t) = (fleet.generation().await, fleet.table().await);
        let from = cycles(fleet);
        wait_for("three holder cycles", LIMIT, || async {
            cycles(fleet) >= from + 3
        })
        .await;
        if transit(fleet).await == 0 && fleet.generation().await == g && fleet.table().await == t {
            return t;
        }
        assert!(Instant::now() < deadline, "the table did not settle");
    }
}

/// Unit → its owner.
fn owners(t: &MatchingTable) -> BTreeMap<String, String> {
    t.rows()
        .keys()
        .flat_map(|m| {
            t.units_of(m)
                .into_iter()
                .map(move |u| (u.to_string(), m.clone()))
        })
        .collect()
}

/// The predicted table of a plan made with every row.
fn predicted(p: &PlanReport) -> MatchingTable {
    MatchingTable::from_rows(p.rows.clone().expect("the rows"))
}

/// Waits until the holder wrote exactly `want` and is done (see [`quiet`]);
/// on a timeout, or a settled table that is not `want`, fails with both.
async fn holder_writes(fleet: &Fleet, want: &MatchingTable, what: &str) -> MatchingTable {
    let deadline = Instant::now() + LIMIT;
    loop {
        let t = fleet.table().await;
        if t == *want && transit(fleet).await == 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: the holder did not write the planned table within {LIMIT:?}\nplanned {want:?}\nlast    {t:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let settled = quiet(fleet).await;
    assert_eq!(&settled, want, "{what}: the table moved on from the plan");
    settled
}

/// The plan's units, as (unit, from, to), against the owners that changed.
fn check_units(p: &PlanReport, before: &MatchingTable, after: &MatchingTable, what: &str) {
    eprintln!(
        "{} {what}: {} units changed owner as planned ({:?})",
        p.assignment, p.units_changed, p.moves
    );
    let listed: BTreeSet<(String, Vec<String>, Option<String>)> = p
        .units
        .iter()
        .map(|c| (c.unit.clone(), c.from.clone(), c.to.clone()))
        .collect();
    let (b, a) = (owners(before), owners(after));
    let changed: BTreeSet<(String, Vec<String>, Option<String>)> = b
        .keys()
        .chain(a.keys())
        .filter(|u| b.get(*u) != a.get(*u))
        .map(|u| {
            let from = b.get(u).cloned().into_iter().collect();
            (u.clone(), from, a.get(u).cloned())
        })
        .collect();
    assert_eq!(listed, changed, "{what}: the units listed");
    assert_eq!(p.units_changed, changed.len(), "{what}");
    let m = p.moves.expect("counted");
    assert_eq!(m.moved + m.placed, changed.len(), "{what}: {m:?}");
    assert!(m.moved >= m.minimum, "{what}: {m:?}");
}

fn request() -> PlanRequest {
    PlanRequest::default()
}

/// A member on a port chosen now, so that a plan can name it before it
/// starts.
fn member_on(fleet: &Fleet, port: u16, weight: u32) -> distributor::MemberOptions {
    let mut o = fleet.member_options();
    o.listen = SocketAddr::from(([127, 0, 0, 1], port));
    o.weight = weight;
    o
}

/// Runs `distributor plan ... --json` (the binary, with the fleet's move
/// limit and otherwise the default flags: the mode is the holder's); its
/// document.
fn plan_binary(fleet: &Fleet, args: &[&str]) -> Value {
    let limit = format!("-max-moves-per-cycle={}", fleet.config.max_moves_per_cycle);
    let mut all = vec!["plan", &limit];
    all.extend_from_slice(args);
    all.push("--json");
    let out = cli(&fleet.redis.url(), &all);
    assert!(
        out.status.success(),
        "{all:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// One fleet in `assignment` mode through five changes, each planned first.
async fn every_change_is_written_as_planned(assignment: Assignment, max_moves: usize) {
    let mode = assignment.name();
    let all = units(120);
    let mut fleet = Fleet::new(RedisServer::start());
    fleet.config.assignment = assignment;
    fleet.config.max_moves_per_cycle = max_moves;
    fleet.set_units(&all).await;
    for _ in 0..4 {
        fleet.add_member().await;
    }
    fleet.add_replica();
    let store =
        Store::connect(&fleet.config.redis_options(), TABLE, Duration::from_secs(3)).unwrap();
    let plan = |r: PlanRequest| {
        let (config, store) = (fleet.config.clone(), store.clone());
        async move { report(&config, &store, &r, true).await.unwrap() }
    };
    wait_for("every unit placed", LIMIT, || async {
        fleet.table().await.assignments() == all.len()
    })
    .await;
    let stop = tokio_util::sync::CancellationToken::new();
    let port = serve_http(&fleet, 0, Ui::WithPlan, &stop).await;

    // 1. A member crashes.
    let before = quiet(&fleet).await;
    let crashed = fleet.member_id(1);
    let p = plan(PlanRequest {
        leave: vec![crashed.clone()],
        ..request()
    })
    .await;
    assert_eq!((p.assignment.as_str(), p.assignment_from), (mode, "holder"));
    // The page's API makes the same plan, bounded and without the rows.
    let path = format!("/api/plan?leave={}", crashed.replace(':', "%3A"));
    let (code, body) = http_get(port, &path).await.unwrap();
    assert_eq!(code, 200, "{body}");
    let api: Value = serde_json::from_str(&body).unwrap();
    let mut lib = serde_json::to_value(&p).unwrap();
    lib.as_object_mut().unwrap().remove("rows");
    assert_eq!(api, lib, "/api/plan against the library's plan");
    let (code, body) = http_get(port, "/api/plan?leave=nowhere").await.unwrap();
    assert_eq!(code, 400, "{body}");
    assert!(body.contains("invalid --leave \\\"nowhere\\\""), "{body}");
    let (code, body) = http_get(port, "/api/plan?leave=10.9.9.9:1").await.unwrap();
    assert!(code == 400 && body.contains("not listed"), "{body}");
    fleet.members[1].take().unwrap().abort();
    let after = holder_writes(&fleet, &predicted(&p), "crash").await;
    check_units(&p, &before, &after, "crash");
    assert!(p.units_changed > 0, "{}: nothing moves", "crash");
    if assignment == Assignment::Sticky {
        assert_eq!(
            p.moves.map(|m| m.moved),
            Some(0),
            "a sticky leave moves nothing"
        );
    }

    // 2. A member joins, reporting weight 2.
    let before = after;
    let port2 = free_port();
    let joiner = format!("127.0.0.1:{port2}");
    let p = plan(PlanRequest {
        join: vec![format!("{joiner}:2")],
        ..request()
    })
    .await;
    let m = distributor::Member::start(member_on(&fleet, port2, 2))
        .await
        .unwrap();
    assert_eq!(m.id(), joiner);
    fleet.members.push(Some(m));
    let after = holder_writes(&fleet, &predicted(&p), "join").await;
    check_units(&p, &before, &after, "join");
    assert!(p.units_changed > 0, "{}: nothing moves", "join");
    if assignment == Assignment::Sticky {
        let m = p.moves.unwrap();
        assert_eq!(m.moved, m.minimum, "a sticky join moves the minimum");
    }

    // 3. An operator's weight override, planned by the binary.
    let before = after;
    let heavy = fleet.member_id(2);
    let weight = format!("{heavy}=3");
    let doc = plan_binary(&fleet, &["--weight", &weight]);
    let p = plan(PlanRequest {
        weight: vec![weight.clone()],
        ..request()
    })
    .await;
    assert_eq!(doc, serde_json::to_value(&p).unwrap(), "the binary's plan");
    let out = cli(&fleet.redis.url(), &["weights", "set", &heavy, "3"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let after = holder_writes(&fleet, &predicted(&p), "weight").await;
    check_units(&p, &before, &after, "weight");
    assert!(p.units_changed > 0, "{}: nothing moves", "weight");

    // 4. A cordon: the member keeps what it holds.
    let before = after;
    let cordoned = fleet.member_id(3);
    let p = plan(PlanRequest {
        cordon: vec![cordoned.clone()],
        ..request()
    })
    .await;
    let out = cli(&fleet.redis.url(), &["members", "cordon", &cordoned]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let after = holder_writes(&fleet, &predicted(&p), "cordon").await;
    check_units(&p, &before, &after, "cordon");
    assert_eq!(after.units_of(&cordoned), before.units_of(&cordoned));

    // 5. A member leaves (drains and deregisters) while another is
    //    cordoned: none of its units go to the cordoned one.
    let before = after;
    let leaver = fleet.member_id(0);
    let p = plan(PlanRequest {
        leave: vec![leaver.clone()],
        ..request()
    })
    .await;
    fleet.members[0].take().unwrap().shutdown().await;
    let after = holder_writes(&fleet, &predicted(&p), "leave while cordoned").await;
    check_units(&p, &before, &after, "leave while cordoned");
    assert!(
        p.units_changed > 0,
        "{}: nothing moves",
        "leave while cordoned"
    );
    assert_eq!(after.units_of(&cordoned), before.units_of(&cordoned));
    stop.cancel();
    fleet.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sticky_changes_are_written_as_planned() {
    every_change_is_written_as_planned(Assignment::Sticky, 0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ring_changes_are_written_as_planned() {
    every_change_is_written_as_planned(Assignment::Ring, 0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limited_sticky_changes_are_written_as_planned() {
    every_change_is_written_as_planned(Assignment::Sticky, 5).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limited_ring_changes_are_written_as_planned() {
    every_change_is_written_as_planned(Assignment::Ring, 5).await;
}
