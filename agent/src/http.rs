//! The HTTP API: mond's endpoints (same paths, JSON shapes and error bodies as Ganeti's mond),
//! plus the signed diagnose report and a health check. Every answer comes from the cache; no
//! request runs a collector.
//!
//! Routing is one `match` on (method, path) in [`route`]; add endpoints there.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::header::{self, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use nodecare_protocol::diagnose::SIGNED_DIAGNOSE_PATH;
use nodecare_protocol::report::{DEFAULT_CATEGORY, KNOWN_CATEGORIES};

use crate::cache::{CachedReport, CachedSigned, ReportCache};

/// mond's body for an unknown path.
pub const NOT_FOUND_BODY: &str = "Resource not found";
/// mond's body for a report that does not resolve.
pub const NO_REPORT_BODY: &str = "Unable to produce a report for the requested resource";

/// What the handlers need.
#[derive(Debug)]
pub struct HttpState {
    /// The report cache.
    pub cache: Arc<ReportCache>,
    /// When the agent started.
    pub started: Instant,
    /// The node name the agent signs for.
    pub node: String,
    /// The repair endpoint (`/1/repair`); `None` when it could not start (no HMAC key).
    pub repair: Option<Arc<crate::repair::RepairService>>,
    /// The diagnose collector (per-script runs for `/metrics`).
    pub diagnose: Arc<nodecare_collectors::diagnose::DiagnoseCollector>,
    /// The signer's counters.
    pub sign_counters: Arc<crate::signing::SignCounters>,
    /// Age after which the published verdict counts as stale.
    pub stale_after: Duration,
    /// What confd says about this node; `None` off a Ganeti cluster.
    pub cluster: Option<nodecare_collectors::confd::ViewHandle>,
}

/// The response type of every handler.
pub type HttpResponse = Response<Full<Bytes>>;

fn response(status: StatusCode, content_type: &'static str, body: Bytes) -> HttpResponse {
    let mut response = Response::new(Full::new(body));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
}

/// A JSON response.
pub fn json(status: StatusCode, body: Bytes) -> HttpResponse {
    response(status, "application/json", body)
}

/// A plain-text response (mond's error bodies).
pub fn text(status: StatusCode, body: &'static str) -> HttpResponse {
    response(
        status,
        "text/plain; charset=utf-8",
        Bytes::from_static(body.as_bytes()),
    )
}

fn cached(report: &CachedReport) -> HttpResponse {
    let mut response = json(StatusCode::OK, report.body.clone());
    add_age(&mut response, report.collected.elapsed());
    response
}

fn add_age(response: &mut HttpResponse, age: Duration) {
    if let Ok(value) = HeaderValue::from_str(&age.as_secs().to_string()) {
        response.headers_mut().insert(header::AGE, value);
    }
}

fn not_found() -> HttpResponse {
    text(StatusCode::NOT_FOUND, NOT_FOUND_BODY)
}

fn no_report() -> HttpResponse {
    text(StatusCode::NOT_FOUND, NO_REPORT_BODY)
}

/// `/1/report/<category>/<name>`.
fn report(cache: &ReportCache, rest: &str) -> HttpResponse {
    // As mond: trailing segments after the name are ignored.
    let mut parts = rest.split('/');
    let (Some(category), Some(name)) = (parts.next(), parts.next()) else {
        return no_report();
    };
    if category != DEFAULT_CATEGORY && !KNOWN_CATEGORIES.contains(&category) {
        return no_report();
    }
    let Some(position) = cache.position(category, name) else {
        return no_report();
    };
    // As mond: a collector the cluster disabled does not resolve.
    if !cache.is_enabled(position) {
        return no_report();
    }
    match cache.snapshot().reports.get(position).cloned().flatten() {
        Some(report) => cached(&report),
        // Not collected yet: the scheduler runs every collector at start, so this is brief.
        None => {
            let mut response = text(StatusCode::SERVICE_UNAVAILABLE, "not collected yet");
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
            response
        }
    }
}

fn signed(cache: &ReportCache) -> HttpResponse {
    match &cache.snapshot().signed {
        CachedSigned::Envelope(report) => cached(report),
        CachedSigned::Unavailable(reason) => {
            let body = serde_json::json!({ "error": reason });
            json(
                StatusCode::SERVICE_UNAVAILABLE,
                Bytes::from(serde_json::to_vec(&body).unwrap_or_default()),
            )
        }
    }
}

fn health(state: &HttpState) -> HttpResponse {
    let snapshot = state.cache.snapshot();
    let mut collectors = serde_json::Map::new();
    for (position, report) in snapshot.reports.iter().enumerate() {
        let name = state.cache.name(position).unwrap_or_default().to_owned();
        let age = report.as_ref().map_or(serde_json::Value::Null, |report| {
            report.collected.elapsed().as_secs().into()
        });
        let enabled = snapshot.enabled.get(position).copied().unwrap_or(false);
        collectors.insert(
            name,
            serde_json::json!({ "age_s": age, "enabled": enabled }),
        );
    }
    let body = serde_json::json!({
        "status": "ok",
        "node": state.node,
        "uptime_s": state.started.elapsed().as_secs(),
        "signed_diagnose": matches!(snapshot.signed, CachedSigned::Envelope(_)),
        "collectors": collectors,
        "confd": state.cluster.as_ref().map(|view| confd_view(&view.current())),
    });
    json(
        StatusCode::OK,
        Bytes::from(serde_json::to_vec(&body).unwrap_or_default()),
    )
}

