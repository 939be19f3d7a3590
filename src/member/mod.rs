//! The member library, for workers written in Rust.
//!
//! A [`Member`] serves the ping RPC (`/proto.GRPCPinger/Ping`) and the standard
//! `grpc.health.v1` health service, registers its address in its services list,
//! and follows its own row of the matching table through a
//! `watch::Receiver<Assignment>`.
//!
//! Guarantees:
//! - registration is one Lua script (`LPOS` then `LPUSH`): atomic and idempotent,
//!   so a restart or a retry never lists the member twice;
//! - it re-registers periodically, which heals a Redis that lost its data;
//! - the assignment follows the table-change notification, with `HGET` polling
//!   as a fallback for lost messages, and row and generation are read together;
//! - on shutdown (or drop) it deregisters, then stops serving. A crashed member
//!   simply stops answering: the distributor stops giving it work.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::core::inputs::check_member_addr;
use crate::core::table::decode_row;
use crate::edge::grpc::{PingResponder, TwoServices};
use crate::edge::redis::{Notification, Store};
use crate::edge::tls::TlsFiles;
use crate::error::{MemberError, StoreError};
use crate::proto::grpc_pinger_server::GrpcPingerServer;

/// This member's share of the work, as of one table generation.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Assignment {
    /// Whether the table has a field for this member: live and in the table.
    /// `false` means not a member now (failing, not listed, or no table yet).
    pub in_table: bool,
    /// The units this member owns, in table order (sorted); empty when its
    /// field is empty (live, no units) or absent.
    pub units: Vec<String>,
    /// The generation of the table they were read from (0: no table yet).
    pub generation: u64,
}

/// How a member finds Redis and the table, and how it is reached.
#[derive(Debug, Clone)]
pub struct MemberOptions {
    pub redis_url: String,
    /// The services list to register in (its group).
    pub services_key: String,
    /// The matching table key (`-distribution-namespace`).
    pub table_key: String,
    /// Where to serve gRPC; port 0 picks a free port.
    pub listen: SocketAddr,
    /// The address others dial, which is also the member id. Default: `listen`
    /// as bound (with the actual port).
    pub advertise: Option<String>,
    pub reregister_interval: Duration,
    /// Fallback `HGET` polling, in case a notification is lost.
    pub poll_interval: Duration,
    /// Custom CA / client certificate for a `rediss://` URL.
    pub redis_tls: TlsFiles,
    /// Redis Cluster mode with one seed URL (several comma-separated URLs in
    /// `redis_url` always mean a cluster).
    pub redis_cluster: bool,
    /// Serve the ping over TLS with this certificate and key; with a CA, also
    /// require the distributor's client certificate (mTLS).
    pub tls: Option<TlsFiles>,
}

impl MemberOptions {
    pub fn new(
        redis_url: &str,
        services_key: &str,
        table_key: &str,
        listen: SocketAddr,
    ) -> MemberOptions {
        MemberOptions {
            redis_url: redis_url.to_string(),
            services_key: services_key.to_string(),
            table_key: table_key.to_string(),
            listen,
            advertise: None,
            reregister_interval: Duration::from_secs(5),
            poll_interval: Duration::from_secs(1),
            redis_tls: TlsFiles::default(),
            redis_cluster: false,
            tls: None,
        }
    }
}

/// A running member. Dropping it deregisters and stops serving in the background.
pub struct Member {
    id: String,
    local_addr: SocketAddr,
    assignment: watch::Receiver<Assignment>,
    cancel: CancellationToken,
    task: Option<JoinHandle<()>>,
    server: Option<JoinHandle<()>>,
}

