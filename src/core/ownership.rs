//! A member's side of the handoff: which units it owns, until when, and what
//! it tells the holder. Pure: every method takes the current instant, and the
//! work to do comes back as [`Step`]s for the caller to run.
//!
//! ```text
//!  read (generation g, row, client c)  of another server than the holder's ──▶ nothing (find the master again)
//!                                      on another connection than reported ──▶ report naming c, read again
//!                                      below the last processed (or pinged) ──▶ ignored; report again, freeze
//!                                      units owned, not in the row ──▶ Revoke (stopping)
//!                                      revocations done ─────────────▶ report applied = g
//!                                      report written (if one was due) ──▶ Acquire the rest of the row
//!  ping received (holder's view v)     refreshes every hold (v of the highest epoch seen, or none)
//!                                      v names a recovery ──▶ freeze; state what is held ({T}:held)
//!  hold ended (no read, no ping)       ──▶ Revoke (fenced); contact lost ──▶ answer pings UNAVAILABLE
//! ```
//!
//! Rules of the holder's view (protocol version 2: a holder's ping says its
//! epoch, the generation it knows Redis holds, its Redis server's run id
//! and the recovery it runs; older holders say nothing, and then none of
//! these applies), each checked by `tests/views.rs`:
//! - a ping of a lower epoch than one seen counts as contact, and
//!   refreshes no hold; a ping naming another server than the last one
//!   did ends what reads of the old server extend (holds they refreshed end
//!   the deadline after the last ping that named it);
//! - **a read of another server than the last ping names counts for
//!   nothing**, not even contact (an old master still answering: its rows
//!   are not the holder's); the first such read makes the last report due
//!   again (with a registration), and freezes;
//! - a numbered read sent after a ping that named a higher generation is
//!   ignored as a lower generation is (the server lost writes since);
//! - **after Redis lost writes** (a lower generation, or none after a
//!   numbered one) the last report is due again at once, once, and nothing
//!   more starts from the rows processed so far (*frozen*): a table Redis
//!   lost may have given them; nothing starts either from a row below the
//!   generation the last ping named;
//! - a ping naming a recovery freezes too, and makes a statement due
//!   ([`Ownership::held_due`]: every unit worked on within its hold, with
//!   its token, and the last processed generation), once per recovery;
//! - units start again (*thaw*) once a generation above the one processed
//!   at the freeze is processed, and the last ping names no recovery and a
//!   generation at most the one processed.
//!
//! Rules, each checked by the tests below against an independent model:
//! - **a read counts only on the reported connection**: a read whose Redis
//!   client (its [`RedisConnection`]: client id and server run id, so the
//!   same id on another server is another client) differs from the one the
//!   last written report names (no client equals no client) while the
//!   member owns or stops any unit is not
//!   processed at all (no revocation, no acquisition, no hold or contact
//!   refreshed); it makes a report naming the new client due, and the caller
//!   reads again once that is written. So a hold is only ever extended by a
//!   read on the connection the holder can ask Redis about. While nothing is
//!   owned or stopping, such a read is processed as usual;
//! - generations are processed in increasing order: a read of a lower one
//!   than the last processed is **ignored** (it refreshes contact, no hold),
//!   whatever is owned: Redis lost writes (its data, or a lagging replica
//!   was promoted), and the lower generation's rows may give this member
//!   units the lost writes gave others. The holder, seeing this member's
//!   report of a generation above the table Redis holds, writes the table
//!   again numbered above it;
//! - **a hold ends** `deadline` after the earlier of the send instant of the
//!   last processed read whose row showed the unit and the last ping
//!   received; no unit is owned past its hold's end, and an ended hold never
//!   comes back: every call first ends the holds that ended by `now`, before
//!   it records a read or a ping;
//! - a unit is acquired only from the row of the last processed generation,
//!   read with that generation (a row read while the generation cannot be
//!   read is followed for revocations, but its new units wait for a read
//!   that shows it: the token must be above the last owner's), after a ping, while the hold a read and a ping give runs, never while
//!   it is still being stopped, never while draining or stopped, only once a
//!   report is written that names the client of that read and no
//!   acknowledgement is owed (below); its [`FencingToken`] is that
//!   generation. A generation that only adds units needs no report;
//! - **a report is due** only when what the member must tell changes: at the
//!   first processed read; when `draining` changes;
//!   when the client changes; when the weight changes; when a processed generation took units from
//!   the row (the new row lacks a unit of the previously processed one), or
//!   follows tables this member did not process (the first processed, one
//!   after a gap in the numbering or after rows ignored as stale: those
//!   tables may have given it units and revoked them, and the holder waits
//!   for their acknowledgement), once every revocation it implies is done; and while draining, for every
//!   new processed generation (the drain completes on the report of an empty
//!   row). A report that acknowledges claims `applied = a` only when every
//!   unit still worked on (owned or being stopped) was in the row of a
//!   processed generation `≥ a` since its acquisition: a unit revoked at a
//!   generation `≤ a`, even one this member skipped, is stopped. One due for
//!   the client or `draining` alone keeps the `applied` last written.
//!   Reports never go backwards;
//! - **contact** is lost (the member is *fenced*) when no read succeeded, or
//!   no ping came, for `deadline` (counted from the start before the first
//!   one); while fenced it holds nothing and answers pings `UNAVAILABLE`;
//! - **a stop that failed** (the application's handler panicked: its work
//!   may still run) counts as done only once the unit's hold, as it was when
//!   the stop failed, has ended (reads after that do not extend it): the
//!   report that acknowledges its revocation waits until then, and the
//!   holder, without that acknowledgement, waits out the member's deadline
//!   before it grants the unit;
//! - a drain completes once the member reported `draining` at the last
//!   processed generation, that generation's row is empty or absent, and it
//!   owns and stops nothing.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::time::Duration;

