//! Safe handoff: break before make. When a unit's owner changes, the holder
//! first revokes it (no row of its group has it), waits until the old owner
//! cannot be working on it any more, and only then grants it to the new
//! owner. So a unit never has two owners in a group, also while it moves.
//!
//! Pure. [`plan`] takes the table as granted now, the table the solver wants,
//! the units in transit and what the holder knows of each member, and returns
//! the next granted table and transit set; [`Ledger`] keeps what the holder
//! knows Redis holds between plans, including after a write whose outcome it
//! does not know:
//!
//! ```text
//!   granted (A has u) ──revoke──▶ in transit (from A, to B) ──released──▶ granted (B has u)
//!                                  no row has u                  │
//!                                                                ├ A acknowledged a generation ≥ the revocation's
//!                                                                ├ A's process is proven gone after the revoking
//!                                                                │ write was done (see [`Proof`])
//!                                                                └ A's wait, stored with the revocation, passed
//!                                                                  since the revoking write was done
//! ```
//!
//! A member that speaks the protocol (it has an entry in `{T}:members`)
//! acknowledges each table generation that took units from it, after it
//! stopped them, and fences itself: its hold on a unit ends its deadline
//! after the last read that showed the unit (or earlier, when pings stop).
//! A member that does not (an old worker that only `HGET`s its row) gets the
//! configured handoff delay instead: it must stop a unit within that delay
//! of the write that took the unit out of its row.
//!
//! **The wait is fixed when the unit is revoked**, from what the holder knew
//! of the member then, and stored with the transit entry: no later fact
//! shortens it (a report that goes missing, a member forgotten, a new holder,
//! which waits it again from its own start). Where the holder knows nothing
//! (the reports could not be read), it is the longest any member may ask for.
//!
//! Why the revoking write is the instant to count from:
//!
//! ```text
//!   member's hold on u ends ≤ last read showing u + deadline     (its clock)
//!   last read showing u     <  the revoking write                (the read was served before it)
//!   the revoking write      ≤  waiting_since                     (the holder saw it done)
//!   ⇒ hold ends < waiting_since + deadline × (1 + drift) + margin = release
//! ```
//!
//! The last ping is no such bound for the holder: a member that received a
//! ping whose answer was lost (or came after the ping timeout) counts from
//! that ping, and the holder cannot know when it arrived.
//!
//! **What a refusal proves.** A refused connection says that nothing
//! listened *then*, and only on the path from the holder: a firewall that
//! REJECTs the holder's pings (a TCP reset, an ICMP port-unreachable) gives
//! the same refusal while the member runs and reads Redis. So a refusal
//! counts only on a connection opened after the revoking write (a worker
//! restarted on the address in between may have read the old row):
//!
//! ```text
//!   holder   probe A: refused ─────────── write g+1: A's units to B ──▶
//!   old A    ✝ (killed)
//!   new A              start, listen, read row (g: A has u), work u ─────▶ overlap with B
//! ```
//!
//! and, for a member that names the Redis connection it reads its row on
//! (its report's client id and the server's run id), only once Redis, asked
//! after that refusal, has no such connection either: a second observer, on
//! the member's other path, that sees its process gone. A connection named
//! on another server (another run id: a failover or a restart since) is gone
//! from the one asked, whatever ids that one has (see [`RedisConnection`]). A member that reads only on the connection
//! its last report names (`docs/protocol.md`) and whose connection Redis still
//! has is alive, and acknowledges. A member that names none is released by
//! its acknowledgement or its wait alone; one that does not speak the
//! protocol at all, by the refusal alone (its limit is in `docs/guarantees.md`).
//!
//! A member serves pings before its first read and for as long as it holds
//! a unit (`docs/protocol.md`). So a refusal on a connection opened after the
//! revoking write means that no process at that address read a row showing
//! the unit and still lives, unless the refusal came from something else
//! than the member's host, which the Redis check covers.
//!
//! Guarantees, checked by the tests below against simulated members that
//! follow the protocol (or the old one) with random delays, pauses, deaths,
//! drains, holder failovers and unit churn, and a Redis that loses replies:
//! - no unit is ever in two rows of a group, and a unit in transit is in no
//!   row of its group;
//! - a unit leaves transit for a new owner only once every member it was
//!   revoked from is released;
//! - a unit whose desired owner is the only member it was revoked from goes
//!   back at once (nobody else had it meanwhile);
//! - units removed from the list are revoked the same way, so that one that
//!   comes back is never granted while its last owner may still work on it;
//! - the work done is proportional to the rows that differ from the desired
//!   ones plus the units in transit, not to the table.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use std::time::Instant;

