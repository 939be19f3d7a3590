//! The lease: acquire, renew and release, each one Lua script on the lease
//! connection.
//!
//! Guarantees:
//! - a lease is taken with a fresh random token and a higher fencing epoch in
//!   one atomic script; renewal and release succeed only for that token and
//!   epoch, so a holder that lost the lease can neither extend nor drop the
//!   next holder's;
//! - with `WaitFor` set, an acquisition or renewal that too few replicas
//!   acknowledged is never acted on (an acquisition is given back): the
//!   `WAIT` goes in the script's pipeline, so it counts what the connection
//!   that wrote the lease wrote, even if the lease connection was replaced
//!   before the reply came back;
//! - the connection record (`meta.holder_conn`, see `acquire.lua`) names the
//!   connection the acquisition or renewal itself went over, and the server
//!   it is on: `CLIENT ID` and `INFO server` are pipelined with the script,
//!   so all three run on the same connection even if the connection manager
//!   reconnected in between; when the connection changed (a reconnect), the
//!   record is corrected at once by another renewal. A stale
//!   record can only make a standby take a live holder's lease over, which
//!   the token and epoch checks then fence: a liveness cost, never two
//!   accepted writers;
//! - a takeover ([`Claim::takeover`]) succeeds only if the lease still holds
//!   exactly the record seen dead, and opens a new epoch;
//! - on Redis Cluster, or where `CLIENT` is refused, no record is written and
//!   standbys wait out the TTL;
//! - a lease connection replaced after a timeout is closed only once a
//!   renewal recorded the new one (or this replica found the lease held by
//!   another), so a slow call does not make a live holder look dead.

use std::time::Duration;

use redis::Value;

use super::calls::{self, ScriptCall};
use super::scripts::Which;
use super::{
    Acquisition, Claim, HolderConnection, LeaseClient, LeaseGrant, Renewal, Store, checked,
    refused_commands, text,
};
use crate::core::handoff::{RedisConnection, RunId};
use crate::core::timing::Timing;
use crate::edge::clock;
use crate::error::StoreError;

impl Store {
    /// Tries to take the lease with a fresh random token (a v4 UUID, as 32
    /// hex digits).
    pub async fn acquire(&self, claim: &Claim<'_>) -> Result<Acquisition, StoreError> {
        let token = uuid::Uuid::new_v4().simple().to_string();
        let client = self.lease_client_arg();
        let call = calls::acquire(&self.keys, claim, &token, &client);
        let (v, learned, replicated) = self
            .with_client_id("acquire lease", self.op_timeout, Which::Acquire, &call)
            .await?;
        match calls::acquired(v)? {
            Ok(epoch) => {
                let grant = LeaseGrant { token, epoch };
                if let Err(e) = replicated {
                    // Not on enough replicas: a failed-over master may not have
                    // it, so never act on it. Give it back (best effort).
                    let _ = self.release(&grant).await;
                    return Err(e);
                }
                if learned != client {
                    // Recorded with an id this connection no longer has (the
                    // first acquisition, or a reconnect): correct it now
                    // rather than at the first renewal, so that standbys do
                    // not take the lease over meanwhile. Best effort: a
                    // failure here leaves that to the first renewal.
                    let _ = self.renew(&grant, claim.ttl, self.op_timeout).await;
                }
                Ok(Acquisition::Acquired(grant))
            }
            Err(held) => {
                // Not holding: no record of ours to keep true.
                self.retire_done();
                Ok(held)
            }
        }
    }

    /// Extends the lease; [`Renewal::Lost`] says why it is no longer ours.
    pub async fn renew(
        &self,
        grant: &LeaseGrant,
        ttl: Duration,
        timeout: Duration,
    ) -> Result<Renewal, StoreError> {
        let deadline = clock::now() + timeout;
        let mut attempts = 0;
        let (v, replicated) = loop {
            attempts += 1;
            let client = self.lease_client_arg();
            let call = calls::renew(&self.keys, grant, ttl, &client);
            let left = deadline
                .saturating_duration_since(clock::now())
                .max(Duration::from_millis(1));
            let (v, learned, replicated) = self
                .with_client_id("renew lease", left, Which::Renew, &call)
                .await?;
            let v = checked(v)?;
            // Renewed over a connection whose id the record does not name
            // (a reconnect): once more, now with the right id.
            let renewed = matches!(&v, Value::Array(items) if items.len() == 1);
            if renewed && learned == client {
                // The record names the connection renewals go over.
                self.retire_done();
            }
            if !renewed || learned == client || attempts == 2 {
                break (v, replicated);
            }
        };
        let renewal = calls::renewed(&v)?;
        if renewal == Renewal::Renewed {
            // A renewal that a promoted replica may not have does not
            // extend what this holder may rely on.
            replicated?;
        }
        Ok(renewal)
    }

    /// Gives the lease up and notifies standbys; `Ok(false)` if it was not ours.
    pub async fn release(&self, grant: &LeaseGrant) -> Result<bool, StoreError> {
        let mut conn = self.conn();
        let call = calls::release(&self.keys, grant);
        let v: Value = self
            .bounded(
                "release lease",
                self.op_timeout,
                self.eval(Which::Release, &call, &mut conn),
            )
            .await?;
        calls::released(&v)
    }

