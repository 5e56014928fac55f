//! Benchmark of one coordinator round over many agents on loopback.
//!
//! `serve-agents N FILE [FIRST [FLIP]]`: serve N fake agents (nodes FIRST.., default 1; one
//! listener each, canned signed reports) and write their `node url` lines to FILE, then wait to
//! be killed. The scripts run several for many agents (each process has its descriptor limit).
//! `round FILE [ROUNDS]`: run the coordinator (simulated Ganeti with those nodes) for ROUNDS
//! rounds over them; print each round's duration and the process's peak RSS.
//! `watch FILE`: run the coordinator daemon (rounds every hour, one long-poll watch per agent),
//! then flip one agent's verdict (through `FILE.flip`, which `serve-agents` obeys) and print how
//! long after the flip the round started and the new verdict was seen, and the RSS; then one
//! more round with nothing changed (`quiet_round_seconds`). With `BENCH_SIM_URL` set (the
//! address of a `nodecare-ganeti-sim` process serving the same nodes over plain HTTP), the
//! simulated Ganeti runs in that process, so the RSS printed is the coordinator's alone.
//! `watched-rounds FILE ROUNDS [SETTLE_SECONDS]`: the daemon as in `watch`; after the first
//! round and the settle time, ROUNDS rounds one after another (for instruction counts).
//! `recorder FILE ROUNDS`: the flight recorder's cost. Node 2 says `evacuate` (through
//! `FILE.flip`) while node 3 is drained by hand and at most one node may be disrupted, so every
//! round refuses node 2's incident; two coordinators over the same agents, one recording rounds
//! and one not, run ROUNDS rounds each in turn; prints each one's median round, their ratio, and
//! what the recorder kept (rounds, distinct parts, bytes).
//! `what-if FILE BLOCKS`: what a what-if (`GET /1/what-if?verdict=NODE:evacuate`, asked as
//! the API asks it) costs the coordinator: one asked alone, three times (the heap's peak above
//! what it was before, the peak RSS's growth, the process's processor time, the wall time, the
//! simulated rounds); eight callers at once (one runs at a time, the others wait their turn);
//! and the daemon's own rounds, BLOCKS times 5 rounds back to back with no what-if, then 5
//! while one caller asks what-ifs back to back: each side's median round and their ratio. The
//! daemon watches the agents, as packaged (`BENCH_WATCH=0`: it does not). Then the control: the
//! same rounds beside a busy loop on a thread at the what-if's nice value.
//! `state-growth NODES ROUNDS`: the state's growth on a changing cluster
//! ([`nodecare_tests::state_growth`]): ROUNDS rounds on NODES nodes, each deciding anew, two
//! audit lines and one override with the longest reasons per round, retention (the default
//! policy) every 360 rounds (an hour of 10 s rounds); prints what the snapshot pushed to the
//! master candidates weighed at most and at the end, and what the recorder kept apart.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use nodecare_coordinator::daemon::Coordinator;
use nodecare_ganeti::Ganeti;
use nodecare_ganeti_sim::Simulation;
use nodecare_ganeti_sim::model::SimConfig;
use nodecare_tests::fake_agent::FakeAgents;
use nodecare_tests::harness::{DOMAIN, node, simulated_cluster_config, test_key};
use nodecare_tests::measure::{
    Counting, heap_now, heap_peak, process_cpu, reset_heap_peak, reset_rss_peak, status_kib,
};

#[global_allocator]
static ALLOCATOR: Counting = Counting;

fn peak_rss_kib() -> u64 {
    status_kib("VmHWM:")
}

