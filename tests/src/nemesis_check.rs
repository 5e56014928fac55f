//! The nemesis's independent checker: judges a run on the real cluster from what Ganeti, the
//! agents, the coordinators' logs and the nemesis's fault log recorded, without the
//! coordinator's decision code. Ganeti's jobs are decoded with the ganeti crate's RAPI types and
//! nodecare's reason trail with its one parser ([`nodecare_ganeti::Reason::parse_text`]); the
//! rest (log lines, the agents' audit lines, the fault log) is read here, line by line, skipping
//! what does not parse (counted).
//!
//! Checks (each a [`Violation`] kind):
//! - **no operation twice**: each (incident, intent) of the reason trail is one Ganeti job; each
//!   incident's repair command is accepted by an agent once; a campaign drains each of its nodes
//!   once and runs its hook there once (the hook's own log: [`parse_hook_log`]);
//! - **no hook on a running primary**: when the campaign hook runs, no instance runs on its node
//!   (the hook lists the instances the node's hypervisor runs, in its log line);
//! - **no hook after its node failed**: no hook of a campaign runs on a node later than the
//!   campaign's failure of that node (the failures the nemesis read from the coordinator:
//!   a campaign's end, a fault's end, the final campaign list);
//! - **no write by a superseded coordinator**: a RAPI write (PUT, POST, DELETE in a node's
//!   `rapi-daemon.log`, attributed by client address) from a node whose coordinator another
//!   coordinator's takeover (its "took over" log line) has superseded since its own last
//!   takeover, or that stood by since, or that never took over;
//! - **no canceled incident acting again**: no job of an incident received by Ganeti, and no
//!   repair of it accepted by an agent, after its cancel was acknowledged (HTTP 200);
//! - **no granted disruption forgotten**: a grant (HTTP 201) neither released nor expired is in
//!   every grant list the nemesis read from the acting coordinator after it (after each master
//!   failover, at the end);
//! - **budget**: at no instant more nodes disrupted than `max_disrupted_nodes`, disrupted being
//!   drained or offline in Ganeti (from the start of the job that set the flag to the end of the
//!   job that cleared it) or holding a grant;
//! - **every incident finishes**: after the faults stop the run reached quiescence, no incident
//!   is left noted or pending and no nodecare job is left unfinished; every campaign started is
//!   in the final list and has ended (completed, failed or aborted); every instance repair set
//!   up by the workload has its result tag (harep's `result:`, no `pending:` left).
//!
//! Times: every input carries wall-clock times of this one machine (Unix ms; the RAPI log's
//! local time is read as UTC). A write or job within `slack_ms` of the event that forbids it is
//! taken to have been in flight before it and is not a violation. The nemesis's clock jumps move
//! the wall clock of one node's agent and coordinator (libfaketime), not Ganeti's nor its own:
//! a coordinator's log line carries the true time in front (`@2026-11-27T03:17:12.512Z `, read
//! before the daemon's own), and an agent's audit lines written during a jump (between the
//! line counts its start and end record) get the true time back ([`unfake_audit_times`]).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use nodecare_ganeti::rapi::types::RapiJob;
use nodecare_ganeti::{JobId, JobStatus, Reason};
use nodecare_protocol::clock::{days_from_civil, utc_iso_ms};
use serde::Deserialize;
use serde_json::Value;

/// Why an input could not be read at all.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum InputError {
    /// The job list is not RAPI's `/2/jobs?bulk=1` answer.
    #[error("job list: {0}")]
    Jobs(String),
    /// The fault log has no `run-start` line.
    #[error("fault log: {0}")]
    Faults(String),
}

/// One line of the fault log (`tests/nemesis/run.sh`); fields a kind does not use are absent.
#[derive(Debug, Clone, Deserialize, PartialEq)]
pub struct FaultEvent {
    /// Unix ms.
    pub t_ms: u64,
    /// `run-start`, `fault`, `work`, `grant`, `release`, `cancel`, `faults-stopped`, `final`.
    pub kind: String,
    /// Every other field.
    #[serde(flatten)]
    pub fields: serde_json::Map<String, Value>,
}

impl FaultEvent {
    fn str(&self, key: &str) -> Option<&str> {
        self.fields.get(key).and_then(Value::as_str)
    }
    fn u64(&self, key: &str) -> Option<u64> {
        self.fields.get(key).and_then(|v| {
            v.as_u64()
                .or_else(|| v.as_str().and_then(|s| s.parse().ok()))
        })
    }
}

/// What a coordinator's log says about its role, with the log line's time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CoordinatorEvent {
    /// "took over …": it may write from now on (a new epoch).
    TookOver,
    /// It stands by or stood down: it must not write until it takes over again.
    StoodDown,
}

/// A write to RAPI as one node's `rapi-daemon.log` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RapiWrite {
    /// Unix ms of the log line.
    pub at_ms: u64,
    /// The node the request came from (`None`: the nemesis's own client, left out).
    pub from: String,
    /// `PUT /2/...`.
    pub request: String,
}

/// The part of an agent's `repair-audit.jsonl` line the checker reads.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
pub struct AuditLine {
    /// Its place in the file (0-based, empty lines counted), as [`parse_audit`] found it.
    #[serde(skip)]
    pub line: usize,
    /// Unix ms (the agent's clock).
    pub at: u64,
    /// `accepted`, `duplicate`, `refused`, `finished`.
    pub outcome: String,
    /// The incident.
    #[serde(default)]
    pub incident_id: Option<String>,
    /// The command.
    #[serde(default)]
    pub command: Option<String>,
}

/// Everything the checker reads.
#[derive(Debug, Default)]
pub struct Inputs {
    /// RAPI `/2/jobs?bulk=1`.
    pub jobs: Vec<RapiJob>,
    /// The fault log.
    pub faults: Vec<FaultEvent>,
    /// Per node running a coordinator: its role changes in time order.
    pub coordinators: BTreeMap<String, Vec<(u64, CoordinatorEvent)>>,
    /// Every RAPI write of every node's log.
    pub writes: Vec<RapiWrite>,
    /// Per node: its agent's audit lines.
    pub audits: BTreeMap<String, Vec<AuditLine>>,
    /// Per node: each run of the nemesis's campaign hook there.
    pub hooks: BTreeMap<String, Vec<HookRun>>,
    /// Lines of the logs and the audit that did not parse (skipped).
    pub skipped_lines: usize,
}

/// One run of the nemesis's campaign hook, as its log line says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HookRun {
    /// Unix ms when it ran (the node's clock).
    pub at_ms: u64,
    /// The campaign of its context.
    pub campaign: String,
    /// The instances the node's hypervisor ran then (`None`: the line does not say).
    pub running: Option<Vec<String>>,
}

/// One violation, named.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Violation {
    /// One (incident, intent) in more than one Ganeti job.
    SubmittedTwice {
        /// Incident.
        incident: String,
        /// Intent.
        intent: String,
        /// The jobs.
        jobs: Vec<JobId>,
    },
    /// One incident's repair accepted by an agent more than once.
    RepairedTwice {
        /// Node of the agent.
        node: String,
        /// Incident.
        incident: String,
        /// Times accepted.
        times: usize,
    },
    /// A RAPI write by a coordinator that was superseded, stood by or never took over.
    FencedWrite {
        /// The node the write came from.
        from: String,
        /// When.
        at_ms: u64,
        /// The request.
        request: String,
        /// Why it was not allowed to write.
        why: String,
    },
    /// A job or repair of an incident after its cancel was acknowledged.
    CanceledActed {
        /// Incident.
        incident: String,
        /// When the cancel was acknowledged.
        canceled_ms: u64,
        /// What acted (job id or repair).
        what: String,
    },
    /// A grant in force missing from a grant list read from the acting coordinator.
    GrantForgotten {
        /// Grant id.
        id: String,
        /// Node.
        node: String,
        /// When the grant list without it was read.
        at_ms: u64,
    },
    /// More nodes disrupted at once than the budget allows.
    BudgetExceeded {
        /// The instant.
        at_ms: u64,
        /// The nodes disrupted then.
        nodes: Vec<String>,
        /// `max_disrupted_nodes`.
        max: usize,
    },
    /// A campaign that drained one of its nodes, or ran its hook there, more than once.
    CampaignNodeTwice {
        /// The campaign.
        campaign: String,
        /// The node.
        node: String,
        /// What was done twice.
        what: String,
    },
    /// A campaign hook ran while an instance ran on its node.
    HookWithRunningPrimary {
        /// The campaign.
        campaign: String,
        /// The node.
        node: String,
        /// When the hook ran.
        at_ms: u64,
        /// The instances running there.
        running: Vec<String>,
    },
    /// A campaign hook ran on a node after the campaign had failed that node.
    HookAfterFailure {
        /// The campaign.
        campaign: String,
        /// The node.
        node: String,
        /// When the campaign failed the node.
        failed_ms: u64,
        /// When the hook ran.
        at_ms: u64,
    },
    /// Something not finished once the faults stopped.
    NotFinished {
        /// What.
        what: String,
    },
}

