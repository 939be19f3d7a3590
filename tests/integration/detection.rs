//! Failure detection at the speed of a closed connection: a member whose
//! process ends leaves the table without waiting for the next poll, and a
//! connection ended by anything else (a proxy closing it, a member's server
//! restarting on its listener) costs a ping that is answered and drops nobody.
//!
//! The poll interval here is far longer than the bounds waited for, so only
//! the close-driven path can meet them.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use tokio::io::AsyncWriteExt as _;

use crate::support::*;

/// Long enough that no regular cycle runs while a test waits.
const POLL: Duration = Duration::from_secs(60);

fn slow_poll(c: &mut distributor::Config) {
    c.poll_interval = POLL;
    // Old-protocol workers (the FlakyWorkers here never report): a unit of a
    // dead one moves only after this, or at once when it is refused.
    c.handoff_delay = Duration::from_secs(120);
}

fn closes(fleet: &Fleet, replica: usize, outcome: &str) -> f64 {
    let samples = parse_metrics(&fleet.replicas[replica].as_ref().unwrap().metrics().encode());
    metric(
        &samples,
        "distributor_member_connection_closes_total",
        &[("outcome", outcome)],
    )
    .unwrap_or(0.0)
}

/// Flaky workers listed before the replica starts, so its first cycle (at
/// acquisition) sees them all: later, only closes make it look again.
async fn fleet_of_workers(n: usize, units: &[String]) -> (Fleet, Vec<FlakyWorker>) {
    let mut fleet = Fleet::new(RedisServer::start());
    slow_poll(&mut fleet.config);
    fleet.set_units(units).await;
    let mut workers = Vec::new();
    for _ in 0..n {
        workers.push(FlakyWorker::start(&fleet).await);
    }
    fleet.add_replica();
    let ids: Vec<String> = workers.iter().map(|w| w.addr.clone()).collect();
    fleet
        .wait_for_table_with(units, &ids, Duration::from_secs(20))
        .await;
    (fleet, workers)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_that_exits_leaves_the_table_before_the_next_poll() {
    let units = units(30);
    let (fleet, mut workers) = fleet_of_workers(4, &units).await;
    let dead = workers[1].addr.clone();
    // Like a process that exits: listener and connections close.
    workers[1].kill().await;
    // A poll is 60 s away: only the close can have started this cycle. (Units
    // the new solve moves between the live workers wait out their handoff
    // delay; the dead one's are granted at once, as it is refused.)
    wait_for(
        "the dead member's row gone",
        Duration::from_secs(20),
        || async { !fleet.table().await.rows().contains_key(&dead) },
    )
    .await;
    let table = fleet.table().await;
    let mut seen = std::collections::HashSet::new();
    for row in table.rows().values() {
        for u in distributor::core::table::decode_row(row) {
            assert!(seen.insert(u.to_string()), "{u} in two rows: {table:?}");
        }
    }
    // The close was seen, and the ping sent at once did not answer.
    let probed: f64 = ["refused", "timeout", "unavailable"]
        .iter()
        .map(|o| closes(&fleet, 0, o))
        .sum();
    assert!(probed >= 1.0);
    fleet.shutdown().await;
}

/// A TCP proxy in front of one member whose connections can be ended, with a
/// FIN or a reset, while it keeps accepting new ones (a load balancer or a
/// sidecar closing idle connections).
struct ClosingProxy {
    addr: String,
    /// (round, reset): bumping the round ends every connection of earlier
    /// rounds, with a reset if asked.
    round: tokio::sync::watch::Sender<(u64, bool)>,
    task: tokio::task::JoinHandle<()>,
}

impl ClosingProxy {
    async fn start(target: String) -> ClosingProxy {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let (round, _) = tokio::sync::watch::channel((0u64, false));
        let rounds = round.clone();
        let task = tokio::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                let mut ending = rounds.subscribe();
                let born = ending.borrow().0;
                let target = target.clone();
                tokio::spawn(async move {
                    let Ok(mut server) = tokio::net::TcpStream::connect(&target).await else {
                        return;
                    };
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut client, &mut server) => {}
                        Ok(reset) = async { ending.wait_for(|r| r.0 != born).await.map(|r| r.1) } => {
                            if reset {
                                let _ = client.set_zero_linger();
                            } else {
                                let _ = client.shutdown().await;
                            }
                        }
                    }
                });
            }
        });
        ClosingProxy { addr, round, task }
    }

    fn end_connections(&self, reset: bool) {
        self.round.send_modify(|r| *r = (r.0 + 1, reset));
    }
}

