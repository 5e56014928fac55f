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
