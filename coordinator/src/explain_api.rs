//! `GET /1/explain`: why the coordinator did (or did not do) something, from the flight
//! recorder ([`crate::recorder`]). Read-only, like `/1/status`.
//!
//! | Query | Answer |
//! |---|---|
//! | `node=NODE[&at=MS]` | the last recorded round at or before `at` (default: now) that judged a proposal on the node |
//! | `record=UUID` | every recorded round where the judgement of that incident, campaign, grant, … changed |
//! | `job=ID` | the operation a Ganeti job belongs to (by the ledger, else by its reason trail) and its round |
//!
//! The answer is [`nodecare_protocol::explain::Explanation`]; `400` for a bad query, `404` for a
//! job nodecare did not submit.

use std::sync::Arc;

use axum::Json;
use axum::extract::{RawQuery, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use nodecare_protocol::explain::{Explanation, Query};
use uuid::Uuid;

use crate::api::{ApiState, error};
use crate::exec::ledger::{Ledger as _, trail_key};
use crate::recorder::{Operation, Recorded, explain_job, explain_node, explain_record};
use crate::store::Store;

/// Most recorded rounds an explanation reads (the newest).
pub const EXPLAIN_ROUNDS: usize = 2_000;

/// The operation of job `job`: its ledger entry (by job id, else by the reason trail Ganeti keeps
/// for it), or, once the ledger forgot it, what the reason trail alone says.
async fn operation_of_job(
    state: &ApiState,
    job: u64,
) -> Result<Option<Operation>, (StatusCode, String)> {
    let entries = state
        .store
        .entries()
        .map_err(|e| (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?;
    if let Some(operation) = entries
        .iter()
        .find(|e| e.job == Some(job))
        .and_then(Operation::of_entry)
    {
        return Ok(Some(operation));
    }
    let Some(ganeti) = &state.ganeti else {
        return Ok(None);
    };
    let found = match ganeti.job(job).await {
        Ok(found) => found,
        Err(crate::ganeti::GanetiError::NotFound(_)) => return Ok(None),
        Err(e) => {
            return Err((StatusCode::BAD_GATEWAY, format!("job {job}: Ganeti: {e}")));
        }
    };
    let Some((entry, reason)) = found
        .reasons
        .iter()
        .find_map(|r| crate::ganeti::Reason::parse_text(&r.text).map(|parsed| (r, parsed)))
    else {
        return Ok(None);
    };
    if let Some(operation) = entries
        .iter()
        .find(|e| e.trail() == Some(reason.incident) && trail_key(&e.key) == reason.intent)
        .and_then(Operation::of_entry)
    {
        return Ok(Some(operation));
    }
    // Forgotten by the ledger (its record was acknowledged and forgotten): the trail tells
    // whose it was and when it was submitted.
    let description = crate::ganeti::Reason::description_of(&entry.text)
        .unwrap_or_default()
        .to_owned();
    Ok(Some(Operation {
        trail: reason.incident,
        holder: None,
        intent: reason.intent,
        description,
        state: format!("{} (the record is forgotten)", found.status.as_str()),
        recorded_ms: entry.timestamp_ns / 1_000_000,
        node: None,
    }))
}

fn read_rounds(store: Arc<Store>, until_ms: Option<u64>) -> Result<Vec<Recorded>, String> {
    store
        .recorded_rounds(until_ms, EXPLAIN_ROUNDS)
        .map_err(|e| e.to_string())
}

/// The explanation `query` asks for, or the error answer (`400`, `404`, `500`, `502`) as
/// `(status, message)`.
pub async fn explanation(
    state: &ApiState,
    query: Option<&str>,
) -> Result<Explanation, (StatusCode, String)> {
    let query = Query::parse(query).map_err(|message| (StatusCode::BAD_REQUEST, message))?;
    let operation = match &query {
        Query::Job(job) => match operation_of_job(state, *job).await? {
            Some(operation) => Some(operation),
            None => {
                return Err((
                    StatusCode::NOT_FOUND,
                    format!(
                        "job {job}: not an operation of nodecare (neither in its ledger nor with its reason trail)"
                    ),
                ));
            }
        },
        _ => None,
    };
    let until = match &query {
        Query::Node { at_ms, .. } => *at_ms,
        _ => None,
    };
    let store = Arc::clone(&state.store);
    let internal = |e: String| (StatusCode::INTERNAL_SERVER_ERROR, e);
    let rounds = tokio::task::spawn_blocking(move || read_rounds(store, until))
        .await
        .map_err(|e| internal(e.to_string()))?
        .map_err(internal)?;
    Ok(match (&query, &operation) {
        (Query::Node { node, at_ms: None }, _) => {
            with_grace(explain_node(&rounds, node, None), &grace_now(state, node))
        }
        (Query::Node { node, at_ms }, _) => explain_node(&rounds, node, *at_ms),
        (Query::Record(id), _) => match Uuid::parse_str(id) {
            Ok(id) => explain_record(&rounds, id),
            Err(e) => return Err((StatusCode::BAD_REQUEST, format!("record: {e}"))),
        },
        (Query::Job(job), Some(operation)) => explain_job(&rounds, *job, operation),
        (Query::Job(_), None) => return Err(internal("job without its operation".into())),
    })
}

/// The waiting line of `node`'s grace now (the verdict it holds back, the grace's holder and
/// end), if the last round left it in the grace of a planned disruption.
fn grace_now(state: &ApiState, node: &str) -> Option<String> {
    let graces = state.board.graces.read().ok()?;
    let grace = graces.get(node)?;
    let held = state.board.held_in_grace.read().ok()?.get(node).cloned();
    let line = crate::admission::graced_waiting(
        &std::collections::BTreeMap::from([(node.to_owned(), held.clone().unwrap_or_default())]),
        &std::collections::BTreeMap::from([(node.to_owned(), grace.clone())]),
    )
    .into_iter()
    .next()?
    .blocked_by;
    // Without a verdict held back: the grace alone.
    Some(match held {
        Some(_) => line,
        None => line
            .split_once(" not acted on: ")
            .map_or(line.clone(), |(_, grace)| grace.to_owned()),
    })
}

/// `explanation` of a node now, with its grace (`grace`, [`grace_now`]) first: a node in grace
/// waits for it, so a recorded round that did not judge the node (the latest one, shown for
/// what held it) is not what holds it now and is left out.
fn with_grace(mut explanation: Explanation, grace: &Option<String>) -> Explanation {
    let Some(grace) = grace else {
        return explanation;
    };
    let judged = explanation.note.is_none();
    if !judged {
        explanation.rounds.clear();
    }
    explanation.note = Some(format!("now waiting: {grace}"));
    explanation
}

/// `GET /1/explain`.
pub async fn explain(State(state): State<ApiState>, RawQuery(query): RawQuery) -> Response {
    match explanation(&state, query.as_deref()).await {
        Ok(explanation) => Json(explanation).into_response(),
        Err((status, message)) => error(status, message),
    }
}
