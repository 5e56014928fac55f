//! The coordinator's HTTP API (default port 1816), a superset of maintd's.
//!
//! | Path | Answer |
//! |---|---|
//! | `GET /` | `[1]` |
//! | `GET /1` | `null` |
//! | `GET /1/status` | maintd's list of non-cleared incidents; each entry also has `id`, our fields and `agent` (its node's agent status); the `Ganeti-Version` header names Ganeti's version as the last round read it (`/1/overview` has it as `round.ganeti_version`) |
//! | `GET /1/jobs` | ids of jobs still in flight (maintd: jobs to wait for) |
//! | `GET /1/evacuated` | names of the instances moved off evacuated nodes (migrated or failed over) by incidents not yet forgotten, as maintd's list |
//! | `GET /1/agents` | every agent's status (`ok`, `stale`, `unreachable`, `unverifiable`) |
//! | `GET /1/overview` | `{node, round, incidents, agents, intents, jobs, domains, waiting, grants, overrides, breaker}`: what `nodecare status` shows |
//! | `GET /1/incidents/<uuid>` | one incident with its intents |
//! | `POST /1/incidents/<uuid>/cancel` | cancel it at once (no more jobs; its jobs that have not started are canceled in Ganeti, `jobs` lists each unfinished job with Ganeti's answer; the incident's history and `warning` record what ran and the state the node is left in): 200, 404 unknown, 409 already completed or failed; needs HTTP basic auth of a user with `write` (401 without or with wrong credentials, 403 for a user without `write` or when no users file is readable) |
//! | `/1/disruptions`, `/1/overrides`, `/1/breaker`, `/1/audit` | the gate's admission API, overrides and storm breaker ([`crate::admission`]) |
//! | `/1/maintenance` | rolling maintenance campaigns ([`crate::maintenance_api`]) |
//! | `GET /1/explain?node=…[&at=…]`, `?record=…`, `?job=…` | why: the flight recorder's rounds about a node, a record or a job ([`crate::explain_api`]) |
//! | `GET /1/what-if?verdict=NODE:STATUS&drain=NODE&…` | what if: the coordinator's own rounds run on a private copy of its state with hypothetical changes, until nothing changes; changes nothing ([`crate::what_if_api`]) |
//! | `GET /metrics` | Prometheus metrics (text format 0.0.4, see [`crate::metrics`]) |
//!
//! Every answer is JSON with `Content-Type: application/json`, except `/metrics` and the web status page
//! ([`crate::ui`]: `/ui/`, and `/` when the client asks for `text/html`).

use std::collections::BTreeMap;

use axum::Json;
use axum::Router;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{delete, get, post};
use serde_json::{Value, json};
use uuid::Uuid;

pub(crate) use crate::api::{Writer, error, internal};
use crate::reconcile::{Board, CancelOutcome, RoundSummary, cancel_incident};
use crate::scrape::AgentStatus;
use crate::store::{Intent, IntentSpec, IntentState};
use nodecare_core::incident::Incident;
use nodecare_core::plan::Move;

pub use crate::api::{ApiState, random_key};

/// The API router.
///
/// Every request passes [`crate::server::guard`] first (body limits, cross-site and
/// `Content-Type` checks of writes, password-guess throttling) with the default
/// [`crate::server::ServerLimits`].
pub fn router(state: ApiState) -> Router {
    router_with(state, crate::server::ServerLimits::default())
}

