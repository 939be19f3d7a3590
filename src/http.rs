//! The operations HTTP server: `/metrics`, `/healthz`, `/readyz`, `/version`.
//!
//! - `/metrics`: Prometheus text format (the Go implementation served `/metrics`
//!   on `-prom-port` too);
//! - `/healthz`: 200 while the process runs its event loop;
//! - `/readyz`: 200 when Redis answered recently and the census knows this
//!   replica's place, else 503 with the reason;
//! - `/version`: name and version, as JSON.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::coordinator::Status;
use crate::metrics::Metrics;
use crate::unix_ms;

#[derive(Clone)]
struct Ops {
    status: watch::Receiver<Status>,
    metrics: Arc<Metrics>,
    /// Redis counts as reachable if it answered within this window.
    redis_fresh: Duration,
}

/// Why a replica is not ready, or `None` when it is.
pub fn not_ready(status: &Status, now_ms: u64, redis_fresh: Duration) -> Option<String> {
    match status.redis_ok_ms {
        None => return Some("redis has not answered yet".into()),
        Some(t) if now_ms.saturating_sub(t) > redis_fresh.as_millis() as u64 => {
            return Some(format!(
                "redis has not answered for {} ms",
                now_ms.saturating_sub(t)
            ));
        }
        Some(_) => {}
    }
    if status.census.is_none() {
        return Some("census not known yet (takes one to two census intervals)".into());
    }
    None
}

/// Serves until `shutdown` resolves.
pub async fn serve(
    listener: TcpListener,
    status: watch::Receiver<Status>,
    metrics: Arc<Metrics>,
    redis_fresh: Duration,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let app = Router::new()
        .route("/metrics", get(metrics_page))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .route("/version", get(version))
        .with_state(Ops {
            status,
            metrics,
            redis_fresh,
        });
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown)
        .await
}

async fn metrics_page(State(ops): State<Ops>) -> impl IntoResponse {
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        ops.metrics.encode(),
    )
}

async fn readyz(State(ops): State<Ops>) -> impl IntoResponse {
    let status = ops.status.borrow().clone();
    match not_ready(&status, unix_ms(), ops.redis_fresh) {
        None => (StatusCode::OK, "ready\n".to_string()),
        Some(why) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not ready: {why}\n"),
        ),
    }
}

async fn version() -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "application/json")],
        format!(
            "{{\"name\":\"distributor\",\"version\":\"{}\"}}\n",
            env!("CARGO_PKG_VERSION")
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::census::CensusView;

    #[test]
    fn readiness_needs_fresh_redis_and_a_census() {
        let fresh = Duration::from_secs(3);
        let mut s = Status::default();
        assert!(
            not_ready(&s, 10_000, fresh)
                .unwrap()
                .contains("not answered yet")
        );
        s.redis_ok_ms = Some(9_000);
        assert!(not_ready(&s, 10_000, fresh).unwrap().contains("census"));
        s.census = Some(CensusView {
            index: 0,
            replicas: 1,
            interval: 1,
        });
        assert_eq!(not_ready(&s, 10_000, fresh), None);
        assert!(not_ready(&s, 13_001, fresh).unwrap().contains("4001 ms"));
    }
}
