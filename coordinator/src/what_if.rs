//! What if: the coordinator's own rounds run on a private copy of its state, with hypothetical
//! changes, until nothing changes (`GET /1/what-if`, `nodecare what-if`, `/ui/what-if`).
//!
//! It is the daemon's [`Reconciler`] with the daemon's duties, gate and executor, given
//! three things instead of the real ones, so that it can reach nothing outside the process:
//!
//! * Ganeti: a [`Simulation`] of the cluster as RAPI shows it at the request (its free memory
//!   and disk, disk sizes, instance states, unknown memory left unknown), seeded with
//!   nodecare's jobs in flight under their own ids and in their state ([`seed_jobs`]), so that
//!   the executor follows them as the daemon does; its jobs succeed at once and change the
//!   simulated cluster as Ganeti would (the drain sets the flag, a migration moves the
//!   primary); it is reached through its in-process client only;
//! * the agents: [`SimulatedAgents`], answering each node as its agent answered at the
//!   request, read through the round's own [`AgentReader`] (or, asked with `at`, with the
//!   verdicts of a recorded round), the hypothetical verdicts laid over them, the storage
//!   problems recomputed each round from the storage reports read at the request and the
//!   simulated cluster; and [`RepairClient::simulated`], which holds no HTTP client;
//! * the state: [`Store::private_copy`], an in-memory copy, without replication, the flight
//!   recorder off; the clock is simulated, one round interval per round.
//!
//! Bounded: at most [`MAX_NODES`] nodes, [`MAX_ROUNDS`] rounds, [`TIME_LIMIT`] of work, one
//! what-if at a time, the next ones waiting their turn first come, first served, one per
//! caller, at most [`MAX_WAITING`] for at most [`QUEUE_WAIT`] ([`WhatIfContext::turn`]): a
//! caller asking back to back waits behind everyone who asked meanwhile.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use nodecare_ganeti_sim::Simulation;
use nodecare_ganeti_sim::model::{SimConfig, SimInstance, SimNode};
use nodecare_protocol::what_if::{
    Change, CutBy, EndCampaign, EndIncident, EndNode, Ending, MAX_ROUNDS, PolicyKey, PolicyValue,
    PredictedJob, Query, Start, Wait, WhatIf, WhatIfRound,
};
use nodecare_protocol::{CanonicalJson, DiagnoseStatus, NodeVerdict, ScriptVerdict};

use crate::board::Board;
use crate::reconcile::{Clock, ReconcileSettings, Reconciler};
use crate::repair::RepairClient;
use crate::round::agents::{AgentFuture, AgentReader};
use crate::scrape::{
    AgentOutcome, AgentResult, AgentTarget, AgentUrls, Observation, StorageHealth,
};
use crate::store::Store;
use nodecare_core::gate::StorageProblem;
use nodecare_core::incident::RepairStatus;
use nodecare_core::storage::{StorageObservation, StorageReading};
use nodecare_exec::ledger::{Entry, Ledger as _};
use nodecare_ganeti::{
    ClusterInfo, Ganeti, GanetiFuture, Group, Instance, Job, JobCancel, JobId, JobStatus,
    JobSummary, Node, Op, Reason, TagTarget,
};

/// Most nodes a what-if simulates.
pub const MAX_NODES: usize = 1_000;

/// Most time one what-if works (wall clock).
pub const TIME_LIMIT: Duration = Duration::from_secs(60);

/// The work budget of one what-if's rounds (the processor time of the thread they run on): no
/// round starts after it, and the answer says it was cut ([`Ending::Cut`]).
pub const WORK_BUDGET: Duration = Duration::from_secs(20);

/// The wall-clock budget of one what-if's rounds: on a busy machine the rounds (at a lowered
/// priority, [`crate::background`]) get little processor time; no round starts after it.
pub const WALL_BUDGET: Duration = Duration::from_secs(40);

/// Most time a what-if waits for one of the daemon's rounds to end before it goes on
/// ([`yield_to_rounds`]).
pub const YIELD_MAX: Duration = Duration::from_secs(5);

/// The name hypothetical verdicts and the what-if's own records carry.
pub const WHAT_IF: &str = "what-if";

/// What a what-if needs of the daemon: its round settings and interval, where its rounds read
/// the agents, and one permit.
#[derive(Debug)]
pub struct WhatIfContext {
    /// What its rounds need: the daemon's settings and interval, the budgets, the daemon's
    /// rounds to give way to.
    simulating: Simulating,
    /// Where the daemon's rounds read the agents (none: the agents answer as in the last
    /// recorded round).
    agents: Option<Arc<dyn AgentReader>>,
    /// The one what-if that runs at a time; the next ones wait in turn (tokio's semaphore
    /// serves its waiters first come, first served). Its rounds hold it until they end, also
    /// when their caller went away.
    permit: Arc<tokio::sync::Semaphore>,
    /// The callers whose what-if runs or waits: one each.
    callers: std::sync::Mutex<BTreeSet<Caller>>,
    /// How long a what-if waits for its turn.
    queue_wait: Duration,
}

/// Who asks for a what-if (the address it comes from; `Local`: the local socket or the
/// process itself).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Caller {
    /// The CLI on the local socket, or a caller in the process.
    Local,
    /// A caller over the network.
    Address(std::net::IpAddr),
}

/// Most what-ifs waiting for their turn at once.
pub const MAX_WAITING: usize = 8;

/// How long a what-if waits for its turn by default.
pub const QUEUE_WAIT: Duration = Duration::from_secs(20);

/// A what-if's turn: held while it runs; its caller may ask again once it is dropped.
#[derive(Debug)]
pub struct Turn<'a> {
    permit: tokio::sync::OwnedSemaphorePermit,
    _caller: CallerMark<'a>,
}

/// Marks a caller as running or waiting until dropped.
#[derive(Debug)]
struct CallerMark<'a> {
    callers: &'a std::sync::Mutex<BTreeSet<Caller>>,
    caller: Caller,
}

impl Drop for CallerMark<'_> {
    fn drop(&mut self) {
        self.callers
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(&self.caller);
    }
}