async fn serve_agents(count: usize, file: &str, first: usize, flip: &str) -> anyhow::Result<()> {
    let key = test_key();
    let mut agents = FakeAgents::default();
    let mut lines = String::new();
    for i in first..first + count {
        let agent = agents
            .start(&node(i), &key, "127.0.0.1:0".parse()?)
            .await
            .with_context(|| {
                format!(
                    "fake agent {} of {count} (node {i}) cannot listen on 127.0.0.1 \
                     (descriptors: see ulimit -n; ports: an earlier run's connections may still \
                     hold them, see /proc/sys/net/ipv4/ip_local_port_range)",
                    i + 1 - first
                )
            })?;
        agent.freeze(Duration::from_secs(3600));
        lines.push_str(&format!("{} {}\n", node(i), agent.url()));
    }
    let partial = format!("{file}.partial");
    std::fs::write(&partial, lines)?;
    std::fs::rename(&partial, file)?;
    eprintln!("serving {count} fake agents");
    // `FLIP.flip` appears: node 2 says `evacuate` from now on; `FLIP.flipped` gets the time.
    let Some(agent) = agents.get(&node(2)) else {
        std::future::pending::<()>().await;
        return Ok(());
    };
    let flip_request = format!("{flip}.flip");
    loop {
        tokio::time::sleep(Duration::from_millis(5)).await;
        if std::path::Path::new(&flip_request).exists() {
            break;
        }
    }
    let flipped_ms = nodecare_protocol::now_ms();
    agent.refreeze(
        nodecare_tests::fake_agent::verdict("evacuate", serde_json::json!({"disk": "sdb"}), None),
        Duration::from_secs(3600),
    );
    let partial = format!("{flip}.flipped.partial");
    std::fs::write(&partial, flipped_ms.to_string())?;
    std::fs::rename(&partial, format!("{flip}.flipped"))?;
    std::future::pending::<()>().await;
    Ok(())
}

/// The `node url` lines `serve-agents` wrote to `file`.
fn agents_file(file: &str) -> anyhow::Result<BTreeMap<String, String>> {
    let text = std::fs::read_to_string(file).with_context(|| format!("reading {file}"))?;
    Ok(text
        .lines()
        .filter_map(|l| l.split_once(' ').map(|(n, u)| (n.to_owned(), u.to_owned())))
        .collect())
}

fn rss_kib() -> u64 {
    status_kib("VmRSS:")
}

/// The coordinator daemon over FILE's agents (`node url` lines) with one watch per agent and
/// rounds every hour, once its first round ended.
struct Watched {
    count: usize,
    board: Arc<nodecare_coordinator::reconcile::Board>,
    api: nodecare_coordinator::api::ApiState,
    stop: tokio::sync::oneshot::Sender<()>,
    running: tokio::task::JoinHandle<anyhow::Result<()>>,
    _state: tempfile::TempDir,
    /// The simulated Ganeti when it runs in this process (none: `BENCH_SIM_URL`'s process).
    _sim: Option<Simulation>,
}

/// The simulated Ganeti of `count` nodes: the process at `BENCH_SIM_URL` (plain HTTP) when set,
/// else one in this process.
fn simulated_ganeti(
    count: usize,
    instances: &str,
) -> anyhow::Result<(Arc<dyn Ganeti>, Option<Simulation>)> {
    if let Ok(url) = std::env::var("BENCH_SIM_URL") {
        let config = nodecare_ganeti::rapi::config::RapiConfig::new(
            url.trim(),
            nodecare_ganeti::rapi::config::ServerTrust::PlainHttp,
        );
        let client = nodecare_ganeti::rapi::client::RapiClient::new(config)
            .with_context(|| format!("a RAPI client of {url}"))?;
        return Ok((Arc::new(client), None));
    }
    let sim = Simulation::new(
        SimConfig::from_spec(count, instances, DOMAIN).map_err(anyhow::Error::msg)?,
    )
    .map_err(anyhow::Error::msg)?;
    Ok((Arc::new(sim.client()), Some(sim)))
}

