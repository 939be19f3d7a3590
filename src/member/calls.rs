//! The application's [`Handoff`] calls, one task per unit: a slow start or
//! stop of one unit delays no other unit's.
//!
//! Guarantees:
//! - for one unit, `revoked` never starts before `acquired` returned;
//! - an `acquired` that panics counts as returned (and is logged);
//! - a `revoked` that panics may have left the unit's work running: it is
//!   logged, counted (`distributor_member_revocations_failed_total`) and
//!   reported as [`Done::StopFailed`], so that the unit counts as stopped
//!   only once its hold has ended (`core::ownership`);
//! - each call's end reaches the member's task as a [`Done`].

use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use futures::FutureExt;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::handoff::{Handoff, Owned};
use super::meters::Meters;
use crate::core::ownership::Revocation;
use crate::edge::clock;

/// A finished handler call, for one unit.
pub(super) enum Done {
    Revoked(String),
    /// The revocation handler panicked: the unit's work may still run.
    StopFailed(String),
    Acquired(String),
}

/// Calls `revoked` for `owned` once its `acquired` returned (`acquiring`
/// is cancelled then), and says how it ended.
pub(super) async fn revoke(
    handoff: Arc<dyn Handoff>,
    owned: Owned,
    why: Revocation,
    acquiring: Option<CancellationToken>,
    member: String,
    meters: Meters,
    done: mpsc::UnboundedSender<Done>,
) {
    if let Some(acquiring) = acquiring {
        acquiring.cancelled().await;
    }
    let unit = owned.unit.clone();
    let started = clock::now();
    // The call itself inside: a handler may panic before it returns its
    // future.
    let call = AssertUnwindSafe(async { handoff.revoked(owned, why).await });
    if let Err(panic) = call.catch_unwind().await {
        tracing::error!(
            member,
            unit,
            panic = panic_text(&panic),
            reason = why.reason(),
            "the revocation handler panicked: its work may still run, so the unit counts as stopped only once its hold ends, and the acknowledgement waits until then"
        );
        meters.revocations_failed.increment(1);
        let _ = done.send(Done::StopFailed(unit));
        return;
    }
    meters.revoked(
        why.reason(),
        clock::now().saturating_duration_since(started),
    );
    let _ = done.send(Done::Revoked(unit));
}

/// Calls `acquired` for `owned`; `finished` is cancelled when it returned
/// (or this task was dropped unfinished), before the end is reported.
pub(super) async fn acquire(
    handoff: Arc<dyn Handoff>,
    owned: Owned,
    finished: CancellationToken,
    member: String,
    done: mpsc::UnboundedSender<Done>,
) {
    let _finished = finished.clone().drop_guard();
    let unit = owned.unit.clone();
    // The call itself inside: a handler may panic before it returns its
    // future.
    let call = AssertUnwindSafe(async { handoff.acquired(owned).await });
    if let Err(panic) = call.catch_unwind().await {
        tracing::error!(
            member,
            unit,
            panic = panic_text(&panic),
            "the acquisition handler panicked"
        );
    }
    // Ended before it is reported, so that the loop taking the report
    // forgets the unit's entry.
    finished.cancel();
    let _ = done.send(Done::Acquired(unit));
}

/// What a handler's panic said, if it said it as text.
fn panic_text(panic: &Box<dyn std::any::Any + Send>) -> &str {
    panic
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("(not text)")
}
