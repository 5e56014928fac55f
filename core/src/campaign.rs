//! Rolling maintenance campaigns: the state machine. Pure, no IO.
//!
//! A campaign ([`Record`]) works through reboot groups one at a time. The executor
//! (the coordinator's `campaign_exec`) re-plans the groups left before each group against the
//! cluster as it is ([`Record::set_plan`]), asks the gate for the next one (the maintenance duty,
//! [`crate::duty::maintenance`]), starts it when admitted ([`Record::start_group`]), and each
//! round calls [`Record::advance`] with what it sees ([`World`]); `advance` moves every node of
//! the group through its steps and plans the operations ([`CampaignOp`]), each recorded as an
//! entry of the ledger ([`crate::ledger`]) held by the campaign; the state machine reads their
//! states back from the entries ([`Record::set_ops`]):
//!
//! drain → move primaries → hook → wait healthy → undrain → migrate the original primaries
//! back → done.
//!
//! - **Drain**: a job sets the node drained.
//! - **Move primaries**: each planned move: DRBD instances migrate to their secondary; shared
//!   storage instances migrate to the node the plan chose; with `full_evacuation` the secondaries
//!   on the node are replaced by the planned ones.
//! - **Hook**: the campaign's hook runs on the node through its agent (a signed repair request
//!   with the [`HookContext`] on stdin); the boot id the agent reported before is kept. It is
//!   planned, and sent ([`Record::hook_may_be_sent`]), only while no running instance is on the
//!   node (an instance started there after the group was planned moves first, or the node
//!   waits) and once the undrains the group was admitted with have succeeded. A hook recorded
//!   but not delivered whose node left the step, failed, or whose campaign ended or aborts is
//!   never sent ([`Record::hooks_to_stop`]).
//! - **Wait healthy**: a new boot id (or the hook said it did not reboot), a fresh signed `Ok`
//!   verdict collected after the hook, Ganeti sees the node online, and no storage problem
//!   involves it.
//! - **Undrain**, then **migrate back** every original primary still running elsewhere (DRBD:
//!   the node must be its secondary again, else its secondary is first replaced by the node).
//!
//! Every step has a timeout ([`StepTimeouts`]): a node that does not finish it fails (node,
//! step, why) and gets the failure tag; the campaign fails, or with `continue_on_failure` the
//! node stays as it is (drained) and the others go on. A node before its hook whose group was
//! admitted with a release that did not succeed, or whose operation never ran because one it
//! came after did not succeed, is not failed: it is sent back and planned again
//! ([`Record::replanned`]). Pause freezes every node at its step
//! (operations in flight finish; timeouts do not run and restart on resume). Abort lets each
//! node finish the step in flight, then nodes whose hook has not started are undrained and get
//! their primaries back (they end `skipped`), nodes past it finish normally, and no new group
//! starts.

use std::collections::{BTreeMap, BTreeSet};

use nodecare_protocol::maintenance::{
    Campaign, CampaignGroup, CampaignNode, CampaignRequest, CampaignState, Failure,
    HOOK_CONTEXT_KIND, HookContext, NodeStep,
};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::ganeti::{Op as GanetiOp, ReplaceDisksMode};
use crate::gate::Holder;
use crate::ledger::{self, Action, AgentOp, Entry, Hold, State};

/// The node tag of a node that failed in a campaign (as an incident's failure tag).
pub fn failure_tag(campaign: Uuid) -> String {
    format!("maintd:repairfailed:{campaign}")
}

/// How many times a failed node's failure tag is asked for before the campaign gives up on it
/// (naming it on the node): a tag whose job failed or vanished is planned again.
pub const FAILURE_TAG_ATTEMPTS: usize = 5;

/// Where a failed node's failure tag is ([`Record::tag_attempts`]).
enum TagAttempts {
    /// Set, asked for, or no attempt known.
    Settled,
    /// Every attempt failed: `tried` of them, fewer than [`FAILURE_TAG_ATTEMPTS`].
    Again { tried: usize },
    /// [`FAILURE_TAG_ATTEMPTS`] attempts failed, the last for `why`.
    GivenUp { tried: usize, why: String },
}

/// One instance move the plan asks for while a node reboots.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlannedMove {
    /// The instance.
    pub instance: String,
    /// Where its primary goes (shared storage); DRBD instances migrate to their secondary.
    pub target: Option<String>,
    /// Its new secondary (`full_evacuation`, when the node is its secondary or primary).
    pub new_secondary: Option<String>,
}

/// What an operation does.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum OpKind {
    /// Set the node drained.
    Drain,
    /// Clear the node's drained flag.
    Undrain,
    /// Live-migrate an instance (to its DRBD secondary when `target` is `None`).
    Migrate {
        /// The instance.
        instance: String,
        /// The target node (shared storage).
        target: Option<String>,
    },
    /// Replace an instance's DRBD secondary by `secondary`.
    ReplaceSecondary {
        /// The instance.
        instance: String,
        /// The new secondary.
        secondary: String,
    },
    /// Run the hook through the node's agent.
    Hook {
        /// The repair request's id (the agent runs it at most once).
        request_id: String,
        /// What the hook gets on stdin.
        context: HookContext,
    },
    /// Add the failure tag to the node.
    Tag {
        /// The tag.
        tag: String,
    },
}

impl OpKind {
    /// The Ganeti write of the operation on `node` (the campaign's node); `None` for the hook.
    pub fn ganeti_op(&self, node: &str) -> Option<GanetiOp> {
        Some(match self {
            Self::Drain => GanetiOp::drain(node),
            Self::Undrain => GanetiOp::undrain(node),
            Self::Migrate { instance, target } => GanetiOp::MigrateInstance {
                instance: instance.clone(),
                target: target.clone(),
            },
            Self::ReplaceSecondary {
                instance,
                secondary,
            } => GanetiOp::ReplaceDisks {
                instance: instance.clone(),
                mode: ReplaceDisksMode::ReplaceNewSecondary {
                    remote_node: Some(secondary.clone()),
                    iallocator: None,
                },
            },
            Self::Tag { tag } => GanetiOp::add_node_tags(node, vec![tag.clone()]),
            Self::Hook { .. } => return None,
        })
    }
}

/// Where an operation is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum OpState {
    /// Recorded, not known to be submitted (after a crash: adopted by its reason trail, or
    /// submitted).
    Planned,
    /// Submitted (a Ganeti job, or a repair request the agent accepted).
    Submitted,
    /// Finished well.
    Succeeded,
    /// Finished badly.
    Failed,
}

impl OpState {
    /// Not finished.
    pub const fn is_in_flight(self) -> bool {
        matches!(self, Self::Planned | Self::Submitted)
    }
}

/// One operation of a campaign, as the state machine sees it: a view of its ledger entry
/// ([`CampaignOp::to_entry`], [`CampaignOp::from_entry`]), recorded before it is submitted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CampaignOp {
    /// Unique within the campaign; the reason trail's intent (no whitespace or `:`).
    pub key: String,
    /// The node whose step it serves.
    pub node: String,
    /// The campaign step it serves.
    pub step: NodeStep,
    /// What it does.
    pub kind: OpKind,
    /// Where it is.
    pub state: OpState,
    /// The Ganeti job, once submitted.
    pub job_id: Option<u64>,
    /// When it was planned.
    pub created_ms: u64,
    /// When it finished.
    pub finished_ms: Option<u64>,
    /// Why it failed.
    pub error: Option<String>,
    /// A hook that said it did not reboot the node.
    #[serde(default)]
    pub no_reboot: bool,
    /// It never ran (failed): canceled before it started, or a job it came after did not
    /// succeed (its ledger entry is canceled).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub canceled: bool,
    /// Keys of the campaign's operations that must succeed first (Ganeti `depends`): a drain
    /// or move of a group started while the previous group's undrains run comes after them
    /// ([`Record::needs_group`]). A migration back's are its node's undrains, found by
    /// [`Record::entries`].
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub after: Vec<String>,
}

/// The ledger entry's `about` keys of a campaign operation.
const ABOUT_NODE: &str = "node";
const ABOUT_STEP: &str = "step";
const ABOUT_KIND: &str = "operation";

impl CampaignOp {
    /// The ledger entry of the operation, held by `holder` (its campaign), with `description`
    /// (the reason trail's text) and `after` (keys of the campaign's entries that must succeed
    /// first). A drain holds its node rebooting until its undrain (or, for a node given up,
    /// its failure tag) releases it; a migration
    /// back holds the node receiving its instance while unfinished; the hook is the agent's.
    pub fn to_entry(&self, holder: Holder, description: String, after: Vec<String>) -> Entry {
        let action = match (&self.kind, self.kind.ganeti_op(&self.node)) {
            (_, Some(op)) => Action::ganeti(op),
            (OpKind::Hook { context, .. }, None) => Action::Agent {
                op: AgentOp::Hook {
                    node: self.node.clone(),
                    command: context.hook.clone(),
                },
            },
            (_, None) => Action::Agent {
                op: AgentOp::Check {
                    node: self.node.clone(),
                },
            },
        };
        let holds = match (&self.kind, self.step) {
            (OpKind::Drain, _) => vec![Hold::Rebooting {
                node: self.node.clone(),
            }],
            // Giving a failed node up (its failure tag) ends the campaign's hold of it, as
            // its own account does ([`Record::holds`]): left drained, it is someone's drain.
            (OpKind::Undrain, _) | (OpKind::Tag { .. }, NodeStep::Failed) => vec![Hold::Release {
                node: self.node.clone(),
            }],
            (_, NodeStep::MigrateBack) => vec![Hold::Receiving {
                node: self.node.clone(),
            }],
            _ => Vec::new(),
        };
        let mut entry = Entry::new(
            holder,
            &self.key,
            action,
            description,
            self.created_ms,
            u64::MAX,
        )
        .after(after)
        .holding(holds);
        entry.about.insert(ABOUT_NODE.to_owned(), self.node.clone());
        entry
            .about
            .insert(ABOUT_STEP.to_owned(), self.step.as_str().to_owned());
        entry.about.insert(
            ABOUT_KIND.to_owned(),
            serde_json::to_string(&self.kind).unwrap_or_default(),
        );
        entry.state = match self.state {
            OpState::Planned => State::Recorded,
            OpState::Submitted => State::Submitted,
            OpState::Succeeded => State::Succeeded,
            OpState::Failed => {
                let why = self
                    .error
                    .clone()
                    .unwrap_or_else(|| "operation failed".to_owned());
                if self.canceled {
                    State::Canceled { why }
                } else {
                    State::Failed { why }
                }
            }
        };
        entry.job = self.job_id;
        entry.finished_ms = self.finished_ms;
        entry
    }

    /// Whether `entry` is this operation's (the same key, node, step and planning time).
    fn is_of(&self, entry: &Entry) -> bool {
        self.key == entry.key
            && self.created_ms == entry.recorded_ms
            && entry.about.get(ABOUT_NODE) == Some(&self.node)
            && entry.about.get(ABOUT_STEP).map(String::as_str) == Some(self.step.as_str())
    }

    /// Whether this operation is what `entry` says now (the hook's `no_reboot` aside).
    fn is_view_of(&self, entry: &Entry) -> bool {
        let (state, error) = op_state(&entry.state);
        self.is_of(entry)
            && self.state == state
            && self.canceled == matches!(entry.state, State::Canceled { .. })
            && self.error.as_deref() == error
            && self.job_id == entry.job
            && self.finished_ms == entry.finished_ms
    }

