//! The round's one input and the duties behind the gate.
//!
//! Each round builds one [`RoundInput`] (the cluster as Ganeti shows it, the agents seen, storage
//! health, the grace of planned disruptions, degraded instances, and one `now`) and hands it to
//! every [`RoundDuty`] of the registry, in the same phases:
//!
//! 1. [`RoundDuty::follow`] and [`RoundDuty::settle`]: before the cluster is read, under the incident
//!    lock, the duty follows what it does not hand to the executor yet, then (after the
//!    executor adopted, submitted and followed its entries) settles what they changed;
//! 2. [`RoundDuty::observe`]: it reacts to what the round input shows (node repair: verdicts and
//!    acknowledgements);
//! 3. [`RoundDuty::holds`]: it says what it holds in force (nodes disrupted, nodes touched, flags it
//!    left), from which the gate's [`InForce`] is built together with the executor's ledger;
//! 4. [`RoundDuty::propose`]: its proposals; the gate judges every duty's proposals at once;
//! 5. [`RoundDuty::execute`]: it turns what the gate admitted into operations.
//!
//! A new duty is one type implementing [`RoundDuty`] and one line in
//! [`crate::reconcile::Reconciler::new`]'s registry.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use crate::board::Board;
use crate::repair::RepairClient;
use crate::scrape::{AgentResult, AgentUrls};
use crate::store::{Store, StoreError};
use nodecare_core::breaker::BreakerPolicy;
use nodecare_core::campaign::AgentNow;
use nodecare_core::gate::{
    Caps, Decision, DomainSource, Holder, Holds, InForce, Policy, Proposal, View,
};
use nodecare_core::plan::EvacuationPolicy;
use nodecare_exec::{Changed, Executor};
use nodecare_ganeti::GanetiError;
use nodecare_ganeti::{Ganeti, Group, Instance, Node};

/// Settings of the reconciler.
#[derive(Debug, Clone)]
pub struct ReconcileSettings {
    /// This node's name; the coordinator acts only while it is the master.
    pub node_name: String,
    /// Agent URLs.
    pub agent_urls: AgentUrls,
    /// The gate's settings.
    pub gate: GateSettings,
    /// Plan and submit an evacuation as one job chain per round.
    pub job_chains: bool,
    /// The escalation ladder (`[repair_ladder]`).
    pub ladder: nodecare_core::duty::node_repair::ladder::LadderPolicy,
    /// Failback (`[failback]`): node repair notes what evacuations moved and watches their
    /// nodes; the balancing duty moves the instances back.
    pub failback: nodecare_core::duty::failback::FailbackConfig,
    /// How evacuations end (immovable instances, offlining the node).
    pub evacuation: EvacuationPolicy,
    /// Return the node to service when an incident is acknowledged.
    pub undrain_on_ack: bool,
    /// A job running longer than this fails its incident.
    pub job_timeout: Duration,
    /// A repair command running longer than this fails its incident.
    pub repair_timeout: Duration,
    /// How long a round polls a just-started repair before moving on.
    pub repair_poll: Duration,
    /// Run the instance-repair duty (harep's tags) each round.
    pub instance_repair: bool,
    /// Ganeti's ssconf directory, read for `ssconf_master_node` before asking RAPI (a
    /// non-master's RAPI may not answer at all); `None`: RAPI only.
    pub ssconf_dir: Option<std::path::PathBuf>,
    /// Record the rounds whose gate judged anything (the flight recorder).
    pub record_rounds: bool,
}

/// The gate's settings: failure domains, caps, the storm breaker, the grace of planned
/// disruptions.
#[derive(Debug, Clone, Default)]
pub struct GateSettings {
    /// Where failure domains come from.
    pub domains: DomainSource,
    /// Cluster-wide caps.
    pub cluster: Caps,
    /// Caps per node group (by name or uuid).
    pub groups: BTreeMap<String, Caps>,
    /// The storm breaker.
    pub breaker: BreakerPolicy,
    /// How long nodes of a planned disruption's domain opening incidents are not acted on.
    pub grace: Duration,
    /// Maintenance windows and the configuration's freezes (the run-time ones are read from
    /// the state each round).
    pub calendar: nodecare_core::calendar::Calendar,
    /// The kinds of work that need an approval (`[approvals] require`).
    pub approvals: Vec<nodecare_core::calendar::WorkKind>,
    /// Work moving more instances than this needs an approval too (`[approvals] moves_above`).
    pub approvals_moves_above: Option<usize>,
}

