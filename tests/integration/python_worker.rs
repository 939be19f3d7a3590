//! The Python reference worker (`examples/python/worker.py`) against a real
//! Redis and a real replica, beside a Rust [`Member`](distributor::Member) and
//! an old-protocol worker (a ping server that only reads its row), through a
//! join, units added and removed, Redis closing the connection a worker
//! reads its row on (it reports the new one, and keeps its units), a freeze
//! past the deadline (SIGSTOP, then SIGCONT), a crash (SIGKILL) and a
//! restart on the same address, and drains (SIGTERM). Every owner's
//! ownership events go to the ownership checker (`support::ownership`): the
//! Python workers print theirs (`--events`); the test prints the Rust
//! member's (from `assignment()`) and the old worker's (from its reads) in
//! the same form.
//!
//! What it proves: no unit ever has two owners (the intervals of different
//! members never overlap, the frozen worker's included, dated at its hold's
//! end); fencing tokens grow from owner to owner; every listed unit is owned
//! again within [`REOWN`] of its release, its listing or its owner's death
//! (the old-protocol owners' handoff delay, 1.5 s, plus detection and a few
//! cycles); a thawed worker's first lines are the fenced releases of what it
//! held; a drained worker exits 0 and leaves the list and `{T}:members`.
//!
//! Needs `DISTRIBUTOR_PYTHON`: a python with `examples/python/requirements.txt`
//! installed (scripts/test makes a venv). Unset: skipped with a notice, or a
//! failure under `REQUIRE_PYTHON=1`.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use distributor::Member;
use distributor::core::handoff::MemberReport;
use std::time::Instant;

use crate::support::ownership::{self, Bounds};
use crate::support::procs::EventsChild;
use crate::support::*;

/// The Python workers' fencing deadline.
const DEADLINE: Duration = Duration::from_millis(2000);
/// The replica's handoff delay for members that do not acknowledge (the
/// Rust member of this branch and the old worker read their row at least
/// every 300 ms: a margin of five reads).
const HANDOFF_DELAY: Duration = Duration::from_millis(1500);
/// The checker's bound: a listed unit is owned again within this long.
const REOWN: Duration = Duration::from_secs(4);
/// Every wait for the fleet to settle.
const SETTLE: Duration = Duration::from_secs(20);

/// Straight to stderr, past the test harness's capture.
fn say(text: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr().lock(), "{text}");
}

/// The interpreter from `DISTRIBUTOR_PYTHON`, checked; `None` to skip
/// (saying so, for the test `who`).
pub(crate) fn python(who: &str) -> Option<PathBuf> {
    let Some(exe) = std::env::var_os("DISTRIBUTOR_PYTHON").filter(|p| !p.is_empty()) else {
        assert!(
            std::env::var("REQUIRE_PYTHON").as_deref() != Ok("1"),
            "REQUIRE_PYTHON=1 but DISTRIBUTOR_PYTHON is unset (scripts/test sets both)"
        );
        say(&format!(
            "{who}: skipped the Python worker: DISTRIBUTOR_PYTHON is unset (a python with examples/python/requirements.txt; scripts/test makes one)",
        ));
        return None;
    };
    let out = Command::new(&exe)
        .args(["-c", "import grpc, redis"])
        .output()
        .unwrap_or_else(|e| panic!("DISTRIBUTOR_PYTHON={exe:?} does not run: {e}"));
    assert!(
        out.status.success(),
        "DISTRIBUTOR_PYTHON={exe:?} lacks the requirements: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Some(exe.into())
}

/// Every owner's event lines, in arrival order, and the workers' logs.
#[derive(Clone, Default)]
struct Journal {
    lines: Arc<Mutex<Vec<String>>>,
    logs: Arc<Mutex<Vec<String>>>,
}

impl Journal {
    fn push(&self, line: String) {
        self.lines.lock().unwrap().push(line);
    }

    fn lines(&self) -> Vec<String> {
        self.lines.lock().unwrap().clone()
    }

    /// The lines printed by `member`, in order.
    fn of(&self, member: &str) -> Vec<String> {
        let needle = format!("\"member\":\"{member}\"");
        self.lines()
            .into_iter()
            .filter(|l| l.contains(&needle))
            .collect()
    }

    /// Who holds each unit now, by the events.
    fn owners(&self) -> BTreeMap<String, BTreeSet<String>> {
        let bounds = Bounds { reown: REOWN };
        let mut owners: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for i in ownership::check(&self.lines(), &bounds).intervals {
            if i.to_us.is_none() {
                owners.entry(i.unit).or_default().insert(i.member);
            }
        }
        owners
    }
}

/// Prints the workers' logs when the test fails.
struct DumpOnPanic(Journal);

impl Drop for DumpOnPanic {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let logs = self.0.logs.lock().unwrap();
            let lines = self.0.lines.lock().unwrap();
            say(&format!(
                "--- python workers' logs (last 300 of {}) ---",
                logs.len()
            ));
            for l in logs.iter().rev().take(300).rev() {
                say(l);
            }
            say(&format!("--- events (last 300 of {}) ---", lines.len()));
            for l in lines.iter().rev().take(300).rev() {
                say(l);
            }
        }
    }
}

