//! Poison units (`core::quarantine`), from outside: worker processes that
//! crash on acquiring one unit, restarted a second later by a supervisor (as
//! Kubernetes does), against a real daemon and Redis.

use std::collections::HashMap;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use distributor::core::table::{MatchingTable, decode_row};

use crate::support::*;

const POISON: &str = "unit-poison";
const WORKERS: usize = 6;

/// One worker's slot: its address, and its process while one runs.
struct Slot {
    port: u16,
    child: Option<Child>,
    /// When a crashed process is started again.
    restart_at: Option<Instant>,
}

/// The supervisor: starts each worker, counts crashes, starts a crashed
/// one again on the same address one second later.
struct Supervisor {
    redis_url: String,
    slots: Vec<Slot>,
    crashes: usize,
    /// When each crash was seen, and whose, for a failure's message.
    timeline: Vec<(Duration, String)>,
    started: Instant,
}

impl Supervisor {
    fn start(redis_url: &str) -> Supervisor {
        let mut s = Supervisor {
            redis_url: redis_url.to_string(),
            slots: (0..WORKERS)
                .map(|_| Slot {
                    port: free_port(),
                    child: None,
                    restart_at: None,
                })
                .collect(),
            crashes: 0,
            timeline: Vec::new(),
            started: Instant::now(),
        };
        for i in 0..WORKERS {
            s.spawn(i);
        }
        s
    }

    fn spawn(&mut self, i: usize) {
        let slot = &mut self.slots[i];
        let id = format!("127.0.0.1:{}", slot.port);
        let child = Command::new(example_worker())
            .args(["--listen", &id, "--redis-url", &self.redis_url])
            .args(["--services-key", SERVICES, "--table", TABLE])
            .args(["--poll-interval", "100ms", "--crash-on", POISON])
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        slot.child = Some(child);
        slot.restart_at = None;
    }

    /// Reaps crashed workers and starts those whose second is up.
    fn tend(&mut self) {
        let now = Instant::now();
        for i in 0..self.slots.len() {
            let slot = &mut self.slots[i];
            if let Some(c) = slot.child.as_mut()
                && c.try_wait().unwrap().is_some()
            {
                slot.child = None;
                slot.restart_at = Some(now + Duration::from_secs(1));
                self.crashes += 1;
                self.timeline
                    .push((self.started.elapsed(), format!("127.0.0.1:{}", slot.port)));
            }
            if slot.restart_at.is_some_and(|at| at <= now) {
                self.spawn(i);
            }
        }
    }

    fn running(&self) -> Vec<String> {
        self.slots
            .iter()
            .filter(|s| s.child.is_some())
            .map(|s| format!("127.0.0.1:{}", s.port))
            .collect()
    }

