//! `nodecare explain NODE|UUID|JOB [--at TIME]`: why the coordinator did (or did not do)
//! something, from its flight recorder (`GET /1/explain`).
//!
//! The subject is a job when it is a number, a record (incident, campaign, grant, …) when it is
//! a uuid, else a node. Exit codes: 0 explained, 1 errors (unreachable coordinator, a job
//! nodecare did not submit), 2 usage errors.

use std::fmt::Write as _;
use std::process::ExitCode;

use clap::Args;
use nodecare_protocol::clock::utc_text_ms;
use nodecare_protocol::explain::{ExplainedJudgement, ExplainedRound, Explanation, Query, Subject};

use crate::api::DEFAULT_URL;

/// `nodecare explain`.
#[derive(Debug, Args)]
pub(crate) struct ExplainArgs {
    /// A node, an incident's (or campaign's, grant's, …) uuid, or a Ganeti job id.
    subject: String,
    /// For a node: the time asked about (Unix seconds, or a UTC time: `2026-11-23T18:00:00Z`,
    /// `2026-11-23 18:00`, `18:00` today); default now.
    #[arg(long)]
    at: Option<String>,
    /// Print the coordinator's JSON answer.
    #[arg(long)]
    json: bool,
    /// Coordinator API base URL.
    #[arg(long, env = "NODECARE_COORDINATOR_URL", default_value = DEFAULT_URL)]
    url: String,
}

/// Reads `--at`: Unix seconds, or a UTC time as `nodecare budget --until` reads it
/// (`2026-11-23T18:00:00Z`, `2026-11-23 18:00`, or `18:00` today). Returns Unix milliseconds.
pub(crate) fn parse_at(text: &str) -> Result<u64, String> {
    let text = text.trim();
    if let Ok(seconds) = text.parse::<u64>() {
        return seconds
            .checked_mul(1000)
            .ok_or_else(|| format!("--at: {text} is too far away"));
    }
    crate::gate::parse_time(text)
        .map(|time| time.unix_ms(crate::fields::now_ms()))
        .map_err(|e| format!("--at: {e}"))
}

fn judgement(out: &mut String, j: &ExplainedJudgement) {
    let _ignored = writeln!(
        out,
        "  {} proposed {} for {}: {}",
        j.duty, j.subject, j.holder, j.reason
    );
    let mut what = Vec::new();
    if !j.disrupts.is_empty() {
        what.push(format!("disrupts {}", j.disrupts.join(", ")));
    }
    if !j.touches.is_empty() {
        what.push(format!("touches {}", j.touches.join(", ")));
    }
    what.push(match j.moves_memory_mib {
        Some(0) => "moves no instance".to_owned(),
        Some(mib) => format!("the capacity check counted {mib} MiB of instances to move"),
        None => "the memory of its instances is unknown".to_owned(),
    });
    let _ignored = writeln!(out, "    {}", what.join("; "));
    match &j.blocked_by {
        None => {
            let _ignored = writeln!(out, "    ADMITTED: {}", j.rule);
        }
        Some(blocked) => {
            let _ignored = writeln!(out, "    REFUSED by the rule \"{}\": {blocked}", j.rule);
        }
    }
}

pub(crate) fn round(out: &mut String, r: &ExplainedRound) {
    let _ignored = write!(
        out,
        "round {} at {} on {}",
        r.round,
        utc_text_ms(r.at_ms),
        r.coordinator
    );
    if r.repeats > 0 {
        let _ignored = write!(
            out,
            " (decided the same {} more time(s), the last at {})",
            r.repeats,
            utc_text_ms(r.last_ms)
        );
    }
    out.push('\n');
    if let Some(verdict) = &r.verdict {
        let _ignored = writeln!(out, "  verdict: {verdict}");
    }
    if let Some(held) = &r.held_by {
        let _ignored = writeln!(out, "  held by: {held}");
    }
    let _ignored = writeln!(out, "  caps: {}", r.caps.join("; "));
    if let Some(why) = &r.breaker {
        let _ignored = writeln!(out, "  storm breaker: OPEN ({why})");
    }
    if r.in_force.is_empty() {
        let _ignored = writeln!(out, "  in force before the round: nothing");
    } else {
        let _ignored = writeln!(out, "  in force before the round:");
        for domain in &r.in_force {
            let _ignored = writeln!(
                out,
                "    failure domain {}: {}",
                domain.domain,
                domain.held.join(", ")
            );
        }
    }
    if r.judgements.is_empty() {
        let _ignored = writeln!(out, "  no duty proposed anything for it");
    }
    for j in &r.judgements {
        judgement(out, j);
    }
}