use std::time::Instant;

use crate::core::handoff::{
    HeldReport, MemberReport, PingView, RecoveryTag, RedisConnection, RunId,
};
use crate::core::table::decode_row;

/// The generation of the table at which a member acquired a unit. It grows
/// from one owner of a unit to the next (every move is a new table write), so
/// a downstream system that remembers the highest token it saw per unit can
/// refuse a late write of an earlier owner.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct FencingToken(pub u64);

impl FencingToken {
    /// Whether a request routed by a copy of the table at generation
    /// `routed_by` (a `Lookup`'s) was routed to the holding this token
    /// numbers: the copy is at least as new as the write that granted it. An
    /// older copy may have named another owner, or this member's earlier
    /// holding.
    pub fn admits_route(self, routed_by: u64) -> bool {
        routed_by >= self.0
    }
}

impl std::fmt::Display for FencingToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

/// One holding of a unit: the unit and the token it was acquired with.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Tenure {
    pub unit: String,
    pub token: FencingToken,
}

/// Why a unit is taken from the member.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Revocation {
    /// The table no longer has it in this member's row: it moves to another
    /// member (or was removed from the list). The holder gives it to the next
    /// owner only once this revocation completed and was reported, or the
    /// member's deadline passed.
    Moved,
    /// The same, while this member drains.
    Draining,
    /// The hold ended at `ended` (reads or pings stopped for the deadline, or
    /// the process was paused): the next owner may already have it. Stop at
    /// once.
    Fenced { ended: Instant },
    /// The member stops: a shutdown, a drain that timed out, or a dropped
    /// `Member`.
    Shutdown,
}

impl Revocation {
    /// A short label for logs and events: `moved`, `draining`, `fenced`,
    /// `shutdown`.
    pub fn reason(&self) -> &'static str {
        match self {
            Revocation::Moved => "moved",
            Revocation::Draining => "draining",
            Revocation::Fenced { .. } => "fenced",
            Revocation::Shutdown => "shutdown",
        }
    }
}

/// Work for the caller, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Stop these units; call [`Ownership::revoked`] once they are stopped.
    Revoke { units: Vec<Tenure>, why: Revocation },
    /// Start these units: they are owned from now on.
    Acquire { units: Vec<Tenure> },
    /// These units are still being stopped, and their hold ended at `ended`:
    /// the next owner may start them now (log it loudly).
    Overran { units: Vec<Tenure>, ended: Instant },
}

/// What a read did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadOutcome {
    /// Processed (a new generation, or the same one again).
    Processed,
    /// A lower generation than the last processed one: ignored (see the
    /// module documentation).
    Stale { processed: u64 },
    /// Made on another Redis connection than the last written report names
    /// (`named`), while units are owned or stopping: not processed. A report
    /// naming the new connection is due; read again once it is written.
    OtherConnection { named: Option<RedisConnection> },
    /// Made on another Redis server than the one the holder's last ping
    /// names (`holder`): not processed, and not counted as contact (an old
    /// master that the sentinels no longer name, cut off from them, still
    /// answers). Find the master again.
    OtherServer { holder: RunId },
    /// Sent after a ping from the holder's server whose generation
    /// (`pinged`) is above the one read: that server lost writes since.
    /// Ignored, as a lower generation is.
    Behind { pinged: u64 },
}

