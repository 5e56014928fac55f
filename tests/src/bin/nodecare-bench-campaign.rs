//! Benchmark of a rolling maintenance campaign on the simulated cluster.
//!
//! `nodecare-bench-campaign [NODES] [INSTANCES] [JOB_S] [REBOOT_S] [BUDGET_%] [PAIRS]`
//! (defaults 200 4000 0.5 20 50 3):
//! NODES nodes (16 GiB each) with fake agents, INSTANCES instances spread over them (70 %
//! DRBD, 20 % sharedfile, 10 % diskless), every Ganeti job (drain, migration, undrain) taking
//! JOB_S seconds and every hook "rebooting" its node for REBOOT_S seconds (the agent does not
//! answer, then comes back with a new boot id), under a budget of BUDGET_% of the nodes
//! disrupted at once. PAIRS times, two campaigns on fresh clusters, one after the other, each
//! started on a coordinator that has already run its first round (and, after, opened its
//! watches), as an operator starts one on a running coordinator:
//!
//! - before: the benchmark runs the coordinator's rounds back to back (every 20 ms after the
//!   last), the best polling can do;
//! - after: the coordinator's own loop (`Coordinator::run`) at its default round interval
//!   (30 s), its rounds started by the events: a job that ends (RAPI's job wait), a watched
//!   agent that changes or comes back from its reboot.
//!
//! `BENCH_MODE=before` (or `after`) runs that mode only; `BENCH_ROUNDS=1` prints each round of
//! the coordinator's loop; `BENCH_GANETI=http` serves the simulated Ganeti over HTTP from a
//! thread of its own (by default it answers in process, on the coordinator's threads).
//!
//! Prints each campaign's wall time against the plan's lower bound, groups × (longest
//! migration + reboot), with a timeline of its groups, and checks every budget all along (after
//! every round, or every 20 ms): nodes disrupted at once, instances down, jobs submitted twice.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use nodecare_coordinator::store::Store;
use nodecare_core::campaign::{self, Record};
use nodecare_ganeti::Ganeti;
use nodecare_ganeti_sim::Simulation;
use nodecare_protocol::maintenance::NodeStep;
use nodecare_protocol::maintenance::{CampaignRequest, CampaignState};
use nodecare_tests::fake_agent::FakeAgents;
use nodecare_tests::harness::{Harness, node};

fn arg<T: std::str::FromStr>(args: &[String], index: usize, default: T) -> anyhow::Result<T> {
    match args.get(index) {
        None => Ok(default),
        Some(text) => text
            .parse()
            .map_err(|_| anyhow::anyhow!("argument {index}: {text:?} is not a number")),
    }
}

fn spec(nodes: usize, instances: usize) -> String {
    (0..instances)
        .map(|k| {
            let template = match k % 10 {
                0..=6 => "drbd",
                7 | 8 => "sharedfile",
                _ => "diskless",
            };
            format!("i{k}:{template}:{}", k % nodes + 1)
        })
        .collect::<Vec<_>>()
        .join(",")
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Rounds back to back, run by the benchmark.
    Before,
    /// The coordinator's loop, woken by the events.
    After,
}

#[derive(Debug, Clone, Copy)]
struct Params {
    nodes: usize,
    instances: usize,
    job: Duration,
    reboot: Duration,
    max_disrupted: usize,
}

/// What one campaign gave.
#[derive(Debug)]
struct Outcome {
    wall: Duration,
    lower_bound: Duration,
    rounds: u64,
    mean_round_ms: f64,
    groups: Vec<String>,
    timeline: Vec<String>,
}

/// The steps of the timeline: when every node of a group had reached them.
const STEPS: [(NodeStep, &str); 6] = [
    (NodeStep::MovePrimaries, "drained"),
    (NodeStep::Hook, "moved"),
    (NodeStep::WaitHealthy, "rebooting"),
    (NodeStep::Undrain, "healthy"),
    (NodeStep::MigrateBack, "undrained"),
    (NodeStep::Done, "done"),
];

