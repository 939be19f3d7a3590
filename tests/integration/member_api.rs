//! The `Member` API for applications (issue 25): the application's own
//! tonic server and Redis client, readiness, a weight changed at run time,
//! per-unit handler calls and the metrics, against a real Redis, and a real
//! distributor where the holder's side matters.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use distributor::member::HandoffFuture;
use distributor::{Handoff, Member, Owned, Revocation};
use metrics::{Counter, Gauge, Histogram, Key, KeyName, Metadata, Recorder, SharedString, Unit};
use std::time::Instant;

use crate::member_handoff::{DEADLINE, Pinger, SERVING, options, report, wait_report, write_table};
use crate::support::*;

/// A unit, `acquired` or `revoked`, and when that call returned.
type Call = (String, &'static str, Instant);

/// Per-unit calls, recorded with their instants.
#[derive(Clone, Default)]
struct Calls {
    log: Arc<Mutex<Vec<Call>>>,
    /// How long stopping each unit takes (default: at once).
    stop_takes: Arc<HashMap<String, Duration>>,
}

impl Calls {
    fn at(&self, unit: &str, what: &str) -> Option<Instant> {
        let log = self.log.lock().unwrap();
        log.iter()
            .find(|(u, w, _)| u == unit && *w == what)
            .map(|(_, _, t)| *t)
    }

    fn count(&self, what: &str) -> usize {
        let log = self.log.lock().unwrap();
        log.iter().filter(|(_, w, _)| *w == what).count()
    }
}

impl Handoff for Calls {
    fn acquired(&self, unit: Owned) -> HandoffFuture<'_> {
        let now = Instant::now();
        self.log.lock().unwrap().push((unit.unit, "acquired", now));
        Box::pin(std::future::ready(()))
    }

    fn revoked(&self, unit: Owned, _why: Revocation) -> HandoffFuture<'_> {
        Box::pin(async move {
            if let Some(t) = self.stop_takes.get(&unit.unit) {
                tokio::time::sleep(*t).await;
            }
            let now = Instant::now();
            self.log.lock().unwrap().push((unit.unit, "revoked", now));
        })
    }
}

/// Serves the member's services and a health service on one tonic server of
/// the test's own (the "application"), on a runtime of its own in a thread
/// of its own: sending on the returned channel ends that runtime, with
/// every connection task and every copy of the services, as when the part
/// of an application that serves dies.
fn serve_app(
    listener: std::net::TcpListener,
    services: distributor::MemberServices,
    health_service: tonic_health::pb::health_server::HealthServer<
        impl tonic_health::pb::health_server::Health,
    >,
) -> (std::sync::mpsc::Sender<()>, std::thread::JoinHandle<()>) {
    let (stop, stopped) = std::sync::mpsc::channel::<()>();
    let thread = std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        runtime.spawn(async move {
            listener.set_nonblocking(true).unwrap();
            let listener = tokio::net::TcpListener::from_std(listener).unwrap();
            let incoming = tonic::transport::server::TcpIncoming::from(listener);
            tonic::transport::Server::builder()
                .add_service(health_service)
                .add_service(services.pinger)
                .add_service(services.beats)
                .serve_with_incoming(incoming)
                .await
                .unwrap();
        });
        let _ = stopped.recv();
        runtime.shutdown_background();
    });
    (stop, thread)
}

async fn health_of(addr: &str, service: &str) -> i32 {
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut h = tonic_health::pb::health_client::HealthClient::new(channel);
    h.check(tonic_health::pb::HealthCheckRequest {
        service: service.into(),
    })
    .await
    .unwrap()
    .into_inner()
    .status
}

