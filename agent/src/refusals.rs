//! Refused requests, counted instead of logged one by one: a flood of refused requests would
//! otherwise write a line each and make journald rate-limit the agent's real messages away.
//!
//! Every refusal of the HTTP API (a check, a replica push or read, a long-poll or a connection
//! beyond the caps) is counted by endpoint and status; `/metrics` shows the totals
//! (`nodecare_agent_requests_refused_total`) and [`Refusals::run_summaries`] logs one WARN line
//! per [`SUMMARY_INTERVAL`] naming what was refused since the last one, and nothing when nothing
//! was. The repair endpoint counts its refusals by reason itself
//! (`nodecare_repair_refusals_total`) and audits them apart from accepted repairs.

use std::collections::BTreeMap;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use hyper::StatusCode;

/// How often refusals are summarised in the log.
pub const SUMMARY_INTERVAL: Duration = Duration::from_secs(60);

/// Where a request was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Endpoint {
    /// `POST /1/check`.
    Check,
    /// `PUT /1/replica`, `POST /1/replica/read`.
    Replica,
    /// The signed report's long-poll (`?after=&wait=`) beyond its waiters.
    LongPoll,
    /// A connection beyond the connection caps, closed at once.
    Connection,
}

impl Endpoint {
    /// Its label in `/metrics` and the log.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Check => "check",
            Self::Replica => "replica",
            Self::LongPoll => "long-poll",
            Self::Connection => "connection",
        }
    }
}

#[derive(Debug, Default)]
struct Counts {
    total: BTreeMap<(Endpoint, u16), u64>,
    since_summary: BTreeMap<(Endpoint, u16), u64>,
}

/// Refusal counters, shared by the endpoints.
#[derive(Debug, Default)]
pub struct Refusals {
    counts: Mutex<Counts>,
}

impl Refusals {
    /// Counts one refusal answered with `status`.
    pub fn count(&self, endpoint: Endpoint, status: StatusCode) {
        let mut counts = self.counts.lock().unwrap_or_else(PoisonError::into_inner);
        let key = (endpoint, status.as_u16());
        *counts.total.entry(key).or_insert(0) += 1;
        *counts.since_summary.entry(key).or_insert(0) += 1;
    }

    /// Every refusal since the agent started: (endpoint, status) → count.
    pub fn totals(&self) -> BTreeMap<(Endpoint, u16), u64> {
        self.counts
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .total
            .clone()
    }

    /// The refusals since the last call, as one line of text; `None` when there were none.
    pub fn take_summary(&self) -> Option<String> {
        let since = std::mem::take(
            &mut self
                .counts
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .since_summary,
        );
        if since.is_empty() {
            return None;
        }
        Some(
            since
                .iter()
                .map(|((endpoint, status), count)| {
                    format!("{} {status}: {count}", endpoint.as_str())
                })
                .collect::<Vec<_>>()
                .join(", "),
        )
    }

    /// Logs [`Self::take_summary`] every `interval` until `shutdown` changes.
    pub async fn run_summaries(
        self: std::sync::Arc<Self>,
        interval: Duration,
        mut shutdown: tokio::sync::watch::Receiver<bool>,
    ) {
        let mut ticks = tokio::time::interval(interval);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        ticks.tick().await;
        loop {
            tokio::select! {
                _ = ticks.tick() => {}
                _ = shutdown.changed() => break,
            }
            if let Some(summary) = self.take_summary() {
                tracing::warn!(
                    interval_s = interval.as_secs(),
                    "requests refused in the last interval (endpoint status: count): {summary}"
                );
            }
        }
        if let Some(summary) = self.take_summary() {
            tracing::warn!("requests refused since the last summary: {summary}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_are_summarised_once_and_counted_for_ever() {
        let refusals = Refusals::default();
        assert_eq!(refusals.take_summary(), None);
        for _ in 0..45_000 {
            refusals.count(Endpoint::Replica, StatusCode::FORBIDDEN);
        }
        refusals.count(Endpoint::Check, StatusCode::FORBIDDEN);
        assert_eq!(
            refusals.take_summary().as_deref(),
            Some("check 403: 1, replica 403: 45000")
        );
        assert_eq!(refusals.take_summary(), None);
        refusals.count(Endpoint::LongPoll, StatusCode::SERVICE_UNAVAILABLE);
        let totals = refusals.totals();
        assert_eq!(totals.get(&(Endpoint::Replica, 403)), Some(&45_000));
        assert_eq!(totals.get(&(Endpoint::LongPoll, 503)), Some(&1));
    }
}
