//! The independent invariant checker, and the holder monitor.
//!
//! The **checker** reads Redis every ~20 ms for the whole scenario, one atomic
//! `MULTI` snapshot of the table, `{T}:meta`, `{T}:epoch`, `{T}:lease` (value
//! and PTTL), `{T}:suspects`, the services list and the work-unit list, and
//! checks each sample:
//!
//! 1. *Owners are registered.* Every table row (an empty one too: a live
//!    member without units) belongs to a member listed in the services list of
//!    the same snapshot; the one exception is the empty row of a member that
//!    left the list less than [`GRACE`] ago (a drained member deregisters
//!    once its row is present and empty, and the holder drops the row on its
//!    next cycle). A row with units of an unlisted member is always flagged.
//! 2. *Owners answer.* Every row belongs to a worker process that runs, or that
//!    the test killed less than [`GRACE`] ago (the documented detection window:
//!    poll interval + ping timeout + one cycle, plus slack for a loaded machine).
//!    The test tells the checker about every kill and start, and about Redis
//!    failovers: while one lasts no holder can act, so a detection window
//!    that it overlaps ends [`GRACE`] after the failover does.
//! 3. *No unit twice, no unknown unit.* No unit is in two rows; once the units list
//!    has been unchanged for [`GRACE`], every unit in the table is in it.
//! 4. *A partition of the valid units over the registered, answering members.*
//!    Once the inputs (services list, units list, set of running workers, Redis
//!    reachability) have been unchanged for [`GRACE`], the table is exactly the
//!    solver's table for the listed running workers and the listed units: every
//!    unit in exactly one row, balanced, deterministic, and an empty row for
//!    every running worker without units.
//! 5. *Atomic writes.* `meta.digest` is the digest of the table in the same
//!    snapshot, and `meta.members` its row count. The fields of a table write
//!    (`generation`, `digest`, `epoch`, `writer`, `written_at_ms`, `members`)
//!    are all there or none is: a `meta.generation` always names the table
//!    beside it (a generation floor restored after a data loss lives in
//!    `meta.generation_floor`).
//! 6. *Monotonic.* `{T}:epoch`, `meta.generation` and `meta.epoch` (the epoch of
//!    the last write) never decrease, across samples and across a Redis that
//!    lost its data (a missing key is "unknown", not 0). A new lease token comes
//!    with an epoch above every epoch seen before. A new table write (any of
//!    its fields changed, e.g. the same table written again after a data loss)
//!    comes with a generation above every generation seen before.
//! 7. *Fenced writes.* A write observed between two samples carries an epoch
//!    that was current when it was made: at least the epoch of the previous
//!    sample, at most the current one; its writer is the lease holder of that
//!    epoch; while a lease exists its epoch is the current epoch and its PTTL at
//!    most the TTL.
//! 8. *Frozen* (when a scenario asks): the table digest does not change at all;
//!    the services list (as a set) does not change at all (nobody forgotten).
//! 9. *Suspects keep their rows.* Every member in `{T}:suspects` (failing
//!    members of an unconfirmed mass failure) has a row in the same snapshot.
//!
//! The **holder monitor** polls `/metrics` of every replica every ~25 ms and
//! checks that at most one replica acts as holder at any moment: a poll answered
//! `distributor_holder 1` with epoch `e` proves that the replica held `e` at
//! some instant between sending and receiving, so two polls of one replica prove
//! the whole span between the first answer and the last request. Two replicas
//! whose proven spans for different epochs overlap are two acting holders.
//!
//! Every violation is recorded with the samples that show it; scenarios fail on
//! the first one.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use distributor::MatchingTable;
use std::time::Instant;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::support::{Fleet, SERVICES, TABLE, UNITS, http_get, metric, parse_metrics};

/// Detection window allowed after an input change: poll interval (200 ms) +
/// ping timeout (200 ms) + one more cycle (≈ 400 ms) is the documented bound;
/// the rest is slack for a 2-core machine running 3 replicas, Redis and the
/// workers at once.
pub const GRACE: Duration = Duration::from_millis(2000);
/// The replicas' lease TTL (the checker checks PTTL against it).
pub const TTL: Duration = Duration::from_millis(1000);
const PERIOD: Duration = Duration::from_millis(20);
/// Samples kept for the scenarios' measurements: about 20 s.
const HISTORY: usize = 1000;

/// One atomic snapshot of the keys the checker reads.
#[derive(Clone, Debug)]
pub struct Sample {
    pub n: u64,
    pub at: SystemTime,
    pub sent: Option<Instant>,
    pub took: Duration,
    pub table: BTreeMap<String, String>,
    pub meta: BTreeMap<String, String>,
    pub epoch: Option<u64>,
    pub lease: Option<String>,
    pub pttl_ms: i64,
    pub suspects: BTreeMap<String, String>,
    pub services: Vec<String>,
    pub units: Vec<String>,
}

/// The `{T}:meta` fields that a table write (`commit.lua`) sets together.
pub const WRITE_FIELDS: [&str; 6] = [
    "generation",
    "digest",
    "epoch",
    "writer",
    "written_at_ms",
    "members",
];

impl Sample {
    pub fn meta_u64(&self, k: &str) -> Option<u64> {
        self.meta.get(k).and_then(|v| v.parse().ok())
    }