/// How often the benchmark samples the campaign, the cluster and the agents.
const SAMPLE: Duration = Duration::from_millis(20);

/// What the benchmark follows while a campaign runs.
struct Tracker {
    started: Instant,
    /// The simulated Ganeti's clock (ms) when the campaign started.
    sim_started_ms: u64,
    seen: BTreeMap<String, BTreeSet<String>>,
    rebooting: Vec<(String, Instant)>,
    /// Node → when its hook was seen, when it came back.
    hooked: BTreeMap<String, Duration>,
    back: BTreeMap<String, Duration>,
    /// (group, step) → when every node of the group had reached it; group → when it started.
    reached: BTreeMap<(usize, NodeStep), Duration>,
    group_seen: BTreeMap<usize, Duration>,
    /// Each change of the campaign's `blocked_by`, with when it was seen.
    blocked: Vec<(Duration, Option<String>)>,
    max_drained: usize,
    down_seen: usize,
    /// The agents' count of repairs requested when they were last looked at.
    repairs_requested: u64,
}

impl Tracker {
    fn new(sim: &Simulation) -> Self {
        Self {
            started: Instant::now(),
            sim_started_ms: sim.now_ms(),
            seen: BTreeMap::new(),
            rebooting: Vec::new(),
            hooked: BTreeMap::new(),
            back: BTreeMap::new(),
            reached: BTreeMap::new(),
            group_seen: BTreeMap::new(),
            blocked: Vec::new(),
            max_drained: 0,
            down_seen: 0,
            repairs_requested: 0,
        }
    }

    /// Hooks "reboot" their node; budgets checked; with `read_campaign`, the campaign's
    /// progress noted (only a round changes it: reading it after each round, not every 20 ms,
    /// keeps the benchmark's own load off the coordinator's cores and its state database).
    /// Returns the campaign once final.
    fn sample(
        &mut self,
        sim: &Simulation,
        agents: &FakeAgents,
        store: &Store,
        nodes: usize,
        reboot: Duration,
        read_campaign: bool,
    ) -> anyhow::Result<Option<Record>> {
        let at = self.started.elapsed();
        // The agents are looked at only when one of them got a new repair request.
        let requested = agents.repairs_requested();
        let new_hooks = requested != self.repairs_requested;
        self.repairs_requested = requested;
        for i in (1..=nodes).filter(|_| new_hooks) {
            let name = node(i);
            let Some(agent) = agents.get(&name) else {
                continue;
            };
            let runs = self.seen.entry(name.clone()).or_default();
            for (id, arrived) in agent.repair_arrivals() {
                if runs.insert(id) {
                    // The node reboots from the hook's arrival, not from when this sample
                    // noticed it.
                    agent.set_down(true);
                    self.hooked.insert(
                        name.clone(),
                        arrived.saturating_duration_since(self.started),
                    );
                    self.rebooting.push((name.clone(), arrived + reboot));
                }
            }
        }
        let now = Instant::now();
        let seen = &self.seen;
        let back = &mut self.back;
        let started = self.started;
        self.rebooting.retain(|(name, due)| {
            if *due > now {
                return true;
            }
            if let Some(agent) = agents.get(name) {
                let n = seen.get(name).map_or(0, BTreeSet::len);
                agent.set_boot_id(Some(&format!("{name}-boot-{n}")));
                agent.set_down(false);
                back.insert(name.clone(), started.elapsed());
            }
            false
        });
        // A read that leaves the simulated Ganeti's job waits and queue alone.
        let (drained, down) = sim.peek(|c| {
            (
                c.nodes.values().filter(|n| n.drained || n.offline).count(),
                c.instances.values().filter(|i| !i.running).count(),
            )
        });
        self.max_drained = self.max_drained.max(drained);
        self.down_seen = self.down_seen.max(down);
        if !read_campaign {
            return Ok(None);
        }
        let campaign = store
            .campaigns()?
            .into_iter()
            .next()
            .context("campaign gone")?;
        if self.blocked.last().map(|(_, why)| why) != Some(&campaign.campaign.blocked_by) {
            self.blocked
                .push((at, campaign.campaign.blocked_by.clone()));
        }
        for (gi, group) in campaign.campaign.groups.iter().enumerate() {
            self.group_seen.entry(gi).or_insert(at);
            for (step, _) in STEPS {
                if group.nodes.iter().all(|n| n.step >= step) {
                    self.reached.entry((gi, step)).or_insert(at);
                }
            }
        }
        Ok(campaign.state().is_final().then_some(campaign))
    }

