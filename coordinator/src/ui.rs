//! The web status page: server-rendered HTML (maud templates compiled into the binary), one
//! small inline stylesheet, no script, nothing fetched from elsewhere; it reloads itself every
//! [`REFRESH_SECS`] seconds.
//!
//! | Path | Answer |
//! |---|---|
//! | `GET /ui/` (and `GET /` asking for `text/html`) | the read-only page |
//! | `GET /ui/admin/` | the same page with actions; needs HTTP basic auth of a user with `write` |
//! | `POST /ui/admin/incidents/<uuid>/cancel` | cancels (form field `csrf`), then back to the page |
//! | `POST /ui/admin/incidents/<uuid>/acknowledge` | records the acknowledgement in the store; the round removes the incident's tag from its node through Ganeti (what an operator's acknowledgement is), then back to the page |
//! | `POST /ui/admin/overrides` | sets an override of a failure domain (form fields `domain`, `hours`, `reason`), audited |
//! | `POST /ui/admin/overrides/<id>/revoke` | revokes an override, audited |
//! | `POST /ui/admin/breaker/reset` | closes the storm breaker (form field `reason`), audited |
//!
//! The page is built from the same typed state as the JSON API (`/1/overview`): the store's
//! incidents, intents and maintenance campaigns, the board's agents and last round, and the gate's failure domains,
//! refused proposals, grants, overrides and breaker ([`crate::admission::GateStatus`]). Actions are CSRF-protected: the
//! form carries a token that is an HMAC of the authenticated user under a key drawn at start,
//! and a request whose `Origin` (or `Referer`) names another host is refused.

use std::collections::BTreeMap;

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use hmac::{Hmac, KeyInit as _, Mac as _};
use maud::{DOCTYPE, Markup, PreEscaped, html};
use sha2::Sha256;
use subtle::ConstantTimeEq as _;
use uuid::Uuid;

use crate::admission::GateStatus;
use crate::api::ApiState;
use crate::auth::{self, Refusal};
use crate::reconcile::{CancelOutcome, RoundSummary, cancel_incident};
use crate::scrape::{AgentState, AgentStatus};
use crate::store::{Intent, IntentSpec, IntentState};
use nodecare_core::incident::{Event, Incident, RepairStatus};
use nodecare_protocol::clock::{utc_text, utc_text_ms};
use nodecare_protocol::maintenance::{Campaign, CampaignNode, CampaignState, NodeStep};

/// Seconds between reloads of the page.
pub const REFRESH_SECS: u32 = 10;

