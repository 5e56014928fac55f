//! Instance auto-repair, the executor: reads what the duty ([`crate::duty::instance_repair`]) needs
//! from Ganeti, and runs what it decided: tag changes at once, repairs once the gate admits
//! them.
//!
//! A repair runs as harep's, through RAPI: one job per operation (RAPI has no multi-opcode
//! job), each submitted once the one before has succeeded (RAPI's reinstall cannot carry
//! `depends`), then the `pending:` tag naming the jobs, then the removal of the tags it
//! supersedes. Every job carries the reason
//! `nodecare incident=<repair uuid> intent=instance-repair-...: automated repairs by nodecare
//! <version> ...` under `gnt:daemon:maintd`.
//!
//! Between the submission of a repair and the moment Ganeti shows its pending tag, the
//! instance is *in flight*: a record in the state database (table `instance_repairs`) says so,
//! and the duty leaves the instance alone. The record also makes a crash harmless: a repair
//! whose jobs were only partly submitted is completed from the jobs Ganeti already has with its
//! uuid (found by their reason), and a pending tag whose job failed is written again. Tag
//! changes are recorded the same way until their jobs are final, so that a result is never
//! written twice.

#![expect(
    clippy::disallowed_methods,
    reason = "instance repair still submits its own jobs, outside the executor's ledger"
)]

use std::collections::BTreeMap;

use uuid::Uuid;

use crate::duty::instance_repair::{
    Assessment, Inputs, RepairData, RepairOp, RepairResult, TagChange,
};
use crate::ganeti::{
    Ganeti, GanetiError, Group, Instance, JobId, JobStatus, Op, Reason, TagTarget,
};
use crate::gate::{Decision, InForce, Policy};
use crate::store::Store;

pub use nodecare_exec::instance_repair::{
    Collected, INTENT_PREFIX, OneShot, Record, RepairHolds, RunOptions, RunReport, holds,
    is_autorepair_tag, job_states, reason, tag_identity, tag_lines, view_of,
};

