//! Tests of the handoff planner: one per rule, and a simulation of a holder
//! (with failovers) and members that follow the protocol or the old one, with
//! random read delays, slow stops, pauses, deaths, drains, Redis cuts and
//! unit churn, checking at every step that no unit is worked on by two
//! members.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use proptest::prelude::*;
use tokio::time::Instant;

use super::*;

/// A row's units.
fn decode(row: &str) -> impl Iterator<Item = &str> {
    row.split(',').filter(|u| !u.is_empty())
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

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
    let t0 = Instant::now();
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
    assert_eq!(t.from, BTreeMap::from([("a".to_string(), Proof::Never)]));
    assert_eq!(t.wait, Some(ms(1000 + 50 + 100)));
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
    let t0 = Instant::now();
    let mut c = Call::new(t0, &["a", "b"], &["u"]);
    c.live.remove("a");
    c.facts.insert("a".into(), acking(4));
    c.transit.entry("g".into()).or_default().insert(
        "u".into(),
        Transit {
            from: BTreeMap::from([("a".to_string(), Proof::Never)]),
            wait: Some(ms(1000 + 50 + 100)),
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
    let t0 = Instant::now();
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
    let t0 = Instant::now();
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
    let t0 = Instant::now();
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
    let t0 = Instant::now();
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
    let t0 = Instant::now();
    let mut c = Call::new(t0, &["a", "b"], &["u", "v"]);
    c.granted = table(&[("a", "u"), ("b", "v")]);
    // a drains: the solver leaves it out; it stays live.
    c.desired = table(&[("b", "u,v")]);
    let p = c.plan();
    assert_eq!(p.granted, table(&[("a", ""), ("b", "v")]));
}

#[test]
fn a_hand_edited_table_is_repaired_by_revoking_from_every_holder() {
    let t0 = Instant::now();
    let mut c = Call::new(t0, &["a", "b", "c"], &["u", "v"]);
    for m in ["a", "b", "c"] {
        c.facts.insert(m.into(), acking(1));
    }
    // u in two rows (a hand-edit); v in a row and in transit.
    c.granted = table(&[("a", "u"), ("b", "u"), ("c", "v")]);
    c.transit.entry("g".into()).or_default().insert(
        "v".into(),
        Transit {
            from: BTreeMap::from([("a".to_string(), Proof::Never)]),
            wait: Some(ms(1000 + 50 + 100)),
            to: Some("c".into()),
            revoked_at: 1,
            since_ms: 0,
            waiting_since: t0,
        },
    );
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
fn rows_of_unlisted_members_are_revoked_in_their_group() {
    let t0 = Instant::now();
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
    let t0 = Instant::now();
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
    let (from, t) = starting_point(Some(&last), MatchingTable::default());
    assert_eq!((from, &*t), (StartingPoint::LastWritten, &*last));
    // Edited, or another holder's: what Redis has.
    let edited = table(&[("a", "u,v")]);
    let (from, t) = starting_point(Some(&last), edited.clone());
    assert_eq!((from, &*t), (StartingPoint::Stored, &edited));
    // A new holding: what Redis has, even empty.
    let (from, t) = starting_point(None, MatchingTable::default());
    assert_eq!((from, t.is_empty()), (StartingPoint::Stored, true));
}

#[test]
fn stored_forms_parse_strictly() {
    let t0 = Instant::now();
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
        client: Some(17),
        ..r
    };
    assert_eq!(with_client.encode(), "42 1 10000 3 17");
    assert_eq!(
        MemberReport::decode("42 1 10000 3 17 later"),
        Some(with_client)
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

    let t = Transit {
        from: BTreeMap::from([
            ("a:1".to_string(), Proof::Refusal),
            ("b:2".to_string(), Proof::Disconnected(42)),
            ("c:3".to_string(), Proof::Never),
        ]),
        to: None,
        revoked_at: 7,
        since_ms: 1_700_000_000_000,
        wait: Some(ms(10_600)),
        waiting_since: t0,
    };
    assert_eq!(t.encode(), "7 1700000000000 - a:1,b:2,c:3 10600 r,c42,-");
    assert_eq!(Transit::decode(&t.encode(), t0), Some(t));
    // The four fields of older versions: no stored wait, refusals as proof.
    let old = Transit::decode("7 1700000000000 b:2 a:1", t0).unwrap();
    assert_eq!(old.wait, None);
    assert_eq!(
        old.from,
        BTreeMap::from([("a:1".to_string(), Proof::Refusal)])
    );
    for bad in [
        "",
        "7 1 - ",
        "7 1 -",
        "x 1 - a",
        "7 1 b:1 a,",
        "7 1 b:1 a extra",
        "7 1 b:1 a 10 r,r",
        "7 1 b:1 a 10 x",
        "7 1 b:1 a 10 r more",
        "7 1 b:1 a x r",
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

// ---------------------------------------------------------------------------
// The simulation.

/// One member of the simulation.
#[derive(Debug, Clone)]
struct Sim {
    name: String,
    /// Speaks the protocol (acknowledges, fences itself).
    acks: bool,
    alive: bool,
    /// Paused until then: no reads, no pings answered, no progress.
    paused_until: Option<Instant>,
    /// Redis unreachable until then (pings still answered).
    cut_until: Option<Instant>,
    /// Until then it receives pings but its answers never reach the holder
    /// (lost, or later than the ping timeout).
    answers_lost_until: Option<Instant>,
    draining: bool,
    listed: bool,
    /// Units it owns, with the send instant of the last read that showed each.
    owned: BTreeMap<String, Instant>,
    /// Units it is stopping: (done at, send instant of the last read that
    /// showed it).
    stopping: BTreeMap<String, (Instant, Instant)>,
    /// Highest generation processed, and acknowledged.
    processed: u64,
    applied: u64,
    /// A read in flight: processed at `.0`, with the generation and row it
    /// saw when it was sent at `.1`.
    read: Option<(Instant, Instant, u64, Option<BTreeSet<String>>)>,
    last_ping: Instant,
    /// Send instant of the last successful read.
    last_read_ok: Instant,
    next_read: Instant,
    read_every: Duration,
    read_takes: Duration,
    stop_takes: Duration,
}

const DEADLINE: Duration = Duration::from_millis(800);

impl Sim {
    /// A new process on this member's address, started at `t`.
    fn restart(&mut self, t: Instant) {
        self.alive = true;
        self.paused_until = None;
        self.cut_until = None;
        self.answers_lost_until = None;
        self.draining = false;
        self.listed = true;
        self.owned.clear();
        self.stopping.clear();
        self.processed = 0;
        self.applied = 0;
        self.read = None;
        // Not fenced at its start (generous: the library also waits for a
        // ping before it starts a unit).
        self.last_ping = t;
        self.last_read_ok = t;
        self.next_read = t;
    }

    fn active(&self, t: Instant) -> bool {
        self.alive && self.paused_until.is_none_or(|p| t >= p)
    }

    /// When its hold on a unit last shown at `read` ends.
    fn hold_end(&self, read: Instant) -> Instant {
        read.min(self.last_ping) + DEADLINE
    }

    /// The units it may be working on at `t`.
    fn working(&self, t: Instant) -> Vec<&String> {
        if !self.alive {
            return Vec::new();
        }
        let owned = self
            .owned
            .iter()
            .filter(|(_, r)| !self.acks || t < self.hold_end(**r))
            .map(|(u, _)| u);
        let stopping = self
            .stopping
            .iter()
            .filter(|(_, (done, r))| t < *done && (!self.acks || t < self.hold_end(*r)))
            .map(|(u, _)| u);
        owned.chain(stopping).collect()
    }

    /// Fenced (no ping, or no successful read, for its deadline): it holds
    /// nothing and answers pings with UNAVAILABLE.
    fn fenced(&self, t: Instant) -> bool {
        self.acks && (t >= self.last_ping + DEADLINE || t >= self.last_read_ok + DEADLINE)
    }
}

#[derive(Debug, Clone)]
enum Op {
    Run(u64),
    Join(bool),
    Kill(usize),
    /// A dead member's address gets a new process: it listens, registers,
    /// and reads the table as a member that never owned anything.
    Restart(usize),
    /// A member is killed and a new process starts on its address this many
    /// ms later (a supervisor restarting a crashed worker).
    KillAndRestart(usize, u64),
    Pause(usize, u64),
    CutRedis(usize, u64),
    LoseAnswers(usize, u64),
    Drain(usize),
    AddUnit(u8),
    RemoveUnit(u8),
    Failover(u64),
    HandEdit(u8, usize),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (10u64..600).prop_map(Op::Run),
        1 => any::<bool>().prop_map(Op::Join),
        1 => (0usize..8).prop_map(Op::Kill),
        1 => (0usize..8).prop_map(Op::Restart),
        1 => ((0usize..8), (0u64..80)).prop_map(|(m, d)| Op::KillAndRestart(m, d)),
        1 => ((0usize..8), (100u64..2500)).prop_map(|(m, d)| Op::Pause(m, d)),
        1 => ((0usize..8), (100u64..2500)).prop_map(|(m, d)| Op::CutRedis(m, d)),
        1 => ((0usize..8), (100u64..2500)).prop_map(|(m, d)| Op::LoseAnswers(m, d)),
        1 => (0usize..8).prop_map(Op::Drain),
        1 => (0u8..12).prop_map(Op::AddUnit),
        1 => (0u8..12).prop_map(Op::RemoveUnit),
        1 => (0u64..1500).prop_map(Op::Failover),
        1 => ((0u8..12), (0usize..8)).prop_map(|(u, m)| Op::HandEdit(u, m)),
    ]
}

/// The simulation's solver: units spread round-robin over the sorted
/// eligible members (any deterministic solver will do).
fn solve(units: &BTreeSet<String>, eligible: &BTreeSet<String>) -> MatchingTable {
    let members: Vec<&String> = eligible.iter().collect();
    let mut rows: BTreeMap<String, Vec<&str>> = members
        .iter()
        .map(|m| (m.to_string(), Vec::new()))
        .collect();
    for (i, u) in units.iter().enumerate() {
        if !members.is_empty() {
            rows.get_mut(members[i % members.len()]).unwrap().push(u);
        }
    }
    MatchingTable::from_rows(rows.into_iter().map(|(m, us)| (m, us.join(","))))
}

fn row_of(t: &MatchingTable, m: &str) -> Option<BTreeSet<String>> {
    t.rows()
        .get(m)
        .map(|r| decode(r).map(str::to_string).collect())
}

struct World {
    t: Instant,
    members: Vec<Sim>,
    units: BTreeSet<String>,
    /// What Redis holds: generation, rows, transit, member reports.
    generation: u64,
    granted: MatchingTable,
    transit: Transits,
    /// The holder's memory (lost on failover).
    facts: BTreeMap<String, MemberFacts>,
    verify: bool,
    /// No holder acts until then (a failover).
    holder_back: Instant,
    next_cycle: Instant,
    /// The cycle whose pings went out: planned and written then. Members
    /// read (and restart) in between, as they do while a real cycle's pings
    /// settle and its write travels.
    write_due: Option<Instant>,
    delays: std::iter::Cycle<std::vec::IntoIter<u64>>,
}

impl World {
    fn new(delays: Vec<u64>) -> World {
        let t = Instant::now();
        let mut w = World {
            t,
            members: Vec::new(),
            units: (0..6).map(|i| format!("u{i}")).collect(),
            generation: 1,
            granted: MatchingTable::default(),
            transit: Transits::new(),
            facts: BTreeMap::new(),
            verify: true,
            holder_back: t,
            next_cycle: t,
            write_due: None,
            delays: delays.into_iter().cycle(),
        };
        for acks in [true, true, false] {
            w.join(acks);
        }
        w
    }

    fn delay(&mut self) -> Duration {
        ms(self.delays.next().unwrap())
    }

    fn join(&mut self, acks: bool) {
        // Old workers read every 300 ms and stop within 200: inside the
        // 3 s handoff delay, as their guarantee requires.
        let read_every = if acks {
            ms(20) + self.delay() / 5
        } else {
            ms(300)
        };
        let stop_takes = (self.delay() / 2).min(ms(200));
        let read_takes = self.delay() / 4;
        let name = format!("m{}", self.members.len());
        self.members.push(Sim {
            name,
            acks,
            alive: true,
            paused_until: None,
            cut_until: None,
            answers_lost_until: None,
            draining: false,
            listed: true,
            owned: BTreeMap::new(),
            stopping: BTreeMap::new(),
            processed: 0,
            applied: 0,
            read: None,
            last_ping: self.t,
            last_read_ok: self.t,
            next_read: self.t,
            read_every,
            read_takes,
            stop_takes,
        });
    }

    /// Every unit is worked on by at most one member; the table and transit
    /// keep their invariants.
    fn check(&self) {
        let mut owner: BTreeMap<&str, &str> = BTreeMap::new();
        for m in &self.members {
            for u in m.working(self.t) {
                if let Some(other) = owner.insert(u, &m.name) {
                    panic!(
                        "at {:?}: unit {u} worked on by {other} and {} at once\n{:#?}\n{:?}\n{:?}",
                        self.t, m.name, self.members, self.granted, self.transit
                    );
                }
            }
        }
        let mut in_rows = BTreeSet::new();
        let transit = self.transit.get("g");
        for r in self.granted.rows().values() {
            for u in decode(r) {
                assert!(in_rows.insert(u), "unit {u} in two rows");
                assert!(
                    !transit.is_some_and(|t| t.contains_key(u)),
                    "unit {u} in a row and in transit"
                );
            }
        }
    }

    fn member_step(&mut self, i: usize) {
        let t = self.t;
        let (generation, granted) = (self.generation, self.granted.clone());
        let m = &mut self.members[i];
        if !m.active(t) {
            return;
        }
        // Stops that finished; holds that ended (the library fences them).
        m.stopping.retain(|_, (done, _)| *done > t);
        if m.acks {
            let last_ping = m.last_ping;
            m.owned.retain(|_, r| t < (*r).min(last_ping) + DEADLINE);
            let (ends, lp) = (&mut m.stopping, last_ping);
            ends.retain(|_, (_, r)| t < (*r).min(lp) + DEADLINE);
        }
        if m.acks && m.processed > m.applied && m.stopping.is_empty() {
            m.applied = m.processed;
        }
        // A read that came back.
        if let Some((due, sent, g, row)) = m.read.clone()
            && t >= due
        {
            m.read = None;
            m.last_read_ok = m.last_read_ok.max(sent);
            if g >= m.processed {
                m.processed = g;
                let row = row.unwrap_or_default();
                let revoked: Vec<String> = m
                    .owned
                    .keys()
                    .filter(|u| !row.contains(*u))
                    .cloned()
                    .collect();
                for u in revoked {
                    let r = m.owned.remove(&u).unwrap();
                    m.stopping.insert(u, (t + m.stop_takes, r));
                }
                // Acquire what is in the row (after stops of the same unit).
                if !m.fenced(t) || !m.acks {
                    for u in &row {
                        if !m.stopping.contains_key(u) {
                            m.owned.insert(u.clone(), sent);
                        }
                    }
                }
                if m.acks && m.stopping.is_empty() {
                    m.applied = g;
                }
            }
        }
        if t < m.next_read || m.read.is_some() {
            return;
        }
        m.next_read = t + m.read_every;
        if m.cut_until.is_some_and(|c| t < c) {
            return;
        }
        // Served when sent, processed later: the worst case for staleness.
        let row = row_of(&granted, &m.name);
        let takes = if m.acks { m.read_takes } else { Duration::ZERO };
        m.read = Some((t + takes, t, generation, row));
        // Drained: row present, empty, acknowledged: deregister.
        if m.draining
            && m.applied == generation
            && row_of(&granted, &m.name).is_some_and(|r| r.is_empty())
            && m.stopping.is_empty()
            && m.owned.is_empty()
        {
            m.listed = false;
        }
    }

    fn holder_step(&mut self) {
        if self.t < self.holder_back {
            return;
        }
        if self.write_due.is_some_and(|d| self.t >= d) {
            self.write_due = None;
            self.plan_and_write();
        }
        if self.t < self.next_cycle || self.write_due.is_some() {
            return;
        }
        self.next_cycle = self.t + ms(20);
        let t = self.t;
        // Pings (each on a connection opened now) and reports.
        for m in self.members.iter_mut().filter(|m| m.listed) {
            let f = self.facts.entry(m.name.clone()).or_default();
            let lost = m.answers_lost_until.is_some_and(|l| t < l);
            let answers = m.active(t) && !m.fenced(t) && !lost;
            if m.active(t) {
                m.last_ping = t;
            }
            if answers {
                f.refused_since = None;
            } else if !m.alive {
                // A dead process refuses; a paused or fenced one does not
                // answer OK, which proves nothing.
                f.refused_since = Some(t);
            }
            f.report = m.acks.then_some(MemberReport {
                applied: m.applied,
                draining: m.draining,
                deadline: DEADLINE,
                weight: 1,
                client: None,
            });
        }
        // The plan and its write follow 0 to 40 ms later.
        let lag = ms(self.delay().as_millis() as u64 / 100 * 10);
        if lag.is_zero() {
            self.plan_and_write();
        } else {
            self.write_due = Some(t + lag);
        }
    }

    fn plan_and_write(&mut self) {
        let t = self.t;
        let live: BTreeSet<String> = self
            .members
            .iter()
            .filter(|m| m.listed && m.active(t) && !m.fenced(t))
            .map(|m| m.name.clone())
            .collect();
        let eligible: BTreeSet<String> = self
            .members
            .iter()
            .filter(|m| live.contains(&m.name) && !m.draining)
            .map(|m| m.name.clone())
            .collect();
        let desired = solve(&self.units, &eligible);
        let members: Vec<String> = self
            .members
            .iter()
            .filter(|m| m.listed)
            .map(|m| m.name.clone())
            .collect();
        let groups = [GroupMembers {
            name: "g",
            members: &members,
        }];
        let units: Vec<String> = self.units.iter().cloned().collect();
        let facts = |m: &str| self.facts.get(m).cloned().unwrap_or_default();
        let rows_for = |m: &str| live.contains(m);
        let p = plan(&PlanInput {
            granted: &self.granted,
            verify: self.verify,
            desired: &desired,
            transit: &self.transit,
            groups: &groups,
            former_group: &|_| Some("g".to_string()),
            units: &units,
            facts: &facts,
            rows_for: &rows_for,
            settings: SETTINGS,
            now: t,
            now_ms: 0,
        });
        self.verify = false;
        if p.granted != self.granted || p.transit != self.transit {
            self.generation += 1;
            self.granted = p.granted;
            self.transit = p.transit;
            for tr in self.transit.values_mut().flat_map(|m| m.values_mut()) {
                if tr.revoked_at == 0 {
                    tr.revoked_at = self.generation;
                    tr.waiting_since = t;
                }
            }
        }
    }

    fn failover(&mut self, gap: Duration) {
        self.facts.clear();
        self.write_due = None;
        self.verify = true;
        self.holder_back = self.t + gap;
        // The new holder waits from when it read the transit entries.
        let back = self.holder_back;
        for tr in self.transit.values_mut().flat_map(|m| m.values_mut()) {
            tr.waiting_since = back;
        }
    }

    fn run(&mut self, d: Duration) {
        let until = self.t + d;
        while self.t < until {
            self.t += ms(10);
            for i in 0..self.members.len() {
                self.member_step(i);
            }
            self.holder_step();
            self.check();
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(500))]

    /// Members join, die, pause, lose Redis, drain; units come and go; the
    /// holder fails over mid-handoff; members read late and stop slowly: no
    /// unit is ever worked on by two members, and once things settle every
    /// listed unit is worked on by a live member when there is one.
    #[test]
    fn no_unit_ever_has_two_owners(
        ops in proptest::collection::vec(op(), 1..40),
        delays in proptest::collection::vec(0u64..400, 1..20),
    ) {
        let mut w = World::new(delays);
        for op in ops {
            let t = w.t;
            match op {
                Op::Run(d) => w.run(ms(d)),
                Op::Join(acks) => { if w.members.len() < 8 { w.join(acks) } }
                Op::Kill(i) => {
                    if let Some(m) = w.members.get_mut(i) {
                        m.alive = false;
                    }
                }
                Op::Restart(i) => {
                    let dead: Vec<usize> = (0..w.members.len()).filter(|&j| !w.members[j].alive).collect();
                    if !dead.is_empty() {
                        w.members[dead[i % dead.len()]].restart(t);
                    }
                }
                Op::KillAndRestart(i, d) => {
                    if !w.members.is_empty() {
                        let i = i % w.members.len();
                        w.members[i].alive = false;
                        w.run(ms(d));
                        let t = w.t;
                        w.members[i].restart(t);
                    }
                }
                // Only members of the protocol may pause or lose Redis: an
                // old worker is promised nothing if it stops reading.
                Op::Pause(i, d) => {
                    if let Some(m) = w.members.get_mut(i).filter(|m| m.acks) {
                        m.paused_until = Some(t + ms(d));
                    }
                }
                Op::CutRedis(i, d) => {
                    if let Some(m) = w.members.get_mut(i).filter(|m| m.acks) {
                        m.cut_until = Some(t + ms(d));
                    }
                }
                Op::LoseAnswers(i, d) => {
                    if let Some(m) = w.members.get_mut(i) {
                        m.answers_lost_until = Some(t + ms(d));
                    }
                }
                Op::Drain(i) => {
                    if let Some(m) = w.members.get_mut(i).filter(|m| m.acks) {
                        m.draining = true;
                    }
                }
                Op::AddUnit(u) => { w.units.insert(format!("u{u}")); }
                Op::RemoveUnit(u) => { w.units.remove(&format!("u{u}")); }
                Op::Failover(gap) => w.failover(ms(gap)),
                // Someone adds a unit to a row by hand (and the next holder
                // reads the table: verify).
                Op::HandEdit(u, i) => {
                    if let Some(m) = w.members.get(i).filter(|m| m.listed) {
                        let mut rows = w.granted.rows().clone();
                        let row = rows.entry(m.name.clone()).or_default();
                        let u = format!("u{u}");
                        if !decode(row).any(|x| x == u) {
                            if !row.is_empty() { row.push(','); }
                            row.push_str(&u);
                        }
                        w.granted = MatchingTable::from_rows(rows);
                        w.generation += 1;
                        w.failover(Duration::ZERO);
                        // A hand-edit can give a unit to two members at
                        // once; nothing can prevent that. The check is that
                        // the repair ends it: skip the check until the next
                        // holder's first write.
                        w.run_unchecked_until_repaired();
                    }
                }
            }
        }
        // Settle: every listed unit ends up with a live, non-draining member
        // when there is one, and drains finish.
        for m in &mut w.members {
            m.paused_until = None;
            m.cut_until = None;
            m.answers_lost_until = None;
        }
        w.run(ms(6_000));
        let t = w.t;
        let eligible = w.members.iter().any(|m| m.listed && m.active(t) && !m.draining);
        if eligible {
            let working: BTreeSet<&String> = w.members.iter().flat_map(|m| m.working(t)).collect();
            for u in &w.units {
                prop_assert!(working.contains(u), "unit {u} is worked on by nobody\n{:#?}\n{:?}\n{:?}", w.members, w.granted, w.transit);
            }
        }
        for m in w.members.iter().filter(|m| m.draining && m.alive) {
            prop_assert!(!m.listed, "{} never finished draining\n{:#?}\n{:?}", m.name, w.members, w.granted);
        }
    }
}

impl World {
    /// Runs until the holder's first plan after a hand-edit, without the
    /// ownership check (the edit itself may have made two owners), then
    /// until both owners' work is over.
    fn run_unchecked_until_repaired(&mut self) {
        let g = self.generation;
        // (An edit that changed nothing for the planner gets no write.)
        let give_up = self.t + ms(2000);
        while self.generation == g && self.t < give_up {
            self.t += ms(10);
            for i in 0..self.members.len() {
                self.member_step(i);
            }
            self.holder_step();
        }
        // The repair revoked the unit from both; neither has it once they
        // stopped (acknowledged, or their hold ended).
        let repair = self.generation;
        let until = self.t + DEADLINE + SETTINGS.handoff_delay;
        let caught_up = |w: &World| {
            w.members
                .iter()
                .all(|m| !m.active(w.t) || !m.listed || m.processed >= repair)
        };
        while self.t < until && (self.overlap().is_some() || !caught_up(self)) {
            self.t += ms(10);
            for i in 0..self.members.len() {
                self.member_step(i);
            }
            self.holder_step();
        }
        assert_eq!(self.overlap(), None, "the repair did not end the overlap");
    }

    fn overlap(&self) -> Option<String> {
        let mut owner: BTreeMap<&str, &str> = BTreeMap::new();
        for m in &self.members {
            for u in m.working(self.t) {
                if owner.insert(u, &m.name).is_some() {
                    return Some(u.clone());
                }
            }
        }
        None
    }
}

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
