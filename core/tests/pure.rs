//! The pure crates stay free of IO: none of the crates that do IO is among the normal (non-dev)
//! dependencies of nodecare-core (decisions) or nodecare-exec (the executor, which runs in its
//! caller's runtime, so that the coordinator and `nodecare harep` can share it), directly or
//! through another crate.
#![allow(clippy::unwrap_used, clippy::expect_used)]
#![allow(clippy::disallowed_methods, reason = "the test runs cargo tree")]

use std::process::Command;

/// Crates that do network, database or HTTP IO, or render pages.
const FORBIDDEN: &[&str] = &["tokio", "reqwest", "rusqlite", "axum", "maud", "hyper"];

/// The names of the crates `cargo tree -e normal` lists for `package`.
fn normal_dependencies(package: &str) -> Vec<String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let output = Command::new(cargo)
        .args([
            "tree",
            "--offline",
            "-p",
            package,
            "-e",
            "normal",
            "--prefix",
            "none",
            "--format",
            "{p}",
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo tree runs");
    assert!(
        output.status.success(),
        "cargo tree failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout)
        .expect("cargo tree prints UTF-8")
        .lines()
        .filter_map(|line| line.split_whitespace().next())
        .map(str::to_owned)
        .collect()
}

/// The forbidden crates among `names` (exact crate names: `hyper-util` counts, `hyperlocal`
/// would not).
fn forbidden_in(names: &[String]) -> Vec<String> {
    names
        .iter()
        .filter(|name| {
            FORBIDDEN.iter().any(|f| {
                *name == f
                    || name
                        .strip_prefix(f)
                        .is_some_and(|rest| rest.starts_with('-'))
            })
        })
        .cloned()
        .collect()
}

#[test]
fn no_io_crate_is_a_dependency() {
    for package in ["nodecare-core", "nodecare-exec"] {
        let names = normal_dependencies(package);
        assert!(
            names.iter().any(|n| n == package) && names.iter().any(|n| n == "serde"),
            "cargo tree listed {names:?}"
        );
        let forbidden = forbidden_in(&names);
        assert!(forbidden.is_empty(), "{package} depends on {forbidden:?}");
    }
}

#[test]
fn the_check_sees_an_io_crate() {
    let names: Vec<String> = [
        "nodecare-core",
        "serde",
        "tokio-macros",
        "hyperlocal",
        "tokio",
    ]
    .into_iter()
    .map(str::to_owned)
    .collect();
    assert_eq!(forbidden_in(&names), ["tokio-macros", "tokio"]);
}
