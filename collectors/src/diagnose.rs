//! The self-diagnose collector: runs the whitelisted diagnose executables and merges their
//! verdicts into the node's one verdict.
//!
//! Every executable in the diagnose directory (default [`DEFAULT_DIAGNOSE_DIR`]) runs, or only
//! one when configured (Ganeti's single-command mode). Each run becomes a [`ScriptVerdict`]: the
//! parsed output, or `unknown` with the reason (refused by the whitelist, failed to start, timed
//! out, output too large, non-zero exit, bad output). The verdicts merge with
//! [`MergedVerdict::merge`].
//!
//! Optional hysteresis ([`Hysteresis`]): a changed non-`Ok` verdict is published only after it
//! has been seen in that many consecutive runs (same fingerprint), so that one odd run does not
//! open an incident.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use nodecare_protocol::report::ReportKind;
use nodecare_protocol::{DiagnoseStatus, MergedVerdict, ScriptVerdict};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::sync::watch;

use crate::runner::{ExecError, ExecLimits, ExecOutput, Runner};
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

/// One run of the diagnose executables, merged.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DiagnoseRun {
    /// The merged verdict of this run.
    pub verdict: MergedVerdict,
    /// When the run finished, Unix milliseconds.
    pub collected_at_ms: u64,
}

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|elapsed| u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

fn merge_or_unknown(verdicts: BTreeMap<String, ScriptVerdict>) -> MergedVerdict {
    match MergedVerdict::merge(verdicts) {
        Ok(merged) => merged,
        Err(error) => {
            // Every verdict was checked canonical when parsed, so this is not expected; still,
            // never publish Ok on an internal error.
            let reason = format!("cannot merge verdicts: {error}");
            let only = BTreeMap::from([(DIRECTORY_KEY.to_owned(), ScriptVerdict::unknown(reason))]);
            MergedVerdict::merge(only).unwrap_or(MergedVerdict {
                status: DiagnoseStatus::Unknown,
                command: None,
                details: BTreeMap::new(),
                fingerprint: String::new(),
            })
        }
    }
}

/// Runs the diagnose executables once and merges their verdicts.
pub async fn run_once(config: &DiagnoseConfig, runner: &Runner) -> DiagnoseRun {
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
                return DiagnoseRun {
                    verdict: merge_or_unknown(verdicts),
                    collected_at_ms: now_ms(),
                };
            }
        },
    };
    let mut tasks = tokio::task::JoinSet::new();
    let mut verdicts = BTreeMap::new();
    for name in names {
        match whitelist.open(&name) {
            Err(error) => {
                log_refusal(&name, &error);
                verdicts.insert(name, ScriptVerdict::unknown(error.to_string()));
            }
            Ok(executable) => {
                let runner = runner.clone();
                let limits = config.limits;
                tasks.spawn(async move {
                    let result = runner.run(&executable, None, &limits).await;
                    (name, result)
                });
            }
        }
    }
    while let Some(joined) = tasks.join_next().await {
        let Ok((name, result)) = joined else {
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
        verdicts.insert(name, verdict);
    }
    DiagnoseRun {
        verdict: merge_or_unknown(verdicts),
        collected_at_ms: now_ms(),
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
    published: Option<MergedVerdict>,
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
    pub fn with_published(required: u32, published: MergedVerdict) -> Self {
        let mut hysteresis = Self::new(required);
        hysteresis.published = Some(published);
        hysteresis
    }

    /// Feeds one run; returns the verdict to publish now.
    pub fn observe(&mut self, fresh: MergedVerdict) -> MergedVerdict {
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

/// The self-diagnose collector (`node`/`diagnose`, kind 1): its report data is the merged
/// verdict. The latest published run is also available typed, for signing.
#[derive(Debug)]
pub struct DiagnoseCollector {
    spec: CollectorSpec,
    config: DiagnoseConfig,
    runner: Runner,
    hysteresis: Mutex<Hysteresis>,
    latest: watch::Sender<Option<Arc<DiagnoseRun>>>,
}

impl DiagnoseCollector {
    /// A collector; `restored` is a verdict published before a restart, if any (used as the
    /// hysteresis baseline so a restart does not re-confirm a known verdict).
    pub fn new(config: DiagnoseConfig, runner: Runner, restored: Option<MergedVerdict>) -> Self {
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
        }
    }

    /// The configuration.
    pub fn config(&self) -> &DiagnoseConfig {
        &self.config
    }

    /// Runs once, applies the hysteresis, publishes and returns the published run.
    pub async fn run_and_publish(&self) -> Arc<DiagnoseRun> {
        let run = run_once(&self.config, &self.runner).await;
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
pub fn verdict_data(verdict: &MergedVerdict) -> Value {
    serde_json::to_value(verdict).unwrap_or(Value::Null)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runner::ExitStatus;

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

    fn merged(status: &str, details: &str) -> MergedVerdict {
        let text = format!(r#"{{"status":"{status}","details":"{details}"}}"#);
        let verdict = ScriptVerdict::parse(text.as_bytes()).unwrap();
        MergedVerdict::merge(BTreeMap::from([("s".to_owned(), verdict)])).unwrap()
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
}