use crate::core::count::parse_count;
use crate::core::inputs::GroupMembers;
use crate::core::table::{MatchingTable, SEPARATOR};

mod connection;
mod ledger;
mod plan;
mod recovery;

pub use connection::{RedisConnection, RunId};
pub use ledger::{HeldTable, Ledger, Resync};
pub use plan::plan;
pub use recovery::{
    HeldReport, LossSign, MAX_HELD_UNITS, PingView, Recovery, RecoveryClaims, RecoveryTag,
};

/// What, besides its acknowledgement or its wait, proves that a member no
/// longer works on a unit revoked from it: decided when the unit is revoked,
/// from what the holder knew of the member then (see the module
/// documentation).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Proof {
    /// A refusal on a connection opened after the revoking write: a member
    /// that did not speak the protocol (no report).
    Refusal,
    /// Such a refusal, after which Redis had no such connection as the
    /// member's report names now (else this one, the client id it named
    /// when the unit was revoked). Recorded by client id alone (`c<id>`),
    /// the form every holder version reads; a `c<id>@<run id>` is read too,
    /// for a later version that records the server as well.
    Disconnected(RedisConnection),
    /// Nothing: a member of the protocol that names no connection, or one
    /// whose report could not be read.
    Never,
}

impl Proof {
    /// The stored form: `r`, `c<client id>[@<run id>]` or `-`.
    fn encode(&self) -> String {
        match self {
            Proof::Refusal => "r".into(),
            Proof::Disconnected(c) => format!("c{}", c.encode()),
            Proof::Never => "-".into(),
        }
    }

    fn decode(s: &str) -> Option<Proof> {
        match s {
            "r" => Some(Proof::Refusal),
            "-" => Some(Proof::Never),
            _ => s
                .strip_prefix('c')
                .and_then(RedisConnection::decode)
                .map(Proof::Disconnected),
        }
    }
}

/// One member a unit in transit was revoked from: how long after the
/// revoking write it may still work on the unit, and what else proves it
/// stopped. Both are fixed when the unit is revoked, from what the holder
/// knew of the member then; no later fact changes them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Origin {
    pub proof: Proof,
    /// `None` for an entry written by an older version, which stored none:
    /// it is waited for as the facts of now say.
    pub wait: Option<Duration>,
    /// The generation that revoked the unit from this member, when an
    /// earlier write than the entry's numbered it (`0`: the entry's
    /// `revoked_at`). Another member added to the entry later renumbers the
    /// entry, not this member's revocation: its acknowledgement of this
    /// generation still counts (it would not report again, having nothing
    /// new to stop).
    pub numbered: u64,
}

/// The origin that stands for members nobody knows: a transit entry that
/// could not be read has it, and only time releases it.
pub const UNKNOWN_ORIGIN: &str = "?";

/// A unit on its way from one owner to another (or to none).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transit {
    /// The members it was revoked from (one, or several if a hand-edited
    /// table had given it to several), each with its wait and what proves
    /// it stopped.
    pub from: BTreeMap<String, Origin>,
    /// Where it is to go; `None` while no eligible member wants it (or it was
    /// removed from the list).
    pub to: Option<String>,
    /// The table generation that revoked it; an acknowledgement of this
    /// generation or a later one releases it. `0` until the revocation is
    /// written (the write fills it in).
    pub revoked_at: u64,
    /// Unix ms of the revocation, for operators (shared between replicas).
    pub since_ms: u64,
    /// When this holder knew the revocation to be written (local,
    /// monotonic): after the write returned, or when it read the entry.
    pub waiting_since: Instant,
}

