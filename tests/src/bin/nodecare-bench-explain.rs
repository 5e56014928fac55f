//! Benchmark of one explanation (`GET /1/explain`) on a recorder holding many rounds.
//!
//! `nodecare-bench-explain NODES ROUNDS`: records ROUNDS rounds of NODES nodes that each decide
//! anew ([`nodecare_tests::state_growth::changing_round`]: every node's free memory moves; the
//! same incident's proposal is refused and admitted in turn) into a state on disk, then answers
//! each kind of query twice, on a store just opened: by decoding the newest
//! [`EXPLAIN_ROUNDS`] rounds whole and searching them (`Store::recorded_rounds`, the way
//! explanations were answered before the recorder's index), and through the index
//! (`explain_api::*_from_recorder`, what the API answers with). For each it prints the peak of
//! the heap above what it was before (this binary counts its allocations), the growth of the
//! process's peak RSS (SQLite's own page cache included), the CPU time and the parts decoded,
//! and whether both answers are the same.
//!
//! Every round also judges incident 3's proposal to evacuate `node5`, refused by the cap or by
//! the free memory the round saw (its figures change every round).
//!
//! Queries: `node` (node2, which every round judges: the latest round), `quiet-node` (a node no
//! round judges: the latest round, said so), `record` (incident 2, which every round refuses
//! alike: the first round and the last are shown), `record-every-round` (incident 3: every
//! round is shown), `job` (an operation of incident 2 forgotten by the ledger, in the middle of
//! the rounds: its round and the newest that names it).

use anyhow::bail;
use nodecare_coordinator::explain_api::{
    EXPLAIN_ROUNDS, job_from_recorder, node_from_recorder, record_from_recorder,
};
use nodecare_coordinator::recorder::{
    Operation, RoundRecord, explain_job, explain_node, explain_record,
};
use nodecare_coordinator::store::Store;
use nodecare_core::gate::{Holder, Proposal, decide};
use nodecare_protocol::explain::Explanation;
use nodecare_tests::measure::{Counting, heap_peak, reset_heap_peak, reset_rss_peak, status_kib};
use nodecare_tests::state_growth::{ROUND_MS, changing_round};

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// What answering one query cost.
struct Cost {
    heap_peak_bytes: usize,
    rss_growth_kib: u64,
    cpu: std::time::Duration,
    parts_decoded: u64,
    answer: Explanation,
}

/// Answers `query` on the state in `dir`, opened anew, and measures it.
fn measure(
    dir: &std::path::Path,
    query: impl FnOnce(&Store) -> anyhow::Result<Explanation>,
) -> anyhow::Result<Cost> {
    let store = Store::open_dir(dir)?;
    // What earlier queries freed goes back to the system first: the RSS grows by what this one
    // takes.
    let rss_before = reset_rss_peak();
    let heap_before = reset_heap_peak();
    let decoded = store.recorder_parts_decoded();
    let cpu = nodecare_coordinator::background::cpu_time();
    let answer = query(&store)?;
    let cpu = nodecare_coordinator::background::cpu_time().saturating_sub(cpu);
    Ok(Cost {
        heap_peak_bytes: heap_peak().saturating_sub(heap_before),
        rss_growth_kib: status_kib("VmHWM:").saturating_sub(rss_before),
        cpu,
        parts_decoded: store.recorder_parts_decoded() - decoded,
        answer,
    })
}

/// `record` judged again with one more proposal: incident 3 evacuating `node5` (in the domain
/// of `node1`, which incident 1 holds), refused by the cap or by the free memory the round saw,
/// which changes every round: each round shows a new outcome of incident 3.
fn with_incident_3(mut record: RoundRecord) -> RoundRecord {
    let gate = &record.gate;
    let mut proposals: Vec<Proposal> = gate
        .decision
        .judgements
        .iter()
        .map(|j| j.proposal.clone())
        .collect();
    proposals.push(Proposal {
        holder: Holder::Incident {
            id: uuid::Uuid::from_u128(3),
        },
        subject: "node node5".into(),
        disrupts: ["node5".to_owned()].into(),
        moves_memory: Some(10_000_000),
        ..proposals[0].clone()
    });
    record.gate.decision = decide(&gate.view, &gate.policy, &gate.in_force, proposals);
    record
}

