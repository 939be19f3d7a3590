//! The holder core: every decision the holder makes in a cycle, pure (no
//! IO, no clock: time comes in as values), each with its tests:
//! - `step`: the cycle as a state machine, `CycleCore::step(outcome) ->
//!   Ready` (what to read, whom to ping, when to write, what follows);
//! - `inherit`: what it makes of Redis' state on a new holding or after a
//!   write of unknown outcome;
//! - `round`: how long a round of pings waits, and what counts as
//!   suspicious;
//! - `observe`: what a round of pings makes of liveness and suspects;
//! - `start`: the numbering and the table a plan starts from;
//! - here: the plan (break before make, skipped while nothing changed),
//!   whether anything must be written, and what a write's outcome (as the
//!   store reported it) makes of the view;
//! - `forget`: whom `-forget-after` removes;
//! - `recover`: the recovery from handoff state Redis may have lost (when it
//!   begins, whom a plan waits for, when it ends).
//!
//! The cycle task (`holder::cycle`) does what `step` asks and feeds back
//! what happened. Guarantees of this file, tested below:
//! - a plan is skipped (steady) only when nothing it depends on changed
//!   since a plan that moved, revoked and placed nothing, with nothing in
//!   transit and the granted table known to be Redis';
//! - nothing is written only when the table Redis holds is the next one,
//!   no revocation waits for its numbering, the units in transit are those
//!   the ledger knows, and no liveness or suspect change is unsaved;
//! - only a confirmed write (`Committed::Written`) lets the next plan start
//!   from what the holder wrote; every other outcome leaves the ledger
//!   stale, so the next cycle reads Redis before it plans, except a write
//!   the script refused before its first write (`InvalidState`: Redis holds
//!   what the ledger knows);
//! - a write of unknown outcome keeps the table it tried among those
//!   members may work from, and its generation (known, or at most one above
//!   the last) is never reused: the floor rises past it;
//! - liveness and suspect changes count as saved only once confirmed.

use std::collections::BTreeSet;
use std::sync::Arc;

use std::time::Instant;

use xxhash_rust::xxh3::Xxh3;

mod costs;
mod forget;
mod inherit;
mod observe;
mod quarantine;
mod ready;
pub(super) mod recover;
mod round;
mod start;
mod step;

pub(in crate::coordinator) use costs::KnownCosts;
pub(super) use observe::Judge;
use observe::Observed;
pub(in crate::coordinator) use quarantine::Excluded;
pub(super) use ready::{
    CommitPlan, CoreConfig, Finished, InputsRequest, Kind, Now, Outcome, Prefetched, Ready,
};
pub(super) use round::{Round, Waited};
pub(super) use step::CycleCore;

use super::handoff::{HandoffOutcome, Steady};
use super::{HolderView, Write};
use crate::core::handoff::{self, HeldTable, PlanInput, Transits};
use crate::core::inputs::Inputs;
use crate::core::liveness::HealthChanges;
use crate::core::suspicion::SuspectChanges;
use crate::core::table::MatchingTable;
use crate::core::table::{Moves, UNCOUNTED};
use crate::edge::redis::Committed;
use crate::error::StoreError;

/// The plan of one cycle (see [`HolderView::plan`]).
pub(super) struct Planned {
    pub(super) plan: handoff::Plan,
    /// The granted table stays as it is: no new table (nor its digest) to
    /// make.
    pub(super) unchanged: bool,
}

/// What a write must carry (see [`HolderView::changes`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Changes {
    pub(super) table: bool,
    pub(super) transit: bool,
}

