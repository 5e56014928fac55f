//! The gate's write API: other tools' admission requests (`/1/disruptions`, Kubernetes'
//! eviction API plus PDBs, for Ganeti), operator overrides of a failure domain
//! (`/1/overrides`) and the storm breaker's reset (`/1/breaker`).
//!
//! | Path | Answer |
//! |---|---|
//! | `POST /1/disruptions` | body [`DisruptionRequest`]: `201` + [`Grant`] when the gate admits it, `200` + the renewed grant when the same requester already holds the node, `429` + [`GateRefusal`] (`blocked_by`) when the gate refuses (also while node repairs the last round left waiting would be admitted before it and it would take their budget), `404` for a node not in the cluster, `503` before the first round or when the last round is too old |
//! | `GET /1/disruptions` | the grants in force |
//! | `DELETE /1/disruptions/<id>` | releases a grant: `200`, `404` |
//! | `POST /1/overrides` | body [`OverrideRequest`]: `201` + [`OverrideView`] |
//! | `GET /1/overrides` | overrides in force or ended within the last day |
//! | `DELETE /1/overrides/<id>` | revokes: `200`, `404`, `409` when it already ended |
//! | `GET /1/breaker` | the storm breaker ([`BreakerView`]) |
//! | `GET /1/audit[?limit=N]` | the last `N` (default 100, at most 1000) lines of the audit log of these writes, oldest first |
//! | `POST /1/breaker/reset` | optional body [`BreakerReset`]: closes it, `200`; `409` when it is closed |
//!
//! Writes need HTTP basic auth of a user with `write` in the users file (as `cancel`); every
//! write is logged and written to the store's audit log with the user, the time and the reason.
//!
//! An admission request is judged by [`nodecare_core::gate::decide`] as a proposal of the
//! [`Duty::Admission`] duty against the last round's view of the cluster ([`GateSnapshot`]),
//! with the grants, overrides and breaker as the store has them now, behind the node repairs
//! the last round left waiting (judged first, as a round judges them). The judging is serialised
//! with the round (the incident lock), so that a grant and the round's own admissions never
//! both open a failure domain.

use std::collections::BTreeSet;
use std::time::Duration;

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, RawQuery, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::json;
use uuid::Uuid;

use crate::api::{ApiState, Failed, body_of, parse_id, snapshot_of};
use crate::api::{Writer, error, internal};
use crate::store::Revoked;
use nodecare_core::calendar::CalendarNow;
use nodecare_core::gate::{
    BlockedBy, Decision, Duty, GateSnapshot, Holder, InForce, Override, Policy, Proposal,
};
use nodecare_protocol::gate::{
    AuditEntry, BreakerReset, BreakerView, Disrupted, DisruptionRequest, DomainStatus, Grant,
    OverrideRequest, OverrideView, Refusal as GateRefusal, Waiting,
};

/// The least time the last round's view stays usable for admission requests.
pub const MIN_VIEW_MAX_AGE: Duration = Duration::from_secs(300);

/// How old the last round's view may be for an admission request to be judged against it:
/// three round intervals, and at least [`MIN_VIEW_MAX_AGE`]. An older view means the rounds
/// fail or are stuck: requests get `503` rather than a judgement on stale facts.
pub fn view_max_age(round_interval: Duration) -> Duration {
    round_interval.saturating_mul(3).max(MIN_VIEW_MAX_AGE)
}

/// How long ended overrides stay listed.
const ENDED_OVERRIDES_SHOWN_MS: u64 = 86_400_000;

/// Why a request cannot be judged or is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NotAdmitted {
    /// The gate's view is missing or too old: `503`.
    Unavailable(String),
    /// The node is not in the cluster: `404`.
    UnknownNode(String),
    /// The gate refuses: `429`.
    Blocked(BlockedBy),
}

/// The disruptions in force now: the last round's (after its admissions, with what its holders
/// recorded after the decision, [`GateSnapshot::recorded_after`]), with its grants replaced by
/// the grants in force now (`grants`: node and holder, from
/// [`crate::store::Store::grants_in_force`]).
pub fn in_force_now(snapshot: &GateSnapshot, grants: Vec<(String, Holder)>) -> InForce {
    let mut in_force = snapshot.decision.in_force.clone();
    let recorded = &snapshot.recorded_after;
    for (node, holder) in &recorded.nodes {
        match in_force.nodes.get(node) {
            None | Some(Holder::Someone { .. }) => {
                in_force.touched.remove(node);
                in_force.nodes.insert(node.clone(), holder.clone());
            }
            Some(_) => {}
        }
    }
    for (node, holder) in &recorded.touched {
        if !in_force.nodes.contains_key(node) && !in_force.touched.contains_key(node) {
            in_force.touched.insert(node.clone(), holder.clone());
        }
    }
    in_force
        .nodes
        .retain(|_, holder| !matches!(holder, Holder::Grant { .. }));
    for (node, holder) in grants {
        if !snapshot.view.nodes.contains_key(&node) {
            continue;
        }
        // A grant explains a drain outside nodecare (the tool drained the node it was granted);
        // it never displaces nodecare's own holders.
        match in_force.nodes.get(&node) {
            None | Some(Holder::Someone { .. }) => {
                in_force.nodes.insert(node, holder);
            }
            Some(_) => {}
        }
    }
    in_force
}

/// What stands now beside the last round's snapshot: the overrides in force, the breaker as
/// the store has it and, when given, the calendar now.
#[derive(Debug, Clone, Copy)]
pub struct Standing<'a> {
    /// The overrides in force now.
    pub overrides: &'a [Override],
    /// The breaker as the store has it.
    pub breaker: &'a BreakerView,
    /// The calendar now (`None`: the round's).
    pub calendar: Option<&'a CalendarNow>,
}

