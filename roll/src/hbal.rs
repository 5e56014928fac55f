//! Ganeti's balancer, `hbal`: the arguments nodecare runs it with, and its standard output
//! (`hbal -t FILE -C`) read into a typed [`HbalPlan`].
//!
//! The reader is strict: every line must be one hbal prints in the situation it describes, every
//! command one of the few hbal writes (`gnt-instance migrate|failover [-n NODE]`,
//! `gnt-instance replace-disks -n NODE`), the numbering of job sets and jobs consistent, and each
//! job the command list of the move of the same rank in the solution. Anything else is an
//! [`HbalError`], never a partial move list.
//!
//! hbal strips the suffix common to every node and instance name (`.example.com`) from what it
//! prints; [`HbalPlan::resolve`] puts the full names back.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde::{Deserialize, Serialize};

/// What went wrong reading hbal's output.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("hbal output, line {line}: {message}")]
pub struct HbalError {
    /// 1-based line number (0: the output as a whole).
    pub line: usize,
    /// What is wrong.
    pub message: String,
}

fn err<T>(line: usize, message: impl Into<String>) -> Result<T, HbalError> {
    Err(HbalError {
        line,
        message: message.into(),
    })
}

/// An instance's nodes: primary and, for DRBD, secondary.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Placement {
    /// Primary node.
    pub primary: String,
    /// Secondary node (DRBD).
    pub secondary: Option<String>,
}

impl Placement {
    fn parse(text: &str) -> Option<Self> {
        match text.split_once(':') {
            Some((p, s)) if !p.is_empty() && !s.is_empty() && !s.contains(':') => Some(Self {
                primary: p.to_owned(),
                secondary: Some(s.to_owned()),
            }),
            Some(_) => None,
            None if !text.is_empty() => Some(Self {
                primary: text.to_owned(),
                secondary: None,
            }),
            None => None,
        }
    }

    fn nodes(&self) -> impl Iterator<Item = &String> {
        std::iter::once(&self.primary).chain(self.secondary.as_ref())
    }
}

impl fmt::Display for Placement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.secondary {
            Some(s) => write!(f, "{}:{s}", self.primary),
            None => f.write_str(&self.primary),
        }
    }
}

/// One Ganeti operation of a move, as hbal writes it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "kebab-case")]
pub enum HbalOp {
    /// `gnt-instance migrate -f [-n NODE] INST` (live migration of a running instance).
    Migrate {
        /// `-n`: the new primary (shared storage); none: the DRBD secondary.
        target: Option<String>,
    },
    /// `gnt-instance failover -f [-n NODE] INST` (an instance that is not running).
    Failover {
        /// `-n`: the new primary (shared storage); none: the DRBD secondary.
        target: Option<String>,
    },
    /// `gnt-instance replace-disks -n NODE INST`: a new DRBD secondary (a disk move).
    ReplaceSecondary {
        /// The new secondary.
        node: String,
    },
}

impl HbalOp {
    /// Whether it copies disks (a new DRBD secondary).
    pub const fn is_disk_move(&self) -> bool {
        matches!(self, Self::ReplaceSecondary { .. })
    }
}

impl fmt::Display for HbalOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Migrate { target: None } => f.write_str("migrate"),
            Self::Migrate { target: Some(n) } => write!(f, "migrate to {n}"),
            Self::Failover { target: None } => f.write_str("failover"),
            Self::Failover { target: Some(n) } => write!(f, "failover to {n}"),
            Self::ReplaceSecondary { node } => write!(f, "replace-disks -n {node}"),
        }
    }
}

/// One job of a job set: the operations of one move of one instance, in order (each runs only
/// once the one before it succeeded).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HbalJob {
    /// The instance.
    pub instance: String,
    /// Where it is before the move.
    pub from: Placement,
    /// Where it is after the move.
    pub to: Placement,
    /// The operations, in order.
    pub ops: Vec<HbalOp>,
    /// The cluster score after this move, as hbal reports it.
    pub score_after: f64,
}

impl HbalJob {
    /// Every node the move takes the instance off or onto (old and new primary and secondary).
    pub fn nodes(&self) -> BTreeSet<String> {
        self.from.nodes().chain(self.to.nodes()).cloned().collect()
    }
}

