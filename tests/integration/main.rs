//! Integration tests: real `redis-server`, real gRPC over loopback, replicas and
//! members in-process. One binary keeps link time down.

// Real processes on real time: the std clock is the right one here
// (`clippy.toml` disallows it in the crate, whose clock tests pause).
#![allow(clippy::disallowed_methods)]

#[path = "../support/mod.rs"]
mod support;

mod bad_input;
mod balance;
mod beats;
mod browser;
mod cli;
mod cluster;
mod compat;
mod controls;
mod dashboard;
mod detection;
mod durability;
mod example_workers;
mod failover;
mod fault_proxy;
mod fencing;
mod functions;
mod handoff;
mod handoff_repro;
mod hardening;
mod history;
mod idle;
mod join_delay;
mod lookup;
mod member_api;
mod member_handoff;
mod memory_store;
mod ownership_stress;
mod plan;
mod process;
mod python_worker;
mod quarantine;
mod security;
mod sentinel;
mod sticky;
mod table;
mod takeover;
mod tls;
mod ui;
mod unknown_outcomes;
mod unknown_outcomes_stress;
