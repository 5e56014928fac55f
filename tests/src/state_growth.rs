//! The state's growth on a changing cluster: every round decides anew (every node's free memory
//! moves, the decision changes) so the flight recorder writes a new record each round, writers
//! add audit lines and overrides with the longest reasons, and retention runs as the daemon runs
//! it; meanwhile the snapshot replicated to the master candidates is weighed.
//! `nodecare-bench-coordinator state-growth` runs it at scale (`bench/coordinator/state.sh`); the
//! tests run it small.

use std::time::Instant;

use nodecare_coordinator::recorder::RoundRecord;
use nodecare_coordinator::store::Store;
use nodecare_coordinator::store::retention::RetentionPolicy;
use nodecare_core::gate::{
    Caps, Duty, GateSnapshot, Holder, InForce, NodeFacts, Override, Policy, Proposal, View, decide,
};
use nodecare_protocol::limits::{MAX_NAME_BYTES, MAX_TEXT_BYTES};
use nodecare_protocol::replica::MAX_REPLICA_BYTES;

/// Milliseconds between two rounds of the workload.
pub const ROUND_MS: u64 = 10_000;

/// Round `round` on `nodes` nodes (`node0` the master, racks `rack:0`..`rack:3`), at
/// `ROUND_MS` per round: every node's free memory differs from every other round's, and so does
/// the decision (the proposal's reason names the round; the cap alternates, so the proposal is
/// refused and admitted in turn).
pub fn changing_round(round: u64, nodes: usize) -> RoundRecord {
    let now_ms = 1_700_000_000_000 + round * ROUND_MS;
    let view = View {
        nodes: (0..nodes)
            .map(|n| {
                let name = format!("node{n}");
                let moving = u64::try_from(n).unwrap_or(0).wrapping_mul(7_919) ^ round;
                let facts = NodeFacts {
                    name: name.clone(),
                    group: "default".into(),
                    domain: format!("rack:{}", n % 4),
                    vm_capable: true,
                    drained: false,
                    offline: false,
                    master: n == 0,
                    memory_free: Some(60_000 + moving % 100_000),
                    primary_memory: Some(1024 + round % 512),
                    primaries: 0,
                };
                (name, facts)
            })
            .collect(),
        storage: Vec::new(),
        now_ms,
    };
    let policy = Policy {
        cluster: Caps {
            max_disrupted_nodes: 1 + usize::from(round % 2 == 1),
            max_disrupted_percent: None,
            min_healthy_nodes: 1,
        },
        ..Policy::default()
    };
    let incident = |n| Holder::Incident {
        id: uuid::Uuid::from_u128(n),
    };
    let in_force = InForce::new(&view, [("node1".to_owned(), incident(1))]);
    let proposal = Proposal {
        duty: Duty::NodeRepair,
        holder: incident(2),
        subject: "node node2".into(),
        invasiveness: 2,
        since_ms: 5,
        disrupts: ["node2".to_owned()].into(),
        touches: std::collections::BTreeSet::new(),
        fresh: false,
        moves_memory: Some(1024),
        after_releases: std::collections::BTreeMap::new(),
        reason: format!("evacuate (round {round})"),
    };
    let decision = decide(&view, &policy, &in_force, vec![proposal]);
    RoundRecord {
        now_ms,
        coordinator: "node0".into(),
        gate: GateSnapshot {
            view: std::sync::Arc::new(view),
            policy,
            in_force,
            decision,
            recorded_after: InForce::default(),
        },
        verdicts: (0..nodes)
            .map(|n| (format!("node{n}"), "Ok".to_owned()))
            .collect(),
    }
}

/// What one run writes.
#[derive(Debug, Clone, Copy)]
pub struct Workload {
    /// Nodes of the cluster.
    pub nodes: usize,
    /// Rounds, each deciding anew.
    pub rounds: u64,
    /// Audit lines with the longest reason written per round (by writers: grants, overrides).
    pub audit_per_round: u64,
    /// Overrides with the longest reason asked for per round.
    pub overrides_per_round: u64,
    /// Rounds between two retention runs (the daemon's hour at `ROUND_MS`: 360).
    pub retention_every: u64,
}