impl WhatIfContext {
    /// A context for the daemon's `settings` and round `interval`.
    pub fn new(settings: ReconcileSettings, interval: Duration) -> Self {
        Self {
            simulating: Simulating {
                settings,
                interval,
                budget: WORK_BUDGET,
                wall_budget: WALL_BUDGET,
                rounds: None,
            },
            agents: None,
            permit: Arc::new(tokio::sync::Semaphore::new(1)),
            callers: std::sync::Mutex::new(BTreeSet::new()),
            queue_wait: QUEUE_WAIT,
        }
    }

    /// The same context, the rounds of a what-if using at most `budget` of processor time.
    #[must_use]
    pub const fn with_budget(mut self, budget: Duration) -> Self {
        self.simulating.budget = budget;
        self
    }

    /// The same context, the rounds of a what-if taking at most `budget` of wall-clock time.
    #[must_use]
    pub const fn with_wall_budget(mut self, budget: Duration) -> Self {
        self.simulating.wall_budget = budget;
        self
    }

    /// The same context, a what-if waiting at most `wait` for its turn.
    #[must_use]
    pub const fn with_queue_wait(mut self, wait: Duration) -> Self {
        self.queue_wait = wait;
        self
    }

    /// `caller`'s turn, first come, first served: refused at once while `caller` has a what-if
    /// running or waiting, or [`MAX_WAITING`] wait; refused after waiting `queue_wait`.
    pub async fn turn(&self, caller: Caller) -> Result<Turn<'_>, WhatIfError> {
        {
            let mut callers = self
                .callers
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if callers.contains(&caller) {
                return Err(WhatIfError::Busy(
                    "your earlier what-if is still running or waiting; ask again when it ends"
                        .to_owned(),
                ));
            }
            if callers.len() > MAX_WAITING {
                return Err(WhatIfError::Busy(format!(
                    "{MAX_WAITING} what-ifs wait already; try again later"
                )));
            }
            callers.insert(caller);
        }
        let mark = CallerMark {
            callers: &self.callers,
            caller,
        };
        match tokio::time::timeout(self.queue_wait, Arc::clone(&self.permit).acquire_owned()).await
        {
            Ok(Ok(permit)) => Ok(Turn {
                permit,
                _caller: mark,
            }),
            Ok(Err(_closed)) => Err(WhatIfError::Busy("what-ifs are stopping".to_owned())),
            Err(_elapsed) => Err(WhatIfError::Busy(format!(
                "waited {} s behind other what-ifs; try again later",
                self.queue_wait.as_secs()
            ))),
        }
    }

    /// The same context reading the agents at each request through `agents`, as the
    /// daemon's rounds do.
    #[must_use]
    pub fn with_agents(mut self, agents: Arc<dyn AgentReader>) -> Self {
        self.agents = Some(agents);
        self
    }

    /// The same context yielding to the daemon's rounds (`running`: [`Board::round_running`]):
    /// it reads the cluster and runs each simulated round only while none runs (waiting at most
    /// [`YIELD_MAX`] each time).
    #[must_use]
    pub fn with_rounds(mut self, running: tokio::sync::watch::Receiver<bool>) -> Self {
        self.simulating.rounds = Some(running);
        self
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
    /// Its turn did not come (the caller's earlier what-if runs, too many wait, or it waited
    /// too long), and why.
    #[error("{0}")]
    Busy(String),
    /// The live state or Ganeti could not be read.
    #[error("{0}")]
    Read(String),
    /// The coordinator could not run it (its thread could not start).
    #[error("{0}")]
    Local(String),
}

/// How the agents of a what-if answer, hypothetical verdicts aside.
#[derive(Debug, Clone)]
pub enum Answers {
    /// As each one answered at the request (offline nodes are not read).
    Read(BTreeMap<String, AgentOutcome>),
    /// As a recorded round saw them (`Ok`, `evacuate`, `unknown (…)`).
    Recorded(BTreeMap<String, String>),
}

/// The storage health of a what-if's rounds.
#[derive(Debug, Clone)]
pub enum Storage {
    /// The storage reports read at the request: each round judges them against the simulated
    /// cluster as it is then (a node not read reports no DRBD minor).
    Read(BTreeMap<String, StorageReading>),
    /// The storage problems a recorded round saw.
    Recorded(Vec<StorageProblem>),
}

/// The agents of a what-if: verdicts in memory, nothing sent.
#[derive(Debug)]
pub struct SimulatedAgents {
    /// Hypothetical verdicts, by node.
    hypothetical: BTreeMap<String, DiagnoseStatus>,
    /// How the nodes answer otherwise.
    answers: Answers,
    /// The storage reports or problems.
    storage: Storage,
    /// The private copy (its incidents' verdicts are repeated as their agents would).
    store: Arc<Store>,
    /// The simulated repairs and hooks: a node's boot id changes with each one run there.
    repairs: RepairClient,
    sequence: AtomicU64,
    /// Whether one of the daemon's rounds runs: each read waits for it to end.
    rounds: Option<tokio::sync::watch::Receiver<bool>>,
}

impl SimulatedAgents {
    /// Agents answering `answers` with `hypothetical` verdicts laid over them.
    pub fn new(
        store: Arc<Store>,
        repairs: RepairClient,
        answers: Answers,
        hypothetical: BTreeMap<String, DiagnoseStatus>,
        storage: Storage,
    ) -> Self {
        Self {
            hypothetical,
            answers,
            storage,
            store,
            repairs,
            sequence: AtomicU64::new(1),
            rounds: None,
        }
    }

    /// The same agents waiting, before each read, while one of the daemon's rounds runs
    /// (`running`: [`Board::round_running`]).
    #[must_use]
    pub fn yielding_to(mut self, running: Option<tokio::sync::watch::Receiver<bool>>) -> Self {
        self.rounds = running;
        self
    }

    /// The boot id a node reports: after a hook (or repair) run there by the simulation, a new
    /// one, as after a reboot.
    fn boot_id(&self, node: &str, read: Option<&String>) -> Option<String> {
        match self.repairs.simulated_runs(node) {
            0 => read.cloned(),
            runs => Some(format!("{WHAT_IF}-boot-{runs}")),
        }
    }

