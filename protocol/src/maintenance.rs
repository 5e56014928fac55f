//! Rolling maintenance campaigns: the wire types of the coordinator's `/1/maintenance` API and
//! of the maintenance hook's stdin.
//!
//! A campaign reboots (or otherwise maintains) a selection of nodes, one reboot group at a time:
//! per group it drains the nodes, moves their primaries away, runs the maintenance hook on each
//! node through its agent, waits until every node is back and healthy, undrains them and
//! migrates the original primaries back. The selection flags are those of `nodecare roll`.
//!
//! - `POST /1/maintenance` takes a [`CampaignRequest`] and answers `201` with the [`Campaign`].
//! - `GET /1/maintenance` answers a [`CampaignList`], `GET /1/maintenance/<id>` one [`Campaign`].
//! - `POST /1/maintenance/<id>/pause|resume|abort` (no body) answers the [`Campaign`] as it is
//!   after the command.
//!
//! Ids are uuids in their hyphenated text form; times are Unix milliseconds.

use serde::{Deserialize, Serialize};

use crate::verdict::is_valid_command_name;

/// Where the coordinator serves campaigns.
pub const MAINTENANCE_PATH: &str = "/1/maintenance";

/// A line of exactly this text on the hook's standard output says that the hook did not reboot
/// the node (nothing needed it): the coordinator then does not wait for a new boot id.
pub const HOOK_NO_REBOOT_LINE: &str = "nodecare:no-reboot";

/// Longest accepted step timeout, in seconds (one day).
pub const MAX_STEP_TIMEOUT_S: u64 = 86_400;

/// How long each step of a node may take, in seconds. A node whose step outlives its timeout
/// fails (see [`Failure`]). Every field has a default, so a request may give only some.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StepTimeouts {
    /// Draining the node (the Ganeti job that sets it drained).
    pub drain_s: u64,
    /// Moving its primaries away (migrations, and secondary replacements with
    /// `full_evacuation`).
    pub move_s: u64,
    /// The maintenance hook, from its submission to its end (or the node going away).
    pub hook_s: u64,
    /// From the hook's end until the node is back and healthy (new boot id, fresh `Ok` verdict,
    /// Ganeti sees it online, storage whole).
    pub healthy_s: u64,
    /// Undraining the node.
    pub undrain_s: u64,
    /// Migrating the original primaries back.
    pub migrate_back_s: u64,
}

impl Default for StepTimeouts {
    fn default() -> Self {
        Self {
            drain_s: 300,
            move_s: 3600,
            hook_s: 1800,
            healthy_s: 1800,
            undrain_s: 300,
            migrate_back_s: 3600,
        }
    }
}

impl StepTimeouts {
    /// The timeout of `step`, in milliseconds (`None` for steps that do not wait).
    pub fn of_ms(&self, step: NodeStep) -> Option<u64> {
        let s = match step {
            NodeStep::Drain => self.drain_s,
            NodeStep::MovePrimaries => self.move_s,
            NodeStep::Hook => self.hook_s,
            NodeStep::WaitHealthy => self.healthy_s,
            NodeStep::Undrain => self.undrain_s,
            NodeStep::MigrateBack => self.migrate_back_s,
            NodeStep::Pending | NodeStep::Done | NodeStep::Failed | NodeStep::Skipped => {
                return None;
            }
        };
        Some(s.saturating_mul(1000))
    }

    fn validate(&self) -> Result<(), String> {
        for (name, value) in [
            ("drain_s", self.drain_s),
            ("move_s", self.move_s),
            ("hook_s", self.hook_s),
            ("healthy_s", self.healthy_s),
            ("undrain_s", self.undrain_s),
            ("migrate_back_s", self.migrate_back_s),
        ] {
            if value == 0 || value > MAX_STEP_TIMEOUT_S {
                return Err(format!(
                    "timeouts.{name}: {value} is not between 1 and {MAX_STEP_TIMEOUT_S} seconds"
                ));
            }
        }
        Ok(())
    }
}

