//! One scenario's cluster: Redis and 3 distributor replicas as containers of
//! the local images, example workers as processes, the invariant checker, and
//! the measured timings.
//!
//! Two topologies:
//! - **host**: every container shares the host network, everything talks over
//!   127.0.0.1 (Redis on a free port, each replica's HTTP on its own port);
//! - **bridge**: Redis and the replicas sit on a user-defined bridge network
//!   that the test creates, so that one replica can be cut off from Redis with
//!   `docker network disconnect`, or from the workers with `iptables` in its
//!   network namespace. Redis and the replicas' HTTP ports are published on
//!   127.0.0.1; the workers listen on the host's address on that bridge, which
//!   both the host and the containers reach.
//!
//! With a **replicated Redis** (bridge only), Redis is a master and a replica
//! (`--replicaof`); the replicas reach the master as `redis`, a network alias
//! that a failover moves to the promoted server, and the host-side clients
//! (checker, workers, producer) through a [`Forwarder`] on 127.0.0.1 that a
//! failover points at it.

use std::collections::BTreeMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, SystemTime};

use distributor::MatchingTable;
use std::time::Instant;
use testcontainers::{ContainerAsync, GenericImage, ImageExt};

use crate::checker::{Checker, Sample};
use crate::forward::Forwarder;
use crate::owners::{Ending, Journal};
use crate::support::docker::{self, BridgeNetwork, Process, bollard};
use crate::support::ownership::{self, Bounds};
use crate::support::{Fleet, SERVICES, TABLE, UNITS, free_port, http_get, metric, parse_metrics};

/// The replicas' timings: fast, and as docs/protocol.md requires
/// (renew interval < renew deadline < TTL).
pub const REPLICA_ENV: &[(&str, &str)] = &[
    ("SERVICES_NAMESPACE", SERVICES),
    ("WORKUNITS_NAMESPACE", UNITS),
    ("DISTRIBUTION_NAMESPACE", TABLE),
    ("POLL_INTERVAL", "200ms"),
    ("PING_TIMEOUT", "200ms"),
    ("LEASE_TTL", "1s"),
    ("LEASE_RENEW_INTERVAL", "200ms"),
    ("LEASE_RENEW_DEADLINE", "700ms"),
    ("LEASE_RETRY_INTERVAL", "300ms"),
    ("CENSUS_INTERVAL", "1s"),
    ("LOG_FORMAT", "json"),
    ("LOG", "info"),
    ("OTEL_TRACES_EXPORTER", "none"),
];

/// How late [`Cluster::after_holder_cycle`] may see the end of a cycle.
pub const CYCLE_SEEN_WITHIN: Duration = Duration::from_millis(40);

/// Slack on top of the TTL for a takeover after a crash.
pub const FAILOVER_SLACK: Duration = Duration::from_millis(1500);

/// The example workers' fencing deadline (`--deadline`; the worker's default
/// is 10 s). Above every takeover the scenarios allow (TTL + slack = 2.5 s),
/// so a failover alone never fences a worker; a Redis outage (scenarios 3
/// and 8) does, and the ownership check sees those fenced releases.
pub const WORKER_DEADLINE: Duration = Duration::from_millis(3000);

/// The ownership check's default bound: a listed unit is owned again within
/// this long. A crashed worker's units are in other rows within [`GRACE`]
/// (checker rule 2); a member takes the units of its row within one of its
/// polls (1 s) of the write, usually at once (`{T}:changed`); moves between
/// live members wait for an acknowledgement (milliseconds). The rest is
/// slack for the 2-core machine. Scenarios with longer outages set their own
/// ([`Cluster::reown`]).
pub const REOWN: Duration = Duration::from_secs(5);

/// The network alias of the Redis master, for the replicas (replicated Redis).
pub const REDIS_ALIAS: &str = "redis";

pub struct Options {
    pub bridge: bool,
    /// A Redis master and a replica (bridge only).
    pub replicated_redis: bool,
    pub workers: usize,
    pub units: usize,
    /// Settings of the replicas beyond [`REPLICA_ENV`].
    pub env: Vec<(&'static str, &'static str)>,
    /// How long each worker takes to stop a unit (`--work-ms`).
    pub work_ms: u64,
}

impl Options {
    pub fn host(workers: usize) -> Options {
        Options {
            bridge: false,
            replicated_redis: false,
            workers,
            units: 40,
            env: Vec::new(),
            work_ms: 0,
        }
    }

    pub fn bridge(workers: usize) -> Options {
        Options {
            bridge: true,
            ..Options::host(workers)
        }
    }
}

/// How [`Cluster::cut_from_workers`] cuts: `Drop` loses the packets (a
/// partition: pings time out), `Reject` answers them with a TCP reset and
/// `RejectIcmp` with an ICMP port-unreachable (both: the connection is
/// refused at once, as if nothing listened).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cut {
    Drop,
    Reject,
    RejectIcmp,
}

pub struct Replica {
    pub id: String,
    pub name: String,
    pub http_port: u16,
    pub container: ContainerAsync<GenericImage>,
}

pub struct Worker {
    pub id: String,
    pub process: Option<Process>,
    log: PathBuf,
    /// Processes started so far (each prints its events to its own file).
    runs: usize,
}

