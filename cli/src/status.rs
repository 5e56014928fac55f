//! `nodecare status` and `nodecare cancel`: the coordinator's incidents, agents and jobs, as a
//! table for people or JSON with `--json`, and canceling an incident.

use std::fmt::Write as _;
use std::process::ExitCode;

use clap::Args;
use nodecare_protocol::clock::utc_text_ms;
use nodecare_protocol::status::{AgentState, IncidentSummary, Overview};
use serde::Deserialize;

use crate::api::{DEFAULT_URL, client_for, credentials, fetch, message};
use crate::fields::{INCIDENT_DEFAULTS, INCIDENT_FIELDS, NODE_FIELDS, NodeRow, now_ms};
use crate::list::{Field, ListArgs, Style, json_rows, render_table, select};

/// `nodecare status`.
#[derive(Debug, Args)]
pub(crate) struct StatusArgs {
    /// Coordinator API base URL.
    #[arg(long, env = "NODECARE_COORDINATOR_URL", default_value = DEFAULT_URL)]
    url: String,
    #[command(flatten)]
    pub(crate) view: ViewArgs,
}

/// The options of `nodecare status` and `nodecare watch`: the gnt-* list options, `-o` for the
/// incidents table and `-O` for the agents table.
#[derive(Debug, Clone, Args)]
pub(crate) struct ViewArgs {
    /// Also list agents that are fine.
    #[arg(long, short = 'a')]
    pub(crate) all: bool,
    /// Fields of the agents table, comma-separated (those of `nodecare nodes`); a list
    /// starting with `+` adds to the default ones.
    #[arg(short = 'O', long = "agent-fields", value_name = "FIELDS")]
    pub(crate) agent_fields: Option<String>,
    #[command(flatten)]
    pub(crate) list: ListArgs,
}

/// What `-o`/`-O` select for the two tables of the status view.
pub(crate) struct ViewFields {
    incidents: Vec<&'static Field<IncidentSummary>>,
    agents: Vec<&'static Field<NodeRow>>,
}

impl ViewArgs {
    /// The selected fields, or an error naming the unknown ones and the valid ones.
    pub(crate) fn fields(&self) -> Result<ViewFields, String> {
        Ok(ViewFields {
            incidents: select(
                INCIDENT_FIELDS,
                STATUS_INCIDENT_DEFAULTS,
                self.list.output.as_deref(),
            )
            .map_err(|e| format!("-o: {e}"))?,
            agents: select(
                NODE_FIELDS,
                STATUS_AGENT_DEFAULTS,
                self.agent_fields.as_deref(),
            )
            .map_err(|e| format!("-O: {e}"))?,
        })
    }
}

/// The incidents table's default fields (as `nodecare incidents`).
const STATUS_INCIDENT_DEFAULTS: &[&str] = INCIDENT_DEFAULTS;
/// The agents table's default fields.
const STATUS_AGENT_DEFAULTS: &[&str] = &["node", "agent", "verdict", "reason"];

/// `nodecare cancel`.
#[derive(Debug, Args)]
pub(crate) struct CancelArgs {
    /// Incident uuid (see `nodecare status`).
    incident: String,
    /// Coordinator API base URL.
    #[arg(long, env = "NODECARE_COORDINATOR_URL", default_value = DEFAULT_URL)]
    url: String,
    /// Print the coordinator's JSON answer.
    #[arg(long)]
    json: bool,
    /// User of the coordinator's users file (one with the `write` option).
    #[arg(long, env = "NODECARE_USER")]
    user: Option<String>,
    /// File whose first line is the user's password (else `NODECARE_PASSWORD`).
    #[arg(long, value_name = "FILE")]
    password_file: Option<std::path::PathBuf>,
}

