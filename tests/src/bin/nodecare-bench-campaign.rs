//! Benchmark of a rolling maintenance campaign on the simulated cluster.
//!
//! `nodecare-bench-campaign [NODES] [INSTANCES] [JOB_S] [REBOOT_S] [BUDGET_%]` (defaults 200
//! 4000 0.5 20 50):
//! NODES nodes (16 GiB each) with fake agents, INSTANCES instances spread over them (70 %
//! DRBD, 20 % sharedfile, 10 % diskless), every Ganeti job (drain, migration, undrain) taking
//! JOB_S seconds and every hook "rebooting" its node for REBOOT_S seconds (the agent does not
//! answer, then comes back with a new boot id). The coordinator runs rounds back to back under
//! a budget of BUDGET_% of the nodes disrupted at once.
//!
//! Prints the campaign's wall time against the plan's lower bound, groups × (longest
//! migration + reboot), and checks every budget at every round: nodes disrupted at once,
//! instances down, jobs submitted twice.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use nodecare_coordinator::campaign::{self, Record};
use nodecare_ganeti::Ganeti;
use nodecare_protocol::maintenance::{CampaignRequest, CampaignState};
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

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let nodes: usize = arg(&args, 1, 200)?;
    let instances: usize = arg(&args, 2, 4000)?;
    let job_s: f64 = arg(&args, 3, 0.5)?;
    let reboot_s: f64 = arg(&args, 4, 20.0)?;
    let budget_percent: usize = arg(&args, 5, 50)?;
    if nodes < 4 {
        bail!("at least 4 nodes");
    }
    let max_disrupted = (nodes * budget_percent / 100).max(1);
    let mut h = Harness::new(nodes, &spec(nodes, instances), |config| {
        config.max_disrupted_nodes = max_disrupted;
        config.min_healthy_nodes = 2;
    })
    .await?;
    let job = Duration::from_secs_f64(job_s);
    let reboot = Duration::from_secs_f64(reboot_s);
    h.sim.set_job_delay(job);
    h.sim.with_cluster(|c| {
        for n in c.nodes.values_mut() {
            n.memory_total_mib = 16_384;
        }
    });
    for i in 1..=nodes {
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
    let planned_groups = plan.groups.len();
    let per_group = job + reboot;
    let lower_bound = per_group * u32::try_from(planned_groups)?;
    println!(
        "cluster: {nodes} nodes, {instances} instances; job {job_s} s, reboot {reboot_s} s; \
         budget {max_disrupted} nodes disrupted"
    );
    println!(
        "plan: {planned_groups} groups ({}); lower bound {:.1} s",
        plan.groups
            .iter()
            .map(|g| g.nodes.len().to_string())
            .collect::<Vec<_>>()
            .join("+"),
        lower_bound.as_secs_f64()
    );

    let (before, _) = layout(&h);
    let record = Record::new(
        uuid::Uuid::new_v4(),
        request,
        "bench",
        nodecare_protocol::now_ms(),
    );
    h.coordinator.api().store.save_campaign(&record)?;
    let started = Instant::now();
    let mut seen: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut rebooting: Vec<(String, Instant)> = Vec::new();
    let mut rounds = 0u64;
    let mut round_time = Duration::ZERO;
    let mut max_drained = 0usize;
    let mut down_seen = 0usize;
    let limit = lower_bound * 4 + Duration::from_secs(120);
    let state = loop {
        let t = Instant::now();
        h.coordinator.round().await?;
        round_time += t.elapsed();
        rounds += 1;
        // Hooks: the node goes away for the reboot, then comes back with a new boot id.
        for i in 1..=nodes {
            let name = node(i);
            let Some(agent) = h.agents.get(&name) else {
                continue;
            };
            let runs = seen.entry(name.clone()).or_default();
            for id in agent.repairs() {
                if runs.insert(id) {
                    agent.set_down(true);
                    rebooting.push((name.clone(), Instant::now() + reboot));
                }
            }
        }
        let now = Instant::now();
        rebooting.retain(|(name, at)| {
            if *at > now {
                return true;
            }
            if let Some(agent) = h.agents.get(name) {
                let n = seen.get(name).map_or(0, BTreeSet::len);
                agent.set_boot_id(Some(&format!("{name}-boot-{n}")));
                agent.set_down(false);
            }
            false
        });
        let (drained, down) = h.sim.with_cluster(|c| {
            (
                c.nodes.values().filter(|n| n.drained || n.offline).count(),
                c.instances.values().filter(|i| !i.running).count(),
            )
        });
        max_drained = max_drained.max(drained);
        down_seen = down_seen.max(down);
        let campaign = h
            .coordinator
            .api()
            .store
            .campaigns()?
            .into_iter()
            .next()
            .context("campaign gone")?;
        if campaign.state().is_final() {
            break campaign;
        }
        if started.elapsed() > limit {
            bail!(
                "campaign not finished after {:?}: {:#?}",
                started.elapsed(),
                campaign.campaign
            );
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let wall = started.elapsed();
    let (after, _) = layout(&h);
    let hooks: usize = seen.values().map(BTreeSet::len).sum();
    let duplicates = h.sim.duplicate_intents();
    let groups_run = state.campaign.groups.len();
    println!(
        "campaign: {} in {:.1} s, {groups_run} groups, {rounds} rounds (mean {:.0} ms)",
        state.campaign.state,
        wall.as_secs_f64(),
        round_time.as_secs_f64() * 1000.0 / rounds.max(1) as f64,
    );
    for g in &state.campaign.groups {
        let (Some(start), Some(end)) = (g.started_ms, g.finished_ms) else {
            continue;
        };
        println!(
            "group {}: {} nodes, {:.1} s (started {:.1} s after the campaign)",
            g.index,
            g.nodes.len(),
            end.saturating_sub(start) as f64 / 1000.0,
            start.saturating_sub(state.campaign.created_ms) as f64 / 1000.0
        );
    }
    println!(
        "parallelism: lower bound / wall = {:.1} %",
        100.0 * lower_bound.as_secs_f64() / wall.as_secs_f64()
    );
    println!(
        "budgets: at most {max_drained} nodes drained (budget {max_disrupted}); \
         at most {down_seen} instances down; hooks {hooks} for {nodes} nodes; \
         {} jobs submitted twice; instances back on their primaries: {}",
        duplicates.len(),
        after == before
    );
    if state.campaign.state != CampaignState::Completed
        || max_drained > max_disrupted
        || down_seen > 0
        || hooks != nodes
        || !duplicates.is_empty()
        || after != before
    {
        bail!("a budget or an outcome was not met");
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
