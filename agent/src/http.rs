//! The HTTP API: mond's endpoints (same paths, JSON shapes and error bodies as Ganeti's mond),
//! plus the signed diagnose and storage reports and a health check. Every answer comes from the cache; no
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
use nodecare_protocol::load::SIGNED_LOAD_PATH;
use nodecare_protocol::report::{DEFAULT_CATEGORY, KNOWN_CATEGORIES};
use nodecare_protocol::storage::SIGNED_DRBD_PATH;

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
    /// The check endpoint (`/1/check`); `None` without an HMAC key.
    pub check: Option<Arc<crate::check::CheckService>>,
    /// The replica endpoints (`/1/replica`, `/1/replica/read`); `None` without an HMAC key.
    pub replica: Option<Arc<crate::replica::ReplicaKeeper>>,
    /// The diagnose collector (per-script runs for `/metrics`).
    pub diagnose: Arc<nodecare_collectors::diagnose::DiagnoseCollector>,
    /// The signer's counters.
    pub sign_counters: Arc<crate::signing::SignCounters>,
    /// Age after which the published verdict counts as stale.
    pub stale_after: Duration,
    /// What confd says about this node; `None` off a Ganeti cluster.
    pub cluster: Option<nodecare_collectors::confd::ViewHandle>,
    /// Long-poll waiters by peer address (at most [`crate::limits::MAX_WAITERS_PER_PEER`] each,
    /// [`crate::limits::RESERVED_WAITERS`] kept for the cluster's own callers).
    pub waiters: Arc<crate::limits::Slots>,
    /// The cluster's own callers (the coordinator, the master candidates), by address.
    pub peers: Arc<crate::peers::ReservedPeers>,
    /// Refused requests, counted.
    pub refusals: Arc<crate::refusals::Refusals>,
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
    // Keeps a collector run on demand running (or wakes it); the cached report answers now.
    cache.note_read(position);
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

/// The longest a request may wait for a new signed report; a longer `wait` is shortened to it.
pub const MAX_WAIT: Duration = Duration::from_secs(60);

/// Header of a `304` long-poll answer: the sequence of the envelope served now (0: none).
pub const SEQUENCE_HEADER: &str = "x-nodecare-sequence";

/// A long-poll of the signed report: `?after=<sequence>[&wait=<seconds>]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SignedWatch {
    /// Answer with a report whose sequence is above this one.
    pub after: u64,
    /// How long to wait for one (already bounded by [`MAX_WAIT`]).
    pub wait: Duration,
}

/// Parses the query of the signed report. `Ok(None)`: no query, answer at once as always. Pure.
pub fn parse_signed_query(query: Option<&str>) -> Result<Option<SignedWatch>, String> {
    let Some(query) = query.filter(|query| !query.is_empty()) else {
        return Ok(None);
    };
    let mut after = None;
    let mut wait = None;
    for pair in query.split('&') {
        let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
        let slot = match name {
            "after" => &mut after,
            "wait" => &mut wait,
            _ => {
                return Err(format!(
                    "unknown query parameter {name:?} (expected after=<sequence>&wait=<seconds>)"
                ));
            }
        };
        if slot.is_some() {
            return Err(format!("query parameter {name:?} given twice"));
        }
        let number = value.parse::<u64>().map_err(|_| {
            format!("query parameter {name:?} is not an unsigned integer: {value:?}")
        })?;
        *slot = Some(number);
    }
    let Some(after) = after else {
        return Err("query parameter \"wait\" needs \"after\"".into());
    };
    Ok(Some(SignedWatch {
        after,
        wait: Duration::from_secs(wait.unwrap_or(0)).min(MAX_WAIT),
    }))
}

fn error_json(status: StatusCode, error: &str) -> HttpResponse {
    let body = serde_json::json!({ "error": error });
    json(
        status,
        Bytes::from(serde_json::to_vec(&body).unwrap_or_default()),
    )
}

fn signed_now(cache: &ReportCache, after: Option<u64>) -> HttpResponse {
    match &cache.snapshot().signed {
        CachedSigned::Envelope { report, sequence } => match after {
            Some(after) if *sequence <= after => {
                let mut response = Response::new(Full::new(Bytes::new()));
                *response.status_mut() = StatusCode::NOT_MODIFIED;
                if let Ok(value) = HeaderValue::from_str(&sequence.to_string()) {
                    response.headers_mut().insert(SEQUENCE_HEADER, value);
                }
                response
            }
            _ => cached(report),
        },
        CachedSigned::Unavailable(reason) => error_json(StatusCode::SERVICE_UNAVAILABLE, reason),
    }
}

