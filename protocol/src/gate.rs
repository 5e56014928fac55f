//! The coordinator's disruption gate as other programs see it: admission requests of other
//! tools (`/1/disruptions`), operator overrides of a failure domain (`/1/overrides`), the storm
//! breaker (`/1/breaker`), and the failure domains with what holds them (in `/1/overview`).
//!
//! Ids are uuids in their hyphenated text form; times are Unix milliseconds.

use serde::{Deserialize, Serialize};

/// Longest time-to-live of a grant, in seconds (one day): a tool that needs longer renews.
pub const MAX_GRANT_TTL_S: u64 = 86_400;
/// Longest override, in seconds from now (seven days).
pub const MAX_OVERRIDE_S: u64 = 7 * 86_400;

/// `POST /1/disruptions`: another tool asks to disrupt one node (drain, reboot, repair). The
/// gate judges it like an evacuation of the node: the primaries running there must fit on the
/// healthy nodes left in its node group (N+1).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DisruptionRequest {
    /// The node (its Ganeti name; at most [`crate::limits::MAX_NAME_BYTES`]).
    #[serde(deserialize_with = "crate::limits::name")]
    pub node: String,
    /// Why, for people (`kernel update`; at most [`crate::limits::MAX_TEXT_BYTES`]).
    #[serde(deserialize_with = "crate::limits::text")]
    pub reason: String,
    /// Who asks: the tool and its instance (`kured@node3`; at most
    /// [`crate::limits::MAX_NAME_BYTES`]). A second request of the same requester for the same
    /// node renews its grant.
    #[serde(deserialize_with = "crate::limits::name")]
    pub requester: String,
    /// How long the grant lasts unless renewed or released, in seconds (1 to
    /// [`MAX_GRANT_TTL_S`]).
    pub ttl_s: u64,
}

impl DisruptionRequest {
    /// Checks the fields, naming the first bad one.
    pub fn validate(&self) -> Result<(), String> {
        if self.node.trim().is_empty() {
            return Err("node: empty".into());
        }
        crate::limits::check_len("node", &self.node, crate::limits::MAX_NAME_BYTES)?;
        crate::limits::check_len("requester", &self.requester, crate::limits::MAX_NAME_BYTES)?;
        crate::limits::check_len("reason", &self.reason, crate::limits::MAX_TEXT_BYTES)?;
        if self.requester.trim().is_empty() {
            return Err("requester: empty".into());
        }
        if self.reason.trim().is_empty() {
            return Err("reason: empty (say why the node is disrupted)".into());
        }
        if self.ttl_s == 0 || self.ttl_s > MAX_GRANT_TTL_S {
            return Err(format!(
                "ttl_s: {} is not between 1 and {MAX_GRANT_TTL_S} seconds",
                self.ttl_s
            ));
        }
        Ok(())
    }
}

/// A granted disruption: the answer to an admitted [`DisruptionRequest`] (`201`, or `200` when
/// it renews), and an entry of `GET /1/disruptions`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Grant {
    /// The grant (release it with `DELETE /1/disruptions/<id>`).
    pub id: String,
    /// The node.
    pub node: String,
    /// Why.
    pub reason: String,
    /// Who asked.
    pub requester: String,
    /// Unix ms when first granted.
    pub granted_ms: u64,
    /// Unix ms when it expires unless renewed.
    pub expires_ms: u64,
    /// The authenticated user who asked.
    pub who: String,
}

