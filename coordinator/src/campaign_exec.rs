//! Rolling maintenance campaigns (IO): the executor of [`nodecare_core::campaign`].
//!
//! Each campaign operation is an entry of the executor's ledger ([`nodecare_exec`]), held by the
//! campaign (`Holder::Campaign`) under its key, so its reason trail (`gnt:daemon:maintd`, the
//! campaign id as the incident and the operation's key as the intent) is the trail of its job.
//! The executor submits, adopts (after a crash, by the reason trail; not found, submitted
//! again) and follows the Ganeti jobs; the state machine reads the entries' states
//! ([`Record::set_ops`]). Each round, for every campaign not finished (or with operations in
//! flight):
//!
//! 1. [`prepare`] (before the gate) follows the campaign's hooks; a campaign due for its next
//!    group is planned again against the cluster as it is (the roll planner) and its next
//!    group proposed ([`nodecare_core::duty::maintenance`]).
//! 2. [`execute`] (after the gate) starts an admitted group, shows what blocks a refused one,
//!    advances the state machine, records the operations it plans in the ledger (durable
//!    before anything is submitted) and has the executor submit them; hooks are sent here.
//!
//! The hook is a signed repair request ([`crate::repair`]) whose id is drawn once and stored
//! with the operation: after a crash the same request is sent again and the agent answers with
//! the first run's record, so a hook never runs twice.

use std::collections::{BTreeMap, BTreeSet};

use futures_util::StreamExt as _;

use nodecare_protocol::maintenance::{CampaignRequest, HOOK_NO_REBOOT_LINE};
use nodecare_protocol::repair::{RepairRequest, RepairState};
use uuid::Uuid;

use crate::repair::{RepairAnswer, RepairClient};
use crate::scrape::AgentUrls;
use crate::store::{Store, StoreError};
use nodecare_core::campaign::{
    self, AgentNow, CampaignOp, InstanceNow, NodeNow, OpKind, OpState, Ops, PlannedMove, Record,
    World,
};
use nodecare_core::gate::{Decision, Holder, Proposal, StorageProblem, View};
use nodecare_exec::Executor;
use nodecare_exec::ledger::State;
use nodecare_ganeti::{Ganeti, Instance, Node};

/// What the executor needs.
#[derive(Debug, Clone, Copy)]
pub struct Context<'a> {
    /// Ganeti.
    pub ganeti: &'a dyn Ganeti,
    /// The store.
    pub store: &'a Store,
    /// The executor (over the store's ledger).
    pub executor: &'a Executor,
    /// Signed requests to the agents.
    pub repairs: &'a RepairClient,
    /// Where the agents are.
    pub agent_urls: &'a AgentUrls,
    /// The nodes as read this round.
    pub nodes: &'a [Node],
    /// The coordinator's failure domains: every campaign is planned with them.
    pub domains: &'a nodecare_core::gate::DomainSource,
}

/// The campaigns' part of one round.
#[derive(Debug, Clone, Default)]
pub struct CampaignRound {
    /// The proposals of campaigns due for their next group.
    pub proposals: Vec<Proposal>,
    /// The planned moves of those groups, per campaign.
    pub moves: BTreeMap<Uuid, BTreeMap<String, Vec<PlannedMove>>>,
    /// The campaigns with something to do, with their operations, as [`prepare`] saved them:
    /// [`execute`] goes on from them.
    pub records: Vec<Record>,
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
                        memory_free: n.memory_free,
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
                        local: i.disk_template.is_node_local(),
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
            .filter(|p| !p.drained)
            .map(|p| (p.nodes.clone(), p.what.clone()))
            .collect(),
        held: BTreeMap::new(),
    }
}

/// The nodes held as the round starts, with who: every hold of the executor's ledger (a
/// finished holder's too: conservative) and the admission grants in force, for
/// [`World::held`].
pub fn held(
    executor: &Executor,
    grants: &[(String, Holder)],
) -> Result<BTreeMap<String, std::collections::BTreeSet<Holder>>, nodecare_exec::ledger::LedgerError>
{
    let ledger = executor.in_force(|_| true)?;
    let mut held: BTreeMap<String, std::collections::BTreeSet<Holder>> = BTreeMap::new();
    for (node, holder) in ledger
        .nodes
        .iter()
        .map(|(n, h)| (n.clone(), h.clone()))
        .chain(ledger.touching())
        .chain(grants.iter().cloned())
    {
        held.entry(node).or_default().insert(holder);
    }
    Ok(held)
}

