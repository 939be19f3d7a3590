//! An in-memory Redis keyspace: strings, hashes, lists and streams with millisecond
//! expiry, and the commands the distributor's scripts call, with Redis'
//! semantics where the scripts can observe them:
//! - a key past its expiry is gone (read lazily, at the `now` each call
//!   passes in: the keyspace has no clock of its own);
//! - a hash or list left empty is deleted, as Redis deletes it;
//! - a command on a key of another type is a `WRONGTYPE` error, and
//!   changes nothing;
//! - `SET` without `PX` clears the expiry; `HSET` and list pushes keep it.
//!
//! Hash fields are kept sorted; Redis' order is not observable by the
//! scripts (the table digest XORs its rows).

use std::collections::{BTreeMap, VecDeque};

/// A hash's fields and values.
pub type Hash = BTreeMap<Vec<u8>, Vec<u8>>;

/// Field and value pairs, as `HGETALL` returns them.
pub type Pairs = Vec<(Vec<u8>, Vec<u8>)>;

/// A stream's entries, oldest first: (`<ms>-<seq>` id, fields).
pub type Entries = VecDeque<((u64, u64), Pairs)>;

/// A value of one key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Data {
    Str(Vec<u8>),
    Hash(Hash),
    List(VecDeque<Vec<u8>>),
    /// A set: the scripts never make one, but an operator's mistake can.
    Set(std::collections::BTreeSet<Vec<u8>>),
    /// A stream: entries (`<ms>-<seq>` ids, oldest first) and their fields.
    Stream(Entries),
}

