//! The application's side of a handoff: the [`Handoff`] trait that a
//! [`Member`](super::Member) calls when units come and go, the units it hands
//! over ([`Owned`]), and the [`Hold`] to check before each side effect.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};

use std::time::Instant;
use tokio::sync::Notify;

use crate::core::handoff::PingView;
use crate::core::ownership::{FencingToken, Ownership, Revocation, Tenure};
use crate::edge::clock;
use crate::edge::grpc::PingGate;

/// The future a [`Handoff`] call returns: boxed, so that the trait can be
/// used as `dyn Handoff` (an `Arc<dyn Handoff>` is a handler too).
pub type HandoffFuture<'a> = Pin<Box<dyn Future<Output = ()> + Send + 'a>>;

/// What the application does when this member gains or loses a unit.
///
/// One call per unit, each on a task of its own: a slow start or stop of
/// one unit delays no other unit's. For one unit, calls never overlap: its
/// `revoked` starts only once its `acquired` returned. An `acquired` that
/// panics counts as returned (and is logged). A `revoked` that panics may
/// have left the unit's work running: the unit counts as stopped only once
/// its hold has ended, and the acknowledgement of the generation that
/// revoked it waits until then (logged, and counted by
/// `distributor_member_revocations_failed_total`).
///
/// ```
/// use distributor::member::{Handoff, HandoffFuture, Owned, Revocation};
///
/// struct Crawler;
///
/// impl Handoff for Crawler {
///     fn acquired(&self, unit: Owned) -> HandoffFuture<'_> {
///         Box::pin(async move { println!("crawling {} (token {})", unit.unit, unit.token) })
///     }
///
///     fn revoked(&self, unit: Owned, _why: Revocation) -> HandoffFuture<'_> {
///         Box::pin(async move { println!("stopped {}", unit.unit) })
///     }
/// }
///
/// let _as_object: std::sync::Arc<dyn Handoff> = std::sync::Arc::new(Crawler);
/// ```
pub trait Handoff: Send + Sync + 'static {
    /// `unit` is this member's from now on: start it, and return (its work
    /// runs elsewhere; keep [`Owned::hold`] to check before each side
    /// effect, or select on [`Owned::cancelled`]).
    fn acquired(&self, unit: Owned) -> HandoffFuture<'_>;

    /// Stop `unit` completely, then return: once this returns, nothing the
    /// application does touches it any more. The member reports that to the
    /// holder, which only then gives it to its next owner; so a revocation
    /// that takes long delays that unit's move, and the acknowledgement of
    /// the table generation that took it (other units' moves in the same
    /// generation wait for it too: the protocol acknowledges generations,
    /// not units). One that outlasts the unit's hold is logged loudly, since
    /// the next owner may then start. With [`Revocation::Fenced`] the hold
    /// has already ended: stop at once.
    fn revoked(&self, unit: Owned, why: Revocation) -> HandoffFuture<'_>;
}

/// No handler: follow [`Member::assignment`](super::Member::assignment)
/// instead. A revocation completes as soon as the assignment without the
/// unit is published.
impl Handoff for () {
    fn acquired(&self, _: Owned) -> HandoffFuture<'_> {
        Box::pin(std::future::ready(()))
    }

    fn revoked(&self, _: Owned, _: Revocation) -> HandoffFuture<'_> {
        Box::pin(std::future::ready(()))
    }
}

impl<H: Handoff + ?Sized> Handoff for Arc<H> {
    fn acquired(&self, unit: Owned) -> HandoffFuture<'_> {
        (**self).acquired(unit)
    }

    fn revoked(&self, unit: Owned, why: Revocation) -> HandoffFuture<'_> {
        (**self).revoked(unit, why)
    }
}

/// A unit handed to the application, with its fencing token and its hold.
#[derive(Debug, Clone)]
pub struct Owned {
    pub unit: String,
    pub token: FencingToken,
    pub hold: Hold,
}

impl Owned {
    /// Resolves when the hold on this unit ends ([`Hold::cancelled`]): the
    /// work on it must stop.
    pub async fn cancelled(&self) {
        self.hold.cancelled().await;
    }
}

/// A cheap handle on this member's hold of one unit (one tenure): check it
/// before every side effect. It reads the monotonic clock and the member's
/// state under a short lock, no IO.
#[derive(Clone)]
pub struct Hold {
    unit: Arc<str>,
    token: FencingToken,
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Hold {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hold")
            .field("unit", &self.unit)
            .field("token", &self.token)
            .finish()
    }
}

/// The hold on a unit has ended: it was revoked, or the member lost contact
/// for its deadline. Its next owner may already work on it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the hold on unit {unit:?} (token {token}) has ended")]
pub struct HoldLost {
    pub unit: String,
    pub token: FencingToken,
}

impl Hold {
    pub fn unit(&self) -> &str {
        &self.unit
    }

    pub fn token(&self) -> FencingToken {
        self.token
    }

    /// Whether this member still owns the unit with this token now: not
    /// revoked, and the hold's end (see [`Hold::ends`]) not reached.
    pub fn is_held(&self) -> bool {
        self.check().is_ok()
    }

