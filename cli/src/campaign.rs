//! `nodecare roll --execute` and `nodecare roll status|pause|resume|abort`: rolling maintenance
//! campaigns, run by the coordinator (`/1/maintenance`).
//!
//! `--execute` sends the planning selection (`-G`, `-O`, `--node-tags`, `--failure-domains`,
//! `--skip-non-redundant`/`--ignore-non-redundant`, `--full-evacuation`) with the hook and the
//! step timeouts; the coordinator plans each group itself, against the cluster as it is then.
//! `status` shows a campaign: a progress bar on a terminal, plain lines otherwise.
//!
//! Exit codes: 0 done (submitted, shown, paused, resumed, aborted; `status --wait`: the campaign
//! completed), 1 errors (coordinator unreachable, refused, bad input; `status --wait`: the
//! campaign failed or was aborted), 2 usage errors.

use std::fmt::Write as _;
use std::io::IsTerminal as _;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Subcommand};
use nodecare_protocol::clock::utc_text_ms;
use nodecare_protocol::maintenance::{
    Campaign, CampaignCheck, CampaignGroup, CampaignList, CampaignNode, CampaignRequest,
    CampaignState, MAINTENANCE_PATH, StepTimeouts,
};

use crate::api::{DEFAULT_URL, fetch};
use crate::fields::now_ms;
use crate::gate::{WriteArgs, answer, fail, parse_duration, send};
use crate::list::{Field, ListArgs, render, select};

/// The campaign options of `nodecare roll` (with `--execute`).
#[derive(Debug, Args)]
#[command(next_help_heading = "Campaign (--execute)")]
pub(crate) struct ExecuteArgs {
    /// Run the maintenance: submit a campaign to the coordinator, which drains, moves the
    /// primaries off, runs the hook, waits until the node is healthy, undrains and migrates the
    /// primaries back, group after group (planned there, against the cluster as it is then).
    #[arg(
        long,
        requires = "hook",
        conflicts_with_all = [
            "luxi", "master", "text_data", "ialloc_src", "offline_maintenance", "save",
            "print_moves", "one_step_only", "hroller_compat", "force", "no_headers",
            "static_kvm_node_memory", "colouring_budget",
        ]
    )]
    pub(crate) execute: bool,
    /// The maintenance hook: a command of the nodes' repair whitelist (e.g. `reboot`,
    /// `apt-upgrade-and-reboot`), run with the campaign context JSON on stdin.
    #[arg(long, value_name = "NAME", requires = "execute")]
    hook: Option<String>,
    /// Only nodes whose agent reports that a reboot is required (the reboot sentinel).
    #[arg(long, requires = "execute")]
    only_if_required: bool,
    /// A node that does not come back healthy stays drained and the campaign goes on with the
    /// others (without it the campaign stops, failed).
    #[arg(long, requires = "execute")]
    continue_on_failure: bool,
    /// Why (in the jobs' reasons and the coordinator's log).
    #[arg(long, requires = "execute")]
    reason: Option<String>,
    /// Time limit of draining a node [default: 5m].
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, requires = "execute")]
    drain_timeout: Option<u64>,
    /// Time limit of moving a node's primaries away [default: 1h].
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, requires = "execute")]
    move_timeout: Option<u64>,
    /// Time limit of the hook [default: 30m].
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, requires = "execute")]
    hook_timeout: Option<u64>,
    /// Time limit from the hook's end until the node is back and healthy [default: 30m].
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, requires = "execute")]
    healthy_timeout: Option<u64>,
    /// Time limit of undraining a node [default: 5m].
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, requires = "execute")]
    undrain_timeout: Option<u64>,
    /// Time limit of migrating a node's original primaries back [default: 1h].
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, requires = "execute")]
    migrate_back_timeout: Option<u64>,
    /// Start although running KVM instances have no pinned `machine_version` (neither their
    /// own nor the cluster's): a live migration between qemu versions may crash them. Recorded
    /// in the campaign and the jobs' reasons.
    #[arg(long, requires = "execute")]
    allow_unpinned_machine_version: bool,
    /// Start although the nodes run different Ganeti versions. Recorded as above.
    #[arg(long, requires = "execute")]
    allow_mixed_versions: bool,
    /// Only run the coordinator's checks before a start (unpinned KVM `machine_version`, mixed
    /// Ganeti versions) against the cluster as it is now and print what they find; nothing
    /// starts. Exit 0 when the campaign would start, 1 when it would be refused.
    #[arg(long, requires = "execute")]
    dry_run: bool,
    #[command(flatten)]
    write: WriteArgs,
}

