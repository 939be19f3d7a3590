//! The unit costs (`{T}:costs`) and measured loads (`{T}:loads`): read by
//! a holder in `-balance cost` or `load` only when its guard cannot tell
//! the hash unchanged since the last read; costs listed, set and unset one
//! at a time by `distributor costs`, loads written by members.
//!
//! Guarantee: a cost hash is reported unchanged only while its guard is
//! clean since it was read in full, at a version the caller holds; a failed
//! read leaves it unknown, so the next cycle reads it again.

use std::sync::Arc;

use redis::Value;

use super::sizes::Container;
use super::{BULK_TIMEOUT, Store, reply_err, text_pairs};
use crate::core::costs::{UnitCosts, UnreadableCost};
use crate::core::load::{DecodedLoads, StaleLoads, decode_loads, still_holds};
use crate::core::timing::Timing;
use crate::error::StoreError;

/// The costs as a holder cycle read them ([`Store::read_costs_since`]).
#[derive(Debug)]
pub struct CostsRead {
    /// Names the content while it is known (equal versions, equal
    /// content); `None` when it is not (a failed read): read again next
    /// cycle.
    pub version: Option<u64>,
    /// The costs decoded, or why the hash could not be read; `None`:
    /// unchanged since `version`, which the caller said it holds.
    pub content: Option<Result<Arc<DecodedCosts>, StoreError>>,
}

/// A costs hash decoded: the costs, and the entries that could not be read.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DecodedCosts {
    pub costs: UnitCosts,
    pub unreadable: Vec<UnreadableCost>,
    /// `{T}:loads` fields left out for their date (`core::load`); none in
    /// a costs hash.
    pub stale: Vec<StaleLoads>,
    /// The unix ms from which the same hash decodes differently by time
    /// alone (`core::load`): read again then, even unchanged.
    pub fresh_until: Option<u64>,
}

impl DecodedCosts {
    /// A `{T}:costs` hash (`core::costs`).
    pub fn decode(pairs: Vec<(String, String)>) -> DecodedCosts {
        let (costs, unreadable) = UnitCosts::decode(pairs);
        DecodedCosts {
            costs,
            unreadable,
            ..DecodedCosts::default()
        }
    }

    /// A `{T}:loads` hash read at `now_ms` (unix ms): the loads members
    /// measured, dated within [`Timing::load_age`] (`core::load`).
    pub fn from_loads(pairs: Vec<(String, String)>, now_ms: u64) -> DecodedCosts {
        let DecodedLoads {
            costs,
            unreadable,
            stale,
            fresh_until,
        } = decode_loads(pairs, now_ms, Timing::DEFAULT.load_age());
        DecodedCosts {
            costs,
            unreadable,
            stale,
            fresh_until,
        }
    }
}

impl Store {
    /// The costs, unless the guard shows them unchanged since `held`.
    pub async fn read_costs_since(&self, held: Option<u64>) -> CostsRead {
        let key = self.keys.costs.clone();
        self.read_guarded_hash(&self.costs, &key, held, |pairs, _| {
            DecodedCosts::decode(pairs)
        })
        .await
    }

    /// The measured loads (`-balance load`), unless the guard shows them
    /// unchanged since `held` and their decoding still holds by the clock
    /// (`core::load`: a field turns too old without anyone writing).
    pub async fn read_loads_since(&self, held: Option<u64>) -> CostsRead {
        let key = self.keys.loads.clone();
        self.read_guarded_hash(&self.loads, &key, held, DecodedCosts::from_loads)
            .await
    }

