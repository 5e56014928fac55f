//! What if: the coordinator's own rounds run on a private copy of its state, with hypothetical
//! changes, until nothing changes (`GET /1/what-if`, `nodecare what-if`, `/ui/what-if`).
//!
//! It is the daemon's [`Reconciler`] with the daemon's duties, gate and executor, given
//! three things instead of the real ones, so that it can reach nothing outside the process:
//!
//! * Ganeti: a [`Simulation`] of the cluster as RAPI shows it now, whose jobs succeed at once
//!   and change the simulated cluster as Ganeti would (the drain sets the flag, a migration
//!   moves the primary); it is reached through its in-process client only;
//! * the agents: [`SimulatedAgents`], answering each node with the verdict of the recorded
//!   round (or its incident's), the hypothetical ones laid over them, storage as the recorded
//!   round saw it; and [`RepairClient::simulated`], which holds no HTTP client;
//! * the state: [`Store::private_copy`], an in-memory copy, without replication, the flight
//!   recorder off; the clock is simulated, one round interval per round.
//!
//! Bounded: at most [`MAX_NODES`] nodes, [`MAX_ROUNDS`] rounds, [`TIME_LIMIT`] of work, one
//! what-if at a time ([`WhatIfContext::permit`]).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use nodecare_ganeti_sim::Simulation;
use nodecare_ganeti_sim::model::{SimConfig, SimInstance, SimNode};
use nodecare_protocol::what_if::{
    Change, EndCampaign, EndIncident, EndNode, Ending, MAX_ROUNDS, PolicyKey, PredictedJob, Query,
    Start, Wait, WhatIf, WhatIfRound,
};
use nodecare_protocol::{CanonicalJson, DiagnoseStatus, NodeVerdict, ScriptVerdict};

use crate::board::Board;
use crate::exec::ledger::Ledger as _;
use crate::ganeti::{Ganeti, Instance, Node};
use crate::gate::StorageProblem;
use crate::incident::RepairStatus;
use crate::reconcile::{Clock, ReconcileSettings, Reconciler};
use crate::repair::RepairClient;
use crate::round::agents::{AgentFuture, AgentReader};
use crate::scrape::{
    AgentOutcome, AgentResult, AgentTarget, AgentUrls, Observation, StorageHealth,
};
use crate::store::Store;

/// Most nodes a what-if simulates.
pub const MAX_NODES: usize = 1_000;

/// Most time one what-if works (wall clock).
pub const TIME_LIMIT: Duration = Duration::from_secs(60);

/// The name hypothetical verdicts and the what-if's own records carry.
pub const WHAT_IF: &str = "what-if";

/// What a what-if needs of the daemon: its round settings and interval, and one permit.
#[derive(Debug)]
pub struct WhatIfContext {
    /// The daemon's round settings.
    pub settings: ReconcileSettings,
    /// The round interval: the simulated clock's step.
    pub interval: Duration,
    permit: tokio::sync::Semaphore,
}

impl WhatIfContext {
    /// A context for the daemon's `settings` and round `interval`.
    pub fn new(settings: ReconcileSettings, interval: Duration) -> Self {
        Self {
            settings,
            interval,
            permit: tokio::sync::Semaphore::new(1),
        }
    }

    /// The one permit: `None` while another what-if runs.
    pub fn permit(&self) -> Option<tokio::sync::SemaphorePermit<'_>> {
        self.permit.try_acquire().ok()
    }
}

/// Why a what-if could not run.
#[derive(Debug, thiserror::Error)]
pub enum WhatIfError {
    /// The question is wrong (unknown node, too many nodes, no recorded round at that time).
    #[error("{0}")]
    Input(String),
    /// Another what-if runs.
    #[error("another what-if is running; try again when it ends")]
    Busy,
    /// The live state or Ganeti could not be read.
    #[error("{0}")]
    Read(String),
}

