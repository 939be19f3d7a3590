//! Authentication: a password-protected Redis, an ACL user limited to the keys
//! and commands docs/protocol.md documents, and no secret in logs, metrics, status
//! output or traces.

use std::process::{Command, Stdio};
use std::time::Duration;

use crate::support::otlp::Collector;
use crate::support::*;

pub(crate) const ADMIN_PASSWORD: &str = "admin-Pa55-never-logged";
pub(crate) const PASSWORD: &str = "dist-S3cret-never-logged";

/// The minimal ACL of docs/protocol.md, for the test's key names.
pub(crate) async fn create_acl_user(redis: &RedisServer) {
    create_acl_user_with(redis, OPTIONAL).await;
}

/// Commands docs/protocol.md's ACL grants that the distributor can do without
/// (an ACL written for an older version): list sizes before reading, the
/// table guard's WATCH, the client ids of connections (fast takeover, and
/// the check that a refused member's Redis connection is gone too), and the
/// server's run id that tells a member's connection from another server's,
/// and the change history (written by the commit script, read by the CLI),
/// and Redis Functions (the scripts as a library, else `EVALSHA`), and the
/// write-back of reports Redis lost (`HSETNX`).
const OPTIONAL: &str = "+llen +memory|usage +watch +unwatch +client|id +client|list +info +xadd \
     +xrevrange +fcall +function|load +hsetnx";

