//! Starting a [`Member`]: the builder, where its gRPC services are served
//! (its own server, or the application's), and which Redis client it uses.
//!
//! Guarantees:
//! - whoever serves the ping, the member's holds end at once and it stops
//!   when that server ends on its own: its own server's task returning, or
//!   every copy of the [`MemberServices`] given to the application dropped
//!   (the application's server ended, or it never served them);
//! - nothing is registered before the options were checked and the
//!   services exist.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;
use tonic_health::server::HealthReporter;

use super::follow::{Follower, Mode};
use super::handoff::{Handoff, Shared};
use super::loads;
use super::meters::Meters;
use super::options::MemberOptions;
use super::{Assignment, CALL_TIMEOUT, Member, MemberHandle, RedisSource};
use crate::core::inputs::check_member_addr;
use crate::core::load::LoadBook;
use crate::core::ownership::Ownership;
use crate::edge::clock;
use crate::edge::grpc::{PingGate, PingResponder, Route, Unimplemented};
use crate::edge::redis::{RedisOptions, Store};
use crate::error::MemberError;
use crate::proto::grpc_pinger_server::GrpcPingerServer;
use crate::proto::liveness_server::LivenessServer;

/// Starts a [`Member`]: options, a handler, and optionally the
/// application's own Redis client, tonic server and health reporter.
///
/// ```no_run
/// # async fn run() -> Result<(), distributor::MemberError> {
/// use distributor::{Member, MemberOptions};
///
/// let member = Member::builder()
///     .options(MemberOptions::from_env()?)
///     .start()
///     .await?;
/// member.ready().await?;
/// # Ok(()) }
/// ```
#[must_use = "a builder does nothing until started"]
pub struct MemberBuilder {
    opts: MemberOptions,
    handoff: Arc<dyn Handoff>,
    client: Option<redis::Client>,
    health: Option<HealthReporter>,
    recorder: Option<Arc<dyn metrics::Recorder + Send + Sync>>,
}

/// The member's gRPC services, for the application's own tonic server
/// ([`MemberBuilder::start_without_server`]): add both with
/// `Server::builder().add_service(services.pinger).add_service(services.beats)`.
///
/// The member runs for as long as a copy of them is alive: once every copy
/// is dropped (the server and its connections ended, or they were never
/// served), it ends every hold at once and stops, since the holder takes a
/// refused connection as proof that nothing works on its units.
///
/// **Serve them for as long as the member runs**, and stop the member
/// ([`Member::drain`] or [`Member::shutdown`]) before the server: a
/// server shutting down refuses new connections, and the holder takes a
/// refused connection as proof that nothing works on the member's units,
/// while the member, pinged on a beat stream that stays open, would still
/// hold them. (A graceful shutdown also waits for that stream, which ends
/// only once the member refuses beats.)
pub struct MemberServices {
    /// `/proto.GRPCPinger/Ping`, the Go-compatible ping.
    pub pinger: GrpcPingerServer<PingResponder>,
    /// `/proto.Liveness/Beats`, the distributor's cheap liveness stream.
    pub beats: LivenessServer<PingResponder>,
}

impl Default for MemberBuilder {
    fn default() -> MemberBuilder {
        MemberBuilder {
            opts: MemberOptions::default(),
            handoff: Arc::new(()),
            client: None,
            health: None,
            recorder: None,
        }
    }
}

impl MemberBuilder {
    /// Every option at once (replacing those set before).
    pub fn options(mut self, opts: MemberOptions) -> MemberBuilder {
        self.opts = opts;
        self
    }

    /// Changes some options in place.
    pub fn configure(mut self, f: impl FnOnce(&mut MemberOptions)) -> MemberBuilder {
        f(&mut self.opts);
        self
    }

    pub fn redis_url(self, url: impl Into<String>) -> MemberBuilder {
        let url = url.into();
        self.configure(|o| o.redis_url = url)
    }

    pub fn services_key(self, key: impl Into<String>) -> MemberBuilder {
        let key = key.into();
        self.configure(|o| o.services_key = key)
    }

    pub fn table_key(self, key: impl Into<String>) -> MemberBuilder {
        let key = key.into();
        self.configure(|o| o.table_key = key)
    }

