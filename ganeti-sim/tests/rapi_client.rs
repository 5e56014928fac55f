//! The RAPI client against the simulated RAPI served over HTTPS on loopback with a certificate
//! shaped like Ganeti's (self-signed, CA:TRUE, no subject alternative name).
#![allow(
    clippy::disallowed_methods,
    reason = "the test exercises the RAPI client's writes themselves"
)]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use nodecare_ganeti::rapi::client::{Credentials, RapiClient, RapiConfig, RapiError, ServerTrust};
use nodecare_ganeti::rapi::types::child_jobs_of_opresult;
use nodecare_ganeti::{EvacuateMode, Ganeti, GanetiError, JobStatus, NodeRole, Op, Reason};
use nodecare_ganeti_sim::model::{JobFailureRule, SimConfig};
use nodecare_ganeti_sim::{HttpFaults, SimServer, SimTls, Simulation};
use uuid::Uuid;

const INSTANCES: &str = "inst1:diskless:2,inst2:sharedfile:2,inst3:file:3,inst4:diskless:3";

fn creds() -> Credentials {
    Credentials {
        user: "nodecare".into(),
        password: "s3cret".into(),
    }
}

async fn start() -> (Simulation, SimServer, SimTls) {
    let sim = Simulation::new(SimConfig::from_spec(3, INSTANCES, "sim.test").unwrap()).unwrap();
    sim.set_job_delay(Duration::from_millis(40));
    sim.require_credentials(Some(creds()));
    let tls = SimTls::ganeti_like().unwrap();
    let server = sim
        .serve("127.0.0.1:0".parse().unwrap(), Some(tls.clone()))
        .await
        .unwrap();
    (sim, server, tls)
}

fn client(server: &SimServer, cert_pem: &str) -> RapiClient {
    let mut config = RapiConfig::new(
        server.url.clone(),
        ServerTrust::PinnedCertPem(cert_pem.as_bytes().to_vec()),
    )
    .with_credentials(creds());
    config.request_timeout = Duration::from_secs(5);
    RapiClient::new(config).unwrap()
}

fn reason(intent: &str) -> Reason {
    Reason::new(Uuid::new_v4(), intent, format!("test {intent}"))
}

