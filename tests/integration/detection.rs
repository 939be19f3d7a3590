//! Failure detection at the speed of a closed connection: a member whose
//! process ends leaves the table without waiting for the next poll, and a
//! connection ended by anything else (a proxy closing it, a member's server
//! restarting on its listener) costs a ping that is answered and drops nobody.
//!
//! The poll interval here is twice the bound a detection is waited for, and
//! each close comes right after a cycle converged, so only the close-driven
//! path can meet it. (A first contact that misses the cycle's 50 ms grace on a
//! loaded machine is taken by the next cycle: setups wait for two.)

use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use tokio::io::AsyncWriteExt as _;

use crate::support::*;

/// Longer than [`DETECTED`] twice over.
const POLL: Duration = Duration::from_secs(10);
/// How long a close-driven detection may take: generous, and still well
/// before the next regular cycle.
const DETECTED: Duration = Duration::from_secs(5);

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
        .wait_for_table_with(units, &ids, Duration::from_secs(25))
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
    // The next poll is 10 s away: only the close can have started this
    // cycle. (Units the new solve moves between the live workers wait out
    // their handoff delay; the dead one's are granted at once, as it is
    // refused.)
    wait_for("the dead member's row gone", DETECTED, || async {
        !fleet.table().await.rows().contains_key(&dead)
    })
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
    /// Connections accepted so far.
    accepted: Arc<std::sync::atomic::AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl ClosingProxy {
    async fn start(target: String) -> ClosingProxy {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let (round, _) = tokio::sync::watch::channel((0u64, false));
        let rounds = round.clone();
        let accepted = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let counter = accepted.clone();
        let task = tokio::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                let _ = client.set_nodelay(true);
                let counter = counter.clone();
                let mut ending = rounds.subscribe();
                let born = ending.borrow().0;
                let target = target.clone();
                tokio::spawn(async move {
                    let Ok(mut server) = tokio::net::TcpStream::connect(&target).await else {
                        return;
                    };
                    let _ = server.set_nodelay(true);
                    counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
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
        ClosingProxy {
            addr,
            round,
            accepted,
            task,
        }
    }

    fn accepted(&self) -> u64 {
        self.accepted.load(std::sync::atomic::Ordering::SeqCst)
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
            Duration::from_secs(25),
        )
        .await;
    let generation = fleet.generation().await;

    for (i, reset) in [false, true, false, true].into_iter().enumerate() {
        // The holder's connection of this round is open: the first cycle's,
        // then the one reopened after the last close (the second connection
        // after it: the first is the probe's own).
        let want = 1 + 2 * i as u64;
        wait_for("the holder connected", DETECTED, || async {
            proxy.accepted() >= want
        })
        .await;
        proxy.end_connections(reset);
        let seen = (i + 1) as f64;
        wait_for(
            "the holder to see the close and ping through a new connection",
            DETECTED,
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
    let (restarting, pings) = CountingWorker::serve().await;
    let () = fleet
        .redis
        .cmd(&["RPUSH", SERVICES, &restarting.addr])
        .await;
    fleet.add_replica();
    let want = fleet
        .wait_for_table_with(
            &units,
            &[other.addr.clone(), restarting.addr.clone()],
            Duration::from_secs(25),
        )
        .await;
    let generation = fleet.generation().await;
    let pinged = || pings.load(std::sync::atomic::Ordering::SeqCst);
    for i in 1..=3 {
        // The holder's connection is open: the first cycle's ping, then per
        // restart the probe's and the one that reopens it.
        let want_pings = 1 + 2 * (i - 1);
        wait_for("the holder connected", DETECTED, || async {
            pinged() >= want_pings
        })
        .await;
        // The old server ends its connections (a graceful stop), and a new one
        // serves on the same socket.
        restarting.restart().await;
        wait_for(
            "the holder to see the close and ping the new server",
            DETECTED,
            || async { closes(&fleet, 0, "answered") >= i as f64 },
        )
        .await;
    }
    assert_eq!(fleet.table().await, want, "nobody dropped");
    assert_eq!(fleet.generation().await, generation, "nothing rewritten");
    fleet.shutdown().await;
}

/// Warm standbys: a standby's pinger opens one connection to every listed
/// member, keeps it, and opens again only members whose connection ended.
/// It pings nobody: a ping that names no holder would refresh a member's
/// hold (protocol step 5).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standby_keeps_warm_connections_and_reopens_closed_ones() {
    let counted =
        |n: &Arc<std::sync::atomic::AtomicUsize>| n.load(std::sync::atomic::Ordering::SeqCst);
    let (a, a_pings) = CountingWorker::serve().await;
    let (b, b_pings) = CountingWorker::serve().await;
    let (pinger, mut closes) =
        distributor::edge::grpc::Pinger::new(Duration::from_secs(1), None).watch_closes();
    let listed = vec![a.addr.clone(), b.addr.clone(), "not-an-address".to_string()];
    assert_eq!(pinger.warm(&listed).await, 2);
    // Open: nobody is connected again.
    assert_eq!(pinger.warm(&listed).await, 0);
    // b's server ends its connection (which the warm-up opened): the close
    // names b's channel, which is forgotten, and the next round opens a new
    // connection to b only.
    b.restart().await;
    let closed = closes.recv().await.unwrap();
    assert_eq!(closed.member, b.addr);
    assert!(pinger.closed(&closed));
    assert!(
        !pinger.closed(&closed),
        "an old channel's close says nothing"
    );
    assert_eq!(pinger.warm(&listed).await, 1);
    assert_eq!(
        (counted(&a_pings), counted(&b_pings)),
        (0, 0),
        "a standby pings nobody"
    );
    // The holder's pings go over the warm connections.
    assert!(pinger.ping(&a.addr).await.is_ok());
    assert!(pinger.ping(&b.addr).await.is_ok());
    assert_eq!((counted(&a_pings), counted(&b_pings)), (1, 1));
}

/// A ping server that counts pings and can restart on its listener.
struct CountingWorker {
    addr: String,
    listener: std::net::TcpListener,
    pings: Arc<std::sync::atomic::AtomicUsize>,
    server: tokio::sync::Mutex<
        Option<(
            tokio::sync::oneshot::Sender<()>,
            tokio::task::JoinHandle<()>,
        )>,
    >,
}

#[derive(Clone)]
struct Counting(Arc<std::sync::atomic::AtomicUsize>);

#[tonic::async_trait]
impl distributor::proto::grpc_pinger_server::GrpcPinger for Counting {
    async fn ping(&self, _: tonic::Request<()>) -> Result<tonic::Response<()>, tonic::Status> {
        self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Ok(tonic::Response::new(()))
    }
}

impl CountingWorker {
    async fn serve() -> (CountingWorker, Arc<std::sync::atomic::AtomicUsize>) {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let pings = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let w = CountingWorker {
            addr: listener.local_addr().unwrap().to_string(),
            listener,
            pings: pings.clone(),
            server: tokio::sync::Mutex::new(None),
        };
        w.start().await;
        (w, pings)
    }

    async fn start(&self) {
        let listener =
            tokio::net::TcpListener::from_std(self.listener.try_clone().unwrap()).unwrap();
        let service = distributor::proto::grpc_pinger_server::GrpcPingerServer::new(Counting(
            self.pings.clone(),
        ));
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            let _ = tonic::transport::Server::builder()
                .add_service(service)
                .serve_with_incoming_shutdown(
                    tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true)),
                    async {
                        let _ = stopped.await;
                    },
                )
                .await;
        });
        *self.server.lock().await = Some((stop, task));
    }

    /// Stops the server (its connections end) and serves again on the same
    /// listener.
    async fn restart(&self) {
        if let Some((stop, task)) = self.server.lock().await.take() {
            let _ = stop.send(());
            let _ = task.await;
        }
        self.start().await;
    }
}

