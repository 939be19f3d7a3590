//! The deterministic simulation of a fleet: the real lease machine and the
//! real holder cycle in two or three replicas, members running the real
//! `core::ownership`, an in-memory Redis that follows the scripts'
//! semantics (`edge::memory`), and a network and clocks that the seed
//! drives. Time is tokio's paused clock on one thread: a run takes no wall
//! time beyond its CPU, and a seed replays exactly.
//!
//! Faults, drawn from the seed, each counted by kind (`SeedOutcome::injected`,
//! printed by `scripts/simulate`): Redis calls lost before they apply,
//! applied with the reply lost, or acknowledged by too few replicas; member
//! reads, report and statement writes that fail; members killed and
//! restarted on the same address, paused, cut off from the holder's pings;
//! replicas killed and restarted (holder failovers); Redis restarted, with
//! its data (`redis-data-loss`) or without; a failover to a replica that
//! lagged (`lagging-failover`: the keyspace as it was 5 ms to 1.5 s before,
//! a new server, every connection closed); the members' reports or the
//! units in transit overwritten by an edit (`state-overwrite`), and other
//! coordination keys of the wrong type; units and members coming and going;
//! member clocks running up to 5 % fast or slow.
//!
//! Invariants, checked throughout, with no exemption for lost writes:
//! - no unit is worked on by two members, judged by the members' own holds
//!   (`World::check_overlap`, at every acquisition);
//! - a unit acquired from another member gets a higher fencing token;
//! - once the faults stop, every listed unit is owned again within the
//!   bound (`Run::quiet`).

mod drivers;
mod replica;
mod runner;
mod world;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use self::drivers::{drive_members, keep_copies};
use self::replica::ReplicaSettings;
pub use self::runner::{Batch, run_seeds, shrink};
pub use self::world::Violation;
use self::world::{Rng, SimMember, World};
use crate::core::balance::{Balance, Tolerance};
use crate::core::keys::Keys;
use crate::core::lease::LeaseTiming;
use crate::core::ownership::Ownership;
use crate::core::table::Assignment;
use crate::edge::clock;
use crate::edge::clock::WallClock;
use crate::edge::memory::{Data, MemoryStore, Server};
use crate::edge::redis::ListLimits;

/// The shape of one run (the same for every seed; the seed draws the rest).
#[derive(Debug, Clone, Copy)]
pub struct Run {
    /// How long faults are injected.
    pub faults: Duration,
    /// How long the fleet then runs without faults before liveness is
    /// judged: every unit must be owned by then.
    pub quiet: Duration,
}

impl Default for Run {
    fn default() -> Run {
        Run {
            faults: Duration::from_secs(20),
            quiet: Duration::from_secs(20),
        }
    }
}

/// What a run leaves out of its seed's schedule, to shrink a failing seed
/// ([`shrink`]). Every random draw is made as without it, so what stays
/// happens as it did (until the fleet's own state diverges).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Omit {
    /// Schedule events left out, by index (bit `i`: the `i`th event).
    pub events: u128,
    /// No Redis call lost, applied unanswered or short of replicas.
    pub store_faults: bool,
    /// No member read or report write fails.
    pub member_faults: bool,
}

impl Omit {
    fn event(&self, i: usize) -> bool {
        i < 128 && self.events & (1 << i) != 0
    }

    /// What is left out, for the trace.
    pub fn describe(&self) -> String {
        let events: Vec<String> = (0..128)
            .filter(|i| self.event(*i))
            .map(|i| i.to_string())
            .collect();
        format!(
            "omitted: events [{}], store faults {}, member faults {}",
            events.join(" "),
            if self.store_faults { "off" } else { "on" },
            if self.member_faults { "off" } else { "on" },
        )
    }
}

