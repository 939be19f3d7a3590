//! The reports, from an [`Overview`] to their JSON and text.

use super::*;
use crate::core::status::Overview;
use std::time::Duration;

fn overview() -> Overview {
    let s = |a: &str, b: &str| (a.to_string(), b.to_string());
    Overview {
        meta: [
            s("generation", "7"),
            s("holder", "r1"),
            s("written_at_ms", "1000"),
            s("epoch", "3"),
            s("writer", "r1"),
            s("failure_threshold", "2"),
            s("assignment", "sticky"),
            s("last_change", "moved=3 minimum=3 placed=1"),
            s("holder_conn", "tok 42"),
        ]
        .into(),
        lease_pttl: Some(Duration::from_millis(1500)),
        lease_token: Some("tok".into()),
        epoch: 3,
        replicas: [s("r1", "0 2 9000"), s("r2", "- - 9500")].into(),
        liveness: [
            s("h:1", "1 0 0"),
            s("h:2", "1 1 8000"),
            s("h:3", "1 2 5000"),
            s("h:4", "0 1 9000 unavailable: connection refused"),
        ]
        .into(),
        table: [s("h:1", "a,b"), s("h:2", "c")].into(),
        units: ["a", "b", "c", "", "x,y"]
            .iter()
            .map(|u| u.as_bytes().to_vec())
            .collect(),
        groups: vec![(
            "g".into(),
            ["h:1", "h:2", "h:3", "h:4", "h:5", "bad", "h:1"]
                .iter()
                .map(|m| m.as_bytes().to_vec())
                .collect(),
        )],
        reports: Default::default(),
        transit: Default::default(),
        weights: Default::default(),
        costs: Default::default(),
        loads: Default::default(),
        controls: Default::default(),
        quarantine: Default::default(),
    }
}

#[test]
fn a_table_balanced_by_cost_reports_loads_shares_and_hot_units() {
    let s = |a: &str, b: &str| (a.to_string(), b.to_string());
    let mut o = overview();
    o.meta
        .insert("assignment".into(), "cost tolerance=10%".into());
    o.units = ["a", "b", "c", "big"]
        .iter()
        .map(|u| u.as_bytes().to_vec())
        .collect();
    o.groups = vec![(
        "g".into(),
        vec![b"h:1".to_vec(), b"h:2".to_vec(), b"h:3".to_vec()],
    )];
    o.liveness = [s("h:1", "1 0 0"), s("h:2", "1 0 0"), s("h:3", "1 0 0")].into();
    o.table = [s("h:1", "a,b"), s("h:2", "c"), s("h:3", "big")].into();
    o.costs = [
        s("a", "1"),
        s("b", "1"),
        s("c", "2"),
        s("big", "100"),
        s("x", "junk"),
    ]
    .into();
    let r = status(&o, "t", 10_000);
    let b = r.balance.as_ref().expect("balanced by cost");
    assert_eq!(b.tolerance, "10%");
    assert_eq!(b.hot_units, ["big"]);
    assert_eq!(
        (b.declared_costs, b.invalid_costs, b.out_of_band),
        (4, 1, 0)
    );
    let load = |id: &str| {
        r.groups[0]
            .live
            .iter()
            .find(|m| m.id == id)
            .unwrap()
            .load
            .clone()
            .unwrap()
    };
    assert_eq!((load("h:1").load, load("h:1").share), (2.0, 2.0));
    assert_eq!(load("h:3").hot, ["big"]);
    assert!(render_status(&r).contains("h:1                          2 units, load 2 of share 2"));
    assert!(render_status(&r).contains(
        "hot units (costlier than any share, each alone on a member where possible): big"
    ));
    // Balanced by measured load: the newest report of each unit counts.
    o.meta
        .insert("assignment".into(), "load tolerance=5%".into());
    o.loads = [
        s("h:1", "10 a=1,b=1"),
        s("h:2", "10 c=2"),
        s("h:3", "10 big=100"),
        s("h:9", "x"),
    ]
    .into();
    let r = status(&o, "t", 10_000);
    let b = r.balance.as_ref().expect("balanced by load");
    assert_eq!((b.by.as_str(), b.tolerance.as_str()), ("load", "5%"));
    assert_eq!((b.hot_units.len(), b.invalid_costs), (1, 1));
    assert!(render_status(&r).contains("balance by load (tolerance 5%)"));
    // Count mode reports none of it.
    let plain = status(&overview(), "t", 10_000);
    assert!(plain.balance.is_none());
    assert!(plain.groups[0].live.iter().all(|m| m.load.is_none()));
}