/// The agents of a what-if: verdicts in memory, nothing sent.
#[derive(Debug)]
pub struct SimulatedAgents {
    /// Hypothetical verdicts, by node.
    hypothetical: BTreeMap<String, DiagnoseStatus>,
    /// What the recorded round saw, by node (`Ok`, `evacuate`, `unknown (…)`).
    recorded: BTreeMap<String, String>,
    /// The storage problems the recorded round saw.
    storage: Vec<StorageProblem>,
    /// The private copy (its incidents' verdicts are repeated as their agents would).
    store: Arc<Store>,
    /// The simulated repairs and hooks: a node's boot id changes with each one run there.
    repairs: RepairClient,
    sequence: AtomicU64,
}

impl SimulatedAgents {
    /// Agents answering `recorded` verdicts with `hypothetical` ones laid over them.
    pub fn new(
        store: Arc<Store>,
        repairs: RepairClient,
        recorded: BTreeMap<String, String>,
        hypothetical: BTreeMap<String, DiagnoseStatus>,
        storage: Vec<StorageProblem>,
    ) -> Self {
        Self {
            hypothetical,
            recorded,
            storage,
            store,
            repairs,
            sequence: AtomicU64::new(1),
        }
    }

    fn outcome(
        &self,
        node: &str,
        incidents: &[crate::incident::Incident],
        now_ms: u64,
    ) -> AgentOutcome {
        let of_incident = |status: DiagnoseStatus| {
            // An open incident's verdict first, else the newest one of that status.
            incidents
                .iter()
                .filter(|i| i.node == node && i.verdict.status == status)
                .max_by_key(|i| {
                    (
                        matches!(i.repair_status, RepairStatus::Noted | RepairStatus::Pending),
                        i.serial_no,
                    )
                })
                .map(|i| (i.verdict.clone(), i.original.clone()))
        };
        let status = match self.hypothetical.get(node) {
            Some(status) => *status,
            None => match self.recorded.get(node).map(String::as_str) {
                Some(seen) if seen.starts_with("unknown (") => {
                    return AgentOutcome::Unreachable(format!("as recorded: {seen}"));
                }
                Some(seen) => {
                    nodecare_protocol::what_if::parse_verdict(seen).unwrap_or(DiagnoseStatus::Ok)
                }
                None => DiagnoseStatus::Ok,
            },
        };
        let (verdict, original) = match of_incident(status) {
            Some(found) if status.is_actionable() => found,
            _ => match synthetic_verdict(status) {
                Some(made) => made,
                None => return AgentOutcome::Unverifiable("cannot make a verdict".into()),
            },
        };
        AgentOutcome::Verified(Observation {
            verdict: Arc::new(verdict),
            original: Arc::new(original),
            sequence: self.sequence.fetch_add(1, Ordering::Relaxed),
            collected_at_ms: now_ms,
            expires_at_ms: now_ms.saturating_add(600_000),
            stale_reason: None,
            // A hook (or repair) run on the node counts as a reboot: a new boot id.
            boot_id: Some(format!(
                "{WHAT_IF}-boot-{}",
                self.repairs.simulated_runs(node)
            )),
            reboot_required: None,
        })
    }
}

/// A verdict of `status` as one diagnose script named `what-if` would give it.
pub fn synthetic_verdict(status: DiagnoseStatus) -> Option<(NodeVerdict, CanonicalJson)> {
    let script = ScriptVerdict {
        status,
        command: None,
        details: serde_json::json!({ WHAT_IF: true }),
        fingerprint: None,
        reason: (status == DiagnoseStatus::Unknown).then(|| WHAT_IF.to_owned()),
    };
    let verdict = NodeVerdict::merge(BTreeMap::from([(WHAT_IF.to_owned(), script)])).ok()?;
    let original = CanonicalJson::new(&serde_json::to_value(&verdict).ok()?).ok()?;
    Some((verdict, original))
}

