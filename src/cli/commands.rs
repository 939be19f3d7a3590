//! Operator commands: what they are (clap) and what they do against Redis.

use std::time::Duration;

use anyhow::Context as _;
use clap::Subcommand;

use super::checks::{check_units, checked_addr, checked_unit};
use super::controls::{Control, MembersOp};
use crate::config::Config;
use crate::core::costs::{UnitCosts, decode_cost, display_cost};
use crate::core::handoff::{MAX_WEIGHT, MemberReport, decode_weight_override};
use crate::core::inputs::excerpt;
use crate::edge::redis::Store;
use crate::report;

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
    /// Cordon, drain or uncordon a member (`{T}:controls`).
    Members {
        #[command(subcommand)]
        op: MembersOp,
    },
    /// Freeze voluntary moves (joins, weights, costs, balance) until
    /// `resume`; failures and drains are still handled.
    Pause,
    /// Undo `pause`.
    Resume,
    /// Inspect or override members' capacity weights.
    Weights {
        #[command(subcommand)]
        op: WeightsOp,
    },
    /// Inspect or edit the units' costs (`-balance cost`).
    Costs {
        #[command(subcommand)]
        op: CostsOp,
    },
    /// The table's changes, newest first, as every holder recorded them
    /// (`{T}:changes`): who came, went or failed, and what moved.
    History {
        #[arg(long)]
        json: bool,
        /// How many changes (the stream keeps 1000).
        #[arg(long, default_value_t = 20)]
        limit: usize,
    },
    /// A unit's owner, since when (the table write that gave it, by the
    /// history) and the owner's fencing token for it.
    Owner {
        unit: String,
        #[arg(long)]
        json: bool,
    },
    /// What the holder would write after members leave, join, change
    /// weight or are cordoned: the units that move (from whom to whom),
    /// the moves against the minimum and the balance after. Reads Redis,
    /// writes nothing.
    Plan(super::plan::PlanArgs),
}

#[derive(Subcommand, Debug)]
pub enum CostsOp {
    /// Every unit with a declared cost, sorted, and what an undeclared unit
    /// counts as; unreadable entries are marked.
    List,
    /// Declare a unit's cost: a number above 0 and at most 1e9.
    Set {
        unit: String,
        /// A number such as 3 or 0.25 (a negative one reaches our check,
        /// which names it).
        #[arg(allow_hyphen_values = true)]
        cost: String,
    },
    /// Remove a unit's cost: it counts as the mean of the declared ones.
    Unset { unit: String },
}