/// What the campaigns' duty keeps from one round to the next: each campaign's operations as
/// the last round left them (the next round starts from them and takes from the ledger only what
/// changed, [`Record::set_ops`], instead of decoding every operation of a campaign of thousands
/// again), and each campaign's last plan with what it was planned from (planned again only once
/// that changed).
#[derive(Debug, Default)]
pub struct Known {
    ops: BTreeMap<Uuid, Ops>,
    plans: BTreeMap<Uuid, Planned>,
}

/// A plan ([`plan`]) and the cluster and request it was planned from.
#[derive(Debug)]
struct Planned {
    cluster: nodecare_roll::Cluster,
    request: CampaignRequest,
    outcome: PlanOutcome,
}

/// The groups (node names, in order), the planned moves of every node and the planner's
/// warnings; or why the campaign cannot be planned.
type PlanOutcome = Result<
    (
        Vec<Vec<String>>,
        BTreeMap<String, Vec<PlannedMove>>,
        Vec<String>,
    ),
    String,
>;

impl Known {
    /// Keeps `record`'s operations for the next round (shared, not copied).
    pub fn keep(&mut self, record: &Record) {
        self.ops
            .insert(record.id(), std::sync::Arc::clone(&record.ops));
    }

    /// Takes what was kept of campaign `id`'s operations (nothing: none).
    fn take_ops(&mut self, id: Uuid) -> Ops {
        self.ops.remove(&id).unwrap_or_default()
    }

    /// [`plan`] of `record` on `cluster`, the last one again while neither the cluster nor the
    /// campaign's request changed (the coordinator's failure `domains` do not change while it
    /// runs).
    fn plan(
        &mut self,
        cluster: &nodecare_roll::Cluster,
        record: &Record,
        domains: &nodecare_core::gate::DomainSource,
    ) -> PlanOutcome {
        let request = &record.campaign.request;
        if let Some(planned) = self.plans.get(&record.id())
            && planned.request == *request
            && planned.cluster == *cluster
        {
            return planned.outcome.clone();
        }
        let outcome = plan(cluster, record, domains);
        self.plans.insert(
            record.id(),
            Planned {
                cluster: cluster.clone(),
                request: request.clone(),
                outcome: outcome.clone(),
            },
        );
        outcome
    }
}

/// Every stored campaign with its operations from the ledger (each campaign's own entries, read
/// by holder: the ledger's other duties and other campaigns are not read), starting from those
/// `known` kept (which it empties).
fn with_ops(
    store: &Store,
    executor: &Executor,
    known: &mut Known,
) -> Result<Vec<Record>, StoreError> {
    let mut records = store.campaigns()?;
    for record in &mut records {
        record.ops = known.take_ops(record.id());
        let entries = executor.ledger().shared_of_holder(&record.holder())?;
        record.set_ops(&entries);
    }
    known.ops.clear();
    Ok(records)
}

/// Whether a campaign still has something to do (not finished, operations in flight, or a
/// failed node's failure tag to ask for again).
fn is_active(record: &Record) -> bool {
    !record.state().is_final() || record.in_flight().next().is_some() || record.owes_failure_tags()
}

/// The campaigns that still have something to do, each with its operations. A round reads them
/// once ([`follow`]) and hands them from step to step ([`prepare`], [`execute`]): it holds the
/// incident lock, under which the API changes campaigns too, and each step saves what it
/// changes, so the store and the records handed on agree.
pub fn active(ctx: Context<'_>, known: &mut Known) -> Result<Vec<Record>, StoreError> {
    Ok(with_ops(ctx.store, ctx.executor, known)?
        .into_iter()
        .filter(is_active)
        .collect())
}

/// Every stored campaign with its operations, for what they hold in force: those of `known`
/// (this round's, from [`follow`], with their operations) as they are, the others (finished,
/// nothing in flight) with their operations read from the ledger. One read of the campaigns;
/// [`nodecare_core::campaign::held`] then says what they hold.
pub fn stored_with_ops(
    store: &Store,
    executor: &Executor,
    known: &[Record],
) -> Result<Vec<Record>, StoreError> {
    store
        .campaigns()?
        .into_iter()
        .map(
            |mut record| match known.iter().find(|k| k.id() == record.id()) {
                Some(known) => Ok(known.clone()),
                None => {
                    record.set_ops(&executor.ledger().shared_of_holder(&record.holder())?);
                    Ok(record)
                }
            },
        )
        .collect()
}

