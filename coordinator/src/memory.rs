//! Giving the memory a round freed back to the system.
//!
//! A round allocates and frees tens of MB on a big cluster (the nodes' RAPI answer, every
//! agent's report verified and decoded, the gate's view). glibc's malloc returns only the top of
//! an arena to the system by itself; the rest stays resident as free chunks, and the next round,
//! often run by the other worker thread in the other arena (the unit's `MALLOC_ARENA_MAX=2`),
//! adds its own on top. So the daemon trims every arena after each round
//! (docs/PERFORMANCE.md, "Memory at 10 000 agents").

/// Allocations of at least this many bytes get their own mapping ([`map_large_allocations`]).
pub const MMAP_THRESHOLD: usize = 256 * 1024;

/// Gives every allocation of at least [`MMAP_THRESHOLD`] bytes its own mapping, returned to the
/// system when it is freed (glibc's `M_MMAP_THRESHOLD`), unless `MALLOC_MMAP_THRESHOLD_` sets
/// it; whether it was set. glibc raises its threshold to the largest mapped block freed so far
/// (up to 32 MiB), so after the first round a round's large buffers (the nodes' answer and what
/// it decodes to, vectors over every agent) came from the arenas, and the free space they left
/// between live allocations stayed resident. Does nothing (false) where the C library is not
/// glibc.
pub fn map_large_allocations() -> bool {
    if std::env::var_os("MALLOC_MMAP_THRESHOLD_").is_some() {
        return false;
    }
    set_mmap_threshold(MMAP_THRESHOLD)
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[expect(
    unsafe_code,
    reason = "mallopt(3) has no safe wrapper; it takes two plain integers"
)]
fn set_mmap_threshold(bytes: usize) -> bool {
    let Ok(bytes) = libc::c_int::try_from(bytes) else {
        return false;
    };
    // SAFETY: mallopt only changes malloc's own parameters under its lock.
    unsafe { libc::mallopt(libc::M_MMAP_THRESHOLD, bytes) == 1 }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn set_mmap_threshold(_bytes: usize) -> bool {
    false
}

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

    /// Once large allocations are mapped, a large buffer freed below a live allocation goes
    /// back to the system at once, even after a larger one was freed (which raises glibc's own
    /// threshold above it).
    #[test]
    fn a_large_buffer_freed_is_returned_at_once() {
        if std::env::var_os("MALLOC_MMAP_THRESHOLD_").is_none() {
            assert!(super::map_large_allocations());
        }
        let larger = vec![1u8; 30 * 1024 * 1024];
        assert_eq!(larger[1], 1);
        drop(larger);
        let large = vec![2u8; 16 * 1024 * 1024];
        let kept = Box::new([3u8; 1024]);
        let before = rss_anon_kib();
        drop(large);
        let after = rss_anon_kib();
        assert_eq!(kept[0], 3);
        assert!(
            after + 12 * 1024 < before,
            "RSS {before} KiB before the free, {after} KiB after"
        );
    }
}
