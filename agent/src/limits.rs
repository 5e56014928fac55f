//! What one caller, or all of them, may hold of the agent: connections and long-poll waiters,
//! counted per peer address and in total, and the timeouts of a connection
//! (`docs/PROTOCOL.md`, "Limits of the agent's HTTP API", lists them all).
//!
//! Unauthenticated callers share the agent with the coordinator; the caps keep any one address
//! from taking what the coordinator needs (its watch, its pushes, its scrapes), a reserve of
//! connections and waiters only the cluster's own callers may take ([`crate::peers`]: the
//! master candidates, the master's address) keeps many addresses together from taking it, and
//! the total cap stays well below the descriptor limit so that the agent's own work (scripts,
//! state files, collectors) always finds descriptors.

use std::time::Duration;

pub use nodecare_daemon::slots::{Full, Share, Slot, Slots};

/// Connections open at once, at most (lowered when the descriptor limit is low; see
/// [`ConnectionLimits::for_descriptor_limit`]).
pub const MAX_CONNECTIONS: usize = 512;
/// Connections open at once from one peer address, at most.
pub const MAX_CONNECTIONS_PER_PEER: usize = 64;
/// Connections of [`MAX_CONNECTIONS`] only the cluster's own callers may take (lowered to a
/// quarter of a lowered total).
pub const RESERVED_CONNECTIONS: usize = 64;
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
/// Long-poll waiters of [`crate::cache::MAX_WAITERS`] only the cluster's own callers may take.
pub const RESERVED_WAITERS: usize = 8;
/// `Retry-After` (seconds) of a long-poll refused because its waiters are all taken.
pub const WAITERS_RETRY_AFTER_SECS: u64 = 5;

/// The connection caps and timeouts of the HTTP server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectionLimits {
    /// Connections at once.
    pub max_connections: usize,
    /// Connections at once from one address.
    pub max_per_peer: usize,
    /// Connections of `max_connections` kept for the cluster's own callers.
    pub reserved: usize,
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
            reserved: RESERVED_CONNECTIONS,
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
            reserved: RESERVED_CONNECTIONS.min(max_connections / 4),
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

#[cfg(test)]
mod tests {
    use super::*;

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
        assert_eq!(ConnectionLimits::for_descriptor_limit(65_536).reserved, 64);
        assert_eq!(ConnectionLimits::for_descriptor_limit(100).reserved, 4);
    }
}
