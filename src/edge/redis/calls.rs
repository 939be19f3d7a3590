//! The scripts' calls as Redis receives them, and their replies as the
//! store reads them: pure, and shared by the Redis store and the in-memory
//! one (`edge::memory`), so that both send the same keys and arguments and
//! read a reply the same way.
//!
//! Guarantee: a reply of an unexpected shape is an error naming the call,
//! never a default.

use std::time::Duration;

use redis::Value;

use super::{Acquisition, Claim, Commit, HolderRecord, LeaseGrant, LostLease, Renewal};
use super::{checked, int, reply_err, text};
use crate::core::handoff::RedisConnection;
use crate::core::history::HISTORY_KEPT;
use crate::core::keys::Keys;
use crate::core::table::MatchingTable;
use crate::error::StoreError;

/// One script call: its keys and its arguments, in order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ScriptCall {
    pub keys: Vec<String>,
    pub args: Vec<Vec<u8>>,
}

impl ScriptCall {
    fn key(&mut self, k: &str) -> &mut Self {
        self.keys.push(k.to_string());
        self
    }

    fn arg(&mut self, a: impl std::fmt::Display) -> &mut Self {
        self.args.push(a.to_string().into_bytes());
        self
    }

    fn bytes(&mut self, a: &[u8]) -> &mut Self {
        self.args.push(a.to_vec());
        self
    }

    /// Adds the keys and arguments to a redis-rs invocation.
    pub(super) fn load(&self, inv: &mut redis::ScriptInvocation<'_>) {
        for k in &self.keys {
            inv.key(k);
        }
        for a in &self.args {
            inv.arg(a.as_slice());
        }
    }
}

/// `acquire.lua` for `claim`, with a fresh `token` and the lease
/// connection (`client`: `<client id>[@<run id>]`, '' for none).
pub fn acquire(keys: &Keys, claim: &Claim<'_>, token: &str, client: &str) -> ScriptCall {
    let none = HolderRecord {
        token: String::new(),
        epoch: 0,
        client: RedisConnection::id(0),
    };
    let dead = claim.takeover.unwrap_or(&none);
    let mut c = ScriptCall::default();
    c.key(&keys.lease).key(&keys.epoch).key(&keys.meta);
    c.arg(token)
        .arg(claim.ttl.as_millis())
        .arg(claim.epoch_floor)
        .arg(claim.holder_id)
        .arg(claim.now_ms)
        .arg(claim.failure_threshold)
        .arg(claim.generation_floor)
        .arg(client)
        .arg(&dead.token)
        .arg(dead.epoch)
        .arg(dead.client.encode());
    c
}

/// What `acquire.lua` answered: the epoch of a lease taken, or the lease
/// as another holds it.
pub fn acquired(v: Value) -> Result<Result<u64, Acquisition>, StoreError> {
    const OP: &str = "acquire lease";
    let v = checked(v)?;
    let Value::Array(items) = &v else {
        return Err(reply_err(OP, &v));
    };
    let count = |v: &Value| int(v).filter(|n| *n >= 0).map(|n| n as u64);
    match items.as_slice() {
        [ok, epoch] if int(ok) == Some(1) => Ok(Ok(count(epoch).ok_or_else(|| reply_err(OP, &v))?)),
        [ok, pttl, holder, epoch, generation, foreign, token, client] if int(ok) == Some(0) => {
            let epoch = count(epoch).ok_or_else(|| reply_err(OP, &v))?;
            let client = text(client).as_deref().and_then(RedisConnection::decode);
            let record = match (text(token), client) {
                (Some(token), Some(client)) if !token.is_empty() => Some(HolderRecord {
                    token,
                    epoch,
                    client,
                }),
                _ => None,
            };
            Ok(Err(Acquisition::Held {
                pttl: count(pttl).map(Duration::from_millis),
                holder: text(holder).unwrap_or_default(),
                epoch,
                generation: count(generation).ok_or_else(|| reply_err(OP, &v))?,
                foreign: text(foreign).filter(|f| !f.is_empty()),
                record,
            }))
        }
        _ => Err(reply_err(OP, &v)),
    }
}

/// `renew.lua` for `grant`.
pub fn renew(keys: &Keys, grant: &LeaseGrant, ttl: Duration, client: &str) -> ScriptCall {
    let mut c = ScriptCall::default();
    c.key(&keys.lease).key(&keys.epoch).key(&keys.meta);
    c.arg(&grant.token)
        .arg(grant.epoch)
        .arg(ttl.as_millis())
        .arg(client);
    c
}

