//! The self-diagnose collector: runs the whitelisted diagnose executables and merges their
//! verdicts into the node's one verdict.
//!
//! Every executable in the diagnose directory (default [`DEFAULT_DIAGNOSE_DIR`]) runs, or only
//! one when configured (Ganeti's single-command mode). Each run becomes a [`ScriptVerdict`]: the
//! parsed output, or `unknown` with the reason (refused by the whitelist, failed to start, timed
//! out, output too large, non-zero exit, bad output). The verdicts merge with
//! [`NodeVerdict::merge`].
//!
//! [`check_script`] runs one script by name, once, the same way, and returns its verdict or why
//! there is none (for an operator checking a script).
//!
//! Optional hysteresis ([`Hysteresis`]): a changed non-`Ok` verdict is published only after it
//! has been seen in that many consecutive runs (same fingerprint), so that one odd run does not
//! open an incident.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nodecare_protocol::report::ReportKind;
use nodecare_protocol::{DiagnoseStatus, NodeVerdict, ScriptVerdict, now_ms};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::sync::watch;

use crate::runner::{ExecError, ExecLimits, ExecOutput, ExitStatus, Runner};
use crate::whitelist::{Owner, Whitelist, WhitelistError};
use crate::{CollectError, CollectFuture, Collector, CollectorSpec};

/// Ganeti's whitelist directory for diagnose commands.
pub const DEFAULT_DIAGNOSE_DIR: &str = "/etc/ganeti/node-diagnose-commands";
/// Default interval between diagnose runs.
pub const DEFAULT_DIAGNOSE_INTERVAL: Duration = Duration::from_secs(60);
/// The collector's name in mond's API.
pub const DIAGNOSE_NAME: &str = "diagnose";
/// The collector's category in mond's API.
pub const DIAGNOSE_CATEGORY: &str = "node";
/// Key of the verdict that reports a problem with the directory itself. Not a valid script name,
/// so it cannot collide with one.
pub const DIRECTORY_KEY: &str = "(directory)";
/// Key of the verdict published while a new verdict awaits confirmation.
pub const PENDING_KEY: &str = "(pending)";

/// How the diagnose collector runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DiagnoseConfig {
    /// The whitelist directory.
    pub dir: PathBuf,
    /// Required owner of the directory and its files (root:root in production).
    pub owner: Owner,
    /// Run only this executable (Ganeti's single-command mode); `None` runs all of them.
    pub only: Option<String>,
    /// Limits of each run.
    pub limits: ExecLimits,
    /// Interval between runs.
    pub interval: Duration,
    /// Consecutive identical runs needed before a changed non-`Ok` verdict is published.
    pub confirmations: u32,
}

impl Default for DiagnoseConfig {
    fn default() -> Self {
        Self {
            dir: PathBuf::from(DEFAULT_DIAGNOSE_DIR),
            owner: Owner::ROOT,
            only: None,
            limits: ExecLimits::default(),
            interval: DEFAULT_DIAGNOSE_INTERVAL,
            confirmations: 1,
        }
    }
}

/// Turns one run's result into a verdict. Pure.
pub fn verdict_of(result: &Result<ExecOutput, ExecError>) -> ScriptVerdict {
    match result {
        Err(error) => ScriptVerdict::unknown(error.to_string()),
        Ok(output) if !output.status.success() => {
            let stderr = String::from_utf8_lossy(&output.stderr);
            let stderr = stderr.trim();
            if stderr.is_empty() {
                ScriptVerdict::unknown(format!("failed with {}", output.status))
            } else {
                ScriptVerdict::unknown(format!("failed with {}; stderr: {stderr}", output.status))
            }
        }
        Ok(output) => match ScriptVerdict::parse(&output.stdout) {
            Ok(verdict) => verdict,
            Err(error) => ScriptVerdict::unknown(format!("invalid output: {error}")),
        },
    }
}

