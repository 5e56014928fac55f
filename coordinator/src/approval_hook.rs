//! The change system behind `[approvals] webhook`: after each round, every holder the gate held
//! back for an approval (and not refused) is posted to it ([`ApprovalAsk`]), at most once per
//! `webhook_interval_secs` each, one request at a time, each within `webhook_timeout_secs`; its
//! answer ([`ApprovalAnswer`]) approves with a ticket or refuses with a reason (kept and audited
//! like an operator's decision, by `change system`), or says `later`. A change system that is
//! down, slow or answers nonsense approves nothing: the work keeps waiting (fails closed), and
//! the last error is logged and shown in `GET /1/approvals`.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nodecare_core::approval::{ApprovalRecord, ApprovalsConfig, check_ticket};
use nodecare_protocol::gate::{ApprovalAnswer, ApprovalAsk, ApprovalWaiting};
use uuid::Uuid;

use crate::board::Board;
use crate::store::Store;

/// Most bytes of an answer read.
const MAX_ANSWER_BYTES: usize = 64 * 1024;

/// Who the change system's decisions are recorded as.
pub const CHANGE_SYSTEM: &str = "change system";

/// The change system's client and what it was asked.
#[derive(Debug)]
pub struct ApprovalHook {
    client: reqwest::Client,
    url: String,
    timeout: Duration,
    interval: Duration,
    asked: Mutex<BTreeMap<Uuid, Instant>>,
    /// The last failure to get an answer, for `GET /1/approvals`.
    pub last_error: Mutex<Option<String>>,
    busy: tokio::sync::Mutex<()>,
}

impl ApprovalHook {
    /// The hook of `config` (`None` without a webhook): its certificate read and pinned now.
    pub fn new(config: &ApprovalsConfig) -> anyhow::Result<Option<Arc<Self>>> {
        use anyhow::Context as _;
        let url = config.webhook.trim();
        if url.is_empty() {
            return Ok(None);
        }
        let mut builder = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(Duration::from_secs_f64(config.webhook_timeout_secs));
        if url.starts_with("https://") {
            let certs = nodecare_ganeti::rapi::tls::load_pinned_certificates(std::path::Path::new(
                &config.webhook_certificate,
            ))
            .context("approvals.webhook_certificate")?;
            builder = builder.use_preconfigured_tls(
                nodecare_ganeti::rapi::tls::pinned_client_config(certs)
                    .context("approvals.webhook_certificate")?,
            );
        }
        crate::install_crypto_provider();
        let client = builder.build().context("the change system's HTTP client")?;
        Ok(Some(Arc::new(Self {
            client,
            url: url.to_owned(),
            timeout: Duration::from_secs_f64(config.webhook_timeout_secs),
            interval: Duration::from_secs_f64(config.webhook_interval_secs),
            asked: Mutex::new(BTreeMap::new()),
            last_error: Mutex::new(None),
            busy: tokio::sync::Mutex::new(()),
        })))
    }

    /// The change system's URL.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// After a round: asks, on a task of its own, for the holders `waiting` for an approval
    /// that were not asked within the interval (nothing when a previous pass still runs); the
    /// decisions go to `store`, and wake the rounds of `board`.
    pub fn after_round(
        self: &Arc<Self>,
        waiting: Vec<ApprovalWaiting>,
        store: &Arc<Store>,
        board: &Arc<Board>,
        coordinator: &str,
    ) {
        let now = Instant::now();
        let due: Vec<ApprovalAsk> = {
            let mut asked = self
                .asked
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            asked.retain(|_, at| now.duration_since(*at) < self.interval);
            waiting
                .into_iter()
                .filter(|w| w.refused.is_none())
                .filter_map(|w| {
                    let id = Uuid::parse_str(&w.id).ok()?;
                    (!asked.contains_key(&id)).then(|| {
                        asked.insert(id, now);
                        ApprovalAsk {
                            id: w.id,
                            holder: w.holder,
                            subject: w.subject,
                            coordinator: coordinator.to_owned(),
                        }
                    })
                })
                .collect()
        };
        if due.is_empty() {
            return;
        }
        let hook = Arc::clone(self);
        let (store, board) = (Arc::clone(store), Arc::clone(board));
        tokio::spawn(async move {
            let Ok(_one) = hook.busy.try_lock() else {
                return;
            };
            for ask in due {
                hook.ask(&store, &board, &ask).await;
            }
        });
    }

    async fn ask(&self, store: &Store, board: &Board, ask: &ApprovalAsk) {
        let answer = match self.post(ask).await {
            Ok(answer) => answer,
            Err(error) => {
                tracing::warn!(id = %ask.id, url = %self.url, %error,
                    "the change system did not decide: the work keeps waiting");
                *self
                    .last_error
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner) =
                    Some(format!("{}: {error}", ask.id));
                return;
            }
        };
        let Ok(id) = Uuid::parse_str(&ask.id) else {
            return;
        };
        let (ticket, refused) = match answer {
            ApprovalAnswer::Later => return,
            ApprovalAnswer::Approve { ticket } => {
                if let Err(error) = check_ticket(&ticket) {
                    tracing::warn!(id = %ask.id, %error, "the change system's ticket is refused: the work keeps waiting");
                    return;
                }
                (Some(ticket), None)
            }
            ApprovalAnswer::Refuse { reason } => (None, Some(reason)),
        };
        let record = ApprovalRecord {
            id,
            ticket,
            refused,
            who: CHANGE_SYSTEM.to_owned(),
            at_ms: nodecare_protocol::now_ms(),
        };
        match store.add_approval(record) {
            Ok(()) => {
                *self
                    .last_error
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner) = None;
                tracing::warn!(id = %ask.id, "the change system decided");
                board.wake.notify_one();
            }
            Err(error) => {
                tracing::error!(id = %ask.id, %error, "cannot keep the change system's decision")
            }
        }
    }

    async fn post(&self, ask: &ApprovalAsk) -> Result<ApprovalAnswer, String> {
        let mut response = self
            .client
            .post(&self.url)
            .timeout(self.timeout)
            .json(ask)
            .send()
            .await
            .map_err(|e| e.to_string())?;
        if !response.status().is_success() {
            return Err(format!("HTTP {}", response.status()));
        }
        let mut body = Vec::new();
        let read = tokio::time::timeout(self.timeout, async {
            while let Some(chunk) = response.chunk().await.map_err(|e| e.to_string())? {
                if body.len() + chunk.len() > MAX_ANSWER_BYTES {
                    return Err(format!("an answer longer than {MAX_ANSWER_BYTES} bytes"));
                }
                body.extend_from_slice(&chunk);
            }
            Ok(())
        })
        .await;
        match read {
            Ok(Ok(())) => {}
            Ok(Err(error)) => return Err(error),
            Err(_) => return Err("the answer did not end in time".to_owned()),
        }
        serde_json::from_slice(&body).map_err(|e| format!("not an answer: {e}"))
    }
}
