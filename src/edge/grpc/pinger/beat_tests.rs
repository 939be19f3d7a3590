//! Beats against real tonic servers on loopback.

use std::sync::atomic::AtomicBool;

use futures::StreamExt as _;

use super::*;
use crate::edge::grpc::responder::PingGate;
use crate::edge::grpc::{PingResponder, Route, Unimplemented};
use crate::proto::grpc_pinger_server::GrpcPingerServer;
use crate::proto::liveness_server::LivenessServer;

/// Answers OK until told to refuse, or to hang (blocking its thread).
#[derive(Default)]
struct Gate {
    refuse: AtomicBool,
    hang: AtomicBool,
}

impl PingGate for Gate {
    fn admit(&self, _: Instant, _: Option<crate::core::handoff::PingView>) -> Result<(), String> {
        while self.hang.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(5));
        }
        if self.refuse.load(Ordering::SeqCst) {
            Err("fenced".into())
        } else {
            Ok(())
        }
    }
}

/// A member's server on a runtime of its own (a hung gate blocks only
/// it), with the beat service or without; its address.
fn serve(gate: Arc<Gate>, beats: bool) -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    listener.set_nonblocking(true).unwrap();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let listener = tokio::net::TcpListener::from_std(listener).unwrap();
            let incoming = tonic::transport::server::TcpIncoming::from(listener);
            let responder = PingResponder::gated("m", gate);
            let ping = GrpcPingerServer::new(responder.clone());
            let server = tonic::transport::Server::builder();
            let _ = if beats {
                server
                    .serve_with_incoming(
                        Route::new(
                            ping,
                            Route::new(LivenessServer::new(responder), Unimplemented),
                        ),
                        incoming,
                    )
                    .await
            } else {
                server
                    .serve_with_incoming(Route::new(ping, Unimplemented), incoming)
                    .await
            };
        });
    });
    addr
}

async fn round(pinger: &Pinger, member: &str) -> Result<Duration, PingFailure> {
    let mut set = pinger.ping_tasks(&[member.to_string()]);
    let (_, report) = set.next().await.unwrap();
    report.unwrap().result
}

/// Pings until one goes as a beat (the stream opens in the background
/// after the first answered call); bounded.
async fn until_beating(pinger: &Pinger, member: &str) {
    for _ in 0..200 {
        let before = pinger.beats_sent();
        round(pinger, member).await.unwrap();
        if pinger.beats_sent() > before {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("pings never became beats");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pings_become_beats_which_answer_refuse_and_time_out_like_pings() {
    let gate = Arc::new(Gate::default());
    let member = serve(gate.clone(), true);
    let pinger = Pinger::new(Duration::from_millis(300), None);
    until_beating(&pinger, &member).await;
    let before = pinger.beats_sent();
    for _ in 0..2 * CALL_EVERY {
        round(&pinger, &member).await.unwrap();
    }
    assert_eq!(
        pinger.beats_sent() - before,
        u64::from(2 * CALL_EVERY - 2),
        "every ping a beat but one in {CALL_EVERY}"
    );
    // Refused: the stream ends, and a call decides, as for any call.
    gate.refuse.store(true, Ordering::SeqCst);
    let r = round(&pinger, &member).await;
    assert!(
        matches!(&r, Err(PingFailure::Unavailable(why)) if why == "fenced"),
        "{r:?}"
    );
    gate.refuse.store(false, Ordering::SeqCst);
    // Calls until a new stream is open.
    until_beating(&pinger, &member).await;
    // Hung: no answer within the ping timeout.
    gate.hang.store(true, Ordering::SeqCst);
    let before = pinger.beats_sent();
    let r = round(&pinger, &member).await;
    assert!(matches!(r, Err(PingFailure::Timeout)), "{r:?}");
    assert_eq!(pinger.beats_sent(), before + 1, "timed out as a beat");
    gate.hang.store(false, Ordering::SeqCst);
    // The late answer to the timed-out beat is not taken for the next.
    until_beating(&pinger, &member).await;
}

/// A beat carried into the next cycle is polled long after its answer
/// came: it reports the answer's instant and round trip, in time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_beat_polled_late_reports_when_it_was_answered() {
    let member = serve(Arc::new(Gate::default()), true);
    let pinger = Pinger::new(Duration::from_millis(300), None);
    until_beating(&pinger, &member).await;
    let before = pinger.beats_sent();
    let mut set = pinger.ping_tasks(std::slice::from_ref(&member));
    assert_eq!(pinger.beats_sent(), before + 1, "a beat");
    tokio::time::sleep(Duration::from_millis(600)).await;
    let polled = clock::now();
    let (_, report) = set.next().await.unwrap();
    let report = report.unwrap();
    let rtt = report.result.unwrap();
    assert!(rtt < Duration::from_millis(300), "{rtt:?}");
    assert!(report.at < polled);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_without_beats_is_pinged_by_calls() {
    let member = serve(Arc::new(Gate::default()), false);
    let pinger = Pinger::new(Duration::from_millis(300), None);
    for _ in 0..30 {
        round(&pinger, &member).await.unwrap();
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(pinger.beats_sent(), 0);
    let cache = pinger.channels.lock().unwrap();
    assert!(matches!(cache[&member].beats, Link::Unsupported));
}

/// Accepts the stream and never answers it (no headers), as grpcio
/// does when a handler waits for its first message before sending any.
struct Silent;

#[tonic::async_trait]
impl crate::proto::liveness_server::Liveness for Silent {
    type BeatsStream = crate::edge::grpc::responder::Beats;

    async fn beats(
        &self,
        _: tonic::Request<tonic::Streaming<crate::proto::Beat>>,
    ) -> Result<tonic::Response<Self::BeatsStream>, tonic::Status> {
        std::future::pending().await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_that_never_opens_leaves_pings_to_calls() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let member = listener.local_addr().unwrap().to_string();
    let ping = GrpcPingerServer::new(PingResponder::default());
    tokio::spawn(tonic::transport::Server::builder().serve_with_incoming(
        Route::new(ping, Route::new(LivenessServer::new(Silent), Unimplemented)),
        tonic::transport::server::TcpIncoming::from(listener),
    ));
    let pinger = Pinger::new(Duration::from_millis(300), None);
    round(&pinger, &member).await.unwrap();
    // The try times out after a first contact's allowance.
    let failed = || {
        matches!(
            pinger.channels.lock().unwrap()[&member].beats,
            Link::Failed(_)
        )
    };
    for _ in 0..400 {
        if failed() {
            break;
        }
        round(&pinger, &member).await.unwrap();
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(failed(), "the try failed");
    assert_eq!(pinger.beats_sent(), 0, "and every ping was a call");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_only_never_beats() {
    let member = serve(Arc::new(Gate::default()), true);
    let pinger = Pinger::new(Duration::from_millis(300), None).calls_only();
    for _ in 0..30 {
        round(&pinger, &member).await.unwrap();
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(pinger.beats_sent(), 0);
}
