//! `nodecare disruption`, `nodecare budget` and `nodecare breaker`: the coordinator's gate from
//! the command line (admission requests of other tools, failure-domain overrides, the storm
//! breaker).
//!
//! Exit codes: 0 done (granted, renewed, released, set, revoked, reset), 3 refused by the gate
//! (`disruption request` answered `429`: the `blocked_by` is printed; retry later), 1 any other
//! error (unreachable coordinator, `503` before its first round, authentication, bad input),
//! 2 usage errors.

use std::fmt::Write as _;
use std::process::ExitCode;

use clap::{Args, Subcommand};
use nodecare_protocol::clock::{civil_from_days, days_from_civil, utc_text_ms};
use nodecare_protocol::gate::{
    BreakerReset, BreakerView, DisruptionRequest, Grant, OverrideRequest, OverrideView, Refusal,
};
use reqwest::StatusCode;
use serde::Serialize;

use crate::api::{DEFAULT_URL, client_for, credentials, fetch, message};
use crate::fields::now_ms;
use crate::list::{Field, ListArgs, render, select};

/// Exit code of a request the gate refused.
pub(crate) const REFUSED: u8 = 3;

/// Where the coordinator is and who writes.
#[derive(Debug, Clone, Args)]
pub(crate) struct WriteArgs {
    /// Coordinator API base URL.
    #[arg(long, env = "NODECARE_COORDINATOR_URL", default_value = DEFAULT_URL)]
    pub(crate) url: String,
    /// User of the coordinator's users file (one with the `write` option).
    #[arg(long, env = "NODECARE_USER")]
    pub(crate) user: Option<String>,
    /// File whose first line is the user's password (else `NODECARE_PASSWORD`).
    #[arg(long, value_name = "FILE")]
    pub(crate) password_file: Option<std::path::PathBuf>,
    /// Print the coordinator's JSON answer.
    #[arg(long)]
    pub(crate) json: bool,
}

/// `nodecare disruption`.
#[derive(Debug, Args)]
pub(crate) struct DisruptionArgs {
    #[command(subcommand)]
    command: DisruptionCommand,
}

#[derive(Debug, Subcommand)]
enum DisruptionCommand {
    /// Ask the gate to disrupt a node (drain, reboot, repair it): exit 0 when granted (or
    /// renewed: same requester and node), 3 when refused (the reason is printed).
    Request(RequestArgs),
    /// Release a granted disruption.
    Release(IdArgs),
    /// List the disruptions granted to other tools.
    List(ListOnlyArgs),
}

#[derive(Debug, Args)]
struct RequestArgs {
    /// The node.
    node: String,
    /// Why (shown in status and the audit log).
    #[arg(long)]
    reason: String,
    /// Who asks (the tool and its instance, e.g. `reboot@node3`); the same requester renews.
    #[arg(long)]
    requester: String,
    /// How long the grant lasts unless renewed or released (`90s`, `30m`, `2h`, `1d`).
    #[arg(long, value_parser = parse_duration)]
    ttl: u64,
    #[command(flatten)]
    write: WriteArgs,
}

#[derive(Debug, Args)]
struct IdArgs {
    /// The id (see the list).
    id: String,
    #[command(flatten)]
    write: WriteArgs,
}

#[derive(Debug, Args)]
struct ListOnlyArgs {
    /// Coordinator API base URL.
    #[arg(long, env = "NODECARE_COORDINATOR_URL", default_value = DEFAULT_URL)]
    url: String,
    #[command(flatten)]
    list: ListArgs,
}

/// `nodecare budget`.
#[derive(Debug, Args)]
pub(crate) struct BudgetArgs {
    #[command(subcommand)]
    command: BudgetCommand,
}

#[derive(Debug, Subcommand)]
enum BudgetCommand {
    /// Exempt a failure domain from the one-domain rule and the caps until a time or for a
    /// while (audited: who, when, why).
    Override(OverrideArgs),
    /// Revoke an override.
    Revoke(IdArgs),
    /// List the overrides in force or ended within the last day.
    List(ListOnlyArgs),
}

#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("end").required(true).args(["until", "for_"])))]
struct OverrideArgs {
    /// The failure domain (as `nodecare status` shows it: `group:default`, `rack:r2`).
    #[arg(long)]
    domain: String,
    /// When it ends, UTC: `2026-11-23T18:00:00Z`, `2026-11-23 18:00` or `18:00` (today).
    #[arg(long, value_parser = parse_time)]
    until: Option<Time>,
    /// How long it lasts (`90m`, `2h`, `1d`).
    #[arg(long = "for", id = "for_", value_parser = parse_duration)]
    for_: Option<u64>,
    /// Why (required; audited).
    #[arg(long)]
    reason: String,
    #[command(flatten)]
    write: WriteArgs,
}

