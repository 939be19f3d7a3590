//! Scenario 13: a Sentinel failover that loses writes (issue 38, item 6), in
//! real containers, measured as the issue measured it.
//!
//! Each run builds its own rig on a fresh bridge network: a Redis master and
//! one replica (no persistence), three sentinels (quorum 2, down-after 1 s),
//! three distributor replicas configured with Sentinel (`REDIS_SENTINEL_MASTER`,
//! the sentinels in `REDIS_URL`) and otherwise the daemon's default timings,
//! and five example workers (`examples/worker.rs --events`, on Sentinel too,
//! with their default 10 s deadline) as host processes on 200 units. A move
//! is put in flight (a worker joins, or one drains with SIGTERM); around its
//! revoking write the replica's replication link is frozen (`iptables` DROP
//! of the master's address in the replica's network namespace, both ways),
//! so that the master's latest writes never reach it; once the master wrote
//! a generation the replica lacks, and a random 0-600 ms later, the master
//! and the distributor replica that wrote that generation are SIGKILLed
//! (`docker kill`), the replica's link is restored once the master is gone,
//! and Sentinel promotes the replica. The run verifies that the promoted
//! server really lacks the master's last generation (else it tested nothing
//! and fails), starts a fresh replica of the promoted server, and waits
//! until the table on the master the sentinels name is the solver's and
//! every worker's events show exactly its row's units.
//!
//! Variants ([`Variant`]): default flags; `REDIS_WAIT_REPLICAS=1`; only the
//! master killed (the writer kept); and Redis restarted empty (no
//! persistence, SIGKILL and `docker start` before Sentinel's down-after, so
//! that the replica resynchronises the empty data set too) during a move,
//! with the writer killed, and no freeze.
//!
//! What counts is the ownership check on the workers' own events (as in
//! every scenario; `tests/support/ownership.rs`): overlapping tenures, and
//! how long a listed unit went without an owner after the failover (from
//! the master's SIGKILL to the next acquisition). The Redis sampling checker
//! of the other scenarios is not run here: its monotonicity rules (epoch and
//! generation never go down) are about a Redis that keeps its writes, and a
//! promoted replica that lagged breaks them by construction.
//!
//! `CHAOS_SENTINEL_RUNS` (default 1) runs per variant, each with its own
//! seed: `CHAOS_SENTINEL_SEED` is the first (default: random); run `i` uses
//! seed + `i`. The seed's parity picks join or drain, the next bit the stop
//! time (`--work-ms` 200 or 0), so consecutive seeds cycle through the four;
//! the rest of the schedule (freeze before the move or once its first write
//! is replicated, the delay before the kill) comes from the seed. A run is
//! replayed with `CHAOS_SENTINEL_SEED=<its seed> CHAOS_SENTINEL_RUNS=1`.
//! A run with a violation keeps its directory (events, worker logs, every
//! container's log; `CHAOS_SENTINEL_KEEP=1`: every run does); the variant
//! fails after all its runs.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use distributor::MatchingTable;
use distributor::core::keys::Keys;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use testcontainers::core::Mount;
use testcontainers::{ContainerAsync, GenericImage, ImageExt};

use crate::cluster::{self, Timings, ms, say};
use crate::owners::{Ending, Journal};
use crate::support::docker::{self, BridgeNetwork, Process, bollard};
use crate::support::ownership::{self, Bounds, Interval};
use crate::support::{Fleet, SERVICES, TABLE, UNITS, free_port};

/// The master's name as the sentinels monitor it.
const MASTER_NAME: &str = "mymaster";
const UNITS_N: usize = 200;
const WORKERS: usize = 5;
/// The ownership check's bound: a listed unit is owned again at all within
/// this long. The measured longest time is reported; this only catches a
/// unit that is never owned again.
const REOWN: Duration = Duration::from_secs(30);
/// How long the rig may take to converge (at the start, after the failover).
const CONVERGE: Duration = Duration::from_secs(60);
/// The kill comes this long at most after the first generation the replica
/// lacks (the revoking write, or a later one).
const MAX_DELAY_MS: u64 = 600;
/// The example worker's default deadline (`--deadline`, not given here).
const MEMBER_DEADLINE: Duration = Duration::from_secs(10);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Variant {
    /// Replication frozen around the revoking write; master and writer SIGKILLed.
    Lagging,
    /// The same with `REDIS_WAIT_REPLICAS=1`.
    LaggingWaitReplicas,
    /// Replication frozen; only the master SIGKILLed (the writer kept).
    MasterOnly,
    /// No freeze: master and writer SIGKILLed, the master started again empty.
    RestartEmpty,
}

impl Variant {
    pub fn name(self) -> &'static str {
        match self {
            Variant::Lagging => "sentinel-lagging",
            Variant::LaggingWaitReplicas => "sentinel-lagging-wait-replicas",
            Variant::MasterOnly => "sentinel-master-only",
            Variant::RestartEmpty => "sentinel-restart-empty",
        }
    }

    fn short(self) -> &'static str {
        match self {
            Variant::Lagging => "lag",
            Variant::LaggingWaitReplicas => "lagw",
            Variant::MasterOnly => "mo",
            Variant::RestartEmpty => "re",
        }
    }

    fn kills_writer(self) -> bool {
        self != Variant::MasterOnly
    }

    fn freezes(self) -> bool {
        self != Variant::RestartEmpty
    }
}