/// The policy now: the last round's caps, with the overrides in force now, the breaker as
/// the store has it (open also when the round saw it open and nobody reset it since) and the
/// calendar now when given (a freeze set since the round counts at once).
pub fn policy_now(snapshot: &GateSnapshot, standing: Standing<'_>) -> Policy {
    let Standing {
        overrides,
        breaker,
        calendar,
    } = standing;
    let mut policy = snapshot.policy.clone();
    policy.overrides = overrides.to_vec();
    if let Some(calendar) = calendar {
        policy.calendar = calendar.clone();
    }
    let reset_since_round = breaker
        .reset_ms
        .is_some_and(|reset| reset >= snapshot.view.now_ms);
    policy.breaker = if breaker.open {
        Some(
            breaker
                .why
                .clone()
                .unwrap_or_else(|| "opened (no reason recorded)".into()),
        )
    } else if reset_since_round {
        None
    } else {
        policy.breaker
    };
    policy
}

/// The last round's view if there is one and it is recent enough (`max_age`, see
/// [`view_max_age`]) to judge a request at `now_ms`.
pub fn fresh_view(
    snapshot: Option<&GateSnapshot>,
    now_ms: u64,
    max_age: Duration,
) -> Result<&GateSnapshot, NotAdmitted> {
    let Some(snapshot) = snapshot else {
        return Err(NotAdmitted::Unavailable(
            "the coordinator has not finished a round yet: the gate has no view of the cluster; retry later".into(),
        ));
    };
    let age = now_ms.saturating_sub(snapshot.view.now_ms);
    if u128::from(age) > max_age.as_millis() {
        return Err(NotAdmitted::Unavailable(format!(
            "the gate's view of the cluster is {} s old (rounds are failing or stuck); retry later",
            age / 1000
        )));
    }
    Ok(snapshot)
}

/// Judges an admission request (pure): the gate's decision for the proposal of `holder` to
/// disrupt `request.node` now, against the last round's view (see [`fresh_view`]).
pub fn judge_request(
    snapshot: &GateSnapshot,
    grants: Vec<(String, Holder)>,
    standing: Standing<'_>,
    request: &DisruptionRequest,
    holder: Holder,
    now_ms: u64,
) -> Result<Decision, NotAdmitted> {
    if !snapshot.view.nodes.contains_key(&request.node) {
        return Err(NotAdmitted::UnknownNode(format!(
            "node {} is not in the cluster",
            request.node
        )));
    }
    let mut view = nodecare_core::gate::View::clone(&snapshot.view);
    view.now_ms = now_ms;
    let policy = policy_now(snapshot, standing);
    let in_force = in_force_now(snapshot, grants);
    let proposal = Proposal {
        duty: Duty::Admission,
        holder,
        subject: format!("node {}", request.node),
        invasiveness: 0,
        since_ms: now_ms,
        disrupts: BTreeSet::from([request.node.clone()]),
        touches: BTreeSet::new(),
        fresh: false,
        // The tool drains or reboots the node: the primaries running there must move off it
        // first, judged like an evacuation (N+1 on the healthy nodes left in its node group).
        moves_memory: view
            .nodes
            .get(&request.node)
            .and_then(|facts| facts.primary_memory),
        after_releases: std::collections::BTreeMap::new(),
        reason: format!("{} (requested by {})", request.reason, request.requester),
    };
    let decision = nodecare_core::gate::decide(&view, &policy, &in_force, vec![proposal.clone()]);
    match decision.judgements.first().map(|j| &j.outcome) {
        Some(Ok(_)) => {
            match behind_waiting_repairs(snapshot, &view, &policy, &in_force, proposal) {
                Some(blocked) => Err(NotAdmitted::Blocked(blocked)),
                None => Ok(decision),
            }
        }
        Some(Err(blocked)) => Err(NotAdmitted::Blocked(blocked.clone())),
        None => Err(NotAdmitted::Unavailable(
            "the gate judged nothing (internal error)".into(),
        )),
    }
}

/// Why the grant of `proposal` must wait for node repairs the last round left waiting, if it
/// must: judged with them ahead of it (as a round orders them, maintd's incidents first), the
/// grant would be refused while some of them would be admitted; the refusal names them. A
/// grant asked between rounds thus never takes the budget an incident waits for.
fn behind_waiting_repairs(
    snapshot: &GateSnapshot,
    view: &nodecare_core::gate::View,
    policy: &Policy,
    in_force: &InForce,
    proposal: Proposal,
) -> Option<BlockedBy> {
    let waiting: Vec<Proposal> = snapshot
        .decision
        .refused()
        .filter(|(p, _)| p.duty == Duty::NodeRepair)
        .map(|(p, _)| p.clone())
        .collect();
    if waiting.is_empty() {
        return None;
    }
    let holder = proposal.holder.clone();
    let decision = nodecare_core::gate::decide(
        view,
        policy,
        in_force,
        waiting.into_iter().chain([proposal]).collect(),
    );
    let blocked = decision
        .judgements
        .iter()
        .find(|j| j.proposal.holder == holder)
        .and_then(|j| j.outcome.clone().err())?;
    let ahead: Vec<String> = decision
        .judgements
        .iter()
        .filter(|j| j.proposal.duty == Duty::NodeRepair && j.outcome.is_ok())
        .map(|j| format!("{} ({})", j.proposal.holder, j.proposal.subject))
        .collect();
    if ahead.is_empty() {
        return None;
    }
    let first = format!(
        "node repairs waiting for the budget come first: {}",
        ahead.join(", ")
    );
    Some(match blocked {
        BlockedBy::Cap { what } => BlockedBy::Cap {
            what: format!("{first}; {what}"),
        },
        BlockedBy::Capacity { what } => BlockedBy::Capacity {
            what: format!("{first}; {what}"),
        },
        BlockedBy::Domain {
            busy,
            mut holders,
            wanted,
        } => {
            holders.push(first);
            BlockedBy::Domain {
                busy,
                holders,
                wanted,
            }
        }
        other => other,
    })
}

