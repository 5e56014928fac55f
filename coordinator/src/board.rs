//! The board: what the round shares with the HTTP API, the watches and the notifier.

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

use tokio::sync::mpsc;

use crate::notify::{Notification, QUEUE_CAPACITY, WebhookError, WebhookSettings};
use crate::scrape::{AgentStatus, AgentTarget};
use nodecare_protocol::status::RoundSummary;

/// Explanations computed at once, at most: each looks through up to
/// [`crate::explain_api::EXPLAIN_ROUNDS`] recorded rounds by the recorder's index and decodes
/// only those it shows, yet callers asking many at once must not take the coordinator's CPU and
/// the store's lock from its rounds. One more is answered `503` with `Retry-After: 1`.
pub const EXPLAIN_CONCURRENCY: usize = 4;

/// The permits of [`EXPLAIN_CONCURRENCY`], on the board.
#[derive(Debug)]
pub struct ExplainSlots(tokio::sync::Semaphore);

impl Default for ExplainSlots {
    fn default() -> Self {
        Self(tokio::sync::Semaphore::new(EXPLAIN_CONCURRENCY))
    }
}

impl ExplainSlots {
    /// A permit, or `None` while [`EXPLAIN_CONCURRENCY`] explanations are being computed.
    pub fn try_take(&self) -> Option<tokio::sync::SemaphorePermit<'_>> {
        self.0.try_acquire().ok()
    }
}

/// State shared with the HTTP API.
#[derive(Debug, Default)]
pub struct Board {
    /// Whether a round runs now: work that yields to the rounds (a what-if) waits while it is
    /// true ([`crate::reconcile::Reconciler::round`] sets it).
    pub round_running: tokio::sync::watch::Sender<bool>,
    /// Agent status per node.
    pub agents: RwLock<BTreeMap<String, AgentStatus>>,
    /// Last round.
    pub last_round: RwLock<RoundSummary>,
    /// The `/metrics` counters, histograms and gauges.
    pub metrics: crate::metrics::CoordinatorMetrics,
    /// Incident state changes: time to heal and webhook notifications.
    pub changes: crate::notify::Changes,
    /// The agents the last round read (what the watches follow).
    pub targets: RwLock<Vec<AgentTarget>>,
    /// What the gate saw and decided in the last round (none before the first round).
    pub gate: RwLock<Option<nodecare_core::gate::GateSnapshot>>,
    /// The graces of planned disruptions in the last round, by node ([`nodecare_core::gate::grace`]).
    pub graces: RwLock<BTreeMap<String, nodecare_core::gate::Grace>>,
    /// The actionable verdicts the last round did not act on because their node was in grace:
    /// node → verdict (`evacuate`, …).
    pub held_in_grace: RwLock<BTreeMap<String, String>>,
    /// What the instance-repair duty found in the last round (instances not healthy).
    pub instance_repairs: RwLock<Vec<nodecare_protocol::status::InstanceRepairSummary>>,
    /// What balancing did last (none while it is off or before its first run).
    pub balancing: RwLock<Option<nodecare_core::duty::balancing::BalanceStatus>>,
    /// Instances waiting to go back home (failback), with why, as the last round planned.
    pub failback_waiting: RwLock<BTreeMap<String, String>>,
    /// Whether this coordinator is acting (its last mastership check found this node the
    /// master); a coordinator on another master candidate stands by.
    pub acting: std::sync::atomic::AtomicBool,
    /// Starts the next round now (a cancel, so that its jobs' outcomes are recorded at once;
    /// a job that ended, [`crate::job_wait`]).
    pub wake: tokio::sync::Notify,
    /// Signalled (to every waiter) at the end of every round.
    pub round_done: tokio::sync::Notify,
    /// Jobs Ganeti was already asked to cancel (by the API or a round), asked once each.
    pub cancels_asked: nodecare_exec::CancelsAsked,
    /// The addresses operators authenticated from (the API's reserved connections).
    pub operators: crate::callers::Operators,
    /// The explanations being computed ([`EXPLAIN_CONCURRENCY`] at most).
    pub explains: ExplainSlots,
}

impl Board {
    /// The last round's graces by node, and the verdicts they held back (node → verdict).
    pub fn graces_now(
        &self,
    ) -> (
        BTreeMap<String, nodecare_core::gate::Grace>,
        BTreeMap<String, String>,
    ) {
        let graces = self
            .graces
            .read()
            .map(|graces| graces.clone())
            .unwrap_or_default();
        let held = self
            .held_in_grace
            .read()
            .map(|held| held.clone())
            .unwrap_or_default();
        (graces, held)
    }

    /// Starts the webhook worker: from now on, the board's changes are POSTed to `settings.url`.
    /// The worker ends when the board is dropped.
    pub fn start_webhook(
        self: &Arc<Self>,
        settings: WebhookSettings,
    ) -> Result<tokio::task::JoinHandle<()>, WebhookError> {
        let board = self;
        crate::install_crypto_provider();
        let client = reqwest::Client::builder()
            .timeout(settings.timeout)
            .build()
            .map_err(|e| WebhookError(e.to_string()))?;
        let (sender, mut receiver) = mpsc::channel::<Notification>(QUEUE_CAPACITY);
        if board.changes.sender.set(sender).is_err() {
            return Err(WebhookError("a webhook is already running".into()));
        }
        let weak = Arc::downgrade(board);
        Ok(tokio::spawn(async move {
            while let Some(notification) = receiver.recv().await {
                let result = crate::notify::deliver(&client, &settings, &notification).await;
                let Some(board) = weak.upgrade() else { break };
                match result {
                    Ok(()) => board.metrics.notification("sent"),
                    Err(error) => {
                        tracing::warn!(incident = %notification.incident, event = notification.event.as_str(), %error, "webhook notification failed");
                        board.metrics.notification("failed");
                    }
                }
            }
        }))
    }
}
