//! Node repair's jobs: recorded as intents before they are submitted, adopted after a crash,
//! followed to their outcome.

use super::*;

impl NodeRepair {
    /// The stored intents in `state` that are Ganeti jobs.
    pub(super) fn ganeti_intents(&self, state: IntentState) -> Result<Vec<Intent>, RoundError> {
        Ok(self
            .store
            .intents()?
            .into_iter()
            .filter(|i| i.state == state && i.spec.is_ganeti_job())
            .collect())
    }

    /// Step 2: planned intents whose submission is uncertain.
    pub(super) async fn adopt_or_drop_planned(&self) -> Result<(), RoundError> {
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
                    intent.submitted_ms = Some(self.now);
                    self.note(&mut incident, Event::JobSubmitted(job));
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
    pub(super) async fn stop_canceled(&self) -> Result<(), RoundError> {
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
    pub(super) fn settle_canceled(&self) -> Result<(), RoundError> {
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
            self.note(&mut incident, Event::Warning(left));
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
    pub(super) async fn poll_jobs(&self) -> Result<(), RoundError> {
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
                    let age = self
                        .now
                        .saturating_sub(intent.submitted_ms.unwrap_or(intent.created_ms));
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
                        self.note(&mut incident, Event::ActionFailed(why));
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
            intent.finished_ms = Some(self.now);
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
                    self.note(&mut incident, event);
                }
                (Err((why, _)), Some(plan::FailedStep::Done(done))) => {
                    intent.state = IntentState::Succeeded;
                    intent.error = Some(format!("{why}; {done}"));
                    tracing::info!(incident = %incident.uuid, intent = %intent.key, job = job_id, %why, "step done already");
                    self.note(
                        &mut incident,
                        Event::Progress(format!("job {job_id} ({}): {done}", intent.key)),
                    );
                }
                (Err((why, _)), Some(plan::FailedStep::Replan { why: again, .. })) => {
                    intent.state = IntentState::Replanned;
                    intent.error = Some(format!("{why}; {again}"));
                    tracing::info!(incident = %incident.uuid, intent = %intent.key, job = job_id, %why, "step planned again");
                    self.note(
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
                    self.note(&mut incident, event);
                }
            }
            self.store.update_intent(&incident, &intent)?;
        }
        Ok(())
    }

    /// How often the move of `intent`'s instance was planned again because Ganeti refused
    /// its precondition.
    pub(super) fn replans(&self, intent: &Intent) -> Result<usize, RoundError> {
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

    pub(super) fn fail(&self, incident: &mut Incident, why: String) -> Result<(), RoundError> {
        tracing::warn!(incident = %incident.uuid, node = %incident.node, %why, "incident failed");
        if incident
            .apply(Event::ActionFailed(why), self.now_s())
            .is_ok()
        {
            self.store.save_incident(incident)?;
        }
        Ok(())
    }

    /// Records the intent, submits the job and records the outcome. Returns whether a job
    /// was submitted.
    pub(super) async fn submit(
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
    pub(super) async fn submit_after(
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
            created_ms: self.now,
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
        let noted = self.override_note.clone();
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
                intent.submitted_ms = Some(self.now);
                self.note(incident, Event::JobSubmitted(job));
                self.note(
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
                self.note(
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
                intent.finished_ms = Some(self.now);
                if matches!(spec, IntentSpec::Tag { .. }) {
                    self.note(
                        incident,
                        Event::Progress(format!("tag job refused, will retry: {error}")),
                    );
                } else {
                    self.note(incident, Event::ActionFailed(why));
                }
                tracing::warn!(incident = %incident.uuid, intent = %key, %error, "submission refused");
                self.board.metrics.job_failed(&spec);
                self.store.update_intent(incident, &intent)?;
                Ok(None)
            }
        }
    }
}
