//! Test fixtures shared by every integration test and the cluster bench: a
//! real `redis-server` that dies on drop and restarts on the same port, a
//! Redis Cluster, an in-process fleet of replicas and members on either, key
//! names, metrics and event-waiting helpers, a headless browser (`browser`),
//! a fault-injecting Redis proxy (`fault_proxy`), the ownership checker
//! (`ownership`) and the real processes of the seeded chaos tests (`procs`).
//! Never copy these; extend them here (the bench compiles this file too:
//! nothing `#[cfg(test)]`-only).
#![allow(dead_code)]

pub mod browser;
pub mod docker;
pub mod fault_proxy;
pub mod otlp;
pub mod ownership;
pub mod pki;
pub mod procs;

use std::future::Future;
use std::net::{SocketAddr, TcpListener};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use distributor::config::Config;
use distributor::core::handoff::RunId;
use distributor::core::keys::Keys;
use distributor::{Distributor, MatchingTable, Member, MemberOptions, Role, Status};
use std::time::Instant;

/// A `redis-server` on a free loopback port, without persistence, in a
/// working directory of its own: a replica writes the RDB it receives there
/// (`dump.rdb`), and a server started in the same directory would load it.
pub struct RedisServer {
    port: u16,
    child: Option<Child>,
    extra: Vec<String>,
    dir: std::path::PathBuf,
}

impl RedisServer {
    pub fn start() -> RedisServer {
        RedisServer::start_with(&[])
    }

    /// With extra `redis-server` arguments (e.g. `--requirepass`, TLS).
    pub fn start_with(extra: &[&str]) -> RedisServer {
        let port = free_port();
        let extra = extra.iter().map(|s| s.to_string()).collect();
        let dir = std::env::temp_dir().join(format!(
            "distributor-test-redis-{}-{port}",
            std::process::id()
        ));
        let mut server = RedisServer {
            port,
            child: None,
            extra,
            dir,
        };
        server.spawn();
        server
    }

