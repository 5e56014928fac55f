//! An in-process cluster: simulated Ganeti, one fake agent per node, and a coordinator.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use nodecare_coordinator::config::{AgentsConfig, Config, RapiSection};
use nodecare_coordinator::daemon::Coordinator;
use nodecare_coordinator::reconcile::RoundSummary;
use nodecare_core::incident::Incident;
use nodecare_ganeti::Ganeti;
use nodecare_ganeti_sim::Simulation;
use nodecare_ganeti_sim::model::SimConfig;
use nodecare_protocol::HmacKey;

use crate::fake_agent::FakeAgents;

/// Domain of simulated node names.
pub const DOMAIN: &str = "sim.test";

/// Name of node `i` (1-based).
pub fn node(i: usize) -> String {
    format!("node{i}.{DOMAIN}")
}

/// A test cluster.
#[derive(Debug)]
pub struct Harness {
    /// Simulated Ganeti.
    pub sim: Simulation,
    /// Fake agents by node.
    pub agents: FakeAgents,
    /// Cluster key.
    pub key: HmacKey,
    /// Coordinator configuration used.
    pub config: Config,
    /// The coordinator.
    pub coordinator: Coordinator,
    /// Keeps the state directory alive.
    pub state_dir: tempfile::TempDir,
}

/// The cluster key used by harnesses.
pub fn test_key() -> HmacKey {
    HmacKey::new(b"nodecare-test-cluster-hmac-key\n".to_vec())
}

/// A coordinator configuration on `node_name` of a simulated cluster, reaching each agent at
/// its URL in `overrides`. The RAPI section is a placeholder: the simulation stands in for
/// Ganeti.
pub fn simulated_cluster_config(
    node_name: String,
    state_dir: PathBuf,
    overrides: BTreeMap<String, String>,
) -> Config {
    Config {
        node_name: Some(node_name),
        // No ssconf: the simulation's RAPI alone says who the master is.
        ssconf_dir: state_dir.join("no-ssconf"),
        state_dir,
        agents: AgentsConfig {
            overrides: overrides.into(),
            ..AgentsConfig::default()
        },
        rapi: RapiSection {
            url: "http://127.0.0.1:1".into(),
            allow_plain_http: true,
            ..RapiSection::default()
        },
        ..Config::default()
    }
}

/// A coordinator configuration for a local run.
pub fn local_config(state_dir: &Path, agents: &FakeAgents) -> Config {
    let base = simulated_cluster_config(node(1), state_dir.to_path_buf(), agents.overrides());
    Config {
        round_interval: 0.2,
        job_timeout: 30.0,
        repair_timeout: 30.0,
        repair_poll: 0.5,
        agents: AgentsConfig {
            timeout: 2.0,
            ..base.agents
        },
        ..base
    }
}

impl Harness {
    /// `nodes` nodes and instances `name:template:node-index,...`; `tweak` adjusts the config.
    pub async fn new(
        nodes: usize,
        instances: &str,
        tweak: impl FnOnce(&mut Config),
    ) -> anyhow::Result<Self> {
        Self::with_ganeti(nodes, instances, tweak, |sim| Ok(Arc::new(sim.client()))).await
    }

    /// [`Harness::new`], the coordinator talking to the simulated Ganeti through the client
    /// `ganeti` gives (the benchmarks: over HTTP, served by a thread of its own).
    pub async fn with_ganeti(
        nodes: usize,
        instances: &str,
        tweak: impl FnOnce(&mut Config),
        ganeti: impl FnOnce(&Simulation) -> anyhow::Result<Arc<dyn Ganeti>>,
    ) -> anyhow::Result<Self> {
        let sim_config =
            SimConfig::from_spec(nodes, instances, DOMAIN).map_err(anyhow::Error::msg)?;
        let sim = Simulation::new(sim_config).map_err(anyhow::Error::msg)?;
        sim.set_job_delay(Duration::from_millis(20));
        let key = test_key();
        let mut agents = FakeAgents::default();
        for i in 1..=nodes {
            agents.start(&node(i), &key, "127.0.0.1:0".parse()?).await?;
        }
        let state_dir = tempfile::tempdir()?;
        let mut config = local_config(state_dir.path(), &agents);
        tweak(&mut config);
        let ganeti = ganeti(&sim)?;
        let coordinator = Coordinator::new(&config, node(1), ganeti, key.clone())?;
        Ok(Self {
            sim,
            agents,
            key,
            config,
            coordinator,
            state_dir,
        })
    }

    /// Runs one round, then lets the simulated jobs finish.
    pub async fn round(&mut self) -> anyhow::Result<RoundSummary> {
        let summary = self.coordinator.round().await?;
        self.sim.settle(Duration::from_secs(5)).await;
        Ok(summary)
    }

    /// Runs rounds until `done` holds for the incidents (at most `max` rounds).
    pub async fn until(
        &mut self,
        max: usize,
        done: impl Fn(&[Incident]) -> bool,
    ) -> anyhow::Result<bool> {
        for _ in 0..max {
            self.round().await?;
            if done(&self.incidents()?) {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// Stored incidents.
    pub fn incidents(&self) -> anyhow::Result<Vec<Incident>> {
        Ok(self.coordinator.api().store.incidents()?)
    }

    /// Tags of a node in the simulation.
    pub fn node_tags(&self, name: &str) -> Vec<String> {
        self.sim.with_cluster(|c| {
            c.nodes
                .get(name)
                .map(|n| n.tags.clone())
                .unwrap_or_default()
        })
    }
}

/// Writes a secret file (a users file, credentials) readable by its owner alone, as the
/// coordinator requires.
pub fn write_secret(path: &Path, text: &str) -> std::io::Result<()> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    match std::fs::remove_file(path) {
        Err(error) if error.kind() != std::io::ErrorKind::NotFound => return Err(error),
        _ => {}
    }
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)?;
    file.write_all(text.as_bytes())
}