    /// Takes `entry`'s state, job and finish time when it is this operation's entry
    /// ([`CampaignOp::is_of`]); whether it is.
    fn takes_state_of(&mut self, entry: &Entry) -> bool {
        let same = self.is_of(entry);
        if same {
            let (state, error) = op_state(&entry.state);
            self.state = state;
            self.canceled = matches!(entry.state, State::Canceled { .. });
            self.error = error.map(str::to_owned);
            self.job_id = entry.job;
            self.finished_ms = entry.finished_ms;
        }
        same
    }

    /// The operation a campaign's ledger entry records; `None` for an entry that is not one.
    /// A submitted or timed-out entry is in flight; a canceled one failed.
    pub fn from_entry(entry: &Entry) -> Option<Self> {
        let node = entry.about.get(ABOUT_NODE)?.clone();
        let step: NodeStep = serde_json::from_value(serde_json::Value::String(
            entry.about.get(ABOUT_STEP)?.clone(),
        ))
        .ok()?;
        let kind: OpKind = serde_json::from_str(entry.about.get(ABOUT_KIND)?).ok()?;
        let (state, error) = op_state(&entry.state);
        let error = error.map(str::to_owned);
        Some(Self {
            key: entry.key.clone(),
            node,
            step,
            kind,
            state,
            job_id: entry.job,
            created_ms: entry.recorded_ms,
            finished_ms: entry.finished_ms,
            error,
            no_reboot: false,
            canceled: matches!(entry.state, State::Canceled { .. }),
            after: if step == NodeStep::MigrateBack {
                Vec::new()
            } else {
                entry.after.clone()
            },
        })
    }
}

/// A campaign's operations by key, shared between copies of its record until one changes.
pub type Ops = std::sync::Arc<BTreeMap<String, CampaignOp>>;

/// An operation's state (and why it failed) from its ledger entry's.
fn op_state(state: &State) -> (OpState, Option<&str>) {
    match state {
        State::Recorded => (OpState::Planned, None),
        State::Submitted | State::TimedOut => (OpState::Submitted, None),
        State::Succeeded => (OpState::Succeeded, None),
        State::Failed { why } | State::Canceled { why } => (OpState::Failed, Some(why.as_str())),
    }
}

/// A campaign: what the API shows plus what the executor needs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    /// The campaign as the API returns it.
    pub campaign: Campaign,
    /// The planned moves of the current group, per node.
    pub moves: BTreeMap<String, Vec<PlannedMove>>,
    /// The campaign's operations, by key: a view of its ledger entries (held by
    /// [`Holder::Campaign`]), set each round by [`Record::set_ops`] and never stored with the
    /// record (records of earlier versions carried them; the store moves them into the ledger).
    /// Shared between copies of the record until one of them changes them.
    #[serde(default, skip_serializing)]
    pub ops: Ops,
    /// The keys of the hooks that said they did not reboot their node (the outcome the agent
    /// gave, which the ledger's entry does not keep).
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub hooks_no_reboot: BTreeSet<String>,
    /// For each hook a request went out for (its answer may have been lost), until when (Unix
    /// ms) its agent may still take one: the latest request's expiry plus the clock skew an
    /// agent allows ([`Record::note_hook_sent`]). Until then the agent not knowing it proves
    /// nothing (a request may wait for the node's repair lock, or in a stopped agent's socket),
    /// so the hook is not canceled and its node stays held ([`HookStop::may_still_run`]).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub hooks_sent_until: BTreeMap<String, u64>,
    /// Nodes of the current group that an abort sends back without their hook.
    pub aborted_nodes: BTreeSet<String>,
    /// The state to return to on resume (paused while running or aborting).
    pub paused_from: Option<CampaignState>,
    /// Most nodes per group: set when the gate refuses a group for a cap or capacity (a part of
    /// a reboot group is one too, so planned groups are cut to this size).
    #[serde(default)]
    pub max_group: Option<usize>,
    /// When each node's reboot ended (it left its hook or `wait-healthy` for any other step),
    /// Unix ms: its failure domain's grace runs from then ([`Record::planned_disruptions`]).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub rebooted_ms: BTreeMap<String, u64>,
    /// The keys of the undrain operations in flight when the last group started: the gate
    /// admitted that group with their nodes released, so no hook of it is planned or sent
    /// before every one of them has succeeded ([`Record::releases_before_hooks`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub started_after: Vec<String>,
    /// Nodes sent back to be planned again, each with why: a release their group was admitted
    /// on did not succeed, or an operation of theirs never ran because one it came after did
    /// not succeed. Each gets its primaries back and ends `skipped` in its group, and the next
    /// plan takes it again ([`Record::set_plan`]) on the cluster as it is then.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub replanned: BTreeMap<String, String>,
}

/// What the executor sees of one node this round.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NodeNow {
    /// Ganeti's drained flag.
    pub drained: bool,
    /// Ganeti's offline flag.
    pub offline: bool,
    /// Free memory in MiB, when known (where an instance the plan did not see may go).
    pub memory_free: Option<u64>,
}

/// What the executor sees of one instance this round.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct InstanceNow {
    /// Its primary node.
    pub primary: String,
    /// Its secondaries.
    pub secondaries: Vec<String>,
    /// Running (its status is `running`).
    pub running: bool,
    /// DRBD (migrates to its secondary only).
    pub mirrored: bool,
    /// Its disks are on its primary node only (plain, file): it cannot move.
    pub local: bool,
    /// Memory in MiB, when known.
    pub memory: Option<u64>,
}

/// A verified, fresh report of a node's agent.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct AgentNow {
    /// Its boot id, when it reports one.
    pub boot_id: Option<String>,
    /// Whether a reboot is required (the sentinel), when it says.
    pub reboot_required: Option<bool>,
    /// Its verdict is `Ok`.
    pub ok: bool,
    /// What its verdict asks for when it is actionable (`live-repair`, `evacuate`,
    /// `evacuate-failover`): a node in wait-healthy that came back so fails its step at once,
    /// and node repair takes it over (waiting would hold it from node repair until the step's
    /// timeout).
    #[serde(default)]
    pub asks: Option<nodecare_protocol::DiagnoseStatus>,
    /// When its diagnose run finished, Unix ms.
    pub collected_at_ms: u64,
}

/// What the executor sees this round.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct World {
    /// Now, Unix ms.
    pub now_ms: u64,
    /// Nodes by name.
    pub nodes: BTreeMap<String, NodeNow>,
    /// Instances by name.
    pub instances: BTreeMap<String, InstanceNow>,
    /// Agents with a verified, fresh report, by node.
    pub agents: BTreeMap<String, AgentNow>,
    /// Storage problems: the nodes involved and what is wrong (health unknown counts).
    pub storage: Vec<(BTreeSet<String>, String)>,
    /// The master node: Ganeti cannot drain it (only a master failover changes its role), so
    /// its drain step is skipped; its primaries still move away before its hook.
    pub master: String,
    /// The nodes holders hold (disrupted or touched) as the round starts, with who: an
    /// instance the plan did not see goes to none held by another holder
    /// ([`Record::unplanned_target`]), since the gate never judged that move.
    pub held: BTreeMap<String, BTreeSet<Holder>>,
}

impl World {
    /// The running instances whose primary is `node`.
    pub fn primaries_of(&self, node: &str) -> Vec<String> {
        self.instances
            .iter()
            .filter(|(_, i)| i.running && i.primary == node)
            .map(|(name, _)| name.clone())
            .collect()
    }
}

/// Why an operator command is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("campaign is {state}: cannot {command}")]
pub struct ControlError {
    /// The campaign's state.
    pub state: CampaignState,
    /// The command.
    pub command: &'static str,
}

/// A hook recorded but never to be sent ([`Record::hooks_to_stop`]): its ledger entry is
/// canceled once the agent is known not to have it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HookStop {
    /// The hook operation's key.
    pub key: String,
    /// Why it is not sent.
    pub why: String,
    /// Its node still waits at its hook (an abort): canceled only once the agent said it does
    /// not have it (else the node waits, and its step's timeout bounds that). Otherwise it is
    /// canceled whatever the agent says, unless it says it has it.
    pub confirm: bool,
    /// Until when (Unix ms) its agent may still take a request sent for it
    /// ([`Record::hooks_sent_until`]); `None`: none was ever sent.
    pub sent_until_ms: Option<u64>,
}

impl HookStop {
    /// Whether a request sent for the hook may still be taken by its agent at `now_ms`: the
    /// hook is then canceled whatever the agent says (but that it has it, when it is followed
    /// as sent), only once that time passed. A request can wait for the node's repair lock, or
    /// in the socket of a stopped agent, and run afterwards while the agent does not know it
    /// yet.
    pub fn may_still_run(&self, now_ms: u64) -> bool {
        self.sent_until_ms.is_some_and(|until| now_ms <= until)
    }
}

fn sanitize(key: &str) -> String {
    ledger::trail_key(key)
}

impl Record {
    /// A new campaign, running, with no group started.
    pub fn new(id: Uuid, request: CampaignRequest, who: &str, now_ms: u64) -> Self {
        Self {
            campaign: Campaign {
                id: id.to_string(),
                request,
                who: who.to_owned(),
                state: CampaignState::Running,
                created_ms: now_ms,
                updated_ms: now_ms,
                finished_ms: None,
                groups: Vec::new(),
                planned: Vec::new(),
                failure: None,
                failures: Vec::new(),
                blocked_by: None,
                warnings: Vec::new(),
                overrides: Vec::new(),
            },
            moves: BTreeMap::new(),
            ops: Ops::default(),
            hooks_no_reboot: BTreeSet::new(),
            hooks_sent_until: BTreeMap::new(),
            aborted_nodes: BTreeSet::new(),
            paused_from: None,
            max_group: None,
            rebooted_ms: BTreeMap::new(),
            started_after: Vec::new(),
            replanned: BTreeMap::new(),
        }
    }

    /// The campaign's id.
    pub fn id(&self) -> Uuid {
        Uuid::parse_str(&self.campaign.id).unwrap_or_default()
    }

    /// The campaign as the holder of its ledger entries and its gate holds.
    pub fn holder(&self) -> Holder {
        Holder::Campaign { id: self.id() }
    }

    /// Takes the campaign's operations from its ledger entries (the state machine's view). An
    /// operation already known from the same entry (key, node, step and planning time) only
    /// takes the entry's state, job and finish time: the rest of an entry never changes. Where
    /// nothing changed, the operations stay as they are (shared with the record's copies).
    pub fn set_ops<E: std::borrow::Borrow<Entry>>(&mut self, entries: &[E]) {
        let holder = self.holder();
        let ours = || {
            entries
                .iter()
                .map(std::borrow::Borrow::borrow)
                .filter(|e| e.holder == holder)
        };
        let mut count = 0;
        let unchanged = ours().all(|entry| {
            count += 1;
            self.ops.get(&entry.key).is_some_and(|op| {
                op.is_view_of(entry) && op.no_reboot == self.hooks_no_reboot.contains(&entry.key)
            })
        }) && count == self.ops.len();
        if unchanged {
            return;
        }
        let ops = std::sync::Arc::make_mut(&mut self.ops);
        let mut seen = 0;
        for entry in ours() {
            let no_reboot = self.hooks_no_reboot.contains(&entry.key);
            if let Some(op) = ops.get_mut(&entry.key)
                && op.takes_state_of(entry)
            {
                op.no_reboot = no_reboot;
                seen += 1;
                continue;
            }
            match CampaignOp::from_entry(entry) {
                Some(mut op) => {
                    op.no_reboot = no_reboot;
                    ops.insert(op.key.clone(), op);
                    seen += 1;
                }
                None => {
                    ops.remove(&entry.key);
                }
            }
        }
        if seen != ops.len() {
            let keys: BTreeSet<&str> = ours().map(|e| e.key.as_str()).collect();
            ops.retain(|key, _| keys.contains(key.as_str()));
        }
    }

