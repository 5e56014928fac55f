//! `nodecare-agent script check FILE`: tells a diagnose script's author, in plain words, what the
//! agent would make of the script.
//!
//! The script runs a few times exactly as a diagnose round runs it
//! ([`nodecare_collectors::diagnose::check_script`]: the whitelist's checked descriptor in the one
//! executor, as root, empty environment but the fixed `PATH`, time limit, stdout cap), from a
//! private root-owned copy so that every problem shows at once, even when the file itself would
//! be refused. The report has four parts: whitelist problems (name, file type, owner, mode,
//! location), each run's verdict, output problems (not one JSON object, an unknown status,
//! `live-repair` without `command`, fingerprint pointers that name nothing), and instability
//! (fingerprinted fields that change between runs while nothing changed).
//!
//! Everything but [`check_script`] is pure and tested on its own.

use std::collections::BTreeSet;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use nodecare_collectors::diagnose::{self, DiagnoseConfig, ScriptCheckError};
use nodecare_collectors::runner::{ExecError, ExecLimits, ExecOutput, Runner};
use nodecare_collectors::whitelist::{ALLOWED_MODE, Owner, Whitelist, is_valid_name};
use nodecare_protocol::verdict::VerdictError;
use nodecare_protocol::{DiagnoseStatus, ScriptVerdict};
use serde_json::Value;

/// Default number of runs.
pub const DEFAULT_RUNS: u32 = 3;
/// Pause between two runs.
pub const PAUSE_BETWEEN_RUNS: Duration = Duration::from_secs(1);

/// How much a finding matters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Severity {
    /// The agent would refuse the script, report `unknown`, or open needless incidents.
    Problem,
    /// Worth knowing; does not fail the check.
    Note,
}

/// One thing the check found.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Finding {
    /// Problem or note.
    pub severity: Severity,
    /// What, in plain words, and what to do.
    pub text: String,
}

impl Finding {
    fn problem(text: impl Into<String>) -> Self {
        Self {
            severity: Severity::Problem,
            text: text.into(),
        }
    }

    fn note(text: impl Into<String>) -> Self {
        Self {
            severity: Severity::Note,
            text: text.into(),
        }
    }
}

/// What the whitelist looks at, for a file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileFacts {
    /// The file name.
    pub name: String,
    /// Whether the path is a symbolic link.
    pub is_symlink: bool,
    /// Whether the path (not followed) is a regular file.
    pub is_regular: bool,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
    /// Permission bits (`0o7777`).
    pub mode: u32,
}

/// What the whitelist looks at, for the directory holding the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirFacts {
    /// Whether it is the agent's diagnose directory.
    pub is_diagnose_dir: bool,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
    /// Permission bits (`0o7777`).
    pub mode: u32,
}

fn owner_mode_problems(what: &str, uid: u32, gid: u32, mode: u32, fix: &str) -> Vec<Finding> {
    let mut found = Vec::new();
    if uid != 0 || gid != 0 {
        found.push(Finding::problem(format!(
            "{what} is owned by {uid}:{gid}; the agent runs only root:root files in root:root \
             directories (chown root:root {fix})"
        )));
    }
    if mode & !ALLOWED_MODE != 0 {
        found.push(Finding::problem(format!(
            "{what} has mode {mode:04o}, with bits outside {ALLOWED_MODE:04o} ({:04o}: group or \
             world write, setuid, setgid or sticky); the agent refuses it (chmod 0755 {fix})",
            mode & !ALLOWED_MODE
        )));
    }
    found
}

