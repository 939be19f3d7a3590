//! Where a plan starts: the generation it numbers above, and the granted
//! table it plans from. Pure: the cycle reads the stored table only when
//! [`HolderView::known_granted`] says it must.
//!
//! Guarantees, tested below:
//! - a member reporting a generation above every one Redis and this holder
//!   know comes from a numbering Redis lost: writes are numbered above it,
//!   and what its reports would acknowledge is revoked again (a report
//!   past any plausible generation is ignored, so a hostile one cannot
//!   exhaust the numbering);
//! - a plan starts from this holder's own last write only while Redis holds
//!   exactly that table (by digest); otherwise from what Redis holds,
//!   verified, and held as a table members may work from until a
//!   confirmed write supersedes it; when the stored table is gone, from
//!   the table this holder wrote last.

use std::sync::Arc;

use super::HolderView;
use crate::core::handoff::{self, StartingPoint};
use crate::core::table::MatchingTable;

/// A numbering Redis lost, seen in the members' reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::coordinator::holder) struct LostNumbering {
    /// The highest generation a member reports having applied.
    pub(in crate::coordinator::holder) applied: u64,
    /// Units in transit whose revocation is numbered again.
    pub(in crate::coordinator::holder) renumbered: usize,
    /// Whether this raised the generation floor (worth a log line).
    pub(in crate::coordinator::holder) raised: bool,
}

impl HolderView {
    /// Reports of a generation above `stored_generation` (and `floor`): the
    /// next writes are numbered above it (`floor` rises) and what they would
    /// acknowledge is revoked again, every plan until a write above it is
    /// done (a renumbering whose write failed is never forgotten).
    pub(in crate::coordinator::holder) fn renumber_lost(
        &mut self,
        stored_generation: u64,
        floor: &mut u64,
    ) -> Option<LostNumbering> {
        let applied = self.handoff.lost_numbering(stored_generation)?;
        let renumbered = self.handoff.ledger.renumber_up_to(applied);
        let raised = applied > *floor;
        *floor = (*floor).max(applied);
        Some(LostNumbering {
            applied,
            renumbered,
            raised,
        })
    }

    /// The table this holder knows Redis holds (its last confirmed write),
    /// if Redis' digest is still exactly its digest: the plan starts there,
    /// unverified. `None`: the plan starts from the stored table
    /// ([`HolderView::start_from_stored`]).
    pub(in crate::coordinator::holder) fn known_granted(
        &self,
        stored_digest: Option<&str>,
    ) -> Option<Arc<MatchingTable>> {
        self.handoff
            .ledger
            .granted()
            .filter(|g| stored_digest == Some(g.digest()))
            .map(Arc::clone)
    }

    /// The table to plan from (verified) given the `stored` one, of
    /// `stored_generation`: what Redis holds, held until a confirmed write
    /// supersedes it (members may have read it); or, when it is gone, the
    /// table this holder wrote last.
    pub(in crate::coordinator::holder) fn start_from_stored(
        &mut self,
        stored: Arc<MatchingTable>,
        stored_generation: u64,
    ) -> (StartingPoint, Arc<MatchingTable>) {
        let last = self.handoff.ledger.last_written();
        let (from, start) = handoff::starting_point(last, stored);
        if from == StartingPoint::Stored {
            self.handoff.ledger.saw(&start, stored_generation);
        }
        (from, start)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::super::tests::{live_view, table, with_transit};
    use super::*;
    use crate::core::handoff::MemberReport;

    fn report(applied: u64) -> MemberReport {
        MemberReport {
            applied,
            draining: false,
            deadline: Duration::from_secs(10),
            weight: 1,
            client: None,
        }
    }

    /// A view whose ledger knows `u2` in transit from `a:1`, revoked at 5.
    fn view_with_transit() -> HolderView {
        let granted = table(&[("b:2", "u1")]);
        let mut v = live_view(&["a:1", "b:2"], &granted);
        with_transit(&mut v, granted, "u2", ("a:1", "b:2"), 10, 5);
        v
    }

    #[test]
    fn a_report_above_every_known_generation_renumbers_and_raises_the_floor() {
        let mut v = view_with_transit();
        v.handoff.reports.insert("a:1".into(), report(9));
        let mut floor = 6;
        let lost = v.renumber_lost(5, &mut floor).expect("a lost numbering");
        assert_eq!(
            lost,
            LostNumbering {
                applied: 9,
                renumbered: 1,
                raised: true
            }
        );
        assert_eq!(floor, 9);
        assert_eq!(
            v.handoff.ledger.transit()["g"]["u2"].revoked_at,
            0,
            "revoked again by the next write"
        );
        assert_eq!(
            v.renumber_lost(5, &mut floor).map(|l| l.raised),
            Some(false),
            "still lost while no write above it is done; the floor stays"
        );
    }

    #[test]
    fn reports_at_or_below_the_stored_generation_or_absurd_change_nothing() {
        let mut v = view_with_transit();
        v.handoff.reports.insert("a:1".into(), report(5));
        v.handoff.reports.insert("b:2".into(), report(u64::MAX - 1));
        let mut floor = 5;
        assert_eq!(v.renumber_lost(5, &mut floor), None);
        assert_eq!(floor, 5);
        assert_eq!(v.handoff.ledger.transit()["g"]["u2"].revoked_at, 5);
    }

    #[test]
    fn a_plan_starts_from_the_known_table_only_while_redis_holds_exactly_it() {
        let granted = table(&[("a:1", "u1")]);
        let mut v = live_view(&["a:1"], &granted);
        assert!(
            v.known_granted(Some(granted.digest())).is_none(),
            "read from Redis, not yet planned from: verified first"
        );
        v.handoff.ledger.unchanged(Arc::clone(&granted), 1);
        assert!(v.known_granted(Some(granted.digest())).is_some());
        assert!(v.known_granted(Some("another digest")).is_none());
        assert!(v.known_granted(None).is_none(), "no table in Redis");
    }

    #[test]
    fn a_stored_table_is_held_and_a_gone_one_starts_from_the_last_written() {
        let granted = table(&[("a:1", "u1")]);
        let mut v = live_view(&["a:1"], &granted);
        let edited = table(&[("b:2", "u1")]);
        let (from, start) = v.start_from_stored(Arc::clone(&edited), 8);
        assert_eq!(from, StartingPoint::Stored);
        assert_eq!(start, edited);
        assert!(
            v.handoff.ledger.held().iter().any(|h| h.table == edited),
            "members may have read it: held"
        );
        let (from, start) = v.start_from_stored(table(&[]), 9);
        assert_eq!(from, StartingPoint::LastWritten, "the stored table is gone");
        assert!(!start.is_empty());
    }
}
