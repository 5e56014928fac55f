//! Incident state changes: the time-to-heal histogram and the optional webhook.
//!
//! After every round, [`Changes::observe`] compares the stored incidents with the previous
//! round's and turns each change into a [`Notification`]: `noted`, `pending`, `completed`
//! (the node is ready for the technician: maintd's `repairready`), `failed`, `canceled`,
//! `acknowledged`. With `[notify] webhook_url` set, a worker task POSTs each one as JSON,
//! retrying with exponential backoff. The round never waits for it: notifications go through
//! a bounded queue, and those that do not fit are dropped and counted in `/metrics`.

use std::collections::BTreeMap;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use tokio::sync::mpsc;
use uuid::Uuid;

use crate::metrics::CoordinatorMetrics;
use nodecare_core::incident::{Incident, RepairStatus};

/// Notifications waiting to be sent at most; more are dropped (and counted).
pub const QUEUE_CAPACITY: usize = 256;
/// Longest wait between two attempts.
pub const MAX_BACKOFF: Duration = Duration::from_secs(300);

/// What the webhook receives (JSON body of the POST): the wire type of `nodecare-protocol`.
pub use crate::config::WebhookSettings;
pub use nodecare_protocol::notify::{Notification, NotificationEvent};

/// The notification of `event` for `incident`.
fn notification(event: NotificationEvent, incident: &Incident) -> Notification {
    Notification {
        event,
        incident: incident.uuid.to_string(),
        node: incident.node.clone(),
        action: incident.action.as_str().to_owned(),
        repair_status: incident.repair_status.as_str().to_owned(),
        ready_for_repair: incident.repair_status == RepairStatus::Completed
            && !incident.acknowledged,
        tag: incident.tag.clone(),
        failure: incident.failure.clone(),
        blocked_by: incident.blocked_by.clone(),
        at: incident.mtime,
    }
}

/// What was seen of an incident last time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Seen {
    status: RepairStatus,
    acknowledged: bool,
}

/// The event of reaching `status`.
const fn event_of(status: RepairStatus) -> NotificationEvent {
    match status {
        RepairStatus::Noted => NotificationEvent::Noted,
        RepairStatus::Pending => NotificationEvent::Pending,
        RepairStatus::Completed => NotificationEvent::Completed,
        RepairStatus::Failed => NotificationEvent::Failed,
        RepairStatus::Canceled => NotificationEvent::Canceled,
    }
}

/// The notifications for the change from `before` (absent: a new incident) to `incident`.
pub fn events(before: Option<(RepairStatus, bool)>, incident: &Incident) -> Vec<Notification> {
    let mut out = Vec::new();
    // A new incident is always announced as `noted`, even if it moved on in the same round.
    let previous = match before {
        Some((status, _)) => status,
        None => {
            out.push(notification(NotificationEvent::Noted, incident));
            RepairStatus::Noted
        }
    };
    if previous != incident.repair_status {
        out.push(notification(event_of(incident.repair_status), incident));
    }
    let was_acknowledged = before.is_some_and(|(_, ack)| ack);
    if incident.acknowledged && !was_acknowledged {
        out.push(notification(NotificationEvent::Acknowledged, incident));
    }
    out
}

/// Incident states seen after the last round, and where notifications go.
#[derive(Debug)]
pub struct Changes {
    seen: Mutex<Option<BTreeMap<Uuid, Seen>>>,
    /// Unix seconds when this process started watching: on the first round, only incidents
    /// changed since are reported (older changes were reported by the previous run).
    since: f64,
    pub(crate) sender: OnceLock<mpsc::Sender<Notification>>,
}

impl Default for Changes {
    fn default() -> Self {
        Self {
            seen: Mutex::new(None),
            since: nodecare_protocol::now_s(),
            sender: OnceLock::new(),
        }
    }
}

impl Changes {
    /// Compares `incidents` with the last round's: records time to heal of the incidents that
    /// completed and queues a notification per change (when a webhook is configured).
    pub fn observe(&self, incidents: &[Incident], metrics: &CoordinatorMetrics) {
        let mut guard = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        let first = guard.is_none();
        let previous = guard.take().unwrap_or_default();
        let mut now = BTreeMap::new();
        for incident in incidents {
            let before = previous
                .get(&incident.uuid)
                .map(|seen| (seen.status, seen.acknowledged));
            now.insert(
                incident.uuid,
                Seen {
                    status: incident.repair_status,
                    acknowledged: incident.acknowledged,
                },
            );
            if first && incident.mtime < self.since {
                continue;
            }
            for notification in events(before, incident) {
                if notification.event == NotificationEvent::Completed {
                    metrics.healed(incident.mtime - incident.ctime);
                }
                self.send(notification, metrics);
            }
        }
        *guard = Some(now);
    }

