//! Node repair (maintd's incidents), the duty: verified verdicts open incidents, the gate admits
//! them one failure domain at a time, and each admitted incident takes one step per round (an
//! evacuation's moves and end, or a live repair on the agent), recorded as intents in the
//! executor's ledger before anything is submitted.
//!
//! - [`observe`]: verdicts open, escalate and close incidents; tag removal acknowledges them;
//! - [`step`]: the steps of an admitted incident;
//! - [`jobs`]: submitting, adopting after a crash and following its jobs;
//! - this file: the duty's phases ([`RoundDuty`]) and canceling an incident (the API and the page).
//!
//! The decisions themselves are pure and tested in `nodecare-core`
//! (`duty::node_repair`, `incident`, `plan`).

mod jobs;

pub(crate) use jobs::is_incident;
mod observe;
mod step;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use uuid::Uuid;

use nodecare_protocol::repair::{RepairRequest, RepairState};
use nodecare_protocol::status::CanceledJob;
use nodecare_protocol::{now_ms, now_s};

use crate::board::Board;
use crate::repair::{RepairAnswer, RepairClient};
use crate::round::{Judged, Phase, RoundDuty, RoundInput, Services};
use crate::round::{ReconcileSettings, RoundError};
use crate::scrape::AgentOutcome;
use crate::store::{Intent, IntentSpec, IntentState, Store, StoreError};
use nodecare_core::duty::node_repair;
use nodecare_core::duty::node_repair::intent::{after_cancel, next_key, service_facts};
use nodecare_core::gate::Holds;
use nodecare_core::gate::{Admitted, Holder, InForce, Proposal};
use nodecare_core::incident::{Action, Disposition, Event, Incident, RepairStatus};
use nodecare_core::plan::{
    self, EvacuationChain, EvacuationFinish, EvacuationStep, Lock, Round, ServiceStep,
    return_to_service,
};
use nodecare_exec::ledger::{Ledger, State};
use nodecare_exec::{EntrySubmission, Executor};
use nodecare_ganeti::{Ganeti, GanetiError, Instance, JobId, Node, Reason};

/// How often the round tries to remove the tag of an incident whose acknowledgement was asked
/// for through nodecare before it leaves it to the operator (`gnt-node remove-tags`).
pub const MAX_UNTAG_ATTEMPTS: usize = 3;

/// The node-repair duty.
#[derive(Debug)]
pub struct NodeRepair {
    ganeti: Arc<dyn Ganeti>,
    store: Arc<Store>,
    repairs: RepairClient,
    settings: ReconcileSettings,
    board: Arc<Board>,
    /// The executor over the store's ledger: the one way to Ganeti's writes.
    executor: Arc<Executor>,
    /// The round's time (Unix ms).
    now: u64,
    /// While an incident admitted under an operator override takes its step: the override, who
    /// set it and why, added to its jobs' reason trail.
    override_note: Option<String>,
    /// Incidents this round's proposals left waiting, and why.
    waiting: Vec<(Uuid, String)>,
}

impl NodeRepair {
    /// The duty.
    pub fn new(
        ganeti: Arc<dyn Ganeti>,
        store: Arc<Store>,
        repairs: RepairClient,
        settings: ReconcileSettings,
        board: Arc<Board>,
        executor: Arc<Executor>,
    ) -> Self {
        Self {
            ganeti,
            store,
            repairs,
            settings,
            board,
            executor,
            now: 0,
            override_note: None,
            waiting: Vec::new(),
        }
    }

    /// The round's time in Unix seconds.
    #[expect(
        clippy::cast_precision_loss,
        reason = "Unix milliseconds stay far below 2^52"
    )]
    fn now_s(&self) -> f64 {
        self.now as f64 / 1000.0
    }

    /// Applies an event whose refusal is harmless, at the round's time.
    fn note(&self, incident: &mut Incident, event: Event) {
        if let Err(error) = incident.apply(event, self.now_s()) {
            tracing::debug!(%error, "event not applied");
        }
    }

    /// The incidents' own intents.
    fn own(intents: &[Intent], incident: Uuid) -> Vec<&Intent> {
        intents.iter().filter(|i| i.incident == incident).collect()
    }
}