/// What the state weighed during a run.
#[derive(Debug, Clone, Copy, Default)]
pub struct Figures {
    /// Bytes the recorder wrote in all (new parts).
    pub recorded_bytes: u64,
    /// Median new bytes of a round's record.
    pub new_bytes_median: u64,
    /// Largest snapshot (what is pushed to the master candidates) seen after a round.
    pub max_snapshot_bytes: u64,
    /// The snapshot at the end.
    pub snapshot_bytes: u64,
    /// The recorder's rounds kept at the end.
    pub recorder_rounds: u64,
    /// The bytes of the recorder's parts kept at the end.
    pub recorder_bytes: u64,
    /// The recorder's files on disk at the end.
    pub recorder_file_bytes: u64,
    /// Audit lines kept at the end.
    pub audit_lines: u64,
    /// Overrides kept at the end.
    pub overrides: u64,
    /// Overrides refused for the state's budget.
    pub overrides_refused: u64,
    /// Seconds the run took.
    pub seconds: f64,
}

/// Runs `workload` on `store` under retention `policy`; the snapshot is weighed after every
/// retention run and every `weigh_every` rounds.
pub fn grow(
    store: &Store,
    workload: &Workload,
    policy: &RetentionPolicy,
    weigh_every: u64,
) -> anyhow::Result<Figures> {
    let started = Instant::now();
    let reason = "r".repeat(MAX_TEXT_BYTES);
    let who = "w".repeat(MAX_NAME_BYTES);
    let mut figures = Figures::default();
    let mut new_bytes = Vec::new();
    let mut override_seq: u128 = 0;
    for round in 0..workload.rounds {
        let record = changing_round(round, workload.nodes);
        let now_ms = record.now_ms;
        let written = store.record_round(&record)?;
        new_bytes.push(u64::try_from(written.new_bytes).unwrap_or(u64::MAX));
        for _ in 0..workload.audit_per_round {
            store.audit(now_ms, &who, "renew disruption of a node", &reason)?;
        }
        for _ in 0..workload.overrides_per_round {
            override_seq += 1;
            let asked = Override {
                id: uuid::Uuid::from_u128(override_seq),
                domain: "d".repeat(MAX_NAME_BYTES),
                until_ms: now_ms + 90 * 86_400_000,
                reason: reason.clone(),
                who: who.clone(),
                created_ms: now_ms,
            };
            match store.add_override(&asked) {
                Ok(()) => {}
                Err(nodecare_coordinator::store::StoreError::Full(_)) => {
                    figures.overrides_refused += 1;
                }
                Err(error) => return Err(error.into()),
            }
        }
        let retention = (round + 1) % workload.retention_every.max(1) == 0;
        if retention {
            store.apply_retention(policy, now_ms)?;
            store.compact()?;
        }
        if retention || (round + 1) % weigh_every.max(1) == 0 || round + 1 == workload.rounds {
            let bytes = u64::try_from(store.snapshot()?.len()).unwrap_or(u64::MAX);
            figures.max_snapshot_bytes = figures.max_snapshot_bytes.max(bytes);
            figures.snapshot_bytes = bytes;
        }
    }
    figures.recorded_bytes = new_bytes.iter().sum();
    new_bytes.sort_unstable();
    figures.new_bytes_median = new_bytes.get(new_bytes.len() / 2).copied().unwrap_or(0);
    let (rounds, _, bytes) = store.recorder_size()?;
    figures.recorder_rounds = rounds;
    figures.recorder_bytes = bytes;
    figures.recorder_file_bytes = store.recorder_file_bytes()?;
    figures.audit_lines = u64::try_from(store.audit_log(usize::MAX)?.len()).unwrap_or(u64::MAX);
    figures.overrides = u64::try_from(store.overrides(0, 0)?.len()).unwrap_or(u64::MAX);
    figures.seconds = started.elapsed().as_secs_f64();
    Ok(figures)
}

/// Whether the replicated state stayed under the replica limit throughout.
pub const fn within_limit(figures: &Figures) -> bool {
    figures.max_snapshot_bytes <= MAX_REPLICA_BYTES
}
