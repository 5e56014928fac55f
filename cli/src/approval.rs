//! `nodecare approval`: the work that waits for an approval (`[approvals]` of the
//! coordinator), and the operator's decision on it: `grant ID --ticket T` (every Ganeti job of
//! that work then carries the ticket in its reason), `refuse ID --reason R`, `list`.

use std::process::ExitCode;

use clap::{Args, Subcommand};
use nodecare_protocol::gate::{ApprovalRequest, ApprovalView, ApprovalsStatus};
use reqwest::StatusCode;

use crate::api::{DEFAULT_URL, fetch};
use crate::gate::{WriteArgs, answer, send};

/// `nodecare approval`.
#[derive(Debug, Args)]
pub(crate) struct ApprovalArgs {
    #[command(subcommand)]
    command: ApprovalCommand,
}

#[derive(Debug, Subcommand)]
enum ApprovalCommand {
    /// What needs an approval, what waits for one, and the decisions.
    List(ListArgs),
    /// Approve the work of an incident, a campaign or an instance repair (audited).
    Grant(GrantArgs),
    /// Refuse it, saying why (audited; shown where it waits).
    Refuse(RefuseArgs),
}

#[derive(Debug, Args)]
struct GrantArgs {
    /// The incident's, campaign's or instance repair's id.
    id: String,
    /// The change ticket (letters, digits, `-_.:/#`; at most 64).
    #[arg(long)]
    ticket: String,
    #[command(flatten)]
    write: WriteArgs,
}

#[derive(Debug, Args)]
struct RefuseArgs {
    /// The incident's, campaign's or instance repair's id.
    id: String,
    /// Why.
    #[arg(long)]
    reason: String,
    #[command(flatten)]
    write: WriteArgs,
}

#[derive(Debug, Args)]
struct ListArgs {
    /// Coordinator API base URL.
    #[arg(long, env = "NODECARE_COORDINATOR_URL", default_value = DEFAULT_URL)]
    url: String,
    /// Print the coordinator's JSON answer.
    #[arg(long)]
    json: bool,
}

/// Runs `nodecare approval`.
pub(crate) fn run_approval(args: ApprovalArgs) -> ExitCode {
    let (command, write, body) = match args.command {
        ApprovalCommand::List(args) => {
            let url = format!("{}/1/approvals", args.url.trim_end_matches('/'));
            let result = fetch(&url).map(|body| (StatusCode::OK, body));
            return answer(
                "approval list",
                args.json,
                result,
                |_, s: ApprovalsStatus| status_text(&s),
            );
        }
        ApprovalCommand::Grant(args) => (
            "approval grant",
            args.write,
            ApprovalRequest {
                id: args.id,
                ticket: Some(args.ticket),
                refuse: None,
            },
        ),
        ApprovalCommand::Refuse(args) => (
            "approval refuse",
            args.write,
            ApprovalRequest {
                id: args.id,
                ticket: None,
                refuse: Some(args.reason),
            },
        ),
    };
    let result = send(
        command,
        &write,
        reqwest::Method::POST,
        "/1/approvals",
        Some(&body),
    );
    answer(command, write.json, result, |_, v: ApprovalView| {
        match (&v.ticket, &v.refused) {
            (Some(ticket), _) => format!("approved {} with ticket {ticket}", v.id),
            (None, Some(why)) => format!("refused {}: {why}", v.id),
            (None, None) => format!("decided {}", v.id),
        }
    })
}

/// The approvals for people.
fn status_text(status: &ApprovalsStatus) -> String {
    let mut lines = Vec::new();
    match status.needed_for() {
        None => lines.push("approvals: nothing needs one".to_owned()),
        Some(needed) => lines.push(format!("approvals needed for: {needed}")),
    }
    if status.waiting.is_empty() {
        lines.push("waiting: none".to_owned());
    } else {
        lines.push("waiting:".to_owned());
        for w in &status.waiting {
            let refused = w
                .refused
                .as_deref()
                .map_or_else(String::new, |why| format!(" [refused: {why}]"));
            lines.push(format!("  {} {}: {}{refused}", w.id, w.holder, w.subject));
        }
    }
    for d in &status.decisions {
        match (&d.ticket, &d.refused) {
            (Some(ticket), _) => {
                lines.push(format!("approved {} by {}: ticket {ticket}", d.id, d.who));
            }
            (None, why) => lines.push(format!(
                "refused {} by {}: {}",
                d.id,
                d.who,
                why.as_deref().unwrap_or("")
            )),
        }
    }
    lines.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use nodecare_protocol::gate::ApprovalWaiting;

    /// `nodecare approval list`.
    #[test]
    fn the_approvals_read_as_golden() {
        let status = ApprovalsStatus {
            required: vec!["campaign".into(), "evacuation".into()],
            moves_above: Some(10),
            waiting: vec![
                ApprovalWaiting {
                    holder: "maintenance campaign 7c1d0000-0000-4000-8000-000000000001".into(),
                    id: "7c1d0000-0000-4000-8000-000000000001".into(),
                    subject: "reboot group 1 of 3 (node1, node4)".into(),
                    refused: None,
                },
                ApprovalWaiting {
                    holder: "incident 9a0f0000-0000-4000-8000-000000000002".into(),
                    id: "9a0f0000-0000-4000-8000-000000000002".into(),
                    subject: "node node7".into(),
                    refused: Some("no change window this week (by bob)".into()),
                },
            ],
            decisions: vec![
                ApprovalView {
                    id: "9a0f0000-0000-4000-8000-000000000002".into(),
                    ticket: None,
                    refused: Some("no change window this week".into()),
                    who: "bob".into(),
                    at_ms: 1,
                },
                ApprovalView {
                    id: "11110000-0000-4000-8000-000000000003".into(),
                    ticket: Some("CHG-4711".into()),
                    refused: None,
                    who: "change system".into(),
                    at_ms: 2,
                },
            ],
            change_system: None,
            change_system_error: None,
        };
        nodecare_protocol::golden::assert_golden(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/approval/list.txt"),
            format!("{}\n", status_text(&status)),
        );
    }
}