/// What one seed did.
#[derive(Debug, Clone)]
pub struct SeedOutcome {
    pub seed: u64,
    /// How many events the schedule drew (those omitted included).
    pub events: usize,
    /// With a poison unit: the crashes it caused.
    pub poison: Option<usize>,
    /// Units quarantined at the end that are not the poison unit (false
    /// positives of the quarantine, under this run's failures).
    pub healthy_quarantined: usize,
    /// Units listed at the end.
    pub units_listed: usize,
    pub violations: Vec<Violation>,
    /// The faults injected, by kind.
    pub injected: BTreeMap<&'static str, usize>,
    /// The schedule and what followed, one line per event.
    pub trace: Vec<String>,
}

const UNIX_BASE_MS: u64 = 1_700_000_000_000;

/// The quarantine of every seed: three deaths within five seconds. Members
/// here fail (killed, paused, cut off) every few seconds, hundreds of times
/// a real fleet's rate, and a death is seen up to a second after it: the
/// window is scaled to that, long enough for a poison unit's three crashes
/// (a second apart: its victims restart after one), and the false
/// positives `scripts/simulate` reports are this pace's.
pub const SIM_QUARANTINE: crate::core::quarantine::QuarantineRule =
    crate::core::quarantine::QuarantineRule {
        after: 3,
        window_ms: 5_000,
        probation_ms: 1_000,
    };

/// Runs one seed to its end.
pub fn run_seed(seed: u64, run: Run) -> SeedOutcome {
    run_seed_omitting(seed, run, Omit::default())
}

/// Runs one seed, leaving out `omit`.
pub fn run_seed_omitting(seed: u64, run: Run, omit: Omit) -> SeedOutcome {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("a runtime");
    crate::coordinator::holder::run_inline();
    rt.block_on(simulate(seed, run, omit))
}