/// [`router`] with `limits`.
pub fn router_with(state: ApiState, limits: crate::server::ServerLimits) -> Router {
    let replicate = state.replicator.clone();
    let board = std::sync::Arc::clone(&state.board);
    let throttle = std::sync::Arc::new(crate::auth::Throttle::default());
    let users: Option<std::sync::Arc<std::path::Path>> = state.users.as_deref().map(Into::into);
    Router::new()
        .route("/", get(root))
        .route("/1/replication", get(replication))
        .route("/1", get(|| async { Json(Value::Null) }))
        .route("/1/", get(|| async { Json(Value::Null) }))
        .route("/1/status", get(status))
        .route("/1/jobs", get(jobs))
        .route("/1/evacuated", get(evacuated))
        .route("/1/agents", get(agents))
        .route("/1/balancing", get(balancing))
        .route("/1/balancing/mond-data", get(balancing_mond_data))
        .route("/1/overview", get(overview))
        .route("/1/incidents/{uuid}", get(incident))
        .route("/1/incidents/{uuid}/cancel", post(cancel))
        .route(
            "/1/disruptions",
            get(crate::admission::list).post(crate::admission::request),
        )
        .route("/1/disruptions/{id}", delete(crate::admission::release))
        .route(
            "/1/overrides",
            get(crate::admission::overrides).post(crate::admission::set_override),
        )
        .route(
            "/1/overrides/{id}",
            delete(crate::admission::revoke_override),
        )
        .route(
            "/1/freezes",
            get(crate::freeze_api::list).post(crate::freeze_api::set),
        )
        .route("/1/freezes/{id}", delete(crate::freeze_api::delete))
        .route(
            "/1/approvals",
            get(crate::approval_api::list).post(crate::approval_api::set),
        )
        .route("/1/breaker", get(crate::admission::breaker))
        .route("/1/breaker/reset", post(crate::admission::reset_breaker))
        .route("/1/audit", get(crate::admission::audit))
        .route("/1/explain", get(crate::explain_api::explain))
        .route("/1/what-if", get(crate::what_if_api::get))
        .route("/1/nodes/{node}/check", post(check))
        .route(
            "/1/maintenance",
            get(crate::maintenance_api::list).post(crate::maintenance_api::start),
        )
        .route("/1/maintenance/{id}", get(crate::maintenance_api::show))
        .route(
            "/1/maintenance/{id}/{command}",
            post(crate::maintenance_api::command),
        )
        .route("/metrics", get(metrics))
        // The web status page (crate::ui).
        .route("/ui", get(|| async { Redirect::permanent("/ui/") }))
        .route("/ui/", get(crate::ui::page))
        .route("/ui/explain", get(crate::ui_explain::page))
        .route("/ui/what-if", get(crate::ui_what_if::page))
        .route(
            "/ui/admin",
            get(|| async { Redirect::permanent("/ui/admin/") }),
        )
        .route("/ui/admin/", get(crate::ui::admin_page))
        .route("/ui/admin/incidents/{uuid}/cancel", post(crate::ui::cancel))
        .route(
            "/ui/admin/incidents/{uuid}/acknowledge",
            post(crate::ui::acknowledge),
        )
        .route("/ui/admin/overrides", post(crate::ui::set_override))
        .route("/ui/admin/freezes", post(crate::ui::set_freeze))
        .route("/ui/admin/approvals", post(crate::ui::decide_approval))
        .route(
            "/ui/admin/freezes/{id}/lift",
            post(crate::ui::lift_freeze),
        )
        .route(
            "/ui/admin/overrides/{id}/revoke",
            post(crate::ui::revoke_override),
        )
        .route("/ui/admin/breaker/reset", post(crate::ui::reset_breaker))
        .fallback(|| async { error(StatusCode::NOT_FOUND, "Resource not found") })
        .layer(axum::middleware::from_fn(
            move |request: axum::extract::Request, next: axum::middleware::Next| {
                let replicate = replicate.clone();
                async move { replicate_writes(replicate, request, next).await }
            },
        ))
        .layer(axum::middleware::from_fn(
            move |request: axum::extract::Request, next: axum::middleware::Next| {
                let board = std::sync::Arc::clone(&board);
                let throttle = std::sync::Arc::clone(&throttle);
                let users = users.clone();
                async move {
                    crate::server::guard(board, throttle, users, limits, request, next).await
                }
            },
        ))
        .with_state(state)
}

