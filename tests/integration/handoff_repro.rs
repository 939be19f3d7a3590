//! Regression tests of two holder-side problems found while writing the
//! Python reference worker (both failed before their fixes: the write loop
//! before handoff cycles verified the table after a write, the early release
//! before the holder counted only from the revoking write). The members are
//! hand-played, as in `handoff.rs`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use distributor::core::table::decode_row;
use std::time::Instant;

use crate::support::*;

const PATIENT: Duration = Duration::from_secs(120);

/// A report that is not draining (see [`crate::handoff::report`]).
async fn report(fleet: &Fleet, member: &str, applied: u64, deadline: Duration) {
    crate::handoff::report(fleet, member, applied, false, deadline).await;
}

/// A handoff-only cycle right after the holder's own write finds its WATCH
/// guard tripped by that very write: the stored digest counts as unknown, and
/// it writes the unchanged table again, with a new generation. A member that
/// acknowledges every generation (docs/protocol.md step 4 read literally: "For
/// generation g: ... then report") answers each write with an `{T}:acked`
/// hint, which starts the next handoff cycle: the table is rewritten every
/// few milliseconds until the next full cycle verifies the content (about
/// 300 writes per change with the default 1 s poll interval).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledging_every_generation_makes_no_write_loop() {
    let units = units(8);
    let mut fleet = Fleet::new(RedisServer::start());
    fleet.config.poll_interval = Duration::from_secs(1);
    fleet.set_units(&units).await;
    let a = FlakyWorker::start(&fleet).await;
    report(&fleet, &a.addr, 0, PATIENT).await;
    fleet.add_replica();
    fleet
        .wait_for_table_with(
            &units,
            std::slice::from_ref(&a.addr),
            Duration::from_secs(10),
        )
        .await;
    // From now on `a` acknowledges every generation as soon as it sees it.
    let acker = {
        let (id, mut c) = (a.addr.clone(), fleet.redis.conn().await);
        tokio::spawn(async move {
            let k = keys();
            let mut last = 0u64;
            loop {
                let g: Option<u64> = redis::cmd("HGET")
                    .arg(&k.meta)
                    .arg("generation")
                    .query_async(&mut c)
                    .await
                    .unwrap();
                if let Some(g) = g.filter(|g| *g > last) {
                    let r = format!("{g} 0 120000 1");
                    let _: () = redis::pipe()
                        .hset(&k.members, &id, r)
                        .ignore()
                        .publish(&k.acked_channel, &id)
                        .ignore()
                        .query_async(&mut c)
                        .await
                        .unwrap();
                    last = g;
                }
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        })
    };
    let before = fleet.generation().await;
    // One change: a second worker joins.
    let b = FlakyWorker::start(&fleet).await;
    report(&fleet, &b.addr, 0, PATIENT).await;
    let ids = vec![a.addr.clone(), b.addr.clone()];
    fleet
        .wait_for_table_with(&units, &ids, Duration::from_secs(10))
        .await;
    // Until the generation stays put for two poll intervals.
    let (mut g, mut since) = (fleet.generation().await, Instant::now());
    let limit = Instant::now() + Duration::from_secs(10);
    while since.elapsed() < Duration::from_secs(2) && Instant::now() < limit {
        tokio::time::sleep(Duration::from_millis(20)).await;
        let now = fleet.generation().await;
        if now != g {
            (g, since) = (now, Instant::now());
        }
    }
    acker.abort();
    let writes = g - before;
    eprintln!("table writes for one join: {writes}");
    assert!(writes <= 5, "{writes} table writes for one join");
    fleet.shutdown().await;
}

/// Answers pings, late when `slow` (after the holder's ping timeout: the
/// holder counts a failure, yet the member did receive the ping), and
/// remembers when it last received one.
#[derive(Clone)]
struct LatePinger {
    slow: Arc<AtomicBool>,
    received: Arc<Mutex<Vec<Instant>>>,
}

