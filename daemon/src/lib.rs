//! What every nodecare daemon shares: systemd integration (`Type=notify`, watchdog) and logging
//! that reads well under journald, the `/metrics` text format, the checks on secret files, and
//! connection slots counted per peer address and in total.

pub mod logging;
pub mod metrics;
pub mod secret;
pub mod slots;
pub mod systemd;