/// What status pages show of the gate: the failure domains now, what the last round refused,
/// the grants, overrides and the breaker.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct GateStatus {
    /// Every failure domain with its disrupted nodes and holders (empty before the first round).
    pub domains: Vec<DomainStatus>,
    /// The proposals the last round refused, with what blocks them.
    pub waiting: Vec<Waiting>,
    /// The grants in force.
    pub grants: Vec<Grant>,
    /// The overrides in force or ended within the last day.
    pub overrides: Vec<OverrideView>,
    /// The storm breaker.
    pub breaker: BreakerView,
    /// The last lines of the audit log, oldest first.
    pub audit: Vec<AuditEntry>,
    /// Maintenance windows and freezes now.
    pub calendar: nodecare_core::calendar::CalendarStatus,
    /// What needs an approval, what waits for one, the decisions.
    pub approvals: nodecare_protocol::gate::ApprovalsStatus,
    /// Completed evacuations whose instances go back to their node (failback).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub failback: Vec<nodecare_protocol::status::HomecomingView>,
}

/// How many audit lines status pages show.
pub const AUDIT_SHOWN: usize = 20;

/// The failure domains and refused proposals of `snapshot`, with the grants, overrides and
/// breaker as they are now (pure).
pub fn domains_and_waiting(
    snapshot: &GateSnapshot,
    grants: Vec<(String, Holder)>,
    overrides: Vec<Override>,
    breaker: &BreakerView,
    now_ms: u64,
) -> (Vec<DomainStatus>, Vec<Waiting>) {
    let mut view = nodecare_core::gate::View::clone(&snapshot.view);
    view.now_ms = now_ms;
    let policy = policy_now(
        snapshot,
        Standing {
            overrides: &overrides,
            breaker,
            calendar: None,
        },
    );
    let in_force = in_force_now(snapshot, grants);
    let domains = nodecare_core::gate::domain_states(&view, &policy, &in_force)
        .into_iter()
        .map(|state| DomainStatus {
            domain: state.domain,
            nodes: state.nodes,
            disrupted: state
                .disrupted
                .into_iter()
                .map(|(node, holder)| Disrupted { node, holder })
                .collect(),
            override_until_ms: state.override_until_ms,
        })
        .collect();
    let waiting = snapshot
        .decision
        .refused()
        .map(|(proposal, blocked)| Waiting {
            duty: proposal.duty.as_str().to_owned(),
            subject: proposal.subject.clone(),
            blocked_by: blocked.to_string(),
        })
        .collect();
    (domains, waiting)
}

/// The holders that wait on each other now (pure), one waiting line per cycle with the way out
/// ([`nodecare_core::waits`]): the proposals `snapshot` refused and the active `incidents`' waits,
/// against the nodes its disruptions in force and the incidents hold.
pub fn cycle_waiting(
    snapshot: Option<&GateSnapshot>,
    incidents: &[nodecare_core::incident::Incident],
) -> Vec<Waiting> {
    let mut waits: Vec<(String, String)> = snapshot
        .into_iter()
        .flat_map(|s| s.decision.refused())
        .map(|(proposal, blocked)| (proposal.holder.to_string(), blocked.to_string()))
        .collect();
    let active = incidents.iter().filter(|i| i.is_active());
    waits.extend(active.clone().filter_map(|i| {
        i.blocked_by
            .as_ref()
            .map(|why| (format!("incident {}", i.uuid), why.clone()))
    }));
    let mut held: std::collections::BTreeMap<String, String> = snapshot
        .into_iter()
        .flat_map(|s| s.in_force.nodes.iter().chain(&s.in_force.touched))
        .map(|(node, holder)| (node.clone(), holder.to_string()))
        .collect();
    for incident in active {
        held.entry(incident.node.clone())
            .or_insert_with(|| format!("incident {}", incident.uuid));
    }
    nodecare_core::waits::cycles(&nodecare_core::waits::graph(&waits, &held))
        .iter()
        .map(|cycle| Waiting {
            duty: "gate".to_owned(),
            subject: "deadlock".to_owned(),
            blocked_by: nodecare_core::waits::cycle_line(cycle),
        })
        .collect()
}

/// Reads the [`GateStatus`] from the store and the board.
pub fn gate_status(state: &ApiState) -> Result<GateStatus, crate::store::StoreError> {
    let now = nodecare_protocol::now_ms();
    let store = &state.store;
    let grants = store.grants(now)?;
    let overrides = store.overrides(now, now.saturating_sub(ENDED_OVERRIDES_SHOWN_MS))?;
    let breaker = store.breaker()?;
    let audit = store.audit_log(AUDIT_SHOWN)?;
    let snapshot = snapshot_of(state);
    let cycles = cycle_waiting(snapshot.as_ref(), &store.incidents()?);
    let (domains, waiting) = match snapshot {
        Some(snapshot) => domains_and_waiting(
            &snapshot,
            store.grants_in_force(now)?,
            store.overrides_in_force(now)?,
            &breaker,
            now,
        ),
        None => (Vec::new(), Vec::new()),
    };
    let mut waiting = waiting;
    let (graces, held) = state.board.graces_now();
    waiting.extend(crate::grace_waiting::graced_waiting(&held, &graces));
    waiting.extend(cycles);
    Ok(GateStatus {
        domains,
        waiting,
        grants,
        overrides,
        breaker,
        audit,
        calendar: crate::freeze_api::status(state, now)?,
        approvals: crate::approval_api::status(state)?,
        failback: {
            let waiting = state
                .board
                .failback_waiting
                .read()
                .map(|w| w.clone())
                .unwrap_or_default();
            crate::failback::views(&crate::failback::homecomings(&state.store)?, &waiting)
        },
    })
}