/// hbal's answer: scores and the job sets that reach the solution (jobs of one set touch
/// disjoint nodes; a set starts once the one before it is done).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HbalPlan {
    /// The node group hbal balanced (`None` for an empty cluster).
    pub group: Option<String>,
    /// Score before (`None` for an empty cluster).
    pub initial_score: Option<f64>,
    /// Score after the whole solution (the initial score when there is nothing to do).
    pub final_score: Option<f64>,
    /// The job sets, in order.
    pub jobsets: Vec<Vec<HbalJob>>,
    /// hbal's remarks (`Cluster is not N+1 happy…`, `Cluster is already well balanced…`).
    pub notes: Vec<String>,
}

/// A line of the solution: `  1. inst p:s => p:s   score a=…`.
struct SolutionLine {
    rank: usize,
    instance: String,
    from: Placement,
    to: Placement,
    score: f64,
}

fn parse_score(line: usize, text: &str) -> Result<f64, HbalError> {
    match text.parse::<f64>() {
        Ok(v) if v.is_finite() => Ok(v),
        _ => err(line, format!("not a score: {text:?}")),
    }
}

fn parse_solution_line(n: usize, text: &str) -> Result<SolutionLine, HbalError> {
    let words: Vec<&str> = text.split_whitespace().collect();
    let (Some(rank), Some(instance), Some(from), Some(&"=>"), Some(to), Some(score), Some(a)) = (
        words.first().and_then(|w| w.strip_suffix('.')),
        words.get(1),
        words.get(2),
        words.get(3),
        words.get(4),
        words.get(5),
        words.get(6),
    ) else {
        return err(n, format!("not a move: {text:?}"));
    };
    if !a.starts_with("a=") {
        return err(n, format!("not a move (no a=): {text:?}"));
    }
    let Ok(rank) = rank.parse::<usize>() else {
        return err(n, format!("not a move rank: {text:?}"));
    };
    let (Some(from), Some(to)) = (Placement::parse(from), Placement::parse(to)) else {
        return err(n, format!("bad nodes in move: {text:?}"));
    };
    Ok(SolutionLine {
        rank,
        instance: (*instance).to_owned(),
        from,
        to,
        score: parse_score(n, score)?,
    })
}

/// One `gnt-instance …` command: the instance and the operation.
fn parse_command(n: usize, text: &str) -> Result<(String, HbalOp), HbalError> {
    let words: Vec<&str> = text.split_whitespace().collect();
    let op = match words.as_slice() {
        ["gnt-instance", "migrate", "-f", inst] => (*inst, HbalOp::Migrate { target: None }),
        ["gnt-instance", "migrate", "-f", "-n", node, inst] => (
            *inst,
            HbalOp::Migrate {
                target: Some((*node).to_owned()),
            },
        ),
        ["gnt-instance", "failover", "-f", inst] => (*inst, HbalOp::Failover { target: None }),
        ["gnt-instance", "failover", "-f", "-n", node, inst] => (
            *inst,
            HbalOp::Failover {
                target: Some((*node).to_owned()),
            },
        ),
        ["gnt-instance", "replace-disks", "-n", node, inst] => (
            *inst,
            HbalOp::ReplaceSecondary {
                node: (*node).to_owned(),
            },
        ),
        _ => return err(n, format!("unexpected command: {text:?}")),
    };
    if op.0.starts_with('-') {
        return err(n, format!("unexpected command: {text:?}"));
    }
    Ok((op.0.to_owned(), op.1))
}

fn parse_count(n: usize, text: &str, prefix: &str, suffix: &str) -> Option<Result<u64, HbalError>> {
    let rest = text.strip_prefix(prefix)?.strip_suffix(suffix)?;
    Some(
        rest.parse::<u64>()
            .or_else(|_| err(n, format!("bad count in {text:?}"))),
    )
}

/// `PREFIX<n> nodes, <m> instances`.
fn is_counts(text: &str, prefix: &str) -> bool {
    text.strip_prefix(prefix).is_some_and(|rest| {
        let words: Vec<&str> = rest.split(' ').collect();
        matches!(words.as_slice(), [n, "nodes,", m, "instances"]
            if n.parse::<u64>().is_ok() && m.parse::<u64>().is_ok())
    })
}

