//! `nodecare what-if`: what the coordinator would do if something changed (`GET /1/what-if`):
//! its own rounds, duties and gate run on a private copy of its state with the changes, round
//! after round with Ganeti's jobs succeeding, until nothing changes. Nothing is written or sent.
//!
//! Exit codes: 0 answered, 1 errors (unreachable coordinator, unknown node, another what-if
//! running), 2 usage errors.

use std::fmt::Write as _;
use std::process::ExitCode;

use clap::Args;
use nodecare_protocol::clock::utc_text_ms;
use nodecare_protocol::what_if::{
    Change, Ending, MAX_ROUNDS, PolicyKey, Query, WhatIf, is_node_name, parse_verdict,
};

use crate::api::DEFAULT_URL;
use crate::explain::{parse_at, round};

/// `nodecare what-if`.
#[derive(Debug, Args)]
pub(crate) struct WhatIfArgs {
    /// NODE=VERDICT: the node's agent reports this verdict (Ok, live-repair, evacuate,
    /// evacuate-failover, unknown). Repeatable.
    #[arg(long, value_name = "NODE=VERDICT")]
    verdict: Vec<String>,
    /// Someone else drains the node. Repeatable.
    #[arg(long, value_name = "NODE")]
    drain: Vec<String>,
    /// Someone else sets the node offline. Repeatable.
    #[arg(long, value_name = "NODE")]
    offline: Vec<String>,
    /// The operator returns the node to service: online, undrained, its `maintd:` tags removed
    /// (what failback then moves back shows). Repeatable.
    #[arg(long = "return", value_name = "NODE")]
    return_: Vec<String>,
    /// Another tool is granted the node (an admission grant). Repeatable.
    #[arg(long, value_name = "NODE")]
    grant: Vec<String>,
    /// A rolling-maintenance campaign starts: `all`, or the nodes, comma-separated.
    #[arg(long, value_name = "all|NODE,NODE")]
    campaign: Option<String>,
    /// KEY=VALUE: a setting of the gate's policy, spelled as in the configuration:
    /// max_disrupted_nodes, max_disrupted_percent, min_healthy_nodes (also
    /// group_caps.GROUP.max_disrupted_nodes and so on), grace (seconds), breaker.max_incident_nodes,
    /// breaker.max_incident_percent, breaker.min_incident_nodes, breaker.window_secs,
    /// breaker.max_unreachable_percent, breaker.auto_close_secs; `none` where no cap is one.
    /// Repeatable.
    #[arg(long, value_name = "KEY=VALUE")]
    policy: Vec<String>,
    /// Start from the last round recorded at or before this time (its verdicts and storage):
    /// Unix seconds or a UTC time as `nodecare explain --at` reads it; default the latest.
    #[arg(long)]
    at: Option<String>,
    /// Most rounds to run (at most 50).
    #[arg(long, default_value_t = MAX_ROUNDS)]
    rounds: u32,
    /// Run the simulated rounds from this time instead of now (Unix seconds or a UTC time, as
    /// --at): maintenance windows and freezes are judged at the simulated times, so "what if
    /// the campaign started Tuesday 02:00" shows which groups its window lets through. The
    /// cluster is taken as it is now.
    #[arg(long)]
    from: Option<String>,
    /// Print the coordinator's JSON answer.
    #[arg(long)]
    json: bool,
    /// Coordinator API base URL.
    #[arg(long, env = "NODECARE_COORDINATOR_URL", default_value = DEFAULT_URL)]
    url: String,
}

fn node(flag: &str, text: &str) -> Result<String, String> {
    if is_node_name(text) {
        Ok(text.to_owned())
    } else {
        Err(format!("--{flag}: not a node name: {text:?}"))
    }
}