    pub fn generation(&self) -> Option<u64> {
        self.meta_u64("generation")
    }

    /// The current holder's id, if a lease exists.
    pub fn holder(&self) -> Option<&str> {
        self.lease.as_ref()?;
        self.meta
            .get("holder")
            .map(String::as_str)
            .filter(|h| !h.is_empty())
    }

    pub fn matching_table(&self) -> MatchingTable {
        MatchingTable::from_rows(self.table.clone())
    }

    fn sent(&self) -> Instant {
        self.sent.expect("a taken sample")
    }
}

impl fmt::Display for Sample {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ms = self
            .at
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default()
            .as_millis();
        writeln!(
            f,
            "  sample #{} at unix_ms {ms} (took {:?})",
            self.n, self.took
        )?;
        writeln!(
            f,
            "    epoch {:?}  lease {:?} pttl {} ms",
            self.epoch, self.lease, self.pttl_ms
        )?;
        writeln!(f, "    meta {:?}", self.meta)?;
        if !self.suspects.is_empty() {
            writeln!(f, "    suspects {:?}", self.suspects)?;
        }
        writeln!(f, "    services {:?}", self.services)?;
        writeln!(f, "    units ({}) {:?}", self.units.len(), self.units)?;
        writeln!(f, "    table ({} rows)", self.table.len())?;
        for (m, u) in &self.table {
            writeln!(f, "      {m} => {u}")?;
        }
        Ok(())
    }
}

/// Locks, ignoring poisoning: a panicking scenario must not take the
/// checker's tasks down with it.
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Start/kill history of one worker.
#[derive(Default)]
struct Life {
    /// (instant, running) transitions, in order.
    changes: Vec<(Instant, bool)>,
}

impl Life {
    fn running_at(&self, t: Instant) -> bool {
        self.changes
            .iter()
            .rev()
            .find(|(at, _)| *at <= t)
            .is_some_and(|(_, r)| *r)
    }

    /// Running at `t`, or stopped less than `grace` before `t`, where a
    /// failover (no holder can act) that began within that window extends it
    /// to `grace` after the failover's end.
    fn eligible_at(&self, t: Instant, grace: Duration, failovers: &[Failover]) -> bool {
        self.running_at(t)
            || self.changes.iter().any(|(at, r)| {
                !*r && *at <= t && {
                    let mut until = Some(*at + grace);
                    for (from, to) in failovers {
                        if until.is_some_and(|u| *from < u) && to.is_none_or(|to| to > *at) {
                            until = to.map(|to| until.unwrap().max(to + grace));
                        }
                    }
                    until.is_none_or(|u| t < u)
                }
            })
    }
}

/// A Redis failover the test announced: from, to (none: still going on).
type Failover = (Instant, Option<Instant>);

#[derive(Default)]
struct State {
    samples: u64,
    failed: u64,
    failing: bool,
    max_gap: Duration,
    last_ok: Option<Instant>,
    last: Option<Sample>,
    history: VecDeque<Sample>,
    violations: Vec<String>,
    lives: BTreeMap<String, Life>,
    failovers: Vec<Failover>,
    /// When the inputs last changed (or Redis came back).
    inputs_changed: Option<Instant>,
    inputs: Option<(Vec<String>, Vec<String>)>,
    units_changed: Option<Instant>,
    /// When each member was last seen in the services list.
    last_listed: HashMap<String, Instant>,
    max_epoch: Option<u64>,
    max_generation: Option<u64>,
    max_write_epoch: Option<u64>,
    /// The last table write seen: its [`WRITE_FIELDS`] values.
    last_write: Option<Vec<String>>,
    last_token: Option<String>,
    frozen: Option<String>,
    frozen_services: Option<Vec<String>>,
    /// Whether the cluster converged once, so that check 4 applies.
    armed: bool,
}

/// The running checker. Cheap to share through `&`.
pub struct Checker {
    state: Arc<Mutex<State>>,
    stop: CancellationToken,
    task: Option<JoinHandle<()>>,
    monitor: Option<HolderMonitor>,
}

impl Checker {
    /// Starts sampling `redis_url` at once.
    pub fn start(redis_url: &str) -> Checker {
        let state = Arc::new(Mutex::new(State::default()));
        let stop = CancellationToken::new();
        let task = tokio::spawn(sample_loop(
            redis_url.to_string(),
            state.clone(),
            stop.clone(),
        ));
        Checker {
            state,
            stop,
            task: Some(task),
            monitor: None,
        }
    }

    /// Also checks that at most one of these replicas (id, HTTP port) acts as
    /// holder at any moment.
    pub fn monitor_holders(&mut self, replicas: Vec<(String, u16)>) {
        self.monitor = Some(HolderMonitor::start(
            replicas,
            self.state.clone(),
            self.stop.clone(),
        ));
    }

    /// Ignores the holder gauge of `replica` until `until` (a frozen process
    /// reports what it believed before the freeze until it catches up).
    pub fn mute_holder(&self, replica: &str, until: Instant) {
        if let Some(m) = &self.monitor {
            lock(&m.muted).insert(replica.to_string(), until);
        }
    }

    /// Records that worker `id` runs from now on (started) or not (killed).
    pub fn worker(&self, id: &str, running: bool) {
        let mut s = lock(&self.state);
        s.lives
            .entry(id.to_string())
            .or_default()
            .changes
            .push((Instant::now(), running));
    }

