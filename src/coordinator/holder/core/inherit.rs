//! What the holder makes of Redis' state when it cannot plan from its own
//! ledger: on a new holding, what the last holder left; after a write of
//! unknown outcome (the ledger is stale), Redis' state again. Pure: the
//! cycle reads ([`Inheritance`]) and logs; this module decides the view.
//!
//! Guarantees, tested below:
//! - a new holding starts from the inherited liveness and suspects (so it
//!   writes the same table, not a reshuffle) and continues every handoff in
//!   transit, each wait counted again from its own start (a new holder
//!   cannot trust the last one's clock), never longer than the longest any
//!   member may ask for;
//! - an entry of `{T}:transit` whose value does not decode (an operator's
//!   edit) keeps its unit in transit from unknown origins, waiting the
//!   longest; one whose field names no unit is dropped (the table is
//!   verified instead); both are reported;
//! - after a write of unknown outcome, this holder's own observations are
//!   the truth: whatever Redis holds differently is unsaved and written
//!   again, and the members' reports are read in full again;
//! - the generation floor never falls below the stored generation.
//!
//! A holding that cannot read this state does not act (the cycle fails
//! before calling in here): it never starts from an empty view.

use std::sync::Arc;
use std::time::Instant;

use super::HolderView;
use crate::coordinator::holder::LOG_FIRST;
use crate::core::handoff::{self, HeldTable, Resync, Transit, Transits};
use crate::core::inputs;
use crate::core::keys::Keys;
use crate::core::liveness::Liveness;
use crate::core::suspicion::SuspectChanges;
use crate::core::table::MatchingTable;
use crate::edge::redis::Inheritance;

/// What [`HolderView::reconcile`] found, for the cycle's log and its plan.
pub(in crate::coordinator::holder) struct Reconciled {
    /// The stored table, when it was read: the plan starts from it.
    pub(in crate::coordinator::holder) table: Option<Arc<MatchingTable>>,
    /// The stored generation: the floor rises to it.
    pub(in crate::coordinator::holder) generation: u64,
    pub(in crate::coordinator::holder) version: u64,
    /// `{T}:transit` entries that did not decode, excerpted.
    pub(in crate::coordinator::holder) unreadable_transit: Vec<String>,
    /// `{T}:liveness` entries that did not decode (a new holding only).
    pub(in crate::coordinator::holder) unreadable_liveness: Vec<(String, String)>,
    /// `{T}:suspects` entries that did not decode.
    pub(in crate::coordinator::holder) unreadable_suspects: Vec<(String, String)>,
    /// Inherited suspects of a mass failure (a new holding only).
    pub(in crate::coordinator::holder) inherited_suspects: usize,
    pub(in crate::coordinator::holder) resync: Resync,
}

impl Reconciled {
    /// Logs what the read found that is wrong (unreadable entries) or worth
    /// knowing (inherited suspects).
    pub(in crate::coordinator::holder) fn log(&self, keys: &Keys) {
        for (member, value) in &self.unreadable_suspects {
            tracing::warn!(key = %keys.suspects, member, value, "ignoring unreadable suspect entry");
        }
        for (member, value) in &self.unreadable_liveness {
            tracing::warn!(key = %keys.liveness, member, value, "ignoring unreadable liveness entry");
        }
        if !self.unreadable_transit.is_empty() {
            // Written only by holders: an unreadable entry is an operator's
            // edit.
            tracing::warn!(
                key = %keys.transit,
                count = self.unreadable_transit.len(),
                first = %self.unreadable_transit.iter().take(LOG_FIRST).cloned().collect::<Vec<_>>().join(" "),
                "unreadable transit entries: their units wait the longest any member may ask for"
            );
        }
        if self.inherited_suspects > 0 {
            tracing::warn!(
                suspects = self.inherited_suspects,
                "inherited members suspected of a mass failure: their units stay until this replica's pings confirm or clear it"
            );
        }
    }

    /// Logs the view the holder plans from.
    pub(in crate::coordinator::holder) fn log_view(&self, view: &HolderView) {
        tracing::info!(
            known_members = view.liveness.iter().count(),
            in_transit = view.handoff.ledger.in_transit(),
            restored = self.resync.restored,
            version = self.version,
            applied = ?self.resync.applied,
            held_tables = view.handoff.ledger.held().len(),
            "read what the holder must know before it plans"
        );
    }
}

