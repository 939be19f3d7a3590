//! The holder's cycle reads: the snapshot (the lists, the table's state, the
//! members' reports and the weight overrides), and its parts read alone: the
//! lists for a standby's warm view, the table's state for a handoff cycle, and
//! the reports.
//!
//! Guarantees:
//! - a list over a limit is refused by its measured size before it is
//!   transferred (where Redis permits `LLEN`/`MEMORY USAGE`), and after it is
//!   read in any case: an error naming it, never a partial read;
//! - a stored digest is trusted only while the table is known intact;
//! - a list is reported unchanged only while its guard is clean since it was
//!   read, and only at a version the caller holds; a failed read leaves no
//!   list known, so the next cycle reads it again.

use std::collections::HashMap;
use std::sync::Arc;

use redis::Value;

use super::calls;
use super::scripts::Which;
use super::sizes::Container;
use super::{
    BULK_TIMEOUT, ListRead, Reports, ReportsContent, ReportsRead, Snapshot, Store, bytes_list,
    reply_err, text_pairs,
};
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
        let mut reads = self.read_guarded(&mut lists, &keys, &listed, held).await?;
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
                self.adopt_digest(&stored);
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

    /// Records the table this holder's confirmed write left in Redis, and
    /// verifies it at once ([`verify_table_soon`](Self::verify_table_soon)):
    /// the write dirtied the table guard.
    pub fn wrote_table(&self, table: Arc<MatchingTable>) {
        self.knows_table(table);
        self.verify_table_soon();
    }

    /// Verifies the stored table in a task of its own, as the next
    /// [`read_table_state`](Self::read_table_state) would (probe the guard,
    /// read the table whole, compare it with its digest), so that the next
    /// cycle after this holder's own write finds the guard clean. Its result
    /// is dropped: what it verified lives in the guard, which vouches only
    /// for a read made after it was armed (see `guard.rs`); a failure leaves
    /// the check to the next cycle.
    fn verify_table_soon(&self) {
        let store = self.clone();
        tokio::spawn(async move {
            if let Err(e) = store.read_table_state().await {
                tracing::debug!(error = %e, "the table's early verification failed; the next cycle reads it");
            }
        });
    }

    /// Records a table whose digest is known (computed from its rows): a
    /// standby's verified copy of the stored table, so that its first cycle
    /// as a holder, which reads the table whole (its own acquisition
    /// touched `{T}:meta`, which the table guard covers), does not hash
    /// every row again.
    pub fn knows_table(&self, table: Arc<MatchingTable>) {
        table.digest();
        if let Ok(mut w) = self.known_table.lock() {
            *w = Some(table);
        }
    }

    /// A table read whole is mostly a table whose digest is known already
    /// (after this holder's own write, which dirties the table guard; or
    /// the one its standby verified): when its rows are that table's, it
    /// takes that digest instead of hashing every row (the same rows have
    /// the same digest).
    fn adopt_digest(&self, stored: &MatchingTable) {
        let known = self.known_table.lock().ok().and_then(|w| w.clone());
        if let Some(w) = known
            && w.rows() == stored.rows()
        {
            stored.set_digest(w.digest().to_string());
        }
    }

    /// The lists alone, as [`read_snapshot`](Self::read_snapshot) reads
    /// them (through the same guards and versions): a standby's warm view
    /// (`coordinator::holder::WarmView`), which its first cycle as a holder
    /// then finds read. Each services list in order, then the units list.
    pub async fn read_lists_since(
        &self,
        services: &[String],
        units_key: &str,
        held: &HashMap<String, u64>,
    ) -> Result<(Vec<ListRead>, ListRead), StoreError> {
        let keys = list_keys(services, units_key);
        let mut lists = self.lists.lock().await;
        let listed = lists.probe(&keys).await;
        let mut reads = self.read_guarded(&mut lists, &keys, &listed, held).await?;
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
    ) -> Result<Vec<ListRead>, StoreError> {
        let read = super::guard::must_read(keys, listed, held);
        let to_read: Vec<&str> = keys
            .iter()
            .zip(&read)
            .filter(|(_, r)| **r)
            .map(|(k, _)| *k)
            .collect();
        let fresh = match self.read_lists(&to_read).await {
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
    /// when `keys` is empty), and every list within the limits.
    async fn read_lists(&self, keys: &[&str]) -> Result<Vec<Vec<Vec<u8>>>, StoreError> {
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        self.sizes(keys, Container::List).await?;
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
                        .arg(self.limits.entries)
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
            self.check_read(Container::List, key, entries.len())?;
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
                self.adopt_digest(&stored);
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
        let content = self.read_reports().await;
        // Only content read whole is versioned: an error is read again.
        let version = match (
            &content.reports,
            &content.overrides,
            &content.controls,
            &content.quarantine,
        ) {
            (Ok(_), Some(Ok(_)), Some(Ok(_)), Some(Ok(_))) => Some(g.read()),
            _ => {
                g.guard.forget();
                None
            }
        };
        ReportsRead {
            version,
            content: Some(content),
        }
    }

    /// The members' reports (`{T}:members`), for the handoff, the
    /// operator's weight overrides (`{T}:weights`) and controls
    /// (`{T}:controls`), in one round trip. Never fails the cycle: each hash
    /// of the wrong type (members can write the reports) is an error of its
    /// own; the holder then treats every member as one that does not
    /// acknowledge, as having no override, or no control in force. The
    /// operator's hashes are `None` when the round trip itself failed (its
    /// error is the reports'): the holder keeps what it knew.
    pub async fn read_reports(&self) -> ReportsContent {
        let keys = [
            self.keys.members.clone(),
            self.keys.weights.clone(),
            self.keys.controls.clone(),
            self.keys.quarantine.clone(),
        ];
        let measured: Vec<&str> = keys.iter().map(String::as_str).collect();
        if let Err(e) = self.sizes(&measured, Container::Hash).await {
            return ReportsContent::failed(e);
        }
        let cmds = keys
            .iter()
            .map(|key| (key.clone(), redis::cmd("HGETALL").arg(key).to_owned()))
            .collect();
        let replies = match self
            .pipelined_lenient(self.bulk(), "read member reports", self.op_timeout, cmds)
            .await
        {
            Ok(r) => r,
            Err(e) => return ReportsContent::failed(e),
        };
        let mut replies = replies.into_iter();
        let reports = self
            .hash_reply(&keys[0], "read member reports", replies.next())
            .await;
        let overrides = self
            .hash_reply(&keys[1], "read weight overrides", replies.next())
            .await;
        let controls = self
            .hash_reply(&keys[2], "read controls", replies.next())
            .await;
        let quarantine = self
            .hash_reply(&keys[3], "read quarantined units", replies.next())
            .await;
        // Grown past a limit since measured (or not measurable): nothing
        // of this read is used, as if it had been refused before.
        for (key, read) in keys
            .iter()
            .zip([&reports, &overrides, &controls, &quarantine])
        {
            if let Err(e) = read.as_ref().map_or(Ok(()), |pairs| {
                self.check_read(Container::Hash, key, pairs.len())
            }) {
                return ReportsContent::failed(e);
            }
        }
        ReportsContent {
            reports,
            overrides: Some(overrides),
            controls: Some(controls),
            quarantine: Some(quarantine),
        }
    }

    /// One lenient `HGETALL` reply: its pairs (lossy text), or an error
    /// naming the key when it holds another type.
    pub(super) async fn hash_reply(
        &self,
        key: &str,
        op: &'static str,
        reply: Option<Value>,
    ) -> Reports {
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

    /// The stored table's digest (when intact) and generation, by
    /// `table_state.lua`; with `content_check`, the script hashes the whole
    /// table in Redis (for a Redis that does not permit WATCH).
    async fn table_state(&self, content_check: bool) -> Result<(Option<String>, u64), StoreError> {
        // A small reply: on the lease connection, never queued behind the
        // lists it runs beside.
        let mut conn = self.conn();
        let call = calls::table_state(&self.keys, content_check);
        let v: Value = self
            .bounded(
                "read table state",
                self.op_timeout,
                self.eval(Which::TableState, &call, &mut conn),
            )
            .await?;
        calls::table_stated(v)
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