impl Violation {
    /// The check's name, as the figures list it.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::SubmittedTwice { .. } => "submitted-twice",
            Self::RepairedTwice { .. } => "repaired-twice",
            Self::FencedWrite { .. } => "fenced-write",
            Self::CanceledActed { .. } => "canceled-acted",
            Self::GrantForgotten { .. } => "grant-forgotten",
            Self::BudgetExceeded { .. } => "budget-exceeded",
            Self::CampaignNodeTwice { .. } => "campaign-node-twice",
            Self::HookWithRunningPrimary { .. } => "hook-with-running-primary",
            Self::HookAfterFailure { .. } => "hook-after-failure",
            Self::NotFinished { .. } => "not-finished",
        }
    }
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: ", self.kind())?;
        match self {
            Self::SubmittedTwice {
                incident,
                intent,
                jobs,
            } => {
                write!(
                    f,
                    "incident {incident} intent {intent} submitted as jobs {jobs:?}"
                )
            }
            Self::RepairedTwice {
                node,
                incident,
                times,
            } => {
                write!(
                    f,
                    "incident {incident}'s repair accepted {times} times by {node}'s agent"
                )
            }
            Self::FencedWrite {
                from,
                at_ms,
                request,
                why,
            } => {
                write!(f, "{request} from {from} at {} ({why})", utc_iso_ms(*at_ms))
            }
            Self::CanceledActed {
                incident,
                canceled_ms,
                what,
            } => write!(
                f,
                "incident {incident} canceled at {}: {what}",
                utc_iso_ms(*canceled_ms)
            ),
            Self::GrantForgotten { id, node, at_ms } => write!(
                f,
                "grant {id} of {node} in force but not in the grant list read at {}",
                utc_iso_ms(*at_ms)
            ),
            Self::BudgetExceeded { at_ms, nodes, max } => write!(
                f,
                "{} nodes disrupted at {} (max {max}): {}",
                nodes.len(),
                utc_iso_ms(*at_ms),
                nodes.join(", ")
            ),
            Self::CampaignNodeTwice {
                campaign,
                node,
                what,
            } => write!(
                f,
                "campaign {campaign} handled {node} more than once: {what}"
            ),
            Self::HookWithRunningPrimary {
                campaign,
                node,
                at_ms,
                running,
            } => write!(
                f,
                "campaign {campaign}'s hook ran on {node} at {} while {} ran there",
                utc_iso_ms(*at_ms),
                running.join(", ")
            ),
            Self::HookAfterFailure {
                campaign,
                node,
                failed_ms,
                at_ms,
            } => write!(
                f,
                "campaign {campaign}'s hook ran on {node} at {}, after the campaign failed it at {}",
                utc_iso_ms(*at_ms),
                utc_iso_ms(*failed_ms)
            ),
            Self::NotFinished { what } => f.write_str(what),
        }
    }
}

/// The figures of a run.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Report {
    /// The seed (from the fault log).
    pub seed: Option<u64>,
    /// Operations: distinct (incident, intent) jobs plus accepted repairs.
    pub operations: usize,
    /// nodecare's Ganeti jobs.
    pub jobs: usize,
    /// Distinct incidents seen in jobs, repairs and the final status.
    pub incidents: usize,
    /// Faults injected, by kind (`phase = start`).
    pub faults: BTreeMap<String, usize>,
    /// Faults planned but skipped (failover with jobs running).
    pub skipped_faults: usize,
    /// RAPI writes per node.
    pub writes: BTreeMap<String, usize>,
    /// Takeovers in the coordinators' logs.
    pub takeovers: usize,
    /// Most nodes disrupted at one instant.
    pub max_disrupted_seen: usize,
    /// Grants given.
    pub grants: usize,
    /// Cancels acknowledged.
    pub cancels: usize,
    /// Campaigns started (HTTP 201).
    pub campaigns: usize,
    /// Instance repairs set up by the workload, and those that ended in `success`.
    pub instance_repairs: (usize, usize),
    /// Lines skipped as unreadable.
    pub skipped_lines: usize,
    /// The violations.
    pub violations: Vec<Violation>,
}

impl Report {
    /// Faults injected in total.
    pub fn total_faults(&self) -> usize {
        self.faults.values().sum()
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let seed = self.seed.map_or_else(|| "?".to_owned(), |s| s.to_string());
        writeln!(
            f,
            "seed {seed}: {} faults, {} operations ({} jobs, {} incidents), {} violations",
            self.total_faults(),
            self.operations,
            self.jobs,
            self.incidents,
            self.violations.len()
        )?;
        let kinds: Vec<String> = self
            .faults
            .iter()
            .map(|(k, n)| format!("{k} {n}"))
            .collect();
        writeln!(
            f,
            "faults: {} (skipped {})",
            kinds.join(", "),
            self.skipped_faults
        )?;
        let writes: Vec<String> = self
            .writes
            .iter()
            .map(|(k, n)| format!("{k} {n}"))
            .collect();
        writeln!(
            f,
            "RAPI writes: {}; takeovers {}; most disrupted at once {}; grants {}; cancels {}; campaigns {}; instance repairs {} ({} success); lines skipped {}",
            if writes.is_empty() {
                "none".to_owned()
            } else {
                writes.join(", ")
            },
            self.takeovers,
            self.max_disrupted_seen,
            self.grants,
            self.cancels,
            self.campaigns,
            self.instance_repairs.0,
            self.instance_repairs.1,
            self.skipped_lines
        )?;
        for v in &self.violations {
            writeln!(f, "VIOLATION {v}")?;
        }
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------------
// Reading the inputs.

/// Ganeti's job list.
pub fn parse_jobs(text: &str) -> Result<Vec<RapiJob>, InputError> {
    serde_json::from_str(text).map_err(|e| InputError::Jobs(e.to_string()))
}

/// The fault log; lines that are not JSON objects with `t_ms` and `kind` are counted.
pub fn parse_faults(text: &str) -> (Vec<FaultEvent>, usize) {
    let mut skipped = 0;
    let mut events = Vec::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        match serde_json::from_str::<FaultEvent>(line) {
            Ok(event) => events.push(event),
            Err(_) => skipped += 1,
        }
    }
    (events, skipped)
}

/// A coordinator's log (tracing's text format, `2026-11-27T03:17:12.512345Z  INFO message …`):
/// its takeovers and its standing down, in order; other lines are ignored, lines whose role
/// message has no readable time are counted.
pub fn parse_coordinator_log(text: &str) -> (Vec<(u64, CoordinatorEvent)>, usize) {
    let mut skipped = 0;
    let mut events = Vec::new();
    for line in text.lines() {
        let event = if line.contains("took over the state kept by")
            || line.contains("took over with this node's own state")
        {
            CoordinatorEvent::TookOver
        } else if line.contains("no longer the master: standing by")
            || line.contains("standing by until this node is the master")
            || line.contains("another coordinator took over: standing down")
            || line.contains("replication: standing down")
        {
            CoordinatorEvent::StoodDown
        } else {
            continue;
        };
        // The true time the nemesis put in front, else the daemon's own.
        let mut words = line.split_whitespace();
        let at = match words.next() {
            Some(first) if first.starts_with('@') => parse_iso_ms(&first[1..]),
            first => first.and_then(parse_iso_ms),
        };
        match at {
            Some(at) => events.push((at, event)),
            None => skipped += 1,
        }
    }
    (events, skipped)
}

/// Where RAPI clients come from: the nemesis's client address (left out), the cluster IP and
/// each node's address.
#[derive(Debug, Clone, Default)]
pub struct Addresses {
    /// The nemesis's own client.
    pub client: String,
    /// The cluster IP (a request from it comes from the node that logged it).
    pub cluster: String,
    /// Address → node.
    pub nodes: BTreeMap<String, String>,
}

/// The writes in one node's `rapi-daemon.log` (`2026-11-27 03:17:12,512: ganeti-rapi pid=1
/// INFO 127.0.0.1:4242 PUT /2/… HTTP/1.1 200`), attributed to the node they came from.
pub fn parse_rapi_log(logging_node: &str, text: &str, addresses: &Addresses) -> Vec<RapiWrite> {
    let mut writes = Vec::new();
    for line in text.lines() {
        let Some((time, rest)) = line.split_once(": ganeti-rapi") else {
            continue;
        };
        let Some(at_ms) = parse_rapi_time(time) else {
            continue;
        };
        let words: Vec<&str> = rest.split_whitespace().collect();
        let Some(pos) = words
            .iter()
            .position(|w| matches!(*w, "PUT" | "POST" | "DELETE"))
        else {
            continue;
        };
        if pos == 0 || pos + 1 >= words.len() {
            continue;
        }
        let ip = words[pos - 1]
            .rsplit_once(':')
            .map_or(words[pos - 1], |(ip, _)| ip);
        if ip == addresses.client {
            continue;
        }
        let from = if ip == "127.0.0.1" || ip == addresses.cluster {
            logging_node.to_owned()
        } else {
            addresses
                .nodes
                .get(ip)
                .cloned()
                .unwrap_or_else(|| ip.to_owned())
        };
        writes.push(RapiWrite {
            at_ms,
            from,
            request: format!("{} {}", words[pos], words[pos + 1]),
        });
    }
    writes
}

/// An agent's audit log; lines that do not parse are counted.
pub fn parse_audit(text: &str) -> (Vec<AuditLine>, usize) {
    let mut skipped = 0;
    let mut lines = Vec::new();
    for (n, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        match serde_json::from_str::<AuditLine>(line) {
            Ok(a) => lines.push(AuditLine { line: n, ..a }),
            Err(_) => skipped += 1,
        }
    }
    (lines, skipped)
}

/// The nemesis's campaign hook's log on one node (`<unix ms> [running=[<instance> …]] <hook
/// context JSON>` a line): each run; lines that do not parse are counted.
pub fn parse_hook_log(text: &str) -> (Vec<HookRun>, usize) {
    let mut skipped = 0;
    let mut runs = Vec::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let run = line.split_once(' ').and_then(|(at, rest)| {
            let at_ms = at.parse::<u64>().ok()?;
            let (running, json) = match rest.strip_prefix("running=[") {
                Some(rest) => {
                    let (list, json) = rest.split_once(']')?;
                    (
                        Some(list.split_whitespace().map(str::to_owned).collect()),
                        json,
                    )
                }
                None => (None, rest),
            };
            let context = serde_json::from_str::<Value>(json.trim()).ok()?;
            let campaign = context.get("campaign")?.as_str()?.to_owned();
            Some(HookRun {
                at_ms,
                campaign,
                running,
            })
        });
        match run {
            Some(run) => runs.push(run),
            None => skipped += 1,
        }
    }
    (runs, skipped)
}

