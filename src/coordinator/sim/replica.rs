//! One simulated replica: the real lease [`Machine`] and the real holder
//! cycle ([`CycleContext::run`], `run_handoff`) over a [`MemoryStore`] and
//! simulated pings. The loop does what the executor does with the
//! machine's actions (calls, cycles, the view carried between cycles); the
//! executor's books (status, metrics, logs) and its probes are not run.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

use tokio::time::sleep_until;

use super::world::World;
use crate::coordinator::holder::{
    CycleContext, CycleError, CycleReport, HolderView, InFlight, SolveSettings, summarize,
};
use crate::coordinator::machine::{Action, Event, Machine, Settings};
use crate::core::balance::Balance;
use crate::core::handoff;
use crate::core::handoff::PingView;
use crate::core::lease::{Claim, LeaseTiming};
use crate::core::suspicion::Guard;
use crate::core::table::Assignment;
use crate::core::timing::Timing;
use crate::edge::clock;
use crate::edge::clock::WallClock;
use crate::edge::grpc::{PingFailure, PingReport, PingSet, PingTask};
use crate::edge::memory::MemoryStore;
use crate::edge::pings::MemberPings;
use crate::edge::store::HoldingStore;
use crate::ops::metrics::Metrics;

/// The settings every replica of a run shares.
#[derive(Clone)]
pub struct ReplicaSettings {
    pub lease: LeaseTiming,
    pub poll_interval: Duration,
    pub ping_timeout: Duration,
    pub failure_threshold: u32,
    pub handoff_delay: Duration,
    pub forget_after: Option<Duration>,
    /// `-quarantine-after` and `-quarantine-window`.
    pub quarantine: crate::core::quarantine::QuarantineRule,
    pub assignment: Assignment,
    pub balance: Balance,
    /// `-join-delay`.
    pub join_delay: Duration,
    pub wall: WallClock,
}

/// The holder's pings, answered by the simulated members.
#[derive(Clone)]
pub struct SimPings {
    pub world: Arc<Mutex<World>>,
    pub timeout: Duration,
    /// What the pings tell of the holder ([`MemberPings::set_view`]).
    pub view: Arc<Mutex<Option<PingView>>>,
}

impl MemberPings for SimPings {
    fn ping_tasks(&self, members: &[String]) -> PingSet {
        let view = *self.view.lock().expect("view lock");
        members
            .iter()
            .map(|m| {
                let (world, member, timeout) = (Arc::clone(&self.world), m.clone(), self.timeout);
                let handle = tokio::spawn(async move {
                    // A round trip takes 1 ms each way.
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    let answer =
                        world
                            .lock()
                            .expect("world lock")
                            .ping(&member, clock::now(), view);
                    let result = match answer {
                        Some(true) => {
                            tokio::time::sleep(Duration::from_millis(1)).await;
                            Ok(Duration::from_millis(2))
                        }
                        Some(false) if is_alive(&world, &member) => {
                            Err(PingFailure::Unavailable("fenced".into()))
                        }
                        Some(false) => Err(PingFailure::Refused("connection refused".into())),
                        None => {
                            tokio::time::sleep(timeout).await;
                            Err(PingFailure::Timeout)
                        }
                    };
                    PingReport {
                        member,
                        result,
                        at: clock::now(),
                        opened: None,
                    }
                });
                PingTask::new(m.clone(), handle)
            })
            .collect()
    }

    fn retain(&self, _listed: &HashSet<&str>) {}

    fn set_view(&self, view: Option<PingView>) {
        *self.view.lock().expect("view lock") = view;
    }
}

fn is_alive(world: &Arc<Mutex<World>>, member: &str) -> bool {
    world
        .lock()
        .expect("world lock")
        .members
        .iter()
        .any(|m| m.name == member && m.alive)
}

/// What the replica keeps of its holding between cycles.
struct Holding {
    epoch: u64,
    view: Option<HolderView>,
    in_flight: InFlight,
    in_flight_members: HashSet<String>,
}

