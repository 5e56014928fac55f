//! Where the round reads the agents: the one seam between the round and the nodes' agents.
//!
//! The daemon reads them over the network with its [`Scraper`] (signed reports, verified); a
//! what-if ([`crate::what_if`]) answers from recorded and hypothetical verdicts in memory, so
//! its private rounds reach no agent.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;

use crate::scrape::{AgentResult, AgentTarget, AgentUrls, Scraper, StorageHealth};
use nodecare_ganeti::{Instance, Node};

/// A future of an [`AgentReader`].
pub type AgentFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Reads the agents for a round.
pub trait AgentReader: Send + Sync + std::fmt::Debug {
    /// Every target's diagnose report (`sequences`: the last accepted per node; `now_ms`: the
    /// round's clock).
    fn diagnose<'a>(
        &'a self,
        targets: Vec<AgentTarget>,
        sequences: &'a BTreeMap<String, u64>,
        now_ms: u64,
    ) -> AgentFuture<'a, Vec<AgentResult>>;

    /// The cluster's storage health from the storage reports of the nodes holding DRBD
    /// instances.
    fn storage<'a>(
        &'a self,
        nodes: &'a [Node],
        instances: &'a [Instance],
        urls: &'a AgentUrls,
        sequences: &'a BTreeMap<String, u64>,
        now_ms: u64,
    ) -> AgentFuture<'a, StorageHealth>;

    /// The scraper behind it, when it reads the agents over the network (balancing reads
    /// their load reports with it).
    fn scraper(&self) -> Option<&Scraper> {
        None
    }
}

impl AgentReader for Scraper {
    fn diagnose<'a>(
        &'a self,
        targets: Vec<AgentTarget>,
        sequences: &'a BTreeMap<String, u64>,
        _now_ms: u64,
    ) -> AgentFuture<'a, Vec<AgentResult>> {
        // Reports are judged against the wall clock at the moment each one is read.
        Box::pin(self.scrape(targets, sequences, nodecare_protocol::now_ms))
    }

    fn storage<'a>(
        &'a self,
        nodes: &'a [Node],
        instances: &'a [Instance],
        urls: &'a AgentUrls,
        sequences: &'a BTreeMap<String, u64>,
        _now_ms: u64,
    ) -> AgentFuture<'a, StorageHealth> {
        Box::pin(self.storage_health(
            nodes,
            instances,
            urls,
            sequences,
            nodecare_protocol::now_ms,
            crate::scrape::DEFAULT_STORAGE_MAX_AGE_MS,
        ))
    }

    fn scraper(&self) -> Option<&Scraper> {
        Some(self)
    }
}
