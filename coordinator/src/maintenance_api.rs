//! The campaigns' HTTP API (`/1/maintenance`, wire types in
//! [`nodecare_protocol::maintenance`]):
//!
//! | Path | Answer |
//! |---|---|
//! | `POST /1/maintenance` | start a campaign ([`CampaignRequest`]): `201` with the [`Campaign`], its `failure_domains` the coordinator's, its `overrides` the checks before the start that its flags overrode; `400` bad request (failure domains other than the coordinator's included); `409` while another campaign is not finished, or when the checks before the start refuse it ([`nodecare_core::upgrade_check`]: running KVM instances without a pinned `machine_version`, mixed Ganeti versions; the message names them); `503` when Ganeti cannot be read for them; with `dry_run`, `200` with the checks' [`CampaignCheck`] and nothing started; write auth |
//! | `GET /1/maintenance` | every campaign, newest first ([`CampaignList`]) |
//! | `GET /1/maintenance/<id>` | one campaign; `404` unknown |
//! | `POST /1/maintenance/<id>/pause`, `/resume`, `/abort` | the command: `200` with the campaign after it; `404` unknown; `409` when its state refuses the command; write auth |
//!
//! Commands take the round's lock, so a round never works on a campaign an operator is changing.

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use nodecare_protocol::maintenance::{Campaign, CampaignCheck, CampaignList, CampaignRequest};
use uuid::Uuid;

use crate::api::{ApiState, Writer, error, internal};
use nodecare_core::campaign::Record;
use nodecare_core::upgrade_check::{UpgradeCheck, UpgradeCheckOptions};

/// `POST /1/maintenance`.
pub async fn start(State(state): State<ApiState>, Writer(who): Writer, body: Bytes) -> Response {
    let mut request: CampaignRequest = match serde_json::from_slice(&body) {
        Ok(request) => request,
        Err(e) => {
            return error(
                StatusCode::BAD_REQUEST,
                format!("not a valid campaign request: {e}"),
            );
        }
    };
    if let Err(why) = request.validate().and_then(|()| {
        nodecare_core::campaign::adopt_failure_domains(&mut request, &state.failure_domains)
    }) {
        return error(StatusCode::BAD_REQUEST, why);
    }
    let check = match upgrade_check(&state, &request).await {
        Ok(check) => check,
        Err(response) => return *response,
    };
    if request.dry_run {
        return Json(CampaignCheck {
            refused: check.refuses(),
            message: if check.refuses() {
                check.to_string()
            } else {
                String::new()
            },
            unpinned_machine_version: check.unpinned.clone(),
            mixed_versions: check.mixed_versions.clone(),
            overrides: check.overrides(),
        })
        .into_response();
    }
    if check.refuses() {
        tracing::warn!(%who, refusal = %check, "maintenance campaign refused");
        return error(StatusCode::CONFLICT, format!("campaign refused: {check}"));
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
    let mut record = Record::new(Uuid::new_v4(), request, &who, nodecare_protocol::now_ms());
    record.campaign.overrides = check.overrides();
    if let Err(e) = state.store.save_campaign(&record) {
        return internal(e);
    }
    for overridden in &record.campaign.overrides {
        tracing::warn!(campaign = %record.campaign.id, %who, %overridden, "maintenance campaign started with a check overridden");
    }
    tracing::info!(campaign = %record.campaign.id, %who, hook = %record.campaign.request.hook, "maintenance campaign started");
    // Its first group is planned by the next round: now, not at the next interval.
    state.board.wake.notify_one();
    (StatusCode::CREATED, Json(record.campaign)).into_response()
}

/// The checks before a campaign starts ([`nodecare_core::upgrade_check`]) against the cluster as
/// Ganeti answers now; `503` when Ganeti cannot be read (a campaign is not started blind).
async fn upgrade_check(
    state: &ApiState,
    request: &CampaignRequest,
) -> Result<UpgradeCheck, Box<Response>> {
    let options = UpgradeCheckOptions {
        allow_unpinned_machine_version: request.allow_unpinned_machine_version,
        allow_mixed_versions: request.allow_mixed_versions,
    };
    let Some(ganeti) = &state.ganeti else {
        return Err(Box::new(error(
            StatusCode::SERVICE_UNAVAILABLE,
            "cannot check the cluster before the campaign: no Ganeti client".to_owned(),
        )));
    };
    let unavailable = |e: nodecare_ganeti::GanetiError| {
        Box::new(error(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("cannot check the cluster before the campaign: Ganeti: {e}"),
        ))
    };
    let info = ganeti.cluster_info().await.map_err(unavailable)?;
    let nodes = ganeti.nodes().await.map_err(unavailable)?;
    let instances = ganeti.instances().await.map_err(unavailable)?;
    Ok(nodecare_core::upgrade_check::check(
        &info, &nodes, &instances, options,
    ))
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
    Writer(who): Writer,
) -> Response {
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
