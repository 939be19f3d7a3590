//! Recovery from handoff state Redis lost: what a holder's ping tells a
//! member ([`PingView`]), what a member tells a holder that asks
//! ([`HeldReport`], in `{T}:held`), and what the holder makes of it
//! ([`Recovery`]). Pure.
//!
//! Redis loses writes in normal operation: a failover to a replica that
//! lagged, a restart without persistence, an operator's edit. A holder that
//! did not see the lost writes cannot know from Redis which member works on
//! what: a lost write may have given a unit to a member whose registration
//! was lost too. **The members are the durable copy of what they hold.** A
//! holder that may have lost state (see [`LossSign`]) recovers:
//!
//! ```text
//!  loss possible ─▶ gather: every ping names the recovery (its tag); each member writes
//!                   `{T}:held`: the tag, the generation it processed, and every unit it works
//!                   on within its hold, with its token; it starts nothing more from the rows it
//!                   has processed (only from a later generation)
//!        ▼  every known member answered, or is gone, or the gathering time passed
//!  plan:  a unit a member states it works on is that member's alone (break before make held
//!         in the lineage that granted it): kept, or revoked from it as any move;
//!         every other unit may be worked on by any member that did not answer: it is in
//!         transit from each of them, released by their acknowledgement, proof or wait
//!        ▼  that plan's write confirmed (numbered above every generation a member stated)
//!  done: what recovery knew is in `{T}:transit` and the rows
//! ```
//!
//! Why a statement suffices: a member extends a hold only on a read of the
//! holder's server (the one its pings name) of a generation at or above
//! the holder's, and after stating what it works on it starts units only
//! from a generation it had not processed, which only a write of this
//! holder (or the table Redis holds, which the holder plans from) makes.
//! So after its statement it can work on a unit only if the statement
//! names it, or if a table the holder knows gives it.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::time::{Duration, Instant};

use super::{HeldTable, RunId};
use crate::core::count::parse_count;
use crate::core::table::{MatchingTable, SEPARATOR};

/// Names one recovery: the holding's epoch and which recovery of that
/// holding it is. Shown as `<epoch>.<seq>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RecoveryTag {
    pub epoch: u64,
    pub seq: u32,
}

impl RecoveryTag {
    pub fn encode(&self) -> String {
        format!("{}.{}", self.epoch, self.seq)
    }

    pub fn decode(s: &str) -> Option<RecoveryTag> {
        let (e, n) = s.split_once('.')?;
        Some(RecoveryTag {
            epoch: parse_count(e)?,
            seq: u32::try_from(parse_count(n)?).ok()?,
        })
    }
}

impl fmt::Display for RecoveryTag {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.epoch, self.seq)
    }
}

/// What a holder's ping tells the member it pings (protocol version 2; a
/// holder of version 1, or the Go daemon, sends none). Carried as the gRPC
/// request metadata [`PingView::METADATA`] of a `Ping` call, and in the
/// fields of a `Beat`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PingView {
    /// The holder's fencing epoch: a ping of a lower epoch than one already
    /// seen (a holder that lost its lease and has not noticed yet) refreshes
    /// no hold.
    pub epoch: u64,
    /// The generation of the table the holder knows Redis holds: a read of
    /// the holder's server sent after this ping must show at least this one
    /// to count.
    pub generation: u64,
    /// The run id of the Redis server the holder writes on (`None` where
    /// Redis does not tell): a member's reads of another server extend no
    /// hold.
    pub server: Option<RunId>,
    /// The recovery the holder runs, if any: the member states what it
    /// holds (`{T}:held`) once per tag.
    pub recovery: Option<RecoveryTag>,
}

impl PingView {
    /// The gRPC metadata key of a `Ping` call that carries the view.
    pub const METADATA: &'static str = "distributor-holder";

    /// `<epoch> <generation> <server|-> <recovery|->`.
    pub fn encode(&self) -> String {
        format!(
            "{} {} {} {}",
            self.epoch,
            self.generation,
            self.server
                .map_or_else(|| "-".to_string(), |s| s.to_string()),
            self.recovery
                .map_or_else(|| "-".to_string(), |r| r.encode()),
        )
    }

    /// Parses [`PingView::encode`]'s form; fields after the fourth are
    /// ignored (for later versions). `None` for anything else: the ping
    /// then counts as one from a holder that sends no view.
    pub fn decode(s: &str) -> Option<PingView> {
        let mut it = s.split(' ');
        let epoch = parse_count(it.next()?)?;
        let generation = parse_count(it.next()?)?;
        let server = match it.next()? {
            "-" => None,
            s => Some(RunId::parse(s)?),
        };
        let recovery = match it.next()? {
            "-" => None,
            r => Some(RecoveryTag::decode(r)?),
        };
        Some(PingView {
            epoch,
            generation,
            server,
            recovery,
        })
    }
}

