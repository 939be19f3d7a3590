//! Tests of the what-if: the prediction against the solver called directly
//! (as the holder calls it), the counts against the changes listed, and the
//! rules the holder adds around the solve (rows of draining members, units
//! in transit at their destination, batches under a move limit).

use proptest::prelude::*;

use super::*;
use crate::core::controls::MemberControl;
use crate::core::inputs::Group;

fn names(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}{i:03}")).collect()
}

fn addrs(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("10.0.0.{}:7001", i + 1)).collect()
}

/// A fleet of `members` live members holding the table `mode` solves for
/// `units`, settled (the solve from it returns it).
fn settled(members: &[String], units: &[String], mode: Mode) -> Fleet {
    let mut fleet = Fleet {
        inputs: Inputs::one_group("g", members, units),
        keeps_units: members.iter().cloned().collect(),
        ..Fleet::default()
    };
    fleet.granted = predict(&fleet, mode).table;
    fleet
}

fn sticky() -> Mode {
    Mode {
        assignment: Assignment::Sticky,
        ..Mode::default()
    }
}

/// The solver called as the holder calls it in plain modes: the live
/// members, weights 1, the granted table where the mode reads it.
fn direct(fleet: &Fleet, mode: Mode) -> MatchingTable {
    let how = Solve {
        assignment: mode.assignment,
        current: Some(&fleet.granted).filter(|_| mode.assignment == Assignment::Sticky),
        ..Solve::ring()
    };
    MatchingTable::solve_with(&fleet.inputs, |m| fleet.eligible(m), &how)
}

#[test]
fn a_sticky_leave_places_the_leavers_units_and_moves_nothing_else() {
    let members = addrs(5);
    let mut fleet = settled(&members, &names("u", 103), sticky());
    let leaver = &members[2];
    let held = fleet.granted.units_of(leaver).len();
    fleet.keeps_units.remove(leaver);
    let p = predict(&fleet, sticky());
    assert_eq!(p.table, direct(&fleet, sticky()));
    assert!(!p.table.rows().contains_key(leaver));
    assert_eq!(
        p.moves,
        Some(Moves {
            moved: 0,
            minimum: 0,
            placed: held
        })
    );
    assert_eq!(p.changes.len(), held);
    assert!(
        p.changes
            .iter()
            .all(|c| c.kind == Kind::Placed && c.from == [leaver.clone()])
    );
    assert_eq!((p.batches, p.converged), (1, true));
    let after: usize = p.members.iter().map(|m| m.after).sum();
    assert_eq!(after, 103);
    assert_eq!(p.groups[0].members, 4);
    assert!(p.groups[0].max_off_share < 1.0, "{:?}", p.groups);
}

#[test]
fn a_ring_join_is_counted_though_the_holder_does_not_count_it() {
    let members = addrs(4);
    let mut fleet = settled(&members, &names("u", 200), Mode::default());
    let newcomer = "10.0.0.99:7001".to_string();
    fleet.inputs.groups[0].members.push(newcomer.clone());
    fleet.inputs.groups[0].members.sort();
    fleet.keeps_units.insert(newcomer.clone());
    // The holder's own solve does not count ring moves.
    assert_eq!(solve_as_holder(&fleet, Mode::default()).1, None);
    let p = predict(&fleet, Mode::default());
    assert_eq!(p.table, direct(&fleet, Mode::default()));
    let m = p.moves.expect("counted");
    let moved = p.changes.iter().filter(|c| c.kind == Kind::Moved).count();
    assert_eq!((m.moved, m.placed), (moved, 0));
    assert_eq!(p.changes.len(), moved);
    assert!(m.moved >= m.minimum && m.minimum == p.table.units_of(&newcomer).len());
    assert!(p.changes.iter().any(|c| c.to.as_deref() == Some(&newcomer)));
}

#[test]
fn a_draining_member_keeps_an_empty_row_and_a_cordoned_one_its_units() {
    let members = addrs(4);
    let mut fleet = settled(&members, &names("u", 60), sticky());
    let (cordoned, draining, leaver) = (&members[0], &members[1], &members[2]);
    let kept = fleet.granted.units_of(cordoned).len();
    fleet
        .controls
        .members
        .insert(cordoned.clone(), (MemberControl::Cordon, None));
    fleet.draining.insert(draining.clone());
    fleet.keeps_units.remove(leaver);
    let p = predict(&fleet, sticky());
    assert_eq!(p.table.rows().get(draining).map(String::as_str), Some(""));
    assert!(!p.table.rows().contains_key(leaver));
    assert_eq!(p.table.units_of(cordoned).len(), kept);
    // Everything else went to the one member left to receive units.
    assert_eq!(p.table.units_of(&members[3]).len(), 60 - kept);
    let drained = p.members.iter().find(|m| &m.member == draining).unwrap();
    assert_eq!(
        (drained.after, drained.eligible, drained.share),
        (0, false, None)
    );
}

