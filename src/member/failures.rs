//! How the member's Redis failures are logged: a failing read once, then a
//! summary every 30 s, then once when reads work again (never a line per
//! poll); other calls' errors at `warn` unless they are retried anyway.

use std::time::{Duration, Instant};

use crate::core::timing::Timing;
use crate::edge::clock;
use crate::error::StoreError;

/// How often a read failure that goes on is summarised.
const FAILURE_SUMMARY: Duration = Timing::DEFAULT.failure_summary;

/// Read failures, summarised.
#[derive(Default)]
pub(super) struct ReadFailures {
    since: Option<Instant>,
    count: u64,
    said: Option<Instant>,
}

impl ReadFailures {
    pub(super) fn failed(&mut self, member: &str, e: &StoreError) {
        let now = clock::now();
        self.count += 1;
        let since = *self.since.get_or_insert(now);
        match self.said {
            None => {
                tracing::warn!(member, error = %e, kind = e.kind(), "could not read the matching table; retrying (further failures are summarised)");
                self.said = Some(now);
            }
            Some(said) if now - said >= FAILURE_SUMMARY => {
                tracing::warn!(member, error = %e, kind = e.kind(), failures = self.count, failing_for = ?now - since, "still cannot read the matching table");
                self.said = Some(now);
            }
            Some(_) => {}
        }
    }

    pub(super) fn recovered(&mut self, member: &str) {
        if let Some(since) = self.since.take() {
            tracing::info!(
                member,
                failures = self.count,
                failed_for = ?since.elapsed(),
                "reading the matching table again"
            );
        }
        self.count = 0;
        self.said = None;
    }
}

pub(super) fn log_store_error(e: &StoreError, what: &str) {
    if e.is_retryable() {
        tracing::debug!(error = %e, "{what}");
    } else {
        tracing::warn!(error = %e, "{what}");
    }
}
