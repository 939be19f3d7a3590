//! The simulated world: the in-memory Redis, the members (each runs the
//! real `core::ownership`), the network between the holder and them, and
//! the record the checks read. Shared by the replicas, the members' tasks
//! and the pings, behind one lock; every step takes tokio's (paused) clock.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use std::time::Instant;

use crate::core::handoff::{MemberReport, PingView, RedisConnection};
use crate::core::keys::Keys;
use crate::core::ownership::{Ownership, Step};
use crate::edge::memory::{Fault, Server};

/// A seeded generator (xorshift64*): every draw of a run comes from it, so
/// a seed replays the run.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
    }
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    /// True `per_mille` times in a thousand.
    pub fn chance(&mut self, per_mille: u64) -> bool {
        self.below(1000) < per_mille
    }
    pub fn millis(&mut self, lo: u64, hi: u64) -> Duration {
        Duration::from_millis(lo + self.below(hi - lo + 1))
    }
}

/// One member process (a new one on the same address after a restart).
pub struct SimMember {
    pub name: String,
    pub alive: bool,
    /// Paused (SIGSTOP) until then: no reads, no pings answered.
    pub paused_until: Option<Instant>,
    /// Until then the holder's pings to it are lost (a partition).
    pub cut_until: Option<Instant>,
    pub ownership: Ownership,
    /// Its clock runs at this rate against the simulation's (skew).
    pub rate: f64,
    /// Where its local clock started: local = base + (now - base) * rate.
    pub base: Instant,
    /// Its Redis connection (client id) on the server run it opened on.
    pub conn: Option<(u64, u64)>,
    /// Units the application is stopping: done at, with the hold's end (in
    /// the simulation's time) when the revocation came.
    pub stopping: BTreeMap<String, (Instant, Instant)>,
    /// Each owned unit's hold end (the simulation's time) before the last
    /// call into its ownership: a revocation keeps the hold it had.
    pub ends: BTreeMap<String, Instant>,
    /// When its last report was written.
    pub reported_at: Option<Instant>,
    /// When it acquired each unit it works on, and the token.
    pub since: BTreeMap<String, (Instant, u64)>,
    pub deadline: Duration,
    pub read_every: Duration,
    pub stop_takes: Duration,
    pub next_read: Instant,
    /// When it next re-registers and re-writes its last report (as
    /// `Member` does every `reregister_interval`, 5 s).
    pub next_refresh: Instant,
    pub draining: bool,
}

impl SimMember {
    /// Its local clock at `now`.
    pub fn local(&self, now: Instant) -> Instant {
        self.base + (now - self.base).mul_f64(self.rate)
    }

    /// The simulation's instant at which its local clock shows `local`.
    pub fn real(&self, local: Instant) -> Instant {
        self.base
            + local
                .saturating_duration_since(self.base)
                .div_f64(self.rate)
    }

    /// Remembers each owned unit's hold end, before a call that may
    /// revoke it.
    pub fn remember_ends(&mut self) {
        self.ends = self
            .ownership
            .owned()
            .into_iter()
            .filter_map(|t| {
                let end = self.ownership.hold_end(&t.unit)?;
                Some((t.unit, self.real(end)))
            })
            .collect();
    }

    pub fn active(&self, now: Instant) -> bool {
        self.alive && self.paused_until.is_none_or(|p| now >= p)
    }

    /// The units it works on at `now`, judged by its own holds: owned and
    /// held, or still being stopped within the hold it had.
    pub fn working(&self, now: Instant) -> Vec<String> {
        if !self.alive {
            return Vec::new();
        }
        let local = self.local(now);
        let owned = self
            .ownership
            .owned()
            .into_iter()
            .filter(|t| self.ownership.holds(&t.unit, local).is_some())
            .map(|t| t.unit);
        let stopping = self
            .stopping
            .iter()
            .filter(|(_, (done, end))| now < *done && now < *end)
            .map(|(u, _)| u.clone());
        owned.chain(stopping).collect()
    }
}

/// A violation of an invariant, at an instant (ms since the start).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    pub at_ms: u64,
    pub what: String,
}

