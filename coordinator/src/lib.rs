//! nodecare-coordinator: the master-side daemon that turns signed self-diagnose reports into
//! Ganeti repair actions (the role of Ganeti's never-released maintd).
//!
//! The pure decisions live in the `nodecare-core` crate (`nodecare_core::{incident, plan, gate,
//! breaker, duty, storage, load, campaign, …}`), the executor in `nodecare-exec`, the Ganeti
//! trait and the RAPI client in `nodecare-ganeti`; each is named by its own crate. This crate
//! is their IO:
//!
//! - [`scrape`]: reading and verifying the agents' signed reports.
//! - [`repair`]: signed live-repair requests to agents.
//! - [`store`]: durable state (SQLite).
//! - [`reconcile`]: the round, an idempotent reconciler; [`round`]: its input and duties.
//! - [`auth`]: the users file and HTTP basic auth of writes.
//! - [`metrics`]: `/metrics`; [`notify`]: the incident webhook.
//! - [`admission`]: the gate's write API (other tools' admission requests, overrides, the
//!   storm breaker's reset).
//! - [`http`]: the status API; [`ui`]: the web status page; [`daemon`] ties it all together;
//!   [`config`]: the configuration (`nodecare_core::config`, read from its file here).

pub mod admission;
pub mod api;
pub mod approval_api;
pub mod approval_hook;
pub mod auth;
pub mod background;
pub mod balance;
pub mod board;
pub mod callers;
pub mod campaign_exec;
pub mod cli;
pub mod daemon;
pub mod explain_api;
pub mod failback;
pub mod freeze_api;
pub mod grace_waiting;
pub mod harep;
pub mod http;
pub mod instance_repair_exec;
pub mod job_wait;
pub mod maintenance_api;
pub mod memory;
pub mod metrics;
pub mod node_repair;
pub mod notify;
pub mod reconcile;
pub mod recorder;
pub mod repair;
pub mod replica;
pub mod round;
pub mod scrape;
pub mod server;
pub mod store;
pub mod ui;
pub mod ui_explain;
pub mod ui_what_if;
pub mod watch;
pub mod what_if;
pub mod what_if_api;

pub use cli::command;

/// The configuration: parsed and checked by `nodecare_core::config`, read from its file here.
pub mod config {
    pub use nodecare_core::config::*;

    use std::path::Path;

    use nodecare_ganeti::rapi::{Credentials, RapiClient, RapiConfig, ServerTrust};

    /// Reads the configuration file `path`; a missing file is an error only if `required`.
    pub fn load(path: &Path, required: bool) -> Result<Config, ConfigError> {
        Config::from_read(path, std::fs::read_to_string(path), required)
    }
    /// The RAPI client of the configuration's `[rapi]` section: the certificate pinned (read now,
    /// so that a missing one is a configuration error), the credentials file read.
    pub fn rapi_client(config: &Config) -> anyhow::Result<RapiClient> {
        use anyhow::Context as _;
        let trust = if config.rapi.url.starts_with("http://") {
            ServerTrust::PlainHttp
        } else {
            let pem = std::fs::read(&config.rapi.certificate).with_context(|| {
                format!(
                    "cannot read the RAPI certificate {}",
                    config.rapi.certificate.display()
                )
            })?;
            ServerTrust::PinnedCertPem(pem)
        };
        let mut rapi = RapiConfig::new(config.rapi.url.clone(), trust);
        rapi.request_timeout = Config::duration(config.rapi.timeout);
        if let Some(path) = &config.rapi.credentials {
            // A secret: refused when others could have written it or can read it.
            nodecare_daemon::secret::check_secret_file(path)?;
            rapi = rapi.with_credentials(Credentials::from_file(path)?);
        }
        crate::install_crypto_provider();
        Ok(RapiClient::new(rapi)?.with_reason_source(&config.reason_source)?)
    }

    /// The calendar of the configuration's `[calendar]` section, in its time zone (read now
    /// from the system's zoneinfo; empty: the system's own zone), with the configuration's
    /// freezes only (the run-time ones are the state's, added each round).
    pub fn calendar(config: &Config) -> Result<nodecare_core::calendar::Calendar, ConfigError> {
        let section = &config.calendar;
        let (zone, name) = if section.time_zone.is_empty() {
            let zone = jiff::tz::TimeZone::system();
            let name = zone
                .iana_name()
                .unwrap_or("the system's time zone")
                .to_owned();
            (zone, name)
        } else {
            let zone = jiff::tz::TimeZone::get(&section.time_zone).map_err(|error| {
                ConfigError::Invalid(format!(
                    "calendar.time_zone {:?}: {error}",
                    section.time_zone
                ))
            })?;
            (zone, section.time_zone.clone())
        };
        section
            .calendar(zone, &name, &[])
            .map_err(|e| ConfigError::Invalid(format!("calendar: {e}")))
    }
}

/// Installs rustls's `ring` provider as the process default (idempotent). Every HTTP client of
/// this crate needs it, since reqwest is built without a provider of its own.
pub fn install_crypto_provider() {
    // An error only means a provider is installed already.
    if rustls::crypto::ring::default_provider()
        .install_default()
        .is_err()
    {
        tracing::trace!("rustls crypto provider already installed");
    }
}
