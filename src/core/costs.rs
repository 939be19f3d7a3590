//! Unit costs: what `-balance cost` balances, decoded from `{T}:costs`.
//!
//! Pure. An operator (`distributor costs set`) or whoever maintains the work
//! list writes `unit → positive number`; [`UnitCosts::decode`] turns the
//! hash into exact integers, so that sums and comparisons in the solver are
//! exact and every replica computes the same table from the same hash.
//!
//! # Encoding
//!
//! A cost is a decimal number (`7`, `0.25`, `1e3`), finite, above zero and
//! at most [`MAX_COST`]. It is kept in thousandths ([`SCALE`]), rounded to
//! the nearest, and at least one thousandth: `0.0001` counts as `0.001`.
//! Anything else (`0`, `-1`, `NaN`, `inf`, `12kb`, an empty value) is
//! *unreadable*: the entry is skipped (the unit then counts as undeclared)
//! and reported by the caller, with the unit's name and the value.
//!
//! # Undeclared units count as the mean
//!
//! A unit without a readable cost counts as the mean of the declared ones
//! (rounded to the nearest thousandth), or as 1 when none is declared. The
//! mean is scale-free: an operator who declares sizes in megabytes (say
//! 300 for a typical site) would otherwise see every undeclared unit count
//! as nearly nothing, and pile up on one member. New units, listed before
//! anyone declared their cost, are then average until told otherwise.

use std::collections::HashMap;
use std::hash::BuildHasherDefault;

use xxhash_rust::xxh3::Xxh3;

use crate::core::inputs::excerpt;
use crate::core::sticky::StrHasher;

/// Unit name → cost, hashed with XXH3 (a solve looks up every unit).
type CostMap = HashMap<String, u64, BuildHasherDefault<StrHasher>>;

/// Costs are kept in thousandths.
pub const SCALE: u64 = 1000;

/// The largest cost a unit may declare, in the operator's unit (so at most
/// `10^12` thousandths: a million units of it still sum within a `u64`).
pub const MAX_COST: f64 = 1e9;

/// A declared cost that cannot be read: the unit and the value, each
/// shortened as invalid inputs are for the log (`inputs::excerpt`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnreadableCost {
    pub unit: String,
    pub value: String,
}

/// Every unit's cost, in thousandths: declared, else the default.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnitCosts {
    declared: CostMap,
    default: u64,
    /// Identifies the content (see [`UnitCosts::digest`]).
    digest: u128,
}

impl Default for UnitCosts {
    fn default() -> Self {
        UnitCosts::decode(std::iter::empty::<(String, String)>()).0
    }
}

impl UnitCosts {
    /// The costs of a `{T}:costs` hash's `(unit, value)` pairs, in any
    /// order, and the entries that could not be read (sorted by unit).
    pub fn decode<I, K, V>(pairs: I) -> (UnitCosts, Vec<UnreadableCost>)
    where
        I: IntoIterator<Item = (K, V)>,
        K: Into<String>,
        V: AsRef<str>,
    {
        let mut declared: Vec<(String, u64)> = Vec::new();
        let mut unreadable = Vec::new();
        for (unit, value) in pairs {
            let unit = unit.into();
            match decode_cost(value.as_ref()) {
                Some(c) => declared.push((unit, c)),
                None => unreadable.push(UnreadableCost {
                    unit: excerpt(unit.as_bytes()),
                    value: excerpt(value.as_ref().as_bytes()),
                }),
            }
        }
        unreadable.sort_by(|a, b| (&a.unit, &a.value).cmp(&(&b.unit, &b.value)));
        (UnitCosts::from_thousandths(declared), unreadable)
    }

    /// The costs of `(unit, thousandths)` pairs (a unit twice: the last);
    /// an unlisted unit counts as their mean (see the module docs).
    pub fn from_thousandths<K: Into<String>>(
        pairs: impl IntoIterator<Item = (K, u64)>,
    ) -> UnitCosts {
        let declared: CostMap = pairs
            .into_iter()
            .map(|(u, c)| (u.into(), c.max(1)))
            .collect();
        let default = match declared.len() as u128 {
            0 => SCALE,
            n => {
                let sum: u128 = declared.values().map(|&c| u128::from(c)).sum();
                ((sum + n / 2) / n) as u64
            }
        };
        let mut sorted: Vec<(&String, &u64)> = declared.iter().collect();
        sorted.sort_unstable();
        let mut h = Xxh3::new();
        h.update(&default.to_le_bytes());
        for (u, c) in sorted {
            h.update(&(u.len() as u64).to_le_bytes());
            h.update(u.as_bytes());
            h.update(&c.to_le_bytes());
        }
        let digest = h.digest128();
        UnitCosts {
            declared,
            default,
            digest,
        }
    }

