//! Who owns each unit, for callers that are not members (`member::Lookup`):
//! one generation of the matching table and its units in transit, indexed
//! so that a question costs a binary search and no allocation.
//!
//! Guarantees: an index is built from one read of the table, its generation
//! and `{T}:transit` together (one `MULTI`), so it never mixes two
//! generations; a unit in transit (revoked, not granted yet) or in two rows
//! (a hand-edited table the holder has not repaired yet) is never reported
//! as owned; a unit in no row and not in transit is [`Placement::Unowned`].
//! It is a copy: the member's hold is the truth (`docs/protocol.md`,
//! "Lookups").
//!
//! Memory: the rows as Redis holds them, one shared name per member, and
//! 8 bytes per unit (its member and its offset in that row), sorted by unit
//! name; no per-unit string. A change builds the next index from the rows
//! that changed ([`OwnerIndex::apply`]); the unchanged rows are shared.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use crate::core::handoff::parse_transit_field;
use crate::core::row::{SEPARATOR, split_row};

/// Where a unit is, in one generation of the table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Placement {
    /// In this member's row, and in no other, and not in transit.
    Owned(Arc<str>),
    /// Moving (revoked from its owner, not yet granted to the next one), or
    /// in two rows of a hand-edited table: ask again shortly.
    InTransit,
    /// In no row and not in transit: not in the units list, or no member
    /// can take it.
    Unowned,
}

/// One member's place in an index: its name and its row (`None`: no row
/// now). Shared, unchanged, by the copies before and after a change.
type Slot = (Arc<str>, Option<Arc<str>>);

/// One generation of the table, indexed by unit.
#[derive(Debug, Clone, Default)]
pub struct OwnerIndex {
    /// `meta.generation` as read (`None`: none stored).
    generation: Option<u64>,
    slots: Vec<Slot>,
    slot_of: HashMap<Arc<str>, u32>,
    /// (slot, byte offset of the unit in that slot's row), sorted by the
    /// unit's name; a unit in several rows has an entry for each.
    units: Vec<(u32, u32)>,
    /// Units of `{T}:transit`.
    transit: HashSet<Box<str>>,
}

impl OwnerIndex {
    /// The index of `rows` (member, row), with the generation and the
    /// `{T}:transit` fields read with them. A malformed transit field is
    /// skipped (the holder rewrites `{T}:transit` whole with every write);
    /// a row longer than 4 GiB cannot be stored in a Redis value.
    pub fn build(
        generation: Option<u64>,
        rows: impl IntoIterator<Item = (String, String)>,
        transit_fields: impl IntoIterator<Item = String>,
    ) -> OwnerIndex {
        let mut rows: Vec<(String, String)> = rows.into_iter().collect();
        rows.sort_unstable();
        let slots: Vec<Slot> = rows
            .into_iter()
            .map(|(m, r)| (Arc::from(m), Some(Arc::from(r))))
            .collect();
        let slot_of = slots
            .iter()
            .enumerate()
            .map(|(i, (m, _))| (Arc::clone(m), i as u32))
            .collect();
        let mut units = Vec::new();
        for s in 0..slots.len() as u32 {
            entries(&slots, s, &mut units);
        }
        units.sort_unstable_by(|a, b| name(&slots, a).cmp(name(&slots, b)));
        OwnerIndex {
            generation,
            slots,
            slot_of,
            units,
            transit: transit_set(transit_fields),
        }
    }

