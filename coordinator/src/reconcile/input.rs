//! The round's input: the cluster, storage health, every online node's agent, the grace of
//! planned disruptions, degraded instances, and the storm breaker's step.

use std::collections::{BTreeMap, BTreeSet};

use nodecare_protocol::DiagnoseStatus;

use super::{
    BREAKER_DOCUMENT, DEGRADED_GRACE_MS, Reconciler, RoundError, RoundSummary,
    STORAGE_SEQUENCES_DOCUMENT,
};
use crate::round::RoundInput;
use crate::scrape::{AgentOutcome, AgentTarget};
use nodecare_core::breaker::{self, BreakerState};
use nodecare_core::gate;
use nodecare_core::incident::Incident;
use nodecare_ganeti::{GanetiError, Instance, Node};

/// A read of Ganeti on a task of its own, aborted when dropped before it is awaited (a round
/// that ends early leaves no read behind).
struct Spawned<T>(tokio::task::JoinHandle<Result<T, GanetiError>>);

impl<T> Spawned<T> {
    /// The read's answer; a task that panicked or was aborted is an error of the read.
    async fn join(mut self) -> Result<T, GanetiError> {
        match (&mut self.0).await {
            Ok(answer) => answer,
            Err(error) => Err(GanetiError::Transport(format!(
                "the read's task ended: {error}"
            ))),
        }
    }
}