    /// `read`, as the agent reports it again at `now_ms` (the same verdict, a fresh report).
    fn again(&self, node: &str, read: &Observation, now_ms: u64) -> Observation {
        let lifetime = read
            .expires_at_ms
            .saturating_sub(read.collected_at_ms)
            .max(60_000);
        Observation {
            sequence: read
                .sequence
                .max(self.sequence.fetch_add(1, Ordering::Relaxed)),
            collected_at_ms: now_ms,
            expires_at_ms: now_ms.saturating_add(lifetime),
            boot_id: self.boot_id(node, read.boot_id.as_ref()),
            ..read.clone()
        }
    }

    fn outcome(
        &self,
        node: &str,
        incidents: &[nodecare_core::incident::Incident],
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
        let status = match (self.hypothetical.get(node), &self.answers) {
            (Some(status), _) => *status,
            (None, Answers::Read(read)) => {
                return match read.get(node) {
                    Some(AgentOutcome::Verified(o)) => {
                        AgentOutcome::Verified(self.again(node, o, now_ms))
                    }
                    Some(other) => other.clone(),
                    // Offline at the request, online since: it answers as a healthy node.
                    None => self.made(DiagnoseStatus::Ok, None, node, now_ms),
                };
            }
            (None, Answers::Recorded(recorded)) => match recorded.get(node).map(String::as_str) {
                Some(seen) if seen.starts_with("unknown (") => {
                    return AgentOutcome::Unreachable(format!("as recorded: {seen}"));
                }
                Some(seen) => {
                    nodecare_protocol::what_if::parse_verdict(seen).unwrap_or(DiagnoseStatus::Ok)
                }
                None => DiagnoseStatus::Ok,
            },
        };
        let found = of_incident(status).filter(|_| status.is_actionable());
        self.made(status, found, node, now_ms)
    }

    /// A verified report of `status` (the verdict of an incident found, else one made).
    fn made(
        &self,
        status: DiagnoseStatus,
        found: Option<(NodeVerdict, CanonicalJson)>,
        node: &str,
        now_ms: u64,
    ) -> AgentOutcome {
        let read_boot = match &self.answers {
            Answers::Read(read) => match read.get(node) {
                Some(AgentOutcome::Verified(o) | AgentOutcome::Stale(o)) => o.boot_id.clone(),
                _ => None,
            },
            Answers::Recorded(_) => None,
        };
        let (verdict, original) = match found.or_else(|| synthetic_verdict(status)) {
            Some(made) => made,
            None => return AgentOutcome::Unverifiable("cannot make a verdict".into()),
        };
        AgentOutcome::Verified(Observation {
            verdict: Arc::new(verdict),
            original: Arc::new(original),
            sequence: self.sequence.fetch_add(1, Ordering::Relaxed),
            collected_at_ms: now_ms,
            expires_at_ms: now_ms.saturating_add(600_000),
            stale_reason: None,
            // A hook (or repair) run on the node counts as a reboot: a new boot id.
            boot_id: match &self.answers {
                Answers::Read(_) => self.boot_id(node, read_boot.as_ref()),
                Answers::Recorded(_) => Some(format!(
                    "{WHAT_IF}-boot-{}",
                    self.repairs.simulated_runs(node)
                )),
            },
            reboot_required: None,
        })
    }
}

/// The storage reports of `readings` as the agents of `nodes` report them again at `now_ms`;
/// a node holding DRBD instances that was not read reports no minor.
pub fn storage_again(
    nodes: &[Node],
    instances: &[Instance],
    readings: &BTreeMap<String, StorageReading>,
    now_ms: u64,
) -> BTreeMap<String, StorageReading> {
    let drbd = nodecare_core::storage::drbd_nodes(nodes, instances);
    nodes
        .iter()
        .filter(|n| !n.offline)
        .filter(|n| readings.contains_key(&n.name) || drbd.contains(&n.name))
        .map(|n| {
            let again = match readings.get(&n.name) {
                Some(StorageReading::Verified(o)) => {
                    let mut o = o.clone();
                    let lifetime = o.expires_at_ms.saturating_sub(o.payload.collected_at_ms);
                    o.payload.collected_at_ms = now_ms;
                    o.expires_at_ms = now_ms.saturating_add(lifetime.max(60_000));
                    StorageReading::Verified(o)
                }
                Some(missing) => missing.clone(),
                None => StorageReading::Verified(StorageObservation {
                    payload: nodecare_protocol::storage::StoragePayload {
                        drbd: nodecare_protocol::DrbdState::Minors { minors: Vec::new() },
                        collected_at_ms: now_ms,
                        interval_ms: 10_000,
                    },
                    sequence: 0,
                    expires_at_ms: now_ms.saturating_add(600_000),
                }),
            };
            (n.name.clone(), again)
        })
        .collect()
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
            yield_to_rounds(self.rounds.as_ref()).await;
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
        instances: &'a [Instance],
        _urls: &'a AgentUrls,
        sequences: &'a BTreeMap<String, u64>,
        now_ms: u64,
    ) -> AgentFuture<'a, StorageHealth> {
        Box::pin(async move {
            yield_to_rounds(self.rounds.as_ref()).await;
            match &self.storage {
                Storage::Read(readings) => {
                    let readings = storage_again(nodes, instances, readings, now_ms);
                    StorageHealth {
                        problems: nodecare_core::storage::storage_problems(
                            nodes,
                            instances,
                            &readings,
                            now_ms,
                            crate::scrape::DEFAULT_STORAGE_MAX_AGE_MS,
                        ),
                        readings,
                        sequences: sequences.clone(),
                    }
                }
                Storage::Recorded(problems) => {
                    let present: BTreeSet<&str> = nodes.iter().map(|n| n.name.as_str()).collect();
                    StorageHealth {
                        readings: BTreeMap::new(),
                        problems: problems
                            .iter()
                            .filter(|p| p.nodes.iter().all(|n| present.contains(n.as_str())))
                            .cloned()
                            .collect(),
                        sequences: sequences.clone(),
                    }
                }
            }
        })
    }
}