/// What confd told the agent, as JSON (read-only; for operators and end-to-end tests).
pub fn confd_view(view: &nodecare_collectors::confd::ClusterView) -> serde_json::Value {
    use serde_json::json;
    let instances = |list: &[nodecare_collectors::confd::InstanceInfo]| {
        list.iter()
            .map(|instance| {
                json!({
                    "name": instance.name,
                    "admin_state": instance.admin_state,
                    "hypervisor": instance.hypervisor,
                })
            })
            .collect::<Vec<_>>()
    };
    json!({
        "node": view.node_name,
        "refreshed_age_s": view
            .refreshed_at
            .and_then(|at| at.elapsed().ok())
            .map(|age| age.as_secs()),
        "last_error": view.last_error,
        "data_collectors": view.data_collectors.as_ref().map(|collectors| {
            collectors
                .iter()
                .map(|(name, config)| {
                    (
                        name.clone(),
                        json!({
                            "active": config.active,
                            "interval_ms": u64::try_from(config.interval.as_millis()).unwrap_or(u64::MAX),
                        }),
                    )
                })
                .collect::<serde_json::Map<_, _>>()
        }),
        "instances": view.instances.as_ref().map(|node| json!({
            "primary": instances(&node.primary),
            "secondary": instances(&node.secondary),
        })),
        "drbd_minors": view.drbd_minors.as_ref().map(|minors| {
            minors
                .iter()
                .map(|minor| {
                    json!({
                        "minor": minor.minor,
                        "instance": minor.instance,
                        "disk": minor.iv_name,
                        "role": minor.role,
                        "peer": minor.peer,
                    })
                })
                .collect::<Vec<_>>()
        }),
        "lv_owners": view.lv_owners.as_ref().map(|owners| {
            owners
                .iter()
                .map(|((vg, lv), instance)| json!({"vg": vg, "lv": lv, "instance": instance}))
                .collect::<Vec<_>>()
        }),
    })
}

/// Routes one request. HEAD is answered as GET; hyper leaves out the body.
pub async fn route(
    state: Arc<HttpState>,
    request: Request<Incoming>,
    peer: std::net::SocketAddr,
) -> HttpResponse {
    if crate::repair::http::is_repair_path(request.uri().path()) {
        return match &state.repair {
            Some(repair) => repair.handle_http(request, peer).await,
            None => text(
                StatusCode::SERVICE_UNAVAILABLE,
                "repairs are unavailable on this node (no cluster HMAC key)",
            ),
        };
    }
    let path = request.uri().path();
    let method = request.method();
    let readable = method == Method::GET || method == Method::HEAD;
    match (readable, path) {
        (true, "/") => json(StatusCode::OK, Bytes::from_static(b"[1]")),
        (true, "/1" | "/1/") => json(StatusCode::OK, Bytes::from_static(b"null")),
        (true, "/healthz") => health(&state),
        (true, "/1/debug/confd") => match &state.cluster {
            Some(view) => json(
                StatusCode::OK,
                Bytes::from(serde_json::to_vec(&confd_view(&view.current())).unwrap_or_default()),
            ),
            None => not_found(),
        },
        (true, "/metrics") => response(
            StatusCode::OK,
            crate::metrics::CONTENT_TYPE,
            Bytes::from(crate::metrics::text(crate::metrics::Sources {
                cache: &state.cache,
                stale_after: state.stale_after,
                diagnose: &state.diagnose,
                sign_counters: &state.sign_counters,
                repair: state.repair.as_deref(),
            })),
        ),
        (true, SIGNED_DIAGNOSE_PATH) => signed(&state.cache),
        // mond accepts trailing segments here too.
        (true, path) if path == "/1/report/all" || path.starts_with("/1/report/all/") => {
            cached(&state.cache.snapshot().all)
        }
        (true, "/1/report") => no_report(),
        (true, path) if path == "/1/list/collectors" || path.starts_with("/1/list/collectors/") => {
            json(StatusCode::OK, state.cache.list_body())
        }
        (true, path) if path.starts_with("/1/report/") => {
            report(&state.cache, path.trim_start_matches("/1/report/"))
        }
        (true, _) => not_found(),
        (false, _) => {
            let mut response = text(StatusCode::METHOD_NOT_ALLOWED, "Method not allowed");
            response
                .headers_mut()
                .insert(header::ALLOW, HeaderValue::from_static("GET, HEAD"));
            response
        }
    }
}
