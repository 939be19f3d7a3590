//! Unknown outcomes under churn, with real processes (issue 20, item 5): the
//! seeded schedule of `ownership_stress` (the kit's `support::procs`), with
//! each of the 3 `distributor` replicas reaching Redis through a
//! [`FaultProxy`] of its own, and a real Redis replica (`--replicaof`) that
//! every lease call and table write waits for (`-redis-wait-replicas=1
//! -redis-wait-timeout=100ms`), so that a `WAIT` can be faulted too. 5 to 7
//! example workers (`examples/worker.rs --events`, 2 s deadline) and the
//! old-protocol worker share 300 to 640 units.
//!
//! The churn makes units move (joins, drains, SIGKILLs, a SIGKILL and a new
//! process on the same address, units changes, workers frozen past their
//! deadline, the holder SIGKILLed mid-handoff); just before each step, faults
//! are armed on the current holder's proxy (and sometimes a standby's), so
//! that the writes the step causes meet them:
//!
//! - **one primary fault per step**, dealt from a shuffled bag holding each
//!   kind once and the late commit twice (refilled when empty), so each
//!   comes up about 6 times in the 54 steps: the commit script's reply dropped
//!   (applied, the call times out), the connection reset after it (applied)
//!   or before it (not applied), the commit delayed past the replica's call
//!   deadline (applied after the holder gave up on it: half of them 10 to
//!   200 ms past it, when the holder may have written again and still hold
//!   its lease, half up to 800 ms past it); the `WAIT` after a
//!   commit refused, or delayed past the wait's bound (the write is applied
//!   but not known durable); the renewal script's reply dropped (the holder
//!   replaces its connections, and a standby may take over); every
//!   connection of the holder reset (`reset_all`);
//! - **a failing read** in half the steps, on the holder (70 %) or a standby
//!   (30 %): `HGETALL` of `{T}:transit`, `{T}:liveness` or the table refused
//!   (an error reply) for the next 1 to 3 such reads, or the next `HGETALL`
//!   of `{T}:members` delayed past the call deadline (it times out, see
//!   `Kind::ReadMembers`);
//! - **a standby's write fault** (a commit or `WAIT` kind above): on every
//!   standby before a holder SIGKILL, so that the next holder's first writes
//!   meet it, and on one standby in a quarter of the other steps.
//!
//! A step's rules are taken out before the next step arms its own. Faults
//! that fired are counted per kind ([`RuleHandle::fired`]); after the plan,
//! a kind that never fired is armed again before a units change, up to 3
//! times, and every kind must have fired. The proxies' journals go to
//! `faults.log` beside the processes' logs.
//!
//! The ownership checker must find no unit with two owners at once (with
//! `ownership_stress`'s re-dating of frozen workers' late releases, nothing
//! else), every listed unit owned again within [`REOWN`] and owned by exactly
//! one member at the end, and at least 1,000 ownership changes. The seed is
//! printed; `OWNERSHIP_SEED=<n>` replays the schedule and its faults (not
//! the processes' timing); the logs are kept on a failure.

use std::collections::{BTreeMap, HashMap};
use std::io::Write;
use std::time::Duration;

use distributor::edge::redis::scripts::{COMMIT, RENEW};
use rand::Rng;
use rand::rngs::StdRng;
use rand::seq::{IndexedRandom, SliceRandom};
use std::time::Instant;

use crate::support::fault_proxy::{Action, FaultProxy, Match, Occurrence, Rule, RuleHandle};
use crate::support::procs::{self, Chaos, Hooks, Replica, Shape, Step};
use crate::support::{Backend, RedisServer, keys, wait_for};

const LABEL: &str = "unknown_outcomes_stress";
/// The checker's bound, as in `ownership_stress`: a frozen worker's units
/// wait its deadline × 1.05 + 100 ms after the revoking write, and again
/// from a new holder's start after a takeover.
const REOWN: Duration = Duration::from_secs(10);
/// No new step of the plan starts after this long.
const BUDGET: Duration = Duration::from_secs(150);
/// A replica's Redis call deadline: its lease renew deadline (700 ms) less
/// its renew interval (200 ms), as the kit's replicas are configured.
const CALL_DEADLINE: Duration = Duration::from_millis(500);
/// `-redis-wait-timeout`: a `WAIT` is given this plus the call deadline.
const WAIT_TIMEOUT: Duration = Duration::from_millis(100);
/// Any wait on loopback that must end (a reset, a fault in flight).
const BOUND: Duration = Duration::from_secs(5);
/// Attempts to make a kind that never fired fire, after the plan.
const MAKE_UP: usize = 3;