/// What refuses a proposal: the coordinator's gate gives it to every refused proposal (an
/// incident's `blocked_by` is its text) and it is the `blocked` field of a `429` answer;
/// [`BlockedBy::Other`] stands for kinds a newer coordinator may add (the gate never makes it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum BlockedBy {
    /// The storm breaker is open.
    Breaker {
        /// Why it opened.
        why: String,
    },
    /// Another failure domain is disrupted.
    Domain {
        /// The busy domain.
        busy: String,
        /// Its disrupted nodes and their holders.
        holders: Vec<String>,
        /// The domain the request would open.
        wanted: String,
    },
    /// The request's nodes lie in several failure domains, and only one failure domain is
    /// disrupted at a time.
    SpansDomains {
        /// What asked (`reboot group 2 of 3 (n1, n4)`).
        subject: String,
        /// Its failure domains.
        domains: Vec<String>,
    },
    /// A cap on disrupted nodes.
    Cap {
        /// Which cap and its figures.
        what: String,
    },
    /// Storage is not whole, or its health is unknown.
    Storage {
        /// The problems.
        what: Vec<String>,
        /// Whether health is unknown rather than known bad.
        unknown: bool,
    },
    /// The moved instances would not fit on the healthy nodes left.
    Capacity {
        /// Figures.
        what: String,
    },
    /// Something else holds the node.
    Conflict {
        /// The node.
        node: String,
        /// Its holder.
        holder: String,
    },
    /// The node is not in the cluster.
    UnknownNode {
        /// The node.
        node: String,
    },
    /// The node to evacuate is the master: Ganeti drains or offlines it only once the master
    /// role moved to another master candidate (`gnt-cluster master-failover` there).
    Master {
        /// The node.
        node: String,
    },
    /// A maintenance freeze is in force (`nodecare freeze`, or `[calendar]` of the
    /// configuration), and this kind of work waits for its end.
    Freeze {
        /// The freeze.
        id: String,
        /// Why it was set.
        reason: String,
        /// When it ends, for people.
        until: String,
    },
    /// No maintenance window is open, and this kind of work starts only inside one.
    OutsideWindow {
        /// The next window, for people (`Tue 2026-12-08 02:00 Europe/Berlin (Tue,Thu
        /// 02:00-05:00)`).
        next: String,
    },
    /// This kind of work needs an approval (`[approvals]`), which it has not been given.
    Approval {
        /// Who waits (`maintenance campaign <uuid>`).
        holder: String,
        /// Its id, which an approval names.
        id: String,
        /// Refused, and why (with who refused); `None`: not decided yet.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        refused: Option<String>,
    },
    /// A kind this reader does not know.
    #[serde(other)]
    Other,
}

impl std::fmt::Display for BlockedBy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Breaker { why } => write!(f, "storm breaker open: {why}"),
            Self::Domain {
                busy,
                holders,
                wanted,
            } => write!(
                f,
                "failure domain {busy} is disrupted ({}); {wanted} waits",
                holders.join(", ")
            ),
            Self::SpansDomains { subject, domains } => write!(
                f,
                "{subject} spans the failure domains {}: one failure domain is disrupted at a time",
                domains.join(", ")
            ),
            Self::Cap { what } => write!(f, "cap: {what}"),
            Self::Storage { what, unknown } => {
                if *unknown {
                    write!(f, "storage health unknown: {}", what.join("; "))
                } else {
                    write!(f, "storage not whole: {}", what.join("; "))
                }
            }
            Self::Capacity { what } => write!(f, "capacity: {what}"),
            Self::Conflict { node, holder } => write!(f, "{node} is held by {holder}"),
            Self::UnknownNode { node } => write!(f, "node {node} is not in the cluster"),
            Self::Master { node } => write!(
                f,
                "{node} is the master: move the master first (gnt-cluster master-failover on another master candidate)"
            ),
            Self::Freeze { id, reason, until } => {
                write!(f, "frozen until {until}: {reason} (freeze {id})")
            }
            Self::OutsideWindow { next } => {
                write!(f, "outside the maintenance window (next: {next})")
            }
            Self::Approval {
                holder,
                id,
                refused: None,
            } => write!(
                f,
                "waiting for an approval of {holder} (nodecare approval grant {id} --ticket …)"
            ),
            Self::Approval {
                holder,
                refused: Some(why),
                ..
            } => write!(f, "{holder} refused: {why}"),
            Self::Other => f.write_str("blocked (for a reason this version cannot name)"),
        }
    }
}