/// Reads the cluster tags, the status of every pending repair's jobs, and the records of work
/// in flight (forgetting those Ganeti now shows done); `groups` are the node groups with their
/// tags, as the caller read them.
pub async fn collect(
    ganeti: &dyn Ganeti,
    store: &Store,
    instances: &[Instance],
    groups: Vec<Group>,
) -> Result<Collected, GanetiError> {
    let mut collected = Collected {
        cluster_tags: ganeti.tags(&TagTarget::Cluster).await?,
        groups,
        ..Collected::default()
    };
    let (jobs, errors) = job_states(ganeti, instances).await;
    collected.jobs = jobs;
    collected.errors = errors;
    let by_name: BTreeMap<&str, &Instance> =
        instances.iter().map(|i| (i.name.as_str(), i)).collect();
    let records = match store.instance_repairs() {
        Ok(records) => records,
        Err(error) => {
            // Without the records, nothing can be known to be out of flight: wait.
            collected
                .errors
                .push(format!("instance repair records: {error}"));
            collected
                .in_flight
                .extend(instances.iter().map(|i| i.name.clone()));
            return Ok(collected);
        }
    };
    // Ganeti's job list, read once if a tag change's jobs must be looked up.
    let mut listing: Option<Vec<crate::ganeti::JobSummary>> = None;
    for (id, _, text) in records {
        let record: Record = match serde_json::from_str(&text) {
            Ok(record) => record,
            Err(error) => {
                collected
                    .errors
                    .push(format!("instance repair record {id} is corrupt: {error}"));
                continue;
            }
        };
        // Whether a tag change's jobs (recorded or adopted) ended but the instances as read do
        // not show the change yet.
        let mut tag_jobs_ended = false;
        let done = match &record {
            Record::Repair { plan, .. } => match by_name.get(plan.instance.as_str()) {
                // Gone: nothing left to wait for.
                None => true,
                Some(instance) => {
                    let uuid = plan.uuid.to_string();
                    instance
                        .tags
                        .iter()
                        .any(|tag| RepairData::parse_tag(tag).is_some_and(|data| data.uuid == uuid))
                }
            },
            Record::Tags { change, jobs } => {
                let mut done = true;
                let mut jobs = jobs.clone();
                let expected =
                    usize::from(change.add.is_some()) + usize::from(!change.remove.is_empty());
                if jobs.len() < expected {
                    // Submitted but not recorded (a crash, or an answer lost on the way back):
                    // Ganeti's job list says which were, by their reason. None there: never
                    // submitted, and planned again.
                    match adopt_tag_jobs(ganeti, &mut listing, change, &id).await {
                        Ok(found) if found.len() > jobs.len() => {
                            jobs = found;
                            let adopted = Record::Tags {
                                change: change.clone(),
                                jobs: jobs.clone(),
                            };
                            if let Ok(uuid) = Uuid::parse_str(&id)
                                && let Err(error) = save(store, uuid, &adopted)
                            {
                                collected.errors.push(error);
                            }
                        }
                        Ok(_) => {}
                        Err(error) => {
                            collected
                                .errors
                                .push(format!("listing jobs for tag change {id}: {error}"));
                            done = false;
                        }
                    }
                }
                // The tag was added but its removal never submitted (a crash or a lost answer
                // between the two): submit the removal now, or the duty, seeing the old tag,
                // would propose the whole change (and the tag) again.
                if let Ok(record_id) = Uuid::parse_str(&id)
                    && !jobs.is_empty()
                    && jobs.len() < expected
                    && !change.remove.is_empty()
                {
                    let (uuid, intent) = tag_identity(change, record_id);
                    let why = reason(
                        uuid,
                        &format!("{intent}-untag"),
                        &format!("untag {}", change.target),
                        None,
                    )
                    .after(jobs.iter().copied());
                    let op = Op::RemoveTags {
                        target: change.target.clone(),
                        tags: change.remove.clone(),
                    };
                    match ganeti.submit(&op, &why).await {
                        Ok(job) => {
                            jobs.push(job);
                            let completed = Record::Tags {
                                change: change.clone(),
                                jobs: jobs.clone(),
                            };
                            if let Err(error) = save(store, record_id, &completed) {
                                collected.errors.push(error);
                            }
                        }
                        Err(error) => {
                            collected.errors.push(format!(
                                "removing {:?} from {}: {error}",
                                change.remove, change.target
                            ));
                            done = false;
                        }
                    }
                }
                // Jobs that ended after the caller read the instances: their tags may not
                // show the change yet.
                tag_jobs_ended = !jobs.is_empty()
                    && match &change.target {
                        TagTarget::Instance(name) => by_name.get(name.as_str()).is_some_and(|i| {
                            change.add.as_ref().is_some_and(|tag| !i.tags.contains(tag))
                                || change.remove.iter().any(|tag| i.tags.contains(tag))
                        }),
                        _ => false,
                    };
                for job in &jobs {
                    match ganeti.job(*job).await {
                        Ok(job) if !job.status.is_final() => done = false,
                        Ok(_) | Err(GanetiError::NotFound(_)) => {}
                        Err(error) => {
                            collected.errors.push(format!("job {job}: {error}"));
                            done = false;
                        }
                    }
                }
                done
            }
        };
        if done {
            if let Err(error) = store.forget_instance_repair(&id) {
                collected.errors.push(error.to_string());
            }
            // A tag change whose jobs ended after the caller read the instances: the duty,
            // reading them without the change, would propose it again. Its target waits for the
            // next round's read.
            if !tag_jobs_ended {
                continue;
            }
        }
        if let Record::Repair { plan, .. } = &record {
            collected
                .repairs_in_flight
                .insert(plan.instance.clone(), plan.uuid);
        }
        match record.target() {
            TagTarget::Instance(name) => {
                collected.in_flight.insert(name);
            }
            other => {
                collected.targets_in_flight.insert(other);
            }
        }
    }
    Ok(collected)
}

