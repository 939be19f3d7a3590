//! All Redis access, behind a small API. The Lua scripts sit beside this file.
//!
//! Guarantees:
//! - the matching table is only ever written by `commit.lua`, which checks the
//!   lease token and the fencing epoch inside Redis and replaces the whole hash
//!   atomically: a stale holder's write is rejected by Redis itself, and readers
//!   never see a half-written table;
//! - every call is bounded by a timeout and returns a classified [`StoreError`];
//!   nothing here retries on its own, so the caller's state machine decides;
//! - reads of one cycle are one pipelined round trip.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use redis::Value;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::core::census::CensusReply;
use crate::core::inputs::RawInputs;
use crate::core::keys::Keys;
pub use crate::core::lease::{Acquisition, Claim, LeaseGrant, LostLease, Renewal};
use crate::core::liveness::HealthChanges;
use crate::core::status::Overview;
use crate::core::suspicion::{Suspect, SuspectChanges};
use crate::core::table::MatchingTable;
use crate::error::StoreError;

mod conn;
mod guard;
mod lease;
pub mod scripts;

use conn::{Conn, Dialer, Links};
pub use scripts::MAX_COUNT;
use scripts::{Scripts, checked, stored_count};

/// Default bound of one Redis call.
pub const DEFAULT_OP_TIMEOUT: Duration = Duration::from_secs(2);
/// Bound of a read that may carry whole lists (a million units is ~10 MB).
/// Such reads never hold up the lease: they run on their own connection and,
/// in the holder, in the cycle task.
pub const BULK_TIMEOUT: Duration = Duration::from_secs(10);

/// How to reach Redis: one node, or a Redis Cluster through seed nodes.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RedisOptions {
    /// One URL, or several seed nodes (which means cluster mode).
    pub urls: Vec<String>,
    /// Cluster mode even with one seed node.
    pub cluster: bool,
    pub tls: crate::edge::tls::TlsFiles,
    /// Replicas that must acknowledge lease and table writes before they count.
    pub wait: Option<WaitFor>,
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

    pub fn is_cluster(&self) -> bool {
        self.cluster || self.urls.len() > 1
    }
}

/// A handle to one distribution's keys in Redis. Cheap to clone.
#[derive(Clone)]
pub struct Store {
    client: redis::Client,
    links: Arc<Links>,
    keys: Arc<Keys>,
    scripts: Arc<Scripts>,
    op_timeout: Duration,
    wait: Option<WaitFor>,
    /// Whether the table is known untouched since verified (holder cycles).
    guard: Arc<tokio::sync::Mutex<guard::TableGuard>>,
    /// Whether Redis lets us ask `LLEN` and `MEMORY USAGE` (off after a NOPERM).
    list_sizing: Arc<std::sync::atomic::AtomicBool>,
    memory_usage: Arc<std::sync::atomic::AtomicBool>,
}

/// Bounds on every list a cycle reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ListLimits {
    pub entries: usize,
    /// Bytes of Redis memory (`MEMORY USAGE`), where Redis permits asking.
    pub bytes: u64,
}

/// What a holder reads at the start of a cycle.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    pub raw: RawInputs,
    /// Digest of the stored table, as its writer recorded it.
    pub stored_digest: Option<String>,
    pub stored_generation: u64,
}

/// What a holder writes at the end of a cycle.
#[derive(Debug, Clone)]
pub struct Commit<'a> {
    /// The new table, or `None` to write only liveness changes.
    pub table: Option<&'a MatchingTable>,
    pub health: &'a HealthChanges,
    /// Mass-failure suspects to record or clear (`{T}:suspects`).
    pub suspects: &'a SuspectChanges,
    pub generation_floor: u64,
    pub holder_id: &'a str,
    pub now_ms: u64,
}

/// What a new holder reads from the last one ([`Store::load_holding`]).
#[derive(Debug, Clone, Default)]
pub struct Inheritance {
    /// member → persisted liveness, undecoded.
    pub liveness: HashMap<String, String>,
    pub suspects: std::collections::BTreeMap<String, Suspect>,
    pub unreadable_suspects: Vec<(String, String)>,
    pub generation: u64,
}

/// The outcome of a fenced write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Committed {
    /// Written; `generation` is the new table generation, if the table was written.
    Written { generation: Option<u64> },
    /// Rejected by Redis: the lease (`"lease"`) or epoch (`"epoch"`) moved on.
    Fenced { reason: String },
}

