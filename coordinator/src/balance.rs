//! Balancing (IO): runs Ganeti's `hbal` on the cluster as it is, and carries out the moves the
//! gate admits.
//!
//! Each round the duty is due (enabled, its interval passed, no operation of the last run in
//! flight), [`Balancer::propose`] reads the cluster through RAPI ([`ClusterSource`]), writes it
//! in the htools text format, feeds it to `hbal -t /dev/stdin -C -G GROUP …` per node group in
//! the executor's sandbox (no shell, empty environment, timeout, output cap), reads the plans
//! strictly and turns their first job sets into proposals ([`nodecare_core::duty::balancing`]). A
//! missing or failing hbal, or an output it cannot read, is reported in the status and the
//! metrics and nothing else happens.
//!
//! [`Balancer::execute`] records every operation of each admitted job as an entry of the
//! executor's ledger ([`nodecare_exec`], held by the run, viewed as a [`BalanceMove`]), durable
//! before anything is submitted, and has the executor submit them as Ganeti jobs, each
//! depending on the one before it, with the reason trail `gnt:daemon:maintd` naming the run and
//! the move. The executor follows them; after a crash, a move recorded but not known as
//! submitted is adopted when Ganeti shows a job with its reason, and given up otherwise
//! ([`Unadopted::Fail`]: the next run plans again from the cluster as it is).
//! [`Balancer::settle`] counts the outcomes and forgets old runs.
//!
//! Dynamic load: with `load = true` (the default) the run reads every online node's signed load
//! report ([`LoadSource`], the agents' `cpu-avg-load` and `kvm-inst-rss`), verifies it, and
//! gives it to hbal as maintd did (`--mond=yes --mond-data FILE`, [`nodecare_core::load`]), with
//! `--exit-on-missing-mond-data` so that hbal never drops it silently. When a node's load is
//! missing, unverifiable or old, the load is left out (hbal balances on the static resources
//! alone) and the status and `/metrics` say so and why.

use std::collections::BTreeMap;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nodecare_collectors::builtin::systool::{ToolError, ToolLimits, run_tool_with_input};
use nodecare_roll::hbal::{self, HbalError, HbalPlan};
use nodecare_roll::{Cluster, htext};
use uuid::Uuid;

use crate::board::Board;
use nodecare_core::duty::balancing::{self, BalancingConfig, Proposals};
use nodecare_core::gate::{Decision, Holder, InForce};
use nodecare_core::incident::Incident;
use nodecare_exec::ledger::{Entry, Hold, LedgerError};
use nodecare_exec::{Changed, Executor, Unadopted};
use nodecare_ganeti::{Ganeti, Node};

/// How long finished balancing moves are kept (for the status and the API).
const MOVES_KEPT_MS: u64 = 7 * 24 * 3600 * 1000;

/// Most bytes of hbal output read.
const HBAL_STDOUT_CAP: usize = 4 * 1024 * 1024;

/// A future of a [`ClusterSource`].
pub type SourceFuture<'a> = Pin<Box<dyn Future<Output = Result<Cluster, String>> + Send + 'a>>;

/// Where the cluster hbal balances comes from.
pub trait ClusterSource: Send + Sync + fmt::Debug {
    /// The cluster as htools sees it.
    fn cluster(&self) -> SourceFuture<'_>;
}

impl ClusterSource for nodecare_ganeti::rapi::RapiClient {
    fn cluster(&self) -> SourceFuture<'_> {
        Box::pin(async move {
            let answers = nodecare_roll::from_rapi::DecodedAnswers {
                info: self.cluster_info().await.map_err(|e| e.to_string())?,
                groups: self.groups().await.map_err(|e| e.to_string())?,
                nodes: self.nodes().await.map_err(|e| e.to_string())?,
                instances: self.instances().await.map_err(|e| e.to_string())?,
            };
            nodecare_roll::from_rapi::cluster_from_decoded(&answers).map_err(|e| e.to_string())
        })
    }
}

/// A fixed cluster (tests, a text file).
#[derive(Debug, Clone)]
pub struct FixedCluster(pub Cluster);

impl ClusterSource for FixedCluster {
    fn cluster(&self) -> SourceFuture<'_> {
        Box::pin(async move { Ok(self.0.clone()) })
    }
}

