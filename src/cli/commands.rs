//! Operator commands: what they are (clap) and what they do against Redis.

use std::time::Duration;

use anyhow::Context as _;
use clap::Subcommand;

use crate::cli::report;
use crate::config::Config;
use crate::core::inputs::{check_member_addr, check_unit};
use crate::edge::redis::Store;

/// Operator commands; without one, `distributor` runs the daemon.
#[derive(Subcommand, Debug)]
pub enum Command {
    /// Lease holder, epoch, generation, census and per-group members.
    Status {
        #[arg(long)]
        json: bool,
    },
    /// One row per member: units and share, with balance and totals.
    Table {
        #[arg(long)]
        json: bool,
    },
    /// Inspect or edit a services list (a group).
    Services {
        #[command(subcommand)]
        op: ServicesOp,
    },
    /// Inspect or edit the work units list.
    Workunits {
        #[command(subcommand)]
        op: UnitsOp,
    },
}

#[derive(Subcommand, Debug)]
pub enum ServicesOp {
    /// Members of one group, or of every configured group.
    List { group: Option<String> },
    /// Add a member address to a group (once).
    Add { group: String, addr: String },
    /// Remove a member address from a group.
    Remove { group: String, addr: String },
}

#[derive(Subcommand, Debug)]
pub enum UnitsOp {
    List,
    /// Add units that are not listed yet.
    Add {
        #[arg(required = true)]
        units: Vec<String>,
    },
    /// Remove units.
    Remove {
        #[arg(required = true)]
        units: Vec<String>,
    },
    /// Replace the whole list, atomically.
    Set {
        units: Vec<String>,
    },
}

/// Runs one operator command against Redis and prints its result.
pub fn run(config: &Config, command: Command) -> anyhow::Result<()> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("failed to start the async runtime")?
        .block_on(execute(config, command))
}

async fn execute(config: &Config, command: Command) -> anyhow::Result<()> {
    let table = &config.distribution_namespace;
    let units_key = &config.workunits_namespace;
    let store = Store::connect(&config.redis_options(), table, Duration::from_secs(3))
        .context("failed to open the redis connection")?;
    let update = || format!("failed to update {units_key:?}");
    match command {
        Command::Status { json } => {
            let o = store
                .read_overview(&config.services_namespaces, units_key)
                .await
                .context("failed to read the status")?;
            let report = report::status(&o, table, crate::unix_ms());
            print(json, &report, report::render_status)?;
        }
        Command::Table { json } => {
            let o = store
                .read_overview(&[], units_key)
                .await
                .context("failed to read the table")?;
            print(json, &report::table(&o, table), report::render_table)?;
        }
        Command::Services {
            op: ServicesOp::List { group },
        } => {
            let groups = group.map_or_else(|| config.services_namespaces.clone(), |g| vec![g]);
            for g in groups {
                let members = store
                    .list(&g)
                    .await
                    .with_context(|| format!("failed to read {g:?}"))?;
                for m in members {
                    println!("{g}\t{}", String::from_utf8_lossy(&m));
                }
            }
        }
        Command::Services {
            op: ServicesOp::Add { group, addr },
        } => {
            check_member_addr(addr.as_bytes())
                .map_err(|why| anyhow::anyhow!("invalid member address {addr:?}: {why}"))?;
            let added = store
                .add_once(&group, &addr)
                .await
                .with_context(|| format!("failed to add to {group:?}"))?;
            println!("{}", if added { "added" } else { "already listed" });
        }
        Command::Services {
            op: ServicesOp::Remove { group, addr },
        } => {
            let n = store
                .remove_all(&group, &addr)
                .await
                .with_context(|| format!("failed to remove from {group:?}"))?;
            println!("removed {n}");
        }
        Command::Workunits { op: UnitsOp::List } => {
            let units = store
                .list(units_key)
                .await
                .with_context(|| format!("failed to read {units_key:?}"))?;
            for u in units {
                println!("{}", String::from_utf8_lossy(&u));
            }
        }
        Command::Workunits {
            op: UnitsOp::Add { units },
        } => {
            check_units(&units)?;
            let mut added = 0;
            for u in &units {
                added += usize::from(store.add_once(units_key, u).await.with_context(update)?);
            }
            println!("added {added}");
        }
        Command::Workunits {
            op: UnitsOp::Remove { units },
        } => {
            let mut removed = 0;
            for u in &units {
                removed += store.remove_all(units_key, u).await.with_context(update)?;
            }
            println!("removed {removed}");
        }
        Command::Workunits {
            op: UnitsOp::Set { units },
        } => {
            check_units(&units)?;
            store
                .replace_list(units_key, &units)
                .await
                .with_context(update)?;
            println!("set {} units", units.len());
        }
    }
    Ok(())
}

/// Prints a report as JSON or as text.
fn print<R: serde::Serialize>(
    json: bool,
    report: &R,
    render: fn(&R) -> String,
) -> anyhow::Result<()> {
    if json {
        println!("{}", serde_json::to_string_pretty(report)?);
    } else {
        print!("{}", render(report));
    }
    Ok(())
}

/// The daemon's own rule for units, so the CLI never writes one it would skip.
fn check_units(units: &[String]) -> anyhow::Result<()> {
    for u in units {
        check_unit(u.as_bytes())
            .map_err(|why| anyhow::anyhow!("invalid work unit {u:?}: {why}"))?;
    }
    Ok(())
}