impl HolderView {
    /// Plans the next granted table from `granted` (what Redis holds;
    /// `verify`: read from Redis rather than known written by this holder)
    /// towards `desired`, with the handoff. A plan whose inputs are those
    /// of the last one (the same tables and inputs by identity, the same
    /// members with rows), when that one changed nothing and nothing is in
    /// transit, is skipped: an idle cycle costs no pass over the table.
    /// Records what the handoff did (`handoff.last`) and whether the next
    /// plan may be skipped.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn plan(
        &mut self,
        inputs: &Arc<Inputs>,
        granted: &Arc<MatchingTable>,
        verify: bool,
        recovery: Option<&handoff::RecoveryClaims>,
        desired: &Arc<MatchingTable>,
        settings: handoff::Settings,
        now: Instant,
        now_ms: u64,
    ) -> Planned {
        let groups = inputs.group_members();
        let hs = &self.handoff;
        // In a recovery, a member that stated nothing and has no report may
        // speak the protocol all the same (its report lost with Redis'
        // data, or an edit): its revocations wait as for a member whose
        // report vanished, with the longest deadline known (or its
        // acknowledgement), and no refusal releases them.
        // (The longest deadline any report it knows of, or the last holder
        // knew of, stands for it; unknown, the longest any member may ask.)
        let longest = hs.deadline_max();
        let facts = |m: &str| {
            let mut f = hs.facts(m);
            if f.report.is_none() && recovery.is_some_and(|r| r.unanswered.contains(m)) {
                match longest {
                    Some(deadline) => {
                        f.report = Some(handoff::MemberReport {
                            applied: 0,
                            draining: false,
                            deadline,
                            weight: 1,
                            client: None,
                        });
                        f.report_vanished = true;
                    }
                    None => f.reports_read = false,
                }
            }
            f
        };
        let rows_for = |m: &str| self.keeps_units(m);
        let former = |m: &str| hs.former_group.get(m).cloned();
        let here = Steady {
            desired: Arc::clone(desired),
            granted: Arc::clone(granted),
            inputs: Arc::clone(inputs),
            rows_for: {
                let mut h = Xxh3::new();
                for m in inputs.members().filter(|m| rows_for(m)) {
                    h.update(&(m.len() as u64).to_le_bytes());
                    h.update(m.as_bytes());
                }
                h.digest()
            },
        };
        let known_transit = hs.ledger.transit();
        let steady = !verify
            && recovery.is_none()
            && known_transit.is_empty()
            && hs.steady.as_ref().is_some_and(|s| s.matches(&here));
        let plan = if steady {
            handoff::Plan::default()
        } else {
            handoff::plan(&PlanInput {
                granted,
                verify,
                held_before: if verify { hs.ledger.held() } else { &[] },
                recovery: recovery.filter(|_| verify),
                desired,
                transit: known_transit,
                groups: &groups,
                former_group: &former,
                units: &inputs.units,
                facts: &facts,
                rows_for: &rows_for,
                settings,
                now,
                now_ms,
            })
        };
        let owing = plan
            .transit
            .values()
            .flat_map(|t| t.values())
            .flat_map(|t| t.origins())
            .filter(|m| *m != handoff::UNKNOWN_ORIGIN)
            .collect::<std::collections::HashSet<&str>>()
            .len();
        let outcome = HandoffOutcome {
            revoked: plan.revoked,
            placed: plan.placed,
            moved: plan.moved.clone(),
            in_transit: plan.transit_len(),
            oldest_transit_ms: plan
                .transit
                .values()
                .flat_map(|units| units.values())
                .map(|t| t.since_ms)
                .min(),
            owing,
            draining: inputs
                .members()
                .filter(|m| self.liveness.is_live(m) && hs.draining(m))
                .count(),
            acknowledging: inputs
                .members()
                .filter(|m| hs.reports.contains_key(*m))
                .count(),
            invalid_reports: hs.bad_reports.len(),
            next_release: plan.next_release,
        };
        let unchanged = steady || plan.granted == **granted;
        self.handoff.steady = (unchanged
            && !verify
            && plan.transit.is_empty()
            && plan.revoked == 0
            && plan.placed == 0
            && plan.moved.is_empty()
            && plan.next_release.is_none())
        .then_some(here);
        self.handoff.last = outcome;
        Planned { plan, unchanged }
    }

    /// What a write must carry for `next` and the planned `transit`, or
    /// `None` when nothing need be written (then the ledger records `next`
    /// as what Redis holds). A revocation is numbered by a table write
    /// (`commit.lua`): one not numbered yet (this plan's, or one renumbered
    /// or restored) rewrites the table, changed or not; and so does a lost
    /// numbering (`renumber`), so that members that applied it (and ignore
    /// a lower generation) move on to one above it. A verified plan always
    /// writes the units in transit (Redis' may differ from the ledger's).
    pub(super) fn changes(
        &mut self,
        next: &Arc<MatchingTable>,
        transit: &Transits,
        renumber: bool,
        verify: bool,
        stored_digest: Option<&str>,
        stored_generation: u64,
    ) -> Option<Changes> {
        let numbering = renumber
            || transit
                .values()
                .flat_map(|u| u.values())
                .any(|t| t.revoked_at == 0);
        let table = stored_digest != Some(next.digest()) || numbering;
        let transit = *transit != *self.handoff.ledger.transit() || verify;
        if !table && !transit && self.unsaved.is_empty() && self.unsaved_suspects.is_empty() {
            self.handoff
                .ledger
                .unchanged(Arc::clone(next), stored_generation);
            self.handoff.retire_vanished();
            return None;
        }
        Some(Changes { table, transit })
    }
}

