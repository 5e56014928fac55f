//! Failback (IO): keeps the homecomings ([`nodecare_core::duty::failback`]) in the store
//! document `failbacks`, and turns this round's plan into balancing proposals.
//!
//! Node repair notes each completed evacuation and watches its node every round
//! ([`observe`]); the balancing duty settles what the cluster decided and proposes the moves
//! home ([`propose`]), which the balancer records and submits like hbal's
//! ([`crate::balance::Balancer::execute`], group [`GROUP`]); each submitted move counts an
//! attempt ([`attempted`]).

use std::collections::{BTreeMap, BTreeSet};

use uuid::Uuid;

use crate::board::Board;
use crate::scrape::{AgentOutcome, AgentResult};
use crate::store::{Store, StoreError};
use nodecare_core::duty::balancing::{Proposals, Proposed};
use nodecare_core::duty::failback::{
    self, FailbackConfig, FailbackPlan, Health, HomeState, Homecoming,
};
use nodecare_core::duty::node_repair::intent::Intent;
use nodecare_core::gate::{Duty, Holder, Proposal};
use nodecare_core::incident::Incident;
use nodecare_ganeti::{Instance, Node};
use nodecare_protocol::DiagnoseStatus;
use nodecare_protocol::status::{HomeboundView, HomecomingView};

/// The store document of the homecomings.
pub(crate) const FAILBACK_DOCUMENT: &str = "failbacks";

/// The node group a failback move is recorded under (its ledger entries' `group`).
pub const GROUP: &str = "failback";

/// The homecomings stored.
pub fn homecomings(store: &Store) -> Result<Vec<Homecoming>, StoreError> {
    Ok(store.document(FAILBACK_DOCUMENT)?.unwrap_or_default())
}

/// What each agent said this round, as failback reads it (by node name).
pub fn health(agents: &[AgentResult]) -> BTreeMap<String, Health> {
    agents
        .iter()
        .map(|result| {
            let health = match &result.outcome {
                AgentOutcome::Verified(o) => match o.verdict.status {
                    DiagnoseStatus::Ok => Health::Ok,
                    DiagnoseStatus::Unknown => Health::Unknown,
                    _ => Health::Failing,
                },
                _ => Health::Unknown,
            };
            (result.node.clone(), health)
        })
        .collect()
}

/// Notes the completed evacuations of `incidents` and watches their nodes (node repair's
/// observation, under the incident lock); writes the document when it changed.
pub fn observe(
    store: &Store,
    incidents: &[Incident],
    intents: &[Intent],
    nodes: &[Node],
    agents: &[AgentResult],
    now_s: f64,
) -> Result<(), StoreError> {
    let mut list = homecomings(store)?;
    let known: BTreeSet<Uuid> = list.iter().map(|h| h.incident).collect();
    let noted = failback::note(&mut list, incidents, intents, now_s);
    for homecoming in list.iter().filter(|h| !known.contains(&h.incident)) {
        tracing::info!(incident = %homecoming.incident, node = %homecoming.node,
            instances = homecoming.instances.len(),
            "failback: evacuation noted; its instances go back once the node is healthy");
    }
    let busy: BTreeSet<String> = incidents
        .iter()
        .filter(|i| i.is_active())
        .map(|i| i.node_uuid.clone())
        .collect();
    let watched = failback::watch(&mut list, nodes, &health(agents), &busy, now_s);
    if noted || watched {
        store.save_document(FAILBACK_DOCUMENT, &list)?;
    }
    Ok(())
}