/// `POST /1/maintenance`: start a campaign (`nodecare roll --execute`). The selection fields
/// mean what the `nodecare roll` flags of the same names mean.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CampaignRequest {
    /// `-G`: only this node group (name or uuid).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "crate::limits::optional_name"
    )]
    pub group: Option<String>,
    /// `-O`: nodes to treat as offline (left out of the campaign; at most
    /// [`crate::limits::MAX_LIST_ENTRIES`]).
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "crate::limits::names"
    )]
    pub offline: Vec<String>,
    /// `--node-tags`: only nodes with one of these tags (at most
    /// [`crate::limits::MAX_LIST_ENTRIES`]).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "crate::limits::optional_names"
    )]
    pub node_tags: Option<Vec<String>>,
    /// `--failure-domains`: `group`, or a node tag prefix such as `rack:`.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "crate::limits::optional_name"
    )]
    pub failure_domains: Option<String>,
    /// `--skip-non-redundant`.
    #[serde(default)]
    pub skip_non_redundant: bool,
    /// `--ignore-non-redundant`.
    #[serde(default)]
    pub ignore_non_redundant: bool,
    /// `--full-evacuation`: also move the secondaries off the nodes.
    #[serde(default)]
    pub full_evacuation: bool,
    /// The maintenance hook: a command of the nodes' repair whitelist (`reboot`,
    /// `apt-upgrade-and-reboot`), run with the [`HookContext`] on stdin.
    pub hook: String,
    /// `--only-if-required`: only nodes whose agent reports that a reboot is required (the
    /// reboot sentinel).
    #[serde(default)]
    pub only_if_required: bool,
    /// `--continue-on-failure`: a node that does not come back healthy stays drained and the
    /// campaign goes on with the others; without it the campaign fails.
    #[serde(default)]
    pub continue_on_failure: bool,
    /// Per step timeouts.
    #[serde(default)]
    pub timeouts: StepTimeouts,
    /// Why, for people (in the jobs' reasons and the log; at most
    /// [`crate::limits::MAX_TEXT_BYTES`]).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "crate::limits::optional_text"
    )]
    pub reason: Option<String>,
    /// `--allow-unpinned-machine-version`: start although running KVM instances have no pinned
    /// `machine_version` (recorded in [`Campaign::overrides`] and the jobs' reasons).
    #[serde(default, skip_serializing_if = "is_false")]
    pub allow_unpinned_machine_version: bool,
    /// `--allow-mixed-versions`: start although the nodes run different Ganeti versions
    /// (recorded as above).
    #[serde(default, skip_serializing_if = "is_false")]
    pub allow_mixed_versions: bool,
    /// `--dry-run`: only check (the answer is a [`CampaignCheck`]); nothing starts.
    #[serde(default, skip_serializing_if = "is_false")]
    pub dry_run: bool,
}

#[expect(
    clippy::trivially_copy_pass_by_ref,
    reason = "serde's skip_serializing_if"
)]
const fn is_false(value: &bool) -> bool {
    !*value
}

/// The answer of a dry run (`POST /1/maintenance` with `dry_run`): what the coordinator checks
/// before a campaign starts, against the cluster as it is now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CampaignCheck {
    /// Whether the campaign would be refused.
    pub refused: bool,
    /// The refusal's message (empty when it would start).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
    /// Running KVM instances without a pinned `machine_version`.
    #[serde(default)]
    pub unpinned_machine_version: Vec<String>,
    /// The Ganeti versions known per node when they differ (version → nodes).
    #[serde(default)]
    pub mixed_versions: std::collections::BTreeMap<String, Vec<String>>,
    /// The findings the request's flags override, as the campaign would record them.
    #[serde(default)]
    pub overrides: Vec<String>,
}

impl CampaignRequest {
    /// A request for `hook` with every other field at its default.
    pub fn new(hook: impl Into<String>) -> Self {
        Self {
            group: None,
            offline: Vec::new(),
            node_tags: None,
            failure_domains: None,
            skip_non_redundant: false,
            ignore_non_redundant: false,
            full_evacuation: false,
            hook: hook.into(),
            only_if_required: false,
            continue_on_failure: false,
            timeouts: StepTimeouts::default(),
            reason: None,
            allow_unpinned_machine_version: false,
            allow_mixed_versions: false,
            dry_run: false,
        }
    }

    /// Checks the fields, naming the first bad one.
    pub fn validate(&self) -> Result<(), String> {
        if self.hook.len() > 255 || !is_valid_command_name(&self.hook) {
            return Err(format!(
                "hook: {:?} is not a repair command name (^[A-Za-z0-9_-]+$)",
                self.hook
            ));
        }
        crate::limits::check_list("offline", &self.offline)?;
        if let Some(tags) = &self.node_tags {
            crate::limits::check_list("node_tags", tags)?;
        }
        for (field, value) in [
            ("group", &self.group),
            ("failure_domains", &self.failure_domains),
        ] {
            if let Some(value) = value {
                crate::limits::check_len(field, value, crate::limits::MAX_NAME_BYTES)?;
            }
        }
        if let Some(reason) = &self.reason {
            crate::limits::check_len("reason", reason, crate::limits::MAX_TEXT_BYTES)?;
        }
        if self.skip_non_redundant && self.ignore_non_redundant {
            return Err(
                "skip_non_redundant and ignore_non_redundant exclude each other".to_owned(),
            );
        }
        if self.group.as_ref().is_some_and(|g| g.trim().is_empty()) {
            return Err("group: empty".into());
        }
        if self
            .failure_domains
            .as_ref()
            .is_some_and(|d| d.trim().is_empty())
        {
            return Err("failure_domains: empty (give `group` or a tag prefix)".into());
        }
        if self
            .node_tags
            .as_ref()
            .is_some_and(|tags| tags.is_empty() || tags.iter().any(|t| t.trim().is_empty()))
        {
            return Err("node_tags: empty tag".into());
        }
        if self.offline.iter().any(|n| n.trim().is_empty()) {
            return Err("offline: empty node name".into());
        }
        self.timeouts.validate()
    }
}