/// The body of a `429 Too Many Requests` answer to `POST /1/disruptions`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Refusal {
    /// What blocks the request, for people.
    pub blocked_by: String,
    /// The same, typed.
    pub blocked: BlockedBy,
}

/// `POST /1/overrides`: exempt one failure domain from the one-domain rule and the caps until
/// a time (`until_ms`) or for a while (`duration_s`); exactly one of the two.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OverrideRequest {
    /// The failure domain (`group:default`, `rack:r2`; at most
    /// [`crate::limits::MAX_NAME_BYTES`]).
    #[serde(deserialize_with = "crate::limits::name")]
    pub domain: String,
    /// Unix ms when it ends.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub until_ms: Option<u64>,
    /// Seconds from now when it ends.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration_s: Option<u64>,
    /// Why (audited: in the log, in the jobs' reasons and in status; at most
    /// [`crate::limits::MAX_TEXT_BYTES`]).
    #[serde(deserialize_with = "crate::limits::text")]
    pub reason: String,
}

impl OverrideRequest {
    /// When the override ends, given the time now; or what is wrong with the request.
    pub fn until(&self, now_ms: u64) -> Result<u64, String> {
        if self.domain.trim().is_empty() {
            return Err("domain: empty".into());
        }
        if self.reason.trim().is_empty() {
            return Err("reason: empty (say why the domain is overridden)".into());
        }
        crate::limits::check_len("domain", &self.domain, crate::limits::MAX_NAME_BYTES)?;
        crate::limits::check_len("reason", &self.reason, crate::limits::MAX_TEXT_BYTES)?;
        let until = match (self.until_ms, self.duration_s) {
            (Some(until), None) => until,
            (None, Some(duration)) => now_ms.saturating_add(duration.saturating_mul(1000)),
            _ => return Err("give exactly one of until_ms and duration_s".into()),
        };
        if until <= now_ms {
            return Err(format!("the override would end in the past ({until} ms)"));
        }
        if until - now_ms > MAX_OVERRIDE_S * 1000 {
            return Err(format!(
                "an override lasts at most {} days",
                MAX_OVERRIDE_S / 86_400
            ));
        }
        Ok(until)
    }
}

/// An operator override (`GET /1/overrides`, the answer to `POST /1/overrides`, and in
/// `/1/overview`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OverrideView {
    /// The override (revoke it with `DELETE /1/overrides/<id>`).
    pub id: String,
    /// The failure domain.
    pub domain: String,
    /// Unix ms when it ends.
    pub until_ms: u64,
    /// Why.
    pub reason: String,
    /// Who set it.
    pub who: String,
    /// Unix ms when it was set.
    pub created_ms: u64,
    /// Unix ms when it was revoked, if it was.
    #[serde(default)]
    pub revoked_ms: Option<u64>,
    /// Who revoked it.
    #[serde(default)]
    pub revoked_by: Option<String>,
    /// Whether it is in force now (not revoked, not expired).
    pub active: bool,
}

/// The storm breaker (`GET /1/breaker`, and in `/1/overview`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BreakerView {
    /// Whether it is open: no new disruption starts.
    pub open: bool,
    /// Unix ms when it last opened.
    #[serde(default)]
    pub since_ms: Option<u64>,
    /// Why it last opened.
    #[serde(default)]
    pub why: Option<String>,
    /// Who last reset it.
    #[serde(default)]
    pub reset_by: Option<String>,
    /// Unix ms of the last reset.
    #[serde(default)]
    pub reset_ms: Option<u64>,
}

/// `POST /1/breaker/reset`'s optional body.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BreakerReset {
    /// Why the operator closes it (audited; at most [`crate::limits::MAX_TEXT_BYTES`]).
    #[serde(default, deserialize_with = "crate::limits::optional_text")]
    pub reason: Option<String>,
}

