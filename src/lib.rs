//! distributor: splits a changing list of work units among live workers, with no
//! gaps and no overlaps, deterministically; a drop-in replacement for
//! scientificideas/distributor.
//!
//! ```text
//!  pure core                  edges (IO)                 processes
//!  ─────────                  ──────────                 ─────────
//!  ring      assignment       store   Redis + Lua        coordinator  lease state machine,
//!  table     matching table   pinger  gRPC ping               holder cycle, census
//!  inputs    validation                                  member       worker-side library
//!  liveness  ping history
//!  lease     lease timing
//!  census    interval counter
//!  keys      key names
//!  config    settings
//! ```

pub mod admin;
pub mod census;
pub mod cli;
pub mod config;
pub mod coordinator;
pub mod error;
pub mod http;
pub mod inputs;
pub mod keys;
pub mod lease;
pub mod liveness;
pub mod member;
pub mod metrics;
pub mod pinger;
pub mod ring;
pub mod store;
pub mod suspicion;
pub mod table;
pub mod telemetry;
pub mod tls;

/// Generated from `proto/pinger.proto`: package `proto`, service `GRPCPinger`.
#[allow(clippy::all, missing_docs)]
pub mod proto {
    tonic::include_proto!("proto");
}

pub use config::Config;
pub use coordinator::{Distributor, Role, Status};
pub use error::{MemberError, StartError, StoreError};
pub use member::{Assignment, Member, MemberOptions};
pub use table::MatchingTable;

/// Milliseconds since the Unix epoch, for values shared between processes.
pub fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}