    /// Starts the server in an empty working directory.
    fn spawn(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
        std::fs::create_dir_all(&self.dir).expect("a directory for redis-server");
        let child = Command::new("redis-server")
            .current_dir(&self.dir)
            .args([
                "--port",
                &self.port.to_string(),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
            ])
            .args(&self.extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server must be installed (scripts/test installs it)");
        let pid = child.id();
        self.child = Some(child);
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            // The server answering must be ours: a port taken meanwhile by another
            // test's server would otherwise make two tests share one Redis.
            if let Ok(mut c) =
                redis::Client::open(self.admin_url()).and_then(|c| c.get_connection())
                && let Ok(info) = redis::cmd("INFO").arg("server").query::<String>(&mut c)
            {
                assert!(
                    info.contains(&format!("process_id:{pid}\r\n")),
                    "port {} is served by another redis-server",
                    self.port
                );
                return;
            }
            if let Some(status) = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                panic!(
                    "redis-server on port {} exited at start: {status}",
                    self.port
                );
            }
            assert!(
                std::time::Instant::now() < deadline,
                "redis-server did not start on port {}",
                self.port
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// The server's process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// The URL with the default user's password, when `--requirepass` was given.
    pub fn admin_url(&self) -> String {
        let pass = self
            .extra
            .iter()
            .skip_while(|a| *a != "--requirepass")
            .nth(1);
        match pass {
            Some(p) => format!("redis://:{p}@127.0.0.1:{}", self.port),
            None => self.url(),
        }
    }

    /// SIGKILL: the data is gone, like a crash of a Redis without persistence.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Starts again, empty, on the same port.
    pub fn restart(&mut self) {
        self.kill();
        self.spawn();
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// What a [`Fleet`] runs on: one [`RedisServer`] or a [`RedisCluster`].
pub trait Backend: Sync {
    /// The connection a test uses for its own reads and writes.
    type Conn: redis::aio::ConnectionLike + Send;
    /// Whether replicas and members must speak the cluster protocol.
    const CLUSTER: bool;
    /// How long a fresh fleet may take to agree on its first table.
    const CONVERGE: Duration;

    /// What `-redis-url` takes: one URL, or every node's, comma-separated.
    fn urls(&self) -> String;

    fn conn(&self) -> impl Future<Output = Self::Conn> + Send;

    /// One command, e.g. `&["HGET", TABLE, member]`; panics on an error reply.
    fn cmd<T: redis::FromRedisValue>(&self, args: &[&str]) -> impl Future<Output = T> + Send {
        async move {
            let mut c = self.conn().await;
            command(args)
                .query_async(&mut c)
                .await
                .unwrap_or_else(|e| panic!("{args:?}: {e}"))
        }
    }

    /// Several commands in one `MULTI`/`EXEC`: their replies as a tuple.
    fn multi<T: redis::FromRedisValue>(&self, cmds: &[&[&str]]) -> impl Future<Output = T> + Send {
        async move {
            let mut c = self.conn().await;
            let mut pipe = redis::pipe();
            pipe.atomic();
            for args in cmds {
                let cmd = pipe.cmd(args[0]);
                for a in &args[1..] {
                    cmd.arg(*a);
                }
            }
            pipe.query_async(&mut c)
                .await
                .unwrap_or_else(|e| panic!("{cmds:?}: {e}"))
        }
    }

    /// The run id of the server that answers (`INFO server`).
    fn run_id(&self) -> impl Future<Output = RunId> + Send {
        async move {
            let info: String = self.cmd(&["INFO", "server"]).await;
            RunId::from_info(&info).unwrap_or_else(|| panic!("no run id in {info:?}"))
        }
    }
}

impl Backend for RedisServer {
    type Conn = redis::aio::MultiplexedConnection;
    const CLUSTER: bool = false;
    const CONVERGE: Duration = Duration::from_secs(10);

    fn urls(&self) -> String {
        self.url()
    }

    async fn conn(&self) -> redis::aio::MultiplexedConnection {
        // A test's own reads may be big (a table of 100,000 units) and the
        // machine busy: no 500 ms response timeout (redis-rs' default), but
        // a generous bound that still fails a hung Redis.
        let config =
            redis::AsyncConnectionConfig::new().set_response_timeout(Some(Duration::from_secs(30)));
        redis::Client::open(self.admin_url())
            .unwrap()
            .get_multiplexed_async_connection_with_config(&config)
            .await
            .unwrap()
    }
}

/// A loopback port that is free now and that no other test in this process
/// was given. Ports come from 10000..30000, below Linux's ephemeral range, so
/// the kernel does not hand them out to connections meanwhile.
pub fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let base = std::process::id().wrapping_mul(7919);
    loop {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let port = 10_000 + (base.wrapping_add(n) % 20_000) as u16;
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
}

pub const SERVICES: &str = "test-services";
pub const UNITS: &str = "test-units";
pub const TABLE: &str = "test-table";

/// A fenced write by `holder_id` of the liveness changes `health` and nothing
/// else (no table, no transit, floor 0, `now_ms` 1): the base every test and
/// bench changes with struct update syntax, `Commit { table: Some(&t),
/// ..bare_commit("a", &none) }`.
pub fn bare_commit<'a>(
    holder_id: &'a str,
    health: &'a distributor::core::liveness::HealthChanges,
) -> distributor::edge::redis::Commit<'a> {
    distributor::edge::redis::Commit {
        table: None,
        delta: None,
        health,
        suspects: &distributor::core::suspicion::NO_SUSPECTS,
        transit: None,
        generation_floor: 0,
        holder_id,
        now_ms: 1,
        assignment: "ring",
        last_change: None,
        expected_version: None,
        history: None,
        server: None,
        reports: 0,
        deadline_max: std::time::Duration::ZERO,
    }
}

/// Every coordination key and channel of [`TABLE`]; never spell them out.
pub fn keys() -> Keys {
    Keys::new(TABLE)
}

/// The glob that [`TABLE`]'s coordination keys and channels match
/// (`{test-table}:*`), for an ACL.
pub fn coordination_glob() -> String {
    let lease = keys().lease;
    let prefix = lease.strip_suffix("lease").expect("a key ends in its name");
    format!("{prefix}*")
}

/// Runs the `distributor` binary against `redis_url` and the kit's key names
/// (services `services`), with `args` after the flags.
pub fn cli_with(redis_url: &str, services: &str, args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_distributor"))
        .args([
            &format!("-redis-url={redis_url}"),
            &format!("-services-namespaces={services}"),
            &format!("-workunits-namespace={UNITS}"),
            &format!("-distribution-namespace={TABLE}"),
        ])
        .args(args)
        .output()
        .unwrap()
}

/// [`cli_with`] the kit's services list.
pub fn cli(redis_url: &str, args: &[&str]) -> std::process::Output {
    cli_with(redis_url, SERVICES, args)
}

/// A fast configuration for tests: failures show within a few hundred ms.
pub fn fast_config(redis_url: &str, replica: &str) -> Config {
    let mut c = Config::new(redis_url, &[SERVICES], UNITS, TABLE);
    c.replica_id = replica.to_string();
    c.poll_interval = Duration::from_millis(100);
    c.ping_timeout = Duration::from_millis(250);
    c.lease.ttl = Duration::from_millis(1000);
    c.lease.renew_interval = Duration::from_millis(200);
    c.lease.renew_deadline = Duration::from_millis(700);
    c.lease.retry_interval = Duration::from_millis(300);
    c.census_interval = Duration::from_millis(400);
    // Members that do not acknowledge read their row at least every 300 ms
    // (the kit's member poll) and stop at once.
    c.handoff_delay = Duration::from_millis(500);
    c
}

/// Polls `cond` every 20 ms until it holds; panics with `what` after `limit`.
/// Limits are generous upper bounds for liveness, not speed claims.
pub async fn wait_for<F, Fut>(what: &str, limit: Duration, cond: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    assert!(
        wait_until(limit, Duration::from_millis(20), cond).await,
        "timed out after {limit:?} waiting for: {what}"
    );
}

/// Polls `cond` every `every` until it holds; `false` if `limit` passed first.
pub async fn wait_until<F, Fut>(limit: Duration, every: Duration, mut cond: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = Instant::now() + limit;
    loop {
        if cond().await {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(every).await;
    }
}

/// Replicas and members sharing one Redis or one Redis Cluster.
pub struct Fleet<B: Backend = RedisServer> {
    pub redis: B,
    pub replicas: Vec<Option<Distributor>>,
    pub members: Vec<Option<Member>>,
    pub config: Config,
}

impl Fleet {
    /// A fresh Redis with `units`, `members` members and `replicas` replicas
    /// (configured by `tune`), returned once the table is the solver's.
    pub async fn converged(
        tune: impl FnOnce(&mut Config),
        members: usize,
        replicas: usize,
        units: &[String],
    ) -> (Fleet, MatchingTable) {
        Fleet::converged_on(RedisServer::start(), tune, members, replicas, units).await
    }

    /// The table the pure solver gives for these live members and units.
    pub fn expected(members: &[String], units: &[String]) -> MatchingTable {
        let inputs = distributor::core::inputs::Inputs {
            groups: vec![distributor::core::inputs::Group {
                name: SERVICES.into(),
                members: {
                    let mut m = members.to_vec();
                    m.sort();
                    m
                },
                malformed: vec![],
            }],
            units: {
                let mut u = units.to_vec();
                u.sort();
                u.dedup();
                u.into()
            },
            rejections: vec![],
        };
        MatchingTable::solve(&inputs, |_| true)
    }
}

impl<B: Backend> Fleet<B> {
    pub fn new(redis: B) -> Fleet<B> {
        let mut config = fast_config(&redis.urls(), "r0");
        config.redis_cluster = B::CLUSTER;
        Fleet {
            redis,
            replicas: vec![],
            members: vec![],
            config,
        }
    }

    /// The same as [`Fleet::converged`] on a backend the test prepared (a
    /// password, a proxy in front, a cluster).
    pub async fn converged_on(
        redis: B,
        tune: impl FnOnce(&mut Config),
        members: usize,
        replicas: usize,
        units: &[String],
    ) -> (Fleet<B>, MatchingTable) {
        let mut fleet = Fleet::new(redis);
        tune(&mut fleet.config);
        fleet.set_units(units).await;
        for _ in 0..members {
            fleet.add_member().await;
        }
        for _ in 0..replicas {
            fleet.add_replica();
        }
        let table = fleet.wait_for_table(units, B::CONVERGE).await;
        (fleet, table)
    }

    pub fn add_replica(&mut self) -> usize {
        let mut c = self.config.clone();
        c.replica_id = format!("replica-{}", self.replicas.len());
        self.replicas.push(Some(Distributor::start(c).unwrap()));
        self.replicas.len() - 1
    }

    pub async fn add_member(&mut self) -> usize {
        let m = Member::start(self.member_options()).await.unwrap();
        self.members.push(Some(m));
        self.members.len() - 1
    }

    pub fn member_options(&self) -> MemberOptions {
        let mut o = MemberOptions {
            redis_url: self.config.redis_url.clone(),
            services_key: SERVICES.into(),
            table_key: TABLE.into(),
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            ..MemberOptions::default()
        };
        o.redis_cluster = self.config.redis_cluster;
        o.reregister_interval = Duration::from_millis(300);
        o.poll_interval = Duration::from_millis(300);
        o
    }

    pub fn member_id(&self, i: usize) -> String {
        self.members[i].as_ref().unwrap().id().to_string()
    }

    pub fn live_member_ids(&self) -> Vec<String> {
        self.members
            .iter()
            .flatten()
            .map(|m| m.id().to_string())
            .collect()
    }

    pub async fn set_units(&self, units: &[String]) {
        let mut c = self.redis.conn().await;
        let mut p = redis::pipe();
        p.atomic().del(UNITS).ignore();
        if !units.is_empty() {
            p.rpush(UNITS, units).ignore();
        }
        let () = p.query_async(&mut c).await.unwrap();
    }

    pub fn statuses(&self) -> Vec<Status> {
        self.replicas
            .iter()
            .flatten()
            .map(|r| r.status().borrow().clone())
            .collect()
    }

    /// The index of the replica that currently acts as holder, if exactly one does.
    pub fn holder(&self) -> Option<usize> {
        let holders: Vec<usize> = self
            .replicas
            .iter()
            .enumerate()
            .filter_map(|(i, r)| {
                r.as_ref()
                    .filter(|r| r.status().borrow().role == Role::Holder)
                    .map(|_| i)
            })
            .collect();
        (holders.len() == 1).then(|| holders[0])
    }

    pub async fn wait_for_holder(&self) -> usize {
        wait_for("a single holder", Duration::from_secs(10), || async {
            self.holder().is_some()
        })
        .await;
        self.holder().unwrap()
    }

    pub async fn table(&self) -> MatchingTable {
        let rows: std::collections::HashMap<String, String> =
            self.redis.cmd(&["HGETALL", TABLE]).await;
        MatchingTable::from_rows(rows)
    }

    pub async fn generation(&self) -> u64 {
        let g: Option<u64> = self.redis.cmd(&["HGET", &keys().meta, "generation"]).await;
        g.unwrap_or(0)
    }

    /// Waits until the stored table is exactly the solver's for the live members.
    pub async fn wait_for_table(&self, units: &[String], limit: Duration) -> MatchingTable {
        self.wait_for_table_with(units, &[], limit).await
    }

    /// The same, with `extra` live members that are not `Member`s of this fleet.
    pub async fn wait_for_table_with(
        &self,
        units: &[String],
        extra: &[String],
        limit: Duration,
    ) -> MatchingTable {
        let mut live = self.live_member_ids();
        live.extend(extra.iter().cloned());
        let expected = Fleet::expected(&live, units);
        let deadline = Instant::now() + limit;
        loop {
            let last = self.table().await;
            if last == expected {
                return last;
            }
            assert!(
                Instant::now() < deadline,
                "table did not converge within {limit:?}\nexpected {expected:?}\nlast {last:?}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    pub async fn shutdown(mut self) {
        for m in self.members.drain(..).flatten() {
            m.shutdown().await;
        }
        for r in self.replicas.drain(..).flatten() {
            r.shutdown().await;
        }
    }
}

/// The example worker (`examples/worker.rs`), built once per test process
/// beside the binary under test: `cargo test --test integration` does not
/// build examples by itself.
pub fn example_worker() -> std::path::PathBuf {
    static BUILT: std::sync::OnceLock<()> = std::sync::OnceLock::new();
    BUILT.get_or_init(|| {
        let mut cargo = Command::new(env!("CARGO"));
        // The variables cargo sets for running this test would make that
        // build differ from the one that built the test, and each would then
        // rebuild the library for the other.
        for (k, _) in std::env::vars_os() {
            let k = k.to_string_lossy().into_owned();
            let set_by_cargo = (k.starts_with("CARGO_")
                && !matches!(k.as_str(), "CARGO_HOME" | "CARGO_TARGET_DIR"))
                || matches!(k.as_str(), "OUT_DIR" | "LD_LIBRARY_PATH");
            if set_by_cargo {
                cargo.env_remove(&k);
            }
        }
        let out = cargo
            .args(["build", "--quiet", "--example", "worker", "--manifest-path"])
            .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml"))
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "cargo build --example worker: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    });
    docker::worker_binary()
}

pub fn units(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("unit-{i:04}")).collect()
}

/// One command from its words, e.g. `&["HGET", TABLE, member]`.
pub fn command(args: &[&str]) -> redis::Cmd {
    let mut cmd = redis::cmd(args[0]);
    cmd.arg(&args[1..]);
    cmd
}

/// One command to the server at `url` (a sentinel, a replica), on a
/// connection of its own.
pub async fn ask<T: redis::FromRedisValue>(url: &str, args: &[&str]) -> redis::RedisResult<T> {
    let mut c = redis::Client::open(url)?
        .get_multiplexed_async_connection()
        .await?;
    command(args).query_async(&mut c).await
}

/// A minimal HTTP/1.0 GET against loopback: (status code, body).
pub async fn http_get(port: u16, path: &str) -> std::io::Result<(u16, String)> {
    let (code, _, body) = http_get_with(port, path, &[]).await?;
    Ok((code, body))
}

/// GET `path` with extra request `headers`: the status, the response's
/// headers (lowercase names) and its body.
pub async fn http_get_with(
    port: u16,
    path: &str,
    headers: &[(&str, &str)],
) -> std::io::Result<(u16, std::collections::BTreeMap<String, String>, String)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port)).await?;
    let extra: String = headers
        .iter()
        .map(|(k, v)| format!("{k}: {v}\r\n"))
        .collect();
    s.write_all(format!("GET {path} HTTP/1.0\r\nHost: localhost\r\n{extra}\r\n").as_bytes())
        .await?;
    let mut buf = String::new();
    s.read_to_string(&mut buf).await?;
    let (head, body) = buf.split_once("\r\n\r\n").unwrap_or((&buf, ""));
    let mut lines = head.lines();
    let code = lines
        .next()
        .and_then(|status| status.split_whitespace().nth(1))
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let fields = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    Ok((code, fields, body.to_string()))
}

/// The samples of `/metrics` on `port`, if it answers 200.
pub async fn scrape(port: u16) -> Option<Vec<Sample>> {
    match http_get(port, "/metrics").await {
        Ok((200, body)) => Some(parse_metrics(&body)),
        _ => None,
    }
}

/// One sample of the Prometheus/OpenMetrics text format.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub name: String,
    pub labels: std::collections::BTreeMap<String, String>,
    pub value: f64,
}

/// Parses the text exposition format; panics on a malformed line, so a test
/// fails on output Prometheus would reject.
pub fn parse_metrics(text: &str) -> Vec<Sample> {
    let mut out = Vec::new();
    for line in text.lines() {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (series, value) = line
            .rsplit_once(' ')
            .unwrap_or_else(|| panic!("no value: {line:?}"));
        let value: f64 = match value {
            "+Inf" => f64::INFINITY,
            "-Inf" => f64::NEG_INFINITY,
            v => v
                .parse()
                .unwrap_or_else(|_| panic!("bad value in {line:?}")),
        };
        let (name, labels) = match series.split_once('{') {
            None => (series.to_string(), Default::default()),
            Some((name, rest)) => {
                let rest = rest
                    .strip_suffix('}')
                    .unwrap_or_else(|| panic!("unclosed labels: {line:?}"));
                let mut labels = std::collections::BTreeMap::new();
                for pair in rest.split("\",").filter(|p| !p.is_empty()) {
                    let (k, v) = pair
                        .split_once("=\"")
                        .unwrap_or_else(|| panic!("bad label in {line:?}"));
                    labels.insert(k.to_string(), v.trim_end_matches('"').to_string());
                }
                (name.to_string(), labels)
            }
        };
        assert!(
            name.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':'),
            "bad metric name in {line:?}"
        );
        out.push(Sample {
            name,
            labels,
            value,
        });
    }
    out
}

/// The value of the one sample named `name` whose labels include `labels`.
pub fn metric(samples: &[Sample], name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let matching: Vec<&Sample> = samples
        .iter()
        .filter(|s| {
            s.name == name
                && labels
                    .iter()
                    .all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v))
        })
        .collect();
    assert!(
        matching.len() <= 1,
        "several samples match {name} {labels:?}: {matching:?}"
    );
    matching.first().map(|s| s.value)
}

