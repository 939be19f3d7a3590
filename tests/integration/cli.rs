//! The operator CLI against a real Redis: every subcommand, errors included.

use std::process::{Command, Output};
use std::time::Duration;

use crate::support::*;

fn cli(redis_url: &str, args: &[&str]) -> Output {
    cli_with(redis_url, &format!("{SERVICES},other-group"), args)
}

fn ok(out: Output) -> String {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "exit {:?}: {stderr}", out.status);
    String::from_utf8(out.stdout).unwrap()
}

fn fails(out: Output, needle: &str) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "should fail: {needle}");
    assert!(
        stderr.contains(needle),
        "{stderr:?} should contain {needle:?}"
    );
}

#[tokio::test]
async fn services_and_workunits_edit_the_lists_with_the_daemons_validation() {
    let redis = RedisServer::start();
    let url = redis.url();
    assert_eq!(
        ok(cli(&url, &["services", "add", SERVICES, "10.0.0.1:7001"])),
        "added\n"
    );
    assert_eq!(
        ok(cli(&url, &["services", "add", SERVICES, "10.0.0.1:7001"])),
        "already listed\n"
    );
    ok(cli(
        &url,
        &["services", "add", "other-group", "10.0.0.2:7001"],
    ));
    fails(
        cli(&url, &["services", "add", SERVICES, "no-port"]),
        "invalid member address \"no-port\": missing ':port'",
    );
    assert_eq!(
        ok(cli(&url, &["services", "list"])),
        format!("{SERVICES}\t10.0.0.1:7001\nother-group\t10.0.0.2:7001\n")
    );
    assert_eq!(
        ok(cli(
            &url,
            &["services", "remove", SERVICES, "10.0.0.1:7001"]
        )),
        "removed 1\n"
    );
    assert_eq!(ok(cli(&url, &["services", "list", SERVICES])), "");

    assert_eq!(
        ok(cli(&url, &["workunits", "set", "a", "b", "c"])),
        "set 3 units\n"
    );
    assert_eq!(ok(cli(&url, &["workunits", "add", "c", "d"])), "added 1\n");
    fails(
        cli(&url, &["workunits", "add", "x,y"]),
        "invalid work unit \"x,y\": contains ','",
    );
    fails(
        cli(&url, &["workunits", "set", "ok", ""]),
        "invalid work unit \"\": empty",
    );
    assert_eq!(ok(cli(&url, &["workunits", "remove", "a"])), "removed 1\n");
    assert_eq!(ok(cli(&url, &["workunits", "list"])), "b\nc\nd\n");
    let stored: Vec<String> = redis.cmd(&["LRANGE", UNITS, "0", "-1"]).await;
    assert_eq!(
        stored,
        ["b", "c", "d"],
        "the rejected commands wrote nothing"
    );
}

