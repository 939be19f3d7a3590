//! The `distributor` binary: parse, set up telemetry, run, map signals; the
//! work lives in the library (`cli::daemon`, `cli::commands`).

use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context as _;
use distributor::cli::{self, CliError, commands, daemon};
use distributor::ops::telemetry;

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
    let Some(command) = invocation.command else {
        return match run_daemon(config) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                tracing::error!("{e:#}");
                ExitCode::FAILURE
            }
        };
    };
    // Operator commands log nothing but warnings, and never export spans.
    telemetry::init("warn", false, None);
    match commands::run(&config, command) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("distributor: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run_daemon(config: distributor::Config) -> anyhow::Result<()> {
    daemon::raise_open_files_limit();
    let runtime = tokio::runtime::Runtime::new().context("failed to start the async runtime")?;
    runtime.block_on(async {
        // The OTLP/gRPC exporter needs the runtime, so telemetry starts here.
        let provider = telemetry::tracer_provider(config.traces, &|k| std::env::var(k).ok())
            .context("failed to configure OpenTelemetry export")?;
        let telemetry = telemetry::init(&config.log, config.log_json, provider);
        let result = daemon::serve(config, shutdown_signal()).await;
        telemetry.shutdown(Duration::from_secs(3)).await;
        result
    })
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
}
