//! All Redis access, behind a small API: [`Store`], its constructor and the
//! types it takes and returns. The work is split by layer:
//!
//! ```text
//!  conn.rs     connections (lease, bulk), bounded calls, pipelines per slot,
//!              WRONGTYPE classification, WAIT for replicas
//!  reply.rs    decoding replies
//!  scripts.rs  the Lua scripts (scripts/*.lua), as one Functions library
//!              too, and their refusals
//!  invoke.rs   calling a script: FCALL of the library, else EVALSHA
//!  lease.rs    acquire, renew, release
//!  snapshot.rs the holder's cycle reads: lists (sized, guarded), table state,
//!              reports
//!  table.rs    commit, table reads, what a holder inherits
//!  guard.rs    key guards: was the table, or a list, touched since it was read?
//!  lists.rs    registration, operator list edits and reads, fenced forgets
//!  member.rs   a member's row read, its report, its removal, the transit
//!              it is owed
//!  lookups.rs  the operator overview; whether a member's connection is gone
//!  owners.rs   a Lookup's reads: the table with its transit, or the rows a
//!              change wrote, in one transaction; the generation alone
//!  census.rs   the census step
//!  costs.rs    the unit costs: the holder's guarded read, operator edits
//!  quarantine.rs  quarantined units: the holder's fenced record, reads, release
//!  pubsub.rs   notifications, on their own connection
//! ```
//!
//! Guarantees:
//! - the matching table is only ever written by `commit.lua`, which checks the
//!   lease token and the fencing epoch inside Redis and writes atomically (the
//!   rows that changed, only under the digest and row count the plan read and
//!   onto rows as it read them, or the whole hash): a stale holder's write is
//!   rejected by Redis itself, and readers never see a half-written table;
//! - every call is bounded by a timeout and returns a classified [`StoreError`];
//!   nothing here retries on its own, so the caller's state machine decides;
//! - a cycle's reads are pipelined: one round trip sizes the lists, one reads
//!   them (beside the table's state), whatever the number of groups;
//! - a list is read again only when its guard cannot tell that nobody touched
//!   it since it was last read (see `guard.rs`): an idle cycle transfers no
//!   list, and any change to a list is read by the next cycle.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use crate::core::delta::TableDelta;
use crate::core::handoff::RedisConnection;
use crate::core::keys::Keys;
pub use crate::core::lease::{
    Acquisition, Claim, HolderConnection, HolderRecord, LeaseGrant, LostLease, Renewal,
};
use crate::core::liveness::HealthChanges;
use crate::core::suspicion::{Suspect, SuspectChanges};
use crate::core::table::MatchingTable;
use crate::error::StoreError;
pub use costs::{CostsRead, DecodedCosts};
pub use history::History;

pub mod calls;
mod census;
mod conn;
mod controls;
mod costs;
mod guard;
mod history;
mod invoke;
mod lease;
mod lists;
mod lookups;
mod member;
mod owners;
mod pubsub;
mod quarantine;
mod reply;
pub mod scripts;
mod sentinel;
mod sizes;
mod snapshot;
mod table;
pub mod url;
mod weights;

use conn::{Conn, Dialer, Links};
pub use member::RowRead;
pub use owners::OwnersRead;
use reply::{bytes_list, int, redis_err, refused_commands, reply_err, text, text_pairs};
pub use scripts::MAX_COUNT;
use scripts::{Scripts, checked, stored_count};
pub use sentinel::SentinelOptions;
use sentinel::{Node, Sentinels};

/// Bound of a read that may carry whole lists (see
/// [`Timing::bulk_timeout`](crate::core::timing::Timing::bulk_timeout)).
pub const BULK_TIMEOUT: Duration = crate::core::timing::Timing::DEFAULT.bulk_timeout;

/// A name for this replica in Redis (lease holder, census report) when none
/// is configured: `<hostname>-<pid>-<8 hex digits>`. The random part, from a
/// v4 UUID, keeps two replicas apart that share a hostname and a pid (host
/// networking, each process pid 1 in its container).
pub fn default_replica_id() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "replica".into());
    let random = uuid::Uuid::new_v4().simple().to_string();
    format!("{host}-{}-{}", std::process::id(), &random[..8])
}

