//! The in-memory Redis of the simulation (`edge::memory`) against a real
//! `redis-server`, at two levels:
//! - random calls of every Lua script, with operators' edits between them
//!   (values that do not parse, keys of the wrong type, keys deleted,
//!   counters near 2^53), give the same reply and leave the same keyspace,
//!   after every call; `MEMORY_STORE_SEED=<n>` replays one seed;
//! - random operations of `HoldingStore` (the lease, the fenced write and
//!   the holder's reads) on the Redis store and on `MemoryStore` give the
//!   same results and leave the same keyspace.
//!
//! A failing run prints its seed and the steps up to the first difference.

use std::collections::BTreeMap;
use std::time::Instant;

use distributor::core::lease::{Acquisition, Claim, LeaseGrant};
use distributor::edge::memory::{self, Data, Keyspace, MemoryStore, Script};
use distributor::edge::redis::Store;
use distributor::edge::store::HoldingStore;
use redis::Value;

use crate::support::{RedisServer, TABLE, keys};

/// A small deterministic generator (xorshift64*), so a seed replays.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }
    fn pick<'a>(&mut self, xs: &[&'a str]) -> &'a str {
        xs[self.below(xs.len())]
    }
    /// Mostly one of `good`, one time in ten one of `bad`.
    fn mostly(&mut self, good: &[&str], bad: &[&str]) -> String {
        if self.chance(10) {
            self.pick(bad).to_string()
        } else {
            self.pick(good).to_string()
        }
    }
}

/// A connection named with its server's run id, as holders record it.
const RUN_12: &str = "12@00000000000000000000000000000000000000aa";

/// A call or an edit, as it was made (for the failure report).
#[derive(Debug, Clone)]
enum Step {
    Script {
        script: Script,
        keys: Vec<String>,
        argv: Vec<String>,
    },
    Edit(Vec<String>),
}

const LISTS: [&str; 3] = ["svc-a", "svc-b", "units"];
/// The limits both stores read with.
const LIMITS: distributor::edge::redis::ListLimits = distributor::edge::redis::ListLimits {
    entries: 100,
    bytes: 1 << 20,
};
const MEMBERS: [&str; 4] = ["m1:1", "m2:2", "m3:3", "m4:4"];
/// Counters as the scripts might find them: good, odd, malformed, at the
/// edges of 2^53 and of Lua's exponent form (1e14).
const COUNTS: [&str; 14] = [
    "0",
    "1",
    "2",
    "7",
    "007",
    "",
    "x",
    "-1",
    "1.5",
    "99999999999999",
    "123456789012345",
    "9007199254740990",
    "9007199254740991",
    "9007199254740992",
];

struct World {
    rng: Rng,
    k: distributor::core::keys::Keys,
}

impl World {
    /// A value for a counter argument: mostly the one the keyspace holds
    /// (so that calls succeed), sometimes any of [`COUNTS`].
    fn count_like(&mut self, current: Option<String>) -> String {
        match current {
            Some(c) if self.rng.chance(60) => c,
            _ => self.rng.pick(&COUNTS).to_string(),
        }
    }

