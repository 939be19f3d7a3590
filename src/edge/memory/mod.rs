//! An in-memory Redis for the deterministic simulation: a [`Keyspace`] with
//! Redis' semantics for the commands the distributor uses, and its Lua
//! scripts step for step in Rust ([`scripts`]), and [`MemoryStore`], a
//! replica's connection to it, which implements the same
//! `edge::store::HoldingStore` as the Redis store, with injected faults.
//!
//! Guarantee: for every script, the same call on the same keyspace gives
//! the same reply and leaves the same keyspace as a real `redis-server`;
//! the differential test (`tests/integration/memory_store.rs`) checks it
//! on random calls, including stored values that do not parse and keys of
//! the wrong type.

pub mod keyspace;
pub mod scripts;
pub mod store;

pub use keyspace::{Data, Keyspace, Pairs, WrongType};
pub use scripts::{Effects, Script, run};
pub use store::{Fault, Faults, MemoryStore, Server};
