//! `nodecare status` and `nodecare cancel`: the coordinator's incidents, agents and jobs, as a
//! table for people or JSON with `--json`, and canceling an incident.

use std::fmt::Write as _;
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use serde_json::Value;

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

fn fetch(url: &str) -> Result<Value, String> {
    let response = client()?
        .get(url)
        .send()
        .map_err(|e| format!("cannot reach the coordinator at {url}: {e}"))?;
    let status = response.status();
    let body: Value = response
        .json()
        .map_err(|e| format!("{url}: answer is not JSON: {e}"))?;
    if !status.is_success() {
        return Err(format!("{url}: HTTP {status}: {}", message(&body)));
    }
    Ok(body)
}

fn message(body: &Value) -> String {
    body.get("message")
        .and_then(Value::as_str)
        .map_or_else(|| body.to_string(), str::to_owned)
}

fn text(value: &Value) -> String {
    match value {
        Value::Null => "-".to_owned(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
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

/// Renders `/1/overview` for people.
pub(crate) fn render_overview(overview: &Value, all_agents: bool) -> String {
    let mut out = String::new();
    let round = &overview["round"];
    let _ignored = writeln!(
        out,
        "coordinator on {}: round {} took {} ms, {} agents read, {} without a verified report{}",
        text(&overview["node"]),
        text(&round["number"]),
        text(&round["duration_ms"]),
        text(&round["agents"]),
        text(&round["agents_failed"]),
        round["error"]
            .as_str()
            .map(|e| format!(", error: {e}"))
            .unwrap_or_default(),
    );
    let empty = Vec::new();
    let incidents = overview["incidents"].as_array().unwrap_or(&empty);
    if incidents.is_empty() {
        out.push_str("\nno incidents\n");
    } else {
        let rows: Vec<Vec<String>> = incidents
            .iter()
            .map(|i| {
                let note = i["blocked_by"]
                    .as_str()
                    .or_else(|| i["failure"].as_str())
                    .unwrap_or("");
                vec![
                    text(&i["id"]),
                    text(&i["node"]),
                    text(&i["action"]),
                    text(&i["repair-status"]),
                    i["jobs"]
                        .as_array()
                        .map(|j| j.iter().map(text).collect::<Vec<_>>().join(","))
                        .filter(|s| !s.is_empty())
                        .unwrap_or_else(|| "-".into()),
                    text(&i["tag"]),
                    note.to_owned(),
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
    let agents = overview["agents"].as_array().unwrap_or(&empty);
    let shown: Vec<Vec<String>> = agents
        .iter()
        .filter(|a| all_agents || a["state"].as_str() != Some("ok"))
        .map(|a| {
            vec![
                text(&a["node"]),
                text(&a["state"]),
                text(&a["verdict"]),
                text(&a["error"]),
            ]
        })
        .collect();
    if shown.is_empty() {
        let _ignored = writeln!(out, "\nall {} agents gave verified reports", agents.len());
    } else {
        out.push('\n');
        out.push_str(&table(&["NODE", "AGENT", "VERDICT", "ERROR"], &shown));
    }
    out
}

/// Runs `nodecare status`.
pub(crate) fn run_status(args: StatusArgs) -> ExitCode {
    let url = format!("{}/1/overview", args.url.trim_end_matches('/'));
    match fetch(&url) {
        Ok(overview) => {
            if args.json {
                println!(
                    "{}",
                    serde_json::to_string_pretty(&overview).unwrap_or_default()
                );
            } else {
                print!("{}", render_overview(&overview, args.all));
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
        let body: Value = response
            .json()
            .map_err(|e| format!("{url}: answer is not JSON: {e}"))?;
        Ok((status, body))
    });
    match result {
        Ok((status, body)) if status.is_success() => {
            if args.json {
                println!("{body}");
            } else {
                println!("incident {} {}", args.incident, text(&body["result"]));
            }
            ExitCode::SUCCESS
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn overview_renders_incidents_and_failing_agents() {
        let overview = json!({
            "node": "node1",
            "round": {"number": 3, "duration_ms": 12, "agents": 2, "agents_failed": 1},
            "incidents": [{"id": "abc", "node": "node2", "action": "evacuate",
                "repair-status": "noted", "jobs": [], "tag": "maintd:repairready:abc",
                "blocked_by": "safety budget"}],
            "agents": [
                {"node": "node2", "state": "ok", "verdict": "evacuate", "error": null},
                {"node": "node3", "state": "unreachable", "verdict": null, "error": "refused"}
            ]
        });
        let text = render_overview(&overview, false);
        assert!(text.contains("round 3"), "{text}");
        assert!(
            text.contains("abc") && text.contains("safety budget"),
            "{text}"
        );
        assert!(
            text.contains("node3") && text.contains("unreachable"),
            "{text}"
        );
        assert!(!text.contains("node2  ok"), "{text}");
    }

    #[test]
    fn table_aligns_columns() {
        let t = table(&["A", "BB"], &[vec!["long".into(), "x".into()]]);
        assert_eq!(t, "A     BB\nlong  x\n");
    }
}