impl GateSettings {
    /// The gate's policy of a round (pure): these settings with the caps of the input's groups,
    /// its overrides, freezes and approval decisions, at its time, and the breaker's state
    /// (`breaker`: why it is open).
    pub fn policy(&self, input: &RoundInput, breaker: Option<String>) -> Policy {
        Policy {
            cluster: self.cluster,
            groups: nodecare_core::gate::group_caps(&self.groups, &input.group_names),
            overrides: input.overrides.clone(),
            breaker,
            calendar: {
                let mut calendar = self.calendar.clone();
                calendar.freezes.extend(input.freezes.iter().cloned());
                calendar.at(input.now_ms)
            },
            approvals: nodecare_core::approval::Approvals {
                required: self.approvals.clone(),
                moves_above: self.approvals_moves_above,
                records: input.approvals.clone(),
            },
        }
    }
}

/// Why a round stopped.
#[derive(Debug, thiserror::Error)]
pub enum RoundError {
    /// This node is not the master: the daemon must exit with code 11.
    #[error("this node ({node}) is not the master (the master is {master})")]
    NotMaster {
        /// This node.
        node: String,
        /// The master.
        master: String,
    },
    /// Ganeti could not be queried; the round is skipped.
    #[error("Ganeti: {0}")]
    Ganeti(#[from] GanetiError),
    /// The state database failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The state is not (yet) kept by a majority of the master candidates.
    #[error("replication: {0}")]
    Replica(#[from] crate::replica::ReplicaError),
    /// This host could not read the agents (no descriptor, no buffer): the round is skipped and
    /// no agent is counted unreachable (the storm breaker sees nothing of it).
    #[error("the coordinator could not read the agents for a local cause: {0}")]
    Local(String),
}

impl From<nodecare_exec::ledger::LedgerError> for RoundError {
    fn from(error: nodecare_exec::ledger::LedgerError) -> Self {
        Self::Store(StoreError::Ledger(error))
    }
}

/// A duty's phase: a future borrowing the duty and the round.
pub type Phase<'a, T> = Pin<Box<dyn Future<Output = Result<T, RoundError>> + Send + 'a>>;

/// The phase that does nothing.
pub fn nothing<'a, T: Default + Send + 'a>() -> Phase<'a, T> {
    Box::pin(async { Ok(T::default()) })
}

/// Everything one round decides from, read once at its start; `now_ms` is the round's one
/// clock. It can be recorded as it is (JSON, [`RoundInput::record`]) and read back.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct RoundInput {
    /// The round's time (Unix ms).
    pub now_ms: u64,
    /// Ganeti's nodes.
    pub nodes: Vec<Node>,
    /// Ganeti's instances.
    pub instances: Vec<Instance>,
    /// The node groups with their tags (none when they could not be read).
    pub groups: Option<Vec<Group>>,
    /// Group uuid → name.
    pub group_names: BTreeMap<String, String>,
    /// The gate's view of the cluster (failure domains, storage health); shared with the
    /// round's gate snapshot ([`nodecare_core::gate::GateSnapshot`]).
    pub view: std::sync::Arc<View>,
    /// Every online node's agent as this round read it.
    pub agents: Vec<AgentResult>,
    /// The agents' verified, fresh reports (for the campaigns).
    pub agents_seen: BTreeMap<String, AgentNow>,
    /// Agents outside a grace that gave no verified report (the breaker's signal).
    pub failed_outside_grace: usize,
    /// Nodes in the grace of a planned disruption, with its end and holder.
    pub graced: BTreeMap<String, nodecare_core::gate::Grace>,
    /// DRBD instances degraded with both nodes online past the grace, and why.
    pub degraded: BTreeMap<String, String>,
    /// Admission grants in force, read under the incident lock (the admission API grants under
    /// it too).
    pub grants: Vec<(String, Holder)>,
    /// Operator overrides in force, read with the grants.
    pub overrides: Vec<nodecare_core::gate::Override>,
    /// Node repair's incidents and their intents, read under the incident lock once the duties
    /// observed the round (node repair opens, updates and forgets incidents there): what node
    /// repair holds, proposes and steps from, and what the round's breaker and balancing read
    /// of the incidents.
    #[serde(default)]
    pub node_repair: nodecare_core::duty::node_repair::Records,
    /// The run-time maintenance freezes (`/1/freezes`), read with the grants.
    #[serde(default)]
    pub freezes: Vec<nodecare_core::calendar::Freeze>,
    /// The approval decisions kept (`/1/approvals`), read with the grants.
    #[serde(default)]
    pub approvals: Vec<nodecare_core::approval::ApprovalRecord>,
}

impl RoundInput {
    /// The input as a record (JSON).
    pub fn record(&self) -> Result<String, serde_json::Error> {
        serde_json::to_string(self)
    }

    /// An input read back from its record.
    pub fn from_record(record: &str) -> Result<Self, serde_json::Error> {
        serde_json::from_str(record)
    }