#[derive(Subcommand, Debug)]
pub enum WeightsOp {
    /// Every member with an override or a report: the weight the holder
    /// uses, the override and the member's reported weight.
    List,
    /// Override a member's weight (1 to 1000); it beats the member's report.
    Set {
        addr: String,
        /// An integer from 1 to 1000 (a negative one reaches our check, which
        /// names it).
        #[arg(allow_hyphen_values = true)]
        weight: String,
    },
    /// Remove a member's override: its reported weight counts again.
    Unset { addr: String },
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
    /// Pin a unit to a member: it goes there while the member is live, and
    /// is placed as usual otherwise.
    Pin {
        unit: String,
        addr: String,
    },
    /// Remove a unit's pin.
    Unpin {
        unit: String,
    },
    /// Units quarantined because members holding them kept dying
    /// (`-quarantine-after`): list them, or release one.
    Quarantine {
        #[command(subcommand)]
        op: super::quarantine::QuarantineOp,
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
    let control =
        |c: Control| super::controls::run(&store, &config.services_namespaces, units_key, c);
    match command {
        Command::Status { json } => {
            let o = store
                .read_overview(&config.services_namespaces, units_key)
                .await
                .context("failed to read the status")?;
            let report = report::status(&o, table, crate::unix_ms());
            if json {
                // `/api/status`'s document plus every member (`StatusJson`).
                print_json(&report.json())?;
            } else {
                print!("{}", report::render_status(&report));
            }
        }
        Command::Table { json } => {
            let o = store
                .read_overview(&[], units_key)
                .await
                .context("failed to read the table")?;
            let report = report::table(&o, table);
            if json {
                print_json(&report)?;
            } else {
                print!("{}", report::render_table(&report));
            }
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
            checked_addr(&addr)?;
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
        Command::Workunits {
            op: UnitsOp::Pin { unit, addr },
        } => control(Control::Pin { unit, addr }).await?,
        Command::Workunits {
            op: UnitsOp::Unpin { unit },
        } => control(Control::Unpin { unit }).await?,
        Command::Workunits {
            op: UnitsOp::Quarantine { op },
        } => super::quarantine::run(&store, op).await?,
        Command::Members { op } => control(Control::Member(op)).await?,
        Command::Pause => control(Control::Pause).await?,
        Command::Resume => control(Control::Resume).await?,
        Command::Plan(args) => super::plan::run(config, &store, &args).await?,
        Command::Weights { op } => weights(&store, op).await?,
        Command::Costs { op } => costs(&store, op).await?,
        Command::History { json, limit } => {
            let key = &store.keys().changes;
            let h = store
                .read_history(limit)
                .await
                .with_context(|| format!("failed to read {key:?}"))?;
            let report = report::HistoryReport {
                entries: h.entries,
                error: h.error,
            };
            if json {
                print_json(&report)?;
            } else {
                print!("{}", report::render_history(&report, crate::unix_ms()));
            }
        }
        Command::Owner { unit, json } => {
            checked_unit(&unit)?;
            // Three reads: a table write between them would mix two
            // tables, so they are repeated until the generation held.
            let mut tries = 0;
            let (table, generation, h) = loop {
                let generation = store
                    .read_generation()
                    .await
                    .context("failed to read the generation")?;
                let t = store
                    .read_table()
                    .await
                    .with_context(|| format!("failed to read {table:?}"))?;
                let key = &store.keys().changes;
                let h = store
                    .read_history(crate::core::history::HISTORY_KEPT)
                    .await
                    .with_context(|| format!("failed to read {key:?}"))?;
                tries += 1;
                let again = store
                    .read_generation()
                    .await
                    .context("failed to read the generation")?;
                if again == generation {
                    break (t, generation, h);
                }
                if tries == 5 {
                    anyhow::bail!(
                        "the table changed during each of 5 reads (generation {generation}, then {again}); try again"
                    );
                }
            };
            let units_key = &config.workunits_namespace;
            let listed = store
                .list(units_key)
                .await
                .with_context(|| format!("failed to read {units_key:?}"))?
                .iter()
                .any(|u| u == unit.as_bytes());
            let r = report::owner_report(&unit, listed, &table, generation, &h.entries);
            if json {
                print_json(&r)?;
            } else {
                print!("{}", report::render_owner(&r, crate::unix_ms()));
            }
            if !listed && r.owners.is_empty() {
                anyhow::bail!("work unit {unit:?} is not in {units_key:?}, and no member owns it");
            }
        }
    }
    Ok(())
}

/// `distributor weights ...`.
async fn weights(store: &Store, op: WeightsOp) -> anyhow::Result<()> {
    let key = &store.keys().weights;
    match op {
        WeightsOp::List => {
            let (overrides, reports) = store
                .read_weights()
                .await
                .with_context(|| format!("failed to read {key:?}"))?;
            print!("{}", render_weights(&overrides, &reports));
        }
        WeightsOp::Set { addr, weight } => {
            checked_addr(&addr)?;
            let w = decode_weight_override(&weight).ok_or_else(|| {
                anyhow::anyhow!(
                    "invalid weight {weight:?}: expected an integer from 1 to {MAX_WEIGHT}"
                )
            })?;
            store
                .set_weight(&addr, w)
                .await
                .with_context(|| format!("failed to update {key:?}"))?;
            println!("set {addr} to {w}");
        }
        WeightsOp::Unset { addr } => {
            let had = store
                .unset_weight(&addr)
                .await
                .with_context(|| format!("failed to update {key:?}"))?;
            println!("{}", if had { "unset" } else { "no override" });
        }
    }
    Ok(())
}

/// `distributor costs ...`.
async fn costs(store: &Store, op: CostsOp) -> anyhow::Result<()> {
    let key = &store.keys().costs;
    match op {
        CostsOp::List => {
            let pairs = store
                .read_costs()
                .await
                .with_context(|| format!("failed to read {key:?}"))?;
            print!("{}", render_costs(pairs));
        }
        CostsOp::Set { unit, cost } => {
            checked_unit(&unit)?;
            let c = decode_cost(&cost).ok_or_else(|| {
                anyhow::anyhow!("invalid cost {cost:?} for {unit:?}: expected a number above 0 and at most 1e9, such as 3 or 0.25")
            })?;
            let shown = display_cost(c);
            store
                .set_cost(&unit, &shown)
                .await
                .with_context(|| format!("failed to update {key:?}"))?;
            println!("set {unit} to {shown}");
        }
        CostsOp::Unset { unit } => {
            let had = store
                .unset_cost(&unit)
                .await
                .with_context(|| format!("failed to update {key:?}"))?;
            println!("{}", if had { "unset" } else { "no cost" });
        }
    }
    Ok(())
}

/// One line per declared unit, sorted, then what an undeclared unit counts
/// as (the mean of the readable ones).
fn render_costs(mut pairs: Vec<(String, String)>) -> String {
    pairs.sort();
    let mut out = format!("{:<32} {:>12}\n", "unit", "cost");
    for (unit, raw) in &pairs {
        let shown = match decode_cost(raw) {
            Some(c) => display_cost(c),
            None => format!("unreadable: {}", excerpt(raw.as_bytes())),
        };
        out += &format!("{unit:<32} {shown:>12}\n");
    }
    let (costs, bad) = UnitCosts::decode(pairs);
    out += &format!(
        "{} declared, {} unreadable; an undeclared unit counts as {}\n",
        costs.declared(),
        bad.len(),
        display_cost(costs.default_cost())
    );
    out
}

/// One line per member with an override or a report, sorted: the weight the
/// holder uses, the override and the reported weight (`-`: none).
fn render_weights(overrides: &[(String, String)], reports: &[(String, String)]) -> String {
    use std::collections::BTreeMap;
    let mut rows: BTreeMap<&str, (Option<&str>, Option<&str>)> = BTreeMap::new();
    for (m, v) in overrides {
        rows.entry(m).or_default().0 = Some(v);
    }
    for (m, v) in reports {
        rows.entry(m).or_default().1 = Some(v);
    }
    let mut out = format!(
        "{:<24} {:>6} {:>10} {:>10}\n",
        "member", "weight", "override", "reported"
    );
    for (m, (o, r)) in rows {
        let o_w = o.and_then(decode_weight_override);
        let r_w = r.and_then(MemberReport::decode).map(|r| r.weight);
        let show = |raw: Option<&str>, w: Option<u32>| match (raw, w) {
            (None, _) => "-".to_string(),
            (Some(_), Some(w)) => w.to_string(),
            (Some(_), None) => "unreadable".to_string(),
        };
        let weight = o_w.or(r_w).unwrap_or(1);
        out += &format!(
            "{m:<24} {weight:>6} {:>10} {:>10}\n",
            show(o, o_w),
            show(r, r_w)
        );
    }
    out
}
fn print_json(report: &impl serde::Serialize) -> anyhow::Result<()> {
    println!("{}", serde_json::to_string_pretty(report)?);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(v: &[(&str, &str)]) -> Vec<(String, String)> {
        v.iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect()
    }

    #[test]
    fn costs_list_marks_unreadable_entries_and_shows_the_default() {
        let text = render_costs(pairs(&[("b", "2"), ("a", "1"), ("c", "NaN")]));
        let rows: Vec<&str> = text.lines().collect();
        assert_eq!(rows[1].split_whitespace().collect::<Vec<_>>(), ["a", "1"]);
        assert_eq!(rows[2].split_whitespace().collect::<Vec<_>>(), ["b", "2"]);
        assert!(
            rows[3].starts_with('c') && rows[3].contains("unreadable: ") && rows[3].contains("NaN")
        );
        assert_eq!(
            rows[4],
            "2 declared, 1 unreadable; an undeclared unit counts as 1.5"
        );
    }

    #[test]
    fn weights_list_shows_the_override_and_the_report_side_by_side() {
        let overrides = pairs(&[("a:1", "5"), ("c:1", "junk")]);
        let reports = pairs(&[
            ("a:1", "3 0 5000 2"),
            ("b:1", "3 0 5000 4"),
            ("c:1", "3 0 5000 7"),
        ]);
        let text = render_weights(&overrides, &reports);
        let rows: Vec<Vec<&str>> = text
            .lines()
            .map(|l| l.split_whitespace().collect())
            .collect();
        assert_eq!(rows[0], ["member", "weight", "override", "reported"]);
        assert_eq!(rows[1], ["a:1", "5", "5", "2"]);
        assert_eq!(rows[2], ["b:1", "4", "-", "4"]);
        assert_eq!(rows[3], ["c:1", "7", "unreadable", "7"]);
        assert_eq!(rows.len(), 4);
    }
}