/// `GET /1/audit[?limit=N]`: the last `N` (default 100, at most 1000) lines of the audit log,
/// oldest first.
pub async fn audit(State(state): State<ApiState>, RawQuery(query): RawQuery) -> Response {
    let asked = query.as_deref().and_then(|query| {
        query
            .split('&')
            .find_map(|pair| pair.strip_prefix("limit="))
    });
    let limit = match asked.map(str::parse::<usize>) {
        None => 100,
        Some(Ok(limit)) if (1..=1000).contains(&limit) => limit,
        Some(_) => {
            return error(StatusCode::BAD_REQUEST, "limit: a number from 1 to 1000");
        }
    };
    match state.store.audit_log(limit) {
        Ok(entries) => Json(entries).into_response(),
        Err(e) => internal(e),
    }
}

/// `POST /1/disruptions`.
pub async fn request(State(state): State<ApiState>, Writer(who): Writer, body: Bytes) -> Response {
    let request: DisruptionRequest = match body_of(&body, "disruption request") {
        Ok(request) => request,
        Err(response) => return response.into_response(),
    };
    if let Err(message) = request.validate() {
        return error(StatusCode::BAD_REQUEST, message);
    }
    let _guard = state.incident_lock.lock().await;
    let now = nodecare_protocol::now_ms();
    if let Err(e) = state.store.expire_grants(now) {
        return internal(e);
    }
    let expires_ms = now.saturating_add(request.ttl_s.saturating_mul(1000));
    match state.store.grant_of(&request.node, &request.requester, now) {
        Ok(Some(mut grant)) => {
            grant.expires_ms = expires_ms;
            grant.reason.clone_from(&request.reason);
            grant.who.clone_from(&who);
            if let Err(e) = state.store.save_grant(&grant, now, true) {
                return internal(e);
            }
            tracing::info!(grant = %grant.id, node = %grant.node, requester = %grant.requester, %who, expires_ms, "disruption renewed");
            return (StatusCode::OK, Json(grant)).into_response();
        }
        Ok(None) => {}
        Err(e) => return internal(e),
    }
    let (grants, overrides, breaker) = match (
        state.store.grants_in_force(now),
        state.store.overrides_in_force(now),
        state.store.breaker(),
    ) {
        (Ok(g), Ok(o), Ok(b)) => (g, o, b),
        (Err(e), _, _) | (_, Err(e), _) | (_, _, Err(e)) => return internal(e),
    };
    let calendar = match crate::api::calendar_now(&state, now) {
        Ok(calendar) => calendar,
        Err(e) => return internal(e),
    };
    let id = Uuid::new_v4();
    let holder = Holder::Grant {
        id,
        requester: request.requester.clone(),
    };
    let snapshot = snapshot_of(&state);
    let judged = fresh_view(snapshot.as_ref(), now, state.gate_view_max_age).and_then(|view| {
        judge_request(
            view,
            grants,
            Standing {
                overrides: &overrides,
                breaker: &breaker,
                calendar: Some(&calendar),
            },
            &request,
            holder,
            now,
        )
    });
    match judged {
        Ok(decision) => {
            let how = decision
                .judgements
                .first()
                .and_then(|j| j.outcome.as_ref().ok())
                .map_or_else(String::new, |admitted| format!("{admitted:?}"));
            let grant = Grant {
                id: id.to_string(),
                node: request.node.clone(),
                reason: request.reason.clone(),
                requester: request.requester.clone(),
                granted_ms: now,
                expires_ms,
                who: who.clone(),
            };
            if let Err(e) = state.store.save_grant(&grant, now, false) {
                return internal(e);
            }
            tracing::info!(grant = %grant.id, node = %grant.node, requester = %grant.requester, %who, expires_ms, admitted = %how, reason = %grant.reason, "disruption granted");
            (StatusCode::CREATED, Json(grant)).into_response()
        }
        Err(NotAdmitted::Blocked(blocked)) => {
            tracing::info!(node = %request.node, requester = %request.requester, %who, blocked_by = %blocked, "disruption refused");
            (
                StatusCode::TOO_MANY_REQUESTS,
                Json(GateRefusal {
                    blocked_by: blocked.to_string(),
                    blocked: blocked.clone(),
                }),
            )
                .into_response()
        }
        Err(NotAdmitted::UnknownNode(message)) => error(StatusCode::NOT_FOUND, message),
        Err(NotAdmitted::Unavailable(message)) => error(StatusCode::SERVICE_UNAVAILABLE, message),
    }
}

/// `GET /1/disruptions`.
pub async fn list(State(state): State<ApiState>) -> Response {
    match state.store.grants(nodecare_protocol::now_ms()) {
        Ok(grants) => Json(grants).into_response(),
        Err(e) => internal(e),
    }
}

/// `DELETE /1/disruptions/<id>`.
pub async fn release(
    State(state): State<ApiState>,
    Path(text): Path<String>,
    Writer(who): Writer,
) -> Response {
    let id = match parse_id(&text, "disruption") {
        Ok(id) => id,
        Err(response) => return response.into_response(),
    };
    let _guard = state.incident_lock.lock().await;
    match state
        .store
        .release_grant(&id.to_string(), &who, nodecare_protocol::now_ms())
    {
        Ok(Some(grant)) => {
            tracing::info!(grant = %grant.id, node = %grant.node, requester = %grant.requester, %who, "disruption released");
            // What waited on the budget it held is judged again now, not at the next interval.
            state.board.wake.notify_one();
            Json(json!({"id": grant.id, "node": grant.node, "result": "released"})).into_response()
        }
        Ok(None) => error(
            StatusCode::NOT_FOUND,
            format!("no disruption {id} (released or expired)"),
        ),
        Err(e) => internal(e),
    }
}

