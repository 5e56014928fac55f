//! `scripts/demo`: three real nodecare agents (in-process, with diagnose and repair scripts in
//! temporary whitelist directories) and the coordinator against a simulated Ganeti cluster.
//! A disk on node2 starts failing: the incident is noted, node2 is drained and emptied, and
//! tagged `maintd:repairready:<uuid>`; node3 asks for a live repair, which its agent runs. The
//! operator then acknowledges by removing the tag, the disk is replaced, and the incident is
//! forgotten.

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use nodecare_coordinator::config::Config;
use nodecare_coordinator::daemon::Coordinator;
use nodecare_core::incident::{Incident, RepairStatus};
use nodecare_ganeti::Ganeti;
use nodecare_ganeti_sim::Simulation;
use nodecare_ganeti_sim::model::SimConfig;
use nodecare_protocol::HmacKey;
use nodecare_protocol::status::{AgentStatus, IncidentSummary};
use nodecare_protocol::verdict::DiagnoseStatus;
use nodecare_tests::harness::simulated_cluster_config;
use uuid::Uuid;

const DOMAIN: &str = "demo.test";
const KEY: &[u8] = b"nodecare-demo-cluster-hmac-key\n";

fn node(i: usize) -> String {
    format!("node{i}.{DOMAIN}")
}

fn write_script(path: &Path, body: &str) -> anyhow::Result<()> {
    std::fs::write(path, format!("#!/bin/sh\n{body}\n"))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755))?;
    Ok(())
}

struct Log {
    start: Instant,
}

impl Log {
    fn say(&self, text: impl AsRef<str>) {
        println!(
            "[{:6.2}s] {}",
            self.start.elapsed().as_secs_f64(),
            text.as_ref()
        );
    }
}

struct Printed(BTreeMap<Uuid, usize>);

impl Printed {
    /// Prints the history entries not shown yet.
    fn show(&mut self, log: &Log, incidents: &[Incident]) {
        let present: Vec<Uuid> = incidents.iter().map(|i| i.uuid).collect();
        let gone: Vec<Uuid> = self
            .0
            .keys()
            .filter(|u| !present.contains(u))
            .copied()
            .collect();
        for uuid in gone {
            self.0.remove(&uuid);
            log.say(format!(
                "incident {} acknowledged and no longer observed: forgotten",
                &uuid.to_string()[..8]
            ));
        }
        for incident in incidents {
            let shown = self.0.entry(incident.uuid).or_insert(0);
            for entry in incident.history.iter().skip(*shown) {
                let short = &incident.uuid.to_string()[..8];
                log.say(format!(
                    "incident {short} on {:<15} [{:<9}] {}",
                    incident.node,
                    entry.status.as_str(),
                    entry.event
                ));
            }
            *shown = incident.history.len();
        }
    }
}

/// `scripts/demo`: nodecare against a simulated 3-node Ganeti cluster.
#[derive(Debug, clap::Parser)]
struct Args {
    /// After the demo, keep the cluster and the coordinator running (rounds every second) until
    /// interrupted, so that its web status page can be looked at.
    #[arg(long)]
    keep_running: bool,
    /// Address of the coordinator's HTTP API and web page (default: a free loopback port, or
    /// 127.0.0.1:1816 with --keep-running).
    #[arg(long)]
    listen: Option<std::net::SocketAddr>,
}

/// Runs the demo; on failure prints what was expected and what was found (no backtrace) and
/// exits 1.
fn main() -> std::process::ExitCode {
    let args = <Args as clap::Parser>::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("demo failed: cannot start the async runtime: {error}");
            return std::process::ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(args)) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            match error.downcast_ref::<Unexpected>() {
                Some(unexpected) => eprintln!("{unexpected}"),
                None => eprintln!("demo failed: {error:#}"),
            }
            std::process::ExitCode::FAILURE
        }
    }
}