pub(crate) const STYLE: &str = "
:root{color-scheme:light dark;--bad:#c62828;--warn:#ef6c00;--good:#2e7d32;--mute:#777}
body{font:15px/1.4 system-ui,sans-serif;margin:0 auto;max-width:70em;padding:.5em 1em}
h1{font-size:1.3em;margin:.3em 0}h2{font-size:1.1em;border-bottom:1px solid var(--mute);margin-top:1.2em}
table{border-collapse:collapse;width:100%;margin:.3em 0}th,td{text-align:left;padding:.2em .4em;border-bottom:1px solid #8884;vertical-align:top}
.wrap{overflow-x:auto}.mute{color:var(--mute)}.bad{color:var(--bad);font-weight:600}.warn{color:var(--warn);font-weight:600}.good{color:var(--good)}
.cards{display:flex;flex-wrap:wrap;gap:.5em}.card{border:1px solid #8886;border-radius:.4em;padding:.4em .7em;flex:1 1 12em}
.incident{border:1px solid #8886;border-radius:.4em;padding:.3em .8em;margin:.6em 0}
.blocked{border-left:.3em solid var(--warn);padding-left:.5em}
code{font-size:.9em;word-break:break-all}form{display:inline}button{font:inherit}
";

/// Everything the page shows, read at one moment.
#[derive(Debug, Clone)]
pub struct Snapshot {
    /// The coordinator's node.
    pub node: String,
    /// Unix ms when read.
    pub now_ms: u64,
    /// The last round.
    pub round: RoundSummary,
    /// Incidents not yet forgotten, each with its intents.
    pub incidents: Vec<(Incident, Vec<Intent>)>,
    /// Every agent's status.
    pub agents: Vec<AgentStatus>,
    /// Most nodes disrupted at once (the budget).
    pub max_disrupted_nodes: usize,
    /// The gate: failure domains, refused proposals, grants, overrides, the breaker.
    pub gate: GateStatus,
    /// Instances the instance-repair duty is repairing or would repair.
    pub instance_repairs: Vec<nodecare_protocol::status::InstanceRepairSummary>,
    /// Maintenance campaigns, newest first.
    pub campaigns: Vec<Campaign>,
}

/// Reads the snapshot from the API's state.
pub fn snapshot(state: &ApiState) -> Result<Snapshot, crate::store::StoreError> {
    let incidents = state.store.incidents()?;
    let intents = state.store.intents()?;
    let mut by_incident: BTreeMap<Uuid, Vec<Intent>> = BTreeMap::new();
    for intent in intents {
        by_incident.entry(intent.incident).or_default().push(intent);
    }
    let incidents = incidents
        .into_iter()
        .map(|incident| {
            let intents = by_incident.remove(&incident.uuid).unwrap_or_default();
            (incident, intents)
        })
        .collect();
    let agents = state
        .board
        .agents
        .read()
        .map(|agents| agents.values().cloned().collect())
        .unwrap_or_default();
    let round = state
        .board
        .last_round
        .read()
        .map(|r| r.clone())
        .unwrap_or_default();
    Ok(Snapshot {
        node: state.node_name.clone(),
        now_ms: nodecare_protocol::now_ms(),
        round,
        incidents,
        agents,
        max_disrupted_nodes: state.max_disrupted_nodes,
        gate: crate::admission::gate_status(state)?,
        instance_repairs: state
            .board
            .instance_repairs
            .read()
            .map(|r| r.clone())
            .unwrap_or_default(),
        campaigns: state
            .store
            .campaigns()?
            .into_iter()
            .map(|record| record.campaign)
            .collect(),
    })
}

/// How old `then_ms` is at `now_ms`, for people (`42s`, `3m`, `2h`, `5d`).
pub fn age(now_ms: u64, then_ms: u64) -> String {
    let secs = now_ms.saturating_sub(then_ms) / 1000;
    match secs {
        0..120 => format!("{secs}s"),
        120..7200 => format!("{}m", secs / 60),
        7200..172_800 => format!("{}h", secs / 3600),
        _ => format!("{}d", secs / 86_400),
    }
}

fn status_class(status: RepairStatus) -> &'static str {
    match status {
        RepairStatus::Failed => "bad",
        RepairStatus::Noted | RepairStatus::Pending => "warn",
        RepairStatus::Canceled => "mute",
        RepairStatus::Completed => "good",
    }
}

fn agent_class(state: AgentState) -> &'static str {
    match state {
        AgentState::Ok => "good",
        AgentState::Stale => "warn",
        AgentState::Unreachable | AgentState::Unverifiable => "bad",
    }
}

fn intent_state(state: IntentState) -> &'static str {
    match state {
        IntentState::Planned => "planned",
        IntentState::Submitted => "running",
        IntentState::Succeeded => "success",
        IntentState::Failed => "error",
        IntentState::Replanned => "replanned",
        IntentState::Canceled => "canceled",
    }
}

/// Whether an incident keeps its node out of service: an evacuation whose drain was submitted,
/// until an operator acknowledges it (the node stays drained after completion).
fn disrupting(incident: &Incident, intents: &[Intent]) -> bool {
    incident.action.is_evacuation()
        && !incident.acknowledged
        && intents.iter().any(|i| {
            matches!(i.spec, IntentSpec::Drain { .. })
                && matches!(i.state, IntentState::Submitted | IntentState::Succeeded)
        })
}

/// The actions of the admin page: who is signed in and the form token.
#[derive(Debug, Clone)]
pub struct Actions {
    /// The authenticated user.
    pub user: String,
    /// The CSRF token for the forms.
    pub csrf: String,
}

/// Renders the page (pure: the golden test calls it with a fixed snapshot).
pub fn render(snapshot: &Snapshot, actions: Option<&Actions>) -> String {
    let now = snapshot.now_ms;
    let mut agents_by_state: BTreeMap<&str, usize> = BTreeMap::new();
    let mut verdicts: BTreeMap<&str, usize> = BTreeMap::new();
    for agent in &snapshot.agents {
        *agents_by_state.entry(agent.state.as_str()).or_default() += 1;
        let verdict = agent.verdict.map_or("none", |v| v.as_str());
        *verdicts.entry(verdict).or_default() += 1;
    }
    let mut incidents_by_state: BTreeMap<&str, usize> = BTreeMap::new();
    for (incident, _) in &snapshot.incidents {
        *incidents_by_state
            .entry(incident.repair_status.as_str())
            .or_default() += 1;
    }
    let disrupted: Vec<&str> = snapshot
        .incidents
        .iter()
        .filter(|(incident, intents)| disrupting(incident, intents))
        .map(|(incident, _)| incident.node.as_str())
        .collect();
    let blocked = snapshot
        .incidents
        .iter()
        .filter(|(i, _)| i.blocked_by.is_some())
        .count();
    let troubled: Vec<&AgentStatus> = snapshot
        .agents
        .iter()
        .filter(|a| a.state != AgentState::Ok)
        .collect();
    let base = if actions.is_some() {
        "/ui/admin/"
    } else {
        "/ui/"
    };
    let page: Markup = html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                meta http-equiv="refresh" content=(REFRESH_SECS);
                title { "nodecare: " (snapshot.node) }
                style { (PreEscaped(STYLE)) }
            }
            body {
                header {
                    h1 { "nodecare on " (snapshot.node) }
                    p.mute {
                        "Node health and repairs of this Ganeti cluster"
                        @if let Some(version) = &snapshot.round.ganeti_version {
                            " (Ganeti " (version) ")"
                        }
                        ", as the coordinator sees them. "
                        "Round " (snapshot.round.number)
                        @if snapshot.round.started_ms > 0 {
                            ", " (age(now, snapshot.round.started_ms)) " ago, took "
                            (snapshot.round.duration_ms) " ms"
                        }
                        ". This page reloads every " (REFRESH_SECS) " s. "
                        a href="/ui/what-if" { "What if…?" } " "
                        @if let Some(actions) = actions {
                            "Signed in as " b { (actions.user) } " (actions enabled). "
                            a href="/ui/" { "Read-only view" }
                        } @else {
                            "Read-only. " a href="/ui/admin/" { "Sign in for actions" }
                            " (a user with the write option in the users file)."
                        }
                    }
                    @if let Some(error) = &snapshot.round.error {
                        p.bad { "Last round ended early: " (error) }
                    }
                }
                section id="glance" {
                    h2 { "At a glance" }
                    div.cards {
                        div.card {
                            b { "Agents (" (snapshot.agents.len()) ")" } br;
                            @for (state, n) in &agents_by_state { (state) ": " (n) br; }
                            @if snapshot.agents.is_empty() { span.mute { "none read yet" } }
                        }
                        div.card {
                            b { "Node verdicts" } br;
                            @for (verdict, n) in &verdicts { (verdict) ": " (n) br; }
                        }
                        div.card {
                            b { "Incidents (" (snapshot.incidents.len()) ")" } br;
                            @for (state, n) in &incidents_by_state { (state) ": " (n) br; }
                            @if blocked > 0 { span.warn { "blocked: " (blocked) } br; }
                            @if snapshot.incidents.is_empty() { span.good { "none" } }
                        }
                        div.card id="breaker" {
                            b { "Storm breaker" } br;
                            @if snapshot.gate.breaker.open {
                                span.bad { "OPEN" } ": no new disruption starts" br;
                                span.mute { (snapshot.gate.breaker.why.as_deref().unwrap_or("")) }
                                @if let Some(since) = snapshot.gate.breaker.since_ms { br; span.mute { "since " (age(now, since)) " ago" } }
                                @if let Some(actions) = actions {
                                    br;
                                    form method="post" action={ (base) "breaker/reset" } {
                                        input type="hidden" name="csrf" value=(actions.csrf);
                                        input type="text" name="reason" placeholder="why (audited)" required;
                                        " "
                                        button type="submit" { "Reset the breaker" }
                                    }
                                }
                            } @else {
                                span.good { "closed" }
                                @if let (Some(by), Some(at)) = (&snapshot.gate.breaker.reset_by, snapshot.gate.breaker.reset_ms) {
                                    br; span.mute { "last reset by " (by) ", " (age(now, at)) " ago" }
                                }
                            }
                        }
                        div.card id="budget" {
                            b { "Disruption budget" } br;
                            (disrupted.len()) " of at most " (snapshot.max_disrupted_nodes) " node(s) drained by incidents" br;
                            @if !disrupted.is_empty() { span.mute { (disrupted.join(", ")) } }
                        }
                    }
                }
                (gate_section(&snapshot.gate, now, actions, base))
                @if !snapshot.campaigns.is_empty() {
                    (campaigns_section(&snapshot.campaigns, now))
                }
                section id="incidents" {
                    h2 { "Incidents" }
                    @if snapshot.incidents.is_empty() {
                        p.mute { "No incident: no node asked for a repair." }
                    }
                    @for (incident, intents) in &snapshot.incidents {
                        (incident_block(incident, intents, actions, base))
                    }
                }
                @if !snapshot.instance_repairs.is_empty() {
                    section id="instance-repairs" {
                        h2 { "Instance repairs" }
                        p.mute { "Instances harep's tags (ganeti:watcher:autorepair:*) allow to be repaired, as the last round found them." }
                        div.wrap { table {
                            thead { tr { th { "instance" } th { "state" } th { "repair" } th { "what happens" } th { "waits for" } } }
                            tbody {
                                @for repair in &snapshot.instance_repairs {
                                    tr id={ "instance-" (repair.instance) } {
                                        td { (repair.instance) }
                                        td { (repair.state) }
                                        td { (repair.needs.as_deref().unwrap_or("-")) }
                                        td { (repair.note) }
                                        td { (repair.blocked_by.as_deref().unwrap_or("")) }
                                    }
                                }
                            }
                        } }
                    }
                }
                section id="nodes" {
                    h2 { "Nodes" }
                    p.mute { "Each node's latest verified verdict, as its agent signed it." }
                    div.wrap { table {
                        thead { tr { th { "node" } th { "agent" } th { "verdict" } th { "verified" } th { "why" } } }
                        tbody {
                            @for agent in &snapshot.agents {
                                tr id={ "node-" (agent.node) } {
                                    td { (agent.node) }
                                    td class=(agent_class(agent.state)) { (agent.state.as_str()) }
                                    td { (agent.verdict.map_or("-", |v| v.as_str())) }
                                    td { @match agent.last_ok_ms { Some(ms) => { (age(now, ms)) " ago" }, None => "never" } }
                                    td { (agent.reason.as_deref().or(agent.error.as_deref()).unwrap_or("")) }
                                }
                            }
                        }
                    } }
                }
                section id="agents" {
                    h2 { "Agents not giving a usable report" }
                    @if troubled.is_empty() {
                        p.good { "Every agent gave a fresh, verified report." }
                    } @else {
                        p.mute { "Nothing is done on these nodes until they report again: an unreadable report never causes a disruption." }
                        ul {
                            @for agent in &troubled {
                                li {
                                    b { (agent.node) } ": " span class=(agent_class(agent.state)) { (agent.state.as_str()) }
                                    @if let Some(error) = &agent.error { " (" (error) ")" }
                                    @if agent.state == AgentState::Stale { " (not diagnosed since its restart)" }
                                }
                            }
                        }
                    }
                }
                footer.mute { p { "JSON for programs: " a href="/1/overview" { "/1/overview" } ", " a href="/1/status" { "/1/status" } "." } }
            }
        }
    };
    page.into_string()
}