impl HolderView {
    /// What a write stores besides the table: the units in `transit`
    /// (`{T}:transit` fields and values) and the last change's moves, if
    /// not saved yet.
    pub(super) fn encoded(&self, transit: &Transits) -> (Vec<(String, String)>, Option<String>) {
        let fields = transit
            .iter()
            .flat_map(|(g, units)| {
                units
                    .iter()
                    .map(move |(u, t)| (handoff::transit_field(g, u), t.encode()))
            })
            .collect();
        let last_change = self
            .handoff
            .last_change
            .as_ref()
            .filter(|c| c.unsaved)
            .map(|c| {
                c.moves
                    .as_ref()
                    .map_or_else(|| UNCOUNTED.into(), Moves::encode)
            });
        (fields, last_change)
    }
}

/// What a cycle sent in its write.
pub(super) struct Sent {
    /// The granted table after the write.
    pub(super) next: Arc<MatchingTable>,
    /// The units in transit after the write (revocations it numbers have
    /// `revoked_at` 0).
    pub(super) transit: Transits,
    /// Whether the write carried the table (else only transit, liveness or
    /// suspects).
    pub(super) table_changed: bool,
    /// The generation of the table Redis held when the plan read it.
    pub(super) stored_generation: u64,
}

/// What [`HolderView::advance`] decided, for the caller's span and books.
pub(super) struct Advanced {
    pub(super) write: Write,
    /// The generation of a confirmed write that revoked units (grants that
    /// follow link to its span).
    pub(super) revoked_at: Option<u64>,
    /// Why the write did not count, for the span.
    pub(super) error: Option<String>,
}

impl HolderView {
    /// Takes a write's `outcome` into the view. `floor` is the highest
    /// generation this holder knows of; `stored_digest` the digest of the
    /// table Redis holds, as far as this holder knows. `now`: when the
    /// outcome came back (a confirmed write's revocations wait from then).
    pub(super) fn advance(
        &mut self,
        sent: Sent,
        outcome: Result<Committed, StoreError>,
        floor: &mut u64,
        stored_digest: &mut Option<String>,
        now: Instant,
    ) -> Advanced {
        let ledger = &mut self.handoff.ledger;
        let (write, revoked_at, error) = match outcome {
            Ok(Committed::Written {
                generation,
                version,
            }) => {
                if let Some(g) = generation {
                    *floor = (*floor).max(g);
                    *stored_digest = Some(sent.next.digest().to_string());
                    self.confirmed_generation = self.confirmed_generation.max(g);
                }
                let revoked = ledger.written(
                    sent.next,
                    sent.stored_generation,
                    sent.transit,
                    generation,
                    version,
                    now,
                );
                let open: BTreeSet<u64> = ledger
                    .transit()
                    .values()
                    .flat_map(|u| u.values().map(|t| t.revoked_at))
                    .collect();
                self.handoff.revocations.retain(|g, _| open.contains(g));
                if generation.is_some()
                    && let Some(c) = &mut self.handoff.last_change
                {
                    c.unsaved = false;
                }
                self.unsaved = HealthChanges::default();
                self.unsaved_suspects = SuspectChanges::default();
                self.handoff.retire_vanished();
                let revoked_at = generation.filter(|_| revoked);
                (Write::Written { generation }, revoked_at, None)
            }
            Ok(Committed::Fenced { reason }) => {
                ledger.refused();
                let error = format!("fenced by redis: {reason}");
                (Write::Fenced(reason), None, Some(error))
            }
            // Something wrote since this plan's state was read (a write of
            // this holder that timed out and landed late, an edit of the
            // metadata or of a row it replaces): nothing was written; read
            // Redis again and plan from what it holds.
            Ok(Committed::Outdated { version, differs }) => {
                let expected = ledger.version();
                ledger.refused();
                let error = match &differs {
                    Some(what) => format!("outdated: {what} is not what the plan read"),
                    None => format!("outdated: version {version}, planned on {expected:?}"),
                };
                (Write::Outdated { version, differs }, None, Some(error))
            }
            // A stored value the script refused before its first write:
            // nothing was written, and Redis holds what the ledger knows.
            Err(e @ StoreError::InvalidState { .. }) => {
                let error = e.to_string();
                (Write::Failed(e), None, Some(error))
            }
            // Applied or not, nobody knows: what it revoked may be in no
            // row; the next cycle reads Redis again before it plans. Its
            // generation (known, or at most one above the last) is never
            // reused.
            Ok(Committed::Unconfirmed { generation, error }) => {
                let tried = sent
                    .table_changed
                    .then(|| HeldTable::new(sent.next, generation));
                ledger.unknown(tried);
                if let Some(g) = generation {
                    *floor = (*floor).max(g);
                }
                let message = error.to_string();
                (Write::Unknown(error), None, Some(message))
            }
            Err(e) => {
                let tried = sent.table_changed.then(|| HeldTable::new(sent.next, None));
                ledger.unknown(tried);
                if sent.table_changed {
                    *floor += 1;
                }
                let message = e.to_string();
                (Write::Unknown(e), None, Some(message))
            }
        };
        Advanced {
            write,
            revoked_at,
            error,
        }
    }
}

