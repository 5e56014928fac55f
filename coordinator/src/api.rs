//! What the HTTP API's handlers share: the JSON API ([`crate::http`]) and the web status page
//! ([`crate::ui`]) both take an [`ApiState`]; the write check of the JSON API ([`Writer`]) and
//! the JSON error answers.

use std::sync::Arc;

use axum::Json;
use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;
use uuid::Uuid;

use crate::auth::Refusal;

use crate::board::Board;
use crate::store::Store;

/// What the handlers share.
#[derive(Debug, Clone)]
pub struct ApiState {
    /// State database.
    pub store: Arc<Store>,
    /// Agents and last round.
    pub board: Arc<Board>,
    /// Serialises incident changes with the reconciler.
    pub incident_lock: Arc<tokio::sync::Mutex<()>>,
    /// This node's name.
    pub node_name: String,
    /// The users file that authorises writes (read on each write); `None` refuses every write.
    pub users: Option<std::path::PathBuf>,
    /// Key of the web page's CSRF tokens, drawn at start.
    pub csrf_key: Arc<[u8; 32]>,
    /// Most nodes disrupted at once (shown on the web page).
    pub max_disrupted_nodes: usize,
    /// Ganeti, to cancel a canceled incident's unfinished jobs at once (the round does it
    /// otherwise); `None` leaves it to the round.
    pub ganeti: Option<Arc<dyn nodecare_ganeti::Ganeti>>,
    /// Signs requests to the agents (`nodecare check`); `None` disables them.
    pub agents: Option<crate::repair::RepairClient>,
    /// How old the last round's view of the cluster may be for an admission request to be
    /// judged against it ([`crate::admission::view_max_age`]).
    pub gate_view_max_age: std::time::Duration,
    /// The state's replication to the master candidates; `None`: off.
    pub replicator: Option<Arc<crate::replica::Replicator>>,
    /// The coordinator's failure domains, with which every campaign is planned.
    pub failure_domains: nodecare_core::gate::DomainSource,
    /// What a what-if needs of the daemon (`GET /1/what-if`); `None`: what-ifs are refused.
    pub what_if: Option<Arc<crate::what_if::WhatIfContext>>,
    /// The configuration's maintenance windows and freezes (the run-time freezes are the
    /// state's).
    pub calendar: Arc<nodecare_core::calendar::Calendar>,
    /// The change system asked for approvals (`[approvals] webhook`); `None`: operators decide.
    pub approval_hook: Option<Arc<crate::approval_hook::ApprovalHook>>,
}

/// Where the calendar stands at `now_ms`: the configuration's windows and freezes with the
/// run-time freezes of the state.
pub fn calendar_now(
    state: &ApiState,
    now_ms: u64,
) -> Result<nodecare_core::calendar::CalendarNow, crate::store::StoreError> {
    let mut calendar = nodecare_core::calendar::Calendar::clone(&state.calendar);
    calendar.freezes.extend(state.store.freezes()?);
    Ok(calendar.at(now_ms))
}

/// After a cancel is recorded: the incident's jobs that have not started are canceled now
/// (through the same Ganeti client as every write, so with replication only once the master
/// candidates keep the cancel), and the round is woken to record how each job ended. A
/// coordinator that is not acting leaves the jobs to the master's round, unless Ganeti names
/// this node its master (a coordinator started since its last round, whose first round has
/// not ended yet): a job queued at the cancel would otherwise start before that round.
pub(crate) async fn stop_canceled_jobs(
    state: &ApiState,
    uuid: Uuid,
) -> Vec<nodecare_protocol::status::CanceledJob> {
    let acting = state
        .board
        .acting
        .load(std::sync::atomic::Ordering::Relaxed);
    let jobs = match &state.ganeti {
        Some(ganeti) if acting || is_master(&**ganeti, &state.node_name).await => {
            crate::reconcile::stop_incident_jobs(&**ganeti, &state.store, &state.board, uuid)
                .await
                .unwrap_or_else(|error| {
                    tracing::warn!(incident = %uuid, %error, "cannot cancel the incident's jobs now; the round will");
                    Vec::new()
                })
        }
        _ => Vec::new(),
    };
    state.board.wake.notify_one();
    jobs
}

/// How long a cancel's answer waits for Ganeti's answers to the cancels of the incident's jobs
/// ([`stop_canceled_jobs_in_time`]): the cancel is recorded before; Ganeti may answer late (a
/// job waiting for its locks), and a client gives up after some seconds.
pub const CANCEL_ANSWER_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// [`stop_canceled_jobs`] on a task of its own, for the answer to a recorded cancel: the jobs
/// whose cancels Ganeti answered within [`CANCEL_ANSWER_WAIT`], or `None` when its answers
/// follow (the task goes on; each answer goes into the incident's history).
pub(crate) async fn stop_canceled_jobs_in_time(
    state: &ApiState,
    uuid: Uuid,
) -> Option<Vec<nodecare_protocol::status::CanceledJob>> {
    let task_state = state.clone();
    let mut task = tokio::spawn(async move { stop_canceled_jobs(&task_state, uuid).await });
    match tokio::time::timeout(CANCEL_ANSWER_WAIT, &mut task).await {
        Ok(Ok(jobs)) => Some(jobs),
        Ok(Err(error)) => {
            tracing::warn!(incident = %uuid, %error, "the cancels' task ended; the round cancels the jobs");
            Some(Vec::new())
        }
        Err(_) => {
            tracing::info!(incident = %uuid, "Ganeti's answers to the cancels follow");
            None
        }
    }
}

