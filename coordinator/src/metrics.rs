//! The coordinator's `/metrics` (Prometheus text format, via `prometheus-client`).
//!
//! Counters and histograms are recorded where the reconciler acts (rounds, job submissions
//! and failures, incident state changes); the incident and agent gauges are filled from the
//! store and the board at scrape time. Every label has a bounded set of values (states,
//! actions, job kinds, outcomes, node groups): no per-incident series.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Mutex;
use std::time::Duration;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use crate::scrape::AgentStatus;
use crate::store::IntentSpec;
use nodecare_core::incident::{Action, Incident, RepairStatus};
use nodecare_protocol::maintenance::{Campaign, CampaignState, NodeStep};

/// The `Content-Type` of [`CoordinatorMetrics::render`]'s text.
pub use nodecare_daemon::metrics::CONTENT_TYPE;

/// Every incident state, so the incident gauge always has all series.
const STATES: [RepairStatus; 5] = [
    RepairStatus::Noted,
    RepairStatus::Pending,
    RepairStatus::Canceled,
    RepairStatus::Failed,
    RepairStatus::Completed,
];
/// Every action.
const ACTIONS: [Action; 3] = [
    Action::LiveRepair,
    Action::Evacuate,
    Action::EvacuateFailover,
];
/// Every job kind.
pub const JOB_KINDS: [&str; 10] = [
    "drain",
    "tag",
    "untag",
    "migrate",
    "failover",
    "replace-secondary",
    "offline",
    "online",
    "undrain",
    "shutdown",
];
/// Every agent outcome.
pub const AGENT_OUTCOMES: [&str; 4] = ["verified", "stale", "unreachable", "unverifiable"];

type Labels = Vec<(&'static str, String)>;

/// The job kind label of an intent (`None` for repairs, which are not Ganeti jobs).
pub fn job_kind(spec: &IntentSpec) -> Option<&'static str> {
    use nodecare_core::plan::Move;
    match spec {
        IntentSpec::Drain { .. } => Some("drain"),
        IntentSpec::Tag { .. } => Some("tag"),
        IntentSpec::Untag { .. } => Some("untag"),
        IntentSpec::Offline { .. } => Some("offline"),
        IntentSpec::Online { .. } => Some("online"),
        IntentSpec::Undrain { .. } => Some("undrain"),
        IntentSpec::Shutdown { .. } => Some("shutdown"),
        IntentSpec::Move { planned } => Some(match planned {
            Move::Migrate { .. } => "migrate",
            Move::Failover { .. } => "failover",
            Move::ReplaceSecondary { .. } => "replace-secondary",
        }),
        IntentSpec::Repair { .. } => None,
    }
}

/// The agent outcome label of an agent status (`ok` is shown as `verified`).
pub fn agent_outcome(status: &AgentStatus) -> &'static str {
    use nodecare_protocol::status::AgentState;
    match status.state {
        AgentState::Ok => "verified",
        AgentState::Stale => "stale",
        AgentState::Unreachable => "unreachable",
        AgentState::Unverifiable => "unverifiable",
    }
}

/// The coordinator's metrics.
pub struct CoordinatorMetrics {
    registry: Registry,
    /// Serialises gauge refresh + encoding of concurrent scrapes.
    scrape: Mutex<()>,
    /// Node groups ever seen disrupted (their gauge stays, at 0 when no longer disrupted).
    domains: Mutex<std::collections::BTreeSet<String>>,
    rounds: Histogram,
    round_errors: Counter,
    jobs_submitted: Family<Labels, Counter>,
    jobs_failed: Family<Labels, Counter>,
    heal: Histogram,
    incidents: Family<Labels, Gauge>,
    agents: Family<Labels, Gauge>,
    disrupted: Family<Labels, Gauge>,
    budget_in_use: Gauge,
    budget_max: Gauge,
    notifications: Family<Labels, Counter>,
    breaker_open: Gauge,
    grants: Gauge,
    overrides: Gauge,
    window_open: Gauge,
    frozen: Gauge,
    laddered: Family<Labels, Counter>,
    approvals_waiting: Gauge,
    /// The balancing duty's runs and moves.
    pub balancing: BalancingMetrics,
    campaigns: Family<Labels, Gauge>,
    campaign_group: Gauge,
    campaign_groups: Gauge,
    campaign_nodes_done: Gauge,
    campaign_nodes: Gauge,
    campaign_nodes_failed: Gauge,
    campaign_blocked: Gauge,
    /// Instance repairs held back, by what holds them (`gate`, `tags`).
    instance_repairs_blocked: Family<Labels, Gauge>,
    state_bytes: Gauge,
    api_refused: Family<Labels, Counter>,
    watch_backoffs: Family<Labels, Counter>,
    retention_deleted: Family<Labels, Counter>,
    /// The state's replication: epoch, master candidates, those holding the current
    /// generation, and whether the last attempt succeeded.
    replica: [Gauge; 4],
}

