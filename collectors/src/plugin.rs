//! External collector plugins: whitelisted executables whose JSON output becomes a report.
//!
//! A plugin is an executable in the plugin directory (default [`DEFAULT_PLUGIN_DIR`]) that
//! passes the same checks as a diagnose script ([`Whitelist`]: name `^[A-Za-z0-9_-]+$`, regular
//! file, owned by root:root, mode within 0755, executable by its owner; the directory is checked
//! too) and runs in the same sandbox ([`Runner`]: no arguments, empty environment with a fixed
//! `PATH`, stdin from `/dev/null`, its own process group, a timeout and an output cap).
//!
//! # Output format
//!
//! Each run prints exactly one JSON object:
//!
//! ```json
//! {"name": "raid", "category": "storage", "kind": 1,
//!  "data": {"status": {"code": 0, "message": ""}, "arrays": []}}
//! ```
//!
//! * `name` must equal the executable's file name;
//! * `category` is one of `instance`, `storage`, `daemon`, `hypervisor`, `node`, or `null`
//!   (listed as `default`);
//! * `kind` is 0 (performance) or 1 (status); a status plugin's `data` must be an object with
//!   mond's `"status": {"code": 0|1|2|4, "message": string}`;
//! * `data` is any JSON value and becomes the report's data verbatim.
//!
//! The declaration (name, category, kind) is learned from a first run at discovery and must
//! not change afterwards: a run that declares something else is an error, so a plugin cannot
//! move itself into another category at run time. Built-in names cannot be taken.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use nodecare_protocol::report::KNOWN_CATEGORIES;
use nodecare_protocol::{ReportKind, StatusCode};
use serde_json::Value;

use crate::runner::{ExecLimits, Runner};
use crate::whitelist::{Owner, Whitelist};
use crate::{CollectError, CollectFuture, Collector, CollectorSpec, Registry};

/// Where plugins live unless configured otherwise.
pub const DEFAULT_PLUGIN_DIR: &str = "/etc/nodecare/collectors.d";
/// Version string of plugin reports (built-ins use `"B"`).
pub const PLUGIN_VERSION: &str = "P";

/// Names of built-in collectors, which plugins cannot replace.
pub const RESERVED_NAMES: [&str; 10] = [
    "cpu-avg-load",
    "xen-cpu-avg-load",
    "kvm-inst-rss",
    "diskstats",
    "drbd",
    "inst-status-xen",
    "inst-status-kvm",
    "lv",
    "diagnose",
    "(directory)",
];

/// Where plugins are and how they run.
#[derive(Debug, Clone)]
pub struct PluginConfig {
    /// The plugin directory.
    pub dir: PathBuf,
    /// Who must own the directory and executables (root:root in production).
    pub owner: Owner,
    /// How often each plugin runs.
    pub interval: Duration,
    /// Bounds of one run.
    pub limits: ExecLimits,
}

impl Default for PluginConfig {
    fn default() -> Self {
        Self {
            dir: PathBuf::from(DEFAULT_PLUGIN_DIR),
            owner: Owner::ROOT,
            interval: Duration::from_secs(60),
            limits: ExecLimits {
                timeout: Duration::from_secs(10),
                ..ExecLimits::default()
            },
        }
    }
}

/// A plugin's declaration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Declaration {
    /// Report name (= file name).
    pub name: String,
    /// Category or `None`.
    pub category: Option<String>,
    /// Report kind.
    pub kind: ReportKind,
}

/// Why a plugin's output was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PluginError {
    /// Not one JSON object.
    #[error("output is not a JSON object: {0}")]
    NotJson(String),
    /// A declaration field is missing or wrong.
    #[error("bad declaration: {0}")]
    Declaration(String),
    /// The plugin ran but failed.
    #[error("{0}")]
    Run(String),
}

/// Parses one run's output against the executable's name; returns the declaration and data.
pub fn parse_output(executable: &str, stdout: &[u8]) -> Result<(Declaration, Value), PluginError> {
    let value: Value =
        serde_json::from_slice(stdout).map_err(|error| PluginError::NotJson(error.to_string()))?;
    let Value::Object(mut object) = value else {
        return Err(PluginError::NotJson("not an object".to_owned()));
    };
    let name = object
        .get("name")
        .and_then(Value::as_str)
        .map(str::to_owned)
        .ok_or_else(|| PluginError::Declaration("\"name\" must be a string".to_owned()))?;
    if name != executable {
        return Err(PluginError::Declaration(format!(
            "name {name:?} differs from the executable's name {executable:?}"
        )));
    }
    let category = match object.get("category") {
        None | Some(Value::Null) => None,
        Some(Value::String(category)) if KNOWN_CATEGORIES.contains(&category.as_str()) => {
            Some(category.clone())
        }
        Some(other) => {
            return Err(PluginError::Declaration(format!(
                "category {other} is not one of {KNOWN_CATEGORIES:?} or null"
            )));
        }
    };
    let kind = match object.get("kind").and_then(Value::as_u64) {
        Some(0) => ReportKind::Performance,
        Some(1) => ReportKind::Status,
        _ => {
            return Err(PluginError::Declaration(
                "\"kind\" must be 0 (performance) or 1 (status)".to_owned(),
            ));
        }
    };
    let data = object
        .remove("data")
        .ok_or_else(|| PluginError::Declaration("\"data\" is missing".to_owned()))?;
    if kind == ReportKind::Status {
        let code = data
            .get("status")
            .and_then(|status| status.get("code"))
            .and_then(Value::as_u64)
            .and_then(StatusCode::from_code);
        let message_ok = data
            .get("status")
            .and_then(|status| status.get("message"))
            .is_some_and(Value::is_string);
        if code.is_none() || !message_ok {
            return Err(PluginError::Declaration(
                "a status plugin's data needs \"status\": {\"code\": 0|1|2|4, \"message\": string}"
                    .to_owned(),
            ));
        }
    }
    Ok((
        Declaration {
            name,
            category,
            kind,
        },
        data,
    ))
}

