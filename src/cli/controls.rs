//! The operator controls' commands (`core::controls`): `members cordon |
//! uncordon | drain`, `workunits pin | unpin`, `pause`, `resume`. Each
//! validates its input as the daemon reads it (`Controls::decode` would
//! skip what these refuse), writes one field of `{T}:controls`, and says
//! what the holder will do; a member or unit that is not listed is written
//! anyway (it applies once listed) with a note.

use anyhow::Context as _;
use clap::Subcommand;

use super::checks::{checked_addr, checked_unit};
use crate::core::controls::{MEMBER_PREFIX, MemberControl, PAUSE_FIELD, PIN_PREFIX};
use crate::edge::redis::Store;

#[derive(Subcommand, Debug)]
pub enum MembersOp {
    /// The member gets no new units and keeps its own.
    Cordon { addr: String },
    /// Lift a cordon or a drain: the member gets units again.
    Uncordon { addr: String },
    /// The member's units move away through the handoff while it keeps
    /// running; it stays cordoned until `uncordon`.
    Drain { addr: String },
}

/// A control to write or remove.
#[derive(Debug)]
pub enum Control {
    Member(MembersOp),
    Pin { unit: String, addr: String },
    Unpin { unit: String },
    Pause,
    Resume,
}

/// Whether `entry` is in any of `lists` (a note only: errors say nothing).
async fn listed(store: &Store, lists: &[String], entry: &str) -> bool {
    for l in lists {
        if let Ok(entries) = store.list(l).await
            && entries.iter().any(|e| e == entry.as_bytes())
        {
            return true;
        }
    }
    false
}

/// Runs one control command; `services` and `units_key` for the notes.
pub async fn run(
    store: &Store,
    services: &[String],
    units_key: &str,
    control: Control,
) -> anyhow::Result<()> {
    let key = store.keys().controls.clone();
    let failed = || format!("failed to update {key:?}");
    let now = crate::unix_ms();
    let note_member = |addr: &str| {
        let addr = addr.to_string();
        async move {
            if !listed(store, services, &addr).await {
                println!("note: {addr} is not listed in {services:?}; this applies once it is");
            }
        }
    };
    match control {
        Control::Member(op) => {
            let (addr, set) = match &op {
                MembersOp::Cordon { addr } => (addr, Some(MemberControl::Cordon)),
                MembersOp::Drain { addr } => (addr, Some(MemberControl::Drain)),
                MembersOp::Uncordon { addr } => (addr, None),
            };
            checked_addr(addr)?;
            let field = format!("{MEMBER_PREFIX}{addr}");
            match set {
                Some(c) => {
                    store
                        .set_control(&field, &c.encode(now))
                        .await
                        .with_context(failed)?;
                    note_member(addr).await;
                    match c {
                        MemberControl::Cordon => {
                            println!("cordoned {addr}: it gets no new units and keeps its own")
                        }
                        MemberControl::Drain => println!(
                            "draining {addr}: its units move away through the handoff; it stays cordoned until uncordon"
                        ),
                    }
                }
                None => {
                    let had = store.unset_control(&field).await.with_context(failed)?;
                    if had {
                        println!("uncordoned {addr}: it gets units again");
                    } else {
                        println!("{addr} was neither cordoned nor drained");
                    }
                }
            }
        }
        Control::Pin { unit, addr } => {
            checked_unit(&unit)?;
            checked_addr(&addr)?;
            store
                .set_control(&format!("{PIN_PREFIX}{unit}"), &addr)
                .await
                .with_context(failed)?;
            if !listed(store, &[units_key.to_string()], &unit).await {
                println!("note: {unit} is not in {units_key:?}; this applies once it is");
            }
            note_member(&addr).await;
            println!(
                "pinned {unit} to {addr}: it goes there while {addr} is live, and is placed as usual otherwise"
            );
        }
        Control::Unpin { unit } => {
            checked_unit(&unit)?;
            let had = store
                .unset_control(&format!("{PIN_PREFIX}{unit}"))
                .await
                .with_context(failed)?;
            println!("{}", if had { "unpinned" } else { "not pinned" });
        }
        Control::Pause => {
            store
                .set_control(PAUSE_FIELD, &now.to_string())
                .await
                .with_context(failed)?;
            println!(
                "paused: no voluntary moves (joins, weights, costs, balance) until resume; failures and drains are still handled"
            );
        }
        Control::Resume => {
            let had = store
                .unset_control(PAUSE_FIELD)
                .await
                .with_context(failed)?;
            println!("{}", if had { "resumed" } else { "not paused" });
        }
    }
    Ok(())
}
