//! Real processes for the seeded chaos tests (`ownership_stress`,
//! `unknown_outcomes_stress`): `distributor` replica processes (the built
//! binary, each on its own Redis URL, a [`FaultProxy`] in front when the test
//! asks), example worker processes (`examples/worker.rs --events`, each
//! reaching Redis through its own [`FreezableProxy`]) and the old-protocol
//! worker, the events they print ([`Journal`]), their logs ([`Logs`]), and
//! [`Chaos`]: a seeded schedule of churn [`Step`]s over them whose end checks
//! every event with the ownership checker (`support::ownership`).
//!
//! Guarantees:
//! - every process dies with its handle (SIGKILL on drop, a stopped one too);
//! - every wait is bounded, and waits for an event (an exit, an event line,
//!   the table), never for time alone; the pauses of a schedule are chaos,
//!   not synchronisation;
//! - a schedule is a function of its seed (`OWNERSHIP_SEED=<n>` replays
//!   it; the processes' timing is not replayed);
//! - the logs are kept, and their tails printed with the seed, when a test
//!   panics (`OWNERSHIP_KEEP_LOGS=1` keeps them after a pass too);
//! - a release printed late because its worker was frozen during its stop is
//!   re-dated to the hold's end only when the member logged it and a freeze
//!   of that member explains it ([`redate`]); any other error a worker logs
//!   fails [`Chaos::finish`].

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::rngs::StdRng;
use rand::seq::{IndexedRandom, SliceRandom};
use rand::{Rng, SeedableRng};
use std::time::Instant;

use super::fault_proxy::FaultProxy;
use super::ownership::{self, Bounds};
use super::{
    Backend, FlakyWorker, Fleet, FreezableProxy, RedisServer, SERVICES, TABLE, UNITS,
    example_worker, free_port, keys, wait_for, wait_until,
};

/// The workers' fencing deadline.
pub const DEADLINE: Duration = Duration::from_millis(2000);
/// The replicas' handoff delay for the old-protocol worker (it reads its row
/// every 100 ms and stops at once: a margin of ten reads).
pub const HANDOFF_DELAY: Duration = Duration::from_millis(1000);
/// Every wait for the fleet to settle (generous: liveness, not speed).
pub const SETTLE: Duration = Duration::from_secs(40);

/// Straight to stderr, past the test harness's capture.
pub fn say(text: &str) {
    let _ = writeln!(std::io::stderr().lock(), "{text}");
}

/// Every ownership event line in arrival order, and who owns what by them.
#[derive(Clone, Default)]
pub struct Journal(Arc<Mutex<JournalState>>);

#[derive(Default)]
struct JournalState {
    lines: Vec<String>,
    /// member → units it holds, by its own events.
    held: HashMap<String, BTreeSet<String>>,
}

impl Journal {
    pub fn push(&self, line: String) {
        let mut s = self.0.lock().unwrap();
        if let Ok(v) = serde_json::from_str::<serde_json::Value>(&line) {
            let text = |k: &str| v.get(k).and_then(|x| x.as_str()).map(str::to_string);
            match (text("event").as_deref(), text("member"), text("unit")) {
                (Some("acquired"), Some(m), Some(u)) => {
                    s.held.entry(m).or_default().insert(u);
                }
                (Some("released"), Some(m), Some(u)) => {
                    s.held.entry(m).or_default().remove(&u);
                }
                (Some("exited"), Some(m), _) => {
                    s.held.remove(&m);
                }
                _ => {}
            }
        }
        s.lines.push(line);
    }

    pub fn lines(&self) -> Vec<String> {
        self.0.lock().unwrap().lines.clone()
    }

    pub fn len(&self) -> usize {
        self.0.lock().unwrap().lines.len()
    }

    /// unit → its owners now, by the events.
    pub fn owners(&self) -> BTreeMap<String, BTreeSet<String>> {
        let s = self.0.lock().unwrap();
        let mut owners: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for (m, units) in &s.held {
            for u in units {
                owners.entry(u.clone()).or_default().insert(m.clone());
            }
        }
        owners
    }

    pub fn holds(&self, member: &str) -> usize {
        self.0
            .lock()
            .unwrap()
            .held
            .get(member)
            .map_or(0, BTreeSet::len)
    }

    pub fn listed(&self, units: &[String]) {
        self.push(ownership::listed_line(units, ownership::unix_us_now()));
    }
}

/// The processes' logs, kept in a directory that is removed only after a
/// pass; on a failure their tails are printed with the seed.
pub struct Logs {
    /// The test's name, first on every line it prints.
    label: &'static str,
    dir: PathBuf,
    seed: u64,
    journal: Journal,
    /// (name, path, the member id of a worker's log)
    files: Mutex<Vec<(String, PathBuf, Option<String>)>>,
}