impl HolderView {
    /// The view to plan from, given Redis' state `inherited` read at `now`
    /// (`now_ms`): `view` is `None` on a new holding (a view of
    /// `failure_threshold` is made, from what the last holder left), else
    /// the stale view of this holding, reconciled with Redis.
    pub(in crate::coordinator::holder) fn reconcile(
        view: Option<HolderView>,
        inherited: Inheritance,
        failure_threshold: u32,
        settings: &handoff::Settings,
        now: Instant,
        now_ms: u64,
    ) -> (HolderView, Reconciled) {
        let (transit, unreadable_transit) =
            decode_transits(inherited.transit, settings, now, now_ms);
        let mut unreadable_liveness = Vec::new();
        let mut inherited_suspects = 0;
        let mut view = match view {
            Some(mut v) => {
                v.unsaved = v.liveness.changes_from(&inherited.liveness);
                v.unsaved_suspects = SuspectChanges::between(&inherited.suspects, &v.suspects);
                v.unsaved_suspects.removed.extend(
                    inherited
                        .unreadable_suspects
                        .iter()
                        .filter(|(m, _)| !v.suspects.contains_key(m))
                        .map(|(m, _)| m.clone()),
                );
                v.handoff.reports_version = None;
                v
            }
            None => {
                let (liveness, bad) = Liveness::restore(failure_threshold, inherited.liveness);
                unreadable_liveness = bad;
                inherited_suspects = inherited.suspects.len();
                HolderView {
                    liveness,
                    suspects: inherited.suspects,
                    ..HolderView::empty(failure_threshold)
                }
            }
        };
        let groups = view
            .handoff
            .inputs
            .as_ref()
            .map(|i| i.group_members())
            .unwrap_or_default();
        let table = inherited.table.map(Arc::new);
        let resync = view.handoff.ledger.resync(
            table
                .clone()
                .map(|t| HeldTable::new(t, Some(inherited.generation))),
            transit,
            inherited.version,
            &groups,
        );
        drop(groups);
        let reconciled = Reconciled {
            table,
            generation: inherited.generation,
            version: inherited.version,
            unreadable_transit,
            unreadable_liveness,
            unreadable_suspects: inherited.unreadable_suspects,
            inherited_suspects,
            resync,
        };
        (view, reconciled)
    }
}