    /// How long to wait before the next sample: 20 ms, or less (at least 5 ms) when a rebooting
    /// node is due back sooner: a node comes back within 5 ms of the end of its reboot, not at
    /// the next sample.
    fn pause(&self) -> Duration {
        let now = Instant::now();
        self.rebooting
            .iter()
            .map(|(_, due)| due.saturating_duration_since(now))
            .min()
            .map_or(SAMPLE, |due| due.clamp(Duration::from_millis(5), SAMPLE))
    }

    /// One line per group: when (seconds after the campaign's start) every node of it had
    /// reached each step, its hooks had been sent and its nodes were back.
    fn timeline(&self, record: &Record, sim: &Simulation) -> Vec<String> {
        // Ganeti's last job ended this long before the campaign was seen done: what the
        // coordinator took to learn it, record it and say so.
        let (last_job, jobs, failed) = sim.peek(|c| {
            (
                c.jobs.values().filter_map(|j| j.end_ms).max(),
                c.jobs.len(),
                c.jobs
                    .values()
                    .filter(|j| {
                        j.status.is_final() && j.status != nodecare_ganeti::JobStatus::Success
                    })
                    .count(),
            )
        });
        let last_job = last_job.map(|end| end.saturating_sub(self.sim_started_ms) as f64 / 1000.0);
        let s =
            |d: Option<&Duration>| d.map_or("-".to_owned(), |d| format!("{:.2}", d.as_secs_f64()));
        record
            .campaign
            .groups
            .iter()
            .enumerate()
            .map(|(gi, group)| {
                let last = |of: &BTreeMap<String, Duration>| {
                    group
                        .nodes
                        .iter()
                        .filter_map(|n| of.get(&n.node))
                        .max()
                        .copied()
                };
                let mut line = format!("group {gi}: started {}", s(self.group_seen.get(&gi)));
                for (step, name) in STEPS {
                    line.push_str(&format!(", {name} {}", s(self.reached.get(&(gi, step)))));
                    if step == NodeStep::Hook {
                        line.push_str(&format!(", hooks seen {}", s(last(&self.hooked).as_ref())));
                    }
                    if step == NodeStep::WaitHealthy {
                        line.push_str(&format!(", agents back {}", s(last(&self.back).as_ref())));
                    }
                }
                line
            })
            .chain(last_job.map(|end| {
                format!("Ganeti's last job ended at {end:.2}; {jobs} jobs, {failed} of them not successful")
            }))
            .chain(self.blocked.iter().filter_map(|(at, why)| {
                why.as_ref()
                    .map(|why| format!("blocked at {:.2}: {why}", at.as_secs_f64()))
            }))
            .collect()
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let nodes: usize = arg(&args, 1, 200)?;
    let instances: usize = arg(&args, 2, 4000)?;
    let job_s: f64 = arg(&args, 3, 0.5)?;
    let reboot_s: f64 = arg(&args, 4, 20.0)?;
    let budget_percent: usize = arg(&args, 5, 50)?;
    let pairs: usize = arg(&args, 6, 3)?;
    if nodes < 4 {
        bail!("at least 4 nodes");
    }
    let params = Params {
        nodes,
        instances,
        job: Duration::from_secs_f64(job_s),
        reboot: Duration::from_secs_f64(reboot_s),
        max_disrupted: (nodes * budget_percent / 100).max(1),
    };
    println!(
        "cluster: {nodes} nodes, {instances} instances; job {job_s} s, reboot {reboot_s} s; \
         budget {} nodes disrupted; {pairs} pairs (before: rounds back to back; after: the \
         coordinator's loop, round interval 30 s, woken by job ends and watches)",
        params.max_disrupted
    );
    // BENCH_MODE=before or after: that mode only (profiles).
    let modes = match std::env::var("BENCH_MODE").as_deref() {
        Ok("before") => vec![Mode::Before],
        Ok("after") => vec![Mode::After],
        Ok(other) => bail!("BENCH_MODE={other}: before or after"),
        Err(_) => vec![Mode::Before, Mode::After],
    };
    let mut ratios = Vec::new();
    for pair in 1..=pairs {
        let mut walls = Vec::new();
        for &mode in &modes {
            let outcome = campaign_run(params, mode).await?;
            println!(
                "pair {pair} {:<6}: {:.1} s, lower bound {:.1} s = {:.1} %; {} rounds (mean {:.0} ms); groups {}",
                format!("{mode:?}").to_lowercase(),
                outcome.wall.as_secs_f64(),
                outcome.lower_bound.as_secs_f64(),
                100.0 * outcome.lower_bound.as_secs_f64() / outcome.wall.as_secs_f64(),
                outcome.rounds,
                outcome.mean_round_ms,
                outcome.groups.join("; "),
            );
            for line in &outcome.timeline {
                println!("    {line}");
            }
            walls.push(outcome.wall.as_secs_f64());
        }
        if let [before, after] = walls[..] {
            let ratio = after / before;
            ratios.push(ratio);
            println!("pair {pair}: after / before wall = {ratio:.3}");
        }
    }
    if !ratios.is_empty() {
        println!(
            "mean after / before wall over {} pairs: {:.3}",
            ratios.len(),
            ratios.iter().sum::<f64>() / ratios.len() as f64
        );
    }
    Ok(())
}

/// One campaign on a fresh cluster; fails when a budget or an outcome is not met.
async fn campaign_run(p: Params, mode: Mode) -> anyhow::Result<Outcome> {
    // The simulated Ganeti answers in the coordinator's process and threads, its work counted
    // in the rounds (`BENCH_GANETI=http`: over HTTP from a thread of its own, as the real RAPI
    // answers from processes of its own).
    let mut served: Option<ServedGaneti> = None;
    let h = Harness::with_ganeti(
        p.nodes,
        &spec(p.nodes, p.instances),
        |config| {
            config.max_disrupted_nodes = p.max_disrupted;
            config.min_healthy_nodes = 2;
            if mode == Mode::After {
                config.round_interval =
                    nodecare_coordinator::config::Config::default().round_interval;
            }
        },
        |sim| {
            if std::env::var("BENCH_GANETI").as_deref() != Ok("http") {
                return Ok(std::sync::Arc::new(sim.client()));
            }
            let ganeti = ServedGaneti::start(sim)?;
            let client = ganeti.client()?;
            served = Some(ganeti);
            Ok(client)
        },
    )
    .await?;
    h.sim.set_job_delay(p.job);
    h.sim.with_cluster(|c| {
        for n in c.nodes.values_mut() {
            n.memory_total_mib = 16_384;
        }
    });
    for i in 1..=p.nodes {
        if let Some(agent) = h.agents.get(&node(i)) {
            agent.set_boot_id(Some(&format!("boot-{i}-0")));
        }
    }

    // The plan's lower bound, from the cluster as the campaign first plans it.
    let ganeti: &dyn Ganeti = &h.sim.client();
    let cluster = campaign::roll_cluster(
        &ganeti.nodes().await?,
        &ganeti.instances().await?,
        &ganeti.groups().await?,
        &node(1),
    );
    let request = CampaignRequest::new("reboot");
    let plan = nodecare_roll::plan(
        &cluster,
        &campaign::roll_options(&request, &h.config.domain_source()).map_err(anyhow::Error::msg)?,
    )
    .context("planning")?;
    let per_group = p.job + p.reboot;
    let lower_bound = per_group * u32::try_from(plan.groups.len())?;

    let (before, _) = layout(&h);
    // Made when the campaign starts.
    let new_record = || {
        Record::new(
            uuid::Uuid::new_v4(),
            request.clone(),
            "bench",
            nodecare_protocol::now_ms(),
        )
    };
    let api = h.coordinator.api().clone();
    // BENCH_ROUNDS=1: each round of the coordinator's loop on standard error (when it started
    // after the campaign's creation, how long it took, the jobs it submitted).
    let show_rounds = std::env::var_os("BENCH_ROUNDS").is_some();
    let limit = lower_bound * 4 + Duration::from_secs(120);
    let mut rounds = 0u64;
    let mut round_time = Duration::ZERO;
    let Harness {
        sim,
        agents,
        coordinator: mut coord,
        state_dir: _state_dir,
        ..
    } = h;
    // The campaign is started on a coordinator already running, as an operator starts one: its
    // first round (which reads every agent over the network) and its watches come first.
    let (state, tracker) = match mode {
        Mode::Before => {
            coord.round().await?;
            api.store.save_campaign(&new_record())?;
            let mut tracker = Tracker::new(&sim);
            let state = loop {
                let t = Instant::now();
                coord.round().await?;
                round_time += t.elapsed();
                rounds += 1;
                if let Some(done) =
                    tracker.sample(&sim, &agents, &api.store, p.nodes, p.reboot, true)?
                {
                    break done;
                }
                check_limit(&tracker, limit, &api.store)?;
                tokio::time::sleep(tracker.pause()).await;
            };
            (state, tracker)
        }
        Mode::After => {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
            let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
            let running = tokio::spawn(coord.run(listener, async {
                let _stopped = stopped.await;
            }));
            let first_round = |board: &nodecare_coordinator::board::Board| {
                board.last_round.read().map_or(0, |last| last.number)
            };
            let warm_until = Instant::now() + Duration::from_secs(60);
            while first_round(&api.board) == 0 && Instant::now() < warm_until {
                tokio::time::sleep(SAMPLE).await;
            }
            // The watches it opened deliver their first reports.
            tokio::time::sleep(Duration::from_secs(1)).await;
            let mut last_round = first_round(&api.board);
            // As the API starts a campaign: stored, then the round loop woken.
            let record = new_record();
            let record_created = record.campaign.created_ms;
            api.store.save_campaign(&record)?;
            api.board.wake.notify_one();
            let mut tracker = Tracker::new(&sim);
            let done = loop {
                let mut round_ended = false;
                if let Ok(last) = api.board.last_round.read()
                    && last.number != last_round
                {
                    last_round = last.number;
                    round_ended = true;
                    rounds += 1;
                    round_time += Duration::from_millis(last.duration_ms);
                    if show_rounds {
                        eprintln!(
                            "round {} at {:.2} s: {} ms, {} jobs",
                            last.number,
                            last.started_ms.saturating_sub(record_created) as f64 / 1000.0,
                            last.duration_ms,
                            last.jobs_submitted
                        );
                    }
                }
                match tracker.sample(&sim, &agents, &api.store, p.nodes, p.reboot, round_ended) {
                    Ok(Some(done)) => break Ok(done),
                    Ok(None) => {}
                    Err(e) => break Err(e),
                }
                if let Err(e) = check_limit(&tracker, limit, &api.store) {
                    break Err(e);
                }
                // The next sample at the end of the next round (the campaign changes only
                // then: its end is seen when it is recorded, not up to a pause later), or after
                // the pause.
                tokio::select! {
                    () = api.board.round_done.notified() => {}
                    () = tokio::time::sleep(tracker.pause()) => {}
                }
            };
            let _sent = stop.send(());
            running
                .await?
                .map_err(|e| anyhow::anyhow!("coordinator: {e}"))?;
            (done?, tracker)
        }
    };
    let wall = tracker.started.elapsed();
    let after = sim.with_cluster(|c| {
        c.instances
            .values()
            .map(|i| (i.name.clone(), i.pnode.clone()))
            .collect::<BTreeMap<_, _>>()
    });
    let hooks: usize = tracker.seen.values().map(BTreeSet::len).sum();
    let duplicates = sim.duplicate_intents();
    let groups = state
        .campaign
        .groups
        .iter()
        .filter_map(|g| {
            let (start, end) = (g.started_ms?, g.finished_ms?);
            Some(format!(
                "{} nodes {:.1} s from {:.1} s",
                g.nodes.len(),
                end.saturating_sub(start) as f64 / 1000.0,
                start.saturating_sub(state.campaign.created_ms) as f64 / 1000.0
            ))
        })
        .collect();
    println!(
        "    budgets: at most {} nodes drained (budget {}); at most {} instances down; hooks \
         {hooks} for {} nodes; {} jobs submitted twice; instances back on their primaries: {}",
        tracker.max_drained,
        p.max_disrupted,
        tracker.down_seen,
        p.nodes,
        duplicates.len(),
        after == before
    );
    if state.campaign.state != CampaignState::Completed
        || tracker.max_drained > p.max_disrupted
        || tracker.down_seen > 0
        || hooks != p.nodes
        || !duplicates.is_empty()
        || after != before
    {
        bail!("a budget or an outcome was not met ({mode:?})");
    }
    Ok(Outcome {
        wall,
        lower_bound,
        rounds,
        mean_round_ms: round_time.as_secs_f64() * 1000.0 / rounds.max(1) as f64,
        groups,
        timeline: tracker.timeline(&state, &sim),
    })
}

/// The simulated Ganeti served over plain HTTP on loopback by a thread and runtime of its own;
/// stopped when dropped.
struct ServedGaneti {
    url: String,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl ServedGaneti {
    fn start(sim: &Simulation) -> anyhow::Result<Self> {
        let sim = sim.clone();
        let (url_tx, url_rx) = std::sync::mpsc::channel::<std::io::Result<String>>();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("simulated-ganeti".into())
            .spawn(move || {
                let runtime = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(runtime) => runtime,
                    Err(e) => {
                        let _sent = url_tx.send(Err(e));
                        return;
                    }
                };
                runtime.block_on(async move {
                    let loopback = std::net::SocketAddr::from(([127, 0, 0, 1], 0));
                    match sim.serve(loopback, None).await {
                        Ok(server) => {
                            let _sent = url_tx.send(Ok(server.url.clone()));
                            let _stopped = stopped.await;
                            drop(server);
                        }
                        Err(e) => {
                            let _sent = url_tx.send(Err(e));
                        }
                    }
                });
            })?;
        let url = url_rx.recv().context("the simulated Ganeti's thread")??;
        Ok(Self {
            url,
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    fn client(&self) -> anyhow::Result<std::sync::Arc<dyn Ganeti>> {
        let config = nodecare_ganeti::rapi::config::RapiConfig::new(
            &self.url,
            nodecare_ganeti::rapi::config::ServerTrust::PlainHttp,
        );
        Ok(std::sync::Arc::new(
            nodecare_ganeti::rapi::client::RapiClient::new(config)
                .with_context(|| format!("a RAPI client of {}", self.url))?,
        ))
    }
}

impl Drop for ServedGaneti {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _sent = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _joined = thread.join();
        }
    }
}

fn check_limit(tracker: &Tracker, limit: Duration, store: &Store) -> anyhow::Result<()> {
    if tracker.started.elapsed() > limit {
        let campaign = store
            .campaigns()?
            .into_iter()
            .next()
            .context("campaign gone")?;
        bail!(
            "campaign not finished after {:?}: {:#?}",
            tracker.started.elapsed(),
            campaign.campaign
        );
    }
    Ok(())
}

fn layout(h: &Harness) -> (BTreeMap<String, String>, bool) {
    h.sim.with_cluster(|c| {
        (
            c.instances
                .values()
                .map(|i| (i.name.clone(), i.pnode.clone()))
                .collect(),
            c.instances.values().all(|i| i.running),
        )
    })
}
