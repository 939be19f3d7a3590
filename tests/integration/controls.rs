//! Operator controls through the CLI against a real fleet: cordon, drain,
//! uncordon, pin, unpin, pause and resume, each applied by the holder
//! through the safe handoff, and shown by `status` (text and JSON) and in
//! the holder's own status (the metrics' source).

use std::collections::BTreeMap;
use std::time::Duration;

use distributor::MatchingTable;
use serde_json::Value;

use crate::support::*;

const LIMIT: Duration = Duration::from_secs(15);

/// Runs a CLI command that must succeed; its output.
fn ctl(fleet: &Fleet, args: &[&str]) -> String {
    let out = cli(&fleet.redis.url(), args);
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Runs a CLI command that must fail; its error output.
fn refused(fleet: &Fleet, args: &[&str]) -> String {
    let out = cli(&fleet.redis.url(), args);
    assert!(!out.status.success(), "{args:?} should fail");
    String::from_utf8(out.stderr).unwrap()
}

fn status_json(fleet: &Fleet) -> Value {
    serde_json::from_str(&ctl(fleet, &["status", "--json"])).unwrap()
}

/// Unit → owners (a unit must have exactly one).
fn owners(t: &MatchingTable) -> BTreeMap<String, Vec<String>> {
    let mut by: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for m in t.rows().keys() {
        for u in t.units_of(m) {
            by.entry(u.to_string()).or_default().push(m.clone());
        }
    }
    by
}

/// Every unit of `all` owned by exactly one member.
fn all_owned_once(t: &MatchingTable, all: &[String]) -> bool {
    let by = owners(t);
    by.len() == all.len() && all.iter().all(|u| by.get(u).is_some_and(|o| o.len() == 1))
}

/// Waits until the holder's own status counts these controls (so that it
/// read them), then `cycles` more cycles.
async fn holder_sees(
    fleet: &Fleet,
    what: &str,
    check: impl Fn(&distributor::core::status::ControlsStatus) -> bool,
) {
    wait_for(what, LIMIT, || async {
        fleet
            .holder()
            .is_some_and(|h| check(&fleet.statuses()[h].controls))
    })
    .await;
    let h = fleet.wait_for_holder().await;
    let from = fleet.statuses()[h].cycles;
    wait_for("two more cycles", LIMIT, || async {
        fleet
            .holder()
            .is_some_and(|h| fleet.statuses()[h].cycles >= from + 2)
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_control_is_applied_through_the_handoff_and_shown() {
    let mut all = units(30);
    let (mut fleet, _) = Fleet::converged(|_| {}, 3, 1, &all).await;
    let (a, b, c) = (fleet.member_id(0), fleet.member_id(1), fleet.member_id(2));

    // Input is checked as the daemon reads it.
    assert!(
        refused(&fleet, &["members", "cordon", "no-port"])
            .contains("invalid member address \"no-port\"")
    );
    assert!(
        refused(&fleet, &["workunits", "pin", "a,b", &a]).contains("invalid work unit \"a,b\"")
    );
    assert!(
        refused(&fleet, &["workunits", "pin", "unit-0000", "x"])
            .contains("invalid member address \"x\"")
    );
    let note = ctl(&fleet, &["members", "cordon", "10.9.9.9:1"]);
    assert!(note.contains("is not listed"), "{note}");
    ctl(&fleet, &["members", "uncordon", "10.9.9.9:1"]);

    // Cordon: a keeps what it holds and gets nothing new, not even a
    // failed member's units.
    let before = fleet.table().await;
    let kept = before.units_of(&a).len();
    assert!(kept > 0);
    assert!(ctl(&fleet, &["members", "cordon", &a]).starts_with(&format!("cordoned {a}")));
    holder_sees(&fleet, "the holder reads the cordon", |c| c.cordoned == 1).await;
    all.extend((0..6).map(|i| format!("new-{i}")));
    fleet.set_units(&all).await;
    fleet.members[2].take().unwrap().abort();
    wait_for("c's and the new units owned by b alone", LIMIT, || async {
        let t = fleet.table().await;
        all_owned_once(&t, &all)
            && !t.rows().contains_key(&c)
            && t.units_of(&b).len() == all.len() - kept
    })
    .await;
    assert_eq!(fleet.table().await.units_of(&a), before.units_of(&a));
    let s = status_json(&fleet);
    assert_eq!(s["controls"]["cordoned"], serde_json::json!([a]), "{s}");
    let row = s["members"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["id"] == *a)
        .unwrap();
    assert_eq!(row["control"], "cordoned", "{row}");
    let text = ctl(&fleet, &["status"]);
    assert!(text.contains(&format!("cordoned: {a}\n")), "{text}");

    // Uncordon: it gets its share again.
    fleet.add_member().await;
    let d = fleet.member_id(3);
    ctl(&fleet, &["members", "uncordon", &a]);
    fleet.wait_for_table(&all, LIMIT).await;

    // Drain: b's units leave through the handoff while it runs; it stays
    // without units until uncordoned.
    assert!(ctl(&fleet, &["members", "drain", &b]).starts_with(&format!("draining {b}")));
    wait_for("b drained", LIMIT, || async {
        let t = fleet.table().await;
        all_owned_once(&t, &all) && t.units_of(&b).is_empty()
    })
    .await;
    holder_sees(&fleet, "the holder counts the drain", |c| c.drained == 1).await;
    let t = fleet.table().await;
    assert!(t.units_of(&b).is_empty() && all_owned_once(&t, &all));
    let s = status_json(&fleet);
    let row = s["members"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["id"] == *b)
        .unwrap();
    assert_eq!(
        (row["live"].clone(), row["control"].clone()),
        (Value::from(true), Value::from("drained")),
        "{row}"
    );
    assert!(
        fleet.members[1]
            .as_ref()
            .unwrap()
            .assignment()
            .borrow()
            .units
            .is_empty()
    );
    ctl(&fleet, &["members", "uncordon", &b]);
    fleet.wait_for_table(&all, LIMIT).await;

    // Pin: a unit of d goes to a, and back when unpinned; a pin to a
    // member that is not live is ignored.
    let t = fleet.table().await;
    let unit = t.units_of(&d)[0].to_string();
    assert!(
        ctl(&fleet, &["workunits", "pin", &unit, &a]).contains(&format!("pinned {unit} to {a}"))
    );
    wait_for("the pinned unit on a", LIMIT, || async {
        let t = fleet.table().await;
        t.units_of(&a).contains(&unit.as_str()) && all_owned_once(&t, &all)
    })
    .await;
    let owner = ctl(&fleet, &["owner", &unit]);
    assert!(
        owner.starts_with(&format!("{unit}: owned by {a} since generation ")),
        "{owner}"
    );
    assert_eq!(status_json(&fleet)["controls"]["pinned"][0]["member"], *a);
    ctl(&fleet, &["workunits", "pin", &unit, "10.9.9.9:1"]);
    fleet.wait_for_table(&all, LIMIT).await;
    assert_eq!(ctl(&fleet, &["workunits", "unpin", &unit]), "unpinned\n");
    assert_eq!(ctl(&fleet, &["workunits", "unpin", &unit]), "not pinned\n");

    // Pause: a newcomer gets nothing, new units and a failed member's are
    // still placed; resume rebalances.
    assert!(ctl(&fleet, &["pause"]).starts_with("paused"));
    holder_sees(&fleet, "the holder reads the pause", |c| c.paused).await;
    let paused = fleet.table().await;
    fleet.add_member().await;
    let e = fleet.member_id(4);
    all.extend((0..4).map(|i| format!("paused-{i}")));
    fleet.set_units(&all).await;
    wait_for("the new units placed", LIMIT, || async {
        let t = fleet.table().await;
        all_owned_once(&t, &all) && t.rows().contains_key(&e)
    })
    .await;
    fleet.members[3].take().unwrap().abort();
    wait_for("d's units placed while paused", LIMIT, || async {
        let t = fleet.table().await;
        all_owned_once(&t, &all) && !t.rows().contains_key(&d)
    })
    .await;
    let t = fleet.table().await;
    for m in [&a, &b] {
        for u in paused.units_of(m) {
            assert!(t.units_of(m).contains(&u), "{m} kept {u} while paused");
        }
    }
    let text = ctl(&fleet, &["status"]);
    assert!(text.contains("paused"), "{text}");
    assert_eq!(ctl(&fleet, &["resume"]), "resumed\n");
    assert_eq!(ctl(&fleet, &["resume"]), "not paused\n");
    let settled = fleet.wait_for_table(&all, LIMIT).await;
    assert!(
        !settled.units_of(&e).is_empty(),
        "the newcomer gets units after resume"
    );

    // An entry nobody can read is skipped and counted; nothing else moves.
    let () = fleet
        .redis
        .cmd(&["HSET", &keys().controls, "member:junk", "cordon"])
        .await;
    holder_sees(&fleet, "the unreadable entry counted", |c| {
        c.unreadable == 1
    })
    .await;
    assert_eq!(fleet.table().await, settled);
    assert_eq!(status_json(&fleet)["controls"]["unreadable"], 1);
    fleet.shutdown().await;
}