/// hbal's remarks that nodecare keeps as notes.
fn is_note(text: &str) -> bool {
    text == "Cluster is not N+1 happy, continuing but no guarantee that the cluster will end N+1 happy."
        || (text.starts_with("The cluster contains ") && text.ends_with(" policy-violating nodes."))
        || text == "Continuing, ignoring soft errors."
        || text
            == "Continuing, but the set of moves might be too restricted; consider using the --ignore-soft-errors option."
}

/// A job as listed: its line, its instance, its operations.
type RawJob = (usize, String, Vec<HbalOp>);

/// Where `ops` take an instance placed at `from` (`None`: an operation that cannot apply).
fn apply(from: &Placement, ops: &[HbalOp]) -> Option<Placement> {
    let mut at = from.clone();
    for op in ops {
        match op {
            HbalOp::Migrate { target: None } | HbalOp::Failover { target: None } => {
                let secondary = at.secondary.take()?;
                at.secondary = Some(std::mem::replace(&mut at.primary, secondary));
            }
            HbalOp::Migrate { target: Some(node) } | HbalOp::Failover { target: Some(node) } => {
                if at.secondary.is_some() || *node == at.primary {
                    return None;
                }
                at.primary = node.clone();
            }
            HbalOp::ReplaceSecondary { node } => {
                if at.secondary.is_none() || *node == at.primary {
                    return None;
                }
                at.secondary = Some(node.clone());
            }
        }
    }
    Some(at)
}

