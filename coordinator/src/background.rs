//! Work the rounds must not wait for (a what-if's simulated rounds): run on a thread of its own,
//! at a lowered scheduling priority, on a runtime of its own, so that it takes the processor
//! only when the rounds and the API leave it free, and its processor time can be measured and
//! budgeted ([`cpu_time`]).

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// The nice value of a background thread (the daemon's other threads keep theirs, 0 by
/// default): under contention it gets about a tenth of a processor the rounds want.
pub const NICE: i32 = 10;

/// Why background work gave no answer.
#[derive(Debug, thiserror::Error)]
pub enum BackgroundError {
    /// The thread or its runtime could not be made.
    #[error("cannot start the background thread: {0}")]
    Start(String),
    /// The work panicked.
    #[error("the background work ended without an answer")]
    Lost,
}

/// Tells background work that nobody waits for its answer any more: set when the future
/// awaiting it is dropped (a client that went away); the work checks it between steps.
#[derive(Debug, Clone, Default)]
pub struct Stop(Arc<AtomicBool>);

impl Stop {
    /// Whether the work should stop.
    pub fn asked(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }
}

/// Sets the stop flag when dropped.
#[derive(Debug)]
struct StopOnDrop(Stop);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.0.store(true, Ordering::Relaxed);
    }
}

/// Runs the future `make` builds on a new thread named `name`, at nice [`NICE`], on a
/// current-thread runtime of its own (timers enabled), and answers what it returns. `make` gets
/// the [`Stop`] flag; whatever it owns (a semaphore permit, say) lives until the work ends,
/// also when the caller stopped waiting.
pub async fn run<T, F, Fut>(name: &str, make: F) -> Result<T, BackgroundError>
where
    T: Send + 'static,
    F: FnOnce(Stop) -> Fut + Send + 'static,
    Fut: Future<Output = T>,
{
    let stop = Stop::default();
    let _stop_on_drop = StopOnDrop(stop.clone());
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name(name.to_owned())
        .spawn(move || {
            lower_priority();
            let runtime = match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(runtime) => runtime,
                Err(e) => {
                    let _gone = tx.send(Err(BackgroundError::Start(e.to_string())));
                    return;
                }
            };
            let answer = runtime.block_on(make(stop));
            let _gone = tx.send(Ok(answer));
        })
        .map_err(|e| BackgroundError::Start(e.to_string()))?;
    rx.await.map_err(|_closed| BackgroundError::Lost)?
}

/// The processor time the calling thread has used (zero where it cannot be read).
pub fn cpu_time() -> Duration {
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_THREAD_CPUTIME_ID).map_or(
        Duration::ZERO,
        |t| {
            Duration::new(
                u64::try_from(t.tv_sec()).unwrap_or(0),
                u32::try_from(t.tv_nsec()).unwrap_or(0),
            )
        },
    )
}

/// Lowers the calling thread's scheduling priority to [`NICE`] (on Linux the nice value is the
/// thread's own). Lowering needs no privilege; a failure leaves the thread as it was.
#[cfg(target_os = "linux")]
#[expect(
    unsafe_code,
    reason = "setpriority(2) has no safe wrapper; it takes three plain integers"
)]
fn lower_priority() {
    // A thread already nicer (a daemon started niced) stays as it is: never raised.
    if nice() >= NICE {
        return;
    }
    // SAFETY: setpriority only changes the scheduler's nice value of the calling thread
    // (`who` 0 with PRIO_PROCESS names the calling thread on Linux); it touches no memory.
    let _ignored = unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, NICE) };
}

#[cfg(not(target_os = "linux"))]
fn lower_priority() {}

/// The nice value of the calling thread (0 where it cannot be read).
#[cfg(not(target_os = "linux"))]
pub fn nice() -> i32 {
    0
}

/// The nice value of the calling thread.
#[cfg(target_os = "linux")]
#[expect(
    unsafe_code,
    reason = "getpriority(2) has no safe wrapper; it takes two plain integers"
)]
pub fn nice() -> i32 {
    // SAFETY: getpriority only reads the scheduler's nice value of the calling thread.
    unsafe { libc::getpriority(libc::PRIO_PROCESS, 0) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn background_work_runs_niced_on_its_own_thread_and_measures_its_time() {
        let caller = std::thread::current().id();
        let caller_nice = nice();
        let (thread, nice_there, spent) = run("nodecare-test-bg", |_stop| async move {
            let start = cpu_time();
            let mut x: u64 = 1;
            for i in 0..5_000_000u64 {
                x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(i);
            }
            std::hint::black_box(x);
            tokio::time::sleep(Duration::from_millis(1)).await;
            (std::thread::current().id(), nice(), cpu_time() - start)
        })
        .await
        .unwrap_or_else(|e| panic!("{e}"));
        assert_ne!(thread, caller);
        assert!(nice_there >= NICE, "{nice_there}");
        assert!(spent > Duration::ZERO, "{spent:?}");
        // The caller's own priority is untouched.
        assert_eq!(nice(), caller_nice);
    }

    #[tokio::test]
    async fn dropping_the_wait_asks_the_work_to_stop() {
        let (seen_tx, seen_rx) = std::sync::mpsc::channel();
        let waiting = tokio::spawn(run("nodecare-test-stop", move |stop| async move {
            while !stop.asked() {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            let _gone = seen_tx.send(());
        }));
        tokio::time::sleep(Duration::from_millis(20)).await;
        waiting.abort();
        let seen =
            tokio::task::spawn_blocking(move || seen_rx.recv_timeout(Duration::from_secs(5)))
                .await
                .unwrap_or_else(|e| panic!("{e}"));
        assert!(seen.is_ok(), "the work never saw the stop");
    }
}