    fn step(&mut self, ks: &mut Keyspace, now: u64) -> Step {
        let k = self.k.clone();
        let s = |x: &str| x.to_string();
        let lease = string(ks, &k.lease, now);
        let epoch = string(ks, &k.epoch, now);
        let version = hfield(ks, &k.meta, "version", now);
        let token = match lease.clone() {
            Some(t) if self.rng.chance(75) => t,
            _ => self.rng.pick(&["tA", "tB", "tC"]).to_string(),
        };
        let epoch_arg = match epoch.clone() {
            Some(e) if self.rng.chance(80) => e,
            _ => self.rng.pick(&["1", "2", "x", "0"]).to_string(),
        };
        let lease_keys = vec![k.lease.clone(), k.epoch.clone(), k.meta.clone()];
        match self.rng.below(13) {
            0 | 1 => {
                let holder_conn = hfield(ks, &k.meta, "holder_conn", now).unwrap_or_default();
                let (dead_token, dead_epoch, dead_client) = if self.rng.chance(30) {
                    let mut parts = holder_conn.splitn(2, ' ');
                    let t = parts.next().unwrap_or_default().to_string();
                    let c = parts.next().unwrap_or_default().to_string();
                    (t, epoch.clone().unwrap_or_default(), c)
                } else {
                    (s(""), s("0"), s("0"))
                };
                Step::Script {
                    script: Script::Acquire,
                    keys: lease_keys,
                    argv: vec![
                        self.rng.pick(&["tA", "tB", "tC"]).to_string(),
                        self.rng.mostly(&["60000", "90000"], &["0", "x"]),
                        self.count_like(epoch.clone()),
                        s(self.rng.pick(&["r1", "r2"])),
                        self.rng.mostly(&["1700000000000", "00017"], &["x"]),
                        self.rng.mostly(&["3", "1"], &[""]),
                        self.count_like(hfield(ks, &k.meta, "generation", now)),
                        self.rng
                            .mostly(&["", "12", "13", RUN_12], &["y", "12@", "12@ab", "@1"]),
                        dead_token,
                        dead_epoch,
                        dead_client,
                    ],
                }
            }
            2 | 3 => Step::Script {
                script: Script::Renew,
                keys: lease_keys,
                argv: vec![
                    token,
                    epoch_arg,
                    self.rng.mostly(&["60000", "70000"], &["0", "x"]),
                    self.rng.mostly(&["", "12", "14", RUN_12], &["z", "14@xyz"]),
                ],
            },
            4 if self.rng.chance(50) => Step::Script {
                script: Script::Release,
                keys: vec![k.lease.clone(), k.meta.clone()],
                argv: vec![token, epoch_arg, k.lease_channel.clone()],
            },
            4..=7 => self.commit(ks, now, token, epoch_arg, version),
            8 => {
                let mut argv = vec![token, epoch_arg];
                for _ in 0..self.rng.below(4) {
                    argv.push(s(self.rng.pick(&["0", "1", "2", "3", "4", "x"])));
                    argv.push(s(self.rng.pick(&MEMBERS)));
                }
                let mut keys = vec![k.lease.clone(), k.epoch.clone(), k.members.clone()];
                keys.extend(LISTS.iter().map(|l| l.to_string()));
                Step::Script {
                    script: Script::Forget,
                    keys,
                    argv,
                }
            }
            9 => Step::Script {
                script: Script::Register,
                keys: vec![s(self.rng.pick(&LISTS))],
                argv: vec![
                    s(self.rng.pick(&MEMBERS)),
                    s(self.rng.pick(&["LPUSH", "RPUSH"])),
                ],
            },
            10 => {
                let n = self.rng.below(4);
                Step::Script {
                    script: Script::ReplaceList,
                    // Sometimes a key of another type, which it refuses.
                    keys: vec![if self.rng.chance(10) {
                        k.meta.clone()
                    } else {
                        s(self.rng.pick(&LISTS))
                    }],
                    argv: (0..n).map(|_| s(self.rng.pick(&MEMBERS))).collect(),
                }
            }
            12 => {
                let mut argv = vec![token, epoch_arg];
                for _ in 0..self.rng.below(3) {
                    argv.push(self.rng.mostly(&["u1", "u2"], &["a,b", ""]));
                    argv.push(self.rng.mostly(&["1700 a:1@5,b:1@6", "17"], &["x", ""]));
                }
                if self.rng.chance(5) {
                    argv.push(s("u3"));
                }
                Step::Script {
                    script: Script::Quarantine,
                    // Sometimes a key of another type, which it refuses.
                    keys: vec![
                        k.lease.clone(),
                        k.epoch.clone(),
                        if self.rng.chance(10) {
                            k.lease.clone()
                        } else {
                            k.quarantine.clone()
                        },
                    ],
                    argv,
                }
            }
            _ if self.rng.chance(50) => Step::Script {
                script: Script::TableState,
                keys: vec![k.table.clone(), k.meta.clone()],
                argv: vec![s(self.rng.pick(&["0", "1"]))],
            },
            _ => self.edit(),
        }
    }

