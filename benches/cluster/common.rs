//! What only the cluster benchmarks need: child processes (gRPC ping
//! servers, real `Member`s, `distributor` replicas), process CPU and memory,
//! Redis `INFO` figures, statistics and PASS/MISS reporting. Redis itself, key
//! names, ports, HTTP and metrics come from the test kit (`tests/support`).
#![allow(dead_code)]

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write as _};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::Duration;

pub use crate::support::{
    Backend, RedisServer, SERVICES, TABLE, UNITS, free_port, keys, metric, metric_sum, scrape,
    wait_until,
};

/// Set in the environment of a child process started from this same binary.
pub const CHILD_ENV: &str = "DISTRIBUTOR_BENCH_CHILD";

// ---------------------------------------------------------------------------
// Results

/// Bounds a figure must stay within; `None` means "reported, no target".
#[derive(Debug, Clone, Copy, Default)]
pub struct Target {
    pub median: Option<f64>,
    pub max: Option<f64>,
}

impl Target {
    pub fn none() -> Target {
        Target::default()
    }
    pub fn max(v: f64) -> Target {
        Target {
            median: None,
            max: Some(v),
        }
    }
    pub fn median_max(median: f64, max: f64) -> Target {
        Target {
            median: Some(median),
            max: Some(max),
        }
    }
}

#[derive(Debug, Clone)]
pub struct Line {
    pub name: String,
    pub unit: &'static str,
    pub n: usize,
    pub min: f64,
    pub median: f64,
    pub max: f64,
    pub target: Target,
    pub verdict: Option<bool>,
}

static RESULTS: Mutex<Vec<Line>> = Mutex::new(Vec::new());

pub fn median(sorted: &[f64]) -> f64 {
    let n = sorted.len();
    if n == 0 {
        return f64::NAN;
    }
    if n % 2 == 1 {
        sorted[n / 2]
    } else {
        (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0
    }
}

fn fmt_num(v: f64) -> String {
    if v.is_nan() {
        "-".into()
    } else if v.abs() >= 100.0 || v == v.trunc() {
        format!("{v:.0}")
    } else if v.abs() >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

/// Records and prints one figure: min/median/max of `samples` and its verdict.
pub fn report(name: &str, unit: &'static str, samples: &[f64], target: Target) -> Option<bool> {
    let mut s: Vec<f64> = samples.to_vec();
    s.sort_by(|a, b| a.total_cmp(b));
    let (min, med, max) = if s.is_empty() {
        (f64::NAN, f64::NAN, f64::NAN)
    } else {
        (s[0], median(&s), s[s.len() - 1])
    };
    let verdict = if target.median.is_none() && target.max.is_none() {
        None
    } else {
        Some(
            !s.is_empty()
                && target.median.is_none_or(|t| med <= t)
                && target.max.is_none_or(|t| max <= t),
        )
    };
    let line = Line {
        name: name.to_string(),
        unit,
        n: s.len(),
        min,
        median: med,
        max,
        target,
        verdict,
    };
    println!("{}", render(&line));
    RESULTS.lock().unwrap().push(line);
    verdict
}

/// Records a single measured value (n = 1).
pub fn report_one(name: &str, unit: &'static str, value: f64, target: Target) -> Option<bool> {
    report(name, unit, &[value], target)
}

pub fn target_text(t: &Target, unit: &str) -> String {
    match (t.median, t.max) {
        (None, None) => "-".into(),
        (Some(m), None) => format!("median <= {} {unit}", fmt_num(m)),
        (None, Some(x)) => format!("max <= {} {unit}", fmt_num(x)),
        (Some(m), Some(x)) => format!("median <= {}, max <= {} {unit}", fmt_num(m), fmt_num(x)),
    }
}

fn verdict_text(v: Option<bool>) -> &'static str {
    match v {
        None => "info",
        Some(true) => "PASS",
        Some(false) => "MISS",
    }
}

fn render(l: &Line) -> String {
    format!(
        "RESULT {:<58} n={:<3} min={:>9} median={:>9} max={:>9} {:<6} target: {:<28} {}",
        l.name,
        l.n,
        fmt_num(l.min),
        fmt_num(l.median),
        fmt_num(l.max),
        l.unit,
        target_text(&l.target, l.unit),
        verdict_text(l.verdict)
    )
}

/// Prints every recorded figure again, as a Markdown table.
pub fn print_summary() {
    let lines = RESULTS.lock().unwrap();
    println!("\n## Summary (Markdown)\n");
    println!("| figure | n | min | median | max | unit | target | verdict |");
    println!("|---|---|---|---|---|---|---|---|");
    for l in lines.iter() {
        println!(
            "| {} | {} | {} | {} | {} | {} | {} | {} |",
            l.name,
            l.n,
            fmt_num(l.min),
            fmt_num(l.median),
            fmt_num(l.max),
            l.unit,
            target_text(&l.target, l.unit),
            verdict_text(l.verdict)
        );
    }
    let missed = lines.iter().filter(|l| l.verdict == Some(false)).count();
    let passed = lines.iter().filter(|l| l.verdict == Some(true)).count();
    println!("\n{passed} PASS, {missed} MISS");
}

pub fn section(title: &str) {
    println!("\n=== {title}");
    note(&format!("load average at start: {}", loadavg()));
}

/// `/proc/loadavg`'s 1, 5 and 15 minute figures: other work on the machine
/// shows here and skews every figure.
pub fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

pub fn note(text: &str) {
    println!("    {text}");
}

pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// A deterministic pseudo-random sequence (splitmix64), for kill phases.
/// `BENCH_SEED` (default 0), mixed into every trial's random delays: the same
/// seed draws the same delays, so repeating a run does not resample them.
pub fn seed() -> u64 {
    std::env::var("BENCH_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// Uniform in `[0, upper)`.
    pub fn below(&mut self, upper: Duration) -> Duration {
        let n = upper.as_micros().max(1) as u64;
        Duration::from_micros(self.next() % n)
    }
}

// ---------------------------------------------------------------------------
// CPU time

/// User + system CPU time of a process (all its threads), from `/proc`.
pub fn cpu_time(pid: u32) -> Duration {
    let path = format!("/proc/{pid}/stat");
    let Ok(stat) = std::fs::read_to_string(path) else {
        return Duration::ZERO;
    };
    // Fields after the parenthesised command name; utime and stime are the
    // 14th and 15th fields of the whole line.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<u64>().ok())
            .unwrap_or(0)
    };
    let total = ticks(11) + ticks(12);
    Duration::from_secs_f64(total as f64 / clock_ticks() as f64)
}

pub fn self_cpu() -> Duration {
    cpu_time(std::process::id())
}

fn clock_ticks() -> u64 {
    static TICKS: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *TICKS.get_or_init(|| {
        Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|o| String::from_utf8(o.stdout).ok())
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(100)
    })
}

