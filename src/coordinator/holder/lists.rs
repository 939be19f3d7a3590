//! The cycle's inputs made of the lists: reused as they are while no list
//! changed (by the versions the store gives them), and normalised again,
//! off the runtime's workers, only for the lists that were read.

use std::collections::HashMap;
use std::sync::Arc;

use super::CycleError;
use super::solve::units_key;
use crate::core::inputs::{self, Inputs, Rejection};
use crate::edge::redis::ListRead;
use crate::error::StoreError;

/// What the last full cycle made of the lists, by the versions the store
/// gave them (`ListRead::version`): when no list changed, the next cycle
/// reuses the inputs (and so the memoised solve) without normalising or
/// hashing anything; when only some changed, only those are normalised
/// again. Cheap to clone: the view is cloned for every cycle.
#[derive(Clone)]
pub(in crate::coordinator) struct ListCache {
    /// Each services list's raw entries (small: one per member), with its
    /// version, in configuration order: groups are normalised together.
    groups: Vec<CachedList>,
    /// The units list's version. Its raw entries are not kept (at a million
    /// units they are tens of MB): its normalised units are in `inputs`.
    units_version: u64,
    pub(super) inputs: Arc<Inputs>,
    /// The units' part of the memo key ([`units_key`]), computed once.
    pub(super) units_key: u128,
}

/// A services list as read: `(key, version, entries)`.
type CachedList = (String, u64, Arc<Vec<Vec<u8>>>);

impl ListCache {
    /// The versions this cache holds, for `Store::read_snapshot`.
    pub(super) fn held(&self, units_list: &str) -> HashMap<String, u64> {
        self.groups
            .iter()
            .map(|(k, v, _)| (k.clone(), *v))
            .chain([(units_list.to_string(), self.units_version)])
            .collect()
    }
}

/// This cycle's inputs from the lists the store read: when it read none
/// (every list known unchanged at the versions of `cache`), the cached
/// inputs as they are, without touching a unit; else rebuilt on a blocking
/// thread (normalising is O(entries): a million units take a good part of a
/// second, which must not stall the runtime's workers), normalising again
/// only the lists that were read.
pub(super) async fn assemble(
    cache: Option<ListCache>,
    groups: Vec<ListRead>,
    units: ListRead,
) -> Result<ListCache, CycleError> {
    if let Some(c) = &cache
        && unchanged(c, &groups, &units)
    {
        return Ok(cache.expect("checked above"));
    }
    super::blocking(move || rebuild(cache, groups, units)).await
}

/// Whether `groups` and `units` are exactly the lists `cache` was made of,
/// none of them read again.
fn unchanged(cache: &ListCache, groups: &[ListRead], units: &ListRead) -> bool {
    units.entries.is_none()
        && units.version == cache.units_version
        && groups.len() == cache.groups.len()
        && groups
            .iter()
            .zip(&cache.groups)
            .all(|(g, (key, version, _))| {
                g.entries.is_none() && g.key == *key && g.version == *version
            })
}

