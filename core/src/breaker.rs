//! The storm breaker (pure): mass failure usually means a broken detector, not broken hardware.
//!
//! The breaker opens when, within a window, more than `max_incident_nodes` nodes or more than
//! `max_incident_percent` of the nodes (and at least `min_incident_nodes`) opened actionable
//! incidents, or when more than
//! `max_unreachable_percent` of the agents gave no verified report (the caller counts only agents
//! it has read verified before: one still starting is no storm). While it is open the gate
//! starts no new disruption; work in flight finishes. It stays open until an operator resets it
//! (`nodecare breaker reset`: incidents opened before the reset no longer count) or, when
//! `auto_close_secs` is set, until the storm conditions have not held for that long.

use serde::{Deserialize, Serialize};

/// The breaker's settings.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct BreakerPolicy {
    /// Open when more than this many nodes opened incidents within the window.
    pub max_incident_nodes: usize,
    /// Open when more than this percentage of the nodes opened incidents within the window
    /// (and at least `min_incident_nodes` did).
    pub max_incident_percent: f64,
    /// The percentage rule needs at least this many nodes with incidents (a small cluster's
    /// two incidents are not a storm).
    pub min_incident_nodes: usize,
    /// The window, in seconds.
    pub window_secs: f64,
    /// Open when more than this percentage of the agents are unreachable or unverifiable (at
    /// least two agents).
    pub max_unreachable_percent: f64,
    /// Close by itself once the storm conditions have not held for this many seconds (none:
    /// only an operator closes it).
    pub auto_close_secs: Option<f64>,
}

impl Default for BreakerPolicy {
    fn default() -> Self {
        Self {
            max_incident_nodes: 5,
            max_incident_percent: 30.0,
            min_incident_nodes: 3,
            window_secs: 120.0,
            max_unreachable_percent: 50.0,
            auto_close_secs: None,
        }
    }
}

/// The breaker's persisted state.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct BreakerState {
    /// Unix ms when it opened, and why; `None` while closed.
    pub open: Option<(u64, String)>,
    /// Unix ms since when the storm conditions no longer hold (while open).
    pub quiet_since_ms: Option<u64>,
    /// Unix ms of the last operator reset (incidents opened before it do not count).
    pub reset_ms: Option<u64>,
}

/// What the breaker reads each round.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Signals {
    /// Nodes in the cluster.
    pub nodes: usize,
    /// For each node with an incident, when its newest incident opened (Unix ms).
    pub incident_opened_ms: Vec<(String, u64)>,
    /// Agents read.
    pub agents: usize,
    /// Agents without a verified report (unreachable or unverifiable).
    pub agents_failed: usize,
}

/// A change of the breaker, for the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Transition {
    /// It opened.
    Opened(String),
    /// It closed by itself.
    Closed(String),
}

fn percent(part: usize, whole: usize) -> f64 {
    if whole == 0 {
        0.0
    } else {
        part as f64 * 100.0 / whole as f64
    }
}

/// Why the storm conditions hold now, if they do.
pub fn storm(
    policy: &BreakerPolicy,
    state: &BreakerState,
    signals: &Signals,
    now_ms: u64,
) -> Option<String> {
    let window_ms = (policy.window_secs.max(0.0) * 1000.0) as u64;
    let since = now_ms
        .saturating_sub(window_ms)
        .max(state.reset_ms.unwrap_or(0));
    let mut recent: Vec<&str> = signals
        .incident_opened_ms
        .iter()
        .filter(|(_, at)| *at >= since)
        .map(|(node, _)| node.as_str())
        .collect();
    recent.sort_unstable();
    recent.dedup();
    let share = percent(recent.len(), signals.nodes);
    if recent.len() > policy.max_incident_nodes
        || (recent.len() >= policy.min_incident_nodes && share > policy.max_incident_percent)
    {
        return Some(format!(
            "{} of {} nodes opened incidents within {} s (limits: {} nodes, {}%)",
            recent.len(),
            signals.nodes,
            policy.window_secs,
            policy.max_incident_nodes,
            policy.max_incident_percent
        ));
    }
    let failed = percent(signals.agents_failed, signals.agents);
    if signals.agents_failed >= 2 && failed > policy.max_unreachable_percent {
        return Some(format!(
            "{} of {} agents unreachable or unverifiable (limit {}%)",
            signals.agents_failed, signals.agents, policy.max_unreachable_percent
        ));
    }
    None
}