#[derive(Debug, Clone)]
struct Processed {
    generation: u64,
    /// The row as stored (`None`: the table has no field for this member),
    /// to tell an unchanged row at once.
    raw: Option<String>,
    /// Its units, deduplicated, in row order.
    row: Vec<String>,
    /// Send instant of the last read that showed this row: every owned unit
    /// is in it, so this is when their holds were last refreshed.
    shown: Instant,
    /// The Redis connection the last read that showed this
    /// row went over (`None`: Redis did not tell).
    client: Option<RedisConnection>,
    /// A read showed this row with its generation: units are acquired only
    /// then, since the generation is their fencing token.
    numbered: bool,
}

#[derive(Debug, Clone)]
struct Stopping {
    token: FencingToken,
    /// Send instant of the last processed read whose row showed the unit.
    shown: Instant,
    /// Whether the last processed row has it (it came back).
    in_row: bool,
    /// The highest processed generation whose row had the unit: a report
    /// must not claim more while the unit is being stopped.
    seen: u64,
    /// Its hold ended (and that was said, or it was fenced).
    overran: bool,
    /// Revoked because its hold ended: late by definition, never reported
    /// as late.
    fenced: bool,
    /// The application's stop failed (its handler panicked): the unit's
    /// work may still run, so it counts as stopped only at its hold's end as
    /// of the failure (fixed then: a unit still in the row would otherwise
    /// wait for as long as the row lists it).
    failed: Option<Instant>,
}

/// One member's ownership state (see the module documentation).
#[derive(Debug, Clone)]
pub struct Ownership {
    deadline: Duration,
    weight: u32,
    started: Instant,
    processed: Option<Processed>,
    /// Owned units and their tokens. All are in the last processed row, so
    /// they share one hold: see [`Ownership::owned_end`].
    owned: BTreeMap<String, FencingToken>,
    stopping: BTreeMap<String, Stopping>,
    /// The last ping that may refresh a hold: of the highest epoch seen, or
    /// from a holder that sends no view.
    last_ping: Option<Instant>,
    /// The last ping of any holder: contact.
    contact_ping: Option<Instant>,
    /// What the last ping that refreshes holds said of its holder, and when
    /// it came (`None` before the first, and from holders that send none).
    pinged: Option<(PingView, Instant)>,
    /// The highest holder epoch a ping named.
    max_epoch: u64,
    /// Send instant of the last successful read (stale ones included: Redis
    /// answered).
    last_read: Option<Instant>,
    /// The report last written (`None` before the first, and after a
    /// start-over).
    written: Option<MemberReport>,
    /// Processed generations that took units from the row, or that followed
    /// tables this member did not process, and that no written report
    /// acknowledges yet (each above `written.applied`).
    owed: BTreeSet<u64>,
    /// A read was ignored (a generation below the last processed) since
    /// the last processed one: the tables it missed are not known.
    missed: bool,
    /// The Redis client of the last read: every report names it.
    client: Option<RedisConnection>,
    /// The recovery whose statement ([`Ownership::held_due`]) was written,
    /// and the one being written.
    held_written: Option<RecoveryTag>,
    held_building: Option<RecoveryTag>,
    /// Writes may have been lost (a lower generation, or none, was read),
    /// or a holder recovers from lost state (a ping named a recovery): the
    /// rows processed so far may come from a lineage a holder no longer
    /// knows, so nothing more starts from them. Holds the last processed
    /// generation then; see [`Ownership::thaw`] for when it ends.
    frozen: Option<u64>,
    /// Redis lost writes (a lower generation, none after a numbered one,
    /// or a read of another server than the holder's): the report written
    /// last is due again at once, which restores it if it was lost and
    /// shows the holder a generation above the one Redis holds.
    reassert: bool,
    /// The last read was of another server than the holder's last ping
    /// named.
    off_server: bool,
    draining: bool,
    stopped: bool,
    fenced: bool,
    /// Bumped whenever what [`Ownership::owned`], `generation`, `in_table`
    /// or `fenced` return changes.
    revision: u64,
    steps: Vec<Step>,
}

impl Ownership {
    /// A member that starts at `now`: it owns nothing, is not fenced, and
    /// has neither read nor been pinged.
    pub fn new(deadline: Duration, weight: u32, now: Instant) -> Ownership {
        Ownership {
            deadline,
            weight,
            started: now,
            processed: None,
            owned: BTreeMap::new(),
            stopping: BTreeMap::new(),
            last_ping: None,
            contact_ping: None,
            pinged: None,
            max_epoch: 0,
            last_read: None,
            written: None,
            owed: BTreeSet::new(),
            missed: false,
            client: None,
            held_written: None,
            held_building: None,
            frozen: None,
            reassert: false,
            off_server: false,
            draining: false,
            stopped: false,
            fenced: false,
            revision: 0,
            steps: Vec::new(),
        }
    }