impl RoundDuty for NodeRepair {
    fn name(&self) -> &'static str {
        "node-repair"
    }

    fn follow<'a>(&'a mut self, _services: Services<'a>, now_ms: u64) -> Phase<'a, ()> {
        Box::pin(async move {
            self.now = now_ms;
            self.adopt_or_drop_planned().await?;
            // First the jobs of canceled incidents (a cancel the API could not pass on to
            // Ganeti, or a job submitted while the cancel was recorded), then every job's
            // outcome.
            self.stop_canceled().await?;
            self.poll_jobs().await?;
            self.settle_canceled()?;
            Ok(())
        })
    }

    fn observe<'a>(
        &'a mut self,
        _services: Services<'a>,
        input: &'a RoundInput,
    ) -> Phase<'a, usize> {
        Box::pin(async move {
            self.now = input.now_ms;
            self.observe_verdicts(input)?;
            self.check_tags(&input.nodes).await
        })
    }

    /// What its incidents hold: [`node_repair::held`] of the round's records (pure).
    fn holds<'a>(&'a mut self, _services: Services<'a>, input: &'a RoundInput) -> Phase<'a, Holds> {
        Box::pin(async move {
            Ok(node_repair::held(
                &input.node_repair,
                &input.nodes,
                &input.instances,
            ))
        })
    }

    /// Its proposals from the round's records: [`node_repair::propose`] (pure).
    fn propose<'a>(
        &'a mut self,
        _services: Services<'a>,
        input: &'a RoundInput,
        _in_force: &'a InForce,
    ) -> Phase<'a, Vec<Proposal>> {
        Box::pin(async move {
            let records = &input.node_repair;
            let duty = node_repair::propose(
                &records.incidents,
                &input.nodes,
                &input.instances,
                &node_repair::evacuating(&records.intents),
                node_repair::Hold {
                    ladder: &self.settings.ladder,
                    now_s: input.now_s(),
                },
            );
            self.waiting = duty.waiting;
            Ok(duty.proposals)
        })
    }

    fn execute<'a>(
        &'a mut self,
        _services: Services<'a>,
        input: &'a RoundInput,
        judged: Judged<'a>,
    ) -> Phase<'a, usize> {
        Box::pin(async move {
            self.now = input.now_ms;
            self.step(input, judged).await
        })
    }
}