/// A hung member (its connection open and silent) is dropped as soon as its
/// ping times out, not at the poll after: the ping carried past its cycle is
/// watched between cycles, and its failure starts a cycle at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_member_leaves_when_its_ping_times_out_not_a_poll_later() {
    let units = units(20);
    let mut fleet = Fleet::new(RedisServer::start());
    let poll = Duration::from_secs(4);
    fleet.config.poll_interval = poll;
    fleet.config.ping_timeout = Duration::from_millis(300);
    fleet.set_units(&units).await;
    let other = FlakyWorker::start(&fleet).await;
    let behind = FlakyWorker::serve(Arc::new(AtomicBool::new(true))).await;
    let port: u16 = behind.addr.rsplit(':').next().unwrap().parse().unwrap();
    let proxy = FreezableProxy::start(port).await;
    let hung = format!("127.0.0.1:{}", proxy.port);
    let () = fleet.redis.cmd(&["RPUSH", SERVICES, &hung]).await;
    fleet.add_replica();
    fleet
        .wait_for_table_with(
            &units,
            &[other.addr.clone(), hung.clone()],
            Duration::from_secs(25),
        )
        .await;
    // Right after a cycle: the next pings the hung member within a poll, and
    // its ping times out 300 ms later. Taken only by the cycle after that, the
    // row would stay about two polls.
    let frozen = std::time::Instant::now();
    proxy.cut();
    wait_for(
        "the hung member's row gone",
        Duration::from_secs(25),
        || async { !fleet.table().await.rows().contains_key(&hung) },
    )
    .await;
    let took = frozen.elapsed();
    assert!(
        took < poll + poll / 2,
        "dropped {took:?} after the freeze: the failed ping waited for the next poll"
    );
    fleet.shutdown().await;
}
