//! The `distributor` daemon: flags and signals live here, the work in the library.

use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context as _;
use distributor::cli::{self, CliError, Command, ServicesOp, UnitsOp};
use distributor::config::HttpAddrOrigin;

fn main() -> ExitCode {
    let invocation = match cli::parse(std::env::args_os(), &|k| std::env::var_os(k)) {
        Ok(invocation) => invocation,
        // Help and version print on stdout and exit 0; a rejected command line exits 2.
        Err(CliError::Clap(e)) => e.exit(),
        Err(CliError::Config(e)) => {
            eprintln!("distributor: {e}");
            return ExitCode::from(2);
        }
    };
    let config = invocation.config;
    if let Some(command) = invocation.command {
        // Operator commands log nothing but warnings, and never export spans.
        distributor::ops::telemetry::init("warn", false, None);
        return match admin(config, command) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("distributor: {e:#}");
                ExitCode::FAILURE
            }
        };
    }
    match run(config) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e:#}");
            ExitCode::FAILURE
        }
    }
}

/// Lifts the soft open-files limit to the hard one: one cached channel per
/// member means 10,000 members need 10,000 descriptors, and running out would
/// make every ping fail at once.
fn raise_open_files_limit() {
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

fn run(config: distributor::Config) -> anyhow::Result<()> {
    raise_open_files_limit();
    let runtime = tokio::runtime::Runtime::new().context("failed to start the async runtime")?;
    runtime.block_on(async {
        // The OTLP/gRPC exporter needs the runtime, so telemetry starts here.
        let provider =
            distributor::ops::telemetry::tracer_provider(config.traces, &|k| std::env::var(k).ok())
                .context("failed to configure OpenTelemetry export")?;
        let telemetry = distributor::ops::telemetry::init(&config.log, config.log_json, provider);
        let result = serve(config).await;
        telemetry.shutdown(Duration::from_secs(3)).await;
        result
    })
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
    let listener = match config.http_addr {
        // The built-in default must not kill a replica: it moves to a free port.
        Some(addr) if config.http_addr_origin == HttpAddrOrigin::Default => {
            distributor::ops::http::bind_default(addr, distributor::ops::http::DEFAULT_PORTS)
                .await
                .with_context(|| format!("failed to listen on {addr} (-http-addr)"))?
        }
        // An address given explicitly must be free.
        Some(addr) => {
            let listener = tokio::net::TcpListener::bind(addr).await.with_context(|| {
                format!(
                    "failed to listen on {addr} ({})",
                    config.http_addr_origin.flag()
                )
            })?;
            tracing::info!("serving /metrics on {addr}");
            Some(listener)
        }
        None => None,
    };
    let redis_fresh = config.census_interval * 2 + config.lease.ttl;
    let replica =
        distributor::Distributor::start(config).context("failed to start the distributor")?;
    let stop_http = tokio_util::sync::CancellationToken::new();
    let http = listener.map(|listener| {
        let (status, metrics, stop) = (replica.status(), replica.metrics(), stop_http.clone());
        tokio::spawn(distributor::ops::http::serve(
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

/// Runs one operator command against Redis and prints its result.
fn admin(config: distributor::Config, command: Command) -> anyhow::Result<()> {
    use distributor::core::inputs::check_member_addr;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("failed to start the async runtime")?;
    runtime.block_on(async {
        let table = &config.distribution_namespace;
        let store = distributor::edge::redis::Store::connect(
            &config.redis_options(),
            table,
            Duration::from_secs(3),
        )
        .context("failed to open the redis connection")?;
        let units_key = &config.workunits_namespace;
        let text = |raw: Vec<Vec<u8>>| {
            raw.into_iter()
                .map(|r| String::from_utf8_lossy(&r).into_owned())
        };
        match command {
            Command::Status { json } => {
                let o = store
                    .read_overview(&config.services_namespaces, units_key)
                    .await
                    .context("failed to read the status")?;
                let report = distributor::cli::report::status(&o, table, distributor::unix_ms());
                if json {
                    println!("{}", serde_json::to_string_pretty(&report)?);
                } else {
                    print!("{}", distributor::cli::report::render_status(&report));
                }
            }
            Command::Table { json } => {
                let o = store
                    .read_overview(&[], units_key)
                    .await
                    .context("failed to read the table")?;
                let report = distributor::cli::report::table(&o, table);
                if json {
                    println!("{}", serde_json::to_string_pretty(&report)?);
                } else {
                    print!("{}", distributor::cli::report::render_table(&report));
                }
            }
            Command::Services {
                op: ServicesOp::List { group },
            } => {
                let groups = group
                    .map(|g| vec![g])
                    .unwrap_or(config.services_namespaces.clone());
                for g in groups {
                    let members = store
                        .list(&g)
                        .await
                        .with_context(|| format!("failed to read {g:?}"))?;
                    for m in text(members) {
                        println!("{g}\t{m}");
                    }
                }
            }
            Command::Services {
                op: ServicesOp::Add { group, addr },
            } => {
                check_member_addr(addr.as_bytes())
                    .map_err(|why| anyhow::anyhow!("invalid member address {addr:?}: {why}"))?;
                let added = store
                    .add_once(&group, &addr)
                    .await
                    .with_context(|| format!("failed to add to {group:?}"))?;
                println!("{}", if added { "added" } else { "already listed" });
            }
            Command::Services {
                op: ServicesOp::Remove { group, addr },
            } => {
                let n = store
                    .remove_all(&group, &addr)
                    .await
                    .with_context(|| format!("failed to remove from {group:?}"))?;
                println!("removed {n}");
            }
            Command::Workunits { op: UnitsOp::List } => {
                let units = store
                    .list(units_key)
                    .await
                    .with_context(|| format!("failed to read {units_key:?}"))?;
                for u in text(units) {
                    println!("{u}");
                }
            }
            Command::Workunits {
                op: UnitsOp::Add { units },
            } => {
                check_units(&units)?;
                let mut added = 0;
                for u in &units {
                    added += usize::from(
                        store
                            .add_once(units_key, u)
                            .await
                            .with_context(|| update(units_key))?,
                    );
                }
                println!("added {added}");
            }
            Command::Workunits {
                op: UnitsOp::Remove { units },
            } => {
                let mut removed = 0;
                for u in &units {
                    removed += store
                        .remove_all(units_key, u)
                        .await
                        .with_context(|| update(units_key))?;
                }
                println!("removed {removed}");
            }
            Command::Workunits {
                op: UnitsOp::Set { units },
            } => {
                check_units(&units)?;
                store
                    .replace_list(units_key, &units)
                    .await
                    .with_context(|| update(units_key))?;
                println!("set {} units", units.len());
            }
        }
        Ok(())
    })
}

/// The daemon's own rule for units, so the CLI never writes one it would skip.
fn check_units(units: &[String]) -> anyhow::Result<()> {
    for u in units {
        distributor::core::inputs::check_unit(u.as_bytes())
            .map_err(|why| anyhow::anyhow!("invalid work unit {u:?}: {why}"))?;
    }
    Ok(())
}

fn update(key: &str) -> String {
    format!("failed to update {key:?}")
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
