//! Accelerated coordinator soak (ignored: run by `bench/soak/coordinator.sh`): the coordinator
//! binary, rounds every 20 ms, over a simulated cluster (served over HTTP by this process) whose
//! agents flip verdicts at random, about twice a second across the cluster (healthy, live repair,
//! evacuation, unknown, unreachable), an operator who acknowledges finished incidents by
//! removing their tags, and another tool asking for disruptions (`/1/disruptions`, about one
//! grant or release a second, each an audit log line). Retention runs every 10 s with
//! seconds-long limits (`[retention]`), so the state database is compacted all along.
//! Every minute: the coordinator's RSS, the state database's size, its rounds, round errors and
//! the rows retention deleted (from `/metrics`). Fails if the coordinator logs a warning or an
//! error, counts a round error, submits an intent twice, dies, lets incidents or audit lines
//! pile up, never compacts, or its memory (last minute vs the second) or database grows.

#![allow(
    clippy::disallowed_methods,
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test helpers: a failure is the test failing"
)]

use std::time::{Duration, Instant};

use nodecare_ganeti_sim::Simulation;
use nodecare_ganeti_sim::model::SimConfig;
use nodecare_tests::fake_agent::{FakeAgents, RepairBehaviour, verdict};
use nodecare_tests::harness::{DOMAIN, node, test_key};
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

fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// The value of the series `name` (exact, labels included) in a `/metrics` text.
fn metric(text: &str, name: &str) -> u64 {
    text.lines()
        .find_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            (series == name).then(|| value.parse::<f64>().ok())?
        })
        .map_or(0, |v| v as u64)
}

