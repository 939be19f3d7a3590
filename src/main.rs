//! The `distributor` daemon: flags and signals live here, the work in the library.

use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context as _;
use clap::Parser;
use distributor::config::{self, RawConfig};
use tracing_subscriber::EnvFilter;

/// Splits a changing list of work units among live workers; a drop-in
/// replacement for scientificideas/distributor. Every flag also reads an
/// environment variable (see README); Go-style `-flag=value` works too.
#[derive(Parser, Debug)]
#[command(name = "distributor", version)]
struct Cli {
    #[arg(long, value_name = "KEYS")]
    services_namespaces: Option<String>,
    #[arg(long, value_name = "KEY")]
    workunits_namespace: Option<String>,
    #[arg(long, value_name = "KEY")]
    distribution_namespace: Option<String>,
    #[arg(long, value_name = "DURATION")]
    poll_interval: Option<String>,
    #[arg(long, value_name = "DURATION")]
    ping_timeout: Option<String>,
    #[arg(long, value_name = "URL")]
    redis_url: Option<String>,
    #[arg(long, value_name = "HOST:PORT")]
    redis_addrs: Option<String>,
    #[arg(long, value_name = "PASSWORD")]
    redis_pass: Option<String>,
    #[arg(long, value_name = "N")]
    failure_threshold: Option<String>,
    #[arg(long, value_name = "DURATION")]
    forget_after: Option<String>,
    #[arg(long, value_name = "DURATION")]
    lease_ttl: Option<String>,
    #[arg(long, value_name = "DURATION")]
    lease_renew_interval: Option<String>,
    #[arg(long, value_name = "DURATION")]
    lease_renew_deadline: Option<String>,
    #[arg(long, value_name = "DURATION")]
    lease_retry_interval: Option<String>,
    #[arg(long, value_name = "DURATION")]
    census_interval: Option<String>,
    #[arg(long, value_name = "NAME")]
    replica_id: Option<String>,
    #[arg(long, value_name = "DURATION")]
    ka_time: Option<String>,
    #[arg(long, value_name = "DURATION")]
    ka_timeout: Option<String>,
    #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true")]
    ka_permit_without_stream: Option<String>,
    #[arg(long, value_name = "LEVEL")]
    log: Option<String>,
    #[arg(long, value_name = "IP:PORT|off")]
    http_addr: Option<String>,
    #[arg(long, value_name = "PORT")]
    prom_port: Option<String>,
    #[arg(long, value_name = "text|json")]
    log_format: Option<String>,
    #[arg(long, value_name = "args|env")]
    config_type: Option<String>,
}

impl From<Cli> for RawConfig {
    fn from(c: Cli) -> RawConfig {
        RawConfig {
            services_namespaces: c.services_namespaces,
            workunits_namespace: c.workunits_namespace,
            distribution_namespace: c.distribution_namespace,
            poll_interval: c.poll_interval,
            ping_timeout: c.ping_timeout,
            redis_url: c.redis_url,
            redis_addrs: c.redis_addrs,
            redis_pass: c.redis_pass,
            failure_threshold: c.failure_threshold,
            forget_after: c.forget_after,
            lease_ttl: c.lease_ttl,
            lease_renew_interval: c.lease_renew_interval,
            lease_renew_deadline: c.lease_renew_deadline,
            lease_retry_interval: c.lease_retry_interval,
            census_interval: c.census_interval,
            replica_id: c.replica_id,
            ka_time: c.ka_time,
            ka_timeout: c.ka_timeout,
            ka_permit_without_stream: c.ka_permit_without_stream,
            log: c.log,
            http_addr: c.http_addr,
            prom_port: c.prom_port,
            log_format: c.log_format,
            config_type: c.config_type,
        }
    }
}

fn main() -> ExitCode {
    let args = config::normalize_go_flags(std::env::args());
    let cli = Cli::parse_from(args);
    let config = match config::resolve(&cli.into(), &|k| std::env::var(k).ok()) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("distributor: {e}");
            return ExitCode::from(2);
        }
    };
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(&config.log));
    if config.log_json {
        tracing_subscriber::fmt()
            .json()
            .with_env_filter(filter)
            .init();
    } else {
        tracing_subscriber::fmt().with_env_filter(filter).init();
    }
    match run(config) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(config: distributor::Config) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Runtime::new().context("failed to start the async runtime")?;
    runtime.block_on(serve(config))
}

/// Runs the replica and its HTTP endpoints until SIGTERM or Ctrl-C, then shuts
/// down in order: stop acting and release the lease (standbys take over at
/// once), then stop the HTTP server, each step with a deadline.
async fn serve(config: distributor::Config) -> anyhow::Result<()> {
    tracing::info!(
        replica = %config.replica_id,
        redis = %config.redis_url_redacted(),
        services = ?config.services_namespaces,
        workunits = %config.workunits_namespace,
        table = %config.distribution_namespace,
        poll_interval = ?config.poll_interval,
        ping_timeout = ?config.ping_timeout,
        lease_ttl = ?config.lease.ttl,
        http = ?config.http_addr,
        "starting"
    );
    let listener =
        match config.http_addr {
            Some(addr) => Some(tokio::net::TcpListener::bind(addr).await.with_context(|| {
                format!("failed to listen on {addr} (-http-addr / -prom-port)")
            })?),
            None => None,
        };
    let redis_fresh = config.census_interval * 2 + config.lease.ttl;
    let replica =
        distributor::Distributor::start(config).context("failed to start the distributor")?;
    let stop_http = tokio_util::sync::CancellationToken::new();
    let http = listener.map(|listener| {
        let (status, metrics, stop) = (replica.status(), replica.metrics(), stop_http.clone());
        tokio::spawn(distributor::http::serve(
            listener,
            status,
            metrics,
            redis_fresh,
            stop.cancelled_owned(),
        ))
    });

    shutdown_signal().await;
    if tokio::time::timeout(Duration::from_secs(5), replica.shutdown())
        .await
        .is_err()
    {
        tracing::warn!("shutdown: the lease was not released within 5s; it will lapse");
    }
    stop_http.cancel();
    if let Some(http) = http {
        match tokio::time::timeout(Duration::from_secs(2), http).await {
            Ok(Ok(Ok(()))) => {}
            Ok(Ok(Err(e))) => tracing::warn!(error = %e, "http server failed"),
            Ok(Err(e)) => tracing::warn!(error = %e, "http server task failed"),
            Err(_) => tracing::warn!("shutdown: http server did not drain within 2s"),
        }
    }
    tracing::info!("stopped");
    Ok(())
}

/// Resolves on SIGTERM or Ctrl-C.
async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .expect("failed to install the SIGTERM handler");
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
    tracing::info!("shutdown requested: releasing the lease");
}
