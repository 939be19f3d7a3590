//! Issue 14: the status page (`-http-ui`) at 10,000 members x 1,000,000
//! units, in Debian's headless Chromium (the kit's `support::browser`),
//! against a reference page of 10 members x 1,000 units measured in the same
//! run, load by load in alternation.
//!
//! Each fleet has its own `redis-server` and real gRPC ping servers (the
//! bench's, in processes of 2,500). Its table state is what a holder leaves
//! once settled, written through the library as a holder writes it (the
//! lease, then `Store::commit` of the solved table and every member's
//! liveness), then changed twice as a crash and a recovery would (a member
//! fails and its units go to the others; it comes back), so that
//! `/api/changes` has what a real fleet's has. The page is served by a real
//! `distributor` process with `-http-ui` and the daemon's default timing: a
//! standby (the bench holds the lease), which reads what it shows from Redis
//! like any replica. Why not a real holder: at 10,000 x 1,000,000 the
//! holder of a fresh fleet lost its lease every few seconds on the 2-core
//! machine of BENCHMARKS.md ("Status page at scale", "Known limits"), with
//! or without `-http-ui`, and never settled.
//!
//! Each load is a fresh browser (cold cache, new connections), first on
//! `about:blank`, then on the page. From the page's own Performance API,
//! all relative to navigation start:
//!
//! - first contentful paint (`paint` entry): the static page;
//! - members drawn: the `members-drawn` mark `app.js` sets once the first
//!   answers of `/api/status`, `/api/members` and `/api/changes` are in the
//!   DOM;
//! - members painted: the Element Timing entry of the first member row
//!   (`elementtiming="first-member"`), painted in the same frame as every
//!   other row and bar of the page;
//! - the first API request's start and the last API answer's end (Resource
//!   Timing), and the body bytes of the document and every request of the
//!   first refresh (`encodedBodySize`; nothing is compressed).
//!
//! Then the server's own time: the bench's HTTP client times `GET` of each
//! API path on loopback (connect to last byte), [`API_CALLS`] times each;
//! and the page's background read, done here with the same library calls
//! the API makes ([`READS`] times): `Store::read_overview` (Redis, and
//! decoding the reply) and `report::status` (the view every answer comes
//! from), with Redis's own time for it from `INFO commandstats`; and the
//! replica's CPU over the page loads (its background reads included).

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::Value;
use std::time::Instant;

use distributor::MatchingTable;
use distributor::core::liveness::{Health, HealthChanges};
use distributor::edge::redis::{Committed, Store};
use distributor::report;

use crate::common::*;
use crate::support::browser::{Driver, browser_installed};
use crate::support::http_get;

/// Page loads per fleet (`BENCH_UI_LOADS` to change).
const LOADS: usize = 12;
/// Timed requests per API path and fleet.
const API_CALLS: usize = 20;
/// Timed background reads per fleet.
const READS: usize = 5;

/// What the page fetches on its first refresh, and the largest page.
const API_PATHS: &[&str] = &[
    "/api/status",
    "/api/members?page=1&per_page=100",
    "/api/changes",
    "/api/members?page=1&per_page=500",
];

/// Collects the page's timings once the first member row is painted.
const MEASURE: &str = r#"
const done = arguments[arguments.length - 1];
const finish = (painted) => {
  const nav = performance.getEntriesByType("navigation")[0];
  const fcp = performance.getEntriesByName("first-contentful-paint")[0];
  const drawn = performance.getEntriesByName("members-drawn")[0];
  const res = performance.getEntriesByType("resource").map((r) => ({
    path: new URL(r.name).pathname, start: r.startTime, end: r.responseEnd,
    ttfb: r.responseStart - r.requestStart, body: r.encodedBodySize }));
  done({
    fcp: fcp ? fcp.startTime : null,
    drawn: drawn ? drawn.startTime : null,
    painted,
    rows: document.querySelectorAll(".member").length,
    counts: document.getElementById("member-counts").textContent,
    doc: { body: nav.encodedBodySize, end: nav.responseEnd, load: nav.loadEventEnd },
    res,
  });
};
new PerformanceObserver((list, observer) => {
  const e = list.getEntries().find((e) => e.identifier === "first-member");
  if (e) { observer.disconnect(); finish(e.renderTime || e.loadTime); }
}).observe({ type: "element", buffered: true });
"#;

