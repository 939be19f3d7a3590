//! Beats (`/proto.Liveness/Beats`, `edge::grpc::beats`) between a real
//! holder and real members over loopback: members that serve the stream are
//! pinged by beats, workers that do not (the Go ones) by calls, and a member
//! that hangs on its stream loses its units as one that hangs on calls does.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use distributor::edge::grpc::{PingGate, PingResponder};
use distributor::proto::grpc_pinger_server::{GrpcPinger, GrpcPingerServer};
use distributor::proto::liveness_server::LivenessServer;

use crate::support::*;

/// Counts what a member's server is asked: every ping and beat (`admits`,
/// through the gate), and calls alone; hangs while `hang` is set.
#[derive(Default)]
struct Counts {
    admits: AtomicU64,
    calls: AtomicU64,
    hang: AtomicBool,
}

impl Counts {
    fn beats(&self) -> u64 {
        self.admits.load(Ordering::SeqCst) - self.calls.load(Ordering::SeqCst)
    }
}

struct Gate(Arc<Counts>);

impl PingGate for Gate {
    fn admit(
        &self,
        _: Instant,
        _: Option<distributor::core::handoff::PingView>,
    ) -> Result<(), String> {
        while self.0.hang.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(5));
        }
        self.0.admits.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
}

/// The ping service, counting calls before the gate answers.
#[derive(Clone)]
struct Calls(Arc<Counts>, PingResponder);

#[tonic::async_trait]
impl GrpcPinger for Calls {
    async fn ping(&self, r: tonic::Request<()>) -> Result<tonic::Response<()>, tonic::Status> {
        self.0.calls.fetch_add(1, Ordering::SeqCst);
        self.1.ping(r).await
    }
}

/// A worker's server on a runtime of its own (a hung gate blocks only it),
/// with the beat service or without; its address and its counts.
fn worker(beats: bool) -> (String, Arc<Counts>) {
    let counts = Arc::new(Counts::default());
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    listener.set_nonblocking(true).unwrap();
    let c = counts.clone();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let listener = tokio::net::TcpListener::from_std(listener).unwrap();
            let responder = PingResponder::gated("w", Arc::new(Gate(c.clone())));
            let calls = GrpcPingerServer::new(Calls(c, responder.clone()));
            let mut server = tonic::transport::Server::builder().add_service(calls);
            if beats {
                server = server.add_service(LivenessServer::new(responder));
            }
            let incoming = tokio_stream::wrappers::TcpListenerStream::new(listener);
            let _ = server.serve_with_incoming(incoming).await;
        });
    });
    (addr, counts)
}

/// The holder's `distributor_ping_beats_total`.
fn beats_sent(fleet: &Fleet) -> f64 {
    let i = fleet.holder().expect("a holder");
    let text = fleet.replicas[i].as_ref().unwrap().metrics().encode();
    metric(&parse_metrics(&text), "distributor_ping_beats_total", &[]).unwrap_or(0.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn members_that_serve_beats_get_beats_and_the_others_calls() {
    let mut fleet = Fleet::new(RedisServer::start());
    fleet.set_units(&units(12)).await;
    let (beating, b) = worker(true);
    let (calling, c) = worker(false);
    let () = fleet
        .redis
        .cmd(&["LPUSH", SERVICES, &beating, &calling])
        .await;
    // A Rust `Member`, which serves beats too.
    fleet.add_member().await;
    fleet.add_replica();
    let member = fleet.member_id(0);
    wait_for("three rows", Duration::from_secs(10), || async {
        let t = fleet.table().await;
        [&beating, &calling, &member]
            .iter()
            .all(|m| t.rows().contains_key(m.as_str()))
    })
    .await;
    // Every poll (100 ms), two beats (the worker and the `Member`) and
    // one call: measured over the next 20 or more beats of the worker.
    wait_for("the worker's beats", Duration::from_secs(10), || async {
        b.beats() > 0
    })
    .await;
    let (beats0, calls0, sent0) = (
        b.beats(),
        c.calls.load(Ordering::SeqCst),
        beats_sent(&fleet),
    );
    let b_calls0 = b.calls.load(Ordering::SeqCst);
    wait_for("20 more beats", Duration::from_secs(20), || async {
        b.beats() >= beats0 + 20
    })
    .await;
    let calls = c.calls.load(Ordering::SeqCst) - calls0;
    assert!(calls >= 15, "the worker without beats is called: {calls}");
    assert_eq!(c.beats(), 0, "and never gets a beat");
    assert!(
        b.calls.load(Ordering::SeqCst) - b_calls0 <= 2,
        "the worker with beats is not called"
    );
    let sent = beats_sent(&fleet) - sent0;
    assert!(
        sent >= 2.0 * 20.0 - 4.0,
        "the holder counts the worker's and the member's beats: {sent}"
    );
    // Nobody failed a ping.
    let i = fleet.holder().unwrap();
    let text = fleet.replicas[i].as_ref().unwrap().metrics().encode();
    let samples = parse_metrics(&text);
    for reason in ["timeout", "unavailable", "refused", "status"] {
        let failed = metric(
            &samples,
            "distributor_ping_failures_total",
            &[("reason", reason)],
        )
        .unwrap_or(0.0);
        assert_eq!(failed, 0.0, "{reason}");
    }
    fleet.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_hung_on_its_beats_loses_its_units_as_on_calls() {
    let mut fleet = Fleet::new(RedisServer::start());
    fleet.set_units(&units(12)).await;
    let (hung, h) = worker(true);
    let () = fleet.redis.cmd(&["LPUSH", SERVICES, &hung]).await;
    fleet.add_member().await;
    fleet.add_replica();
    wait_for("beats to the worker", Duration::from_secs(10), || async {
        h.beats() > 2
    })
    .await;
    let row: Option<String> = fleet.redis.cmd(&["HGET", TABLE, &hung]).await;
    assert!(row.is_some_and(|r| !r.is_empty()), "it has units");
    // Its server stops answering (its process hangs): beats time out.
    h.hang.store(true, Ordering::SeqCst);
    let hung_at = Instant::now();
    wait_for("its row gone", Duration::from_secs(10), || async {
        let row: Option<String> = fleet.redis.cmd(&["HGET", TABLE, &hung]).await;
        row.is_none()
    })
    .await;
    let took = hung_at.elapsed();
    let i = fleet.holder().unwrap();
    let text = fleet.replicas[i].as_ref().unwrap().metrics().encode();
    let timeouts = metric(
        &parse_metrics(&text),
        "distributor_ping_failures_total",
        &[("reason", "timeout")],
    )
    .unwrap_or(0.0);
    assert!(timeouts >= 1.0, "found by a timed-out ping");
    // The bound of a hung member: a poll, a ping timeout, and the write
    // (100 ms + 250 ms here); generous for a loaded machine.
    assert!(took < Duration::from_secs(5), "{took:?}");
    // (Its units go to the member after `-handoff-delay`: it never wrote
    // a report, so it may be a worker of the old protocol.)
    h.hang.store(false, Ordering::SeqCst);
    fleet.shutdown().await;
}
