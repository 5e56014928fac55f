//! Repair history and the escalation ladder (pure): every incident's outcome is kept per node
//! for a while ([`record`]), and a new verdict is escalated by it ([`escalation`]) instead of
//! repaired the same way again: at most `max_live_repairs` live repairs of a node within
//! `window_secs`, then the next one escalates; a node that fails again within `settle_secs` of
//! a repair that completed is escalated rather than repaired the same way.

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::incident::{Action, Incident, RepairStatus};

/// Most entries the history keeps (the oldest ended ones go first).
pub const MAX_ENTRIES: usize = 2_000;

/// `[repair_ladder]` of the configuration. The defaults escalate nothing (as before).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LadderPolicy {
    /// Most live repairs of one node within `window_secs`; the next verdict asking for one is
    /// escalated to `escalate_to`. 0: no limit.
    pub max_live_repairs: u32,
    /// The window of `max_live_repairs`, in seconds.
    pub window_secs: f64,
    /// A node whose repair completed less than this many seconds ago and that asks for the
    /// same repair again is escalated instead (a live repair to `escalate_to`, an evacuation
    /// to `evacuate-failover`). 0: off.
    pub settle_secs: f64,
    /// What a live repair escalates to.
    pub escalate_to: Action,
    /// Seconds a `live-repair` verdict must hold (its incident stays noted, the verdict still
    /// reported) before it acts. 0: at once.
    pub hold_live_repair_secs: f64,
    /// Seconds an `evacuate` or `evacuate-failover` verdict must hold before it acts.
    pub hold_evacuate_secs: f64,
}

impl Default for LadderPolicy {
    fn default() -> Self {
        Self::OFF
    }
}

impl LadderPolicy {
    /// The default: nothing escalated by history, nothing held.
    pub const OFF: Self = Self {
        max_live_repairs: 0,
        window_secs: 86_400.0,
        settle_secs: 0.0,
        escalate_to: Action::Evacuate,
        hold_live_repair_secs: 0.0,
        hold_evacuate_secs: 0.0,
    };
}

impl LadderPolicy {
    /// Checks the values (a name for each problem).
    pub fn validate(&self) -> Result<(), String> {
        if !self.window_secs.is_finite() || self.window_secs < 0.0 {
            return Err(format!(
                "repair_ladder.window_secs must be a number of seconds, got {}",
                self.window_secs
            ));
        }
        if !self.settle_secs.is_finite() || self.settle_secs < 0.0 {
            return Err(format!(
                "repair_ladder.settle_secs must be a number of seconds, got {}",
                self.settle_secs
            ));
        }
        for (name, secs) in [
            ("hold_live_repair_secs", self.hold_live_repair_secs),
            ("hold_evacuate_secs", self.hold_evacuate_secs),
        ] {
            if !secs.is_finite() || secs < 0.0 {
                return Err(format!(
                    "repair_ladder.{name} must be a number of seconds, got {secs}"
                ));
            }
        }
        if self.escalate_to == Action::LiveRepair {
            return Err(
                "repair_ladder.escalate_to must be evacuate or evacuate-failover".to_owned(),
            );
        }
        Ok(())
    }

    /// How long a verdict asking for `action` must hold before it acts, and the key that says
    /// so.
    pub const fn hold(&self, action: Action) -> (f64, &'static str) {
        match action {
            Action::LiveRepair => (self.hold_live_repair_secs, "hold_live_repair_secs"),
            Action::Evacuate | Action::EvacuateFailover => {
                (self.hold_evacuate_secs, "hold_evacuate_secs")
            }
        }
    }

    /// How long the history must remember an outcome.
    pub fn keep_secs(&self) -> f64 {
        self.window_secs.max(self.settle_secs).max(3_600.0)
    }
}

/// One incident in a node's repair history.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Repaired {
    /// The incident.
    pub incident: Uuid,
    /// Its node's uuid (identity survives a rename).
    pub node_uuid: String,
    /// What it did (after any escalation).
    pub action: Action,
    /// When it was opened, Unix seconds.
    pub opened_s: f64,
    /// When it ended (completed, failed or canceled), Unix seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended_s: Option<f64>,
    /// How it stands or ended.
    pub status: RepairStatus,
}

