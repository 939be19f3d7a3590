//! [`Lookup`]: who owns a unit, for a caller that is not a member (an API
//! server routing "sync account 42" to its worker, a dashboard), answered
//! from a local copy of the matching table without a Redis call.
//!
//! The copy follows the table: the holder's notification of each write
//! (`{T}:changed`, a hint whose payload is never read) and a poll of the
//! generation every `poll_interval` (a lost notification) make it check
//! `meta.generation`, and a different one makes it read the table again,
//! whole, with the units in transit, in one transaction. A resubscription (a
//! reconnect, a restarted Redis) and every `resync_interval` read it whole
//! whatever the generation says (a hand edit does not change it).
//!
//! Guarantees: every answer comes from one generation of the table
//! (`core::owners`); a failed read keeps the last copy, counts, and is
//! logged once per run of failures; dropping the `Lookup` ends its task. It
//! is a cache: a member's hold is the truth, and a routed request carries
//! the generation it was routed by so that the member can tell
//! ([`super::Member::routed_current`], `docs/protocol.md`, "Lookups").

use std::sync::Arc;
use std::time::Duration;

use metrics::{Counter, Gauge};
use tokio::sync::watch;
use tokio_util::sync::{CancellationToken, DropGuard};

use super::MemberOptions;
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
        "Whole reads of the table by a lookup",
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
            reads: metrics::counter!("distributor_lookup_reads_total", &labels),
            failures: metrics::counter!("distributor_lookup_read_failures_total", &labels),
            generation: metrics::gauge!("distributor_lookup_generation", &labels),
        };
        let first = read(&store, &meters).await?;
        let (tx, copy) = watch::channel(Arc::new(first));
        let stop = CancellationToken::new();
        let follow = Follow {
            store,
            opts,
            meters,
            tx,
        };
        tokio::spawn(follow.run(stop.child_token()));
        Ok(Lookup {
            copy,
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

    /// Every new copy, as it replaces the last (it ends when the `Lookup`
    /// is dropped).
    pub fn copies(&self) -> watch::Receiver<Arc<OwnerIndex>> {
        self.copy.clone()
    }
}

struct Meters {
    staleness: Gauge,
    reads: Counter,
    failures: Counter,
    generation: Gauge,
}

struct Follow {
    store: Store,
    opts: LookupOptions,
    meters: Meters,
    tx: watch::Sender<Arc<OwnerIndex>>,
}

/// Reads the table whole and indexes it.
async fn read(store: &Store, meters: &Meters) -> Result<OwnerIndex, StoreError> {
    let r = store.read_owners().await;
    match &r {
        Ok(_) => meters.reads.increment(1),
        Err(_) => meters.failures.increment(1),
    }
    let r = r?;
    let index = OwnerIndex::build(r.generation, r.rows, r.transit);
    meters
        .generation
        .set(index.generation().map_or(-1.0, |g| g as f64));
    meters.staleness.set(0.0);
    Ok(index)
}

impl Follow {
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
            let outcome = if whole {
                Err(None)
            } else {
                match self.store.table_generation().await {
                    Ok(g) if g == self.tx.borrow().generation() => Ok(()),
                    Ok(_) => Err(None),
                    Err(e) => Err(Some(e)),
                }
            };
            let outcome = match outcome {
                Ok(()) => Ok(()),
                Err(Some(e)) => {
                    self.meters.failures.increment(1);
                    Err(e)
                }
                Err(None) => match read(&self.store, &self.meters).await {
                    Ok(index) => {
                        read_whole_at = clock::now() + self.opts.resync_interval;
                        self.tx.send_replace(Arc::new(index));
                        Ok(())
                    }
                    Err(e) => {
                        // Read whole at the next tick, whatever the
                        // generation then says.
                        read_whole_at = clock::now();
                        Err(e)
                    }
                },
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
