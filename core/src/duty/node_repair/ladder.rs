//! Repair history and the escalation ladder (pure): every incident's outcome is kept per node
//! for a while ([`record`]), and a new verdict is escalated by it ([`escalation`]) instead of
//! repaired the same way again: at most `max_live_repairs` live repairs of a node within
//! `window_secs`, then the next one escalates; a node that fails again within `settle_secs` of
//! a repair that completed is escalated rather than repaired the same way. A repair command
//! can have a limit of its own (`[repair_ladder.commands.<command>]`), counted over the live
//! repairs with that command; and a node that stayed healthy (no incident open on it) for
//! `reset_after_healthy_secs` after its last repair starts afresh: the repairs before no longer
//! count.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::incident::{Action, Incident, RepairStatus};

/// Most entries the history keeps (the oldest ended ones go first).
pub const MAX_ENTRIES: usize = 2_000;

/// `[repair_ladder.commands.<command>]`: the limit of live repairs with one repair command.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CommandLimit {
    /// Most live repairs of one node with this command within the window; the next verdict
    /// asking for one is escalated.
    pub max_live_repairs: u32,
    /// The window, in seconds (none: the ladder's `window_secs`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window_secs: Option<f64>,
    /// What it escalates to (none: the ladder's `escalate_to`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub escalate_to: Option<Action>,
}