/// How to reach Redis: one node, or a Redis Cluster through seed nodes.
#[derive(Clone, PartialEq, Eq, Default)]
pub struct RedisOptions {
    /// One URL, or several seed nodes (which means cluster mode).
    pub urls: Vec<String>,
    /// Cluster mode even with one seed node.
    pub cluster: bool,
    pub tls: crate::edge::tls::TlsFiles,
    /// Replicas that must acknowledge lease and table writes before they count.
    pub wait: Option<WaitFor>,
    /// Redis Sentinel: `urls` name the sentinels, asked for this master.
    pub sentinel: Option<SentinelOptions>,
}

/// `WAIT replicas timeout` after every lease acquisition, renewal and table
/// write: with Redis replication, a write not yet on a replica can be lost
/// with a failed-over master, and a holder must not act on a lease the new
/// master does not have.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WaitFor {
    pub replicas: u32,
    pub timeout: Duration,
}

impl std::fmt::Debug for RedisOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisOptions")
            .field("urls", &url::display_urls(&self.urls.join(",")))
            .field("cluster", &self.cluster)
            .field("tls", &self.tls)
            .field("wait", &self.wait)
            .field("sentinel", &self.sentinel)
            .finish()
    }
}

impl RedisOptions {
    /// From a URL or a comma-separated list of node URLs.
    pub fn from_urls(urls: &str) -> RedisOptions {
        RedisOptions {
            urls: urls
                .split(',')
                .map(str::trim)
                .filter(|u| !u.is_empty())
                .map(str::to_string)
                .collect(),
            ..RedisOptions::default()
        }
    }

    /// Several URLs mean a cluster's seed nodes, unless they are sentinels.
    pub fn is_cluster(&self) -> bool {
        self.sentinel.is_none() && (self.cluster || self.urls.len() > 1)
    }
}

/// Whether Redis lets this store run an optional command, as last learned.
/// After a refusal it is not asked again for
/// [`Timing::client_refused_backoff`](crate::core::timing::Timing): each
/// refusal is an entry in Redis' `ACL LOG` (and a log line here), while an
/// ACL changed since is seen within that time, without a restart.
#[derive(Debug, Default)]
pub(super) struct Optional(std::sync::Mutex<Option<std::time::Instant>>);

impl Optional {
    pub(super) fn allowed(&self) -> bool {
        self.allowed_at(crate::edge::clock::now())
    }

    pub(super) fn refused(&self) {
        self.refused_at(crate::edge::clock::now());
    }

    fn allowed_at(&self, now: std::time::Instant) -> bool {
        let backoff = crate::core::timing::Timing::DEFAULT.client_refused_backoff;
        self.0
            .lock()
            .expect("optional command lock")
            .is_none_or(|at| now.saturating_duration_since(at) >= backoff)
    }

    fn refused_at(&self, now: std::time::Instant) {
        *self.0.lock().expect("optional command lock") = Some(now);
    }
}

/// A handle to one distribution's keys in Redis. Cheap to clone.
#[derive(Clone)]
pub struct Store {
    client: Node,
    links: Arc<Links>,
    keys: Arc<Keys>,
    scripts: Arc<Scripts>,
    op_timeout: Duration,
    wait: Option<WaitFor>,
    /// Whether the table is known untouched since verified (holder cycles).
    guard: Arc<tokio::sync::Mutex<guard::TableGuard>>,
    /// Whether each list is known untouched since read (holder cycles).
    lists: Arc<tokio::sync::Mutex<guard::ListGuards>>,
    /// Whether the members' reports and the weight overrides are known
    /// untouched since read (holder cycles).
    reports: Arc<tokio::sync::Mutex<guard::Versioned>>,
    /// Whether the unit costs are known untouched since read (holder
    /// cycles in `-balance cost`).
    costs: Arc<tokio::sync::Mutex<guard::Versioned>>,
    /// The same for the measured loads (`-balance load`).
    loads: Arc<tokio::sync::Mutex<guard::Versioned>>,
    /// Whether Redis lets us ask `LLEN` and `MEMORY USAGE` (off after a NOPERM).
    list_sizing: Arc<std::sync::atomic::AtomicBool>,
    /// Whether Redis lets us ask `HLEN` (off after a NOPERM).
    hash_sizing: Arc<std::sync::atomic::AtomicBool>,
    /// The bounds on every list and hash a holder reads whole (`sizes.rs`).
    limits: ListLimits,
    memory_usage: Arc<std::sync::atomic::AtomicBool>,
    /// Whether Redis lets a member ask `CLIENT ID` with its row reads.
    row_client: Arc<Optional>,
    /// Whether Redis lets us ask `INFO server` for its run id, which names
    /// the server of a member's connection.
    server_info: Arc<Optional>,
    /// Whether Redis runs the scripts' library (`FCALL`; see `invoke.rs`).
    functions: Arc<Optional>,
    /// The Redis client id of the lease connection, as last learned on it.
    lease_client: Arc<std::sync::Mutex<LeaseClient>>,
    /// The run id of the server the lease connection was last found on
    /// (kept across a reconnect until the next `INFO` says otherwise).
    server_seen: Arc<std::sync::Mutex<Option<crate::core::handoff::RunId>>>,
    /// A table whose digest this replica knows: what its last confirmed
    /// write left in Redis, or, as a standby, the stored table it verified.
    /// A table read whole with the same rows takes its digest (see
    /// `snapshot.rs`).
    known_table: Arc<std::sync::Mutex<Option<Arc<MatchingTable>>>>,
}