/// The simulated world.
pub struct World {
    pub start: Instant,
    pub rng: Rng,
    pub server: Arc<Mutex<Server>>,
    pub keys: Keys,
    pub services: String,
    pub units_key: String,
    pub members: Vec<SimMember>,
    /// The last fencing token each unit was acquired with, and by whom.
    pub tokens: BTreeMap<String, (u64, String)>,
    pub violations: Vec<Violation>,
    /// Per mille of member reads and report writes that fail.
    pub member_faults: u64,
    /// What happened, for a failing seed's schedule.
    pub trace: Vec<String>,
    /// Set when a member wrote a report: the holder's hint (the `acked`
    /// channel).
    pub acked: bool,
    /// Every holding so far: when it began, its epoch, its replica.
    pub holdings: Vec<(Instant, u64, String)>,
    /// When Redis lost its data (the epoch counter with it).
    pub flushes: Vec<Instant>,
    /// Overlaps already recorded: (unit, members).
    pub seen_overlaps: BTreeSet<(String, Vec<String>)>,
    /// The faults injected, by kind: what the run tested.
    pub injected: BTreeMap<&'static str, usize>,
    /// Copies of the keyspace, the newest last (a replica's view, for a
    /// failover to one that lagged).
    pub copies: std::collections::VecDeque<(Instant, crate::edge::memory::Keyspace)>,
    /// The poison unit of this seed, if any: a member that acquires it
    /// crashes at once, and its supervisor starts it again a second later.
    pub poison: Option<String>,
    /// Members a supervisor starts again then.
    pub restart_at: BTreeMap<usize, Instant>,
    /// Crashes the poison unit caused.
    pub poison_kills: usize,
}

impl World {
    pub fn ms(&self, now: Instant) -> u64 {
        (now - self.start).as_millis() as u64
    }

    pub fn ms_precise(&self, now: Instant) -> String {
        format!("{:?}", now - self.start)
    }

    pub fn log(&mut self, now: Instant, what: String) {
        let at = self.ms(now);
        self.trace.push(format!("{at:>6} ms  {what}"));
    }

    fn violation(&mut self, now: Instant, what: String) {
        let at_ms = self.ms(now);
        self.log(now, format!("VIOLATION {what}"));
        self.violations.push(Violation { at_ms, what });
    }

    /// No unit is worked on by two members at `now`, whatever Redis lost.
    pub fn check_overlap(&mut self, now: Instant) {
        let mut by_unit: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for m in &self.members {
            for u in m.working(now) {
                by_unit.entry(u).or_default().push(m.name.clone());
            }
        }
        for (unit, names) in by_unit {
            if names.len() < 2 || !self.seen_overlaps.insert((unit.clone(), names.clone())) {
                continue;
            }
            self.violation(now, format!("unit {unit} worked on by {names:?}"));
        }
    }

    /// A replica began holding `epoch` at `now`. Between two losses of
    /// Redis' data, epochs strictly increase: no holding repeats or goes
    /// below an earlier one's epoch. Across a loss a fresh holder may start
    /// lower (`docs/guarantees.md`, "Monotonic epochs need a witness").
    pub fn began_holding(&mut self, now: Instant, epoch: u64, replica: &str) {
        let since = self.flushes.iter().copied().filter(|f| *f <= now).max();
        let earlier = self
            .holdings
            .iter()
            .filter(|(at, _, _)| since.is_none_or(|f| *at >= f))
            .find(|(_, e, _)| *e >= epoch)
            .cloned();
        if let Some((at, e, by)) = earlier {
            let at = self.ms(at);
            self.violation(
                now,
                format!("{replica} holds epoch {epoch}, not above {by}'s epoch {e} (at {at} ms)"),
            );
        }
        self.holdings.push((now, epoch, replica.to_string()));
    }

    /// Counts one fault of `kind`.
    pub fn injected(&mut self, kind: &'static str) {
        *self.injected.entry(kind).or_default() += 1;
    }