/// When each campaign failed each node, as the fault log's readings of the coordinator say
/// (`failures: [{node, step, at_ms}]` in a campaign's end, a fault's end naming its `campaign`,
/// and each entry of the final campaign list); the earliest per (campaign, node).
fn campaign_failures(faults: &[FaultEvent]) -> BTreeMap<(String, String), u64> {
    let mut failed: BTreeMap<(String, String), u64> = BTreeMap::new();
    let mut note = |campaign: &str, failures: Option<&Value>| {
        for f in failures.and_then(Value::as_array).into_iter().flatten() {
            let (Some(node), Some(at)) = (
                f.get("node").and_then(Value::as_str),
                f.get("at_ms").and_then(Value::as_u64),
            ) else {
                continue;
            };
            let slot = failed
                .entry((campaign.to_owned(), node.to_owned()))
                .or_insert(at);
            *slot = (*slot).min(at);
        }
    };
    for e in faults {
        match e.kind.as_str() {
            "campaign" => {
                if let Some(id) = e.str("id") {
                    note(id, e.fields.get("failures"));
                }
            }
            "fault" => {
                if let Some(id) = e.str("campaign") {
                    note(id, e.fields.get("failures"));
                }
            }
            "final" => {
                for c in e
                    .fields
                    .get("campaigns")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                {
                    if let Some(id) = c.get("id").and_then(Value::as_str) {
                        note(id, c.get("failures"));
                    }
                }
            }
            _ => {}
        }
    }
    failed
}

/// A clock jump as the fault log records it: its node, offset and true span, and the lines of
/// the node's audit written during it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClockJump {
    /// The node.
    pub node: String,
    /// How far its clock was moved (ms, negative: back).
    pub offset_ms: i64,
    /// True time of the start (before the offset was written) and of the end (after the true
    /// time was back in every daemon of the node).
    pub span_ms: (u64, u64),
    /// The audit's line count at the start and at the end.
    pub lines: (usize, usize),
}

/// The clock jumps of the fault log that have both a start and an end.
pub fn clock_jumps(faults: &[FaultEvent]) -> Vec<ClockJump> {
    let is = |e: &&FaultEvent, phase: &str| {
        e.kind == "fault" && e.str("fault") == Some("clock-jump") && e.str("phase") == Some(phase)
    };
    let mut jumps = Vec::new();
    for start in faults.iter().filter(|e| is(e, "start")) {
        let Some(end) = faults
            .iter()
            .find(|e| is(e, "end") && e.u64("n") == start.u64("n") && e.t_ms >= start.t_ms)
        else {
            continue;
        };
        let offset_s = start.fields.get("offset_s").and_then(|v| {
            v.as_i64()
                .or_else(|| v.as_str().and_then(|s| s.parse().ok()))
        });
        let (Some(node), Some(offset_s), Some(from), Some(to)) = (
            start.str("node"),
            offset_s,
            start.u64("audit_lines"),
            end.u64("audit_lines"),
        ) else {
            continue;
        };
        let (Ok(from), Ok(to)) = (usize::try_from(from), usize::try_from(to)) else {
            continue;
        };
        jumps.push(ClockJump {
            node: node.to_owned(),
            offset_ms: offset_s.saturating_mul(1000),
            span_ms: (start.t_ms, end.t_ms),
            lines: (from, to),
        });
    }
    jumps
}

/// The true time of each audit line written during a clock jump of its node: a line written
/// during the jump's span whose time lies outside it carries the moved clock (libfaketime reads
/// the offset within 1 s, so the first lines may not), and gets its time minus the offset, kept
/// within the span. The nemesis's jumps (30 s or more) exceed their spans (at most 22 s), so a
/// time inside the span is the true one.
pub fn unfake_audit_times(audits: &mut BTreeMap<String, Vec<AuditLine>>, jumps: &[ClockJump]) {
    for jump in jumps {
        let Some(lines) = audits.get_mut(&jump.node) else {
            continue;
        };
        let (from, to) = jump.span_ms;
        for a in lines
            .iter_mut()
            .filter(|a| a.line >= jump.lines.0 && a.line < jump.lines.1)
        {
            if a.at < from || a.at > to {
                let moved = i64::try_from(a.at).unwrap_or(i64::MAX);
                let back = u64::try_from(moved.saturating_sub(jump.offset_ms)).unwrap_or(0);
                a.at = back.clamp(from, to);
            }
        }
    }
}

/// `YYYY-MM-DD`, `HH:MM:SS` and a fraction of a second → Unix ms.
fn civil_ms(date: &str, time: &str, frac: &str) -> Option<u64> {
    let mut d = date.split('-').map(|p| p.parse::<i64>().ok());
    let (y, mo, da) = (d.next()??, d.next()??, d.next()??);
    let mut t = time.split(':').map(|p| p.parse::<i64>().ok());
    let (h, mi, s) = (t.next()??, t.next()??, t.next()??);
    if d.next().is_some()
        || t.next().is_some()
        || !(1..=12).contains(&mo)
        || !(1..=31).contains(&da)
    {
        return None;
    }
    if h > 23 || mi > 59 || s > 60 || !frac.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let ms_part: i64 = format!("{:0<3}", &frac[..frac.len().min(3)]).parse().ok()?;
    let secs = days_from_civil(y, mo, da) * 86_400 + h * 3600 + mi * 60 + s;
    u64::try_from(secs * 1000 + ms_part).ok()
}

/// `2026-11-27T03:17:12.512345Z` → Unix ms.
pub fn parse_iso_ms(text: &str) -> Option<u64> {
    let text = text.strip_suffix('Z')?;
    let (date, time) = text.split_once('T')?;
    let (hms, frac) = time.split_once('.').unwrap_or((time, ""));
    civil_ms(date, hms, frac)
}

/// `2026-11-27 03:17:12,512` → Unix ms.
pub fn parse_rapi_time(text: &str) -> Option<u64> {
    let (date, time) = text.trim().split_once(' ')?;
    let (hms, frac) = time.split_once(',').unwrap_or((time, ""));
    civil_ms(date, hms, frac)
}

fn ts_ms(ts: Option<(u64, u64)>) -> Option<u64> {
    ts.map(|(s, us)| s * 1000 + us / 1000)
}

// ---------------------------------------------------------------------------------------------
// The checks.

/// Settings of the checks.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Tolerance for in-flight requests.
    pub slack_ms: u64,
    /// The budget when the fault log does not say.
    pub max_disrupted_nodes: usize,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            slack_ms: 2000,
            max_disrupted_nodes: 1,
        }
    }
}

fn nodecare_keys(job: &RapiJob) -> BTreeSet<(String, String)> {
    job.reasons()
        .iter()
        .filter_map(|r| Reason::parse_text(&r.text))
        .map(|p| (p.incident.to_string(), p.intent))
        .collect()
}

