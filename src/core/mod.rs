//! The pure core: everything the distributor decides, as plain functions and
//! data. No module here performs IO, reads a clock or imports an IO type;
//! time comes in as arguments. Each is tested in memory, most with property
//! tests.

pub mod balance;
pub mod census;
pub mod controls;
pub mod costs;
pub mod count;
pub mod delta;
pub mod duration;
pub mod handoff;
pub mod held;
pub mod history;
pub mod inputs;
pub mod keys;
pub mod lease;
pub mod liveness;
pub mod load;
pub mod owners;
pub mod ownership;
pub mod quarantine;
pub mod ring;
pub mod row;
pub mod status;
pub mod sticky;
pub mod suspicion;
pub mod table;
pub mod timing;
pub mod whatif;