/// A message from one of the notification channels.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Notification {
    /// `(channel, payload)`.
    Message(String, String),
    /// The subscription was (re-)established: messages may have been missed.
    Subscribed,
}

fn redis_err(op: &'static str) -> impl FnOnce(redis::RedisError) -> StoreError {
    move |source| StoreError::Redis { op, source }
}

fn reply_err(op: &'static str, v: &Value) -> StoreError {
    StoreError::Reply {
        op,
        detail: format!("{v:?}"),
    }
}

fn int(v: &Value) -> Option<i64> {
    match v {
        Value::Int(i) => Some(*i),
        Value::BulkString(b) => std::str::from_utf8(b).ok()?.parse().ok(),
        _ => None,
    }
}

fn text(v: &Value) -> Option<String> {
    match v {
        Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
        Value::SimpleString(s) => Some(s.clone()),
        Value::Int(i) => Some(i.to_string()),
        _ => None,
    }
}

fn bytes_list(v: Value) -> Vec<Vec<u8>> {
    match v {
        Value::Array(items) => items
            .into_iter()
            .filter_map(|i| match i {
                Value::BulkString(b) => Some(b),
                _ => None,
            })
            .collect(),
        _ => Vec::new(),
    }
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
        let client = crate::edge::tls::redis_client(first, &opts.tls).map_err(redis_err("open"))?;
        let links = Links::new(Dialer::new(opts, &client, op_timeout)?)?;
        let keys = Keys::new(table_key);
        let guard = guard::TableGuard::new(client.clone(), &keys.table, &keys.meta, op_timeout);
        Ok(Store {
            client,
            links: Arc::new(links),
            keys: Arc::new(keys),
            guard: Arc::new(tokio::sync::Mutex::new(guard)),
            wait: opts.wait,
            list_sizing: Arc::new(std::sync::atomic::AtomicBool::new(true)),
            memory_usage: Arc::new(std::sync::atomic::AtomicBool::new(true)),
            scripts: Arc::new(Scripts::new()),
            op_timeout,
        })
    }

    pub fn keys(&self) -> &Keys {
        &self.keys
    }

    /// Reads every services list, the work units and the stored table's state.
    ///
    /// Two round trips: first every list's length and size (`LLEN`, `MEMORY
    /// USAGE`), so that a list over a limit is refused without being
    /// transferred; then the lists themselves and the table's metadata. A
    /// list over a limit is an error naming it, never a partial read.
    ///
    /// The stored digest is returned only when the table is known intact: the
    /// table guard (see `guard.rs`) says nobody touched it since it was
    /// verified, or a full check verifies it now.
    pub async fn read_snapshot(
        &self,
        services: &[String],
        units_key: &str,
        limits: ListLimits,
    ) -> Result<Snapshot, StoreError> {
        let keys: Vec<&str> = services
            .iter()
            .map(String::as_str)
            .chain([units_key])
            .collect();
        let mut guard = self.guard.lock().await;
        let (known, sizes) = tokio::join!(guard.probe(), self.list_sizes(&keys, limits));
        sizes?;
        // One more than the limit tells, without another round trip, that a
        // list grew past it since it was measured.
        let cmds: Vec<(String, redis::Cmd)> = keys
            .iter()
            .map(|key| {
                (
                    key.to_string(),
                    redis::cmd("LRANGE")
                        .arg(*key)
                        .arg(0)
                        .arg(limits.entries)
                        .to_owned(),
                )
            })
            .collect();
        let content_check = guard.unsupported();
        let (replies, state) = tokio::join!(
            self.pipelined(self.bulk(), "read lists", BULK_TIMEOUT, cmds),
            self.table_state(content_check)
        );
        let replies = match replies {
            Ok(r) => r,
            Err(e) => return Err(self.classify(e, &keys, "list").await),
        };
        let (meta_digest, stored_generation) = state?;
        if replies.len() != keys.len() {
            return Err(StoreError::Reply {
                op: "read lists",
                detail: format!("{} replies", replies.len()),
            });
        }
        let mut lists = Vec::with_capacity(keys.len());
        for (key, reply) in keys.iter().zip(replies) {
            let entries = bytes_list(reply);
            if entries.len() > limits.entries {
                return Err(StoreError::TooLong {
                    key: key.to_string(),
                    what: "entries",
                    limit: limits.entries as u64,
                    setting: "-max-list-entries",
                });
            }
            lists.push((key.to_string(), entries));
        }
        let units = lists.pop().expect("the units list").1;

        let stored_digest = match (known, meta_digest) {
            (_, None) => None,
            (Some(known), Some(meta)) if known == meta => Some(meta),
            (_, Some(meta)) if content_check => Some(meta),
            (_, Some(meta)) => {
                // Unknown since the last check (a write, an edit, a reconnect):
                // verify the content once; the guard is armed from here on.
                let stored = self.read_table().await?;
                if stored.digest() == meta {
                    guard.verified(meta.clone());
                    Some(meta)
                } else {
                    None
                }
            }
        };
        Ok(Snapshot {
            raw: RawInputs {
                groups: lists,
                units_key: units_key.to_string(),
                units,
            },
            stored_digest,
            stored_generation,
        })
    }

    /// `LLEN` and `MEMORY USAGE` of every list, refusing any over a limit.
    async fn list_sizes(&self, keys: &[&str], limits: ListLimits) -> Result<(), StoreError> {
        use std::sync::atomic::Ordering::Relaxed;
        if !self.list_sizing.load(Relaxed) {
            return Ok(());
        }
        let memory = self.memory_usage.load(Relaxed);
        let mut cmds = Vec::new();
        for key in keys {
            cmds.push((key.to_string(), redis::cmd("LLEN").arg(*key).to_owned()));
            if memory {
                let usage = redis::cmd("MEMORY")
                    .arg("USAGE")
                    .arg(*key)
                    .arg("SAMPLES")
                    .arg(0)
                    .to_owned();
                cmds.push((key.to_string(), usage));
            }
        }
        let replies = self
            .pipelined_lenient(self.conn(), "measure lists", self.op_timeout, cmds)
            .await?;
        let per_key = if memory { 2 } else { 1 };
        for (key, r) in keys.iter().zip(replies.chunks(per_key)) {
            match &r[0] {
                Value::ServerError(e) if e.code() == "NOPERM" => {
                    self.list_sizing.store(false, Relaxed);
                    tracing::warn!(
                        "LLEN is not permitted: lists are bounded after they are read, by -max-list-entries only"
                    );
                    return Ok(());
                }
                Value::ServerError(e) if e.code() == "WRONGTYPE" => {
                    return Err(self
                        .find_wrong_type(&[key], "list")
                        .await
                        .unwrap_or_else(|| reply_err("measure lists", &r[0])));
                }
                v @ Value::ServerError(_) => return Err(reply_err("measure lists", v)),
                v => {
                    let n = int(v).unwrap_or(0).max(0) as u64;
                    if n > limits.entries as u64 {
                        return Err(StoreError::TooLong {
                            key: key.to_string(),
                            what: "entries",
                            limit: limits.entries as u64,
                            setting: "-max-list-entries",
                        });
                    }
                }
            }
            match r.get(1) {
                Some(Value::ServerError(e)) if e.code() == "NOPERM" => {
                    self.memory_usage.store(false, Relaxed);
                    tracing::warn!(
                        "MEMORY USAGE is not permitted: lists are bounded by -max-list-entries only"
                    );
                }
                Some(v @ Value::ServerError(_)) => return Err(reply_err("measure lists", v)),
                Some(v) => {
                    let bytes = int(v).unwrap_or(0).max(0) as u64;
                    if bytes > limits.bytes {
                        return Err(StoreError::TooLong {
                            key: key.to_string(),
                            what: "bytes",
                            limit: limits.bytes,
                            setting: "-max-list-bytes",
                        });
                    }
                }
                None => {}
            }
        }
        Ok(())
    }

    /// The stored table's digest (when intact) and generation, by
    /// `table_state.lua`; with `content_check`, the script hashes the whole
    /// table in Redis (for a Redis that does not permit WATCH).
    async fn table_state(&self, content_check: bool) -> Result<(Option<String>, u64), StoreError> {
        // A small reply: on the lease connection, never queued behind the
        // lists it runs beside.
        let mut conn = self.conn();
        let mut inv = self.scripts.table_state.prepare_invoke();
        inv.key(&self.keys.table)
            .key(&self.keys.meta)
            .arg(if content_check { "1" } else { "0" });
        let v: Value = self
            .bounded(
                "read table state",
                self.op_timeout,
                inv.invoke_async(&mut conn),
            )
            .await?;
        match checked(v)? {
            Value::Array(v) if v.len() == 2 => {
                let generation = match &v[1] {
                    Value::Nil => 0,
                    g => int(g)
                        .filter(|g| *g >= 0)
                        .ok_or_else(|| reply_err("read table state", g))?
                        as u64,
                };
                Ok((text(&v[0]), generation))
            }
            other => Err(reply_err("read table state", &other)),
        }
    }

    /// The fenced, atomic write of the table and/or liveness changes.
    pub async fn commit(
        &self,
        grant: &LeaseGrant,
        c: &Commit<'_>,
    ) -> Result<Committed, StoreError> {
        let mut conn = self.conn();
        let mut inv = self.scripts.commit.prepare_invoke();
        inv.key(&self.keys.table)
            .key(&self.keys.meta)
            .key(&self.keys.epoch)
            .key(&self.keys.lease)
            .key(&self.keys.liveness)
            .key(&self.keys.suspects);
        let digest = c.table.map(MatchingTable::digest).unwrap_or_default();
        let rows = c.table.map_or(0, MatchingTable::len);
        inv.arg(&grant.token)
            .arg(grant.epoch)
            .arg(c.generation_floor)
            .arg(digest)
            .arg(c.now_ms)
            .arg(c.holder_id)
            .arg(&self.keys.table_channel)
            .arg(if c.table.is_some() { "1" } else { "0" })
            .arg(rows)
            .arg(c.health.set.len())
            .arg(c.health.removed.len())
            .arg(c.suspects.set.len())
            .arg(c.suspects.removed.len());
        if let Some(t) = c.table {
            for (member, units) in t.rows() {
                inv.arg(member).arg(units);
            }
        }
        for (member, h) in &c.health.set {
            inv.arg(member).arg(h.encode());
        }
        for member in &c.health.removed {
            inv.arg(member);
        }
        for (member, s) in &c.suspects.set {
            inv.arg(member).arg(s.encode());
        }
        for member in &c.suspects.removed {
            inv.arg(member);
        }
        // A big table takes longer to transfer than a lease renewal.
        let timeout = self.op_timeout + Duration::from_millis((rows as u64) / 10);
        let v: Value = match self
            .bounded("write table", timeout, inv.invoke_async(&mut conn))
            .await
        {
            Ok(v) => v,
            Err(e) => {
                let keys = [
                    self.keys.table.as_str(),
                    self.keys.liveness.as_str(),
                    self.keys.meta.as_str(),
                ];
                return Err(self.classify(e, &keys, "hash").await);
            }
        };
        let v = checked(v)?;
        let Value::Array(items) = &v else {
            return Err(reply_err("write table", &v));
        };
        match items.as_slice() {
            [ok, g] if int(ok) == Some(1) => {
                let g = int(g).ok_or_else(|| reply_err("write table", &v))?;
                self.replicated("write table").await?;
                Ok(Committed::Written {
                    generation: (g >= 0).then_some(g as u64),
                })
            }
            [ok, reason] if int(ok) == Some(0) => Ok(Committed::Fenced {
                reason: text(reason).unwrap_or_default(),
            }),
            _ => Err(reply_err("write table", &v)),
        }
    }

    /// The highest generation Redis knows (`meta.generation` or its floor),
    /// validated: a value that is not an integer below 2^53 is an error
    /// naming the key and the value, never a floor.
    pub async fn read_generation(&self) -> Result<u64, StoreError> {
        let mut conn = self.conn();
        let cmd = redis::cmd("HMGET")
            .arg(&self.keys.meta)
            .arg("generation")
            .arg("generation_floor")
            .to_owned();
        let values: Vec<Option<Vec<u8>>> = match self
            .bounded(
                "read generation",
                self.op_timeout,
                cmd.query_async(&mut conn),
            )
            .await
        {
            Ok(v) => v,
            Err(e) => return Err(self.classify(e, &[&self.keys.meta], "hash").await),
        };
        let mut highest = 0;
        for (field, value) in ["generation", "generation_floor"].iter().zip(values) {
            if let Some(raw) = value {
                highest = highest.max(stored_count(&self.keys.meta, field, &raw)?);
            }
        }
        Ok(highest)
    }

    /// What a new holder inherits: persisted liveness of every member, the
    /// mass-failure suspects (unreadable entries are dropped and logged by the
    /// caller), and the highest stored generation.
    pub async fn load_holding(&self) -> Result<Inheritance, StoreError> {
        let mut pipe = redis::pipe();
        pipe.cmd("HGETALL").arg(&self.keys.liveness);
        pipe.cmd("HGETALL").arg(&self.keys.suspects);
        let mut conn = self.conn();
        let (liveness, suspects): (HashMap<String, String>, HashMap<String, String>) = match self
            .bounded(
                "read liveness",
                self.op_timeout,
                pipe.query_async(&mut conn),
            )
            .await
        {
            Ok(r) => r,
            Err(e) => {
                let keys = [self.keys.liveness.as_str(), self.keys.suspects.as_str()];
                return Err(self.classify(e, &keys, "hash").await);
            }
        };
        let generation = self.read_generation().await?;
        let mut bad = Vec::new();
        let suspects = suspects
            .into_iter()
            .filter_map(|(m, v)| match Suspect::decode(&v) {
                Some(s) => Some((m, s)),
                None => {
                    bad.push((m, v));
                    None
                }
            })
            .collect();
        Ok(Inheritance {
            liveness,
            suspects,
            unreadable_suspects: bad,
            generation,
        })
    }

    /// Removes each `(list, entry)` pair for `-forget-after`, fenced by the
    /// lease: Redis checks token and epoch in the same script as the `LREM`s.
    /// Returns the pairs that were listed. On Redis Cluster a list outside the
    /// table's slot cannot share that script: its `LREM` follows a fenced check
    /// on the table's slot instead (a window of one round trip).
    pub async fn forget_many(
        &self,
        grant: &LeaseGrant,
        pairs: &[(String, Vec<u8>)],
    ) -> Result<Vec<(String, Vec<u8>)>, StoreError> {
        let cluster = matches!(self.conn(), Conn::Cluster(_));
        let table_slot = crate::core::keys::slot(&self.keys.table);
        type Pairs<'p> = Vec<&'p (String, Vec<u8>)>;
        let (near, far): (Pairs, Pairs) = pairs
            .iter()
            .partition(|(list, _)| !cluster || crate::core::keys::slot(list) == table_slot);
        let mut removed = Vec::new();
        if !near.is_empty() {
            removed.extend(self.forget_fenced(grant, &near).await?);
        }
        for (list, entry) in far {
            if self.forget_fenced(grant, &[]).await.is_ok() {
                let n = self.remove_all_bytes(list, entry).await?;
                if n > 0 {
                    removed.push((list.clone(), entry.clone()));
                }
            }
        }
        Ok(removed)
    }

    /// One `forget.lua` call over `pairs` (all in the table's slot); with no
    /// pairs, only the fencing check.
    async fn forget_fenced(
        &self,
        grant: &LeaseGrant,
        pairs: &[&(String, Vec<u8>)],
    ) -> Result<Vec<(String, Vec<u8>)>, StoreError> {
        let mut lists: Vec<&str> = pairs.iter().map(|(l, _)| l.as_str()).collect();
        lists.sort();
        lists.dedup();
        let mut inv = self.scripts.forget.prepare_invoke();
        inv.key(&self.keys.lease).key(&self.keys.epoch);
        for l in &lists {
            inv.key(*l);
        }
        inv.arg(&grant.token).arg(grant.epoch);
        for (list, entry) in pairs {
            let n = lists.binary_search(&list.as_str()).expect("listed") + 1;
            inv.arg(n).arg(entry.as_slice());
        }
        let mut conn = self.conn();
        let v: Value = self
            .bounded(
                "forget members",
                self.op_timeout,
                inv.invoke_async(&mut conn),
            )
            .await?;
        match checked(v)? {
            Value::Array(items) if int(&items[0]) == Some(1) => Ok(pairs
                .iter()
                .zip(&items[1..])
                .filter(|(_, n)| int(n).unwrap_or(0) > 0)
                .map(|(p, _)| (*p).clone())
                .collect()),
            Value::Array(items) if int(&items[0]) == Some(0) => Err(StoreError::Fenced {
                op: "forget members",
                reason: items.get(1).and_then(text).unwrap_or_default(),
            }),
            other => Err(reply_err("forget members", &other)),
        }
    }

    async fn remove_all_bytes(&self, key: &str, value: &[u8]) -> Result<usize, StoreError> {
        let mut conn = self.conn();
        let cmd = redis::cmd("LREM").arg(key).arg(0).arg(value).to_owned();
        match self
            .bounded(
                "remove from list",
                self.op_timeout,
                cmd.query_async::<usize>(&mut conn),
            )
            .await
        {
            Ok(n) => Ok(n),
            Err(e) => Err(self.classify(e, &[key], "list").await),
        }
    }

    /// One census step (seed 002): `INCR` this interval's counter, read the previous
    /// interval's, and record this replica's last result for `status`.
    pub async fn census_step(
        &self,
        number: u64,
        interval: Duration,
        replica_id: &str,
        report: &str,
    ) -> Result<CensusReply, StoreError> {
        let key = self.keys.census(number);
        let keep = (interval * 3).as_millis() as u64;
        let mut pipe = redis::pipe();
        pipe.cmd("INCR").arg(&key);
        pipe.cmd("PEXPIRE").arg(&key).arg(keep).ignore();
        pipe.cmd("GET")
            .arg(self.keys.census(number.saturating_sub(1)));
        pipe.cmd("HSET")
            .arg(&self.keys.replicas)
            .arg(replica_id)
            .arg(report)
            .ignore();
        pipe.cmd("PEXPIRE")
            .arg(&self.keys.replicas)
            .arg(keep * 4)
            .ignore();
        pipe.cmd("HGETALL").arg(&self.keys.replicas);
        // On the bulk connection: the replicas hash is read whole, and a big
        // one (stale ids piling up, or junk) must never queue a renewal.
        let mut conn = self.bulk();
        let (counter, previous, seen): (u64, Option<u64>, HashMap<String, String>) = self
            .bounded("census", self.op_timeout, pipe.query_async(&mut conn))
            .await?;
        // Replicas that stopped reporting (restarted under a new id, scaled
        // down) leave entries behind; drop those silent for 10 intervals.
        let now = crate::unix_ms();
        let stale: Vec<&String> = seen
            .iter()
            .filter(|(_, v)| {
                // "index replicas unix_ms [interval]"
                let at = v
                    .split(' ')
                    .nth(2)
                    .and_then(|t| t.parse::<u64>().ok())
                    .unwrap_or(0);
                now.saturating_sub(at) > (interval * 10).as_millis() as u64
            })
            .map(|(id, _)| id)
            .collect();
        if !stale.is_empty() {
            let _: Result<i64, _> = self
                .bounded(
                    "census prune",
                    self.op_timeout,
                    redis::cmd("HDEL")
                        .arg(&self.keys.replicas)
                        .arg(&stale)
                        .query_async(&mut conn),
                )
                .await;
        }
        Ok(CensusReply { counter, previous })
    }

    /// Adds `member` to `services_key` unless it is listed already (atomic).
    pub async fn register(&self, services_key: &str, member: &str) -> Result<bool, StoreError> {
        self.push_once(services_key, member, "LPUSH").await
    }

    async fn push_once(&self, key: &str, value: &str, push: &str) -> Result<bool, StoreError> {
        let mut conn = self.conn();
        let mut inv = self.scripts.register.prepare_invoke();
        inv.key(key).arg(value).arg(push);
        let added = self
            .bounded(
                "add to list",
                self.op_timeout,
                inv.invoke_async::<i64>(&mut conn),
            )
            .await;
        match added {
            Ok(n) => Ok(n == 1),
            Err(e) => Err(self.classify(e, &[key], "list").await),
        }
    }

    /// Removes every occurrence of `member` from `services_key`.
    pub async fn deregister(&self, services_key: &str, member: &str) -> Result<bool, StoreError> {
        Ok(self.remove_all(services_key, member).await? > 0)
    }

    /// A member's row (`None`: no field, not a member now) and the table
    /// generation, read atomically. A generation that is not a valid counter
    /// is returned as its own error, so that a reader can still follow its row.
    pub async fn read_row(
        &self,
        member: &str,
    ) -> Result<(Option<String>, Result<u64, StoreError>), StoreError> {
        let mut pipe = redis::pipe();
        pipe.atomic();
        pipe.cmd("HGET").arg(&self.keys.table).arg(member);
        pipe.cmd("HGET").arg(&self.keys.meta).arg("generation");
        let mut conn = self.conn();
        match self
            .bounded(
                "read row",
                self.op_timeout,
                pipe.query_async::<(Option<String>, Option<Vec<u8>>)>(&mut conn),
            )
            .await
        {
            Ok((row, g)) => {
                let generation = match g {
                    None => Ok(0),
                    Some(raw) => stored_count(&self.keys.meta, "generation", &raw),
                };
                Ok((row, generation))
            }
            Err(e) => {
                let keys = [self.keys.table.as_str(), self.keys.meta.as_str()];
                Err(self.classify(e, &keys, "hash").await)
            }
        }
    }

    /// The whole stored table.
    pub async fn read_table(&self) -> Result<MatchingTable, StoreError> {
        let mut conn = self.bulk();
        let rows: HashMap<String, String> = match self
            .bounded(
                "read table",
                BULK_TIMEOUT,
                redis::cmd("HGETALL")
                    .arg(&self.keys.table)
                    .query_async(&mut conn),
            )
            .await
        {
            Ok(r) => r,
            Err(e) => return Err(self.classify(e, &[&self.keys.table], "hash").await),
        };
        Ok(MatchingTable::from_rows(rows))
    }

    /// Everything an operator asks about, in one pipelined round trip.
    pub async fn read_overview(
        &self,
        services: &[String],
        units_key: &str,
    ) -> Result<Overview, StoreError> {
        let k = &self.keys;
        let on = |cmd: &str, key: &str| (key.to_string(), redis::cmd(cmd).arg(key).to_owned());
        let range = |key: &str| {
            (
                key.to_string(),
                redis::cmd("LRANGE").arg(key).arg(0).arg(-1).to_owned(),
            )
        };
        let mut cmds = vec![
            on("HGETALL", &k.meta),
            on("PTTL", &k.lease),
            on("GET", &k.epoch),
            on("HGETALL", &k.replicas),
            on("HGETALL", &k.liveness),
            on("HGETALL", &k.table),
            range(units_key),
        ];
        cmds.extend(services.iter().map(|key| range(key)));
        let replies = match self
            .pipelined(self.bulk(), "read overview", BULK_TIMEOUT, cmds)
            .await
        {
            Ok(r) => r,
            Err(e) => {
                let hashes = [
                    k.meta.as_str(),
                    k.replicas.as_str(),
                    k.liveness.as_str(),
                    k.table.as_str(),
                ];
                let e = self.classify(e, &hashes, "hash").await;
                let mut lists: Vec<&str> = services.iter().map(String::as_str).collect();
                lists.push(units_key);
                return Err(self.classify(e, &lists, "list").await);
            }
        };
        let mut it = replies.into_iter();
        let mut next = || it.next().unwrap_or(Value::Nil);
        let map = |v: Value| -> std::collections::BTreeMap<String, String> {
            redis::from_redis_value(v).unwrap_or_default()
        };
        let meta = map(next());
        let pttl = int(&next())
            .filter(|p| *p >= 0)
            .map(|p| Duration::from_millis(p as u64));
        let epoch = int(&next()).unwrap_or(0).max(0) as u64;
        let replicas = map(next());
        let liveness = map(next());
        let table = map(next());
        let units = bytes_list(next());
        let groups = services
            .iter()
            .map(|key| (key.clone(), bytes_list(next())))
            .collect();
        Ok(Overview {
            meta,
            lease_pttl: pttl,
            epoch,
            replicas,
            liveness,
            table,
            units,
            groups,
        })
    }

    /// A list's entries, as bytes (entries need not be UTF-8).
    pub async fn list(&self, key: &str) -> Result<Vec<Vec<u8>>, StoreError> {
        let mut conn = self.bulk();
        let cmd = redis::cmd("LRANGE").arg(key).arg(0).arg(-1).to_owned();
        match self
            .bounded(
                "read list",
                BULK_TIMEOUT,
                cmd.query_async::<Value>(&mut conn),
            )
            .await
        {
            Ok(v) => Ok(bytes_list(v)),
            Err(e) => Err(self.classify(e, &[key], "list").await),
        }
    }

    /// Appends `value` to the list `key` unless it is there already (atomic).
    pub async fn add_once(&self, key: &str, value: &str) -> Result<bool, StoreError> {
        self.push_once(key, value, "RPUSH").await
    }

    /// Removes every occurrence of `value` from the list `key`.
    pub async fn remove_all(&self, key: &str, value: &str) -> Result<usize, StoreError> {
        self.remove_all_bytes(key, value.as_bytes()).await
    }

    /// Replaces the whole list `key` with `values`, atomically; a key of
    /// another type is refused (and left alone).
    pub async fn replace_list(&self, key: &str, values: &[String]) -> Result<(), StoreError> {
        let mut conn = self.conn();
        let mut inv = self.scripts.replace_list.prepare_invoke();
        inv.key(key);
        for v in values {
            inv.arg(v);
        }
        let v: Value = self
            .bounded("replace list", BULK_TIMEOUT, inv.invoke_async(&mut conn))
            .await?;
        match checked(v)? {
            Value::Int(_) => Ok(()),
            other => Err(reply_err("replace list", &other)),
        }
    }

    /// Subscribes to `channels` on a dedicated connection, forever: on any error it
    /// reconnects with backoff and sends [`Notification::Subscribed`] again, since
    /// messages published meanwhile are lost. Ends when `cancel` fires or the
    /// receiver is dropped.
    pub fn subscribe(
        &self,
        channels: Vec<String>,
        cancel: CancellationToken,
    ) -> mpsc::Receiver<Notification> {
        let (tx, rx) = mpsc::channel(64);
        let client = self.client.clone();
        let op_timeout = self.op_timeout;
        tokio::spawn(async move {
            let mut backoff = Duration::from_millis(50);
            loop {
                let session = subscription(&client, &channels, &tx, op_timeout);
                tokio::select! {
                    _ = cancel.cancelled() => return,
                    _ = tx.closed() => return,
                    r = session => {
                        if let Err(e) = r {
                            tracing::debug!(error = %e, "notification subscription lost; reconnecting");
                        }
                    }
                }
                tokio::select! {
                    _ = cancel.cancelled() => return,
                    _ = tokio::time::sleep(backoff) => {}
                }
                backoff = (backoff * 2).min(Duration::from_secs(1));
            }
        });
        rx
    }
}