#[test]
fn a_unit_in_transit_counts_as_its_destinations() {
    let members = addrs(4);
    let mut fleet = settled(&members, &names("u", 30), sticky());
    // members[3] left; the holder wrote all of its units to their next
    // owners but one, still in transit to where the solve put it.
    fleet.keeps_units.remove(&members[3]);
    let done = predict(&fleet, sticky()).table;
    let unit = fleet.granted.units_of(&members[3])[0].to_string();
    let to = done
        .rows()
        .iter()
        .find(|(_, v)| decode_row(v).contains(&unit.as_str()))
        .map(|(m, _)| m.clone())
        .unwrap();
    let rows = done.rows().iter().map(|(m, v)| {
        let row: Vec<&str> = decode_row(v).into_iter().filter(|u| *u != unit).collect();
        (m.clone(), row.join(","))
    });
    fleet.granted = MatchingTable::from_rows(rows);
    fleet.transit.push(InTransit {
        group: "g".into(),
        unit: unit.clone(),
        from: vec![members[3].clone()],
        to: Some(to.clone()),
    });
    let p = predict(&fleet, sticky());
    assert_eq!(p.table, done);
    assert!(p.changes.is_empty(), "{:?}", p.changes);
    assert_eq!(p.moves.map(|m| m.moved + m.placed), Some(0));
    let dest = p.members.iter().find(|m| m.member == to).unwrap();
    assert_eq!(
        dest.before, dest.after,
        "the unit counts as its destination's"
    );
}

#[test]
fn under_a_move_limit_the_batches_end_where_the_ring_does() {
    let members = addrs(5);
    let mut fleet = settled(&members[..4], &names("u", 100), Mode::default());
    fleet.inputs = Inputs::one_group("g", &members, &names("u", 100));
    fleet.keeps_units.insert(members[4].clone());
    let limited = Mode {
        max_moves: 3,
        ..Mode::default()
    };
    let p = predict(&fleet, limited);
    assert_eq!(p.table, direct(&fleet, Mode::default()));
    assert!(p.converged && p.batches > 1, "{} batches", p.batches);
    let first = solve_as_holder(&fleet, limited).1.expect("counted");
    assert_eq!(first.moved, 3);
    // Over the batches: every unit whose owner differs at the end.
    let m = p.moves.expect("counted");
    let moved = p.changes.iter().filter(|c| c.kind == Kind::Moved).count();
    assert_eq!((m.moved, m.placed), (moved, 0));
    assert!(moved >= p.table.units_of(&members[4]).len());
}

#[test]
fn weights_change_the_shares() {
    let members = addrs(3);
    let mut fleet = settled(&members, &names("u", 90), sticky());
    fleet.weights.insert(members[0].clone(), 4);
    let p = predict(&fleet, sticky());
    assert_eq!(p.table.units_of(&members[0]).len(), 60);
    let m0 = p.members.iter().find(|m| m.member == members[0]).unwrap();
    assert_eq!(
        (m0.before, m0.after, m0.weight, m0.share),
        (30, 60, 4, Some(60.0))
    );
    assert_eq!(p.moves.map(|m| (m.moved, m.minimum)), Some((30, 30)));
}

#[test]
fn several_groups_are_planned_each_on_its_own() {
    let units = names("u", 20);
    let mut fleet = Fleet {
        inputs: Inputs {
            groups: vec![
                Group {
                    name: "a".into(),
                    members: addrs(2),
                    malformed: vec![],
                },
                Group {
                    name: "b".into(),
                    members: vec!["10.0.1.1:7001".into(), "10.0.1.2:7001".into()],
                    malformed: vec![],
                },
            ],
            units: units.clone().into(),
            rejections: vec![],
        },
        ..Fleet::default()
    };
    fleet.keeps_units = fleet.inputs.members().map(str::to_string).collect();
    fleet.granted = predict(&fleet, sticky()).table;
    fleet.keeps_units.remove("10.0.1.1:7001");
    let p = predict(&fleet, sticky());
    assert_eq!(p.table.units_of("10.0.1.2:7001").len(), 20);
    assert!(p.changes.iter().all(|c| c.group == "b"));
    assert_eq!(p.groups.len(), 2);
    assert_eq!((p.groups[1].min, p.groups[1].max), (20, 20));
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Whatever the mode and the change, the prediction is the solve the
    /// holder makes next (one batch without a limit), the listed changes
    /// are exactly the units whose owner differs, and they add up to the
    /// counts.
    #[test]
    fn the_prediction_is_the_holders_next_solve_and_its_changes_add_up(
        n in 1usize..7,
        units in 0usize..80,
        leave in proptest::collection::vec(any::<bool>(), 7),
        join in 0usize..3,
        sticky_mode in any::<bool>(),
        weight in 1u32..5,
    ) {
        let mode = if sticky_mode { sticky() } else { Mode::default() };
        let members = addrs(n + join);
        let mut fleet = settled(&members[..n], &names("u", units), mode);
        fleet.inputs = Inputs::one_group("g", &members, &names("u", units));
        for (i, m) in members.iter().enumerate() {
            if i >= n || !leave[i] {
                fleet.keeps_units.insert(m.clone());
            } else {
                fleet.keeps_units.remove(m);
            }
        }
        fleet.weights.insert(members[0].clone(), weight);
        let p = predict(&fleet, mode);
        prop_assert_eq!(&p.table, &solve_as_holder(&fleet, mode).0);
        prop_assert!(p.converged && p.batches == 1);
        let owner = |t: &MatchingTable, u: &str| {
            t.rows().iter().find(|(_, v)| decode_row(v).contains(&u)).map(|(m, _)| m.clone())
        };
        let differ: Vec<&String> = fleet
            .inputs
            .units
            .iter()
            .filter(|u| owner(&fleet.granted, u) != owner(&p.table, u))
            .collect();
        let listed: Vec<&String> = p.changes.iter().map(|c| &c.unit).collect();
        prop_assert_eq!(differ, listed);
        let m = p.moves.expect("counted");
        let count = |k: Kind| p.changes.iter().filter(|c| c.kind == k).count();
        prop_assert_eq!((m.moved, m.placed), (count(Kind::Moved), count(Kind::Placed)));
        prop_assert!(m.moved >= m.minimum);
    }
}