    /// Whether the connection `client` still exists on the server it names
    /// (see [`Store::open_connections`]). [`HolderConnection::Refused`]
    /// where Redis does not let us ask.
    ///
    /// A record that names a server is only ever answered `Closed` by that
    /// server: `INFO server` goes in the same `MULTI` as `CLIENT LIST`, and
    /// another run id, or none to be had, answers `Open` (see
    /// [`HolderConnection::Open`]). A record without a run id is looked for
    /// by its id alone.
    pub async fn holder_connection(
        &self,
        client: RedisConnection,
    ) -> Result<HolderConnection, StoreError> {
        if !self.conn().is_one_node() {
            return Ok(HolderConnection::Refused);
        }
        if client.server.is_some() && !self.server_info.allowed() {
            // A record naming a server this replica cannot identify.
            return Ok(HolderConnection::Open);
        }
        let named = [client];
        let asked = self
            .open_connections(
                "check the holder's connection",
                &named,
                client.server.is_some(),
            )
            .await?;
        Ok(match asked {
            None => HolderConnection::Refused,
            Some((server, _))
                if client.server.is_some()
                    && (server.is_none() || client.elsewhere_than(server)) =>
            {
                HolderConnection::Open
            }
            Some((_, open)) if open.contains(&client.client) => HolderConnection::Open,
            Some(_) => HolderConnection::Closed,
        })
    }

    /// What this replica knows of its lease connection's client id.
    pub fn lease_client(&self) -> LeaseClient {
        self.lease_client
            .lock()
            .expect("lease client poisoned")
            .clone()
    }

    /// The connection to record: the last one learned (`<client id>` or
    /// `<client id>@<run id>`), or '' for none.
    fn lease_client_arg(&self) -> String {
        match self.lease_client() {
            LeaseClient::Id(c) => c.encode(),
            _ => String::new(),
        }
    }

    /// Runs the script `inv` on the lease connection with `CLIENT ID` and
    /// `INFO server` in front and, with `WaitFor` set, `WAIT` after it, in
    /// one pipeline, so all go over the same connection; returns the
    /// script's reply, the connection argument that would have been right
    /// ('' where there is none) and what the `WAIT` said. On a cluster the
    /// script runs without `CLIENT ID` and `INFO`.
    async fn with_client_id(
        &self,
        op: &'static str,
        timeout: Duration,
        which: Which,
        call: &ScriptCall,
    ) -> Result<(Value, String, Result<(), StoreError>), StoreError> {
        let refused_lately = matches!(
            self.lease_client(),
            LeaseClient::Refused { at, .. } if at.elapsed() < Timing::DEFAULT.client_refused_backoff
        );
        let mut conn = match self.conn() {
            c if c.is_one_node() && !refused_lately => c,
            // A cluster routes by key: `CLIENT ID` would name a connection to
            // some node, maybe not the one the script runs on. And after a
            // refusal, asking again at every call would only fill ACL LOG.
            other => {
                let mut other = other;
                let empty = redis::pipe();
                let w = self
                    .write(op, timeout, &empty, which, call, &mut other)
                    .await?;
                return Ok((w.script?, String::new(), w.replicated));
            }
        };
        let info = self.server_info.allowed();
        let mut pipe = redis::pipe();
        pipe.cmd("CLIENT").arg("ID");
        if info {
            pipe.cmd("INFO").arg("server");
        }
        let wrote = self
            .write(op, timeout, &pipe, which, call, &mut conn)
            .await?;
        let mut replies = wrote.before;
        let server = match info.then(|| replies.pop().expect("an INFO reply")) {
            Some(Value::ServerError(e)) => {
                let e: redis::RedisError = e.into();
                if refused_commands(&e).is_some() {
                    self.server_info.refused();
                    tracing::warn!(
                        "INFO is not permitted: the lease record names no Redis server, so after a Redis failover or restart a standby may take a live holder's lease over before its renew deadline (its writes stay fenced; asked again in a minute)"
                    );
                } else {
                    tracing::debug!(error = %e, "INFO failed: this lease record names no Redis server");
                }
                None
            }
            Some(i) => text(&i).as_deref().and_then(RunId::from_info),
            None => None,
        };
        let id = replies.pop().expect("a CLIENT ID reply");
        let learned = match &id {
            Value::Int(n) if *n >= 0 => LeaseClient::Id(RedisConnection {
                client: *n as u64,
                server,
            }),
            Value::ServerError(e) => {
                let e = StoreError::Redis {
                    op: "CLIENT ID",
                    source: e.clone().into(),
                };
                LeaseClient::Refused {
                    why: refusal(&e).unwrap_or("CLIENT ID failed").to_string(),
                    at: clock::now(),
                }
            }
            _ => LeaseClient::Unknown,
        };
        let arg = match &learned {
            LeaseClient::Id(c) => c.encode(),
            _ => String::new(),
        };
        if let LeaseClient::Id(RedisConnection {
            server: Some(s), ..
        }) = &learned
        {
            *self.server_seen.lock().expect("server seen poisoned") = Some(*s);
        }
        *self.lease_client.lock().expect("lease client poisoned") = learned;
        Ok((wrote.script?, arg, wrote.replicated))
    }
}

/// Why Redis will not tell us about connections, if that is what `e` says:
/// `CLIENT` not permitted by an ACL, unknown (renamed or disabled, as on some
/// managed services), or too old for `CLIENT LIST ID` (before Redis 5: a
/// syntax error).
pub(super) fn refusal(e: &StoreError) -> Option<&'static str> {
    if e.server_code() == Some("NOPERM") {
        return Some("CLIENT not permitted");
    }
    match e {
        StoreError::Redis { source, .. }
            if source.code() == Some("ERR")
                && source.detail().is_some_and(|d| {
                    d.contains("unknown command")
                        || d.contains("unknown subcommand")
                        || d.contains("syntax error")
                }) =>
        {
            Some("CLIENT not available")
        }
        _ => None,
    }
}
