//! Rolling maintenance campaigns (IO): the executor of [`crate::campaign`].
//!
//! Each round, for every campaign not finished (or with operations in flight):
//!
//! 1. [`prepare`] (before the gate) follows the campaign's operations: one recorded but not
//!    known to be submitted (a crash in between, a lost answer) is adopted when Ganeti's job
//!    list shows a job with its reason (`gnt:daemon:maintd`, the campaign id as the incident
//!    and the operation's key as the intent), and submitted otherwise; submitted jobs and hooks
//!    are read. A campaign due for its next group is planned again against the cluster as it is
//!    (the roll planner) and its next group proposed ([`crate::duty::maintenance`]).
//! 2. [`execute`] (after the gate) starts an admitted group, shows what blocks a refused one,
//!    advances the state machine and submits the operations it plans, each stored durably
//!    before its submission.
//!
//! The hook is a signed repair request ([`crate::repair`]) whose id is drawn once and stored
//! with the operation: after a crash the same request is sent again and the agent answers with
//! the first run's record, so a hook never runs twice.

use std::collections::BTreeMap;

use nodecare_protocol::maintenance::HOOK_NO_REBOOT_LINE;
use nodecare_protocol::repair::{RepairRequest, RepairState};
use uuid::Uuid;

use crate::campaign::{
    self, AgentNow, InstanceNow, NodeNow, Op, OpKind, OpState, PlannedMove, Record, World,
};
use crate::ganeti::{Ganeti, GanetiError, Instance, JobStatus, Node, Reason};
use crate::gate::{Decision, Holder, Proposal, StorageProblem, View};
use crate::repair::{RepairAnswer, RepairClient};
use crate::scrape::AgentUrls;
use crate::store::{Store, StoreError};

/// What the executor needs.
#[derive(Debug, Clone, Copy)]
pub struct Context<'a> {
    /// Ganeti.
    pub ganeti: &'a dyn Ganeti,
    /// The store.
    pub store: &'a Store,
    /// Signed requests to the agents.
    pub repairs: &'a RepairClient,
    /// Where the agents are.
    pub agent_urls: &'a AgentUrls,
    /// The nodes as read this round.
    pub nodes: &'a [Node],
    /// The coordinator's failure domains: every campaign is planned with them.
    pub domains: &'a crate::gate::DomainSource,
}

/// The campaigns' part of one round.
#[derive(Debug, Clone, Default)]
pub struct CampaignRound {
    /// The proposals of campaigns due for their next group.
    pub proposals: Vec<Proposal>,
    /// The planned moves of those groups, per campaign.
    pub moves: BTreeMap<Uuid, BTreeMap<String, Vec<PlannedMove>>>,
}

/// What the state machine sees of the cluster this round. `agents` holds only verified, fresh
/// reports.
pub fn world(
    nodes: &[Node],
    instances: &[Instance],
    agents: BTreeMap<String, AgentNow>,
    storage: &[StorageProblem],
    master: &str,
    now_ms: u64,
) -> World {
    World {
        now_ms,
        master: master.to_owned(),
        nodes: nodes
            .iter()
            .map(|n| {
                (
                    n.name.clone(),
                    NodeNow {
                        drained: n.drained,
                        offline: n.offline,
                    },
                )
            })
            .collect(),
        instances: instances
            .iter()
            .map(|i| {
                (
                    i.name.clone(),
                    InstanceNow {
                        primary: i.primary_node.clone(),
                        secondaries: i.secondary_nodes.clone(),
                        running: i.status == "running",
                        mirrored: i.disk_template.is_internally_mirrored(),
                        memory: i.memory,
                    },
                )
            })
            .collect(),
        agents,
        // An instance on a drained node is a storage problem for the gate; for a campaign's
        // node coming back it is the campaign's own drain, undone in the next step.
        storage: storage
            .iter()
            .filter(|p| p.unknown || !p.what.ends_with(" is drained"))
            .map(|p| (p.nodes.clone(), p.what.clone()))
            .collect(),
    }
}

