//! Approvals (pure): named kinds of work that start only once an operator (or the change
//! system, through the API) approved them, with a change ticket that then travels in the reason
//! trail of every Ganeti job of that work. A refusal is kept with its reason and shown where the
//! work waits. Only new work waits: an approval is asked once per holder (an incident, a
//! campaign, an instance repair), before its first disruption.

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::calendar::WorkKind;
use nodecare_protocol::gate::BlockedBy;

/// Most approval records kept (the oldest go first).
pub const MAX_RECORDS: usize = 512;
/// Most bytes of a change ticket.
pub const MAX_TICKET_BYTES: usize = 64;

/// `[approvals]` of the configuration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ApprovalsConfig {
    /// The kinds of work that need an approval before they start: `campaign`, `evacuation`,
    /// `live-repair`, `instance-repair` (every instance repair), `reinstall` (harep's reinstalls
    /// only). None by default.
    pub require: Vec<WorkKind>,
    /// Any new disruption of an incident, a campaign or an instance repair that moves more than
    /// this many instances (the primaries of the nodes it drains or reboots) needs an approval
    /// too, whatever its kind. None by default.
    pub moves_above: Option<usize>,
    /// The change system asked for each waiting holder (`https://…`); empty: operators decide
    /// (`nodecare approval`). Down or not answering, the work keeps waiting (fails closed).
    pub webhook: String,
    /// The certificate the change system's HTTPS must present (PEM, pinned like RAPI's).
    pub webhook_certificate: String,
    /// Seconds one request to the change system may take.
    pub webhook_timeout_secs: f64,
    /// Seconds before a holder the change system answered `later` (or did not answer) is asked
    /// again.
    pub webhook_interval_secs: f64,
}

impl Default for ApprovalsConfig {
    fn default() -> Self {
        Self {
            require: Vec::new(),
            moves_above: None,
            webhook: String::new(),
            webhook_certificate: String::new(),
            webhook_timeout_secs: 10.0,
            webhook_interval_secs: 60.0,
        }
    }
}

impl ApprovalsConfig {
    /// Checks the kinds (balancing runs and other tools' requests have no holder to approve).
    pub fn validate(&self) -> Result<(), String> {
        let url = self.webhook.trim();
        if !url.is_empty() {
            if url.starts_with("https://") {
                if self.webhook_certificate.trim().is_empty() {
                    return Err(
                        "approvals.webhook over https needs approvals.webhook_certificate (the PEM to pin)"
                            .to_owned(),
                    );
                }
            } else if !url.starts_with("http://") {
                return Err(format!(
                    "approvals.webhook must be an http:// or https:// URL, got {url:?}"
                ));
            }
        }
        for (name, secs) in [
            ("webhook_timeout_secs", self.webhook_timeout_secs),
            ("webhook_interval_secs", self.webhook_interval_secs),
        ] {
            if !secs.is_finite() || secs < 0.1 {
                return Err(format!(
                    "approvals.{name} must be at least 0.1 seconds, got {secs}"
                ));
            }
        }
        for kind in &self.require {
            if matches!(kind, WorkKind::Balancing | WorkKind::Admission) {
                return Err(format!(
                    "approvals.require: {} cannot require an approval (use maintenance windows \
                     and freezes for it); approvable: campaign, evacuation, live-repair, \
                     instance-repair, reinstall",
                    kind.as_str()
                ));
            }
        }
        Ok(())
    }
}

/// An operator's (or the change system's) decision on a holder's work.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApprovalRecord {
    /// The holder's id (incident, campaign or instance repair).
    pub id: Uuid,
    /// Approved, with this change ticket.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ticket: Option<String>,
    /// Refused, and why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refused: Option<String>,
    /// Who decided.
    pub who: String,
    /// Unix ms of the decision.
    pub at_ms: u64,
}

/// What the gate reads of the approvals this round (part of its policy, recorded with it).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Approvals {
    /// The kinds of work that need one.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub required: Vec<WorkKind>,
    /// Work moving more instances than this needs one too, whatever its kind.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub moves_above: Option<usize>,
    /// The decisions kept.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub records: Vec<ApprovalRecord>,
}

impl Approvals {
    /// The latest decision on holder `id`.
    pub fn decision(&self, id: Uuid) -> Option<&ApprovalRecord> {
        self.records
            .iter()
            .filter(|r| r.id == id)
            .max_by_key(|r| r.at_ms)
    }

    /// The change ticket the work of holder `id` was approved with.
    pub fn ticket(&self, id: Uuid) -> Option<&str> {
        self.decision(id).and_then(|r| r.ticket.as_deref())
    }