/// The lease holder's name in the written state.
const HOLDER: &str = "bench";

struct Site {
    label: String,
    members: usize,
    replica: Replica,
    _servers: Vec<Proc>,
    /// Holds the lease for the bench's writes.
    _store: Store,
    redis: RedisServer,
}

impl Site {
    async fn start(members: usize, units: usize) -> Site {
        let label = format!("{members} x {units}");
        let redis = redis_server();
        let mut conn = redis.conn().await;
        let unit_list = unit_names(units);
        set_list(&mut conn, UNITS, &unit_list).await;
        let (servers, addrs) = spawn_server_fleet(members, members.div_ceil(2_500));
        set_list(&mut conn, SERVICES, &addrs).await;

        let store = Store::open(&redis.url(), TABLE, Duration::from_secs(3)).unwrap();
        let grant = hold_lease(&store, HOLDER).await;
        let inputs = one_group(&addrs, &unit_list);
        let health = |id: &str, live: bool| {
            let h = Health {
                answered: true,
                failures: u32::from(!live),
                failing_since_ms: (!live).then(distributor::unix_ms),
                reason: (!live).then(|| "status: Unavailable, switched off by the bench".into()),
            };
            (id.to_string(), h)
        };
        let all = HealthChanges {
            set: addrs.iter().map(|a| health(a, true)).collect(),
            removed: vec![],
        };
        let t = Instant::now();
        let full = MatchingTable::solve(&inputs, |_| true);
        let solve = t.elapsed();
        let write = async |table: &MatchingTable, health: &HealthChanges| match commit_as(
            &store,
            &grant,
            HOLDER,
            Some(table),
            health,
        )
        .await
        {
            Ok(Committed::Written {
                generation: Some(g),
                ..
            }) => g,
            other => panic!("{label}: the bench's write failed: {other:?}"),
        };
        let g = write(&full, &all).await;

        let timing = Timing::defaults(Duration::from_secs(1), Duration::from_secs(1));
        let name = format!("ui-{members}");
        let replica = spawn_replica_with(&redis.url(), &name, &timing, &["-http-ui"]);
        let t = Instant::now();
        shown(&replica, &label, g).await;
        note(&format!(
            "{label}: the page's API showed generation {g} {:.1} s after the replica started (solve {:.0} ms)",
            t.elapsed().as_secs_f64(),
            ms(solve)
        ));
        // A crash and a recovery, each seen by the page's reader.
        let gone = &addrs[0];
        let short = MatchingTable::solve(&inputs, |m| m != gone);
        let failed = HealthChanges {
            set: [health(gone, false)].into(),
            removed: vec![],
        };
        let g = write(&short, &failed).await;
        shown(&replica, &label, g).await;
        let back = HealthChanges {
            set: [health(gone, true)].into(),
            removed: vec![],
        };
        let g = write(&full, &back).await;
        shown(&replica, &label, g).await;
        Site {
            label,
            members,
            replica,
            _servers: servers,
            _store: store,
            redis,
        }
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}/", self.replica.http_port)
    }
}

/// Waits until the replica's `/api/status` shows generation `g` (its reader
/// reads at least every 5 s).
async fn shown(replica: &Replica, label: &str, g: u64) {
    let port = replica.http_port;
    let ok = wait_until(
        Duration::from_secs(60),
        Duration::from_millis(100),
        || async {
            let Ok((200, body)) = http_get(port, "/api/status").await else {
                return false;
            };
            let v: Value = serde_json::from_str(&body).unwrap_or_default();
            v["status"]["generation"] == g
        },
    )
    .await;
    assert!(ok, "{label}: /api/status never showed generation {g}");
}

/// One load's figures, in ms from navigation start (bytes: body bytes).
#[derive(Default)]
struct Load {
    fcp: f64,
    drawn: f64,
    painted: f64,
    api_start: f64,
    api_end: f64,
    bytes: BTreeMap<String, f64>,
    /// Time to first byte of each API request, in ms.
    ttfb: BTreeMap<String, f64>,
}