/// After an accepted write to the API (a cancel, an acknowledgement, a grant, an override, a
/// campaign command), the state goes to the master candidates before the answer: an operator's
/// decision survives a master failover from the moment it is answered. When a majority cannot be
/// reached the write stands (nothing is written to Ganeti meanwhile) and the answer says so in
/// `X-Nodecare-Replication`.
async fn replicate_writes(
    replicator: Option<std::sync::Arc<crate::replica::Replicator>>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let write = !matches!(
        *request.method(),
        axum::http::Method::GET | axum::http::Method::HEAD | axum::http::Method::OPTIONS
    );
    let mut response = next.run(request).await;
    if let Some(replicator) = replicator
        && write
        && (response.status().is_success() || response.status().is_redirection())
        && replicator.has_taken_over().await
    {
        let outcome = match replicator.ensure().await {
            Ok(()) => "kept by a majority of the master candidates".to_owned(),
            Err(error) => {
                tracing::warn!(%error, "an API write is not replicated yet");
                format!("pending: {error}")
            }
        };
        if let Ok(value) = axum::http::HeaderValue::from_str(
            &outcome
                .chars()
                .filter(|c| c.is_ascii() && !c.is_ascii_control())
                .take(500)
                .collect::<String>(),
        ) {
            response
                .headers_mut()
                .insert("x-nodecare-replication", value);
        }
    }
    response
}

/// `GET /1/replication`: where the state's replicas are.
async fn replication(State(state): State<ApiState>) -> Response {
    match &state.replicator {
        Some(replicator) => Json(replicator.status()).into_response(),
        None => Json(crate::replica::ReplicationStatus::default()).into_response(),
    }
}

/// `GET /`: `[1]`, or the web page for a client that asks for HTML first.
async fn root(headers: HeaderMap) -> Response {
    let wants_html = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|accept| accept.trim_start().starts_with("text/html"));
    if wants_html {
        Redirect::to("/ui/").into_response()
    } else {
        Json(json!([1])).into_response()
    }
}

fn agents_snapshot(board: &Board) -> BTreeMap<String, AgentStatus> {
    board
        .agents
        .read()
        .map(|agents| agents.clone())
        .unwrap_or_default()
}

/// An incident as the API shows it: maintd's fields plus `id` and the node's agent status.
///
/// Serialised directly (never through `serde_json::Value`), so that `original` is served with
/// exactly the bytes the agent signed.
#[derive(Debug, serde::Serialize)]
pub struct IncidentView<'a> {
    /// The incident's fields.
    #[serde(flatten)]
    pub incident: &'a Incident,
    /// The incident's uuid, again, under the name the CLI reads.
    pub id: String,
    /// Its node's agent status.
    pub agent: Option<&'a AgentStatus>,
}

/// [`IncidentView`] of `incident`.
pub fn incident_view<'a>(
    incident: &'a Incident,
    agents: &'a BTreeMap<String, AgentStatus>,
) -> IncidentView<'a> {
    IncidentView {
        incident,
        id: incident.uuid.to_string(),
        agent: agents.get(&incident.node),
    }
}

async fn status(State(state): State<ApiState>) -> Response {
    let agents = agents_snapshot(&state.board);
    match state.store.incidents() {
        Ok(incidents) => {
            let list: Vec<IncidentView<'_>> = incidents
                .iter()
                .map(|incident| incident_view(incident, &agents))
                .collect();
            let mut response = Json(list).into_response();
            // The body stays maintd's list; Ganeti's version the last round read rides beside it.
            let version = state
                .board
                .last_round
                .read()
                .ok()
                .and_then(|round| round.ganeti_version.clone())
                .and_then(|v| axum::http::HeaderValue::from_str(&v).ok());
            if let Some(version) = version {
                response
                    .headers_mut()
                    .insert(GANETI_VERSION_HEADER, version);
            }
            response
        }
        Err(e) => internal(e),
    }
}

/// The header of `GET /1/status` that carries Ganeti's version (`software_version`).
pub const GANETI_VERSION_HEADER: &str = "ganeti-version";

fn in_flight(intents: &[Intent]) -> Vec<u64> {
    let mut jobs: Vec<u64> = intents
        .iter()
        .filter(|i| i.state.is_in_flight())
        .filter_map(|i| i.job_id)
        .collect();
    jobs.sort_unstable();
    jobs.dedup();
    jobs
}

async fn jobs(State(state): State<ApiState>) -> Response {
    match state.store.intents() {
        Ok(intents) => Json(in_flight(&intents)).into_response(),
        Err(e) => internal(e),
    }
}