/// Where a campaign is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CampaignState {
    /// Working through its groups.
    Running,
    /// Paused by an operator: the steps in flight finish, no new step starts.
    Paused,
    /// Aborted by an operator: the steps in flight finish, then nodes whose primaries are back
    /// are undrained and the campaign stops.
    Aborting,
    /// Every node is done (or, with `continue_on_failure`, failed and left drained).
    Completed,
    /// A node did not come back healthy (see [`Campaign::failure`]).
    Failed,
    /// Stopped by an operator's abort.
    Aborted,
}

impl CampaignState {
    /// The wire spelling.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Running => "running",
            Self::Paused => "paused",
            Self::Aborting => "aborting",
            Self::Completed => "completed",
            Self::Failed => "failed",
            Self::Aborted => "aborted",
        }
    }

    /// Whether the campaign is over.
    pub const fn is_final(self) -> bool {
        matches!(self, Self::Completed | Self::Failed | Self::Aborted)
    }
}

impl std::fmt::Display for CampaignState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Where one node of a campaign is. The steps run in this order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum NodeStep {
    /// Its group has not started.
    Pending,
    /// Being drained.
    Drain,
    /// Its primaries are moving away.
    MovePrimaries,
    /// The maintenance hook runs.
    Hook,
    /// Waiting for it to be back and healthy.
    WaitHealthy,
    /// Being undrained.
    Undrain,
    /// Its original primaries are migrating back.
    MigrateBack,
    /// Done.
    Done,
    /// It failed (see its `failure`); with `continue_on_failure` it stays drained.
    Failed,
    /// Left out when its group was planned (`only_if_required` and no reboot required, or the
    /// campaign stopped before its group).
    Skipped,
}

impl NodeStep {
    /// The wire spelling.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Drain => "drain",
            Self::MovePrimaries => "move-primaries",
            Self::Hook => "hook",
            Self::WaitHealthy => "wait-healthy",
            Self::Undrain => "undrain",
            Self::MigrateBack => "migrate-back",
            Self::Done => "done",
            Self::Failed => "failed",
            Self::Skipped => "skipped",
        }
    }

    /// Whether the node is finished with (done, failed or skipped).
    pub const fn is_final(self) -> bool {
        matches!(self, Self::Done | Self::Failed | Self::Skipped)
    }
}

impl std::fmt::Display for NodeStep {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a node failed: which node, in which step, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Failure {
    /// The node.
    pub node: String,
    /// The step it failed in.
    pub step: NodeStep,
    /// Why, for people.
    pub why: String,
    /// When.
    pub at_ms: u64,
}

/// One node of a campaign group.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CampaignNode {
    /// The node (its Ganeti name).
    pub node: String,
    /// Its step.
    pub step: NodeStep,
    /// When the step started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step_started_ms: Option<u64>,
    /// When the step times out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step_deadline_ms: Option<u64>,
    /// The instances it was primary of when its group started (migrated back at the end).
    #[serde(default)]
    pub original_primaries: Vec<String>,
    /// The boot id its agent reported before the hook ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub boot_id_before: Option<String>,
    /// What it waits for, for people (`boot id unchanged`, `verdict evacuate`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waiting_for: Option<String>,
    /// Why it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure: Option<Failure>,
}

/// One reboot group of a campaign, as planned when it started.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CampaignGroup {
    /// Its position, from 0.
    pub index: usize,
    /// Its nodes.
    pub nodes: Vec<CampaignNode>,
    /// When it started (admitted by the gate and drained).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_ms: Option<u64>,
    /// When every node finished.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_ms: Option<u64>,
}

/// A campaign, as `GET /1/maintenance/<id>` returns it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Campaign {
    /// The campaign (a uuid).
    pub id: String,
    /// What was asked.
    pub request: CampaignRequest,
    /// The authenticated user who asked.
    pub who: String,
    /// Where it is.
    pub state: CampaignState,
    /// When it was submitted.
    pub created_ms: u64,
    /// When it last changed.
    pub updated_ms: u64,
    /// When it ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_ms: Option<u64>,
    /// The groups started so far, in order; the last one may be in flight.
    pub groups: Vec<CampaignGroup>,
    /// The groups still to run, as last planned (re-planned before each group against the
    /// cluster as it is then): node names per group.
    #[serde(default)]
    pub planned: Vec<Vec<String>>,
    /// The failure that stopped the campaign (state `failed`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure: Option<Failure>,
    /// Nodes that failed and were left drained (`continue_on_failure`).
    #[serde(default)]
    pub failures: Vec<Failure>,
    /// What keeps the next group from starting (the gate's refusal, a planning error), for
    /// people.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blocked_by: Option<String>,
    /// Planner warnings of the last plan (skipped nodes and why).
    #[serde(default)]
    pub warnings: Vec<String>,
    /// What the checks before the start found and the request's flags overrode (e.g.
    /// `allowed unpinned machine_version: inst1`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub overrides: Vec<String>,
}

