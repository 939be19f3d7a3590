//! Reading replies: the small decoders every call shares, and the errors of
//! a call. They never panic on an unexpected reply: the caller turns a `None`
//! into [`StoreError::Reply`], naming the call.

use redis::Value;

use crate::error::StoreError;

/// The error of a failed call named `op`.
pub(super) fn redis_err(op: &'static str) -> impl FnOnce(redis::RedisError) -> StoreError {
    move |source| StoreError::Redis { op, source }
}

/// The commands of a transaction Redis discarded (`EXECABORT`) only because
/// it refused some of them: not permitted (`NOPERM`), or unknown (renamed or
/// disabled); their positions. `None` when any error is something else.
pub(super) fn refused_commands(e: &redis::RedisError) -> Option<Vec<usize>> {
    let errors = e.clone().into_server_errors()?;
    let refused = |e: &redis::ServerError| {
        e.code() == "NOPERM"
            || e.details()
                .is_some_and(|d| d.contains("unknown command") || d.contains("unknown subcommand"))
    };
    (!errors.is_empty() && errors.iter().all(|(_, e)| refused(e)))
        .then(|| errors.iter().map(|(i, _)| *i).collect())
}

/// A reply of an unexpected shape to the call named `op`.
pub(super) fn reply_err(op: &'static str, v: &Value) -> StoreError {
    StoreError::Reply {
        op,
        detail: format!("{v:?}"),
    }
}

/// An integer reply, or an integer sent as text.
pub(super) fn int(v: &Value) -> Option<i64> {
    match v {
        Value::Int(i) => Some(*i),
        Value::BulkString(b) => std::str::from_utf8(b).ok()?.parse().ok(),
        _ => None,
    }
}

/// A reply as text (lossy for bytes that are not UTF-8).
pub(super) fn text(v: &Value) -> Option<String> {
    match v {
        Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
        Value::SimpleString(s) => Some(s.clone()),
        // RESP3's form of INFO and CLIENT LIST.
        Value::VerbatimString { text, .. } => Some(text.clone()),
        Value::Int(i) => Some(i.to_string()),
        _ => None,
    }
}

/// The entries of an array reply, as bytes; anything else is empty.
pub(super) fn bytes_list(v: Value) -> Vec<Vec<u8>> {
    match v {
        Value::Array(items) => items
            .into_iter()
            .filter_map(|i| match i {
                Value::BulkString(b) => Some(b),
                _ => None,
            })
            .collect(),
        _ => Vec::new(),
    }
}

/// The fields and values of a hash reply (`HGETALL`, RESP2 or RESP3), as
/// text (lossy for bytes that are not UTF-8); `None` for any other shape.
pub(super) fn text_pairs(v: Value) -> Option<Vec<(String, String)>> {
    let lossy = |v: &Value| text(v).unwrap_or_default();
    match v {
        Value::Array(items) if items.len() % 2 == 0 => Some(
            items
                .chunks(2)
                .map(|p| (lossy(&p[0]), lossy(&p[1])))
                .collect(),
        ),
        Value::Map(pairs) => Some(pairs.iter().map(|(k, v)| (lossy(k), lossy(v))).collect()),
        _ => None,
    }
}
