//! `nodecare harep`: one run of instance auto-repair with harep's options and output, for
//! operators who run Ganeti's `harep` from cron.
//!
//! A front of the coordinator's one-shot path: it runs `nodecare-coordinator --harep` with the
//! options given (found beside this `nodecare` executable, else in `/usr/bin`; both ship in
//! the `nodecare-coordinator` package), which replaces this process, so harep's output and the
//! exit status are the coordinator's. There is one implementation of instance repair, and this
//! binary links neither SQLite nor the coordinator's HTTP server.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Args;
use nodecare_core::config::DEFAULT_CONFIG_PATH;

/// The coordinator's binary.
const COORDINATOR: &str = "nodecare-coordinator";

/// Where the coordinator's binary is when not beside `nodecare`.
const COORDINATOR_DIR: &str = "/usr/bin";

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
    /// State directory for the ledger of repairs in flight [default: the configuration's,
    /// /var/lib/nodecare]. With --dry-run a missing database is not created.
    #[arg(long, value_name = "DIR")]
    state_dir: Option<PathBuf>,
    #[arg(hide = true)]
    extra: Vec<String>,
}

/// The coordinator's arguments for `args` (the one-shot checks their values).
fn coordinator_args(args: &HarepArgs) -> Vec<OsString> {
    let mut out: Vec<OsString> = vec!["--harep".into()];
    if args.config.as_os_str() != DEFAULT_CONFIG_PATH {
        out.push("--config".into());
        out.push(args.config.clone().into_os_string());
    }
    if let Some(dir) = &args.state_dir {
        out.push("--state-dir".into());
        out.push(dir.clone().into_os_string());
    }
    match &args.luxi {
        Some(Some(socket)) => out.push(format!("--luxi={socket}").into()),
        Some(None) => out.push("--luxi".into()),
        None => {}
    }
    if let Some(master) = &args.master {
        out.push(format!("--master={master}").into());
    }
    if let Some(ca) = &args.rapi_ca {
        out.push("--rapi-ca".into());
        out.push(ca.clone().into_os_string());
    }
    if args.dry_run {
        out.push("--dry-run".into());
    }
    out.push(format!("--job-delay={}", args.job_delay).into());
    if let Some(reason) = &args.reason {
        out.push(format!("--reason={reason}").into());
    }
    if !args.extra.is_empty() {
        out.push("--".into());
        out.extend(args.extra.iter().map(OsString::from));
    }
    out
}

/// The coordinator's binary: beside the running `nodecare` (`beside`: its directory), else in
/// `/usr/bin`.
fn coordinator_binary(beside: Option<&Path>) -> Option<PathBuf> {
    beside
        .map(|dir| dir.join(COORDINATOR))
        .into_iter()
        .chain(std::iter::once(
            Path::new(COORDINATOR_DIR).join(COORDINATOR),
        ))
        .find(|path| path.is_file())
}

pub(crate) fn run(args: HarepArgs) -> ExitCode {
    let exe = std::env::current_exe().ok();
    let beside = exe.as_deref().and_then(Path::parent);
    let Some(binary) = coordinator_binary(beside) else {
        eprintln!(
            "Error: `nodecare harep` runs {COORDINATOR} --harep, which is neither beside {} nor \
             in {COORDINATOR_DIR}: install the nodecare-coordinator package",
            beside.map_or_else(|| "nodecare".to_owned(), |d| d.display().to_string())
        );
        return ExitCode::from(1);
    };
    exec(&binary, &coordinator_args(&args))
}

/// Replaces this process with `binary args` (its output and exit status are this command's).
#[cfg(unix)]
fn exec(binary: &Path, args: &[OsString]) -> ExitCode {
    use std::os::unix::process::CommandExt as _;
    #[expect(
        clippy::disallowed_methods,
        reason = "replaces this process (exec): no child to sandbox or kill"
    )]
    let error = std::process::Command::new(binary).args(args).exec();
    eprintln!("Error: cannot run {}: {error}", binary.display());
    ExitCode::from(1)
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(flatten)]
        args: HarepArgs,
    }

    fn passed(line: &[&str]) -> Vec<String> {
        let cli =
            Cli::try_parse_from(std::iter::once("harep").chain(line.iter().copied())).unwrap();
        coordinator_args(&cli.args)
            .into_iter()
            .map(|a| a.into_string().unwrap())
            .collect()
    }

    #[test]
    fn options_pass_through_to_the_one_shot() {
        assert_eq!(passed(&[]), ["--harep", "--job-delay=10"]);
        assert_eq!(
            passed(&[
                "-c",
                "/etc/x.toml",
                "--state-dir",
                "/s",
                "-m",
                "h:1",
                "--rapi-ca",
                "/ca",
                "--dry-run",
                "--job-delay=-1",
                "--reason=-r two",
                "extra"
            ]),
            [
                "--harep",
                "--config",
                "/etc/x.toml",
                "--state-dir",
                "/s",
                "--master=h:1",
                "--rapi-ca",
                "/ca",
                "--dry-run",
                "--job-delay=-1",
                "--reason=-r two",
                "--",
                "extra"
            ]
        );
        assert_eq!(passed(&["-L"]), ["--harep", "--luxi", "--job-delay=10"]);
        assert_eq!(
            passed(&["-L", "/s.sock"]),
            ["--harep", "--luxi=/s.sock", "--job-delay=10"]
        );
    }

    #[test]
    fn the_coordinator_is_found_beside_nodecare_first() {
        let dir = tempfile::tempdir().unwrap();
        let here = dir.path().join(COORDINATOR);
        std::fs::write(&here, "").unwrap();
        assert_eq!(coordinator_binary(Some(dir.path())), Some(here));
        let empty = tempfile::tempdir().unwrap();
        let fallback = coordinator_binary(Some(empty.path()));
        assert!(fallback.is_none_or(|p| p.starts_with(COORDINATOR_DIR)));
    }
}