    /// Replaces (or adds) one operation.
    pub fn set_op(&mut self, op: CampaignOp) {
        self.ops_mut().insert(op.key.clone(), op);
    }

    /// The operations, to change (copied first where a copy of the record shares them).
    pub fn ops_mut(&mut self) -> &mut BTreeMap<String, CampaignOp> {
        std::sync::Arc::make_mut(&mut self.ops)
    }

    /// The ledger entries of the planned operations `keys`, in that order: migrations back
    /// come after their node's undrain (Ganeti refuses a drained target).
    pub fn entries(&self, keys: &[String]) -> Vec<Entry> {
        let undrains = self.undrains();
        keys.iter()
            .filter_map(|key| self.ops.get(key))
            .map(|op| self.entry_after(op, &undrains))
            .collect()
    }

    /// The ledger entry of `op`.
    pub fn entry(&self, op: &CampaignOp) -> Entry {
        self.entry_after(op, &self.undrains())
    }

    /// The keys of each node's undrains, which its migrations back come after.
    fn undrains(&self) -> BTreeMap<&str, Vec<String>> {
        let mut undrains: BTreeMap<&str, Vec<String>> = BTreeMap::new();
        for op in self.ops.values().filter(|o| o.kind == OpKind::Undrain) {
            undrains
                .entry(op.node.as_str())
                .or_default()
                .push(op.key.clone());
        }
        undrains
    }

    /// The ledger entry of `op`, given [`Self::undrains`].
    fn entry_after(&self, op: &CampaignOp, undrains: &BTreeMap<&str, Vec<String>>) -> Entry {
        let after = if op.step == NodeStep::MigrateBack {
            undrains.get(op.node.as_str()).cloned().unwrap_or_default()
        } else {
            op.after.clone()
        };
        op.to_entry(self.holder(), self.description(op), after)
    }

    /// What `op` does, for the reason trail: `maintenance campaign <id> group <n> step <step>:
    /// <what>`.
    pub fn description(&self, op: &CampaignOp) -> String {
        let group = self
            .campaign
            .groups
            .iter()
            .rev()
            .find(|g| g.nodes.iter().any(|n| n.node == op.node))
            .map_or(self.campaign.groups.len().saturating_sub(1), |g| g.index);
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
        let request = &self.campaign.request;
        let allowed: String = [
            (
                request.allow_unpinned_machine_version,
                "--allow-unpinned-machine-version",
            ),
            (request.allow_mixed_versions, "--allow-mixed-versions"),
        ]
        .into_iter()
        .filter(|(set, _)| *set)
        .map(|(_, flag)| format!(" ({flag})"))
        .collect();
        format!(
            "maintenance campaign {} group {} step {}: {what}{allowed}",
            self.campaign.id, group, op.step
        )
    }

    /// The state.
    pub const fn state(&self) -> CampaignState {
        self.campaign.state
    }

    /// The group in flight (started, some node not finished).
    pub fn current(&self) -> Option<&CampaignGroup> {
        self.campaign
            .groups
            .last()
            .filter(|g| g.nodes.iter().any(|n| !n.step.is_final()))
    }

    /// Whether a node at `step` is disrupted: from its drain until its undrain job has ended. A
    /// node whose original primaries are migrating back (undrained, healthy) is not.
    pub const fn disrupts(step: NodeStep) -> bool {
        !step.is_final() && !matches!(step, NodeStep::MigrateBack)
    }

    /// How many of its nodes are finished (done, or failed).
    pub fn finished_nodes(&self) -> usize {
        self.campaign
            .groups
            .iter()
            .flat_map(|g| g.nodes.iter())
            .filter(|n| n.step.is_final())
            .count()
    }

    /// Whether some node of some group is not finished (the migrations back of a group may
    /// still run while the next group goes through its steps).
    pub fn unfinished(&self) -> bool {
        self.campaign
            .groups
            .iter()
            .flat_map(|g| g.nodes.iter())
            .any(|n| !n.step.is_final())
    }

    /// Whether the next group is due: running, and every node disrupted is releasing (its
    /// undrain job submitted and running: [`Self::releasing`]), or none is (the previous group's nodes are
    /// all undrained and healthy; their migrations back may still run). A group started while
    /// undrains run has its drains and moves chained after all of them (Ganeti `depends`):
    /// none runs before the nodes it was admitted with are released, and none if an undrain
    /// fails.
    pub fn needs_group(&self) -> bool {
        self.state() == CampaignState::Running && {
            let releasing = self.undrains_in_flight();
            self.campaign
                .groups
                .iter()
                .flat_map(|g| g.nodes.iter())
                .filter(|n| Self::disrupts(n.step))
                .all(|n| releasing.contains_key(n.node.as_str()))
        }
    }

    /// The nodes whose undrain job is submitted and not finished, each with its operation's
    /// key: disrupted until it ends, released by it. An undrain only recorded (not submitted
    /// yet, or its submission's answer lost until adoption finds its job) is no release yet: a
    /// group chained after it (Ganeti `depends` needs its job) would wait for it past the round
    /// that admitted it.
    fn undrains_in_flight(&self) -> BTreeMap<&str, &str> {
        let at_undrain: BTreeSet<&str> = self
            .campaign
            .groups
            .iter()
            .flat_map(|g| g.nodes.iter())
            .filter(|n| n.step == NodeStep::Undrain)
            .map(|n| n.node.as_str())
            .collect();
        if at_undrain.is_empty() {
            return BTreeMap::new();
        }
        self.ops
            .values()
            .filter(|op| {
                op.kind == OpKind::Undrain
                    && op.state == OpState::Submitted
                    && op.job_id.is_some()
                    && at_undrain.contains(op.node.as_str())
            })
            .map(|op| (op.node.as_str(), op.key.as_str()))
            .collect()
    }

    /// The nodes the campaign releases by the undrain jobs in flight: the gate judges a next
    /// group proposed meanwhile with them released ([`crate::gate::Proposal::after_releases`]).
    pub fn releasing(&self) -> BTreeSet<String> {
        self.undrains_in_flight()
            .into_keys()
            .map(str::to_owned)
            .collect()
    }

    /// [`Self::releasing`], each node with the memory in MiB its migrations back in flight
    /// bring (`memory` of each instance; `None` when one is unknown).
    pub fn releasing_with_arrivals(
        &self,
        memory: impl Fn(&str) -> Option<u64>,
    ) -> BTreeMap<String, Option<u64>> {
        let mut releasing: BTreeMap<String, Option<u64>> = self
            .undrains_in_flight()
            .into_keys()
            .map(|node| (node.to_owned(), Some(0)))
            .collect();
        for op in self.ops.values() {
            if let (NodeStep::MigrateBack, true, OpKind::Migrate { instance, .. }) =
                (op.step, op.state.is_in_flight(), &op.kind)
                && let Some(arriving) = releasing.get_mut(&op.node)
            {
                *arriving = arriving
                    .zip(memory(instance))
                    .map(|(sum, m)| sum.saturating_add(m));
            }
        }
        releasing
    }

    /// Chains the drains and moves among `planned` after the undrains `releasing` (node → key)
    /// that were in flight when the round began: each after every one of them but its own
    /// node's. The gate admitted the group on the cluster as it will be once they succeeded
    /// ([`crate::gate::Proposal::after_releases`]: the disruption budget, N+1 and storage with
    /// those nodes back), so none of its jobs may run before, a move to a node not released
    /// neither (while a released node is still drained, storage is not whole).
    fn chain_after_releases(&mut self, planned: &[String], releasing: &BTreeMap<String, String>) {
        for key in planned {
            let Some(op) = self.ops.get(key) else {
                continue;
            };
            if op.step == NodeStep::MigrateBack
                || !matches!(
                    op.kind,
                    OpKind::Drain | OpKind::Migrate { .. } | OpKind::ReplaceSecondary { .. }
                )
            {
                continue;
            }
            let after: Vec<String> = releasing
                .iter()
                .filter(|(node, _)| **node != op.node)
                .map(|(_, undrain)| undrain.clone())
                .collect();
            if !after.is_empty()
                && let Some(op) = self.ops_mut().get_mut(key)
            {
                op.after = after;
            }
        }
    }

    /// The nodes the campaign holds disrupted: while it runs, those between their drain and
    /// their undrain; running or not, those an operation of which may still run
    /// ([`Self::acting_on`]): a hook recorded and maybe delivered, or taken by the agent, until
    /// it ended or can no longer run ([`HookStop::may_still_run`]); a drain, undrain or move
    /// away recorded (maybe submitted) or unfinished in Ganeti. A campaign that failed, or a
    /// node that failed or was sent back, keeps its node held meanwhile.
    pub fn holds(&self) -> Vec<(String, Holder)> {
        let holder = Holder::Campaign { id: self.id() };
        let running = !self.state().is_final();
        let acting = self.acting_on();
        self.campaign
            .groups
            .iter()
            .flat_map(|g| g.nodes.iter())
            .filter(|n| (running && Self::disrupts(n.step)) || acting.contains(n.node.as_str()))
            .map(|n| (n.node.clone(), holder.clone()))
            .collect()
    }

    /// The nodes an operation of the campaign in flight acts on, whatever the campaign's or
    /// the node's step: its hook, its drain or undrain, or a move of its primaries or
    /// secondaries away. Its failure tag disrupts nothing, and a migration back only touches the
    /// node it brings an instance to ([`Self::touched`]).
    fn acting_on(&self) -> BTreeSet<&str> {
        self.in_flight()
            .filter(|op| match op.kind {
                OpKind::Hook { .. } | OpKind::Drain | OpKind::Undrain => true,
                OpKind::Migrate { .. } | OpKind::ReplaceSecondary { .. } => {
                    op.step != NodeStep::MigrateBack
                }
                OpKind::Tag { .. } => false,
            })
            .map(|op| op.node.as_str())
            .collect()
    }

    /// The nodes the campaign holds without disrupting them: those whose original primaries
    /// are migrating back ([`crate::gate::InForce::touched`]). No other holder may drain
    /// or touch them until the migrations back are done; they count against no budget, so the
    /// next group may start meanwhile.
    pub fn touched(&self) -> Vec<(String, Holder)> {
        let holder = Holder::Campaign { id: self.id() };
        self.campaign
            .groups
            .iter()
            .flat_map(|g| g.nodes.iter())
            .filter(|n| n.step == NodeStep::MigrateBack)
            .map(|n| (n.node.clone(), holder.clone()))
            .collect()
    }

    /// Whether a node at `step` is rebooting (its hook runs or it is coming back).
    const fn rebooting(step: NodeStep) -> bool {
        matches!(step, NodeStep::Hook | NodeStep::WaitHealthy)
    }

    /// The nodes rebooting now (their hook runs or they are coming back) while the campaign
    /// runs: the coordinator watches them for their return at a short pace.
    pub fn rebooting_nodes(&self) -> impl Iterator<Item = &str> {
        let running = !self.state().is_final();
        self.campaign
            .groups
            .iter()
            .flat_map(|g| g.nodes.iter())
            .filter(move |n| running && Self::rebooting(n.step))
            .map(|n| n.node.as_str())
    }

