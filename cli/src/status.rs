//! `nodecare status` and `nodecare cancel`: the coordinator's incidents, agents and jobs, as a
//! table for people or JSON with `--json`, and canceling an incident.

use std::fmt::Write as _;
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use nodecare_protocol::DiagnoseStatus;
use nodecare_protocol::status::{AgentState, IncidentSummary, Overview};
use serde::Deserialize;

/// Default coordinator API (on the master).
pub(crate) const DEFAULT_URL: &str = "http://127.0.0.1:1816";

/// `nodecare status`.
#[derive(Debug, Args)]
pub(crate) struct StatusArgs {
    /// Coordinator API base URL.
    #[arg(long, env = "NODECARE_COORDINATOR_URL", default_value = DEFAULT_URL)]
    url: String,
    /// Print the coordinator's JSON instead of tables.
    #[arg(long)]
    json: bool,
    /// Also list agents that are fine.
    #[arg(long, short = 'a')]
    all: bool,
}

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
}

fn client() -> Result<reqwest::blocking::Client, String> {
    // reqwest is built without a TLS provider of its own; an error means one is installed.
    if rustls::crypto::ring::default_provider()
        .install_default()
        .is_err()
    {
        // Already installed by another part of the program.
    }
    reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .map_err(|e| format!("cannot build the HTTP client: {e}"))
}

/// The coordinator's error answer (`{"code", "message"}`).
#[derive(Debug, Deserialize)]
struct ApiError {
    message: String,
}

/// The message of an error answer, or the body itself if it is not one.
fn message(body: &str) -> String {
    serde_json::from_str::<ApiError>(body).map_or_else(|_| body.trim().to_owned(), |e| e.message)
}

/// GETs `url` and returns the body of a successful answer.
pub(crate) fn fetch(url: &str) -> Result<String, String> {
    let response = client()?
        .get(url)
        .send()
        .map_err(|e| format!("cannot reach the coordinator at {url}: {e}"))?;
    let status = response.status();
    let body = response
        .text()
        .map_err(|e| format!("{url}: cannot read the answer: {e}"))?;
    if !status.is_success() {
        return Err(format!("{url}: HTTP {status}: {}", message(&body)));
    }
    Ok(body)
}

fn or_dash(value: Option<&str>) -> String {
    value.map_or_else(|| "-".to_owned(), str::to_owned)
}

/// Unix seconds as `YYYY-MM-DD HH:MM:SS UTC`.
pub(crate) fn utc(unix_seconds: f64) -> String {
    if !unix_seconds.is_finite() || unix_seconds < 0.0 {
        return "?".to_owned();
    }
    // Whole seconds; the float is well within i64 for any real date.
    #[allow(clippy::cast_possible_truncation)]
    let secs = unix_seconds.floor() as i64;
    let days = secs.div_euclid(86_400);
    let rest = secs.rem_euclid(86_400);
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02} UTC",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60
    )
}

/// Renders rows as an aligned table.
pub(crate) fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let mut line = |cells: Vec<String>| {
        let mut parts = Vec::new();
        for (cell, width) in cells.iter().zip(&widths) {
            parts.push(format!("{cell:<width$}"));
        }
        let _ignored = writeln!(out, "{}", parts.join("  ").trim_end());
    };
    line(header.iter().map(|h| (*h).to_owned()).collect());
    for row in rows {
        line(row.clone());
    }
    out
}

/// The TAG cell: the tag only while it is on the node (applied and not removed).
pub(crate) fn tag_cell(incident: &IncidentSummary) -> String {
    if incident.tag_applied && !incident.acknowledged {
        incident.tag.clone()
    } else {
        "-".to_owned()
    }
}

/// The NOTE cell: what holds the incident or how it ended.
pub(crate) fn note_cell(incident: &IncidentSummary) -> String {
    let mut notes = Vec::new();
    if let Some(blocked) = &incident.blocked_by {
        notes.push(format!("blocked_by: {blocked}"));
    }
    if let Some(failure) = &incident.failure {
        notes.push(format!("failed: {failure}"));
    }
    if incident.repair_status == "failed" && !incident.tag_applied {
        notes.push("failure tag not yet on the node".to_owned());
    }
    if incident.acknowledged {
        notes.push(match incident.acknowledged_at {
            Some(at) => format!("acknowledged {} (tag removed)", utc(at)),
            None => "acknowledged (tag removed)".to_owned(),
        });
    }
    notes.join("; ")
}

