//! `GET /1/explain`: why the coordinator did (or did not do) something, from the flight
//! recorder ([`crate::recorder`]). Read-only, like `/1/status`.
//!
//! | Query | Answer |
//! |---|---|
//! | `node=NODE[&at=MS]` | the last recorded round at or before `at` (default: now) that judged a proposal on the node |
//! | `record=UUID` | every recorded round where the judgement of that incident, campaign, grant, … changed; first, where an incident or campaign is now and what it waits for |
//! | `job=ID` | the operation a Ganeti job belongs to (by the ledger, else by its reason trail) and its round |
//!
//! The answer is [`nodecare_protocol::explain::Explanation`]; `400` for a bad query, `404` for a
//! job nodecare did not submit.

use std::sync::Arc;

use axum::Json;
use axum::extract::{RawQuery, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use nodecare_protocol::clock::{utc_text, utc_text_ms};
use nodecare_protocol::explain::{Explanation, Query};
use uuid::Uuid;

use crate::api::{ApiState, error};
use crate::recorder::Operation;
use crate::recorder::index::{explain_job_indexed, explain_node_indexed, explain_record_indexed};
use crate::store::{Store, StoreError};
use nodecare_exec::ledger::{Ledger as _, trail_key};

/// Most recorded rounds an explanation looks through (the newest at or before its time). It
/// chooses among them by the recorder's index and reads only the rounds it shows
/// ([`nodecare_core::recorder::index`]).
pub const EXPLAIN_ROUNDS: usize = 2_000;

/// What the flight recorder says of `node` at `at_ms` (`None`: the latest;
/// [`nodecare_core::recorder::explain_node`]), read through its index: one round.
pub fn node_from_recorder(
    store: &Store,
    node: &str,
    at_ms: Option<u64>,
) -> Result<Explanation, StoreError> {
    store.read_recorded_rounds(at_ms, EXPLAIN_ROUNDS, |rounds| {
        explain_node_indexed(rounds, node, at_ms)
    })
}

/// What the flight recorder says of record `id` ([`nodecare_core::recorder::explain_record`]),
/// read through its index: the rounds where its judgement changed, one at a time.
pub fn record_from_recorder(store: &Store, id: Uuid) -> Result<Explanation, StoreError> {
    store.read_recorded_rounds(None, EXPLAIN_ROUNDS, |rounds| {
        explain_record_indexed(rounds, id)
    })
}

/// What the flight recorder says of job `job` of `operation`
/// ([`nodecare_core::recorder::explain_job`]), read through its index: at most two rounds.
pub fn job_from_recorder(
    store: &Store,
    job: u64,
    operation: &Operation,
) -> Result<Explanation, StoreError> {
    store.read_recorded_rounds(None, EXPLAIN_ROUNDS, |rounds| {
        explain_job_indexed(rounds, job, operation)
    })
}

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
        Err(nodecare_ganeti::GanetiError::NotFound(_)) => return Ok(None),
        Err(e) => {
            return Err((StatusCode::BAD_GATEWAY, format!("job {job}: Ganeti: {e}")));
        }
    };
    let Some((entry, reason)) = found
        .reasons
        .iter()
        .find_map(|r| nodecare_ganeti::Reason::parse_text(&r.text).map(|parsed| (r, parsed)))
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
    let description = nodecare_ganeti::Reason::description_of(&entry.text)
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

/// The message of an explanation refused because [`crate::board::EXPLAIN_CONCURRENCY`] are being computed.
pub const EXPLAIN_BUSY: &str = "explanations being computed at once: try again in a second";