/// Campaigns shown on the page: every one not ended, and the last few that ended.
pub const CAMPAIGNS_SHOWN_ENDED: usize = 3;

fn campaign_class(state: CampaignState) -> &'static str {
    match state {
        CampaignState::Running | CampaignState::Completed => "good",
        CampaignState::Paused | CampaignState::Aborting | CampaignState::Aborted => "warn",
        CampaignState::Failed => "bad",
    }
}

fn step_class(node: &CampaignNode) -> &'static str {
    match node.step {
        NodeStep::Failed => "bad",
        NodeStep::Done => "good",
        NodeStep::Pending | NodeStep::Skipped => "mute",
        _ => "",
    }
}

/// The maintenance campaigns (`nodecare roll --execute`): state, group k of n, nodes done,
/// what blocks the next group, failures, and the steps of the group in flight.
fn campaigns_section(campaigns: &[Campaign], now: u64) -> Markup {
    let active = campaigns.iter().filter(|c| !c.state.is_final());
    let ended = campaigns
        .iter()
        .filter(|c| c.state.is_final())
        .take(CAMPAIGNS_SHOWN_ENDED);
    let shown: Vec<&Campaign> = active.chain(ended).collect();
    html! {
        section id="campaigns" {
            h2 { "Maintenance campaigns" }
            p.mute { "Rolling maintenance (" code { "nodecare roll --execute" } "): one reboot group at a time, drained, hook run, back healthy, undrained. " code { "nodecare roll status ID" } " shows every step." }
            @for c in shown {
                @let (done, total) = c.nodes_progress();
                div.incident id={ "campaign-" (c.id) } {
                    p {
                        b { "Campaign " code { (c.id) } } " " a href={ "/ui/explain?record=" (c.id) } { "why?" } " "
                        span class=(campaign_class(c.state)) { (c.state.as_str()) }
                        ": group " (c.groups.len()) " of " (c.groups_total())
                        ", " (done) " of " (total) " node(s) done, hook " code { (c.request.hook) }
                        ", by " (c.who) ", started " (age(now, c.created_ms)) " ago"
                        @if let Some(end) = c.finished_ms { ", ended " (age(now, end)) " ago" }
                    }
                    @if let Some(blocked) = &c.blocked_by {
                        p.blocked { "Next group waits: " (blocked) }
                    }
                    @if let Some(f) = &c.failure {
                        p.bad { "Failed: " (f.node) " in " (f.step.as_str()) ": " (f.why) }
                    }
                    @for f in &c.failures {
                        p.warn { "Left drained: " (f.node) " failed in " (f.step.as_str()) ": " (f.why) }
                    }
                    @if let Some(group) = c.groups.last().filter(|g| g.finished_ms.is_none() && !c.state.is_final()) {
                        div.wrap { table {
                            thead { tr { th { "node" } th { "step" } th { "for" } th { "times out in" } th { "waiting for" } } }
                            tbody {
                                @for n in &group.nodes {
                                    tr {
                                        td { (n.node) }
                                        td class=(step_class(n)) { (n.step.as_str()) }
                                        td { @if let Some(t) = n.step_started_ms { (age(now, t)) } }
                                        td { @if let Some(t) = n.step_deadline_ms { (age(t, now)) } }
                                        td { (n.waiting_for.as_deref().or(n.failure.as_ref().map(|f| f.why.as_str())).unwrap_or("")) }
                                    }
                                }
                            }
                        } }
                    }
                    @if let Some(g) = c.groups.last().filter(|g| g.finished_ms.is_none() && c.state.is_final()) {
                        p.mute { "Stopped: "
                            @for (i, n) in g.nodes.iter().filter(|n| n.failure.is_none() && !n.step.is_final()).enumerate() {
                                @if i > 0 { ", " }
                                (n.node) " in " (n.step.as_str())
                            }
                            " (the campaign " (c.state.as_str()) ")"
                        }
                    }
                    @if !c.planned.is_empty() && c.state.is_final() {
                        p.mute { "Not run (the campaign " (c.state.as_str()) "): "
                            @for (i, group) in c.planned.iter().enumerate() {
                                @if i > 0 { "; " }
                                (group.join(", "))
                            }
                        }
                    } @else if !c.planned.is_empty() {
                        p.mute { "Planned next: "
                            @for (i, group) in c.planned.iter().enumerate() {
                                @if i > 0 { "; " }
                                (group.join(", "))
                            }
                        }
                    }
                }
            }
        }
    }
}