/// The sum of every sample named `name`, whatever its labels.
pub fn metric_sum(samples: &[Sample], name: &str) -> f64 {
    samples
        .iter()
        .filter(|s| s.name == name)
        .map(|s| s.value)
        .sum()
}

/// A worker whose ping answers can be switched off and on.
pub struct FlakyWorker {
    pub addr: String,
    pub healthy: std::sync::Arc<std::sync::atomic::AtomicBool>,
    /// Pings received (answered or not).
    pub pings: std::sync::Arc<std::sync::atomic::AtomicU64>,
    /// How long each ping waits before it is answered (ms; 0 at start).
    pub answer_delay_ms: std::sync::Arc<std::sync::atomic::AtomicU64>,
    pub server: tokio::task::JoinHandle<()>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

#[derive(Clone)]
struct Flaky(
    std::sync::Arc<std::sync::atomic::AtomicBool>,
    std::sync::Arc<std::sync::atomic::AtomicU64>,
    std::sync::Arc<std::sync::atomic::AtomicU64>,
);

#[tonic::async_trait]
impl distributor::proto::grpc_pinger_server::GrpcPinger for Flaky {
    async fn ping(&self, _: tonic::Request<()>) -> Result<tonic::Response<()>, tonic::Status> {
        self.1.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let delay = self.2.load(std::sync::atomic::Ordering::SeqCst);
        if delay > 0 {
            tokio::time::sleep(Duration::from_millis(delay)).await;
        }
        if self.0.load(std::sync::atomic::Ordering::SeqCst) {
            Ok(tonic::Response::new(()))
        } else {
            Err(tonic::Status::unavailable("switched off by the test"))
        }
    }
}

impl FlakyWorker {
    /// Serves the ping and lists itself in the fleet's services list.
    pub async fn start<B: Backend>(fleet: &Fleet<B>) -> FlakyWorker {
        let healthy = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
        FlakyWorker::start_sharing(fleet, healthy).await
    }

