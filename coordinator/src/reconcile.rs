//! The round: an idempotent reconciler.
//!
//! Every round re-reads everything (the store, Ganeti, the agents) and takes at most one step
//! per incident, so restarting after a crash is the same code path as a normal round:
//!
//! 1. Check that this node is the master (else stop with [`RoundError::NotMaster`]).
//! 2. Intents recorded but not known to be submitted (a crash or a lost answer in between) are
//!    looked up in Ganeti's job list by their reason; found ones are adopted, the others were
//!    never submitted and are dropped (and planned again below, under the same key).
//! 3. Submitted jobs are polled; a failed job fails its incident, a job running longer than
//!    `job_timeout` too. Only then are nodes and instances read, so the snapshot is never older
//!    than the job results it is combined with.
//! 4. Every online node's agent is read; verified verdicts create incidents or (un)observe them;
//!    unreachable or unverifiable agents change nothing.
//! 5. Tags of finalized incidents are checked (removal acknowledges).
//! 6. The node-repair duty proposes each node's most severe active incident; the gate decides
//!    (failure domains, caps, storage health, breaker); admitted incidents take their next step;
//!    moves that conflict with jobs in flight wait.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use uuid::Uuid;

use nodecare_protocol::repair::{RepairRequest, RepairState};
use nodecare_protocol::status::CanceledJob;
use nodecare_protocol::{DiagnoseStatus, now_ms};

use crate::breaker::{self, BreakerPolicy, BreakerState};
use crate::duty::node_repair;
use crate::duty::node_repair::intent::{after_cancel, escalation_target, next_key, service_facts};
use crate::ganeti::{Ganeti, GanetiError, Instance, JobId, Node, Reason};
use crate::gate::{self, Admitted, Caps, DomainSource, GateSnapshot, Holder, InForce};
use crate::incident::{Action, Disposition, Event, Incident, RepairStatus};
use crate::plan::{
    self, EvacuationChain, EvacuationFinish, EvacuationPolicy, EvacuationStep, Lock, Round,
    ServiceStep, return_to_service,
};
use crate::repair::{RepairAnswer, RepairClient};
use crate::scrape::{AgentOutcome, AgentTarget, AgentUrls, Scraper};
use crate::store::{Intent, IntentSpec, IntentState, Store, StoreError};

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
}

/// What the round learned before acting that quiets or feeds the duties.
struct Quiet<'a> {
    /// Agents outside a grace that gave no verified report (the breaker's signal).
    failed_outside_grace: usize,
    /// Nodes in the grace of a planned disruption, until when.
    graced: &'a BTreeMap<String, u64>,
    /// DRBD instances degraded with both nodes online past [`DEGRADED_GRACE_MS`], and why.
    degraded: &'a BTreeMap<String, String>,
    /// The node groups with their tags (none when they could not be read).
    groups: Option<Vec<crate::ganeti::Group>>,
}

/// How often the round tries to remove the tag of an incident whose acknowledgement was asked
/// for through nodecare before it leaves it to the operator (`gnt-node remove-tags`).
pub const MAX_UNTAG_ATTEMPTS: usize = 3;

/// The store document holding the last accepted storage report sequence per node.
pub const STORAGE_SEQUENCES_DOCUMENT: &str = "storage-sequences";

/// The store document holding the storm breaker's state.
pub use crate::store::BREAKER_DOCUMENT;

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

impl From<crate::exec::ledger::LedgerError> for RoundError {
    fn from(error: crate::exec::ledger::LedgerError) -> Self {
        Self::Store(StoreError::Ledger(error))
    }
}

/// The master named by `<dir>/ssconf_master_node`, if that file is there and names one.
pub fn ssconf_master(dir: &std::path::Path) -> Option<String> {
    let text = std::fs::read_to_string(dir.join("ssconf_master_node")).ok()?;
    let name = text.trim();
    (!name.is_empty()).then(|| name.to_owned())
}

/// What the last round did, for the status API.
pub use nodecare_protocol::status::RoundSummary;

pub use crate::board::Board;

/// The reconciler.
#[derive(Debug)]
pub struct Reconciler {
    ganeti: Arc<dyn Ganeti>,
    store: Arc<Store>,
    scraper: Scraper,
    repairs: RepairClient,
    settings: ReconcileSettings,
    board: Arc<Board>,
    /// Serialises incident changes between rounds and the cancel endpoint.
    incident_lock: Arc<tokio::sync::Mutex<()>>,
    rounds: u64,
    /// The balancing duty (none: off).
    balancer: Option<crate::balance::Balancer>,
    /// The executor over the store's ledger.
    executor: crate::exec::Executor,
    /// While an incident admitted under an operator override takes its step: the override, who
    /// set it and why, added to its jobs' reason trail.
    override_note: std::sync::Mutex<Option<String>>,
    /// DRBD instances seen degraded with both nodes online, and since when (Unix ms).
    degraded_since: std::sync::Mutex<BTreeMap<String, u64>>,
    /// The agents' verified, fresh reports of this round (for the campaigns).
    agents_seen: std::sync::Mutex<BTreeMap<String, crate::campaign::AgentNow>>,
    /// The state's replication to the master candidates (none: off).
    replicator: Option<Arc<crate::replica::Replicator>>,
}

/// How long a DRBD instance must stay degraded with both nodes online before the
/// instance-repair duty replaces the broken side (a resync or a reconnect usually ends sooner).
pub const DEGRADED_GRACE_MS: u64 = 5 * 60 * 1000;

pub(crate) fn now_s() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// Result of canceling an incident.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CancelOutcome {
    /// Canceled (or already canceled); the incident is kept while observed.
    Canceled,
    /// Canceled and forgotten at once (no longer observed).
    Forgotten,
    /// No such incident.
    NotFound,
    /// It is already completed or failed.
    Finalized(String),
}

/// Cancels an incident (shared by the HTTP API, the web page and tests): recorded at once,
/// without waiting for a round in progress (whose older copy of the incident can no longer
/// replace the canceled record, and which submits nothing more for it). Its jobs that have not
/// started are canceled by [`stop_incident_jobs`], which the caller runs once the cancel is
/// recorded (and, with replication, kept by the master candidates). A canceled incident whose
/// jobs are still in flight is kept until they end, so that what ran is recorded.
pub async fn cancel_incident(store: &Store, uuid: Uuid) -> Result<CancelOutcome, StoreError> {
    let Some(mut incident) = store.incident(uuid)? else {
        return Ok(CancelOutcome::NotFound);
    };
    let disposition = match incident.apply(Event::Cancel, now_s()) {
        Ok(disposition) => disposition,
        Err(error) => return Ok(CancelOutcome::Finalized(error.to_string())),
    };
    let own: Vec<Intent> = store
        .intents()?
        .into_iter()
        .filter(|i| i.incident == uuid)
        .collect();
    let in_flight = own
        .iter()
        .any(|i| i.spec.is_ganeti_job() && i.state.is_in_flight());
    if disposition == Disposition::Forget && !in_flight {
        store.forget_incident(uuid)?;
        tracing::info!(incident = %uuid, node = %incident.node, "incident canceled and forgotten");
        return Ok(CancelOutcome::Forgotten);
    }
    if !in_flight && let Some(left) = after_cancel(&incident.node, &own.iter().collect::<Vec<_>>())
    {
        note(&mut incident, Event::Warning(left));
    }
    store.save_incident(&incident)?;
    tracing::info!(incident = %uuid, node = %incident.node, "incident canceled");
    Ok(CancelOutcome::Canceled)
}

/// Asks Ganeti to cancel the jobs of canceled incident `uuid` that are still in flight, the
/// last submitted first (so that no job of a chain starts between two cancels). Ganeti cancels
/// those not started (queued, or waiting for the jobs they depend on); a running job ends on
/// its own. Each job is asked once (`board.cancels_asked`); what Ganeti answered goes into the
/// incident's history, and each job's end is recorded as the rounds see it.
pub async fn stop_incident_jobs(
    ganeti: &dyn Ganeti,
    store: &Store,
    board: &Board,
    uuid: Uuid,
) -> Result<Vec<CanceledJob>, StoreError> {
    if store
        .incident(uuid)?
        .is_none_or(|i| i.repair_status != RepairStatus::Canceled)
    {
        return Ok(Vec::new());
    }
    let mut submitted: Vec<(JobId, String)> = store
        .intents()?
        .into_iter()
        .filter(|i| i.incident == uuid && i.state == IntentState::Submitted)
        .filter(|i| i.spec.is_ganeti_job())
        .filter_map(|i| i.job_id.map(|job| (job, i.key)))
        .collect();
    submitted.sort_by_key(|(job, _)| std::cmp::Reverse(*job));
    let mut answers = Vec::new();
    for (job, intent) in submitted {
        let first = board
            .cancels_asked
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(job);
        if !first {
            continue;
        }
        let (canceled, message) = match ganeti.cancel_job(job).await {
            Ok(answer) => (answer.canceled, answer.message),
            Err(error) => {
                if error.is_transient() {
                    // Asked again by the next round.
                    board
                        .cancels_asked
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .remove(&job);
                }
                (false, format!("cannot ask Ganeti to cancel it: {error}"))
            }
        };
        tracing::info!(incident = %uuid, job, intent = %intent, canceled, %message, "job cancel");
        answers.push(CanceledJob {
            job,
            intent,
            canceled,
            message,
        });
    }
    if !answers.is_empty()
        && let Some(mut incident) = store.incident(uuid)?
    {
        let said: Vec<String> = answers
            .iter()
            .map(|a| {
                if a.canceled {
                    format!("job {} ({}) canceled before it started", a.job, a.intent)
                } else {
                    format!("job {} ({}) not canceled: {}", a.job, a.intent, a.message)
                }
            })
            .collect();
        note(
            &mut incident,
            Event::Progress(format!("cancel: {}", said.join("; "))),
        );
        store.save_incident(&incident)?;
    }
    Ok(answers)
}

/// The nodecare reason `job` carries when it names another incident or intent than `intent`
/// (the job id is not the job submitted for it); `None` when it is that job, or carries no
/// nodecare reason at all (nothing to tell them apart by).
fn foreign_job(job: &crate::ganeti::Job, intent: &Intent) -> Option<String> {
    let reason = job
        .reasons
        .iter()
        .find_map(|entry| Reason::parse_text(&entry.text))?;
    (reason.incident != intent.incident || reason.intent != intent.key)
        .then(|| format!("incident {} intent {}", reason.incident, reason.intent))
}

