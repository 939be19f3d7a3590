//! A member's own keys in the handoff protocol: the read of its row (with
//! the generation and the Redis connection it went over: client id and the
//! server's run id),
//! its report in `{T}:members` (with the `{T}:acked` hint), its removal, and
//! the look at `{T}:transit` that tells a draining member whether the holder
//! still waits on it.
//!
//! Guarantees:
//! - every call is bounded by the store's call deadline (the transit read by
//!   the bulk one) and returns a classified [`StoreError`];
//! - the row, the generation, the client id and the run id come from one
//!   transaction on one connection, so they name the connection the row was
//!   read on and the server it is on; where Redis refuses `CLIENT ID` or
//!   `INFO` (an ACL, a renamed command) that is remembered and logged, and
//!   rows are read without it for a minute before it is asked again (an ACL
//!   fixed meanwhile takes effect without a restart; without a client id, no
//!   run id is asked either); on Redis Cluster neither is asked (a command without
//!   a key may go to another node than the row's);
//! - the report is encoded by [`MemberReport::encode`], the one stored form
//!   the holder decodes.

use super::{BULK_TIMEOUT, Store, refused_commands, stored_count};
use crate::core::handoff::{HeldReport, MemberReport, RedisConnection, RunId, Transit};
use crate::edge::clock;
use crate::error::StoreError;

/// A member's row as [`Store::read_row`] read it.
#[derive(Debug)]
pub struct RowRead {
    /// The row (`None`: no field, not a member now).
    pub row: Option<String>,
    /// The table generation (`None`: `{T}:meta` has none, it was lost or
    /// removed: unknown, never 0); one that is not a valid counter is its
    /// own error, so that a reader can still follow its row.
    pub generation: Result<Option<u64>, StoreError>,
    /// The Redis connection the read went over (`None`: on a cluster, or
    /// where Redis does not let us ask its client id).
    pub client: Option<RedisConnection>,
}

/// What a row read asks besides the row and the generation.
#[derive(Clone, Copy)]
struct Asked {
    /// `CLIENT ID` (position 2).
    client: bool,
    /// `INFO server`, for the run id (position 3; only with the client id).
    server: bool,
}

