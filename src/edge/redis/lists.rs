//! The lists: a member's registration, the operator's list edits and reads,
//! and `-forget-after`'s fenced removals.
//!
//! Guarantees:
//! - adding is one Lua script (`LPOS`, then push): atomic and idempotent, so a
//!   retry or a restart never lists an entry twice;
//! - replacing a list is atomic, and a key of another type is refused and
//!   left alone;
//! - a forgotten entry is removed only while the caller holds the lease:
//!   Redis checks token and epoch in the same script as the `LREM`s (on a
//!   cluster, for lists outside the table's slot, just before them).

use redis::Value;

use super::calls::{self, ScriptCall};
use super::scripts::Which;
use super::{BULK_TIMEOUT, Conn, LeaseGrant, Store, bytes_list, checked, int, reply_err};
use crate::error::StoreError;

impl Store {
    /// Adds `member` to `services_key` unless it is listed already (atomic).
    pub async fn register(&self, services_key: &str, member: &str) -> Result<bool, StoreError> {
        self.push_once(services_key, member, "LPUSH").await
    }

    async fn push_once(&self, key: &str, value: &str, push: &str) -> Result<bool, StoreError> {
        let mut conn = self.conn();
        let call = ScriptCall {
            keys: vec![key.to_string()],
            args: vec![value.as_bytes().to_vec(), push.as_bytes().to_vec()],
        };
        let added = self
            .bounded(
                "add to list",
                self.op_timeout,
                self.eval(Which::Register, &call, &mut conn),
            )
            .await;
        match added.and_then(|v| int(&v).ok_or_else(|| reply_err("add to list", &v))) {
            Ok(n) => Ok(n == 1),
            Err(e) => Err(self.classify(e, &[key], "list").await),
        }
    }

    /// Removes every occurrence of `member` from `services_key`.
    pub async fn deregister(&self, services_key: &str, member: &str) -> Result<bool, StoreError> {
        Ok(self.remove_all(services_key, member).await? > 0)
    }

    /// Appends `value` to the list `key` unless it is there already (atomic).
    pub async fn add_once(&self, key: &str, value: &str) -> Result<bool, StoreError> {
        self.push_once(key, value, "RPUSH").await
    }

    /// Removes every occurrence of `value` from the list `key`.
    pub async fn remove_all(&self, key: &str, value: &str) -> Result<usize, StoreError> {
        self.remove_all_bytes(key, value.as_bytes()).await
    }

    async fn remove_all_bytes(&self, key: &str, value: &[u8]) -> Result<usize, StoreError> {
        let mut conn = self.conn();
        let cmd = redis::cmd("LREM").arg(key).arg(0).arg(value).to_owned();
        match self
            .bounded(
                "remove from list",
                self.op_timeout,
                cmd.query_async::<usize>(&mut conn),
            )
            .await
        {
            Ok(n) => Ok(n),
            Err(e) => Err(self.classify(e, &[key], "list").await),
        }
    }

    /// Replaces the whole list `key` with `values`, atomically; a key of
    /// another type is refused (and left alone).
    pub async fn replace_list(&self, key: &str, values: &[String]) -> Result<(), StoreError> {
        let mut conn = self.conn();
        let call = ScriptCall {
            keys: vec![key.to_string()],
            args: values.iter().map(|v| v.as_bytes().to_vec()).collect(),
        };
        let v: Value = self
            .bounded(
                "replace list",
                BULK_TIMEOUT,
                self.eval(Which::ReplaceList, &call, &mut conn),
            )
            .await?;
        match checked(v)? {
            Value::Int(_) => Ok(()),
            other => Err(reply_err("replace list", &other)),
        }
    }

    /// A list's entries, as bytes (entries need not be UTF-8).
    pub async fn list(&self, key: &str) -> Result<Vec<Vec<u8>>, StoreError> {
        let mut conn = self.bulk();
        let cmd = redis::cmd("LRANGE").arg(key).arg(0).arg(-1).to_owned();
        match self
            .bounded(
                "read list",
                BULK_TIMEOUT,
                cmd.query_async::<Value>(&mut conn),
            )
            .await
        {
            Ok(v) => Ok(bytes_list(v)),
            Err(e) => Err(self.classify(e, &[key], "list").await),
        }
    }

    /// Removes each `(list, entry)` pair for `-forget-after`, fenced by the
    /// lease: Redis checks token and epoch in the same script as the `LREM`s.
    /// Returns the pairs that were listed. On Redis Cluster a list outside the
    /// table's slot cannot share that script: its `LREM` follows a fenced check
    /// on the table's slot instead (a window of one round trip).
    pub async fn forget_many(
        &self,
        grant: &LeaseGrant,
        pairs: &[(String, Vec<u8>)],
    ) -> Result<Vec<(String, Vec<u8>)>, StoreError> {
        let cluster = matches!(self.conn(), Conn::Cluster(_));
        let table_slot = crate::core::keys::slot(&self.keys.table);
        type Pairs<'p> = Vec<&'p (String, Vec<u8>)>;
        let (near, far): (Pairs, Pairs) = pairs
            .iter()
            .partition(|(list, _)| !cluster || crate::core::keys::slot(list) == table_slot);
        let mut removed = Vec::new();
        if !near.is_empty() {
            removed.extend(self.forget_fenced(grant, &near, true).await?);
        }
        for pair @ (list, entry) in far {
            // The fencing check (and the report's removal) in the table's
            // slot, then the list's own LREM.
            if self.forget_fenced(grant, &[pair], false).await.is_ok() {
                let n = self.remove_all_bytes(list, entry).await?;
                if n > 0 {
                    removed.push((list.clone(), entry.clone()));
                }
            }
        }
        Ok(removed)
    }

    /// One `forget.lua` call over `pairs`: fenced, it removes their reports
    /// and, with `lists_here` (the lists in the table's slot), their list entries.
    async fn forget_fenced(
        &self,
        grant: &LeaseGrant,
        pairs: &[&(String, Vec<u8>)],
        lists_here: bool,
    ) -> Result<Vec<(String, Vec<u8>)>, StoreError> {
        let mut lists: Vec<&str> = if lists_here {
            pairs.iter().map(|(l, _)| l.as_str()).collect()
        } else {
            Vec::new()
        };
        lists.sort();
        lists.dedup();
        let call = calls::forget(&self.keys, grant, pairs, &lists);
        let mut conn = self.conn();
        let v: Value = self
            .bounded(
                "forget members",
                self.op_timeout,
                self.eval(Which::Forget, &call, &mut conn),
            )
            .await?;
        calls::forgotten(v, pairs)
    }
}
