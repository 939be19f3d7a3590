//! What the holder knows Redis holds of the handoff: the table as granted,
//! the units in transit and the write version, as of its last confirmed
//! write or its last read of them, and the tables members may still work
//! from.
//!
//! Pure. The rule it keeps: **after any outcome other than a confirmed
//! write, the next plan starts from a fresh read of Redis, never from what
//! the holder believes it wrote.** A write can be applied while its reply is
//! lost, times out, or reports too few replicas; or not applied at all (and,
//! refused by its version, never applied later). So:
//!
//! ```text
//!   plan ── write ─┬─ confirmed (generation g, version v) ─▶ granted, transit as planned;
//!                  │                                        revocations numbered g, waits start now
//!                  ├─ refused (fenced, outdated) ──────────▶ stale
//!                  └─ unknown ─────────────────────────────▶ stale, and the table it tried is
//!                                                           remembered
//!   stale ── resync(Redis' table, transit, version) ───────▶ transit as stored (waits known to this
//!                                                           holder kept, others from now), plus what
//!                                                           this holder knew in transit unless Redis
//!                                                           holds exactly what it wrote; the table is
//!                                                           verified against what members may still
//!                                                           work from
//! ```
//!
//! **What members may still work from** ([`Ledger::held`]): the table this
//! holder last knew Redis to hold, tables it read from Redis since, and a
//! table of unknown outcome that may have been published and then lost
//! (applied on a master that failed over before a replica had it). A plan that verifies the stored table treats a
//! member of one of those whose stored row lacks a unit as still working on
//! it (`core::handoff::plan`): the unit is in transit from it, so Redis
//! losing data, a lagging replica promoted, or a hand edit never lets a unit
//! be given away while its last owner may still work on it.
//!
//! A new holding starts stale: it plans only once it read what the last
//! holder left. The wait of a unit in transit never shrinks here: a stored
//! entry keeps its stored wait, counted from when this holder first knew
//! the revocation written, or from the read.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use std::time::Instant;

use super::{Origin, Transits};
use crate::core::inputs::GroupMembers;
use crate::core::table::{MatchingTable, SEPARATOR, decode_row};

/// See the module documentation.
#[derive(Debug, Clone)]
pub struct Ledger {
    /// The table as Redis holds it, as far as this holder knows: its last
    /// confirmed write (or a plan that needed none). `None` when unknown
    /// (a new holding, or since a resync): the next plan reads and
    /// verifies the stored table.
    granted: Option<Arc<MatchingTable>>,
    /// The tables members may still work from: first the one this holder
    /// last knew Redis to hold, then any of unknown outcome that may have
    /// been published and lost since (see the module documentation).
    held: Vec<HeldTable>,
    transit: Transits,
    /// `{T}:meta`'s version as this holder knows it: its writes expect it.
    version: Option<u64>,
    /// The table a write of unknown outcome tried (if it wrote one), and
    /// the version it expected, until Redis is read again.
    attempt: Option<(Option<HeldTable>, u64)>,
    /// Redis must be read again before the next plan.
    stale: bool,
}

/// A table members may still work from, and the generation it was (or
/// may have been) written at: `None` when unknown (a write of unknown
/// outcome whose number nobody learnt), which counts as the newest. A
/// revocation numbered at or below it came before the tenures its rows show.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeldTable {
    pub table: Arc<MatchingTable>,
    pub generation: Option<u64>,
}

impl HeldTable {
    pub fn new(table: Arc<MatchingTable>, generation: Option<u64>) -> HeldTable {
        HeldTable { table, generation }
    }

    /// Whether a revocation numbered `revoked_at` (0: not yet written)
    /// came after this table, so that it covers what its rows show.
    pub fn revoked_since(&self, revoked_at: u64) -> bool {
        revoked_at == 0 || self.generation.is_some_and(|g| revoked_at > g)
    }
}

/// How many tables [`Ledger::held`] keeps apart (see [`Ledger::unknown`]).
pub const MAX_HELD: usize = 4;