    /// The same, answering while `healthy` holds: workers that share a flag
    /// fail and recover at the same instant.
    pub async fn start_sharing<B: Backend>(
        fleet: &Fleet<B>,
        healthy: std::sync::Arc<std::sync::atomic::AtomicBool>,
    ) -> FlakyWorker {
        let w = FlakyWorker::serve(healthy).await;
        let () = fleet.redis.cmd(&["RPUSH", SERVICES, &w.addr]).await;
        w
    }

    /// An old-protocol worker (what Go workers do): answers pings, reads its
    /// row and the generation every 100 ms, never reports. What it reads is
    /// what it works on: each change goes to `record` as ownership events
    /// ([`ownership::change_lines`]). The reader runs until its handle is
    /// aborted.
    pub async fn old_protocol(
        fleet: &Fleet,
        record: impl Fn(String) + Send + 'static,
    ) -> (FlakyWorker, tokio::task::JoinHandle<()>) {
        let pinger = FlakyWorker::start(fleet).await;
        let id = pinger.addr.clone();
        let mut c = fleet.redis.conn().await;
        let reader = tokio::spawn(async move {
            let mut held = std::collections::BTreeMap::new();
            loop {
                let read: redis::RedisResult<(Option<String>, Option<u64>)> = redis::pipe()
                    .atomic()
                    .hget(TABLE, &id)
                    .hget(keys().meta, "generation")
                    .query_async(&mut c)
                    .await;
                if let Ok((row, g)) = read {
                    let units: Vec<String> = row
                        .iter()
                        .flat_map(|r| distributor::core::table::decode_row(r))
                        .map(str::to_string)
                        .collect();
                    let at = ownership::unix_us_now();
                    for line in ownership::change_lines(&id, &mut held, &units, g.unwrap_or(0), at)
                    {
                        record(line);
                    }
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        });
        (pinger, reader)
    }

    /// Serves the ping without listing itself: the test lists it.
    pub async fn serve(healthy: std::sync::Arc<std::sync::atomic::AtomicBool>) -> FlakyWorker {
        FlakyWorker::serve_on("127.0.0.1:0", healthy).await
    }

    /// Serves the ping on `addr` (a killed worker's, for a new process on
    /// the same address), healthy, without listing itself.
    pub async fn restart_on(addr: &str) -> FlakyWorker {
        let healthy = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
        FlakyWorker::serve_on(addr, healthy).await
    }

    async fn serve_on(
        addr: &str,
        healthy: std::sync::Arc<std::sync::atomic::AtomicBool>,
    ) -> FlakyWorker {
        let listener = tokio::net::TcpListener::bind(addr).await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let pings = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        let answer_delay_ms = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        let service = distributor::proto::grpc_pinger_server::GrpcPingerServer::new(Flaky(
            healthy.clone(),
            pings.clone(),
            answer_delay_ms.clone(),
        ));
        // TCP_NODELAY, as `Member` serves: without it a first contact waits
        // out a delayed ACK (about 40 ms), near the holder's 50 ms grace.
        let incoming =
            tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true));
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(async move {
            let _ = tonic::transport::Server::builder()
                .add_service(service)
                .serve_with_incoming_shutdown(incoming, async {
                    let _ = stopped.await;
                })
                .await;
        });
        FlakyWorker {
            addr,
            healthy,
            pings,
            answer_delay_ms,
            server,
            stop: Some(stop),
        }
    }