#[test]
fn status_json_is_the_api_summary_plus_every_member_row() {
    let r = status(&overview(), "t", 10_000);
    let json = serde_json::to_value(r.json()).unwrap();
    let summary = serde_json::to_value(r.summary()).unwrap();
    let (json, summary) = (json.as_object().unwrap(), summary.as_object().unwrap());
    // The summary's fields and the members: nothing else.
    let mut keys: Vec<&str> = summary.keys().map(String::as_str).collect();
    keys.push("members");
    keys.sort();
    assert_eq!(json.keys().map(String::as_str).collect::<Vec<_>>(), keys);
    for (k, v) in summary {
        assert_eq!(&json[k], v, "{k}");
    }
    // Groups counted, as /api/status counts them.
    for (g, counts) in r.groups.iter().zip(r.summary().groups) {
        assert_eq!((g.live.len(), g.failed.len()), (counts.live, counts.failed));
    }
    assert_eq!(json["groups"][0]["live"], 2);
    // Every member once, as /api/members shows it, with its group.
    let rows = r.member_rows();
    assert_eq!(json["members"], serde_json::to_value(&rows).unwrap());
    let n: usize = r.groups.iter().map(|g| g.live.len() + g.failed.len()).sum();
    assert_eq!(rows.len(), n);
    let row = serde_json::to_value(&rows[0]).unwrap();
    let listed = r.groups.iter().flat_map(|g| g.live.iter().chain(&g.failed));
    let m = listed
        .into_iter()
        .find(|m| m.id == rows[0].member.id)
        .unwrap();
    for (k, v) in serde_json::to_value(m).unwrap().as_object().unwrap() {
        assert_eq!(&row[k], v, "{k}");
    }
    let live = r.groups[0].live.iter().any(|l| l.id == m.id);
    assert_eq!((&row["group"], &row["live"]), (&"g".into(), &live.into()));
}

#[test]
fn status_sorts_members_into_live_and_failed_with_reasons() {
    let r = status(&overview(), "t", 10_000);
    assert_eq!(r.generation, 7);
    assert_eq!(r.lease.holder.as_deref(), Some("r1"));
    assert_eq!(r.lease.expires_in_ms, Some(1500));
    assert_eq!(r.work_units, 3);
    assert_eq!(r.invalid_work_units, 2);
    let g = &r.groups[0];
    let ids = |v: &[MemberReport]| v.iter().map(|m| m.id.clone()).collect::<Vec<_>>();
    assert_eq!(
        ids(&g.live),
        ["h:1", "h:2"],
        "one failure of two is still live"
    );
    assert_eq!(ids(&g.failed), ["h:3", "h:4", "h:5", "bad"]);
    assert_eq!(
        g.failed[0].reason.as_deref(),
        Some("pings failing (at least 2 in a row)")
    );
    assert_eq!(g.failed[0].failing_for_ms, Some(5000));
    assert_eq!(
        g.failed[1].reason.as_deref(),
        Some("has never answered a ping: unavailable: connection refused")
    );
    assert_eq!(g.failed[2].reason.as_deref(), Some("not pinged yet"));
    assert!(
        g.failed[3]
            .reason
            .as_deref()
            .unwrap()
            .starts_with("malformed address")
    );
    assert_eq!(
        r.replicas[0],
        ReplicaReport {
            id: "r1".into(),
            index: Some(0),
            replicas: Some(2),
            seen_ms_ago: 1000,
            blocked: None,
            recovering: None,
        }
    );
    assert_eq!(r.replicas[1].index, None);
    let text = render_status(&r);
    assert!(text.contains("lease held by r1, epoch 3"), "{text}");
    assert!(text.contains("takeover: fast\n"), "{text}");
    assert!(text.contains("group g: 2 live, 4 failed"), "{text}");
    assert!(
        text.contains("assignment sticky; last change: 3 moved (minimum 3), 1 placed"),
        "{text}"
    );
    assert_eq!(g.live[0].weight, 1, "no report: weight 1");
}