    /// Records that a Redis failover starts (`true`: from now on no holder
    /// can act) or ended (`false`: a holder acts again). Detection windows
    /// (rules 2 and 4) count from its end: meanwhile the table stays as it was.
    pub fn failover(&self, started: bool) {
        let now = Instant::now();
        if started {
            lock(&self.state).failovers.push((now, None));
        } else {
            self.failover_ends_at(now);
        }
    }

    /// Records that the Redis failover that runs ends at `at` (now, or later:
    /// a holder recovering from state Redis lost waits up to a member's
    /// deadline for the units a member that cannot say what it holds, such
    /// as a killed worker, may still work on).
    pub fn failover_ends_at(&self, at: Instant) {
        let mut s = lock(&self.state);
        if let Some(f) = s.failovers.last_mut().filter(|f| f.1.is_none()) {
            f.1 = Some(at);
        }
    }

    /// From now on, settled inputs must give exactly the solver's table (call it
    /// once the cluster converged: before that no replica may run yet).
    pub fn arm(&self) {
        lock(&self.state).armed = true;
    }

    /// From now on the table digest must stay `digest` (`None`: no constraint).
    pub fn freeze(&self, digest: Option<String>) {
        lock(&self.state).frozen = digest;
    }

    /// From now on the services list, as a set, must stay `services` (`None`:
    /// no constraint).
    pub fn freeze_services(&self, services: Option<Vec<String>>) {
        lock(&self.state).frozen_services = services.map(|mut s| {
            s.sort();
            s.dedup();
            s
        });
    }

    /// The latest successful sample.
    pub fn last(&self) -> Option<Sample> {
        lock(&self.state).last.clone()
    }

    /// The first recent sample taken at or after `since` that satisfies `pred`.
    pub fn find(&self, since: Instant, pred: impl Fn(&Sample) -> bool) -> Option<Sample> {
        let s = lock(&self.state);
        s.history
            .iter()
            .find(|x| x.sent() >= since && pred(x))
            .cloned()
    }

    /// Folds over the recent samples taken at or after `since`.
    pub fn scan<T>(&self, since: Instant, init: T, f: impl Fn(T, &Sample) -> T) -> T {
        let s = lock(&self.state);
        s.history.iter().filter(|x| x.sent() >= since).fold(init, f)
    }

    /// Panics with the first violation and its samples, if there is one.
    pub fn assert_ok(&self) {
        let first = {
            let s = lock(&self.state);
            s.violations.first().map(|v| {
                format!(
                    "{} violation(s) in all; the first:\n{v}",
                    s.violations.len()
                )
            })
        };
        if let Some(v) = first {
            panic!("INVARIANT VIOLATED: {v}");
        }
    }

    /// "N samples, ..." for the report.
    pub fn summary(&self) -> String {
        let s = lock(&self.state);
        format!(
            "{} samples, {} while Redis was unreachable, longest gap {:?}; holder polls: {}",
            s.samples,
            s.failed,
            s.max_gap,
            self.monitor
                .as_ref()
                .map(|m| lock(&m.polls).to_string())
                .unwrap_or_else(|| "off".into())
        )
    }

    /// Stops sampling; the violations stay readable.
    pub async fn stop(&mut self) {
        self.stop.cancel();
        if let Some(t) = self.task.take() {
            let _ = t.await;
        }
        if let Some(m) = self.monitor.as_mut()
            && let Some(t) = m.task.take()
        {
            let _ = t.await;
        }
    }
}

impl Drop for Checker {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

async fn take(conn: &mut redis::aio::MultiplexedConnection) -> redis::RedisResult<Sample> {
    type Reply = (
        HashMap<String, String>,
        HashMap<String, String>,
        Option<u64>,
        Option<String>,
        i64,
        HashMap<String, String>,
        Vec<String>,
        Vec<String>,
    );
    let keys = distributor::core::keys::Keys::new(TABLE);
    let mut p = redis::pipe();
    p.atomic()
        .hgetall(&keys.table)
        .hgetall(&keys.meta)
        .get(&keys.epoch)
        .get(&keys.lease)
        .pttl(&keys.lease)
        .hgetall(&keys.suspects)
        .lrange(SERVICES, 0, -1)
        .lrange(UNITS, 0, -1);
    let (table, meta, epoch, lease, pttl_ms, suspects, services, units): Reply =
        p.query_async(conn).await?;
    Ok(Sample {
        table: table.into_iter().collect(),
        meta: meta.into_iter().collect(),
        epoch,
        lease,
        pttl_ms,
        suspects: suspects.into_iter().collect(),
        services,
        units,
        n: 0,
        at: SystemTime::UNIX_EPOCH,
        sent: None,
        took: Duration::ZERO,
    })
}

async fn sample_loop(url: String, state: Arc<Mutex<State>>, stop: CancellationToken) {
    let client = redis::Client::open(url).expect("a valid redis url");
    let mut conn: Option<redis::aio::MultiplexedConnection> = None;
    let mut tick = tokio::time::interval(PERIOD);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut n = 0;
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tick.tick() => {}
        }
        if conn.is_none() {
            conn = tokio::time::timeout(
                Duration::from_millis(300),
                client.get_multiplexed_async_connection(),
            )
            .await
            .ok()
            .and_then(Result::ok);
        }
        let at = SystemTime::now();
        let sent = Instant::now();
        let result = match conn.as_mut() {
            Some(c) => tokio::time::timeout(Duration::from_millis(500), take(c))
                .await
                .ok()
                .and_then(Result::ok),
            None => None,
        };
        let mut s = lock(&state);
        match result {
            Some(mut sample) => {
                n += 1;
                sample.n = n;
                sample.at = at;
                sample.sent = Some(sent);
                sample.took = sent.elapsed();
                check(&mut s, sample);
            }
            None => {
                conn = None;
                s.failed += 1;
                s.failing = true;
            }
        }
    }
}

