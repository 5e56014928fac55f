//! Reading every online node's signed diagnose report.
//!
//! Requests run with bounded concurrency and a per-request timeout. A report counts only if its
//! HMAC signature verifies with the cluster key, it speaks for the node it was fetched from, it
//! is fresh, and its sequence number is not below the last one accepted from that node. Anything
//! else is recorded as the node's agent status (visible in `/1/status` and the CLI) and never
//! leads to an action.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use nodecare_protocol::{DiagnoseStatus, KeyRing, NodeVerdict, VerifyPolicy};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::task::JoinSet;

use crate::ganeti::Node;

/// Path of the signed diagnose report on the agent.
pub const SIGNED_DIAGNOSE_PATH: &str = "/1/report/node/diagnose/signed";
/// Default agent URL template (`{ip}`: primary IP, `{name}`: node name).
pub const DEFAULT_AGENT_URL_TEMPLATE: &str = "http://{ip}:1815";
/// Largest report body read, in bytes.
pub const MAX_REPORT_BYTES: usize = 1024 * 1024;

/// How agent URLs are formed.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct AgentUrls {
    /// Base URL template; `{ip}` and `{name}` are replaced.
    pub template: String,
    /// Per-node base URLs that override the template.
    pub overrides: BTreeMap<String, String>,
}

impl AgentUrls {
    /// The agent base URL (no trailing slash) of `node`.
    pub fn base(&self, node: &Node) -> String {
        let base = self.overrides.get(&node.name).cloned().unwrap_or_else(|| {
            let ip = if node.primary_ip.contains(':') {
                format!("[{}]", node.primary_ip)
            } else {
                node.primary_ip.clone()
            };
            self.template
                .replace("{ip}", &ip)
                .replace("{name}", &node.name)
        });
        base.trim_end_matches('/').to_owned()
    }
}

/// A node to scrape.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentTarget {
    /// Node name (the signed envelope must speak for it).
    pub node: String,
    /// Node uuid.
    pub node_uuid: String,
    /// Agent base URL.
    pub base_url: String,
}

/// A verified verdict.
#[derive(Debug, Clone, PartialEq)]
pub struct Observation {
    /// The merged verdict.
    pub verdict: NodeVerdict,
    /// The verdict as JSON (an incident's `original`).
    pub original: Value,
    /// Envelope sequence number.
    pub sequence: u64,
    /// When the agent collected it, Unix ms, if reported.
    pub collected_at: Option<u64>,
}

/// What reading one agent gave.
#[derive(Debug, Clone, PartialEq)]
pub enum AgentOutcome {
    /// A verified, fresh verdict.
    Verified(Observation),
    /// Verified, but the agent marks it stale (it has not diagnosed since its restart): shown,
    /// not acted on.
    Stale(Observation),
    /// No answer (connect error, timeout, HTTP error).
    Unreachable(String),
    /// An answer that does not verify or does not parse.
    Unverifiable(String),
}

/// The result of reading one agent.
#[derive(Debug, Clone, PartialEq)]
pub struct AgentResult {
    /// Node name.
    pub node: String,
    /// Node uuid.
    pub node_uuid: String,
    /// Outcome.
    pub outcome: AgentOutcome,
    /// Time taken.
    pub elapsed: Duration,
}

pub use nodecare_protocol::status::{AgentState, AgentStatus};

impl AgentResult {
    /// The status row for this result; `previous_ok` keeps the last success time.
    pub fn status(&self, now_ms: u64, previous_ok: Option<u64>) -> AgentStatus {
        let (state, observation, error) = match &self.outcome {
            AgentOutcome::Verified(o) => (AgentState::Ok, Some(o), None),
            AgentOutcome::Stale(o) => (AgentState::Stale, Some(o), None),
            AgentOutcome::Unreachable(e) => (AgentState::Unreachable, None, Some(e.clone())),
            AgentOutcome::Unverifiable(e) => (AgentState::Unverifiable, None, Some(e.clone())),
        };
        AgentStatus {
            node: self.node.clone(),
            state,
            verdict: observation.map(|o| o.verdict.status),
            reason: observation.and_then(|o| unknown_reason(&o.verdict)),
            fingerprint: observation.map(|o| o.verdict.fingerprint.clone()),
            sequence: observation.map(|o| o.sequence),
            error,
            checked_at_ms: now_ms,
            last_ok_ms: if observation.is_some() {
                Some(now_ms)
            } else {
                previous_ok
            },
        }
    }
}

