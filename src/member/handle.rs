//! A cheap, cloneable handle on a running [`Member`](super::Member), for the
//! application's handlers and tasks: they cannot hold the `Member` itself,
//! which [`drain`](super::Member::drain) and
//! [`shutdown`](super::Member::shutdown) consume. It reports loads, changes
//! the weight and checks holds; it does not keep the member running (once
//! the member stopped, holds are `None` and loads go nowhere).

use std::sync::Arc;

use super::handoff::{Hold, Shared};
use super::options;
use crate::core::load::LoadBook;
use crate::core::ownership::FencingToken;
use crate::edge::clock;
use crate::error::MemberError;

/// See the module documentation; made by [`super::Member::handle`].
#[derive(Clone)]
pub struct MemberHandle {
    pub(super) id: Arc<str>,
    pub(super) shared: Arc<Shared>,
    pub(super) loads: Arc<std::sync::Mutex<LoadBook>>,
}

impl MemberHandle {
    /// The member id: the address written into the services list.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// As [`super::Member::report_load`].
    pub fn report_load(&self, unit: &str, load: f64) -> bool {
        self.loads
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .sample(unit, load, clock::now())
    }

    /// As [`super::Member::set_weight`].
    pub fn set_weight(&self, weight: u32) -> Result<(), MemberError> {
        options::check_weight(weight)?;
        self.shared.lock().set_weight(weight);
        self.shared.wake.notify_one();
        Ok(())
    }

    /// As [`super::Member::holds`].
    pub fn holds(&self, unit: &str) -> Option<FencingToken> {
        self.shared.lock().holds(unit, clock::now())
    }

    /// As [`super::Member::hold`].
    pub fn hold(&self, unit: &str) -> Option<Hold> {
        self.shared.hold(unit)
    }

    /// As [`super::Member::routed_current`].
    pub fn routed_current(&self, unit: &str, routed_by: u64) -> bool {
        self.holds(unit).is_some_and(|t| t.admits_route(routed_by))
    }
}

/// Resolves on the first SIGTERM or Ctrl-C (SIGINT), the signals an
/// orchestrator and a terminal send: `member.drain()` after it, as in
/// `examples/embedded.rs`. Resolves at once if the signal handlers cannot be
/// installed (then nothing could stop the process gracefully anyway).
pub async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let Ok(mut term) = signal(SignalKind::terminate()) else {
            tracing::warn!("cannot install a SIGTERM handler: stopping now");
            return;
        };
        tokio::select! {
            _ = term.recv() => {}
            _ = tokio::signal::ctrl_c() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}