/// Reads `hbal -C` standard output.
pub fn parse(stdout: &str) -> Result<HbalPlan, HbalError> {
    let lines: Vec<(usize, &str)> = stdout
        .lines()
        .enumerate()
        .map(|(i, l)| (i + 1, l))
        .collect();
    let mut plan = HbalPlan {
        group: None,
        initial_score: None,
        final_score: None,
        jobsets: Vec::new(),
        notes: Vec::new(),
    };
    let mut it = lines.iter().copied().peekable();
    let last_line = lines.len();
    // Header, up to and including the initial score: `Loaded …`, `Group size …`,
    // `Selected node group: …`, `Initial check done: …`, remarks, `Initial score: …`.
    let mut stage = 0;
    loop {
        let Some((n, text)) = it.next() else {
            return err(last_line, "output ends before the initial score");
        };
        if stage == 0 && text == "Cluster is empty, exiting." {
            if let Some((n, extra)) = it.next() {
                return err(n, format!("unexpected line after the end: {extra:?}"));
            }
            plan.notes.push(text.to_owned());
            return Ok(plan);
        }
        let unexpected = || err(n, format!("unexpected line: {text:?}"));
        match stage {
            0 if is_counts(text, "Loaded ") => stage = 1,
            1 if is_counts(text, "Group size ") => stage = 2,
            2 => match text.strip_prefix("Selected node group: ") {
                Some(group) if !group.is_empty() => {
                    plan.group = Some(group.to_owned());
                    stage = 3;
                }
                _ => return unexpected(),
            },
            3 if text.starts_with("Initial check done: ")
                && text.ends_with(" bad instances.")
                && text.contains(" bad nodes, ") =>
            {
                stage = 4;
            }
            4 if is_note(text) => {
                plan.notes.push(text.to_owned());
                stage = 4;
            }
            4 => match text.strip_prefix("Initial score: ") {
                Some(score) => {
                    plan.initial_score = Some(parse_score(n, score)?);
                    break;
                }
                None => return unexpected(),
            },
            _ => return unexpected(),
        }
    }
    let initial = plan.initial_score;
    // Nothing to do: the three lines of the well-balanced message, then the end.
    if let Some(&(_, text)) = it.peek()
        && text.starts_with("Cluster is already well balanced (")
    {
        let rest: Vec<(usize, &str)> = it.collect();
        let ok = matches!(rest.as_slice(),
            [(_, a), (_, b), (_, c), (_, "Nothing to do, exiting")]
                if a.starts_with("Cluster is already well balanced (initial score ")
                    && b.starts_with("optimum score due to N+1 reservations ")
                    && c.starts_with("minimum score ") && c.ends_with(").")
        );
        if !ok {
            return err(
                rest.first().map_or(last_line, |(n, _)| *n),
                "unexpected lines in the well-balanced message",
            );
        }
        plan.notes
            .push(rest.iter().map(|(_, t)| *t).collect::<Vec<_>>().join(" "));
        plan.final_score = initial;
        return Ok(plan);
    }
    match it.next() {
        Some((_, "Trying to minimize the CV...")) => {}
        Some((n, text)) => return err(n, format!("unexpected line: {text:?}")),
        None => return err(last_line, "output ends before the solution"),
    }
    // The solution, one line per move, then the outcome.
    let mut moves: Vec<SolutionLine> = Vec::new();
    loop {
        let Some((n, text)) = it.next() else {
            return err(last_line, "output ends inside the solution");
        };
        if text == "No solution found" {
            if !moves.is_empty() {
                return err(n, "\"No solution found\" after moves");
            }
            plan.final_score = initial;
            break;
        }
        if let Some(rest) = text.strip_prefix("Cluster score improved from ") {
            let Some((from, to)) = rest.split_once(" to ") else {
                return err(n, format!("unexpected line: {text:?}"));
            };
            if moves.is_empty() {
                return err(n, "score improved without a move");
            }
            let from = parse_score(n, from)?;
            if initial.is_some_and(|i| (i - from).abs() > 1e-6) {
                return err(n, "the improved-from score is not the initial score");
            }
            plan.final_score = Some(parse_score(n, to)?);
            break;
        }
        if !text.starts_with(' ') {
            return err(n, format!("unexpected line: {text:?}"));
        }
        let line = parse_solution_line(n, text)?;
        if line.rank != moves.len() + 1 {
            return err(n, format!("move {} out of order", line.rank));
        }
        moves.push(line);
    }
    match it.next() {
        Some((n, text)) => match parse_count(n, text, "Solution length=", "") {
            Some(count) => {
                if count? != moves.len() as u64 {
                    return err(n, format!("{text:?} but {} moves listed", moves.len()));
                }
            }
            None => return err(n, format!("unexpected line: {text:?}")),
        },
        None => return err(last_line, "output ends before the solution length"),
    }
    match (it.next(), it.next()) {
        (Some((_, "")), Some((_, "Commands to run to reach the above solution:"))) => {}
        (Some((n, text)), _) if !text.is_empty() => {
            return err(n, format!("unexpected line: {text:?}"));
        }
        (_, Some((n, text))) => return err(n, format!("unexpected line: {text:?}")),
        _ => return err(last_line, "output ends before the commands"),
    }
    // The commands: job sets, their jobs, each job's commands.
    let mut jobs: Vec<(usize, Vec<RawJob>)> = Vec::new();
    let mut announced: Vec<u64> = Vec::new();
    for (n, text) in it {
        let trimmed = text.trim_start();
        if trimmed.is_empty() {
            continue;
        }
        if let Some(rest) = trimmed.strip_prefix("echo jobset ") {
            let Some(rest) = rest.strip_suffix(" jobs") else {
                return err(n, format!("unexpected line: {text:?}"));
            };
            let Some((set, count)) = rest.split_once(", ") else {
                return err(n, format!("unexpected line: {text:?}"));
            };
            let (Ok(set), Ok(count)) = (set.parse::<usize>(), count.parse::<u64>()) else {
                return err(n, format!("unexpected line: {text:?}"));
            };
            if set != jobs.len() + 1 || count == 0 {
                return err(n, format!("job set {set} out of order"));
            }
            jobs.push((n, Vec::new()));
            announced.push(count);
            continue;
        }
        if let Some(rest) = trimmed.strip_prefix("echo job ") {
            let Some((set, job)) = rest.split_once('/') else {
                return err(n, format!("unexpected line: {text:?}"));
            };
            let (Ok(set), Ok(job)) = (set.parse::<usize>(), job.parse::<usize>()) else {
                return err(n, format!("unexpected line: {text:?}"));
            };
            let sets = jobs.len();
            let Some((_, set_jobs)) = jobs.last_mut() else {
                return err(n, "job outside a job set");
            };
            if set != sets || job != set_jobs.len() + 1 {
                return err(n, format!("job {set}/{job} out of order"));
            }
            set_jobs.push((n, String::new(), Vec::new()));
            continue;
        }
        let (instance, op) = parse_command(n, trimmed)?;
        let Some((_, job_instance, ops)) = jobs.last_mut().and_then(|(_, j)| j.last_mut()) else {
            return err(n, "command outside a job");
        };
        if ops.is_empty() {
            *job_instance = instance;
        } else if *job_instance != instance {
            return err(
                n,
                format!("job mixes instances {job_instance} and {instance}"),
            );
        }
        ops.push(op);
    }
    // Every job set as announced, every job with commands, one job per move in order.
    let mut moves = moves.into_iter();
    for ((n, set), count) in jobs.into_iter().zip(announced) {
        if set.len() as u64 != count {
            return err(
                n,
                format!("job set announces {count} jobs, has {}", set.len()),
            );
        }
        let mut out = Vec::new();
        for (n, instance, ops) in set {
            if ops.is_empty() {
                return err(n, "job without commands");
            }
            let Some(mv) = moves.next() else {
                return err(n, "more jobs than moves");
            };
            if mv.instance != instance {
                return err(
                    n,
                    format!(
                        "job of {instance} where move {} is of {}",
                        mv.rank, mv.instance
                    ),
                );
            }
            if apply(&mv.from, &ops).as_ref() != Some(&mv.to) {
                return err(
                    n,
                    format!(
                        "the commands of {instance} do not take it from {} to {}",
                        mv.from, mv.to
                    ),
                );
            }
            out.push(HbalJob {
                instance,
                from: mv.from,
                to: mv.to,
                ops,
                score_after: mv.score,
            });
        }
        plan.jobsets.push(out);
    }
    if let Some(mv) = moves.next() {
        return err(last_line, format!("move {} has no job", mv.rank));
    }
    Ok(plan)
}