    pub fn listen(self, addr: SocketAddr) -> MemberBuilder {
        self.configure(|o| o.listen = addr)
    }

    pub fn advertise(self, addr: impl Into<String>) -> MemberBuilder {
        let addr = addr.into();
        self.configure(|o| o.advertise = Some(addr))
    }

    pub fn weight(self, weight: u32) -> MemberBuilder {
        self.configure(|o| o.weight = weight)
    }

    /// The application's handler; without one, follow
    /// [`Member::assignment`]. An `Arc<dyn Handoff>` is one too.
    pub fn handoff(mut self, handoff: impl Handoff) -> MemberBuilder {
        self.handoff = Arc::new(handoff);
        self
    }

    /// The application's own Redis client (one node), instead of
    /// `redis_url` and `redis_tls`: its address, credentials and TLS are
    /// used as it was set up. The member opens its own few connections from
    /// it (see [`Store::with_client`]). Not with `redis_sentinel` or
    /// `redis_cluster` (starting fails): those connect by the options.
    pub fn redis_client(mut self, client: redis::Client) -> MemberBuilder {
        self.client = Some(client);
        self
    }

    /// The application's health reporter: the member keeps the status of
    /// `proto.GRPCPinger` in it (`NOT_SERVING` while fenced), and leaves
    /// the overall status (`""`) to the application. Without one, the
    /// member's own server serves a health service of its own, where it
    /// sets both.
    pub fn health_reporter(mut self, health: HealthReporter) -> MemberBuilder {
        self.health = Some(health);
        self
    }

    /// A `metrics` recorder for the member's metrics
    /// ([`super::MEMBER_METRICS`]) instead of the global one.
    pub fn metrics_recorder(
        mut self,
        recorder: Arc<dyn metrics::Recorder + Send + Sync>,
    ) -> MemberBuilder {
        self.recorder = Some(recorder);
        self
    }

