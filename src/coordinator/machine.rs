//! The coordinator's decisions, as a pure state machine: [`Machine::step`]
//! takes an [`Event`] and the current instant and returns the [`Action`]s to
//! perform. No IO, no clock read: the executor (`executor.rs`) performs the
//! actions, feeds their results back as events, and calls
//! [`Machine::step`] with [`Event::Tick`] at [`Machine::next_wake`].
//!
//! ```text
//!                      Tick ≥ next_attempt: Acquire
//!   ┌──────────┐ ───────────────────────────────▶ ┌───────────┐
//!   │ Standby  │ ◀──── Acquired(Held | error) ─── │ Acquiring │
//!   └──────────┘                                  └───────────┘
//!     ▲  ▲  ▲ lost / fenced                             │ Acquired(grant)
//!     │  │  └──────────────────────┐                    ▼
//!     │  │ lapsed / abdicated:     │ ┌──────────────────────────────────────┐
//!     │  │ Release                 └─│ Holder: Renew every renew interval,  │
//!     │  └───────────────────────────│ StartCycle every poll interval while │
//!     │                              │ the lease is locally valid           │
//!     │                              └──────────────────────────────────────┘
//!     │ Shutdown (holder: AbortCycle, Release) ─▶ Stopping ─▶ Released ─▶ Stop
//! ```
//!
//! Guarantees, checked by the property tests below over random event
//! sequences:
//! - it starts a cycle only while holding a lease that is valid locally
//!   (`now < acts_until`), and never has two cycles, two renewals or two
//!   acquisitions in flight;
//! - it steps down no later than the instant its lease stops being valid
//!   locally, which is before Redis can expire it (`acts_until = last renewal
//!   sent + renew deadline < sent + TTL`), provided it is woken at
//!   [`Machine::next_wake`];
//! - epoch and generation floors never go backwards;
//! - a lease it gives up on its own (lapsed, handed over, shutdown) is always
//!   released, which wakes the standbys; shutdown stops only after that;
//! - a standby that saw the holder's lease connection ([`HolderRecord`])
//!   asks Redis whether it still exists every [`Settings::takeover_check`],
//!   one question at a time, and takes over (an [`Action::Acquire`] with
//!   `takeover`) only after Redis answered that it is closed; the takeover
//!   succeeds in Redis only for exactly that record. With random crashes,
//!   dropped connections and lost or late replies, at most one replica's
//!   writes are ever accepted, and epochs of accepted writes never go back
//!   (the shared-lease model below).

use std::time::Duration;

use std::time::Instant;

use crate::core::census::CensusView;
use crate::core::handoff::RedisConnection;
use crate::core::lease::{
    self, Acquisition, HeldLease, HolderConnection, HolderRecord, LeaseGrant, LeaseTiming, Renewal,
};
use crate::core::timing::Timing;

/// What the machine needs to know of the configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Settings {
    pub lease: LeaseTiming,
    pub poll_interval: Duration,
    /// How often a standby checks the holder's lease connection (`None`:
    /// never; standbys wait out the TTL). The daemon's is
    /// `Timing::takeover_check`.
    pub takeover_check: Option<Duration>,
    /// The built-in pacing: the handoff and early-cycle spacing, and the
    /// back-off after Redis refused `CLIENT`.
    pub timing: Timing,
}

/// Why a holder stops holding.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transition {
    /// Could not renew within the renew deadline.
    Lapsed,
    /// Redis says the lease is someone else's.
    Lost,
    /// Redis refused a write: the lease moved on.
    Fenced,
    /// Most of a group failed at once: handed over so another replica can confirm.
    Abdicated,
    /// Graceful shutdown.
    Released,
}

impl Transition {
    /// The label in metrics (`lease_transitions_total{transition}`) and spans.
    pub fn label(self) -> &'static str {
        match self {
            Transition::Lapsed => "lapsed",
            Transition::Lost => "lost",
            Transition::Fenced => "fenced",
            Transition::Abdicated => "abdicated",
            Transition::Released => "released",
        }
    }

    /// Whether the lease may still be ours in Redis, so that it must be
    /// released for the standbys not to wait out its TTL.
    fn releases(self) -> bool {
        matches!(
            self,
            Transition::Lapsed | Transition::Abdicated | Transition::Released
        )
    }
}

