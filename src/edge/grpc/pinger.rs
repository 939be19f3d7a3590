//! The holder's side of the ping RPC: a concurrent pinger with a channel
//! cache.
//!
//! Guarantees of [`Pinger::ping_tasks`]:
//! - every member is pinged concurrently, each in its own task with its own
//!   deadline covering connection and call, so one dead or hung member never
//!   delays the others: a round takes at most about one ping timeout whatever
//!   the fleet size, and a task that panics still reports its member; first
//!   contacts (a connection to open) take turns, a few hundred at once, each
//!   waiting at most a first contact's allowance for its turn;
//! - channels are cached per member and reused across rounds (HTTP/2 keeps the
//!   connection; tonic reconnects on its own when a member comes back);
//! - an address that cannot be a gRPC endpoint fails without any network IO.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use std::time::Instant;
use tonic::transport::{Channel, ClientTlsConfig, Endpoint};

use super::beats::{CALL_EVERY, Link, Stream};
use super::closes::{CloseHints, Closed, Closes, WatchingConnector};
use super::failure::PingFailure;
use crate::core::handoff::PingView;
use crate::core::inputs::check_member_addr;
use crate::core::timing::Timing;
use crate::edge::clock;
use crate::proto::grpc_pinger_client::GrpcPingerClient;

/// HTTP/2 keepalive of the pinger's channels (`-ka-time`, `-ka-timeout`,
/// `-ka-permit-without-stream`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Keepalive {
    pub interval: Duration,
    pub timeout: Duration,
    pub while_idle: bool,
}

/// The longest a first contact with a member (connection, TLS, ping) may take,
/// when that is more than the ping timeout (see [`Timing::first_contact`]).
pub const FIRST_CONTACT: Duration = Timing::DEFAULT.first_contact;

/// How many connections a standby opens at once to warm its channels.
const WARM_CONCURRENCY: usize = 16;

/// How many beat streams are opened at once. A new holder's first round
/// answers thousands of calls at once; opening every stream in the same
/// instant would take the CPU that round's pings need (measured: 75 and 240
/// of them timed out at 10,000 members on 2 cores, BENCHMARKS.md,
/// "Measurements behind design choices"). Until its stream opens, a member
/// is pinged by calls.
const OPEN_CONCURRENCY: usize = 4;

/// How many first contacts (a connection opened, then the first call on
/// it) run at once. A new holder's first round opens thousands: all at once,
/// each one's deadline runs while all of them share the CPU, and on a small
/// machine the last ones miss it although every member is fine (BENCHMARKS.md,
/// "Measurements behind design choices"). Paced, each contact's deadline
/// counts from its own start.
const CONTACT_CONCURRENCY: usize = 256;

/// The result of pinging one member.
#[derive(Debug, Clone)]
pub struct PingReport {
    pub member: String,
    /// Round-trip time on success.
    pub result: Result<Duration, PingFailure>,
    /// When the answer (or the failure) came: a member that answered was
    /// alive at some instant before this one (the handoff counts from it).
    pub at: Instant,
    /// For a ping on a connection of its own ([`Pinger::probe`]): the
    /// instant before that connection was opened. A refusal then says that
    /// nothing listened at some instant after this one, which releases a
    /// handoff whose revoking write was done before it (`core::handoff`).
    /// `None` on the cached channel, whose refusal may come from a
    /// connection attempt begun before the ping.
    pub opened: Option<Instant>,
}

/// Pings in flight, as they complete.
pub type PingSet = futures::stream::FuturesUnordered<PingTask>;

/// One ping: a call running in its own task, or a beat awaiting its
/// answer (`beats.rs`). It resolves to its member and the report, or
/// `None` when the task panicked or was cancelled, so that the member is
/// never left waiting for a result that cannot come.
pub struct PingTask {
    member: Option<String>,
    running: Running,
}

enum Running {
    Call(tokio::task::JoinHandle<PingReport>),
    Beat(std::pin::Pin<Box<dyn Future<Output = PingReport> + Send + Sync>>),
}

impl PingTask {
    pub fn new(member: String, handle: tokio::task::JoinHandle<PingReport>) -> PingTask {
        PingTask {
            member: Some(member),
            running: Running::Call(handle),
        }
    }
}

