//! Connection (or waiter) slots counted per peer address and in total: what one caller, or all
//! of them, may hold of a daemon at once. A slot is given back when its [`Slot`] drops.
//!
//! A share of the total can be reserved ([`Slots::with_reserve`]): callers taking a
//! [`Share::Shared`] slot (anyone) hold at most `max_total - reserved` together, so that the
//! last `reserved` slots stay for the callers the daemon places in [`Share::Reserved`] (the
//! coordinator and the master candidates at an agent, known operators at the coordinator). A
//! reserved caller takes any free slot, shared or reserved; every caller keeps the per-peer cap.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, PoisonError};

#[derive(Debug, Default)]
struct Taken {
    total: usize,
    shared: usize,
    by_peer: HashMap<IpAddr, usize>,
}

/// Slots counted per peer address and in total.
#[derive(Debug)]
pub struct Slots {
    max_total: usize,
    max_per_peer: usize,
    reserved: usize,
    taken: Mutex<Taken>,
}

/// Which part of the slots a caller may take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Share {
    /// Any caller: the slots beyond the reserve.
    Shared,
    /// A caller the reserve is kept for: any free slot.
    Reserved,
}

/// One slot taken; dropping it gives it back.
#[derive(Debug)]
pub struct Slot {
    slots: Arc<Slots>,
    peer: IpAddr,
    share: Share,
}

/// Why no slot was given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Full {
    /// The peer holds as many as one address may.
    Peer,
    /// Everyone together holds as many as allowed (for a shared caller: every slot beyond the
    /// reserve).
    Total,
}

impl Slots {
    /// At most `max_total` slots, `max_per_peer` of them for one address, none reserved.
    pub fn new(max_total: usize, max_per_peer: usize) -> Arc<Self> {
        Self::with_reserve(max_total, max_per_peer, 0)
    }

    /// At most `max_total` slots, `max_per_peer` of them for one address, the last `reserved`
    /// (at most `max_total`) only for [`Share::Reserved`] callers.
    pub fn with_reserve(max_total: usize, max_per_peer: usize, reserved: usize) -> Arc<Self> {
        Arc::new(Self {
            max_total,
            max_per_peer,
            reserved: reserved.min(max_total),
            taken: Mutex::new(Taken::default()),
        })
    }

    /// A shared slot for `peer` ([`Self::try_take_as`] with [`Share::Shared`]).
    pub fn try_take(self: &Arc<Self>, peer: IpAddr) -> Result<Slot, Full> {
        self.try_take_as(peer, Share::Shared)
    }

    /// A slot of `share` for `peer`, or which cap is reached (the peer's first).
    pub fn try_take_as(self: &Arc<Self>, peer: IpAddr, share: Share) -> Result<Slot, Full> {
        let mut taken = self.taken.lock().unwrap_or_else(PoisonError::into_inner);
        let of_peer = taken.by_peer.get(&peer).copied().unwrap_or(0);
        if of_peer >= self.max_per_peer {
            return Err(Full::Peer);
        }
        if taken.total >= self.max_total {
            return Err(Full::Total);
        }
        if share == Share::Shared && taken.shared >= self.max_total - self.reserved {
            return Err(Full::Total);
        }
        taken.total += 1;
        if share == Share::Shared {
            taken.shared += 1;
        }
        taken.by_peer.insert(peer, of_peer + 1);
        Ok(Slot {
            slots: Arc::clone(self),
            peer,
            share,
        })
    }

    /// Slots taken now.
    pub fn taken(&self) -> usize {
        self.taken
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .total
    }

    /// Slots taken now by shared callers.
    pub fn taken_shared(&self) -> usize {
        self.taken
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .shared
    }
}

impl Slot {
    /// The share this slot was taken from.
    pub fn share(&self) -> Share {
        self.share
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
        if self.share == Share::Shared {
            taken.shared = taken.shared.saturating_sub(1);
        }
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

    #[test]
    fn shared_callers_never_take_the_reserve() {
        let slots = Slots::with_reserve(6, 2, 2);
        let flood: Vec<IpAddr> = (1..=10).map(|n| IpAddr::from([192, 0, 2, n])).collect();
        let coordinator: IpAddr = "198.51.100.1".parse().unwrap();
        let candidate: IpAddr = "198.51.100.2".parse().unwrap();
        // Ten addresses reconnecting: four shared slots, no more.
        let mut held = Vec::new();
        for peer in &flood {
            for _ in 0..2 {
                if let Ok(slot) = slots.try_take(*peer) {
                    held.push(slot);
                }
            }
        }
        assert_eq!((held.len(), slots.taken_shared()), (4, 4));
        assert_eq!(slots.try_take(flood[9]).err(), Some(Full::Total));
        // The reserve is there for reserved callers, each within its per-peer cap.
        let a = slots.try_take_as(coordinator, Share::Reserved).unwrap();
        assert_eq!(a.share(), Share::Reserved);
        let b = slots.try_take_as(candidate, Share::Reserved).unwrap();
        assert_eq!(
            slots.try_take_as(candidate, Share::Reserved).err(),
            Some(Full::Total)
        );
        // A shared slot given back goes to whoever asks first; a reserved one only back to the
        // reserve.
        drop(b);
        assert_eq!(slots.try_take(flood[9]).err(), Some(Full::Total));
        held.pop();
        let again = slots.try_take(flood[9]).unwrap();
        assert_eq!(again.share(), Share::Shared);
        assert_eq!((slots.taken(), slots.taken_shared()), (5, 4));
        let _c = slots.try_take_as(coordinator, Share::Reserved).unwrap();
        assert_eq!(
            slots.try_take_as(coordinator, Share::Reserved).err(),
            Some(Full::Peer)
        );
        drop(a);
        assert_eq!(slots.try_take(flood[9]).err(), Some(Full::Total));
        assert_eq!(slots.taken(), 5);
    }
}