    pub fn deadline(&self) -> Duration {
        self.deadline
    }

    /// A successful read sent at `sent` (before `now`) on the Redis
    /// connection `client` (`None`: Redis did not tell): the row (`None`: no
    /// field) and the generation (`None`: unreadable, taken as the last
    /// processed one, so that the row is still followed).
    pub fn read(
        &mut self,
        now: Instant,
        sent: Instant,
        generation: Option<u64>,
        row: Option<&str>,
        client: Option<RedisConnection>,
    ) -> ReadOutcome {
        self.expire(now);
        // A read of another server than the holder's (its pings name the
        // server it writes on) counts for nothing: an old master still
        // answering shows rows the holder no longer writes.
        if let Some((view, _)) = &self.pinged
            && let Some(holder) = view.server
            && client.and_then(|c| c.server).is_some_and(|s| s != holder)
        {
            // Which server is right is not known here (a restart, a
            // failover the holder has not pinged from yet, or an old master
            // still answering): nothing more starts from the rows processed,
            // and the last report is written again where this member reads
            // (with a registration), so that a holder there learns of it.
            if !self.off_server {
                self.off_server = true;
                self.reassert = true;
                self.freeze();
            }
            self.client = client;
            self.update_contact(now);
            return ReadOutcome::OtherServer { holder };
        }
        self.off_server = false;
        self.client = client;
        let working = !self.owned.is_empty() || !self.stopping.is_empty();
        let named = self.written.and_then(|w| w.client);
        if working && (self.written.is_none() || named != client) {
            // The holder may ask Redis about the connection the report names
            // only: a read on another one must not extend a hold.
            self.update_contact(now);
            return ReadOutcome::OtherConnection { named };
        }
        self.last_read = Some(self.last_read.map_or(sent, |r| r.max(sent)));
        let prev = self.processed.as_ref().map(|p| p.generation);
        let numbered = generation.is_some();
        // A generation gone after one was processed: Redis lost its data
        // (or an edit removed it).
        if !numbered && self.processed.as_ref().is_some_and(|p| p.numbered) {
            self.lost_writes();
        }
        let generation = generation.or(prev).unwrap_or(0);
        let outcome = ReadOutcome::Processed;
        if let Some(p) = prev
            && generation < p
        {
            self.lost_writes();
            self.update_contact(now);
            return ReadOutcome::Stale { processed: p };
        }
        // Sent after a ping that named a higher generation of this server:
        // the server lost writes since the holder saw them.
        if numbered
            && let Some((view, at)) = &self.pinged
            && sent >= *at
            && generation < view.generation
        {
            let pinged = view.generation;
            self.lost_writes();
            self.update_contact(now);
            return ReadOutcome::Behind { pinged };
        }
        // The same generation and row again (most reads): only the holds
        // are refreshed.
        if let Some(p) = &mut self.processed
            && p.generation == generation
            && p.raw.as_deref() == row
        {
            p.shown = p.shown.max(sent);
            p.client = client;
            p.numbered |= numbered;
            for s in self.stopping.values_mut().filter(|s| s.in_row) {
                s.shown = s.shown.max(sent);
            }
            self.update_contact(now);
            self.try_acquire(now);
            return outcome;
        }
        let units: Vec<String> = {
            let mut seen = HashSet::new();
            row.map(decode_row)
                .unwrap_or_default()
                .into_iter()
                .filter(|u| !u.is_empty() && seen.insert(*u))
                .map(str::to_string)
                .collect()
        };
        let in_row: HashSet<&str> = units.iter().map(String::as_str).collect();
        // Units taken from the row (not only from what is owned): the holder
        // waits for their acknowledgement whether or not they were started.
        let took = self
            .processed
            .as_ref()
            .is_some_and(|p| p.row.iter().any(|u| !in_row.contains(u.as_str())));
        // Tables this member did not process (none before the first, a gap
        // in the numbering, rows ignored as stale) may have given it units
        // and revoked them again: the holder waits for an acknowledgement of
        // those revocations too, which only a report of this generation gives.
        let skipped =
            numbered && (self.missed || prev.is_none_or(|p| generation > p.saturating_add(1)));
        // A read without its generation tells nothing of the tables missed;
        // one that took units came from a table whose generation is not
        // known, which the holder waits to see acknowledged: the next
        // numbered generation reports, as after a gap.
        if numbered {
            self.missed = false;
        } else if took {
            self.missed = true;
        }
        if (took || skipped) && self.written.is_none_or(|w| generation > w.applied) {
            self.owed.insert(generation);
        }
        if !self.stopped {
            let why = if self.draining {
                Revocation::Draining
            } else {
                Revocation::Moved
            };
            // Owned units are in the row of `prev`: that is the most a report
            // may claim while they are being stopped.
            let seen = prev.unwrap_or(generation);
            let gone: Vec<String> = self
                .owned
                .keys()
                .filter(|u| !in_row.contains(u.as_str()))
                .cloned()
                .collect();
            self.revoke(gone, why, seen, false);
        }
        for (u, s) in self.stopping.iter_mut() {
            s.in_row = in_row.contains(u.as_str());
            if s.in_row {
                s.shown = s.shown.max(sent);
                s.seen = s.seen.max(generation);
            }
        }
        self.processed = Some(Processed {
            generation,
            raw: row.map(str::to_string),
            row: units,
            shown: sent,
            client,
            numbered,
        });
        self.revision += 1;
        self.thaw();
        self.update_contact(now);
        self.try_acquire(now);
        outcome
    }

