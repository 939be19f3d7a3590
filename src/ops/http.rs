//! The operations HTTP server: `/metrics`, `/healthz`, `/readyz`, `/version`.
//!
//! - `/metrics`: OpenMetrics to a scraper that asks for it, the Prometheus
//!   text format 0.0.4 otherwise (`ops::exposition`; the Go implementation
//!   served `/metrics` on `-prom-port` too);
//! - `/healthz`: 200 while the replica's coordinator runs its loop; 503 once
//!   it stopped (a panic) or stalled, so that an orchestrator restarts it;
//! - `/readyz`: 200 when Redis answered recently, the census knows this
//!   replica's place and no foreign lease key blocks every replica, else 503
//!   with the reason;
//! - `/version`: name and version, as JSON;
//! - with `-http-ui` only ([`serve_with`] given an [`Api`]): the status page
//!   at `/` (static HTML, CSS and JS embedded in the binary from
//!   `src/ops/ui/`, no external resources, a `default-src 'self'` content
//!   security policy) and its JSON API `/api/status`,
//!   `/api/members?page=N&per_page=M`, `/api/changes?limit=N` and
//!   `/api/plan?leave=ADDR&join=ADDR[:W]&weight=ADDR=W&cordon=ADDR&group=NAME`
//!   (see `ops::api`; a bad query answers 400 with the error); without it
//!   they answer 404 like any unknown path.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use tokio::net::TcpListener;
use tokio::sync::watch;

use std::time::Instant;

use crate::core::status::{Role, Status};
use crate::edge::clock;
use crate::ops::api::{Api, PlanFailure};
use crate::ops::exposition::{Format, text_from_openmetrics};
use crate::ops::metrics::Metrics;

#[derive(Clone)]
struct Ops {
    status: watch::Receiver<Status>,
    metrics: Arc<Metrics>,
    /// Redis counts as reachable if it answered within this window.
    redis_fresh: Duration,
}

/// Why a replica is not ready, or `None` when it is.
pub fn not_ready(status: &Status, now: Instant, redis_fresh: Duration) -> Option<String> {
    match status.redis_ok_at {
        None => return Some("redis has not answered yet".into()),
        Some(t) if now.saturating_duration_since(t) > redis_fresh => {
            return Some(format!(
                "redis has not answered for {} ms",
                now.saturating_duration_since(t).as_millis()
            ));
        }
        Some(_) => {}
    }
    if let Some(problem) = &status.lease_problem {
        return Some(format!("no replica can hold the lease: {problem}"));
    }
    if let (Role::Holder, Some(why)) = (status.role, &status.holding_blocked) {
        return Some(format!("the holder does not act: {why}"));
    }
    if status.census.is_none() {
        return Some("census not known yet (takes one to two census intervals)".into());
    }
    None
}

/// How long the coordinator's loop may go without turning before the replica
/// counts as wedged. The loop wakes at least every lease timer (well under a
/// second by default) and each of its awaits is bounded by seconds.
pub const STALL: Duration = crate::core::timing::Timing::DEFAULT.stall;

/// Why a replica is not healthy (its coordinator stopped or stalled), or
/// `None` when it is.
pub fn not_healthy(
    status: &watch::Receiver<Status>,
    now: Instant,
    stall: Duration,
) -> Option<String> {
    // The coordinator owns the sender: a closed channel means it is gone.
    if status.has_changed().is_err() {
        return Some("the coordinator stopped".into());
    }
    let beat = status.borrow().heartbeat;
    match beat {
        Some(t) if now.saturating_duration_since(t) > stall => Some(format!(
            "the coordinator has not run for {} ms",
            now.saturating_duration_since(t).as_millis()
        )),
        _ => None,
    }
}

/// How many ports the built-in default address may try: 9090 to 9099.
pub const DEFAULT_PORTS: u16 = 10;

