//! systemd service integration (`Type=notify`, `WatchdogSec=`), following sd_notify(3).
//!
//! [`notify_ready`] sends `READY=1` once the daemon's listener is bound and, when the unit sets
//! `WatchdogSec=`, starts a task that sends `WATCHDOG=1` at half the watchdog timeout. Without a
//! service manager (`NOTIFY_SOCKET` unset, as in tests and when run by hand) every call does
//! nothing.

use std::time::Duration;

use sd_notify::NotifyState;

/// Tells systemd that the daemon is ready and starts the watchdog pings if the unit asks for
/// them. Call it once, from inside the tokio runtime, after the listener is bound.
///
/// The pings come from a task on the daemon's own runtime, so a wedged runtime stops them and
/// systemd restarts the service. Returns the ping task, if one was started.
pub fn notify_ready() -> Option<tokio::task::JoinHandle<()>> {
    if let Err(error) = sd_notify::notify(&[NotifyState::Ready]) {
        tracing::warn!(%error, "cannot send READY=1 to systemd");
    }
    let interval = ping_interval(sd_notify::watchdog_enabled())?;
    tracing::debug!(?interval, "systemd watchdog enabled");
    Some(tokio::spawn(async move {
        let mut ticks = tokio::time::interval(interval);
        loop {
            ticks.tick().await;
            if let Err(error) = sd_notify::notify(&[NotifyState::Watchdog]) {
                tracing::warn!(%error, "cannot send WATCHDOG=1 to systemd");
            }
        }
    }))
}

/// The main loop's progress, shared with the watchdog task of [`notify_ready_on_progress`]: the
/// loop marks each unit of work (a round) started and finished; the watchdog is fed only while
/// the loop is waiting for its next unit, or the current one has not run too long.
#[derive(Debug)]
pub struct Progress {
    state: std::sync::Mutex<Phase>,
    /// A unit of work running longer than this is hung.
    busy_limit: Duration,
    /// Waiting longer than this between units is a hung loop.
    idle_limit: Duration,
}

/// What the main loop is doing, since when.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Waiting for the next unit of work.
    Idle(std::time::Instant),
    /// Running a unit of work.
    Busy(std::time::Instant),
}

impl Progress {
    /// A loop whose units may run `busy_limit` and that starts one at least every `idle_limit`.
    pub fn new(busy_limit: Duration, idle_limit: Duration) -> Self {
        Self {
            state: std::sync::Mutex::new(Phase::Idle(std::time::Instant::now())),
            busy_limit,
            idle_limit,
        }
    }

    fn set(&self, phase: Phase) {
        *self
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = phase;
    }

    /// A unit of work starts.
    pub fn busy(&self) {
        self.set(Phase::Busy(std::time::Instant::now()));
    }

    /// The unit of work is done; the loop waits for the next.
    pub fn idle(&self) {
        self.set(Phase::Idle(std::time::Instant::now()));
    }