fn violation(s: &mut State, what: String, sample: &Sample) {
    let previous = s
        .last
        .as_ref()
        .map(|p| format!("previous sample:\n{p}"))
        .unwrap_or_default();
    let text = format!("{what}\nsample:\n{sample}{previous}");
    eprintln!("chaos checker: VIOLATION: {text}");
    if s.violations.len() < 20 {
        s.violations.push(text);
    }
}

fn check(s: &mut State, sample: Sample) {
    let t = sample.sent();
    s.samples += 1;
    if let Some(prev) = s.last_ok {
        s.max_gap = s.max_gap.max(t.duration_since(prev));
    }
    s.last_ok = Some(t);

    // Input changes start a grace window; so does Redis coming back.
    let mut services = sample.services.clone();
    services.sort();
    services.dedup();
    let mut units = sample.units.clone();
    units.sort();
    units.dedup();
    let inputs = (services.clone(), units.clone());
    if s.failing || s.inputs.as_ref() != Some(&inputs) {
        if s.inputs.as_ref().map(|i| &i.1) != Some(&inputs.1) || s.failing {
            s.units_changed = Some(t);
        }
        s.inputs = Some(inputs);
        s.inputs_changed = Some(t);
        s.failing = false;
    }
    let last_life_change = s
        .lives
        .values()
        .flat_map(|l| l.changes.iter().map(|(at, _)| *at))
        .filter(|at| *at <= t)
        .max();
    let failover_end = s
        .failovers
        .iter()
        .filter(|(from, _)| *from <= t)
        .map(|(_, to)| to.map_or(t, |to| to.min(t)))
        .max();
    let settled_since = [s.inputs_changed, last_life_change, failover_end]
        .into_iter()
        .flatten()
        .max()
        .unwrap_or(t);
    let settled = s.armed && t.duration_since(settled_since) >= GRACE;
    let units_settled = s.units_changed.is_none_or(|c| t.duration_since(c) >= GRACE);

    let listed: BTreeSet<&str> = services.iter().map(String::as_str).collect();
    let unit_set: BTreeSet<&str> = units.iter().map(String::as_str).collect();
    let mut problems = Vec::new();

    // 1-3: owners and units.
    let mut seen: HashMap<&str, &str> = HashMap::new();
    for (member, row) in &sample.table {
        let left_lately = s
            .last_listed
            .get(member)
            .is_some_and(|at| t.duration_since(*at) < GRACE);
        let just_left_empty = row.is_empty() && left_lately;
        if !listed.contains(member.as_str()) && !just_left_empty {
            problems.push(format!(
                "row of {member}, which is not in the services list{}",
                match s.last_listed.get(member) {
                    Some(at) => format!(
                        " (it left {:?} before this sample; units: {row:?})",
                        t.duration_since(*at)
                    ),
                    None => format!(" (units: {row:?})"),
                }
            ));
        }
        match s.lives.get(member) {
            None => problems.push(format!("row of {member}, which is no worker of this test")),
            Some(life) if !life.eligible_at(t, GRACE, &s.failovers) => problems.push(format!(
                "{member} was killed more than {GRACE:?} ago and still has a row (units: {row:?})"
            )),
            Some(_) => {}
        }
        for unit in row.split(',').filter(|u| !u.is_empty()) {
            if let Some(other) = seen.insert(unit, member) {
                problems.push(format!("unit {unit} is owned by both {other} and {member}"));
            }
            if units_settled && !unit_set.contains(unit) {
                problems.push(format!("unit {unit} of {member} is not in the units list"));
            }
        }
    }

    for m in &services {
        s.last_listed.insert(m.clone(), t);
    }

    // 4: exactly the solver's table once the inputs settled.
    if settled {
        let running: Vec<String> = services
            .iter()
            .filter(|m| s.lives.get(*m).is_some_and(|l| l.running_at(t)))
            .cloned()
            .collect();
        let expected = Fleet::expected(&running, &units);
        if sample.matching_table() != expected {
            problems.push(format!(
                "inputs unchanged for {:?} but the table is not the partition of the {} listed units over the {} listed running workers {running:?}",
                t.duration_since(settled_since),
                units.len(),
                running.len()
            ));
        }
    }

    // 5: meta describes the table in the same snapshot.
    if let Some(d) = sample.meta.get("digest") {
        let actual = sample.matching_table().digest().to_string();
        if *d != actual {
            problems.push(format!(
                "meta.digest {d} is not the digest {actual} of the stored table (torn write?)"
            ));
        }
        if sample.meta_u64("members") != Some(sample.table.len() as u64) {
            problems.push(format!(
                "meta.members {:?} but the table has {} rows",
                sample.meta.get("members"),
                sample.table.len()
            ));
        }
    }
    let (present, missing): (Vec<&str>, Vec<&str>) = WRITE_FIELDS
        .iter()
        .partition(|f| sample.meta.contains_key(**f));
    if !present.is_empty() && !missing.is_empty() {
        problems.push(format!(
            "meta has {present:?} but not {missing:?}: a table write sets them all at once, so a \
             meta.generation without a writer and digest names no table (a floor belongs in \
             meta.generation_floor)"
        ));
    }

    // 6: monotonic epoch, generation, write epoch.
    let epoch_before = s.max_epoch;
    if let Some(e) = sample.epoch {
        if epoch_before.is_some_and(|m| e < m) {
            problems.push(format!("epoch went down from {epoch_before:?} to {e}"));
        }
        s.max_epoch = Some(e.max(epoch_before.unwrap_or(0)));
    }
    if let Some(token) = &sample.lease
        && s.last_token.as_ref() != Some(token)
    {
        if let (Some(e), Some(before)) = (sample.epoch, epoch_before)
            && e <= before
            && s.last_token.is_some()
        {
            problems.push(format!(
                "a new lease with epoch {e}, not above the {before} seen before"
            ));
        }
        s.last_token = Some(token.clone());
    }
    let generation = sample.generation();
    let generation_before = s.max_generation;
    if let Some(g) = generation {
        if generation_before.is_some_and(|m| g < m) {
            problems.push(format!(
                "generation went down from {generation_before:?} to {g}"
            ));
        }
        s.max_generation = Some(g.max(generation_before.unwrap_or(0)));
    }
    let write_epoch = sample.meta_u64("epoch");
    if let Some(w) = write_epoch {
        if s.max_write_epoch.is_some_and(|m| w < m) {
            problems.push(format!(
                "the last write's epoch went down from {:?} to {w}",
                s.max_write_epoch
            ));
        }
        if sample.epoch.is_some_and(|e| w > e) {
            problems.push(format!(
                "a write with epoch {w}, above the current epoch {:?}",
                sample.epoch
            ));
        }
        s.max_write_epoch = Some(w.max(s.max_write_epoch.unwrap_or(0)));
    }

    // 6-7: a new write since the last sample.
    if let Some(g) = generation {
        let write: Vec<String> = WRITE_FIELDS
            .iter()
            .map(|f| sample.meta.get(*f).cloned().unwrap_or_default())
            .collect();
        let new_write = s.last_write.as_ref() != Some(&write);
        if new_write && s.last_write.is_some() {
            if generation_before == Some(g) {
                problems.push(format!(
                    "a new table write (digest {:?}, writer {:?}, written_at_ms {:?}) reuses generation {g}",
                    sample.meta.get("digest"),
                    sample.meta.get("writer"),
                    sample.meta.get("written_at_ms")
                ));
            }
            if let (Some(w), Some(before)) = (write_epoch, epoch_before)
                && w < before
            {
                problems.push(format!(
                    "a write with epoch {w} made after epoch {before} was current: a stale holder wrote"
                ));
            }
            let holder = sample.meta.get("holder").filter(|h| !h.is_empty());
            if let Some(h) = holder
                && sample.meta_u64("holder_epoch") == write_epoch
                && sample.meta.get("writer") != Some(h)
            {
                problems.push(format!(
                    "a write in epoch {write_epoch:?} by {:?}, but {h} holds that epoch",
                    sample.meta.get("writer")
                ));
            }
        }
        s.last_write = Some(write);
    }
    if sample.lease.is_some() {
        if sample.pttl_ms > TTL.as_millis() as i64 {
            problems.push(format!(
                "lease PTTL {} ms above the TTL {TTL:?}",
                sample.pttl_ms
            ));
        }
        if sample.meta_u64("holder_epoch") != sample.epoch {
            problems.push(format!(
                "a lease exists but meta.holder_epoch {:?} is not the current epoch {:?}",
                sample.meta.get("holder_epoch"),
                sample.epoch
            ));
        }
    }

    // 8: a frozen table, a frozen services list.
    if let Some(f) = &s.frozen {
        let table = sample.matching_table();
        let actual = table.digest();
        if f != actual {
            problems.push(format!(
                "the table changed (digest {f} -> {actual}) while no member and no unit changed"
            ));
        }
    }
    if let Some(f) = &s.frozen_services
        && *f != services
    {
        problems.push(format!(
            "the services list changed from {f:?} to {services:?} while frozen (a member forgotten?)"
        ));
    }

    // 9: suspects of a mass failure keep their rows until confirmed.
    for m in sample.suspects.keys() {
        if !sample.table.contains_key(m) {
            problems.push(format!(
                "{m} is a suspect of a mass failure ({:?}) but has no row: a suspect keeps its units until confirmed",
                sample.suspects[m]
            ));
        }
    }

    if !problems.is_empty() {
        violation(s, problems.join("\n"), &sample);
    }
    s.history.push_back(sample.clone());
    while s.history.len() > HISTORY {
        s.history.pop_front();
    }
    s.last = Some(sample);
}

