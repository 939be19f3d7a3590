//! Tests of the what-if report: the request's checks (each error names its
//! flag and value), the fleet read as the holder reads it, the mode's
//! source, the rendering, and no panic on any request.

use proptest::prelude::*;

use super::*;
use crate::core::table::MatchingTable;
use crate::report::render_plan;

const A: &str = "10.0.0.1:7001";
const B: &str = "10.0.0.2:7001";
const C: &str = "10.0.0.3:7001";

fn units(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("u{i:03}")).collect()
}

/// An overview of one group `g` of live members `members` holding the
/// sticky table of `n` units, as a holder in sticky mode leaves it.
fn overview(members: &[&str], n: usize) -> Overview {
    let names: Vec<String> = members.iter().map(|m| m.to_string()).collect();
    let inputs = crate::core::inputs::Inputs::one_group("g", &names, &units(n));
    let how = crate::core::table::Solve {
        assignment: Assignment::Sticky,
        current: Some(&MatchingTable::default()),
        ..crate::core::table::Solve::ring()
    };
    let table = MatchingTable::solve_with(&inputs, |_| true, &how);
    let mut o = Overview {
        table: table.rows().clone(),
        units: units(n).into_iter().map(String::into_bytes).collect(),
        groups: vec![(
            "g".into(),
            members.iter().map(|m| m.as_bytes().to_vec()).collect(),
        )],
        lease_pttl: Some(Duration::from_secs(1)),
        ..Overview::default()
    };
    o.meta.insert("assignment".into(), "sticky".into());
    o.meta.insert("generation".into(), "7".into());
    for m in members {
        o.liveness.insert(m.to_string(), "1 0 0".into());
    }
    o
}

fn request() -> PlanRequest {
    PlanRequest::default()
}

fn run(o: &Overview, r: &PlanRequest) -> Result<PlanReport, PlanError> {
    plan(o, "t", r, &PlanSettings::default(), 1, true)
}

#[test]
fn a_leave_is_planned_with_the_holders_recorded_mode() {
    let o = overview(&[A, B, C], 30);
    let r = run(
        &o,
        &PlanRequest {
            leave: vec![B.into()],
            ..request()
        },
    )
    .unwrap();
    assert_eq!(
        (r.assignment.as_str(), r.assignment_from),
        ("sticky", "holder")
    );
    assert_eq!(r.generation, 7);
    assert_eq!(r.changes.leave, [B]);
    assert_eq!(
        r.moves.map(|m| (m.moved, m.minimum, m.placed)),
        Some((0, 0, 10))
    );
    assert_eq!(r.units_changed, 10);
    let rows = r.rows.as_ref().unwrap();
    assert!(!rows.contains_key(B));
    assert_eq!(rows.len(), 2);
    let text = render_plan(&r);
    assert!(text.contains("changes: leave 10.0.0.2:7001"), "{text}");
    assert!(
        text.contains(
            "result: 10 units change owner: 0 moved between members that stay (minimum 0), 10 placed"
        ),
        "{text}"
    );
    assert!(text.contains("units that change owner (10):"), "{text}");
    // Nothing to do: the table as it is, no change.
    let r = run(&o, &request()).unwrap();
    assert_eq!(r.units_changed, 0);
    assert_eq!(r.rows.unwrap(), o.table);
}

#[test]
fn without_a_recorded_mode_the_flags_decide() {
    let mut o = overview(&[A, B], 10);
    o.meta.remove("assignment");
    let r = run(&o, &request()).unwrap();
    assert_eq!(
        (r.assignment.as_str(), r.assignment_from),
        ("ring", "flags")
    );
    assert!(r.notes.iter().any(|n| n.contains("records no mode")));
    o.meta
        .insert("assignment".into(), "cost tolerance=5%".into());
    let r = run(&o, &request()).unwrap();
    assert_eq!(
        (r.assignment.as_str(), r.assignment_from),
        ("cost tolerance=5%", "holder")
    );
}

