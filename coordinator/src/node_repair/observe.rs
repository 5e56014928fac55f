//! Node repair's observation: verdicts open, escalate and close incidents; tag removal
//! acknowledges them.

use super::*;
use nodecare_core::duty::node_repair::ladder::{Repaired, record};
use nodecare_core::duty::node_repair::observe::{Facts, Observed, Seen, observe};

/// The store document of the nodes' repair history ([`Repaired`], the ladder's input).
pub(crate) const REPAIR_HISTORY_DOCUMENT: &str = "repair_history";

impl NodeRepair {
    /// Verified verdicts open, escalate, observe or close incidents (the caller holds the
    /// incident lock), as [`observe`] (pure) decides. An unknown verdict, an unreachable or
    /// unverifiable agent change nothing.
    pub(super) fn observe_verdicts(&self, input: &RoundInput) -> Result<(), RoundError> {
        let nodes = &input.nodes[..];
        let graced: BTreeMap<String, u64> = input
            .graced
            .iter()
            .map(|(node, grace)| (node.clone(), grace.until_ms))
            .collect();
        let graced = &graced;
        let mut held_in_grace = BTreeMap::new();
        let results = &input.agents[..];
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
            .filter(|i| i.state.is_in_flight())
            .map(|i| i.incident)
            .collect();
        let seen: Vec<Seen<'_>> = results
            .iter()
            .filter_map(|result| match &result.outcome {
                AgentOutcome::Verified(o) => Some(Seen {
                    node: &result.node,
                    node_uuid: &result.node_uuid,
                    verdict: &o.verdict,
                    original: &o.original,
                }),
                _ => None,
            })
            .collect();
        let mut history: Vec<Repaired> = self
            .store
            .document(REPAIR_HISTORY_DOCUMENT)?
            .unwrap_or_default();
        let facts = Facts {
            graced,
            tagging: &tagging,
            in_flight: &in_flight,
            time: self.now_s(),
            history: &history,
            ladder: &self.settings.ladder,
        };
        // The incidents as this round leaves them, for the repair history (no second read).
        let mut kept: BTreeMap<Uuid, Incident> =
            incidents.iter().map(|i| (i.uuid, i.clone())).collect();
        for observed in observe(incidents, &seen, facts, &mut Uuid::new_v4) {
            match &observed {
                Observed::Save(incident) | Observed::Open(incident) => {
                    kept.insert(incident.uuid, incident.clone());
                }
                Observed::Forget(incident) => {
                    kept.remove(&incident.uuid);
                }
                _ => {}
            }
            match observed {
                Observed::Save(incident) => self.store.save_incident(&incident)?,
                Observed::Forget(incident) => {
                    tracing::info!(incident = %incident.uuid, node = %incident.node,
                        status = incident.repair_status.as_str(), "incident forgotten");
                    self.store.forget_incident(incident.uuid)?;
                }
                Observed::Open(incident) => {
                    tracing::info!(incident = %incident.uuid, node = %incident.node,
                        action = incident.action.as_str(), fingerprint = %incident.fingerprint,
                        "new incident noted");
                    self.store.save_incident(&incident)?;
                }
                Observed::Escalated {
                    incident,
                    node,
                    from,
                    to,
                } => {
                    tracing::info!(%incident, %node, from = from.as_str(), to = to.as_str(),
                        "incident escalated");
                }
                Observed::Laddered {
                    incident,
                    node,
                    escalation,
                } => {
                    tracing::warn!(%incident, %node, to = escalation.to.as_str(),
                        why = escalation.why.as_str(), "{}", escalation.said);
                    self.board.metrics.laddered(escalation.why);
                }
                Observed::WaitsForTag { incident, node } => {
                    tracing::info!(%incident, %node,
                        "more invasive verdict; waiting for the incident's tag job first");
                }
                Observed::InGrace {
                    node,
                    status,
                    until_ms,
                } => {
                    tracing::info!(%node, verdict = status.as_str(), grace_until_ms = until_ms,
                        "verdict not acted on: the node is in the grace of a planned disruption");
                    held_in_grace.insert(node, status.as_str().to_owned());
                }
            }
        }
        if let Ok(mut board) = self.board.held_in_grace.write() {
            *board = held_in_grace;
        }
        // Every incident's outcome, kept per node for the ladder (written when it changed).
        let kept: Vec<Incident> = kept.into_values().collect();
        if record(
            &mut history,
            &kept,
            self.now_s(),
            self.settings.ladder.keep_secs(),
        ) {
            self.store
                .save_document(REPAIR_HISTORY_DOCUMENT, &history)?;
        }
        // Failback: completed evacuations noted, their nodes watched.
        if self.settings.failback.enabled {
            crate::failback::observe(&self.store, &kept, &intents, nodes, results, self.now_s())?;
        }
        Ok(())
    }

    /// Step 5: acknowledgement by tag removal; with `undrain_on_ack`, an acknowledged
    /// incident's node returns to service. Returns the jobs submitted.
    pub(super) async fn check_tags(&self, nodes: &[Node]) -> Result<usize, RoundError> {
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
            // An incident is forgotten only once no job of it may still act in Ganeti (a
            // failed evacuation's move still running): until then it is kept, acknowledged,
            // and its nodes stay held.
            let in_flight = own.iter().any(|i| i.state.is_in_flight());
            let acknowledged_now = incident.awaits_acknowledgement(&node.tags);
            if acknowledged_now {
                match incident.apply(Event::TagRemoved, self.now_s()) {
                    Ok(Disposition::Forget) if !returning && !in_flight => {
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
            } else if incident.acknowledged
                && !returning
                && !in_flight
                && incident.disposition() == Disposition::Forget
            {
                // Acknowledged while a job of it still ran; that job has ended.
                tracing::info!(incident = %incident.uuid, node = %incident.node, "its last job ended; acknowledged incident forgotten");
                self.store.forget_incident(incident.uuid)?;
                continue;
            }
            if returning && incident.acknowledged {
                submitted += self.return_to_service(&mut incident, node, &own).await?;
            } else if node.offline && incident.acknowledged && !acknowledged_now && !in_flight {
                // An offline node reports nothing and nodecare will not bring it back: the
                // acknowledgement hands it to the operator (docs: "The end of an incident").
                // One round after the acknowledgement, so that every reader of the round's
                // changes (the webhook, the page) sees the acknowledgement first.
                if let Ok(Disposition::Forget) = incident.apply(Event::NodeOffline, self.now_s()) {
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
    pub(super) async fn untag(
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
    pub(super) async fn return_to_service(
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
                    self.note(incident, Event::Progress(what));
                    self.store.save_incident(incident)?;
                }
                return Ok(0);
            }
            ServiceStep::Done => {
                if incident.disposition() == Disposition::Forget
                    && !own.iter().any(|i| i.state.is_in_flight())
                {
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
}
