//! Dynamic load for Ganeti's balancer (pure): the agents' signed load reports turned into the
//! file `hbal --mond=yes --mond-data FILE` reads, as maintd fed it (Ganeti's
//! `src/Ganeti/HTools/Backend/MonD.hs`, `pMonDData`).
//!
//! The file is a JSON array with one object per node, `{"node": NAME, "reports": [REPORT, …]}`,
//! each report a mond report envelope (`name`, `version`, `format_version`, `timestamp`,
//! `category`, `kind`, `data`). hbal 3.0.2 reads `cpu-avg-load` (the node's `cpu_total`, spread
//! over its instances by virtual CPUs); Ganeti's later versions (maintd's) also read
//! `kvm-inst-rss`, which 3.0.2 ignores. hbal uses a collector's data only when it has it for
//! every node of the cluster, so the file is all or nothing: every online node needs a
//! verified, fresh `cpu-avg-load` from its agent (offline nodes get an idle report, as maintd
//! gave them); when one is missing the load is left out, hbal balances on the static resources
//! alone, and the status says which node lacked what. Unverified load never reaches hbal.

use std::collections::BTreeMap;

use nodecare_protocol::load::{CPU_AVG_LOAD, KVM_INST_RSS};
use nodecare_protocol::report::BUILTIN_COLLECTOR_VERSION;
use nodecare_protocol::{CpuAvgLoad, LoadPayload, Report, ReportKind};
use serde::Serialize;

use crate::storage::Missing;

/// What reading one node's signed load report gave.
#[derive(Debug, Clone, PartialEq)]
pub enum LoadReading {
    /// A verified, current report.
    Verified {
        /// The payload.
        payload: LoadPayload,
        /// Its sequence.
        sequence: u64,
    },
    /// No usable report, and why.
    Missing(Missing),
}

/// A node of the cluster hbal reads, as the load file needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadNode {
    /// The node's name, as in the htools text.
    pub name: String,
    /// Offline (no agent to ask; idle).
    pub offline: bool,
}

/// One node's entry of the file.
#[derive(Debug, Clone, PartialEq, Serialize)]
struct MondNode<'a> {
    node: &'a str,
    reports: Vec<&'a Report>,
}

/// The load to give hbal, or why there is none.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct MondData {
    /// The `--mond-data` file's contents; none when the load is left out.
    pub file: Option<String>,
    /// Nodes whose verified load is in the file.
    pub verified: Vec<String>,
    /// Offline nodes given an idle report.
    pub idle: Vec<String>,
    /// Nodes without usable load, and why (the load is left out when any).
    pub missing: Vec<(String, String)>,
}

impl MondData {
    /// One line for the status.
    pub fn describe(&self) -> String {
        if self.file.is_some() {
            let mut text = format!(
                "{CPU_AVG_LOAD} of {} node(s) from signed agent reports",
                self.verified.len()
            );
            if !self.idle.is_empty() {
                text.push_str(&format!(", idle for offline {}", self.idle.join(", ")));
            }
            return text;
        }
        if self.missing.is_empty() {
            return "left out, static resources only (no online node)".to_owned();
        }
        let why: Vec<String> = self
            .missing
            .iter()
            .map(|(node, why)| format!("{node}: {why}"))
            .collect();
        format!(
            "left out, static resources only (no verified load for {})",
            why.join("; ")
        )
    }
}

/// An idle `cpu-avg-load` report (an offline node's).
pub fn idle_report(timestamp_ns: u64) -> Report {
    Report {
        name: CPU_AVG_LOAD.to_owned(),
        version: BUILTIN_COLLECTOR_VERSION.to_owned(),
        format_version: 1,
        timestamp: timestamp_ns,
        category: None,
        kind: ReportKind::Performance,
        data: serde_json::json!({"cpu_number": 0, "cpus": [0.0], "cpu_total": 0.0}),
    }
}

/// Why a verified payload's `cpu-avg-load` cannot be used (absent, not a load, older than
/// `max_age_ms` at `now_ms`).
fn unusable(payload: &LoadPayload, now_ms: u64, max_age_ms: u64) -> Option<String> {
    let Some(report) = payload.report(CPU_AVG_LOAD) else {
        return Some(format!("the agent reports no {CPU_AVG_LOAD}"));
    };
    if let Err(why) = CpuAvgLoad::from_report(report) {
        return Some(why);
    }
    // mond's timestamp is in nanoseconds.
    let age_ms = now_ms.saturating_sub(report.timestamp / 1_000_000);
    if age_ms > max_age_ms {
        return Some(format!("{CPU_AVG_LOAD} collected {} s ago", age_ms / 1000));
    }
    None
}

