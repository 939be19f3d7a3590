//! `distributor plan`: what the holder would write after members leave,
//! join, change weight or are cordoned, solved with the holder's own solve
//! (`core::whatif`) from what Redis holds now (`report::plan`). It reads
//! Redis with `distributor status`'s one round trip and writes nothing.
//! The mode is the one the holder records in `{T}:meta`, else this
//! command's `-assignment` and `-balance`; the move limit and the join
//! delay are this command's flags (the holder records neither).

use anyhow::Context as _;
use clap::Args;

use crate::config::Config;
use crate::core::whatif::Mode;
use crate::edge::redis::Store;
use crate::report::plan::{PlanReport, PlanRequest, PlanSettings, plan};
use crate::report::render_plan;

/// `distributor plan`'s flags.
#[derive(Args, Debug, Clone, Default, PartialEq, Eq)]
pub struct PlanArgs {
    /// A member that leaves (fails, or is removed from its list); repeatable.
    #[arg(long, value_name = "ADDR")]
    pub leave: Vec<String>,
    /// A member that joins (live), with the weight it reports (1 by
    /// default; an override in {T}:weights still wins); repeatable.
    #[arg(long, value_name = "ADDR[:WEIGHT]")]
    pub join: Vec<String>,
    /// An operator's weight override (1 to 1000), as `weights set` would
    /// write it; repeatable.
    #[arg(long, value_name = "ADDR=WEIGHT")]
    pub weight: Vec<String>,
    /// A member cordoned, as `members cordon` would do it; repeatable.
    #[arg(long, value_name = "ADDR")]
    pub cordon: Vec<String>,
    /// The services list a new member joins (needed with several lists).
    #[arg(long, value_name = "NAME")]
    pub group: Option<String>,
    /// The whole plan as JSON: every unit that changes owner and the
    /// predicted rows.
    #[arg(long)]
    pub json: bool,
}

impl PlanArgs {
    pub fn request(&self) -> PlanRequest {
        PlanRequest {
            leave: self.leave.clone(),
            join: self.join.clone(),
            weight: self.weight.clone(),
            cordon: self.cordon.clone(),
            group: self.group.clone(),
        }
    }
}

/// The solve settings of `config`, for what `{T}:meta` does not record.
pub fn settings(config: &Config) -> PlanSettings {
    PlanSettings {
        mode: Mode {
            assignment: config.assignment,
            balance: config.balance,
            max_moves: config.max_moves_per_cycle,
        },
        join_delay: config.join_delay,
    }
}

/// The plan for `request` from what Redis holds now: one read, nothing
/// written. `all_units`: every unit that changes owner and the predicted
/// rows (what `--json` prints).
pub async fn report(
    config: &Config,
    store: &Store,
    request: &PlanRequest,
    all_units: bool,
) -> anyhow::Result<PlanReport> {
    let o = store
        .read_overview(&config.services_namespaces, &config.workunits_namespace)
        .await
        .context("failed to read the table, the lists and the members")?;
    Ok(plan(
        &o,
        &config.distribution_namespace,
        request,
        &settings(config),
        crate::unix_ms(),
        all_units,
    )?)
}

/// `distributor plan ...`: prints the plan (text, or JSON with `--json`).
pub async fn run(config: &Config, store: &Store, args: &PlanArgs) -> anyhow::Result<()> {
    let r = report(config, store, &args.request(), true).await?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&r)?);
    } else {
        print!("{}", render_plan(&r));
    }
    Ok(())
}
