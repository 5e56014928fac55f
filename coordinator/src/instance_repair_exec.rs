//! Instance auto-repair, the executor's side: reads what the duty
//! ([`nodecare_core::duty::instance_repair`]) needs from Ganeti and the ledger, and records what it
//! decided as ledger entries, carried out by the executor ([`nodecare_exec::Executor`]): tag
//! changes at once, repairs once the gate admits them.
//!
//! A repair runs as harep's, through RAPI: one job per operation (RAPI has no multi-opcode
//! job). Its entries ([`repair_entries`]) are held by the repair (`Holder::InstanceRepair`, the
//! repair's uuid, which is every job's `incident=`), recorded before anything is submitted, each
//! operation submitted once the one before has succeeded (RAPI's reinstall cannot carry
//! `depends`: [`nodecare_exec::ledger::Entry::unchained`]), each holding the instance's nodes
//! while unfinished ([`nodecare_exec::ledger::Hold::Repairing`]: the gate's in-force view counts
//! every running repair). Then the `pending:` tag naming the jobs, then the removal of the tags
//! it supersedes: the tag's ids are known only after submission, so its entries are recorded in
//! a later pass, once every operation has its job ([`repair_step`], pure), by this module, not
//! by the executor. Every job carries the reason
//! `nodecare incident=<repair uuid> intent=instance-repair-...: automated repairs by nodecare
//! <version> ...` under `gnt:daemon:maintd`. A tag change (a result, an `enoperm`, an expired
//! suspend) is a holder of its own: the uuid of the repair whose result it writes, else a fresh
//! one. A tag change whose jobs did not succeed is kept while its change is still to be made,
//! and the duty's next proposal of it is recorded as a new attempt under an intent of its own
//! (`success-2`, [`tag_attempt_intent`]): no reason-trail key reaches Ganeti twice.
//!
//! Between the recording of a repair and the moment Ganeti shows its pending tag (or a tag
//! change's jobs end), the instance is *in flight*: the duty leaves it alone. Once done, the
//! holder's entries are forgotten. After a crash or a lost answer the executor adopts the jobs
//! Ganeti shows by their reason trail; of those it does not show (the job list is complete), a
//! later operation is submitted again, and a repair none of whose operations reached Ganeti is
//! canceled and planned again, judged again by the gate ([`UNADOPTED`]).
//! RAPI's reinstall job carries no reason trail: its entry is marked submitted before Ganeti is
//! asked, so an uncertain reinstall is never submitted again; its entry fails, and the repair
//! ends in a `failure` result tag naming the jobs so far, with why in the run's errors.

use std::collections::{BTreeMap, BTreeSet};

use uuid::Uuid;

use nodecare_core::duty::instance_repair::{
    Assessment, Inputs, PlannedRepair, RepairData, RepairResult, TagChange,
};
use nodecare_core::gate::{Decision, Holder, InForce, Policy};
use nodecare_exec::ledger::{Entry, State};
use nodecare_exec::{Executor, Unadopted};
use nodecare_ganeti::{Ganeti, GanetiError, Group, Instance, TagTarget};

pub use nodecare_exec::instance_repair::{
    Collected, INTENT_PREFIX, OneShot, Record, RepairHolds, RepairStep, RunOptions, RunReport,
    holds, is_autorepair_tag, job_states, latest_attempt, op_key, plan_of, reason, repair_entries,
    repair_step, tag_attempt_intent, tag_change_of, tag_entries, tag_identity, tag_lines, view_of,
};

/// What becomes of a repair's entry whose submission is uncertain and that Ganeti's job list
/// does not show (the list is complete, and every repair job but the reinstall carries its
/// trail): when none of the repair's operations reached Ganeti, the repair is canceled and
/// forgotten, and the duty plans it again from the cluster as it is, for the gate to judge
/// again (the cluster may have changed since it was admitted: storage no longer whole, the
/// repair no longer needed); a later operation, after one that ran, is submitted again. An
/// uncertain reinstall stays held while the list shows a reinstall of its instance unfinished,
/// then fails, never submitted twice.
pub const UNADOPTED: Unadopted = Unadopted::JudgeAgain;

/// Whether `holder` is an instance repair's (or its tag change's).
pub const fn is_instance_repair(holder: &Holder) -> bool {
    matches!(holder, Holder::InstanceRepair { .. })
}