/// The failure domains (disrupted nodes and holders), what waits and why, the grants to other
/// tools and the overrides (with the admin page's forms).
fn gate_section(gate: &GateStatus, now: u64, actions: Option<&Actions>, base: &str) -> Markup {
    html! {
        section id="domains" {
            h2 { "Failure domains" }
            @if gate.domains.is_empty() {
                p.mute { "The gate has not judged a round yet." }
            } @else {
                p.mute { "Disrupted nodes (drained, offline, evacuating, rebooting, being repaired, by anyone) sit in one failure domain at a time." }
                div.wrap { table {
                    thead { tr { th { "domain" } th { "nodes" } th { "disrupted (holder)" } th { "override" } } }
                    tbody { @for domain in &gate.domains {
                        tr id={ "domain-" (domain.domain) } {
                            td { (domain.domain) }
                            td { (domain.nodes.len()) }
                            td {
                                @if domain.disrupted.is_empty() { span.mute { "none" } }
                                @for d in &domain.disrupted { span.warn { (d.node) } " (" (d.holder) ")" br; }
                            }
                            td { @match domain.override_until_ms { Some(until) => { "until " (utc_text_ms(until)) }, None => "-" } }
                        }
                    } }
                } }
            }
            @if !gate.waiting.is_empty() {
                h3 { "Waiting" }
                ul.waiting { @for w in &gate.waiting {
                    li.blocked { b { (w.duty) " " (w.subject) } ": " span.blocked-by { (w.blocked_by) } }
                } }
            }
        }
        section id="grants" {
            h2 { "Disruptions granted to other tools" }
            @if gate.grants.is_empty() {
                p.mute { "None. Tools ask with " code { "POST /1/disruptions" } " (see " code { "nodecare disruption" } ")." }
            } @else {
                div.wrap { table {
                    thead { tr { th { "node" } th { "requester" } th { "reason" } th { "expires" } th { "by" } th { "id" } } }
                    tbody { @for g in &gate.grants {
                        tr {
                            td { (g.node) } td { (g.requester) } td { (g.reason) }
                            td { "in " (age(g.expires_ms, now)) } td { (g.who) } td { code { (g.id) } }
                        }
                    } }
                } }
            }
        }
        @if gate.calendar.window.is_some() || !gate.calendar.freezes.is_empty() {
            section id="calendar" {
                h2 { "Maintenance windows and freezes" }
                @if let Some(window) = &gate.calendar.window {
                    p {
                        "Windows (" (gate.calendar.time_zone) "): " (gate.calendar.windows.join("; ")) ". "
                        @if window.open { span.ok { "Open" } ": " (window.text) "." } @else { span.warn { "Closed" } "; next: " (window.text) "." }
                    }
                }
                @if !gate.calendar.freezes.is_empty() {
                    div.wrap { table {
                        thead { tr { th { "from" } th { "until" } th { "state" } th { "set by" } th { "reason" } @if actions.is_some() { th {} } } }
                        tbody { @for f in &gate.calendar.freezes {
                            tr {
                                td { (f.from) }
                                td { (f.until) }
                                td { @if f.active { span.warn { "in force" } } @else if let Some(by) = &f.lifted_by { "lifted by " (by) } @else { "not in force" } }
                                td { (f.who) }
                                td { (f.reason) }
                                @if let Some(actions) = actions {
                                    td { @if f.active && f.who != "config" {
                                        form method="post" action={ (base) "freezes/" (f.id) "/lift" } {
                                            input type="hidden" name="csrf" value=(actions.csrf);
                                            button type="submit" { "Lift" }
                                        }
                                    } }
                                }
                            }
                        } }
                    } }
                }
                p.mute { "Planned work (campaigns, balancing, other tools' requests) starts only inside a window and never in a freeze; `nodecare freeze` sets, lists and lifts freezes." }
            }
        }
        @if gate.approvals.needed_for().is_some() || !gate.approvals.waiting.is_empty() {
            section id="approvals" {
                h2 { "Approvals" }
                p { "Needed for: " (gate.approvals.needed_for().unwrap_or_default()) "." }
                @if gate.approvals.waiting.is_empty() {
                    p.mute { "Nothing waits for an approval." }
                } @else {
                    div.wrap { table {
                        thead { tr { th { "waiting" } th { "would" } th { "state" } @if actions.is_some() { th {} } } }
                        tbody { @for w in &gate.approvals.waiting {
                            tr {
                                td { (w.holder) }
                                td { (w.subject) }
                                td { @if let Some(why) = &w.refused { span.warn { "refused: " (why) } } @else { "waiting" } }
                                @if let Some(actions) = actions {
                                    td {
                                        form method="post" action={ (base) "approvals" } {
                                            input type="hidden" name="csrf" value=(actions.csrf);
                                            input type="hidden" name="id" value=(w.id);
                                            input type="text" name="ticket" placeholder="change ticket" required;
                                            " "
                                            button type="submit" { "Approve" }
                                        }
                                        form method="post" action={ (base) "approvals" } {
                                            input type="hidden" name="csrf" value=(actions.csrf);
                                            input type="hidden" name="id" value=(w.id);
                                            input type="text" name="refuse" placeholder="why not" required;
                                            " "
                                            button type="submit" { "Refuse" }
                                        }
                                    }
                                }
                            }
                        } }
                    } }
                }
                @if let Some(error) = &gate.approvals.change_system_error {
                    p.warn { "The change system did not decide: " (error) }
                }
            }
        }
        @if !gate.failback.is_empty() {
            section id="failback" {
                h2 { "Failback" }
                p.mute { "Instances an evacuation moved off a node go back once it is back in service and healthy for the settle period ([failback])." }
                table {
                    thead { tr { th { "Node" } th { "Since" } th { "Instance" } th { "State" } th { "Why" } } }
                    tbody { @for home in &gate.failback { @for bound in &home.instances {
                        tr {
                            td { (home.node) }
                            td { @if let Some(since) = home.healthy_since_ms { "healthy since " (utc_text_ms(since)) } @else if let Some(why) = &home.not_ready { (why) } }
                            td { (bound.instance) }
                            td { (bound.state) }
                            td { (bound.why.as_deref().unwrap_or("")) }
                        }
                    } } }
                }
            }
        }
        @if let Some(actions) = actions {
            section id="freeze" {
                form.override method="post" action={ (base) "freezes" } {
                    input type="hidden" name="csrf" value=(actions.csrf);
                    "Freeze planned work for "
                    input type="number" name="hours" value="2" min="1" max="8784" required;
                    " hour(s), because "
                    input type="text" name="reason" placeholder="reason (audited)" required;
                    " "
                    button type="submit" { "Freeze" }
                }
            }
        }
        section id="overrides" {
            h2 { "Overrides" }
            @if gate.overrides.is_empty() {
                p.mute { "No failure domain is overridden." }
            } @else {
                div.wrap { table {
                    thead { tr { th { "domain" } th { "until" } th { "state" } th { "set by" } th { "reason" } @if actions.is_some() { th {} } } }
                    tbody { @for o in &gate.overrides {
                        tr {
                            td { (o.domain) }
                            td { (utc_text_ms(o.until_ms)) }
                            td { @if o.active { span.warn { "active" } } @else if let Some(by) = &o.revoked_by { "revoked by " (by) } @else { "expired" } }
                            td { (o.who) }
                            td { (o.reason) }
                            @if let Some(actions) = actions {
                                td { @if o.active {
                                    form method="post" action={ (base) "overrides/" (o.id) "/revoke" } {
                                        input type="hidden" name="csrf" value=(actions.csrf);
                                        button type="submit" { "Revoke" }
                                    }
                                } }
                            }
                        }
                    } }
                } }
            }
            @if let Some(actions) = actions {
                @if !gate.domains.is_empty() {
                    form.override method="post" action={ (base) "overrides" } {
                        input type="hidden" name="csrf" value=(actions.csrf);
                        "Override "
                        select name="domain" { @for d in &gate.domains { option value=(d.domain) { (d.domain) } } }
                        " for "
                        input type="number" name="hours" value="2" min="1" max="168" required;
                        " hour(s), because "
                        input type="text" name="reason" placeholder="reason (audited)" required;
                        " "
                        button type="submit" { "Set override" }
                    }
                }
            }
        }
        section id="audit" {
            h2 { "Audit log" }
            @if gate.audit.is_empty() {
                p.mute { "No grant, override or breaker change yet." }
            } @else {
                details {
                    summary { "The last " (gate.audit.len()) " changes to grants, overrides and the breaker" }
                    ol { @for e in &gate.audit {
                        li { (utc_text_ms(e.at_ms)) " " b { (e.who) } ": " (e.what) " (" (e.why) ")" }
                    } }
                }
            }
        }
    }
}