    fn commit(
        &mut self,
        ks: &mut Keyspace,
        now: u64,
        token: String,
        epoch: String,
        version: Option<String>,
    ) -> Step {
        let k = self.k.clone();
        let s = |x: &str| x.to_string();
        let write_table = self.rng.chance(70);
        // A rows write: on the stored table (its digest and its rows'
        // hashes, mostly right).
        let rows_only = write_table && self.rng.chance(50);
        let write_transit = self.rng.chance(50);
        let mut rows = Vec::new();
        for m in MEMBERS {
            if self.rng.chance(50) {
                rows.push((s(m), s(self.rng.pick(&["u1", "u1,u2", "", "u3,u4,u5"]))));
            }
        }
        let mut table = distributor::MatchingTable::from_rows(rows.clone());
        if self.rng.chance(10) {
            table = distributor::MatchingTable::from_rows(vec![(s("other"), s("u9"))]);
        }
        let pick_members = |rng: &mut Rng| -> Vec<String> {
            (0..rng.below(3)).map(|_| s(rng.pick(&MEMBERS))).collect()
        };
        let health_set = pick_members(&mut self.rng);
        let health_del = pick_members(&mut self.rng);
        let sus_set = pick_members(&mut self.rng);
        let sus_del = pick_members(&mut self.rng);
        let transit: Vec<(String, String)> = (0..self.rng.below(3))
            .map(|_| {
                (
                    s(self.rng.pick(&["u1,g", "u2,g", "u3,g"])),
                    s(self.rng.pick(&[
                        "0 1700000000000 m2:2 m1:1",
                        "4 1700000000000 m2:2 m1:1",
                        "0x",
                        "junk",
                    ])),
                )
            })
            .collect();
        let expected = match version {
            Some(v) if self.rng.chance(60) => v,
            _ if self.rng.chance(50) => s(""),
            _ => s(self.rng.pick(&["0", "3", "x"])),
        };
        // A history entry, mostly with a table write (without one it is
        // refused).
        let history: Vec<(String, String)> = if self.rng.chance(if write_table { 60 } else { 5 }) {
            vec![
                (s("why"), s(self.rng.pick(&["join", "leave,rebalance"]))),
                (s("members"), s("join m1:1 0 1")),
            ]
        } else {
            vec![]
        };
        let mut counts = [
            rows.len(),
            health_set.len(),
            health_del.len(),
            sus_set.len(),
            sus_del.len(),
            transit.len(),
            history.len(),
        ]
        .map(|n| n.to_string());
        if self.rng.chance(5) {
            let i = self.rng.below(7);
            counts[i] = s(self.rng.pick(&["9", "x", ""]));
        }
        let stored: Vec<(Vec<u8>, Vec<u8>)> = ks.hgetall(&k.table, now).unwrap_or_default();
        let hash_of = |m: &[u8], row: Option<&Vec<u8>>| {
            row.map_or(String::new(), |v| {
                distributor::core::table::row_hash(m, v)
                    .iter()
                    .map(|b| format!("{b:02x}"))
                    .collect()
            })
        };
        let mut replaces = Vec::new();
        let mut removed = Vec::new();
        if rows_only {
            for (m, _) in &rows {
                let row = stored
                    .iter()
                    .find(|(f, _)| f == m.as_bytes())
                    .map(|(_, v)| v);
                replaces.push(if self.rng.chance(93) {
                    hash_of(m.as_bytes(), row)
                } else {
                    s(self
                        .rng
                        .pick(&["", "00", "da39a3ee5e6b4b0d3255bfef95601890afd80709"]))
                });
            }
            for (m, v) in &stored {
                if self.rng.chance(30) && !rows.iter().any(|(r, _)| r.as_bytes() == m) {
                    let h = if self.rng.chance(85) {
                        hash_of(m, Some(v))
                    } else {
                        s("")
                    };
                    removed.push((String::from_utf8_lossy(m).into_owned(), h));
                }
            }
        }
        let base_digest = if !rows_only {
            self.rng.mostly(&[""], &["0000"])
        } else {
            match hfield(ks, &k.meta, "digest", now) {
                Some(d) if self.rng.chance(93) => d,
                _ => s(self
                    .rng
                    .pick(&["", "0000000000000000000000000000000000000000"])),
            }
        };
        let n_removed = if self.rng.chance(3) {
            s(self.rng.pick(&["1", "x"]))
        } else {
            removed.len().to_string()
        };
        let mut argv = vec![
            token,
            epoch,
            s(self.rng.pick(&COUNTS[..5])),
            table.digest().to_string(),
            self.rng.mostly(&["1700000000001"], &["x"]),
            s("r1"),
            k.table_channel.clone(),
            s(match (write_table, rows_only) {
                (true, true) => "2",
                (true, false) => "1",
                _ => "0",
            }),
            counts[0].clone(),
            counts[1].clone(),
            counts[2].clone(),
            counts[3].clone(),
            counts[4].clone(),
            s(if write_transit { "1" } else { "0" }),
            counts[5].clone(),
            s("ring"),
            s(self.rng.pick(&["", "2 1 0"])),
            expected,
            counts[6].clone(),
            // Small, so that trimming happens; sometimes unusable.
            self.rng.mostly(&["3", "2"], &["0", "x", ""]),
            base_digest,
            n_removed,
            // The server's run id (40 hex digits or empty; rarely unusable)
            // and the reports known (a count; rarely unusable), chosen by
            // the table's digest, so that the generator's draws stay as
            // they were.
            s(match table.digest().as_bytes()[0] {
                b'0' => "x",
                b'1'..=b'7' => "00000000000000000000000000000000000000a1",
                _ => "",
            }),
            s(match table.digest().as_bytes()[1] {
                b'0' => "x",
                b'1'..=b'7' => "3",
                _ => "0",
            }),
            s(match table.digest().as_bytes()[2] {
                b'0' => "",
                b'1'..=b'7' => "10000",
                _ => "0",
            }),
        ];
        if self.rng.chance(15) {
            // A floor from the whole range, up to 2^53 and past 1e14.
            argv[2] = s(self.rng.pick(&COUNTS));
        }
        for (i, (m, u)) in rows.into_iter().enumerate() {
            argv.push(m);
            argv.push(u);
            if let Some(h) = replaces.get(i) {
                argv.push(h.clone());
            }
        }
        for (m, h) in removed {
            argv.push(m);
            argv.push(h);
        }
        for m in health_set {
            argv.push(m);
            argv.push(s("1 0 0 -"));
        }
        argv.extend(health_del);
        for m in sus_set {
            argv.push(m);
            argv.push(s("1700000000000 r1"));
        }
        argv.extend(sus_del);
        for (f, v) in transit {
            argv.push(f);
            argv.push(v);
        }
        for (f, v) in history {
            argv.push(f);
            argv.push(v);
        }
        Step::Script {
            script: Script::Commit,
            keys: vec![
                k.table.clone(),
                k.meta.clone(),
                k.epoch.clone(),
                k.lease.clone(),
                k.liveness.clone(),
                k.suspects.clone(),
                k.transit.clone(),
                k.changes.clone(),
            ],
            argv,
        }
    }

