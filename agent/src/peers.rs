//! The cluster's own callers of the agent, by address: what its connection and long-poll
//! reserves are kept for ([`crate::limits::RESERVED_CONNECTIONS`],
//! [`crate::limits::RESERVED_WAITERS`]), so that a flood from other addresses never stops the
//! coordinator's scrapes and watch, its replica pushes, or a takeover's replica reads.
//!
//! A connection is placed when it is accepted, before a byte of its request is read, so by its
//! address alone: the master candidates (Ganeti's `ssconf_master_candidates_ips`, and their
//! secondary addresses from `ssconf_master_candidates` and `ssconf_node_secondary_ips`), the
//! cluster's master address (`ssconf_master_ip`), and the addresses the configuration lists
//! (`reserved_peers`). The coordinator runs on the master, a master candidate; a takeover runs
//! on a master candidate. Ssconf is read again every [`REFRESH_INTERVAL`], so that a candidate
//! added or removed is placed accordingly within it.

use std::collections::{BTreeSet, HashSet};
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use crate::limits::Share;

/// How often ssconf is read again.
pub const REFRESH_INTERVAL: Duration = Duration::from_secs(30);

/// The addresses served from the reserves.
#[derive(Debug)]
pub struct ReservedPeers {
    ssconf_dir: Option<PathBuf>,
    configured: Vec<IpAddr>,
    current: RwLock<Arc<HashSet<IpAddr>>>,
}

/// The addresses of an ssconf file: one a line, or the last field of a `name address` line;
/// lines that are not addresses are left out. Pure.
pub fn parse_addresses(text: &str) -> Vec<IpAddr> {
    text.lines()
        .filter_map(|line| line.split_whitespace().last())
        .filter_map(|field| field.parse::<IpAddr>().ok())
        .map(|ip| ip.to_canonical())
        .collect()
}

/// The addresses of the master candidates named in `candidates` (one name a line) found in
/// `node_addresses` (`name address` lines). Pure.
pub fn addresses_of(candidates: &str, node_addresses: &str) -> Vec<IpAddr> {
    let names: BTreeSet<&str> = candidates
        .lines()
        .map(str::trim)
        .filter(|name| !name.is_empty())
        .collect();
    node_addresses
        .lines()
        .filter_map(|line| {
            let mut fields = line.split_whitespace();
            let name = fields.next()?;
            let address = fields.next()?.parse::<IpAddr>().ok()?;
            names.contains(name).then_some(address.to_canonical())
        })
        .collect()
}

/// The cluster's callers according to the ssconf files in `dir` (missing files add nothing).
pub fn from_ssconf(dir: &Path) -> Vec<IpAddr> {
    let read = |name: &str| std::fs::read_to_string(dir.join(name)).unwrap_or_default();
    let mut addresses = parse_addresses(&read("ssconf_master_candidates_ips"));
    addresses.extend(parse_addresses(&read("ssconf_master_ip")));
    addresses.extend(addresses_of(
        &read("ssconf_master_candidates"),
        &read("ssconf_node_secondary_ips"),
    ));
    addresses
}

impl ReservedPeers {
    /// The master candidates and master address read from `ssconf_dir` (none without it), and
    /// `configured`.
    pub fn new(ssconf_dir: Option<PathBuf>, configured: Vec<IpAddr>) -> Arc<Self> {
        let peers = Arc::new(Self {
            ssconf_dir,
            configured: configured.into_iter().map(|ip| ip.to_canonical()).collect(),
            current: RwLock::new(Arc::new(HashSet::new())),
        });
        peers.refresh();
        peers
    }

    /// Reads ssconf again.
    pub fn refresh(&self) {
        let mut addresses: HashSet<IpAddr> = self.configured.iter().copied().collect();
        if let Some(dir) = &self.ssconf_dir {
            addresses.extend(from_ssconf(dir));
        }
        let mut current = self.current.write().unwrap_or_else(PoisonError::into_inner);
        if **current != addresses {
            tracing::info!(
                addresses = addresses.len(),
                "connections kept for the cluster's own callers: their addresses changed"
            );
            *current = Arc::new(addresses);
        }
    }

