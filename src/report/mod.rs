//! Operator reports: one model, below both the CLI (`distributor status`,
//! `distributor table`, `distributor history`, `distributor plan`) and the
//! operations server (`/api/status`, `/api/members`, `/api/plan`), and its
//! text rendering.
//!
//! Pure: an [`Overview`](crate::core::status::Overview) read from Redis in,
//! serializable reports and text out. Nothing here prints a secret: reports
//! hold key names, member addresses, counts and replica ids, never the
//! Redis URL.

mod controls;
mod history;
mod model;
pub mod plan;
mod quarantine;
mod text;

pub use controls::{ControlsReport, Pin, controls_of};
pub use history::{HistoryReport, OwnerReport, owner_report, render_history, render_owner};
pub use model::*;
pub use quarantine::{
    DeathReport, QUARANTINED_SHOWN, QuarantineReport, QuarantinedUnit, quarantine_of,
    quarantine_text,
};
pub use text::{UNITS_LISTED, render_plan, render_status, render_table};

#[cfg(test)]
mod tests;