/// An application serves the member on its own tonic server, next to its
/// own services, with its own Redis client: the real distributor pings it
/// there and gives it every unit; once the application's server ends, every
/// hold ends at once and the member stops.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_application_serves_the_member_on_its_own_server_with_its_own_redis_client() {
    let units = units(12);
    let mut fleet = Fleet::new(RedisServer::start());
    fleet.set_units(&units).await;
    fleet.add_replica();

    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let client = redis::Client::open(fleet.redis.url()).unwrap();
    let (health, health_service) = tonic_health::server::health_reporter();
    // The application's own service, reported by the same reporter.
    health
        .set_service_status("app.Crawler", tonic_health::ServingStatus::Serving)
        .await;
    let calls = Calls::default();
    let (member, services) = Member::builder()
        .options(fleet.member_options())
        .advertise(addr.clone())
        .redis_client(client)
        .health_reporter(health)
        .handoff(calls.clone())
        .start_without_server()
        .await
        .unwrap();
    assert_eq!(member.local_addr(), None);
    let (stop, server) = serve_app(listener, services, health_service);

    tokio::time::timeout(Duration::from_secs(10), member.ready())
        .await
        .expect("ready in time")
        .unwrap();
    wait_for(
        "every unit in the member's row",
        Duration::from_secs(10),
        || async { fleet.table().await.units_of(&addr).len() == units.len() },
    )
    .await;
    wait_for("every unit acquired", Duration::from_secs(10), || {
        let n = calls.count("acquired");
        async move { n == 12 }
    })
    .await;
    assert!(member.holds(&units[0]).is_some());
    assert_eq!(health_of(&addr, "proto.GRPCPinger").await, SERVING);
    assert_eq!(health_of(&addr, "app.Crawler").await, SERVING);

    // The application's serving part dies: nothing answers the holder's
    // pings any more, so the member must hold nothing from now on.
    stop.send(()).unwrap();
    server.join().unwrap();
    let ended = Instant::now();
    wait_for("every hold ended", Duration::from_secs(2), || {
        let held = units.iter().any(|u| member.holds(u).is_some());
        async move { !held }
    })
    .await;
    eprintln!("holds ended {:?} after the server", ended.elapsed());
    let mut ready = member.readiness();
    wait_for("not ready", Duration::from_secs(2), || {
        let r = *ready.borrow_and_update();
        async move { !r }
    })
    .await;
    fleet.shutdown().await;
}

/// `set_weight` writes a report with the new weight at once, and the real
/// holder gives the member its new share.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_weight_set_at_run_time_is_reported_and_changes_the_share() {
    let units = units(12);
    let (mut fleet, table) = Fleet::converged(|_| {}, 2, 1, &units).await;
    let (a, b) = (fleet.member_id(0), fleet.member_id(1));
    assert_eq!((table.units_of(&a).len(), table.units_of(&b).len()), (6, 6));
    let m = fleet.members[0].as_ref().unwrap();
    assert!(m.set_weight(0).is_err(), "0 is out of range");
    assert!(m.set_weight(1001).is_err(), "1001 is out of range");
    // Through the cloneable handle, from a task of its own, as a handler
    // would (it cannot hold the `Member`, which `drain` consumes).
    let handle = m.handle();
    assert_eq!(handle.id(), a);
    let h = handle.clone();
    tokio::spawn(async move { h.set_weight(2) })
        .await
        .unwrap()
        .unwrap();
    wait_for(
        "the report carries weight 2",
        Duration::from_secs(5),
        || async {
            report(&fleet.redis, &a)
                .await
                .is_some_and(|r| r.weight == 2)
        },
    )
    .await;
    wait_for("rows of 8 and 4", Duration::from_secs(10), || async {
        let t = fleet.table().await;
        t.units_of(&a).len() == 8 && t.units_of(&b).len() == 4
    })
    .await;
    let unit = fleet.table().await.units_of(&a)[0].to_string();
    wait_for("the handle sees the hold", Duration::from_secs(5), || {
        let held = handle.holds(&unit).is_some();
        async move { held }
    })
    .await;
    assert_eq!(handle.holds(&unit), m.holds(&unit));
    assert!(handle.hold(&unit).is_some());
    assert!(handle.report_load(&unit, 1.5));
    assert!(!handle.report_load(&unit, f64::NAN), "not a load");
    fleet.members[0].take().unwrap().shutdown().await;
    assert_eq!(handle.holds(&unit), None, "a handle outlives its member");
    fleet.members[1].take().unwrap().shutdown().await;
    fleet.shutdown().await;
}

