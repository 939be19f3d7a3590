//! Operations: the HTTP endpoints (`/metrics`, `/healthz`, `/readyz`,
//! `/version`), the Prometheus metrics and the telemetry (logs, traces).

pub mod http;
pub mod metrics;
pub mod telemetry;