#[tokio::test]
async fn pinned_certificate_is_accepted_and_calls_work() {
    let (sim, server, tls) = start().await;
    let rapi = client(&server, &tls.cert_pem);
    let info = Ganeti::cluster_info(&rapi).await.unwrap();
    assert_eq!(info.master, "node1.sim.test");
    assert_eq!(info.software_version.as_deref(), Some("3.0.2"));
    let nodes = Ganeti::nodes(&rapi).await.unwrap();
    assert_eq!(nodes.len(), 3);
    assert_eq!(nodes[0].role, NodeRole::Master);
    let instances = Ganeti::instances(&rapi).await.unwrap();
    assert_eq!(instances.len(), 4);
    assert_eq!(rapi.groups().await.unwrap().len(), 1);

    // Drain, then wait for the job through /2/jobs/<id>/wait.
    let drain = reason("drain");
    let id = Ganeti::submit(&rapi, &Op::drain("node2.sim.test"), &drain)
        .await
        .unwrap();
    let job = rapi
        .wait_for_job(id, Duration::from_secs(10))
        .await
        .unwrap();
    assert_eq!(job.status, JobStatus::Success);
    let node = rapi.node("node2.sim.test").await.unwrap();
    assert_eq!(node.role, NodeRole::Drained);

    // The reason trail comes back in /2/jobs/<id> and /2/jobs?bulk=1.
    let job = Ganeti::job(&rapi, id).await.unwrap();
    let ours = job.reasons.iter().find(|r| r.source == "gnt:user").unwrap();
    assert!(
        ours.text
            .starts_with("gnt:daemon:maintd nodecare incident="),
        "{}",
        ours.text
    );
    let listed = Ganeti::jobs(&rapi).await.unwrap();
    let parsed = listed
        .iter()
        .find(|j| j.id == id)
        .unwrap()
        .nodecare_reason()
        .unwrap();
    assert_eq!(
        (parsed.incident, parsed.intent.as_str()),
        (drain.incident, "drain")
    );

    // A configured source goes first instead, and the job is still recognised as ours.
    let site = client(&server, &tls.cert_pem)
        .with_reason_source("site:repair")
        .unwrap();
    assert_eq!(site.reason_source(), "site:repair");
    assert!(
        client(&server, &tls.cert_pem)
            .with_reason_source("two words")
            .is_err()
    );
    let undrain = reason("undrain");
    let id = Ganeti::submit(&site, &Op::undrain("node2.sim.test"), &undrain)
        .await
        .unwrap();
    let job = Ganeti::job(&site, id).await.unwrap();
    let ours = job.reasons.iter().find(|r| r.source == "gnt:user").unwrap();
    assert!(
        ours.text.starts_with("site:repair nodecare incident="),
        "{}",
        ours.text
    );
    let listed = Ganeti::jobs(&site).await.unwrap();
    let job = listed.iter().find(|j| j.id == id).unwrap();
    assert_eq!(job.nodecare_reason().unwrap().incident, undrain.incident);
    site.wait_for_job(id, Duration::from_secs(10))
        .await
        .unwrap();
    let id = Ganeti::submit(&rapi, &Op::drain("node2.sim.test"), &reason("drain-again"))
        .await
        .unwrap();
    rapi.wait_for_job(id, Duration::from_secs(10))
        .await
        .unwrap();

    // Evacuate primaries: child jobs move the instances away.
    let id = Ganeti::submit(
        &rapi,
        &Op::EvacuateNode {
            node: "node2.sim.test".into(),
            mode: EvacuateMode::PrimaryOnly,
            iallocator: None,
        },
        &reason("evac"),
    )
    .await
    .unwrap();
    let job = rapi
        .wait_for_job(id, Duration::from_secs(10))
        .await
        .unwrap();
    assert_eq!(
        job.status,
        JobStatus::Success,
        "{:?}",
        job.failure_message()
    );
    let children = job.child_jobs();
    assert_eq!(children.len(), 2);
    for child in children {
        let c = rapi
            .wait_for_job(child, Duration::from_secs(10))
            .await
            .unwrap();
        assert_eq!(c.status, JobStatus::Success);
    }
    assert!(
        rapi.node("node2.sim.test")
            .await
            .unwrap()
            .pinst_list
            .is_empty()
    );

    // Tags.
    let tags = vec!["nodecare:repairready:x".to_owned()];
    let id = Ganeti::submit(
        &rapi,
        &Op::add_node_tags("node2.sim.test", tags.to_vec()),
        &reason("tag"),
    )
    .await
    .unwrap();
    rapi.wait_for_job(id, Duration::from_secs(10))
        .await
        .unwrap();
    assert_eq!(
        Ganeti::node_tags(&rapi, "node2.sim.test").await.unwrap(),
        tags
    );
    let id = Ganeti::submit(
        &rapi,
        &Op::remove_node_tags("node2.sim.test", tags.to_vec()),
        &reason("untag"),
    )
    .await
    .unwrap();
    rapi.wait_for_job(id, Duration::from_secs(10))
        .await
        .unwrap();
    assert!(
        Ganeti::node_tags(&rapi, "node2.sim.test")
            .await
            .unwrap()
            .is_empty()
    );
    assert!(sim.duplicate_intents().is_empty());
}

#[tokio::test]
async fn wrong_certificate_is_rejected() {
    let (_sim, server, _tls) = start().await;
    let other = SimTls::ganeti_like().unwrap();
    let rapi = client(&server, &other.cert_pem);
    let err = rapi.cluster_info().await.unwrap_err();
    assert!(matches!(err, RapiError::Transport { .. }), "{err}");
    assert!(
        err.to_string().to_lowercase().contains("certificate"),
        "{err}"
    );
}

#[tokio::test]
async fn wrong_password_is_unauthorized() {
    let (_sim, server, tls) = start().await;
    let config = RapiConfig::new(
        server.url.clone(),
        ServerTrust::PinnedCertPem(tls.cert_pem.into_bytes()),
    )
    .with_credentials(Credentials {
        user: "nodecare".into(),
        password: "wrong".into(),
    });
    let rapi = RapiClient::new(config).unwrap();
    let err = Ganeti::nodes(&rapi).await.unwrap_err();
    assert!(matches!(err, GanetiError::Unauthorized(_)), "{err}");
}