/// [`assemble`]'s work when some list was read.
fn rebuild(
    cache: Option<ListCache>,
    groups: Vec<ListRead>,
    units: ListRead,
) -> Result<ListCache, CycleError> {
    // The store reports a list unchanged only at a version the cycle said it
    // holds, so this is a bug, not a state of Redis: fail the cycle (the last
    // table stays) and the next one reads everything.
    let missing = |key: &str| {
        CycleError::Read(StoreError::Reply {
            op: "read lists",
            detail: format!("list {key:?} reported unchanged at a version not held"),
        })
    };
    let mut raw_groups = Vec::with_capacity(groups.len());
    for g in groups {
        let entries = match g.entries {
            Some(e) => Arc::new(e),
            None => cache
                .as_ref()
                .and_then(|c| {
                    c.groups
                        .iter()
                        .find(|(k, v, _)| *k == g.key && *v == g.version)
                })
                .map(|(_, _, e)| Arc::clone(e))
                .ok_or_else(|| missing(&g.key))?,
        };
        raw_groups.push((g.key, g.version, entries));
    }
    let (unit_list, mut rejections, units_hash) = match units.entries {
        Some(entries) => {
            let (list, rejections) = inputs::normalize_units(&units.key, &entries);
            // A units list whose every entry is invalid is a broken producer,
            // not "no work": keep the last table (an empty list still means
            // no units).
            if !entries.is_empty() && list.is_empty() {
                return Err(CycleError::Inputs {
                    key: units.key,
                    entries: entries.len(),
                    first: rejections.first().map(ToString::to_string),
                });
            }
            // The raw list can be as big as the inputs: freed before solving.
            drop(entries);
            let hash = units_key(&list);
            (Arc::new(list), rejections, hash)
        }
        None => {
            // Only a services list changed: the units are the last ones,
            // shared (at 100,000 units a copy cost milliseconds per join
            // or death).
            let c = cache
                .as_ref()
                .filter(|c| c.units_version == units.version)
                .ok_or_else(|| missing(&units.key))?;
            let rejections = c
                .inputs
                .rejections
                .iter()
                .filter(|r| matches!(r, Rejection::Unit { .. }))
                .cloned()
                .collect();
            (Arc::clone(&c.inputs.units), rejections, c.units_key)
        }
    };
    let lists: Vec<(&str, &[Vec<u8>])> = raw_groups
        .iter()
        .map(|(k, _, e)| (k.as_str(), e.as_slice()))
        .collect();
    let (groups, group_rejections) = inputs::normalize_groups(&lists);
    rejections.extend(group_rejections);
    Ok(ListCache {
        groups: raw_groups,
        units_version: units.version,
        inputs: Arc::new(Inputs {
            groups,
            units: unit_list,
            rejections,
        }),
        units_key: units_hash,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(key: &str, version: u64, entries: Option<&[&str]>) -> ListRead {
        ListRead {
            key: key.into(),
            version,
            entries: entries.map(|e| e.iter().map(|s| s.as_bytes().to_vec()).collect()),
        }
    }

    /// What `inputs::normalize` makes of the same lists read in full.
    fn normalized(groups: &[(&str, &[&str])], units: &[&str]) -> Inputs {
        let bytes = |v: &[&str]| v.iter().map(|s| s.as_bytes().to_vec()).collect();
        inputs::normalize(&inputs::RawInputs {
            groups: groups
                .iter()
                .map(|(k, v)| (k.to_string(), bytes(v)))
                .collect(),
            units_key: "u".into(),
            units: bytes(units),
        })
    }

    #[test]
    fn lists_known_unchanged_reuse_the_inputs_and_the_rest_is_normalised_again() {
        let (g1, g2, u) = (
            ["a:1", "b:1", "bad"].as_slice(),
            ["c:1", "a:1"].as_slice(),
            ["x", "y", "has,comma", "x"].as_slice(),
        );
        let first = rebuild(
            None,
            vec![list("s1", 1, Some(g1)), list("s2", 2, Some(g2))],
            list("u", 3, Some(u)),
        )
        .unwrap();
        assert_eq!(*first.inputs, normalized(&[("s1", g1), ("s2", g2)], u));
        assert_eq!(first.units_key, units_key(&first.inputs.units));

        // Nothing read: the same inputs, not a copy.
        let groups = vec![list("s1", 1, None), list("s2", 2, None)];
        let units = list("u", 3, None);
        assert!(unchanged(&first, &groups, &units));
        let same = rebuild(Some(first.clone()), groups, units).unwrap();
        assert_eq!(same.inputs, first.inputs);

        // A services list changed: the units (and their rejections) carry over.
        let g2b = ["c:1", "d:1"].as_slice();
        let groups = vec![list("s1", 1, None), list("s2", 4, Some(g2b))];
        assert!(!unchanged(&first, &groups, &list("u", 3, None)));
        let next = rebuild(Some(first.clone()), groups, list("u", 3, None)).unwrap();
        assert_eq!(*next.inputs, normalized(&[("s1", g1), ("s2", g2b)], u));
        assert_eq!(next.units_key, first.units_key);
        assert!(
            Arc::ptr_eq(&next.inputs.units, &first.inputs.units),
            "the units are shared, not copied"
        );

        // The units changed: the cached services lists are used as they were.
        let ub = ["z"].as_slice();
        let groups = vec![list("s1", 1, None), list("s2", 4, None)];
        let after = rebuild(Some(next.clone()), groups, list("u", 5, Some(ub))).unwrap();
        assert_eq!(*after.inputs, normalized(&[("s1", g1), ("s2", g2b)], ub));
        assert_ne!(after.units_key, next.units_key);

        // A version the cache does not hold is a failed cycle, never a guess.
        let missing = rebuild(
            Some(after.clone()),
            vec![list("s1", 9, None), list("s2", 4, None)],
            list("u", 5, None),
        );
        assert!(matches!(missing, Err(CycleError::Read(_))));
        let missing = rebuild(None, vec![], list("u", 5, None));
        assert!(matches!(missing, Err(CycleError::Read(_))));

        // A units list of nothing but invalid entries keeps the last table.
        let bad = rebuild(None, vec![], list("u", 6, Some(&["a,b", ""])));
        assert!(matches!(bad, Err(CycleError::Inputs { entries: 2, .. })));
        // An empty one means no units.
        let empty = rebuild(None, vec![], list("u", 7, Some(&[]))).unwrap();
        assert!(empty.inputs.units.is_empty());
    }
}