/// Binds the built-in default address, which must not kill a replica: when
/// its port is taken (several replicas on one host), the next ones are tried,
/// `ports` in all, and the one used is logged; when all are taken, one
/// warning is logged and the replica runs without the server (`None`). An
/// error other than "address in use" is returned. An address given
/// explicitly must be free: bind it directly and fail.
pub async fn bind_default(addr: SocketAddr, ports: u16) -> std::io::Result<Option<TcpListener>> {
    let first = addr.port();
    let mut last = first;
    for i in 0..ports {
        let Some(port) = first.checked_add(i) else {
            break;
        };
        last = port;
        let candidate = SocketAddr::new(addr.ip(), port);
        match TcpListener::bind(candidate).await {
            Ok(listener) => {
                if i == 0 {
                    tracing::info!("serving /metrics on {candidate}");
                } else {
                    tracing::warn!(
                        "serving /metrics on {candidate} instead of the default {first}, which is taken"
                    );
                }
                return Ok(Some(listener));
            }
            Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => continue,
            Err(e) => return Err(e),
        }
    }
    tracing::warn!(
        "ports {first} to {last} of {} are all taken: running without /metrics, /healthz, /readyz and /version (set -http-addr to choose an address)",
        addr.ip()
    );
    Ok(None)
}

/// Serves until `shutdown` resolves, without the status page's API.
pub async fn serve(
    listener: TcpListener,
    status: watch::Receiver<Status>,
    metrics: Arc<Metrics>,
    redis_fresh: Duration,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    serve_with(listener, status, metrics, redis_fresh, None, shutdown).await
}

/// Serves until `shutdown` resolves; with `ui`, the JSON API too.
pub async fn serve_with(
    listener: TcpListener,
    status: watch::Receiver<Status>,
    metrics: Arc<Metrics>,
    redis_fresh: Duration,
    ui: Option<Api>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let mut app = Router::new()
        .route("/metrics", get(metrics_page))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/version", get(version))
        .with_state(Ops {
            status,
            metrics,
            redis_fresh,
        });
    if let Some(api) = ui {
        app = app.merge(
            Router::new()
                .route("/api/status", get(api_status))
                .route("/api/members", get(api_members))
                .route("/api/changes", get(api_changes))
                .route("/api/plan", get(api_plan))
                .route("/", get(|| page(UI_HTML, "text/html; charset=utf-8")))
                .route(
                    "/ui/app.js",
                    get(|| page(UI_JS, "text/javascript; charset=utf-8")),
                )
                .route(
                    "/ui/style.css",
                    get(|| page(UI_CSS, "text/css; charset=utf-8")),
                )
                .with_state(api),
        );
    }
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown)
        .await
}

/// OpenMetrics to a scraper that asks for it (Prometheus does), the 0.0.4
/// text to any other (`curl`, `promtool check metrics`).
async fn metrics_page(State(ops): State<Ops>, headers: HeaderMap) -> impl IntoResponse {
    let accept = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok());
    let format = Format::negotiate(accept);
    let openmetrics = ops.metrics.encode();
    let body = match format {
        Format::OpenMetrics => openmetrics,
        Format::Text => text_from_openmetrics(&openmetrics),
    };
    (
        [
            (header::CONTENT_TYPE, format.content_type()),
            (header::VARY, "Accept"),
        ],
        body,
    )
}

async fn healthz(State(ops): State<Ops>) -> impl IntoResponse {
    match not_healthy(&ops.status, clock::now(), STALL) {
        None => (StatusCode::OK, "ok\n".to_string()),
        Some(why) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("unhealthy: {why}\n"),
        ),
    }
}