async fn load(site: &Site) -> Load {
    let driver = Driver::start().await;
    driver.goto("about:blank").await;
    driver.goto(&site.url()).await;
    let v = driver.run_async(MEASURE).await;
    driver.quit().await;
    let f = |v: &Value| {
        v.as_f64()
            .unwrap_or_else(|| panic!("{}: not a number in {v}", site.label))
    };
    let rows = v["rows"].as_u64().unwrap() as usize;
    assert_eq!(rows, site.members.min(100), "{}: {v}", site.label);
    let counts = v["counts"].as_str().unwrap_or_default();
    assert!(
        counts.starts_with(&format!("{} live", site.members)),
        "{}: the page shows {counts:?}",
        site.label
    );
    let mut out = Load {
        fcp: f(&v["fcp"]),
        drawn: f(&v["drawn"]),
        painted: f(&v["painted"]),
        api_start: f64::INFINITY,
        ..Load::default()
    };
    out.bytes
        .insert("/ (document)".into(), f(&v["doc"]["body"]));
    // The first request of each path: later ones are the next refreshes.
    let mut res: Vec<&Value> = v["res"].as_array().unwrap().iter().collect();
    res.sort_by(|a, b| f(&a["start"]).total_cmp(&f(&b["start"])));
    for r in res {
        let path = r["path"].as_str().unwrap().to_string();
        // Not the browser's own `/favicon.ico` (a 404 with no body).
        let page = path.starts_with("/ui/") || path.starts_with("/api/");
        if !page || out.bytes.contains_key(&path) {
            continue;
        }
        out.bytes.insert(path.clone(), f(&r["body"]));
        if path.starts_with("/api/") {
            out.api_start = out.api_start.min(f(&r["start"]));
            out.api_end = out.api_end.max(f(&r["end"]));
            out.ttfb.insert(path, f(&r["ttfb"]));
        }
    }
    for p in [
        "/ui/app.js",
        "/ui/style.css",
        "/api/status",
        "/api/members",
        "/api/changes",
    ] {
        assert!(
            out.bytes.contains_key(p),
            "{}: no request for {p}",
            site.label
        );
    }
    out
}

/// `report` of one figure per site; returns the medians by site label.
fn figure(
    name: &str,
    unit: &'static str,
    sites: &[&Site],
    samples: &BTreeMap<String, Vec<f64>>,
) -> Vec<f64> {
    let mut medians = vec![];
    for s in sites {
        let v = &samples[&s.label];
        report(&format!("ui: {name}, {}", s.label), unit, v, Target::none());
        let mut sorted = v.clone();
        sorted.sort_by(f64::total_cmp);
        medians.push(median(&sorted));
    }
    if let [small, big] = medians[..] {
        note(&format!(
            "ratio of medians, {} / {}: {name} {:.2}x",
            sites[1].label,
            sites[0].label,
            big / small
        ));
    }
    medians
}