/// The `--mond-data` file for `nodes` (every node of the htools text, in its order) from the
/// agents' `readings` (by node name), at `now_ms`; a report collected more than `max_age_ms`
/// before is not current.
pub fn mond_data(
    nodes: &[LoadNode],
    readings: &BTreeMap<String, LoadReading>,
    now_ms: u64,
    max_age_ms: u64,
) -> MondData {
    let idle = idle_report(now_ms.saturating_mul(1_000_000));
    let mut out = MondData::default();
    let mut entries: Vec<MondNode<'_>> = Vec::new();
    for node in nodes {
        if node.offline {
            out.idle.push(node.name.clone());
            entries.push(MondNode {
                node: &node.name,
                reports: vec![&idle],
            });
            continue;
        }
        match readings.get(&node.name) {
            None => out.missing.push((node.name.clone(), "not read".to_owned())),
            Some(LoadReading::Missing(why)) => {
                out.missing.push((node.name.clone(), why.to_string()));
            }
            Some(LoadReading::Verified { payload, .. }) => {
                if let Some(why) = unusable(payload, now_ms, max_age_ms) {
                    out.missing.push((node.name.clone(), why));
                    continue;
                }
                out.verified.push(node.name.clone());
                entries.push(MondNode {
                    node: &node.name,
                    reports: payload
                        .load
                        .iter()
                        .filter(|r| r.name == CPU_AVG_LOAD || r.name == KVM_INST_RSS)
                        .collect(),
                });
            }
        }
    }
    if out.missing.is_empty() && !out.verified.is_empty() {
        out.file = serde_json::to_string(&entries).ok();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: u64 = 1_800_000_000_000;

    fn report(name: &str, data: serde_json::Value, at_ms: u64) -> Report {
        Report {
            name: name.into(),
            version: "B".into(),
            format_version: 1,
            timestamp: at_ms * 1_000_000,
            category: None,
            kind: ReportKind::Performance,
            data,
        }
    }

    fn verified(cpu_total: f64, at_ms: u64) -> LoadReading {
        LoadReading::Verified {
            payload: LoadPayload {
                load: vec![
                    report(
                        CPU_AVG_LOAD,
                        serde_json::json!({"cpu_number": 1, "cpus": [cpu_total / 2.0, cpu_total / 2.0], "cpu_total": cpu_total}),
                        at_ms,
                    ),
                    report(KVM_INST_RSS, serde_json::json!({"inst1": 25600}), at_ms),
                ],
                collected_at_ms: at_ms,
                interval_ms: 10_000,
            },
            sequence: 1,
        }
    }

    fn node(name: &str, offline: bool) -> LoadNode {
        LoadNode {
            name: name.into(),
            offline,
        }
    }

    #[test]
    fn every_node_verified_gives_maintds_file() {
        let nodes = [node("n1", false), node("n2", false), node("n3", true)];
        let readings = BTreeMap::from([
            ("n1".to_owned(), verified(1.5, NOW - 5_000)),
            ("n2".to_owned(), verified(0.25, NOW - 5_000)),
        ]);
        let data = mond_data(&nodes, &readings, NOW, 60_000);
        assert_eq!(data.verified, ["n1", "n2"]);
        assert_eq!(data.idle, ["n3"]);
        assert!(data.missing.is_empty());
        let file: serde_json::Value = serde_json::from_str(data.file.as_deref().unwrap()).unwrap();
        let entries = file.as_array().unwrap();
        assert_eq!(entries.len(), 3);
        assert_eq!(entries[0]["node"], "n1");
        let first = &entries[0]["reports"][0];
        assert_eq!(first["name"], CPU_AVG_LOAD);
        assert_eq!(first["data"]["cpu_total"], 1.5);
        assert_eq!(first["category"], serde_json::Value::Null);
        assert_eq!(first["kind"], 0);
        assert_eq!(first["version"], "B");
        assert_eq!(entries[0]["reports"][1]["name"], KVM_INST_RSS);
        assert_eq!(entries[2]["node"], "n3");
        assert_eq!(entries[2]["reports"][0]["data"]["cpu_total"], 0.0);
        assert!(data.describe().starts_with("cpu-avg-load of 2 node(s)"));
    }

    #[test]
    fn one_unusable_node_leaves_the_load_out_and_says_why() {
        let nodes = [node("n1", false), node("n2", false)];
        let cases = [
            (None, "not read"),
            (
                Some(LoadReading::Missing(Missing::Unreachable("timeout".into()))),
                "unreachable: timeout",
            ),
            (
                Some(LoadReading::Missing(Missing::Unverifiable(
                    "bad MAC".into(),
                ))),
                "unverifiable report: bad MAC",
            ),
            (Some(verified(1.0, NOW - 120_000)), "collected 120 s ago"),
            (
                Some(LoadReading::Verified {
                    payload: LoadPayload {
                        load: vec![report(
                            CPU_AVG_LOAD,
                            serde_json::json!({"error": "Empty buffer"}),
                            NOW,
                        )],
                        collected_at_ms: NOW,
                        interval_ms: 10_000,
                    },
                    sequence: 2,
                }),
                "not a load",
            ),
            (
                Some(LoadReading::Verified {
                    payload: LoadPayload {
                        load: Vec::new(),
                        collected_at_ms: NOW,
                        interval_ms: 10_000,
                    },
                    sequence: 2,
                }),
                "reports no cpu-avg-load",
            ),
        ];
        for (reading, why) in cases {
            let mut readings = BTreeMap::from([("n1".to_owned(), verified(1.0, NOW))]);
            if let Some(reading) = reading {
                readings.insert("n2".to_owned(), reading);
            }
            let data = mond_data(&nodes, &readings, NOW, 60_000);
            assert_eq!(data.file, None, "{why}");
            assert_eq!(data.missing.len(), 1, "{why}");
            assert_eq!(data.missing[0].0, "n2");
            assert!(
                data.missing[0].1.contains(why),
                "{:?} vs {why}",
                data.missing
            );
            assert!(data.describe().contains("static resources only"), "{why}");
            assert!(data.describe().contains(why), "{why}");
        }
    }

    #[test]
    fn no_online_node_gives_no_file() {
        let data = mond_data(&[node("n1", true)], &BTreeMap::new(), NOW, 60_000);
        assert_eq!(data.file, None);
    }
}