impl Watched {
    /// The daemon over FILE's agents, with a simulated Ganeti of `instances` (a spec), watching
    /// the agents or not.
    async fn start(file: &str, instances: &str, watch: bool) -> anyhow::Result<Self> {
        let overrides = agents_file(file)?;
        let count = overrides.len();
        let (ganeti, sim) = simulated_ganeti(count, instances)?;
        let state = tempfile::tempdir()?;
        let mut config = simulated_cluster_config(node(1), state.path().to_path_buf(), overrides);
        config.round_interval = 3600.0;
        config.agents.watch = watch;
        let coordinator = Coordinator::new(&config, node(1), ganeti, test_key())?;
        let board = Arc::clone(&coordinator.api().board);
        let api = coordinator.api().clone();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let running = tokio::spawn(async move {
            coordinator
                .run(listener, async {
                    stopped.await.ok();
                })
                .await
                .map_err(anyhow::Error::from)
        });
        let daemon = Self {
            count,
            board,
            api,
            stop,
            running,
            _state: state,
            _sim: sim,
        };
        while daemon.last_round().number < 1 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        Ok(daemon)
    }

    /// The last round's summary.
    fn last_round(&self) -> nodecare_coordinator::reconcile::RoundSummary {
        self.board
            .last_round
            .read()
            .map(|r| r.clone())
            .unwrap_or_default()
    }

    async fn stop(self) -> anyhow::Result<()> {
        self.stop.send(()).ok();
        self.running.await?
    }
}

