//! distributor: splits a changing list of work units among live workers, with no
//! gaps and no overlaps, deterministically; a drop-in replacement for
//! scientificideas/distributor.
//!
//! The folders are the architecture:
//!
//! ```text
//!  core/          pure: no IO, no clock reads; tested in memory
//!    ring         the assignment          liveness   ping history
//!    table        matching table, digest  lease      lease timing
//!    inputs       validation of lists     census     interval counter
//!    suspicion    mass-failure guard      keys       Redis key names
//!    status       what a replica knows    ownership  a member's holds
//!    owners       a lookup's copy of who owns each unit
//!    whatif       a change's table, solved as the holder solves it
//!  coordinator/   one replica: the lease state machine and its executor
//!  edge/          IO at the edges
//!    redis/       connections, bounded calls, Lua scripts, pub/sub
//!    grpc/        the holder's pinger and the members' responder
//!    tls          TLS files for both
//!  ops/           http (/metrics, /healthz, ...), metrics, telemetry
//!  report/        what operators are shown: one model, its text rendering
//!  cli/           flags and operator commands
//!  member/        the worker-side library
//!  config         the settings table: flags, environment, validation
//! ```
//!
//! Dependencies point one way, with no cycle (checked by `layering.rs`):
//! `core` imports nothing of the others, no IO type and no clock (time comes
//! in as values, from `edge::clock`); the edges import `core`; `report`
//! imports `core`;
//! `config` imports `core` and the edges; `ops` imports `core`, the edges and
//! `report`; the coordinator imports `core`, the edges, `config` and `ops`;
//! `cli` and `member` sit on top.
//!
//! Cargo features: `daemon` (the default) is everything; a worker that only
//! needs [`Member`] depends on `default-features = false, features =
//! ["member"]`, which builds the core and the two edges without the
//! coordinator, the operations server, the CLI or the OTLP exporter.

#[cfg(feature = "daemon")]
pub mod cli;
#[cfg(feature = "daemon")]
pub mod config;
#[cfg(feature = "daemon")]
pub mod coordinator;
pub mod core;
#[cfg(test)]
mod doc_links;
#[cfg(feature = "member")]
pub mod edge;
#[cfg(feature = "member")]
pub mod error;
#[cfg(all(test, feature = "daemon"))]
mod layering;
#[cfg(feature = "member")]
pub mod member;
#[cfg(feature = "daemon")]
pub mod ops;
#[cfg(feature = "daemon")]
pub mod report;

/// Generated from `proto/pinger.proto`: package `proto`, service `GRPCPinger`.
#[cfg(feature = "member")]
#[allow(clippy::all, missing_docs)]
pub mod proto {
    tonic::include_proto!("proto");
}

#[cfg(feature = "daemon")]
pub use config::Config;
#[cfg(feature = "daemon")]
pub use coordinator::Distributor;
pub use core::status::{Role, Status, Takeover};
pub use core::table::MatchingTable;
#[cfg(feature = "member")]
pub use error::{MemberError, StartError, StoreError};
#[cfg(feature = "member")]
pub use member::{
    Assignment, Drained, FencingToken, Handoff, HandoffFuture, Hold, HoldLost, Lookup,
    LookupOptions, Member, MemberBuilder, MemberOptions, MemberServices, Owned, Placement,
    Revocation,
};

/// Milliseconds since the Unix epoch, for values shared between processes.
pub fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}