#[cfg(test)]
pub(super) mod tests {
    use crate::edge::clock;
    use std::collections::BTreeMap;
    use std::time::Duration;

    use super::*;
    use crate::core::handoff::{Origin, Proof, Transit};
    use crate::core::liveness::Health;

    pub(super) fn table(rows: &[(&str, &str)]) -> Arc<MatchingTable> {
        Arc::new(MatchingTable::from_rows(
            rows.iter().map(|(m, r)| (m.to_string(), r.to_string())),
        ))
    }

    /// A view that last planned from a fresh read of Redis (the ledger is
    /// not stale), with one unsaved liveness change.
    fn fresh_view() -> HolderView {
        let mut v = HolderView::empty(3);
        let t = table(&[("a:1", "u1,u2")]);
        v.handoff
            .ledger
            .resync(Some(HeldTable::new(t, Some(7))), Transits::new(), 3, &[]);
        let health = Health {
            answered: true,
            failures: 0,
            failing_since_ms: None,
            reason: None,
        };
        v.unsaved.set.insert("b:2".into(), health);
        v
    }

    /// A write that revokes `u2` from `a:1` (not numbered yet).
    fn sent(table_changed: bool) -> Sent {
        let origin = Origin {
            proof: Proof::Never,
            wait: Some(Duration::from_secs(1)),
            numbered: 0,
        };
        let transit = Transit {
            from: BTreeMap::from([("a:1".to_string(), origin)]),
            to: Some("b:2".into()),
            revoked_at: 0,
            since_ms: 1,
            waiting_since: clock::now(),
        };
        Sent {
            next: table(&[("a:1", "u1")]),
            transit: BTreeMap::from([(
                "g".to_string(),
                BTreeMap::from([("u2".to_string(), transit)]),
            )]),
            table_changed,
            stored_generation: 7,
        }
    }

    fn timeout() -> StoreError {
        StoreError::Timeout {
            op: "commit",
            timeout: Duration::from_secs(1),
        }
    }

    pub(super) fn inputs(members: &[&str], units: &[&str]) -> Arc<Inputs> {
        let entries =
            |xs: &[&str]| -> Vec<Vec<u8>> { xs.iter().map(|x| x.as_bytes().to_vec()).collect() };
        let (members, units) = (entries(members), entries(units));
        let (groups, _) = crate::core::inputs::normalize_groups(&[("g", members.as_slice())]);
        let (units, _) = crate::core::inputs::normalize_units("units", &units);
        Arc::new(Inputs {
            groups,
            units: units.into(),
            rejections: Vec::new(),
        })
    }

    /// A view that knows `live` live and Redis' table to be `granted`.
    pub(super) fn live_view(live: &[&str], granted: &Arc<MatchingTable>) -> HolderView {
        let mut v = HolderView::empty(1);
        let results = live.iter().map(|m| (*m, Ok(())));
        v.liveness.observe(results, live.iter().copied(), 0);
        v.handoff.ledger.resync(
            Some(HeldTable::new(Arc::clone(granted), Some(1))),
            Transits::new(),
            1,
            &[],
        );
        v
    }

