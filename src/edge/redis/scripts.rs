//! The Lua scripts, each with the shared checks of `scripts/prelude.lua` in
//! front, and the reading of their refusals.
//!
//! Guarantees:
//! - a script checks everything it reads before its first write (Redis does
//!   not roll a script back), so a refusal means nothing was written;
//! - a refusal (`{-2, ...}` a value it will not use, `{-3, ...}` a key of the
//!   wrong type) becomes a [`StoreError`] naming the key, never a panic;
//! - every number the scripts store is canonical decimal text below 2^53, and
//!   `stored_count` reads one back under the same rule.

use redis::{Script, Value};

use super::{int, text};
use crate::error::StoreError;

macro_rules! script {
    ($file:literal) => {
        concat!(include_str!("scripts/prelude.lua"), include_str!($file))
    };
}
pub const ACQUIRE: &str = script!("scripts/acquire.lua");
pub const RENEW: &str = script!("scripts/renew.lua");
pub const RELEASE: &str = script!("scripts/release.lua");
/// The fenced table write (also used by the chaos suite to prove fencing).
pub const COMMIT: &str = script!("scripts/commit.lua");
pub const REGISTER: &str = script!("scripts/register.lua");
pub const TABLE_STATE: &str = script!("scripts/table_state.lua");
pub const REPLACE_LIST: &str = script!("scripts/replace_list.lua");
pub const FORGET: &str = script!("scripts/forget.lua");

/// The scripts, compiled once per store (`EVALSHA`, loaded on `NOSCRIPT`).
pub(super) struct Scripts {
    pub(super) acquire: Script,
    pub(super) renew: Script,
    pub(super) release: Script,
    pub(super) commit: Script,
    pub(super) register: Script,
    pub(super) table_state: Script,
    pub(super) replace_list: Script,
    pub(super) forget: Script,
}

impl Scripts {
    pub(super) fn new() -> Scripts {
        Scripts {
            acquire: Script::new(ACQUIRE),
            renew: Script::new(RENEW),
            release: Script::new(RELEASE),
            commit: Script::new(COMMIT),
            register: Script::new(REGISTER),
            table_state: Script::new(TABLE_STATE),
            replace_list: Script::new(REPLACE_LIST),
            forget: Script::new(FORGET),
        }
    }
}

/// Turns a script's refusals into errors: `{-2, key, field, value, expected}`
/// (a value it will not use) and `{-3, key, actual, expected}` (a key of the
/// wrong type); any other reply passes through.
pub(super) fn checked(v: Value) -> Result<Value, StoreError> {
    if let Value::Array(items) = &v
        && items.len() == 4
        && int(&items[0]) == Some(-3)
    {
        let t = |i: usize| text(&items[i]).unwrap_or_default();
        let expected = match t(3).as_str() {
            "list" => "list",
            "hash" => "hash",
            "string" => "string",
            _ => "other type",
        };
        return Err(StoreError::WrongType {
            key: t(1),
            expected,
            actual: t(2),
        });
    }
    if let Value::Array(items) = &v
        && items.len() == 5
        && int(&items[0]) == Some(-2)
    {
        let t = |i: usize| text(&items[i]).unwrap_or_default();
        let raw = match &items[3] {
            Value::BulkString(b) => b.clone(),
            other => text(other).unwrap_or_default().into_bytes(),
        };
        return Err(StoreError::InvalidState {
            key: t(1),
            field: t(2),
            value: crate::core::inputs::excerpt(&raw),
            expected: t(4),
        });
    }
    Ok(v)
}

pub use crate::core::count::MAX_COUNT;

/// A counter as the scripts store it: canonical decimal text of an integer
/// in 0..2^53, else an error naming the key, the field and the value.
pub(crate) fn stored_count(key: &str, field: &str, raw: &[u8]) -> Result<u64, StoreError> {
    std::str::from_utf8(raw)
        .ok()
        .and_then(crate::core::count::parse_count)
        .ok_or_else(|| StoreError::InvalidState {
            key: key.to_string(),
            field: field.to_string(),
            value: crate::core::inputs::excerpt(raw),
            expected: "an integer in 0..2^53-1".into(),
        })
}