/// What `renew.lua` answered.
pub fn renewed(v: &Value) -> Result<Renewal, StoreError> {
    match v {
        Value::Array(items) => match items.as_slice() {
            [ok] if int(ok) == Some(1) => Ok(Renewal::Renewed),
            [ok, why] if int(ok) == Some(0) => Ok(Renewal::Lost(LostLease::from_reason(
                &text(why).unwrap_or_default(),
            ))),
            _ => Err(reply_err("renew lease", v)),
        },
        _ => Err(reply_err("renew lease", v)),
    }
}

/// `release.lua` for `grant`.
pub fn release(keys: &Keys, grant: &LeaseGrant) -> ScriptCall {
    let mut c = ScriptCall::default();
    c.key(&keys.lease).key(&keys.meta);
    c.arg(&grant.token)
        .arg(grant.epoch)
        .arg(&keys.lease_channel);
    c
}

/// What `release.lua` answered: whether the lease was ours.
pub fn released(v: &Value) -> Result<bool, StoreError> {
    int(v)
        .map(|n| n == 1)
        .ok_or_else(|| reply_err("release lease", v))
}

/// `commit.lua` for `c` under `grant`.
pub fn commit(keys: &Keys, grant: &LeaseGrant, c: &Commit<'_>) -> ScriptCall {
    let mut call = ScriptCall::default();
    call.key(&keys.table)
        .key(&keys.meta)
        .key(&keys.epoch)
        .key(&keys.lease)
        .key(&keys.liveness)
        .key(&keys.suspects)
        .key(&keys.transit)
        .key(&keys.changes);
    // A table with its delta goes as the rows that differ.
    let delta = c.delta.filter(|_| c.table.is_some());
    let digest = c.table.map(MatchingTable::digest).unwrap_or_default();
    // The history entry goes with a table write only.
    let history = c.history.filter(|_| c.table.is_some()).unwrap_or_default();
    let (mode, rows) = match (&delta, c.table) {
        (Some(d), _) => ("2", d.written.len()),
        (None, Some(t)) => ("1", t.len()),
        (None, None) => ("0", 0),
    };
    call.arg(&grant.token)
        .arg(grant.epoch)
        .arg(c.generation_floor)
        .arg(digest)
        .arg(c.now_ms)
        .arg(c.holder_id)
        .arg(&keys.table_channel)
        .arg(mode)
        .arg(rows)
        .arg(c.health.set.len())
        .arg(c.health.removed.len())
        .arg(c.suspects.set.len())
        .arg(c.suspects.removed.len())
        .arg(if c.transit.is_some() { "1" } else { "0" })
        .arg(c.transit.map_or(0, <[_]>::len))
        .arg(c.assignment)
        .arg(c.last_change.unwrap_or(""))
        .arg(c.expected_version.map_or(String::new(), |v| v.to_string()))
        .arg(history.len())
        .arg(HISTORY_KEPT)
        .arg(delta.map_or("", |d| d.base_digest))
        .arg(delta.map_or(0, |d| d.removed.len()))
        .arg(c.server.map_or_else(String::new, |s| s.to_string()))
        .arg(c.reports)
        .arg(c.deadline_max.as_millis() as u64);
    match (&delta, c.table) {
        (Some(d), _) => {
            for r in &d.written {
                call.arg(r.member)
                    .arg(r.units)
                    .arg(r.replaces.as_deref().unwrap_or(""));
            }
            for r in &d.removed {
                call.arg(r.member).arg(r.replaces.as_deref().unwrap_or(""));
            }
        }
        (None, Some(t)) => {
            for (member, units) in t.rows() {
                call.arg(member).arg(units);
            }
        }
        (None, None) => {}
    }
    for (member, h) in &c.health.set {
        call.arg(member).arg(h.encode());
    }
    for member in &c.health.removed {
        call.arg(member);
    }
    for (member, s) in &c.suspects.set {
        call.arg(member).arg(s.encode());
    }
    for member in &c.suspects.removed {
        call.arg(member);
    }
    for (field, value) in c.transit.unwrap_or_default() {
        call.arg(field).arg(value);
    }
    for (field, value) in history {
        call.arg(*field).arg(value);
    }
    call
}

/// What `commit.lua` answered, before the write's replication is known.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CommitReply {
    /// Applied: the table's new generation (`None`: no table written) and
    /// `{T}:meta`'s new version.
    Applied {
        generation: Option<u64>,
        version: u64,
    },
    /// Refused before any write: `{T}:meta`'s version is not the expected
    /// one, or (`differs`) a rows write's base is not what Redis holds.
    Outdated {
        version: u64,
        differs: Option<String>,
    },
    /// Refused: the lease or the epoch is not the caller's.
    Fenced { reason: String },
}

