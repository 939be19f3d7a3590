//! [`MemoryStore`]: one replica's connection to an in-memory Redis
//! ([`Server`]), implementing [`HoldingStore`] as the Redis store does:
//! the same script calls and reply readers (`edge::redis::calls`), the
//! scripts' semantics (`memory::scripts`), and reads that fail as Redis'
//! fail (a key of the wrong type is an error naming it, a list over a limit
//! is refused whole).
//!
//! Faults come from the server's [`Faults`]: each call may fail before it
//! is applied, or be applied and lose its reply, or (a write) be applied
//! and acknowledged by too few replicas. What is applied stays applied:
//! the caller sees an error and must read again, exactly as with Redis.
//!
//! Time is the server's clock (`now_ms`), which the simulation sets; the
//! store has none of its own.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis::Value;

use super::keyspace::{Keyspace, WrongType};
use super::scripts::{Script, run};
use crate::core::count::parse_count;
use crate::core::handoff::{RedisConnection, RunId};
use crate::core::keys::Keys;
use crate::core::lease::{Acquisition, Claim, HolderConnection, LeaseGrant, Renewal};
use crate::core::load::still_holds;
use crate::core::suspicion::Suspect;
use crate::core::table::MatchingTable;
use crate::edge::redis::calls::{self, CommitReply, ScriptCall};
use crate::edge::redis::scripts::stored_count;
use crate::edge::redis::{
    Commit, Committed, CostsRead, DecodedCosts, Inheritance, ListLimits, ListRead, Reports,
    ReportsContent, ReportsRead, Snapshot,
};
use crate::edge::store::HoldingStore;
use crate::error::StoreError;

/// What becomes of one call (see [`Faults`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Answered as Redis answers.
    None,
    /// Never reached Redis: not applied; the caller sees a timeout.
    Lost,
    /// Applied, and the reply lost: the caller sees a timeout.
    ReplyLost,
    /// A write applied, but too few replicas acknowledged it (`WAIT`).
    NotDurable,
}