/// The plan: every scenario at least this many times, shuffled (54 steps,
/// about 75 s on two loaded cores).
const PLAN: &[(Step, usize)] = &[
    (Step::Join, 8),
    (Step::Drain, 6),
    (Step::Kill, 6),
    (Step::KillAndRestart, 4),
    (Step::Units, 16),
    (Step::HolderKillMidHandoff, 6),
    (Step::Freeze, 8),
];

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    CommitDropReply,
    CommitResetAfter,
    CommitResetBefore,
    CommitDelay,
    WaitError,
    WaitDelay,
    RenewDropReply,
    ResetAll,
    ReadMembers,
    ReadTransit,
    ReadLiveness,
    ReadTable,
}

/// The faults on a table write (a standby gets one of these).
const WRITES: [Kind; 6] = [
    Kind::CommitDropReply,
    Kind::CommitResetAfter,
    Kind::CommitResetBefore,
    Kind::CommitDelay,
    Kind::WaitError,
    Kind::WaitDelay,
];
/// The faults on the lease's connection.
const LEASE: [Kind; 2] = [Kind::RenewDropReply, Kind::ResetAll];
const READS: [Kind; 4] = [
    Kind::ReadMembers,
    Kind::ReadTransit,
    Kind::ReadLiveness,
    Kind::ReadTable,
];

/// The bag of primary faults, dealt one per step: every write and lease
/// fault, and a commit applied after the holder gave up on it once more.
fn primary() -> Vec<Kind> {
    WRITES
        .into_iter()
        .chain(LEASE)
        .chain([Kind::CommitDelay])
        .collect()
}

/// Every kind: each must fire in a run.
fn kinds() -> impl Iterator<Item = Kind> {
    WRITES.into_iter().chain(LEASE).chain(READS)
}

fn sha(script: &str) -> String {
    sha1_smol::Sha1::from(script).digest().to_string()
}

/// The faults of the schedule, armed around each step (see the module
/// documentation).
struct Faults {
    commit: String,
    renew: String,
    /// Primary kinds still to deal.
    bag: Vec<Kind>,
    /// Every rule armed: its kind, the replica whose proxy has it, its handle.
    rules: Vec<(Kind, String, RuleHandle)>,
    /// Where the current step's rules start in `rules`.
    current: usize,
    /// `reset_all`s carried out: (the replica, the step's index in `rules`).
    resets: Vec<(String, usize)>,
    /// The kind the next step arms instead of a dealt one (a make-up).
    forced: Option<Kind>,
    log: std::fs::File,
    /// Journal lines of each replica's proxy already in `log`.
    logged: HashMap<String, usize>,
}

impl Faults {
    fn new(chaos: &Chaos) -> Faults {
        Faults {
            commit: sha(COMMIT),
            renew: sha(RENEW),
            bag: Vec::new(),
            rules: Vec::new(),
            current: 0,
            resets: Vec::new(),
            forced: None,
            log: chaos.logs.file("faults", None),
            logged: HashMap::new(),
        }
    }

    fn deal(&mut self, rng: &mut StdRng) -> Kind {
        if self.bag.is_empty() {
            self.bag = primary();
            self.bag.shuffle(rng);
        }
        self.bag.pop().expect("refilled")
    }

