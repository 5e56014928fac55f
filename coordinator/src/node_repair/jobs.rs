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

    /// Planned intents whose submission is uncertain (a crash or a lost answer came between
    /// recording and marking): the executor adopts the jobs Ganeti shows with their reason
    /// trail; the others were never submitted and are dropped, to be planned again against
    /// the cluster as it is now.
    pub(super) async fn adopt_or_drop_planned(&self) -> Result<(), RoundError> {
        if self.ganeti_intents(IntentState::Planned)?.is_empty() {
            return Ok(());
        }
        let Some(adopted) = self
            .executor
            .adopt_of(
                &*self.ganeti,
                is_incident,
                |_| nodecare_exec::Unadopted::Retry,
                self.now,
            )
            .await?
        else {
            // Nothing may be planned again before it is known whether it was submitted.
            return Err(RoundError::Ganeti(GanetiError::Transport(
                "cannot list Ganeti's jobs to adopt those of intents whose submission is uncertain"
                    .into(),
            )));
        };
        for entry in &adopted {
            let (Some(mut intent), Some(job)) = (intent_of(entry)?, entry.job) else {
                continue;
            };
            let Some(mut incident) = self.store.incident(intent.incident)? else {
                continue;
            };
            intent.submitted_ms = Some(self.now);
            self.note(&mut incident, Event::JobSubmitted(job));
            tracing::info!(incident = %incident.uuid, intent = %intent.key, job,
                "adopted the job of a submission that was uncertain (a lost answer or a restart)");
            self.store.update_intent(&incident, &intent)?;
        }
        for intent in self.ganeti_intents(IntentState::Planned)? {
            if self.store.incident(intent.incident)?.is_none() {
                continue;
            }
            tracing::info!(incident = %intent.incident, intent = %intent.key,
                "intent was never submitted; planning it again");
            self.store.drop_intent(intent.incident, &intent.key)?;
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
        // The executor reads every job's outcome, in job order: in a chain, the first job that
        // failed is seen (and names the failure) before the jobs that failed because they
        // depended on it.
        let changed = self
            .executor
            .poll_of(&*self.ganeti, is_incident, self.now)
            .await?;
        self.time_out_jobs(&changed).await?;
        // The cluster as it is, read once when a failed job needs judging.
        let mut instances: Option<Option<Vec<Instance>>> = None;
        for nodecare_exec::Changed { entry, job } in changed {
            let Some(mut intent) = intent_of(&entry)? else {
                continue;
            };
            let Some(job_id) = intent.job_id else {
                continue;
            };
            let Some(mut incident) = self.store.incident(intent.incident)? else {
                continue;
            };
            let outcome = match (&entry.state, &job) {
                (State::Succeeded, _) => Ok(()),
                (State::Failed { why } | State::Canceled { why }, Some(job))
                    if foreign_job(job, &intent).is_some() =>
                {
                    // Not the job submitted for this intent (the id was reused after the queue
                    // was lost, e.g. in a master failover): it says nothing about the step.
                    Err((
                        why.clone(),
                        Some(plan::JobFailure::NotRun(format!(
                            "job {job_id} is not the job submitted for {}",
                            intent.key
                        ))),
                    ))
                }
                (State::Failed { why } | State::Canceled { why }, Some(job)) => {
                    Err((why.clone(), Some(plan::JobFailure::of_job(job))))
                }
                // Vanished from Ganeti's queue.
                (State::Failed { why } | State::Canceled { why }, None) => Err((why.clone(), None)),
                (State::Recorded | State::Submitted | State::TimedOut, _) => continue,
            };
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
                // A job of a canceled incident that Ganeti canceled never ran: canceled, not
                // failed.
                (Err((why, _)), None)
                    if incident.repair_status == RepairStatus::Canceled
                        && matches!(entry.state, State::Canceled { .. }) =>
                {
                    intent.state = IntentState::Canceled;
                    intent.error = Some(why.clone());
                    tracing::info!(incident = %incident.uuid, intent = %intent.key, job = job_id, %why, "job canceled");
                    self.note(
                        &mut incident,
                        Event::Progress(format!("job {job_id} ({}) canceled: {why}", intent.key)),
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

    /// Jobs still running past `job_timeout` fail their (active) incident; they are still
    /// followed, and their end is recorded when it comes.
    async fn time_out_jobs(&self, changed: &[nodecare_exec::Changed]) -> Result<(), RoundError> {
        let limit = u64::try_from(self.settings.job_timeout.as_millis()).unwrap_or(u64::MAX);
        for intent in self.ganeti_intents(IntentState::Submitted)? {
            let Some(job_id) = intent.job_id else {
                continue;
            };
            let age = self
                .now
                .saturating_sub(intent.submitted_ms.unwrap_or(intent.created_ms));
            if age <= limit || changed.iter().any(|c| c.entry.job == Some(job_id)) {
                continue;
            }
            let Some(mut incident) = self.store.incident(intent.incident)? else {
                continue;
            };
            if !incident.is_active() {
                continue;
            }
            let status = match self.ganeti.job(job_id).await {
                Ok(job) if !job.status.is_final() => job.status.as_str().to_owned(),
                // Ended meanwhile: the next round reads its outcome.
                Ok(_) => continue,
                Err(error) => {
                    tracing::warn!(job = job_id, %error, "cannot read job status");
                    continue;
                }
            };
            let why = format!(
                "job {job_id} still {status} after {}s",
                self.settings.job_timeout.as_secs()
            );
            tracing::warn!(incident = %incident.uuid, %why, "job timed out");
            self.board.metrics.job_failed(&intent.spec);
            self.note(&mut incident, Event::ActionFailed(why));
            self.store.save_incident(&incident)?;
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
        if spec.op().is_none() {
            return Ok(None);
        }
        let holder = Holder::Incident { id: incident.uuid };
        let Some(entry) = self.store.entry(&holder, &key)? else {
            return Err(RoundError::Store(StoreError::Corrupt(format!(
                "the intent {key} of incident {} was recorded but is not in the ledger",
                incident.uuid
            ))));
        };
        let result = self
            .executor
            .submit_entry(&*self.ganeti, &entry, &reason_text, depends, self.now)
            .await?;
        match result {
            EntrySubmission::Submitted(job) => {
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
            EntrySubmission::Uncertain(error) => {
                // The job may exist: the next round looks it up by reason before resubmitting.
                self.note(
                    incident,
                    Event::Progress(format!("submission of {key} uncertain: {error}")),
                );
                self.store.save_incident(incident)?;
                Ok(None)
            }
            EntrySubmission::NotSent(why) => {
                // No job: the next round finds none and plans it again.
                self.note(
                    incident,
                    Event::Progress(format!("{key} not submitted: {why}")),
                );
                self.store.save_incident(incident)?;
                Ok(None)
            }
            EntrySubmission::Refused(error) => {
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
                self.board.metrics.job_failed(&spec);
                self.store.update_intent(incident, &intent)?;
                Ok(None)
            }
        }
    }
}

/// The intent an incident's ledger entry records (`None`: another holder's entry).
fn intent_of(entry: &nodecare_exec::ledger::Entry) -> Result<Option<Intent>, RoundError> {
    nodecare_core::duty::node_repair::intent::from_entry(entry)
        .map_err(|e| RoundError::Store(StoreError::Corrupt(e.to_string())))
}

/// Whether `holder` is an incident (node repair, which follows its own entries).
pub(crate) const fn is_incident(holder: &Holder) -> bool {
    matches!(holder, Holder::Incident { .. })
}