/// Why [`check_script`] got no verdict from a script.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScriptCheckError {
    /// The whitelist refused the directory or the script; nothing ran.
    #[error(transparent)]
    Refused(#[from] WhitelistError),
    /// It could not start, timed out or overflowed its stdout cap; every process of the run was
    /// killed.
    #[error(transparent)]
    Run(#[from] ExecError),
    /// It ran but exited non-zero or printed no valid verdict. `reason` is what a round records
    /// as the reason of its `unknown` verdict.
    #[error("{name} gave no valid verdict: {reason}")]
    NoVerdict {
        /// The script.
        name: String,
        /// Why, as in the `unknown` verdict.
        reason: String,
        /// The run, for inspection.
        output: ExecOutput,
    },
}

/// Runs the whitelisted diagnose executable `name` of `config.dir` once, exactly as a diagnose
/// round does (same whitelist rules, sandbox and limits), and returns its verdict with the run's
/// output, or why there is none. For operators checking one script (`config.only` is ignored).
pub async fn check_script(
    config: &DiagnoseConfig,
    name: &str,
    runner: &Runner,
) -> Result<(ScriptVerdict, ExecOutput), ScriptCheckError> {
    let whitelist = Whitelist::with_owner(&config.dir, config.owner);
    let executable = whitelist.open(name)?;
    let output = runner.run(&executable, None, &config.limits).await?;
    let parsed = if output.status.success() {
        ScriptVerdict::parse(&output.stdout).ok()
    } else {
        None
    };
    match parsed {
        Some(verdict) => Ok((verdict, output)),
        None => Err(ScriptCheckError::NoVerdict {
            name: name.to_owned(),
            reason: verdict_of(&Ok(output.clone())).reason.unwrap_or_default(),
            output,
        }),
    }
}

/// One run of the diagnose executables, merged.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DiagnoseRun {
    /// The merged verdict of this run.
    pub verdict: NodeVerdict,
    /// When the run finished, Unix milliseconds.
    pub collected_at_ms: u64,
}

/// A verdict `unknown` for `reason`, never `Ok` (e.g. before the first run has finished).
pub fn unknown_verdict(reason: String) -> NodeVerdict {
    let only = BTreeMap::from([(DIRECTORY_KEY.to_owned(), ScriptVerdict::unknown(reason))]);
    NodeVerdict::merge(only).unwrap_or(NodeVerdict {
        status: DiagnoseStatus::Unknown,
        command: None,
        details: BTreeMap::new(),
        fingerprint: String::new(),
    })
}

fn merge_or_unknown(verdicts: BTreeMap<String, ScriptVerdict>) -> NodeVerdict {
    match NodeVerdict::merge(verdicts) {
        Ok(merged) => merged,
        Err(error) => {
            // Every verdict was checked canonical when parsed, so this is not expected; still,
            // never publish Ok on an internal error.
            unknown_verdict(format!("cannot merge verdicts: {error}"))
        }
    }
}

/// How one diagnose executable's run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScriptOutcome {
    /// It exited, or was killed by a signal not sent by the agent.
    Exited(ExitStatus),
    /// It ran past its time limit; its process group was killed.
    TimedOut,
    /// It wrote more than the stdout cap; its process group was killed.
    OutputOverflow,
    /// The whitelist refused it: it did not start.
    Refused,
    /// It could not be started, or its output could not be read.
    Failed,
}

/// One diagnose executable's run, for monitoring.
#[derive(Debug, Clone, PartialEq)]
pub struct ScriptRun {
    /// The executable's name.
    pub name: String,
    /// How the run ended.
    pub outcome: ScriptOutcome,
    /// Wall-clock duration, when it started.
    pub duration: Option<Duration>,
    /// Its verdict status in this run.
    pub status: DiagnoseStatus,
    /// Whether it exited 0 with a valid verdict.
    pub succeeded: bool,
    /// When the run ended, Unix milliseconds.
    pub finished_at_ms: u64,
}