    /// The rule for `kind` (not [`Kind::ResetAll`]).
    fn rule(&self, kind: Kind, rng: &mut StdRng) -> Rule {
        let commit = || Match::Script(self.commit.clone());
        let wait = || Match::After(Box::new(commit()), Box::new(Match::Command("WAIT".into())));
        let read = |key: String| Match::CommandArg("HGETALL".into(), key);
        let once = Occurrence::Next(1);
        let refused = || Action::Error("ERR injected by the test".into());
        let k = keys();
        match kind {
            Kind::CommitDropReply => Rule::new(commit(), once, Action::DropReply),
            Kind::CommitResetAfter => Rule::new(commit(), once, Action::ResetAfter),
            Kind::CommitResetBefore => Rule::new(commit(), once, Action::ResetBefore),
            Kind::CommitDelay => {
                // Half land while the holder may still hold its lease (its
                // renewals queue behind the commit on the same connection,
                // so it lapses 500 to 700 ms after sending it), after it
                // wrote again; half after it stepped down (then fenced).
                let late = if rng.random_bool(0.5) {
                    rng.random_range(10..=200)
                } else {
                    rng.random_range(200..=800)
                };
                let after = CALL_DEADLINE + Duration::from_millis(late);
                Rule::new(commit(), once, Action::Delay(after))
            }
            Kind::WaitError => Rule::new(wait(), once, refused()),
            Kind::WaitDelay => {
                let late = Duration::from_millis(rng.random_range(100..=500));
                let past = WAIT_TIMEOUT + CALL_DEADLINE + late;
                Rule::new(wait(), once, Action::Delay(past))
            }
            Kind::RenewDropReply => {
                Rule::new(Match::Script(self.renew.clone()), once, Action::DropReply)
            }
            // The reports' read times out (the cycle fails, the reports
            // known stay). An error reply does the same since fe6ba1a;
            // before it, units revoked meanwhile from the old-protocol
            // worker waited the longest any member may ask for (315 s).
            Kind::ReadMembers => {
                let late = Duration::from_millis(rng.random_range(100..=400));
                Rule::new(read(k.members), once, Action::Delay(CALL_DEADLINE + late))
            }
            Kind::ReadTransit | Kind::ReadLiveness | Kind::ReadTable => {
                let key = match kind {
                    Kind::ReadTransit => k.transit,
                    Kind::ReadLiveness => k.liveness,
                    _ => k.table,
                };
                let next = Occurrence::Next(rng.random_range(1..=3));
                Rule::new(read(key), next, refused())
            }
            Kind::ResetAll => unreachable!("reset_all is no rule"),
        }
    }

    /// Arms `kind` on `replica`'s proxy.
    async fn arm(&mut self, replica: &Replica, kind: Kind, rng: &mut StdRng) {
        let proxy = proxy(replica);
        if kind == Kind::ResetAll {
            proxy.reset_all();
            if proxy.wait_reset(BOUND).await {
                self.resets.push((replica.id.clone(), self.current));
            }
            return;
        }
        let rule = self.rule(kind, rng);
        self.rules.push((kind, replica.id.clone(), proxy.add(rule)));
    }

    /// Takes the current step's rules out (faults already taken complete).
    fn disarm(&mut self) {
        for (_, _, h) in &self.rules[self.current..] {
            h.remove();
        }
        self.current = self.rules.len();
    }

    /// Per kind, `per_rule` summed over the rules armed, each `reset_all`
    /// counting one.
    fn tally(&self, per_rule: impl Fn(&RuleHandle) -> usize) -> BTreeMap<Kind, usize> {
        let mut tally: BTreeMap<Kind, usize> = BTreeMap::new();
        for (kind, _, h) in &self.rules {
            *tally.entry(*kind).or_default() += per_rule(h);
        }
        if !self.resets.is_empty() {
            tally.insert(Kind::ResetAll, self.resets.len());
        }
        tally
    }

    /// Faults carried out, by kind.
    fn fired(&self) -> BTreeMap<Kind, usize> {
        self.tally(RuleHandle::fired)
    }

    /// Rules armed, by kind.
    fn armed(&self) -> BTreeMap<Kind, usize> {
        self.tally(|_| 1)
    }

    /// Waits (bounded) until a rule of `kind` armed in this step fired: a
    /// delay fires only once its command was forwarded.
    async fn wait_fired(&self, kind: Kind, limit: Duration) {
        let deadline = Instant::now() + limit;
        for (k, _, h) in &self.rules[self.current..] {
            if *k == kind {
                let left = deadline.saturating_duration_since(Instant::now());
                if h.wait_fired(1, left).await {
                    return;
                }
            }
        }
    }

    /// Appends the proxies' new journal lines to `faults.log`, each with
    /// its replica and (approximately) its unix µs.
    fn record(&mut self, chaos: &Chaos) {
        for r in &chaos.replicas {
            let lines = proxy(r).journal();
            let seen = self.logged.entry(r.id.clone()).or_default();
            for line in &lines[*seen..] {
                let at = line
                    .split_once("s ")
                    .and_then(|(secs, _)| secs.parse::<f64>().ok())
                    .map_or(0, |s| r.since_us + (s * 1e6) as u64);
                let _ = writeln!(self.log, "{} unix_us={at} {line}", r.id);
            }
            *seen = lines.len();
        }
        let _ = self.log.flush();
    }
}

fn proxy(r: &Replica) -> &FaultProxy {
    r.proxy.as_ref().expect("every replica has its own proxy")
}