impl AgentReader for SimulatedAgents {
    fn diagnose<'a>(
        &'a self,
        targets: Vec<AgentTarget>,
        _sequences: &'a BTreeMap<String, u64>,
        now_ms: u64,
    ) -> AgentFuture<'a, Vec<AgentResult>> {
        Box::pin(async move {
            let incidents = self.store.incidents().unwrap_or_default();
            targets
                .into_iter()
                .map(|target| AgentResult {
                    outcome: self.outcome(&target.node, &incidents, now_ms),
                    node: target.node,
                    node_uuid: target.node_uuid,
                    elapsed: Duration::ZERO,
                })
                .collect()
        })
    }

    fn storage<'a>(
        &'a self,
        nodes: &'a [Node],
        _instances: &'a [Instance],
        _urls: &'a AgentUrls,
        sequences: &'a BTreeMap<String, u64>,
        _now_ms: u64,
    ) -> AgentFuture<'a, StorageHealth> {
        Box::pin(async move {
            let present: BTreeSet<&str> = nodes.iter().map(|n| n.name.as_str()).collect();
            StorageHealth {
                readings: BTreeMap::new(),
                problems: self
                    .storage
                    .iter()
                    .filter(|p| p.nodes.iter().all(|n| present.contains(n.as_str())))
                    .cloned()
                    .collect(),
                sequences: sequences.clone(),
            }
        })
    }
}

/// The simulated cluster: Ganeti's `nodes` and `instances` as they are now, `master` first;
/// jobs finish at once and are numbered after `last_job`.
pub fn simulate(
    master: &str,
    nodes: &[Node],
    instances: &[Instance],
    last_job: u64,
) -> Result<Simulation, WhatIfError> {
    let mut sim_nodes: Vec<SimNode> = nodes
        .iter()
        .map(|n| SimNode {
            name: n.name.clone(),
            uuid: n.uuid.clone(),
            drained: n.drained,
            offline: n.offline,
            master_candidate: n.master_candidate,
            // Not read from Ganeti: it only decides which node a drain promotes to master
            // candidate in the pool's place (the drains ask for `auto_promote`).
            master_capable: true,
            vm_capable: n.vm_capable,
            memory_total_mib: n.memory_total.unwrap_or(0),
            tags: n.tags.clone(),
            ip: n.primary_ip.clone(),
        })
        .collect();
    let Some(at) = sim_nodes.iter().position(|n| n.name == master) else {
        return Err(WhatIfError::Read(format!(
            "this coordinator's node {master} is not among Ganeti's nodes"
        )));
    };
    let first = sim_nodes.remove(at);
    sim_nodes.insert(0, first);
    let sim_instances = instances
        .iter()
        .map(|i| SimInstance {
            name: i.name.clone(),
            uuid: i.uuid.clone(),
            disk_template: i.disk_template.as_str().to_owned(),
            pnode: i.primary_node.clone(),
            snodes: i.secondary_nodes.clone(),
            memory_mib: i.memory.unwrap_or(0),
            running: i.admin_state == "up",
            tags: i.tags.clone(),
        })
        .collect();
    let sim = Simulation::new(SimConfig {
        cluster_name: WHAT_IF.to_owned(),
        nodes: sim_nodes,
        instances: sim_instances,
        job_delay_ms: 0,
        candidate_pool_size: None,
    })
    .map_err(WhatIfError::Read)?;
    sim.with_cluster(|c| c.number_jobs_after(last_job));
    Ok(sim)
}

/// What the live coordinator gives a what-if.
#[derive(Debug, Clone, Copy)]
pub struct Live<'a> {
    /// The live state (read: copied once).
    pub store: &'a Store,
    /// The live Ganeti (read: nodes and instances, once).
    pub ganeti: &'a dyn Ganeti,
    /// The daemon's settings and interval.
    pub context: &'a WhatIfContext,
}

