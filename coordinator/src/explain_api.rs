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
use nodecare_protocol::explain::Explanation;
use uuid::Uuid;

use crate::api::{ApiState, error};
use crate::exec::ledger::{Entry, Ledger as _, trail_key};
use crate::recorder::{Recorded, explain_job, explain_node, explain_record};
use crate::store::Store;

/// Most recorded rounds an explanation reads (the newest).
pub const EXPLAIN_ROUNDS: usize = 2_000;

/// What a query asks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Query {
    /// A node at a time.
    Node {
        /// The node.
        node: String,
        /// The time (Unix ms; `None`: now).
        at_ms: Option<u64>,
    },
    /// A record by its uuid.
    Record(Uuid),
    /// A Ganeti job.
    Job(u64),
}

/// Reads `node=…[&at=…]`, `record=…` or `job=…` (exactly one subject; no percent-encoding:
/// node names, uuids and numbers need none).
pub fn parse_query(query: Option<&str>) -> Result<Query, String> {
    let query = query.unwrap_or("");
    let mut node = None;
    let mut at = None;
    let mut record = None;
    let mut job = None;
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (key, value) = pair
            .split_once('=')
            .ok_or_else(|| format!("{}: a key=value pair expected", clip(pair)))?;
        let slot = match key {
            "node" => &mut node,
            "at" => &mut at,
            "record" => &mut record,
            "job" => &mut job,
            other => return Err(format!("unknown parameter {:?}", clip(other))),
        };
        if slot.replace(value).is_some() {
            return Err(format!("{key}: given twice"));
        }
    }
    let number = |name: &str, text: &str| {
        text.parse::<u64>()
            .map_err(|_| format!("{name}: a whole number expected, got {:?}", clip(text)))
    };
    match (node, record, job) {
        (Some(node), None, None) => {
            nodecare_protocol::limits::check_len(
                "node",
                node,
                nodecare_protocol::limits::MAX_NAME_BYTES,
            )?;
            if node.is_empty()
                || !node
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-' || b == b'_')
            {
                return Err(format!("node: not a node name: {:?}", clip(node)));
            }
            Ok(Query::Node {
                node: node.to_owned(),
                at_ms: at.map(|at| number("at", at)).transpose()?,
            })
        }
        (None, Some(record), None) if at.is_none() => Uuid::parse_str(record)
            .map(Query::Record)
            .map_err(|_| format!("record: not a uuid: {:?}", clip(record))),
        (None, None, Some(job)) if at.is_none() => number("job", job).map(Query::Job),
        (None, Some(_) | None, Some(_) | None) if at.is_some() => {
            Err("at: only with node".to_owned())
        }
        _ => Err("exactly one of node, record or job".to_owned()),
    }
}

/// At most 64 characters of what a caller sent, for an error message.
fn clip(text: &str) -> String {
    text.chars().take(64).collect()
}

/// The ledger's entry of job `job`: by its job id, else by the reason trail Ganeti keeps for it.
async fn entry_of_job(state: &ApiState, job: u64) -> Result<Option<Entry>, (StatusCode, String)> {
    let entries = state
        .store
        .entries()
        .map_err(|e| (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?;
    if let Some(entry) = entries.iter().find(|e| e.job == Some(job)) {
        return Ok(Some(entry.clone()));
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
    let Some(reason) = found
        .reasons
        .iter()
        .find_map(|r| crate::ganeti::Reason::parse_text(&r.text))
    else {
        return Ok(None);
    };
    Ok(entries
        .into_iter()
        .find(|e| e.trail() == Some(reason.incident) && trail_key(&e.key) == reason.intent))
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
    let query = parse_query(query).map_err(|message| (StatusCode::BAD_REQUEST, message))?;
    let entry = match &query {
        Query::Job(job) => match entry_of_job(state, *job).await? {
            Some(entry) => Some(entry),
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
    Ok(match (&query, &entry) {
        (Query::Node { node, at_ms }, _) => explain_node(&rounds, node, *at_ms),
        (Query::Record(id), _) => explain_record(&rounds, *id),
        (Query::Job(job), Some(entry)) => explain_job(&rounds, *job, entry),
        (Query::Job(_), None) => return Err(internal("job without its operation".into())),
    })
}

/// `GET /1/explain`.
pub async fn explain(State(state): State<ApiState>, RawQuery(query): RawQuery) -> Response {
    match explanation(&state, query.as_deref()).await {
        Ok(explanation) => Json(explanation).into_response(),
        Err((status, message)) => error(status, message),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code")]

    use super::*;

    #[test]
    fn queries_name_exactly_one_subject() {
        assert_eq!(
            parse_query(Some("node=node3.example&at=5")),
            Ok(Query::Node {
                node: "node3.example".into(),
                at_ms: Some(5)
            })
        );
        assert_eq!(
            parse_query(Some("node=n1")),
            Ok(Query::Node {
                node: "n1".into(),
                at_ms: None
            })
        );
        assert_eq!(parse_query(Some("job=17")), Ok(Query::Job(17)));
        assert_eq!(
            parse_query(Some("record=00000000-0000-0000-0000-000000000005")),
            Ok(Query::Record(Uuid::from_u128(5)))
        );
        for (bad, says) in [
            (None, "exactly one"),
            (Some(""), "exactly one"),
            (Some("node=a&job=1"), "exactly one"),
            (Some("job=1&at=3"), "at: only with node"),
            (Some("node=a&node=b"), "given twice"),
            (Some("node=%2e%2e"), "not a node name"),
            (Some("node=a b"), "not a node name"),
            (Some("node="), "not a node name"),
            (Some("node=a&at=yesterday"), "at: a whole number"),
            (Some("job=-1"), "job: a whole number"),
            (Some("record=nope"), "not a uuid"),
            (Some("what=1"), "unknown parameter"),
            (Some("node"), "key=value"),
        ] {
            let error = parse_query(bad).unwrap_err();
            assert!(error.contains(says), "{bad:?}: {error}");
        }
        let long = format!("node={}", "a".repeat(10_000));
        assert!(parse_query(Some(&long)).is_err());
        let error = parse_query(Some(&format!("what{}=1", "x".repeat(1000)))).unwrap_err();
        assert!(error.len() < 120, "{error}");
    }
}