    /// The next generation's index from this one and the rows that changed
    /// (member, new row; `None`: removed), with that generation's transit
    /// fields: the same answers as [`OwnerIndex::build`] of the whole new
    /// table, reading only the changed rows. Its cost: the changed rows,
    /// and one linear merge of the 8-byte unit index.
    pub fn apply(
        &self,
        generation: Option<u64>,
        changed: impl IntoIterator<Item = (String, Option<String>)>,
        transit_fields: impl IntoIterator<Item = String>,
    ) -> OwnerIndex {
        let mut slots = self.slots.clone();
        let mut slot_of = self.slot_of.clone();
        let mut touched: HashSet<u32> = HashSet::new();
        for (member, row) in changed {
            let row = row.map(Arc::<str>::from);
            let s = match slot_of.get(member.as_str()) {
                Some(&s) => {
                    slots[s as usize].1 = row;
                    s
                }
                None => {
                    let s = slots.len() as u32;
                    let member: Arc<str> = Arc::from(member);
                    slot_of.insert(Arc::clone(&member), s);
                    slots.push((member, row));
                    s
                }
            };
            touched.insert(s);
        }
        let mut fresh = Vec::new();
        for &s in &touched {
            entries(&slots, s, &mut fresh);
        }
        fresh.sort_unstable_by(|a, b| name(&slots, a).cmp(name(&slots, b)));
        let kept = self.units.iter().filter(|(s, _)| !touched.contains(s));
        let mut units = Vec::with_capacity(self.units.len() + fresh.len());
        let mut fresh = fresh.into_iter().peekable();
        for &k in kept {
            while let Some(f) = fresh.next_if(|f| name(&slots, f) < name(&slots, &k)) {
                units.push(f);
            }
            units.push(k);
        }
        units.extend(fresh);
        OwnerIndex {
            generation,
            slots,
            slot_of,
            units,
            transit: transit_set(transit_fields),
        }
    }

    /// Where `unit` is in this generation.
    pub fn owner(&self, unit: &str) -> Placement {
        if self.transit.contains(unit) {
            return Placement::InTransit;
        }
        let at = self.units.partition_point(|e| name(&self.slots, e) < unit);
        let mut same = self.units[at..]
            .iter()
            .take_while(|e| name(&self.slots, e) == unit)
            .map(|e| e.0);
        match same.next() {
            None => Placement::Unowned,
            Some(s) if same.all(|o| o == s) => {
                Placement::Owned(Arc::clone(&self.slots[s as usize].0))
            }
            Some(_) => Placement::InTransit,
        }
    }

    /// The table's generation when it was read (`None`: none stored).
    pub fn generation(&self) -> Option<u64> {
        self.generation
    }

    /// Rows (member, unit) in the table, a unit counted once per row.
    pub fn assignments(&self) -> usize {
        self.units.len()
    }

    /// Members with a row.
    pub fn members(&self) -> usize {
        self.slots.iter().filter(|(_, r)| r.is_some()).count()
    }

    /// Units in transit.
    pub fn in_transit(&self) -> usize {
        self.transit.len()
    }

    /// The bytes this index keeps: rows, member names, the unit index and
    /// the units in transit (not the allocator's overhead).
    pub fn bytes(&self) -> usize {
        let slots: usize = self
            .slots
            .iter()
            .map(|(m, r)| m.len() + r.as_ref().map_or(0, |r| r.len()))
            .sum();
        slots
            + self.units.len() * std::mem::size_of::<(u32, u32)>()
            + self.transit.iter().map(|u| u.len()).sum::<usize>()
    }
}

/// The entries of slot `s`'s row, appended to `out`.
fn entries(slots: &[Slot], s: u32, out: &mut Vec<(u32, u32)>) {
    let Some(row) = &slots[s as usize].1 else {
        return;
    };
    let mut at = 0usize;
    for unit in split_row(row) {
        if !unit.is_empty() {
            out.push((s, at as u32));
        }
        at += unit.len() + SEPARATOR.len_utf8();
    }
}

/// The unit an entry names.
fn name<'a>(slots: &'a [Slot], &(s, at): &(u32, u32)) -> &'a str {
    let row = slots[s as usize].1.as_deref().unwrap_or_default();
    split_row(&row[at as usize..]).next().unwrap_or_default()
}

