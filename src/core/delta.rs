//! What a table write changes, row by row: the rows it writes and the rows
//! it removes, each with the hash of the stored row it replaces, and the
//! digest of the table that follows. Pure.
//!
//! The digest is an XOR of one SHA-1 per row ([`MatchingTable::digest`]), so
//! the next table's digest is the base's with the replaced rows XORed out and
//! the written ones XORed in: O(rows) comparisons and O(rows changed) hashing,
//! never a hash of the whole table. `commit.lua` writes only these rows, after
//! it checked that the stored digest and row count are the base's and that
//! each row it replaces still hashes as given here: a write never replaces a
//! row its plan did not read. (A row it does not replace is not checked: an
//! edit of one is healed by the holder's next full check of the table.)
//!
//! A holder computes a write's delta twice, for the next digest and for the
//! commit; [`TableDelta::again`] builds the second from the first's replaced
//! rows' hashes ([`ReplacedRows`]), so each changed row is hashed once.

use crate::core::table::{MatchingTable, hex, row_hash, xor_into};

/// One row a write changes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RowChange<'a> {
    pub member: &'a str,
    /// The row's new units (`""` for a removed row: not written).
    pub units: &'a str,
    /// The hash ([`row_hash`], hex) of the stored row it replaces; `None`
    /// when the member has no row in the base.
    pub replaces: Option<String>,
}

/// The rows that differ from a base table to the next one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableDelta<'a> {
    /// The base table's digest: what the stored table must be.
    pub base_digest: &'a str,
    /// New or changed rows, by member.
    pub written: Vec<RowChange<'a>>,
    /// Rows of the base that the next table does not have, by member.
    pub removed: Vec<RowChange<'a>>,
}

/// The hashes of the stored rows a delta replaces, in its order: what
/// [`TableDelta::between`] hashes, kept so that the same delta (the same
/// base and next tables) is built again without hashing any row
/// ([`TableDelta::again`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReplacedRows {
    written: Vec<Option<String>>,
    removed: Vec<Option<String>>,
}

impl<'a> TableDelta<'a> {
    /// The delta from `base` to `next`, both walked in member order once.
    /// Records `next`'s digest, computed from the base's, unless known: a
    /// holder computes the delta for that alone before it knows whether it
    /// writes.
    pub fn between(base: &'a MatchingTable, next: &'a MatchingTable) -> TableDelta<'a> {
        TableDelta::walk(base, next, |_, _, member, units| {
            Some(hex(&row_hash(member.as_bytes(), units.as_bytes())))
        })
    }

    /// [`TableDelta::between`] the same `base` and `next` again, with the
    /// replaced rows' hashes of that first delta (`replaced`, from
    /// [`TableDelta::replaced`]) instead of hashing those rows again: a
    /// holder's write computes the delta once for the next digest and once
    /// for the commit. The caller vouches that the tables are the same ones.
    pub fn again(
        base: &'a MatchingTable,
        next: &'a MatchingTable,
        replaced: &ReplacedRows,
    ) -> TableDelta<'a> {
        TableDelta::walk(base, next, |removed, i, _, _| {
            let hashes = if removed {
                &replaced.removed
            } else {
                &replaced.written
            };
            hashes.get(i).cloned().flatten()
        })
    }

    /// The replaced rows' hashes, for [`TableDelta::again`].
    pub fn replaced(&self) -> ReplacedRows {
        ReplacedRows {
            written: self.written.iter().map(|r| r.replaces.clone()).collect(),
            removed: self.removed.iter().map(|r| r.replaces.clone()).collect(),
        }
    }

    /// The walk of [`TableDelta::between`], with `hash(removed, index,
    /// member, units)` giving the hash of each stored row replaced (the
    /// `index`-th of the removed rows, or of the written ones).
    fn walk(
        base: &'a MatchingTable,
        next: &'a MatchingTable,
        hash: impl Fn(bool, usize, &str, &str) -> Option<String>,
    ) -> TableDelta<'a> {
        let base_digest = base.digest();
        let mut acc = unhex(base_digest);
        let mut written: Vec<RowChange<'a>> = Vec::new();
        let mut removed: Vec<RowChange<'a>> = Vec::new();
        // Out of the digest: the replaced row's hash, as given.
        let out = |acc: &mut [u8; 20], h: &Option<String>| {
            if let Some(h) = h {
                xor_into(acc, &unhex(h));
            }
        };
        let mut old = base.rows().iter().peekable();
        for (member, units) in next.rows() {
            // Base rows before this member are gone from the next table.
            while let Some((m, v)) = old.next_if(|(m, _)| *m < member) {
                let replaces = hash(true, removed.len(), m, v);
                out(&mut acc, &replaces);
                removed.push(RowChange {
                    member: m,
                    units: "",
                    replaces,
                });
            }
            let before = old.next_if(|(m, _)| *m == member).map(|(_, v)| v);
            if before == Some(units) {
                continue;
            }
            let replaces = before.and_then(|v| hash(false, written.len(), member, v));
            out(&mut acc, &replaces);
            xor_into(&mut acc, &row_hash(member.as_bytes(), units.as_bytes()));
            written.push(RowChange {
                member,
                units,
                replaces,
            });
        }
        for (m, v) in old {
            let replaces = hash(true, removed.len(), m, v);
            out(&mut acc, &replaces);
            removed.push(RowChange {
                member: m,
                units: "",
                replaces,
            });
        }
        next.set_digest(hex(&acc));
        TableDelta {
            base_digest,
            written,
            removed,
        }
    }

    /// How many rows change.
    pub fn rows(&self) -> usize {
        self.written.len() + self.removed.len()
    }

    /// The bytes of the rows written (members and units) and of the members
    /// removed: what the write transfers for the table.
    pub fn bytes(&self) -> usize {
        self.written
            .iter()
            .map(|r| r.member.len() + r.units.len())
            .chain(self.removed.iter().map(|r| r.member.len()))
            .sum()
    }
}