#[test]
fn status_reads_the_lists_as_the_daemon_does() {
    // The daemon keeps a member listed in two groups in the first by name
    // (not by configuration order), treats malformed entries as failing
    // even when listed twice, and counts distinct invalid units.
    let mut o = overview();
    let list = |v: &[&str]| v.iter().map(|m| m.as_bytes().to_vec()).collect();
    o.groups = vec![
        ("zeta".into(), list(&["h:1", "h:2", "bad"])),
        ("alpha".into(), list(&["h:1", "bad"])),
    ];
    o.units = list(&["a", "", "", "x,y"]);
    let r = status(&o, "t", 10_000);
    let zeta = &r.groups[0];
    assert_eq!(zeta.name, "zeta", "configuration order is kept for display");
    let ids = |v: &[MemberReport]| v.iter().map(|m| m.id.clone()).collect::<Vec<_>>();
    assert_eq!(ids(&zeta.live), ["h:2"]);
    assert_eq!(ids(&zeta.failed), ["bad", "h:1"]);
    assert!(
        zeta.failed[0]
            .reason
            .as_deref()
            .unwrap()
            .starts_with("malformed address")
    );
    assert!(
        zeta.failed[1]
            .reason
            .as_deref()
            .unwrap()
            .contains("works for \"alpha\""),
        "{:?}",
        zeta.failed[1]
    );
    assert_eq!(ids(&r.groups[1].live), ["h:1"]);
    assert_eq!((r.work_units, r.invalid_work_units), (1, 2));
}

#[test]
fn a_holder_without_a_connection_record_is_replaced_after_its_ttl() {
    // A record of an earlier holding (another token), or none at all.
    for conn in [Some("old 42"), Some("tok "), None] {
        let mut o = overview();
        match conn {
            Some(c) => o.meta.insert("holder_conn".into(), c.into()),
            None => o.meta.remove("holder_conn"),
        };
        let r = status(&o, "t", 10_000);
        let t = r.lease.takeover.as_deref().unwrap();
        assert!(
            t.starts_with("ttl (the holder recorded no lease connection"),
            "{t}"
        );
        assert!(render_status(&r).contains("takeover: ttl ("));
    }
}

#[test]
fn a_holder_that_blocks_or_recovers_says_so_under_its_replica() {
    use crate::core::census::{HolderNote, note_suffix};
    let mut o = overview();
    let recovering = HolderNote::Recovering("3.1 (the table was written on another server)");
    o.replicas.insert(
        "r1".into(),
        format!("0 2 9000 7{}", note_suffix(&recovering)),
    );
    o.replicas.insert(
        "r2".into(),
        format!(
            "1 2 9500 7{}",
            note_suffix(&HolderNote::Blocked("cannot read t:held"))
        ),
    );
    let r = status(&o, "t", 10_000);
    let by_id = |id: &str| r.replicas.iter().find(|x| x.id == id).unwrap().clone();
    assert_eq!(
        by_id("r1").recovering.as_deref(),
        Some("3.1 (the table was written on another server)")
    );
    assert_eq!(by_id("r1").blocked, None);
    assert_eq!(by_id("r2").blocked.as_deref(), Some("cannot read t:held"));
    assert_eq!(by_id("r2").recovering, None);
    let text = render_status(&r);
    assert!(
        text.contains(
            "    recovering from state Redis may have lost: 3.1 (the table was written on another server)\n"
        ),
        "{text}"
    );
    assert!(
        text.contains("    not acting: cannot read t:held\n"),
        "{text}"
    );
}