    /// The campaign's planned disruptions for the grace ([`crate::gate::grace`]): node, Unix
    /// ms the grace runs from. A node rebooting now (its hook runs or it is coming back) is in
    /// grace from `now_ms`, so throughout its reboot; a node whose reboot ended is in grace
    /// from that moment, for the grace after it. A node a finished campaign left rebooting is
    /// in grace from the campaign's end. A failed campaign, or a node of it that failed, plans
    /// nothing any more: its grace ends with the failure (a problem it left is acted on).
    pub fn planned_disruptions(&self, now_ms: u64) -> Vec<(String, u64)> {
        let running = !self.state().is_final();
        if self.state() == CampaignState::Failed {
            return Vec::new();
        }
        self.campaign
            .groups
            .iter()
            .flat_map(|g| g.nodes.iter())
            .filter(|n| n.step != NodeStep::Failed)
            .filter_map(|n| {
                let from = if Self::rebooting(n.step) {
                    if running {
                        Some(now_ms)
                    } else {
                        Some(self.campaign.finished_ms.unwrap_or(now_ms))
                    }
                } else {
                    self.rebooted_ms.get(&n.node).copied()
                };
                from.map(|from| (n.node.clone(), from))
            })
            .collect()
    }

    /// The drained flags this campaign's jobs set or cleared (succeeded drain and undrain
    /// operations), for [`crate::gate::left_by`].
    pub fn flag_changes(&self) -> Vec<crate::gate::FlagChange> {
        self.ops
            .values()
            .filter(|op| op.state == OpState::Succeeded)
            .filter_map(|op| {
                let set = match op.kind {
                    OpKind::Drain => true,
                    OpKind::Undrain => false,
                    _ => return None,
                };
                Some(crate::gate::FlagChange {
                    node: op.node.clone(),
                    flag: "drained".to_owned(),
                    set,
                    at_ms: op.finished_ms.unwrap_or(op.created_ms),
                    by: format!("maintenance campaign {} ({})", self.id(), self.state()),
                })
            })
            .collect()
    }

    /// The original primaries not back yet of the nodes past their hook, by instance: the node
    /// each goes back to.
    pub fn pending_back(&self) -> BTreeMap<String, String> {
        self.campaign
            .groups
            .iter()
            .flat_map(|g| g.nodes.iter())
            .filter(|n| Self::holds_back(n.step))
            .flat_map(|n| {
                n.original_primaries
                    .iter()
                    .map(|i| (i.clone(), n.node.clone()))
            })
            .collect()
    }

    /// Whether a node at `step` waits for its original primaries to come back.
    const fn holds_back(step: NodeStep) -> bool {
        matches!(step, NodeStep::Undrain | NodeStep::MigrateBack)
    }