/// Renders `/1/overview` for people.
pub(crate) fn render_overview(overview: &Overview, all_agents: bool) -> String {
    let mut out = String::new();
    let round = &overview.round;
    let _ignored = writeln!(
        out,
        "coordinator on {}: round {} took {} ms, {} agents read, {} without a verified report{}",
        overview.node,
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
    if overview.incidents.is_empty() {
        out.push_str("\nno incidents\n");
    } else {
        let rows: Vec<Vec<String>> = overview
            .incidents
            .iter()
            .map(|i| {
                let jobs: Vec<String> = i.jobs.iter().map(u64::to_string).collect();
                vec![
                    i.id.clone(),
                    i.node.clone(),
                    i.action.clone(),
                    i.repair_status.clone(),
                    if jobs.is_empty() {
                        "-".to_owned()
                    } else {
                        jobs.join(",")
                    },
                    tag_cell(i),
                    note_cell(i),
                ]
            })
            .collect();
        out.push('\n');
        out.push_str(&table(
            &[
                "INCIDENT", "NODE", "ACTION", "STATUS", "JOBS", "TAG", "NOTE",
            ],
            &rows,
        ));
    }
    let shown: Vec<Vec<String>> = overview
        .agents
        .iter()
        .filter(|a| all_agents || a.state != AgentState::Ok)
        .map(|a| {
            vec![
                a.node.clone(),
                a.state.as_str().to_owned(),
                or_dash(a.verdict.map(DiagnoseStatus::as_str)),
                or_dash(a.error.as_deref().or(a.reason.as_deref())),
            ]
        })
        .collect();
    if shown.is_empty() {
        let _ignored = writeln!(
            out,
            "\nall {} agents gave verified reports",
            overview.agents.len()
        );
    } else {
        out.push('\n');
        out.push_str(&table(&["NODE", "AGENT", "VERDICT", "REASON"], &shown));
    }
    out
}

/// Runs `nodecare status`.
pub(crate) fn run_status(args: StatusArgs) -> ExitCode {
    let url = format!("{}/1/overview", args.url.trim_end_matches('/'));
    let result = fetch(&url).and_then(|body| {
        if args.json {
            return Ok(body);
        }
        serde_json::from_str::<Overview>(&body)
            .map(|overview| render_overview(&overview, args.all))
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
    let result = client().and_then(|client| {
        let response = client
            .post(&url)
            .send()
            .map_err(|e| format!("cannot reach the coordinator at {url}: {e}"))?;
        let status = response.status();
        let body = response
            .text()
            .map_err(|e| format!("{url}: cannot read the answer: {e}"))?;
        Ok((status, body))
    });
    match result {
        Ok((status, body)) if status.is_success() => {
            if args.json {
                println!("{}", body.trim_end());
                return ExitCode::SUCCESS;
            }
            match serde_json::from_str::<CancelAnswer>(&body) {
                Ok(answer) => {
                    println!("incident {} {}", args.incident, answer.result);
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
            ExitCode::FAILURE
        }
        Err(error) => {
            eprintln!("nodecare cancel: {error}");
            ExitCode::FAILURE
        }
    }
}

/// The coordinator's answer to a cancel (`{"id", "result": "canceled" | "forgotten"}`).
#[derive(Debug, Deserialize)]
struct CancelAnswer {
    result: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_formats_unix_seconds() {
        assert_eq!(utc(0.0), "1970-01-01 00:00:00 UTC");
        assert_eq!(utc(1_795_431_150.7), "2026-11-23 10:52:30 UTC");
        assert_eq!(utc(951_782_400.0), "2000-02-29 00:00:00 UTC");
        assert_eq!(utc(-1.0), "?");
        assert_eq!(utc(f64::NAN), "?");
    }

    #[test]
    fn table_aligns_columns() {
        let t = table(&["A", "BB"], &[vec!["long".into(), "x".into()]]);
        assert_eq!(t, "A     BB\nlong  x\n");
    }
}
