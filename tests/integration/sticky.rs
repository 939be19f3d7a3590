//! `-assignment sticky` against a real Redis and a real replica: every join
//! and leave moves exactly the minimum, and the table is never reshuffled.

use std::collections::BTreeMap;
use std::time::Duration;

use distributor::core::sticky;
use distributor::core::table::{Assignment, MatchingTable, Moves, decode_row};
use std::time::Instant;

use crate::support::*;

/// Each unit's owner in a table.
fn owners(t: &MatchingTable) -> BTreeMap<String, String> {
    t.rows()
        .iter()
        .flat_map(|(m, v)| {
            distributor::core::table::decode_row(v)
                .into_iter()
                .map(move |u| (u.to_string(), m.clone()))
        })
        .collect()
}

/// Units of `before` that have another owner in `after`, among those whose
/// owner in `before` is still in `after` (units of a member that left are
/// placed, not moved).
fn moved(before: &MatchingTable, after: &MatchingTable) -> usize {
    let after_owner = owners(after);
    owners(before)
        .iter()
        .filter(|(_, m)| after.rows().contains_key(*m))
        .filter(|(u, m)| after_owner.get(*u) != Some(m))
        .count()
}

/// Waits until the stored table is settled for exactly `live`: one row each,
/// the rows a partition of `units` within ±1 of `units / live` (or of the
/// weighted share `share`), and nothing in transit.
async fn wait_settled(
    fleet: &Fleet,
    live: &[String],
    units: &[String],
    share: impl Fn(&str) -> f64,
    limit: Duration,
) -> MatchingTable {
    let mut want_members: Vec<&str> = live.iter().map(String::as_str).collect();
    want_members.sort();
    let mut want_units: Vec<&str> = units.iter().map(String::as_str).collect();
    want_units.sort();
    let deadline = Instant::now() + limit;
    loop {
        let t = fleet.table().await;
        let transit: usize = fleet.redis.cmd(&["HLEN", &keys().transit]).await;
        let members: Vec<&str> = t.rows().keys().map(String::as_str).collect();
        let mut all: Vec<&str> = t.rows().values().flat_map(|v| v.split(',')).collect();
        all.retain(|u| !u.is_empty());
        all.sort();
        let balanced = t
            .rows()
            .keys()
            .all(|m| (t.units_of(m).len() as f64 - share(m)).abs() < 1.0);
        if transit == 0 && members == want_members && all == want_units && balanced {
            return t;
        }
        assert!(
            Instant::now() < deadline,
            "not settled within {limit:?}: {} rows, {} units, transit {transit}, balanced {balanced}",
            members.len(),
            all.len()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sticky_joins_and_leaves_move_exactly_the_minimum() {
    const MEMBERS: usize = 20;
    let units = units(2000);
    let mut fleet = Fleet::new(RedisServer::start());
    fleet.config.assignment = Assignment::Sticky;
    // The crashes follow each other within the quarantine's window: units
    // of two crashed members would be held and tried on pinned members
    // (`core::quarantine`), moves of the holder's policy, not the solver's,
    // which this test counts.
    fleet.config.quarantine = distributor::core::quarantine::QuarantineRule::OFF;
    fleet.set_units(&units).await;
    for _ in 0..MEMBERS {
        fleet.add_member().await;
    }
    fleet.add_replica();
    let total = units.len() as f64;
    let even = |n: usize| move |_: &str| total / n as f64;
    let limit = Duration::from_secs(30);
    let mut before = wait_settled(
        &fleet,
        &fleet.live_member_ids(),
        &units,
        even(MEMBERS),
        limit,
    )
    .await;

    // Joins, crashes and drains, one at a time.
    let metrics = fleet.replicas[0].as_ref().unwrap().metrics();
    let kind = |kind| distributor::ops::metrics::Kind { kind };
    let mut rows_before = (
        metrics.table_writes_sent.get_or_create(&kind("rows")).get(),
        metrics.table_write_bytes.get_or_create(&kind("rows")).get(),
    );
    let whole_before = metrics
        .table_writes_sent
        .get_or_create(&kind("whole"))
        .get();
    assert!(whole_before >= 1, "the first table goes whole");
    let steps = [
        "join", "crash", "join", "drain", "crash", "join", "join", "drain",
    ];
    for (n, step) in steps.iter().enumerate() {
        let changed = match *step {
            "join" => {
                let i = fleet.add_member().await;
                fleet.member_id(i)
            }
            kind => {
                // A member that was there from the start, a different one each time.
                let i = n;
                let id = fleet.member_id(i);
                let m = fleet.members[i].take().unwrap();
                if kind == "crash" {
                    m.abort();
                } else {
                    m.shutdown().await;
                }
                id
            }
        };
        let live = fleet.live_member_ids();
        let after = wait_settled(&fleet, &live, &units, even(live.len()), limit).await;
        let moves = moved(&before, &after);
        // The minimum: a newcomer's row (every unit it gets moves), or none
        // for a leave (the leaver's units are placed, nothing else moves).
        let minimum = if *step == "join" {
            after.units_of(&changed).len()
        } else {
            0
        };
        // The same bound from the pure function the daemon reports with.
        let members: Vec<(&str, u32)> = live.iter().map(|m| (m.as_str(), 1)).collect();
        let unit_refs: Vec<&str> = units.iter().map(String::as_str).collect();
        let rows = before
            .rows()
            .iter()
            .map(|(m, v)| (m.as_str(), decode_row(v)));
        assert_eq!(sticky::min_moves(rows, &members, &unit_refs), minimum);
        eprintln!(
            "{step} {changed}: {moves} moved (minimum {minimum}), {} placed",
            before.units_of(&changed).len()
        );
        assert_eq!(moves, minimum, "step {n}: {step} of {changed}");
        // The holder recorded the change in `{T}:meta` (`distributor status`).
        let meta: BTreeMap<String, String> = fleet.redis.cmd(&["HGETALL", &keys().meta]).await;
        assert_eq!(meta.get("assignment").map(String::as_str), Some("sticky"));
        let recorded = meta.get("last_change").and_then(|v| Moves::decode(v));
        let recorded = recorded.expect("a last change");
        assert_eq!(recorded.moved, recorded.minimum, "{recorded:?}");
        // The holder sent the rows that changed, not the whole table.
        let metrics = fleet.replicas[0].as_ref().unwrap().metrics();
        let sent = |kind: &'static str| {
            let k = distributor::ops::metrics::Kind { kind };
            (
                metrics.table_writes_sent.get_or_create(&k).get(),
                metrics.table_write_bytes.get_or_create(&k).get(),
            )
        };
        let ((rows, row_bytes), (whole, _)) = (sent("rows"), sent("whole"));
        assert!(
            rows > rows_before.0 && row_bytes > rows_before.1,
            "step {n}: no rows write ({rows} rows, {whole} whole)"
        );
        assert_eq!(whole, whole_before, "step {n}: a whole write");
        rows_before = (rows, row_bytes);
        if *step != "join" {
            // Every unit of the leaver changed owner; no other unit did.
            let (b, a) = (owners(&before), owners(&after));
            let changed_owner = b.iter().filter(|(u, m)| a.get(*u) != Some(*m)).count();
            assert_eq!(changed_owner, before.units_of(&changed).len());
        }
        before = after;
    }
    fleet.shutdown().await;
}

/// Members that report weights get rows within ±1 of their exact share, in
/// both modes (`wait_settled` checks the rows against the shares).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn weighted_members_get_their_share_in_both_modes() {
    for assignment in [Assignment::Ring, Assignment::Sticky] {
        let units = units(1001);
        let mut fleet = Fleet::new(RedisServer::start());
        fleet.config.assignment = assignment;
        fleet.set_units(&units).await;
        let mut weights = BTreeMap::new();
        for w in [1u32, 2, 3, 4, 10] {
            let mut o = fleet.member_options();
            o.weight = w;
            let m = distributor::Member::start(o).await.unwrap();
            weights.insert(m.id().to_string(), w);
            fleet.members.push(Some(m));
        }
        fleet.add_replica();
        let total: u32 = weights.values().sum();
        let share = |m: &str| units.len() as f64 * f64::from(weights[m]) / f64::from(total);
        let t = wait_settled(
            &fleet,
            &fleet.live_member_ids(),
            &units,
            share,
            Duration::from_secs(20),
        )
        .await;
        let rows: Vec<(u32, usize)> = weights
            .iter()
            .map(|(m, w)| (*w, t.units_of(m).len()))
            .collect();
        eprintln!("{}: (weight, row) {rows:?}", assignment.name());
        // Both modes record the mode; sticky mode also its last change (ring
        // mode without a move limit does not count moves: whole-table passes
        // in the default mode).
        let meta: BTreeMap<String, String> = fleet.redis.cmd(&["HGETALL", &keys().meta]).await;
        assert_eq!(meta.get("assignment"), Some(&assignment.name().to_string()));
        if assignment == Assignment::Sticky {
            let change = meta.get("last_change").and_then(|v| Moves::decode(v));
            let change = change.expect("a last change");
            assert!(change.moved >= change.minimum, "{change:?}");
        }
        fleet.shutdown().await;
    }
}

/// `distributor weights set` overrides a member's reported weight: within a
/// few cycles its row is its weighted share (±1), in both modes; `weights
/// unset` gives it its reported weight again, and the rows follow.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_override_beats_the_reported_weight_until_unset() {
    let ok = |url: &str, args: &[&str]| {
        let out = cli(url, args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{args:?}: {stderr}");
        String::from_utf8(out.stdout).unwrap()
    };
    for assignment in [Assignment::Ring, Assignment::Sticky] {
        let units = units(600);
        let mut fleet = Fleet::new(RedisServer::start());
        fleet.config.assignment = assignment;
        fleet.set_units(&units).await;
        let mut reported = BTreeMap::new();
        for w in [1u32, 2, 1, 1] {
            let mut o = fleet.member_options();
            o.weight = w;
            let m = distributor::Member::start(o).await.unwrap();
            reported.insert(m.id().to_string(), w);
            fleet.members.push(Some(m));
        }
        fleet.add_replica();
        let live = fleet.live_member_ids();
        let url = fleet.redis.url();
        let settle = |weights: BTreeMap<String, u32>| {
            let (fleet, live) = (&fleet, &live);
            async move {
                let units: Vec<String> = fleet.redis.cmd(&["LRANGE", UNITS, "0", "-1"]).await;
                let total: u32 = weights.values().sum();
                let share = |m: &str| units.len() as f64 * f64::from(weights[m]) / f64::from(total);
                wait_settled(fleet, live, &units, share, Duration::from_secs(20)).await
            }
        };
        settle(reported.clone()).await;

        // The member reporting 2 is overridden to 5: 5 of 8 shares.
        let target = reported.iter().find(|(_, w)| **w == 2).unwrap().0.clone();
        assert_eq!(
            ok(&url, &["weights", "set", &target, "5"]),
            format!("set {target} to 5\n")
        );
        let mut overridden = reported.clone();
        overridden.insert(target.clone(), 5);
        let t = settle(overridden).await;
        assert!(
            t.units_of(&target).len().abs_diff(375) <= 1,
            "{assignment:?}"
        );
        let list = ok(&url, &["weights", "list"]);
        let row: Vec<&str> = list
            .lines()
            .find(|l| l.starts_with(target.as_str()))
            .unwrap()
            .split_whitespace()
            .collect();
        assert_eq!(row, [target.as_str(), "5", "5", "2"], "{list}");

        // Unset: the reported weight counts again.
        assert_eq!(ok(&url, &["weights", "unset", &target]), "unset\n");
        let t = settle(reported.clone()).await;
        assert!(
            t.units_of(&target).len().abs_diff(240) <= 1,
            "{assignment:?}"
        );

        // Unreadable entries are skipped (the report counts), and a key of
        // the wrong type does not stop the holder: it follows a new unit list.
        let weights = keys().weights;
        let _: i64 = fleet.redis.cmd(&["HSET", &weights, &target, "0"]).await;
        let other = live.iter().find(|m| **m != target).unwrap();
        let _: i64 = fleet.redis.cmd(&["HSET", &weights, other, "x"]).await;
        let generation = fleet.generation().await;
        fleet.set_units(&units[..300]).await;
        let t = settle(reported.clone()).await;
        assert!(t.units_of(&target).len().abs_diff(120) <= 1);
        let () = fleet.redis.cmd(&["SET", &weights, "not a hash"]).await;
        fleet.set_units(&units).await;
        let t = settle(reported.clone()).await;
        assert!(t.units_of(&target).len().abs_diff(240) <= 1);
        assert!(fleet.generation().await > generation);
        fleet.shutdown().await;
    }
}

/// With `-max-moves-per-cycle`, a join's moves are spread over several
/// writes, none revoking more than the limit, and the total is still the
/// minimum.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_move_limit_spreads_a_join_over_several_writes() {
    const LIMIT: usize = 20;
    let units = units(1000);
    let mut fleet = Fleet::new(RedisServer::start());
    fleet.config.assignment = Assignment::Sticky;
    fleet.config.max_moves_per_cycle = LIMIT;
    fleet.set_units(&units).await;
    for _ in 0..10 {
        fleet.add_member().await;
    }
    fleet.add_replica();
    let total = units.len() as f64;
    let even = |n: usize| move |_: &str| total / n as f64;
    let limit = Duration::from_secs(30);
    let before = wait_settled(&fleet, &fleet.live_member_ids(), &units, even(10), limit).await;
    let g0 = fleet.generation().await;

    let i = fleet.add_member().await;
    let newcomer = fleet.member_id(i);
    // Snapshots (generation, table) read between two equal generations.
    let mut snapshots = vec![(g0, before.clone())];
    let deadline = Instant::now() + limit;
    let after = loop {
        let g1 = fleet.generation().await;
        let t = fleet.table().await;
        let g2 = fleet.generation().await;
        if g1 == g2 && g1 != snapshots.last().unwrap().0 {
            snapshots.push((g1, t.clone()));
        }
        let transit: usize = fleet.redis.cmd(&["HLEN", &keys().transit]).await;
        // The limit bounds the moves in progress at once, not per write.
        assert!(transit <= LIMIT, "{transit} units in transit at once");
        let rows = t.rows().len();
        if g1 == g2 && transit == 0 && rows == 11 && t.assignments() == units.len() {
            let sizes: Vec<usize> = t.rows().keys().map(|m| t.units_of(m).len()).collect();
            if sizes.iter().all(|&s| s == 90 || s == 91) {
                break t;
            }
        }
        assert!(
            Instant::now() < deadline,
            "not settled: {:?}",
            t.rows().len()
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    let moves = moved(&before, &after);
    assert_eq!(moves, after.units_of(&newcomer).len(), "the minimum");
    let writes = fleet.generation().await - g0;
    eprintln!(
        "{moves} moves in {writes} writes, {} snapshots",
        snapshots.len()
    );
    // Units revoked from members that stay: at most LIMIT per write.
    for pair in snapshots.windows(2) {
        let ((ga, a), (gb, b)) = (&pair[0], &pair[1]);
        let revoked: usize = a
            .rows()
            .keys()
            .filter(|m| **m != newcomer)
            .map(|m| {
                let kept = b.units_of(m);
                a.units_of(m).iter().filter(|u| !kept.contains(u)).count()
            })
            .sum();
        assert!(
            revoked <= LIMIT * (gb - ga) as usize,
            "{revoked} revoked in {} writes",
            gb - ga
        );
    }
    // Revocations and grants: at least ⌈moves / LIMIT⌉ revoking writes.
    assert!(writes as usize >= moves.div_ceil(LIMIT), "{writes} writes");
    fleet.shutdown().await;
}

/// A replica in sticky mode adopts a table it did not write (as a Go
/// replica leaves it: unbalanced here, no metadata) by moving only what
/// balance needs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sticky_adopts_an_existing_table_moving_only_the_minimum() {
    let units = units(300);
    let mut fleet = Fleet::new(RedisServer::start());
    fleet.config.assignment = Assignment::Sticky;
    fleet.set_units(&units).await;
    for _ in 0..4 {
        fleet.add_member().await;
    }
    let mut ids = fleet.live_member_ids();
    ids.sort();
    // Unbalanced: 150, 90, 60 and 0 units, in contiguous blocks.
    let sizes = [150, 90, 60, 0];
    let mut rows = Vec::new();
    let mut at = 0;
    for (id, n) in ids.iter().zip(sizes) {
        rows.push((id.clone(), units[at..at + n].join(",")));
        at += n;
    }
    let mut hset = vec!["HSET".to_string(), TABLE.to_string()];
    for (m, v) in &rows {
        hset.push(m.clone());
        hset.push(v.clone());
    }
    let args: Vec<&str> = hset.iter().map(String::as_str).collect();
    let _: i64 = fleet.redis.cmd(&args).await;
    let before = MatchingTable::from_rows(rows);

    fleet.add_replica();
    let total = units.len() as f64;
    let after = wait_settled(
        &fleet,
        &ids,
        &units,
        move |_| total / 4.0,
        Duration::from_secs(30),
    )
    .await;
    let members: Vec<(&str, u32)> = ids.iter().map(|m| (m.as_str(), 1)).collect();
    let unit_refs: Vec<&str> = units.iter().map(String::as_str).collect();
    let rows = before
        .rows()
        .iter()
        .map(|(m, v)| (m.as_str(), decode_row(v)));
    let minimum = sticky::min_moves(rows, &members, &unit_refs);
    // 75 each: the first gives 75, the second 15, nobody else loses a unit.
    assert_eq!(minimum, 90);
    assert_eq!(moved(&before, &after), minimum);
    for (m, n) in ids.iter().zip(sizes) {
        let kept = before
            .units_of(m)
            .iter()
            .filter(|u| after.units_of(m).contains(u))
            .count();
        assert_eq!(kept, n.min(75), "{m} keeps what it can");
    }
    fleet.shutdown().await;
}

/// Issue 39, item 10: `last_change` names the last change of the table, or
/// none. A ring solve does not count its moves; it used to leave the count
/// of an earlier sticky change in `{T}:meta`, and status showed it as the
/// last change long after ring had moved units. Now a ring change replaces
/// it with `uncounted`, which status shows as no count.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ring_change_never_shows_an_older_sticky_count() {
    let units = units(12);
    let (mut fleet, _) =
        Fleet::converged(|c| c.assignment = Assignment::Sticky, 2, 1, &units).await;
    async fn last_change(fleet: &Fleet) -> Option<String> {
        let meta: BTreeMap<String, String> = fleet.redis.cmd(&["HGETALL", &keys().meta]).await;
        meta.get("last_change").cloned()
    }
    fleet.add_member().await;
    wait_for(
        "sticky counts the join",
        Duration::from_secs(10),
        || async {
            last_change(&fleet)
                .await
                .and_then(|v| Moves::decode(&v))
                .is_some_and(|m| m.moved == 4)
        },
    )
    .await;
    // The same fleet, now under a ring replica; a member leaves.
    fleet.replicas[0].take().unwrap().shutdown().await;
    fleet.config.assignment = Assignment::Ring;
    fleet.add_replica();
    fleet.members[0].take().unwrap().abort();
    let live = fleet.live_member_ids();
    wait_for(
        "the ring table without it",
        Duration::from_secs(10),
        || async {
            let t = fleet.table().await;
            t.rows().len() == 2 && live.iter().all(|m| !t.units_of(m).is_empty())
        },
    )
    .await;
    assert_eq!(last_change(&fleet).await.as_deref(), Some("uncounted"));
    let status = String::from_utf8(cli(&fleet.redis.url(), &["status"]).stdout).unwrap();
    assert!(status.contains("assignment ring\n"), "{status}");
    assert!(!status.contains("last change"), "{status}");
    fleet.shutdown().await;
}
