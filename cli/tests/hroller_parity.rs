//! Runs hroller's 17 upstream shelltests against `nodecare roll` and the
//! real `hroller` side by side.
//!
//! Needs Debian's `ganeti-htools-3.0` and `ganeti-testsuite`. Without them
//! the test skips, unless `NODECARE_REQUIRE_GANETI=1` (CI), where it fails.

#![allow(
    clippy::disallowed_methods,
    reason = "the test runs hroller and the nodecare binary"
)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

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
