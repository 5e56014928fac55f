//! External collector plugins: discovery through the whitelist, the sandboxed run, and the
//! declaration rules.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::Duration;

use nodecare_collectors::Registry;
use nodecare_collectors::plugin::{PluginConfig, discover, register_plugins};
use nodecare_collectors::runner::{ExecLimits, Runner};
use nodecare_collectors::whitelist::Owner;
use nodecare_protocol::ReportKind;
use serde_json::json;

fn write_plugin(dir: &Path, name: &str, body: &str, mode: u32) {
    let path = dir.join(name);
    std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
}

fn config(dir: &Path) -> PluginConfig {
    PluginConfig {
        dir: dir.to_owned(),
        owner: Owner {
            uid: nix::unistd::geteuid().as_raw(),
            gid: nix::unistd::getegid().as_raw(),
        },
        interval: Duration::from_secs(30),
        limits: ExecLimits {
            timeout: Duration::from_secs(2),
            stdout_cap: 4096,
            stderr_cap: 1024,
        },
    }
}

#[tokio::test]
async fn plugins_are_discovered_checked_and_run() {
    let temp = tempfile::tempdir().unwrap();
    let dir = temp.path().join("collectors.d");
    std::fs::create_dir(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    write_plugin(
        &dir,
        "raid",
        r#"echo '{"name":"raid","category":"storage","kind":1,"data":{"status":{"code":1,"message":"md0 resyncing"},"arrays":["md0"]}}'"#,
        0o755,
    );
    write_plugin(
        &dir,
        "temperature",
        r#"echo '{"name":"temperature","category":null,"kind":0,"data":{"cpu":41.5}}'"#,
        0o700,
    );
    // Refused: group-writable, wrong declared name, built-in name, failing, bad file name.
    write_plugin(&dir, "writable", "echo '{}'", 0o775);
    write_plugin(
        &dir,
        "liar",
        r#"echo '{"name":"other","kind":0,"data":1}'"#,
        0o755,
    );
    write_plugin(
        &dir,
        "drbd",
        r#"echo '{"name":"drbd","kind":0,"data":1}'"#,
        0o755,
    );
    write_plugin(&dir, "broken", "echo oops >&2; exit 3", 0o755);
    write_plugin(&dir, "bad.name", "echo '{}'", 0o755);
    // Sees an empty environment.
    write_plugin(
        &dir,
        "env-check",
        r#"echo "{\"name\":\"env-check\",\"kind\":0,\"data\":\"$(env | grep -v -e '^PATH=' -e '^PWD=' -e '^SHLVL=' -e '^_=' | wc -l)\"}""#,
        0o755,
    );

    let mut registry = Registry::new();
    let refused = register_plugins(&mut registry, &config(&dir), &Runner::new(2)).await;
    let names: Vec<_> = registry.iter().map(|c| c.spec().name.clone()).collect();
    assert_eq!(names, ["env-check", "raid", "temperature"]);
    let refused_names: Vec<_> = refused.iter().map(|(name, _)| name.as_str()).collect();
    assert_eq!(
        refused_names,
        ["bad.name", "broken", "drbd", "liar", "writable"],
        "{refused:?}"
    );
    assert!(
        refused
            .iter()
            .any(|(name, reason)| name == "broken" && reason.contains("oops"))
    );

    let raid = registry.find("storage", "raid").unwrap();
    assert_eq!(raid.spec().kind, ReportKind::Status);
    assert_eq!(raid.spec().version, "P");
    assert_eq!(raid.spec().interval, Duration::from_secs(30));
    let data = raid.collect().await.unwrap();
    assert_eq!(
        data["status"],
        json!({"code": 1, "message": "md0 resyncing"})
    );
    let temperature = registry.find("default", "temperature").unwrap();
    assert_eq!(temperature.collect().await.unwrap(), json!({"cpu": 41.5}));
    let env = registry.find("default", "env-check").unwrap();
    assert_eq!(env.collect().await.unwrap(), json!("0"));

    // A plugin that changes its declaration after discovery is refused at run time.
    write_plugin(
        &dir,
        "raid",
        r#"echo '{"name":"raid","category":"node","kind":1,"data":{"status":{"code":0,"message":""}}}'"#,
        0o755,
    );
    let error = raid.collect().await.unwrap_err();
    assert!(error.to_string().contains("declaration changed"), "{error}");
    // A plugin made group-writable after discovery no longer runs.
    std::fs::set_permissions(
        dir.join("temperature"),
        std::fs::Permissions::from_mode(0o775),
    )
    .unwrap();
    let error = temperature.collect().await.unwrap_err();
    assert!(error.to_string().contains("temperature"), "{error}");
}

#[tokio::test]
async fn hanging_plugin_is_killed_and_missing_dir_means_none() {
    let temp = tempfile::tempdir().unwrap();
    let dir = temp.path().join("d");
    std::fs::create_dir(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    write_plugin(&dir, "slow", "sleep 30", 0o755);
    let started = std::time::Instant::now();
    let discovery = discover(&config(&dir), &Runner::new(1)).await;
    assert!(discovery.plugins.is_empty());
    assert!(
        discovery.refused[0].1.contains("timed out"),
        "{:?}",
        discovery.refused
    );
    assert!(started.elapsed() < Duration::from_secs(10));
    let none = discover(&config(&temp.path().join("absent")), &Runner::new(1)).await;
    assert!(none.plugins.is_empty() && none.refused.is_empty());
}