/// Why a verdict is `unknown`, from its scripts: `script: reason` for each script whose own
/// verdict is `unknown`, joined by `; `. `None` for any other verdict.
pub fn unknown_reason(verdict: &NodeVerdict) -> Option<String> {
    if verdict.status != DiagnoseStatus::Unknown {
        return None;
    }
    let reasons: Vec<String> = verdict
        .details
        .iter()
        .filter(|(_, script)| script.status == DiagnoseStatus::Unknown)
        .map(|(name, script)| {
            format!(
                "{name}: {}",
                script.reason.as_deref().unwrap_or("no reason given")
            )
        })
        .collect();
    Some(if reasons.is_empty() {
        "no script says why".to_owned()
    } else {
        reasons.join("; ")
    })
}

/// Scraper settings.
#[derive(Debug, Clone)]
pub struct ScrapeSettings {
    /// At most this many requests at once.
    pub concurrency: usize,
    /// Per-request timeout (connect + answer).
    pub timeout: Duration,
    /// Clock-skew tolerance for freshness.
    pub policy: VerifyPolicy,
}

/// Reads agents.
#[derive(Debug, Clone)]
pub struct Scraper {
    client: reqwest::Client,
    ring: Arc<KeyRing>,
    settings: ScrapeSettings,
}

/// The scraper could not be built.
#[derive(Debug, thiserror::Error)]
#[error("cannot build the agent HTTP client: {0}")]
pub struct ScraperError(String);

impl Scraper {
    /// A scraper trusting `ring`.
    pub fn new(ring: KeyRing, settings: ScrapeSettings) -> Result<Self, ScraperError> {
        crate::install_crypto_provider();
        let client = reqwest::Client::builder()
            .timeout(settings.timeout)
            .connect_timeout(settings.timeout)
            // One connection per agent per round: keeping thousands of idle connections
            // open between rounds would cost a file descriptor and buffers each.
            .pool_max_idle_per_host(0)
            .tcp_nodelay(true)
            .no_proxy()
            .build()
            .map_err(|error| ScraperError(error.to_string()))?;
        Ok(Self {
            client,
            ring: Arc::new(ring),
            settings,
        })
    }

    /// The HTTP client (also used for repair requests).
    pub fn client(&self) -> &reqwest::Client {
        &self.client
    }

    /// The trusted keys.
    pub fn ring(&self) -> &KeyRing {
        &self.ring
    }

    /// Reads every target; `sequences` holds the last accepted sequence per node.
    pub async fn scrape(
        &self,
        targets: Vec<AgentTarget>,
        sequences: &BTreeMap<String, u64>,
        now_ms: impl Fn() -> u64 + Send + Sync + Clone + 'static,
    ) -> Vec<AgentResult> {
        // A fixed pool of workers pulls targets from a shared queue: memory stays bounded by
        // the concurrency, not by the number of nodes.
        let total = targets.len();
        let queue = Arc::new(std::sync::Mutex::new(targets.into_iter()));
        let sequences = Arc::new(sequences.clone());
        let mut tasks = JoinSet::new();
        for _ in 0..self.settings.concurrency.clamp(1, total.max(1)) {
            let queue = Arc::clone(&queue);
            let sequences = Arc::clone(&sequences);
            let client = self.client.clone();
            let ring = Arc::clone(&self.ring);
            let policy = self.settings.policy;
            let now_ms = now_ms.clone();
            tasks.spawn(async move {
                let mut done = Vec::new();
                loop {
                    let next = queue.lock().ok().and_then(|mut q| q.next());
                    let Some(target) = next else { break };
                    let min_sequence = sequences.get(&target.node).copied();
                    let started = Instant::now();
                    let outcome = fetch(
                        &client,
                        &ring,
                        policy,
                        &target,
                        min_sequence,
                        now_ms.clone(),
                    )
                    .await;
                    done.push(AgentResult {
                        node: target.node,
                        node_uuid: target.node_uuid,
                        outcome,
                        elapsed: started.elapsed(),
                    });
                }
                done
            });
        }
        let mut results = Vec::with_capacity(total);
        while let Some(joined) = tasks.join_next().await {
            match joined {
                Ok(done) => results.extend(done),
                Err(error) => tracing::error!(%error, "agent scrape task failed"),
            }
        }
        results.sort_by(|a, b| a.node.cmp(&b.node));
        results
    }
}