/// The campaigns that still have something to do (not finished, or operations in flight).
fn active(store: &Store) -> Result<Vec<Record>, StoreError> {
    Ok(store
        .campaigns()?
        .into_iter()
        .filter(|r| !r.state().is_final() || r.in_flight().next().is_some())
        .collect())
}

/// The nodes every campaign holds disrupted (for the gate's disruptions in force).
pub fn holds(store: &Store) -> Result<Vec<(String, Holder)>, StoreError> {
    Ok(store
        .campaigns()?
        .iter()
        .filter(|r| !r.state().is_final())
        .flat_map(Record::holds)
        .collect())
}

/// The nodes every unfinished campaign holds without disrupting them (their primaries
/// migrating back), for [`crate::gate::InForce::with_touched`].
pub fn touched(store: &Store) -> Result<Vec<(String, Holder)>, StoreError> {
    Ok(store
        .campaigns()?
        .iter()
        .filter(|r| !r.state().is_final())
        .flat_map(Record::touched)
        .collect())
}

/// The drained flags every stored campaign's jobs set or cleared, for
/// [`crate::gate::left_by`].
pub fn flag_changes(store: &Store) -> Result<Vec<crate::gate::FlagChange>, StoreError> {
    Ok(store
        .campaigns()?
        .iter()
        .flat_map(Record::flag_changes)
        .collect())
}

/// Every campaign's planned disruptions for the grace ([`Record::planned_disruptions`]): nodes
/// rebooting now (their hook runs or they are coming back) from `now_ms`, so their failure
/// domain stays in grace (no incident, no storm) throughout the reboot; nodes whose reboot
/// ended from that moment, for the grace after it (finished campaigns too).
pub fn planned_disruptions(store: &Store, now_ms: u64) -> Result<Vec<(String, u64)>, StoreError> {
    Ok(store
        .campaigns()?
        .iter()
        .flat_map(|r| r.planned_disruptions(now_ms))
        .collect())
}

/// Step 1: follows the operations, re-plans campaigns due for a group and proposes it.
pub async fn prepare(
    ctx: Context<'_>,
    world: &World,
    view: &View,
    instances: &[Instance],
    groups: &[crate::ganeti::Group],
    master: &str,
) -> Result<CampaignRound, StoreError> {
    let mut round = CampaignRound::default();
    let records = active(ctx.store)?;
    if records.is_empty() {
        return Ok(round);
    }
    let mut cluster = None;
    for mut record in records {
        let before = record.clone();
        follow(ctx, &mut record, world.now_ms).await?;
        if record.needs_group() {
            // Instances still migrating back to an earlier group's node are planned where
            // they go (their memory is that node's again).
            let back = record.pending_back();
            let landed;
            let instances = if back.is_empty() {
                instances
            } else {
                landed = as_back(instances, &back);
                &landed[..]
            };
            let fresh;
            let cluster = if back.is_empty() {
                &*cluster.get_or_insert_with(|| {
                    campaign::roll_cluster(ctx.nodes, instances, groups, master)
                })
            } else {
                fresh = campaign::roll_cluster(ctx.nodes, instances, groups, master);
                &fresh
            };
            match plan(cluster, &record, ctx.domains) {
                Ok((groups, moves, warnings)) => {
                    record.set_plan(groups, warnings, world);
                    record.set_blocked(None, world.now_ms);
                    if record.complete_if_done(world.now_ms) {
                        tracing::info!(campaign = %record.campaign.id, "maintenance campaign completed");
                    } else if let Some(proposal) = crate::duty::maintenance::propose(&record, view)
                    {
                        round.moves.insert(record.id(), moves);
                        round.proposals.push(proposal);
                    }
                }
                Err(why) => {
                    if record.campaign.blocked_by.as_deref() != Some(why.as_str()) {
                        tracing::warn!(campaign = %record.campaign.id, %why, "maintenance campaign: cannot plan");
                    }
                    record.set_blocked(Some(why), world.now_ms);
                }
            }
        }
        if record != before {
            ctx.store.save_campaign(&record)?;
        }
    }
    Ok(round)
}