/// Each unit has its own call: a unit whose stop is slow delays neither
/// the stop of another unit taken in the same generation nor anything
/// but its own generation's acknowledgement.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_stop_of_one_unit_does_not_delay_another_units_stop() {
    let redis = RedisServer::start();
    let port = free_port();
    let id = format!("127.0.0.1:{port}");
    write_table(&redis, 3, &[(&id, "slow,quick")]).await;
    let calls = Calls {
        stop_takes: Arc::new(HashMap::from([(
            "slow".to_string(),
            Duration::from_millis(1500),
        )])),
        ..Calls::default()
    };
    let member = Member::builder()
        .options(options(&redis, port))
        .handoff(calls.clone())
        .start()
        .await
        .unwrap();
    let _pinger = Pinger::start(&id);
    wait_for("both acquired", Duration::from_secs(5), || {
        let n = calls.count("acquired");
        async move { n == 2 }
    })
    .await;

    let taken = Instant::now();
    write_table(&redis, 4, &[(&id, "")]).await;
    wait_for("quick stopped", Duration::from_secs(1), || {
        let done = calls.at("quick", "revoked").is_some();
        async move { done }
    })
    .await;
    let quick = calls.at("quick", "revoked").unwrap() - taken;
    assert!(
        calls.at("slow", "revoked").is_none(),
        "the slow stop is still running when the quick one returned"
    );
    // The generation is acknowledged only once both stops returned.
    assert_eq!(report(&redis, &id).await.unwrap().applied, 3);
    wait_report(&redis, &id, 4, false).await;
    let slow = calls.at("slow", "revoked").unwrap() - taken;
    eprintln!("quick stop after {quick:?}, slow stop after {slow:?}");
    assert!(quick < Duration::from_millis(1000) && slow >= Duration::from_millis(1500));
    member.shutdown().await;
}

/// A handler that panics before it returns its future, on one unit: the
/// panic counts as the call returned, so the unit's stop is reported and
/// the member goes on taking units.
struct Panicky;

impl Handoff for Panicky {
    fn acquired(&self, unit: Owned) -> HandoffFuture<'_> {
        assert!(unit.unit != "boom-on-start", "a handler's bug");
        Box::pin(std::future::ready(()))
    }

    fn revoked(&self, unit: Owned, _why: Revocation) -> HandoffFuture<'_> {
        assert!(unit.unit != "boom", "a handler's bug");
        Box::pin(std::future::ready(()))
    }
}

/// A panicking acquisition counts as started; a panicking stop may leave
/// the unit's work running, so the generation that revoked it is
/// acknowledged only once its hold ended (the holder, meanwhile, waits out
/// the deadline before granting it), and the member goes on afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_that_panics_is_acknowledged_only_once_its_hold_ended() {
    let redis = RedisServer::start();
    let port = free_port();
    let id = format!("127.0.0.1:{port}");
    write_table(&redis, 3, &[(&id, "boom,boom-on-start,calm")]).await;
    let member = Member::builder()
        .options(options(&redis, port))
        .handoff(Panicky)
        .start()
        .await
        .unwrap();
    let _pinger = Pinger::start(&id);
    wait_for("three units held", Duration::from_secs(5), || {
        let n = member.assignment().borrow().units.len();
        async move { n == 3 }
    })
    .await;
    let written = Instant::now();
    write_table(&redis, 4, &[(&id, "calm")]).await;
    wait_report(&redis, &id, 4, false).await;
    // The last read that showed `boom` came at most a poll (100 ms) before
    // the write: its hold ran about a deadline past it. (A clean stop is
    // acknowledged within milliseconds.)
    let took = written.elapsed();
    assert!(
        took >= DEADLINE / 2,
        "generation 4 acknowledged {took:?} after the write, before boom's hold ended"
    );
    assert_eq!(member.holds("boom"), None);
    write_table(&redis, 5, &[(&id, "calm,next")]).await;
    wait_for("the next unit held", Duration::from_secs(5), || {
        let held = member.holds("next").is_some();
        async move { held }
    })
    .await;
    member.shutdown().await;
}

/// A drained member's process may exit at once: `drain()` returns moments
/// after the deregistration even while pingers (a holder, a standby) keep
/// their connections open, since a member that holds nothing may refuse
/// them. (The figure is measured in `benches/cluster/drain.rs`; the bound
/// here only catches a wait for those connections to close.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drain_returns_at_once_while_pingers_keep_their_connections() {
    let redis = RedisServer::start();
    let port = free_port();
    let id = format!("127.0.0.1:{port}");
    write_table(&redis, 3, &[(&id, "")]).await;
    let member = Member::builder()
        .options(options(&redis, port))
        .start()
        .await
        .unwrap();
    let _holder = Pinger::start(&id);
    let _standby = Pinger::start(&id);
    tokio::time::timeout(Duration::from_secs(10), member.ready())
        .await
        .expect("ready within 10 s")
        .unwrap();
    // A beat stream that stays open: no beat comes for the member to refuse.
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{id}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut beats = distributor::proto::liveness_client::LivenessClient::new(channel);
    let _stream = beats
        .beats(futures::stream::pending::<distributor::proto::Beat>())
        .await
        .unwrap();
    let started = Instant::now();
    assert_eq!(member.drain().await, distributor::Drained::HandedOver);
    let took = started.elapsed();
    assert!(
        took < Duration::from_secs(1),
        "drain() took {took:?} with nothing to hand over"
    );
    let gone: Option<String> = redis.cmd(&["HGET", &keys().members, &id]).await;
    assert_eq!(gone, None, "deregistered");
}