/// One run of the diagnose executables with each executable's run.
#[derive(Debug, Clone, PartialEq)]
pub struct DetailedRun {
    /// The merged run.
    pub run: DiagnoseRun,
    /// Every executable's run, by name.
    pub scripts: Vec<ScriptRun>,
    /// Whether the whitelist refused the directory itself (nothing ran).
    pub directory_refused: bool,
}

fn script_run(
    name: &str,
    result: &Result<ExecOutput, ExecError>,
    verdict: &ScriptVerdict,
    elapsed: Duration,
) -> ScriptRun {
    let (outcome, duration) = match result {
        Ok(output) => (ScriptOutcome::Exited(output.status), Some(output.duration)),
        Err(ExecError::Timeout { .. }) => (ScriptOutcome::TimedOut, Some(elapsed)),
        Err(ExecError::StdoutOverflow { .. }) => (ScriptOutcome::OutputOverflow, Some(elapsed)),
        Err(ExecError::Io { .. }) => (ScriptOutcome::Failed, Some(elapsed)),
        Err(ExecError::Spawn { .. }) => (ScriptOutcome::Failed, None),
    };
    ScriptRun {
        name: name.to_owned(),
        outcome,
        duration,
        status: verdict.status,
        succeeded: matches!(outcome, ScriptOutcome::Exited(status) if status.success())
            && verdict.reason.is_none(),
        finished_at_ms: now_ms(),
    }
}

/// Runs the diagnose executables once and merges their verdicts.
pub async fn run_once(config: &DiagnoseConfig, runner: &Runner) -> DiagnoseRun {
    run_once_detailed(config, runner).await.run
}

/// Runs the diagnose executables once, merges their verdicts and reports each run.
pub async fn run_once_detailed(config: &DiagnoseConfig, runner: &Runner) -> DetailedRun {
    let whitelist = Whitelist::with_owner(&config.dir, config.owner);
    let names = match &config.only {
        Some(name) => vec![name.clone()],
        None => match whitelist.list() {
            Ok(names) => names,
            Err(error) => {
                tracing::warn!(dir = %config.dir.display(), %error, "diagnose directory refused");
                let verdicts = BTreeMap::from([(
                    DIRECTORY_KEY.to_owned(),
                    ScriptVerdict::unknown(error.to_string()),
                )]);
                return DetailedRun {
                    run: DiagnoseRun {
                        verdict: merge_or_unknown(verdicts),
                        collected_at_ms: now_ms(),
                    },
                    scripts: Vec::new(),
                    directory_refused: true,
                };
            }
        },
    };
    let mut tasks = tokio::task::JoinSet::new();
    let mut verdicts = BTreeMap::new();
    let mut scripts = Vec::new();
    for name in names {
        match whitelist.open(&name) {
            Err(error) => {
                log_refusal(&name, &error);
                let verdict = ScriptVerdict::unknown(error.to_string());
                scripts.push(ScriptRun {
                    name: name.clone(),
                    outcome: ScriptOutcome::Refused,
                    duration: None,
                    status: verdict.status,
                    succeeded: false,
                    finished_at_ms: now_ms(),
                });
                verdicts.insert(name, verdict);
            }
            Ok(executable) => {
                let runner = runner.clone();
                let limits = config.limits;
                tasks.spawn(async move {
                    let started = std::time::Instant::now();
                    let result = runner.run(&executable, None, &limits).await;
                    (name, result, started.elapsed())
                });
            }
        }
    }
    while let Some(joined) = tasks.join_next().await {
        let Ok((name, result, elapsed)) = joined else {
            // A panicking run task: its name is lost with it; report it under the directory.
            verdicts.insert(
                DIRECTORY_KEY.to_owned(),
                ScriptVerdict::unknown("a diagnose run task failed"),
            );
            continue;
        };
        let verdict = verdict_of(&result);
        match (&result, &verdict.reason) {
            (Ok(output), None) => tracing::debug!(
                script = %name,
                status = %verdict.status,
                duration_ms = u64::try_from(output.duration.as_millis()).unwrap_or(u64::MAX),
                "diagnose script ran"
            ),
            (_, reason) => tracing::warn!(
                script = %name,
                reason = reason.as_deref().unwrap_or(""),
                "diagnose script gave no valid verdict"
            ),
        }
        scripts.push(script_run(&name, &result, &verdict, elapsed));
        verdicts.insert(name, verdict);
    }
    scripts.sort_by(|a, b| a.name.cmp(&b.name));
    DetailedRun {
        run: DiagnoseRun {
            verdict: merge_or_unknown(verdicts),
            collected_at_ms: now_ms(),
        },
        scripts,
        directory_refused: false,
    }
}

