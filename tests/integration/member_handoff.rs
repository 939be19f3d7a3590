//! The member side of the handoff protocol, against a real Redis and real
//! pings, with the test playing the holder: it writes the table rows and
//! `{T}:meta generation` and publishes `{T}:changed`, pings the member over
//! gRPC, and reads `{T}:members`. Members run in-process (with a recording
//! handler) or as `examples/worker --events` processes (stopped, continued,
//! terminated), whose stdout must be JSON lines only.

use std::io::BufRead;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use distributor::core::handoff::{MemberReport, RedisConnection};
use distributor::member::HandoffFuture;
use distributor::proto::grpc_pinger_client::GrpcPingerClient;
use distributor::{Drained, FencingToken, Handoff, Member, MemberOptions, Owned, Revocation};
use std::time::Instant;

use crate::support::*;

pub(crate) const DEADLINE: Duration = Duration::from_secs(1);

pub(crate) fn options(redis: &RedisServer, port: u16) -> MemberOptions {
    let mut o = MemberOptions {
        redis_url: redis.url(),
        services_key: SERVICES.into(),
        table_key: TABLE.into(),
        listen: ([127, 0, 0, 1], port).into(),
        ..MemberOptions::default()
    };
    o.poll_interval = Duration::from_millis(100);
    o.reregister_interval = Duration::from_millis(300);
    o.deadline = DEADLINE;
    o.drain_timeout = Duration::from_secs(10);
    o
}

/// The fake holder's write: the whole table, then its generation, in one
/// transaction, then the notification.
pub(crate) async fn write_table(redis: &RedisServer, generation: u64, rows: &[(&str, &str)]) {
    let mut c = redis.conn().await;
    let mut p = redis::pipe();
    p.atomic().del(TABLE).ignore();
    for (m, units) in rows {
        p.hset(TABLE, *m, *units).ignore();
    }
    p.hset(keys().meta, "generation", generation).ignore();
    let () = p.query_async(&mut c).await.unwrap();
    let _: i64 = redis
        .cmd(&["PUBLISH", &keys().table_channel, &generation.to_string()])
        .await;
}

pub(crate) async fn report(redis: &RedisServer, member: &str) -> Option<MemberReport> {
    let raw: Option<String> = redis.cmd(&["HGET", &keys().members, member]).await;
    raw.map(|r| MemberReport::decode(&r).unwrap_or_else(|| panic!("bad report {r:?}")))
}

/// Whether Redis has this connection: one with its client id, on this
/// server (a report names the server by its run id).
async fn connected(redis: &RedisServer, c: RedisConnection) -> bool {
    assert_eq!(
        c.server,
        Some(redis.run_id().await),
        "a report names the server it reads on"
    );
    let list: String = redis
        .cmd(&["CLIENT", "LIST", "ID", &c.client.to_string()])
        .await;
    !list.trim().is_empty()
}

pub(crate) async fn listed(redis: &RedisServer, member: &str) -> bool {
    let list: Vec<String> = redis.cmd(&["LRANGE", SERVICES, "0", "-1"]).await;
    list.iter().any(|m| m == member)
}

pub(crate) async fn wait_report(redis: &RedisServer, member: &str, applied: u64, draining: bool) {
    wait_for(
        &format!("report {applied} draining={draining}"),
        Duration::from_secs(5),
        || async {
            report(redis, member)
                .await
                .is_some_and(|r| r.applied == applied && r.draining == draining)
        },
    )
    .await;
}

fn signal(pid: u32, sig: &str) {
    let ok = Command::new("kill")
        .args([sig, &pid.to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok, "kill {sig} {pid}");
}

fn unix_us() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_micros()
}

// ---------------------------------------------------------------------------
// Pings, as the holder sends them.

/// One ping: when it was sent, when its answer came, and the answer.
#[derive(Debug, Clone)]
struct Ping {
    sent: Instant,
    done: Instant,
    answer: Result<(), tonic::Code>,
}