/// Every whitelist rule the file and its directory break, and where the file is. Pure.
pub fn whitelist_findings(file: &FileFacts, dir: &DirFacts, diagnose_dir: &Path) -> Vec<Finding> {
    let mut found = Vec::new();
    if !is_valid_name(&file.name) {
        found.push(Finding::problem(format!(
            "the name {:?} is refused: only letters, digits, '_' and '-' (no suffix such as \
             .sh, no dot files, no editor backups)",
            file.name
        )));
    }
    if file.is_symlink {
        // A link's own owner and mode mean nothing: the agent stops at the link.
        found.push(Finding::problem(
            "it is a symbolic link; the agent refuses links (copy the script instead)",
        ));
    } else {
        if !file.is_regular {
            found.push(Finding::problem("it is not a regular file"));
        }
        found.extend(owner_mode_problems(
            "the file", file.uid, file.gid, file.mode, "FILE",
        ));
        if file.mode & 0o100 == 0 {
            found.push(Finding::problem(format!(
                "mode {:04o} is not executable by its owner (chmod 0755 FILE)",
                file.mode
            )));
        }
    }
    if dir.is_diagnose_dir {
        found.extend(owner_mode_problems(
            "its directory",
            dir.uid,
            dir.gid,
            dir.mode,
            "DIR",
        ));
    } else {
        found.push(Finding::note(format!(
            "it is not in the diagnose directory {}; the agent runs only scripts there \
             (install -o root -g root -m 0755 FILE {}/NAME)",
            diagnose_dir.display(),
            diagnose_dir.display()
        )));
    }
    found
}

/// One run, examined.
#[derive(Debug, Clone, PartialEq)]
pub struct Examined {
    /// The verdict the agent would take from this run (`unknown` with a reason when none).
    pub verdict: ScriptVerdict,
    /// The printed object, when it is a valid verdict.
    pub output: Option<Value>,
    /// What is wrong or worth knowing.
    pub findings: Vec<Finding>,
}

fn stderr_tail(stderr: &[u8]) -> String {
    let text = String::from_utf8_lossy(stderr);
    let text = text.trim();
    if text.is_empty() {
        String::new()
    } else {
        let mut short: String = text.chars().take(300).collect();
        if short.len() < text.len() {
            short.push_str(" ...");
        }
        format!(" (stderr: {short})")
    }
}

fn parse_problem(error: &VerdictError) -> String {
    match error {
        VerdictError::Empty => "it printed nothing on stdout; print one JSON object, such as \
                                {\"status\": \"Ok\"}"
            .into(),
        VerdictError::InvalidUtf8(offset) => {
            format!("stdout is not UTF-8 (invalid byte at offset {offset})")
        }
        VerdictError::InvalidJson(reason) if reason.contains("trailing characters") => {
            "stdout is not one JSON object: more follows the first value; print exactly one \
             object and send everything else (logs, progress) to stderr"
                .into()
        }
        VerdictError::InvalidJson(reason) => format!(
            "stdout is not one JSON object ({reason}); print exactly one object and send \
             everything else to stderr"
        ),
        VerdictError::NotAnObject(kind) => {
            format!("stdout is {kind}, not a JSON object such as {{\"status\": \"Ok\"}}")
        }
        VerdictError::BadStatus(got) => format!(
            "unknown status {got}: a script's status is one of \"Ok\", \"live-repair\", \
             \"evacuate\", \"evacuate-failover\" (spelled exactly so; the agent itself says \
             \"unknown\" when a script gives no verdict)"
        ),
        other => other.to_string(),
    }
}

const VERDICT_FIELDS: [&str; 4] = ["status", "command", "details", "fingerprint"];