fn log_refusal(name: &str, error: &WhitelistError) {
    tracing::warn!(script = %name, reason = %error, "diagnose script refused by the whitelist");
}

/// Publishes a changed non-`Ok` verdict only after `required` consecutive identical runs.
///
/// "Identical" means the same fingerprint; volatile fields excluded by the scripts' declared
/// fingerprints do not count. A return to `Ok` and a repeat of the published verdict are
/// published at once.
#[derive(Debug, Clone)]
pub struct Hysteresis {
    required: u32,
    published: Option<NodeVerdict>,
    candidate: Option<(String, u32)>,
}

impl Hysteresis {
    /// Requires `required` identical runs (0 and 1 both mean: publish every run).
    pub fn new(required: u32) -> Self {
        Self {
            required: required.max(1),
            published: None,
            candidate: None,
        }
    }

    /// Starts from a verdict published before (e.g. restored after a restart).
    pub fn with_published(required: u32, published: NodeVerdict) -> Self {
        let mut hysteresis = Self::new(required);
        hysteresis.published = Some(published);
        hysteresis
    }

    /// Feeds one run; returns the verdict to publish now.
    pub fn observe(&mut self, fresh: NodeVerdict) -> NodeVerdict {
        let same_as_published = self
            .published
            .as_ref()
            .is_some_and(|published| published.fingerprint == fresh.fingerprint);
        if same_as_published || fresh.status == DiagnoseStatus::Ok || self.required == 1 {
            self.candidate = None;
            self.published = Some(fresh.clone());
            return fresh;
        }
        let count = match &self.candidate {
            Some((fingerprint, count)) if *fingerprint == fresh.fingerprint => count + 1,
            _ => 1,
        };
        if count >= self.required {
            self.candidate = None;
            self.published = Some(fresh.clone());
            return fresh;
        }
        self.candidate = Some((fresh.fingerprint.clone(), count));
        match &self.published {
            Some(published) => published.clone(),
            None => {
                let reason = format!(
                    "verdict {} seen in {count} of {} required consecutive runs",
                    fresh.status, self.required
                );
                merge_or_unknown(BTreeMap::from([(
                    PENDING_KEY.to_owned(),
                    ScriptVerdict::unknown(reason),
                )]))
            }
        }
    }
}

/// A diagnose executable's latest run and its last successful one.
#[derive(Debug, Clone, PartialEq)]
pub struct ScriptStats {
    /// The latest run.
    pub last: ScriptRun,
    /// When it last exited 0 with a valid verdict, Unix milliseconds.
    pub last_success_ms: Option<u64>,
}

/// Counters and per-executable state of the diagnose runs since the agent started.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DiagnoseStats {
    /// Executables of the latest run, by name (executables gone from the directory drop out).
    pub scripts: BTreeMap<String, ScriptStats>,
    /// Executables the whitelist refused, over all runs.
    pub script_refusals_total: u64,
    /// Runs in which the whitelist refused the directory itself.
    pub directory_refusals_total: u64,
    /// Completed runs.
    pub runs_total: u64,
}