/// The selection flags of `nodecare roll`, as the campaign request carries them.
#[derive(Debug, Default)]
pub(crate) struct Selection {
    pub(crate) group: Option<String>,
    pub(crate) offline: Vec<String>,
    pub(crate) node_tags: Option<String>,
    pub(crate) failure_domains: Option<String>,
    pub(crate) skip_non_redundant: bool,
    pub(crate) ignore_non_redundant: bool,
    pub(crate) full_evacuation: bool,
}

/// `nodecare roll status|pause|resume|abort`.
#[derive(Debug, Subcommand)]
pub(crate) enum RollAction {
    /// Show campaigns (without ID), or one campaign: its groups, each node's step, elapsed and
    /// estimated time left. On a terminal a progress bar follows it until it ends.
    Status(StatusArgs),
    /// Pause a campaign: the steps in flight finish, no new step starts.
    Pause(ControlArgs),
    /// Resume a paused campaign.
    Resume(ControlArgs),
    /// Abort a campaign: the steps in flight finish, nodes are undrained once their primaries
    /// are back, then it stops.
    Abort(ControlArgs),
}

#[derive(Debug, Args)]
pub(crate) struct StatusArgs {
    /// The campaign (see `nodecare roll status`).
    id: Option<String>,
    /// Coordinator API base URL.
    #[arg(long, env = "NODECARE_COORDINATOR_URL", default_value = DEFAULT_URL)]
    url: String,
    /// Follow the campaign until it ends; exit 0 only if it completed. Off a terminal, print a
    /// line whenever it moves on.
    #[arg(long, requires = "id")]
    wait: bool,
    /// Print once, without a progress bar, even on a terminal.
    #[arg(long, conflicts_with = "wait")]
    once: bool,
    /// Seconds between reads while following.
    #[arg(long, value_name = "SECS", default_value_t = 2,
          value_parser = clap::value_parser!(u64).range(1..=3600))]
    interval: u64,
    #[command(flatten)]
    list: ListArgs,
}

#[derive(Debug, Args)]
pub(crate) struct ControlArgs {
    /// The campaign.
    id: String,
    #[command(flatten)]
    write: WriteArgs,
}

/// Builds the request of `nodecare roll --execute`, checked.
fn request(selection: &Selection, args: &ExecuteArgs) -> Result<CampaignRequest, String> {
    let hook = args
        .hook
        .clone()
        .ok_or_else(|| "--execute needs --hook NAME".to_owned())?;
    let defaults = StepTimeouts::default();
    let request = CampaignRequest {
        group: selection.group.clone(),
        offline: selection.offline.clone(),
        node_tags: selection
            .node_tags
            .as_ref()
            .map(|tags| tags.split(',').map(|t| t.trim().to_owned()).collect()),
        failure_domains: selection.failure_domains.clone(),
        skip_non_redundant: selection.skip_non_redundant,
        ignore_non_redundant: selection.ignore_non_redundant,
        full_evacuation: selection.full_evacuation,
        hook,
        only_if_required: args.only_if_required,
        continue_on_failure: args.continue_on_failure,
        timeouts: StepTimeouts {
            drain_s: args.drain_timeout.unwrap_or(defaults.drain_s),
            move_s: args.move_timeout.unwrap_or(defaults.move_s),
            hook_s: args.hook_timeout.unwrap_or(defaults.hook_s),
            healthy_s: args.healthy_timeout.unwrap_or(defaults.healthy_s),
            undrain_s: args.undrain_timeout.unwrap_or(defaults.undrain_s),
            migrate_back_s: args.migrate_back_timeout.unwrap_or(defaults.migrate_back_s),
        },
        reason: args.reason.clone(),
        allow_unpinned_machine_version: args.allow_unpinned_machine_version,
        allow_mixed_versions: args.allow_mixed_versions,
        dry_run: args.dry_run,
    };
    request.validate().map(|()| request)
}

/// Runs `nodecare roll --execute`.
pub(crate) fn execute(selection: &Selection, args: &ExecuteArgs) -> ExitCode {
    const COMMAND: &str = "roll --execute";
    let body = match request(selection, args) {
        Ok(body) => body,
        Err(error) => return fail(COMMAND, &error),
    };
    let result = send(
        COMMAND,
        &args.write,
        reqwest::Method::POST,
        MAINTENANCE_PATH,
        Some(&body),
    );
    if args.dry_run {
        return dry_run_answer(args.write.json, result);
    }
    answer(COMMAND, args.write.json, result, |_, c: Campaign| {
        let (_, nodes) = c.nodes_progress();
        let planned = match c.groups_total() {
            0 => "its groups are planned at the coordinator's next round".to_owned(),
            groups => format!("{groups} groups, {nodes} nodes planned"),
        };
        format!(
            "started campaign {}: {planned}, hook {}\n\
             follow it with: nodecare roll status {}",
            c.id, c.request.hook, c.id
        )
    })
}

