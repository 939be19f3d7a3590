//! The table and its state: the fenced commit, and the reads of the table, the
//! generation, what a holder reads before it plans (a new holding's
//! inheritance, Redis' state after a write of unknown outcome) and the
//! liveness history and suspects a standby warms up with.
//!
//! Guarantees:
//! - the table is only ever written by `commit.lua`, which checks the lease
//!   token and the fencing epoch inside Redis and writes atomically (the
//!   rows that changed, or the whole hash): a stale holder's write is
//!   rejected by Redis itself, a rows write lands only under the digest and
//!   row count its plan read and replaces only rows as it read them (an
//!   edit of another row in between is healed by the next cycle's full
//!   check, not by this write), and readers never see a half-written table;
//! - with `WaitFor` set, a write Redis applied counts as written only when
//!   the `WAIT` sent in its own pipeline, on the connection that wrote it,
//!   says enough replicas have it; otherwise it is
//!   [`Committed::Unconfirmed`], whatever happened to the connection after
//!   the script's reply;
//! - a stored counter that is not an integer below 2^53 is an error naming
//!   its key and value, never a floor.

use std::collections::HashMap;
use std::time::Duration;

use redis::Value;

use super::calls::{self, CommitReply};
use super::scripts::Which;
use super::sizes::Container;
use super::{
    BULK_TIMEOUT, Commit, Committed, Inheritance, LeaseGrant, Store, reply_err, stored_count,
};
use crate::core::suspicion::Suspect;
use crate::core::table::MatchingTable;
use crate::error::StoreError;

impl Store {
    /// The fenced, atomic write of the table and/or liveness changes.
    pub async fn commit(
        &self,
        grant: &LeaseGrant,
        c: &Commit<'_>,
    ) -> Result<Committed, StoreError> {
        let mut conn = self.conn();
        let call = calls::commit(&self.keys, grant, c);
        // A big table takes longer to transfer and apply than a renewal: the
        // budget grows with the rows sent and their bytes (measured: 10,000
        // rows of a million units apply in about 50 ms; allow 20 MB/s on a
        // loaded host).
        let (_, rows, table_bytes) = c.table_sent().unwrap_or(("", 0, 0));
        let bytes: usize = table_bytes
            + c.transit
                .unwrap_or_default()
                .iter()
                .map(|(f, v)| f.len() + v.len() + 200)
                .sum::<usize>();
        let timeout = self.op_timeout
            + Duration::from_millis((rows as u64) / 10)
            + Duration::from_millis((bytes as u64) / 20_000);
        let keys = [
            self.keys.table.as_str(),
            self.keys.liveness.as_str(),
            self.keys.meta.as_str(),
        ];
        let empty = redis::pipe();
        let wrote = self
            .write(
                "write table",
                timeout,
                &empty,
                Which::Commit,
                &call,
                &mut conn,
            )
            .await
            .and_then(|w| w.script.map(|v| (v, w.replicated)));
        let (v, replicated) = match wrote {
            Ok(r) => r,
            Err(e) => return Err(self.classify(e, &keys, "hash").await),
        };
        match calls::committed(v)? {
            CommitReply::Applied {
                generation,
                version,
            } => match replicated {
                Ok(()) => Ok(Committed::Written {
                    generation,
                    version,
                }),
                Err(error) => Ok(Committed::Unconfirmed { generation, error }),
            },
            CommitReply::Outdated { version, differs } => {
                Ok(Committed::Outdated { version, differs })
            }
            CommitReply::Fenced { reason } => Ok(Committed::Fenced { reason }),
        }
    }

    /// The whole stored table, in a `read_table` span (O(table): a cycle's
    /// costliest read, so its time is worth seeing).
    pub async fn read_table(&self) -> Result<MatchingTable, StoreError> {
        use tracing::Instrument as _;
        let span = tracing::info_span!("read_table", rows = tracing::field::Empty);
        let table = self.read_table_whole().instrument(span.clone()).await?;
        span.record("rows", table.rows().len());
        Ok(table)
    }

    async fn read_table_whole(&self) -> Result<MatchingTable, StoreError> {
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
        let measured: Vec<&str> = hashes.iter().map(|k| k.as_str()).collect();
        self.sizes(&measured, Container::Hash).await?;
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
                .arg("server")
                .arg("transit")
                .arg("reports")
                .arg("deadline_max")
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
            let read = self.hash_reply(key, "read holding", Some(reply)).await?;
            self.check_read(Container::Hash, key, read.len())?;
            pairs.push(read);
        }
        let meta = replies.next().expect("counted above");
        let (mut generation, mut version) = (0, 0);
        let (mut table_generation, mut server) = (0, None);
        let (transit_recorded, reports_recorded, deadline_recorded): (
            Option<u64>,
            Option<u64>,
            Option<u64>,
        );
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
                if let Some(Value::BulkString(raw)) = values.first() {
                    table_generation = stored_count(&k.meta, "generation", raw)?;
                }
                if let Some(Value::BulkString(raw)) = values.get(2) {
                    version = stored_count(&k.meta, "version", raw)?;
                }
                // Unreadable, they count as unrecorded: a recovery follows.
                if let Some(Value::BulkString(raw)) = values.get(3) {
                    server = std::str::from_utf8(raw)
                        .ok()
                        .and_then(crate::core::handoff::RunId::parse);
                }
                let recorded = |i: usize| match values.get(i) {
                    Some(Value::BulkString(raw)) => std::str::from_utf8(raw)
                        .ok()
                        .and_then(crate::core::count::parse_count),
                    _ => None,
                };
                transit_recorded = recorded(4);
                reports_recorded = recorded(5);
                deadline_recorded = recorded(6).filter(|d| *d > 0);
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
            table_generation,
            server,
            transit_recorded,
            reports_recorded,
            deadline_recorded,
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
}
