//! Accelerated coordinator soak (ignored: run by `bench/soak/coordinator.sh`): rounds back to back
//! over a simulated cluster whose agents flip verdicts at random (healthy, live repair,
//! evacuation, unknown, unreachable), an operator who acknowledges finished incidents by removing
//! their tags, and RAPI faults now and then. Every minute: rounds, errors, the process's RSS and
//! the state database's size. Fails on a round error that no injected fault explains, on memory
//! growth (last minute vs first) and on an unbounded database.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test helpers: a failure is the test failing"
)]

use std::time::{Duration, Instant};

use nodecare_ganeti_sim::HttpFaults;
use nodecare_tests::fake_agent::{RepairBehaviour, verdict};
use nodecare_tests::harness::{Harness, node};
use serde_json::json;

struct Random(u64);

impl Random {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

fn db_bytes(dir: &std::path::Path) -> u64 {
    ["state.db", "state.db-wal"]
        .iter()
        .filter_map(|f| std::fs::metadata(dir.join(f)).ok())
        .map(|m| m.len())
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "soak: run by bench/soak/coordinator.sh"]
async fn coordinator_soak() {
    let seconds: u64 = std::env::var("SOAK_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3600);
    let nodes = 8;
    let instances: Vec<String> = (1..=16)
        .map(|i| format!("i{i}:diskless:{}", 1 + i % nodes))
        .collect();
    let mut h = Harness::new(nodes, &instances.join(","), |c| {
        c.undrain_on_ack = true;
        c.max_disrupted_nodes = 2;
        c.job_timeout = 5.0;
        c.repair_poll = 0.0;
        c.breaker.max_incident_percent = 100.0;
        c.breaker.max_incident_nodes = 100;
        c.breaker.max_unreachable_percent = 100.0;
    })
    .await
    .unwrap();
    h.sim.set_job_delay(Duration::from_millis(5));
    for i in 1..=nodes {
        h.agents.get(&node(i)).unwrap().set_repair(RepairBehaviour {
            exit_code: 0,
            duration: Duration::from_millis(5),
        });
    }
    let state_dir = h.state_dir.path().to_path_buf();
    let mut random = Random(0x9e37_79b9_7f4a_7c15);
    let start = Instant::now();
    let deadline = start + Duration::from_secs(seconds);
    let mut minute = 0;
    let mut rounds = 0_u64;
    let mut errors = 0_u64;
    let mut faulted = 0_u64;
    let mut rows: Vec<(u64, u64, u64, u64, u64)> = Vec::new();
    let mut minute_rss: Vec<u64> = Vec::new();
    let mut max_incidents = 0;
    while Instant::now() < deadline {
        // Verdict flips: one node in four changes its mind each round.
        for i in 1..=nodes {
            if !random.next().is_multiple_of(4) {
                continue;
            }
            let agent = h.agents.get(&node(i)).unwrap();
            agent.set_down(false);
            match random.next() % 20 {
                0 => agent.set_verdict(verdict("evacuate", json!({"disk": "sdc"}), None)),
                1..=4 => agent.set_verdict(verdict(
                    "live-repair",
                    json!({"fan": random.next() % 3}),
                    Some("reset-fan"),
                )),
                5 => agent.set_verdict(verdict("unknown", json!({"why": "flaky"}), None)),
                6 => agent.set_down(true),
                _ => agent.set_verdict(verdict("Ok", serde_json::Value::Null, None)),
            }
        }
        // The operator acknowledges finished incidents now and then.
        if random.next().is_multiple_of(10) {
            h.sim.with_cluster(|c| {
                for n in c.nodes.values_mut() {
                    n.tags.retain(|t| !t.starts_with("maintd:"));
                }
            });
        }
        let fault = random.next().is_multiple_of(50);
        if fault {
            faulted += 1;
            h.sim.set_http_faults(HttpFaults {
                reset: 1,
                ..HttpFaults::default()
            });
        }
        let result = h.coordinator.round().await;
        h.sim.set_http_faults(HttpFaults::default());
        rounds += 1;
        if let Err(error) = result
            && !fault
        {
            errors += 1;
            eprintln!("round {rounds}: {error}");
        }
        max_incidents = max_incidents.max(h.incidents().unwrap().len());
        minute_rss.push(rss_kib());
        let now_minute = start.elapsed().as_secs() / 60;
        if now_minute != minute {
            let mean = minute_rss.iter().sum::<u64>() / minute_rss.len().max(1) as u64;
            let row = (minute, rounds, errors, mean, db_bytes(&state_dir));
            println!(
                "{{\"minute\": {}, \"rounds\": {}, \"errors\": {}, \"rss_kib\": {}, \"db_bytes\": {}, \"submissions\": {}}}",
                row.0,
                row.1,
                row.2,
                row.3,
                row.4,
                h.sim.submissions().len()
            );
            rows.push(row);
            minute_rss.clear();
            minute = now_minute;
        }
    }
    println!(
        "{{\"rounds\": {rounds}, \"errors\": {errors}, \"faulted_rounds\": {faulted}, \"max_incidents\": {max_incidents}, \"submissions\": {}, \"duplicates\": {}}}",
        h.sim.submissions().len(),
        h.sim.duplicate_intents().len()
    );
    for incident in h.incidents().unwrap() {
        println!(
            "incident {} {} {:?} {:?} blocked={:?} failure={:?}",
            incident.node,
            incident.action.as_str(),
            incident.repair_status,
            incident.observed,
            incident.blocked_by,
            incident.failure
        );
    }
    assert_eq!(errors, 0, "round errors without an injected fault");
    assert!(
        h.sim.duplicate_intents().is_empty(),
        "{:?}",
        h.sim.duplicate_intents()
    );
    assert!(
        max_incidents <= 2 * nodes,
        "incidents pile up: {max_incidents}"
    );
    if rows.len() >= 3 {
        let (first, last) = (rows[1], rows[rows.len() - 1]);
        assert!(
            last.3 <= first.3 + first.3 / 10 + 4096,
            "memory grew: {} KiB in minute {} → {} KiB in minute {}",
            first.3,
            first.0,
            last.3,
            last.0
        );
        assert!(
            last.4 <= first.4 * 2 + 1_048_576,
            "state database grew: {} → {} bytes",
            first.4,
            last.4
        );
    }
}