    /// A member's read of its row, as `Member` reads it: the row, the
    /// generation and its connection, in one transaction (or a failure).
    pub fn member_read(&mut self, i: usize, now: Instant) {
        let fail = self.rng.chance(self.member_faults);
        if fail {
            self.injected("member-read-failed");
        }
        let name = self.members[i].name.clone();
        let read = {
            let mut s = self.server.lock().expect("server lock");
            s.tick();
            let run = s.run;
            let conn = match self.members[i].conn {
                Some((r, c)) if r == run => c,
                _ => {
                    let c = s.open_connection();
                    self.members[i].conn = Some((run, c));
                    c
                }
            };
            let at = s.now_ms;
            let row = s.keyspace.hget(&self.keys.table, name.as_bytes(), at);
            let generation = s.keyspace.hget(&self.keys.meta, b"generation", at);
            match (fail, row, generation) {
                (false, Ok(row), Ok(g)) => Some((
                    row.map(|r| String::from_utf8_lossy(&r).into_owned()),
                    g.and_then(|g| String::from_utf8(g).ok()?.parse::<u64>().ok()),
                    RedisConnection::on(conn, s.run_id()),
                )),
                _ => None,
            }
        };
        let Some((row, generation, client)) = read else {
            if std::env::var_os("SIM_DEBUG").is_some() {
                let mut s = self.server.lock().expect("server lock");
                let at = s.now_ms;
                let (t, m) = (
                    s.keyspace.type_of(&self.keys.table, at),
                    s.keyspace.type_of(&self.keys.meta, at),
                );
                eprintln!(
                    "{} {name} read failed (fault {fail}; table {t}, meta {m})",
                    self.ms(now)
                );
            }
            return;
        };
        let m = &mut self.members[i];
        let local = m.local(now);
        m.remember_ends();
        let outcome = m
            .ownership
            .read(local, local, generation, row.as_deref(), Some(client));
        if std::env::var_os("SIM_DEBUG").is_some() {
            eprintln!(
                "{} {name} read g={generation:?} row={row:?} client={client:?}: {outcome:?}",
                self.ms(now)
            );
        }
        if self.members[i].ownership.reassert_due() {
            // Redis lost writes: register again at once, as `Member` does.
            self.members[i].next_refresh = now;
        }
        self.after_steps(i, now);
        self.write_held(i, now);
        self.write_report(i, now);
    }

    /// Writes the member's statement for a holder's recovery if one is due
    /// (it may fail, and is then due again).
    pub fn write_held(&mut self, i: usize, now: Instant) {
        if !self.members[i].alive {
            return;
        }
        let m = &mut self.members[i];
        let local = m.local(now);
        let Some(held) = m.ownership.held_due(local) else {
            return;
        };
        let name = m.name.clone();
        let failed = self.rng.chance(self.member_faults);
        if failed {
            self.injected("member-statement-failed");
        }
        let report = self.members[i].ownership.written_report();
        let ok = !failed && {
            let mut s = self.server.lock().expect("server lock");
            let at = s.tick();
            // The statement, and the last report again (as `Member` writes
            // them, in one round trip: either may be refused).
            let held_ok = s
                .keyspace
                .hset(
                    &self.keys.held,
                    &[(name.clone().into_bytes(), held.encode().into_bytes())],
                    at,
                )
                .is_ok();
            let report_ok = report.is_none_or(|r| {
                s.keyspace
                    .hset(
                        &self.keys.members,
                        &[(name.clone().into_bytes(), r.encode().into_bytes())],
                        at,
                    )
                    .is_ok()
            });
            held_ok && report_ok
        };
        self.members[i].ownership.held_written(held.tag, ok);
        if ok {
            self.acked = true;
            self.log(
                now,
                format!("{name} states for recovery {}: {}", held.tag, held.encode()),
            );
        }
    }

