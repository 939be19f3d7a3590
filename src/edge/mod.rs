//! IO at the edges: Redis (connections, bounded calls, Lua scripts, pub/sub)
//! and gRPC (the holder's pinger, the members' responder), with the TLS
//! material both use, and an in-memory Redis for the simulation. Nothing
//! here decides anything: the coordinator does.

pub mod clock;
pub mod grpc;
#[cfg(feature = "daemon")]
pub mod memory;
#[cfg(feature = "daemon")]
pub mod pings;
pub mod redis;
#[cfg(feature = "daemon")]
pub mod store;
pub mod tls;
