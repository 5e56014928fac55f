//! Approvals (`[approvals]`): `GET /1/approvals` (what needs one, what waits for one as the last
//! round judged, the decisions) and `POST /1/approvals` (write realm, audited): approve a
//! holder's work with a change ticket, or refuse it with a reason.

use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use uuid::Uuid;

use crate::api::{ApiState, Writer, internal};
use crate::api::{Failed, body_of, snapshot_of};
use crate::store::StoreError;
use nodecare_core::approval::{ApprovalRecord, check_ticket};
use nodecare_protocol::gate::{
    ApprovalRequest, ApprovalView, ApprovalWaiting, ApprovalsStatus, BlockedBy,
};

fn view(record: &ApprovalRecord) -> ApprovalView {
    ApprovalView {
        id: record.id.to_string(),
        ticket: record.ticket.clone(),
        refused: record.refused.clone(),
        who: record.who.clone(),
        at_ms: record.at_ms,
    }
}

/// The approvals as the API shows them.
pub fn status(state: &ApiState) -> Result<ApprovalsStatus, StoreError> {
    let snapshot = snapshot_of(state);
    let waiting = snapshot
        .iter()
        .flat_map(|s| s.decision.refused())
        .filter_map(|(proposal, blocked)| match blocked {
            BlockedBy::Approval {
                holder,
                id,
                refused,
            } => Some(ApprovalWaiting {
                holder: holder.clone(),
                id: id.clone(),
                subject: proposal.subject.clone(),
                refused: refused.clone(),
            }),
            _ => None,
        })
        .collect();
    Ok(ApprovalsStatus {
        required: snapshot
            .iter()
            .flat_map(|s| s.policy.approvals.required.iter())
            .map(|k| {
                serde_json::to_value(k)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_owned))
                    .unwrap_or_default()
            })
            .collect(),
        moves_above: snapshot.iter().find_map(|s| s.policy.approvals.moves_above),
        waiting,
        decisions: state.store.approvals()?.iter().map(view).collect(),
        change_system: state.approval_hook.as_ref().map(|h| h.url().to_owned()),
        change_system_error: state.approval_hook.as_ref().and_then(|h| {
            h.last_error
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .clone()
        }),
    })
}

/// `GET /1/approvals`.
pub async fn list(State(state): State<ApiState>) -> Response {
    match status(&state) {
        Ok(status) => Json(status).into_response(),
        Err(e) => internal(e),
    }
}

/// Checks and keeps a decision by `who` (the API's and the web page's).
pub(crate) fn decide(
    state: &ApiState,
    who: &str,
    request: &ApprovalRequest,
    now_ms: u64,
) -> Result<ApprovalView, Failed> {
    let id = Uuid::parse_str(request.id.trim()).map_err(|_| {
        Failed::new(
            StatusCode::BAD_REQUEST,
            format!(
                "not an incident, campaign or instance repair id: {:?}",
                request.id
            ),
        )
    })?;
    let (ticket, refused) = match (&request.ticket, &request.refuse) {
        (Some(ticket), None) => {
            check_ticket(ticket).map_err(|e| Failed::new(StatusCode::BAD_REQUEST, e))?;
            (Some(ticket.clone()), None)
        }
        (None, Some(why)) if !why.trim().is_empty() => {
            nodecare_protocol::limits::check_len(
                "refuse",
                why,
                nodecare_protocol::limits::MAX_TEXT_BYTES,
            )
            .map_err(|e| Failed::new(StatusCode::BAD_REQUEST, e))?;
            (None, Some(why.trim().to_owned()))
        }
        _ => {
            return Err(Failed::new(
                StatusCode::BAD_REQUEST,
                "give exactly one of ticket (approve) and refuse (a reason)",
            ));
        }
    };
    let record = ApprovalRecord {
        id,
        ticket,
        refused,
        who: who.to_owned(),
        at_ms: now_ms,
    };
    let shown = view(&record);
    state.store.add_approval(record).map_err(Failed::internal)?;
    tracing::warn!(%id, %who, ticket = shown.ticket.as_deref().unwrap_or("-"),
        refused = shown.refused.as_deref().unwrap_or("-"), "approval decided");
    state.board.wake.notify_one();
    Ok(shown)
}

/// `POST /1/approvals`.
pub async fn set(State(state): State<ApiState>, Writer(who): Writer, body: Bytes) -> Response {
    let request: ApprovalRequest = match body_of(&body, "approval") {
        Ok(request) => request,
        Err(response) => return response.into_response(),
    };
    match decide(&state, &who, &request, nodecare_protocol::now_ms()) {
        Ok(view) => (StatusCode::CREATED, Json(view)).into_response(),
        Err(response) => response.into_response(),
    }
}