/// Applies an event whose refusal is harmless (e.g. progress on a canceled incident).
fn note(incident: &mut Incident, event: Event) {
    if let Err(error) = incident.apply(event, now_s()) {
        tracing::debug!(%error, "event not applied");
    }
}

/// Whether `holder` is an incident (node repair, which follows its own entries).
const fn is_incident(holder: &Holder) -> bool {
    matches!(holder, Holder::Incident { .. })
}

impl Reconciler {
    /// A reconciler.
    pub fn new(
        ganeti: Arc<dyn Ganeti>,
        store: Arc<Store>,
        scraper: Scraper,
        repairs: RepairClient,
        settings: ReconcileSettings,
        board: Arc<Board>,
        incident_lock: Arc<tokio::sync::Mutex<()>>,
    ) -> Self {
        let ledger: Arc<dyn crate::exec::ledger::Ledger> = store.clone();
        Self {
            executor: crate::exec::Executor::new(ledger),
            ganeti,
            store,
            scraper,
            repairs,
            settings,
            board,
            incident_lock,
            rounds: 0,
            balancer: None,
            override_note: std::sync::Mutex::new(None),
            degraded_since: std::sync::Mutex::new(BTreeMap::new()),
            agents_seen: std::sync::Mutex::new(BTreeMap::new()),
            replicator: None,
        }
    }

    /// Where the balancing duty reads the cluster (nothing when balancing is off).
    pub fn set_cluster_source(&mut self, source: Arc<dyn crate::balance::ClusterSource>) {
        if let Some(balancer) = &mut self.balancer {
            balancer.set_source(source);
        }
    }

    /// The same reconciler taking over the replicated state before it acts, and telling the
    /// replication which nodes are master candidates each round.
    #[must_use]
    pub fn with_replicator(mut self, replicator: Arc<crate::replica::Replicator>) -> Self {
        self.replicator = Some(replicator);
        self
    }

    /// The state's replication, when on.
    pub fn replicator(&self) -> Option<&Arc<crate::replica::Replicator>> {
        self.replicator.as_ref()
    }

    /// The same reconciler with the balancing duty.
    #[must_use]
    pub fn with_balancer(mut self, mut balancer: crate::balance::Balancer) -> Self {
        balancer.set_load_source(Arc::new(crate::balance::AgentLoad::new(
            self.scraper.clone(),
            self.settings.agent_urls.clone(),
        )));
        self.balancer = Some(balancer);
        self
    }

    /// The board shared with the HTTP API.
    pub fn board(&self) -> &Arc<Board> {
        &self.board
    }

    /// Checks that this node is the master: ssconf's `ssconf_master_node` (when readable) must
    /// name this node, and so must RAPI's cluster information, which decides.
    pub async fn check_master(&self) -> Result<(), RoundError> {
        if let Some(master) = self.settings.ssconf_dir.as_deref().and_then(ssconf_master)
            && master != self.settings.node_name
        {
            return Err(RoundError::NotMaster {
                node: self.settings.node_name.clone(),
                master,
            });
        }
        let info = self.ganeti.cluster_info().await?;
        if info.master != self.settings.node_name {
            return Err(RoundError::NotMaster {
                node: self.settings.node_name.clone(),
                master: info.master,
            });
        }
        Ok(())
    }

    /// Runs one round and records its summary.
    pub async fn round(&mut self) -> Result<RoundSummary, RoundError> {
        self.rounds += 1;
        let started = std::time::Instant::now();
        let mut summary = RoundSummary {
            number: self.rounds,
            started_ms: now_ms(),
            ..RoundSummary::default()
        };
        let result = self.round_inner(&mut summary).await;
        summary.duration_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
        if let Err(error) = &result {
            summary.error = Some(error.to_string());
        }
        self.board
            .metrics
            .round_done(started.elapsed(), result.is_err());
        match self.store.incidents() {
            Ok(incidents) => self.board.changes.observe(&incidents, &self.board.metrics),
            Err(error) => tracing::warn!(%error, "cannot read incidents for notifications"),
        }
        if let Ok(mut last) = self.board.last_round.write() {
            *last = summary.clone();
        }
        result.map(|()| summary)
    }

    async fn round_inner(&mut self, summary: &mut RoundSummary) -> Result<(), RoundError> {
        if let Err(error) = self.check_master().await {
            if let (RoundError::NotMaster { .. }, Some(replicator)) = (&error, &self.replicator) {
                replicator.stand_down().await;
            }
            return Err(error);
        }
        if let Some(replicator) = &self.replicator
            && !replicator.has_taken_over().await
        {
            // Nothing is read from the store or planned before the newest state is here.
            let nodes = self.ganeti.nodes().await?;
            replicator.take_over(&nodes).await?;
        }
        let guard = Arc::clone(&self.incident_lock).lock_owned().await;
        self.adopt_or_drop_planned().await?;
        // First the jobs of canceled incidents (a cancel the API could not pass on to Ganeti,
        // or a job submitted while the cancel was recorded), then every job's outcome.
        self.stop_canceled().await?;
        self.poll_jobs().await?;
        self.settle_canceled()?;
        // The executor's ledger: jobs adopted after a crash, entries ready submitted, every
        // job followed to its outcome.
        let mut changed: Vec<crate::exec::Changed> = self
            .executor
            .adopt(
                &*self.ganeti,
                |holder| match holder {
                    Holder::Balancing { .. } => crate::balance::UNADOPTED,
                    Holder::InstanceRepair { .. } => crate::instance_repair_exec::UNADOPTED,
                    _ => crate::exec::Unadopted::Retry,
                },
                now_ms(),
            )
            .await?
            .into_iter()
            .map(|entry| crate::exec::Changed { entry, job: None })
            .collect();
        self.executor.submit(&*self.ganeti, None, now_ms()).await?;
        // Node repair follows its incidents' jobs itself (`poll_jobs`).
        changed.extend(
            self.executor
                .poll_of(&*self.ganeti, |h| !is_incident(h), now_ms())
                .await?,
        );
        if let Some(balancer) = &self.balancer {
            balancer.settle(&self.executor, &self.board, &changed, now_ms())?;
        }
        drop(guard);
        // Read the cluster only after the jobs: a snapshot older than a job's "success" would
        // still show the instance where it was, and the move would be planned again.
        let nodes = self.ganeti.nodes().await?;
        if let Some(replicator) = &self.replicator {
            replicator.set_candidates(&nodes).await;
        }
        let instances = self.ganeti.instances().await?;
        // Group names label domains and caps (without them, the groups' uuids serve); their
        // tags feed instance repair (which waits for a round that can read them).
        let groups = match self.ganeti.groups().await {
            Ok(groups) => Some(groups),
            Err(error) => {
                tracing::warn!(%error, "cannot read node groups; using their uuids as names");
                None
            }
        };
        let group_names: BTreeMap<String, String> = groups
            .iter()
            .flatten()
            .map(|group| (group.uuid.clone(), group.name.clone()))
            .collect();
        // Storage health from the agents' signed DRBD reports (and RAPI): the gate's input.
        let storage_sequences: BTreeMap<String, u64> = self
            .store
            .document(STORAGE_SEQUENCES_DOCUMENT)?
            .unwrap_or_default();
        let storage = self
            .scraper
            .storage_health(
                &nodes,
                &instances,
                &self.settings.agent_urls,
                &storage_sequences,
                now_ms,
                crate::scrape::DEFAULT_STORAGE_MAX_AGE_MS,
            )
            .await;
        if storage.sequences != storage_sequences {
            self.store
                .save_document(STORAGE_SEQUENCES_DOCUMENT, &storage.sequences)?;
        }
        let degraded = self.degraded_instances(&nodes, &instances, &storage.readings);
        let view = gate::View::from_cluster(
            &nodes,
            &instances,
            &group_names,
            &self.settings.gate.domains,
            storage.problems,
            now_ms(),
        );
        let grace_ms = u64::try_from(self.settings.gate.grace.as_millis()).unwrap_or(u64::MAX);
        let graced = gate::grace(&view, &self.planned_disruptions()?, grace_ms);
        let failed_outside_grace = self.observe(&nodes, &graced, summary).await?;
        let _guard = Arc::clone(&self.incident_lock).lock_owned().await;
        summary.jobs_submitted += self.check_tags(&nodes).await?;
        self.act(
            &nodes,
            &instances,
            &group_names,
            view,
            Quiet {
                failed_outside_grace,
                graced: &graced,
                degraded: &degraded,
                groups,
            },
            summary,
        )
        .await?;
        Ok(())
    }

    /// The stored intents in `state` that are Ganeti jobs.
    fn ganeti_intents(&self, state: IntentState) -> Result<Vec<Intent>, RoundError> {
        Ok(self
            .store
            .intents()?
            .into_iter()
            .filter(|i| i.state == state && i.spec.is_ganeti_job())
            .collect())
    }

    /// Step 2: planned intents whose submission is uncertain.
    async fn adopt_or_drop_planned(&self) -> Result<(), RoundError> {
        let planned = self.ganeti_intents(IntentState::Planned)?;
        if planned.is_empty() {
            return Ok(());
        }
        let jobs = self.ganeti.jobs().await?;
        let mut by_reason: BTreeMap<(Uuid, String), JobId> = BTreeMap::new();
        for job in &jobs {
            if let Some(reason) = job.nodecare_reason() {
                // The lowest id wins should Ganeti ever show two (it cannot: keys are unique).
                by_reason
                    .entry((reason.incident, reason.intent))
                    .or_insert(job.id);
            }
        }
        for mut intent in planned {
            let Some(mut incident) = self.store.incident(intent.incident)? else {
                continue;
            };
            match by_reason.get(&(intent.incident, intent.key.clone())) {
                Some(&job) => {
                    intent.state = IntentState::Submitted;
                    intent.job_id = Some(job);
                    intent.submitted_ms = Some(now_ms());
                    note(&mut incident, Event::JobSubmitted(job));
                    tracing::info!(incident = %incident.uuid, intent = %intent.key, job,
                        "adopted job submitted before a restart");
                    self.store.update_intent(&incident, &intent)?;
                }
                None => {
                    tracing::info!(incident = %incident.uuid, intent = %intent.key,
                        "intent was never submitted; planning it again");
                    self.store.drop_intent(intent.incident, &intent.key)?;
                }
            }
        }
        Ok(())
    }