impl Transit {
    /// The stored value: `revoked_at since_ms to from[,from…]
    /// wait_ms[,wait_ms…] proof[,proof…] [numbered[,numbered…]]` (`to` is
    /// `-` for none; one wait, one proof and, when any origin has its own
    /// numbering, one generation per origin, in the same order). An entry
    /// of an older version keeps its four fields.
    pub fn encode(&self) -> String {
        let from: Vec<&str> = self.from.keys().map(String::as_str).collect();
        let mut out = format!(
            "{} {} {} {}",
            self.revoked_at,
            self.since_ms,
            self.to.as_deref().unwrap_or("-"),
            from.join(",")
        );
        let waits: Option<Vec<String>> = self
            .from
            .values()
            .map(|o| o.wait.map(|w| w.as_millis().to_string()))
            .collect();
        if let Some(waits) = waits {
            let proofs: Vec<String> = self.from.values().map(|o| o.proof.encode()).collect();
            out.push_str(&format!(" {} {}", waits.join(","), proofs.join(",")));
            if self.from.values().any(|o| o.numbered != 0) {
                let numbered: Vec<String> =
                    self.from.values().map(|o| o.numbered.to_string()).collect();
                out.push_str(&format!(" {}", numbered.join(",")));
            }
        }
        out
    }

    /// Parses a stored value; a new holder waits from `now` (it cannot know
    /// when the revocation was written in its own clock). The four-field form
    /// of older versions reads with no stored wait and refusals as proof,
    /// as those versions waited.
    pub fn decode(value: &str, now: Instant) -> Option<Transit> {
        let mut it = value.split(' ');
        let revoked_at = parse_count(it.next()?)?;
        let since_ms = parse_count(it.next()?)?;
        let to = match it.next()? {
            "" => return None,
            "-" => None,
            m => Some(m.to_string()),
        };
        let members: Vec<&str> = it.next()?.split(SEPARATOR).collect();
        if members.iter().any(|m| m.is_empty()) {
            return None;
        }
        let origins: Vec<Origin> = match (it.next(), it.next()) {
            (None, _) => vec![
                Origin {
                    proof: Proof::Refusal,
                    wait: None,
                    numbered: 0,
                };
                members.len()
            ],
            (Some(w), Some(p)) => {
                let waits: Option<Vec<u64>> = w.split(SEPARATOR).map(parse_count).collect();
                let proofs: Option<Vec<Proof>> = p.split(SEPARATOR).map(Proof::decode).collect();
                let (waits, proofs) = (waits?, proofs?);
                let numbered: Vec<u64> = match it.next() {
                    Some(n) => n.split(SEPARATOR).map(parse_count).collect::<Option<_>>()?,
                    None => vec![0; members.len()],
                };
                if waits.len() != members.len()
                    || proofs.len() != members.len()
                    || numbered.len() != members.len()
                {
                    return None;
                }
                waits
                    .into_iter()
                    .zip(proofs)
                    .zip(numbered)
                    .map(|((w, proof), numbered)| Origin {
                        proof,
                        wait: Some(Duration::from_millis(w)),
                        numbered,
                    })
                    .collect()
            }
            (Some(_), None) => return None,
        };
        let from: BTreeMap<String, Origin> = members
            .into_iter()
            .map(str::to_string)
            .zip(origins)
            .collect();
        if it.next().is_some() || from.is_empty() {
            return None;
        }
        Some(Transit {
            from,
            to,
            revoked_at,
            since_ms,
            waiting_since: now,
        })
    }