impl Campaign {
    /// Groups in total: started plus still planned.
    pub fn groups_total(&self) -> usize {
        self.groups.len() + self.planned.len()
    }

    /// Nodes finished with (done, failed or skipped) and nodes in total (started plus planned).
    pub fn nodes_progress(&self) -> (usize, usize) {
        let started = self.groups.iter().flat_map(|g| g.nodes.iter());
        let done = started.clone().filter(|n| n.step.is_final()).count();
        let total = started.count() + self.planned.iter().map(Vec::len).sum::<usize>();
        (done, total)
    }
}

/// `GET /1/maintenance`: every campaign, newest first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CampaignList {
    /// The campaigns.
    pub campaigns: Vec<Campaign>,
}

/// What the maintenance hook gets on stdin (the `input` of its signed repair request).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HookContext {
    /// Always `"maintenance"`: tells the hook it runs for a campaign, not an incident.
    pub kind: String,
    /// The campaign id.
    pub campaign: String,
    /// The node.
    pub node: String,
    /// The hook's name.
    pub hook: String,
    /// The group's position (from 0) and the groups in total as planned now.
    pub group: usize,
    /// Groups in total.
    pub groups_total: usize,
    /// The other nodes of the group.
    pub group_nodes: Vec<String>,
    /// Whether the node's agent reported that a reboot is required.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reboot_required: Option<bool>,
    /// The campaign's reason.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// The `kind` of a [`HookContext`].
pub const HOOK_CONTEXT_KIND: &str = "maintenance";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn minimal_request_decodes_with_defaults() {
        let r: CampaignRequest = serde_json::from_str(r#"{"hook":"reboot"}"#).unwrap();
        assert_eq!(r, CampaignRequest::new("reboot"));
        assert!(r.validate().is_ok());
        let t: StepTimeouts = serde_json::from_str(r#"{"hook_s":5}"#).unwrap();
        assert_eq!(t.hook_s, 5);
        assert_eq!(t.drain_s, StepTimeouts::default().drain_s);
    }

    #[test]
    fn bad_requests_name_the_field() {
        let cases: Vec<(CampaignRequest, &str)> = vec![
            (CampaignRequest::new("re boot"), "hook"),
            (CampaignRequest::new(""), "hook"),
            (
                CampaignRequest {
                    skip_non_redundant: true,
                    ignore_non_redundant: true,
                    ..CampaignRequest::new("reboot")
                },
                "exclude",
            ),
            (
                CampaignRequest {
                    group: Some(" ".into()),
                    ..CampaignRequest::new("reboot")
                },
                "group",
            ),
            (
                CampaignRequest {
                    node_tags: Some(vec![]),
                    ..CampaignRequest::new("reboot")
                },
                "node_tags",
            ),
            (
                CampaignRequest {
                    timeouts: StepTimeouts {
                        healthy_s: 0,
                        ..StepTimeouts::default()
                    },
                    ..CampaignRequest::new("reboot")
                },
                "timeouts.healthy_s",
            ),
        ];
        for (request, field) in cases {
            let err = request.validate().unwrap_err();
            assert!(err.contains(field), "{err} should name {field}");
        }
    }

    #[test]
    fn unknown_request_fields_are_refused() {
        assert!(serde_json::from_str::<CampaignRequest>(r#"{"hook":"reboot","hok":1}"#).is_err());
    }

    #[test]
    fn states_and_steps_spell_as_on_the_wire() {
        for s in [
            CampaignState::Running,
            CampaignState::Paused,
            CampaignState::Aborting,
            CampaignState::Completed,
            CampaignState::Failed,
            CampaignState::Aborted,
        ] {
            assert_eq!(serde_json::to_value(s).unwrap(), s.as_str());
        }
        for s in [
            NodeStep::Pending,
            NodeStep::Drain,
            NodeStep::MovePrimaries,
            NodeStep::Hook,
            NodeStep::WaitHealthy,
            NodeStep::Undrain,
            NodeStep::MigrateBack,
            NodeStep::Done,
            NodeStep::Failed,
            NodeStep::Skipped,
        ] {
            assert_eq!(serde_json::to_value(s).unwrap(), s.as_str());
        }
    }
}