pub struct Redis {
    /// The master.
    pub container: ContainerAsync<GenericImage>,
    pub name: String,
    /// Where the host-side clients reach the master: published on (or, on the
    /// host network, listening on) 127.0.0.1; replicated, the forwarder's.
    pub port: u16,
    /// Replicated: the replica and its name.
    pub replica: Option<(ContainerAsync<GenericImage>, String)>,
    /// Replicated: the host-side clients' way to the master.
    forward: Option<Forwarder>,
    /// Servers started so far (for their names).
    servers: usize,
    /// Logs of the servers removed after a failover, for a failure's dump.
    removed_logs: Vec<(String, Vec<String>)>,
}

/// Measured durations by what they measure, printed at the end.
#[derive(Default)]
pub struct Timings(Vec<(&'static str, Duration)>);

impl Timings {
    pub fn record(&mut self, what: &'static str, d: Duration) {
        say(&format!("  {what}: {}", ms(d)));
        self.0.push((what, d));
    }

    /// Many measurements at once, not printed one by one.
    pub fn record_all(&mut self, what: &'static str, ds: impl Iterator<Item = Duration>) {
        self.0.extend(ds.map(|d| (what, d)));
    }

    pub fn report(&self, scenario: &str) -> String {
        let mut by: BTreeMap<&str, Vec<Duration>> = BTreeMap::new();
        for (w, d) in &self.0 {
            by.entry(w).or_default().push(*d);
        }
        let mut out = String::new();
        for (what, mut ds) in by {
            ds.sort();
            out.push_str(&format!(
                "chaos timing | {scenario:<26} | {what:<40} | n={:<2} | min {:>7} | median {:>7} | max {:>7}\n",
                ds.len(),
                ms(ds[0]),
                ms(ds[ds.len() / 2]),
                ms(ds[ds.len() - 1]),
            ));
        }
        out
    }
}

pub fn ms(d: Duration) -> String {
    format!("{} ms", d.as_millis())
}

/// Writes to the real stderr, past libtest's output capture, so that progress
/// and timings show in `cargo test` output even when the test passes.
pub fn say(text: &str) {
    use std::io::Write;
    let mut e = std::io::stderr().lock();
    let _ = writeln!(e, "{text}");
}

pub struct Cluster {
    pub docker: bollard::Docker,
    pub scenario: String,
    pub replicas: Vec<Replica>,
    pub redis: Redis,
    pub workers: Vec<Worker>,
    pub units: Vec<String>,
    pub checker: Checker,
    /// The workers' ownership events and the test's markers.
    pub owners: Journal,
    /// The ownership check's bound for this scenario (default [`REOWN`]).
    pub reown: Duration,
    pub timings: Timings,
    pub network: Option<BridgeNetwork>,
    /// Active `iptables` cuts: (replica, host pid of its process, rule).
    cuts: Vec<(usize, u32, Vec<String>)>,
    prefix: String,
    started: Instant,
    /// Worker logs; removed when the scenario passes.
    dir: PathBuf,
    /// How long each worker takes to stop a unit (`--work-ms`).
    work_ms: u64,
}

impl Cluster {
    /// Starts Redis and the checker, the units, the workers, then 3 replicas,
    /// and returns once the table is the expected one (then the checker is armed).
    pub async fn start(docker: &bollard::Docker, scenario: &str, opts: Options) -> Cluster {
        let started = Instant::now();
        let prefix = format!("chaos-{}-{scenario}", std::process::id());
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(&prefix);
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();

        assert!(
            opts.bridge || !opts.replicated_redis,
            "a replicated Redis needs the bridge network"
        );
        let network = if opts.bridge {
            Some(BridgeNetwork::create(docker, &format!("{prefix}-net")).await)
        } else {
            None
        };
        let redis = match &network {
            Some(net) if opts.replicated_redis => replicated_redis(net, &prefix).await,
            _ => single_redis(network.as_ref(), &prefix).await,
        };
        let redis_port = redis.port;
        let redis_url = format!("redis://127.0.0.1:{redis_port}");
        let inside_redis = match &network {
            None => redis_url.clone(),
            Some(_) if opts.replicated_redis => format!("redis://{REDIS_ALIAS}:6379"),
            Some(_) => format!("redis://{}:6379", redis.name),
        };
        wait_redis(&redis_url).await;
        let checker = Checker::start(&redis_url);

        let mut cluster = Cluster {
            docker: docker.clone(),
            scenario: scenario.to_string(),
            replicas: Vec::new(),
            redis,
            workers: Vec::new(),
            units: crate::support::units(opts.units),
            checker,
            owners: Journal::default(),
            reown: REOWN,
            timings: Timings::default(),
            network,
            cuts: Vec::new(),
            prefix: prefix.clone(),
            started,
            dir: dir.clone(),
            work_ms: opts.work_ms,
        };
        cluster.write_units().await;

        let host = cluster
            .network
            .as_ref()
            .map(|n| n.gateway.clone())
            .unwrap_or_else(|| "127.0.0.1".into());
        for i in 0..opts.workers {
            let id = format!("{host}:{}", free_port());
            cluster.workers.push(Worker {
                id,
                process: None,
                log: dir.join(format!("worker-{i}.log")),
                runs: 0,
            });
            cluster.start_worker(i);
        }

        for i in 1..=3 {
            let id = format!("r{i}");
            let name = format!("{prefix}-{id}");
            let http_port = free_port();
            let mut req = docker::local(&docker::distributor_image(), &name)
                .with_env_var("REDIS_URL", inside_redis.clone())
                .with_env_var("REPLICA_ID", id.clone());
            for (k, v) in REPLICA_ENV.iter().chain(&opts.env) {
                req = req.with_env_var(*k, *v);
            }
            let req = match &cluster.network {
                None => docker::host_network(
                    req.with_env_var("HTTP_ADDR", format!("127.0.0.1:{http_port}")),
                ),
                Some(net) => docker::publish_on_loopback(
                    req.with_env_var("HTTP_ADDR", "0.0.0.0:9090")
                        .with_network(net.name.clone()),
                    http_port,
                    9090,
                ),
            };
            let container = docker::start(req).await;
            cluster.replicas.push(Replica {
                id,
                name,
                http_port,
                container,
            });
        }
        for i in 0..cluster.replicas.len() {
            cluster.wait_healthy(i).await;
        }
        let replicas = cluster
            .replicas
            .iter()
            .map(|r| (r.id.clone(), r.http_port))
            .collect();
        cluster.checker.monitor_holders(replicas);
        let t = Instant::now();
        cluster
            .wait_table("the first table", Duration::from_secs(30), t)
            .await;
        cluster.checker.arm();
        cluster.owners.arm(&cluster.units);
        say(&format!(
            "[{scenario}] converged: redis :{redis_port}, replicas {:?}, {} workers, {} units, in {}",
            cluster
                .replicas
                .iter()
                .map(|r| format!("{}@:{}", r.id, r.http_port))
                .collect::<Vec<_>>(),
            cluster.workers.len(),
            cluster.units.len(),
            ms(started.elapsed())
        ));
        cluster
    }

    pub fn redis_url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.redis.port)
    }

    /// Rewrites the units list, as the producer ("another process") does.
    pub async fn write_units(&self) {
        let mut c = connect(&self.redis_url()).await;
        // Dated before the write: a unit counts as listed (or unlisted) no
        // later than it is.
        self.owners.listed(&self.units);
        let mut p = redis::pipe();
        p.atomic()
            .del(UNITS)
            .ignore()
            .rpush(UNITS, &self.units)
            .ignore();
        let () = p.query_async(&mut c).await.unwrap();
    }

    /// Starts worker `i` (again, on its address): ownership events on
    /// stdout (`--events`) into a file of this process's own, logs on
    /// stderr into the worker's log.
    pub fn start_worker(&mut self, i: usize) {
        let w = &mut self.workers[i];
        assert!(w.process.is_none(), "worker {i} already runs");
        w.runs += 1;
        let events = self.dir.join(format!("worker-{i}.{}.events", w.runs));
        let mut cmd = Command::new(docker::worker_binary());
        cmd.args(["--listen", &w.id, "--events"])
            .args(["--deadline", &format!("{}ms", WORKER_DEADLINE.as_millis())])
            .args(["--work-ms", &self.work_ms.to_string()])
            .env(
                "REDIS_URL",
                format!("redis://127.0.0.1:{}", self.redis.port),
            )
            .env("SERVICES_KEY", SERVICES)
            .env("DISTRIBUTION_NAMESPACE", TABLE)
            .env("RUST_LOG", "info");
        w.process = Some(spawn_worker(cmd, &w.log, &events));
        self.owners.started(&w.id, events);
        self.checker.worker(&w.id, true);
    }

    /// SIGKILL: the worker stops answering at once and never deregisters.
    pub fn kill_worker(&mut self, i: usize) {
        let w = &mut self.workers[i];
        self.checker.worker(&w.id, false);
        let mut p = w.process.take().expect("a running worker");
        let killed = p
            .kill()
            .unwrap_or_else(|| panic!("worker {} had died by itself:\n{}", w.id, p.tail(20)));
        // It does nothing after the signal.
        self.owners.ended(&w.id, Ending::Killed, killed);
    }

    /// SIGTERM: the worker drains (the holder moves its units away, it
    /// deregisters) and exits by itself. For the checker it stops being a
    /// member at once: its row must be gone within [`crate::checker::GRACE`].
    pub fn terminate_worker(&mut self, i: usize) {
        let w = &self.workers[i];
        let pid = w
            .process
            .as_ref()
            .and_then(|p| p.child.as_ref())
            .expect("a running worker")
            .id();
        self.checker.worker(&w.id, false);
        let ok = Command::new("kill")
            .args(["-TERM", &pid.to_string()])
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "kill -TERM {pid} (worker {})", w.id);
    }

    /// Waits (bounded) for worker `i`, sent SIGTERM, to exit; returns its
    /// exit status.
    pub async fn wait_worker_exit(&mut self, i: usize, limit: Duration) -> ExitStatus {
        let deadline = Instant::now() + limit;
        let status = loop {
            self.checker.assert_ok();
            let w = &mut self.workers[i];
            let child = w
                .process
                .as_mut()
                .and_then(|p| p.child.as_mut())
                .expect("a worker process");
            if let Some(status) = child.try_wait().expect("waitpid") {
                break status;
            }
            assert!(
                Instant::now() < deadline,
                "worker {} did not exit within {limit:?} of SIGTERM:\n{}",
                w.id,
                w.process.as_ref().unwrap().tail(20)
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        };
        let w = &mut self.workers[i];
        // Reaped: `Process` has nothing left to kill.
        w.process.as_mut().unwrap().child = None;
        w.process = None;
        self.owners
            .ended(&w.id, Ending::Exited, ownership::unix_us_now());
        status
    }

    /// Waits until the workers' events show every unit of the latest table
    /// owned by the member of its row, and nothing else owned.
    pub async fn wait_owners(&mut self, what: &str, limit: Duration) -> Duration {
        let started = Instant::now();
        let deadline = started + limit;
        loop {
            self.checker.assert_ok();
            self.check_workers();
            let table = self.checker.last().map(|s| s.table).unwrap_or_default();
            let want: BTreeMap<String, std::collections::BTreeSet<String>> = table
                .iter()
                .flat_map(|(m, row)| {
                    row.split(',')
                        .filter(|u| !u.is_empty())
                        .map(move |u| (u.to_string(), [m.clone()].into()))
                })
                .collect();
            let owners = self.owners.owners();
            if owners == want {
                return started.elapsed();
            }
            assert!(
                Instant::now() < deadline,
                "[{}] timed out after {limit:?} waiting for: {what}\nthe table: {want:?}\nby the events: {owners:?}",
                self.scenario
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    pub fn running_workers(&self) -> Vec<String> {
        self.workers
            .iter()
            .filter(|w| w.process.is_some())
            .map(|w| w.id.clone())
            .collect()
    }

    /// The solver's table for the running workers and the units.
    pub fn expected(&self) -> MatchingTable {
        Fleet::expected(&self.running_workers(), &self.units)
    }

    fn check_workers(&mut self) {
        for w in &mut self.workers {
            if let Some(p) = w.process.as_mut() {
                assert!(
                    p.running(),
                    "worker {} died by itself:\n{}",
                    w.id,
                    p.tail(20)
                );
            }
        }
    }

    /// Waits until a sample taken after `since` shows exactly the expected table
    /// with every running worker registered; returns the time from `since` to
    /// that sample.
    pub async fn wait_table(&mut self, what: &str, limit: Duration, since: Instant) -> Duration {
        let expected = self.expected();
        let running = self.running_workers();
        let sample = self
            .wait_sample(what, limit, since, |s| {
                s.matching_table() == expected && running.iter().all(|w| s.services.contains(w))
            })
            .await;
        sample.sent.unwrap().duration_since(since)
    }

    /// Waits for the first sample after `since` that satisfies `pred`, failing
    /// at once on an invariant violation or a worker that died by itself.
    pub async fn wait_sample(
        &mut self,
        what: &str,
        limit: Duration,
        since: Instant,
        pred: impl Fn(&Sample) -> bool,
    ) -> Sample {
        let deadline = Instant::now() + limit;
        loop {
            self.checker.assert_ok();
            self.check_workers();
            if let Some(s) = self.checker.find(since, &pred) {
                return s;
            }
            assert!(
                Instant::now() < deadline,
                "[{}] timed out after {limit:?} waiting for: {what}\nlast sample:\n{}",
                self.scenario,
                self.checker
                    .last()
                    .map(|s| s.to_string())
                    .unwrap_or_else(|| "none".into())
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Polls `probe` every 20 ms until `ok` accepts its value, checking the
    /// invariants meanwhile.
    pub async fn wait_until<T, F, Fut>(
        &self,
        what: &str,
        limit: Duration,
        mut probe: F,
        ok: impl Fn(T) -> bool,
    ) where
        T: std::fmt::Debug + Clone,
        F: FnMut() -> Fut,
        Fut: Future<Output = T>,
    {
        let deadline = Instant::now() + limit;
        loop {
            self.checker.assert_ok();
            let v = probe().await;
            if ok(v.clone()) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "[{}] timed out after {limit:?} waiting for: {what} (last: {v:?})",
                self.scenario
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Lets `d` pass while the checker keeps checking.
    pub async fn observe(&mut self, d: Duration) {
        let until = Instant::now() + d;
        while Instant::now() < until {
            self.checker.assert_ok();
            self.check_workers();
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        self.checker.assert_ok();
    }

    pub async fn redis_conn(&self) -> redis::aio::MultiplexedConnection {
        connect(&self.redis_url()).await
    }

    /// The replica holding the lease in the latest sample, and its epoch.
    pub async fn holder(&mut self) -> (usize, u64) {
        let s = self.holder_sample().await;
        self.holder_of(&s)
    }

    /// A fresh sample that shows a lease holder.
    pub async fn holder_sample(&mut self) -> Sample {
        self.wait_sample(
            "a lease holder",
            Duration::from_secs(10),
            Instant::now(),
            |s| s.holder().is_some(),
        )
        .await
    }

    pub fn holder_of(&self, s: &Sample) -> (usize, u64) {
        let id = s.holder().expect("a holder");
        let i = self
            .replicas
            .iter()
            .position(|r| r.id == id)
            .unwrap_or_else(|| panic!("holder {id} is no replica of this test"));
        (i, s.epoch.expect("an epoch with the lease"))
    }

    /// Waits for a lease with an epoch above `old` held by another replica than
    /// `old_holder`; returns (replica, epoch, time from `since`).
    pub async fn wait_new_holder(
        &mut self,
        old_holder: Option<usize>,
        old: u64,
        limit: Duration,
        since: Instant,
    ) -> (usize, u64, Duration) {
        let old_id = old_holder.map(|i| self.replicas[i].id.clone());
        let s = self
            .wait_sample("a new holder", limit, since, |s| {
                s.epoch.is_some_and(|e| e > old)
                    && s.holder().is_some_and(|h| Some(h) != old_id.as_deref())
            })
            .await;
        let (i, e) = self.holder_of(&s);
        (i, e, s.sent.unwrap().duration_since(since))
    }

    /// The replica's `/metrics`, if it answers.
    pub async fn metrics(&self, i: usize) -> Option<Vec<crate::support::Sample>> {
        match tokio::time::timeout(
            Duration::from_millis(500),
            http_get(self.replicas[i].http_port, "/metrics"),
        )
        .await
        {
            Ok(Ok((200, body))) => Some(parse_metrics(&body)),
            _ => None,
        }
    }

    pub async fn gauge(&self, i: usize, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        self.metrics(i)
            .await
            .map(|m| metric(&m, name, labels).unwrap_or(0.0))
    }

    pub async fn wait_healthy(&self, i: usize) {
        self.wait_http(i, "/healthz").await;
    }

    pub async fn wait_ready(&self, i: usize) {
        self.wait_http(i, "/readyz").await;
    }

    async fn wait_http(&self, i: usize, path: &str) {
        let port = self.replicas[i].http_port;
        let what = format!("{} answers {path} with 200", self.replicas[i].id);
        self.wait_until(
            &what,
            Duration::from_secs(20),
            || async move {
                match tokio::time::timeout(Duration::from_millis(500), http_get(port, path)).await {
                    Ok(Ok((code, _))) => code,
                    _ => 0,
                }
            },
            |code| code == 200,
        )
        .await;
    }

    pub async fn kill_replica(&self, i: usize) {
        docker::signal(&self.docker, self.replicas[i].container.id(), "SIGKILL").await;
    }

    /// `docker start` again (same name, ports and settings), then /healthz.
    pub async fn start_replica(&self, i: usize) {
        self.replicas[i]
            .container
            .start()
            .await
            .unwrap_or_else(|e| panic!("could not restart {}: {e}", self.replicas[i].id));
        self.wait_healthy(i).await;
    }

    /// `docker stop`: SIGTERM, SIGKILL after 10 s; returns the exit code.
    pub async fn stop_replica(&self, i: usize) -> Option<i64> {
        let c = &self.replicas[i].container;
        c.stop_with_timeout(Some(10))
            .await
            .unwrap_or_else(|e| panic!("could not stop {}: {e}", self.replicas[i].id));
        docker::exit_code(&self.docker, c.id()).await
    }

    pub async fn replica_running(&self, i: usize) -> bool {
        docker::is_running(&self.docker, self.replicas[i].container.id()).await
    }

    /// The replica's JSON log records (with the process's own timestamps).
    pub async fn log_records(&self, i: usize) -> Vec<LogRecord> {
        docker::logs(&self.docker, self.replicas[i].container.id())
            .await
            .into_iter()
            .filter_map(|l| LogRecord::parse(&l.text))
            .collect()
    }

    /// SIGKILLs the single Redis (no persistence): the units list is lost
    /// with everything else, so from now on, for the ownership check, no
    /// unit is listed until the test writes the list again.
    pub async fn kill_redis(&self) {
        self.owners.listed(&[]);
        docker::signal(&self.docker, self.redis.container.id(), "SIGKILL").await;
    }

    /// Starts the killed Redis container again: same port, no data.
    pub async fn restart_redis(&self) {
        self.redis
            .container
            .start()
            .await
            .unwrap_or_else(|e| panic!("could not restart redis: {e}"));
        wait_redis(&self.redis_url()).await;
    }

    /// SIGKILLs the Redis master of a replicated Redis; the host-side clients
    /// lose it at once (the forwarder refuses them until a promotion).
    pub async fn kill_redis_master(&self) {
        let forward = self.redis.forward.as_ref().expect("a replicated Redis");
        forward.point_to(None);
        docker::signal(&self.docker, self.redis.container.id(), "SIGKILL").await;
    }

    /// Fails over to the replica, as an operator or Sentinel does after the
    /// master died: `REPLICAOF NO ONE`, the dead master removed, the alias
    /// `redis` moved to the promoted server, the host-side clients pointed at
    /// it, and a fresh replica of it started (not waited for: see
    /// [`Cluster::wait_redis_replica`]).
    pub async fn promote_redis_replica(&mut self) {
        let net = self.network.as_ref().expect("a replicated Redis");
        let (replica, name) = self.redis.replica.take().expect("a replica");
        let ip = net.address_of(&name).await;
        let mut c = connect(&format!("redis://{ip}:6379")).await;
        // As Sentinel does, promote once the replica saw its master die: it
        // has then applied everything the master sent before its socket's end
        // (a REPLICAOF NO ONE served first would drop what is still unread).
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let info: String = redis::cmd("INFO")
                .arg("replication")
                .query_async(&mut c)
                .await
                .unwrap_or_else(|e| panic!("INFO replication on {name}: {e}"));
            if info.contains("master_link_status:down") {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{name} still sees its killed master:\n{info}"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let () = redis::cmd("REPLICAOF")
            .arg("NO")
            .arg("ONE")
            .query_async(&mut c)
            .await
            .unwrap_or_else(|e| panic!("REPLICAOF NO ONE on {name}: {e}"));
        drop(c);
        let dead = std::mem::replace(&mut self.redis.container, replica);
        let lines = docker::logs(&self.docker, dead.id()).await;
        let dead_name = std::mem::replace(&mut self.redis.name, name.clone());
        self.redis
            .removed_logs
            .push((dead_name, lines.into_iter().map(|l| l.text).collect()));
        let _ = dead.rm().await;
        // An alias is given when connecting only.
        net.disconnect(&name).await;
        net.connect_as(&name, &[&name, REDIS_ALIAS]).await;
        let ip = net.address_of(&name).await;
        self.redis
            .forward
            .as_ref()
            .unwrap()
            .point_to(Some(format!("{ip}:6379").parse().unwrap()));
        let fresh = format!("{}-redis-{}", self.prefix, self.redis.servers);
        self.redis.servers += 1;
        let container = redis_server(net, &fresh, Some(&name)).await;
        self.redis.replica = Some((container, fresh));
    }

    /// Waits until the master streams its writes to its replica (a probe
    /// write acknowledged by `WAIT`), so that a failover loses nothing seen.
    pub async fn wait_redis_replica(&self) {
        let net = self.network.as_ref().expect("a replicated Redis");
        let ip = net.address_of(&self.redis.name).await;
        wait_replica_online(&format!("redis://{ip}:6379")).await;
    }

    /// The host pid of replica `i`'s process (to enter its network namespace).
    pub async fn replica_pid(&self, i: usize) -> u32 {
        docker::pid(&self.docker, self.replicas[i].container.id()).await
    }

    /// Waits until the holder `i` finished a cycle, and returns when that was
    /// seen: at most [`CYCLE_SEEN_WITHIN`] after the cycle ended, so that its
    /// ping round is over and the next one starts about a poll interval
    /// (200 ms) after the returned instant.
    pub async fn after_holder_cycle(&self, i: usize) -> Instant {
        let ok = || self.gauge(i, "distributor_cycles_total", &[("outcome", "ok")]);
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut last = (Instant::now(), ok().await);
        loop {
            assert!(
                Instant::now() < deadline,
                "{} finished no cycle in 10 s",
                self.replicas[i].id
            );
            let sent = Instant::now();
            let n = ok().await;
            let seen = Instant::now();
            if n.is_some() && n > last.1 && seen.duration_since(last.0) <= CYCLE_SEEN_WITHIN {
                return seen;
            }
            last = (sent, n);
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// Cuts replica `i` (whose process is `pid`) off the workers `which`, not
    /// off Redis: an `iptables` rule in its network namespace for their ports
    /// on the bridge's gateway (the pings' only destination there). Until
    /// [`Cluster::heal_cuts`].
    pub fn cut_from_workers(&mut self, i: usize, pid: u32, how: Cut, which: &[usize]) {
        let net = self
            .network
            .as_ref()
            .expect("the bridge network: the workers listen on its gateway");
        let ports: Vec<&str> = which
            .iter()
            .map(|w| self.workers[*w].id.rsplit_once(':').unwrap().1)
            .collect();
        assert!(
            !ports.is_empty() && ports.len() <= 15,
            "multiport takes 1 to 15 ports"
        );
        let mut rule: Vec<String> = [
            "OUTPUT",
            "-d",
            &format!("{}/32", net.gateway),
            "-p",
            "tcp",
            "-m",
            "multiport",
            "--dports",
            &ports.join(","),
            "-j",
        ]
        .iter()
        .map(|a| a.to_string())
        .collect();
        match how {
            Cut::Drop => rule.push("DROP".into()),
            Cut::Reject => {
                rule.extend(["REJECT".into(), "--reject-with".into(), "tcp-reset".into()])
            }
            Cut::RejectIcmp => rule.extend([
                "REJECT".into(),
                "--reject-with".into(),
                "icmp-port-unreachable".into(),
            ]),
        }
        iptables(pid, "-A", &rule);
        self.cuts.push((i, pid, rule));
    }

    /// Removes every cut.
    pub fn heal_cuts(&mut self) {
        for (_, pid, rule) in std::mem::take(&mut self.cuts) {
            iptables(pid, "-D", &rule);
        }
    }

    /// Stops the checker, fails on any violation, ends the workers and runs
    /// the ownership check on their events, prints the timings, and removes
    /// everything.
    pub async fn finish(mut self) {
        self.checker.stop().await;
        self.checker.assert_ok();
        self.check_workers();
        let summary = self.checker.summary();
        // The replicas first: one still holding would move the units of
        // each worker killed below to the next, and a tenure's end is the
        // instant after this thread sent the signal, which a loaded host
        // can delay by milliseconds (an overlap of the teardown's own making).
        for r in &self.replicas {
            docker::kill_if_running(&self.docker, r.container.id()).await;
        }
        for w in &mut self.workers {
            if let Some(mut p) = w.process.take() {
                // (One that had exited by itself: ended by now.)
                let killed = p.kill().unwrap_or_else(ownership::unix_us_now);
                self.owners.ended(&w.id, Ending::Killed, killed);
            }
        }
        let report = self.owners.check(&Bounds { reown: self.reown });
        say(&format!(
            "[{}] ownership (bound {}): {}",
            self.scenario,
            ms(self.reown),
            report.summary()
        ));
        assert!(
            report.violations.is_empty(),
            "[{}] OWNERSHIP VIOLATED: {} violation(s) by the workers' events (files: {:?}):\n{}",
            self.scenario,
            report.violations.len(),
            self.owners.files(),
            report
                .violations
                .iter()
                .take(20)
                .cloned()
                .collect::<Vec<_>>()
                .join("\n")
        );
        self.timings.record_all(
            "listed unit without owner (worker events)",
            report.gaps_us.iter().map(|g| Duration::from_micros(*g)),
        );
        say(&format!(
            "[{}] passed in {}; checker: {summary}",
            self.scenario,
            ms(self.started.elapsed())
        ));
        say(self.timings.report(&self.scenario).trim_end());
        for r in std::mem::take(&mut self.replicas) {
            let _ = r.container.rm().await;
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }

    /// The handoff's state in Redis (units in transit, the members' reports,
    /// the last history entries), for a failure that stalls a handoff. Each
    /// read is bounded: Redis may be the thing that failed.
    async fn dump_redis_state(&self) {
        let keys = distributor::core::keys::Keys::new(TABLE);
        let read = async {
            let mut conn = self.redis_conn().await;
            let mut out = Vec::new();
            for key in [&keys.transit, &keys.members, &keys.liveness] {
                let v: redis::RedisResult<Vec<(String, String)>> =
                    redis::cmd("HGETALL").arg(key).query_async(&mut conn).await;
                out.push(format!("{key}: {v:?}"));
            }
            let v: redis::RedisResult<redis::Value> = redis::cmd("XREVRANGE")
                .arg(&keys.changes)
                .arg("+")
                .arg("-")
                .arg("COUNT")
                .arg(8)
                .query_async(&mut conn)
                .await;
            out.push(format!("{} (newest first): {v:?}", keys.changes));
            out
        };
        say("--- redis state (the current master)");
        match tokio::time::timeout(Duration::from_secs(5), read).await {
            Ok(lines) => lines.iter().for_each(|l| say(l)),
            Err(_) => say("(no answer within 5 s)"),
        }
    }

    /// Prints what helps to understand a failure: every log tail.
    async fn dump(&self) {
        say(&format!(
            "[{}] FAILED; logs follow (worker logs kept in {})",
            self.scenario,
            self.dir.display()
        ));
        for r in &self.replicas {
            let lines = docker::logs(&self.docker, r.container.id()).await;
            say(&format!(
                "--- replica {} (last 40 of {} lines)",
                r.id,
                lines.len()
            ));
            for l in &lines[lines.len().saturating_sub(40)..] {
                say(&l.text);
            }
        }
        let mut redis: Vec<(String, Vec<String>)> = self.redis.removed_logs.clone();
        let mut live = vec![(self.redis.name.clone(), self.redis.container.id())];
        if let Some((c, name)) = &self.redis.replica {
            live.push((name.clone(), c.id()));
        }
        for (name, id) in live {
            let lines = docker::logs(&self.docker, id).await;
            redis.push((name, lines.into_iter().map(|l| l.text).collect()));
        }
        for (name, lines) in &redis {
            say(&format!(
                "--- redis {name} (last 60 of {} lines)",
                lines.len()
            ));
            for l in &lines[lines.len().saturating_sub(60)..] {
                say(l);
            }
        }
        self.dump_redis_state().await;
        for w in &self.workers {
            let text = std::fs::read_to_string(&w.log).unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            say(&format!("--- worker {} (last 10 lines)", w.id));
            for l in &lines[lines.len().saturating_sub(10)..] {
                say(l);
            }
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let handle = tokio::runtime::Handle::current();
            tokio::task::block_in_place(|| handle.block_on(self.dump()));
        }
        // Then the fields drop in order: replicas and Redis (testcontainers
        // removes the containers), workers (killed), the network (removed).
    }
}

/// Spawns a worker: stdout (its events) into `events`, stderr appended to
/// `log`; killed (SIGKILL) when dropped, and by a later run if this one dies.
pub fn spawn_worker(mut cmd: Command, log: &Path, events: &Path) -> Process {
    let err = File::options()
        .create(true)
        .append(true)
        .open(log)
        .unwrap_or_else(|e| panic!("could not open {}: {e}", log.display()));
    let out = File::create(events)
        .unwrap_or_else(|e| panic!("could not create {}: {e}", events.display()));
    let child = cmd
        .env(docker::OWNER_ENV, std::process::id().to_string())
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .spawn()
        .unwrap_or_else(|e| panic!("could not spawn {cmd:?}: {e}"));
    Process {
        child: Some(child),
        log: log.to_path_buf(),
    }
}

fn iptables(pid: u32, op: &str, rule: &[String]) {
    let mut args = vec![op];
    args.extend(rule.iter().map(String::as_str));
    docker::iptables_in(pid, &args).unwrap_or_else(|e| panic!("{e}"));
}

/// The one Redis of most scenarios, without persistence.
async fn single_redis(network: Option<&BridgeNetwork>, prefix: &str) -> Redis {
    let port = free_port();
    let name = format!("{prefix}-redis");
    let req = docker::local(&docker::redis_image(), &name);
    let req = match network {
        None => docker::host_network(req).with_cmd([
            "/usr/local/bin/redis-server",
            "--port",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
        ]),
        Some(net) => docker::publish_on_loopback(req.with_network(net.name.clone()), port, 6379)
            .with_cmd([
                "/usr/local/bin/redis-server",
                "--save",
                "",
                "--appendonly",
                "no",
                "--protected-mode",
                "no",
            ]),
    };
    Redis {
        container: docker::start(req).await,
        name,
        port,
        replica: None,
        forward: None,
        servers: 1,
        removed_logs: Vec::new(),
    }
}

/// A Redis server on `net`, without persistence, a replica of `master` if
/// given; full syncs start at once (no diskless-sync delay).
pub async fn redis_server(
    net: &BridgeNetwork,
    name: &str,
    master: Option<&str>,
) -> ContainerAsync<GenericImage> {
    let mut cmd: Vec<String> = [
        "/usr/local/bin/redis-server",
        "--save",
        "",
        "--appendonly",
        "no",
        "--protected-mode",
        "no",
        "--repl-diskless-sync-delay",
        "0",
    ]
    .iter()
    .map(|a| a.to_string())
    .collect();
    if let Some(m) = master {
        cmd.extend(["--replicaof".into(), m.to_string(), "6379".into()]);
    }
    docker::start(
        docker::local(&docker::redis_image(), name)
            .with_network(net.name.clone())
            .with_cmd(cmd),
    )
    .await
}

/// A master under the alias `redis` and its replica (online), and the
/// host-side forwarder to the master.
async fn replicated_redis(net: &BridgeNetwork, prefix: &str) -> Redis {
    let name = format!("{prefix}-redis-0");
    let container = redis_server(net, &name, None).await;
    net.disconnect(&name).await;
    net.connect_as(&name, &[&name, REDIS_ALIAS]).await;
    let ip = net.address_of(&name).await;
    let forward = Forwarder::start(format!("{ip}:6379").parse().unwrap()).await;
    let replica_name = format!("{prefix}-redis-1");
    let replica = redis_server(net, &replica_name, Some(&name)).await;
    wait_replica_online(&format!("redis://{ip}:6379")).await;
    Redis {
        container,
        name,
        port: forward.port,
        replica: Some((replica, replica_name)),
        forward: Some(forward),
        servers: 2,
        removed_logs: Vec::new(),
    }
}

/// Waits until the master at `url` streams its writes to a replica: a write
/// of the test's own (`chaos-probe`) acknowledged by `WAIT 1`. "online" in
/// `INFO replication` is not enough: after a diskless full sync, Redis 7.0
/// may start the command stream only on the replica's next `REPLCONF ACK`
/// (up to a second later) when the first ACK came before the sync's child
/// was reaped; meanwhile nothing written reaches the replica, and a failover
/// loses it.
pub async fn wait_replica_online(url: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut last = String::new();
    let mut stalled: Option<Instant> = None;
    loop {
        let probe = async {
            let mut c = tokio::time::timeout(
                Duration::from_millis(500),
                redis::Client::open(url)
                    .ok()?
                    .get_multiplexed_async_connection(),
            )
            .await
            .ok()?
            .ok()?;
            let () = redis::cmd("SET")
                .arg("chaos-probe")
                .arg(crate::support::free_port())
                .query_async(&mut c)
                .await
                .ok()?;
            let acked: u32 = redis::cmd("WAIT")
                .arg(1)
                .arg(200)
                .query_async(&mut c)
                .await
                .ok()?;
            let info: String = redis::cmd("INFO")
                .arg("replication")
                .query_async(&mut c)
                .await
                .ok()?;
            Some((acked, info))
        }
        .await;
        match probe {
            Some((1, _)) => {
                if let Some(since) = stalled {
                    say(&format!(
                        "  the replica was online but not streaming for {} (a Redis 7.0 race)",
                        ms(since.elapsed())
                    ));
                }
                return;
            }
            Some((_, info)) => {
                if info.contains("state=online") && stalled.is_none() {
                    stalled = Some(Instant::now());
                }
                last = info;
            }
            None => {}
        }
        assert!(
            Instant::now() < deadline,
            "no replica of {url} acknowledges writes:\n{last}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

pub async fn connect(url: &str) -> redis::aio::MultiplexedConnection {
    redis::Client::open(url)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap_or_else(|e| panic!("redis at {url}: {e}"))
}

/// Waits until Redis answers PING (a container needs a moment).
async fn wait_redis(url: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let ok = async {
            let client = redis::Client::open(url).ok()?;
            let mut c = tokio::time::timeout(
                Duration::from_millis(500),
                client.get_multiplexed_async_connection(),
            )
            .await
            .ok()?
            .ok()?;
            redis::cmd("PING").query_async::<String>(&mut c).await.ok()
        }
        .await;
        if ok.is_some() {
            return;
        }
        assert!(Instant::now() < deadline, "redis at {url} did not answer");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// One JSON log record of a replica.
#[derive(Debug, Clone)]
pub struct LogRecord {
    pub at: SystemTime,
    pub message: String,
    pub fields: serde_json::Map<String, serde_json::Value>,
}

impl LogRecord {
    fn parse(line: &str) -> Option<LogRecord> {
        let v: serde_json::Value = serde_json::from_str(line).ok()?;
        let at = docker::parse_rfc3339(v.get("timestamp")?.as_str()?)?;
        let fields = v.get("fields")?.as_object()?.clone();
        Some(LogRecord {
            at,
            message: fields.get("message")?.as_str()?.to_string(),
            fields,
        })
    }

    pub fn field(&self, k: &str) -> String {
        match self.fields.get(k) {
            Some(serde_json::Value::String(s)) => s.clone(),
            Some(v) => v.to_string(),
            None => String::new(),
        }
    }
}
