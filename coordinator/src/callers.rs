//! Who calls the API, as the server places and the handlers read them: the addresses operators
//! authenticated from (their connections may take the reserved share) and the caller of the
//! local socket, known by its credentials. Shared by the server, the board and the handlers;
//! it imports nothing of the coordinator.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Mutex, PoisonError};
use std::time::Instant;

/// The addresses operators authenticated from (a user of the users file with the right
/// password), most recent first: their connections may take the reserved share of the API's
/// connections ([`crate::server::ServerLimits::reserved`]). At most [`Operators::MAX_ADDRESSES`], the least
/// recently seen forgotten first; kept in memory only (after a restart an operator's first
/// authenticated request from an address places it again).
#[derive(Debug, Default)]
pub struct Operators {
    seen: Mutex<HashMap<IpAddr, Instant>>,
}

impl Operators {
    /// Most addresses remembered.
    pub const MAX_ADDRESSES: usize = 1024;

    /// Whether an operator authenticated from `ip`.
    pub fn knows(&self, ip: IpAddr) -> bool {
        self.seen
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .contains_key(&ip.to_canonical())
    }

    /// Records that an operator authenticated from `ip` now.
    pub fn learn(&self, ip: IpAddr) {
        self.learn_at(ip, Instant::now());
    }

    /// [`Self::learn`] at `now`.
    pub fn learn_at(&self, ip: IpAddr, now: Instant) {
        let ip = ip.to_canonical();
        let mut seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        if !seen.contains_key(&ip)
            && seen.len() >= Self::MAX_ADDRESSES
            && let Some(oldest) = seen.iter().min_by_key(|(_, at)| **at).map(|(ip, _)| *ip)
        {
            seen.remove(&oldest);
        }
        if seen.insert(ip, now).is_none() {
            tracing::info!(client = %ip, "an operator authenticated from this address: its connections may take the API's reserved share");
        }
    }
}

/// A caller of the local socket, known by its credentials.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalCaller {
    /// Its user id.
    pub uid: u32,
    /// Its user name (`uid <n>` when it has none).
    pub name: String,
}

tokio::task_local! {
    static LOCAL_CALLER: LocalCaller;
}

/// Runs `future` as a request of the local socket's `caller` ([`local_caller`] names it there).
pub async fn scope_local_caller<F: std::future::Future>(
    caller: LocalCaller,
    future: F,
) -> F::Output {
    LOCAL_CALLER.scope(caller, future).await
}

/// The caller of the local socket the current request came from, if it came from there.
pub fn local_caller() -> Option<LocalCaller> {
    LOCAL_CALLER.try_with(Clone::clone).ok()
}