    /// Whether every one of `nodes` has been in one of the campaign's groups: a plan on them
    /// leaves nothing for a next group ([`Record::set_plan`] leaves out the nodes seen).
    pub fn has_grouped_all<'a>(&self, mut nodes: impl Iterator<Item = &'a str>) -> bool {
        let seen = self.seen_nodes();
        nodes.all(|node| seen.contains(node))
    }

    /// The nodes that have been in a group, but those sent back to be planned again.
    fn seen_nodes(&self) -> BTreeSet<&str> {
        self.campaign
            .groups
            .iter()
            .flat_map(|g| g.nodes.iter())
            .filter(|n| !(n.step.is_final() && self.replanned.contains_key(&n.node)))
            .map(|n| n.node.as_str())
            .collect()
    }

    /// Operations not finished.
    pub fn in_flight(&self) -> impl Iterator<Item = &CampaignOp> {
        self.ops.values().filter(|op| op.state.is_in_flight())
    }

    fn touch(&mut self, now_ms: u64) {
        self.campaign.updated_ms = now_ms;
    }

    fn finish(&mut self, state: CampaignState, now_ms: u64) {
        self.campaign.state = state;
        self.campaign.finished_ms = Some(now_ms);
        self.campaign.blocked_by = None;
        self.paused_from = None;
        if state != CampaignState::Completed {
            self.campaign.planned.clear();
        }
        self.touch(now_ms);
    }

    /// Pauses a running or aborting campaign.
    pub fn pause(&mut self, now_ms: u64) -> Result<(), ControlError> {
        match self.state() {
            CampaignState::Running | CampaignState::Aborting => {
                self.paused_from = Some(self.state());
                self.campaign.state = CampaignState::Paused;
                self.touch(now_ms);
                Ok(())
            }
            CampaignState::Paused => Ok(()),
            state => Err(ControlError {
                state,
                command: "pause",
            }),
        }
    }

    /// Resumes a paused campaign; the steps of its nodes start their timeouts again.
    pub fn resume(&mut self, now_ms: u64) -> Result<(), ControlError> {
        match self.state() {
            CampaignState::Paused => {
                self.campaign.state = self.paused_from.take().unwrap_or(CampaignState::Running);
                let timeouts = self.campaign.request.timeouts;
                for group in &mut self.campaign.groups {
                    for node in group.nodes.iter_mut().filter(|n| !n.step.is_final()) {
                        node.step_started_ms = Some(now_ms);
                        node.step_deadline_ms =
                            timeouts.of_ms(node.step).map(|t| now_ms.saturating_add(t));
                    }
                }
                self.touch(now_ms);
                Ok(())
            }
            CampaignState::Running | CampaignState::Aborting => Ok(()),
            state => Err(ControlError {
                state,
                command: "resume",
            }),
        }
    }

    /// Aborts: the steps in flight finish, then the campaign stops (see the module docs).
    pub fn abort(&mut self, now_ms: u64) -> Result<(), ControlError> {
        match self.state() {
            CampaignState::Running | CampaignState::Paused | CampaignState::Aborting => {
                self.paused_from = None;
                if self.unfinished() {
                    self.campaign.state = CampaignState::Aborting;
                    self.campaign.planned.clear();
                    self.campaign.blocked_by = None;
                    self.touch(now_ms);
                } else {
                    self.finish(CampaignState::Aborted, now_ms);
                }
                Ok(())
            }
            state => Err(ControlError {
                state,
                command: "abort",
            }),
        }
    }

    /// Takes the planner's groups (node names, in order) for the rest of the campaign: nodes of
    /// groups already started are left out, and with `only_if_required` every node whose agent
    /// does not report that a reboot is required. Returns the groups left.
    pub fn set_plan(
        &mut self,
        groups: Vec<Vec<String>>,
        warnings: Vec<String>,
        world: &World,
    ) -> &[Vec<String>] {
        let seen: BTreeSet<String> = self.seen_nodes().into_iter().map(str::to_owned).collect();
        let only_required = self.campaign.request.only_if_required;
        let mut warnings = warnings;
        let mut not_required = Vec::new();
        let planned: Vec<Vec<String>> = groups
            .into_iter()
            .map(|group| {
                group
                    .into_iter()
                    .filter(|node| !seen.contains(node))
                    .filter(|node| {
                        let keep = !only_required
                            || world
                                .agents
                                .get(node)
                                .is_some_and(|a| a.reboot_required == Some(true));
                        if !keep {
                            not_required.push(node.clone());
                        }
                        keep
                    })
                    .collect::<Vec<_>>()
            })
            .filter(|group| !group.is_empty())
            .flat_map(|group| {
                let size = self.max_group.unwrap_or(usize::MAX).max(1);
                group
                    .chunks(size)
                    .map(<[String]>::to_vec)
                    .collect::<Vec<_>>()
            })
            .collect();
        if !not_required.is_empty() {
            warnings.push(format!(
                "left out, no reboot required (or not reported): {}",
                not_required.join(", ")
            ));
        }
        self.campaign.planned = planned;
        self.campaign.warnings = warnings;
        &self.campaign.planned
    }

    /// The gate refused the next group for a cap (`capacity` false) or for capacity: whether
    /// smaller groups are tried ([`Self::shrink_groups`]). A capacity refusal while instances
    /// of this campaign still migrate back to an earlier group's nodes waits instead (false):
    /// the next group's nodes still carry them, and the same group fits once they have landed
    /// (a round follows that end, by its job's wait).
    pub fn shrinks_after_refusal(&mut self, capacity: bool) -> bool {
        if capacity && !self.pending_back().is_empty() {
            return false;
        }
        self.shrink_groups()
    }

    /// The gate refused the next group for a cap or capacity: later groups have at most half
    /// its nodes. False when it has one node (nothing smaller to try).
    pub fn shrink_groups(&mut self) -> bool {
        let Some(head) = self.campaign.planned.first() else {
            return false;
        };
        if head.len() <= 1 {
            return false;
        }
        let size = head.len().div_ceil(2);
        self.max_group = Some(size);
        let planned = std::mem::take(&mut self.campaign.planned);
        self.campaign.planned = planned
            .iter()
            .flat_map(|g| g.chunks(size).map(<[String]>::to_vec))
            .collect();
        true
    }

    /// The planner could not plan: shown, the campaign waits.
    pub fn set_blocked(&mut self, why: Option<String>, now_ms: u64) {
        if self.campaign.blocked_by != why {
            self.campaign.blocked_by = why;
            self.touch(now_ms);
        }
    }

    /// Ends a running campaign with no group in flight and nothing left to plan.
    pub fn complete_if_done(&mut self, now_ms: u64) -> bool {
        if self.needs_group() && self.campaign.planned.is_empty() && !self.unfinished() {
            self.finish(CampaignState::Completed, now_ms);
            return true;
        }
        false
    }

    /// Starts the next group (the first planned one, admitted by the gate) with its planned
    /// moves; records the primaries of its nodes.
    pub fn start_group(&mut self, moves: BTreeMap<String, Vec<PlannedMove>>, world: &World) {
        if !self.needs_group() || self.campaign.planned.is_empty() {
            return;
        }
        let nodes = self.campaign.planned.remove(0);
        let now = world.now_ms;
        // The releases the gate judged this group with: its hooks wait for them.
        let started_after: Vec<String> = self
            .undrains_in_flight()
            .into_values()
            .map(str::to_owned)
            .collect();
        // Instances still migrating back to an earlier group's node belong there, not to the
        // node they are leaving.
        let back = self.pending_back();
        let timeouts = self.campaign.request.timeouts;
        // Finished operations of earlier groups are forgotten (their keys never come back),
        // but for nodes still migrating their primaries back (their outcomes are still read).
        let busy: BTreeSet<String> = self
            .campaign
            .groups
            .iter()
            .flat_map(|g| g.nodes.iter())
            .filter(|n| !n.step.is_final())
            .map(|n| n.node.clone())
            .collect();
        self.ops_mut()
            .retain(|_, op| op.state.is_in_flight() || busy.contains(&op.node));
        self.aborted_nodes.retain(|n| busy.contains(n));
        self.moves = moves
            .into_iter()
            .filter(|(node, _)| nodes.contains(node))
            .collect();
        let group = CampaignGroup {
            index: self.campaign.groups.len(),
            nodes: nodes
                .iter()
                .map(|node| CampaignNode {
                    node: node.clone(),
                    step: NodeStep::Drain,
                    step_started_ms: Some(now),
                    step_deadline_ms: timeouts
                        .of_ms(NodeStep::Drain)
                        .map(|t| now.saturating_add(t)),
                    original_primaries: world
                        .primaries_of(node)
                        .into_iter()
                        .filter(|i| back.get(i).is_none_or(|home| home == node))
                        .collect(),
                    boot_id_before: None,
                    waiting_for: None,
                    failure: None,
                })
                .collect(),
            started_ms: Some(now),
            finished_ms: None,
        };
        self.campaign.groups.push(group);
        self.started_after = started_after;
        for node in &nodes {
            self.replanned.remove(node);
        }
        self.campaign.blocked_by = None;
        self.touch(now);
    }

    /// Advances every node of the group in flight by what `world` shows and plans the
    /// operations to submit; returns the keys of the operations planned.
    pub fn advance(&mut self, world: &World) -> Vec<String> {
        let mut planned = Vec::new();
        self.tag_failed_again(world, &mut planned);
        let state = self.state();
        if !matches!(state, CampaignState::Running | CampaignState::Aborting) {
            return planned;
        }
        // The undrains in flight as the round found them: what a group started meanwhile
        // plans comes after them.
        let releasing: BTreeMap<String, String> = self
            .undrains_in_flight()
            .into_iter()
            .map(|(node, key)| (node.to_owned(), key.to_owned()))
            .collect();
        // The nodes not finished: the last group's, and those of earlier groups whose
        // primaries are still migrating back.
        let names: Vec<(usize, String)> = self
            .campaign
            .groups
            .iter()
            .flat_map(|g| {
                g.nodes
                    .iter()
                    .filter(|n| !n.step.is_final())
                    .map(move |n| (g.index, n.node.clone()))
            })
            .collect();
        // The original primaries not back yet (`pending_back`): taken when a node plans its
        // moves, and again only after a node entered or left the steps that wait for them (a
        // step changes only the node's own).
        let mut back = None;
        for (gi, name) in names {
            if self.state().is_final() {
                break;
            }
            // A node moves on as long as its step is done (several steps in one round).
            for _ in 0..8 {
                let before = self.node(&name).map(|n| n.step);
                self.advance_node(gi, &name, world, &mut back, &mut planned);
                let after = self.node(&name).map(|n| n.step);
                if before != after && [before, after].into_iter().flatten().any(Self::holds_back) {
                    back = None;
                }
                if before == after || after.is_none_or(NodeStep::is_final) {
                    break;
                }
            }
        }
        let mut ended = false;
        for group in &mut self.campaign.groups {
            if group.finished_ms.is_none() && group.nodes.iter().all(|n| n.step.is_final()) {
                group.finished_ms = Some(world.now_ms);
                ended = true;
            }
        }
        if ended && self.campaign.state == CampaignState::Aborting && !self.unfinished() {
            self.finish(CampaignState::Aborted, world.now_ms);
        }
        if !releasing.is_empty() {
            self.chain_after_releases(&planned, &releasing);
        }
        planned
    }

    /// The node `name` in the groups started (a node is in one group only).
    fn node(&self, name: &str) -> Option<&CampaignNode> {
        self.campaign
            .groups
            .iter()
            .rev()
            .find_map(|g| g.nodes.iter().find(|n| n.node == name))
    }

    fn node_mut(&mut self, name: &str) -> Option<&mut CampaignNode> {
        self.campaign
            .groups
            .iter_mut()
            .rev()
            .find_map(|g| g.nodes.iter_mut().find(|n| n.node == name))
    }

    fn set_step(&mut self, name: &str, step: NodeStep, now_ms: u64) {
        let timeouts = self.campaign.request.timeouts;
        if let Some(before) = self.node(name).map(|n| n.step) {
            self.note_rebooted(name, before, step, now_ms);
        }
        if let Some(node) = self.node_mut(name) {
            node.step = step;
            node.step_started_ms = Some(now_ms);
            node.step_deadline_ms = timeouts.of_ms(step).map(|t| now_ms.saturating_add(t));
            node.waiting_for = None;
        }
        self.touch(now_ms);
    }

    /// Notes when `name`'s reboot ended: it leaves its hook or `wait-healthy` (`before`) for
    /// a step that is neither.
    fn note_rebooted(&mut self, name: &str, before: NodeStep, after: NodeStep, now_ms: u64) {
        if Self::rebooting(before) && !Self::rebooting(after) {
            self.rebooted_ms.insert(name.to_owned(), now_ms);
        }
    }

    fn wait(&mut self, name: &str, what: String) {
        if let Some(node) = self.node_mut(name) {
            node.waiting_for = Some(what);
        }
    }

    /// Fails `name` in its current step: tagged; the campaign fails unless it continues on
    /// failure.
    fn fail(&mut self, name: &str, why: String, now_ms: u64, planned: &mut Vec<String>) {
        let Some(step) = self.node(name).map(|n| n.step) else {
            return;
        };
        let failure = Failure {
            node: name.to_owned(),
            step,
            why,
            at_ms: now_ms,
        };
        self.note_rebooted(name, step, NodeStep::Failed, now_ms);
        if let Some(node) = self.node_mut(name) {
            node.step = NodeStep::Failed;
            node.step_deadline_ms = None;
            node.waiting_for = None;
            node.failure = Some(failure.clone());
        }
        let tag = failure_tag(self.id());
        let key = sanitize(&format!("tag-failed-{name}"));
        if !self.ops.contains_key(&key) {
            self.plan_op(&key, name, NodeStep::Failed, OpKind::Tag { tag }, now_ms);
            planned.push(key);
        }
        if self.campaign.request.continue_on_failure {
            self.campaign.failures.push(failure);
            self.touch(now_ms);
        } else {
            self.campaign.failure = Some(failure);
            self.finish(CampaignState::Failed, now_ms);
        }
    }

    fn plan_op(&mut self, key: &str, node: &str, step: NodeStep, kind: OpKind, now_ms: u64) {
        self.ops_mut().insert(
            key.to_owned(),
            CampaignOp {
                key: key.to_owned(),
                node: node.to_owned(),
                step,
                kind,
                state: OpState::Planned,
                job_id: None,
                created_ms: now_ms,
                finished_ms: None,
                error: None,
                no_reboot: false,
                canceled: false,
                after: Vec::new(),
            },
        );
    }

    /// Whether a node failed in the campaign still lacks its failure tag and it is to be
    /// asked for again ([`Self::tag_failed_again`]): the campaign has something to do, ended or
    /// not.
    pub fn owes_failure_tags(&self) -> bool {
        self.failed_nodes()
            .any(|name| matches!(self.tag_attempts(name), TagAttempts::Again { .. }))
    }

    /// The nodes failed in the campaign.
    fn failed_nodes(&self) -> impl Iterator<Item = &str> {
        self.campaign
            .groups
            .iter()
            .flat_map(|g| g.nodes.iter())
            .filter(|n| n.step == NodeStep::Failed)
            .map(|n| n.node.as_str())
    }

    /// Where the failure tag of `name` (a failed node) is, from its tag operations.
    fn tag_attempts(&self, name: &str) -> TagAttempts {
        let tags: Vec<&CampaignOp> = self
            .ops
            .values()
            .filter(|op| op.node == name && matches!(op.kind, OpKind::Tag { .. }))
            .collect();
        if tags.iter().any(|op| op.state != OpState::Failed) {
            // Set, or on its way.
            return TagAttempts::Settled;
        }
        // None known (operations of ended groups are read again from the ledger next round).
        let Some(last) = tags
            .iter()
            .max_by_key(|op| (op.created_ms, op.key.as_str()))
        else {
            return TagAttempts::Settled;
        };
        let why = last
            .error
            .clone()
            .unwrap_or_else(|| "operation failed".to_owned());
        if tags.len() >= FAILURE_TAG_ATTEMPTS {
            TagAttempts::GivenUp {
                tried: tags.len(),
                why,
            }
        } else {
            TagAttempts::Again { tried: tags.len() }
        }
    }

    /// Plans the failure tag again for every failed node whose tag operations all failed (a
    /// job that failed or vanished, a refusal), under a new key (one ledger entry per key),
    /// at most [`FAILURE_TAG_ATTEMPTS`] times in all; then the node names what is left to the
    /// operator. Whatever the campaign's state: a failed campaign ends, its failed node must
    /// still carry the tag the operator looks for.
    fn tag_failed_again(&mut self, world: &World, planned: &mut Vec<String>) {
        let failed: Vec<String> = self.failed_nodes().map(str::to_owned).collect();
        for name in failed {
            match self.tag_attempts(&name) {
                TagAttempts::Settled => {}
                TagAttempts::Again { tried } => {
                    if !world.nodes.contains_key(&name) {
                        continue;
                    }
                    let key = sanitize(&format!("tag-failed-{name}-{}", tried + 1));
                    if self.ops.contains_key(&key) {
                        continue;
                    }
                    let tag = failure_tag(self.id());
                    self.plan_op(
                        &key,
                        &name,
                        NodeStep::Failed,
                        OpKind::Tag { tag },
                        world.now_ms,
                    );
                    planned.push(key);
                    self.touch(world.now_ms);
                }
                TagAttempts::GivenUp { tried, why } => {
                    let what = format!(
                        "the operator: its failure tag {} was not set in {tried} attempts ({why})",
                        failure_tag(self.id())
                    );
                    if self.node(&name).and_then(|n| n.waiting_for.as_deref())
                        != Some(what.as_str())
                    {
                        self.wait(&name, what);
                        self.touch(world.now_ms);
                    }
                }
            }
        }
    }

    /// The operation `key`: `Ok(None)` not planned yet, `Ok(Some(true))` succeeded,
    /// `Ok(Some(false))` in flight, `Err(why)` failed.
    fn op_outcome(&self, key: &str) -> Result<Option<bool>, String> {
        match self.ops.get(key) {
            None => Ok(None),
            Some(op) => match op.state {
                OpState::Succeeded => Ok(Some(true)),
                OpState::Planned | OpState::Submitted => Ok(Some(false)),
                OpState::Failed => Err(op
                    .error
                    .clone()
                    .unwrap_or_else(|| "operation failed".to_owned())),
            },
        }
    }

    fn node_in_flight(&self, name: &str) -> bool {
        self.ops
            .values()
            .any(|op| op.node == name && op.state.is_in_flight())
    }

    /// Where the releases the last group was started after are: the nodes whose undrain has
    /// not succeeded yet (none: all released), or why one of them never will.
    pub fn releases_before_hooks(&self) -> Result<Vec<String>, String> {
        let mut waiting = Vec::new();
        for key in &self.started_after {
            let Some(op) = self.ops.get(key) else {
                continue;
            };
            match op.state {
                OpState::Succeeded => {}
                OpState::Planned | OpState::Submitted => waiting.push(op.node.clone()),
                OpState::Failed => {
                    return Err(format!(
                        "the undrain of {} that its group was admitted with did not succeed ({})",
                        op.node,
                        op.error.as_deref().unwrap_or("operation failed")
                    ));
                }
            }
        }
        Ok(waiting)
    }

    /// Why `name` of group `gi` (its operations' keys start with `prefix`) is to be planned
    /// again: a release its group was admitted with did not succeed, or an operation of it
    /// never ran because one it came after did not succeed.
    fn replan_why(&self, gi: usize, name: &str, prefix: &str) -> Option<String> {
        if self.campaign.groups.len() == gi + 1
            && let Err(why) = self.releases_before_hooks()
        {
            return Some(why);
        }
        let own = format!("{prefix}-");
        self.ops
            .values()
            .filter(|op| op.node == name && op.state == OpState::Failed)
            .filter(|op| op.key.starts_with(&own))
            .find_map(|op| {
                op.after
                    .iter()
                    .find(|k| {
                        self.ops
                            .get(k.as_str())
                            .is_some_and(|d| d.state == OpState::Failed)
                    })
                    .map(|k| {
                        format!(
                            "{} never ran: {k}, which it came after, did not succeed",
                            op.key
                        )
                    })
            })
    }

    /// Sends `name` back to be planned again: undrained if drained, its primaries back, then
    /// `skipped` in its group, for a later group to take it.
    fn send_back(&mut self, name: &str, why: String, now_ms: u64) {
        self.replanned.insert(name.to_owned(), why);
        self.set_step(name, NodeStep::Undrain, now_ms);
    }

    /// What keeps `name`'s hook from being planned or sent now (`Ok(Some(waiting))`): a
    /// release its group was admitted with has not succeeded yet, or a running instance is
    /// on the node (its move is planned here: an instance started there after the group was
    /// planned moves like a planned one); `Err` when a move failed.
    fn before_hook(
        &mut self,
        name: &str,
        prefix: &str,
        world: &World,
        back: &mut Option<BTreeMap<String, String>>,
        planned: &mut Vec<String>,
    ) -> Result<Option<String>, String> {
        let releasing = self.releases_before_hooks().unwrap_or_default();
        if !releasing.is_empty() {
            return Ok(Some(format!(
                "the undrain of {} to succeed: its group was admitted with them released",
                releasing.join(", ")
            )));
        }
        if let Some(waiting) = self.drain_again(name, prefix, world, planned)? {
            return Ok(Some(waiting));
        }
        let pending = self.plan_moves(name, prefix, world, back, planned)?;
        if !pending.is_empty() {
            return Ok(Some(pending.join(", ")));
        }
        let running = self.running_on(name, world);
        if !running.is_empty() {
            return Ok(Some(format!(
                "{} to leave the node (running on it)",
                running.join(", ")
            )));
        }
        Ok(None)
    }

    /// A node past its drain that Ganeti shows undrained (drained by someone else, who
    /// undrained it since, or undrained behind the campaign's back) is drained again before its
    /// hook: `Ok(Some(waiting))` while that drain is planned or runs, `Err` when it failed,
    /// `Ok(None)` when the node is drained (or is the master, which is never drained). A drain
    /// that succeeded after the node list was read is Ganeti's word to wait for.
    fn drain_again(
        &mut self,
        name: &str,
        prefix: &str,
        world: &World,
        planned: &mut Vec<String>,
    ) -> Result<Option<String>, String> {
        if name == world.master || world.nodes.get(name).is_none_or(|facts| facts.drained) {
            return Ok(None);
        }
        let first = format!("{prefix}-drain");
        let again = format!("{first}-again-");
        let drains: Vec<&CampaignOp> = self
            .ops
            .values()
            .filter(|op| op.node == name && op.kind == OpKind::Drain)
            .filter(|op| op.key == first || op.key.starts_with(&again))
            .collect();
        if let Some(latest) = drains.iter().max_by_key(|op| (op.created_ms, op.key.len())) {
            match latest.state {
                OpState::Planned | OpState::Submitted => {
                    return Ok(Some("the drain job (the node was undrained)".into()));
                }
                OpState::Failed => {
                    return Err(format!(
                        "drain: {}",
                        latest.error.as_deref().unwrap_or("operation failed")
                    ));
                }
                OpState::Succeeded if latest.finished_ms.is_none_or(|t| t >= world.now_ms) => {
                    return Ok(Some("Ganeti to show the node drained".into()));
                }
                OpState::Succeeded => {}
            }
        }
        let key = format!("{again}{}", drains.len() + 1);
        self.plan_op(&key, name, NodeStep::Hook, OpKind::Drain, world.now_ms);
        planned.push(key);
        Ok(Some(
            "the node to be drained again (Ganeti shows it undrained)".into(),
        ))
    }

    /// Whether the hook `op` may be sent now, with what `world` shows (checked again just
    /// before it is sent); why not. Only the hook of a node whose step is its hook, in a
    /// running campaign that holds it, drained (but the master), with the releases its group
    /// was admitted with done and no running instance on the node (but those the plan lets
    /// reboot with it).
    pub fn hook_may_be_sent(&self, op: &CampaignOp, world: &World) -> Result<(), String> {
        if self.state() != CampaignState::Running {
            return Err(format!("the campaign is {}", self.state()));
        }
        let Some(node) = self.node(&op.node) else {
            return Err(format!("{} is in no group", op.node));
        };
        if node.step != NodeStep::Hook || self.hook_key(&op.node).as_deref() != Some(&op.key) {
            return Err(format!("{} is at step {}", op.node, node.step));
        }
        match self.releases_before_hooks() {
            Err(why) => return Err(why),
            Ok(waiting) if !waiting.is_empty() => {
                return Err(format!(
                    "the undrain of {} has not succeeded",
                    waiting.join(", ")
                ));
            }
            Ok(_) => {}
        }
        if op.node != world.master && world.nodes.get(&op.node).is_none_or(|n| !n.drained) {
            return Err(format!("{} is not drained", op.node));
        }
        let running = self.running_on(&op.node, world);
        if !running.is_empty() {
            return Err(format!("{} running on {}", running.join(", "), op.node));
        }
        Ok(())
    }

    /// Notes that a request for the hook `key` goes out now, which its agent may take until
    /// `until_ms` (its expiry plus the clock skew the agent allows): kept as the latest such
    /// moment ([`Record::hooks_sent_until`]).
    pub fn note_hook_sent(&mut self, key: &str, until_ms: u64) {
        let until = self.hooks_sent_until.entry(key.to_owned()).or_default();
        *until = (*until).max(until_ms);
    }

    /// The key of the hook of `name` in its group.
    fn hook_key(&self, name: &str) -> Option<String> {
        let gi = self
            .campaign
            .groups
            .iter()
            .rev()
            .find(|g| g.nodes.iter().any(|n| n.node == name))?
            .index;
        Some(format!("{}-hook", sanitize(&format!("g{gi}-{name}"))))
    }

    /// The hooks recorded but not delivered that must never be sent, each with why: their
    /// node left its hook step (it failed, or went on without it) or is in a later group, the
    /// campaign ended, or it aborts. One a request went out for is canceled only once its
    /// agent can no longer take it ([`HookStop::may_still_run`]).
    pub fn hooks_to_stop(&self) -> Vec<HookStop> {
        let aborting = self.state() == CampaignState::Aborting
            || (self.state() == CampaignState::Paused
                && self.paused_from == Some(CampaignState::Aborting));
        self.ops
            .values()
            .filter(|op| matches!(op.kind, OpKind::Hook { .. }) && op.state == OpState::Planned)
            .filter_map(|op| {
                let step = self.node(&op.node).map(|n| n.step);
                let (why, confirm) = if self.state().is_final() {
                    (format!("the campaign {}", self.state()), false)
                } else if step != Some(NodeStep::Hook)
                    || self.hook_key(&op.node).as_deref() != Some(&op.key)
                {
                    let why = match step {
                        Some(NodeStep::Failed) => format!("{} failed", op.node),
                        Some(step) => format!("{} is at step {step}", op.node),
                        None => format!("{} is in no group", op.node),
                    };
                    (why, false)
                } else if aborting {
                    ("the campaign aborts".to_owned(), true)
                } else {
                    return None;
                };
                Some(HookStop {
                    key: op.key.clone(),
                    why: format!("not sent: {why}"),
                    confirm,
                    sent_until_ms: self.hooks_sent_until.get(&op.key).copied(),
                })
            })
            .collect()
    }

    /// The running instances on `name` that its hook would reboot with it: all but those the
    /// plan lets reboot with it ([`Self::reboots_with_node`]).
    pub fn running_on(&self, name: &str, world: &World) -> Vec<String> {
        world
            .instances
            .iter()
            .filter(|(_, i)| i.running && i.primary == name)
            .filter(|(instance, i)| !self.reboots_with_node(name, instance, i))
            .map(|(instance, _)| instance.clone())
            .collect()
    }

    /// Whether `instance` on `name` reboots with the node as asked: a planned move without a
    /// target for an instance that is not mirrored (the selection flags let it), or, not
    /// planned, an instance with local disks when the campaign ignores non-redundant ones.
    fn reboots_with_node(&self, name: &str, instance: &str, inst: &InstanceNow) -> bool {
        if inst.mirrored {
            return false;
        }
        match self
            .moves
            .get(name)
            .and_then(|m| m.iter().find(|m| m.instance == instance))
        {
            Some(planned) => planned.target.is_none(),
            None => inst.local && self.campaign.request.ignore_non_redundant,
        }
    }

    /// Where an instance running on `name` that the plan did not see may go: its secondary
    /// (DRBD: `None`), or the node with the most free memory that fits it, neither drained nor
    /// offline nor held by this campaign or another holder; why nowhere.
    fn unplanned_target(
        &self,
        name: &str,
        inst: &InstanceNow,
        world: &World,
    ) -> Result<Option<String>, String> {
        let held: BTreeSet<String> = self
            .holds()
            .into_iter()
            .map(|(node, _)| node)
            .chain(
                self.campaign
                    .groups
                    .last()
                    .into_iter()
                    .flat_map(|g| g.nodes.iter().map(|n| n.node.clone())),
            )
            .collect();
        let own = self.holder();
        let usable = |node: &str| {
            node != name
                && !held.contains(node)
                && world
                    .held
                    .get(node)
                    .is_none_or(|holders| holders.iter().all(|h| *h == own))
                && world
                    .nodes
                    .get(node)
                    .is_some_and(|n| !n.drained && !n.offline)
        };
        if inst.mirrored {
            return match inst.secondaries.first() {
                Some(secondary) if usable(secondary) => Ok(None),
                Some(secondary) => Err(format!(
                    "its secondary {secondary} is drained, offline or in the campaign"
                )),
                None => Err("it has no secondary".into()),
            };
        }
        if inst.local {
            return Err("its disks are on the node only".into());
        }
        let Some(memory) = inst.memory else {
            return Err("its memory is unknown".into());
        };
        world
            .nodes
            .iter()
            .filter(|(node, _)| usable(node))
            .filter_map(|(node, now)| {
                now.memory_free
                    .filter(|free| *free >= memory)
                    .map(|free| (free, node))
            })
            .max_by(|a, b| a.0.cmp(&b.0).then_with(|| b.1.cmp(a.1)))
            .map(|(_, node)| Some(node.clone()))
            .ok_or_else(|| {
                format!(
                    "no node outside the campaign's is undrained, held by no one else and has {memory} MiB free"
                )
            })
    }

    /// An aborting campaign sends a node that has not reached its hook back: undrain and
    /// primaries back, then `skipped`.
    fn abort_node(&mut self, name: &str, now_ms: u64) {
        self.aborted_nodes.insert(name.to_owned());
        self.set_step(name, NodeStep::Undrain, now_ms);
    }

    /// Plans the node's moves still needed (not while aborting) and returns what they wait
    /// for; the why of a failed one. Called from the drain step too: the moves need not wait
    /// for the drain job (it only keeps new instances off the node), so they run alongside it.
    fn plan_moves(
        &mut self,
        name: &str,
        prefix: &str,
        world: &World,
        back: &mut Option<BTreeMap<String, String>>,
        planned: &mut Vec<String>,
    ) -> Result<Vec<String>, String> {
        let now = world.now_ms;
        let aborting = self.state() == CampaignState::Aborting;
        let mut moves = self.moves.get(name).cloned().unwrap_or_default();
        let full = self.campaign.request.full_evacuation;
        let back = back.get_or_insert_with(|| self.pending_back());
        debug_assert_eq!(*back, self.pending_back(), "kept by `advance`");
        let mut pending = Vec::new();
        // Instances running on the node that the plan did not see (started there after the
        // group was planned: by their owner, or Ganeti's watcher) move as planned ones do, and
        // come back with the node's own; where none can go safely, the node waits.
        let mut unplanned = BTreeSet::new();
        for (instance, inst) in &world.instances {
            if !inst.running
                || inst.primary != name
                || moves.iter().any(|m| m.instance == *instance)
                || self.reboots_with_node(name, instance, inst)
            {
                continue;
            }
            if back.get(instance).is_some_and(|home| home != name) {
                // Migrating back to an earlier group's node: waited for below.
                moves.push(PlannedMove {
                    instance: instance.clone(),
                    target: None,
                    new_secondary: None,
                });
                continue;
            }
            match self.unplanned_target(name, inst, world) {
                Ok(target) => {
                    unplanned.insert(instance.clone());
                    moves.push(PlannedMove {
                        instance: instance.clone(),
                        target,
                        new_secondary: None,
                    });
                }
                Err(why) => pending.push(format!(
                    "a safe target for {instance}, started on the node after its group was \
                     planned ({why})"
                )),
            }
        }
        for mv in &moves {
            let Some(inst) = world.instances.get(&mv.instance) else {
                continue;
            };
            // An instance migrating back to a node of an earlier group is not moved again
            // until it is there (then it is no longer on this node).
            if let Some(home) = back.get(&mv.instance)
                && home != name
                && inst.primary != *home
            {
                pending.push(format!("{} to be back on {home}", mv.instance));
                continue;
            }
            let (key, kind, what) = if inst.running && inst.primary == name {
                let target = if inst.mirrored {
                    None
                } else {
                    mv.target.clone()
                };
                if !inst.mirrored && target.is_none() {
                    // Nowhere planned: the planner leaves it (it reboots with the node, as
                    // the selection flags asked).
                    continue;
                }
                (
                    sanitize(&format!("{prefix}-move-{}-migrate", mv.instance)),
                    OpKind::Migrate {
                        instance: mv.instance.clone(),
                        target,
                    },
                    format!("migration of {}", mv.instance),
                )
            } else if let (true, true, Some(secondary)) = (
                full,
                inst.secondaries.iter().any(|s| s == name),
                mv.new_secondary.as_ref(),
            ) {
                (
                    sanitize(&format!("{prefix}-move-{}-secondary", mv.instance)),
                    OpKind::ReplaceSecondary {
                        instance: mv.instance.clone(),
                        secondary: secondary.clone(),
                    },
                    format!("new secondary of {}", mv.instance),
                )
            } else {
                continue;
            };
            match self.op_outcome(&key) {
                Err(why) => return Err(format!("{what}: {why}")),
                Ok(None) if !aborting => {
                    self.plan_op(&key, name, NodeStep::MovePrimaries, kind, now);
                    planned.push(key);
                    pending.push(what);
                    if unplanned.contains(&mv.instance)
                        && let Some(node) = self.node_mut(name)
                        && !node.original_primaries.contains(&mv.instance)
                    {
                        node.original_primaries.push(mv.instance.clone());
                    }
                }
                // Succeeded: done, whether or not the instance list (read earlier in the
                // round) shows it yet; unless a full evacuation still replaces the secondary
                // once the migration shows.
                Ok(Some(true)) if !(full && mv.new_secondary.is_some()) => {}
                // Succeeded but Ganeti does not show it yet, or in flight.
                Ok(_) => pending.push(what),
            }
        }
        Ok(pending)
    }

    /// Plans the migrations of the node's original primaries back to it and returns those
    /// not back yet; the why of a failed one. Called from the undrain step too: they are
    /// submitted to run once the undrain job has succeeded (Ganeti's job dependencies).
    fn plan_back(
        &mut self,
        name: &str,
        prefix: &str,
        node: &CampaignNode,
        world: &World,
        planned: &mut Vec<String>,
    ) -> Result<Vec<String>, String> {
        let mut pending = Vec::new();
        for instance in &node.original_primaries {
            let Some(inst) = world.instances.get(instance) else {
                continue;
            };
            if !inst.running || inst.primary == name {
                continue;
            }
            let (suffix, kind) = if !inst.mirrored {
                (
                    "migrate",
                    OpKind::Migrate {
                        instance: instance.clone(),
                        target: Some(name.to_owned()),
                    },
                )
            } else if inst.secondaries.iter().any(|s| s == name) {
                (
                    "migrate",
                    OpKind::Migrate {
                        instance: instance.clone(),
                        target: None,
                    },
                )
            } else {
                (
                    "secondary",
                    OpKind::ReplaceSecondary {
                        instance: instance.clone(),
                        secondary: name.to_owned(),
                    },
                )
            };
            let key = sanitize(&format!("{prefix}-back-{instance}-{suffix}"));
            match self.op_outcome(&key) {
                Err(why) => return Err(format!("migrating {instance} back: {why}")),
                Ok(None) => {
                    self.plan_op(&key, name, NodeStep::MigrateBack, kind, world.now_ms);
                    planned.push(key);
                }
                // A migration back that succeeded is done (the instance list may have been
                // read before it ended); a new secondary is followed by the migration.
                Ok(Some(true)) if matches!(kind, OpKind::Migrate { .. }) => continue,
                Ok(Some(_)) => {}
            }
            pending.push(instance.clone());
        }
        Ok(pending)
    }

    fn advance_node(
        &mut self,
        gi: usize,
        name: &str,
        world: &World,
        back: &mut Option<BTreeMap<String, String>>,
        planned: &mut Vec<String>,
    ) {
        let now = world.now_ms;
        let Some(node) = self.node(name).cloned() else {
            return;
        };
        if let Some(deadline) = node.step_deadline_ms
            && now > deadline
        {
            // Late: the step may still end this round; if it does not, the node fails.
            let mut trial = self.clone();
            let mut trial_planned = Vec::new();
            trial.advance_step(gi, name, &node, world, back, &mut trial_planned);
            if trial.node(name).map(|n| n.step) != Some(node.step) {
                *self = trial;
                planned.extend(trial_planned);
                return;
            }
            let limit = self.campaign.request.timeouts.of_ms(node.step).unwrap_or(0) / 1000;
            let waiting = trial
                .node(name)
                .and_then(|n| n.waiting_for.clone())
                .or(node.waiting_for.clone())
                .unwrap_or_else(|| "no progress".to_owned());
            let why = format!(
                "step {} did not finish within {limit}s (waiting for {waiting})",
                node.step
            );
            self.fail(name, why, now, planned);
            return;
        }
        self.advance_step(gi, name, &node, world, back, planned);
    }

    fn advance_step(
        &mut self,
        gi: usize,
        name: &str,
        node: &CampaignNode,
        world: &World,
        back: &mut Option<BTreeMap<String, String>>,
        planned: &mut Vec<String>,
    ) {
        let now = world.now_ms;
        let aborting = self.state() == CampaignState::Aborting;
        let prefix = sanitize(&format!("g{gi}-{name}"));
        let Some(facts) = world.nodes.get(name) else {
            self.wait(name, "the node to be in the cluster".into());
            return;
        };
        // A node before its hook whose group was admitted on a release that did not succeed,
        // or whose operation never ran because one it came after did not succeed, is planned
        // again (on the cluster as it is then) once nothing of it runs: not a failure of it.
        if matches!(
            node.step,
            NodeStep::Drain | NodeStep::MovePrimaries | NodeStep::Hook
        ) && !self.ops.contains_key(&format!("{prefix}-hook"))
            && let Some(why) = self.replan_why(gi, name, &prefix)
        {
            if self.node_in_flight(name) {
                self.wait(
                    name,
                    format!("its operations in flight to end, to be planned again: {why}"),
                );
            } else if aborting {
                self.abort_node(name, now);
            } else {
                self.send_back(name, why, now);
            }
            return;
        }
        match node.step {
            NodeStep::Drain => {
                if aborting && !self.node_in_flight(name) {
                    self.abort_node(name, now);
                    return;
                }
                let key = format!("{prefix}-drain");
                if name == world.master && !self.ops.contains_key(&key) {
                    self.set_step(name, NodeStep::MovePrimaries, now);
                    return;
                }
                match self.op_outcome(&key) {
                    Err(why) => self.fail(name, format!("drain: {why}"), now, planned),
                    Ok(None) if facts.drained => self.set_step(name, NodeStep::MovePrimaries, now),
                    Ok(None) => {
                        self.plan_op(&key, name, NodeStep::Drain, OpKind::Drain, now);
                        planned.push(key);
                        self.wait(name, "the drain job".into());
                    }
                    // The job's success is Ganeti's word (the node list may have been read
                    // before it ended).
                    Ok(Some(true)) => self.set_step(name, NodeStep::MovePrimaries, now),
                    Ok(Some(_)) => self.wait(name, "the drain job".into()),
                }
                if self.node(name).map(|n| n.step) == Some(NodeStep::Drain)
                    && let Err(why) = self.plan_moves(name, &prefix, world, back, planned)
                {
                    self.fail(name, why, now, planned);
                }
            }
            NodeStep::MovePrimaries => {
                let pending = match self.plan_moves(name, &prefix, world, back, planned) {
                    Ok(pending) => pending,
                    Err(why) => {
                        self.fail(name, why, now, planned);
                        return;
                    }
                };
                if aborting && !self.node_in_flight(name) {
                    self.abort_node(name, now);
                } else if pending.is_empty() {
                    self.set_step(name, NodeStep::Hook, now);
                } else {
                    self.wait(name, pending.join(", "));
                }
            }
            NodeStep::Hook => {
                let key = format!("{prefix}-hook");
                let boot_now = world.agents.get(name).and_then(|a| a.boot_id.clone());
                let rebooted = node.boot_id_before.is_some()
                    && boot_now.is_some()
                    && boot_now != node.boot_id_before;
                let op = self.ops.get(&key);
                let undelivered = op.is_some_and(|op| op.state == OpState::Planned);
                let stopped = op.is_some_and(|op| op.canceled);
                match self.op_outcome(&key) {
                    // Stopped by the abort before the agent had it: the node goes back.
                    Err(_) if aborting && stopped && !rebooted => self.abort_node(name, now),
                    Err(why) if !rebooted => {
                        self.fail(name, format!("hook: {why}"), now, planned);
                    }
                    Ok(None) if aborting => self.abort_node(name, now),
                    Ok(None) => {
                        match self.before_hook(name, &prefix, world, back, planned) {
                            Err(why) => {
                                self.fail(name, why, now, planned);
                                return;
                            }
                            Ok(Some(waiting)) => {
                                self.wait(name, waiting);
                                return;
                            }
                            Ok(None) => {}
                        }
                        let Some(boot_id) = boot_now else {
                            self.wait(name, "a fresh report of its agent with its boot id".into());
                            return;
                        };
                        let group = self.campaign.groups.last();
                        let context = HookContext {
                            kind: HOOK_CONTEXT_KIND.to_owned(),
                            campaign: self.campaign.id.clone(),
                            node: name.to_owned(),
                            hook: self.campaign.request.hook.clone(),
                            group: gi,
                            groups_total: self.campaign.groups_total(),
                            group_nodes: group
                                .map(|g| g.nodes.iter().map(|n| n.node.clone()).collect())
                                .unwrap_or_default(),
                            reboot_required: world.agents.get(name).and_then(|a| a.reboot_required),
                            reason: self.campaign.request.reason.clone(),
                        };
                        let request_id = Uuid::new_v4().to_string();
                        if let Some(n) = self.node_mut(name) {
                            n.boot_id_before = Some(boot_id);
                        }
                        self.plan_op(
                            &key,
                            name,
                            NodeStep::Hook,
                            OpKind::Hook {
                                request_id,
                                context,
                            },
                            now,
                        );
                        planned.push(key);
                        self.wait(name, "the hook".into());
                    }
                    _ if rebooted => self.set_step(name, NodeStep::WaitHealthy, now),
                    Ok(Some(true)) => self.set_step(name, NodeStep::WaitHealthy, now),
                    // Recorded, not delivered: an abort stops it (once a request that went
                    // out can no longer be taken, [`HookStop::may_still_run`]); until it is
                    // sent, what would keep it from being sent is seen to (instances moved
                    // away).
                    _ if undelivered && aborting => {
                        let waiting = match self.hooks_sent_until.get(&key) {
                            Some(until) if *until >= now => format!(
                                "the hook to be stopped: the campaign aborts, and a request sent \
                                 for it may still reach its agent until {until} (Unix ms)"
                            ),
                            _ => "the hook to be stopped: the campaign aborts".to_owned(),
                        };
                        self.wait(name, waiting);
                    }
                    _ if undelivered => match self.before_hook(name, &prefix, world, back, planned)
                    {
                        Err(why) => self.fail(name, why, now, planned),
                        Ok(Some(waiting)) => self.wait(name, format!("{waiting}, then the hook")),
                        Ok(None) => self.wait(name, "the hook".into()),
                    },
                    _ => self.wait(name, "the hook".into()),
                }
            }
            NodeStep::WaitHealthy => {
                let key = format!("{prefix}-hook");
                let no_reboot = self.ops.get(&key).is_some_and(|op| op.no_reboot);
                let agent = world.agents.get(name);
                let since = node.step_started_ms.unwrap_or(now);
                let rebooted = no_reboot
                    || agent
                        .is_some_and(|a| a.boot_id.is_some() && a.boot_id != node.boot_id_before);
                let problems: Vec<&str> = world
                    .storage
                    .iter()
                    .filter(|(nodes, _)| nodes.contains(name))
                    .map(|(_, what)| what.as_str())
                    .collect();
                // A node that came back asking for a repair (a report of this boot, or one
                // collected after a hook that does not reboot) is node repair's: the campaign
                // gives it up now instead of holding it until the step's timeout.
                let asks = agent
                    .filter(|a| rebooted && (!no_reboot || a.collected_at_ms >= since))
                    .and_then(|a| a.asks);
                if let Some(asks) = asks {
                    self.fail(
                        name,
                        format!(
                            "came back with a verified `{}` verdict: node repair takes it over",
                            asks.as_str()
                        ),
                        now,
                        planned,
                    );
                    return;
                }
                let missing = if !rebooted {
                    "a new boot id".to_owned()
                } else if !agent.is_some_and(|a| a.ok) {
                    "a fresh signed Ok verdict".to_owned()
                } else if no_reboot && agent.is_some_and(|a| a.collected_at_ms < since) {
                    "a verdict collected after the hook".to_owned()
                } else if facts.offline {
                    "Ganeti to see the node online".to_owned()
                } else if !problems.is_empty() {
                    format!("storage to be whole ({})", problems.join("; "))
                } else {
                    String::new()
                };
                if missing.is_empty() {
                    self.set_step(name, NodeStep::Undrain, now);
                } else {
                    self.wait(name, missing);
                }
            }
            NodeStep::Undrain => {
                let key = format!("{prefix}-undrain");
                match self.op_outcome(&key) {
                    Err(why) => self.fail(name, format!("undrain: {why}"), now, planned),
                    Ok(None) if !facts.drained => self.set_step(name, NodeStep::MigrateBack, now),
                    Ok(None) => {
                        self.plan_op(&key, name, NodeStep::Undrain, OpKind::Undrain, now);
                        planned.push(key.clone());
                        self.wait(name, "the undrain job".into());
                    }
                    Ok(Some(true)) => self.set_step(name, NodeStep::MigrateBack, now),
                    Ok(Some(_)) => self.wait(name, "the undrain job".into()),
                }
                if self.node(name).map(|n| n.step) == Some(NodeStep::Undrain)
                    && self.ops.contains_key(&key)
                    && let Err(why) = self.plan_back(name, &prefix, node, world, planned)
                {
                    self.fail(name, why, now, planned);
                }
            }
            NodeStep::MigrateBack => {
                let pending = match self.plan_back(name, &prefix, node, world, planned) {
                    Ok(pending) => pending,
                    Err(why) => {
                        self.fail(name, why, now, planned);
                        return;
                    }
                };
                if pending.is_empty() {
                    let replanned = self.replanned.get(name).cloned();
                    let end = if self.aborted_nodes.contains(name) || replanned.is_some() {
                        NodeStep::Skipped
                    } else {
                        NodeStep::Done
                    };
                    self.set_step(name, end, now);
                    if let Some(why) = replanned {
                        self.wait(name, format!("to be planned again: {why}"));
                    }
                } else {
                    self.wait(name, format!("{} back", pending.join(", ")));
                }
            }
            NodeStep::Pending | NodeStep::Done | NodeStep::Failed | NodeStep::Skipped => {}
        }
    }
}