    /// Like a process that exits: the listener and every connection close,
    /// so the next ping is refused.
    pub async fn kill(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let _ = (&mut self.server).await;
    }

    pub fn set_healthy(&self, healthy: bool) {
        self.healthy
            .store(healthy, std::sync::atomic::Ordering::SeqCst);
    }
}

/// A TCP proxy on loopback whose existing connections can be frozen: bytes
/// stop flowing but nothing is closed, like a silent network partition.
/// Connections accepted after a freeze flow normally.
pub struct FreezableProxy {
    pub port: u16,
    generation: std::sync::Arc<std::sync::atomic::AtomicU64>,
    /// While set, every connection freezes, new ones included ([`FreezableProxy::cut`]).
    cut: std::sync::Arc<std::sync::atomic::AtomicBool>,
    task: tokio::task::JoinHandle<()>,
}

async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    generation: std::sync::Arc<std::sync::atomic::AtomicU64>,
    cut: std::sync::Arc<std::sync::atomic::AtomicBool>,
    born: u64,
) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        if generation.load(std::sync::atomic::Ordering::SeqCst) != born
            || cut.load(std::sync::atomic::Ordering::SeqCst)
        {
            // Frozen: keep both sockets open and never forward again.
            std::future::pending::<()>().await;
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}

impl FreezableProxy {
    pub async fn start(target_port: u16) -> FreezableProxy {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let generation = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        let cut = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let shared = generation.clone();
        let shared_cut = cut.clone();
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let born = shared.load(std::sync::atomic::Ordering::SeqCst);
                let generation = shared.clone();
                let cut = shared_cut.clone();
                tokio::spawn(async move {
                    let Ok(server) =
                        tokio::net::TcpStream::connect(("127.0.0.1", target_port)).await
                    else {
                        return;
                    };
                    let (cr, cw) = client.into_split();
                    let (sr, sw) = server.into_split();
                    let up = tokio::spawn(pump(cr, sw, generation.clone(), cut.clone(), born));
                    let down = tokio::spawn(pump(sr, cw, generation, cut, born));
                    let _ = tokio::join!(up, down);
                });
            }
        });
        FreezableProxy {
            port,
            generation,
            cut,
            task,
        }
    }

    /// Freezes every connection open now; new connections still work.
    pub fn freeze_existing(&self) {
        self.generation
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }

    /// A silent partition until [`FreezableProxy::heal`]: every connection
    /// open now freezes for good, and so does every connection made
    /// meanwhile as soon as it carries a byte.
    pub fn cut(&self) {
        self.cut.store(true, std::sync::atomic::Ordering::SeqCst);
        self.freeze_existing();
    }

    /// Ends a [`FreezableProxy::cut`]: connections made from now on flow
    /// (the frozen ones stay frozen; their client must replace them).
    pub fn heal(&self) {
        self.cut.store(false, std::sync::atomic::Ordering::SeqCst);
    }
}

