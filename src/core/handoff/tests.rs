//! Tests of the handoff planner: one per rule, and a simulation of a holder
//! (with failovers) and members that follow the protocol or the old one, with
//! random read delays, slow stops, pauses, deaths, drains, Redis cuts and
//! unit churn, checking at every step that no unit is worked on by two
//! members.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use std::time::Instant;

use super::*;

/// A row's units.
fn decode(row: &str) -> impl Iterator<Item = &str> {
    row.split(',').filter(|u| !u.is_empty())
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// A Redis run id, as `INFO server` gives it.
const RUN_ID: &str = "8c1f1a7c0e4f4b5c9f2d3e4a5b6c7d8e9f0a1b2c";

const SETTINGS: Settings = Settings {
    handoff_delay: Duration::from_millis(3000),
};

fn table(r: &[(&str, &str)]) -> MatchingTable {
    MatchingTable::from_rows(r.iter().map(|(m, u)| (m.to_string(), u.to_string())))
}

fn names(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

fn acking(applied: u64) -> MemberFacts {
    MemberFacts {
        report: Some(MemberReport {
            applied,
            draining: false,
            deadline: ms(1000),
            weight: 1,
            client: None,
        }),
        ..MemberFacts::default()
    }
}

/// A one-group planning call with sensible defaults.
struct Call {
    granted: MatchingTable,
    desired: MatchingTable,
    transit: Transits,
    members: Vec<String>,
    units: Vec<String>,
    facts: BTreeMap<String, MemberFacts>,
    live: BTreeSet<String>,
    verify: bool,
    /// With `verify`: the tables members may still work from.
    held: Vec<HeldTable>,
    /// With `verify`: a recovery's claims.
    recovery: Option<RecoveryClaims>,
    now: Instant,
}

impl Call {
    fn new(t0: Instant, members: &[&str], units: &[&str]) -> Call {
        let mut units = names(units);
        units.sort();
        Call {
            granted: MatchingTable::default(),
            desired: MatchingTable::default(),
            transit: Transits::new(),
            members: names(members),
            live: members.iter().map(|s| s.to_string()).collect(),
            units,
            facts: BTreeMap::new(),
            verify: false,
            held: Vec::new(),
            recovery: None,
            now: t0,
        }
    }

    fn plan(&self) -> Plan {
        let groups = [GroupMembers {
            name: "g",
            members: &self.members,
        }];
        let facts = |m: &str| self.facts.get(m).cloned().unwrap_or_default();
        let rows_for = |m: &str| self.live.contains(m);
        plan(&PlanInput {
            granted: &self.granted,
            verify: self.verify,
            held_before: &self.held,
            recovery: self.recovery.as_ref(),
            desired: &self.desired,
            transit: &self.transit,
            groups: &groups,
            former_group: &|_| None,
            units: &self.units,
            facts: &facts,
            rows_for: &rows_for,
            settings: SETTINGS,
            now: self.now,
            now_ms: 1000,
        })
    }

    /// Applies a plan as a write at generation `g` would.
    fn apply(&mut self, p: Plan, g: u64) {
        self.granted = p.granted;
        self.transit = p.transit;
        for t in self.transit.values_mut().flat_map(|m| m.values_mut()) {
            if t.revoked_at == 0 {
                t.revoked_at = g;
                t.waiting_since = self.now;
            }
        }
    }

    fn transit_of(&self, u: &str) -> Option<&Transit> {
        self.transit.get("g").and_then(|t| t.get(u))
    }
}

#[test]
fn a_move_is_a_revocation_then_a_grant_after_the_acknowledgement() {
    let t0 = crate::core::timing::test_t0();
    let mut c = Call::new(t0, &["a", "b"], &["u", "v"]);
    c.facts.insert("a".into(), acking(4));
    c.facts.insert("b".into(), acking(4));
    c.granted = table(&[("a", "u,v"), ("b", "")]);
    // The solver moves u from a to b: revoked, in no row.
    c.desired = table(&[("a", "v"), ("b", "u")]);
    let p = c.plan();
    assert_eq!(p.granted, table(&[("a", "v"), ("b", "")]));
    assert_eq!(p.revoked, 1);
    c.apply(p, 5);
    let t = c.transit_of("u").unwrap();
    let origin = Origin {
        proof: Proof::Never,
        wait: Some(ms(1000 + 50 + 100)),
        numbered: 0,
    };
    assert_eq!(t.from, BTreeMap::from([("a".to_string(), origin)]));
    assert_eq!(t.to.as_deref(), Some("b"));
    assert_eq!(t.revoked_at, 5);
    // Not acknowledged yet: still in transit; plan again by the deadline.
    c.now = t0 + ms(10);
    let p = c.plan();
    assert_eq!(p.transit_len(), 1);
    assert_eq!(p.next_release, Some(t0 + ms(1000 + 50 + 100)));
    // a acknowledges generation 5: granted to b, and the rows are the
    // desired ones exactly.
    c.facts.insert("a".into(), acking(5));
    let p = c.plan();
    assert_eq!(p.granted, c.desired);
    assert_eq!(p.moved.len(), 1);
    assert_eq!(p.transit_len(), 0);
}

#[test]
fn without_an_acknowledgement_the_deadline_releases_the_unit() {
    let t0 = crate::core::timing::test_t0();
    let mut c = Call::new(t0, &["a", "b"], &["u"]);
    c.live.remove("a");
    c.facts.insert("a".into(), acking(4));
    c.transit.entry("g".into()).or_default().insert(
        "u".into(),
        Transit {
            from: BTreeMap::from([(
                "a".to_string(),
                Origin {
                    proof: Proof::Never,
                    wait: Some(ms(1000 + 50 + 100)),
                    numbered: 0,
                },
            )]),
            to: Some("b".into()),
            revoked_at: 5,
            since_ms: 0,
            waiting_since: t0,
        },
    );
    c.desired = table(&[("b", "u")]);
    // It stops by the revoking write + its deadline (with drift and margin).
    let at = t0 + ms(1150);
    c.now = at - ms(1);
    let p = c.plan();
    assert_eq!(p.transit_len(), 1);
    assert_eq!(p.next_release, Some(at));
    c.now = at;
    assert_eq!(c.plan().granted, table(&[("b", "u")]));
}

#[test]
fn a_refusal_releases_only_when_its_connection_was_opened_after_the_revoking_write() {
    let t0 = crate::core::timing::test_t0();
    let mut c = Call::new(t0, &["a", "b"], &["u"]);
    c.granted = table(&[("a", "u"), ("b", "")]);
    c.desired = table(&[("b", "u")]);
    c.live.remove("a");
    // Refused before the plan: nothing listened then, but a process started
    // since may have read the row that still gives it `u`.
    c.now = t0 + ms(5);
    c.facts.insert(
        "a".into(),
        MemberFacts {
            refused_since: Some(t0 + ms(1)),
            ..MemberFacts::default()
        },
    );
    let p = c.plan();
    assert_eq!(p.granted, table(&[("b", "")]), "revoked, not granted yet");
    assert_eq!(p.transit_len(), 1);
    c.apply(p, 2);
    // The same refusal again: still not enough.
    c.now = t0 + ms(6);
    assert_eq!(c.plan().transit_len(), 1);
    // A refusal on a connection opened when the write was done is not
    // after it either (a process that read the old row may have begun to
    // listen in that same instant).
    c.facts.get_mut("a").unwrap().refused_since = Some(t0 + ms(5));
    assert_eq!(c.plan().transit_len(), 1);
    // Opened after the revoking write was done: released.
    c.facts.get_mut("a").unwrap().refused_since = Some(t0 + ms(6));
    let p = c.plan();
    assert_eq!(p.granted, table(&[("b", "u")]), "refused after the write");
    assert_eq!(p.moved.len(), 1);
    assert_eq!(p.moved[0].revoked_at, 2);

    // A holder that inherits the transit counts from when it read it.
    let t1 = t0 + ms(100);
    let mut c = Call::new(t1, &["a", "b"], &["u"]);
    c.live.remove("a");
    c.desired = table(&[("b", "u")]);
    c.granted = table(&[("b", "")]);
    let entry = Transit::decode("2 1000 b a", t1).unwrap();
    c.transit
        .entry("g".into())
        .or_default()
        .insert("u".into(), entry);
    c.facts.insert(
        "a".into(),
        MemberFacts {
            refused_since: Some(t0 + ms(50)),
            ..MemberFacts::default()
        },
    );
    assert_eq!(
        c.plan().transit_len(),
        1,
        "refused before it read the transit"
    );
    c.facts.get_mut("a").unwrap().refused_since = Some(t1 + ms(1));
    assert_eq!(c.plan().granted, table(&[("b", "u")]));
}

#[test]
fn an_old_worker_that_answers_releases_after_the_handoff_delay() {
    let t0 = crate::core::timing::test_t0();
    let mut c = Call::new(t0, &["a", "b"], &["u"]);
    c.granted = table(&[("a", "u"), ("b", "")]);
    // An old worker (no report) that answers pings: the handoff delay after
    // the revoking write.
    c.desired = table(&[("a", ""), ("b", "u")]);
    let p = c.plan();
    assert_eq!(p.granted, table(&[("a", ""), ("b", "")]));
    c.apply(p, 2);
    c.now = t0 + ms(2999);
    assert_eq!(c.plan().transit_len(), 1);
    c.now = t0 + ms(3000);
    assert_eq!(c.plan().granted, table(&[("a", ""), ("b", "u")]));
}

#[test]
fn back_to_its_only_old_owner_at_once() {
    let t0 = crate::core::timing::test_t0();
    let mut c = Call::new(t0, &["a", "b"], &["u"]);
    c.granted = table(&[("a", "u"), ("b", "")]);
    c.desired = table(&[("a", ""), ("b", "u")]);
    let p = c.plan();
    c.apply(p, 2);
    // b fails before a acknowledges: u goes straight back to a.
    c.desired = table(&[("a", "u")]);
    c.live.remove("b");
    let p = c.plan();
    assert_eq!(p.granted, table(&[("a", "u")]));
    assert!(p.moved.is_empty());
    assert_eq!(p.transit_len(), 0);
}

#[test]
fn new_units_are_placed_at_once_and_removed_ones_are_revoked() {
    let t0 = crate::core::timing::test_t0();
    let mut c = Call::new(t0, &["a"], &["new"]);
    c.facts.insert("a".into(), acking(1));
    c.granted = table(&[("a", "old")]);
    c.desired = table(&[("a", "new")]);
    let p = c.plan();
    assert_eq!(p.granted, table(&[("a", "new")]));
    assert_eq!(p.placed, 1);
    c.apply(p, 2);
    assert_eq!(
        c.transit_of("old").unwrap().to,
        None,
        "removed: revoked like a move"
    );
    // Listed again before a acknowledged: back to a at once (nobody else had it).
    c.units = names(&["new", "old"]);
    c.desired = table(&[("a", "new,old")]);
    let p = c.plan();
    assert_eq!(p.granted, table(&[("a", "new,old")]));
    // Removed, acknowledged: forgotten.
    c.units = names(&["new"]);
    c.desired = table(&[("a", "new")]);
    let p = c.plan();
    c.apply(p, 3);
    c.facts.insert("a".into(), acking(3));
    let p = c.plan();
    assert_eq!(p.transit_len(), 0);
    assert_eq!(p.dropped, 1);
}

#[test]
fn a_draining_member_keeps_an_empty_row_while_live() {
    let t0 = crate::core::timing::test_t0();
    let mut c = Call::new(t0, &["a", "b"], &["u", "v"]);
    c.granted = table(&[("a", "u"), ("b", "v")]);
    // a drains: the solver leaves it out; it stays live.
    c.desired = table(&[("b", "u,v")]);
    let p = c.plan();
    assert_eq!(p.granted, table(&[("a", ""), ("b", "v")]));
}

/// A unit revoked from `a` at `revoked_at`, owed `wait` with no other
/// proof, on its way `to`.
fn revoked_from_a(t0: Instant, wait: Duration, to: &str, revoked_at: u64) -> Transit {
    Transit {
        from: BTreeMap::from([(
            "a".to_string(),
            Origin {
                proof: Proof::Never,
                wait: Some(wait),
                numbered: 0,
            },
        )]),
        to: Some(to.into()),
        revoked_at,
        since_ms: 0,
        waiting_since: t0,
    }
}

#[test]
fn a_hand_edited_table_is_repaired_by_revoking_from_every_holder() {
    let t0 = crate::core::timing::test_t0();
    let mut c = Call::new(t0, &["a", "b", "c"], &["u", "v"]);
    for m in ["b", "c"] {
        c.facts.insert(m.into(), acking(1));
    }
    // a has not acknowledged v's revocation (generation 1) yet.
    c.facts.insert("a".into(), acking(0));
    // u in two rows (a hand-edit); v in a row and in transit.
    c.granted = table(&[("a", "u"), ("b", "u"), ("c", "v")]);
    c.transit
        .entry("g".into())
        .or_default()
        .insert("v".into(), revoked_from_a(t0, ms(1000 + 50 + 100), "c", 1));
    c.desired = table(&[("a", "u"), ("b", ""), ("c", "v")]);
    c.verify = true;
    let p = c.plan();
    assert_eq!(p.granted, table(&[("a", ""), ("b", ""), ("c", "")]));
    c.apply(p, 2);
    assert_eq!(c.transit_of("u").unwrap().from.len(), 2);
    assert_eq!(c.transit_of("v").unwrap().from.len(), 2);
    // Everyone acknowledges generation 2: the desired table, single owners.
    c.verify = false;
    for m in ["a", "b", "c"] {
        c.facts.insert(m.into(), acking(2));
    }
    assert_eq!(c.plan().granted, c.desired);
}

#[test]
fn an_acknowledged_revocation_still_counts_when_the_unit_is_revoked_from_another_member() {
    // v was revoked from a at generation 1, and a acknowledged it; then a
    // table this holder may have written gave v to b (a write of unknown
    // outcome): v is revoked from b too, by the next write (2). a, which
    // has nothing new to stop, never reports again: its acknowledgement of
    // 1 must still count, or v would wait a's longest wait.
    let t0 = crate::core::timing::test_t0();
    let mut c = Call::new(t0, &["a", "b", "c"], &["v"]);
    c.facts.insert("a".into(), acking(1));
    c.facts.insert("b".into(), acking(1));
    c.granted = table(&[("a", ""), ("b", "v"), ("c", "")]);
    c.transit
        .entry("g".into())
        .or_default()
        .insert("v".into(), revoked_from_a(t0, ms(300_000), "c", 1));
    c.desired = table(&[("a", ""), ("b", ""), ("c", "v")]);
    c.verify = true;
    let p = c.plan();
    assert_eq!(p.granted, table(&[("a", ""), ("b", ""), ("c", "")]));
    c.apply(p, 2);
    let t = c.transit_of("v").unwrap();
    assert_eq!(
        (t.revoked_at, t.from["a"].numbered),
        (2, 1),
        "a keeps its own numbering"
    );
    assert_eq!(
        Transit::decode(&t.encode(), t0).as_ref(),
        Some(t),
        "and stores it"
    );
    // b acknowledges 2; a's acknowledgement of 1 stands: v goes to c.
    c.verify = false;
    c.facts.insert("b".into(), acking(2));
    assert_eq!(c.plan().granted, c.desired);
}

#[test]
fn rows_of_unlisted_members_are_revoked_in_their_group() {
    let t0 = crate::core::timing::test_t0();
    let mut c = Call::new(t0, &["b"], &["u"]);
    c.granted = table(&[("a", "u"), ("b", "")]);
    c.desired = table(&[("b", "u")]);
    let p = c.plan();
    assert_eq!(p.granted, table(&[("b", "")]), "a's row goes, u waits");
    c.apply(p, 2);
    assert_eq!(c.transit_of("u").unwrap().to.as_deref(), Some("b"));
}

#[test]
fn several_groups_hand_off_independently() {
    let t0 = crate::core::timing::test_t0();
    let (g1, g2) = (names(&["a", "b"]), names(&["x"]));
    let groups = [
        GroupMembers {
            name: "g1",
            members: &g1,
        },
        GroupMembers {
            name: "g2",
            members: &g2,
        },
    ];
    let granted = table(&[("a", "u"), ("b", ""), ("x", "u"), ("z", "u")]);
    let desired = table(&[("a", ""), ("b", "u"), ("x", "u")]);
    let units = names(&["u"]);
    let facts = |_: &str| MemberFacts::default();
    let rows_for = |m: &str| m != "z";
    let p = plan(&PlanInput {
        granted: &granted,
        verify: false,
        held_before: &[],
        recovery: None,
        desired: &desired,
        transit: &Transits::new(),
        groups: &groups,
        former_group: &|_| None,
        units: &units,
        facts: &facts,
        rows_for: &rows_for,
        settings: SETTINGS,
        now: t0,
        now_ms: 0,
    });
    // g1 moves u (revoked from a). z (unlisted, group unknown) held u too:
    // it is revoked in both groups, and from x as well (a second holder in
    // g2 cannot be ruled out).
    assert_eq!(p.granted, table(&[("a", ""), ("b", ""), ("x", "")]));
    assert_eq!(
        p.transit["g1"]["u"].origins().collect::<Vec<_>>(),
        ["a", "z"]
    );
    assert_eq!(
        p.transit["g2"]["u"].origins().collect::<Vec<_>>(),
        ["x", "z"]
    );
    assert_eq!(p.transit["g2"]["u"].to.as_deref(), Some("x"));
}

#[test]
fn a_vanished_table_is_planned_from_the_one_written_last() {
    let last = Arc::new(table(&[("a", "u"), ("b", "v")]));
    // Gone (a data loss, a DEL): what was granted stays the truth.
    let (from, t) = starting_point(Some(&last), Arc::default());
    assert_eq!((from, &*t), (StartingPoint::LastWritten, &*last));
    // Edited, or another holder's: what Redis has.
    let edited = table(&[("a", "u,v")]);
    let (from, t) = starting_point(Some(&last), Arc::new(edited.clone()));
    assert_eq!((from, &*t), (StartingPoint::Stored, &edited));
    // A new holding: what Redis has, even empty.
    let (from, t) = starting_point(None, Arc::default());
    assert_eq!((from, t.is_empty()), (StartingPoint::Stored, true));
}

/// Finding 1 and 3 of issue 20: the stored table lacks a unit in the row a
/// member may still work from (Redis lost the write that revoked it, or a
/// write of unknown outcome granted it and was lost, or someone edited the
/// table): the unit is claimed for that member, in transit from it, and
/// revoked from whoever the stored table gives it to.
#[test]
fn a_unit_a_member_may_still_work_on_is_claimed_before_it_is_given_away() {
    let t0 = crate::core::timing::test_t0();
    for stored in [
        table(&[("a", ""), ("b", ""), ("c", "")]),
        table(&[("a", ""), ("b", ""), ("c", "u")]),
    ] {
        let mut c = Call::new(t0, &["a", "b", "c"], &["u"]);
        c.granted = stored.clone();
        c.verify = true;
        c.held = vec![HeldTable::new(
            Arc::new(table(&[("a", ""), ("b", "u"), ("c", "")])),
            Some(5),
        )];
        c.desired = table(&[("a", ""), ("b", ""), ("c", "u")]);
        let p = c.plan();
        assert_eq!(p.claimed, 1);
        assert_eq!(
            p.granted.rows()["c"],
            "",
            "not given away while b may work on it"
        );
        let t = c_transit(&p, "u");
        let mut origins: Vec<&str> = t.origins().collect();
        origins.sort();
        let expected: &[&str] = if stored.rows()["c"].is_empty() {
            &["b"]
        } else {
            &["b", "c"]
        };
        assert_eq!(origins, expected);
        assert_eq!(t.to.as_deref(), Some("c"));
    }
}

/// A unit in transit from the member already, or still in its stored row,
/// is not claimed again; nor is anything when the held table is the stored
/// one.
#[test]
fn claims_are_only_for_units_taken_without_a_revocation() {
    let t0 = crate::core::timing::test_t0();
    let mut c = Call::new(t0, &["a", "b"], &["u", "v", "w"]);
    c.granted = table(&[("a", "w"), ("b", "")]);
    c.verify = true;
    c.transit = c_revoked_from_a(t0, Proof::Never, 4);
    c.held = vec![
        HeldTable::new(Arc::new(table(&[("a", "u,w"), ("b", "")])), Some(3)),
        HeldTable::new(Arc::new(c.granted.clone()), Some(4)),
    ];
    c.desired = table(&[("a", "w"), ("b", "u,v")]);
    let p = c.plan();
    assert_eq!(p.claimed, 0);
    assert_eq!(p.granted.rows()["b"], "v", "v was in nobody's row: placed");
    assert_eq!(c_transit(&p, "u").revoked_at, 4, "its revocation stands");
}

/// Found by `unknown_outcomes_stress` (seed 911148): a write that timed out
/// landed after the holder read Redis again, and gave `u` back to `a`, which
/// had acknowledged its revocation at generation 101. The holder, reading
/// again, kept that old entry in transit; the plan then took `u` from `a`'s
/// row but kept the old revocation, acknowledged long ago, and gave `u` to
/// `b` at once while `a` worked on it. A member that holds a unit again
/// after its revocation is revoked anew, in a row as in a held table.
#[test]
fn a_revocation_older_than_the_tenure_is_made_anew() {
    let t0 = crate::core::timing::test_t0();
    let old = c_revoked_from_a(t0, Proof::Refusal, 101);
    // In a's stored row (the late write landed), or only in a table a may
    // work from (it was lost again).
    for in_row in [true, false] {
        let mut c = Call::new(t0 + ms(10_000), &["a", "b"], &["u"]);
        c.granted = if in_row {
            table(&[("a", "u"), ("b", "")])
        } else {
            table(&[("a", ""), ("b", "")])
        };
        c.verify = true;
        c.transit = old.clone();
        c.held = vec![HeldTable::new(
            Arc::new(table(&[("a", "u"), ("b", "")])),
            Some(107),
        )];
        c.desired = table(&[("a", ""), ("b", "u")]);
        c.facts.insert("a".into(), MemberFacts::default());
        let p = c.plan();
        assert_eq!(p.granted.rows()["b"], "", "in_row {in_row}: not given away");
        let t = c_transit(&p, "u");
        assert_eq!(t.revoked_at, 0, "revoked anew by this plan's write");
        assert_eq!(t.origins().collect::<Vec<_>>(), ["a"]);
        assert_eq!(t.waiting_since, c.now);
    }
}

/// Review finding R1 of issue 20: a write of unknown outcome granted `u` to
/// `b`; Redis does not hold it when read again (not applied, or applied
/// and lost in a failover after `b` read it). `u` is not given to `c`
/// until `b` is done with it.
#[test]
fn a_grant_of_a_write_of_unknown_outcome_is_claimed_for_its_grantee() {
    let t0 = crate::core::timing::test_t0();
    let members = names(&["a", "b", "c"]);
    let groups = [GroupMembers {
        name: "g",
        members: &members,
    }];
    let stored = Arc::new(table(&[("a", "u"), ("b", ""), ("c", "")]));
    let mut l = Ledger::new();
    let read = || Some(HeldTable::new(Arc::clone(&stored), Some(7)));
    l.resync(read(), Transits::new(), 8, &groups);
    l.unknown(Some(HeldTable::new(
        Arc::new(table(&[("a", ""), ("b", "u"), ("c", "")])),
        None,
    )));
    let r = l.resync(read(), Transits::new(), 8, &groups);
    assert_eq!(r.applied, Some(false));
    let mut c = Call::new(t0, &["a", "b", "c"], &["u"]);
    c.granted = (*stored).clone();
    c.verify = true;
    c.held = l.held().to_vec();
    c.desired = table(&[("a", ""), ("b", ""), ("c", "u")]);
    let p = c.plan();
    assert_eq!(p.granted.rows()["c"], "");
    let mut origins: Vec<&str> = c_transit(&p, "u").origins().collect();
    origins.sort();
    assert_eq!(origins, ["a", "b"]);
}

/// Review finding R3 of issue 20: the stored table is older than the one
/// this holder wrote last (a lagging replica promoted), not empty: a unit
/// in the last written row of `b`, in no stored row, is not placed at once.
#[test]
fn an_older_stored_table_does_not_forget_the_last_written_owner() {
    let t0 = crate::core::timing::test_t0();
    let last = Arc::new(table(&[("a", ""), ("b", "u")]));
    let (from, start) = starting_point(Some(&last), Arc::new(table(&[("a", ""), ("b", "")])));
    assert_eq!(from, StartingPoint::Stored);
    let mut c = Call::new(t0, &["a", "b"], &["u"]);
    c.granted = (*start).clone();
    c.verify = true;
    c.held = vec![HeldTable::new(last, Some(9))];
    c.desired = table(&[("a", "u"), ("b", "")]);
    let p = c.plan();
    assert_eq!(p.granted.rows()["a"], "");
    assert_eq!(c_transit(&p, "u").origins().collect::<Vec<_>>(), ["b"]);
}

fn c_transit<'a>(p: &'a Plan, unit: &str) -> &'a Transit {
    &p.transit["g"][unit]
}