/// Reads `commit.lua`'s reply.
pub fn committed(v: Value) -> Result<CommitReply, StoreError> {
    const OP: &str = "write table";
    let v = checked(v)?;
    let Value::Array(items) = &v else {
        return Err(reply_err(OP, &v));
    };
    match items.as_slice() {
        [ok, g, version] if int(ok) == Some(1) => {
            let g = int(g).ok_or_else(|| reply_err(OP, &v))?;
            let version = int(version)
                .filter(|v| *v > 0)
                .ok_or_else(|| reply_err(OP, &v))? as u64;
            Ok(CommitReply::Applied {
                generation: (g >= 0).then_some(g as u64),
                version,
            })
        }
        [code, version, rest @ ..] if int(code) == Some(-4) && rest.len() <= 1 => {
            Ok(CommitReply::Outdated {
                version: int(version)
                    .filter(|v| *v >= 0)
                    .ok_or_else(|| reply_err(OP, &v))? as u64,
                differs: match rest {
                    [what] => Some(text(what).ok_or_else(|| reply_err(OP, &v))?),
                    _ => None,
                },
            })
        }
        [ok, reason] if int(ok) == Some(0) => Ok(CommitReply::Fenced {
            reason: text(reason).unwrap_or_default(),
        }),
        _ => Err(reply_err(OP, &v)),
    }
}

/// `table_state.lua`; `content_check`: hash the table in Redis.
pub fn table_state(keys: &Keys, content_check: bool) -> ScriptCall {
    let mut c = ScriptCall::default();
    c.key(&keys.table).key(&keys.meta);
    c.arg(if content_check { "1" } else { "0" });
    c
}

/// What `table_state.lua` answered: the digest of an intact table, and the
/// generation.
pub fn table_stated(v: Value) -> Result<(Option<String>, u64), StoreError> {
    const OP: &str = "read table state";
    match checked(v)? {
        Value::Array(v) if v.len() == 2 => {
            let generation = match &v[1] {
                Value::Nil => 0,
                g => int(g).filter(|g| *g >= 0).ok_or_else(|| reply_err(OP, g))? as u64,
            };
            Ok((text(&v[0]), generation))
        }
        other => Err(reply_err(OP, &other)),
    }
}

/// `forget.lua` under `grant` for `pairs` (list, entry); `lists`: the
/// lists whose entries go too (sorted), else only the reports.
pub fn forget(
    keys: &Keys,
    grant: &LeaseGrant,
    pairs: &[&(String, Vec<u8>)],
    lists: &[&str],
) -> ScriptCall {
    let mut c = ScriptCall::default();
    c.key(&keys.lease)
        .key(&keys.epoch)
        .key(&keys.members)
        .key(&keys.loads);
    for l in lists {
        c.key(l);
    }
    c.arg(&grant.token).arg(grant.epoch);
    for (list, entry) in pairs {
        let n = lists.binary_search(&list.as_str()).map_or(0, |i| i + 1);
        c.arg(n).bytes(entry);
    }
    c
}

/// What `forget.lua` answered: the pairs whose list entry it removed.
pub fn forgotten(
    v: Value,
    pairs: &[&(String, Vec<u8>)],
) -> Result<Vec<(String, Vec<u8>)>, StoreError> {
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

/// `quarantine.lua` under `grant` for `records` (unit, encoded record).
pub fn quarantine(keys: &Keys, grant: &LeaseGrant, records: &[(String, String)]) -> ScriptCall {
    let mut c = ScriptCall::default();
    c.key(&keys.lease).key(&keys.epoch).key(&keys.quarantine);
    c.arg(&grant.token).arg(grant.epoch);
    for (unit, record) in records {
        c.arg(unit).arg(record);
    }
    c
}

/// What `quarantine.lua` answered: how many units were new to the hash.
pub fn quarantined(v: Value) -> Result<u64, StoreError> {
    const OP: &str = "record quarantined units";
    match checked(v)? {
        Value::Array(items) if items.len() == 2 && int(&items[0]) == Some(1) => int(&items[1])
            .filter(|n| *n >= 0)
            .map(|n| n as u64)
            .ok_or_else(|| reply_err(OP, &items[1])),
        Value::Array(items) if int(&items[0]) == Some(0) => Err(StoreError::Fenced {
            op: OP,
            reason: items.get(1).and_then(text).unwrap_or_default(),
        }),
        other => Err(reply_err(OP, &other)),
    }
}