/// One `worker.py` process; SIGKILLed on drop.
struct PyWorker {
    id: String,
    port: u16,
    process: EventsChild,
}

impl PyWorker {
    fn spawn(python: &Path, fleet: &Fleet, port: u16, journal: &Journal) -> PyWorker {
        PyWorker::spawn_with(python, fleet, port, journal, &[])
    }

    /// [`PyWorker::spawn`] with more flags.
    fn spawn_with(
        python: &Path,
        fleet: &Fleet,
        port: u16,
        journal: &Journal,
        extra: &[&str],
    ) -> PyWorker {
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/python/worker.py");
        let id = format!("127.0.0.1:{port}");
        let mut child = Command::new(python)
            .arg(script)
            .args(["--redis-url", &fleet.redis.url()])
            .args([
                "--services-key",
                SERVICES,
                "--table",
                TABLE,
                "--listen",
                &id,
            ])
            .args(["--deadline-ms", &DEADLINE.as_millis().to_string()])
            .args([
                "--poll-ms",
                "200",
                "--work-ms",
                "50",
                "--reregister-ms",
                "1000",
            ])
            .args(["--drain-timeout", "15", "--events"])
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("{python:?} {script}: {e}"));
        let err = BufReader::new(child.stderr.take().unwrap());
        let logs = journal.logs.clone();
        let who = id.clone();
        std::thread::spawn(move || {
            for line in err.lines().map_while(Result::ok) {
                logs.lock().unwrap().push(format!("[{who}] {line}"));
            }
        });
        let events = journal.clone();
        PyWorker {
            id,
            port,
            process: EventsChild::new(child, move |line| events.push(line)),
        }
    }

    fn signal(&self, sig: &str) {
        self.process.signal(sig);
    }

    fn state(&self) -> char {
        self.process.state()
    }

    async fn exited(&mut self, limit: Duration) -> std::process::ExitStatus {
        self.process.exited(&self.id, limit).await
    }

    /// SIGKILL; see [`EventsChild::kill`].
    async fn kill(&mut self, journal: &Journal) {
        journal.push(self.process.kill(&self.id).await);
    }
}

/// Prints a unit set's changes as events of `member`.
fn note_changes(
    journal: &Journal,
    member: &str,
    held: &mut BTreeMap<String, u64>,
    now: &[String],
    generation: u64,
) {
    let at = ownership::unix_us_now();
    for line in ownership::change_lines(member, held, now, generation, at) {
        journal.push(line);
    }
}

/// The Rust member's ownership, as its `assignment()` shows it.
fn observe_member(member: &Member, journal: &Journal) -> tokio::task::JoinHandle<()> {
    let mut rx = member.assignment();
    let (id, journal) = (member.id().to_string(), journal.clone());
    tokio::spawn(async move {
        let mut held = BTreeMap::new();
        loop {
            let a = rx.borrow_and_update().clone();
            note_changes(&journal, &id, &mut held, &a.units, a.generation);
            if rx.changed().await.is_err() {
                return;
            }
        }
    })
}