/// The simulated cluster: Ganeti's `nodes` and `instances` as RAPI shows them now, `master`
/// first: their free memory (unknown stays unknown), free disk, disk sizes and states; jobs
/// finish at once and are numbered after `last_job`.
pub fn simulate(
    master: &str,
    nodes: &[Node],
    instances: &[Instance],
    last_job: u64,
) -> Result<Simulation, WhatIfError> {
    // The memory the running primaries use, as the simulation counts it: what RAPI shows in
    // use beyond that stays in use (the hypervisor's, other processes').
    let mut used: BTreeMap<&str, u64> = BTreeMap::new();
    let running = |i: &Instance| matches!(i.status.as_str(), "running" | "ERROR_up");
    for i in instances.iter().filter(|i| running(i)) {
        *used.entry(i.primary_node.as_str()).or_default() += i.memory.unwrap_or(0);
    }
    let mut sim_nodes: Vec<SimNode> = nodes
        .iter()
        .map(|n| {
            let known = n.memory_total.zip(n.memory_free);
            SimNode {
                name: n.name.clone(),
                uuid: n.uuid.clone(),
                drained: n.drained,
                offline: n.offline,
                master_candidate: n.master_candidate,
                // Not read from Ganeti: it only decides which node a drain promotes to master
                // candidate in the pool's place (the drains ask for `auto_promote`).
                master_capable: true,
                vm_capable: n.vm_capable,
                memory_total_mib: known.map_or(0, |(total, _)| total),
                memory_reserved_mib: known.map_or(0, |(total, free)| {
                    total
                        .saturating_sub(free)
                        .saturating_sub(used.get(n.name.as_str()).copied().unwrap_or(0))
                }),
                memory_unknown: known.is_none() && !n.offline,
                disk_free_mib: Some(n.disk_free.unwrap_or(0)),
                tags: n.tags.clone(),
                ip: n.primary_ip.clone(),
            }
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
            // Unknown memory stays unknown: RAPI's `maxmem` 0 reads as none.
            memory_mib: i.memory.unwrap_or(0),
            running: running(i),
            tags: i.tags.clone(),
            disk_sizes: Some(i.disk_sizes.clone()),
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
    sim.with_cluster(|c| {
        // Marked up and not running: crashed (`ERROR_down`), as Ganeti shows it.
        for i in instances {
            if i.admin_state == "up" && !running(i) && i.status != "ERROR_nodeoffline" {
                let _unknown = c.crash_instance(&i.name);
            }
        }
        c.number_jobs_after(last_job);
    });
    Ok(sim)
}

/// One of nodecare's jobs in flight at the request: its ledger entry and its job as Ganeti
/// shows it.
#[derive(Debug, Clone)]
pub struct InFlight {
    /// The ledger entry (unfinished, with its job).
    pub entry: Entry,
    /// The job's status.
    pub status: JobStatus,
    /// The reason trail text nodecare gave it.
    pub reason: Option<String>,
    /// Its result, once it ended.
    pub result: Option<serde_json::Value>,
}

/// Seeds `sim` with nodecare's jobs in flight, under their own ids, oldest first: a queued or
/// running job runs (and changes the simulated cluster) as soon as the simulation advances, one
/// that already ended keeps its status and result without running again (its effect is in the
/// cluster as read). The executor and node repair follow them by their ids as in the daemon.
pub async fn seed_jobs(sim: &Simulation, jobs: &[InFlight]) -> Result<(), WhatIfError> {
    let client = sim.client();
    let mut sorted: Vec<&InFlight> = jobs.iter().filter(|j| j.entry.job.is_some()).collect();
    sorted.sort_by_key(|j| j.entry.job);
    let mut seeded: BTreeMap<(String, String), JobId> = BTreeMap::new();
    for job in sorted {
        let entry = &job.entry;
        let (Some(id), Some(op), Some(trail)) = (entry.job, entry.action.op(), entry.trail())
        else {
            continue;
        };
        let holder = entry.holder.to_string();
        let depends: Vec<JobId> = entry
            .after
            .iter()
            .filter_map(|key| seeded.get(&(holder.clone(), key.clone())).copied())
            .collect();
        let description = job
            .reason
            .as_deref()
            .and_then(Reason::description_of)
            .unwrap_or(&entry.description);
        let reason = Reason::new(trail, entry.key.clone(), description).after(depends);
        let ended = job.status.is_final();
        sim.with_cluster(|c| {
            c.number_next_job(id);
            // An ended job must not run again: it is held until its end is written.
            if ended {
                c.stick_next = 1;
            }
        });
        #[allow(
            clippy::disallowed_methods,
            reason = "the simulation's own client: nothing leaves the process"
        )]
        let got = client
            .submit(op, &reason)
            .await
            .map_err(|e| WhatIfError::Read(format!("seeding job {id}: {e}")))?;
        if got != id {
            return Err(WhatIfError::Read(format!(
                "seeding job {id}: the simulation numbered it {got}"
            )));
        }
        if ended {
            sim.with_cluster(|c| {
                c.stuck.remove(&id);
                let now = c.jobs.get(&id).map_or(0, |j| j.received_ms);
                if let Some(seeded) = c.jobs.get_mut(&id) {
                    seeded.status = job.status;
                    seeded.start_ms = Some(now);
                    seeded.end_ms = Some(now);
                    seeded.opresult = job.result.clone().unwrap_or(serde_json::Value::Null);
                }
            });
        }
        seeded.insert((holder, entry.key.clone()), id);
    }
    Ok(())
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
    /// Who asks.
    pub caller: Caller,
}

/// What a what-if starts from: the cluster, nodecare's jobs in flight, the agents, as read
/// at the request.
#[derive(Debug, Clone)]
pub struct AtRequest {
    /// Ganeti's nodes.
    pub nodes: Vec<Node>,
    /// Ganeti's instances.
    pub instances: Vec<Instance>,
    /// nodecare's jobs in flight.
    pub in_flight: Vec<InFlight>,
    /// How the agents answer.
    pub answers: Answers,
    /// The storage reports or problems.
    pub storage: Storage,
    /// The recorded round the agents answer as (asked with `at`, or without an agent reader).
    pub recorded_round: Option<u64>,
}

/// The jobs among `ids` as Ganeti lists them.
async fn jobs_of(
    ganeti: &dyn Ganeti,
    ids: &BTreeSet<JobId>,
) -> Result<Vec<JobSummary>, WhatIfError> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    ganeti
        .jobs_among(ids)
        .await
        .map_err(|e| WhatIfError::Read(format!("Ganeti: {e}")))
}

