//! The operator's weight overrides (`{T}:weights`): read with the members'
//! reports for `distributor weights list`, set and unset one at a time. The
//! holder reads them with the reports (`Store::read_reports`).

use redis::Value;

use super::{Store, reply_err, text_pairs};
use crate::error::StoreError;

impl Store {
    /// The overrides and the members' reports, undecoded, in one round trip;
    /// a key of another type is an error naming it.
    #[allow(clippy::type_complexity)]
    pub async fn read_weights(
        &self,
    ) -> Result<(Vec<(String, String)>, Vec<(String, String)>), StoreError> {
        let k = &self.keys;
        let cmds = [&k.weights, &k.members]
            .into_iter()
            .map(|key| (key.clone(), redis::cmd("HGETALL").arg(key).to_owned()))
            .collect();
        let replies = match self
            .pipelined(self.conn(), "read weights", self.op_timeout, cmds)
            .await
        {
            Ok(r) => r,
            Err(e) => {
                let keys = [k.weights.as_str(), k.members.as_str()];
                return Err(self.classify(e, &keys, "hash").await);
            }
        };
        let mut it = replies.into_iter();
        let mut next = || {
            let v = it.next().unwrap_or(Value::Nil);
            text_pairs(v.clone()).ok_or_else(|| reply_err("read weights", &v))
        };
        Ok((next()?, next()?))
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
        let mut conn = self.conn();
        match self
            .bounded(op, self.op_timeout, cmd.query_async::<i64>(&mut conn))
            .await
        {
            Ok(v) => Ok(v),
            Err(e) => Err(self.classify(e, &[&self.keys.weights], "hash").await),
        }
    }
}