#[tokio::test]
async fn failed_jobs_report_ganeti_errors() {
    let (sim, server, tls) = start().await;
    let rapi = client(&server, &tls.cert_pem);
    // A file instance cannot be evacuated.
    let id = Ganeti::submit(
        &rapi,
        &Op::EvacuateNode {
            node: "node3.sim.test".into(),
            mode: EvacuateMode::PrimaryOnly,
            iallocator: None,
        },
        &reason("evac3"),
    )
    .await
    .unwrap();
    let job = rapi
        .wait_for_job(id, Duration::from_secs(10))
        .await
        .unwrap();
    assert_eq!(job.status, JobStatus::Error);
    let failures = job.op_failures();
    assert_eq!(failures[0].class, "OpExecError");
    assert!(
        failures[0].message.contains("cannot be relocated"),
        "{}",
        failures[0].message
    );
    // Injected failure.
    sim.fail_jobs(JobFailureRule {
        op_id: Some("OP_INSTANCE_MIGRATE".into()),
        target: None,
        count: Some(1),
        message: "migration aborted".into(),
    });
    let id = Ganeti::submit(
        &rapi,
        &Op::MigrateInstance {
            instance: "inst1.sim.test".into(),
            target: None,
        },
        &reason("mig"),
    )
    .await
    .unwrap();
    let job = Ganeti::job(&rapi, id).await.unwrap();
    assert!(!job.status.is_final());
    let job = rapi
        .wait_for_job(id, Duration::from_secs(10))
        .await
        .unwrap();
    assert_eq!(job.failure_message(), "OpExecError: migration aborted");
    assert!(child_jobs_of_opresult(&job.opresult[0]).is_empty());
    // Unknown jobs.
    let err = Ganeti::job(&rapi, 9999).await.unwrap_err();
    assert!(matches!(err, GanetiError::NotFound(_)), "{err}");
}

#[tokio::test]
async fn server_faults_and_timeouts_surface_as_transient_errors() {
    let (sim, server, tls) = start().await;
    let mut config = RapiConfig::new(
        server.url.clone(),
        ServerTrust::PinnedCertPem(tls.cert_pem.into_bytes()),
    )
    .with_credentials(creds());
    config.request_timeout = Duration::from_millis(300);
    let rapi = RapiClient::new(config).unwrap();
    sim.set_http_faults(HttpFaults {
        fail_5xx: 1,
        ..HttpFaults::default()
    });
    let err = Ganeti::nodes(&rapi).await.unwrap_err();
    assert!(
        matches!(err, GanetiError::Server { status: 502, .. }),
        "{err}"
    );
    assert!(err.is_transient());
    assert_eq!(
        Ganeti::nodes(&rapi).await.unwrap().len(),
        3,
        "the fault is consumed"
    );
    sim.set_http_faults(HttpFaults {
        hang: 1,
        hang_ms: 5_000,
        ..HttpFaults::default()
    });
    let started = std::time::Instant::now();
    let err = rapi.cluster_info().await.unwrap_err();
    assert!(matches!(err, RapiError::Timeout { .. }), "{err}");
    assert!(started.elapsed() < Duration::from_secs(3));
    // Slow jobs: waiting is bounded.
    sim.set_job_delay(Duration::from_secs(30));
    let id = rapi
        .submit(&Op::drain("node3.sim.test"), &reason("slow"))
        .await
        .unwrap();
    let err = rapi
        .wait_for_job(id, Duration::from_millis(400))
        .await
        .unwrap_err();
    assert!(matches!(err, RapiError::JobWaitTimeout { .. }), "{err}");
    assert!(started.elapsed() < Duration::from_secs(3));
}

