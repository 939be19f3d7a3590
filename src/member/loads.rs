//! The member's measured loads (`-balance load`): the smoothed load of every
//! unit it owns, written to `{T}:loads` on a timer of its own, so that a slow
//! write never delays the member's reads and reports. Only units it owns are
//! written; a failed write is retried at the next turn, logged once.

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::handoff::Shared;
use crate::core::load::LoadBook;
use crate::edge::redis::Store;

/// Writes the smoothed loads of the units this member owns to `{T}:loads`
/// every `every`, once the application reported one
/// ([`super::Member::report_load`]), until the member stops serving or has
/// left. A failed write is retried at the next turn.
pub(super) async fn report_loads(
    store: Store,
    id: String,
    shared: Arc<Shared>,
    loads: Arc<std::sync::Mutex<LoadBook>>,
    every: Duration,
    serving: CancellationToken,
    left: Arc<AtomicBool>,
) {
    let mut failing = false;
    loop {
        tokio::select! {
            _ = serving.cancelled() => return,
            _ = tokio::time::sleep(every) => {}
        }
        if left.load(Ordering::SeqCst) {
            return;
        }
        let value = {
            let mut book = loads.lock().unwrap_or_else(|e| e.into_inner());
            if !book.reported() {
                continue;
            }
            let owned: HashSet<String> =
                shared.lock().owned().into_iter().map(|t| t.unit).collect();
            book.retain(|u| owned.contains(u));
            book.encode(owned.iter().map(String::as_str), crate::unix_ms())
        };
        match store.write_loads(&id, &value).await {
            Ok(()) if failing => {
                failing = false;
                tracing::info!(member = %id, "measured loads written again");
            }
            Ok(()) => {}
            Err(e) if !failing => {
                failing = true;
                tracing::warn!(member = %id, error = %e, "could not write the measured loads; retrying every report interval");
            }
            Err(_) => {}
        }
    }
}