async fn readyz(State(ops): State<Ops>) -> impl IntoResponse {
    let status = ops.status.borrow().clone();
    match not_ready(&status, clock::now(), ops.redis_fresh) {
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

const UI_HTML: &str = include_str!("ui/index.html");
const UI_JS: &str = include_str!("ui/app.js");
const UI_CSS: &str = include_str!("ui/style.css");

/// One of the status page's embedded files. Nothing but this server's own
/// files and API may load or run in it.
async fn page(body: &'static str, content_type: &'static str) -> impl IntoResponse {
    (
        [
            (header::CONTENT_TYPE, content_type),
            (
                header::CONTENT_SECURITY_POLICY,
                "default-src 'self'; frame-ancestors 'none'",
            ),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        body,
    )
}

fn json(value: &impl serde::Serialize) -> axum::response::Response {
    match serde_json::to_string(value) {
        Ok(body) => ([(header::CONTENT_TYPE, "application/json")], body).into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, format!("{e}\n")).into_response(),
    }
}

async fn api_status(State(api): State<Api>) -> axum::response::Response {
    json(&api.status())
}

/// `page` and `per_page` from a query string; absent or unreadable: 0 (the default).
fn page_query(query: Option<&str>) -> (usize, usize) {
    let (mut page, mut per_page) = (0, 0);
    for pair in query.unwrap_or("").split('&') {
        match pair.split_once('=') {
            Some(("page", v)) => page = v.parse().unwrap_or(0),
            Some(("per_page", v)) => per_page = v.parse().unwrap_or(0),
            _ => {}
        }
    }
    (page, per_page)
}

async fn api_members(State(api): State<Api>, uri: axum::http::Uri) -> axum::response::Response {
    let (page, per_page) = page_query(uri.query());
    json(&api.members(page, per_page))
}

/// `limit` from a query string; absent or unreadable: 0 (all that are kept).
fn limit_query(query: Option<&str>) -> usize {
    query
        .unwrap_or("")
        .split('&')
        .find_map(|pair| match pair.split_once('=') {
            Some(("limit", v)) => Some(v.parse().unwrap_or(0)),
            _ => None,
        })
        .unwrap_or(0)
}

async fn api_changes(State(api): State<Api>, uri: axum::http::Uri) -> axum::response::Response {
    json(&api.changes(limit_query(uri.query())))
}

/// One query component, percent-decoded (`+` is a space); `None` when an
/// escape is malformed or the result is not UTF-8.
fn percent_decoded(s: &str) -> Option<String> {
    let mut out = Vec::with_capacity(s.len());
    let mut bytes = s.bytes();
    while let Some(b) = bytes.next() {
        match b {
            b'+' => out.push(b' '),
            b'%' => {
                let hex = [bytes.next()?, bytes.next()?];
                let hex = std::str::from_utf8(&hex).ok()?;
                out.push(u8::from_str_radix(hex, 16).ok()?);
            }
            b => out.push(b),
        }
    }
    String::from_utf8(out).ok()
}

/// `/api/plan`'s query: `leave`, `join`, `weight` and `cordon` (each may
/// repeat) and `group`, as `distributor plan` takes them; anything else is
/// refused, with the reason.
fn plan_query(query: Option<&str>) -> Result<crate::report::plan::PlanRequest, String> {
    let mut r = crate::report::plan::PlanRequest::default();
    for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        let (Some(k), Some(v)) = (percent_decoded(k), percent_decoded(v)) else {
            return Err(format!(
                "invalid query parameter {}: a malformed %-escape, or not UTF-8",
                crate::core::inputs::excerpt(pair.as_bytes())
            ));
        };
        match k.as_str() {
            "leave" => r.leave.push(v),
            "join" => r.join.push(v),
            "weight" => r.weight.push(v),
            "cordon" => r.cordon.push(v),
            "group" if r.group.is_none() => r.group = Some(v),
            "group" => return Err("group given twice".into()),
            _ => {
                return Err(format!(
                    "unknown query parameter {} (expected leave, join, weight, cordon or group)",
                    crate::core::inputs::excerpt(k.as_bytes())
                ));
            }
        }
    }
    Ok(r)
}

/// `{"error": why}` with `code`.
fn error_json(code: StatusCode, why: String) -> axum::response::Response {
    let mut r = json(&serde_json::json!({ "error": why }));
    *r.status_mut() = code;
    r
}

async fn api_plan(State(api): State<Api>, uri: axum::http::Uri) -> axum::response::Response {
    let request = match plan_query(uri.query()) {
        Ok(r) => r,
        Err(why) => return error_json(StatusCode::BAD_REQUEST, why),
    };
    match api.plan(request).await {
        Ok(report) => json(&report),
        Err(PlanFailure::Off) => StatusCode::NOT_FOUND.into_response(),
        Err(PlanFailure::Refused(e)) => error_json(StatusCode::BAD_REQUEST, e.to_string()),
        Err(PlanFailure::Unavailable(why)) => error_json(StatusCode::SERVICE_UNAVAILABLE, why),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::census::CensusView;

    #[test]
    fn readiness_needs_fresh_redis_a_census_and_a_usable_lease() {
        let fresh = Duration::from_secs(3);
        let t0 = clock::now();
        let mut s = Status::default();
        assert!(
            not_ready(&s, t0, fresh)
                .unwrap()
                .contains("not answered yet")
        );
        s.redis_ok_at = Some(t0);
        let now = t0 + Duration::from_secs(1);
        assert!(not_ready(&s, now, fresh).unwrap().contains("census"));
        s.census = Some(CensusView {
            index: 0,
            replicas: 1,
            interval: 1,
        });
        assert_eq!(not_ready(&s, now, fresh), None);
        assert!(
            not_ready(&s, t0 + Duration::from_millis(4001), fresh)
                .unwrap()
                .contains("4001 ms")
        );
        s.lease_problem = Some("the lease key has no TTL".into());
        assert!(not_ready(&s, now, fresh).unwrap().contains("no TTL"));
        s.lease_problem = None;
        s.holding_blocked = Some("cannot read {T}:transit".into());
        assert_eq!(
            not_ready(&s, now, fresh),
            None,
            "a standby keeps no holding"
        );
        s.role = Role::Holder;
        assert!(not_ready(&s, now, fresh).unwrap().contains("{T}:transit"));
    }

    #[test]
    fn health_follows_the_coordinator() {
        let t0 = clock::now();
        let (tx, rx) = watch::channel(Status::default());
        assert_eq!(not_healthy(&rx, t0, STALL), None, "starting");
        tx.send_if_modified(|s| {
            s.heartbeat = Some(t0);
            false
        });
        assert_eq!(not_healthy(&rx, t0 + Duration::from_secs(1), STALL), None);
        assert!(
            not_healthy(&rx, t0 + STALL + Duration::from_secs(1), STALL)
                .unwrap()
                .contains("has not run")
        );
        drop(tx);
        assert!(not_healthy(&rx, t0, STALL).unwrap().contains("stopped"));
    }

    #[test]
    fn pages_come_from_the_query() {
        assert_eq!(page_query(None), (0, 0));
        assert_eq!(page_query(Some("page=3&per_page=50")), (3, 50));
        assert_eq!(page_query(Some("per_page=x&page=2&other=1")), (2, 0));
        assert_eq!(limit_query(None), 0);
        assert_eq!(limit_query(Some("limit=20")), 20);
        assert_eq!(limit_query(Some("other=1&limit=x")), 0);
    }

    #[test]
    fn a_plan_comes_from_the_query_or_a_clear_refusal() {
        let r = plan_query(Some(
            "leave=10.0.0.1%3A7001&join=%5B%3A%3A1%5D:7001:2&weight=h:1%3D3&weight=g:2=4&cordon=c:1&group=a+b",
        ))
        .unwrap();
        assert_eq!(r.leave, ["10.0.0.1:7001"]);
        assert_eq!(r.join, ["[::1]:7001:2"]);
        assert_eq!(r.weight, ["h:1=3", "g:2=4"]);
        assert_eq!(r.cordon, ["c:1"]);
        assert_eq!(r.group.as_deref(), Some("a b"));
        assert_eq!(plan_query(None).unwrap(), Default::default());
        assert_eq!(plan_query(Some("&")).unwrap(), Default::default());
        for (q, says) in [
            ("leave=%zz", "malformed"),
            ("leave=%e2%82", "not UTF-8"),
            ("leave=a%", "malformed"),
            ("drain=a:1", "unknown query parameter \"drain\""),
            ("group=a&group=b", "twice"),
        ] {
            let e = plan_query(Some(q)).unwrap_err();
            assert!(e.contains(says), "{q}: {e}");
        }
    }

    #[tokio::test]
    async fn the_default_address_moves_to_a_free_port_or_gives_up() {
        let taken = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = taken.local_addr().unwrap();
        // Only the taken port to try: no server, no error.
        assert!(bind_default(addr, 1).await.unwrap().is_none());
        // The next port, unless something else holds it too.
        if let Some(next) = bind_default(addr, 2).await.unwrap() {
            assert_eq!(next.local_addr().unwrap().port(), addr.port() + 1);
        }
        // A free default port is used as it is.
        let free = taken.local_addr().unwrap();
        drop(taken);
        if let Some(l) = bind_default(free, 1).await.unwrap() {
            assert_eq!(l.local_addr().unwrap(), free);
        }
        // Other errors are not hidden.
        let elsewhere: SocketAddr = "192.0.2.1:9090".parse().unwrap();
        assert!(bind_default(elsewhere, 2).await.is_err());
    }
}
