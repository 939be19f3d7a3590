//! The table and its state: the holder's snapshot read (with list sizing,
//! the list guards and the table guard), the fenced commit, and the reads of the table, a row,
//! the generation, what a holder reads before it plans (a new holding's
//! inheritance, Redis' state after a write of unknown outcome), whether a
//! member's Redis connection is gone, and the operator overview.
//!
//! Guarantees:
//! - the table is only ever written by `commit.lua`, which checks the lease
//!   token and the fencing epoch inside Redis and replaces the whole hash
//!   atomically: a stale holder's write is rejected by Redis itself, and
//!   readers never see a half-written table;
//! - a list over a limit is refused by its measured size before it is
//!   transferred (where Redis permits `LLEN`/`MEMORY USAGE`), and after it is
//!   read in any case: an error naming it, never a partial read;
//! - a stored digest is trusted only while the table is known intact;
//! - a list is reported unchanged only while its guard is clean since it was
//!   read, and only at a version the caller holds; a failed read leaves no
//!   list known, so the next cycle reads it again;
//! - a stored counter that is not an integer below 2^53 is an error naming
//!   its key and value, never a floor.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use redis::Value;

use super::conn::Conn;
use super::{
    BULK_TIMEOUT, Commit, Committed, Inheritance, LeaseGrant, ListLimits, ListRead, Reports,
    ReportsRead, Snapshot, Store, bytes_list, checked, int, refused_commands, reply_err,
    stored_count, text, text_pairs,
};
use crate::core::handoff::{MemberReport, RedisConnection, RunId};
use crate::core::status::Overview;
use crate::core::suspicion::Suspect;
use crate::core::table::MatchingTable;
use crate::error::StoreError;

impl Store {
    /// Reads the services lists, the work units and the stored table's state.
    ///
    /// A list is transferred only when it must be: its guard (see `guard.rs`)
    /// cannot tell that nobody touched it since it was read at a version the
    /// caller `held`s. The guards are probed, and so armed, before any list
    /// is read, beside the table's state and the members' reports; then one
    /// round trip sizes the lists to read (`LLEN`, `MEMORY USAGE`), so that
    /// a list over a limit is refused without being transferred, and one
    /// reads them. A list over a limit is an error naming it, never a partial
    /// read; a list not read was within the limits when it was read.
    ///
    /// The stored digest is returned only when the table is known intact: the
    /// table guard says nobody touched it since it was verified, or a full
    /// check verifies it now.
    pub async fn read_snapshot(
        &self,
        services: &[String],
        units_key: &str,
        limits: ListLimits,
        held: &HashMap<String, u64>,
        held_reports: Option<u64>,
    ) -> Result<Snapshot, StoreError> {
        let keys = list_keys(services, units_key);
        let mut guard = self.guard.lock().await;
        let mut lists = self.lists.lock().await;
        let content_check = guard.unsupported();
        let (known, listed, state, reports) = tokio::join!(
            guard.probe(),
            lists.probe(&keys),
            self.table_state(content_check),
            self.read_reports_since(held_reports)
        );
        // Every list's guard is armed from here on: a list read below is
        // covered from before its read (the ordering rule of `guard.rs`).
        let mut reads = self
            .read_guarded(&mut lists, &keys, &listed, held, limits)
            .await?;
        let (meta_digest, stored_generation) = state?;
        drop(lists);
        let units = reads.pop().expect("the units list");

        let mut stored_table = None;
        let stored_digest = match (known, meta_digest) {
            (_, None) => None,
            (Some(known), Some(meta)) if known == meta => Some(meta),
            (_, Some(meta)) if content_check => Some(meta),
            (_, Some(meta)) => {
                // Unknown since the last check (a write, an edit, a reconnect):
                // verify the content once; the guard is armed from here on.
                let stored = self.read_table().await?;
                let intact = stored.digest() == meta;
                stored_table = Some(stored);
                if intact {
                    guard.verified(meta.clone());
                    Some(meta)
                } else {
                    None
                }
            }
        };
        Ok(Snapshot {
            groups: reads,
            units,
            stored_digest,
            stored_generation,
            stored_table,
            reports,
        })
    }