    /// The round's time in Unix seconds (incidents' clock).
    #[expect(
        clippy::cast_precision_loss,
        reason = "Unix milliseconds stay far below 2^52"
    )]
    pub fn now_s(&self) -> f64 {
        self.now_ms as f64 / 1000.0
    }
}

/// The services every duty may use.
#[derive(Debug, Clone, Copy)]
pub struct Services<'a> {
    /// Ganeti (reads; writes go through the executor).
    pub ganeti: &'a dyn Ganeti,
    /// The state database.
    pub store: &'a Store,
    /// The executor over the store's ledger.
    pub executor: &'a Executor,
    /// What the API and the page show.
    pub board: &'a Board,
    /// The agents' repair endpoint.
    pub repairs: &'a RepairClient,
    /// The reconciler's settings.
    pub settings: &'a ReconcileSettings,
}

/// What the gate decided this round.
#[derive(Debug, Clone, Copy)]
pub struct Judged<'a> {
    /// The policy it decided under.
    pub policy: &'a Policy,
    /// Its decision.
    pub decision: &'a Decision,
}

/// One duty behind the gate: it proposes from the round's input, turns what the gate admitted
/// into operations, and says what it holds.
pub trait RoundDuty: Send + Sync {
    /// Its name (logs).
    fn name(&self) -> &'static str;

    /// Phase 1, before the executor: follow what this duty does not hand to the executor.
    fn follow<'a>(&'a mut self, _services: Services<'a>, _now_ms: u64) -> Phase<'a, ()> {
        nothing()
    }

    /// Phase 1, after the executor: settle what its followed entries changed (`changed`).
    /// Runs before the cluster is read.
    fn settle<'a>(
        &'a mut self,
        _services: Services<'a>,
        _changed: &'a [Changed],
        _now_ms: u64,
    ) -> Phase<'a, ()> {
        nothing()
    }

    /// Phase 2: react to what the round input shows. Returns the jobs submitted.
    fn observe<'a>(
        &'a mut self,
        _services: Services<'a>,
        _input: &'a RoundInput,
    ) -> Phase<'a, usize> {
        nothing()
    }

    /// Phase 3: what it holds in force (reading what it needs beyond the round input).
    fn holds<'a>(&'a mut self, services: Services<'a>, input: &'a RoundInput) -> Phase<'a, Holds>;

    /// Phase 4: its proposals, given what is in force.
    fn propose<'a>(
        &'a mut self,
        services: Services<'a>,
        input: &'a RoundInput,
        in_force: &'a InForce,
    ) -> Phase<'a, Vec<Proposal>>;

    /// Phase 5: carry out what the gate admitted. Returns the jobs submitted.
    fn execute<'a>(
        &'a mut self,
        services: Services<'a>,
        input: &'a RoundInput,
        judged: Judged<'a>,
    ) -> Phase<'a, usize>;

    /// Where a duty that reads the cluster beyond RAPI reads it (balancing: hbal's input).
    fn set_cluster_source(&mut self, _source: Arc<dyn crate::balance::ClusterSource>) {}
}