async fn watch(file: &str, settle: Duration) -> anyhow::Result<()> {
    let daemon = Watched::start(file, "", true).await?;
    let (count, board) = (daemon.count, Arc::clone(&daemon.board));
    let last_round = || daemon.last_round();
    let first = last_round();
    println!(
        "agents={count} first_round_seconds={:.3} agents_read={} failed={}",
        first.duration_ms as f64 / 1000.0,
        first.agents,
        first.agents_failed
    );
    // Every watch connects and gets its first answer, then waits.
    tokio::time::sleep(settle).await;
    println!(
        "agents={count} watching rss_mib={:.1} peak_rss_mib={:.1}",
        rss_kib() as f64 / 1024.0,
        peak_rss_kib() as f64 / 1024.0
    );
    std::fs::write(format!("{file}.flip"), "")?;
    let flipped = format!("{file}.flipped");
    let deadline = Instant::now() + Duration::from_secs(60);
    let verdict = || {
        board
            .agents
            .read()
            .ok()
            .and_then(|agents| agents.get(&node(2)).and_then(|a| a.verdict))
    };
    while verdict() != Some(nodecare_protocol::DiagnoseStatus::Evacuate) {
        if Instant::now() > deadline {
            bail!("the flipped verdict was not seen within 60 s");
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let seen_ms = nodecare_protocol::now_ms();
    // The fake agents write the time of the flip once it is served, which the coordinator may
    // see first: wait for the file (bounded).
    while !std::path::Path::new(&flipped).exists() {
        if Instant::now() > deadline {
            bail!("{flipped} was not written within 60 s of the flip request");
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let flipped_ms: u64 = std::fs::read_to_string(&flipped)
        .with_context(|| format!("reading {flipped}"))?
        .trim()
        .parse()?;
    // The round that saw it records its summary when it ends.
    while last_round().number < 2 {
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let round = last_round();
    println!(
        "agents={count} flip_to_round_start_ms={} flip_to_verdict_seen_ms={} round={} round_seconds={:.3} rss_mib={:.1} peak_rss_mib={:.1}",
        round.started_ms.saturating_sub(flipped_ms),
        seen_ms.saturating_sub(flipped_ms),
        round.number,
        round.duration_ms as f64 / 1000.0,
        rss_kib() as f64 / 1024.0,
        peak_rss_kib() as f64 / 1024.0
    );
    // One more round, nothing changed since the last.
    board.wake.notify_one();
    while last_round().number < round.number + 1 {
        if Instant::now() > deadline {
            bail!("the quiet round did not end within 60 s of the flip");
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let quiet = last_round();
    println!(
        "agents={count} quiet_round={} quiet_round_seconds={:.3} agents_read={} failed={} rss_mib={:.1} peak_rss_mib={:.1}",
        quiet.number,
        quiet.duration_ms as f64 / 1000.0,
        quiet.agents,
        quiet.agents_failed,
        rss_kib() as f64 / 1024.0,
        peak_rss_kib() as f64 / 1024.0
    );
    daemon.stop().await
}

/// The daemon with watches over FILE's agents: the first round, `settle`, then `rounds` rounds
/// one after another, each started through the board's wake-up.
async fn watched_rounds(file: &str, rounds: u64, settle: Duration) -> anyhow::Result<()> {
    let daemon = Watched::start(file, "", true).await?;
    let (count, board) = (daemon.count, Arc::clone(&daemon.board));
    let last_round = || daemon.last_round();
    tokio::time::sleep(settle).await;
    for _ in 0..rounds {
        let before = last_round().number;
        board.wake.notify_one();
        while last_round().number <= before {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        let round = last_round();
        if round.agents != count || round.agents_failed != 0 {
            bail!(
                "round {}: {} agents read, {} failed",
                round.number,
                round.agents,
                round.agents_failed
            );
        }
        println!(
            "agents={count} round={} seconds={:.3}",
            round.number,
            round.duration_ms as f64 / 1000.0
        );
    }
    daemon.stop().await
}

async fn rounds(file: &str, rounds: usize) -> anyhow::Result<()> {
    let overrides = agents_file(file)?;
    let count = overrides.len();
    let sim = Simulation::new(SimConfig::from_spec(count, "", DOMAIN).map_err(anyhow::Error::msg)?)
        .map_err(anyhow::Error::msg)?;
    let state = tempfile::tempdir()?;
    let config = simulated_cluster_config(node(1), state.path().to_path_buf(), overrides);
    let ganeti: Arc<dyn Ganeti> = Arc::new(sim.client());
    let mut coordinator = Coordinator::new(&config, node(1), ganeti, test_key())?;
    let rss_before = peak_rss_kib();
    for round in 1..=rounds {
        let started = Instant::now();
        let summary = coordinator.round().await?;
        let elapsed = started.elapsed();
        if summary.agents != count || summary.agents_failed != 0 {
            bail!(
                "round {round}: {} agents read, {} failed",
                summary.agents,
                summary.agents_failed
            );
        }
        println!(
            "agents={count} round={round} seconds={:.3} peak_rss_mib={:.1}",
            elapsed.as_secs_f64(),
            peak_rss_kib() as f64 / 1024.0
        );
    }
    println!(
        "agents={count} peak_rss_mib_before_first_round={:.1}",
        rss_before as f64 / 1024.0
    );
    Ok(())
}

/// One coordinator of the recorder benchmark, with its simulated cluster and state.
async fn recorder_coordinator(
    overrides: &BTreeMap<String, String>,
    record: bool,
) -> anyhow::Result<(Coordinator, Simulation, tempfile::TempDir)> {
    let count = overrides.len();
    let sim = Simulation::new(SimConfig::from_spec(count, "", DOMAIN).map_err(anyhow::Error::msg)?)
        .map_err(anyhow::Error::msg)?;
    sim.with_cluster(|c| {
        if let Some(n) = c.nodes.get_mut(&node(3)) {
            n.drained = true;
        }
    });
    let state = tempfile::tempdir()?;
    let mut config =
        simulated_cluster_config(node(1), state.path().to_path_buf(), overrides.clone());
    config.max_disrupted_nodes = 1;
    config.breaker.max_incident_percent = 100.0;
    config.record_rounds = record;
    let ganeti: Arc<dyn Ganeti> = Arc::new(sim.client());
    let coordinator = Coordinator::new(&config, node(1), ganeti, test_key())?;
    Ok((coordinator, sim, state))
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied().unwrap_or(0.0)
}

async fn recorder(file: &str, rounds: usize) -> anyhow::Result<()> {
    let overrides = agents_file(file)?;
    let count = overrides.len();
    std::fs::write(format!("{file}.flip"), "")?;
    let flipped = format!("{file}.flipped");
    for _ in 0..2000 {
        if std::path::Path::new(&flipped).exists() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    if !std::path::Path::new(&flipped).exists() {
        bail!("the fake agents did not flip node 2's verdict ({flipped} never appeared)");
    }
    let (mut with, _sim_with, _state_with) = recorder_coordinator(&overrides, true).await?;
    let (mut without, _sim_without, _state_without) =
        recorder_coordinator(&overrides, false).await?;
    let (mut times_with, mut times_without) = (Vec::new(), Vec::new());
    // The first two rounds of each open the incident: left out of the medians.
    for round in 1..=rounds + 2 {
        for (coordinator, times) in [
            (&mut with, &mut times_with),
            (&mut without, &mut times_without),
        ] {
            let started = Instant::now();
            coordinator.round().await?;
            if round > 2 {
                times.push(started.elapsed().as_secs_f64());
            }
        }
    }
    let incidents = with.api().store.incidents()?;
    let refused = incidents
        .iter()
        .any(|i| i.node == node(2) && i.blocked_by.is_some());
    if !refused {
        bail!("node 2's incident is not refused: {incidents:?}");
    }
    let (kept, parts, bytes) = with.api().store.recorder_size()?;
    let recorded = with.api().store.recorded_rounds(None, 10)?;
    let repeats: u64 = recorded.iter().map(|r| r.repeats).sum();
    // What a round that decides anew costs on top: its record written (every part new but the
    // ones it shares with the first).
    // A new decision whose view differs in one node: the node drained (its chunk of the view
    // new), its verdict changed (its chunk of the verdicts new).
    let mut writes = Vec::new();
    let mut new_bytes = Vec::new();
    if let Some(last) = recorded.first() {
        for n in 1..=10u64 {
            let mut record = last.record.clone();
            record.now_ms += n;
            let node = node(usize::try_from(n).unwrap_or(1) * 97 % count.max(1) + 1);
            if let Some(facts) = std::sync::Arc::make_mut(&mut record.gate.view)
                .nodes
                .get_mut(&node)
            {
                facts.drained = !facts.drained;
            }
            record
                .verdicts
                .insert(node, format!("unknown (what if {n})"));
            let started = Instant::now();
            let written = with.api().store.record_round(&record)?;
            writes.push(started.elapsed().as_secs_f64());
            new_bytes.push(written.new_bytes as f64);
        }
    }
    let (m_with, m_without) = (median(times_with), median(times_without));
    println!(
        "agents={count} rounds={rounds} median_round_with_recorder={m_with:.4} median_round_without={m_without:.4} ratio={:.3}",
        m_with / m_without
    );
    println!(
        "agents={count} recorded_rounds={kept} distinct_parts={parts} bytes={bytes} bytes_per_recorded_round={} repeats_counted={repeats}",
        bytes / kept.max(1)
    );
    println!(
        "agents={count} new_record_write_seconds_median={:.4} new_record_new_bytes_median={:.0}",
        median(writes),
        median(new_bytes)
    );
    Ok(())
}

/// One what-if asked of `api` by `caller` as `GET /1/what-if?{query}` asks it: its answer's
/// simulated rounds and jobs, or the error answer.
async fn ask_what_if(
    api: &nodecare_coordinator::api::ApiState,
    query: &str,
    caller: std::net::IpAddr,
) -> Result<(usize, usize, String), String> {
    nodecare_coordinator::what_if_api::what_if_by(
        api,
        Some(query),
        nodecare_coordinator::what_if::Caller::Address(caller),
    )
    .await
    .map(|answer| {
        (
            answer.rounds.len(),
            answer.jobs.len(),
            format!("{:?}", answer.ending),
        )
    })
    .map_err(|(status, message)| format!("{status}: {message}"))
}

fn mib(bytes: f64) -> f64 {
    bytes / (1024.0 * 1024.0)
}

async fn what_if_cost(file: &str, blocks: usize, watch: bool) -> anyhow::Result<()> {
    let count = agents_file(file)?.len();
    // Two DRBD instances a node, each with the next node as secondary.
    let instances: Vec<String> = (1..=count)
        .flat_map(|i| [format!("inst{i}a:drbd:{i}"), format!("inst{i}b:drbd:{i}")])
        .collect();
    let daemon = Watched::start(file, &instances.join(","), watch).await?;
    let api = daemon.api.clone();
    // One more round, the watches settled.
    tokio::time::sleep(Duration::from_secs(1)).await;
    timed_round(&daemon).await?;
    let query = std::env::var("BENCH_WHAT_IF_QUERY")
        .unwrap_or_else(|_| format!("verdict={}:evacuate", node(count.min(5))));
    let address = |a: u8, b: u8| std::net::IpAddr::from([10, 0, a, b]);
    // One alone, three times.
    for run in 1..=3 {
        let rss_before = reset_rss_peak();
        let heap_before = reset_heap_peak();
        let cpu = process_cpu();
        let started = Instant::now();
        let answer = ask_what_if(&api, &query, address(0, 1)).await;
        let wall = started.elapsed();
        let cpu = process_cpu().saturating_sub(cpu);
        let (rounds, jobs, ending) = answer.map_err(anyhow::Error::msg)?;
        println!(
            "what_if=alone nodes={count} watch={watch} run={run} heap_peak_mib={:.1} rss_growth_mib={:.1} cpu_seconds={:.3} wall_seconds={:.3} rounds={rounds} jobs={jobs} ending={ending}",
            mib(heap_peak().saturating_sub(heap_before) as f64),
            status_kib("VmHWM:").saturating_sub(rss_before) as f64 / 1024.0,
            cpu.as_secs_f64(),
            wall.as_secs_f64(),
        );
    }
    // Eight callers at once.
    let rss_before = reset_rss_peak();
    let heap_before = reset_heap_peak();
    let cpu = process_cpu();
    let started = Instant::now();
    let mut asked = tokio::task::JoinSet::new();
    for caller in 1..=8u8 {
        let api = api.clone();
        let query = query.clone();
        asked.spawn(async move { ask_what_if(&api, &query, address(1, caller)).await });
    }
    let (mut answered, mut refused) = (0, Vec::new());
    while let Some(done) = asked.join_next().await {
        match done? {
            Ok(_) => answered += 1,
            Err(why) => refused.push(why),
        }
    }
    println!(
        "what_if=eight_at_once nodes={count} watch={watch} heap_peak_mib={:.1} rss_growth_mib={:.1} cpu_seconds={:.3} wall_seconds={:.3} answered={answered} refused={} heap_after_mib={:.1}",
        mib(heap_peak().saturating_sub(heap_before) as f64),
        status_kib("VmHWM:").saturating_sub(rss_before) as f64 / 1024.0,
        process_cpu().saturating_sub(cpu).as_secs_f64(),
        started.elapsed().as_secs_f64(),
        refused.len(),
        mib(heap_now().saturating_sub(heap_before) as f64),
    );
    for why in refused.iter().take(2) {
        println!("what_if=eight_at_once refused: {why}");
    }
    // The daemon's rounds with no what-if, then while one caller asks back to back: rounds a
    // quarter of a second apart (as the daemon runs them: one every interval, or when a watch
    // sees a change), then back to back (the worst case: each round starts as the last ends).
    for gap_ms in [250u64, 0] {
        let (mut quiet, mut loaded, mut answers) = (Vec::new(), Vec::new(), 0usize);
        for _ in 0..blocks.max(1) {
            for _ in 0..5 {
                tokio::time::sleep(Duration::from_millis(gap_ms)).await;
                quiet.push(timed_round(&daemon).await?);
            }
            let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
            let client = {
                let (api, query, stop) = (api.clone(), query.clone(), Arc::clone(&stop));
                tokio::spawn(async move {
                    let mut answered = 0usize;
                    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                        if ask_what_if(&api, &query, address(2, 1)).await.is_ok() {
                            answered += 1;
                        }
                    }
                    answered
                })
            };
            // The client's first what-if is under way before the first round is timed.
            tokio::time::sleep(Duration::from_millis(100)).await;
            for _ in 0..5 {
                tokio::time::sleep(Duration::from_millis(gap_ms)).await;
                loaded.push(timed_round(&daemon).await?);
            }
            stop.store(true, std::sync::atomic::Ordering::Relaxed);
            answers += client.await?;
        }
        let p90 = |mut v: Vec<f64>| {
            v.sort_by(f64::total_cmp);
            v.get(v.len() * 9 / 10).copied().unwrap_or(0.0)
        };
        let (m_quiet, m_loaded) = (median(quiet.clone()), median(loaded.clone()));
        println!(
            "what_if=rounds nodes={count} watch={watch} gap_ms={gap_ms} rounds={} median_round_quiet={m_quiet:.4} median_round_with_what_ifs={m_loaded:.4} ratio={:.3} p90_quiet={:.4} p90_with_what_ifs={:.4} what_ifs_answered={answers}",
            quiet.len(),
            m_loaded / m_quiet.max(f64::MIN_POSITIVE),
            p90(quiet),
            p90(loaded),
        );
    }
    // The control: the same rounds beside a busy loop on a thread at the what-if's nice value
    // (what any work at a lowered priority costs the rounds on this machine).
    let (mut quiet, mut busy) = (Vec::new(), Vec::new());
    for _ in 0..blocks.max(1) {
        for _ in 0..5 {
            tokio::time::sleep(Duration::from_millis(250)).await;
            quiet.push(timed_round(&daemon).await?);
        }
        let spinner = tokio::spawn(nodecare_coordinator::background::run(
            "bench-busy-loop",
            |stop| async move {
                while !stop.asked() {
                    std::hint::spin_loop();
                }
            },
        ));
        for _ in 0..5 {
            tokio::time::sleep(Duration::from_millis(250)).await;
            busy.push(timed_round(&daemon).await?);
        }
        spinner.abort();
    }
    let (m_quiet, m_busy) = (median(quiet), median(busy));
    println!(
        "what_if=control nodes={count} watch={watch} gap_ms=250 median_round_quiet={m_quiet:.4} median_round_beside_a_niced_busy_loop={m_busy:.4} ratio={:.3}",
        m_busy / m_quiet.max(f64::MIN_POSITIVE)
    );
    daemon.stop().await
}

/// Wakes the daemon's round and waits for it: the seconds from the wake to its end.
async fn timed_round(daemon: &Watched) -> anyhow::Result<f64> {
    let before = daemon.last_round().number;
    let done = daemon.board.round_done.notified();
    tokio::pin!(done);
    done.as_mut().enable();
    let started = Instant::now();
    daemon.board.wake.notify_one();
    done.await;
    let took = started.elapsed().as_secs_f64();
    let round = daemon.last_round();
    if round.number <= before {
        bail!("round {} ended, not the one woken", round.number);
    }
    if round.agents != daemon.count || round.agents_failed != 0 {
        bail!(
            "round {}: {} agents read, {} failed",
            round.number,
            round.agents,
            round.agents_failed
        );
    }
    Ok(took)
}

fn state_growth(nodes: usize, rounds: u64) -> anyhow::Result<()> {
    use nodecare_tests::state_growth::{Workload, grow, within_limit};
    let state = tempfile::tempdir()?;
    let store = nodecare_coordinator::store::Store::open_dir(state.path())?;
    let workload = Workload {
        nodes,
        rounds,
        audit_per_round: 2,
        overrides_per_round: 1,
        retention_every: 360,
    };
    let policy = nodecare_coordinator::store::retention::RetentionConfig::default().policy();
    let figures = grow(&store, &workload, &policy, 100)?;
    println!(
        "nodes={nodes} rounds={rounds} seconds={:.1} recorded_bytes={} new_bytes_per_round_median={}",
        figures.seconds, figures.recorded_bytes, figures.new_bytes_median
    );
    println!(
        "snapshot_bytes_max={} snapshot_bytes_end={} replica_limit={} within_limit={}",
        figures.max_snapshot_bytes,
        figures.snapshot_bytes,
        nodecare_protocol::replica::MAX_REPLICA_BYTES,
        within_limit(&figures)
    );
    println!(
        "recorder_rounds={} recorder_bytes={} recorder_file_bytes={} audit_lines={} overrides={} overrides_refused={}",
        figures.recorder_rounds,
        figures.recorder_bytes,
        figures.recorder_file_bytes,
        figures.audit_lines,
        figures.overrides,
        figures.overrides_refused
    );
    if !within_limit(&figures) {
        bail!("the replicated state passed the replica limit");
    }
    Ok(())
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    // The coordinator's own runtime shape: two worker threads (the machine has two cores).
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    match args.get(1).map(String::as_str) {
        Some("serve-agents") => {
            let count: usize = args.get(2).context("count")?.parse()?;
            let file = args.get(3).context("file")?;
            let first: usize = args.get(4).map_or(Ok(1), |s| s.parse())?;
            let flip = args.get(5).unwrap_or(file);
            runtime.block_on(serve_agents(count, file, first, flip))
        }
        Some("watched-rounds") => {
            let rounds: u64 = args.get(3).context("rounds")?.parse()?;
            let settle: u64 = args.get(4).map_or(Ok(5), |s| s.parse())?;
            runtime.block_on(watched_rounds(
                args.get(2).context("file")?,
                rounds,
                Duration::from_secs(settle),
            ))
        }
        Some("recorder") => {
            let n: usize = args.get(3).map_or(Ok(20), |s| s.parse())?;
            runtime.block_on(recorder(args.get(2).context("file")?, n))
        }
        Some("what-if") => {
            let blocks: usize = args.get(3).map_or(Ok(4), |s| s.parse())?;
            let watch = std::env::var("BENCH_WATCH").map_or(true, |w| w != "0");
            runtime.block_on(what_if_cost(args.get(2).context("file")?, blocks, watch))
        }
        Some("state-growth") => {
            let nodes: usize = args.get(2).map_or(Ok(1000), |s| s.parse())?;
            let rounds: u64 = args.get(3).map_or(Ok(10_000), |s| s.parse())?;
            state_growth(nodes, rounds)
        }
        Some("round") => {
            let n: usize = args.get(3).map_or(Ok(3), |s| s.parse())?;
            runtime.block_on(rounds(args.get(2).context("file")?, n))
        }
        Some("watch") => {
            let settle: u64 = args.get(3).map_or(Ok(10), |s| s.parse())?;
            runtime.block_on(watch(
                args.get(2).context("file")?,
                Duration::from_secs(settle),
            ))
        }
        _ => bail!(
            "usage: nodecare-bench-coordinator serve-agents N FILE [FIRST [FLIP]] | round FILE [ROUNDS] | watch FILE [SETTLE_SECONDS] | watched-rounds FILE ROUNDS [SETTLE_SECONDS] | recorder FILE ROUNDS | what-if FILE BLOCKS | state-growth NODES ROUNDS"
        ),
    }
}
