//! Handoff latency between live members that acknowledge: how long a moved
//! unit has no owner, from the write that revokes it to the write that grants
//! it, and how much of that is the holder's reaction to the acknowledgement.
//!
//! A real `distributor` process and a real Redis; the members are plain ping
//! servers, and one acknowledger in the bench plays every member's protocol
//! part at once: on each `{T}:changed` message it reads the table, transit
//! and generation in one `MULTI`, and for every member that owes a revocation
//! writes its report (applied = that generation) and publishes `{T}:acked`,
//! in one pipeline. That is a member with an instant stop, so the figures are
//! the protocol's and the holder's cost, not an application's.
//!
//! Moves: one extra member joins (the ring moves about 1/n of the units to
//! it) and leaves again (its units move back), several times. Every instant
//! is taken in the bench process when a message or reply arrives.
//!
//! ```text
//!   revoke seen ──(read, HSET reports, PUBLISH acked)──▶ ack sent ──▶ grant seen
//!   └──────────────────── unowned (revoke → grant) ─────────────────────┘
//! ```

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use distributor::core::handoff::{MemberReport, Transit, parse_transit_field};
use futures::StreamExt as _;
use std::time::Instant;

use crate::common::*;

const TRIALS: usize = 8;

pub async fn run() {
    section("handoff: revoke → acknowledge → grant, members that acknowledge at once");
    for members in [10, 1000] {
        if members >= 1000 && !enough_fds("1,000 members") {
            continue;
        }
        one(members).await;
    }
}

struct Move {
    unowned: f64,
    ack_to_grant: f64,
    units: usize,
}

async fn one(n: usize) {
    let redis = redis_server();
    let mut conn = redis.conn().await;
    let units = unit_names(n * 10);
    set_list(&mut conn, UNITS, &units).await;
    let (_servers, mut members) = spawn_server_fleet(n + 1, if n > 100 { 4 } else { 1 });
    let joiner = members.pop().unwrap();
    let k = keys();
    // Every member speaks the protocol, with a deadline that never matters.
    let encoded = |applied: u64| {
        MemberReport {
            applied,
            draining: false,
            deadline: Duration::from_secs(120),
            weight: 1,
            client: None,
        }
        .encode()
    };
    for m in members.iter().chain([&joiner]) {
        let _: () = redis::cmd("HSET")
            .arg(&k.members)
            .arg(m)
            .arg(encoded(0))
            .query_async(&mut conn)
            .await
            .unwrap();
    }
    set_list(&mut conn, SERVICES, &members).await;
    let t = Timing::defaults(Duration::from_millis(1000), Duration::from_millis(1000));
    let mut replica = spawn_replica(&redis.url(), "handoff", &t);
    wait_for_rows(&conn, n, Duration::from_secs(60)).await;

    // The acknowledger: its own subscription and connection.
    let client = redis::Client::open(redis.url()).unwrap();
    let mut pubsub = client.get_async_pubsub().await.unwrap();
    pubsub.subscribe(&k.table_channel).await.unwrap();
    let mut messages = pubsub.into_on_message();
    let mut ack_conn = redis.conn().await;
    let mut moves: Vec<Move> = Vec::new();
    let mut joined = false;
    for trial in 0..TRIALS * 2 {
        // Join, or leave: either way units move between live members.
        let cmd = if joined {
            redis::cmd("LREM")
                .arg(SERVICES)
                .arg(0)
                .arg(&joiner)
                .to_owned()
        } else {
            redis::cmd("RPUSH").arg(SERVICES).arg(&joiner).to_owned()
        };
        let _: i64 = cmd.query_async(&mut conn).await.unwrap();
        joined = !joined;
        let deadline = Instant::now() + Duration::from_secs(30);
        let (mut revoked, mut acked): (Option<Instant>, Option<Instant>) = (None, None);
        let mut in_transit = 0;
        loop {
            let msg = tokio::time::timeout_at(deadline.into(), messages.next())
                .await
                .unwrap_or_else(|_| panic!("trial {trial}: no grant within 30 s"));
            let seen = Instant::now();
            assert!(msg.is_some(), "the subscription ended");
            let (_table, raw, g): (BTreeMap<String, String>, BTreeMap<String, String>, u64) =
                redis::pipe()
                    .atomic()
                    .cmd("HGETALL")
                    .arg(&k.table)
                    .cmd("HGETALL")
                    .arg(&k.transit)
                    .cmd("HGET")
                    .arg(&k.meta)
                    .arg("generation")
                    .query_async(&mut ack_conn)
                    .await
                    .unwrap();
            let transit: Vec<Transit> = raw
                .iter()
                .filter(|(f, _)| parse_transit_field(f).is_some())
                .filter_map(|(_, v)| Transit::decode(v, seen))
                .collect();
            if transit.is_empty() {
                if let (Some(r), Some(a)) = (revoked, acked) {
                    moves.push(Move {
                        unowned: ms(seen - r),
                        ack_to_grant: ms(seen - a),
                        units: in_transit,
                    });
                    break;
                }
                continue;
            }
            revoked.get_or_insert(seen);
            in_transit = in_transit.max(transit.len());
            let owing: BTreeSet<&String> = transit
                .iter()
                .filter(|t| t.revoked_at <= g)
                .flat_map(|t| t.from.keys())
                .collect();
            let mut pipe = redis::pipe();
            for m in &owing {
                pipe.cmd("HSET")
                    .arg(&k.members)
                    .arg(*m)
                    .arg(encoded(g))
                    .ignore();
            }
            pipe.cmd("PUBLISH")
                .arg(&k.acked_channel)
                .arg("bench")
                .ignore();
            let () = pipe.query_async(&mut ack_conn).await.unwrap();
            acked = Some(Instant::now());
        }
    }
    replica.proc.kill();
    let moved: usize = moves.iter().map(|m| m.units).sum();
    note(&format!(
        "{n} members, {} units: {} moves, {moved} unit moves (joins and leaves of one member)",
        units.len(),
        moves.len()
    ));
    let mut unowned: Vec<f64> = moves.iter().map(|m| m.unowned).collect();
    let mut reaction: Vec<f64> = moves.iter().map(|m| m.ack_to_grant).collect();
    unowned.sort_by(f64::total_cmp);
    reaction.sort_by(f64::total_cmp);
    report(
        &format!("handoff, {n} members: unowned (revoke seen → grant seen)"),
        "ms",
        &unowned,
        Target::median_max(10.0, 50.0),
    );
    report(
        &format!("handoff, {n} members: acknowledgement sent → grant seen"),
        "ms",
        &reaction,
        Target::none(),
    );
}