impl DiagnoseStats {
    /// Folds one run in. Pure.
    pub fn observe(&mut self, detailed: &DetailedRun) {
        self.runs_total += 1;
        if detailed.directory_refused {
            self.directory_refusals_total += 1;
        }
        let mut scripts = BTreeMap::new();
        for run in &detailed.scripts {
            if run.outcome == ScriptOutcome::Refused {
                self.script_refusals_total += 1;
            }
            let previous = self
                .scripts
                .get(&run.name)
                .and_then(|stats| stats.last_success_ms);
            let last_success_ms = if run.succeeded {
                Some(run.finished_at_ms)
            } else {
                previous
            };
            scripts.insert(
                run.name.clone(),
                ScriptStats {
                    last: run.clone(),
                    last_success_ms,
                },
            );
        }
        self.scripts = scripts;
    }
}

/// The self-diagnose collector (`node`/`diagnose`, kind 1): its report data is the merged
/// verdict. The latest published run is also available typed, for signing.
#[derive(Debug)]
pub struct DiagnoseCollector {
    spec: CollectorSpec,
    config: DiagnoseConfig,
    runner: Runner,
    hysteresis: Mutex<Hysteresis>,
    latest: watch::Sender<Option<Arc<DiagnoseRun>>>,
    stats: Mutex<DiagnoseStats>,
}