    /// Why `kind` of the holder `id` (`None`: a holder nobody approves), named `holder` for
    /// people, moving `moves` instances, may not start yet (`None`: it may).
    pub fn blocks(
        &self,
        kind: WorkKind,
        id: Option<Uuid>,
        holder: &str,
        moves: usize,
    ) -> Option<BlockedBy> {
        let many = self.moves_above.filter(|above| moves > *above);
        let required = self.required.contains(&kind)
            || (kind == WorkKind::Reinstall && self.required.contains(&WorkKind::InstanceRepair));
        if !required && many.is_none() {
            return None;
        }
        let id = id?;
        let holder = match many {
            Some(above) if !required => {
                let plural = if moves == 1 { "" } else { "s" };
                format!(
                    "{holder} (moves {moves} instance{plural}, more than approvals.moves_above = {above})"
                )
            }
            _ => holder.to_owned(),
        };
        let holder = holder.as_str();
        match self.decision(id) {
            Some(record) if record.ticket.is_some() => None,
            Some(record) => Some(BlockedBy::Approval {
                holder: holder.to_owned(),
                id: id.to_string(),
                refused: Some(format!(
                    "{} (by {})",
                    record.refused.as_deref().unwrap_or("refused"),
                    record.who
                )),
            }),
            None => Some(BlockedBy::Approval {
                holder: holder.to_owned(),
                id: id.to_string(),
                refused: None,
            }),
        }
    }
}

/// A change ticket: 1 to [`MAX_TICKET_BYTES`] bytes of letters, digits and `-_.:/#`.
pub fn check_ticket(ticket: &str) -> Result<(), String> {
    if ticket.is_empty() || ticket.len() > MAX_TICKET_BYTES {
        return Err(format!(
            "a change ticket has 1 to {MAX_TICKET_BYTES} bytes, got {}",
            ticket.len()
        ));
    }
    if !ticket
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || "-_.:/#".contains(c))
    {
        return Err(format!(
            "a change ticket is letters, digits and -_.:/# only, got {ticket:?}"
        ));
    }
    Ok(())
}