    /// A unit whose transit entry could not be read: revoked from members
    /// nobody knows, so only time releases it, after the longest wait any
    /// member may ask for.
    pub fn unknown(settings: &Settings, now: Instant, now_ms: u64) -> Transit {
        let origin = Origin {
            proof: Proof::Never,
            wait: Some(settings.longest_wait()),
            numbered: 0,
        };
        Transit {
            from: BTreeMap::from([(UNKNOWN_ORIGIN.to_string(), origin)]),
            to: None,
            revoked_at: 0,
            since_ms: now_ms,
            waiting_since: now,
        }
    }

    /// Gives every origin the entry's `revoked_at` numbered its own, before
    /// the entry is renumbered (another member added to it): their
    /// acknowledgements of that generation still count.
    pub fn pin_numbering(&mut self) {
        if self.revoked_at == 0 {
            return;
        }
        for o in self.from.values_mut().filter(|o| o.numbered == 0) {
            o.numbered = self.revoked_at;
        }
    }

    /// Caps every stored wait at `longest`: a hand-edited wait must not pin
    /// a unit for longer than any member may ask for.
    pub fn cap_waits(&mut self, longest: Duration) {
        for o in self.from.values_mut() {
            o.wait = o.wait.map(|w| w.min(longest));
        }
    }

    /// The members it was revoked from.
    pub fn origins(&self) -> impl Iterator<Item = &str> {
        self.from.keys().map(String::as_str)
    }
}

/// The field of a transit entry: `<unit>,<group>` (a unit never contains
/// `,`, so the first one separates them).
pub fn transit_field(group: &str, unit: &str) -> String {
    format!("{unit}{SEPARATOR}{group}")
}

/// Splits a transit field into `(group, unit)`.
pub fn parse_transit_field(field: &str) -> Option<(&str, &str)> {
    let (unit, group) = field.split_once(SEPARATOR)?;
    (!unit.is_empty() && !group.is_empty()).then_some((group, unit))
}

/// Units in transit, by group, then by unit.
pub type Transits = BTreeMap<String, BTreeMap<String, Transit>>;

/// What the holder knows of one member's protocol state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberFacts {
    /// A ping on a connection opened at this instant (or later) was
    /// refused, and the member has not answered since: nothing listened at
    /// its address then. It releases units whose revoking write was done
    /// before that instant, where a refusal is proof ([`Proof::Refusal`]).
    pub refused_since: Option<Instant>,
    /// Such a refusal after which Redis had no connection the member names
    /// (its report's connection, or the client id recorded with the
    /// revocation): proof for [`Proof::Disconnected`].
    pub disconnected_since: Option<Instant>,
    /// From `{T}:members`, if it speaks the protocol: as read by the last
    /// read that worked.
    pub report: Option<MemberReport>,
    /// `report` is the last one known of a member whose entry vanished (it
    /// still has a row or owes a unit): whatever process runs at its address
    /// now may not speak the protocol, so it is also owed `-handoff-delay`.
    pub report_vanished: bool,
    /// Whether the reports' last read worked. When it did not, a missing
    /// report proves nothing (the member may speak the protocol with any
    /// deadline), and a revocation waits the longest.
    pub reports_read: bool,
}

impl Default for MemberFacts {
    /// An unknown member: not gone, never answered, not speaking the
    /// protocol (the reports were read and it has none).
    fn default() -> MemberFacts {
        MemberFacts {
            refused_since: None,
            disconnected_since: None,
            report: None,
            report_vanished: false,
            reports_read: true,
        }
    }
}

/// A member's own entry in `{T}:members`:
/// `<applied generation> <draining 0|1> <deadline ms> <weight> [<redis client id> [<redis run id>]]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemberReport {
    /// The highest table generation it applied: every unit that generation
    /// took from it is stopped.
    pub applied: u64,
    /// It is shutting down: move its units away, give it none.
    pub draining: bool,
    /// It fences itself when it could not read the table, or was not pinged,
    /// for this long.
    pub deadline: Duration,
    /// Its capacity weight (1 by default).
    pub weight: u32,
    /// The Redis connection it reads its row on (`CLIENT ID`, and the
    /// server's run id), if it tells: a refusal of its address then releases
    /// its units only once Redis has no such connection either.
    pub client: Option<RedisConnection>,
}

