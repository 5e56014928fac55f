//! `nodecare harep`: one run of instance auto-repair with harep's options and output, for
//! operators who run Ganeti's `harep` from cron.
//!
//! It is a front of the coordinator's one-shot path (`nodecare-coordinator --harep`): the same
//! pure duty (`duty::instance_repair`), the same gate and the same executor
//! (`instance_repair_exec`), so there is one implementation of instance repair. Ganeti is
//! reached through RAPI: `-m ADDRESS` (with `--rapi-ca`, as `nodecare roll`), or, with `-L` or
//! no option, the `[rapi]` section of the coordinator's configuration (on the master, where
//! harep's `-L` reaches the local master daemon). In-flight repairs are recorded in the
//! coordinator's state directory, shared with a running coordinator.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use clap::Args;
use nodecare_coordinator::instance_repair_exec::{self, RunOptions};
use nodecare_coordinator::store::Store;
use nodecare_core::config::{Config, DEFAULT_CONFIG_PATH};
use nodecare_ganeti::Ganeti;

#[derive(Debug, Args)]
#[command(disable_version_flag = true)]
pub(crate) struct HarepArgs {
    /// Reach the local master (harep's Luxi option): nodecare uses the RAPI settings of the
    /// coordinator's configuration (`[rapi]`); a SOCKET given is not used.
    #[arg(short = 'L', long = "luxi", num_args = 0..=1, value_name = "SOCKET")]
    luxi: Option<Option<String>>,
    /// Reach the cluster via RAPI at ADDRESS (host, host:port or https://user:pass@host:port).
    #[arg(
        short = 'm',
        long = "master",
        value_name = "ADDRESS",
        conflicts_with = "luxi"
    )]
    master: Option<String>,
    /// PEM file with the cluster's RAPI certificate, pinned for -m.
    #[arg(long, value_name = "FILE", requires = "master")]
    rapi_ca: Option<PathBuf>,
    /// Only show what would be done: submit no job, change no tag.
    #[arg(long)]
    dry_run: bool,
    /// harep's delay before a repair's opcodes (seconds, at least 0). Accepted for
    /// compatibility: nodecare records a repair before submitting it, so that no other run
    /// starts one on the same instance, and needs no delay (see docs/harep.md).
    #[arg(long, value_name = "SECONDS", default_value_t = 10.0)]
    job_delay: f64,
    /// Reason added to the reason trail of every job submitted.
    #[arg(long, value_name = "TEXT")]
    reason: Option<String>,
    /// The coordinator's configuration (its `[rapi]` section, caps and state directory). A
    /// missing default file means all defaults.
    #[arg(short = 'c', long, value_name = "FILE", default_value = DEFAULT_CONFIG_PATH)]
    config: PathBuf,
    /// State directory for the records of repairs in flight [default: the configuration's,
    /// /var/lib/nodecare]. With --dry-run a missing database is not created.
    #[arg(long, value_name = "DIR")]
    state_dir: Option<PathBuf>,
    #[arg(hide = true)]
    extra: Vec<String>,
}

fn fail(msg: &str) -> ExitCode {
    eprintln!("Error: {msg}");
    ExitCode::from(1)
}

/// The reason text, checked: one line of printable text.
fn check_reason(reason: &str) -> Result<String, String> {
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
fn master_url(master: &str) -> Result<String, String> {
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

pub(crate) fn run(args: HarepArgs) -> ExitCode {
    if !args.extra.is_empty() {
        return fail("this program doesn't take any arguments.");
    }
    if !(args.job_delay.is_finite() && args.job_delay >= 0.0) {
        return fail("--job-delay must be a number of seconds, at least 0");
    }
    let note = match args.reason.as_deref().map(check_reason).transpose() {
        Ok(note) => note,
        Err(e) => return fail(&e),
    };
    let config_given = args.config.as_os_str() != DEFAULT_CONFIG_PATH;
    let config = match Config::from_read(
        &args.config,
        std::fs::read_to_string(&args.config),
        config_given,
    ) {
        Ok(config) => config,
        Err(e) => return fail(&e.to_string()),
    };
    if let Err(e) = config.validate() {
        return fail(&e.to_string());
    }
    if let Some(Some(socket)) = &args.luxi {
        eprintln!(
            "nodecare harep: Luxi is not used ({socket}); reaching Ganeti through the RAPI of {}",
            config.rapi.url
        );
    }
    let ganeti: Arc<dyn Ganeti> = match &args.master {
        Some(master) => {
            let url = match master_url(master) {
                Ok(url) => url,
                Err(e) => return fail(&e),
            };
            match crate::roll_http::client(&url, args.rapi_ca.as_deref()).and_then(|(client, _)| {
                client
                    .with_reason_source(&config.reason_source)
                    .map_err(|e| e.to_string())
            }) {
                Ok(client) => Arc::new(client),
                Err(e) => return fail(&e),
            }
        }
        None => match nodecare_coordinator::cli::rapi_client(&config) {
            Ok(client) => Arc::new(client),
            Err(e) => return fail(&format!("{e:#}")),
        },
    };
    let state_dir = args.state_dir.as_deref().unwrap_or(&config.state_dir);
    let store = match open_store(state_dir, args.dry_run) {
        Ok(store) => store,
        Err(e) => return fail(&e),
    };
    let policy = config.one_shot_policy();
    let options = RunOptions {
        dry_run: args.dry_run,
        note,
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => return fail(&format!("cannot start: {e}")),
    };
    let executor = nodecare_coordinator::exec::Executor::new(Arc::new(store));
    let one = match runtime.block_on(instance_repair_exec::run_once_with(
        ganeti.as_ref(),
        &executor,
        &policy,
        &options,
        now_ms(),
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

/// The milliseconds since the Unix epoch now.
fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
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