async fn simulate(seed: u64, run: Run, omit: Omit) -> SeedOutcome {
    // Timers fire on the time driver's millisecond grid, which starts a
    // random fraction of a millisecond away from the paused clock: start on
    // the grid, so that every instant of the run is the same from run to run.
    tokio::time::sleep(Duration::from_millis(1)).await;
    let start = clock::now();
    let wall = WallClock::Simulated {
        base_ms: UNIX_BASE_MS,
        base: start,
    };
    let mut rng = Rng::new(seed);
    let server = Server::new(UNIX_BASE_MS);
    let faulty = Arc::new(AtomicBool::new(true));
    let store_faults = 5 + rng.below(25);
    let store_injected: Arc<Mutex<BTreeMap<&'static str, usize>>> = Arc::default();
    {
        let mut s = server.lock().expect("server lock");
        s.clock = Some(wall);
        let mut frng = Rng::new(seed ^ 0x5eed);
        let on = Arc::clone(&faulty);
        let counts = Arc::clone(&store_injected);
        s.faults = Some(Box::new(move |op, _client| {
            if on.load(Ordering::Relaxed) && !omit.store_faults {
                let f = World::store_fault(&mut frng, op, store_faults);
                let kind = match f {
                    crate::edge::memory::Fault::None => None,
                    crate::edge::memory::Fault::Lost => Some("redis-call-lost"),
                    crate::edge::memory::Fault::ReplyLost => Some("redis-reply-lost"),
                    crate::edge::memory::Fault::NotDurable => Some("redis-not-durable"),
                };
                if let Some(k) = kind {
                    *counts.lock().expect("counts lock").entry(k).or_default() += 1;
                }
                f
            } else {
                crate::edge::memory::Fault::None
            }
        }));
    }
    let keys = Keys::new("sim");
    let (services, units_key) = ("svc".to_string(), "units".to_string());
    // Balance by cost in a quarter of the seeds, from a stream of its own:
    // the other draws, and so every count-mode seed, stay as they were.
    let mut crng = Rng::new(seed ^ 0xc057);
    let balance = if crng.chance(250) {
        Balance::Cost(Tolerance::from_bp(crng.below(3_000) as u32).expect("within 100 %"))
    } else if crng.chance(150) {
        Balance::Load(Tolerance::from_bp(crng.below(3_000) as u32).expect("within 100 %"))
    } else {
        Balance::Count
    };
    // Operator controls in a fifth of the seeds, from a stream of their own
    // (as the costs: every other seed stays as it was).
    let mut krng = Rng::new(seed ^ 0xc047);
    let controls_seed = krng.chance(200);
    let n_members = 3 + rng.below(4) as usize;
    let n_units = 4 + rng.below(12) as usize;
    let long_deadline = rng.chance(400);
    let forget_after = rng.chance(300).then(|| Duration::from_millis(1_500));
    // A poison unit in a tenth of the seeds, from a stream of its own (every
    // other seed stays as it was); the quarantine runs in every seed, its
    // window scaled to the run's pace of failures.
    let poison = Rng::new(seed ^ 0x9015)
        .chance(100)
        .then(|| "u1".to_string());
    let settings = ReplicaSettings {
        lease: LeaseTiming {
            ttl: Duration::from_millis(1_500),
            renew_interval: Duration::from_millis(300),
            renew_deadline: Duration::from_millis(1_000),
            retry_interval: Duration::from_millis(150),
        },
        poll_interval: Duration::from_millis(200),
        ping_timeout: Duration::from_millis(100),
        failure_threshold: 1 + rng.below(2) as u32,
        // Short waits make many handoffs; long ones keep units in transit
        // across failovers and edits.
        handoff_delay: if rng.chance(500) {
            rng.millis(300, 1_500)
        } else {
            rng.millis(2_000, 8_000)
        },
        forget_after,
        quarantine: SIM_QUARANTINE,
        assignment: if rng.chance(500) {
            Assignment::Sticky
        } else {
            Assignment::Ring
        },
        balance,
        // -join-delay in a quarter of the seeds (a stream of its own).
        join_delay: {
            let mut jrng = Rng::new(seed ^ 0x101d);
            if jrng.chance(250) {
                jrng.millis(200, 3_000)
            } else {
                Duration::ZERO
            }
        },
        wall,
    };
    let mut members = Vec::new();
    for i in 0..n_members {
        let deadline = if long_deadline && i == 0 {
            Duration::from_secs(6)
        } else {
            rng.millis(600, 1_500)
        };
        let rate = 0.95 + rng.below(101) as f64 / 1000.0;
        members.push(SimMember {
            name: format!("m{i}:{}", 7000 + i),
            alive: true,
            paused_until: None,
            cut_until: None,
            ownership: Ownership::new(deadline, 1, start),
            rate,
            base: start,
            conn: None,
            stopping: Default::default(),
            ends: Default::default(),
            since: Default::default(),
            reported_at: None,
            deadline,
            read_every: rng.millis(50, 250),
            stop_takes: rng.millis(0, 200),
            next_read: start + rng.millis(0, 200),
            next_refresh: start + rng.millis(0, 5_000),
            draining: false,
        });
    }
    {
        let mut s = server.lock().expect("server lock");
        let now = s.tick();
        let names: Vec<Vec<u8>> = members
            .iter()
            .map(|m| m.name.clone().into_bytes())
            .collect();
        let units: Vec<Vec<u8>> = (0..n_units).map(|u| format!("u{u}").into_bytes()).collect();
        s.keyspace
            .push(&services, &names, true, now)
            .expect("a list");
        s.keyspace
            .push(&units_key, &units, false, now)
            .expect("a list");
        if let Balance::Load(_) = balance {
            // Loads as members report them (each its own field, units
            // possibly reported twice: the newest wins), and one field that
            // does not parse. Some are dated out of bounds (`core::load`):
            // killed long ago, or by a clock two minutes ahead, counted
            // once the sim's clock gets within a minute of it. Nobody
            // writes them again: the others turn too old five minutes on.
            let mut loads: Vec<(Vec<u8>, Vec<u8>)> = (0..n_members)
                .map(|i| {
                    let mut pairs: Vec<String> = Vec::new();
                    for u in 0..20 {
                        if crng.chance(300) {
                            pairs.push(format!("u{u}={}", crng.below(200)));
                        }
                    }
                    let at = match crng.below(10) {
                        0 => now - 400_000,
                        1 => now + 120_000,
                        _ => now - crng.below(100),
                    };
                    let value = format!("{at} {}", pairs.join(","));
                    (members[i].name.clone().into_bytes(), value.into_bytes())
                })
                .collect();
            loads.push((b"other:1".to_vec(), b"junk".to_vec()));
            s.keyspace.hset(&keys.loads, &loads, now).expect("a hash");
        }
        if let Balance::Cost(_) = balance {
            // Costs 1 to 50, a few hot; one unreadable, one never listed.
            let mut costs: Vec<(Vec<u8>, Vec<u8>)> = (0..20)
                .map(|u| {
                    let most = if crng.chance(100) { 500 } else { 50 };
                    let c = 1 + crng.below(most);
                    (format!("u{u}").into_bytes(), c.to_string().into_bytes())
                })
                .collect();
            costs.push((b"u3".to_vec(), b"junk".to_vec()));
            costs.push((b"other".to_vec(), b"7".to_vec()));
            s.keyspace.hset(&keys.costs, &costs, now).expect("a hash");
        }
    }
    let world = Arc::new(Mutex::new(World {
        start,
        rng: Rng::new(seed ^ 0xbeef),
        server: Arc::clone(&server),
        keys: keys.clone(),
        services,
        units_key,
        members,
        tokens: Default::default(),
        violations: Vec::new(),
        member_faults: if omit.member_faults {
            rng.below(60);
            0
        } else {
            20 + rng.below(60)
        },
        trace: Vec::new(),
        acked: false,
        holdings: Vec::new(),
        flushes: Vec::new(),
        seen_overlaps: Default::default(),
        injected: BTreeMap::new(),
        copies: Default::default(),
        poison: poison.clone(),
        restart_at: Default::default(),
        poison_kills: 0,
    }));
    world.lock().expect("world lock").log(
        start,
        format!(
            "seed {seed}: {n_members} members, {n_units} units, store faults {store_faults}‰, \
             handoff delay {:?}, forget after {forget_after:?}, {:?}, {:?}, join delay {:?}, \
             poison unit {poison:?}",
            settings.handoff_delay, settings.assignment, settings.balance, settings.join_delay
        ),
    );

    let n_replicas = 2 + rng.below(2) as usize;
    let mut replicas: Vec<(MemoryStore, tokio::task::JoinHandle<()>)> = (0..n_replicas)
        .map(|r| start_replica(r, &server, &world, &settings))
        .collect();
    let members_task = tokio::spawn(drive_members(Arc::clone(&world)));
    let copies_task = tokio::spawn(keep_copies(Arc::clone(&world)));

    // The schedule of faults.
    let faults_end = start + run.faults;
    let mut events = 0;
    while clock::now() < faults_end {
        tokio::time::sleep(rng.millis(200, 1_500)).await;
        let now = clock::now();
        let mut w = world.lock().expect("world lock");
        let n = w.members.len();
        let i = rng.below(n as u64) as usize;
        let kind = rng.below(100);
        let omitted = omit.event(events);
        events += 1;
        if omitted {
            // The event's own draws, as if it happened.
            match kind {
                20..=59 | 72..=81 => {
                    rng.next();
                }
                // A restart that loses the data draws when its lists come
                // back.
                60..=62 if rng.chance(500) => {
                    rng.next();
                }
                63..=64 => {
                    rng.next();
                }
                65..=71 => {
                    rng.next();
                    rng.next();
                }
                _ => {}
            }
            continue;
        }
        match kind {
            0..=19 => {
                if w.members[i].alive {
                    w.injected("member-killed");
                    w.kill_member(i, now);
                } else {
                    w.injected("member-restarted");
                    w.restart_member(i, now);
                }
            }
            20..=34 => {
                let d = rng.millis(200, 4_000);
                let name = w.members[i].name.clone();
                w.injected("member-paused");
                w.members[i].paused_until = Some(now + d);
                w.log(now, format!("{name} paused for {d:?}"));
            }
            35..=44 => {
                let d = rng.millis(200, 3_000);
                let name = w.members[i].name.clone();
                w.injected("member-cut-off");
                w.members[i].cut_until = Some(now + d);
                w.log(now, format!("{name} cut off from pings for {d:?}"));
            }
            45..=59 => {
                w.injected("replica-killed");
                drop(w);
                let r = rng.below(replicas.len() as u64) as usize;
                let (store, task) = &replicas[r];
                task.abort();
                store.close();
                world
                    .lock()
                    .expect("world lock")
                    .log(now, format!("replica r{r} killed and restarted"));
                replicas[r] = start_replica(r, &server, &world, &settings);
                continue;
            }
            63..=64 => {
                // A failover to a replica that lagged: the writes of the
                // last `lag` are lost (the lease's, the table's, the
                // members' reports and registrations alike).
                let lag = rng.millis(5, 1_500);
                let copy = w
                    .copies
                    .iter()
                    .rev()
                    .find(|(at, _)| *at + lag <= now)
                    .or(w.copies.front())
                    .map(|(at, k)| (*at, k.clone()));
                if let Some((at, copy)) = copy {
                    w.injected("lagging-failover");
                    let behind = now - at;
                    server.lock().expect("server lock").fail_over_to(&copy);
                    w.flushes.push(now);
                    w.log(
                        now,
                        format!(
                            "redis failed over to a replica {behind:?} behind (writes since lost)"
                        ),
                    );
                }
            }
            60..=62 => {
                let lose = rng.chance(500);
                let lists = {
                    let mut s = server.lock().expect("server lock");
                    let at = s.tick();
                    let read =
                        |s: &mut Server, k: &str| s.keyspace.lrange(k, at).unwrap_or_default();
                    let lists = [
                        (w.services.clone(), read(&mut s, &w.services)),
                        (w.units_key.clone(), read(&mut s, &w.units_key)),
                    ];
                    s.restart(lose);
                    lists
                };
                w.log(now, format!("redis restarted (data lost: {lose})"));
                w.injected(if lose {
                    "redis-data-loss"
                } else {
                    "redis-restart"
                });
                if lose {
                    w.flushes.push(now);
                    // The operator's configuration puts the lists back a
                    // little later (members and units as they were).
                    drop(w);
                    let server = Arc::clone(&server);
                    let after = rng.millis(300, 2_000);
                    tokio::spawn(async move {
                        tokio::time::sleep(after).await;
                        let mut s = server.lock().expect("server lock");
                        let at = s.tick();
                        for (key, entries) in lists {
                            if s.keyspace.type_of(&key, at) == "none" {
                                let _ = s.keyspace.push(&key, &entries, false, at);
                            }
                        }
                    });
                    continue;
                }
            }
            65..=71 => {
                let k = w.keys.clone();
                let key = [&k.liveness, &k.transit, &k.suspects, &k.members, &k.meta]
                    [rng.below(5) as usize]
                    .clone();
                let mut s = server.lock().expect("server lock");
                s.keyspace.put(&key, Data::Str(b"oops".to_vec()));
                drop(s);
                w.log(now, format!("{key} set to a string"));
                // Handoff state an edit destroys (the reports, until each
                // member writes its own again; the units in transit), or a
                // derived key of the wrong type.
                w.injected(if key == k.members || key == k.transit {
                    "state-overwrite"
                } else {
                    "key-wrong-type"
                });
                drop(w);
                fix_later(&server, key, rng.millis(300, 3_000));
                continue;
            }
            72..=81 => {
                let unit = format!("u{}", rng.below(20));
                let units_key = w.units_key.clone();
                let mut s = server.lock().expect("server lock");
                let at = s.tick();
                let listed = s.keyspace.lpos(&units_key, unit.as_bytes(), at) == Ok(Some(0))
                    || s.keyspace
                        .lpos(&units_key, unit.as_bytes(), at)
                        .ok()
                        .flatten()
                        .is_some();
                if listed {
                    let _ = s.keyspace.lrem_all(&units_key, unit.as_bytes(), at);
                } else {
                    let _ = s
                        .keyspace
                        .push(&units_key, &[unit.clone().into_bytes()], false, at);
                }
                drop(s);
                w.injected("unit-churn");
                w.log(
                    now,
                    format!("unit {unit} {}", if listed { "removed" } else { "added" }),
                );
            }
            _ if balance != Balance::Count && crng.chance(700) => {
                // An edit of the costs or loads (their own stream, as
                // above): a unit's cost, or a member's load report, changes,
                // or the key is overwritten with a string and fixed later.
                let key = match balance {
                    Balance::Load(_) => w.keys.loads.clone(),
                    _ => w.keys.costs.clone(),
                };
                let mut s = server.lock().expect("server lock");
                let at = s.tick();
                w.injected("balance-input-edit");
                if crng.chance(200) {
                    s.keyspace.put(&key, Data::Str(b"oops".to_vec()));
                    drop(s);
                    w.log(now, format!("{key} set to a string"));
                    drop(w);
                    fix_later(&server, key, crng.millis(300, 3_000));
                    continue;
                }
                let unit = format!("u{}", crng.below(20));
                let most = if crng.chance(100) { 500 } else { 50 };
                let cost = 1 + crng.below(most);
                let (field, value) = match balance {
                    Balance::Load(_) => {
                        let member = w.members[i].name.clone();
                        (member, format!("{} {unit}={cost}", 2_000 + at))
                    }
                    _ => (unit.clone(), cost.to_string()),
                };
                let _ = s.keyspace.hset(
                    &key,
                    &[(field.clone().into_bytes(), value.clone().into_bytes())],
                    at,
                );
                drop(s);
                w.log(now, format!("{key} {field} set to {value:?}"));
            }
            _ if controls_seed && krng.chance(900) => {
                // An operator's control: a member cordoned, drained or
                // uncordoned, a unit pinned or unpinned, a pause or a
                // resume, an entry nobody can read, or the key overwritten
                // and fixed later.
                let key = w.keys.controls.clone();
                w.injected("operator-control");
                let member = w.members[krng.below(n as u64) as usize].name.clone();
                let mut s = server.lock().expect("server lock");
                let at = s.tick();
                let on_member = format!("member:{member}");
                let on_unit = format!("pin:u{}", krng.below(20));
                let (field, value) = match krng.below(10) {
                    0 | 1 => (on_member, Some(format!("cordon {at}"))),
                    2 => (on_member, Some(format!("drain {at}"))),
                    3 | 4 => (on_member, None),
                    5 | 6 => (on_unit, Some(member)),
                    7 => (on_unit, None),
                    8 => (
                        "pause".to_string(),
                        krng.chance(500).then(|| at.to_string()),
                    ),
                    _ if krng.chance(500) => ("member:junk".to_string(), Some("evict".to_string())),
                    _ => {
                        s.keyspace.put(&key, Data::Str(b"oops".to_vec()));
                        drop(s);
                        w.log(now, format!("{key} set to a string"));
                        drop(w);
                        fix_later(&server, key, krng.millis(300, 3_000));
                        continue;
                    }
                };
                let f = field.clone().into_bytes();
                let _ = match &value {
                    Some(v) => s.keyspace.hset(&key, &[(f, v.clone().into_bytes())], at),
                    None => s.keyspace.hdel(&key, &[f], at),
                };
                drop(s);
                w.log(now, format!("{key} {field} set to {value:?}"));
            }
            _ => {
                // A time without faults.
            }
        }
    }
    faulty.store(false, Ordering::Relaxed);
    {
        let mut w = world.lock().expect("world lock");
        let now = clock::now();
        w.member_faults = 0;
        for i in 0..w.members.len() {
            if !w.members[i].alive {
                w.restart_member(i, now);
            }
            w.members[i].paused_until = None;
            w.members[i].cut_until = None;
        }
        // The operator removes every stray value left (a failover to a
        // replica that lagged can bring back one already removed).
        {
            let mut s = server.lock().expect("server lock");
            let at = s.tick();
            let stray: Vec<String> = s
                .keyspace
                .dump(at)
                .into_iter()
                .filter(|(_, (d, _))| *d == Data::Str(b"oops".to_vec()))
                .map(|(k, _)| k)
                .collect();
            for k in stray {
                s.keyspace.del(&k, at);
            }
        }
        w.log(now, "faults end: every member runs".into());
    }
    let quiet_end = clock::now() + run.quiet;
    // The keys an edit broke were fixed by then; re-list every member (a
    // forgotten one re-registers, as `Member` does at start). The operator
    // lifts every cordon and drain (pins and a pause stay: every unit has
    // an owner under them).
    {
        let w = world.lock().expect("world lock");
        let mut s = server.lock().expect("server lock");
        let at = s.tick();
        let controls = w.keys.controls.clone();
        if let Ok(pairs) = s.keyspace.hgetall(&controls, at) {
            let lifted: Vec<Vec<u8>> = pairs
                .into_iter()
                .map(|(f, _)| f)
                .filter(|f| f.starts_with(b"member:"))
                .collect();
            let _ = s.keyspace.hdel(&controls, &lifted, at);
        }
        for m in &w.members {
            if s.keyspace
                .lpos(&w.services, m.name.as_bytes(), at)
                .ok()
                .flatten()
                .is_none()
            {
                let _ = s
                    .keyspace
                    .push(&w.services, &[m.name.clone().into_bytes()], true, at);
            }
        }
    }
    tokio::time::sleep_until(quiet_end.into()).await;
    let mut w = world.lock().expect("world lock");
    let now = clock::now();
    w.check_overlap(now);
    let units = w.units();
    let units_listed = units.len();
    // Quarantined units have no owner (checked as every other unit's one
    // owner); a quarantine of a unit that is not the poison is a false
    // positive, counted; a poison unit still listed must be quarantined.
    let quarantined: std::collections::BTreeSet<String> = {
        let mut s = server.lock().expect("server lock");
        let at = s.tick();
        s.keyspace
            .hgetall(&w.keys.quarantine, at)
            .unwrap_or_default()
            .into_iter()
            .map(|(f, _)| String::from_utf8_lossy(&f).into_owned())
            .collect()
    };
    let healthy_quarantined = quarantined
        .iter()
        .filter(|u| w.poison.as_ref() != Some(*u) && units.contains(*u))
        .count();
    if let Some(p) = w.poison.clone()
        && units.contains(&p)
        && !quarantined.contains(&p)
    {
        let what = format!(
            "poison unit {p} not quarantined after {:?} without other faults ({} crashes)",
            run.quiet, w.poison_kills
        );
        let at_ms = w.ms(now);
        w.trace.push(format!("{at_ms:>6} ms  VIOLATION {what}"));
        w.violations.push(Violation { at_ms, what });
    }
    for unit in units {
        let expected = usize::from(!quarantined.contains(&unit));
        let owners: Vec<String> = w
            .members
            .iter()
            .filter(|m| m.working(now).contains(&unit))
            .map(|m| m.name.clone())
            .collect();
        if owners.len() != expected {
            let what = format!(
                "unit {unit} has {} owners {:?} (quarantined: {}) after {:?} without faults",
                owners.len(),
                owners,
                expected == 0,
                run.quiet
            );
            let at_ms = w.ms(now);
            w.trace.push(format!("{at_ms:>6} ms  VIOLATION {what}"));
            w.violations.push(Violation { at_ms, what });
        }
    }
    members_task.abort();
    copies_task.abort();
    for (_, task) in &replicas {
        task.abort();
    }
    if omit != Omit::default() {
        w.trace.insert(0, omit.describe());
    }
    let mut injected = std::mem::take(&mut w.injected);
    for (k, n) in store_injected.lock().expect("counts lock").iter() {
        *injected.entry(k).or_default() += n;
    }
    SeedOutcome {
        seed,
        events,
        poison: w.poison.as_ref().map(|_| w.poison_kills),
        healthy_quarantined,
        units_listed,
        violations: w.violations.clone(),
        injected,
        trace: std::mem::take(&mut w.trace),
    }
}