#[tokio::test]
async fn the_client_talks_to_the_simulation_in_process() {
    let sim = Simulation::new(SimConfig::from_spec(3, INSTANCES, "sim.test").unwrap()).unwrap();
    sim.set_job_delay(Duration::from_millis(10));
    let client = sim.client();
    let g: &dyn Ganeti = &client;
    let r = reason("drain");
    let id = g.submit(&Op::drain("node3.sim.test"), &r).await.unwrap();
    assert!(sim.settle(Duration::from_secs(5)).await);
    assert_eq!(g.job(id).await.unwrap().status, JobStatus::Success);
    let summary = g.jobs().await.unwrap();
    assert_eq!(summary[0].nodecare_reason().unwrap().incident, r.incident);
    // Submitting the same intent twice is visible to tests.
    g.submit(&Op::drain("node3.sim.test"), &r).await.unwrap();
    assert_eq!(
        sim.duplicate_intents(),
        vec![format!("{}/drain", r.incident)]
    );
    let err = g
        .submit(
            &Op::MigrateInstance {
                instance: "nosuch".into(),
                target: None,
            },
            &r,
        )
        .await
        .unwrap_err();
    assert!(matches!(err, GanetiError::NotFound(_)), "{err}");
}

/// The jobs among some ids, by a job query on their ids: those the queue has, with their
/// status and reason trails, the same as in the whole list; an id it does not have is left
/// out.
#[tokio::test]
async fn a_job_query_gives_the_jobs_among_its_ids() {
    let sim = Simulation::new(SimConfig::from_spec(3, INSTANCES, "sim.test").unwrap()).unwrap();
    sim.set_job_delay(Duration::from_millis(10));
    let client = sim.client();
    let g: &dyn Ganeti = &client;
    let mut ids = Vec::new();
    for (i, node) in ["node2.sim.test", "node3.sim.test"].into_iter().enumerate() {
        let id = g
            .submit(&Op::drain(node), &reason(&format!("drain-{i}")))
            .await
            .unwrap();
        ids.push(id);
    }
    assert!(sim.settle(Duration::from_secs(5)).await);
    let among = std::collections::BTreeSet::from([ids[1], 999]);
    let queried = client.jobs_queried(&among).await.unwrap();
    assert_eq!(queried.iter().map(|j| j.id).collect::<Vec<_>>(), [ids[1]]);
    let listed: Vec<nodecare_ganeti::JobSummary> = g
        .jobs()
        .await
        .unwrap()
        .into_iter()
        .filter(|j| j.id == ids[1])
        .collect();
    let queried: Vec<nodecare_ganeti::JobSummary> = g.jobs_among(&among).await.unwrap();
    assert_eq!(queried, listed);
    assert_eq!(queried[0].status, JobStatus::Success);
    assert_eq!(queried[0].nodecare_reason().unwrap().intent, "drain-1");
}

#[tokio::test]
async fn injected_faults_reach_the_in_process_client() {
    let sim = Simulation::new(SimConfig::from_spec(3, INSTANCES, "sim.test").unwrap()).unwrap();
    let client = sim.client();
    let g: &dyn Ganeti = &client;
    sim.set_http_faults(HttpFaults {
        fail_5xx: 1,
        path_contains: Some("/2/nodes".into()),
        ..HttpFaults::default()
    });
    let err = g.nodes().await.unwrap_err();
    assert!(
        matches!(err, GanetiError::Server { status: 502, .. }),
        "{err}"
    );
    assert!(err.is_transient());
    // The fault was consumed.
    assert_eq!(g.nodes().await.unwrap().len(), 3);
    // A request that hangs past the client's timeout is a transient transport error.
    sim.set_http_faults(HttpFaults {
        hang: 1,
        hang_ms: 60_000,
        ..HttpFaults::default()
    });
    let short = sim.client_with_timeout(Duration::from_millis(100));
    let started = std::time::Instant::now();
    let err = Ganeti::cluster_info(&short).await.unwrap_err();
    assert!(matches!(err, GanetiError::Transport(_)), "{err}");
    assert!(started.elapsed() < Duration::from_secs(5));
}