/// Peak resident set size of this process so far, in kB.
pub fn peak_rss_kb(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

/// The soft limit on open files of this process (children inherit it).
pub fn fd_limit() -> u64 {
    std::fs::read_to_string("/proc/self/limits")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Max open files"))
                .and_then(|l| l.split_whitespace().nth(3)?.parse().ok())
        })
        .unwrap_or(0)
}

/// Raises the soft open-files limit to the hard one (children inherit it).
pub fn raise_fd_limit() {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: plain get/setrlimit on a local struct.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 && lim.rlim_cur < lim.rlim_max {
            lim.rlim_cur = lim.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
        }
    }
}

/// Whether 10,000 connections fit; says why not otherwise.
pub fn enough_fds(what: &str) -> bool {
    let limit = fd_limit();
    if limit < 12_000 {
        println!(
            "RESULT {what}: SKIPPED, open-files limit is {limit} (hard limit included); 10,000 members need >= 12,000"
        );
        return false;
    }
    true
}

pub use super::machine::cpu_model;

// ---------------------------------------------------------------------------
// Redis

/// A private `redis-server` that takes the connections of 10,000 members.
pub fn redis_server() -> RedisServer {
    RedisServer::start_with(&["--maxclients", "20000"])
}

/// `INFO <section>` as a map of `field -> value`.
pub async fn info(
    conn: &mut redis::aio::MultiplexedConnection,
    section: &str,
) -> HashMap<String, String> {
    let text: String = redis::cmd("INFO")
        .arg(section)
        .query_async(conn)
        .await
        .unwrap();
    text.lines()
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.to_string(), v.trim().to_string()))
        .collect()
}