/// What the agent makes of one run, and what is wrong with it. Pure.
pub fn examine_run(result: &Result<ExecOutput, ExecError>) -> Examined {
    let unknown = |text: String| Examined {
        verdict: ScriptVerdict::unknown(text.clone()),
        output: None,
        findings: vec![Finding::problem(text)],
    };
    let output = match result {
        Err(ExecError::Timeout { timeout, .. }) => {
            return unknown(format!(
                "it did not finish within {} s; the agent kills it and reports unknown (finish \
                 well within the time limit: give each tool its own shorter timeout)",
                timeout.as_secs_f64()
            ));
        }
        Err(ExecError::StdoutOverflow { cap, .. }) => {
            return unknown(format!(
                "it wrote more than {cap} bytes to stdout; the agent kills it and reports unknown \
                 (keep the verdict small; write logs to stderr)"
            ));
        }
        Err(ExecError::Spawn { reason, .. }) => {
            return unknown(format!(
                "it cannot be started: {reason} (does its #! line name an interpreter that \
                 exists on the node, such as #!/bin/sh or #!/usr/bin/python3?)"
            ));
        }
        Err(error @ ExecError::Io { .. }) => return unknown(error.to_string()),
        Ok(output) => output,
    };
    if !output.status.success() {
        return unknown(format!(
            "it ended with {}{}; the agent reports unknown, which is right only when the \
             script cannot judge the hardware (a tool missing or failing)",
            output.status,
            stderr_tail(&output.stderr)
        ));
    }
    let verdict = match ScriptVerdict::parse(&output.stdout) {
        Ok(verdict) => verdict,
        Err(error) => return unknown(parse_problem(&error)),
    };
    let mut findings = Vec::new();
    let printed: Value = serde_json::from_slice(&output.stdout).unwrap_or(Value::Null);
    if verdict.status == DiagnoseStatus::LiveRepair && verdict.command.is_none() {
        findings.push(Finding::problem(
            "status \"live-repair\" without a \"command\": the coordinator cannot repair \
             without one and fails the incident; name the repair command (a file in \
             /etc/ganeti/node-repair-commands/)",
        ));
    }
    if verdict.command.is_some() && verdict.status != DiagnoseStatus::LiveRepair {
        findings.push(Finding::note(format!(
            "\"command\" is used only with status \"live-repair\"; with \"{}\" it is ignored",
            verdict.status
        )));
    }
    let identity_source = verdict_fields(&verdict);
    for pointer in verdict.fingerprint.iter().flatten() {
        if identity_source.pointer(pointer).is_none() {
            findings.push(Finding::problem(format!(
                "the fingerprint names {pointer:?}, which is not in the output; every pointer \
                 must name a field of status, command or details (e.g. \"/details/disk\")"
            )));
        }
    }
    if let Value::Object(object) = &printed {
        for key in object.keys() {
            if !VERDICT_FIELDS.contains(&key.as_str()) {
                findings.push(Finding::note(format!(
                    "the field {key:?} is not part of a verdict; the agent drops it (put it under \
                     \"details\")"
                )));
            }
        }
    }
    Examined {
        output: Some(identity_source),
        verdict,
        findings,
    }
}

/// The fields a fingerprint pointer may name: status, command and details.
fn verdict_fields(verdict: &ScriptVerdict) -> Value {
    let mut whole = serde_json::Map::new();
    whole.insert("status".into(), Value::from(verdict.status.as_str()));
    if let Some(command) = &verdict.command {
        whole.insert("command".into(), Value::from(command.as_str()));
    }
    whole.insert("details".into(), verdict.details.clone());
    Value::Object(whole)
}

fn escape_pointer_token(token: &str) -> String {
    token.replace('~', "~0").replace('/', "~1")
}

