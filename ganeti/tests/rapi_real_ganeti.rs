//! The RAPI client against a real Ganeti 3.0.2 cluster brought up by `tests/ganeti/cluster-up.sh`.
//! Runs only when `NODECARE_GNT_ENV` names that script's env file (tests/e2e-ganeti/run.sh sets
//! it); otherwise it prints why and passes. It changes the cluster: it drains and undrains the
//! last node, migrates a diskless instance there and back, and tags the node.
#![allow(clippy::unwrap_used, clippy::expect_used)]
#![allow(
    clippy::disallowed_methods,
    reason = "the test runs the cluster helper scripts and exercises the RAPI client's writes themselves"
)]

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

use nodecare_ganeti::rapi::client::{Credentials, RapiClient, RapiConfig, ServerTrust};
use nodecare_ganeti::rapi::types::RapiJob;
use nodecare_ganeti::{Ganeti, JobId, JobStatus, NodeRole, Op, Reason};
use uuid::Uuid;

/// Reads the `KEY=value` lines written by cluster-up.sh (values quoted with bash `%q`).
fn read_env(path: &str) -> HashMap<String, String> {
    let text = std::fs::read_to_string(path).unwrap();
    text.lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| {
            (
                k.to_owned(),
                v.replace("\\ ", " ").trim_matches('\'').to_owned(),
            )
        })
        .collect()
}

/// Waits for a job. When that fails and `NODECARE_GNT_MASTER_HEAL` names
/// tests/ganeti/master-daemons.sh, repairs the cluster with it (detached private mounts of the
/// namespace nodes, wedged luxid/wconfd: RAPI then times out) and waits once more.
async fn wait_job(rapi: &RapiClient, id: JobId, limit: Duration) -> RapiJob {
    match rapi.wait_for_job(id, limit).await {
        Ok(job) => job,
        Err(first) => {
            let Ok(heal) = std::env::var("NODECARE_GNT_MASTER_HEAL") else {
                panic!("waiting for job {id}: {first:?}");
            };
            let reason = format!("S0: waiting for job {id} failed: {first}");
            println!("WARN cluster repair: {reason}");
            // Its WARN lines (what was repaired) go to stderr, which the harness keeps.
            let status = std::process::Command::new(&heal)
                .args(["heal", "--reason", &reason])
                .status()
                .unwrap();
            assert!(status.success(), "{heal} heal failed: {status}");
            rapi.wait_for_job(id, limit)
                .await
                .unwrap_or_else(|e| panic!("waiting for job {id} after a repair: {e:?}"))
        }
    }
}

/// What the coordinator reads of a listed job.
fn ganeti_summary(job: &RapiJob) -> nodecare_ganeti::JobSummary {
    nodecare_ganeti::JobSummary::from(job.clone())
}