/// One run's schedule, all from its seed.
#[derive(Clone, Copy, Debug)]
struct Schedule {
    seed: u64,
    /// A worker joins (else one drains).
    join: bool,
    /// `--work-ms`: how long a worker takes to stop a unit.
    work_ms: u64,
    /// Freeze once the move's first write (registration, draining report)
    /// reached the replica (else before the move).
    freeze_after_move: bool,
    /// From the first generation the replica lacks to the kill.
    delay_ms: u64,
}

impl Schedule {
    fn draw(seed: u64) -> Schedule {
        let mut rng = StdRng::seed_from_u64(seed);
        Schedule {
            seed,
            join: seed.is_multiple_of(2),
            work_ms: if (seed / 2).is_multiple_of(2) { 200 } else { 0 },
            freeze_after_move: rng.random_bool(0.5),
            delay_ms: rng.random_range(0..=MAX_DELAY_MS),
        }
    }

    fn describe(&self, variant: Variant) -> String {
        let freeze = if !variant.freezes() {
            "no freeze"
        } else if self.freeze_after_move {
            "replication frozen once the move's first write was replicated"
        } else {
            "replication frozen before the move"
        };
        format!(
            "seed {}: {}, stop {} ms, {freeze}, kill {} ms after the first lost generation",
            self.seed,
            if self.join {
                "a worker joins"
            } else {
                "a worker drains"
            },
            self.work_ms,
            self.delay_ms
        )
    }
}

/// What one run found.
struct Outcome {
    seed: u64,
    overlapping_tenures: usize,
    longest_overlap: Duration,
    /// Longest time a listed unit had no owner after the failover (from the
    /// master's SIGKILL, or from the unit's release if later).
    ownerless_after: Duration,
    violations: Vec<String>,
    kept: Option<PathBuf>,
}

/// Runs `CHAOS_SENTINEL_RUNS` runs of `variant`, prints the summary, and
/// fails if any run found a violation.
pub async fn sentinel_failover(docker: bollard::Docker, variant: Variant) {
    let runs: u64 = std::env::var("CHAOS_SENTINEL_RUNS")
        .ok()
        .map(|v| v.parse().expect("CHAOS_SENTINEL_RUNS: a number"))
        .unwrap_or(1);
    let base: u64 = std::env::var("CHAOS_SENTINEL_SEED")
        .ok()
        .map(|v| v.parse().expect("CHAOS_SENTINEL_SEED: a number"))
        .unwrap_or_else(|| rand::random_range(0..1_000_000));
    say(&format!(
        "  {runs} run(s), seeds {base}..{} (CHAOS_SENTINEL_RUNS, CHAOS_SENTINEL_SEED)",
        base + runs.saturating_sub(1)
    ));
    let started = Instant::now();
    let mut timings = Timings::default();
    let mut outcomes = Vec::new();
    for i in 0..runs {
        let schedule = Schedule::draw(base + i);
        say(&format!(
            "  run {}/{runs}, {}",
            i + 1,
            schedule.describe(variant)
        ));
        let outcome = one_run(&docker, variant, schedule, &mut timings).await;
        outcomes.push(outcome);
    }
    let name = variant.name();
    let with_overlaps = outcomes
        .iter()
        .filter(|o| o.overlapping_tenures > 0)
        .count();
    let tenures: usize = outcomes.iter().map(|o| o.overlapping_tenures).sum();
    let longest_overlap = outcomes
        .iter()
        .map(|o| o.longest_overlap)
        .max()
        .unwrap_or_default();
    let ownerless = outcomes
        .iter()
        .map(|o| o.ownerless_after)
        .max()
        .unwrap_or_default();
    say(timings.report(name).trim_end());
    say(&format!(
        "chaos timing | {name:<26} | runs {} | runs with overlaps {with_overlaps} | overlapping tenures {tenures} | longest overlap {} | longest a unit had no owner after the failover {} (member deadline {})",
        outcomes.len(),
        if tenures == 0 {
            "-".to_string()
        } else {
            ms(longest_overlap)
        },
        ms(ownerless),
        ms(MEMBER_DEADLINE)
    ));
    let failed: Vec<&Outcome> = outcomes
        .iter()
        .filter(|o| !o.violations.is_empty())
        .collect();
    assert!(
        failed.is_empty(),
        "[{name}] OWNERSHIP VIOLATED in {} of {} runs:\n{}",
        failed.len(),
        outcomes.len(),
        failed
            .iter()
            .map(|o| format!(
                "seed {} (logs kept in {}):\n  {}",
                o.seed,
                o.kept
                    .as_ref()
                    .map(|p| p.display().to_string())
                    .unwrap_or_default(),
                o.violations
                    .iter()
                    .take(20)
                    .cloned()
                    .collect::<Vec<_>>()
                    .join("\n  ")
            ))
            .collect::<Vec<_>>()
            .join("\n")
    );
    say(&format!(
        "[{name}] passed in {}: {} runs, 0 overlapping tenures",
        ms(started.elapsed()),
        outcomes.len()
    ));
}

/// A Redis server or a sentinel: a container on the rig's network.
struct Server {
    name: String,
    ip: String,
    container: ContainerAsync<GenericImage>,
}

struct Replica {
    id: String,
    container: ContainerAsync<GenericImage>,
}