/// What the campaigns of `records` (each with its operations) hold in force: disrupted, the
/// nodes of the unfinished ones and those an operation in flight acts on ([`Record::holds`]);
/// touched, the nodes an unfinished one migrates primaries back to ([`Record::touched`]); left,
/// the drained flags their jobs set or cleared ([`Record::flag_changes`]).
pub fn held(records: &[Record]) -> crate::gate::Holds {
    crate::gate::Holds {
        disrupted: records.iter().flat_map(Record::holds).collect(),
        touched: records
            .iter()
            .filter(|r| !r.state().is_final())
            .flat_map(Record::touched)
            .collect(),
        left: records.iter().flat_map(Record::flag_changes).collect(),
    }
}

/// The planned moves of one reboot group of a roll [`nodecare_roll::Plan`], by node name.
pub fn group_moves(
    cluster: &nodecare_roll::Cluster,
    group: &nodecare_roll::RebootGroup,
) -> (Vec<String>, BTreeMap<String, Vec<PlannedMove>>) {
    let name = |i: usize| cluster.nodes.get(i).map(|n| n.name.clone());
    let nodes: Vec<String> = group.nodes.iter().filter_map(|&i| name(i)).collect();
    let mut moves: BTreeMap<String, Vec<PlannedMove>> = BTreeMap::new();
    for mv in &group.moves {
        let Some(instance) = cluster.instances.get(mv.instance) else {
            continue;
        };
        let (Some(primary), Some(target)) = (name(instance.pnode), name(mv.primary)) else {
            continue;
        };
        let new_secondary = mv.secondary.and_then(name);
        let planned = PlannedMove {
            instance: instance.name.clone(),
            target: (target != primary).then(|| target.clone()),
            new_secondary: new_secondary.clone(),
        };
        // The move serves the group's node it leaves: its primary, or its secondary when only
        // the secondary moves (full evacuation).
        let owner = if nodes.contains(&primary) {
            Some(primary)
        } else {
            instance
                .snode
                .and_then(name)
                .filter(|secondary| nodes.contains(secondary))
        };
        if let Some(owner) = owner {
            moves.entry(owner).or_default().push(planned);
        }
    }
    (nodes, moves)
}

