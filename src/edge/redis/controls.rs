//! The operator's controls (`{T}:controls`, `core::controls`): set and
//! removed one field at a time by `distributor members`, `workunits pin`
//! and `pause`/`resume`; read by the holder with the members' reports
//! (`Store::read_reports`, under their guard) and by `distributor status`.

use super::Store;
use crate::error::StoreError;

impl Store {
    /// The whole controls hash, undecoded (lossy UTF-8); a key of another
    /// type is an error naming it.
    pub async fn read_controls(&self) -> Result<Vec<(String, String)>, StoreError> {
        self.read_text_hash(&self.keys.controls).await
    }

    /// Sets one control (the caller validated field and value).
    pub async fn set_control(&self, field: &str, value: &str) -> Result<(), StoreError> {
        let cmd = redis::cmd("HSET")
            .arg(&self.keys.controls)
            .arg(field)
            .arg(value)
            .to_owned();
        self.hash_edit(&self.keys.controls, "set control", cmd)
            .await
            .map(drop)
    }

    /// Removes one control; whether it was set.
    pub async fn unset_control(&self, field: &str) -> Result<bool, StoreError> {
        let cmd = redis::cmd("HDEL")
            .arg(&self.keys.controls)
            .arg(field)
            .to_owned();
        Ok(self
            .hash_edit(&self.keys.controls, "unset control", cmd)
            .await?
            > 0)
    }
}