#[test]
fn joins_weights_and_cordons_apply_as_the_holder_would_see_them() {
    let mut o = overview(&[A, B], 40);
    // An override for the newcomer's address beats the weight it reports.
    o.weights.insert(C.into(), "3".into());
    let r = run(
        &o,
        &PlanRequest {
            join: vec![format!("{C}:2")],
            cordon: vec![A.into()],
            ..request()
        },
    )
    .unwrap();
    assert_eq!(
        r.changes.join,
        [MemberWeight {
            member: C.into(),
            weight: 3
        }]
    );
    let rows = r.rows.unwrap();
    // A is cordoned: it keeps its 20; B and C split the rest by weight.
    assert_eq!(rows[A], o.table[A]);
    let count = |m: &str| rows[m].split(',').filter(|u| !u.is_empty()).count();
    assert_eq!(count(A) + count(B) + count(C), 40);
    assert!(count(C) > count(B), "{rows:?}");
    let r = run(
        &o,
        &PlanRequest {
            weight: vec![format!("{A}=3")],
            ..request()
        },
    )
    .unwrap();
    assert_eq!(r.moves.map(|m| m.moved), Some(10));
}

#[test]
fn the_fleet_is_read_as_the_holder_reads_it() {
    let mut o = overview(&[A, B, C], 30);
    o.meta.insert("failure_threshold".into(), "2".into());
    // A: one failure under a threshold of 2: live. B: failed, but it has a
    // row: a suspect, it keeps its units. C: drains by its report.
    o.liveness.insert(A.into(), "1 1 5".into());
    o.liveness.insert(B.into(), "1 2 5".into());
    o.reports.insert(C.into(), "3 1 5000 1".into());
    let fleet = fleet_of(&o, Balance::Count, 1);
    assert!(fleet.eligible(A) && fleet.eligible(B) && !fleet.eligible(C));
    assert!(fleet.keeps_units.contains(C));
    o.table.remove(B);
    assert!(!fleet_of(&o, Balance::Count, 1).keeps_units.contains(B));
    // A unit in transit, with its destination.
    o.transit
        .insert("u001,g".into(), format!("9 100 {A} {B} 500 r"));
    o.transit.insert("junk".into(), "x".into());
    let fleet = fleet_of(&o, Balance::Count, 1);
    assert_eq!(
        fleet.transit,
        [InTransit {
            group: "g".into(),
            unit: "u001".into(),
            from: vec![B.into()],
            to: Some(A.into()),
        }]
    );
}

#[test]
fn every_refusal_names_the_flag_and_the_value() {
    let o = overview(&[A, B], 10);
    let err = |r: PlanRequest| run(&o, &r).unwrap_err().to_string();
    let e = err(PlanRequest {
        leave: vec!["10.9.9.9:7001".into()],
        ..request()
    });
    assert_eq!(
        e,
        "--leave 10.9.9.9:7001: not listed in any services list (g)"
    );
    let e = err(PlanRequest {
        cordon: vec!["nope".into()],
        ..request()
    });
    assert!(
        e.starts_with("invalid --cordon \"nope\": not a member address"),
        "{e}"
    );
    let e = err(PlanRequest {
        weight: vec![format!("{A}")],
        ..request()
    });
    assert!(e.contains("--weight") && e.contains("ADDR=WEIGHT"), "{e}");
    let e = err(PlanRequest {
        weight: vec![format!("{A}=0")],
        ..request()
    });
    assert!(e.contains("from 1 to 1000"), "{e}");
    let e = err(PlanRequest {
        join: vec![format!("{C}:1001")],
        ..request()
    });
    assert!(
        e.starts_with("invalid --join") && e.contains("1 to 1000"),
        "{e}"
    );
    let e = err(PlanRequest {
        join: vec![A.into()],
        ..request()
    });
    assert!(e.contains("already a live member of g"), "{e}");
    let e = err(PlanRequest {
        leave: vec![A.into()],
        cordon: vec![A.into()],
        ..request()
    });
    assert_eq!(e, "--cordon 10.0.0.1:7001: it also leaves (--leave)");
    let e = err(PlanRequest {
        weight: vec![format!("{A}=2"), format!("{A}=3")],
        ..request()
    });
    assert!(e.contains("given twice"), "{e}");
    let e = err(PlanRequest {
        join: vec![C.into()],
        group: Some("other".into()),
        ..request()
    });
    assert!(e.starts_with("invalid --group \"other\""), "{e}");
    // Two lists: a new member must say which.
    let mut two = overview(&[A, B], 10);
    two.groups.push(("h".into(), vec![]));
    let e = plan(
        &two,
        "t",
        &PlanRequest {
            join: vec![C.into()],
            ..request()
        },
        &PlanSettings::default(),
        1,
        true,
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("--group (g, h)"), "{e}");
    let r = plan(
        &two,
        "t",
        &PlanRequest {
            join: vec![C.into()],
            group: Some("h".into()),
            ..request()
        },
        &PlanSettings::default(),
        1,
        true,
    )
    .unwrap();
    assert_eq!(r.rows.unwrap()[C].split(',').count(), 10);
}