/// What this replica knows of its lease connection's Redis client id, which
/// a holder records beside the lease so that standbys can take over as soon as
/// that connection closes (see `core::lease`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeaseClient {
    /// Not asked yet.
    Unknown,
    /// The id `CLIENT ID` last returned on the lease connection, with the
    /// server's run id (`INFO server`, asked in the same pipeline) where
    /// Redis lets us ask.
    Id(RedisConnection),
    /// Redis refused `CLIENT ID` (why, and when): no fast takeover. Asked
    /// again only after `Timing::client_refused_backoff`.
    Refused { why: String, at: std::time::Instant },
}

/// Bounds on every list, and every hash, a holder reads whole
/// (`-max-list-entries`, `-max-list-bytes`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ListLimits {
    pub entries: usize,
    /// Bytes of Redis memory (`MEMORY USAGE`), where Redis permits asking.
    pub bytes: u64,
}

impl ListLimits {
    /// The settings' defaults.
    pub const DEFAULT: ListLimits = ListLimits {
        entries: 2_000_000,
        bytes: 64 << 20,
    };
}

/// One list as a holder cycle read it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListRead {
    pub key: String,
    /// Names the content: equal versions, equal content. A list read again
    /// gets a new version, even when its content is the same.
    pub version: u64,
    /// The entries (within the limits), or `None`: unchanged since
    /// `version`, which the caller said it holds.
    pub entries: Option<Vec<Vec<u8>>>,
}

/// What a holder reads at the start of a cycle.
#[derive(Debug)]
pub struct Snapshot {
    /// Each services list, in the order asked for.
    pub groups: Vec<ListRead>,
    pub units: ListRead,
    /// Digest of the stored table, as its writer recorded it.
    pub stored_digest: Option<String>,
    pub stored_generation: u64,
    /// The stored table, when this read had to verify it (after a write, an
    /// edit or a reconnect): what is granted now, whatever wrote it.
    pub stored_table: Option<MatchingTable>,
    /// The members' own reports and the operator's weight overrides.
    pub reports: ReportsRead,
}

/// The members' reports (`{T}:members`) and the operator's weight overrides
/// (`{T}:weights`) as a holder cycle read them ([`Store::read_reports_since`]).
#[derive(Debug)]
pub struct ReportsRead {
    /// Names the content of both hashes while it is known (equal versions,
    /// equal content); `None` when it is not (a read failed, a key of the
    /// wrong type): the next cycle reads both again.
    pub version: Option<u64>,
    /// The hashes as [`Store::read_reports`] returns them, or `None`:
    /// unchanged since `version`, which the caller said it holds.
    pub content: Option<ReportsContent>,
}

/// The members' reports and the operator's hashes, read in one round trip
/// ([`Store::read_reports`]).
#[derive(Debug)]
pub struct ReportsContent {
    pub reports: Reports,
    /// `{T}:weights`; `None` when the round trip itself failed (`reports`
    /// holds its error): the holder keeps what it knew.
    pub overrides: Option<Reports>,
    /// `{T}:controls`, likewise.
    pub controls: Option<Reports>,
    /// `{T}:quarantine`, likewise.
    pub quarantine: Option<Reports>,
}