/// How a holder cycle ended, as far as the machine cares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CycleSummary {
    /// The epoch of the holding that started the cycle.
    pub epoch: u64,
    pub outcome: CycleOutcome,
    /// The highest generation the cycle saw (stored, or written).
    pub generation_floor: u64,
    /// After the cycle, some members are suspects of this replica's own
    /// (a mass failure it saw and nobody confirmed yet; see
    /// `core::suspicion`): another replica should look.
    pub own_suspicions: bool,
    /// When a unit in transit can be released by time: run a handoff cycle
    /// then (see `core::handoff`).
    pub next_release: Option<Instant>,
    /// The cycle decided on the liveness the last holder left, pinging
    /// nobody (a new holding's first): run a full cycle at once, whose
    /// pings verify it.
    pub verify_now: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CycleOutcome {
    /// Read failed or inputs were unusable: nothing written.
    Skipped,
    /// Nothing to write.
    Unchanged,
    /// The lease was no longer valid locally when it was time to write.
    NotActing,
    /// Written; `table` when the table itself was (not only liveness).
    Written { table: bool },
    /// Redis refused the write: the lease moved on.
    Fenced,
    /// The write failed (an error, not a refusal).
    Failed,
}

/// An input to the machine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// A timer fired: the executor sends it at [`Machine::next_wake`].
    Tick,
    /// The result of [`Action::Acquire`]; `Err` for an error (logged by the
    /// executor).
    Acquired(Result<Acquisition, ()>),
    /// The result of [`Action::Renew`], sent at `sent_at`.
    Renewed {
        sent_at: Instant,
        result: Result<Renewal, ()>,
    },
    /// A cycle started by [`Action::StartCycle`] finished.
    CycleDone(CycleSummary),
    /// A holder released the lease (a `{T}:released` message; its payload, the
    /// epoch, is only a hint: it may be forged, and at worst makes a standby
    /// try at once or not).
    ReleaseNotice { epoch: Option<u64> },
    /// The generation re-read from Redis after a change notification.
    Generation(u64),
    /// The census emitted a view.
    Census(CensusView),
    /// A member acknowledged or changed its report (a `{T}:acked` message,
    /// only a hint), or a member whose connection ended was refused (the
    /// executor hands its refusal to that cycle): run a handoff cycle soon.
    HandoffHint,
    /// A member's connection closed and a ping sent at once failed without
    /// a refusal (it timed out, or was unavailable): look at everyone now.
    /// Run a full cycle now rather than at the next poll (spaced by
    /// `Timing::early_cycle_spacing`; after the one running, if one is).
    MemberDown,
    /// A release started by the machine finished (successfully or not).
    ReleaseDone,
    /// The answer to [`Action::CheckHolder`]; `Err` for an error.
    HolderChecked {
        client: RedisConnection,
        result: Result<HolderConnection, ()>,
    },
    /// Stop: hand the lease over and end.
    Shutdown,
}

/// An effect for the executor to perform.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Try to take the lease; answer with [`Event::Acquired`]. With
    /// `takeover`, also if it is held by exactly that record (whose
    /// connection Redis said is closed).
    Acquire {
        epoch_floor: u64,
        generation_floor: u64,
        takeover: Option<HolderRecord>,
    },
    /// Ask Redis whether this connection (the holder's lease connection)
    /// still exists; answer with [`Event::HolderChecked`].
    CheckHolder { client: RedisConnection },
    /// Extend the lease within `budget`; answer with [`Event::Renewed`]
    /// carrying `sent_at` (the lease counts from it).
    Renew {
        grant: LeaseGrant,
        budget: Duration,
        sent_at: Instant,
    },
    /// Give the lease back (fenced by its token); answer with
    /// [`Event::ReleaseDone`].
    Release { grant: LeaseGrant },
    /// Run one holder cycle that may write until `acts_until`; answer with
    /// [`Event::CycleDone`]. A handoff cycle (`handoff_only`) reads only the
    /// members' reports and the table's state, pings nobody, and plans on the
    /// last full cycle's inputs.
    StartCycle {
        grant: LeaseGrant,
        acts_until: Instant,
        generation_floor: u64,
        handoff_only: bool,
    },
    /// Drop the cycle in flight: its results are void.
    AbortCycle,
    /// The lease's local deadline moved (a renewal): writes must stop then.
    ActsUntil(Instant),
    /// This replica now holds the lease.
    BecameHolder { epoch: u64 },
    /// This replica stopped holding.
    SteppedDown {
        epoch: u64,
        transition: Transition,
        /// For a lost lease: what Redis said.
        detail: Option<&'static str>,
    },
    /// An attempt found the lease held (or foreign).
    SawHolder {
        holder: String,
        epoch: u64,
        generation: u64,
        foreign: Option<String>,
        /// Whether the holder recorded its lease connection (fast takeover).
        watchable: bool,
    },
    /// Everything is handed over: end the loop.
    Stop,
}