/// Group `g`'s transit: `u`, revoked from `a` at `revoked_at` (a 3 s wait).
fn c_revoked_from_a(t0: Instant, proof: Proof, revoked_at: u64) -> Transits {
    let origin = Origin {
        proof,
        wait: Some(ms(3000)),
        numbered: 0,
    };
    let t = Transit {
        from: BTreeMap::from([("a".to_string(), origin)]),
        to: None,
        revoked_at,
        since_ms: 1,
        waiting_since: t0,
    };
    Transits::from([("g".to_string(), BTreeMap::from([("u".to_string(), t)]))])
}

/// Review finding 7 of issue 20: what was fixed at the revocation holds,
/// and later facts only lengthen a wait or strengthen the proof it needs.
#[test]
fn later_facts_lengthen_a_wait_never_shorten_it() {
    let stored = Origin {
        proof: Proof::Refusal,
        wait: Some(ms(3000)),
        numbered: 0,
    };
    // A longer deadline reported since, naming its connection: the longer
    // wait, and Redis must confirm a refusal.
    let mut later = acking(1);
    if let Some(r) = &mut later.report {
        r.deadline = ms(9000);
        r.client = Some(RedisConnection::id(7));
    }
    let e = SETTINGS.effective(&stored, &later);
    assert_eq!(e.proof, Proof::Disconnected(RedisConnection::id(7)));
    assert!(e.wait.unwrap() > ms(9000), "{e:?}");
    // A shorter one: the stored wait stays.
    let mut shorter = acking(1);
    if let Some(r) = &mut shorter.report {
        r.deadline = ms(100);
    }
    let e = SETTINGS.effective(&stored, &shorter);
    assert_eq!(e.wait, Some(ms(3000)));
    assert_eq!(
        e.proof,
        Proof::Never,
        "a member of the protocol: no refusal releases it"
    );
    // The reports unreadable now: nothing is learnt, nothing shortens.
    let unknown = MemberFacts {
        reports_read: false,
        ..MemberFacts::default()
    };
    assert_eq!(SETTINGS.effective(&stored, &unknown), stored);
    // An entry of an older version (no stored wait) gets today's.
    let legacy = Origin {
        proof: Proof::Refusal,
        wait: None,
        numbered: 0,
    };
    assert_eq!(
        SETTINGS.effective(&legacy, &unknown).wait,
        Some(SETTINGS.longest_wait())
    );
}