async fn fetch(
    client: &reqwest::Client,
    ring: &KeyRing,
    policy: VerifyPolicy,
    target: &AgentTarget,
    min_sequence: Option<u64>,
    now_ms: impl Fn() -> u64,
) -> AgentOutcome {
    let url = format!("{}{SIGNED_DIAGNOSE_PATH}", target.base_url);
    let response = match client.get(&url).send().await {
        Ok(response) => response,
        Err(error) => return AgentOutcome::Unreachable(format!("{url}: {}", error_chain(&error))),
    };
    let status = response.status();
    if !status.is_success() {
        let body = response.text().await.unwrap_or_default();
        let body: String = body.chars().take(200).collect();
        return AgentOutcome::Unreachable(format!("{url}: HTTP {status}: {}", body.trim()));
    }
    if response
        .content_length()
        .is_some_and(|length| length > MAX_REPORT_BYTES as u64)
    {
        return AgentOutcome::Unverifiable(format!(
            "{url}: report larger than {MAX_REPORT_BYTES} bytes"
        ));
    }
    let body = match response.bytes().await {
        Ok(body) => body,
        Err(error) => return AgentOutcome::Unreachable(format!("{url}: {}", error_chain(&error))),
    };
    if body.len() > MAX_REPORT_BYTES {
        return AgentOutcome::Unverifiable(format!(
            "{url}: report larger than {MAX_REPORT_BYTES} bytes"
        ));
    }
    verify_report(ring, policy, &target.node, &body, min_sequence, now_ms())
}

/// Verifies a signed report body for `node` and extracts the verdict. Pure.
pub fn verify_report(
    ring: &KeyRing,
    policy: VerifyPolicy,
    node: &str,
    body: &[u8],
    min_sequence: Option<u64>,
    now_ms: u64,
) -> AgentOutcome {
    let envelope = match ring.verify_json(body, now_ms, policy, Some(node), min_sequence) {
        Ok(envelope) => envelope,
        Err(error) => return AgentOutcome::Unverifiable(error.to_string()),
    };
    let (verdict_value, stale, collected_at) = match &envelope.payload {
        Value::Object(map) if map.contains_key("verdict") => (
            map.get("verdict").cloned().unwrap_or(Value::Null),
            map.get("stale").and_then(Value::as_bool).unwrap_or(false),
            map.get("collected_at").and_then(Value::as_u64),
        ),
        // A bare mond report envelope with the verdict as `data`.
        Value::Object(map) if map.contains_key("data") => {
            (map.get("data").cloned().unwrap_or(Value::Null), false, None)
        }
        other => (other.clone(), false, None),
    };
    let verdict: NodeVerdict = match serde_json::from_value(verdict_value.clone()) {
        Ok(verdict) => verdict,
        Err(error) => {
            return AgentOutcome::Unverifiable(format!("signed payload is not a verdict: {error}"));
        }
    };
    if verdict.fingerprint.is_empty() {
        return AgentOutcome::Unverifiable("verdict has an empty fingerprint".into());
    }
    let observation = Observation {
        verdict,
        original: verdict_value,
        sequence: envelope.sequence,
        collected_at,
    };
    if stale {
        AgentOutcome::Stale(observation)
    } else {
        AgentOutcome::Verified(observation)
    }
}