/// JSON pointers of the leaves that differ between `a` and `b` (an added or removed field, an
/// array that changed length, or a scalar that changed). Pure.
pub fn changed_pointers(a: &Value, b: &Value) -> Vec<String> {
    fn walk(a: &Value, b: &Value, at: &str, out: &mut Vec<String>) {
        match (a, b) {
            (Value::Object(left), Value::Object(right)) => {
                let keys: BTreeSet<&String> = left.keys().chain(right.keys()).collect();
                for key in keys {
                    let here = format!("{at}/{}", escape_pointer_token(key));
                    match (left.get(key.as_str()), right.get(key.as_str())) {
                        (Some(x), Some(y)) => walk(x, y, &here, out),
                        _ => out.push(here),
                    }
                }
            }
            (Value::Array(left), Value::Array(right)) if left.len() == right.len() => {
                for (index, (x, y)) in left.iter().zip(right).enumerate() {
                    walk(x, y, &format!("{at}/{index}"), out);
                }
            }
            _ if a != b => out.push(at.to_owned()),
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk(a, b, "", &mut out);
    out
}

fn covered_by(pointer: &str, fingerprint: Option<&Vec<String>>) -> bool {
    match fingerprint {
        None => true,
        Some(pointers) => pointers.iter().any(|listed| {
            listed.is_empty()
                || pointer == listed
                || pointer
                    .strip_prefix(listed.as_str())
                    .is_some_and(|rest| rest.starts_with('/'))
                || listed
                    .strip_prefix(pointer)
                    .is_some_and(|rest| rest.starts_with('/'))
        }),
    }
}

/// Fields that change between runs while nothing changed: a problem when they are part of the
/// verdict's identity (the fingerprint, or everything without one), a note otherwise. Pure.
pub fn instability(runs: &[&Examined]) -> Vec<Finding> {
    let valid: Vec<(usize, &Examined, &Value)> = runs
        .iter()
        .enumerate()
        .filter_map(|(index, run)| run.output.as_ref().map(|output| (index + 1, *run, output)))
        .collect();
    if valid.len() < 2 {
        return vec![Finding::note(
            "not judged: fewer than two runs gave a verdict",
        )];
    }
    let mut found = BTreeSet::new();
    for pair in valid.windows(2) {
        let [
            (first_run, first, first_output),
            (second_run, second, second_output),
        ] = pair
        else {
            continue;
        };
        if first.verdict.status != second.verdict.status {
            found.insert(Finding::problem(format!(
                "the status changes between runs ({} in run {first_run}, {} in run \
                 {second_run}) while nothing changed; every change of verdict opens an incident",
                first.verdict.status, second.verdict.status
            )));
            continue;
        }
        let fingerprint = second.verdict.fingerprint.as_ref();
        for pointer in changed_pointers(first_output, second_output) {
            if covered_by(&pointer, fingerprint) {
                let hint = if fingerprint.is_none() {
                    " (the verdict has no \"fingerprint\", so every field counts: list only the \
                     fields that identify the hardware state, e.g. \"fingerprint\": \
                     [\"/details/failing\"])"
                } else {
                    ""
                };
                found.insert(Finding::problem(format!(
                    "field {pointer} changes between runs; leave it out of the fingerprint{hint}"
                )));
            } else {
                found.insert(Finding::note(format!(
                    "field {pointer} changes between runs (left out of the fingerprint: fine)"
                )));
            }
        }
    }
    found.into_iter().collect()
}

/// The whole check's outcome.
#[derive(Debug, Clone, PartialEq)]
pub struct Report {
    /// The file checked, as given.
    pub file: String,
    /// How the runs were made, for the heading.
    pub sandbox: String,
    /// Whitelist findings.
    pub whitelist: Vec<Finding>,
    /// Every run, examined.
    pub runs: Vec<Examined>,
    /// Why the script was not run at all (then `runs` is empty).
    pub not_run: Option<String>,
}

impl Report {
    /// Output findings of all runs, each once.
    pub fn output_findings(&self) -> Vec<Finding> {
        let mut seen = BTreeSet::new();
        self.runs
            .iter()
            .flat_map(|run| run.findings.iter())
            .filter(|finding| seen.insert((*finding).clone()))
            .cloned()
            .collect()
    }

    /// Stability findings.
    pub fn stability_findings(&self) -> Vec<Finding> {
        if self.runs.is_empty() {
            return Vec::new();
        }
        instability(&self.runs.iter().collect::<Vec<_>>())
    }

    /// The number of problems.
    pub fn problems(&self) -> usize {
        self.whitelist
            .iter()
            .chain(&self.output_findings())
            .chain(&self.stability_findings())
            .filter(|finding| finding.severity == Severity::Problem)
            .count()
            + usize::from(self.runs.is_empty())
    }

    /// Whether the script passes: no problem at all.
    pub fn passed(&self) -> bool {
        self.problems() == 0
    }

    /// The report in plain words.
    pub fn render(&self) -> String {
        fn section(lines: &mut Vec<String>, title: &str, findings: &[Finding]) {
            lines.push(String::new());
            lines.push(title.to_owned());
            if findings.is_empty() {
                lines.push("  ok".to_owned());
            }
            for finding in findings {
                let label = match finding.severity {
                    Severity::Problem => "PROBLEM",
                    Severity::Note => "note",
                };
                lines.push(format!("  {label}: {}", finding.text));
            }
        }
        let mut lines = vec![
            format!("Checking {} as a diagnose script", self.file),
            format!("({})", self.sandbox),
        ];
        section(&mut lines, "Whitelist", &self.whitelist);
        lines.push(String::new());
        lines.push("Runs".to_owned());
        if self.runs.is_empty() {
            lines.push(format!(
                "  PROBLEM: not run: {}",
                self.not_run
                    .as_deref()
                    .unwrap_or("it is not a regular file")
            ));
        }
        for (index, run) in self.runs.iter().enumerate() {
            lines.push(format!("  run {}: {}", index + 1, run.verdict.status));
        }
        if let Some(run) = self.runs.iter().find(|run| run.output.is_some()) {
            let mut shown = run.output.clone().unwrap_or_default();
            if let (Value::Object(object), Some(fingerprint)) =
                (&mut shown, &run.verdict.fingerprint)
            {
                object.insert("fingerprint".into(), Value::from(fingerprint.clone()));
            }
            let text = serde_json::to_string(&shown).unwrap_or_default();
            lines.push(format!("  verdict: {text}"));
        }
        section(&mut lines, "Output", &self.output_findings());
        section(&mut lines, "Stability", &self.stability_findings());
        lines.push(String::new());
        let problems = self.problems();
        if problems == 0 {
            lines.push("Result: PASS".to_owned());
        } else {
            let plural = if problems == 1 { "" } else { "s" };
            lines.push(format!("Result: FAIL ({problems} problem{plural})"));
        }
        let mut text = lines.join("\n");
        text.push('\n');
        text
    }
}

/// Why the check could not be made at all.
#[derive(Debug, thiserror::Error)]
pub enum CheckError {
    /// Scripts run as root in the agent; so must the check.
    #[error("script check runs the script as the agent does, as root; run it as root")]
    NotRoot,
    /// The file cannot be examined.
    #[error("cannot examine {path}: {reason}")]
    File {
        /// The file.
        path: String,
        /// What went wrong.
        reason: String,
    },
    /// The private copy cannot be made.
    #[error("cannot prepare the sandbox copy: {0}")]
    Sandbox(String),
}

fn facts_of(path: &Path) -> Result<(FileFacts, std::fs::Metadata), CheckError> {
    let file_error = |error: std::io::Error| CheckError::File {
        path: path.display().to_string(),
        reason: error.to_string(),
    };
    let metadata = std::fs::symlink_metadata(path).map_err(file_error)?;
    let name = path
        .file_name()
        .map(|name| name.to_string_lossy().into_owned())
        .unwrap_or_default();
    Ok((
        FileFacts {
            name,
            is_symlink: metadata.file_type().is_symlink(),
            is_regular: metadata.file_type().is_file(),
            uid: metadata.uid(),
            gid: metadata.gid(),
            mode: metadata.permissions().mode() & 0o7777,
        },
        metadata,
    ))
}

fn dir_facts(path: &Path, diagnose_dir: &Path) -> DirFacts {
    let parent = path
        .parent()
        .filter(|parent| !parent.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let canonical = |dir: &Path| std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
    let metadata = std::fs::metadata(parent).ok();
    DirFacts {
        is_diagnose_dir: canonical(parent) == canonical(diagnose_dir),
        uid: metadata.as_ref().map_or(u32::MAX, MetadataExt::uid),
        gid: metadata.as_ref().map_or(u32::MAX, MetadataExt::gid),
        mode: metadata
            .as_ref()
            .map_or(0, |metadata| metadata.permissions().mode() & 0o7777),
    }
}

/// The largest script `script check` copies and runs.
pub const MAX_SCRIPT_BYTES: u64 = 1024 * 1024;

/// Why a file is not run by `script check`, pure: only a regular file (never a link), owned by
/// root, writable by root alone and at most [`MAX_SCRIPT_BYTES`] long is run, as root. The file
/// rules are the whitelist's; its name and location may still be wrong (reported, not refused).
pub fn refuse_to_run(facts: &FileFacts, len: u64) -> Option<String> {
    if facts.is_symlink {
        return Some("it is a symbolic link, which is never followed".into());
    }
    if !facts.is_regular {
        return Some("it is not a regular file".into());
    }
    if facts.uid != 0 || facts.mode & !0o755 != 0 {
        return Some(format!(
            "it runs as root, so only a file owned by root and writable by root alone is run (owner uid {}, mode {:04o})",
            facts.uid, facts.mode
        ));
    }
    if len > MAX_SCRIPT_BYTES {
        return Some(format!(
            "it is {len} bytes long, more than the {MAX_SCRIPT_BYTES} bytes checked"
        ));
    }
    None
}

/// Reads a regular file without following a link, at most [`MAX_SCRIPT_BYTES`].
fn read_regular(path: &Path) -> Result<Vec<u8>, CheckError> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let file_error = |reason: String| CheckError::File {
        path: path.display().to_string(),
        reason,
    };
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
        .map_err(|error| file_error(error.to_string()))?;
    let metadata = file
        .metadata()
        .map_err(|error| file_error(error.to_string()))?;
    if !metadata.file_type().is_file() {
        return Err(file_error("not a regular file".into()));
    }
    let mut content = Vec::new();
    file.take(MAX_SCRIPT_BYTES + 1)
        .read_to_end(&mut content)
        .map_err(|error| file_error(error.to_string()))?;
    if content.len() as u64 > MAX_SCRIPT_BYTES {
        return Err(file_error(format!(
            "longer than the {MAX_SCRIPT_BYTES} bytes checked"
        )));
    }
    Ok(content)
}

/// A root-owned private whitelist directory holding a 0755 root:root copy of the script.
fn sandbox_copy(path: &Path, name: &str) -> Result<(tempfile::TempDir, PathBuf), CheckError> {
    let sandbox = |error: std::io::Error| CheckError::Sandbox(error.to_string());
    let dir = tempfile::Builder::new()
        .prefix("nodecare-script-check-")
        .tempdir()
        .map_err(sandbox)?;
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755))
        .map_err(sandbox)?;
    std::os::unix::fs::chown(dir.path(), Some(0), Some(0)).map_err(sandbox)?;
    let copy = dir.path().join(name);
    let content = read_regular(path)?;
    std::fs::write(&copy, content).map_err(sandbox)?;
    std::fs::set_permissions(&copy, std::fs::Permissions::from_mode(0o755)).map_err(sandbox)?;
    std::os::unix::fs::chown(&copy, Some(0), Some(0)).map_err(sandbox)?;
    Ok((dir, copy))
}

