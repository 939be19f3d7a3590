//! [`Lookup`]: who owns a unit, for a caller that is not a member (an API
//! server routing "sync account 42" to its worker, a dashboard), answered
//! from a local copy of the matching table without a Redis call.
//!
//! The copy follows the table: the holder's notification of each write
//! (`{T}:changed`, a hint whose payload is never read) and a poll of the
//! generation every `poll_interval` (a lost notification) make it check
//! `meta.generation`. A different one is followed by reading only the rows
//! the writes in between set or deleted (each write's `rows` in the change
//! history, `{T}:changes`), with the generation and the units in transit in
//! one transaction; where the history cannot say (a whole write, a gap, an
//! ACL without `XREVRANGE`, the table moved on meanwhile) the table is read
//! whole. A resubscription (a reconnect, a restarted Redis) and every
//! `resync_interval` read it whole whatever the generation says (a hand
//! edit does not change it).
//!
//! Guarantees: every answer comes from one generation of the table
//! (`core::owners`); a failed read keeps the last copy, counts, and is
//! logged once per run of failures; dropping the `Lookup` ends its task. It
//! is a cache: a member's hold is the truth, and a routed request carries
//! the generation it was routed by so that the member can tell
//! ([`super::Member::routed_current`], `docs/protocol.md`, "Lookups").

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use metrics::{Counter, Gauge};
use tokio::sync::watch;
use tokio_util::sync::{CancellationToken, DropGuard};

use super::MemberOptions;
use crate::core::history::HistoryEntry;
use crate::core::owners::{OwnerIndex, Placement};
use crate::edge::clock;
use crate::edge::redis::{Notification, RedisOptions, SentinelOptions, Store};
use crate::edge::tls::TlsFiles;
use crate::error::{MemberError, StoreError};

/// Its metrics' names and help (through the `metrics` facade, labelled
/// `table`).
pub const LOOKUP_METRICS: &[(&str, &str)] = &[
    (
        "distributor_lookup_answers_total",
        "Questions a lookup answered from its copy of the table",
    ),
    (
        "distributor_lookup_staleness_seconds",
        "Time since the lookup last confirmed its copy current (a generation check or a read)",
    ),
    (
        "distributor_lookup_reads_total",
        "Reads of the table by a lookup: kind=whole, or kind=rows (only the rows a change wrote)",
    ),
    (
        "distributor_lookup_read_failures_total",
        "Failed reads of a lookup (the last copy kept)",
    ),
    (
        "distributor_lookup_generation",
        "The table generation of the lookup's copy",
    ),
];

/// How a [`Lookup`] reaches Redis and follows the table.
#[derive(Debug, Clone)]
pub struct LookupOptions {
    /// As [`MemberOptions::redis_url`].
    pub redis_url: String,
    /// The matching table key (`-distribution-namespace`).
    pub table_key: String,
    pub redis_tls: TlsFiles,
    pub redis_cluster: bool,
    pub redis_sentinel: Option<SentinelOptions>,
    /// How often the generation is checked without a notification (default
    /// 1 s).
    pub poll_interval: Duration,
    /// How often the table is read whole whatever its generation (default
    /// 30 s): a hand edit changes no generation.
    pub resync_interval: Duration,
}

impl Default for LookupOptions {
    fn default() -> LookupOptions {
        LookupOptions::from(&MemberOptions::default())
    }
}

impl From<&MemberOptions> for LookupOptions {
    /// A member's Redis settings and table.
    fn from(m: &MemberOptions) -> LookupOptions {
        LookupOptions {
            redis_url: m.redis_url.clone(),
            table_key: m.table_key.clone(),
            redis_tls: m.redis_tls.clone(),
            redis_cluster: m.redis_cluster,
            redis_sentinel: m.redis_sentinel.clone(),
            poll_interval: Duration::from_secs(1),
            resync_interval: Duration::from_secs(30),
        }
    }
}

impl LookupOptions {
    /// From the member's environment variables (`REDIS_URL`, `REDIS_USER`,
    /// `REDIS_PASS`, `REDIS_TLS*`, `REDIS_CLUSTER`, `REDIS_SENTINEL_MASTER`,
    /// `DISTRIBUTION_NAMESPACE`, ...: [`super::MEMBER_ENV`]), checked.
    pub fn from_env() -> Result<LookupOptions, MemberError> {
        Ok(LookupOptions::from(&MemberOptions::from_env()?))
    }

