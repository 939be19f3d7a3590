//! The member library, for workers written in Rust.
//!
//! A [`Member`] serves the ping RPC (`/proto.GRPCPinger/Ping`), the beat
//! stream and, unless the application brings its own, the standard
//! `grpc.health.v1` health service (on its own server, or the application's:
//! [`MemberBuilder`]), registers its address in its services list,
//! and follows its own row of the matching table with the handoff protocol
//! (`docs/protocol.md`): it hands units to the application ([`Handoff`], or
//! the `watch::Receiver<Assignment>`), takes them back, acknowledges the
//! generations that took units away, and fences itself when it loses
//! contact.
//!
//! ```text
//!  mod.rs      Member and its assignment; ready, weight, drain, shutdown
//!  options.rs  MemberOptions, their checks, the environment (MEMBER_ENV)
//!  builder.rs  MemberBuilder: its own server or the application's, Redis
//!  handoff.rs  the application's side: Handoff, Owned, Hold
//!  handle.rs   MemberHandle (loads, weight, holds, cloneable); shutdown_signal
//!  follow.rs   the member's task: reads, reports, leaving
//!  calls.rs    the application's handler calls, one task per unit
//!  failures.rs how Redis failures are logged: once, then summarised
//!  loads.rs    measured loads, written on a timer of their own
//!  lookup.rs   Lookup: who owns a unit, for callers that are not members
//!  meters.rs   its metrics, through the `metrics` facade
//! ```
//!
//! Guarantees (the rules are `core::ownership`'s):
//! - a unit is handed to the application only after a read showed it in this
//!   member's row, a report naming the Redis connection of that read was
//!   written with every revocation before it acknowledged, and a ping came;
//!   it is taken back (revoked) as soon as a read shows it gone, and the
//!   report of that generation is written only once the revocation returned;
//! - only a read on the Redis connection its last report names extends a
//!   hold (the holder may ask Redis whether that connection still exists):
//!   after a reconnection it first reports the new connection;
//! - the hold on a unit ends `deadline` after the earlier of the last read
//!   that showed it and the last ping (monotonic clock); at that instant the
//!   unit is revoked, also when the process was paused past it, before
//!   anything else happens; while out of contact the member answers pings
//!   `UNAVAILABLE` and its health service says `NOT_SERVING`;
//! - registration is one Lua script (`LPOS` then `LPUSH`): atomic and
//!   idempotent; it re-registers periodically (healing a Redis that lost its
//!   data), and re-writes its report with it;
//! - it serves pings before its first read of the table and for as long as
//!   it holds a unit (the holder takes a refused connection as proof that
//!   nothing works on the member's units): should its server end on its
//!   own (its own server's task, or every copy of the services it gave the
//!   application), every hold ends at once and the member stops;
//! - the application's handler gets one call per unit, each on a task of
//!   its own; a unit's `revoked` starts only once its `acquired` returned;
//! - [`Member::drain`] hands every unit over through the holder before it
//!   deregisters (bounded by the drain timeout); [`Member::shutdown`] and
//!   dropping stop every unit first, then deregister and stop serving; a
//!   `Member` dropped once no runtime runs its task any more (the
//!   application's runtime ended first) ends every hold at once and
//!   deregisters on a thread of its own, bounded by [`LEAVE_BOUND`]; a
//!   crashed member (or [`Member::abort`], which ends every hold at once)
//!   simply stops answering.

mod builder;
mod calls;
mod failures;
mod follow;
mod handle;
mod handoff;
mod loads;
mod lookup;
mod meters;
mod options;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;

pub use self::builder::{MemberBuilder, MemberServices};
use self::follow::{Ending, Mode};
pub use self::handle::{MemberHandle, shutdown_signal};
use self::handoff::Shared;
pub use self::handoff::{Handoff, HandoffFuture, Hold, HoldLost, Owned};
pub use self::lookup::{LOOKUP_METRICS, Lookup, LookupOptions, LookupReads};
pub use self::meters::MEMBER_METRICS;
pub use self::options::{EnvVar, MEMBER_ENV, MemberOptions};
pub use crate::core::owners::{OwnerIndex, Placement};
pub use crate::core::ownership::{FencingToken, Revocation};
use crate::edge::clock;
use crate::edge::redis::RedisOptions;
use crate::error::MemberError;

