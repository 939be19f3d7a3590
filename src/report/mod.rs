//! Operator reports: one model, below both the CLI (`distributor status`,
//! `distributor table`, `distributor history`) and the operations server (`/api/status`,
//! `/api/members`), and its text rendering.
//!
//! Pure: an [`Overview`](crate::core::status::Overview) read from Redis in,
//! serializable reports and text out. Nothing here prints a secret: reports
//! hold key names, member addresses, counts and replica ids, never the
//! Redis URL.

mod controls;
mod history;
mod model;
mod text;

pub use controls::{ControlsReport, Pin, controls_of};
pub use history::{HistoryReport, OwnerReport, owner_report, render_history, render_owner};
pub use model::*;
pub use text::{render_status, render_table};

#[cfg(test)]
mod tests;