#[tokio::test]
async fn real_cluster_round_trip() {
    let Ok(env_path) = std::env::var("NODECARE_GNT_ENV") else {
        eprintln!("skipped: NODECARE_GNT_ENV is not set (no real Ganeti cluster)");
        return;
    };
    let env = read_env(&env_path);
    let password = std::fs::read_to_string(&env["NODECARE_GNT_RAPI_PASSWORD_FILE"]).unwrap();
    let creds = Credentials {
        user: env["NODECARE_GNT_RAPI_USER"].clone(),
        password: password.trim().to_owned(),
    };
    let config = RapiConfig::new(
        env["NODECARE_GNT_RAPI_URL"].clone(),
        ServerTrust::PinnedCertFile(PathBuf::from(&env["NODECARE_GNT_RAPI_CERT"])),
    )
    .with_credentials(creds);
    let rapi = RapiClient::new(config).unwrap();
    let limit = Duration::from_secs(60);

    let info = Ganeti::cluster_info(&rapi).await.unwrap();
    // The release the cluster's nodes run (cluster-up.sh reads it from `gnt-cluster --version`;
    // env files of older scripts lack it: Debian 12's Ganeti).
    let release = env
        .get("NODECARE_GNT_SOFTWARE_VERSION")
        .map_or("3.0.2", String::as_str);
    assert_eq!(info.software_version.as_deref(), Some(release));
    assert_eq!(info.master, env["NODECARE_GNT_MASTER"]);
    let nodes = Ganeti::nodes(&rapi).await.unwrap();
    let target = nodes.last().unwrap().name.clone();
    assert_ne!(target, info.master);
    let instances = Ganeti::instances(&rapi).await.unwrap();
    let diskless = instances
        .iter()
        .find(|i| {
            i.disk_template.as_str() == "diskless"
                && i.primary_node != target
                && i.primary_node != info.master
        })
        .or_else(|| {
            instances
                .iter()
                .find(|i| i.disk_template.as_str() == "diskless" && i.primary_node != target)
        })
        .expect("a diskless instance off the last node")
        .clone();
    let incident = Uuid::new_v4();

    // Migrate the diskless instance to the last node and check the reason trail.
    let reason = Reason::new(
        incident,
        "migrate",
        format!("Migrating {} to {target}", diskless.name),
    );
    let migrate = Op::MigrateInstance {
        instance: diskless.name.clone(),
        target: Some(target.clone()),
    };
    let id = Ganeti::submit(&rapi, &migrate, &reason).await.unwrap();
    let job = wait_job(&rapi, id, limit).await;
    assert_eq!(job.status, JobStatus::Success, "{}", job.failure_message());
    let moved = rapi.instance(&diskless.name).await.unwrap();
    assert_eq!(moved.pnode, target);
    let listed = Ganeti::jobs(&rapi).await.unwrap();
    let parsed = listed
        .iter()
        .find(|j| j.id == id)
        .unwrap()
        .nodecare_reason()
        .unwrap();
    assert_eq!(
        (parsed.incident, parsed.intent.as_str()),
        (incident, "migrate")
    );
    // The same job by a job query on its id (with an id Ganeti does not have, and, asked for
    // in more than one request, every job of the queue).
    let queried = rapi
        .jobs_queried(&std::collections::BTreeSet::from([id, 999_999]))
        .await
        .unwrap();
    assert_eq!(queried.iter().map(|j| j.id).collect::<Vec<_>>(), [id]);
    let parsed = ganeti_summary(&queried[0]).nodecare_reason().unwrap();
    assert_eq!(
        (parsed.incident, parsed.intent.as_str(), queried[0].status),
        (incident, "migrate", JobStatus::Success)
    );
    let every: std::collections::BTreeSet<JobId> =
        (1..=id.max(nodecare_ganeti::rapi::client::QUERY_JOBS_AT_ONCE as u64 + 1)).collect();
    let queried: std::collections::BTreeSet<JobId> = rapi
        .jobs_queried(&every)
        .await
        .unwrap()
        .iter()
        .map(|j| j.id)
        .collect();
    // Every job listed before (a job Ganeti started since may come too).
    let listed_ids: std::collections::BTreeSet<JobId> = listed
        .iter()
        .map(|j| j.id)
        .filter(|i| every.contains(i))
        .collect();
    assert!(
        queried.is_superset(&listed_ids),
        "{queried:?} lacks some of {listed_ids:?}"
    );
    assert!(queried.is_subset(&every));
    let full = Ganeti::job(&rapi, id).await.unwrap();
    assert!(
        full.reasons
            .iter()
            .any(|r| r.source == "gnt:user" && r.text.starts_with("gnt:daemon:maintd "))
    );

    // Drain the node, then evacuate its primaries (the instance goes away again).
    let id = Ganeti::submit(
        &rapi,
        &Op::drain(target.clone()),
        &Reason::new(incident, "drain", "Draining"),
    )
    .await
    .unwrap();
    assert_eq!(wait_job(&rapi, id, limit).await.status, JobStatus::Success);
    assert_eq!(rapi.node(&target).await.unwrap().role, NodeRole::Drained);

    // Tag and untag.
    let tag = vec![format!("nodecare:test:{incident}")];
    let id = Ganeti::submit(
        &rapi,
        &Op::add_node_tags(target.clone(), tag.clone()),
        &Reason::new(incident, "tag", "Tagging"),
    )
    .await
    .unwrap();
    assert_eq!(wait_job(&rapi, id, limit).await.status, JobStatus::Success);
    assert!(
        Ganeti::node_tags(&rapi, &target)
            .await
            .unwrap()
            .contains(&tag[0])
    );
    let id = Ganeti::submit(
        &rapi,
        &Op::remove_node_tags(target.clone(), tag.clone()),
        &Reason::new(incident, "untag", "Untagging"),
    )
    .await
    .unwrap();
    assert_eq!(wait_job(&rapi, id, limit).await.status, JobStatus::Success);

    // Move the instance back (the drained node is only a source now), then undrain.
    let id = Ganeti::submit(
        &rapi,
        &Op::MigrateInstance {
            instance: diskless.name.clone(),
            target: Some(diskless.primary_node.clone()),
        },
        &Reason::new(incident, "back", "Back"),
    )
    .await
    .unwrap();
    assert_eq!(wait_job(&rapi, id, limit).await.status, JobStatus::Success);
    let id = Ganeti::submit(
        &rapi,
        &Op::undrain(target.clone()),
        &Reason::new(incident, "undrain", "Undraining"),
    )
    .await
    .unwrap();
    assert_eq!(wait_job(&rapi, id, limit).await.status, JobStatus::Success);
    assert!(!rapi.node(&target).await.unwrap().drained);

    // A job that must fail: migrating a file instance gives OpPrereqError.
    if let Some(file) = instances
        .iter()
        .find(|i| i.disk_template.as_str() == "file")
    {
        let id = Ganeti::submit(
            &rapi,
            &Op::MigrateInstance {
                instance: file.name.clone(),
                target: None,
            },
            &Reason::new(incident, "bad", "Must fail"),
        )
        .await
        .unwrap();
        let job = wait_job(&rapi, id, limit).await;
        assert_eq!(job.status, JobStatus::Error);
        let failure = &job.op_failures()[0];
        assert_eq!(
            (failure.class.as_str(), failure.kind.as_deref()),
            ("OpPrereqError", Some("wrong_state"))
        );
    }
    // Unknown jobs.
    assert!(Ganeti::job(&rapi, 999_999).await.is_err());
}