/// The query the arguments ask: policy first, then the flags, the campaign and the verdicts.
pub(crate) fn query(args: &WhatIfArgs) -> Result<Query, String> {
    let mut changes = Vec::new();
    for pair in &args.policy {
        let (key, value) = pair
            .split_once('=')
            .ok_or_else(|| format!("--policy: KEY=VALUE expected, got {pair:?}"))?;
        let key = PolicyKey::parse(key).map_err(|e| format!("--{e}"))?;
        let value = key.value(value).map_err(|e| format!("--{e}"))?;
        changes.push(Change::Policy { key, value });
    }
    for text in &args.drain {
        changes.push(Change::Drain {
            node: node("drain", text)?,
        });
    }
    for text in &args.offline {
        changes.push(Change::Offline {
            node: node("offline", text)?,
        });
    }
    for text in &args.return_ {
        changes.push(Change::Return {
            node: node("return", text)?,
        });
    }
    for text in &args.grant {
        changes.push(Change::Grant {
            node: node("grant", text)?,
        });
    }
    if let Some(text) = &args.campaign {
        let nodes = if text == "all" {
            Vec::new()
        } else {
            text.split(',')
                .map(|n| node("campaign", n))
                .collect::<Result<_, _>>()?
        };
        changes.push(Change::Campaign { nodes });
    }
    for pair in &args.verdict {
        let (name, verdict) = pair
            .split_once('=')
            .ok_or_else(|| format!("--verdict: NODE=VERDICT expected, got {pair:?}"))?;
        changes.push(Change::Verdict {
            node: node("verdict", name)?,
            verdict: parse_verdict(verdict).map_err(|e| format!("--verdict: {e}"))?,
        });
    }
    if changes.is_empty() {
        return Err("nothing to try: give a change (--verdict, --drain, --offline, --return, --grant, --campaign, --policy)".into());
    }
    if !(1..=MAX_ROUNDS).contains(&args.rounds) {
        return Err(format!("--rounds: from 1 to {MAX_ROUNDS}"));
    }
    let query = Query {
        changes,
        at_ms: args.at.as_deref().map(parse_at).transpose()?,
        rounds: Some(args.rounds),
        from_ms: args.from.as_deref().map(parse_at).transpose()?,
    };
    // What the coordinator will read back (the bounds on changes and lengths, at once).
    Query::parse(Some(&query.to_query_string()))
}

/// A what-if for people.
pub(crate) fn render(what_if: &WhatIf) -> String {
    let mut out = String::new();
    let changes: Vec<String> = what_if.changes.iter().map(Change::describe).collect();
    let _ignored = writeln!(out, "what if: {}", changes.join(", "));
    let mut from = what_if.start.recorded_round.map_or_else(
        || "the cluster and the agents as read at the request".to_owned(),
        |n| format!("the verdicts of recorded round {n}"),
    );
    if what_if.start.jobs_in_flight > 0 {
        let _ignored = write!(
            from,
            " and nodecare's {} job(s) in flight",
            what_if.start.jobs_in_flight
        );
    }
    let _ignored = writeln!(
        out,
        "from {}, with {from}; one round every {} s",
        utc_text_ms(what_if.start.at_ms),
        what_if.start.interval_ms / 1000
    );
    for r in &what_if.rounds {
        out.push('\n');
        match &r.gate {
            Some(gate) => round(&mut out, gate),
            None => {
                let _ignored = writeln!(
                    out,
                    "round {} at {}: the gate judged nothing",
                    r.number,
                    utc_text_ms(r.at_ms)
                );
            }
        }
        for job in &r.jobs {
            let _ignored = writeln!(
                out,
                "  JOB {} {}: {}",
                job.opcode, job.target, job.operation
            );
        }
        for wait in &r.waits {
            let _ignored = writeln!(
                out,
                "  WAITS {} ({}), {}: {}",
                wait.subject, wait.holder, wait.rule, wait.why
            );
        }
        if let Some(error) = &r.error {
            let _ignored = writeln!(out, "  FAILED: {error}");
        }
    }
    let _ignored = writeln!(out, "\nGaneti jobs, in order:");
    if what_if.jobs.is_empty() {
        let _ignored = writeln!(out, "  none");
    }
    for (i, job) in what_if.jobs.iter().enumerate() {
        let _ignored = writeln!(
            out,
            "  {:>2}. round {:>2}  {:<26} {:<24} {}",
            i + 1,
            job.round,
            job.opcode,
            job.target,
            job.operation
        );
    }
    let ending = match &what_if.ending {
        Ending::Settled { rounds } => format!("nothing changes after {rounds} round(s)"),
        Ending::RoundLimit { rounds } => {
            format!("STILL CHANGING after {rounds} rounds (the round limit)")
        }
        Ending::Failed { round, error } => format!("round {round} FAILED: {error}"),
        Ending::Cut {
            rounds,
            budget_s,
            by,
        } => format!(
            "cut after {rounds} round(s): the what-if's budget of {budget_s} s of {} ran out (ask for fewer rounds)",
            by.as_str()
        ),
    };
    let _ignored = writeln!(out, "\nend: {ending}");
    for n in &what_if.nodes {
        let flags = match (n.offline, n.drained) {
            (true, _) => "offline",
            (false, true) => "drained",
            (false, false) => "in service",
        };
        let changed = if n.changed { " (changed)" } else { "" };
        let _ignored = writeln!(
            out,
            "  node {}: {flags}, {} primary instance(s){changed}",
            n.name, n.primaries
        );
    }
    for i in &what_if.incidents {
        let new = if i.new { " (new)" } else { "" };
        let _ignored = write!(
            out,
            "  incident {} on {}: {}, {}{new}",
            i.uuid, i.node, i.action, i.status
        );
        match (&i.why, &i.blocked_by) {
            (Some(why), _) => {
                let _ignored = writeln!(out, "; {why}");
            }
            (None, Some(blocked)) => {
                let _ignored = writeln!(out, "; waits: {blocked}");
            }
            (None, None) => out.push('\n'),
        }
    }
    for c in &what_if.campaigns {
        let new = if c.new { " (new)" } else { "" };
        let _ignored = match &c.why {
            Some(why) => writeln!(out, "  campaign {}: {}{new}; {why}", c.id, c.state),
            None => writeln!(out, "  campaign {}: {}{new}", c.id, c.state),
        };
    }
    for note in &what_if.notes {
        let _ignored = writeln!(out, "note: {note}");
    }
    out
}