impl Future for PingTask {
    type Output = (String, Option<PingReport>);

    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        let done = match &mut self.running {
            Running::Call(handle) => std::task::ready!(std::pin::Pin::new(handle).poll(cx)).ok(),
            Running::Beat(beat) => Some(std::task::ready!(beat.as_mut().poll(cx))),
        };
        let member = self.member.take().expect("polled after completion");
        std::task::Poll::Ready((member, done))
    }
}

/// A member's cached channel.
struct Cached {
    channel: Channel,
    /// Whether the member has answered on it yet, or a standby's warm-up
    /// opened its connection ([`Pinger::warm`]): it works.
    answered: bool,
    /// The channel's number, which its connections' [`Closed`] carry.
    number: u64,
    /// The member's beat stream on this channel.
    beats: Link,
    /// Beats sent in a row: one ping in [`CALL_EVERY`] is a call.
    beats_in_row: u32,
}

impl Cached {
    /// A new channel, numbered `number`, no beat stream tried on it yet.
    fn new(channel: Channel, number: u64, answered: bool) -> Cached {
        Cached {
            channel,
            answered,
            number,
            beats: Link::Untried,
            beats_in_row: 0,
        }
    }
}

/// The holder's pinger. Cheap to clone; clones share the channel cache.
#[derive(Clone)]
pub struct Pinger {
    channels: Arc<Mutex<HashMap<String, Cached>>>,
    /// Numbers channels, so that a close names the one it ended.
    numbering: Arc<AtomicU64>,
    timeout: Duration,
    keepalive: Option<Keepalive>,
    tls: Option<ClientTlsConfig>,
    /// Where connections report their close (see `closes.rs`), if watched.
    hints: Option<CloseHints>,
    /// The runtime pings run on, if they have one of their own (see
    /// [`Pinger::on_own_runtime`]).
    runtime: Option<Arc<PingRuntime>>,
    /// Whether pings become beats where a member serves them.
    beats: bool,
    /// Pings sent as beats, in all.
    beats_sent: Arc<AtomicU64>,
    /// Beat streams being opened, at most [`OPEN_CONCURRENCY`].
    opening: Arc<tokio::sync::Semaphore>,
    /// First contacts running, at most [`CONTACT_CONCURRENCY`].
    contacts: Arc<tokio::sync::Semaphore>,
    /// What the holder knows, encoded ([`PingView::encode`]; empty for
    /// nothing): every ping carries it (a call in its metadata, a beat when
    /// it changed).
    view: Arc<Mutex<Arc<str>>>,
}

/// A runtime for pings alone. Every ping and every connection task it opens
/// runs there, so that a round of thousands of pings never queues ahead of
/// the holder's cycle and lease renewals on the replica's runtime: measured
/// at 10,000 members, a new holder's cycle waited 0.6–1.3 s behind its own
/// ping tasks, well past its 50 ms grace (BENCHMARKS.md, "Measurements behind
/// design choices"). The operating system shares the cores between the two
/// runtimes' threads.
struct PingRuntime(Option<tokio::runtime::Runtime>);

impl Drop for PingRuntime {
    fn drop(&mut self) {
        // Never blocks (a runtime dropped in async context would panic):
        // pings still running are dropped with it.
        if let Some(rt) = self.0.take() {
            rt.shutdown_background();
        }
    }
}

impl Pinger {
    pub fn new(timeout: Duration, keepalive: Option<Keepalive>) -> Pinger {
        Pinger {
            channels: Arc::default(),
            numbering: Arc::default(),
            timeout,
            keepalive,
            tls: None,
            hints: None,
            runtime: None,
            beats: true,
            beats_sent: Arc::default(),
            opening: Arc::new(tokio::sync::Semaphore::new(OPEN_CONCURRENCY)),
            contacts: Arc::new(tokio::sync::Semaphore::new(CONTACT_CONCURRENCY)),
            view: Arc::new(Mutex::new(Arc::from(""))),
        }
    }