/// Where the member's Redis comes from: its options, or the application's
/// own client.
#[derive(Clone)]
enum RedisSource {
    Options(RedisOptions),
    Client(redis::Client),
}

/// This member's share of the work: the units it owns now.
///
/// It carries the same truth as the [`Handoff`] calls: a unit appears once it
/// is acquired (after a read showed it, its generation was reported and a
/// ping came) and disappears when its revocation starts. Without a handler,
/// the revocation completes (and is reported to the holder) right after the
/// assignment without the unit is published, so a worker that only watches
/// must stop a unit synchronously when it disappears, or check
/// [`Member::holds`] (or a [`Hold`]) before each side effect: the holder may
/// hand the unit to its next owner a few Redis round trips later.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Assignment {
    /// Whether the table has a field for this member: live and in the table.
    /// `false` means not a member now (failing, not listed, or no table yet).
    pub in_table: bool,
    /// The units this member owns, in row order.
    pub units: Vec<String>,
    /// Each owned unit's fencing token: the generation it was acquired at.
    pub tokens: BTreeMap<String, FencingToken>,
    /// The last processed table generation (0: no table yet).
    pub generation: u64,
    /// Out of contact: no successful read of the table, or no ping, within
    /// the deadline. The member then owns nothing and answers pings
    /// `UNAVAILABLE`.
    pub fenced: bool,
}

/// How [`Member::drain`] ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Drained {
    /// The holder moved every unit away (each revocation returned and was
    /// reported); deregistered.
    HandedOver,
    /// The drain timeout passed first: the member stopped its units itself,
    /// then deregistered.
    TimedOut,
    /// Contact was lost while draining (no read or no ping within the
    /// deadline): every hold had ended and no holder could hand anything
    /// over; deregistered if Redis answered.
    Fenced,
}

/// How long a `Member` dropped without a runtime to run its task waits for
/// its deregistration (`LREM`, then `HDEL`) on a thread of its own.
pub const LEAVE_BOUND: Duration = crate::core::timing::Timing::DEFAULT.leave_bound;

/// A running member. Dropping it stops every unit, deregisters and stops
/// serving: in the background, or, when no runtime runs its task any more,
/// at once (see [`LEAVE_BOUND`]).
pub struct Member {
    id: String,
    local_addr: Option<SocketAddr>,
    assignment: watch::Receiver<Assignment>,
    ready: watch::Receiver<bool>,
    shared: Arc<Shared>,
    mode: watch::Sender<Mode>,
    task: Option<JoinHandle<Ending>>,
    server: Option<JoinHandle<()>>,
    /// Set by the task once it deregistered.
    left: Arc<AtomicBool>,
    /// Loads, the weight and holds: what the application's tasks may use
    /// too (the smoothed loads it reports are in there).
    handle: MemberHandle,
    loads_task: Option<JoinHandle<()>>,
    /// What a drop without a runtime needs to deregister.
    redis: RedisSource,
    table_key: String,
    services_key: String,
}

impl Member {
    /// A builder: options, a handler, the application's own Redis client,
    /// tonic server and health reporter.
    pub fn builder() -> MemberBuilder {
        MemberBuilder::default()
    }

    /// Starts with `opts` and no handler: follow [`Member::assignment`].
    pub async fn start(opts: MemberOptions) -> Result<Member, MemberError> {
        Member::builder().options(opts).start().await
    }

    /// Starts with `opts`, calling `handoff` as units come and go.
    pub async fn start_with(
        opts: MemberOptions,
        handoff: impl Handoff,
    ) -> Result<Member, MemberError> {
        Member::builder()
            .options(opts)
            .handoff(handoff)
            .start()
            .await
    }

