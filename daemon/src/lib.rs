//! What every nodecare daemon shares: systemd integration (`Type=notify`, watchdog) and logging
//! that reads well under journald, the `/metrics` text format, and the checks on secret files.

pub mod logging;
pub mod metrics;
pub mod secret;
pub mod systemd;