/// Whether Ganeti names `node` its master (read now; `false` when it cannot be read).
async fn is_master(ganeti: &dyn nodecare_ganeti::Ganeti, node: &str) -> bool {
    match ganeti.cluster_info().await {
        Ok(info) => info.master == node,
        Err(error) => {
            tracing::warn!(%error, "cannot ask Ganeti for its master; the round cancels the jobs");
            false
        }
    }
}

/// A fresh random key for [`ApiState::csrf_key`].
pub fn random_key() -> Arc<[u8; 32]> {
    let mut key = [0u8; 32];
    key[..16].copy_from_slice(Uuid::new_v4().as_bytes());
    key[16..].copy_from_slice(Uuid::new_v4().as_bytes());
    Arc::new(key)
}

/// A user with `write`, by name: what every write of the JSON API asks for in its signature. A
/// request without one is answered [`refused`] (401 with the API's challenge, or 403) before
/// the handler runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Writer(pub String);

impl FromRequestParts<ApiState> for Writer {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, state: &ApiState) -> Result<Self, Response> {
        authorize_write(state, &parts.headers)
            .map(Self)
            .map_err(|refusal| refused(&refusal))
    }
}

/// Whether the request authenticates a user with `write` (its name if so).
///
/// A caller of the local socket ([`crate::server::serve_local`]: root, the coordinator's own
/// user or a member of `api_socket_group`) without credentials writes as `local:<user>`.
fn authorize_write(state: &ApiState, headers: &HeaderMap) -> Result<String, Refusal> {
    let authorization = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    if authorization.is_none()
        && let Some(caller) = crate::callers::local_caller()
    {
        return Ok(format!("local:{}", caller.name));
    }
    crate::auth::authorize_write(state.users.as_deref(), authorization)
}

/// The JSON API's basic-auth challenge. Its realm differs from the web page's
/// ([`crate::ui::ADMIN_CHALLENGE`]): a browser that signed in to `/ui/admin/` never answers the
/// API's challenge with the credentials it keeps for the page.
pub const API_CHALLENGE: &str = "Basic realm=\"nodecare API\", charset=\"UTF-8\"";

/// A refused write: 401 (with a Basic challenge) or 403, as a JSON error.
pub(crate) fn refused(refusal: &Refusal) -> Response {
    refused_as(refusal, refusal.to_string(), API_CHALLENGE)
}

/// A refusal answered `message`: 401 with `challenge`, or 403, as a JSON error.
pub(crate) fn refused_as(refusal: &Refusal, message: String, challenge: &'static str) -> Response {
    let status = match refusal {
        Refusal::Unauthenticated(_) => StatusCode::UNAUTHORIZED,
        Refusal::NotWriter(_) | Refusal::Disabled(_) => StatusCode::FORBIDDEN,
    };
    let mut response = error(status, message);
    if status == StatusCode::UNAUTHORIZED {
        response.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            HeaderValue::from_static(challenge),
        );
    }
    response
}

pub(crate) fn error(status: StatusCode, message: impl Into<String>) -> Response {
    (
        status,
        Json(json!({"code": status.as_u16(), "message": message.into()})),
    )
        .into_response()
}

pub(crate) fn internal(error: impl std::fmt::Display) -> Response {
    error_response(StatusCode::INTERNAL_SERVER_ERROR, error.to_string())
}

fn error_response(status: StatusCode, message: String) -> Response {
    error(status, message)
}

/// The last round's gate snapshot, as the board keeps it.
pub(crate) fn snapshot_of(state: &ApiState) -> Option<nodecare_core::gate::GateSnapshot> {
    state
        .board
        .gate
        .read()
        .ok()
        .and_then(|snapshot| snapshot.clone())
}

/// An error answer (`{"code", "message"}`), small enough to pass around in a `Result`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failed {
    /// HTTP status.
    pub status: StatusCode,
    /// What is wrong.
    pub message: String,
}

impl Failed {
    pub(crate) fn new(status: StatusCode, message: impl Into<String>) -> Self {
        Self {
            status,
            message: message.into(),
        }
    }

    pub(crate) fn internal(e: impl std::fmt::Display) -> Self {
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string())
    }
}

impl IntoResponse for Failed {
    fn into_response(self) -> Response {
        error(self.status, self.message)
    }
}

/// Decodes a JSON body into `T`, or a `400` naming what is wrong.
pub(crate) fn body_of<T: serde::de::DeserializeOwned>(
    body: &[u8],
    what: &str,
) -> Result<T, Failed> {
    serde_json::from_slice(body).map_err(|e| {
        Failed::new(
            StatusCode::BAD_REQUEST,
            format!("not a valid {what} body: {e}"),
        )
    })
}

pub(crate) fn parse_id(text: &str, what: &str) -> Result<Uuid, Failed> {
    Uuid::parse_str(text).map_err(|_| {
        Failed::new(
            StatusCode::BAD_REQUEST,
            format!("not a {what} id: {text:?}"),
        )
    })
}