/// Pings a member every 100 ms until paused or dropped.
pub(crate) struct Pinger {
    paused: Arc<AtomicBool>,
    log: Arc<Mutex<Vec<Ping>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Pinger {
    pub(crate) fn start(addr: &str) -> Pinger {
        let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
            .unwrap()
            .connect_timeout(Duration::from_millis(300))
            .connect_lazy();
        let paused = Arc::new(AtomicBool::new(false));
        let log = Arc::new(Mutex::new(Vec::new()));
        let task = {
            let (paused, log) = (paused.clone(), log.clone());
            tokio::spawn(async move {
                let mut client = GrpcPingerClient::new(channel);
                loop {
                    if !paused.load(Ordering::SeqCst) {
                        let sent = Instant::now();
                        let answer =
                            match tokio::time::timeout(Duration::from_millis(300), client.ping(()))
                                .await
                            {
                                Ok(Ok(_)) => Ok(()),
                                Ok(Err(status)) => Err(status.code()),
                                Err(_) => Err(tonic::Code::DeadlineExceeded),
                            };
                        let done = Instant::now();
                        log.lock().unwrap().push(Ping { sent, done, answer });
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            })
        };
        Pinger { paused, log, task }
    }

    /// Stops pinging; returns the last ping (one in flight finishes).
    async fn pause(&self) -> Option<Ping> {
        self.paused.store(true, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(350)).await;
        self.last()
    }

    fn resume(&self) {
        self.paused.store(false, Ordering::SeqCst);
    }

    fn last(&self) -> Option<Ping> {
        self.log.lock().unwrap().last().cloned()
    }
}

impl Drop for Pinger {
    fn drop(&mut self) {
        self.task.abort();
    }
}

pub(crate) async fn health(addr: &str) -> i32 {
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut h = tonic_health::pb::health_client::HealthClient::new(channel);
    h.check(tonic_health::pb::HealthCheckRequest {
        service: "proto.GRPCPinger".into(),
    })
    .await
    .unwrap()
    .into_inner()
    .status
}

pub(crate) const SERVING: i32 =
    tonic_health::pb::health_check_response::ServingStatus::Serving as i32;
pub(crate) const NOT_SERVING: i32 =
    tonic_health::pb::health_check_response::ServingStatus::NotServing as i32;

// ---------------------------------------------------------------------------
// An in-process application that records what it is handed.

#[derive(Debug, Clone, PartialEq)]
enum Call {
    Acquired,
    RevokeStarted(Revocation),
    Revoked(Revocation),
}

#[derive(Debug, Clone)]
struct Event {
    call: Call,
    unit: String,
    token: FencingToken,
    at: Instant,
    /// For a revocation start: whether the unit's hold still said held.
    held: bool,
}

#[derive(Clone, Default)]
struct Recorder {
    log: Arc<Mutex<Vec<Event>>>,
    revocation_takes: Duration,
}

impl Recorder {
    fn slow(takes: Duration) -> Recorder {
        Recorder {
            revocation_takes: takes,
            ..Recorder::default()
        }
    }

    fn events(&self) -> Vec<Event> {
        self.log.lock().unwrap().clone()
    }

    fn find(&self, call: &Call, unit: &str) -> Option<Event> {
        self.events()
            .into_iter()
            .find(|e| &e.call == call && e.unit == unit)
    }

    fn find_where(&self, f: impl Fn(&Event) -> bool) -> Option<Event> {
        self.events().into_iter().find(|e| f(e))
    }

    async fn wait(&self, what: &str, f: impl Fn(&Event) -> bool) -> Event {
        wait_for(what, Duration::from_secs(5), || {
            let found = self.find_where(&f).is_some();
            async move { found }
        })
        .await;
        self.find_where(f).unwrap()
    }

    fn push(&self, call: Call, u: &Owned, held: bool) {
        self.log.lock().unwrap().push(Event {
            call,
            unit: u.unit.clone(),
            token: u.token,
            at: Instant::now(),
            held,
        });
    }
}

impl Handoff for Recorder {
    fn acquired(&self, unit: Owned) -> HandoffFuture<'_> {
        self.push(Call::Acquired, &unit, unit.hold.is_held());
        Box::pin(std::future::ready(()))
    }

    fn revoked(&self, unit: Owned, why: Revocation) -> HandoffFuture<'_> {
        Box::pin(async move {
            self.push(Call::RevokeStarted(why), &unit, unit.hold.is_held());
            tokio::time::sleep(self.revocation_takes).await;
            self.push(Call::Revoked(why), &unit, false);
        })
    }
}

fn is_fenced(call: &Call) -> bool {
    matches!(
        call,
        Call::RevokeStarted(Revocation::Fenced { .. }) | Call::Revoked(Revocation::Fenced { .. })
    )
}

// ---------------------------------------------------------------------------
// In-process members.

/// Before any read there is nothing to acquire; after the read (and the
/// report it writes at once, before anything is acquired), still nothing
/// until a ping comes; then the row, with the generation as token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn units_are_acquired_after_the_start_report_and_a_ping() {
    let redis = RedisServer::start();
    let port = free_port();
    let id = format!("127.0.0.1:{port}");
    write_table(&redis, 5, &[(&id, "a,b")]).await;
    let app = Recorder::default();
    let member = Member::start_with(options(&redis, port), app.clone())
        .await
        .unwrap();
    assert_eq!(member.id(), id);

    // The report at start: generation 5 read, nothing held, and the Redis
    // connection the member reads on.
    wait_report(&redis, &id, 5, false).await;
    let r = report(&redis, &id).await.unwrap();
    assert_eq!((r.deadline, r.weight), (DEADLINE, 1));
    assert!(connected(&redis, r.client.expect("a client id")).await);
    // Several reads later, still nothing: no ping came.
    let mut rx = member.assignment();
    wait_for("a few reads", Duration::from_secs(5), || {
        let a = rx.borrow_and_update().clone();
        async move { a.generation == 5 && a.in_table }
    })
    .await;
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert!(app.events().is_empty(), "{:?}", app.events());
    assert!(member.assignment().borrow().units.is_empty());
    assert_eq!(member.holds("a"), None);

    let pinger = Pinger::start(&id);
    let got = app.wait("a acquired", |e| e.call == Call::Acquired).await;
    assert_eq!(got.token, FencingToken(5));
    assert!(got.held, "the hold is on when the unit is handed over");
    wait_for("b acquired", Duration::from_secs(5), || {
        let ok = app.find(&Call::Acquired, "b").is_some();
        async move { ok }
    })
    .await;
    let a = member.assignment().borrow().clone();
    assert_eq!(a.units, ["a", "b"]);
    assert_eq!(a.tokens["b"], FencingToken(5));
    assert!(!a.fenced);
    assert_eq!(member.holds("a"), Some(FencingToken(5)));
    // The member saw the ping before the test's pinger task logged its
    // answer: wait for the log, not for the schedule.
    wait_for("a ping logged", Duration::from_secs(5), || {
        let logged = pinger.last().is_some();
        async move { logged }
    })
    .await;
    assert_eq!(
        pinger.last().expect("logged").answer,
        Ok(()),
        "answers pings while in contact"
    );
    member.shutdown().await;
}

/// `abort` is a crash as the holder sees it: connections to the address are
/// refused, and the holder may grant the units at once. So every hold ends
/// with the call, not at the deadline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn abort_ends_every_hold_at_once() {
    let redis = RedisServer::start();
    let port = free_port();
    let id = format!("127.0.0.1:{port}");
    write_table(&redis, 5, &[(&id, "a,b")]).await;
    let member = Member::start(options(&redis, port)).await.unwrap();
    let _pinger = Pinger::start(&id);
    wait_for("a held", Duration::from_secs(5), || {
        let held = member.holds("a").is_some();
        async move { held }
    })
    .await;
    let hold = member.hold("a").unwrap();
    assert_eq!(hold.check(), Ok(FencingToken(5)));
    let started = Instant::now();
    member.abort();
    assert!(hold.check().is_err(), "the hold ended with abort");
    assert!(started.elapsed() < DEADLINE, "well before the deadline");
    wait_for("connections refused", Duration::from_secs(5), || {
        let id = id.clone();
        async move { tokio::net::TcpStream::connect(&id).await.is_err() }
    })
    .await;
}