struct Worker {
    id: String,
    process: Option<Process>,
    log: PathBuf,
    runs: usize,
    /// Sent SIGTERM: no longer a member for the expected table.
    draining: bool,
}

/// One run's containers and processes. Fields drop in order: the workers
/// (killed), the containers (removed), the network last.
struct Rig {
    docker: bollard::Docker,
    label: String,
    dir: PathBuf,
    workers: Vec<Worker>,
    replicas: Vec<Replica>,
    sentinels: Vec<Server>,
    /// Every Redis server started: the first master, its replica, the fresh
    /// replica after a promotion.
    redis: Vec<Server>,
    owners: Journal,
    /// The units list from the arming on: (unix µs, units).
    listings: Vec<(u64, Vec<String>)>,
    armed: bool,
    units: Vec<String>,
    work_ms: u64,
    /// Active freeze: (host pid of the replica's process, rules).
    frozen: Option<(u32, Vec<Vec<String>>)>,
    /// Keep the directory (a violation).
    keep: bool,
    net: BridgeNetwork,
}

async fn one_run(
    docker: &bollard::Docker,
    variant: Variant,
    sched: Schedule,
    timings: &mut Timings,
) -> Outcome {
    let keys = Keys::new(TABLE);
    let mut rig = Rig::start(docker, variant, sched).await;
    let label = rig.label.clone();
    // The move: a joiner (worker 4, not started yet) or a drain (worker 0).
    let mover = if sched.join { WORKERS - 1 } else { 0 };
    let before = generation(&rig.redis[0].ip, &keys).await;

    if variant.freezes() && !sched.freeze_after_move {
        rig.freeze().await;
    }
    if sched.join {
        rig.start_worker(mover);
    } else {
        rig.terminate_worker(mover);
    }
    if variant.freezes() && sched.freeze_after_move {
        rig.wait_move_replicated(mover, sched.join).await;
        rig.freeze().await;
    }
    // The first generation the (frozen) replica lacks: the revoking write,
    // or a later one. Without a freeze: the revoking write.
    let master = rig.redis[0].ip.clone();
    let replica = rig.redis[1].ip.clone();
    let kept = if variant.freezes() {
        generation(&replica, &keys).await
    } else {
        before
    };
    let t = Instant::now();
    let (lost, lost_at) = loop {
        let g = generation(&master, &keys).await;
        if g > kept {
            break (g, Instant::now());
        }
        assert!(
            t.elapsed() < Duration::from_secs(15),
            "[{label}] the master wrote no generation above {kept:?} within 15 s of the move"
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    };
    tokio::time::sleep(Duration::from_millis(sched.delay_ms)).await;

    // The state just before the kill.
    let meta = hash(&master, &keys.meta).await;
    let g_master: Option<u64> = meta.get("generation").and_then(|g| g.parse().ok());
    let writer = meta.get("writer").cloned().unwrap_or_default();
    let holder = meta.get("holder").cloned().unwrap_or_default();
    let master_offset = info_field(&master, "master_repl_offset").await;
    let (g_replica, replica_offset) = if variant.freezes() {
        (
            generation(&replica, &keys).await,
            info_field(&replica, "master_repl_offset").await,
        )
    } else {
        (None, None)
    };
    let w = rig.replicas.iter().position(|r| r.id == writer);
    let killed_writer = variant.kills_writer() && w.is_some();
    let t_kill_us = ownership::unix_us_now();
    let t_kill = Instant::now();
    if variant == Variant::RestartEmpty {
        rig.listed(Vec::new());
    }
    {
        let m = docker::signal(&rig.docker, rig.redis[0].container.id(), "SIGKILL");
        match w.filter(|_| killed_writer) {
            Some(w) => {
                let r = docker::signal(&rig.docker, rig.replicas[w].container.id(), "SIGKILL");
                tokio::join!(m, r);
            }
            None => m.await,
        }
    }
    let mut line = format!(
        "    killed the master (generation {g_master:?}, {} after generation {lost:?}, writer {writer}, lease holder {holder:?}){}",
        ms(t_kill.duration_since(lost_at)),
        if killed_writer {
            format!(" and {writer}")
        } else {
            String::new()
        }
    );

    let new_master = if variant == Variant::RestartEmpty {
        rig.redis[0]
            .container
            .start()
            .await
            .unwrap_or_else(|e| panic!("[{label}] could not start the master again: {e}"));
        let ip = rig.net.address_of(&rig.redis[0].name).await;
        rig.redis[0].ip = ip.clone();
        wait_ping(&ip).await;
        let restarted = t_kill.elapsed();
        let left = hash(&ip, &keys.meta).await;
        assert!(
            left.is_empty(),
            "[{label}] the restarted master kept {{T}}:meta: {left:?}"
        );
        rig.write_units(&ip).await;
        timings.record("master back, empty (from its SIGKILL)", restarted);
        line.push_str(&format!(
            "; master back empty after {}, units written again",
            ms(restarted)
        ));
        ip
    } else {
        // Until the master is gone, its last writes could still reach the
        // replica: restore the link only then.
        let t = Instant::now();
        while docker::is_running(&rig.docker, rig.redis[0].container.id()).await {
            assert!(t.elapsed() < Duration::from_secs(10), "the master lives on");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        rig.thaw();
        wait_role_master(&replica, Duration::from_secs(30)).await;
        let promoted = t_kill.elapsed();
        let g_promoted = generation(&replica, &keys).await;
        let promoted_offset = info_field(&replica, "master_repl_offset").await;
        rig.wait_sentinels_name(&replica).await;
        let agreed = t_kill.elapsed();
        timings.record("replica promoted (from the master's SIGKILL)", promoted);
        timings.record(
            "every sentinel names it (from the master's SIGKILL)",
            agreed,
        );
        line.push_str(&format!(
            "; the replica held generation {g_replica:?} (offset {replica_offset:?} of the master's {master_offset:?}), promoted after {} holding generation {g_promoted:?} (offset {promoted_offset:?}), every sentinel names it after {}",
            ms(promoted),
            ms(agreed)
        ));
        assert!(
            g_promoted.is_some() && g_promoted < g_master,
            "[{label}] the promoted replica holds generation {g_promoted:?}, not below the master's last {g_master:?}: no write was lost, the run tested nothing"
        );
        // Redundancy back: a fresh replica of the promoted server (with
        // REDIS_WAIT_REPLICAS=1 nothing counts without one).
        let name = format!("{}-redis-2", rig.prefix());
        let container = cluster::redis_server(&rig.net, &name, Some(&rig.redis[1].name)).await;
        let ip = rig.net.address_of(&name).await;
        rig.redis.push(Server {
            name,
            ip,
            container,
        });
        replica
    };
    say(&line);

    // Converged again, on the master the sentinels name.
    let (first_write, converged) = rig.converge(&new_master, Some(t_kill), variant).await;
    if let Some(d) = first_write {
        timings.record("first table on the new master (from SIGKILL)", d);
    }
    timings.record(
        "every unit owned as the table says (from SIGKILL)",
        converged,
    );

    // The verdict, on the workers' events. The replicas go first: one still
    // holding would move the units of each worker killed here to the next
    // (a refusal is proof), and the end of a tenure is the instant after
    // this thread sent the signal, which a loaded host can delay by
    // milliseconds: an overlap of the teardown's own making.
    for r in &rig.replicas {
        docker::kill_if_running(&rig.docker, r.container.id()).await;
    }
    for i in 0..rig.workers.len() {
        rig.kill_worker(i);
    }
    let report = rig.owners.check(&Bounds { reown: REOWN });
    let end = ownership::unix_us_now();
    let overlaps = overlaps(&report.intervals, end);
    let (after, stretch) = ownerless_after(&report.intervals, &rig.listings, end, t_kill_us);
    timings.record("a unit without owner after the failover (longest)", after);
    let longest_overlap = overlaps.iter().map(|o| o.1).max().unwrap_or(0);
    say(&format!(
        "    converged {} after the kill; ownership: {}; overlapping tenures {}{}; longest a unit had no owner after the failover {} (its whole stretch {})",
        ms(converged),
        report.summary(),
        overlaps.len(),
        if overlaps.is_empty() {
            String::new()
        } else {
            format!(" (longest {} µs)", longest_overlap)
        },
        ms(after),
        ms(stretch)
    ));
    let violations = report.violations.clone();
    for v in violations.iter().take(20) {
        say(&format!("    VIOLATION: {v}"));
    }
    rig.keep =
        !violations.is_empty() || std::env::var("CHAOS_SENTINEL_KEEP").is_ok_and(|v| v == "1");
    let kept = rig.keep.then(|| rig.dir.clone());
    rig.close().await;
    Outcome {
        seed: sched.seed,
        overlapping_tenures: overlaps.len(),
        longest_overlap: Duration::from_micros(longest_overlap),
        ownerless_after: after,
        violations,
        kept,
    }
}

impl Rig {
    async fn start(docker: &bollard::Docker, variant: Variant, sched: Schedule) -> Rig {
        let started = Instant::now();
        let prefix = format!(
            "chaos-{}-{}-{}",
            std::process::id(),
            variant.short(),
            sched.seed
        );
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(&prefix);
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let net = BridgeNetwork::create(docker, &format!("{prefix}-net")).await;

        let master_name = format!("{prefix}-redis-0");
        let master = cluster::redis_server(&net, &master_name, None).await;
        let master_ip = net.address_of(&master_name).await;
        let replica_name = format!("{prefix}-redis-1");
        let replica = cluster::redis_server(&net, &replica_name, Some(&master_name)).await;
        let replica_ip = net.address_of(&replica_name).await;
        cluster::wait_replica_online(&format!("redis://{master_ip}:6379")).await;

        let mut sentinels = Vec::new();
        for i in 1..=3 {
            let name = format!("{prefix}-s{i}");
            let conf_dir = dir.join(format!("sentinel-{i}"));
            write_sentinel_conf(&conf_dir, &master_ip);
            let container = docker::start(
                docker::local(&docker::redis_image(), &name)
                    .with_network(net.name.clone())
                    .with_mount(Mount::bind_mount(
                        conf_dir.display().to_string(),
                        "/conf".to_string(),
                    ))
                    .with_cmd([
                        "/usr/local/bin/redis-server",
                        "/conf/sentinel.conf",
                        "--sentinel",
                    ]),
            )
            .await;
            let ip = net.address_of(&name).await;
            sentinels.push(Server {
                name,
                ip,
                container,
            });
        }

        let mut rig = Rig {
            docker: docker.clone(),
            label: format!("{} seed {}", variant.name(), sched.seed),
            dir: dir.clone(),
            workers: Vec::new(),
            replicas: Vec::new(),
            sentinels,
            redis: vec![
                Server {
                    name: master_name,
                    ip: master_ip.clone(),
                    container: master,
                },
                Server {
                    name: replica_name,
                    ip: replica_ip,
                    container: replica,
                },
            ],
            owners: Journal::default(),
            listings: Vec::new(),
            armed: false,
            units: crate::support::units(UNITS_N),
            work_ms: sched.work_ms,
            frozen: None,
            keep: false,
            net,
        };
        rig.wait_sentinels_ready().await;
        rig.write_units(&master_ip).await;

        for i in 0..WORKERS {
            let id = format!("{}:{}", rig.net.gateway, free_port());
            rig.workers.push(Worker {
                id,
                process: None,
                log: dir.join(format!("worker-{i}.log")),
                runs: 0,
                draining: false,
            });
            // The joiner starts later.
            if !(sched.join && i == WORKERS - 1) {
                rig.start_worker(i);
            }
        }

        let by_name = rig
            .sentinels
            .iter()
            .map(|s| format!("redis://{}:26379", s.name))
            .collect::<Vec<_>>()
            .join(",");
        for i in 1..=3 {
            let id = format!("r{i}");
            let name = format!("{prefix}-{id}");
            // The daemon's defaults but for the names and the log format.
            let mut req = docker::local(&docker::distributor_image(), &name)
                .with_network(rig.net.name.clone())
                .with_env_var("REDIS_URL", by_name.clone())
                .with_env_var("REDIS_SENTINEL_MASTER", MASTER_NAME)
                .with_env_var("REPLICA_ID", id.clone())
                .with_env_var("SERVICES_NAMESPACE", SERVICES)
                .with_env_var("WORKUNITS_NAMESPACE", UNITS)
                .with_env_var("DISTRIBUTION_NAMESPACE", TABLE)
                .with_env_var("LOG_FORMAT", "json")
                .with_env_var("LOG", "info")
                .with_env_var("OTEL_TRACES_EXPORTER", "none")
                .with_env_var("HTTP_ADDR", "0.0.0.0:9090");
            if variant == Variant::LaggingWaitReplicas {
                req = req.with_env_var("REDIS_WAIT_REPLICAS", "1");
            }
            let container = docker::start(req).await;
            rig.replicas.push(Replica { id, container });
        }
        rig.converge(&master_ip, None, variant).await;
        rig.armed = true;
        let units = rig.units.clone();
        rig.owners.arm(&units);
        rig.listings.push((ownership::unix_us_now(), units));
        say(&format!(
            "    converged: master {master_ip}, replica {}, sentinels {:?}, {} workers, {} units, in {}",
            rig.redis[1].ip,
            rig.sentinels.iter().map(|s| &s.ip).collect::<Vec<_>>(),
            rig.running().len(),
            rig.units.len(),
            ms(started.elapsed())
        ));
        rig
    }

    fn prefix(&self) -> String {
        self.dir.file_name().unwrap().to_string_lossy().into_owned()
    }

    /// The units list from now on (only once armed).
    fn listed(&mut self, units: Vec<String>) {
        if self.armed {
            self.owners.listed(&units);
            self.listings.push((ownership::unix_us_now(), units));
        }
    }

    /// The producer writes the units list on the master at `ip`.
    async fn write_units(&mut self, ip: &str) {
        self.listed(self.units.clone());
        let mut c = conn(ip, 6379).await;
        let mut p = redis::pipe();
        p.atomic()
            .del(UNITS)
            .ignore()
            .rpush(UNITS, &self.units)
            .ignore();
        let () = p.query_async(&mut c).await.unwrap();
    }

    fn start_worker(&mut self, i: usize) {
        let urls = self
            .sentinels
            .iter()
            .map(|s| format!("redis://{}:26379", s.ip))
            .collect::<Vec<_>>()
            .join(",");
        let w = &mut self.workers[i];
        assert!(w.process.is_none(), "worker {i} already runs");
        w.runs += 1;
        let events = self.dir.join(format!("worker-{i}.{}.events", w.runs));
        let mut cmd = Command::new(docker::worker_binary());
        cmd.args(["--listen", &w.id, "--events"])
            .args(["--work-ms", &self.work_ms.to_string()])
            .env("REDIS_URL", urls)
            .env("REDIS_SENTINEL_MASTER", MASTER_NAME)
            .env("SERVICES_KEY", SERVICES)
            .env("DISTRIBUTION_NAMESPACE", TABLE)
            .env(
                "RUST_LOG",
                std::env::var("CHAOS_SENTINEL_WORKER_LOG").unwrap_or_else(|_| "info".into()),
            );
        w.process = Some(cluster::spawn_worker(cmd, &w.log, &events));
        self.owners.started(&w.id, events);
    }

    /// SIGTERM: the worker drains and exits by itself.
    fn terminate_worker(&mut self, i: usize) {
        let w = &mut self.workers[i];
        let pid = w
            .process
            .as_ref()
            .and_then(|p| p.child.as_ref())
            .expect("a running worker")
            .id();
        w.draining = true;
        let ok = Command::new("kill")
            .args(["-TERM", &pid.to_string()])
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "kill -TERM {pid} (worker {})", w.id);
    }

    fn kill_worker(&mut self, i: usize) {
        let w = &mut self.workers[i];
        if let Some(mut p) = w.process.take() {
            let at = p.kill().unwrap_or_else(ownership::unix_us_now);
            self.owners.ended(&w.id, Ending::Killed, at);
        }
    }

    /// The members that should be in the table: running, not draining.
    fn running(&self) -> Vec<String> {
        self.workers
            .iter()
            .filter(|w| w.process.is_some() && !w.draining)
            .map(|w| w.id.clone())
            .collect()
    }

    /// Reaps a drained worker that exited; fails on one that died otherwise.
    fn reap(&mut self) {
        for w in &mut self.workers {
            let Some(p) = w.process.as_mut() else {
                continue;
            };
            let child = p.child.as_mut().expect("a child");
            if let Some(status) = child.try_wait().expect("waitpid") {
                assert!(
                    w.draining,
                    "[{}] worker {} died by itself ({status}):\n{}",
                    self.label,
                    w.id,
                    p.tail(20)
                );
                assert!(
                    status.success(),
                    "[{}] drained worker {} exited {status}:\n{}",
                    self.label,
                    w.id,
                    p.tail(20)
                );
                p.child = None;
                w.process = None;
                self.owners
                    .ended(&w.id, Ending::Exited, ownership::unix_us_now());
            }
        }
    }

    /// Waits until the table on the master the sentinels name (`hint` until
    /// they name one) is the solver's for the running workers and the
    /// units, every running worker is listed, the workers' events show each
    /// unit owned by its row's member and nothing else, and a drained
    /// worker exited. Returns (first new table write after `since`, the
    /// convergence), both from `since` (else from now).
    async fn converge(
        &mut self,
        hint: &str,
        since: Option<Instant>,
        variant: Variant,
    ) -> (Option<Duration>, Duration) {
        let keys = Keys::new(TABLE);
        let t0 = since.unwrap_or_else(Instant::now);
        let deadline = Instant::now() + CONVERGE;
        let first_generation = generation(hint, &keys).await;
        let mut first_write = None;
        loop {
            self.reap();
            let master = self
                .named_master()
                .await
                .unwrap_or_else(|| hint.to_string());
            let (table, services, g) = state(&master, &keys).await;
            if first_write.is_none() && since.is_some() && g.is_some() && g != first_generation {
                first_write = Some(t0.elapsed());
            }
            let running = self.running();
            let expected = Fleet::expected(&running, &self.units);
            let want: BTreeMap<String, BTreeSet<String>> = table
                .iter()
                .flat_map(|(m, row)| {
                    row.split(',')
                        .filter(|u| !u.is_empty())
                        .map(move |u| (u.to_string(), [m.clone()].into()))
                })
                .collect();
            // Every running worker listed. A drained worker may stay listed:
            // its deregistration (`LREM`) can be lost with the master, and
            // nothing removes it without `-forget-after`; it has no row.
            let listed: BTreeSet<&String> = services.iter().collect();
            let drained = self
                .workers
                .iter()
                .all(|w| !w.draining || w.process.is_none());
            let done = MatchingTable::from_rows(table.clone()) == expected
                && running.iter().all(|w| listed.contains(w))
                && drained
                && self.owners.owners() == want;
            if done {
                return (first_write, t0.elapsed());
            }
            let last = format!(
                "master {master}, generation {g:?}, {} rows (want {}), services {services:?}, running {running:?}, drained {drained}",
                table.len(),
                expected.rows().len()
            );
            assert!(
                Instant::now() < deadline,
                "[{} {variant:?}] not converged within {CONVERGE:?}: {last}",
                self.label
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The master's address as the first answering sentinel names it.
    async fn named_master(&self) -> Option<String> {
        for s in &self.sentinels {
            if let Some(ip) = master_named_by(&s.ip).await {
                return Some(ip);
            }
        }
        None
    }

    /// Every sentinel monitors the master with its replica and knows the
    /// two other sentinels (a failover needs both).
    async fn wait_sentinels_ready(&self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let mut ready = 0;
            let mut last = String::new();
            for s in &self.sentinels {
                let info: redis::RedisResult<Vec<String>> =
                    sentinel_ask(&s.ip, &["SENTINEL", "MASTER", MASTER_NAME]).await;
                if let Ok(kv) = info {
                    let m: HashMap<&str, &str> = kv
                        .chunks(2)
                        .filter(|c| c.len() == 2)
                        .map(|c| (c[0].as_str(), c[1].as_str()))
                        .collect();
                    if m.get("num-slaves") == Some(&"1")
                        && m.get("num-other-sentinels") == Some(&"2")
                        && m.get("flags") == Some(&"master")
                    {
                        ready += 1;
                    } else {
                        last = format!("{}: {m:?}", s.name);
                    }
                }
            }
            if ready == self.sentinels.len() {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "[{}] sentinels not ready within 30 s: {last}",
                self.label
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Waits until every sentinel names `ip` as the master.
    async fn wait_sentinels_name(&self, ip: &str) {
        let t = Instant::now();
        let deadline = t + Duration::from_secs(30);
        loop {
            let mut agree = 0;
            for s in &self.sentinels {
                if master_named_by(&s.ip).await.is_some_and(|a| a == ip) {
                    agree += 1;
                }
            }
            if agree == self.sentinels.len() {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "[{}] the sentinels do not all name {ip} within 30 s",
                self.label
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Waits until the move's first write reached the replica: the joiner
    /// listed, or the drained worker's report saying so.
    async fn wait_move_replicated(&self, mover: usize, join: bool) {
        let keys = Keys::new(TABLE);
        let id = &self.workers[mover].id;
        let mut c = conn(&self.redis[1].ip, 6379).await;
        let t = Instant::now();
        loop {
            let there = if join {
                let at: Option<i64> = redis::cmd("LPOS")
                    .arg(SERVICES)
                    .arg(id)
                    .query_async(&mut c)
                    .await
                    .unwrap();
                at.is_some()
            } else {
                let report: Option<String> = redis::cmd("HGET")
                    .arg(&keys.members)
                    .arg(id)
                    .query_async(&mut c)
                    .await
                    .unwrap();
                report.is_some_and(|r| r.split(' ').nth(1) == Some("1"))
            };
            if there {
                return;
            }
            assert!(
                t.elapsed() < Duration::from_secs(15),
                "[{}] the move of {id} never reached the replica",
                self.label
            );
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }

    /// Freezes the replica's link to the master: every packet between the
    /// two dropped, in the replica's network namespace.
    async fn freeze(&mut self) {
        let pid = docker::pid(&self.docker, self.redis[1].container.id()).await;
        let m = format!("{}/32", self.redis[0].ip);
        let rules: Vec<Vec<String>> = [["INPUT", "-s"], ["OUTPUT", "-d"]]
            .iter()
            .map(|[chain, dir]| {
                [*chain, *dir, m.as_str(), "-j", "DROP"]
                    .iter()
                    .map(|a| a.to_string())
                    .collect()
            })
            .collect();
        for r in &rules {
            iptables(pid, "-A", r);
        }
        self.frozen = Some((pid, rules));
    }

    fn thaw(&mut self) {
        if let Some((pid, rules)) = self.frozen.take() {
            for r in &rules {
                iptables(pid, "-D", r);
            }
        }
    }

    /// Every container's log into the run's directory.
    async fn save_logs(&self) {
        let mut all: Vec<(&str, &str)> = Vec::new();
        for r in &self.replicas {
            all.push((&r.id, r.container.id()));
        }
        for s in self.sentinels.iter().chain(&self.redis) {
            all.push((&s.name, s.container.id()));
        }
        for (name, id) in all {
            let lines = docker::logs(&self.docker, id).await;
            let text: String = lines
                .iter()
                .map(|l| format!("{}\n", l.text))
                .collect::<String>();
            let _ = std::fs::write(self.dir.join(format!("{name}.log")), text);
        }
    }

    /// Ends the run: logs kept on a violation, else the directory removed;
    /// the containers and the network go when the rig drops.
    async fn close(mut self) {
        self.thaw();
        if self.keep {
            self.save_logs().await;
            say(&format!("    logs kept in {}", self.dir.display()));
        } else {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

impl Drop for Rig {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.thaw();
            let handle = tokio::runtime::Handle::current();
            tokio::task::block_in_place(|| handle.block_on(self.save_logs()));
            say(&format!(
                "[{}] FAILED; logs kept in {}",
                self.label,
                self.dir.display()
            ));
        }
    }
}

fn write_sentinel_conf(dir: &Path, master_ip: &str) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(dir).unwrap();
    // The sentinel runs as the image's user and rewrites its file.
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    let conf = dir.join("sentinel.conf");
    std::fs::write(
        &conf,
        format!(
            "port 26379\nprotected-mode no\n\
             sentinel monitor {MASTER_NAME} {master_ip} 6379 2\n\
             sentinel down-after-milliseconds {MASTER_NAME} 1000\n\
             sentinel failover-timeout {MASTER_NAME} 5000\n"
        ),
    )
    .unwrap();
    std::fs::set_permissions(&conf, std::fs::Permissions::from_mode(0o666)).unwrap();
}

fn iptables(pid: u32, op: &str, rule: &[String]) {
    let mut args = vec![op];
    args.extend(rule.iter().map(String::as_str));
    docker::iptables_in(pid, &args).unwrap_or_else(|e| panic!("{e}"));
}

async fn conn(ip: &str, port: u16) -> redis::aio::MultiplexedConnection {
    let url = format!("redis://{ip}:{port}");
    tokio::time::timeout(Duration::from_secs(2), cluster::connect(&url))
        .await
        .unwrap_or_else(|_| panic!("no connection to {url} within 2 s"))
}

/// The master's address as the sentinel at `sentinel` names it, if it
/// answers.
async fn master_named_by(sentinel: &str) -> Option<String> {
    let addr: Option<(String, String)> = sentinel_ask(
        sentinel,
        &["SENTINEL", "get-master-addr-by-name", MASTER_NAME],
    )
    .await
    .ok()
    .flatten();
    addr.map(|(ip, _)| ip)
}

async fn sentinel_ask<T: redis::FromRedisValue>(ip: &str, args: &[&str]) -> redis::RedisResult<T> {
    let url = format!("redis://{ip}:26379");
    tokio::time::timeout(Duration::from_millis(500), crate::support::ask(&url, args))
        .await
        .unwrap_or_else(|_| {
            Err(redis::RedisError::from((
                redis::ErrorKind::Io,
                "sentinel timed out",
            )))
        })
}

async fn hash(ip: &str, key: &str) -> HashMap<String, String> {
    let mut c = conn(ip, 6379).await;
    redis::cmd("HGETALL")
        .arg(key)
        .query_async(&mut c)
        .await
        .unwrap_or_else(|e| panic!("HGETALL {key} on {ip}: {e}"))
}

async fn generation(ip: &str, keys: &Keys) -> Option<u64> {
    hash(ip, &keys.meta)
        .await
        .get("generation")
        .and_then(|g| g.parse().ok())
}

/// The table, the services list and the generation on the server at `ip`
/// (empty when it does not answer: a failover).
async fn state(ip: &str, keys: &Keys) -> (BTreeMap<String, String>, Vec<String>, Option<u64>) {
    let read = async {
        let mut c = redis::Client::open(format!("redis://{ip}:6379"))
            .ok()?
            .get_multiplexed_async_connection()
            .await
            .ok()?;
        let mut p = redis::pipe();
        p.atomic()
            .hgetall(&keys.table)
            .lrange(SERVICES, 0, -1)
            .hget(&keys.meta, "generation");
        let (table, services, g): (HashMap<String, String>, Vec<String>, Option<u64>) =
            p.query_async(&mut c).await.ok()?;
        Some((table.into_iter().collect(), services, g))
    };
    tokio::time::timeout(Duration::from_millis(500), read)
        .await
        .ok()
        .flatten()
        .unwrap_or_default()
}

async fn info_field(ip: &str, field: &str) -> Option<u64> {
    let mut c = conn(ip, 6379).await;
    let info: String = redis::cmd("INFO")
        .arg("replication")
        .query_async(&mut c)
        .await
        .ok()?;
    info.lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .and_then(|v| v.trim().parse().ok())
}

async fn wait_ping(ip: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let ok = async {
            let mut c = tokio::time::timeout(
                Duration::from_millis(300),
                redis::Client::open(format!("redis://{ip}:6379"))
                    .ok()?
                    .get_multiplexed_async_connection(),
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
        assert!(Instant::now() < deadline, "redis at {ip} did not answer");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Waits until the server at `ip` says `role:master`.
async fn wait_role_master(ip: &str, limit: Duration) {
    let t = Instant::now();
    loop {
        let role = async {
            let mut c = redis::Client::open(format!("redis://{ip}:6379"))
                .ok()?
                .get_multiplexed_async_connection()
                .await
                .ok()?;
            let info: String = redis::cmd("INFO")
                .arg("replication")
                .query_async(&mut c)
                .await
                .ok()?;
            Some(info.contains("role:master"))
        };
        if tokio::time::timeout(Duration::from_millis(300), role)
            .await
            .ok()
            .flatten()
            == Some(true)
        {
            return;
        }
        assert!(t.elapsed() < limit, "{ip} not promoted within {limit:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Every pair of tenures of one unit by different members that overlap:
/// (unit, overlap in µs); open tenures run to `end`.
fn overlaps(intervals: &[Interval], end: u64) -> Vec<(String, u64)> {
    let mut by_unit: BTreeMap<&str, Vec<&Interval>> = BTreeMap::new();
    for i in intervals {
        by_unit.entry(&i.unit).or_default().push(i);
    }
    let mut found = Vec::new();
    for (unit, is) in by_unit {
        for (n, a) in is.iter().enumerate() {
            for b in &is[n + 1..] {
                if a.member == b.member {
                    continue;
                }
                let from = a.from_us.max(b.from_us);
                let to = a.to_us.unwrap_or(end).min(b.to_us.unwrap_or(end));
                if to > from {
                    found.push((unit.to_string(), to - from));
                }
            }
        }
    }
    found
}

/// The longest time a listed unit had no owner after `since`: over every
/// ownerless stretch of a listed unit that ends after `since`, the part
/// after `since` (and the whole stretch of that longest one).
fn ownerless_after(
    intervals: &[Interval],
    listings: &[(u64, Vec<String>)],
    end: u64,
    since: u64,
) -> (Duration, Duration) {
    let mut by_unit: BTreeMap<&str, Vec<&Interval>> = BTreeMap::new();
    for i in intervals {
        by_unit.entry(&i.unit).or_default().push(i);
    }
    let all: BTreeSet<&String> = listings.iter().flat_map(|(_, u)| u).collect();
    let mut best = (0u64, 0u64);
    for unit in all {
        let mut is = by_unit.remove(unit.as_str()).unwrap_or_default();
        is.sort_by_key(|i| i.from_us);
        // Listed periods.
        let mut periods: Vec<(u64, u64)> = Vec::new();
        for (n, (at, units)) in listings.iter().enumerate() {
            let to = listings.get(n + 1).map_or(end, |(t, _)| *t).max(*at);
            if units.contains(unit) {
                match periods.last_mut() {
                    Some(p) if p.1 == *at => p.1 = to,
                    _ => periods.push((*at, to)),
                }
            }
        }
        let mut gap = |a: u64, b: u64| {
            if b > since {
                let after = b - a.max(since);
                if after > best.0 {
                    best = (after, b - a);
                }
            }
        };
        for (from, to) in periods {
            let mut covered = from;
            for i in &is {
                let (a, b) = (i.from_us, i.to_us.unwrap_or(u64::MAX));
                if b <= covered || a >= to {
                    continue;
                }
                if a > covered {
                    gap(covered, a);
                }
                covered = covered.max(b);
            }
            if covered < to {
                gap(covered, to);
            }
        }
    }
    (Duration::from_micros(best.0), Duration::from_micros(best.1))
}
