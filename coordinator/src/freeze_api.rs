//! Maintenance freezes at run time (`nodecare freeze`): `GET /1/freezes` (the calendar now:
//! windows, rules and freezes), `POST /1/freezes` and `DELETE /1/freezes/<id>` (write realm,
//! audited). The configuration's freezes are listed, never lifted here.

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use uuid::Uuid;

use crate::admission::{Failed, body_of, parse_id};
use crate::api::{ApiState, Writer, internal};
use crate::store::{Lifted, StoreError};
use nodecare_core::calendar::{Calendar, CalendarStatus, FreezeRequest, FreezeView};

/// The configuration's calendar with the state's freezes.
fn calendar(state: &ApiState) -> Result<Calendar, StoreError> {
    let mut calendar = Calendar::clone(&state.calendar);
    calendar.freezes.extend(state.store.freezes()?);
    Ok(calendar)
}

/// The calendar now as the API shows it.
pub(crate) fn status(state: &ApiState, now_ms: u64) -> Result<CalendarStatus, StoreError> {
    Ok(calendar(state)?.status(now_ms))
}

/// `GET /1/freezes`.
pub async fn list(State(state): State<ApiState>) -> Response {
    match status(&state, nodecare_protocol::now_ms()) {
        Ok(status) => Json(status).into_response(),
        Err(e) => internal(e),
    }
}

/// Checks and stores a freeze by `who` (the API's and the web page's).
pub(crate) fn add(
    state: &ApiState,
    who: &str,
    request: &FreezeRequest,
    now_ms: u64,
) -> Result<FreezeView, Failed> {
    let calendar = calendar(state).map_err(Failed::internal)?;
    let freeze = calendar
        .freeze_of(request, who, now_ms, Uuid::new_v4())
        .map_err(|e| Failed::new(StatusCode::BAD_REQUEST, e.to_string()))?;
    state
        .store
        .add_freeze(&freeze)
        .map_err(|error| match error {
            StoreError::Full(why) => Failed::new(StatusCode::INSUFFICIENT_STORAGE, why),
            error => Failed::internal(error),
        })?;
    tracing::warn!(id = %freeze.id, from_ms = freeze.from_ms, until_ms = freeze.until_ms, %who, reason = %freeze.reason, "maintenance freeze set: no planned work starts while it is in force");
    state.board.wake.notify_one();
    Ok(calendar.view_of(&freeze, now_ms))
}

/// `POST /1/freezes`.
pub async fn set(State(state): State<ApiState>, Writer(who): Writer, body: Bytes) -> Response {
    let request: FreezeRequest = match body_of(&body, "freeze request") {
        Ok(request) => request,
        Err(response) => return response.into_response(),
    };
    match add(&state, &who, &request, nodecare_protocol::now_ms()) {
        Ok(view) => (StatusCode::CREATED, Json(view)).into_response(),
        Err(response) => response.into_response(),
    }
}

/// Lifts a run-time freeze by `who`: the lifted freeze, or the error answer.
pub(crate) fn lift(state: &ApiState, who: &str, id: Uuid) -> Result<FreezeView, Failed> {
    let now = nodecare_protocol::now_ms();
    if state.calendar.freezes.iter().any(|f| f.id == id) {
        return Err(Failed::new(
            StatusCode::CONFLICT,
            format!("freeze {id} is the configuration's: remove it from [calendar] there"),
        ));
    }
    let calendar = calendar(state).map_err(Failed::internal)?;
    match state.store.lift_freeze(id, who, now) {
        Ok(Lifted::Now(freeze)) => {
            tracing::warn!(%id, %who, "maintenance freeze lifted");
            state.board.wake.notify_one();
            Ok(calendar.view_of(&freeze, now))
        }
        Ok(Lifted::Ended(freeze)) => Err(Failed::new(
            StatusCode::CONFLICT,
            format!(
                "freeze {id} already ended ({})",
                freeze
                    .lifted_by
                    .as_deref()
                    .map_or_else(|| "past its end".to_owned(), |by| format!("lifted by {by}"))
            ),
        )),
        Ok(Lifted::NotFound) => Err(Failed::new(
            StatusCode::NOT_FOUND,
            format!("no freeze {id}"),
        )),
        Err(e) => Err(Failed::internal(e)),
    }
}

/// `DELETE /1/freezes/<id>`.
pub async fn delete(
    State(state): State<ApiState>,
    Path(text): Path<String>,
    Writer(who): Writer,
) -> Response {
    let id = match parse_id(&text, "freeze") {
        Ok(id) => id,
        Err(response) => return response.into_response(),
    };
    match lift(&state, &who, id) {
        Ok(view) => Json(view).into_response(),
        Err(response) => response.into_response(),
    }
}
