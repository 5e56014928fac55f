//! The round: an idempotent reconciler, thin around the duties and the gate.
//!
//! Every round re-reads everything (the store, Ganeti, the agents), so restarting after a crash
//! is the same code path as a normal round:
//!
//! 1. Check that this node is the master (else stop with [`RoundError::NotMaster`]); with
//!    replication, take the newest state over first.
//! 2. Under the incident lock, every duty follows its jobs ([`RoundDuty::follow`]) around the
//!    executor, which adopts after a crash the jobs Ganeti shows with an entry's reason trail,
//!    submits the ready entries and follows every job to its outcome. Only then is the cluster
//!    read, so the snapshot is never older than the job results it is combined with.
//! 3. The round's one input ([`RoundInput`]) is read: nodes, instances, groups, storage health,
//!    every online node's agent, the grace of planned disruptions, degraded instances, `now`.
//! 4. The duties react to it ([`RoundDuty::observe`]: node repair's verdicts and acknowledgements),
//!    then node repair's records as they left them join the input (`RoundInput::node_repair`).
//! 5. What is in force is built from every duty's holds and the executor's ledger
//!    (`ledger::Held::in_force_with`, pure), the storm breaker steps, every duty proposes, and
//!    the gate decides once for all of them.
//! 6. Every duty carries out what the gate admitted ([`RoundDuty::execute`]).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use nodecare_protocol::now_ms;

use crate::repair::RepairClient;
use crate::round::agents::AgentReader;
use crate::round::{Judged, RoundDuty, Services};
use crate::scrape::Scraper;
use crate::store::Store;
use nodecare_core::gate::Holds;
use nodecare_core::gate::{self, GateSnapshot, Holder, InForce};
use nodecare_core::incident::RepairStatus;
use nodecare_ganeti::{ClusterInfo, Ganeti};

mod input;

pub use crate::round::{GateSettings, ReconcileSettings, RoundError};

use crate::node_repair::is_incident;
pub use crate::node_repair::{
    CancelOutcome, MAX_UNTAG_ATTEMPTS, NodeRepair, cancel_incident, stop_incident_jobs,
};

/// The store document holding the last accepted storage report sequence per node.
pub const STORAGE_SEQUENCES_DOCUMENT: &str = "storage-sequences";

/// The store document holding the storm breaker's state.
pub use crate::store::BREAKER_DOCUMENT;

/// The master named by `<dir>/ssconf_master_node`, if that file is there and names one.
pub fn ssconf_master(dir: &std::path::Path) -> Option<String> {
    let text = std::fs::read_to_string(dir.join("ssconf_master_node")).ok()?;
    let name = text.trim();
    (!name.is_empty()).then(|| name.to_owned())
}

/// What the last round did, for the status API.
pub use nodecare_protocol::status::RoundSummary;

pub use crate::board::Board;

/// The round's clock (Unix ms): the wall clock in the daemon, a simulated one in a what-if.
#[derive(Clone)]
pub struct Clock(pub Arc<dyn Fn() -> u64 + Send + Sync>);

impl Clock {
    /// The time now, Unix ms.
    pub fn now_ms(&self) -> u64 {
        (self.0)()
    }
}

impl std::fmt::Debug for Clock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Clock")
    }
}

/// The reconciler.
#[derive(Debug)]
pub struct Reconciler {
    ganeti: Arc<dyn Ganeti>,
    store: Arc<Store>,
    /// Where the round reads the agents (the scraper in the daemon).
    agents: Arc<dyn AgentReader>,
    /// The round's clock.
    clock: Clock,
    repairs: RepairClient,
    settings: ReconcileSettings,
    board: Arc<Board>,
    /// Serialises incident changes between rounds and the cancel endpoint.
    incident_lock: Arc<tokio::sync::Mutex<()>>,
    rounds: u64,
    /// The duties, in the order their holds are laid over each other (a later holder wins a
    /// node).
    duties: Vec<Box<dyn RoundDuty>>,
    /// The executor over the store's ledger (shared with node repair).
    executor: Arc<nodecare_exec::Executor>,
    /// DRBD instances seen degraded with both nodes online, and since when (Unix ms).
    degraded_since: BTreeMap<String, u64>,
    /// The state's replication to the master candidates (none: off).
    replicator: Option<Arc<crate::replica::Replicator>>,
    /// The flight recorder.
    recorder: crate::recorder::FlightRecorder,
}