fn mib(bytes: f64) -> f64 {
    bytes / (1024.0 * 1024.0)
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let nodes: usize = args.get(1).map_or(Ok(1_000), |s| s.parse())?;
    let rounds: u64 = args.get(2).map_or(Ok(386), |s| s.parse())?;
    let state = tempfile::tempdir()?;
    {
        let store = Store::open_dir(state.path())?;
        for round in 0..rounds {
            store.record_round(&with_incident_3(changing_round(round, nodes)))?;
        }
    }
    let incident = uuid::Uuid::from_u128(2);
    let changing = uuid::Uuid::from_u128(3);
    let first_ms = changing_round(0, 1).now_ms;
    let operation = Operation {
        trail: incident,
        holder: None,
        intent: "drain_node2".into(),
        description: "drain node2".into(),
        state: "success (the record is forgotten)".into(),
        recorded_ms: first_ms + rounds / 2 * ROUND_MS,
        node: None,
    };
    let quiet = format!("node{}", nodes.saturating_sub(1));
    type Query<'a> = Box<dyn Fn(&Store) -> anyhow::Result<Explanation> + 'a>;
    let queries: Vec<(&str, Query<'_>, Query<'_>)> = vec![
        (
            "node",
            Box::new(|s| {
                Ok(explain_node(
                    &s.recorded_rounds(None, EXPLAIN_ROUNDS)?,
                    "node2",
                    None,
                ))
            }),
            Box::new(|s| Ok(node_from_recorder(s, "node2", None)?)),
        ),
        (
            "quiet-node",
            Box::new(|s| {
                Ok(explain_node(
                    &s.recorded_rounds(None, EXPLAIN_ROUNDS)?,
                    &quiet,
                    None,
                ))
            }),
            Box::new(|s| Ok(node_from_recorder(s, &quiet, None)?)),
        ),
        (
            "record",
            Box::new(|s| {
                Ok(explain_record(
                    &s.recorded_rounds(None, EXPLAIN_ROUNDS)?,
                    incident,
                ))
            }),
            Box::new(|s| Ok(record_from_recorder(s, incident)?)),
        ),
        (
            "record-every-round",
            Box::new(|s| {
                Ok(explain_record(
                    &s.recorded_rounds(None, EXPLAIN_ROUNDS)?,
                    changing,
                ))
            }),
            Box::new(|s| Ok(record_from_recorder(s, changing)?)),
        ),
        (
            "job",
            Box::new(|s| {
                Ok(explain_job(
                    &s.recorded_rounds(None, EXPLAIN_ROUNDS)?,
                    7,
                    &operation,
                ))
            }),
            Box::new(|s| Ok(job_from_recorder(s, 7, &operation)?)),
        ),
    ];
    println!("nodes={nodes} recorded_rounds={rounds}");
    let mut differ = Vec::new();
    for (name, whole, indexed) in &queries {
        let before = measure(state.path(), whole)?;
        let after = measure(state.path(), indexed)?;
        let same = before.answer == after.answer;
        if !same {
            differ.push(*name);
        }
        println!(
            "query={name} rounds_shown={} whole: heap_peak_mib={:.2} rss_growth_mib={:.1} cpu_ms={:.1} parts_decoded={} | index: heap_peak_mib={:.2} rss_growth_mib={:.1} cpu_ms={:.1} parts_decoded={} | same={same}",
            after.answer.rounds.len(),
            mib(before.heap_peak_bytes as f64),
            before.rss_growth_kib as f64 / 1024.0,
            before.cpu.as_secs_f64() * 1e3,
            before.parts_decoded,
            mib(after.heap_peak_bytes as f64),
            after.rss_growth_kib as f64 / 1024.0,
            after.cpu.as_secs_f64() * 1e3,
            after.parts_decoded,
        );
    }
    if !differ.is_empty() {
        bail!("the answers differ: {}", differ.join(", "));
    }
    Ok(())
}