impl Drop for FreezableProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A TCP proxy on loopback that slows one kind of traffic down: once a
/// connection has carried a command whose RESP encoding contains `trigger`
/// (e.g. `$4\r\nINCR\r\n`), every reply on that connection arrives `delay`
/// late. Other connections flow normally.
pub struct DelayingProxy {
    pub port: u16,
    task: tokio::task::JoinHandle<()>,
}

impl DelayingProxy {
    pub async fn start(target_port: u16, trigger: &'static [u8], delay: Duration) -> DelayingProxy {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let Ok(server) =
                        tokio::net::TcpStream::connect(("127.0.0.1", target_port)).await
                    else {
                        return;
                    };
                    let slow = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
                    let (mut cr, mut cw) = client.into_split();
                    let (mut sr, mut sw) = server.into_split();
                    let seen = slow.clone();
                    let up = tokio::spawn(async move {
                        let mut buf = vec![0u8; 64 * 1024];
                        loop {
                            let n = match cr.read(&mut buf).await {
                                Ok(0) | Err(_) => return,
                                Ok(n) => n,
                            };
                            if buf[..n]
                                .windows(trigger.len())
                                .any(|w| w.eq_ignore_ascii_case(trigger))
                            {
                                seen.store(true, std::sync::atomic::Ordering::SeqCst);
                            }
                            if sw.write_all(&buf[..n]).await.is_err() {
                                return;
                            }
                        }
                    });
                    let down = tokio::spawn(async move {
                        let mut buf = vec![0u8; 64 * 1024];
                        loop {
                            let n = match sr.read(&mut buf).await {
                                Ok(0) | Err(_) => return,
                                Ok(n) => n,
                            };
                            if slow.load(std::sync::atomic::Ordering::SeqCst) {
                                tokio::time::sleep(delay).await;
                            }
                            if cw.write_all(&buf[..n]).await.is_err() {
                                return;
                            }
                        }
                    });
                    let _ = tokio::join!(up, down);
                });
            }
        });
        DelayingProxy { port, task }
    }
}