/// The nodes every running campaign is rebooting now ([`Record::rebooting_nodes`]), whose
/// return the watches look for at a short pace ([`crate::watch::Watches::set_returning`]).
pub fn rebooting(store: &Store) -> Result<std::collections::BTreeSet<String>, StoreError> {
    Ok(store
        .campaigns()?
        .iter()
        .flat_map(|r| r.rebooting_nodes().map(str::to_owned).collect::<Vec<_>>())
        .collect())
}

/// Every campaign's planned disruptions for the grace ([`Record::planned_disruptions`]): nodes
/// rebooting now (their hook runs or they are coming back) from `now_ms`, so their failure
/// domain stays in grace (no incident, no storm) throughout the reboot; nodes whose reboot
/// ended from that moment, for the grace after it (finished campaigns too).
pub fn planned_disruptions(
    store: &Store,
    now_ms: u64,
) -> Result<Vec<nodecare_core::gate::Planned>, StoreError> {
    Ok(store
        .campaigns()?
        .iter()
        .flat_map(|r| {
            let holder = format!("maintenance campaign {}", r.id());
            r.planned_disruptions(now_ms)
                .into_iter()
                .map(move |(node, from_ms)| nodecare_core::gate::Planned {
                    node,
                    from_ms,
                    holder: holder.clone(),
                })
        })
        .collect())
}

/// What a round plans campaigns on: the gate's view, Ganeti's instances and node groups, and
/// the master's name.
#[derive(Debug, Clone, Copy)]
pub struct Planning<'a> {
    /// The gate's view of the cluster.
    pub view: &'a View,
    /// Ganeti's instances.
    pub instances: &'a [Instance],
    /// Ganeti's node groups.
    pub groups: &'a [nodecare_ganeti::Group],
    /// The master node's name.
    pub master: &'a str,
}

