//! What a member's row read costs Redis, with and without `INFO server` in
//! its transaction (the run id that names the member's connection's server).
//!
//! 100 members (real `Store::read_row`, each on its own connection) read
//! their rows as fast as they can for a window, in rounds that alternate the
//! two kinds: with `INFO` (the default user) and without (an ACL user that
//! may not run `INFO`, so the members fall back to `CLIENT ID` alone after
//! one refusal, as an older ACL makes them). Per round, from `INFO` deltas:
//! reads a second, Redis CPU (user + sys) per read, and bytes Redis sent per
//! read. Reads without `INFO` are the reference of the same run; the ratio
//! of the medians is reported.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use distributor::edge::redis::Store;
use std::time::Instant;

use crate::common::*;

const MEMBERS: usize = 100;
const WINDOW: Duration = Duration::from_secs(2);
const ROUNDS: usize = 5;
const ADMIN: &str = "bench-admin-pw";
const NO_INFO: &str = "bench-noinfo-pw";

struct Round {
    reads_per_s: f64,
    cpu_us_per_read: f64,
    bytes_per_read: f64,
}

pub async fn run() {
    section("member row reads: with and without INFO server (run id)");
    let redis = RedisServer::start_with(&["--requirepass", ADMIN, "--maxclients", "20000"]);
    let mut admin = redis.conn().await;
    let _: () = redis::cmd("ACL")
        .arg(&[
            "SETUSER",
            "noinfo",
            "on",
            &format!(">{NO_INFO}"),
            "~*",
            "&*",
            "+@all",
            "-info",
        ])
        .query_async(&mut admin)
        .await
        .unwrap();
    let with_url = redis.admin_url();
    let without_url = format!("redis://noinfo:{NO_INFO}@127.0.0.1:{}", redis.port());
    let (mut with, mut without) = (Vec::new(), Vec::new());
    for _ in 0..ROUNDS {
        with.push(round(&mut admin, &with_url).await);
        without.push(round(&mut admin, &without_url).await);
    }
    let figure = |rs: &[Round], f: fn(&Round) -> f64| rs.iter().map(f).collect::<Vec<f64>>();
    let med = |mut v: Vec<f64>| {
        v.sort_by(|a, b| a.total_cmp(b));
        median(&v)
    };
    for (label, rs) in [("with INFO", &with), ("without INFO (reference)", &without)] {
        report(
            &format!("{label}: reads/s, {MEMBERS} members"),
            "1/s",
            &figure(rs, |r| r.reads_per_s),
            Target::none(),
        );
        report(
            &format!("{label}: Redis CPU per read"),
            "us",
            &figure(rs, |r| r.cpu_us_per_read),
            Target::none(),
        );
        report(
            &format!("{label}: bytes sent per read"),
            "B",
            &figure(rs, |r| r.bytes_per_read),
            Target::none(),
        );
    }
    let ratio = |f: fn(&Round) -> f64| med(figure(&with, f)) / med(figure(&without, f));
    note(&format!(
        "ratio with/without INFO (medians): reads/s {:.2}, CPU per read {:.2}, bytes per read {:.2}; load {}",
        ratio(|r| r.reads_per_s),
        ratio(|r| r.cpu_us_per_read),
        ratio(|r| r.bytes_per_read),
        loadavg()
    ));
}

/// One window of `MEMBERS` members reading their rows on `url`.
async fn round(admin: &mut redis::aio::MultiplexedConnection, url: &str) -> Round {
    let stores: Vec<Store> = (0..MEMBERS)
        .map(|_| Store::open(url, TABLE, Duration::from_secs(2)).unwrap())
        .collect();
    // A first read each: connections open, a refused INFO is learned.
    for (i, s) in stores.iter().enumerate() {
        s.read_row(&format!("127.0.0.1:{}", 10_000 + i))
            .await
            .unwrap();
    }
    let before = info(admin, "all").await;
    let reads = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let until = started + WINDOW;
    let tasks: Vec<_> = stores
        .into_iter()
        .enumerate()
        .map(|(i, s)| {
            let reads = Arc::clone(&reads);
            tokio::spawn(async move {
                let member = format!("127.0.0.1:{}", 10_000 + i);
                while Instant::now() < until {
                    s.read_row(&member).await.unwrap();
                    reads.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    let took = started.elapsed().as_secs_f64();
    let after = info(admin, "all").await;
    let n = reads.load(Ordering::Relaxed) as f64;
    let cpu = |i: &std::collections::HashMap<String, String>| {
        let f = |k: &str| i.get(k).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
        f("used_cpu_user") + f("used_cpu_sys")
    };
    let sent = num(&after, "total_net_output_bytes") - num(&before, "total_net_output_bytes");
    Round {
        reads_per_s: n / took,
        cpu_us_per_read: (cpu(&after) - cpu(&before)) * 1e6 / n,
        bytes_per_read: sent as f64 / n,
    }
}
