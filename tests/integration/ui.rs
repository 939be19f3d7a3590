//! The status page's JSON API (`-http-ui`) on a real fleet: a password-protected
//! Redis, real members over gRPC, the real HTTP server on loopback. It shows
//! the distribution a page at a time, records a crash as a change with its
//! reason, answers 404 when off, and never shows the Redis URL or password.

use std::time::Duration;

use serde_json::{Value, json};

use crate::support::*;

const SECRET: &str = "ui-test-s3cret-password";

async fn get_json(port: u16, path: &str, bodies: &mut Vec<String>) -> Value {
    let (code, body) = http_get(port, path).await.unwrap();
    assert_eq!(code, 200, "{path}: {body}");
    bodies.push(body.clone());
    serde_json::from_str(&body).unwrap_or_else(|e| panic!("{path}: {e}: {body}"))
}

/// `path` as JSON once `done` holds for it; panics with `what` after `limit`.
async fn poll_json(
    port: u16,
    path: &str,
    bodies: &mut Vec<String>,
    what: &str,
    limit: Duration,
    done: impl Fn(&Value) -> bool,
) -> Value {
    let deadline = std::time::Instant::now() + limit;
    loop {
        let v = get_json(port, path, bodies).await;
        if done(&v) {
            return v;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "timed out after {limit:?} waiting for {what}; last {path}: {v}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_pages_members_records_changes_and_shows_no_secret() {
    let redis = RedisServer::start_with(&["--requirepass", SECRET]);
    let url = redis.admin_url();
    assert!(url.contains(SECRET));
    let units = units(30);
    let (mut fleet, _) = Fleet::converged_on(redis, |c| c.redis_url = url, 3, 2, &units).await;
    let stop = tokio_util::sync::CancellationToken::new();
    // The API on a standby too: it reads what it shows from Redis.
    let holder = fleet.wait_for_holder().await;
    let standby = 1 - holder;
    let on = serve_http(&fleet, standby, Ui::On, &stop).await;
    let off = serve_http(&fleet, holder, Ui::Off, &stop).await;
    let mut bodies = vec![];

    // Off: the API does not exist.
    for path in [
        "/api/status",
        "/api/members",
        "/api/changes",
        "/",
        "/ui/app.js",
        "/ui/style.css",
    ] {
        assert_eq!(http_get(off, path).await.unwrap().0, 404, "{path}");
    }
    assert_eq!(http_get(off, "/healthz").await.unwrap().0, 200);

    // On: the page and its files, from the binary.
    let (code, html) = http_get(on, "/").await.unwrap();
    assert_eq!(code, 200);
    assert!(html.contains("<script src=\"/ui/app.js\">"), "{html}");
    assert!(
        !html.contains("http://") && !html.contains("https://"),
        "no external resource"
    );
    for (path, needle) in [
        ("/ui/app.js", "/api/members?page="),
        ("/ui/style.css", ".member"),
    ] {
        let (code, body) = http_get(on, path).await.unwrap();
        assert_eq!(code, 200, "{path}");
        assert!(body.contains(needle), "{path}");
        assert!(
            !body.contains("http://") && !body.contains("https://"),
            "{path}"
        );
    }

    // On: the status, once read, with this replica's own view.
    let status = poll_json(
        on,
        "/api/status",
        &mut bodies,
        "3 live members and both replicas in the census",
        Duration::from_secs(10),
        |s| {
            s["status"]["groups"][0]["live"] == 3
                && s["status"]["replicas"]
                    .as_array()
                    .is_some_and(|r| r.len() == 2)
        },
    )
    .await;
    assert_eq!(status["replica"]["role"], "standby", "{status}");
    assert_eq!(status["replica"]["id"], format!("replica-{standby}"));
    assert_eq!(
        status["status"]["lease"]["holder"],
        format!("replica-{holder}"),
        "{status}"
    );
    assert_eq!(status["status"]["work_units"], 30);
    assert!(status["status"]["generation"].as_u64().unwrap() > 0);
    assert!(
        status["status"].get("live").is_none(),
        "no member lists here"
    );

    // Members, two to a page, sorted; their units add up.
    let first = get_json(on, "/api/members?page=1&per_page=2", &mut bodies).await;
    assert_eq!(
        (first["total"].as_u64(), first["pages"].as_u64()),
        (Some(3), Some(2))
    );
    let second = get_json(on, "/api/members?page=2&per_page=2", &mut bodies).await;
    let rows: Vec<&Value> = first["members"]
        .as_array()
        .unwrap()
        .iter()
        .chain(second["members"].as_array().unwrap())
        .collect();
    let mut ids: Vec<String> = rows
        .iter()
        .map(|m| m["id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(ids.len(), 3);
    assert!(ids.is_sorted(), "{ids:?}");
    ids.sort();
    let mut live = fleet.live_member_ids();
    live.sort();
    assert_eq!(ids, live);
    let owned: u64 = rows.iter().map(|m| m["units"].as_u64().unwrap()).sum();
    assert_eq!(owned, 30);
    assert!(rows.iter().all(|m| m["live"] == true && m["weight"] == 1));
    let huge = get_json(on, "/api/members?per_page=100000", &mut bodies).await;
    assert_eq!(huge["per_page"], distributor::ops::api::MAX_PER_PAGE);

    // A member crashes: a change names it, failed, with the units it lost.
    let crashed = fleet.member_id(0);
    fleet.members[0].take().unwrap().abort();
    let names_crashed = |c: &Value| {
        c["members"]
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m["id"] == *crashed && m["units_after"] == 0)
    };
    // Its units go to the others in the same write, or in a later one
    // (after a second refused ping): either way a rebalance follows.
    let rebalanced_after = |v: &Value| {
        let all = v["changes"].as_array().unwrap();
        all.iter().find(|c| names_crashed(c)).is_some_and(|failed| {
            all.iter().any(|c| {
                c["generation"].as_u64() >= failed["generation"].as_u64()
                    && c["why"]
                        .as_array()
                        .unwrap()
                        .contains(&Value::from("rebalance"))
            })
        })
    };
    let changes = poll_json(
        on,
        "/api/changes",
        &mut bodies,
        "a change for the crashed member, and its units placed",
        Duration::from_secs(15),
        rebalanced_after,
    )
    .await;
    let change = changes["changes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| names_crashed(c))
        .unwrap()
        .clone();
    // `limit` asks for the newest few only (the page asks for 20).
    let (code, body) = http_get(on, "/api/changes?limit=1").await.unwrap();
    assert_eq!(code, 200);
    let newest: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(newest["changes"].as_array().unwrap().len(), 1, "{newest}");
    assert_eq!(newest["kept"], 100, "{newest}");
    bodies.push(body);
    let why = change["why"].as_array().unwrap();
    assert!(why.contains(&Value::from("failure")), "{change}");
    assert!(
        change["revoked"]["count"].as_u64().unwrap() + change["moved"]["count"].as_u64().unwrap()
            > 0,
        "{change}"
    );
    assert_eq!(newest["error"], Value::Null, "{newest}");
    let mine = change["members"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["id"] == *crashed)
        .unwrap();
    assert_eq!(mine["why"], "failure", "{change}");
    assert!(mine["units_before"].as_u64().unwrap() > 0, "{change}");
    // The holder's own moved/minimum count, as `{T}:meta` keeps it (its
    // `last_change`, which a crash's solve does not always record: null then).
    assert!(
        change["moves"].is_null() || change["moves"]["minimum"].is_u64(),
        "{change}"
    );

    // No secret in any answer.
    for body in &bodies {
        assert!(!body.contains(SECRET), "the password leaked: {body}");
        assert!(!body.contains("redis://"), "a Redis URL leaked: {body}");
    }
    stop.cancel();
    fleet.shutdown().await;
}

/// What `distributor <args> --json` prints, as JSON.
fn cli_json(url: &str, args: &[&str]) -> Value {
    let out = cli(url, args);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{args:?}: exit {:?}: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{args:?}: {e}: {stdout}"))
}

/// The fields that move with the clock alone, replaced by a marker (so that
/// their presence and place still count): the lease's `expires_in_ms`, each
/// census entry's `seen_ms_ago` and `index` (a replica's order of arrival
/// in a census interval, which may change every interval), each unit in
/// transit's `for_ms` and each failed member's `failing_for_ms`.
fn untimed(mut v: Value) -> Value {
    let mark = |field: &mut Value| {
        assert!(field.is_u64() || field.is_null(), "{field}");
        *field = Value::from("(time)");
    };
    if let Some(lease) = v.get_mut("lease") {
        mark(&mut lease["expires_in_ms"]);
    }
    for (list, fields) in [
        ("replicas", &["seen_ms_ago", "index"][..]),
        ("transit", &["for_ms"][..]),
        ("members", &["failing_for_ms"][..]),
    ] {
        for entry in v
            .get_mut(list)
            .and_then(Value::as_array_mut)
            .into_iter()
            .flatten()
        {
            for f in fields {
                mark(&mut entry[*f]);
            }
        }
    }
    v
}

/// `status --json` and `table --json` against `/api/status` and every page
/// of `/api/members`, on one settled fleet with every kind of member: one
/// that reports (the kit's `Member`s), one that only answers pings, one with
/// an operator's weight, one crashed. `status --json` must be `/api/status`'s
/// `status` plus the `members` that the pages list, field for field; a
/// `table --json` row must name a member's fields as those rows do.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_and_table_json_are_the_api_s_documents() {
    let units = units(30);
    let (mut fleet, _) = Fleet::converged(|_| {}, 3, 2, &units).await;
    let url = fleet.redis.url();
    let old = FlakyWorker::start(&fleet).await;
    let heavy = fleet.member_id(0);
    let set = cli(&url, &["weights", "set", &heavy, "3"]);
    assert!(set.status.success(), "{set:?}");
    let crashed = fleet.member_id(2);
    fleet.members[2].take().unwrap().abort();

    // Settled: three live, the heavy one with 3/5 of the units, one failed,
    // nothing in transit, both replicas counted by the census. Nothing
    // writes after that but the census steps (their time fields).
    let member = |doc: &Value, id: &str| -> Value {
        doc["members"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["id"] == id)
            .cloned()
            .unwrap_or(Value::Null)
    };
    wait_for(
        "3 live, 1 failed, weights applied, nothing in transit, a census of 2",
        Duration::from_secs(20),
        || async {
            let s = cli_json(&url, &["status", "--json"]);
            let census = s["replicas"].as_array().unwrap();
            s["groups"][0]["live"] == 3
                && s["groups"][0]["failed"] == 1
                && s["in_transit"] == 0
                && member(&s, &heavy)["units"] == 18
                && census.len() == 2
                && census.iter().all(|r| r["replicas"] == 2)
        },
    )
    .await;
    let settled_at = distributor::unix_ms();

    // The API on a standby, once it read Redis after that.
    let stop = tokio_util::sync::CancellationToken::new();
    let holder = fleet.wait_for_holder().await;
    let port = serve_http(&fleet, 1 - holder, Ui::On, &stop).await;
    let mut bodies = vec![];
    let api = poll_json(
        port,
        "/api/status",
        &mut bodies,
        "a read after the fleet settled",
        Duration::from_secs(15),
        |v| v["read_at_ms"].as_u64().is_some_and(|t| t > settled_at),
    )
    .await;
    let mut pages = vec![];
    for page in 1.. {
        let p = get_json(
            port,
            &format!("/api/members?page={page}&per_page=3"),
            &mut bodies,
        )
        .await;
        let last = page >= p["pages"].as_u64().unwrap();
        pages.push(p);
        if last {
            break;
        }
    }
    let status = cli_json(&url, &["status", "--json"]);
    let table = cli_json(&url, &["table", "--json"]);

    // The test sees every kind of member.
    assert_eq!(member(&status, &heavy)["weight"], 3, "{status}");
    assert!(member(&status, &heavy)["protocol"].is_object(), "{status}");
    assert!(member(&status, &old.addr)["protocol"].is_null(), "{status}");
    assert_eq!(member(&status, &crashed)["live"], false, "{status}");
    assert!(member(&status, &crashed)["reason"].is_string(), "{status}");

    // status --json: /api/status's `status`, plus `members`.
    let mut summary = status.clone();
    let members = summary.as_object_mut().unwrap().remove("members").unwrap();
    assert_eq!(
        untimed(summary.clone()),
        untimed(api["status"].clone()),
        "status --json without `members` against /api/status's `status`"
    );
    // ... whose `members` are the pages' rows, in their order.
    assert_eq!(pages.len(), 2);
    let paged: Vec<Value> = pages
        .iter()
        .flat_map(|p| p["members"].as_array().unwrap().clone())
        .collect();
    assert_eq!(
        untimed(json!({ "members": members })),
        untimed(json!({ "members": paged })),
        "status --json `members` against the /api/members pages"
    );
    for p in &pages {
        assert_eq!(p["total"], 4);
        assert_eq!(p["generation"], status["generation"]);
    }

    // table --json: the same table, generation and mode; a row's fields are
    // its member's, under the same names (`share` is the table's own).
    for k in ["table", "generation", "assignment", "last_change"] {
        assert_eq!(table[k], status[k], "{k}");
    }
    let rows = table["rows"].as_array().unwrap();
    let live: Vec<&Value> = members
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["live"] == true)
        .collect();
    assert_eq!(table["total"], rows.len());
    assert_eq!(rows.len(), live.len(), "a row per live member");
    for row in rows {
        let m = member(&status, row["id"].as_str().unwrap());
        for (k, v) in row.as_object().unwrap() {
            if k != "share" {
                assert_eq!(&m[k], v, "{k} of {row} against {m}");
            }
        }
    }
    stop.cancel();
    fleet.shutdown().await;
}
