//! `nodecare freeze`: maintenance freezes at run time (no planned work starts while one is in
//! force: campaigns, balancing, other tools' requests and, by the coordinator's `[calendar]`
//! rules, repairs), listed with the configuration's windows; lifted early (audited).

use std::process::ExitCode;

use clap::{Args, Subcommand};
use nodecare_protocol::calendar::{CalendarStatus, FreezeRequest, FreezeView};
use reqwest::StatusCode;

use crate::api::{DEFAULT_URL, fetch};
use crate::gate::{WriteArgs, answer, fail, parse_duration, send};

/// `nodecare freeze`.
#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub(crate) struct FreezeArgs {
    #[command(subcommand)]
    command: Option<FreezeCommand>,
    #[command(flatten)]
    set: SetArgs,
}

#[derive(Debug, Subcommand)]
enum FreezeCommand {
    /// The maintenance windows, the rules and the freezes (in force, planned, ended within a
    /// week).
    List(ListArgs),
    /// Lift a freeze before its end (audited).
    Lift(LiftArgs),
}

#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("end").required(true).args(["until", "for_"])))]
struct SetArgs {
    /// When it begins, in the cluster's time zone unless an offset is given (`2026-12-20`,
    /// `2026-12-20T18:00`, `2026-12-20T17:00Z`); default: now.
    #[arg(long)]
    from: Option<String>,
    /// When it ends (as --from).
    #[arg(long)]
    until: Option<String>,
    /// How long it lasts from its beginning (`90m`, `2h`, `14d`).
    #[arg(long = "for", id = "for_", value_parser = parse_duration)]
    for_: Option<u64>,
    /// Why (required; shown wherever it holds work back, audited).
    #[arg(long, required = true)]
    reason: Option<String>,
    #[command(flatten)]
    write: WriteArgs,
}

