//! The campaigns' HTTP API (`/1/maintenance`, wire types in
//! [`nodecare_protocol::maintenance`]):
//!
//! | Path | Answer |
//! |---|---|
//! | `POST /1/maintenance` | start a campaign ([`CampaignRequest`]): `201` with the [`Campaign`], its `failure_domains` the coordinator's; `400` bad request (failure domains other than the coordinator's included); `409` while another campaign is not finished; write auth |
//! | `GET /1/maintenance` | every campaign, newest first ([`CampaignList`]) |
//! | `GET /1/maintenance/<id>` | one campaign; `404` unknown |
//! | `POST /1/maintenance/<id>/pause`, `/resume`, `/abort` | the command: `200` with the campaign after it; `404` unknown; `409` when its state refuses the command; write auth |
//!
//! Commands take the round's lock, so a round never works on a campaign an operator is changing.

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use nodecare_protocol::maintenance::{Campaign, CampaignList, CampaignRequest};
use uuid::Uuid;

use crate::api::{ApiState, authorize_write, error, internal, refused};
use crate::campaign::Record;

/// `POST /1/maintenance`.
pub async fn start(State(state): State<ApiState>, headers: HeaderMap, body: Bytes) -> Response {
    let who = match authorize_write(&state, &headers) {
        Ok(who) => who,
        Err(refusal) => return refused(&refusal),
    };
    let mut request: CampaignRequest = match serde_json::from_slice(&body) {
        Ok(request) => request,
        Err(e) => {
            return error(
                StatusCode::BAD_REQUEST,
                format!("not a valid campaign request: {e}"),
            );
        }
    };
    if let Err(why) = request
        .validate()
        .and_then(|()| crate::campaign::adopt_failure_domains(&mut request, &state.failure_domains))
    {
        return error(StatusCode::BAD_REQUEST, why);
    }
    let _guard = state.incident_lock.lock().await;
    let campaigns = match state.store.campaigns() {
        Ok(campaigns) => campaigns,
        Err(e) => return internal(e),
    };
    if let Some(busy) = campaigns.iter().find(|r| !r.state().is_final()) {
        return error(
            StatusCode::CONFLICT,
            format!(
                "campaign {} is {}: one campaign at a time (abort it, or wait)",
                busy.campaign.id,
                busy.state()
            ),
        );
    }
    let record = Record::new(Uuid::new_v4(), request, &who, nodecare_protocol::now_ms());
    if let Err(e) = state.store.save_campaign(&record) {
        return internal(e);
    }
    tracing::info!(campaign = %record.campaign.id, %who, hook = %record.campaign.request.hook, "maintenance campaign started");
    // Its first group is planned by the next round: now, not at the next interval.
    state.board.wake.notify_one();
    (StatusCode::CREATED, Json(record.campaign)).into_response()
}

/// `GET /1/maintenance`.
pub async fn list(State(state): State<ApiState>) -> Response {
    match state.store.campaigns() {
        Ok(records) => Json(CampaignList {
            campaigns: records.into_iter().map(|r| r.campaign).collect(),
        })
        .into_response(),
        Err(e) => internal(e),
    }
}

fn find(state: &ApiState, text: &str) -> Result<Record, Box<Response>> {
    let id = Uuid::parse_str(text).map_err(|_| {
        Box::new(error(
            StatusCode::BAD_REQUEST,
            format!("{text:?} is not a campaign id (a uuid)"),
        ))
    })?;
    let records = state.store.campaigns().map_err(|e| Box::new(internal(e)))?;
    records
        .into_iter()
        .find(|r| r.id() == id)
        .ok_or_else(|| Box::new(error(StatusCode::NOT_FOUND, format!("no campaign {id}"))))
}

/// `GET /1/maintenance/<id>`.
pub async fn show(State(state): State<ApiState>, Path(id): Path<String>) -> Response {
    match find(&state, &id) {
        Ok(record) => Json(record.campaign).into_response(),
        Err(response) => *response,
    }
}

/// `POST /1/maintenance/<id>/<command>`.
pub async fn command(
    State(state): State<ApiState>,
    Path((id, command)): Path<(String, String)>,
    headers: HeaderMap,
) -> Response {
    let who = match authorize_write(&state, &headers) {
        Ok(who) => who,
        Err(refusal) => return refused(&refusal),
    };
    let _guard = state.incident_lock.lock().await;
    let mut record = match find(&state, &id) {
        Ok(record) => record,
        Err(response) => return *response,
    };
    let now = nodecare_protocol::now_ms();
    let result = match command.as_str() {
        "pause" => record.pause(now),
        "resume" => record.resume(now),
        "abort" => record.abort(now),
        other => {
            return error(
                StatusCode::NOT_FOUND,
                format!("no command {other:?} (pause, resume or abort)"),
            );
        }
    };
    if let Err(refusal) = result {
        return error(StatusCode::CONFLICT, refusal.to_string());
    }
    if let Err(e) = state.store.save_campaign(&record) {
        return internal(e);
    }
    tracing::warn!(campaign = %record.campaign.id, %who, %command, state = %record.state(), "maintenance campaign command");
    // A resume goes on, an abort stops what it can, in the next round: now.
    state.board.wake.notify_one();
    let campaign: Campaign = record.campaign;
    Json(campaign).into_response()
}