/// Waits until the table is the solver's for the live members and every
/// unit is owned, by the events, by exactly its row's member; returns how
/// long that took.
async fn settle(fleet: &Fleet, journal: &Journal, units: &[String], extra: &[String]) -> Duration {
    let started = Instant::now();
    let table = fleet.wait_for_table_with(units, extra, SETTLE).await;
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
        let owners = journal.owners();
        if owners == want {
            return started.elapsed();
        }
        assert!(
            Instant::now() < deadline,
            "ownership by the events did not match the table within {SETTLE:?}\ntable  {want:?}\nevents {owners:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Handoffs (consecutive owners of a unit) between two Python workers, and
/// between a Python worker and another owner.
fn python_handoffs(intervals: &[ownership::Interval], python: &BTreeSet<&str>) -> (usize, usize) {
    let mut by_unit: BTreeMap<&str, Vec<&ownership::Interval>> = BTreeMap::new();
    for i in intervals {
        by_unit.entry(&i.unit).or_default().push(i);
    }
    let (mut between, mut with) = (0, 0);
    for list in by_unit.values_mut() {
        list.sort_by_key(|i| i.from_us);
        for w in list.windows(2).filter(|w| w[0].member != w[1].member) {
            match (
                python.contains(w[0].member.as_str()),
                python.contains(w[1].member.as_str()),
            ) {
                (true, true) => between += 1,
                (false, false) => {}
                _ => with += 1,
            }
        }
    }
    (between, with)
}

fn listed(journal: &Journal, units: &[String]) {
    journal.push(ownership::listed_line(units, ownership::unix_us_now()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_workers_never_share_a_unit() {
    let Some(python) = python("python_worker") else {
        return;
    };
    let journal = Journal::default();
    let _dump = DumpOnPanic(journal.clone());
    let mut timings: Vec<String> = Vec::new();
    let mut fleet = Fleet::new(RedisServer::start());
    fleet.config.handoff_delay = HANDOFF_DELAY;
    let mut units = units(24);
    fleet.set_units(&units).await;
    fleet.add_replica();
    let m = fleet.add_member().await;
    let rust_observer = observe_member(fleet.members[m].as_ref().unwrap(), &journal);
    let (old, old_reader) = {
        let journal = journal.clone();
        FlakyWorker::old_protocol(&fleet, move |line| journal.push(line)).await
    };
    let mut p1 = PyWorker::spawn(&python, &fleet, free_port(), &journal);
    let mut extra = vec![old.addr.clone(), p1.id.clone()];
    let took = settle(&fleet, &journal, &units, &extra).await;
    timings.push(format!("first Python worker started and settled: {took:?}"));
    listed(&journal, &units);

    // A Python worker joins.
    let mut p2 = PyWorker::spawn(&python, &fleet, free_port(), &journal);
    extra.push(p2.id.clone());
    let took = settle(&fleet, &journal, &units, &extra).await;
    timings.push(format!("second Python worker joined and settled: {took:?}"));

    // Units added and removed.
    units.drain(..5);
    units.extend((24..30).map(|i| format!("unit-{i:04}")));
    fleet.set_units(&units).await;
    listed(&journal, &units);
    let took = settle(&fleet, &journal, &units, &extra).await;
    timings.push(format!("5 units removed, 6 added, settled: {took:?}"));

    // Redis closes the connection a Python worker reads its row on: it names
    // the new one in its report before its reads count again, and keeps its
    // units throughout.
    let named = || async {
        let raw: Option<String> = fleet.redis.cmd(&["HGET", &keys().members, &p2.id]).await;
        raw.and_then(|r| MemberReport::decode(&r))
            .and_then(|r| r.client)
    };
    let c1 = named()
        .await
        .expect("the report names the worker's connection");
    assert_eq!(
        c1.server,
        Some(fleet.redis.run_id().await),
        "and the server it is on"
    );
    let printed = journal.of(&p2.id).len();
    let killed = Instant::now();
    let n: i64 = fleet
        .redis
        .cmd(&["CLIENT", "KILL", "ID", &c1.client.to_string()])
        .await;
    assert_eq!(n, 1);
    wait_for("a report naming a new connection", SETTLE, || async {
        named().await.is_some_and(|c| c != c1)
    })
    .await;
    timings.push(format!(
        "a worker's connection closed: new one reported {:?} after",
        killed.elapsed()
    ));
    assert_eq!(
        journal.of(&p2.id)[printed..],
        [] as [String; 0],
        "a reconnection moved units"
    );

    // SIGSTOP past the deadline: the others take its units once its hold
    // ended; thawed, it first prints the fenced releases, dated at the end of
    // its hold.
    let held: BTreeSet<String> = journal
        .owners()
        .into_iter()
        .filter(|(_, o)| o.contains(&p1.id))
        .map(|(u, _)| u)
        .collect();
    assert!(!held.is_empty(), "{} holds nothing to freeze with", p1.id);
    let printed = journal.of(&p1.id).len();
    p1.signal("STOP");
    wait_for("the worker to stop", Duration::from_secs(5), || async {
        p1.state() == 'T'
    })
    .await;
    let stopped_us = ownership::unix_us_now();
    let stopped = Instant::now();
    wait_for(
        "the others to take the frozen worker's units",
        SETTLE,
        || async {
            let owners = journal.owners();
            held.iter()
                .all(|u| owners.get(u).is_some_and(|o| o.iter().any(|m| *m != p1.id)))
        },
    )
    .await;
    let moved = stopped.elapsed();
    timings.push(format!(
        "frozen worker's {} units taken by others {moved:?} after SIGSTOP (deadline {DEADLINE:?})",
        held.len()
    ));
    assert!(moved >= DEADLINE / 2, "taken {moved:?} after the freeze");
    assert_eq!(journal.of(&p1.id).len(), printed, "a frozen worker printed");
    p1.signal("CONT");
    let thawed = Instant::now();
    wait_for(
        "the thawed worker's fenced releases",
        Duration::from_secs(10),
        || async { journal.of(&p1.id).len() >= printed + held.len() },
    )
    .await;
    timings.push(format!(
        "thawed worker printed its {} fenced releases {:?} after SIGCONT",
        held.len(),
        thawed.elapsed()
    ));
    let first: Vec<serde_json::Value> = journal.of(&p1.id)[printed..printed + held.len()]
        .iter()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let released: BTreeSet<String> = first
        .iter()
        .map(|e| e["unit"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(released, held, "the first lines after the thaw: {first:?}");
    let deadline_us = DEADLINE.as_micros() as u64;
    let mut hold_ends = Vec::new();
    for e in &first {
        assert_eq!(e["event"], "released", "{e}");
        assert_eq!(e["reason"], "fenced", "{e}");
        let at = e["unix_us"].as_u64().unwrap();
        // Its last read and ping came before the freeze, and not long before.
        assert!(
            at <= stopped_us + deadline_us + 20_000 && at + 1_000_000 >= stopped_us + deadline_us,
            "dated {at}, frozen at {stopped_us}: not its hold's end"
        );
        hold_ends.push(at as i64 - stopped_us as i64);
    }
    timings.push(format!(
        "frozen worker's hold ended {} ms after SIGSTOP",
        hold_ends.iter().max().unwrap() / 1000
    ));
    let took = settle(&fleet, &journal, &units, &extra).await;
    timings.push(format!("thawed worker back and settled: {took:?}"));

    // The holder goes away: reads still work, pings stop. The Python workers
    // fence themselves within their deadline of the last ping (and nothing
    // moves meanwhile); a new replica pings them again and they start over.
    let pythons = [p1.id.clone(), p2.id.clone()];
    let owners = journal.owners();
    let holding = |id: &String| owners.values().filter(|o| o.contains(id)).count();
    let held: Vec<(usize, usize)> = pythons
        .iter()
        .map(|id| (holding(id), journal.of(id).len()))
        .collect();
    let r = fleet.wait_for_holder().await;
    let gone = Instant::now();
    fleet.replicas[r].take().unwrap().shutdown().await;
    wait_for(
        "the Python workers to fence themselves",
        DEADLINE * 3,
        || async {
            pythons.iter().zip(&held).all(|(id, (n, printed))| {
                let fenced = journal.of(id)[*printed..]
                    .iter()
                    .filter(|l| l.contains("\"released\"") && l.contains("\"fenced\""))
                    .count();
                fenced == *n
            })
        },
    )
    .await;
    let fenced = gone.elapsed();
    timings.push(format!(
        "holder gone: the Python workers' {} units released by their fence {fenced:?} after",
        held.iter().map(|(n, _)| n).sum::<usize>()
    ));
    assert!(
        fenced >= DEADLINE / 2 && fenced <= DEADLINE + Duration::from_millis(500),
        "fenced {fenced:?} after the last pings (deadline {DEADLINE:?})"
    );
    fleet.add_replica();
    let took = settle(&fleet, &journal, &units, &extra).await;
    timings.push(format!("a new replica pings them, settled: {took:?}"));

    // SIGKILL, then a new process on the same address.
    p1.kill(&journal).await;
    extra.retain(|m| *m != p1.id);
    let took = settle(&fleet, &journal, &units, &extra).await;
    timings.push(format!("SIGKILLed worker's units moved, settled: {took:?}"));
    let port = p1.port;
    drop(p1);
    let mut p1 = PyWorker::spawn(&python, &fleet, port, &journal);
    extra.push(p1.id.clone());
    let took = settle(&fleet, &journal, &units, &extra).await;
    timings.push(format!("restarted on the same address, settled: {took:?}"));

    // SIGTERM: a drain, then exit 0, off the list and out of the reports.
    for (w, label) in [(&mut p2, "second"), (&mut p1, "first")] {
        let t = Instant::now();
        w.signal("TERM");
        let status = w.exited(Duration::from_secs(15)).await;
        assert!(status.success(), "{} after SIGTERM: {status:?}", w.id);
        timings.push(format!(
            "{label} Python worker drained and exited 0: {:?}",
            t.elapsed()
        ));
        let listed: Vec<String> = fleet.redis.cmd(&["LRANGE", SERVICES, "0", "-1"]).await;
        assert!(!listed.contains(&w.id), "{} still listed: {listed:?}", w.id);
        let report: Option<String> = fleet.redis.cmd(&["HGET", &keys().members, &w.id]).await;
        assert_eq!(report, None, "{}'s report stays", w.id);
        assert!(
            journal.owners().values().all(|o| !o.contains(&w.id)),
            "{} exited holding units",
            w.id
        );
        extra.retain(|m| *m != w.id);
        let took = settle(&fleet, &journal, &units, &extra).await;
        timings.push(format!("{label} drained worker's units settled: {took:?}"));
    }

    journal.push(ownership::end_line(ownership::unix_us_now()));
    let report = ownership::check(&journal.lines(), &Bounds { reown: REOWN });
    say(&format!("python_worker: {}", report.summary()));
    let python_ids: BTreeSet<&str> = [p1.id.as_str(), p2.id.as_str()].into();
    let (between, with_python) = python_handoffs(&report.intervals, &python_ids);
    say(&format!(
        "python_worker: {between} handoffs between Python workers, {with_python} more to or from one"
    ));
    for t in &timings {
        say(&format!("python_worker: {t}"));
    }
    assert!(
        report.violations.is_empty(),
        "ownership violations:\n{}",
        report.violations.join("\n")
    );
    assert!(
        report.handoffs >= 20,
        "too few handoffs to prove anything: {}",
        report.summary()
    );
    assert!(report.fenced_releases >= held.len());
    old_reader.abort();
    rust_observer.abort();
    drop(old);
    fleet.shutdown().await;
}

/// `-balance load` with Python workers measuring a unit far heavier than
/// the rest (`--unit-load`): their smoothed loads reach `{T}:loads` in the
/// documented format, the heavy unit ends alone on a worker, and a worker
/// that drains removes its field.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_workers_report_measured_loads() {
    let Some(python) = python("python_worker") else {
        return;
    };
    let journal = Journal::default();
    let _dump = DumpOnPanic(journal.clone());
    let mut fleet = Fleet::new(RedisServer::start());
    fleet.config.balance =
        distributor::core::balance::Balance::Load(distributor::core::balance::Tolerance::DEFAULT);
    let units = units(30);
    let heavy = format!("{}=100", units[4]);
    fleet.set_units(&units).await;
    let flags = [
        "--unit-load",
        &heavy,
        "--default-load",
        "1",
        "--load-half-life",
        "1",
        "--load-report-ms",
        "300",
    ];
    let mut workers: Vec<PyWorker> = (0..3)
        .map(|_| PyWorker::spawn_with(&python, &fleet, free_port(), &journal, &flags))
        .collect();
    fleet.add_replica();
    let ids: Vec<String> = workers.iter().map(|w| w.id.clone()).collect();
    wait_for(
        "the heavy unit alone on a Python worker",
        Duration::from_secs(60),
        || async {
            let t = fleet.table().await;
            let transit: usize = fleet.redis.cmd(&["HLEN", &keys().transit]).await;
            transit == 0 && t.len() == 3 && t.rows().values().any(|v| *v == units[4])
        },
    )
    .await;
    let loads: BTreeMap<String, String> = fleet.redis.cmd(&["HGETALL", &keys().loads]).await;
    let heavy_field = format!("{}=100.000", units[4]);
    assert!(
        loads.values().any(|v| v.contains(&heavy_field)),
        "{loads:?}"
    );
    for (id, value) in &loads {
        assert!(ids.contains(id), "{id}");
        assert!(
            distributor::core::load::decode_report(value).is_some(),
            "{value:?}"
        );
    }
    let leaving = workers.remove(0);
    leaving.signal("TERM");
    let mut leaving = leaving;
    assert!(leaving.exited(Duration::from_secs(30)).await.success());
    wait_for(
        "the drained worker's loads removed",
        Duration::from_secs(10),
        || async {
            let loads: BTreeMap<String, String> =
                fleet.redis.cmd(&["HGETALL", &keys().loads]).await;
            !loads.contains_key(&leaving.id)
        },
    )
    .await;
    for mut w in workers {
        w.kill(&journal).await;
    }
    fleet.shutdown().await;
}

/// The Python worker serves beats (`proto.Liveness/Beats`, encoded by hand):
/// alone in a fleet, every ping the holder sends it but one in 32 is a
/// beat, none fails, and it keeps its units.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_python_worker_is_pinged_by_beats() {
    let Some(python) = python("python_worker") else {
        return;
    };
    let journal = Journal::default();
    let _dump = DumpOnPanic(journal.clone());
    let mut fleet = Fleet::new(RedisServer::start());
    let units = units(6);
    fleet.set_units(&units).await;
    fleet.add_replica();
    let p = PyWorker::spawn(&python, &fleet, free_port(), &journal);
    wait_for(
        "its row with every unit",
        Duration::from_secs(20),
        || async { fleet.table().await.units_of(&p.id).len() == units.len() },
    )
    .await;
    let samples = || {
        let i = fleet.holder().expect("a holder");
        parse_metrics(&fleet.replicas[i].as_ref().unwrap().metrics().encode())
    };
    let beats = |s: &[Sample]| metric(s, "distributor_ping_beats_total", &[]).unwrap_or(0.0);
    let from = beats(&samples());
    wait_for("20 beats", Duration::from_secs(30), || async {
        beats(&samples()) >= from + 20.0
    })
    .await;
    let s = samples();
    for reason in ["timeout", "unavailable", "refused", "status"] {
        let failed = metric(&s, "distributor_ping_failures_total", &[("reason", reason)]);
        assert_eq!(failed.unwrap_or(0.0), 0.0, "{reason}");
    }
    assert_eq!(fleet.table().await.units_of(&p.id).len(), units.len());
    drop(p);
    fleet.shutdown().await;
}
