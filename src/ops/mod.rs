//! Operations: the HTTP endpoints (`/metrics`, `/healthz`, `/readyz`,
//! `/version`, and with `-http-ui` the status page's JSON API), the
//! Prometheus metrics and the telemetry (logs, traces).

pub mod api;
pub mod exposition;
pub mod http;
pub mod metrics;
pub mod telemetry;