    /// Binds the gRPC server on `listen`, then registers and follows the
    /// table in the background. Redis being down is not an error here: it
    /// is retried.
    pub async fn start(self) -> Result<Member, MemberError> {
        self.opts.check()?;
        let listener = TcpListener::bind(self.opts.listen)
            .await
            .map_err(|source| MemberError::Listen {
                addr: self.opts.listen,
                source,
            })?;
        let local_addr = listener
            .local_addr()
            .map_err(|source| MemberError::Listen {
                addr: self.opts.listen,
                source,
            })?;
        // A wildcard listen address is not an address others can dial.
        let id = match &self.opts.advertise {
            Some(a) => a.clone(),
            None if local_addr.ip().is_unspecified() => {
                return Err(MemberError::Address {
                    addr: local_addr.to_string(),
                    reason: "listening on all interfaces: set `advertise` to the address others dial",
                });
            }
            None => local_addr.to_string(),
        };
        let mut server = tonic::transport::Server::builder();
        if let Some(files) = &self.opts.tls {
            let tls = crate::edge::tls::ping_server(files).map_err(MemberError::Tls)?;
            server = server.tls_config(tls).map_err(|e| {
                MemberError::Tls(crate::edge::tls::TlsError::Rejected(e.to_string()))
            })?;
        }
        let own_health = self.health.is_none();
        let (health, health_service) = match &self.health {
            Some(h) => (h.clone(), None),
            None => {
                let (h, s) = tonic_health::server::health_reporter();
                (h, Some(s))
            }
        };
        let parts = self.prepare(id, health, own_health)?;
        let ended = parts.ended();
        let serving = parts.serving.clone();
        let responder = PingResponder::gated(&parts.id, parts.shared.clone());
        // No Nagle: a ping is one tiny frame each way, and delaying it costs ~40 ms.
        let incoming =
            tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true));
        let pinger = GrpcPingerServer::new(responder.clone());
        let beats = LivenessServer::new(responder);
        let server = tokio::spawn(async move {
            let routes = Route::new(pinger, Route::new(beats, Unimplemented));
            let serve = async {
                match health_service {
                    Some(health) => {
                        server
                            .serve_with_incoming_shutdown(
                                Route::new(health, routes),
                                incoming,
                                serving.cancelled(),
                            )
                            .await
                    }
                    None => {
                        server
                            .serve_with_incoming_shutdown(routes, incoming, serving.cancelled())
                            .await
                    }
                }
            };
            // Once the member stopped serving it holds nothing (it handed
            // every unit over, or stopped each, or its holds ended), so a
            // refused connection is the truth: calls in progress get a short
            // grace, and connections the replicas keep open (the holder's
            // beat stream, a standby's channel) do not hold the exit.
            let closed = async {
                serving.cancelled().await;
                tokio::time::sleep(crate::core::timing::Timing::DEFAULT.server_shutdown).await;
            };
            let result = tokio::select! {
                result = serve => result,
                () = closed => Ok(()),
            };
            if !serving.is_cancelled() {
                ended(result.err().map(|e| e.to_string()));
            }
        });
        Ok(parts.run(Some(local_addr), Some(server)))
    }

    /// Starts without a server of its own: the application serves the
    /// returned [`MemberServices`] on its tonic server, at the address set
    /// in `advertise` (required: it is the member id). The member serves
    /// pings only through them, so serve them before long: until a ping
    /// comes, the member acquires nothing.
    pub async fn start_without_server(self) -> Result<(Member, MemberServices), MemberError> {
        self.opts.check()?;
        let Some(id) = self.opts.advertise.clone() else {
            return Err(MemberError::Option {
                name: "advertise",
                reason: "required when the application serves the member's services: the address the distributor dials".into(),
            });
        };
        let health = self.health.clone();
        let parts = self.prepare(id, health.unwrap_or_else(detached_health), false)?;
        let ended = parts.ended();
        let (alive, mut gone) = mpsc::channel::<()>(1);
        let gate: Arc<dyn PingGate> = Arc::new(ServedGate {
            shared: parts.shared.clone(),
            _alive: alive,
        });
        let responder = PingResponder::gated(&parts.id, gate);
        let services = MemberServices {
            pinger: GrpcPingerServer::new(responder.clone()),
            beats: LivenessServer::new(responder),
        };
        let serving = parts.serving.clone();
        let watcher = tokio::spawn(async move {
            tokio::select! {
                _ = gone.recv() => ended(Some("every copy of the member's services was dropped".into())),
                () = serving.cancelled() => {}
            }
        });
        Ok((parts.run(None, Some(watcher)), services))
    }

    /// Everything but the server: checks the id, opens the store, makes the
    /// shared state.
    fn prepare(
        self,
        id: String,
        health: HealthReporter,
        own_health: bool,
    ) -> Result<Prepared, MemberError> {
        check_member_addr(id.as_bytes()).map_err(|reason| MemberError::Address {
            addr: id.clone(),
            reason,
        })?;
        let redis = match self.client {
            Some(_)
                if self.opts.redis_sentinel.is_some()
                    || self.opts.redis_cluster
                    || self.opts.redis_url.contains(',') =>
            {
                return Err(MemberError::Option {
                    name: "redis_client",
                    reason: "one node's client: not with redis_sentinel or redis_cluster (leave it out: the member connects by its options)".into(),
                });
            }
            Some(client) => RedisSource::Client(client),
            None => RedisSource::Options(RedisOptions {
                cluster: self.opts.redis_cluster,
                sentinel: self.opts.redis_sentinel.clone(),
                tls: self.opts.redis_tls.clone(),
                ..RedisOptions::from_urls(&self.opts.redis_url)
            }),
        };
        let store = redis.connect(&self.opts.table_key)?;
        let shared = Shared::new(Ownership::new(
            self.opts.deadline,
            self.opts.weight,
            clock::now(),
        ));
        let (mode, mode_rx) = watch::channel(Mode::Run);
        let recorder = self
            .recorder
            .as_deref()
            .map(|r| r as &dyn metrics::Recorder);
        super::meters::describe(recorder);
        let meters = Meters::new(&id, recorder);
        Ok(Prepared {
            opts: self.opts,
            handoff: self.handoff,
            id,
            redis,
            store,
            shared,
            mode,
            mode_rx,
            health,
            own_health,
            meters,
            serving: CancellationToken::new(),
        })
    }
}