    /// Makes the ledger know `unit` in transit from `from` (waiting
    /// `wait_s` seconds) to `to`, revoked at `revoked_at`, with `granted`
    /// as Redis' table.
    pub(super) fn with_transit(
        v: &mut HolderView,
        granted: Arc<MatchingTable>,
        unit: &str,
        (from, to): (&str, &str),
        wait_s: u64,
        revoked_at: u64,
    ) {
        let origin = Origin {
            proof: Proof::Never,
            wait: Some(Duration::from_secs(wait_s)),
            numbered: 0,
        };
        let transit = Transit {
            from: BTreeMap::from([(from.to_string(), origin)]),
            to: Some(to.into()),
            revoked_at,
            since_ms: 1,
            waiting_since: crate::core::timing::test_t0(),
        };
        v.handoff.ledger.resync(
            Some(HeldTable::new(granted, Some(revoked_at))),
            BTreeMap::from([(
                "g".to_string(),
                BTreeMap::from([(unit.to_string(), transit)]),
            )]),
            revoked_at - 1,
            &[],
        );
    }

    const SETTINGS: handoff::Settings = handoff::Settings {
        handoff_delay: Duration::from_secs(10),
    };

    #[test]
    fn an_idle_plan_is_skipped_only_while_its_inputs_are_the_same() {
        let inputs = inputs(&["a:1", "b:2"], &["u1", "u2"]);
        let t = table(&[("a:1", "u1"), ("b:2", "u2")]);
        let mut v = live_view(&["a:1", "b:2"], &t);
        let now = clock::now();
        let p = v.plan(&inputs, &t, false, None, &t, SETTINGS, now, 1);
        assert!(p.unchanged);
        assert!(v.handoff.steady.is_some(), "the next plan may be skipped");
        let p = v.plan(&inputs, &t, false, None, &t, SETTINGS, now, 1);
        assert!(p.unchanged && p.plan.transit.is_empty());
        // Another desired table (by identity): planned, and it moves a unit
        // only by revoking it first.
        let wanted = table(&[("a:1", "u1,u2"), ("b:2", "")]);
        let p = v.plan(&inputs, &t, false, None, &wanted, SETTINGS, now, 1);
        assert!(!p.unchanged, "u2 is revoked from b:2");
        assert_eq!(p.plan.revoked, 1);
        assert!(
            v.handoff.steady.is_none(),
            "a plan that moved is never skipped"
        );
        assert_eq!(v.handoff.last.revoked, 1);
        // A verified plan (the table read from Redis) is never skipped.
        let mut v = live_view(&["a:1", "b:2"], &t);
        v.plan(&inputs, &t, false, None, &t, SETTINGS, now, 1);
        v.plan(&inputs, &t, true, None, &t, SETTINGS, now, 1);
        assert!(v.handoff.steady.is_none());
    }

    #[test]
    fn nothing_is_written_only_when_redis_holds_it_all_already() {
        let t = table(&[("a:1", "u1")]);
        let mut v = live_view(&["a:1"], &t);
        let digest = Some(t.digest());
        assert_eq!(
            v.changes(&t, &Transits::new(), false, false, digest, 1),
            None
        );
        // The stored table differs, or is not known.
        let other = table(&[("a:1", "")]);
        let c = v.changes(&other, &Transits::new(), false, false, digest, 1);
        assert_eq!(
            c,
            Some(Changes {
                table: true,
                transit: false
            })
        );
        assert!(
            v.changes(&t, &Transits::new(), false, false, None, 1)
                .is_some()
        );
        // A revocation not numbered yet, or a lost numbering: the table is
        // written again, unchanged.
        let revoking = sent(true).transit;
        let c = v.changes(&t, &revoking, false, false, digest, 1);
        assert_eq!(
            c,
            Some(Changes {
                table: true,
                transit: true
            })
        );
        let c = v.changes(&t, &Transits::new(), true, false, digest, 1);
        assert_eq!(
            c,
            Some(Changes {
                table: true,
                transit: false
            })
        );
        // A verified plan writes the units in transit.
        let c = v.changes(&t, &Transits::new(), false, true, digest, 1);
        assert_eq!(
            c,
            Some(Changes {
                table: false,
                transit: true
            })
        );
        // Unsaved liveness changes.
        let mut v = fresh_view();
        let t = table(&[("a:1", "u1,u2")]);
        let digest = Some(t.digest());
        let c = v.changes(&t, &Transits::new(), false, false, digest, 7);
        assert_eq!(
            c,
            Some(Changes {
                table: false,
                transit: false
            })
        );
    }