async fn run(args: Args) -> anyhow::Result<()> {
    nodecare_coordinator::install_crypto_provider();
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new(
            std::env::var("NODECARE_LOG").unwrap_or_else(|_| "warn".into()),
        ))
        .with_writer(std::io::stderr)
        .init();
    if nix_is_not_root() {
        bail!(
            "the demo runs real agents, whose script whitelists must be owned by root: run it as root"
        );
    }
    let log = Log {
        start: Instant::now(),
    };
    let work = tempfile::tempdir().context("temporary directory")?;
    let key_path = work.path().join("hmac.key");
    std::fs::write(&key_path, KEY)?;
    // Secrets are refused when others can read them.
    std::fs::set_permissions(&key_path, std::fs::Permissions::from_mode(0o600))?;

    // Ganeti: 3 nodes; node2 hosts a DRBD, a diskless and a shared-file instance.
    let sim = Simulation::new(
        SimConfig::from_spec(
            3,
            "web:drbd:2,cache:diskless:2,files:sharedfile:2,db:drbd:3",
            DOMAIN,
        )
        .map_err(anyhow::Error::msg)?,
    )
    .map_err(anyhow::Error::msg)?;
    sim.set_job_delay(Duration::from_millis(400));
    log.say("simulated Ganeti cluster: node1 (master), node2 (web, cache, files), node3 (db)");

    // Three real agents, each with a whitelisted diagnose script reading a state file.
    let mut agents = Vec::new();
    let mut overrides = BTreeMap::new();
    for i in 1..=3 {
        let dir = work.path().join(format!("node{i}"));
        let diagnose_dir = dir.join("node-diagnose-commands");
        let repair_dir = dir.join("node-repair-commands");
        std::fs::create_dir_all(&diagnose_dir)?;
        std::fs::create_dir_all(&repair_dir)?;
        for d in [&dir, &diagnose_dir, &repair_dir] {
            std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o755))?;
        }
        let verdict_file = dir.join("verdict.json");
        std::fs::write(&verdict_file, r#"{"status":"Ok"}"#)?;
        write_script(
            &diagnose_dir.join("hardware-check"),
            &format!("cat {}", verdict_file.display()),
        )?;
        write_script(
            &repair_dir.join("reset-fan"),
            "echo fan controller reset; exit 0",
        )?;
        let config = nodecare_agent::config::Config {
            node_name: Some(node(i)),
            hmac_key: key_path.clone(),
            state_dir: dir.join("state"),
            diagnose_dir,
            repair_dir,
            diagnose_interval_secs: 1,
            listen: "127.0.0.1:0".parse()?,
            ..nodecare_agent::config::Config::default()
        };
        // Storage health: the demo's nodes show their DRBD disks connected and up to date (this
        // machine need not run DRBD).
        let proc_root = dir.join("proc");
        std::fs::create_dir_all(&proc_root)?;
        for file in ["stat", "diskstats", "uptime"] {
            std::os::unix::fs::symlink(Path::new("/proc").join(file), proc_root.join(file))?;
        }
        std::fs::write(
            proc_root.join("drbd"),
            "version: 8.4.11 (api:1/proto:86-101)\n 0: cs:Connected ro:Primary/Secondary ds:UpToDate/UpToDate C r-----\n",
        )?;
        let builtin = nodecare_agent::BuiltinConfig {
            proc_root,
            ..nodecare_agent::BuiltinConfig::default()
        };
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let agent = nodecare_agent::serve_builtin(config, builtin, listener)
            .await
            .map_err(|e| anyhow::anyhow!("agent {i}: {e}"))?;
        overrides.insert(node(i), format!("http://{}", agent.local_addr()));
        agents.push((agent, verdict_file));
    }
    log.say(
        "started 3 nodecare agents (diagnose script `hardware-check`, repair command `reset-fan`)",
    );

    // The users file of writes (cancel, the web page's actions): `admin`, password `demo`.
    let users_path = work.path().join("users");
    nodecare_tests::harness::write_secret(&users_path, "admin demo write\n")?;
    let config = Config {
        hmac_key: key_path.clone(),
        users: users_path,
        round_interval: 1.0,
        repair_poll: 2.0,
        // Three nodes: the evacuation of node2 and the live repair of node3 may run together,
        // leaving node1 to carry the instances.
        max_disrupted_nodes: 2,
        min_healthy_nodes: 1,
        ..simulated_cluster_config(node(1), work.path().join("coordinator"), overrides.clone())
    };
    let ganeti: Arc<dyn Ganeti> = Arc::new(sim.client());
    let key = HmacKey::from_file(&key_path)?;
    let mut coordinator = Coordinator::new(&config, node(1), ganeti, key)?;
    coordinator.check_master().await?;
    let listen = args.listen.unwrap_or_else(|| {
        if args.keep_running {
            std::net::SocketAddr::from(([127, 0, 0, 1], 1816))
        } else {
            std::net::SocketAddr::from(([127, 0, 0, 1], 0))
        }
    });
    let api_listener = tokio::net::TcpListener::bind(listen)
        .await
        .with_context(|| format!("cannot listen on {listen} (choose another with --listen)"))?;
    let api_addr = api_listener.local_addr()?;
    let app = nodecare_coordinator::http::router(coordinator.api().clone());
    let api = tokio::spawn(async move { axum::serve(api_listener, app).await });
    log.say(format!(
        "coordinator running on the master node1; status API on http://{api_addr}/1/status, web page on http://{api_addr}/ui/"
    ));

    let mut printed = Printed(BTreeMap::new());
    let mut demo = Demo {
        coordinator: &mut coordinator,
        sim: &sim,
        log: &log,
    };

    // Round 1: wait until every agent's first signed report is in (a loaded machine may take a
    // few seconds to run the first diagnose scripts).
    demo.rounds_until(
        "every agent's verified report says Ok and there is no incident",
        Duration::from_secs(60),
        &mut printed,
        |d| {
            let agents = d.agents();
            let ok = (1..=3).all(|i| {
                agents
                    .get(&node(i))
                    .is_some_and(|a| a.verdict == Some(DiagnoseStatus::Ok))
            });
            let incidents = d.incidents()?;
            Ok(check(
                ok && incidents.is_empty(),
                format!(
                    "agents: {}; {} incident(s)",
                    describe_agents(&agents),
                    incidents.len()
                ),
            ))
        },
    )
    .await?;
    log.say("every agent reports Ok: nothing to do");

    std::fs::write(
        &agents[1].1,
        r#"{"status":"evacuate","details":{"disk":"/dev/sdb","smart":"reallocated sectors rising"}}"#,
    )?;
    std::fs::write(
        &agents[2].1,
        r#"{"status":"live-repair","command":"reset-fan","details":{"fan":2,"rpm":0}}"#,
    )?;
    log.say(
        "node2's disk starts failing (verdict: evacuate); node3's fan stops (verdict: live-repair)",
    );
    demo.rounds_until(
        "an incident on node2 and one on node3, both completed",
        Duration::from_secs(120),
        &mut printed,
        |d| {
            let incidents = d.incidents()?;
            let done = [2, 3].iter().all(|i| {
                incidents
                    .iter()
                    .any(|x| x.node == node(*i) && x.repair_status == RepairStatus::Completed)
            });
            Ok(check(
                done && incidents.len() == 2,
                describe_incidents(&incidents),
            ))
        },
    )
    .await?;

    // node2: emptied, offline, tagged for the technician.
    let incidents = demo.incidents()?;
    let node2_tag = incident_of(&incidents, 2)?.tag.clone();
    let node3_tag = incident_of(&incidents, 3)?.tag.clone();
    let (offline, tags, left, placement) = sim.with_cluster(|c| {
        let n2 = c.nodes.get(&node(2));
        let left: Vec<String> = c
            .instances
            .values()
            .filter(|i| i.pnode == node(2) || i.snodes.contains(&node(2)))
            .map(|i| i.name.clone())
            .collect();
        (
            n2.is_some_and(|n| n.offline),
            n2.map(|n| n.tags.clone()).unwrap_or_default(),
            left,
            placement_of(c),
        )
    });
    expect(
        offline && left.is_empty() && tags.contains(&node2_tag),
        "node2 offline, no instance on it, tagged with its incident's repairready tag",
        format!("offline: {offline}, instances on it: {left:?}, tags: {tags:?}"),
    )?;
    log.say(format!(
        "node2 is offline with no instance left, tagged {node2_tag}; instances now:"
    ));
    for line in placement {
        log.say(format!("  {line}"));
    }
    let node3_tags = sim.with_cluster(|c| {
        c.nodes
            .get(&node(3))
            .map(|n| (n.tags.clone(), n.drained || n.offline))
    });
    expect(
        node3_tags
            .as_ref()
            .is_some_and(|(tags, out)| tags.contains(&node3_tag) && !out),
        "node3 in service (its fan was repaired live), tagged with its incident's repairready tag",
        format!("{node3_tags:?}"),
    )?;
    log.say(format!(
        "node3 stayed in service: its agent ran `reset-fan`; tagged {node3_tag}"
    ));

    // The same, as maintd's /1/status shows it over HTTP.
    let status: Vec<IncidentSummary> = reqwest::get(format!("http://{api_addr}/1/status"))
        .await?
        .error_for_status()?
        .json()
        .await
        .context("GET /1/status")?;
    for entry in &status {
        log.say(format!(
            "GET /1/status: {} {} {} jobs={:?} tag={}",
            entry.node, entry.action, entry.repair_status, entry.jobs, entry.tag
        ));
    }
    expect(
        status.len() == 2
            && status.iter().all(|e| e.repair_status == "completed")
            && status
                .iter()
                .any(|e| e.node == node(2) && e.action == "evacuate")
            && status
                .iter()
                .any(|e| e.node == node(3) && e.action == "live-repair"),
        "/1/status lists node2's evacuation and node3's live repair, both completed",
        format!("{status:?}"),
    )?;

    log.say("operator: disk replaced on node2, removes its repairready tag (acknowledges)");
    sim.with_cluster(|c| {
        if let Some(n) = c.nodes.get_mut(&node(2)) {
            n.tags.retain(|t| t != &node2_tag);
        }
    });
    std::fs::write(&agents[1].1, r#"{"status":"Ok"}"#)?;
    std::fs::write(&agents[2].1, r#"{"status":"Ok"}"#)?;
    demo.rounds_until(
        "node2's incident forgotten (acknowledged on an offline node), node3's kept",
        Duration::from_secs(30),
        &mut printed,
        |d| {
            let incidents = d.incidents()?;
            Ok(check(
                incidents.len() == 1 && incidents[0].node == node(3),
                describe_incidents(&incidents),
            ))
        },
    )
    .await?;
    log.say(
        "node2's incident is forgotten: acknowledged, and an offline node reports nothing; node2 stays offline until the operator sets it online",
    );

    // The agent keeps running its scripts on the offline node: wait until it says Ok itself.
    let node2_url = overrides.get(&node(2)).cloned().unwrap_or_default();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let verdict = agent_verdict(&node2_url).await;
        if matches!(verdict, Ok(DiagnoseStatus::Ok)) {
            break;
        }
        if Instant::now() > deadline {
            return Err(Unexpected {
                expected: "node2's agent reports Ok after the disk is replaced (within 30 s)"
                    .into(),
                found: format!("{verdict:?}"),
            }
            .into());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    log.say("node2's agent, still running on the offline node, now reports Ok");
    log.say("operator: sets node2 online again (gnt-node modify -O no node2)");
    let onlined_ms = nodecare_protocol::now_ms();
    sim.with_cluster(|c| {
        if let Some(n) = c.nodes.get_mut(&node(2)) {
            n.offline = false;
            n.drained = false;
        }
    });
    demo.rounds_until(
        "node2 back online and read: its agent reports Ok, no new incident",
        Duration::from_secs(30),
        &mut printed,
        |d| {
            let agents = d.agents();
            // Read after it came back, not a reading from before it went offline.
            let ok = agents.get(&node(2)).is_some_and(|a| {
                a.verdict == Some(DiagnoseStatus::Ok)
                    && a.last_ok_ms.is_some_and(|at| at >= onlined_ms)
            });
            let incidents = d.incidents()?;
            Ok(check(
                ok && incidents.iter().all(|i| i.node != node(2)),
                format!(
                    "agents: {}; {}",
                    describe_agents(&agents),
                    describe_incidents(&incidents)
                ),
            ))
        },
    )
    .await?;
    log.say("node2 is back in service and reports Ok: no new incident");

    let incidents = demo.incidents()?;
    let node3 = incident_of(&incidents, 3)?;
    expect(
        node3.repair_status == RepairStatus::Completed && !node3.acknowledged,
        "node3's incident completed, awaiting the removal of its tag",
        describe_incidents(&incidents),
    )?;
    log.say(format!(
        "node3's incident awaits acknowledgement: removing {node3_tag} forgets it"
    ));
    let duplicates = sim.duplicate_intents();
    let jobs = sim.submissions().iter().filter(|s| !s.internal).count();
    expect(
        duplicates.is_empty(),
        "no Ganeti job submitted twice",
        format!("{duplicates:?}"),
    )?;
    log.say(format!("{jobs} Ganeti jobs submitted, none twice"));
    if args.keep_running {
        log.say(format!(
            "still running: open http://{api_addr}/ui/ (actions: http://{api_addr}/ui/admin/, user admin, password demo); Ctrl-C stops"
        ));
        let mut terminate =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        loop {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => break,
                _ = terminate.recv() => break,
                _ = tick.tick() => {
                    if let Err(error) = coordinator.round().await {
                        log.say(format!("round failed: {error}"));
                    }
                    printed.show(&log, &coordinator.api().store.incidents()?);
                }
            }
        }
    }
    api.abort();
    for (agent, _) in agents {
        agent.shutdown().await;
    }
    log.say("demo finished: every step as expected");
    Ok(())
}

/// What the demo expected at a step and what it found instead.
#[derive(Debug)]
struct Unexpected {
    expected: String,
    found: String,
}

impl std::fmt::Display for Unexpected {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the demo ended in an unexpected state\n  expected: {}\n  found:    {}",
            self.expected, self.found
        )
    }
}

