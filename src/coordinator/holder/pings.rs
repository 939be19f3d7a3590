//! Collecting one round of pings, in phases (see `core::round`, which
//! decides what each phase waits for), so that one hung member (which
//! answers only when its ping times out) never delays what the others
//! already told the holder. [`Round::gather`] only waits; every wait is
//! bounded by its deadline.

use std::collections::HashSet;
use std::time::Instant;

use futures::StreamExt as _;

use super::core::{Round, Waited};
use crate::edge::clock;
use crate::edge::grpc::PingReport;

/// Pings still in flight when a cycle ended; the next cycle collects them
/// instead of pinging those members again.
pub(in crate::coordinator) type InFlight = crate::edge::grpc::PingSet;

impl Round<'_> {
    /// Collects the round: every phase of `core::round`, each bounded. `fresh`: the
    /// members pinged afresh this round (the others' pings are carried).
    /// Pings that have not settled by the end stay in `pending`, their
    /// members in `pending_members`.
    pub(super) async fn gather(
        &self,
        pending: &mut InFlight,
        pending_members: &mut HashSet<String>,
        fresh: &HashSet<String>,
        reports: &mut Vec<PingReport>,
    ) -> Waited {
        let mut waited = Waited::default();
        let awaited = self.first_awaited(fresh);
        let settled = |awaited: &HashSet<String>, pending: &HashSet<String>| {
            !awaited.iter().any(|m| pending.contains(m))
        };
        let grace = clock::now() + self.grace;
        collect_until(pending, pending_members, reports, grace, |_, p| {
            !settled(&awaited, p)
        })
        .await;
        // Whatever else has already settled is taken too.
        collect_until(pending, pending_members, reports, clock::now(), |_, _| true).await;
        if let Some((unheard, heard, awaited)) =
            self.first_contacts(&awaited, pending_members, reports)
        {
            let until = clock::now() + self.patience;
            collect_until(pending, pending_members, reports, until, |_, p| {
                !settled(&awaited, p)
            })
            .await;
            let still = awaited.iter().filter(|m| pending_members.contains(*m));
            waited.first_contacts = Some((unheard, heard, still.count()));
        }
        let until = clock::now() + self.patience;
        collect_until(pending, pending_members, reports, until, |r, p| {
            self.hold_for_the_rest(r, p.len())
        })
        .await;
        waited
    }
}

/// Takes finished pings while `more` (asked before each) says so, until
/// none is left or `until`. Pings already finished are taken before the
/// deadline is looked at, so an `until` of now takes exactly those.
async fn collect_until(
    pending: &mut InFlight,
    pending_members: &mut HashSet<String>,
    reports: &mut Vec<PingReport>,
    until: Instant,
    mut more: impl FnMut(&[PingReport], &HashSet<String>) -> bool,
) {
    let deadline = tokio::time::sleep_until(until.into());
    tokio::pin!(deadline);
    while more(reports, pending_members) {
        tokio::select! {
            biased;
            r = pending.next() => {
                let Some((member, report)) = r else { break };
                pending_members.remove(&member);
                // None: the ping task panicked or was cancelled; the member
                // is simply pinged again next cycle.
                reports.extend(report);
            }
            _ = &mut deadline => break,
        }
    }
}