    /// The share a caller from `ip` takes: the reserve for the cluster's own callers.
    pub fn share(&self, ip: IpAddr) -> Share {
        let current = self.current.read().unwrap_or_else(PoisonError::into_inner);
        if current.contains(&ip.to_canonical()) {
            Share::Reserved
        } else {
            Share::Shared
        }
    }

    /// Reads ssconf again every `every` until `shutdown` changes.
    pub async fn run_refresh(
        self: Arc<Self>,
        every: Duration,
        mut shutdown: tokio::sync::watch::Receiver<bool>,
    ) {
        if self.ssconf_dir.is_none() {
            return;
        }
        let mut ticker = tokio::time::interval(every);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        ticker.tick().await;
        loop {
            tokio::select! {
                _ = ticker.tick() => {}
                _ = shutdown.changed() => return,
            }
            let peers = Arc::clone(&self);
            if tokio::task::spawn_blocking(move || peers.refresh())
                .await
                .is_err()
            {
                tracing::warn!("reading ssconf for the cluster's callers failed");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code")]

    use super::*;

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    #[test]
    fn ssconf_lines_give_their_addresses() {
        assert_eq!(
            parse_addresses("192.0.2.1\n 192.0.2.2 \n\nnot-an-address\n2001:db8::1\n"),
            vec![ip("192.0.2.1"), ip("192.0.2.2"), ip("2001:db8::1")]
        );
        assert_eq!(
            parse_addresses("node1.example.com 192.0.2.1\nnode2 ::ffff:192.0.2.2\n"),
            vec![ip("192.0.2.1"), ip("192.0.2.2")]
        );
        assert_eq!(
            addresses_of(
                "node1.example.com\nnode3.example.com\n",
                "node1.example.com 198.51.100.1\nnode2.example.com 198.51.100.2\nnode3.example.com\n"
            ),
            vec![ip("198.51.100.1")]
        );
    }

    #[test]
    fn candidates_the_master_and_configured_addresses_take_the_reserve() {
        let dir = tempfile::tempdir().unwrap();
        let write = |name: &str, text: &str| std::fs::write(dir.path().join(name), text).unwrap();
        write("ssconf_master_candidates_ips", "192.0.2.1\n192.0.2.2\n");
        write("ssconf_master_ip", "192.0.2.100\n");
        write("ssconf_master_candidates", "node1\nnode2\n");
        write(
            "ssconf_node_secondary_ips",
            "node1 198.51.100.1\nnode2 198.51.100.2\nnode3 198.51.100.3\n",
        );
        write("ssconf_node_primary_ips", "node3 192.0.2.3\n");
        let peers = ReservedPeers::new(Some(dir.path().to_owned()), vec![ip("203.0.113.7")]);
        for reserved in [
            "192.0.2.1",
            "192.0.2.2",
            "::ffff:192.0.2.2",
            "192.0.2.100",
            "198.51.100.1",
            "203.0.113.7",
        ] {
            assert_eq!(peers.share(ip(reserved)), Share::Reserved, "{reserved}");
        }
        for shared in ["192.0.2.3", "198.51.100.3", "127.0.0.1", "192.0.2.4"] {
            assert_eq!(peers.share(ip(shared)), Share::Shared, "{shared}");
        }
        // A candidate removed is shared after the next refresh.
        write("ssconf_master_candidates_ips", "192.0.2.1\n");
        assert_eq!(peers.share(ip("192.0.2.2")), Share::Reserved);
        peers.refresh();
        assert_eq!(peers.share(ip("192.0.2.2")), Share::Shared);
        // Without ssconf, only the configured addresses.
        let peers = ReservedPeers::new(Some(dir.path().join("missing")), vec![]);
        assert_eq!(peers.share(ip("192.0.2.1")), Share::Shared);
    }
}