    /// A ping received at `now`, with what it says of its holder (`None`
    /// from a holder that says nothing). Returns whether to answer it OK:
    /// `false` while fenced (or stopped).
    ///
    /// A ping of a lower epoch than one already seen counts as contact but
    /// refreshes no hold. A ping that names another Redis server than the
    /// last one did ends what reads of the old server can extend: holds
    /// refreshed by them end the deadline after the last ping that named
    /// that server.
    pub fn ping(&mut self, now: Instant, view: Option<PingView>) -> bool {
        // Holds that ended before this ping stay ended.
        self.expire(now);
        self.contact_ping = Some(self.contact_ping.map_or(now, |p| p.max(now)));
        let refreshes = view.is_none_or(|v| v.epoch >= self.max_epoch);
        if refreshes {
            if let Some(v) = view {
                let before = self.pinged.and_then(|(p, _)| p.server);
                if let (Some(old), Some(new)) = (before, v.server)
                    && old != new
                    && let Some(last) = self.last_ping
                {
                    self.server_changed(last);
                }
                self.max_epoch = v.epoch;
                self.pinged = Some((v, now));
                if v.recovery.is_some_and(|r| self.held_written != Some(r)) {
                    self.freeze();
                }
            }
            self.last_ping = Some(self.last_ping.map_or(now, |p| p.max(now)));
            self.thaw();
        }
        self.update_contact(now);
        self.try_acquire(now);
        !self.fenced
    }

    /// The holder writes on another server than the one the last ping
    /// named: reads of that one refreshed the holds up to `last` (the last
    /// ping naming it) at most.
    fn server_changed(&mut self, last: Instant) {
        if let Some(p) = &mut self.processed {
            p.shown = p.shown.min(last);
        }
        for s in self.stopping.values_mut() {
            s.shown = s.shown.min(last);
        }
        self.revision += 1;
    }

    /// A read showed that Redis lost writes this member saw: the tables it
    /// missed are unknown (the next generation it processes is reported),
    /// its last report is written again at once, also re-registering, and
    /// nothing more starts from the rows processed so far.
    fn lost_writes(&mut self) {
        if !self.missed {
            self.reassert = true;
        }
        self.missed = true;
        self.freeze();
    }

    /// Nothing more starts from the rows processed so far (see `frozen`).
    fn freeze(&mut self) {
        if self.frozen.is_none() {
            self.frozen = Some(self.generation());
        }
    }

    /// Units start again once a generation above the one processed when
    /// the freeze began was processed, and the holder's last ping (if it
    /// says anything) names no recovery and a generation at most the one
    /// processed: a table written after the recovery's plan.
    fn thaw(&mut self) {
        let Some(at) = self.frozen else { return };
        let g = self.generation();
        let numbered = self.processed.as_ref().is_some_and(|p| p.numbered);
        let pinged_ok = self
            .pinged
            .is_none_or(|(v, _)| v.recovery.is_none() && v.generation <= g);
        if numbered && g > at && pinged_ok {
            self.frozen = None;
        }
    }

    /// Whether a lower generation than the last processed was read since
    /// the last processed one (and a registration and report are due again).
    pub fn reassert_due(&self) -> bool {
        self.reassert
    }

