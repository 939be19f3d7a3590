//! The Redis calls the machine asks for (acquire, renew, release, check a
//! holder's connection), run as tasks, and their results turned back into
//! the machine's events, with their logs, metrics and status.

use std::collections::HashSet;

use futures::future::BoxFuture;
use futures::stream::FuturesUnordered;
use std::time::Instant;
use tracing::Span;

use crate::coordinator::holder::{InFlight, mark_error};
use crate::coordinator::machine::{Action, Event, Transition};
use crate::core::handoff::RedisConnection;
use crate::core::lease::{Acquisition, Claim, HolderConnection, Renewal};
use crate::core::status::{Role, Takeover};
use crate::edge::redis::LeaseClient;
use crate::error::StoreError;
use crate::unix_ms;

use super::tasks::bump;
use super::{Executor, Holding, lease_span};
use crate::edge::clock;

/// A Redis call started for the machine, finished.
pub(super) enum Done {
    Acquire(Result<Acquisition, StoreError>),
    Renew {
        sent_at: Instant,
        epoch: u64,
        result: Result<Renewal, StoreError>,
    },
    Release {
        epoch: u64,
        result: Result<bool, StoreError>,
    },
    CheckHolder {
        client: RedisConnection,
        result: Result<HolderConnection, StoreError>,
    },
}

impl Executor {
    /// Performs an action that needs no loop state.
    pub(super) fn perform(
        &mut self,
        action: Action,
        calls: &mut FuturesUnordered<BoxFuture<'static, Done>>,
    ) {
        match action {
            Action::CheckHolder { client } => {
                let store = self.store.clone();
                calls.push(Box::pin(async move {
                    let result = store.holder_connection(client).await;
                    Done::CheckHolder { client, result }
                }));
            }
            Action::Acquire {
                epoch_floor,
                generation_floor,
                takeover,
            } => {
                let (store, timing) = (self.store.clone(), self.config.lease);
                let (id, threshold) = (
                    self.config.replica_id.clone(),
                    self.config.failure_threshold,
                );
                calls.push(Box::pin(async move {
                    let claim = Claim {
                        ttl: timing.ttl,
                        epoch_floor,
                        generation_floor,
                        holder_id: &id,
                        now_ms: unix_ms(),
                        failure_threshold: threshold,
                        takeover: takeover.as_ref(),
                    };
                    Done::Acquire(store.acquire(&claim).await)
                }));
            }
            Action::Renew {
                grant,
                budget,
                sent_at,
            } => {
                let (store, ttl) = (self.store.clone(), self.config.lease.ttl);
                calls.push(Box::pin(async move {
                    let result = store.renew(&grant, ttl, budget).await;
                    Done::Renew {
                        sent_at,
                        epoch: grant.epoch,
                        result,
                    }
                }));
            }
            Action::Release { grant } => {
                let store = self.store.clone();
                calls.push(Box::pin(async move {
                    let result = store.release(&grant).await;
                    Done::Release {
                        epoch: grant.epoch,
                        result,
                    }
                }));
            }
            Action::ActsUntil(at) => {
                self.acts_until.send_replace(at);
            }
            Action::BecameHolder { epoch } => {
                self.metrics.lease("acquired");
                // The warm view is this holding's first cycle's now.
                self.metrics.warm_generation.set(0);
                lease_span(&self.config.replica_id, "acquired", epoch).in_scope(|| {
                    tracing::info!(replica = %self.config.replica_id, epoch, "lease acquired; acting as holder")
                });
                // Refusals seen in an earlier holding are that holding's.
                self.refused.clear();
                self.refusals_due = None;
                self.holding = Some(Holding {
                    epoch,
                    view: None,
                    in_flight: InFlight::new(),
                    in_flight_members: HashSet::new(),
                    settled: InFlight::new(),
                    cycle_started: clock::now(),
                    cycle_span: Span::none(),
                    handoff_only: false,
                });
                self.update(|s| {
                    s.lease_problem = None;
                    s.holding_blocked = None;
                    s.role = Role::Holder;
                    s.epoch = epoch;
                    s.holder = Some(self.config.replica_id.clone());
                    s.lease_acquisitions += 1;
                });
            }
            Action::SteppedDown {
                epoch,
                transition,
                detail,
            } => {
                self.metrics.lease(transition.label());
                // A standby speaks for no holder. Its warm-up only opens
                // connections (`Pinger::warm`): no ping of it gives a member
                // a hold.
                self.pinger.set_view(None);
                let why = match transition {
                    Transition::Lapsed => "could not renew the lease within the renew deadline",
                    Transition::Lost => detail.unwrap_or("the lease is someone else's"),
                    Transition::Fenced => "a write was fenced by redis",
                    Transition::Abdicated => {
                        "most of a group failed at once, which this replica's own network may \
                         cause: handing the lease over so that another replica can confirm"
                    }
                    Transition::Released => "shutting down",
                };
                lease_span(&self.config.replica_id, transition.label(), epoch).in_scope(|| {
                    if transition == Transition::Released {
                        tracing::info!(replica = %self.config.replica_id, epoch, "releasing the lease")
                    } else {
                        tracing::warn!(replica = %self.config.replica_id, epoch, reason = why, "stepping down to standby")
                    }
                });
                self.holding = None;
                // The connections to members stay: a standby keeps them warm
                // (its warm task drops unlisted members'), so that a replica
                // that lapsed under load takes the lease back with warm
                // channels, not 10,000 new connections.
                self.update(|s| {
                    s.role = Role::Standby;
                    s.holder = None;
                });
            }
            Action::SawHolder {
                holder,
                epoch,
                generation,
                foreign,
                watchable,
            } => {
                if !watchable && foreign.is_none() {
                    self.set_takeover(Takeover::Ttl(
                        "the holder recorded no lease connection (CLIENT not permitted to it, \
                         a cluster, or an older version)"
                            .into(),
                    ));
                }
                if let Some(why) = &foreign
                    && self.status.borrow().lease_problem.as_ref() != Some(why)
                {
                    self.metrics.lease("foreign");
                    tracing::warn!(
                        key = %self.store.keys().lease,
                        problem = %why,
                        "the lease key was not written by a replica; it was given a TTL and will lapse"
                    );
                }
                self.update(|s| {
                    s.holder = (!holder.is_empty()).then(|| holder.clone());
                    s.epoch = epoch;
                    bump(&mut s.generation, generation);
                    s.lease_problem = foreign.clone();
                });
            }
            Action::Stop | Action::AbortCycle | Action::StartCycle { .. } => {
                unreachable!("handled by the loop")
            }
        }
    }

