//! How a script is called: `FCALL` of the scripts' library (`FUNCTION
//! LOAD`ed when Redis says it has no such function), else `EVALSHA` (the
//! script loaded on `NOSCRIPT`).
//!
//! Why both: a library survives a Redis restart with persistence and is
//! replicated, so after a failover the first call of a new master runs at
//! once, where `EVALSHA` would first get `NOSCRIPT` and spend a round trip
//! loading the script. Functions need Redis 7.0 and an ACL permitting
//! `fcall` and `function|load`; elsewhere `EVALSHA` does the same work.
//!
//! Guarantees:
//! - a call is sent again only after a reply saying that it ran nothing:
//!   "function not found" (the library is loaded first), `NOSCRIPT` (the
//!   script is loaded first), or a refusal of `FCALL` itself (it is sent by
//!   `EVALSHA` then); never after a timeout or any other error;
//! - a write's `WAIT` ([`Store::write`], with `WaitFor` set) goes in one
//!   pipeline with the script, so both run on the same connection (on a
//!   cluster, redis-rs sends the pipeline to the master of the script's
//!   first key's slot: `WAIT` has no key); the `WAIT` reply of an attempt
//!   whose script did not run is dropped with it, and counts only for the
//!   attempt that ran the script;
//! - where Functions are refused (an ACL, Redis before 7.0, a renamed
//!   command), calls go by `EVALSHA`, one warning says so, and Functions
//!   are tried again after `Timing::client_refused_backoff`.

use std::time::Duration;

use redis::aio::ConnectionLike;
use redis::{Cmd, RedisError, RedisResult, Value};

use super::calls::ScriptCall;
use super::scripts::Which;
use super::{Store, redis_err};
use crate::error::StoreError;

/// What a write ([`Store::write`]) got back.
pub(super) struct Wrote {
    /// The replies to the commands sent before the script, in order.
    pub(super) before: Vec<Value>,
    /// The script's reply, or its error reply.
    pub(super) script: Result<Value, StoreError>,
    /// Whether enough replicas acknowledged what the connection wrote, as
    /// the `WAIT` after the script said (`Ok` without `WaitFor`). Means
    /// something only when the script wrote.
    pub(super) replicated: Result<(), StoreError>,
}

/// What to do after a script call's error.
enum Retry {
    /// Send it again by `FCALL` (the library was just loaded).
    Fcall,
    /// Send it by `EVALSHA` (Functions are refused).
    Evalsha,
    /// Load the script, then send it again by `EVALSHA`.
    LoadScript,
}

impl Store {
    /// Runs `which` with `call`'s keys and arguments on `conn`.
    pub(super) async fn eval<C: ConnectionLike + Send>(
        &self,
        which: Which,
        call: &ScriptCall,
        conn: &mut C,
    ) -> RedisResult<Value> {
        if self.functions.allowed() {
            let fcall = self.fcall(which, call);
            match fcall.query_async::<Value>(conn).await {
                Ok(v) => return Ok(v),
                Err(e) => match self.retry(&e, true, conn).await? {
                    Some(Retry::Fcall) => return fcall.query_async(conn).await,
                    Some(_) => {}
                    None => return Err(e),
                },
            }
        }
        let mut inv = self.scripts.get(which).prepare_invoke();
        call.load(&mut inv);
        inv.invoke_async(conn).await
    }

    /// Runs `before`'s commands, then `which` with `call`, then, with
    /// `WaitFor` set, `WAIT`, all in one pipeline on `conn`, within
    /// `timeout` plus the `WAIT`'s own timeout.
    pub(super) async fn write<C: ConnectionLike + Send>(
        &self,
        op: &'static str,
        timeout: Duration,
        before: &redis::Pipeline,
        which: Which,
        call: &ScriptCall,
        conn: &mut C,
    ) -> Result<Wrote, StoreError> {
        let wait = self.wait_after();
        let (after, longer) = match wait {
            Some((cmd, t)) => (vec![cmd], t),
            None => (Vec::new(), Duration::ZERO),
        };
        let run = self.eval_between(before, which, call, &after, conn);
        let mut replies = self.bounded(op, timeout + longer, run).await?;
        let sent = before.len() + 1 + after.len();
        if replies.len() != sent {
            return Err(StoreError::Reply {
                op,
                detail: format!("{} replies to a pipeline of {sent}", replies.len()),
            });
        }
        let replicated = if after.is_empty() {
            Ok(())
        } else {
            self.replicated(op, replies.pop().expect("counted above"))
        };
        let script = match replies.pop().expect("counted above") {
            Value::ServerError(e) => Err(redis_err(op)(e.into())),
            v => Ok(v),
        };
        Ok(Wrote {
            before: replies,
            script,
            replicated,
        })
    }

