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
use std::time::{Duration, Instant};

use crate::core::handoff::{MemberReport, PingView, RecoveryTag, RedisConnection};
use crate::core::table::decode_row;

mod holds;
mod tenure;
mod view;

pub use tenure::{FencingToken, ReadOutcome, Revocation, Step, Tenure};

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
}

#[cfg(test)]
mod tests;