/// Brings `history` up to date with the incidents stored now at `now_s`, and forgets what is
/// older than `keep_secs` and no longer an incident. Returns whether it changed.
pub fn record(
    history: &mut Vec<Repaired>,
    incidents: &[Incident],
    now_s: f64,
    keep_secs: f64,
) -> bool {
    let mut changed = false;
    let mut at: std::collections::HashMap<Uuid, usize> = history
        .iter()
        .enumerate()
        .map(|(i, r)| (r.incident, i))
        .collect();
    for incident in incidents {
        let ended = matches!(
            incident.repair_status,
            RepairStatus::Completed | RepairStatus::Failed | RepairStatus::Canceled
        );
        let entry = Repaired {
            incident: incident.uuid,
            node_uuid: incident.node_uuid.clone(),
            action: incident.action,
            opened_s: incident.ctime,
            ended_s: None,
            status: incident.repair_status,
        };
        match at.get(&incident.uuid).and_then(|i| history.get_mut(*i)) {
            Some(known) => {
                let ended_s = match known.ended_s {
                    Some(at) => Some(at),
                    None if ended => Some(incident.mtime),
                    None => None,
                };
                if known.status != incident.repair_status
                    || known.action != incident.action
                    || known.ended_s != ended_s
                {
                    known.status = incident.repair_status;
                    known.action = incident.action;
                    known.ended_s = ended_s;
                    changed = true;
                }
            }
            None => {
                at.insert(incident.uuid, history.len());
                history.push(Repaired {
                    ended_s: ended.then_some(incident.mtime),
                    ..entry
                });
                changed = true;
            }
        }
    }
    let before = history.len();
    let cutoff = now_s - keep_secs;
    let current: std::collections::HashSet<Uuid> = incidents.iter().map(|i| i.uuid).collect();
    history.retain(|r| current.contains(&r.incident) || r.ended_s.unwrap_or(r.opened_s) >= cutoff);
    if history.len() > MAX_ENTRIES {
        history.sort_by(|a, b| {
            a.ended_s
                .unwrap_or(f64::MAX)
                .total_cmp(&b.ended_s.unwrap_or(f64::MAX))
        });
        let excess = history.len() - MAX_ENTRIES;
        history.drain(..excess);
    }
    changed || history.len() != before
}

/// Seconds as people read a span (`24 h`, `90 min`, `45 s`).
fn span(seconds: f64) -> String {
    if seconds >= 7_200.0 && (seconds % 3_600.0).abs() < 1.0 {
        format!("{:.0} h", seconds / 3_600.0)
    } else if seconds >= 120.0 {
        format!("{:.0} min", seconds / 60.0)
    } else {
        format!("{seconds:.0} s")
    }
}

fn ordinal(n: usize) -> String {
    let suffix = match (n % 10, n % 100) {
        (1, 11) | (2, 12) | (3, 13) => "th",
        (1, _) => "st",
        (2, _) => "nd",
        (3, _) => "rd",
        _ => "th",
    };
    format!("{n}{suffix}")
}

/// Why the ladder escalates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Why {
    /// Too many live repairs of the node within the window.
    LiveRepairLimit,
    /// The node fails again within the settle period after a repair of the same kind.
    FailedAgain,
}

impl Why {
    /// The metric's label.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::LiveRepairLimit => "live_repair_limit",
            Self::FailedAgain => "failed_again",
        }
    }
}

/// An escalation by history: the action instead, why (the metric's label) and what to say.
#[derive(Debug, Clone, PartialEq)]
pub struct Escalation {
    /// The action the incident takes instead.
    pub to: Action,
    /// Why, as a label.
    pub why: Why,
    /// Why, for people (in the incident's history).
    pub said: String,
}