/// An explanation for people.
pub(crate) fn render(explanation: &Explanation) -> String {
    let mut out = String::new();
    match &explanation.subject {
        Subject::Node { node, at_ms } => {
            let when =
                at_ms.map_or_else(|| "now".to_owned(), |ms| format!("at {}", utc_text_ms(ms)));
            let _ignored = writeln!(out, "node {node}, {when}");
        }
        Subject::Record { id } => {
            let _ignored = writeln!(out, "record {id}");
        }
        Subject::Job { id } => {
            let _ignored = writeln!(out, "job {id}");
        }
    }
    for line in &explanation.now {
        let _ignored = writeln!(out, "  {line}");
    }
    if let Some(job) = &explanation.job {
        let _ignored = writeln!(
            out,
            "  {} (intent {} of {}), {}",
            job.description, job.intent, job.holder, job.state
        );
        let _ignored = writeln!(
            out,
            "  reason trail: nodecare incident={} intent={}",
            job.trail, job.intent
        );
        match job.round {
            Some(number) => {
                let _ignored = writeln!(
                    out,
                    "  recorded at {}, planned in round {number}",
                    utc_text_ms(job.recorded_ms)
                );
            }
            None => {
                let _ignored = writeln!(out, "  recorded at {}", utc_text_ms(job.recorded_ms));
            }
        }
    }
    for r in &explanation.rounds {
        out.push('\n');
        round(&mut out, r);
    }
    if let Some(note) = &explanation.note {
        let _ignored = writeln!(out, "\n{note}");
    }
    out
}