/// The explanation `query` asks for, or the error answer (`400`, `404`, `500`, `502`, `503`
/// while [`crate::board::EXPLAIN_CONCURRENCY`] are being computed) as `(status, message)`.
pub async fn explanation(
    state: &ApiState,
    query: Option<&str>,
) -> Result<Explanation, (StatusCode, String)> {
    let query = Query::parse(query).map_err(|message| (StatusCode::BAD_REQUEST, message))?;
    let Some(_permit) = state.board.explains.try_take() else {
        state.board.metrics.api_refused("explain_busy");
        return Err((
            StatusCode::SERVICE_UNAVAILABLE,
            format!("{} {EXPLAIN_BUSY}", crate::board::EXPLAIN_CONCURRENCY),
        ));
    };
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
    let internal = |e: String| (StatusCode::INTERNAL_SERVER_ERROR, e);
    let record = match &query {
        Query::Record(id) => match Uuid::parse_str(id) {
            Ok(id) => Some(id),
            Err(e) => return Err((StatusCode::BAD_REQUEST, format!("record: {e}"))),
        },
        _ => None,
    };
    let store = Arc::clone(&state.store);
    let recorded = {
        let query = query.clone();
        let operation = operation.clone();
        tokio::task::spawn_blocking(move || match (&query, record, &operation) {
            (Query::Node { node, at_ms }, _, _) => node_from_recorder(&store, node, *at_ms),
            (_, Some(id), _) => record_from_recorder(&store, id),
            (Query::Job(job), _, Some(operation)) => job_from_recorder(&store, *job, operation),
            _ => Err(StoreError::Corrupt("job without its operation".into())),
        })
        .await
        .map_err(|e| internal(e.to_string()))?
        .map_err(|e| internal(e.to_string()))?
    };
    Ok(match (&query, record) {
        (Query::Node { node, at_ms: None }, _) => with_grace(recorded, &grace_now(state, node)),
        (_, Some(id)) => {
            let mut explanation = recorded;
            explanation.now = record_now(state, id).map_err(internal)?;
            explanation
        }
        _ => recorded,
    })
}

/// Where the incident or campaign `id` is now and what it waits for ([`incident_now`],
/// [`campaign_now`]); nothing for another record or one the store forgot.
fn record_now(state: &ApiState, id: Uuid) -> Result<Vec<String>, String> {
    let store = &state.store;
    let incidents = store.incidents().map_err(|e| e.to_string())?;
    // A cycle of waits it is part of, with the way out.
    let snapshot = state.board.gate.read().ok().and_then(|s| s.clone());
    let cycles = crate::admission::cycle_waiting(snapshot.as_ref(), &incidents)
        .into_iter()
        .map(|w| w.blocked_by)
        .filter(|line| line.contains(&id.to_string()));
    if let Some(incident) = incidents.iter().find(|i| i.uuid == id) {
        return Ok(incident_now(incident).into_iter().chain(cycles).collect());
    }
    let cycles: Vec<String> = cycles.collect();
    let Some(record) = store
        .campaigns()
        .map_err(|e| e.to_string())?
        .into_iter()
        .find(|r| r.id() == id)
    else {
        return Ok(cycles);
    };
    let (graces, held) = state.board.graces_now();
    Ok(campaign_now(&record.campaign, &graces, &held)
        .into_iter()
        .chain(cycles)
        .collect())
}

/// An incident now, for people (pure): its node, action, status and jobs; while active, the
/// latest wait its planner or the gate recorded (`blocked_by`) and since when (the history entry
/// that recorded it), or the latest step left for a later round; once ended, how.
pub fn incident_now(incident: &nodecare_core::incident::Incident) -> Vec<String> {
    use nodecare_core::incident::RepairStatus;
    let jobs = if incident.jobs.is_empty() {
        String::new()
    } else {
        let ids: Vec<String> = incident.jobs.iter().map(ToString::to_string).collect();
        format!("; jobs {}", ids.join(", "))
    };
    let mut lines = vec![format!(
        "incident of {}: {}, {}{jobs}",
        incident.node,
        incident.action.as_str(),
        incident.repair_status.as_str()
    )];
    if let Some(said) = nodecare_core::duty::node_repair::ladder::said_of(incident) {
        lines.push(format!("opened by its node's repair history: {said}"));
    }
    let since = |event: &str| {
        incident
            .history
            .iter()
            .rev()
            .find(|h| h.event == event)
            .map_or(incident.mtime, |h| h.at)
    };
    match incident.repair_status {
        RepairStatus::Failed => lines.push(format!(
            "failed at {}: {}",
            utc_text(incident.mtime),
            incident.failure.as_deref().unwrap_or("no reason recorded")
        )),
        RepairStatus::Canceled => lines.push(format!("canceled at {}", utc_text(incident.mtime))),
        _ if incident.is_active() => {
            if let Some(why) = &incident.blocked_by {
                lines.push(format!(
                    "waiting since {}: {why}",
                    utc_text(since(&format!("blocked: {why}")))
                ));
            } else if let Some(later) = incident
                .history
                .last()
                .filter(|h| h.event.starts_with("left for a later round: "))
            {
                lines.push(format!("at {}: {}", utc_text(later.at), later.event));
            }
        }
        _ => {}
    }
    if let Some(warning) = &incident.warning {
        lines.push(format!("warning: {warning}"));
    }
    lines
}

