//! The runner against hostile executables: each one ends within its timeout plus one second,
//! leaves no child, no zombie and no descriptor behind.
//!
//! One test binary of its own, with the cases run one after another, so that descriptor and
//! child counts are not disturbed by other tests.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test helpers")]

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::{Duration, Instant};

use nodecare_collectors::runner::{self, ExecError, ExecLimits, ExitStatus, FIXED_PATH, Runner};
use nodecare_collectors::whitelist::Whitelist;
use support::{SERIAL, open_fds, owner, script};

mod support;

/// Processes whose parent is this process (including zombies).
fn children() -> Vec<String> {
    let me = std::process::id().to_string();
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        // pid (comm) state ppid ...
        let Some(after_comm) = stat.rfind(')').map(|at| &stat[at + 1..]) else {
            continue;
        };
        let fields: Vec<&str> = after_comm.split_whitespace().collect();
        if fields.get(1) == Some(&me.as_str()) {
            found.push(stat);
        }
    }
    found
}

const HOSTILE: &[(&str, &str)] = &[
    ("hangs", "#!/bin/sh\nexec sleep 1000\n"),
    (
        "grandchild-holds-stdout",
        "#!/bin/sh\n( sleep 1000 ) &\necho '{\"status\":\"Ok\"}'\nexit 0\n",
    ),
    (
        "ten-megabytes",
        "#!/bin/sh\nhead -c 10000000 /dev/zero | tr '\\0' 'x'\n",
    ),
    ("invalid-utf8", "#!/bin/sh\nprintf '\\377\\376{}'\n"),
    ("invalid-json", "#!/bin/sh\necho '{\"status\":'\n"),
    (
        "two-objects",
        "#!/bin/sh\necho '{\"status\":\"Ok\"}{\"status\":\"Ok\"}'\n",
    ),
    (
        "exits-nonzero",
        "#!/bin/sh\necho '{\"status\":\"Ok\"}'\necho broken >&2\nexit 3\n",
    ),
    ("env-and-cwd", "#!/bin/sh\nenv\npwd\nls -l /proc/$$/fd\n"),
    ("reads-stdin", "#!/bin/sh\ncat\n"),
    (
        "stderr-flood",
        "#!/bin/sh\nhead -c 1000000 /dev/zero >&2\necho '{\"status\":\"Ok\"}'\n",
    ),
    ("killed-by-signal", "#!/bin/sh\nkill -9 $$\n"),
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_executables_are_contained() {
    let _serial = SERIAL.lock().await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    for (name, body) in HOSTILE {
        script(dir.path(), name, body);
    }
    let whitelist = Whitelist::with_owner(dir.path(), owner());
    let limits = ExecLimits {
        timeout: Duration::from_secs(1),
        stdout_cap: 64 * 1024,
        stderr_cap: 1024,
    };
    // Warm up the runtime (its own descriptors) before counting.
    let warm = whitelist.open("invalid-json").unwrap();
    runner::run(&warm, None, &limits).await.unwrap();
    drop(warm);
    let fds_before = open_fds();

    // Hangs: killed at the deadline.
    let started = Instant::now();
    let error = runner::run(&whitelist.open("hangs").unwrap(), None, &limits)
        .await
        .unwrap_err();
    assert!(matches!(error, ExecError::Timeout { .. }), "{error}");
    assert!(error.to_string().contains("timed out after 1s"), "{error}");
    assert!(started.elapsed() < limits.timeout + Duration::from_secs(1));

    // A grandchild holding stdout open: the run still ends at the deadline, and the whole
    // group is gone.
    let started = Instant::now();
    let error = runner::run(
        &whitelist.open("grandchild-holds-stdout").unwrap(),
        None,
        &limits,
    )
    .await
    .unwrap_err();
    assert!(matches!(error, ExecError::Timeout { .. }), "{error}");
    assert!(started.elapsed() < limits.timeout + Duration::from_secs(1));

    // 10 MB: an error as soon as the cap is passed, not a truncated parse.
    let started = Instant::now();
    let error = runner::run(&whitelist.open("ten-megabytes").unwrap(), None, &limits)
        .await
        .unwrap_err();
    assert_eq!(
        error,
        ExecError::StdoutOverflow {
            name: "ten-megabytes".into(),
            cap: 64 * 1024
        }
    );
    assert!(started.elapsed() < limits.timeout + Duration::from_secs(1));

    // Bad output is returned as is; judging it is the caller's business.
    let output = runner::run(&whitelist.open("invalid-utf8").unwrap(), None, &limits)
        .await
        .unwrap();
    assert_eq!(output.stdout, b"\xff\xfe{}");
    let output = runner::run(&whitelist.open("two-objects").unwrap(), None, &limits)
        .await
        .unwrap();
    assert!(output.status.success());

    let output = runner::run(&whitelist.open("exits-nonzero").unwrap(), None, &limits)
        .await
        .unwrap();
    assert_eq!(output.status, ExitStatus::Code(3));
    assert_eq!(output.stderr, b"broken\n");
    assert_eq!(output.status.to_string(), "exit code 3");

    let output = runner::run(&whitelist.open("killed-by-signal").unwrap(), None, &limits)
        .await
        .unwrap();
    assert_eq!(output.status, ExitStatus::Signal(9));

    // Empty environment with the fixed PATH, cwd /, stdin /dev/null, only 0-2 and the script.
    let output = runner::run(&whitelist.open("env-and-cwd").unwrap(), None, &limits)
        .await
        .unwrap();
    let text = String::from_utf8(output.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let env: Vec<&str> = lines
        .iter()
        .copied()
        .filter(|line| line.contains('='))
        .filter(|line| {
            !line.starts_with("PWD=") && !line.starts_with("SHLVL=") && !line.starts_with("_=")
        })
        .collect();
    assert_eq!(env, [format!("PATH={FIXED_PATH}").as_str()], "{text}");
    assert!(lines.contains(&"/"), "{text}");
    // Each descriptor of the shell: `N -> target`. Only stdin, the two output pipes and the
    // script itself may be open.
    let descriptors: Vec<(&str, &str)> = lines
        .iter()
        .filter_map(|line| line.split_once(" -> "))
        .map(|(left, target)| (left.rsplit(' ').next().unwrap_or(""), target))
        .collect();
    let target_of = |fd: &str| descriptors.iter().find(|(n, _)| *n == fd).map(|(_, t)| *t);
    let allowed_pipes = [target_of("1"), target_of("2")];
    for (fd, target) in &descriptors {
        let ok = *target == "/dev/null"
            || target.ends_with("/env-and-cwd")
            || allowed_pipes.contains(&Some(*target));
        assert!(
            ok,
            "descriptor {fd} -> {target} leaked into the child:\n{text}"
        );
    }
    assert!(descriptors.len() >= 4, "{text}");

    let output = runner::run(&whitelist.open("reads-stdin").unwrap(), None, &limits)
        .await
        .unwrap();
    assert!(output.stdout.is_empty());
    let output = runner::run(
        &whitelist.open("reads-stdin").unwrap(),
        Some(b"{\"status\":\"evacuate\"}".to_vec()),
        &limits,
    )
    .await
    .unwrap();
    assert_eq!(output.stdout, b"{\"status\":\"evacuate\"}");

    let output = runner::run(&whitelist.open("stderr-flood").unwrap(), None, &limits)
        .await
        .unwrap();
    assert!(output.status.success());
    assert_eq!(output.stderr.len(), 1024);
    assert!(output.stderr_truncated);

    // Nothing left behind.
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(
        children(),
        Vec::<String>::new(),
        "children or zombies left behind"
    );
    assert_eq!(open_fds(), fds_before, "descriptors leaked");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn file_replaced_after_check_is_not_what_runs() {
    let _serial = SERIAL.lock().await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    script(dir.path(), "checked", "#!/bin/sh\necho checked\n");
    let whitelist = Whitelist::with_owner(dir.path(), owner());
    let verified = whitelist.open("checked").unwrap();
    std::fs::rename(dir.path().join("checked"), dir.path().join("moved")).unwrap();
    script(dir.path(), "checked", "#!/bin/sh\necho swapped\n");
    let output = runner::run(&verified, None, &ExecLimits::default())
        .await
        .unwrap();
    assert_eq!(output.stdout, b"checked\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrency_is_bounded_and_group_is_killed_after_the_run() {
    let _serial = SERIAL.lock().await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    script(dir.path(), "slow", "#!/bin/sh\nsleep 0.3\necho done\n");
    // Leaves a background process that closed its output: must not survive the run.
    script(
        dir.path(),
        "daemonizes",
        "#!/bin/sh\n( exec sleep 1000 >/dev/null 2>&1 ) &\necho $!\n",
    );
    let whitelist = Whitelist::with_owner(dir.path(), owner());
    let runner = Runner::new(1);
    let limits = ExecLimits::default();
    let started = Instant::now();
    let one = whitelist.open("slow").unwrap();
    let two = whitelist.open("slow").unwrap();
    let (a, b) = tokio::join!(
        runner.run(&one, None, &limits),
        runner.run(&two, None, &limits)
    );
    assert!(a.is_ok() && b.is_ok());
    assert!(
        started.elapsed() >= Duration::from_millis(600),
        "ran in parallel"
    );

    let output = runner
        .run(&whitelist.open("daemonizes").unwrap(), None, &limits)
        .await
        .unwrap();
    let background: u32 = String::from_utf8(output.stdout)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(
        !Path::new(&format!("/proc/{background}")).exists()
            || std::fs::read_to_string(format!("/proc/{background}/stat"))
                .map(|stat| stat.contains(") Z "))
                .unwrap_or(true),
        "background process survived the run"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_script_is_checked_by_name() {
    use nodecare_collectors::diagnose::{DiagnoseConfig, ScriptCheckError, check_script};
    let _serial = SERIAL.lock().await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    script(
        dir.path(),
        "evacuates",
        "#!/bin/sh\necho '{\"status\":\"evacuate\",\"details\":{\"disk\":\"sdc\"}}'\n",
    );
    script(dir.path(), "fails", "#!/bin/sh\necho broken >&2\nexit 3\n");
    script(dir.path(), "hangs", "#!/bin/sh\nexec sleep 1000\n");
    let config = DiagnoseConfig {
        dir: dir.path().to_owned(),
        owner: owner(),
        limits: ExecLimits {
            timeout: Duration::from_millis(500),
            ..ExecLimits::default()
        },
        ..DiagnoseConfig::default()
    };
    let runner = Runner::new(1);
    let (verdict, output) = check_script(&config, "evacuates", &runner).await.unwrap();
    assert_eq!(verdict.status.to_string(), "evacuate");
    assert!(output.status.success());
    let error = check_script(&config, "fails", &runner).await.unwrap_err();
    assert!(
        matches!(&error, ScriptCheckError::NoVerdict { reason, .. }
            if reason == "failed with exit code 3; stderr: broken"),
        "{error}"
    );
    let error = check_script(&config, "hangs", &runner).await.unwrap_err();
    assert!(
        matches!(error, ScriptCheckError::Run(ExecError::Timeout { .. })),
        "{error}"
    );
    let error = check_script(&config, "absent", &runner).await.unwrap_err();
    assert!(matches!(error, ScriptCheckError::Refused(_)), "{error}");
}