/// Checks `path` as a diagnose script: whitelist rules against `diagnose_dir`, then `runs` runs
/// in the agent's sandbox with `limits`, [`PAUSE_BETWEEN_RUNS`] apart.
pub async fn check_script(
    path: &Path,
    diagnose_dir: &Path,
    limits: ExecLimits,
    runs: u32,
) -> Result<Report, CheckError> {
    if !nix::unistd::geteuid().is_root() {
        return Err(CheckError::NotRoot);
    }
    let (facts, metadata) = facts_of(path)?;
    let dir = dir_facts(path, diagnose_dir);
    let mut whitelist = whitelist_findings(&facts, &dir, diagnose_dir);
    // In place, the agent's own whitelist has the last word (it also checks, for instance,
    // every directory on the path from /).
    if dir.is_diagnose_dir
        && !whitelist
            .iter()
            .any(|finding| finding.severity == Severity::Problem)
        && let Err(error) = Whitelist::new(diagnose_dir).open(&facts.name)
    {
        whitelist.push(Finding::problem(format!("the agent refuses it: {error}")));
    }
    let mut report = Report {
        file: path.display().to_string(),
        sandbox: format!(
            "{runs} run{} as root, empty environment but PATH, {} s limit, {}-byte stdout cap",
            if runs == 1 { "" } else { "s" },
            limits.timeout.as_secs_f64(),
            limits.stdout_cap
        ),
        whitelist,
        runs: Vec::new(),
        not_run: None,
    };
    if let Some(reason) = refuse_to_run(&facts, metadata.len()) {
        report.not_run = Some(reason);
        return Ok(report);
    }
    let name = if is_valid_name(&facts.name) {
        facts.name.clone()
    } else {
        "script".to_owned()
    };
    let (dir, _copy) = sandbox_copy(path, &name)?;
    // The copy runs exactly as a diagnose round runs a script: the collector's one-script check.
    let config = DiagnoseConfig {
        dir: dir.path().to_path_buf(),
        owner: Owner::ROOT,
        only: None,
        limits,
        ..DiagnoseConfig::default()
    };
    let runner = Runner::new(1);
    for index in 0..runs.max(1) {
        if index > 0 {
            tokio::time::sleep(PAUSE_BETWEEN_RUNS).await;
        }
        let result = match diagnose::check_script(&config, &name, &runner).await {
            Ok((_, output)) | Err(ScriptCheckError::NoVerdict { output, .. }) => Ok(output),
            Err(ScriptCheckError::Run(error)) => Err(error),
            Err(ScriptCheckError::Refused(error)) => {
                return Err(CheckError::Sandbox(error.to_string()));
            }
        };
        report.runs.push(examine_run(&result));
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;
    use nodecare_collectors::runner::ExitStatus;
    use serde_json::json;

    fn ran(code: i32, stdout: &str, stderr: &str) -> Result<ExecOutput, ExecError> {
        Ok(ExecOutput {
            status: ExitStatus::Code(code),
            stdout: stdout.as_bytes().to_vec(),
            stderr: stderr.as_bytes().to_vec(),
            stderr_truncated: false,
            duration: Duration::from_millis(5),
        })
    }

    fn problems(findings: &[Finding]) -> Vec<&str> {
        findings
            .iter()
            .filter(|finding| finding.severity == Severity::Problem)
            .map(|finding| finding.text.as_str())
            .collect()
    }

    fn good_file() -> FileFacts {
        FileFacts {
            name: "smart-disks".into(),
            is_symlink: false,
            is_regular: true,
            uid: 0,
            gid: 0,
            mode: 0o755,
        }
    }

    const IN_PLACE: DirFacts = DirFacts {
        is_diagnose_dir: true,
        uid: 0,
        gid: 0,
        mode: 0o755,
    };

    #[test]
    fn whitelist_findings_name_every_broken_rule() {
        let dir = Path::new("/etc/ganeti/node-diagnose-commands");
        assert!(whitelist_findings(&good_file(), &IN_PLACE, dir).is_empty());
        let cases: [(FileFacts, &str); 6] = [
            (
                FileFacts {
                    name: "smart.sh".into(),
                    ..good_file()
                },
                "the name \"smart.sh\" is refused",
            ),
            (
                FileFacts {
                    uid: 1000,
                    ..good_file()
                },
                "owned by 1000:0",
            ),
            (
                FileFacts {
                    mode: 0o775,
                    ..good_file()
                },
                "mode 0775, with bits outside 0755 (0020",
            ),
            (
                FileFacts {
                    mode: 0o644,
                    ..good_file()
                },
                "not executable",
            ),
            (
                FileFacts {
                    is_symlink: true,
                    is_regular: false,
                    ..good_file()
                },
                "symbolic link",
            ),
            (
                FileFacts {
                    is_regular: false,
                    ..good_file()
                },
                "not a regular file",
            ),
        ];
        for (facts, expected) in cases {
            let found = whitelist_findings(&facts, &IN_PLACE, dir);
            let found = problems(&found);
            assert_eq!(found.len(), 1, "{facts:?}: {found:?}");
            assert!(found[0].contains(expected), "{found:?} lacks {expected}");
        }
        let open_dir = DirFacts {
            mode: 0o777,
            ..IN_PLACE
        };
        assert!(
            problems(&whitelist_findings(&good_file(), &open_dir, dir))[0]
                .starts_with("its directory has mode 0777")
        );
        let elsewhere = DirFacts {
            is_diagnose_dir: false,
            mode: 0o1777,
            ..IN_PLACE
        };
        let found = whitelist_findings(&good_file(), &elsewhere, dir);
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].severity, Severity::Note);
        assert!(found[0].text.contains("not in the diagnose directory"));
    }

    #[test]
    fn each_output_mistake_is_named() {
        let cases = [
            (ran(0, "", ""), "printed nothing"),
            (ran(0, "OK\n", ""), "not one JSON object"),
            (
                ran(0, "{\"status\":\"Ok\"}\n{\"status\":\"Ok\"}\n", ""),
                "more follows the first value",
            ),
            (ran(0, "[1]", ""), "stdout is an array"),
            (
                ran(0, "{\"status\":\"warning\"}", ""),
                "unknown status \"warning\"",
            ),
            (
                ran(0, "{\"status\":\"unknown\"}", ""),
                "unknown status \"unknown\"",
            ),
            (
                ran(0, "{\"status\":\"live-repair\"}", ""),
                "without a \"command\"",
            ),
            (
                ran(
                    0,
                    "{\"status\":\"Ok\",\"fingerprint\":[\"/details/disk\"]}",
                    "",
                ),
                "names \"/details/disk\", which is not in the output",
            ),
            (
                ran(1, "", "smartctl not found\n"),
                "stderr: smartctl not found",
            ),
            (
                Err(ExecError::Timeout {
                    name: "x".into(),
                    timeout: Duration::from_secs(30),
                    stderr: String::new(),
                }),
                "did not finish within 30 s",
            ),
            (
                Err(ExecError::StdoutOverflow {
                    name: "x".into(),
                    cap: 65536,
                }),
                "more than 65536 bytes",
            ),
        ];
        for (result, expected) in cases {
            let examined = examine_run(&result);
            let found = problems(&examined.findings);
            assert_eq!(found.len(), 1, "{result:?}: {found:?}");
            assert!(found[0].contains(expected), "{found:?} lacks {expected:?}");
        }
        let good = examine_run(&ran(
            0,
            "{\"status\":\"evacuate\",\"details\":{\"disk\":\"sdc\",\"t\":40},\"fingerprint\":[\"/details/disk\"]}",
            "",
        ));
        assert!(good.findings.is_empty(), "{:?}", good.findings);
        assert_eq!(good.verdict.status, DiagnoseStatus::Evacuate);
        let extra = examine_run(&ran(0, "{\"status\":\"Ok\",\"disk\":\"sdc\"}", ""));
        assert_eq!(extra.findings.len(), 1);
        assert_eq!(extra.findings[0].severity, Severity::Note);
    }

    #[test]
    fn changed_pointers_finds_the_leaves() {
        let a = json!({"status": "Ok", "details": {"temp": 40, "disks": ["a", "b"], "x/y": 1}});
        let b = json!({"status": "Ok", "details": {"temp": 41, "disks": ["a", "c"], "x/y": 2, "new": 1}});
        assert_eq!(
            changed_pointers(&a, &b),
            vec![
                "/details/disks/1",
                "/details/new",
                "/details/temp",
                "/details/x~1y"
            ]
        );
        assert!(changed_pointers(&a, &a).is_empty());
        assert_eq!(changed_pointers(&json!([1]), &json!([1, 2])), vec![""]);
    }

    fn run_of(stdout: &str) -> Examined {
        examine_run(&ran(0, stdout, ""))
    }

    #[test]
    fn instability_blames_only_fingerprinted_fields() {
        let first = run_of(r#"{"status":"Ok","details":{"temp":40,"disk":"sda"}}"#);
        let second = run_of(r#"{"status":"Ok","details":{"temp":41,"disk":"sda"}}"#);
        let found = instability(&[&first, &second]);
        assert_eq!(problems(&found).len(), 1);
        assert!(found[0].text.starts_with(
            "field /details/temp changes between runs; leave it out of the fingerprint"
        ));
        assert!(found[0].text.contains("has no \"fingerprint\""));

        let first = run_of(
            r#"{"status":"Ok","details":{"temp":40,"disk":"sda"},"fingerprint":["/details/disk"]}"#,
        );
        let second = run_of(
            r#"{"status":"Ok","details":{"temp":41,"disk":"sda"},"fingerprint":["/details/disk"]}"#,
        );
        let found = instability(&[&first, &second]);
        assert!(problems(&found).is_empty(), "{found:?}");
        assert_eq!(found.len(), 1);
        assert!(found[0].text.contains("left out of the fingerprint: fine"));

        let first = run_of(r#"{"status":"Ok","details":{"temp":40},"fingerprint":["/details"]}"#);
        let second = run_of(r#"{"status":"Ok","details":{"temp":41},"fingerprint":["/details"]}"#);
        assert_eq!(
            problems(&instability(&[&first, &second])),
            vec!["field /details/temp changes between runs; leave it out of the fingerprint"]
        );

        let evacuate = run_of(r#"{"status":"evacuate"}"#);
        let found = instability(&[&first, &evacuate]);
        assert!(
            problems(&found)[0]
                .contains("status changes between runs (Ok in run 1, evacuate in run 2)")
        );

        let failed = examine_run(&ran(1, "", ""));
        let found = instability(&[&first, &failed]);
        assert_eq!(found[0].severity, Severity::Note);
    }

    #[test]
    fn report_passes_only_without_problems() {
        let good = run_of(r#"{"status":"Ok"}"#);
        let report = Report {
            file: "/x/good".into(),
            sandbox: "2 runs".into(),
            whitelist: vec![Finding::note("somewhere else")],
            runs: vec![good.clone(), good.clone()],
            not_run: None,
        };
        assert!(report.passed());
        assert!(report.render().ends_with("Result: PASS\n"));
        let bad = Report {
            runs: vec![good, run_of(r#"{"status":"live-repair"}"#)],
            ..report
        };
        assert!(!bad.passed());
        let text = bad.render();
        assert!(text.contains("Result: FAIL (2 problems)"), "{text}");
    }
}