/// Where the replica is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Phase {
    Standby {
        next_attempt: Instant,
    },
    /// An acquisition is in flight, sent at `sent_at`.
    Acquiring {
        sent_at: Instant,
    },
    Holder(Holder),
    /// Shutdown: waiting for the releases in flight (and for an acquisition
    /// in flight, to release what it may bring).
    Stopping {
        acquiring: bool,
    },
    Stopped,
}

/// A holding: the lease and what is in flight on its behalf.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holder {
    pub lease: HeldLease,
    /// The send instant of the renewal in flight.
    renewing: Option<Instant>,
    /// Whether a cycle is running.
    cycling: bool,
    next_cycle: Instant,
    /// When the last full cycle started.
    last_cycle: Instant,
    /// When a handoff cycle is due (an acknowledgement, a wait that ends).
    next_handoff: Option<Instant>,
    /// When the last handoff cycle started.
    last_handoff: Instant,
}

impl Holder {
    /// Brings the next full cycle forward to `spacing` after the last one
    /// started (or now, if that has passed); never pushes it back.
    fn full_cycle_soon(&mut self, spacing: Duration, now: Instant) {
        let at = (self.last_cycle + spacing).max(now);
        self.next_cycle = self.next_cycle.min(at);
    }

    /// A handoff cycle by `at`, or sooner if one is due sooner.
    fn handoff_by(&mut self, at: Instant) {
        self.next_handoff = Some(self.next_handoff.map_or(at, |n| n.min(at)));
    }
}

/// One replica's coordinator state.
#[derive(Debug, Clone)]
pub struct Machine {
    settings: Settings,
    phase: Phase,
    epoch_floor: u64,
    generation_floor: u64,
    /// The epoch this replica last released, to ignore its own notice.
    released_epoch: Option<u64>,
    /// Replicas counted by the last census view, if any.
    replicas: Option<u64>,
    /// Releases sent and not finished: shutdown waits for them.
    releasing: u32,
    /// The holding a standby watches, from the last acquisition attempt.
    watch: Option<Watch>,
    /// Whether a holder check is in flight.
    checking: bool,
    /// Redis refused a holder check: no more until then.
    checks_refused_until: Option<Instant>,
}

/// A holding whose lease connection a standby checks.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Watch {
    record: HolderRecord,
    next_check: Instant,
}

impl Machine {
    /// A standby that tries to acquire at `now`.
    pub fn new(settings: Settings, now: Instant) -> Machine {
        Machine {
            settings,
            phase: Phase::Standby { next_attempt: now },
            epoch_floor: 0,
            generation_floor: 0,
            released_epoch: None,
            replicas: None,
            releasing: 0,
            watch: None,
            checking: false,
            checks_refused_until: None,
        }
    }

    pub fn phase(&self) -> &Phase {
        &self.phase
    }

    /// The held lease, while holding.
    pub fn holding(&self) -> Option<&HeldLease> {
        match &self.phase {
            Phase::Holder(h) => Some(&h.lease),
            _ => None,
        }
    }

    /// Whether this replica may act (write) at `now`.
    pub fn may_act(&self, now: Instant) -> bool {
        self.holding().is_some_and(|l| l.may_act(now))
    }

    pub fn epoch_floor(&self) -> u64 {
        self.epoch_floor
    }

    pub fn generation_floor(&self) -> u64 {
        self.generation_floor
    }

    /// When the executor must send [`Event::Tick`] next (`None`: only other
    /// events can move the machine on).
    pub fn next_wake(&self) -> Option<Instant> {
        match &self.phase {
            Phase::Standby { next_attempt } => match &self.watch {
                Some(w) if !self.checking => Some((*next_attempt).min(w.next_check)),
                _ => Some(*next_attempt),
            },
            Phase::Holder(h) => {
                let mut wake = h.lease.acts_until();
                if h.renewing.is_none() {
                    wake = wake.min(h.lease.next_renewal());
                }
                if !h.cycling {
                    wake = wake.min(h.next_cycle);
                    if let Some(at) = h.next_handoff {
                        wake = wake.min(at);
                    }
                }
                Some(wake)
            }
            Phase::Acquiring { .. } | Phase::Stopping { .. } | Phase::Stopped => None,
        }
    }