impl Logs {
    /// A fresh directory named after `label` (`ownership_stress`:
    /// `distributor-ownership-stress-<pid>-<n>` in the temporary directory).
    pub fn new(label: &'static str, seed: u64, journal: Journal) -> Logs {
        let dir = std::env::temp_dir().join(format!(
            "distributor-{}-{}-{}",
            label.replace('_', "-"),
            std::process::id(),
            free_port()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        Logs {
            label,
            dir,
            seed,
            journal,
            files: Mutex::new(Vec::new()),
        }
    }

    pub fn file(&self, name: &str, member: Option<&str>) -> std::fs::File {
        let path = self.dir.join(format!("{name}.log"));
        self.files.lock().unwrap().push((
            name.to_string(),
            path.clone(),
            member.map(str::to_string),
        ));
        std::fs::File::create(path).unwrap()
    }
}

impl Logs {
    /// How many lines of the replicas' logs contain `text`.
    pub fn replica_lines(&self, text: &str) -> usize {
        self.files
            .lock()
            .unwrap()
            .iter()
            .filter(|(name, _, member)| member.is_none() && name.starts_with('r'))
            .map(|(_, path, _)| {
                let log = std::fs::read_to_string(path).unwrap_or_default();
                log.lines().filter(|l| l.contains(text)).count()
            })
            .sum()
    }

    /// Per kind of process (`worker`, `r`eplica), the number of WARN and
    /// ERROR lines in its logs, and the first few ERROR lines.
    pub fn summary(&self) -> (String, Vec<String>) {
        let mut counts: BTreeMap<(&str, &str), usize> = BTreeMap::new();
        let mut errors = Vec::new();
        for (name, path, _) in self.files.lock().unwrap().iter() {
            let kind = if name.starts_with("worker") {
                "workers"
            } else {
                "replicas"
            };
            let text = std::fs::read_to_string(path).unwrap_or_default();
            for line in text.lines() {
                for level in ["WARN", "ERROR"] {
                    if line.contains(&format!(" {level} ")) {
                        *counts.entry((kind, level)).or_default() += 1;
                        if level == "ERROR" && errors.len() < 5 {
                            errors.push(format!("{name}: {line}"));
                        }
                    }
                }
            }
        }
        let counts = counts
            .iter()
            .map(|((kind, level), n)| format!("{kind} {level} {n}"))
            .collect::<Vec<_>>()
            .join(", ");
        (counts, errors)
    }
}

/// What a member logs when an application's revocation returned after the
/// unit's hold had ended: the example worker's simulated stop (`--work-ms`)
/// was running when the process was frozen past its deadline.
pub const OVERRAN: &str = "a revocation finished after the unit's hold had ended";
/// Its companion, logged while such a revocation still runs.
pub const STILL_RUNNING: &str = "a revocation is still running after the hold ended";

/// One [`OVERRAN`] line: the hold of `unit` (tenure `token`) ended at
/// `hold_end_us` at the latest (the line's time minus how late it was).
#[derive(Debug)]
pub struct Overran {
    pub member: String,
    pub unit: String,
    pub token: u64,
    pub hold_end_us: u64,
    pub line: String,
}

impl Logs {
    /// Every [`OVERRAN`] line of the workers' logs.
    pub fn overran(&self) -> Vec<Overran> {
        let mut out = Vec::new();
        for (_, path, member) in self.files.lock().unwrap().iter() {
            let Some(member) = member else { continue };
            let text = std::fs::read_to_string(path).unwrap_or_default();
            for line in text.lines().filter(|l| l.contains(OVERRAN)) {
                let parsed = (|| {
                    let at = log_time_us(line.split_whitespace().next()?)?;
                    let late = duration_us(field(line, "late")?)?;
                    Some(Overran {
                        member: member.clone(),
                        unit: field(line, "unit")?.to_string(),
                        token: field(line, "token")?.parse().ok()?,
                        hold_end_us: at.checked_sub(late)?,
                        line: line.to_string(),
                    })
                })();
                out.push(parsed.unwrap_or_else(|| panic!("unparsed: {line}")));
            }
        }
        out
    }

    /// ERROR lines of the workers' logs other than [`OVERRAN`] and
    /// [`STILL_RUNNING`].
    pub fn other_worker_errors(&self) -> Vec<String> {
        let mut out = Vec::new();
        for (name, path, member) in self.files.lock().unwrap().iter() {
            if member.is_none() {
                continue;
            }
            let text = std::fs::read_to_string(path).unwrap_or_default();
            out.extend(
                text.lines()
                    .filter(|l| l.contains(" ERROR "))
                    .filter(|l| !l.contains(OVERRAN) && !l.contains(STILL_RUNNING))
                    .map(|l| format!("{name}: {l}")),
            );
        }
        out
    }
}

/// The value of `name=` in a log line (up to the next space).
pub fn field<'a>(line: &'a str, name: &str) -> Option<&'a str> {
    let at = line.find(&format!(" {name}="))? + name.len() + 2;
    line[at..].split_whitespace().next()
}

/// `2026-01-02T03:04:05.123456Z` in µs since the Unix epoch.
pub fn log_time_us(ts: &str) -> Option<u64> {
    let (date, time) = ts.strip_suffix('Z')?.split_once('T')?;
    let d: Vec<i64> = date
        .split('-')
        .map(|x| x.parse().ok())
        .collect::<Option<_>>()?;
    let (hms, frac) = time.split_once('.').unwrap_or((time, ""));
    let t: Vec<i64> = hms
        .split(':')
        .map(|x| x.parse().ok())
        .collect::<Option<_>>()?;
    let (&[y, m, day], &[h, min, sec]) = (&d[..], &t[..]) else {
        return None;
    };
    // Days from the civil date (H. Hinnant's algorithm).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * ((m + 9) % 12) + 2) / 5 + day - 1;
    let days = era * 146_097 + yoe * 365 + yoe / 4 - yoe / 100 + doy - 719_468;
    let micros: i64 = format!("{frac:0<6}")[..6].parse().ok()?;
    u64::try_from(((days * 24 + h) * 60 + min) * 60 + sec)
        .ok()
        .map(|s| s * 1_000_000 + micros as u64)
}

/// A `Duration`'s `Debug` form (`1.5s`, `250ms`, `12µs`, `7ns`) in µs.
pub fn duration_us(text: &str) -> Option<u64> {
    let (number, scale) = [("ns", 1e-3), ("µs", 1.0), ("ms", 1e3), ("s", 1e6)]
        .iter()
        .find_map(|(suffix, scale)| text.strip_suffix(suffix).map(|n| (n, *scale)))?;
    Some((number.parse::<f64>().ok()? * scale).round() as u64)
}