/// `nodecare breaker`.
#[derive(Debug, Args)]
pub(crate) struct BreakerArgs {
    #[command(subcommand)]
    command: BreakerCommand,
}

#[derive(Debug, Subcommand)]
enum BreakerCommand {
    /// Close the storm breaker: new disruptions may start again (audited).
    Reset(ResetArgs),
    /// Show whether the storm breaker is open, since when and why.
    Status(StatusOnlyArgs),
}

#[derive(Debug, Args)]
struct ResetArgs {
    /// Why (audited).
    #[arg(long)]
    reason: Option<String>,
    #[command(flatten)]
    write: WriteArgs,
}

#[derive(Debug, Args)]
struct StatusOnlyArgs {
    /// Coordinator API base URL.
    #[arg(long, env = "NODECARE_COORDINATOR_URL", default_value = DEFAULT_URL)]
    url: String,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

/// Parses `90`, `90s`, `30m`, `2h`, `1d` or sums such as `1h30m` into seconds (at least 1).
pub(crate) fn parse_duration(text: &str) -> Result<u64, String> {
    let bad = || format!("{text:?} is not a duration such as 90s, 30m, 2h or 1d");
    let mut total: u64 = 0;
    let mut number = String::new();
    for c in text.trim().chars() {
        if c.is_ascii_digit() {
            number.push(c);
            continue;
        }
        let unit = match c {
            's' => 1,
            'm' => 60,
            'h' => 3600,
            'd' => 86_400,
            _ => return Err(bad()),
        };
        let value: u64 = number.parse().map_err(|_| bad())?;
        total = total
            .checked_add(value.checked_mul(unit).ok_or_else(bad)?)
            .ok_or_else(bad)?;
        number.clear();
    }
    if !number.is_empty() {
        let value: u64 = number.parse().map_err(|_| bad())?;
        total = total.checked_add(value).ok_or_else(bad)?;
    }
    if total == 0 {
        return Err(bad());
    }
    Ok(total)
}

/// A point in time given on the command line: Unix ms, or a time of day today (UTC).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Time {
    /// Unix ms.
    At(u64),
    /// Seconds since midnight UTC, today.
    Today(u64),
}

impl Time {
    /// Unix ms, given the time now.
    pub(crate) fn unix_ms(self, now_ms: u64) -> u64 {
        match self {
            Self::At(ms) => ms,
            Self::Today(secs) => (now_ms / 86_400_000) * 86_400_000 + secs * 1000,
        }
    }
}

fn parse_clock(text: &str) -> Option<u64> {
    let parts: Vec<&str> = text.split(':').collect();
    if !(2..=3).contains(&parts.len()) || parts.iter().any(|p| p.len() != 2) {
        return None;
    }
    let numbers: Vec<u64> = parts
        .iter()
        .map(|p| p.parse().ok())
        .collect::<Option<_>>()?;
    let (h, m, s) = (numbers[0], numbers[1], numbers.get(2).copied().unwrap_or(0));
    (h < 24 && m < 60 && s < 60).then_some(h * 3600 + m * 60 + s)
}

/// Parses a UTC time: `2026-11-23T18:00:00Z`, `2026-11-23 18:00[:SS][ UTC]`, or `18:00[:SS]`
/// (today).
pub(crate) fn parse_time(text: &str) -> Result<Time, String> {
    let bad = || {
        format!(
            "{text:?} is not a UTC time such as 2026-11-23T18:00:00Z, 2026-11-23 18:00 or 18:00"
        )
    };
    let trimmed = text.trim();
    let trimmed = trimmed
        .strip_suffix(" UTC")
        .or_else(|| trimmed.strip_suffix('Z'))
        .unwrap_or(trimmed);
    let Some((date, clock)) = trimmed.split_once(['T', ' ']) else {
        return parse_clock(trimmed).map(Time::Today).ok_or_else(bad);
    };
    let parts: Vec<&str> = date.split('-').collect();
    let [year, month, day] = parts.as_slice() else {
        return Err(bad());
    };
    if year.len() != 4 || month.len() != 2 || day.len() != 2 {
        return Err(bad());
    }
    let (year, month, day): (i64, i64, i64) = (
        year.parse().map_err(|_| bad())?,
        month.parse().map_err(|_| bad())?,
        day.parse().map_err(|_| bad())?,
    );
    if !(1970..=9999).contains(&year) || !(1..=12).contains(&month) || !(1..=31).contains(&day) {
        return Err(bad());
    }
    let days = days_from_civil(year, month, day);
    // A day that does not exist (February 30) comes back as another date.
    if civil_from_days(days) != (year, month, day) {
        return Err(bad());
    }
    let secs = parse_clock(clock).ok_or_else(bad)?;
    let days = u64::try_from(days).map_err(|_| bad())?;
    Ok(Time::At((days * 86_400 + secs) * 1000))
}

