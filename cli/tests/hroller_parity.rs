//! `nodecare roll` against the real `hroller`, side by side: hroller's 17
//! upstream shelltests, and a sweep of every htools `.data` file of the
//! Ganeti test suite under every node-selection mode.
//!
//! Needs Debian's `ganeti-htools-3.0` and `ganeti-testsuite`. Without them
//! the tests skip, unless `NODECARE_REQUIRE_GANETI=1` (CI), where they fail.

#![allow(clippy::unwrap_used)] // test helpers: a failed setup should abort the test
#![allow(
    clippy::disallowed_methods,
    reason = "the test runs hroller and the nodecare binary"
)]

use std::collections::BTreeSet;
use std::io::{Read as _, Seek as _};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

const TESTSUITE: &str = "/usr/share/ganeti/testsuite/test";

/// Shelltests whose nodecare result legitimately differs from hroller's,
/// with the reason (see docs/roll.md).
const KNOWN_DIFFERENCES: &[(usize, &str)] = &[(
    17,
    "hroller's greedy secondary split gives up; nodecare finds a feasible 3-group plan",
)];

#[derive(Debug)]
struct ShellTest {
    number: usize,
    args: Vec<String>,
    stdout: Expect,
    stderr: Option<String>,
    exit: i32,
}

#[derive(Debug)]
enum Expect {
    Literal(String),
    Regex(String),
    Any,
}

fn find_hroller() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join("hroller"))
        .find(|p| p.is_file())
}

/// Parses the shelltest file: a command line, then `>>>` stdout (literal
/// lines or a `/regex/`), `>>>2` stderr, `>>>= N` exit code.
fn parse_tests(text: &str, data_dir: &Path) -> Vec<ShellTest> {
    let mut tests = Vec::new();
    let lines: Vec<&str> = text.lines().collect();
    let mut i = 0;
    while i < lines.len() {
        let Some(cmd) = lines[i].strip_prefix("./test/hs/hroller ") else {
            i += 1;
            continue;
        };
        let args: Vec<String> = cmd
            .replace("$TESTDATA_DIR", &data_dir.display().to_string())
            .split_whitespace()
            .map(str::to_owned)
            .collect();
        let mut t = ShellTest {
            number: tests.len() + 1,
            args,
            stdout: Expect::Any,
            stderr: None,
            exit: 0,
        };
        i += 1;
        while i < lines.len() && !lines[i].starts_with("./test/hs/hroller ") {
            let l = lines[i];
            if let Some(code) = l.strip_prefix(">>>=") {
                t.exit = code.trim().parse().unwrap_or(-1);
                i += 1;
            } else if l == ">>>2" {
                let mut block = String::new();
                i += 1;
                while i < lines.len() && !lines[i].starts_with(">>>") {
                    block.push_str(lines[i]);
                    block.push('\n');
                    i += 1;
                }
                t.stderr = Some(block);
            } else if let Some(rest) = l.strip_prefix(">>>") {
                if let Some(re) = rest.strip_prefix('/') {
                    let mut pattern = re.to_owned();
                    while !pattern.ends_with('/') {
                        i += 1;
                        pattern.push('\n');
                        pattern.push_str(lines[i]);
                    }
                    pattern.pop();
                    t.stdout = Expect::Regex(pattern);
                    i += 1;
                } else {
                    let mut block = String::new();
                    i += 1;
                    while i < lines.len() && !lines[i].starts_with(">>>") {
                        block.push_str(lines[i]);
                        block.push('\n');
                        i += 1;
                    }
                    t.stdout = Expect::Literal(block);
                }
            } else {
                i += 1;
            }
        }
        tests.push(t);
    }
    tests
}

fn run(program: &Path, pre: &[&str], args: &[String]) -> Output {
    Command::new(program)
        .args(pre)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", program.display()))
}

/// Reboot groups in hroller's text output (header and move lines excluded).
fn groups(stdout: &[u8]) -> Vec<String> {
    String::from_utf8_lossy(stdout)
        .lines()
        .filter(|l| !l.starts_with('\'') && !l.starts_with("  "))
        .map(str::to_owned)
        .collect()
}