#[tokio::test]
async fn weights_set_list_and_unset_overrides_with_validation() {
    let redis = RedisServer::start();
    let url = redis.url();
    let weights = keys().weights;
    let _: i64 = redis
        .cmd(&["HSET", &keys().members, "10.0.0.2:7001", "3 0 5000 4"])
        .await;
    assert_eq!(
        ok(cli(&url, &["weights", "set", "10.0.0.1:7001", "7"])),
        "set 10.0.0.1:7001 to 7\n"
    );
    assert_eq!(
        ok(cli(&url, &["weights", "set", "10.0.0.2:7001", "1000"])),
        "set 10.0.0.2:7001 to 1000\n"
    );
    let rows = |text: String| -> Vec<Vec<String>> {
        text.lines()
            .map(|l| l.split_whitespace().map(String::from).collect())
            .collect()
    };
    assert_eq!(
        rows(ok(cli(&url, &["weights", "list"]))),
        [
            ["member", "weight", "override", "reported"],
            ["10.0.0.1:7001", "7", "7", "-"],
            ["10.0.0.2:7001", "1000", "1000", "4"],
        ]
    );
    for (args, needle) in [
        (
            &["weights", "set", "no-port", "2"][..],
            "invalid member address \"no-port\": missing ':port'",
        ),
        (
            &["weights", "set", "10.0.0.1:7001", "0"],
            "invalid weight \"0\": expected an integer from 1 to 1000",
        ),
        (
            &["weights", "set", "10.0.0.1:7001", "1001"],
            "invalid weight \"1001\"",
        ),
        (
            &["weights", "set", "10.0.0.1:7001", "2.5"],
            "invalid weight \"2.5\"",
        ),
        (
            &["weights", "set", "10.0.0.1:7001", "-1"],
            "invalid weight \"-1\"",
        ),
    ] {
        fails(cli(&url, args), needle);
    }
    let stored: std::collections::BTreeMap<String, String> =
        redis.cmd(&["HGETALL", &weights]).await;
    assert_eq!(
        stored["10.0.0.1:7001"], "7",
        "the rejected commands wrote nothing"
    );
    assert_eq!(
        ok(cli(&url, &["weights", "unset", "10.0.0.2:7001"])),
        "unset\n"
    );
    assert_eq!(
        ok(cli(&url, &["weights", "unset", "10.0.0.2:7001"])),
        "no override\n"
    );
    // An entry written by something else shows as unreadable.
    let _: i64 = redis
        .cmd(&["HSET", &weights, "10.0.0.1:7001", "junk"])
        .await;
    assert_eq!(
        rows(ok(cli(&url, &["weights", "list"]))),
        [
            ["member", "weight", "override", "reported"],
            ["10.0.0.1:7001", "1", "unreadable", "-"],
            ["10.0.0.2:7001", "4", "-", "4"],
        ]
    );
    // A key of the wrong type: every subcommand fails naming it.
    let () = redis.cmd(&["SET", &weights, "not a hash"]).await;
    let wrong = format!("{weights:?} holds a string, expected a hash");
    fails(cli(&url, &["weights", "list"]), &wrong);
    fails(cli(&url, &["weights", "set", "10.0.0.1:7001", "2"]), &wrong);
    fails(cli(&url, &["weights", "unset", "10.0.0.1:7001"]), &wrong);
    let () = redis.cmd(&["DEL", &weights]).await;
    let () = redis.cmd(&["SET", &keys().members, "not a hash"]).await;
    fails(
        cli(&url, &["weights", "list"]),
        &format!("{:?} holds a string, expected a hash", keys().members),
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_and_table_describe_a_running_fleet() {
    let units = units(10);
    let (fleet, table) = Fleet::converged(|_| {}, 3, 2, &units).await;
    let url = fleet.redis.url();
    let holder = fleet.wait_for_holder().await;
    let holder_id = fleet.statuses()[holder].replica_id.clone();
    wait_for(
        "census recorded for both replicas",
        Duration::from_secs(10),
        || async {
            let r: std::collections::HashMap<String, String> =
                fleet.redis.cmd(&["HGETALL", &keys().replicas]).await;
            // "index replicas unix_ms": both must have seen a full interval with both.
            r.len() == 2 && r.values().all(|v| v.split(' ').nth(1) == Some("2"))
        },
    )
    .await;

    let text = ok(cli(&url, &["status"]));
    assert!(
        text.contains(&format!("lease held by {holder_id}")),
        "{text}"
    );
    assert!(
        text.contains(&format!("group {SERVICES}: 3 live, 0 failed")),
        "{text}"
    );
    // Indexes are per interval and the two lines may describe neighbouring
    // intervals, so only the count is stable.
    assert_eq!(text.matches(" of 2 ").count(), 2, "{text}");
    let json: serde_json::Value =
        serde_json::from_str(&ok(cli(&url, &["status", "--json"]))).unwrap();
    assert_eq!(json["lease"]["holder"], holder_id.as_str());
    assert_eq!(json["work_units"], 10);
    assert_eq!(json["groups"][0]["live"], 3);
    assert_eq!(json["members"].as_array().unwrap().len(), 3);
    assert_eq!(json["replicas"].as_array().unwrap().len(), 2);

    let json: serde_json::Value =
        serde_json::from_str(&ok(cli(&url, &["table", "--json"]))).unwrap();
    assert_eq!(json["total"], 3);
    assert_eq!(json["assignments"], 10);
    assert_eq!(json["balance"], 1);
    let rows = json["rows"].as_array().unwrap();
    for row in rows {
        let member = row["id"].as_str().unwrap();
        assert_eq!(row["units"], table.units_of(member).len());
    }
    let text = ok(cli(&url, &["table"]));
    assert!(
        text.contains("3 members, 10 assignments, min 3 max 4 (balance 1)"),
        "{text}"
    );
    fleet.shutdown().await;
}

#[tokio::test]
async fn unreachable_redis_and_wrong_types_fail_clearly() {
    let mut redis = RedisServer::start();
    let url = redis.url();
    let () = redis.cmd(&["SET", UNITS, "not a list"]).await;
    fails(
        cli(&url, &["workunits", "list"]),
        "\"test-units\" holds a string, expected a list",
    );
    fails(
        cli(&url, &["status"]),
        "\"test-units\" holds a string, expected a list",
    );
    let () = redis.cmd(&["SET", TABLE, "not a hash"]).await;
    fails(
        cli(&url, &["table"]),
        "\"test-table\" holds a string, expected a hash",
    );
    redis.kill();
    fails(cli(&url, &["status"]), "failed to read the status");
    fails(
        cli(&url, &["services", "add", SERVICES, "h:1"]),
        "failed to add",
    );
}

/// Arguments the old byte-slicing and `std::env::args` panicked on: a unit
/// starting with a non-ASCII letter works, and an argument that is not UTF-8
/// is an error (exit code 2), never a panic. Help and version still exit 0.
#[tokio::test]
async fn non_ascii_and_non_utf8_arguments_never_panic() {
    use std::os::unix::ffi::OsStringExt;
    let redis = RedisServer::start();
    let url = redis.url();
    assert_eq!(
        ok(cli(&url, &["workunits", "add", "Ünit", "ünit-2", "€"])),
        "added 3\n"
    );
    let stored: Vec<String> = redis.cmd(&["LRANGE", UNITS, "0", "-1"]).await;
    assert_eq!(stored.len(), 3, "{stored:?}");
    let not_utf8 = std::ffi::OsString::from_vec(vec![b'u', 0xff, 0xfe]);
    for args in [
        vec!["workunits".into(), "add".into(), not_utf8.clone()],
        vec!["--log".into(), not_utf8.clone()],
        vec![not_utf8.clone()],
        vec!["-é".into()],
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_distributor"))
            .arg(format!("-redis-url={url}"))
            .args(&args)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
        assert!(!stderr.is_empty(), "{args:?}: says why");
    }
    let out = Command::new(env!("CARGO_BIN_EXE_distributor"))
        .env("REDIS_URL", &not_utf8)
        .arg("status")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("invalid -redis-url (env REDIS_URL)") && stderr.contains("not valid UTF-8"),
        "{stderr}"
    );
    for (arg, needle) in [
        ("--help", "--poll-interval"),
        ("-h", "--poll-interval"),
        ("--version", env!("CARGO_PKG_VERSION")),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_distributor"))
            .arg(arg)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{arg}");
        assert!(
            String::from_utf8_lossy(&out.stdout).contains(needle),
            "{arg}"
        );
    }
}

/// A member whose pings have failed for 10 minutes (its liveness as a
/// holder before this one stored it) is counted by the holder's status and
/// `distributor_members_failing_long`, and `distributor status` ends its
/// group with a hint: with `-forget-after` off it stays listed until removed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_failing_for_long_is_counted_and_hinted() {
    let redis = RedisServer::start();
    let dead = format!("127.0.0.1:{}", free_port());
    let since = distributor::unix_ms() - 11 * 60 * 1000;
    let _: i64 = redis
        .cmd(&[
            "HSET",
            &keys().liveness,
            &dead,
            &format!("1 1 {since} connection refused"),
        ])
        .await;
    let _: i64 = redis.cmd(&["RPUSH", SERVICES, &dead]).await;
    let units = units(6);
    let (fleet, _) = Fleet::converged_on(redis, |_| {}, 1, 1, &units).await;
    wait_for("the holder counts it", Duration::from_secs(10), || async {
        fleet.statuses().iter().any(|s| s.failing_long == 1)
    })
    .await;
    let out = cli(&fleet.redis.url(), &["status"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("  hint: 1 failed for 10 minutes or more;"),
        "{text}"
    );
    fleet.shutdown().await;
}