    fn check(&self) -> Result<(), MemberError> {
        let member = MemberOptions {
            redis_url: self.redis_url.clone(),
            table_key: self.table_key.clone(),
            ..MemberOptions::default()
        };
        member.check()?;
        for (name, d) in [
            ("poll_interval", self.poll_interval),
            ("resync_interval", self.resync_interval),
        ] {
            if d.is_zero() || d > Duration::from_secs(3600) {
                return Err(MemberError::Option {
                    name,
                    reason: format!("{d:?} is not in (0, 1h]"),
                });
            }
        }
        Ok(())
    }
}

/// Who owns a unit, from a local copy of the table that follows every
/// change. Cheap to ask (no Redis call, no allocation beyond the answer);
/// clone the [`Lookup::copies`] receiver to follow changes.
pub struct Lookup {
    copy: watch::Receiver<Arc<OwnerIndex>>,
    generation: watch::Receiver<Option<u64>>,
    counts: Arc<ReadCounts>,
    answers: Counter,
    _stop: DropGuard,
}

impl Lookup {
    /// Connects, reads the table once (an error if that read fails: see
    /// [`MemberError::is_retryable`]) and follows it from then on.
    pub async fn connect(opts: LookupOptions) -> Result<Lookup, MemberError> {
        opts.check()?;
        let redis = RedisOptions {
            cluster: opts.redis_cluster,
            sentinel: opts.redis_sentinel.clone(),
            tls: opts.redis_tls.clone(),
            ..RedisOptions::from_urls(&opts.redis_url)
        };
        let store = Store::connect(&redis, &opts.table_key, super::CALL_TIMEOUT)?;
        let labels = [("table", opts.table_key.clone())];
        let meters = Meters {
            staleness: metrics::gauge!("distributor_lookup_staleness_seconds", &labels),
            reads: metrics::counter!(
                "distributor_lookup_reads_total",
                &[("table", opts.table_key.clone()), ("kind", "whole".into())]
            ),
            row_reads: metrics::counter!(
                "distributor_lookup_reads_total",
                &[("table", opts.table_key.clone()), ("kind", "rows".into())]
            ),
            failures: metrics::counter!("distributor_lookup_read_failures_total", &labels),
            generation: metrics::gauge!("distributor_lookup_generation", &labels),
            counts: Arc::default(),
        };
        let counts = Arc::clone(&meters.counts);
        let first = read(&store, &meters).await?;
        meters.shown(first.generation());
        let (generation_tx, generation) = watch::channel(first.generation());
        let (tx, copy) = watch::channel(Arc::new(first));
        let stop = CancellationToken::new();
        let follow = Follow {
            store,
            opts,
            meters,
            tx,
            generation_tx,
        };
        tokio::spawn(follow.run(stop.child_token()));
        Ok(Lookup {
            copy,
            generation,
            counts,
            answers: metrics::counter!("distributor_lookup_answers_total", &labels),
            _stop: stop.drop_guard(),
        })
    }

    /// Where `unit` is in the copy now.
    pub fn owner(&self, unit: &str) -> Placement {
        self.answers.increment(1);
        self.copy.borrow().owner(unit)
    }

    /// The copy now: answers from one generation, however many are asked.
    pub fn table(&self) -> Arc<OwnerIndex> {
        Arc::clone(&self.copy.borrow())
    }

    /// The table generation of the copy (`None`: Redis stores none).
    pub fn generation(&self) -> Option<u64> {
        self.copy.borrow().generation()
    }

    /// How the table was read so far.
    pub fn reads(&self) -> LookupReads {
        let c = &self.counts;
        LookupReads {
            whole: c.whole.load(Ordering::Relaxed),
            rows: c.rows.load(Ordering::Relaxed),
            failed: c.failed.load(Ordering::Relaxed),
        }
    }

    /// The copy's generation, changing when a copy of another generation
    /// replaces the last (it ends when the `Lookup` is dropped).
    pub fn generations(&self) -> watch::Receiver<Option<u64>> {
        self.generation.clone()
    }

    /// Every new copy, as it replaces the last (it ends when the `Lookup`
    /// is dropped).
    pub fn copies(&self) -> watch::Receiver<Arc<OwnerIndex>> {
        self.copy.clone()
    }
}

struct Meters {
    staleness: Gauge,
    reads: Counter,
    row_reads: Counter,
    failures: Counter,
    generation: Gauge,
    counts: Arc<ReadCounts>,
}

/// How a lookup has read the table so far ([`Lookup::reads`]).
#[derive(Debug, Default)]
struct ReadCounts {
    whole: AtomicU64,
    rows: AtomicU64,
    failed: AtomicU64,
}

