//! Target 2: ping fan-out. One holder's `Pinger` (this process) pings 10,000
//! real gRPC servers on loopback (4 server processes of 2,500) once per
//! "cycle"; every cycle must finish within 1 s on 2 cores. Pings go out as the
//! holder sends them (`Pinger::ping_tasks`, one task per ping); a cycle here
//! lasts until the last of them has answered or failed. Measured twice in the
//! same run: by calls only (`Pinger::calls_only`, the reference), then as
//! beats on each member's stream (`edge::grpc::beats`, the default).

use std::time::Duration;

use distributor::edge::grpc::{PingReport, Pinger};
use futures::StreamExt as _;
use std::time::Instant;

use crate::common::*;

const MEMBERS: usize = 10_000;
const SERVER_PROCESSES: usize = 4;
const CYCLES: usize = 10;

/// Pings `members` the way the holder does, and waits for every result.
async fn ping_cycle(pinger: &Pinger, members: &[String]) -> Vec<PingReport> {
    pinger
        .ping_tasks(members)
        .map(|(_, r)| r.expect("a ping task panicked"))
        .collect()
        .await
}

pub async fn run() {
    section("ping fan-out: 10,000 gRPC servers on loopback, one pinger (target 2)");
    if !enough_fds("pings") {
        return;
    }
    let (servers, addrs) = spawn_server_fleet(MEMBERS, SERVER_PROCESSES);
    note(&format!(
        "{} servers in {} processes; pinger = distributor::edge::grpc::Pinger (1 s timeout, default keepalive)",
        addrs.len(),
        servers.len()
    ));
    let keepalive = distributor::Config::new("redis://127.0.0.1", &["s"], "u", "t").keepalive;
    let pinger = Pinger::new(Duration::from_secs(1), Some(keepalive)).calls_only();

    // Cold: the first round opens 10,000 HTTP/2 connections.
    let cpu0 = self_cpu();
    let t = Instant::now();
    let reports = ping_cycle(&pinger, &addrs).await;
    let cold = t.elapsed();
    let cold_cpu = self_cpu() - cpu0;
    let cold_failed = reports.iter().filter(|r| r.result.is_err()).count();
    report_one(
        "pings: first cycle, 10,000 (connects included)",
        "ms",
        ms(cold),
        Target::none(),
    );
    note(&format!(
        "first cycle: {cold_failed} failed pings, pinger CPU {:.0} ms ({:.0} us per ping incl. connect)",
        ms(cold_cpu),
        cold_cpu.as_secs_f64() * 1e6 / MEMBERS as f64
    ));

    // A new holder with the 500 ms timeout used elsewhere: its first cycle
    // connects to everyone. A first contact has `pinger::FIRST_CONTACT` (2 s),
    // not the ping timeout; a connect slower than that counts as a failure.
    let fresh = Pinger::new(Duration::from_millis(500), Some(keepalive)).calls_only();
    let t = Instant::now();
    let reports = ping_cycle(&fresh, &addrs).await;
    let cold_500 = t.elapsed();
    let failed_500 = reports.iter().filter(|r| r.result.is_err()).count();
    report_one(
        "pings: first cycle, 10,000, 500 ms timeout: failed pings",
        "pings",
        failed_500 as f64,
        Target::none(),
    );
    note(&format!(
        "first cycle of a fresh 500 ms pinger took {:.0} ms; {failed_500} of {MEMBERS} pings failed",
        ms(cold_500)
    ));
    drop(fresh);

    // Warm cycles, one per second as a holder with a 1 s poll interval would.
    for size in [100, 1_000] {
        let mut walls = Vec::new();
        for _ in 0..5 {
            let t = Instant::now();
            let r = ping_cycle(&pinger, &addrs[..size]).await;
            walls.push(ms(t.elapsed()));
            assert!(r.iter().all(|r| r.result.is_ok()), "a ping failed");
        }
        report(
            &format!("pings: warm cycle, {size} members"),
            "ms",
            &walls,
            Target::none(),
        );
    }
    let calls = warm_cycles(&pinger, &addrs, &servers, "calls").await;
    drop(pinger);

    // Beats: the default pinger. Its first cycle is calls (and connects);
    // streams open behind them; cycles go on until every ping is a beat.
    let beating = Pinger::new(Duration::from_secs(1), Some(keepalive));
    let mut turned = None;
    for i in 0..10 {
        let before = beating.beats_sent();
        ping_cycle(&beating, &addrs).await;
        if beating.beats_sent() - before == MEMBERS as u64 {
            turned = Some(i);
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    note(&format!(
        "beats: every ping a beat from warm-up cycle {turned:?} (0: the first, made of calls, opened the streams)"
    ));
    let mut beats = warm_cycles(&beating, &addrs, &servers, "beats").await;
    let mut calls = calls;
    beats.sort_by(f64::total_cmp);
    calls.sort_by(f64::total_cmp);
    note(&format!(
        "beats against calls, pinger CPU per ping, median: {:.1} / {:.1} us = {:.2}",
        median(&beats),
        median(&calls),
        median(&beats) / median(&calls)
    ));
    drop(beating);

    // The option not taken, for the record: HTTP/2 PING frames on idle
    // connections (keepalive every second, no call). A member's server
    // answers them in its HTTP/2 layer, which neither tonic nor grpcio
    // shows the application, so a member could not extend its holds by
    // them (`core::ownership`: a hold needs pings).
    let ka = distributor::edge::grpc::Keepalive {
        interval: Duration::from_secs(1),
        timeout: Duration::from_secs(1),
        while_idle: true,
    };
    let idle = Pinger::new(Duration::from_secs(1), Some(ka)).calls_only();
    ping_cycle(&idle, &addrs).await;
    let mut per = Vec::new();
    for _ in 0..3 {
        let c0 = self_cpu();
        tokio::time::sleep(Duration::from_secs(5)).await;
        let c = self_cpu() - c0;
        per.push(c.as_secs_f64() * 1e6 / (MEMBERS as f64 * 5.0));
    }
    report(
        "pings (HTTP/2 PING frames, 1 s, no call): pinger CPU per member per second",
        "us",
        &per,
        Target::none(),
    );
    drop(idle);
    drop(servers);
}

/// `CYCLES` warm cycles of every member, one a second; reports wall, rate
/// and CPU per ping on both sides, labelled `how`. Returns the pinger's CPU
/// per ping (us) of each cycle.
async fn warm_cycles(pinger: &Pinger, addrs: &[String], servers: &[Proc], how: &str) -> Vec<f64> {
    let mut walls = Vec::new();
    let mut cpu_per_ping = Vec::new();
    let mut server_cpu_per_ping = Vec::new();
    let mut rates = Vec::new();
    let mut failed = 0;
    let mut next = Instant::now();
    for _ in 0..CYCLES {
        tokio::time::sleep_until((next).into()).await;
        next += Duration::from_secs(1);
        let c0 = self_cpu();
        let s0: Duration = servers.iter().map(Proc::cpu).sum();
        let t = Instant::now();
        let r = ping_cycle(pinger, addrs).await;
        let wall = t.elapsed();
        let c = self_cpu() - c0;
        let s: Duration = servers.iter().map(Proc::cpu).sum::<Duration>() - s0;
        failed += r.iter().filter(|r| r.result.is_err()).count();
        walls.push(ms(wall));
        rates.push(MEMBERS as f64 / wall.as_secs_f64());
        cpu_per_ping.push(c.as_secs_f64() * 1e6 / MEMBERS as f64);
        server_cpu_per_ping.push(s.as_secs_f64() * 1e6 / MEMBERS as f64);
    }
    report(
        &format!("pings ({how}): warm cycle, 10,000 members (wall)"),
        "ms",
        &walls,
        Target::max(1000.0),
    );
    report(
        &format!("pings ({how}): throughput within a 10,000 cycle"),
        "pings/s",
        &rates,
        Target::none(),
    );
    report(
        &format!("pings ({how}): pinger CPU per ping (holder side)"),
        "us",
        &cpu_per_ping,
        Target::none(),
    );
    report(
        &format!("pings ({how}): server CPU per ping (4 server processes)"),
        "us",
        &server_cpu_per_ping,
        Target::none(),
    );
    note(&format!(
        "{how}: {failed} failed pings in {CYCLES} warm cycles of {MEMBERS}; CPU from /proc/<pid>/stat (10 ms ticks)"
    ));
    cpu_per_ping
}
