//! `GET /1/what-if`: what the coordinator would do if something changed ([`crate::what_if`]).
//! Read-only, like `/1/explain`: it runs on a private copy and changes nothing.
//!
//! The query is [`nodecare_protocol::what_if::Query`]; the answer
//! [`nodecare_protocol::what_if::WhatIf`]; `400` for a bad query or an unknown node (one the
//! last round did not see is refused before any read of Ganeti), `429` when its turn does not
//! come (the caller's earlier what-if still runs or waits, too many wait, or it waited too
//! long; one runs at a time, the others wait first come, first served), `502` when Ganeti cannot be read, `503` when what-ifs are off, `500` when its thread cannot start.

use axum::Json;
use axum::extract::{RawQuery, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use nodecare_protocol::what_if::{Query, WhatIf};

use crate::api::{ApiState, error};
use crate::what_if::{Caller, Live, WhatIfError};

/// Who asks, from the connection the request came on (none: the local socket).
pub fn caller_of(extensions: &axum::http::Extensions) -> Caller {
    extensions
        .get::<axum::extract::ConnectInfo<std::net::SocketAddr>>()
        .map_or(Caller::Local, |info| Caller::Address(info.0.ip()))
}

/// The what-if `query` asks for (by a caller in the process), or the error answer as
/// `(status, message)`.
pub async fn what_if(
    state: &ApiState,
    query: Option<&str>,
) -> Result<WhatIf, (StatusCode, String)> {
    what_if_by(state, query, Caller::Local).await
}

/// The what-if `query` asks for, asked by `caller`, or the error answer.
pub async fn what_if_by(
    state: &ApiState,
    query: Option<&str>,
    caller: Caller,
) -> Result<WhatIf, (StatusCode, String)> {
    let query = Query::parse(query).map_err(|message| (StatusCode::BAD_REQUEST, message))?;
    // A question naming a node the last round did not see is answered before any read of
    // Ganeti (a node added since then is known once the next round has run).
    let seen = state.board.gate.read().ok().and_then(|gate| {
        gate.as_ref().map(|snapshot| {
            let known = snapshot.view.nodes.keys().map(String::as_str).collect();
            crate::what_if::check_names(&query, &known)
        })
    });
    if let Some(Err(e)) = seen {
        return Err((StatusCode::BAD_REQUEST, e.to_string()));
    }
    let (Some(context), Some(ganeti)) = (&state.what_if, &state.ganeti) else {
        return Err((
            StatusCode::SERVICE_UNAVAILABLE,
            "this coordinator runs no what-if".to_owned(),
        ));
    };
    let live = Live {
        store: &state.store,
        ganeti: &**ganeti,
        context,
        caller,
    };
    crate::what_if::run(live, &query).await.map_err(|e| {
        let status = match &e {
            WhatIfError::Input(_) => StatusCode::BAD_REQUEST,
            WhatIfError::Busy(_) => StatusCode::TOO_MANY_REQUESTS,
            WhatIfError::Read(_) => StatusCode::BAD_GATEWAY,
            WhatIfError::Local(_) => StatusCode::INTERNAL_SERVER_ERROR,
        };
        (status, e.to_string())
    })
}

/// `GET /1/what-if`.
pub async fn get(
    State(state): State<ApiState>,
    extensions: axum::http::Extensions,
    RawQuery(query): RawQuery,
) -> Response {
    match what_if_by(&state, query.as_deref(), caller_of(&extensions)).await {
        Ok(answer) => Json(answer).into_response(),
        Err((status, message)) => error(status, message),
    }
}