/// The example worker dates a release at the end of its simulated stop. When
/// the process was frozen during that stop past the unit's hold, the stop
/// ends after the thaw, although the worker's authority over the unit ended
/// with its hold (the README's rule for a process that may pause: check the
/// hold before every side effect). Each such release, as its member logged
/// it ([`OVERRAN`]), is dated back to the hold's end (a bound from above),
/// only when a freeze of that member explains it: the hold ended while it
/// was stopped, and the release came after the SIGSTOP. Returns the lines
/// and how many were re-dated, or what could not be explained.
pub fn redate(
    lines: &[String],
    overran: &[Overran],
    freezes: &[(String, u64, u64)],
) -> Result<(Vec<String>, usize), Vec<String>> {
    let mut out = lines.to_vec();
    let mut unexplained = Vec::new();
    let mut redated = 0;
    let events: Vec<Option<serde_json::Value>> =
        lines.iter().map(|l| serde_json::from_str(l).ok()).collect();
    for o in overran {
        let release = events
            .iter()
            .enumerate()
            .filter_map(|(n, v)| Some((n, v.as_ref()?)))
            .filter(|(_, v)| {
                v["event"] == "released"
                    && v["reason"] != "fenced"
                    && v["member"] == o.member.as_str()
                    && v["unit"] == o.unit.as_str()
                    && v["generation"] == o.token
            })
            .filter_map(|(n, v)| Some((n, v["unix_us"].as_u64()?)))
            .filter(|(_, at)| *at <= o.hold_end_us + 10_000_000)
            .max_by_key(|(_, at)| *at);
        let Some((n, at)) = release else {
            unexplained.push(format!("no release line for: {}", o.line));
            continue;
        };
        let frozen = freezes.iter().any(|(m, stop, cont)| {
            *m == o.member
                && *stop <= o.hold_end_us + 100_000
                && o.hold_end_us <= cont + 200_000
                && at >= *stop
        });
        if !frozen {
            unexplained.push(format!("no freeze explains: {}", o.line));
            continue;
        }
        if o.hold_end_us < at {
            let mut v = events[n].clone().unwrap();
            v["unix_us"] = o.hold_end_us.into();
            v["redated_from"] = at.into();
            out[n] = v.to_string();
            redated += 1;
        }
    }
    if unexplained.is_empty() {
        Ok((out, redated))
    } else {
        Err(unexplained)
    }
}

impl Drop for Logs {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            if std::env::var_os("OWNERSHIP_KEEP_LOGS").is_some() {
                say(&format!(
                    "{}: logs kept in {}",
                    self.label,
                    self.dir.display()
                ));
            } else {
                let _ = std::fs::remove_dir_all(&self.dir);
            }
            return;
        }
        for (name, path, _) in self.files.lock().unwrap().iter() {
            let text = std::fs::read_to_string(path).unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            say(&format!(
                "--- {name} (last 40 of {} lines) ---",
                lines.len()
            ));
            for l in &lines[lines.len().saturating_sub(40)..] {
                say(l);
            }
        }
        let lines = self.journal.lines();
        say(&format!("--- events (last 100 of {}) ---", lines.len()));
        for l in &lines[lines.len().saturating_sub(100)..] {
            say(l);
        }
        say(&format!(
            "{}: FAILED with seed {} (replay: OWNERSHIP_SEED={}); logs kept in {}",
            self.label,
            self.seed,
            self.seed,
            self.dir.display()
        ));
    }
}

