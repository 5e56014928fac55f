//! Connection (or waiter) slots counted per peer address and in total: what one caller, or all
//! of them, may hold of a daemon at once. A slot is given back when its [`Slot`] drops.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, PoisonError};

#[derive(Debug, Default)]
struct Taken {
    total: usize,
    by_peer: HashMap<IpAddr, usize>,
}

/// Slots counted per peer address and in total.
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

/// Why no slot was given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Full {
    /// The peer holds as many as one address may.
    Peer,
    /// Everyone together holds as many as allowed.
    Total,
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

    /// A slot for `peer`, or which cap is reached (the peer's first).
    pub fn try_take(self: &Arc<Self>, peer: IpAddr) -> Result<Slot, Full> {
        let mut taken = self.taken.lock().unwrap_or_else(PoisonError::into_inner);
        let of_peer = taken.by_peer.get(&peer).copied().unwrap_or(0);
        if of_peer >= self.max_per_peer {
            return Err(Full::Peer);
        }
        if taken.total >= self.max_total {
            return Err(Full::Total);
        }
        taken.total += 1;
        taken.by_peer.insert(peer, of_peer + 1);
        Ok(Slot {
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
        assert_eq!(slots.try_take(one).err(), Some(Full::Peer));
        let _c = slots.try_take(two).unwrap();
        assert_eq!(slots.try_take(two).err(), Some(Full::Total));
        drop(a);
        assert_eq!(slots.taken(), 2);
        assert!(slots.try_take(two).is_ok());
    }
}