    /// Takes one event at `now`; returns what to do.
    pub fn step(&mut self, event: Event, now: Instant) -> Vec<Action> {
        let mut out = Vec::new();
        let mut phase = std::mem::replace(&mut self.phase, Phase::Stopped);
        // Whatever the event, a holder past its local deadline stops acting
        // first (a renewal that brings it back in time is applied below).
        if let Phase::Holder(h) = &phase
            && !h.lease.may_act(now)
            && !matches!(event, Event::Renewed { .. })
        {
            if h.cycling {
                out.push(Action::AbortCycle);
            }
            phase = self.step_down(&h.lease.clone(), Transition::Lapsed, None, now, &mut out);
        }
        self.phase = match (phase, event) {
            (Phase::Stopped, _) => Phase::Stopped,

            // Floors and views arrive in any phase.
            (phase, Event::Generation(g)) => {
                self.generation_floor = self.generation_floor.max(g);
                phase
            }
            (phase, Event::Census(view)) => {
                self.replicas = Some(view.replicas);
                phase
            }

            // Shutdown.
            (phase, Event::ReleaseDone) => {
                self.releasing = self.releasing.saturating_sub(1);
                match phase {
                    Phase::Stopping { acquiring: false } if self.releasing == 0 => {
                        out.push(Action::Stop);
                        Phase::Stopped
                    }
                    phase => phase,
                }
            }
            (Phase::Holder(h), Event::Shutdown) => {
                if h.cycling {
                    out.push(Action::AbortCycle);
                }
                self.give_up(&h.lease, Transition::Released, None, &mut out);
                Phase::Stopping { acquiring: false }
            }
            (Phase::Acquiring { .. }, Event::Shutdown) => Phase::Stopping { acquiring: true },
            (Phase::Standby { .. }, Event::Shutdown) if self.releasing > 0 => {
                Phase::Stopping { acquiring: false }
            }
            (Phase::Standby { .. }, Event::Shutdown) => {
                out.push(Action::Stop);
                Phase::Stopped
            }
            (phase @ Phase::Stopping { .. }, Event::Shutdown) => phase,
            (Phase::Stopping { acquiring: true }, Event::Acquired(result)) => {
                // Taken while stopping: hand it straight back.
                if let Ok(Acquisition::Acquired(grant)) = result {
                    self.epoch_floor = self.epoch_floor.max(grant.epoch);
                    self.released_epoch = Some(grant.epoch);
                    self.releasing += 1;
                    out.push(Action::Release { grant });
                }
                if self.releasing == 0 {
                    out.push(Action::Stop);
                    Phase::Stopped
                } else {
                    Phase::Stopping { acquiring: false }
                }
            }
            (phase @ Phase::Stopping { .. }, _) => phase,

            // Answers to holder checks arrive in any phase; only a standby
            // acts on them.
            (phase, Event::HolderChecked { client, result }) => {
                self.checking = false;
                self.holder_checked(phase, client, result, now, &mut out)
            }

            // Standby.
            (Phase::Standby { next_attempt }, Event::Tick) if now >= next_attempt => {
                self.watch = None;
                out.push(Action::Acquire {
                    epoch_floor: self.epoch_floor,
                    generation_floor: self.generation_floor,
                    takeover: None,
                });
                Phase::Acquiring { sent_at: now }
            }
            (Phase::Standby { next_attempt }, Event::Tick) => {
                if let Some(w) = &self.watch
                    && !self.checking
                    && now >= w.next_check
                {
                    self.checking = true;
                    out.push(Action::CheckHolder {
                        client: w.record.client,
                    });
                }
                Phase::Standby { next_attempt }
            }
            (Phase::Standby { next_attempt }, Event::ReleaseNotice { epoch }) => {
                // Our own release is no reason to come back at once: that
                // would spin if whatever made us step down persists.
                if epoch.is_some() && epoch == self.released_epoch {
                    Phase::Standby { next_attempt }
                } else {
                    Phase::Standby { next_attempt: now }
                }
            }
            (phase @ Phase::Standby { .. }, _) => phase,

            // Acquiring.
            (Phase::Acquiring { sent_at }, Event::Acquired(result)) => {
                self.acquired(result, sent_at, now, &mut out)
            }
            (phase @ Phase::Acquiring { .. }, _) => phase,

            // Holder.
            (Phase::Holder(h), event) => self.hold(h, event, now, &mut out),
        };
        out
    }