/// Reads the cluster and nodecare's jobs in flight as one picture: the jobs' states before and
/// after the cluster is read must agree (a job that ended in between would be both in the
/// cluster and still to run), else it is read again (at most 5 times).
pub async fn read_cluster(
    store: &Store,
    ganeti: &dyn Ganeti,
) -> Result<(Vec<Node>, Vec<Instance>, Vec<InFlight>), WhatIfError> {
    let entries: Vec<Entry> = store
        .entries()
        .map_err(|e| WhatIfError::Read(e.to_string()))?
        .into_iter()
        .filter(|e| e.state.is_unfinished() && e.job.is_some() && e.action.op().is_some())
        .collect();
    let ids: BTreeSet<JobId> = entries.iter().filter_map(|e| e.job).collect();
    let states = |jobs: &[JobSummary]| -> BTreeMap<JobId, JobStatus> {
        jobs.iter().map(|j| (j.id, j.status)).collect()
    };
    let mut attempt = 0;
    let (nodes, instances, jobs) = loop {
        attempt += 1;
        let before = jobs_of(ganeti, &ids).await?;
        let nodes = ganeti
            .nodes()
            .await
            .map_err(|e| WhatIfError::Read(format!("Ganeti: {e}")))?;
        let instances = ganeti
            .instances()
            .await
            .map_err(|e| WhatIfError::Read(format!("Ganeti: {e}")))?;
        let after = jobs_of(ganeti, &ids).await?;
        if states(&before) == states(&after) || attempt == 5 {
            break (nodes, instances, after);
        }
    };
    let mut in_flight = Vec::new();
    for entry in entries {
        let Some(job) = jobs.iter().find(|j| Some(j.id) == entry.job) else {
            // Not in Ganeti's queue: the simulation has no such job, as Ganeti has none.
            continue;
        };
        let result = match job.status {
            JobStatus::Error | JobStatus::Canceled => ganeti
                .job(job.id)
                .await
                .ok()
                .and_then(|j| j.opresult.into_iter().next()),
            _ => None,
        };
        in_flight.push(InFlight {
            status: job.status,
            reason: job
                .reasons
                .iter()
                .find(|r| Reason::parse_text(&r.text).is_some())
                .map(|r| r.text.clone()),
            result,
            entry,
        });
    }
    Ok((nodes, instances, in_flight))
}

/// Runs the what-if `query` against the live coordinator's state, changing nothing of it.
pub async fn run(live: Live<'_>, query: &Query) -> Result<WhatIf, WhatIfError> {
    let Turn {
        permit,
        _caller: _mark,
    } = live.context.turn(live.caller).await?;
    yield_to_rounds(live.context.simulating.rounds.as_ref()).await;
    let (nodes, instances, in_flight) = read_cluster(live.store, live.ganeti).await?;
    // A wrong question costs no copy of the state.
    check(query, &nodes)?;
    yield_to_rounds(live.context.simulating.rounds.as_ref()).await;
    let now_ms = nodecare_protocol::now_ms();
    let start_ms = match query.from_ms {
        Some(from)
            if from > now_ms.saturating_add(nodecare_protocol::what_if::MAX_FROM_AHEAD_MS) =>
        {
            return Err(WhatIfError::Input("from: at most a year ahead".to_owned()));
        }
        Some(from) => from.max(now_ms),
        None => now_ms,
    };
    let recorded = match (query.at_ms, &live.context.agents) {
        (Some(_), _) | (None, None) => {
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
            Some(recorded)
        }
        (None, Some(_)) => None,
    };
    let (answers, storage, recorded_round) = match (recorded, &live.context.agents) {
        (Some(recorded), _) => (
            Answers::Recorded(
                recorded
                    .as_ref()
                    .map(|r| r.record.verdicts.clone())
                    .unwrap_or_default(),
            ),
            Storage::Recorded(
                recorded
                    .as_ref()
                    .map(|r| r.record.gate.view.storage.clone())
                    .unwrap_or_default(),
            ),
            recorded.map(|r| r.round),
        ),
        (None, Some(agents)) => {
            let (answers, storage) = read_agents(
                &**agents,
                live.store,
                &live.context.simulating.settings,
                &nodes,
                &instances,
                start_ms,
            )
            .await?;
            (answers, storage, None)
        }
        (None, None) => (
            Answers::Recorded(BTreeMap::new()),
            Storage::Recorded(Vec::new()),
            None,
        ),
    };
    yield_to_rounds(live.context.simulating.rounds.as_ref()).await;
    let copy = live
        .store
        .private_copy()
        .map_err(|e| WhatIfError::Read(e.to_string()))?;

    let start = AtRequest {
        nodes,
        instances,
        in_flight,
        answers,
        storage,
        recorded_round,
    };
    let simulating = live.context.simulating.clone();
    let query = query.clone();
    // The rounds run on a thread of their own at a lowered priority, holding the turn's permit
    // until they end: the daemon's rounds and API come first, and their processor time is
    // what the budget counts.
    crate::background::run("nodecare-what-if", move |stop| async move {
        let _permit = permit;
        tokio::time::timeout(
            TIME_LIMIT,
            simulate_rounds(&simulating, copy, start, &query, start_ms, &stop),
        )
        .await
        .map_err(|_elapsed| {
            WhatIfError::Input(format!(
                "the what-if took longer than {} s: ask for fewer rounds",
                TIME_LIMIT.as_secs()
            ))
        })?
    })
    .await
    .map_err(|e| WhatIfError::Local(e.to_string()))?
}

/// What a what-if's rounds need of the daemon's context (a copy goes to their thread).
#[derive(Debug, Clone)]
struct Simulating {
    /// The daemon's round settings.
    settings: ReconcileSettings,
    /// The round interval: the simulated clock's step.
    interval: Duration,
    /// The work budget of the rounds (processor time).
    budget: Duration,
    /// Their wall-clock budget.
    wall_budget: Duration,
    /// Whether one of the daemon's rounds runs: a what-if reads and simulates each round only
    /// between them.
    rounds: Option<tokio::sync::watch::Receiver<bool>>,
}

/// Waits while one of the daemon's rounds runs (`running`), at most [`YIELD_MAX`]: the rounds
/// go first.
async fn yield_to_rounds(running: Option<&tokio::sync::watch::Receiver<bool>>) {
    if let Some(running) = running.filter(|running| *running.borrow()) {
        let mut running = running.clone();
        let _waited = tokio::time::timeout(YIELD_MAX, running.wait_for(|running| !running)).await;
    }
}