    /// What every ping from now on tells the members of the holder
    /// (`None`: nothing, as a standby's pings).
    pub fn set_view(&self, view: Option<PingView>) {
        let text: Arc<str> = view.map_or_else(|| Arc::from(""), |v| Arc::from(v.encode()));
        let mut current = self.view.lock().expect("pinger view poisoned");
        if *current != text {
            *current = text;
        }
    }

    fn view(&self) -> Arc<str> {
        Arc::clone(&self.view.lock().expect("pinger view poisoned"))
    }

    /// Pings by calls only, never by beats (the benches' reference).
    pub fn calls_only(mut self) -> Pinger {
        self.beats = false;
        self
    }

    /// At most `turns` first contacts at once (tests; see
    /// [`CONTACT_CONCURRENCY`]).
    #[cfg(test)]
    fn with_contact_turns(mut self, turns: usize) -> Pinger {
        self.contacts = Arc::new(tokio::sync::Semaphore::new(turns));
        self
    }

    /// How many pings were sent as beats, in all.
    pub fn beats_sent(&self) -> u64 {
        self.beats_sent.load(Ordering::Relaxed)
    }

    /// Runs every ping, and the connections they open, on a runtime of its
    /// own with `threads` worker threads (named `distributor-ping`).
    pub fn on_own_runtime(mut self, threads: usize) -> std::io::Result<Pinger> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(threads.max(1))
            .thread_name("distributor-ping")
            .enable_all()
            .build()?;
        self.runtime = Some(Arc::new(PingRuntime(Some(rt))));
        Ok(self)
    }

    /// Spawns `f` where pings run.
    fn spawn<F>(&self, f: F) -> tokio::task::JoinHandle<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        match self.runtime.as_ref().and_then(|r| r.0.as_ref()) {
            Some(rt) => rt.spawn(f),
            None => tokio::spawn(f),
        }
    }

    /// Runs `f` where pings run and awaits it; a ping cut short by the
    /// runtime's shutdown is unavailable.
    async fn run<F>(&self, f: F) -> Result<Duration, PingFailure>
    where
        F: Future<Output = Result<Duration, PingFailure>> + Send + 'static,
    {
        if self.runtime.is_none() {
            return f.await;
        }
        use tracing::Instrument as _;
        self.spawn(f.in_current_span())
            .await
            .unwrap_or_else(|_| Err(PingFailure::Unavailable("the ping runtime stopped".into())))
    }

    /// Watches every connection this pinger opens from now on: a member
    /// whose connection ends is named on the returned [`Closes`] at once.
    pub fn watch_closes(mut self) -> (Pinger, Closes) {
        let (hints, closes) = CloseHints::new();
        self.hints = Some(hints);
        (self, closes)
    }

    /// Pings over TLS (mTLS when the config carries an identity).
    pub fn with_tls(mut self, tls: ClientTlsConfig) -> Pinger {
        self.tls = Some(tls);
        self
    }

    /// The endpoint of `member`, with this pinger's timeouts, TLS and
    /// keepalive.
    fn endpoint(&self, member: &str) -> Result<Endpoint, PingFailure> {
        check_member_addr(member.as_bytes()).map_err(PingFailure::Malformed)?;
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        let mut ep = Endpoint::from_shared(format!("{scheme}://{member}"))
            .map_err(|_| PingFailure::Malformed("not a valid URI authority"))?
            .connect_timeout(self.timeout.max(FIRST_CONTACT))
            .timeout(self.timeout.max(FIRST_CONTACT))
            .tcp_nodelay(true);
        if let Some(tls) = &self.tls {
            ep = ep
                .tls_config(tls.clone())
                .map_err(|_| PingFailure::Malformed("TLS configuration rejected"))?;
        }
        if let Some(ka) = self.keepalive {
            ep = ep
                .http2_keep_alive_interval(ka.interval)
                .keep_alive_timeout(ka.timeout)
                .keep_alive_while_idle(ka.while_idle);
        }
        Ok(ep)
    }

    /// The member's cached channel (opened now if none), whether the member
    /// answered on it, and whether an answer now has anything to record
    /// ([`Pinger::answered`]): a first answer, or a beat stream to open. A
    /// steady member's answer then takes the cache's lock only here.
    fn channel(&self, member: &str) -> Result<(Channel, bool, bool), PingFailure> {
        let mut cache = self.channels.lock().expect("pinger cache poisoned");
        if let Some(c) = cache.get(member) {
            let to_record = !c.answered || (self.beats && c.beats.to_open(clock::now()));
            return Ok((c.channel.clone(), c.answered, to_record));
        }
        let ep = self.endpoint(member)?;
        let number = self.numbering.fetch_add(1, Ordering::Relaxed);
        let ch = match &self.hints {
            Some(hints) => ep.connect_with_connector_lazy(WatchingConnector::new(
                member,
                number,
                self.timeout.max(FIRST_CONTACT),
                hints.clone(),
            )),
            None => ep.connect_lazy(),
        };
        cache.insert(member.to_string(), Cached::new(ch.clone(), number, false));
        Ok((ch, false, true))
    }

    /// A watched connection ended: forgets the member's channel if it is the
    /// one that ended (the next ping opens a new one, rather than finding
    /// the old channel between connections). `false` for a channel already
    /// replaced or forgotten, whose close says nothing of the member.
    pub fn closed(&self, closed: &Closed) -> bool {
        let mut cache = self.channels.lock().expect("pinger cache poisoned");
        match cache.get(&closed.member) {
            Some(c) if c.number == closed.channel => {
                cache.remove(&closed.member);
                true
            }
            _ => false,
        }
    }

    /// Pings one member, bounded by the ping timeout.
    pub async fn ping(&self, member: &str) -> Result<Duration, PingFailure> {
        let (this, member) = (self.clone(), member.to_string());
        self.run(async move { this.ping_here(&member).await }).await
    }

    /// [`Pinger::ping`] on the current runtime.
    async fn ping_here(&self, member: &str) -> Result<Duration, PingFailure> {
        let (channel, answered, to_record) = self.channel(member)?;
        // A first contact also opens the connection (and TLS): thousands of
        // them at once, as when a new holder takes over, take longer than a
        // ping, and must not make live members look dead.
        if answered {
            return self
                .answer_on(member, channel, self.timeout, to_record)
                .await;
        }
        // Paced, and its deadline counted from its turn; a turn waited for
        // longer than a first contact's allowance is taken anyway, so that
        // pacing never delays a member's pings past what its deadline
        // allows, whatever many contacts hang.
        let timeout = self.timeout.max(FIRST_CONTACT);
        let turn = tokio::time::timeout(timeout, self.contacts.acquire()).await;
        let result = self.answer_on(member, channel, timeout, to_record).await;
        drop(turn);
        result
    }

    /// One call to `member` on `channel`; an answer is recorded
    /// (`to_record`: a first answer, or a beat stream to open).
    async fn answer_on(
        &self,
        member: &str,
        channel: Channel,
        timeout: Duration,
        to_record: bool,
    ) -> Result<Duration, PingFailure> {
        let result = call(channel, timeout, &self.view()).await;
        if result.is_ok() && to_record {
            self.answered(member);
        }
        result
    }

    /// `member` answered a call on its cached channel: marks the channel
    /// answered, and opens its beat stream if none was tried on it.
    fn answered(&self, member: &str) {
        let mut cache = self.channels.lock().expect("pinger cache poisoned");
        let Some(entry) = cache.get_mut(member) else {
            return;
        };
        entry.answered = true;
        if !self.beats || !entry.beats.to_open(clock::now()) {
            return;
        }
        entry.beats = Link::Opening;
        let (this, member, channel, number) = (
            self.clone(),
            member.to_string(),
            entry.channel.clone(),
            entry.number,
        );
        drop(cache);
        let spawner = self.clone();
        self.spawn(async move {
            let Ok(_opening) = this.opening.acquire().await else {
                return;
            };
            let opened = Stream::open(channel, this.timeout.max(FIRST_CONTACT), |read| {
                spawner.spawn(read);
            })
            .await;
            let mut cache = this.channels.lock().expect("pinger cache poisoned");
            // Only the channel it was opened on: a replaced one says
            // nothing of the new.
            if let Some(entry) = cache.get_mut(&member).filter(|e| e.number == number) {
                entry.beats = match opened {
                    Ok(Some(stream)) => Link::Open(stream),
                    Ok(None) => Link::Unsupported,
                    Err(()) => Link::Failed(clock::now()),
                };
            }
        });
    }

    /// A beat to `member`, if its stream is open: the task that awaits its
    /// answer (a call instead, should the stream end first).
    fn beat(&self, member: &str) -> Option<PingTask> {
        let (sent, answer) = {
            let mut cache = self.channels.lock().expect("pinger cache poisoned");
            let entry = cache.get_mut(member)?;
            let Link::Open(stream) = &entry.beats else {
                return None;
            };
            if entry.beats_in_row + 1 >= CALL_EVERY {
                entry.beats_in_row = 0;
                return None;
            }
            let sent = stream.send(&self.view())?;
            entry.beats_in_row += 1;
            sent
        };
        self.beats_sent.fetch_add(1, Ordering::Relaxed);
        let (this, name, timeout) = (self.clone(), member.to_string(), self.timeout);
        let beat = async move {
            let left = timeout.saturating_sub(sent.elapsed());
            // This future may be polled late (a beat carried into the next
            // cycle): the answer's own instant, taken as it was read, gives
            // the round trip and `at`, and decides whether it was in time.
            let (result, at) = match tokio::time::timeout(left, answer).await {
                Ok(Ok(answered)) if answered.saturating_duration_since(sent) <= timeout => {
                    (Ok(answered.saturating_duration_since(sent)), answered)
                }
                Ok(Ok(_)) | Err(_) => (Err(PingFailure::Timeout), clock::now()),
                // The stream ended first (refused, stopping, or closed): a
                // call decides.
                Ok(Err(_)) => {
                    this.forget_beats(&name);
                    // Spawned, not `Pinger::ping` (which may await the call
                    // inline): a beat's future must be `Sync`, and a call's
                    // is not; its task's handle is.
                    let (pinger, member) = (this.clone(), name.clone());
                    let result = this
                        .spawn(async move { pinger.ping_here(&member).await })
                        .await
                        .unwrap_or_else(|_| {
                            Err(PingFailure::Unavailable("the ping task stopped".into()))
                        });
                    (result, clock::now())
                }
            };
            PingReport {
                member: name,
                result,
                at,
                opened: None,
            }
        };
        Some(PingTask {
            member: Some(member.to_string()),
            running: Running::Beat(Box::pin(beat)),
        })
    }

    /// The member's beat stream ended: the next call that it answers opens
    /// a new one.
    fn forget_beats(&self, member: &str) {
        let mut cache = self.channels.lock().expect("pinger cache poisoned");
        if let Some(entry) = cache.get_mut(member)
            && matches!(&entry.beats, Link::Open(s) if !s.is_open())
        {
            entry.beats = Link::Untried;
        }
    }

    /// Pings one member on a connection of its own, opened for this ping and
    /// closed after it, bounded by the ping timeout: the look taken when a
    /// member's connection just ended. The cached channel is then between
    /// connections (hyper may still be tearing the old one down), and its
    /// answer would say more about that than about the member.
    pub async fn probe(&self, member: &str) -> Result<Duration, PingFailure> {
        let (endpoint, timeout, view) = (self.endpoint(member)?, self.timeout, self.view());
        self.run(async move { call(endpoint.connect_lazy(), timeout, &view).await })
            .await
    }

    /// Pings every member concurrently, each in its own task (in the current
    /// span), so a ping keeps going even while nobody awaits its result; results
    /// arrive as they complete, each naming its member.
    pub fn ping_tasks(&self, members: &[String]) -> PingSet {
        use tracing::Instrument as _;
        members
            .iter()
            .map(|m| {
                if let Some(beat) = self.beat(m) {
                    return beat;
                }
                let (pinger, member) = (self.clone(), m.clone());
                let handle = self.spawn(
                    async move {
                        let result = pinger.ping_here(&member).await;
                        PingReport {
                            member,
                            result,
                            at: clock::now(),
                            opened: None,
                        }
                    }
                    .in_current_span(),
                );
                PingTask::new(m.clone(), handle)
            })
            .collect()
    }

    /// A standby's warm channels: opens a connection to every listed member
    /// that has none known to work (new, or closed since), and drops the
    /// channels of members no longer listed, at most `WARM_CONCURRENCY` at a
    /// time. The connections then stay open (HTTP/2 keepalive), so a
    /// standby that becomes the holder pings over open connections at once
    /// instead of opening thousands in its first cycle. Returns how many it
    /// opened.
    ///
    /// It sends no ping. A ping that names no holder's view refreshes a
    /// member's hold (protocol step 5): a process started on an address
    /// after Redis lost writes would then start the units of its row as
    /// Redis now holds it, which the lost writes may have given another
    /// member, before the holder's first ping named the generation it
    /// must not start below.
    pub async fn warm(&self, members: &[String]) -> usize {
        use futures::StreamExt as _;
        let listed: HashSet<&str> = members.iter().map(String::as_str).collect();
        self.retain(&listed);
        let cold: Vec<String> = {
            let cache = self.channels.lock().expect("pinger cache poisoned");
            members
                .iter()
                .filter(|m| !cache.get(m.as_str()).is_some_and(|c| c.answered))
                .cloned()
                .collect()
        };
        // A few at a time: a standby opening thousands of connections at
        // once would take the CPU the holder's pings need on a small machine
        // (and warmth is never urgent).
        futures::stream::iter(cold)
            .map(|m| async move { self.connect(&m).await })
            .buffer_unordered(WARM_CONCURRENCY)
            .filter(|opened| std::future::ready(*opened))
            .count()
            .await
    }

    /// Opens `member`'s channel with its connection (and TLS) now, without
    /// a call, and caches it as one that works, so that the holder's first
    /// call on it is not paced as a first contact. A channel that works
    /// already is kept.
    async fn connect(&self, member: &str) -> bool {
        let Ok(ep) = self.endpoint(member) else {
            return false;
        };
        let number = self.numbering.fetch_add(1, Ordering::Relaxed);
        let timeout = self.timeout.max(FIRST_CONTACT);
        let hints = self.hints.clone();
        let name = member.to_string();
        let opening = self.spawn(async move {
            let connected = match hints {
                Some(hints) => {
                    let connector = WatchingConnector::new(&name, number, timeout, hints);
                    tokio::time::timeout(timeout, ep.connect_with_connector(connector)).await
                }
                None => tokio::time::timeout(timeout, ep.connect()).await,
            };
            connected.ok().and_then(Result::ok)
        });
        let Ok(Some(channel)) = opening.await else {
            return false;
        };
        let mut cache = self.channels.lock().expect("pinger cache poisoned");
        if cache.get(member).is_some_and(|c| c.answered) {
            return false;
        }
        cache.insert(member.to_string(), Cached::new(channel, number, true));
        true
    }

    /// Drops cached channels of members that are no longer listed.
    pub fn retain(&self, listed: &HashSet<&str>) {
        self.channels
            .lock()
            .expect("pinger cache poisoned")
            .retain(|m, _| listed.contains(m.as_str()));
    }
}

/// One ping on `channel`, bounded by `timeout`, carrying `view` (the
/// holder's, encoded; empty for none); its round-trip time.
async fn call(channel: Channel, timeout: Duration, view: &str) -> Result<Duration, PingFailure> {
    let started = clock::now();
    // Carries the current (ping) span as `traceparent`, so the member's
    // handling joins the distributor's trace.
    let mut request = tonic::Request::new(());
    super::trace::inject(request.metadata_mut());
    if !view.is_empty()
        && let Ok(v) = tonic::metadata::MetadataValue::try_from(view)
    {
        request.metadata_mut().insert(PingView::METADATA, v);
    }
    let call = async move { GrpcPingerClient::new(channel).ping(request).await };
    match tokio::time::timeout(timeout, call).await {
        Err(_) => Err(PingFailure::Timeout),
        Ok(Ok(_)) => Ok(started.elapsed()),
        Ok(Err(status)) => Err(PingFailure::of(status)),
    }
}

#[cfg(test)]
mod beat_tests;
#[cfg(test)]
mod tests;