/// A slow revocation: the assignment drops the unit and its hold ends when
/// the revocation starts; the report of the generation that took it is
/// written only after the application returned; the generation's new unit is
/// acquired only after that report.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revocation_completes_before_the_report_and_the_report_before_acquisitions() {
    let redis = RedisServer::start();
    let port = free_port();
    let id = format!("127.0.0.1:{port}");
    let mut opts = options(&redis, port);
    opts.deadline = Duration::from_secs(5);
    write_table(&redis, 5, &[(&id, "a,b")]).await;
    let app = Recorder::slow(Duration::from_millis(800));
    let member = Member::start_with(opts, app.clone()).await.unwrap();
    let _pinger = Pinger::start(&id);
    app.wait("b acquired", |e| e.call == Call::Acquired && e.unit == "b")
        .await;
    let hold_a = member.hold("a").expect("a is held");
    assert!(hold_a.is_held());

    write_table(&redis, 6, &[(&id, "b,c")]).await;
    let started = app
        .wait("a's revocation starts", |e| {
            e.call == Call::RevokeStarted(Revocation::Moved)
        })
        .await;
    assert_eq!(started.unit, "a");
    assert!(!started.held, "no longer held once its revocation starts");
    assert!(!hold_a.is_held());
    assert!(hold_a.check().is_err());
    assert!(!member.assignment().borrow().units.contains(&"a".into()));
    // While the application stops `a`, the report stays at 5.
    let mut seen_6 = None;
    let deadline = Instant::now() + Duration::from_secs(5);
    while seen_6.is_none() {
        assert!(Instant::now() < deadline, "generation 6 never reported");
        if report(&redis, &id).await.unwrap().applied == 6 {
            seen_6 = Some(Instant::now());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let stopped = app.find(&Call::Revoked(Revocation::Moved), "a").unwrap();
    assert!(
        seen_6.unwrap() >= stopped.at,
        "generation 6 reported {:?} before a's revocation returned",
        stopped.at - seen_6.unwrap()
    );
    let c = app
        .wait("c acquired", |e| e.call == Call::Acquired && e.unit == "c")
        .await;
    assert_eq!(c.token, FencingToken(6));
    assert!(c.at >= stopped.at, "c acquired before a was stopped");
    let a = member.assignment().borrow().clone();
    assert_eq!(a.units, ["b", "c"]);
    assert_eq!(a.tokens["b"], FencingToken(5), "b kept its first token");
    member.shutdown().await;
}

/// `Hold::cancelled` resolves when the hold ends, and not before: at once
/// when the unit's revocation starts (not when the application's slow stop
/// returns, nor at the deadline), and at the hold's end when the pings stop.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holds_cancelled_future_resolves_when_the_hold_ends() {
    let redis = RedisServer::start();
    let port = free_port();
    let id = format!("127.0.0.1:{port}");
    let mut opts = options(&redis, port);
    let deadline = Duration::from_secs(2);
    opts.deadline = deadline;
    write_table(&redis, 5, &[(&id, "a,b")]).await;
    let app = Recorder::slow(Duration::from_millis(800));
    let member = Member::start_with(opts, app.clone()).await.unwrap();
    let pinger = Pinger::start(&id);
    app.wait("b acquired", |e| e.call == Call::Acquired && e.unit == "b")
        .await;
    let ended = |hold: distributor::Hold| {
        tokio::spawn(async move {
            hold.cancelled().await;
            Instant::now()
        })
    };
    let mut a_ended = ended(member.hold("a").expect("a is held"));
    let hold_b = member.hold("b").expect("b is held");
    let mut b_ended = ended(hold_b.clone());
    // Held, with reads and pings extending it: nothing resolves.
    assert!(
        tokio::time::timeout(Duration::from_millis(600), &mut a_ended)
            .await
            .is_err(),
        "resolved while the unit was held"
    );

    // a is revoked: its future resolves when the revocation starts.
    write_table(&redis, 6, &[(&id, "b")]).await;
    let a_at = tokio::time::timeout(Duration::from_secs(5), &mut a_ended)
        .await
        .expect("a's hold ended")
        .unwrap();
    let started = app
        .wait("a's revocation starts", |e| {
            e.call == Call::RevokeStarted(Revocation::Moved)
        })
        .await;
    let stopped = app
        .wait("a's revocation returns", |e| {
            e.call == Call::Revoked(Revocation::Moved)
        })
        .await;
    assert!(
        a_at < stopped.at,
        "resolved {:?} after the application's stop returned",
        a_at - stopped.at
    );
    assert!(
        a_at + Duration::from_millis(200) > started.at,
        "resolved {:?} before the revocation started",
        started.at - a_at
    );
    assert!(!b_ended.is_finished(), "b is still held");

    // No more pings: b's hold ends at its end, which no read extends any
    // more, and the future resolves then.
    pinger.pause().await;
    let end = hold_b.ends().expect("b is held until its end");
    assert!(end > Instant::now(), "b's hold ends in the future");
    let b_at = tokio::time::timeout(deadline * 3, &mut b_ended)
        .await
        .expect("b's hold ended")
        .unwrap();
    assert!(
        b_at >= end,
        "resolved {:?} before the hold's end",
        end - b_at
    );
    assert!(
        b_at < end + Duration::from_millis(500),
        "resolved {:?} after the hold's end",
        b_at - end
    );
    assert!(hold_b.check().is_err());
    member.shutdown().await;
}

/// A generation lower than the last processed one changes nothing; a higher
/// one after it is processed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lower_generations_are_ignored() {
    let redis = RedisServer::start();
    let port = free_port();
    let id = format!("127.0.0.1:{port}");
    write_table(&redis, 5, &[(&id, "a")]).await;
    let app = Recorder::default();
    let member = Member::start_with(options(&redis, port), app.clone())
        .await
        .unwrap();
    let _pinger = Pinger::start(&id);
    app.wait("a acquired", |e| e.call == Call::Acquired).await;

    write_table(&redis, 3, &[(&id, "x")]).await;
    // Several polls (every 100 ms) and the notification: nothing moves.
    tokio::time::sleep(Duration::from_millis(600)).await;
    let a = member.assignment().borrow().clone();
    assert_eq!(a.units, ["a"]);
    assert_eq!(a.generation, 5);
    assert_eq!(app.events().len(), 1, "{:?}", app.events());
    assert_eq!(report(&redis, &id).await.unwrap().applied, 5);

    write_table(&redis, 8, &[(&id, "a,y")]).await;
    let y = app.wait("y acquired", |e| e.unit == "y").await;
    assert_eq!(y.token, FencingToken(8));
    // Generation 8 only added a unit, but it follows tables the member did
    // not process (6 and 7, and the ignored 3), which may have given it
    // units and taken them again: it is acknowledged, before y starts.
    assert_eq!(report(&redis, &id).await.unwrap().applied, 8);
    assert!(app.find(&Call::Acquired, "x").is_none());
    // The next one in turn that only adds a unit needs no report.
    write_table(&redis, 9, &[(&id, "a,y,z")]).await;
    app.wait("z acquired", |e| e.unit == "z").await;
    assert_eq!(report(&redis, &id).await.unwrap().applied, 8);
    member.shutdown().await;
}