/// `POST /1/overrides`.
pub async fn set_override(
    State(state): State<ApiState>,
    Writer(who): Writer,
    body: Bytes,
) -> Response {
    let request: OverrideRequest = match body_of(&body, "override request") {
        Ok(request) => request,
        Err(response) => return response.into_response(),
    };
    let now = nodecare_protocol::now_ms();
    match add_override(&state, &who, &request, now) {
        Ok(view) => (StatusCode::CREATED, Json(view)).into_response(),
        Err(response) => response.into_response(),
    }
}

/// Checks and stores an override by `who` (the API's and the web page's).
pub(crate) fn add_override(
    state: &ApiState,
    who: &str,
    request: &OverrideRequest,
    now: u64,
) -> Result<OverrideView, Failed> {
    let until_ms = request
        .until(now)
        .map_err(|message| Failed::new(StatusCode::BAD_REQUEST, message))?;
    if let Some(snapshot) = snapshot_of(state) {
        let domains: BTreeSet<&str> = snapshot
            .view
            .nodes
            .values()
            .map(|facts| facts.domain.as_str())
            .collect();
        if !domains.contains(request.domain.as_str()) {
            return Err(Failed::new(
                StatusCode::BAD_REQUEST,
                format!(
                    "no failure domain {:?} (known: {})",
                    request.domain,
                    domains.into_iter().collect::<Vec<_>>().join(", ")
                ),
            ));
        }
    }
    let new = Override {
        id: Uuid::new_v4(),
        domain: request.domain.clone(),
        until_ms,
        reason: request.reason.clone(),
        who: who.to_owned(),
        created_ms: now,
    };
    state
        .store
        .add_override(&new)
        .map_err(|error| match error {
            crate::store::StoreError::Full(why) => {
                Failed::new(StatusCode::INSUFFICIENT_STORAGE, why)
            }
            error => Failed::internal(error),
        })?;
    tracing::warn!(id = %new.id, domain = %new.domain, until_ms, %who, reason = %new.reason, "failure domain override set: its proposals skip the one-domain rule and the caps");
    state.board.wake.notify_one();
    Ok(OverrideView {
        id: new.id.to_string(),
        domain: new.domain,
        until_ms,
        reason: new.reason,
        who: new.who,
        created_ms: now,
        revoked_ms: None,
        revoked_by: None,
        active: true,
    })
}

/// `GET /1/overrides`.
pub async fn overrides(State(state): State<ApiState>) -> Response {
    let now = nodecare_protocol::now_ms();
    match state
        .store
        .overrides(now, now.saturating_sub(ENDED_OVERRIDES_SHOWN_MS))
    {
        Ok(list) => Json(list).into_response(),
        Err(e) => internal(e),
    }
}

/// Revokes an override by `who`: the revoked override, or the error answer.
pub(crate) fn revoke(state: &ApiState, who: &str, id: Uuid) -> Result<OverrideView, Failed> {
    match state
        .store
        .revoke_override(id, who, nodecare_protocol::now_ms())
    {
        Ok(Revoked::Now(view)) => {
            tracing::warn!(%id, domain = %view.domain, %who, "failure domain override revoked");
            Ok(view)
        }
        Ok(Revoked::Ended(view)) => Err(Failed::new(
            StatusCode::CONFLICT,
            format!(
                "override {id} of {} already ended ({})",
                view.domain,
                view.revoked_by
                    .as_deref()
                    .map_or_else(|| "expired".to_owned(), |by| format!("revoked by {by}"))
            ),
        )),
        Ok(Revoked::NotFound) => Err(Failed::new(
            StatusCode::NOT_FOUND,
            format!("no override {id}"),
        )),
        Err(e) => Err(Failed::internal(e)),
    }
}

/// `DELETE /1/overrides/<id>`.
pub async fn revoke_override(
    State(state): State<ApiState>,
    Path(text): Path<String>,
    Writer(who): Writer,
) -> Response {
    let id = match parse_id(&text, "override") {
        Ok(id) => id,
        Err(response) => return response.into_response(),
    };
    match revoke(&state, &who, id) {
        Ok(view) => Json(view).into_response(),
        Err(response) => response.into_response(),
    }
}

/// `GET /1/breaker`.
pub async fn breaker(State(state): State<ApiState>) -> Response {
    match state.store.breaker() {
        Ok(view) => Json(view).into_response(),
        Err(e) => internal(e),
    }
}

/// Closes the breaker by `who` (serialised with the round, which updates the breaker too): its
/// new state, or the error answer.
pub(crate) async fn reset(state: &ApiState, who: &str, why: &str) -> Result<BreakerView, Failed> {
    nodecare_protocol::limits::check_len("reason", why, nodecare_protocol::limits::MAX_TEXT_BYTES)
        .map_err(|message| Failed::new(StatusCode::BAD_REQUEST, message))?;
    let _guard = state.incident_lock.lock().await;
    match state
        .store
        .reset_breaker(who, why, nodecare_protocol::now_ms())
    {
        Ok(true) => {
            tracing::warn!(%who, reason = %why, "storm breaker reset: new disruptions may start");
            state.store.breaker().map_err(Failed::internal)
        }
        Ok(false) => Err(Failed::new(
            StatusCode::CONFLICT,
            "the storm breaker is not open",
        )),
        Err(e) => Err(Failed::internal(e)),
    }
}