    /// An operator's edit (or Redis losing a key): the next calls must
    /// treat it the same way in both.
    fn edit(&mut self) -> Step {
        let k = self.k.clone();
        let s = |x: &str| x.to_string();
        let key = s(self.rng.pick(&[
            &k.lease,
            &k.epoch,
            &k.meta,
            &k.table,
            &k.liveness,
            &k.suspects,
            &k.transit,
            &k.members,
            &k.changes,
            LISTS[0],
            LISTS[1],
            LISTS[2],
        ]));
        let cmd = match self.rng.below(7) {
            0 => vec![s("DEL"), key],
            1 => vec![s("SET"), key, s(self.rng.pick(&COUNTS))],
            2 => vec![s("RPUSH"), key, s("x")],
            3 => vec![s("SADD"), key, s("x")],
            4 => vec![
                s("HSET"),
                k.meta.clone(),
                s(self.rng.pick(&[
                    "version",
                    "generation",
                    "generation_floor",
                    "members",
                    "digest",
                    "holder_conn",
                ])),
                s(self.rng.pick(&COUNTS)),
            ],
            5 => vec![s("HSET"), k.table.clone(), s("m1:1"), s("u7")],
            _ => vec![s("SET"), k.lease.clone(), s("tA")],
        };
        Step::Edit(cmd)
    }
}

fn string(ks: &mut Keyspace, key: &str, now: u64) -> Option<String> {
    ks.get(key, now)
        .ok()
        .flatten()
        .map(|v| String::from_utf8_lossy(&v).into_owned())
}

fn hfield(ks: &mut Keyspace, key: &str, field: &str, now: u64) -> Option<String> {
    ks.hget(key, field.as_bytes(), now)
        .ok()
        .flatten()
        .map(|v| String::from_utf8_lossy(&v).into_owned())
}

/// Applies an edit to the in-memory keyspace as Redis applies it.
fn edit_memory(ks: &mut Keyspace, cmd: &[String], now: u64) -> Result<(), memory::WrongType> {
    let b = |s: &String| s.as_bytes().to_vec();
    match cmd[0].as_str() {
        "DEL" => {
            ks.del(&cmd[1], now);
        }
        "SET" => ks.set(&cmd[1], b(&cmd[2]), None, now),
        "RPUSH" => {
            ks.push(&cmd[1], &[b(&cmd[2])], false, now)?;
        }
        "SADD" => match ks.type_of(&cmd[1], now) {
            "none" => ks.put(&cmd[1], Data::Set([b(&cmd[2])].into())),
            "set" => {}
            _ => {
                return Err(memory::WrongType {
                    key: cmd[1].clone(),
                });
            }
        },
        "HSET" => {
            ks.hset(&cmd[1], &[(b(&cmd[2]), b(&cmd[3]))], now)?;
        }
        other => panic!("no such edit: {other}"),
    }
    Ok(())
}

/// The whole keyspace of the real server: key → (value, has an expiry).
async fn dump_redis(c: &mut redis::aio::MultiplexedConnection) -> BTreeMap<String, (Data, bool)> {
    let keys: Vec<String> = redis::cmd("KEYS").arg("*").query_async(c).await.unwrap();
    let mut out = BTreeMap::new();
    for key in keys {
        let t: String = redis::cmd("TYPE").arg(&key).query_async(c).await.unwrap();
        let data = match t.as_str() {
            "string" => Data::Str(redis::cmd("GET").arg(&key).query_async(c).await.unwrap()),
            "hash" => {
                let h: BTreeMap<Vec<u8>, Vec<u8>> = redis::cmd("HGETALL")
                    .arg(&key)
                    .query_async(c)
                    .await
                    .unwrap();
                Data::Hash(h)
            }
            "list" => {
                let l: Vec<Vec<u8>> = redis::cmd("LRANGE")
                    .arg(&key)
                    .arg(0)
                    .arg(-1)
                    .query_async(c)
                    .await
                    .unwrap();
                Data::List(l.into())
            }
            "stream" => {
                let entries: Vec<(String, memory::Pairs)> = redis::cmd("XRANGE")
                    .arg(&key)
                    .arg("-")
                    .arg("+")
                    .query_async(c)
                    .await
                    .unwrap();
                Data::Stream(entries.into_iter().map(|(_, f)| ((0, 0), f)).collect())
            }
            "set" => {
                let s: std::collections::BTreeSet<Vec<u8>> = redis::cmd("SMEMBERS")
                    .arg(&key)
                    .query_async(c)
                    .await
                    .unwrap();
                Data::Set(s)
            }
            other => panic!("unexpected type {other} of {key}"),
        };
        let pttl: i64 = redis::cmd("PTTL").arg(&key).query_async(c).await.unwrap();
        out.insert(key, (data, pttl >= 0));
    }
    out
}

