//! The operator's weight overrides (`{T}:weights`): read with the members'
//! reports for `distributor weights list`, set and unset one at a time. The
//! holder reads them with the reports (`Store::read_reports`).

use super::Store;
use crate::error::StoreError;

impl Store {
    /// The overrides and the members' reports, undecoded, in one round trip
    /// (the holder's read, [`Store::read_reports`]); a key of another type is
    /// an error naming it.
    #[allow(clippy::type_complexity)]
    pub async fn read_weights(
        &self,
    ) -> Result<(Vec<(String, String)>, Vec<(String, String)>), StoreError> {
        let c = self.read_reports().await;
        // `overrides` is `None` only when the round trip failed, and then
        // `reports` holds that error.
        let reports = c.reports?;
        Ok((c.overrides.unwrap_or(Ok(Vec::new()))?, reports))
    }

    /// Sets `member`'s override (the caller validated it).
    pub async fn set_weight(&self, member: &str, weight: u32) -> Result<(), StoreError> {
        let cmd = redis::cmd("HSET")
            .arg(&self.keys.weights)
            .arg(member)
            .arg(weight)
            .to_owned();
        self.weights_cmd("set weight", cmd).await.map(drop)
    }

    /// Removes `member`'s override; whether it had one.
    pub async fn unset_weight(&self, member: &str) -> Result<bool, StoreError> {
        let cmd = redis::cmd("HDEL")
            .arg(&self.keys.weights)
            .arg(member)
            .to_owned();
        Ok(self.weights_cmd("unset weight", cmd).await? > 0)
    }

    /// `HSET` or `HDEL` on the overrides: the count it returns.
    async fn weights_cmd(&self, op: &'static str, cmd: redis::Cmd) -> Result<i64, StoreError> {
        self.hash_edit(&self.keys.weights, op, cmd).await
    }

    /// An operator's `HSET` or `HDEL` on hash `key`: the count it returns;
    /// a key of another type is an error naming it.
    pub(super) async fn hash_edit(
        &self,
        key: &str,
        op: &'static str,
        cmd: redis::Cmd,
    ) -> Result<i64, StoreError> {
        let mut conn = self.conn();
        match self
            .bounded(op, self.op_timeout, cmd.query_async::<i64>(&mut conn))
            .await
        {
            Ok(v) => Ok(v),
            Err(e) => Err(self.classify(e, &[key], "hash").await),
        }
    }
}