impl Drop for ClosingProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_ended_by_a_proxy_drop_nobody() {
    let units = units(20);
    let mut fleet = Fleet::new(RedisServer::start());
    slow_poll(&mut fleet.config);
    fleet.set_units(&units).await;
    let direct = FlakyWorker::start(&fleet).await;
    // The second member is listed under the proxy's address.
    let behind = FlakyWorker::serve(Arc::new(AtomicBool::new(true))).await;
    let proxy = ClosingProxy::start(behind.addr.clone()).await;
    let () = fleet.redis.cmd(&["RPUSH", SERVICES, &proxy.addr]).await;
    fleet.add_replica();
    let want = fleet
        .wait_for_table_with(
            &units,
            &[direct.addr.clone(), proxy.addr.clone()],
            Duration::from_secs(20),
        )
        .await;
    let generation = fleet.generation().await;

    for (i, reset) in [false, true, false, true].into_iter().enumerate() {
        proxy.end_connections(reset);
        let seen = (i + 1) as f64;
        wait_for(
            "the holder to see the close and ping through a new connection",
            Duration::from_secs(20),
            || async { closes(&fleet, 0, "answered") >= seen },
        )
        .await;
    }
    assert_eq!(fleet.table().await, want, "nobody dropped");
    assert_eq!(fleet.generation().await, generation, "nothing rewritten");
    fleet.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_restarting_its_server_on_its_listener_stays() {
    let units = units(20);
    let mut fleet = Fleet::new(RedisServer::start());
    slow_poll(&mut fleet.config);
    fleet.set_units(&units).await;
    let other = FlakyWorker::start(&fleet).await;
    // The restarting member keeps its listening socket across server
    // restarts (as a server reloading its certificates does): connections
    // end, the address never refuses.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let () = fleet.redis.cmd(&["RPUSH", SERVICES, &addr]).await;
    let serve = |listener: &std::net::TcpListener| {
        let listener = tokio::net::TcpListener::from_std(listener.try_clone().unwrap()).unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let healthy = Arc::new(AtomicBool::new(true));
        let task = tokio::spawn(serve_flaky(listener, healthy, stopped));
        (stop, task)
    };
    let (mut stop, mut task) = serve(&listener);
    fleet.add_replica();
    let want = fleet
        .wait_for_table_with(
            &units,
            &[other.addr.clone(), addr.clone()],
            Duration::from_secs(20),
        )
        .await;
    let generation = fleet.generation().await;
    for i in 1..=3 {
        // The old server ends its connections (a graceful stop), and a new one
        // serves on the same socket.
        let _ = stop.send(());
        let _ = task.await;
        (stop, task) = serve(&listener);
        wait_for(
            "the holder to see the close and ping the new server",
            Duration::from_secs(20),
            || async { closes(&fleet, 0, "answered") >= i as f64 },
        )
        .await;
    }
    assert_eq!(fleet.table().await, want, "nobody dropped");
    assert_eq!(fleet.generation().await, generation, "nothing rewritten");
    let _ = stop.send(());
    fleet.shutdown().await;
}

async fn serve_flaky(
    listener: tokio::net::TcpListener,
    healthy: Arc<AtomicBool>,
    stopped: tokio::sync::oneshot::Receiver<()>,
) {
    let w = FlakyWorker::serve_on(listener, healthy);
    let _ = stopped.await;
    w.stop().await;
}