#[tonic::async_trait]
impl distributor::proto::grpc_pinger_server::GrpcPinger for LatePinger {
    async fn ping(&self, _: tonic::Request<()>) -> Result<tonic::Response<()>, tonic::Status> {
        self.received.lock().unwrap().push(Instant::now());
        if self.slow.load(Ordering::SeqCst) {
            tokio::time::sleep(Duration::from_millis(600)).await;
        }
        Ok(tonic::Response::new(()))
    }
}

/// docs/protocol.md step 5 lets a member hold a unit until its deadline after the
/// earlier of its last read showing the unit and the last ping it
/// *received*; the holder gives the unit away `deadline × 1.05 + 100 ms`
/// after the earlier of the last *answer it got* and the revoking write. A
/// ping the member received but whose answer came too late (or was lost)
/// counts for the member and not for the holder: the holder's bound is then
/// earlier than the member's by up to a ping timeout plus a poll interval
/// (here: a member that cannot read Redis any more, and whose answers come
/// late, has its unit given away while its hold still runs).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_unit_is_not_given_away_before_its_holders_deadline() {
    const DEADLINE: Duration = Duration::from_millis(1000);
    let units = units(6);
    let mut fleet = Fleet::new(RedisServer::start());
    fleet.set_units(&units).await;
    let pinger = LatePinger {
        slow: Arc::new(AtomicBool::new(false)),
        received: Arc::new(Mutex::new(Vec::new())),
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let a = listener.local_addr().unwrap().to_string();
    let service = distributor::proto::grpc_pinger_server::GrpcPingerServer::new(pinger.clone());
    let server = tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(service)
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
    );
    let () = fleet.redis.cmd(&["RPUSH", SERVICES, &a]).await;
    let others = [
        FlakyWorker::start(&fleet).await,
        FlakyWorker::start(&fleet).await,
    ];
    report(&fleet, &a, 0, DEADLINE).await;
    for w in &others {
        report(&fleet, &w.addr, 0, PATIENT).await;
    }
    fleet.add_replica();
    let mut ids: Vec<String> = others.iter().map(|w| w.addr.clone()).collect();
    ids.push(a.clone());
    fleet
        .wait_for_table_with(&units, &ids, Duration::from_secs(10))
        .await;
    let held: Vec<String> = fleet
        .table()
        .await
        .rows()
        .get(&a)
        .map(|r| decode_row(r).into_iter().map(str::to_string).collect())
        .unwrap_or_default();
    assert!(!held.is_empty());
    // Its answers come late from now on; it reads its row, as a member
    // would, until a read no longer shows its units: from then on, say, its
    // reads fail (it never learns of the revocation).
    pinger.slow.store(true, Ordering::SeqCst);
    let mut c = fleet.redis.conn().await;
    let mut seen = None;
    loop {
        let sent = Instant::now();
        let row: Option<String> = redis::cmd("HGET")
            .arg(TABLE)
            .arg(&a)
            .query_async(&mut c)
            .await
            .unwrap();
        if !row.is_some_and(|r| held.iter().all(|u| decode_row(&r).contains(&u.as_str()))) {
            break;
        }
        seen = Some(sent);
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let seen = seen.expect("a read showed the units before the revocation");
    // When does another member get one of them?
    let granted = loop {
        let t = fleet.table().await;
        if others.iter().any(|w| {
            t.rows()
                .get(&w.addr)
                .is_some_and(|r| decode_row(r).iter().any(|u| held.contains(&u.to_string())))
        }) {
            break Instant::now();
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    let last_ping = *pinger
        .received
        .lock()
        .unwrap()
        .iter()
        .filter(|r| **r <= granted)
        .max()
        .unwrap();
    let hold_end = seen.min(last_ping) + DEADLINE;
    eprintln!(
        "given away {:?} after the member's last read showing it; its hold (docs/protocol.md step 5) ran {:?} longer",
        granted - seen,
        hold_end.saturating_duration_since(granted)
    );
    assert!(
        granted >= hold_end,
        "given away {:?} before the member's hold ended",
        hold_end - granted
    );
    server.abort();
    fleet.shutdown().await;
}