/// Runs the what-if `query` against the live coordinator's state, changing nothing of it.
pub async fn run(live: Live<'_>, query: &Query) -> Result<WhatIf, WhatIfError> {
    let Some(_permit) = live.context.permit() else {
        return Err(WhatIfError::Busy);
    };
    let nodes = live
        .ganeti
        .nodes()
        .await
        .map_err(|e| WhatIfError::Read(format!("Ganeti: {e}")))?;
    let instances = live
        .ganeti
        .instances()
        .await
        .map_err(|e| WhatIfError::Read(format!("Ganeti: {e}")))?;
    // A wrong question costs no copy of the state.
    check(query, &nodes)?;
    let copy = live
        .store
        .private_copy()
        .map_err(|e| WhatIfError::Read(e.to_string()))?;
    let recorded = live
        .store
        .recorded_rounds(query.at_ms, 1)
        .map_err(|e| WhatIfError::Read(e.to_string()))?
        .into_iter()
        .next();
    if let (Some(at), None) = (query.at_ms, &recorded) {
        return Err(WhatIfError::Input(format!(
            "at: no round is recorded at or before {at}"
        )));
    }
    let start_ms = nodecare_protocol::now_ms();
    tokio::time::timeout(
        TIME_LIMIT,
        simulate_rounds(
            live.context,
            copy,
            &nodes,
            &instances,
            recorded.as_ref(),
            query,
            start_ms,
        ),
    )
    .await
    .map_err(|_elapsed| {
        WhatIfError::Input(format!(
            "the what-if took longer than {} s: ask for fewer rounds",
            TIME_LIMIT.as_secs()
        ))
    })?
}

/// Checks `query` against the cluster: known nodes, a cluster small enough.
pub fn check(query: &Query, nodes: &[Node]) -> Result<(), WhatIfError> {
    if nodes.len() > MAX_NODES {
        return Err(WhatIfError::Input(format!(
            "the cluster has {} nodes; a what-if simulates at most {MAX_NODES}",
            nodes.len()
        )));
    }
    let known: BTreeSet<&str> = nodes.iter().map(|n| n.name.as_str()).collect();
    for change in &query.changes {
        let named: Vec<&str> = match change {
            Change::Campaign { nodes } => nodes.iter().map(String::as_str).collect(),
            other => other.node().into_iter().collect(),
        };
        if let Some(unknown) = named.iter().find(|n| !known.contains(**n)) {
            return Err(WhatIfError::Input(format!(
                "{}: unknown node {unknown}",
                change.describe()
            )));
        }
    }
    Ok(())
}

/// Everything that tells one round's end from the next: the cluster, the incidents, the
/// ledger, the campaigns and the grants.
fn state_of(sim: &Simulation, store: &Store) -> String {
    let cluster = sim.with_cluster(|c| {
        let nodes: Vec<_> = c
            .nodes
            .values()
            .map(|n| (n.name.clone(), n.drained, n.offline, n.tags.clone()))
            .collect();
        let instances: Vec<_> = c
            .instances
            .values()
            .map(|i| (i.name.clone(), i.pnode.clone(), i.snodes.clone(), i.running))
            .collect();
        serde_json::json!([nodes, instances]).to_string()
    });
    let incidents: Vec<_> = store
        .incidents()
        .unwrap_or_default()
        .into_iter()
        .map(|i| {
            (
                i.uuid,
                i.repair_status.as_str(),
                i.blocked_by,
                i.jobs,
                i.acknowledged,
            )
        })
        .collect();
    let entries: Vec<_> = store
        .entries()
        .unwrap_or_default()
        .into_iter()
        .map(|e| (e.id, format!("{:?}", e.state)))
        .collect();
    let campaigns: Vec<_> = store
        .campaigns()
        .unwrap_or_default()
        .iter()
        .map(|r| serde_json::to_string(&r.campaign).unwrap_or_default())
        .collect();
    serde_json::json!([cluster, incidents, entries, campaigns]).to_string()
}