    /// Hash `key` decoded by `decode` (with the wall clock's unix ms: the
    /// dates in `{T}:loads` are shared between processes), unless `guard`
    /// shows it unchanged since `held` and the decoding made then still
    /// holds by the clock: probed (armed) before the read it must cover
    /// (see `guard.rs`), and decoded off the runtime's workers (a million
    /// entries take a while).
    async fn read_guarded_hash(
        &self,
        guard: &tokio::sync::Mutex<super::guard::Versioned>,
        key: &str,
        held: Option<u64>,
        decode: fn(Vec<(String, String)>, u64) -> DecodedCosts,
    ) -> CostsRead {
        let mut g = guard.lock().await;
        let known = g.guard.probe().await;
        let now_ms = crate::unix_ms();
        if let Some(v) = known
            && held == Some(v)
            && still_holds(g.fresh_until, now_ms)
        {
            return CostsRead {
                version: Some(v),
                content: None,
            };
        }
        let read = match self.read_bounded_hash(key).await {
            Ok(pairs) => tokio::task::spawn_blocking(move || decode(pairs, now_ms))
                .await
                .map(Arc::new)
                .map_err(|e| StoreError::Reply {
                    op: "decode costs",
                    detail: e.to_string(),
                }),
            Err(e) => Err(e),
        };
        let version = match &read {
            Ok(decoded) => {
                g.fresh_until = decoded.fresh_until;
                Some(g.read())
            }
            Err(_) => {
                g.guard.forget();
                None
            }
        };
        CostsRead {
            version,
            content: Some(read),
        }
    }

    /// The whole costs hash, undecoded (lossy UTF-8); a key of another type
    /// is an error naming it.
    pub async fn read_costs(&self) -> Result<Vec<(String, String)>, StoreError> {
        self.read_text_hash(&self.keys.costs).await
    }

    /// [`read_text_hash`](Self::read_text_hash) within the limits
    /// (`sizes.rs`): a hash over one is an error naming it.
    async fn read_bounded_hash(&self, key: &str) -> Result<Vec<(String, String)>, StoreError> {
        self.sizes(&[key], Container::Hash).await?;
        let pairs = self.read_text_hash(key).await?;
        self.check_read(Container::Hash, key, pairs.len())?;
        Ok(pairs)
    }

    /// A whole hash, undecoded (lossy UTF-8), on the bulk connection.
    pub(super) async fn read_text_hash(
        &self,
        key: &str,
    ) -> Result<Vec<(String, String)>, StoreError> {
        let mut conn = self.bulk();
        let cmd = redis::cmd("HGETALL").arg(key).to_owned();
        match self
            .bounded(
                "read hash",
                BULK_TIMEOUT,
                cmd.query_async::<Value>(&mut conn),
            )
            .await
        {
            Ok(v) => text_pairs(v.clone()).ok_or_else(|| reply_err("read hash", &v)),
            Err(e) => Err(self.classify(e, &[key], "hash").await),
        }
    }

    /// Writes `member`'s measured loads (`{T}:loads`, `core::load`).
    pub async fn write_loads(&self, member: &str, value: &str) -> Result<(), StoreError> {
        let cmd = redis::cmd("HSET")
            .arg(&self.keys.loads)
            .arg(member)
            .arg(value)
            .to_owned();
        self.hash_edit(&self.keys.loads, "write loads", cmd)
            .await
            .map(drop)
    }

    /// Removes `member`'s measured loads, when it leaves.
    pub async fn remove_loads(&self, member: &str) -> Result<(), StoreError> {
        let cmd = redis::cmd("HDEL")
            .arg(&self.keys.loads)
            .arg(member)
            .to_owned();
        self.hash_edit(&self.keys.loads, "remove loads", cmd)
            .await
            .map(drop)
    }

    /// Sets `unit`'s cost to `value` (the caller validated it).
    pub async fn set_cost(&self, unit: &str, value: &str) -> Result<(), StoreError> {
        let cmd = redis::cmd("HSET")
            .arg(&self.keys.costs)
            .arg(unit)
            .arg(value)
            .to_owned();
        self.costs_cmd("set cost", cmd).await.map(drop)
    }

    /// Removes `unit`'s cost; whether it had one.
    pub async fn unset_cost(&self, unit: &str) -> Result<bool, StoreError> {
        let cmd = redis::cmd("HDEL")
            .arg(&self.keys.costs)
            .arg(unit)
            .to_owned();
        Ok(self.costs_cmd("unset cost", cmd).await? > 0)
    }

    async fn costs_cmd(&self, op: &'static str, cmd: redis::Cmd) -> Result<i64, StoreError> {
        self.hash_edit(&self.keys.costs, op, cmd).await
    }
}