/// The answer to a long-poll beyond the waiters: `503` with `Retry-After`, so that the caller
/// can tell it from "nothing new" (`304`) and back off.
fn waiters_taken(reason: &str) -> HttpResponse {
    let mut response = error_json(StatusCode::SERVICE_UNAVAILABLE, reason);
    response.headers_mut().insert(
        header::RETRY_AFTER,
        HeaderValue::from(crate::limits::WAITERS_RETRY_AFTER_SECS),
    );
    response
}

/// `/1/report/node/diagnose/signed`, with or without a long-poll query, for `peer`.
async fn signed(
    cache: &ReportCache,
    query: Option<&str>,
    waiters: &Arc<crate::limits::Slots>,
    peer: std::net::IpAddr,
    share: crate::limits::Share,
) -> HttpResponse {
    let watch = match parse_signed_query(query) {
        Ok(Some(watch)) => watch,
        Ok(None) => return signed_now(cache, None),
        Err(error) => return error_json(StatusCode::BAD_REQUEST, &error),
    };
    let mut sequence = cache.subscribe_signed();
    let newer = |current: &u64| *current > watch.after;
    if !newer(&sequence.borrow_and_update()) && !watch.wait.is_zero() {
        // Each waiter holds a receiver and a timer, nothing else; their number is bounded, in
        // total and per peer address, so that no other caller can take the coordinator's.
        // The last few are kept for the cluster's own callers ([`crate::peers`]).
        // Dropping the request (client gone, agent stopping) drops both.
        let _slot = match waiters.try_take_as(peer, share) {
            Ok(slot) => slot,
            Err(crate::limits::Full::Peer) => {
                return waiters_taken(&format!(
                    "this address holds {} long-polls already; retry later",
                    crate::limits::MAX_WAITERS_PER_PEER
                ));
            }
            Err(crate::limits::Full::Total) => {
                return waiters_taken(&format!(
                    "all {} long-poll waiters open to this address are taken; retry later",
                    crate::cache::MAX_WAITERS - crate::limits::RESERVED_WAITERS
                ));
            }
        };
        let Ok(_permit) = Arc::clone(cache.waiters()).try_acquire_owned() else {
            return waiters_taken(&format!(
                "all {} long-poll waiters are taken; retry later",
                crate::cache::MAX_WAITERS
            ));
        };
        let woken = tokio::time::timeout(watch.wait, sequence.wait_for(newer))
            .await
            .is_ok_and(|changed| changed.is_ok());
        tracing::trace!(woken, after = watch.after, "signed report wait ended");
    }
    signed_now(cache, Some(watch.after))
}

/// `/1/report/storage/drbd/signed`: the latest signed DRBD reading (no query accepted).
fn storage_signed(cache: &ReportCache, query: Option<&str>) -> HttpResponse {
    if query.is_some_and(|query| !query.is_empty()) {
        return error_json(
            StatusCode::BAD_REQUEST,
            "the signed storage report takes no query parameters",
        );
    }
    match &cache.snapshot().storage {
        CachedSigned::Envelope { report, .. } => cached(report),
        CachedSigned::Unavailable(reason) => error_json(StatusCode::SERVICE_UNAVAILABLE, reason),
    }
}