    /// `unit`'s cost in thousandths: declared, else the mean of the
    /// declared ones.
    pub fn of(&self, unit: &str) -> u64 {
        if self.declared.is_empty() {
            return self.default;
        }
        self.declared.get(unit).copied().unwrap_or(self.default)
    }

    /// What an undeclared unit counts as.
    pub fn default_cost(&self) -> u64 {
        self.default
    }

    /// How many units declare a readable cost.
    pub fn declared(&self) -> usize {
        self.declared.len()
    }

    /// Identifies the costs (equal costs, equal digests), for the holder's
    /// "inputs unchanged, skip the solve" key.
    pub fn digest(&self) -> u128 {
        self.digest
    }
}

/// One declared cost, in thousandths (see the module docs).
pub fn decode_cost(raw: &str) -> Option<u64> {
    let raw = raw.trim();
    // `f64::from_str` takes "inf" and "NaN"; only plain numbers are costs.
    if raw.is_empty()
        || !raw
            .bytes()
            .all(|b| b.is_ascii_digit() || b".eE+-".contains(&b))
    {
        return None;
    }
    let x: f64 = raw.parse().ok()?;
    if !(x.is_finite() && x > 0.0 && x <= MAX_COST) {
        return None;
    }
    Some(((x * SCALE as f64).round() as u64).max(1))
}

/// A cost in thousandths as the operator writes it: `2`, `0.25`.
pub fn display_cost(c: u64) -> String {
    let (whole, frac) = (c / SCALE, c % SCALE);
    if frac == 0 {
        whole.to_string()
    } else {
        format!("{whole}.{frac:03}")
            .trim_end_matches('0')
            .to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn costs_decode_to_thousandths() {
        assert_eq!(decode_cost("7"), Some(7000));
        assert_eq!(decode_cost(" 0.25 "), Some(250));
        assert_eq!(decode_cost("1e3"), Some(1_000_000));
        assert_eq!(decode_cost("0.0001"), Some(1));
        assert_eq!(decode_cost("1e9"), Some(1_000_000_000_000));
        for bad in [
            "", "0", "-1", "NaN", "inf", "infinity", "12kb", "1e10", "0x10", "1,5",
        ] {
            assert_eq!(decode_cost(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn undeclared_units_count_as_the_mean_of_the_declared() {
        let (costs, bad) = UnitCosts::decode([("a", "1"), ("b", "2"), ("c", "junk")]);
        assert_eq!(costs.of("a"), 1000);
        assert_eq!(costs.of("b"), 2000);
        assert_eq!(costs.of("c"), 1500, "unreadable: undeclared");
        assert_eq!(costs.of("zzz"), 1500);
        assert_eq!(costs.declared(), 2);
        assert_eq!(
            bad,
            [UnreadableCost {
                unit: "\"c\"".into(),
                value: "\"junk\"".into()
            }]
        );
        let none = UnitCosts::default();
        assert_eq!(none.of("a"), SCALE);
    }

    #[test]
    fn the_digest_depends_on_content_not_order() {
        let a = UnitCosts::decode([("a", "1"), ("b", "2")]).0;
        let b = UnitCosts::decode([("b", "2.000"), ("a", "1")]).0;
        let c = UnitCosts::decode([("a", "1"), ("b", "3")]).0;
        assert_eq!(a.digest(), b.digest());
        assert_ne!(a.digest(), c.digest());
        assert_ne!(UnitCosts::default().digest(), a.digest());
    }

    #[test]
    fn costs_display_as_written() {
        assert_eq!(display_cost(7000), "7");
        assert_eq!(display_cost(250), "0.25");
        assert_eq!(display_cost(1), "0.001");
    }
}