/// Sends a write and returns the status and body.
pub(crate) fn send(
    command: &str,
    write: &WriteArgs,
    method: reqwest::Method,
    path: &str,
    body: Option<&impl Serialize>,
) -> Result<(StatusCode, String), String> {
    let url = format!("{}{path}", write.url.trim_end_matches('/'));
    let credentials = credentials(
        write.user.as_deref(),
        write.password_file.as_deref(),
        std::env::var("NODECARE_PASSWORD").ok(),
    )?;
    let (client, target) = client_for(&url)?;
    let mut request = client.request(method, target);
    if let Some((user, password)) = &credentials {
        request = request.basic_auth(user, Some(password));
    }
    if let Some(body) = body {
        request = request.json(body);
    }
    let response = request
        .send()
        .map_err(|e| format!("cannot reach the coordinator at {url}: {e}"))?;
    let status = response.status();
    let text = response
        .text()
        .map_err(|e| format!("{url}: cannot read the answer: {e}"))?;
    if status == StatusCode::UNAUTHORIZED && credentials.is_none() {
        return Err(format!(
            "HTTP {status}: {}\nnodecare {command}: give a user with the write option: --user USER and --password-file FILE (or NODECARE_PASSWORD)",
            message(&text)
        ));
    }
    Ok((status, text))
}

pub(crate) fn fail(command: &str, error: &str) -> ExitCode {
    eprintln!("nodecare {command}: {error}");
    ExitCode::FAILURE
}

/// Decodes a successful answer into `T` and prints it with `show` (or as is with `--json`).
pub(crate) fn answer<T: serde::de::DeserializeOwned>(
    command: &str,
    json: bool,
    result: Result<(StatusCode, String), String>,
    show: impl FnOnce(StatusCode, T) -> String,
) -> ExitCode {
    match result {
        Ok((status, body)) if status.is_success() => {
            if json {
                println!("{}", body.trim_end());
                return ExitCode::SUCCESS;
            }
            match serde_json::from_str::<T>(&body) {
                Ok(value) => {
                    println!("{}", show(status, value));
                    ExitCode::SUCCESS
                }
                Err(e) => fail(command, &format!("unexpected answer: {e}")),
            }
        }
        Ok((status, body)) => fail(command, &format!("HTTP {status}: {}", message(&body))),
        Err(error) => fail(command, &error),
    }
}

/// Runs `nodecare disruption`.
pub(crate) fn run_disruption(args: DisruptionArgs) -> ExitCode {
    match args.command {
        DisruptionCommand::Request(args) => request(&args),
        DisruptionCommand::Release(args) => {
            #[derive(serde::Deserialize)]
            struct Released {
                id: String,
                node: String,
            }
            let result = send(
                "disruption release",
                &args.write,
                reqwest::Method::DELETE,
                &format!("/1/disruptions/{}", args.id.trim()),
                None::<&()>,
            );
            answer(
                "disruption release",
                args.write.json,
                result,
                |_, r: Released| format!("released disruption {} of {}", r.id, r.node),
            )
        }
        DisruptionCommand::List(args) => list(
            "disruption list",
            &args,
            "/1/disruptions",
            GRANT_FIELDS,
            GRANT_DEFAULTS,
        ),
    }
}

fn request(args: &RequestArgs) -> ExitCode {
    const COMMAND: &str = "disruption request";
    let body = DisruptionRequest {
        node: args.node.clone(),
        reason: args.reason.clone(),
        requester: args.requester.clone(),
        ttl_s: args.ttl,
    };
    if let Err(error) = body.validate() {
        return fail(COMMAND, &error);
    }
    let result = send(
        COMMAND,
        &args.write,
        reqwest::Method::POST,
        "/1/disruptions",
        Some(&body),
    );
    match result {
        Ok((StatusCode::TOO_MANY_REQUESTS, text)) => {
            if args.write.json {
                println!("{}", text.trim_end());
            }
            match serde_json::from_str::<Refusal>(&text) {
                Ok(refusal) => eprintln!(
                    "nodecare {COMMAND}: refused: {} (retry later)",
                    refusal.blocked_by
                ),
                Err(_) => eprintln!("nodecare {COMMAND}: refused: {}", message(&text)),
            }
            ExitCode::from(REFUSED)
        }
        other => answer(COMMAND, args.write.json, other, |status, grant: Grant| {
            let verb = if status == StatusCode::CREATED {
                "granted"
            } else {
                "renewed"
            };
            format!(
                "{verb} disruption {} of {} to {} until {}",
                grant.id,
                grant.node,
                grant.requester,
                utc_text_ms(grant.expires_ms)
            )
        }),
    }
}

