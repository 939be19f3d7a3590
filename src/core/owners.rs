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
//! name; no per-unit string.

use std::collections::HashSet;
use std::sync::Arc;

use crate::core::handoff::parse_transit_field;
use crate::core::row::SEPARATOR;

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

/// One generation of the table, indexed by unit.
#[derive(Debug, Default)]
pub struct OwnerIndex {
    /// `meta.generation` as read (`None`: none stored).
    generation: Option<u64>,
    members: Vec<Arc<str>>,
    rows: Vec<Box<str>>,
    /// (member index, byte offset of the unit in that member's row), sorted
    /// by the unit's name.
    units: Vec<(u32, u32)>,
    /// Units of `{T}:transit`, and units in more than one row.
    unsettled: HashSet<Box<str>>,
    bytes: usize,
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
        let mut members = Vec::with_capacity(rows.len());
        let mut kept: Vec<Box<str>> = Vec::with_capacity(rows.len());
        let mut bytes = 0;
        for (member, row) in rows {
            bytes += member.len() + row.len();
            members.push(Arc::<str>::from(member));
            kept.push(row.into_boxed_str());
        }
        let mut units: Vec<(u32, u32)> = Vec::new();
        for (m, row) in kept.iter().enumerate() {
            let mut at = 0usize;
            for unit in crate::core::row::split_row(row) {
                if !unit.is_empty() {
                    units.push((m as u32, at as u32));
                }
                at += unit.len() + SEPARATOR.len_utf8();
            }
        }
        let name = |&(m, at): &(u32, u32)| unit_at(&kept[m as usize], at);
        units.sort_unstable_by(|a, b| name(a).cmp(name(b)));
        let mut unsettled: HashSet<Box<str>> = transit_fields
            .into_iter()
            .filter_map(|f| parse_transit_field(&f).map(|(_, u)| Box::from(u)))
            .collect();
        // A unit in two members' rows has no single owner: it counts as
        // unsettled. Each unit keeps one entry.
        units.dedup_by(|b, a| {
            let same = name(a) == name(b);
            if same && a.0 != b.0 {
                unsettled.insert(Box::from(name(a)));
            }
            same
        });
        bytes += units.len() * std::mem::size_of::<(u32, u32)>();
        bytes += unsettled.iter().map(|u| u.len()).sum::<usize>();
        OwnerIndex {
            generation,
            members,
            rows: kept,
            units,
            unsettled,
            bytes,
        }
    }

    /// Where `unit` is in this generation.
    pub fn owner(&self, unit: &str) -> Placement {
        if self.unsettled.contains(unit) {
            return Placement::InTransit;
        }
        match self
            .units
            .binary_search_by(|&(m, at)| unit_at(&self.rows[m as usize], at).cmp(unit))
        {
            Ok(i) => Placement::Owned(Arc::clone(&self.members[self.units[i].0 as usize])),
            Err(_) => Placement::Unowned,
        }
    }

    /// The table's generation when it was read (`None`: none stored).
    pub fn generation(&self) -> Option<u64> {
        self.generation
    }

    /// Units in some row (each counted once).
    pub fn units(&self) -> usize {
        self.units.len()
    }

    /// Members with a row.
    pub fn members(&self) -> usize {
        self.members.len()
    }

    /// Units in transit or in two rows.
    pub fn unsettled(&self) -> usize {
        self.unsettled.len()
    }

    /// The bytes this index keeps: rows, member names, the unit index and
    /// the unsettled units (not the allocator's overhead).
    pub fn bytes(&self) -> usize {
        self.bytes
    }
}

/// The unit that starts at byte `at` of `row`.
fn unit_at(row: &str, at: u32) -> &str {
    let rest = &row[at as usize..];
    match rest.bytes().position(|b| b == SEPARATOR as u8) {
        Some(end) => &rest[..end],
        None => rest,
    }
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
        assert_eq!((i.units(), i.members(), i.unsettled()), (3, 3, 1));
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
        assert_eq!(i.unsettled(), 0);
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
}