    fn send(&self, notification: Notification, metrics: &CoordinatorMetrics) {
        let Some(sender) = self.sender.get() else {
            return;
        };
        match sender.try_send(notification) {
            Ok(()) => {}
            Err(mpsc::error::TrySendError::Full(dropped)) => {
                tracing::warn!(incident = %dropped.incident, event = dropped.event.as_str(), "notification queue full; dropped");
                metrics.notification("dropped");
            }
            Err(mpsc::error::TrySendError::Closed(dropped)) => {
                tracing::warn!(incident = %dropped.incident, event = dropped.event.as_str(), "notification worker stopped; dropped");
                metrics.notification("dropped");
            }
        }
    }
}

/// The wait before retry number `retry` (0-based).
pub fn backoff(first: Duration, retry: u32) -> Duration {
    first
        .checked_mul(2u32.saturating_pow(retry))
        .unwrap_or(MAX_BACKOFF)
        .min(MAX_BACKOFF)
}

/// Why the webhook cannot start.
#[derive(Debug, thiserror::Error)]
#[error("cannot build the webhook HTTP client: {0}")]
pub struct WebhookError(pub(crate) String);

pub(crate) async fn deliver(
    client: &reqwest::Client,
    settings: &WebhookSettings,
    notification: &Notification,
) -> Result<(), String> {
    let mut last_error = String::new();
    for attempt in 0..=settings.retries {
        if attempt > 0 {
            tokio::time::sleep(backoff(settings.backoff, attempt - 1)).await;
        }
        match client.post(&settings.url).json(notification).send().await {
            Ok(response) if response.status().is_success() => return Ok(()),
            Ok(response) => last_error = format!("HTTP {}", response.status()),
            Err(error) => last_error = error.to_string(),
        }
        tracing::debug!(attempt, error = %last_error, "webhook attempt failed");
    }
    Err(format!(
        "{} attempts, last: {last_error}",
        settings.retries + 1
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn incident(status: RepairStatus, acknowledged: bool) -> Incident {
        let verdict = nodecare_protocol::NodeVerdict::merge(
            [(
                "disk".to_owned(),
                nodecare_protocol::ScriptVerdict::parse(br#"{"status":"evacuate"}"#).unwrap(),
            )]
            .into_iter()
            .collect(),
        )
        .unwrap();
        let original =
            nodecare_protocol::CanonicalJson::new(&serde_json::to_value(&verdict).unwrap())
                .unwrap();
        let mut incident = Incident::new(
            Uuid::from_u128(7),
            "node1",
            "uuid-node1",
            verdict,
            original,
            nodecare_core::incident::Action::Evacuate,
            100.0,
        );
        incident.repair_status = status;
        incident.acknowledged = acknowledged;
        incident
    }

    fn names(
        before: Option<(RepairStatus, bool)>,
        status: RepairStatus,
        ack: bool,
    ) -> Vec<&'static str> {
        events(before, &incident(status, ack))
            .iter()
            .map(|n| n.event.as_str())
            .collect()
    }

    #[test]
    fn every_change_is_one_event() {
        use RepairStatus::{Canceled, Completed, Failed, Noted, Pending};
        assert_eq!(names(None, Noted, false), ["noted"]);
        assert_eq!(names(None, Pending, false), ["noted", "pending"]);
        assert_eq!(
            names(Some((Noted, false)), Noted, false),
            Vec::<&str>::new()
        );
        assert_eq!(names(Some((Noted, false)), Pending, false), ["pending"]);
        assert_eq!(
            names(Some((Pending, false)), Completed, false),
            ["completed"]
        );
        assert_eq!(names(Some((Pending, false)), Failed, false), ["failed"]);
        assert_eq!(names(Some((Pending, false)), Canceled, false), ["canceled"]);
        assert_eq!(
            names(Some((Completed, false)), Completed, true),
            ["acknowledged"]
        );
        assert_eq!(
            names(Some((Completed, true)), Completed, true),
            Vec::<&str>::new()
        );
        let completed = events(Some((Pending, false)), &incident(Completed, false));
        assert!(completed[0].ready_for_repair);
        let acknowledged = events(Some((Completed, false)), &incident(Completed, true));
        assert!(!acknowledged[0].ready_for_repair);
    }

    #[test]
    fn backoff_doubles_up_to_the_cap() {
        let first = Duration::from_secs(2);
        assert_eq!(backoff(first, 0), Duration::from_secs(2));
        assert_eq!(backoff(first, 3), Duration::from_secs(16));
        assert_eq!(backoff(first, 40), MAX_BACKOFF);
        assert_eq!(backoff(Duration::ZERO, 5), Duration::ZERO);
    }
}