/// Stream entry ids come from each store's clock: compared without them.
fn without_ids(mut dump: BTreeMap<String, (Data, bool)>) -> BTreeMap<String, (Data, bool)> {
    for (d, _) in dump.values_mut() {
        if let Data::Stream(entries) = d {
            for (id, _) in entries.iter_mut() {
                *id = (0, 0);
            }
        }
    }
    dump
}

/// Replies equal, but for a lease's remaining TTL, which runs on two clocks.
fn same_reply(script: Script, a: &Value, b: &Value) -> bool {
    match (script, a, b) {
        (Script::Acquire, Value::Array(x), Value::Array(y)) if x.len() == 8 && y.len() == 8 => {
            let close = match (&x[1], &y[1]) {
                (Value::Int(p), Value::Int(q)) => (p - q).abs() <= 2_000,
                _ => false,
            };
            close && x[0] == y[0] && x[2..] == y[2..]
        }
        _ => a == b,
    }
}

/// Whether a script did what it was asked (else it refused, or found
/// nothing to do), to show that the random calls reach both sides.
fn accepted(script: Script, v: &Value) -> bool {
    match (script, v) {
        (Script::TableState, Value::Array(x)) => x.first().is_some_and(|d| *d != Value::Nil),
        (Script::ReplaceList, Value::Int(_)) => true,
        (_, Value::Int(n)) => *n == 1,
        (_, Value::Array(x)) => x.first() == Some(&Value::Int(1)),
        _ => false,
    }
}

/// Per script: (accepted, refused) calls.
type Outcomes = BTreeMap<String, (usize, usize)>;

async fn run_seed(
    seed: u64,
    steps: usize,
    c: &mut redis::aio::MultiplexedConnection,
    outcomes: &mut Outcomes,
) -> Result<(), String> {
    let _: () = redis::cmd("FLUSHALL").query_async(c).await.unwrap();
    let start = Instant::now();
    let now = || start.elapsed().as_millis() as u64;
    let mut ks = Keyspace::new();
    let mut world = World {
        rng: Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1),
        k: keys(),
    };
    let mut done = Vec::new();
    for _ in 0..steps {
        let step = world.step(&mut ks, now());
        done.push(step.clone());
        let report = |what: String, done: &[Step]| {
            let calls = done
                .iter()
                .enumerate()
                .map(|(i, s)| format!("  {i:3}: {s:?}"))
                .collect::<Vec<_>>()
                .join("\n");
            format!("seed {seed}: {what}\ncalls:\n{calls}")
        };
        match &step {
            Step::Script { script, keys, argv } => {
                let mut inv = redis::cmd("EVAL");
                inv.arg(script.source()).arg(keys.len());
                for key in keys {
                    inv.arg(key);
                }
                for a in argv {
                    inv.arg(a);
                }
                let real: redis::RedisResult<Value> = inv.query_async(c).await;
                let argv: Vec<Vec<u8>> = argv.iter().map(|a| a.as_bytes().to_vec()).collect();
                let mem = memory::run(*script, &mut ks, keys, &argv, now());
                match (&real, &mem) {
                    (Ok(r), Ok((m, _))) if same_reply(*script, r, m) => {
                        let ok = accepted(*script, r);
                        let mut kinds = vec![format!("{script:?}")];
                        // Rows writes (`write_table` 2) are counted apart too.
                        if *script == Script::Commit && argv.get(7).is_some_and(|a| a == b"2") {
                            kinds.push("Commit rows".into());
                        }
                        for kind in kinds {
                            let o = outcomes.entry(kind).or_default();
                            if ok {
                                o.0 += 1;
                            } else {
                                o.1 += 1;
                            }
                        }
                    }
                    (Err(_), Err(_)) => {}
                    _ => {
                        return Err(report(
                            format!("replies differ: redis {real:?}, memory {mem:?}"),
                            &done,
                        ));
                    }
                }
            }
            Step::Edit(cmd) => {
                let real: redis::RedisResult<Value> =
                    redis::cmd(&cmd[0]).arg(&cmd[1..]).query_async(c).await;
                let mem = edit_memory(&mut ks, cmd, now());
                if real.is_ok() != mem.is_ok() {
                    return Err(report(
                        format!("edit differs: redis {real:?}, memory {mem:?}"),
                        &done,
                    ));
                }
            }
        }
        let (r, m) = (dump_redis(c).await, without_ids(ks.dump(now())));
        if r != m {
            return Err(report(
                format!("keyspaces differ:\nredis  {r:?}\nmemory {m:?}"),
                &done,
            ));
        }
    }
    Ok(())
}