    #[test]
    fn a_confirmed_write_numbers_its_revocations_and_saves_the_changes() {
        let mut v = fresh_view();
        let (mut floor, mut digest) = (7, None);
        let now = clock::now();
        let outcome = Ok(Committed::Written {
            generation: Some(8),
            version: 4,
        });
        let a = v.advance(sent(true), outcome, &mut floor, &mut digest, now);
        assert!(matches!(
            a.write,
            Write::Written {
                generation: Some(8)
            }
        ));
        assert_eq!((a.revoked_at, a.error), (Some(8), None));
        assert_eq!(floor, 8);
        assert_eq!(digest.as_deref(), Some(table(&[("a:1", "u1")]).digest()));
        assert!(!v.handoff.ledger.stale());
        assert_eq!(v.handoff.ledger.version(), Some(4));
        let t = &v.handoff.ledger.transit()["g"]["u2"];
        assert_eq!((t.revoked_at, t.waiting_since), (8, now));
        assert!(v.unsaved.is_empty(), "liveness changes saved");
    }

    #[test]
    fn a_write_redis_refused_makes_the_next_cycle_read_redis_first() {
        for outcome in [
            Committed::Fenced {
                reason: "epoch".into(),
            },
            Committed::Outdated {
                version: 9,
                differs: None,
            },
        ] {
            let mut v = fresh_view();
            let (mut floor, mut digest) = (7, None);
            let a = v.advance(
                sent(true),
                Ok(outcome),
                &mut floor,
                &mut digest,
                clock::now(),
            );
            assert!(matches!(a.write, Write::Fenced(_) | Write::Outdated { .. }));
            assert!(a.error.is_some());
            assert!(v.handoff.ledger.stale(), "read Redis again");
            assert_eq!((floor, digest), (7, None), "nothing was written");
            assert!(!v.unsaved.is_empty(), "changes not saved");
        }
    }

    #[test]
    fn a_stored_value_refused_before_any_write_needs_no_new_read() {
        let mut v = fresh_view();
        let (mut floor, mut digest) = (7, None);
        let refused = StoreError::InvalidState {
            key: "t:meta".into(),
            field: "generation".into(),
            value: "x".into(),
            expected: "an integer".into(),
        };
        let a = v.advance(
            sent(true),
            Err(refused),
            &mut floor,
            &mut digest,
            clock::now(),
        );
        assert!(matches!(a.write, Write::Failed(_)));
        assert!(!v.handoff.ledger.stale());
        assert!(!v.unsaved.is_empty());
    }

    #[test]
    fn a_write_of_unknown_outcome_is_held_and_its_generation_never_reused() {
        // An error after it was sent: the generation is not known, at most
        // one above the last.
        let mut v = fresh_view();
        let (mut floor, mut digest) = (7, None);
        let a = v.advance(
            sent(true),
            Err(timeout()),
            &mut floor,
            &mut digest,
            clock::now(),
        );
        assert!(matches!(a.write, Write::Unknown(_)));
        assert!(v.handoff.ledger.stale());
        assert_eq!(floor, 8);
        assert!(!v.unsaved.is_empty(), "changes are sent again");
        // Without a table in it, no generation was used.
        let mut v = fresh_view();
        let mut floor = 7;
        v.advance(
            sent(false),
            Err(timeout()),
            &mut floor,
            &mut digest,
            clock::now(),
        );
        assert_eq!(floor, 7);
        // Too few replicas: applied with a known generation.
        let mut v = fresh_view();
        let mut floor = 7;
        let outcome = Ok(Committed::Unconfirmed {
            generation: Some(12),
            error: timeout(),
        });
        v.advance(sent(true), outcome, &mut floor, &mut digest, clock::now());
        assert!(v.handoff.ledger.stale());
        assert_eq!(floor, 12);
        assert_eq!(digest, None, "not known written");
    }
}