/// The roll planner's cluster model of the cluster as the coordinator reads it.
pub fn roll_cluster(
    nodes: &[crate::ganeti::Node],
    instances: &[crate::ganeti::Instance],
    groups: &[crate::ganeti::Group],
    master: &str,
) -> nodecare_roll::Cluster {
    use nodecare_roll::cluster::{Group, Instance, InstanceStatus, Node};
    let mut cluster = nodecare_roll::Cluster::default();
    let mut group_index: BTreeMap<&str, usize> = BTreeMap::new();
    for group in groups {
        group_index.insert(group.uuid.as_str(), cluster.groups.len());
        cluster.groups.push(Group {
            name: group.name.clone(),
            uuid: group.uuid.clone(),
            alloc_policy: "preferred".into(),
            tags: group.tags.clone(),
        });
    }
    let mut node_index: BTreeMap<&str, usize> = BTreeMap::new();
    for node in nodes {
        let group = match group_index.get(node.group.as_str()) {
            Some(&g) => g,
            None => {
                group_index.insert(node.group.as_str(), cluster.groups.len());
                cluster.groups.push(Group {
                    name: node.group.clone(),
                    uuid: node.group.clone(),
                    alloc_policy: "preferred".into(),
                    tags: Vec::new(),
                });
                cluster.groups.len() - 1
            }
        };
        node_index.insert(node.name.as_str(), cluster.nodes.len());
        let total = node.memory_total.unwrap_or(0);
        cluster.nodes.push(Node {
            name: node.name.clone(),
            t_mem: total as f64,
            n_mem: 0,
            f_mem: i64::try_from(node.memory_free.unwrap_or(0)).unwrap_or(i64::MAX),
            t_dsk: 1_048_576.0,
            f_dsk: 1_048_576,
            t_cpu: 8.0,
            offline: node.offline,
            master: node.name == master,
            group,
            spindles: 1,
            tags: node.tags.clone(),
            excl_stor: false,
            free_spindles: 0,
            nos_cpu: 1,
            cpu_speed: 1.0,
        });
    }
    for instance in instances {
        let Some(&pnode) = node_index.get(instance.primary_node.as_str()) else {
            continue;
        };
        let snode = instance
            .secondary_nodes
            .first()
            .and_then(|s| node_index.get(s.as_str()).copied());
        let status =
            InstanceStatus::parse(&instance.status).unwrap_or(if instance.admin_state == "up" {
                InstanceStatus::ErrorDown
            } else {
                InstanceStatus::AdminDown
            });
        cluster.instances.push(Instance {
            name: instance.name.clone(),
            mem: i64::try_from(instance.memory.unwrap_or(0)).unwrap_or(i64::MAX),
            dsk: 0,
            vcpus: 1,
            status,
            auto_balance: true,
            pnode,
            snode,
            template: instance.disk_template.clone(),
            tags: instance.tags.clone(),
            spindle_use: 1,
            spindles: None,
            forthcoming: false,
        });
    }
    cluster
}

