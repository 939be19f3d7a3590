//! A seeded chaos schedule against real processes: 3 `distributor` replicas
//! (the built binary) on one real Redis, 6 example workers
//! (`examples/worker.rs --events`, each reaching Redis through its own
//! `FreezableProxy`) and an old-protocol worker (a ping server in this
//! process that only reads its row every 100 ms; the replicas' handoff
//! delay is 1 s), over 300 to 640 work units. Workers have a 2 s deadline,
//! poll their row every 200 ms and take 0 to 100 ms to stop a unit; replicas
//! cycle every 250 ms with a 1 s lease. The schedule shuffles a fixed
//! multiset of steps (each scenario at least once), with random parameters:
//!
//! - **join**: a new worker process;
//! - **drain**: SIGTERM a worker; it must exit 0, off the list, holding nothing;
//! - **kill**: SIGKILL a worker (sometimes a new process on the same address);
//! - **units**: add and remove units in one atomic rewrite of the list;
//! - **holder kill mid-handoff**: make units move (a join, a units change, or
//!   a worker frozen so that its units wait for its deadline), wait until
//!   `{T}:transit` is non-empty, SIGKILL the holder process; another replica
//!   must take over and finish the handoffs from `{T}:transit` (a fresh
//!   replica process replaces the dead one);
//! - **holder SIGTERM**: a graceful handover;
//! - **freeze**: SIGSTOP a worker for half its deadline up to well past it,
//!   then SIGCONT (sometimes the units change meanwhile);
//! - **cut**: cut a worker's Redis connections (every connection through its
//!   proxy freezes, new ones too) while the holder still pings it, then heal.
//!
//! After each step the test either waits until the fleet settled (the table
//! is the solver's for the running workers and listed units, and the events
//! say every unit is owned by exactly its row's member) or goes on after a
//! short random pause, so that steps also land on handoffs in flight. Every
//! ownership event goes to the ownership checker (`support::ownership`),
//! which must find no unit with two owners at once, fencing tokens growing
//! from owner to owner, and every listed unit owned again within [`REOWN`];
//! at the end every listed unit has exactly one owner.
//!
//! One adjustment, explained in `procs::redate`: a worker frozen in the
//! middle of a slow stop past its hold prints that release after its thaw,
//! though its hold (its right to act) ended while it was stopped; the member
//! logs such a revocation, and the release is dated back to the hold's end,
//! only when a freeze of that worker explains it. Any other error a worker
//! logs fails the test.
//!
//! The processes, the steps and the checks are the kit's (`support::procs`);
//! this test picks the plan and the sizes.
//!
//! The seed is printed; `OWNERSHIP_SEED=<n>` replays the same schedule (the
//! timing of the processes is not replayed). The processes' logs are printed
//! (their tails) and kept on a failure; `OWNERSHIP_KEEP_LOGS=1` keeps them
//! after a pass too.

use std::time::Duration;

use crate::support::RedisServer;
use crate::support::procs::{self, Chaos, Shape, Step};

/// The checker's bound: a listed unit is owned again within this long. The
/// slowest path is a frozen or cut-off worker's units (its deadline × 1.05 +
/// 100 ms after the revoking write) across a holder SIGKILL (one lease TTL,
/// then the wait again from the new holder's start): about 5 s.
const REOWN: Duration = Duration::from_secs(10);
/// No new step starts after this long (the schedule is bounded in count too).
const BUDGET: Duration = Duration::from_secs(120);

/// The plan: every scenario at least this many times, shuffled.
const PLAN: &[(Step, usize)] = &[
    (Step::Join, 4),
    (Step::Drain, 3),
    (Step::Kill, 3),
    (Step::KillAndRestart, 1),
    (Step::Units, 5),
    (Step::HolderKillMidHandoff, 3),
    (Step::HolderTerm, 1),
    (Step::Freeze, 3),
    (Step::Cut, 2),
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ownership_under_chaos_with_real_processes() {
    const LABEL: &str = "ownership_stress";
    let seed = procs::seed(LABEL);
    let shape = Shape::new(LABEL, REOWN);
    let mut chaos = Chaos::start(shape, seed, RedisServer::start()).await;
    chaos.run(PLAN, BUDGET, &mut ()).await;
    chaos.finish(PLAN).await;
}
