//! The change history (`{T}:changes`): every table write adds one entry
//! inside the fenced commit, `distributor history` reads it, and it
//! outlives every replica.

use std::time::Duration;

use serde_json::Value;

use crate::support::*;

/// `distributor history --json --limit 1000`.
fn history(fleet: &Fleet) -> Value {
    let out = cli(
        &fleet.redis.url(),
        &["history", "--json", "--limit", "1000"],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn entries(h: &Value) -> Vec<Value> {
    h["entries"].as_array().unwrap().clone()
}

/// Each entry follows the one before it: no table write goes unrecorded.
fn assert_unbroken(entries: &[Value]) {
    for pair in entries.windows(2) {
        assert_eq!(
            pair[0]["previous_generation"], pair[1]["generation"],
            "a write is missing between {} and {}",
            pair[1], pair[0]
        );
    }
}

/// The member's fencing token for `unit`, once it holds it.
async fn wait_for_token(m: &distributor::Member, unit: &str) -> u64 {
    wait_for(
        "the member holds its unit",
        Duration::from_secs(10),
        || async { m.holds(unit).is_some() },
    )
    .await;
    m.holds(unit).expect("held").0
}

fn member_in<'a>(e: &'a Value, id: &str) -> Option<&'a Value> {
    e["members"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["id"] == id)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_write_is_recorded_and_the_history_outlives_every_replica() {
    let all = units(30);
    let (mut fleet, _) = Fleet::converged(|_| {}, 2, 2, &all).await;
    let first = fleet.member_id(0);

    // A join: the newcomer's entry names it, with the units it got.
    let joined = fleet.add_member().await;
    let newcomer = fleet.member_id(joined);
    fleet.wait_for_table(&all, Duration::from_secs(10)).await;
    // A crash: the failed member's units leave its row.
    fleet.members[0].take().unwrap().abort();
    fleet.wait_for_table(&all, Duration::from_secs(15)).await;

    let h = history(&fleet);
    assert_eq!(h["error"], Value::Null, "{h}");
    let before = entries(&h);
    assert_unbroken(&before);
    let newest = before[0]["generation"].as_u64().unwrap();
    assert_eq!(newest, fleet.generation().await);
    assert_eq!(
        before.last().unwrap()["previous_generation"],
        0,
        "the first table"
    );
    let first_table = before.last().unwrap();
    assert_eq!(first_table["placed"]["count"], 30, "{first_table}");
    assert!(
        before.iter().any(|e| member_in(e, &newcomer)
            .is_some_and(|m| m["why"] == "join" || m["units_after"].as_u64() > Some(0))),
        "the newcomer: {h}"
    );
    let failed = before
        .iter()
        .find_map(|e| member_in(e, &first).filter(|m| m["why"] == "failure"))
        .unwrap_or_else(|| panic!("the crashed member: {h}"));
    assert!(failed["units_before"].as_u64().unwrap() > 0, "{failed}");
    // Units that change owner are counted, and named (few here).
    let owned_again: u64 = before
        .iter()
        .map(|e| e["placed"]["count"].as_u64().unwrap() + e["moved"]["count"].as_u64().unwrap())
        .sum();
    assert!(owned_again >= 30 + 10, "{h}");
    for e in &before {
        for kind in ["moved", "placed", "revoked"] {
            let l = &e[kind];
            assert_eq!(
                l["count"].as_u64().unwrap() as usize,
                l["units"].as_array().unwrap().len()
            );
        }
    }

    // Every replica goes; new ones come: the history is still there, and
    // the next write continues it.
    for r in fleet.replicas.iter_mut() {
        r.take().unwrap().shutdown().await;
    }
    fleet.add_replica();
    fleet.add_replica();
    fleet.wait_for_holder().await;
    let after_restart = entries(&history(&fleet));
    assert_eq!(
        after_restart[after_restart.len() - before.len()..],
        before[..]
    );
    fleet.add_member().await;
    fleet.wait_for_table(&all, Duration::from_secs(10)).await;
    let later = entries(&history(&fleet));
    assert_unbroken(&later);
    assert!(later[0]["generation"].as_u64().unwrap() > newest);
    assert!(later.len() > before.len());

    // `owner`: the member whose row holds a unit, since the write that gave
    // it, and a token no higher than the one the member itself holds (it is
    // that write's generation; a member that first read a later one holds
    // that later one).
    let table = fleet.table().await;
    let mut checked = 0;
    for m in fleet.members.iter().flatten() {
        let Some(unit) = table.units_of(m.id()).first().map(|u| u.to_string()) else {
            continue;
        };
        let token = wait_for_token(m, &unit).await;
        let out = cli(&fleet.redis.url(), &["owner", &unit, "--json"]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let r: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(r["owners"], serde_json::json!([m.id()]), "{r}");
        let since = r["since_generation"]
            .as_u64()
            .unwrap_or_else(|| panic!("{r}"));
        assert_eq!(r["token"].as_u64(), Some(since), "{r}");
        assert!(since <= token, "{r} against the member's {token}");
        let text = String::from_utf8(cli(&fleet.redis.url(), &["owner", &unit]).stdout).unwrap();
        assert!(
            text.starts_with(&format!(
                "{unit}: owned by {} since generation {since}, ",
                m.id()
            )) && text.ends_with(&format!("; fencing token {since}\n")),
            "{text}"
        );
        checked += 1;
    }
    assert_eq!(checked, 3, "every live member owns units");
    let out = cli(&fleet.redis.url(), &["owner", "a,b"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && stderr.contains("invalid work unit \"a,b\""),
        "{stderr}"
    );
    let out = cli(&fleet.redis.url(), &["owner", "never-listed"]);
    let text = String::from_utf8(out.stdout).unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        text.starts_with("never-listed: not listed (not in the work-unit list)"),
        "{text}"
    );
    assert!(
        !out.status.success() && stderr.contains("work unit \"never-listed\" is not in"),
        "exits non-zero: {stderr}"
    );
    let out = cli(&fleet.redis.url(), &["owner", "never-listed", "--json"]);
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(r["listed"], false, "{r}");
    assert!(!out.status.success());

    // The text form: one paragraph per entry, newest first.
    let out = cli(&fleet.redis.url(), &["history", "--limit", "2"]);
    let text = String::from_utf8(out.stdout).unwrap();
    let g = later[0]["generation"].as_u64().unwrap();
    assert!(
        text.starts_with(&format!("generation {g} (after ")),
        "{text}"
    );
    assert_eq!(
        text.matches("\ngeneration ").count(),
        1,
        "two entries: {text}"
    );
    fleet.shutdown().await;
}

/// Someone else's entries (or a key of another type) never break a read
/// or a write: the reader shows what it can, the holder replaces the key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_foreign_entry_or_key_breaks_neither_the_reader_nor_the_holder() {
    let all = units(6);
    let (mut fleet, _) = Fleet::converged(|_| {}, 1, 1, &all).await;
    let changes = keys().changes;
    let _: String = fleet
        .redis
        .cmd(&[
            "XADD",
            &changes,
            "*",
            "generation",
            "not-a-number",
            "why",
            "party",
        ])
        .await;
    let h = history(&fleet);
    let newest = &entries(&h)[0];
    let bad = newest["unreadable"].as_str().unwrap();
    assert!(
        bad.contains("generation=\"not-a-number\"") && bad.contains("why=\"party\""),
        "{bad}"
    );

    let () = fleet.redis.cmd(&["DEL", &changes]).await;
    let () = fleet.redis.cmd(&["SET", &changes, "oops"]).await;
    let out = cli(&fleet.redis.url(), &["history"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && stderr.contains(&changes),
        "{stderr}"
    );
    // The next table write replaces it (it is the holder's own key).
    let generation = fleet.generation().await;
    fleet.add_member().await;
    fleet.wait_for_table(&all, Duration::from_secs(10)).await;
    let h = history(&fleet);
    let e = entries(&h);
    assert!(e[0]["generation"].as_u64().unwrap() > generation, "{h}");
    assert_eq!(e[0]["unreadable"], Value::Null, "{h}");
    fleet.shutdown().await;
}