/// Calls per command from `INFO commandstats` (`cmdstat_get:calls=3,...`).
pub fn command_calls(info: &HashMap<String, String>) -> HashMap<String, (u64, u64)> {
    info.iter()
        .filter_map(|(k, v)| {
            let cmd = k.strip_prefix("cmdstat_")?;
            let field = |name: &str| {
                v.split(',')
                    .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
                    .and_then(|x| x.parse::<u64>().ok())
                    .unwrap_or(0)
            };
            Some((cmd.to_string(), (field("calls"), field("usec"))))
        })
        .collect()
}

pub fn num(info: &HashMap<String, String>, key: &str) -> u64 {
    info.get(key).and_then(|v| v.parse().ok()).unwrap_or(0)
}

pub async fn hexists(conn: &mut redis::aio::MultiplexedConnection, member: &str) -> bool {
    redis::cmd("HEXISTS")
        .arg(TABLE)
        .arg(member)
        .query_async(conn)
        .await
        .unwrap_or(false)
}

/// Rows of the matching table (0 if it cannot be read).
pub async fn table_rows(conn: &mut redis::aio::MultiplexedConnection) -> usize {
    redis::cmd("HLEN")
        .arg(TABLE)
        .query_async(conn)
        .await
        .unwrap_or(0)
}

/// Units in transit (`{T}:transit` fields); `None` when the read failed.
pub async fn in_transit(conn: &mut redis::aio::MultiplexedConnection) -> Option<u64> {
    redis::cmd("HLEN")
        .arg(keys().transit)
        .query_async(conn)
        .await
        .ok()
}

/// Waits until the matching table lists `n` workers; panics after `limit`.
pub async fn wait_for_rows(conn: &redis::aio::MultiplexedConnection, n: usize, limit: Duration) {
    let ok = wait_until(limit, Duration::from_millis(50), || {
        let mut c = conn.clone();
        async move { table_rows(&mut c).await == n }
    })
    .await;
    assert!(ok, "the table did not list all {n} workers");
}

pub async fn generation(conn: &mut redis::aio::MultiplexedConnection) -> u64 {
    let g: Option<u64> = redis::cmd("HGET")
        .arg(keys().meta)
        .arg("generation")
        .query_async(conn)
        .await
        .unwrap_or(None);
    g.unwrap_or(0)
}

/// Replaces the list `key` with `values`: filled beside it in chunks (a
/// single pipeline of a hundred megabytes would outlast the client's reply
/// deadline), then swapped in with one `RENAME`, so readers see the old list
/// or the new one.
pub async fn set_list(conn: &mut redis::aio::MultiplexedConnection, key: &str, values: &[String]) {
    let staging = format!("{key}.staging");
    let _: i64 = redis::cmd("DEL")
        .arg(&staging)
        .query_async(conn)
        .await
        .unwrap();
    for chunk in values.chunks(10_000) {
        let _: i64 = redis::cmd("RPUSH")
            .arg(&staging)
            .arg(chunk)
            .query_async(conn)
            .await
            .unwrap();
    }
    if values.is_empty() {
        let _: i64 = redis::cmd("DEL").arg(key).query_async(conn).await.unwrap();
    } else {
        let () = redis::cmd("RENAME")
            .arg(&staging)
            .arg(key)
            .query_async(conn)
            .await
            .unwrap();
    }
}

pub fn unit_names(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("unit-{i:08}")).collect()
}

// ---------------------------------------------------------------------------
// A table state written through the library, as a holder writes it

/// Takes the lease as `holder` for 10 minutes with the library's own
/// acquisition: no replica writes meanwhile.
pub async fn hold_lease(
    store: &distributor::edge::redis::Store,
    holder: &str,
) -> distributor::edge::redis::LeaseGrant {
    use distributor::edge::redis::{Acquisition, Claim};
    let claim = Claim {
        ttl: Duration::from_secs(600),
        epoch_floor: 0,
        generation_floor: 0,
        holder_id: holder,
        now_ms: distributor::unix_ms(),
        failure_threshold: 1,
        takeover: None,
    };
    match store.acquire(&claim).await.unwrap() {
        Acquisition::Acquired(g) => g,
        other => panic!("lease not acquired: {other:?}"),
    }
}

/// Writes `table` (`None`: only the liveness changes `health`) as `holder`
/// with `grant`, through the library's fenced commit, as a holder's cycle
/// does (ring mode, nothing in transit).
pub async fn commit_as(
    store: &distributor::edge::redis::Store,
    grant: &distributor::edge::redis::LeaseGrant,
    holder: &str,
    table: Option<&distributor::MatchingTable>,
    health: &distributor::core::liveness::HealthChanges,
) -> Result<distributor::edge::redis::Committed, distributor::StoreError> {
    store
        .commit(
            grant,
            &distributor::edge::redis::Commit {
                table,
                now_ms: distributor::unix_ms(),
                ..crate::support::bare_commit(holder, health)
            },
        )
        .await
}