/// A member that starts while `{T}:meta` has no generation (lost with
/// Redis' data, or removed by hand) starts nothing: a unit's fencing token
/// is the generation it is started at, and a missing one is unknown, not 0
/// (which would be below the previous owner's token). Its units start once
/// a read shows the generation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_generation_starts_nothing() {
    let redis = RedisServer::start();
    let port = free_port();
    let id = format!("127.0.0.1:{port}");
    write_table(&redis, 5, &[(&id, "a,b")]).await;
    let _: i64 = redis.cmd(&["HDEL", &keys().meta, "generation"]).await;
    let app = Recorder::default();
    let member = Member::start_with(options(&redis, port), app.clone())
        .await
        .unwrap();
    let _pinger = Pinger::start(&id);
    // Its reads follow the row (in the table), pings come, and still
    // nothing starts: the generation, the token, is unknown.
    let mut rx = member.assignment();
    wait_for("the row read", Duration::from_secs(5), || {
        let a = rx.borrow_and_update().clone();
        async move { a.in_table }
    })
    .await;
    let reads = exec_calls(&redis).await;
    wait_for("three more reads", Duration::from_secs(10), || async {
        exec_calls(&redis).await >= reads + 3
    })
    .await;
    assert!(
        app.events().is_empty(),
        "started without a generation: {:?}",
        app.events()
    );
    assert!(member.assignment().borrow().units.is_empty());

    let _: i64 = redis.cmd(&["HSET", &keys().meta, "generation", "6"]).await;
    let a = app
        .wait("a acquired", |e| e.call == Call::Acquired && e.unit == "a")
        .await;
    assert_eq!(a.token, FencingToken(6));
    member.shutdown().await;
}

/// Redis lost writes (its data, or a lagging replica was promoted) and
/// serves a table numbered below what the member processed: its rows may
/// give the member units the lost writes gave others, so the member ignores
/// it, whatever it holds, and the holds its reads no longer refresh end.
/// It goes on once the holder, reading its report, writes the table again
/// numbered above it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_ignores_a_lower_generation_until_one_above_comes() {
    let redis = RedisServer::start();
    let port = free_port();
    let id = format!("127.0.0.1:{port}");
    write_table(&redis, 50, &[(&id, "a,b")]).await;
    let app = Recorder::default();
    let member = Member::start_with(options(&redis, port), app.clone())
        .await
        .unwrap();
    let _pinger = Pinger::start(&id);
    app.wait("b acquired", |e| e.call == Call::Acquired && e.unit == "b")
        .await;
    wait_report(&redis, &id, 50, false).await;

    let renumbered = Instant::now();
    write_table(&redis, 3, &[(&id, "a,c")]).await;
    // The old tenures end by their holds (within the deadline and a
    // generous margin); nothing starts from generation 3.
    for u in ["a", "b"] {
        let ended = app
            .wait(&format!("{u}'s old tenure ended"), |e| {
                is_fenced(&e.call) && e.unit == u && e.token == FencingToken(50)
            })
            .await;
        assert!(ended.at >= renumbered);
    }
    // Its reads of generation 3 keep coming (every poll, each a MULTI/EXEC):
    // several more, and none acquires.
    let reads = exec_calls(&redis).await;
    wait_for("three more reads", Duration::from_secs(10), || async {
        exec_calls(&redis).await >= reads + 3
    })
    .await;
    assert!(
        app.find_where(|e| e.call == Call::Acquired && e.token == FencingToken(3))
            .is_none(),
        "acquired from the lower generation: {:?}",
        app.events()
    );
    assert_eq!(
        report(&redis, &id).await.unwrap().applied,
        50,
        "reports never go back"
    );
    assert_eq!(member.assignment().borrow().generation, 50);

    // The holder writes above it: the member goes on.
    write_table(&redis, 51, &[(&id, "a,c")]).await;
    let c = app
        .wait("c acquired", |e| e.call == Call::Acquired && e.unit == "c")
        .await;
    assert_eq!(c.token, FencingToken(51));
    app.wait("a acquired again", |e| {
        e.call == Call::Acquired && e.unit == "a" && e.token == FencingToken(51)
    })
    .await;
    wait_report(&redis, &id, 51, false).await;
    member.shutdown().await;
}

/// How many `EXEC`s Redis ran (a member's row read is one).
async fn exec_calls(redis: &RedisServer) -> u64 {
    let stats: String = redis.cmd(&["INFO", "commandstats"]).await;
    stats
        .lines()
        .find_map(|l| l.strip_prefix("cmdstat_exec:calls="))
        .and_then(|rest| rest.split(',').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// A generation that only adds units to the member's row needs no
/// acknowledgement: the member acquires them, and neither writes a report
/// nor publishes `{T}:acked` (every report costs the holder a cycle).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_generation_that_only_adds_units_writes_no_report() {
    use futures::StreamExt as _;
    let redis = RedisServer::start();
    let port = free_port();
    let id = format!("127.0.0.1:{port}");
    write_table(&redis, 5, &[(&id, "a")]).await;
    let app = Recorder::default();
    let member = Member::start_with(options(&redis, port), app.clone())
        .await
        .unwrap();
    let _pinger = Pinger::start(&id);
    app.wait("a acquired", |e| e.call == Call::Acquired).await;
    wait_report(&redis, &id, 5, false).await;
    let mut pubsub = redis::Client::open(redis.url())
        .unwrap()
        .get_async_pubsub()
        .await
        .unwrap();
    pubsub.subscribe(&keys().acked_channel).await.unwrap();
    let mut acked = pubsub.into_on_message();

    write_table(&redis, 6, &[(&id, "a,b")]).await;
    let b = app
        .wait("b acquired", |e| e.call == Call::Acquired && e.unit == "b")
        .await;
    assert_eq!(b.token, FencingToken(6));
    // A report would have been published before b was acquired; give a
    // late one a few more reads (every 100 ms) to show up.
    let published = tokio::time::timeout(Duration::from_millis(500), acked.next()).await;
    assert!(
        published.is_err(),
        "published {:?}",
        published.map(|m| m.map(|m| m.get_payload::<String>()))
    );
    assert_eq!(report(&redis, &id).await.unwrap().applied, 5);
    assert_eq!(member.assignment().borrow().generation, 6);
    member.shutdown().await;
}

/// The member reads its row on one connection and names it in its report
/// (the holder may ask Redis whether it still exists); when Redis closes it,
/// the member reconnects, and its reads on the new connection extend no
/// hold until a report names that one: it writes that report at once and
/// keeps its units throughout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_names_its_new_connection_before_its_reads_extend_a_hold() {
    let redis = RedisServer::start();
    let port = free_port();
    let id = format!("127.0.0.1:{port}");
    write_table(&redis, 5, &[(&id, "a,b")]).await;
    let app = Recorder::default();
    let member = Member::start_with(options(&redis, port), app.clone())
        .await
        .unwrap();
    let _pinger = Pinger::start(&id);
    app.wait("b acquired", |e| e.call == Call::Acquired && e.unit == "b")
        .await;
    let first = report(&redis, &id).await.unwrap().client;
    let c1 = first.expect("the report names the member's connection");
    assert!(connected(&redis, c1).await);
    let hold = member.hold("a").unwrap();

    let killed_at = Instant::now();
    let killed: i64 = redis
        .cmd(&["CLIENT", "KILL", "ID", &c1.client.to_string()])
        .await;
    assert_eq!(killed, 1);
    let named = || async { report(&redis, &id).await.and_then(|r| r.client) };
    wait_for(
        "a report naming a new connection",
        Duration::from_secs(5),
        || async { named().await.is_some_and(|c| c != c1) },
    )
    .await;
    let c2 = named().await.unwrap();
    assert!(
        connected(&redis, c2).await,
        "{c2:?} is not a live connection"
    );
    assert!(!connected(&redis, c1).await);
    // Reads on the new connection extend the hold again: past what the
    // reads before the kill could give.
    wait_for(
        "the hold extended by a later read",
        Duration::from_secs(5),
        || {
            let ends = hold.ends();
            async move { ends.is_some_and(|e| e > killed_at + DEADLINE) }
        },
    )
    .await;
    assert_eq!(hold.check(), Ok(FencingToken(5)));
    // And they are processed: a new unit comes.
    write_table(&redis, 6, &[(&id, "a,b,c")]).await;
    app.wait("c acquired", |e| e.call == Call::Acquired && e.unit == "c")
        .await;
    let revoked: Vec<Event> = app
        .events()
        .into_iter()
        .filter(|e| e.call != Call::Acquired)
        .collect();
    assert!(revoked.is_empty(), "units were revoked: {revoked:?}");
    assert_eq!(report(&redis, &id).await.unwrap().client, Some(c2));
    member.shutdown().await;
}