/// Prints the answer of `nodecare roll --execute --dry-run`: exit 0 when the campaign would
/// start, 1 when the checks would refuse it (or the coordinator refused the request).
fn dry_run_answer(json: bool, result: Result<(reqwest::StatusCode, String), String>) -> ExitCode {
    const COMMAND: &str = "roll --execute --dry-run";
    let (status, text) = match result {
        Ok(answer) => answer,
        Err(error) => return fail(COMMAND, &error),
    };
    if !status.is_success() {
        return answer(COMMAND, json, Ok((status, text)), |_, c: CampaignCheck| {
            render_check(&c)
        });
    }
    let check: CampaignCheck = match serde_json::from_str(&text) {
        Ok(check) => check,
        Err(e) => return fail(COMMAND, &format!("unexpected answer: {e}")),
    };
    if json {
        println!("{text}");
    } else {
        println!("{}", render_check(&check));
    }
    if check.refused {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

/// The dry run's findings for people.
fn render_check(check: &CampaignCheck) -> String {
    let mut out = String::new();
    if check.refused {
        out.push_str("the campaign would be refused: ");
        out.push_str(&check.message);
    } else {
        out.push_str("the campaign would start");
    }
    for line in &check.overrides {
        out.push_str("\n  ");
        out.push_str(line);
    }
    out
}

/// Runs `nodecare roll status|pause|resume|abort`.
pub(crate) fn run(action: RollAction) -> ExitCode {
    match action {
        RollAction::Status(args) => status(&args),
        RollAction::Pause(args) => control("pause", &args),
        RollAction::Resume(args) => control("resume", &args),
        RollAction::Abort(args) => control("abort", &args),
    }
}

fn control(verb: &str, args: &ControlArgs) -> ExitCode {
    let command = format!("roll {verb}");
    let id = args.id.trim();
    if id.is_empty() || id.contains('/') {
        return fail(&command, &format!("{:?} is not a campaign id", args.id));
    }
    let result = send(
        &command,
        &args.write,
        reqwest::Method::POST,
        &format!("{MAINTENANCE_PATH}/{id}/{verb}"),
        None::<&()>,
    );
    answer(&command, args.write.json, result, |_, c: Campaign| {
        format!("campaign {}: {}", c.id, c.state)
    })
}

fn status(args: &StatusArgs) -> ExitCode {
    const COMMAND: &str = "roll status";
    let base = args.url.trim_end_matches('/');
    let Some(id) = args.id.as_deref().map(str::trim) else {
        let result = select(
            CAMPAIGN_FIELDS,
            CAMPAIGN_DEFAULTS,
            args.list.output.as_deref(),
        )
        .and_then(|fields| {
            let url = format!("{base}{MAINTENANCE_PATH}");
            let list: CampaignList = serde_json::from_str(&fetch(&url)?)
                .map_err(|e| format!("{url}: unexpected answer: {e}"))?;
            let now = now_ms();
            let rows: Vec<Row> = list.campaigns.into_iter().map(|c| Row(c, now)).collect();
            Ok(render(&fields, &rows, &args.list))
        });
        return match result {
            Ok(text) => {
                print!("{text}");
                ExitCode::SUCCESS
            }
            Err(error) => fail(COMMAND, &error),
        };
    };
    if id.is_empty() || id.contains('/') {
        return fail(COMMAND, &format!("{id:?} is not a campaign id"));
    }
    let url = format!("{base}{MAINTENANCE_PATH}/{id}");
    let read = || -> Result<(Campaign, String), String> {
        let body = fetch(&url)?;
        let campaign =
            serde_json::from_str(&body).map_err(|e| format!("{url}: unexpected answer: {e}"))?;
        Ok((campaign, body))
    };
    let interval = Duration::from_secs(args.interval);
    let follow = args.wait || (!args.once && !args.list.json && std::io::stdout().is_terminal());
    if !follow {
        return match read() {
            Ok((campaign, body)) => {
                if args.list.json {
                    println!("{}", body.trim_end());
                } else {
                    print!("{}", render_campaign(&campaign, now_ms()));
                }
                ExitCode::SUCCESS
            }
            Err(error) => fail(COMMAND, &error),
        };
    }
    let outcome = if std::io::stdout().is_terminal() && !args.list.json {
        follow_with_bar(&read, interval)
    } else {
        follow_with_lines(&read, interval, !args.list.json)
    };
    match outcome {
        Ok((campaign, body)) => {
            if args.list.json {
                println!("{}", body.trim_end());
            } else {
                print!("{}", render_campaign(&campaign, now_ms()));
            }
            if args.wait && campaign.state != CampaignState::Completed {
                return ExitCode::FAILURE;
            }
            ExitCode::SUCCESS
        }
        Err(error) => fail(COMMAND, &error),
    }
}

/// One read while following: the campaign, or `Ok(None)` when it cannot be read now (the
/// coordinator restarting: read again); a campaign that does not exist (404) is an error.
fn next_read(
    read: &dyn Fn() -> Result<(Campaign, String), String>,
    report: &mut dyn FnMut(Result<&Campaign, &str>),
) -> Result<Option<(Campaign, String)>, String> {
    match read() {
        Ok(answer) => {
            report(Ok(&answer.0));
            Ok(Some(answer))
        }
        Err(error) if error.contains("HTTP 404") => Err(error),
        Err(error) => {
            report(Err(&error));
            Ok(None)
        }
    }
}

fn follow_with_lines(
    read: &dyn Fn() -> Result<(Campaign, String), String>,
    interval: Duration,
    print: bool,
) -> Result<(Campaign, String), String> {
    let mut last_line = String::new();
    loop {
        let mut report = |answer: Result<&Campaign, &str>| {
            let line = match answer {
                Ok(campaign) => progress_line(campaign, now_ms()),
                Err(error) => format!("cannot read the campaign, retrying: {error}"),
            };
            // Times change every read: print only when something else did.
            let key = line.split(" (").next().unwrap_or("").to_owned();
            if print && key != last_line {
                println!("{} {line}", clock(now_ms()));
                last_line = key;
            }
        };
        if let Some(answer) = next_read(read, &mut report)?
            && answer.0.state.is_final()
        {
            return Ok(answer);
        }
        std::thread::sleep(interval);
    }
}

fn follow_with_bar(
    read: &dyn Fn() -> Result<(Campaign, String), String>,
    interval: Duration,
) -> Result<(Campaign, String), String> {
    let bar = indicatif::ProgressBar::new(0);
    let style = indicatif::ProgressStyle::with_template(
        "{prefix} [{wide_bar}] {pos}/{len} nodes\n{wide_msg}",
    )
    .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
    .progress_chars("=> ");
    bar.set_style(style);
    loop {
        let mut report = |answer: Result<&Campaign, &str>| match answer {
            Ok(campaign) => {
                let now = now_ms();
                let (done, total) = campaign.nodes_progress();
                bar.set_length(u64::try_from(total).unwrap_or(u64::MAX));
                bar.set_position(u64::try_from(done).unwrap_or(u64::MAX));
                bar.set_prefix(headline(campaign, now));
                bar.set_message(current_lines(campaign, now).trim_end().to_owned());
            }
            Err(error) => bar.set_message(format!("cannot read the campaign, retrying: {error}")),
        };
        match next_read(read, &mut report) {
            Ok(Some(answer)) if answer.0.state.is_final() => {
                bar.finish_and_clear();
                return Ok(answer);
            }
            Ok(_) => {}
            Err(error) => {
                bar.abandon();
                return Err(error);
            }
        }
        std::thread::sleep(interval);
    }
}

/// `HH:MM:SS` of a Unix ms time (UTC).
fn clock(ms: u64) -> String {
    let secs = (ms / 1000) % 86_400;
    format!("{:02}:{:02}:{:02}", secs / 3600, secs / 60 % 60, secs % 60)
}

/// A duration for people: `45s`, `12m30s`, `2h05m`, `3d04h`.
pub(crate) fn span(ms: u64) -> String {
    let secs = ms / 1000;
    match secs {
        0..60 => format!("{secs}s"),
        60..3600 => format!("{}m{:02}s", secs / 60, secs % 60),
        3600..86_400 => format!("{}h{:02}m", secs / 3600, secs / 60 % 60),
        _ => format!("{}d{:02}h", secs / 86_400, secs / 3600 % 24),
    }
}

/// The group in flight: the last one started, unless it finished.
fn in_flight(campaign: &Campaign) -> Option<&CampaignGroup> {
    campaign
        .groups
        .last()
        .filter(|g| g.finished_ms.is_none() && !campaign.state.is_final())
}

/// The campaign's state once it ended (`None` while it runs).
fn ended(campaign: &Campaign) -> Option<CampaignState> {
    campaign.state.is_final().then_some(campaign.state)
}

/// How long the campaign has run (until it ended).
fn elapsed_ms(campaign: &Campaign, now: u64) -> u64 {
    campaign
        .finished_ms
        .unwrap_or(now)
        .saturating_sub(campaign.created_ms)
}

/// Estimated time left: the mean duration of the finished groups times the groups still
/// planned, plus what the group in flight has left of that mean. `None` before any group
/// finished (nothing to estimate from) and once the campaign ended.
pub(crate) fn estimate_left_ms(campaign: &Campaign, now: u64) -> Option<u64> {
    if campaign.state.is_final() {
        return None;
    }
    let durations: Vec<u64> = campaign
        .groups
        .iter()
        .filter_map(|g| Some(g.finished_ms?.saturating_sub(g.started_ms?)))
        .collect();
    let count = u64::try_from(durations.len()).ok().filter(|n| *n > 0)?;
    let mean = durations.iter().sum::<u64>() / count;
    let planned = u64::try_from(campaign.planned.len()).unwrap_or(u64::MAX);
    let current = in_flight(campaign).map_or(0, |g| {
        mean.saturating_sub(now.saturating_sub(g.started_ms.unwrap_or(now)))
    });
    Some(mean.saturating_mul(planned).saturating_add(current))
}

/// `group 2 of 4` (the one in flight, or the last one started).
fn group_position(campaign: &Campaign) -> String {
    let total = campaign.groups_total();
    match campaign.groups.len() {
        0 => format!("group 0 of {total}"),
        started => format!("group {started} of {total}"),
    }
}

/// The first line of the bar: state, group, elapsed and estimated time left.
fn headline(campaign: &Campaign, now: u64) -> String {
    let left = estimate_left_ms(campaign, now).map_or_else(
        || "left: estimating".to_owned(),
        |ms| format!("left ~{}", span(ms)),
    );
    format!(
        "{} {}, elapsed {}, {left}",
        campaign.state,
        group_position(campaign),
        span(elapsed_ms(campaign, now))
    )
}

/// One line of progress: what moves in the campaign, then (in parentheses) the times.
fn progress_line(campaign: &Campaign, now: u64) -> String {
    let (done, total) = campaign.nodes_progress();
    let mut line = format!("{}: {}", campaign.state, group_position(campaign));
    if let Some(group) = in_flight(campaign) {
        let steps: Vec<String> = group
            .nodes
            .iter()
            .map(|n| format!("{} {}", n.node, n.step))
            .collect();
        let _ignored = write!(line, ": {}", steps.join(", "));
    }
    let _ignored = write!(line, "; nodes {done} of {total} finished");
    if let Some(blocked) = &campaign.blocked_by {
        let _ignored = write!(line, "; blocked by {blocked}");
    }
    let left = estimate_left_ms(campaign, now)
        .map_or_else(|| "estimating".to_owned(), |ms| format!("~{}", span(ms)));
    let _ignored = write!(
        line,
        " (elapsed {}, left {left})",
        span(elapsed_ms(campaign, now))
    );
    line
}

/// One node of a group: its step, and while the campaign runs how long it has been in it, when
/// it times out and what it waits for. A campaign that ended left its unfinished nodes where
/// they stopped: nothing of them is pending.
fn node_line(node: &CampaignNode, width: usize, now: u64, ended: Option<CampaignState>) -> String {
    let mut line = match (&node.failure, ended) {
        (Some(failure), _) => format!(
            "  {:width$}  failed in {}: {}",
            node.node, failure.step, failure.why
        ),
        (None, Some(state)) if !node.step.is_final() => format!(
            "  {:width$}  stopped in {}: the campaign {state}",
            node.node, node.step
        ),
        (None, _) => format!("  {:width$}  {}", node.node, node.step),
    };
    if !node.step.is_final() && ended.is_none() {
        if let Some(started) = node.step_started_ms {
            let _ignored = write!(line, " for {}", span(now.saturating_sub(started)));
        }
        if let Some(deadline) = node.step_deadline_ms {
            let _ignored = write!(
                line,
                " (times out in {})",
                span(deadline.saturating_sub(now))
            );
        }
        if let Some(waiting) = &node.waiting_for {
            let _ignored = write!(line, ": waiting for {waiting}");
        }
    }
    line.truncate(line.trim_end().len());
    line
}

/// The group in flight and its nodes' steps (the bar's message).
fn current_lines(campaign: &Campaign, now: u64) -> String {
    let mut out = String::new();
    if let Some(blocked) = &campaign.blocked_by {
        let _ignored = writeln!(out, "blocked by: {blocked}");
    }
    if let Some(group) = in_flight(campaign) {
        let width = group.nodes.iter().map(|n| n.node.len()).max().unwrap_or(0);
        for node in &group.nodes {
            let _ignored = writeln!(out, "{}", node_line(node, width, now, None));
        }
    }
    out
}

/// The whole campaign as plain text: summary, failures, every group with its nodes' steps,
/// the groups still planned and the planner's warnings.
pub(crate) fn render_campaign(campaign: &Campaign, now: u64) -> String {
    let mut out = String::new();
    let c = campaign;
    let _ignored = writeln!(out, "campaign {}: {}", c.id, c.state);
    let mut about = format!("hook {}, by {}", c.request.hook, c.who);
    if let Some(reason) = &c.request.reason {
        let _ignored = write!(about, ", reason: {reason}");
    }
    let _ignored = writeln!(out, "{about}");
    let mut times = format!(
        "submitted {}, elapsed {}",
        utc_text_ms(c.created_ms),
        span(elapsed_ms(c, now))
    );
    if let Some(finished) = c.finished_ms {
        let _ignored = write!(times, ", ended {}", utc_text_ms(finished));
    } else {
        let left = estimate_left_ms(c, now).map_or_else(
            || "estimated time left: unknown until a group finishes".to_owned(),
            |ms| format!("estimated time left {}", span(ms)),
        );
        let _ignored = write!(times, ", {left}");
    }
    let _ignored = writeln!(out, "{times}");
    let (done, total) = c.nodes_progress();
    let _ignored = writeln!(
        out,
        "{}, nodes {done} of {total} finished",
        group_position(c)
    );
    if let Some(blocked) = &c.blocked_by {
        let _ignored = writeln!(out, "blocked by: {blocked}");
    }
    if let Some(f) = &c.failure {
        let _ignored = writeln!(
            out,
            "failed: {} in {}: {} ({})",
            f.node,
            f.step,
            f.why,
            utc_text_ms(f.at_ms)
        );
    }
    for f in &c.failures {
        let _ignored = writeln!(
            out,
            "left drained: {} failed in {}: {} ({})",
            f.node,
            f.step,
            f.why,
            utc_text_ms(f.at_ms)
        );
    }
    let total_groups = c.groups_total();
    let width = c
        .groups
        .iter()
        .flat_map(|g| g.nodes.iter().map(|n| n.node.len()))
        .max()
        .unwrap_or(0);
    for group in &c.groups {
        let _ignored = out.write_str("\n");
        let position = format!("group {} of {total_groups}", group.index + 1);
        let line = match (group.started_ms, group.finished_ms) {
            (Some(started), Some(finished)) => {
                format!(
                    "{position}: finished in {}",
                    span(finished.saturating_sub(started))
                )
            }
            (Some(started), None) if c.state.is_final() => {
                format!(
                    "{position}: stopped after {}",
                    span(c.finished_ms.unwrap_or(now).saturating_sub(started))
                )
            }
            (Some(started), None) => {
                format!(
                    "{position}: running for {}",
                    span(now.saturating_sub(started))
                )
            }
            (None, _) => format!("{position}: waiting to start"),
        };
        let _ignored = writeln!(out, "{line}");
        for node in &group.nodes {
            let _ignored = writeln!(out, "{}", node_line(node, width, now, ended(c)));
        }
    }
    for (offset, nodes) in c.planned.iter().enumerate() {
        if offset == 0 {
            let _ignored = out.write_str("\n");
        }
        let what = match ended(c) {
            Some(state) => format!("not run (the campaign {state})"),
            None => "planned".to_owned(),
        };
        let _ignored = writeln!(
            out,
            "group {} of {total_groups}: {what}: {}",
            c.groups.len() + offset + 1,
            nodes.join(", ")
        );
    }
    if !c.warnings.is_empty() {
        let _ignored = writeln!(out, "\nwarnings:");
        for warning in &c.warnings {
            let _ignored = writeln!(out, "  {warning}");
        }
    }
    out
}

/// A campaign and the time its row is shown at.
struct Row(Campaign, u64);

/// The fields of `nodecare roll status` (without an id).
const CAMPAIGN_FIELDS: &[Field<Row>] = &[
    Field {
        name: "id",
        title: "Id",
        numeric: false,
        cell: |r| Some(r.0.id.clone()),
    },
    Field {
        name: "state",
        title: "State",
        numeric: false,
        cell: |r| Some(r.0.state.to_string()),
    },
    Field {
        name: "hook",
        title: "Hook",
        numeric: false,
        cell: |r| Some(r.0.request.hook.clone()),
    },
    Field {
        name: "group",
        title: "Group",
        numeric: false,
        cell: |r| Some(format!("{}/{}", r.0.groups.len(), r.0.groups_total())),
    },
    Field {
        name: "nodes",
        title: "Nodes",
        numeric: false,
        cell: |r| {
            let (done, total) = r.0.nodes_progress();
            Some(format!("{done}/{total}"))
        },
    },
    Field {
        name: "elapsed",
        title: "Elapsed",
        numeric: false,
        cell: |r| Some(span(elapsed_ms(&r.0, r.1))),
    },
    Field {
        name: "left",
        title: "Left",
        numeric: false,
        cell: |r| estimate_left_ms(&r.0, r.1).map(span),
    },
    Field {
        name: "submitted",
        title: "Submitted",
        numeric: false,
        cell: |r| Some(utc_text_ms(r.0.created_ms)),
    },
    Field {
        name: "who",
        title: "User",
        numeric: false,
        cell: |r| Some(r.0.who.clone()),
    },
    Field {
        name: "blocked_by",
        title: "BlockedBy",
        numeric: false,
        cell: |r| r.0.blocked_by.clone(),
    },
    Field {
        name: "failure",
        title: "Failure",
        numeric: false,
        cell: |r| {
            r.0.failure
                .as_ref()
                .map(|f| format!("{} {}: {}", f.node, f.step, f.why))
        },
    },
];

/// The default fields of `nodecare roll status` (without an id).
const CAMPAIGN_DEFAULTS: &[&str] = &[
    "id",
    "state",
    "hook",
    "group",
    "nodes",
    "elapsed",
    "left",
    "submitted",
];

#[cfg(test)]
mod tests {
    use super::*;
    use nodecare_protocol::maintenance::{Failure, NodeStep};

    fn node(name: &str, step: NodeStep) -> CampaignNode {
        CampaignNode {
            node: name.into(),
            step,
            step_started_ms: None,
            step_deadline_ms: None,
            original_primaries: Vec::new(),
            boot_id_before: None,
            waiting_for: None,
            failure: None,
        }
    }

    fn campaign() -> Campaign {
        Campaign {
            id: "c1".into(),
            request: CampaignRequest::new("reboot"),
            who: "ops".into(),
            state: CampaignState::Running,
            created_ms: 1_000_000,
            updated_ms: 1_000_000,
            finished_ms: None,
            groups: Vec::new(),
            planned: vec![vec!["n1".into()], vec!["n2".into(), "n3".into()]],
            failure: None,
            failures: Vec::new(),
            blocked_by: None,
            warnings: Vec::new(),
            overrides: Vec::new(),
        }
    }

    #[test]
    fn spans_read_like_people_write_them() {
        assert_eq!(span(999), "0s");
        assert_eq!(span(59_000), "59s");
        assert_eq!(span(750_000), "12m30s");
        assert_eq!(span(7_500_000), "2h05m");
        assert_eq!(span(273_600_000), "3d04h");
        assert_eq!(clock(1_795_431_000_000 + 61_000), "10:51:01");
    }

    #[test]
    fn time_left_is_estimated_from_finished_groups() {
        let mut c = campaign();
        assert_eq!(
            estimate_left_ms(&c, 2_000_000),
            None,
            "nothing finished yet"
        );
        c.groups.push(CampaignGroup {
            index: 0,
            nodes: vec![node("n1", NodeStep::Done)],
            started_ms: Some(1_000_000),
            finished_ms: Some(1_600_000),
        });
        c.planned = vec![vec!["n2".into()], vec!["n3".into()]];
        assert_eq!(estimate_left_ms(&c, 1_600_000), Some(1_200_000));
        // A group in flight for 200 s of the mean 600 s: 400 s plus the one still planned.
        c.planned = vec![vec!["n3".into()]];
        c.groups.push(CampaignGroup {
            index: 1,
            nodes: vec![node("n2", NodeStep::Hook)],
            started_ms: Some(1_600_000),
            finished_ms: None,
        });
        assert_eq!(estimate_left_ms(&c, 1_800_000), Some(1_000_000));
        // Longer than the mean: only the planned groups are left.
        assert_eq!(estimate_left_ms(&c, 9_000_000), Some(600_000));
        c.state = CampaignState::Completed;
        assert_eq!(estimate_left_ms(&c, 9_000_000), None);
    }

    #[test]
    fn progress_lines_change_only_when_the_campaign_moves() {
        let mut c = campaign();
        c.planned = vec![vec!["n3".into()]];
        c.groups.push(CampaignGroup {
            index: 0,
            nodes: vec![
                node("n1", NodeStep::Hook),
                node("n2", NodeStep::WaitHealthy),
            ],
            started_ms: Some(1_000_000),
            finished_ms: None,
        });
        let early = progress_line(&c, 1_010_000);
        let later = progress_line(&c, 1_020_000);
        assert_ne!(early, later);
        assert_eq!(early.split(" (").next(), later.split(" (").next());
        assert_eq!(
            early,
            "running: group 1 of 2: n1 hook, n2 wait-healthy; nodes 0 of 3 finished (elapsed 10s, left estimating)"
        );
        c.blocked_by = Some("the gate: rack r1 is busy".into());
        assert!(progress_line(&c, 1_020_000).contains("; blocked by the gate: rack r1 is busy ("));
    }

    fn execute_args(hook: &str) -> ExecuteArgs {
        ExecuteArgs {
            execute: true,
            hook: Some(hook.into()),
            only_if_required: false,
            continue_on_failure: true,
            reason: None,
            drain_timeout: None,
            move_timeout: None,
            hook_timeout: Some(600),
            healthy_timeout: None,
            undrain_timeout: None,
            migrate_back_timeout: None,
            allow_unpinned_machine_version: false,
            allow_mixed_versions: false,
            dry_run: false,
            write: WriteArgs {
                url: "http://127.0.0.1:1".into(),
                user: None,
                password_file: None,
                json: false,
            },
        }
    }

    #[test]
    fn requests_carry_the_selection_and_timeouts() {
        let selection = Selection {
            group: Some("default".into()),
            offline: vec!["n9".into()],
            node_tags: Some("a, b".into()),
            failure_domains: Some("rack:".into()),
            full_evacuation: true,
            ..Selection::default()
        };
        let request = request(&selection, &execute_args("reboot")).unwrap();
        assert_eq!(request.hook, "reboot");
        assert_eq!(request.node_tags, Some(vec!["a".into(), "b".into()]));
        assert_eq!(request.timeouts.hook_s, 600);
        assert_eq!(request.timeouts.drain_s, StepTimeouts::default().drain_s);
        assert!(request.continue_on_failure && request.full_evacuation);
        assert_eq!(request.offline, vec!["n9".to_owned()]);
        // Bad input is refused before anything is sent, naming the problem.
        assert!(
            super::request(&Selection::default(), &execute_args("re/boot"))
                .unwrap_err()
                .contains("hook")
        );
        let both = Selection {
            skip_non_redundant: true,
            ignore_non_redundant: true,
            ..Selection::default()
        };
        assert!(super::request(&both, &execute_args("reboot")).is_err());
        let mut no_hook = execute_args("reboot");
        no_hook.hook = None;
        assert!(super::request(&Selection::default(), &no_hook).is_err());
    }

    #[test]
    fn failed_nodes_show_node_step_and_why() {
        let mut c = campaign();
        c.state = CampaignState::Failed;
        c.finished_ms = Some(1_300_000);
        c.planned = Vec::new();
        let mut failed = node("n1", NodeStep::Failed);
        let failure = Failure {
            node: "n1".into(),
            step: NodeStep::WaitHealthy,
            why: "boot id unchanged after 30m".into(),
            at_ms: 1_300_000,
        };
        failed.failure = Some(failure.clone());
        c.failure = Some(failure);
        c.groups.push(CampaignGroup {
            index: 0,
            nodes: vec![failed],
            started_ms: Some(1_000_000),
            finished_ms: None,
        });
        let text = render_campaign(&c, 5_000_000);
        assert!(
            text.contains("failed: n1 in wait-healthy: boot id unchanged after 30m"),
            "{text}"
        );
        assert!(text.contains("group 1 of 1: stopped after 5m00s"), "{text}");
        assert!(
            text.contains("  n1  failed in wait-healthy: boot id"),
            "{text}"
        );
    }
}