impl Member {
    /// Binds the gRPC server, then registers and follows the table in the
    /// background. Redis being down is not an error here: it is retried.
    pub async fn start(opts: MemberOptions) -> Result<Member, MemberError> {
        let listener =
            TcpListener::bind(opts.listen)
                .await
                .map_err(|source| MemberError::Listen {
                    addr: opts.listen,
                    source,
                })?;
        let local_addr = listener
            .local_addr()
            .map_err(|source| MemberError::Listen {
                addr: opts.listen,
                source,
            })?;
        // A wildcard listen address is not an address others can dial.
        let id = match &opts.advertise {
            Some(a) => a.clone(),
            None if local_addr.ip().is_unspecified() => {
                return Err(MemberError::Address {
                    addr: local_addr.to_string(),
                    reason: "listening on all interfaces: set `advertise` to the address others dial",
                });
            }
            None => local_addr.to_string(),
        };
        check_member_addr(id.as_bytes()).map_err(|reason| MemberError::Address {
            addr: id.clone(),
            reason,
        })?;
        let store = Store::connect(
            &crate::edge::redis::RedisOptions {
                cluster: opts.redis_cluster,
                tls: opts.redis_tls.clone(),
                ..crate::edge::redis::RedisOptions::from_urls(&opts.redis_url)
            },
            &opts.table_key,
            Duration::from_secs(2),
        )?;
        let mut server = tonic::transport::Server::builder();
        if let Some(files) = &opts.tls {
            let tls = crate::edge::tls::ping_server(files).map_err(MemberError::Tls)?;
            server = server.tls_config(tls).map_err(|e| {
                MemberError::Tls(crate::edge::tls::TlsError::Rejected(e.to_string()))
            })?;
        }

        let cancel = CancellationToken::new();
        let serving = CancellationToken::new();
        let (health, health_service) = tonic_health::server::health_reporter();
        health
            .set_serving::<GrpcPingerServer<PingResponder>>()
            .await;
        let server = {
            let serving = serving.clone();
            // No Nagle: a ping is one tiny frame each way, and delaying it costs ~40 ms.
            let incoming =
                tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true));
            let pinger = GrpcPingerServer::new(PingResponder::new(&id));
            tokio::spawn(async move {
                let result = server
                    .serve_with_incoming_shutdown(
                        TwoServices::new(health_service, pinger),
                        incoming,
                        serving.cancelled(),
                    )
                    .await;
                if let Err(e) = result {
                    tracing::warn!(error = %e, "member gRPC server failed");
                }
            })
        };

        let (tx, rx) = watch::channel(Assignment::default());
        let follow = Follower {
            store,
            opts,
            id: id.clone(),
            tx,
            bad_generation: AtomicBool::new(false),
        };
        let task = {
            let cancel = cancel.clone();
            tokio::spawn(async move {
                follow.run(cancel).await;
                health
                    .set_not_serving::<GrpcPingerServer<PingResponder>>()
                    .await;
                serving.cancel();
            })
        };
        Ok(Member {
            id,
            local_addr,
            assignment: rx,
            cancel,
            task: Some(task),
            server: Some(server),
        })
    }

    /// The member id: the address written into the services list.
    pub fn id(&self) -> &str {
        &self.id
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Follows this member's row; `changed()` fires on every new generation.
    pub fn assignment(&self) -> watch::Receiver<Assignment> {
        self.assignment.clone()
    }

    /// Deregisters, then stops serving, waiting for both.
    pub async fn shutdown(mut self) {
        self.cancel.cancel();
        if let Some(t) = self.task.take() {
            let _ = t.await;
        }
        if let Some(s) = self.server.take() {
            let _ = tokio::time::timeout(Duration::from_secs(5), s).await;
        }
    }

    /// Stops at once, like a crash: no deregistration, connections refused.
    pub fn abort(mut self) {
        for t in [self.task.take(), self.server.take()].into_iter().flatten() {
            t.abort();
        }
    }
}

impl Drop for Member {
    fn drop(&mut self) {
        self.cancel.cancel();
    }
}

struct Follower {
    store: Store,
    opts: MemberOptions,
    id: String,
    tx: watch::Sender<Assignment>,
    /// Whether an unreadable generation was already logged.
    bad_generation: AtomicBool,
}

impl Follower {
    async fn run(self, cancel: CancellationToken) {
        let keys = self.store.keys().clone();
        let mut notes = self
            .store
            .subscribe(vec![keys.table_channel.clone()], cancel.child_token());
        let mut registered = false;
        let mut reregister = tokio::time::interval(self.opts.reregister_interval);
        let mut poll = tokio::time::interval(self.opts.poll_interval);
        poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                biased;
                _ = cancel.cancelled() => break,
                _ = reregister.tick() => registered = self.register(registered).await,
                n = notes.recv() => match n {
                    Some(Notification::Message(..)) | Some(Notification::Subscribed) => self.refresh().await,
                    None => break,
                },
                _ = poll.tick() => self.refresh().await,
            }
        }
        match self
            .store
            .deregister(&self.opts.services_key, &self.id)
            .await
        {
            Ok(_) => {
                tracing::info!(member = %self.id, list = %self.opts.services_key, "deregistered")
            }
            Err(e) => {
                tracing::warn!(error = %e, member = %self.id, "could not deregister; the distributor will see it fail")
            }
        }
    }

    async fn register(&self, was_registered: bool) -> bool {
        match self.store.register(&self.opts.services_key, &self.id).await {
            Ok(added) => {
                if added && was_registered {
                    tracing::info!(member = %self.id, list = %self.opts.services_key, "re-registered (the list had lost this member)");
                } else if added {
                    tracing::info!(member = %self.id, list = %self.opts.services_key, "registered");
                }
                true
            }
            Err(e) => {
                log_store_error(&e, "could not register; retrying");
                was_registered
            }
        }
    }

    async fn refresh(&self) {
        match self.store.read_row(&self.id).await {
            Ok((row, generation)) => {
                let generation = match generation {
                    Ok(g) => g,
                    // The row is still the truth; keep the last generation
                    // (and say so once) rather than stop following it.
                    Err(e) => {
                        if !self.bad_generation.swap(true, Ordering::Relaxed) {
                            tracing::warn!(error = %e, "the table's generation is unreadable; following the row anyway");
                        }
                        self.tx.borrow().generation
                    }
                };
                let next = Assignment {
                    in_table: row.is_some(),
                    units: row
                        .as_deref()
                        .map(decode_row)
                        .unwrap_or_default()
                        .into_iter()
                        .map(str::to_string)
                        .collect(),
                    generation,
                };
                self.tx.send_if_modified(|a| {
                    let changed = *a != next;
                    *a = next;
                    changed
                });
            }
            Err(e) => log_store_error(&e, "could not read the matching table"),
        }
    }
}

fn log_store_error(e: &StoreError, what: &str) {
    if e.is_retryable() {
        tracing::debug!(error = %e, "{what}");
    } else {
        tracing::warn!(error = %e, "{what}");
    }
}
