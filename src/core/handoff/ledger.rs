//! What the holder knows Redis holds of the handoff: the table as granted and
//! the units in transit, as of its last confirmed write or its last read of
//! them, and the revocations of writes whose outcome it does not know.
//!
//! Pure. The rule it keeps: **after any outcome other than a confirmed
//! write, the next plan starts from a fresh read of Redis, never from what
//! the holder believes it wrote.** A write can be applied while its reply is
//! lost, times out, or reports too few replicas; or not applied at all. So:
//!
//! ```text
//!   plan ── write ─┬─ confirmed (generation g) ──▶ granted, transit as planned;
//!                  │                               revocations numbered g, waits start now
//!                  ├─ refused (fenced, invalid) ─▶ stale
//!                  └─ unknown ───────────────────▶ stale, and the revocations it carried
//!                                                  are remembered
//!   stale ── resync(Redis' table, transit) ──────▶ transit as stored (waits known to this
//!                                                  holder kept, others from now); a remembered
//!                                                  revocation whose unit no stored row of its
//!                                                  group holds, and no stored entry has, is in
//!                                                  transit again; the table is verified
//! ```
//!
//! A new holding starts stale: it plans only once it read what the last
//! holder left. The wait of a unit in transit never shrinks here: a stored
//! entry keeps its stored wait, counted from when this holder first knew
//! the revocation written, or from the read.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use tokio::time::Instant;

use super::{Transit, Transits};
use crate::core::inputs::GroupMembers;
use crate::core::table::{MatchingTable, decode_row};

/// See the module documentation.
#[derive(Debug, Clone)]
pub struct Ledger {
    /// The table as Redis holds it, as far as this holder knows: its last
    /// confirmed write (or a plan that needed none). `None` when unknown
    /// (a new holding, or since a resync): the next plan reads and
    /// verifies the stored table.
    granted: Option<Arc<MatchingTable>>,
    /// The table this holder last knew Redis to hold (its last confirmed
    /// write, or a plan that needed none): where a plan starts when the
    /// stored table is gone (Redis lost its data, or a `DEL`), since members
    /// may still work on what it granted.
    last_written: Option<Arc<MatchingTable>>,
    transit: Transits,
    /// Revocations carried by writes whose outcome is unknown, by group and
    /// unit, until Redis is read again.
    unconfirmed: BTreeMap<String, BTreeMap<String, Transit>>,
    /// Redis must be read again before the next plan.
    stale: bool,
}

/// What a resync found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Resync {
    /// Units this holder knew in transit (or revoked by writes of unknown
    /// outcome) that Redis has no entry for while no row holds them: in
    /// transit still.
    pub restored: usize,
    /// Stored entries whose wait this holder already counted (kept from
    /// when it knew their write done).
    pub known: usize,
}

impl Default for Ledger {
    fn default() -> Ledger {
        Ledger::new()
    }
}

impl Ledger {
    /// A new holding: nothing known, Redis to be read first.
    pub fn new() -> Ledger {
        Ledger {
            granted: None,
            last_written: None,
            transit: Transits::new(),
            unconfirmed: BTreeMap::new(),
            stale: true,
        }
    }

    /// Whether Redis must be read (with [`Ledger::resync`]) before a plan.
    pub fn stale(&self) -> bool {
        self.stale
    }

    /// The table as Redis holds it, when this holder knows it.
    pub fn granted(&self) -> Option<&Arc<MatchingTable>> {
        self.granted.as_ref()
    }

    /// The table this holder last knew Redis to hold.
    pub fn last_written(&self) -> Option<&Arc<MatchingTable>> {
        self.last_written.as_ref()
    }

    pub fn transit(&self) -> &Transits {
        &self.transit
    }

    /// Units in transit.
    pub fn in_transit(&self) -> usize {
        self.transit.values().map(BTreeMap::len).sum()
    }

    /// A plan that needed no write: `granted` is what Redis holds.
    pub fn unchanged(&mut self, granted: Arc<MatchingTable>) {
        self.last_written = Some(Arc::clone(&granted));
        self.granted = Some(granted);
    }