/// The instance repairs (harep's duty) of the last round, one line each: instance, state, the
/// repair, what happens and what holds it; nothing when there are none.
fn render_instance_repairs(overview: &Overview) -> String {
    let mut out = String::new();
    if overview.instance_repairs.is_empty() {
        return out;
    }
    out.push_str("\ninstance repairs:\n");
    for repair in &overview.instance_repairs {
        let _ignored = write!(
            out,
            "  {} {} ({}): {}",
            repair.instance,
            repair.state,
            repair.needs.as_deref().unwrap_or("-"),
            repair.note
        );
        if let Some(blocked) = &repair.blocked_by {
            let _ignored = write!(out, "; waits: {blocked}");
        }
        out.push('\n');
    }
    out
}

/// The failback part of the status: each evacuated node whose instances go back, and where
/// each instance stands.
fn render_failback(overview: &Overview) -> String {
    let mut out = String::new();
    if overview.failback.is_empty() {
        return out;
    }
    out.push_str(
        "
failback (instances going back to the node they were evacuated from):
",
    );
    for home in &overview.failback {
        let state = match (&home.ended_ms, &home.not_ready, home.healthy_since_ms) {
            (Some(ended), _, _) => format!("done {}", utc_text_ms(*ended)),
            (None, Some(why), _) => format!("not ready: {why}"),
            (None, None, Some(since)) => format!("healthy since {}", utc_text_ms(since)),
            (None, None, None) => "health not known yet".to_owned(),
        };
        let _ignored = writeln!(out, "  {} (incident {}): {state}", home.node, home.incident);
        for bound in &home.instances {
            let _ignored = writeln!(
                out,
                "    {} {}{}{}",
                bound.instance,
                bound.state,
                bound
                    .why
                    .as_deref()
                    .map(|why| format!(": {why}"))
                    .unwrap_or_default(),
                if bound.attempts > 0 {
                    format!(" ({} move(s) home)", bound.attempts)
                } else {
                    String::new()
                }
            );
        }
    }
    out
}

/// Renders `/1/overview` as `args` asks. By default: the last round, the incidents table and
/// the agents table (agents that are not `ok`, or all with `-a`). With `--no-headers` or
/// `--separator`: only the two tables' lines, separated by one empty line. With `--json`: an
/// object `{"incidents": [...], "agents": [...]}` of rows with the selected fields.
pub(crate) fn render_overview(overview: &Overview, args: &ViewArgs, fields: &ViewFields) -> String {
    let now = now_ms();
    let agents: Vec<NodeRow> = overview
        .agents
        .iter()
        .filter(|a| args.all || a.state != AgentState::Ok)
        .map(|a| NodeRow {
            status: a.clone(),
            now_ms: now,
        })
        .collect();
    let list = &args.list;
    if list.json {
        let object = serde_json::json!({
            "incidents": json_rows(&fields.incidents, &overview.incidents),
            "agents": json_rows(&fields.agents, &agents),
        });
        let mut text = serde_json::to_string_pretty(&object).unwrap_or_else(|_| "{}".to_owned());
        text.push('\n');
        return text;
    }
    let incidents = render_table(&fields.incidents, &overview.incidents, list, Style::Status);
    let agent_table = render_table(&fields.agents, &agents, list, Style::Status);
    if list.no_headers || list.separator.is_some() {
        return format!("{incidents}\n{agent_table}");
    }
    let mut out = String::new();
    let round = &overview.round;
    if round.number == 0 {
        // A coordinator that just started (a new master first takes over the state the master
        // candidates keep, waiting out the old master's lease) has no round to show yet.
        let _ignored = writeln!(
            out,
            "coordinator on {}: no round finished yet{}",
            overview.node,
            round
                .error
                .as_deref()
                .map(|e| format!(", error: {e}"))
                .unwrap_or_default(),
        );
    } else {
        let _ignored = writeln!(
            out,
            "coordinator on {}{}: round {} took {} ms, {} agents read, {} without a verified report{}",
            overview.node,
            round
                .ganeti_version
                .as_deref()
                .map(|v| format!(" (Ganeti {v})"))
                .unwrap_or_default(),
            round.number,
            round.duration_ms,
            round.agents,
            round.agents_failed,
            round
                .error
                .as_deref()
                .map(|e| format!(", error: {e}"))
                .unwrap_or_default(),
        );
    }
    out.push_str(&render_gate(overview));
    if overview.incidents.is_empty() {
        out.push_str("\nno incidents\n");
    } else {
        out.push('\n');
        out.push_str(&incidents);
    }
    out.push_str(&render_instance_repairs(overview));
    out.push_str(&render_failback(overview));
    if overview.agents.is_empty() {
        out.push_str("\nno agent read yet\n");
    } else if agents.is_empty() {
        let _ignored = writeln!(
            out,
            "\nall {} agents gave verified reports",
            overview.agents.len()
        );
    } else {
        out.push('\n');
        out.push_str(&agent_table);
    }
    out
}