impl Data {
    /// Redis' name for the type (`TYPE`).
    pub fn type_name(&self) -> &'static str {
        match self {
            Data::Str(_) => "string",
            Data::Hash(_) => "hash",
            Data::List(_) => "list",
            Data::Set(_) => "set",
            Data::Stream(_) => "stream",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Entry {
    data: Data,
    /// Expiry, in the keyspace's milliseconds.
    expires_at: Option<u64>,
}

/// A command on a key of another type (Redis' `WRONGTYPE`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("WRONGTYPE Operation against a key holding the wrong kind of value: {key}")]
pub struct WrongType {
    pub key: String,
}

/// Keys and their values; every call takes the current time in ms.
///
/// Each key also has a version ([`Keyspace::version`]) that every change
/// of it raises (a write, a delete, an expiry, a flush), as Redis' `WATCH`
/// sees changes: a holder's reads use it to tell a list unchanged.
#[derive(Debug, Clone, Default)]
pub struct Keyspace {
    entries: BTreeMap<String, Entry>,
    /// The change count at each key's last change.
    touched: BTreeMap<String, u64>,
    /// Changes so far, and the count at the last flush.
    changes: u64,
    flushed_at: u64,
}

/// Two keyspaces are equal when their keys and values are: versions are
/// how each got there.
impl PartialEq for Keyspace {
    fn eq(&self, other: &Keyspace) -> bool {
        self.entries == other.entries
    }
}

impl Keyspace {
    pub fn new() -> Keyspace {
        Keyspace::default()
    }

    /// The live entry of `key` at `now` (an expired one is removed).
    fn live(&mut self, key: &str, now: u64) -> Option<&mut Entry> {
        if self
            .entries
            .get(key)
            .is_some_and(|e| e.expires_at.is_some_and(|t| t <= now))
        {
            self.entries.remove(key);
            self.touch(key);
        }
        self.entries.get_mut(key)
    }

    fn touch(&mut self, key: &str) {
        self.changes += 1;
        self.touched.insert(key.to_string(), self.changes);
    }

    /// The version of `key` at `now`: equal versions, equal content.
    pub fn version(&mut self, key: &str, now: u64) -> u64 {
        self.live(key, now);
        self.touched
            .get(key)
            .copied()
            .unwrap_or(0)
            .max(self.flushed_at)
    }

    /// `TYPE`: "none" for a missing key.
    pub fn type_of(&mut self, key: &str, now: u64) -> &'static str {
        self.live(key, now).map_or("none", |e| e.data.type_name())
    }

    /// `GET`.
    pub fn get(&mut self, key: &str, now: u64) -> Result<Option<Vec<u8>>, WrongType> {
        match self.live(key, now) {
            None => Ok(None),
            Some(Entry {
                data: Data::Str(s), ..
            }) => Ok(Some(s.clone())),
            Some(_) => Err(wrong(key)),
        }
    }

    /// `SET key value [PX ttl]`: replaces any value of any type; without a
    /// TTL the key persists.
    pub fn set(&mut self, key: &str, value: Vec<u8>, px: Option<u64>, now: u64) {
        self.entries.insert(
            key.to_string(),
            Entry {
                data: Data::Str(value),
                expires_at: px.map(|ttl| now + ttl),
            },
        );
        self.touch(key);
    }

    /// `DEL`: whether the key existed.
    pub fn del(&mut self, key: &str, now: u64) -> bool {
        self.live(key, now);
        let existed = self.entries.remove(key).is_some();
        if existed {
            self.touch(key);
        }
        existed
    }

    /// `PTTL`: -2 for a missing key, -1 for one without expiry.
    pub fn pttl(&mut self, key: &str, now: u64) -> i64 {
        match self.live(key, now) {
            None => -2,
            Some(Entry {
                expires_at: None, ..
            }) => -1,
            Some(Entry {
                expires_at: Some(t),
                ..
            }) => (*t - now) as i64,
        }
    }

    /// `PEXPIRE`: whether the key exists (and now expires `ttl` from now).
    pub fn pexpire(&mut self, key: &str, ttl: u64, now: u64) -> bool {
        match self.live(key, now) {
            Some(e) => {
                e.expires_at = Some(now + ttl);
                self.touch(key);
                true
            }
            None => false,
        }
    }

    fn hash(&mut self, key: &str, now: u64) -> Result<Option<&mut Hash>, WrongType> {
        match self.live(key, now) {
            None => Ok(None),
            Some(Entry {
                data: Data::Hash(h),
                ..
            }) => Ok(Some(h)),
            Some(_) => Err(wrong(key)),
        }
    }

    /// `HGET`.
    pub fn hget(
        &mut self,
        key: &str,
        field: &[u8],
        now: u64,
    ) -> Result<Option<Vec<u8>>, WrongType> {
        Ok(self.hash(key, now)?.and_then(|h| h.get(field).cloned()))
    }

    /// `HGETALL`, sorted by field.
    pub fn hgetall(&mut self, key: &str, now: u64) -> Result<Pairs, WrongType> {
        Ok(self
            .hash(key, now)?
            .map(|h| h.iter().map(|(f, v)| (f.clone(), v.clone())).collect())
            .unwrap_or_default())
    }

    /// `HLEN`.
    pub fn hlen(&mut self, key: &str, now: u64) -> Result<usize, WrongType> {
        Ok(self.hash(key, now)?.map_or(0, |h| h.len()))
    }

    /// `HSET key field value ...`: the number of new fields.
    pub fn hset(
        &mut self,
        key: &str,
        pairs: &[(Vec<u8>, Vec<u8>)],
        now: u64,
    ) -> Result<usize, WrongType> {
        if pairs.is_empty() {
            return Ok(0);
        }
        if self.hash(key, now)?.is_none() {
            self.entries.insert(
                key.to_string(),
                Entry {
                    data: Data::Hash(BTreeMap::new()),
                    expires_at: None,
                },
            );
        }
        let h = self.hash(key, now)?.expect("made above");
        let added = pairs
            .iter()
            .filter(|(f, v)| h.insert(f.clone(), v.clone()).is_none())
            .count();
        self.touch(key);
        Ok(added)
    }

    /// `HDEL key field ...`: the number removed. An emptied hash is deleted.
    pub fn hdel(&mut self, key: &str, fields: &[Vec<u8>], now: u64) -> Result<usize, WrongType> {
        let Some(h) = self.hash(key, now)? else {
            return Ok(0);
        };
        let n = fields.iter().filter(|f| h.remove(*f).is_some()).count();
        if h.is_empty() {
            self.entries.remove(key);
        }
        if n > 0 {
            self.touch(key);
        }
        Ok(n)
    }

    fn list(&mut self, key: &str, now: u64) -> Result<Option<&mut VecDeque<Vec<u8>>>, WrongType> {
        match self.live(key, now) {
            None => Ok(None),
            Some(Entry {
                data: Data::List(l),
                ..
            }) => Ok(Some(l)),
            Some(_) => Err(wrong(key)),
        }
    }

    /// `LRANGE key 0 -1`.
    pub fn lrange(&mut self, key: &str, now: u64) -> Result<Vec<Vec<u8>>, WrongType> {
        Ok(self
            .list(key, now)?
            .map(|l| l.iter().cloned().collect())
            .unwrap_or_default())
    }

    /// `LPUSH` (`front`) or `RPUSH` of `values`, in argument order: the
    /// list's new length.
    pub fn push(
        &mut self,
        key: &str,
        values: &[Vec<u8>],
        front: bool,
        now: u64,
    ) -> Result<usize, WrongType> {
        if self.list(key, now)?.is_none() {
            if values.is_empty() {
                return Ok(0);
            }
            self.entries.insert(
                key.to_string(),
                Entry {
                    data: Data::List(VecDeque::new()),
                    expires_at: None,
                },
            );
        }
        let l = self.list(key, now)?.expect("made above");
        for v in values {
            if front {
                l.push_front(v.clone());
            } else {
                l.push_back(v.clone());
            }
        }
        let len = l.len();
        if !values.is_empty() {
            self.touch(key);
        }
        Ok(len)
    }

    /// `LREM key 0 value`: every occurrence; an emptied list is deleted.
    pub fn lrem_all(&mut self, key: &str, value: &[u8], now: u64) -> Result<usize, WrongType> {
        let Some(l) = self.list(key, now)? else {
            return Ok(0);
        };
        let before = l.len();
        l.retain(|v| v != value);
        let n = before - l.len();
        if l.is_empty() {
            self.entries.remove(key);
        }
        if n > 0 {
            self.touch(key);
        }
        Ok(n)
    }

    /// `LPOS key value`: the first index of `value`.
    pub fn lpos(&mut self, key: &str, value: &[u8], now: u64) -> Result<Option<usize>, WrongType> {
        Ok(self
            .list(key, now)?
            .and_then(|l| l.iter().position(|v| v == value)))
    }

    fn stream(&mut self, key: &str, now: u64) -> Result<Option<&mut Entries>, WrongType> {
        match self.live(key, now) {
            None => Ok(None),
            Some(Entry {
                data: Data::Stream(s),
                ..
            }) => Ok(Some(s)),
            Some(_) => Err(wrong(key)),
        }
    }

    /// `XADD key MAXLEN kept * field value ...`: the new entry's id,
    /// `<now>-0` or the last id's next (Redis' ids never go back); the
    /// newest `kept` entries stay.
    pub fn xadd(
        &mut self,
        key: &str,
        fields: Pairs,
        kept: usize,
        now: u64,
    ) -> Result<(u64, u64), WrongType> {
        if self.stream(key, now)?.is_none() {
            self.entries.insert(
                key.to_string(),
                Entry {
                    data: Data::Stream(VecDeque::new()),
                    expires_at: None,
                },
            );
        }
        let s = self.stream(key, now)?.expect("made above");
        let id = match s.back() {
            Some(&((ms, seq), _)) if ms >= now => (ms, seq + 1),
            _ => (now, 0),
        };
        s.push_back((id, fields));
        while s.len() > kept {
            s.pop_front();
        }
        self.touch(key);
        Ok(id)
    }

    /// `XREVRANGE key + - COUNT count`: the newest entries first.
    pub fn xrevrange(
        &mut self,
        key: &str,
        count: usize,
        now: u64,
    ) -> Result<Vec<(String, Pairs)>, WrongType> {
        Ok(self
            .stream(key, now)?
            .map(|s| {
                s.iter()
                    .rev()
                    .take(count)
                    .map(|((ms, seq), f)| (format!("{ms}-{seq}"), f.clone()))
                    .collect()
            })
            .unwrap_or_default())
    }

    /// Writes `data` under `key` as is, without expiry: an operator's edit
    /// (the simulation's keys of the wrong type, values that do not parse).
    pub fn put(&mut self, key: &str, data: Data) {
        self.entries.insert(
            key.to_string(),
            Entry {
                data,
                expires_at: None,
            },
        );
        self.touch(key);
    }

    /// Every live key at `now`, with its value and whether it expires.
    pub fn dump(&mut self, now: u64) -> BTreeMap<String, (Data, bool)> {
        self.entries
            .retain(|_, e| e.expires_at.is_none_or(|t| t > now));
        self.entries
            .iter()
            .map(|(k, e)| (k.clone(), (e.data.clone(), e.expires_at.is_some())))
            .collect()
    }

    /// How many changes the keyspace saw: equal counts, equal content.
    pub fn changes(&self) -> u64 {
        self.changes
    }

    /// The keys and values alone, for a replica's copy (see
    /// [`Keyspace::restore`]).
    pub fn copy(&self) -> Keyspace {
        Keyspace {
            entries: self.entries.clone(),
            ..Keyspace::default()
        }
    }

    /// Takes `older`'s keys and values (a replica that lagged was promoted:
    /// the writes after its copy are lost). Every key counts as changed.
    pub fn restore(&mut self, older: &Keyspace) {
        self.entries = older.entries.clone();
        self.touched.clear();
        self.changes += 1;
        self.flushed_at = self.changes;
    }

    /// `FLUSHALL`: Redis lost its data.
    pub fn flush(&mut self) {
        self.entries.clear();
        self.touched.clear();
        self.changes += 1;
        self.flushed_at = self.changes;
    }
}

fn wrong(key: &str) -> WrongType {
    WrongType {
        key: key.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_is_gone_once_its_expiry_passed() {
        let mut k = Keyspace::new();
        k.set("l", b"t".to_vec(), Some(100), 1_000);
        assert_eq!(k.pttl("l", 1_040), 60);
        assert_eq!(k.get("l", 1_099).unwrap(), Some(b"t".to_vec()));
        assert_eq!(k.get("l", 1_100).unwrap(), None);
        assert_eq!(k.type_of("l", 1_100), "none");
        assert_eq!(k.pttl("l", 1_100), -2);
    }

    #[test]
    fn set_without_px_persists_and_pexpire_sets_a_new_expiry() {
        let mut k = Keyspace::new();
        k.set("l", b"t".to_vec(), Some(100), 0);
        k.set("l", b"u".to_vec(), None, 50);
        assert_eq!(k.pttl("l", 500), -1);
        assert!(k.pexpire("l", 30, 500));
        assert_eq!(k.pttl("l", 510), 20);
        assert!(!k.pexpire("missing", 30, 500));
    }

    #[test]
    fn an_emptied_hash_or_list_is_deleted() {
        let mut k = Keyspace::new();
        k.hset("h", &[(b"f".to_vec(), b"v".to_vec())], 0).unwrap();
        assert_eq!(k.hdel("h", &[b"f".to_vec()], 0).unwrap(), 1);
        assert_eq!(k.type_of("h", 0), "none");
        k.push("l", &[b"a".to_vec(), b"b".to_vec(), b"a".to_vec()], true, 0)
            .unwrap();
        assert_eq!(
            k.lrange("l", 0).unwrap(),
            vec![b"a".to_vec(), b"b".to_vec(), b"a".to_vec()]
        );
        assert_eq!(k.lpos("l", b"b", 0).unwrap(), Some(1));
        assert_eq!(k.lrem_all("l", b"a", 0).unwrap(), 2);
        assert_eq!(k.lrem_all("l", b"b", 0).unwrap(), 1);
        assert_eq!(k.type_of("l", 0), "none");
    }

    #[test]
    fn a_command_on_another_type_fails_and_changes_nothing() {
        let mut k = Keyspace::new();
        k.set("s", b"x".to_vec(), None, 0);
        let before = k.clone();
        assert!(k.hset("s", &[(b"f".to_vec(), b"v".to_vec())], 0).is_err());
        assert!(k.push("s", &[b"v".to_vec()], false, 0).is_err());
        assert!(k.hget("s", b"f", 0).is_err());
        assert_eq!(k, before);
        k.hset("h", &[(b"f".to_vec(), b"v".to_vec())], 0).unwrap();
        assert!(k.get("h", 0).is_err());
    }

    #[test]
    fn every_change_of_a_key_raises_its_version_and_reads_do_not() {
        let mut k = Keyspace::new();
        let mut versions = vec![k.version("l", 0)];
        k.push("l", &[b"a".to_vec()], false, 0).unwrap();
        versions.push(k.version("l", 0));
        k.lrange("l", 0).unwrap();
        k.lpos("l", b"a", 0).unwrap();
        assert_eq!(k.version("l", 0), versions[1], "a read is no change");
        k.lrem_all("l", b"a", 0).unwrap();
        versions.push(k.version("l", 0));
        k.set("l", b"x".to_vec(), Some(3), 0);
        versions.push(k.version("l", 0));
        // Expired at 3: a change too, as WATCH sees it.
        versions.push(k.version("l", 5));
        k.flush();
        versions.push(k.version("l", 5));
        k.hset("l", &[(b"f".to_vec(), b"v".to_vec())], 6).unwrap();
        versions.push(k.version("l", 6));
        assert!(versions.windows(2).all(|w| w[0] < w[1]), "{versions:?}");
        let v = k.version("l", 6);
        k.lrem_all("other", b"x", 6).unwrap();
        k.hdel("l", &[b"missing".to_vec()], 6).unwrap();
        assert_eq!(k.version("l", 6), v, "no change, no new version");
    }

    #[test]
    fn hset_counts_new_fields_and_keeps_the_expiry() {
        let mut k = Keyspace::new();
        let f = |s: &str| (s.as_bytes().to_vec(), b"1".to_vec());
        assert_eq!(k.hset("h", &[f("a"), f("b")], 0).unwrap(), 2);
        assert!(k.pexpire("h", 100, 0));
        assert_eq!(k.hset("h", &[f("a"), f("c")], 10).unwrap(), 1);
        assert_eq!(k.pttl("h", 10), 90);
        assert_eq!(k.hlen("h", 10).unwrap(), 3);
    }
}
