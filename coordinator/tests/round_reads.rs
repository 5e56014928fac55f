//! What a round reads, and in which order: a node that comes back from a reboot while the
//! round reads its agents is seen back whole, its storage report read after its diagnose
//! report, not before it (which cost the node a round: back, but its storage unreachable).
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code")]

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nodecare_coordinator::board::Board;
use nodecare_coordinator::config::Config;
use nodecare_coordinator::daemon::reconcile_settings;
use nodecare_coordinator::reconcile::Reconciler;
use nodecare_coordinator::repair::RepairClient;
use nodecare_coordinator::round::agents::{AgentFuture, AgentReader};
use nodecare_coordinator::scrape::{
    AgentOutcome, AgentResult, AgentTarget, AgentUrls, Observation, StorageHealth,
};
use nodecare_coordinator::store::Store;
use nodecare_core::gate::StorageProblem;
use nodecare_ganeti::{Instance, Node};
use nodecare_ganeti_sim::Simulation;
use nodecare_ganeti_sim::model::SimConfig;
use nodecare_protocol::DiagnoseStatus;

const MASTER: &str = "node1.sim.test";
const RETURNING: &str = "node2.sim.test";

/// Agents of which one (`RETURNING`) is down until its diagnose report is asked for: it comes
/// back at that moment, as a rebooted node does while a round reads the agents. Each read is
/// noted in `reads`.
#[derive(Debug, Default)]
struct Returning {
    back: AtomicBool,
    reads: Mutex<Vec<&'static str>>,
}

impl Returning {
    fn note(&self, read: &'static str) {
        self.reads.lock().unwrap().push(read);
    }
}

fn ok_observation(now_ms: u64) -> Observation {
    let (verdict, original) =
        nodecare_coordinator::what_if::synthetic_verdict(DiagnoseStatus::Ok).unwrap();
    Observation {
        verdict: Arc::new(verdict),
        original: Arc::new(original),
        sequence: now_ms,
        collected_at_ms: now_ms,
        expires_at_ms: now_ms + 600_000,
        stale_reason: None,
        boot_id: Some("boot-1".to_owned()),
        reboot_required: None,
    }
}

impl AgentReader for Returning {
    fn diagnose<'a>(
        &'a self,
        targets: Vec<AgentTarget>,
        _sequences: &'a BTreeMap<String, u64>,
        now_ms: u64,
    ) -> AgentFuture<'a, Vec<AgentResult>> {
        Box::pin(async move {
            self.note("diagnose");
            self.back.store(true, Ordering::SeqCst);
            targets
                .into_iter()
                .map(|t| AgentResult {
                    outcome: AgentOutcome::Verified(ok_observation(now_ms)),
                    node: t.node,
                    node_uuid: t.node_uuid,
                    elapsed: Duration::ZERO,
                })
                .collect()
        })
    }

    fn storage<'a>(
        &'a self,
        _nodes: &'a [Node],
        _instances: &'a [Instance],
        _urls: &'a AgentUrls,
        sequences: &'a BTreeMap<String, u64>,
        _now_ms: u64,
    ) -> AgentFuture<'a, StorageHealth> {
        Box::pin(async move {
            self.note("storage");
            let problems = if self.back.load(Ordering::SeqCst) {
                Vec::new()
            } else {
                vec![StorageProblem {
                    nodes: BTreeSet::from([RETURNING.to_owned()]),
                    what: format!("{RETURNING} (unreachable)"),
                    unknown: true,
                    drained: false,
                }]
            };
            StorageHealth {
                problems,
                sequences: sequences.clone(),
                ..StorageHealth::default()
            }
        })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_back_while_the_round_reads_its_agents_is_seen_with_its_storage() {
    let sim =
        Simulation::new(SimConfig::from_spec(3, "a:drbd:2,b:drbd:3", "sim.test").unwrap()).unwrap();
    let store = Arc::new(Store::open_memory().unwrap());
    let mut settings = reconcile_settings(&Config::default(), MASTER.to_owned());
    settings.ssconf_dir = None;
    let agents = Arc::new(Returning::default());
    let board = Arc::new(Board::default());
    let mut reconciler = Reconciler::with_agents(
        Arc::new(sim.client()),
        Arc::clone(&store),
        Arc::clone(&agents) as Arc<dyn AgentReader>,
        RepairClient::simulated(),
        settings,
        Arc::clone(&board),
        Arc::new(tokio::sync::Mutex::new(())),
    );
    reconciler.round().await.unwrap();
    assert_eq!(*agents.reads.lock().unwrap(), ["diagnose", "storage"]);
    let gate = board
        .gate
        .read()
        .unwrap()
        .clone()
        .expect("the round's gate");
    assert!(
        gate.view.storage.is_empty(),
        "the node back in this round is judged on a storage report read before it was back: {:?}",
        gate.view.storage
    );
}
