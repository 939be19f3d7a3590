//! `distributor workunits quarantine list | release` (`core::quarantine`):
//! what the holder quarantined, and giving a unit back. A release removes
//! one field of `{T}:quarantine`; the holder then places the unit again and
//! its count of deaths restarts.

use anyhow::Context as _;
use clap::Subcommand;

use super::checks::checked_unit;
use crate::edge::redis::Store;
use crate::report::{quarantine_of, quarantine_text};

#[derive(Subcommand, Debug)]
pub enum QuarantineOp {
    /// Units given to nobody because members holding them kept dying, with
    /// the deaths that caused it.
    List {
        #[arg(long)]
        json: bool,
    },
    /// Place a quarantined unit again; its count of deaths restarts.
    Release { unit: String },
}

/// Runs one quarantine command.
pub async fn run(store: &Store, op: QuarantineOp) -> anyhow::Result<()> {
    let key = store.keys().quarantine.clone();
    match op {
        QuarantineOp::List { json } => {
            let pairs = store
                .read_quarantine()
                .await
                .with_context(|| format!("failed to read {key:?}"))?;
            let report = quarantine_of(pairs.iter().map(|(k, v)| (k, v)), usize::MAX);
            if json {
                let out =
                    serde_json::to_string_pretty(&report.map_or_else(Vec::new, |r| r.quarantined))
                        .context("failed to encode the quarantine")?;
                println!("{out}");
            } else if report.is_none() {
                println!("no unit is quarantined");
            } else {
                print!("{}", quarantine_text(&report, Some(crate::unix_ms())));
            }
        }
        QuarantineOp::Release { unit } => {
            checked_unit(&unit)?;
            let released = store
                .release_quarantine(&unit)
                .await
                .with_context(|| format!("failed to update {key:?}"))?;
            anyhow::ensure!(
                released,
                "work unit {unit:?} is not quarantined (see `distributor workunits quarantine list`)"
            );
            println!(
                "released {unit}: the holder places it again at its next cycle; its count of deaths restarts"
            );
        }
    }
    Ok(())
}
