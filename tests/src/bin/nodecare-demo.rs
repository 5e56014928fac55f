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
use nodecare_coordinator::incident::{Incident, RepairStatus};
use nodecare_ganeti::Ganeti;
use nodecare_ganeti_sim::Simulation;
use nodecare_ganeti_sim::model::SimConfig;
use nodecare_protocol::HmacKey;
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

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let args = <Args as clap::Parser>::parse();
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
        ..simulated_cluster_config(node(1), work.path().join("coordinator"), overrides)
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
    tokio::time::sleep(Duration::from_millis(1500)).await;
    coordinator.round().await?;
    log.say("round 1: every agent reports Ok, nothing to do");

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
    tokio::time::sleep(Duration::from_millis(1500)).await;

    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        coordinator.round().await?;
        let incidents = coordinator.api().store.incidents()?;
        printed.show(&log, &incidents);
        if incidents.len() == 2
            && incidents
                .iter()
                .all(|i| i.repair_status == RepairStatus::Completed)
        {
            break;
        }
        if Instant::now() > deadline {
            bail!("the demo did not complete in time: {incidents:#?}");
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let (drained, tags, placement) = sim.with_cluster(|c| {
        let n2 = &c.nodes[&node(2)];
        let placement: Vec<String> = c
            .instances
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
            .collect();
        (n2.drained, n2.tags.clone(), placement)
    });
    log.say(format!("node2 drained: {drained}, tags: {tags:?}"));
    for line in placement {
        log.say(format!("  {line}"));
    }

    let status: serde_json::Value = reqwest::get(format!("http://{api_addr}/1/status"))
        .await?
        .json()
        .await?;
    if let Some(list) = status.as_array() {
        for entry in list {
            log.say(format!(
                "GET /1/status: {} {} {} jobs={} tag={}",
                entry["node"].as_str().unwrap_or("?"),
                entry["action"].as_str().unwrap_or("?"),
                entry["repair-status"].as_str().unwrap_or("?"),
                entry["jobs"],
                entry["tag"].as_str().unwrap_or("?"),
            ));
        }
    }

    log.say("operator: disk replaced on node2, removes the repairready tag (acknowledges)");
    sim.with_cluster(|c| {
        if let Some(n) = c.nodes.get_mut(&node(2)) {
            n.tags.retain(|t| !t.starts_with("maintd:repairready:"));
        }
    });
    std::fs::write(&agents[1].1, r#"{"status":"Ok"}"#)?;
    std::fs::write(&agents[2].1, r#"{"status":"Ok"}"#)?;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    for _ in 0..5 {
        coordinator.round().await?;
        let incidents = coordinator.api().store.incidents()?;
        printed.show(&log, &incidents);
        if incidents.iter().all(|i| i.node != node(2)) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let left = coordinator.api().store.incidents()?;
    log.say(format!(
        "node2's incident is forgotten; {} incident(s) left (node3's repairready tag awaits acknowledgement)",
        left.len()
    ));
    let duplicates = sim.duplicate_intents();
    log.say(format!(
        "{} Ganeti jobs submitted, none twice{}",
        sim.submissions().iter().filter(|s| !s.internal).count(),
        if duplicates.is_empty() {
            String::new()
        } else {
            format!(" -- DUPLICATES: {duplicates:?}")
        }
    ));
    if args.keep_running {
        log.say(format!(
            "still running: open http://{api_addr}/ui/ (actions: http://{api_addr}/ui/admin/, user admin, password demo); Ctrl-C stops"
        ));
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        loop {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => break,
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
    log.say("demo finished");
    if !duplicates.is_empty() || left.iter().any(|i| i.node == node(2)) {
        bail!("the demo ended in an unexpected state");
    }
    Ok(())
}

fn nix_is_not_root() -> bool {
    std::fs::metadata("/proc/self")
        .map(|m| std::os::unix::fs::MetadataExt::uid(&m) != 0)
        .unwrap_or(true)
}