/// The gate's part of the status view: the failure domains (busy ones with their holders),
/// what waits and why, the grants, the overrides and the breaker. Empty when the coordinator
/// shows none of them (before its first round, or an older coordinator).
pub(crate) fn render_gate(overview: &Overview) -> String {
    let breaker = &overview.breaker;
    let calendar = overview
        .calendar
        .as_ref()
        .filter(|c| c.window.is_some() || !c.freezes.is_empty());
    let approvals = overview
        .approvals
        .as_ref()
        .filter(|a| !a.waiting.is_empty());
    let anything = !overview.domains.is_empty()
        || !overview.grants.is_empty()
        || !overview.overrides.is_empty()
        || breaker.open
        || breaker.reset_ms.is_some()
        || calendar.is_some()
        || approvals.is_some();
    if !anything {
        return String::new();
    }
    let mut out = String::new();
    let _ignored = writeln!(out, "\n{}", crate::gate::breaker_line(breaker));
    if let Some(calendar) = calendar {
        let _ignored = writeln!(out, "{}", crate::freeze::calendar_text(calendar));
    }
    if let Some(approvals) = approvals {
        for w in &approvals.waiting {
            let state = w.refused.as_deref().map_or_else(
                || "waiting for an approval".to_owned(),
                |why| format!("refused: {why}"),
            );
            let _ignored = writeln!(
                out,
                "approval: {} {} ({}): {state}",
                w.id, w.holder, w.subject
            );
        }
    }
    if !overview.domains.is_empty() {
        let busy = overview
            .domains
            .iter()
            .filter(|d| !d.disrupted.is_empty())
            .count();
        let _ignored = writeln!(
            out,
            "failure domains: {} ({busy} disrupted)",
            overview.domains.len()
        );
        for domain in &overview.domains {
            let mut line = format!("  {}: {} node(s)", domain.domain, domain.nodes.len());
            if domain.disrupted.is_empty() {
                line.push_str(", none disrupted");
            } else {
                let held: Vec<String> = domain
                    .disrupted
                    .iter()
                    .map(|d| format!("{} ({})", d.node, d.holder))
                    .collect();
                let _ignored = write!(line, ", disrupted: {}", held.join(", "));
            }
            if let Some(until) = domain.override_until_ms {
                let _ignored = write!(line, "; overridden until {}", utc_text_ms(until));
            }
            let _ignored = writeln!(out, "{line}");
        }
    }
    if !overview.waiting.is_empty() {
        let _ignored = writeln!(out, "waiting:");
        for waiting in &overview.waiting {
            let _ignored = writeln!(
                out,
                "  {} {}: {}",
                waiting.duty, waiting.subject, waiting.blocked_by
            );
        }
    }
    if !overview.grants.is_empty() {
        let _ignored = writeln!(out, "disruptions granted to other tools:");
        for grant in &overview.grants {
            let _ignored = writeln!(
                out,
                "  {} {} to {} until {} (by {}): {}",
                grant.id,
                grant.node,
                grant.requester,
                utc_text_ms(grant.expires_ms),
                grant.who,
                grant.reason
            );
        }
    }
    if !overview.overrides.is_empty() {
        let _ignored = writeln!(out, "overrides:");
        for o in &overview.overrides {
            let _ignored = writeln!(
                out,
                "  {} {} until {}, {} (set by {}): {}",
                o.id,
                o.domain,
                utc_text_ms(o.until_ms),
                crate::gate::override_state(o),
                o.who,
                o.reason
            );
        }
    }
    out
}