/// A disrupted node and what holds it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Disrupted {
    /// The node.
    pub node: String,
    /// Its holder, for people (`incident <uuid>`, `admission <uuid> of kured`, `drained by
    /// incident <uuid> (canceled)` when nodecare left it so, `drained outside nodecare`).
    pub holder: String,
}

/// One failure domain as the gate last saw it (in `/1/overview`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DomainStatus {
    /// The domain.
    pub domain: String,
    /// Its nodes.
    pub nodes: Vec<String>,
    /// Its disrupted nodes.
    #[serde(default)]
    pub disrupted: Vec<Disrupted>,
    /// When an override of the domain ends, if one is in force.
    #[serde(default)]
    pub override_until_ms: Option<u64>,
}

/// A proposal the gate refused in its last round: who waits and why (in `/1/overview`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Waiting {
    /// The duty (`node-repair`, `admission`, ...).
    pub duty: String,
    /// What it acts on (`node node3`).
    pub subject: String,
    /// What blocks it.
    pub blocked_by: String,
}

/// One line of the coordinator's audit log of gate writes (`GET /1/audit`, and the last ones in
/// `/1/overview`): grants, renewals, releases and expiries, overrides and their revocation, the
/// breaker's opening and reset.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditEntry {
    /// Order of writing.
    pub seq: u64,
    /// Unix ms.
    pub at_ms: u64,
    /// The authenticated user, or `nodecare` for the coordinator itself.
    pub who: String,
    /// What was done (`grant disruption <id> of node3 to kured until ... ms`).
    pub what: String,
    /// Why (the reason given).
    pub why: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(ttl_s: u64) -> DisruptionRequest {
        DisruptionRequest {
            node: "node3".into(),
            reason: "kernel update".into(),
            requester: "kured@node3".into(),
            ttl_s,
        }
    }

    #[test]
    fn requests_are_checked() {
        assert_eq!(request(600).validate(), Ok(()));
        assert!(request(0).validate().unwrap_err().contains("ttl_s"));
        assert!(
            request(MAX_GRANT_TTL_S + 1)
                .validate()
                .unwrap_err()
                .contains("ttl_s")
        );
        let mut bad = request(60);
        bad.reason = " ".into();
        assert!(bad.validate().unwrap_err().contains("reason"));
        let mut bad = request(60);
        bad.node = String::new();
        assert!(bad.validate().unwrap_err().contains("node"));
        let mut bad = request(60);
        bad.requester = String::new();
        assert!(bad.validate().unwrap_err().contains("requester"));
        let text = r#"{"node":"n","reason":"r","requester":"q","ttl_s":5,"ttl":9}"#;
        assert!(serde_json::from_str::<DisruptionRequest>(text).is_err());
    }

    #[test]
    fn override_end_is_exactly_one_of_until_and_duration() {
        let mut request = OverrideRequest {
            domain: "group:default".into(),
            until_ms: None,
            duration_s: Some(3600),
            reason: "firmware".into(),
        };
        assert_eq!(request.until(1_000), Ok(3_601_000));
        request.until_ms = Some(5_000);
        assert!(request.until(1_000).unwrap_err().contains("exactly one"));
        request.duration_s = None;
        assert_eq!(request.until(1_000), Ok(5_000));
        assert!(request.until(5_000).unwrap_err().contains("past"));
        request.until_ms = Some(1_000 + MAX_OVERRIDE_S * 1000 + 1);
        assert!(request.until(1_000).unwrap_err().contains("at most"));
        request.until_ms = None;
        assert!(request.until(1_000).unwrap_err().contains("exactly one"));
        request.duration_s = Some(60);
        request.reason = String::new();
        assert!(request.until(1_000).unwrap_err().contains("reason"));
    }

    #[test]
    fn unknown_blocked_kinds_decode_as_other() {
        let known: BlockedBy =
            serde_json::from_str(r#"{"kind":"cap","what":"cluster: 1"}"#).unwrap();
        assert_eq!(
            known,
            BlockedBy::Cap {
                what: "cluster: 1".into()
            }
        );
        let later: BlockedBy = serde_json::from_str(r#"{"kind":"moon-phase","x":1}"#).unwrap();
        assert_eq!(later, BlockedBy::Other);
    }
}

/// `POST /1/approvals`: approve the work of holder `id` (an incident, a campaign, an instance
/// repair) with a change ticket, or refuse it with a reason; exactly one of the two.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApprovalRequest {
    /// The holder's id (a uuid).
    #[serde(deserialize_with = "crate::limits::name")]
    pub id: String,
    /// The change ticket it is approved with (1 to 64 bytes: letters, digits, `-_.:/#`).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "crate::limits::optional_name"
    )]
    pub ticket: Option<String>,
    /// Why it is refused.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "crate::limits::optional_text"
    )]
    pub refuse: Option<String>,
}