/// The breaker after this round's signals.
pub fn step(
    policy: &BreakerPolicy,
    mut state: BreakerState,
    signals: &Signals,
    now_ms: u64,
) -> (BreakerState, Option<Transition>) {
    let why = storm(policy, &state, signals, now_ms);
    match (&state.open, why) {
        (None, Some(why)) => {
            state.open = Some((now_ms, why.clone()));
            state.quiet_since_ms = None;
            (state, Some(Transition::Opened(why)))
        }
        (None, None) => (state, None),
        (Some(_), Some(_)) => {
            state.quiet_since_ms = None;
            (state, None)
        }
        (Some(_), None) => {
            let quiet = *state.quiet_since_ms.get_or_insert(now_ms);
            match policy.auto_close_secs {
                Some(secs) if now_ms.saturating_sub(quiet) >= (secs.max(0.0) * 1000.0) as u64 => {
                    state.open = None;
                    state.quiet_since_ms = None;
                    (
                        state,
                        Some(Transition::Closed(format!("no storm for {secs} s"))),
                    )
                }
                _ => (state, None),
            }
        }
    }
}

/// An operator's reset: closed, and incidents opened before now no longer count.
pub fn reset(mut state: BreakerState, now_ms: u64) -> BreakerState {
    state.open = None;
    state.quiet_since_ms = None;
    state.reset_ms = Some(now_ms);
    state
}

#[cfg(test)]
mod tests {
    use super::*;

    fn signals(incidents: usize, nodes: usize, at: u64) -> Signals {
        Signals {
            nodes,
            incident_opened_ms: (0..incidents).map(|i| (format!("n{i}"), at)).collect(),
            agents: nodes,
            agents_failed: 0,
        }
    }

    #[test]
    fn thresholds() {
        let policy = BreakerPolicy::default();
        let state = BreakerState::default();
        let table = [
            (2, 5, false),   // 40 % of a small cluster, but only two nodes: no storm
            (3, 5, true),    // 60 %
            (3, 20, false),  // 15 %
            (5, 100, false), // five nodes is the limit
            (6, 100, true),
            (50, 100, true),
        ];
        for (incidents, nodes, open) in table {
            assert_eq!(
                storm(&policy, &state, &signals(incidents, nodes, 1_000), 1_000).is_some(),
                open,
                "{incidents}/{nodes}"
            );
        }
        // Outside the window they do not count.
        assert!(storm(&policy, &state, &signals(50, 100, 1_000), 1_000 + 121_000).is_none());
        let mut unreachable = signals(0, 10, 0);
        unreachable.agents_failed = 6;
        assert_eq!(
            storm(&policy, &state, &unreachable, 0).as_deref(),
            Some("6 of 10 agents unreachable or unverifiable (limit 50%)")
        );
        unreachable.agents = 1;
        unreachable.agents_failed = 1;
        assert!(storm(&policy, &state, &unreachable, 0).is_none());
    }

    #[test]
    fn opens_stays_open_and_closes_by_reset_or_quiet() {
        let mut policy = BreakerPolicy::default();
        let (state, change) = step(&policy, BreakerState::default(), &signals(50, 100, 0), 0);
        assert!(matches!(change, Some(Transition::Opened(_))));
        // The storm ends, but only an operator closes it by default.
        let (state, change) = step(&policy, state, &signals(0, 100, 0), 10_000_000);
        assert_eq!(change, None);
        assert!(state.open.is_some());
        let state = reset(state, 20_000_000);
        assert!(state.open.is_none());
        // Incidents from before the reset do not reopen it.
        let (state, change) = step(&policy, state, &signals(50, 100, 19_999_000), 20_001_000);
        assert_eq!(change, None);
        // Auto close after a quiet period.
        policy.auto_close_secs = Some(60.0);
        let (state, _) = step(&policy, state, &signals(50, 100, 20_002_000), 20_002_000);
        assert!(state.open.is_some());
        let (state, change) = step(&policy, state, &signals(0, 100, 0), 20_003_000);
        assert_eq!(change, None);
        let (state, change) = step(&policy, state, &signals(0, 100, 0), 20_063_000);
        assert_eq!(change, Some(Transition::Closed("no storm for 60 s".into())));
        assert!(state.open.is_none());
    }
}