/// RAPI `depends`: a chain runs back to back, in order, and a failed job fails its
/// dependents without running them, naming the dependency, as Ganeti 3.0.2 does.
#[tokio::test]
async fn chained_jobs_wait_for_their_dependencies_and_fail_with_them() {
    let sim = Simulation::new(SimConfig::from_spec(3, INSTANCES, "sim.test").unwrap()).unwrap();
    sim.set_job_delay(Duration::from_millis(30));
    let rapi = sim.client();
    let node = "node2.sim.test";
    let drain = Ganeti::submit(&rapi, &Op::drain(node.to_owned()), &reason("drain"))
        .await
        .unwrap();
    let m1 = Ganeti::submit(
        &rapi,
        &Op::MigrateInstance {
            instance: "inst1.sim.test".into(),
            target: None,
        },
        &reason("m1").after([drain]),
    )
    .await
    .unwrap();
    let m2 = Ganeti::submit(
        &rapi,
        &Op::FailoverInstance {
            instance: "inst2.sim.test".into(),
            target: None,
        },
        &reason("m2").after([drain]),
    )
    .await
    .unwrap();
    let tag = Ganeti::submit(
        &rapi,
        &Op::add_node_tags(node.to_owned(), vec!["nodecare:test".to_owned()]),
        &reason("tag").after([m1, m2]),
    )
    .await
    .unwrap();
    assert!(sim.settle(Duration::from_secs(10)).await);
    let jobs = sim.with_cluster(|c| c.jobs.clone());
    for id in [drain, m1, m2, tag] {
        assert_eq!(jobs[&id].status, JobStatus::Success, "job {id}");
    }
    // Each step starts only after the steps it depends on ended.
    let start = |id: u64| jobs[&id].start_ms.unwrap();
    let end = |id: u64| jobs[&id].end_ms.unwrap();
    assert!(start(m1) >= end(drain) && start(m2) >= end(drain));
    assert!(start(tag) >= end(m1).max(end(m2)));
    // The dependency shows in the job's opcode, as RAPI lists it.
    let listed = Ganeti::job(&rapi, tag).await.unwrap();
    assert_eq!(listed.status, JobStatus::Success);
    let detail = sim.with_cluster(|c| c.job_json(&c.jobs[&tag], true));
    assert_eq!(
        detail["ops"][0]["depends"],
        serde_json::json!([[m1, ["success"]], [m2, ["success"]]])
    );

    // A failing step fails everything after it, and nothing after it runs.
    sim.fail_jobs(JobFailureRule {
        op_id: Some("OP_INSTANCE_MIGRATE".into()),
        target: None,
        count: Some(1),
        message: "migration aborted".into(),
    });
    let undrain = Ganeti::submit(&rapi, &Op::drain("node3.sim.test"), &reason("d3"))
        .await
        .unwrap();
    let bad = Ganeti::submit(
        &rapi,
        &Op::MigrateInstance {
            instance: "inst4.sim.test".into(),
            target: None,
        },
        &reason("m4").after([undrain]),
    )
    .await
    .unwrap();
    let after = Ganeti::submit(
        &rapi,
        &Op::add_node_tags("node3.sim.test", vec!["nodecare:after".to_owned()]),
        &reason("tag3").after([bad]),
    )
    .await
    .unwrap();
    let last = Ganeti::submit(
        &rapi,
        &Op::remove_node_tags("node3.sim.test", vec!["nodecare:after".to_owned()]),
        &reason("untag3").after([after]),
    )
    .await
    .unwrap();
    assert!(sim.settle(Duration::from_secs(10)).await);
    let bad_job = Ganeti::job(&rapi, bad).await.unwrap();
    assert_eq!(bad_job.status, JobStatus::Error);
    let after_job = Ganeti::job(&rapi, after).await.unwrap();
    assert_eq!(after_job.status, JobStatus::Error);
    let message = after_job.errors.join("; ");
    assert!(
        message.contains(&format!(
            "Dependency job {bad} finished with status 'error', not one of 'success' as required"
        )),
        "{message}"
    );
    assert_eq!(
        Ganeti::job(&rapi, last).await.unwrap().status,
        JobStatus::Error
    );
    let tags = Ganeti::node_tags(&rapi, "node3.sim.test").await.unwrap();
    assert!(!tags.iter().any(|t| t == "nodecare:after"), "{tags:?}");
    // As on Ganeti 3.0.2, the dependent job starts and ends at once, its opcode never run.
    let (started, ended) = sim.with_cluster(|c| (c.jobs[&after].start_ms, c.jobs[&after].end_ms));
    assert_eq!(started, ended);
    assert!(started.is_some());
}

