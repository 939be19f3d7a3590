//! All gRPC: the holder's concurrent pinger and the members' ping responder.
//!
//! The RPC is `/proto.GRPCPinger/Ping(google.protobuf.Empty) -> Empty`, exactly as
//! scientificideas/distributor defines it (see `proto/pinger.proto`), so its Go
//! workers keep answering. Members that also serve `/proto.Liveness/Beats`
//! get their pings as beats on one stream (`beats.rs`).
//!
//! ```text
//!  pinger.rs     the holder's side (daemon only): concurrent pings, channel cache
//!  failure.rs    why a ping failed, classified from tonic's status (daemon only)
//!  beats.rs      the holder's side of a member's beat stream (daemon only)
//!  closes.rs     the pinger's connector: names a member the moment its connection ends
//!  responder.rs  the member's side: the ping and beat services
//!  trace.rs      trace context across the RPC (`traceparent`)
//!  routes.rs     the member's services on one server, without an HTTP router
//! ```

// The pinger is the holder's side: only the daemon pings.
#[cfg(feature = "daemon")]
mod beats;
#[cfg(feature = "daemon")]
mod closes;
#[cfg(feature = "daemon")]
mod failure;
#[cfg(feature = "daemon")]
mod pinger;
mod responder;
mod routes;
pub mod trace;

pub use responder::PingGate;

#[cfg(feature = "daemon")]
pub use closes::{Closed, Closes};
#[cfg(feature = "daemon")]
pub use failure::PingFailure;
#[cfg(feature = "daemon")]
pub use pinger::{FIRST_CONTACT, Keepalive, PingReport, PingSet, PingTask, Pinger};
pub use responder::{PingResponder, beat_service, ping_service};
pub(crate) use routes::{Route, Unimplemented};
