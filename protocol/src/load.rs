//! The payload of the agent's signed load report (`/1/report/default/load/signed`): mond's
//! reports of the collectors Ganeti's balancer reads dynamic load from (`cpu-avg-load` and
//! `kvm-inst-rss`), exactly as the agent serves them unsigned at `/1/report/default/<name>`,
//! so that the coordinator can hand verified load to `hbal --mond-data`.
//!
//! It travels in the same [`SignedEnvelope`](crate::SignedEnvelope) as the diagnose and storage
//! payloads, with the same key and sequence counter; a receiver keeps the last sequence it
//! accepted per node and per kind of report. Unknown fields are refused, so a payload of one
//! kind never decodes as another.

use serde::{Deserialize, Serialize};

use crate::Report;

/// HTTP path of the signed load report on the agent.
pub const SIGNED_LOAD_PATH: &str = "/1/report/default/load/signed";

/// mond's node CPU load collector (`cpu_total` in CPUs, what hbal's `--mond` reads).
pub const CPU_AVG_LOAD: &str = "cpu-avg-load";

/// mond's (attic) per-instance resident memory collector, in pages.
pub const KVM_INST_RSS: &str = "kvm-inst-rss";

/// The collectors whose reports the load payload carries, in this order.
pub const LOAD_COLLECTORS: [&str; 2] = [CPU_AVG_LOAD, KVM_INST_RSS];

/// What the agent signs: the latest report of each load collector it runs, and when it took
/// them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LoadPayload {
    /// The reports, at most one per collector of [`LOAD_COLLECTORS`] (a collector the agent
    /// does not run, or that the cluster disabled, is absent).
    pub load: Vec<Report>,
    /// When the reports were taken from the agent's cache, Unix milliseconds.
    pub collected_at_ms: u64,
    /// How often the agent signs them, milliseconds.
    pub interval_ms: u64,
}

impl LoadPayload {
    /// The report of collector `name`.
    pub fn report(&self, name: &str) -> Option<&Report> {
        self.load.iter().find(|report| report.name == name)
    }
}

/// The data of a `cpu-avg-load` report, as hbal reads it (Ganeti's `CPUavgload`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CpuAvgLoad {
    /// Number of CPUs minus one (mond's `cpu_number`).
    pub cpu_number: u64,
    /// Load of each CPU, fractions of one CPU.
    pub cpus: Vec<f64>,
    /// Load of the node, in CPUs.
    pub cpu_total: f64,
}

impl CpuAvgLoad {
    /// The data of a `cpu-avg-load` report, when it is a load (not mond's `{"error": …}` of an
    /// empty buffer) with finite, non-negative numbers.
    pub fn from_report(report: &Report) -> Result<Self, String> {
        let load: Self = serde_json::from_value(report.data.clone())
            .map_err(|error| format!("{CPU_AVG_LOAD} data is not a load: {error}"))?;
        if !(load.cpu_total.is_finite() && load.cpu_total >= 0.0)
            || load.cpus.iter().any(|c| !(c.is_finite() && *c >= 0.0))
        {
            return Err(format!(
                "{CPU_AVG_LOAD} data has a negative or non-finite load"
            ));
        }
        Ok(load)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ReportKind;

    fn report(name: &str, data: serde_json::Value) -> Report {
        Report {
            name: name.into(),
            version: "B".into(),
            format_version: 1,
            timestamp: 1_700_000_000_000_000_000,
            category: None,
            kind: ReportKind::Performance,
            data,
        }
    }

    #[test]
    fn cpu_load_is_read_strictly() {
        let good = report(
            CPU_AVG_LOAD,
            serde_json::json!({"cpu_number": 1, "cpus": [0.5, 0.25], "cpu_total": 0.75}),
        );
        assert_eq!(CpuAvgLoad::from_report(&good).unwrap().cpu_total, 0.75);
        for data in [
            serde_json::json!({"error": "Empty buffer"}),
            serde_json::json!({"cpu_number": 1, "cpus": [0.5], "cpu_total": -1.0}),
            serde_json::json!({"cpu_number": -1, "cpus": [], "cpu_total": 1.0}),
            serde_json::json!(null),
        ] {
            assert!(
                CpuAvgLoad::from_report(&report(CPU_AVG_LOAD, data.clone())).is_err(),
                "{data}"
            );
        }
    }

    #[test]
    fn payload_round_trips_and_refuses_other_kinds() {
        let payload = LoadPayload {
            load: vec![report(KVM_INST_RSS, serde_json::json!({"inst1": 2048}))],
            collected_at_ms: 5,
            interval_ms: 10_000,
        };
        let value = serde_json::to_value(&payload).unwrap();
        assert_eq!(
            serde_json::from_value::<LoadPayload>(value).unwrap(),
            payload
        );
        assert!(payload.report(KVM_INST_RSS).is_some());
        assert!(payload.report(CPU_AVG_LOAD).is_none());
        let storage = serde_json::json!({"drbd": {"state": "not-installed"}, "collected_at_ms": 1, "interval_ms": 1});
        assert!(serde_json::from_value::<LoadPayload>(storage).is_err());
        let load = serde_json::to_value(&payload).unwrap();
        assert!(serde_json::from_value::<crate::StoragePayload>(load.clone()).is_err());
        assert!(serde_json::from_value::<crate::DiagnosePayload>(load).is_err());
    }
}