    /// The statement the holder's recovery asks for (a ping named a
    /// recovery whose statement was not written yet), if due: every unit
    /// worked on within its hold (owned, or being stopped), with its token,
    /// and the last processed generation. From now on nothing starts from
    /// the rows processed so far, only from a later generation: so after
    /// the statement this member works only on what it names and what a
    /// holder that read it writes. Pass the outcome of its write to
    /// [`Ownership::held_written`].
    pub fn held_due(&mut self, now: Instant) -> Option<HeldReport> {
        let tag = self.pinged.and_then(|(v, _)| v.recovery)?;
        if self.held_written == Some(tag) || self.held_building == Some(tag) {
            return None;
        }
        self.expire(now);
        let owned_end = self.owned_end();
        let mut units: BTreeMap<String, u64> = BTreeMap::new();
        if owned_end.is_some_and(|end| now < end) && !self.stopped {
            units.extend(self.owned.iter().map(|(u, t)| (u.clone(), t.0)));
        }
        units.extend(
            self.stopping
                .iter()
                .filter(|(_, s)| match s.failed {
                    Some(end) => now < end,
                    None => !s.overran && now < self.end_of(s.shown),
                })
                .map(|(u, s)| (u.clone(), s.token.0)),
        );
        self.freeze();
        self.held_building = Some(tag);
        Some(HeldReport {
            tag,
            processed: self.generation(),
            units,
        })
    }

    /// The statement for `tag` was written (`ok`), or its write failed (it
    /// is due again).
    pub fn held_written(&mut self, tag: RecoveryTag, ok: bool) {
        if self.held_building == Some(tag) {
            self.held_building = None;
        }
        if ok {
            self.held_written = Some(tag);
        }
    }

    /// Ends the holds that ended by `now`; call it at [`Ownership::next_wake`].
    pub fn tick(&mut self, now: Instant) {
        self.expire(now);
        self.update_contact(now);
    }

    /// The application stopped `units` (revoked earlier). Returns those that
    /// it stopped after their hold had ended, with how long after.
    pub fn revoked(&mut self, now: Instant, units: &[String]) -> Vec<(Tenure, Duration)> {
        // Before the holds that ended are ended: a unit stopped now is
        // reported late here, not also as overrunning.
        let mut late = Vec::new();
        for u in units {
            if let Some(s) = self.stopping.remove(u) {
                let end = self.end_of(s.shown);
                if now > end && !s.fenced {
                    late.push((
                        Tenure {
                            unit: u.clone(),
                            token: s.token,
                        },
                        now - end,
                    ));
                }
            }
        }
        self.expire(now);
        self.update_contact(now);
        self.try_acquire(now);
        late
    }

    /// The application's stop of `units` (revoked earlier) failed: its
    /// handler panicked, so the work may still run. Each counts as stopped
    /// only once its hold has ended (at once if it has), and the report that
    /// acknowledges its revocation waits until then. Returns when the last
    /// of those holds ends.
    pub fn stop_failed(&mut self, now: Instant, units: &[String]) -> Option<Instant> {
        let mut last = None;
        for u in units {
            let Some(end) = self.stopping.get(u).map(|s| self.end_of(s.shown)) else {
                continue;
            };
            if let Some(s) = self.stopping.get_mut(u) {
                s.failed = Some(end);
                last = last.max(Some(end));
            }
        }
        self.expire(now);
        self.update_contact(now);
        self.try_acquire(now);
        last
    }

    /// The report to write now, if one is due (see the module
    /// documentation).
    pub fn report_due(&self) -> Option<MemberReport> {
        let p = self.processed.as_ref()?;
        let applied = self
            .stopping
            .values()
            .map(|s| s.seen)
            .fold(p.generation, u64::min);
        let report = |applied| MemberReport {
            applied,
            draining: self.draining,
            deadline: self.deadline,
            weight: self.weight,
            client: self.client,
        };
        let Some(w) = self.written else {
            return Some(report(applied));
        };
        debug_assert!(w.applied <= applied);
        let acknowledge =
            self.owed.range(..=applied).next().is_some() || (self.draining && applied > w.applied);
        if acknowledge {
            Some(report(applied))
        } else {
            (self.reassert
                || w.draining != self.draining
                || w.client != self.client
                || w.weight != self.weight)
                .then(|| report(w.applied))
        }
    }

    /// The report written last, to write again (it restores a report lost
    /// with Redis' data); `None` before the first and after a start-over,
    /// until the new one is written.
    pub fn written_report(&self) -> Option<MemberReport> {
        self.written
    }

    /// `report` was written.
    pub fn reported(&mut self, now: Instant, report: MemberReport) {
        self.expire(now);
        self.reassert = false;
        if self.written.is_none_or(|w| w.applied <= report.applied) {
            self.written = Some(report);
            self.owed = self.owed.split_off(&(report.applied + 1));
        }
        self.update_contact(now);
        self.try_acquire(now);
    }