/// Runs replica `id` until its task is aborted (a crash).
pub async fn run(
    id: String,
    store: MemoryStore,
    world: Arc<Mutex<World>>,
    settings: ReplicaSettings,
) {
    let (tx, mut rx) = mpsc::unbounded_channel::<Event>();
    let machine_settings = Settings {
        lease: settings.lease,
        poll_interval: settings.poll_interval,
        takeover_check: Some(Timing::DEFAULT.takeover_check),
        timing: Timing::DEFAULT,
    };
    let mut machine = Machine::new(machine_settings, clock::now());
    let (acts_tx, _) = watch::channel(clock::now());
    let mut holding: Option<Holding> = None;
    let mut cycle: Option<JoinHandle<Result<CycleReport, CycleError>>> = None;
    let metrics = Arc::new(Metrics::new());
    let pings = SimPings {
        world: Arc::clone(&world),
        timeout: settings.ping_timeout,
        view: Arc::default(),
    };
    // The notification channels, as the executor subscribes to them: a
    // table write is a hint to re-read the generation, a release wakes the
    // standbys. Subscribed from now: what was published before is missed.
    let (mut messages, keys) = {
        let w = world.lock().expect("world lock");
        let mut s = w.server.lock().expect("server lock");
        (s.subscribe(), w.keys.clone())
    };
    loop {
        let wake = machine.next_wake();
        let event = tokio::select! {
            biased;
            Some(e) = rx.recv() => e,
            r = async { cycle.as_mut().expect("checked").await }, if cycle.is_some() => {
                cycle = None;
                let r = r.unwrap_or(Err(CycleError::NotReady));
                if std::env::var_os("SIM_DEBUG").is_some() && let Err(e) = &r {
                    eprintln!("{:?} {id} cycle failed: {e}", clock::now());
                }
                let Some(h) = holding.as_mut() else { continue };
                let summary = summarize(&r, h.epoch, &id);
                if let Ok(report) = &r
                    && let crate::coordinator::holder::Write::Written { generation: Some(g) } = &report.write
                {
                    let table = report.view.handoff.ledger.granted().map(|t| format!("{:?}", t.rows())).unwrap_or_default();
                    let transit = report.view.handoff.ledger.in_transit();
                    world.lock().expect("world lock").log(clock::now(), format!("{id} wrote generation {g}: {table} ({transit} in transit)"));
                }
                if let Ok(report) = r
                    && report.epoch == h.epoch
                {
                    h.in_flight = report.in_flight;
                    h.in_flight_members = report.in_flight_members;
                    h.view = Some(report.view);
                }
                match summary {
                    Some(s) => Event::CycleDone(s),
                    None => continue,
                }
            }
            _ = sleep_until(wake.unwrap_or_else(clock::now).into()), if wake.is_some() => Event::Tick,
            Some((channel, payload)) = messages.recv() => {
                let mut release = None;
                {
                    if channel == keys.table_channel.as_bytes() {
                        // A hint only: the generation is read from Redis.
                        let (store, tx) = (store.clone(), tx.clone());
                        tokio::spawn(async move {
                            if let Ok(g) = store.read_generation().await {
                                let _ = tx.send(Event::Generation(g));
                            }
                        });
                    } else if channel == keys.lease_channel.as_bytes() {
                        release = Some(String::from_utf8_lossy(&payload).parse().ok());
                    }
                }
                match release {
                    Some(epoch) => Event::ReleaseNotice { epoch },
                    None => continue,
                }
            }
        };
        // A member's report wakes a handoff cycle, as the `acked` channel does.
        let hint = std::mem::take(&mut world.lock().expect("world lock").acked);
        let mut events = vec![event];
        if hint && holding.is_some() {
            events.push(Event::HandoffHint);
        }
        for event in events {
            let dbg = std::env::var_os("SIM_DEBUG").is_some();
            let ev = if dbg {
                format!("{event:?}")
            } else {
                String::new()
            };
            let actions = machine.step(event, clock::now());
            if dbg {
                let t = world.lock().expect("world lock").ms_precise(clock::now());
                eprintln!("{t} {id} {ev} -> {actions:?}");
            }
            for action in actions {
                match action {
                    Action::Acquire {
                        epoch_floor,
                        generation_floor,
                        takeover,
                    } => {
                        let (store, tx, id, ttl, ft) = (
                            store.clone(),
                            tx.clone(),
                            id.clone(),
                            settings.lease.ttl,
                            settings.failure_threshold,
                        );
                        let wall = settings.wall;
                        tokio::spawn(async move {
                            let claim = Claim {
                                ttl,
                                epoch_floor,
                                generation_floor,
                                holder_id: &id,
                                now_ms: wall.unix_ms(),
                                failure_threshold: ft,
                                takeover: takeover.as_ref(),
                            };
                            let r = store.acquire(&claim).await.map_err(drop);
                            if std::env::var_os("SIM_DEBUG").is_some() {
                                eprintln!("{:?} {id} acquire -> {r:?}", clock::now());
                            }
                            let _ = tx.send(Event::Acquired(r));
                        });
                    }
                    Action::CheckHolder { client } => {
                        let (store, tx) = (store.clone(), tx.clone());
                        tokio::spawn(async move {
                            let result = store.holder_connection(client).await.map_err(drop);
                            let _ = tx.send(Event::HolderChecked { client, result });
                        });
                    }
                    Action::Renew {
                        grant,
                        budget,
                        sent_at,
                    } => {
                        let (store, tx, ttl) = (store.clone(), tx.clone(), settings.lease.ttl);
                        tokio::spawn(async move {
                            let result = store.renew(&grant, ttl, budget).await.map_err(drop);
                            let _ = tx.send(Event::Renewed { sent_at, result });
                        });
                    }
                    Action::Release { grant } => {
                        let (store, tx) = (store.clone(), tx.clone());
                        tokio::spawn(async move {
                            let _ = store.release(&grant).await;
                            let _ = tx.send(Event::ReleaseDone);
                        });
                    }
                    Action::ActsUntil(at) => {
                        acts_tx.send_replace(at);
                    }
                    Action::BecameHolder { epoch } => {
                        let mut w = world.lock().expect("world lock");
                        w.log(clock::now(), format!("{id} holds epoch {epoch}"));
                        w.began_holding(clock::now(), epoch, &id);
                        drop(w);
                        holding = Some(Holding {
                            epoch,
                            view: None,
                            in_flight: InFlight::new(),
                            in_flight_members: HashSet::new(),
                        });
                    }
                    Action::SteppedDown { epoch, .. } => {
                        world
                            .lock()
                            .expect("world lock")
                            .log(clock::now(), format!("{id} steps down from epoch {epoch}"));
                        holding = None;
                    }
                    Action::AbortCycle => {
                        if let Some(c) = cycle.take() {
                            c.abort();
                        }
                    }
                    Action::StartCycle {
                        grant,
                        acts_until,
                        generation_floor,
                        handoff_only,
                    } => {
                        acts_tx.send_replace(acts_until);
                        let Some(h) = holding.as_mut() else { continue };
                        let (services, units_key) = {
                            let w = world.lock().expect("world lock");
                            (vec![w.services.clone()], w.units_key.clone())
                        };
                        let ctx = CycleContext {
                            store: store.clone(),
                            pinger: pings.clone(),
                            wall: settings.wall,
                            metrics: Arc::clone(&metrics),
                            services,
                            units_key,
                            replica_id: id.clone(),
                            forget_after: settings.forget_after,
                            quarantine: settings.quarantine,
                            grant,
                            acts_until: acts_tx.subscribe(),
                            generation_floor,
                            carried: std::mem::take(&mut h.in_flight),
                            carried_members: std::mem::take(&mut h.in_flight_members),
                            guard: Guard {
                                percent: 100,
                                confirm_ms: 0,
                                together_ms: 0,
                            },
                            failure_threshold: settings.failure_threshold,
                            ping_timeout: settings.ping_timeout,
                            timing: Timing::DEFAULT,
                            handoff: handoff::Settings {
                                handoff_delay: settings.handoff_delay,
                            },
                            solve: SolveSettings {
                                assignment: settings.assignment,
                                balance: settings.balance,
                                max_moves: 0,
                                join_delay: settings.join_delay,
                            },
                            warm: None,
                        };
                        let view = h.view.clone();
                        cycle = Some(if handoff_only {
                            tokio::spawn(ctx.run_handoff(view, Vec::new()))
                        } else {
                            tokio::spawn(ctx.run(view, Vec::new()))
                        });
                    }
                    Action::SawHolder { .. } | Action::Stop => {}
                }
            }
        }
    }
}