pub(crate) async fn create_acl_user_with(redis: &RedisServer, optional: &str) {
    let coordination = coordination_glob();
    let acl = format!(
        "ACL SETUSER distributor on >{PASSWORD} resetkeys ~{SERVICES} ~{UNITS} ~{TABLE} ~{coordination} \
         resetchannels &{coordination} -@all +get +set +del +incr +pexpire +pttl +type \
         +hset +hget +hmget +hgetall +hdel +hlen +lrange +lpos +lpush +rpush +lrem \
         +eval +evalsha +script|load +multi +exec +publish +subscribe +ping {optional}"
    );
    let args: Vec<&str> = acl.split_whitespace().collect();
    let ok: String = redis.cmd(&args).await;
    assert_eq!(ok, "OK");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acl_without_the_optional_commands_still_works() {
    // An ACL written for an older version: no LLEN, MEMORY USAGE or WATCH. The
    // holder falls back to bounding lists after reading them and to checking
    // the table's content in Redis every cycle, and a hand edit is still healed.
    let redis = RedisServer::start_with(&["--requirepass", ADMIN_PASSWORD]);
    create_acl_user_with(&redis, "").await;
    let url = format!("redis://distributor:{PASSWORD}@127.0.0.1:{}", redis.port());
    let units = units(12);
    let (fleet, before) = Fleet::converged_on(redis, |c| c.redis_url = url, 3, 1, &units).await;
    let member = fleet.member_id(0);
    let () = fleet.redis.cmd(&["HSET", TABLE, &member, "hacked"]).await;
    wait_for("the edit is healed", Duration::from_secs(5), || async {
        fleet.table().await == before
    })
    .await;
    let s = fleet.statuses().remove(fleet.wait_for_holder().await);
    assert_eq!(s.last_error, None);
    // Without XADD the table is written and the history is not: meta says
    // why, for `distributor history` and the page.
    let missed: String = fleet
        .redis
        .cmd(&["HGET", &keys().meta, "history_error"])
        .await;
    let generation = fleet.generation().await;
    assert!(missed.starts_with(&format!("{generation} ")), "{missed}");
    assert!(missed.contains("XADD: "), "{missed}");
    let xlen: u64 = fleet.redis.cmd(&["XLEN", &keys().changes]).await;
    assert_eq!(xlen, 0);
    fleet.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acl_user_with_the_documented_permissions_is_enough() {
    let redis = RedisServer::start_with(&["--requirepass", ADMIN_PASSWORD]);
    create_acl_user(&redis).await;
    let url = format!("redis://distributor:{PASSWORD}@127.0.0.1:{}", redis.port());
    let units = units(12);
    let (mut fleet, _) = Fleet::converged_on(redis, |c| c.redis_url = url, 3, 2, &units).await;
    wait_for("census and holder", Duration::from_secs(10), || async {
        let s = fleet.statuses();
        s.iter()
            .all(|s| s.census.is_some() && s.last_error.is_none())
            && fleet.holder().is_some()
    })
    .await;
    // Failover works with the restricted user too (release, publish, acquire).
    let holder = fleet.wait_for_holder().await;
    fleet.replicas[holder].take().unwrap().shutdown().await;
    wait_for("a new holder", Duration::from_secs(5), || async {
        fleet.holder().is_some()
    })
    .await;
    // Without the password nothing works, and nothing crashes.
    let wrong = format!("redis://distributor:wrong@127.0.0.1:{}", fleet.redis.port());
    let store =
        distributor::edge::redis::Store::open(&wrong, TABLE, Duration::from_secs(1)).unwrap();
    let e = store.read_table().await.unwrap_err();
    let text = e.to_string().to_lowercase();
    assert!(text.contains("wrongpass") || text.contains("auth"), "{e}");
    assert!(!text.contains("wrong@"), "the URL is not echoed: {e}");
    fleet.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_secret_in_logs_metrics_status_or_traces() {
    let redis = RedisServer::start_with(&["--requirepass", ADMIN_PASSWORD]);
    create_acl_user(&redis).await;
    let collector = Collector::start().await;
    let dir = std::env::temp_dir().join(format!("distributor-secrets-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let pw_file = dir.join("password");
    std::fs::write(&pw_file, format!("{PASSWORD}\n")).unwrap();
    let log_path = dir.join("daemon.log");

    let mut fleet = Fleet::new(redis);
    fleet.config.redis_url = format!(
        "redis://distributor:{PASSWORD}@127.0.0.1:{}",
        fleet.redis.port()
    );
    let units = units(6);
    fleet.set_units(&units).await;
    fleet.add_member().await;
    fleet.add_member().await;

    let http = free_port();
    let log = std::fs::File::create(&log_path).unwrap();
    let url_with_password = format!(
        "redis://distributor:{PASSWORD}@127.0.0.1:{}",
        fleet.redis.port()
    );
    let mut daemon = Command::new(env!("CARGO_BIN_EXE_distributor"))
        .args([
            &format!("-redis-url=redis://127.0.0.1:{}", fleet.redis.port()),
            "-redis-user=distributor",
            &format!("-redis-password-file={}", pw_file.display()),
            &format!("-services-namespaces={SERVICES}"),
            &format!("-workunits-namespace={UNITS}"),
            &format!("-distribution-namespace={TABLE}"),
            "-poll-interval=100ms",
            "-census-interval=300ms",
            &format!("-http-addr=127.0.0.1:{http}"),
        ])
        .env("RUST_LOG", "debug")
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", collector.endpoint())
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .unwrap();
    fleet.wait_for_table(&units, Duration::from_secs(15)).await;
    wait_for("ready", Duration::from_secs(10), || async {
        http_get(http, "/readyz").await.is_ok_and(|(c, _)| c == 200)
    })
    .await;
    let metrics = http_get(http, "/metrics").await.unwrap().1;

    // Operator commands, given the password in the URL.
    let status = Command::new(env!("CARGO_BIN_EXE_distributor"))
        .args([
            &format!("-redis-url={url_with_password}"),
            &format!("-services-namespaces={SERVICES}"),
            &format!("-workunits-namespace={UNITS}"),
            &format!("-distribution-namespace={TABLE}"),
            "status",
            "--json",
        ])
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    assert!(
        status.status.success(),
        "{}",
        String::from_utf8_lossy(&status.stderr)
    );
    // A failing command must not echo the URL either.
    let failing = Command::new(env!("CARGO_BIN_EXE_distributor"))
        .args([
            &format!("-redis-url=redis://distributor:{PASSWORD}@127.0.0.1:1"),
            "status",
        ])
        .output()
        .unwrap();
    assert!(!failing.status.success());
    let bad_flag = Command::new(env!("CARGO_BIN_EXE_distributor"))
        .args([
            &format!("-redis-url=http://distributor:{PASSWORD}@x"),
            "status",
        ])
        .output()
        .unwrap();
    assert_eq!(bad_flag.status.code(), Some(2));

    let ok = Command::new("kill")
        .args(["-TERM", &daemon.id().to_string()])
        .status()
        .unwrap();
    assert!(ok.success());
    daemon.wait().unwrap();
    let logs = std::fs::read_to_string(&log_path).unwrap();
    assert!(
        logs.contains("starting") && logs.contains("***"),
        "the daemon logged its redacted URL: {logs}"
    );
    let spans = collector.spans();
    assert!(!spans.is_empty(), "spans were exported");

    let mut places: Vec<(&str, String)> = vec![
        ("daemon logs", logs),
        ("metrics", metrics),
        (
            "status stdout",
            String::from_utf8_lossy(&status.stdout).into_owned(),
        ),
        (
            "status stderr",
            String::from_utf8_lossy(&status.stderr).into_owned(),
        ),
        (
            "failing command",
            format!(
                "{}{}",
                String::from_utf8_lossy(&failing.stdout),
                String::from_utf8_lossy(&failing.stderr)
            ),
        ),
        (
            "flag error",
            String::from_utf8_lossy(&bad_flag.stderr).into_owned(),
        ),
        ("spans", format!("{spans:?}")),
    ];
    for (what, text) in places.drain(..) {
        for secret in [PASSWORD, ADMIN_PASSWORD] {
            assert!(
                !text.contains(secret),
                "{what} contains a password:\n{text}"
            );
        }
    }
    std::fs::remove_dir_all(&dir).unwrap();
    fleet.shutdown().await;
}