/// `POST /1/breaker/reset`.
pub async fn reset_breaker(
    State(state): State<ApiState>,
    Writer(who): Writer,
    body: Bytes,
) -> Response {
    let request: BreakerReset = if body.iter().all(u8::is_ascii_whitespace) {
        BreakerReset::default()
    } else {
        match body_of(&body, "breaker reset") {
            Ok(request) => request,
            Err(response) => return response.into_response(),
        }
    };
    let why = request
        .reason
        .filter(|r| !r.trim().is_empty())
        .unwrap_or_else(|| "reset by an operator".into());
    match reset(&state, &who, &why).await {
        Ok(view) => Json(view).into_response(),
        Err(response) => response.into_response(),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use nodecare_core::gate::{Admitted, Caps, NodeFacts, StorageProblem, View};

    const NOW: u64 = 1_795_000_000_000;

    fn facts(name: &str, domain: &str) -> NodeFacts {
        NodeFacts {
            name: name.into(),
            group: "default".into(),
            domain: domain.into(),
            vm_capable: true,
            drained: false,
            offline: false,
            master: false,
            memory_free: Some(4096),
            primary_memory: Some(0),
            primaries: 0,
        }
    }

    /// Six nodes in two racks, at most two disrupted at once, nothing in force.
    fn snapshot() -> GateSnapshot {
        let nodes: BTreeMap<String, NodeFacts> = [
            ("n1", "rack:a"),
            ("n2", "rack:a"),
            ("n3", "rack:a"),
            ("n4", "rack:b"),
            ("n5", "rack:b"),
            ("n6", "rack:b"),
        ]
        .into_iter()
        .map(|(n, d)| (n.to_owned(), facts(n, d)))
        .collect();
        GateSnapshot {
            view: View {
                nodes,
                storage: Vec::new(),
                now_ms: NOW - 10_000,
            }
            .into(),
            policy: Policy {
                cluster: Caps {
                    max_disrupted_nodes: 2,
                    max_disrupted_percent: None,
                    min_healthy_nodes: 2,
                },
                ..Policy::default()
            },
            ..GateSnapshot::default()
        }
    }

    fn request(node: &str) -> DisruptionRequest {
        DisruptionRequest {
            node: node.into(),
            reason: "kernel update".into(),
            requester: "kured".into(),
            ttl_s: 600,
        }
    }

    fn grant(n: u128) -> Holder {
        Holder::Grant {
            id: Uuid::from_u128(n),
            requester: "kured".into(),
        }
    }

    fn held(pairs: &[(&str, Holder)]) -> Vec<(String, Holder)> {
        pairs
            .iter()
            .map(|(n, h)| ((*n).to_owned(), h.clone()))
            .collect()
    }

    fn judge(
        snapshot: &GateSnapshot,
        grants: Vec<(String, Holder)>,
        overrides: Vec<Override>,
        breaker: &BreakerView,
        node: &str,
    ) -> Result<Admitted, NotAdmitted> {
        fresh_view(Some(snapshot), NOW, MIN_VIEW_MAX_AGE)
            .and_then(|view| {
                judge_request(
                    view,
                    grants,
                    Standing {
                        overrides: &overrides,
                        breaker,
                        calendar: None,
                    },
                    &request(node),
                    grant(99),
                    NOW,
                )
            })
            .map(|d| d.judgements[0].outcome.clone().unwrap_or(Admitted::New))
    }

    #[test]
    fn requests_are_judged_by_the_gate() {
        let snapshot = snapshot();
        let closed = BreakerView::default();
        // Nothing in force: granted.
        assert_eq!(
            judge(&snapshot, vec![], vec![], &closed, "n1"),
            Ok(Admitted::New)
        );
        // A grant in force in rack a: more of rack a, never rack b.
        let one = held(&[("n1", grant(1))]);
        assert_eq!(
            judge(&snapshot, one.clone(), vec![], &closed, "n2"),
            Ok(Admitted::New)
        );
        match judge(&snapshot, one.clone(), vec![], &closed, "n4") {
            Err(NotAdmitted::Blocked(BlockedBy::Domain { busy, wanted, .. })) => {
                assert_eq!((busy.as_str(), wanted.as_str()), ("rack:a", "rack:b"));
            }
            other => panic!("{other:?}"),
        }
        // The node itself is held by another grant.
        assert!(matches!(
            judge(&snapshot, one.clone(), vec![], &closed, "n1"),
            Err(NotAdmitted::Blocked(BlockedBy::Conflict { .. }))
        ));
        // The cap: two in force already.
        let two = held(&[("n1", grant(1)), ("n2", grant(2))]);
        assert!(matches!(
            judge(&snapshot, two, vec![], &closed, "n3"),
            Err(NotAdmitted::Blocked(BlockedBy::Cap { .. }))
        ));
        // An override of rack b lets it open next to rack a.
        let over = Override {
            id: Uuid::from_u128(7),
            domain: "rack:b".into(),
            until_ms: NOW + 60_000,
            reason: "firmware".into(),
            who: "ops".into(),
            created_ms: NOW - 1,
        };
        assert_eq!(
            judge(&snapshot, one.clone(), vec![over.clone()], &closed, "n4"),
            Ok(Admitted::Override {
                id: Uuid::from_u128(7)
            })
        );
        // An expired override does nothing.
        let expired = Override {
            until_ms: NOW,
            ..over
        };
        assert!(matches!(
            judge(&snapshot, one, vec![expired], &closed, "n4"),
            Err(NotAdmitted::Blocked(BlockedBy::Domain { .. }))
        ));
        // Unknown storage health blocks a new domain.
        let mut unhealthy = snapshot.clone();
        std::sync::Arc::make_mut(&mut unhealthy.view)
            .storage
            .push(StorageProblem {
                nodes: BTreeSet::from(["n5".to_owned()]),
                what: "n5 (unreachable)".into(),
                unknown: true,
                drained: false,
            });
        assert!(matches!(
            judge(&unhealthy, vec![], vec![], &closed, "n1"),
            Err(NotAdmitted::Blocked(BlockedBy::Storage {
                unknown: true,
                ..
            }))
        ));
    }

    /// A node repair the last round left waiting for the budget is served before a grant asked
    /// between rounds: the grant is refused while it would take what the repair waits for
    /// (naming the incident), and granted when both fit.
    #[test]
    fn waiting_node_repairs_come_before_a_grant() {
        let mut snapshot = snapshot();
        let incident = Uuid::from_u128(42);
        let repair = Proposal {
            duty: Duty::NodeRepair,
            holder: Holder::Incident { id: incident },
            subject: "evacuate n4".into(),
            invasiveness: 2,
            since_ms: NOW - 60_000,
            disrupts: BTreeSet::from(["n4".to_owned()]),
            touches: BTreeSet::new(),
            fresh: false,
            moves_memory: Some(0),
            after_releases: std::collections::BTreeMap::new(),
            reason: "disk failing".into(),
        };
        // The last round: grant 1 held n1 (rack a), so the repair of n4 (rack b) waited.
        snapshot
            .decision
            .in_force
            .nodes
            .insert("n1".into(), grant(1));
        snapshot
            .decision
            .judgements
            .push(nodecare_core::gate::Judgement {
                proposal: repair,
                outcome: Err(BlockedBy::Domain {
                    busy: "rack:a".into(),
                    holders: vec!["n1: admission of kured".into()],
                    wanted: "rack:b".into(),
                }),
            });
        let closed = BreakerView::default();
        // Grant 1 was released since: a grant in rack a would keep rack b closed to the repair.
        match judge(&snapshot, vec![], vec![], &closed, "n2") {
            Err(NotAdmitted::Blocked(blocked)) => {
                assert!(
                    blocked.to_string().contains(&incident.to_string()),
                    "{blocked}"
                );
            }
            other => panic!("the waiting repair comes first: {other:?}"),
        }
        // In rack b, next to the repair, within the cap of two: granted.
        assert_eq!(
            judge(&snapshot, vec![], vec![], &closed, "n5"),
            Ok(Admitted::New)
        );
        // Grant 1 still in force: the repair waits for rack a whatever the grant takes, so the
        // grant is judged as before.
        let one = held(&[("n1", grant(1))]);
        assert_eq!(
            judge(&snapshot, one, vec![], &closed, "n2"),
            Ok(Admitted::New)
        );
    }

    /// Issue 25 (2): a grant lets its tool drain or reboot the node, so the primaries running
    /// there must move: their memory must fit on the healthy nodes left, like an evacuation's.
    #[test]
    fn a_grant_counts_the_memory_that_must_move_off_its_node() {
        let mut snapshot = snapshot();
        for facts in std::sync::Arc::make_mut(&mut snapshot.view)
            .nodes
            .values_mut()
        {
            facts.memory_free = Some(100);
        }
        let n1 = std::sync::Arc::make_mut(&mut snapshot.view)
            .nodes
            .get_mut("n1")
            .expect("n1");
        n1.primary_memory = Some(10 * 1024);
        n1.memory_free = Some(0);
        let closed = BreakerView::default();
        match judge(&snapshot, vec![], vec![], &closed, "n1") {
            Err(NotAdmitted::Blocked(BlockedBy::Capacity { what })) => {
                assert!(what.contains("10240 MiB"), "{what}");
            }
            other => panic!("{other:?}"),
        }
        // A node running nothing moves nothing.
        assert_eq!(
            judge(&snapshot, vec![], vec![], &closed, "n2"),
            Ok(Admitted::New)
        );
        // Unknown sizes never fit.
        std::sync::Arc::make_mut(&mut snapshot.view)
            .nodes
            .get_mut("n1")
            .expect("n1")
            .primary_memory = None;
        assert!(matches!(
            judge(&snapshot, vec![], vec![], &closed, "n1"),
            Err(NotAdmitted::Blocked(BlockedBy::Capacity { .. }))
        ));
    }

    #[test]
    fn the_breaker_is_the_stores_unless_the_round_saw_it_open_after_the_last_reset() {
        let mut snapshot = snapshot();
        let open = BreakerView {
            open: true,
            since_ms: Some(NOW - 5),
            why: Some("30 of 60 nodes want evacuate".into()),
            ..BreakerView::default()
        };
        assert_eq!(
            judge(&snapshot, vec![], vec![], &open, "n1"),
            Err(NotAdmitted::Blocked(BlockedBy::Breaker {
                why: "30 of 60 nodes want evacuate".into()
            }))
        );
        snapshot.policy.breaker = Some("storm".into());
        let never_reset = BreakerView::default();
        assert!(matches!(
            judge(&snapshot, vec![], vec![], &never_reset, "n1"),
            Err(NotAdmitted::Blocked(BlockedBy::Breaker { .. }))
        ));
        let reset_after_round = BreakerView {
            reset_ms: Some(NOW - 1),
            reset_by: Some("ops".into()),
            ..BreakerView::default()
        };
        assert_eq!(
            judge(&snapshot, vec![], vec![], &reset_after_round, "n1"),
            Ok(Admitted::New)
        );
    }

    #[test]
    fn no_or_old_view_and_unknown_nodes_are_not_judged() {
        let closed = BreakerView::default();
        let missing = fresh_view(None, NOW, MIN_VIEW_MAX_AGE).map(|_| ());
        assert!(
            matches!(&missing, Err(NotAdmitted::Unavailable(m)) if m.contains("not finished a round")),
            "{missing:?}"
        );
        let mut old = snapshot();
        std::sync::Arc::make_mut(&mut old.view).now_ms = NOW - 300_001;
        assert!(matches!(
            judge(&old, vec![], vec![], &closed, "n1"),
            Err(NotAdmitted::Unavailable(_))
        ));
        assert_eq!(view_max_age(Duration::from_secs(30)), MIN_VIEW_MAX_AGE);
        assert_eq!(
            view_max_age(Duration::from_secs(600)),
            Duration::from_secs(1800)
        );
        assert!(matches!(
            judge(&snapshot(), vec![], vec![], &closed, "n9"),
            Err(NotAdmitted::UnknownNode(_))
        ));
    }

    #[test]
    fn grants_replace_the_rounds_and_explain_outside_drains() {
        let mut snapshot = snapshot();
        let mut in_force = InForce::default();
        in_force.nodes.insert("n1".into(), grant(1));
        in_force.nodes.insert(
            "n2".into(),
            Holder::Someone {
                flag: "drained".into(),
                left_by: None,
            },
        );
        in_force.nodes.insert(
            "n3".into(),
            Holder::Incident {
                id: Uuid::from_u128(5),
            },
        );
        snapshot.decision.in_force = in_force;
        // Grant 1 was released since the round; grant 2 holds n2 (drained by its tool); a
        // grant never displaces an incident; grants of unknown nodes are ignored.
        let now = in_force_now(
            &snapshot,
            held(&[("n2", grant(2)), ("n3", grant(3)), ("n9", grant(4))]),
        );
        let expected: BTreeMap<String, Holder> = [
            ("n2".to_owned(), grant(2)),
            (
                "n3".to_owned(),
                Holder::Incident {
                    id: Uuid::from_u128(5),
                },
            ),
        ]
        .into_iter()
        .collect();
        assert_eq!(now.nodes, expected);
    }

    #[test]
    fn every_blocked_by_has_its_wire_mirror() {
        let table = vec![
            BlockedBy::Breaker { why: "w".into() },
            BlockedBy::Domain {
                busy: "a".into(),
                holders: vec!["n1: x".into()],
                wanted: "b".into(),
            },
            BlockedBy::Cap { what: "c".into() },
            BlockedBy::Storage {
                what: vec!["s".into()],
                unknown: true,
            },
            BlockedBy::Capacity { what: "m".into() },
            BlockedBy::Conflict {
                node: "n".into(),
                holder: "h".into(),
            },
            BlockedBy::UnknownNode { node: "n".into() },
        ];
        for blocked in table {
            let text = serde_json::to_string(&blocked).unwrap();
            let decoded: BlockedBy = serde_json::from_str(&text).unwrap();
            assert_eq!(decoded, blocked, "{text}");
            assert_ne!(decoded, BlockedBy::Other);
        }
    }

    /// Random clusters (domains of random sizes, some nodes drained by hand), random caps and
    /// a random stream of requests and releases: a grant never opens a second failure domain,
    /// never exceeds the cluster cap, never starts while the breaker is open, and every refusal
    /// names what blocks it.
    mod properties {
        use proptest::prelude::*;

        use super::*;

        fn cluster(
            sizes: &[usize],
            drained: &[bool],
            cap: usize,
            min_healthy: usize,
        ) -> GateSnapshot {
            let mut nodes = BTreeMap::new();
            let mut i = 0;
            for (d, size) in sizes.iter().enumerate() {
                for _ in 0..*size {
                    let name = format!("n{i}");
                    let mut f = facts(&name, &format!("rack:{d}"));
                    f.drained = drained.get(i).copied().unwrap_or(false);
                    nodes.insert(name, f);
                    i += 1;
                }
            }
            let view = View {
                nodes,
                storage: Vec::new(),
                now_ms: NOW - 1_000,
            };
            let in_force = InForce::new(&view, Vec::new());
            let policy = Policy {
                cluster: Caps {
                    max_disrupted_nodes: cap,
                    max_disrupted_percent: None,
                    min_healthy_nodes: min_healthy,
                },
                ..Policy::default()
            };
            GateSnapshot {
                decision: nodecare_core::gate::decide(&view, &policy, &in_force, Vec::new()),
                view: view.into(),
                policy,
                in_force,
                recorded_after: InForce::default(),
            }
        }

        proptest! {
            #[test]
            fn grants_keep_the_gates_rules(
                sizes in proptest::collection::vec(1usize..5, 1..4),
                drained in proptest::collection::vec(proptest::bool::weighted(0.1), 16),
                cap in 1usize..4,
                min_healthy in 0usize..3,
                breaker_open in proptest::bool::weighted(0.2),
                steps in proptest::collection::vec((0usize..16, proptest::bool::weighted(0.3)), 1..20),
            ) {
                let snapshot = cluster(&sizes, &drained, cap, min_healthy);
                let names: Vec<String> = snapshot.view.nodes.keys().cloned().collect();
                let breaker = BreakerView {
                    open: breaker_open,
                    why: breaker_open.then(|| "storm".to_owned()),
                    ..BreakerView::default()
                };
                let mut grants: Vec<(String, Holder)> = Vec::new();
                for (n, (pick, release)) in steps.into_iter().enumerate() {
                    let node = &names[pick % names.len()];
                    if release {
                        grants.retain(|(held, _)| held != node);
                        continue;
                    }
                    let holder = grant(n as u128 + 100);
                    let before = in_force_now(&snapshot, grants.clone());
                    let outcome = judge_request(
                        &snapshot, grants.clone(),
                        Standing { overrides: &[], breaker: &breaker, calendar: None },
                        &request(node), holder.clone(), NOW,
                    );
                    match outcome {
                        Ok(decision) => {
                            prop_assert!(!breaker_open);
                            let domains: BTreeSet<&str> = decision
                                .in_force
                                .nodes
                                .keys()
                                .filter_map(|n| snapshot.view.nodes.get(n))
                                .map(|f| f.domain.as_str())
                                .collect();
                            prop_assert!(domains.len() <= 1, "{domains:?}");
                            if !before.nodes.contains_key(node) {
                                prop_assert!(decision.in_force.nodes.len() <= cap);
                            }
                            grants.push((node.clone(), holder));
                        }
                        Err(NotAdmitted::Blocked(blocked)) => {
                            prop_assert!(!blocked.to_string().is_empty());
                            if breaker_open && !before.nodes.contains_key(node) {
                                let is_breaker = matches!(blocked, BlockedBy::Breaker { .. });
                                prop_assert!(is_breaker, "{blocked:?}");
                            }
                        }
                        Err(other) => prop_assert!(false, "{other:?}"),
                    }
                }
            }
        }
    }
}
