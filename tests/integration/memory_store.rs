//! The in-memory Redis of the simulation (`edge::memory`) against a real
//! `redis-server`: random calls of every Lua script, with operators' edits
//! between them (values that do not parse, keys of the wrong type, keys
//! deleted, counters near 2^53), must give the same reply and leave the
//! same keyspace, after every call. A failing run prints its seed and the
//! calls up to the first difference; `MEMORY_STORE_SEED=<n>` replays one.

use std::collections::BTreeMap;
use std::time::Instant;

use distributor::edge::memory::{self, Data, Keyspace, Script};
use redis::Value;

use crate::support::{RedisServer, keys};

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
        match self.rng.below(12) {
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
                        self.rng.mostly(&["", "12", "13"], &["y"]),
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
                    self.rng.mostly(&["", "12", "14"], &["z"]),
                ],
            },
            4 if self.rng.chance(50) => Step::Script {
                script: Script::Release,
                keys: vec![k.lease.clone(), k.meta.clone()],
                argv: vec![token, epoch_arg, k.lease_channel.clone()],
            },
            4..=7 => self.commit(token, epoch_arg, version),
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
                    keys: vec![s(self.rng.pick(&LISTS))],
                    argv: (0..n).map(|_| s(self.rng.pick(&MEMBERS))).collect(),
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

    fn commit(&mut self, token: String, epoch: String, version: Option<String>) -> Step {
        let k = self.k.clone();
        let s = |x: &str| x.to_string();
        let write_table = self.rng.chance(70);
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
        let mut counts = [
            rows.len(),
            health_set.len(),
            health_del.len(),
            sus_set.len(),
            sus_del.len(),
            transit.len(),
        ]
        .map(|n| n.to_string());
        if self.rng.chance(5) {
            let i = self.rng.below(6);
            counts[i] = s(self.rng.pick(&["9", "x", ""]));
        }
        let mut argv = vec![
            token,
            epoch,
            s(self.rng.pick(&COUNTS[..5])),
            table.digest().to_string(),
            self.rng.mostly(&["1700000000001"], &["x"]),
            s("r1"),
            k.table_channel.clone(),
            s(if write_table { "1" } else { "0" }),
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
        ];
        if self.rng.chance(15) {
            // A floor from the whole range, up to 2^53 and past 1e14.
            argv[2] = s(self.rng.pick(&COUNTS));
        }
        for (m, u) in rows {
            argv.push(m);
            argv.push(u);
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
                        let o = outcomes.entry(format!("{script:?}")).or_default();
                        if accepted(*script, r) {
                            o.0 += 1;
                        } else {
                            o.1 += 1;
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
        let (r, m) = (dump_redis(c).await, ks.dump(now()));
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
    for script in Script::ALL {
        let (yes, no) = outcomes
            .get(&format!("{script:?}"))
            .copied()
            .unwrap_or_default();
        assert!(
            yes >= 10 && no >= 5,
            "{script:?}: {yes} accepted, {no} refused"
        );
    }
}
