//! The daemon: one replica and its HTTP endpoints, from start to an orderly stop.

use std::future::Future;
use std::time::Duration;

use anyhow::Context as _;

use crate::config::{Config, HttpAddrOrigin};
use crate::ops::http;

/// Lifts the soft open-files limit to the hard one: one cached channel per
/// member means 10,000 members need 10,000 descriptors, and running out would
/// make every ping fail at once.
pub fn raise_open_files_limit() {
    // SAFETY: getrlimit/setrlimit only read and write the struct passed in.
    unsafe {
        let mut lim = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 && lim.rlim_cur < lim.rlim_max {
            let wanted = libc::rlimit {
                rlim_cur: lim.rlim_max,
                rlim_max: lim.rlim_max,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &wanted) != 0 {
                tracing::warn!(
                    soft = lim.rlim_cur,
                    hard = lim.rlim_max,
                    "could not raise the open-files limit"
                );
            }
        }
    }
}

/// Runs the replica and its HTTP endpoints until `shutdown` resolves, then
/// shuts down in order: stop acting and release the lease (standbys take over
/// at once), then stop the HTTP server, each step with a deadline.
pub async fn serve(config: Config, shutdown: impl Future<Output = ()>) -> anyhow::Result<()> {
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
    let listener = match config.http_addr {
        // The built-in default must not kill a replica: it moves to a free port.
        Some(addr) if config.http_addr_origin == HttpAddrOrigin::Default => {
            http::bind_default(addr, http::DEFAULT_PORTS)
                .await
                .with_context(|| format!("failed to listen on {addr} (-http-addr)"))?
        }
        // An address given explicitly must be free.
        Some(addr) => {
            let flag = config.http_addr_origin.flag();
            let listener = tokio::net::TcpListener::bind(addr)
                .await
                .with_context(|| format!("failed to listen on {addr} ({flag})"))?;
            tracing::info!("serving /metrics on {addr}");
            Some(listener)
        }
        None => None,
    };
    let redis_fresh = config.census_interval * 2 + config.lease.ttl;
    // The status page's API reads Redis through its own store handle.
    let ui_store = (config.http_ui && listener.is_some())
        .then(|| {
            crate::edge::redis::Store::connect(
                &config.redis_options(),
                &config.distribution_namespace,
                Duration::from_secs(3),
            )
        })
        .transpose()
        .context("failed to open the redis connection of -http-ui")?;
    let (services, units_key) = (
        config.services_namespaces.clone(),
        config.workunits_namespace.clone(),
    );
    let plan_settings = super::plan::settings(&config);
    let replica = crate::Distributor::start(config).context("failed to start the distributor")?;
    let stop_http = tokio_util::sync::CancellationToken::new();
    let http = listener.map(|listener| {
        let (status, metrics, stop) = (replica.status(), replica.metrics(), stop_http.clone());
        let ui = ui_store.map(|store| {
            crate::ops::api::Api::start(
                store,
                services,
                units_key,
                status.clone(),
                stop.clone().cancelled_owned(),
            )
            .with_plan(plan_settings)
        });
        tokio::spawn(http::serve_with(
            listener,
            status,
            metrics,
            redis_fresh,
            ui,
            stop.cancelled_owned(),
        ))
    });

    shutdown.await;
    tracing::info!("shutdown requested: releasing the lease");
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