    /// The phase now.
    pub fn phase(&self) -> Phase {
        *self
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Whether the loop is making progress at `now` (the watchdog is fed only then).
    pub fn alive(&self, now: std::time::Instant) -> bool {
        alive(self.phase(), now, self.busy_limit, self.idle_limit)
    }
}

/// Whether a loop in `phase` is alive at `now`: busy for less than `busy_limit`, or idle for less
/// than `idle_limit`.
pub fn alive(
    phase: Phase,
    now: std::time::Instant,
    busy_limit: Duration,
    idle_limit: Duration,
) -> bool {
    match phase {
        Phase::Busy(since) => now.saturating_duration_since(since) < busy_limit,
        Phase::Idle(since) => now.saturating_duration_since(since) < idle_limit,
    }
}

/// [`notify_ready`] for a daemon whose liveness is its main loop's [`Progress`]: `WATCHDOG=1` is
/// sent at half the watchdog timeout only while `progress` is alive, so a hung round (or a loop
/// that stopped starting rounds) stops the pings and systemd restarts the service.
pub fn notify_ready_on_progress(
    progress: std::sync::Arc<Progress>,
) -> Option<tokio::task::JoinHandle<()>> {
    if let Err(error) = sd_notify::notify(&[NotifyState::Ready]) {
        tracing::warn!(%error, "cannot send READY=1 to systemd");
    }
    let interval = ping_interval(sd_notify::watchdog_enabled())?;
    tracing::debug!(
        ?interval,
        "systemd watchdog enabled, fed by the main loop's progress"
    );
    Some(tokio::spawn(async move {
        let mut ticks = tokio::time::interval(interval);
        let mut warned = false;
        loop {
            ticks.tick().await;
            if progress.alive(std::time::Instant::now()) {
                warned = false;
                if let Err(error) = sd_notify::notify(&[NotifyState::Watchdog]) {
                    tracing::warn!(%error, "cannot send WATCHDOG=1 to systemd");
                }
            } else if !warned {
                warned = true;
                tracing::error!(phase = ?progress.phase(),
                    "the main loop is stuck: no longer feeding the systemd watchdog");
            }
        }
    }))
}

/// Tells systemd that the daemon is shutting down (so a slow drain is not mistaken for a hang).
pub fn notify_stopping() {
    if let Err(error) = sd_notify::notify(&[NotifyState::Stopping]) {
        tracing::warn!(%error, "cannot send STOPPING=1 to systemd");
    }
}

/// The ping interval for a watchdog timeout: half of it, as sd_watchdog_enabled(3) recommends.
/// A zero timeout means no watchdog.
fn ping_interval(timeout: Option<Duration>) -> Option<Duration> {
    timeout
        .filter(|timeout| !timeout.is_zero())
        .map(|timeout| timeout / 2)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pings_at_half_the_watchdog_timeout() {
        assert_eq!(
            ping_interval(Some(Duration::from_secs(30))),
            Some(Duration::from_secs(15))
        );
        assert_eq!(
            ping_interval(Some(Duration::from_micros(3))),
            Some(Duration::from_nanos(1500))
        );
    }

    #[test]
    fn only_a_progressing_loop_is_alive() {
        let t0 = std::time::Instant::now();
        let busy = Duration::from_secs(60);
        let idle = Duration::from_secs(90);
        let at = |s: u64| t0 + Duration::from_secs(s);
        assert!(alive(Phase::Busy(t0), at(0), busy, idle));
        assert!(alive(Phase::Busy(t0), at(59), busy, idle));
        assert!(!alive(Phase::Busy(t0), at(60), busy, idle), "a hung round");
        assert!(alive(Phase::Idle(t0), at(89), busy, idle));
        assert!(
            !alive(Phase::Idle(t0), at(90), busy, idle),
            "a loop that stopped"
        );
        // A clock read before the mark (another thread) is not a hang.
        assert!(alive(Phase::Busy(at(5)), t0, busy, idle));
        let progress = Progress::new(busy, idle);
        assert!(progress.alive(std::time::Instant::now()));
        progress.busy();
        assert!(matches!(progress.phase(), Phase::Busy(_)));
        assert!(!progress.alive(std::time::Instant::now() + busy));
        progress.idle();
        assert!(progress.alive(std::time::Instant::now() + busy));
    }

    #[test]
    fn no_watchdog_means_no_pings() {
        assert_eq!(ping_interval(None), None);
        assert_eq!(ping_interval(Some(Duration::ZERO)), None);
    }

    #[test]
    fn without_a_service_manager_nothing_is_sent() {
        // Test processes are not started by systemd: NOTIFY_SOCKET is unset.
        if std::env::var_os("NOTIFY_SOCKET").is_some() {
            return;
        }
        notify_stopping();
        assert!(sd_notify::notify(&[NotifyState::Ready]).is_ok());
    }
}