    /// The capacity weight to report from now on (checked by the caller:
    /// 1 to `MAX_WEIGHT`): a report carrying it is due, with the last
    /// acknowledged generation. It changes nothing else: the holder moves
    /// units on reading it, like any other change.
    pub fn set_weight(&mut self, weight: u32) {
        self.weight = weight;
    }

    pub fn weight(&self) -> u32 {
        self.weight
    }

    /// Start draining: report it, acquire nothing more, and let the table
    /// take the units away.
    pub fn drain(&mut self, now: Instant) {
        self.expire(now);
        self.draining = true;
        self.update_contact(now);
    }

    /// Stop: revoke every unit now, acquire nothing more, answer pings
    /// `UNAVAILABLE`.
    pub fn stop(&mut self, now: Instant) {
        self.expire(now);
        if !self.stopped {
            self.stopped = true;
            let all: Vec<String> = self.owned.keys().cloned().collect();
            let seen = self.generation();
            self.revoke(all, Revocation::Shutdown, seen, false);
        }
        self.update_contact(now);
    }

    /// The steps produced since the last call, in order.
    pub fn take_steps(&mut self) -> Vec<Step> {
        std::mem::take(&mut self.steps)
    }

    /// The next instant at which something changes by time alone (a hold
    /// ends, contact is lost); call [`Ownership::tick`] then.
    pub fn next_wake(&self) -> Option<Instant> {
        let owned = self.owned_end();
        let stopping = self.stopping.values().filter_map(|s| match s.failed {
            Some(end) => Some(end),
            None => (!s.overran).then(|| self.end_of(s.shown)),
        });
        let contact = (!self.fenced).then(|| self.contact_end());
        owned.into_iter().chain(stopping).chain(contact).min()
    }

    /// The unit's token if this member owns it at `now`: acquired, not
    /// revoked, and its hold not ended.
    pub fn holds(&self, unit: &str, now: Instant) -> Option<FencingToken> {
        let token = *self.owned.get(unit)?;
        (now < self.owned_end()? && !self.stopped).then_some(token)
    }

    /// When the hold on an owned unit ends unless a read and a ping refresh
    /// it.
    pub fn hold_end(&self, unit: &str) -> Option<Instant> {
        self.owned.get(unit).and(self.owned_end())
    }

    /// Contact lost (no read or no ping for the deadline), or stopped.
    pub fn fenced(&self) -> bool {
        self.fenced
    }

    /// The send instant of the last successful read and the last ping
    /// received, if any.
    pub fn last_contact(&self) -> (Option<Instant>, Option<Instant>) {
        (self.last_read, self.contact_ping)
    }

    /// What the last ping that refreshes holds said of its holder.
    pub fn pinged(&self) -> Option<PingView> {
        self.pinged.map(|(v, _)| v)
    }

    /// Changes whenever [`Ownership::owned`], `generation`, `in_table` or
    /// `fenced` may have changed: rebuild a view of them only then.
    pub fn revision(&self) -> u64 {
        self.revision
    }

    /// The owned units, in the order of the row.
    pub fn owned(&self) -> Vec<Tenure> {
        let Some(p) = &self.processed else {
            return Vec::new();
        };
        p.row
            .iter()
            .filter_map(|u| {
                self.owned.get(u).map(|&token| Tenure {
                    unit: u.clone(),
                    token,
                })
            })
            .collect()
    }

    /// Units being stopped.
    pub fn stopping(&self) -> usize {
        self.stopping.len()
    }

    /// The last processed generation (0 before the first read).
    pub fn generation(&self) -> u64 {
        self.processed.as_ref().map_or(0, |p| p.generation)
    }

    /// Whether the last processed read found a field for this member.
    pub fn in_table(&self) -> bool {
        self.processed.as_ref().is_some_and(|p| p.raw.is_some())
    }

    pub fn draining(&self) -> bool {
        self.draining
    }

    /// Draining is complete (see the module documentation).
    pub fn drained(&self) -> bool {
        let Some(p) = &self.processed else {
            return false;
        };
        self.draining
            && !self.stopped
            && self
                .written
                .is_some_and(|w| w.applied == p.generation && w.draining)
            && p.row.is_empty()
            && self.owned.is_empty()
            && self.stopping.is_empty()
    }

    /// Nothing is owned, and every unit still being stopped is past its
    /// hold (waiting longer would not keep it from the next owner).
    pub fn settled(&self, now: Instant) -> bool {
        self.owned.is_empty()
            && self
                .stopping
                .values()
                .all(|s| s.overran || self.end_of(s.shown) <= now)
    }

