//! What a replica reads and writes of the coordination state, as a trait:
//! the lease, the fenced table write and the holder's reads. Two stores
//! implement it: [`crate::edge::redis::Store`] (Redis) and
//! [`crate::edge::memory::MemoryStore`] (in memory, for the deterministic
//! simulation), which runs the same scripts' semantics and reads their
//! replies with the same code (`edge::redis::calls`).
//!
//! Guarantee (of both): every write is fenced by the lease inside the
//! store; an `Err` from a write means its outcome is unknown.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use crate::core::handoff::{RedisConnection, RunId};
use crate::core::keys::Keys;
use crate::core::lease::{Acquisition, Claim, HolderConnection, LeaseGrant, Renewal};
use crate::core::table::MatchingTable;
use crate::edge::redis::{Commit, Committed, CostsRead, Inheritance, ReportsRead, Snapshot};
use crate::error::StoreError;

/// The coordination state as a replica uses it. Futures are `Send`, so a
/// cycle runs as a task of its own.
pub trait HoldingStore: Clone + Send + Sync + 'static {
    /// The key names of this table.
    fn keys(&self) -> &Keys;

    /// Tries to take the lease (see `acquire.lua`).
    fn acquire(
        &self,
        claim: &Claim<'_>,
    ) -> impl Future<Output = Result<Acquisition, StoreError>> + Send;

    /// Extends the lease; `timeout` bounds the whole call.
    fn renew(
        &self,
        grant: &LeaseGrant,
        ttl: Duration,
        timeout: Duration,
    ) -> impl Future<Output = Result<Renewal, StoreError>> + Send;

    /// Gives the lease up; `Ok(false)` if it was not ours.
    fn release(&self, grant: &LeaseGrant) -> impl Future<Output = Result<bool, StoreError>> + Send;

    /// Whether the connection `client` still exists on the server it names.
    fn holder_connection(
        &self,
        client: RedisConnection,
    ) -> impl Future<Output = Result<HolderConnection, StoreError>> + Send;

    /// The fenced, atomic write of the table, liveness, suspects and units
    /// in transit.
    fn commit(
        &self,
        grant: &LeaseGrant,
        c: &Commit<'_>,
    ) -> impl Future<Output = Result<Committed, StoreError>> + Send;

    /// The lists (those not held at their version), the table's state and
    /// the members' reports, every list within the store's limits
    /// (`-max-list-entries`, `-max-list-bytes`).
    fn read_snapshot(
        &self,
        services: &[String],
        units_key: &str,
        held: &HashMap<String, u64>,
        held_reports: Option<u64>,
    ) -> impl Future<Output = Result<Snapshot, StoreError>> + Send;

    /// The whole stored table.
    fn read_table(&self) -> impl Future<Output = Result<MatchingTable, StoreError>> + Send;

    /// The table a confirmed write of this holder left in Redis: a later
    /// whole read of the same rows may take its digest (the same rows have
    /// the same digest) instead of hashing them.
    /// The write also touched the keys the table guard watches, so the next
    /// read of the table's state would read the table whole to verify it:
    /// a store with a guard starts that verification at once, in the
    /// background (while the members take in the write), so that the next
    /// cycle finds it done. Nothing is trusted that was not read: the
    /// verification is the same read, made earlier.
    fn wrote_table(&self, _table: Arc<MatchingTable>) {}

    /// The stored table's digest (when intact), its generation, and the
    /// table when it had to be read to tell.
    fn read_table_state(
        &self,
    ) -> impl Future<Output = Result<(Option<String>, u64, Option<MatchingTable>), StoreError>> + Send;

    /// The members' reports and the weight overrides, unless unchanged
    /// since `held`.
    fn read_reports_since(&self, held: Option<u64>) -> impl Future<Output = ReportsRead> + Send;

    /// The unit costs (`-balance cost`), unless unchanged since `held`.
    fn read_costs_since(&self, held: Option<u64>) -> impl Future<Output = CostsRead> + Send;

    /// The measured loads (`-balance load`), unless unchanged since `held`.
    fn read_loads_since(&self, held: Option<u64>) -> impl Future<Output = CostsRead> + Send;

    /// What a holder reads before it plans (`with_table`: the table too).
    fn read_holding(
        &self,
        with_table: bool,
    ) -> impl Future<Output = Result<Inheritance, StoreError>> + Send;

    /// The highest generation stored (`generation`, `generation_floor`).
    fn read_generation(&self) -> impl Future<Output = Result<u64, StoreError>> + Send;

    /// The run id of the Redis server this replica's lease connection is on,
    /// as it last learnt it (`None`: not known).
    fn server(&self) -> Option<RunId>;

    /// The members' statements for a recovery (`{T}:held`), undecoded.
    fn read_held(&self) -> impl Future<Output = Result<Vec<(String, String)>, StoreError>> + Send;

    /// Writes each (member, report) to `{T}:members` where the member has
    /// none (`HSETNX`): a report Redis lost, written back.
    fn restore_reports(
        &self,
        reports: &[(String, String)],
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Fenced: removes each (list, entry) pair's list entry and report;
    /// returns the pairs that were listed.
    fn forget_many(
        &self,
        grant: &LeaseGrant,
        pairs: &[(String, Vec<u8>)],
    ) -> impl Future<Output = Result<Vec<(String, Vec<u8>)>, StoreError>> + Send;

    /// Fenced: records quarantined units (unit, encoded record) in
    /// `{T}:quarantine`; how many were new to it.
    fn record_quarantine(
        &self,
        grant: &LeaseGrant,
        records: &[(String, String)],
    ) -> impl Future<Output = Result<u64, StoreError>> + Send;
}