    fn holder_checked(
        &mut self,
        phase: Phase,
        client: RedisConnection,
        result: Result<HolderConnection, ()>,
        now: Instant,
        out: &mut Vec<Action>,
    ) -> Phase {
        let Phase::Standby { next_attempt } = phase else {
            return phase;
        };
        let Some(w) = self.watch.as_mut().filter(|w| w.record.client == client) else {
            // About a holding no longer watched (the answer came late).
            return phase;
        };
        match result {
            Ok(HolderConnection::Closed) => {
                // Client ids are never reused while a Redis server process
                // runs, and the answer came from the server the record
                // names: that connection is gone for good. Take over now; Redis does it
                // only if the lease still holds exactly this record.
                let record = self.watch.take().map(|w| w.record);
                out.push(Action::Acquire {
                    epoch_floor: self.epoch_floor,
                    generation_floor: self.generation_floor,
                    takeover: record,
                });
                return Phase::Acquiring { sent_at: now };
            }
            // Not permitted: no more checks for a while (each refusal is an
            // ACL LOG entry); a changed ACL is seen at the next try.
            Ok(HolderConnection::Refused) => {
                self.watch = None;
                self.checks_refused_until = Some(now + self.settings.timing.client_refused_backoff);
            }
            Ok(HolderConnection::Open) | Err(()) => {
                w.next_check = now
                    + self
                        .settings
                        .takeover_check
                        .unwrap_or(self.settings.lease.retry_interval);
            }
        }
        Phase::Standby { next_attempt }
    }

    fn acquired(
        &mut self,
        result: Result<Acquisition, ()>,
        sent_at: Instant,
        now: Instant,
        out: &mut Vec<Action>,
    ) -> Phase {
        let retry = self.settings.lease.retry_interval;
        self.watch = None;
        match result {
            Ok(Acquisition::Acquired(grant)) => {
                self.epoch_floor = self.epoch_floor.max(grant.epoch);
                let lease = HeldLease::new(grant, self.settings.lease, sent_at);
                out.push(Action::BecameHolder {
                    epoch: lease.epoch(),
                });
                out.push(Action::ActsUntil(lease.acts_until()));
                let mut phase = Phase::Holder(Holder {
                    lease,
                    renewing: None,
                    cycling: false,
                    next_cycle: now,
                    last_cycle: now,
                    next_handoff: None,
                    last_handoff: now,
                });
                // Start at once if the lease is still valid (a slow answer
                // may have eaten it up).
                if let Phase::Holder(h) = phase {
                    phase = self.hold(h, Event::Tick, now, out);
                }
                phase
            }
            Ok(Acquisition::Held {
                pttl,
                holder,
                epoch,
                generation,
                foreign,
                record,
            }) => {
                self.epoch_floor = self.epoch_floor.max(epoch);
                self.generation_floor = self.generation_floor.max(generation);
                // Watch the holder's connection, unless Redis refused lately.
                let refused = self.checks_refused_until.is_some_and(|t| now < t);
                if let (Some(every), Some(record), false) =
                    (self.settings.takeover_check, record.clone(), refused)
                {
                    self.watch = Some(Watch {
                        record,
                        next_check: now + every,
                    });
                }
                out.push(Action::SawHolder {
                    holder,
                    epoch,
                    generation,
                    foreign,
                    watchable: record.is_some(),
                });
                Phase::Standby {
                    next_attempt: lease::next_attempt(now, pttl, retry),
                }
            }
            Err(()) => Phase::Standby {
                next_attempt: now + retry,
            },
        }
    }

