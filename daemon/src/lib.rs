//! What every nodecare daemon shares: systemd integration (`Type=notify`, watchdog) and logging
//! that reads well under journald.

pub mod logging;
pub mod systemd;