/// Judges a run.
pub fn check(inputs: &Inputs, settings: &Settings) -> Result<Report, InputError> {
    let start = inputs
        .faults
        .iter()
        .find(|e| e.kind == "run-start")
        .ok_or_else(|| InputError::Faults("no run-start line".to_owned()))?;
    let first_job = start.u64("first_job").unwrap_or(0);
    let max = start
        .u64("max_disrupted_nodes")
        .and_then(|m| usize::try_from(m).ok())
        .unwrap_or(settings.max_disrupted_nodes);
    let slack = settings.slack_ms;
    let mut report = Report {
        seed: start.u64("seed"),
        skipped_lines: inputs.skipped_lines,
        ..Report::default()
    };
    let jobs: Vec<&RapiJob> = inputs.jobs.iter().filter(|j| j.id > first_job).collect();
    let mut audits = inputs.audits.clone();
    unfake_audit_times(&mut audits, &clock_jumps(&inputs.faults));

    // Faults by kind.
    for e in inputs.faults.iter().filter(|e| e.kind == "fault") {
        match e.str("phase") {
            Some("start") => {
                *report
                    .faults
                    .entry(e.str("fault").unwrap_or("?").to_owned())
                    .or_default() += 1;
            }
            Some("skipped") => report.skipped_faults += 1,
            _ => {}
        }
    }

    // No operation twice.
    let mut per_key: BTreeMap<(String, String), Vec<JobId>> = BTreeMap::new();
    let mut incidents: BTreeSet<String> = BTreeSet::new();
    for job in &jobs {
        let keys = nodecare_keys(job);
        if !keys.is_empty() {
            report.jobs += 1;
        }
        for key in keys {
            incidents.insert(key.0.clone());
            per_key.entry(key).or_default().push(job.id);
        }
    }
    for ((incident, intent), ids) in &per_key {
        if ids.len() > 1 {
            report.violations.push(Violation::SubmittedTwice {
                incident: incident.clone(),
                intent: intent.clone(),
                jobs: ids.clone(),
            });
        }
    }
    let mut repairs = 0;
    for (node, lines) in &audits {
        let mut per_incident: BTreeMap<&str, usize> = BTreeMap::new();
        for a in lines.iter().filter(|a| a.outcome == "accepted") {
            if let Some(inc) = a.incident_id.as_deref() {
                *per_incident.entry(inc).or_default() += 1;
                incidents.insert(inc.to_owned());
                repairs += 1;
            }
        }
        for (incident, times) in per_incident {
            if times > 1 {
                report.violations.push(Violation::RepairedTwice {
                    node: node.clone(),
                    incident: incident.to_owned(),
                    times,
                });
            }
        }
    }
    report.operations = per_key.len() + repairs;

    // A campaign handles each of its nodes once: one drain, one hook run.
    let campaign_ids: BTreeSet<&str> = inputs
        .faults
        .iter()
        .filter(|e| e.kind == "campaign" && e.u64("code") == Some(201))
        .filter_map(|e| e.str("id"))
        .collect();
    let mut drains: BTreeMap<(String, String), Vec<JobId>> = BTreeMap::new();
    for job in &jobs {
        let Some(campaign) = nodecare_keys(job)
            .into_iter()
            .map(|(i, _)| i)
            .find(|i| campaign_ids.contains(i.as_str()))
        else {
            continue;
        };
        for op in job.ops.iter().filter(|op| op.op_id == "OP_NODE_SET_PARAMS") {
            if op.params.get("drained").and_then(Value::as_bool) == Some(true)
                && let Some(node) = op.params.get("node_name").and_then(Value::as_str)
            {
                drains
                    .entry((campaign.clone(), node.to_owned()))
                    .or_default()
                    .push(job.id);
            }
        }
    }
    for ((campaign, node), ids) in drains {
        if ids.len() > 1 {
            report.violations.push(Violation::CampaignNodeTwice {
                campaign,
                node,
                what: format!("drained by jobs {ids:?}"),
            });
        }
    }
    let failures = campaign_failures(&inputs.faults);
    for (node, runs) in &inputs.hooks {
        let mut per: BTreeMap<&str, usize> = BTreeMap::new();
        for run in runs {
            *per.entry(run.campaign.as_str()).or_default() += 1;
            if let Some(running) = run.running.as_ref().filter(|r| !r.is_empty()) {
                report.violations.push(Violation::HookWithRunningPrimary {
                    campaign: run.campaign.clone(),
                    node: node.clone(),
                    at_ms: run.at_ms,
                    running: running.clone(),
                });
            }
            if let Some(&failed_ms) = failures.get(&(run.campaign.clone(), node.clone()))
                && run.at_ms > failed_ms + slack
            {
                report.violations.push(Violation::HookAfterFailure {
                    campaign: run.campaign.clone(),
                    node: node.clone(),
                    failed_ms,
                    at_ms: run.at_ms,
                });
            }
        }
        for (campaign, times) in per.into_iter().filter(|(_, n)| *n > 1) {
            report.violations.push(Violation::CampaignNodeTwice {
                campaign: campaign.to_owned(),
                node: node.clone(),
                what: format!("its hook ran {times} times"),
            });
        }
    }

    // No write by a superseded coordinator.
    let takeovers: Vec<(u64, &str)> = inputs
        .coordinators
        .iter()
        .flat_map(|(node, events)| {
            events
                .iter()
                .filter(|(_, e)| *e == CoordinatorEvent::TookOver)
                .map(move |(t, _)| (*t, node.as_str()))
        })
        .collect();
    report.takeovers = takeovers.len();
    for w in &inputs.writes {
        *report.writes.entry(w.from.clone()).or_default() += 1;
        let why = match inputs.coordinators.get(&w.from) {
            None => Some("no coordinator runs there".to_owned()),
            Some(events) => {
                let own = events
                    .iter()
                    .filter(|(t, e)| *e == CoordinatorEvent::TookOver && *t <= w.at_ms)
                    .map(|(t, _)| *t)
                    .max();
                match own {
                    None => Some("it never took over before".to_owned()),
                    Some(own) => {
                        let superseded = takeovers
                            .iter()
                            .filter(|(t, n)| *n != w.from && *t > own && *t + slack < w.at_ms)
                            .min();
                        let stood = events
                            .iter()
                            .filter(|(t, e)| {
                                *e == CoordinatorEvent::StoodDown
                                    && *t > own
                                    && *t + slack < w.at_ms
                            })
                            .map(|(t, _)| *t)
                            .min();
                        match (superseded, stood) {
                            (Some((t, n)), _) => Some(format!(
                                "its takeover at {} was superseded by {n}'s at {}",
                                utc_iso_ms(own),
                                utc_iso_ms(*t)
                            )),
                            (None, Some(t)) => Some(format!(
                                "it stood down at {} after its takeover at {}",
                                utc_iso_ms(t),
                                utc_iso_ms(own)
                            )),
                            (None, None) => None,
                        }
                    }
                }
            }
        };
        if let Some(why) = why {
            report.violations.push(Violation::FencedWrite {
                from: w.from.clone(),
                at_ms: w.at_ms,
                request: w.request.clone(),
                why,
            });
        }
    }

    // No canceled incident acting again.
    for e in inputs
        .faults
        .iter()
        .filter(|e| e.kind == "cancel" && e.u64("code") == Some(200))
    {
        report.cancels += 1;
        let Some(incident) = e.str("incident") else {
            continue;
        };
        for job in &jobs {
            let received = ts_ms(job.received_ts).unwrap_or(0);
            if received > e.t_ms + slack && nodecare_keys(job).iter().any(|(i, _)| i == incident) {
                report.violations.push(Violation::CanceledActed {
                    incident: incident.to_owned(),
                    canceled_ms: e.t_ms,
                    what: format!("job {} received at {}", job.id, utc_iso_ms(received)),
                });
            }
        }
        for (node, lines) in &audits {
            for a in lines.iter().filter(|a| {
                a.outcome == "accepted"
                    && a.incident_id.as_deref() == Some(incident)
                    && a.at > e.t_ms + slack
            }) {
                report.violations.push(Violation::CanceledActed {
                    incident: incident.to_owned(),
                    canceled_ms: e.t_ms,
                    what: format!("repair accepted by {node}'s agent at {}", utc_iso_ms(a.at)),
                });
            }
        }
    }

    // Grants: in force at the end → in the final list; and their intervals for the budget.
    let final_event = inputs.faults.iter().rev().find(|e| e.kind == "final");
    let end_ms = final_event.map_or(u64::MAX, |e| e.t_ms);
    let mut grant_spans: Vec<(u64, u64, String)> = Vec::new();
    for g in inputs
        .faults
        .iter()
        .filter(|e| e.kind == "grant" && e.u64("code") == Some(201))
    {
        report.grants += 1;
        let (Some(id), Some(node)) = (g.str("id"), g.str("node")) else {
            continue;
        };
        let granted = g
            .fields
            .get("answer")
            .and_then(|a| a.get("granted_ms"))
            .and_then(Value::as_u64)
            .unwrap_or(g.t_ms);
        // A grant asked again by its requester (HTTP 200, the same id) is renewed: from then
        // on it expires when that answer says.
        let expiry = |at: u64| {
            inputs
                .faults
                .iter()
                .filter(|r| {
                    r.kind == "grant"
                        && r.u64("code") == Some(200)
                        && r.str("id") == Some(id)
                        && r.t_ms > g.t_ms
                        && r.t_ms <= at
                })
                .filter_map(|r| r.u64("expires_ms"))
                .next_back()
                .or(g.u64("expires_ms"))
                .filter(|e| *e > 0)
                .unwrap_or(u64::MAX)
        };
        let expires = expiry(u64::MAX);
        let released = inputs
            .faults
            .iter()
            .filter(|r| {
                r.kind == "release"
                    && r.str("id") == Some(id)
                    && matches!(r.u64("code"), Some(200 | 204))
            })
            .map(|r| r.t_ms.saturating_sub(slack))
            .min();
        let until = released.unwrap_or(u64::MAX).min(expires);
        grant_spans.push((granted + slack, until, node.to_owned()));
        // Every grant list the nemesis read (after each failover, at the end) holds every
        // grant given before it and neither released nor expired by then.
        for snap in inputs
            .faults
            .iter()
            .filter(|e| (e.kind == "grants" || e.kind == "final") && e.t_ms > g.t_ms)
        {
            if released.is_some_and(|r| r <= snap.t_ms) || expiry(snap.t_ms) <= snap.t_ms + slack {
                continue;
            }
            let listed = snap
                .fields
                .get("grants")
                .is_some_and(|list| contains_string(list, id));
            if !listed {
                report.violations.push(Violation::GrantForgotten {
                    id: id.to_owned(),
                    node: node.to_owned(),
                    at_ms: snap.t_ms,
                });
            }
        }
    }

    // Budget at every instant.
    // (time, order, node, change): order sorts ends before starts at the same instant.
    let mut changes: Vec<(u64, u8, String, Change)> = Vec::new();
    for job in inputs.jobs.iter().filter(|j| j.id > first_job) {
        if job.status != JobStatus::Success {
            continue;
        }
        let (Some(start_ms), Some(end_ms)) = (
            ts_ms(job.start_ts).or(ts_ms(job.received_ts)),
            ts_ms(job.end_ts),
        ) else {
            continue;
        };
        for op in job.ops.iter().filter(|op| op.op_id == "OP_NODE_SET_PARAMS") {
            let Some(node) = op.params.get("node_name").and_then(Value::as_str) else {
                continue;
            };
            // Ganeti's node roles are exclusive: setting `offline` clears `drained` and the
            // other way round (at the job's end, while the flag set holds the node disrupted).
            for (flag, other, field) in [
                (Flag::Drained, Flag::Offline, "drained"),
                (Flag::Offline, Flag::Drained, "offline"),
            ] {
                match op.params.get(field).and_then(Value::as_bool) {
                    Some(true) => {
                        changes.push((start_ms, 1, node.to_owned(), Change::Set(flag)));
                        changes.push((end_ms, 0, node.to_owned(), Change::Clear(other)));
                    }
                    Some(false) => changes.push((end_ms, 0, node.to_owned(), Change::Clear(flag))),
                    None => {}
                }
            }
        }
    }
    for (from, until, node) in &grant_spans {
        if from < until {
            changes.push((*from, 1, node.clone(), Change::Set(Flag::Grant)));
            changes.push((*until, 0, node.clone(), Change::Clear(Flag::Grant)));
        }
    }
    changes.sort();
    let mut state: BTreeMap<String, BTreeSet<Flag>> = BTreeMap::new();
    let mut over = false;
    for (at, _, node, change) in changes {
        let flags = state.entry(node).or_default();
        match change {
            Change::Set(f) => {
                flags.insert(f);
            }
            Change::Clear(f) => {
                flags.remove(&f);
            }
        }
        let disrupted: Vec<String> = state
            .iter()
            .filter(|(_, f)| !f.is_empty())
            .map(|(n, _)| n.clone())
            .collect();
        report.max_disrupted_seen = report.max_disrupted_seen.max(disrupted.len());
        if disrupted.len() > max {
            if !over {
                report.violations.push(Violation::BudgetExceeded {
                    at_ms: at,
                    nodes: disrupted,
                    max,
                });
            }
            over = true;
        } else {
            over = false;
        }
    }

    // Every incident finishes once the faults stop.
    match final_event {
        None => report.violations.push(Violation::NotFinished {
            what: "the run has no final state (it did not end)".to_owned(),
        }),
        Some(fin) => {
            if fin.fields.get("quiesced") != Some(&Value::Bool(true)) {
                report.violations.push(Violation::NotFinished {
                    what: "no quiescence after the faults stopped".to_owned(),
                });
            }
            if let Some(list) = fin.fields.get("incidents").and_then(Value::as_array) {
                for inc in list {
                    if let Some(id) = inc.get("id").and_then(Value::as_str) {
                        incidents.insert(id.to_owned());
                    }
                    let status = inc.get("repair-status").and_then(Value::as_str);
                    if matches!(status, Some("noted" | "pending")) {
                        report.violations.push(Violation::NotFinished {
                            what: format!(
                                "incident {} of {} still {}",
                                inc.get("id").and_then(Value::as_str).unwrap_or("?"),
                                inc.get("node").and_then(Value::as_str).unwrap_or("?"),
                                status.unwrap_or("?")
                            ),
                        });
                    }
                }
            } else {
                report.violations.push(Violation::NotFinished {
                    what: "the final state has no incident list (coordinator unreachable)"
                        .to_owned(),
                });
            }
        }
    }
    for job in &jobs {
        if !job.status.is_final() && !nodecare_keys(job).is_empty() {
            let received = ts_ms(job.received_ts).unwrap_or(0);
            if received <= end_ms {
                report.violations.push(Violation::NotFinished {
                    what: format!("job {} still {}", job.id, job.status.as_str()),
                });
            }
        }
    }
    // Every campaign started has ended, every instance repair has its result.
    let final_campaigns = final_event.and_then(|e| e.fields.get("campaigns"));
    for c in inputs
        .faults
        .iter()
        .filter(|e| e.kind == "campaign" && e.str("phase") == Some("start"))
        .filter(|e| e.u64("code") == Some(201))
    {
        report.campaigns += 1;
        let id = c.str("id").unwrap_or("?");
        let state = final_campaigns
            .and_then(Value::as_array)
            .and_then(|list| {
                list.iter()
                    .find(|x| x.get("id").and_then(Value::as_str) == Some(id))
            })
            .map(|x| x.get("state").and_then(Value::as_str).unwrap_or("?"));
        match state {
            Some("completed" | "failed" | "aborted") => {}
            Some(state) => report.violations.push(Violation::NotFinished {
                what: format!("campaign {id} still {state}"),
            }),
            None => report.violations.push(Violation::NotFinished {
                what: format!("campaign {id} not in the final campaign list"),
            }),
        }
    }
    for h in inputs
        .faults
        .iter()
        .filter(|e| e.kind == "harep" && e.str("phase") == Some("start"))
        .filter(|e| e.str("setup") == Some("success"))
    {
        report.instance_repairs.0 += 1;
        let inst = h.str("instance").unwrap_or("?");
        let tags = inputs
            .faults
            .iter()
            .find(|e| {
                e.kind == "harep"
                    && e.str("phase") == Some("end")
                    && e.str("instance") == Some(inst)
                    && e.t_ms >= h.t_ms
            })
            .map(|e| e.str("tags").unwrap_or(""));
        match tags {
            Some(tags) if tags.contains(":result:") && !tags.contains(":pending:") => {
                if tags.contains(":success:") {
                    report.instance_repairs.1 += 1;
                }
            }
            Some(tags) => report.violations.push(Violation::NotFinished {
                what: format!("instance repair of {inst} never ended (tags: {tags:?})"),
            }),
            None => report.violations.push(Violation::NotFinished {
                what: format!("instance repair of {inst} not closed by the end of the run"),
            }),
        }
    }
    report.incidents = incidents.len();
    Ok(report)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Flag {
    Drained,
    Offline,
    Grant,
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Change {
    Set(Flag),
    Clear(Flag),
}

fn contains_string(value: &Value, wanted: &str) -> bool {
    match value {
        Value::String(s) => s == wanted,
        Value::Array(items) => items.iter().any(|v| contains_string(v, wanted)),
        Value::Object(map) => map.values().any(|v| contains_string(v, wanted)),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const INC: &str = "0b7e1f3a-9a61-4c55-8d55-2f0e4b1c0a11";
    const INC2: &str = "5c2d8e4f-1b3a-4e6d-9f70-8a1b2c3d4e5f";
    const T: u64 = 1_795_749_432_000;

    fn job(
        id: JobId,
        status: &str,
        op: Value,
        reason: Option<(&str, &str)>,
        times: (u64, u64),
    ) -> Value {
        let mut op = op;
        if let Some((inc, intent)) = reason {
            op["reason"] = json!([[
                "gnt:daemon:maintd",
                format!("nodecare incident={inc} intent={intent}: x"),
                1
            ]]);
        }
        json!({"id": id, "status": status, "ops": [op],
               "received_ts": [times.0 / 1000, (times.0 % 1000) * 1000],
               "start_ts": [times.0 / 1000, (times.0 % 1000) * 1000],
               "end_ts": [times.1 / 1000, (times.1 % 1000) * 1000]})
    }
    /// Adds [`job`]'s job to the inputs' job list.
    fn push_job(
        inputs: &mut Inputs,
        id: JobId,
        status: &str,
        op: Value,
        reason: Option<(&str, &str)>,
        times: (u64, u64),
    ) {
        inputs
            .jobs
            .push(serde_json::from_value(job(id, status, op, reason, times)).unwrap());
    }
    fn drain(node: &str, on: bool) -> Value {
        json!({"OP_ID": "OP_NODE_SET_PARAMS", "node_name": node, "drained": on})
    }
    fn offline(node: &str, on: bool) -> Value {
        json!({"OP_ID": "OP_NODE_SET_PARAMS", "node_name": node, "offline": on})
    }
    fn migrate(inst: &str) -> Value {
        json!({"OP_ID": "OP_INSTANCE_MIGRATE", "instance_name": inst})
    }
    fn ev(t: u64, kind: &str, fields: Value) -> FaultEvent {
        let mut v = fields;
        v["t_ms"] = json!(t);
        v["kind"] = json!(kind);
        serde_json::from_value(v).unwrap()
    }
    fn final_ok(t: u64, grants: Value) -> FaultEvent {
        ev(
            t,
            "final",
            json!({"quiesced": true, "incidents": [{"id": INC, "node": "node4", "repair-status": "completed"}], "grants": grants}),
        )
    }
    /// A clean run: node4 drained, its instance moved, offline, then returned to service; a
    /// grant of node1 after that, released; node1's coordinator took over first.
    fn clean() -> Inputs {
        let jobs = json!([
            job(
                5,
                "success",
                drain("node9", true),
                None,
                (T - 100_000, T - 99_000)
            ),
            job(
                11,
                "success",
                drain("node4", true),
                Some((INC, "drain-1")),
                (T + 1000, T + 2000)
            ),
            job(
                12,
                "success",
                migrate("inst1"),
                Some((INC, "migrate-inst1-1")),
                (T + 3000, T + 9000)
            ),
            job(
                13,
                "success",
                offline("node4", true),
                Some((INC, "offline-1")),
                (T + 10_000, T + 11_000)
            ),
            job(
                14,
                "success",
                offline("node4", false),
                None,
                (T + 20_000, T + 21_000)
            ),
            job(
                15,
                "success",
                drain("node4", false),
                None,
                (T + 22_000, T + 23_000)
            ),
        ]);
        let mut coordinators = BTreeMap::new();
        coordinators.insert(
            "node1".to_owned(),
            vec![(T - 5000, CoordinatorEvent::TookOver)],
        );
        coordinators.insert(
            "node2".to_owned(),
            vec![(T - 5000, CoordinatorEvent::StoodDown)],
        );
        let mut audits = BTreeMap::new();
        audits.insert(
            "node3".to_owned(),
            vec![AuditLine {
                line: 0,
                at: T + 500,
                outcome: "accepted".into(),
                incident_id: Some(INC2.into()),
                command: Some("e2e-fix".into()),
            }],
        );
        Inputs {
            jobs: serde_json::from_value(jobs).unwrap(),
            faults: vec![
                ev(
                    T - 10_000,
                    "run-start",
                    json!({"seed": 7, "first_job": 10, "max_disrupted_nodes": 1}),
                ),
                ev(T, "fault", json!({"fault": "partition", "phase": "start"})),
                ev(
                    T + 5000,
                    "fault",
                    json!({"fault": "partition", "phase": "end"}),
                ),
                ev(
                    T + 30_000,
                    "grant",
                    json!({"code": 201, "id": "g1", "node": "node1", "expires_ms": T + 90_000,
                                                "answer": {"granted_ms": T + 29_900}}),
                ),
                ev(T + 40_000, "release", json!({"code": 200, "id": "g1"})),
                ev(T + 60_000, "faults-stopped", json!({})),
                final_ok(T + 80_000, json!([])),
            ],
            coordinators,
            writes: vec![RapiWrite {
                at_ms: T + 1000,
                from: "node1".into(),
                request: "PUT /2/nodes/node4/modify".into(),
            }],
            audits,
            hooks: BTreeMap::new(),
            skipped_lines: 0,
        }
    }
    fn kinds(inputs: &Inputs) -> Vec<&'static str> {
        check(inputs, &Settings::default())
            .unwrap()
            .violations
            .iter()
            .map(Violation::kind)
            .collect()
    }

    #[test]
    fn a_clean_run_has_no_violation_and_its_figures() {
        let r = check(&clean(), &Settings::default()).unwrap();
        assert_eq!(r.violations, vec![], "{r}");
        assert_eq!(r.seed, Some(7));
        assert_eq!((r.jobs, r.operations, r.incidents), (3, 4, 2));
        assert_eq!(r.faults.get("partition"), Some(&1));
        assert_eq!((r.max_disrupted_seen, r.grants, r.takeovers), (1, 1, 1));
    }

    #[test]
    fn one_intent_in_two_jobs_is_submitted_twice() {
        let mut i = clean();
        push_job(
            &mut i,
            16,
            "success",
            migrate("inst1"),
            Some((INC, "migrate-inst1-1")),
            (T + 9500, T + 9600),
        );
        let r = check(&i, &Settings::default()).unwrap();
        assert_eq!(
            r.violations,
            vec![Violation::SubmittedTwice {
                incident: INC.into(),
                intent: "migrate-inst1-1".into(),
                jobs: vec![12, 16]
            }]
        );
    }

    #[test]
    fn jobs_before_the_run_are_not_judged() {
        let mut i = clean();
        push_job(
            &mut i,
            3,
            "success",
            migrate("inst1"),
            Some((INC, "migrate-inst1-1")),
            (T - 50_000, T - 49_000),
        );
        assert_eq!(kinds(&i), Vec::<&str>::new());
    }

    #[test]
    fn a_repair_accepted_twice_is_an_operation_twice() {
        let mut i = clean();
        let again = AuditLine {
            line: 1,
            at: T + 900,
            outcome: "accepted".into(),
            incident_id: Some(INC2.into()),
            command: Some("e2e-fix".into()),
        };
        let dup = AuditLine {
            outcome: "duplicate".into(),
            ..again.clone()
        };
        i.audits.get_mut("node3").unwrap().push(dup);
        assert_eq!(
            kinds(&i),
            Vec::<&str>::new(),
            "a duplicate answered idempotently is fine"
        );
        i.audits.get_mut("node3").unwrap().push(again);
        assert_eq!(kinds(&i), vec!["repaired-twice"]);
    }

    #[test]
    fn a_write_after_another_coordinators_takeover_is_fenced() {
        let mut i = clean();
        i.coordinators.insert(
            "node2".into(),
            vec![
                (T - 5000, CoordinatorEvent::StoodDown),
                (T + 4000, CoordinatorEvent::TookOver),
            ],
        );
        // Within the slack: in flight when node2 took over.
        i.writes.push(RapiWrite {
            at_ms: T + 5000,
            from: "node1".into(),
            request: "PUT /2/instances/inst1/migrate".into(),
        });
        assert_eq!(kinds(&i), Vec::<&str>::new());
        i.writes.push(RapiWrite {
            at_ms: T + 7000,
            from: "node1".into(),
            request: "PUT /2/instances/inst2/migrate".into(),
        });
        let r = check(&i, &Settings::default()).unwrap();
        assert_eq!(r.violations.len(), 1, "{r}");
        assert!(
            matches!(&r.violations[0], Violation::FencedWrite { from, at_ms, .. } if from == "node1" && *at_ms == T + 7000)
        );
        // Taking over again makes it the writer again.
        i.coordinators
            .get_mut("node1")
            .unwrap()
            .push((T + 6500, CoordinatorEvent::TookOver));
        assert_eq!(kinds(&i), Vec::<&str>::new());
    }

    #[test]
    fn a_write_by_a_standby_or_after_standing_down_is_fenced() {
        let mut i = clean();
        i.writes.push(RapiWrite {
            at_ms: T + 1000,
            from: "node2".into(),
            request: "POST /2/nodes/node4/tags".into(),
        });
        assert_eq!(kinds(&i), vec!["fenced-write"]);
        let mut i = clean();
        i.coordinators
            .get_mut("node1")
            .unwrap()
            .push((T + 2000, CoordinatorEvent::StoodDown));
        i.writes.push(RapiWrite {
            at_ms: T + 9000,
            from: "node1".into(),
            request: "POST /2/nodes/node4/tags".into(),
        });
        assert_eq!(kinds(&i), vec!["fenced-write"]);
        let mut i = clean();
        i.writes.push(RapiWrite {
            at_ms: T + 9000,
            from: "node5".into(),
            request: "POST /2/nodes/node4/tags".into(),
        });
        assert_eq!(kinds(&i), vec!["fenced-write"]);
    }

    #[test]
    fn a_job_or_repair_after_an_acknowledged_cancel_is_a_canceled_incident_acting() {
        let mut i = clean();
        i.faults.push(ev(
            T + 2500,
            "cancel",
            json!({"code": 200, "incident": INC}),
        ));
        let r = check(&i, &Settings::default()).unwrap();
        assert_eq!(r.cancels, 1);
        // Job 12 received at T+3000 is within the slack; 13 at T+10000 is not.
        assert!(
            matches!(&r.violations[..], [Violation::CanceledActed { what, .. }] if what.starts_with("job 13")),
            "{r}"
        );
        // A refused cancel (409) is no cancel.
        let mut i = clean();
        i.faults.push(ev(
            T + 2500,
            "cancel",
            json!({"code": 409, "incident": INC}),
        ));
        assert_eq!(kinds(&i), Vec::<&str>::new());
        let mut i = clean();
        i.faults.push(ev(
            T - 9000,
            "cancel",
            json!({"code": 200, "incident": INC2}),
        ));
        assert_eq!(kinds(&i), vec!["canceled-acted"]);
    }

    #[test]
    fn a_grant_in_force_missing_at_the_end_is_forgotten() {
        let mut i = clean();
        i.faults.retain(|e| e.kind != "release");
        // Not released, expires after the end (T+90 s > T+80 s): must be listed.
        assert_eq!(kinds(&i), vec!["grant-forgotten"]);
        let fin = i.faults.iter_mut().find(|e| e.kind == "final").unwrap();
        *fin = final_ok(T + 80_000, json!([{"id": "g1", "node": "node1"}]));
        assert_eq!(kinds(&i), Vec::<&str>::new());
        // Expired before the end: nothing to remember.
        let mut i = clean();
        i.faults.retain(|e| e.kind != "release");
        let fin = i.faults.iter_mut().find(|e| e.kind == "final").unwrap();
        fin.t_ms = T + 100_000;
        assert_eq!(kinds(&i), Vec::<&str>::new());
    }

    #[test]
    fn a_grant_missing_after_a_failover_is_forgotten() {
        let mut i = clean();
        i.faults.push(ev(
            T + 35_000,
            "grants",
            json!({"after": "failover", "grants": []}),
        ));
        assert_eq!(kinds(&i), vec!["grant-forgotten"]);
        let mut i = clean();
        i.faults.push(ev(
            T + 35_000,
            "grants",
            json!({"after": "failover", "grants": [{"id": "g1"}]}),
        ));
        assert_eq!(kinds(&i), Vec::<&str>::new());
        // After its release: not to be listed.
        let mut i = clean();
        i.faults.push(ev(
            T + 45_000,
            "grants",
            json!({"after": "failover", "grants": []}),
        ));
        assert_eq!(kinds(&i), Vec::<&str>::new());
    }

    #[test]
    fn two_nodes_disrupted_at_once_exceed_the_budget() {
        // node5 drained while node4 is still offline.
        let mut i = clean();
        push_job(
            &mut i,
            16,
            "success",
            drain("node5", true),
            Some((INC2, "drain-1")),
            (T + 15_000, T + 16_000),
        );
        push_job(
            &mut i,
            17,
            "success",
            drain("node5", false),
            None,
            (T + 25_000, T + 26_000),
        );
        let r = check(&i, &Settings::default()).unwrap();
        assert_eq!(
            r.violations,
            vec![Violation::BudgetExceeded {
                at_ms: T + 15_000,
                nodes: vec!["node4".into(), "node5".into()],
                max: 1
            }]
        );
        // After node4's undrain ended: fine.
        let mut i = clean();
        push_job(
            &mut i,
            16,
            "success",
            drain("node5", true),
            Some((INC2, "drain-1")),
            (T + 23_500, T + 24_000),
        );
        push_job(
            &mut i,
            17,
            "success",
            drain("node5", false),
            None,
            (T + 25_000, T + 26_000),
        );
        assert_eq!(kinds(&i), Vec::<&str>::new());
        // A failed drain job changes nothing.
        let mut i = clean();
        push_job(
            &mut i,
            16,
            "error",
            drain("node5", true),
            Some((INC2, "drain-1")),
            (T + 15_000, T + 16_000),
        );
        assert_eq!(kinds(&i), Vec::<&str>::new());
    }

    #[test]
    fn offline_clears_drained_as_in_ganeti() {
        // Ganeti's roles are exclusive: node4 set offline is no longer drained, so setting it
        // online again returns it to service without an undrain job (seed 11's first run).
        let mut i = clean();
        i.jobs.retain(|j| j.id != 15);
        push_job(
            &mut i,
            16,
            "success",
            drain("node5", true),
            Some((INC2, "drain-1")),
            (T + 23_500, T + 24_000),
        );
        push_job(
            &mut i,
            17,
            "success",
            drain("node5", false),
            None,
            (T + 25_000, T + 26_000),
        );
        assert_eq!(kinds(&i), Vec::<&str>::new());
        // Still disrupted between the offline job's start and the online job's end.
        let mut i = clean();
        i.jobs.retain(|j| j.id != 15);
        push_job(
            &mut i,
            16,
            "success",
            drain("node5", true),
            Some((INC2, "drain-1")),
            (T + 20_500, T + 24_000),
        );
        push_job(
            &mut i,
            17,
            "success",
            drain("node5", false),
            None,
            (T + 25_000, T + 26_000),
        );
        assert_eq!(kinds(&i), vec!["budget-exceeded"]);
    }

    #[test]
    fn a_grant_counts_in_the_budget() {
        let mut i = clean();
        i.faults.push(ev(
            T + 5000,
            "grant",
            json!({"code": 201, "id": "g2", "node": "node2", "expires_ms": T + 8000}),
        ));
        assert_eq!(kinds(&i), vec!["budget-exceeded"]);
        // The budget from the run: 2.
        let start = i.faults.iter_mut().find(|e| e.kind == "run-start").unwrap();
        start.fields.insert("max_disrupted_nodes".into(), json!(2));
        assert_eq!(kinds(&i), Vec::<&str>::new());
    }

    #[test]
    fn an_incident_left_active_or_no_quiescence_is_not_finished() {
        let mut i = clean();
        let fin = i.faults.iter_mut().find(|e| e.kind == "final").unwrap();
        fin.fields.insert(
            "incidents".into(),
            json!([{"id": INC, "node": "node4", "repair-status": "pending"}]),
        );
        assert_eq!(kinds(&i), vec!["not-finished"]);
        let mut i = clean();
        i.faults
            .iter_mut()
            .find(|e| e.kind == "final")
            .unwrap()
            .fields
            .insert("quiesced".into(), json!(false));
        assert_eq!(kinds(&i), vec!["not-finished"]);
        let mut i = clean();
        i.faults.retain(|e| e.kind != "final");
        assert_eq!(kinds(&i), vec!["not-finished"]);
        let mut i = clean();
        push_job(
            &mut i,
            16,
            "running",
            migrate("inst2"),
            Some((INC, "migrate-inst2-1")),
            (T + 15_000, T + 16_000),
        );
        assert_eq!(kinds(&i), vec!["not-finished"]);
    }

    #[test]
    fn no_run_start_is_an_input_error() {
        let mut i = clean();
        i.faults.retain(|e| e.kind != "run-start");
        assert!(matches!(
            check(&i, &Settings::default()),
            Err(InputError::Faults(_))
        ));
        assert!(matches!(
            parse_jobs("{\"not\": \"a list\"}"),
            Err(InputError::Jobs(_))
        ));
    }

    #[test]
    fn the_logs_parse_as_the_daemons_write_them() {
        let coord = "2026-11-26T14:42:47.720965Z  INFO standing by until this node is the master error=x\n\
                     garbage line\n\
                     2026-11-26T14:44:00.858197Z  WARN took over the state kept by a master candidate (newer than this node's) from=node1 generation=2.6 local=0.0\n\
                     2026-11-26T14:44:04.314533Z  INFO this node is the master: acting node=node2\n\
                     bad-time  INFO no longer the master: standing by error=y\n\
                     2026-11-26T14:50:00.000001Z ERROR another coordinator took over: standing down node=node3 held=4.1 ours=3.3\n";
        let (events, skipped) = parse_coordinator_log(coord);
        let base = parse_iso_ms("2026-11-26T14:42:47.720965Z").unwrap();
        assert_eq!(base % 1000, 720);
        assert_eq!(
            events,
            vec![
                (base, CoordinatorEvent::StoodDown),
                (base + 73_138, CoordinatorEvent::TookOver),
                (
                    parse_iso_ms("2026-11-26T14:50:00.000Z").unwrap(),
                    CoordinatorEvent::StoodDown
                ),
            ]
        );
        assert_eq!(skipped, 1);
        assert_eq!(parse_iso_ms("1970-01-01T00:00:01.5Z"), Some(1500));
        assert_eq!(parse_iso_ms("2026-13-01T00:00:00Z"), None);
        assert_eq!(
            utc_iso_ms(parse_iso_ms("2026-11-27T03:17:12.512Z").unwrap()),
            "2026-11-27T03:17:12.512Z"
        );

        let rapi = "2026-11-27 03:17:12,512: ganeti-rapi pid=29896 INFO 127.0.0.1:41234 PUT /2/nodes/node4/modify HTTP/1.1 200\n\
                    2026-11-27 03:17:13,000: ganeti-rapi pid=29896 INFO 198.18.0.2:5555 POST /2/nodes/node4/tags HTTP/1.1 200\n\
                    2026-11-27 03:17:14,000: ganeti-rapi pid=29896 INFO 198.18.0.12:5555 DELETE /2/nodes/node4/tags HTTP/1.1 200\n\
                    2026-11-27 03:17:15,000: ganeti-rapi pid=29896 INFO 198.18.0.100:5555 GET /2/jobs HTTP/1.1 200\n\
                    2026-11-27 03:17:16,000: ganeti-rapi pid=29896 INFO 198.18.0.100:5555 POST /2/instances/i/migrate HTTP/1.1 200\n\
                    not a line\n";
        let mut addresses = Addresses {
            client: "198.18.0.2".into(),
            cluster: "198.18.0.100".into(),
            ..Addresses::default()
        };
        addresses.nodes.insert("198.18.0.12".into(), "node2".into());
        let writes = parse_rapi_log("node1", rapi, &addresses);
        let froms: Vec<(&str, &str)> = writes
            .iter()
            .map(|w| (w.from.as_str(), w.request.as_str()))
            .collect();
        assert_eq!(
            froms,
            vec![
                ("node1", "PUT /2/nodes/node4/modify"),
                ("node2", "DELETE /2/nodes/node4/tags"),
                ("node1", "POST /2/instances/i/migrate")
            ]
        );
        assert_eq!(
            writes[0].at_ms,
            parse_iso_ms("2026-11-27T03:17:12.512Z").unwrap()
        );

        let audit = "{\"at\":1,\"source\":\"http\",\"peer\":\"x\",\"authenticated\":true,\"incident_id\":\"a\",\"command\":\"c\",\"key_id\":null,\"nonce\":null,\"outcome\":\"accepted\",\"detail\":null,\"message\":null}\n{broken\n";
        let (lines, skipped) = parse_audit(audit);
        assert_eq!(
            (lines.len(), skipped, lines[0].outcome.as_str()),
            (1, 1, "accepted")
        );
        let (faults, skipped) =
            parse_faults("{\"t_ms\": 5, \"kind\": \"fault\", \"fault\": \"isolate\"}\nnope\n");
        assert_eq!(
            (faults.len(), skipped, faults[0].str("fault")),
            (1, 1, Some("isolate"))
        );
    }

    /// node3's clock jumped by OFFSET_S from T+20 s to T+40 s (audit lines 1..3 written then);
    /// the incident INC2 canceled at T+25 s; node3's agent accepts INC2's repair again at true
    /// time T+30 s, its clock saying T+30 s + OFFSET_S.
    fn jumped_repair_after_cancel(offset_s: i64) -> Inputs {
        let mut i = clean();
        i.faults.push(ev(
            T + 20_000,
            "fault",
            json!({"n": 3, "fault": "clock-jump", "phase": "start", "node": "node3",
                   "offset_s": offset_s, "audit_lines": 1}),
        ));
        i.faults.push(ev(
            T + 25_000,
            "cancel",
            json!({"code": 200, "incident": INC2}),
        ));
        i.faults.push(ev(
            T + 40_000,
            "fault",
            json!({"n": 3, "fault": "clock-jump", "phase": "end", "audit_lines": 2}),
        ));
        let moved = T + 30_000;
        let moved = u64::try_from(i64::try_from(moved).unwrap() + offset_s * 1000).unwrap();
        i.audits.get_mut("node3").unwrap().push(AuditLine {
            line: 1,
            at: moved,
            outcome: "accepted".into(),
            incident_id: Some(INC2.into()),
            command: Some("e2e-fix".into()),
        });
        i
    }

    #[test]
    fn an_audit_line_written_during_a_clock_jump_is_judged_at_its_true_time() {
        // The second acceptance is an operation twice whatever the clock; after the cancel it
        // is a canceled incident acting, a clock set back 10 minutes or ahead 20 or not.
        for offset_s in [-600, -30, 0, 45, 1200] {
            let i = jumped_repair_after_cancel(offset_s);
            assert_eq!(
                kinds(&i),
                vec!["repaired-twice", "canceled-acted"],
                "offset {offset_s} s"
            );
            let r = check(&i, &Settings::default()).unwrap();
            assert!(
                r.to_string().contains(&utc_iso_ms(T + 30_000)),
                "offset {offset_s} s: {r}"
            );
        }
        // Lines outside the jump's line range keep their time: the first acceptance (line 0,
        // at T+500) is before the cancel.
        let mut audits = clean().audits;
        let jumps = vec![ClockJump {
            node: "node3".into(),
            offset_ms: -600_000,
            span_ms: (T + 20_000, T + 40_000),
            lines: (1, 2),
        }];
        unfake_audit_times(&mut audits, &jumps);
        assert_eq!(audits["node3"][0].at, T + 500);
        // A line inside the range whose time is inside the span was written before the daemon
        // read the offset: kept; one beyond the offset is kept within the span.
        let mut audits = clean().audits;
        let node3 = audits.get_mut("node3").unwrap();
        node3[0].line = 1;
        node3[0].at = T + 20_500;
        node3.push(AuditLine {
            line: 1,
            at: T + 5_000,
            ..node3[0].clone()
        });
        unfake_audit_times(&mut audits, &jumps);
        assert_eq!(audits["node3"][0].at, T + 20_500);
        assert_eq!(audits["node3"][1].at, T + 40_000);
    }

    #[test]
    fn a_coordinator_log_line_is_read_at_the_true_time_in_front() {
        let log = "@2026-11-27T03:17:12.512Z 2026-11-27T03:57:12.512345Z  WARN took over the state kept by a master candidate from=node1\n\
                   @2026-11-27T03:18:00.000Z 2026-11-27T03:08:00.000000Z  INFO no longer the master: standing by\n\
                   @bad 2026-11-27T03:19:00.000000Z  INFO no longer the master: standing by\n";
        let (events, skipped) = parse_coordinator_log(log);
        assert_eq!(
            events,
            vec![
                (
                    parse_iso_ms("2026-11-27T03:17:12.512Z").unwrap(),
                    CoordinatorEvent::TookOver
                ),
                (
                    parse_iso_ms("2026-11-27T03:18:00.000Z").unwrap(),
                    CoordinatorEvent::StoodDown
                ),
            ]
        );
        assert_eq!(skipped, 1);
    }

    #[test]
    fn a_campaign_or_instance_repair_left_unfinished_is_not_finished() {
        let with = |events: Vec<FaultEvent>, campaigns: Value| {
            let mut i = clean();
            i.faults.extend(events);
            i.faults
                .iter_mut()
                .find(|e| e.kind == "final")
                .unwrap()
                .fields
                .insert("campaigns".into(), campaigns);
            i
        };
        let started = || {
            ev(
                T + 1000,
                "campaign",
                json!({"phase": "start", "code": 201, "id": "c1"}),
            )
        };
        for (state, want) in [
            ("completed", vec![]),
            ("failed", vec![]),
            ("aborted", vec![]),
            ("running", vec!["not-finished"]),
            ("paused", vec!["not-finished"]),
        ] {
            let i = with(vec![started()], json!([{"id": "c1", "state": state}]));
            assert_eq!(kinds(&i), want, "{state}");
        }
        let i = with(vec![started()], json!([{"id": "c2", "state": "completed"}]));
        assert_eq!(kinds(&i), vec!["not-finished"], "forgotten campaign");
        // A campaign refused (409) is no campaign.
        let refused = ev(
            T + 1000,
            "campaign",
            json!({"phase": "start", "code": 409, "id": ""}),
        );
        assert_eq!(kinds(&with(vec![refused], json!([]))), Vec::<&str>::new());

        let repair = |tags: Option<&str>| {
            let mut v = vec![ev(
                T + 2000,
                "harep",
                json!({"phase": "start", "instance": "inst4", "node": "node4", "setup": "success"}),
            )];
            if let Some(tags) = tags {
                v.push(ev(
                    T + 9000,
                    "harep",
                    json!({"phase": "end", "instance": "inst4", "tags": tags}),
                ));
            }
            with(v, json!([]))
        };
        let done = "ganeti:watcher:autorepair:migrate ganeti:watcher:autorepair:result:migrate:u:1:success:17";
        let r = check(&repair(Some(done)), &Settings::default()).unwrap();
        assert_eq!((r.instance_repairs, r.violations.len()), ((1, 1), 0), "{r}");
        let failed = done.replace(":success:", ":failure:");
        let r = check(&repair(Some(&failed)), &Settings::default()).unwrap();
        assert_eq!((r.instance_repairs, r.violations.len()), ((1, 0), 0), "{r}");
        for tags in [
            Some("ganeti:watcher:autorepair:migrate"),
            Some("ganeti:watcher:autorepair:pending:migrate:u:1:17"),
            None,
        ] {
            assert_eq!(kinds(&repair(tags)), vec!["not-finished"], "{tags:?}");
        }
    }

    #[test]
    fn a_campaign_draining_a_node_twice_or_running_its_hook_twice_handles_it_twice() {
        const C: &str = "7d1e2f3a-4b5c-4d6e-8f70-9a1b2c3d4e5f";
        let with_campaign = || {
            let mut i = clean();
            i.faults.push(ev(
                T + 1000,
                "campaign",
                json!({"phase": "start", "code": 201, "id": C}),
            ));
            i.faults
                .iter_mut()
                .find(|e| e.kind == "final")
                .unwrap()
                .fields
                .insert("campaigns".into(), json!([{"id": C, "state": "completed"}]));
            i
        };
        let mut i = with_campaign();
        push_job(
            &mut i,
            20,
            "success",
            drain("node5", true),
            Some((C, "drain-node5")),
            (T + 50_000, T + 50_500),
        );
        push_job(
            &mut i,
            21,
            "success",
            drain("node5", false),
            Some((C, "undrain-node5")),
            (T + 60_000, T + 60_500),
        );
        let (runs, skipped) = parse_hook_log(&format!(
            "{} {{\"kind\":\"maintenance\",\"campaign\":\"{C}\",\"node\":\"node5\"}}\nbroken\n",
            T + 55_000
        ));
        assert_eq!(
            (
                runs.iter().map(|r| r.campaign.clone()).collect::<Vec<_>>(),
                skipped
            ),
            (vec![C.to_owned()], 1)
        );
        i.hooks.insert("node5".into(), runs.clone());
        assert_eq!(kinds(&i), Vec::<&str>::new());
        // Drained again under another intent (a re-planned step).
        let mut twice = with_campaign();
        twice.hooks.insert("node5".into(), runs.clone());
        for (id, intent) in [(20, "drain-node5"), (22, "drain-node5-again")] {
            push_job(
                &mut twice,
                id,
                "success",
                drain("node5", true),
                Some((C, intent)),
                (T + 50_000, T + 50_500),
            );
        }
        assert_eq!(kinds(&twice), vec!["campaign-node-twice"]);
        // The hook run twice.
        let run = |campaign: &str| HookRun {
            at_ms: T + 55_000,
            campaign: campaign.to_owned(),
            running: None,
        };
        let mut i = with_campaign();
        i.hooks.insert("node5".into(), vec![run(C), run(C)]);
        assert_eq!(kinds(&i), vec!["campaign-node-twice"]);
        // Another campaign's run is its own.
        let mut i = with_campaign();
        i.hooks.insert("node5".into(), vec![run(C), run(INC)]);
        assert_eq!(kinds(&i), Vec::<&str>::new());
    }

    #[test]
    fn a_grant_renewed_by_its_requester_expires_when_the_renewal_says() {
        // g1 (node1, 201 at T+30 s, expires T+90 s) asked again at T+35 s: 200, expires
        // T+50 s. The final list at T+80 s without it is right; with the first expiry it would
        // be a grant forgotten.
        let mut i = clean();
        i.faults.retain(|e| e.kind != "release");
        i.faults.push(ev(
            T + 35_000,
            "grant",
            json!({"code": 200, "id": "g1", "node": "node1", "expires_ms": T + 50_000}),
        ));
        assert_eq!(kinds(&i), Vec::<&str>::new());
        // Renewed for longer: still in force at the end, so missing there is forgotten.
        let mut i = clean();
        i.faults.retain(|e| e.kind != "release");
        i.faults.push(ev(
            T + 35_000,
            "grant",
            json!({"code": 200, "id": "g1", "node": "node1", "expires_ms": T + 200_000}),
        ));
        let fin = i.faults.iter_mut().find(|e| e.kind == "final").unwrap();
        *fin = final_ok(T + 100_000, json!([]));
        assert_eq!(kinds(&i), vec!["grant-forgotten"]);
    }
    #[test]
    fn a_hook_with_a_running_primary_or_after_its_node_failed_is_a_violation() {
        const C: &str = "7d1e2f3a-4b5c-4d6e-8f70-9a1b2c3d4e5f";
        let with_campaign = |failed_ms: Option<u64>| {
            let mut i = clean();
            i.faults.push(ev(
                T + 1000,
                "campaign",
                json!({"phase": "start", "code": 201, "id": C}),
            ));
            let failures = failed_ms.map_or_else(
                || json!([]),
                |at| json!([{"node": "node5", "step": "hook", "at_ms": at}]),
            );
            i.faults
                .iter_mut()
                .find(|e| e.kind == "final")
                .unwrap()
                .fields
                .insert(
                    "campaigns".into(),
                    json!([{"id": C, "state": "failed", "failures": failures}]),
                );
            i
        };
        let line = |at: u64, running: &str| {
            format!(
                "{at} running=[{running}] {{\"kind\":\"maintenance\",\"campaign\":\"{C}\",\"node\":\"node5\"}}\n"
            )
        };
        // Nothing running on the node, no failure: clean.
        let (runs, skipped) = parse_hook_log(&line(T + 55_000, ""));
        assert_eq!(skipped, 0);
        assert_eq!(
            runs,
            vec![HookRun {
                at_ms: T + 55_000,
                campaign: C.to_owned(),
                running: Some(Vec::new())
            }]
        );
        let mut i = with_campaign(None);
        i.hooks.insert("node5".into(), runs);
        assert_eq!(kinds(&i), Vec::<&str>::new());
        // An instance running on the node when the hook ran.
        let mut i = with_campaign(None);
        i.hooks.insert(
            "node5".into(),
            parse_hook_log(&line(T + 55_000, "inst7.nodecare.test ")).0,
        );
        assert_eq!(kinds(&i), vec!["hook-with-running-primary"]);
        // Its node failed at its hook at T+50 s: a run at T+55 s is one too many; one within
        // the slack of the failure was in flight.
        let mut i = with_campaign(Some(T + 50_000));
        i.hooks
            .insert("node5".into(), parse_hook_log(&line(T + 55_000, "")).0);
        assert_eq!(kinds(&i), vec!["hook-after-failure"]);
        let mut i = with_campaign(Some(T + 54_000));
        i.hooks
            .insert("node5".into(), parse_hook_log(&line(T + 55_000, "")).0);
        assert_eq!(kinds(&i), Vec::<&str>::new());
        // A failure the fault log saw at the fault's end counts too.
        let mut i = with_campaign(None);
        i.faults.push(ev(
            T + 58_000,
            "fault",
            json!({"fault": "hook-away", "phase": "end", "campaign": C,
                   "failures": [{"node": "node5", "step": "hook", "at_ms": T + 50_000}]}),
        ));
        i.hooks
            .insert("node5".into(), parse_hook_log(&line(T + 55_000, "")).0);
        assert_eq!(kinds(&i), vec!["hook-after-failure"]);
        // The old log format (no running list) is read, and judged on failures only.
        let (runs, _) = parse_hook_log(&format!(
            "{} {{\"kind\":\"maintenance\",\"campaign\":\"{C}\"}}\n",
            T + 55_000
        ));
        assert_eq!(runs[0].running, None);
    }
}
