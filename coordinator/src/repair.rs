//! Live repairs: asking a node's agent to run its whitelisted repair command.
//!
//! The request is a [`RepairRequest`] signed with the cluster key for the node. The agent runs
//! the command at most once per incident id, so a request repeated after a crash or a lost
//! answer returns the first run's record instead of running it again. The command's exit code
//! decides success (maintd counted a failed repair command as success).

use std::time::Duration;

use nodecare_protocol::repair::{
    REPAIR_PATH, RepairRecord, RepairRefusal, RepairRequest, sign_repair_request,
};
use nodecare_protocol::{HmacKey, Signer};

use crate::scrape::error_chain;

/// What the agent said about a repair.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RepairAnswer {
    /// The run's record (running or final).
    Record(Box<RepairRecord>),
    /// The agent knows no run for this incident (404 on `GET`).
    Unknown,
    /// The agent refused the request; nothing ran.
    Refused {
        /// HTTP status.
        status: u16,
        /// The agent's reason and message.
        message: String,
        /// Whether asking again later can help (agent busy, server error).
        transient: bool,
    },
    /// No usable answer (connection, timeout, bad body).
    Unreachable(String),
}

/// Where a [`RepairClient`]'s requests go.
#[derive(Debug, Clone)]
enum Link {
    /// To the agents, over HTTP.
    Http(reqwest::Client),
    /// Nowhere: every repair succeeds at once and every check starts, in memory (a what-if's
    /// private round, [`RepairClient::simulated`]); it holds no HTTP client, so it cannot reach
    /// an agent.
    Simulated(std::sync::Arc<std::sync::Mutex<std::collections::BTreeMap<String, RepairRecord>>>),
}

/// Sends repair requests and polls their records.
#[derive(Debug, Clone)]
pub struct RepairClient {
    client: Link,
    key: HmacKey,
    ttl: Duration,
    /// Requests wait until the master candidates keep the state that led to them.
    replicator: Option<std::sync::Arc<crate::replica::Replicator>>,
}

impl RepairClient {
    /// A client signing with `key`; requests stay valid for `ttl`.
    pub fn new(client: reqwest::Client, key: HmacKey, ttl: Duration) -> Self {
        Self {
            client: Link::Http(client),
            key,
            ttl,
            replicator: None,
        }
    }

    /// A client that sends nothing: each repair it is asked for succeeds at once (its record
    /// kept in memory) and each check starts; what a what-if's private round uses.
    pub fn simulated() -> Self {
        Self {
            client: Link::Simulated(std::sync::Arc::default()),
            key: HmacKey::new(vec![0; 32]),
            ttl: Duration::from_secs(60),
            replicator: None,
        }
    }

    /// How many repairs (and campaign hooks) a simulated client ran on `node` (none for a
    /// client that sends): a what-if's agents report a new boot id after each, as after a
    /// reboot.
    pub fn simulated_runs(&self, node: &str) -> usize {
        match &self.client {
            Link::Http(_) => 0,
            Link::Simulated(records) => records
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .values()
                .filter(|r| r.node == node)
                .count(),
        }
    }

    /// Whether this client sends nothing ([`RepairClient::simulated`]).
    pub fn is_simulated(&self) -> bool {
        matches!(self.client, Link::Simulated(_))
    }

    /// The same client holding back each repair request until a majority of the master
    /// candidates keep the state that led to it, and sending it within the lease of that
    /// confirmation (`Replicator::confirm_write`).
    #[must_use]
    pub fn with_replicator(
        mut self,
        replicator: std::sync::Arc<crate::replica::Replicator>,
    ) -> Self {
        self.replicator = Some(replicator);
        self
    }

    /// Sends a signed request for `request.node` to the agent at `base_url`.
    pub async fn request(
        &self,
        base_url: &str,
        request: RepairRequest,
        sequence: u64,
        now_ms: u64,
    ) -> RepairAnswer {
        let ttl_ms = u64::try_from(self.ttl.as_millis()).unwrap_or(u64::MAX);
        self.request_for(base_url, request, sequence, now_ms, ttl_ms)
            .await
    }

    /// How long this client's requests stay valid (ms).
    pub fn ttl_ms(&self) -> u64 {
        u64::try_from(self.ttl.as_millis()).unwrap_or(u64::MAX)
    }