/// A decision on a holder's work, as the API shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApprovalView {
    /// The holder's id.
    pub id: String,
    /// Approved with this change ticket.
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

/// `GET /1/approvals`: what needs an approval, what waits for one (as the last round judged),
/// and the decisions kept.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct ApprovalsStatus {
    /// The kinds of work that need one (`campaign`, `evacuation`, `live-repair`,
    /// `instance-repair`).
    pub required: Vec<String>,
    /// `[approvals] moves_above`: work of an approvable kind whose drained or rebooted nodes are
    /// the primary of more instances needs one too.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub moves_above: Option<usize>,
    /// Holders waiting for one: `(holder, id)`.
    pub waiting: Vec<ApprovalWaiting>,
    /// The decisions, newest last.
    pub decisions: Vec<ApprovalView>,
    /// The change system asked (`[approvals] webhook`), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub change_system: Option<String>,
    /// Its last failure to decide (down, slow, a bad answer): the work keeps waiting.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub change_system_error: Option<String>,
}

impl ApprovalsStatus {
    /// What needs an approval, in words (`campaign, evacuation; work moving more than 10
    /// instances`); none when nothing does.
    pub fn needed_for(&self) -> Option<String> {
        let kinds = (!self.required.is_empty()).then(|| self.required.join(", "));
        let many = self.moves_above.map(|above| {
            let plural = if above == 1 { "" } else { "s" };
            format!("work moving more than {above} instance{plural}")
        });
        match (kinds, many) {
            (None, None) => None,
            (Some(kinds), None) => Some(kinds),
            (None, Some(many)) => Some(many),
            (Some(kinds), Some(many)) => Some(format!("{kinds}; {many}")),
        }
    }
}

/// A holder whose work waits for an approval.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApprovalWaiting {
    /// Who (`maintenance campaign <uuid>`).
    pub holder: String,
    /// Its id.
    pub id: String,
    /// What it would do (`reboot group 1 of 3 (n1, n2)`).
    pub subject: String,
    /// Refused before, and why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refused: Option<String>,
}

/// What the coordinator posts to the change system (`[approvals] webhook`) for work that waits
/// for an approval.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApprovalAsk {
    /// The holder's id, which the answer approves.
    pub id: String,
    /// Who waits (`maintenance campaign <uuid>`, `incident <uuid>`).
    pub holder: String,
    /// What it would do (`reboot group 1 of 3 (n1, n2)`, `node node3`).
    pub subject: String,
    /// The coordinator's node (the cluster's master).
    pub coordinator: String,
}

/// The change system's answer to an [`ApprovalAsk`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "decision", rename_all = "kebab-case")]
pub enum ApprovalAnswer {
    /// Approved, with the change ticket.
    Approve {
        /// The ticket.
        #[serde(deserialize_with = "crate::limits::name")]
        ticket: String,
    },
    /// Refused.
    Refuse {
        /// Why.
        #[serde(deserialize_with = "crate::limits::text")]
        reason: String,
    },
    /// Not decided yet: asked again later.
    Later,
}
