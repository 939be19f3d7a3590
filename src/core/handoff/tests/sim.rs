//! The simulation: a holder that plans with the real planner and keeps the
//! real [`Ledger`], members that follow the protocol (or the old one), and a
//! Redis that does what a real one can do: apply a write and lose its reply,
//! lose a write, fail a read, apply a write that too few replicas
//! acknowledged and lose it in a failover a little later (members may have
//! read it), refuse a write whose expected version is not its own, hold the
//! reports under a key of the wrong type, lose its data. Members read late, stop slowly, pause, die, restart on the
//! same address, lose Redis, are refused by a firewall on the holder's path
//! while they keep working, and drain; units come and go; the holder fails
//! over mid-handoff; a table is edited by hand. At every step no unit is
//! worked on by two members.
//!
//! The holder's glue between the planner and the ledger mirrors the cycle's
//! (`coordinator::holder::core::step`): read what the ledger says must be read,
//! raise the floor above a lost numbering, plan from the known table or the
//! stored one (verified), write, and tell the ledger the outcome.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use proptest::prelude::*;
use std::time::Instant;

use super::super::*;
use super::{SETTINGS, decode, ms};

/// One member of the simulation.
#[derive(Debug, Clone)]
struct Sim {
    name: String,
    /// Speaks the protocol (acknowledges, fences itself).
    acks: bool,
    /// The Redis client id it reads on and names in its report (a new one
    /// per process), if it names one.
    client: Option<RedisConnection>,
    alive: bool,
    /// Paused until then: no reads, no pings answered, no progress.
    paused_until: Option<Instant>,
    /// Redis unreachable until then (pings still answered).
    cut_until: Option<Instant>,
    /// Until then it receives pings but its answers never reach the holder
    /// (lost, or later than the ping timeout).
    answers_lost_until: Option<Instant>,
    /// Until then a firewall rejects the holder's pings (the holder sees a
    /// refusal) while the member runs and reads Redis.
    rejected_until: Option<Instant>,
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
    fn restart(&mut self, t: Instant, client: Option<RedisConnection>) {
        self.alive = true;
        self.client = client;
        self.paused_until = None;
        self.cut_until = None;
        self.answers_lost_until = None;
        self.rejected_until = None;
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

    fn rejected(&self, t: Instant) -> bool {
        self.rejected_until.is_some_and(|r| t < r)
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

    fn report(&self) -> MemberReport {
        MemberReport {
            applied: self.applied,
            draining: self.draining,
            deadline: DEADLINE,
            weight: 1,
            client: self.client,
        }
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
    /// A firewall REJECTs the holder's pings to a member for this long.
    Reject(usize, u64),
    Drain(usize),
    AddUnit(u8),
    RemoveUnit(u8),
    Failover(u64),
    HandEdit(u8, usize),
    /// Redis loses every key; the holder keeps its lease and memory. (A
    /// holder that takes over after a loss, before a write restored the
    /// table, grants every unit at once: a documented limit, not simulated.)
    DataLoss,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        8 => (10u64..600).prop_map(Op::Run),
        1 => any::<bool>().prop_map(Op::Join),
        1 => (0usize..8).prop_map(Op::Kill),
        1 => (0usize..8).prop_map(Op::Restart),
        1 => ((0usize..8), (0u64..80)).prop_map(|(m, d)| Op::KillAndRestart(m, d)),
        1 => ((0usize..8), (100u64..2500)).prop_map(|(m, d)| Op::Pause(m, d)),
        1 => ((0usize..8), (100u64..2500)).prop_map(|(m, d)| Op::CutRedis(m, d)),
        1 => ((0usize..8), (100u64..2500)).prop_map(|(m, d)| Op::LoseAnswers(m, d)),
        1 => ((0usize..8), (100u64..2500)).prop_map(|(m, d)| Op::Reject(m, d)),
        1 => (0usize..8).prop_map(Op::Drain),
        1 => (0u8..12).prop_map(Op::AddUnit),
        1 => (0u8..12).prop_map(Op::RemoveUnit),
        1 => (0u64..1500).prop_map(Op::Failover),
        1 => ((0u8..12), (0usize..8)).prop_map(|(u, m)| Op::HandEdit(u, m)),
        1 => Just(Op::DataLoss),
    ]
}

/// How Redis treats a cycle's calls (drawn per cycle from the schedule).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fate {
    /// Every call works.
    Fine,
    /// A read fails (the reports, or what a stale ledger must read): the
    /// cycle is skipped.
    ReadFails,
    /// The write is applied, and its reply lost.
    ReplyLost,
    /// The write is lost before Redis applies it.
    WriteLost,
    /// The write is applied, members may read it, too few replicas
    /// acknowledge it in time (the holder does not know its outcome), and a
    /// failover to a replica that lagged takes Redis back to before it a
    /// little later, unless a confirmed write (which replicas acknowledged,
    /// with everything before it) comes first.
    AppliedThenLost,
    /// The call times out before Redis runs the write, and Redis runs it a
    /// little later: after the holder read Redis again, maybe after its
    /// next write (which its version then refuses).
    LandsLate,
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

/// What Redis holds.
#[derive(Debug, Clone, Default)]
struct Redis {
    generation: u64,
    /// `{T}:meta`'s version: every write increments it, and a write that
    /// expects another is refused.
    version: u64,
    granted: MatchingTable,
    transit: Transits,
    reports: BTreeMap<String, MemberReport>,
    /// The reports hash holds another type until then.
    wrong_type_until: Option<Instant>,
}

impl Redis {
    /// No unit in two rows, or in a row and in transit.
    fn consistent(&self) -> Result<(), String> {
        let mut in_rows = BTreeSet::new();
        let transit = self.transit.get("g");
        for r in self.granted.rows().values() {
            for u in decode(r) {
                if !in_rows.insert(u) {
                    return Err(format!("unit {u} in two rows"));
                }
                if transit.is_some_and(|t| t.contains_key(u)) {
                    return Err(format!("unit {u} in a row and in transit"));
                }
            }
        }
        Ok(())
    }
}

/// The holder's memory (lost on failover).
struct Holder {
    ledger: Ledger,
    /// Refused on a connection opened then; and, for a member whose process
    /// is gone, Redis without its connection.
    refused: BTreeMap<String, Instant>,
    disconnected: BTreeMap<String, Instant>,
    reports: BTreeMap<String, MemberReport>,
    /// Last reports of members whose entry vanished while they hold
    /// anything (as `coordinator::holder::handoff` keeps them).
    vanished: BTreeMap<String, MemberReport>,
    reports_read: bool,
    floor: u64,
}

impl Holder {
    fn new() -> Holder {
        Holder {
            ledger: Ledger::new(),
            refused: BTreeMap::new(),
            disconnected: BTreeMap::new(),
            reports: BTreeMap::new(),
            vanished: BTreeMap::new(),
            reports_read: false,
            floor: 0,
        }
    }

    /// Forgets vanished reports of members with no row and nothing owed.
    fn retire_vanished(&mut self) {
        let owing: BTreeSet<String> = self
            .ledger
            .transit()
            .values()
            .flat_map(|u| u.values())
            .flat_map(|t| t.origins().map(str::to_string))
            .collect();
        let rows = self.ledger.granted().map(|g| g.rows());
        self.vanished
            .retain(|m, _| owing.contains(m) || rows.is_none_or(|r| r.contains_key(m)));
    }

    fn facts(&self, m: &str) -> MemberFacts {
        MemberFacts {
            refused_since: self.refused.get(m).copied(),
            disconnected_since: self.disconnected.get(m).copied(),
            report: self
                .reports
                .get(m)
                .or_else(|| self.vanished.get(m))
                .copied(),
            report_vanished: !self.reports.contains_key(m) && self.vanished.contains_key(m),
            reports_read: self.reports_read,
        }
    }
}

struct World {
    t: Instant,
    members: Vec<Sim>,
    units: BTreeSet<String>,
    redis: Redis,
    holder: Holder,
    /// No holder acts until then (a failover).
    holder_back: Instant,
    next_cycle: Instant,
    /// The cycle whose pings went out: planned and written then. Members
    /// read (and restart) in between, as they do while a real cycle's pings
    /// settle and its write travels.
    write_due: Option<Instant>,
    delays: std::iter::Cycle<std::vec::IntoIter<u64>>,
    fates: std::iter::Cycle<std::vec::IntoIter<u8>>,
    /// Client ids handed out so far.
    clients: u64,
    /// A revocation was made while the reports could not be read: it waits
    /// the longest any member may ask for.
    waited_longest: bool,
    /// Writes whose outcome the holder did not know, for the record.
    unknown_writes: usize,
    /// Redis lost its data and no confirmed write restored the table yet.
    lost_unwritten: bool,
    /// A failover due then takes Redis back to this state (the reports
    /// stay: members write theirs again).
    rollback: Option<(Instant, Redis)>,
    /// A write on its way, that Redis runs then.
    late: Option<Late>,
}

/// A table write Redis runs after its caller gave up on it.
struct Late {
    at: Instant,
    expected_version: u64,
    generation: u64,
    granted: MatchingTable,
    transit: Transits,
}

impl World {
    fn new(delays: Vec<u64>, fates: Vec<u8>) -> World {
        let t = crate::core::timing::test_t0();
        let mut w = World {
            t,
            members: Vec::new(),
            units: (0..6).map(|i| format!("u{i}")).collect(),
            redis: Redis {
                generation: 1,
                ..Redis::default()
            },
            holder: Holder::new(),
            holder_back: t,
            next_cycle: t,
            write_due: None,
            delays: delays.into_iter().cycle(),
            fates: fates.into_iter().cycle(),
            clients: 0,
            waited_longest: false,
            unknown_writes: 0,
            lost_unwritten: false,
            rollback: None,
            late: None,
        };
        for acks in [true, true, false] {
            w.join(acks);
        }
        w
    }

    fn delay(&mut self) -> Duration {
        ms(self.delays.next().unwrap())
    }

    /// The next cycle's fate: mostly fine.
    fn fate(&mut self) -> Fate {
        match self.fates.next().unwrap() {
            0 => Fate::ReadFails,
            1 => Fate::ReplyLost,
            2 => Fate::WriteLost,
            12 | 13 => Fate::AppliedThenLost,
            14 => Fate::LandsLate,
            _ => Fate::Fine,
        }
    }

    /// A client id for a new process of the protocol: one in two names it.
    fn client(&mut self) -> Option<RedisConnection> {
        self.clients += 1;
        self.clients
            .is_multiple_of(2)
            .then_some(RedisConnection::id(self.clients))
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
        let client = if acks { self.client() } else { None };
        let m = Sim {
            name,
            acks,
            client,
            alive: true,
            paused_until: None,
            cut_until: None,
            answers_lost_until: None,
            rejected_until: None,
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
        };
        // A member of the protocol reports at its start, before it starts
        // any unit.
        if acks {
            self.redis.reports.insert(m.name.clone(), m.report());
        }
        self.members.push(m);
    }

    fn restart(&mut self, i: usize) {
        let client = if self.members[i].acks {
            self.client()
        } else {
            None
        };
        let t = self.t;
        self.members[i].restart(t, client);
        if self.members[i].acks {
            let r = self.members[i].report();
            self.redis.reports.insert(self.members[i].name.clone(), r);
        }
    }

    /// Every unit is worked on by at most one member; the table and transit
    /// keep their invariants.
    fn check(&self) {
        if let Some(u) = self.overlap() {
            panic!(
                "at {:?}: unit {u} worked on by two members at once\n{:#?}\n{:?}\n{:?}",
                self.t, self.members, self.redis.granted, self.redis.transit
            );
        }
        if let Err(e) = self.redis.consistent() {
            panic!("{e}");
        }
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

    fn member_step(&mut self, i: usize) {
        let t = self.t;
        let (generation, granted) = (self.redis.generation, self.redis.granted.clone());
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
        // A generation below the last processed one (Redis lost writes) is
        // ignored by a member of the protocol until the holder writes one
        // above it.
        // A read that came back.
        if let Some((due, sent, g, row)) = m.read.clone()
            && t >= due
        {
            m.read = None;
            m.last_read_ok = m.last_read_ok.max(sent);
            // (An old worker follows its row, whatever the generation.)
            if g >= m.processed || !m.acks {
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
        // Its report, written when it changed (or lost with Redis' data),
        // unless Redis is out of its reach or the key holds another type.
        let wrong_type = self.redis.wrong_type_until.is_some_and(|w| t < w);
        if m.acks && m.cut_until.is_none_or(|c| t >= c) && !wrong_type {
            let r = m.report();
            if self.redis.reports.get(&m.name) != Some(&r) {
                self.redis.reports.insert(m.name.clone(), r);
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
        // Pings, each on a connection opened now.
        let h = &mut self.holder;
        for m in self.members.iter_mut().filter(|m| m.listed) {
            let lost = m.answers_lost_until.is_some_and(|l| t < l);
            let rejected = m.rejected(t);
            let answers = m.active(t) && !m.fenced(t) && !lost && !rejected;
            if m.active(t) && !rejected {
                m.last_ping = t;
            }
            if answers {
                h.refused.remove(&m.name);
                h.disconnected.remove(&m.name);
            } else if !m.alive || rejected {
                // A dead process refuses, and so does a firewall's REJECT;
                // a paused or fenced member does not answer OK, which proves
                // nothing. Redis has no connection of a dead process.
                h.refused.insert(m.name.clone(), t);
                if !m.alive {
                    h.disconnected.insert(m.name.clone(), t);
                }
            }
        }
        // The plan and its write follow 0 to 40 ms later.
        let lag = ms(self.delay().as_millis() as u64 / 100 * 10);
        if lag.is_zero() {
            self.plan_and_write();
        } else {
            self.write_due = Some(t + lag);
        }
    }

    /// One holder cycle's reads, plan and write, as the cycle does them.
    fn plan_and_write(&mut self) {
        let t = self.t;
        let fate = self.fate();
        if fate == Fate::ReadFails {
            return;
        }
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
        let h = &mut self.holder;
        // What the ledger says must be read first.
        if h.ledger.stale() {
            let stored: Transits = self
                .redis
                .transit
                .iter()
                .map(|(g, units)| {
                    let units = units
                        .iter()
                        .map(|(u, tr)| {
                            let mut tr = tr.clone();
                            tr.waiting_since = t;
                            (u.clone(), tr)
                        })
                        .collect();
                    (g.clone(), units)
                })
                .collect();
            h.ledger.resync(
                Some(HeldTable::new(
                    Arc::new(self.redis.granted.clone()),
                    Some(self.redis.generation),
                )),
                stored,
                self.redis.version,
                &groups,
            );
        }
        // The reports: of another type, the known ones stay and revocations
        // wait the longest.
        if self.redis.wrong_type_until.is_some_and(|w| t < w) {
            h.reports_read = false;
        } else {
            let before = std::mem::replace(&mut h.reports, self.redis.reports.clone());
            for (m, r) in before {
                if !h.reports.contains_key(&m) {
                    h.vanished.insert(m, r);
                }
            }
            let reports = &h.reports;
            h.vanished.retain(|m, _| !reports.contains_key(m));
            h.reports_read = true;
            // Reports Redis lost are written back where the member wrote
            // none since (as `holder::core::step` does at a cycle's end).
            for (m, r) in &h.vanished {
                self.redis.reports.entry(m.clone()).or_insert(*r);
            }
        }
        h.floor = h.floor.max(self.redis.generation);
        let lost_numbering = h
            .reports
            .values()
            .map(|r| r.applied)
            .filter(|a| *a > self.redis.generation)
            .max();
        if let Some(a) = lost_numbering {
            h.ledger.renumber_up_to(a);
            h.floor = h.floor.max(a);
        }
        let (granted, verify) = match h.ledger.granted() {
            Some(g) if **g == self.redis.granted => (Arc::clone(g), false),
            _ => {
                let (from, start) = starting_point(
                    h.ledger.last_written(),
                    Arc::new(self.redis.granted.clone()),
                );
                if from == StartingPoint::Stored {
                    h.ledger.saw(&start, self.redis.generation);
                }
                (start, true)
            }
        };
        let live: BTreeSet<String> = self
            .members
            .iter()
            .filter(|m| m.listed && m.active(t) && !m.fenced(t) && !m.rejected(t))
            .map(|m| m.name.clone())
            .collect();
        let eligible: BTreeSet<String> = self
            .members
            .iter()
            .filter(|m| live.contains(&m.name) && !m.draining)
            .map(|m| m.name.clone())
            .collect();
        let desired = solve(&self.units, &eligible);
        let units: Vec<String> = self.units.iter().cloned().collect();
        let facts = |m: &str| h.facts(m);
        let rows_for = |m: &str| live.contains(m);
        let p = plan(&PlanInput {
            granted: &granted,
            verify,
            held_before: if verify { h.ledger.held() } else { &[] },
            recovery: None,
            desired: &desired,
            transit: h.ledger.transit(),
            groups: &groups,
            former_group: &|_| Some("g".to_string()),
            units: &units,
            facts: &facts,
            rows_for: &rows_for,
            settings: SETTINGS,
            now: t,
            now_ms: 0,
        });
        let numbering = p
            .transit
            .values()
            .flat_map(|u| u.values())
            .any(|tr| tr.revoked_at == 0);
        if p.revoked > 0 && !h.reports_read {
            self.waited_longest = true;
        }
        if p.granted == *granted
            && p.transit == *h.ledger.transit()
            && !verify
            && !numbering
            && lost_numbering.is_none()
        {
            h.ledger.unchanged(granted, self.redis.generation);
            h.retire_vanished();
            return;
        }
        // Refused when Redis' version is not the one the plan read.
        if h.ledger.version().is_some_and(|v| v != self.redis.version) {
            h.ledger.refused();
            return;
        }
        let g = h.floor + 1;
        let mut transit = p.transit.clone();
        for tr in transit.values_mut().flat_map(|u| u.values_mut()) {
            if tr.revoked_at == 0 {
                tr.revoked_at = g;
            }
        }
        if fate == Fate::LandsLate {
            if self.late.is_none() {
                let at = t + self.delays.next().map_or(ms(50), ms);
                self.late = Some(Late {
                    at,
                    expected_version: self.redis.version,
                    generation: g,
                    granted: p.granted.clone(),
                    transit,
                });
            }
        } else if fate != Fate::WriteLost {
            // (Not back to a hand edit's state: that breaks what no holder
            // can prevent, and its repair is checked on its own.)
            if fate == Fate::AppliedThenLost
                && self.rollback.is_none()
                && self.redis.consistent().is_ok()
            {
                let at = t + self.delays.next().map_or(ms(50), ms);
                self.rollback = Some((at, self.redis.clone()));
            }
            self.redis.generation = g;
            self.redis.version += 1;
            self.redis.granted = p.granted.clone();
            self.redis.transit = transit;
        }
        if fate == Fate::Fine {
            let version = self.redis.version;
            h.ledger
                .written(Arc::new(p.granted), g, p.transit, Some(g), version, t);
            h.retire_vanished();
            self.rollback = None;
            self.lost_unwritten = false;
        } else {
            // Too few replicas: the generation is known; else not.
            let known = (fate == Fate::AppliedThenLost).then_some(g);
            h.ledger
                .unknown(Some(HeldTable::new(Arc::new(p.granted), known)));
            self.unknown_writes += 1;
        }
        h.floor = g;
    }

    fn failover(&mut self, gap: Duration) {
        // (A late write of the old holding is fenced by its epoch.)
        self.late = None;
        self.holder = Holder::new();
        self.write_due = None;
        self.holder_back = self.t + gap;
    }

    fn run(&mut self, d: Duration) {
        let until = self.t + d;
        while self.t < until {
            self.step();
            self.check();
        }
    }

    fn step(&mut self) {
        self.t += ms(10);
        if self.late.as_ref().is_some_and(|l| self.t >= l.at) {
            let l = self.late.take().expect("checked");
            // Refused unless nothing wrote since its plan read Redis.
            if self.redis.version == l.expected_version {
                self.redis.generation = l.generation;
                self.redis.version += 1;
                self.redis.granted = l.granted;
                self.redis.transit = l.transit;
            }
        }
        if let Some((at, _)) = &self.rollback
            && self.t >= *at
        {
            let (_, before) = self.rollback.take().expect("checked");
            let reports = std::mem::take(&mut self.redis.reports);
            let wrong_type_until = self.redis.wrong_type_until;
            self.redis = Redis {
                reports,
                wrong_type_until,
                ..before
            };
            // A holder that takes over now, before a write restored what
            // was lost, grants what members may work on: the documented
            // limit, not simulated.
            self.lost_unwritten = true;
        }
        for i in 0..self.members.len() {
            self.member_step(i);
        }
        self.holder_step();
    }

    /// Runs until the holder's first plan after a hand-edit, without the
    /// ownership check (the edit itself may have made two owners), then
    /// until both owners' work is over.
    fn run_unchecked_until_repaired(&mut self) {
        let g = self.redis.generation;
        // (An edit that changed nothing for the planner gets no write.)
        let until_written = |w: &mut World| {
            let give_up = w.t + ms(2000);
            while w.redis.generation == g && w.t < give_up {
                w.step();
            }
        };
        until_written(self);
        // No repair is written while Redis loses every write: once the
        // faults had their turn, Redis works until one is.
        if self.redis.generation == g {
            let faults = std::mem::replace(&mut self.fates, vec![u8::MAX].into_iter().cycle());
            until_written(self);
            self.fates = faults;
        }
        // The repair revoked the unit from both; neither has it once they
        // stopped (acknowledged, or their hold ended).
        let repair = self.redis.generation;
        let until = self.t + DEADLINE + SETTINGS.handoff_delay;
        let caught_up = |w: &World| {
            w.members
                .iter()
                .all(|m| !m.active(w.t) || !m.listed || m.processed >= repair)
        };
        while self.t < until && (self.overlap().is_some() || !caught_up(self)) {
            self.step();
        }
        assert_eq!(self.overlap(), None, "the repair did not end the overlap");
    }
}

/// Cases per run: 400, or `PROPTEST_CASES`.
fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(400)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), ..ProptestConfig::default() })]

    /// Members join, die, pause, lose Redis, are refused by a firewall,
    /// drain; units come and go; the holder fails over mid-handoff; Redis
    /// loses replies, writes, reads and its data, and holds the reports under
    /// a key of the wrong type; members read late and stop slowly: no unit is
    /// ever worked on by two members, and once things settle every listed
    /// unit is worked on by a live member when there is one.
    #[test]
    fn no_unit_ever_has_two_owners(
        ops in proptest::collection::vec(op(), 1..40),
        delays in proptest::collection::vec(0u64..400, 1..20),
        fates in proptest::collection::vec(0u8..15, 1..30),
        wrong_type in proptest::option::weighted(0.1, 100u64..1500),
    ) {
        run_case(ops, delays, fates, wrong_type)?;
    }
}

/// Cases the simulation found before it modelled Redis' faults (shrunk;
/// their seeds no longer replay under the new strategies): every call works.
#[test]
fn cases_found_before_redis_faults_were_modelled() {
    use Op::*;
    let cases: Vec<(Vec<Op>, Vec<u64>)> = vec![
        (vec![Run(251), HandEdit(1, 0)], vec![0]),
        (vec![Run(10), Run(41), AddUnit(10), Run(10)], vec![1]),
        (
            vec![Run(91), Run(231), Pause(0, 421), Run(251), Run(151)],
            vec![81],
        ),
        (
            vec![
                Run(41),
                Run(501),
                Run(281),
                Run(501),
                Pause(1, 711),
                Run(281),
                Run(411),
            ],
            vec![251, 0, 0, 0, 0, 81],
        ),
        (
            vec![
                Run(10),
                LoseAnswers(1, 601),
                Run(511),
                Pause(1, 421),
                Run(411),
            ],
            vec![41, 0, 0, 0],
        ),
        (
            vec![
                Run(181),
                Run(151),
                KillAndRestart(0, 41),
                Run(61),
                RemoveUnit(0),
                KillAndRestart(0, 11),
                Run(10),
            ],
            vec![0, 0, 300, 0, 0, 300, 300, 0, 0],
        ),
    ];
    for (ops, delays) in cases {
        run_case(ops.clone(), delays, vec![u8::MAX], None)
            .unwrap_or_else(|e| panic!("{ops:?}: {e}"));
    }
}

/// Cases that failed before the holder kept a [`Ledger`] (shrunk): the
/// first overlaps when the holder plans from what it believes it wrote after
/// a write whose reply was lost (issue 20, finding 1); the second when a
/// report lost with Redis' data made a member of the protocol look like an
/// old worker whose refusal (a firewall's) releases its units; the third
/// when a write of unknown outcome, read by members, was lost in a failover
/// and the holder did not claim what they read (found in 1.6 s with the
/// claims turned off).
#[test]
fn cases_found_with_redis_faults() {
    use Op::*;
    let cases: Vec<(Vec<Op>, Vec<u64>, Vec<u8>)> = vec![
        (
            vec![
                Run(101),
                Run(161),
                Run(351),
                Join(false),
                CutRedis(0, 511),
                Run(261),
                KillAndRestart(1, 51),
                Run(141),
            ],
            vec![0, 241],
            vec![0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0],
        ),
        (
            vec![Run(101), DataLoss, Pause(0, 100), Reject(0, 131), Run(121)],
            vec![0, 0, 81, 0],
            vec![3],
        ),
        (
            vec![
                Run(571),
                Run(61),
                Run(381),
                Run(31),
                Join(true),
                Kill(4),
                Run(21),
            ],
            vec![0, 0, 171, 31],
            vec![12],
        ),
    ];
    for (ops, delays, fates) in cases {
        run_case(ops.clone(), delays, fates, None).unwrap_or_else(|e| panic!("{ops:?}: {e}"));
    }
}

/// One simulated run (see [`no_unit_ever_has_two_owners`]).
fn run_case(
    ops: Vec<Op>,
    delays: Vec<u64>,
    fates: Vec<u8>,
    wrong_type: Option<u64>,
) -> Result<(), TestCaseError> {
    let mut w = World::new(delays, fates);
    for (n, op) in ops.into_iter().enumerate() {
        let t = w.t;
        if n == 3
            && let Some(d) = wrong_type
        {
            w.redis.wrong_type_until = Some(t + ms(d));
        }
        match op {
            Op::Run(d) => w.run(ms(d)),
            Op::Join(acks) => {
                if w.members.len() < 8 {
                    w.join(acks)
                }
            }
            Op::Kill(i) => {
                if let Some(m) = w.members.get_mut(i) {
                    m.alive = false;
                }
            }
            Op::Restart(i) => {
                let dead: Vec<usize> = (0..w.members.len())
                    .filter(|&j| !w.members[j].alive)
                    .collect();
                if !dead.is_empty() {
                    w.restart(dead[i % dead.len()]);
                }
            }
            Op::KillAndRestart(i, d) => {
                if !w.members.is_empty() {
                    let i = i % w.members.len();
                    w.members[i].alive = false;
                    w.run(ms(d));
                    w.restart(i);
                }
            }
            // Only members of the protocol may pause, lose Redis or be
            // refused while they run: an old worker is promised nothing
            // then (`docs/guarantees.md`, limits).
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
            Op::Reject(i, d) => {
                if let Some(m) = w.members.get_mut(i).filter(|m| m.acks) {
                    m.rejected_until = Some(t + ms(d));
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
            Op::AddUnit(u) => {
                w.units.insert(format!("u{u}"));
            }
            Op::RemoveUnit(u) => {
                w.units.remove(&format!("u{u}"));
            }
            // (Not while Redis lost, or is about to lose, writes of this
            // holder: a new one cannot know what members read from them.
            // A documented limit.)
            Op::Failover(gap) => {
                if !w.lost_unwritten && w.rollback.is_none() {
                    w.failover(ms(gap));
                }
            }
            // Only while the holder acts on what it read: one that has
            // not read yet takes over after the loss (not simulated).
            Op::DataLoss if !w.holder.ledger.stale() && t >= w.holder_back => {
                let wrong_type_until = w.redis.wrong_type_until;
                w.redis = Redis {
                    wrong_type_until,
                    ..Redis::default()
                };
                w.lost_unwritten = true;
            }
            Op::DataLoss => {}
            // Someone adds a unit to a row by hand (and the next holder
            // reads the table: verify).
            Op::HandEdit(u, i) => {
                if let Some(m) = w
                    .members
                    .get(i)
                    .filter(|m| m.listed && !w.lost_unwritten && w.rollback.is_none())
                {
                    let mut rows = w.redis.granted.rows().clone();
                    let row = rows.entry(m.name.clone()).or_default();
                    let u = format!("u{u}");
                    if !decode(row).any(|x| x == u) {
                        if !row.is_empty() {
                            row.push(',');
                        }
                        row.push_str(&u);
                    }
                    w.redis.granted = MatchingTable::from_rows(rows);
                    w.redis.generation += 1;
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
    // when there is one, and drains finish (after the longest wait, when
    // a revocation had to wait it).
    for m in &mut w.members {
        m.paused_until = None;
        m.cut_until = None;
        m.answers_lost_until = None;
        m.rejected_until = None;
    }
    w.redis.wrong_type_until = None;
    w.fates = vec![u8::MAX].into_iter().cycle();
    let settle = if w.waited_longest {
        SETTINGS.longest_wait() + ms(6_000)
    } else {
        ms(6_000)
    };
    w.run(settle);
    let t = w.t;
    let eligible = w
        .members
        .iter()
        .any(|m| m.listed && m.active(t) && !m.draining);
    if eligible {
        let working: BTreeSet<&String> = w.members.iter().flat_map(|m| m.working(t)).collect();
        for u in &w.units {
            prop_assert!(
                working.contains(u),
                "unit {u} is worked on by nobody\n{:#?}\n{:?}\n{:?}",
                w.members,
                w.redis.granted,
                w.redis.transit
            );
        }
    }
    for m in w.members.iter().filter(|m| m.draining && m.alive) {
        prop_assert!(
            !m.listed,
            "{} never finished draining\n{:#?}\n{:?}",
            m.name,
            w.members,
            w.redis.granted
        );
    }
    Ok(())
}