    /// Sends a signed request valid for `ttl_ms` (an agent refuses it once it has expired,
    /// however late it reads it).
    pub async fn request_for(
        &self,
        base_url: &str,
        request: RepairRequest,
        sequence: u64,
        now_ms: u64,
        ttl_ms: u64,
    ) -> RepairAnswer {
        if let Link::Simulated(records) = &self.client {
            return simulated_repair(records, &request, now_ms);
        }
        if let Some(replicator) = &self.replicator
            && let Err(error) = replicator.confirm_write().await
        {
            return RepairAnswer::Refused {
                status: 0,
                message: format!("not sent: {error}"),
                transient: true,
            };
        }
        let signer = Signer::new(self.key.clone(), request.node.clone());
        let envelope = match sign_repair_request(&signer, request, sequence, now_ms, ttl_ms) {
            Ok(envelope) => envelope,
            Err(error) => {
                return RepairAnswer::Refused {
                    status: 0,
                    message: format!("cannot sign the repair request: {error}"),
                    transient: false,
                };
            }
        };
        let Link::Http(client) = &self.client else {
            return RepairAnswer::Unreachable("not sent".into());
        };
        let url = format!("{base_url}{REPAIR_PATH}");
        let response = match client.post(&url).json(&envelope).send().await {
            Ok(response) => response,
            Err(error) => {
                return RepairAnswer::Unreachable(format!("{url}: {}", error_chain(&error)));
            }
        };
        answer(response, &url).await
    }

    /// Reads the record of `incident_id` from the agent at `base_url`.
    pub async fn poll(&self, base_url: &str, incident_id: &str) -> RepairAnswer {
        let client = match &self.client {
            Link::Http(client) => client,
            Link::Simulated(records) => {
                return records
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .get(incident_id)
                    .map_or(RepairAnswer::Unknown, |record| {
                        RepairAnswer::Record(Box::new(record.clone()))
                    });
            }
        };
        let url = format!("{base_url}{REPAIR_PATH}/{incident_id}");
        let response = match client.get(&url).send().await {
            Ok(response) => response,
            Err(error) => {
                return RepairAnswer::Unreachable(format!("{url}: {}", error_chain(&error)));
            }
        };
        if response.status() == reqwest::StatusCode::NOT_FOUND {
            return RepairAnswer::Unknown;
        }
        answer(response, &url).await
    }
}

/// The agent's answer to a check request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CheckOutcome {
    /// Accepted: the diagnose scripts run now.
    Started(nodecare_protocol::repair::CheckAnswer),
    /// Refused by the agent (HTTP status and its message).
    Refused(u16, String),
    /// No answer.
    Unreachable(String),
}

impl RepairClient {
    /// Asks the agent of `node` at `base_url` to run its diagnose scripts now (signed).
    pub async fn check(
        &self,
        base_url: &str,
        node: &str,
        sequence: u64,
        now_ms: u64,
    ) -> CheckOutcome {
        use nodecare_protocol::repair::{
            CHECK_PATH, CheckAnswer, CheckRequest, sign_check_request,
        };
        let signer = Signer::new(self.key.clone(), node);
        let ttl_ms = u64::try_from(self.ttl.as_millis())
            .unwrap_or(u64::MAX)
            .min(300_000);
        let request = CheckRequest {
            node: node.to_owned(),
            check_nonce: uuid::Uuid::new_v4().simple().to_string(),
        };
        let envelope = match sign_check_request(&signer, request, sequence, now_ms, ttl_ms) {
            Ok(envelope) => envelope,
            Err(error) => return CheckOutcome::Refused(0, error.to_string()),
        };
        let client = match &self.client {
            Link::Http(client) => client,
            Link::Simulated(_) => {
                return CheckOutcome::Refused(0, "a what-if asks no agent".to_owned());
            }
        };
        let url = format!("{base_url}{CHECK_PATH}");
        let response = match client.post(&url).json(&envelope).send().await {
            Ok(response) => response,
            Err(error) => {
                return CheckOutcome::Unreachable(format!("{url}: {}", error_chain(&error)));
            }
        };
        let status = response.status();
        let body = match crate::scrape::read_capped(response, MAX_ANSWER_BYTES).await {
            Ok(body) => body,
            Err(error) => return CheckOutcome::Unreachable(format!("{url}: {error}")),
        };
        if status == reqwest::StatusCode::ACCEPTED {
            return match nodecare_protocol::json::decode::<CheckAnswer>(&body) {
                Ok(answer) => CheckOutcome::Started(answer),
                Err(error) => {
                    CheckOutcome::Unreachable(format!("{url}: not a check answer: {error}"))
                }
            };
        }
        CheckOutcome::Refused(
            status.as_u16(),
            String::from_utf8_lossy(&body).chars().take(300).collect(),
        )
    }
}