#[tokio::test]
async fn the_in_memory_redis_runs_every_script_as_redis_does() {
    let redis = RedisServer::start();
    let client = redis::Client::open(redis.url()).unwrap();
    let mut c = client.get_multiplexed_async_connection().await.unwrap();
    if let Ok(s) = std::env::var("MEMORY_STORE_SEED") {
        let seed = s.parse().expect("MEMORY_STORE_SEED is a number");
        if let Err(e) = run_seed(seed, 40, &mut c, &mut Outcomes::new()).await {
            panic!("{e}");
        }
        return;
    }
    let mut outcomes = Outcomes::new();
    for seed in 1..=150 {
        if let Err(e) = run_seed(seed, 40, &mut c, &mut outcomes).await {
            panic!("{e}");
        }
    }
    // Every script both did its work and refused, several times over: the
    // comparison covered both sides of each.
    let kinds = Script::ALL.iter().map(|s| format!("{s:?}"));
    for script in kinds.chain(["Commit rows".to_string()]) {
        let (yes, no) = outcomes.get(&script).copied().unwrap_or_default();
        assert!(
            yes >= 10 && no >= 5,
            "{script}: {yes} accepted, {no} refused"
        );
    }
}

/// One operation of the store-level comparison.
#[derive(Debug, Clone)]
enum Op {
    Acquire {
        ttl_s: u64,
        epoch_floor: u64,
        generation_floor: u64,
    },
    Renew {
        grant: usize,
    },
    Release {
        grant: usize,
    },
    Commit {
        grant: usize,
        rows: Vec<(String, String)>,
        table: bool,
        health: Vec<String>,
        removed: Vec<String>,
        transit: Option<Vec<(String, String)>>,
        floor: u64,
        expected: Option<u64>,
    },
    ReadHolding {
        with_table: bool,
    },
    ReadSnapshot,
    ReadTable,
    ReadTableState,
    ReadGeneration,
    Forget {
        grant: usize,
        pairs: Vec<(String, String)>,
    },
    Edit(Vec<String>),
}

fn draw_op(rng: &mut Rng, grants: usize, version: Option<u64>, world: &mut World) -> Op {
    let s = |x: &str| x.to_string();
    let grant = if grants == 0 {
        0
    } else {
        rng.below(grants + 1)
    };
    match rng.below(14) {
        0 | 1 => Op::Acquire {
            ttl_s: 60,
            epoch_floor: rng.below(3) as u64,
            generation_floor: rng.below(4) as u64,
        },
        2 => Op::Renew { grant },
        3 if rng.chance(40) => Op::Release { grant },
        3..=6 => {
            let mut rows = Vec::new();
            for m in MEMBERS {
                if rng.chance(60) {
                    rows.push((s(m), s(rng.pick(&["u1", "u2,u3", "u4"]))));
                }
            }
            let pick = |rng: &mut Rng| -> Vec<String> {
                (0..rng.below(3)).map(|_| s(rng.pick(&MEMBERS))).collect()
            };
            Op::Commit {
                grant,
                rows,
                table: rng.chance(70),
                health: pick(rng),
                removed: pick(rng),
                transit: rng.chance(50).then(|| {
                    (0..rng.below(3))
                        .map(|_| {
                            (
                                s(rng.pick(&["u1,g", "u2,g"])),
                                s(rng.pick(&["0 1700000000000 m2:2 m1:1", "3 5 m1:1 m3:3"])),
                            )
                        })
                        .collect()
                }),
                floor: rng.below(3) as u64,
                expected: match version {
                    Some(v) if rng.chance(70) => Some(v),
                    _ if rng.chance(50) => None,
                    _ => Some(rng.below(5) as u64),
                },
            }
        }
        7 => Op::ReadHolding {
            with_table: rng.chance(50),
        },
        8 => Op::ReadSnapshot,
        9 => Op::ReadTable,
        10 => Op::ReadTableState,
        11 => Op::ReadGeneration,
        12 => Op::Forget {
            grant,
            pairs: (0..rng.below(3))
                .map(|_| (s(rng.pick(&LISTS)), s(rng.pick(&MEMBERS))))
                .collect(),
        },
        _ => match world.edit() {
            Step::Edit(cmd) => Op::Edit(cmd),
            Step::Script { .. } => unreachable!("edit() makes edits"),
        },
    }
}