/// Runs `nodecare status`.
pub(crate) fn run_status(args: StatusArgs) -> ExitCode {
    let url = format!("{}/1/overview", args.url.trim_end_matches('/'));
    let result = args.view.fields().and_then(|fields| {
        let body = fetch(&url)?;
        serde_json::from_str::<Overview>(&body)
            .map(|overview| render_overview(&overview, &args.view, &fields))
            .map_err(|e| format!("{url}: not a coordinator overview: {e}"))
    });
    match result {
        Ok(text) => {
            print!("{text}");
            if !text.ends_with('\n') {
                println!();
            }
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("nodecare status: {error}");
            ExitCode::FAILURE
        }
    }
}

/// Runs `nodecare cancel`.
pub(crate) fn run_cancel(args: CancelArgs) -> ExitCode {
    let url = format!(
        "{}/1/incidents/{}/cancel",
        args.url.trim_end_matches('/'),
        args.incident
    );
    let credentials = match credentials(
        args.user.as_deref(),
        args.password_file.as_deref(),
        std::env::var("NODECARE_PASSWORD").ok(),
    ) {
        Ok(credentials) => credentials,
        Err(error) => {
            eprintln!("nodecare cancel: {error}");
            return ExitCode::FAILURE;
        }
    };
    let anonymous = credentials.is_none();
    let result = client_for(&url).and_then(|(client, target)| {
        let mut request = client.post(target);
        if let Some((user, password)) = &credentials {
            request = request.basic_auth(user, Some(password));
        }
        let response = match request.send() {
            Ok(response) => response,
            // Never sent: nothing was canceled.
            Err(e) if e.is_connect() => {
                return Err(format!("cannot reach the coordinator at {url}: {e}"));
            }
            // Sent, but no answer came (a timeout, a connection closed under it): the cancel
            // may be recorded all the same; the incident tells.
            Err(e) => return Ok(Err(e.to_string())),
        };
        let status = response.status();
        let body = response
            .text()
            .map_err(|e| format!("{url}: cannot read the answer: {e}"))?;
        Ok(Ok((status, body)))
    });
    let result = match result {
        Ok(Ok(answer)) => Ok(answer),
        Ok(Err(lost)) => return cancel_without_answer(&args, &lost),
        Err(error) => Err(error),
    };
    match result {
        Ok((status, body)) if status.is_success() => {
            if args.json {
                println!("{}", body.trim_end());
                return ExitCode::SUCCESS;
            }
            match serde_json::from_str::<CancelAnswer>(&body) {
                Ok(answer) => {
                    println!("incident {} {}", args.incident, answer.result);
                    if let Some(following) = &answer.following {
                        println!("  {following}");
                    }
                    for job in &answer.jobs {
                        if job.canceled {
                            println!("  job {} ({}): canceled", job.job, job.intent);
                        } else {
                            println!(
                                "  job {} ({}): not canceled: {}",
                                job.job, job.intent, job.message
                            );
                        }
                    }
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("nodecare cancel: {url}: unexpected answer: {e}");
                    ExitCode::FAILURE
                }
            }
        }
        Ok((status, body)) => {
            eprintln!("nodecare cancel: HTTP {status}: {}", message(&body));
            if anonymous && status == reqwest::StatusCode::UNAUTHORIZED {
                eprintln!(
                    "nodecare cancel: give a user with the write option: --user USER and --password-file FILE (or NODECARE_PASSWORD)"
                );
            }
            ExitCode::FAILURE
        }
        Err(error) => {
            eprintln!("nodecare cancel: {error}");
            ExitCode::FAILURE
        }
    }
}

