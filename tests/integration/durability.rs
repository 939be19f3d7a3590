//! `-redis-wait-replicas`: a lease or table write counts only once enough
//! replicas acknowledged it, asked by `WAIT` on the connection that wrote it.
//!
//! `WAIT` counts the replicas that have everything *its own client* wrote:
//! sent on a connection that wrote nothing (a fresh one, after a reconnect),
//! it returns the connected replicas at once, whatever they acknowledged.
//! A replica stopped by `SIGSTOP` shows the difference: the master still
//! counts it as connected, but it acknowledges nothing.

use std::time::Duration;

use distributor::MatchingTable;
use distributor::core::liveness::HealthChanges;
use distributor::edge::redis::scripts::RENEW;
use distributor::edge::redis::{
    Acquisition, Commit, Committed, LeaseGrant, RedisOptions, Renewal, Store, WaitFor,
};
use distributor::error::StoreError;

use crate::support::fault_proxy::{Action, FaultProxy, Match, Occurrence, Rule};
use crate::support::*;

/// The store's call bound: the writes under test must not time out.
const CALL: Duration = Duration::from_secs(4);
/// The bound of the call that times out and replaces the lease connection.
const SHORT: Duration = Duration::from_secs(1);
/// How long the proxy holds that call (past `SHORT`, well inside `CALL`).
const HELD: Duration = Duration::from_secs(2);
const WAIT_TIMEOUT: Duration = Duration::from_millis(200);
/// The `WAIT` bound of the store that checks a running replica does
/// acknowledge: a loaded machine may take longer than [`WAIT_TIMEOUT`] to
/// answer a `GETACK`, and an acknowledgement, unlike its absence, needs
/// no short bound to be seen.
const PATIENT_WAIT: Duration = Duration::from_secs(10);
const TTL: Duration = Duration::from_secs(30);