/// Runs `nodecare what-if`.
pub(crate) fn run_what_if(args: WhatIfArgs) -> ExitCode {
    let query = match query(&args) {
        Ok(query) => query,
        Err(message) => {
            eprintln!("nodecare what-if: {message}");
            return ExitCode::from(2);
        }
    };
    let url = format!(
        "{}/1/what-if?{}",
        args.url.trim_end_matches('/'),
        query.to_query_string()
    );
    crate::api::show::<WhatIf>("what-if", &url, args.json, render)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code")]

    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(flatten)]
        args: WhatIfArgs,
    }

    fn args(line: &[&str]) -> WhatIfArgs {
        Cli::try_parse_from(std::iter::once("what-if").chain(line.iter().copied()))
            .unwrap()
            .args
    }

    fn golden(name: &str, text: &str) {
        nodecare_protocol::golden::assert_golden(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("tests/what-if")
                .join(name),
            text,
        );
    }

    #[test]
    fn the_flags_make_the_query() {
        let query = query(&args(&[
            "--verdict",
            "node9=evacuate",
            "--drain",
            "node5",
            "--policy",
            "max_disrupted_nodes=2",
            "--campaign",
            "node1,node2",
            "--rounds",
            "7",
        ]))
        .unwrap();
        assert_eq!(
            query.to_query_string(),
            "policy=max_disrupted_nodes:2&drain=node5&campaign=node1,node2&verdict=node9:evacuate&rounds=7"
        );
    }

    #[test]
    fn bad_flags_say_what_is_wrong() {
        let many: Vec<String> = (0..17).map(|i| format!("n{i}")).collect();
        let mut too_many = Vec::new();
        for n in &many {
            too_many.extend(["--drain", n.as_str()]);
        }
        for (line, says) in [
            (vec!["--verdict", "node9=broken"], "not a verdict"),
            (vec!["--verdict", "node9"], "NODE=VERDICT"),
            (vec!["--drain", "a b"], "not a node name"),
            (vec!["--policy", "speed=2"], "unknown key"),
            (vec!["--policy", "max_disrupted_nodes=x"], "whole number"),
            (vec!["--policy", "breaker.nope=1"], "unknown key"),
            (vec!["--policy", "grace=soon"], "a number"),
            (vec![], "nothing to try"),
            (vec!["--drain", "n", "--rounds", "99"], "--rounds"),
            (vec!["--drain", "n", "--at", "yesterday"], "--at"),
            (too_many, "more than 16 changes"),
        ] {
            let error = query(&args(&line)).unwrap_err();
            assert!(error.contains(says), "{line:?}: {error}");
        }
    }

    #[test]
    fn a_what_if_reads_round_by_round_with_its_jobs_waits_and_end() {
        let what_if: WhatIf = serde_json::from_str(
            &std::fs::read_to_string(
                std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                    .join("tests/what-if/two-evacuations.json"),
            )
            .unwrap(),
        )
        .unwrap();
        golden("two-evacuations.txt", &render(&what_if));
    }
}
