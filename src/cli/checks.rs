//! What the operator commands check before they write: a member address and
//! a work unit by the daemon's own rules (`core::inputs`), so the CLI never
//! writes an entry the daemon would skip; errors name the value.

use crate::core::inputs::{check_member_addr, check_unit};

/// A member address as the daemon reads it, or an error naming it.
pub(super) fn checked_addr(addr: &str) -> anyhow::Result<()> {
    check_member_addr(addr.as_bytes())
        .map(drop)
        .map_err(|why| anyhow::anyhow!("invalid member address {addr:?}: {why}"))
}

/// A work unit as the daemon reads it, or an error naming it.
pub(super) fn checked_unit(unit: &str) -> anyhow::Result<()> {
    check_unit(unit.as_bytes())
        .map(drop)
        .map_err(|why| anyhow::anyhow!("invalid work unit {unit:?}: {why}"))
}

/// Every unit of `units`, by [`checked_unit`].
pub(super) fn check_units(units: &[String]) -> anyhow::Result<()> {
    units.iter().try_for_each(|u| checked_unit(u))
}
