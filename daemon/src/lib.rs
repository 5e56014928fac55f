//! What every nodecare daemon shares: systemd integration (`Type=notify`, watchdog) and logging
//! that reads well under journald, and the `/metrics` text format.

pub mod logging;
pub mod metrics;
pub mod systemd;