/// The longest suffix starting with `.` common to every name (htools' `commonSuffix`).
pub fn common_suffix<'a>(names: impl IntoIterator<Item = &'a str>) -> String {
    let names: Vec<&str> = names.into_iter().collect();
    let Some((first, rest)) = names.split_first() else {
        return String::new();
    };
    first
        .char_indices()
        .filter(|(_, c)| *c == '.')
        .map(|(i, _)| &first[i..])
        .find(|suffix| rest.iter().all(|name| name.ends_with(suffix)))
        .unwrap_or("")
        .to_owned()
}

impl HbalPlan {
    /// The plan with full node and instance names: hbal prints names without the suffix
    /// common to all of them. A name that is neither a known name nor one with the suffix
    /// stripped is an error.
    pub fn resolve(&self, nodes: &[String], instances: &[String]) -> Result<Self, HbalError> {
        let suffix = common_suffix(nodes.iter().chain(instances).map(String::as_str));
        let lookup = |known: &[String], what: &str, alias: &str| -> Result<String, HbalError> {
            let full = format!("{alias}{suffix}");
            if known.contains(&full) {
                Ok(full)
            } else if known.iter().any(|k| k == alias) {
                Ok(alias.to_owned())
            } else {
                err(0, format!("unknown {what} {alias:?}"))
            }
        };
        let node = |alias: &str| lookup(nodes, "node", alias);
        let placement = |p: &Placement| -> Result<Placement, HbalError> {
            Ok(Placement {
                primary: node(&p.primary)?,
                secondary: p.secondary.as_deref().map(node).transpose()?,
            })
        };
        let mut out = self.clone();
        for job in out.jobsets.iter_mut().flatten() {
            job.instance = lookup(instances, "instance", &job.instance)?;
            job.from = placement(&job.from)?;
            job.to = placement(&job.to)?;
            for op in &mut job.ops {
                match op {
                    HbalOp::Migrate { target } | HbalOp::Failover { target } => {
                        if let Some(t) = target {
                            *t = node(t)?;
                        }
                    }
                    HbalOp::ReplaceSecondary { node: n } => *n = node(n)?,
                }
            }
        }
        Ok(out)
    }