/// A member whose Redis user may not run `CLIENT` (an ACL without
/// `client|id`): its first row read is refused for that, it reads without
/// the client id from then on (asking once: Redis logs one refusal), and it
/// follows its row and reports as ever, naming no connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_whose_user_may_not_run_client_follows_its_row_and_reports_no_connection() {
    use crate::security::{ADMIN_PASSWORD, PASSWORD, create_acl_user_with};
    let redis = RedisServer::start_with(&["--requirepass", ADMIN_PASSWORD]);
    create_acl_user_with(&redis, "+llen +memory|usage +watch +unwatch").await;
    let port = free_port();
    let id = format!("127.0.0.1:{port}");
    let mut opts = options(&redis, port);
    opts.redis_url = format!("redis://distributor:{PASSWORD}@127.0.0.1:{}", redis.port());
    write_table(&redis, 5, &[(&id, "a")]).await;
    let app = Recorder::default();
    let member = Member::start_with(opts, app.clone()).await.unwrap();
    let _pinger = Pinger::start(&id);
    app.wait("a acquired", |e| e.call == Call::Acquired).await;
    wait_report(&redis, &id, 5, false).await;
    assert_eq!(report(&redis, &id).await.unwrap().client, None);

    write_table(&redis, 6, &[(&id, "b")]).await;
    app.wait("a revoked", |e| e.call == Call::Revoked(Revocation::Moved))
        .await;
    let b = app.wait("b acquired", |e| e.unit == "b").await;
    assert_eq!(b.token, FencingToken(6));
    wait_report(&redis, &id, 6, false).await;
    assert_eq!(report(&redis, &id).await.unwrap().client, None);
    wait_for("listed", Duration::from_secs(5), || listed(&redis, &id)).await;
    // Many reads since; `CLIENT ID` was asked once.
    assert_eq!(acl_refusals(&redis, "client|id").await, [1]);
    member.shutdown().await;
}

/// How many times Redis refused `object` to a user, by `ACL LOG` entry.
async fn acl_refusals(redis: &RedisServer, object: &str) -> Vec<i64> {
    let log: Vec<Vec<redis::Value>> = redis.cmd(&["ACL", "LOG"]).await;
    let field = |entry: &[redis::Value], name: &str| {
        entry.chunks(2).find_map(|kv| match kv {
            [redis::Value::BulkString(k), v] if k == name.as_bytes() => Some(v.clone()),
            _ => None,
        })
    };
    log.iter()
        .filter(|e| {
            field(e, "object") == Some(redis::Value::BulkString(object.as_bytes().to_vec()))
        })
        .filter_map(|e| match field(e, "count") {
            Some(redis::Value::Int(n)) => Some(n),
            _ => None,
        })
        .collect()
}

/// A Redis user that may run `CLIENT` but not `INFO` (an ACL written for an
/// older version): the member's first row read is refused for `INFO`, and
/// from then on its reports name its connection by client id alone, as
/// older members did. The holder, refused `INFO` too, looks for a named
/// connection by its id alone, whatever server the report names.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_info_a_member_names_its_connection_by_client_id_alone() {
    use crate::security::{ADMIN_PASSWORD, PASSWORD, create_acl_user_with};
    let redis = RedisServer::start_with(&["--requirepass", ADMIN_PASSWORD]);
    create_acl_user_with(
        &redis,
        "+llen +memory|usage +watch +unwatch +client|id +client|list",
    )
    .await;
    let url = format!("redis://distributor:{PASSWORD}@127.0.0.1:{}", redis.port());
    let port = free_port();
    let id = format!("127.0.0.1:{port}");
    let mut opts = options(&redis, port);
    opts.redis_url = url.clone();
    write_table(&redis, 5, &[(&id, "a")]).await;
    let app = Recorder::default();
    let member = Member::start_with(opts, app.clone()).await.unwrap();
    let _pinger = Pinger::start(&id);
    app.wait("a acquired", |e| e.call == Call::Acquired).await;
    write_table(&redis, 6, &[(&id, "b")]).await;
    app.wait("b acquired", |e| e.unit == "b").await;
    wait_report(&redis, &id, 6, false).await;
    let named = report(&redis, &id)
        .await
        .unwrap()
        .client
        .expect("a client id");
    assert_eq!(named.server, None, "no run id without INFO");
    let list: String = redis
        .cmd(&["CLIENT", "LIST", "ID", &named.client.to_string()])
        .await;
    assert!(!list.trim().is_empty(), "the named connection lives");
    assert_eq!(acl_refusals(&redis, "info").await, [1], "INFO asked once");

    let holder =
        distributor::edge::redis::Store::open(&url, TABLE, Duration::from_secs(2)).unwrap();
    let elsewhere = RedisConnection::on(
        named.client,
        distributor::core::handoff::RunId::parse(&"f".repeat(40)).unwrap(),
    );
    assert_eq!(
        holder
            .member_disconnected("gone", &[elsewhere])
            .await
            .unwrap(),
        Some(false),
        "without the server's run id, a live id is taken as the connection"
    );
    assert_eq!(
        holder
            .member_disconnected("gone", &[RedisConnection::id(u64::from(u32::MAX))])
            .await
            .unwrap(),
        Some(true)
    );
    assert_eq!(
        acl_refusals(&redis, "info").await,
        [2],
        "the holder asked once"
    );
    assert_eq!(
        holder.member_disconnected(&id, &[]).await.unwrap(),
        Some(false),
        "the member's own report"
    );
    assert_eq!(acl_refusals(&redis, "info").await, [2]);
    member.shutdown().await;
}