impl ReportsContent {
    /// The round trip failed: nothing is known.
    pub fn failed(e: StoreError) -> ReportsContent {
        ReportsContent {
            reports: Err(e),
            overrides: None,
            controls: None,
            quarantine: None,
        }
    }
}

/// Members' reports as read: `member → value`, undecoded (lossy UTF-8), or
/// why the hash could not be read at all (a key of the wrong type). Written
/// by members, so never trusted: the cycle decodes and reports bad entries.
pub type Reports = Result<Vec<(String, String)>, StoreError>;

/// What a holder writes at the end of a cycle.
#[derive(Debug, Clone)]
pub struct Commit<'a> {
    /// The new table, or `None` to write only liveness changes.
    pub table: Option<&'a MatchingTable>,
    /// The new table's rows that differ from the table Redis holds, as the
    /// plan read it (its digest verified): the write then sends only these,
    /// and Redis refuses it ([`Committed::Outdated`]) unless it still holds
    /// that digest and the rows replaced. `None`: the table is replaced
    /// whole. Ignored without `table`.
    pub delta: Option<&'a TableDelta<'a>>,
    pub health: &'a HealthChanges,
    /// Mass-failure suspects to record or clear (`{T}:suspects`).
    pub suspects: &'a SuspectChanges,
    /// Units in transit, replacing `{T}:transit` whole (`None`: unchanged).
    /// A value whose `revoked_at` is `0` gets this write's generation.
    pub transit: Option<&'a [(String, String)]>,
    pub generation_floor: u64,
    pub holder_id: &'a str,
    pub now_ms: u64,
    /// `-assignment`, stored in `{T}:meta` with a table write.
    pub assignment: &'a str,
    /// The last solve that changed the table, as [`crate::core::table::Moves`]
    /// encodes it, stored with a table write (`None`: the stored one stays).
    pub last_change: Option<&'a str>,
    /// `{T}:meta`'s `version` the plan is based on: the write is refused
    /// ([`Committed::Outdated`]) if Redis holds another (`None`: no check).
    pub expected_version: Option<u64>,
    /// What this table write changed, as `{T}:changes` fields
    /// ([`crate::core::history::ChangeRecord::fields`]); ignored without a
    /// table.
    pub history: Option<&'a [(&'static str, String)]>,
    /// The run id of the server the holder writes on, kept in `{T}:meta`'s
    /// `server` (`None`: not known; the field is removed).
    pub server: Option<crate::core::handoff::RunId>,
    /// How many members' reports the holder knows, kept in `{T}:meta`'s
    /// `reports`: a new holder that reads fewer knows some were lost.
    pub reports: usize,
    /// The longest deadline of the reports the holder knows, kept in
    /// `{T}:meta`'s `deadline_max` (zero: none).
    pub deadline_max: std::time::Duration,
}

impl Commit<'_> {
    /// What the write sends of the table, if any: `rows` (the delta) or
    /// `whole`, the rows sent and their bytes (member ids and units).
    pub fn table_sent(&self) -> Option<(&'static str, usize, usize)> {
        let next = self.table?;
        Some(match self.delta {
            Some(d) => ("rows", d.rows(), d.bytes()),
            None => ("whole", next.len(), next.bytes()),
        })
    }
}

/// What a holder reads before it plans ([`Store::read_holding`]): on a new
/// holding, what the last holder left; after a write of unknown outcome,
/// Redis' state again.
#[derive(Debug, Clone, Default)]
pub struct Inheritance {
    /// The matching table as stored, when it was asked for.
    pub table: Option<MatchingTable>,
    /// `{T}:meta`'s `version`: how many writes the holders made (0: none).
    pub version: u64,
    /// member → persisted liveness, undecoded.
    pub liveness: HashMap<String, String>,
    pub suspects: std::collections::BTreeMap<String, Suspect>,
    pub unreadable_suspects: Vec<(String, String)>,
    pub generation: u64,
    /// `{T}:meta`'s `generation` alone (the stored table's; 0: none).
    pub table_generation: u64,
    /// `{T}:meta`'s `server`: the run id of the Redis server the last
    /// write went to (`None`: not recorded, or not a run id).
    pub server: Option<crate::core::handoff::RunId>,
    /// `{T}:meta`'s `transit`: how many entries the last write of the
    /// units in transit left (`None`: not recorded).
    pub transit_recorded: Option<u64>,
    /// `{T}:meta`'s `reports`: how many members' reports the last writer
    /// knew (`None`: not recorded).
    pub reports_recorded: Option<u64>,
    /// `{T}:meta`'s `deadline_max`: the longest deadline, in ms, of the
    /// reports the last writer knew (`None`: not recorded, or zero).
    pub deadline_recorded: Option<u64>,
    /// `{T}:transit`, undecoded: units a handoff is moving.
    pub transit: Vec<(String, String)>,
}

