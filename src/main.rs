//! The `distributor` daemon: flags and signals live here, the work in the library.

use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context as _;
use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
use distributor::config::{self, RawConfig};

/// Splits a changing list of work units among live workers; a drop-in
/// replacement for scientificideas/distributor. Every flag also reads an
/// environment variable (see README); Go-style `-flag=value` works too.
#[derive(Parser, Debug)]
#[command(name = "distributor", version)]
struct Cli {
    #[command(flatten)]
    flags: Flags,
    #[command(subcommand)]
    command: Option<Command>,
}

/// Operator commands; without one, `distributor` runs the daemon.
#[derive(Subcommand, Debug)]
enum Command {
    /// Lease holder, epoch, generation, census and per-group members.
    Status {
        #[arg(long)]
        json: bool,
    },
    /// One row per member: units and share, with balance and totals.
    Table {
        #[arg(long)]
        json: bool,
    },
    /// Inspect or edit a services list (a group).
    Services {
        #[command(subcommand)]
        op: ServicesOp,
    },
    /// Inspect or edit the work units list.
    Workunits {
        #[command(subcommand)]
        op: UnitsOp,
    },
}

#[derive(Subcommand, Debug)]
enum ServicesOp {
    /// Members of one group, or of every configured group.
    List { group: Option<String> },
    /// Add a member address to a group (once).
    Add { group: String, addr: String },
    /// Remove a member address from a group.
    Remove { group: String, addr: String },
}

#[derive(Subcommand, Debug)]
enum UnitsOp {
    List,
    /// Add units that are not listed yet.
    Add {
        #[arg(required = true)]
        units: Vec<String>,
    },
    /// Remove units.
    Remove {
        #[arg(required = true)]
        units: Vec<String>,
    },
    /// Replace the whole list, atomically.
    Set {
        units: Vec<String>,
    },
}

/// Daemon settings; every one also reads an environment variable (README).
#[derive(clap::Args, Debug)]
struct Flags {
    #[arg(long, global = true, value_name = "KEYS")]
    services_namespaces: Option<String>,
    #[arg(long, global = true, value_name = "KEY")]
    workunits_namespace: Option<String>,
    #[arg(long, global = true, value_name = "KEY")]
    distribution_namespace: Option<String>,
    #[arg(long, global = true, value_name = "DURATION")]
    poll_interval: Option<String>,
    #[arg(long, global = true, value_name = "DURATION")]
    ping_timeout: Option<String>,
    #[arg(long, global = true, value_name = "URL")]
    redis_url: Option<String>,
    #[arg(long, global = true, value_name = "HOST:PORT")]
    redis_addrs: Option<String>,
    #[arg(long, global = true, value_name = "PASSWORD")]
    redis_pass: Option<String>,
    #[arg(long, global = true, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true")]
    redis_cluster: Option<String>,
    #[arg(long, global = true, value_name = "FILE")]
    redis_password_file: Option<String>,
    #[arg(long, global = true, value_name = "USER")]
    redis_user: Option<String>,
    #[arg(long, global = true, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true")]
    redis_tls: Option<String>,
    #[arg(long, global = true, value_name = "FILES")]
    redis_tls_ca: Option<String>,
    #[arg(long, global = true, value_name = "FILES")]
    redis_rootca_certs: Option<String>,
    #[arg(long, global = true, value_name = "FILE")]
    redis_tls_cert: Option<String>,
    #[arg(long, global = true, value_name = "FILE")]
    redis_tls_key: Option<String>,
    #[arg(long, global = true, value_name = "FILE")]
    ping_tls_ca: Option<String>,
    #[arg(long, global = true, value_name = "FILE")]
    ping_tls_cert: Option<String>,
    #[arg(long, global = true, value_name = "FILE")]
    ping_tls_key: Option<String>,
    #[arg(long, global = true, value_name = "NAME")]
    ping_tls_domain: Option<String>,
    #[arg(long, global = true, value_name = "N")]
    failure_threshold: Option<String>,
    #[arg(long, global = true, value_name = "DURATION")]
    forget_after: Option<String>,
    #[arg(long, global = true, value_name = "DURATION")]
    lease_ttl: Option<String>,
    #[arg(long, global = true, value_name = "DURATION")]
    lease_renew_interval: Option<String>,
    #[arg(long, global = true, value_name = "DURATION")]
    lease_renew_deadline: Option<String>,
    #[arg(long, global = true, value_name = "DURATION")]
    lease_retry_interval: Option<String>,
    #[arg(long, global = true, value_name = "DURATION")]
    census_interval: Option<String>,
    #[arg(long, global = true, value_name = "NAME")]
    replica_id: Option<String>,
    #[arg(long, global = true, value_name = "DURATION")]
    ka_time: Option<String>,
    #[arg(long, global = true, value_name = "DURATION")]
    ka_timeout: Option<String>,
    #[arg(long, global = true, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true")]
    ka_permit_without_stream: Option<String>,
    #[arg(long, global = true, value_name = "LEVEL")]
    log: Option<String>,
    #[arg(long, global = true, value_name = "IP:PORT|off")]
    http_addr: Option<String>,
    #[arg(long, global = true, value_name = "PORT")]
    prom_port: Option<String>,
    #[arg(long, global = true, value_name = "text|json")]
    log_format: Option<String>,
    #[arg(long, global = true, value_name = "otlp|none")]
    traces: Option<String>,
    #[arg(long, global = true, value_name = "N")]
    max_list_entries: Option<String>,
    #[arg(long, global = true, value_name = "SIZE")]
    max_list_bytes: Option<String>,
    #[arg(long, global = true, value_name = "PERCENT")]
    mass_failure_percent: Option<String>,
    #[arg(long, global = true, value_name = "DURATION")]
    mass_failure_confirm: Option<String>,
    #[arg(long, global = true, value_name = "N")]
    redis_wait_replicas: Option<String>,
    #[arg(long, global = true, value_name = "DURATION")]
    redis_wait_timeout: Option<String>,
    #[arg(long, global = true, value_name = "args|env")]
    config_type: Option<String>,
}