/// `redis-server` stopped (`SIGSTOP`) or continued.
fn signal(server: &RedisServer, sig: &str) {
    let pid = server.pid().expect("a running redis-server");
    let ok = std::process::Command::new("kill")
        .args([sig, &pid.to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok, "kill {sig} {pid}");
}

/// `WAIT 1 <ms>` on `conn`.
async fn wait_one(conn: &mut redis::aio::MultiplexedConnection, ms: u64) -> i64 {
    redis::cmd("WAIT")
        .arg(1)
        .arg(ms)
        .query_async(conn)
        .await
        .unwrap()
}

/// Runs `write` (a call on `store`'s lease connection) while another call
/// of the same store times out and replaces that connection: a renewal
/// bounded by [`SHORT`], whose script the proxy holds for [`HELD`]. `write`
/// is sent behind it on the same connection, so its reply comes back after
/// the store reconnected.
async fn behind_a_reconnect<T>(
    proxy: &FaultProxy,
    store: &Store,
    grant: &LeaseGrant,
    write: impl Future<Output = T>,
) -> T {
    let sha = sha1_smol::Sha1::from(RENEW).digest().to_string();
    let held = proxy.add(Rule::new(
        Match::Script(sha),
        Occurrence::Next(1),
        Action::Delay(HELD),
    ));
    let slow = {
        let (store, grant) = (store.clone(), grant.clone());
        tokio::spawn(async move { store.renew(&grant, TTL, SHORT).await })
    };
    assert!(
        held.wait_taken(1, Duration::from_secs(5)).await,
        "the slow renewal never reached the proxy"
    );
    // Sent now, behind the held renewal, well before its bound passes.
    let out = write.await;
    let slow = slow.await.unwrap();
    assert!(
        matches!(slow, Err(StoreError::Timeout { .. })),
        "the held renewal did not time out (so nothing reconnected): {slow:?}"
    );
    assert_eq!(held.fired(), 1);
    out
}

/// Finding 2 (the WAIT went on whatever connection was current after the
/// script's reply): a renewal, a table write and an acquisition, each sent
/// on the lease connection just before another call of the same store
/// timed out and replaced it. The replica acknowledged none of them; the
/// WAIT on the new connection, which wrote nothing, said it had. Each must
/// count as not durable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_is_durable_only_by_the_wait_of_the_connection_that_wrote_it() {
    let master = RedisServer::start_with(&["--repl-diskless-sync-delay", "0"]);
    let replica =
        RedisServer::start_with(&["--replicaof", "127.0.0.1", &master.port().to_string()]);
    // In sync as the master sees it: a write there is acknowledged.
    let mut writer = master.conn().await;
    wait_for("the replica acknowledges", Duration::from_secs(20), || {
        let mut writer = writer.clone();
        async move {
            let () = redis::cmd("SET")
                .arg("durability-probe")
                .arg("0")
                .query_async(&mut writer)
                .await
                .unwrap();
            wait_one(&mut writer, 1000).await == 1
        }
    })
    .await;
    let proxy = FaultProxy::start(master.port()).await;
    let opts = RedisOptions {
        wait: Some(WaitFor {
            replicas: 1,
            timeout: WAIT_TIMEOUT,
        }),
        ..RedisOptions::from_urls(&proxy.url())
    };
    let store = Store::connect(&opts, TABLE, CALL).unwrap();
    let patient = patient_store(&opts);
    let Acquisition::Acquired(grant) = patient.acquire(&lease_claim("a")).await.unwrap() else {
        panic!("the lease is free")
    };
    assert_eq!(
        patient.renew(&grant, TTL, CALL).await.unwrap(),
        Renewal::Renewed,
        "a replica that runs acknowledges"
    );
    warm_up(&store, &grant).await;

    // The replica stops: the master still counts it as connected.
    signal(&replica, "-STOP");
    let mut fresh = master.conn().await;
    assert_eq!(
        wait_one(&mut fresh, 100).await,
        1,
        "a client that wrote nothing is told the replica has it all"
    );
    let () = redis::cmd("SET")
        .arg("durability-probe")
        .arg("1")
        .query_async(&mut writer)
        .await
        .unwrap();
    assert_eq!(
        wait_one(&mut writer, 100).await,
        0,
        "a client that wrote is told the replica does not have it"
    );

    let renewed = behind_a_reconnect(&proxy, &store, &grant, store.renew(&grant, TTL, CALL)).await;
    assert!(
        matches!(
            renewed,
            Err(StoreError::NotDurable {
                acked: 0,
                wanted: 1,
                ..
            })
        ),
        "a renewal no replica has counted: {renewed:?}"
    );

    let table = MatchingTable::from_rows([("w1".to_string(), "x,y".to_string())]);
    let none = HealthChanges::default();
    let commit = Commit {
        table: Some(&table),
        now_ms: 3,
        ..bare_commit("a", &none)
    };
    let committed = behind_a_reconnect(&proxy, &store, &grant, store.commit(&grant, &commit)).await;
    assert!(
        matches!(
            committed,
            Ok(Committed::Unconfirmed {
                generation: Some(_),
                error: StoreError::NotDurable { acked: 0, .. },
            })
        ),
        "a table write no replica has counted: {committed:?}"
    );
    let on_master: Option<String> = master.cmd(&["HGET", TABLE, "w1"]).await;
    assert_eq!(on_master.as_deref(), Some("x,y"), "applied on the master");

    assert!(store.release(&grant).await.unwrap());
    let acquired =
        behind_a_reconnect(&proxy, &store, &grant, store.acquire(&lease_claim("b"))).await;
    assert!(
        matches!(acquired, Err(StoreError::NotDurable { acked: 0, .. })),
        "an acquisition no replica has counted: {acquired:?}"
    );

    signal(&replica, "-CONT");
}

/// A store on `opts`'s servers whose `WAIT` allows [`PATIENT_WAIT`]: for
/// the writes a running replica must acknowledge. The grant it acquires is
/// a value the short-bounded store renews as well.
fn patient_store(opts: &RedisOptions) -> Store {
    let wait = opts.wait.as_ref().map(|w| WaitFor {
        replicas: w.replicas,
        timeout: PATIENT_WAIT,
    });
    Store::connect(
        &RedisOptions {
            wait,
            ..opts.clone()
        },
        TABLE,
        CALL,
    )
    .unwrap()
}

/// Connects `store` (on a cluster: to every node, the replica too) while
/// the replica runs: a first connection to a stopped replica would time the
/// call out. The renewal's outcome does not matter (its `WAIT` may or may
/// not be answered within the short bound on a loaded machine).
async fn warm_up(store: &Store, grant: &LeaseGrant) {
    let renewed = store.renew(grant, TTL, CALL).await;
    assert!(
        matches!(
            renewed,
            Ok(Renewal::Renewed) | Err(StoreError::NotDurable { .. })
        ),
        "{renewed:?}"
    );
}