/// Runs `op` on one store; the grants are that store's own (tokens differ
/// between the two), index `grants.len()` is a grant nobody holds.
async fn apply<S: HoldingStore>(store: &S, grants: &mut Vec<LeaseGrant>, op: &Op) -> String {
    let grant = |i: usize, grants: &[LeaseGrant]| {
        grants.get(i).cloned().unwrap_or(LeaseGrant {
            token: "nobody".into(),
            epoch: 99,
        })
    };
    match op {
        Op::Acquire {
            ttl_s,
            epoch_floor,
            generation_floor,
        } => {
            let claim = Claim {
                ttl: std::time::Duration::from_secs(*ttl_s),
                epoch_floor: *epoch_floor,
                generation_floor: *generation_floor,
                holder_id: "r1",
                now_ms: 1_700_000_000_000,
                failure_threshold: 3,
                takeover: None,
            };
            match store.acquire(&claim).await {
                Ok(Acquisition::Acquired(g)) => {
                    let out = format!("acquired epoch {}", g.epoch);
                    grants.push(g);
                    out
                }
                Ok(Acquisition::Held {
                    holder,
                    epoch,
                    generation,
                    foreign,
                    record,
                    pttl,
                }) => format!(
                    "held by {holder} epoch {epoch} generation {generation} foreign {foreign:?} record {} pttl {}",
                    record.is_some(),
                    pttl.is_some()
                ),
                Err(e) => format!("error {e}"),
            }
        }
        Op::Renew { grant: i } => format!(
            "{:?}",
            store
                .renew(
                    &grant(*i, grants),
                    std::time::Duration::from_secs(60),
                    std::time::Duration::from_secs(2)
                )
                .await
                .map_err(|e| e.to_string())
        ),
        Op::Release { grant: i } => format!(
            "{:?}",
            store
                .release(&grant(*i, grants))
                .await
                .map_err(|e| e.to_string())
        ),
        Op::Commit {
            grant: i,
            rows,
            table,
            health,
            removed,
            transit,
            floor,
            expected,
        } => {
            let t = distributor::MatchingTable::from_rows(rows.clone());
            let h = distributor::core::liveness::HealthChanges {
                set: health
                    .iter()
                    .map(|m| {
                        (
                            m.clone(),
                            distributor::core::liveness::Health {
                                answered: true,
                                failures: 0,
                                failing_since_ms: None,
                                reason: None,
                            },
                        )
                    })
                    .collect(),
                removed: removed.clone(),
            };
            let c = distributor::edge::redis::Commit {
                table: table.then_some(&t),
                transit: transit.as_deref(),
                generation_floor: *floor,
                now_ms: 1_700_000_000_001,
                expected_version: *expected,
                ..crate::support::bare_commit("r1", &h)
            };
            format!(
                "{:?}",
                store
                    .commit(&grant(*i, grants), &c)
                    .await
                    .map_err(|e| e.to_string())
            )
        }
        Op::ReadHolding { with_table } => match store.read_holding(*with_table).await {
            Ok(mut i) => {
                i.transit.sort();
                let liveness: BTreeMap<_, _> = i.liveness.iter().collect();
                format!(
                    "table {:?} version {} generation {} liveness {liveness:?} suspects {:?} bad {:?} transit {:?}",
                    i.table, i.version, i.generation, i.suspects, i.unreadable_suspects, i.transit
                )
            }
            Err(e) => format!("error {e}"),
        },
        Op::ReadSnapshot => {
            let services = vec![LISTS[0].to_string(), LISTS[1].to_string()];
            match store
                .read_snapshot(&services, LISTS[2], &Default::default(), None)
                .await
            {
                // List and report versions name content in each store's own
                // numbering: compared by what they hold.
                Ok(s) => {
                    let reports = s.reports.content.map(|c| {
                        let sorted = |r: distributor::edge::redis::Reports| {
                            r.map(|mut p| {
                                p.sort();
                                p
                            })
                            .map_err(|e| e.to_string())
                        };
                        (
                            sorted(c.reports),
                            c.overrides.map(sorted),
                            c.controls.map(sorted),
                        )
                    });
                    format!(
                        "lists {:?} units {:?} digest {:?} generation {} reports {reports:?}",
                        s.groups.iter().map(|g| &g.entries).collect::<Vec<_>>(),
                        s.units.entries,
                        s.stored_digest,
                        s.stored_generation,
                    )
                }
                Err(e) => format!("error {e}"),
            }
        }
        Op::ReadTable => format!("{:?}", store.read_table().await.map_err(|e| e.to_string())),
        Op::ReadTableState => match store.read_table_state().await {
            // The Redis store may return the table it verified; the memory
            // store checks the digest in place: compare what both know.
            Ok((digest, generation, _)) => format!("digest {digest:?} generation {generation}"),
            Err(e) => format!("error {e}"),
        },
        Op::ReadGeneration => format!(
            "{:?}",
            store.read_generation().await.map_err(|e| e.to_string())
        ),
        Op::Forget { grant: i, pairs } => {
            let pairs: Vec<(String, Vec<u8>)> = pairs
                .iter()
                .map(|(l, m)| (l.clone(), m.as_bytes().to_vec()))
                .collect();
            format!(
                "{:?}",
                store
                    .forget_many(&grant(*i, grants), &pairs)
                    .await
                    .map_err(|e| e.to_string())
            )
        }
        Op::Edit(_) => String::new(),
    }
}