/// The executor's pass over instance repairs alone, for runs without the coordinator's round
/// (the one-shot): jobs adopted after a crash, every job followed to its outcome. The round
/// does this for every holder.
pub async fn follow(ganeti: &dyn Ganeti, executor: &Executor, now_ms: u64) -> Vec<String> {
    let mut errors = Vec::new();
    if let Err(error) = executor
        .adopt_of(ganeti, is_instance_repair, |_| UNADOPTED, now_ms)
        .await
    {
        errors.push(error.to_string());
    }
    if let Err(error) = executor.poll_of(ganeti, is_instance_repair, now_ms).await {
        errors.push(error.to_string());
    }
    errors
}

/// The ledger's instance-repair entries, by holder.
fn by_holder(executor: &Executor) -> Result<BTreeMap<Holder, Vec<Entry>>, String> {
    let mut out: BTreeMap<Holder, Vec<Entry>> = BTreeMap::new();
    for entry in executor.ledger().entries().map_err(|e| e.to_string())? {
        if is_instance_repair(&entry.holder) {
            out.entry(entry.holder.clone()).or_default().push(entry);
        }
    }
    Ok(out)
}

/// Reads the cluster tags, the status of every pending repair's jobs, and the ledger's repairs
/// and tag changes in flight (forgetting those Ganeti now shows done); `groups` are the node
/// groups with their tags, as the caller read them.
pub async fn collect(
    ganeti: &dyn Ganeti,
    executor: &Executor,
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
    let holders = match by_holder(executor) {
        Ok(holders) => holders,
        Err(error) => {
            // Without the ledger, nothing can be known to be out of flight: wait.
            collected
                .errors
                .push(format!("instance repair entries: {error}"));
            collected
                .in_flight
                .extend(instances.iter().map(|i| i.name.clone()));
            return Ok(collected);
        }
    };
    for (holder, entries) in holders {
        let unfinished = entries.iter().any(|e| e.state.is_unfinished());
        let (target, in_flight, done) = if let Some(plan) = plan_of(&entries) {
            let target = TagTarget::Instance(plan.instance.clone());
            let uuid = plan.uuid.to_string();
            let shown = by_name.get(plan.instance.as_str()).map(|instance| {
                instance
                    .tags
                    .iter()
                    .any(|tag| RepairData::parse_tag(tag).is_some_and(|data| data.uuid == uuid))
            });
            match (repair_step(&plan, &entries), shown) {
                // Gone: nothing left to wait for.
                (_, None) => (target, false, !unfinished),
                (RepairStep::Nothing, _) => (target, false, true),
                // Its tag written; in flight until the instances as read show it.
                (RepairStep::Tagged, Some(shown)) => (target, !shown, true),
                (RepairStep::Wait | RepairStep::Tag { .. } | RepairStep::TooLong, _) => {
                    collected
                        .repairs_in_flight
                        .insert(plan.instance.clone(), plan.uuid);
                    (target, true, false)
                }
            }
        } else if let Some((target, add, remove)) = tag_change_of(&latest_attempt(&entries)) {
            // Jobs that ended after the caller read the instances: their tags may not show
            // the change yet, and the duty, reading them without it, would propose it again.
            let not_shown = match &target {
                TagTarget::Instance(name) => by_name.get(name.as_str()).is_some_and(|i| {
                    add.as_ref().is_some_and(|tag| !i.tags.contains(tag))
                        || remove.iter().any(|tag| i.tags.contains(tag))
                }),
                _ => false,
            };
            let failed = !unfinished
                && latest_attempt(&entries)
                    .iter()
                    .any(|e| e.state != State::Succeeded);
            if failed && not_shown {
                // Its latest attempt did not succeed and the change is still to be made: kept
                // (so that the duty's next proposal of it is recorded as a new attempt, under
                // an intent of its own), not in flight.
                continue;
            }
            let ended = entries.iter().any(|e| e.job.is_some()) && not_shown;
            (target, unfinished || ended, !unfinished)
        } else {
            continue;
        };
        if done && let Err(error) = executor.ledger().forget(&holder) {
            collected.errors.push(error.to_string());
        }
        if !in_flight {
            continue;
        }
        match target {
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
    executor: &Executor,
    assessment: &Assessment,
    decision: &Decision,
    collected: &Collected,
    dry_run: bool,
    now_ms: u64,
) -> RunReport {
    let options = RunOptions {
        dry_run,
        note: None,
    };
    run_instance_repairs_with(
        ganeti, executor, assessment, decision, collected, &options, now_ms,
    )
    .await
}

/// [`run_instance_repairs`] with [`RunOptions`].
pub async fn run_instance_repairs_with(
    ganeti: &dyn Ganeti,
    executor: &Executor,
    assessment: &Assessment,
    decision: &Decision,
    collected: &Collected,
    options: &RunOptions,
    now_ms: u64,
) -> RunReport {
    let mut report = RunReport::default();
    let dry_run = options.dry_run;
    let ctx = Ctx {
        ganeti,
        executor,
        note: options.note.as_deref(),
        now_ms,
    };
    if !dry_run {
        // Repairs recorded earlier: their next operation (once the one before succeeded), and
        // their tags once every operation has its job.
        for uuid in collected.repairs_in_flight.values() {
            let holder = Holder::InstanceRepair { id: *uuid };
            submit(ctx, &holder, &mut report).await;
            tag_pass(ctx, &holder, &mut report).await;
        }
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
                run_tag_change(ctx, change, collected, dry_run, &mut report).await;
            }
            Action::Repair(repair) => {
                run_repair(ctx, repair, decision, dry_run, &mut report).await;
            }
            Action::Line(line) => report.lines.push(line.clone()),
        }
    }
    report
}