/// Runs `nodecare explain`.
pub(crate) fn run_explain(args: ExplainArgs) -> ExitCode {
    let at_ms = match args.at.as_deref().map(parse_at).transpose() {
        Ok(at) => at,
        Err(message) => {
            eprintln!("nodecare explain: {message}");
            return ExitCode::from(2);
        }
    };
    let query = match Query::from_subject(&args.subject, at_ms) {
        Ok(query) => query.to_query_string(),
        Err(message) => {
            eprintln!("nodecare explain: {message}");
            return ExitCode::from(2);
        }
    };
    let url = format!("{}/1/explain?{query}", args.url.trim_end_matches('/'));
    crate::api::show::<Explanation>("explain", &url, args.json, render)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code")]

    use super::*;
    use nodecare_protocol::explain::{DomainHeld, ExplainedJob};
    use nodecare_protocol::gate::BlockedBy;

    fn golden(name: &str, text: &str) {
        nodecare_protocol::golden::assert_golden(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("tests/explain")
                .join(name),
            text,
        );
    }

    fn refused_round() -> ExplainedRound {
        ExplainedRound {
            round: 17,
            at_ms: 1_764_124_860_000,
            last_ms: 1_764_125_460_000,
            repeats: 20,
            coordinator: "node1.example".into(),
            verdict: Some("evacuate".into()),
            held_by: None,
            breaker: None,
            caps: vec!["cluster: max_disrupted_nodes = 1".into()],
            in_force: vec![DomainHeld {
                domain: "rack:a".into(),
                held: vec!["node3.example: incident 00000000-0000-0000-0000-000000000001".into()],
            }],
            judgements: vec![ExplainedJudgement {
                duty: "node-repair".into(),
                holder: "incident 00000000-0000-0000-0000-000000000002".into(),
                subject: "node node7.example".into(),
                reason: "evacuate: smart: sda reallocated sectors".into(),
                disrupts: vec!["node7.example".into()],
                touches: Vec::new(),
                moves_memory_mib: Some(2048),
                admitted: false,
                rule: "one failure domain at a time".into(),
                blocked_by: Some(BlockedBy::Domain {
                    busy: "rack:a".into(),
                    holders: vec![
                        "node3.example: incident 00000000-0000-0000-0000-000000000001".into(),
                    ],
                    wanted: "rack:b".into(),
                }),
            }],
        }
    }

    #[test]
    fn a_refused_node_reads_with_its_rule_and_holders() {
        let explanation = Explanation {
            subject: Subject::Node {
                node: "node7.example".into(),
                at_ms: Some(1_764_125_000_000),
            },
            job: None,
            now: Vec::new(),
            rounds: vec![refused_round()],
            note: None,
        };
        golden("node-refused.txt", &render(&explanation));
    }

    #[test]
    fn a_job_reads_with_its_operation_and_round() {
        let mut admitted = refused_round();
        admitted.repeats = 0;
        admitted.last_ms = admitted.at_ms;
        admitted.in_force.clear();
        admitted.judgements[0].admitted = true;
        admitted.judgements[0].blocked_by = None;
        admitted.judgements[0].rule =
            "a new disruption, within the caps and failure domains".into();
        let explanation = Explanation {
            subject: Subject::Job { id: 4711 },
            job: Some(ExplainedJob {
                id: 4711,
                holder: "incident 00000000-0000-0000-0000-000000000002".into(),
                trail: "00000000-0000-0000-0000-000000000002".into(),
                intent: "drain".into(),
                description: "drain node7.example".into(),
                state: "succeeded".into(),
                recorded_ms: 1_764_124_860_000,
                round: Some(17),
            }),
            now: Vec::new(),
            rounds: vec![admitted],
            note: None,
        };
        golden("job.txt", &render(&explanation));
    }

    #[test]
    fn nothing_recorded_is_said() {
        let explanation = Explanation {
            subject: Subject::Record {
                id: "00000000-0000-0000-0000-000000000009".into(),
            },
            job: None,
            now: Vec::new(),
            rounds: Vec::new(),
            note: Some(
                "no recorded round judged a proposal of 00000000-0000-0000-0000-000000000009"
                    .into(),
            ),
        };
        golden("record-nothing.txt", &render(&explanation));
    }

    #[test]
    fn a_waiting_incident_reads_with_the_planner_s_wait_first() {
        let mut continued = refused_round();
        continued.repeats = 0;
        continued.last_ms = continued.at_ms;
        continued.judgements[0].admitted = true;
        continued.judgements[0].blocked_by = None;
        continued.judgements[0].rule = "the continuation of a disruption its holder holds".into();
        let explanation = Explanation {
            subject: Subject::Record {
                id: "00000000-0000-0000-0000-000000000002".into(),
            },
            job: None,
            now: vec![
                "incident of node7.example: evacuate, pending; jobs 4711, 4712".into(),
                "waiting since 2025-11-26 02:41:30 UTC: waiting to move inst3 (its secondary node8.example has an active incident)".into(),
            ],
            rounds: vec![continued],
            note: None,
        };
        golden("record-waiting.txt", &render(&explanation));
    }

    #[test]
    fn a_failed_campaign_reads_with_where_and_why() {
        let explanation = Explanation {
            subject: Subject::Record {
                id: "00000000-0000-0000-0000-000000000003".into(),
            },
            job: None,
            now: vec![
                "maintenance campaign 00000000-0000-0000-0000-000000000003: failed, 2 of 6 node(s) done".into(),
                "failed on node3.example in step wait-healthy at 2025-11-26 02:51:00 UTC: not healthy within 10m".into(),
                "grace: node3.example, of its disruption, until 2025-11-26 03:01:00 UTC".into(),
            ],
            rounds: Vec::new(),
            note: Some(
                "no recorded round judged a proposal of 00000000-0000-0000-0000-000000000003"
                    .into(),
            ),
        };
        golden("campaign-failed.txt", &render(&explanation));
    }

    #[test]
    fn at_reads_unix_seconds_and_utc_times() {
        assert_eq!(parse_at("1764125000").unwrap(), 1_764_125_000_000);
        assert_eq!(parse_at("1970-01-01T00:00:00Z").unwrap(), 0);
        assert_eq!(
            parse_at("2025-11-26T02:41:00").unwrap(),
            parse_at("2025-11-26 02:41:00 UTC").unwrap()
        );
        assert_eq!(parse_at("2025-11-26T02:41:00").unwrap(), 1_764_124_860_000);
        for bad in [
            "yesterday",
            "2025-13-01T00:00:00",
            "2025-11-26",
            "1969-12-31T23:59:59",
            "2025-11-26T24:00:00",
        ] {
            assert!(parse_at(bad).is_err(), "{bad}");
        }
    }
}