/// A keyspace dump with each store's lease tokens and client ids replaced
/// by their order of issue, which is all the two can agree on.
fn normalized(
    mut dump: BTreeMap<String, (Data, bool)>,
    grants: &[LeaseGrant],
    client: &str,
) -> String {
    let mut text = String::new();
    for (k, (d, ttl)) in std::mem::take(&mut dump) {
        text.push_str(&format!("{k} ttl={ttl} {d:?}\n"));
    }
    let show = |bytes: &[u8]| format!("{bytes:?}");
    for (i, g) in grants.iter().enumerate() {
        text = text.replace(&show(g.token.as_bytes()), &format!("<token {i}>"));
        let with_client = format!("{} {client}", g.token);
        text = text.replace(
            &show(with_client.as_bytes()),
            &format!("<token {i} client>"),
        );
    }
    text
}

#[tokio::test]
async fn the_in_memory_store_reads_and_writes_as_the_redis_store_does() {
    let redis = RedisServer::start();
    let client = redis::Client::open(redis.url()).unwrap();
    let mut c = client.get_multiplexed_async_connection().await.unwrap();
    let mut results: Vec<String> = Vec::new();
    for seed in 1..=60u64 {
        let _: () = redis::cmd("FLUSHALL").query_async(&mut c).await.unwrap();
        let store = Store::open(&redis.url(), TABLE, std::time::Duration::from_secs(2))
            .unwrap()
            .with_limits(LIMITS);
        let server = memory::Server::new(1_700_000_000_000);
        let mem = MemoryStore::connect(&server, TABLE).with_limits(LIMITS);
        let mut world = World {
            rng: Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1),
            k: keys(),
        };
        let (mut real_grants, mut mem_grants) = (Vec::new(), Vec::new());
        let mut done = Vec::new();
        for _ in 0..30 {
            let version = {
                let s = &mut *server.lock().unwrap();
                let now = s.now_ms;
                hfield(&mut s.keyspace, &keys().meta, "version", now).and_then(|v| v.parse().ok())
            };
            let mut rng = Rng(world.rng.next() | 1);
            let op = draw_op(&mut rng, mem_grants.len(), version, &mut world);
            done.push(op.clone());
            if let Op::Edit(cmd) = &op {
                let real: redis::RedisResult<Value> =
                    redis::cmd(&cmd[0]).arg(&cmd[1..]).query_async(&mut c).await;
                let s = &mut *server.lock().unwrap();
                let now = s.now_ms;
                let m = edit_memory(&mut s.keyspace, cmd, now);
                assert_eq!(real.is_ok(), m.is_ok(), "seed {seed}: {done:#?}");
                continue;
            }
            let a = apply(&store, &mut real_grants, &op).await;
            let b = apply(&mem, &mut mem_grants, &op).await;
            assert_eq!(a, b, "seed {seed}: results differ after {done:#?}");
            results.push(a);
            let real_client = match store.lease_client() {
                distributor::edge::redis::LeaseClient::Id(c) => c.encode(),
                _ => String::new(),
            };
            let r = normalized(dump_redis(&mut c).await, &real_grants, &real_client);
            let m = {
                let s = &mut *server.lock().unwrap();
                let now = s.now_ms;
                let conn =
                    distributor::core::handoff::RedisConnection::on(mem.client(), s.run_id());
                normalized(s.keyspace.dump(now), &mem_grants, &conn.encode())
            };
            assert_eq!(r, m, "seed {seed}: keyspaces differ after {done:#?}");
        }
    }
    // The operations reached both their success and their refusals.
    for expected in [
        "acquired",
        "held by",
        "Ok(Renewed)",
        "Ok(Lost",
        "Ok(Written",
        "Ok(Fenced",
        "Ok(Outdated",
        "table Some",
        "lists [Some",
        "digest Some",
        "error",
    ] {
        let n = results.iter().filter(|r| r.starts_with(expected)).count();
        assert!(n >= 3, "{expected}: {n} results");
    }
}
