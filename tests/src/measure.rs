//! What the benchmarks measure of their own process: the heap (a counting global allocator a
//! binary installs with `#[global_allocator] static A: Counting = Counting;`), the RSS and its
//! peak, and the process's processor time.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// The system's allocator, counting the bytes allocated now and their peak.
#[derive(Debug)]
pub struct Counting;

static NOW: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

#[expect(
    unsafe_code,
    reason = "a global allocator is an unsafe trait; this one only counts, then calls System"
)]
// SAFETY: every call goes to `System` with the caller's arguments; the counters are atomics.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract, passed on.
        let pointer = unsafe { System.alloc(layout) };
        if !pointer.is_null() {
            let now = NOW.fetch_add(layout.size(), Ordering::Relaxed) + layout.size();
            PEAK.fetch_max(now, Ordering::Relaxed);
        }
        pointer
    }

    unsafe fn dealloc(&self, pointer: *mut u8, layout: Layout) {
        // SAFETY: the caller's contract, passed on.
        unsafe { System.dealloc(pointer, layout) };
        NOW.fetch_sub(layout.size(), Ordering::Relaxed);
    }

    unsafe fn realloc(&self, pointer: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: the caller's contract, passed on.
        let moved = unsafe { System.realloc(pointer, layout, new_size) };
        if !moved.is_null() {
            NOW.fetch_sub(layout.size(), Ordering::Relaxed);
            let now = NOW.fetch_add(new_size, Ordering::Relaxed) + new_size;
            PEAK.fetch_max(now, Ordering::Relaxed);
        }
        moved
    }
}

/// The bytes of heap allocated now (0 unless [`Counting`] is the global allocator).
pub fn heap_now() -> usize {
    NOW.load(Ordering::Relaxed)
}

/// Starts a new heap peak from now; returns the heap now.
pub fn reset_heap_peak() -> usize {
    let now = heap_now();
    PEAK.store(now, Ordering::Relaxed);
    now
}

/// The heap's peak since [`reset_heap_peak`].
pub fn heap_peak() -> usize {
    PEAK.load(Ordering::Relaxed)
}

/// A line of `/proc/self/status` in KiB (`VmRSS:`, `VmHWM:`; 0 where unknown).
pub fn status_kib(field: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status.lines().find_map(|line| {
                line.strip_prefix(field)
                    .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            })
        })
        .unwrap_or(0)
}

/// Gives freed memory back to the system and starts a new RSS peak (Linux: writing 5 to
/// `clear_refs` resets `VmHWM` to `VmRSS`); returns the RSS now, in KiB.
pub fn reset_rss_peak() -> u64 {
    nodecare_coordinator::memory::release_free_memory();
    if let Err(error) = std::fs::write("/proc/self/clear_refs", "5") {
        eprintln!("the peak RSS is not reset ({error}): its growth is from the peak before");
    }
    status_kib("VmRSS:")
}

/// The processor time of the whole process (every thread, user and system).
pub fn process_cpu() -> Duration {
    nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_SELF).map_or(
        Duration::ZERO,
        |usage| {
            let time = |t: nix::sys::time::TimeVal| {
                Duration::new(
                    u64::try_from(t.tv_sec()).unwrap_or(0),
                    u32::try_from(t.tv_usec()).unwrap_or(0).saturating_mul(1000),
                )
            };
            time(usage.user_time()) + time(usage.system_time())
        },
    )
}
