//! Refused requests, counted instead of logged one by one: a flood of refused requests would
//! otherwise write a line each and make journald rate-limit the agent's real messages away.
//!
//! Every refusal of the HTTP API (a check, a replica push or read, a long-poll or a connection
//! beyond the caps) is counted by endpoint and status; `/metrics` shows the totals
//! (`nodecare_agent_requests_refused_total`) and [`Refusals::run_summaries`] logs one WARN line
//! per [`SUMMARY_INTERVAL`] naming what was refused since the last one, and nothing when nothing
//! was, with the addresses that were refused most ([`TOP_SOURCES`] of them; the connection
//! being served names its peer through [`with_peer`]). The repair endpoint counts its refusals
//! by reason itself
//! (`nodecare_repair_refusals_total`) and audits them apart from accepted repairs.

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use hyper::StatusCode;

/// How often refusals are summarised in the log.
pub const SUMMARY_INTERVAL: Duration = Duration::from_secs(60);
/// Sources named in a summary.
pub const TOP_SOURCES: usize = 5;
/// Sources counted between two summaries; refusals from further ones are counted together.
pub const MAX_SOURCES: usize = 4096;

tokio::task_local! {
    /// The peer of the connection a task serves.
    static PEER: IpAddr;
}

/// Runs `work` (a connection being served) with `peer` as the source of the refusals it counts.
pub async fn with_peer<F: std::future::Future>(peer: IpAddr, work: F) -> F::Output {
    PEER.scope(peer, work).await
}

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
    /// Refusals since the last summary by source address (at most [`MAX_SOURCES`]).
    sources: HashMap<IpAddr, u64>,
    /// Refusals since the last summary from sources beyond [`MAX_SOURCES`].
    other_sources: u64,
}

/// Refusal counters, shared by the endpoints.
#[derive(Debug, Default)]
pub struct Refusals {
    counts: Mutex<Counts>,
}

impl Refusals {
    /// Counts one refusal answered with `status`, from the peer of the connection being served
    /// ([`with_peer`]) when there is one.
    pub fn count(&self, endpoint: Endpoint, status: StatusCode) {
        self.count_from(endpoint, status, PEER.try_with(|peer| *peer).ok());
    }

    /// Counts one refusal answered with `status` to `source`.
    pub fn count_from(&self, endpoint: Endpoint, status: StatusCode, source: Option<IpAddr>) {
        let mut counts = self.counts.lock().unwrap_or_else(PoisonError::into_inner);
        let key = (endpoint, status.as_u16());
        *counts.total.entry(key).or_insert(0) += 1;
        *counts.since_summary.entry(key).or_insert(0) += 1;
        if let Some(source) = source {
            if counts.sources.len() < MAX_SOURCES || counts.sources.contains_key(&source) {
                *counts.sources.entry(source).or_insert(0) += 1;
            } else {
                counts.other_sources += 1;
            }
        }
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
        let (since, sources, other) = {
            let mut counts = self.counts.lock().unwrap_or_else(PoisonError::into_inner);
            (
                std::mem::take(&mut counts.since_summary),
                std::mem::take(&mut counts.sources),
                std::mem::take(&mut counts.other_sources),
            )
        };
        if since.is_empty() {
            return None;
        }
        let mut text = since
            .iter()
            .map(|((endpoint, status), count)| format!("{} {status}: {count}", endpoint.as_str()))
            .collect::<Vec<_>>()
            .join(", ");
        if !sources.is_empty() {
            let mut top: Vec<(IpAddr, u64)> = sources.iter().map(|(ip, n)| (*ip, *n)).collect();
            top.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
            let named = top
                .iter()
                .take(TOP_SOURCES)
                .map(|(ip, n)| format!("{ip} ({n})"))
                .collect::<Vec<_>>()
                .join(", ");
            let rest = top.len().saturating_sub(TOP_SOURCES);
            text.push_str(&format!("; from {} sources, most {named}", top.len()));
            if rest > 0 {
                text.push_str(&format!(" and {rest} more"));
            }
            if other > 0 {
                text.push_str(&format!(
                    "; {other} from sources beyond the first {MAX_SOURCES}"
                ));
            }
        }
        Some(text)
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

    #[tokio::test]
    async fn a_summary_names_the_sources_refused_most() {
        let refusals = std::sync::Arc::new(Refusals::default());
        let ip = |n: u8| IpAddr::from([10, 0, 0, n]);
        for (n, times) in [(1, 3), (2, 50), (3, 1), (4, 7), (5, 2), (6, 9), (7, 1)] {
            let refusals = std::sync::Arc::clone(&refusals);
            with_peer(ip(n), async move {
                for _ in 0..times {
                    refusals.count(Endpoint::Check, StatusCode::FORBIDDEN);
                }
            })
            .await;
        }
        refusals.count_from(
            Endpoint::Connection,
            StatusCode::SERVICE_UNAVAILABLE,
            Some(ip(2)),
        );
        assert_eq!(
            refusals.take_summary().as_deref(),
            Some(
                "check 403: 73, connection 503: 1; from 7 sources, most 10.0.0.2 (51), \
                 10.0.0.6 (9), 10.0.0.4 (7), 10.0.0.1 (3), 10.0.0.5 (2) and 2 more"
            )
        );
        // The table is bounded: sources beyond it are counted together.
        for n in 0..(MAX_SOURCES + 3) {
            let [.., a, b] = (n as u32).to_be_bytes();
            refusals.count_from(
                Endpoint::Replica,
                StatusCode::FORBIDDEN,
                Some(IpAddr::from([10, 1, a, b])),
            );
        }
        let summary = refusals.take_summary().unwrap();
        assert!(
            summary.ends_with("; 3 from sources beyond the first 4096"),
            "{summary}"
        );
    }
}