    /// The first job set split into the jobs that may go ahead and those left out, each with
    /// why: a job is left out when it touches a node in `blocked` (node → why).
    pub fn first_jobset(&self, blocked: &BTreeMap<String, String>) -> FirstJobset {
        let mut out = FirstJobset::default();
        for job in self.jobsets.first().into_iter().flatten() {
            let why: Vec<String> = job
                .nodes()
                .iter()
                .filter_map(|node| blocked.get(node).map(|why| format!("{node}: {why}")))
                .collect();
            if why.is_empty() {
                out.jobs.push(job.clone());
            } else {
                out.left_out.push((job.clone(), why.join("; ")));
            }
        }
        out
    }
}

/// The first job set of a plan, filtered ([`HbalPlan::first_jobset`]).
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct FirstJobset {
    /// The jobs that may go ahead.
    pub jobs: Vec<HbalJob>,
    /// The jobs left out, each with why.
    pub left_out: Vec<(HbalJob, String)>,
}

/// How to run hbal.
#[derive(Debug, Clone, PartialEq)]
pub struct HbalOptions {
    /// The node group (`-G`).
    pub group: Option<String>,
    /// Minimum score gain of a step (`-g`); the gain is checked only above ten times this
    /// score (`--min-gain-limit`), as maintd did.
    pub min_gain: f64,
    /// Allow moves that copy disks (new DRBD secondaries); otherwise `--no-disk-moves`.
    pub disk_moves: bool,
    /// A file of mond reports (dynamic load) for `--mond=yes --mond-data FILE`, with
    /// `--exit-on-missing-mond-data`: hbal fails rather than silently balance without it.
    pub mond_data: Option<String>,
}

/// The arguments of `hbal` reading the cluster from `data` (an htools text file).
pub fn hbal_args(data: &str, options: &HbalOptions) -> Vec<String> {
    let mut args = vec!["-t".to_owned(), data.to_owned(), "-C".to_owned()];
    if let Some(group) = &options.group {
        args.extend(["-G".to_owned(), group.clone()]);
    }
    if options.min_gain.is_finite() && options.min_gain > 0.0 {
        args.extend([
            "-g".to_owned(),
            format!("{}", options.min_gain),
            "--min-gain-limit".to_owned(),
            format!("{}", options.min_gain * 10.0),
        ]);
    }
    if !options.disk_moves {
        args.push("--no-disk-moves".to_owned());
    }
    if let Some(file) = &options.mond_data {
        args.extend([
            "--mond=yes".to_owned(),
            "--mond-data".to_owned(),
            file.clone(),
            "--exit-on-missing-mond-data".to_owned(),
        ]);
    }
    args
}

#[cfg(test)]
mod tests {
    use super::*;

    const EVAC: &str = include_str!("../tests/data/hbal/hbal-evac.out");

    #[test]
    fn reads_a_plan() {
        let plan = parse(EVAC).unwrap();
        assert_eq!(plan.group.as_deref(), Some("group-01"));
        assert_eq!(plan.initial_score, Some(46.945_392_53));
        assert_eq!(plan.final_score, Some(0.266_067_42));
        assert_eq!(plan.jobsets.len(), 4);
        let first = &plan.jobsets[0][0];
        assert_eq!(first.instance, "inst-p2");
        assert_eq!(first.from.to_string(), "node-E:node-3");
        assert_eq!(first.to.to_string(), "node-1:node-3");
        assert_eq!(
            first.ops,
            [
                HbalOp::Migrate { target: None },
                HbalOp::ReplaceSecondary {
                    node: "node-1".into()
                },
                HbalOp::Migrate { target: None },
            ]
        );
        assert_eq!(
            first.nodes().into_iter().collect::<Vec<_>>(),
            ["node-1", "node-3", "node-E"]
        );
    }