/// A recorder of the test's own: counters and gauges by name and labels.
#[derive(Default)]
struct TestRecorder {
    values: Mutex<BTreeMap<String, Arc<AtomicU64>>>,
    histograms: Mutex<BTreeMap<String, Arc<Samples>>>,
}

#[derive(Default)]
struct Samples(Mutex<Vec<f64>>);

impl metrics::HistogramFn for Samples {
    fn record(&self, value: f64) {
        self.0.lock().unwrap().push(value);
    }
}

fn key_text(key: &Key) -> String {
    let mut labels: Vec<String> = key
        .labels()
        .map(|l| format!("{}={}", l.key(), l.value()))
        .collect();
    labels.sort();
    format!("{}{{{}}}", key.name(), labels.join(","))
}

impl TestRecorder {
    fn slot(&self, key: &Key) -> Arc<AtomicU64> {
        self.values
            .lock()
            .unwrap()
            .entry(key_text(key))
            .or_default()
            .clone()
    }

    fn counter(&self, text: &str) -> u64 {
        self.values
            .lock()
            .unwrap()
            .get(text)
            .map_or(0, |v| v.load(Ordering::SeqCst))
    }

    fn gauge(&self, text: &str) -> f64 {
        f64::from_bits(self.counter(text))
    }

    fn histogram(&self, text: &str) -> Vec<f64> {
        self.histograms
            .lock()
            .unwrap()
            .get(text)
            .map(|s| s.0.lock().unwrap().clone())
            .unwrap_or_default()
    }
}

impl Recorder for TestRecorder {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}

    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        Counter::from_arc(self.slot(key))
    }

    fn register_gauge(&self, key: &Key, _: &Metadata<'_>) -> Gauge {
        Gauge::from_arc(self.slot(key))
    }

    fn register_histogram(&self, key: &Key, _: &Metadata<'_>) -> Histogram {
        let samples = self
            .histograms
            .lock()
            .unwrap()
            .entry(key_text(key))
            .or_default()
            .clone();
        Histogram::from_arc(samples)
    }
}

/// The member's metrics reach the application's recorder, labelled by
/// member: readiness, units held, acquisitions, revocations by reason and
/// their duration, the weight, reports.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_members_metrics_reach_the_applications_recorder() {
    let redis = RedisServer::start();
    let port = free_port();
    let id = format!("127.0.0.1:{port}");
    write_table(&redis, 7, &[(&id, "a,b,c")]).await;
    let recorder = Arc::new(TestRecorder::default());
    let member = Member::builder()
        .options(options(&redis, port))
        .weight(3)
        .metrics_recorder(recorder.clone())
        .start()
        .await
        .unwrap();
    let _pinger = Pinger::start(&id);
    let m = |name: &str| format!("{name}{{member={id}}}");
    // Readiness also needs the registration's reply, which can come after
    // the units are started: wait for both.
    wait_for("three units held and ready", Duration::from_secs(5), || {
        let n = recorder.gauge(&m("distributor_member_units"));
        let ready = recorder.gauge(&m("distributor_member_ready"));
        async move { n == 3.0 && ready == 1.0 }
    })
    .await;
    assert_eq!(recorder.counter(&m("distributor_member_acquired_total")), 3);
    assert_eq!(recorder.gauge(&m("distributor_member_weight")), 3.0);
    assert_eq!(recorder.gauge(&m("distributor_member_fenced")), 0.0);
    assert!(recorder.counter(&m("distributor_member_reports_total")) >= 1);

    write_table(&redis, 8, &[(&id, "c")]).await;
    wait_report(&redis, &id, 8, false).await;
    let moved = format!("distributor_member_revoked_total{{member={id},reason=moved}}");
    assert_eq!(recorder.counter(&moved), 2);
    assert_eq!(
        recorder
            .histogram(&m("distributor_member_revocation_seconds"))
            .len(),
        2
    );
    wait_for("one unit held", Duration::from_secs(5), || {
        let n = recorder.gauge(&m("distributor_member_units"));
        async move { n == 1.0 }
    })
    .await;
    member.shutdown().await;
    assert_eq!(recorder.gauge(&m("distributor_member_ready")), 0.0);
    assert_eq!(
        recorder.gauge(&m("distributor_member_fenced")),
        0.0,
        "stopping is not being out of contact"
    );
}
