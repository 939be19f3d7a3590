//! The reads of a lookup (`member::Lookup`): the table with its generation
//! and units in transit in one transaction, and the generation alone, the
//! cheap check of whether the copy is still current.
//!
//! Guarantee: [`Store::read_owners`] returns one generation's table, never a
//! mix (`MULTI`; the keys share the `{T}` hash slot on a cluster).

use std::collections::HashMap;

use super::scripts::stored_count;
use super::{BULK_TIMEOUT, Store};
use crate::error::StoreError;

/// One generation of the table, as a lookup reads it.
#[derive(Debug, Default)]
pub struct OwnersRead {
    pub rows: HashMap<String, String>,
    /// `meta.generation` (`None`: none stored).
    pub generation: Option<u64>,
    /// The fields of `{T}:transit` (`<unit>,<group>`).
    pub transit: Vec<String>,
}

impl Store {
    /// `MULTI; HGETALL <table>; HGET {T}:meta generation; HGETALL {T}:transit;
    /// EXEC`. A generation that is not a valid counter is an error naming
    /// the key and the value.
    pub async fn read_owners(&self) -> Result<OwnersRead, StoreError> {
        let k = &self.keys;
        let mut conn = self.bulk();
        let mut pipe = redis::pipe();
        pipe.atomic()
            .cmd("HGETALL")
            .arg(&k.table)
            .cmd("HGET")
            .arg(&k.meta)
            .arg("generation")
            .cmd("HGETALL")
            .arg(&k.transit);
        type Read = (
            HashMap<String, String>,
            Option<Vec<u8>>,
            HashMap<String, String>,
        );
        let read: Result<Read, StoreError> = self
            .bounded("read the table for a lookup", BULK_TIMEOUT, async {
                pipe.query_async(&mut conn).await
            })
            .await;
        let (rows, generation, transit) = match read {
            Ok(r) => r,
            Err(e) => {
                let keys = [k.table.as_str(), k.meta.as_str(), k.transit.as_str()];
                return Err(self.classify(e, &keys, "hash").await);
            }
        };
        Ok(OwnersRead {
            rows,
            generation: generation
                .map(|raw| stored_count(&k.meta, "generation", &raw))
                .transpose()?,
            transit: transit.into_keys().collect(),
        })
    }

    /// Only `members`' rows (`None`: no row), with the generation and the
    /// units in transit: `MULTI; HMGET <table> <member>...; HGET {T}:meta
    /// generation; HGETALL {T}:transit; EXEC`.
    pub async fn read_owner_rows(
        &self,
        members: &[String],
    ) -> Result<(Vec<(String, Option<String>)>, Option<u64>, Vec<String>), StoreError> {
        let k = &self.keys;
        let mut conn = self.bulk();
        let mut pipe = redis::pipe();
        pipe.atomic();
        if !members.is_empty() {
            pipe.cmd("HMGET").arg(&k.table).arg(members);
        }
        pipe.cmd("HGET")
            .arg(&k.meta)
            .arg("generation")
            .cmd("HGETALL")
            .arg(&k.transit);
        let read: Result<Vec<redis::Value>, StoreError> = self
            .bounded("read changed rows for a lookup", BULK_TIMEOUT, async {
                pipe.query_async(&mut conn).await
            })
            .await;
        let replies = match read {
            Ok(r) => r,
            Err(e) => {
                let keys = [k.table.as_str(), k.meta.as_str(), k.transit.as_str()];
                return Err(self.classify(e, &keys, "hash").await);
            }
        };
        let whole = || super::reply_err("read changed rows", &redis::Value::Array(replies.clone()));
        let (rows, generation, transit) = match replies.as_slice() {
            [r, g, t] if !members.is_empty() => (Some(r), g, t),
            [g, t] if members.is_empty() => (None, g, t),
            _ => return Err(whole()),
        };
        let rows: Vec<Option<String>> = match rows {
            Some(r) => redis::from_redis_value(r.clone()).map_err(|_| whole())?,
            None => Vec::new(),
        };
        if rows.len() != members.len() {
            return Err(whole());
        }
        let generation: Option<Vec<u8>> =
            redis::from_redis_value(generation.clone()).map_err(|_| whole())?;
        let transit: HashMap<String, String> =
            redis::from_redis_value(transit.clone()).map_err(|_| whole())?;
        Ok((
            members.iter().cloned().zip(rows).collect(),
            generation
                .map(|raw| stored_count(&k.meta, "generation", &raw))
                .transpose()?,
            transit.into_keys().collect(),
        ))
    }

    /// `HGET {T}:meta generation`, validated (`None`: none stored).
    pub async fn table_generation(&self) -> Result<Option<u64>, StoreError> {
        let k = &self.keys;
        let mut conn = self.conn();
        let raw: Result<Option<Vec<u8>>, StoreError> = self
            .bounded("read the table generation", self.op_timeout, async {
                redis::cmd("HGET")
                    .arg(&k.meta)
                    .arg("generation")
                    .query_async(&mut conn)
                    .await
            })
            .await;
        match raw {
            Ok(raw) => raw
                .map(|raw| stored_count(&k.meta, "generation", &raw))
                .transpose(),
            Err(e) => Err(self.classify(e, &[k.meta.as_str()], "hash").await),
        }
    }
}