impl From<Flags> for RawConfig {
    fn from(c: Flags) -> RawConfig {
        RawConfig {
            services_namespaces: c.services_namespaces,
            workunits_namespace: c.workunits_namespace,
            distribution_namespace: c.distribution_namespace,
            poll_interval: c.poll_interval,
            ping_timeout: c.ping_timeout,
            redis_url: c.redis_url,
            redis_addrs: c.redis_addrs,
            redis_pass: c.redis_pass,
            redis_cluster: c.redis_cluster,
            redis_password_file: c.redis_password_file,
            redis_user: c.redis_user,
            redis_tls: c.redis_tls,
            redis_tls_ca: c.redis_tls_ca,
            redis_rootca_certs: c.redis_rootca_certs,
            redis_tls_cert: c.redis_tls_cert,
            redis_tls_key: c.redis_tls_key,
            ping_tls_ca: c.ping_tls_ca,
            ping_tls_cert: c.ping_tls_cert,
            ping_tls_key: c.ping_tls_key,
            ping_tls_domain: c.ping_tls_domain,
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
            traces: c.traces,
            max_list_entries: c.max_list_entries,
            max_list_bytes: c.max_list_bytes,
            mass_failure_percent: c.mass_failure_percent,
            mass_failure_confirm: c.mass_failure_confirm,
            redis_wait_replicas: c.redis_wait_replicas,
            redis_wait_timeout: c.redis_wait_timeout,
            config_type: c.config_type,
        }
    }
}

/// Parses the command line, with each flag's help, environment variables and
/// default taken from the one settings table that the README documents.
fn parse_cli(args: Vec<String>) -> Cli {
    let mut cmd = Cli::command();
    for s in config::SETTINGS {
        let default = s
            .default
            .map(|d| format!(" [default: {d}]"))
            .unwrap_or_default();
        let help = format!("{} [env: {}]{default}", s.help, s.env.join(", "));
        cmd = cmd.mut_arg(s.flag.replace('-', "_"), |a| a.help(help));
    }
    let matches = cmd.get_matches_from(args);
    Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit())
}

fn main() -> ExitCode {
    let args = config::normalize_go_flags(std::env::args());
    let cli = parse_cli(args);
    let config = match config::resolve(&cli.flags.into(), &|k| std::env::var(k).ok()) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("distributor: {e}");
            return ExitCode::from(2);
        }
    };
    if let Some(command) = cli.command {
        // Operator commands log nothing but warnings, and never export spans.
        distributor::telemetry::init("warn", false, None);
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
            distributor::telemetry::tracer_provider(config.traces, &|k| std::env::var(k).ok())
                .context("failed to configure OpenTelemetry export")?;
        let telemetry = distributor::telemetry::init(&config.log, config.log_json, provider);
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

/// Runs one operator command against Redis and prints its result.
fn admin(config: distributor::Config, command: Command) -> anyhow::Result<()> {
    use distributor::inputs::check_member_addr;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("failed to start the async runtime")?;
    runtime.block_on(async {
        let table = &config.distribution_namespace;
        let store = distributor::store::Store::connect(
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
                let report = distributor::admin::status(&o, table, distributor::unix_ms());
                if json {
                    println!("{}", serde_json::to_string_pretty(&report)?);
                } else {
                    print!("{}", distributor::admin::render_status(&report));
                }
            }
            Command::Table { json } => {
                let o = store
                    .read_overview(&[], units_key)
                    .await
                    .context("failed to read the table")?;
                let report = distributor::admin::table(&o, table);
                if json {
                    println!("{}", serde_json::to_string_pretty(&report)?);
                } else {
                    print!("{}", distributor::admin::render_table(&report));
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
        distributor::inputs::check_unit(u.as_bytes())
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
