//! The Grafana dashboard (`deploy/grafana/distributor.json`) against the real
//! exposition: its JSON has what a Grafana import needs, and every metric name
//! any panel queries is served by `/metrics` of a real replica (real Redis,
//! real gRPC members, the real HTTP server on loopback).
//!
//! Labelled counters appear only once incremented, and prometheus-client
//! (0.25) prints not even their `# HELP`/`# TYPE` lines before that (checked:
//! an untouched `Family` is absent from the exposition). So the test makes the
//! fleet produce every one the dashboard uses: a member joins (handoffs), a
//! member crashes (its connection closes, the ping sent at once fails), Redis
//! crashes and comes back (Redis errors).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use serde_json::Value;

use crate::support::*;

const DASHBOARD: &str = include_str!("../../deploy/grafana/distributor.json");

/// Every `distributor_*` identifier in a PromQL expression.
fn metric_names(expr: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let bytes = expr.as_bytes();
    let mut i = 0;
    while let Some(at) = expr[i..].find("distributor_") {
        let start = i + at;
        let boundary = start == 0 || {
            let c = bytes[start - 1];
            !(c.is_ascii_alphanumeric() || c == b'_' || c == b':')
        };
        let end = expr[start..]
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
            .map_or(expr.len(), |n| start + n);
        if boundary {
            out.insert(expr[start..end].to_string());
        }
        i = end;
    }
    out
}

/// The metric family a sample name belongs to, as `# TYPE` names it
/// (OpenMetrics names counters without `_total`).
fn family(name: &str) -> &str {
    for suffix in ["_total", "_bucket", "_sum", "_count"] {
        if let Some(f) = name.strip_suffix(suffix) {
            return f;
        }
    }
    name
}

/// Checks the structure and returns every (panel title, expr).
fn checked_exprs(d: &Value) -> Vec<(String, String)> {
    assert!(
        d["schemaVersion"].as_u64().is_some_and(|v| v >= 30),
        "schemaVersion"
    );
    assert!(d["title"].as_str().is_some_and(|t| !t.is_empty()), "title");
    let vars = d["templating"]["list"].as_array().expect("templating.list");
    assert!(
        vars.iter().any(|v| v["name"] == "datasource"
            && v["type"] == "datasource"
            && v["query"] == "prometheus"),
        "a ${{datasource}} variable of type datasource over prometheus"
    );
    let panels = d["panels"].as_array().expect("panels[]");
    let mut ids = BTreeSet::new();
    let mut exprs = vec![];
    for p in panels {
        let title = p["title"].as_str().expect("a panel's title").to_string();
        let id = p["id"].as_u64().unwrap_or_else(|| panic!("{title}: id"));
        assert!(ids.insert(id), "{title}: panel id {id} used twice");
        let kind = p["type"]
            .as_str()
            .unwrap_or_else(|| panic!("{title}: type"));
        for k in ["h", "w", "x", "y"] {
            assert!(p["gridPos"][k].as_u64().is_some(), "{title}: gridPos.{k}");
        }
        assert!(
            p["gridPos"]["x"].as_u64().unwrap() + p["gridPos"]["w"].as_u64().unwrap() <= 24,
            "{title}: wider than the grid"
        );
        if kind == "row" {
            continue;
        }
        assert_eq!(
            p["datasource"]["uid"], "${datasource}",
            "{title}: the datasource must be the variable, not a hard-coded uid"
        );
        let targets = p["targets"]
            .as_array()
            .unwrap_or_else(|| panic!("{title}: targets[]"));
        assert!(!targets.is_empty(), "{title}: no targets");
        let mut refs = BTreeSet::new();
        for t in targets {
            let expr = t["expr"]
                .as_str()
                .unwrap_or_else(|| panic!("{title}: targets[].expr"));
            assert!(refs.insert(t["refId"].to_string()), "{title}: refId twice");
            assert_eq!(t["datasource"]["uid"], "${datasource}", "{title}");
            exprs.push((title.clone(), expr.to_string()));
        }
    }
    assert!(exprs.len() >= 10, "{} queries", exprs.len());
    exprs
}

/// The `Accept` header Prometheus (2.x, 3.x) sends.
const PROMETHEUS_ACCEPT: &str = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";