impl Store {
    /// `member`'s row, the table generation and the connection they were
    /// read on: `MULTI; HGET <table> <member>; HGET {T}:meta generation;
    /// CLIENT ID; INFO server; EXEC` (without `CLIENT ID` and `INFO` on a
    /// cluster or once Redis refused it; without `INFO` once Redis refused
    /// that).
    pub async fn read_row(&self, member: &str) -> Result<RowRead, StoreError> {
        let k = &self.keys;
        let mut conn = self.conn();
        let single = conn.is_one_node();
        let transaction = |asked: Asked| {
            let mut pipe = redis::pipe();
            pipe.atomic();
            pipe.cmd("HGET").arg(&k.table).arg(member);
            pipe.cmd("HGET").arg(&k.meta).arg("generation");
            if asked.client {
                pipe.cmd("CLIENT").arg("ID");
                if asked.server {
                    pipe.cmd("INFO").arg("server");
                }
            }
            pipe
        };
        type Read = (Option<String>, Option<Vec<u8>>, Option<u64>, Option<String>);
        let run = async {
            loop {
                let asked = Asked {
                    client: single && self.row_client.allowed(),
                    server: self.server_info.allowed(),
                };
                let pipe = transaction(asked);
                let result: redis::RedisResult<Read> = match asked {
                    Asked { client: false, .. } => pipe
                        .query_async::<(Option<String>, Option<Vec<u8>>)>(&mut conn)
                        .await
                        .map(|(r, g)| (r, g, None, None)),
                    Asked { server: false, .. } => pipe
                        .query_async::<(Option<String>, Option<Vec<u8>>, u64)>(&mut conn)
                        .await
                        .map(|(r, g, c)| (r, g, Some(c), None)),
                    // INFO as bytes: a path in it need not be UTF-8.
                    _ => pipe
                        .query_async::<(Option<String>, Option<Vec<u8>>, u64, Vec<u8>)>(&mut conn)
                        .await
                        .map(|(r, g, c, i)| {
                            (
                                r,
                                g,
                                Some(c),
                                Some(String::from_utf8_lossy(&i).into_owned()),
                            )
                        }),
                };
                let refused = match result {
                    Ok(read) => return Ok(read),
                    Err(e) if asked.client => match refused_commands(&e) {
                        Some(at) if at.iter().all(|i| *i == 2 || *i == 3) => at,
                        _ => return Err(e),
                    },
                    Err(e) => return Err(e),
                };
                if refused.contains(&2) {
                    self.row_client.refused();
                    tracing::warn!(
                        member,
                        "CLIENT ID is not permitted: this member's reports name no Redis connection, so a refusal of this member's address will not move its units before its deadline (asked again in a minute)"
                    );
                } else {
                    self.server_info.refused();
                    tracing::warn!(
                        member,
                        "INFO is not permitted: this member's reports name its Redis connection by client id alone, so after a Redis failover or restart a refusal of its address may wait for its deadline before its units move (asked again in a minute)"
                    );
                }
            }
        };
        match self.bounded("read row", self.op_timeout, run).await {
            Ok((row, g, client, info)) => Ok(RowRead {
                row,
                generation: g
                    .map(|raw| stored_count(&k.meta, "generation", &raw))
                    .transpose(),
                client: client.map(|id| RedisConnection {
                    client: id,
                    server: info.as_deref().and_then(RunId::from_info),
                }),
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
        let mut cmds = vec![self.report_hset(member, report)];
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

    /// `HSET {T}:members member report`, with the key it goes to.
    fn report_hset(&self, member: &str, report: &MemberReport) -> (String, redis::Cmd) {
        let members = &self.keys.members;
        let cmd = redis::cmd("HSET")
            .arg(members)
            .arg(member)
            .arg(report.encode())
            .to_owned();
        (members.clone(), cmd)
    }

    /// Writes `member`'s statement for a holder's recovery (`HSET
    /// {T}:held`) and its last report again (`report`: Redis may have lost
    /// it, and the holder learns from it that this member speaks the
    /// protocol, with which deadline), then publishes its id on
    /// `{T}:acked` (a hint for the holder to look now), in the same round
    /// trip.
    pub async fn write_held(
        &self,
        member: &str,
        held: &HeldReport,
        report: Option<&MemberReport>,
    ) -> Result<(), StoreError> {
        let k = &self.keys;
        let mut cmds = vec![(
            k.held.clone(),
            redis::cmd("HSET")
                .arg(&k.held)
                .arg(member)
                .arg(held.encode())
                .to_owned(),
        )];
        if let Some(r) = report {
            cmds.push(self.report_hset(member, r));
        }
        cmds.push((
            k.held.clone(),
            redis::cmd("PUBLISH")
                .arg(&k.acked_channel)
                .arg(member)
                .to_owned(),
        ));
        match self
            .pipelined(self.conn(), "write held", self.op_timeout, cmds)
            .await
        {
            Ok(_) => Ok(()),
            Err(e) => Err(self.classify(e, &[&k.held, &k.members], "hash").await),
        }
    }

    /// The members' statements for a holder's recovery (`{T}:held`),
    /// undecoded, on the bulk connection (a statement may name thousands of
    /// units).
    pub async fn read_held(&self) -> Result<Vec<(String, String)>, StoreError> {
        let mut conn = self.bulk();
        let cmd = redis::cmd("HGETALL").arg(&self.keys.held).to_owned();
        match self
            .bounded("read held", BULK_TIMEOUT, cmd.query_async(&mut conn))
            .await
        {
            Ok(v) => Ok(v),
            Err(e) => Err(self.classify(e, &[&self.keys.held], "hash").await),
        }
    }

    /// Writes each (member, report) back to `{T}:members` where the member
    /// has none (`HSETNX`, one pipeline): reports Redis lost, that the
    /// holder knew. A member that wrote its own since keeps it.
    pub async fn restore_reports(&self, reports: &[(String, String)]) -> Result<(), StoreError> {
        let k = &self.keys;
        let cmds = reports
            .iter()
            .map(|(m, r)| {
                (
                    k.members.clone(),
                    redis::cmd("HSETNX")
                        .arg(&k.members)
                        .arg(m)
                        .arg(r)
                        .to_owned(),
                )
            })
            .collect();
        match self
            .pipelined(self.conn(), "restore reports", self.op_timeout, cmds)
            .await
        {
            Ok(_) => Ok(()),
            Err(e) => Err(self.classify(e, &[&k.members], "hash").await),
        }
    }

    /// The run id of the Redis server the lease connection is on, as the
    /// last acquisition or renewal that asked learnt it (kept across a
    /// reconnect until the next one asks: after a failover it may name the
    /// old server for one renewal, which makes members ignore their reads
    /// meanwhile, never count one of another server). `None`: never
    /// learnt (`INFO` not permitted, a cluster).
    pub fn server(&self) -> Option<RunId> {
        *self.server_seen.lock().expect("server seen poisoned")
    }

    /// Finds the master again: where the sentinels name one, the next call
    /// asks them (a member that reads another server than the holder's,
    /// an old master still answering); elsewhere the next call reconnects
    /// to the same node.
    pub fn find_master_again(&self) {
        self.reconnect();
    }

    /// Removes `member`'s report (`HDEL {T}:members`), and its statement for
    /// a recovery (`{T}:held`).
    pub async fn remove_report(&self, member: &str) -> Result<(), StoreError> {
        let mut conn = self.conn();
        let mut cmd = redis::pipe();
        cmd.cmd("HDEL")
            .arg(&self.keys.members)
            .arg(member)
            .ignore()
            .cmd("HDEL")
            .arg(&self.keys.held)
            .arg(member)
            .ignore();
        match self
            .bounded(
                "remove report",
                self.op_timeout,
                cmd.query_async::<()>(&mut conn),
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
        // HGETALL rather than HVALS: the minimal ACL (`docs/protocol.md`) permits it.
        let mut conn = self.bulk();
        let cmd = redis::cmd("HGETALL").arg(&self.keys.transit).to_owned();
        let entries: Vec<(Vec<u8>, Vec<u8>)> = match self
            .bounded("read transit", BULK_TIMEOUT, cmd.query_async(&mut conn))
            .await
        {
            Ok(v) => v,
            Err(e) => return Err(self.classify(e, &[&self.keys.transit], "hash").await),
        };
        let now = clock::now();
        Ok(entries.iter().any(|(_, raw)| {
            let value = String::from_utf8_lossy(raw);
            match Transit::decode(&value, now) {
                Some(t) => t.from.contains_key(member),
                None => value.contains(member),
            }
        }))
    }
}