    /// The lists alone, as [`read_snapshot`](Self::read_snapshot) reads
    /// them (through the same guards and versions): a standby's warm view
    /// (`coordinator::holder::WarmView`), which its first cycle as a holder
    /// then finds read. Each services list in order, then the units list.
    pub async fn read_lists_since(
        &self,
        services: &[String],
        units_key: &str,
        limits: ListLimits,
        held: &HashMap<String, u64>,
    ) -> Result<(Vec<ListRead>, ListRead), StoreError> {
        let keys = list_keys(services, units_key);
        let mut lists = self.lists.lock().await;
        let listed = lists.probe(&keys).await;
        let mut reads = self
            .read_guarded(&mut lists, &keys, &listed, held, limits)
            .await?;
        let units = reads.pop().expect("the units list");
        Ok((reads, units))
    }

    /// Reads the lists among `keys` that their guards (probed as `listed`,
    /// armed since) cannot show unchanged at a version in `held`; versions
    /// every list. A failed read leaves none of them trusted.
    async fn read_guarded(
        &self,
        lists: &mut super::guard::ListGuards,
        keys: &[&str],
        listed: &[Option<u64>],
        held: &HashMap<String, u64>,
        limits: ListLimits,
    ) -> Result<Vec<ListRead>, StoreError> {
        let read = super::guard::must_read(keys, listed, held);
        let to_read: Vec<&str> = keys
            .iter()
            .zip(&read)
            .filter(|(_, r)| **r)
            .map(|(k, _)| *k)
            .collect();
        let fresh = match self.read_lists(&to_read, limits).await {
            Ok(f) => f,
            Err(e) => {
                // Nothing read here is trusted later: read again next cycle.
                for key in &to_read {
                    lists.forget(key);
                }
                return Err(e);
            }
        };
        let mut fresh = fresh.into_iter();
        Ok(keys
            .iter()
            .zip(read.iter().zip(listed))
            .map(|(key, (&read, known))| match read {
                true => ListRead {
                    key: key.to_string(),
                    version: lists.read(key),
                    entries: fresh.next(),
                },
                false => ListRead {
                    key: key.to_string(),
                    version: known.expect("a list not read is known"),
                    entries: None,
                },
            })
            .collect())
    }