/// One table whose each row is the union of that member's rows in
/// `tables`, at the newest of their generations.
fn union(tables: &[HeldTable]) -> HeldTable {
    let generation = tables
        .iter()
        .map(|t| t.generation)
        .try_fold(0, |a, g| g.map(|g| a.max(g)));
    let mut rows: BTreeMap<&str, (Vec<&str>, HashSet<&str>)> = BTreeMap::new();
    for t in tables {
        for (member, row) in t.table.rows() {
            let (units, seen) = rows.entry(member).or_default();
            for u in decode_row(row).into_iter().filter(|u| !u.is_empty()) {
                if seen.insert(u) {
                    units.push(u);
                }
            }
        }
    }
    let table = MatchingTable::from_rows(
        rows.into_iter()
            .map(|(m, (units, _))| (m.to_string(), units.join(&SEPARATOR.to_string()))),
    );
    HeldTable::new(Arc::new(table), generation)
}

/// What a resync found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Resync {
    /// Units this holder knew in transit that Redis has no entry for (or
    /// one without some of their origins): in transit still.
    pub restored: usize,
    /// Stored entries whose wait this holder already counted (kept from
    /// when it knew their write done).
    pub known: usize,
    /// The write of unknown outcome was applied (Redis' version is the one
    /// after it), was not (Redis' version is the one it expected), or
    /// neither is sure (`None`: no such write, or another version).
    pub applied: Option<bool>,
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
            held: Vec::new(),
            transit: Transits::new(),
            version: None,
            attempt: None,
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

    /// The table this holder last knew Redis to hold: where a plan starts
    /// when the stored table is gone.
    pub fn last_written(&self) -> Option<&Arc<MatchingTable>> {
        self.held.first().map(|h| &h.table)
    }

    /// The tables members may still work from (see the module
    /// documentation), for a plan that verifies the stored table.
    pub fn held(&self) -> &[HeldTable] {
        &self.held
    }

    /// `{T}:meta`'s version as this holder knows it: the one its next write
    /// expects.
    pub fn version(&self) -> Option<u64> {
        self.version
    }

    pub fn transit(&self) -> &Transits {
        &self.transit
    }

    /// Units in transit.
    pub fn in_transit(&self) -> usize {
        self.transit.values().map(BTreeMap::len).sum()
    }

    /// A plan that needed no write: `granted` is what Redis holds, at
    /// `generation`.
    pub fn unchanged(&mut self, granted: Arc<MatchingTable>, generation: u64) {
        self.held = vec![HeldTable::new(Arc::clone(&granted), Some(generation))];
        self.granted = Some(granted);
    }

    /// A confirmed write of `transit`, and of `granted` (the table Redis
    /// holds now, at `table_generation`), taking `{T}:meta` to `version`.
    /// Its revocations (entries with `revoked_at` 0) are numbered
    /// `generation` (when it wrote the table) and wait from `at`, now that
    /// the write is known done. Returns whether it revoked anything.
    pub fn written(
        &mut self,
        granted: Arc<MatchingTable>,
        table_generation: u64,
        mut transit: Transits,
        generation: Option<u64>,
        version: u64,
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
        self.held = vec![HeldTable::new(
            Arc::clone(&granted),
            Some(generation.unwrap_or(table_generation)),
        )];
        self.granted = Some(granted);
        self.transit = transit;
        self.version = Some(version);
        revoked
    }

    /// A write Redis refused before writing anything (fenced, or outdated):
    /// read again before planning.
    pub fn refused(&mut self) {
        self.stale = true;
        self.granted = None;
    }

    /// A write whose outcome is unknown: an error or a timeout after it was
    /// sent, or too few replicas acknowledged it. It may have been applied,
    /// and read by members, and lost again (a failover): the table it tried
    /// (`attempted`, when it wrote one, with the generation Redis gave it
    /// if known) is remembered until Redis is read again.
    pub fn unknown(&mut self, attempted: Option<HeldTable>) {
        match self.version {
            Some(base) => self.attempt = Some((attempted, base)),
            None => self.hold(attempted),
        }
        self.stale = true;
        self.granted = None;
    }

    /// Adds `table` to those members may still work from. Bounded: past
    /// [`MAX_HELD`] tables, all but the first (the one last known written,
    /// where a plan starts when the stored table is gone) are merged into
    /// one whose rows are the union of theirs, which claims the same units.
    fn hold(&mut self, table: Option<HeldTable>) {
        let Some(table) = table else { return };
        let same = |h: &HeldTable| {
            (Arc::ptr_eq(&h.table, &table.table) || h.table.digest() == table.table.digest())
                && h.generation == table.generation
        };
        if self.held.iter().any(same) {
            return;
        }
        self.held.push(table);
        if self.held.len() > MAX_HELD {
            let merged = union(&self.held[1..]);
            self.held.truncate(1);
            self.held.push(merged);
        }
    }

    /// A table read from Redis that a plan verifies (see
    /// `core::handoff::plan`): members may have read it too, so it is held
    /// until a confirmed write supersedes it.
    pub fn saw(&mut self, table: &Arc<MatchingTable>, generation: u64) {
        self.hold(Some(HeldTable::new(Arc::clone(table), Some(generation))));
    }

    /// Every unit in transit revoked at `generation` or below is revoked again
    /// by the next table write: a member reported having applied
    /// `generation`, above the table Redis holds, so its reports come from a
    /// numbering Redis lost, and they must not acknowledge revocations of
    /// this one. Their waits start again once that write is done. Returns
    /// how many were renumbered.
    pub fn renumber_up_to(&mut self, generation: u64) -> usize {
        let mut n = 0;
        for t in self.transit.values_mut().flat_map(|u| u.values_mut()) {
            let mut lost = t.revoked_at != 0 && t.revoked_at <= generation;
            for o in t.from.values_mut() {
                if o.numbered != 0 && o.numbered <= generation {
                    o.numbered = 0;
                    lost = true;
                }
            }
            if lost {
                t.revoked_at = 0;
                n += 1;
            }
        }
        n
    }

    /// Takes Redis' state, read fresh: the units in transit as `stored`
    /// (decoded, each waiting from the read), the rows as `table` (`None`
    /// on a new holding, which reads it when it plans), the metadata's
    /// `version`. Entries this holder knew with the same revocation keep
    /// the earlier instant it knew them written.
    ///
    /// The write of unknown outcome, if any, was applied when `version` is
    /// the one after the one it expected: Redis then holds what this holder
    /// wrote, and an entry it knew is missing only if deleted since (kept
    /// when no row holds its unit). Otherwise Redis may hold an older state
    /// than members saw (the write is not applied now, but may have been
    /// and been lost in a failover; a write was refused as outdated; a
    /// replica that lagged was promoted): every entry this holder knew
    /// stays in transit, merged with the stored one, and the table of the
    /// write of unknown outcome is kept among those members may still work
    /// from. (When `version` is the expected one, its version check
    /// refuses the write should it land later.) The stored table itself is
    /// verified by the next plan.
    pub fn resync(
        &mut self,
        table: Option<HeldTable>,
        mut stored: Transits,
        version: u64,
        groups: &[GroupMembers<'_>],
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
        let applied = self.attempt.as_ref().map(|(_, base)| version == base + 1);
        for (group, units) in std::mem::take(&mut self.transit) {
            let held: HashSet<&str> = groups
                .iter()
                .filter(|g| g.name == group)
                .flat_map(|g| g.members.iter())
                .filter_map(|m| table.as_ref().and_then(|t| t.table.rows().get(m)))
                .flat_map(|r| decode_row(r))
                .collect();
            let entries = stored.entry(group).or_default();
            for (unit, t) in units {
                match entries.get_mut(&unit) {
                    // Redis holds what this holder wrote last (its write of
                    // unknown outcome was applied): only an entry deleted
                    // since, whose unit no row holds, is missing.
                    None if applied == Some(true) => {
                        if !held.contains(unit.as_str()) {
                            entries.insert(unit, t);
                            out.restored += 1;
                        }
                    }
                    // Else Redis may hold an older state (a failover to a
                    // replica that lagged, a write refused as outdated): the
                    // entry stays, and the plan revokes the unit from a row
                    // that holds it too.
                    None => {
                        entries.insert(unit, t);
                        out.restored += 1;
                    }
                    Some(_) if applied == Some(true) => {}
                    Some(s) => {
                        // Redis' entry's origins keep the generation Redis
                        // numbered them by; the ones this holder adds may
                        // have been numbered by a write Redis lost, so the
                        // next write numbers them (and the entry: its waits
                        // start again from that write).
                        let added: Vec<(String, Origin)> = t
                            .from
                            .into_iter()
                            .filter(|(m, _)| !s.from.contains_key(m))
                            .collect();
                        if !added.is_empty() {
                            s.pin_numbering();
                            for (m, o) in added {
                                s.from.insert(m, Origin { numbered: 0, ..o });
                            }
                            s.revoked_at = 0;
                            out.restored += 1;
                        }
                    }
                }
            }
        }
        stored.retain(|_, units| !units.is_empty());
        if let Some((attempted, base)) = self.attempt.take() {
            out.applied = if version == base + 1 {
                Some(true)
            } else {
                (version == base).then_some(false)
            };
            // Applied, the table it wrote is the stored one, verified by
            // the next plan against the tables held before: a unit it took
            // from a row without a transit entry (one deleted since) is
            // claimed. Not applied as far as Redis now says, it may still
            // have been, and read by members, and lost in a failover: its
            // table is held too, and the units it granted are claimed for
            // their would-be owners (one more handoff for those units only).
            if out.applied != Some(true) {
                self.hold(attempted);
            }
        }
        if self.held.is_empty() {
            self.held.extend(table);
        }
        self.transit = stored;
        self.version = Some(version);
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
    use crate::core::handoff::{Origin, Proof, Transit};

    const WAIT: Option<Duration> = Some(Duration::from_secs(8));

    fn entry(from: &str, revoked_at: u64, at: Instant) -> Transit {
        let origin = Origin {
            proof: Proof::Refusal,
            wait: WAIT,
            numbered: 0,
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

    fn table(rows: &[(&str, &str)]) -> Arc<MatchingTable> {
        Arc::new(MatchingTable::from_rows(
            rows.iter().map(|(m, r)| (m.to_string(), r.to_string())),
        ))
    }

    fn group(members: &[String]) -> [GroupMembers<'_>; 1] {
        [GroupMembers { name: "g", members }]
    }

    fn held_at(t: Arc<MatchingTable>) -> HeldTable {
        HeldTable::new(t, Some(0))
    }

    fn tables(l: &Ledger) -> Vec<Arc<MatchingTable>> {
        l.held().iter().map(|h| Arc::clone(&h.table)).collect()
    }

    fn members() -> Vec<String> {
        vec!["a".to_string(), "b".to_string()]
    }

    /// A ledger that read `rows` at `version`.
    fn synced(rows: &[(&str, &str)], version: u64) -> Ledger {
        let mut l = Ledger::new();
        let m = members();
        l.resync(
            Some(held_at(table(rows))),
            Transits::new(),
            version,
            &group(&m),
        );
        l
    }

    #[test]
    fn a_new_holding_reads_before_it_plans() {
        let mut l = Ledger::new();
        assert!(l.stale());
        assert!(l.granted().is_none());
        let m = members();
        l.resync(None, Transits::new(), 3, &group(&m));
        assert!(!l.stale());
        assert_eq!(l.version(), Some(3));
        assert!(tables(&l).is_empty(), "it reads the table when it plans");
        assert!(l.last_written().is_none());
    }

    #[test]
    fn a_confirmed_write_numbers_its_revocations_and_starts_their_waits() {
        let t0 = crate::core::timing::test_t0();
        let mut l = synced(&[("a", "u")], 4);
        let at = t0 + Duration::from_millis(5);
        let written = table(&[("a", ""), ("b", "")]);
        let revoked = l.written(
            Arc::clone(&written),
            0,
            one("g", "u", entry("a", 0, t0)),
            Some(7),
            5,
            at,
        );
        assert!(revoked);
        let t = &l.transit()["g"]["u"];
        assert_eq!((t.revoked_at, t.waiting_since), (7, at));
        assert!(!l.stale());
        assert_eq!(l.version(), Some(5));
        assert_eq!(l.granted(), Some(&written));
        assert_eq!(tables(&l), [written]);
    }

    /// Finding 1 of issue 20: the write that revoked `u` from `a` was applied
    /// but reported an error. Redis has `u` in no row; its transit entry is
    /// there (the script wrote it, and it is taken as stored) or not (deleted
    /// since): the table `a` worked from stays held, so the next plan claims
    /// `u` for `a` (`plan::tests`). Either way `u` waits for `a`.
    #[test]
    fn an_applied_write_of_unknown_outcome_leaves_its_units_in_transit() {
        let t0 = crate::core::timing::test_t0();
        let m = members();
        let before = table(&[("a", "u"), ("b", "")]);
        let stored_rows = table(&[("a", ""), ("b", "")]);
        for stored_entry in [true, false] {
            let mut l = synced(&[("a", "u"), ("b", "")], 4);
            l.unknown(Some(HeldTable::new(Arc::clone(&stored_rows), None)));
            assert!(l.stale(), "nothing is planned before Redis is read again");
            assert!(
                l.transit().is_empty(),
                "the plan's transit is not taken as written"
            );
            let later = t0 + Duration::from_secs(1);
            let stored = if stored_entry {
                one("g", "u", entry("a", 9, later))
            } else {
                Transits::new()
            };
            let r = l.resync(
                Some(held_at(Arc::clone(&stored_rows))),
                stored,
                5,
                &group(&m),
            );
            assert_eq!(r.applied, Some(true));
            if stored_entry {
                let t = &l.transit()["g"]["u"];
                assert_eq!(t.from.keys().collect::<Vec<_>>(), ["a"]);
                assert_eq!((t.revoked_at, t.waiting_since), (9, later));
            } else {
                assert!(l.transit().is_empty());
            }
            assert_eq!(tables(&l), [Arc::clone(&before)]);
        }
    }

    /// However many writes of unknown outcome follow one another, the
    /// tables kept are bounded, and claim every unit they did.
    #[test]
    fn the_tables_held_are_bounded_and_claim_what_they_did() {
        let m = members();
        let mut l = synced(&[("a", "u0")], 0);
        for i in 1..=10u64 {
            let unit = format!("u{i}");
            l.unknown(Some(HeldTable::new(
                table(&[("a", "x"), ("b", unit.as_str())]),
                None,
            )));
            l.resync(
                Some(held_at(table(&[]))),
                Transits::new(),
                100 + 10 * i,
                &group(&m),
            );
            assert!(
                tables(&l).len() <= MAX_HELD,
                "{} tables after {i}",
                tables(&l).len()
            );
        }
        assert_eq!(l.last_written(), Some(&table(&[("a", "u0")])));
        let mut claimed: Vec<(String, String)> = l
            .held()
            .iter()
            .flat_map(|t| t.table.rows().iter())
            .flat_map(|(m, r)| {
                decode_row(r)
                    .into_iter()
                    .map(move |u| (m.clone(), u.to_string()))
            })
            .collect();
        claimed.sort();
        claimed.dedup();
        let mut expected: Vec<(String, String)> = (1..=10)
            .map(|i| ("b".to_string(), format!("u{i}")))
            .chain([("a".into(), "u0".into()), ("a".into(), "x".into())])
            .collect();
        expected.sort();
        assert_eq!(claimed, expected);
    }

    /// The write was not applied (Redis' version is the one it expected):
    /// the unit is still in its owner's row and nothing is added to transit;
    /// the table it tried is kept among those members may work from (a
    /// failover may have lost it after members read it).
    #[test]
    fn an_unapplied_write_of_unknown_outcome_leaves_the_row_as_it_was() {
        let m = members();
        let before = table(&[("a", "u"), ("b", "")]);
        let tried = table(&[("a", ""), ("b", "u")]);
        let mut l = synced(&[("a", "u"), ("b", "")], 4);
        l.unknown(Some(HeldTable::new(Arc::clone(&tried), None)));
        let r = l.resync(
            Some(held_at(Arc::clone(&before))),
            Transits::new(),
            4,
            &group(&m),
        );
        assert_eq!((r.applied, r.restored), (Some(false), 0));
        assert!(l.transit().is_empty());
        assert_eq!(tables(&l), [before, tried]);
        assert_eq!(l.version(), Some(4), "the next write expects it");
    }

    /// Another version entirely (Redis lost its data, a replica was
    /// promoted, someone edited the metadata): whether the write was
    /// applied is unknown, and both tables are kept.
    #[test]
    fn a_write_of_unknown_outcome_against_another_version_keeps_both_tables() {
        let m = members();
        let before = table(&[("a", "u"), ("b", "")]);
        let tried = table(&[("a", ""), ("b", "u")]);
        let mut l = synced(&[("a", "u"), ("b", "")], 4);
        l.unknown(Some(HeldTable::new(Arc::clone(&tried), None)));
        let r = l.resync(Some(held_at(table(&[]))), Transits::new(), 0, &group(&m));
        assert_eq!(r.applied, None);
        assert_eq!(tables(&l), [before, tried]);
        assert_eq!(l.version(), Some(0));
    }

    /// Redis lost its data (or someone deleted the transit hash) while this
    /// holder held: what it knew in transit stays, with its wait, as long
    /// as no row holds the unit.
    #[test]
    fn units_this_holder_knew_in_transit_stay_when_redis_lost_them() {
        let t0 = crate::core::timing::test_t0();
        let m = members();
        let mut l = synced(&[("a", "u,v")], 1);
        let mut planned = one("g", "u", entry("a", 0, t0));
        planned
            .get_mut("g")
            .unwrap()
            .insert("v".into(), entry("a", 0, t0));
        l.written(table(&[("a", ""), ("b", "")]), 0, planned, Some(3), 2, t0);
        l.refused();
        assert!(l.stale());
        // Refused as outdated: `u` in no row; `v` granted to b by a write
        // this holder does not know of.
        let r = l.resync(
            Some(held_at(table(&[("b", "v")]))),
            Transits::new(),
            7,
            &group(&m),
        );
        // Both stay: Redis may hold a state older than members saw (`b`
        // holding `v` is repaired by the plan, which revokes it from `b`).
        assert_eq!(r.restored, 2);
        let u = &l.transit()["g"]["u"];
        assert_eq!((u.revoked_at, u.waiting_since), (3, t0));
        assert_eq!(l.transit()["g"]["v"].revoked_at, 3);
        // Refused, nothing attempted: what members may work from is still
        // the table this holder last knew written.
        assert_eq!(tables(&l), [table(&[("a", ""), ("b", "")])]);
    }

    #[test]
    fn a_resync_keeps_the_waits_this_holder_already_counted() {
        let t0 = crate::core::timing::test_t0();
        let m = members();
        let mut l = synced(&[("a", "u")], 1);
        l.written(
            table(&[("a", ""), ("b", "")]),
            0,
            one("g", "u", entry("a", 0, t0)),
            Some(3),
            2,
            t0,
        );
        l.refused();
        let later = t0 + Duration::from_secs(2);
        // The same revocation, read again: it waits from t0, not from now.
        let r = l.resync(
            Some(held_at(table(&[]))),
            one("g", "u", entry("a", 3, later)),
            2,
            &group(&m),
        );
        assert_eq!((r.known, l.transit()["g"]["u"].waiting_since), (1, t0));
        // A different revocation of the same unit (another holder's): from now.
        l.refused();
        let r = l.resync(
            Some(held_at(table(&[]))),
            one("g", "u", entry("a", 4, later)),
            2,
            &group(&m),
        );
        assert_eq!((r.known, l.transit()["g"]["u"].waiting_since), (0, later));
    }

    #[test]
    fn reports_of_a_lost_numbering_renumber_what_they_would_acknowledge() {
        let t0 = crate::core::timing::test_t0();
        let m = members();
        let mut l = Ledger::new();
        let mut stored = one("g", "u", entry("a", 3, t0));
        stored
            .get_mut("g")
            .unwrap()
            .insert("v".into(), entry("a", 9, t0));
        l.resync(Some(held_at(table(&[]))), stored, 1, &group(&m));
        assert_eq!(l.renumber_up_to(5), 1);
        assert_eq!(l.transit()["g"]["u"].revoked_at, 0);
        assert_eq!(l.transit()["g"]["v"].revoked_at, 9);
    }

    /// Redis' entry names `a` (numbered 3 by Redis); this holder knew `c`
    /// as an origin too (from a write of unknown outcome): the merged entry
    /// is renumbered by the next write, but `a`'s acknowledgement of 3
    /// still counts; `c`'s numbering is the next write's.
    #[test]
    fn a_merged_origin_renumbers_the_entry_not_the_stored_origins() {
        let t0 = crate::core::timing::test_t0();
        let m = members();
        let mut l = synced(&[("a", "u")], 1);
        l.written(
            table(&[("a", ""), ("b", "")]),
            0,
            one("g", "u", entry("c", 0, t0)),
            Some(5),
            2,
            t0,
        );
        l.refused();
        l.resync(
            Some(held_at(table(&[]))),
            one("g", "u", entry("a", 3, t0)),
            2,
            &group(&m),
        );
        let u = &l.transit()["g"]["u"];
        assert_eq!(u.revoked_at, 0, "renumbered by the next write");
        assert_eq!((u.from["a"].numbered, u.from["c"].numbered), (3, 0));
        // A numbering Redis lost up to 4 takes a's along.
        assert_eq!(l.renumber_up_to(4), 1);
        assert_eq!(l.transit()["g"]["u"].from["a"].numbered, 0);
    }
}