    #[test]
    fn every_deviation_is_an_error() {
        let lines: Vec<&str> = EVAC.lines().collect();
        // Dropping or changing any non-blank line breaks the plan.
        for skip in 0..lines.len() {
            if lines[skip].trim().is_empty() {
                continue;
            }
            let text = lines
                .iter()
                .enumerate()
                .filter(|(i, _)| *i != skip)
                .map(|(_, l)| *l)
                .collect::<Vec<_>>()
                .join("\n");
            assert!(parse(&text).is_err(), "dropping line {} parsed", skip + 1);
        }
        for (i, bad) in [
            (18, "    gnt-instance migrate -f --cleanup inst-p2"),
            (18, "    gnt-instance remove -f inst-p2"),
            (18, "    gnt-instance migrate -f inst-p1"),
            (17, "    echo job 1/2"),
            (16, "  echo jobset 1, 2 jobs"),
            (5, "Initial score: nan"),
            (7, "    1. inst-p2  node-E:node-3 => node-1:node-3  x a=f"),
            (0, "Warning: something new"),
        ] {
            let mut changed = lines.clone();
            changed[i] = bad;
            assert!(parse(&changed.join("\n")).is_err(), "{bad:?} parsed");
        }
        assert!(parse("").is_err());
        assert!(parse(&format!("{EVAC}\nextra")).is_err());
    }

    #[test]
    fn resolves_common_suffix() {
        assert_eq!(common_suffix(["a.x.org", "b.x.org", "c.y.x.org"]), ".x.org");
        assert_eq!(common_suffix(["a.x.org", "b"]), "");
        assert_eq!(common_suffix([]), "");
        let plan = parse(include_str!("../tests/data/hbal/suffix.out")).unwrap();
        let nodes: Vec<String> = ["node-1", "node-2", "node-3", "node-E"]
            .iter()
            .map(|n| format!("{n}.dom.example"))
            .collect();
        let instances: Vec<String> = [
            "inst-p1", "inst-p2", "inst-s1", "inst-32a", "inst-s2", "inst-s3",
        ]
        .iter()
        .map(|n| format!("{n}.dom.example"))
        .collect();
        let full = plan.resolve(&nodes, &instances).unwrap();
        assert_eq!(full.jobsets[0][0].instance, "inst-p2.dom.example");
        assert_eq!(full.jobsets[0][0].to.primary, "node-1.dom.example");
        assert!(plan.resolve(&nodes[..2], &instances).is_err());
    }

    #[test]
    fn first_jobset_leaves_out_blocked_nodes() {
        let plan = parse(include_str!("../tests/data/hbal/shared-n1-restriction.out")).unwrap();
        let blocked = BTreeMap::from([("nodeC".to_owned(), "incident x".to_owned())]);
        let first = plan.first_jobset(&blocked);
        assert_eq!(first.jobs.len(), 1);
        assert_eq!(first.jobs[0].instance, "instB1");
        assert_eq!(first.left_out.len(), 1);
        assert_eq!(first.left_out[0].1, "nodeC: incident x");
    }

    proptest::proptest! {
        /// Any text, and any line of a real output replaced by any text, reads as a plan or an
        /// error, never a panic.
        #[test]
        fn never_panics(text in ".{0,400}", line in 0usize..40, junk in ".{0,80}") {
            let _ignored = parse(&text);
            let mut lines: Vec<&str> = EVAC.lines().collect();
            let at = line % lines.len();
            lines[at] = &junk;
            let _ignored = parse(&lines.join("\n"));
        }
    }

    #[test]
    fn arguments() {
        let options = HbalOptions {
            group: Some("g1".into()),
            min_gain: 0.01,
            disk_moves: false,
            mond_data: None,
        };
        assert_eq!(
            hbal_args("/dev/stdin", &options).join(" "),
            "-t /dev/stdin -C -G g1 -g 0.01 --min-gain-limit 0.1 --no-disk-moves"
        );
        let options = HbalOptions {
            mond_data: Some("/tmp/load.json".into()),
            ..options
        };
        assert_eq!(
            hbal_args("/dev/stdin", &options).join(" "),
            "-t /dev/stdin -C -G g1 -g 0.01 --min-gain-limit 0.1 --no-disk-moves \
             --mond=yes --mond-data /tmp/load.json --exit-on-missing-mond-data"
        );
    }
}