/// `instances` with those migrating back (instance → node) already on their node: DRBD ones
/// with their current primary as secondary.
fn as_back(instances: &[Instance], back: &BTreeMap<String, String>) -> Vec<Instance> {
    instances
        .iter()
        .map(|i| {
            let mut i = i.clone();
            if let Some(home) = back.get(&i.name)
                && i.primary_node != *home
            {
                let old = std::mem::replace(&mut i.primary_node, home.clone());
                if !i.secondary_nodes.is_empty() {
                    i.secondary_nodes.retain(|s| s != home);
                    i.secondary_nodes.insert(0, old);
                    i.secondary_nodes.truncate(1);
                }
            }
            i
        })
        .collect()
}

/// Plans the campaign's selection on `cluster` with the coordinator's failure `domains`: the
/// groups (node names, in order), the planned moves of every node, and the planner's warnings.
#[allow(clippy::type_complexity)]
fn plan(
    cluster: &nodecare_roll::Cluster,
    record: &Record,
    domains: &crate::gate::DomainSource,
) -> Result<
    (
        Vec<Vec<String>>,
        BTreeMap<String, Vec<PlannedMove>>,
        Vec<String>,
    ),
    String,
> {
    let options = campaign::roll_options(&record.campaign.request, domains)?;
    let plan = nodecare_roll::plan(cluster, &options).map_err(|e| format!("planning: {e}"))?;
    let mut groups = Vec::new();
    let mut moves = BTreeMap::new();
    for group in &plan.groups {
        let (nodes, group_moves) = campaign::group_moves(cluster, group);
        groups.push(nodes);
        moves.extend(group_moves);
    }
    Ok((groups, moves, plan.warnings))
}

/// Step 2: starts admitted groups, advances every campaign and submits what it plans; returns
/// how many jobs (and hooks) were submitted.
pub async fn execute(
    ctx: Context<'_>,
    decision: &Decision,
    round: &CampaignRound,
    world: &World,
) -> Result<usize, StoreError> {
    let mut submitted = 0;
    for mut record in active(ctx.store)? {
        let before = record.clone();
        let id = record.id();
        if record.needs_group()
            && let Some(judgement) = decision.of(&Holder::Campaign { id })
        {
            match &judgement.outcome {
                Ok(_) => {
                    let moves = round.moves.get(&id).cloned().unwrap_or_default();
                    record.start_group(moves, world);
                    if let Some(group) = record.campaign.groups.last() {
                        let nodes: Vec<&str> =
                            group.nodes.iter().map(|n| n.node.as_str()).collect();
                        tracing::info!(campaign = %id, group = group.index, nodes = %nodes.join(","), "maintenance campaign: group started");
                    }
                }
                Err(
                    blocked @ (crate::gate::BlockedBy::Cap { .. }
                    | crate::gate::BlockedBy::Capacity { .. }),
                ) if record.shrink_groups() => {
                    let why = format!("{blocked}; trying smaller groups");
                    tracing::info!(campaign = %id, blocked_by = %why, max_group = ?record.max_group, "maintenance campaign: next group too large");
                    record.set_blocked(Some(why), world.now_ms);
                }
                Err(blocked) => {
                    let why = blocked.to_string();
                    if record.campaign.blocked_by.as_deref() != Some(why.as_str()) {
                        tracing::info!(campaign = %id, blocked_by = %why, "maintenance campaign: next group waits");
                    }
                    record.set_blocked(Some(why), world.now_ms);
                }
            }
        }
        let planned = record.advance(world);
        if let Some(failure) = &record.campaign.failure
            && before.campaign.failure.is_none()
        {
            tracing::error!(campaign = %id, node = %failure.node, step = %failure.step, why = %failure.why, "maintenance campaign failed");
        }
        if record == before {
            continue;
        }
        // Durable before anything is submitted; the job ids are stored once all are submitted
        // (a crash in between leaves operations planned, which the next round adopts by their
        // reason trail).
        ctx.store.save_campaign(&record)?;
        if planned.is_empty() {
            continue;
        }
        for key in planned {
            if submit(ctx, &mut record, &key, world.now_ms).await? {
                submitted += 1;
            }
        }
        ctx.store.save_campaign(&record)?;
    }
    Ok(submitted)
}