/// An application whose runtime ended before it dropped its `Member` (the
/// member's task died with that runtime): the drop ends every hold at once
/// and deregisters (out of its list, its report removed), bounded, on a
/// thread of its own.
#[test]
fn dropping_a_member_after_its_runtime_ends_deregisters_it_and_ends_its_holds() {
    let redis = RedisServer::start();
    let checks = tokio::runtime::Runtime::new().unwrap();
    let port = free_port();
    let id = format!("127.0.0.1:{port}");
    let mut opts = options(&redis, port);
    // Far longer than the test: only the drop can end the hold.
    opts.deadline = Duration::from_secs(60);
    opts.poll_interval = Duration::from_millis(100);
    checks.block_on(write_table(&redis, 5, &[(&id, "a")]));
    let application = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let (member, hold) = application.block_on(async {
        let member = Member::start(opts).await.unwrap();
        let _pinger = Pinger::start(&id);
        wait_for("a held", Duration::from_secs(5), || {
            let held = member.holds("a").is_some();
            async move { held }
        })
        .await;
        wait_for("listed", Duration::from_secs(5), || listed(&redis, &id)).await;
        wait_report(&redis, &id, 5, false).await;
        let hold = member.hold("a").unwrap();
        (member, hold)
    });
    drop(application);
    assert_eq!(hold.check(), Ok(FencingToken(5)), "held until the drop");

    let dropped = std::time::Instant::now();
    drop(member);
    assert!(hold.check().is_err(), "the hold ended with the drop");
    assert!(dropped.elapsed() < Duration::from_secs(5));
    checks.block_on(async {
        assert!(!listed(&redis, &id).await, "still listed");
        assert_eq!(report(&redis, &id).await, None);
    });
}

/// Pings stop (the holder is gone or cut off): the hold ends a deadline
/// after the last ping received, the units are revoked as fenced at that
/// instant, the health service says NOT_SERVING; pings again (with reads
/// going on) bring the units back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_pings_the_member_fences_itself_at_the_deadline() {
    let redis = RedisServer::start();
    let port = free_port();
    let id = format!("127.0.0.1:{port}");
    write_table(&redis, 5, &[(&id, "a,b")]).await;
    let app = Recorder::default();
    let member = Member::start_with(options(&redis, port), app.clone())
        .await
        .unwrap();
    let pinger = Pinger::start(&id);
    app.wait("b acquired", |e| e.unit == "b").await;
    assert_eq!(health(&id).await, SERVING);

    let last = pinger.pause().await.unwrap();
    assert_eq!(last.answer, Ok(()));
    let fenced = app
        .wait("fenced", |e| {
            matches!(e.call, Call::RevokeStarted(Revocation::Fenced { .. }))
        })
        .await;
    let Call::RevokeStarted(Revocation::Fenced { ended }) = fenced.call else {
        unreachable!()
    };
    // The last ping was received between its send and its answer.
    assert!(
        ended >= last.sent + DEADLINE && ended <= last.done + DEADLINE,
        "hold ended {:?} after the last ping's send (deadline {DEADLINE:?})",
        ended - last.sent
    );
    assert!(
        fenced.at - ended < Duration::from_millis(200),
        "revoked late"
    );
    wait_for("both fenced", Duration::from_secs(2), || {
        let n = app.events().iter().filter(|e| is_fenced(&e.call)).count();
        async move { n == 4 }
    })
    .await;
    let a = member.assignment().borrow().clone();
    assert!(a.fenced && a.units.is_empty(), "{a:?}");
    assert_eq!(member.holds("a"), None);
    assert_eq!(health(&id).await, NOT_SERVING);
    // Nothing revoked by the table: the report stays.
    assert_eq!(report(&redis, &id).await.unwrap().applied, 5);

    pinger.resume();
    let back = app
        .wait("a acquired again", |e| {
            e.call == Call::Acquired && e.unit == "a" && e.at > fenced.at
        })
        .await;
    assert_eq!(back.token, FencingToken(5), "same table, same token");
    wait_for("serving again", Duration::from_secs(5), || async {
        health(&id).await == SERVING
    })
    .await;
    assert!(!member.assignment().borrow().fenced);
    member.shutdown().await;
}