/// The longest deadline a member may declare: a larger one is capped, so a
/// hostile entry cannot pin a unit in transit for ever.
pub const MAX_DEADLINE: Duration = Duration::from_secs(300);

/// The largest weight a member may declare (a larger one is capped).
pub const MAX_WEIGHT: u32 = 1000;

impl MemberReport {
    pub fn encode(&self) -> String {
        let mut out = format!(
            "{} {} {} {}",
            self.applied,
            u8::from(self.draining),
            self.deadline.as_millis(),
            self.weight
        );
        if let Some(c) = self.client {
            out.push_str(&format!(" {}", c.client));
            if let Some(s) = c.server {
                out.push_str(&format!(" {s}"));
            }
        }
        out
    }

    /// Parses an entry; `None` for anything malformed (the holder then waits
    /// for such a member as long as any member may make it wait, and reports
    /// it). A fifth field that is not a client id counts as none, and a
    /// sixth that is not a run id as no run id (the client id is then looked
    /// for on whichever server the holder asks, as for a member of an older
    /// version); fields after the sixth are ignored, for later versions.
    pub fn decode(s: &str) -> Option<MemberReport> {
        let mut it = s.split(' ');
        let applied = parse_count(it.next()?)?;
        let draining = match it.next()? {
            "0" => false,
            "1" => true,
            _ => return None,
        };
        let deadline_ms = parse_count(it.next()?)?;
        let weight = match it.next() {
            None => 1,
            Some(w) => parse_count(w)?,
        };
        if weight == 0 || deadline_ms == 0 {
            return None;
        }
        let client = it.next().and_then(parse_count).map(|id| RedisConnection {
            client: id,
            server: it.next().and_then(RunId::parse),
        });
        Some(MemberReport {
            applied,
            draining,
            deadline: Duration::from_millis(deadline_ms).min(MAX_DEADLINE),
            weight: weight.min(u64::from(MAX_WEIGHT)) as u32,
            client,
        })
    }
}

/// Parses an operator's weight override (a value of `{T}:weights`): a
/// decimal integer from 1 to [`MAX_WEIGHT`], digits only. `None` for anything
/// else (garbage, 0, over the maximum): the holder skips such an entry and
/// uses the member's own report. Unlike a report's weight, an override over
/// the maximum is not capped: the operator's command refuses it, so such an
/// entry was written by something else.
pub fn decode_weight_override(s: &str) -> Option<u32> {
    if s.is_empty() || s.len() > 4 || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok().filter(|w| (1..=MAX_WEIGHT).contains(w))
}

/// Added to a member's deadline for clock-rate drift between the member and
/// the holder: `deadline × (1 + DRIFT_PERMILLE / 1000) + MARGIN`.
pub const DRIFT_PERMILLE: u32 = 50;
pub const MARGIN: Duration = Duration::from_millis(100);

/// The holder's handoff settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Settings {
    /// How long a member that does not speak the protocol gets to stop a unit
    /// after the write that took it out of its row.
    pub handoff_delay: Duration,
}

/// How long after the write that revoked a unit a member of the protocol
/// with this deadline can still be working on it.
pub fn deadline_wait(deadline: Duration) -> Duration {
    deadline + deadline * DRIFT_PERMILLE / 1000 + MARGIN
}

impl Settings {
    /// How long after the write that revoked a unit a member can still be
    /// working on it, by what the holder knows of it now: its deadline's
    /// wait (from its last report read), the handoff delay for a member
    /// without a report, and the longest wait when the reports could not be
    /// read (a missing report then proves nothing).
    pub fn wait(&self, m: &MemberFacts) -> Duration {
        match &m.report {
            Some(r) if m.report_vanished => deadline_wait(r.deadline).max(self.handoff_delay),
            Some(r) => deadline_wait(r.deadline),
            None if m.reports_read => self.handoff_delay,
            None => self.longest_wait(),
        }
    }