fn reason(record: &Record, op: &Op) -> Reason {
    let group = record
        .campaign
        .groups
        .iter()
        .find(|g| g.nodes.iter().any(|n| n.node == op.node))
        .map_or(record.campaign.groups.len().saturating_sub(1), |g| g.index);
    let what = match &op.kind {
        OpKind::Drain => format!("draining {}", op.node),
        OpKind::Undrain => format!("undraining {}", op.node),
        OpKind::Migrate {
            instance,
            target: Some(target),
        } => format!("migrating {instance} to {target}"),
        OpKind::Migrate {
            instance,
            target: None,
        } => format!("migrating {instance} to its secondary"),
        OpKind::ReplaceSecondary {
            instance,
            secondary,
        } => format!("moving the secondary of {instance} to {secondary}"),
        OpKind::Hook { .. } => format!("hook on {}", op.node),
        OpKind::Tag { tag } => format!("tagging {} {tag}", op.node),
    };
    Reason::new(
        record.id(),
        op.key.clone(),
        format!(
            "maintenance campaign {} group {} step {}: {what}",
            record.campaign.id, group, op.step
        ),
    )
}

/// Submits the planned operation `key`; whether it was submitted. A submission whose answer is
/// lost stays planned: the next round adopts its job by the reason trail or submits it.
async fn submit(
    ctx: Context<'_>,
    record: &mut Record,
    key: &str,
    now_ms: u64,
) -> Result<bool, StoreError> {
    let Some(op) = record.ops.get(key).cloned() else {
        return Ok(false);
    };
    if op.state != OpState::Planned {
        return Ok(false);
    }
    if let OpKind::Hook {
        request_id,
        context,
    } = &op.kind
    {
        let outcome = send_hook(ctx, record, &op, request_id, context, now_ms).await?;
        return Ok(outcome);
    }
    let mut reason = reason(record, &op);
    // Migrations back wait for the node's undrain job (Ganeti refuses a drained target).
    if op.step == nodecare_protocol::maintenance::NodeStep::MigrateBack
        && let Some(undrain) = record
            .ops
            .values()
            .find(|o| o.node == op.node && o.kind == OpKind::Undrain)
    {
        match (undrain.state, undrain.job_id) {
            (OpState::Planned, _) => return Ok(false),
            (OpState::Submitted, Some(job)) => reason = reason.after([job]),
            _ => {}
        }
    }
    let Some(ganeti_op) = op.kind.ganeti_op(&op.node) else {
        return Ok(false);
    };
    #[expect(
        clippy::disallowed_methods,
        reason = "campaigns still submit their operations themselves, outside the executor's ledger"
    )]
    let result = ctx.ganeti.submit(&ganeti_op, &reason).await;
    match result {
        Ok(job) => {
            if let Some(op) = record.ops.get_mut(key) {
                op.state = OpState::Submitted;
                op.job_id = Some(job);
            }
            tracing::info!(campaign = %record.campaign.id, key, job, "maintenance campaign: job submitted");
            Ok(true)
        }
        Err(error) => {
            tracing::warn!(campaign = %record.campaign.id, key, %error, "maintenance campaign: submission failed (adopted or submitted again next round)");
            Ok(false)
        }
    }
}

fn base_url(ctx: Context<'_>, node: &str) -> Option<String> {
    ctx.nodes
        .iter()
        .find(|n| n.name == node)
        .map(|n| ctx.agent_urls.base(n))
}