/// One subscription session; returns when the connection fails.
async fn subscription(
    client: &redis::Client,
    channels: &[String],
    tx: &mpsc::Sender<Notification>,
    op_timeout: Duration,
) -> Result<(), StoreError> {
    use futures::StreamExt;
    let pubsub = match tokio::time::timeout(op_timeout, client.get_async_pubsub()).await {
        Ok(r) => r.map_err(redis_err("subscribe"))?,
        Err(_) => {
            return Err(StoreError::Timeout {
                op: "subscribe",
                timeout: op_timeout,
            });
        }
    };
    let (mut sink, mut stream) = pubsub.split();
    for ch in channels {
        match tokio::time::timeout(op_timeout, sink.subscribe(ch)).await {
            Ok(r) => r.map_err(redis_err("subscribe"))?,
            Err(_) => {
                return Err(StoreError::Timeout {
                    op: "subscribe",
                    timeout: op_timeout,
                });
            }
        }
    }
    if tx.send(Notification::Subscribed).await.is_err() {
        return Ok(());
    }
    // A silent network partition never ends the stream; a periodic PING does.
    let mut probe = tokio::time::interval(Duration::from_secs(1));
    loop {
        tokio::select! {
            msg = stream.next() => {
                let Some(msg) = msg else { return Ok(()) };
                let payload = String::from_utf8_lossy(msg.get_payload_bytes()).into_owned();
                if tx.send(Notification::Message(msg.get_channel_name().to_string(), payload)).await.is_err() {
                    return Ok(());
                }
            }
            _ = probe.tick() => {
                match tokio::time::timeout(op_timeout, sink.ping::<Value>()).await {
                    Ok(Ok(_)) => {}
                    Ok(Err(e)) => return Err(redis_err("subscribe ping")(e)),
                    Err(_) => return Err(StoreError::Timeout { op: "subscribe ping", timeout: op_timeout }),
                }
            }
        }
    }
}