/// The outcome of a fenced write. An error (`Err`) means the outcome is
/// unknown: the write may or may not have been applied.
#[derive(Debug)]
pub enum Committed {
    /// Written; `generation` is the new table generation, if the table was
    /// written, and `version` the new `{T}:meta` version.
    Written {
        generation: Option<u64>,
        version: u64,
    },
    /// Rejected by Redis before it wrote anything: the lease (`"lease"`) or
    /// epoch (`"epoch"`) moved on.
    Fenced { reason: String },
    /// Applied, but fewer Redis replicas than `-redis-wait-replicas`
    /// acknowledged it in time: a failover may still lose it.
    Unconfirmed {
        generation: Option<u64>,
        error: StoreError,
    },
    /// Refused before it wrote anything: `{T}:meta`'s version is not the
    /// expected one (something wrote since the plan's state was read, such
    /// as a write of this holder that timed out and landed later), or a
    /// rows write's base is not what Redis holds (`differs` names the key
    /// and field: an edit).
    Outdated {
        version: u64,
        differs: Option<String>,
    },
}

impl PartialEq for Committed {
    /// Errors compare by their text (a Redis error is not comparable).
    fn eq(&self, other: &Committed) -> bool {
        match (self, other) {
            (
                Committed::Written {
                    generation: a,
                    version: v,
                },
                Committed::Written {
                    generation: b,
                    version: w,
                },
            ) => a == b && v == w,
            (
                Committed::Outdated {
                    version: a,
                    differs: x,
                },
                Committed::Outdated {
                    version: b,
                    differs: y,
                },
            ) => a == b && x == y,
            (Committed::Fenced { reason: a }, Committed::Fenced { reason: b }) => a == b,
            (
                Committed::Unconfirmed {
                    generation: a,
                    error: e,
                },
                Committed::Unconfirmed {
                    generation: b,
                    error: f,
                },
            ) => a == b && e.to_string() == f.to_string(),
            _ => false,
        }
    }
}

/// A message from one of the notification channels.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Notification {
    /// `(channel, payload)`.
    Message(String, String),
    /// The subscription was (re-)established: messages may have been missed.
    Subscribed,
}

impl Store {
    /// Creates a store without connecting: the first call connects, and a Redis
    /// that is down at start is just a retryable error, never a crash.
    pub fn open(url: &str, table_key: &str, op_timeout: Duration) -> Result<Store, StoreError> {
        Store::open_tls(
            url,
            table_key,
            op_timeout,
            &crate::edge::tls::TlsFiles::default(),
        )
    }

    /// The same, with a custom CA and/or client certificate for `rediss://`.
    /// A comma-separated list of URLs means a Redis Cluster.
    pub fn open_tls(
        url: &str,
        table_key: &str,
        op_timeout: Duration,
        tls: &crate::edge::tls::TlsFiles,
    ) -> Result<Store, StoreError> {
        let opts = RedisOptions {
            tls: tls.clone(),
            ..RedisOptions::from_urls(url)
        };
        Store::connect(&opts, table_key, op_timeout)
    }

    /// Creates a store without connecting: the first call connects.
    pub fn connect(
        opts: &RedisOptions,
        table_key: &str,
        op_timeout: Duration,
    ) -> Result<Store, StoreError> {
        let first = opts
            .urls
            .first()
            .map(String::as_str)
            .unwrap_or("redis://127.0.0.1:6379");
        // Pub/sub goes through one node: classic PUBLISH reaches every node of a
        // cluster, so any node's subscribers see it.
        let node = match &opts.sentinel {
            Some(s) => Node::Sentinel(Arc::new(
                Sentinels::new(&opts.urls, s, &opts.tls).map_err(redis_err("open"))?,
            )),
            None => Node::Fixed(Arc::new(
                crate::edge::tls::redis_client(first, &opts.tls).map_err(redis_err("open"))?,
            )),
        };
        Store::assemble(opts, node, table_key, op_timeout)
    }

