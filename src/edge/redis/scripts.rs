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
pub const QUARANTINE: &str = script!("scripts/quarantine.lua");

/// One of the scripts: for [`Scripts::get`], the library's function names
/// and the in-memory emulation (`edge::memory`, which runs each one).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Which {
    Acquire,
    Renew,
    Release,
    Commit,
    Register,
    TableState,
    ReplaceList,
    Forget,
    Quarantine,
}

impl Which {
    pub const ALL: [Which; 9] = [
        Which::Acquire,
        Which::Renew,
        Which::Release,
        Which::Commit,
        Which::Register,
        Which::TableState,
        Which::ReplaceList,
        Which::Forget,
        Which::Quarantine,
    ];

    /// The Lua text Redis runs, prelude included.
    pub fn source(self) -> &'static str {
        match self {
            Which::Acquire => ACQUIRE,
            Which::Renew => RENEW,
            Which::Release => RELEASE,
            Which::Commit => COMMIT,
            Which::Register => REGISTER,
            Which::TableState => TABLE_STATE,
            Which::ReplaceList => REPLACE_LIST,
            Which::Forget => FORGET,
            Which::Quarantine => QUARANTINE,
        }
    }

    /// The function's flags. Without any, Redis refuses a function before
    /// it runs whenever a write could be refused (memory over `maxmemory`,
    /// a failing disk, too few replicas): clean for a table write, which
    /// then writes nothing. The lease's renewal and release write a few
    /// bytes and must go on when memory is full, as they did as scripts;
    /// the table's state only reads.
    fn flags(self) -> &'static str {
        match self {
            Which::Renew | Which::Release => "'allow-oom'",
            Which::TableState => "'no-writes'",
            _ => "",
        }
    }

    fn name(self) -> &'static str {
        match self {
            Which::Acquire => "acquire",
            Which::Renew => "renew",
            Which::Release => "release",
            Which::Commit => "commit",
            Which::Register => "register",
            Which::TableState => "table_state",
            Which::ReplaceList => "replace_list",
            Which::Forget => "forget",
            Which::Quarantine => "quarantine",
        }
    }
}

/// The scripts, compiled once per store (`EVALSHA`, loaded on `NOSCRIPT`),
/// and the same scripts as one Redis Functions library.
pub(super) struct Scripts {
    acquire: Script,
    renew: Script,
    release: Script,
    commit: Script,
    register: Script,
    table_state: Script,
    replace_list: Script,
    forget: Script,
    quarantine: Script,
    pub(super) library: Library,
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
            quarantine: Script::new(QUARANTINE),
            library: Library::new(),
        }
    }

    pub(super) fn get(&self, which: Which) -> &Script {
        match which {
            Which::Acquire => &self.acquire,
            Which::Renew => &self.renew,
            Which::Release => &self.release,
            Which::Commit => &self.commit,
            Which::Register => &self.register,
            Which::TableState => &self.table_state,
            Which::ReplaceList => &self.replace_list,
            Which::Forget => &self.forget,
            Which::Quarantine => &self.quarantine,
        }
    }
}

/// Every script as a function of one library (`FUNCTION LOAD`), which Redis
/// keeps across restarts (with persistence) and replicates, unlike the
/// script cache. The library's name and each function's carry a digest of
/// the whole library (scripts, function names and flags): replicas of
/// different versions, side by side in a rolling upgrade, each call their
/// own, and a library is never taken for another.
pub(super) struct Library {
    /// `distributor_<12 hex digits>`.
    pub(super) name: String,
    /// The `FUNCTION LOAD` payload.
    pub(super) source: String,
}

impl Library {
    fn new() -> Library {
        const NAME: &str = "%LIBRARY%";
        let mut body = String::new();
        for w in Which::ALL {
            // The body reads KEYS and ARGV, as a script does: the function's
            // parameters get those names.
            body.push_str(&format!(
                "redis.register_function{{function_name='{NAME}_{}', flags={{{}}}, callback=function(KEYS, ARGV)\n{}\nend}}\n",
                w.name(),
                w.flags(),
                w.source()
            ));
        }
        let digest = Script::new(&body).get_hash().to_string();
        let name = format!("distributor_{}", &digest[..12]);
        let source = format!("#!lua name={name}\n{}", body.replace(NAME, &name));
        Library { name, source }
    }

    /// The function that runs `which`.
    pub(super) fn function(&self, which: Which) -> String {
        format!("{}_{}", self.name, which.name())
    }
}

/// The library function that runs the script whose text (prelude included,
/// as the constants above) has SHA-1 `sha`, for tools that recognise a
/// script in either form (`EVALSHA <sha>` or `FCALL <function>`).
pub fn function_of(sha: &str) -> Option<String> {
    let library = Library::new();
    Which::ALL
        .into_iter()
        .find(|w| Script::new(w.source()).get_hash().eq_ignore_ascii_case(sha))
        .map(|w| library.function(w))
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