    /// Resolves once the member is registered, has reported the table it
    /// read, and is in contact: from then on the holder may give it units.
    /// `Err(Stopped)` if it stops first. See [`Member::readiness`].
    pub async fn ready(&self) -> Result<(), MemberError> {
        let mut ready = self.ready.clone();
        ready
            .wait_for(|r| *r)
            .await
            .map(|_| ())
            .map_err(|_| MemberError::Stopped)
    }

    /// Follows readiness (as [`Member::ready`] defines it; `false` again
    /// while fenced and once stopping), for a readiness probe.
    pub fn readiness(&self) -> watch::Receiver<bool> {
        self.ready.clone()
    }

    /// Changes the capacity weight reported to the holder (1 to 1000): a
    /// report carrying it is written at once, and the holder moves units
    /// on reading it. An operator's override (`distributor weights set`)
    /// still wins.
    pub fn set_weight(&self, weight: u32) -> Result<(), MemberError> {
        self.handle.set_weight(weight)
    }

    /// Reports a measurement of `unit`'s load, for `-balance load`: any
    /// number from 0 to 1e9 in the application's own measure (CPU seconds
    /// a second, items a minute), as often as it likes. The member smooths
    /// the samples (`load_half_life`) and writes the smoothed load of every
    /// unit it owns to `{T}:loads` every `load_report_interval` (`docs/assignment.md`,
    /// "Measured load"). `false`: not such a number, ignored.
    pub fn report_load(&self, unit: &str, load: f64) -> bool {
        self.handle.report_load(unit, load)
    }

    /// The member id: the address written into the services list.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// A cloneable handle for handlers and tasks: loads, the weight, holds
    /// ([`MemberHandle`]); the `Member` itself stays with whoever drains it.
    pub fn handle(&self) -> MemberHandle {
        self.handle.clone()
    }

    /// Where its own server listens; `None` when the application serves
    /// its services ([`MemberBuilder::start_without_server`]).
    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.local_addr
    }

    /// Follows this member's ownership; `changed()` fires on every change
    /// (see [`Assignment`] for what a watcher must do).
    pub fn assignment(&self) -> watch::Receiver<Assignment> {
        self.assignment.clone()
    }

    /// The unit's fencing token if this member holds it now: acquired, not
    /// revoked, and its hold not ended (by the monotonic clock, now). Check
    /// it before each side effect on the unit.
    pub fn holds(&self, unit: &str) -> Option<FencingToken> {
        self.handle.holds(unit)
    }

    /// A handle on the current hold of `unit`, to check before each side
    /// effect without the `Member`; `None` if it is not held now.
    pub fn hold(&self, unit: &str) -> Option<Hold> {
        self.handle.hold(unit)
    }

    /// Whether a request for `unit` that a caller routed here by its
    /// [`Lookup`] copy of generation `routed_by` reached the current
    /// holding: this member holds the unit now, and the copy already showed
    /// the table that granted it ([`FencingToken::admits_route`]). A request
    /// routed by an older copy is refused; the caller asks its lookup again.
    pub fn routed_current(&self, unit: &str, routed_by: u64) -> bool {
        self.handle.routed_current(unit, routed_by)
    }

    /// Drains: reports `draining`, lets the holder move every unit away
    /// (each revocation returns and is reported first), then deregisters
    /// (`LREM` from its list, `HDEL` from `{T}:members`) and stops serving.
    /// After the drain timeout it stops every unit itself, then deregisters;
    /// a member that lost contact while draining (it holds nothing any more)
    /// deregisters at once.
    pub async fn drain(mut self) -> Drained {
        self.stop_loads();
        self.mode.send_replace(Mode::Drain);
        match self.join().await {
            Ending::HandedOver => Drained::HandedOver,
            Ending::Fenced => Drained::Fenced,
            Ending::TimedOut | Ending::Stopped => Drained::TimedOut,
        }
    }

    /// Stops now: revokes every unit (waiting for each revocation, at most
    /// until its hold ends), then deregisters and stops serving. Its units
    /// stay unworked until the holder sees it gone (prefer
    /// [`Member::drain`], which moves them first).
    pub async fn shutdown(mut self) {
        self.stop_loads();
        self.mode.send_replace(Mode::Stop);
        self.join().await;
    }

    /// Stops at once, like a crash: no revocation call, no deregistration;
    /// its own server stops (connections refused), and services served by
    /// the application answer pings `UNAVAILABLE`. Every hold ends now
    /// ([`Member::holds`] and [`Hold::check`] fail from this call on): once
    /// its connection is refused, the holder may grant the units at once.
    pub fn abort(mut self) {
        self.shared.lock().stop(clock::now());
        self.stop_loads();
        if let Some(t) = self.server.take() {
            t.abort();
        }
        if let Some(t) = self.task.take() {
            t.abort();
        }
    }

    /// Stops writing measured loads, before the member leaves: a write
    /// after its `HDEL` would leave its field behind. (A write already sent
    /// goes first: both go on the same connection.)
    fn stop_loads(&mut self) {
        if let Some(t) = self.loads_task.take() {
            t.abort();
        }
    }

    async fn join(&mut self) -> Ending {
        let ending = match self.task.take() {
            Some(t) => t.await.unwrap_or(Ending::Stopped),
            None => Ending::Stopped,
        };
        self.stop_loads();
        if let Some(s) = self.server.take() {
            // It ends by itself within its grace; this bounds the wait should
            // the runtime be too busy to run it.
            let grace = crate::core::timing::Timing::DEFAULT.server_shutdown;
            let _ = tokio::time::timeout(grace + Duration::from_secs(1), s).await;
        }
        ending
    }
}