    /// Writes the member's report if one is due (it may fail).
    pub fn write_report(&mut self, i: usize, now: Instant) {
        if !self.members[i].alive {
            return;
        }
        let Some(report) = self.members[i].ownership.report_due() else {
            return;
        };
        if self.rng.chance(self.member_faults) {
            self.injected("member-report-failed");
            return;
        }
        if !self.put_report(i, &report) {
            // Refused (a key of the wrong type): written again next time.
            return;
        }
        self.members[i].reported_at = Some(now);
        let name = self.members[i].name.clone();
        self.log(now, format!("{name} reports {}", report.encode()));
        let m = &mut self.members[i];
        let local = m.local(now);
        m.remember_ends();
        m.ownership.reported(local, report);
        self.acked = true;
        self.after_steps(i, now);
    }

    fn put_report(&mut self, i: usize, report: &MemberReport) -> bool {
        let name = self.members[i].name.clone();
        let mut s = self.server.lock().expect("server lock");
        let at = s.tick();
        // Reports of the wrong type are an operator's mistake the holder
        // reads as an error; the member's write fails the same way.
        s.keyspace
            .hset(
                &self.keys.members,
                &[(name.into_bytes(), report.encode().into_bytes())],
                at,
            )
            .is_ok()
    }

    /// Runs the member's steps: acquisitions are checked against the
    /// fencing tokens; revocations start stopping.
    pub fn after_steps(&mut self, i: usize, now: Instant) {
        let steps = self.members[i].ownership.take_steps();
        let mut poisoned = false;
        for step in steps {
            match step {
                Step::Acquire { units } => {
                    for t in units {
                        poisoned |= self.poison.as_ref() == Some(&t.unit);
                        let name = self.members[i].name.clone();
                        if let Some((last, by)) = self.tokens.get(&t.unit).cloned()
                            && by != name
                            && t.token.0 <= last
                        {
                            self.violation(
                                now,
                                format!(
                                    "unit {} acquired by {name} with token {} after {by} held it with {last}",
                                    t.unit, t.token.0
                                ),
                            );
                        }
                        self.members[i]
                            .since
                            .insert(t.unit.clone(), (now, t.token.0));
                        let prev = self.tokens.get(&t.unit).map_or(0, |x| x.0);
                        self.tokens
                            .insert(t.unit.clone(), (prev.max(t.token.0), name.clone()));
                        self.log(now, format!("{name} acquires {} ({})", t.unit, t.token.0));
                    }
                }
                Step::Revoke { units, why } => {
                    let m = &mut self.members[i];
                    for t in &units {
                        let end = m.ends.get(&t.unit).copied().unwrap_or(now);
                        let done = now + m.stop_takes;
                        m.stopping.insert(t.unit.clone(), (done, end.max(now)));
                    }
                    let name = m.name.clone();
                    let list: Vec<&str> = units.iter().map(|t| t.unit.as_str()).collect();
                    self.log(now, format!("{name} revokes {list:?} ({})", why.reason()));
                }
                Step::Overran { .. } => {}
            }
        }
        self.check_overlap(now);
        if poisoned && self.members[i].alive {
            // The application starts on the poison unit and crashes.
            self.injected("poison-crash");
            self.poison_kills += 1;
            self.kill_member(i, now);
            self.restart_at.insert(i, now + Duration::from_secs(1));
        }
    }

    /// Re-registers member `i` and re-writes the report it wrote last, if
    /// the refresh is due.
    pub fn member_refresh(&mut self, i: usize, now: Instant) {
        if self.members[i].next_refresh > now {
            return;
        }
        self.members[i].next_refresh = now + Duration::from_secs(5);
        let name = self.members[i].name.clone();
        {
            let mut s = self.server.lock().expect("server lock");
            let at = s.tick();
            if s.keyspace
                .lpos(&self.services, name.as_bytes(), at)
                .is_ok_and(|p| p.is_none())
            {
                let _ = s
                    .keyspace
                    .push(&self.services, &[name.clone().into_bytes()], true, at);
            }
        }
        if let Some(report) = self.members[i].ownership.written_report()
            && self.put_report(i, &report)
        {
            self.members[i].reported_at = Some(now);
        }
    }