/// `[repair_ladder]` of the configuration. The defaults escalate nothing (as before).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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
    /// Seconds a node must stay healthy (no incident open on it) after its last repair ended
    /// before its counters reset: the repairs before count no more. 0: only the window counts.
    pub reset_after_healthy_secs: f64,
    /// Limits of their own for repair commands, by command name (counted over the live repairs
    /// with that command; the ladder's own limit counts them all).
    pub commands: BTreeMap<String, CommandLimit>,
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
        reset_after_healthy_secs: 0.0,
        commands: BTreeMap::new(),
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
            ("reset_after_healthy_secs", self.reset_after_healthy_secs),
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
        if self.commands.len() > 256 {
            return Err(format!(
                "repair_ladder.commands: {} commands, at most 256",
                self.commands.len()
            ));
        }
        for (command, limit) in &self.commands {
            if command.is_empty()
                || command.len() > 128
                || !command
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
            {
                return Err(format!(
                    "repair_ladder.commands: {command:?} is not a repair command's name"
                ));
            }
            if limit.max_live_repairs == 0 {
                return Err(format!(
                    "repair_ladder.commands.{command}.max_live_repairs must be at least 1"
                ));
            }
            if limit
                .window_secs
                .is_some_and(|secs| !secs.is_finite() || secs <= 0.0)
            {
                return Err(format!(
                    "repair_ladder.commands.{command}.window_secs must be a positive number of seconds"
                ));
            }
            if limit.escalate_to == Some(Action::LiveRepair) {
                return Err(format!(
                    "repair_ladder.commands.{command}.escalate_to must be evacuate or evacuate-failover"
                ));
            }
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
        self.commands
            .values()
            .filter_map(|c| c.window_secs)
            .fold(self.window_secs.max(self.settle_secs), f64::max)
            .max(3_600.0)
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
    /// A live repair's command.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
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
            command: (incident.action == Action::LiveRepair)
                .then(|| incident.verdict.command.clone())
                .flatten(),
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
                    || known.command != entry.command
                {
                    known.status = incident.repair_status;
                    known.action = incident.action;
                    known.ended_s = ended_s;
                    known.command = entry.command;
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
pub(crate) fn span(seconds: f64) -> String {
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

/// What the ladder said when it opened `incident` more invasive than its verdict asked (the
/// line of its history), if it did.
pub fn said_of(incident: &Incident) -> Option<&str> {
    incident
        .history
        .iter()
        .map(|h| h.event.as_str())
        .find(|event| event.contains("repair_ladder.") && event.contains("): escalated to "))
}

/// From when a node's repairs count, given its history (`mine`) at `now_s`: the start of the
/// repair that followed its last healthy stretch (no incident open) of at least `reset_secs`,
/// or `now_s` when it has been healthy that long since its last repair; `None`: all count.
fn counted_from(mine: &[&Repaired], now_s: f64, reset_secs: f64) -> Option<f64> {
    if reset_secs <= 0.0 {
        return None;
    }
    let mut sorted: Vec<&Repaired> = mine.to_vec();
    sorted.sort_by(|a, b| a.opened_s.total_cmp(&b.opened_s));
    let mut from = None;
    // The end of the last repair so far (`INFINITY` while one is open).
    let mut busy_until: Option<f64> = None;
    for repair in sorted {
        if busy_until.is_some_and(|end| repair.opened_s - end >= reset_secs) {
            from = Some(repair.opened_s);
        }
        let end = repair.ended_s.unwrap_or(f64::INFINITY);
        busy_until = Some(busy_until.map_or(end, |until: f64| until.max(end)));
    }
    if busy_until.is_some_and(|end| now_s - end >= reset_secs) {
        from = Some(now_s);
    }
    from
}

/// What a new verdict asking for `action` (a live repair: with `command`) on node `node` (uuid
/// `node_uuid`) becomes at `now_s`, given the node's `history`: `None` when it is acted on as
/// asked.
pub fn escalation(
    history: &[Repaired],
    node_uuid: &str,
    node: &str,
    action: Action,
    command: Option<&str>,
    now_s: f64,
    policy: &LadderPolicy,
) -> Option<Escalation> {
    let all: Vec<&Repaired> = history
        .iter()
        .filter(|r| r.node_uuid == node_uuid)
        .collect();
    let from = counted_from(&all, now_s, policy.reset_after_healthy_secs);
    let mine = || {
        all.iter()
            .copied()
            .filter(move |r| from.is_none_or(|from| r.opened_s >= from))
    };
    if action == Action::LiveRepair
        && let Some(command) = command
        && let Some(limit) = policy.commands.get(command)
    {
        let window = limit.window_secs.unwrap_or(policy.window_secs);
        let done = mine()
            .filter(|r| {
                r.action == Action::LiveRepair
                    && r.command.as_deref() == Some(command)
                    && r.opened_s >= now_s - window
            })
            .count();
        if done >= usize::try_from(limit.max_live_repairs).unwrap_or(usize::MAX) {
            let to = limit.escalate_to.unwrap_or(policy.escalate_to);
            return Some(Escalation {
                to,
                why: Why::LiveRepairLimit,
                said: format!(
                    "{} live repair of {node} with {command} in {} (at most {}, repair_ladder.commands.{command}.max_live_repairs): escalated to {}",
                    ordinal(done + 1),
                    span(window),
                    limit.max_live_repairs,
                    to.as_str()
                ),
            });
        }
    }
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
            command: (action == Action::LiveRepair).then(|| "reset-fan".to_owned()),
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
            None,
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
                None,
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
                None,
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
                None,
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
        let again = escalation(
            &history,
            "u7",
            "node7",
            Action::Evacuate,
            None,
            3_200.0,
            &policy,
        );
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
            escalation(
                &history,
                "u7",
                "node7",
                Action::Evacuate,
                None,
                5_700.0,
                &policy
            ),
            None
        );
        assert_eq!(
            escalation(
                &history,
                "u7",
                "node7",
                Action::LiveRepair,
                None,
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
            escalation(
                &failed,
                "u7",
                "node7",
                Action::Evacuate,
                None,
                3_200.0,
                &policy
            ),
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
                None,
                3_200.0,
                &policy
            ),
            None
        );
    }

    /// `[repair_ladder.commands.reset-fan]`: its own limit counts the live repairs with that
    /// command only, and escalates to its own action.
    #[test]
    fn a_repair_command_has_a_limit_of_its_own() {
        let policy = LadderPolicy {
            commands: BTreeMap::from([(
                "reset-fan".to_owned(),
                CommandLimit {
                    max_live_repairs: 1,
                    window_secs: Some(3_600.0),
                    escalate_to: Some(Action::EvacuateFailover),
                },
            )]),
            ..LadderPolicy::default()
        };
        let history = vec![repaired(1, Action::LiveRepair, 1_000.0, Some(1_100.0))];
        assert_eq!(
            escalation(
                &history,
                "u7",
                "node7",
                Action::LiveRepair,
                Some("reset-fan"),
                2_000.0,
                &policy
            ),
            Some(Escalation {
                to: Action::EvacuateFailover,
                why: Why::LiveRepairLimit,
                said: "2nd live repair of node7 with reset-fan in 60 min (at most 1, repair_ladder.commands.reset-fan.max_live_repairs): escalated to evacuate-failover".into()
            })
        );
        // Another command, or past the command's window: as asked.
        for (command, now) in [(Some("reset-psu"), 2_000.0), (Some("reset-fan"), 4_700.0)] {
            assert_eq!(
                escalation(
                    &history,
                    "u7",
                    "node7",
                    Action::LiveRepair,
                    command,
                    now,
                    &policy
                ),
                None,
                "{command:?} at {now}"
            );
        }
    }

    /// `reset_after_healthy_secs`: a node healthy (no incident open) that long after its last
    /// repair starts afresh; a shorter stretch, or an incident still open, does not reset.
    #[test]
    fn a_node_healthy_long_enough_starts_afresh() {
        let policy = LadderPolicy {
            max_live_repairs: 1,
            reset_after_healthy_secs: 3_600.0,
            ..LadderPolicy::default()
        };
        let once = vec![repaired(1, Action::LiveRepair, 1_000.0, Some(1_100.0))];
        let asked = |history: &[Repaired], now: f64| {
            escalation(
                history,
                "u7",
                "node7",
                Action::LiveRepair,
                Some("reset-fan"),
                now,
                &policy,
            )
            .map(|e| e.to)
        };
        assert_eq!(asked(&once, 2_000.0), Some(Action::Evacuate));
        assert_eq!(asked(&once, 4_700.0), None);
        // A healthy stretch long enough in the middle: only the repairs after it count.
        let twice = vec![
            repaired(1, Action::LiveRepair, 1_000.0, Some(1_100.0)),
            repaired(2, Action::LiveRepair, 10_000.0, Some(10_100.0)),
        ];
        assert_eq!(asked(&twice, 10_500.0), Some(Action::Evacuate));
        let policy2 = LadderPolicy {
            max_live_repairs: 2,
            ..policy.clone()
        };
        assert_eq!(
            escalation(
                &twice,
                "u7",
                "node7",
                Action::LiveRepair,
                None,
                10_500.0,
                &policy2
            ),
            None,
            "the first repair, before the healthy stretch, no longer counts"
        );
        // An incident still open: never healthy since.
        let open = vec![
            repaired(1, Action::LiveRepair, 1_000.0, Some(1_100.0)),
            repaired(2, Action::Evacuate, 1_200.0, None),
        ];
        assert_eq!(asked(&open, 9_000.0), Some(Action::Evacuate));
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
            (
                LadderPolicy {
                    reset_after_healthy_secs: -5.0,
                    ..LadderPolicy::default()
                },
                "reset_after_healthy_secs",
            ),
            (
                LadderPolicy {
                    commands: BTreeMap::from([(
                        "a b".to_owned(),
                        CommandLimit {
                            max_live_repairs: 1,
                            window_secs: None,
                            escalate_to: None,
                        },
                    )]),
                    ..LadderPolicy::default()
                },
                "not a repair command",
            ),
            (
                LadderPolicy {
                    commands: BTreeMap::from([(
                        "reset-fan".to_owned(),
                        CommandLimit {
                            max_live_repairs: 0,
                            window_secs: None,
                            escalate_to: None,
                        },
                    )]),
                    ..LadderPolicy::default()
                },
                "commands.reset-fan.max_live_repairs",
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
            if let Some(e) = escalation(&history, "u7", "node7", asked, None, now, &policy) {
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

    /// A command's limit as the configuration spells it.
    #[test]
    fn a_command_limit_is_read_from_the_configuration() {
        let config = crate::config::Config::parse(
            "[repair_ladder]\nreset_after_healthy_secs = 600.0\n\
             [repair_ladder.commands.reset-fan]\nmax_live_repairs = 2\nescalate_to = \"evacuate-failover\"\n",
        )
        .unwrap();
        assert_eq!(config.repair_ladder.reset_after_healthy_secs, 600.0);
        assert_eq!(
            config.repair_ladder.commands.get("reset-fan"),
            Some(&CommandLimit {
                max_live_repairs: 2,
                window_secs: None,
                escalate_to: Some(Action::EvacuateFailover),
            })
        );
        assert!(
            crate::config::Config::parse(
                "[repair_ladder.commands.reset-fan]\nmax_live_repairs = 0\n"
            )
            .and_then(|c| c.validate())
            .is_err()
        );
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