/// Polls every replica's holder gauge; see the module docs.
struct HolderMonitor {
    muted: Arc<Mutex<HashMap<String, Instant>>>,
    polls: Arc<Mutex<u64>>,
    task: Option<JoinHandle<()>>,
}

/// A proven holding: `replica` held `epoch` from `from` to `to`.
#[derive(Clone, Debug)]
struct Run {
    replica: String,
    epoch: u64,
    from: Instant,
    to: Instant,
    polls: u32,
}

impl HolderMonitor {
    fn start(
        replicas: Vec<(String, u16)>,
        state: Arc<Mutex<State>>,
        stop: CancellationToken,
    ) -> HolderMonitor {
        let muted: Arc<Mutex<HashMap<String, Instant>>> = Default::default();
        let polls = Arc::new(Mutex::new(0));
        let task = tokio::spawn({
            let (muted, polls) = (muted.clone(), polls.clone());
            async move {
                let mut tick = tokio::time::interval(Duration::from_millis(25));
                tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                let mut current: HashMap<String, Run> = HashMap::new();
                let mut done: Vec<Run> = Vec::new();
                let started = Instant::now();
                loop {
                    tokio::select! {
                        _ = stop.cancelled() => return,
                        _ = tick.tick() => {}
                    }
                    let polled =
                        futures::future::join_all(replicas.iter().map(|(id, port)| async move {
                            let sent = Instant::now();
                            let r = tokio::time::timeout(
                                Duration::from_millis(200),
                                http_get(*port, "/metrics"),
                            )
                            .await;
                            let recv = Instant::now();
                            let gauge = match r {
                                Ok(Ok((200, body))) => {
                                    let m = parse_metrics(&body);
                                    Some((
                                        metric(&m, "distributor_holder", &[]).unwrap_or(0.0) == 1.0,
                                        metric(&m, "distributor_epoch", &[]).unwrap_or(0.0) as u64,
                                    ))
                                }
                                _ => None,
                            };
                            (id.clone(), sent, recv, gauge)
                        }))
                        .await;
                    *lock(&polls) += 1;
                    for (id, sent, recv, gauge) in polled {
                        let muted_now = lock(&muted).get(&id).is_some_and(|until| recv < *until);
                        match gauge {
                            Some((true, epoch)) if !muted_now => match current.get_mut(&id) {
                                Some(run) if run.epoch == epoch => {
                                    run.to = sent;
                                    run.polls += 1;
                                }
                                _ => {
                                    if let Some(run) = current.remove(&id) {
                                        done.push(run);
                                    }
                                    current.insert(
                                        id.clone(),
                                        Run {
                                            replica: id.clone(),
                                            epoch,
                                            from: recv,
                                            to: sent,
                                            polls: 1,
                                        },
                                    );
                                }
                            },
                            // Not holder, muted, or not answering (killed,
                            // paused, cut off): a proven run ends here.
                            _ => {
                                if let Some(run) = current.remove(&id) {
                                    done.push(run);
                                }
                            }
                        }
                    }
                    done.retain(|r| r.to + Duration::from_secs(30) > Instant::now());
                    let all: Vec<&Run> = current.values().chain(done.iter()).collect();
                    for a in current.values() {
                        for b in &all {
                            if a.replica != b.replica
                                && a.epoch != b.epoch
                                && a.from.max(b.from) < a.to.min(b.to)
                            {
                                let mut s = lock(&state);
                                let text = format!(
                                    "two acting holders: {} held epoch {} during [{:?}, {:?}] and {} held epoch {} during [{:?}, {:?}] (times since the monitor started)",
                                    a.replica,
                                    a.epoch,
                                    a.from - started,
                                    a.to - started,
                                    b.replica,
                                    b.epoch,
                                    b.from - started,
                                    b.to - started
                                );
                                if !s.violations.iter().any(|v| v == &text) {
                                    eprintln!("chaos checker: VIOLATION: {text}");
                                    s.violations.push(text);
                                }
                            }
                        }
                    }
                }
            }
        });
        HolderMonitor {
            muted,
            polls,
            task: Some(task),
        }
    }
}

