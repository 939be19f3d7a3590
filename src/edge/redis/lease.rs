//! The lease: acquire, renew and release, each one Lua script on the lease
//! connection.
//!
//! Guarantees:
//! - a lease is taken with a fresh random token and a higher fencing epoch in
//!   one atomic script; renewal and release succeed only for that token and
//!   epoch, so a holder that lost the lease can neither extend nor drop the
//!   next holder's;
//! - with `WaitFor` set, an acquisition or renewal that too few replicas
//!   acknowledged is never acted on (an acquisition is given back).

use std::time::Duration;

use redis::Value;

use super::{
    Acquisition, Claim, LeaseGrant, LostLease, Renewal, Store, checked, int, reply_err, text,
};
use crate::error::StoreError;

impl Store {
    /// Tries to take the lease with a fresh random token (a v4 UUID, as 32
    /// hex digits).
    pub async fn acquire(&self, claim: &Claim<'_>) -> Result<Acquisition, StoreError> {
        let token = uuid::Uuid::new_v4().simple().to_string();
        let mut conn = self.conn();
        let mut inv = self.scripts.acquire.prepare_invoke();
        inv.key(&self.keys.lease)
            .key(&self.keys.epoch)
            .key(&self.keys.meta)
            .arg(&token)
            .arg(claim.ttl.as_millis() as u64)
            .arg(claim.epoch_floor)
            .arg(claim.holder_id)
            .arg(claim.now_ms)
            .arg(claim.failure_threshold)
            .arg(claim.generation_floor);
        let v: Value = self
            .bounded(
                "acquire lease",
                self.op_timeout,
                inv.invoke_async(&mut conn),
            )
            .await?;
        let v = checked(v)?;
        let Value::Array(items) = &v else {
            return Err(reply_err("acquire lease", &v));
        };
        let count = |v: &Value| int(v).filter(|n| *n >= 0).map(|n| n as u64);
        match items.as_slice() {
            [ok, epoch] if int(ok) == Some(1) => {
                let epoch = count(epoch).ok_or_else(|| reply_err("acquire lease", &v))?;
                let grant = LeaseGrant { token, epoch };
                if let Err(e) = self.replicated("acquire lease").await {
                    // Not on enough replicas: a failed-over master may not have
                    // it, so never act on it. Give it back (best effort).
                    let _ = self.release(&grant).await;
                    return Err(e);
                }
                Ok(Acquisition::Acquired(grant))
            }
            [ok, pttl, holder, epoch, generation, foreign] if int(ok) == Some(0) => {
                Ok(Acquisition::Held {
                    pttl: count(pttl).map(Duration::from_millis),
                    holder: text(holder).unwrap_or_default(),
                    epoch: count(epoch).ok_or_else(|| reply_err("acquire lease", &v))?,
                    generation: count(generation).ok_or_else(|| reply_err("acquire lease", &v))?,
                    foreign: text(foreign).filter(|f| !f.is_empty()),
                })
            }
            _ => Err(reply_err("acquire lease", &v)),
        }
    }

    /// Extends the lease; [`Renewal::Lost`] says why it is no longer ours.
    pub async fn renew(
        &self,
        grant: &LeaseGrant,
        ttl: Duration,
        timeout: Duration,
    ) -> Result<Renewal, StoreError> {
        let mut conn = self.conn();
        let mut inv = self.scripts.renew.prepare_invoke();
        inv.key(&self.keys.lease)
            .key(&self.keys.epoch)
            .arg(&grant.token)
            .arg(grant.epoch)
            .arg(ttl.as_millis() as u64);
        let v: Value = self
            .bounded("renew lease", timeout, inv.invoke_async(&mut conn))
            .await?;
        let v = checked(v)?;
        match &v {
            Value::Array(items) => match items.as_slice() {
                [ok] if int(ok) == Some(1) => {
                    // A renewal that a promoted replica may not have does not
                    // extend what this holder may rely on.
                    self.replicated("renew lease").await?;
                    Ok(Renewal::Renewed)
                }
                [ok, why] if int(ok) == Some(0) => Ok(Renewal::Lost(LostLease::from_reason(
                    &text(why).unwrap_or_default(),
                ))),
                _ => Err(reply_err("renew lease", &v)),
            },
            _ => Err(reply_err("renew lease", &v)),
        }
    }

    /// Gives the lease up and notifies standbys; `Ok(false)` if it was not ours.
    pub async fn release(&self, grant: &LeaseGrant) -> Result<bool, StoreError> {
        let mut conn = self.conn();
        let mut inv = self.scripts.release.prepare_invoke();
        inv.key(&self.keys.lease)
            .key(&self.keys.meta)
            .arg(&grant.token)
            .arg(grant.epoch)
            .arg(&self.keys.lease_channel);
        let n: i64 = self
            .bounded(
                "release lease",
                self.op_timeout,
                inv.invoke_async(&mut conn),
            )
            .await?;
        Ok(n == 1)
    }
}