/// Every reason of `nodecare_coordinator_api_refused`.
pub const API_REFUSALS: [&str; 14] = [
    "connection_cap",
    "client_cap",
    "accept_error",
    "header_timeout",
    "body_timeout",
    "body_too_large",
    "cross_site",
    "content_type",
    "auth_failure",
    "auth_throttled",
    "auth_slowed",
    "local_refused",
    "local_cap",
    "explain_busy",
];

/// Every cause of `nodecare_coordinator_watch_backoffs`.
pub const WATCH_BACKOFF_CAUSES: [&str; 3] = ["early_304", "overloaded", "error"];

/// Every campaign state, so the campaign gauge always has all series.
const CAMPAIGN_STATES: [CampaignState; 6] = [
    CampaignState::Running,
    CampaignState::Paused,
    CampaignState::Aborting,
    CampaignState::Completed,
    CampaignState::Failed,
    CampaignState::Aborted,
];

impl std::fmt::Debug for CoordinatorMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CoordinatorMetrics").finish_non_exhaustive()
    }
}

impl Default for CoordinatorMetrics {
    fn default() -> Self {
        Self::new()
    }
}

fn labels(pairs: &[(&'static str, &str)]) -> Labels {
    pairs.iter().map(|(k, v)| (*k, escape(v))).collect()
}

use nodecare_daemon::metrics::escape_label as escape;

fn gauge_value(count: usize) -> i64 {
    i64::try_from(count).unwrap_or(i64::MAX)
}

impl CoordinatorMetrics {
    /// Fresh metrics, every fixed series at zero.
    pub fn new() -> Self {
        let mut registry = Registry::default();
        let rounds = Histogram::new([0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0]);
        registry.register(
            "nodecare_coordinator_round_duration_seconds",
            "Duration of reconciliation rounds",
            rounds.clone(),
        );
        let round_errors = Counter::default();
        registry.register(
            "nodecare_coordinator_round_errors",
            "Rounds ended early by an error (Ganeti unreachable, store failure)",
            round_errors.clone(),
        );
        let jobs_submitted = Family::<Labels, Counter>::default();
        registry.register(
            "nodecare_coordinator_jobs_submitted",
            "Ganeti jobs submitted, by kind",
            jobs_submitted.clone(),
        );
        let jobs_failed = Family::<Labels, Counter>::default();
        registry.register(
            "nodecare_coordinator_jobs_failed",
            "Ganeti jobs that failed, timed out, vanished or were refused, by kind",
            jobs_failed.clone(),
        );
        for kind in JOB_KINDS {
            jobs_submitted
                .get_or_create(&labels(&[("kind", kind)]))
                .inc_by(0);
            jobs_failed
                .get_or_create(&labels(&[("kind", kind)]))
                .inc_by(0);
        }
        let heal = Histogram::new([
            60.0, 300.0, 900.0, 1800.0, 3600.0, 7200.0, 14400.0, 43200.0, 86400.0,
        ]);
        registry.register(
            "nodecare_coordinator_time_to_heal_seconds",
            "Time from an incident's verdict first seen to its completion",
            heal.clone(),
        );
        let incidents = Family::<Labels, Gauge>::default();
        registry.register(
            "nodecare_coordinator_incidents",
            "Incidents in the store, by state and action",
            incidents.clone(),
        );
        let agents = Family::<Labels, Gauge>::default();
        registry.register(
            "nodecare_coordinator_agents",
            "Agents by the outcome of their last read",
            agents.clone(),
        );
        let disrupted = Family::<Labels, Gauge>::default();
        registry.register(
            "nodecare_coordinator_disrupted_nodes",
            "Disrupted nodes (drained, offline, evacuating, being repaired, granted) at the last round, by failure domain",
            disrupted.clone(),
        );
        let budget_in_use = Gauge::default();
        registry.register(
            "nodecare_coordinator_budget_in_use",
            "Disrupted nodes counted against the cluster cap at the last round",
            budget_in_use.clone(),
        );
        let budget_max = Gauge::default();
        registry.register(
            "nodecare_coordinator_budget_max_disrupted_nodes",
            "The cluster cap: most nodes disrupted at once (max_disrupted_nodes)",
            budget_max.clone(),
        );
        let notifications = Family::<Labels, Counter>::default();
        registry.register(
            "nodecare_coordinator_notifications",
            "Webhook notifications by result (sent, failed after retries, dropped on a full queue)",
            notifications.clone(),
        );
        for result in ["sent", "failed", "dropped"] {
            notifications
                .get_or_create(&labels(&[("result", result)]))
                .inc_by(0);
        }
        let breaker_open = Gauge::default();
        registry.register(
            "nodecare_coordinator_breaker_open",
            "1 while the storm breaker is open (no new disruption starts), else 0",
            breaker_open.clone(),
        );
        let window_open = Gauge::default();
        window_open.set(1);
        registry.register(
            "nodecare_coordinator_maintenance_window_open",
            "1 while a maintenance window is open or none is configured (planned work may start), else 0",
            window_open.clone(),
        );
        let approvals_waiting = Gauge::default();
        registry.register(
            "nodecare_coordinator_approvals_waiting",
            "Holders whose work the last round held back for an approval ([approvals]), refused ones included",
            approvals_waiting.clone(),
        );
        let laddered = Family::<Labels, Counter>::default();
        registry.register(
            "nodecare_coordinator_escalations",
            "Incidents opened more invasive than their verdict asked, by the node's repair history ([repair_ladder]), by why",
            laddered.clone(),
        );
        for why in ["live_repair_limit", "failed_again"] {
            laddered.get_or_create(&labels(&[("why", why)])).inc_by(0);
        }
        let frozen = Gauge::default();
        registry.register(
            "nodecare_coordinator_frozen",
            "1 while a maintenance freeze is in force (no planned work starts), else 0",
            frozen.clone(),
        );
        let grants = Gauge::default();
        registry.register(
            "nodecare_coordinator_grants",
            "Disruptions granted to other tools (POST /1/disruptions) in force",
            grants.clone(),
        );
        let overrides = Gauge::default();
        registry.register(
            "nodecare_coordinator_overrides_active",
            "Operator overrides of failure domains in force",
            overrides.clone(),
        );
        let balancing = BalancingMetrics::register(&mut registry);
        let campaigns = Family::<Labels, Gauge>::default();
        registry.register(
            "nodecare_coordinator_campaigns",
            "Maintenance campaigns in the store, by state",
            campaigns.clone(),
        );
        let campaign_gauge = |registry: &mut Registry, name: &str, help: &str| {
            let gauge = Gauge::default();
            registry.register(name, help, gauge.clone());
            gauge
        };
        let campaign_group = campaign_gauge(
            &mut registry,
            "nodecare_coordinator_campaign_group",
            "Reboot groups started by the campaigns not ended (the group in flight is group k of n)",
        );
        let campaign_groups = campaign_gauge(
            &mut registry,
            "nodecare_coordinator_campaign_groups",
            "Reboot groups in total (started and planned) of the campaigns not ended",
        );
        let campaign_nodes_done = campaign_gauge(
            &mut registry,
            "nodecare_coordinator_campaign_nodes_done",
            "Nodes finished with (done, failed or skipped) by the campaigns not ended",
        );
        let campaign_nodes = campaign_gauge(
            &mut registry,
            "nodecare_coordinator_campaign_nodes",
            "Nodes in total (started and planned) of the campaigns not ended",
        );
        let campaign_nodes_failed = campaign_gauge(
            &mut registry,
            "nodecare_coordinator_campaign_nodes_failed",
            "Nodes that failed in the campaigns not ended (left drained with continue_on_failure)",
        );
        let campaign_blocked = campaign_gauge(
            &mut registry,
            "nodecare_coordinator_campaign_blocked",
            "Campaigns not ended whose next group waits (refused by the gate, planning error)",
        );
        let instance_repairs_blocked = Family::<Labels, Gauge>::default();
        registry.register(
            "nodecare_coordinator_instance_repairs_blocked",
            "Instances whose auto-repair is held back in the last round, by what holds it: the \
             gate (`gate`), or a pending repair whose result tag Ganeti would refuse, which only \
             a person can clear (`tags`)",
            instance_repairs_blocked.clone(),
        );
        let state_bytes = Gauge::default();
        registry.register(
            "nodecare_coordinator_state_bytes",
            "Size of the state database on disk (file and write-ahead log), in bytes: what is replicated to the master candidates (the flight recorder's database is apart)",
            state_bytes.clone(),
        );
        let state_limit_bytes = campaign_gauge(
            &mut registry,
            "nodecare_coordinator_state_limit_bytes",
            "Largest state snapshot the master candidates keep (past it no write to Ganeti or an agent \
             is made): alert well before nodecare_coordinator_state_bytes nears it",
        );
        state_limit_bytes
            .set(i64::try_from(nodecare_protocol::replica::MAX_REPLICA_BYTES).unwrap_or(i64::MAX));
        let api_refused = Family::<Labels, Counter>::default();
        registry.register(
            "nodecare_coordinator_api_refused",
            "Connections and requests the HTTP API refused, by reason (connection_cap, client_cap, accept_error, \
             header_timeout, body_timeout, body_too_large, cross_site, content_type, auth_failure, \
             auth_throttled, auth_slowed: an attempt slowed, not refused; local_refused: a caller of the \
             local socket neither root nor in api_socket_group, local_cap: the local socket's connections, \
             explain_busy: an explanation while 4 were being computed)",
            api_refused.clone(),
        );
        for reason in API_REFUSALS {
            api_refused
                .get_or_create(&labels(&[("reason", reason)]))
                .inc_by(0);
        }
        let watch_backoffs = Family::<Labels, Counter>::default();
        registry.register(
            "nodecare_coordinator_watch_backoffs",
            "Times an agent watch backed off instead of asking again at once, by cause (early_304, \
             overloaded: 429 or 503, error)",
            watch_backoffs.clone(),
        );
        for cause in WATCH_BACKOFF_CAUSES {
            watch_backoffs
                .get_or_create(&labels(&[("cause", cause)]))
                .inc_by(0);
        }
        let retention_deleted = Family::<Labels, Counter>::default();
        registry.register(
            "nodecare_coordinator_retention_deleted",
            "Rows the state database's retention deleted, by kind",
            retention_deleted.clone(),
        );
        for (kind, _) in crate::store::retention::Pruned::default().by_kind() {
            retention_deleted
                .get_or_create(&labels(&[("kind", kind)]))
                .inc_by(0);
        }
        let replica = [
            campaign_gauge(
                &mut registry,
                "nodecare_coordinator_replica_epoch",
                "Epoch of the state acted on (grows with every takeover after a master failover); 0 \
                 while not taken over or with replication off",
            ),
            campaign_gauge(
                &mut registry,
                "nodecare_coordinator_replica_candidates",
                "Master candidates whose agents keep the coordinator's state",
            ),
            campaign_gauge(
                &mut registry,
                "nodecare_coordinator_replica_kept_by",
                "Master candidates holding the current generation of the state",
            ),
            campaign_gauge(
                &mut registry,
                "nodecare_coordinator_replica_ok",
                "1 when the state is taken over and the last push reached a majority of the master \
                 candidates (writes may proceed), else 0",
            ),
        ];
        let metrics = Self {
            registry,
            scrape: Mutex::new(()),
            domains: Mutex::default(),
            rounds,
            round_errors,
            jobs_submitted,
            jobs_failed,
            heal,
            incidents,
            agents,
            disrupted,
            budget_in_use,
            budget_max,
            notifications,
            breaker_open,
            grants,
            overrides,
            window_open,
            frozen,
            laddered,
            approvals_waiting,
            balancing,
            campaigns,
            campaign_group,
            campaign_groups,
            campaign_nodes_done,
            campaign_nodes,
            campaign_nodes_failed,
            campaign_blocked,
            instance_repairs_blocked,
            state_bytes,
            api_refused,
            watch_backoffs,
            retention_deleted,
            replica,
        };
        metrics.set_instance_repairs_blocked(0, 0);
        metrics.set_campaigns(&[]);
        metrics.set_incidents(&[]);
        metrics.set_agents(std::iter::empty());
        metrics
    }

    /// Sets the instance-repair gauge: instances held back by the gate and by tags that cannot
    /// be written.
    pub fn set_instance_repairs_blocked(&self, by_gate: usize, by_tags: usize) {
        for (by, count) in [("gate", by_gate), ("tags", by_tags)] {
            self.instance_repairs_blocked
                .get_or_create(&labels(&[("by", by)]))
                .set(gauge_value(count));
        }
    }

    /// Counts one connection or request the API refused (`reason`: one of [`API_REFUSALS`]).
    pub fn api_refused(&self, reason: &'static str) {
        self.api_refused
            .get_or_create(&labels(&[("reason", reason)]))
            .inc();
    }

    /// Counts one back-off of an agent watch (`cause`: one of [`WATCH_BACKOFF_CAUSES`]).
    pub fn watch_backoff(&self, cause: &'static str) {
        self.watch_backoffs
            .get_or_create(&labels(&[("cause", cause)]))
            .inc();
    }

    /// The state database's size on disk.
    pub fn set_state_bytes(&self, bytes: u64) {
        self.state_bytes
            .set(i64::try_from(bytes).unwrap_or(i64::MAX));
    }

    /// A retention run deleted these rows.
    pub fn retention_deleted(&self, pruned: &crate::store::retention::Pruned) {
        for (kind, count) in pruned.by_kind() {
            self.retention_deleted
                .get_or_create(&labels(&[("kind", kind)]))
                .inc_by(u64::try_from(count).unwrap_or(u64::MAX));
        }
    }

    /// A round ended after `duration`, with or without an error.
    pub fn round_done(&self, duration: Duration, failed: bool) {
        self.rounds.observe(duration.as_secs_f64());
        if failed {
            self.round_errors.inc();
        }
    }

    /// A Ganeti job of this intent was submitted.
    pub fn job_submitted(&self, spec: &IntentSpec) {
        if let Some(kind) = job_kind(spec) {
            self.jobs_submitted
                .get_or_create(&labels(&[("kind", kind)]))
                .inc();
        }
    }

    /// A Ganeti job of this intent failed (or was refused, timed out, vanished).
    pub fn job_failed(&self, spec: &IntentSpec) {
        if let Some(kind) = job_kind(spec) {
            self.jobs_failed
                .get_or_create(&labels(&[("kind", kind)]))
                .inc();
        }
    }

    /// An incident completed `seconds` after its verdict was first seen.
    pub fn healed(&self, seconds: f64) {
        self.heal.observe(seconds.max(0.0));
    }

    /// A webhook notification ended with `result` (`sent`, `failed`, `dropped`).
    pub fn notification(&self, result: &'static str) {
        self.notifications
            .get_or_create(&labels(&[("result", result)]))
            .inc();
    }

    /// The disruption seen by the last round: disrupted nodes with their failure domain, and the cap.
    pub fn set_disruptions<'a>(
        &self,
        disrupted_domains: impl IntoIterator<Item = &'a str>,
        max_disrupted_nodes: usize,
    ) {
        let mut by_domain: BTreeMap<&str, usize> = BTreeMap::new();
        for domain in disrupted_domains {
            *by_domain.entry(domain).or_default() += 1;
        }
        // Domains that were disrupted before and are no longer show 0.
        let mut seen = self.domains.lock().unwrap_or_else(|e| e.into_inner());
        for domain in seen.iter() {
            if !by_domain.contains_key(domain.as_str()) {
                self.disrupted
                    .get_or_create(&labels(&[("domain", domain)]))
                    .set(0);
            }
        }
        seen.extend(by_domain.keys().map(|g| (*g).to_owned()));
        drop(seen);
        let total: usize = by_domain.values().sum();
        for (domain, count) in by_domain {
            self.disrupted
                .get_or_create(&labels(&[("domain", domain)]))
                .set(gauge_value(count));
        }
        self.budget_in_use.set(gauge_value(total));
        self.budget_max.set(gauge_value(max_disrupted_nodes));
    }

    /// Sets the gate's gauges: the storm breaker, the grants and overrides in force.
    pub fn set_gate(&self, breaker_open: bool, grants: usize, overrides: usize) {
        self.breaker_open.set(i64::from(breaker_open));
        self.grants.set(gauge_value(grants));
        self.overrides.set(gauge_value(overrides));
    }

    /// Sets how many holders wait for an approval.
    pub fn set_approvals_waiting(&self, waiting: usize) {
        self.approvals_waiting.set(gauge_value(waiting));
    }

    /// Counts an incident escalated by its node's repair history.
    pub fn laddered(&self, why: nodecare_core::duty::node_repair::ladder::Why) {
        self.laddered
            .get_or_create(&labels(&[("why", why.as_str())]))
            .inc();
    }

    /// Sets the calendar's gauges: a maintenance window open (or none configured), a freeze
    /// in force.
    pub fn set_calendar(&self, calendar: &nodecare_core::calendar::CalendarNow) {
        self.window_open
            .set(i64::from(calendar.window.as_ref().is_none_or(|w| w.open)));
        self.frozen.set(i64::from(calendar.freeze.is_some()));
    }

    /// Sets the campaign gauges from the stored campaigns: how many in each state, and the
    /// progress of those not ended (group k of n, nodes done of total), summed.
    pub fn set_campaigns(&self, campaigns: &[Campaign]) {
        for state in CAMPAIGN_STATES {
            let count = campaigns.iter().filter(|c| c.state == state).count();
            self.campaigns
                .get_or_create(&labels(&[("state", state.as_str())]))
                .set(gauge_value(count));
        }
        let active: Vec<&Campaign> = campaigns.iter().filter(|c| !c.state.is_final()).collect();
        let sum = |f: &dyn Fn(&Campaign) -> usize| gauge_value(active.iter().map(|c| f(c)).sum());
        self.campaign_group.set(sum(&|c| c.groups.len()));
        self.campaign_groups.set(sum(&|c| c.groups_total()));
        self.campaign_nodes_done.set(sum(&|c| c.nodes_progress().0));
        self.campaign_nodes.set(sum(&|c| c.nodes_progress().1));
        self.campaign_nodes_failed.set(sum(&|c| {
            c.groups
                .iter()
                .flat_map(|g| &g.nodes)
                .filter(|n| n.step == NodeStep::Failed)
                .count()
        }));
        self.campaign_blocked
            .set(sum(&|c| usize::from(c.blocked_by.is_some())));
    }

    /// Sets the incident gauge from the stored incidents.
    pub fn set_incidents(&self, incidents: &[Incident]) {
        for state in STATES {
            for action in ACTIONS {
                let count = incidents
                    .iter()
                    .filter(|i| i.repair_status == state && i.action == action)
                    .count();
                self.incidents
                    .get_or_create(&labels(&[
                        ("state", state.as_str()),
                        ("action", action.as_str()),
                    ]))
                    .set(gauge_value(count));
            }
        }
    }

    /// Sets the agent gauge from the board's agent statuses.
    pub fn set_agents<'a>(&self, agents: impl IntoIterator<Item = &'a AgentStatus>) {
        let mut counts: BTreeMap<&str, usize> = AGENT_OUTCOMES.iter().map(|o| (*o, 0)).collect();
        for agent in agents {
            *counts.entry(agent_outcome(agent)).or_default() += 1;
        }
        for (outcome, count) in counts {
            self.agents
                .get_or_create(&labels(&[("outcome", outcome)]))
                .set(gauge_value(count));
        }
    }

    /// Sets the replication gauges (none: replication off).
    pub fn set_replication(&self, status: Option<&crate::replica::ReplicationStatus>) {
        let count = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
        let values = status.map_or([0; 4], |status| {
            [
                status.generation.map_or(0, |generation| {
                    i64::try_from(generation.epoch).unwrap_or(i64::MAX)
                }),
                count(status.candidates.len()),
                count(status.kept_by.len()),
                i64::from(status.generation.is_some() && status.error.is_none()),
            ]
        });
        for (gauge, value) in self.replica.iter().zip(values) {
            gauge.set(value);
        }
    }

    /// The text exposition, after refreshing the gauges from `incidents` and `agents`.
    pub fn render<'a>(
        &self,
        incidents: &[Incident],
        agents: impl IntoIterator<Item = &'a AgentStatus>,
    ) -> String {
        let _guard = self.scrape.lock().unwrap_or_else(|e| e.into_inner());
        self.set_incidents(incidents);
        self.set_agents(agents);
        nodecare_daemon::metrics::render(&self.registry)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use nodecare_protocol::status::AgentState;

    fn agent(state: AgentState) -> AgentStatus {
        AgentStatus {
            node: "n".into(),
            state,
            reason: None,
            verdict: None,
            fingerprint: None,
            sequence: None,
            error: None,
            checked_at_ms: 0,
            last_ok_ms: None,
        }
    }

    #[test]
    fn fixed_series_help_and_type() {
        let metrics = CoordinatorMetrics::new();
        metrics.round_done(Duration::from_millis(300), false);
        metrics.round_done(Duration::from_secs(3), true);
        metrics.job_submitted(&IntentSpec::Drain { node: "n1".into() });
        metrics.job_failed(&IntentSpec::Tag {
            node: "n1".into(),
            tag: "t".into(),
        });
        metrics.job_failed(&IntentSpec::Repair {
            node: "n1".into(),
            command: "c".into(),
        });
        metrics.healed(600.0);
        metrics.set_disruptions(["g1", "g1", "g\"2"], 3);
        metrics.notification("dropped");
        metrics.set_gate(true, 2, 1);
        metrics.set_state_bytes(81_920);
        metrics.retention_deleted(&crate::store::retention::Pruned {
            incidents: 2,
            intents: 5,
            audit: 7,
            ..Default::default()
        });
        let agents = [
            agent(AgentState::Ok),
            agent(AgentState::Ok),
            agent(AgentState::Stale),
            agent(AgentState::Unverifiable),
        ];
        let text = metrics.render(&[], agents.iter());
        for expected in [
            "# TYPE nodecare_coordinator_round_duration_seconds histogram",
            "nodecare_coordinator_round_duration_seconds_count 2",
            "nodecare_coordinator_round_errors_total 1",
            "# HELP nodecare_coordinator_breaker_open 1 while the storm breaker is open (no new disruption starts), else 0.",
            "nodecare_coordinator_breaker_open 1",
            "nodecare_coordinator_grants 2",
            "nodecare_coordinator_overrides_active 1",
            "nodecare_coordinator_maintenance_window_open 1",
            "nodecare_coordinator_frozen 0",
            "nodecare_coordinator_jobs_submitted_total{kind=\"drain\"} 1",
            "nodecare_coordinator_jobs_submitted_total{kind=\"migrate\"} 0",
            "nodecare_coordinator_jobs_failed_total{kind=\"tag\"} 1",
            "nodecare_coordinator_time_to_heal_seconds_bucket{le=\"900.0\"} 1",
            "nodecare_coordinator_incidents{state=\"failed\",action=\"evacuate\"} 0",
            "nodecare_coordinator_agents{outcome=\"verified\"} 2",
            "nodecare_coordinator_agents{outcome=\"unverifiable\"} 1",
            "nodecare_coordinator_agents{outcome=\"unreachable\"} 0",
            "nodecare_coordinator_disrupted_nodes{domain=\"g1\"} 2",
            "nodecare_coordinator_disrupted_nodes{domain=\"g\\\"2\"} 1",
            "nodecare_coordinator_budget_in_use 3",
            "nodecare_coordinator_budget_max_disrupted_nodes 3",
            "nodecare_coordinator_notifications_total{result=\"dropped\"} 1",
            "# HELP nodecare_coordinator_incidents Incidents in the store, by state and action.",
            "nodecare_coordinator_balancing_runs_total{result=\"failed\"} 0",
            "nodecare_coordinator_balancing_moves_total{outcome=\"submitted\"} 0",
            "nodecare_coordinator_balancing_hbal_ok 0",
            "nodecare_coordinator_balancing_load 0",
            "nodecare_coordinator_balancing_load_missing_nodes 0",
            "nodecare_coordinator_state_bytes 81920",
            "nodecare_coordinator_retention_deleted_total{kind=\"incident\"} 2",
            "nodecare_coordinator_retention_deleted_total{kind=\"intent\"} 5",
            "nodecare_coordinator_retention_deleted_total{kind=\"audit\"} 7",
            "nodecare_coordinator_retention_deleted_total{kind=\"campaign\"} 0",
            "nodecare_coordinator_replica_epoch 0",
            "nodecare_coordinator_replica_ok 0",
            "nodecare_coordinator_state_limit_bytes 67108864",
            "nodecare_coordinator_api_refused_total{reason=\"connection_cap\"} 0",
            "nodecare_coordinator_watch_backoffs_total{cause=\"early_304\"} 0",
        ] {
            assert!(text.contains(expected), "missing {expected:?} in\n{text}");
        }
        // Every family has HELP and TYPE.
        let helps = text.lines().filter(|l| l.starts_with("# HELP ")).count();
        let types = text.lines().filter(|l| l.starts_with("# TYPE ")).count();
        assert_eq!(helps, types);
        assert_eq!(types, 42);
        // Groups no longer disrupted drop to zero.
        metrics.set_disruptions(["g3"], 1);
        let text = metrics.render(&[], std::iter::empty());
        assert!(text.contains("nodecare_coordinator_disrupted_nodes{domain=\"g1\"} 0"));
        assert!(text.contains("nodecare_coordinator_disrupted_nodes{domain=\"g3\"} 1"));
        assert!(text.contains("nodecare_coordinator_budget_in_use 1"));
    }

    #[test]
    fn campaign_gauges_count_states_and_progress() {
        use nodecare_protocol::maintenance::{
            CampaignGroup, CampaignNode, CampaignRequest, NodeStep,
        };
        let node = |name: &str, step: NodeStep| CampaignNode {
            node: name.into(),
            step,
            step_started_ms: None,
            step_deadline_ms: None,
            original_primaries: Vec::new(),
            boot_id_before: None,
            waiting_for: None,
            failure: None,
        };
        let running = Campaign {
            id: "c1".into(),
            request: CampaignRequest::new("reboot"),
            who: "ops".into(),
            state: CampaignState::Running,
            created_ms: 0,
            updated_ms: 0,
            finished_ms: None,
            groups: vec![
                CampaignGroup {
                    index: 0,
                    nodes: vec![node("n1", NodeStep::Done), node("n2", NodeStep::Failed)],
                    started_ms: Some(1),
                    finished_ms: Some(2),
                },
                CampaignGroup {
                    index: 1,
                    nodes: vec![node("n3", NodeStep::Hook)],
                    started_ms: Some(3),
                    finished_ms: None,
                },
            ],
            planned: vec![vec!["n4".into(), "n5".into()]],
            failure: None,
            failures: Vec::new(),
            blocked_by: Some("the gate".into()),
            warnings: Vec::new(),
            overrides: Vec::new(),
        };
        let mut completed = running.clone();
        completed.state = CampaignState::Completed;
        let metrics = CoordinatorMetrics::new();
        let text = metrics.render(&[], std::iter::empty());
        assert!(text.contains("nodecare_coordinator_campaigns{state=\"running\"} 0"));
        assert!(text.contains("nodecare_coordinator_campaign_nodes 0"));
        metrics.set_campaigns(&[running, completed]);
        let text = metrics.render(&[], std::iter::empty());
        for expected in [
            "nodecare_coordinator_campaigns{state=\"running\"} 1",
            "nodecare_coordinator_campaigns{state=\"completed\"} 1",
            "nodecare_coordinator_campaigns{state=\"aborted\"} 0",
            "nodecare_coordinator_campaign_group 2",
            "nodecare_coordinator_campaign_groups 3",
            "nodecare_coordinator_campaign_nodes_done 2",
            "nodecare_coordinator_campaign_nodes 5",
            "nodecare_coordinator_campaign_nodes_failed 1",
            "nodecare_coordinator_campaign_blocked 1",
        ] {
            assert!(text.contains(expected), "missing {expected:?} in\n{text}");
        }
    }

    #[test]
    fn series_are_bounded() {
        let metrics = CoordinatorMetrics::new();
        let many: Vec<AgentStatus> = (0..500).map(|_| agent(AgentState::Unreachable)).collect();
        let text = metrics.render(&[], many.iter());
        let samples = text.lines().filter(|l| !l.starts_with('#')).count();
        // 15 incident series, 4 agent outcomes, 18 job series (9 kinds, submitted and
        // failed), 3 notification results, 6 campaign states, 6 kinds of rows retention
        // deletes, 14 API refusal reasons, 3 watch back-off causes, 4 failback outcomes, 2
        // histograms, scalars: independent of the number of nodes, incidents and campaigns.
        assert!(samples < 140, "{samples} series:\n{text}");
        assert!(text.contains("nodecare_coordinator_agents{outcome=\"unreachable\"} 500"));
    }
}