/// Why hbal gave no plan.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum BalanceError {
    /// The cluster could not be read.
    #[error("cannot read the cluster: {0}")]
    Cluster(String),
    /// hbal is not installed.
    #[error("hbal is missing ({0})")]
    Missing(String),
    /// hbal failed (exit code, timeout, too much output).
    #[error("hbal failed: {0}")]
    Hbal(String),
    /// hbal's output is not what it prints.
    #[error("node group {group}: {error}")]
    Output {
        /// The node group.
        group: String,
        /// What is wrong.
        error: HbalError,
    },
}

/// A future of a [`LoadSource`].
pub type LoadFuture<'a> =
    Pin<Box<dyn Future<Output = BTreeMap<String, nodecare_core::load::LoadReading>> + Send + 'a>>;

/// Where the agents' load reports come from.
pub trait LoadSource: Send + Sync + fmt::Debug {
    /// The load readings of `nodes` (the online nodes), by node name.
    fn load<'a>(&'a self, nodes: &'a [Node], now_ms: u64) -> LoadFuture<'a>;
}

/// The agents' signed load reports, read and verified by the scraper.
#[derive(Debug)]
pub struct AgentLoad {
    scraper: crate::scrape::Scraper,
    urls: crate::scrape::AgentUrls,
    /// The last accepted load report sequence per node.
    sequences: Mutex<BTreeMap<String, u64>>,
}

impl AgentLoad {
    /// Reads the agents at `urls` through `scraper`.
    pub fn new(scraper: crate::scrape::Scraper, urls: crate::scrape::AgentUrls) -> Self {
        Self {
            scraper,
            urls,
            sequences: Mutex::new(BTreeMap::new()),
        }
    }
}

impl LoadSource for AgentLoad {
    fn load<'a>(&'a self, nodes: &'a [Node], now_ms: u64) -> LoadFuture<'a> {
        Box::pin(async move {
            let targets: Vec<crate::scrape::AgentTarget> = nodes
                .iter()
                .map(|node| crate::scrape::AgentTarget {
                    node: node.name.clone(),
                    node_uuid: node.uuid.clone(),
                    base_url: self.urls.base(node),
                })
                .collect();
            let sequences = self
                .sequences
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .clone();
            let results = self.scraper.scrape_load(targets, &sequences, now_ms).await;
            let mut sequences = self
                .sequences
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            results
                .into_iter()
                .map(|(node, (reading, sequence))| {
                    if let Some(sequence) = sequence {
                        sequences.insert(node.clone(), sequence);
                    }
                    (node, reading)
                })
                .collect()
        })
    }
}

/// A verified load report older than this is not current (six of the agent's signing
/// intervals).
pub const LOAD_MAX_AGE_MS: u64 = 60_000;

/// Runs hbal on `cluster` for each node group to balance (with nodes), with the dynamic load in
/// `mond_data` (the contents of a `--mond-data` file) when given, and reads the plans with full
/// names.
pub async fn plans(
    config: &BalancingConfig,
    cluster: &Cluster,
    mond_data: Option<&str>,
) -> Result<Vec<(String, HbalPlan)>, BalanceError> {
    // A private file (0600, removed when dropped) for the whole run.
    let mond_file = match mond_data {
        None => None,
        Some(data) => {
            use std::io::Write as _;
            let mut file = tempfile::Builder::new()
                .prefix("nodecare-mond-data-")
                .suffix(".json")
                .tempfile()
                .map_err(|e| BalanceError::Hbal(format!("cannot write the load file: {e}")))?;
            file.write_all(data.as_bytes())
                .and_then(|()| file.flush())
                .map_err(|e| BalanceError::Hbal(format!("cannot write the load file: {e}")))?;
            Some(file)
        }
    };
    let mond_path = mond_file
        .as_ref()
        .map(|file| file.path().display().to_string());
    let text = htext::serialize(cluster);
    let mut present: BTreeMap<String, String> = BTreeMap::new();
    for node in &cluster.nodes {
        if let Some(group) = cluster.groups.get(node.group) {
            present.insert(group.name.clone(), group.uuid.clone());
        }
    }
    // A configured group that is gone (or empty) is said, not skipped silently.
    if let Some(missing) = config.groups.iter().find(|wanted| {
        !present
            .iter()
            .any(|(name, uuid)| name == *wanted || uuid == *wanted)
    }) {
        return Err(BalanceError::Cluster(format!(
            "node group {missing} (balancing.groups) not found or without nodes"
        )));
    }
    let nodes: Vec<String> = cluster.nodes.iter().map(|n| n.name.clone()).collect();
    let instances: Vec<String> = cluster.instances.iter().map(|i| i.name.clone()).collect();
    let limits = ToolLimits {
        timeout: Duration::from_secs_f64(config.timeout),
        stdout_cap: HBAL_STDOUT_CAP,
    };
    let mut out = Vec::new();
    for group in config.groups_to_balance(&present) {
        let mut options = config.hbal_options(Some(&group));
        options.mond_data.clone_from(&mond_path);
        let args = hbal::hbal_args("/dev/stdin", &options);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let stdout =
            run_tool_with_input(&config.hbal, &args, Some(text.clone().into_bytes()), limits)
                .await
                .map_err(|error| match error {
                    ToolError::Missing(path) => BalanceError::Missing(path.display().to_string()),
                    other => BalanceError::Hbal(format!("node group {group}: {other}")),
                })?;
        let stdout = String::from_utf8(stdout).map_err(|_| BalanceError::Output {
            group: group.clone(),
            error: HbalError {
                line: 0,
                message: "not UTF-8".into(),
            },
        })?;
        let plan = hbal::parse(&stdout)
            .and_then(|plan| plan.resolve(&nodes, &instances))
            .map_err(|error| BalanceError::Output {
                group: group.clone(),
                error,
            })?;
        out.push((group, plan));
    }
    Ok(out)
}