/// The checker checks itself: synthetic samples with each kind of violation.
mod self_test {
    use super::*;

    const W1: &str = "127.0.0.1:7001";
    const W2: &str = "127.0.0.1:7002";
    const W3: &str = "127.0.0.1:7003";

    fn units() -> Vec<String> {
        crate::support::units(6)
    }

    fn good_table() -> BTreeMap<String, String> {
        Fleet::expected(&[W1.into(), W2.into()], &units())
            .rows()
            .clone()
    }

    fn sample(n: u64, table: BTreeMap<String, String>, epoch: u64, generation: u64) -> Sample {
        let digest = MatchingTable::from_rows(table.clone()).digest().to_string();
        let meta = [
            ("digest", digest),
            ("generation", generation.to_string()),
            ("epoch", epoch.to_string()),
            ("writer", "r1".into()),
            ("written_at_ms", (1000 * generation).to_string()),
            ("holder", "r1".into()),
            ("holder_epoch", epoch.to_string()),
            ("members", table.len().to_string()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        Sample {
            n,
            at: SystemTime::now(),
            sent: Some(Instant::now()),
            took: Duration::ZERO,
            table,
            meta,
            epoch: Some(epoch),
            lease: Some(format!("token-{epoch}")),
            pttl_ms: 900,
            suspects: BTreeMap::new(),
            services: vec![W1.into(), W2.into()],
            units: units(),
        }
    }

    /// A state with both workers running for a while, armed, after `first`.
    fn state(first: Sample) -> State {
        let mut s = State::default();
        let long_ago = Instant::now() - Duration::from_secs(10);
        for w in [W1, W2, W3] {
            s.lives
                .entry(w.into())
                .or_default()
                .changes
                .push((long_ago, true));
        }
        s.armed = true;
        check(&mut s, first);
        // Inputs seen long enough ago for the exact check.
        s.inputs_changed = Some(long_ago);
        s.units_changed = Some(long_ago);
        s
    }

    fn violations_after(second: Sample) -> Vec<String> {
        let mut s = state(sample(1, good_table(), 1, 1));
        check(&mut s, second);
        s.violations
    }

    fn assert_flags(second: Sample, needle: &str) {
        let v = violations_after(second);
        assert!(
            v.iter().any(|v| v.contains(needle)),
            "expected a violation containing {needle:?}, got {v:#?}"
        );
    }

    #[test]
    fn checker_accepts_a_steady_table() {
        assert_eq!(
            violations_after(sample(2, good_table(), 1, 1)),
            Vec::<String>::new()
        );
    }

    #[test]
    fn checker_flags_a_stale_write() {
        // Epoch 2 became current; then a new table written in epoch 1.
        let mut s = state(sample(1, good_table(), 1, 1));
        let mut current = sample(2, good_table(), 2, 1);
        current.meta.insert("epoch".into(), "1".into());
        check(&mut s, current);
        let mut table = good_table();
        let first = table.keys().next().unwrap().clone();
        let moved = table.remove(&first).unwrap();
        let other = table.keys().next().unwrap().clone();
        let joined = format!("{},{moved}", table[&other]);
        table.insert(other, joined);
        let mut stale = sample(3, table, 2, 2);
        stale.meta.insert("epoch".into(), "1".into());
        check(&mut s, stale);
        assert!(
            s.violations.iter().any(|v| v.contains("stale holder")),
            "{:#?}",
            s.violations
        );
    }

    #[test]
    fn checker_flags_a_unit_owned_twice() {
        let mut table = good_table();
        let (a, b): (Vec<_>, Vec<_>) = table.keys().cloned().partition(|k| k == W1);
        let dup = table[&a[0]].split(',').next().unwrap().to_string();
        let row = format!("{},{dup}", table[&b[0]]);
        table.insert(b[0].clone(), row);
        assert_flags(sample(2, table, 1, 2), "owned by both");
    }

    #[test]
    fn checker_accepts_the_empty_row_of_a_member_that_just_left_only() {
        // W2 drained: its row is empty, then it leaves the list; the holder
        // drops the row on its next cycle.
        let table = |w2: &str| {
            let mut t = Fleet::expected(&[W1.into()], &units()).rows().clone();
            t.insert(W2.into(), w2.into());
            t
        };
        let run = |w2_row: &str, left_ago: Duration| {
            let mut s = state(sample(1, table(""), 1, 1));
            s.last_listed.insert(W2.into(), Instant::now() - left_ago);
            let mut left = sample(2, table(w2_row), 1, 1);
            left.services.retain(|m| m != W2);
            check(&mut s, left);
            s.violations
        };
        let ms = Duration::from_millis;
        assert_eq!(run("", ms(100)), Vec::<String>::new());
        let v = run("", GRACE + ms(100));
        assert!(
            v.iter().any(|v| v.contains("not in the services list")),
            "{v:#?}"
        );
        let v = run("unit-0000", ms(100));
        assert!(
            v.iter().any(|v| v.contains("not in the services list")),
            "{v:#?}"
        );
    }

    #[test]
    fn checker_flags_a_dead_owner_after_the_grace() {
        let mut s = state(sample(1, good_table(), 1, 1));
        s.lives
            .get_mut(W1)
            .unwrap()
            .changes
            .push((Instant::now() - GRACE - Duration::from_millis(10), false));
        check(&mut s, sample(2, good_table(), 1, 1));
        assert!(
            s.violations.iter().any(|v| v.contains("still has a row")),
            "{:#?}",
            s.violations
        );
    }

    #[test]
    fn checker_flags_a_torn_write_and_a_wrong_table() {
        let mut torn = sample(2, good_table(), 1, 1);
        torn.meta.insert("digest".into(), "0".repeat(40));
        assert_flags(torn, "torn write");
        let lopsided = Fleet::expected(&[W1.into()], &units()).rows().clone();
        assert_flags(sample(2, lopsided, 1, 2), "not the partition");
    }

    #[test]
    fn checker_flags_epochs_and_generations_going_down() {
        assert_flags(sample(2, good_table(), 0, 1), "epoch went down");
        let mut s = state(sample(1, good_table(), 3, 5));
        check(&mut s, sample(2, good_table(), 3, 4));
        assert!(
            s.violations
                .iter()
                .any(|v| v.contains("generation went down"))
        );
    }

    #[test]
    fn checker_flags_a_changed_frozen_table() {
        let mut s = state(sample(1, good_table(), 1, 1));
        s.frozen = Some("something else".into());
        check(&mut s, sample(2, good_table(), 1, 1));
        assert!(
            s.violations
                .iter()
                .any(|v| v.contains("no member and no unit changed"))
        );
    }

    /// Redis lost its data; a replica restored the generation floor (3), then
    /// a holder wrote the table again.
    fn after_data_loss(write_generation: u64) -> Vec<String> {
        let mut s = state(sample(1, good_table(), 1, 3));
        let mut empty = sample(2, BTreeMap::new(), 1, 0);
        (empty.meta, empty.epoch, empty.lease) = (BTreeMap::new(), None, None);
        (empty.services, empty.units) = (vec![], vec![]);
        check(&mut s, empty.clone());
        let mut floor = empty.clone();
        floor.n = 3;
        floor.epoch = Some(2);
        floor.lease = Some("token-2".into());
        floor.meta = [
            ("generation_floor", "3"),
            ("holder", "r2"),
            ("holder_epoch", "2"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        check(&mut s, floor);
        let mut write = sample(4, good_table(), 2, write_generation);
        for k in ["writer", "holder"] {
            write.meta.insert(k.into(), "r2".into());
        }
        write.meta.insert("written_at_ms".into(), "99999".into());
        check(&mut s, write);
        s.violations
    }

    #[test]
    fn checker_accepts_a_generation_floor_and_a_higher_write_after_data_loss() {
        assert_eq!(after_data_loss(4), Vec::<String>::new());
    }

    #[test]
    fn checker_flags_a_generation_reused_after_data_loss() {
        let v = after_data_loss(3);
        assert!(
            v.iter().any(|v| v.contains("reuses generation 3")),
            "{v:#?}"
        );
    }

    #[test]
    fn checker_flags_a_generation_without_its_table_write() {
        // What the daemon used to write on acquiring after a data loss: the
        // floor as meta.generation, with no table, writer or digest.
        let mut floor = sample(2, BTreeMap::new(), 1, 1);
        floor.meta = [("generation", "1"), ("holder", "r1"), ("holder_epoch", "1")]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        assert_flags(floor, "a table write sets them all at once");
    }

    #[test]
    fn checker_wants_an_empty_row_for_a_live_member_without_units() {
        let workers: Vec<String> = [W1, W2, W3].iter().map(|w| w.to_string()).collect();
        let few = crate::support::units(2);
        let table = Fleet::expected(&workers, &few).rows().clone();
        assert_eq!(table.len(), 3, "the solver gives every live member a row");
        assert!(table.values().any(String::is_empty));
        let run = |table: BTreeMap<String, String>| {
            let mut first = sample(1, table.clone(), 1, 1);
            (first.services, first.units) = (workers.clone(), few.clone());
            let mut s = state(first);
            let mut second = sample(2, table, 1, 1);
            (second.services, second.units) = (workers.clone(), few.clone());
            check(&mut s, second);
            s.violations
        };
        assert_eq!(run(table.clone()), Vec::<String>::new());
        let without: BTreeMap<String, String> =
            table.into_iter().filter(|(_, u)| !u.is_empty()).collect();
        let v = run(without);
        assert!(v.iter().any(|v| v.contains("not the partition")), "{v:#?}");
    }

    #[test]
    fn checker_flags_a_changed_frozen_services_list() {
        let mut s = state(sample(1, good_table(), 1, 1));
        s.frozen_services = Some(vec![W1.into(), W2.into()]);
        check(&mut s, sample(2, good_table(), 1, 1));
        assert_eq!(s.violations, Vec::<String>::new());
        let mut forgot = sample(3, good_table(), 1, 1);
        forgot.services.retain(|m| m != W2);
        check(&mut s, forgot);
        assert!(
            s.violations
                .iter()
                .any(|v| v.contains("services list changed")),
            "{:#?}",
            s.violations
        );
    }

    #[test]
    fn checker_flags_a_suspect_without_its_row() {
        let mut kept = sample(2, good_table(), 1, 1);
        kept.suspects.insert(W1.into(), "1000 r1".into());
        assert_eq!(violations_after(kept), Vec::<String>::new());
        let mut table = good_table();
        table.remove(W1);
        let mut dropped = sample(2, table, 1, 2);
        dropped.suspects.insert(W1.into(), "1000 r1".into());
        assert_flags(dropped, "keeps its units until confirmed");
    }

    #[test]
    fn checker_extends_detection_over_a_failover() {
        let run = |failover: Failover| {
            let mut s = state(sample(1, good_table(), 1, 1));
            let now = Instant::now();
            let killed = now - GRACE - Duration::from_millis(500);
            s.lives.get_mut(W1).unwrap().changes.push((killed, false));
            s.failovers.push(failover);
            check(&mut s, sample(2, good_table(), 1, 1));
            s.violations
        };
        let now = Instant::now();
        let ms = Duration::from_millis;
        // Still going on, or ended less than GRACE ago: the row may stay.
        assert_eq!(run((now - GRACE, None)), Vec::<String>::new());
        assert_eq!(
            run((now - GRACE, Some(now - GRACE + ms(300)))),
            Vec::<String>::new()
        );
        // Ended long ago, or began after the window had closed: flagged.
        let v = run((now - GRACE * 3, Some(now - GRACE * 2)));
        assert!(v.iter().any(|v| v.contains("still has a row")), "{v:#?}");
        let v = run((now - ms(100), None));
        assert!(v.iter().any(|v| v.contains("still has a row")), "{v:#?}");
    }
}