/// A campaign now, for people (pure): its state and progress; the failure that stopped it
/// (node, step, why) and the nodes that failed before; while it runs, what keeps its next group
/// from starting and what each node of its group in flight waits for; the graces its planned
/// disruptions hold (`graces`: node → grace), with the verdicts they hold back (`held`: node →
/// verdict).
pub fn campaign_now(
    campaign: &nodecare_protocol::maintenance::Campaign,
    graces: &std::collections::BTreeMap<String, nodecare_core::gate::Grace>,
    held: &std::collections::BTreeMap<String, String>,
) -> Vec<String> {
    use nodecare_protocol::maintenance::CampaignState;
    let (done, total) = campaign.nodes_progress();
    let mut lines = vec![format!(
        "maintenance campaign {}: {}, {done} of {total} node(s) done",
        campaign.id, campaign.state
    )];
    if let Some(failure) = &campaign.failure {
        lines.push(format!(
            "failed on {} in step {} at {}: {}",
            failure.node,
            failure.step,
            utc_text_ms(failure.at_ms),
            failure.why
        ));
    }
    for failure in &campaign.failures {
        if campaign.failure.as_ref() != Some(failure) {
            lines.push(format!(
                "{} failed in step {} at {} and is left drained: {}",
                failure.node,
                failure.step,
                utc_text_ms(failure.at_ms),
                failure.why
            ));
        }
    }
    let running = matches!(
        campaign.state,
        CampaignState::Running | CampaignState::Paused | CampaignState::Aborting
    );
    if running {
        if let Some(blocked) = &campaign.blocked_by {
            lines.push(format!("waiting to start its next group: {blocked}"));
        }
        for node in campaign
            .groups
            .iter()
            .flat_map(|g| &g.nodes)
            .filter(|n| !n.step.is_final())
        {
            let waits = node
                .waiting_for
                .as_ref()
                .map_or_else(String::new, |w| format!(", waiting for {w}"));
            let deadline = node.step_deadline_ms.map_or_else(String::new, |d| {
                format!(" (times out at {})", utc_text_ms(d))
            });
            lines.push(format!(
                "{} in step {}{waits}{deadline}",
                node.node, node.step
            ));
        }
    }
    let holder = format!("maintenance campaign {}", campaign.id);
    for (node, grace) in graces.iter().filter(|(_, g)| g.holder == holder) {
        let of = if &grace.disrupted == node {
            "its disruption".to_owned()
        } else {
            format!("the disruption of {}, its DRBD peer", grace.disrupted)
        };
        let holds = held
            .get(node)
            .map_or_else(String::new, |v| format!("; verdict {v} not acted on"));
        lines.push(format!(
            "grace: {node}, of {of}, until {}{holds}",
            utc_text_ms(grace.until_ms)
        ));
    }
    lines
}