/// Redis stops answering (its process is stopped: connections hang, as in a
/// partition): no read succeeds, the units are revoked as fenced a deadline
/// after the last read, and pings are answered UNAVAILABLE until Redis
/// answers again; then the units come back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_reads_the_member_fences_itself_and_answers_pings_unavailable() {
    let redis = RedisServer::start();
    let info: String = redis.cmd(&["INFO", "server"]).await;
    let redis_pid: u32 = info
        .lines()
        .find_map(|l| l.strip_prefix("process_id:"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let port = free_port();
    let id = format!("127.0.0.1:{port}");
    write_table(&redis, 5, &[(&id, "a,b")]).await;
    let app = Recorder::default();
    let member = Member::start_with(options(&redis, port), app.clone())
        .await
        .unwrap();
    let pinger = Pinger::start(&id);
    app.wait("b acquired", |e| e.unit == "b").await;

    let cut = Instant::now();
    signal(redis_pid, "-STOP");
    let resume = Continue(redis_pid);
    let fenced = app
        .wait("fenced", |e| {
            matches!(e.call, Call::RevokeStarted(Revocation::Fenced { .. }))
        })
        .await;
    let Call::RevokeStarted(Revocation::Fenced { ended }) = fenced.call else {
        unreachable!()
    };
    // The last read was sent at most one poll (100 ms) before the cut.
    assert!(
        ended <= cut + DEADLINE && ended + Duration::from_millis(300) >= cut + DEADLINE,
        "hold ended {:?} after the cut",
        ended - cut
    );
    wait_for(
        "pings answered UNAVAILABLE",
        Duration::from_secs(3),
        || {
            let p = pinger.last();
            async move { p.is_some_and(|p| p.sent > ended && p.answer == Err(tonic::Code::Unavailable)) }
        },
    )
    .await;
    assert!(member.assignment().borrow().fenced);
    assert_eq!(health(&id).await, NOT_SERVING);

    drop(resume);
    let back = app
        .wait("acquired again", |e| {
            e.call == Call::Acquired && e.unit == "a" && e.at > fenced.at
        })
        .await;
    assert_eq!(back.token, FencingToken(5));
    wait_for("pings answered OK", Duration::from_secs(5), || {
        let p = pinger.last();
        async move { p.is_some_and(|p| p.answer.is_ok()) }
    })
    .await;
    member.shutdown().await;
}

/// Continues a stopped process when dropped, even if the test fails.
struct Continue(u32);

impl Drop for Continue {
    fn drop(&mut self) {
        signal(self.0, "-CONT");
    }
}

/// A drain no holder completes: `draining` is reported, then after the drain
/// timeout every unit is stopped (reason shutdown) and the member
/// deregisters.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drain_that_times_out_stops_every_unit_and_deregisters() {
    let redis = RedisServer::start();
    let port = free_port();
    let id = format!("127.0.0.1:{port}");
    let mut opts = options(&redis, port);
    opts.deadline = Duration::from_secs(3);
    opts.drain_timeout = Duration::from_secs(1);
    write_table(&redis, 5, &[(&id, "a,b")]).await;
    let app = Recorder::default();
    let member = Member::start_with(opts, app.clone()).await.unwrap();
    let _pinger = Pinger::start(&id);
    app.wait("b acquired", |e| e.unit == "b").await;
    wait_for("listed", Duration::from_secs(5), || listed(&redis, &id)).await;

    let started = Instant::now();
    let drain = tokio::spawn(member.drain());
    wait_report(&redis, &id, 5, true).await;
    assert_eq!(drain.await.unwrap(), Drained::TimedOut);
    let took = started.elapsed();
    assert!(
        took >= Duration::from_secs(1) && took < Duration::from_secs(3),
        "{took:?}"
    );
    for u in ["a", "b"] {
        assert!(
            app.find(&Call::Revoked(Revocation::Shutdown), u).is_some(),
            "{:?}",
            app.events()
        );
    }
    assert!(!listed(&redis, &id).await);
    assert_eq!(report(&redis, &id).await, None);
}

/// A drained member leaves only once the holder no longer waits on it: its
/// row is empty at a generation it reported, and no unit in transit names
/// it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drain_waits_for_the_holder_to_release_units_in_transit() {
    let redis = RedisServer::start();
    let port = free_port();
    let id = format!("127.0.0.1:{port}");
    let mut opts = options(&redis, port);
    opts.deadline = Duration::from_secs(5);
    write_table(&redis, 5, &[(&id, "a")]).await;
    let app = Recorder::default();
    let member = Member::start_with(opts, app.clone()).await.unwrap();
    let _pinger = Pinger::start(&id);
    app.wait("a acquired", |e| e.unit == "a").await;
    wait_for("listed", Duration::from_secs(5), || listed(&redis, &id)).await;

    let drain = tokio::spawn(member.drain());
    wait_report(&redis, &id, 5, true).await;
    // The holder revokes `a` (in transit from this member) and empties the row.
    let field = distributor::core::handoff::transit_field(SERVICES, "a");
    let () = redis
        .cmd(&["HSET", &keys().transit, &field, &format!("6 0 - {id}")])
        .await;
    write_table(&redis, 6, &[(&id, "")]).await;
    app.wait("a revoked", |e| {
        e.call == Call::Revoked(Revocation::Draining)
    })
    .await;
    wait_report(&redis, &id, 6, true).await;
    // Several reads later it is still listed: the holder still waits on it.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(listed(&redis, &id).await);
    assert!(!drain.is_finished());

    // The holder takes the acknowledgement and releases `a`.
    let () = redis.cmd(&["HDEL", &keys().transit, &field]).await;
    write_table(&redis, 7, &[(&id, "")]).await;
    let drained = tokio::time::timeout(Duration::from_secs(5), drain)
        .await
        .expect("the drain completes")
        .unwrap();
    assert_eq!(drained, Drained::HandedOver);
    assert!(!listed(&redis, &id).await);
    assert_eq!(report(&redis, &id).await, None);
}

// ---------------------------------------------------------------------------
// `examples/worker --events` processes (built by the kit's `example_worker`).

/// One line of `--events` output.
#[derive(Debug, Clone)]
struct Line {
    event: String,
    unit: String,
    member: String,
    generation: u64,
    unix_us: u128,
    reason: Option<String>,
}

/// Parses a line; panics unless it is exactly one event object.
fn parse(line: &str) -> Line {
    let v: serde_json::Value =
        serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line:?}"));
    let o = v
        .as_object()
        .unwrap_or_else(|| panic!("not an object: {line:?}"));
    let event = o["event"].as_str().unwrap().to_string();
    let mut keys: Vec<&str> = o.keys().map(String::as_str).collect();
    keys.sort();
    let want: &[&str] = match event.as_str() {
        "acquired" => &["event", "generation", "member", "unit", "unix_us"],
        "released" => &["event", "generation", "member", "reason", "unit", "unix_us"],
        other => panic!("unknown event {other:?}: {line:?}"),
    };
    assert_eq!(keys, want, "{line:?}");
    Line {
        event,
        unit: o["unit"].as_str().unwrap().to_string(),
        member: o["member"].as_str().unwrap().to_string(),
        generation: o["generation"].as_u64().unwrap(),
        unix_us: u128::from(o["unix_us"].as_u64().unwrap()),
        reason: o.get("reason").map(|r| r.as_str().unwrap().to_string()),
    }
}

/// A worker process with `--events`; its stdout is parsed line by line
/// (every line must be an event), its stderr kept in a file.
struct WorkerProcess {
    child: Child,
    id: String,
    lines: Arc<Mutex<Vec<Line>>>,
    log: std::path::PathBuf,
}