/// Adds `record` to `records`, keeping the newest [`MAX_RECORDS`].
pub fn keep(records: &mut Vec<ApprovalRecord>, record: ApprovalRecord) {
    records.push(record);
    if records.len() > MAX_RECORDS {
        records.sort_by_key(|r| r.at_ms);
        let excess = records.len() - MAX_RECORDS;
        records.drain(..excess);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn kind(n: u8) -> WorkKind {
        [
            WorkKind::Campaign,
            WorkKind::Evacuation,
            WorkKind::LiveRepair,
            WorkKind::InstanceRepair,
            WorkKind::Reinstall,
        ][usize::from(n % 5)]
    }

    proptest! {
        /// Work waits exactly when its kind (or instance repairs, for a reinstall) is required,
        /// or it moves more than `moves_above`, and the holder's latest decision is not an
        /// approval; holders nobody approves never wait.
        #[test]
        fn work_waits_exactly_when_it_needs_an_approval_it_lacks(
            required in prop::collection::vec(0u8..5, 0..4),
            asked in 0u8..5,
            above in prop::option::of(0usize..5),
            moves in 0usize..8,
            decisions in prop::collection::vec((any::<bool>(), 0u64..100), 0..4),
            approvable in any::<bool>(),
        ) {
            let id = Uuid::from_u128(9);
            let mut approvals = Approvals {
                required: required.iter().map(|n| kind(*n)).collect(),
                moves_above: above,
                records: Vec::new(),
            };
            for (approve, at_ms) in &decisions {
                keep(&mut approvals.records, ApprovalRecord {
                    id,
                    ticket: approve.then(|| "CHG-1".to_owned()),
                    refused: (!approve).then(|| "no".to_owned()),
                    who: "op".into(),
                    at_ms: *at_ms,
                });
            }
            let asked = kind(asked);
            let needs = approvals.required.contains(&asked)
                || (asked == WorkKind::Reinstall && approvals.required.contains(&WorkKind::InstanceRepair))
                || above.is_some_and(|a| moves > a);
            let approved = approvals.decision(id).is_some_and(|d| d.ticket.is_some());
            let blocked = approvals.blocks(asked, approvable.then_some(id), "holder", moves);
            prop_assert_eq!(blocked.is_some(), approvable && needs && !approved, "{:?}", blocked);
        }
    }

    fn campaign(n: u128) -> (WorkKind, Option<Uuid>, String) {
        (
            WorkKind::Campaign,
            Some(Uuid::from_u128(n)),
            format!("maintenance campaign {}", Uuid::from_u128(n)),
        )
    }

    fn blocks(
        approvals: &Approvals,
        (kind, id, holder): (WorkKind, Option<Uuid>, String),
    ) -> Option<BlockedBy> {
        approvals.blocks(kind, id, &holder, 1)
    }

    /// `instance-repair` covers reinstalls; `reinstall` alone leaves the other instance repairs
    /// free.
    #[test]
    fn reinstalls_are_instance_repairs_unless_named_alone() {
        let id = Some(Uuid::from_u128(4));
        let all = Approvals {
            required: vec![WorkKind::InstanceRepair],
            ..Approvals::default()
        };
        assert!(
            all.blocks(WorkKind::Reinstall, id, "instance repair 4", 0)
                .is_some()
        );
        let reinstalls = Approvals {
            required: vec![WorkKind::Reinstall],
            ..Approvals::default()
        };
        assert!(
            reinstalls
                .blocks(WorkKind::Reinstall, id, "instance repair 4", 0)
                .is_some()
        );
        assert!(
            reinstalls
                .blocks(WorkKind::InstanceRepair, id, "instance repair 4", 0)
                .is_none()
        );
    }

    /// `moves_above`: work of any approvable kind that moves more instances waits, and says
    /// why; work of a kind nobody approves (balancing, grants) never does.
    #[test]
    fn work_moving_many_instances_waits_for_an_approval() {
        let approvals = Approvals {
            moves_above: Some(10),
            ..Approvals::default()
        };
        let id = Some(Uuid::from_u128(3));
        assert_eq!(
            approvals.blocks(WorkKind::Evacuation, id, "incident 3", 10),
            None
        );
        assert_eq!(
            approvals
                .blocks(WorkKind::Evacuation, id, "incident 3", 11)
                .map(|b| b.to_string()),
            Some(format!(
                "waiting for an approval of incident 3 (moves 11 instances, more than \
                 approvals.moves_above = 10) (nodecare approval grant {} --ticket …)",
                Uuid::from_u128(3)
            ))
        );
        assert_eq!(
            approvals.blocks(WorkKind::Balancing, None, "balancing", 50),
            None
        );
        // Required anyway: the usual words.
        let both = Approvals {
            required: vec![WorkKind::Campaign],
            moves_above: Some(1),
            ..Approvals::default()
        };
        assert!(matches!(
            both.blocks(WorkKind::Campaign, id, "maintenance campaign 3", 5),
            Some(BlockedBy::Approval { holder, .. }) if holder == "maintenance campaign 3"
        ));
    }

    #[test]
    fn required_work_waits_for_an_approval_and_a_refusal_says_why() {
        let mut approvals = Approvals {
            required: vec![WorkKind::Campaign, WorkKind::Evacuation],
            moves_above: None,
            records: Vec::new(),
        };
        let waits = blocks(&approvals, campaign(1));
        assert_eq!(
            waits.map(|b| b.to_string()),
            Some(format!(
                "waiting for an approval of maintenance campaign {} (nodecare approval grant {} --ticket …)",
                Uuid::from_u128(1),
                Uuid::from_u128(1)
            ))
        );
        // Not required: never waits.
        assert_eq!(
            approvals.blocks(
                WorkKind::LiveRepair,
                Some(Uuid::from_u128(2)),
                "incident",
                0
            ),
            None
        );
        keep(
            &mut approvals.records,
            ApprovalRecord {
                id: Uuid::from_u128(1),
                ticket: None,
                refused: Some("no change window this week".into()),
                who: "bob".into(),
                at_ms: 10,
            },
        );
        assert_eq!(
            blocks(&approvals, campaign(1)).map(|b| b.to_string()),
            Some(format!(
                "maintenance campaign {} refused: no change window this week (by bob)",
                Uuid::from_u128(1)
            ))
        );
        // A later approval wins, and its ticket is the holder's.
        keep(
            &mut approvals.records,
            ApprovalRecord {
                id: Uuid::from_u128(1),
                ticket: Some("CHG-4711".into()),
                refused: None,
                who: "alice".into(),
                at_ms: 20,
            },
        );
        assert_eq!(blocks(&approvals, campaign(1)), None);
        assert_eq!(approvals.ticket(Uuid::from_u128(1)), Some("CHG-4711"));
        assert_eq!(approvals.ticket(Uuid::from_u128(2)), None);
    }

    #[test]
    fn tickets_and_kinds_are_checked() {
        assert!(check_ticket("CHG-4711").is_ok());
        assert!(check_ticket("").is_err());
        assert!(check_ticket("a b").is_err());
        assert!(check_ticket(&"x".repeat(65)).is_err());
        let bad = ApprovalsConfig {
            require: vec![WorkKind::Balancing],
            ..ApprovalsConfig::default()
        };
        let no_pin = ApprovalsConfig {
            webhook: "https://change.example/nodecare".into(),
            ..ApprovalsConfig::default()
        };
        assert!(
            no_pin
                .validate()
                .is_err_and(|e| e.contains("webhook_certificate"))
        );
        assert!(bad.validate().is_err_and(|e| e.contains("balancing")));
        let records: Vec<ApprovalRecord> = Vec::new();
        let mut records = records;
        for n in 0..(MAX_RECORDS as u64 + 10) {
            keep(
                &mut records,
                ApprovalRecord {
                    id: Uuid::from_u128(u128::from(n)),
                    ticket: Some("t".into()),
                    refused: None,
                    who: "a".into(),
                    at_ms: n,
                },
            );
        }
        assert_eq!(records.len(), MAX_RECORDS);
        assert!(records.iter().all(|r| r.at_ms >= 10));
    }
}
