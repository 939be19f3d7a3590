//! A member's own keys in the handoff protocol: its report in `{T}:members`
//! (with the `{T}:acked` hint), its removal, and the look at `{T}:transit`
//! that tells a draining member whether the holder still waits on it.
//!
//! Guarantees:
//! - every call is bounded by the store's call deadline (the transit read by
//!   the bulk one) and returns a classified [`StoreError`];
//! - the report is encoded by [`MemberReport::encode`], the one stored form
//!   the holder decodes.

use tokio::time::Instant;

use super::{BULK_TIMEOUT, Store};
use crate::core::handoff::{MemberReport, Transit};
use crate::error::StoreError;

impl Store {
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