    /// The jobs of canceled incidents not yet asked to cancel are asked now.
    async fn stop_canceled(&self) -> Result<(), RoundError> {
        let canceled: BTreeSet<Uuid> = self
            .store
            .incidents()?
            .into_iter()
            .filter(|i| i.repair_status == RepairStatus::Canceled)
            .map(|i| i.uuid)
            .collect();
        let waiting: BTreeSet<Uuid> = self
            .ganeti_intents(IntentState::Submitted)?
            .into_iter()
            .filter(|i| canceled.contains(&i.incident))
            .map(|i| i.incident)
            .collect();
        for uuid in waiting {
            stop_incident_jobs(&*self.ganeti, &self.store, &self.board, uuid).await?;
        }
        Ok(())
    }

    /// A canceled incident whose jobs have all ended says in what state it left the node.
    fn settle_canceled(&self) -> Result<(), RoundError> {
        let intents = self.store.intents()?;
        for mut incident in self
            .store
            .incidents()?
            .into_iter()
            .filter(|i| i.repair_status == RepairStatus::Canceled)
        {
            let own: Vec<&Intent> = intents
                .iter()
                .filter(|i| i.incident == incident.uuid)
                .collect();
            if own.iter().any(|i| i.state.is_in_flight()) {
                continue;
            }
            let Some(left) = after_cancel(&incident.node, &own) else {
                continue;
            };
            let before = incident.serial_no;
            note(&mut incident, Event::Warning(left));
            if incident.serial_no != before {
                self.store.save_incident(&incident)?;
            }
        }
        Ok(())
    }

    /// Step 3: poll submitted jobs.
    ///
    /// A job of an evacuation that did not succeed is judged against the cluster as it is now
    /// ([`plan::judge_failed_step`]): only a genuine failure fails the incident; a move whose
    /// goal already holds counts as done, and a job whose precondition changed under it (or that
    /// never ran because a job it depended on did not succeed) is planned again next round.
    async fn poll_jobs(&self) -> Result<(), RoundError> {
        let mut submitted = self.ganeti_intents(IntentState::Submitted)?;
        // In job order: in a chain, the first job that failed is seen (and names the failure)
        // before the jobs that failed because they depended on it.
        submitted.sort_by_key(|intent| intent.job_id);
        // The cluster as it is, read once when a failed job needs judging.
        let mut instances: Option<Option<Vec<Instance>>> = None;
        for mut intent in submitted {
            let Some(job_id) = intent.job_id else {
                continue;
            };
            let Some(mut incident) = self.store.incident(intent.incident)? else {
                continue;
            };
            let outcome = match self.ganeti.job(job_id).await {
                Ok(job) if foreign_job(&job, &intent).is_some() => {
                    // Not the job submitted for this intent (the id was reused after the queue
                    // was lost, e.g. in a master failover): it says nothing about the step.
                    let other = foreign_job(&job, &intent).unwrap_or_default();
                    Some(Err((
                        format!("job {job_id} in Ganeti's queue is another job ({other})"),
                        Some(plan::JobFailure::NotRun(format!(
                            "job {job_id} is not the job submitted for {}",
                            intent.key
                        ))),
                    )))
                }
                Ok(job) if job.status.is_final() => {
                    if job.status == crate::ganeti::JobStatus::Success {
                        Some(Ok(()))
                    } else {
                        let errors = if job.errors.is_empty() {
                            job.status.as_str().to_owned()
                        } else {
                            job.errors.join("; ")
                        };
                        Some(Err((
                            format!("job {job_id} {}: {errors}", job.status.as_str()),
                            Some(plan::JobFailure::of_job(&job)),
                        )))
                    }
                }
                Ok(job) => {
                    let age =
                        now_ms().saturating_sub(intent.submitted_ms.unwrap_or(intent.created_ms));
                    if age
                        > u64::try_from(self.settings.job_timeout.as_millis()).unwrap_or(u64::MAX)
                        && incident.is_active()
                    {
                        let why = format!(
                            "job {job_id} still {} after {}s",
                            job.status.as_str(),
                            self.settings.job_timeout.as_secs()
                        );
                        tracing::warn!(incident = %incident.uuid, %why, "job timed out");
                        self.board.metrics.job_failed(&intent.spec);
                        note(&mut incident, Event::ActionFailed(why));
                        self.store.save_incident(&incident)?;
                    }
                    None
                }
                Err(GanetiError::NotFound(_)) => Some(Err((
                    format!("job {job_id} vanished from Ganeti's queue"),
                    None,
                ))),
                Err(error) => {
                    tracing::warn!(job = job_id, %error, "cannot read job status");
                    None
                }
            };
            let Some(outcome) = outcome else { continue };
            intent.finished_ms = Some(now_ms());
            let is_tag = matches!(intent.spec, IntentSpec::Tag { .. });
            let is_untag = matches!(intent.spec, IntentSpec::Untag { .. });
            let judged = match &outcome {
                Err((_, Some(failure))) if !is_tag && !is_untag && incident.is_active() => {
                    if instances.is_none() {
                        instances = Some(self.ganeti.instances().await.ok());
                    }
                    let step = match &intent.spec {
                        IntentSpec::Move { planned } => Some(planned),
                        _ => None,
                    };
                    let replans = self.replans(&intent)?;
                    Some(plan::judge_failed_step(
                        step,
                        &incident.node,
                        failure,
                        instances.as_ref().and_then(Option::as_deref),
                        replans,
                    ))
                }
                _ => None,
            };
            match (outcome, judged) {
                (Ok(()), _) => {
                    intent.state = IntentState::Succeeded;
                    let event = if is_tag {
                        Event::TagApplied
                    } else {
                        Event::Progress(format!("job {job_id} ({}) succeeded", intent.key))
                    };
                    tracing::info!(incident = %incident.uuid, intent = %intent.key, job = job_id, "job succeeded");
                    note(&mut incident, event);
                }
                (Err((why, _)), Some(plan::FailedStep::Done(done))) => {
                    intent.state = IntentState::Succeeded;
                    intent.error = Some(format!("{why}; {done}"));
                    tracing::info!(incident = %incident.uuid, intent = %intent.key, job = job_id, %why, "step done already");
                    note(
                        &mut incident,
                        Event::Progress(format!("job {job_id} ({}): {done}", intent.key)),
                    );
                }
                (Err((why, _)), Some(plan::FailedStep::Replan { why: again, .. })) => {
                    intent.state = IntentState::Replanned;
                    intent.error = Some(format!("{why}; {again}"));
                    tracing::info!(incident = %incident.uuid, intent = %intent.key, job = job_id, %why, "step planned again");
                    note(
                        &mut incident,
                        Event::Progress(format!("job {job_id} ({}): {again}", intent.key)),
                    );
                }
                (Err((why, _)), judged) => {
                    let why = match judged {
                        Some(plan::FailedStep::Failed(judged)) if !why.contains(&judged) => {
                            format!("{why}; {judged}")
                        }
                        _ => why,
                    };
                    intent.state = IntentState::Failed;
                    intent.error = Some(why.clone());
                    tracing::warn!(incident = %incident.uuid, intent = %intent.key, %why, "job failed");
                    self.board.metrics.job_failed(&intent.spec);
                    let event = if is_tag {
                        Event::Progress(format!("tag job failed, will retry: {why}"))
                    } else if is_untag {
                        Event::Progress(format!("removing the tag failed: {why}"))
                    } else if incident.repair_status == RepairStatus::Canceled {
                        Event::Progress(format!("job {job_id} ({}) ended: {why}", intent.key))
                    } else {
                        Event::ActionFailed(why)
                    };
                    note(&mut incident, event);
                }
            }
            self.store.update_intent(&incident, &intent)?;
        }
        Ok(())
    }

    /// How often the move of `intent`'s instance was planned again because Ganeti refused
    /// its precondition.
    fn replans(&self, intent: &Intent) -> Result<usize, RoundError> {
        let IntentSpec::Move { planned } = &intent.spec else {
            return Ok(0);
        };
        Ok(self
            .store
            .intents()?
            .iter()
            .filter(|i| i.incident == intent.incident && i.state == IntentState::Replanned)
            .filter(|i| {
                matches!(&i.spec, IntentSpec::Move { planned: other } if other.instance() == planned.instance())
            })
            .filter(|i| {
                i.error
                    .as_deref()
                    .is_some_and(|e| e.contains(plan::PRECONDITION_CHANGED))
            })
            .count())
    }

    /// Step 4: read the agents and update incidents from verified verdicts.
    /// DRBD instances whose minors a verified storage report shows degraded while both of their
    /// nodes are online, for longer than [`DEGRADED_GRACE_MS`]: instance → why.
    fn degraded_instances(
        &self,
        nodes: &[Node],
        instances: &[Instance],
        readings: &BTreeMap<String, crate::storage::StorageReading>,
    ) -> BTreeMap<String, String> {
        let online: BTreeSet<&str> = nodes
            .iter()
            .filter(|n| !n.offline)
            .map(|n| n.name.as_str())
            .collect();
        let mut now_degraded: BTreeMap<String, String> = BTreeMap::new();
        for (node, reading) in readings {
            let crate::storage::StorageReading::Verified(observation) = reading else {
                continue;
            };
            let nodecare_protocol::DrbdState::Minors { minors } = &observation.payload.drbd else {
                continue;
            };
            for minor in minors.iter().filter(|m| !m.is_whole()) {
                let Some(name) = &minor.instance else {
                    continue;
                };
                let Some(instance) = instances.iter().find(|i| &i.name == name) else {
                    continue;
                };
                let both_online = online.contains(instance.primary_node.as_str())
                    && instance
                        .secondary_nodes
                        .iter()
                        .all(|s| online.contains(s.as_str()));
                if both_online {
                    now_degraded
                        .entry(name.clone())
                        .or_insert_with(|| format!("{node}: {}", minor.describe()));
                }
            }
        }
        let now = now_ms();
        let mut since = self
            .degraded_since
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        since.retain(|name, _| now_degraded.contains_key(name));
        for name in now_degraded.keys() {
            since.entry(name.clone()).or_insert(now);
        }
        now_degraded
            .into_iter()
            .filter(|(name, _)| {
                since
                    .get(name)
                    .is_some_and(|first| now.saturating_sub(*first) >= DEGRADED_GRACE_MS)
            })
            .collect()
    }

    /// Planned disruptions (node, Unix ms its grace runs from): admission grants (from their
    /// last renewal) and maintenance reboots (throughout, then from their end), whose failure
    /// domains get a grace.
    fn planned_disruptions(&self) -> Result<Vec<(String, u64)>, RoundError> {
        Ok(self
            .store
            .planned_grants(now_ms())?
            .into_iter()
            .chain(crate::campaign_exec::planned_disruptions(
                &self.store,
                now_ms(),
            )?)
            .collect())
    }

