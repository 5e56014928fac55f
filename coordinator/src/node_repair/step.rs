//! Node repair's steps: an admitted incident takes its next step (an evacuation's moves and
//! end, a live repair on the agent).

use super::*;

impl NodeRepair {
    pub(super) async fn step_evacuation(
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
        let now = self.now_s();
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
                self.note(
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
                self.note(incident, Event::Unblocked);
                if incident.repair_status == RepairStatus::Noted {
                    // The node was drained before the incident: the moves are the first action.
                    self.note(
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
                    self.note(
                        incident,
                        Event::ActionStarted(format!(
                            "{} holds no instance that can move",
                            node.name
                        )),
                    );
                }
                self.note(incident, Event::Unblocked);
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
    pub(super) async fn settle_superseded_repair(
        &self,
        incident: &mut Incident,
        node: &Node,
        intent: Intent,
    ) -> Result<bool, RoundError> {
        if self
            .follow_superseded_repair(incident, node, intent)
            .await?
        {
            return Ok(true);
        }
        let why = format!(
            "the live repair on {} is still running; the evacuation follows when it ends",
            node.name
        );
        if incident.apply(Event::Blocked(why), self.now_s()).is_ok() {
            self.store.save_incident(incident)?;
        }
        Ok(false)
    }

    /// Polls the repair (`intent`, in flight) of an incident escalated from live-repair to an
    /// evacuation, whether or not the gate admits the evacuation this round (one the caps hold
    /// back sees its repair end when it ends, not once admitted): records its end when it has
    /// ended, or when it is unaccounted for past the repair timeout. Returns whether it ended.
    pub(super) async fn follow_superseded_repair(
        &self,
        incident: &mut Incident,
        node: &Node,
        mut intent: Intent,
    ) -> Result<bool, RoundError> {
        let base = self.settings.agent_urls.base(node);
        let answer = self.repairs.poll(&base, &incident.uuid.to_string()).await;
        let started = intent.submitted_ms.unwrap_or(intent.created_ms);
        let limit = u64::try_from(self.settings.repair_timeout.as_millis()).unwrap_or(u64::MAX);
        let timed_out = self.now.saturating_sub(started) > limit;
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
            return Ok(false);
        };
        intent.state = state;
        intent.finished_ms = Some(self.now);
        if state == IntentState::Failed {
            intent.error = Some(what.clone());
        }
        self.note(incident, Event::Progress(what));
        self.store.update_intent(incident, &intent)?;
        Ok(true)
    }

    /// Follows the repair command of a canceled incident that may still run on the agent
    /// (`intent`, in flight): the cancel stops no command, so the incident keeps its node held
    /// ([`node_repair::repairs_in_flight`]) and polls it as a live repair is polled, until it
    /// ends (or is unaccounted for after the repair timeout). Its outcome goes into the
    /// incident's history; once nothing of it is in flight the incident settles.
    pub(super) async fn follow_canceled_repair(
        &self,
        incident: &mut Incident,
        node: &Node,
        mut intent: Intent,
    ) -> Result<(), RoundError> {
        let IntentSpec::Repair { command, .. } = intent.spec.clone() else {
            return Ok(());
        };
        let base = self.settings.agent_urls.base(node);
        let answer = self.repairs.poll(&base, &incident.uuid.to_string()).await;
        let started = intent.submitted_ms.unwrap_or(intent.created_ms);
        let limit = u64::try_from(self.settings.repair_timeout.as_millis()).unwrap_or(u64::MAX);
        let timed_out = self.now.saturating_sub(started) > limit;
        let end = match answer {
            RepairAnswer::Record(record) if record.state == RepairState::Running => {
                if intent.state == IntentState::Planned {
                    // Its request reached the agent after all.
                    intent.state = IntentState::Submitted;
                    intent.submitted_ms = Some(self.now);
                    self.store.update_intent(incident, &intent)?;
                }
                timed_out.then(|| {
                    (
                        IntentState::Failed,
                        format!(
                            "repair command {command} still running after {}s; {} no longer held",
                            self.settings.repair_timeout.as_secs(),
                            node.name
                        ),
                    )
                })
            }
            RepairAnswer::Record(record) if record.state == RepairState::Succeeded => Some((
                IntentState::Succeeded,
                format!("repair command {command} exited 0 after the cancel"),
            )),
            RepairAnswer::Record(record) => {
                let detail = record
                    .error
                    .clone()
                    .or_else(|| record.exit_code.map(|c| format!("exit code {c}")))
                    .or_else(|| record.signal.map(|s| format!("signal {s}")))
                    .unwrap_or_default();
                Some((
                    IntentState::Failed,
                    format!(
                        "repair command {command} ended {:?} after the cancel: {detail}",
                        record.state
                    ),
                ))
            }
            // The agent never ran it (or lost it): nothing is running.
            RepairAnswer::Unknown
            | RepairAnswer::Refused {
                transient: false, ..
            } => Some((
                IntentState::Failed,
                format!("repair command {command} did not run (the agent has no run of it)"),
            )),
            // Whether it still runs cannot be known: wait, at most until it would time out.
            RepairAnswer::Refused { .. } | RepairAnswer::Unreachable(_) if timed_out => Some((
                IntentState::Failed,
                format!(
                    "repair command {command} unaccounted for after {}s; {} no longer held",
                    self.settings.repair_timeout.as_secs(),
                    node.name
                ),
            )),
            RepairAnswer::Refused { .. } | RepairAnswer::Unreachable(_) => None,
        };
        let Some((state, what)) = end else {
            return Ok(());
        };
        intent.state = state;
        intent.finished_ms = Some(self.now);
        if state == IntentState::Failed {
            intent.error = Some(what.clone());
        }
        self.note(incident, Event::Progress(what));
        self.store.update_intent(incident, &intent)?;
        Ok(())
    }

    /// The end of an evacuation: shut down what cannot move (policy `shutdown`), set the node
    /// offline (`offline_after_evacuation`), then tag it repairready; instances left on the
    /// node (policy `leave`) become the incident's warning. `chained`: each stage depends on
    /// the one before (the first on `previous`), all submitted now; otherwise only the first
    /// stage still to do is submitted, and later rounds do the rest.
    pub(super) async fn submit_finish(
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
            self.note(
                incident,
                Event::Warning(format!(
                    "left on {} (immovable_instances = leave; the node stays online): {}",
                    node.name,
                    finish.left.join(", ")
                )),
            );
        }
        if !finish.shutdown.is_empty() {
            self.note(
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
    pub(super) async fn submit_chain(
        &self,
        incident: &mut Incident,
        node: &Node,
        own: &[&Intent],
        chain: EvacuationChain,
    ) -> Result<usize, RoundError> {
        self.note(incident, Event::Unblocked);
        let mut count = 0;
        let mut previous: Vec<JobId> = Vec::new();
        if chain.drain {
            self.note(
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
            self.note(
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
            self.note(
                incident,
                Event::Progress(format!(
                    "left for a later round: {}",
                    chain.waiting.join(", ")
                )),
            );
        }
        Ok(count)
    }

    pub(super) async fn submit_ready_tag(
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
        self.note(incident, Event::Unblocked);
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

    pub(super) async fn step_live_repair(
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
                    created_ms: self.now,
                    submitted_ms: None,
                    finished_ms: None,
                    error: None,
                };
                self.note(
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
        let now = self.now_s();
        match answer {
            RepairAnswer::Record(record) => {
                if intent.state == IntentState::Planned {
                    intent.state = IntentState::Submitted;
                    intent.submitted_ms = Some(self.now);
                    self.note(
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
                        if self.now.saturating_sub(started) > limit {
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
                        intent.finished_ms = Some(self.now);
                        self.note(
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
                        intent.finished_ms = Some(self.now);
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
}