fn check_expectation(t: &ShellTest, out: &Output) -> Result<(), String> {
    let stdout = String::from_utf8_lossy(&out.stdout);
    match &t.stdout {
        Expect::Literal(s) if *s != stdout => return Err(format!("stdout {stdout:?} != {s:?}")),
        Expect::Regex(re) => {
            let re = regex::Regex::new(re).map_err(|e| e.to_string())?;
            // `$` ends the output, which ends with a newline.
            if !re.is_match(stdout.strip_suffix('\n').unwrap_or(&stdout)) {
                return Err(format!("stdout {stdout:?} does not match /{re}/"));
            }
        }
        _ => {}
    }
    if let Some(e) = &t.stderr
        && *e != String::from_utf8_lossy(&out.stderr)
    {
        return Err(format!(
            "stderr {:?} != {e:?}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    if out.status.code() != Some(t.exit) {
        return Err(format!("exit {:?} != {}", out.status.code(), t.exit));
    }
    Ok(())
}

#[test]
fn hroller_shelltests_side_by_side() {
    let required = std::env::var("NODECARE_REQUIRE_GANETI").is_ok_and(|v| v == "1");
    let test_file = Path::new(TESTSUITE).join("hs/shelltests/htools-hroller.test");
    let data_dir = Path::new(TESTSUITE).join("data/htools");
    let hroller = find_hroller();
    let (Some(hroller), true) = (hroller, test_file.is_file()) else {
        let msg = "hroller or the ganeti-testsuite shelltests are missing \
                   (apt-get install ganeti-htools-3.0 ganeti-testsuite)";
        assert!(!required, "NODECARE_REQUIRE_GANETI=1 but {msg}");
        eprintln!("skipping: {msg}");
        return;
    };
    let nodecare = Path::new(env!("CARGO_BIN_EXE_nodecare"));
    let tests = parse_tests(&std::fs::read_to_string(&test_file).unwrap(), &data_dir);
    assert_eq!(tests.len(), 17, "expected hroller's 17 shelltests");
    let mut failures = Vec::new();
    for t in &tests {
        let real = run(&hroller, &[], &t.args);
        let compat = run(nodecare, &["roll", "--hroller-compat"], &t.args);
        let ours = run(nodecare, &["roll"], &t.args);
        let label = format!("shelltest {} ({})", t.number, t.args.join(" "));
        // The real binary still satisfies its own test.
        if let Err(e) = check_expectation(t, &real) {
            failures.push(format!("{label}: hroller itself: {e}"));
        }
        // Compatibility mode: byte for byte, stdout, stderr and exit code.
        if (&real.stdout, &real.stderr, real.status.code())
            != (&compat.stdout, &compat.stderr, compat.status.code())
        {
            failures.push(format!(
                "{label}: --hroller-compat differs:\nhroller: {:?} {:?} {:?}\nnodecare: {:?} {:?} {:?}",
                String::from_utf8_lossy(&real.stdout),
                String::from_utf8_lossy(&real.stderr),
                real.status.code(),
                String::from_utf8_lossy(&compat.stdout),
                String::from_utf8_lossy(&compat.stderr),
                compat.status.code()
            ));
        }
        // Default mode: identical output unless a known, documented improvement.
        let same = (&real.stdout, &real.stderr, real.status.code())
            == (&ours.stdout, &ours.stderr, ours.status.code());
        match KNOWN_DIFFERENCES.iter().find(|(n, _)| *n == t.number) {
            None if !same => failures.push(format!(
                "{label}: default mode differs: {:?} {:?} vs hroller {:?} {:?}",
                String::from_utf8_lossy(&ours.stdout),
                String::from_utf8_lossy(&ours.stderr),
                String::from_utf8_lossy(&real.stdout),
                String::from_utf8_lossy(&real.stderr),
            )),
            None => {}
            Some((_, why)) => {
                eprintln!("{label}: known difference: {why}");
                if same {
                    failures.push(format!("{label}: expected a difference, got none"));
                }
                if !ours.status.success() {
                    failures.push(format!("{label}: nodecare should succeed"));
                }
                if real.status.success() && groups(&ours.stdout).len() > groups(&real.stdout).len()
                {
                    failures.push(format!("{label}: more groups than hroller"));
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// What a run printed, or `None` when it outlived its time limit.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Outcome {
    stdout: String,
    stderr: String,
    code: Option<i32>,
}

/// hroller's run time on the test data is 10-50 ms; the limit only stops a
/// hang from stalling the test.
const HROLLER_TIME_LIMIT: Duration = Duration::from_secs(20);

/// Runs `program` with its output in temporary files (no pipe can fill
/// up), killing it after `limit`.
fn run_limited(program: &Path, args: &[String], limit: Duration) -> Option<Outcome> {
    let out = tempfile::tempfile().unwrap();
    let err = tempfile::tempfile().unwrap();
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(out.try_clone().unwrap())
        .stderr(err.try_clone().unwrap())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", program.display()));
    let start = Instant::now();
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        if start.elapsed() > limit {
            child.kill().unwrap();
            child.wait().unwrap();
            return None;
        }
        std::thread::sleep(Duration::from_millis(2));
    };
    let read = |mut f: std::fs::File| {
        let mut s = String::new();
        f.rewind().unwrap();
        f.read_to_string(&mut s).unwrap();
        s
    };
    Some(Outcome {
        stdout: read(out),
        stderr: read(err),
        code: status.code(),
    })
}

/// Non-empty reboot groups of `--no-headers --print-moves` output, as node lists.
fn group_nodes(stdout: &str) -> Vec<Vec<String>> {
    stdout
        .lines()
        .filter(|l| !l.is_empty() && !l.starts_with("  "))
        .map(|l| l.split(',').map(str::to_owned).collect())
        .collect()
}

/// Node names that `Warning: node X is skipped: …` lines name.
fn skipped_nodes(stderr: &str) -> BTreeSet<String> {
    stderr
        .lines()
        .filter_map(|l| l.strip_prefix("Warning: node "))
        .filter_map(|l| l.split_once(" is skipped: "))
        .map(|(n, _)| n.to_owned())
        .collect()
}

/// One command line of the sweep.
#[derive(Debug, Clone)]
struct Case {
    file: PathBuf,
    mode: &'static str,
    full_evacuation: bool,
    force: bool,
}

impl Case {
    fn args(&self) -> Vec<String> {
        let mut a = vec![
            "--no-headers".to_owned(),
            "--print-moves".to_owned(),
            "-t".to_owned(),
            self.file.display().to_string(),
        ];
        if !self.mode.is_empty() {
            a.push(self.mode.to_owned());
        }
        if self.full_evacuation {
            a.push("--full-evacuation".to_owned());
        }
        if self.force {
            a.push("--force".to_owned());
        }
        a
    }

    fn label(&self) -> String {
        let name = self.file.file_name().unwrap_or_default().to_string_lossy();
        format!("{name} [{}]", self.args()[4..].join(" "))
    }
}

/// Compares one case; returns failures (empty when all is well).
fn compare(case: &Case, real: &Outcome, compat: &Outcome, ours: &Outcome) -> Vec<String> {
    let label = case.label();
    let mut failures = Vec::new();
    if real != compat {
        failures.push(format!(
            "{label}: --hroller-compat differs:\nhroller:  {real:?}\nnodecare: {compat:?}"
        ));
    }
    if real.code != Some(0) {
        // hroller gives up: nodecare may plan or fail, as long as it says why.
        if ours.code != Some(0) && !ours.stderr.contains("Error: ") {
            failures.push(format!(
                "{label}: nodecare failed without an error: {ours:?}"
            ));
        }
        return failures;
    }
    if ours.code != Some(0) {
        failures.push(format!(
            "{label}: nodecare fails where hroller plans: {:?}",
            ours.stderr
        ));
        return failures;
    }
    let theirs = group_nodes(&real.stdout);
    let mine = group_nodes(&ours.stdout);
    let their_nodes: BTreeSet<&String> = theirs.iter().flatten().collect();
    let my_nodes: BTreeSet<&String> = mine.iter().flatten().collect();
    let skipped = skipped_nodes(&ours.stderr);
    // Every node hroller reboots is rebooted, unless nodecare says why not.
    for n in &their_nodes {
        if !my_nodes.contains(n) && !skipped.contains(n.as_str()) {
            failures.push(format!("{label}: node {n} is missing from nodecare's plan"));
        }
    }
    // Never more groups than hroller, in every mode: with
    // --skip-non-redundant the nodes nodecare adds (those hroller skips for
    // stopped or shared-storage instances, ganeti#1006) only join groups,
    // they never add one.
    if mine.len() > theirs.len() {
        failures.push(format!(
            "{label}: {} groups against hroller's {}:\nhroller:\n{}nodecare:\n{}",
            mine.len(),
            theirs.len(),
            real.stdout,
            ours.stdout
        ));
    }
    failures
}

#[test]
fn hroller_sweep_of_every_test_data_file() {
    let required = std::env::var("NODECARE_REQUIRE_GANETI").is_ok_and(|v| v == "1");
    let data_dir = Path::new(TESTSUITE).join("data/htools");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&data_dir)
        .map(|d| {
            d.filter_map(Result::ok)
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|x| x == "data"))
                .collect()
        })
        .unwrap_or_default();
    files.sort();
    let hroller = find_hroller();
    let (Some(hroller), false) = (hroller, files.is_empty()) else {
        let msg = "hroller or the ganeti-testsuite htools data are missing \
                   (apt-get install ganeti-htools-3.0 ganeti-testsuite)";
        assert!(!required, "NODECARE_REQUIRE_GANETI=1 but {msg}");
        eprintln!("skipping: {msg}");
        return;
    };
    // Ganeti 3.0.2 ships 50 such files; fewer means a broken install.
    assert!(
        files.len() >= 40,
        "only {} .data files in {}",
        files.len(),
        data_dir.display()
    );
    let nodecare = Path::new(env!("CARGO_BIN_EXE_nodecare"));
    let mut cases = Vec::new();
    for f in &files {
        for mode in ["", "--skip-non-redundant", "--ignore-non-redundant"] {
            for full_evacuation in [false, true] {
                for force in [false, true] {
                    cases.push(Case {
                        file: f.clone(),
                        mode,
                        full_evacuation,
                        force,
                    });
                }
            }
        }
    }
    let started = Instant::now();
    let next = AtomicUsize::new(0);
    let failures = Mutex::new(Vec::new());
    let limited = Mutex::new(Vec::new());
    let same_as_unforced = AtomicUsize::new(0);
    let compared = AtomicUsize::new(0);
    let hroller_time = Mutex::new(Duration::ZERO);
    let with = |args: &[&str], case: &Case| -> Vec<String> {
        args.iter()
            .map(|a| (*a).to_owned())
            .chain(case.args())
            .collect()
    };
    let worker = || {
        // Unforced cases come before their forced twin (same index parity),
        // so the twin can be skipped when the master check passed anyway:
        // `--force` only changes hroller's missing-master error.
        let mut unforced_ok: Option<(usize, bool)> = None;
        loop {
            let i = next.fetch_add(2, Ordering::SeqCst);
            let Some(case) = cases.get(i) else { break };
            let pair = [Some(case), cases.get(i + 1)];
            for (k, c) in pair.into_iter().flatten().enumerate() {
                if k == 1 && unforced_ok == Some((i, true)) {
                    same_as_unforced.fetch_add(1, Ordering::SeqCst);
                    continue;
                }
                let t = Instant::now();
                let Some(real) = run_limited(&hroller, &c.args(), HROLLER_TIME_LIMIT) else {
                    limited.lock().unwrap().push(c.label());
                    continue;
                };
                *hroller_time.lock().unwrap() += t.elapsed();
                if k == 0 {
                    unforced_ok = Some((i, !real.stderr.contains("No master node found")));
                }
                let limit = Duration::from_secs(120);
                let compat = run_limited(nodecare, &with(&["roll", "--hroller-compat"], c), limit);
                let ours = run_limited(nodecare, &with(&["roll"], c), limit);
                let (Some(compat), Some(ours)) = (compat, ours) else {
                    failures
                        .lock()
                        .unwrap()
                        .push(format!("{}: nodecare ran over {limit:?}", c.label()));
                    continue;
                };
                compared.fetch_add(1, Ordering::SeqCst);
                failures
                    .lock()
                    .unwrap()
                    .extend(compare(c, &real, &compat, &ours));
            }
        }
    };
    std::thread::scope(|s| {
        s.spawn(worker);
        s.spawn(worker);
    });
    let limited = limited.into_inner().unwrap();
    let failures = failures.into_inner().unwrap();
    eprintln!(
        "hroller sweep: {} files, {} cases: {} compared, {} forced twins identical to \
         the unforced run (a master exists), {} over hroller's {HROLLER_TIME_LIMIT:?} limit; \
         {:.1?} in total, {:.1?} in hroller",
        files.len(),
        cases.len(),
        compared.load(Ordering::SeqCst),
        same_as_unforced.load(Ordering::SeqCst),
        limited.len(),
        started.elapsed(),
        hroller_time.into_inner().unwrap(),
    );
    for l in &limited {
        eprintln!("not compared (hroller over its time limit): {l}");
    }
    assert!(
        limited.len() * 10 <= cases.len(),
        "too many cases over hroller's time limit: {}",
        limited.len()
    );
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}