/// Balancing metrics.
#[derive(Clone, Default)]
pub struct BalancingMetrics {
    runs: Family<Vec<(&'static str, String)>, Counter>,
    moves: Family<Vec<(&'static str, String)>, Counter>,
    hbal_ok: Gauge,
    load: Gauge,
    load_missing: Gauge,
    failback: Family<Vec<(&'static str, String)>, Counter>,
    failback_waiting: Gauge,
}

impl fmt::Debug for BalancingMetrics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BalancingMetrics").finish_non_exhaustive()
    }
}

impl BalancingMetrics {
    /// The metrics, registered in `registry`.
    pub fn register(registry: &mut Registry) -> Self {
        let metrics = Self::default();
        registry.register(
            "nodecare_coordinator_balancing_runs",
            "hbal runs of the balancing duty, by result (ok, failed)",
            metrics.runs.clone(),
        );
        registry.register(
            "nodecare_coordinator_balancing_moves",
            "Balancing jobs by outcome (proposed, left-out, refused, submitted, succeeded, failed)",
            metrics.moves.clone(),
        );
        registry.register(
            "nodecare_coordinator_balancing_hbal_ok",
            "1 when the last hbal run gave a plan, 0 when hbal was missing or failed",
            metrics.hbal_ok.clone(),
        );
        registry.register(
            "nodecare_coordinator_balancing_load",
            "1 when the last hbal run had the agents' verified load (cpu-avg-load), 0 when it was \
             left out (a node's missing) or off",
            metrics.load.clone(),
        );
        registry.register(
            "nodecare_coordinator_balancing_load_missing_nodes",
            "Online nodes without a verified, current load report at the last hbal run",
            metrics.load_missing.clone(),
        );
        registry.register(
            "nodecare_coordinator_failback_instances",
            "Instances an evacuation moved off a node, on their way back to it ([failback]), by \
             outcome (proposed, submitted, back, given-up)",
            metrics.failback.clone(),
        );
        registry.register(
            "nodecare_coordinator_failback_waiting",
            "Instances waiting to go back to their node (settle period, memory, holders, \
             windows), as the last round planned",
            metrics.failback_waiting.clone(),
        );
        for outcome in ["proposed", "submitted", "back", "given-up"] {
            metrics
                .failback
                .get_or_create(&vec![("outcome", outcome.to_owned())])
                .inc_by(0);
        }
        for result in ["ok", "failed"] {
            metrics
                .runs
                .get_or_create(&vec![("result", result.to_owned())])
                .inc_by(0);
        }
        for outcome in [
            "proposed",
            "left-out",
            "refused",
            "submitted",
            "succeeded",
            "failed",
        ] {
            metrics
                .moves
                .get_or_create(&vec![("outcome", outcome.to_owned())])
                .inc_by(0);
        }
        metrics
    }

    pub(crate) fn run(&self, ok: bool) {
        let result = if ok { "ok" } else { "failed" };
        self.runs
            .get_or_create(&vec![("result", result.to_owned())])
            .inc();
        self.hbal_ok.set(i64::from(ok));
    }

    /// The last run's load: `(given to hbal, nodes without it)`, none when off.
    pub(crate) fn load(&self, load: Option<(bool, usize)>) {
        let (given, missing) = load.unwrap_or((false, 0));
        self.load.set(i64::from(given));
        self.load_missing
            .set(i64::try_from(missing).unwrap_or(i64::MAX));
    }

    pub(crate) fn moves(&self, outcome: &str, count: usize) {
        self.moves
            .get_or_create(&vec![("outcome", outcome.to_owned())])
            .inc_by(u64::try_from(count).unwrap_or(u64::MAX));
    }

    pub(crate) fn failback(&self, outcome: &str, count: usize) {
        self.failback
            .get_or_create(&vec![("outcome", outcome.to_owned())])
            .inc_by(u64::try_from(count).unwrap_or(u64::MAX));
    }

    pub(crate) fn failback_waiting(&self, count: usize) {
        self.failback_waiting
            .set(i64::try_from(count).unwrap_or(i64::MAX));
    }
}