/// Instances whose primary move off an evacuated node succeeded, sorted, without repeats.
pub fn evacuated_instances(intents: &[Intent]) -> Vec<String> {
    let mut names: Vec<String> = intents
        .iter()
        .filter(|i| i.state == IntentState::Succeeded)
        .filter_map(|i| match &i.spec {
            IntentSpec::Move {
                planned: Move::Migrate { instance, .. } | Move::Failover { instance, .. },
            } => Some(instance.clone()),
            _ => None,
        })
        .collect();
    names.sort_unstable();
    names.dedup();
    names
}

async fn evacuated(State(state): State<ApiState>) -> Response {
    match state.store.intents() {
        Ok(intents) => Json(evacuated_instances(&intents)).into_response(),
        Err(e) => internal(e),
    }
}

async fn agents(State(state): State<ApiState>) -> Response {
    let agents: Vec<AgentStatus> = agents_snapshot(&state.board).into_values().collect();
    Json(agents).into_response()
}

/// The balancing duty: what its last run proposed, left out and submitted (`null` while it is
/// off or before its first run), and its stored moves.
async fn balancing(State(state): State<ApiState>) -> Response {
    let status = state
        .board
        .balancing
        .read()
        .map(|s| s.clone())
        .unwrap_or_else(|e| e.into_inner().clone());
    match state.store.balancing_moves() {
        Ok(moves) => Json(json!({ "status": status, "moves": moves })).into_response(),
        Err(store_error) => internal(store_error),
    }
}

/// The dynamic load the last hbal run had (`--mond-data`: one object per node with its mond
/// reports), `null` when it had none.
async fn balancing_mond_data(State(state): State<ApiState>) -> Response {
    let data = state
        .board
        .balancing
        .read()
        .map(|s| s.as_ref().and_then(|s| s.mond_data.clone()))
        .unwrap_or_else(|e| e.into_inner().as_ref().and_then(|s| s.mond_data.clone()));
    let value = data
        .and_then(|text| serde_json::from_str::<serde_json::Value>(&text).ok())
        .unwrap_or(serde_json::Value::Null);
    Json(value).into_response()
}

async fn overview(State(state): State<ApiState>) -> Response {
    #[derive(serde::Serialize)]
    struct OverviewView<'a> {
        node: &'a str,
        round: RoundSummary,
        incidents: Vec<IncidentView<'a>>,
        agents: Vec<&'a AgentStatus>,
        intents: &'a [Intent],
        jobs: Vec<u64>,
        #[serde(flatten)]
        gate: crate::admission::GateStatus,
        instance_repairs: Vec<nodecare_protocol::status::InstanceRepairSummary>,
    }
    let gate = match crate::admission::gate_status(&state) {
        Ok(gate) => gate,
        Err(e) => return internal(e),
    };
    let stored = match state.store.incidents() {
        Ok(list) => list,
        Err(e) => return internal(e),
    };
    let intents = match state.store.intents() {
        Ok(intents) => intents,
        Err(e) => return internal(e),
    };
    let round = state
        .board
        .last_round
        .read()
        .map(|r| r.clone())
        .unwrap_or_default();
    let agents = agents_snapshot(&state.board);
    Json(OverviewView {
        node: &state.node_name,
        round,
        incidents: stored
            .iter()
            .map(|incident| incident_view(incident, &agents))
            .collect(),
        agents: agents.values().collect(),
        intents: &intents,
        jobs: in_flight(&intents),
        instance_repairs: state
            .board
            .instance_repairs
            .read()
            .map(|r| r.clone())
            .unwrap_or_default(),
        gate,
    })
    .into_response()
}

fn parse_uuid(text: &str) -> Result<Uuid, String> {
    Uuid::parse_str(text).map_err(|e| format!("not an incident uuid: {text:?}: {e}"))
}

async fn incident(State(state): State<ApiState>, Path(text): Path<String>) -> Response {
    let uuid = match parse_uuid(&text) {
        Ok(uuid) => uuid,
        Err(message) => return error(StatusCode::BAD_REQUEST, message),
    };
    let incident = match state.store.incident(uuid) {
        Ok(Some(incident)) => incident,
        Ok(None) => return error(StatusCode::NOT_FOUND, format!("no incident {uuid}")),
        Err(e) => return internal(e),
    };
    let intents: Vec<Intent> = match state.store.intents() {
        Ok(intents) => intents.into_iter().filter(|i| i.incident == uuid).collect(),
        Err(e) => return internal(e),
    };
    /// An intent with what it does, for people.
    #[derive(serde::Serialize)]
    struct Step<'a> {
        #[serde(flatten)]
        intent: &'a Intent,
        what: String,
    }
    #[derive(serde::Serialize)]
    struct Detail<'a> {
        #[serde(flatten)]
        view: IncidentView<'a>,
        intents: Vec<Step<'a>>,
    }
    let agents = agents_snapshot(&state.board);
    Json(Detail {
        view: incident_view(&incident, &agents),
        intents: intents
            .iter()
            .map(|intent| Step {
                intent,
                what: intent.spec.describe(&incident.node),
            })
            .collect(),
    })
    .into_response()
}