    /// A confirmed write of `granted` (when `table`) and `transit`. Its
    /// revocations (entries with `revoked_at` 0) are numbered `generation`
    /// and wait from `at`, now that the write is known done. Returns whether
    /// it revoked anything.
    pub fn written(
        &mut self,
        granted: Arc<MatchingTable>,
        table: bool,
        mut transit: Transits,
        generation: Option<u64>,
        at: Instant,
    ) -> bool {
        let mut revoked = false;
        if let Some(g) = generation {
            for t in transit.values_mut().flat_map(|u| u.values_mut()) {
                if t.revoked_at == 0 {
                    t.revoked_at = g;
                    t.waiting_since = at;
                    revoked = true;
                }
            }
        }
        if table {
            self.last_written = Some(Arc::clone(&granted));
        }
        self.granted = Some(granted);
        self.transit = transit;
        revoked
    }

    /// A write Redis refused before writing anything (fenced, or a stored
    /// value it cannot use): read again before planning.
    pub fn refused(&mut self) {
        self.stale = true;
        self.granted = None;
    }

    /// A write whose outcome is unknown: an error or a timeout after it was
    /// sent, or too few replicas acknowledged it. It may have been applied:
    /// the revocations it carried (`attempted`'s entries with `revoked_at`
    /// 0) are remembered until Redis is read again.
    pub fn unknown(&mut self, attempted: &Transits) {
        for (group, units) in attempted {
            for (unit, t) in units.iter().filter(|(_, t)| t.revoked_at == 0) {
                let kept = self
                    .unconfirmed
                    .entry(group.clone())
                    .or_default()
                    .entry(unit.clone())
                    .or_insert_with(|| t.clone());
                for (m, o) in &t.from {
                    kept.from.entry(m.clone()).or_insert(*o);
                }
            }
        }
        self.stale = true;
        self.granted = None;
    }

    /// Every unit in transit revoked at `generation` or below is revoked again
    /// by the next table write: a member reported having applied
    /// `generation`, above the highest Redis knows, so its reports come from
    /// a numbering Redis lost, and they must not acknowledge revocations of
    /// this one. Their waits start again once that write is done. Returns how
    /// many were renumbered.
    pub fn renumber_up_to(&mut self, generation: u64) -> usize {
        let mut n = 0;
        for t in self.transit.values_mut().flat_map(|u| u.values_mut()) {
            if t.revoked_at != 0 && t.revoked_at <= generation {
                t.revoked_at = 0;
                n += 1;
            }
        }
        n
    }