/// The inputs of the one group [`SERVICES`]: `members` and `units`, sorted.
pub fn one_group(members: &[String], units: &[String]) -> distributor::core::inputs::Inputs {
    let sorted = |v: &[String]| {
        let mut v = v.to_vec();
        v.sort();
        v
    };
    distributor::core::inputs::Inputs {
        groups: vec![distributor::core::inputs::Group {
            name: SERVICES.into(),
            members: sorted(members),
            malformed: vec![],
        }],
        units: sorted(units).into(),
        rejections: vec![],
    }
}

// ---------------------------------------------------------------------------
// Child processes

/// A child process that is SIGKILLed and reaped on drop.
pub struct Proc {
    child: Child,
    pub pid: u32,
    pub name: String,
}

impl Proc {
    /// Sends a signal with the `kill` system call, e.g. `libc::SIGSTOP`.
    pub fn signal(&self, sig: libc::c_int) {
        // SAFETY: kill(2) with a pid we spawned and have not reaped yet.
        let rc = unsafe { libc::kill(self.pid as libc::pid_t, sig) };
        assert_eq!(rc, 0, "kill({}, {sig}) failed", self.pid);
    }

    /// SIGKILL, sent directly with the `kill` system call.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
    }

    pub fn wait(&mut self) -> Option<std::process::ExitStatus> {
        self.child.wait().ok()
    }

    pub fn cpu(&self) -> Duration {
        cpu_time(self.pid)
    }

    /// Resident memory now (`VmRSS`), in MiB; 0 when unknown.
    pub fn rss_mib(&self) -> f64 {
        super::machine::status_kb(Some(self.pid), "VmRSS:") as f64 / 1024.0
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Spawns `cmd` as a [`Proc`] named `name`.
pub fn spawn_proc(mut cmd: Command, name: &str) -> Proc {
    let child = cmd.spawn().unwrap_or_else(|e| panic!("spawn {name}: {e}"));
    let pid = child.id();
    Proc {
        child,
        pid,
        name: name.to_string(),
    }
}

impl Proc {
    /// The exit status if it has exited, without waiting.
    pub fn try_wait(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().ok().flatten()
    }
}

fn spawn_self(mode: &[&str]) -> (Proc, BufReader<std::process::ChildStdout>) {
    let exe = std::env::current_exe().expect("own executable");
    let mut child = Command::new(exe)
        .env(CHILD_ENV, mode.join(" "))
        .env("RUST_LOG", "error")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn a child of the bench binary");
    let out = BufReader::new(child.stdout.take().unwrap());
    let pid = child.id();
    (
        Proc {
            child,
            pid,
            name: mode.join(" "),
        },
        out,
    )
}

/// A process serving `n` gRPC ping servers on loopback; returns their addresses.
pub fn spawn_servers(n: usize) -> (Proc, Vec<String>) {
    let (proc, mut out) = spawn_self(&["servers", &n.to_string()]);
    let mut addrs = Vec::with_capacity(n);
    let mut line = String::new();
    loop {
        line.clear();
        if out.read_line(&mut line).unwrap() == 0 {
            panic!("ping server child exited early");
        }
        let l = line.trim();
        if l == "READY" {
            break;
        }
        if let Some(port) = l.strip_prefix("PORT ") {
            addrs.push(format!("127.0.0.1:{port}"));
        }
    }
    assert_eq!(addrs.len(), n);
    (proc, addrs)
}

/// Several ping-server processes with `total` servers between them.
pub fn spawn_server_fleet(total: usize, processes: usize) -> (Vec<Proc>, Vec<String>) {
    let per = total.div_ceil(processes.max(1));
    let mut procs = Vec::new();
    let mut addrs = Vec::new();
    let mut left = total;
    while left > 0 {
        let n = per.min(left);
        let (p, a) = spawn_servers(n);
        procs.push(p);
        addrs.extend(a);
        left -= n;
    }
    (procs, addrs)
}

/// A process running one real [`distributor::Member`] (registers itself);
/// returns it with the member id.
pub fn spawn_member(redis_url: &str) -> (Proc, String) {
    let (mut proc, mut out) = spawn_self(&["member", redis_url]);
    let id = member_id(&mut out);
    proc.name = id.clone();
    (proc, id)
}

/// A process running `n` real [`distributor::Member`]s on one runtime (each
/// registers itself); returns it with their ids. Members on other hosts
/// cost the holder's host nothing when a write wakes them; on the bench's
/// two cores a process per member does (see BENCHMARKS.md, "A death while a
/// quarantine tries units").
pub fn spawn_member_host(redis_url: &str, n: usize) -> (Proc, Vec<String>) {
    let (mut proc, mut out) = spawn_self(&["members", redis_url, &n.to_string()]);
    let ids = (0..n).map(|_| member_id(&mut out)).collect();
    proc.name = format!("{n} members");
    (proc, ids)
}

/// The next `ID <member id>` line a member child prints.
fn member_id(out: &mut BufReader<std::process::ChildStdout>) -> String {
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    line.trim()
        .strip_prefix("ID ")
        .unwrap_or_else(|| panic!("member child said {line:?}"))
        .to_string()
}

/// Lease and cycle timing of a `distributor` replica process.
#[derive(Debug, Clone, Copy)]
pub struct Timing {
    pub poll: Duration,
    pub ping_timeout: Duration,
    pub ttl: Duration,
    pub renew_interval: Duration,
    pub renew_deadline: Duration,
    pub retry_interval: Duration,
    pub census: Duration,
}

impl Timing {
    /// The daemon's defaults, with the poll interval and ping timeout given.
    pub fn defaults(poll: Duration, ping_timeout: Duration) -> Timing {
        Timing {
            poll,
            ping_timeout,
            ttl: Duration::from_secs(2),
            renew_interval: Duration::from_millis(500),
            renew_deadline: Duration::from_millis(1500),
            retry_interval: Duration::from_millis(500),
            census: Duration::from_secs(5),
        }
    }
}

fn go_duration(d: Duration) -> String {
    format!("{}ms", d.as_millis())
}

pub fn distributor_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_distributor"))
}

