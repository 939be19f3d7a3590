//! The example workers (`examples/worker.rs`, `examples/python/worker.py`)
//! as an operator runs them: configured by the member variables of the
//! README (`MemberOptions::from_env`), and, when they cannot use Redis
//! (unreachable, or misconfigured), exiting 1 within a bounded time with
//! one line on stderr that says why, instead of running on or exiting 0.
//! `sentinel.rs` runs both on Redis Sentinel against the daemon.
//!
//! The Python worker needs `DISTRIBUTOR_PYTHON` (see `python_worker.rs`);
//! without it, only the Rust one runs.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use crate::support::procs::reaped;
use crate::support::*;

/// One of the two example workers.
pub(crate) struct ExampleWorker {
    pub name: &'static str,
    /// The Python interpreter, for `worker.py`; `None`: the Rust worker.
    python: Option<PathBuf>,
}

/// The example workers to run: the Rust one, and the Python one when
/// `DISTRIBUTOR_PYTHON` is set (else the test `who` says it skipped it).
pub(crate) fn example_workers(who: &str) -> Vec<ExampleWorker> {
    let mut workers = vec![ExampleWorker {
        name: "examples/worker.rs",
        python: None,
    }];
    if let Some(python) = crate::python_worker::python(who) {
        workers.push(ExampleWorker {
            name: "examples/python/worker.py",
            python: Some(python),
        });
    }
    workers
}

impl ExampleWorker {
    /// A command that runs it with none of the member variables of the
    /// test's own environment: only what the test sets.
    pub fn command(&self) -> Command {
        let mut cmd = match &self.python {
            None => Command::new(example_worker()),
            Some(python) => {
                let mut c = Command::new(python);
                c.arg(concat!(
                    env!("CARGO_MANIFEST_DIR"),
                    "/examples/python/worker.py"
                ));
                c
            }
        };
        for var in distributor::member::MEMBER_ENV {
            for name in var.names {
                cmd.env_remove(name);
            }
        }
        cmd.env_remove("SERVICES_KEY")
            .env_remove("MEMBER_FENCE_MARGIN")
            .env("RUST_LOG", "info")
            .env("NO_COLOR", "1");
        cmd
    }

    /// `--ready-timeout` in this worker's syntax.
    pub fn ready_timeout(&self, secs: u64) -> [String; 2] {
        let value = match self.python {
            None => format!("{secs}s"),
            Some(_) => secs.to_string(),
        };
        ["--ready-timeout".into(), value]
    }

    /// Starts `cmd` (made by [`ExampleWorker::command`]), its stdout and
    /// stderr into files in `dir` named after `label` and the worker.
    pub fn spawn(&self, cmd: Command, dir: &Path, label: &str) -> Running {
        let kind = if self.python.is_some() { "py" } else { "rs" };
        let mut r = Running::spawn(cmd, dir, &format!("{label}-{kind}"));
        r.name = format!("{} ({label})", self.name);
        r
    }
}

/// A process whose output goes to files; SIGKILLed on drop.
pub(crate) struct Running {
    pub name: String,
    pub child: Child,
    out: PathBuf,
    err: PathBuf,
}

impl Running {
    /// Runs `cmd` with its output into files in `dir`.
    pub fn spawn(mut cmd: Command, dir: &Path, label: &str) -> Running {
        let out = dir.join(format!("{label}.out"));
        let err = dir.join(format!("{label}.err"));
        let child = cmd
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&out).unwrap())
            .stderr(std::fs::File::create(&err).unwrap())
            .spawn()
            .unwrap_or_else(|e| panic!("{label}: {e}"));
        Running {
            name: label.to_string(),
            child,
            out,
            err,
        }
    }

    pub fn stdout(&self) -> String {
        std::fs::read_to_string(&self.out).unwrap_or_default()
    }

    pub fn stderr(&self) -> String {
        std::fs::read_to_string(&self.err).unwrap_or_default()
    }

    /// The last line it wrote to stderr.
    pub fn last_line(&self) -> String {
        self.stderr()
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or_default()
            .to_string()
    }

    pub fn signal(&self, sig: &str) {
        crate::support::procs::signal(self.child.id(), sig);
    }

    /// Its exit status, once it exited (a failure after `limit`).
    pub async fn exited(&mut self, limit: Duration) -> ExitStatus {
        let what = self.name.clone();
        reaped(&mut self.child, &what, limit).await
    }

    /// Asserts that it exits 1 within `limit`, its last line on stderr
    /// naming the worker and containing every one of `says`.
    pub async fn fails_saying(&mut self, limit: Duration, says: &[&str]) {
        let status = self.exited(limit).await;
        let (last, name) = (self.last_line(), &self.name);
        assert_eq!(
            status.code(),
            Some(1),
            "{name} exited {status}; its stderr:\n{}",
            self.stderr()
        );
        assert!(
            last.starts_with("worker: ") && says.iter().all(|s| last.contains(s)),
            "{name}: its last line {last:?} does not say {says:?}; its stderr:\n{}",
            self.stderr()
        );
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A fresh directory for a test's output files.
pub(crate) fn test_dir(test: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "distributor-test-{test}-{}-{}",
        std::process::id(),
        free_port()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Redis on a closed port: each worker stops once `--ready-timeout` (2 s)
/// ran out, and exits 1 naming the URL and the refusal, instead of running
/// on, retrying for ever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_whose_redis_is_unreachable_exits_1_saying_why() {
    let closed = free_port(); // bound and closed again: nothing listens there
    let url = format!("redis://127.0.0.1:{closed}");
    let dir = test_dir("unreachable-redis");
    let workers = example_workers("a_worker_whose_redis_is_unreachable");
    let commands: Vec<Command> = workers
        .iter()
        .map(|w| {
            let mut cmd = w.command(); // (builds the Rust worker first)
            cmd.args(w.ready_timeout(2))
                .arg("--events")
                .env("REDIS_URL", &url);
            cmd
        })
        .collect();
    let started = Instant::now();
    let mut running: Vec<Running> = workers
        .iter()
        .zip(commands)
        .map(|(w, cmd)| w.spawn(cmd, &dir, "worker"))
        .collect();
    for r in &mut running {
        r.fails_saying(
            Duration::from_secs(30),
            &["not ready within 2", &format!("cannot use Redis at {url}")],
        )
        .await;
    }
    // The ready timeout, the one look at Redis and the member's stop.
    let took = started.elapsed();
    assert!(took < Duration::from_secs(20), "exited after {took:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Cluster mode (`REDIS_CLUSTER=true`) against a plain node: each worker
/// exits 1 saying that the node is not a cluster's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_in_cluster_mode_against_a_plain_node_exits_1_saying_why() {
    let redis = RedisServer::start();
    let dir = test_dir("cluster-mode");
    let mut running: Vec<Running> = example_workers("a_worker_in_cluster_mode")
        .iter()
        .map(|w| {
            let mut cmd = w.command();
            cmd.args(w.ready_timeout(3))
                .env("REDIS_URL", redis.url())
                .env("REDIS_CLUSTER", "true");
            w.spawn(cmd, &dir, "worker")
        })
        .collect();
    for r in &mut running {
        r.fails_saying(
            Duration::from_secs(30),
            &["cannot use the Redis Cluster", &redis.url()],
        )
        .await;
        let last = r.last_line().to_lowercase();
        assert!(
            last.contains("cluster support disabled")
                || last.contains("cluster mode is not enabled"),
            "{}: {last}",
            r.name
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}