/// `/1/report/default/load/signed`: the latest signed load reports (no query accepted).
fn load_signed(cache: &ReportCache, query: Option<&str>) -> HttpResponse {
    if query.is_some_and(|query| !query.is_empty()) {
        return error_json(
            StatusCode::BAD_REQUEST,
            "the signed load report takes no query parameters",
        );
    }
    match &cache.snapshot().load {
        CachedSigned::Envelope { report, .. } => cached(report),
        CachedSigned::Unavailable(reason) => error_json(StatusCode::SERVICE_UNAVAILABLE, reason),
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
        "signed_diagnose": matches!(snapshot.signed, CachedSigned::Envelope { .. }),
        "signed_storage": matches!(snapshot.storage, CachedSigned::Envelope { .. }),
        "signed_load": matches!(snapshot.load, CachedSigned::Envelope { .. }),
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
    if request.uri().path() == nodecare_protocol::repair::CHECK_PATH {
        return match &state.check {
            Some(check) => check.handle_http(request).await,
            None => text(
                StatusCode::SERVICE_UNAVAILABLE,
                "checks are unavailable on this node (no cluster HMAC key)",
            ),
        };
    }
    if crate::replica::is_replica_path(request.uri().path()) {
        return match &state.replica {
            Some(replica) => replica.handle_http(request).await,
            None => text(
                StatusCode::SERVICE_UNAVAILABLE,
                "replicas are unavailable on this node (no cluster HMAC key)",
            ),
        };
    }
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
                refusals: &state.refusals,
            })),
        ),
        (true, SIGNED_DIAGNOSE_PATH) => {
            let response = signed(
                &state.cache,
                request.uri().query(),
                &state.waiters,
                peer.ip(),
                state.peers.share(peer.ip()),
            )
            .await;
            if response.status() == StatusCode::SERVICE_UNAVAILABLE
                && response.headers().contains_key(header::RETRY_AFTER)
            {
                state.refusals.count(
                    crate::refusals::Endpoint::LongPoll,
                    StatusCode::SERVICE_UNAVAILABLE,
                );
            }
            response
        }
        (true, SIGNED_DRBD_PATH) => storage_signed(&state.cache, request.uri().query()),
        (true, SIGNED_LOAD_PATH) => load_signed(&state.cache, request.uri().query()),
        // mond accepts trailing segments here too.
        (true, path) if path == "/1/report/all" || path.starts_with("/1/report/all/") => {
            state.cache.note_read_all();
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code")]

    use super::*;
    use crate::cache::CachedReport;
    use http_body_util::BodyExt;
    use nodecare_collectors::Registry;

    const SHARED: crate::limits::Share = crate::limits::Share::Shared;

    fn cache() -> Arc<ReportCache> {
        Arc::new(ReportCache::new(&Registry::new()))
    }

    /// A long-poll from a peer of its own (no per-peer cap).
    async fn signed_any(cache: &ReportCache, query: Option<&str>) -> HttpResponse {
        let unbounded = crate::limits::Slots::new(usize::MAX, usize::MAX);
        signed(
            cache,
            query,
            &unbounded,
            [127, 0, 0, 1].into(),
            crate::limits::Share::Shared,
        )
        .await
    }

    fn store(cache: &ReportCache, sequence: u64) {
        cache.store_signed(CachedSigned::Envelope {
            report: CachedReport {
                body: Bytes::from(format!("{{\"sequence\":{sequence}}}")),
                collected: Instant::now(),
            },
            sequence,
        });
    }

    async fn body(response: HttpResponse) -> (StatusCode, Option<String>, String) {
        let status = response.status();
        let sequence = response
            .headers()
            .get(SEQUENCE_HEADER)
            .map(|value| value.to_str().unwrap().to_owned());
        let bytes = response.into_body().collect().await.unwrap().to_bytes();
        (status, sequence, String::from_utf8(bytes.to_vec()).unwrap())
    }

    #[test]
    fn signed_query_table() {
        let secs = Duration::from_secs;
        let watch = |after, wait| Ok(Some(SignedWatch { after, wait }));
        for (query, expected) in [
            (None, Ok(None)),
            (Some(""), Ok(None)),
            (Some("after=5"), watch(5, secs(0))),
            (Some("after=5&wait=30"), watch(5, secs(30))),
            (Some("wait=30&after=0"), watch(0, secs(30))),
            (Some("after=5&wait=100000"), watch(5, MAX_WAIT)),
        ] {
            assert_eq!(parse_signed_query(query), expected, "{query:?}");
        }
        for (query, message) in [
            ("wait=3", "needs \"after\""),
            ("after=-1", "not an unsigned integer"),
            ("after=", "not an unsigned integer"),
            ("after", "not an unsigned integer"),
            ("after=1&wait=x", "not an unsigned integer"),
            ("after=18446744073709551616", "not an unsigned integer"),
            ("after=1&after=2", "given twice"),
            ("after=1&since=2", "unknown query parameter"),
        ] {
            let error = parse_signed_query(Some(query)).unwrap_err();
            assert!(error.contains(message), "{query}: {error}");
        }
    }

    #[tokio::test]
    async fn without_a_query_or_with_a_newer_report_it_answers_at_once() {
        let cache = cache();
        let (status, _, text) = body(signed_any(&cache, None).await).await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        assert!(text.contains("no diagnose run"), "{text}");
        store(&cache, 7);
        for query in [None, Some("after=6&wait=60"), Some("after=0&wait=60")] {
            let answer = tokio::time::timeout(Duration::from_secs(5), signed_any(&cache, query))
                .await
                .expect("answered at once");
            assert_eq!(
                body(answer).await,
                (StatusCode::OK, None, r#"{"sequence":7}"#.into())
            );
        }
        // Without `wait`: at once, 304 when nothing newer exists.
        let (status, sequence, text) = body(signed_any(&cache, Some("after=7")).await).await;
        assert_eq!(
            (status, sequence.as_deref(), text.as_str()),
            (StatusCode::NOT_MODIFIED, Some("7"), "")
        );
        let (status, _, text) = body(signed_any(&cache, Some("after=x")).await).await;
        assert_eq!(status, StatusCode::BAD_REQUEST);
        assert!(text.contains("not an unsigned integer"), "{text}");
    }

    #[tokio::test]
    async fn a_waiter_gets_304_at_its_timeout() {
        let cache = cache();
        store(&cache, 7);
        let started = Instant::now();
        let (status, sequence, _) = body(signed_any(&cache, Some("after=7&wait=1")).await).await;
        assert!(started.elapsed() >= Duration::from_secs(1));
        assert_eq!(
            (status, sequence.as_deref()),
            (StatusCode::NOT_MODIFIED, Some("7"))
        );
        assert_eq!(cache.waiting(), 0);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn one_new_report_wakes_every_waiter_and_their_number_is_bounded() {
        let cache = cache();
        store(&cache, 7);
        let mut waiters = tokio::task::JoinSet::new();
        for _ in 0..crate::cache::MAX_WAITERS {
            let cache = Arc::clone(&cache);
            waiters.spawn(
                async move { body(signed_any(&cache, Some("after=7&wait=60")).await).await },
            );
        }
        let started = Instant::now();
        while cache.waiting() < crate::cache::MAX_WAITERS {
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "waiters: {}",
                cache.waiting()
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        // One more is answered at once with 503 and Retry-After, so that its caller can tell
        // it from "nothing new" (304) and back off.
        let answer = tokio::time::timeout(
            Duration::from_secs(5),
            signed_any(&cache, Some("after=7&wait=60")),
        )
        .await
        .expect("answered at once beyond the bound");
        assert_eq!(
            answer
                .headers()
                .get(header::RETRY_AFTER)
                .map(|value| value.to_str().unwrap()),
            Some("5")
        );
        let (status, _, text) = body(answer).await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        assert!(text.contains("long-poll waiters are taken"), "{text}");
        // Nobody has answered yet; one new report answers all of them.
        assert!(waiters.try_join_next().is_none());
        store(&cache, 8);
        let mut answered = 0;
        while let Some(answer) = tokio::time::timeout(Duration::from_secs(10), waiters.join_next())
            .await
            .expect("every waiter answers")
        {
            assert_eq!(
                answer.unwrap(),
                (StatusCode::OK, None, r#"{"sequence":8}"#.into())
            );
            answered += 1;
        }
        assert_eq!(answered, crate::cache::MAX_WAITERS);
        assert_eq!(cache.waiting(), 0);
    }

    #[tokio::test]
    async fn a_dropped_waiter_frees_its_slot() {
        let cache = cache();
        store(&cache, 7);
        let waiter = {
            let cache = Arc::clone(&cache);
            tokio::spawn(async move { signed_any(&cache, Some("after=7&wait=60")).await })
        };
        while cache.waiting() == 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        waiter.abort();
        assert!(waiter.await.unwrap_err().is_cancelled());
        assert_eq!(cache.waiting(), 0);
    }

    #[tokio::test]
    async fn an_unavailable_report_stays_503_after_the_wait() {
        let cache = cache();
        let (status, _, _) = body(signed_any(&cache, Some("after=0&wait=1")).await).await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    }

    #[tokio::test]
    async fn one_address_cannot_take_every_waiter() {
        let cache = cache();
        store(&cache, 7);
        let waiters = crate::limits::Slots::new(
            crate::cache::MAX_WAITERS,
            crate::limits::MAX_WAITERS_PER_PEER,
        );
        let flooder: std::net::IpAddr = [192, 0, 2, 9].into();
        let mut held = tokio::task::JoinSet::new();
        for _ in 0..crate::limits::MAX_WAITERS_PER_PEER {
            let (cache, waiters) = (Arc::clone(&cache), Arc::clone(&waiters));
            held.spawn(async move {
                signed(&cache, Some("after=7&wait=60"), &waiters, flooder, SHARED)
                    .await
                    .status()
            });
        }
        while waiters.taken() < crate::limits::MAX_WAITERS_PER_PEER {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        for _ in 0..70 {
            let answer = signed(&cache, Some("after=7&wait=60"), &waiters, flooder, SHARED).await;
            assert_eq!(answer.status(), StatusCode::SERVICE_UNAVAILABLE);
            assert!(answer.headers().contains_key(header::RETRY_AFTER));
        }
        // The coordinator, from its own address, still waits.
        let coordinator: std::net::IpAddr = [192, 0, 2, 1].into();
        let watch = tokio::time::timeout(
            Duration::from_millis(300),
            signed(
                &cache,
                Some("after=7&wait=60"),
                &waiters,
                coordinator,
                SHARED,
            ),
        )
        .await;
        assert!(watch.is_err(), "the coordinator's watch waits");
        held.abort_all();
    }
}