#[tokio::test]
async fn malformed_depends_is_refused() {
    let sim = Simulation::new(SimConfig::from_spec(3, INSTANCES, "sim.test").unwrap()).unwrap();
    for body in [
        serde_json::json!({"depends": 3}),
        serde_json::json!({"depends": [[1]]}),
        serde_json::json!({"depends": [[1, ["running"]]]}),
        serde_json::json!({"depends": [[-1, ["success"]]]}),
    ] {
        let req = nodecare_ganeti_sim::rapi_routes::SimRequest {
            method: "PUT".into(),
            path: "/2/nodes/node2.sim.test/tags".into(),
            query: vec![("tag".into(), "x".into())],
            body: Some(body.clone()),
        };
        let (status, _) = sim.handle(&req).await;
        assert_eq!(status, 400, "{body}");
    }
}

/// The simulation answers every write the client can submit: each [`Op`] (through the one
/// request [`nodecare_ganeti::rapi::request::rapi_request`] writes) starts a job that ends.
#[tokio::test]
async fn every_op_starts_a_job_in_the_simulation() {
    use nodecare_ganeti::{ReplaceDisksMode, TagTarget};
    let spec = "inst1:drbd:1,inst2:diskless:2,inst3:plain:3,inst4:diskless:1";
    let sim = Simulation::new(SimConfig::from_spec(4, spec, "sim.test").unwrap()).unwrap();
    sim.set_job_delay(Duration::from_millis(5));
    let rapi = sim.client();
    let group = Ganeti::groups(&rapi).await.unwrap()[0].name.clone();
    let tags = vec!["nodecare:test".to_owned()];
    let ops = [
        Op::drain("node4.sim.test"),
        Op::undrain("node4.sim.test"),
        Op::offline("node4.sim.test"),
        Op::online("node4.sim.test"),
        Op::ShutdownInstance {
            instance: "inst3.sim.test".into(),
        },
        Op::MigrateInstance {
            instance: "inst2.sim.test".into(),
            target: Some("node3.sim.test".into()),
        },
        Op::FailoverInstance {
            instance: "inst4.sim.test".into(),
            target: None,
        },
        Op::ReplaceDisks {
            instance: "inst1.sim.test".into(),
            mode: ReplaceDisksMode::ReplaceNewSecondary {
                remote_node: None,
                iallocator: None,
            },
        },
        Op::EvacuateNode {
            node: "node2.sim.test".into(),
            mode: EvacuateMode::SecondaryOnly,
            iallocator: None,
        },
        Op::AddTags {
            target: TagTarget::Cluster,
            tags: tags.clone(),
        },
        Op::RemoveTags {
            target: TagTarget::Cluster,
            tags: tags.clone(),
        },
        Op::add_node_tags("node1.sim.test", tags.clone()),
        Op::remove_node_tags("node1.sim.test", tags.clone()),
        Op::AddTags {
            target: TagTarget::Instance("inst2.sim.test".into()),
            tags: tags.clone(),
        },
        Op::AddTags {
            target: TagTarget::Group(group),
            tags: tags.clone(),
        },
        Op::RecreateInstanceDisks {
            instance: "inst3.sim.test".into(),
            iallocator: "hail".into(),
        },
        Op::ReinstallInstance {
            instance: "inst3.sim.test".into(),
            start: false,
        },
    ];
    let mut jobs = Vec::new();
    for (n, op) in ops.iter().enumerate() {
        let reason = Reason::new(Uuid::new_v4(), format!("op{n}"), op.describe());
        let id = Ganeti::submit(&rapi, op, &reason)
            .await
            .unwrap_or_else(|e| panic!("{op:?}: {e}"));
        assert!(sim.settle(Duration::from_secs(5)).await, "{op:?}");
        jobs.push((op, id));
    }
    for (op, id) in jobs {
        let job = Ganeti::job(&rapi, id).await.unwrap();
        assert!(job.status.is_final(), "{op:?}: {:?}", job.status);
    }
    assert_eq!(sim.submissions().len(), ops.len());
}