/// Applies the changes that are facts before the first round: flags someone else sets,
/// grants, a campaign, the policy. Verdicts are the agents'.
fn apply_changes(
    changes: &[Change],
    sim: &Simulation,
    store: &Store,
    settings: &mut ReconcileSettings,
    nodes: &[Node],
    now_ms: u64,
    until_ms: u64,
) -> Result<(), WhatIfError> {
    let input = |e: String| WhatIfError::Input(e);
    for change in changes {
        match change {
            Change::Verdict { .. } => {}
            Change::Drain { node } => sim.with_cluster(|c| {
                if let Some(n) = c.nodes.get_mut(node) {
                    n.drained = true;
                }
            }),
            Change::Offline { node } => sim.with_cluster(|c| {
                if let Some(n) = c.nodes.get_mut(node) {
                    n.offline = true;
                }
            }),
            Change::Grant { node } => {
                let grant = nodecare_protocol::gate::Grant {
                    id: uuid::Uuid::new_v4().to_string(),
                    node: node.clone(),
                    reason: WHAT_IF.to_owned(),
                    requester: WHAT_IF.to_owned(),
                    granted_ms: now_ms,
                    expires_ms: until_ms,
                    who: WHAT_IF.to_owned(),
                };
                store
                    .save_grant(&grant, now_ms, false)
                    .map_err(|e| WhatIfError::Read(e.to_string()))?;
            }
            Change::Campaign { nodes: chosen } => {
                let campaigns = store
                    .campaigns()
                    .map_err(|e| WhatIfError::Read(e.to_string()))?;
                if let Some(busy) = campaigns.iter().find(|r| !r.state().is_final()) {
                    return Err(input(format!(
                        "campaign: campaign {} is {}: one campaign at a time",
                        busy.campaign.id,
                        busy.state()
                    )));
                }
                let mut request =
                    nodecare_protocol::maintenance::CampaignRequest::new(WHAT_IF.to_owned());
                if !chosen.is_empty() {
                    request.offline = nodes
                        .iter()
                        .filter(|n| !chosen.contains(&n.name))
                        .map(|n| n.name.clone())
                        .collect();
                }
                request.reason = Some(WHAT_IF.to_owned());
                request
                    .validate()
                    .and_then(|()| {
                        crate::campaign::adopt_failure_domains(&mut request, &settings.gate.domains)
                    })
                    .map_err(|e| input(format!("campaign: {e}")))?;
                let record =
                    crate::campaign::Record::new(uuid::Uuid::new_v4(), request, WHAT_IF, now_ms);
                store
                    .save_campaign(&record)
                    .map_err(|e| WhatIfError::Read(e.to_string()))?;
            }
            Change::Policy { key, value } => {
                let value = usize::try_from(*value).unwrap_or(usize::MAX);
                match key {
                    PolicyKey::MaxDisruptedNodes => {
                        settings.gate.cluster.max_disrupted_nodes = value;
                    }
                    PolicyKey::MinHealthyNodes => settings.gate.cluster.min_healthy_nodes = value,
                }
            }
        }
    }
    Ok(())
}

/// The jobs submitted since the `from`-th submission, as predictions of round `round`.
fn jobs_since(sim: &Simulation, from: usize, round: u32) -> Vec<PredictedJob> {
    sim.submissions()
        .into_iter()
        .skip(from)
        .filter(|s| !s.internal)
        .map(|s| PredictedJob {
            round,
            operation: s.operation().unwrap_or(&s.op_id).to_owned(),
            opcode: s.op_id,
            target: s.target,
            reason: s.reason_text,
        })
        .collect()
}

