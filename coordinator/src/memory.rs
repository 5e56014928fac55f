//! Giving the memory a round freed back to the system.
//!
//! A round allocates and frees tens of MB on a big cluster (the nodes' RAPI answer, every
//! agent's report verified and decoded, the gate's view). glibc's malloc returns only the top of
//! an arena to the system by itself; the rest stays resident as free chunks, and the next round,
//! often run by the other worker thread in the other arena (the unit's `MALLOC_ARENA_MAX=2`),
//! adds its own on top. So the daemon trims every arena after each round
//! (docs/PERFORMANCE.md, "Memory at 10 000 agents").

/// Returns the free pages of every malloc arena to the system (glibc's `malloc_trim(0)`);
/// whether any were. Takes a few milliseconds for ~100 MB of heap. Does nothing (false) where
/// the C library is not glibc.
pub fn release_free_memory() -> bool {
    trim()
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[expect(
    unsafe_code,
    reason = "malloc_trim(3) has no safe wrapper; it takes a plain integer"
)]
fn trim() -> bool {
    // SAFETY: malloc_trim only walks malloc's own arenas under their locks and touches no
    // memory of ours; 0 keeps no extra padding at the top of the heap.
    unsafe { libc::malloc_trim(0) == 1 }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn trim() -> bool {
    false
}

#[cfg(all(test, target_os = "linux", target_env = "gnu"))]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code")]

    fn rss_anon_kib() -> u64 {
        std::fs::read_to_string("/proc/self/status")
            .unwrap()
            .lines()
            .find_map(|line| {
                line.strip_prefix("RssAnon:")
                    .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            })
            .unwrap()
    }

    /// 48 MB of small allocations freed below one that is kept (so malloc cannot give them back
    /// from the top of its heap by itself) stay resident until the trim returns them.
    #[test]
    fn freed_memory_below_a_live_allocation_is_returned() {
        let freed: Vec<Box<[u8; 1024]>> = (0..48 * 1024).map(|_| Box::new([1u8; 1024])).collect();
        let kept = Box::new([2u8; 1024]);
        drop(freed);
        let before = rss_anon_kib();
        assert!(super::release_free_memory());
        let after = rss_anon_kib();
        assert_eq!(kept[0], 2);
        assert!(
            after + 24 * 1024 < before,
            "RSS {before} KiB before the trim, {after} KiB after"
        );
    }
}