    /// [`Hold::is_held`], as a `Result` for `?` before a side effect.
    pub fn check(&self) -> Result<FencingToken, HoldLost> {
        let held = self.shared.peek().holds(&self.unit, clock::now());
        match held {
            Some(t) if t == self.token => Ok(t),
            _ => Err(HoldLost {
                unit: self.unit.to_string(),
                token: self.token,
            }),
        }
    }

    /// When the hold ends unless a read and a ping extend it; `None` once it
    /// has ended. A side effect that must finish within the hold can bound
    /// itself by this instant.
    pub fn ends(&self) -> Option<Instant> {
        let core = self.shared.peek();
        let now = clock::now();
        (core.holds(&self.unit, now) == Some(self.token))
            .then(|| core.hold_end(&self.unit))
            .flatten()
    }

    /// Resolves when this hold ends: at once when the unit is revoked, the
    /// member stops or is fenced, and at [`Hold::ends`] when no read and
    /// ping extended it by then (a wait that follows each extension).
    /// Resolves at once for a hold that has ended. Cancel-safe: dropping
    /// the future changes nothing, and it holds no lock while it waits.
    ///
    /// For a task working on the unit: `select!` on this and the work, and
    /// stop when it resolves (a side effect should still [`Hold::check`]
    /// first: the hold can end between the check and the effect only by
    /// time, which [`Hold::ends`] bounds).
    pub async fn cancelled(&self) {
        loop {
            // Registered before the state is read, so that a change made
            // after the read wakes it.
            let changed = self.shared.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            let Some(end) = self.ends() else {
                return;
            };
            tokio::select! {
                () = &mut changed => {}
                () = tokio::time::sleep_until(tokio::time::Instant::from_std(end)) => {}
            }
        }
    }
}

/// The member's ownership, shared by its task, its ping responder and the
/// application's holds.
pub(crate) struct Shared {
    core: Mutex<Ownership>,
    /// Wakes the member's task after a ping changed the state.
    pub(crate) wake: Notify,
    /// Wakes every [`Hold::cancelled`] after each use of the state by the
    /// member (any of them may have ended a hold; each checks its own).
    changed: Notify,
}

/// The state, locked by the member; dropping it wakes the holds' waiters.
pub(crate) struct Locked<'a> {
    guard: Option<MutexGuard<'a, Ownership>>,
    changed: &'a Notify,
}

impl std::ops::Deref for Locked<'_> {
    type Target = Ownership;

    fn deref(&self) -> &Ownership {
        self.guard.as_ref().expect("locked until dropped")
    }
}

impl std::ops::DerefMut for Locked<'_> {
    fn deref_mut(&mut self) -> &mut Ownership {
        self.guard.as_mut().expect("locked until dropped")
    }
}

impl Drop for Locked<'_> {
    fn drop(&mut self) {
        // Unlocked first, so that the woken waiters find the lock free.
        self.guard = None;
        self.changed.notify_waiters();
    }
}

impl Shared {
    pub(crate) fn new(core: Ownership) -> Arc<Shared> {
        Arc::new(Shared {
            core: Mutex::new(core),
            wake: Notify::new(),
            changed: Notify::new(),
        })
    }

    /// The state, for the member (its task, its ping responder), which may
    /// change it; never held across an await. A panic while it was held
    /// (a bug) does not stop the member: the state is still consistent per
    /// call. Every use wakes the holds' [`Hold::cancelled`] waiters, which
    /// is cheap without waiters and a short recheck with them.
    pub(crate) fn lock(&self) -> Locked<'_> {
        Locked {
            guard: Some(self.core.lock().unwrap_or_else(|e| e.into_inner())),
            changed: &self.changed,
        }
    }

    /// The state, read by the application's holds: no wakeup, since a read
    /// changes nothing (an application checking its hold in a loop must not
    /// wake every waiter).
    pub(crate) fn peek(&self) -> MutexGuard<'_, Ownership> {
        self.core.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn owned(self: &Arc<Shared>, tenures: Vec<Tenure>) -> Vec<Owned> {
        tenures
            .into_iter()
            .map(|t| Owned {
                hold: Hold {
                    unit: t.unit.as_str().into(),
                    token: t.token,
                    shared: self.clone(),
                },
                unit: t.unit,
                token: t.token,
            })
            .collect()
    }

    pub(crate) fn hold(self: &Arc<Shared>, unit: &str) -> Option<Hold> {
        let token = self.peek().holds(unit, clock::now())?;
        Some(Hold {
            unit: unit.into(),
            token,
            shared: self.clone(),
        })
    }
}

impl PingGate for Shared {
    fn admit(&self, received: Instant, view: Option<PingView>) -> Result<(), String> {
        let ok = self.lock().ping(received, view);
        self.wake.notify_one();
        if ok {
            Ok(())
        } else {
            Err("fenced: no successful read of the matching table or no ping within the deadline, or stopping".into())
        }
    }
}