    /// A store on an application's own client (one node: its address,
    /// credentials, TLS and protocol as the application set them up). The
    /// store opens its own connections from it, as [`Store::connect`] does:
    /// its reads must be on a connection it controls (the member reports
    /// that connection's id), and a timed-out call replaces its connections.
    pub fn with_client(
        client: redis::Client,
        table_key: &str,
        op_timeout: Duration,
    ) -> Result<Store, StoreError> {
        Store::assemble(
            &RedisOptions::default(),
            Node::Fixed(Arc::new(client)),
            table_key,
            op_timeout,
        )
    }

    fn assemble(
        opts: &RedisOptions,
        client: Node,
        table_key: &str,
        op_timeout: Duration,
    ) -> Result<Store, StoreError> {
        let links = Links::new(Dialer::new(opts, &client, op_timeout)?)?;
        let keys = Keys::new(table_key);
        let guard = guard::TableGuard::table(client.clone(), &keys.table, &keys.meta, op_timeout);
        let lists = guard::ListGuards::new(client.clone(), op_timeout);
        let reports = guard::Versioned::new(guard::KeyGuard::new(
            client.clone(),
            vec![
                keys.members.clone(),
                keys.weights.clone(),
                keys.controls.clone(),
                keys.quarantine.clone(),
            ],
            "member reports, weight overrides, controls and quarantined units are read every cycle instead".into(),
            op_timeout,
        ));
        let costs = guard::Versioned::new(guard::KeyGuard::new(
            client.clone(),
            vec![keys.costs.clone()],
            "unit costs are read every cycle instead".into(),
            op_timeout,
        ));
        let loads = guard::Versioned::new(guard::KeyGuard::new(
            client.clone(),
            vec![keys.loads.clone()],
            "measured loads are read every cycle instead".into(),
            op_timeout,
        ));
        Ok(Store {
            reports: Arc::new(tokio::sync::Mutex::new(reports)),
            costs: Arc::new(tokio::sync::Mutex::new(costs)),
            loads: Arc::new(tokio::sync::Mutex::new(loads)),
            lists: Arc::new(tokio::sync::Mutex::new(lists)),
            client,
            links: Arc::new(links),
            keys: Arc::new(keys),
            guard: Arc::new(tokio::sync::Mutex::new(guard)),
            wait: opts.wait,
            list_sizing: Arc::new(std::sync::atomic::AtomicBool::new(true)),
            hash_sizing: Arc::new(std::sync::atomic::AtomicBool::new(true)),
            limits: ListLimits::DEFAULT,
            memory_usage: Arc::new(std::sync::atomic::AtomicBool::new(true)),
            row_client: Arc::default(),
            server_info: Arc::default(),
            functions: Arc::default(),
            lease_client: Arc::new(std::sync::Mutex::new(LeaseClient::Unknown)),
            server_seen: Arc::default(),
            known_table: Arc::default(),
            scripts: Arc::new(Scripts::new()),
            op_timeout,
        })
    }

    pub fn keys(&self) -> &Keys {
        &self.keys
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_replica_ids_name_the_host_and_pid_and_differ() {
        let (a, b) = (default_replica_id(), default_replica_id());
        assert_ne!(a, b);
        let suffix = format!("-{}-", std::process::id());
        assert!(a.contains(&suffix), "{a}");
        let random = a.rsplit('-').next().unwrap();
        assert_eq!(random.len(), 8);
        assert!(random.bytes().all(|c| c.is_ascii_hexdigit()), "{a}");
    }
}

#[cfg(test)]
mod optional_tests {
    use super::Optional;
    use crate::core::timing::Timing;

    #[test]
    fn a_refused_command_is_asked_again_after_the_back_off() {
        let t = crate::edge::clock::now();
        let backoff = Timing::DEFAULT.client_refused_backoff;
        let o = Optional::default();
        assert!(o.allowed_at(t), "asked until refused");
        o.refused_at(t);
        assert!(!o.allowed_at(t));
        assert!(!o.allowed_at(t + backoff - std::time::Duration::from_millis(1)));
        assert!(o.allowed_at(t + backoff), "an ACL fixed meanwhile is seen");
    }
}