    /// Sizes, then reads, the lists `keys` in full: two round trips (none
    /// when `keys` is empty), and every list within `limits`.
    async fn read_lists(
        &self,
        keys: &[&str],
        limits: ListLimits,
    ) -> Result<Vec<Vec<Vec<u8>>>, StoreError> {
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        self.list_sizes(keys, limits).await?;
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
        let replies = match self
            .pipelined(self.bulk(), "read lists", BULK_TIMEOUT, cmds)
            .await
        {
            Ok(r) => r,
            Err(e) => return Err(self.classify(e, keys, "list").await),
        };
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
            lists.push(entries);
        }
        Ok(lists)
    }

    /// The stored table's digest, when it is known intact (the table guard
    /// says nobody touched it since it was verified, or Redis checked its
    /// content), and its generation: a handoff cycle's only table read.
    ///
    /// Unknown since the last check (after any write, this holder's too), the
    /// table is read and verified once, as a full cycle does, and returned.
    pub async fn read_table_state(
        &self,
    ) -> Result<(Option<String>, u64, Option<MatchingTable>), StoreError> {
        let mut guard = self.guard.lock().await;
        let content_check = guard.unsupported();
        let (known, state) = tokio::join!(guard.probe(), self.table_state(content_check));
        let (meta, generation) = state?;
        Ok(match (known, meta) {
            (_, None) => (None, generation, None),
            (Some(known), Some(meta)) if known == meta => (Some(meta), generation, None),
            (_, Some(meta)) if content_check => (Some(meta), generation, None),
            (_, Some(meta)) => {
                let stored = self.read_table().await?;
                if stored.digest() == meta {
                    guard.verified(meta.clone());
                    (Some(meta), generation, Some(stored))
                } else {
                    (None, generation, Some(stored))
                }
            }
        })
    }

    /// [`read_reports`](Self::read_reports) for a holder cycle that holds
    /// them at version `held`: read only when their guard cannot tell that
    /// nobody touched either hash since that version was read. Members
    /// rewrite their report when they apply a generation, so after a write
    /// they are read again; an idle fleet's are not.
    pub async fn read_reports_since(&self, held: Option<u64>) -> ReportsRead {
        let mut g = self.reports.lock().await;
        // Probed (armed) before the read it must cover (see `guard.rs`).
        let known = g.guard.probe().await;
        if let Some(v) = known
            && held == Some(v)
        {
            return ReportsRead {
                version: Some(v),
                content: None,
            };
        }
        let (reports, overrides) = self.read_reports().await;
        // Only content read whole is versioned: an error is read again.
        let version = match (&reports, &overrides) {
            (Ok(_), Some(Ok(_))) => Some(g.read()),
            _ => {
                g.guard.forget();
                None
            }
        };
        ReportsRead {
            version,
            content: Some((reports, overrides)),
        }
    }

    /// The members' reports (`{T}:members`), for the handoff, and the
    /// operator's weight overrides (`{T}:weights`), in one round trip. Never
    /// fails the cycle: each hash of the wrong type (members can write the
    /// reports) is an error of its own; the holder then treats every member
    /// as one that does not acknowledge, or as having no override. The
    /// overrides are `None` when the round trip itself failed (its error is
    /// the reports'): the holder keeps the overrides it knew.
    pub async fn read_reports(&self) -> (Reports, Option<Reports>) {
        let keys = [self.keys.members.clone(), self.keys.weights.clone()];
        let cmds = keys
            .iter()
            .map(|key| (key.clone(), redis::cmd("HGETALL").arg(key).to_owned()))
            .collect();
        let replies = match self
            .pipelined_lenient(self.bulk(), "read member reports", self.op_timeout, cmds)
            .await
        {
            Ok(r) => r,
            Err(e) => return (Err(e), None),
        };
        let mut replies = replies.into_iter();
        let reports = self
            .hash_reply(&keys[0], "read member reports", replies.next())
            .await;
        let overrides = self
            .hash_reply(&keys[1], "read weight overrides", replies.next())
            .await;
        (reports, Some(overrides))
    }

    /// One lenient `HGETALL` reply: its pairs (lossy text), or an error
    /// naming the key when it holds another type.
    async fn hash_reply(&self, key: &str, op: &'static str, reply: Option<Value>) -> Reports {
        match reply {
            Some(Value::ServerError(e)) if e.code() == "WRONGTYPE" => Err(self
                .find_wrong_type(&[key], "hash")
                .await
                .unwrap_or_else(|| reply_err(op, &Value::ServerError(e)))),
            Some(v @ Value::ServerError(_)) => Err(reply_err(op, &v)),
            Some(v) => text_pairs(v.clone()).ok_or_else(|| reply_err(op, &v)),
            // A short reply is no "empty hash": its members' facts would go
            // missing.
            None => Err(StoreError::Reply {
                op,
                detail: "no reply".into(),
            }),
        }
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
            .key(&self.keys.suspects)
            .key(&self.keys.transit);
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
            .arg(c.suspects.removed.len())
            .arg(if c.transit.is_some() { "1" } else { "0" })
            .arg(c.transit.map_or(0, <[_]>::len))
            .arg(c.assignment)
            .arg(c.last_change.unwrap_or(""))
            .arg(c.expected_version.map_or(String::new(), |v| v.to_string()));
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
        for (field, value) in c.transit.unwrap_or_default() {
            inv.arg(field).arg(value);
        }
        // A big table takes longer to transfer and apply than a renewal: the
        // budget grows with rows and with bytes (measured: 10,000 rows of a
        // million units apply in about 50 ms; allow 20 MB/s on a loaded host).
        let bytes: usize = c.table.map_or(0, |t| {
            t.rows()
                .iter()
                .map(|(m, v)| m.len() + v.len())
                .sum::<usize>()
        }) + c
            .transit
            .unwrap_or_default()
            .iter()
            .map(|(f, v)| f.len() + v.len() + 200)
            .sum::<usize>();
        let timeout = self.op_timeout
            + Duration::from_millis((rows as u64) / 10)
            + Duration::from_millis((bytes as u64) / 20_000);
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
            [ok, g, version] if int(ok) == Some(1) => {
                let g = int(g).ok_or_else(|| reply_err("write table", &v))?;
                let version = int(version)
                    .filter(|v| *v > 0)
                    .ok_or_else(|| reply_err("write table", &v))?
                    as u64;
                let generation = (g >= 0).then_some(g as u64);
                match self.replicated("write table").await {
                    Ok(()) => Ok(Committed::Written {
                        generation,
                        version,
                    }),
                    Err(error) => Ok(Committed::Unconfirmed { generation, error }),
                }
            }
            [code, version] if int(code) == Some(-4) => Ok(Committed::Outdated {
                version: int(version)
                    .filter(|v| *v >= 0)
                    .ok_or_else(|| reply_err("write table", &v))? as u64,
            }),
            [ok, reason] if int(ok) == Some(0) => Ok(Committed::Fenced {
                reason: text(reason).unwrap_or_default(),
            }),
            _ => Err(reply_err("write table", &v)),
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

    /// What a holder must read before it plans: on a new holding, what the
    /// last holder left; after a write of unknown outcome, Redis' state
    /// again. The units in transit, the liveness history, the mass-failure
    /// suspects, the highest generation and, `with_table`, the table, in one
    /// round trip on the bulk connection (transit and the table can be
    /// large; a new holding's first cycle reads and verifies the table
    /// anyway). Each hash is read on its own: one that cannot be read (of
    /// another type, or not text) fails the call with an error naming it,
    /// never an empty hash. Unreadable suspect entries are returned for the
    /// caller to log.
    pub async fn read_holding(&self, with_table: bool) -> Result<Inheritance, StoreError> {
        let k = &self.keys;
        let mut hashes = vec![&k.transit, &k.liveness, &k.suspects];
        if with_table {
            hashes.push(&k.table);
        }
        let mut cmds: Vec<(String, redis::Cmd)> = hashes
            .iter()
            .map(|key| (key.to_string(), redis::cmd("HGETALL").arg(*key).to_owned()))
            .collect();
        cmds.push((
            k.meta.clone(),
            redis::cmd("HMGET")
                .arg(&k.meta)
                .arg("generation")
                .arg("generation_floor")
                .arg("version")
                .to_owned(),
        ));
        let replies = match self
            .pipelined_lenient(self.bulk(), "read holding", BULK_TIMEOUT, cmds)
            .await
        {
            Ok(r) => r,
            Err(e) => {
                let keys: Vec<&str> = hashes.iter().map(|k| k.as_str()).collect();
                return Err(self.classify(e, &keys, "hash").await);
            }
        };
        if replies.len() != hashes.len() + 1 {
            return Err(StoreError::Reply {
                op: "read holding",
                detail: format!("{} replies", replies.len()),
            });
        }
        let mut replies = replies.into_iter();
        let mut pairs = Vec::with_capacity(hashes.len());
        for key in &hashes {
            let reply = replies.next().expect("counted above");
            pairs.push(self.hash_reply(key, "read holding", Some(reply)).await?);
        }
        let meta = replies.next().expect("counted above");
        let (mut generation, mut version) = (0, 0);
        match &meta {
            Value::ServerError(e) if e.code() == "WRONGTYPE" => {
                return Err(self
                    .find_wrong_type(&[&k.meta], "hash")
                    .await
                    .unwrap_or_else(|| reply_err("read holding", &meta)));
            }
            Value::Array(values) => {
                for (field, value) in ["generation", "generation_floor"].iter().zip(values) {
                    if let Value::BulkString(raw) = value {
                        generation = generation.max(stored_count(&k.meta, field, raw)?);
                    }
                }
                if let Some(Value::BulkString(raw)) = values.get(2) {
                    version = stored_count(&k.meta, "version", raw)?;
                }
            }
            other => return Err(reply_err("read holding", other)),
        }
        let mut pairs = pairs.into_iter();
        let transit = pairs.next().expect("the transit");
        let liveness = pairs.next().expect("the liveness").into_iter().collect();
        let mut bad = Vec::new();
        let suspects = pairs
            .next()
            .expect("the suspects")
            .into_iter()
            .filter_map(|(m, v)| match Suspect::decode(&v) {
                Some(s) => Some((m, s)),
                None => {
                    bad.push((m, v));
                    None
                }
            })
            .collect();
        let table = pairs.next().map(MatchingTable::from_rows);
        Ok(Inheritance {
            table,
            version,
            liveness,
            suspects,
            unreadable_suspects: bad,
            generation,
            transit,
        })
    }

    /// The liveness history and the mass-failure suspects the holder left,
    /// for a standby's warm view (unreadable suspect entries are dropped).
    pub async fn read_liveness(
        &self,
    ) -> Result<
        (
            HashMap<String, String>,
            std::collections::BTreeMap<String, Suspect>,
        ),
        StoreError,
    > {
        let mut pipe = redis::pipe();
        pipe.cmd("HGETALL").arg(&self.keys.liveness);
        pipe.cmd("HGETALL").arg(&self.keys.suspects);
        let mut conn = self.bulk();
        let (liveness, suspects): (HashMap<String, String>, HashMap<String, String>) = match self
            .bounded("read liveness", BULK_TIMEOUT, pipe.query_async(&mut conn))
            .await
        {
            Ok(r) => r,
            Err(e) => {
                let keys = [self.keys.liveness.as_str(), self.keys.suspects.as_str()];
                return Err(self.classify(e, &keys, "hash").await);
            }
        };
        let suspects = suspects
            .into_iter()
            .filter_map(|(m, v)| Suspect::decode(&v).map(|s| (m, s)))
            .collect();
        Ok((liveness, suspects))
    }

    /// Whether Redis has none of `member`'s connections left: the one its
    /// report names now, else (no report any more) every one of `recorded`
    /// (those named when its units were revoked). A connection named with
    /// another server's run id than the one asked is gone from it, whatever
    /// ids that server has: client ids are numbered per server process, so
    /// after a failover or a restart a dead member's id may name another
    /// member's connection. `None` when that cannot be told: no connection
    /// is known, Redis does not let this replica ask (`CLIENT` not
    /// permitted), or a cluster (a client id names a connection of one node,
    /// and the report does not say which).
    pub async fn member_disconnected(
        &self,
        member: &str,
        recorded: &[RedisConnection],
    ) -> Result<Option<bool>, StoreError> {
        let Conn::Single(mut conn) = self.conn() else {
            return Ok(None);
        };
        let report: Option<String> = match self
            .bounded(
                "read a member's report",
                self.op_timeout,
                redis::cmd("HGET")
                    .arg(&self.keys.members)
                    .arg(member)
                    .query_async(&mut conn),
            )
            .await
        {
            Ok(r) => r,
            Err(e) => return Err(self.classify(e, &[&self.keys.members], "hash").await),
        };
        let named = report
            .as_deref()
            .and_then(MemberReport::decode)
            .and_then(|r| r.client);
        let named: Vec<RedisConnection> = match (named, &report) {
            (Some(c), _) => vec![c],
            // A report without a client id: the member reads on connections
            // it does not name, which Redis cannot vouch for.
            (None, Some(_)) => return Ok(None),
            (None, None) => recorded.to_vec(),
        };
        if named.is_empty() {
            return Ok(None);
        }
        let Some((server, open)) = self.open_connections(&named).await? else {
            return Ok(None);
        };
        Ok(Some(named.iter().all(|c| {
            c.elsewhere_than(server) || !open.contains(&c.client)
        })))
    }

    /// Which of `named`'s client ids the server has a connection of, with
    /// its run id (`None` where Redis refuses `INFO`): `MULTI; INFO server;
    /// CLIENT LIST ID …; EXEC`, so both answers come from one server. `None`
    /// where Redis refuses `CLIENT`.
    async fn open_connections(
        &self,
        named: &[RedisConnection],
    ) -> Result<Option<(Option<RunId>, HashSet<u64>)>, StoreError> {
        const OP: &str = "look for a member's connection";
        let mut conn = self.conn();
        loop {
            let info = self.server_info.load(Relaxed);
            let mut pipe = redis::pipe();
            pipe.atomic();
            if info {
                pipe.cmd("INFO").arg("server");
            }
            let list = pipe.cmd("CLIENT").arg("LIST").arg("ID");
            for c in named {
                list.arg(c.client);
            }
            let replies: Vec<Value> = match self
                .bounded(OP, self.op_timeout, pipe.query_async(&mut conn))
                .await
            {
                Ok(v) => v,
                Err(StoreError::Redis { source, .. })
                    if info && refused_commands(&source).is_some_and(|at| at == [0]) =>
                {
                    self.server_info.store(false, Relaxed);
                    tracing::warn!(
                        "INFO is not permitted: a member's Redis connection is looked for by its client id alone, so after a Redis failover or restart a refused member's units may wait for its deadline"
                    );
                    continue;
                }
                Err(e) if super::lease::refusal(&e).is_some() => return Ok(None),
                Err(StoreError::Redis { source, .. }) if refused_commands(&source).is_some() => {
                    return Ok(None);
                }
                Err(e) => return Err(e),
            };
            let whole = || reply_err(OP, &Value::Array(replies.clone()));
            let (server, list) = match (info, replies.as_slice()) {
                (true, [i, l]) => (Some(text(i).ok_or_else(whole)?), l),
                (false, [l]) => (None, l),
                _ => return Err(whole()),
            };
            let open = text(list)
                .ok_or_else(whole)?
                .lines()
                .filter_map(|l| l.split(' ').find_map(|f| f.strip_prefix("id=")))
                .filter_map(|id| id.trim().parse().ok())
                .collect();
            // An INFO reply without a run id: nothing is certain of servers.
            return Ok(Some((server.as_deref().and_then(RunId::from_info), open)));
        }
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
            on("GET", &k.lease),
            on("HGETALL", &k.replicas),
            on("HGETALL", &k.liveness),
            on("HGETALL", &k.table),
            on("HGETALL", &k.members),
            on("HGETALL", &k.transit),
            on("HGETALL", &k.weights),
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
        let lease_token = text(&next());
        let replicas = map(next());
        let liveness = map(next());
        let table = map(next());
        // Members write their reports: read leniently (lossy), never fail.
        let lenient = |v: Value| -> std::collections::BTreeMap<String, String> {
            text_pairs(v).into_iter().flatten().collect()
        };
        let reports = lenient(next());
        let transit = lenient(next());
        let weights = lenient(next());
        let units = bytes_list(next());
        let groups = services
            .iter()
            .map(|key| (key.clone(), bytes_list(next())))
            .collect();
        Ok(Overview {
            meta,
            lease_pttl: pttl,
            lease_token,
            epoch,
            replicas,
            liveness,
            table,
            units,
            groups,
            reports,
            transit,
            weights,
        })
    }
}

/// Every list a cycle reads: each services list in order, then the units list.
fn list_keys<'a>(services: &'a [String], units_key: &'a str) -> Vec<&'a str> {
    services
        .iter()
        .map(String::as_str)
        .chain([units_key])
        .collect()
}