fn incident_block(
    incident: &Incident,
    intents: &[Intent],
    actions: Option<&Actions>,
    base: &str,
) -> Markup {
    html! {
        article.incident id={ "incident-" (incident.uuid) } {
            h3 {
                (incident.node) ": " (incident.action.as_str()) " "
                span class=(status_class(incident.repair_status)) { (incident.repair_status.as_str()) }
            }
            p.mute { code { (incident.uuid) } " · " a href={ "/ui/explain?record=" (incident.uuid) } { "why?" } }
            @if let Some(reason) = &incident.blocked_by {
                p.blocked { b { "Blocked: " } span.blocked-by { (reason) } }
            }
            @if let Some(failure) = &incident.failure {
                p.bad { "Failed: " (failure) }
            }
            @if let Some(warning) = &incident.warning {
                p.blocked { b { "Warning: " } (warning) }
            }
            p {
                "Tag " code { (incident.tag) } ": "
                @if incident.acknowledged { "acknowledged (removed by an operator)" }
                @else if let (true, Some(who)) = (incident.tag_applied, &incident.acknowledgement_asked_by) {
                    "on the node; acknowledged by " (who) ", the coordinator removes it" }
                @else if incident.tag_applied { "on the node; remove it to acknowledge" }
                @else if incident.repair_status == RepairStatus::Canceled { "never set (the incident was canceled)" }
                @else { "not yet on the node" }
                @if !incident.observed { span.mute { "; the node no longer reports this verdict" } }
            }
            details {
                summary { "Verdict " (incident.verdict.status.as_str())
                    @if let Some(command) = &incident.verdict.command { ": " code { (command) } } }
                div.wrap { table {
                    thead { tr { th { "script" } th { "status" } th { "details" } } }
                    tbody { @for (name, script) in &incident.verdict.details {
                        tr {
                            td { (name) }
                            td { (script.status.as_str()) }
                            td { code { (script.details.to_string()) }
                                @if let Some(reason) = &script.reason { " " (reason) } }
                        }
                    } }
                } }
            }
            @if !intents.is_empty() {
                div.wrap { table.jobs {
                    thead { tr { th { "step" } th { "job" } th { "status" } th { "error" } } }
                    tbody { @for intent in intents {
                        tr {
                            td { (intent.spec.describe(&incident.node)) }
                            td.job-id { @match intent.job_id { Some(id) => { (id) }, None => "-" } }
                            td { (intent_state(intent.state)) }
                            td { (intent.error.as_deref().unwrap_or("")) }
                        }
                    } }
                } }
            }
            details {
                summary { "History (" (incident.history.len()) ")" }
                ol { @for entry in &incident.history {
                    li { (utc_text(entry.at)) " " b { (entry.status.as_str()) } ": " (entry.event) }
                } }
            }
            @if let Some(actions) = actions {
                @if incident.tag_applied && !incident.acknowledged
                    && incident.acknowledgement_asked_by.is_none()
                    && matches!(incident.repair_status, RepairStatus::Completed | RepairStatus::Failed) {
                    form method="post" action={ (base) "incidents/" (incident.uuid) "/acknowledge" } {
                        input type="hidden" name="csrf" value=(actions.csrf);
                        button type="submit" { "Acknowledge (remove the tag)" }
                    }
                    " "
                }
                @if incident.repair_status.is_active() {
                    form method="post" action={ (base) "incidents/" (incident.uuid) "/cancel" } {
                        input type="hidden" name="csrf" value=(actions.csrf);
                        button type="submit" { "Cancel this incident" }
                    }
                }
            }
        }
    }
}