/// Step 1: follows the operations, re-plans campaigns due for a group and proposes it.
pub async fn prepare(
    ctx: Context<'_>,
    records: Vec<Record>,
    world: &World,
    planning: Planning<'_>,
    known: &mut Known,
) -> Result<CampaignRound, StoreError> {
    let Planning {
        view,
        instances,
        groups,
        master,
    } = planning;
    let mut round = CampaignRound::default();
    let records: Vec<Record> = records.into_iter().filter(is_active).collect();
    known
        .plans
        .retain(|id, _| records.iter().any(|r| r.id() == *id && r.needs_group()));
    if records.is_empty() {
        return Ok(round);
    }
    let mut cluster = None;
    for mut record in records {
        let before = record.clone();
        if record.needs_group() {
            let outcome = if record.has_grouped_all(ctx.nodes.iter().map(|n| n.name.as_str())) {
                // Every node of the cluster has been in a group: a plan leaves nothing for a
                // next one ([`Record::set_plan`] leaves out the nodes seen), and is not made.
                Ok((
                    Vec::new(),
                    BTreeMap::new(),
                    record.campaign.warnings.clone(),
                ))
            } else {
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
                // Nodes whose undrain job runs are planned on as undrained: the group comes
                // after those jobs.
                let releasing = record.releasing();
                let released;
                let nodes = if releasing.is_empty() {
                    ctx.nodes
                } else {
                    released = as_released(ctx.nodes, &releasing);
                    &released[..]
                };
                let fresh;
                let cluster = if back.is_empty() && releasing.is_empty() {
                    &*cluster.get_or_insert_with(|| {
                        campaign::roll_cluster(ctx.nodes, instances, groups, master)
                    })
                } else {
                    fresh = campaign::roll_cluster(nodes, instances, groups, master);
                    &fresh
                };
                known.plan(cluster, &record, ctx.domains)
            };
            match outcome {
                Ok((groups, moves, warnings)) => {
                    record.set_plan(groups, warnings, world);
                    record.set_blocked(None, world.now_ms);
                    if record.complete_if_done(world.now_ms) {
                        tracing::info!(campaign = %record.campaign.id, "maintenance campaign completed");
                    } else if let Some(proposal) =
                        nodecare_core::duty::maintenance::propose(&record, view, world, &moves)
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
        round.records.push(record);
    }
    Ok(round)
}

/// `nodes` with the `releasing` ones undrained (their undrain jobs run).
fn as_released(nodes: &[Node], releasing: &BTreeSet<String>) -> Vec<Node> {
    nodes
        .iter()
        .map(|n| {
            let mut n = n.clone();
            if releasing.contains(&n.name) {
                n.drained = false;
            }
            n
        })
        .collect()
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
fn plan(
    cluster: &nodecare_roll::Cluster,
    record: &Record,
    domains: &nodecare_core::gate::DomainSource,
) -> PlanOutcome {
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

/// What step 2 did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Executed {
    /// Jobs (and hooks) submitted.
    pub submitted: usize,
    /// A campaign is due for its next group, or one more of its nodes finished while it was:
    /// the next round has something to plan (the next group, or the campaign's completion),
    /// so it should start at once rather than at the next interval. Each campaign says so at
    /// most once per node and once per group, so rounds never follow each other for long.
    pub again: bool,
}

/// Whether a campaign's advance left the next round something to plan: due for its next group
/// now and not before, or due and one more node finished (the last migrations back ended).
pub fn plans_again(due_before: bool, finished_before: usize, after: &Record) -> bool {
    after.needs_group() && (!due_before || after.finished_nodes() > finished_before)
}

/// Step 2: starts admitted groups, advances every campaign and submits what it plans; returns
/// how many jobs (and hooks) were submitted and whether the next round should start at once.
/// Each campaign's operations are kept in `known` for the next round.
pub async fn execute(
    ctx: Context<'_>,
    decision: &Decision,
    round: CampaignRound,
    world: &World,
    known: &mut Known,
) -> Result<Executed, StoreError> {
    let mut submitted = 0;
    let mut again = false;
    for mut record in round.records.into_iter().filter(is_active) {
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
                    blocked @ (nodecare_core::gate::BlockedBy::Cap { .. }
                    | nodecare_core::gate::BlockedBy::Capacity { .. }),
                ) if record.shrinks_after_refusal(matches!(
                    blocked,
                    nodecare_core::gate::BlockedBy::Capacity { .. }
                )) =>
                {
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
        let (jobs, more, record) = go_on(ctx, record, &before, world).await?;
        known.keep(&record);
        submitted += jobs;
        again |= more;
    }
    Ok(Executed { submitted, again })
}

/// Moves one campaign on with what this round shows (`before`: the record as the round found
/// it): its nodes' steps advance, the record is saved, what it plans is recorded and submitted
/// (hooks sent). Returns the jobs (and hooks) submitted, [`plans_again`] and the record as
/// saved, with its operations.
async fn go_on(
    ctx: Context<'_>,
    mut record: Record,
    before: &Record,
    world: &World,
) -> Result<(usize, bool, Record), StoreError> {
    let (due_before, finished_before) = (record.needs_group(), record.finished_nodes());
    let planned = record.advance(world);
    let again = plans_again(due_before, finished_before, &record);
    if let Some(failure) = &record.campaign.failure
        && before.campaign.failure.is_none()
    {
        tracing::error!(campaign = %record.id(), node = %failure.node, step = %failure.step, why = %failure.why, "maintenance campaign failed");
    }
    if record == *before {
        return Ok((0, again, record));
    }
    // The record and the operations it planned in one durable write, before anything is
    // submitted.
    if planned.is_empty() {
        ctx.store.save_campaign(&record)?;
        return Ok((0, again, record));
    }
    let holder = record.holder();
    ctx.store
        .save_campaign_recording(&record, &record.entries(&planned))?;
    let mut submitted = ctx
        .executor
        .submit(ctx.ganeti, Some(&holder), world.now_ms)
        .await?
        .len();
    sync(ctx, &mut record)?;
    let hooks: Vec<CampaignOp> = planned
        .iter()
        .filter_map(|key| record.ops.get(key))
        .filter(|op| matches!(op.kind, OpKind::Hook { .. }) && op.state == OpState::Planned)
        .filter(|op| record.hook_may_be_sent(op, world).is_ok())
        .cloned()
        .collect();
    submitted += send_hooks(ctx, &mut record, &hooks, world.now_ms).await?;
    stop_hooks(ctx, &mut record, world.now_ms).await?;
    ctx.store.save_campaign(&record)?;
    Ok((submitted, again, record))
}

/// Step 1, before the gate: follows every campaign's hooks in flight and moves every campaign on
/// with what this round shows, so that a group whose last node ends in this round frees its
/// nodes (and its budget) for the next group's proposal in the same round.
/// Returns the jobs (and hooks) submitted and the campaigns as it left them, with their
/// operations, for the round's next steps. (A campaign due for its next group after this is
/// planned by this round's proposal: no round to wake.)
pub async fn follow(
    ctx: Context<'_>,
    world: &World,
    known: &mut Known,
) -> Result<(usize, Vec<Record>), StoreError> {
    let mut submitted = 0;
    let mut records = Vec::new();
    for mut record in active(ctx, known)? {
        let before = record.clone();
        follow_hooks(ctx, &mut record, world).await?;
        let (jobs, _, record) = go_on(ctx, record, &before, world).await?;
        submitted += jobs;
        records.push(record);
    }
    Ok((submitted, records))
}

/// The campaign's operations as the ledger has them now.
fn sync(ctx: Context<'_>, record: &mut Record) -> Result<(), StoreError> {
    let entries = ctx.executor.ledger().shared_of_holder(&record.holder())?;
    record.set_ops(&entries);
    Ok(())
}

fn base_url(ctx: Context<'_>, node: &str) -> Option<String> {
    ctx.nodes
        .iter()
        .find(|n| n.name == node)
        .map(|n| ctx.agent_urls.base(n))
}

/// Most hooks (repair requests or polls) in flight to agents at once.
const HOOK_CONCURRENCY: usize = 128;

/// How long a hook request sent at `now_ms` stays valid: the client's `ttl_ms`, but never past
/// the node's hook step `deadline_ms` less the clock skew an agent allows past a request's
/// expiry. An agent that reads the request late (stopped, its socket holding what was sent
/// meanwhile) refuses it once the node's step timed out, so a hook the campaign gave up on
/// never runs on a node returned to service. `None`: too late to send one.
fn hook_ttl_ms(now_ms: u64, deadline_ms: Option<u64>, ttl_ms: u64) -> Option<u64> {
    let Some(deadline) = deadline_ms else {
        return Some(ttl_ms);
    };
    let left = deadline
        .saturating_sub(nodecare_protocol::sign::DEFAULT_MAX_CLOCK_SKEW_MS)
        .saturating_sub(now_ms);
    (left > 0).then_some(ttl_ms.min(left))
}

/// The hook step deadline of `node` in `record` (its latest group).
fn hook_deadline_ms(record: &Record, node: &str) -> Option<u64> {
    record
        .campaign
        .groups
        .iter()
        .rev()
        .flat_map(|g| g.nodes.iter())
        .find(|n| n.node == node)
        .and_then(|n| n.step_deadline_ms)
}

/// Sends (or sends again: the agent runs it once) the signed repair requests of the hooks
/// `ops`, at most [`HOOK_CONCURRENCY`] at once, their sequence numbers reserved in one write
/// and their answers settled in one; returns how many the agents took.
async fn send_hooks(
    ctx: Context<'_>,
    record: &mut Record,
    ops: &[CampaignOp],
    now_ms: u64,
) -> Result<usize, StoreError> {
    let mut outcomes: Vec<(String, HookOutcome)> = Vec::new();
    let mut requests: Vec<(String, String, RepairRequest, u64)> = Vec::new();
    for op in ops {
        let OpKind::Hook {
            request_id,
            context,
        } = &op.kind
        else {
            continue;
        };
        let Some(base) = base_url(ctx, &op.node) else {
            continue;
        };
        let Some(ttl_ms) = hook_ttl_ms(
            now_ms,
            hook_deadline_ms(record, &op.node),
            ctx.repairs.ttl_ms(),
        ) else {
            continue;
        };
        let input = match serde_json::to_value(context) {
            Ok(input) => input,
            Err(error) => {
                outcomes.push((
                    op.key.clone(),
                    HookOutcome::Failed(format!("hook context: {error}")),
                ));
                continue;
            }
        };
        let request = RepairRequest {
            node: op.node.clone(),
            incident_id: request_id.clone(),
            command: record.campaign.request.hook.clone(),
            input,
            nonce: Uuid::new_v4().simple().to_string(),
        };
        requests.push((op.key.clone(), base, request, ttl_ms));
    }
    // Until when each agent may take what goes out now, kept durably before it goes: a hook
    // whose answer is lost is canceled (its node released) only once its agent can no longer
    // run it ([`campaign::HookStop::may_still_run`]).
    for (key, _, _, ttl_ms) in &requests {
        record.note_hook_sent(
            key,
            now_ms
                .saturating_add(*ttl_ms)
                .saturating_add(nodecare_protocol::sign::DEFAULT_MAX_CLOCK_SKEW_MS),
        );
    }
    if !requests.is_empty() {
        ctx.store.save_campaign(record)?;
    }
    let mut accepted = 0;
    if let Ok(count) = u64::try_from(requests.len())
        && count > 0
    {
        let first = ctx.store.next_counters("repair-sequence", count, now_ms)?;
        let answers: Vec<(String, HookOutcome)> =
            futures_util::stream::iter(requests.into_iter().zip(first..))
                .map(|((key, base, request, ttl_ms), sequence)| async move {
                    let answer = ctx
                        .repairs
                        .request_for(&base, request, sequence, now_ms, ttl_ms)
                        .await;
                    (key, hook_outcome(answer))
                })
                .buffer_unordered(HOOK_CONCURRENCY)
                .collect()
                .await;
        accepted = answers.iter().filter(|(_, o)| o.accepted()).count();
        outcomes.extend(answers);
    }
    settle_hooks(ctx, record, outcomes, now_ms)?;
    Ok(accepted)
}

/// Stops the hooks recorded but never to be sent ([`Record::hooks_to_stop`]): each agent is
/// asked whether it has the request first. One it has is followed as sent; one it does not
/// know is canceled in the ledger, with why; when the agent does not answer, the hook is
/// canceled all the same (never sent from now on), but for a node that still waits at its hook
/// (an abort), which waits for the agent's word. Neither happens while a request sent for the
/// hook may still be taken ([`campaign::HookStop::may_still_run`]): the entry stays recorded
/// (its node held, [`Record::holds`]) until then.
async fn stop_hooks(ctx: Context<'_>, record: &mut Record, now_ms: u64) -> Result<(), StoreError> {
    let stops = record.hooks_to_stop();
    if stops.is_empty() {
        return Ok(());
    }
    let asks: Vec<(campaign::HookStop, Option<(String, String)>)> = stops
        .into_iter()
        .map(|stop| {
            let ask = record.ops.get(&stop.key).and_then(|op| {
                let OpKind::Hook { request_id, .. } = &op.kind else {
                    return None;
                };
                Some((base_url(ctx, &op.node)?, request_id.clone()))
            });
            (stop, ask)
        })
        .collect();
    let answers: Vec<(campaign::HookStop, RepairAnswer)> = futures_util::stream::iter(asks)
        .map(|(stop, ask)| async move {
            let answer = match ask {
                Some((base, request_id)) => ctx.repairs.poll(&base, &request_id).await,
                None => RepairAnswer::Unreachable("no address for its agent".into()),
            };
            (stop, answer)
        })
        .buffer_unordered(HOOK_CONCURRENCY)
        .collect()
        .await;
    let holder = record.holder();
    let mut outcomes = Vec::new();
    let mut canceled = Vec::new();
    for (stop, answer) in answers {
        let why = match answer {
            // It has it: followed as sent.
            RepairAnswer::Record(_) => {
                outcomes.push((stop.key, hook_outcome(answer)));
                continue;
            }
            // A request sent for it may still be taken (waiting for the node's repair lock,
            // or unread by a stopped agent): it stays recorded, its node held, and is asked
            // about again next round.
            _ if stop.may_still_run(now_ms) => continue,
            RepairAnswer::Unknown => stop.why,
            RepairAnswer::Refused { .. } | RepairAnswer::Unreachable(_) if stop.confirm => {
                continue;
            }
            RepairAnswer::Refused { .. } | RepairAnswer::Unreachable(_) => {
                format!("{}; its agent did not say whether it had it", stop.why)
            }
        };
        let Some(mut entry) = ctx.executor.ledger().entry(&holder, &stop.key)? else {
            continue;
        };
        if entry.state != State::Recorded {
            continue;
        }
        tracing::info!(campaign = %record.id(), key = %stop.key, %why, "maintenance campaign: hook canceled");
        entry.state = State::Canceled { why };
        entry.finished_ms = Some(now_ms);
        canceled.push(entry);
    }
    ctx.executor.ledger().mark_all(&canceled)?;
    for entry in &canceled {
        if let Some(op) = CampaignOp::from_entry(entry) {
            record.set_op(op);
        }
    }
    settle_hooks(ctx, record, outcomes, now_ms)
}

/// What the agent said about a hook.
#[derive(Debug, Clone, PartialEq, Eq)]
enum HookOutcome {
    /// It runs.
    Running,
    /// It ended well (or the agent stopped while it ran: the node presumably rebooted, and
    /// waiting for its new boot id tells); whether it said it did not reboot the node.
    Done {
        /// It said it did not reboot the node.
        no_reboot: bool,
    },
    /// It ran and failed.
    Failed(String),
    /// The agent refused it for good (it never ran).
    Refused(String),
    /// No answer that settles it: asked again next round (the request is idempotent); the
    /// step's timeout bounds it.
    Later,
}

impl HookOutcome {
    /// Whether the agent took the request.
    const fn accepted(&self) -> bool {
        matches!(self, Self::Running | Self::Done { .. } | Self::Failed(_))
    }
}

/// What the agent's `answer` says about a hook.
fn hook_outcome(answer: RepairAnswer) -> HookOutcome {
    match answer {
        RepairAnswer::Record(run) => match run.state {
            RepairState::Running => HookOutcome::Running,
            RepairState::Succeeded => HookOutcome::Done {
                no_reboot: run
                    .stdout
                    .lines()
                    .any(|line| line.trim() == HOOK_NO_REBOOT_LINE),
            },
            RepairState::Interrupted => HookOutcome::Done { no_reboot: false },
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
                HookOutcome::Failed(
                    format!("{} {status} {detail}", run.command)
                        .trim()
                        .to_owned(),
                )
            }
        },
        RepairAnswer::Refused {
            status,
            message,
            transient: false,
        } => HookOutcome::Refused(format!("the agent refused the hook ({status}): {message}")),
        RepairAnswer::Refused { .. } | RepairAnswer::Unknown | RepairAnswer::Unreachable(_) => {
            HookOutcome::Later
        }
    }
}

/// The ledger state of the hook's entry after `outcome` (`None`: unchanged).
fn hook_state(outcome: &HookOutcome) -> Option<State> {
    match outcome {
        HookOutcome::Running => Some(State::Submitted),
        HookOutcome::Done { .. } => Some(State::Succeeded),
        HookOutcome::Failed(why) | HookOutcome::Refused(why) => {
            Some(State::Failed { why: why.clone() })
        }
        HookOutcome::Later => None,
    }
}

/// Marks the hooks' ledger entries by what the agents said (in one write), and the
/// campaign's view with them.
fn settle_hooks(
    ctx: Context<'_>,
    record: &mut Record,
    outcomes: Vec<(String, HookOutcome)>,
    now_ms: u64,
) -> Result<(), StoreError> {
    let holder = record.holder();
    let mut marked = Vec::new();
    for (key, outcome) in outcomes {
        let Some(state) = hook_state(&outcome) else {
            continue;
        };
        let Some(mut entry) = ctx.executor.ledger().entry(&holder, &key)? else {
            continue;
        };
        if entry.state == state {
            continue;
        }
        if !state.is_unfinished() {
            entry.finished_ms = Some(now_ms);
        }
        entry.state = state;
        if let HookOutcome::Done { no_reboot: true } = outcome {
            record.hooks_no_reboot.insert(key);
        }
        marked.push(entry);
    }
    ctx.executor.ledger().mark_all(&marked)?;
    // The campaign's view of these operations (the others are as they were).
    for entry in &marked {
        if let Some(mut op) = CampaignOp::from_entry(entry) {
            op.no_reboot = record.hooks_no_reboot.contains(&entry.key);
            record.set_op(op);
        }
    }
    Ok(())
}

/// Follows the hooks in flight of one campaign (its jobs are the executor's): a hook recorded
/// but not known to be sent is sent (again: the agent runs it once) only while it may be
/// ([`Record::hook_may_be_sent`], with what this round shows), stopped when it must never be
/// ([`stop_hooks`]), and a running one is asked for its outcome.
async fn follow_hooks(
    ctx: Context<'_>,
    record: &mut Record,
    world: &World,
) -> Result<(), StoreError> {
    let now_ms = world.now_ms;
    stop_hooks(ctx, record, now_ms).await?;
    let in_flight: Vec<CampaignOp> = record
        .in_flight()
        .filter(|op| matches!(op.kind, OpKind::Hook { .. }))
        .cloned()
        .collect();
    let (planned, sent): (Vec<CampaignOp>, Vec<CampaignOp>) = in_flight
        .into_iter()
        .partition(|op| op.state == OpState::Planned);
    let mut sendable = Vec::new();
    for op in planned {
        match record.hook_may_be_sent(&op, world) {
            Ok(()) => sendable.push(op),
            Err(why) => {
                tracing::debug!(campaign = %record.id(), node = %op.node, %why, "maintenance campaign: hook not sent");
            }
        }
    }
    send_hooks(ctx, record, &sendable, now_ms).await?;
    let polls: Vec<(String, String, String)> = sent
        .iter()
        .filter(|op| op.state == OpState::Submitted)
        .filter_map(|op| {
            let OpKind::Hook { request_id, .. } = &op.kind else {
                return None;
            };
            let base = base_url(ctx, &op.node)?;
            Some((op.key.clone(), base, request_id.clone()))
        })
        .collect();
    let outcomes: Vec<(String, HookOutcome)> = futures_util::stream::iter(polls)
        .map(|(key, base, request_id)| async move {
            let answer = ctx.repairs.poll(&base, &request_id).await;
            (key, hook_outcome(answer))
        })
        .buffer_unordered(HOOK_CONCURRENCY)
        .collect()
        .await;
    settle_hooks(ctx, record, outcomes, now_ms)
}

#[cfg(test)]
mod tests {
    use super::*;
    use nodecare_core::gate::StorageProblem;
    use nodecare_protocol::repair::RepairRecord;

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
    fn a_hook_request_expires_before_its_node_s_hook_step_times_out() {
        let skew = nodecare_protocol::sign::DEFAULT_MAX_CLOCK_SKEW_MS;
        // No deadline: the client's ttl.
        assert_eq!(hook_ttl_ms(1_000, None, 300_000), Some(300_000));
        // The step times out in 20 s: valid until 2 s (the agents' skew) before it.
        assert_eq!(
            hook_ttl_ms(100_000, Some(120_000), 300_000),
            Some(20_000 - skew)
        );
        // A deadline far away: the client's ttl.
        assert_eq!(hook_ttl_ms(0, Some(10_000_000), 300_000), Some(300_000));
        // Within the skew of the deadline, or past it: not sent.
        assert_eq!(hook_ttl_ms(118_000, Some(120_000), 300_000), None);
        assert_eq!(hook_ttl_ms(130_000, Some(120_000), 300_000), None);
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
            let outcome = hook_outcome(answer);
            assert_eq!(outcome.accepted(), accepted, "{name}");
            assert_eq!(
                matches!(outcome, HookOutcome::Done { no_reboot: true }),
                no_reboot,
                "{name}"
            );
            let marked = hook_state(&outcome);
            let (got, why) = match &marked {
                None => (OpState::Planned, None),
                Some(State::Submitted) => (OpState::Submitted, None),
                Some(State::Succeeded) => (OpState::Succeeded, None),
                Some(other) => (OpState::Failed, other.why()),
            };
            assert_eq!(got, state, "{name}");
            assert_eq!(why, error, "{name}");
        }
    }

    /// A campaign's plan is made again only once the cluster (or its request) changed: asked
    /// with the same, the last one is given (here, a stand-in the test put in its place).
    #[test]
    fn a_plan_is_made_again_only_once_what_it_is_planned_from_changed() {
        let nodes: Vec<Node> = ["n0", "n1", "n2", "n3"]
            .map(nodecare_core::plan::tests_support::node)
            .to_vec();
        let cluster = campaign::roll_cluster(&nodes, &[], &[], "n0");
        let record = Record::new(Uuid::from_u128(1), CampaignRequest::new("reboot"), "t", 1);
        let domains = nodecare_core::gate::DomainSource::default();
        let mut known = Known::default();
        let first = known.plan(&cluster, &record, &domains);
        assert_eq!(first, plan(&cluster, &record, &domains));
        assert!(first.is_ok());
        let stand_in: PlanOutcome = Err("the last plan".into());
        if let Some(planned) = known.plans.get_mut(&record.id()) {
            planned.outcome = stand_in.clone();
        }
        assert_eq!(known.plan(&cluster, &record, &domains), stand_in);

        // Another node: planned again.
        let fewer = campaign::roll_cluster(&nodes[..3], &[], &[], "n0");
        let again = known.plan(&fewer, &record, &domains);
        assert_eq!(again, plan(&fewer, &record, &domains));
        assert_ne!(again, stand_in);

        // Another request: planned again.
        if let Some(planned) = known.plans.get_mut(&record.id()) {
            planned.outcome = stand_in.clone();
        }
        let mut other = record.clone();
        other.campaign.request.skip_non_redundant = true;
        assert_eq!(
            known.plan(&fewer, &other, &domains),
            plan(&fewer, &other, &domains)
        );
    }

    #[test]
    fn drained_problems_of_the_campaign_are_not_storage_problems_for_it() {
        let storage = vec![
            StorageProblem {
                nodes: ["n1".to_owned()].into(),
                what: "i1: secondary n1 is drained".into(),
                unknown: false,
                drained: true,
            },
            StorageProblem {
                nodes: ["n1".to_owned(), "n2".to_owned()].into(),
                what: "i2: minor 0 on n2 SyncTarget 40%".into(),
                unknown: false,
                drained: false,
            },
            StorageProblem {
                nodes: ["n3".to_owned()].into(),
                what: "n3 (unreachable) is drained".into(),
                unknown: true,
                drained: false,
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