pub mod admission;
pub mod agents;
pub mod balancing;
pub mod campaigns;
pub mod instance_repair;

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code")]

    use super::*;
    use crate::scrape::{AgentOutcome, Observation};
    use nodecare_ganeti::Ganeti;
    use nodecare_protocol::{CanonicalJson, NodeVerdict, ScriptVerdict};

    /// The gate's policy is a function of the settings and the round's input alone: the
    /// input's freezes in force at its time, its approval decisions, its overrides, the caps of
    /// its groups by name, and the breaker's state as given.
    #[test]
    fn the_policy_is_the_settings_over_the_round_s_input() {
        let caps = Caps {
            max_disrupted_nodes: 2,
            max_disrupted_percent: None,
            min_healthy_nodes: 1,
        };
        let settings = GateSettings {
            groups: [("uuid-1".to_owned(), caps)].into_iter().collect(),
            approvals_moves_above: Some(10),
            ..GateSettings::default()
        };
        let freeze = nodecare_core::calendar::Freeze {
            id: uuid::Uuid::from_u128(7),
            from_ms: 1_000,
            until_ms: 9_000,
            reason: "change freeze".into(),
            who: "ops".into(),
            created_ms: 500,
            lifted_ms: None,
            lifted_by: None,
        };
        let approval = nodecare_core::approval::ApprovalRecord {
            id: uuid::Uuid::from_u128(8),
            ticket: Some("CHG-1".into()),
            refused: None,
            who: "ops".into(),
            at_ms: 900,
        };
        let input = RoundInput {
            now_ms: 2_000,
            nodes: Vec::new(),
            instances: Vec::new(),
            groups: None,
            group_names: [("uuid-1".to_owned(), "rack-a".to_owned())]
                .into_iter()
                .collect(),
            view: Arc::new(View::default()),
            agents: Vec::new(),
            agents_seen: BTreeMap::new(),
            failed_outside_grace: 0,
            graced: BTreeMap::new(),
            degraded: BTreeMap::new(),
            grants: Vec::new(),
            overrides: Vec::new(),
            node_repair: nodecare_core::duty::node_repair::Records::default(),
            freezes: vec![freeze.clone()],
            approvals: vec![approval.clone()],
        };
        let policy = settings.policy(&input, Some("storm".into()));
        assert_eq!(policy.groups.get("rack-a"), Some(&caps));
        assert_eq!(policy.breaker.as_deref(), Some("storm"));
        assert_eq!(
            policy.calendar.freeze.as_ref().map(|f| &f.freeze),
            Some(&freeze)
        );
        assert_eq!(policy.approvals.records, [approval]);
        assert_eq!(policy.approvals.moves_above, Some(10));
        // After the freeze, the same settings and input at a later time: no freeze.
        let later = RoundInput {
            now_ms: 10_000,
            ..input
        };
        assert!(settings.policy(&later, None).calendar.freeze.is_none());
    }

    /// A round's input, as a simulated cluster and its agents give it, is recorded as JSON and
    /// read back whole: every agent outcome, the view with storage problems, grants, overrides.
    #[tokio::test]
    async fn a_round_input_is_recorded_and_read_back_whole() {
        let sim = nodecare_ganeti_sim::Simulation::new(
            nodecare_ganeti_sim::model::SimConfig::from_spec(4, "", "sim.test").unwrap(),
        )
        .unwrap();
        let client = sim.client();
        let ganeti: &dyn Ganeti = &client;
        let nodes = ganeti.nodes().await.unwrap();
        let instances = ganeti.instances().await.unwrap();
        let groups = ganeti.groups().await.unwrap();
        let group_names: BTreeMap<String, String> = groups
            .iter()
            .map(|g| (g.uuid.clone(), g.name.clone()))
            .collect();
        let verdict = NodeVerdict::merge(
            [(
                "disk".to_owned(),
                ScriptVerdict::parse(br#"{"status":"evacuate","details":"sda"}"#).unwrap(),
            )]
            .into_iter()
            .collect(),
        )
        .unwrap();
        let observation = Observation {
            original: std::sync::Arc::new(
                CanonicalJson::new(&serde_json::to_value(&verdict).unwrap()).unwrap(),
            ),
            verdict: Arc::new(verdict),
            sequence: 3,
            collected_at_ms: 1_000,
            expires_at_ms: 2_000,
            stale_reason: None,
            boot_id: Some("b1".into()),
            reboot_required: Some(false),
        };
        let outcomes = [
            AgentOutcome::Verified(observation.clone()),
            AgentOutcome::Stale(observation),
            AgentOutcome::Unreachable("connection refused".into()),
            AgentOutcome::Unverifiable("bad MAC".into()),
        ];
        let agents: Vec<AgentResult> = nodes
            .iter()
            .zip(outcomes)
            .map(|(node, outcome)| AgentResult {
                node: node.name.clone(),
                node_uuid: node.uuid.clone(),
                outcome,
                elapsed: Duration::from_millis(12),
            })
            .collect();
        let storage = vec![nodecare_core::gate::StorageProblem {
            nodes: [nodes[1].name.clone(), nodes[2].name.clone()]
                .into_iter()
                .collect(),
            what: "inst1: minor 0 StandAlone".into(),
            unknown: false,
            drained: false,
        }];
        let view = View::from_cluster(
            &nodes,
            &instances,
            &group_names,
            &DomainSource::default(),
            storage,
            1_500,
        );
        let input = RoundInput {
            now_ms: 1_500,
            graced: [(
                nodes[2].name.clone(),
                nodecare_core::gate::Grace {
                    until_ms: 9_000,
                    holder: "maintenance campaign c1".into(),
                    disrupted: nodes[2].name.clone(),
                },
            )]
            .into_iter()
            .collect(),
            degraded: [("inst1".to_owned(), "minor 0".to_owned())]
                .into_iter()
                .collect(),
            grants: vec![(
                nodes[3].name.clone(),
                Holder::Grant {
                    id: uuid::Uuid::from_u128(5),
                    requester: "kured".into(),
                },
            )],
            overrides: Vec::new(),
            node_repair: nodecare_core::duty::node_repair::Records::default(),
            freezes: Vec::new(),
            approvals: Vec::new(),
            agents_seen: BTreeMap::new(),
            failed_outside_grace: 2,
            nodes,
            instances,
            groups: Some(groups),
            group_names,
            view: view.into(),
            agents,
        };
        let record = input.record().unwrap();
        assert_eq!(RoundInput::from_record(&record).unwrap(), input);
        assert!(RoundInput::from_record("{\"now_ms\": 1}").is_err());
    }
}
