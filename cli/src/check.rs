//! `nodecare check NODE`: the node's agent runs its diagnose scripts now (a signed request sent
//! by the coordinator, rate limited by the agent); with `--wait`, the new verdict is printed.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use nodecare_protocol::repair::CheckAnswer;
use nodecare_protocol::status::AgentStatus;

use crate::api::{DEFAULT_URL, client_for, credentials, fetch, message};

/// `nodecare check`.
#[derive(Debug, clap::Args)]
pub(crate) struct CheckArgs {
    /// Node name, as Ganeti knows it.
    node: String,
    /// Wait this many seconds for the new verdict and print it (0: do not wait).
    #[arg(long, default_value_t = 0)]
    wait: u64,
    /// Coordinator API base URL.
    #[arg(long, env = "NODECARE_COORDINATOR_URL", default_value = DEFAULT_URL)]
    url: String,
    /// User of the coordinator's users file (one with the `write` option).
    #[arg(long, env = "NODECARE_USER")]
    user: Option<String>,
    /// File whose first line is the user's password (else `NODECARE_PASSWORD`).
    #[arg(long, value_name = "FILE")]
    password_file: Option<std::path::PathBuf>,
}

/// What the node's agent shows after `after` (the sequence served when the check started).
fn newer(agents: &[AgentStatus], node: &str, after: Option<u64>) -> Option<AgentStatus> {
    agents
        .iter()
        .find(|a| {
            a.node == node
                && a.sequence
                    .is_some_and(|s| after.is_none_or(|after| s > after))
        })
        .cloned()
}

pub(crate) fn run_check(args: CheckArgs) -> ExitCode {
    match check(&args) {
        Ok(code) => code,
        Err(error) => {
            eprintln!("nodecare check: {error}");
            ExitCode::FAILURE
        }
    }
}

fn check(args: &CheckArgs) -> Result<ExitCode, String> {
    let base = args.url.trim_end_matches('/');
    let url = format!("{base}/1/nodes/{}/check", args.node);
    let credentials = credentials(
        args.user.as_deref(),
        args.password_file.as_deref(),
        std::env::var("NODECARE_PASSWORD").ok(),
    )?;
    let (client, target) = client_for(&url)?;
    let mut request = client.post(target);
    if let Some((user, password)) = &credentials {
        request = request.basic_auth(user, Some(password));
    }
    let response = request
        .send()
        .map_err(|e| format!("cannot reach the coordinator at {url}: {e}"))?;
    let status = response.status();
    let body = response
        .text()
        .map_err(|e| format!("{url}: cannot read the answer: {e}"))?;
    if status != reqwest::StatusCode::ACCEPTED {
        let mut text = format!("HTTP {status}: {}", message(&body));
        if credentials.is_none() && status == reqwest::StatusCode::UNAUTHORIZED {
            text.push_str("; give a user with the write option: --user USER and --password-file FILE (or NODECARE_PASSWORD)");
        }
        return Err(text);
    }
    let answer: CheckAnswer = nodecare_protocol::json::decode(body.as_bytes())
        .map_err(|e| format!("{url}: unexpected answer: {e}"))?;
    println!("{}: diagnose scripts running now", answer.node);
    if args.wait == 0 {
        return Ok(ExitCode::SUCCESS);
    }
    let deadline = Instant::now() + Duration::from_secs(args.wait);
    let agents_url = format!("{base}/1/agents");
    loop {
        let text = fetch(&agents_url)?;
        let agents: Vec<AgentStatus> = nodecare_protocol::json::decode(text.as_bytes())
            .map_err(|e| format!("{agents_url}: unexpected answer: {e}"))?;
        if let Some(agent) = newer(&agents, &answer.node, answer.after_sequence) {
            let verdict = agent.verdict.map_or("-", |v| v.as_str());
            let reason = agent.reason.map(|r| format!(" ({r})")).unwrap_or_default();
            println!("{}: {verdict}{reason}", agent.node);
            return Ok(ExitCode::SUCCESS);
        }
        if Instant::now() >= deadline {
            return Err(format!(
                "no new verdict of {} within {} s (the coordinator shows it once its watch or round has read it)",
                answer.node, args.wait
            ));
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nodecare_protocol::status::AgentState;

    fn agent(node: &str, sequence: Option<u64>) -> AgentStatus {
        AgentStatus {
            node: node.into(),
            state: AgentState::Ok,
            verdict: None,
            reason: None,
            fingerprint: None,
            sequence,
            error: None,
            checked_at_ms: 0,
            last_ok_ms: None,
        }
    }

    #[test]
    fn only_a_report_after_the_check_counts() {
        let agents = vec![agent("n1", Some(5)), agent("n2", Some(9))];
        assert!(newer(&agents, "n1", Some(5)).is_none());
        assert_eq!(
            newer(&agents, "n1", Some(4)).map(|a| a.node),
            Some("n1".into())
        );
        assert!(newer(&agents, "n3", None).is_none());
        assert_eq!(
            newer(&agents, "n2", None).map(|a| a.node),
            Some("n2".into())
        );
    }
}