/// The simulated Ganeti of a what-if's rounds, yielding to the daemon's rounds before each
/// call: a daemon round that starts while a simulated round runs waits at most for the work
/// between two calls.
#[derive(Debug)]
struct Yielding {
    inner: Arc<dyn Ganeti>,
    rounds: Option<tokio::sync::watch::Receiver<bool>>,
}

impl Yielding {
    async fn first(&self) {
        yield_to_rounds(self.rounds.as_ref()).await;
    }
}

impl Ganeti for Yielding {
    fn cluster_info(&self) -> GanetiFuture<'_, ClusterInfo> {
        Box::pin(async move {
            self.first().await;
            self.inner.cluster_info().await
        })
    }

    fn nodes(&self) -> GanetiFuture<'_, Vec<Node>> {
        Box::pin(async move {
            self.first().await;
            self.inner.nodes().await
        })
    }

    fn instances(&self) -> GanetiFuture<'_, Vec<Instance>> {
        Box::pin(async move {
            self.first().await;
            self.inner.instances().await
        })
    }

    fn node_tags<'a>(&'a self, node: &'a str) -> GanetiFuture<'a, Vec<String>> {
        Box::pin(async move {
            self.first().await;
            self.inner.node_tags(node).await
        })
    }

    #[expect(
        clippy::disallowed_methods,
        reason = "a decorator passing on the executor's own submission to the simulation"
    )]
    fn submit<'a>(&'a self, op: &'a Op, reason: &'a Reason) -> GanetiFuture<'a, JobId> {
        Box::pin(async move {
            self.first().await;
            self.inner.submit(op, reason).await
        })
    }

    fn groups(&self) -> GanetiFuture<'_, Vec<Group>> {
        Box::pin(async move {
            self.first().await;
            self.inner.groups().await
        })
    }

    fn tags<'a>(&'a self, target: &'a TagTarget) -> GanetiFuture<'a, Vec<String>> {
        Box::pin(async move {
            self.first().await;
            self.inner.tags(target).await
        })
    }

    fn job(&self, id: JobId) -> GanetiFuture<'_, Job> {
        Box::pin(async move {
            self.first().await;
            self.inner.job(id).await
        })
    }

    fn jobs(&self) -> GanetiFuture<'_, Vec<JobSummary>> {
        Box::pin(async move {
            self.first().await;
            self.inner.jobs().await
        })
    }

    fn jobs_among<'a>(&'a self, ids: &'a BTreeSet<JobId>) -> GanetiFuture<'a, Vec<JobSummary>> {
        Box::pin(async move {
            self.first().await;
            self.inner.jobs_among(ids).await
        })
    }

    fn cancel_job(&self, id: JobId) -> GanetiFuture<'_, JobCancel> {
        Box::pin(async move {
            self.first().await;
            self.inner.cancel_job(id).await
        })
    }

    fn wait_job_change(
        &self,
        id: JobId,
        previous: Option<JobStatus>,
    ) -> GanetiFuture<'_, Option<JobStatus>> {
        Box::pin(async move {
            self.first().await;
            self.inner.wait_job_change(id, previous).await
        })
    }
}

/// Every online node's agent and the storage reports, read as the daemon's round reads them
/// (nothing of what is read is kept).
pub async fn read_agents(
    agents: &dyn AgentReader,
    store: &Store,
    settings: &ReconcileSettings,
    nodes: &[Node],
    instances: &[Instance],
    now_ms: u64,
) -> Result<(Answers, Storage), WhatIfError> {
    let targets: Vec<AgentTarget> = nodes
        .iter()
        .filter(|node| !node.offline)
        .map(|node| AgentTarget {
            node: node.name.clone(),
            node_uuid: node.uuid.clone(),
            base_url: settings.agent_urls.base(node),
        })
        .collect();
    let sequences = store
        .agent_sequences()
        .map_err(|e| WhatIfError::Read(e.to_string()))?;
    let read = agents.diagnose(targets, &sequences, now_ms).await;
    let storage_sequences: BTreeMap<String, u64> = store
        .document(crate::reconcile::STORAGE_SEQUENCES_DOCUMENT)
        .map_err(|e| WhatIfError::Read(e.to_string()))?
        .unwrap_or_default();
    let storage = agents
        .storage(
            nodes,
            instances,
            &settings.agent_urls,
            &storage_sequences,
            now_ms,
        )
        .await;
    Ok((
        Answers::Read(read.into_iter().map(|r| (r.node, r.outcome)).collect()),
        Storage::Read(storage.readings),
    ))
}

/// Checks `query` against the cluster: known nodes, a cluster small enough.
pub fn check(query: &Query, nodes: &[Node]) -> Result<(), WhatIfError> {
    if nodes.len() > MAX_NODES {
        return Err(WhatIfError::Input(format!(
            "the cluster has {} nodes; a what-if simulates at most {MAX_NODES}",
            nodes.len()
        )));
    }
    check_names(query, &nodes.iter().map(|n| n.name.as_str()).collect())
}

/// Checks that every node `query` names is `known`.
pub fn check_names(query: &Query, known: &BTreeSet<&str>) -> Result<(), WhatIfError> {
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
            Change::Return { node } => sim.with_cluster(|c| {
                if let Some(n) = c.nodes.get_mut(node) {
                    // An offline node showed no memory figures: they stay unknown.
                    n.memory_unknown |= n.offline && n.memory_total_mib == 0;
                    n.offline = false;
                    n.drained = false;
                    n.tags.retain(|t| !t.starts_with("maintd:"));
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
                        nodecare_core::campaign::adopt_failure_domains(
                            &mut request,
                            &settings.gate.domains,
                        )
                    })
                    .map_err(|e| input(format!("campaign: {e}")))?;
                let record = nodecare_core::campaign::Record::new(
                    uuid::Uuid::new_v4(),
                    request,
                    WHAT_IF,
                    now_ms,
                );
                store
                    .save_campaign(&record)
                    .map_err(|e| WhatIfError::Read(e.to_string()))?;
            }
            Change::Policy { key, value } => apply_policy(&mut settings.gate, key, *value),
        }
    }
    Ok(())
}