#[test]
fn an_ipv6_member_joins_with_or_without_a_weight() {
    assert_eq!(join_of("[::1]:7001").unwrap(), ("[::1]:7001".into(), None));
    assert_eq!(
        join_of("[::1]:7001:4").unwrap(),
        ("[::1]:7001".into(), Some(4))
    );
    assert_eq!(join_of("h:7001:4").unwrap(), ("h:7001".into(), Some(4)));
    assert!(join_of("h:70012").unwrap_err().to_string().contains("port"));
}

#[test]
fn the_text_lists_the_first_units_and_counts_the_rest() {
    let o = overview(&[A, B], 200);
    let r = run(
        &o,
        &PlanRequest {
            leave: vec![A.into()],
            ..request()
        },
    )
    .unwrap();
    let text = render_plan(&r);
    assert_eq!(r.units_changed, 100);
    assert!(text.contains("  and 50 more\n"), "{text}");
    // The API's form: the first units, no rows.
    let api = plan(
        &o,
        "t",
        &PlanRequest {
            leave: vec![A.into()],
            ..request()
        },
        &PlanSettings::default(),
        1,
        false,
    )
    .unwrap();
    assert!(api.rows.is_none() && api.units.len() == 100);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// Any request gives a report or an error naming a flag, never a panic.
    #[test]
    fn any_request_gives_a_result(
        leave in proptest::collection::vec("\\PC{0,16}|10\\.0\\.0\\.[1-4]:7001", 0..3),
        join in proptest::collection::vec("\\PC{0,16}|10\\.0\\.0\\.[1-4]:7001(:[0-9]{1,4})?", 0..3),
        weight in proptest::collection::vec("\\PC{0,16}|10\\.0\\.0\\.[1-4]:7001=[0-9]{1,4}", 0..3),
        cordon in proptest::collection::vec("\\PC{0,16}|10\\.0\\.0\\.[1-4]:7001", 0..3),
        group in proptest::option::of("g|h|\\PC{0,4}"),
    ) {
        let o = overview(&[A, B, C], 25);
        let r = PlanRequest { leave, join, weight, cordon, group };
        match run(&o, &r) {
            Ok(report) => {
                let rows = report.rows.unwrap();
                let assigned: usize = rows.values().map(|v| crate::core::row::decode_row(v).len()).sum();
                // Every unit at most once; all of them unless nobody can take them.
                prop_assert!(assigned <= 25);
                let receivers = report.members.iter().any(|m| m.eligible && !report.changes.cordon.contains(&m.member));
                if receivers {
                    prop_assert_eq!(assigned, 25);
                }
            }
            Err(e) => prop_assert!(e.to_string().contains("--"), "{}", e),
        }
    }
}