pub fn log_dir() -> PathBuf {
    let dir = std::env::temp_dir().join("distributor-bench");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A `distributor` daemon process with its `/metrics` on a free port.
pub struct Replica {
    pub proc: Proc,
    pub name: String,
    pub http_port: u16,
}

pub fn spawn_replica(redis_url: &str, name: &str, t: &Timing) -> Replica {
    spawn_replica_with(redis_url, name, t, &[])
}

/// [`spawn_replica`] with `extra` flags after the others (e.g. `-http-ui`).
pub fn spawn_replica_with(redis_url: &str, name: &str, t: &Timing, extra: &[&str]) -> Replica {
    spawn_replica_of(&distributor_bin(), redis_url, name, t, extra)
}

/// A reference build of the daemon to measure beside this one in the same
/// run (`BENCH_REFERENCE_BIN`, e.g. built from the commit before a change),
/// where a section supports it.
pub fn reference_bin() -> Option<PathBuf> {
    std::env::var_os("BENCH_REFERENCE_BIN").map(PathBuf::from)
}

/// [`spawn_replica_with`], running the daemon binary `bin`.
pub fn spawn_replica_of(
    bin: &std::path::Path,
    redis_url: &str,
    name: &str,
    t: &Timing,
    extra: &[&str],
) -> Replica {
    let http_port = free_port();
    let log = std::fs::File::create(log_dir().join(format!("{name}.log"))).unwrap();
    let child = Command::new(bin)
        .args([
            format!("-redis-url={redis_url}"),
            format!("-services-namespaces={SERVICES}"),
            format!("-workunits-namespace={UNITS}"),
            format!("-distribution-namespace={TABLE}"),
            format!("-poll-interval={}", go_duration(t.poll)),
            format!("-ping-timeout={}", go_duration(t.ping_timeout)),
            format!("-lease-ttl={}", go_duration(t.ttl)),
            format!("-lease-renew-interval={}", go_duration(t.renew_interval)),
            format!("-lease-renew-deadline={}", go_duration(t.renew_deadline)),
            format!("-lease-retry-interval={}", go_duration(t.retry_interval)),
            format!("-census-interval={}", go_duration(t.census)),
            format!("-replica-id={name}"),
            format!("-http-addr=127.0.0.1:{http_port}"),
        ])
        .args(extra)
        // BENCH_REPLICA_LOG (e.g. `info`) to see a replica's cycles.
        .env(
            "RUST_LOG",
            std::env::var("BENCH_REPLICA_LOG").unwrap_or_else(|_| "warn".into()),
        )
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .expect("spawn the distributor binary");
    let pid = child.id();
    Replica {
        proc: Proc {
            child,
            pid,
            name: name.to_string(),
        },
        name: name.to_string(),
        http_port,
    }
}

/// `distributor_cycle_duration_seconds` (sum, count) of a replica.
pub async fn cycle_histogram(port: u16) -> Option<(f64, f64)> {
    let m = scrape(port).await?;
    Some((
        metric(&m, "distributor_cycle_duration_seconds_sum", &[]).unwrap_or(0.0),
        metric(&m, "distributor_cycle_duration_seconds_count", &[]).unwrap_or(0.0),
    ))
}

/// `distributor_cycles_total{outcome="ok"}` of a replica (0 before its first cycle).
pub async fn cycles_ok(port: u16) -> Option<f64> {
    let m = scrape(port).await?;
    Some(metric(&m, "distributor_cycles_total", &[("outcome", "ok")]).unwrap_or(0.0))
}

// ---------------------------------------------------------------------------
// Child mode: this binary started by itself

pub fn child_main(mode: &str) {
    let args: Vec<&str> = mode.split(' ').collect();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    match args.as_slice() {
        ["servers", n] => rt.block_on(child_servers(n.parse().unwrap())),
        ["member", url] => rt.block_on(child_member(url)),
        ["members", url, n] => rt.block_on(child_members(url, n.parse().unwrap())),
        _ => panic!("unknown child mode {mode:?}"),
    }
}

/// Resolves when the parent closes our stdin (or dies).
async fn stdin_closed() {
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    std::thread::spawn(move || {
        let mut sink = Vec::new();
        let _ = std::io::Read::read_to_end(&mut std::io::stdin(), &mut sink);
        let _ = tx.send(());
    });
    let _ = rx.await;
}

/// `n` ping servers behind one tonic server, built like `Member::start` builds
/// its own: `serve_with_incoming` over tonic's `TcpIncoming` with TCP_NODELAY
/// on accepted connections (without it, the first answer on a new connection
/// waits for a delayed ACK, about 40 ms; see BENCHMARKS.md, "Measurements
/// behind design choices"). If `Member` changes how it accepts connections,
/// do the same here.
async fn child_servers(n: usize) {
    use tonic::transport::server::TcpIncoming;
    let mut streams = Vec::with_capacity(n);
    let mut out = std::io::stdout().lock();
    for _ in 0..n {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        writeln!(out, "PORT {}", l.local_addr().unwrap().port()).unwrap();
        streams.push(TcpIncoming::from(l).with_nodelay(Some(true)));
    }
    writeln!(out, "READY").unwrap();
    out.flush().unwrap();
    drop(out);
    let incoming = futures::stream::select_all(streams);
    let server = tonic::transport::Server::builder()
        .add_service(distributor::edge::grpc::ping_service())
        .add_service(distributor::edge::grpc::beat_service())
        .serve_with_incoming(incoming);
    tokio::select! {
        r = server => r.unwrap(),
        _ = stdin_closed() => {}
    }
}

async fn child_member(url: &str) {
    let member = start_member(url).await;
    println!("ID {}", member.id());
    std::io::stdout().flush().unwrap();
    stdin_closed().await;
    member.shutdown().await;
}

/// `n` members in this process, started one after another.
async fn child_members(url: &str, n: usize) {
    let mut members = Vec::with_capacity(n);
    for _ in 0..n {
        let member = start_member(url).await;
        println!("ID {}", member.id());
        members.push(member);
    }
    std::io::stdout().flush().unwrap();
    stdin_closed().await;
    for member in members {
        member.shutdown().await;
    }
}

async fn start_member(url: &str) -> distributor::Member {
    let mut opts = distributor::MemberOptions {
        redis_url: url.to_string(),
        services_key: SERVICES.into(),
        table_key: TABLE.into(),
        listen: SocketAddr::from(([127, 0, 0, 1], 0)),
        ..distributor::MemberOptions::default()
    };
    opts.reregister_interval = Duration::from_secs(5);
    distributor::Member::start(opts).await.unwrap()
}
