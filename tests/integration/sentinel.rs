//! Redis Sentinel (issue 25): a master, a replica and three real sentinels;
//! the distributor, the CLI and `Member`s find the master through the
//! sentinels, and go on after a failover to the replica.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use distributor::core::handoff::MemberReport;
use distributor::edge::redis::{Acquisition, RedisOptions, Renewal, SentinelOptions, Store};
use std::time::Instant;

use crate::support::*;

const MASTER: &str = "themaster";

/// Three sentinels monitoring a master with one replica.
struct Sentinels {
    master: RedisServer,
    replica: RedisServer,
    sentinels: Vec<(u16, Child)>,
    dir: std::path::PathBuf,
}

impl Sentinels {
    fn start() -> Sentinels {
        // Diskless sync at once: the default waits 5 s for more replicas.
        let master = RedisServer::start_with(&["--repl-diskless-sync-delay", "0"]);
        let replica =
            RedisServer::start_with(&["--replicaof", "127.0.0.1", &master.port().to_string()]);
        let dir = std::env::temp_dir().join(format!(
            "distributor-test-sentinel-{}-{}",
            std::process::id(),
            master.port()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let sentinels = (0..3)
            .map(|i| {
                let port = free_port();
                let conf = dir.join(format!("sentinel-{i}.conf"));
                std::fs::write(
                    &conf,
                    format!(
                        "port {port}\nbind 127.0.0.1\ndir {dir}\n\
                         sentinel monitor {MASTER} 127.0.0.1 {master} 2\n\
                         sentinel down-after-milliseconds {MASTER} 1000\n\
                         sentinel failover-timeout {MASTER} 5000\n",
                        dir = dir.display(),
                        master = master.port()
                    ),
                )
                .unwrap();
                let child = Command::new("redis-server")
                    .arg(&conf)
                    .arg("--sentinel")
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .spawn()
                    .expect("redis-server must be installed");
                (port, child)
            })
            .collect();
        Sentinels {
            master,
            replica,
            sentinels,
            dir,
        }
    }

    /// Every sentinel's URL, comma-separated: what `-redis-url` takes.
    fn urls(&self) -> String {
        self.sentinels
            .iter()
            .map(|(p, _)| format!("redis://127.0.0.1:{p}"))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// One command to sentinel `i`.
    async fn ask<T: redis::FromRedisValue>(
        &self,
        i: usize,
        args: &[&str],
    ) -> redis::RedisResult<T> {
        let url = format!("redis://127.0.0.1:{}", self.sentinels[i].0);
        ask(&url, args).await
    }

    /// The master's port, as every sentinel names it now.
    async fn master_port(&self) -> Option<u16> {
        let mut ports = Vec::new();
        for i in 0..self.sentinels.len() {
            let addr: Option<(String, String)> = self
                .ask(i, &["SENTINEL", "get-master-addr-by-name", MASTER])
                .await
                .ok()
                .flatten();
            ports.push(addr.and_then(|(_, p)| p.parse().ok()));
        }
        ports
            .windows(2)
            .all(|w| w[0] == w[1])
            .then(|| ports[0])
            .flatten()
    }

    /// Waits until every sentinel knows the replica and the other
    /// sentinels (a failover needs both).
    async fn wait_ready(&self) {
        wait_for(
            "sentinels that know each other and the replica",
            Duration::from_secs(30),
            || async {
                let mut ok = true;
                for i in 0..self.sentinels.len() {
                    let master: Vec<String> = self
                        .ask(i, &["SENTINEL", "master", MASTER])
                        .await
                        .unwrap_or_default();
                    let field = |name: &str| {
                        master
                            .iter()
                            .position(|f| f == name)
                            .and_then(|p| master.get(p + 1))
                            .and_then(|v| v.parse::<u32>().ok())
                    };
                    ok &= field("num-slaves") == Some(1) && field("num-other-sentinels") == Some(2);
                }
                ok
            },
        )
        .await;
    }

    /// Every sentinel forgets the master it monitors.
    async fn forget(&self) {
        for i in 0..self.sentinels.len() {
            let _: String = self
                .ask(i, &["SENTINEL", "REMOVE", MASTER])
                .await
                .expect("SENTINEL REMOVE");
        }
    }

    /// Every sentinel monitors the master on `port`, as `start` set them up.
    async fn monitor(&self, port: u16) {
        let port = port.to_string();
        for i in 0..self.sentinels.len() {
            let monitor = ["SENTINEL", "MONITOR", MASTER, "127.0.0.1", &port, "2"];
            let _: String = self.ask(i, &monitor).await.expect("SENTINEL MONITOR");
            for (option, value) in [
                ("down-after-milliseconds", "1000"),
                ("failover-timeout", "5000"),
            ] {
                let set = ["SENTINEL", "SET", MASTER, option, value];
                let _: String = self.ask(i, &set).await.expect("SENTINEL SET");
            }
        }
    }

    fn server_on(&self, port: u16) -> &RedisServer {
        if self.master.port() == port {
            &self.master
        } else {
            &self.replica
        }
    }
}

impl Drop for Sentinels {
    fn drop(&mut self) {
        for (_, c) in &mut self.sentinels {
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The example workers (`examples/worker.rs`, `examples/python/worker.py`)
/// configured the documented way, `REDIS_SENTINEL_MASTER` and the sentinels
/// in `REDIS_URL`, find the master and get units from a distributor daemon
/// (the binary) that runs on Sentinel too; SIGTERM drains them and they
/// exit 0. Given the sentinels without the master's name (so taken as
/// Redis Cluster seeds), each exits 1 saying so instead.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_example_workers_find_the_master_through_the_sentinels() {
    use crate::example_workers::{Running, example_workers, test_dir};

    let s = Sentinels::start();
    s.wait_ready().await;
    let master = s.server_on(s.master_port().await.expect("a master"));
    let units = units(12);
    let mut add = vec!["RPUSH", UNITS];
    add.extend(units.iter().map(String::as_str));
    let _: i64 = master.cmd(&add).await;
    let dir = test_dir("sentinel-examples");
    let mut daemon = Command::new(env!("CARGO_BIN_EXE_distributor"));
    daemon
        .arg(format!("-redis-url={}", s.urls()))
        .arg(format!("-redis-sentinel-master={MASTER}"))
        .arg(format!("-services-namespaces={SERVICES}"))
        .arg(format!("-workunits-namespace={UNITS}"))
        .arg(format!("-distribution-namespace={TABLE}"))
        .args([
            "-poll-interval=250ms",
            "-ping-timeout=250ms",
            "-lease-ttl=1s",
            "-lease-renew-interval=200ms",
            "-lease-renew-deadline=700ms",
            "-lease-retry-interval=300ms",
            "-census-interval=500ms",
            "-handoff-delay=1s",
            "-http-addr=off",
            "-traces=none",
            "-replica-id=sentinel-daemon",
        ])
        .env_remove("HTTP_ADDR")
        .env_remove("PROM_PORT")
        .env_remove("LOG")
        .env("RUST_LOG", "info")
        .env("NO_COLOR", "1");
    let _daemon = Running::spawn(daemon, &dir, "daemon");

    let workers = example_workers("the_example_workers_find_the_master_through_the_sentinels");
    let mut good = Vec::new();
    let mut misconfigured = Vec::new();
    for w in &workers {
        let id = format!("127.0.0.1:{}", free_port());
        let mut cmd = w.command();
        cmd.args(["--listen", &id, "--events"])
            .env("REDIS_URL", s.urls())
            .env("REDIS_SENTINEL_MASTER", MASTER)
            .env("MEMBER_SERVICES_KEY", SERVICES)
            .env("DISTRIBUTION_NAMESPACE", TABLE)
            .env("MEMBER_DEADLINE", "4s")
            .env("MEMBER_POLL_INTERVAL", "200ms")
            .env("MEMBER_DRAIN_TIMEOUT", "5s");
        good.push((id, w.spawn(cmd, &dir, "sentinel")));
        let mut cmd = w.command();
        cmd.args(w.ready_timeout(3))
            .env("REDIS_URL", s.urls())
            .env("MEMBER_SERVICES_KEY", SERVICES)
            .env("DISTRIBUTION_NAMESPACE", TABLE);
        misconfigured.push(w.spawn(cmd, &dir, "no-master-name"));
    }

    for r in &mut misconfigured {
        r.fails_saying(
            Duration::from_secs(30),
            &[
                "cannot use the Redis Cluster",
                "several URLs without REDIS_SENTINEL_MASTER",
            ],
        )
        .await;
    }
    let ids: Vec<String> = good.iter().map(|(id, _)| id.clone()).collect();
    let report = |good: &[(String, Running)]| {
        good.iter()
            .map(|(_, r)| format!("--- {} ---\n{}", r.name, r.stderr()))
            .collect::<Vec<_>>()
            .join("\n")
    };
    let every_one_owns_units =
        wait_until(Duration::from_secs(30), Duration::from_millis(50), || {
            let ids = ids.clone();
            let acquired = good
                .iter()
                .all(|(_, r)| r.stdout().contains(r#""event":"acquired""#));
            async move {
                // Every unit in a row, and a row with units for every worker.
                let (mut units, mut owners) = (0, 0);
                for id in &ids {
                    let row: Option<String> = master.cmd(&["HGET", TABLE, id]).await;
                    let n = row.map_or(0, |r| r.split(',').filter(|u| !u.is_empty()).count());
                    units += n;
                    owners += usize::from(n > 0);
                }
                acquired && units == 12 && owners == ids.len()
            }
        })
        .await;
    assert!(
        every_one_owns_units,
        "not every example worker owns units on the master {}: table {:?}\n{}",
        master.port(),
        master
            .cmd::<std::collections::HashMap<String, String>>(&["HGETALL", TABLE])
            .await,
        report(&good)
    );

    for (_, r) in &good {
        r.signal("TERM");
    }
    for (_, r) in &mut good {
        let status = r.exited(Duration::from_secs(30)).await;
        assert!(
            status.success(),
            "{} exited {status}\n{}",
            r.name,
            r.stderr()
        );
    }
    let listed: Vec<String> = master.cmd(&["LRANGE", SERVICES, "0", "-1"]).await;
    assert!(listed.is_empty(), "still registered: {listed:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The distributor and two members run through the sentinels; a failover
/// (`SENTINEL FAILOVER`) moves the master to the replica; the holder then
/// writes the table on the new master, a change of the units reaches the
/// members, and the CLI reads the new master too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_distributor_and_members_follow_a_sentinel_failover() {
    let s = Sentinels::start();
    s.wait_ready().await;
    let first = s.master_port().await.expect("a master");
    assert_eq!(first, s.master.port());
    let units = units(20);
    let mut fleet = Fleet::new(RedisServer::start());
    fleet.config.redis_url = s.urls();
    fleet.config.redis_sentinel = Some(SentinelOptions {
        master: MASTER.into(),
        ..SentinelOptions::default()
    });
    // The fleet's own Redis is a stand-in: every read below goes to the
    // server the sentinels name.
    let master = s.server_on(first);
    let mut add = vec!["RPUSH", UNITS];
    add.extend(units.iter().map(String::as_str));
    let _: i64 = master.cmd(&add).await;
    for _ in 0..2 {
        let mut o = fleet.member_options();
        o.redis_sentinel = fleet.config.redis_sentinel.clone();
        fleet
            .members
            .push(Some(distributor::Member::start(o).await.unwrap()));
    }
    fleet.add_replica();
    let (a, b) = (fleet.member_id(0), fleet.member_id(1));
    let owned = |m: &distributor::Member| m.assignment().borrow().units.len();
    wait_for("both members own 10 units", Duration::from_secs(20), || {
        let counts: Vec<usize> = fleet.members.iter().flatten().map(owned).collect();
        async move { counts == [10, 10] }
    })
    .await;
    let row: Option<String> = master.cmd(&["HGET", TABLE, &a]).await;
    assert_eq!(row.map(|r| r.split(',').count()), Some(10));
    // A caller that is not a member follows the table through the
    // sentinels too.
    let lookup = distributor::Lookup::connect(distributor::LookupOptions {
        redis_url: s.urls(),
        table_key: TABLE.into(),
        redis_sentinel: fleet.config.redis_sentinel.clone(),
        poll_interval: Duration::from_millis(200),
        ..distributor::LookupOptions::default()
    })
    .await
    .unwrap();

    // The replica has everything the master has: a failover loses nothing
    // (what an asynchronous replica may lose is the lost-writes case,
    // tested elsewhere).
    wait_for("the replica in sync", Duration::from_secs(20), || async {
        let info: String = s.replica.cmd(&["INFO", "replication"]).await;
        let n: i64 = s.replica.cmd(&["LLEN", UNITS]).await;
        info.contains("master_link_status:up") && n == 20
    })
    .await;
    let _: String = s
        .ask(0, &["SENTINEL", "FAILOVER", MASTER])
        .await
        .expect("a failover starts");
    wait_for("the replica promoted", Duration::from_secs(30), || async {
        s.master_port().await == Some(s.replica.port())
    })
    .await;
    let promoted = s.server_on(s.replica.port());
    wait_for(
        "the old master replicates the new one",
        Duration::from_secs(30),
        || async {
            let info: String = s.master.cmd(&["INFO", "replication"]).await;
            info.contains("role:slave") && info.contains("master_link_status:up")
        },
    )
    .await;

    // A change after the failover, written on the new master only.
    let more = crate::support::units(26);
    let mut add = vec!["RPUSH", UNITS];
    add.extend(more[20..].iter().map(String::as_str));
    let _: i64 = promoted.cmd(&add).await;
    wait_for(
        "both members own 13 units after the failover",
        Duration::from_secs(30),
        || {
            let counts: Vec<usize> = fleet.members.iter().flatten().map(owned).collect();
            async move { counts == [13, 13] }
        },
    )
    .await;
    let row: Option<String> = promoted.cmd(&["HGET", TABLE, &b]).await;
    assert_eq!(
        row.map(|r| r.split(',').count()),
        Some(13),
        "the table on the new master"
    );
    wait_for(
        "the lookup at the new master's table",
        Duration::from_secs(15),
        || async {
            let g: Option<u64> = promoted.cmd(&["HGET", &keys().meta, "generation"]).await;
            let rows: std::collections::HashMap<String, String> =
                promoted.cmd(&["HGETALL", TABLE]).await;
            lookup.generation() == g
                && rows.values().map(|r| r.split(',').count()).sum::<usize>() == 26
                && rows.iter().all(|(m, r)| {
                    r.split(',').all(|u| {
                        lookup.owner(u) == distributor::Placement::Owned(m.as_str().into())
                    })
                })
        },
    )
    .await;
    drop(lookup);
    // Each member reads on the new master, and its report names that
    // connection (the run id is how a holder tells one server from another).
    let new_run_id = promoted.run_id().await;
    for m in [&a, &b] {
        wait_for(
            "a report naming the new master",
            Duration::from_secs(10),
            || async {
                let raw: Option<String> = promoted.cmd(&["HGET", &keys().members, m]).await;
                raw.and_then(|r| distributor::core::handoff::MemberReport::decode(&r))
                    .and_then(|r| r.client)
                    .is_some_and(|c| c.server == Some(new_run_id))
            },
        )
        .await;
    }

    // The CLI finds the new master through the sentinels as well.
    let out = cli(
        &s.urls(),
        &[&format!("-redis-sentinel-master={MASTER}"), "table"],
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains(&a) && text.contains(&b), "{text}");

    for m in fleet.members.iter_mut() {
        if let Some(m) = m.take() {
            m.shutdown().await;
        }
    }
    fleet.shutdown().await;
}

/// Calls `write` until it succeeds, for up to 15 s; the errors it returned
/// before (a panic names the last ones when it never does).
async fn until_written<T, F, Fut>(what: &str, mut write: F) -> Vec<String>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, distributor::StoreError>>,
{
    let deadline = Instant::now() + Duration::from_secs(15);
    let mut errors = Vec::new();
    loop {
        match write().await {
            Ok(_) => return errors,
            Err(e) => errors.push(e.to_string()),
        }
        assert!(
            Instant::now() < deadline,
            "{what} still fails after 15 s ({} errors), the last: {:?}",
            errors.len(),
            &errors[errors.len().saturating_sub(2)..]
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Finding 3 (server errors come back from redis-rs as values, so a
/// `READONLY` reply never made the Sentinel link ask the sentinels again):
/// the master is demoted without its clients being killed (an operator's
/// `REPLICAOF`, here after the replica was promoted and the sentinels
/// pointed at it by hand). A store's writes get `READONLY` there; the first
/// one makes the store leave that node, and the next lands on the new
/// master. One store per way a write goes: a script alone (`register`), a
/// script in a pipeline (a renewal: `CLIENT ID`, `INFO`, the script) and
/// plain commands in a pipeline (a member's report).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_leaves_a_master_demoted_without_its_clients_killed() {
    let s = Sentinels::start();
    s.wait_ready().await;
    assert_eq!(s.master_port().await, Some(s.master.port()));
    let opts = RedisOptions {
        sentinel: Some(SentinelOptions {
            master: MASTER.into(),
            ..SentinelOptions::default()
        }),
        ..RedisOptions::from_urls(&s.urls())
    };
    let timeout = Duration::from_secs(2);
    let open = || Store::connect(&opts, TABLE, timeout).unwrap();
    let (lists, lease, reports) = (open(), open(), open());
    // Each store connects to the master with a first write.
    assert!(lists.register(SERVICES, "10.0.0.1:1").await.unwrap());
    let Acquisition::Acquired(grant) = lease.acquire(&lease_claim("a")).await.unwrap() else {
        panic!("the lease is free")
    };
    let report = |applied| MemberReport {
        applied,
        draining: false,
        deadline: Duration::from_secs(10),
        weight: 1,
        client: None,
    };
    reports
        .write_report("10.0.0.1:1", &report(1), true)
        .await
        .unwrap();
    wait_for("the replica in sync", Duration::from_secs(20), || async {
        let members: Option<String> = s
            .replica
            .cmd(&["HGET", &keys().members, "10.0.0.1:1"])
            .await;
        let lease: Option<String> = s.replica.cmd(&["GET", &keys().lease]).await;
        members.is_some() && lease.is_some()
    })
    .await;

    // The replica is promoted by hand and the sentinels name it; then the
    // old master replicates it. Nothing kills the old master's clients.
    s.forget().await;
    let () = s.replica.cmd(&["REPLICAOF", "NO", "ONE"]).await;
    s.monitor(s.replica.port()).await;
    wait_for(
        "every sentinel names the promoted replica",
        Duration::from_secs(20),
        || async { s.master_port().await == Some(s.replica.port()) },
    )
    .await;
    let () = s
        .master
        .cmd(&["REPLICAOF", "127.0.0.1", &s.replica.port().to_string()])
        .await;
    wait_for(
        "the old master replicates the promoted replica",
        Duration::from_secs(20),
        || async {
            let info: String = s.master.cmd(&["INFO", "replication"]).await;
            info.contains("role:slave") && info.contains("master_link_status:up")
        },
    )
    .await;

    // Every store's first write meets READONLY; a later one lands on the
    // new master.
    let second = report(2);
    let (registered, renewed, reported) = tokio::join!(
        until_written("a registration", || lists.register(SERVICES, "10.0.0.2:2")),
        until_written("a renewal", || async {
            match lease.renew(&grant, Duration::from_secs(30), timeout).await {
                Ok(Renewal::Renewed) => Ok(()),
                Ok(other) => panic!("the lease was lost: {other:?}"),
                Err(e) => Err(e),
            }
        }),
        until_written("a report", || reports.write_report(
            "10.0.0.1:1",
            &second,
            true
        )),
    );
    for (what, errors) in [
        ("registration", registered),
        ("renewal", renewed),
        ("report", reported),
    ] {
        assert!(
            errors
                .first()
                .is_some_and(|e| e.contains("write against a read only replica")),
            "the {what} never met the demoted master: {errors:?}"
        );
    }
    let listed: Vec<String> = s.replica.cmd(&["LRANGE", SERVICES, "0", "-1"]).await;
    assert!(listed.contains(&"10.0.0.2:2".to_string()), "{listed:?}");
    let raw: Option<String> = s
        .replica
        .cmd(&["HGET", &keys().members, "10.0.0.1:1"])
        .await;
    assert_eq!(
        raw.and_then(|r| MemberReport::decode(&r))
            .map(|r| r.applied),
        Some(2),
        "the report on the new master"
    );
}

/// Issue 38, finding 1: an old master that the sentinels cannot reconfigure
/// (here an ACL that refuses them `CLIENT KILL`, standing in for a
/// partition: their reconfiguration fails whole, so the old master stays a
/// master and keeps its clients) keeps answering a member's reads with the
/// last row it has, while a holder on the new master pings that member. Its
/// reads must not keep its holds: it fences by its deadline (or finds the
/// new master and acknowledges), so no unit the holder moves is worked on
/// by two members.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_reading_an_old_master_never_keeps_units_the_holder_moved() {
    let s = Sentinels::start();
    s.wait_ready().await;
    // Sentinel's connections use the default user: on the old master it
    // may no longer kill clients, so every reconfiguration of it fails.
    let _: String = s
        .master
        .cmd(&["ACL", "SETUSER", "default", "-client|kill"])
        .await;
    let units = units(12);
    let mut fleet = Fleet::new(RedisServer::start());
    fleet.config.redis_url = s.urls();
    fleet.config.redis_sentinel = Some(SentinelOptions {
        master: MASTER.into(),
        ..SentinelOptions::default()
    });
    let mut add = vec!["RPUSH", UNITS];
    add.extend(units.iter().map(String::as_str));
    let _: i64 = s.master.cmd(&add).await;
    let on_sentinel = |fleet: &Fleet| {
        let mut o = fleet.member_options();
        o.redis_sentinel = fleet.config.redis_sentinel.clone();
        o.deadline = Duration::from_secs(2);
        o.poll_interval = Duration::from_millis(100);
        o
    };
    let a = distributor::Member::start(on_sentinel(&fleet))
        .await
        .unwrap();
    let holder = fleet.add_replica();
    wait_for("a owns every unit", Duration::from_secs(20), || {
        let n = a.assignment().borrow().units.len();
        async move { n == 12 }
    })
    .await;
    wait_for("the replica in sync", Duration::from_secs(20), || async {
        let info: String = s.replica.cmd(&["INFO", "replication"]).await;
        let n: i64 = s.replica.cmd(&["HLEN", TABLE]).await;
        info.contains("master_link_status:up") && n == 1
    })
    .await;

    let _: String = s
        .ask(0, &["SENTINEL", "FAILOVER", MASTER])
        .await
        .expect("a failover starts");
    wait_for("the replica promoted", Duration::from_secs(30), || async {
        s.master_port().await == Some(s.replica.port())
    })
    .await;
    let role: Vec<redis::Value> = s.master.cmd(&["ROLE"]).await;
    assert!(
        matches!(role.first(), Some(redis::Value::BulkString(r)) if r == b"master"),
        "the old master could not be reconfigured: {role:?}"
    );
    // The holder moves to the new master (its process stops; the next one
    // asks the sentinels), and a second member joins there.
    fleet.replicas[holder].take();
    let next = fleet.add_replica();
    let status = fleet.replicas[next].as_ref().unwrap().status();
    let b = distributor::Member::start(on_sentinel(&fleet))
        .await
        .unwrap();
    // Until b owns its half, check every few milliseconds that no unit is
    // held by both.
    let started = Instant::now();
    let mut overlaps = std::collections::BTreeSet::new();
    let mut recovery = None;
    loop {
        recovery = recovery.or_else(|| status.borrow().recovering.clone());
        for u in &units {
            if let (Some(ta), Some(tb)) = (a.holds(u), b.holds(u)) {
                overlaps.insert(format!("{u} (a: {ta}, b: {tb})"));
            }
        }
        let nb = b.assignment().borrow().units.len();
        let na = a.assignment().borrow().units.len();
        if (nb == 6 && na == 6) || started.elapsed() > Duration::from_secs(30) {
            assert!(overlaps.is_empty(), "worked on by both: {overlaps:?}");
            assert_eq!((na, nb), (6, 6), "a and b share the units");
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // The table was written on the old master: the next holder cannot know
    // that it has every write, so it recovered before it moved anything.
    let recovery = recovery.expect("the next holder recovered");
    assert!(recovery.contains("server"), "{recovery}");
    let metrics = fleet.replicas[next].as_ref().unwrap().metrics();
    assert_eq!(metrics.recoveries.get(), 1, "{recovery}");
    a.shutdown().await;
    b.shutdown().await;
    fleet.shutdown().await;
}