impl HoldingStore for crate::edge::redis::Store {
    fn keys(&self) -> &Keys {
        crate::edge::redis::Store::keys(self)
    }

    fn acquire(
        &self,
        claim: &Claim<'_>,
    ) -> impl Future<Output = Result<Acquisition, StoreError>> + Send {
        crate::edge::redis::Store::acquire(self, claim)
    }

    fn renew(
        &self,
        grant: &LeaseGrant,
        ttl: Duration,
        timeout: Duration,
    ) -> impl Future<Output = Result<Renewal, StoreError>> + Send {
        crate::edge::redis::Store::renew(self, grant, ttl, timeout)
    }

    fn release(&self, grant: &LeaseGrant) -> impl Future<Output = Result<bool, StoreError>> + Send {
        crate::edge::redis::Store::release(self, grant)
    }

    fn holder_connection(
        &self,
        client: RedisConnection,
    ) -> impl Future<Output = Result<HolderConnection, StoreError>> + Send {
        crate::edge::redis::Store::holder_connection(self, client)
    }

    fn commit(
        &self,
        grant: &LeaseGrant,
        c: &Commit<'_>,
    ) -> impl Future<Output = Result<Committed, StoreError>> + Send {
        crate::edge::redis::Store::commit(self, grant, c)
    }

    fn read_snapshot(
        &self,
        services: &[String],
        units_key: &str,
        held: &HashMap<String, u64>,
        held_reports: Option<u64>,
    ) -> impl Future<Output = Result<Snapshot, StoreError>> + Send {
        crate::edge::redis::Store::read_snapshot(self, services, units_key, held, held_reports)
    }

    fn read_table(&self) -> impl Future<Output = Result<MatchingTable, StoreError>> + Send {
        crate::edge::redis::Store::read_table(self)
    }

    fn wrote_table(&self, table: Arc<MatchingTable>) {
        crate::edge::redis::Store::wrote_table(self, table)
    }

    fn read_table_state(
        &self,
    ) -> impl Future<Output = Result<(Option<String>, u64, Option<MatchingTable>), StoreError>> + Send
    {
        crate::edge::redis::Store::read_table_state(self)
    }

    fn read_reports_since(&self, held: Option<u64>) -> impl Future<Output = ReportsRead> + Send {
        crate::edge::redis::Store::read_reports_since(self, held)
    }

    fn read_costs_since(&self, held: Option<u64>) -> impl Future<Output = CostsRead> + Send {
        crate::edge::redis::Store::read_costs_since(self, held)
    }

    fn read_loads_since(&self, held: Option<u64>) -> impl Future<Output = CostsRead> + Send {
        crate::edge::redis::Store::read_loads_since(self, held)
    }

    fn read_holding(
        &self,
        with_table: bool,
    ) -> impl Future<Output = Result<Inheritance, StoreError>> + Send {
        crate::edge::redis::Store::read_holding(self, with_table)
    }

    fn read_generation(&self) -> impl Future<Output = Result<u64, StoreError>> + Send {
        crate::edge::redis::Store::read_generation(self)
    }

    fn server(&self) -> Option<RunId> {
        crate::edge::redis::Store::server(self)
    }

    fn read_held(&self) -> impl Future<Output = Result<Vec<(String, String)>, StoreError>> + Send {
        crate::edge::redis::Store::read_held(self)
    }

    fn restore_reports(
        &self,
        reports: &[(String, String)],
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        crate::edge::redis::Store::restore_reports(self, reports)
    }

    fn forget_many(
        &self,
        grant: &LeaseGrant,
        pairs: &[(String, Vec<u8>)],
    ) -> impl Future<Output = Result<Vec<(String, Vec<u8>)>, StoreError>> + Send {
        crate::edge::redis::Store::forget_many(self, grant, pairs)
    }

    fn record_quarantine(
        &self,
        grant: &LeaseGrant,
        records: &[(String, String)],
    ) -> impl Future<Output = Result<u64, StoreError>> + Send {
        crate::edge::redis::Store::record_quarantine(self, grant, records)
    }
}