    /// When the holds of the owned units end (`None`: nothing owned).
    fn owned_end(&self) -> Option<Instant> {
        if self.owned.is_empty() {
            return None;
        }
        self.processed.as_ref().map(|p| self.end_of(p.shown))
    }

    /// When a hold refreshed by a read sent at `shown` ends.
    fn end_of(&self, shown: Instant) -> Instant {
        match self.last_ping {
            Some(p) => shown.min(p) + self.deadline,
            // Never pinged: no hold (nothing is acquired before a ping).
            None => self.started,
        }
    }

    fn contact_end(&self) -> Instant {
        let read = self.last_read.unwrap_or(self.started);
        let ping = self.contact_ping.unwrap_or(self.started);
        read.min(ping) + self.deadline
    }

    fn update_contact(&mut self, now: Instant) {
        let fenced = self.stopped || now >= self.contact_end();
        if fenced != self.fenced {
            self.fenced = fenced;
            self.revision += 1;
        }
    }

    /// Ends the holds that ended by `now` (revoked, fenced), and notes
    /// revocations still running past their hold.
    fn expire(&mut self, now: Instant) {
        if let Some(end) = self.owned_end()
            && end <= now
        {
            let all: Vec<String> = self.owned.keys().cloned().collect();
            let seen = self.generation();
            self.revoke(all, Revocation::Fenced { ended: end }, seen, true);
        }
        // A failed stop counts as done once its hold ended: no one else
        // can have had the unit before.
        let given_up: Vec<String> = self
            .stopping
            .iter()
            .filter(|(_, s)| s.failed.is_some_and(|end| end <= now))
            .map(|(u, _)| u.clone())
            .collect();
        for u in given_up {
            self.stopping.remove(&u);
        }
        let mut overran: BTreeMap<Instant, Vec<Tenure>> = BTreeMap::new();
        let ends: Vec<(String, Instant)> = self
            .stopping
            .iter()
            .filter(|(_, s)| !s.overran && s.failed.is_none())
            .map(|(u, s)| (u.clone(), self.end_of(s.shown)))
            .filter(|(_, end)| *end <= now)
            .collect();
        for (u, end) in ends {
            let s = self.stopping.get_mut(&u).expect("listed above");
            s.overran = true;
            overran.entry(end).or_default().push(Tenure {
                unit: u,
                token: s.token,
            });
        }
        for (ended, units) in overran {
            self.steps.push(Step::Overran { units, ended });
        }
    }

    fn revoke(&mut self, units: Vec<String>, why: Revocation, seen: u64, fenced: bool) {
        if units.is_empty() {
            return;
        }
        let shown = self.processed.as_ref().map_or(self.started, |p| p.shown);
        let mut tenures = Vec::with_capacity(units.len());
        for u in units {
            let Some(token) = self.owned.remove(&u) else {
                continue;
            };
            tenures.push(Tenure {
                unit: u.clone(),
                token,
            });
            self.stopping.insert(
                u,
                Stopping {
                    token,
                    shown,
                    in_row: false,
                    seen,
                    overran: fenced,
                    fenced,
                    failed: None,
                },
            );
        }
        if !tenures.is_empty() {
            self.revision += 1;
            self.steps.push(Step::Revoke {
                units: tenures,
                why,
            });
        }
    }

    /// Acquires the rest of the last processed row, if a written report
    /// names the read's connection, no acknowledgement is owed, and the hold
    /// a read and a ping give is still running.
    fn try_acquire(&mut self, now: Instant) {
        if self.draining || self.stopped || self.frozen.is_some() {
            return;
        }
        let Some(p) = &self.processed else {
            return;
        };
        // Owned units are in the row: all of it is owned already. A row
        // older than the table the holder's last ping said Redis holds
        // starts nothing (the holder may have planned past it: a recovery).
        if self.owned.len() == p.row.len()
            || !p.numbered
            || self
                .pinged
                .is_some_and(|(v, _)| p.generation < v.generation)
            || self.written.is_none_or(|w| w.client != p.client)
            || !self.owed.is_empty()
            || self.last_ping.is_none()
            || self.end_of(p.shown) <= now
        {
            return;
        }
        let token = FencingToken(p.generation);
        let new: Vec<Tenure> = p
            .row
            .iter()
            .filter(|u| !self.owned.contains_key(*u) && !self.stopping.contains_key(*u))
            .map(|u| Tenure {
                unit: u.clone(),
                token,
            })
            .collect();
        if new.is_empty() {
            return;
        }
        for t in &new {
            self.owned.insert(t.unit.clone(), token);
        }
        self.revision += 1;
        self.steps.push(Step::Acquire { units: new });
    }
}

#[cfg(test)]
mod tests;
