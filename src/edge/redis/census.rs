//! The census step: how many replicas share the distribution, counted in
//! Redis by interval (the pure counting rules are in `core::census`).
//!
//! Guarantees:
//! - one pipelined round trip per step (`INCR` this interval's counter, read
//!   the previous one, record this replica's report), on the bulk connection
//!   so a big replicas hash never queues a lease renewal;
//! - every key it writes expires on its own, and reports of replicas silent
//!   for ten intervals are pruned.

use std::collections::HashMap;
use std::time::Duration;

use super::Store;
use crate::core::census::CensusReply;
use crate::error::StoreError;

impl Store {
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
}