/// A member's statement for a recovery (`{T}:held`, field: the member):
/// the units it works on within its hold, each with its fencing token, and
/// the generation it processed last. Stored as `<tag> <processed>
/// <unit>=<token>,...` (units may hold spaces and `=`: each pair splits at
/// its last `=`; they never hold `,`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeldReport {
    pub tag: RecoveryTag,
    pub processed: u64,
    pub units: BTreeMap<String, u64>,
}

/// The most units one statement may name: a larger value is refused (the
/// member then counts as one that did not answer).
pub const MAX_HELD_UNITS: usize = 10_000_000;

impl HeldReport {
    pub fn encode(&self) -> String {
        let mut out = format!("{} {} ", self.tag.encode(), self.processed);
        let mut first = true;
        for (u, t) in &self.units {
            if !first {
                out.push(',');
            }
            first = false;
            out.push_str(u);
            out.push('=');
            out.push_str(&t.to_string());
        }
        out
    }

    /// Parses a stored statement; `None` for anything malformed.
    pub fn decode(s: &str) -> Option<HeldReport> {
        let (tag, rest) = s.split_once(' ')?;
        let tag = RecoveryTag::decode(tag)?;
        let (processed, units) = match rest.split_once(' ') {
            Some((p, u)) => (p, u),
            None => (rest, ""),
        };
        let processed = parse_count(processed)?;
        let mut out = BTreeMap::new();
        if !units.is_empty() {
            for pair in units.split(',') {
                let (u, t) = pair.rsplit_once('=')?;
                if u.is_empty() || out.insert(u.to_string(), parse_count(t)?).is_some() {
                    return None;
                }
                if out.len() > MAX_HELD_UNITS {
                    return None;
                }
            }
        }
        Some(HeldReport {
            tag,
            processed,
            units: out,
        })
    }
}

/// Why a holder may have lost handoff state, for its log and status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LossSign {
    /// The stored state was written on another Redis server than the one
    /// this holder writes on (a failover, or a restart: its run id
    /// changed), or on a server nobody recorded.
    ServerChanged {
        stored: Option<RunId>,
        now: Option<RunId>,
    },
    /// A generation above the stored table's is known (a member's report or
    /// statement, a replica's floor): writes were lost.
    GenerationLost { stored: u64, known: u64 },
    /// A coordination key lost entries, or holds a value of the wrong
    /// type (an operator's edit): `{T}:transit` or `{T}:members`.
    KeyLost { key: String },
}

impl fmt::Display for LossSign {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LossSign::ServerChanged { stored, now } => write!(
                f,
                "the stored state was written on redis server {} and this holder writes on {}",
                stored.map_or_else(|| "(unknown)".to_string(), |s| s.to_string()),
                now.map_or_else(|| "(unknown)".to_string(), |s| s.to_string()),
            ),
            LossSign::GenerationLost { stored, known } => write!(
                f,
                "generation {known} is known but redis holds generation {stored}"
            ),
            LossSign::KeyLost { key } => write!(f, "{key} lost entries or was overwritten"),
        }
    }
}

/// A holder's recovery (see the module documentation).
#[derive(Debug, Clone)]
pub struct Recovery {
    pub tag: RecoveryTag,
    pub why: LossSign,
    /// When it began (this holder's clock), and its unix ms for operators.
    pub since: Instant,
    pub since_ms: u64,
    /// Until then the holder waits for members to state what they hold
    /// before it plans.
    pub gather_until: Instant,
    /// The statements of this recovery read so far.
    pub held: BTreeMap<String, HeldReport>,
}

impl Recovery {
    pub fn new(
        tag: RecoveryTag,
        why: LossSign,
        now: Instant,
        now_ms: u64,
        gather: Duration,
    ) -> Recovery {
        Recovery {
            tag,
            why,
            since: now,
            since_ms: now_ms,
            gather_until: now + gather,
            held: BTreeMap::new(),
        }
    }

    /// Takes the statements read from `{T}:held`: those of this recovery
    /// (others are older, or another holder's) replace what was known of
    /// their members. A member's statement stays once read: it lists what
    /// the member may work on, and a later one of the same tag is the same.
    pub fn take(&mut self, read: impl IntoIterator<Item = (String, HeldReport)>) {
        for (m, h) in read {
            if h.tag == self.tag {
                self.held.insert(m, h);
            }
        }
    }

    /// Whether the holder may plan: the gathering time is over. It never
    /// ends earlier, even once every member the holder knows stated: a
    /// member whose registration Redis lost too is known only once it
    /// registers again, which it does at its next read of Redis.
    pub fn gathered(&self, now: Instant) -> bool {
        now >= self.gather_until
    }