fn transit_set(fields: impl IntoIterator<Item = String>) -> HashSet<Box<str>> {
    fields
        .into_iter()
        .filter_map(|f| parse_transit_field(&f).map(|(_, u)| Box::from(u)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    fn index(rows: &[(&str, &str)], transit: &[&str]) -> OwnerIndex {
        OwnerIndex::build(
            Some(7),
            rows.iter().map(|(m, r)| (m.to_string(), r.to_string())),
            transit.iter().map(|f| f.to_string()),
        )
    }

    #[test]
    fn a_unit_is_owned_in_transit_or_unowned() {
        let i = index(
            &[("a:1", "u1,u3"), ("b:2", "u2"), ("c:3", "")],
            &["u4,workers"],
        );
        assert_eq!(i.owner("u1"), Placement::Owned("a:1".into()));
        assert_eq!(i.owner("u3"), Placement::Owned("a:1".into()));
        assert_eq!(i.owner("u2"), Placement::Owned("b:2".into()));
        assert_eq!(i.owner("u4"), Placement::InTransit);
        assert_eq!(i.owner("u5"), Placement::Unowned);
        assert_eq!(i.owner(""), Placement::Unowned);
        assert_eq!(i.generation(), Some(7));
        assert_eq!((i.assignments(), i.members(), i.in_transit()), (3, 3, 1));
    }

    #[test]
    fn a_unit_in_two_rows_or_in_a_row_and_transit_has_no_owner() {
        let i = index(&[("a:1", "u1,u2"), ("b:2", "u2")], &["u1,workers"]);
        assert_eq!(i.owner("u1"), Placement::InTransit);
        assert_eq!(i.owner("u2"), Placement::InTransit);
    }

    #[test]
    fn malformed_transit_fields_are_skipped() {
        let i = index(&[("a:1", "u1")], &["nogroup", ",g", "u1,"]);
        assert_eq!(i.owner("u1"), Placement::Owned("a:1".into()));
        assert_eq!(i.in_transit(), 0);
    }

    #[test]
    fn a_route_is_current_from_the_generation_that_granted_the_holding() {
        use crate::core::ownership::FencingToken;
        let token = FencingToken(12);
        assert!(token.admits_route(12));
        assert!(token.admits_route(40));
        assert!(!token.admits_route(11));
    }

    proptest! {
        /// Every answer is the one a plain scan of the rows and the transit
        /// fields gives, for any rows (empty pieces, duplicates, units in
        /// several rows, multi-byte names).
        #[test]
        fn answers_match_a_scan(
            rows in proptest::collection::btree_map("[a-d]{1,2}", "[uvé,]{0,12}", 0..6),
            transit in proptest::collection::vec("[uvé]{1,2}", 0..3),
            asked in proptest::collection::vec("[uvé]{0,3}", 1..12),
        ) {
            let fields: Vec<String> = transit.iter().map(|u| format!("{u},g")).collect();
            let i = OwnerIndex::build(None, rows.clone(), fields);
            let mut holders: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
            for (m, row) in &rows {
                for u in row.split(',').filter(|u| !u.is_empty()) {
                    let h = holders.entry(u).or_default();
                    if !h.contains(&m.as_str()) {
                        h.push(m);
                    }
                }
            }
            for u in asked.iter().chain(transit.iter()) {
                let want = if transit.contains(u) {
                    Placement::InTransit
                } else {
                    match holders.get(u.as_str()).map(Vec::as_slice) {
                        None | Some([]) => Placement::Unowned,
                        Some([one]) => Placement::Owned(Arc::from(*one)),
                        Some(_) => Placement::InTransit,
                    }
                };
                prop_assert_eq!(i.owner(u), want, "unit {:?}", u);
            }
        }
    }

    proptest! {
        /// A change applied to an index answers every unit as the index
        /// built from the whole new table does (rows changed, added and
        /// removed; units moving between rows; several changes in a row).
        #[test]
        fn apply_answers_as_a_whole_build(
            start in proptest::collection::btree_map("[a-e]", "[uvwé,]{0,10}", 0..5),
            steps in proptest::collection::vec(
                proptest::collection::btree_map("[a-f]", proptest::option::of("[uvwé,]{0,10}"), 0..4),
                1..4,
            ),
            transit in proptest::collection::vec("[uvwé]{1,2}", 0..2),
        ) {
            let mut table = start.clone();
            let mut index = OwnerIndex::build(Some(1), start, Vec::new());
            for (n, step) in steps.into_iter().enumerate() {
                for (m, row) in &step {
                    match row {
                        Some(r) => table.insert(m.clone(), r.clone()),
                        None => table.remove(m),
                    };
                }
                let fields: Vec<String> = transit.iter().map(|u| format!("{u},g")).collect();
                let g = Some(n as u64 + 2);
                index = index.apply(g, step, fields.clone());
                let whole = OwnerIndex::build(g, table.clone(), fields);
                let names = ["u", "v", "w", "é", "uv", "vé", "ww", "x", ""];
                for u in names {
                    prop_assert_eq!(index.owner(u), whole.owner(u), "unit {:?} after step {}", u, n);
                }
                prop_assert_eq!(index.assignments(), whole.assignments());
                prop_assert_eq!(index.members(), whole.members());
            }
        }
    }
}
