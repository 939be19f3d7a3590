//! A member's own keys in the handoff protocol: the read of its row (with
//! the generation and the Redis client id of the connection it went over),
//! its report in `{T}:members` (with the `{T}:acked` hint), its removal, and
//! the look at `{T}:transit` that tells a draining member whether the holder
//! still waits on it.
//!
//! Guarantees:
//! - every call is bounded by the store's call deadline (the transit read by
//!   the bulk one) and returns a classified [`StoreError`];
//! - the row, the generation and the client id come from one transaction on
//!   one connection, so the client id names the connection the row was read
//!   on; where Redis refuses `CLIENT ID` (an ACL, a renamed command) that is
//!   remembered, logged once, and rows are read without it from then on; on
//!   Redis Cluster it is never asked (a command without a key may go to
//!   another node than the row's);
//! - the report is encoded by [`MemberReport::encode`], the one stored form
//!   the holder decodes.

use std::sync::atomic::Ordering::Relaxed;

use tokio::time::Instant;

use super::conn::Conn;
use super::{BULK_TIMEOUT, Store, stored_count};
use crate::core::handoff::{MemberReport, Transit};
use crate::error::StoreError;

/// A member's row as [`Store::read_row`] read it.
#[derive(Debug)]
pub struct RowRead {
    /// The row (`None`: no field, not a member now).
    pub row: Option<String>,
    /// The table generation; one that is not a valid counter is its own
    /// error, so that a reader can still follow its row.
    pub generation: Result<u64, StoreError>,
    /// The Redis client id of the connection the read went over (`None`: on
    /// a cluster, or where Redis does not let us ask).
    pub client: Option<u64>,
}

/// Whether a transaction failed only because Redis refused its `CLIENT ID`
/// (at position `at`): not permitted (`NOPERM`), or unknown (renamed or
/// disabled). Redis then discards the whole transaction (`EXECABORT`).
fn client_id_refused(e: &redis::RedisError, at: usize) -> bool {
    let Some(errors) = e.clone().into_server_errors() else {
        return false;
    };
    !errors.is_empty()
        && errors.iter().all(|(i, e)| {
            *i == at
                && (e.code() == "NOPERM"
                    || e.details().is_some_and(|d| {
                        d.contains("unknown command") || d.contains("unknown subcommand")
                    }))
        })
}

impl Store {
    /// `member`'s row, the table generation and the client id of the
    /// connection they were read on: `MULTI; HGET <table> <member>; HGET
    /// {T}:meta generation; CLIENT ID; EXEC` (without `CLIENT ID` on a
    /// cluster, or once Redis refused it).
    pub async fn read_row(&self, member: &str) -> Result<RowRead, StoreError> {
        let k = &self.keys;
        let mut conn = self.conn();
        let ask = matches!(conn, Conn::Single(_)) && self.row_client.load(Relaxed);
        let transaction = |client_id: bool| {
            let mut pipe = redis::pipe();
            pipe.atomic();
            pipe.cmd("HGET").arg(&k.table).arg(member);
            pipe.cmd("HGET").arg(&k.meta).arg("generation");
            if client_id {
                pipe.cmd("CLIENT").arg("ID");
            }
            pipe
        };
        let run = async {
            if ask {
                type WithId = (Option<String>, Option<Vec<u8>>, u64);
                match transaction(true).query_async::<WithId>(&mut conn).await {
                    Ok((row, g, id)) => return Ok((row, g, Some(id))),
                    Err(e) if client_id_refused(&e, 2) => {
                        self.row_client.store(false, Relaxed);
                        tracing::warn!(
                            member,
                            error = %e,
                            "CLIENT ID is not permitted: this member's reports name no Redis connection, so a refusal of this member's address will not move its units before its deadline"
                        );
                    }
                    Err(e) => return Err(e),
                }
            }
            type WithoutId = (Option<String>, Option<Vec<u8>>);
            let (row, g) = transaction(false)
                .query_async::<WithoutId>(&mut conn)
                .await?;
            Ok((row, g, None))
        };
        match self.bounded("read row", self.op_timeout, run).await {
            Ok((row, g, client)) => Ok(RowRead {
                row,
                generation: match g {
                    None => Ok(0),
                    Some(raw) => stored_count(&k.meta, "generation", &raw),
                },
                client,
            }),
            Err(e) => {
                let keys = [k.table.as_str(), k.meta.as_str()];
                Err(self.classify(e, &keys, "hash").await)
            }
        }
    }

    /// Writes `member`'s report (`HSET {T}:members`); with `announce`, then
    /// publishes its id on `{T}:acked` (a hint for the holder to look now),
    /// in the same round trip.
    pub async fn write_report(
        &self,
        member: &str,
        report: &MemberReport,
        announce: bool,
    ) -> Result<(), StoreError> {
        let k = &self.keys;
        let mut cmds = vec![(
            k.members.clone(),
            redis::cmd("HSET")
                .arg(&k.members)
                .arg(member)
                .arg(report.encode())
                .to_owned(),
        )];
        if announce {
            // Same hash tag as the report: one slot, one pipeline.
            cmds.push((
                k.members.clone(),
                redis::cmd("PUBLISH")
                    .arg(&k.acked_channel)
                    .arg(member)
                    .to_owned(),
            ));
        }
        match self
            .pipelined(self.conn(), "write report", self.op_timeout, cmds)
            .await
        {
            Ok(_) => Ok(()),
            Err(e) => Err(self.classify(e, &[&k.members], "hash").await),
        }
    }

    /// Removes `member`'s report (`HDEL {T}:members`).
    pub async fn remove_report(&self, member: &str) -> Result<(), StoreError> {
        let mut conn = self.conn();
        let cmd = redis::cmd("HDEL")
            .arg(&self.keys.members)
            .arg(member)
            .to_owned();
        match self
            .bounded(
                "remove report",
                self.op_timeout,
                cmd.query_async::<i64>(&mut conn),
            )
            .await
        {
            Ok(_) => Ok(()),
            Err(e) => Err(self.classify(e, &[&self.keys.members], "hash").await),
        }
    }

    /// Whether a unit in transit (`{T}:transit`) was revoked from `member`
    /// and not released yet: the holder still waits on it. An entry that
    /// does not decode counts when it names `member` anywhere.
    pub async fn transit_waits_on(&self, member: &str) -> Result<bool, StoreError> {
        // HGETALL rather than HVALS: the minimal ACL (README) permits it.
        let mut conn = self.bulk();
        let cmd = redis::cmd("HGETALL").arg(&self.keys.transit).to_owned();
        let entries: Vec<(Vec<u8>, Vec<u8>)> = match self
            .bounded("read transit", BULK_TIMEOUT, cmd.query_async(&mut conn))
            .await
        {
            Ok(v) => v,
            Err(e) => return Err(self.classify(e, &[&self.keys.transit], "hash").await),
        };
        let now = Instant::now();
        Ok(entries.iter().any(|(_, raw)| {
            let value = String::from_utf8_lossy(raw);
            match Transit::decode(&value, now) {
                Some(t) => t.from.contains_key(member),
                None => value.contains(member),
            }
        }))
    }
}