impl WorkerProcess {
    fn start(redis: &RedisServer, deadline: &str, extra: &[&str]) -> WorkerProcess {
        let port = free_port();
        let id = format!("127.0.0.1:{port}");
        let log = std::env::temp_dir().join(format!("member-handoff-{port}.log"));
        let mut child = Command::new(example_worker())
            .args(["--events", "--listen", &id, "--redis-url", &redis.url()])
            .args(["--services-key", SERVICES, "--table", TABLE])
            .args(["--deadline", deadline, "--poll-interval", "100ms"])
            .args(extra)
            .env("RUST_LOG", "info")
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let lines = Arc::new(Mutex::new(Vec::new()));
        {
            let lines = lines.clone();
            std::thread::spawn(move || {
                for line in std::io::BufReader::new(stdout).lines() {
                    let Ok(line) = line else { return };
                    lines.lock().unwrap().push(parse(&line));
                }
            });
        }
        WorkerProcess {
            child,
            id,
            lines,
            log,
        }
    }

    fn lines(&self) -> Vec<Line> {
        self.lines.lock().unwrap().clone()
    }

    async fn wait_lines(&self, what: &str, f: impl Fn(&[Line]) -> bool) -> Vec<Line> {
        let ok = wait_until(Duration::from_secs(8), Duration::from_millis(20), || {
            let ok = f(&self.lines());
            async move { ok }
        })
        .await;
        assert!(
            ok,
            "timed out waiting for: {what}\nevents {:#?}\nstderr:\n{}",
            self.lines(),
            std::fs::read_to_string(&self.log).unwrap_or_default()
        );
        self.lines()
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for WorkerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.log);
    }
}

fn has(lines: &[Line], event: &str, unit: &str, reason: Option<&str>) -> bool {
    lines
        .iter()
        .any(|l| l.event == event && l.unit == unit && l.reason.as_deref() == reason)
}

/// A worker stopped (SIGSTOP) past its deadline: on SIGCONT its first events
/// release every unit as fenced, stamped with the instant its hold ended
/// (while it was frozen); only then are the units acquired again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_worker_releases_its_units_at_the_end_of_its_hold() {
    let redis = RedisServer::start();
    let w = WorkerProcess::start(&redis, "1s", &[]);
    write_table(&redis, 4, &[(&w.id, "a,b")]).await;
    let _pinger = Pinger::start(&w.id);
    let before = w
        .wait_lines("a and b acquired", |l| {
            has(l, "acquired", "a", None) && has(l, "acquired", "b", None)
        })
        .await;
    assert!(before.iter().all(|l| l.generation == 4 && l.member == w.id));

    let stopped_us = unix_us();
    signal(w.pid(), "-STOP");
    let resume = Continue(w.pid());
    // The pause itself: 2.5 deadlines.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let continued_us = unix_us();
    drop(resume);

    let lines = w
        .wait_lines("a and b acquired again", |l| {
            l.len() >= before.len() + 4 && has(&l[before.len()..], "acquired", "b", None)
        })
        .await;
    let after = &lines[before.len()..];
    // First the releases, then the acquisitions.
    assert_eq!(
        after.iter().map(|l| l.event.as_str()).collect::<Vec<_>>()[..4],
        ["released", "released", "acquired", "acquired"],
        "{after:#?}"
    );
    for l in &after[..2] {
        assert_eq!(l.reason.as_deref(), Some("fenced"));
        assert_eq!(l.generation, 4);
        // The hold ended a deadline after the last read or ping before the
        // pause (at most one poll or ping interval, 100 ms, before it).
        let deadline_us = DEADLINE.as_micros();
        assert!(
            l.unix_us <= stopped_us + deadline_us
                && l.unix_us + 250_000 >= stopped_us + deadline_us,
            "released at {} µs after the stop",
            l.unix_us as i128 - stopped_us as i128
        );
        assert!(l.unix_us < continued_us, "the hold ended while frozen");
    }
    for l in &after[2..4] {
        assert!(l.unix_us >= continued_us, "acquired before the pause ended");
        assert_eq!(l.generation, 4, "same table, same token");
    }
}

/// SIGTERM drains: `draining` reported, the units released (after their
/// slow stop) once the holder empties the row, the report of that
/// generation written only after the releases, then the member leaves its
/// list and `{T}:members` and exits 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_drains_the_worker_through_the_holder() {
    let redis = RedisServer::start();
    let w = WorkerProcess::start(&redis, "3s", &["--work-ms", "300"]);
    write_table(&redis, 4, &[(&w.id, "a,b")]).await;
    let _pinger = Pinger::start(&w.id);
    w.wait_lines("a and b acquired", |l| {
        has(l, "acquired", "a", None) && has(l, "acquired", "b", None)
    })
    .await;
    wait_for("listed", Duration::from_secs(5), || listed(&redis, &w.id)).await;

    signal(w.pid(), "-TERM");
    wait_report(&redis, &w.id, 4, true).await;
    let r = report(&redis, &w.id).await.unwrap();
    assert_eq!((r.deadline, r.weight), (Duration::from_secs(3), 1));
    // Draining: the holder gives it an empty row.
    write_table(&redis, 5, &[(&w.id, "")]).await;
    let mut seen_5 = None;
    let deadline = Instant::now() + Duration::from_secs(5);
    while seen_5.is_none() {
        assert!(Instant::now() < deadline, "generation 5 never reported");
        match report(&redis, &w.id).await {
            Some(r) if r.applied == 5 => seen_5 = Some(unix_us()),
            // Reported and already gone: too fast to see; still fine.
            None => seen_5 = Some(unix_us()),
            _ => {}
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let status = tokio::task::spawn_blocking(move || {
        let mut w = w;
        let status = w.child.wait().unwrap();
        (status, w)
    });
    let (status, w) = tokio::time::timeout(Duration::from_secs(10), status)
        .await
        .expect("the worker exits")
        .unwrap();
    assert!(status.success(), "{status:?}");
    let lines = w.lines();
    for u in ["a", "b"] {
        let released = lines
            .iter()
            .find(|l| l.event == "released" && l.unit == u)
            .unwrap_or_else(|| panic!("{u} not released: {lines:#?}"));
        assert_eq!(released.reason.as_deref(), Some("draining"));
        assert_eq!(released.generation, 4);
        assert!(
            released.unix_us <= seen_5.unwrap(),
            "generation 5 reported before {u} was released"
        );
    }
    assert_eq!(lines.len(), 4, "{lines:#?}");
    assert!(!listed(&redis, &w.id).await);
    assert_eq!(report(&redis, &w.id).await, None);
}