    /// The longest wait any member may ask for: the largest deadline's, or
    /// the handoff delay if that is longer.
    pub fn longest_wait(&self) -> Duration {
        deadline_wait(MAX_DEADLINE).max(self.handoff_delay)
    }

    /// What will prove, besides its acknowledgement or its wait, that a
    /// member revoked now no longer works on the unit (see [`Proof`]).
    pub fn proof(&self, m: &MemberFacts) -> Proof {
        match &m.report {
            // Recorded by client id alone, the form every holder reads: the
            // run id is looked at in the report (which names the member's
            // connection now), not in the transit entry.
            Some(r) => r.client.map_or(Proof::Never, |c| {
                Proof::Disconnected(RedisConnection::id(c.client))
            }),
            None if m.reports_read => Proof::Refusal,
            None => Proof::Never,
        }
    }

    /// A member revoked now, by what the holder knows of it now.
    pub fn origin(&self, m: &MemberFacts) -> Origin {
        Origin {
            proof: self.proof(m),
            wait: Some(self.wait(m)),
            numbered: 0,
        }
    }

    /// What holds for `origin` now: what was fixed when it was revoked, or
    /// what the holder knows of its member now where that asks for more (a
    /// longer deadline reported since, a new process at its address that
    /// names its connection). Later facts lengthen a wait, never shorten it;
    /// not knowing the reports now lengthens nothing.
    pub fn effective(&self, origin: &Origin, f: &MemberFacts) -> Origin {
        if f.report.is_none() && !f.reports_read {
            return Origin {
                proof: origin.proof,
                wait: Some(origin.wait.unwrap_or_else(|| self.wait(f))),
                numbered: origin.numbered,
            };
        }
        let now = self.origin(f);
        let proof = match (origin.proof, now.proof) {
            (Proof::Never, _) | (_, Proof::Never) => Proof::Never,
            (_, Proof::Disconnected(c)) | (Proof::Disconnected(c), _) => Proof::Disconnected(c),
            (Proof::Refusal, Proof::Refusal) => Proof::Refusal,
        };
        Origin {
            proof,
            wait: now.wait.max(origin.wait),
            numbered: origin.numbered,
        }
    }

    /// Whether `t` is released by every member it was revoked from except
    /// `to` (a unit going back to one of them); else when it will be by time.
    pub fn released(
        &self,
        t: &Transit,
        to: Option<&str>,
        facts: &dyn Fn(&str) -> MemberFacts,
        now: Instant,
    ) -> Result<(), Instant> {
        let mut at: Option<Instant> = None;
        for (from, stored) in t.from.iter().filter(|(f, _)| Some(f.as_str()) != to) {
            let f = facts(from);
            let origin = self.effective(stored, &f);
            let after_write = |since: Option<Instant>| since.is_some_and(|s| s > t.waiting_since);
            let proven = match origin.proof {
                Proof::Refusal => after_write(f.refused_since),
                Proof::Disconnected(_) => after_write(f.disconnected_since),
                Proof::Never => false,
            };
            if proven {
                continue;
            }
            // The write that revoked it from this member: its own, or the
            // entry's.
            let numbered = match stored.numbered {
                0 => t.revoked_at,
                own => own,
            };
            if let Some(r) = &f.report
                && numbered != 0
                && r.applied >= numbered
            {
                continue;
            }
            let until = t.waiting_since + origin.wait.unwrap_or_else(|| self.wait(&f));
            if now < until {
                at = Some(at.map_or(until, |a| a.max(until)));
            }
        }
        match at {
            Some(at) => Err(at),
            None => Ok(()),
        }
    }
}

/// Where a plan starts from when the stored table is not the one this
/// holder wrote last.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StartingPoint {
    /// What Redis holds (a new holding, a write of unknown outcome, an edit).
    Stored,
    /// What this holder wrote last: the stored table is gone (Redis lost its
    /// data, or a `DEL`), and members may still work on what it granted.
    LastWritten,
}