/// Gives a campaign request the coordinator's failure domains, with which every campaign is
/// planned: the gate lets one failure domain be disrupted at a time, so a reboot group spanning
/// two of them could never start. A request naming none adopts them; one naming others is
/// refused, saying why (`POST /1/maintenance` answers `400`).
pub fn adopt_failure_domains(
    request: &mut CampaignRequest,
    coordinator: &crate::gate::DomainSource,
) -> Result<(), String> {
    if let Some(asked) = request.failure_domains.as_deref()
        && crate::gate::DomainSource::parse(asked.trim()).as_ref() != Ok(coordinator)
    {
        return Err(format!(
            "failure_domains: {asked:?} are not the coordinator's failure domains ({:?}, its \
             `failure_domains`): a campaign is planned with the coordinator's, whose gate lets \
             one failure domain be disrupted at a time; leave --failure-domains out or give {:?}",
            coordinator.as_str(),
            coordinator.as_str()
        ));
    }
    request.failure_domains = Some(coordinator.as_str().to_owned());
    Ok(())
}

/// The planner's options for a campaign request, planned with the coordinator's failure
/// domains `domains` whatever the request says (see [`adopt_failure_domains`]).
pub fn roll_options(
    request: &CampaignRequest,
    domains: &crate::gate::DomainSource,
) -> Result<nodecare_roll::RollOptions, String> {
    let failure_domains = Some(match domains {
        crate::gate::DomainSource::NodeGroup => nodecare_roll::FailureDomains::NodeGroup,
        crate::gate::DomainSource::TagPrefix(prefix) => {
            nodecare_roll::FailureDomains::TagPrefix(prefix.clone())
        }
    });
    Ok(nodecare_roll::RollOptions {
        offline_nodes: request.offline.clone(),
        group: request.group.clone(),
        node_tags: request.node_tags.clone(),
        skip_non_redundant: request.skip_non_redundant,
        ignore_non_redundant: request.ignore_non_redundant,
        full_evacuation: request.full_evacuation,
        failure_domains,
        ..nodecare_roll::RollOptions::default()
    }
    .with_default_budgets())
}

#[cfg(test)]
#[path = "campaign_tests.rs"]
mod tests;