#[test]
fn stored_forms_parse_strictly() {
    let t0 = crate::core::timing::test_t0();
    let r = MemberReport {
        applied: 42,
        draining: true,
        deadline: ms(10_000),
        weight: 3,
        client: None,
    };
    assert_eq!(MemberReport::decode(&r.encode()), Some(r));
    assert_eq!(MemberReport::decode("7 0 5000").map(|r| r.weight), Some(1));
    assert_eq!(
        MemberReport::decode("7 0 5000 2 future fields").map(|r| (r.weight, r.client)),
        Some((2, None)),
        "a fifth field that is not a client id counts as none"
    );
    let with_client = MemberReport {
        client: Some(RedisConnection::id(17)),
        ..r
    };
    assert_eq!(with_client.encode(), "42 1 10000 3 17");
    assert_eq!(
        MemberReport::decode("42 1 10000 3 17 later"),
        Some(with_client),
        "a sixth field that is not a run id counts as none"
    );
    let server = RunId::parse(RUN_ID).unwrap();
    let on_server = MemberReport {
        client: Some(RedisConnection::on(17, server)),
        ..r
    };
    assert_eq!(on_server.encode(), format!("42 1 10000 3 17 {RUN_ID}"));
    assert_eq!(
        MemberReport::decode(&format!("42 1 10000 3 17 {RUN_ID} later")),
        Some(on_server),
        "fields after the sixth are ignored"
    );
    for bad in [
        "",
        "x 0 1000",
        "1 2 1000",
        "1 0 0",
        "1 0 1000 0",
        "-1 0 10",
        "9007199254740992 0 10",
        "1e3 0 10",
        " 1 0 10",
    ] {
        assert_eq!(MemberReport::decode(bad), None, "{bad:?}");
    }
    let capped = MemberReport::decode("1 0 999999999 99999").unwrap();
    assert_eq!(
        capped.deadline, MAX_DEADLINE,
        "a hostile deadline is capped"
    );
    assert_eq!(capped.weight, MAX_WEIGHT);

    let origin = |proof, ms_| Origin {
        proof,
        wait: Some(ms(ms_)),
        numbered: 0,
    };
    let t = Transit {
        from: BTreeMap::from([
            ("a:1".to_string(), origin(Proof::Refusal, 10_600)),
            (
                "b:2".to_string(),
                origin(Proof::Disconnected(RedisConnection::id(42)), 3_250),
            ),
            ("c:3".to_string(), origin(Proof::Never, 0)),
            (
                "d:4".to_string(),
                origin(Proof::Disconnected(on_server.client.unwrap()), 1),
            ),
        ]),
        to: None,
        revoked_at: 7,
        since_ms: 1_700_000_000_000,
        waiting_since: t0,
    };
    assert_eq!(
        t.encode(),
        format!("7 1700000000000 - a:1,b:2,c:3,d:4 10600,3250,0,1 r,c42,-,c17@{RUN_ID}")
    );
    assert_eq!(Transit::decode(&t.encode(), t0), Some(t));
    // The four fields of older versions: no stored wait, refusals as proof.
    let old = Transit::decode("7 1700000000000 b:2 a:1", t0).unwrap();
    let legacy = Origin {
        proof: Proof::Refusal,
        wait: None,
        numbered: 0,
    };
    assert_eq!(old.from, BTreeMap::from([("a:1".to_string(), legacy)]));
    assert_eq!(old.encode(), "7 1700000000000 b:2 a:1");
    for bad in [
        "",
        "7 1 - ",
        "7 1 -",
        "x 1 - a",
        "7 1 b:1 a,",
        "7 1 b:1 a extra",
        "7 1 b:1 a 10 r,r",
        "7 1 b:1 a 10,10 r",
        "7 1 b:1 a 10 x",
        "7 1 b:1 a 10 r more",
        "7 1 b:1 a x r",
        "7 1 b:1 a 10 c17@",
        "7 1 b:1 a 10 c17@nothex",
    ] {
        assert_eq!(Transit::decode(bad, t0), None, "{bad:?}");
    }
    assert_eq!(
        parse_transit_field("u1,list,with,commas"),
        Some(("list,with,commas", "u1"))
    );
    assert_eq!(
        parse_transit_field(&transit_field("g", "u")),
        Some(("g", "u"))
    );
    assert_eq!(parse_transit_field("nocomma"), None);
}