impl std::error::Error for Unexpected {}

/// `Ok` when `holds`, else what was found.
fn check(holds: bool, found: String) -> Result<(), String> {
    if holds { Ok(()) } else { Err(found) }
}

fn expect(holds: bool, expected: &str, found: impl Into<String>) -> Result<(), Unexpected> {
    if holds {
        Ok(())
    } else {
        Err(Unexpected {
            expected: expected.to_owned(),
            found: found.into(),
        })
    }
}

struct Demo<'a> {
    coordinator: &'a mut Coordinator,
    sim: &'a Simulation,
    log: &'a Log,
}

impl Demo<'_> {
    fn incidents(&self) -> anyhow::Result<Vec<Incident>> {
        Ok(self.coordinator.api().store.incidents()?)
    }

    fn agents(&self) -> BTreeMap<String, AgentStatus> {
        self.coordinator
            .api()
            .board
            .agents
            .read()
            .map(|a| a.clone())
            .unwrap_or_default()
    }

    /// Runs rounds (every 500 ms) until `done` holds, printing the incidents' history as it
    /// grows; past `within`, fails with what was expected and what the last round found.
    async fn rounds_until(
        &mut self,
        expected: &str,
        within: Duration,
        printed: &mut Printed,
        done: impl Fn(&Self) -> anyhow::Result<Result<(), String>>,
    ) -> anyhow::Result<()> {
        let deadline = Instant::now() + within;
        loop {
            self.coordinator.round().await?;
            printed.show(self.log, &self.incidents()?);
            let found = match done(self)? {
                Ok(()) => return Ok(()),
                Err(found) => found,
            };
            if Instant::now() > deadline {
                let _ = self.sim;
                return Err(Unexpected {
                    expected: format!("{expected} (within {} s)", within.as_secs()),
                    found,
                }
                .into());
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
}

/// The verdict an agent serves now, read from its unsigned diagnose report.
async fn agent_verdict(base: &str) -> anyhow::Result<DiagnoseStatus> {
    let report: nodecare_protocol::Report = reqwest::get(format!("{base}/1/report/node/diagnose"))
        .await?
        .error_for_status()?
        .json()
        .await?;
    let verdict: nodecare_protocol::NodeVerdict = serde_json::from_value(report.data)?;
    Ok(verdict.status)
}

fn incident_of(incidents: &[Incident], i: usize) -> Result<&Incident, Unexpected> {
    incidents
        .iter()
        .find(|x| x.node == node(i))
        .ok_or_else(|| Unexpected {
            expected: format!("an incident on {}", node(i)),
            found: describe_incidents(incidents),
        })
}

fn describe_incidents(incidents: &[Incident]) -> String {
    if incidents.is_empty() {
        return "no incident".into();
    }
    incidents
        .iter()
        .map(|i| {
            format!(
                "{} {} {}{}{}",
                i.node,
                i.action.as_str(),
                i.repair_status.as_str(),
                if i.acknowledged { " acknowledged" } else { "" },
                i.blocked_by
                    .as_deref()
                    .or(i.failure.as_deref())
                    .map(|why| format!(" ({why})"))
                    .unwrap_or_default()
            )
        })
        .collect::<Vec<_>>()
        .join("; ")
}

fn describe_agents(agents: &BTreeMap<String, AgentStatus>) -> String {
    if agents.is_empty() {
        return "none read yet".into();
    }
    agents
        .values()
        .map(|a| {
            format!(
                "{} {}",
                a.node,
                a.verdict
                    .map(|v| v.as_str().to_owned())
                    .or_else(|| a.error.clone())
                    .unwrap_or_else(|| "not read".into())
            )
        })
        .collect::<Vec<_>>()
        .join(", ")
}

fn placement_of(c: &nodecare_ganeti_sim::model::SimCluster) -> Vec<String> {
    c.instances
        .values()
        .map(|i| {
            format!(
                "{} on {}{}",
                i.name,
                i.pnode,
                i.snodes
                    .first()
                    .map(|s| format!(" (secondary {s})"))
                    .unwrap_or_default()
            )
        })
        .collect()
}

fn nix_is_not_root() -> bool {
    std::fs::metadata("/proc/self")
        .map(|m| std::os::unix::fs::MetadataExt::uid(&m) != 0)
        .unwrap_or(true)
}