/// This round's failback: settles what the cluster decided, plans the moves home (`in_flight`:
/// balancing moves in flight; `blocked`: nodes failback must not touch, with why), says what
/// waits, and returns the moves as balancing proposals (holder ids from `new_id`).
#[expect(clippy::too_many_arguments, reason = "one round's inputs")]
pub fn propose(
    store: &Store,
    board: &Board,
    config: &FailbackConfig,
    nodes: &[Node],
    instances: &[Instance],
    blocked: &BTreeMap<String, String>,
    in_flight: usize,
    now_ms: u64,
    mut new_id: impl FnMut() -> Uuid,
) -> Result<Proposals, StoreError> {
    let now_s = nodecare_protocol::clock::ms_to_s(now_ms);
    let mut list = homecomings(store)?;
    let settled = failback::settle(&mut list, nodes, instances, config, in_flight > 0, now_s);
    for (incident, instance, state) in &settled {
        match state {
            HomeState::Back => {
                tracing::info!(%incident, %instance, "failback: instance back home");
                board.metrics.balancing.failback("back", 1);
            }
            HomeState::GivenUp { why } => {
                tracing::warn!(%incident, %instance, %why, "failback: instance given up");
                board.metrics.balancing.failback("given-up", 1);
            }
            HomeState::Waiting => {}
        }
    }
    if !settled.is_empty() {
        store.save_document(FAILBACK_DOCUMENT, &list)?;
    }
    let plan = failback::plan(&list, config, nodes, instances, blocked, in_flight, now_s);
    board.metrics.balancing.failback_waiting(plan.waiting.len());
    board
        .metrics
        .balancing
        .failback("proposed", plan.moves.len());
    if let Ok(mut waiting) = board.failback_waiting.write() {
        *waiting = plan
            .waiting
            .iter()
            .map(|(instance, _, why)| (instance.clone(), why.clone()))
            .collect();
    }
    Ok(proposals(plan, now_ms, &mut new_id))
}

/// The moves of `plan` as balancing proposals.
fn proposals(plan: FailbackPlan, since_ms: u64, new_id: &mut impl FnMut() -> Uuid) -> Proposals {
    let mut out = Proposals::default();
    for planned in plan.moves {
        let id = new_id();
        out.proposals.push(Proposal {
            duty: Duty::Balancing,
            holder: Holder::Balancing { id },
            subject: format!("instance {}", planned.job.instance),
            invasiveness: 0,
            since_ms,
            disrupts: BTreeSet::new(),
            touches: planned.job.nodes(),
            fresh: false,
            moves_memory: planned.memory,
            after_releases: BTreeMap::new(),
            reason: planned.reason,
        });
        out.jobs.push(Proposed {
            group: GROUP.to_owned(),
            id,
            job: planned.job,
        });
    }
    out
}

/// Counts an attempt for each instance whose move home was submitted (`instances`).
pub fn attempted(store: &Store, instances: &[String]) -> Result<(), StoreError> {
    if instances.is_empty() {
        return Ok(());
    }
    let mut list = homecomings(store)?;
    for bound in list
        .iter_mut()
        .filter(|h| h.ended_s.is_none())
        .flat_map(|h| h.instances.iter_mut())
        .filter(|b| b.state == HomeState::Waiting && instances.contains(&b.instance))
    {
        bound.attempts += 1;
    }
    store.save_document(FAILBACK_DOCUMENT, &list)
}

/// The homecomings as the status shows them, each waiting instance with why (`waiting`, by
/// instance, from the last round).
pub fn views(list: &[Homecoming], waiting: &BTreeMap<String, String>) -> Vec<HomecomingView> {
    list.iter()
        .map(|h| HomecomingView {
            incident: h.incident.to_string(),
            node: h.node.clone(),
            healthy_since_ms: h.healthy_since_s.map(nodecare_protocol::clock::s_to_ms),
            not_ready: h.not_ready.clone(),
            ended_ms: h.ended_s.map(nodecare_protocol::clock::s_to_ms),
            instances: h
                .instances
                .iter()
                .map(|b| {
                    let (state, why) = match &b.state {
                        HomeState::Waiting => ("waiting", waiting.get(&b.instance).cloned()),
                        HomeState::Back => ("back", None),
                        HomeState::GivenUp { why } => ("given up", Some(why.clone())),
                    };
                    HomeboundView {
                        instance: b.instance.clone(),
                        state: state.to_owned(),
                        why,
                        attempts: b.attempts,
                    }
                })
                .collect(),
        })
        .collect()
}