pub use crate::metrics::BalancingMetrics;
pub use nodecare_core::duty::balancing::{BalanceMove, BalanceStatus, GroupPlan, MoveState};

/// The balancing duty's proposals of one round.
#[derive(Debug, Clone, Default)]
pub struct BalancingRound {
    /// The run (when hbal ran this round).
    pub run: Option<Uuid>,
    /// The proposals and left-out jobs.
    pub proposals: Proposals,
}

/// The balancing duty's executor.
#[derive(Debug)]
pub struct Balancer {
    config: BalancingConfig,
    source: Option<Arc<dyn ClusterSource>>,
    load: Option<Arc<dyn LoadSource>>,
    last_run_ms: Mutex<Option<u64>>,
    failback: nodecare_core::duty::failback::FailbackConfig,
}

impl Balancer {
    /// A balancer reading the cluster from `source`.
    pub fn new(config: BalancingConfig, source: Option<Arc<dyn ClusterSource>>) -> Self {
        Self {
            config,
            source,
            load: None,
            last_run_ms: Mutex::new(None),
            failback: nodecare_core::duty::failback::FailbackConfig::default(),
        }
    }

    /// The same balancer, moving evacuated instances back as `failback` says.
    #[must_use]
    pub const fn with_failback(
        mut self,
        failback: nodecare_core::duty::failback::FailbackConfig,
    ) -> Self {
        self.failback = failback;
        self
    }

    /// How failback is configured.
    pub const fn failback(&self) -> &nodecare_core::duty::failback::FailbackConfig {
        &self.failback
    }

    /// Reads the agents' load from `load` from now on (with `load = true`).
    pub fn set_load_source(&mut self, load: Arc<dyn LoadSource>) {
        self.load = Some(load);
    }

    /// The dynamic load for hbal: none when `load = false`, else the agents' verified reports
    /// for the nodes of `cluster` (left out, with why, when one is missing).
    async fn mond_data(
        &self,
        cluster: &Cluster,
        nodes: &[Node],
        now_ms: u64,
    ) -> Option<nodecare_core::load::MondData> {
        if !self.config.load {
            return None;
        }
        let load_nodes: Vec<nodecare_core::load::LoadNode> = cluster
            .nodes
            .iter()
            .map(|n| nodecare_core::load::LoadNode {
                name: n.name.clone(),
                offline: n.offline,
            })
            .collect();
        let wanted: std::collections::BTreeSet<&str> = load_nodes
            .iter()
            .filter(|l| !l.offline)
            .map(|l| l.name.as_str())
            .collect();
        let online: Vec<Node> = nodes
            .iter()
            .filter(|n| !n.offline && wanted.contains(n.name.as_str()))
            .cloned()
            .collect();
        let readings = match &self.load {
            Some(source) => source.load(&online, now_ms).await,
            None => BTreeMap::new(),
        };
        Some(nodecare_core::load::mond_data(
            &load_nodes,
            &readings,
            now_ms,
            LOAD_MAX_AGE_MS,
        ))
    }

    /// Reads the cluster from `source` from now on.
    pub fn set_source(&mut self, source: Arc<dyn ClusterSource>) {
        self.source = Some(source);
    }

    fn set_status(board: &Board, update: impl FnOnce(&mut BalanceStatus)) {
        if let Ok(mut status) = board.balancing.write() {
            update(status.get_or_insert_with(BalanceStatus::default));
        }
    }