/// How a lookup has read the table so far: whole, by the rows a change
/// wrote, and reads that failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LookupReads {
    pub whole: u64,
    pub rows: u64,
    pub failed: u64,
}

struct Follow {
    store: Store,
    opts: LookupOptions,
    meters: Meters,
    tx: watch::Sender<Arc<OwnerIndex>>,
    generation_tx: watch::Sender<Option<u64>>,
}

/// Each count goes to its metric and to [`Lookup::reads`] in one place.
impl Meters {
    fn read_whole(&self) {
        self.reads.increment(1);
        self.counts.whole.fetch_add(1, Ordering::Relaxed);
    }

    fn read_rows(&self) {
        self.row_reads.increment(1);
        self.counts.rows.fetch_add(1, Ordering::Relaxed);
    }

    fn failed(&self) {
        self.failures.increment(1);
        self.counts.failed.fetch_add(1, Ordering::Relaxed);
    }

    /// A copy of `generation` is shown.
    fn shown(&self, generation: Option<u64>) {
        self.generation.set(generation.map_or(-1.0, |g| g as f64));
    }
}

/// Reads the table whole and indexes it.
async fn read(store: &Store, meters: &Meters) -> Result<OwnerIndex, StoreError> {
    let r = store.read_owners().await.inspect_err(|_| meters.failed())?;
    meters.read_whole();
    Ok(OwnerIndex::build(r.generation, r.rows, r.transit))
}

/// What a wake-up of the follower leads to.
enum Next {
    /// The copy is at Redis' generation.
    Current,
    /// Redis is at this generation: follow the rows written since, or read
    /// whole.
    To(Option<u64>),
    /// Read whole whatever the generation (a resubscription, the resync).
    Whole,
    Failed(StoreError),
}

/// At most this many generations are followed by their changed rows; a copy
/// further behind is read whole.
const MAX_FOLLOWED: u64 = 64;

impl Follow {
    /// Takes `index` as the copy, and its generation when it differs.
    fn publish(&self, index: OwnerIndex) {
        let g = index.generation();
        self.meters.shown(g);
        self.tx.send_replace(Arc::new(index));
        self.generation_tx.send_if_modified(|old| {
            let changed = *old != g;
            *old = g;
            changed
        });
    }

    /// Reads the table whole and takes it as the copy; after a failure, the
    /// next tick reads it whole again whatever the generation then says.
    async fn read_whole(&self, read_whole_at: &mut Instant) -> Result<(), StoreError> {
        match read(&self.store, &self.meters).await {
            Ok(index) => {
                *read_whole_at = clock::now() + self.opts.resync_interval;
                self.publish(index);
                Ok(())
            }
            Err(e) => {
                *read_whole_at = clock::now();
                Err(e)
            }
        }
    }

    /// The copy at `target` (or a later generation the table reached
    /// meanwhile), from the rows the writes since the copy's generation set
    /// or deleted; `Ok(None)` where the change history cannot say which
    /// (the caller reads the table whole).
    async fn follow_changes(&self, target: Option<u64>) -> Result<Option<OwnerIndex>, StoreError> {
        let current = Arc::clone(&self.tx.borrow());
        let (Some(from), Some(mut target)) = (current.generation(), target) else {
            return Ok(None);
        };
        // A holder may write again between the generation's read and the
        // rows' (a revocation, then its grant): follow it, a few times.
        for _ in 0..3 {
            if target <= from || target - from > MAX_FOLLOWED {
                return Ok(None);
            }
            // A few more than the generations between: writes may have
            // landed since the generation was read.
            let Ok(history) = self.store.read_history((target - from) as usize + 8).await else {
                return Ok(None);
            };
            let Some(members) = changed_rows(&history.entries, from, target) else {
                return Ok(None);
            };
            let (rows, generation, transit) = self
                .store
                .read_owner_rows(&members)
                .await
                .inspect_err(|_| self.meters.failed())?;
            match generation {
                Some(g) if g == target => {
                    self.meters.read_rows();
                    return Ok(Some(current.apply(generation, rows, transit)));
                }
                Some(g) if g > target => target = g,
                // Gone back, or gone: Redis lost writes.
                _ => return Ok(None),
            }
        }
        Ok(None)
    }