impl Hooks for Faults {
    async fn before(&mut self, chaos: &mut Chaos, step: Step) {
        self.disarm();
        self.record(chaos);
        let forced = self.forced.take();
        let (h, _, _) = chaos.wait_holder().await;
        let standbys: Vec<usize> = (0..chaos.replicas.len()).filter(|&i| i != h).collect();
        let rng = &mut chaos.rng;
        let kind = match forced {
            Some(k) => k,
            None => self.deal(rng),
        };
        self.arm(&chaos.replicas[h], kind, rng).await;
        if READS.contains(&kind) {
            // A make-up for a read: the holder reads the transit, the
            // liveness and the table again after a write of unknown outcome.
            self.arm(&chaos.replicas[h], Kind::CommitDropReply, rng)
                .await;
        }
        if forced.is_some() {
            return;
        }
        if rng.random_bool(0.5) {
            let read = *READS.choose(rng).unwrap();
            let on = if rng.random_bool(0.3) {
                *standbys.choose(rng).unwrap()
            } else {
                h
            };
            self.arm(&chaos.replicas[on], read, rng).await;
        }
        let mid_handoff = step == Step::HolderKillMidHandoff;
        if mid_handoff || rng.random_bool(0.25) {
            let write = *WRITES.choose(rng).unwrap();
            let on: Vec<usize> = if mid_handoff {
                standbys
            } else {
                vec![*standbys.choose(rng).unwrap()]
            };
            for i in on {
                self.arm(&chaos.replicas[i], write, rng).await;
            }
        }
    }

    async fn after(&mut self, chaos: &mut Chaos, _step: Step) -> String {
        self.record(chaos);
        let mut armed: Vec<String> = self.rules[self.current..]
            .iter()
            .map(|(kind, on, h)| format!("{kind:?}@{on} fired {}", h.fired()))
            .collect();
        armed.extend(
            self.resets
                .iter()
                .filter(|(_, at)| *at == self.current)
                .map(|(on, _)| format!("ResetAll@{on}")),
        );
        format!("; faults: {}", armed.join(", "))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_unit_has_two_owners_when_the_holders_redis_calls_have_unknown_outcomes() {
    let seed = procs::seed(LABEL);
    // The first full sync starts at once, not after the diskless delay.
    let master = RedisServer::start_with(&["--repl-diskless-sync-delay", "0"]);
    let replica =
        RedisServer::start_with(&["--replicaof", "127.0.0.1", &master.port().to_string()]);
    wait_for("the Redis replica in sync", BOUND * 2, || async {
        let info: String = replica.cmd(&["INFO", "replication"]).await;
        info.contains("master_link_status:up")
    })
    .await;
    let shape = Shape {
        min_workers: 5,
        max_workers: 7,
        replica_flags: vec![
            "-redis-wait-replicas=1".into(),
            format!("-redis-wait-timeout={}ms", WAIT_TIMEOUT.as_millis()),
        ],
        proxied: true,
        ..Shape::new(LABEL, REOWN)
    };
    let mut chaos = Chaos::start(shape, seed, master).await;
    let mut faults = Faults::new(&chaos);
    chaos.run(PLAN, BUDGET, &mut faults).await;

    // A kind that never fired is armed again, before a units change (the
    // holder writes), until it fires.
    let mut n = chaos.done.values().sum::<usize>();
    for kind in kinds() {
        for _ in 0..MAKE_UP {
            if faults.fired().get(&kind).copied().unwrap_or(0) > 0 {
                break;
            }
            faults.forced = Some(kind);
            chaos.run_one(n, Step::Units, &mut faults).await;
            faults.wait_fired(kind, BOUND).await;
            n += 1;
        }
    }
    faults.disarm();
    faults.record(&chaos);
    let fired = faults.fired();
    chaos.say(&format!(
        "faults fired {fired:?} of armed {:?}; replicas logged {} failed table writes, {} refused as outdated, {} lease acquisitions, {} step-downs",
        faults.armed(),
        chaos.logs.replica_lines("table write failed"),
        chaos.logs.replica_lines("table write refused by redis: its state changed"),
        chaos.logs.replica_lines("lease acquired"),
        chaos.logs.replica_lines("stepping down")
    ));

    chaos.finish(PLAN).await;
    for kind in kinds() {
        assert!(
            fired.get(&kind).copied().unwrap_or(0) > 0,
            "seed {seed}: {kind:?} never fired (armed {:?}): the run proves nothing about it",
            faults.armed()
        );
    }
    drop(replica);
}