    /// Tends the workers for `span`, calling `each` with the table and the
    /// quarantined units every 50 ms.
    async fn run_for(
        &mut self,
        redis: &RedisServer,
        span: Duration,
        mut each: impl FnMut(&MatchingTable, &HashMap<String, String>),
    ) {
        let end = Instant::now() + span;
        while Instant::now() < end {
            self.tend();
            let (rows, quarantine): (HashMap<String, String>, HashMap<String, String>) = redis
                .multi(&[&["HGETALL", TABLE], &["HGETALL", &keys().quarantine]])
                .await;
            each(&MatchingTable::from_rows(rows), &quarantine);
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Drop for Supervisor {
    fn drop(&mut self) {
        for s in &mut self.slots {
            if let Some(c) = s.child.as_mut() {
                let _ = c.kill();
                let _ = c.wait();
            }
        }
    }
}

fn in_rows(t: &MatchingTable, unit: &str) -> usize {
    t.rows()
        .values()
        .filter(|row| decode_row(row).contains(&unit))
        .count()
}

fn quarantine_list(redis: &RedisServer) -> serde_json::Value {
    let out = cli(&redis.url(), &["workunits", "quarantine", "list", "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn quarantined(list: &serde_json::Value) -> Vec<String> {
    list.as_array()
        .unwrap()
        .iter()
        .map(|u| u["unit"].as_str().unwrap().to_string())
        .collect()
}

/// The scenario: six workers, 200 units and one that crashes any
/// worker holding it, each crashed worker restarted a second later. The
/// poison unit crashes at most three workers, is then in no row for the
/// rest of a 40 s run and listed as quarantined, and every other unit has
/// a running owner; released, it is placed again (and, still poison,
/// quarantined again within three more crashes).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_poison_unit_crashes_at_most_three_workers_and_is_quarantined() {
    let redis = RedisServer::start();
    let mut fleet = Fleet::new(redis);
    let mut units = units(200);
    fleet.set_units(&units).await;
    fleet.add_replica();
    let mut workers = Supervisor::start(&fleet.redis.url());
    // The fleet runs first, every worker with its share; then the poison
    // unit is listed. (Listed from the start, it crashes workers while
    // the others still register: two of the first two live members dying
    // together is most of the group, a mass failure whose deaths count
    // for nothing, and the test would measure the start-up.)
    let running = workers.running();
    fleet
        .wait_for_table_with(&units, &running, Duration::from_secs(30))
        .await;
    units.push(POISON.to_string());
    let _: () = fleet.redis.cmd(&["RPUSH", UNITS, POISON]).await;

    let mut quarantined_at: Option<Duration> = None;
    let mut seen_after_quarantine = 0usize;
    let mut doubled = Vec::new();
    let redis = &fleet.redis;
    let start = Instant::now();
    workers
        .run_for(redis, Duration::from_secs(40), |t, q| {
            if quarantined_at.is_some() && in_rows(t, POISON) > 0 {
                seen_after_quarantine += 1;
            }
            if quarantined_at.is_none() && q.contains_key(POISON) {
                quarantined_at = Some(start.elapsed());
            }
            for u in units.iter().filter(|u| in_rows(t, u) > 1) {
                doubled.push(u.clone());
            }
        })
        .await;
    let list = quarantine_list(redis);
    assert_eq!(
        quarantined(&list),
        vec![POISON.to_string()],
        "the quarantine names the poison unit alone: {list:#}; crashes {:?}",
        workers.timeline
    );
    let crashes = workers.crashes;
    assert!(
        (1..=3).contains(&crashes),
        "{crashes} workers crashed (at most three): {:?}; {list:#}",
        workers.timeline
    );
    assert_eq!(
        list[0]["deaths"].as_array().unwrap().len(),
        3,
        "three deaths of distinct members: {list:#}"
    );
    assert!(
        quarantined_at.is_some_and(|at| at < Duration::from_secs(30)),
        "quarantined {quarantined_at:?} into the run"
    );
    assert_eq!(
        seen_after_quarantine, 0,
        "the poison unit was in a row after its quarantine"
    );
    assert!(doubled.is_empty(), "units in two rows: {doubled:?}");

    // Every other unit has a running owner, and the poison unit none.
    let running = workers.running();
    let t = fleet.table().await;
    assert_eq!(in_rows(&t, POISON), 0);
    for u in units.iter().filter(|u| *u != POISON) {
        let owners: Vec<&String> = t
            .rows()
            .iter()
            .filter(|(_, row)| decode_row(row).contains(&u.as_str()))
            .map(|(m, _)| m)
            .collect();
        assert!(
            owners.len() == 1 && running.contains(owners[0]),
            "{u}: owners {owners:?}, running {running:?}"
        );
    }

    // Released: placed again, crashes again, quarantined again.
    let out = cli(
        &redis.url(),
        &["workunits", "quarantine", "release", POISON],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let before = workers.crashes;
    let mut placed = false;
    workers
        .run_for(
            redis,
            Duration::from_secs(1),
            |t, _: &HashMap<String, String>| {
                placed |= in_rows(t, POISON) > 0;
            },
        )
        .await;
    let limit = Instant::now() + Duration::from_secs(30);
    while Instant::now() < limit && quarantined(&quarantine_list(redis)).is_empty() {
        workers
            .run_for(redis, Duration::from_millis(200), |t, _| {
                placed |= in_rows(t, POISON) > 0;
            })
            .await;
    }
    assert!(
        placed || workers.crashes > before,
        "the released unit was placed again"
    );
    assert_eq!(
        quarantined(&quarantine_list(redis)),
        vec![POISON.to_string()]
    );
    assert!(
        workers.crashes - before <= 3,
        "{} more crashes after the release",
        workers.crashes - before
    );
    // A unit that is not quarantined cannot be released; a bad name is
    // refused naming it.
    let out = cli(
        &redis.url(),
        &["workunits", "quarantine", "release", "unit-0001"],
    );
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("\"unit-0001\" is not quarantined"));
    let out = cli(&redis.url(), &["workunits", "quarantine", "release", "a,b"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("invalid work unit \"a,b\""));
    drop(workers);
    fleet.shutdown().await;
}