impl std::fmt::Debug for dyn RoundDuty {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// How long a DRBD instance must stay degraded with both nodes online before the
/// instance-repair duty replaces the broken side (a resync or a reconnect usually ends sooner).
pub const DEGRADED_GRACE_MS: u64 = 5 * 60 * 1000;

/// Marks a round as running on the board until dropped (also when the round fails).
#[derive(Debug)]
struct RoundRunning<'a>(&'a tokio::sync::watch::Sender<bool>);

impl<'a> RoundRunning<'a> {
    fn new(running: &'a tokio::sync::watch::Sender<bool>) -> Self {
        running.send_replace(true);
        Self(running)
    }
}

impl Drop for RoundRunning<'_> {
    fn drop(&mut self) {
        self.0.send_replace(false);
    }
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
        Self::with_agents(
            ganeti,
            store,
            Arc::new(scraper),
            repairs,
            settings,
            board,
            incident_lock,
        )
    }

    /// A reconciler reading the agents through `agents` (a what-if's simulated ones).
    pub fn with_agents(
        ganeti: Arc<dyn Ganeti>,
        store: Arc<Store>,
        agents: Arc<dyn AgentReader>,
        repairs: RepairClient,
        settings: ReconcileSettings,
        board: Arc<Board>,
        incident_lock: Arc<tokio::sync::Mutex<()>>,
    ) -> Self {
        let ledger: Arc<dyn nodecare_exec::ledger::Ledger> = store.clone();
        let executor = Arc::new(
            nodecare_exec::Executor::new(ledger)
                .with_cancels_asked(Arc::clone(&board.cancels_asked)),
        );
        // The registry: one line per duty, in the order their holds are laid over each other
        // (nodecare's incidents, grants and campaigns win a node over an instance repair).
        let duties: Vec<Box<dyn RoundDuty>> = vec![
            Box::new(crate::round::instance_repair::InstanceRepair::default()),
            Box::new(NodeRepair::new(
                Arc::clone(&ganeti),
                Arc::clone(&store),
                repairs.clone(),
                settings.clone(),
                Arc::clone(&board),
                Arc::clone(&executor),
            )),
            Box::new(crate::round::admission::Admission),
            Box::new(crate::round::campaigns::Campaigns::default()),
        ];
        Self {
            executor,
            ganeti,
            store,
            agents,
            clock: Clock(Arc::new(now_ms)),
            repairs,
            settings,
            board,
            incident_lock,
            rounds: 0,
            duties,
            degraded_since: BTreeMap::new(),
            replicator: None,
            recorder: crate::recorder::FlightRecorder::default(),
        }
    }

    /// The same reconciler running on `clock` (a what-if's simulated one).
    #[must_use]
    pub fn with_clock(mut self, clock: Clock) -> Self {
        self.clock = clock;
        self
    }

    /// Where the balancing duty reads the cluster (nothing when balancing is off).
    pub fn set_cluster_source(&mut self, source: Arc<dyn crate::balance::ClusterSource>) {
        for duty in &mut self.duties {
            duty.set_cluster_source(Arc::clone(&source));
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
        if let Some(scraper) = self.agents.scraper() {
            balancer.set_load_source(Arc::new(crate::balance::AgentLoad::new(
                scraper.clone(),
                self.settings.agent_urls.clone(),
            )));
        }
        self.duties
            .push(Box::new(crate::round::balancing::Balancing::new(balancer)));
        self
    }

    /// The board shared with the HTTP API.
    pub fn board(&self) -> &Arc<Board> {
        &self.board
    }

    /// Checks that this node is the master: ssconf's `ssconf_master_node` (when readable) must
    /// name this node, and so must RAPI's cluster information, which decides. Answers that
    /// information.
    pub async fn check_master(&self) -> Result<ClusterInfo, RoundError> {
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
        Ok(info)
    }

    /// Runs one round and records its summary.
    pub async fn round(&mut self) -> Result<RoundSummary, RoundError> {
        self.rounds += 1;
        let board = Arc::clone(&self.board);
        let _running = RoundRunning::new(&board.round_running);
        let started = std::time::Instant::now();
        let mut summary = RoundSummary {
            number: self.rounds,
            started_ms: self.clock.now_ms(),
            ..RoundSummary::default()
        };
        // The duties are taken out for the round, so that they may change while the round
        // lends them the reconciler's services.
        let mut duties = std::mem::take(&mut self.duties);
        let result = self.round_inner(&mut duties, &mut summary).await;
        self.duties = duties;
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
        self.board.round_done.notify_waiters();
        result.map(|()| summary)
    }

    /// What every duty may use.
    fn services(&self) -> Services<'_> {
        Services {
            ganeti: &*self.ganeti,
            store: &self.store,
            executor: &self.executor,
            board: &self.board,
            repairs: &self.repairs,
            settings: &self.settings,
        }
    }

    async fn round_inner(
        &mut self,
        duties: &mut [Box<dyn RoundDuty>],
        summary: &mut RoundSummary,
    ) -> Result<(), RoundError> {
        // The round's one clock.
        let now = self.clock.now_ms();
        match self.check_master().await {
            Ok(info) => summary.ganeti_version = info.software_version,
            Err(error) => {
                if let (RoundError::NotMaster { .. }, Some(replicator)) = (&error, &self.replicator)
                {
                    replicator.stand_down().await;
                }
                return Err(error);
            }
        }
        if let Some(replicator) = &self.replicator
            && !replicator.has_taken_over().await
        {
            // Nothing is read from the store or planned before the newest state is here.
            let nodes = self.ganeti.nodes().await?;
            replicator.take_over(&nodes).await?;
            // The store is the newest copy now: its recorder is not this one's memory, and
            // its recorded entries may have been submitted by the master before.
            self.recorder.forget();
            self.executor.ledger_replaced();
        }
        let services = self.services();
        let guard = Arc::clone(&self.incident_lock).lock_owned().await;
        for duty in duties.iter_mut() {
            duty.follow(services, now).await?;
        }
        // The executor's ledger: jobs adopted after a crash, entries ready submitted, every
        // job followed to its outcome (node repair follows its incidents' jobs itself).
        // When Ganeti's job list cannot be read, nothing is submitted this round (for any
        // holder: the executor holds every submission back until a list is read), since an
        // entry whose submission is uncertain may have its job in Ganeti.
        let adopted = self
            .executor
            .adopt(
                &*self.ganeti,
                |holder| match holder {
                    Holder::Balancing { .. } => crate::balance::UNADOPTED,
                    Holder::InstanceRepair { .. } => crate::instance_repair_exec::UNADOPTED,
                    _ => nodecare_exec::Unadopted::Retry,
                },
                now,
            )
            .await?;
        let listed = adopted.is_some();
        let mut changed: Vec<nodecare_exec::Changed> = adopted
            .unwrap_or_default()
            .into_iter()
            .map(|entry| nodecare_exec::Changed { entry, job: None })
            .collect();
        if listed {
            self.executor
                .submit_of(&*self.ganeti, |h| !is_incident(h), now)
                .await?;
        } else {
            tracing::warn!("Ganeti's job list could not be read: nothing is submitted this round");
        }
        changed.extend(
            self.executor
                .poll_of(&*self.ganeti, |h| !is_incident(h), now)
                .await?,
        );
        for duty in duties.iter_mut() {
            duty.settle(services, &changed, now).await?;
        }
        drop(guard);
        // Read the cluster only after the jobs: a snapshot older than a job's "success" would
        // still show the instance where it was, and the move would be planned again.
        let mut input = self.read_input(now, summary).await?;
        let services = self.services();
        let _guard = Arc::clone(&self.incident_lock).lock_owned().await;
        // Grants and overrides change through the API under this lock: read under it.
        input.grants = self.store.grants_in_force(now)?;
        input.overrides = self.store.overrides_in_force(now)?;
        input.freezes = self.store.freezes()?;
        input.approvals = self.store.approvals()?;
        for duty in duties.iter_mut() {
            summary.jobs_submitted += duty.observe(services, &input).await?;
        }
        // Node repair's records as its observation left them, read once for the round.
        input.node_repair = nodecare_core::duty::node_repair::Records {
            incidents: self.store.incidents()?,
            intents: self.store.intents()?,
        };
        // What is in force: every duty's holds, then the executor's ledger for the holders
        // that do not report their own (balancing).
        let mut holds = Holds::default();
        for duty in duties.iter_mut() {
            let more = duty.holds(services, &input).await?;
            holds.disrupted.extend(more.disrupted);
            holds.touched.extend(more.touched);
            holds.left.extend(more.left);
        }
        // The executor's ledger: what the entries of balancing (and every holder without
        // holds of its own) hold, and, as a safety net under the duties' own account, what the
        // entries of open incidents and campaigns hold (a hold no duty reported still counts;
        // where both name a node, the duty's holder is the one shown).
        let incidents = &input.node_repair.incidents;
        let open: BTreeSet<Holder> = incidents
            .iter()
            .filter(|i| i.repair_status == RepairStatus::Pending)
            .map(|i| Holder::Incident { id: i.uuid })
            .chain(
                self.store
                    .campaigns()?
                    .iter()
                    .filter(|r| !r.state().is_final())
                    .map(|r| Holder::Campaign { id: r.id() }),
            )
            .collect();
        let own_account = |h: &Holder| is_incident(h) || matches!(h, Holder::Campaign { .. });
        let view = &input.view;
        let in_force = self
            .executor
            .in_force(|h| open.contains(h) || !own_account(h))?
            .in_force_with(view, holds, own_account, self.store.left_flags(view)?);
        let breaker = self.breaker_round(
            &input.nodes,
            incidents,
            summary.agents,
            input.failed_outside_grace,
            now,
        )?;
        let settings = &self.settings.gate;
        let policy = settings.policy(&input, breaker.open.as_ref().map(|(_, why)| why.clone()));
        self.board.metrics.set_calendar(&policy.calendar);
        // Every job of an approved holder carries its change ticket in its reason trail.
        self.executor.set_tickets(
            policy
                .approvals
                .records
                .iter()
                .filter_map(|r| r.ticket.clone().map(|t| (r.id, t)))
                .collect(),
        );
        let mut proposals = Vec::new();
        for duty in duties.iter_mut() {
            proposals.extend(duty.propose(services, &input, &in_force).await?);
        }
        let decision = gate::decide(view, &policy, &in_force, proposals);
        self.board.metrics.set_approvals_waiting(
            decision
                .refused()
                .filter(|(_, blocked)| matches!(blocked, gate::BlockedBy::Approval { .. }))
                .count(),
        );
        self.board.metrics.set_disruptions(
            decision.in_force.nodes.keys().map(|name| {
                view.nodes
                    .get(name)
                    .map_or("unknown", |f| f.domain.as_str())
            }),
            settings.cluster.max_disrupted_nodes,
        );
        let snapshot = GateSnapshot {
            view: std::sync::Arc::clone(&input.view),
            policy: policy.clone(),
            in_force,
            decision: decision.clone(),
            recorded_after: InForce::default(),
        };
        let decided = !decision.judgements.is_empty();
        if let Ok(mut board) = self.board.gate.write() {
            *board = Some(snapshot);
        }
        let judged = Judged {
            policy: &policy,
            decision: &decision,
        };
        let mut executed = 0;
        for duty in duties.iter_mut() {
            executed += duty.execute(services, &input, judged).await?;
        }
        summary.jobs_submitted += executed;
        // What the holders recorded after the decision (an evacuation's drain and the nodes its
        // moves go to, a campaign's drains) holds from now on: a request judged before the next
        // round sees it (the decision came before it was planned).
        if executed > 0 || self.store.ledger_recorded_at(now)? {
            let admitted: BTreeSet<&Holder> = decision
                .admitted()
                .map(|judgement| &judgement.proposal.holder)
                .collect();
            let held = self
                .executor
                .in_force(|h| open.contains(h) || admitted.contains(h) || !own_account(h))?;
            let touched = held
                .touching()
                .filter(|(node, _)| view.nodes.contains_key(node))
                .collect();
            let nodes = held
                .nodes
                .into_iter()
                .filter(|(node, _)| view.nodes.contains_key(node))
                .collect();
            if let Ok(mut board) = self.board.gate.write()
                && let Some(gate) = board.as_mut()
            {
                gate.recorded_after = InForce { nodes, touched };
            }
        }
        // The recorder explains; it never stops a round. It records the rounds that judged
        // anything and those that planned an operation (so that every job leads to a round).
        if self.settings.record_rounds {
            let planned = || match self.store.ledger_recorded_at(now) {
                Ok(planned) => planned,
                Err(error) => {
                    tracing::warn!(%error, "the flight recorder cannot read the ledger");
                    true
                }
            };
            if decided || planned() {
                // The board's snapshot is this round's (only the round writes it).
                let recorded = self.board.gate.read().ok().and_then(|board| {
                    board.as_ref().map(|gate| {
                        self.recorder.observe(
                            &self.store,
                            now,
                            &self.settings.node_name,
                            gate,
                            crate::recorder::verdicts(&input),
                        )
                    })
                });
                if let Some(Err(error)) = recorded {
                    tracing::warn!(%error, "the flight recorder could not record this round");
                }
            }
        }
        Ok(())
    }
}