/// `/metrics` as Prometheus scrapes it (OpenMetrics) on `port` once `done`
/// holds for it, or the last one after 15 s.
async fn scrape_until(port: u16, done: impl Fn(&str) -> bool) -> String {
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    loop {
        let text = match http_get_with(port, "/metrics", &[("Accept", PROMETHEUS_ACCEPT)]).await {
            Ok((200, _, text)) => text,
            other => panic!("/metrics: {other:?}"),
        };
        if done(&text) || std::time::Instant::now() >= deadline {
            return text;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[test]
fn metric_names_are_found_in_expressions() {
    let names = metric_names(
        "histogram_quantile(0.5, sum by (le) (rate(distributor_cycle_duration_seconds_bucket[5m]))) + x_distributor_no + max(distributor_epoch)",
    );
    assert_eq!(
        names.into_iter().collect::<Vec<_>>(),
        [
            "distributor_cycle_duration_seconds_bucket",
            "distributor_epoch"
        ]
    );
    assert_eq!(
        family("distributor_ping_failures_total"),
        "distributor_ping_failures"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_queries_only_metrics_a_replica_serves() {
    let dashboard: Value = serde_json::from_str(DASHBOARD).expect("the dashboard is JSON");
    let exprs = checked_exprs(&dashboard);
    let mut wanted: BTreeMap<String, String> = BTreeMap::new();
    for (title, expr) in &exprs {
        for name in metric_names(expr) {
            wanted.entry(name).or_insert_with(|| title.clone());
        }
    }

    let units = units(24);
    let (mut fleet, _) = Fleet::converged(|_| {}, 2, 1, &units).await;
    let replica = fleet.replicas[0].as_ref().unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let stop = tokio_util::sync::CancellationToken::new();
    let server = tokio::spawn(distributor::ops::http::serve(
        listener,
        replica.status(),
        replica.metrics(),
        Duration::from_secs(5),
        stop.clone().cancelled_owned(),
    ));

    // A member joins (units move: handoffs), then one crashes (its
    // connection closes, the ping sent at once is refused).
    fleet.add_member().await;
    fleet.wait_for_table(&units, Duration::from_secs(15)).await;
    let crashed = fleet.members[0].take().unwrap();
    crashed.abort();
    fleet.wait_for_table(&units, Duration::from_secs(15)).await;

    let present = |text: &str, name: &str| parse_metrics(text).iter().any(|s| s.name == name);
    let errors = "distributor_redis_errors_total";
    let others = |text: &str| {
        wanted
            .keys()
            .filter(|name| *name != errors)
            .all(|name| present(text, name))
    };
    let text = scrape_until(port, others).await;
    let missing: Vec<String> = wanted
        .iter()
        .filter(|(name, _)| *name != errors && !present(&text, name))
        .map(|(name, panel)| format!("{name} (panel {panel:?})"))
        .collect();
    assert!(missing.is_empty(), "not in /metrics: {missing:?}\n{text}");

    // Redis crashes and comes back: the replica counts its errors.
    assert!(
        wanted.contains_key(errors),
        "the dashboard shows Redis errors"
    );
    fleet.redis.kill();
    let text = scrape_until(port, |t: &str| present(t, errors)).await;
    fleet.redis.restart();
    assert!(
        present(&text, errors),
        "no {errors} after Redis died:\n{text}"
    );
    // Every family the dashboard uses is registered as what its name says.
    for name in wanted.keys() {
        let f = family(name);
        assert!(
            text.lines().any(|l| l.starts_with(&format!("# TYPE {f} "))),
            "no # TYPE line for {f}"
        );
    }

    both_formats_are_valid(port).await;

    stop.cancel();
    server.await.unwrap().unwrap();
    fleet.shutdown().await;
}

/// One scrape in each format: OpenMetrics for Prometheus' `Accept`, the
/// 0.0.4 text for `curl`'s, with the same samples (but OpenMetrics'
/// `_created`); `promtool check metrics` passes on the text (required where
/// `REQUIRE_PROMTOOL=1`, as in `scripts/test`), and the OpenMetrics parses
/// with a strict parser (promtool reads the 0.0.4 text only).
async fn both_formats_are_valid(port: u16) {
    let names = |text: &str| -> BTreeSet<String> {
        parse_metrics(text)
            .into_iter()
            .map(|s| s.name)
            .filter(|n| !n.ends_with("_created"))
            .collect()
    };
    // The two scrapes are apart: a family may appear in between.
    let mut tries = 0;
    let (openmetrics, text) = loop {
        let (code, head, openmetrics) =
            http_get_with(port, "/metrics", &[("Accept", PROMETHEUS_ACCEPT)])
                .await
                .unwrap();
        assert_eq!(code, 200);
        assert!(
            head["content-type"].starts_with("application/openmetrics-text; version=1.0.0"),
            "{head:?}"
        );
        let (code, head, text) = http_get_with(port, "/metrics", &[("Accept", "*/*")])
            .await
            .unwrap();
        assert_eq!(code, 200);
        assert!(
            head["content-type"].starts_with("text/plain; version=0.0.4"),
            "{head:?}"
        );
        assert_eq!(head.get("vary").map(String::as_str), Some("Accept"));
        tries += 1;
        if names(&openmetrics) == names(&text) || tries == 5 {
            break (openmetrics, text);
        }
    };
    assert_eq!(names(&openmetrics), names(&text), "the same samples");
    assert!(openmetrics.ends_with("# EOF\n"));
    assert!(!text.contains("# EOF") && !text.contains("# UNIT"));
    assert!(
        text.contains("# TYPE distributor_redis_errors_total counter"),
        "0.0.4 names a counter by its samples' name"
    );

    openmetrics_parses_strictly(&openmetrics);

    let promtool = std::process::Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn();
    let mut promtool = match promtool {
        Ok(child) => child,
        Err(e) if std::env::var("REQUIRE_PROMTOOL").as_deref() != Ok("1") => {
            eprintln!("promtool not run ({e}): set REQUIRE_PROMTOOL=1 to require it");
            return;
        }
        Err(e) => panic!("promtool: {e}"),
    };
    use std::io::Write;
    promtool
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = promtool.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "promtool check metrics: {}\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The OpenMetrics exposition through `prometheus_client`'s OpenMetrics
/// parser (strict: `# EOF`, family names, suffixes, clashes), with the
/// Python of `DISTRIBUTOR_PYTHON` (`examples/python/requirements.txt`).
fn openmetrics_parses_strictly(openmetrics: &str) {
    let Some(python) = crate::python_worker::python("the OpenMetrics check") else {
        return;
    };
    let check = "import sys\n\
from prometheus_client.openmetrics.parser import text_string_to_metric_families\n\
families = list(text_string_to_metric_families(sys.stdin.read()))\n\
print(len(families), sum(len(f.samples) for f in families))\n";
    let mut child = std::process::Command::new(python)
        .args(["-c", check])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(openmetrics.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "the OpenMetrics exposition does not parse: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let said = String::from_utf8_lossy(&out.stdout);
    let families: usize = said
        .split_whitespace()
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    assert!(families >= 20, "only {families} families parsed: {said}");
}