pub async fn run() {
    section("status page in headless Chromium: first render and payload (issue 14)");
    if !browser_installed() {
        println!(
            "RESULT ui: SKIPPED, chromium or chromedriver is missing (apt-get install chromium chromium-driver)"
        );
        return;
    }
    let loads = std::env::var("BENCH_UI_LOADS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(LOADS);
    let mut sites = vec![Site::start(10, 1_000).await];
    if std::env::var_os("BENCH_HUGE").is_none_or(|v| v != "0") && enough_fds("ui 10,000 members") {
        sites.push(Site::start(10_000, 1_000_000).await);
    }
    let sites: Vec<&Site> = sites.iter().collect();
    note(&format!("load average before the loads: {}", loadavg()));
    let cpu_before: Vec<Duration> = sites.iter().map(|s| s.replica.proc.cpu()).collect();
    let loads_started = Instant::now();

    // Loads alternate between the sites, the order swapped every trial.
    let mut by: BTreeMap<String, BTreeMap<String, Vec<f64>>> = BTreeMap::new();
    let mut put = |what: &str, site: &Site, v: f64| {
        by.entry(what.to_string())
            .or_default()
            .entry(site.label.clone())
            .or_default()
            .push(v);
    };
    for trial in 0..loads {
        let mut order = sites.clone();
        if trial % 2 == 1 {
            order.reverse();
        }
        for site in order {
            let l = load(site).await;
            put("fcp", site, l.fcp);
            put("api_start", site, l.api_start);
            put("api_end", site, l.api_end);
            put("drawn", site, l.drawn);
            put("painted", site, l.painted);
            put("total_bytes", site, l.bytes.values().sum());
            for (path, b) in &l.bytes {
                put(&format!("bytes {path}"), site, *b);
            }
            for (path, t) in &l.ttfb {
                put(&format!("ttfb {path}"), site, *t);
            }
        }
    }
    note(&format!("load average after the loads: {}", loadavg()));
    let wall = loads_started.elapsed().as_secs_f64();
    let cpu: BTreeMap<String, Vec<f64>> = sites
        .iter()
        .zip(cpu_before)
        .map(|(s, before)| {
            let used = (s.replica.proc.cpu() - before).as_secs_f64();
            (s.label.clone(), vec![100.0 * used / wall])
        })
        .collect();
    figure(
        &format!("replica CPU over the {wall:.0} s of page loads"),
        "%",
        &sites,
        &cpu,
    );
    for (key, name, unit) in [
        ("fcp", "navigation -> first contentful paint", "ms"),
        ("api_start", "navigation -> first API request sent", "ms"),
        ("api_end", "navigation -> last API answer in", "ms"),
        ("drawn", "navigation -> members drawn (mark)", "ms"),
        ("painted", "navigation -> member rows painted", "ms"),
        ("total_bytes", "body bytes of a first load", "bytes"),
    ] {
        figure(name, unit, &sites, &by[key]);
    }
    for (key, samples) in &by {
        if let Some(path) = key.strip_prefix("bytes ") {
            figure(&format!("body bytes of {path}"), "bytes", &sites, samples);
        }
    }
    for (key, samples) in &by {
        if let Some(path) = key.strip_prefix("ttfb ") {
            figure(
                &format!("{path} time to first byte in the browser"),
                "ms",
                &sites,
                samples,
            );
        }
    }

    // The server's own time for each API path, from a plain HTTP client.
    for path in API_PATHS {
        let mut samples: BTreeMap<String, Vec<f64>> = BTreeMap::new();
        let mut size = BTreeMap::new();
        for _ in 0..API_CALLS {
            for site in &sites {
                let t = Instant::now();
                let (code, body) = http_get(site.replica.http_port, path).await.unwrap();
                let took = ms(t.elapsed());
                assert_eq!(code, 200, "{path}: {body}");
                samples.entry(site.label.clone()).or_default().push(took);
                size.insert(site.label.clone(), body.len());
            }
        }
        figure(
            &format!("GET {path} from a plain client (connect to last byte)"),
            "ms",
            &sites,
            &samples,
        );
        note(&format!("{path}: body bytes {size:?}"));
    }

    // The page's background read, as `Api` does it.
    let mut read = BTreeMap::new();
    let mut build = BTreeMap::new();
    let mut in_redis = BTreeMap::new();
    for site in &sites {
        let store = Store::open(&site.redis.url(), TABLE, Duration::from_secs(3)).unwrap();
        let mut conn = site.redis.conn().await;
        for _ in 0..READS {
            let before = command_calls(&info(&mut conn, "commandstats").await);
            let t = Instant::now();
            let o = store
                .read_overview(&[SERVICES.to_string()], UNITS)
                .await
                .unwrap();
            let read_ms = ms(t.elapsed());
            let after = command_calls(&info(&mut conn, "commandstats").await);
            let t = Instant::now();
            let r = report::status(&o, TABLE, distributor::unix_ms());
            let build_ms = ms(t.elapsed());
            assert_eq!(r.work_units, o.units.len());
            let usec = |m: &std::collections::HashMap<String, (u64, u64)>| -> u64 {
                ["lrange", "hgetall"]
                    .iter()
                    .map(|c| m.get(*c).map_or(0, |v| v.1))
                    .sum()
            };
            let push = |m: &mut BTreeMap<String, Vec<f64>>, v: f64| {
                m.entry(site.label.clone()).or_default().push(v);
            };
            push(&mut read, read_ms);
            push(&mut build, build_ms);
            push(&mut in_redis, (usec(&after) - usec(&before)) as f64 / 1e3);
        }
    }
    figure(
        "background read: Store::read_overview (Redis and decoding)",
        "ms",
        &sites,
        &read,
    );
    figure(
        "background read: LRANGE and HGETALL time inside Redis",
        "ms",
        &sites,
        &in_redis,
    );
    figure(
        "background read: report::status (the view)",
        "ms",
        &sites,
        &build,
    );
}
