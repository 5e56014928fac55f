//! The incident webhook's JSON body: one POST per incident state change (`noted`, `pending`,
//! `completed`, `failed`, `canceled`, `acknowledged`), so that a ticket can be opened when a node
//! is ready for the technician or a repair failed.

use serde::{Deserialize, Serialize};

/// What happened to the incident.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NotificationEvent {
    /// A new incident.
    Noted,
    /// Its first action started.
    Pending,
    /// Every action succeeded: the node carries its repairready tag.
    Completed,
    /// An action failed: the node carries its repairfailed tag.
    Failed,
    /// An operator canceled it.
    Canceled,
    /// An operator removed its tag.
    Acknowledged,
}

impl NotificationEvent {
    /// The wire spelling.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Noted => "noted",
            Self::Pending => "pending",
            Self::Completed => "completed",
            Self::Failed => "failed",
            Self::Canceled => "canceled",
            Self::Acknowledged => "acknowledged",
        }
    }
}

/// The webhook's body.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Notification {
    /// What happened.
    pub event: NotificationEvent,
    /// The incident's uuid.
    pub incident: String,
    /// Node name.
    pub node: String,
    /// Requested action (`live-repair`, `evacuate`, `evacuate-failover`).
    pub action: String,
    /// maintd's `repair-status` after the change.
    #[serde(rename = "repair-status")]
    pub repair_status: String,
    /// Whether the node is ready for the technician (completed, not yet acknowledged).
    pub ready_for_repair: bool,
    /// The incident's tag.
    pub tag: String,
    /// Why it failed, if it did.
    pub failure: Option<String>,
    /// Why it waits, if it does.
    pub blocked_by: Option<String>,
    /// Unix seconds of the change.
    pub at: f64,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The body as a webhook receiver reads it (golden): field names and spellings are a
    /// contract with ticketing scripts.
    #[test]
    fn wire_form_is_stable() {
        let notification = Notification {
            event: NotificationEvent::Completed,
            incident: "0b1e0000-0000-4000-8000-000000000001".into(),
            node: "node3.example.com".into(),
            action: "evacuate".into(),
            repair_status: "completed".into(),
            ready_for_repair: true,
            tag: "maintd:repairready:0b1e0000-0000-4000-8000-000000000001".into(),
            failure: None,
            blocked_by: None,
            at: 1_795_000_000.5,
        };
        let text = serde_json::to_string_pretty(&notification).unwrap() + "\n";
        crate::golden::assert_golden(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden/notification.json"),
            &text,
        );
        let back: Notification = serde_json::from_str(&text).unwrap();
        assert_eq!(back, notification);
        assert!(
            serde_json::from_str::<Notification>(&text.replace("\"at\"", "\"extra\": 1, \"at\""))
                .is_err()
        );
    }
}