impl<T> Drop for Spawned<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl Reconciler {
    /// The round's input: the cluster, storage health, every online node's agent, the grace of
    /// planned disruptions, degraded instances.
    pub(super) async fn read_input(
        &mut self,
        now: u64,
        summary: &mut RoundSummary,
    ) -> Result<RoundInput, RoundError> {
        // The three lists are read side by side (each answer decoded on a worker of its own).
        let ganeti = std::sync::Arc::clone(&self.ganeti);
        let instances_read = Spawned(tokio::spawn(async move { ganeti.instances().await }));
        let ganeti = std::sync::Arc::clone(&self.ganeti);
        let groups_read = Spawned(tokio::spawn(async move { ganeti.groups().await }));
        let nodes = self.ganeti.nodes().await?;
        if let Some(replicator) = &self.replicator {
            replicator.set_candidates(&nodes).await;
        }
        // The agents' diagnose reports need only the nodes: read while the instances are still
        // being read and decoded (on their own worker).
        let (agents_read, instances) = tokio::join!(
            self.read_agents(&nodes, summary, now),
            instances_read.join()
        );
        let instances = instances?;
        let (agents, failed_with_history) = agents_read?;
        // Group names label domains and caps (without them, the groups' uuids serve); their
        // tags feed instance repair (which waits for a round that can read them).
        let groups = match groups_read.join().await {
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
        // The view without storage problems first: the grace and the agents' reports need only
        // its nodes.
        let mut view = gate::View::from_cluster(
            &nodes,
            &instances,
            &group_names,
            &self.settings.gate.domains,
            Vec::new(),
            now,
        );
        for grant in self.store.expire_grants(now)? {
            tracing::info!(grant = %grant.id, node = %grant.node, requester = %grant.requester,
                "admission expired");
        }
        let grace_ms = u64::try_from(self.settings.gate.grace.as_millis()).unwrap_or(u64::MAX);
        let graced = gate::grace(
            &view,
            &self.planned_disruptions(now)?,
            &gate::drbd_peers(&instances),
            grace_ms,
        );
        if let Ok(mut board) = self.board.graces.write() {
            board.clone_from(&graced);
        }
        // The storm breaker counts agents that stopped answering outside a grace.
        let failed_outside_grace = failed_with_history
            .iter()
            .filter(|node| !graced.contains_key(*node))
            .count();
        // Storage health from the agents' signed DRBD reports (and RAPI): the gate's input. Read
        // after the diagnose reports, so that a node back from a reboot whose report this round
        // took has its storage report read once it is back too (read before, a node that came
        // back in between was seen back with its storage unreachable, and waited a round).
        let storage_sequences: BTreeMap<String, u64> = self
            .store
            .document(STORAGE_SEQUENCES_DOCUMENT)?
            .unwrap_or_default();
        let storage = self
            .agents
            .storage(
                &nodes,
                &instances,
                &self.settings.agent_urls,
                &storage_sequences,
                now,
            )
            .await;
        if storage.sequences != storage_sequences {
            self.store
                .save_document(STORAGE_SEQUENCES_DOCUMENT, &storage.sequences)?;
        }
        let degraded = self.degraded_instances(&nodes, &instances, &storage.readings, now);
        view.storage = storage.problems;
        let view = std::sync::Arc::new(view);
        let agents_seen = agents
            .iter()
            .filter_map(|result| match &result.outcome {
                AgentOutcome::Verified(o) => Some((
                    result.node.clone(),
                    nodecare_core::campaign::AgentNow {
                        boot_id: o.boot_id.clone(),
                        reboot_required: o.reboot_required,
                        ok: o.verdict.status == DiagnoseStatus::Ok,
                        asks: o.verdict.status.is_actionable().then_some(o.verdict.status),
                        collected_at_ms: o.collected_at_ms,
                    },
                )),
                _ => None,
            })
            .collect();
        Ok(RoundInput {
            now_ms: now,
            nodes,
            instances,
            groups,
            group_names,
            view,
            agents,
            agents_seen,
            failed_outside_grace,
            graced,
            degraded,
            grants: Vec::new(),
            overrides: Vec::new(),
            node_repair: nodecare_core::duty::node_repair::Records::default(),
            freezes: Vec::new(),
            approvals: Vec::new(),
        })
    }

    /// Reads every online node's agent (the board shows each one's state; accepted sequences
    /// are kept); returns the results and the nodes whose agent, read verified by an earlier
    /// round, gave no verified report.
    async fn read_agents(
        &self,
        nodes: &[Node],
        summary: &mut RoundSummary,
        now: u64,
    ) -> Result<(Vec<crate::scrape::AgentResult>, Vec<String>), RoundError> {
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
        let results = self.agents.diagnose(targets, &sequences, now).await;
        if let Some(why) = crate::scrape::local_failure(&results) {
            return Err(RoundError::Local(why));
        }
        summary.agents = results.len();
        let mut accepted = Vec::new();
        let mut failed_with_history = Vec::new();
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
                        // The storm breaker counts agents that stopped answering: one never
                        // read verified (still starting, like the whole cluster at boot) has
                        // no verdict to act on and is no storm. One verified before this
                        // coordinator started (a restart, a master failover) has its sequence
                        // number in the state: it counts.
                        if previous_ok.is_some() || sequences.contains_key(&result.node) {
                            failed_with_history.push(result.node.clone());
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
        // Only the sequences that moved on are written: a round whose agents sent nothing new
        // costs no durable write.
        accepted.retain(|(node, sequence)| sequences.get(node).is_none_or(|kept| sequence > kept));
        self.store.save_agent_sequences(&accepted)?;
        Ok((results, failed_with_history))
    }

    /// DRBD instances whose minors a verified storage report shows degraded while both of their
    /// nodes are online, for longer than [`DEGRADED_GRACE_MS`]: instance → why.
    fn degraded_instances(
        &mut self,
        nodes: &[Node],
        instances: &[Instance],
        readings: &BTreeMap<String, nodecare_core::storage::StorageReading>,
        now: u64,
    ) -> BTreeMap<String, String> {
        let online: BTreeSet<&str> = nodes
            .iter()
            .filter(|n| !n.offline)
            .map(|n| n.name.as_str())
            .collect();
        let mut now_degraded: BTreeMap<String, String> = BTreeMap::new();
        for (node, reading) in readings {
            let nodecare_core::storage::StorageReading::Verified(observation) = reading else {
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
        let since = &mut self.degraded_since;
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

    /// Planned disruptions (node, Unix ms its grace runs from, holder): admission grants (from
    /// their last renewal) and maintenance reboots (throughout, then from their end), which
    /// get a grace ([`gate::grace`]).
    fn planned_disruptions(&self, now: u64) -> Result<Vec<gate::Planned>, RoundError> {
        Ok(self
            .store
            .planned_grants(now)?
            .into_iter()
            .chain(crate::campaign_exec::planned_disruptions(&self.store, now)?)
            .collect())
    }

    /// The storm breaker after this round's signals (persisted; transitions logged).
    pub(super) fn breaker_round(
        &self,
        nodes: &[Node],
        incidents: &[Incident],
        agents: usize,
        agents_failed: usize,
        now: u64,
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
        let (next, change) =
            breaker::step(&self.settings.gate.breaker, state.clone(), &signals, now);
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
}