#[test]
fn a_free_lease_has_no_holder() {
    let mut o = overview();
    o.lease_pttl = None;
    let r = status(&o, "t", 10_000);
    assert_eq!(r.lease.holder, None);
    assert_eq!(r.lease.takeover, None, "nobody to take over from");
    assert!(render_status(&r).contains("lease free"));
}

#[test]
fn table_report_counts_shares_and_balance() {
    let r = table(&overview(), "t");
    assert_eq!(r.total, 2);
    assert_eq!(r.assignments, 3);
    assert_eq!((r.min, r.max, r.balance), (1, 2, 1));
    assert!((r.rows[0].share - 66.666).abs() < 0.01);
    let text = render_table(&r);
    assert!(
        text.contains("2 members, 3 assignments, min 1 max 2 (balance 1), generation 7"),
        "{text}"
    );
    assert!(text.contains("assignment sticky; last change"), "{text}");
    let mut o = overview();
    o.reports.insert("h:1".into(), "4 0 3000 5".to_string());
    assert_eq!(table(&o, "t").rows[0].weight, 5);
    // An operator's override beats the report; an unreadable one does not.
    o.weights.insert("h:1".into(), "9".to_string());
    assert_eq!(table(&o, "t").rows[0].weight, 9);
    let text = render_status(&status(&o, "t", 10_000));
    assert!(text.contains("weight 9 (override; reported 5)"), "{text}");
    o.weights.insert("h:1".into(), "0".to_string());
    assert_eq!(table(&o, "t").rows[0].weight, 5);
    o.weights.insert("h:2".into(), "3".to_string());
    assert_eq!(table(&o, "t").rows[1].weight, 3, "no report");
}

/// A member's applied generation behind the table is normal unless it owes
/// acknowledgements: the status says which.
#[test]
fn a_member_behind_the_table_says_whether_it_owes_acknowledgements() {
    let s = |a: &str, b: &str| (a.to_string(), b.to_string());
    let mut o = overview();
    o.reports = [s("h:1", "5 0 10000 1"), s("h:2", "4 0 10000 1")].into();
    o.transit = [(
        crate::core::handoff::transit_field("g", "d"),
        "6 9000 h:2 h:1".to_string(),
    )]
    .into();
    let r = status(&o, "t", 10_000);
    let g = &r.groups[0];
    let owes = |id: &str| {
        g.live
            .iter()
            .find(|m| m.id == id)
            .and_then(|m| m.protocol.as_ref())
            .map(|p| (p.applied, p.behind, p.owes))
    };
    assert_eq!(owes("h:1"), Some((5, 2, 1)), "revoked at 6, above its 5");
    assert_eq!(owes("h:2"), Some((4, 3, 0)), "the receiver owes nothing");
    let text = render_status(&r);
    assert!(
        text.contains("applied 5 (table at 7; owes the acknowledgement of 1 units in transit)"),
        "{text}"
    );
    assert!(
        text.contains("applied 4 (table at 7; owes nothing: only a generation that takes units from it needs a report)"),
        "{text}"
    );
}

/// Members failing for long get a hint, once per group: they stay listed
/// and pinged until removed or forgotten.
#[test]
fn members_failing_for_long_get_a_hint() {
    let text = render_status(&status(&overview(), "t", 10_000));
    assert!(!text.contains("hint:"), "5 s is not long: {text}");
    // h:3 failing since 5 s (601 s at 606 s), h:4 since 9 s (597 s).
    let r = status(&overview(), "t", 606_000);
    let text = render_status(&r);
    assert!(
        text.contains("  hint: 1 failed for 10 minutes or more; a failed member stays listed and pinged until it is removed (distributor services remove g ADDR) or forgotten (-forget-after)\n"),
        "{text}"
    );
}