/// Rows retention deleted, all kinds.
fn deleted(text: &str) -> u64 {
    [
        "incident",
        "intent",
        "campaign",
        "balancing_move",
        "override",
        "audit",
    ]
    .iter()
    .map(|kind| {
        metric(
            text,
            &format!("nodecare_coordinator_retention_deleted_total{{kind=\"{kind}\"}}"),
        )
    })
    .sum()
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
    let sim = Simulation::new(SimConfig::from_spec(nodes, &instances.join(","), DOMAIN).unwrap())
        .unwrap();
    sim.set_job_delay(Duration::from_millis(5));
    let server = sim
        .serve("127.0.0.1:0".parse().unwrap(), None)
        .await
        .unwrap();
    let key = test_key();
    let mut agents = FakeAgents::default();
    for i in 1..=nodes {
        agents
            .start(&node(i), &key, "127.0.0.1:0".parse().unwrap())
            .await
            .unwrap();
        agents.get(&node(i)).unwrap().set_repair(RepairBehaviour {
            exit_code: 0,
            duration: Duration::from_millis(5),
        });
    }
    let dir = tempfile::tempdir().unwrap();
    let key_path = dir.path().join("hmac.key");
    std::fs::write(&key_path, b"nodecare-test-cluster-hmac-key\n").unwrap();
    // Secrets are refused when others can read them.
    std::fs::set_permissions(
        &key_path,
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )
    .unwrap();
    let state_dir = dir.path().join("state");
    let users_path = dir.path().join("users");
    nodecare_tests::harness::write_secret(&users_path, "tool secret write\n").unwrap();
    let listen = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let url = format!("http://{listen}");
    let overrides: Vec<String> = agents
        .overrides()
        .iter()
        .map(|(n, u)| format!("{n:?} = {u:?}"))
        .collect();
    let config = format!(
        "node_name = {:?}\nstate_dir = {:?}\nhmac_key = {:?}\nlisten = {:?}\nusers = {:?}\n\
         ssconf_dir = {:?}\nround_interval = 0.02\nrepair_poll = 0.0\njob_timeout = 5\n\
         max_disrupted_nodes = 2\nundrain_on_ack = true\n\
         [breaker]\nmax_incident_percent = 100.0\nmax_incident_nodes = 100\n\
         max_unreachable_percent = 100.0\n\
         [retention]\ninterval = 10.0\nincidents = 30.0\naudit = 60.0\naudit_rows = 1000\n\
         [agents]\ntimeout = 1.0\noverrides = {{ {} }}\n\
         [rapi]\nurl = {:?}\nallow_plain_http = true\ntimeout = 2\n",
        node(1),
        state_dir,
        key_path,
        listen.to_string(),
        users_path,
        dir.path().join("no-ssconf"),
        overrides.join(", "),
        server.url,
    );
    let config_path = dir.path().join("coordinator.toml");
    std::fs::write(&config_path, config).unwrap();
    let log_path = dir.path().join("coordinator.log");
    let mut child =
        tokio::process::Command::new(env!("CARGO_BIN_EXE_nodecare-coordinator-under-test"))
            .arg("--config")
            .arg(&config_path)
            // The retention runs are logged at info by the daemon module.
            .env("NODECARE_LOG", "warn,nodecare_coordinator::daemon=info")
            .env("MALLOC_ARENA_MAX", "2")
            .stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create(&log_path).unwrap())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
    let pid = child.id().unwrap();

    let mut random = Random(0x9e37_79b9_7f4a_7c15);
    let start = Instant::now();
    let deadline = start + Duration::from_secs(seconds);
    let mut minute = 0;
    let mut flips = 0_u64;
    let mut rows: Vec<(u64, u64, u64)> = Vec::new();
    let mut minute_rss: Vec<u64> = Vec::new();
    let mut db_sizes: Vec<u64> = Vec::new();
    nodecare_coordinator::install_crypto_provider();
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    let mut grant: Option<String> = None;
    let mut answers: std::collections::BTreeMap<String, u64> = std::collections::BTreeMap::new();
    let mut scrape = String::new();
    while Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
        // Verdict flips: about two a second across the cluster, the master (node1) left alone
        // (an evacuation of the master fails in Ganeti: docs/RELIABILITY.md, findings).
        for i in 2..=nodes {
            if !random.next().is_multiple_of(200) {
                continue;
            }
            flips += 1;
            let agent = agents.get(&node(i)).unwrap();
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
        if random.next().is_multiple_of(100) {
            sim.with_cluster(|c| {
                for n in c.nodes.values_mut() {
                    n.tags.retain(|t| !t.starts_with("maintd:"));
                }
            });
        }
        // Another tool asks for a disruption (1 s), or releases the one it holds: about once a
        // second. Each grant, release or expiry is an audit log line.
        if random.next().is_multiple_of(50) {
            let answer = match grant.take() {
                Some(id) => client
                    .delete(format!("{url}/1/disruptions/{id}"))
                    .basic_auth("tool", Some("secret"))
                    .send()
                    .await
                    .map(|a| ("release", a)),
                None => client
                    .post(format!("{url}/1/disruptions"))
                    .basic_auth("tool", Some("secret"))
                    .json(&json!({
                        "node": node(2 + (random.next() % (nodes as u64 - 1)) as usize),
                        "reason": "soak", "requester": "soak-tool", "ttl_s": 1
                    }))
                    .send()
                    .await
                    .map(|a| ("grant", a)),
            };
            let key = match answer {
                Ok((what, answer)) => {
                    let status = answer.status().as_u16();
                    if status == 201 {
                        grant = answer
                            .json::<serde_json::Value>()
                            .await
                            .ok()
                            .and_then(|g| g["id"].as_str().map(str::to_owned));
                    }
                    format!("{what} {status}")
                }
                Err(error) => format!("error {}", error.without_url()),
            };
            *answers.entry(key).or_default() += 1;
        }
        minute_rss.push(rss_kib(pid));
        let now_minute = start.elapsed().as_secs() / 60;
        if now_minute != minute {
            let mean = minute_rss.iter().sum::<u64>() / minute_rss.len().max(1) as u64;
            let row = (minute, mean, db_bytes(&state_dir));
            db_sizes.push(row.2);
            if let Ok(answer) = client.get(format!("{url}/metrics")).send().await
                && let Ok(text) = answer.text().await
            {
                scrape = text;
            }
            println!(
                "{{\"minute\": {}, \"coordinator_rss_kib\": {}, \"db_bytes\": {}, \"db_file_bytes\": {}, \"state_bytes_metric\": {}, \"rounds\": {}, \"round_errors\": {}, \"retention_deleted\": {}, \"submissions\": {}, \"flips\": {flips}}}",
                row.0,
                row.1,
                row.2,
                std::fs::metadata(state_dir.join("state.db")).map_or(0, |m| m.len()),
                metric(&scrape, "nodecare_coordinator_state_bytes"),
                metric(&scrape, "nodecare_coordinator_round_duration_seconds_count"),
                metric(&scrape, "nodecare_coordinator_round_errors_total"),
                deleted(&scrape),
                sim.submissions().len()
            );
            rows.push(row);
            minute_rss.clear();
            minute = now_minute;
        }
    }
    assert!(child.try_wait().unwrap().is_none(), "the coordinator died");
    if let Ok(answer) = client.get(format!("{url}/metrics")).send().await
        && let Ok(text) = answer.text().await
    {
        scrape = text;
    }
    child.start_kill().unwrap();
    let _status = child.wait().await;
    let log = std::fs::read_to_string(&log_path).unwrap_or_default();
    // Expected: the agents the soak takes down, and the missing users file.
    let expected = ["agent gave no verified report", "users file"];
    let problems: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("WARN") || l.contains("ERROR"))
        .filter(|l| !expected.iter().any(|e| l.contains(e)))
        .collect();
    let retention_runs = log.lines().filter(|l| l.contains("retention run")).count();
    let store = nodecare_coordinator::store::Store::open_dir(&state_dir).unwrap();
    let incidents = store.incidents().unwrap();
    let audit_lines = store.audit_log(1_000_000).unwrap().len();
    let submissions = sim.submissions();
    let incidents_acted_on: std::collections::BTreeSet<&str> = submissions
        .iter()
        .filter_map(|s| s.intent.as_deref()?.split('/').next())
        .collect();
    let kind = |k: &str| {
        metric(
            &scrape,
            &format!("nodecare_coordinator_retention_deleted_total{{kind=\"{k}\"}}"),
        )
    };
    let round_errors = metric(&scrape, "nodecare_coordinator_round_errors_total");
    println!(
        "{{\"flips\": {flips}, \"submissions\": {}, \"incidents_acted_on\": {}, \"duplicates\": {}, \"incidents_left\": {}, \"rounds\": {}, \"round_errors\": {round_errors}, \"retention_runs\": {retention_runs}, \"deleted_incidents\": {}, \"deleted_intents\": {}, \"deleted_audit\": {}, \"audit_lines_left\": {audit_lines}, \"db_bytes_min\": {}, \"db_bytes_max\": {}, \"db_bytes_last\": {}, \"tool_answers\": {answers:?}, \"log_warnings\": {}}}",
        submissions.len(),
        incidents_acted_on.len(),
        sim.duplicate_intents().len(),
        incidents.len(),
        metric(&scrape, "nodecare_coordinator_round_duration_seconds_count"),
        kind("incident"),
        kind("intent"),
        kind("audit"),
        db_sizes.iter().min().copied().unwrap_or(0),
        db_sizes.iter().max().copied().unwrap_or(0),
        db_sizes.last().copied().unwrap_or(0),
        problems.len()
    );
    for line in problems.iter().take(20) {
        println!("{line}");
    }
    assert!(
        problems.is_empty(),
        "the coordinator logged warnings or errors"
    );
    assert!(
        sim.duplicate_intents().is_empty(),
        "{:?}",
        sim.duplicate_intents()
    );
    assert!(
        incidents.len() <= 2 * nodes,
        "incidents pile up: {}",
        incidents.len()
    );
    assert!(!sim.submissions().is_empty(), "the coordinator never acted");
    assert_eq!(round_errors, 0, "rounds ended by an error");
    // Refusals (429: the budget is taken; 503: no fresh gate view yet) are the gate's answers;
    // anything else is an error.
    let unexpected: Vec<_> = answers
        .iter()
        .filter(|(k, _)| {
            ![
                "grant 201",
                "grant 200",
                "grant 429",
                "grant 503",
                "release 200",
                "release 404",
            ]
            .contains(&k.as_str())
        })
        .collect();
    assert!(unexpected.is_empty(), "unexpected answers: {unexpected:?}");
    assert!(
        audit_lines <= 1001,
        "audit lines pile up: {audit_lines} (retention keeps 1000 and the last breaker reset)"
    );
    if seconds >= 120 {
        assert!(retention_runs >= 2, "retention ran {retention_runs} times");
        assert!(kind("audit") > 0, "retention deleted no audit line");
    }
    if rows.len() >= 3 {
        let (first, last) = (rows[1], rows[rows.len() - 1]);
        assert!(
            last.1 <= first.1 + first.1 / 10 + 2048,
            "memory grew: {} KiB in minute {} → {} KiB in minute {}",
            first.1,
            first.0,
            last.1,
            last.0
        );
        assert!(
            last.2 <= first.2 * 2 + 1_048_576,
            "state database grew: {} → {} bytes",
            first.2,
            last.2
        );
    }
}