/// A health reporter nobody serves, for a member whose application gave
/// none.
fn detached_health() -> HealthReporter {
    tonic_health::server::health_reporter().0
}

/// The gate of services served by the application: answers as the member's
/// state decides, and, by being dropped with the last copy of the services,
/// tells the member that nothing serves its pings any more.
struct ServedGate {
    shared: Arc<Shared>,
    _alive: mpsc::Sender<()>,
}

impl PingGate for ServedGate {
    fn admit(
        &self,
        received: std::time::Instant,
        view: Option<crate::core::handoff::PingView>,
    ) -> Result<(), String> {
        self.shared.admit(received, view)
    }
}

/// A member ready to run, but for its server.
struct Prepared {
    opts: MemberOptions,
    handoff: Arc<dyn Handoff>,
    id: String,
    redis: RedisSource,
    store: Store,
    shared: Arc<Shared>,
    mode: watch::Sender<Mode>,
    /// Made with `mode`: a stop sent before the task runs is still seen.
    mode_rx: watch::Receiver<Mode>,
    health: HealthReporter,
    own_health: bool,
    meters: Meters,
    /// Cancelled once the member stopped serving on purpose.
    serving: CancellationToken,
}

impl Prepared {
    /// What to do when the server ends on its own: nothing listens on the
    /// member's address any more while it runs. The holder takes a refused
    /// connection as proof that nothing works on its units and may grant
    /// them at once: every hold ends now, and the member stops.
    fn ended(&self) -> impl FnOnce(Option<String>) + Send + 'static {
        let (shared, mode) = (self.shared.clone(), self.mode.clone());
        move |error| {
            tracing::error!(
                ?error,
                "member gRPC server ended: every unit is stopped and the member stops"
            );
            shared.lock().stop(clock::now());
            shared.wake.notify_one();
            mode.send_replace(Mode::Stop);
        }
    }

    fn run(
        self,
        local_addr: Option<SocketAddr>,
        server: Option<tokio::task::JoinHandle<()>>,
    ) -> Member {
        let Prepared {
            opts,
            handoff,
            id,
            redis,
            store,
            shared,
            mode,
            mode_rx,
            health,
            own_health,
            meters,
            serving,
        } = self;
        let (tx, rx) = watch::channel(Assignment::default());
        let (ready_tx, ready) = watch::channel(false);
        let left = Arc::new(AtomicBool::new(false));
        let loads = Arc::new(std::sync::Mutex::new(LoadBook::new(opts.load_half_life)));
        let loads_task = tokio::spawn(loads::report_loads(
            store.clone(),
            id.clone(),
            shared.clone(),
            loads.clone(),
            opts.load_report_interval,
            serving.clone(),
            left.clone(),
        ));
        let (table_key, services_key) = (opts.table_key.clone(), opts.services_key.clone());
        let follow = Follower {
            store,
            opts,
            id: id.clone(),
            shared: shared.clone(),
            handoff,
            tx,
            ready: ready_tx,
            health: health.clone(),
            own_health,
            meters,
            left: left.clone(),
        };
        let task = tokio::spawn(async move {
            health
                .set_serving::<GrpcPingerServer<PingResponder>>()
                .await;
            let ending = follow.run(mode_rx).await;
            health
                .set_not_serving::<GrpcPingerServer<PingResponder>>()
                .await;
            serving.cancel();
            ending
        });
        let handle = MemberHandle {
            id: Arc::from(id.as_str()),
            shared: shared.clone(),
            loads,
        };
        Member {
            id,
            local_addr,
            assignment: rx,
            ready,
            shared,
            mode,
            task: Some(task),
            server,
            left,
            handle,
            loads_task: Some(loads_task),
            redis,
            table_key,
            services_key,
        }
    }
}

/// The store a [`RedisSource`] opens.
impl RedisSource {
    pub(super) fn connect(&self, table_key: &str) -> Result<Store, MemberError> {
        Ok(match self {
            RedisSource::Options(opts) => Store::connect(opts, table_key, CALL_TIMEOUT)?,
            RedisSource::Client(client) => {
                Store::with_client(client.clone(), table_key, CALL_TIMEOUT)?
            }
        })
    }
}