/// The CSRF token of `user` under `key`.
pub fn csrf_token(key: &[u8], user: &str) -> String {
    match Hmac::<Sha256>::new_from_slice(key) {
        Ok(mut mac) => {
            mac.update(b"nodecare-ui-csrf\0");
            mac.update(user.as_bytes());
            hex::encode(mac.finalize().into_bytes())
        }
        // HMAC takes keys of any length; unreachable in practice, and an empty token never
        // matches a submitted one.
        Err(_) => String::new(),
    }
}

pub(crate) fn html_page(body: String) -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::CACHE_CONTROL, "no-store"),
        ],
        body,
    )
        .into_response()
}

/// The admin page's basic-auth challenge: its own realm, apart from the JSON API's
/// ([`crate::api::API_CHALLENGE`]), so that the credentials a browser keeps for the page are never
/// sent to the API by the browser itself.
pub const ADMIN_CHALLENGE: &str = "Basic realm=\"nodecare admin page\", charset=\"UTF-8\"";

fn refusal_page(status: StatusCode, message: &str, challenge: bool) -> Response {
    let body = html! {
        (DOCTYPE)
        html lang="en" { head { meta charset="utf-8"; title { "nodecare: refused" } }
            body { h1 { "Refused" } p { (message) } p { a href="/ui/" { "Back to the read-only page" } } } }
    };
    let mut response = (status, html_page(body.into_string())).into_response();
    if challenge {
        response.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            HeaderValue::from_static(ADMIN_CHALLENGE),
        );
    }
    response
}

fn refusal_response(refusal: &Refusal) -> Response {
    match refusal {
        Refusal::Unauthenticated(m) => refusal_page(StatusCode::UNAUTHORIZED, m, true),
        other => refusal_page(StatusCode::FORBIDDEN, &other.to_string(), false),
    }
}

fn authorization(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
}

/// `GET /ui/`.
pub async fn page(State(state): State<ApiState>) -> Response {
    match snapshot(&state) {
        Ok(snapshot) => html_page(render(&snapshot, None)),
        Err(e) => refusal_page(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string(), false),
    }
}

/// `GET /ui/admin/`.
pub async fn admin_page(State(state): State<ApiState>, headers: HeaderMap) -> Response {
    let user = match auth::authorize_write(state.users.as_deref(), authorization(&headers)) {
        Ok(user) => user,
        Err(refusal) => return refusal_response(&refusal),
    };
    let actions = Actions {
        csrf: csrf_token(state.csrf_key.as_slice(), &user),
        user,
    };
    match snapshot(&state) {
        Ok(snapshot) => html_page(render(&snapshot, Some(&actions))),
        Err(e) => refusal_page(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string(), false),
    }
}

/// Whether the request comes from a page of this host: its `Origin`, or failing that its
/// `Referer`, must name the `Host` it was sent to; one of them must be present.
pub fn same_origin(headers: &HeaderMap) -> Result<(), String> {
    let host = headers
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .ok_or("request without Host")?;
    let source = headers
        .get(header::ORIGIN)
        .or_else(|| headers.get(header::REFERER))
        .and_then(|v| v.to_str().ok())
        .ok_or("request without Origin or Referer: refused (cross-site protection)")?;
    let rest = source
        .strip_prefix("http://")
        .or_else(|| source.strip_prefix("https://"))
        .ok_or_else(|| format!("request from {source:?}: refused (cross-site protection)"))?;
    let authority = rest.split('/').next().unwrap_or("");
    if authority.eq_ignore_ascii_case(host) {
        Ok(())
    } else {
        Err(format!(
            "request from {source:?} to {host:?}: refused (cross-site protection)"
        ))
    }
}

fn form_field<'a>(body: &'a [u8], name: &str) -> Option<&'a str> {
    std::str::from_utf8(body).ok()?.split('&').find_map(|pair| {
        let (key, value) = pair.split_once('=')?;
        (key == name).then_some(value)
    })
}

/// Why an action is refused: an HTML page with this status and message.
#[derive(Debug)]
struct Refused {
    status: StatusCode,
    message: String,
    challenge: bool,
}

impl Refused {
    fn new(status: StatusCode, message: impl Into<String>) -> Self {
        Self {
            status,
            message: message.into(),
            challenge: false,
        }
    }

    fn into_response(self) -> Response {
        refusal_page(self.status, &self.message, self.challenge)
    }
}

/// The checks of every action: a user with `write`, the same origin and the user's form
/// token. The user's name if they pass.
fn check_writer(state: &ApiState, headers: &HeaderMap, body: &[u8]) -> Result<String, Refused> {
    let user = auth::authorize_write(state.users.as_deref(), authorization(headers)).map_err(
        |refusal| match refusal {
            Refusal::Unauthenticated(message) => Refused {
                status: StatusCode::UNAUTHORIZED,
                message,
                challenge: true,
            },
            other => Refused::new(StatusCode::FORBIDDEN, other.to_string()),
        },
    )?;
    same_origin(headers).map_err(|message| Refused::new(StatusCode::FORBIDDEN, message))?;
    let expected = csrf_token(state.csrf_key.as_slice(), &user);
    let submitted = form_field(body, "csrf").unwrap_or("");
    if expected.is_empty() || !bool::from(expected.as_bytes().ct_eq(submitted.as_bytes())) {
        return Err(Refused::new(
            StatusCode::FORBIDDEN,
            "missing or wrong form token: reload the page and try again",
        ));
    }
    Ok(user)
}