#[derive(Debug, Args)]
struct LiftArgs {
    /// The freeze's id (see `nodecare freeze list`).
    id: String,
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

/// Runs `nodecare freeze`.
pub(crate) fn run_freeze(args: FreezeArgs) -> ExitCode {
    match args.command {
        Some(FreezeCommand::List(args)) => {
            let url = format!("{}/1/freezes", args.url.trim_end_matches('/'));
            let result = fetch(&url).map(|body| (StatusCode::OK, body));
            answer(
                "freeze list",
                args.json,
                result,
                |_, status: CalendarStatus| calendar_text(&status),
            )
        }
        Some(FreezeCommand::Lift(args)) => {
            let result = send(
                "freeze lift",
                &args.write,
                reqwest::Method::DELETE,
                &format!("/1/freezes/{}", args.id.trim()),
                None::<&()>,
            );
            answer(
                "freeze lift",
                args.write.json,
                result,
                |_, f: FreezeView| format!("lifted freeze {} ({})", f.id, f.reason),
            )
        }
        None => {
            let set = args.set;
            let Some(reason) = set.reason else {
                return fail("freeze", "give a reason (--reason)");
            };
            let body = FreezeRequest {
                from: set.from,
                until: set.until,
                duration_s: set.for_,
                reason,
            };
            let result = send(
                "freeze",
                &set.write,
                reqwest::Method::POST,
                "/1/freezes",
                Some(&body),
            );
            answer("freeze", set.write.json, result, |_, f: FreezeView| {
                format!(
                    "freeze {} from {} until {}: no planned work starts ({})",
                    f.id, f.from, f.until, f.reason
                )
            })
        }
    }
}

/// The calendar for people: the windows and where they stand, the rules, the freezes.
pub(crate) fn calendar_text(status: &CalendarStatus) -> String {
    let mut lines = Vec::new();
    match &status.window {
        None => lines.push(format!(
            "maintenance windows: none (planned work starts at any time; time zone {})",
            status.time_zone
        )),
        Some(window) => {
            lines.push(format!(
                "maintenance windows ({}): {}",
                status.time_zone,
                status.windows.join("; ")
            ));
            if window.open {
                lines.push(format!("  open now: {}", window.text));
            } else {
                lines.push(format!("  closed now; next: {}", window.text));
            }
        }
    }
    let rules = &status.rules;
    lines.push(format!(
        "  campaigns {}, balancing {}, admissions {}, live repairs {}, instance repairs {}, evacuations {}",
        obeys(rules.campaigns),
        obeys(rules.balancing),
        obeys(rules.admissions),
        obeys(rules.live_repairs),
        obeys(rules.instance_repairs),
        obeys(rules.evacuations)
    ));
    if status.freezes.is_empty() {
        lines.push("freezes: none".to_owned());
    } else {
        lines.push("freezes:".to_owned());
        let now = nodecare_protocol::now_ms();
        for f in &status.freezes {
            let state = if f.active {
                "IN FORCE".to_owned()
            } else if let Some(by) = &f.lifted_by {
                format!("lifted by {by}")
            } else if f.from_ms > now {
                "planned".to_owned()
            } else {
                "ended".to_owned()
            };
            lines.push(format!(
                "  {} {} → {} [{}] by {}: {}",
                f.id, f.from, f.until, state, f.who, f.reason
            ));
        }
    }
    lines.join("\n")
}

const fn obeys(obeys: nodecare_protocol::calendar::Obeys) -> &'static str {
    match obeys {
        nodecare_protocol::calendar::Obeys::AnyTime => "any time",
        nodecare_protocol::calendar::Obeys::Windows => "in windows",
        nodecare_protocol::calendar::Obeys::Freezes => "not in freezes",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nodecare_protocol::calendar::{CalendarRules, FreezeView, Obeys, WindowNow};

    fn golden(name: &str, text: &str) {
        nodecare_protocol::golden::assert_golden(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("tests/freeze")
                .join(name),
            text,
        );
    }

    /// `nodecare freeze list` and the calendar lines of `nodecare status`.
    #[test]
    fn the_calendar_reads_as_golden() {
        let status = CalendarStatus {
            time_zone: "Europe/Berlin".into(),
            windows: vec!["Tue,Thu 02:00-05:00".into()],
            window: Some(WindowNow {
                open: false,
                closes_ms: None,
                next_ms: Some(1_796_000_000_000),
                text: "Tue 2026-12-08 02:00 Europe/Berlin (Tue,Thu 02:00-05:00)".into(),
            }),
            rules: CalendarRules {
                evacuations: Obeys::Freezes,
                ..CalendarRules::default()
            },
            freezes: vec![
                FreezeView {
                    id: "00000000-0000-0000-0000-000000000001".into(),
                    from_ms: 1,
                    until_ms: 4_000_000_000_000,
                    from: "Sun 2026-12-20 00:00 Europe/Berlin".into(),
                    until: "Sun 2027-01-03 00:00 Europe/Berlin".into(),
                    reason: "year-end change freeze".into(),
                    who: "config".into(),
                    created_ms: 0,
                    lifted_ms: None,
                    lifted_by: None,
                    active: true,
                },
                FreezeView {
                    id: "5b2e0000-0000-4000-8000-000000000002".into(),
                    from_ms: 1,
                    until_ms: 2,
                    from: "Mon 2026-12-07 03:00 Europe/Berlin".into(),
                    until: "Mon 2026-12-07 05:00 Europe/Berlin".into(),
                    reason: "incident 4711".into(),
                    who: "alice".into(),
                    created_ms: 1,
                    lifted_ms: Some(2),
                    lifted_by: Some("bob".into()),
                    active: false,
                },
            ],
        };
        golden("calendar.txt", &format!("{}\n", calendar_text(&status)));
        let none = CalendarStatus {
            time_zone: "UTC".into(),
            ..CalendarStatus::default()
        };
        golden("calendar-none.txt", &format!("{}\n", calendar_text(&none)));
    }
}