/// Sends (or sends again: the agent runs it once) the hook's signed repair request.
async fn send_hook(
    ctx: Context<'_>,
    record: &mut Record,
    op: &Op,
    request_id: &str,
    context: &nodecare_protocol::maintenance::HookContext,
    now_ms: u64,
) -> Result<bool, StoreError> {
    let Some(base) = base_url(ctx, &op.node) else {
        return Ok(false);
    };
    let input = match serde_json::to_value(context) {
        Ok(input) => input,
        Err(error) => {
            finish_op(
                record,
                &op.key,
                Err(format!("hook context: {error}")),
                now_ms,
            );
            return Ok(false);
        }
    };
    let request = RepairRequest {
        node: op.node.clone(),
        incident_id: request_id.to_owned(),
        command: record.campaign.request.hook.clone(),
        input,
        nonce: Uuid::new_v4().simple().to_string(),
    };
    let sequence = ctx.store.next_counter("repair-sequence", now_ms)?;
    let answer = ctx.repairs.request(&base, request, sequence, now_ms).await;
    Ok(hook_answer(record, &op.key, answer, now_ms))
}

/// Records what the agent said about a hook; whether it accepted the request.
fn hook_answer(record: &mut Record, key: &str, answer: RepairAnswer, now_ms: u64) -> bool {
    match answer {
        RepairAnswer::Record(run) => {
            let outcome = match run.state {
                RepairState::Running => {
                    if let Some(op) = record.ops.get_mut(key) {
                        op.state = OpState::Submitted;
                    }
                    return true;
                }
                RepairState::Succeeded => Ok(run
                    .stdout
                    .lines()
                    .any(|line| line.trim() == HOOK_NO_REBOOT_LINE)),
                // The agent stopped while the hook ran: the node presumably rebooted; waiting
                // for its new boot id tells.
                RepairState::Interrupted => Ok(false),
                RepairState::Failed | RepairState::TimedOut | RepairState::Refused => {
                    let status = match (run.exit_code, run.signal) {
                        (Some(code), _) => format!("exit code {code}"),
                        (None, Some(signal)) => format!("killed by signal {signal}"),
                        _ => run.state.as_str().to_owned(),
                    };
                    let detail = run
                        .error
                        .clone()
                        .or_else(|| {
                            let e = run.stderr.trim();
                            (!e.is_empty()).then(|| e.chars().take(300).collect())
                        })
                        .unwrap_or_default();
                    Err(format!("{} {status} {detail}", run.command)
                        .trim()
                        .to_owned())
                }
            };
            finish_op(record, key, outcome, now_ms);
            true
        }
        RepairAnswer::Refused {
            status,
            message,
            transient: false,
        } => {
            finish_op(
                record,
                key,
                Err(format!("the agent refused the hook ({status}): {message}")),
                now_ms,
            );
            false
        }
        // Asked again next round (the request is idempotent); the step's timeout bounds it.
        RepairAnswer::Refused { .. } | RepairAnswer::Unknown | RepairAnswer::Unreachable(_) => {
            false
        }
    }
}

fn finish_op(record: &mut Record, key: &str, outcome: Result<bool, String>, now_ms: u64) {
    if let Some(op) = record.ops.get_mut(key) {
        op.finished_ms = Some(now_ms);
        match outcome {
            Ok(no_reboot) => {
                op.state = OpState::Succeeded;
                op.no_reboot = no_reboot;
            }
            Err(why) => {
                op.state = OpState::Failed;
                op.error = Some(why);
            }
        }
    }
}

