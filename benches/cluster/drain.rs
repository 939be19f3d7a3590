//! Drain (issue 39): SIGTERM to process exit of a worker, with a holder and
//! one standby replica (each pings every member, so each keeps a connection
//! to it), three workers on 120 units. Each trial SIGTERMs one worker,
//! times its exit (it drains: the holder moves its units away, it
//! deregisters, stops serving and exits 0), then starts it again on the same
//! address and waits until the table lists every worker and nothing is in
//! transit. The example worker (`examples/worker.rs`) of this build; with
//! `BENCH_REFERENCE_WORKER` (the example worker built from another commit)
//! its trials alternate with this build's in the same run; with
//! `DISTRIBUTOR_PYTHON` (a venv with the `distributor-member` package, see
//! `scripts/python-venv`) the Python reference worker too.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::*;

const WORKERS: usize = 3;
const UNIT_COUNT: usize = 120;
const TRIALS: usize = 8;

/// A worker program to measure: `program`, its leading arguments, then
/// the flags both reference workers take.
struct Kind {
    label: String,
    program: PathBuf,
    leading: Vec<PathBuf>,
}

impl Kind {
    fn command(&self, redis_url: &str, listen: &str) -> Command {
        let mut c = Command::new(&self.program);
        c.args(&self.leading).args([
            "--redis-url",
            redis_url,
            "--services-key",
            SERVICES,
            "--table",
            TABLE,
            "--listen",
            listen,
            "--work-ms",
            "0",
        ]);
        c
    }
}

fn rust_worker(label: &str, bin: PathBuf) -> Kind {
    Kind {
        label: label.to_string(),
        program: bin,
        leading: vec![],
    }
}

fn python_worker(python: PathBuf) -> Kind {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("examples/python/worker.py");
    Kind {
        label: "Python reference worker".into(),
        program: python,
        leading: vec![script],
    }
}

/// The example worker, built with the bench's profile (`--release`), beside
/// the daemon under test.
fn example_worker() -> PathBuf {
    let daemon = distributor_bin();
    let dir = daemon.parent().expect("the binary has a directory");
    let mut cargo = Command::new(env!("CARGO"));
    cargo.args(["build", "--quiet", "--example", "worker", "--manifest-path"]);
    cargo.arg(concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml"));
    if dir.ends_with("release") {
        cargo.arg("--release");
    }
    let out = cargo.output().expect("cargo");
    assert!(
        out.status.success(),
        "cargo build --example worker: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    dir.join("examples/worker")
}

fn start(kind: &Kind, redis_url: &str, listen: &str) -> Proc {
    let log = std::fs::File::create(log_dir().join(format!("drain-{listen}.log"))).unwrap();
    let mut cmd = kind.command(redis_url, listen);
    cmd.env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log);
    spawn_proc(cmd, listen)
}

/// `n` workers listed with units, nothing in transit.
async fn settle(conn: &redis::aio::MultiplexedConnection, n: usize) {
    let ok = wait_until(Duration::from_secs(60), Duration::from_millis(20), || {
        let mut c = conn.clone();
        async move {
            let rows: std::collections::BTreeMap<String, String> = redis::cmd("HGETALL")
                .arg(TABLE)
                .query_async(&mut c)
                .await
                .unwrap_or_default();
            rows.len() == n
                && rows.values().all(|r| !r.is_empty())
                && in_transit(&mut c).await == Some(0)
        }
    })
    .await;
    assert!(ok, "the table did not settle on {n} workers");
}

pub async fn run() {
    section(
        "drain: SIGTERM to exit of a worker, holder and one standby pinging it, 3 workers × 120 units",
    );
    let mut kinds = vec![rust_worker("example worker (this build)", example_worker())];
    match std::env::var_os("BENCH_REFERENCE_WORKER") {
        Some(bin) => kinds.push(rust_worker(
            "example worker (BENCH_REFERENCE_WORKER)",
            PathBuf::from(bin),
        )),
        None => note("no BENCH_REFERENCE_WORKER: this build only"),
    }
    match std::env::var_os("DISTRIBUTOR_PYTHON") {
        Some(py) => kinds.push(python_worker(PathBuf::from(py))),
        None => note("no DISTRIBUTOR_PYTHON: the Python worker is not measured"),
    }
    let redis = redis_server();
    let conn = redis.conn().await;
    let url = redis.url();
    let mut c = conn.clone();
    set_list(&mut c, UNITS, &unit_names(UNIT_COUNT)).await;
    let t = Timing::defaults(Duration::from_millis(100), Duration::from_millis(500));
    let _replicas: Vec<Replica> = ["drain-r1", "drain-r2"]
        .iter()
        .map(|n| spawn_replica(&url, n, &t))
        .collect();
    // One fleet, slot k running kind k (the rest this build), so that every
    // kind drains under the same conditions, in turn.
    let slots = WORKERS.max(kinds.len());
    let kind_of = |slot: usize| if slot < kinds.len() { slot } else { 0 };
    let listens: Vec<String> = (0..slots)
        .map(|_| format!("127.0.0.1:{}", free_port()))
        .collect();
    let mut workers: Vec<Proc> = (0..slots)
        .map(|j| start(&kinds[kind_of(j)], &url, &listens[j]))
        .collect();
    settle(&conn, slots).await;
    let mut samples: Vec<Vec<f64>> = vec![Vec::new(); kinds.len()];
    let mut exits_ok = vec![0usize; kinds.len()];
    for _ in 0..TRIALS {
        for (k, kind) in kinds.iter().enumerate() {
            let sent = Instant::now();
            workers[k].signal(libc::SIGTERM);
            let status = loop {
                if let Some(s) = workers[k].try_wait() {
                    break s;
                }
                assert!(
                    sent.elapsed() < Duration::from_secs(60),
                    "{}: no exit 60 s after SIGTERM",
                    kind.label
                );
                tokio::time::sleep(Duration::from_millis(1)).await;
            };
            samples[k].push(ms(sent.elapsed()));
            exits_ok[k] += usize::from(status.success());
            workers[k] = start(kind, &url, &listens[k]);
            settle(&conn, slots).await;
        }
    }
    for (k, kind) in kinds.iter().enumerate() {
        note(&format!(
            "{}: {} of {} drains exited 0",
            kind.label, exits_ok[k], TRIALS
        ));
        report(
            &format!("drain, {}: SIGTERM to exit", kind.label),
            "ms",
            &samples[k],
            Target::max(250.0),
        );
    }
}