impl Drop for DelayingProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A real Redis Cluster of `masters` nodes on loopback (no replicas), created
/// with `redis-cli --cluster create`. Nodes die with it.
pub struct RedisCluster {
    pub nodes: Vec<RedisServer>,
    dirs: Vec<std::path::PathBuf>,
}

impl RedisCluster {
    pub fn start(masters: usize) -> RedisCluster {
        let mut nodes = Vec::new();
        let mut dirs = Vec::new();
        for _ in 0..masters {
            // The cluster bus listens on port + 10000: both must be free.
            let port = loop {
                let p = free_port();
                if TcpListener::bind(("127.0.0.1", p + 10_000)).is_ok() {
                    break p;
                }
            };
            let dir = std::env::temp_dir()
                .join(format!("distributor-cluster-{}-{port}", std::process::id()));
            std::fs::create_dir_all(&dir).unwrap();
            let extra: Vec<String> = [
                "--cluster-enabled",
                "yes",
                "--cluster-config-file",
                "nodes.conf",
                "--cluster-node-timeout",
                "2000",
                "--dir",
                dir.to_str().unwrap(),
            ]
            .iter()
            .map(|s| s.to_string())
            .collect();
            let mut server = RedisServer {
                port,
                child: None,
                extra,
                dir: dir.clone(),
            };
            server.spawn();
            nodes.push(server);
            dirs.push(dir);
        }
        let addrs: Vec<String> = nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        let out = Command::new("redis-cli")
            .args(["--cluster", "create"])
            .args(&addrs)
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .output()
            .expect("redis-cli must be installed");
        assert!(
            out.status.success(),
            "cluster create failed: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        for n in &nodes {
            loop {
                let mut c = redis::Client::open(n.url())
                    .unwrap()
                    .get_connection()
                    .unwrap();
                let info: String = redis::cmd("CLUSTER").arg("INFO").query(&mut c).unwrap();
                if info.contains("cluster_state:ok") {
                    break;
                }
                assert!(
                    std::time::Instant::now() < deadline,
                    "cluster did not become ok: {info}"
                );
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        RedisCluster { nodes, dirs }
    }
}

impl Backend for RedisCluster {
    type Conn = redis::cluster_async::ClusterConnection;
    const CLUSTER: bool = true;
    const CONVERGE: Duration = Duration::from_secs(15);

    fn urls(&self) -> String {
        self.nodes
            .iter()
            .map(RedisServer::url)
            .collect::<Vec<_>>()
            .join(",")
    }

    async fn conn(&self) -> redis::cluster_async::ClusterConnection {
        let urls: Vec<String> = self.nodes.iter().map(RedisServer::url).collect();
        redis::cluster::ClusterClient::new(urls)
            .unwrap()
            .get_async_connection()
            .await
            .unwrap()
    }
}

impl Drop for RedisCluster {
    fn drop(&mut self) {
        for n in &mut self.nodes {
            n.kill();
        }
        for d in &self.dirs {
            let _ = std::fs::remove_dir_all(d);
        }
    }
}

/// A lease claim for tests that call the store directly: a 30 s TTL, no
/// floors, no takeover.
pub fn lease_claim(holder_id: &str) -> distributor::edge::redis::Claim<'_> {
    distributor::edge::redis::Claim {
        ttl: Duration::from_secs(30),
        epoch_floor: 0,
        generation_floor: 0,
        holder_id,
        now_ms: 1,
        failure_threshold: 1,
        takeover: None,
    }
}

/// What [`serve_http`] serves beside `/metrics` and the probes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ui {
    Off,
    /// The page and its JSON API.
    On,
    /// The same and `/api/plan`, with the fleet's settings.
    WithPlan,
}

/// Serves replica `i`'s HTTP endpoints on a free loopback port, as the
/// daemon does with `ui`, until `stop`; returns the port.
pub async fn serve_http(
    fleet: &Fleet,
    i: usize,
    ui: Ui,
    stop: &tokio_util::sync::CancellationToken,
) -> u16 {
    let replica = fleet.replicas[i].as_ref().unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let api = (ui != Ui::Off).then(|| {
        let store = distributor::edge::redis::Store::connect(
            &fleet.config.redis_options(),
            TABLE,
            Duration::from_secs(3),
        )
        .unwrap();
        let api = distributor::ops::api::Api::start(
            store,
            fleet.config.services_namespaces.clone(),
            fleet.config.workunits_namespace.clone(),
            replica.status(),
            stop.clone().cancelled_owned(),
        );
        match ui {
            Ui::WithPlan => api.with_plan(distributor::cli::plan::settings(&fleet.config)),
            _ => api,
        }
    });
    tokio::spawn(distributor::ops::http::serve_with(
        listener,
        replica.status(),
        replica.metrics(),
        Duration::from_secs(5),
        api,
        stop.clone().cancelled_owned(),
    ));
    port
}