/// Runs `nodecare budget`.
pub(crate) fn run_budget(args: BudgetArgs) -> ExitCode {
    match args.command {
        BudgetCommand::Override(args) => {
            const COMMAND: &str = "budget override";
            let now = now_ms();
            let body = OverrideRequest {
                domain: args.domain.clone(),
                until_ms: args.until.map(|t| t.unix_ms(now)),
                duration_s: args.for_,
                reason: args.reason.clone(),
            };
            if let Err(error) = body.until(now) {
                return fail(COMMAND, &error);
            }
            let result = send(
                COMMAND,
                &args.write,
                reqwest::Method::POST,
                "/1/overrides",
                Some(&body),
            );
            answer(COMMAND, args.write.json, result, |_, o: OverrideView| {
                format!(
                    "override {} of {} until {} (revoke with: nodecare budget revoke {})",
                    o.id,
                    o.domain,
                    utc_text_ms(o.until_ms),
                    o.id
                )
            })
        }
        BudgetCommand::Revoke(args) => {
            let result = send(
                "budget revoke",
                &args.write,
                reqwest::Method::DELETE,
                &format!("/1/overrides/{}", args.id.trim()),
                None::<&()>,
            );
            answer(
                "budget revoke",
                args.write.json,
                result,
                |_, o: OverrideView| format!("revoked override {} of {}", o.id, o.domain),
            )
        }
        BudgetCommand::List(args) => list(
            "budget list",
            &args,
            "/1/overrides",
            OVERRIDE_FIELDS,
            OVERRIDE_DEFAULTS,
        ),
    }
}

/// Runs `nodecare breaker`.
pub(crate) fn run_breaker(args: BreakerArgs) -> ExitCode {
    match args.command {
        BreakerCommand::Reset(args) => {
            let body = BreakerReset {
                reason: args.reason.clone(),
            };
            let result = send(
                "breaker reset",
                &args.write,
                reqwest::Method::POST,
                "/1/breaker/reset",
                Some(&body),
            );
            answer("breaker reset", args.write.json, result, |_, b| {
                breaker_line(&b)
            })
        }
        BreakerCommand::Status(args) => {
            let url = format!("{}/1/breaker", args.url.trim_end_matches('/'));
            let result = fetch(&url).map(|body| (StatusCode::OK, body));
            answer("breaker status", args.json, result, |_, b| breaker_line(&b))
        }
    }
}

/// One line about the breaker.
pub(crate) fn breaker_line(breaker: &BreakerView) -> String {
    let mut text = if breaker.open {
        format!(
            "storm breaker OPEN since {}: {} (no new disruption starts; `nodecare breaker reset` closes it)",
            breaker.since_ms.map_or_else(|| "?".to_owned(), utc_text_ms),
            breaker.why.as_deref().unwrap_or("no reason recorded")
        )
    } else {
        "storm breaker closed".to_owned()
    };
    if let (Some(by), Some(at)) = (&breaker.reset_by, breaker.reset_ms) {
        let _ignored = write!(text, "; last reset by {by} at {}", utc_text_ms(at));
    }
    text
}

fn list<T: serde::de::DeserializeOwned>(
    command: &str,
    args: &ListOnlyArgs,
    path: &str,
    fields: &'static [Field<T>],
    defaults: &[&str],
) -> ExitCode {
    let result = select(fields, defaults, args.list.output.as_deref()).and_then(|fields| {
        let url = format!("{}{path}", args.url.trim_end_matches('/'));
        let body = fetch(&url)?;
        let rows: Vec<T> =
            serde_json::from_str(&body).map_err(|e| format!("{url}: unexpected answer: {e}"))?;
        Ok(render(&fields, &rows, &args.list))
    });
    match result {
        Ok(text) => {
            print!("{text}");
            ExitCode::SUCCESS
        }
        Err(error) => fail(command, &error),
    }
}

