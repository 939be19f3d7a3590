//! Lookups outside the holder's cycle: everything an operator asks about (the
//! `status` and `table` commands, the HTTP API), in one pipelined round trip,
//! and whether a refused member's Redis connections are gone. They only read;
//! whether a connection is gone is `None`, never a guess, when Redis cannot
//! tell.

use std::collections::HashSet;
use std::time::Duration;

use redis::Value;

use super::{BULK_TIMEOUT, Store, bytes_list, int, refused_commands, reply_err, text, text_pairs};
use crate::core::handoff::{MemberReport, RedisConnection, RunId};
use crate::core::status::Overview;
use crate::error::StoreError;

impl Store {
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
        let mut conn = self.conn();
        if !conn.is_one_node() {
            return Ok(None);
        }
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
        let Some((server, open)) = self
            .open_connections("look for a member's connection", &named, true)
            .await?
        else {
            return Ok(None);
        };
        Ok(Some(named.iter().all(|c| {
            c.elsewhere_than(server) || !open.contains(&c.client)
        })))
    }

    /// Which of `named`'s client ids the server has a connection of, with
    /// its run id (`None` where Redis refuses `INFO`, or `ask_server` is
    /// false): `MULTI; INFO server; CLIENT LIST ID …; EXEC`, so both answers
    /// come from one server. `None` where Redis refuses `CLIENT` or cannot
    /// list by id (before 6.2).
    pub(super) async fn open_connections(
        &self,
        op: &'static str,
        named: &[RedisConnection],
        ask_server: bool,
    ) -> Result<Option<(Option<RunId>, HashSet<u64>)>, StoreError> {
        let mut conn = self.conn();
        loop {
            let info = ask_server && self.server_info.allowed();
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
                .bounded(op, self.op_timeout, pipe.query_async(&mut conn))
                .await
            {
                Ok(v) => v,
                Err(StoreError::Redis { source, .. })
                    if info && refused_commands(&source).is_some_and(|at| at == [0]) =>
                {
                    self.server_info.refused();
                    tracing::warn!(
                        "INFO is not permitted: Redis connections (a member's, the lease holder's) are looked for by client id alone, so after a Redis failover or restart a refused member's units may wait for its deadline, and a standby waits out the lease of a holder that named its server (asked again in a minute)"
                    );
                    continue;
                }
                Err(e) if super::lease::refusal(&e).is_some() => return Ok(None),
                Err(StoreError::Redis { source, .. })
                    if refused_commands(&source).is_some() || too_old(&source) =>
                {
                    return Ok(None);
                }
                Err(e) => return Err(e),
            };
            let whole = || reply_err(op, &Value::Array(replies.clone()));
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
            on("HGETALL", &k.costs),
            on("HGETALL", &k.loads),
            on("HGETALL", &k.controls),
            on("HGETALL", &k.quarantine),
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
        let costs = lenient(next());
        let loads = lenient(next());
        let controls = lenient(next());
        let quarantine = lenient(next());
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
            costs,
            loads,
            controls,
            quarantine,
        })
    }
}

/// Whether a transaction's error says `CLIENT LIST ID` is unknown to this
/// Redis (before 6.2, inside `MULTI`: a syntax error at `EXEC`).
fn too_old(e: &redis::RedisError) -> bool {
    e.clone().into_server_errors().is_some_and(|errors| {
        errors
            .iter()
            .any(|(_, e)| e.details().is_some_and(|d| d.contains("syntax error")))
    })
}