/// What a cancel's answer says when Ganeti's answers to the cancels of its jobs come later.
const CANCELS_FOLLOW: &str = "the cancel is recorded; Ganeti's answers to the cancels of its jobs follow in the incident's history";

async fn cancel(
    State(state): State<ApiState>,
    Path(text): Path<String>,
    Writer(user): Writer,
) -> Response {
    let uuid = match parse_uuid(&text) {
        Ok(uuid) => uuid,
        Err(message) => return error(StatusCode::BAD_REQUEST, message),
    };
    match cancel_incident(&state.store, uuid).await {
        Ok(CancelOutcome::Canceled) => {
            tracing::info!(%uuid, %user, "incident canceled");
            // Answered once the cancel is recorded and Ganeti answered the cancels of its
            // jobs, or after a short wait: Ganeti's answers then follow in its history.
            match crate::api::stop_canceled_jobs_in_time(&state, uuid).await {
                Some(jobs) => {
                    Json(json!({"id": uuid, "result": "canceled", "jobs": jobs})).into_response()
                }
                None => Json(json!({
                    "id": uuid,
                    "result": "canceled",
                    "jobs": [],
                    "following": CANCELS_FOLLOW,
                }))
                .into_response(),
            }
        }
        Ok(CancelOutcome::Forgotten) => {
            Json(json!({"id": uuid, "result": "forgotten"})).into_response()
        }
        Ok(CancelOutcome::NotFound) => error(StatusCode::NOT_FOUND, format!("no incident {uuid}")),
        Ok(CancelOutcome::Finalized(message)) => error(StatusCode::CONFLICT, message),
        Err(e) => internal(e),
    }
}

/// `POST /1/nodes/<node>/check`: asks the node's agent (signed) to run its diagnose scripts
/// now; `202` with the agent's answer (the sequence after which the result appears).
async fn check(
    State(state): State<ApiState>,
    Path(node): Path<String>,
    Writer(user): Writer,
) -> Response {
    let Some(agents) = &state.agents else {
        return error(
            StatusCode::SERVICE_UNAVAILABLE,
            "checks are disabled".to_owned(),
        );
    };
    let target = state
        .board
        .targets
        .read()
        .ok()
        .and_then(|targets| targets.iter().find(|t| t.node == node).cloned());
    let Some(target) = target else {
        return error(
            StatusCode::NOT_FOUND,
            format!("no online node {node} in the last round"),
        );
    };
    let sequence = match state
        .store
        .next_counter("repair-sequence", nodecare_protocol::now_ms())
    {
        Ok(sequence) => sequence,
        Err(e) => return internal(e),
    };
    match agents
        .check(
            &target.base_url,
            &node,
            sequence,
            nodecare_protocol::now_ms(),
        )
        .await
    {
        crate::repair::CheckOutcome::Started(answer) => {
            tracing::info!(%node, %user, "diagnose check requested");
            (StatusCode::ACCEPTED, Json(answer)).into_response()
        }
        crate::repair::CheckOutcome::Refused(status, message) => {
            let status = StatusCode::from_u16(status)
                .ok()
                .filter(|s| s.is_client_error() || s.is_server_error())
                .unwrap_or(StatusCode::BAD_GATEWAY);
            error(status, format!("the agent of {node} refused: {message}"))
        }
        crate::repair::CheckOutcome::Unreachable(message) => error(
            StatusCode::BAD_GATEWAY,
            format!("the agent of {node} did not answer: {message}"),
        ),
    }
}