/// [`check_writer`], and an incident uuid.
fn check_action(
    state: &ApiState,
    headers: &HeaderMap,
    body: &[u8],
    text: &str,
) -> Result<(String, Uuid), Refused> {
    let user = check_writer(state, headers, body)?;
    let uuid = Uuid::parse_str(text).map_err(|_| {
        Refused::new(
            StatusCode::BAD_REQUEST,
            format!("not an incident uuid: {text:?}"),
        )
    })?;
    Ok((user, uuid))
}

/// Decodes an `application/x-www-form-urlencoded` value (`+` is a space, `%XX` a byte); `None`
/// when it is not valid UTF-8 or a `%` escape is broken.
pub fn form_decode(value: &str) -> Option<String> {
    let bytes = value.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while let Some(&byte) = bytes.get(i) {
        match byte {
            b'+' => out.push(b' '),
            b'%' => {
                let hex = bytes.get(i + 1..i + 3)?;
                let text = std::str::from_utf8(hex).ok()?;
                out.push(u8::from_str_radix(text, 16).ok()?);
                i += 2;
            }
            other => out.push(other),
        }
        i += 1;
    }
    String::from_utf8(out).ok()
}

/// A decoded form field; a `400` naming it when it is missing or malformed.
fn decoded_field(body: &[u8], name: &str) -> Result<String, Refused> {
    form_field(body, name).and_then(form_decode).ok_or_else(|| {
        Refused::new(
            StatusCode::BAD_REQUEST,
            format!("form field {name:?} missing or malformed"),
        )
    })
}

/// The answer to a refused API-level action, as a page.
fn failed_page(failed: crate::api::Failed) -> Response {
    refusal_page(failed.status, &failed.message, false)
}

/// `POST /ui/admin/overrides`: sets an override (fields `domain`, `hours`, `reason`).
pub async fn set_override(
    State(state): State<ApiState>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let user = match check_writer(&state, &headers, &body) {
        Ok(user) => user,
        Err(refused) => return refused.into_response(),
    };
    let fields = decoded_field(&body, "domain").and_then(|domain| {
        let hours = decoded_field(&body, "hours")?;
        let reason = decoded_field(&body, "reason")?;
        let hours: u64 = hours.trim().parse().map_err(|_| {
            Refused::new(
                StatusCode::BAD_REQUEST,
                format!("not a number of hours: {hours:?}"),
            )
        })?;
        Ok((domain, hours, reason))
    });
    let (domain, hours, reason) = match fields {
        Ok(fields) => fields,
        Err(refused) => return refused.into_response(),
    };
    let request = nodecare_protocol::gate::OverrideRequest {
        domain,
        until_ms: None,
        duration_s: Some(hours.saturating_mul(3600)),
        reason,
    };
    match crate::admission::add_override(&state, &user, &request, nodecare_protocol::now_ms()) {
        Ok(_) => Redirect::to("/ui/admin/").into_response(),
        Err(failed) => failed_page(failed),
    }
}

/// `POST /ui/admin/freezes` (fields `hours`, `reason`): a freeze from now.
pub async fn set_freeze(
    State(state): State<ApiState>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let user = match check_writer(&state, &headers, &body) {
        Ok(user) => user,
        Err(refused) => return refused.into_response(),
    };
    let fields = decoded_field(&body, "hours").and_then(|hours| {
        let reason = decoded_field(&body, "reason")?;
        let hours: u64 = hours.trim().parse().map_err(|_| {
            Refused::new(
                StatusCode::BAD_REQUEST,
                format!("not a number of hours: {hours:?}"),
            )
        })?;
        Ok((hours, reason))
    });
    let (hours, reason) = match fields {
        Ok(fields) => fields,
        Err(refused) => return refused.into_response(),
    };
    let request = nodecare_core::calendar::FreezeRequest {
        from: None,
        until: None,
        duration_s: Some(hours.saturating_mul(3600)),
        reason,
    };
    match crate::freeze_api::add(&state, &user, &request, nodecare_protocol::now_ms()) {
        Ok(_) => Redirect::to("/ui/admin/").into_response(),
        Err(failed) => failed_page(failed),
    }
}

/// `POST /ui/admin/approvals` (fields `id` and `ticket`, or `id` and `refuse`).
pub async fn decide_approval(
    State(state): State<ApiState>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let user = match check_writer(&state, &headers, &body) {
        Ok(user) => user,
        Err(refused) => return refused.into_response(),
    };
    let id = match decoded_field(&body, "id") {
        Ok(id) => id,
        Err(refused) => return refused.into_response(),
    };
    let request = nodecare_protocol::gate::ApprovalRequest {
        id,
        ticket: decoded_field(&body, "ticket").ok(),
        refuse: decoded_field(&body, "refuse").ok(),
    };
    match crate::approval_api::decide(&state, &user, &request, nodecare_protocol::now_ms()) {
        Ok(_) => Redirect::to("/ui/admin/").into_response(),
        Err(failed) => failed_page(failed),
    }
}

/// `POST /ui/admin/freezes/<id>/lift`.
pub async fn lift_freeze(
    State(state): State<ApiState>,
    Path(text): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let user = match check_writer(&state, &headers, &body) {
        Ok(user) => user,
        Err(refused) => return refused.into_response(),
    };
    let Ok(id) = Uuid::parse_str(&text) else {
        return refusal_page(
            StatusCode::BAD_REQUEST,
            &format!("not a freeze id: {text:?}"),
            false,
        );
    };
    match crate::freeze_api::lift(&state, &user, id) {
        Ok(_) => Redirect::to("/ui/admin/").into_response(),
        Err(failed) => failed_page(failed),
    }
}

