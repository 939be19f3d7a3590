//! The distributor's Lua scripts (`edge/redis/scripts/*.lua`), step for
//! step in Rust over a [`Keyspace`]: the same checks in the same order,
//! the same writes, the same replies as Redis turns a Lua value into one.
//! Each function names its script; the differential test
//! (`tests/integration/memory_store.rs`) runs random calls against both and
//! compares every reply and the whole keyspace after each.
//!
//! Guarantee (as the scripts'): a call that refuses (`{0, ...}`, `{-2,
//! ...}`, `{-3, ...}`, `{-4, ...}`) writes nothing.

use redis::Value;

use super::keyspace::{Keyspace, WrongType};

mod lease;
mod lists;
mod table;

/// One script of `edge/redis/scripts`.
pub use crate::edge::redis::scripts::Which as Script;

/// What a script call did besides its reply.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Effects {
    /// `(channel, payload)` of each `PUBLISH`, in order.
    pub published: Vec<(Vec<u8>, Vec<u8>)>,
}

/// Runs `script` with `keys` and `argv` on `ks` at `now` (ms). An `Err` is
/// a command's `WRONGTYPE`, as a script error in Redis; the scripts check
/// types first, so it only follows a keyspace nobody could make.
pub fn run(
    script: Script,
    ks: &mut Keyspace,
    keys: &[String],
    argv: &[Vec<u8>],
    now: u64,
) -> Result<(Value, Effects), WrongType> {
    let mut call = Call {
        ks,
        keys,
        argv,
        now,
        effects: Effects::default(),
    };
    let reply = match script {
        Script::Acquire => call.acquire()?,
        Script::Renew => call.renew()?,
        Script::Release => call.release()?,
        Script::Commit => call.commit()?,
        Script::Register => call.register()?,
        Script::TableState => call.table_state()?,
        Script::ReplaceList => call.replace_list()?,
        Script::Forget => call.forget()?,
        Script::Quarantine => call.quarantine()?,
    };
    Ok((reply, call.effects))
}

/// 2^53: every number a script stores is below it.
const MAX_SAFE: u64 = crate::core::count::MAX_COUNT + 1;
const COUNT: &str = "an integer in 0..2^53-1";

/// The prelude's `count`, which follows the same rule as the daemon's
/// reading of a stored counter.
fn count(s: Option<&[u8]>) -> Option<u64> {
    crate::core::count::parse_count(std::str::from_utf8(s?).ok()?)
}

fn bulk(s: impl AsRef<[u8]>) -> Value {
    Value::BulkString(s.as_ref().to_vec())
}

fn int(n: i64) -> Value {
    Value::Int(n)
}

fn num(n: u64) -> Vec<u8> {
    n.to_string().into_bytes()
}

/// `{-2, key, field, value, expected}`.
fn invalid(key: &[u8], field: &[u8], value: Option<&[u8]>, expected: &str) -> Value {
    Value::Array(vec![
        int(-2),
        bulk(key),
        bulk(field),
        bulk(value.unwrap_or_default()),
        bulk(expected),
    ])
}

/// `{-3, key, actual, expected}`.
fn wrong_type(key: &str, actual: &str, expected: &str) -> Value {
    Value::Array(vec![int(-3), bulk(key), bulk(actual), bulk(expected)])
}

/// The prelude's `table_digest` over `HGETALL`'s pairs.
fn table_digest(pairs: &[(Vec<u8>, Vec<u8>)]) -> String {
    crate::core::table::digest_of(pairs.iter().map(|(f, v)| (f.as_slice(), v.as_slice())))
}

struct Call<'a> {
    ks: &'a mut Keyspace,
    keys: &'a [String],
    argv: &'a [Vec<u8>],
    now: u64,
    effects: Effects,
}

impl Call<'_> {
    /// `KEYS[i]`, 1-based.
    fn key(&self, i: usize) -> &str {
        &self.keys[i - 1]
    }

    /// `ARGV[i]`, 1-based; `None` past the end (Lua's nil).
    fn arg(&self, i: usize) -> Option<&[u8]> {
        self.argv.get(i.wrapping_sub(1)).map(Vec::as_slice)
    }

    fn type_of(&mut self, i: usize) -> &'static str {
        let now = self.now;
        let key = self.keys[i - 1].clone();
        self.ks.type_of(&key, now)
    }

    /// `type_of(KEYS[i]) == 'string' and GET KEYS[i] == ARGV[a]`.
    fn holds(&mut self, i: usize, a: usize) -> Result<bool, WrongType> {
        if self.type_of(i) != "string" {
            return Ok(false);
        }
        let now = self.now;
        let v = self.ks.get(&self.keys[i - 1].clone(), now)?;
        Ok(v.as_deref() == self.arg(a))
    }

    /// The prelude's `fenced(KEYS[lease], ARGV[1], KEYS[epoch], ARGV[2])`:
    /// `{0, 'lease'}` or `{0, 'epoch'}` when the caller is fenced.
    fn fenced(&mut self, lease: usize, epoch: usize) -> Result<Option<Value>, WrongType> {
        let refused = |why: &str| Some(Value::Array(vec![int(0), bulk(why)]));
        if !self.holds(lease, 1)? {
            return Ok(refused("lease"));
        }
        if !self.holds(epoch, 2)? {
            return Ok(refused("epoch"));
        }
        Ok(None)
    }

    fn hget(&mut self, i: usize, field: &str) -> Result<Option<Vec<u8>>, WrongType> {
        let (key, now) = (self.key(i).to_string(), self.now);
        self.ks.hget(&key, field.as_bytes(), now)
    }

    fn hset(&mut self, i: usize, pairs: Vec<(Vec<u8>, Vec<u8>)>) -> Result<(), WrongType> {
        let (key, now) = (self.key(i).to_string(), self.now);
        self.ks.hset(&key, &pairs, now).map(drop)
    }

    fn del(&mut self, i: usize) {
        let (key, now) = (self.key(i).to_string(), self.now);
        self.ks.del(&key, now);
    }

    fn publish(&mut self, channel: &[u8], payload: Vec<u8>) {
        self.effects.published.push((channel.to_vec(), payload));
    }

    fn pair(f: &str, v: impl Into<Vec<u8>>) -> (Vec<u8>, Vec<u8>) {
        (f.as_bytes().to_vec(), v.into())
    }
}