impl Drop for Member {
    fn drop(&mut self) {
        self.stop_loads();
        self.mode.send_replace(Mode::Stop);
        // Joined (drain, shutdown) or aborted: nothing is left to do.
        let Some(task) = &self.task else {
            return;
        };
        let in_runtime = tokio::runtime::Handle::try_current().is_ok();
        if in_runtime && !task.is_finished() {
            // The task stops every unit, deregisters and stops serving.
            return;
        }
        // No runtime may run the task any more (its runtime ended, which
        // cancels it, or none is current here): its holds would otherwise
        // run on until their deadline, and it would stay registered.
        self.shared.lock().stop(clock::now());
        if self.left.load(Ordering::SeqCst) {
            return;
        }
        let (redis, table) = (self.redis.clone(), self.table_key.clone());
        let (list, id) = (self.services_key.clone(), self.id.clone());
        let leaving = std::thread::Builder::new()
            .name("distributor-member-leave".into())
            .spawn(move || leave_without_runtime(&redis, &table, &list, &id));
        match leaving {
            // Never block a runtime's thread: there, the thread runs alone.
            Ok(thread) if !in_runtime => {
                let _ = thread.join();
            }
            Ok(_) => {}
            Err(e) => {
                tracing::warn!(member = %self.id, error = %e, "could not start a thread to deregister; the distributor will see this member fail")
            }
        }
    }
}

/// The bound of each Redis call of a member.
const CALL_TIMEOUT: Duration = crate::core::timing::Timing::DEFAULT.member_call;

/// Deregisters on a fresh current-thread runtime and fresh connections (the
/// task's died with its runtime), within [`LEAVE_BOUND`].
fn leave_without_runtime(redis: &RedisSource, table: &str, list: &str, id: &str) {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            tracing::warn!(member = %id, error = %e, "could not start a runtime to deregister; the distributor will see this member fail");
            return;
        }
    };
    runtime.block_on(async {
        let store = match redis.connect(table) {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(member = %id, error = %e, "could not deregister; the distributor will see this member fail");
                return;
            }
        };
        if tokio::time::timeout(LEAVE_BOUND, follow::leave(&store, list, id))
            .await
            .is_err()
        {
            tracing::warn!(member = %id, bound = ?LEAVE_BOUND, "could not deregister in time; the distributor will see this member fail");
        }
    });
}