/// A simulated repair: succeeded at once, its record kept for the polls that follow.
fn simulated_repair(
    records: &std::sync::Mutex<std::collections::BTreeMap<String, RepairRecord>>,
    request: &RepairRequest,
    now_ms: u64,
) -> RepairAnswer {
    let mut record = match RepairRecord::running(request, now_ms) {
        Ok(record) => record,
        Err(error) => {
            return RepairAnswer::Refused {
                status: 0,
                message: error.to_string(),
                transient: false,
            };
        }
    };
    record.state = nodecare_protocol::repair::RepairState::Succeeded;
    record.exit_code = Some(0);
    record.finished_at_ms = Some(now_ms);
    record.duration_ms = Some(0);
    let mut records = records
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let record = records
        .entry(record.incident_id.clone())
        .or_insert(record)
        .clone();
    RepairAnswer::Record(Box::new(record))
}

/// Largest answer of an agent to a repair or check request (a repair record keeps the output
/// tail of the repair command, bounded by the agent).
pub const MAX_ANSWER_BYTES: usize = 4 * 1024 * 1024;

async fn answer(response: reqwest::Response, url: &str) -> RepairAnswer {
    let status = response.status();
    let body = match crate::scrape::read_capped(response, MAX_ANSWER_BYTES).await {
        Ok(body) => body,
        Err(error) => return RepairAnswer::Unreachable(format!("{url}: {error}")),
    };
    if status.is_success() {
        return match nodecare_protocol::json::decode::<RepairRecord>(&body) {
            Ok(record) => RepairAnswer::Record(Box::new(record)),
            Err(error) => RepairAnswer::Unreachable(format!("{url}: not a repair record: {error}")),
        };
    }
    let message = match serde_json::from_slice::<RepairRefusal>(&body) {
        Ok(refusal) => format!("{}: {}", refusal.reason.as_str(), refusal.message),
        Err(_) => String::from_utf8_lossy(&body).chars().take(200).collect(),
    };
    RepairAnswer::Refused {
        status: status.as_u16(),
        message,
        transient: status.is_server_error() || status == reqwest::StatusCode::TOO_MANY_REQUESTS,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code")]

    use super::*;

    /// A simulated client holds no HTTP client: an address no one answers on is never tried,
    /// the repair succeeds at once, its record is what a poll reads, and a check is refused.
    #[tokio::test]
    async fn a_simulated_client_sends_nothing() {
        let client = RepairClient::simulated();
        assert!(client.is_simulated());
        let nowhere = "http://192.0.2.1:9";
        let request = RepairRequest {
            node: "node2".into(),
            incident_id: "i-1".into(),
            command: "fix".into(),
            input: serde_json::json!({}),
            nonce: "n".into(),
        };
        let started = std::time::Instant::now();
        let RepairAnswer::Record(record) = client.request(nowhere, request, 1, 5).await else {
            panic!("a simulated repair succeeds");
        };
        assert_eq!(
            record.state,
            nodecare_protocol::repair::RepairState::Succeeded
        );
        assert_eq!(
            client.poll(nowhere, "i-1").await,
            RepairAnswer::Record(record)
        );
        assert_eq!(client.poll(nowhere, "i-2").await, RepairAnswer::Unknown);
        assert_eq!(client.simulated_runs("node2"), 1);
        assert!(matches!(
            client.check(nowhere, "node2", 1, 5).await,
            CheckOutcome::Refused(0, _)
        ));
        assert!(started.elapsed() < std::time::Duration::from_secs(1));
    }
}