fn start_replica(
    r: usize,
    server: &Arc<Mutex<Server>>,
    world: &Arc<Mutex<World>>,
    settings: &ReplicaSettings,
) -> (MemoryStore, tokio::task::JoinHandle<()>) {
    let store = MemoryStore::connect(server, "sim").with_limits(ListLimits {
        entries: 10_000,
        bytes: 1 << 24,
    });
    let task = tokio::spawn(replica::run(
        format!("r{r}"),
        store.clone(),
        Arc::clone(world),
        settings.clone(),
    ));
    (store, task)
}

/// An operator notices a key overwritten with a string and deletes it
/// `after` a while: only if it is still the stray string (a holder may have
/// written the key again meanwhile).
fn fix_later(server: &Arc<Mutex<Server>>, key: String, after: Duration) {
    let server = Arc::clone(server);
    tokio::spawn(async move {
        tokio::time::sleep(after).await;
        let mut s = server.lock().expect("server lock");
        let at = s.tick();
        if s.keyspace.get(&key, at) == Ok(Some(b"oops".to_vec())) {
            s.keyspace.del(&key, at);
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A shorter run than the default, for tests that run a seed twice.
    const SHORT: Run = Run {
        faults: Duration::from_secs(8),
        quiet: Duration::from_secs(10),
    };

    #[test]
    fn a_seed_replays_exactly() {
        let run = SHORT;
        let a = run_seed(7, run);
        let b = run_seed(7, run);
        assert_eq!(a.trace, b.trace);
        assert!(a.trace.len() > 10, "{:?}", a.trace);
    }

    #[test]
    fn an_omitted_event_leaves_every_other_draw_as_it_was() {
        let run = SHORT;
        let whole = run_seed(7, run);
        assert!(whole.events > 3);
        for events in [1, 0b110, u128::MAX] {
            let omit = Omit {
                events,
                store_faults: true,
                member_faults: true,
            };
            let part = run_seed_omitting(7, run, omit);
            assert_eq!(
                part.events, whole.events,
                "the schedule's times are drawn as before"
            );
            assert_eq!(part.trace[0], omit.describe());
        }
        let none = run_seed_omitting(
            7,
            run,
            Omit {
                events: u128::MAX,
                ..Omit::default()
            },
        );
        let scheduled = |t: &[String]| {
            t.iter()
                .filter(|l| {
                    l.contains("paused for")
                        || l.contains("cut off")
                        || l.contains("set to a string")
                })
                .count()
        };
        assert_eq!(scheduled(&none.trace), 0, "{:?}", none.trace);
        assert_eq!(
            shrink(7, run, 10).map(|(o, _)| o),
            None,
            "seed 7 does not fail"
        );
    }

    #[test]
    fn seeds_run_without_violations() {
        let run = Run::default();
        let failed = run_seeds(1..=20, run, 2).failed;
        let report: Vec<String> = failed
            .iter()
            .map(|o| {
                format!(
                    "seed {}: {:?}\n{}",
                    o.seed,
                    o.violations,
                    o.trace.join("\n")
                )
            })
            .collect();
        assert!(failed.is_empty(), "{}", report.join("\n\n"));
    }
}