enum Action<'a> {
    Line(&'a String),
    Tags(&'a TagChange),
    Repair(&'a PlannedRepair),
}

async fn run_repair(
    ctx: Ctx<'_>,
    repair: &PlannedRepair,
    decision: &Decision,
    dry_run: bool,
    report: &mut RunReport,
) {
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
                nodecare_core::duty::instance_repair::harep_job(
                    &plan.instance,
                    std::slice::from_ref(op),
                    0,
                )
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
    let nodes: BTreeSet<String> = repair
        .proposal
        .disrupts
        .iter()
        .chain(&repair.proposal.touches)
        .cloned()
        .collect();
    let holder = Holder::InstanceRepair { id: plan.uuid };
    let entries = repair_entries(plan, &nodes, ctx.note, ctx.now_ms);
    if let Err(error) = ctx.executor.record(&entries) {
        report.errors.push(format!("{}: {error}", plan.instance));
        return;
    }
    submit(ctx, &holder, report).await;
    tag_pass(ctx, &holder, report).await;
}

/// What carrying out needs.
#[derive(Clone, Copy)]
struct Ctx<'a> {
    ganeti: &'a dyn Ganeti,
    executor: &'a Executor,
    note: Option<&'a str>,
    now_ms: u64,
}

/// Has the executor submit `holder`'s ready entries; what Ganeti refused, in the run's errors
/// (the entry stays recorded: adopted or submitted again by a later run, a reinstall failed).
async fn submit(ctx: Ctx<'_>, holder: &Holder, report: &mut RunReport) {
    match ctx
        .executor
        .submit_reporting(ctx.ganeti, Some(holder), ctx.now_ms)
        .await
    {
        Ok(submission) => {
            for (entry, error) in submission.refused {
                report.errors.push(refused(&entry, &error));
            }
        }
        Err(error) => report.errors.push(format!("{holder}: {error}")),
    }
}

/// harep's words for a submission Ganeti did not accept.
fn refused(entry: &Entry, error: &GanetiError) -> String {
    use nodecare_ganeti::Op;
    match entry.action.op() {
        Some(Op::AddTags { target, tags }) => {
            format!(
                "adding {:?} to {target}: {error}",
                tags.first().cloned().unwrap_or_default()
            )
        }
        Some(Op::RemoveTags { target, tags }) => {
            format!("removing {tags:?} from {target}: {error}")
        }
        Some(op) => format!("{}: {op}: {error}", entry.key),
        None => format!("{}: {error}", entry.key),
    }
}

/// Records and submits the tags of repair `holder` once its operations all have their jobs
/// ([`repair_step`]).
async fn tag_pass(ctx: Ctx<'_>, holder: &Holder, report: &mut RunReport) {
    let entries = match ctx.executor.ledger().of_holder(holder) {
        Ok(entries) => entries,
        Err(error) => {
            report.errors.push(error.to_string());
            return;
        }
    };
    let Some(plan) = plan_of(&entries) else {
        return;
    };
    let (add, intent, jobs, why) = match repair_step(&plan, &entries) {
        RepairStep::Tag {
            add,
            intent,
            jobs,
            why,
        } => (add, intent, jobs, why),
        RepairStep::TooLong => {
            report.errors.push(format!(
                "{}: pending tag of repair {} too long",
                plan.instance, plan.uuid
            ));
            return;
        }
        RepairStep::Wait | RepairStep::Nothing | RepairStep::Tagged => return,
    };
    if let Some(why) = &why {
        report.errors.push(format!(
            "{}: {} repair {} failed, not run again: {why}",
            plan.instance, plan.kind, plan.uuid
        ));
    }
    let target = TagTarget::Instance(plan.instance.clone());
    tag_lines(&mut report.lines, &target, Some(&add), &plan.remove);
    let tags = tag_entries(
        holder,
        &intent,
        &target,
        Some(&add),
        &plan.remove,
        ctx.note,
        ctx.now_ms,
    );
    if let Err(error) = ctx.executor.record(&tags) {
        report.errors.push(format!("{}: {error}", plan.instance));
        return;
    }
    submit(ctx, holder, report).await;
    let tagged = ctx
        .executor
        .ledger()
        .entry(holder, &format!("{INTENT_PREFIX}-{intent}-tag"))
        .ok()
        .flatten()
        .is_some_and(|e| e.job.is_some());
    if tagged && why.is_none() {
        report
            .submitted
            .push((plan.instance.clone(), plan.uuid, jobs));
    }
}

async fn run_tag_change(
    ctx: Ctx<'_>,
    change: &TagChange,
    collected: &Collected,
    dry_run: bool,
    report: &mut RunReport,
) {
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
    let (uuid, intent) = tag_identity(change, Uuid::new_v4());
    let holder = Holder::InstanceRepair { id: uuid };
    // Earlier attempts of the same change whose jobs did not succeed: their keys reached
    // Ganeti, this attempt's must not be theirs.
    let earlier = match ctx.executor.ledger().of_holder(&holder) {
        Ok(earlier) => earlier,
        Err(error) => {
            report.errors.push(format!("{}: {error}", change.target));
            return;
        }
    };
    let intent = tag_attempt_intent(intent, &earlier);
    let entries = tag_entries(
        &holder,
        &intent,
        &change.target,
        change.add.as_deref(),
        &change.remove,
        ctx.note,
        ctx.now_ms,
    );
    if let Err(error) = ctx.executor.record(&entries) {
        report.errors.push(format!("{}: {error}", change.target));
        return;
    }
    submit(ctx, &holder, report).await;
}

/// One run of the duty, the gate and the executor, as `harep` runs from cron: reads the
/// cluster, decides, judges the repairs against `policy` (nothing else in force but what
/// Ganeti shows drained or offline and the nodes of repairs still running, [`holds`]), and
/// runs (or, with `dry_run`, prints) what is admitted.
/// DRBD degradation is not checked (it needs the agents' reports, which the daemon reads).
pub async fn run_once(
    ganeti: &dyn Ganeti,
    executor: &Executor,
    policy: &Policy,
    dry_run: bool,
    now_ms: u64,
) -> Result<OneShot, GanetiError> {
    let options = RunOptions {
        dry_run,
        note: None,
    };
    run_once_with(
        ganeti,
        executor,
        policy,
        &options,
        now_ms,
        &mut Uuid::new_v4,
    )
    .await
}

/// [`run_once`] with [`RunOptions`] and the source of new repair uuids (tests inject fixed
/// ones for byte-exact output).
pub async fn run_once_with(
    ganeti: &dyn Ganeti,
    executor: &Executor,
    policy: &Policy,
    options: &RunOptions,
    now_ms: u64,
    new_uuid: &mut dyn FnMut() -> Uuid,
) -> Result<OneShot, GanetiError> {
    // The jobs first, then the cluster: a read older than a job's end would show the
    // instance as it was.
    let followed = if options.dry_run {
        Vec::new()
    } else {
        follow(ganeti, executor, now_ms).await
    };
    let nodes = ganeti.nodes().await?;
    let instances = ganeti.instances().await?;
    let mut collected = collect(ganeti, executor, &instances, ganeti.groups().await?).await?;
    collected.errors.splice(0..0, followed);
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
    let assessment = nodecare_core::duty::instance_repair::assess(&inputs, new_uuid);
    let view = view_of(&nodes, now_ms);
    let held = holds(
        &instances,
        &nodes,
        Some(&collected.jobs),
        &collected.repairs_in_flight,
    );
    let in_force = InForce::new(&view, held.disrupted).with_touched(&view, held.touched);
    let decision = nodecare_core::gate::decide(&view, policy, &in_force, assessment.proposals());
    let mut report = run_instance_repairs_with(
        ganeti,
        executor,
        &assessment,
        &decision,
        &collected,
        options,
        now_ms,
    )
    .await;
    report.errors.splice(0..0, collected.errors);
    Ok(OneShot { assessment, report })
}