/// Decodes `{T}:transit`: an entry whose field names a unit is in transit as
/// stored (its waits capped at the longest), or, when its value does not
/// decode, from members nobody knows, waiting the longest any member may ask
/// for (counted from `now`). The unreadable ones are returned, excerpted;
/// those whose field names no unit are dropped.
fn decode_transits(
    raw: Vec<(String, String)>,
    settings: &handoff::Settings,
    now: Instant,
    now_ms: u64,
) -> (Transits, Vec<String>) {
    let mut transit = Transits::new();
    let mut unreadable = Vec::new();
    for (field, value) in raw {
        let Some((group, unit)) = handoff::parse_transit_field(&field) else {
            unreadable.push(inputs::excerpt(field.as_bytes()));
            continue;
        };
        let t = match Transit::decode(&value, now) {
            Some(mut t) => {
                t.cap_waits(settings.longest_wait());
                t
            }
            None => {
                unreadable.push(format!(
                    "{}={}",
                    inputs::excerpt(field.as_bytes()),
                    inputs::excerpt(value.as_bytes())
                ));
                Transit::unknown(settings, now, now_ms)
            }
        };
        transit
            .entry(group.to_string())
            .or_default()
            .insert(unit.to_string(), t);
    }
    (transit, unreadable)
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, HashMap};
    use std::time::Duration;

    use super::super::tests::{live_view, table};
    use super::*;
    use crate::core::handoff::{Origin, Proof, UNKNOWN_ORIGIN};
    use crate::core::suspicion::Suspect;
    use crate::core::timing::test_t0;

    const SETTINGS: handoff::Settings = handoff::Settings {
        handoff_delay: Duration::from_secs(10),
    };

    /// A transit entry revoked at generation 4 from `from`, waiting `wait`.
    fn stored_transit(from: &str, wait: Duration, t0: Instant) -> String {
        Transit {
            from: BTreeMap::from([(
                from.to_string(),
                Origin {
                    proof: Proof::Never,
                    wait: Some(wait),
                    numbered: 0,
                },
            )]),
            to: Some("b:2".into()),
            revoked_at: 4,
            since_ms: 500,
            waiting_since: t0,
        }
        .encode()
    }

    fn inheritance(transit: Vec<(String, String)>) -> Inheritance {
        Inheritance {
            table: Some((*table(&[("a:1", "u1"), ("b:2", "u3")])).clone()),
            version: 9,
            liveness: HashMap::from([
                ("a:1".to_string(), "1 0 0".to_string()),
                ("c:3".to_string(), "not health".to_string()),
            ]),
            suspects: BTreeMap::new(),
            unreadable_suspects: Vec::new(),
            generation: 6,
            table_generation: 6,
            server: None,
            transit_recorded: None,
            reports_recorded: None,
            deadline_recorded: None,
            transit,
        }
    }

    fn field(unit: &str) -> String {
        handoff::transit_field("g", unit)
    }

    #[test]
    fn a_new_holding_continues_every_handoff_from_its_own_start() {
        let t0 = test_t0();
        let now = t0 + Duration::from_secs(60);
        let stored = vec![(
            field("u2"),
            stored_transit("a:1", Duration::from_secs(8), t0),
        )];
        let (v, r) = HolderView::reconcile(None, inheritance(stored), 3, &SETTINGS, now, 70_000);
        assert!(v.liveness.is_live("a:1"), "inherited liveness");
        assert_eq!(r.unreadable_liveness.len(), 1, "c:3's entry is reported");
        assert_eq!((r.generation, r.version), (6, 9));
        assert!(r.table.is_some());
        let t = &v.handoff.ledger.transit()["g"]["u2"];
        assert_eq!(
            t.waiting_since, now,
            "the wait counts from this holder's start"
        );
        assert_eq!(
            t.from["a:1"].wait,
            Some(Duration::from_secs(8)),
            "the stored wait"
        );
        assert_eq!(t.revoked_at, 4);
    }

    #[test]
    fn an_unreadable_transit_entry_waits_the_longest_and_an_unnamed_one_is_dropped() {
        let now = test_t0();
        let stored = vec![
            (field("u2"), "garbage".to_string()),
            ("no unit here".to_string(), "1 2".to_string()),
            (
                field("u4"),
                stored_transit("a:1", Duration::from_secs(86_400 * 365), now),
            ),
        ];
        let (v, r) = HolderView::reconcile(None, inheritance(stored), 3, &SETTINGS, now, 1);
        assert_eq!(r.unreadable_transit.len(), 2, "{:?}", r.unreadable_transit);
        let transit = &v.handoff.ledger.transit()["g"];
        assert_eq!(transit.len(), 2, "the unnamed entry is dropped");
        let unknown = &transit["u2"];
        assert!(unknown.from.contains_key(UNKNOWN_ORIGIN));
        assert_eq!(
            unknown.from[UNKNOWN_ORIGIN].wait,
            Some(SETTINGS.longest_wait())
        );
        assert_eq!(
            transit["u4"].from["a:1"].wait,
            Some(SETTINGS.longest_wait()),
            "a stored wait is capped at the longest"
        );
    }

    #[test]
    fn a_resync_keeps_this_holders_observations_and_rereads_every_report() {
        let granted = table(&[("a:1", "u1")]);
        let mut v = live_view(&["a:1", "b:2"], &granted);
        v.unsaved = Default::default();
        v.suspects.insert(
            "d:4".into(),
            Suspect {
                replica: "r1".into(),
                since_ms: 5,
            },
        );
        v.handoff.reports_version = Some(3);
        let mut stored = inheritance(Vec::new());
        stored.unreadable_suspects = vec![("e:5".into(), "junk".into())];
        let (v, r) = HolderView::reconcile(Some(v), stored, 3, &SETTINGS, test_t0(), 1);
        assert!(
            v.unsaved.set.contains_key("b:2"),
            "b:2's liveness is not in Redis: written again"
        );
        assert!(
            v.liveness.health("c:3").is_none(),
            "Redis' entries do not come back"
        );
        assert!(v.unsaved_suspects.set.contains_key("d:4"));
        assert!(
            v.unsaved_suspects.removed.contains("e:5"),
            "an unreadable suspect is removed"
        );
        assert_eq!(
            v.handoff.reports_version, None,
            "reports read in full again"
        );
        assert_eq!(r.inherited_suspects, 0);
        assert!(
            r.unreadable_liveness.is_empty(),
            "a resync restores no liveness"
        );
    }
}
