//! The change history (`{T}:changes`, `core::history`): read newest first
//! by the page and `distributor history`; written only inside the fenced
//! commit (`commit.lua`).
//!
//! Guarantee: a read never fails on an entry's content: an entry that does
//! not decode comes back with what could be read and why the rest could
//! not (`HistoryEntry::unreadable`); only Redis errors and a key of another
//! type are errors.

use redis::Value;

use super::{BULK_TIMEOUT, Store, reply_err, text, text_pairs};
use crate::core::history::{self, HistoryEntry};
use crate::error::StoreError;

/// What `distributor history` and the page show.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct History {
    /// The newest entries first.
    pub entries: Vec<HistoryEntry>,
    /// `{T}:meta`'s `history_error`: the last table write could not add
    /// its entry (`<generation> <error>`, e.g. an ACL without `xadd`).
    pub error: Option<String>,
}

impl Store {
    /// The newest `limit` entries of the change history, and whether the
    /// last write could not record its own.
    pub async fn read_history(&self, limit: usize) -> Result<History, StoreError> {
        let mut pipe = redis::pipe();
        pipe.cmd("XREVRANGE")
            .arg(&self.keys.changes)
            .arg("+")
            .arg("-")
            .arg("COUNT")
            .arg(limit.max(1));
        pipe.cmd("HGET").arg(&self.keys.meta).arg("history_error");
        let mut conn = self.bulk();
        let (entries, error): (Value, Value) = match self
            .bounded("read history", BULK_TIMEOUT, pipe.query_async(&mut conn))
            .await
        {
            Ok(v) => v,
            Err(e) => return Err(self.classify(e, &[&self.keys.changes], "stream").await),
        };
        Ok(History {
            entries: decode_entries(entries)?,
            error: text(&error),
        })
    }
}

/// An `XREVRANGE` reply: `[[id, [field, value, ...]], ...]`.
fn decode_entries(v: Value) -> Result<Vec<HistoryEntry>, StoreError> {
    let Value::Array(items) = v else {
        return Err(reply_err("read history", &v));
    };
    items
        .into_iter()
        .map(|item| match item {
            Value::Array(mut parts) if parts.len() == 2 => {
                let fields = parts.pop().expect("two parts");
                let id = text(&parts[0]).unwrap_or_default();
                let fields =
                    text_pairs(fields.clone()).ok_or_else(|| reply_err("read history", &fields))?;
                Ok(history::decode(&id, &fields))
            }
            other => Err(reply_err("read history", &other)),
        })
        .collect()
}