    /// Takes Redis' state, read fresh: the units in transit as `stored`
    /// (decoded, each waiting from the read), the rows as `table`. Entries
    /// this holder knew with the same revocation keep the earlier instant it
    /// knew them written. An entry it knew, or a revocation of a write of
    /// unknown outcome, whose unit no row of its group in `table` holds and
    /// no stored entry has, stays in transit: Redis lost the entry (its
    /// data, or a hand edit), or the write that removed the unit from its
    /// row was applied and its entry is gone. A known entry keeps its wait;
    /// a revocation of unknown outcome is revoked again by the next write.
    /// The table itself is verified by the next plan.
    pub fn resync(
        &mut self,
        table: &MatchingTable,
        mut stored: Transits,
        groups: &[GroupMembers<'_>],
        now: Instant,
    ) -> Resync {
        let mut out = Resync::default();
        for (group, units) in stored.iter_mut() {
            for (unit, t) in units.iter_mut() {
                let known = self.transit.get(group).and_then(|k| k.get(unit));
                if let Some(k) = known
                    && k.revoked_at == t.revoked_at
                    && t.revoked_at != 0
                    && k.from.keys().eq(t.from.keys())
                    && k.waiting_since < t.waiting_since
                {
                    t.waiting_since = k.waiting_since;
                    out.known += 1;
                }
            }
        }
        let known = std::mem::take(&mut self.transit);
        let unconfirmed = std::mem::take(&mut self.unconfirmed);
        let remembered = known
            .into_iter()
            .map(|g| (g, false))
            .chain(unconfirmed.into_iter().map(|g| (g, true)));
        for ((group, units), unconfirmed) in remembered {
            let held: HashSet<&str> = groups
                .iter()
                .filter(|g| g.name == group)
                .flat_map(|g| g.members.iter())
                .filter_map(|m| table.rows().get(m))
                .flat_map(|r| decode_row(r))
                .collect();
            let entries = stored.entry(group).or_default();
            for (unit, mut t) in units {
                if held.contains(unit.as_str()) || entries.contains_key(&unit) {
                    continue;
                }
                if unconfirmed {
                    t.revoked_at = 0;
                    t.waiting_since = now;
                }
                entries.insert(unit, t);
                out.restored += 1;
            }
        }
        stored.retain(|_, units| !units.is_empty());
        self.transit = stored;
        self.granted = None;
        self.stale = false;
        out
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::time::Duration;

    use super::*;
    use crate::core::handoff::{Origin, Proof};

    const WAIT: Option<Duration> = Some(Duration::from_secs(8));

    fn entry(from: &str, revoked_at: u64, at: Instant) -> Transit {
        let origin = Origin {
            proof: Proof::Refusal,
            wait: WAIT,
        };
        Transit {
            from: BTreeMap::from([(from.to_string(), origin)]),
            to: Some("b".into()),
            revoked_at,
            since_ms: 1,
            waiting_since: at,
        }
    }

    fn one(group: &str, unit: &str, t: Transit) -> Transits {
        BTreeMap::from([(group.into(), BTreeMap::from([(unit.into(), t)]))])
    }

    fn table(rows: &[(&str, &str)]) -> MatchingTable {
        MatchingTable::from_rows(rows.iter().map(|(m, r)| (m.to_string(), r.to_string())))
    }

    fn group(members: &[String]) -> [GroupMembers<'_>; 1] {
        [GroupMembers { name: "g", members }]
    }

    #[test]
    fn a_new_holding_reads_before_it_plans() {
        let l = Ledger::new();
        assert!(l.stale());
        assert!(l.granted().is_none());
    }

    #[test]
    fn a_confirmed_write_numbers_its_revocations_and_starts_their_waits() {
        let t0 = Instant::now();
        let mut l = Ledger::new();
        let members = vec!["a".to_string(), "b".to_string()];
        l.resync(&table(&[]), Transits::new(), &group(&members), t0);
        let at = t0 + Duration::from_millis(5);
        let revoked = l.written(
            Arc::new(table(&[("a", ""), ("b", "")])),
            true,
            one("g", "u", entry("a", 0, t0)),
            Some(7),
            at,
        );
        assert!(revoked);
        let t = &l.transit()["g"]["u"];
        assert_eq!((t.revoked_at, t.waiting_since), (7, at));
        assert!(!l.stale());
        assert!(l.last_written().is_some());
    }

    /// Finding 1 of issue 20: the write that revoked `u` from `a` was applied
    /// but reported an error. Redis has `u` in no row; its transit entry is
    /// there (the script wrote it) or not (lost): either way `u` waits.
    #[test]
    fn an_applied_write_of_unknown_outcome_leaves_its_units_in_transit() {
        let t0 = Instant::now();
        let members = vec!["a".to_string(), "b".to_string()];
        let stored_rows = table(&[("a", ""), ("b", "")]);
        for stored_entry in [true, false] {
            let mut l = Ledger::new();
            l.resync(
                &table(&[("a", "u"), ("b", "")]),
                Transits::new(),
                &group(&members),
                t0,
            );
            l.unknown(&one("g", "u", entry("a", 0, t0)));
            assert!(l.stale(), "nothing is planned before Redis is read again");
            let later = t0 + Duration::from_secs(1);
            let stored = if stored_entry {
                one("g", "u", entry("a", 9, later))
            } else {
                Transits::new()
            };
            let r = l.resync(&stored_rows, stored, &group(&members), later);
            let t = &l.transit()["g"]["u"];
            assert_eq!(t.from.keys().collect::<Vec<_>>(), ["a"]);
            assert_eq!(t.from["a"].wait, WAIT);
            assert_eq!(t.waiting_since, later, "waits from the read");
            assert_eq!(r.restored, usize::from(!stored_entry));
            assert_eq!(t.revoked_at, if stored_entry { 9 } else { 0 });
        }
    }

    /// The write was not applied: the unit is still in its owner's row, and
    /// nothing is added to transit.
    #[test]
    fn an_unapplied_write_of_unknown_outcome_leaves_the_row_as_it_was() {
        let t0 = Instant::now();
        let members = vec!["a".to_string(), "b".to_string()];
        let mut l = Ledger::new();
        l.unknown(&one("g", "u", entry("a", 0, t0)));
        let r = l.resync(
            &table(&[("a", "u"), ("b", "")]),
            Transits::new(),
            &group(&members),
            t0,
        );
        assert_eq!(r.restored, 0);
        assert!(l.transit().is_empty());
    }

    /// Redis lost its data (or someone deleted the transit hash) while this
    /// holder held: what it knew in transit stays, with its wait, as long
    /// as no row holds the unit.
    #[test]
    fn units_this_holder_knew_in_transit_stay_when_redis_lost_them() {
        let t0 = Instant::now();
        let members = vec!["a".to_string(), "b".to_string()];
        let mut l = Ledger::new();
        l.resync(&table(&[]), Transits::new(), &group(&members), t0);
        let mut planned = one("g", "u", entry("a", 0, t0));
        planned
            .get_mut("g")
            .unwrap()
            .insert("v".into(), entry("a", 0, t0));
        l.written(
            Arc::new(table(&[("a", ""), ("b", "")])),
            true,
            planned,
            Some(3),
            t0,
        );
        l.refused();
        let later = t0 + Duration::from_secs(1);
        // Lost: `u` in no row; `v` granted to b by a write of unknown outcome.
        let r = l.resync(
            &table(&[("b", "v")]),
            Transits::new(),
            &group(&members),
            later,
        );
        assert_eq!(r.restored, 1);
        let u = &l.transit()["g"]["u"];
        assert_eq!((u.revoked_at, u.waiting_since), (3, t0));
        assert!(!l.transit()["g"].contains_key("v"));
    }

    #[test]
    fn a_resync_keeps_the_waits_this_holder_already_counted() {
        let t0 = Instant::now();
        let members = vec!["a".to_string(), "b".to_string()];
        let mut l = Ledger::new();
        l.resync(&table(&[]), Transits::new(), &group(&members), t0);
        l.written(
            Arc::new(table(&[("a", ""), ("b", "")])),
            true,
            one("g", "u", entry("a", 0, t0)),
            Some(3),
            t0,
        );
        l.refused();
        let later = t0 + Duration::from_secs(2);
        // The same revocation, read again: it waits from t0, not from now.
        let r = l.resync(
            &table(&[]),
            one("g", "u", entry("a", 3, later)),
            &group(&members),
            later,
        );
        assert_eq!((r.known, l.transit()["g"]["u"].waiting_since), (1, t0));
        // A different revocation of the same unit (another holder's): from now.
        l.refused();
        let r = l.resync(
            &table(&[]),
            one("g", "u", entry("a", 4, later)),
            &group(&members),
            later,
        );
        assert_eq!((r.known, l.transit()["g"]["u"].waiting_since), (0, later));
    }

    #[test]
    fn reports_of_a_lost_numbering_renumber_what_they_would_acknowledge() {
        let t0 = Instant::now();
        let members = vec!["a".to_string(), "b".to_string()];
        let mut l = Ledger::new();
        let mut stored = one("g", "u", entry("a", 3, t0));
        stored
            .get_mut("g")
            .unwrap()
            .insert("v".into(), entry("a", 9, t0));
        l.resync(&table(&[]), stored, &group(&members), t0);
        assert_eq!(l.renumber_up_to(5), 1);
        assert_eq!(l.transit()["g"]["u"].revoked_at, 0);
        assert_eq!(l.transit()["g"]["v"].revoked_at, 9);
    }
}
