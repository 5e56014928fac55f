//! The retention policy's configuration (`[retention]`): how long the state database keeps what
//! is finished. The store applies it (`nodecare_coordinator::store::retention`).

use serde::{Deserialize, Serialize};

/// Default seconds between two retention runs (one hour).
pub const DEFAULT_INTERVAL_SECS: f64 = 3600.0;
/// Default seconds finished incidents, campaigns, balancing moves and ended overrides are kept.
pub const DEFAULT_INCIDENTS_SECS: f64 = 90.0 * 86_400.0;
/// Default seconds audit log lines are kept.
pub const DEFAULT_AUDIT_SECS: f64 = 365.0 * 86_400.0;
/// Default most audit log lines kept.
pub const DEFAULT_AUDIT_ROWS: u64 = 100_000;
/// Default seconds the flight recorder keeps a recorded round after its last repeat.
pub const DEFAULT_ROUNDS_SECS: f64 = 30.0 * 86_400.0;
/// Default most recorded rounds kept.
pub const DEFAULT_ROUNDS_KEPT: u64 = 5_000;

/// `[retention]` of the coordinator's configuration (seconds).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RetentionConfig {
    /// Seconds between two retention runs (each followed by an incremental vacuum).
    pub interval: f64,
    /// Seconds a finished incident (with its intents), campaign, balancing run or ended
    /// override is kept after its last change.
    pub incidents: f64,
    /// Seconds an audit log line is kept.
    pub audit: f64,
    /// Most audit log lines kept (the oldest go first).
    pub audit_rows: u64,
    /// Seconds the flight recorder keeps a recorded round after the last round that decided
    /// the same.
    pub rounds: f64,
    /// Most recorded rounds kept (the oldest go first).
    pub rounds_kept: u64,
}

impl Default for RetentionConfig {
    fn default() -> Self {
        Self {
            interval: DEFAULT_INTERVAL_SECS,
            incidents: DEFAULT_INCIDENTS_SECS,
            audit: DEFAULT_AUDIT_SECS,
            audit_rows: DEFAULT_AUDIT_ROWS,
            rounds: DEFAULT_ROUNDS_SECS,
            rounds_kept: DEFAULT_ROUNDS_KEPT,
        }
    }
}

impl RetentionConfig {
    /// Checks value ranges (every duration at least one second, at least one audit line).
    pub fn validate(&self) -> Result<(), String> {
        for (name, value) in [
            ("retention.interval", self.interval),
            ("retention.incidents", self.incidents),
            ("retention.audit", self.audit),
            ("retention.rounds", self.rounds),
        ] {
            if !(value.is_finite() && value >= 1.0) {
                return Err(format!(
                    "{name} must be a number of seconds, at least 1, got {value}"
                ));
            }
        }
        if self.audit_rows == 0 {
            return Err("retention.audit_rows must be at least 1".into());
        }
        if self.rounds_kept == 0 {
            return Err("retention.rounds_kept must be at least 1".into());
        }
        Ok(())
    }

    /// The policy in milliseconds.
    pub fn policy(&self) -> RetentionPolicy {
        let ms = |secs: f64| {
            if secs.is_finite() && secs > 0.0 {
                // Clamped: at most about 31 700 years.
                (secs.min(1e12) * 1000.0) as u64
            } else {
                0
            }
        };
        RetentionPolicy {
            incidents_ms: ms(self.incidents),
            audit_ms: ms(self.audit),
            audit_rows: self.audit_rows,
            rounds_ms: ms(self.rounds),
            rounds_kept: self.rounds_kept,
        }
    }

    /// Time between two runs.
    pub fn interval(&self) -> std::time::Duration {
        if self.interval.is_finite() && self.interval >= 0.0 {
            std::time::Duration::from_secs_f64(self.interval.min(1e9))
        } else {
            std::time::Duration::ZERO
        }
    }
}

/// How long things are kept, in milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetentionPolicy {
    /// Finished incidents, campaigns, balancing runs, ended overrides.
    pub incidents_ms: u64,
    /// Audit log lines.
    pub audit_ms: u64,
    /// Most audit log lines.
    pub audit_rows: u64,
    /// Recorded rounds, after their last repeat.
    pub rounds_ms: u64,
    /// Most recorded rounds.
    pub rounds_kept: u64,
}