/// Runs the tag changes and admitted repairs of `assessment`, and completes repairs left
/// unfinished by an earlier run. With `dry_run` nothing is submitted or recorded: the report
/// says what would be (harep's `--dry-run`).
pub async fn run_instance_repairs(
    ganeti: &dyn Ganeti,
    store: &Store,
    assessment: &Assessment,
    decision: &Decision,
    collected: &Collected,
    dry_run: bool,
) -> RunReport {
    let options = RunOptions {
        dry_run,
        note: None,
    };
    run_instance_repairs_with(ganeti, store, assessment, decision, collected, &options).await
}

/// [`run_instance_repairs`] with [`RunOptions`].
pub async fn run_instance_repairs_with(
    ganeti: &dyn Ganeti,
    store: &Store,
    assessment: &Assessment,
    decision: &Decision,
    collected: &Collected,
    options: &RunOptions,
) -> RunReport {
    let mut report = RunReport::default();
    let dry_run = options.dry_run;
    let note = options.note.as_deref();
    if !dry_run {
        resume(ganeti, store, collected, note, &mut report).await;
    }
    // Instances nothing can go on for until a person acts: said every run, as a failure.
    for (instance, why) in assessment.blocked() {
        report.errors.push(format!("{instance}: blocked: {why}"));
    }
    // harep's order: finished repairs first, then per instance its repair or enoperm result,
    // then (nodecare only) expired suspends.
    let mut actions: Vec<(u8, &str, Action<'_>)> = Vec::new();
    for change in &assessment.tag_changes {
        let phase = match (&change.target, change.add.is_some()) {
            (_, true)
                if change.add.as_deref().is_some_and(|t| {
                    RepairData::parse_tag(t)
                        .is_some_and(|d| d.result == Some(RepairResult::Enoperm))
                }) =>
            {
                1
            }
            (TagTarget::Instance(_), true) => 0,
            _ => 2,
        };
        let name = match &change.target {
            TagTarget::Instance(name) => name.as_str(),
            _ => "",
        };
        actions.push((phase, name, Action::Tags(change)));
    }
    for repair in &assessment.repairs {
        actions.push((1, repair.plan.instance.as_str(), Action::Repair(repair)));
    }
    for (instance, line) in &assessment.notices {
        actions.push((1, instance.as_str(), Action::Line(line)));
    }
    actions.sort_by(|a, b| (a.0, a.1).cmp(&(b.0, b.1)));
    for (_, _, action) in actions {
        match action {
            Action::Tags(change) => {
                run_tag_change(ganeti, store, change, collected, options, &mut report).await;
            }
            Action::Repair(repair) => {
                run_repair(ganeti, store, repair, decision, options, &mut report).await;
            }
            Action::Line(line) => report.lines.push(line.clone()),
        }
    }
    report
}

enum Action<'a> {
    Line(&'a String),
    Tags(&'a TagChange),
    Repair(&'a crate::duty::instance_repair::PlannedRepair),
}

async fn run_tag_change(
    ganeti: &dyn Ganeti,
    store: &Store,
    change: &TagChange,
    collected: &Collected,
    options: &RunOptions,
    report: &mut RunReport,
) {
    let dry_run = options.dry_run;
    if collected.targets_in_flight.contains(&change.target) {
        return;
    }
    report.lines.extend(change.message.clone());
    tag_lines(
        &mut report.lines,
        &change.target,
        change.add.as_deref(),
        &change.remove,
    );
    if dry_run {
        return;
    }
    let record = Record::Tags {
        change: change.clone(),
        jobs: Vec::new(),
    };
    let id = Uuid::new_v4();
    if let Err(error) = save(store, id, &record) {
        report.errors.push(error);
        return;
    }
    let (uuid, intent) = tag_identity(change, id);
    let jobs = submit_tags(
        ganeti,
        &change.target,
        change.add.as_deref(),
        &change.remove,
        uuid,
        intent,
        &[],
        options.note.as_deref(),
        report,
    )
    .await;
    let record = Record::Tags {
        change: change.clone(),
        jobs,
    };
    if let Err(error) = save(store, id, &record) {
        report.errors.push(error);
    }
}

async fn run_repair(
    ganeti: &dyn Ganeti,
    store: &Store,
    repair: &crate::duty::instance_repair::PlannedRepair,
    decision: &Decision,
    options: &RunOptions,
    report: &mut RunReport,
) {
    let dry_run = options.dry_run;
    let plan = &repair.plan;
    match decision.of(&repair.proposal.holder).map(|j| &j.outcome) {
        Some(Ok(_)) => {}
        Some(Err(blocked)) => {
            report.lines.push(format!(
                "Not repairing {} now: {} repair held by the gate: {blocked}",
                plan.instance,
                plan.kind.harep_name()
            ));
            report
                .blocked
                .push((plan.instance.clone(), blocked.to_string()));
            return;
        }
        None => {
            report
                .blocked
                .push((plan.instance.clone(), "not judged by the gate".into()));
            return;
        }
    }
    report.lines.push(plan.message.clone());
    if dry_run {
        // The jobs nodecare submits: one per operation, each after the one before.
        let jobs: Vec<String> = plan
            .ops
            .iter()
            .map(|op| {
                crate::duty::instance_repair::harep_job(&plan.instance, std::slice::from_ref(op), 0)
            })
            .collect();
        report.lines.push(format!("jobs: [{}]", jobs.join(",")));
        tag_lines(
            &mut report.lines,
            &TagTarget::Instance(plan.instance.clone()),
            plan.pending_tag(&[]).as_deref(),
            &plan.remove,
        );
        return;
    }
    let mut record = Record::Repair {
        plan: plan.clone(),
        jobs: vec![None; plan.ops.len()],
        tag_job: None,
    };
    if let Err(error) = save(store, plan.uuid, &record) {
        report.errors.push(error);
        return;
    }
    advance(
        ganeti,
        store,
        &mut record,
        &BTreeMap::new(),
        options.note.as_deref(),
        report,
    )
    .await;
}

fn save(store: &Store, id: Uuid, record: &Record) -> Result<(), String> {
    let instance = match record.target() {
        TagTarget::Instance(name) => name,
        other => other.to_string(),
    };
    let text = serde_json::to_string(record).map_err(|e| format!("record {id}: {e}"))?;
    store
        .save_instance_repair(&id.to_string(), &instance, &text)
        .map_err(|e| format!("record {id}: {e}"))
}

async fn submit_op(
    ganeti: &dyn Ganeti,
    instance: &str,
    op: &RepairOp,
    reason: &Reason,
) -> Result<JobId, GanetiError> {
    ganeti.submit(&op.op(instance), reason).await
}

/// Adds `add`, then (after it) removes `remove`; the jobs submitted.
#[allow(clippy::too_many_arguments)]
async fn submit_tags(
    ganeti: &dyn Ganeti,
    target: &TagTarget,
    add: Option<&str>,
    remove: &[String],
    uuid: Uuid,
    intent: &str,
    after: &[JobId],
    note: Option<&str>,
    report: &mut RunReport,
) -> Vec<JobId> {
    let mut jobs = Vec::new();
    if let Some(tag) = add {
        let op = Op::AddTags {
            target: target.clone(),
            tags: vec![tag.to_owned()],
        };
        let why = reason(
            uuid,
            &format!("{intent}-tag"),
            &format!("tag {target}"),
            note,
        )
        .after(after.iter().copied());
        match ganeti.submit(&op, &why).await {
            Ok(job) => jobs.push(job),
            Err(error) => {
                report
                    .errors
                    .push(format!("adding {tag:?} to {target}: {error}"));
                return jobs;
            }
        }
    }
    if !remove.is_empty() {
        let why = reason(
            uuid,
            &format!("{intent}-untag"),
            &format!("untag {target}"),
            note,
        )
        .after(after.iter().chain(&jobs).copied());
        let op = Op::RemoveTags {
            target: target.clone(),
            tags: remove.to_vec(),
        };
        match ganeti.submit(&op, &why).await {
            Ok(job) => jobs.push(job),
            Err(error) => report
                .errors
                .push(format!("removing {remove:?} from {target}: {error}")),
        }
    }
    jobs
}

/// Submits what a repair record still lacks: its operations' jobs (each after the one
/// before), then its pending tag and the removal of the tags it supersedes. `known`: jobs
/// Ganeti already has for this repair, by intent (after a crash).
async fn advance(
    ganeti: &dyn Ganeti,
    store: &Store,
    record: &mut Record,
    known: &BTreeMap<String, JobId>,
    note: Option<&str>,
    report: &mut RunReport,
) {
    let Record::Repair {
        plan,
        jobs,
        tag_job,
    } = record
    else {
        return;
    };
    let plan = plan.clone();
    let mut previous: Option<JobId> = None;
    let mut finished_early = false;
    for (index, op) in plan.ops.iter().enumerate() {
        let intent = format!("{}-{index}", plan.kind);
        let full_intent = format!("{INTENT_PREFIX}-{intent}");
        let slot = jobs.get(index).copied().flatten();
        let job = match slot.or_else(|| known.get(&full_intent).copied()) {
            Some(job) => job,
            None => {
                // The next operation starts once the one before has succeeded (RAPI's
                // reinstall cannot wait for a job itself): until then the repair stays in
                // flight; if it failed, the pending tag names the jobs so far and the repair
                // ends in `failure`.
                if let Some(before) = previous {
                    match ganeti.job(before).await {
                        Ok(j) if j.status == JobStatus::Success => {}
                        Ok(j) if !j.status.is_final() => return,
                        Ok(_) | Err(GanetiError::NotFound(_)) => {
                            finished_early = true;
                            break;
                        }
                        Err(error) => {
                            report.errors.push(format!("job {before}: {error}"));
                            return;
                        }
                    }
                }
                let why = reason(
                    plan.uuid,
                    &intent,
                    &format!("{} of {}: {}", plan.kind, plan.instance, op.describe()),
                    note,
                );
                match submit_op(ganeti, &plan.instance, op, &why).await {
                    Ok(job) => job,
                    Err(error) => {
                        report.errors.push(format!(
                            "{} of {}: {}: {error}",
                            plan.kind,
                            plan.instance,
                            op.describe()
                        ));
                        break;
                    }
                }
            }
        };
        if let Some(entry) = jobs.get_mut(index) {
            *entry = Some(job);
        }
        previous = Some(job);
        let snapshot = Record::Repair {
            plan: plan.clone(),
            jobs: jobs.clone(),
            tag_job: *tag_job,
        };
        if let Err(error) = save(store, plan.uuid, &snapshot) {
            report.errors.push(error);
        }
    }
    let submitted: Option<Vec<JobId>> = if finished_early {
        Some(jobs.iter().copied().flatten().collect())
    } else {
        jobs.iter().copied().collect()
    };
    let Some(submitted) = submitted else {
        if jobs.iter().all(Option::is_none) {
            // Nothing reached Ganeti: forget the repair, the next round decides again.
            if let Err(error) = store.forget_instance_repair(&plan.uuid.to_string()) {
                report.errors.push(error.to_string());
            }
        }
        return;
    };
    let target = TagTarget::Instance(plan.instance.clone());
    if tag_job.is_none()
        && let Some(&job) = known.get(&format!("{INTENT_PREFIX}-pending-tag"))
    {
        // Submitted before a crash, not recorded: adopt it (and submit the removal of the
        // superseded tags if that was not submitted yet).
        *tag_job = Some(job);
        if !plan.remove.is_empty() && !known.contains_key(&format!("{INTENT_PREFIX}-pending-untag"))
        {
            submit_tags(
                ganeti,
                &target,
                None,
                &plan.remove,
                plan.uuid,
                "pending",
                &[job],
                note,
                report,
            )
            .await;
        }
        let snapshot = Record::Repair {
            plan: plan.clone(),
            jobs: jobs.clone(),
            tag_job: *tag_job,
        };
        if let Err(error) = save(store, plan.uuid, &snapshot) {
            report.errors.push(error);
        }
        return;
    }
    if tag_job.is_none() {
        let Some(tag) = plan.pending_tag(&submitted) else {
            report.errors.push(format!(
                "{}: pending tag of repair {} too long",
                plan.instance, plan.uuid
            ));
            return;
        };
        tag_lines(&mut report.lines, &target, Some(&tag), &plan.remove);
        let tag_jobs = submit_tags(
            ganeti,
            &target,
            Some(&tag),
            &plan.remove,
            plan.uuid,
            "pending",
            &[],
            note,
            report,
        )
        .await;
        *tag_job = tag_jobs.first().copied();
        if tag_job.is_some() {
            report
                .submitted
                .push((plan.instance.clone(), plan.uuid, submitted));
        }
        let snapshot = Record::Repair {
            plan: plan.clone(),
            jobs: jobs.clone(),
            tag_job: *tag_job,
        };
        if let Err(error) = save(store, plan.uuid, &snapshot) {
            report.errors.push(error);
        }
    }
}

/// The jobs in Ganeti's job list submitted for the tag change recorded as `id`.
async fn adopt_tag_jobs(
    ganeti: &dyn Ganeti,
    listing: &mut Option<Vec<crate::ganeti::JobSummary>>,
    change: &TagChange,
    id: &str,
) -> Result<Vec<JobId>, GanetiError> {
    let Ok(record) = Uuid::parse_str(id) else {
        return Ok(Vec::new());
    };
    let (uuid, intent) = tag_identity(change, record);
    let intents = [
        format!("{INTENT_PREFIX}-{intent}-tag"),
        format!("{INTENT_PREFIX}-{intent}-untag"),
    ];
    if listing.is_none() {
        *listing = Some(ganeti.jobs().await?);
    }
    let mut found: Vec<JobId> = listing
        .iter()
        .flatten()
        .filter(|job| {
            job.nodecare_reason()
                .is_some_and(|r| r.incident == uuid && intents.contains(&r.intent))
        })
        .map(|job| job.id)
        .collect();
    found.sort_unstable();
    Ok(found)
}

/// Completes repairs an earlier run left unfinished: missing jobs (found in Ganeti by their
/// reason, else submitted), and pending tags whose job failed.
async fn resume(
    ganeti: &dyn Ganeti,
    store: &Store,
    collected: &Collected,
    note: Option<&str>,
    report: &mut RunReport,
) {
    let records = match store.instance_repairs() {
        Ok(records) => records,
        Err(error) => {
            report.errors.push(error.to_string());
            return;
        }
    };
    let mut ours: Option<BTreeMap<Uuid, BTreeMap<String, JobId>>> = None;
    for (_, instance, text) in records {
        if !collected.in_flight.contains(&instance) {
            continue;
        }
        let Ok(mut record) = serde_json::from_str::<Record>(&text) else {
            continue;
        };
        let Record::Repair {
            plan,
            jobs,
            tag_job,
        } = &mut record
        else {
            continue;
        };
        let uuid = plan.uuid;
        if let Some(job) = *tag_job {
            match ganeti.job(job).await {
                Ok(j) if j.status == JobStatus::Error || j.status == JobStatus::Canceled => {
                    *tag_job = None;
                }
                Err(GanetiError::NotFound(_)) => *tag_job = None,
                // The tag was written (and, as the instance did not show it when this round
                // read it, removed since, or shown from the next read on): nothing left to do.
                Ok(j) if j.status == JobStatus::Success => {
                    if let Err(error) = store.forget_instance_repair(&uuid.to_string()) {
                        report.errors.push(error.to_string());
                    }
                    continue;
                }
                // Running, or unknown: wait.
                _ => continue,
            }
        }
        // Jobs (operations or the pending tag) possibly submitted but not recorded: look them up.
        let known = if jobs.iter().any(Option::is_none) || tag_job.is_none() {
            if ours.is_none() {
                match ganeti.jobs().await {
                    Ok(list) => {
                        let mut map: BTreeMap<Uuid, BTreeMap<String, JobId>> = BTreeMap::new();
                        for job in list {
                            if let Some(parsed) = job.nodecare_reason() {
                                map.entry(parsed.incident)
                                    .or_default()
                                    .insert(parsed.intent, job.id);
                            }
                        }
                        ours = Some(map);
                    }
                    Err(error) => {
                        report
                            .errors
                            .push(format!("listing jobs to resume repairs: {error}"));
                        continue;
                    }
                }
            }
            ours.as_ref()
                .and_then(|m| m.get(&uuid))
                .cloned()
                .unwrap_or_default()
        } else {
            BTreeMap::new()
        };
        advance(ganeti, store, &mut record, &known, note, report).await;
    }
}

/// One run of the duty, the gate and the executor, as `harep` runs from cron: reads the
/// cluster, decides, judges the repairs against `policy` (nothing else in force but what
/// Ganeti shows drained or offline and the nodes of repairs still running, [`holds`]), and
/// runs (or, with `dry_run`, prints) what is admitted.
/// DRBD degradation is not checked (it needs the agents' reports, which the daemon reads).
pub async fn run_once(
    ganeti: &dyn Ganeti,
    store: &Store,
    policy: &Policy,
    dry_run: bool,
    now_ms: u64,
) -> Result<OneShot, GanetiError> {
    let options = RunOptions {
        dry_run,
        note: None,
    };
    run_once_with(ganeti, store, policy, &options, now_ms, &mut Uuid::new_v4).await
}

/// [`run_once`] with [`RunOptions`] and the source of new repair uuids (tests inject fixed
/// ones for byte-exact output).
pub async fn run_once_with(
    ganeti: &dyn Ganeti,
    store: &Store,
    policy: &Policy,
    options: &RunOptions,
    now_ms: u64,
    new_uuid: &mut dyn FnMut() -> Uuid,
) -> Result<OneShot, GanetiError> {
    let nodes = ganeti.nodes().await?;
    let instances = ganeti.instances().await?;
    let collected = collect(ganeti, store, &instances, ganeti.groups().await?).await?;
    let degraded = BTreeMap::new();
    let now = i64::try_from(now_ms / 1000).unwrap_or(i64::MAX);
    let inputs = Inputs {
        now,
        cluster_tags: &collected.cluster_tags,
        groups: &collected.groups,
        nodes: &nodes,
        instances: &instances,
        jobs: &collected.jobs,
        degraded: &degraded,
        in_flight: &collected.in_flight,
    };
    let assessment = crate::duty::instance_repair::assess(&inputs, new_uuid);
    let view = view_of(&nodes, now_ms);
    let held = holds(
        &instances,
        &nodes,
        Some(&collected.jobs),
        &collected.repairs_in_flight,
    );
    let in_force = InForce::new(&view, held.disrupted).with_touched(&view, held.touched);
    let decision = crate::gate::decide(&view, policy, &in_force, assessment.proposals());
    let mut report =
        run_instance_repairs_with(ganeti, store, &assessment, &decision, &collected, options).await;
    report.errors.splice(0..0, collected.errors);
    Ok(OneShot { assessment, report })
}