/// The fields of `nodecare disruption list`.
pub(crate) const GRANT_FIELDS: &[Field<Grant>] = &[
    Field {
        name: "id",
        title: "Id",
        numeric: false,
        cell: |g| Some(g.id.clone()),
    },
    Field {
        name: "node",
        title: "Node",
        numeric: false,
        cell: |g| Some(g.node.clone()),
    },
    Field {
        name: "requester",
        title: "Requester",
        numeric: false,
        cell: |g| Some(g.requester.clone()),
    },
    Field {
        name: "expires",
        title: "Expires",
        numeric: false,
        cell: |g| Some(utc_text_ms(g.expires_ms)),
    },
    Field {
        name: "granted",
        title: "Granted",
        numeric: false,
        cell: |g| Some(utc_text_ms(g.granted_ms)),
    },
    Field {
        name: "who",
        title: "User",
        numeric: false,
        cell: |g| Some(g.who.clone()),
    },
    Field {
        name: "reason",
        title: "Reason",
        numeric: false,
        cell: |g| Some(g.reason.clone()),
    },
];

/// The default fields of `nodecare disruption list`.
pub(crate) const GRANT_DEFAULTS: &[&str] = &["id", "node", "requester", "expires", "reason"];

/// The state of an override, for people.
pub(crate) fn override_state(o: &OverrideView) -> String {
    if o.active {
        "active".to_owned()
    } else if let Some(by) = &o.revoked_by {
        format!("revoked by {by}")
    } else {
        "expired".to_owned()
    }
}

/// The fields of `nodecare budget list`.
pub(crate) const OVERRIDE_FIELDS: &[Field<OverrideView>] = &[
    Field {
        name: "id",
        title: "Id",
        numeric: false,
        cell: |o| Some(o.id.clone()),
    },
    Field {
        name: "domain",
        title: "Domain",
        numeric: false,
        cell: |o| Some(o.domain.clone()),
    },
    Field {
        name: "until",
        title: "Until",
        numeric: false,
        cell: |o| Some(utc_text_ms(o.until_ms)),
    },
    Field {
        name: "state",
        title: "State",
        numeric: false,
        cell: |o| Some(override_state(o)),
    },
    Field {
        name: "who",
        title: "User",
        numeric: false,
        cell: |o| Some(o.who.clone()),
    },
    Field {
        name: "created",
        title: "Created",
        numeric: false,
        cell: |o| Some(utc_text_ms(o.created_ms)),
    },
    Field {
        name: "reason",
        title: "Reason",
        numeric: false,
        cell: |o| Some(o.reason.clone()),
    },
];

/// The default fields of `nodecare budget list`.
pub(crate) const OVERRIDE_DEFAULTS: &[&str] = &["id", "domain", "until", "state", "who", "reason"];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_like_people_write_them() {
        for (text, secs) in [
            ("90", 90),
            ("90s", 90),
            ("30m", 1800),
            ("2h", 7200),
            ("1d", 86_400),
            ("1h30m", 5400),
        ] {
            assert_eq!(parse_duration(text), Ok(secs), "{text}");
        }
        for bad in ["", "0", "0s", "h", "5x", "-5m", "99999999999999999999d"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn times_are_utc() {
        let at = |text: &str| match parse_time(text) {
            Ok(Time::At(ms)) => ms,
            other => panic!("{text}: {other:?}"),
        };
        assert_eq!(at("2026-11-23T10:52:30Z"), 1_795_431_150_000);
        assert_eq!(at("2026-11-23 10:52:30 UTC"), 1_795_431_150_000);
        assert_eq!(at("2026-11-23 10:52"), 1_795_431_120_000);
        assert_eq!(at("2000-02-29T00:00:00Z"), 951_782_400_000);
        assert_eq!(parse_time("18:30"), Ok(Time::Today(66_600)));
        assert_eq!(
            Time::Today(66_600).unix_ms(1_795_431_150_000),
            1_795_458_600_000
        );
        for bad in [
            "",
            "tomorrow",
            "2026-02-30 10:00",
            "2026-13-01 10:00",
            "2026-11-23",
            "24:00",
            "2026-11-23T10:60Z",
            "1969-12-31 23:59",
        ] {
            assert!(parse_time(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_breaker_line_says_what_to_do() {
        assert_eq!(
            breaker_line(&BreakerView::default()),
            "storm breaker closed"
        );
        let open = BreakerView {
            open: true,
            since_ms: Some(1_795_431_150_000),
            why: Some("30 of 60 nodes want evacuate".into()),
            reset_by: Some("ops".into()),
            reset_ms: Some(1_795_431_000_000),
        };
        assert_eq!(
            breaker_line(&open),
            "storm breaker OPEN since 2026-11-23 10:52:30 UTC: 30 of 60 nodes want evacuate (no new disruption starts; `nodecare breaker reset` closes it); last reset by ops at 2026-11-23 10:50:00 UTC"
        );
    }
}