/// A digest or row hash as bytes, from its 40 hex digits (what is not
/// hex reads as 0: digests are computed here or by the scripts, never
/// typed).
fn unhex(text: &str) -> [u8; 20] {
    let mut bytes = [0u8; 20];
    for (i, pair) in text.as_bytes().chunks(2).take(20).enumerate() {
        let pair = std::str::from_utf8(pair).unwrap_or("00");
        bytes[i] = u8::from_str_radix(pair, 16).unwrap_or(0);
    }
    bytes
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn table(rows: &[(&str, &str)]) -> MatchingTable {
        MatchingTable::from_rows(rows.iter().map(|(m, u)| (m.to_string(), u.to_string())))
    }

    #[test]
    fn rows_written_removed_and_kept() {
        let base = table(&[("a", "u1,u2"), ("b", "u3"), ("c", ""), ("d", "u4")]);
        let next = table(&[("a", "u1,u2"), ("b", "u3,u5"), ("d", "u4"), ("e", "")]);
        let d = TableDelta::between(&base, &next);
        let written: Vec<_> = d.written.iter().map(|r| (r.member, r.units)).collect();
        assert_eq!(written, [("b", "u3,u5"), ("e", "")]);
        assert_eq!(
            d.written[0].replaces.as_deref(),
            Some(hex(&row_hash(b"b", b"u3")).as_str())
        );
        assert_eq!(d.written[1].replaces, None);
        let removed: Vec<_> = d.removed.iter().map(|r| r.member).collect();
        assert_eq!(removed, ["c"]);
        assert_eq!(d.rows(), 3);
        assert_eq!(d.bytes(), "bu3,u5".len() + "e".len() + "c".len());
        assert_eq!(
            next.digest(),
            table(&[("a", "u1,u2"), ("b", "u3,u5"), ("d", "u4"), ("e", "")]).digest()
        );
    }

    #[test]
    fn the_same_table_changes_nothing() {
        let t = table(&[("a", "u1"), ("b", "")]);
        let same = table(&[("a", "u1"), ("b", "")]);
        let d = TableDelta::between(&t, &same);
        assert_eq!(d.rows(), 0);
        assert_eq!(same.digest(), t.digest());
    }

    fn rows() -> impl Strategy<Value = Vec<(String, String)>> {
        // Few members and units, so that rows often coincide.
        proptest::collection::vec(
            (
                "[a-f]",
                proptest::collection::vec("u[0-3]", 0..3).prop_map(|u| u.join(",")),
            ),
            0..6,
        )
    }

    proptest! {
        /// Applying the delta to the base gives the next table, and the
        /// digest from the base's is the next table's own.
        #[test]
        fn the_delta_rebuilds_the_next_table(base in rows(), next in rows()) {
            let (base, next) = (MatchingTable::from_rows(base), MatchingTable::from_rows(next));
            let fresh = MatchingTable::from_rows(next.rows().clone());
            let d = TableDelta::between(&base, &next);
            let mut rebuilt = base.rows().clone();
            for r in &d.removed {
                let stored = &base.rows()[r.member];
                prop_assert_eq!(
                    r.replaces.clone(),
                    Some(hex(&row_hash(r.member.as_bytes(), stored.as_bytes())))
                );
                rebuilt.remove(r.member);
            }
            for r in &d.written {
                prop_assert_eq!(
                    r.replaces.clone(),
                    base.rows().get(r.member).map(|v| hex(&row_hash(r.member.as_bytes(), v.as_bytes())))
                );
                rebuilt.insert(r.member.to_string(), r.units.to_string());
            }
            prop_assert_eq!(&rebuilt, next.rows());
            prop_assert_eq!(next.digest(), fresh.digest());
            prop_assert_eq!(d.rows() == 0, base == next);
        }

        /// The same delta built again from the first one's replaced rows
        /// hashes nothing and is the same delta, digest included.
        #[test]
        fn again_is_the_same_delta(base in rows(), next in rows()) {
            let (base, next) = (MatchingTable::from_rows(base), MatchingTable::from_rows(next));
            let first = TableDelta::between(&base, &next);
            let replaced = first.replaced();
            let unknown = MatchingTable::from_rows(next.rows().clone());
            let second = TableDelta::again(&base, &unknown, &replaced);
            prop_assert_eq!(&second, &first);
            prop_assert_eq!(unknown.digest(), next.digest());
        }
    }
}