    /// Step 4; returns how many agents outside a grace gave no verified report.
    async fn observe(
        &self,
        nodes: &[Node],
        graced: &BTreeMap<String, u64>,
        summary: &mut RoundSummary,
    ) -> Result<usize, RoundError> {
        let targets: Vec<AgentTarget> = nodes
            .iter()
            .filter(|node| !node.offline)
            .map(|node| AgentTarget {
                node: node.name.clone(),
                node_uuid: node.uuid.clone(),
                base_url: self.settings.agent_urls.base(node),
            })
            .collect();
        if let Ok(mut watched) = self.board.targets.write() {
            watched.clone_from(&targets);
        }
        let sequences = self.store.agent_sequences()?;
        let results = self.scraper.scrape(targets, &sequences, now_ms).await;
        if let Some(why) = crate::scrape::local_failure(&results) {
            return Err(RoundError::Local(why));
        }
        summary.agents = results.len();
        let now = now_ms();
        let mut accepted = Vec::new();
        let mut failed_outside_grace = 0;
        {
            let mut board = self
                .board
                .agents
                .write()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let present: BTreeSet<&str> = nodes.iter().map(|n| n.name.as_str()).collect();
            board.retain(|node, _| present.contains(node.as_str()));
            for result in &results {
                let previous_ok = board.get(&result.node).and_then(|s| s.last_ok_ms);
                let status = result.status(now, previous_ok);
                match &result.outcome {
                    AgentOutcome::Verified(o) | AgentOutcome::Stale(o) => {
                        accepted.push((result.node.clone(), o.sequence));
                    }
                    AgentOutcome::Unreachable(e) | AgentOutcome::Unverifiable(e) => {
                        summary.agents_failed += 1;
                        if !graced.contains_key(&result.node) {
                            failed_outside_grace += 1;
                        }
                        let changed = board
                            .get(&result.node)
                            .is_none_or(|s| s.error.as_deref() != Some(e.as_str()));
                        if changed {
                            tracing::warn!(node = %result.node, state = %status.state, error = %e, "agent gave no verified report");
                        }
                    }
                }
                board.insert(result.node.clone(), status);
            }
        }
        self.store.save_agent_sequences(&accepted)?;
        *self
            .agents_seen
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = results
            .iter()
            .filter_map(|result| match &result.outcome {
                AgentOutcome::Verified(o) => Some((
                    result.node.clone(),
                    crate::campaign::AgentNow {
                        boot_id: o.boot_id.clone(),
                        reboot_required: o.reboot_required,
                        ok: o.verdict.status == DiagnoseStatus::Ok,
                        collected_at_ms: o.collected_at_ms,
                    },
                )),
                _ => None,
            })
            .collect();

        let _guard = Arc::clone(&self.incident_lock).lock_owned().await;
        let mut incidents = self.store.incidents()?;
        let node_uuids: BTreeSet<&str> = nodes.iter().map(|n| n.uuid.as_str()).collect();
        // Incidents of nodes that left the cluster are forgotten (their tag cannot exist).
        for incident in incidents
            .iter()
            .filter(|i| !node_uuids.contains(i.node_uuid.as_str()))
        {
            tracing::warn!(incident = %incident.uuid, node = %incident.node, "node left the cluster; forgetting its incident");
            self.store.forget_incident(incident.uuid)?;
        }
        incidents.retain(|i| node_uuids.contains(i.node_uuid.as_str()));
        // Incidents whose tag job is in flight (they are about to complete).
        let intents = self.store.intents()?;
        let tagging: BTreeSet<Uuid> = intents
            .iter()
            .filter(|i| matches!(i.spec, IntentSpec::Tag { .. }) && i.state.is_in_flight())
            .map(|i| i.incident)
            .collect();
        let in_flight: BTreeSet<Uuid> = intents
            .iter()
            .filter(|i| i.spec.is_ganeti_job() && i.state.is_in_flight())
            .map(|i| i.incident)
            .collect();
        let time = now_s();
        for result in &results {
            let AgentOutcome::Verified(observation) = &result.outcome else {
                continue;
            };
            let verdict = &observation.verdict;
            // An unknown verdict says nothing about whether the problem is gone.
            if verdict.status == DiagnoseStatus::Unknown {
                continue;
            }
            let action = Action::from_status(verdict.status);
            let matched = incidents
                .iter()
                .any(|i| i.node_uuid == result.node_uuid && i.fingerprint == verdict.fingerprint);
            // A new, more invasive verdict escalates the node's open incident instead of
            // opening a second one; a less invasive one never de-escalates it.
            // Not during the grace of a planned disruption of the node's domain.
            let target = match action {
                Some(action) if !matched && !graced.contains_key(&result.node) => {
                    escalation_target(&incidents, &result.node_uuid, action)
                }
                _ => None,
            };
            if let Some(target) = target
                && !target.action.is_evacuation()
                && tagging.contains(&target.uuid)
            {
                // Its live repair succeeded and its repairready tag is on its way: it
                // completes, and the next round opens a new incident for the new verdict. (An
                // evacuation's tag ends it evacuated and offline, as the escalation wants.)
                tracing::info!(incident = %target.uuid, node = %result.node,
                    "more invasive verdict; waiting for the incident's tag job first");
                continue;
            }
            let escalated = target.map(|i| i.uuid);
            for incident in incidents
                .iter_mut()
                .filter(|i| i.node_uuid == result.node_uuid)
            {
                let event = if incident.fingerprint == verdict.fingerprint {
                    Event::Observed
                } else if Some(incident.uuid) == escalated
                    && let Some(action) = action
                {
                    tracing::info!(incident = %incident.uuid, node = %incident.node,
                        from = incident.action.as_str(), to = action.as_str(),
                        fingerprint = %verdict.fingerprint, "incident escalated");
                    Event::Escalate {
                        action,
                        verdict: verdict.clone(),
                        original: observation.original.clone(),
                    }
                } else {
                    Event::NotObserved
                };
                let before = incident.serial_no;
                match incident.apply(event, time) {
                    // A canceled incident is kept until its jobs have ended (what ran is
                    // recorded).
                    Ok(Disposition::Forget)
                        if incident.repair_status == RepairStatus::Canceled
                            && in_flight.contains(&incident.uuid) =>
                    {
                        self.store.save_incident(incident)?;
                    }
                    Ok(Disposition::Forget) => {
                        tracing::info!(incident = %incident.uuid, node = %incident.node,
                            status = incident.repair_status.as_str(), "incident forgotten");
                        self.store.forget_incident(incident.uuid)?;
                    }
                    Ok(Disposition::Keep) if incident.serial_no != before => {
                        self.store.save_incident(incident)?;
                    }
                    _ => {}
                }
            }
            if !matched
                && action.is_some()
                && let Some(until) = graced.get(&result.node)
            {
                tracing::info!(node = %result.node, verdict = verdict.status.as_str(), grace_until_ms = until,
                    "verdict not acted on: the node's failure domain is in the grace of a planned disruption");
                continue;
            }
            if !matched
                && escalated.is_none()
                && let Some(action) = action
            {
                let incident = Incident::new(
                    Uuid::new_v4(),
                    &result.node,
                    &result.node_uuid,
                    verdict.clone(),
                    observation.original.clone(),
                    action,
                    time,
                );
                tracing::info!(incident = %incident.uuid, node = %incident.node,
                    action = action.as_str(), fingerprint = %verdict.fingerprint, "new incident noted");
                self.store.save_incident(&incident)?;
            }
        }
        Ok(failed_outside_grace)
    }

    /// Step 5: acknowledgement by tag removal; with `undrain_on_ack`, an acknowledged
    /// incident's node returns to service. Returns the jobs submitted.
    async fn check_tags(&self, nodes: &[Node]) -> Result<usize, RoundError> {
        let by_uuid: BTreeMap<&str, &Node> = nodes.iter().map(|n| (n.uuid.as_str(), n)).collect();
        let intents = self.store.intents()?;
        let mut submitted = 0;
        for mut incident in self.store.incidents()? {
            let Some(node) = by_uuid.get(incident.node_uuid.as_str()).copied() else {
                continue;
            };
            let own: Vec<&Intent> = intents
                .iter()
                .filter(|i| i.incident == incident.uuid)
                .collect();
            let returning = self.settings.undrain_on_ack
                && !matches!(
                    return_to_service(&service_facts(node, &own)),
                    ServiceStep::Done
                );
            if let Some(who) = incident.acknowledgement_asked_by.clone()
                && incident.tag_applied
                && !incident.acknowledged
                && node.tags.contains(&incident.tag)
            {
                submitted += self.untag(&mut incident, node, &own, &who).await?;
            }
            let acknowledged_now = incident.awaits_acknowledgement(&node.tags);
            if acknowledged_now {
                match incident.apply(Event::TagRemoved, now_s()) {
                    Ok(Disposition::Forget) if !returning => {
                        tracing::info!(incident = %incident.uuid, node = %incident.node, "tag removed; incident forgotten");
                        self.store.forget_incident(incident.uuid)?;
                        continue;
                    }
                    Ok(_) => {
                        tracing::info!(incident = %incident.uuid, node = %incident.node, "tag removed; acknowledged");
                        self.store.save_incident(&incident)?;
                    }
                    Err(_) => continue,
                }
            }
            if returning && incident.acknowledged {
                submitted += self.return_to_service(&mut incident, node, &own).await?;
            } else if node.offline && incident.acknowledged && !acknowledged_now {
                // An offline node reports nothing and nodecare will not bring it back: the
                // acknowledgement hands it to the operator (docs: "The end of an incident").
                // One round after the acknowledgement, so that every reader of the round's
                // changes (the webhook, the page) sees the acknowledgement first.
                if let Ok(Disposition::Forget) = incident.apply(Event::NodeOffline, now_s()) {
                    tracing::info!(incident = %incident.uuid, node = %incident.node, "acknowledged on an offline node; incident forgotten");
                    self.store.forget_incident(incident.uuid)?;
                }
            }
        }
        Ok(submitted)
    }