    /// Runs `before`'s commands, then `which` with `call`, then `after`'s,
    /// in one pipeline (errors as values, so the other replies are kept):
    /// the replies, in that order. Sent again whole, at most twice, only
    /// after a script reply that says the script did not run (the replies
    /// of that attempt, `after`'s included, are dropped).
    async fn eval_between<C: ConnectionLike + Send>(
        &self,
        before: &redis::Pipeline,
        which: Which,
        call: &ScriptCall,
        after: &[Cmd],
        conn: &mut C,
    ) -> RedisResult<Vec<Value>> {
        let mut functions = self.functions.allowed();
        let mut attempts = 0;
        loop {
            attempts += 1;
            let mut full = before.clone();
            full.ignore_errors();
            let mut inv = self.scripts.get(which).prepare_invoke();
            if functions {
                full.add_command(self.fcall(which, call));
            } else {
                call.load(&mut inv);
                full.invoke_script(&inv);
            }
            for cmd in after {
                full.add_command(cmd.clone());
            }
            let replies: Vec<Value> = full.query_async(conn).await?;
            let Some(Value::ServerError(e)) = replies.get(before.len()) else {
                return Ok(replies);
            };
            if attempts == 3 {
                return Ok(replies);
            }
            let e: RedisError = e.clone().into();
            match self.retry(&e, functions, conn).await? {
                Some(Retry::Fcall) => {}
                Some(Retry::Evalsha) => functions = false,
                Some(Retry::LoadScript) => {
                    inv.load_async(conn).await?;
                }
                None => return Ok(replies),
            }
        }
    }

    /// `FCALL <library>_<script> <numkeys> <keys...> <args...>`.
    fn fcall(&self, which: Which, call: &ScriptCall) -> Cmd {
        let mut cmd = redis::cmd("FCALL");
        cmd.arg(self.scripts.library.function(which))
            .arg(call.keys.len());
        for k in &call.keys {
            cmd.arg(k);
        }
        for a in &call.args {
            cmd.arg(a.as_slice());
        }
        cmd
    }

    /// Whether (and how) a call that failed with `e` is sent again; `by_fcall`
    /// says how it was sent. `None`: it may have run, or failed for good.
    async fn retry<C: ConnectionLike + Send>(
        &self,
        e: &RedisError,
        by_fcall: bool,
        conn: &mut C,
    ) -> RedisResult<Option<Retry>> {
        if !by_fcall {
            return Ok((e.code() == Some("NOSCRIPT")).then_some(Retry::LoadScript));
        }
        if refused(e) {
            self.functions_refused(e);
            return Ok(Some(Retry::Evalsha));
        }
        if !function_not_found(e) {
            return Ok(None);
        }
        let load = redis::cmd("FUNCTION")
            .arg("LOAD")
            .arg(&self.scripts.library.source)
            .query_async::<Value>(conn)
            .await;
        match load {
            Ok(_) => Ok(Some(Retry::Fcall)),
            // Another replica of this version loaded it meanwhile.
            Err(e) if already_exists(&e) => Ok(Some(Retry::Fcall)),
            Err(e) if refused(&e) => {
                self.functions_refused(&e);
                Ok(Some(Retry::Evalsha))
            }
            Err(e) => Err(e),
        }
    }

    fn functions_refused(&self, e: &RedisError) {
        self.functions.refused();
        tracing::warn!(
            error = %e,
            "Redis Functions are not available (Redis before 7.0, or FCALL or FUNCTION LOAD not permitted): scripts run by EVALSHA, so after a Redis restart or failover the first call of each script loads it again (asked again in a minute)"
        );
    }
}

/// `FCALL` or `FUNCTION LOAD` not permitted (not a key the ACL denies,
/// which `EVALSHA` would be denied too), or a command Redis does not know
/// (before 7.0, renamed).
fn refused(e: &RedisError) -> bool {
    let detail = e.detail().unwrap_or_default().to_ascii_lowercase();
    (e.code() == Some("NOPERM") && (detail.contains("fcall") || detail.contains("function")))
        || detail.contains("unknown command")
        || detail.contains("unknown subcommand")
}

/// Redis has no function of that name (the library is not loaded: a new
/// server, a flush, a restart without persistence).
fn function_not_found(e: &RedisError) -> bool {
    e.detail()
        .is_some_and(|d| d.to_ascii_lowercase().contains("function not found"))
}

fn already_exists(e: &RedisError) -> bool {
    e.detail()
        .is_some_and(|d| d.to_ascii_lowercase().contains("already exists"))
}