impl NodeRepair {
    /// Phase 5: failure tags owed, incidents left waiting, and one step of every admitted
    /// incident.
    async fn step(&mut self, input: &RoundInput, judged: Judged<'_>) -> Result<usize, RoundError> {
        let nodes = &input.nodes[..];
        let instances = &input.instances[..];
        let decision = judged.decision;
        let node_repair::Records { incidents, intents } = &input.node_repair;
        let by_uuid: BTreeMap<&str, &Node> = nodes.iter().map(|n| (n.uuid.as_str(), n)).collect();
        let mut submitted = 0;
        // Failed incidents still owe their failure tag.
        for incident in incidents
            .iter()
            .filter(|i| i.repair_status == RepairStatus::Failed && !i.tag_applied)
        {
            let own = Self::own(intents, incident.uuid);
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
                submitted += usize::from(
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

        // Canceled incidents whose repair command may still run keep following it.
        for incident in incidents
            .iter()
            .filter(|i| i.repair_status == RepairStatus::Canceled)
        {
            let Some(node) = by_uuid.get(incident.node_uuid.as_str()) else {
                continue;
            };
            if let Some(repair) = Self::own(intents, incident.uuid)
                .into_iter()
                .find(|i| matches!(i.spec, IntentSpec::Repair { .. }) && i.state.is_in_flight())
            {
                let mut incident = incident.clone();
                self.follow_canceled_repair(&mut incident, node, repair.clone())
                    .await?;
            }
        }
        let by_id: BTreeMap<Uuid, &Incident> = incidents.iter().map(|i| (i.uuid, i)).collect();
        for (uuid, why) in std::mem::take(&mut self.waiting) {
            if let Some(incident) = by_id.get(&uuid) {
                let mut incident = (*incident).clone();
                self.follow_held_back_repair(&mut incident, &by_uuid, intents)
                    .await?;
                if incident.apply(Event::Blocked(why), self.now_s()).is_ok() {
                    self.store.save_incident(&incident)?;
                }
            }
        }
        let in_flight: Vec<Lock> = intents
            .iter()
            .filter(|i| i.state.is_in_flight())
            .flat_map(|i| i.locks.iter().cloned())
            .collect();
        // Nodes held without disruption by anything but an active evacuation (a canceled
        // incident's repair command still running, a balancing move, a campaign's migrations
        // back, an instance repair) are never a move target either, as a node with an active
        // incident is not (the DRBD peers and move targets active evacuations hold are theirs
        // to share: the planner's locks keep their moves apart).
        let with_incidents: Vec<String> = incidents
            .iter()
            .filter(|i| i.is_active())
            .map(|i| i.node.clone())
            .chain(
                decision
                    .in_force
                    .touched
                    .iter()
                    .filter(|(_, holder)| match holder {
                        Holder::Incident { id } => !by_id
                            .get(id)
                            .is_some_and(|i| i.is_active() && i.action.is_evacuation()),
                        _ => true,
                    })
                    .map(|(node, _)| node.clone()),
            )
            .collect();
        let with_evacuations: Vec<String> = incidents
            .iter()
            .filter(|i| i.is_active() && i.action.is_evacuation())
            .map(|i| i.node.clone())
            .collect();
        let disrupted: Vec<String> = decision.in_force.nodes.keys().cloned().collect();
        // Nodes another tool or duty holds (a grant, a campaign, balancing, an instance
        // repair), or an incident that is no longer active while a job of it still runs there
        // (a canceled evacuation's drain): no move of an evacuation acts on them, not even a
        // secondary's replacement on its primary. Active incidents are left out: peer
        // evacuations replace each other's secondaries by design.
        let other_holders: Vec<(String, String)> = decision
            .in_force
            .nodes
            .iter()
            .chain(&decision.in_force.touched)
            .filter(|(_, holder)| match holder {
                Holder::Someone { .. } => false,
                Holder::Incident { id } => by_id.get(id).is_some_and(|i| !i.is_active()),
                _ => true,
            })
            .map(|(node, holder)| (node.clone(), holder.to_string()))
            .collect();
        let override_notes: BTreeMap<Uuid, String> = judged
            .policy
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
        let mut round = Round::new(nodes, instances, in_flight, disrupted)
            .with_active_incidents(with_incidents)
            .with_active_evacuations(with_evacuations)
            .with_other_holders(other_holders);
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
                    self.follow_held_back_repair(&mut incident, &by_uuid, intents)
                        .await?;
                    if incident
                        .apply(Event::Blocked(blocked.to_string()), self.now_s())
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
            let own = Self::own(intents, incident.uuid);
            // One step at a time: wait for this incident's jobs in flight.
            if own
                .iter()
                .any(|i| i.spec.is_ganeti_job() && i.state.is_in_flight())
            {
                continue;
            }
            self.override_note = match admitted {
                Admitted::Override { id } => {
                    let text = override_notes
                        .get(&id)
                        .cloned()
                        .unwrap_or_else(|| format!("under override {id}"));
                    self.note(
                        &mut incident,
                        Event::Progress(format!("admitted by the operator: {text}")),
                    );
                    Some(text)
                }
                _ => None,
            };
            let stepped = match incident.action {
                Action::LiveRepair => self.step_live_repair(&mut incident, node, &own).await,
                Action::Evacuate | Action::EvacuateFailover => {
                    self.step_evacuation(&mut incident, node, &own, &mut round)
                        .await
                }
            };
            self.override_note = None;
            submitted += stepped?;
        }
        Ok(submitted)
    }
}

impl NodeRepair {
    /// An evacuation the gate holds back (or that waits for another incident) may have been
    /// escalated from a live repair whose command still runs: it keeps following that repair,
    /// so that the repair's end is recorded when it comes, not only once the evacuation is
    /// admitted.
    async fn follow_held_back_repair(
        &self,
        incident: &mut Incident,
        by_uuid: &BTreeMap<&str, &Node>,
        intents: &[Intent],
    ) -> Result<(), RoundError> {
        if !incident.action.is_evacuation() || !incident.is_active() {
            return Ok(());
        }
        let Some(node) = by_uuid.get(incident.node_uuid.as_str()) else {
            return Ok(());
        };
        if let Some(repair) = Self::own(intents, incident.uuid)
            .into_iter()
            .find(|i| matches!(i.spec, IntentSpec::Repair { .. }) && i.state.is_in_flight())
        {
            self.follow_superseded_repair(incident, node, repair.clone())
                .await?;
        }
        Ok(())
    }
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
    // A Ganeti job, or a repair command the agent may be running: the incident is kept (and
    // its node held) until it ends.
    let in_flight = own.iter().any(|i| i.state.is_in_flight());
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
    store: &Arc<Store>,
    board: &Board,
    uuid: Uuid,
) -> Result<Vec<CanceledJob>, StoreError> {
    if store
        .incident(uuid)?
        .is_none_or(|i| i.repair_status != RepairStatus::Canceled)
    {
        return Ok(Vec::new());
    }
    let ledger: Arc<dyn Ledger> = store.clone();
    let executor = Executor::new(ledger).with_cancels_asked(Arc::clone(&board.cancels_asked));
    let mut answers: Vec<CanceledJob> = executor
        .cancel_jobs(ganeti, &Holder::Incident { id: uuid })
        .await?
        .into_iter()
        .map(|a| CanceledJob {
            job: a.job,
            intent: a.key,
            canceled: a.canceled,
            message: a.message,
        })
        .collect();
    answers.extend(stop_unknown_jobs(ganeti, store, board, uuid).await?);
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

/// The queued jobs of canceled incident `uuid` whose submission is uncertain (its answer was
/// lost: the job id is not known until a round adopts the job by its reason trail), found in
/// Ganeti's job list by that reason trail and asked to cancel now, earliest first, so that none
/// starts before the next round; asked once each (`board.cancels_asked`). The round adopts them
/// as it does any uncertain submission. Ganeti's job list not readable: nothing asked (the
/// round adopts, then cancels).
async fn stop_unknown_jobs(
    ganeti: &dyn Ganeti,
    store: &Arc<Store>,
    board: &Board,
    uuid: Uuid,
) -> Result<Vec<CanceledJob>, StoreError> {
    let intents: Vec<Intent> = store
        .intents()?
        .into_iter()
        .filter(|i| i.incident == uuid && i.spec.is_ganeti_job())
        .collect();
    if !intents
        .iter()
        .any(|i| i.state == IntentState::Planned && i.job_id.is_none())
    {
        return Ok(Vec::new());
    }
    let known: BTreeSet<JobId> = intents.iter().filter_map(|i| i.job_id).collect();
    let jobs = match ganeti.jobs().await {
        Ok(jobs) => jobs,
        Err(error) => {
            tracing::warn!(incident = %uuid, %error, "cannot list Ganeti's jobs to cancel those of submissions that were uncertain: the next round adopts them, then cancels them");
            return Ok(Vec::new());
        }
    };
    let mut unknown: Vec<(JobId, String)> = jobs
        .iter()
        .filter(|job| {
            matches!(
                job.status,
                nodecare_ganeti::JobStatus::Queued | nodecare_ganeti::JobStatus::Waiting
            )
        })
        .filter(|job| !known.contains(&job.id))
        .filter_map(|job| {
            job.reasons
                .iter()
                .find_map(|entry| Reason::parse_text(&entry.text))
                .filter(|reason| reason.incident == uuid)
                .map(|reason| (job.id, reason.intent))
        })
        .collect();
    unknown.sort_unstable();
    let mut answers = Vec::new();
    for (job, intent) in unknown {
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
            Err(error) => (false, format!("cannot ask Ganeti to cancel it: {error}")),
        };
        tracing::info!(incident = %uuid, job, intent = %intent, canceled, %message,
            "job cancel (its submission was uncertain)");
        answers.push(CanceledJob {
            job,
            intent,
            canceled,
            message,
        });
    }
    Ok(answers)
}

/// The nodecare reason `job` carries when it names another incident or intent than `intent`
/// (the job id is not the job submitted for it); `None` when it is that job, or carries no
/// nodecare reason at all (nothing to tell them apart by).
fn foreign_job(job: &nodecare_ganeti::Job, intent: &Intent) -> Option<String> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use nodecare_ganeti::{Job, JobStatus, ReasonEntry};

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