pub fn signal(pid: u32, sig: &str) {
    let ok = Command::new("kill")
        .args([&format!("-{sig}"), &pid.to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok, "kill -{sig} {pid}");
}

/// Waits (bounded) for `child` to exit, without blocking the runtime.
pub async fn reaped(child: &mut Child, what: &str, limit: Duration) -> ExitStatus {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(s) = child.try_wait().unwrap() {
            return s;
        }
        assert!(
            Instant::now() < deadline,
            "{what} did not exit within {limit:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// One `distributor` process; SIGKILLed on drop, and its proxy (if any)
/// closed after it.
pub struct Replica {
    pub id: String,
    pub child: Child,
    /// The proxy it reaches Redis through, when it has one of its own.
    pub proxy: Option<FaultProxy>,
    /// When it was spawned (unix µs).
    pub since_us: u64,
}

impl Replica {
    /// Runs the binary on `redis_url` (Redis itself, or a proxy in front of
    /// it) with the kit's keys and the schedules' timing (1 s lease renewed
    /// every 200 ms, deadline 700 ms: a Redis call deadline of 500 ms), and
    /// `extra` flags after them. Its output goes to its log in `logs`.
    pub fn spawn(redis_url: &str, id: String, logs: &Logs, extra: &[String]) -> Replica {
        let log = logs.file(&id, None);
        let since_us = ownership::unix_us_now();
        let child = Command::new(env!("CARGO_BIN_EXE_distributor"))
            .arg(format!("-redis-url={redis_url}"))
            .arg(format!("-services-namespaces={SERVICES}"))
            .arg(format!("-workunits-namespace={UNITS}"))
            .arg(format!("-distribution-namespace={TABLE}"))
            .args([
                "-poll-interval=250ms",
                "-ping-timeout=250ms",
                "-lease-ttl=1s",
                "-lease-renew-interval=200ms",
                "-lease-renew-deadline=700ms",
                "-lease-retry-interval=300ms",
                "-census-interval=500ms",
                "-http-addr=off",
                "-traces=none",
                // The schedules kill, freeze and cut workers every few
                // hundred ms, far faster than a fleet fails: at that pace
                // the quarantine's evidence convicts healthy units (the
                // simulation measures the rate), and these schedules check
                // that every listed unit is owned. The quarantine has its
                // own test (tests/integration/quarantine.rs) and runs in
                // every simulated seed.
                "-quarantine-after=0",
            ])
            .arg(format!("-handoff-delay={}ms", HANDOFF_DELAY.as_millis()))
            .arg(format!("-replica-id={id}"))
            .args(extra)
            .env_remove("HTTP_ADDR")
            .env_remove("PROM_PORT")
            .env_remove("LOG")
            .env("RUST_LOG", "info")
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap();
        Replica {
            id,
            child,
            proxy: None,
            since_us,
        }
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A worker process whose stdout lines (its `--events`) go to a sink, each
/// as it is printed; it counts as exited only once its last line is read.
/// SIGKILLed on drop (a stopped one too).
pub struct EventsChild {
    child: Child,
    stdout: Option<std::thread::JoinHandle<()>>,
}

impl EventsChild {
    /// Takes `child`'s piped stdout.
    pub fn new(mut child: Child, sink: impl Fn(String) + Send + 'static) -> EventsChild {
        let out = BufReader::new(child.stdout.take().expect("a piped stdout"));
        let stdout = std::thread::spawn(move || {
            for line in out.lines().map_while(Result::ok) {
                sink(line);
            }
        });
        EventsChild {
            child,
            stdout: Some(stdout),
        }
    }

    pub fn signal(&self, sig: &str) {
        signal(self.child.id(), sig);
    }

    /// Its state letter in /proc (`T` when stopped).
    pub fn state(&self) -> char {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.child.id())).unwrap();
        let after = stat.rsplit_once(") ").expect("a stat line").1;
        after.chars().next().unwrap()
    }

    pub async fn stopped(&self) {
        wait_for("the worker to stop", Duration::from_secs(5), || async {
            self.state() == 'T'
        })
        .await;
    }

    /// Waits (bounded) for the process to exit and its last line to be read.
    pub async fn exited(&mut self, what: &str, limit: Duration) -> ExitStatus {
        let status = reaped(&mut self.child, what, limit).await;
        let reader = self.stdout.take().unwrap();
        wait_for("its stdout to close", Duration::from_secs(5), || async {
            reader.is_finished()
        })
        .await;
        status
    }

    /// SIGKILL, then waits for its exit; the `exited` marker of member `id`
    /// closes what it held at the instant the signal was sent. Not later:
    /// its connections close as it dies, and the holder moves its units
    /// within milliseconds of that (it pings a member at once when its
    /// connection ends), well before the process is reaped and its output
    /// read here.
    pub async fn kill(&mut self, id: &str) -> String {
        self.child.kill().unwrap();
        let died = ownership::unix_us_now();
        self.exited(id, Duration::from_secs(5)).await;
        ownership::exited_line(id, died)
    }
}

impl Drop for EventsChild {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One example worker process with `--events`, its Redis traffic through its
/// own proxy.
pub struct Worker {
    pub id: String,
    pub port: u16,
    pub proxy: FreezableProxy,
    process: EventsChild,
}

impl Worker {
    pub async fn spawn(
        redis: &RedisServer,
        port: u16,
        work_ms: u64,
        journal: &Journal,
        logs: &Logs,
        n: usize,
    ) -> Worker {
        let proxy = FreezableProxy::start(redis.port()).await;
        let id = format!("127.0.0.1:{port}");
        let log = logs.file(&format!("worker-{n}-{port}"), Some(&id));
        let child = Command::new(example_worker())
            .args(["--events", "--listen", &id])
            .args(["--redis-url", &format!("redis://127.0.0.1:{}", proxy.port)])
            .args(["--services-key", SERVICES, "--table", TABLE])
            .args(["--deadline", &format!("{}ms", DEADLINE.as_millis())])
            .args(["--poll-interval", "200ms", "--drain-timeout", "15s"])
            .args(["--work-ms", &work_ms.to_string()])
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(log)
            .spawn()
            .unwrap();
        let events = journal.clone();
        Worker {
            id,
            port,
            proxy,
            process: EventsChild::new(child, move |line| events.push(line)),
        }
    }

    pub fn signal(&self, sig: &str) {
        self.process.signal(sig);
    }

    pub fn state(&self) -> char {
        self.process.state()
    }

    pub async fn stopped(&self) {
        self.process.stopped().await;
    }

    pub async fn exited(&mut self, limit: Duration) -> ExitStatus {
        self.process.exited(&self.id, limit).await
    }

    /// SIGKILL; see [`EventsChild::kill`].
    pub async fn kill(&mut self, journal: &Journal) {
        journal.push(self.process.kill(&self.id).await);
    }
}

/// The lease holder's replica id and the epoch, while a lease is held.
pub async fn holder(redis: &RedisServer) -> Option<(String, u64)> {
    let (h, epoch, pttl): (Option<String>, Option<u64>, i64) = redis
        .multi(&[
            &["HGET", &keys().meta, "holder"],
            &["GET", &keys().epoch],
            &["PTTL", &keys().lease],
        ])
        .await;
    h.filter(|h| !h.is_empty() && pttl > 0)
        .map(|h| (h, epoch.unwrap_or(0)))
}

pub async fn in_transit(redis: &RedisServer) -> usize {
    redis.cmd(&["HLEN", &keys().transit]).await
}

pub fn stats(label: &str, values: &mut [Duration]) -> String {
    if values.is_empty() {
        return format!("{label}: none");
    }
    values.sort();
    format!(
        "{label}: n {} min {:?} median {:?} max {:?}",
        values.len(),
        values[0],
        values[values.len() / 2],
        values[values.len() - 1]
    )
}

/// The scenarios of a schedule (see [`Chaos::step`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Step {
    Join,
    Drain,
    Kill,
    KillAndRestart,
    Units,
    HolderKillMidHandoff,
    HolderTerm,
    Freeze,
    Cut,
}

/// How a test sizes its schedule.
pub struct Shape {
    /// The test's name, first on every line it prints.
    pub label: &'static str,
    /// Work unit names to draw from, how many are listed at the start, and
    /// how many units changes keep listed at least.
    pub pool: usize,
    pub listed: usize,
    pub min_listed: usize,
    pub replicas: usize,
    /// Workers at the start; the schedule keeps between `min_workers` and
    /// `max_workers` running.
    pub workers: usize,
    pub min_workers: usize,
    pub max_workers: usize,
    /// The checker's bound: a listed unit is owned again within this long.
    pub reown: Duration,
    /// Flags every replica gets after the kit's.
    pub replica_flags: Vec<String>,
    /// Each replica reaches Redis through a [`FaultProxy`] of its own
    /// ([`Replica::proxy`]); a replica that replaces a dead one gets a new one.
    pub proxied: bool,
}

impl Shape {
    /// 3 replicas on Redis itself with the kit's flags; 6 workers, kept
    /// between 4 and 8; 480 of 640 units listed, at least 300.
    pub fn new(label: &'static str, reown: Duration) -> Shape {
        Shape {
            label,
            pool: 640,
            listed: 480,
            min_listed: 300,
            replicas: 3,
            workers: 6,
            min_workers: 4,
            max_workers: 8,
            reown,
            replica_flags: Vec::new(),
            proxied: false,
        }
    }
}

/// The seed of a schedule: `OWNERSHIP_SEED`, or a fresh random one; printed
/// with how to replay it.
pub fn seed(label: &str) -> u64 {
    let seed: u64 = match std::env::var("OWNERSHIP_SEED") {
        Ok(s) => s
            .parse()
            .unwrap_or_else(|_| panic!("OWNERSHIP_SEED={s:?} is not a number")),
        Err(_) => rand::rng().random_range(0..1_000_000),
    };
    say(&format!(
        "{label}: seed {seed} (replay: OWNERSHIP_SEED={seed})"
    ));
    seed
}

/// What a test does around each step of [`Chaos::run`] (nothing, for `()`).
pub trait Hooks {
    /// Before the step, once the fleet's size adjusted it.
    fn before(&mut self, chaos: &mut Chaos, step: Step) -> impl Future<Output = ()> {
        let _ = (chaos, step);
        async {}
    }

    /// After the step and its settle or pause: a note for the step's line.
    fn after(&mut self, chaos: &mut Chaos, step: Step) -> impl Future<Output = String> {
        let _ = (chaos, step);
        async { String::new() }
    }
}

impl Hooks for () {}

/// Everything a schedule acts on: one real Redis (`fleet.redis`), replica
/// and worker processes, the old-protocol worker, the units listed, the
/// events, and what the steps measured.
pub struct Chaos {
    pub shape: Shape,
    pub seed: u64,
    /// When the fleet started: [`Chaos::run`]'s budget counts from here.
    pub started: Instant,
    pub rng: StdRng,
    pub fleet: Fleet,
    pub journal: Journal,
    pub logs: Logs,
    pub replicas: Vec<Replica>,
    pub workers: Vec<Worker>,
    pub old_id: String,
    /// The old-protocol worker (it answers pings until the schedule is
    /// dropped) and the task that reads its row.
    old: FlakyWorker,
    old_reader: tokio::task::JoinHandle<()>,
    pub pool: Vec<String>,
    pub units: Vec<String>,
    spawned_workers: usize,
    spawned_replicas: usize,
    pub settles: Vec<Duration>,
    /// How long each takeover after a holder's SIGKILL mid-handoff took, and
    /// how many units in transit the next holder inherited.
    pub takeovers: Vec<Duration>,
    pub inherited: Vec<usize>,
    /// Steps run, by kind.
    pub done: BTreeMap<Step, usize>,
    frozen_since: Option<u64>,
    /// Every freeze: (member, SIGSTOP sent, SIGCONT sent), unix µs.
    pub freezes: Vec<(String, u64, u64)>,
}

impl Chaos {
    /// `shape.replicas` replica processes and `shape.workers` example
    /// workers on `redis`, with the old-protocol worker, over
    /// `shape.listed` units; returned once the fleet settled, with the
    /// units' listing in the journal.
    pub async fn start(shape: Shape, seed: u64, redis: RedisServer) -> Chaos {
        let started = Instant::now();
        let journal = Journal::default();
        let logs = Logs::new(shape.label, seed, journal.clone());
        example_worker();
        let fleet = Fleet::new(redis);
        let pool: Vec<String> = (0..shape.pool).map(|i| format!("unit-{i:04}")).collect();
        let units = pool[..shape.listed].to_vec();
        fleet.set_units(&units).await;
        let (old, old_reader) = {
            let journal = journal.clone();
            FlakyWorker::old_protocol(&fleet, move |line| journal.push(line)).await
        };
        let mut s = Chaos {
            shape,
            seed,
            started,
            rng: StdRng::seed_from_u64(seed),
            fleet,
            journal: journal.clone(),
            logs,
            replicas: Vec::new(),
            workers: Vec::new(),
            old_id: old.addr.clone(),
            old,
            old_reader,
            pool,
            units,
            spawned_workers: 0,
            spawned_replicas: 0,
            settles: Vec::new(),
            takeovers: Vec::new(),
            inherited: Vec::new(),
            done: BTreeMap::new(),
            frozen_since: None,
            freezes: Vec::new(),
        };
        for _ in 0..s.shape.replicas {
            s.add_replica().await;
        }
        for _ in 0..s.shape.workers {
            s.add_worker(None).await;
        }
        s.settle().await;
        journal.listed(&s.units);
        s.say(&format!(
            "{} replicas, {} workers and an old-protocol one settled on {} units in {:?}",
            s.shape.replicas,
            s.shape.workers,
            s.units.len(),
            started.elapsed()
        ));
        s
    }

    /// A line prefixed with the test's name.
    pub fn say(&self, text: &str) {
        say(&format!("{}: {text}", self.shape.label));
    }

    /// The steps of `plan` (each as many times as it says), shuffled, each
    /// run with [`Chaos::run_one`]; no step starts once `budget` passed
    /// since the start.
    pub async fn run(&mut self, plan: &[(Step, usize)], budget: Duration, hooks: &mut impl Hooks) {
        let mut steps: Vec<Step> = plan
            .iter()
            .flat_map(|(step, n)| std::iter::repeat_n(*step, *n))
            .collect();
        steps.shuffle(&mut self.rng);
        for (n, planned) in steps.into_iter().enumerate() {
            if self.started.elapsed() > budget {
                self.say(&format!(
                    "budget of {budget:?} spent; stopping after {n} steps"
                ));
                break;
            }
            self.run_one(n, planned, hooks).await;
        }
    }

    /// One step (a drain or a kill becomes a join at the fewest workers, a
    /// join a kill at the most), between `hooks`; then either waits until
    /// the fleet settled or goes on after a short random pause, so that
    /// steps also land on handoffs in flight. Prints what it did.
    pub async fn run_one(&mut self, n: usize, planned: Step, hooks: &mut impl Hooks) {
        let step = match planned {
            Step::Drain | Step::Kill if self.workers.len() <= self.shape.min_workers => Step::Join,
            Step::Join if self.workers.len() >= self.shape.max_workers => Step::Kill,
            other => other,
        };
        let t = Instant::now();
        let events = self.journal.len();
        hooks.before(self, step).await;
        let what = self.step(step).await;
        *self.done.entry(step).or_default() += 1;
        let settle = self.rng.random_bool(0.5);
        if settle {
            self.settle().await;
        } else {
            // Part of the chaos: the next step lands on whatever is in flight.
            let pause = Duration::from_millis(self.rng.random_range(0..400));
            tokio::time::sleep(pause).await;
        }
        let note = hooks.after(self, step).await;
        self.say(&format!(
            "step {n:2} {step:?}: {what}; {} ({} events, {:?}){note}",
            if settle { "settled" } else { "not waited for" },
            self.journal.len() - events,
            t.elapsed()
        ));
    }

    /// The end of a schedule: waits until the fleet settled, then checks
    /// every event (re-dating only what [`redate`] explains) and asserts
    /// that no unit had two owners, that every listed unit has exactly one
    /// owner at the end and none other is owned, that a holder was SIGKILLed
    /// with units in transit if `plan` asked for that, that every step of
    /// `plan` ran, and that at least 1,000 ownership changes were checked.
    /// Prints the figures; returns the checker's report.
    pub async fn finish(&mut self, plan: &[(Step, usize)]) -> ownership::Report {
        self.settle().await;
        self.journal
            .push(ownership::end_line(ownership::unix_us_now()));
        let other_errors = self.logs.other_worker_errors();
        assert!(
            other_errors.is_empty(),
            "workers logged errors:\n{}",
            other_errors.join("\n")
        );
        let overran = self.logs.overran();
        let (lines, redated) = redate(&self.journal.lines(), &overran, &self.freezes)
            .unwrap_or_else(|e| panic!("revocations that overran their hold:\n{}", e.join("\n")));
        let bounds = Bounds {
            reown: self.shape.reown,
        };
        let report = ownership::check(&lines, &bounds);
        let raw = ownership::check(&self.journal.lines(), &bounds);
        let wall = self.started.elapsed();
        let seed = self.seed;
        self.say(&report.summary());
        self.say(&format!(
            "seed {seed}: {} ownership changes (units moving between members) in {} events, wall {wall:?}; steps {:?}",
            report.handoffs,
            self.journal.len(),
            self.done
        ));
        let settles = stats("settled after", &mut self.settles);
        let takeovers = stats("takeover after a SIGKILL mid-handoff", &mut self.takeovers);
        self.say(&format!(
            "{settles}; {takeovers}; units in transit inherited by the next holder {:?}",
            self.inherited
        ));
        let old_moves = report
            .intervals
            .iter()
            .filter(|i| i.member == self.old_id)
            .count();
        let (log_counts, errors) = self.logs.summary();
        self.say(&format!(
            "the old-protocol worker held {old_moves} intervals; {redated} releases re-dated to their hold's end (frozen during the stop; {} violations without that); log lines: {log_counts}",
            raw.violations.len()
        ));
        for e in &errors {
            self.say(&format!("logged: {e}"));
        }
        assert!(
            report.violations.is_empty(),
            "seed {seed}: {} ownership violations:\n{}",
            report.violations.len(),
            report.violations.join("\n")
        );
        // Every listed unit is owned at the end, by exactly one member.
        let mut open: BTreeMap<&str, usize> = BTreeMap::new();
        for i in report.intervals.iter().filter(|i| i.to_us.is_none()) {
            *open.entry(i.unit.as_str()).or_default() += 1;
        }
        for u in &self.units {
            assert_eq!(
                open.get(u.as_str()),
                Some(&1),
                "{u} is not owned by exactly one member at the end"
            );
        }
        assert_eq!(open.len(), self.units.len(), "unlisted units still owned");
        if plan.iter().any(|(s, _)| *s == Step::HolderKillMidHandoff) {
            assert!(
                self.inherited.iter().any(|&n| n > 0),
                "no holder was SIGKILLed with units in transit: {:?}",
                self.inherited
            );
        }
        for (step, _) in plan {
            assert!(
                self.done.contains_key(step),
                "the schedule never ran {step:?}: {:?}",
                self.done
            );
        }
        assert!(
            report.handoffs >= 1000,
            "too few ownership changes to prove anything: {}",
            report.summary()
        );
        self.old_reader.abort();
        report
    }

    /// A new replica process (`r<n>`), through a [`FaultProxy`] of its own
    /// when the shape says so.
    pub async fn add_replica(&mut self) {
        let id = format!("r{}", self.spawned_replicas);
        self.spawned_replicas += 1;
        let proxy = if self.shape.proxied {
            Some(FaultProxy::start(self.fleet.redis.port()).await)
        } else {
            None
        };
        let url = proxy
            .as_ref()
            .map_or_else(|| self.fleet.redis.url(), FaultProxy::url);
        let mut r = Replica::spawn(&url, id, &self.logs, &self.shape.replica_flags);
        r.proxy = proxy;
        self.replicas.push(r);
    }

    pub async fn add_worker(&mut self, port: Option<u16>) {
        let port = port.unwrap_or_else(free_port);
        let work_ms = *[0, 20, 50, 100].choose(&mut self.rng).unwrap();
        let n = self.spawned_workers;
        self.spawned_workers += 1;
        let w = Worker::spawn(
            &self.fleet.redis,
            port,
            work_ms,
            &self.journal,
            &self.logs,
            n,
        )
        .await;
        self.workers.push(w);
    }

    pub fn live(&self) -> Vec<String> {
        let mut live: Vec<String> = self.workers.iter().map(|w| w.id.clone()).collect();
        live.push(self.old_id.clone());
        live
    }

    /// Waits until the table is the solver's for the running workers and the
    /// listed units, and every unit is owned, by the events, by exactly its
    /// row's member.
    pub async fn settle(&mut self) {
        let started = Instant::now();
        let table = self
            .fleet
            .wait_for_table_with(&self.units, &self.live(), SETTLE)
            .await;
        let mut want: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for (member, row) in table.rows() {
            for u in row.split(',').filter(|u| !u.is_empty()) {
                want.entry(u.to_string())
                    .or_default()
                    .insert(member.clone());
            }
        }
        let deadline = Instant::now() + SETTLE;
        loop {
            let owners = self.journal.owners();
            if owners == want {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "ownership by the events did not match the table within {SETTLE:?}\ntable  {want:?}\nevents {owners:?}"
            );
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        self.settles.push(started.elapsed());
    }

    /// SIGSTOP, recording when.
    pub async fn freeze(&mut self, i: usize) {
        let at = ownership::unix_us_now();
        self.workers[i].signal("STOP");
        self.workers[i].stopped().await;
        self.frozen_since = Some(at);
    }

    /// SIGCONT, recording the freeze.
    pub fn thaw(&mut self, i: usize) {
        self.workers[i].signal("CONT");
        let since = self.frozen_since.take().expect("frozen");
        self.freezes
            .push((self.workers[i].id.clone(), since, ownership::unix_us_now()));
    }

    pub fn pick_worker(&mut self) -> usize {
        self.rng.random_range(0..self.workers.len())
    }

    /// A worker that holds units by its events (any, if none does): a freeze
    /// or a cut of one that holds nothing would prove little.
    pub fn pick_holding_worker(&mut self) -> usize {
        let holding: Vec<usize> = (0..self.workers.len())
            .filter(|&i| self.journal.holds(&self.workers[i].id) > 0)
            .collect();
        match holding.choose(&mut self.rng) {
            Some(&i) => i,
            None => self.pick_worker(),
        }
    }

    /// Removes and adds a few units in one atomic rewrite of the list.
    pub async fn change_units(&mut self) -> String {
        let remove = self
            .rng
            .random_range(0..=60)
            .min(self.units.len() - self.shape.min_listed);
        let unlisted: Vec<String> = self
            .pool
            .iter()
            .filter(|u| !self.units.contains(u))
            .cloned()
            .collect();
        let add = self.rng.random_range(0..=60).min(unlisted.len());
        self.units.shuffle(&mut self.rng);
        self.units.truncate(self.units.len() - remove);
        self.units
            .extend(unlisted.choose_multiple(&mut self.rng, add).cloned());
        self.units.sort();
        self.fleet.set_units(&self.units).await;
        self.journal.listed(&self.units);
        format!("-{remove} +{add} units, {} listed", self.units.len())
    }

    /// The current holder's index in `replicas`, once one holds the lease.
    pub async fn wait_holder(&self) -> (usize, String, u64) {
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            if let Some((id, epoch)) = holder(&self.fleet.redis).await
                && let Some(i) = self.replicas.iter().position(|r| r.id == id)
            {
                return (i, id, epoch);
            }
            assert!(Instant::now() < deadline, "no holder within 15s");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Waits until a replica other than `old` holds a lease above `epoch`.
    pub async fn takeover(&self, old: &str, epoch: u64) -> Duration {
        let started = Instant::now();
        wait_for("a new holder", Duration::from_secs(15), || async {
            holder(&self.fleet.redis)
                .await
                .is_some_and(|(h, e)| h != old && e > epoch)
        })
        .await;
        started.elapsed()
    }

    /// Runs one scenario with random parameters; returns what it did.
    ///
    /// - **Join**: a new worker process;
    /// - **Drain**: SIGTERM a worker; it must exit 0, off the list, holding
    ///   nothing;
    /// - **Kill**, **KillAndRestart**: SIGKILL a worker (then a new process
    ///   on the same address);
    /// - **Units**: add and remove units in one atomic rewrite of the list;
    /// - **HolderKillMidHandoff**: make units move (a join, a units change,
    ///   or a worker frozen so that its units wait for its deadline), wait
    ///   until `{T}:transit` is non-empty, SIGKILL the holder; another
    ///   replica must take over (a fresh replica process replaces the dead
    ///   one);
    /// - **HolderTerm**: a graceful handover;
    /// - **Freeze**: SIGSTOP a worker for half its deadline up to well past
    ///   it (every other freeze past it), then SIGCONT (sometimes the units
    ///   change meanwhile);
    /// - **Cut**: cut a worker's Redis connections while the holder still
    ///   pings it, then heal (the first cut outlasts the deadline: the
    ///   worker must fence itself on time).
    pub async fn step(&mut self, step: Step) -> String {
        match step {
            Step::Join => {
                self.add_worker(None).await;
                format!("{} joined", self.workers.last().unwrap().id)
            }
            Step::Drain => {
                let i = self.pick_worker();
                let mut w = self.workers.remove(i);
                let started = Instant::now();
                w.signal("TERM");
                let status = w.exited(Duration::from_secs(25)).await;
                assert!(status.success(), "{} after SIGTERM: {status:?}", w.id);
                let listed: Vec<String> =
                    self.fleet.redis.cmd(&["LRANGE", SERVICES, "0", "-1"]).await;
                assert!(!listed.contains(&w.id), "{} still listed", w.id);
                assert_eq!(
                    self.journal.holds(&w.id),
                    0,
                    "{} exited holding units",
                    w.id
                );
                format!("{} drained and exited 0 in {:?}", w.id, started.elapsed())
            }
            Step::Kill | Step::KillAndRestart => {
                let i = self.pick_worker();
                let mut w = self.workers.remove(i);
                let held = self.journal.holds(&w.id);
                w.kill(&self.journal).await;
                let (id, port) = (w.id.clone(), w.port);
                drop(w);
                if step == Step::KillAndRestart {
                    self.add_worker(Some(port)).await;
                    format!("{id} SIGKILLed holding {held} units, restarted on the same address")
                } else {
                    format!("{id} SIGKILLed holding {held} units")
                }
            }
            Step::Units => self.change_units().await,
            Step::HolderKillMidHandoff => {
                self.wait_holder().await;
                // Make units move, so that the holder has handoffs in flight:
                // moves away from the old-protocol worker wait the handoff
                // delay, and a frozen worker's units its deadline. A trigger
                // that moved nothing slow is followed by another.
                let mut frozen = None;
                let mut triggers = Vec::new();
                let mut trigger = self.rng.random_range(0..3);
                loop {
                    let what = match trigger {
                        0 if self.workers.len() < self.shape.max_workers => {
                            self.add_worker(None).await;
                            format!("{} joined", self.workers.last().unwrap().id)
                        }
                        1 if frozen.is_none() => {
                            // One that holds units, so that some must wait.
                            let i = self.pick_holding_worker();
                            self.freeze(i).await;
                            frozen = Some((i, Instant::now()));
                            format!("{} frozen", self.workers[i].id)
                        }
                        _ => self.change_units().await,
                    };
                    triggers.push(what);
                    let moving =
                        wait_until(Duration::from_secs(4), Duration::from_millis(5), || async {
                            in_transit(&self.fleet.redis).await > 0
                        })
                        .await;
                    if moving {
                        break;
                    }
                    assert!(
                        triggers.len() < 3,
                        "no unit went in transit after: {triggers:?}"
                    );
                    trigger = if frozen.is_none() { 1 } else { 2 };
                }
                let (i, id, epoch) = self.wait_holder().await;
                let mut r = self.replicas.remove(i);
                r.child.kill().unwrap();
                reaped(&mut r.child, &id, Duration::from_secs(5)).await;
                // Nobody writes until the next holder: this is what it inherits.
                let inherited = in_transit(&self.fleet.redis).await;
                let took = self.takeover(&id, epoch).await;
                self.inherited.push(inherited);
                self.takeovers.push(took);
                self.add_replica().await;
                if let Some((i, since)) = frozen {
                    let pause = DEADLINE + Duration::from_millis(self.rng.random_range(200..1500));
                    tokio::time::sleep_until((since + pause).into()).await;
                    self.thaw(i);
                }
                format!(
                    "{}; holder {id} SIGKILLed with {inherited} units in transit, taken over in {took:?}",
                    triggers.join(", then ")
                )
            }
            Step::HolderTerm => {
                let (i, id, epoch) = self.wait_holder().await;
                let mut r = self.replicas.remove(i);
                signal(r.child.id(), "TERM");
                let status = reaped(&mut r.child, &id, Duration::from_secs(15)).await;
                assert!(status.success(), "{id} after SIGTERM: {status:?}");
                let took = self.takeover(&id, epoch).await;
                self.add_replica().await;
                format!("holder {id} SIGTERMed, handed over in {took:?}")
            }
            Step::Freeze => {
                // Every other freeze outlasts the deadline (the first one
                // does): the worker's hold ends while it is stopped.
                let past = self.done.get(&Step::Freeze).copied().unwrap_or(0) % 2 == 0;
                let pause = self.pause(past, 1500);
                let i = self.pick_holding_worker();
                self.freeze(i).await;
                let since = Instant::now();
                let meanwhile = if self.rng.random_bool(0.5) {
                    format!(", meanwhile {}", self.change_units().await)
                } else {
                    String::new()
                };
                tokio::time::sleep_until((since + pause).into()).await;
                self.thaw(i);
                format!("{} frozen for {pause:?}{meanwhile}", self.workers[i].id)
            }
            Step::Cut => {
                // The first cut outlasts the deadline: the worker, still
                // pinged, must fence itself (release everything) on time.
                let past = self.done.get(&Step::Cut).copied().unwrap_or(0) == 0;
                let pause = self.pause(past, 2000);
                let i = self.pick_holding_worker();
                let w = &self.workers[i];
                let held = self.journal.holds(&w.id);
                let since = Instant::now();
                w.proxy.cut();
                let fenced = if past {
                    let bound = DEADLINE + Duration::from_secs(2);
                    wait_for("the cut-off worker to fence itself", bound, || async {
                        self.journal.holds(&w.id) == 0
                    })
                    .await;
                    format!(
                        ", released all {held} units by its fence {:?} after the cut",
                        since.elapsed()
                    )
                } else {
                    String::new()
                };
                tokio::time::sleep_until((since + pause).into()).await;
                w.proxy.heal();
                format!(
                    "{} cut off from Redis (still pinged) for {pause:?}{fenced}",
                    w.id
                )
            }
        }
    }

    /// A pause around the deadline: past it by 200 ms up to `over` ms, or
    /// from half of it up to 200 ms short of it.
    pub fn pause(&mut self, past: bool, over: u64) -> Duration {
        let d = DEADLINE.as_millis() as u64;
        Duration::from_millis(if past {
            self.rng.random_range(d + 200..=d + over)
        } else {
            self.rng.random_range(d / 2..=d - 200)
        })
    }
}

impl Drop for Chaos {
    /// On a failure, before the logs' tails are printed: every event, and
    /// what Redis holds of the handoff, beside the processes' logs.
    fn drop(&mut self) {
        self.old_reader.abort();
        if !std::thread::panicking() {
            return;
        }
        let mut events = self.logs.file("events", None);
        for line in self.journal.lines() {
            let _ = writeln!(events, "{line}");
        }
        let mut state = self.logs.file("redis-state", None);
        let k = keys();
        let read = |key: &str| -> redis::RedisResult<Vec<(String, String)>> {
            let client = redis::Client::open(self.fleet.redis.url())?;
            let mut c = client.get_connection_with_timeout(Duration::from_secs(2))?;
            c.set_read_timeout(Some(Duration::from_secs(2)))?;
            redis::cmd("HGETALL").arg(key).query(&mut c)
        };
        for key in [&k.meta, &k.transit, &k.members, &k.liveness, &k.suspects] {
            match read(key) {
                Ok(pairs) => {
                    for (field, value) in pairs {
                        let _ = writeln!(state, "{key} {field} = {value}");
                    }
                }
                Err(e) => {
                    let _ = writeln!(state, "{key}: {e}");
                }
            }
        }
    }
}

/// The log parsing and the re-dating, on synthetic input.
#[test]
fn overran_releases_are_redated_only_when_a_freeze_explains_them() {
    assert_eq!(log_time_us("1970-01-01T00:00:01.5Z"), Some(1_500_000));
    assert_eq!(
        log_time_us("2026-11-23T03:01:38.220764Z"),
        Some(1_795_402_898_220_764)
    );
    assert_eq!(
        log_time_us("2000-03-01T00:00:00Z"),
        Some(951_868_800_000_000)
    );
    assert_eq!(duration_us("1.55512424s"), Some(1_555_124));
    assert_eq!(duration_us("250ms"), Some(250_000));
    assert_eq!(duration_us("12µs"), Some(12));
    assert_eq!(duration_us("7ns"), Some(0));
    let line = "2026-11-23T03:01:38.220764Z ERROR distributor::member::follow: a revocation finished after the unit's hold had ended: it may have overlapped with the next owner member=127.0.0.1:1 unit=u-1 token=168 late=1.5s";
    assert_eq!(field(line, "unit"), Some("u-1"));
    assert_eq!(field(line, "late"), Some("1.5s"));

    let end = 10_000_000;
    let overran = || Overran {
        member: "m".into(),
        unit: "u".into(),
        token: 3,
        hold_end_us: end,
        line: "l".into(),
    };
    let lines = vec![
        ownership::event_line("acquired", "u", "m", 3, 1_000_000),
        ownership::event_line("released", "u", "m", 3, end + 1_500_000),
        ownership::event_line("acquired", "u", "n", 5, end + 300_000),
    ];
    let frozen = vec![("m".to_string(), end - 1_000_000, end + 1_400_000)];
    let (out, n) = redate(&lines, &[overran()], &frozen).unwrap();
    assert_eq!(n, 1);
    let bounds = Bounds {
        reown: Duration::from_secs(10),
    };
    assert!(ownership::check(&out, &bounds).violations.is_empty());
    assert_eq!(ownership::check(&lines, &bounds).violations.len(), 1);
    // Without a freeze of that member, nothing explains it.
    let other = vec![("n".to_string(), end - 1_000_000, end + 1_400_000)];
    assert!(redate(&lines, &[overran()], &other).is_err());
}