/// A collector backed by one plugin executable.
#[derive(Debug)]
pub struct PluginCollector {
    spec: CollectorSpec,
    whitelist: Whitelist,
    runner: Runner,
    limits: ExecLimits,
}

impl PluginCollector {
    async fn run(&self) -> Result<(Declaration, Value), PluginError> {
        run_plugin(&self.whitelist, &self.runner, &self.spec.name, &self.limits).await
    }
}

async fn run_plugin(
    whitelist: &Whitelist,
    runner: &Runner,
    name: &str,
    limits: &ExecLimits,
) -> Result<(Declaration, Value), PluginError> {
    // Opened (and checked) afresh for every run, so a replaced or re-permissioned file is
    // caught.
    let executable = whitelist
        .open(name)
        .map_err(|error| PluginError::Run(error.to_string()))?;
    let output = runner
        .run(&executable, None, limits)
        .await
        .map_err(|error| PluginError::Run(error.to_string()))?;
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        return Err(PluginError::Run(format!(
            "{name} failed ({}): {}",
            output.status,
            stderr.trim()
        )));
    }
    parse_output(name, &output.stdout)
}

impl Collector for PluginCollector {
    fn spec(&self) -> &CollectorSpec {
        &self.spec
    }

    fn collect(&self) -> CollectFuture<'_> {
        Box::pin(async move {
            let source = || format!("plugin {}", self.spec.name);
            let (declaration, data) = self.run().await.map_err(|error| match error {
                PluginError::Run(reason) => CollectError::Source {
                    source_name: source(),
                    reason,
                },
                other => CollectError::Parse {
                    source_name: source(),
                    reason: other.to_string(),
                },
            })?;
            if declaration.category != self.spec.category || declaration.kind != self.spec.kind {
                return Err(CollectError::Parse {
                    source_name: source(),
                    reason: format!(
                        "declaration changed from {:?}/{} to {:?}/{}",
                        self.spec.category,
                        self.spec.kind.code(),
                        declaration.category,
                        declaration.kind.code()
                    ),
                });
            }
            Ok(data)
        })
    }
}

/// The outcome of discovery: usable plugins and refused ones with the reason.
#[derive(Debug, Default)]
pub struct Discovery {
    /// Plugins that ran and declared themselves correctly.
    pub plugins: Vec<Arc<PluginCollector>>,
    /// `(file name, reason)` for every refused entry.
    pub refused: Vec<(String, String)>,
}

/// Lists the plugin directory and runs every entry once to learn its declaration.
/// A missing directory means no plugins; a directory failing the checks refuses everything.
pub async fn discover(config: &PluginConfig, runner: &Runner) -> Discovery {
    let whitelist = Whitelist::with_owner(&config.dir, config.owner);
    let mut discovery = Discovery::default();
    if !config.dir.exists() {
        return discovery;
    }
    let names = match whitelist.list() {
        Ok(names) => names,
        Err(error) => {
            discovery
                .refused
                .push((config.dir.display().to_string(), error.to_string()));
            return discovery;
        }
    };
    for name in names {
        if RESERVED_NAMES.contains(&name.as_str()) {
            discovery
                .refused
                .push((name, "the name belongs to a built-in collector".to_owned()));
            continue;
        }
        match run_plugin(&whitelist, runner, &name, &config.limits).await {
            Ok((declaration, _)) => {
                let mut spec = CollectorSpec::builtin(
                    &declaration.name,
                    declaration.category.as_deref(),
                    declaration.kind,
                    config.interval,
                    config.limits.timeout + Duration::from_secs(1),
                );
                spec.version = PLUGIN_VERSION.to_owned();
                discovery.plugins.push(Arc::new(PluginCollector {
                    spec,
                    whitelist: whitelist.clone(),
                    runner: runner.clone(),
                    limits: config.limits,
                }));
            }
            Err(error) => discovery.refused.push((name, error.to_string())),
        }
    }
    discovery
}

/// Discovers plugins and appends them to `registry` after the built-ins; returns the refused
/// entries for the log.
pub async fn register_plugins(
    registry: &mut Registry,
    config: &PluginConfig,
    runner: &Runner,
) -> Vec<(String, String)> {
    let discovery = discover(config, runner).await;
    for plugin in discovery.plugins {
        registry.register(plugin);
    }
    discovery.refused
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_is_validated() {
        let (declaration, data) = parse_output(
            "raid",
            br#"{"name":"raid","category":"storage","kind":1,"data":{"status":{"code":0,"message":""}}}"#,
        )
        .unwrap();
        assert_eq!(declaration.category.as_deref(), Some("storage"));
        assert_eq!(declaration.kind, ReportKind::Status);
        assert_eq!(data["status"]["code"], 0);
        let (declaration, _) = parse_output(
            "temp",
            br#"{"name":"temp","category":null,"kind":0,"data":[1]}"#,
        )
        .unwrap();
        assert_eq!(declaration.category, None);
        for bad in [
            &br#"{"name":"other","kind":0,"data":1}"#[..],
            br#"{"name":"raid","category":"nope","kind":0,"data":1}"#,
            br#"{"name":"raid","kind":2,"data":1}"#,
            br#"{"name":"raid","kind":0}"#,
            br#"{"name":"raid","kind":1,"data":{"status":{"code":3,"message":""}}}"#,
            br#"{"name":"raid","kind":1,"data":[]}"#,
            br#"[1]"#,
            b"not json",
        ] {
            assert!(
                parse_output("raid", bad).is_err(),
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
    }
}