/// Follows the operations in flight of one campaign.
async fn follow(ctx: Context<'_>, record: &mut Record, now_ms: u64) -> Result<(), StoreError> {
    let in_flight: Vec<Op> = record.in_flight().cloned().collect();
    if in_flight.is_empty() {
        return Ok(());
    }
    // One bulk read of Ganeti's jobs serves the whole campaign (a group moves thousands of
    // instances; reading each job on its own would make the round slow).
    let jobs = if in_flight.iter().any(|op| op.kind.is_ganeti_job()) {
        match ctx.ganeti.jobs().await {
            Ok(jobs) => Some(jobs),
            Err(error) => {
                tracing::warn!(%error, "maintenance campaign: cannot list jobs; trying next round");
                return Ok(());
            }
        }
    } else {
        None
    };
    let statuses: BTreeMap<u64, JobStatus> = jobs
        .iter()
        .flatten()
        .map(|job| (job.id, job.status))
        .collect();
    // Jobs recorded but not known to be submitted: adopted by their reason, else submitted.
    let leftovers: Vec<&Op> = in_flight
        .iter()
        .filter(|op| op.state == OpState::Planned && op.kind.is_ganeti_job())
        .collect();
    if !leftovers.is_empty() {
        let id = record.id();
        let by_intent: BTreeMap<String, u64> = jobs
            .iter()
            .flatten()
            .filter_map(|job| {
                job.nodecare_reason()
                    .filter(|r| r.incident == id)
                    .map(|r| (r.intent, job.id))
            })
            .collect();
        for op in leftovers {
            if let Some(&job) = by_intent.get(&op.key) {
                if let Some(op) = record.ops.get_mut(&op.key) {
                    op.state = OpState::Submitted;
                    op.job_id = Some(job);
                }
                tracing::info!(campaign = %id, key = %op.key, job, "maintenance campaign: adopted job");
            } else {
                submit(ctx, record, &op.key, now_ms).await?;
            }
        }
    }
    for op in in_flight {
        match (&op.kind, op.state) {
            (
                OpKind::Hook {
                    request_id,
                    context,
                },
                OpState::Planned,
            ) => {
                send_hook(ctx, record, &op, request_id, context, now_ms).await?;
            }
            (OpKind::Hook { request_id, .. }, OpState::Submitted) => {
                if let Some(base) = base_url(ctx, &op.node) {
                    let answer = ctx.repairs.poll(&base, request_id).await;
                    hook_answer(record, &op.key, answer, now_ms);
                }
            }
            (_, OpState::Submitted) => {
                let Some(job_id) = record.ops.get(&op.key).and_then(|o| o.job_id) else {
                    continue;
                };
                match statuses.get(&job_id) {
                    Some(JobStatus::Success) => {
                        finish_op(record, &op.key, Ok(false), now_ms);
                        continue;
                    }
                    Some(status) if !status.is_final() => continue,
                    // Failed (its errors are read below), or no longer listed.
                    _ => {}
                }
                let outcome = match ctx.ganeti.job(job_id).await {
                    Ok(job) if job.status.is_final() => {
                        if job.status == JobStatus::Success {
                            Ok(false)
                        } else {
                            let errors = if job.errors.is_empty() {
                                job.status.as_str().to_owned()
                            } else {
                                job.errors.join("; ")
                            };
                            Err(format!("job {job_id} {}: {errors}", job.status.as_str()))
                        }
                    }
                    Ok(_) => continue,
                    Err(GanetiError::NotFound(_)) => {
                        Err(format!("job {job_id} vanished from Ganeti's queue"))
                    }
                    Err(error) => {
                        tracing::warn!(job = job_id, %error, "maintenance campaign: cannot read job status");
                        continue;
                    }
                };
                finish_op(record, &op.key, outcome, now_ms);
            }
            _ => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use nodecare_protocol::maintenance::{
        CampaignRequest, HOOK_CONTEXT_KIND, HookContext, NodeStep,
    };
    use nodecare_protocol::repair::RepairRecord;

    fn record_with_hook() -> Record {
        let mut r = Record::new(Uuid::from_u128(5), CampaignRequest::new("reboot"), "x", 1);
        r.ops.insert(
            "k".into(),
            Op {
                key: "k".into(),
                node: "n1".into(),
                step: NodeStep::Hook,
                kind: OpKind::Hook {
                    request_id: Uuid::from_u128(6).to_string(),
                    context: HookContext {
                        kind: HOOK_CONTEXT_KIND.into(),
                        campaign: Uuid::from_u128(5).to_string(),
                        node: "n1".into(),
                        hook: "reboot".into(),
                        group: 0,
                        groups_total: 1,
                        group_nodes: vec!["n1".into()],
                        reboot_required: None,
                        reason: None,
                    },
                },
                state: OpState::Planned,
                job_id: None,
                created_ms: 1,
                finished_ms: None,
                error: None,
                no_reboot: false,
            },
        );
        r
    }

    fn run(state: RepairState, exit_code: Option<i32>, stdout: &str) -> RepairAnswer {
        RepairAnswer::Record(Box::new(RepairRecord {
            incident_id: Uuid::from_u128(6).to_string(),
            node: "n1".into(),
            command: "reboot".into(),
            input_fingerprint: String::new(),
            state,
            exit_code,
            signal: None,
            started_at_ms: 1,
            finished_at_ms: None,
            duration_ms: None,
            stdout: stdout.into(),
            stderr: "disk full".into(),
            stdout_truncated: false,
            stderr_truncated: false,
            error: None,
        }))
    }

    #[test]
    fn hook_answers_map_to_operation_states() {
        type Want = (OpState, bool, Option<&'static str>);
        let cases: Vec<(&str, RepairAnswer, bool, Want)> = vec![
            (
                "running",
                run(RepairState::Running, None, ""),
                true,
                (OpState::Submitted, false, None),
            ),
            (
                "rebooting hook",
                run(RepairState::Succeeded, Some(0), "rebooting\n"),
                true,
                (OpState::Succeeded, false, None),
            ),
            (
                "no reboot",
                run(
                    RepairState::Succeeded,
                    Some(0),
                    "up to date\nnodecare:no-reboot\n",
                ),
                true,
                (OpState::Succeeded, true, None),
            ),
            (
                "interrupted by the reboot",
                run(RepairState::Interrupted, None, ""),
                true,
                (OpState::Succeeded, false, None),
            ),
            (
                "failed",
                run(RepairState::Failed, Some(3), ""),
                true,
                (OpState::Failed, false, Some("reboot exit code 3 disk full")),
            ),
            (
                "not whitelisted",
                RepairAnswer::Refused {
                    status: 403,
                    message: "not-whitelisted".into(),
                    transient: false,
                },
                false,
                (
                    OpState::Failed,
                    false,
                    Some("the agent refused the hook (403): not-whitelisted"),
                ),
            ),
            (
                "busy",
                RepairAnswer::Refused {
                    status: 503,
                    message: "busy".into(),
                    transient: true,
                },
                false,
                (OpState::Planned, false, None),
            ),
            (
                "unreachable",
                RepairAnswer::Unreachable("connection refused".into()),
                false,
                (OpState::Planned, false, None),
            ),
        ];
        for (name, answer, accepted, (state, no_reboot, error)) in cases {
            let mut r = record_with_hook();
            assert_eq!(hook_answer(&mut r, "k", answer, 9), accepted, "{name}");
            let op = &r.ops["k"];
            assert_eq!(op.state, state, "{name}");
            assert_eq!(op.no_reboot, no_reboot, "{name}");
            assert_eq!(op.error.as_deref(), error, "{name}");
        }
    }

    #[test]
    fn drained_problems_of_the_campaign_are_not_storage_problems_for_it() {
        let storage = vec![
            StorageProblem {
                nodes: ["n1".to_owned()].into(),
                what: "i1: secondary n1 is drained".into(),
                unknown: false,
            },
            StorageProblem {
                nodes: ["n1".to_owned(), "n2".to_owned()].into(),
                what: "i2: minor 0 on n2 SyncTarget 40%".into(),
                unknown: false,
            },
            StorageProblem {
                nodes: ["n3".to_owned()].into(),
                what: "n3 (unreachable) is drained".into(),
                unknown: true,
            },
        ];
        let w = world(&[], &[], BTreeMap::new(), &storage, "n0", 5);
        let kept: Vec<&str> = w.storage.iter().map(|(_, what)| what.as_str()).collect();
        assert_eq!(
            kept,
            vec![
                "i2: minor 0 on n2 SyncTarget 40%",
                "n3 (unreachable) is drained"
            ]
        );
    }
}
