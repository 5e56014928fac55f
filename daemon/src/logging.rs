//! Logging via tracing, readable under journald: no colours unless stderr is a terminal, and no
//! timestamps when journald (which adds its own) captures the output.

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

/// Installs the global subscriber. `RUST_LOG` overrides `filter`. Calling it twice is harmless.
pub fn init(filter: &str) {
    let filter = EnvFilter::try_from_default_env()
        .or_else(|_| EnvFilter::try_new(filter))
        .unwrap_or_else(|_| EnvFilter::new("info"));
    let ansi = std::io::stderr().is_terminal();
    let under_journald = std::env::var_os("JOURNAL_STREAM").is_some();
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(ansi)
        .with_target(false);
    let result = if under_journald {
        builder.without_time().try_init()
    } else {
        builder.try_init()
    };
    // Already installed (tests, or a second call): keep the first one.
    drop(result);
}