    /// Records how a crashed holder would be replaced; logs a change to or
    /// from the TTL fallback once.
    fn set_takeover(&self, takeover: Takeover) {
        let before = self.status.borrow().takeover.clone();
        if before == takeover {
            return;
        }
        match &takeover {
            Takeover::Ttl(why) => tracing::warn!(
                reason = %why,
                "fast takeover unavailable: a crashed holder is replaced only when its lease \
                 expires (up to one TTL)"
            ),
            Takeover::Fast if before != Takeover::Unknown => {
                tracing::info!("fast takeover available again")
            }
            _ => {}
        }
        self.update(|s| s.takeover = takeover);
    }

    /// The takeover mode this holder's own lease connection allows.
    fn own_takeover(&self) {
        match self.store.lease_client() {
            LeaseClient::Id(_) => self.set_takeover(Takeover::Fast),
            LeaseClient::Refused { why, .. } => self.set_takeover(Takeover::Ttl(why)),
            LeaseClient::Unknown => {}
        }
    }

    /// Turns a finished call into the machine's event, logging and counting.
    pub(super) fn done(&mut self, done: Done) -> Event {
        match done {
            Done::CheckHolder { client, result } => {
                self.redis_result(&result);
                match &result {
                    Ok(HolderConnection::Refused) => self.set_takeover(Takeover::Ttl(
                        "CLIENT not permitted or not available".into(),
                    )),
                    Ok(_) => self.set_takeover(Takeover::Fast),
                    Err(e) => {
                        tracing::debug!(error = %e, client = %client.encode(), "could not check the holder's connection")
                    }
                }
                if matches!(result, Ok(HolderConnection::Closed)) {
                    tracing::info!(
                        client = %client.encode(),
                        "the holder's lease connection is closed; taking the lease over"
                    );
                }
                Event::HolderChecked {
                    client,
                    result: result.map_err(|_| ()),
                }
            }
            Done::Acquire(result) => {
                self.redis_result(&result);
                if let Ok(Acquisition::Acquired(_)) = &result {
                    self.own_takeover();
                }
                match result {
                    Ok(a) => {
                        if std::mem::take(&mut self.acquire_failing) {
                            tracing::info!("redis reachable again");
                        }
                        Event::Acquired(Ok(a))
                    }
                    Err(e) => {
                        if !std::mem::replace(&mut self.acquire_failing, true) || !e.is_retryable()
                        {
                            tracing::warn!(error = %e, kind = e.kind(), "lease acquisition failed; retrying every retry interval");
                        }
                        if !e.is_retryable() {
                            self.update(|s| s.last_error = Some(e.to_string()));
                        }
                        Event::Acquired(Err(()))
                    }
                }
            }
            Done::Renew {
                sent_at,
                epoch,
                result,
            } => {
                self.redis_result(&result);
                if result.is_ok() {
                    self.own_takeover();
                }
                if let Err(e) = &result {
                    self.metrics.lease("renew_failed");
                    let span = lease_span(&self.config.replica_id, "renew_failed", epoch);
                    mark_error(&span, &e.to_string());
                    span.in_scope(|| {
                        tracing::warn!(error = %e, kind = e.kind(), epoch, "lease renewal failed; retrying until the renew deadline")
                    });
                }
                Event::Renewed {
                    sent_at,
                    result: result.map_err(|_| ()),
                }
            }
            Done::Release { epoch, result } => {
                self.redis_result(&result);
                match result {
                    Ok(true) => {
                        lease_span(&self.config.replica_id, "released", epoch)
                            .in_scope(|| tracing::info!(epoch, "lease released"));
                    }
                    Ok(false) => tracing::info!(epoch, "lease was no longer ours"),
                    Err(e) => {
                        tracing::warn!(error = %e, epoch, "could not release the lease; it will lapse")
                    }
                }
                Event::ReleaseDone
            }
        }
    }
}