    /// Runs hbal when due and proposes the first job set of its plans; nothing when balancing
    /// is off, not due, or waits for the last run's operations.
    pub async fn propose(
        &self,
        executor: &Executor,
        board: &Board,
        incidents: &[Incident],
        nodes: &[Node],
        in_force: &InForce,
        now_ms: u64,
    ) -> Result<BalancingRound, LedgerError> {
        if !self.config.enabled {
            return Ok(BalancingRound::default());
        }
        let in_flight = in_flight(executor)?;
        if in_flight > 0 {
            Self::set_status(board, |s| {
                s.waiting = Some(format!(
                    "{in_flight} operation(s) of the last run in flight"
                ));
            });
            return Ok(BalancingRound::default());
        }
        {
            let mut last = self
                .last_run_ms
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let interval = (self.config.interval * 1000.0) as u64;
            if last.is_some_and(|last| now_ms.saturating_sub(last) < interval) {
                return Ok(BalancingRound::default());
            }
            *last = Some(now_ms);
        }
        let run = Uuid::new_v4();
        let mut load = None;
        // Instance → MiB as hbal sees it: what each move moves (for the gate).
        let mut memory: BTreeMap<String, u64> = BTreeMap::new();
        let result = match &self.source {
            None => Err(BalanceError::Cluster("no RAPI source configured".into())),
            Some(source) => match source.cluster().await {
                Ok(cluster) => {
                    memory = cluster
                        .instances
                        .iter()
                        .filter_map(|i| Some((i.name.clone(), u64::try_from(i.mem).ok()?)))
                        .collect();
                    load = self.mond_data(&cluster, nodes, now_ms).await;
                    let file = load.as_ref().and_then(|l| l.file.as_deref());
                    plans(&self.config, &cluster, file).await
                }
                Err(error) => Err(BalanceError::Cluster(error)),
            },
        };
        let load_text = load.as_ref().map_or_else(
            || "off (balancing.load = false)".to_owned(),
            nodecare_core::load::MondData::describe,
        );
        match &load {
            Some(data) if data.file.is_none() => {
                tracing::warn!(load = %load_text, "balancing: dynamic load left out");
            }
            _ => {}
        }
        board
            .metrics
            .balancing
            .load(load.as_ref().map(|l| (l.file.is_some(), l.missing.len())));
        let mond_data = load.and_then(|l| l.file);
        let plans = match result {
            Ok(plans) => plans,
            Err(error) => {
                tracing::warn!(%error, "balancing: no plan");
                board.metrics.balancing.run(false);
                Self::set_status(board, |s| {
                    *s = BalanceStatus {
                        last_run_ms: Some(now_ms),
                        run: Some(run),
                        error: Some(error.to_string()),
                        load: Some(load_text),
                        mond_data,
                        ..BalanceStatus::default()
                    };
                });
                return Ok(BalancingRound::default());
            }
        };
        board.metrics.balancing.run(true);
        let blocked = balancing::blocked_nodes(incidents, nodes, in_force);
        let proposals = balancing::propose(&plans, &blocked, &memory, now_ms, Uuid::new_v4);
        board
            .metrics
            .balancing
            .moves("proposed", proposals.proposals.len());
        board
            .metrics
            .balancing
            .moves("left-out", proposals.left_out.len());
        for left in &proposals.left_out {
            tracing::info!(instance = %left.job.instance, why = %left.why, "balancing: move left out");
        }
        Self::set_status(board, |s| {
            *s = BalanceStatus {
                last_run_ms: Some(now_ms),
                run: Some(run),
                groups: plans
                    .iter()
                    .map(|(group, plan)| GroupPlan {
                        group: group.clone(),
                        initial_score: plan.initial_score,
                        final_score: plan.final_score,
                        jobsets: plan.jobsets.len(),
                    })
                    .collect(),
                proposed: proposals
                    .jobs
                    .iter()
                    .map(|p| format!("{}: {} => {}", p.job.instance, p.job.from, p.job.to))
                    .collect(),
                left_out: proposals.left_out.clone(),
                load: Some(load_text),
                mond_data,
                ..BalanceStatus::default()
            };
        });
        Ok(BalancingRound {
            run: Some(run),
            proposals,
        })
    }

