//! `nodecare-coordinator --harep` (and `nodecare harep`, its front): one run of instance
//! auto-repair with Ganeti's harep options and output, for operators who run `harep` from
//! cron. The same pure duty (`duty::instance_repair`), gate and executor
//! ([`crate::instance_repair_exec`]) as the daemon's round: one implementation of instance
//! repair.
//!
//! Ganeti is reached through RAPI: `-m ADDRESS` (with `--rapi-ca`, as `nodecare roll`), or, with
//! `-L` or no option, the `[rapi]` section of the configuration (on the master, where harep's
//! `-L` reaches the local master daemon). Repairs in flight are ledger entries in the state
//! directory, shared with a running coordinator. Exit status: 0, or 1 when anything went wrong
//! (a usage error, an unreadable cluster, a failure of the run: each said on stderr).

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use crate::config::Config;
use crate::instance_repair_exec::{self, RunOptions};
use crate::store::Store;
use nodecare_exec::Executor;
use nodecare_ganeti::Ganeti;
use nodecare_ganeti::rapi::{RapiClient, RapiConfig};

/// harep's options, as given.
#[derive(Debug, Clone, Default)]
pub struct HarepOptions {
    /// `-L [SOCKET]`: the configuration's RAPI (a socket given is not used).
    pub luxi: Option<Option<String>>,
    /// `-m ADDRESS`.
    pub master: Option<String>,
    /// `--rapi-ca FILE`, pinned for `-m`.
    pub rapi_ca: Option<PathBuf>,
    /// `--dry-run`.
    pub dry_run: bool,
    /// `--job-delay SECONDS` (accepted, checked, not needed).
    pub job_delay: f64,
    /// `--reason TEXT`.
    pub reason: Option<String>,
    /// Arguments harep does not take.
    pub extra: Vec<String>,
}

fn fail(msg: &str) -> ExitCode {
    eprintln!("Error: {msg}");
    ExitCode::from(1)
}

/// The reason text, checked: one line of printable text.
pub fn check_reason(reason: &str) -> Result<String, String> {
    let reason = reason.trim();
    if reason.is_empty() {
        return Err("--reason must not be empty".into());
    }
    if reason.chars().any(char::is_control) {
        return Err("--reason must be one line of printable text".into());
    }
    if reason.chars().count() > 512 {
        return Err("--reason must be at most 512 characters".into());
    }
    Ok(reason.to_owned())
}

/// `-m ADDRESS` as an https URL (as htools: a bare host gets the default RAPI port).
pub fn master_url(master: &str) -> Result<String, String> {
    if master.starts_with("file://") {
        return Err(format!(
            "{master}: harep needs a live cluster; give -m host, host:port or https://..."
        ));
    }
    Ok(if master.contains("://") {
        master.to_owned()
    } else if master.contains(':') {
        format!("https://{master}")
    } else {
        format!("https://{master}:5080")
    })
}

/// A RAPI client for `url` (credentials in it, if any), its self-signed certificate pinned
/// from `ca`.
fn master_client(url: &str, ca: Option<&Path>) -> Result<RapiClient, String> {
    let (config, shown) = RapiConfig::for_operator(url, ca)?;
    crate::install_crypto_provider();
    RapiClient::new(config).map_err(|e| format!("{shown}: {e}"))
}

fn open_store(dir: &Path, dry_run: bool) -> Result<Store, String> {
    let db = dir.join("state.db");
    let store = if dry_run && !db.exists() {
        // Nothing in flight to know of, and a dry run leaves nothing behind.
        Store::open(Path::new(":memory:"))
    } else {
        Store::open_dir(dir)
    };
    store.map_err(|e| format!("state database {}: {e}", db.display()))
}

/// One run with `options` against `config` (its flags applied): harep's output on stdout,
/// problems on stderr.
pub fn run(config: &Config, options: &HarepOptions) -> ExitCode {
    if !options.extra.is_empty() {
        return fail("this program doesn't take any arguments.");
    }
    if !(options.job_delay.is_finite() && options.job_delay >= 0.0) {
        return fail("--job-delay must be a number of seconds, at least 0");
    }
    let note = match options.reason.as_deref().map(check_reason).transpose() {
        Ok(note) => note,
        Err(e) => return fail(&e),
    };
    if let Some(Some(socket)) = &options.luxi {
        eprintln!(
            "nodecare harep: Luxi is not used ({socket}); reaching Ganeti through the RAPI of {}",
            config.rapi.url
        );
    }
    let ganeti: Arc<dyn Ganeti> = match &options.master {
        Some(master) => {
            let url = match master_url(master) {
                Ok(url) => url,
                Err(e) => return fail(&e),
            };
            match master_client(&url, options.rapi_ca.as_deref()).and_then(|client| {
                client
                    .with_reason_source(&config.reason_source)
                    .map_err(|e| e.to_string())
            }) {
                Ok(client) => Arc::new(client),
                Err(e) => return fail(&e),
            }
        }
        None => match crate::config::rapi_client(config) {
            Ok(client) => Arc::new(client),
            Err(e) => return fail(&format!("{e:#}")),
        },
    };
    let store = match open_store(&config.state_dir, options.dry_run) {
        Ok(store) => store,
        Err(e) => return fail(&e),
    };
    let executor = Executor::new(Arc::new(store));
    let policy = config.one_shot_policy();
    let run_options = RunOptions {
        dry_run: options.dry_run,
        note,
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => return fail(&format!("cannot start: {e}")),
    };
    let one = match runtime.block_on(instance_repair_exec::run_once_with(
        ganeti.as_ref(),
        &executor,
        &policy,
        &run_options,
        nodecare_protocol::now_ms(),
        &mut uuid::Uuid::new_v4,
    )) {
        Ok(one) => one,
        Err(e) => return fail(&format!("cannot read the cluster: {e}")),
    };
    print!("{}", one.harep_output());
    for error in &one.report.errors {
        eprintln!("nodecare harep: {error}");
    }
    if one.report.errors.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn master_addresses_as_htools() {
        assert_eq!(master_url("m").unwrap(), "https://m:5080");
        assert_eq!(master_url("m:15080").unwrap(), "https://m:15080");
        assert_eq!(
            master_url("https://u:p@m:5080").unwrap(),
            "https://u:p@m:5080"
        );
        assert!(master_url("file:///tmp/x").is_err());
    }

    #[test]
    fn reasons_are_one_printable_line() {
        assert_eq!(check_reason(" cron run ").unwrap(), "cron run");
        assert!(check_reason("").is_err());
        assert!(check_reason("a\nb").is_err());
        assert!(check_reason(&"x".repeat(513)).is_err());
    }
}