/// A cancel sent whose answer did not come (`lost`: why): the incident as the coordinator
/// reads it now tells whether the cancel is recorded. One that reads canceled (or is gone) is
/// reported as canceled: an accepted cancel is never reported as a failure.
fn cancel_without_answer(args: &CancelArgs, lost: &str) -> ExitCode {
    let url = format!(
        "{}/1/incidents/{}",
        args.url.trim_end_matches('/'),
        args.incident
    );
    let state = client_for(&url).and_then(|(client, target)| {
        let response = client
            .get(target)
            .send()
            .map_err(|e| format!("cannot reach the coordinator at {url}: {e}"))?;
        let status = response.status();
        let body = response
            .text()
            .map_err(|e| format!("{url}: cannot read the answer: {e}"))?;
        Ok((status, body))
    });
    let canceled = match &state {
        Ok((status, _)) if *status == reqwest::StatusCode::NOT_FOUND => Some("forgotten"),
        Ok((status, body)) if status.is_success() => serde_json::from_str::<IncidentSummary>(body)
            .ok()
            .filter(|incident| incident.repair_status == "canceled")
            .map(|_| "canceled"),
        _ => None,
    };
    match canceled {
        Some(result) => {
            if args.json {
                println!(
                    "{}",
                    serde_json::json!({"id": args.incident, "result": result, "jobs": []})
                );
            } else {
                println!("incident {} {result}", args.incident);
                println!(
                    "  the coordinator's answer did not come ({lost}), but the incident reads {result}; Ganeti's answers to the cancels of its jobs follow in its history: nodecare incidents show {}",
                    args.incident
                );
            }
            ExitCode::SUCCESS
        }
        None => {
            eprintln!(
                "nodecare cancel: the coordinator's answer did not come ({lost}), and the incident does not read canceled{}: run the cancel again",
                match &state {
                    Err(error) => format!(" ({error})"),
                    Ok((status, _)) if !status.is_success() => format!(" (HTTP {status})"),
                    Ok(_) => String::new(),
                }
            );
            ExitCode::FAILURE
        }
    }
}

/// The coordinator's answer to a cancel (`{"id", "result": "canceled" | "forgotten"}`).
#[derive(Debug, Deserialize)]
struct CancelAnswer {
    result: String,
    /// What the cancel did to each unfinished job whose cancel Ganeti answered in time.
    #[serde(default)]
    jobs: Vec<nodecare_protocol::status::CanceledJob>,
    /// Set when Ganeti's answers to some cancels follow (reported in the incident's history).
    #[serde(default)]
    following: Option<String>,
}

#[cfg(test)]
mod tests {
    #[test]
    fn instance_repairs_are_listed_with_what_holds_them() {
        let mut overview: nodecare_protocol::status::Overview = serde_json::from_value(serde_json::json!({
            "node": "node1", "round": {"number": 1, "started_ms": 0, "duration_ms": 5, "agents": 2,
            "agents_failed": 0, "jobs_submitted": 0, "error": null}, "incidents": [], "agents": []
        }))
        .unwrap();
        assert_eq!(super::render_instance_repairs(&overview), "");
        overview.instance_repairs = vec![nodecare_protocol::status::InstanceRepairSummary {
            instance: "inst3".into(),
            state: "Needs repair".into(),
            needs: Some("failover".into()),
            note: "primary node4 is offline".into(),
            blocked_by: Some("storm breaker open: storm".into()),
        }];
        assert_eq!(
            super::render_instance_repairs(&overview),
            "\ninstance repairs:\n  inst3 Needs repair (failover): primary node4 is offline; waits: storm breaker open: storm\n"
        );
    }
}