    /// Removes the tag of an incident whose acknowledgement an operator asked for through
    /// nodecare (the web page): one recorded job with the reason trail, like every other; none
    /// while one is in flight, and none after [`MAX_UNTAG_ATTEMPTS`] failed. Returns the jobs
    /// submitted.
    async fn untag(
        &self,
        incident: &mut Incident,
        node: &Node,
        own: &[&Intent],
        who: &str,
    ) -> Result<usize, RoundError> {
        let untags: Vec<&&Intent> = own
            .iter()
            .filter(|i| matches!(i.spec, IntentSpec::Untag { .. }))
            .collect();
        if untags.iter().any(|i| i.state.is_in_flight()) {
            return Ok(0);
        }
        let failed = untags
            .iter()
            .filter(|i| i.state == IntentState::Failed)
            .count();
        if failed >= MAX_UNTAG_ATTEMPTS {
            return Ok(0);
        }
        let key = next_key(own, "untag-");
        let spec = IntentSpec::Untag {
            node: node.name.clone(),
            tag: incident.tag.clone(),
        };
        let description = format!(
            "removing the tag {} from {}: acknowledged by {who}",
            incident.tag, node.name
        );
        Ok(usize::from(
            self.submit(incident, key, spec, Vec::new(), &description)
                .await?,
        ))
    }

    /// Returns an acknowledged incident's node to service (`undrain_on_ack`): online it if
    /// the incident offlined it, else undrain it if the incident drained it; one job per round,
    /// recorded as intents like every other. An incident due to be forgotten is forgotten once
    /// nothing is left to do.
    async fn return_to_service(
        &self,
        incident: &mut Incident,
        node: &Node,
        own: &[&Intent],
    ) -> Result<usize, RoundError> {
        let (key, spec, description) = match return_to_service(&service_facts(node, own)) {
            ServiceStep::Online => (
                "online",
                IntentSpec::Online {
                    node: node.name.clone(),
                },
                format!(
                    "setting {} online: its incident was acknowledged",
                    node.name
                ),
            ),
            ServiceStep::Undrain => (
                "undrain",
                IntentSpec::Undrain {
                    node: node.name.clone(),
                },
                format!("undraining {}: its incident was acknowledged", node.name),
            ),
            ServiceStep::Wait => return Ok(0),
            ServiceStep::Failed(why) => {
                let what = format!("returning {} to service failed: {why}", node.name);
                if incident.history.last().is_none_or(|h| h.event != what) {
                    tracing::warn!(incident = %incident.uuid, node = %node.name, %why, "returning the node to service failed");
                    note(incident, Event::Progress(what));
                    self.store.save_incident(incident)?;
                }
                return Ok(0);
            }
            ServiceStep::Done => {
                if incident.disposition() == Disposition::Forget {
                    tracing::info!(incident = %incident.uuid, node = %incident.node, "node back in service; incident forgotten");
                    self.store.forget_incident(incident.uuid)?;
                }
                return Ok(0);
            }
        };
        let submitted = self
            .submit(
                incident,
                key.into(),
                spec,
                vec![Lock::Node(node.name.clone())],
                &description,
            )
            .await?;
        if !submitted {
            self.store.save_incident(incident)?;
        }
        Ok(usize::from(submitted))
    }

    /// The storm breaker after this round's signals (persisted; transitions logged).
    fn breaker_round(
        &self,
        nodes: &[Node],
        incidents: &[Incident],
        agents: usize,
        agents_failed: usize,
    ) -> Result<BreakerState, RoundError> {
        let state: BreakerState = self.store.document(BREAKER_DOCUMENT)?.unwrap_or_default();
        let signals = breaker::Signals {
            nodes: nodes.len(),
            incident_opened_ms: incidents
                .iter()
                .map(|i| (i.node.clone(), (i.ctime.max(0.0) * 1000.0) as u64))
                .collect(),
            agents,
            agents_failed,
        };
        let (next, change) = breaker::step(
            &self.settings.gate.breaker,
            state.clone(),
            &signals,
            now_ms(),
        );
        match change {
            Some(breaker::Transition::Opened(why)) => {
                tracing::error!(%why, "storm breaker opened: no new disruption starts until it is reset (nodecare breaker reset)");
            }
            Some(breaker::Transition::Closed(why)) => {
                tracing::warn!(%why, "storm breaker closed");
            }
            None => {}
        }
        if next != state {
            self.store.save_document(BREAKER_DOCUMENT, &next)?;
        }
        Ok(next)
    }