/// An error and its sources on one line.
pub fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use nodecare_protocol::{HmacKey, ScriptVerdict, Signer};
    use serde_json::json;

    const NOW: u64 = 1_800_000_000_000;

    fn key() -> HmacKey {
        HmacKey::new(b"0123456789abcdef0123456789abcdef".to_vec())
    }

    fn verdict(status: &str) -> NodeVerdict {
        let script =
            ScriptVerdict::parse(format!(r#"{{"status":"{status}","details":"d"}}"#).as_bytes())
                .unwrap();
        NodeVerdict::merge([("disk".to_owned(), script)].into_iter().collect()).unwrap()
    }

    fn body(node: &str, sequence: u64, payload: Value) -> Vec<u8> {
        let envelope = Signer::new(key(), node)
            .sign(payload, sequence, NOW, 60_000)
            .unwrap();
        serde_json::to_vec(&envelope).unwrap()
    }

    fn payload(status: &str, stale: bool) -> Value {
        json!({"verdict": verdict(status), "collected_at": NOW, "age_ms": 0, "stale": stale, "interval_ms": 1000})
    }

    /// Issue 11, defect 11: an `unknown` verdict's status row names the failing script and
    /// what went wrong.
    #[test]
    fn unknown_verdict_status_carries_the_scripts_reason() {
        let scripts = [
            (
                "disk".to_owned(),
                ScriptVerdict::unknown("exit code 2: smartctl not found"),
            ),
            (
                "net".to_owned(),
                ScriptVerdict::parse(br#"{"status":"Ok"}"#).unwrap(),
            ),
        ];
        let merged = NodeVerdict::merge(scripts.into_iter().collect()).unwrap();
        let result = AgentResult {
            node: "n1".into(),
            node_uuid: "u1".into(),
            outcome: AgentOutcome::Verified(Observation {
                original: serde_json::to_value(&merged).unwrap(),
                verdict: merged,
                sequence: 1,
                collected_at: None,
            }),
            elapsed: Duration::ZERO,
        };
        let status = result.status(NOW, None);
        assert_eq!(status.verdict, Some(DiagnoseStatus::Unknown));
        assert_eq!(
            status.reason.as_deref(),
            Some("disk: exit code 2: smartctl not found")
        );
        // Other verdicts carry no reason.
        let ok = AgentResult {
            outcome: AgentOutcome::Verified(Observation {
                original: Value::Null,
                verdict: verdict("Ok"),
                sequence: 2,
                collected_at: None,
            }),
            ..result
        };
        assert_eq!(ok.status(NOW, None).reason, None);
    }

    #[test]
    fn verified_report_yields_the_verdict() {
        let ring = KeyRing::single(key());
        let outcome = verify_report(
            &ring,
            VerifyPolicy::default(),
            "n1",
            &body("n1", 5, payload("evacuate", false)),
            Some(5),
            NOW,
        );
        let AgentOutcome::Verified(observation) = outcome else {
            panic!("{outcome:?}")
        };
        assert_eq!(observation.sequence, 5);
        assert_eq!(
            observation.verdict.fingerprint,
            verdict("evacuate").fingerprint
        );
        assert_eq!(observation.original["status"], "evacuate");
    }

    #[test]
    fn bad_reports_are_unverifiable_never_verdicts() {
        let ring = KeyRing::single(key());
        let policy = VerifyPolicy::default();
        let good = body("n1", 5, payload("evacuate", false));
        // Replay: sequence below the last accepted.
        assert!(matches!(
            verify_report(&ring, policy, "n1", &good, Some(6), NOW),
            AgentOutcome::Unverifiable(_)
        ));
        // Speaks for another node.
        assert!(matches!(
            verify_report(&ring, policy, "n2", &good, None, NOW),
            AgentOutcome::Unverifiable(_)
        ));
        // Wrong key.
        let other = KeyRing::single(HmacKey::new(b"another".to_vec()));
        assert!(matches!(
            verify_report(&other, policy, "n1", &good, None, NOW),
            AgentOutcome::Unverifiable(_)
        ));
        // Tampered.
        let mut tampered: Value = serde_json::from_slice(&good).unwrap();
        tampered["payload"]["verdict"]["status"] = json!("Ok");
        let tampered = serde_json::to_vec(&tampered).unwrap();
        assert!(matches!(
            verify_report(&ring, policy, "n1", &tampered, None, NOW),
            AgentOutcome::Unverifiable(_)
        ));
        // Expired.
        assert!(matches!(
            verify_report(&ring, policy, "n1", &good, None, NOW + 3_600_000),
            AgentOutcome::Unverifiable(_)
        ));
        // Signed but not a verdict.
        let junk = body("n1", 1, json!({"verdict": 3}));
        assert!(matches!(
            verify_report(&ring, policy, "n1", &junk, None, NOW),
            AgentOutcome::Unverifiable(_)
        ));
        assert!(matches!(
            verify_report(&ring, policy, "n1", b"not json", None, NOW),
            AgentOutcome::Unverifiable(_)
        ));
    }

    #[test]
    fn stale_reports_are_marked() {
        let ring = KeyRing::single(key());
        let outcome = verify_report(
            &ring,
            VerifyPolicy::default(),
            "n1",
            &body("n1", 1, payload("evacuate", true)),
            None,
            NOW,
        );
        assert!(matches!(outcome, AgentOutcome::Stale(_)));
    }

    #[test]
    fn urls_follow_template_and_overrides() {
        let mut node = crate::plan::tests_support::node("n1");
        node.primary_ip = "10.0.0.1".into();
        let mut urls = AgentUrls {
            template: DEFAULT_AGENT_URL_TEMPLATE.into(),
            overrides: BTreeMap::new(),
        };
        assert_eq!(urls.base(&node), "http://10.0.0.1:1815");
        node.primary_ip = "fd00::1".into();
        assert_eq!(urls.base(&node), "http://[fd00::1]:1815");
        urls.template = "http://{name}:9/".into();
        assert_eq!(urls.base(&node), "http://n1:9");
        urls.overrides
            .insert("n1".into(), "http://127.0.0.1:4000".into());
        assert_eq!(urls.base(&node), "http://127.0.0.1:4000");
    }

    #[tokio::test]
    async fn unreachable_agent_is_reported_quickly() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        drop(listener);
        let scraper = Scraper::new(
            KeyRing::single(key()),
            ScrapeSettings {
                concurrency: 4,
                timeout: Duration::from_secs(2),
                policy: VerifyPolicy::default(),
            },
        )
        .unwrap();
        let targets = vec![AgentTarget {
            node: "n1".into(),
            node_uuid: "u1".into(),
            base_url: format!("http://127.0.0.1:{port}"),
        }];
        let results = scraper.scrape(targets, &BTreeMap::new(), || NOW).await;
        assert_eq!(results.len(), 1);
        assert!(
            matches!(results[0].outcome, AgentOutcome::Unreachable(_)),
            "{:?}",
            results[0].outcome
        );
    }
}
