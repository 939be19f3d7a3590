//! Bounds on what a holder reads whole: the services and units lists, and
//! the hashes members and operators write (`{T}:members`, `{T}:loads`,
//! `{T}:costs`, `{T}:controls`, `{T}:weights`) or that can grow with the
//! units (`{T}:transit`), measured by `LLEN`/`HLEN` and `MEMORY USAGE` in
//! one round trip before they are read, against `-max-list-entries` and
//! `-max-list-bytes`.
//!
//! Guarantee: a key over a limit is an error naming it, the limit and its
//! setting ([`StoreError::TooLong`]), and is not transferred, where Redis
//! permits asking; where it does not (an ACL without `LLEN`, `HLEN` or
//! `MEMORY`), that is logged once and the readers bound what they read.
//! A hash of the wrong type is left to its reader, which names it.

use std::sync::atomic::Ordering::Relaxed;

use redis::Value;

use super::{ListLimits, Store, int, reply_err};
use crate::error::StoreError;

/// What is measured: a list or a hash.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Container {
    List,
    Hash,
}

impl Container {
    fn name(self) -> &'static str {
        match self {
            Container::List => "list",
            Container::Hash => "hash",
        }
    }

    fn length(self) -> &'static str {
        match self {
            Container::List => "LLEN",
            Container::Hash => "HLEN",
        }
    }
}

impl Store {
    /// This store with `limits` on every list and hash a holder reads whole.
    pub fn with_limits(mut self, limits: ListLimits) -> Store {
        self.limits = limits;
        self
    }

    /// `LLEN` (or `HLEN`) and `MEMORY USAGE` of every key, refusing any over
    /// the limits.
    pub(super) async fn sizes(
        &self,
        keys: &[&str],
        container: Container,
    ) -> Result<(), StoreError> {
        let limits = self.limits;
        let sizing = match container {
            Container::List => &self.list_sizing,
            Container::Hash => &self.hash_sizing,
        };
        if keys.is_empty() || !sizing.load(Relaxed) {
            return Ok(());
        }
        let memory = self.memory_usage.load(Relaxed);
        let mut cmds = Vec::new();
        for key in keys {
            cmds.push((
                key.to_string(),
                redis::cmd(container.length()).arg(*key).to_owned(),
            ));
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
        let op = match container {
            Container::List => "measure lists",
            Container::Hash => "measure hashes",
        };
        let replies = self
            .pipelined_lenient(self.conn(), op, self.op_timeout, cmds)
            .await?;
        let per_key = if memory { 2 } else { 1 };
        for (key, r) in keys.iter().zip(replies.chunks(per_key)) {
            match &r[0] {
                Value::ServerError(e) if e.code() == "NOPERM" => {
                    sizing.store(false, Relaxed);
                    tracing::warn!(
                        command = container.length(),
                        "{} is not permitted: {}s are bounded after they are read, by -max-list-entries only",
                        container.length(),
                        container.name()
                    );
                    return Ok(());
                }
                // A hash of another type: its reader names it (members
                // write some of these keys, and their readers decide what a
                // key of another type means).
                Value::ServerError(e)
                    if e.code() == "WRONGTYPE" && container == Container::Hash =>
                {
                    continue;
                }
                Value::ServerError(e) if e.code() == "WRONGTYPE" => {
                    return Err(self
                        .find_wrong_type(&[key], "list")
                        .await
                        .unwrap_or_else(|| reply_err(op, &r[0])));
                }
                v @ Value::ServerError(_) => return Err(reply_err(op, v)),
                v => {
                    let n = int(v).unwrap_or(0).max(0) as u64;
                    if n > limits.entries as u64 {
                        return Err(StoreError::too_long(
                            container.name(),
                            key,
                            "entries",
                            limits.entries as u64,
                        ));
                    }
                }
            }
            match r.get(1) {
                Some(Value::ServerError(e)) if e.code() == "NOPERM" => {
                    self.memory_usage.store(false, Relaxed);
                    tracing::warn!(
                        "MEMORY USAGE is not permitted: lists and hashes are bounded by -max-list-entries only"
                    );
                }
                Some(v @ Value::ServerError(_)) => return Err(reply_err(op, v)),
                Some(v) => {
                    let bytes = int(v).unwrap_or(0).max(0) as u64;
                    if bytes > limits.bytes {
                        return Err(StoreError::too_long(
                            container.name(),
                            key,
                            "bytes",
                            limits.bytes,
                        ));
                    }
                }
                None => {}
            }
        }
        Ok(())
    }

    /// Refuses a key read with more entries than the limits allow (it grew
    /// since it was measured, or Redis does not let us measure).
    pub(super) fn check_read(
        &self,
        container: Container,
        key: &str,
        entries: usize,
    ) -> Result<(), StoreError> {
        let limit = self.limits.entries;
        if entries > limit {
            return Err(StoreError::too_long(
                container.name(),
                key,
                "entries",
                limit as u64,
            ));
        }
        Ok(())
    }
}