async fn metrics(State(state): State<ApiState>) -> Response {
    let incidents = match state.store.incidents() {
        Ok(incidents) => incidents,
        Err(e) => return internal(e),
    };
    let agents = agents_snapshot(&state.board);
    let now = nodecare_protocol::now_ms();
    let gate = (
        state.store.breaker(),
        state.store.grants(now),
        state.store.overrides_in_force(now),
    );
    match gate {
        (Ok(breaker), Ok(grants), Ok(overrides)) => {
            state
                .board
                .metrics
                .set_gate(breaker.open, grants.len(), overrides.len());
        }
        (Err(e), _, _) | (_, Err(e), _) | (_, _, Err(e)) => return internal(e),
    }
    let campaigns = match state.store.campaigns() {
        Ok(records) => records
            .into_iter()
            .map(|record| record.campaign)
            .collect::<Vec<_>>(),
        Err(e) => return internal(e),
    };
    state.board.metrics.set_campaigns(&campaigns);
    state.board.metrics.set_replication(
        state
            .replicator
            .as_ref()
            .map(|replicator| replicator.status())
            .as_ref(),
    );
    let text = state.board.metrics.render(&incidents, agents.values());
    (
        [(
            axum::http::header::CONTENT_TYPE,
            crate::metrics::CONTENT_TYPE,
        )],
        text,
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_serves_original_with_the_signed_bytes() {
        // serde_json's own number formatting differs from RFC 8785 for large doubles (1e21 vs
        // 1e+21): going through a `Value` would change the bytes.
        let details = serde_json::json!({"counter": 1e21, "name": "sd\u{e9}"});
        let verdict = nodecare_protocol::NodeVerdict::merge(
            [(
                "disk".to_owned(),
                nodecare_protocol::ScriptVerdict::from_value(
                    &serde_json::json!({"status": "evacuate", "details": details}),
                )
                .unwrap(),
            )]
            .into_iter()
            .collect(),
        )
        .unwrap();
        let original = nodecare_protocol::canonical::CanonicalJson::new(
            &serde_json::to_value(&verdict).unwrap(),
        )
        .unwrap();
        let signed = original.get().to_owned();
        let incident = Incident::new(
            Uuid::from_u128(7),
            "node1",
            "uuid-node1",
            verdict,
            original,
            nodecare_core::incident::Action::Evacuate,
            100.0,
        );
        let agents = BTreeMap::new();
        let served = serde_json::to_string(&vec![incident_view(&incident, &agents)]).unwrap();
        assert!(
            served.contains(&format!("\"original\":{signed}")),
            "{served}"
        );
        assert!(signed.contains("1e+21"), "{signed}");
        assert!(served.contains("\"id\":\"00000000-0000-0000-0000-000000000007\""));
    }

    fn intent(key: &str, spec: IntentSpec, state: IntentState) -> Intent {
        Intent {
            incident: Uuid::from_u128(1),
            key: key.into(),
            spec,
            locks: Vec::new(),
            state,
            job_id: None,
            created_ms: 0,
            submitted_ms: None,
            finished_ms: None,
            error: None,
        }
    }

    #[test]
    fn evacuated_lists_instances_moved_off_their_node() {
        let moved = |instance: &str, failover: bool| IntentSpec::Move {
            planned: if failover {
                Move::Failover {
                    instance: instance.into(),
                    target: None,
                }
            } else {
                Move::Migrate {
                    instance: instance.into(),
                    target: Some("n3".into()),
                }
            },
        };
        let intents = vec![
            intent(
                "drain",
                IntentSpec::Drain { node: "n1".into() },
                IntentState::Succeeded,
            ),
            intent("m-b", moved("b", false), IntentState::Succeeded),
            intent("m-a", moved("a", true), IntentState::Succeeded),
            intent("m-a-2", moved("a", false), IntentState::Succeeded),
            intent("m-c", moved("c", false), IntentState::Submitted),
            intent("m-d", moved("d", false), IntentState::Failed),
            intent(
                "r-e",
                IntentSpec::Move {
                    planned: Move::ReplaceSecondary {
                        instance: "e".into(),
                        remote_node: "n4".into(),
                        replaces: None,
                    },
                },
                IntentState::Succeeded,
            ),
        ];
        assert_eq!(evacuated_instances(&intents), vec!["a", "b"]);
    }
}