    fn hold(&mut self, mut h: Holder, event: Event, now: Instant, out: &mut Vec<Action>) -> Phase {
        match event {
            Event::Tick => {}
            Event::Renewed { sent_at, result } => {
                if h.renewing == Some(sent_at) {
                    h.renewing = None;
                }
                match result {
                    Ok(Renewal::Renewed) => {
                        h.lease.renewed(sent_at);
                        out.push(Action::ActsUntil(h.lease.acts_until()));
                    }
                    Ok(Renewal::Lost(why)) => {
                        if h.cycling {
                            out.push(Action::AbortCycle);
                        }
                        return self.step_down(
                            &h.lease,
                            Transition::Lost,
                            Some(why.describe()),
                            now,
                            out,
                        );
                    }
                    Err(()) => h.lease.renewal_failed(now),
                }
            }
            Event::HandoffHint => {
                // Spaced: a flood of hints (anyone allowed to publish can
                // send them) costs at most one small cycle per spacing.
                h.handoff_by((h.last_handoff + self.settings.timing.handoff_spacing).max(now));
            }
            Event::MemberDown => {
                // Brought forward, never pushed back; spaced so that many
                // members dying together cost a few cycles, not one each.
                h.full_cycle_soon(self.settings.timing.early_cycle_spacing, now);
            }
            Event::CycleDone(summary) => {
                h.cycling = false;
                if let Some(at) = summary.next_release {
                    h.handoff_by(at);
                }
                if summary.epoch == h.lease.epoch() {
                    self.generation_floor = self.generation_floor.max(summary.generation_floor);
                    if summary.verify_now {
                        h.full_cycle_soon(self.settings.timing.early_cycle_spacing, now);
                    }
                    match summary.outcome {
                        CycleOutcome::Fenced => {
                            return self.step_down(&h.lease, Transition::Fenced, None, now, out);
                        }
                        // Only once the suspicions are stored (written now,
                        // or unchanged since), so the next holder knows them.
                        CycleOutcome::Written { .. } | CycleOutcome::Unchanged
                            if summary.own_suspicions && self.replicas.is_some_and(|n| n > 1) =>
                        {
                            return self.step_down(&h.lease, Transition::Abdicated, None, now, out);
                        }
                        _ => {}
                    }
                }
            }
            // Holders ignore the rest (notices of others' releases, stray
            // results of earlier phases).
            _ => {}
        }
        // Whatever happened, a holder past its local deadline stops acting.
        if !h.lease.may_act(now) {
            if h.cycling {
                out.push(Action::AbortCycle);
            }
            return self.step_down(&h.lease, Transition::Lapsed, None, now, out);
        }
        if h.renewing.is_none() && now >= h.lease.next_renewal() {
            h.renewing = Some(now);
            out.push(Action::Renew {
                grant: h.lease.grant.clone(),
                budget: h.lease.renewal_budget(now),
                sent_at: now,
            });
        }
        if !h.cycling && now >= h.next_cycle {
            // A full cycle plans the handoff too.
            h.cycling = true;
            h.next_handoff = None;
            h.last_cycle = now;
            out.push(Action::StartCycle {
                grant: h.lease.grant.clone(),
                acts_until: h.lease.acts_until(),
                generation_floor: self.generation_floor,
                handoff_only: false,
            });
            h.next_cycle = (h.next_cycle + self.settings.poll_interval).max(now);
        } else if !h.cycling && h.next_handoff.is_some_and(|at| now >= at) {
            h.cycling = true;
            h.next_handoff = None;
            h.last_handoff = now;
            out.push(Action::StartCycle {
                grant: h.lease.grant.clone(),
                acts_until: h.lease.acts_until(),
                generation_floor: self.generation_floor,
                handoff_only: true,
            });
        }
        Phase::Holder(h)
    }

    fn step_down(
        &mut self,
        lease: &HeldLease,
        transition: Transition,
        detail: Option<&'static str>,
        now: Instant,
        out: &mut Vec<Action>,
    ) -> Phase {
        self.give_up(lease, transition, detail, out);
        Phase::Standby {
            next_attempt: now + self.settings.lease.retry_interval,
        }
    }

    fn give_up(
        &mut self,
        lease: &HeldLease,
        transition: Transition,
        detail: Option<&'static str>,
        out: &mut Vec<Action>,
    ) {
        out.push(Action::SteppedDown {
            epoch: lease.epoch(),
            transition,
            detail,
        });
        if transition.releases() {
            self.released_epoch = Some(lease.epoch());
            self.releasing += 1;
            out.push(Action::Release {
                grant: lease.grant.clone(),
            });
        }
    }
}

#[cfg(test)]
mod tests;
