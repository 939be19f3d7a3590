//! Logs and traces: the `tracing` subscriber, and OpenTelemetry export over
//! OTLP/gRPC when the standard environment asks for it.
//!
//! Configuration is the standard OpenTelemetry environment:
//! `OTEL_EXPORTER_OTLP_ENDPOINT` (or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`),
//! `OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES`, `OTEL_TRACES_SAMPLER`
//! (+ `_ARG`). With no endpoint set nothing is exported and nothing complains;
//! `-traces=none` (`OTEL_TRACES_EXPORTER=none`) turns export off explicitly.
//!
//! Trace context crosses the ping RPC as W3C `traceparent` metadata
//! ([`inject`] on the distributor, [`extract`] in the member; both live in
//! `edge::grpc::trace`, which the member library builds without this module),
//! so a worker's ping handling appears under the distributor's cycle.

use std::io::IsTerminal;
use std::time::Duration;

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing_subscriber::EnvFilter;
use tracing_subscriber::Layer as _;
use tracing_subscriber::filter::{LevelFilter, Targets};
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;

pub use crate::edge::grpc::trace::{extract, inject};

/// Installed telemetry; call [`Telemetry::shutdown`] to flush spans on exit.
pub struct Telemetry {
    provider: Option<SdkTracerProvider>,
}

/// The OTLP endpoint the environment names, if any (the traces-specific
/// variable wins, as the OpenTelemetry specification says).
pub fn endpoint(env: &dyn Fn(&str) -> Option<String>) -> Option<String> {
    [
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
        "OTEL_EXPORTER_OTLP_ENDPOINT",
    ]
    .iter()
    .find_map(|k| {
        env(k)
            .map(|v| v.trim().to_string())
            .filter(|v| !v.is_empty())
    })
}

/// Builds the tracer provider, or `None` when export is off or no endpoint is
/// configured. Must run inside a Tokio runtime (the gRPC exporter needs one).
pub fn tracer_provider(
    export: bool,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Option<SdkTracerProvider>, opentelemetry_otlp::ExporterBuildError> {
    use opentelemetry_otlp::WithExportConfig as _;
    let Some(endpoint) = endpoint(env).filter(|_| export) else {
        return Ok(None);
    };
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_tonic()
        .with_endpoint(endpoint)
        .build()?;
    let mut resource = opentelemetry_sdk::Resource::builder().build();
    let unnamed = resource
        .get(&opentelemetry::Key::from_static_str("service.name"))
        .is_none_or(|v| v.as_str().starts_with("unknown_service"));
    if unnamed {
        resource = opentelemetry_sdk::Resource::builder()
            .with_service_name("distributor")
            .build();
    }
    Ok(Some(
        SdkTracerProvider::builder()
            .with_batch_exporter(exporter)
            .with_resource(resource)
            .build(),
    ))
}

/// Installs the global subscriber: human or JSON logs filtered by `RUST_LOG`
/// (else `default_level`), plus span export when `provider` is set. Spans of
/// this crate are exported at INFO whatever the log filter says.
pub fn init(default_level: &str, json: bool, provider: Option<SdkTracerProvider>) -> Telemetry {
    opentelemetry::global::set_text_map_propagator(TraceContextPropagator::new());
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default_level));
    let fmt = if json {
        tracing_subscriber::fmt::layer()
            .json()
            .with_filter(filter)
            .boxed()
    } else {
        // Colour only on a terminal (and not with NO_COLOR): a log file or a
        // collector gets plain text.
        let ansi = std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none();
        tracing_subscriber::fmt::layer()
            .with_ansi(ansi)
            .with_filter(filter)
            .boxed()
    };
    let otel = provider.as_ref().map(|p| {
        let targets = Targets::new().with_target("distributor", LevelFilter::INFO);
        tracing_opentelemetry::layer()
            .with_tracer(p.tracer("distributor"))
            .with_filter(targets)
    });
    tracing_subscriber::registry().with(fmt).with(otel).init();
    Telemetry { provider }
}

impl Telemetry {
    /// Flushes pending spans, giving up after `deadline` so that a collector
    /// that is down never holds the process.
    pub async fn shutdown(self, deadline: Duration) {
        let Some(provider) = self.provider else {
            return;
        };
        let flush = tokio::task::spawn_blocking(move || provider.shutdown());
        match tokio::time::timeout(deadline, flush).await {
            Ok(Ok(Ok(()))) => {}
            Ok(Ok(Err(e))) => tracing::warn!(error = %e, "span export did not flush"),
            Ok(Err(e)) => tracing::warn!(error = %e, "span export flush failed"),
            Err(_) => tracing::warn!(
                ?deadline,
                "span export flush timed out; dropping pending spans"
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn export_needs_an_endpoint() {
        assert_eq!(endpoint(&|_| None), None);
        assert_eq!(endpoint(&|_| Some(" ".into())), None);
        let both = |k: &str| match k {
            "OTEL_EXPORTER_OTLP_ENDPOINT" => Some("http://general:4317".to_string()),
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT" => Some("http://traces:4317".to_string()),
            _ => None,
        };
        assert_eq!(endpoint(&both).as_deref(), Some("http://traces:4317"));
    }
}