/// The master serving `slot`, from `CLUSTER NODES`: its node id and port.
fn slot_master(nodes: &str, slot: u16) -> (String, u16) {
    for line in nodes.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let serves = fields.iter().skip(8).any(|range| {
            let (a, b) = range.split_once('-').unwrap_or((range, range));
            matches!((a.parse::<u16>(), b.parse::<u16>()), (Ok(a), Ok(b)) if (a..=b).contains(&slot))
        });
        if serves && fields[2].contains("master") {
            let addr = fields[1].split('@').next().unwrap();
            let port = addr.rsplit(':').next().unwrap().parse().unwrap();
            return (fields[0].to_string(), port);
        }
    }
    panic!("no master serves slot {slot}: {nodes}");
}

/// On Redis Cluster the `WAIT` goes in the script's pipeline too, which
/// redis-rs sends to the master of the script's first key (the table's
/// slot; `WAIT` has no key): the master whose replica is stopped says it
/// has nothing, where another master (or a connection that wrote nothing)
/// would have said it had.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_cluster_the_wait_asks_the_master_of_the_tables_slot() {
    let cluster = RedisCluster::start(3);
    let nodes: String = cluster.nodes[0].cmd(&["CLUSTER", "NODES"]).await;
    let slot = distributor::core::keys::slot(TABLE);
    let (master_id, master_port) = slot_master(&nodes, slot);
    let master = cluster
        .nodes
        .iter()
        .find(|n| n.port() == master_port)
        .expect("a node of the cluster");
    // A replica of that master only, its cluster bus on a free port.
    let bus = free_port();
    let replica = RedisServer::start_with(&[
        "--cluster-enabled",
        "yes",
        "--cluster-config-file",
        "nodes.conf",
        "--cluster-node-timeout",
        "2000",
        "--cluster-port",
        &bus.to_string(),
    ]);
    let out = std::process::Command::new("redis-cli")
        .args(["--cluster", "add-node"])
        .arg(format!("127.0.0.1:{}", replica.port()))
        .arg(format!("127.0.0.1:{master_port}"))
        .args(["--cluster-slave", "--cluster-master-id", &master_id])
        .output()
        .expect("redis-cli must be installed");
    assert!(
        out.status.success(),
        "add-node failed: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    let writer = master.conn().await;
    wait_for(
        "the replica acknowledges the master's writes",
        Duration::from_secs(30),
        || {
            let mut writer = writer.clone();
            async move {
                // A key of the table's slot: this master serves it.
                let () = redis::cmd("SET")
                    .arg(format!("{{{TABLE}}}:durability-probe"))
                    .arg("0")
                    .query_async(&mut writer)
                    .await
                    .unwrap();
                wait_one(&mut writer, 1000).await == 1
            }
        },
    )
    .await;

    let opts = RedisOptions {
        cluster: true,
        wait: Some(WaitFor {
            replicas: 1,
            timeout: WAIT_TIMEOUT,
        }),
        ..RedisOptions::from_urls(&cluster.urls())
    };
    let store = Store::connect(&opts, TABLE, CALL).unwrap();
    let patient = patient_store(&opts);
    let Acquisition::Acquired(grant) = patient.acquire(&lease_claim("a")).await.unwrap() else {
        panic!("the lease is free")
    };
    let table = MatchingTable::from_rows([("w1".to_string(), "x,y".to_string())]);
    let none = HealthChanges::default();
    let commit = |now_ms| Commit {
        table: Some(&table),
        now_ms,
        ..bare_commit("a", &none)
    };
    assert!(
        matches!(
            patient.commit(&grant, &commit(2)).await,
            Ok(Committed::Written { .. })
        ),
        "a replica that runs acknowledges"
    );
    warm_up(&store, &grant).await;

    signal(&replica, "-STOP");
    let committed = store.commit(&grant, &commit(3)).await;
    assert!(
        matches!(
            committed,
            Ok(Committed::Unconfirmed {
                error: StoreError::NotDurable { acked: 0, .. },
                ..
            })
        ),
        "{committed:?}"
    );
    let renewed = store.renew(&grant, TTL, CALL).await;
    assert!(
        matches!(renewed, Err(StoreError::NotDurable { acked: 0, .. })),
        "{renewed:?}"
    );
    signal(&replica, "-CONT");
}