/// Decides each call's fault: `(op, replica's client id)`. The simulation
/// draws from its seeded generator; `None` answers every call.
pub type Faults = Box<dyn FnMut(&'static str, u64) -> Fault + Send>;

/// The in-memory Redis that every replica's [`MemoryStore`] talks to.
pub struct Server {
    pub keyspace: Keyspace,
    /// The server's clock, in unix ms: `clock`'s at each call, else as set.
    pub now_ms: u64,
    pub clock: Option<crate::edge::clock::WallClock>,
    /// Connections open now, by client id.
    pub open: std::collections::BTreeSet<u64>,
    next_client: u64,
    /// Lease tokens handed out (deterministic, unlike a random UUID).
    tokens: u64,
    pub faults: Option<Faults>,
    /// Every `PUBLISH`, in order: (channel, payload).
    pub published: Vec<(Vec<u8>, Vec<u8>)>,
    /// Subscribers, each told every message published after it subscribed,
    /// in order (one queue each: no wake-up order is left to chance).
    subscribers: Vec<tokio::sync::mpsc::UnboundedSender<(Vec<u8>, Vec<u8>)>>,
    /// Which start of the server this is: a restart closes every
    /// connection and numbers client ids from 1 again, as Redis does.
    pub run: u64,
}

impl Server {
    pub fn new(now_ms: u64) -> Arc<Mutex<Server>> {
        Arc::new(Mutex::new(Server {
            keyspace: Keyspace::new(),
            now_ms,
            open: Default::default(),
            next_client: 0,
            tokens: 0,
            faults: None,
            published: Vec::new(),
            subscribers: Vec::new(),
            run: 1,
            clock: None,
        }))
    }

    /// Every message published from now on, as `SUBSCRIBE` gives them.
    pub fn subscribe(&mut self) -> tokio::sync::mpsc::UnboundedReceiver<(Vec<u8>, Vec<u8>)> {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        self.subscribers.push(tx);
        rx
    }

    /// Sets `now_ms` from the clock, if there is one; returns it.
    pub fn tick(&mut self) -> u64 {
        if let Some(c) = self.clock {
            self.now_ms = c.unix_ms();
        }
        self.now_ms
    }

    /// Restarts the server: every connection closes, client ids start
    /// from 1 again, and (`lose_data`) the keyspace is gone.
    pub fn restart(&mut self, lose_data: bool) {
        self.run += 1;
        self.open.clear();
        self.next_client = 0;
        if lose_data {
            self.keyspace.flush();
        }
    }

    /// A failover to a replica whose copy of the keyspace is `older` (it
    /// lagged: the writes since are lost): a new server (another run id,
    /// client ids from 1), every connection closed.
    pub fn fail_over_to(&mut self, older: &Keyspace) {
        self.restart(false);
        self.keyspace.restore(older);
    }

    /// The server's run id (`INFO server`), new at every restart.
    pub fn run_id(&self) -> crate::core::handoff::RunId {
        crate::core::handoff::RunId::parse(&format!("{:040x}", self.run)).expect("40 hex digits")
    }

    /// Opens a connection: its client id.
    pub fn open_connection(&mut self) -> u64 {
        self.next_client += 1;
        self.open.insert(self.next_client);
        self.next_client
    }

    fn fault(&mut self, op: &'static str, client: u64) -> Fault {
        match &mut self.faults {
            Some(f) => f(op, client),
            None => Fault::None,
        }
    }

    /// Runs `call` of `script`; a command error (a key of the wrong type
    /// past a script's checks) is a reply error, as Redis returns it.
    fn script(&mut self, script: Script, call: &ScriptCall) -> Result<Value, StoreError> {
        let now = self.now_ms;
        match run(script, &mut self.keyspace, &call.keys, &call.args, now) {
            Ok((v, effects)) => {
                for message in effects.published {
                    self.subscribers.retain(|s| s.send(message.clone()).is_ok());
                    self.published.push(message);
                }
                Ok(v)
            }
            Err(WrongType { key }) => Err(StoreError::Reply {
                op: "script",
                detail: format!("WRONGTYPE on {key}"),
            }),
        }
    }
}

/// One replica's connection to a [`Server`]. Like a reconnecting Redis
/// client, it opens a new connection (a new client id) when it finds the
/// server restarted.
#[derive(Clone)]
pub struct MemoryStore {
    keys: Arc<Keys>,
    server: Arc<Mutex<Server>>,
    /// (server run, client id) of this store's connection, named in the
    /// lease's connection record.
    conn: Arc<Mutex<(u64, u64)>>,
    /// Per hash read by [`Self::read_hash_since`], the sim's unix ms from
    /// which its last decoding no longer holds (`{T}:loads`' dates).
    fresh_until: Arc<Mutex<HashMap<String, u64>>>,
    /// The bounds on every list a cycle reads, as the Redis store's.
    limits: ListLimits,
}

impl MemoryStore {
    /// Opens a connection (a new client id) for table `table_key`.
    pub fn connect(server: &Arc<Mutex<Server>>, table_key: &str) -> MemoryStore {
        let mut s = server.lock().expect("server lock");
        let conn = (s.run, s.open_connection());
        MemoryStore {
            keys: Arc::new(Keys::new(table_key)),
            server: Arc::clone(server),
            conn: Arc::new(Mutex::new(conn)),
            fresh_until: Arc::default(),
            limits: ListLimits::DEFAULT,
        }
    }

    /// This store with `limits` on every list a cycle reads.
    pub fn with_limits(mut self, limits: ListLimits) -> MemoryStore {
        self.limits = limits;
        self
    }

    /// This connection's client id.
    pub fn client(&self) -> u64 {
        self.conn.lock().expect("conn lock").1
    }

    /// Closes the connection (the process died): its id is no longer open.
    pub fn close(&self) {
        let (run, client) = *self.conn.lock().expect("conn lock");
        let mut s = self.lock();
        if s.run == run {
            s.open.remove(&client);
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Server> {
        self.server.lock().expect("server lock")
    }

    /// This store's client id on the server as it runs now (a new
    /// connection after a restart).
    fn current(&self, s: &mut Server) -> u64 {
        let mut conn = self.conn.lock().expect("conn lock");
        if conn.0 != s.run {
            *conn = (s.run, s.open_connection());
        }
        conn.1
    }

    /// Runs `f` on the server under this call's fault: `Lost` fails before
    /// `f`, `ReplyLost` after it; `NotDurable` is the caller's to read.
    fn call<T>(
        &self,
        op: &'static str,
        f: impl FnOnce(&mut Server, u64) -> Result<T, StoreError>,
    ) -> Result<(T, Fault), StoreError> {
        let mut s = self.lock();
        s.tick();
        let client = self.current(&mut s);
        let fault = s.fault(op, client);
        let timeout = || StoreError::Timeout {
            op,
            timeout: Duration::from_secs(1),
        };
        if fault == Fault::Lost {
            return Err(timeout());
        }
        let out = f(&mut s, client)?;
        if fault == Fault::ReplyLost {
            return Err(timeout());
        }
        Ok((out, fault))
    }

    fn not_durable(op: &'static str) -> StoreError {
        StoreError::NotDurable {
            op,
            acked: 0,
            wanted: 1,
            timeout: Duration::from_millis(100),
        }
    }

    /// A hash as text pairs, or an error naming a key of another type.
    fn hash(s: &mut Server, key: &str) -> Result<Vec<(String, String)>, StoreError> {
        let now = s.now_ms;
        s.keyspace
            .hgetall(key, now)
            .map(|pairs| {
                pairs
                    .into_iter()
                    .map(|(f, v)| {
                        (
                            String::from_utf8_lossy(&f).into_owned(),
                            String::from_utf8_lossy(&v).into_owned(),
                        )
                    })
                    .collect()
            })
            .map_err(|_| wrong_type(s, key, "hash"))
    }

    /// The highest of `{T}:meta`'s `generation` and `generation_floor`,
    /// and (`with_version`) its `version`, else 0.
    fn meta_counts(&self, s: &mut Server, with_version: bool) -> Result<(u64, u64), StoreError> {
        let now = s.now_ms;
        let meta = &self.keys.meta;
        let (mut generation, mut version) = (0, 0);
        let fields: &[&str] = if with_version {
            &["generation", "generation_floor", "version"]
        } else {
            &["generation", "generation_floor"]
        };
        for &field in fields {
            let raw = s
                .keyspace
                .hget(meta, field.as_bytes(), now)
                .map_err(|_| wrong_type(s, meta, "hash"))?;
            if let Some(raw) = raw {
                let n = stored_count(meta, field, &raw)?;
                if field == "version" {
                    version = n;
                } else {
                    generation = generation.max(n);
                }
            }
        }
        Ok((generation, version))
    }

    /// Hash `key` decoded by `decode` (with the sim's unix ms), unless
    /// unchanged since `held` (by the keyspace's version of it) and the
    /// decoding made then still holds by the clock, as the Redis store.
    fn read_hash_since(
        &self,
        key: &str,
        held: Option<u64>,
        decode: fn(Vec<(String, String)>, u64) -> DecodedCosts,
    ) -> impl Future<Output = CostsRead> + Send + use<> {
        let fresh_until = Arc::clone(&self.fresh_until);
        let out = self.call("read costs", |s, _| {
            let now = s.now_ms;
            let version = s.keyspace.version(key, now);
            let mut fresh_until = fresh_until.lock().expect("fresh lock");
            if held == Some(version) && still_holds(fresh_until.get(key).copied(), now) {
                return Ok(CostsRead {
                    version: Some(version),
                    content: None,
                });
            }
            let read = Self::hash(s, key).map(|p| Arc::new(decode(p, now)));
            match read.as_ref().ok().and_then(|d| d.fresh_until) {
                Some(until) => fresh_until.insert(key.to_string(), until),
                None => fresh_until.remove(key),
            };
            Ok(CostsRead {
                version: read.is_ok().then_some(version),
                content: Some(read),
            })
        });
        async move {
            out.map(|(r, _)| r).unwrap_or_else(|e| CostsRead {
                version: None,
                content: Some(Err(e)),
            })
        }
    }

    fn reports(&self, s: &mut Server, held: Option<u64>) -> ReportsRead {
        let now = s.now_ms;
        let version = s
            .keyspace
            .version(&self.keys.members, now)
            .max(s.keyspace.version(&self.keys.weights, now))
            .max(s.keyspace.version(&self.keys.controls, now))
            .max(s.keyspace.version(&self.keys.quarantine, now));
        if held == Some(version) {
            return ReportsRead {
                version: Some(version),
                content: None,
            };
        }
        let reports: Reports = Self::hash(s, &self.keys.members);
        let overrides: Reports = Self::hash(s, &self.keys.weights);
        let controls: Reports = Self::hash(s, &self.keys.controls);
        let quarantine: Reports = Self::hash(s, &self.keys.quarantine);
        let whole = reports.is_ok() && overrides.is_ok() && controls.is_ok() && quarantine.is_ok();
        ReportsRead {
            version: whole.then_some(version),
            content: Some(ReportsContent {
                reports,
                overrides: Some(overrides),
                controls: Some(controls),
                quarantine: Some(quarantine),
            }),
        }
    }

    fn table_state(&self, s: &mut Server) -> Result<(Option<String>, u64), StoreError> {
        let v = s.script(Script::TableState, &calls::table_state(&self.keys, true))?;
        calls::table_stated(v)
    }
}

fn wrong_type(s: &mut Server, key: &str, expected: &'static str) -> StoreError {
    let now = s.now_ms;
    StoreError::WrongType {
        key: key.to_string(),
        expected,
        actual: s.keyspace.type_of(key, now).to_string(),
    }
}

impl HoldingStore for MemoryStore {
    fn keys(&self) -> &Keys {
        &self.keys
    }

    fn acquire(
        &self,
        claim: &Claim<'_>,
    ) -> impl Future<Output = Result<Acquisition, StoreError>> + Send {
        let out = self.call("acquire lease", |s, client| {
            s.tokens += 1;
            let token = format!("{:032x}", s.tokens);
            let conn = RedisConnection::on(client, s.run_id()).encode();
            let call = calls::acquire(&self.keys, claim, &token, &conn);
            let v = s.script(Script::Acquire, &call)?;
            Ok((token, calls::acquired(v)?))
        });
        let release = self.clone();
        async move {
            match out? {
                ((token, Ok(epoch)), Fault::NotDurable) => {
                    // As the Redis store: never act on it; give it back.
                    let _ = release.release(&LeaseGrant { token, epoch }).await;
                    Err(Self::not_durable("acquire lease"))
                }
                ((token, Ok(epoch)), _) => Ok(Acquisition::Acquired(LeaseGrant { token, epoch })),
                ((_, Err(held)), _) => Ok(held),
            }
        }
    }

    fn renew(
        &self,
        grant: &LeaseGrant,
        ttl: Duration,
        _timeout: Duration,
    ) -> impl Future<Output = Result<Renewal, StoreError>> + Send {
        let out = self.call("renew lease", |s, client| {
            let conn = RedisConnection::on(client, s.run_id()).encode();
            let call = calls::renew(&self.keys, grant, ttl, &conn);
            calls::renewed(&s.script(Script::Renew, &call)?)
        });
        async move {
            match out? {
                (Renewal::Renewed, Fault::NotDurable) => Err(Self::not_durable("renew lease")),
                (r, _) => Ok(r),
            }
        }
    }

    fn release(&self, grant: &LeaseGrant) -> impl Future<Output = Result<bool, StoreError>> + Send {
        let out = self.call("release lease", |s, _| {
            calls::released(&s.script(Script::Release, &calls::release(&self.keys, grant))?)
        });
        async move { out.map(|(r, _)| r) }
    }

    fn holder_connection(
        &self,
        client: RedisConnection,
    ) -> impl Future<Output = Result<HolderConnection, StoreError>> + Send {
        let out = self.call("check the holder's connection", |s, _| {
            // As the Redis store: only the server a record names answers it.
            Ok(
                if client.elsewhere_than(Some(s.run_id())) || s.open.contains(&client.client) {
                    HolderConnection::Open
                } else {
                    HolderConnection::Closed
                },
            )
        });
        async move { out.map(|(r, _)| r) }
    }

    fn commit(
        &self,
        grant: &LeaseGrant,
        c: &Commit<'_>,
    ) -> impl Future<Output = Result<Committed, StoreError>> + Send {
        let out = self.call("write table", |s, _| {
            let v = s.script(Script::Commit, &calls::commit(&self.keys, grant, c))?;
            calls::committed(v)
        });
        async move {
            Ok(match out? {
                (
                    CommitReply::Applied {
                        generation,
                        version,
                    },
                    fault,
                ) => {
                    if fault == Fault::NotDurable {
                        Committed::Unconfirmed {
                            generation,
                            error: Self::not_durable("write table"),
                        }
                    } else {
                        Committed::Written {
                            generation,
                            version,
                        }
                    }
                }
                (CommitReply::Outdated { version, differs }, _) => {
                    Committed::Outdated { version, differs }
                }
                (CommitReply::Fenced { reason }, _) => Committed::Fenced { reason },
            })
        }
    }

    fn read_snapshot(
        &self,
        services: &[String],
        units_key: &str,
        held: &HashMap<String, u64>,
        held_reports: Option<u64>,
    ) -> impl Future<Output = Result<Snapshot, StoreError>> + Send {
        let limits = self.limits;
        let out = self.call("read lists", |s, _| {
            let now = s.now_ms;
            let mut reads = Vec::new();
            for key in services.iter().map(String::as_str).chain([units_key]) {
                let version = s.keyspace.version(key, now);
                let entries = if held.get(key) == Some(&version) {
                    None
                } else {
                    let entries = s
                        .keyspace
                        .lrange(key, now)
                        .map_err(|_| wrong_type(s, key, "list"))?;
                    let bytes: u64 = entries.iter().map(|e| e.len() as u64 + 8).sum();
                    if entries.len() > limits.entries {
                        return Err(StoreError::too_long(
                            "list",
                            key,
                            "entries",
                            limits.entries as u64,
                        ));
                    }
                    if bytes > limits.bytes {
                        return Err(StoreError::too_long("list", key, "bytes", limits.bytes));
                    }
                    Some(entries)
                };
                reads.push(ListRead {
                    key: key.to_string(),
                    version,
                    entries,
                });
            }
            let units = reads.pop().expect("the units list");
            let (stored_digest, stored_generation) = self.table_state(s)?;
            Ok(Snapshot {
                groups: reads,
                units,
                stored_digest,
                stored_generation,
                stored_table: None,
                reports: self.reports(s, held_reports),
            })
        });
        async move { out.map(|(r, _)| r) }
    }

    fn read_table(&self) -> impl Future<Output = Result<MatchingTable, StoreError>> + Send {
        let out = self.call("read table", |s, _| {
            Ok(MatchingTable::from_rows(Self::hash(s, &self.keys.table)?))
        });
        async move { out.map(|(r, _)| r) }
    }

    fn read_table_state(
        &self,
    ) -> impl Future<Output = Result<(Option<String>, u64, Option<MatchingTable>), StoreError>> + Send
    {
        let out = self.call("read table state", |s, _| {
            let (digest, generation) = self.table_state(s)?;
            Ok((digest, generation, None))
        });
        async move { out.map(|(r, _)| r) }
    }

    fn read_reports_since(&self, held: Option<u64>) -> impl Future<Output = ReportsRead> + Send {
        let out = self.call("read member reports", |s, _| Ok(self.reports(s, held)));
        async move {
            out.map(|(r, _)| r).unwrap_or_else(|e| ReportsRead {
                version: None,
                content: Some(ReportsContent::failed(e)),
            })
        }
    }

    fn read_costs_since(&self, held: Option<u64>) -> impl Future<Output = CostsRead> + Send {
        self.read_hash_since(&self.keys.costs, held, |pairs, _| {
            DecodedCosts::decode(pairs)
        })
    }

    fn read_loads_since(&self, held: Option<u64>) -> impl Future<Output = CostsRead> + Send {
        self.read_hash_since(&self.keys.loads, held, DecodedCosts::from_loads)
    }

    fn read_holding(
        &self,
        with_table: bool,
    ) -> impl Future<Output = Result<Inheritance, StoreError>> + Send {
        let out = self.call("read holding", |s, _| {
            let k = &self.keys;
            let transit = Self::hash(s, &k.transit)?;
            let liveness = Self::hash(s, &k.liveness)?.into_iter().collect();
            let mut unreadable_suspects = Vec::new();
            let suspects = Self::hash(s, &k.suspects)?
                .into_iter()
                .filter_map(|(m, v)| match Suspect::decode(&v) {
                    Some(s) => Some((m, s)),
                    None => {
                        unreadable_suspects.push((m, v));
                        None
                    }
                })
                .collect();
            let table = if with_table {
                Some(MatchingTable::from_rows(Self::hash(s, &k.table)?))
            } else {
                None
            };
            let (generation, version) = self.meta_counts(s, true)?;
            let now = s.now_ms;
            let field = |s: &mut Server, f: &str| -> Option<String> {
                let raw = s.keyspace.hget(&k.meta, f.as_bytes(), now).ok()??;
                String::from_utf8(raw).ok()
            };
            let table_generation = match field(s, "generation") {
                Some(g) => stored_count(&k.meta, "generation", g.as_bytes())?,
                None => 0,
            };
            let server = field(s, "server").and_then(|r| RunId::parse(&r));
            let transit_recorded = field(s, "transit").and_then(|t| parse_count(&t));
            let reports_recorded = field(s, "reports").and_then(|t| parse_count(&t));
            let deadline_recorded = field(s, "deadline_max")
                .and_then(|t| parse_count(&t))
                .filter(|d| *d > 0);
            Ok(Inheritance {
                table,
                version,
                liveness,
                suspects,
                unreadable_suspects,
                generation,
                table_generation,
                server,
                transit_recorded,
                reports_recorded,
                deadline_recorded,
                transit,
            })
        });
        async move { out.map(|(r, _)| r) }
    }

    fn read_generation(&self) -> impl Future<Output = Result<u64, StoreError>> + Send {
        let out = self.call("read generation", |s, _| Ok(self.meta_counts(s, false)?.0));
        async move { out.map(|(r, _)| r) }
    }

    fn server(&self) -> Option<RunId> {
        let (run, _) = *self.conn.lock().expect("conn lock");
        let s = self.lock();
        (s.run == run).then(|| s.run_id())
    }

    fn read_held(&self) -> impl Future<Output = Result<Vec<(String, String)>, StoreError>> + Send {
        let out = self.call("read held", |s, _| Self::hash(s, &self.keys.held));
        async move { out.map(|(r, _)| r) }
    }

    fn restore_reports(
        &self,
        reports: &[(String, String)],
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        let out = self.call("restore reports", |s, _| {
            let now = s.now_ms;
            let key = &self.keys.members;
            for (m, r) in reports {
                let present = s
                    .keyspace
                    .hget(key, m.as_bytes(), now)
                    .map_err(|_| wrong_type(s, key, "hash"))?;
                if present.is_none() {
                    s.keyspace
                        .hset(
                            key,
                            &[(m.clone().into_bytes(), r.clone().into_bytes())],
                            now,
                        )
                        .map_err(|_| wrong_type(s, key, "hash"))?;
                }
            }
            Ok(())
        });
        async move { out.map(|(r, _)| r) }
    }

    fn forget_many(
        &self,
        grant: &LeaseGrant,
        pairs: &[(String, Vec<u8>)],
    ) -> impl Future<Output = Result<Vec<(String, Vec<u8>)>, StoreError>> + Send {
        // As the Redis store: no pairs, no call.
        let out = self.call("forget members", |s, _| {
            if pairs.is_empty() {
                return Ok(Vec::new());
            }
            let pairs: Vec<&(String, Vec<u8>)> = pairs.iter().collect();
            let mut lists: Vec<&str> = pairs.iter().map(|(l, _)| l.as_str()).collect();
            lists.sort();
            lists.dedup();
            let v = s.script(
                Script::Forget,
                &calls::forget(&self.keys, grant, &pairs, &lists),
            )?;
            calls::forgotten(v, &pairs)
        });
        async move { out.map(|(r, _)| r) }
    }

    fn record_quarantine(
        &self,
        grant: &LeaseGrant,
        records: &[(String, String)],
    ) -> impl Future<Output = Result<u64, StoreError>> + Send {
        // As the Redis store: no records, no call.
        let out = self.call("record quarantined units", |s, _| {
            if records.is_empty() {
                return Ok(0);
            }
            let v = s.script(
                Script::Quarantine,
                &calls::quarantine(&self.keys, grant, records),
            )?;
            calls::quarantined(v)
        });
        async move { out.map(|(r, _)| r) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::liveness::HealthChanges;
    use crate::core::suspicion::NO_SUSPECTS;

    fn claim() -> Claim<'static> {
        Claim {
            ttl: Duration::from_secs(10),
            epoch_floor: 0,
            generation_floor: 0,
            holder_id: "r1",
            now_ms: 1,
            failure_threshold: 1,
            takeover: None,
        }
    }

    async fn write(store: &MemoryStore, grant: &LeaseGrant) -> Result<Committed, StoreError> {
        let t = MatchingTable::from_rows([("m:1".to_string(), "u1".to_string())]);
        let none = HealthChanges::default();
        let c = Commit {
            table: Some(&t),
            delta: None,
            health: &none,
            suspects: &NO_SUSPECTS,
            transit: None,
            generation_floor: 0,
            holder_id: "r1",
            now_ms: 1,
            assignment: "ring",
            last_change: None,
            expected_version: None,
            history: None,
            server: None,
            reports: 0,
            deadline_max: Duration::ZERO,
        };
        store.commit(grant, &c).await
    }

    fn fault_next(server: &Arc<Mutex<Server>>, fault: Fault) {
        let mut once = Some(fault);
        server.lock().unwrap().faults =
            Some(Box::new(move |_, _| once.take().unwrap_or(Fault::None)));
    }

    #[tokio::test]
    async fn a_lost_call_is_not_applied_and_a_lost_reply_is() {
        let server = Server::new(1_000);
        let store = MemoryStore::connect(&server, "t");
        let Acquisition::Acquired(g) = store.acquire(&claim()).await.unwrap() else {
            panic!("a free lease is taken")
        };
        fault_next(&server, Fault::Lost);
        assert!(matches!(
            write(&store, &g).await,
            Err(StoreError::Timeout { .. })
        ));
        assert_eq!(store.read_generation().await.unwrap(), 0, "not applied");
        fault_next(&server, Fault::ReplyLost);
        assert!(matches!(
            write(&store, &g).await,
            Err(StoreError::Timeout { .. })
        ));
        assert_eq!(store.read_generation().await.unwrap(), 1, "applied");
        fault_next(&server, Fault::NotDurable);
        assert!(matches!(
            write(&store, &g).await,
            Ok(Committed::Unconfirmed {
                generation: Some(2),
                ..
            })
        ));
        assert_eq!(store.read_generation().await.unwrap(), 2, "applied");
    }

    #[tokio::test]
    async fn an_acquisition_too_few_replicas_have_is_given_back() {
        let server = Server::new(1_000);
        let store = MemoryStore::connect(&server, "t");
        fault_next(&server, Fault::NotDurable);
        assert!(matches!(
            store.acquire(&claim()).await,
            Err(StoreError::NotDurable { .. })
        ));
        let Acquisition::Acquired(g) = store.acquire(&claim()).await.unwrap() else {
            panic!("given back, so free")
        };
        assert_eq!(g.epoch, 2, "the epoch it opened stays used");
    }

    #[tokio::test]
    async fn the_lease_expires_on_the_servers_clock_and_a_closed_connection_is_seen() {
        let server = Server::new(1_000);
        let a = MemoryStore::connect(&server, "t");
        let b = MemoryStore::connect(&server, "t");
        let Acquisition::Acquired(_) = a.acquire(&claim()).await.unwrap() else {
            panic!()
        };
        let Acquisition::Held { record, .. } = b.acquire(&claim()).await.unwrap() else {
            panic!("held by a")
        };
        let client = record.expect("a recorded its connection").client;
        assert_eq!(client.client, a.client());
        assert_eq!(client.server, Some(server.lock().unwrap().run_id()));
        assert_eq!(
            b.holder_connection(client).await.unwrap(),
            HolderConnection::Open
        );
        a.close();
        assert_eq!(
            b.holder_connection(client).await.unwrap(),
            HolderConnection::Closed
        );
        server.lock().unwrap().now_ms += 10_000;
        assert!(matches!(
            b.acquire(&claim()).await.unwrap(),
            Acquisition::Acquired(_)
        ));
    }

    /// After a restart (or, on Redis, a replica's promotion) the record names
    /// the old server: never closed, though no connection has its id, since
    /// the holder may be alive and reconnecting. Its next renewal names the
    /// new server, where a close is seen again.
    #[tokio::test]
    async fn a_record_of_another_server_is_never_read_as_closed() {
        let server = Server::new(1_000);
        let a = MemoryStore::connect(&server, "t");
        let b = MemoryStore::connect(&server, "t");
        let Acquisition::Acquired(grant) = a.acquire(&claim()).await.unwrap() else {
            panic!()
        };
        server.lock().unwrap().restart(false);
        let held = || async {
            let Acquisition::Held { record, .. } = b.acquire(&claim()).await.unwrap() else {
                panic!("held by a")
            };
            record.expect("a recorded its connection").client
        };
        let before = held().await;
        assert_ne!(before.server, Some(server.lock().unwrap().run_id()));
        assert_eq!(
            b.holder_connection(before).await.unwrap(),
            HolderConnection::Open,
            "a connection of the server before the restart: unknown, so open"
        );
        let ttl = Duration::from_secs(10);
        assert_eq!(a.renew(&grant, ttl, ttl).await.unwrap(), Renewal::Renewed);
        let after = held().await;
        assert_eq!(after.server, Some(server.lock().unwrap().run_id()));
        assert_eq!(
            b.holder_connection(after).await.unwrap(),
            HolderConnection::Open
        );
        a.close();
        assert_eq!(
            b.holder_connection(after).await.unwrap(),
            HolderConnection::Closed
        );
    }
}