/// Picks the granted table to plan from (verify it: see [`PlanInput::verify`]).
pub fn starting_point(
    last_written: Option<&Arc<MatchingTable>>,
    stored: Arc<MatchingTable>,
) -> (StartingPoint, Arc<MatchingTable>) {
    match last_written {
        Some(last) if stored.is_empty() && !last.is_empty() => {
            (StartingPoint::LastWritten, Arc::clone(last))
        }
        _ => (StartingPoint::Stored, stored),
    }
}

/// A unit granted to its next owner after its revocation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Moved {
    pub group: String,
    pub unit: String,
    pub to: String,
    /// Unix ms of its revocation.
    pub since_ms: u64,
    /// The generation of its revocation (0: revoked and released in this
    /// very plan, with a zero wait).
    pub revoked_at: u64,
}

/// What one round of planning gives.
#[derive(Debug, Clone, Default)]
pub struct Plan {
    /// The next granted table.
    pub granted: MatchingTable,
    pub transit: Transits,
    /// Units revoked by this plan.
    pub revoked: usize,
    /// Units granted by this plan after a move, for the handoff duration
    /// and the trace.
    pub moved: Vec<Moved>,
    /// Units granted for the first time (new units, or units of no owner).
    pub placed: usize,
    /// Units removed from the list whose transit ended.
    pub dropped: usize,
    /// Units claimed (see [`PlanInput::held_before`]): a member may still
    /// work on them although Redis' table no longer gives them to it.
    pub claimed: usize,
    /// The earliest instant at which a transit can be released by time alone,
    /// if any: plan again then.
    pub next_release: Option<Instant>,
}

impl Plan {
    pub fn transit_len(&self) -> usize {
        self.transit.values().map(BTreeMap::len).sum()
    }
}

/// Everything [`plan`] reads.
pub struct PlanInput<'a> {
    /// The rows as written now (every group).
    pub granted: &'a MatchingTable,
    /// Whether `granted` was read from Redis rather than written by this
    /// holder's last plan (a new holding, or a table edited by hand): then it
    /// may break the invariants (a unit in two rows, or in a row and in
    /// transit), and the plan repairs that first, by revoking from every
    /// member involved.
    pub verify: bool,
    /// With `verify`: the tables members may still work from
    /// ([`Ledger::held`]). A unit in one of their rows that the member's row
    /// in `granted` lacks, and that no revocation from it numbered after
    /// that table covers, is claimed: revoked from that member (and from
    /// whoever `granted` gives it to), so that Redis losing a write, or a
    /// hand edit, never lets a unit be given away while its last owner may
    /// still work on it.
    pub held_before: &'a [HeldTable],
    /// With `verify`, while the holder recovers from possibly lost state:
    /// what members stated they work on, and who stated nothing (see
    /// [`RecoveryClaims`]).
    pub recovery: Option<&'a RecoveryClaims>,
    /// The rows the solver gives (eligible members only: live, or suspects,
    /// and not draining).
    pub desired: &'a MatchingTable,
    pub transit: &'a Transits,
    pub groups: &'a [GroupMembers<'a>],
    /// The group each member was last seen in, for rows of members no group
    /// lists any more.
    pub former_group: &'a dyn Fn(&str) -> Option<String>,
    /// The units listed now, sorted.
    pub units: &'a [String],
    /// What the holder knows of a member; an unknown member counts as not
    /// gone, never answered, not speaking the protocol
    /// ([`MemberFacts::default`]).
    pub facts: &'a dyn Fn(&str) -> MemberFacts,
    /// Members that get a row even if empty (live ones, suspects).
    pub rows_for: &'a dyn Fn(&str) -> bool,
    pub settings: Settings,
    pub now: Instant,
    pub now_ms: u64,
}

#[cfg(test)]
mod tests;