    /// Records the operations of the balancing jobs the gate admitted and has the executor
    /// submit them; returns how many Ganeti jobs were submitted, and the instances whose first
    /// job was.
    pub async fn execute(
        &self,
        ganeti: &dyn Ganeti,
        executor: &Executor,
        board: &Board,
        decision: &Decision,
        round: &BalancingRound,
        now_ms: u64,
    ) -> Result<(usize, Vec<String>), LedgerError> {
        let Some(run) = round.run else {
            return Ok((0, Vec::new()));
        };
        let holder = Holder::Balancing { id: run };
        let mut refused = Vec::new();
        let mut entries: Vec<Entry> = Vec::new();
        let mut jobs: Vec<(String, String, String)> = Vec::new();
        for judgement in &decision.judgements {
            let Holder::Balancing { id } = &judgement.proposal.holder else {
                continue;
            };
            let Some(proposed) = round.proposals.job(*id) else {
                continue;
            };
            let job = &proposed.job;
            if let Err(blocked) = &judgement.outcome {
                tracing::info!(instance = %job.instance, %blocked, "balancing: move refused by the gate");
                refused.push((job.instance.clone(), blocked.to_string()));
                continue;
            }
            for (n, op) in job.ops.iter().enumerate() {
                let mut entry = BalanceMove {
                    run,
                    key: format!("{}-{}", job.instance, n + 1),
                    holder: *id,
                    group: proposed.group.clone(),
                    instance: job.instance.clone(),
                    op: op.clone(),
                    state: balancing::MoveState::Planned,
                    job_id: None,
                    created_ms: now_ms,
                    finished_ms: None,
                    error: None,
                }
                .to_entry()
                .holding([Hold::Moving {
                    instance: job.instance.clone(),
                    from: placement(&job.from),
                    to: placement(&job.to),
                }]);
                entry.description = format!(
                    "balancing ({} {} => {}): {op} {}",
                    proposed.group, job.from, job.to, job.instance
                );
                entries.push(entry);
            }
            jobs.push((
                nodecare_exec::ledger::trail_key(&format!("{}-1", job.instance)),
                format!("{}: {} => {}", job.instance, job.from, job.to),
                job.instance.clone(),
            ));
        }
        // Durable before anything is submitted.
        executor.record(&entries)?;
        let submitted = executor.submit(ganeti, Some(&holder), now_ms).await?;
        let (started, instances): (Vec<String>, Vec<String>) = jobs
            .into_iter()
            .filter(|(first, _, _)| submitted.iter().any(|e| &e.key == first))
            .map(|(_, job, instance)| (job, instance))
            .unzip();
        board.metrics.balancing.moves("refused", refused.len());
        board.metrics.balancing.moves("submitted", started.len());
        Self::set_status(board, |s| {
            s.refused = refused;
            s.submitted = started;
            s.waiting = None;
        });
        Ok((submitted.len(), instances))
    }

    /// Counts the outcomes of the balancing moves the executor saw end (`changed`: of this
    /// round's adoption and poll) and forgets old finished runs.
    pub fn settle(
        &self,
        executor: &Executor,
        board: &Board,
        changed: &[Changed],
        now_ms: u64,
    ) -> Result<(), LedgerError> {
        for c in changed
            .iter()
            .filter(|c| matches!(c.entry.holder, Holder::Balancing { .. }))
        {
            match balancing::BalanceMove::from_entry(&c.entry).map(|m| m.state) {
                Some(balancing::MoveState::Succeeded) => {
                    board.metrics.balancing.moves("succeeded", 1);
                }
                Some(balancing::MoveState::Failed) => board.metrics.balancing.moves("failed", 1),
                _ => {}
            }
        }
        let forgotten = executor
            .ledger()
            .prune("balancing", now_ms.saturating_sub(MOVES_KEPT_MS))?;
        if forgotten > 0 {
            tracing::debug!(forgotten, "balancing: old finished moves forgotten");
        }
        if in_flight(executor)? == 0 {
            Self::set_status(board, |s| s.waiting = None);
        }
        Ok(())
    }
}

/// What becomes of a balancing move whose submission is uncertain and that Ganeti does not
/// show: it failed (the next run plans again from the cluster as it is).
pub const UNADOPTED: Unadopted = Unadopted::Fail;

/// The nodes of a placement: primary, then DRBD secondary.
fn placement(p: &nodecare_roll::hbal::Placement) -> Vec<String> {
    std::iter::once(p.primary.clone())
        .chain(p.secondary.clone())
        .collect()
}

/// The balancing moves in flight (hbal's and failback's).
pub fn in_flight(executor: &Executor) -> Result<usize, LedgerError> {
    Ok(executor
        .ledger()
        .unfinished()?
        .iter()
        .filter(|e| matches!(e.holder, Holder::Balancing { .. }))
        .count())
}