/// Sets the gate's policy setting `key` to `value` in `gate`. A cap of a node group without
/// caps of its own starts from no cap at all.
pub fn apply_policy(
    gate: &mut crate::reconcile::GateSettings,
    key: &PolicyKey,
    value: PolicyValue,
) {
    use nodecare_protocol::what_if::{BreakerKey, CapKey};
    let set_cap = |caps: &mut nodecare_core::gate::Caps, cap: CapKey| match cap {
        CapKey::MaxDisruptedNodes => caps.max_disrupted_nodes = value.count(),
        CapKey::MaxDisruptedPercent => caps.max_disrupted_percent = value.0,
        CapKey::MinHealthyNodes => caps.min_healthy_nodes = value.count(),
    };
    let number = value.0.unwrap_or(0.0);
    match key {
        PolicyKey::Cluster(cap) => set_cap(&mut gate.cluster, *cap),
        PolicyKey::Group { group, cap } => set_cap(
            gate.groups
                .entry(group.clone())
                .or_insert(nodecare_core::gate::Caps {
                    max_disrupted_nodes: usize::MAX,
                    max_disrupted_percent: None,
                    min_healthy_nodes: 0,
                }),
            *cap,
        ),
        PolicyKey::Grace => {
            gate.grace = Duration::try_from_secs_f64(number).unwrap_or(Duration::MAX)
        }
        PolicyKey::Breaker(key) => {
            let breaker = &mut gate.breaker;
            match key {
                BreakerKey::MaxIncidentNodes => breaker.max_incident_nodes = value.count(),
                BreakerKey::MaxIncidentPercent => breaker.max_incident_percent = number,
                BreakerKey::MinIncidentNodes => breaker.min_incident_nodes = value.count(),
                BreakerKey::WindowSecs => breaker.window_secs = number,
                BreakerKey::MaxUnreachablePercent => breaker.max_unreachable_percent = number,
                BreakerKey::AutoCloseSecs => breaker.auto_close_secs = value.0,
            }
        }
    }
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
    context: &Simulating,
    copy: Store,
    start: AtRequest,
    query: &Query,
    start_ms: u64,
    stop: &crate::background::Stop,
) -> Result<WhatIf, WhatIfError> {
    let AtRequest {
        nodes,
        instances,
        in_flight,
        answers,
        storage,
        recorded_round,
    } = start;
    let (nodes, instances) = (nodes.as_slice(), instances.as_slice());
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
    // The nodes as read, before the jobs in flight change them.
    let start_nodes = sim.with_cluster(|c| node_states(c));
    seed_jobs(&sim, &in_flight).await?;
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
    let from_agents = matches!(answers, Answers::Read(_));
    let agents = SimulatedAgents::new(
        Arc::clone(&store),
        repairs.clone(),
        answers,
        hypothetical,
        storage,
    )
    .yielding_to(context.rounds.clone());
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
    let failback = settings.failback;
    let mut reconciler = Reconciler::with_agents(
        Arc::new(Yielding {
            inner: Arc::new(sim.client()),
            rounds: context.rounds.clone(),
        }),
        Arc::clone(&store),
        Arc::new(agents),
        repairs,
        settings,
        Arc::clone(&board),
        Arc::new(tokio::sync::Mutex::new(())),
    )
    .with_clock(clock);
    // Failback's moves home, as the daemon's balancing duty proposes them (hbal is not run
    // here: its moves are the daemon's to find).
    if failback.enabled {
        reconciler = reconciler.with_balancer(
            crate::balance::Balancer::new(
                nodecare_core::duty::balancing::BalancingConfig::default(),
                None,
            )
            .with_failback(failback),
        );
    }
    let mut rounds = Vec::new();
    let mut ending = Ending::RoundLimit { rounds: limit };
    let mut before = state_of(&sim, &store);
    let started = std::time::Instant::now();
    let cpu_started = crate::background::cpu_time();
    for number in 1..=limit {
        yield_to_rounds(context.rounds.as_ref()).await;
        if stop.asked() {
            // Nobody waits for the answer.
            break;
        }
        if number > 1 {
            let cut = if crate::background::cpu_time().saturating_sub(cpu_started) >= context.budget
            {
                Some((context.budget, CutBy::Cpu))
            } else if started.elapsed() >= context.wall_budget {
                Some((context.wall_budget, CutBy::Wall))
            } else {
                None
            };
            if let Some((budget, by)) = cut {
                ending = Ending::Cut {
                    rounds: number - 1,
                    budget_s: budget.as_secs(),
                    by,
                };
                break;
            }
        }
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
        // Verdicts a grace held back: the waiting line the status shows, under the grace's
        // holder.
        waits.extend(grace_waits(&board));
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
            why: incident_why(&i),
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
            why: campaign_why(&r.campaign),
            new: !start_campaigns.contains(&r.campaign.id),
        })
        .collect();
    let mut notes = vec![if from_agents {
        "Ganeti's jobs succeed at once; the agents answer as they did at the request, with the changes laid over them; live repairs and campaign hooks succeed at once".to_owned()
    } else {
        "Ganeti's jobs succeed at once; the agents answer the recorded verdicts with the changes laid over them; live repairs and campaign hooks succeed at once".to_owned()
    }];
    if !from_agents && recorded_round.is_none() {
        notes.push("no round is recorded: every agent without an incident answers Ok".into());
    }
    if query.at_ms.is_some() {
        notes.push(
            "the cluster is Ganeti's now; the recorded round gives the verdicts and storage".into(),
        );
    }
    if !in_flight.is_empty() {
        notes.push(format!(
            "nodecare's {} job(s) in flight keep running in the simulation and succeed (those already ended keep their outcome)",
            in_flight.len()
        ));
    }
    let jobs = rounds.iter().flat_map(|r| r.jobs.clone()).collect();
    Ok(WhatIf {
        changes: query.changes.clone(),
        start: Start {
            at_ms: start_ms,
            recorded_round,
            interval_ms,
            jobs_in_flight: in_flight.len(),
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

/// The verdicts the last round held back in a grace (`board`), each as a wait of the grace's
/// holder whose `why` is the waiting line of the status ([`crate::grace_waiting::graced_waiting`]).
fn grace_waits(board: &Board) -> Vec<Wait> {
    let (graces, held) = board.graces_now();
    held.iter()
        .filter_map(|(node, verdict)| {
            let grace = graces.get(node)?;
            let line = crate::grace_waiting::grace_line(node, verdict, grace);
            Some(Wait {
                holder: grace.holder.clone(),
                subject: line.subject,
                rule: nodecare_protocol::what_if::GRACE_WAITS.to_owned(),
                why: line.blocked_by,
                blocked_by: None,
            })
        })
        .collect()
}

/// Why an incident ends as it does: its failure, what it waits for, what it left behind.
pub fn incident_why(incident: &nodecare_core::incident::Incident) -> Option<String> {
    let why = incident_end(incident);
    match (
        nodecare_core::duty::node_repair::ladder::said_of(incident),
        why,
    ) {
        (Some(said), Some(why)) => Some(format!("{said}; {why}")),
        (Some(said), None) => Some(said.to_owned()),
        (None, why) => why,
    }
}

/// How an incident ends, or what it waits for.
fn incident_end(incident: &nodecare_core::incident::Incident) -> Option<String> {
    match incident.repair_status {
        RepairStatus::Failed => Some(match &incident.failure {
            Some(failure) => format!("failed: {failure}"),
            None => "failed (no reason recorded)".to_owned(),
        }),
        RepairStatus::Canceled => Some("canceled by an operator".to_owned()),
        RepairStatus::Noted | RepairStatus::Pending => incident
            .blocked_by
            .as_ref()
            .map(|blocked| format!("waits: {blocked}")),
        _ => incident.warning.clone(),
    }
}

/// Why a campaign ends as it does: the failure that stopped it, what keeps its next group
/// from starting.
pub fn campaign_why(campaign: &nodecare_protocol::maintenance::Campaign) -> Option<String> {
    match (&campaign.failure, &campaign.blocked_by) {
        (Some(failure), _) => Some(format!(
            "failed on {} ({}): {}",
            failure.node, failure.step, failure.why
        )),
        (None, Some(blocked)) => Some(format!("waits: {blocked}")),
        (None, None) => None,
    }
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code")]

    use super::*;
    use nodecare_protocol::what_if::{BreakerKey, CapKey};

    #[test]
    fn every_gate_policy_key_changes_the_gate() {
        let mut gate =
            crate::daemon::reconcile_settings(&crate::config::Config::default(), "n1".into()).gate;
        for (key, value) in [
            ("max_disrupted_nodes", "7"),
            ("max_disrupted_percent", "12.5"),
            ("min_healthy_nodes", "4"),
            ("grace", "90"),
            ("breaker.max_incident_nodes", "11"),
            ("breaker.max_incident_percent", "45"),
            ("breaker.min_incident_nodes", "6"),
            ("breaker.window_secs", "30"),
            ("breaker.max_unreachable_percent", "80"),
            ("breaker.auto_close_secs", "600"),
            ("group_caps.rack-a.max_disrupted_nodes", "3"),
        ] {
            let key = PolicyKey::parse(key).unwrap();
            let value = key.value(value).unwrap();
            apply_policy(&mut gate, &key, value);
        }
        assert_eq!(gate.cluster.max_disrupted_nodes, 7);
        assert_eq!(gate.cluster.max_disrupted_percent, Some(12.5));
        assert_eq!(gate.cluster.min_healthy_nodes, 4);
        assert_eq!(gate.grace, Duration::from_secs(90));
        assert_eq!(gate.breaker.max_incident_nodes, 11);
        assert!((gate.breaker.max_incident_percent - 45.0).abs() < f64::EPSILON);
        assert_eq!(gate.breaker.min_incident_nodes, 6);
        assert!((gate.breaker.window_secs - 30.0).abs() < f64::EPSILON);
        assert!((gate.breaker.max_unreachable_percent - 80.0).abs() < f64::EPSILON);
        assert_eq!(gate.breaker.auto_close_secs, Some(600.0));
        assert_eq!(gate.groups["rack-a"].max_disrupted_nodes, 3);
        let none = PolicyKey::Cluster(CapKey::MaxDisruptedPercent);
        apply_policy(&mut gate, &none, none.value("none").unwrap());
        assert_eq!(gate.cluster.max_disrupted_percent, None);
        let close = PolicyKey::Breaker(BreakerKey::AutoCloseSecs);
        apply_policy(&mut gate, &close, close.value("none").unwrap());
        assert_eq!(gate.breaker.auto_close_secs, None);
    }

    #[tokio::test]
    async fn the_simulated_cluster_shows_what_rapi_showed() {
        let sim = Simulation::new(
            SimConfig::from_spec(3, "a:drbd:2,b:plain:3,c:diskless:3", "t").unwrap(),
        )
        .unwrap();
        sim.with_cluster(|c| {
            let n2 = c.nodes.get_mut("node2.t").unwrap();
            n2.memory_total_mib = 8192;
            n2.memory_reserved_mib = 1000;
            n2.disk_free_mib = Some(1234);
            c.nodes.get_mut("node3.t").unwrap().memory_unknown = true;
            c.instances.get_mut("a.t").unwrap().disk_sizes = Some(vec![10_240, 512]);
            c.crash_instance("b.t").unwrap();
        });
        let live = sim.client();
        let (nodes, instances) = (
            Ganeti::nodes(&live).await.unwrap(),
            Ganeti::instances(&live).await.unwrap(),
        );
        let copy = simulate("node1.t", &nodes, &instances, 7).unwrap();
        let client = copy.client();
        let (again, again_instances) = (
            Ganeti::nodes(&client).await.unwrap(),
            Ganeti::instances(&client).await.unwrap(),
        );
        let key = |n: &Node| (n.name.clone(), n.memory_free, n.memory_total, n.disk_free);
        assert_eq!(
            again.iter().map(key).collect::<Vec<_>>(),
            nodes.iter().map(key).collect::<Vec<_>>()
        );
        assert_eq!(again[2].memory_free, None, "unknown memory stays unknown");
        let key = |i: &Instance| {
            (
                i.name.clone(),
                i.status.clone(),
                i.admin_state.clone(),
                i.memory,
                i.disk_sizes.clone(),
            )
        };
        assert_eq!(
            again_instances.iter().map(key).collect::<Vec<_>>(),
            instances.iter().map(key).collect::<Vec<_>>()
        );
        assert_eq!(instances[1].status, "ERROR_down");
    }
}
