//! Quarantined units (`{T}:quarantine`, `core::quarantine`): recorded by the
//! holder with a fenced script (a stale holder cannot take a unit from
//! everyone), read by the holder with the members' reports (under their
//! guard) and by the CLI, and released by `distributor workunits
//! quarantine release`, one field at a time.

use redis::Value;

use super::scripts::Which;
use super::{LeaseGrant, Store, calls};
use crate::error::StoreError;

impl Store {
    /// Records `records` (unit, encoded record), fenced by `grant`; how many
    /// units were new to the hash.
    pub async fn record_quarantine(
        &self,
        grant: &LeaseGrant,
        records: &[(String, String)],
    ) -> Result<u64, StoreError> {
        if records.is_empty() {
            return Ok(0);
        }
        let call = calls::quarantine(&self.keys, grant, records);
        let mut conn = self.conn();
        let v: Value = self
            .bounded(
                "record quarantined units",
                self.op_timeout,
                self.eval(Which::Quarantine, &call, &mut conn),
            )
            .await?;
        calls::quarantined(v)
    }

    /// The whole quarantine hash, undecoded (lossy UTF-8); a key of another
    /// type is an error naming it.
    pub async fn read_quarantine(&self) -> Result<Vec<(String, String)>, StoreError> {
        self.read_text_hash(&self.keys.quarantine).await
    }

    /// Releases one unit (the holder places it again, its count restarted);
    /// whether it was quarantined.
    pub async fn release_quarantine(&self, unit: &str) -> Result<bool, StoreError> {
        let cmd = redis::cmd("HDEL")
            .arg(&self.keys.quarantine)
            .arg(unit)
            .to_owned();
        Ok(self
            .hash_edit(&self.keys.quarantine, "release quarantined unit", cmd)
            .await?
            > 0)
    }
}