    async fn run(self, stop: CancellationToken) {
        let mut notes = self.store.subscribe(
            vec![self.store.keys().table_channel.clone()],
            stop.child_token(),
        );
        let mut poll = tokio::time::interval(self.opts.poll_interval);
        poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut confirmed = clock::now();
        let mut read_whole_at = confirmed + self.opts.resync_interval;
        let mut failing = false;
        loop {
            let whole = tokio::select! {
                _ = stop.cancelled() => return,
                _ = self.tx.closed() => return,
                n = notes.recv() => match n {
                    Some(Notification::Subscribed) => true,
                    Some(Notification::Message(..)) => false,
                    // The subscriber ended (cancelled): so do we.
                    None => return,
                },
                _ = poll.tick() => clock::now() >= read_whole_at,
            };
            let next = if whole {
                Next::Whole
            } else {
                match self.store.table_generation().await {
                    Ok(g) if g == self.tx.borrow().generation() => Next::Current,
                    Ok(g) => Next::To(g),
                    Err(e) => {
                        self.meters.failed();
                        Next::Failed(e)
                    }
                }
            };
            let outcome = match next {
                Next::Current => Ok(()),
                Next::To(target) => match self.follow_changes(target).await {
                    Ok(Some(index)) => {
                        self.publish(index);
                        Ok(())
                    }
                    Ok(None) => self.read_whole(&mut read_whole_at).await,
                    Err(e) => Err(e),
                },
                Next::Whole => self.read_whole(&mut read_whole_at).await,
                Next::Failed(e) => Err(e),
            };
            let now = clock::now();
            match outcome {
                Ok(()) => {
                    confirmed = now;
                    if std::mem::take(&mut failing) {
                        tracing::info!(table = %self.opts.table_key, "lookup: reads work again");
                    }
                }
                Err(e) => {
                    if !std::mem::replace(&mut failing, true) {
                        tracing::warn!(table = %self.opts.table_key, error = %e, "lookup: could not read the table; answering from the last copy until a read works");
                    }
                }
            }
            self.meters
                .staleness
                .set(now.saturating_duration_since(confirmed).as_secs_f64());
        }
    }
}

/// The members whose rows the writes from generation `from` (excluded) to
/// `target` set or deleted, from the change history (newest first, as read):
/// `None` unless those writes form one unbroken chain, each entry readable
/// and saying its rows.
fn changed_rows(entries: &[HistoryEntry], from: u64, target: u64) -> Option<Vec<String>> {
    let mut chain: Vec<&HistoryEntry> = entries
        .iter()
        .filter(|e| e.generation > from && e.generation <= target)
        .collect();
    chain.sort_by_key(|e| e.generation);
    let mut at = from;
    let mut members = BTreeSet::new();
    for e in chain {
        if e.previous_generation != at || e.unreadable.is_some() {
            return None;
        }
        members.extend(e.rows.as_ref()?.iter().cloned());
        at = e.generation;
    }
    (at == target).then(|| members.into_iter().collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(generation: u64, previous: u64, rows: Option<&[&str]>) -> HistoryEntry {
        HistoryEntry {
            generation,
            previous_generation: previous,
            rows: rows.map(|r| r.iter().map(|m| m.to_string()).collect()),
            ..HistoryEntry::default()
        }
    }

    #[test]
    fn changed_rows_need_an_unbroken_chain_that_names_its_rows() {
        let newest_first = [
            entry(9, 8, Some(&["c"])),
            entry(8, 7, Some(&["a", "b"])),
            entry(7, 6, Some(&["a"])),
        ];
        assert_eq!(
            changed_rows(&newest_first, 6, 8),
            Some(vec!["a".into(), "b".into()])
        );
        assert_eq!(changed_rows(&newest_first, 6, 9).unwrap().len(), 3);
        // A write that moved the generation up by more than one links too.
        let jump = [entry(20, 9, Some(&[])), entry(9, 8, Some(&["c"]))];
        assert_eq!(changed_rows(&jump, 8, 20), Some(vec!["c".into()]));
        // A gap, a whole write, an unreadable entry, a chain not reaching
        // the target: unknown.
        assert_eq!(changed_rows(&newest_first[..2], 6, 9), None);
        let whole = [entry(7, 6, None)];
        assert_eq!(changed_rows(&whole, 6, 7), None);
        let mut bad = entry(7, 6, Some(&["a"]));
        bad.unreadable = Some("generation".into());
        assert_eq!(changed_rows(&[bad], 6, 7), None);
        assert_eq!(changed_rows(&newest_first, 6, 10), None);
        let forked = [entry(8, 6, Some(&["x"])), entry(7, 6, Some(&["a"]))];
        assert_eq!(changed_rows(&forked, 6, 8), None);
    }
}
