//! The real binary: flags, signals, and failover between OS processes.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::support::*;

fn daemon(redis: &RedisServer, replica: &str, http_port: u16) -> Child {
    Command::new(env!("CARGO_BIN_EXE_distributor"))
        .args([
            &format!("-redis-url={}", redis.url()),
            &format!("-services-namespaces={SERVICES}"),
            "-workunits-namespace",
            UNITS,
            &format!("--distribution-namespace={TABLE}"),
            "-poll-interval=100ms",
            "-ping-timeout=250ms",
            "-lease-ttl=1s",
            "-lease-renew-interval=200ms",
            "-lease-renew-deadline=700ms",
            "-lease-retry-interval=300ms",
            "-census-interval=500ms",
            &format!("-replica-id={replica}"),
        ])
        .arg(format!("-http-addr=127.0.0.1:{http_port}"))
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

fn signal(child: &Child, sig: &str) {
    let ok = Command::new("kill")
        .args([sig, &child.id().to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok);
}

async fn holder(redis: &RedisServer) -> Option<String> {
    let h: Option<String> = redis.cmd(&["HGET", &keys().meta, "holder"]).await;
    h.filter(|h| !h.is_empty())
}

async fn epoch(redis: &RedisServer) -> u64 {
    let e: Option<u64> = redis.cmd(&["GET", &keys().epoch]).await;
    e.unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_hands_over_and_sigkill_fails_over_between_processes() {
    let mut fleet = Fleet::new(RedisServer::start());
    let units = units(30);
    fleet.set_units(&units).await;
    for _ in 0..3 {
        fleet.add_member().await;
    }
    let ports: Vec<u16> = (0..3).map(|_| free_port()).collect();
    let mut children: Vec<(String, Child)> = (0..3)
        .map(|i| {
            (
                format!("p{i}"),
                daemon(&fleet.redis, &format!("p{i}"), ports[i]),
            )
        })
        .collect();
    let before = fleet.wait_for_table(&units, Duration::from_secs(15)).await;
    let generation = fleet.generation().await;

    // Every replica reports itself on /metrics; exactly the holder says holder=1.
    let first = holder(&fleet.redis).await.unwrap();
    let port_of = |name: &str| ports[name[1..].parse::<usize>().unwrap()];
    assert_eq!(holder_gauges(&ports).await, names_to_gauges(&first));
    let (code, body) = http_get(port_of(&first), "/version").await.unwrap();
    assert_eq!(code, 200);
    assert!(body.contains(env!("CARGO_PKG_VERSION")), "{body}");
    assert_eq!(http_get(port_of(&first), "/healthz").await.unwrap().0, 200);
    wait_for("ready", Duration::from_secs(10), || async {
        http_get(port_of(&first), "/readyz")
            .await
            .is_ok_and(|(c, _)| c == 200)
    })
    .await;
    let samples = parse_metrics(&http_get(port_of(&first), "/metrics").await.unwrap().1);
    assert_eq!(
        metric(
            &samples,
            "distributor_members",
            &[("group", SERVICES), ("state", "live")]
        ),
        Some(3.0)
    );
    assert_eq!(metric(&samples, "distributor_work_units", &[]), Some(30.0));
    assert!(metric(&samples, "distributor_table_writes_total", &[]).unwrap() >= 1.0);
    assert!(metric(&samples, "distributor_ping_duration_seconds_count", &[]).unwrap() >= 3.0);
    assert_eq!(
        metric(
            &samples,
            "distributor_lease_transitions_total",
            &[("transition", "acquired")]
        ),
        Some(1.0)
    );

    // SIGTERM: the holder releases; a standby takes over by notification.
    let e1 = epoch(&fleet.redis).await;
    let idx = children.iter().position(|(n, _)| *n == first).unwrap();
    let (_, mut child) = children.remove(idx);
    let started = std::time::Instant::now();
    signal(&child, "-TERM");
    let status = child.wait().unwrap();
    assert!(status.success(), "clean exit on SIGTERM: {status:?}");
    wait_for("takeover after SIGTERM", Duration::from_secs(5), || async {
        epoch(&fleet.redis).await > e1 && holder(&fleet.redis).await.is_some_and(|h| h != first)
    })
    .await;
    eprintln!("SIGTERM handover: {:?} (ttl 1s)", started.elapsed());
    // The gauge moves to the new holder.
    let live_ports: Vec<u16> = children.iter().map(|(n, _)| port_of(n)).collect();
    let now_holder = holder(&fleet.redis).await.unwrap();
    wait_for(
        "holder gauge follows the lease",
        Duration::from_secs(5),
        || async {
            holder_gauges(&live_ports).await
                == children
                    .iter()
                    .map(|(n, _)| u8::from(*n == now_holder))
                    .collect::<Vec<_>>()
        },
    )
    .await;

    // SIGKILL: nothing released, but Redis closes the holder's connections: a
    // standby takes over as soon as it sees the lease connection gone
    // (`takeover.rs` shows it is well before the TTL).
    let second = holder(&fleet.redis).await.unwrap();
    let e2 = epoch(&fleet.redis).await;
    let idx = children.iter().position(|(n, _)| *n == second).unwrap();
    let (_, mut child) = children.remove(idx);
    let started = std::time::Instant::now();
    signal(&child, "-KILL");
    child.wait().unwrap();
    wait_for(
        "takeover after SIGKILL",
        Duration::from_secs(10),
        || async { epoch(&fleet.redis).await > e2 },
    )
    .await;
    eprintln!("SIGKILL failover: {:?} (ttl 1s)", started.elapsed());

    // Same members, same units: the table never changed.
    assert_eq!(fleet.table().await, before);
    assert_eq!(fleet.generation().await, generation);
    for (_, mut c) in children {
        signal(&c, "-TERM");
        c.wait().unwrap();
    }
    fleet.shutdown().await;
}

/// `distributor_holder` of each replica, in port order.
async fn holder_gauges(ports: &[u16]) -> Vec<u8> {
    let mut out = Vec::new();
    for &p in ports {
        let body = http_get(p, "/metrics")
            .await
            .map(|(_, b)| b)
            .unwrap_or_default();
        out.push(metric(&parse_metrics(&body), "distributor_holder", &[]).unwrap_or(-1.0) as u8);
    }
    out
}

fn names_to_gauges(holder: &str) -> Vec<u8> {
    (0..3)
        .map(|i| u8::from(format!("p{i}") == holder))
        .collect()
}

#[test]
fn invalid_flags_fail_at_start_naming_the_flag() {
    for (args, needle) in [
        (
            vec!["-poll-interval=fast"],
            "invalid -poll-interval (env POLL_INTERVAL) value \"fast\"",
        ),
        (
            vec!["--lease-ttl", "1s", "--lease-renew-deadline", "2s"],
            "-lease-renew-deadline",
        ),
        (vec!["-failure-threshold=0"], "-failure-threshold"),
        (vec!["-services-namespaces="], "-services-namespaces"),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_distributor"))
            .args(&args)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(needle), "{args:?}: {stderr}");
    }
    let out = Command::new(env!("CARGO_BIN_EXE_distributor"))
        .env("PING_TIMEOUT", "soon")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("PING_TIMEOUT"));
}

/// A scratch directory for one test's process logs, removed on drop.
struct LogDir(std::path::PathBuf);

impl LogDir {
    fn new(name: &str) -> LogDir {
        let dir = std::env::temp_dir().join(format!(
            "distributor-{name}-{}-{}",
            std::process::id(),
            free_port()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        LogDir(dir)
    }

    fn file(&self, name: &str) -> std::path::PathBuf {
        self.0.join(name)
    }
}

impl Drop for LogDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Daemons killed on drop, so that a failing test leaves none behind.
struct Children(Vec<Child>);

impl Drop for Children {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Starts the binary with `args` and `env`, stdout and stderr to `log`; the
/// environment that could move the HTTP server or the log level is cleared.
fn spawn_logged(args: &[String], env: &[(&str, &str)], log: &std::path::Path) -> Child {
    let out = std::fs::File::create(log).unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_distributor"));
    cmd.args(args)
        .env_remove("HTTP_ADDR")
        .env_remove("PROM_PORT")
        .env_remove("LOG")
        .env("RUST_LOG", "info")
        .stdin(Stdio::null())
        .stdout(out.try_clone().unwrap())
        .stderr(out);
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.spawn().unwrap()
}

/// Runs the binary for at most `limit` (a daemon that does not stop at start
/// is killed): its exit code (`None` when killed) and its output.
fn run_briefly(args: &[&str], env: &[(&str, &str)], limit: Duration) -> (Option<i32>, String) {
    let dir = LogDir::new("run");
    let log = dir.file("out.log");
    let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    let mut child = spawn_logged(&args, env, &log);
    let deadline = std::time::Instant::now() + limit;
    let code = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status.code();
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    (code, std::fs::read_to_string(&log).unwrap())
}

/// The address a replica's log says it serves `/metrics` on, or `None` when
/// it logged that every default port is taken; waits for either line.
async fn served_on(log: &std::path::Path) -> Option<std::net::SocketAddr> {
    let mut found = None;
    wait_for(
        "the replica logs where it serves /metrics",
        Duration::from_secs(15),
        || {
            let text = std::fs::read_to_string(log).unwrap_or_default();
            let addr = text.split("serving /metrics on ").nth(1).map(|rest| {
                rest.split_whitespace()
                    .next()
                    .unwrap()
                    .parse::<std::net::SocketAddr>()
                    .unwrap()
            });
            let none = text.contains("are all taken: running without /metrics");
            assert!(
                !text.contains('\u{1b}'),
                "a log written to a file has no colour codes: {text:?}"
            );
            found = addr;
            async move { addr.is_some() || none }
        },
    )
    .await;
    found
}

/// Three replicas with identical default flags on one host all keep running:
/// the built-in HTTP address moves to the next free port (up to 9099) and
/// says so, instead of killing the second and third. An address given
/// explicitly stays fatal when taken.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_with_default_flags_share_one_host() {
    let redis = RedisServer::start();
    // Hold 9090 while it is free, so that all three must move whatever else
    // runs on this machine; if something else holds it, the same holds.
    let held = std::net::TcpListener::bind(("0.0.0.0", 9090)).ok();
    let dir = LogDir::new("default-http");
    let args = vec![
        format!("-redis-url={}", redis.url()),
        format!("-services-namespaces={SERVICES}"),
        format!("-workunits-namespace={UNITS}"),
        format!("-distribution-namespace={TABLE}"),
    ];
    let logs: Vec<_> = (0..3).map(|i| dir.file(&format!("r{i}.log"))).collect();
    let mut children = Children(logs.iter().map(|l| spawn_logged(&args, &[], l)).collect());
    let mut ports = Vec::new();
    for (i, log) in logs.iter().enumerate() {
        let text = || std::fs::read_to_string(log).unwrap_or_default();
        match served_on(log).await {
            Some(addr) => {
                let port = addr.port();
                assert!((9090..=9099).contains(&port), "{addr}: {}", text());
                assert!(!ports.contains(&port), "two replicas on {port}");
                if port != 9090 {
                    assert!(
                        text().contains(&format!(
                            "serving /metrics on 0.0.0.0:{port} instead of the default 9090, which is taken"
                        )),
                        "replica {i}: {}",
                        text()
                    );
                }
                ports.push(port);
            }
            // Only when this machine holds every port from 9090 to 9099.
            None => eprintln!("replica {i} runs without HTTP: 9090-9099 are taken"),
        }
    }
    if held.is_some() {
        assert!(!ports.contains(&9090), "9090 is held by the test");
    }
    // All three keep running, each answering on the port it logged.
    tokio::time::sleep(Duration::from_secs(1)).await;
    for (i, c) in children.0.iter_mut().enumerate() {
        assert!(
            c.try_wait().unwrap().is_none(),
            "replica {i} exited: {}",
            std::fs::read_to_string(&logs[i]).unwrap()
        );
    }
    for &port in &ports {
        assert_eq!(http_get(port, "/healthz").await.unwrap().0, 200, "{port}");
    }

    // An explicit address that is taken stays fatal, naming its flag.
    let taken = ports.first().copied().unwrap_or(9090);
    for (flag, extra, env) in [
        ("-http-addr", format!("-http-addr=0.0.0.0:{taken}"), None),
        ("-prom-port", format!("-prom-port={taken}"), None),
        (
            "-http-addr",
            String::new(),
            Some(("HTTP_ADDR", format!("0.0.0.0:{taken}"))),
        ),
    ] {
        let mut argv: Vec<&str> = args.iter().map(String::as_str).collect();
        if !extra.is_empty() {
            argv.push(&extra);
        }
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let (code, out) = run_briefly(&argv, &env, Duration::from_secs(10));
        assert!(code.is_some_and(|c| c != 0), "{flag}: exit {code:?}: {out}");
        assert!(
            out.contains(&format!("failed to listen on 0.0.0.0:{taken} ({flag})")),
            "{flag}: {out}"
        );
    }
    for c in &children.0 {
        signal(c, "-TERM");
    }
    for c in &mut children.0 {
        assert!(c.wait().unwrap().success());
    }
    drop(held);
}

/// The values a black-box probe found accepted (or mis-reported) now stop the
/// daemon at start with exit code 2 and the usual message.
#[test]
fn probe_findings_fail_at_start_naming_the_flag() {
    for (args, needle) in [
        (
            vec!["--log", "verbose"],
            "invalid -log (env LOG) value \"verbose\": ",
        ),
        (
            vec!["--poll-interval", "-1s"],
            "invalid -poll-interval (env POLL_INTERVAL) value \"-1s\": ",
        ),
        (
            vec!["-poll-interval", "1ns"],
            "invalid -poll-interval (env POLL_INTERVAL) value \"1ns\": must be at least 10ms",
        ),
        (
            vec!["-redis-url=redis://host:99999"],
            // Malformed: nothing past its ':' shows (it might be a password).
            "invalid -redis-url (env REDIS_URL) value \"redis://host:***\": ",
        ),
        (
            vec!["-redis-url=rediss://h:1", "-redis-tls-cert=/x/c.pem"],
            "invalid -redis-tls-cert (env REDIS_TLS_CERT) value \"/x/c.pem\": -redis-tls-key is required with -redis-tls-cert",
        ),
        (
            vec!["-ping-tls-key=/x/k.pem"],
            "invalid -ping-tls-key (env PING_TLS_KEY) value \"/x/k.pem\": -ping-tls-cert is required with -ping-tls-key",
        ),
        (
            vec!["-services-namespaces=a,b", "-workunits-namespace=b"],
            "invalid -services-namespaces (env SERVICES_NAMESPACE) value \"a,b\": ",
        ),
        (
            vec!["-workunits-namespace={sys-matching-table}:lease"],
            "invalid -workunits-namespace (env WORKUNITS_NAMESPACE) value \"{sys-matching-table}:lease\": ",
        ),
        (
            vec!["-ka-time=100ms"],
            "invalid -ka-time (env KA_TIME) value \"100ms\": must be at least 1s",
        ),
    ] {
        let (code, out) = run_briefly(&args, &[], Duration::from_secs(10));
        assert_eq!(code, Some(2), "{args:?}: {out}");
        assert!(out.contains(needle), "{args:?}: {out}");
    }
}

/// Passwords given in any malformed form never reach the output.
#[test]
fn secrets_never_reach_the_output() {
    const PW: &str = "hunter2-Sekr3t";
    let url = |u: &str| u.replace("PW", PW);
    for (args, env, shown) in [
        (
            vec![url("-redis-url=redis://user:PW@host:99999")],
            vec![],
            "value \"redis://user:***@host:99999\"",
        ),
        (
            vec![url("-redis-url=user:PW@host:1")],
            vec![],
            "value \"user:***@host:1\"",
        ),
        (
            vec![url("-redis-url=redis://a:1,http://u:PW@b:2")],
            vec![],
            "value \"http:***@b:2\"",
        ),
        (
            vec![url("-redis-url=redis://127.0.0.1:6379,garbage:PW")],
            vec![],
            "value \"garbage:***\"",
        ),
        (
            vec![url("-redis-addrs=user:PW@h:1")],
            vec![],
            "value \"user:***@h:1\"",
        ),
        (
            vec![
                url("-redis-pass=PW"),
                "-redis-url=redis://h:99999".to_string(),
            ],
            vec![],
            // Malformed: nothing past its ':' shows (it might be a password).
            "value \"redis://h:***\"",
        ),
        (
            vec!["-poll-interval=fast".to_string()],
            vec![("REDIS_PASSWORD", PW), ("REDIS_URL", "redis://u:x@h:1")],
            "-poll-interval",
        ),
    ] {
        let argv: Vec<&str> = args.iter().map(String::as_str).collect();
        let (code, out) = run_briefly(&argv, &env, Duration::from_secs(10));
        assert_eq!(code, Some(2), "{args:?}: {out}");
        assert!(out.contains(shown), "{args:?}: {out}");
        assert!(!out.contains(PW), "{args:?}: the password shows: {out}");
    }
}

/// SIGTERM ends the notification subscription with everything else: the
/// holder must not take that for a broken subscription and resubscribe with
/// an already cancelled token (a busy loop of ERROR lines until the lease
/// was released; found by the ownership stress test).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_stops_cleanly_without_resubscribing() {
    let redis = RedisServer::start();
    let dir = LogDir::new("sigterm-clean");
    let log = dir.file("solo.log");
    let args = vec![
        format!("-redis-url={}", redis.url()),
        format!("-services-namespaces={SERVICES}"),
        format!("-workunits-namespace={UNITS}"),
        format!("-distribution-namespace={TABLE}"),
        "-http-addr=off".to_string(),
        "-poll-interval=100ms".to_string(),
        "-replica-id=solo".to_string(),
    ];
    let mut child = Children(vec![spawn_logged(&args, &[("NO_COLOR", "1")], &log)]);
    wait_for("it holds the lease", Duration::from_secs(10), || async {
        holder(&redis).await.as_deref() == Some("solo")
    })
    .await;
    signal(&child.0[0], "-TERM");
    let status = child.0[0].wait().unwrap();
    assert_eq!(status.code(), Some(0));
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(
        !text.contains("subscription ended"),
        "resubscribed while stopping:\n{text}"
    );
    assert!(!text.contains("ERROR"), "{text}");
}