mod sim;

#[test]
fn weight_overrides_are_integers_from_one_to_the_maximum() {
    for (s, want) in [
        ("1", Some(1)),
        ("7", Some(7)),
        ("0100", Some(100)),
        ("1000", Some(MAX_WEIGHT)),
        ("0", None),
        ("1001", None),
        ("99999", None),
        ("", None),
        ("-3", None),
        ("+3", None),
        (" 3", None),
        ("3 ", None),
        ("3.0", None),
        ("three", None),
        ("٣", None),
    ] {
        assert_eq!(decode_weight_override(s), want, "{s:?}");
    }
}

/// A recovery (`RecoveryClaims`): a unit a member stated it works on is
/// that member's alone; any other unit is in transit from every member that
/// stated nothing, but for the one whose row alone has it when it is the
/// only such member.
#[test]
fn a_recovery_claims_what_members_state_and_waits_for_those_silent() {
    let t0 = crate::core::timing::test_t0();
    let mut c = Call::new(t0, &["a:1", "b:2", "c:3"], &["u1", "u2", "u3", "u4", "u5"]);
    // Redis holds an old table: a lost write had moved u2 to b:2.
    c.granted = table(&[("a:1", "u1,u2"), ("b:2", "u3"), ("c:3", "u4")]);
    c.desired = c.granted.clone();
    c.verify = true;
    for m in ["a:1", "b:2", "c:3"] {
        c.facts.insert(m.into(), acking(1));
    }
    let stated = table(&[("a:1", "u1"), ("b:2", "u2,u3")]);
    c.recovery = Some(RecoveryClaims {
        stated: HeldTable::new(Arc::new(stated), None),
        unanswered: BTreeSet::from(["c:3".to_string()]),
    });
    let p = c.plan();
    let g = &p.transit["g"];
    // u2: b:2 works on it (claimed from it) and a:1's stored row has it
    // (revoked from a:1 too): it waits for both.
    assert_eq!(
        g["u2"].origins().collect::<Vec<_>>(),
        ["a:1", "b:2"],
        "{g:?}"
    );
    // u4: in c:3's row alone, and c:3 the only silent member: kept.
    assert!(!g.contains_key("u4"));
    assert!(decode(&p.granted.rows()["c:3"]).any(|u| u == "u4"));
    // u5 (never placed) and u2 may be worked on by c:3, which said nothing.
    assert_eq!(g["u5"].origins().collect::<Vec<_>>(), ["c:3"]);
    assert!(g["u2"].from.contains_key("a:1"));
    // u1 and u3 are stated by their row's owner: they stay.
    assert!(!g.contains_key("u1") && !g.contains_key("u3"));
    assert!(decode(&p.granted.rows()["a:1"]).any(|u| u == "u1"));

    // With two silent members, a unit in either's row waits for the other.
    c.recovery = Some(RecoveryClaims {
        stated: HeldTable::new(Arc::new(table(&[("a:1", "u1")])), None),
        unanswered: BTreeSet::from(["b:2".to_string(), "c:3".to_string()]),
    });
    let p = c.plan();
    let g = &p.transit["g"];
    assert_eq!(g["u4"].origins().collect::<Vec<_>>(), ["b:2", "c:3"]);
    assert_eq!(g["u3"].origins().collect::<Vec<_>>(), ["b:2", "c:3"]);
    assert!(!g.contains_key("u1"));
}