/// `POST /ui/admin/overrides/<id>/revoke`.
pub async fn revoke_override(
    State(state): State<ApiState>,
    Path(text): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let user = match check_writer(&state, &headers, &body) {
        Ok(user) => user,
        Err(refused) => return refused.into_response(),
    };
    let Ok(id) = Uuid::parse_str(&text) else {
        return refusal_page(
            StatusCode::BAD_REQUEST,
            &format!("not an override id: {text:?}"),
            false,
        );
    };
    match crate::admission::revoke(&state, &user, id) {
        Ok(_) => Redirect::to("/ui/admin/").into_response(),
        Err(failed) => failed_page(failed),
    }
}

/// `POST /ui/admin/breaker/reset` (field `reason`).
pub async fn reset_breaker(
    State(state): State<ApiState>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let user = match check_writer(&state, &headers, &body) {
        Ok(user) => user,
        Err(refused) => return refused.into_response(),
    };
    let reason = form_field(&body, "reason")
        .and_then(form_decode)
        .filter(|r| !r.trim().is_empty())
        .unwrap_or_else(|| "reset by an operator on the web page".to_owned());
    match crate::admission::reset(&state, &user, &reason).await {
        Ok(_) => Redirect::to("/ui/admin/").into_response(),
        Err(failed) => failed_page(failed),
    }
}

/// `POST /ui/admin/incidents/<uuid>/cancel`.
pub async fn cancel(
    State(state): State<ApiState>,
    Path(text): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let (user, uuid) = match check_action(&state, &headers, &body, &text) {
        Ok(checked) => checked,
        Err(refused) => return refused.into_response(),
    };
    match cancel_incident(&state.store, uuid).await {
        Ok(outcome @ (CancelOutcome::Canceled | CancelOutcome::Forgotten)) => {
            if outcome == CancelOutcome::Canceled {
                let _answered = crate::api::stop_canceled_jobs_in_time(&state, uuid).await;
            }
            tracing::info!(%uuid, %user, "incident canceled from the web page");
            Redirect::to("/ui/admin/").into_response()
        }
        Ok(CancelOutcome::NotFound) => {
            refusal_page(StatusCode::NOT_FOUND, &format!("no incident {uuid}"), false)
        }
        Ok(CancelOutcome::Finalized(message)) => {
            refusal_page(StatusCode::CONFLICT, &message, false)
        }
        Err(e) => refusal_page(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string(), false),
    }
}

/// `POST /ui/admin/incidents/<uuid>/acknowledge`: records the operator's acknowledgement in
/// the store ([`Event::AcknowledgementAsked`]) and wakes the round, whose executor removes the
/// incident's tag from its node through Ganeti (intent `untag`, with the reason trail, as an
/// operator would with `gnt-node remove-tags`) and then records the acknowledgement. No Ganeti
/// write happens here.
pub async fn acknowledge(
    State(state): State<ApiState>,
    Path(text): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let (user, uuid) = match check_action(&state, &headers, &body, &text) {
        Ok(checked) => checked,
        Err(refused) => return refused.into_response(),
    };
    // The round reads and writes incidents under this lock: the request is never lost to an
    // older copy it saves.
    let _guard = state.incident_lock.lock().await;
    let mut incident = match state.store.incident(uuid) {
        Ok(Some(incident)) => incident,
        Ok(None) => {
            return refusal_page(StatusCode::NOT_FOUND, &format!("no incident {uuid}"), false);
        }
        Err(e) => return refusal_page(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string(), false),
    };
    let who = format!("{user} on the nodecare web page");
    if incident
        .apply(Event::AcknowledgementAsked(who), nodecare_protocol::now_s())
        .is_err()
    {
        return refusal_page(
            StatusCode::CONFLICT,
            &format!(
                "incident {uuid} has no tag to acknowledge ({}, tag {})",
                incident.repair_status.as_str(),
                if incident.acknowledged {
                    "already removed"
                } else if incident.tag_applied {
                    "on the node"
                } else {
                    "not on the node"
                }
            ),
            false,
        );
    }
    if let Err(e) = state.store.save_incident(&incident) {
        return refusal_page(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string(), false);
    }
    tracing::info!(%uuid, %user, "acknowledgement asked on the web page; the round removes the tag");
    state.board.wake.notify_one();
    Redirect::to("/ui/admin/").into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages_read_well() {
        assert_eq!(age(10_000, 4_000), "6s");
        assert_eq!(age(1_000_000, 0), "16m");
        assert_eq!(age(0, 5), "0s");
        assert_eq!(age(86_400_000 * 3, 0), "3d");
    }

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (k, v) in pairs {
            map.insert(*k, HeaderValue::from_static(v));
        }
        map
    }

    #[test]
    fn cross_site_requests_are_refused() {
        assert!(same_origin(&headers(&[("host", "m:1816"), ("origin", "http://m:1816")])).is_ok());
        assert!(
            same_origin(&headers(&[
                ("host", "m:1816"),
                ("referer", "http://m:1816/ui/admin/")
            ]))
            .is_ok()
        );
        for bad in [
            headers(&[("host", "m:1816")]),
            headers(&[("host", "m:1816"), ("origin", "http://evil:1816")]),
            headers(&[("host", "m:1816"), ("origin", "null")]),
            headers(&[("host", "m:1816"), ("referer", "http://m:1816.evil/x")]),
            headers(&[("origin", "http://m:1816")]),
        ] {
            assert!(same_origin(&bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn csrf_tokens_are_per_user_and_key() {
        let a = csrf_token(b"k1", "admin");
        assert_eq!(a.len(), 64);
        assert_eq!(a, csrf_token(b"k1", "admin"));
        assert_ne!(a, csrf_token(b"k2", "admin"));
        assert_ne!(a, csrf_token(b"k1", "other"));
    }

    #[test]
    fn form_values_are_decoded() {
        assert_eq!(
            form_decode("group%3Adefault").as_deref(),
            Some("group:default")
        );
        assert_eq!(
            form_decode("ticket+4711%2C+firmware").as_deref(),
            Some("ticket 4711, firmware")
        );
        assert_eq!(form_decode("caf%C3%A9").as_deref(), Some("café"));
        assert_eq!(form_decode("bad%2"), None);
        assert_eq!(form_decode("bad%zz"), None);
        assert_eq!(form_decode("%ff"), None);
    }

    #[test]
    fn form_fields_are_found() {
        assert_eq!(form_field(b"a=1&csrf=ab12", "csrf"), Some("ab12"));
        assert_eq!(form_field(b"a=1", "csrf"), None);
        assert_eq!(form_field(&[0xff, 0xfe], "csrf"), None);
    }
}