    /// The members of `known` that stated nothing (and are not gone): each
    /// may work on any unit no statement names.
    pub fn unanswered<'a>(
        &self,
        known: impl IntoIterator<Item = &'a str>,
        gone: &dyn Fn(&str) -> bool,
    ) -> BTreeSet<String> {
        known
            .into_iter()
            .filter(|m| !self.held.contains_key(*m) && !gone(m))
            .map(str::to_string)
            .collect()
    }

    /// The highest generation a statement says its member processed.
    pub fn highest_processed(&self) -> Option<u64> {
        self.held.values().map(|h| h.processed).max()
    }

    /// What a plan takes from this recovery: the statements, as a table of
    /// one row per member that stated, and `unanswered` (see
    /// [`Recovery::unanswered`]).
    pub fn claims(&self, unanswered: BTreeSet<String>) -> RecoveryClaims {
        let rows = self.held.iter().map(|(m, h)| {
            let units: Vec<&str> = h.units.keys().map(String::as_str).collect();
            (m.clone(), units.join(&SEPARATOR.to_string()))
        });
        RecoveryClaims {
            stated: HeldTable::new(std::sync::Arc::new(MatchingTable::from_rows(rows)), None),
            unanswered,
        }
    }
}

/// What a plan of a recovery takes (`core::handoff::plan`): a unit a member
/// stated it works on is that member's alone (claimed from it when its row
/// lacks it); any other unit may be worked on by each member that stated
/// nothing, and is in transit from it (unless that member's row is the
/// only one that has the unit, and it is the only member that stated
/// nothing: it keeps it).
#[derive(Debug, Clone)]
pub struct RecoveryClaims {
    /// One row per member that stated: the units it works on. Its
    /// generation is unknown (`None`): only a revocation written after the
    /// statement covers them.
    pub stated: HeldTable,
    pub unanswered: BTreeSet<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ping_view_round_trips_and_tolerates_later_fields() {
        let v = PingView {
            epoch: 7,
            generation: 42,
            server: Some(RunId::repeated('a')),
            recovery: Some(RecoveryTag { epoch: 7, seq: 2 }),
        };
        assert_eq!(PingView::decode(&v.encode()), Some(v));
        assert_eq!(PingView::decode(&format!("{} later", v.encode())), Some(v));
        let bare = PingView {
            server: None,
            recovery: None,
            ..v
        };
        assert_eq!(bare.encode(), "7 42 - -");
        assert_eq!(PingView::decode("7 42 - -"), Some(bare));
        for bad in [
            "",
            "7",
            "7 42",
            "7 42 xyz -",
            "7 42 - 7",
            "x 42 - -",
            "7 42 - 7.x",
        ] {
            assert_eq!(PingView::decode(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn a_statement_round_trips_with_units_holding_spaces_and_equals() {
        let h = HeldReport {
            tag: RecoveryTag { epoch: 3, seq: 1 },
            processed: 19,
            units: BTreeMap::from([
                ("a b".to_string(), 4),
                ("x=y".to_string(), 19),
                ("u".to_string(), 7),
            ]),
        };
        assert_eq!(HeldReport::decode(&h.encode()), Some(h.clone()));
        let empty = HeldReport {
            units: BTreeMap::new(),
            ..h.clone()
        };
        assert_eq!(empty.encode(), "3.1 19 ");
        assert_eq!(HeldReport::decode("3.1 19 "), Some(empty.clone()));
        assert_eq!(HeldReport::decode("3.1 19"), Some(empty));
        for bad in [
            "",
            "3.1",
            "x 19 u=1",
            "3.1 x u=1",
            "3.1 19 u",
            "3.1 19 u=x",
            "3.1 19 =1",
            "3.1 19 u=1,u=2",
            "3.1 19 u=1,",
        ] {
            assert_eq!(HeldReport::decode(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn only_statements_of_this_recovery_count_and_gathering_lasts_its_time() {
        let t0 = crate::core::timing::test_t0();
        let tag = RecoveryTag { epoch: 5, seq: 1 };
        let why = LossSign::GenerationLost {
            stored: 3,
            known: 9,
        };
        let mut r = Recovery::new(tag, why, t0, 0, Duration::from_secs(2));
        let stmt = |tag, processed| HeldReport {
            tag,
            processed,
            units: BTreeMap::new(),
        };
        r.take([
            ("a:1".to_string(), stmt(tag, 9)),
            (
                "b:1".to_string(),
                stmt(RecoveryTag { epoch: 4, seq: 1 }, 12),
            ),
        ]);
        assert_eq!(r.held.keys().collect::<Vec<_>>(), ["a:1"]);
        assert_eq!(r.highest_processed(), Some(9));
        let gone = |m: &str| m == "c:1";
        let known = ["a:1", "b:1", "c:1"];
        assert!(!r.gathered(t0));
        assert_eq!(
            r.unanswered(known, &gone),
            BTreeSet::from(["b:1".to_string()])
        );
        assert!(r.gathered(t0 + Duration::from_secs(2)));
        r.take([("b:1".to_string(), stmt(tag, 12))]);
        assert!(
            !r.gathered(t0),
            "every known member stated: still gathering"
        );
        assert!(r.unanswered(known, &gone).is_empty());
        assert_eq!(r.highest_processed(), Some(12));
    }
}