    /// Finishes the stops due by `now`, and ends the holds that ended.
    pub fn member_tick(&mut self, i: usize, now: Instant) {
        let m = &mut self.members[i];
        let local = m.local(now);
        m.remember_ends();
        let done: Vec<String> = m
            .stopping
            .iter()
            .filter(|(_, (d, _))| *d <= now)
            .map(|(u, _)| u.clone())
            .collect();
        if !done.is_empty() {
            for u in &done {
                m.stopping.remove(u);
            }
            m.ownership.revoked(local, &done);
        }
        m.ownership.tick(local);
        self.after_steps(i, now);
        self.write_held(i, now);
        self.write_report(i, now);
    }

    /// The next instant member `i` must act (a read, a stop done, a hold
    /// ending).
    pub fn member_wake(&self, i: usize, now: Instant) -> Instant {
        let m = &self.members[i];
        // A dead process does nothing (until its supervisor starts it
        // again); a paused one nothing until it runs.
        if !m.alive {
            return self
                .restart_at
                .get(&i)
                .copied()
                .unwrap_or(now + Duration::from_secs(1))
                .min(now + Duration::from_secs(1));
        }
        if let Some(p) = m.paused_until.filter(|p| *p > now) {
            return p;
        }
        let stop = m.stopping.values().map(|(d, _)| *d).min();
        let hold = m.ownership.next_wake().map(|l| m.real(l));
        [Some(m.next_read), Some(m.next_refresh), stop, hold]
            .into_iter()
            .flatten()
            .min()
            .expect("a read is always due")
    }

    /// A ping from the holder reaches member `name` at `now`: whether it
    /// answers OK (`None`: no answer, it times out; `Some(false)`: refused,
    /// nothing listens).
    pub fn ping(&mut self, name: &str, now: Instant, view: Option<PingView>) -> Option<bool> {
        let i = self.members.iter().position(|m| m.name == name)?;
        let m = &mut self.members[i];
        if !m.alive {
            return Some(false);
        }
        if !m.active(now) || m.cut_until.is_some_and(|c| now < c) {
            return None;
        }
        let local = m.local(now);
        m.remember_ends();
        let ok = m.ownership.ping(local, view);
        self.after_steps(i, now);
        self.write_held(i, now);
        self.write_report(i, now);
        Some(ok)
    }

    /// Kills member `i` (SIGKILL): it works on nothing from now on, and its
    /// connection closes.
    pub fn kill_member(&mut self, i: usize, now: Instant) {
        let m = &mut self.members[i];
        m.alive = false;
        m.stopping.clear();
        m.since.clear();
        if let Some((run, c)) = m.conn.take() {
            let mut s = self.server.lock().expect("server lock");
            if s.run == run {
                s.open.remove(&c);
            }
        }
        let name = m.name.clone();
        self.log(now, format!("{name} killed"));
    }

    /// A new process on member `i`'s address.
    pub fn restart_member(&mut self, i: usize, now: Instant) {
        self.restart_at.remove(&i);
        let m = &mut self.members[i];
        m.alive = true;
        m.paused_until = None;
        m.cut_until = None;
        m.ownership = Ownership::new(m.deadline, 1, m.local(now));
        m.stopping.clear();
        m.ends.clear();
        m.since.clear();
        m.reported_at = None;
        m.conn = None;
        m.next_read = now;
        m.next_refresh = now;
        m.draining = false;
        let name = m.name.clone();
        self.log(now, format!("{name} restarted"));
    }

    /// The fault of one replica's store call.
    pub fn store_fault(rng: &mut Rng, op: &'static str, per_mille: u64) -> Fault {
        let write = matches!(op, "write table" | "acquire lease" | "renew lease");
        match rng.below(1000) {
            n if n < per_mille => Fault::Lost,
            n if n < 2 * per_mille => Fault::ReplyLost,
            n if write && n < 3 * per_mille => Fault::NotDurable,
            _ => Fault::None,
        }
    }

    /// Every unit listed now.
    pub fn units(&self) -> BTreeSet<String> {
        let mut s = self.server.lock().expect("server lock");
        let at = s.tick();
        s.keyspace
            .lrange(&self.units_key, at)
            .unwrap_or_default()
            .into_iter()
            .map(|u| String::from_utf8_lossy(&u).into_owned())
            .collect()
    }
}
