//! What one caller, or all of them, may hold of the agent: connections and long-poll waiters,
//! counted per peer address and in total, and the timeouts of a connection
//! (`docs/PROTOCOL.md`, "Limits of the agent's HTTP API", lists them all).
//!
//! Unauthenticated callers share the agent with the coordinator; the caps keep any one address
//! from taking what the coordinator needs (its watch, its pushes, its scrapes), and the total cap
//! stays well below the descriptor limit so that the agent's own work (scripts, state files,
//! collectors) always finds descriptors.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

/// Connections open at once, at most (lowered when the descriptor limit is low; see
/// [`ConnectionLimits::for_descriptor_limit`]).
pub const MAX_CONNECTIONS: usize = 512;
/// Connections open at once from one peer address, at most.
pub const MAX_CONNECTIONS_PER_PEER: usize = 64;
/// Descriptors kept for the agent's own work beyond its connections.
pub const DESCRIPTOR_RESERVE: u64 = 512;
/// How long a client may take to send a request's header.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a connection may stay open with no request in progress.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(30);
/// Largest read buffer of a connection (hyper's; also the largest header).
pub const MAX_CONNECTION_BUFFER_BYTES: usize = 64 * 1024;
/// Long-poll waiters of one peer address at once, at most (the coordinator keeps one per agent).
pub const MAX_WAITERS_PER_PEER: usize = 4;
/// `Retry-After` (seconds) of a long-poll refused because its waiters are all taken.
pub const WAITERS_RETRY_AFTER_SECS: u64 = 5;

/// The connection caps and timeouts of the HTTP server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectionLimits {
    /// Connections at once.
    pub max_connections: usize,
    /// Connections at once from one address.
    pub max_per_peer: usize,
    /// Header read timeout.
    pub header_read_timeout: Duration,
    /// Idle timeout.
    pub idle_timeout: Duration,
}

impl Default for ConnectionLimits {
    fn default() -> Self {
        Self {
            max_connections: MAX_CONNECTIONS,
            max_per_peer: MAX_CONNECTIONS_PER_PEER,
            header_read_timeout: HEADER_READ_TIMEOUT,
            idle_timeout: IDLE_TIMEOUT,
        }
    }
}

impl ConnectionLimits {
    /// The defaults, with the total cap lowered to leave [`DESCRIPTOR_RESERVE`] descriptors of
    /// `nofile` (the soft `RLIMIT_NOFILE`) free, and never below 16. Pure.
    pub fn for_descriptor_limit(nofile: u64) -> Self {
        let room = usize::try_from(nofile.saturating_sub(DESCRIPTOR_RESERVE)).unwrap_or(usize::MAX);
        let max_connections = MAX_CONNECTIONS.min(room).max(16);
        Self {
            max_connections,
            max_per_peer: MAX_CONNECTIONS_PER_PEER.min(max_connections),
            ..Self::default()
        }
    }

    /// [`Self::for_descriptor_limit`] of this process's soft descriptor limit.
    pub fn for_this_process() -> Self {
        let nofile = nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE)
            .map_or(1024, |(soft, _)| soft);
        Self::for_descriptor_limit(nofile)
    }
}

#[derive(Debug, Default)]
struct Taken {
    total: usize,
    by_peer: HashMap<IpAddr, usize>,
}

/// Slots counted per peer address and in total; a slot is given back when its [`Slot`] drops.
#[derive(Debug)]
pub struct Slots {
    max_total: usize,
    max_per_peer: usize,
    taken: Mutex<Taken>,
}

/// One slot taken; dropping it gives it back.
#[derive(Debug)]
pub struct Slot {
    slots: Arc<Slots>,
    peer: IpAddr,
}

impl Slots {
    /// At most `max_total` slots, `max_per_peer` of them for one address.
    pub fn new(max_total: usize, max_per_peer: usize) -> Arc<Self> {
        Arc::new(Self {
            max_total,
            max_per_peer,
            taken: Mutex::new(Taken::default()),
        })
    }

    /// A slot for `peer`, or `None` when it or everyone holds as many as allowed.
    pub fn try_take(self: &Arc<Self>, peer: IpAddr) -> Option<Slot> {
        let mut taken = self.taken.lock().unwrap_or_else(PoisonError::into_inner);
        let of_peer = taken.by_peer.get(&peer).copied().unwrap_or(0);
        if taken.total >= self.max_total || of_peer >= self.max_per_peer {
            return None;
        }
        taken.total += 1;
        taken.by_peer.insert(peer, of_peer + 1);
        Some(Slot {
            slots: Arc::clone(self),
            peer,
        })
    }

    /// Slots taken now.
    pub fn taken(&self) -> usize {
        self.taken
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .total
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut taken = self
            .slots
            .taken
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        taken.total = taken.total.saturating_sub(1);
        if let Some(count) = taken.by_peer.get_mut(&self.peer) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                taken.by_peer.remove(&self.peer);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_capped_per_peer_and_in_total_and_given_back() {
        let slots = Slots::new(3, 2);
        let one: IpAddr = "192.0.2.1".parse().unwrap();
        let two: IpAddr = "192.0.2.2".parse().unwrap();
        let a = slots.try_take(one).unwrap();
        let _b = slots.try_take(one).unwrap();
        assert!(slots.try_take(one).is_none(), "per peer");
        let _c = slots.try_take(two).unwrap();
        assert!(slots.try_take(two).is_none(), "in total");
        drop(a);
        assert_eq!(slots.taken(), 2);
        assert!(slots.try_take(two).is_some());
    }

    #[test]
    fn the_connection_cap_leaves_descriptors_for_the_agent() {
        assert_eq!(
            ConnectionLimits::for_descriptor_limit(65_536).max_connections,
            512
        );
        assert_eq!(
            ConnectionLimits::for_descriptor_limit(1_024).max_connections,
            512
        );
        assert_eq!(
            ConnectionLimits::for_descriptor_limit(768).max_connections,
            256
        );
        assert_eq!(
            ConnectionLimits::for_descriptor_limit(100).max_connections,
            16
        );
        assert_eq!(ConnectionLimits::for_descriptor_limit(100).max_per_peer, 16);
    }
}