/// The waiting line of `node`'s grace now (the verdict it holds back, the grace's holder and
/// end), if the last round left it in the grace of a planned disruption.
fn grace_now(state: &ApiState, node: &str) -> Option<String> {
    let (graces, held) = state.board.graces_now();
    let grace = graces.get(node)?;
    // Without a verdict held back: the grace alone.
    Some(match held.get(node) {
        Some(verdict) => crate::grace_waiting::grace_line(node, verdict, grace).blocked_by,
        None => format!("in the {}", crate::grace_waiting::grace_text(node, grace)),
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
        Err((status, message)) => with_retry_after(status, error(status, message)),
    }
}

/// A `503` answer says when to ask again (`Retry-After: 1`).
pub fn with_retry_after(status: StatusCode, mut response: Response) -> Response {
    if status == StatusCode::SERVICE_UNAVAILABLE {
        response.headers_mut().insert(
            axum::http::header::RETRY_AFTER,
            axum::http::HeaderValue::from_static("1"),
        );
    }
    response
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code")]

    use std::collections::BTreeMap;

    use super::*;
    use nodecare_core::incident::{Action, Event, Incident, RepairStatus};
    use nodecare_protocol::maintenance::{
        CampaignGroup, CampaignNode, CampaignRequest, CampaignState, Failure, NodeStep,
    };

    fn incident() -> Incident {
        let verdict = nodecare_protocol::NodeVerdict::merge(
            [(
                "disk".to_owned(),
                nodecare_protocol::ScriptVerdict::parse(br#"{"status":"evacuate"}"#).unwrap(),
            )]
            .into_iter()
            .collect(),
        )
        .unwrap();
        let original =
            nodecare_protocol::CanonicalJson::new(&serde_json::to_value(&verdict).unwrap())
                .unwrap();
        Incident::new(
            Uuid::from_u128(7),
            "node1",
            "uuid-node1",
            verdict,
            original,
            Action::Evacuate,
            1_764_124_800.0,
        )
    }

    #[test]
    fn a_waiting_incident_says_its_latest_wait_and_since_when() {
        let mut incident = incident();
        incident
            .apply(
                Event::ActionStarted("draining node1".into()),
                1_764_124_810.0,
            )
            .unwrap();
        incident.jobs.push(4711);
        let why = "waiting to move inst3 (its secondary node2 has an active incident)";
        incident
            .apply(Event::Blocked(why.into()), 1_764_124_830.0)
            .unwrap();
        // Repeated in later rounds: still waiting since the first.
        incident
            .apply(Event::Blocked(why.into()), 1_764_124_890.0)
            .unwrap();
        assert_eq!(
            incident_now(&incident),
            vec![
                "incident of node1: evacuate, pending; jobs 4711".to_owned(),
                format!("waiting since 2025-11-26 02:40:30 UTC: {why}"),
            ]
        );
        incident.apply(Event::Unblocked, 1_764_124_900.0).unwrap();
        incident
            .apply(
                Event::Progress("left for a later round: the move of inst3".into()),
                1_764_124_900.0,
            )
            .unwrap();
        assert_eq!(
            incident_now(&incident)[1],
            "at 2025-11-26 02:41:40 UTC: left for a later round: the move of inst3"
        );
        incident
            .apply(
                Event::ActionFailed("no target with room".into()),
                1_764_124_960.0,
            )
            .unwrap();
        assert_eq!(incident.repair_status, RepairStatus::Failed);
        assert_eq!(
            incident_now(&incident)[1],
            "failed at 2025-11-26 02:42:40 UTC: no target with room"
        );
    }

    /// An incident the repair ladder opened more invasive says why, in explain and what-if.
    #[test]
    fn an_incident_opened_by_the_ladder_says_why() {
        let mut incident = incident();
        let said = "3rd live repair of node1 in 24 h (at most 2, repair_ladder.max_live_repairs): escalated to evacuate";
        incident
            .apply(Event::Progress(said.into()), 1_764_124_800.0)
            .unwrap();
        assert_eq!(
            incident_now(&incident)[1],
            format!("opened by its node's repair history: {said}")
        );
        assert_eq!(
            crate::what_if::incident_why(&incident).as_deref(),
            Some(said)
        );
    }

    #[test]
    fn two_incidents_waiting_for_each_other_s_node_are_one_line_with_the_way_out() {
        let mut a = incident();
        let mut b = incident();
        b.uuid = Uuid::from_u128(8);
        b.node = "node2".into();
        a.apply(
            Event::Blocked(
                "waiting to move inst1 (its secondary node2 has an active incident)".into(),
            ),
            1_764_124_830.0,
        )
        .unwrap();
        b.apply(
            Event::Blocked(
                "waiting to move inst2 (its secondary node1 has an active incident)".into(),
            ),
            1_764_124_830.0,
        )
        .unwrap();
        let lines = crate::admission::cycle_waiting(None, &[a.clone(), b.clone()]);
        assert_eq!(lines.len(), 1, "{lines:?}");
        assert_eq!(
            lines[0].blocked_by,
            format!(
                "incident {} and incident {} wait for each other: end one (`nodecare cancel {}` or `nodecare cancel {}`) or raise max_disrupted_nodes",
                a.uuid, b.uuid, a.uuid, b.uuid
            )
        );
        // Once one no longer waits, no cycle.
        b.apply(Event::Unblocked, 1_764_124_900.0).unwrap();
        assert!(crate::admission::cycle_waiting(None, &[a, b]).is_empty());
    }

    fn campaign() -> nodecare_protocol::maintenance::Campaign {
        nodecare_core::campaign::Record::new(
            Uuid::from_u128(3),
            CampaignRequest::new("reboot"),
            "alice",
            1_764_124_800_000,
        )
        .campaign
    }

    fn node(name: &str, step: NodeStep) -> CampaignNode {
        CampaignNode {
            node: name.into(),
            step,
            step_started_ms: None,
            step_deadline_ms: None,
            original_primaries: Vec::new(),
            boot_id_before: None,
            waiting_for: None,
            failure: None,
        }
    }

    #[test]
    fn a_campaign_says_where_it_failed_what_it_waits_for_and_its_graces() {
        let holder = "maintenance campaign 00000000-0000-0000-0000-000000000003";
        let graces = BTreeMap::from([
            (
                "node3".to_owned(),
                nodecare_core::gate::Grace {
                    until_ms: 1_764_125_400_000,
                    holder: holder.into(),
                    disrupted: "node3".into(),
                },
            ),
            (
                "node4".to_owned(),
                nodecare_core::gate::Grace {
                    until_ms: 1_764_125_400_000,
                    holder: holder.into(),
                    disrupted: "node3".into(),
                },
            ),
            (
                "node9".to_owned(),
                nodecare_core::gate::Grace {
                    until_ms: 1_764_125_400_000,
                    holder: "admission x of kured".into(),
                    disrupted: "node9".into(),
                },
            ),
        ]);
        let held = BTreeMap::from([("node4".to_owned(), "evacuate".to_owned())]);
        let mut running = campaign();
        running.groups = vec![CampaignGroup {
            index: 0,
            nodes: vec![
                CampaignNode {
                    waiting_for: Some("boot id unchanged".into()),
                    step_deadline_ms: Some(1_764_125_100_000),
                    ..node("node3", NodeStep::WaitHealthy)
                },
                node("node5", NodeStep::Done),
            ],
            started_ms: Some(1_764_124_800_000),
            finished_ms: None,
        }];
        running.planned = vec![vec!["node6".into()]];
        assert_eq!(
            campaign_now(&running, &graces, &held),
            vec![
                format!("{holder}: running, 1 of 3 node(s) done"),
                "node3 in step wait-healthy, waiting for boot id unchanged (times out at 2025-11-26 02:45:00 UTC)".to_owned(),
                "grace: node3, of its disruption, until 2025-11-26 02:50:00 UTC".to_owned(),
                "grace: node4, of the disruption of node3, its DRBD peer, until 2025-11-26 02:50:00 UTC; verdict evacuate not acted on".to_owned(),
            ]
        );
        let mut failed = running;
        failed.state = CampaignState::Failed;
        let failure = Failure {
            node: "node3".into(),
            step: NodeStep::WaitHealthy,
            why: "not healthy within 10m".into(),
            at_ms: 1_764_125_400_000,
        };
        failed.failure = Some(failure.clone());
        failed.failures = vec![failure];
        failed.groups[0].nodes[0].step = NodeStep::Failed;
        let lines = campaign_now(&failed, &BTreeMap::new(), &BTreeMap::new());
        assert_eq!(
            lines,
            vec![
                format!("{holder}: failed, 2 of 3 node(s) done"),
                "failed on node3 in step wait-healthy at 2025-11-26 02:50:00 UTC: not healthy within 10m".to_owned(),
            ]
        );
    }
}
