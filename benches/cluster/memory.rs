//! Holder memory: peak RSS (`VmHWM`) of one real `distributor` process that
//! reads, validates and assigns `n` units among 10 members, writes the table,
//! and runs a few idle cycles. Per unit = (peak - peak of the same process with
//! no units) / n. The process is the release build `cargo bench` makes; the
//! members are plain ping servers listed with `RPUSH`.
//!
//! Sizes: 100,000, 1,000,000 and 2,000,000 units of 13 bytes (`BENCH_HUGE=0`
//! stops at 1,000,000), and 1,000,000 units of 113 bytes (what a byte of a
//! unit costs). Target: at most 300 bytes per unit at 1,000,000.

use std::time::Duration;

use crate::common::*;

const MEMBERS: usize = 10;
/// Cycles after the first table write, so that idle cycles count too.
const MORE_CYCLES: f64 = 5.0;

/// `n` unit names of `len` bytes (at least 13).
fn names(n: usize, len: usize) -> Vec<String> {
    let pad = "x".repeat(len.saturating_sub(13));
    unit_names(n)
        .into_iter()
        .map(|u| format!("{u}{pad}"))
        .collect()
}

async fn peak_kb(units: usize, len: usize) -> Option<u64> {
    let redis = redis_server();
    let mut conn = redis.conn().await;
    set_list(&mut conn, UNITS, &names(units, len)).await;
    let (servers, members) = spawn_servers(MEMBERS);
    set_list(&mut conn, SERVICES, &members).await;
    let t = Timing::defaults(Duration::from_millis(500), Duration::from_millis(500));
    let mut r = spawn_replica(&redis.url(), "memory", &t);
    let written = wait_until(Duration::from_secs(120), Duration::from_millis(50), || {
        let port = r.http_port;
        async move {
            scrape(port).await.is_some_and(|m| {
                metric(&m, "distributor_table_writes_total", &[]).unwrap_or(0.0) >= 1.0
            })
        }
    })
    .await;
    let first = cycles_ok(r.http_port).await.unwrap_or(0.0);
    let idle = wait_until(Duration::from_secs(60), Duration::from_millis(50), || {
        let port = r.http_port;
        async move { cycles_ok(port).await.unwrap_or(0.0) >= first + MORE_CYCLES }
    })
    .await;
    let peak = peak_rss_kb(r.proc.pid);
    r.proc.kill();
    drop(servers);
    (written && idle).then_some(peak)
}

pub async fn run() {
    section("memory: holder peak RSS per unit, 10 members");
    let Some(base) = peak_kb(0, 13).await else {
        note("the replica with no units never wrote a table; skipped");
        return;
    };
    note(&format!("baseline (no units): peak RSS {base} kB"));
    let huge = std::env::var("BENCH_HUGE").map_or(true, |v| v != "0");
    for units in [100_000usize, 1_000_000, 2_000_000] {
        if units > 1_000_000 && !huge {
            note("2,000,000 units skipped (BENCH_HUGE=0)");
            continue;
        }
        let Some(peak) = peak_kb(units, 13).await else {
            note(&format!(
                "{units} units: the replica did not settle; skipped"
            ));
            continue;
        };
        let per_unit = (peak.saturating_sub(base) * 1024) as f64 / units as f64;
        note(&format!("{units} units: peak RSS {peak} kB"));
        let target = if units == 1_000_000 {
            Target::max(300.0)
        } else {
            Target::none()
        };
        report_one(
            &format!("holder peak RSS per unit, 10 x {units}"),
            "B",
            per_unit,
            target,
        );
    }
    // Longer units: what each byte of a unit costs on top (units of 13 and
    // of 113 bytes, 1,000,000 of each).
    if let Some(peak) = peak_kb(1_000_000, 113).await {
        let per_unit = (peak.saturating_sub(base) * 1024) as f64 / 1e6;
        note(&format!("1000000 units of 113 bytes: peak RSS {peak} kB"));
        report_one(
            "holder peak RSS per unit, 10 x 1000000 units of 113 bytes",
            "B",
            per_unit,
            Target::none(),
        );
    }
}