impl DiagnoseCollector {
    /// A collector; `restored` is a verdict published before a restart, if any (used as the
    /// hysteresis baseline so a restart does not re-confirm a known verdict).
    pub fn new(config: DiagnoseConfig, runner: Runner, restored: Option<NodeVerdict>) -> Self {
        // Scripts run in parallel up to the runner's limit; allow for a few rounds of timeouts.
        let timeout = config.limits.timeout.saturating_mul(4) + Duration::from_secs(5);
        let spec = CollectorSpec::builtin(
            DIAGNOSE_NAME,
            Some(DIAGNOSE_CATEGORY),
            ReportKind::Status,
            config.interval,
            timeout,
        );
        let hysteresis = match restored {
            Some(verdict) => Hysteresis::with_published(config.confirmations, verdict),
            None => Hysteresis::new(config.confirmations),
        };
        Self {
            spec,
            config,
            runner,
            hysteresis: Mutex::new(hysteresis),
            latest: watch::channel(None).0,
            stats: Mutex::new(DiagnoseStats::default()),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &DiagnoseConfig {
        &self.config
    }

    /// Runs once, applies the hysteresis, publishes and returns the published run.
    pub async fn run_and_publish(&self) -> Arc<DiagnoseRun> {
        let detailed = run_once_detailed(&self.config, &self.runner).await;
        match self.stats.lock() {
            Ok(mut stats) => stats.observe(&detailed),
            Err(poisoned) => poisoned.into_inner().observe(&detailed),
        }
        let run = detailed.run;
        let published = match self.hysteresis.lock() {
            Ok(mut hysteresis) => hysteresis.observe(run.verdict),
            Err(poisoned) => poisoned.into_inner().observe(run.verdict),
        };
        let published = Arc::new(DiagnoseRun {
            verdict: published,
            collected_at_ms: run.collected_at_ms,
        });
        self.latest.send_replace(Some(Arc::clone(&published)));
        published
    }

    /// Per-executable runs and counters since the agent started.
    pub fn stats(&self) -> DiagnoseStats {
        match self.stats.lock() {
            Ok(stats) => stats.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    /// The latest published run (`None` before the first run).
    pub fn latest(&self) -> Option<Arc<DiagnoseRun>> {
        self.latest.borrow().clone()
    }

    /// A receiver notified on every publication.
    pub fn subscribe(&self) -> watch::Receiver<Option<Arc<DiagnoseRun>>> {
        self.latest.subscribe()
    }
}

impl Collector for DiagnoseCollector {
    fn spec(&self) -> &CollectorSpec {
        &self.spec
    }

    fn collect(&self) -> CollectFuture<'_> {
        Box::pin(async move {
            let run = self.run_and_publish().await;
            serde_json::to_value(&run.verdict).map_err(|error| CollectError::Parse {
                source_name: DIAGNOSE_NAME.to_owned(),
                reason: error.to_string(),
            })
        })
    }
}

/// The report data of a verdict (the merged verdict itself).
pub fn verdict_data(verdict: &NodeVerdict) -> Value {
    serde_json::to_value(verdict).unwrap_or(Value::Null)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn output(status: ExitStatus, stdout: &[u8], stderr: &[u8]) -> Result<ExecOutput, ExecError> {
        Ok(ExecOutput {
            status,
            stdout: stdout.to_vec(),
            stderr: stderr.to_vec(),
            stderr_truncated: false,
            duration: Duration::from_millis(1),
        })
    }

    #[test]
    fn verdict_of_each_outcome() {
        let ok = verdict_of(&output(ExitStatus::Code(0), br#"{"status":"Ok"}"#, b""));
        assert_eq!(ok.status, DiagnoseStatus::Ok);

        let cases = [
            (
                output(ExitStatus::Code(3), br#"{"status":"Ok"}"#, b"disk gone\n"),
                "failed with exit code 3; stderr: disk gone",
            ),
            (
                output(ExitStatus::Signal(9), b"", b""),
                "failed with killed by signal 9",
            ),
            (
                output(ExitStatus::Code(0), b"\xff", b""),
                "invalid output: output is not valid UTF-8",
            ),
            (
                output(
                    ExitStatus::Code(0),
                    br#"{"status":"Ok"}{"status":"Ok"}"#,
                    b"",
                ),
                "invalid output: output is not exactly one JSON value",
            ),
            (
                output(ExitStatus::Code(0), b"", b""),
                "invalid output: output is empty",
            ),
            // A repeated key is not read by its last value: the verdict is unknown.
            (
                output(
                    ExitStatus::Code(0),
                    br#"{"status":"evacuate","status":"Ok"}"#,
                    b"",
                ),
                "repeated key \"status\"",
            ),
            (
                Err(ExecError::Timeout {
                    name: "x".into(),
                    timeout: Duration::from_secs(30),
                    stderr: String::new(),
                }),
                "x timed out after 30s",
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
            let verdict = verdict_of(&result);
            assert_eq!(verdict.status, DiagnoseStatus::Unknown);
            let reason = verdict.reason.unwrap_or_default();
            assert!(reason.contains(expected), "{reason:?} lacks {expected:?}");
        }
    }

    fn merged(status: &str, details: &str) -> NodeVerdict {
        let text = format!(r#"{{"status":"{status}","details":"{details}"}}"#);
        let verdict = ScriptVerdict::parse(text.as_bytes()).unwrap();
        NodeVerdict::merge(BTreeMap::from([("s".to_owned(), verdict)])).unwrap()
    }

    #[test]
    fn hysteresis_of_one_publishes_every_run() {
        let mut hysteresis = Hysteresis::new(1);
        assert_eq!(
            hysteresis.observe(merged("evacuate", "a")),
            merged("evacuate", "a")
        );
        assert_eq!(hysteresis.observe(merged("Ok", "")), merged("Ok", ""));
    }

    #[test]
    fn hysteresis_confirms_changed_non_ok_verdicts() {
        let ok = merged("Ok", "");
        let bad = merged("evacuate", "sda");
        let other = merged("evacuate", "sdb");
        let mut hysteresis = Hysteresis::new(3);
        assert_eq!(hysteresis.observe(ok.clone()), ok);
        assert_eq!(hysteresis.observe(bad.clone()), ok);
        assert_eq!(hysteresis.observe(bad.clone()), ok);
        // An interruption restarts the count.
        assert_eq!(hysteresis.observe(other.clone()), ok);
        assert_eq!(hysteresis.observe(bad.clone()), ok);
        assert_eq!(hysteresis.observe(bad.clone()), ok);
        assert_eq!(hysteresis.observe(bad.clone()), bad);
        // The published verdict repeats at once; Ok returns at once.
        assert_eq!(hysteresis.observe(bad.clone()), bad);
        assert_eq!(hysteresis.observe(ok.clone()), ok);
    }

    #[test]
    fn hysteresis_before_any_publication_is_pending_unknown() {
        let mut hysteresis = Hysteresis::new(2);
        let pending = hysteresis.observe(merged("evacuate", "sda"));
        assert_eq!(pending.status, DiagnoseStatus::Unknown);
        assert!(pending.details.contains_key(PENDING_KEY));
        assert_eq!(
            hysteresis.observe(merged("evacuate", "sda")).status,
            DiagnoseStatus::Evacuate
        );

        let mut restored = Hysteresis::with_published(2, merged("evacuate", "sda"));
        assert_eq!(
            restored.observe(merged("evacuate", "sda")).status,
            DiagnoseStatus::Evacuate
        );
    }

    fn run_of(name: &str, outcome: ScriptOutcome, succeeded: bool, at: u64) -> ScriptRun {
        ScriptRun {
            name: name.into(),
            outcome,
            duration: Some(Duration::from_millis(5)),
            status: if succeeded {
                DiagnoseStatus::Ok
            } else {
                DiagnoseStatus::Unknown
            },
            succeeded,
            finished_at_ms: at,
        }
    }

    fn detailed(scripts: Vec<ScriptRun>, directory_refused: bool) -> DetailedRun {
        DetailedRun {
            run: DiagnoseRun {
                verdict: merged("Ok", ""),
                collected_at_ms: 0,
            },
            scripts,
            directory_refused,
        }
    }

    #[test]
    fn stats_keep_the_last_success_and_count_refusals() {
        let mut stats = DiagnoseStats::default();
        stats.observe(&detailed(
            vec![
                run_of("a", ScriptOutcome::Exited(ExitStatus::Code(0)), true, 100),
                run_of("b", ScriptOutcome::Refused, false, 100),
            ],
            false,
        ));
        stats.observe(&detailed(
            vec![
                run_of("a", ScriptOutcome::Exited(ExitStatus::Code(3)), false, 200),
                run_of("b", ScriptOutcome::Refused, false, 200),
            ],
            false,
        ));
        assert_eq!(stats.runs_total, 2);
        assert_eq!(stats.script_refusals_total, 2);
        assert_eq!(stats.scripts["a"].last_success_ms, Some(100));
        assert_eq!(
            stats.scripts["a"].last.outcome,
            ScriptOutcome::Exited(ExitStatus::Code(3))
        );
        assert_eq!(stats.scripts["b"].last_success_ms, None);
        // A refused directory runs nothing: the scripts drop out, the refusal is counted.
        stats.observe(&detailed(Vec::new(), true));
        assert!(stats.scripts.is_empty());
        assert_eq!(stats.directory_refusals_total, 1);
    }

    #[test]
    fn script_run_of_each_result() {
        let ok = output(ExitStatus::Code(0), br#"{"status":"Ok"}"#, b"");
        let run = script_run("a", &ok, &verdict_of(&ok), Duration::from_secs(9));
        assert!(run.succeeded);
        assert_eq!(run.duration, Some(Duration::from_millis(1)));
        let bad = output(ExitStatus::Code(0), b"nope", b"");
        assert!(!script_run("a", &bad, &verdict_of(&bad), Duration::ZERO).succeeded);
        let timeout = Err(ExecError::Timeout {
            name: "a".into(),
            timeout: Duration::from_secs(1),
            stderr: String::new(),
        });
        let run = script_run("a", &timeout, &verdict_of(&timeout), Duration::from_secs(1));
        assert_eq!(run.outcome, ScriptOutcome::TimedOut);
        assert_eq!(run.duration, Some(Duration::from_secs(1)));
        let spawn = Err(ExecError::Spawn {
            name: "a".into(),
            reason: "x".into(),
        });
        let run = script_run("a", &spawn, &verdict_of(&spawn), Duration::ZERO);
        assert_eq!((run.outcome, run.duration), (ScriptOutcome::Failed, None));
    }
}