/// The rounds of a what-if on the private `copy` of the state.
async fn simulate_rounds(
    context: &WhatIfContext,
    copy: Store,
    nodes: &[Node],
    instances: &[Instance],
    recorded: Option<&crate::recorder::Recorded>,
    query: &Query,
    start_ms: u64,
) -> Result<WhatIf, WhatIfError> {
    let limit = query.rounds.unwrap_or(MAX_ROUNDS).clamp(1, MAX_ROUNDS);
    let interval_ms = u64::try_from(context.interval.as_millis())
        .unwrap_or(u64::MAX)
        .max(1);
    let until_ms = start_ms.saturating_add(interval_ms.saturating_mul(u64::from(limit) + 1));
    let store = Arc::new(copy);
    let last_job = store
        .entries()
        .map_err(|e| WhatIfError::Read(e.to_string()))?
        .iter()
        .filter_map(|e| e.job)
        .chain(
            store
                .incidents()
                .map_err(|e| WhatIfError::Read(e.to_string()))?
                .iter()
                .flat_map(|i| i.jobs.iter().copied()),
        )
        .max()
        .unwrap_or(0);
    let mut settings = context.settings.clone();
    // The private copy replicates nothing and records no round; no ssconf is read.
    settings.record_rounds = false;
    settings.ssconf_dir = None;
    let sim = simulate(&settings.node_name, nodes, instances, last_job)?;
    let start_campaigns: BTreeSet<String> = store
        .campaigns()
        .map_err(|e| WhatIfError::Read(e.to_string()))?
        .iter()
        .map(|r| r.campaign.id.clone())
        .collect();
    apply_changes(
        &query.changes,
        &sim,
        &store,
        &mut settings,
        nodes,
        start_ms,
        until_ms,
    )?;
    let hypothetical: BTreeMap<String, DiagnoseStatus> = query
        .changes
        .iter()
        .filter_map(|c| match c {
            Change::Verdict { node, verdict } => Some((node.clone(), *verdict)),
            _ => None,
        })
        .collect();
    let repairs = RepairClient::simulated();
    let agents = SimulatedAgents::new(
        Arc::clone(&store),
        repairs.clone(),
        recorded
            .map(|r| r.record.verdicts.clone())
            .unwrap_or_default(),
        hypothetical,
        recorded
            .map(|r| r.record.gate.view.storage.clone())
            .unwrap_or_default(),
    );
    let now = Arc::new(AtomicU64::new(start_ms));
    let clock = {
        let now = Arc::clone(&now);
        Clock(Arc::new(move || now.load(Ordering::Relaxed)))
    };
    let board = Arc::new(Board::default());
    let start_incidents: BTreeSet<uuid::Uuid> = store
        .incidents()
        .map_err(|e| WhatIfError::Read(e.to_string()))?
        .iter()
        .map(|i| i.uuid)
        .collect();
    let start_nodes = sim.with_cluster(|c| node_states(c));
    let mut reconciler = Reconciler::with_agents(
        Arc::new(sim.client()),
        Arc::clone(&store),
        Arc::new(agents),
        repairs,
        settings,
        Arc::clone(&board),
        Arc::new(tokio::sync::Mutex::new(())),
    )
    .with_clock(clock);
    let mut rounds = Vec::new();
    let mut ending = Ending::RoundLimit { rounds: limit };
    let mut before = state_of(&sim, &store);
    for number in 1..=limit {
        let at_ms = start_ms.saturating_add(interval_ms.saturating_mul(u64::from(number - 1)));
        now.store(at_ms, Ordering::Relaxed);
        let submitted = sim.submissions().len();
        if let Ok(mut gate) = board.gate.write() {
            *gate = None;
        }
        let result = reconciler.round().await;
        let jobs = jobs_since(&sim, submitted, number);
        let gate = board.gate.read().ok().and_then(|g| g.clone());
        let (explained, waits) = match gate {
            Some(gate) if !gate.decision.judgements.is_empty() => {
                let waits = gate
                    .decision
                    .judgements
                    .iter()
                    .filter_map(|j| {
                        j.outcome.as_ref().err().map(|blocked| Wait {
                            holder: j.proposal.holder.to_string(),
                            subject: j.proposal.subject.clone(),
                            rule: blocked.rule().to_owned(),
                            why: blocked.to_string(),
                            blocked_by: Some(blocked.clone()),
                        })
                    })
                    .collect();
                let recorded = crate::recorder::Recorded {
                    round: u64::from(number),
                    last_ms: at_ms,
                    repeats: 0,
                    record: nodecare_core::recorder::RoundRecord {
                        now_ms: at_ms,
                        coordinator: WHAT_IF.to_owned(),
                        gate,
                        verdicts: BTreeMap::new(),
                    },
                };
                (
                    Some(nodecare_core::recorder::explain_round(&recorded)),
                    waits,
                )
            }
            _ => (None, Vec::new()),
        };
        let mut waits: Vec<Wait> = waits;
        // What the duties held back themselves: the incidents waiting, not refused by the gate.
        for incident in store.incidents().unwrap_or_default() {
            let holder = format!("incident {}", incident.uuid);
            let active = incident.is_active();
            if let Some(why) = incident.blocked_by.filter(|_| active)
                && !waits.iter().any(|w| w.holder == holder)
            {
                waits.push(Wait {
                    holder,
                    subject: format!("node {}", incident.node),
                    rule: nodecare_protocol::what_if::DUTY_WAITS.to_owned(),
                    why,
                    blocked_by: None,
                });
            }
        }
        let error = result.err().map(|e| e.to_string());
        let after = state_of(&sim, &store);
        let quiet = jobs.is_empty() && after == before;
        before = after;
        rounds.push(WhatIfRound {
            number,
            at_ms,
            gate: explained,
            jobs,
            waits,
            error: error.clone(),
        });
        if let Some(error) = error {
            ending = Ending::Failed {
                round: number,
                error,
            };
            break;
        }
        if quiet {
            ending = Ending::Settled { rounds: number };
            break;
        }
    }
    let end_nodes = sim.with_cluster(|c| node_states(c));
    let nodes_out = end_nodes
        .iter()
        .map(|(name, state)| EndNode {
            name: name.clone(),
            drained: state.0,
            offline: state.1,
            primaries: state.2,
            changed: start_nodes.get(name) != Some(state),
        })
        .filter(|n| n.drained || n.offline || n.changed)
        .collect();
    let incidents = store
        .incidents()
        .map_err(|e| WhatIfError::Read(e.to_string()))?
        .into_iter()
        .map(|i| EndIncident {
            uuid: i.uuid.to_string(),
            node: i.node.clone(),
            action: i.action.as_str().to_owned(),
            status: i.repair_status.as_str().to_owned(),
            blocked_by: i.blocked_by.clone(),
            new: !start_incidents.contains(&i.uuid),
        })
        .collect();
    let campaigns = store
        .campaigns()
        .map_err(|e| WhatIfError::Read(e.to_string()))?
        .iter()
        .map(|r| EndCampaign {
            id: r.campaign.id.clone(),
            state: r.state().to_string(),
            new: !start_campaigns.contains(&r.campaign.id),
        })
        .collect();
    let mut notes = vec![
        "Ganeti's jobs succeed at once; agents answer the recorded verdicts with the changes laid over them; live repairs and campaign hooks succeed at once".to_owned(),
    ];
    if recorded.is_none() {
        notes.push("no round is recorded: every agent without an incident answers Ok".into());
    }
    if query.at_ms.is_some() {
        notes.push(
            "the cluster is Ganeti's now; the recorded round gives the verdicts and storage".into(),
        );
    }
    let jobs = rounds.iter().flat_map(|r| r.jobs.clone()).collect();
    Ok(WhatIf {
        changes: query.changes.clone(),
        start: Start {
            at_ms: start_ms,
            recorded_round: recorded.map(|r| r.round),
            interval_ms,
        },
        rounds,
        jobs,
        nodes: nodes_out,
        incidents,
        campaigns,
        ending,
        notes,
    })
}

/// Each node's (drained, offline, primaries).
fn node_states(
    cluster: &nodecare_ganeti_sim::model::SimCluster,
) -> BTreeMap<String, (bool, bool, usize)> {
    cluster
        .nodes
        .values()
        .map(|n| {
            let primaries = cluster
                .instances
                .values()
                .filter(|i| i.pnode == n.name)
                .count();
            (n.name.clone(), (n.drained, n.offline, primaries))
        })
        .collect()
}