    /// Step 6: the duties propose, the gate decides, the executor acts on what it admitted.
    async fn act(
        &self,
        nodes: &[Node],
        instances: &[Instance],
        group_names: &BTreeMap<String, String>,
        view: gate::View,
        quiet: Quiet<'_>,
        summary: &mut RoundSummary,
    ) -> Result<(), RoundError> {
        let Quiet {
            failed_outside_grace,
            graced,
            degraded,
            groups,
        } = quiet;
        let incidents = self.store.incidents()?;
        let intents = self.store.intents()?;
        let in_flight: Vec<Lock> = intents
            .iter()
            .filter(|i| i.state.is_in_flight())
            .flat_map(|i| i.locks.iter().cloned())
            .collect();
        let with_incidents: Vec<String> = incidents
            .iter()
            .filter(|i| i.is_active())
            .map(|i| i.node.clone())
            .collect();
        let by_uuid: BTreeMap<&str, &Node> = nodes.iter().map(|n| (n.uuid.as_str(), n)).collect();

        // The gate: what is disrupted, by whom, and which proposals may start.
        let settings = &self.settings.gate;
        let now = now_ms();
        for grant in self.store.expire_grants(now)? {
            tracing::info!(grant = %grant.id, node = %grant.node, requester = %grant.requester,
                "admission expired");
        }
        // What the executor's ledger holds (its holders' records still open).
        // Incidents' entries are left out: what they hold comes from the incidents
        // (`node_repair::holds`, `touches`); campaigns hold their nodes by their steps
        // (`campaign_exec::holds`, `touched`).
        let ledger_held = self
            .executor
            .in_force(|h| !is_incident(h) && !matches!(h, Holder::Campaign { .. }))?;
        // Instance repair reads Ganeti before the gate: the repairs whose jobs still run hold
        // their instances' nodes (read even with the duty off: `nodecare harep` runs too).
        let instance_repair_read = match (self.settings.instance_repair, groups.as_ref()) {
            (true, Some(groups)) => {
                match crate::instance_repair_exec::collect(
                    &*self.ganeti,
                    &self.executor,
                    instances,
                    groups.clone(),
                )
                .await
                {
                    Ok(collected) => Some(collected),
                    Err(error) => {
                        tracing::warn!(%error, "instance repair: cannot read Ganeti; skipped this round");
                        None
                    }
                }
            }
            _ => None,
        };
        let repair_holds = match &instance_repair_read {
            Some(collected) => crate::instance_repair_exec::holds(
                instances,
                nodes,
                Some(&collected.jobs),
                &collected.repairs_in_flight,
            ),
            None => {
                let (jobs, _) =
                    crate::instance_repair_exec::job_states(&*self.ganeti, instances).await;
                crate::instance_repair_exec::holds(instances, nodes, Some(&jobs), &BTreeMap::new())
            }
        };
        // Later holders win a node: nodecare's incidents, grants and campaigns over a repair.
        let in_force = InForce::new(
            &view,
            repair_holds
                .disrupted
                .into_iter()
                .chain(node_repair::holds(&incidents, nodes))
                .chain(self.store.grants_in_force(now)?)
                .chain(crate::campaign_exec::holds(&self.store)?)
                .chain(ledger_held.nodes.clone()),
        )
        .with_touched(
            &view,
            repair_holds
                .touched
                .into_iter()
                .chain(crate::campaign_exec::touched(&self.store)?)
                .chain(node_repair::touches(&incidents, nodes, instances))
                .chain(node_repair::move_targets(intents.iter().filter_map(
                    |i| match &i.spec {
                        IntentSpec::Move { planned } if i.state.is_in_flight() => {
                            Some((i.incident, planned))
                        }
                        _ => None,
                    },
                )))
                .chain(ledger_held.touching()),
        )
        .with_left_by(&gate::left_by(
            &view,
            crate::store::incident_flag_changes(&incidents, &intents)
                .into_iter()
                .chain(crate::campaign_exec::flag_changes(
                    &self.store,
                    &self.executor,
                )?)
                .chain(self.store.left_flags(&view)?),
        ));
        let breaker =
            self.breaker_round(nodes, &incidents, summary.agents, failed_outside_grace)?;
        let policy = gate::Policy {
            cluster: settings.cluster,
            groups: gate::group_caps(&settings.groups, group_names),
            overrides: self.store.overrides_in_force(now)?,
            breaker: breaker.open.as_ref().map(|(_, why)| why.clone()),
        };
        let override_notes: BTreeMap<Uuid, String> = policy
            .overrides
            .iter()
            .map(|o| {
                (
                    o.id,
                    format!(
                        "under override {} of {} by {}: {}",
                        o.id, o.domain, o.who, o.reason
                    ),
                )
            })
            .collect();
        let evacuating: BTreeSet<Uuid> = intents
            .iter()
            .filter(|i| {
                matches!(
                    i.spec,
                    IntentSpec::Drain { .. } | IntentSpec::Move { .. } | IntentSpec::Offline { .. }
                )
            })
            .map(|i| i.incident)
            .collect();
        let duty = node_repair::propose(&incidents, nodes, instances, &evacuating);
        let balancing = match &self.balancer {
            Some(balancer) => {
                balancer
                    .propose(
                        &self.executor,
                        &self.board,
                        &incidents,
                        nodes,
                        &in_force,
                        now_ms(),
                    )
                    .await?
            }
            None => crate::balance::BalancingRound::default(),
        };
        let mut proposals = duty.proposals;
        proposals.extend(balancing.proposals.proposals.iter().cloned());
        // Rolling maintenance: campaigns due for their next group propose it.
        let agents_seen = self
            .agents_seen
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        let world = crate::campaign_exec::world(
            nodes,
            instances,
            agents_seen,
            &view.storage,
            &self.settings.node_name,
            now,
        );
        let campaign_ctx = crate::campaign_exec::Context {
            ganeti: &*self.ganeti,
            store: &self.store,
            executor: &self.executor,
            repairs: &self.repairs,
            agent_urls: &self.settings.agent_urls,
            nodes,
            domains: &self.settings.gate.domains,
        };
        let campaigns = crate::campaign_exec::prepare(
            campaign_ctx,
            &world,
            &view,
            instances,
            groups.as_deref().unwrap_or_default(),
            &self.settings.node_name,
        )
        .await?;
        proposals.extend(campaigns.proposals.iter().cloned());
        // Instance repair (harep's duty): its repairs are proposals like any other; nodes in
        // the grace of a planned disruption are left alone.
        let instance_repair = instance_repair_read.map(|collected| {
            let inputs = crate::duty::instance_repair::Inputs {
                now: i64::try_from(now_ms() / 1000).unwrap_or(i64::MAX),
                cluster_tags: &collected.cluster_tags,
                groups: &collected.groups,
                nodes,
                instances,
                jobs: &collected.jobs,
                degraded,
                in_flight: &collected.in_flight,
            };
            let assessment = crate::duty::instance_repair::assess(&inputs, &mut Uuid::new_v4);
            proposals.extend(assessment.proposals().into_iter().filter(|p| {
                !p.disrupts
                    .iter()
                    .chain(p.touches.iter())
                    .any(|n| graced.contains_key(n))
            }));
            (collected, assessment)
        });
        let decision = gate::decide(&view, &policy, &in_force, proposals);
        self.board.metrics.set_disruptions(
            decision.in_force.nodes.keys().map(|name| {
                view.nodes
                    .get(name)
                    .map_or("unknown", |f| f.domain.as_str())
            }),
            settings.cluster.max_disrupted_nodes,
        );
        let disrupted: Vec<String> = decision.in_force.nodes.keys().cloned().collect();
        if let Ok(mut snapshot) = self.board.gate.write() {
            *snapshot = Some(GateSnapshot {
                view,
                policy,
                in_force,
                decision: decision.clone(),
            });
        }

        // Failed incidents still owe their failure tag.
        for incident in incidents
            .iter()
            .filter(|i| i.repair_status == RepairStatus::Failed && !i.tag_applied)
        {
            let own: Vec<&Intent> = intents
                .iter()
                .filter(|i| i.incident == incident.uuid)
                .collect();
            let tagging = own
                .iter()
                .any(|i| matches!(i.spec, IntentSpec::Tag { .. }) && i.state.is_in_flight());
            if !tagging && let Some(node) = by_uuid.get(incident.node_uuid.as_str()) {
                let mut incident = incident.clone();
                let key = next_key(&own, "tag-failed-");
                let spec = IntentSpec::Tag {
                    node: node.name.clone(),
                    tag: incident.tag.clone(),
                };
                summary.jobs_submitted += usize::from(
                    self.submit(
                        &mut incident,
                        key,
                        spec,
                        Vec::new(),
                        "tagging the node as failed",
                    )
                    .await?,
                );
            }
        }

        let by_id: BTreeMap<Uuid, &Incident> = incidents.iter().map(|i| (i.uuid, i)).collect();
        for (uuid, why) in duty.waiting {
            if let Some(incident) = by_id.get(&uuid) {
                let mut incident = (*incident).clone();
                if incident.apply(Event::Blocked(why), now_s()).is_ok() {
                    self.store.save_incident(&incident)?;
                }
            }
        }
        let mut round = Round::new(nodes, instances, in_flight, disrupted)
            .with_active_incidents(with_incidents);
        // Before any judgement: whether a held evacuation could ever succeed is the
        // configured policy's answer, not the default's.
        round.set_evacuation_policy(self.settings.evacuation);
        for judgement in &decision.judgements {
            let Holder::Incident { id } = &judgement.proposal.holder else {
                continue;
            };
            let Some(incident) = by_id.get(id) else {
                continue;
            };
            let mut incident = (*incident).clone();
            let admitted = match &judgement.outcome {
                Ok(admitted) => *admitted,
                Err(_)
                    if incident.action.is_evacuation()
                        && let Some(why) = by_uuid
                            .get(incident.node_uuid.as_str())
                            .and_then(|node| round.cannot_evacuate(&node.name)) =>
                {
                    // It could never succeed: fail now rather than wait for the gate.
                    self.fail(&mut incident, why)?;
                    continue;
                }
                Err(blocked) => {
                    if incident
                        .apply(Event::Blocked(blocked.to_string()), now_s())
                        .is_ok()
                    {
                        self.store.save_incident(&incident)?;
                    }
                    continue;
                }
            };
            let Some(node) = by_uuid.get(incident.node_uuid.as_str()).copied() else {
                continue;
            };
            let own: Vec<&Intent> = intents
                .iter()
                .filter(|i| i.incident == incident.uuid)
                .collect();
            // One step at a time: wait for this incident's jobs in flight.
            if own
                .iter()
                .any(|i| i.spec.is_ganeti_job() && i.state.is_in_flight())
            {
                continue;
            }
            let override_note = match admitted {
                Admitted::Override { id } => {
                    let text = override_notes
                        .get(&id)
                        .cloned()
                        .unwrap_or_else(|| format!("under override {id}"));
                    note(
                        &mut incident,
                        Event::Progress(format!("admitted by the operator: {text}")),
                    );
                    Some(text)
                }
                _ => None,
            };
            *self
                .override_note
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner) = override_note;
            let submitted = match incident.action {
                Action::LiveRepair => self.step_live_repair(&mut incident, node, &own).await?,
                Action::Evacuate | Action::EvacuateFailover => {
                    self.step_evacuation(&mut incident, node, &own, &mut round)
                        .await?
                }
            };
            *self
                .override_note
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner) = None;
            summary.jobs_submitted += submitted;
        }
        if let Some(balancer) = &self.balancer {
            summary.jobs_submitted += balancer
                .execute(
                    &*self.ganeti,
                    &self.executor,
                    &self.board,
                    &decision,
                    &balancing,
                    now_ms(),
                )
                .await?;
        }
        summary.jobs_submitted +=
            crate::campaign_exec::execute(campaign_ctx, &decision, &campaigns, &world).await?;
        if let Some((collected, assessment)) = instance_repair {
            let blocked: BTreeMap<&str, String> = decision
                .refused()
                .filter(|(p, _)| p.duty == gate::Duty::InstanceRepair)
                .flat_map(|(p, why)| {
                    assessment
                        .repairs
                        .iter()
                        .filter(move |r| r.proposal.holder == p.holder)
                        .map(move |r| (r.plan.instance.as_str(), why.to_string()))
                })
                .collect();
            let shown: Vec<nodecare_protocol::status::InstanceRepairSummary> = assessment
                .instances
                .iter()
                .filter(|i| i.state != "Healthy")
                .map(|i| nodecare_protocol::status::InstanceRepairSummary {
                    instance: i.instance.clone(),
                    state: i.state.clone(),
                    needs: i.needs.map(|t| t.as_str().to_owned()),
                    note: i.note.clone(),
                    blocked_by: blocked
                        .get(i.instance.as_str())
                        .cloned()
                        .or_else(|| i.blocked.clone()),
                })
                .collect();
            self.board
                .metrics
                .set_instance_repairs_blocked(blocked.len(), assessment.blocked().len());
            if let Ok(mut board) = self.board.instance_repairs.write() {
                *board = shown;
            }
            let report = crate::instance_repair_exec::run_instance_repairs(
                &*self.ganeti,
                &self.executor,
                &assessment,
                &decision,
                &collected,
                false,
                now_ms(),
            )
            .await;
            for line in &report.lines {
                tracing::info!(target: "nodecare::instance_repair", "{line}");
            }
            for error in collected.errors.iter().chain(report.errors.iter()) {
                tracing::warn!(%error, "instance repair");
            }
            summary.jobs_submitted += report
                .submitted
                .iter()
                .map(|(_, _, jobs)| jobs.len())
                .sum::<usize>();
        }
        Ok(())
    }

    async fn step_evacuation(
        &self,
        incident: &mut Incident,
        node: &Node,
        own: &[&Intent],
        round: &mut Round<'_>,
    ) -> Result<usize, RoundError> {
        // Escalated from live-repair: a repair still running is left to finish or time out.
        if let Some(repair) = own
            .iter()
            .find(|i| matches!(i.spec, IntentSpec::Repair { .. }) && i.state.is_in_flight())
            && !self
                .settle_superseded_repair(incident, node, (*repair).clone())
                .await?
        {
            return Ok(0);
        }
        let now = now_s();
        let failover = incident.action == Action::EvacuateFailover;
        let drained_before = own
            .iter()
            .any(|i| i.key == "drain" && i.state == IntentState::Succeeded);
        let step = if self.settings.job_chains {
            round.plan_evacuation_chain(&node.name, failover)
        } else {
            round.plan_evacuation(&node.name, failover)
        };
        match step {
            EvacuationStep::Chain(chain) => {
                if chain.drain && drained_before {
                    self.fail(
                        incident,
                        format!("node {} was undrained during the evacuation", node.name),
                    )?;
                    return Ok(0);
                }
                self.submit_chain(incident, node, own, chain).await
            }
            EvacuationStep::Drain => {
                if drained_before {
                    self.fail(
                        incident,
                        format!("node {} was undrained during the evacuation", node.name),
                    )?;
                    return Ok(0);
                }
                note(
                    incident,
                    Event::ActionStarted(format!("draining {}", node.name)),
                );
                let spec = IntentSpec::Drain {
                    node: node.name.clone(),
                };
                let locks = vec![Lock::Node(node.name.clone())];
                let description =
                    format!("draining {} for {}", node.name, incident.action.as_str());
                Ok(usize::from(
                    self.submit(incident, "drain".into(), spec, locks, &description)
                        .await?,
                ))
            }
            EvacuationStep::Wait(why) => {
                if incident.apply(Event::Blocked(why), now).is_ok() {
                    self.store.save_incident(incident)?;
                }
                Ok(0)
            }
            EvacuationStep::Fail(why) => {
                self.fail(incident, why)?;
                Ok(0)
            }
            EvacuationStep::Moves(moves) => {
                note(incident, Event::Unblocked);
                if incident.repair_status == RepairStatus::Noted {
                    // The node was drained before the incident: the moves are the first action.
                    note(
                        incident,
                        Event::ActionStarted(format!("evacuating {}", node.name)),
                    );
                }
                let mut count = 0;
                for planned in moves {
                    let prefix =
                        format!("{}-{}-", planned.action.verb(), planned.action.instance());
                    let key = next_key(own, &prefix);
                    let spec = IntentSpec::Move {
                        planned: planned.action.clone(),
                    };
                    if self
                        .submit(
                            incident,
                            key,
                            spec,
                            planned.locks.clone(),
                            &planned.description,
                        )
                        .await?
                    {
                        count += 1;
                    }
                    if !incident.is_active() {
                        // A refused submission failed the incident: no further jobs.
                        break;
                    }
                }
                Ok(count)
            }
            EvacuationStep::Done => {
                if incident.repair_status == RepairStatus::Noted {
                    note(
                        incident,
                        Event::ActionStarted(format!(
                            "{} holds no instance that can move",
                            node.name
                        )),
                    );
                }
                note(incident, Event::Unblocked);
                let finish = round.evacuation_finish(&node.name);
                self.submit_finish(
                    incident,
                    node,
                    own,
                    finish,
                    Vec::new(),
                    self.settings.job_chains,
                )
                .await
            }
        }
    }

    /// An incident escalated from live-repair to an evacuation may still have its repair
    /// running on the agent: the evacuation waits until it finished or timed out. Returns
    /// whether the evacuation may proceed; records the repair's end either way.
    async fn settle_superseded_repair(
        &self,
        incident: &mut Incident,
        node: &Node,
        mut intent: Intent,
    ) -> Result<bool, RoundError> {
        let base = self.settings.agent_urls.base(node);
        let answer = self.repairs.poll(&base, &incident.uuid.to_string()).await;
        let started = intent.submitted_ms.unwrap_or(intent.created_ms);
        let limit = u64::try_from(self.settings.repair_timeout.as_millis()).unwrap_or(u64::MAX);
        let timed_out = now_ms().saturating_sub(started) > limit;
        let end = match answer {
            RepairAnswer::Record(record) if record.state == RepairState::Running => {
                if timed_out {
                    Some((
                        IntentState::Failed,
                        format!(
                            "live repair still running after {}s; evacuating",
                            self.settings.repair_timeout.as_secs()
                        ),
                    ))
                } else {
                    None
                }
            }
            RepairAnswer::Record(record) if record.state == RepairState::Succeeded => Some((
                IntentState::Succeeded,
                "live repair finished; evacuating as escalated".into(),
            )),
            RepairAnswer::Record(record) => Some((
                IntentState::Failed,
                format!(
                    "live repair ended {:?}; evacuating as escalated",
                    record.state
                ),
            )),
            // The agent never ran it (or lost it): nothing is running.
            RepairAnswer::Unknown
            | RepairAnswer::Refused {
                transient: false, ..
            } => Some((
                IntentState::Failed,
                "live repair superseded by the escalation before it ran".into(),
            )),
            // Whether it still runs cannot be known: wait, at most until it would time out.
            RepairAnswer::Refused { .. } | RepairAnswer::Unreachable(_) if timed_out => Some((
                IntentState::Failed,
                format!(
                    "live repair unaccounted for after {}s; evacuating",
                    self.settings.repair_timeout.as_secs()
                ),
            )),
            RepairAnswer::Refused { .. } | RepairAnswer::Unreachable(_) => None,
        };
        let Some((state, what)) = end else {
            let why = format!(
                "the live repair on {} is still running; the evacuation follows when it ends",
                node.name
            );
            if incident.apply(Event::Blocked(why), now_s()).is_ok() {
                self.store.save_incident(incident)?;
            }
            return Ok(false);
        };
        intent.state = state;
        intent.finished_ms = Some(now_ms());
        if state == IntentState::Failed {
            intent.error = Some(what.clone());
        }
        note(incident, Event::Progress(what));
        self.store.update_intent(incident, &intent)?;
        Ok(true)
    }

    /// The end of an evacuation: shut down what cannot move (policy `shutdown`), set the node
    /// offline (`offline_after_evacuation`), then tag it repairready; instances left on the
    /// node (policy `leave`) become the incident's warning. `chained`: each stage depends on
    /// the one before (the first on `previous`), all submitted now; otherwise only the first
    /// stage still to do is submitted, and later rounds do the rest.
    async fn submit_finish(
        &self,
        incident: &mut Incident,
        node: &Node,
        own: &[&Intent],
        finish: EvacuationFinish,
        mut previous: Vec<JobId>,
        chained: bool,
    ) -> Result<usize, RoundError> {
        let mut count = 0;
        if !finish.left.is_empty() {
            note(
                incident,
                Event::Warning(format!(
                    "left on {} (immovable_instances = leave; the node stays online): {}",
                    node.name,
                    finish.left.join(", ")
                )),
            );
        }
        if !finish.shutdown.is_empty() {
            note(
                incident,
                Event::Warning(format!(
                    "shut down on {} (immovable_instances = shutdown): {}",
                    node.name,
                    finish.shutdown.join(", ")
                )),
            );
            let mut jobs = Vec::new();
            for instance in &finish.shutdown {
                let key = next_key(own, &format!("shutdown-{instance}-"));
                let spec = IntentSpec::Shutdown {
                    instance: instance.clone(),
                };
                let description =
                    format!("shutting down {instance}: it cannot leave {}", node.name);
                let job = self
                    .submit_after(
                        incident,
                        key,
                        spec,
                        vec![Lock::Instance(instance.clone())],
                        &description,
                        previous.clone(),
                    )
                    .await?;
                let Some(job) = job.filter(|_| incident.is_active()) else {
                    return Ok(count + jobs.len());
                };
                jobs.push(job);
            }
            count += jobs.len();
            if !chained {
                return Ok(count);
            }
            previous = jobs;
        }
        let offlined_before = own.iter().any(|i| {
            matches!(i.spec, IntentSpec::Offline { .. }) && i.state == IntentState::Succeeded
        });
        if finish.offline && !offlined_before {
            let key = next_key(own, "offline-");
            let spec = IntentSpec::Offline {
                node: node.name.clone(),
            };
            let description = format!("setting {} offline after its evacuation", node.name);
            let job = self
                .submit_after(
                    incident,
                    key,
                    spec,
                    vec![Lock::Node(node.name.clone())],
                    &description,
                    previous,
                )
                .await?;
            let Some(job) = job.filter(|_| incident.is_active()) else {
                return Ok(count);
            };
            count += 1;
            if !chained {
                return Ok(count);
            }
            previous = vec![job];
        }
        let key = next_key(own, "tag-ready-");
        let spec = IntentSpec::Tag {
            node: node.name.clone(),
            tag: incident.tag.clone(),
        };
        if self
            .submit_after(
                incident,
                key,
                spec,
                Vec::new(),
                "tagging the node as ready for repair",
                previous,
            )
            .await?
            .is_some()
        {
            count += 1;
        }
        Ok(count)
    }

    /// Submits an evacuation chain: the drain, each wave of moves depending on the jobs of the
    /// step before, then the repairready tag depending on the last wave. Each job's intent is
    /// recorded before it is submitted, as for single jobs. A submission that yields no job
    /// (refused, or uncertain until the next round looks it up by reason) ends the chain
    /// there: what follows would depend on a job that may not exist, and is planned again in
    /// a later round once this incident's jobs are done.
    async fn submit_chain(
        &self,
        incident: &mut Incident,
        node: &Node,
        own: &[&Intent],
        chain: EvacuationChain,
    ) -> Result<usize, RoundError> {
        note(incident, Event::Unblocked);
        let mut count = 0;
        let mut previous: Vec<JobId> = Vec::new();
        if chain.drain {
            note(
                incident,
                Event::ActionStarted(format!("draining {}", node.name)),
            );
            let spec = IntentSpec::Drain {
                node: node.name.clone(),
            };
            let locks = vec![Lock::Node(node.name.clone())];
            let description = format!("draining {} for {}", node.name, incident.action.as_str());
            let Some(job) = self
                .submit_after(
                    incident,
                    "drain".into(),
                    spec,
                    locks,
                    &description,
                    Vec::new(),
                )
                .await?
            else {
                return Ok(count);
            };
            count += 1;
            previous.push(job);
        } else if incident.repair_status == RepairStatus::Noted {
            // The node was drained before the incident: the moves are the first action.
            note(
                incident,
                Event::ActionStarted(format!("evacuating {}", node.name)),
            );
        }
        for wave in chain.waves {
            let mut jobs = Vec::new();
            for planned in wave {
                let prefix = format!("{}-{}-", planned.action.verb(), planned.action.instance());
                let key = next_key(own, &prefix);
                let spec = IntentSpec::Move {
                    planned: planned.action.clone(),
                };
                let job = self
                    .submit_after(
                        incident,
                        key,
                        spec,
                        planned.locks.clone(),
                        &planned.description,
                        previous.clone(),
                    )
                    .await?;
                if !incident.is_active() {
                    // A refused submission failed the incident: no further jobs.
                    return Ok(count + jobs.len());
                }
                let Some(job) = job else {
                    return Ok(count + jobs.len());
                };
                jobs.push(job);
            }
            count += jobs.len();
            previous = jobs;
        }
        if chain.tag {
            count += self
                .submit_finish(incident, node, own, chain.finish, previous, true)
                .await?;
        } else if !chain.waiting.is_empty() {
            note(
                incident,
                Event::Progress(format!(
                    "left for a later round: {}",
                    chain.waiting.join(", ")
                )),
            );
        }
        Ok(count)
    }

    async fn submit_ready_tag(
        &self,
        incident: &mut Incident,
        node: &Node,
        own: &[&Intent],
    ) -> Result<usize, RoundError> {
        let key = next_key(own, "tag-ready-");
        let spec = IntentSpec::Tag {
            node: node.name.clone(),
            tag: incident.tag.clone(),
        };
        note(incident, Event::Unblocked);
        Ok(usize::from(
            self.submit(
                incident,
                key,
                spec,
                Vec::new(),
                "tagging the node as ready for repair",
            )
            .await?,
        ))
    }

    async fn step_live_repair(
        &self,
        incident: &mut Incident,
        node: &Node,
        own: &[&Intent],
    ) -> Result<usize, RoundError> {
        let base = self.settings.agent_urls.base(node);
        let repair = own
            .iter()
            .find(|i| matches!(i.spec, IntentSpec::Repair { .. }));
        let mut intent = match repair {
            Some(intent) if intent.state == IntentState::Succeeded => {
                return self.submit_ready_tag(incident, node, own).await;
            }
            Some(intent) if intent.state == IntentState::Failed => {
                // Failed earlier but the incident was not marked (crash in between).
                let why = intent
                    .error
                    .clone()
                    .unwrap_or_else(|| "repair failed".into());
                self.fail(incident, why)?;
                return Ok(0);
            }
            Some(intent) => (*intent).clone(),
            None => {
                let Some(command) = incident.verdict.command.clone() else {
                    self.fail(
                        incident,
                        "the verdict asks for live-repair but names no repair command".into(),
                    )?;
                    return Ok(0);
                };
                let intent = Intent {
                    incident: incident.uuid,
                    key: "repair".into(),
                    spec: IntentSpec::Repair {
                        node: node.name.clone(),
                        command,
                    },
                    locks: Vec::new(),
                    state: IntentState::Planned,
                    job_id: None,
                    created_ms: now_ms(),
                    submitted_ms: None,
                    finished_ms: None,
                    error: None,
                };
                note(
                    incident,
                    Event::ActionStarted(format!("requesting repair on {}", node.name)),
                );
                self.store.plan_intent(incident, &intent)?;
                intent
            }
        };
        let IntentSpec::Repair { command, .. } = intent.spec.clone() else {
            return Ok(0);
        };
        let incident_id = incident.uuid.to_string();
        let mut answer = if intent.state == IntentState::Planned {
            let request = RepairRequest {
                node: node.name.clone(),
                incident_id: incident_id.clone(),
                command: command.clone(),
                input: incident.original.to_value(),
                nonce: Uuid::new_v4().simple().to_string(),
            };
            let sequence = self.store.next_counter("repair-sequence", now_ms())?;
            self.repairs
                .request(&base, request, sequence, now_ms())
                .await
        } else {
            self.repairs.poll(&base, &incident_id).await
        };
        // Short repairs finish within the round.
        let deadline = std::time::Instant::now() + self.settings.repair_poll;
        while matches!(&answer, RepairAnswer::Record(r) if r.state == RepairState::Running)
            && std::time::Instant::now() < deadline
        {
            tokio::time::sleep(Duration::from_millis(100)).await;
            answer = self.repairs.poll(&base, &incident_id).await;
        }
        let now = now_s();
        match answer {
            RepairAnswer::Record(record) => {
                if intent.state == IntentState::Planned {
                    intent.state = IntentState::Submitted;
                    intent.submitted_ms = Some(now_ms());
                    note(
                        incident,
                        Event::Progress(format!(
                            "repair command {command} started on {}",
                            node.name
                        )),
                    );
                }
                match record.state {
                    RepairState::Running => {
                        let started = intent.submitted_ms.unwrap_or(intent.created_ms);
                        let limit = u64::try_from(self.settings.repair_timeout.as_millis())
                            .unwrap_or(u64::MAX);
                        if now_ms().saturating_sub(started) > limit {
                            intent.state = IntentState::Failed;
                            intent.error = Some(format!(
                                "repair still running after {}s",
                                self.settings.repair_timeout.as_secs()
                            ));
                            self.store.update_intent(incident, &intent)?;
                            self.fail(incident, intent.error.clone().unwrap_or_default())?;
                        } else {
                            self.store.update_intent(incident, &intent)?;
                        }
                        Ok(0)
                    }
                    RepairState::Succeeded => {
                        intent.state = IntentState::Succeeded;
                        intent.finished_ms = Some(now_ms());
                        note(
                            incident,
                            Event::Progress(format!("repair command {command} exited 0")),
                        );
                        self.store.update_intent(incident, &intent)?;
                        let mut own: Vec<&Intent> = own.to_vec();
                        own.retain(|i| i.key != intent.key);
                        own.push(&intent);
                        self.submit_ready_tag(incident, node, &own).await
                    }
                    state => {
                        let detail = record
                            .error
                            .clone()
                            .or_else(|| record.exit_code.map(|c| format!("exit code {c}")))
                            .or_else(|| record.signal.map(|s| format!("signal {s}")))
                            .unwrap_or_default();
                        let why = format!("repair command {command} {state:?}: {detail}");
                        intent.state = IntentState::Failed;
                        intent.finished_ms = Some(now_ms());
                        intent.error = Some(why.clone());
                        self.store.update_intent(incident, &intent)?;
                        self.fail(incident, why)?;
                        Ok(0)
                    }
                }
            }
            RepairAnswer::Refused {
                status,
                message,
                transient: false,
            } => {
                let why = format!("agent refused the repair (HTTP {status}): {message}");
                intent.state = IntentState::Failed;
                intent.error = Some(why.clone());
                self.store.update_intent(incident, &intent)?;
                self.fail(incident, why)?;
                Ok(0)
            }
            RepairAnswer::Unknown if intent.state == IntentState::Submitted => {
                // The agent lost the run (e.g. its state was wiped): ask again.
                intent.state = IntentState::Planned;
                self.store.update_intent(incident, &intent)?;
                Ok(0)
            }
            other => {
                let why = format!("repair request pending: {other:?}");
                if incident.apply(Event::Blocked(why), now).is_ok() {
                    self.store.save_incident(incident)?;
                }
                Ok(0)
            }
        }
    }

    fn fail(&self, incident: &mut Incident, why: String) -> Result<(), RoundError> {
        tracing::warn!(incident = %incident.uuid, node = %incident.node, %why, "incident failed");
        if incident.apply(Event::ActionFailed(why), now_s()).is_ok() {
            self.store.save_incident(incident)?;
        }
        Ok(())
    }

    /// Records the intent, submits the job and records the outcome. Returns whether a job
    /// was submitted.
    async fn submit(
        &self,
        incident: &mut Incident,
        key: String,
        spec: IntentSpec,
        locks: Vec<Lock>,
        description: &str,
    ) -> Result<bool, RoundError> {
        Ok(self
            .submit_after(incident, key, spec, locks, description, Vec::new())
            .await?
            .is_some())
    }

    /// [`Self::submit`] for a job that runs only after the jobs in `depends` succeeded;
    /// returns the submitted job's id.
    async fn submit_after(
        &self,
        incident: &mut Incident,
        key: String,
        spec: IntentSpec,
        locks: Vec<Lock>,
        description: &str,
        depends: Vec<JobId>,
    ) -> Result<Option<JobId>, RoundError> {
        let mut intent = Intent {
            incident: incident.uuid,
            key: key.clone(),
            spec: spec.clone(),
            locks,
            state: IntentState::Planned,
            job_id: None,
            created_ms: now_ms(),
            submitted_ms: None,
            finished_ms: None,
            error: None,
        };
        // Canceled meanwhile (the API records a cancel at once): nothing more is submitted.
        if let Some(stored) = self.store.incident(incident.uuid)?
            && stored.repair_status == RepairStatus::Canceled
        {
            *incident = stored;
            return Ok(None);
        }
        // Durable before the job exists: a crash from here on is resolved by the reason.
        self.store.plan_intent(incident, &intent)?;
        let noted = self
            .override_note
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        let reason_text = match noted {
            Some(note) => format!("{description} ({note})"),
            None => description.to_owned(),
        };
        let reason = Reason::new(incident.uuid, key.clone(), reason_text).after(depends);
        let Some(op) = spec.op() else {
            return Ok(None);
        };
        #[expect(
            clippy::disallowed_methods,
            reason = "node repair records its intents in the ledger but still submits them itself"
        )]
        let result = self.ganeti.submit(&op, &reason).await;
        match result {
            Ok(job) => {
                intent.state = IntentState::Submitted;
                intent.job_id = Some(job);
                intent.submitted_ms = Some(now_ms());
                note(incident, Event::JobSubmitted(job));
                note(
                    incident,
                    Event::Progress(format!("job {job}: {description}")),
                );
                tracing::info!(incident = %incident.uuid, node = %incident.node, intent = %key, job, "{description}");
                self.board.metrics.job_submitted(&spec);
                self.store.update_intent(incident, &intent)?;
                if let Some(stored) = self.store.incident(incident.uuid)?
                    && stored.repair_status == RepairStatus::Canceled
                {
                    // Canceled while this job was being submitted: it is canceled at once.
                    stop_incident_jobs(&*self.ganeti, &self.store, &self.board, incident.uuid)
                        .await?;
                    *incident = self.store.incident(incident.uuid)?.unwrap_or(stored);
                    return Ok(None);
                }
                Ok(Some(job))
            }
            Err(error) if error.is_transient() => {
                // The job may exist: the next round looks it up by reason before resubmitting.
                tracing::warn!(incident = %incident.uuid, intent = %key, %error, "submission uncertain");
                note(
                    incident,
                    Event::Progress(format!("submission of {key} uncertain: {error}")),
                );
                self.store.save_incident(incident)?;
                Ok(None)
            }
            Err(error) => {
                let why = format!("Ganeti refused {description}: {error}");
                intent.state = IntentState::Failed;
                intent.error = Some(why.clone());
                intent.finished_ms = Some(now_ms());
                if matches!(spec, IntentSpec::Tag { .. }) {
                    note(
                        incident,
                        Event::Progress(format!("tag job refused, will retry: {error}")),
                    );
                } else {
                    note(incident, Event::ActionFailed(why));
                }
                tracing::warn!(incident = %incident.uuid, intent = %key, %error, "submission refused");
                self.board.metrics.job_failed(&spec);
                self.store.update_intent(incident, &intent)?;
                Ok(None)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ganeti::{Job, JobStatus, ReasonEntry};

    fn intent(key: &str, spec: IntentSpec, state: IntentState) -> Intent {
        Intent {
            incident: Uuid::from_u128(1),
            key: key.into(),
            spec,
            locks: vec![],
            state,
            job_id: Some(1),
            created_ms: 1,
            submitted_ms: Some(1),
            finished_ms: None,
            error: None,
        }
    }

    #[test]
    fn a_job_is_ours_only_when_its_reason_trail_says_so() {
        let ours = intent(
            "migrate-a-1",
            IntentSpec::Drain { node: "n2".into() },
            IntentState::Submitted,
        );
        let job = |trail: Vec<ReasonEntry>| Job {
            id: 1,
            status: JobStatus::Error,
            opstatus: vec![],
            opresult: vec![],
            errors: vec![],
            reasons: trail,
        };
        let same = Reason::new(ours.incident, "migrate-a-1", "x").entry(1);
        let other_intent = Reason::new(ours.incident, "migrate-b-1", "x").entry(1);
        let other_incident = Reason::new(Uuid::from_u128(2), "migrate-a-1", "x").entry(1);
        let foreign = ReasonEntry {
            source: "gnt:user".into(),
            text: "gnt-instance migrate".into(),
            timestamp_ns: 1,
        };
        assert_eq!(foreign_job(&job(vec![same]), &ours), None);
        assert_eq!(foreign_job(&job(vec![foreign]), &ours), None);
        assert!(foreign_job(&job(vec![other_intent]), &ours).is_some());
        assert!(foreign_job(&job(vec![other_incident]), &ours).is_some());
    }
}