/// What a new verdict asking for `action` on node `node` (uuid `node_uuid`) becomes at
/// `now_s`, given the node's `history`: `None` when it is acted on as asked.
pub fn escalation(
    history: &[Repaired],
    node_uuid: &str,
    node: &str,
    action: Action,
    now_s: f64,
    policy: &LadderPolicy,
) -> Option<Escalation> {
    let mine = || history.iter().filter(move |r| r.node_uuid == node_uuid);
    let next = |action: Action| match action {
        Action::LiveRepair => Some(policy.escalate_to),
        Action::Evacuate => Some(Action::EvacuateFailover),
        Action::EvacuateFailover => None,
    };
    if action == Action::LiveRepair && policy.max_live_repairs > 0 {
        let done = mine()
            .filter(|r| r.action == Action::LiveRepair && r.opened_s >= now_s - policy.window_secs)
            .count();
        if done >= usize::try_from(policy.max_live_repairs).unwrap_or(usize::MAX) {
            let to = policy.escalate_to;
            return Some(Escalation {
                to,
                why: Why::LiveRepairLimit,
                said: format!(
                    "{} live repair of {node} in {} (at most {}, repair_ladder.max_live_repairs): escalated to {}",
                    ordinal(done + 1),
                    span(policy.window_secs),
                    policy.max_live_repairs,
                    to.as_str()
                ),
            });
        }
    }
    if policy.settle_secs > 0.0 {
        let last = mine()
            .filter(|r| r.action == action && r.status == RepairStatus::Completed)
            .filter_map(|r| r.ended_s)
            .filter(|ended| *ended >= now_s - policy.settle_secs)
            .max_by(f64::total_cmp);
        if let Some(ended) = last
            && let Some(to) = next(action)
        {
            return Some(Escalation {
                to,
                why: Why::FailedAgain,
                said: format!(
                    "{node} fails again {} after its {} completed (settle period {}, repair_ladder.settle_secs): escalated to {}",
                    span((now_s - ended).max(0.0)),
                    action.as_str(),
                    span(policy.settle_secs),
                    to.as_str()
                ),
            });
        }
    }
    None
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "test code")]

    use super::*;
    use proptest::prelude::*;

    fn repaired(n: u128, action: Action, opened_s: f64, ended_s: Option<f64>) -> Repaired {
        Repaired {
            incident: Uuid::from_u128(n),
            node_uuid: "u7".into(),
            action,
            opened_s,
            ended_s,
            status: if ended_s.is_some() {
                RepairStatus::Completed
            } else {
                RepairStatus::Pending
            },
        }
    }

    const DAY: f64 = 86_400.0;

    fn twice_a_day() -> LadderPolicy {
        LadderPolicy {
            max_live_repairs: 2,
            ..LadderPolicy::default()
        }
    }

    #[test]
    fn the_third_live_repair_in_a_day_is_an_evacuation() {
        let history = vec![
            repaired(1, Action::LiveRepair, 10_000.0, Some(10_100.0)),
            repaired(2, Action::LiveRepair, 40_000.0, Some(40_100.0)),
        ];
        let now = 50_000.0;
        let escalated = escalation(
            &history,
            "u7",
            "node7",
            Action::LiveRepair,
            now,
            &twice_a_day(),
        );
        assert_eq!(
            escalated,
            Some(Escalation {
                to: Action::Evacuate,
                why: Why::LiveRepairLimit,
                said: "3rd live repair of node7 in 24 h (at most 2, repair_ladder.max_live_repairs): escalated to evacuate".into()
            })
        );
        // Another node, or a day later: repaired as asked.
        assert_eq!(
            escalation(
                &history,
                "u8",
                "node8",
                Action::LiveRepair,
                now,
                &twice_a_day()
            ),
            None
        );
        assert_eq!(
            escalation(
                &history,
                "u7",
                "node7",
                Action::LiveRepair,
                10_000.0 + DAY + 1.0,
                &twice_a_day()
            ),
            None
        );
        // Off by default.
        assert_eq!(
            escalation(
                &history,
                "u7",
                "node7",
                Action::LiveRepair,
                now,
                &LadderPolicy::default()
            ),
            None
        );
    }

    #[test]
    fn failing_again_within_the_settle_period_escalates() {
        let policy = LadderPolicy {
            settle_secs: 3_600.0,
            ..LadderPolicy::default()
        };
        let history = vec![repaired(1, Action::Evacuate, 1_000.0, Some(2_000.0))];
        let again = escalation(&history, "u7", "node7", Action::Evacuate, 3_200.0, &policy);
        assert_eq!(
            again.as_ref().map(|e| (e.to, e.why)),
            Some((Action::EvacuateFailover, Why::FailedAgain))
        );
        assert_eq!(
            again.map(|e| e.said),
            Some("node7 fails again 20 min after its evacuate completed (settle period 60 min, repair_ladder.settle_secs): escalated to evacuate-failover".into())
        );
        // After the settle period, or a failed repair, or another action: as asked.
        assert_eq!(
            escalation(&history, "u7", "node7", Action::Evacuate, 5_700.0, &policy),
            None
        );
        assert_eq!(
            escalation(
                &history,
                "u7",
                "node7",
                Action::LiveRepair,
                3_200.0,
                &policy
            ),
            None
        );
        let failed = vec![Repaired {
            status: RepairStatus::Failed,
            ..history[0].clone()
        }];
        assert_eq!(
            escalation(&failed, "u7", "node7", Action::Evacuate, 3_200.0, &policy),
            None
        );
        // Nothing is above evacuate-failover.
        let top = vec![repaired(
            1,
            Action::EvacuateFailover,
            1_000.0,
            Some(2_000.0),
        )];
        assert_eq!(
            escalation(
                &top,
                "u7",
                "node7",
                Action::EvacuateFailover,
                3_200.0,
                &policy
            ),
            None
        );
    }

    #[test]
    fn bad_policies_are_named() {
        for (policy, says) in [
            (
                LadderPolicy {
                    window_secs: -1.0,
                    ..LadderPolicy::default()
                },
                "window_secs",
            ),
            (
                LadderPolicy {
                    settle_secs: f64::NAN,
                    ..LadderPolicy::default()
                },
                "settle_secs",
            ),
            (
                LadderPolicy {
                    escalate_to: Action::LiveRepair,
                    ..LadderPolicy::default()
                },
                "escalate_to",
            ),
        ] {
            assert!(
                policy.validate().is_err_and(|e| e.contains(says)),
                "{policy:?}"
            );
        }
        assert_eq!(LadderPolicy::default().validate(), Ok(()));
    }

    proptest! {
        /// Whatever the history, the ladder never de-escalates, never escalates to a live
        /// repair, and with at most N live repairs in the window asks for no more than N+1th
        /// to be a live repair.
        #[test]
        fn the_ladder_only_climbs(
            entries in prop::collection::vec((0u8..3, 0.0f64..200_000.0, prop::option::of(0.0f64..5_000.0)), 0..12),
            asked in 0u8..3,
            now in 0.0f64..250_000.0,
            max in 0u32..4,
            settle in prop::sample::select(vec![0.0, 600.0, 3_600.0]),
        ) {
            let action = |n: u8| match n { 0 => Action::LiveRepair, 1 => Action::Evacuate, _ => Action::EvacuateFailover };
            let history: Vec<Repaired> = entries.iter().enumerate()
                .map(|(i, (a, opened, took))| repaired(i as u128, action(*a), *opened, took.map(|t| opened + t)))
                .collect();
            let policy = LadderPolicy { max_live_repairs: max, settle_secs: settle, ..LadderPolicy::default() };
            let asked = action(asked);
            if let Some(e) = escalation(&history, "u7", "node7", asked, now, &policy) {
                prop_assert!(e.to.invasiveness() > asked.invasiveness());
                prop_assert!(e.to != Action::LiveRepair);
                prop_assert!(!e.said.is_empty());
            } else if asked == Action::LiveRepair && max > 0 {
                let done = history.iter().filter(|r| r.action == Action::LiveRepair && r.opened_s >= now - DAY).count();
                prop_assert!(done < max as usize);
            }
        }
    }

    #[test]
    fn the_history_follows_the_incidents_and_forgets_old_outcomes() {
        use nodecare_protocol::{CanonicalJson, NodeVerdict, ScriptVerdict};
        let script =
            ScriptVerdict::parse(br#"{"status":"live-repair","command":"fan","details":"fan"}"#)
                .unwrap();
        let verdict =
            NodeVerdict::merge([("fan".to_owned(), script)].into_iter().collect()).unwrap();
        let original = CanonicalJson::new(&serde_json::to_value(&verdict).unwrap()).unwrap();
        let mut incident = Incident::new(
            Uuid::from_u128(1),
            "node7",
            "u7",
            verdict,
            original,
            Action::LiveRepair,
            100.0,
        );
        let mut history = Vec::new();
        assert!(record(
            &mut history,
            std::slice::from_ref(&incident),
            100.0,
            3_600.0
        ));
        assert!(!record(
            &mut history,
            std::slice::from_ref(&incident),
            101.0,
            3_600.0
        ));
        assert_eq!(history[0].ended_s, None);
        incident.repair_status = RepairStatus::Completed;
        incident.mtime = 200.0;
        assert!(record(
            &mut history,
            std::slice::from_ref(&incident),
            200.0,
            3_600.0
        ));
        assert_eq!(history[0].ended_s, Some(200.0));
        // Forgotten incident: kept until keep_secs after it ended.
        assert!(!record(&mut history, &[], 3_000.0, 3_600.0));
        assert_eq!(history.len(), 1);
        assert!(record(&mut history, &[], 3_801.0, 3_600.0));
        assert!(history.is_empty());
    }

    /// The packaged configuration's `[repair_ladder]` section, every commented key set as
    /// written, is the default.
    #[test]
    fn the_packaged_section_is_the_default() {
        let example = include_str!("../../../../packaging/config/coordinator.toml");
        let section: String = example
            .split("#[repair_ladder]")
            .nth(1)
            .unwrap_or_default()
            .split("\n\n")
            .next()
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.strip_prefix('#'))
            .filter(|l| l.contains(" = ") && !l.starts_with(' '))
            .collect::<Vec<_>>()
            .join("\n");
        let config = crate::config::Config::parse(&format!("[repair_ladder]\n{section}\n"));
        assert_eq!(
            config.map(|c| c.repair_ladder).map_err(|e| e.to_string()),
            Ok(LadderPolicy::default())
        );
    }
}
