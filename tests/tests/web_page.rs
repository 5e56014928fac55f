//! The coordinator's web status page: a golden file of the HTML for a fixed state, its actions
//! (authentication, CSRF token, same origin), and the page in real headless Chromium against a
//! simulated cluster (skipped when `chromium` is missing, unless `NODECARE_REQUIRE_BROWSER=1`).
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests")]

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nodecare_coordinator::admission::GateStatus;
use nodecare_coordinator::http::{ApiState, router};
use nodecare_coordinator::reconcile::RoundSummary;
use nodecare_coordinator::scrape::{AgentState, AgentStatus};
use nodecare_coordinator::store::{Intent, IntentSpec, IntentState};
use nodecare_coordinator::ui::{Actions, Snapshot, render};
use nodecare_core::incident::{Action, HistoryEntry, Incident, RepairStatus};
use nodecare_core::plan::Move;
use nodecare_protocol::gate::{
    AuditEntry, BreakerView, Disrupted, DomainStatus, Grant, OverrideView, Waiting,
};
use nodecare_protocol::maintenance::{
    Campaign, CampaignGroup, CampaignNode, CampaignRequest, CampaignState, Failure, NodeStep,
};
use nodecare_protocol::{CanonicalJson, DiagnoseStatus};
use nodecare_tests::fake_agent::verdict;
use nodecare_tests::harness::{Harness, node};
use serde_json::json;
use tokio::io::AsyncReadExt as _;
use tokio::io::AsyncWriteExt as _;
use uuid::Uuid;

const NOW_MS: u64 = 1_795_000_000_000;

fn incident(n: u128, node: &str, status: &str, details: serde_json::Value) -> Incident {
    let verdict = verdict(status, details, None);
    let original = CanonicalJson::new(&serde_json::to_value(&verdict).unwrap()).unwrap();
    Incident::new(
        Uuid::from_u128(n),
        node,
        format!("uuid-of-{node}"),
        verdict,
        original,
        Action::Evacuate,
        1_794_999_000.0,
    )
}

fn intent(n: u128, spec: IntentSpec, state: IntentState, job: Option<u64>) -> Intent {
    Intent {
        incident: Uuid::from_u128(n),
        key: format!("k{job:?}"),
        spec,
        locks: Vec::new(),
        state,
        job_id: job,
        created_ms: NOW_MS - 60_000,
        submitted_ms: job.map(|_| NOW_MS - 59_000),
        finished_ms: None,
        error: None,
    }
}

fn agent(node: &str, state: AgentState, verdict: Option<DiagnoseStatus>) -> AgentStatus {
    AgentStatus {
        node: node.into(),
        state,
        verdict,
        reason: None,
        fingerprint: None,
        sequence: Some(4),
        error: (state != AgentState::Ok).then(|| "connection refused".to_owned()),
        checked_at_ms: NOW_MS - 2_000,
        last_ok_ms: (state == AgentState::Ok).then_some(NOW_MS - 3_000),
    }
}

fn fixed_snapshot() -> Snapshot {
    let mut running = incident(1, "node2", "evacuate", json!({"disk": "/dev/sdb"}));
    running.repair_status = RepairStatus::Pending;
    running.jobs = vec![17, 18];
    running.history.push(HistoryEntry {
        at: 1_794_999_100.0,
        status: RepairStatus::Pending,
        event: "drain job 17 submitted".into(),
    });
    let mut blocked = incident(2, "node3", "evacuate", json!({"psu": 1}));
    blocked.blocked_by =
        Some("safety budget: at most 1 node(s) disrupted at once (in use: node2)".into());
    let intents = vec![
        intent(
            1,
            IntentSpec::Drain {
                node: "node2".into(),
            },
            IntentState::Succeeded,
            Some(17),
        ),
        intent(
            1,
            IntentSpec::Move {
                planned: Move::Migrate {
                    instance: "web<1>".into(),
                    target: Some("node4".into()),
                },
            },
            IntentState::Submitted,
            Some(18),
        ),
    ];
    // Canceled: its tag is never set, the jobs Ganeti canceled read canceled.
    let mut canceled = incident(3, "node4", "evacuate", json!({"fan": 2}));
    canceled.repair_status = RepairStatus::Canceled;
    canceled.jobs = vec![21, 22];
    let canceled_intents = vec![
        intent(
            3,
            IntentSpec::Drain {
                node: "node4".into(),
            },
            IntentState::Succeeded,
            Some(21),
        ),
        intent(
            3,
            IntentSpec::Offline {
                node: "node4".into(),
            },
            IntentState::Canceled,
            Some(22),
        ),
    ];
    Snapshot {
        node: "node1".into(),
        now_ms: NOW_MS,
        round: RoundSummary {
            number: 42,
            started_ms: NOW_MS - 5_000,
            duration_ms: 120,
            agents: 4,
            agents_failed: 1,
            jobs_submitted: 1,
            error: None,
            ganeti_version: Some("3.1.0".into()),
        },
        incidents: vec![
            (running, intents),
            (blocked, Vec::new()),
            (canceled, canceled_intents),
        ],
        agents: vec![
            agent("node1", AgentState::Ok, Some(DiagnoseStatus::Ok)),
            agent("node2", AgentState::Ok, Some(DiagnoseStatus::Evacuate)),
            agent("node3", AgentState::Ok, Some(DiagnoseStatus::Evacuate)),
            agent("node4", AgentState::Unreachable, None),
        ],
        max_disrupted_nodes: 1,
        gate: fixed_gate(),
        instance_repairs: Vec::new(),
        campaigns: fixed_campaigns(),
    }
}

/// A campaign in its second group (node3 waits for a new boot id, node4 migrates back), one
/// that failed and one that completed.
fn fixed_campaigns() -> Vec<Campaign> {
    let node = |name: &str, step: NodeStep| CampaignNode {
        node: name.into(),
        step,
        step_started_ms: None,
        step_deadline_ms: None,
        original_primaries: Vec::new(),
        boot_id_before: None,
        waiting_for: None,
        failure: None,
    };
    let mut waiting = node("node3", NodeStep::WaitHealthy);
    waiting.step_started_ms = Some(NOW_MS - 120_000);
    waiting.step_deadline_ms = Some(NOW_MS + 1_680_000);
    waiting.waiting_for = Some("a new boot id (still 4c6b1e1a)".into());
    let mut back = node("node4", NodeStep::MigrateBack);
    back.step_started_ms = Some(NOW_MS - 30_000);
    let running = Campaign {
        id: Uuid::from_u128(20).to_string(),
        request: CampaignRequest::new("reboot"),
        who: "ops".into(),
        state: CampaignState::Running,
        created_ms: NOW_MS - 1_800_000,
        updated_ms: NOW_MS - 30_000,
        finished_ms: None,
        groups: vec![
            CampaignGroup {
                index: 0,
                nodes: vec![node("node1", NodeStep::Done)],
                started_ms: Some(NOW_MS - 1_790_000),
                finished_ms: Some(NOW_MS - 900_000),
            },
            CampaignGroup {
                index: 1,
                nodes: vec![waiting, back],
                started_ms: Some(NOW_MS - 890_000),
                finished_ms: None,
            },
        ],
        planned: vec![vec!["node2".into()]],
        failure: None,
        failures: Vec::new(),
        blocked_by: None,
        warnings: Vec::new(),
        overrides: Vec::new(),
    };
    let failure = Failure {
        node: "node2".into(),
        step: NodeStep::Hook,
        why: "hook exited with status 1: <apt-get update failed>".into(),
        at_ms: NOW_MS - 86_000_000,
    };
    let mut failed_node = node("node2", NodeStep::Failed);
    failed_node.failure = Some(failure.clone());
    // Stopped by the failure: nothing of it is pending.
    let mut stopped = node("node5", NodeStep::Drain);
    stopped.step_started_ms = Some(NOW_MS - 86_100_000);
    stopped.step_deadline_ms = Some(NOW_MS - 85_800_000);
    stopped.waiting_for = Some("the drain job".into());
    let failed = Campaign {
        id: Uuid::from_u128(19).to_string(),
        request: CampaignRequest::new("apt-upgrade-and-reboot"),
        state: CampaignState::Failed,
        created_ms: NOW_MS - 86_400_000,
        finished_ms: Some(NOW_MS - 86_000_000),
        groups: vec![CampaignGroup {
            index: 0,
            nodes: vec![failed_node, stopped],
            started_ms: Some(NOW_MS - 86_300_000),
            finished_ms: None,
        }],
        planned: vec![vec!["node3".into()]],
        failure: Some(failure),
        blocked_by: None,
        ..running.clone()
    };
    let mut completed = running.clone();
    completed.id = Uuid::from_u128(18).to_string();
    completed.state = CampaignState::Completed;
    completed.created_ms = NOW_MS - 172_800_000;
    completed.finished_ms = Some(NOW_MS - 170_000_000);
    completed.planned = Vec::new();
    for group in &mut completed.groups {
        group.finished_ms = Some(NOW_MS - 170_000_000);
        for node in &mut group.nodes {
            *node = CampaignNode {
                step_started_ms: None,
                step_deadline_ms: None,
                waiting_for: None,
                ..node.clone()
            };
            node.step = NodeStep::Done;
        }
    }
    let mut blocked = running.clone();
    blocked.id = Uuid::from_u128(21).to_string();
    blocked.blocked_by = Some("failure domain rack:a is disrupted (node2: incident 1)".into());
    blocked.groups.truncate(1);
    vec![blocked, running, failed, completed]
}

/// node2 held by its incident in rack:a, node3 waiting, a grant, an override of rack:b, the
/// breaker open.
fn fixed_gate() -> GateStatus {
    GateStatus {
        domains: vec![
            DomainStatus {
                domain: "rack:a".into(),
                nodes: vec!["node1".into(), "node2".into()],
                disrupted: vec![Disrupted {
                    node: "node2".into(),
                    holder: format!("incident {}", Uuid::from_u128(1)),
                }],
                override_until_ms: None,
            },
            DomainStatus {
                domain: "rack:b".into(),
                nodes: vec!["node3".into(), "node4".into()],
                disrupted: Vec::new(),
                override_until_ms: Some(NOW_MS + 3_600_000),
            },
        ],
        waiting: vec![Waiting {
            duty: "node-repair".into(),
            subject: "node node3".into(),
            blocked_by: "failure domain rack:a is disrupted (node2: incident 1); rack:b waits"
                .into(),
        }],
        grants: vec![Grant {
            id: Uuid::from_u128(9).to_string(),
            node: "node1".into(),
            reason: "kernel <update>".into(),
            requester: "reboot@node1".into(),
            granted_ms: NOW_MS - 60_000,
            expires_ms: NOW_MS + 600_000,
            who: "ops".into(),
        }],
        overrides: vec![OverrideView {
            id: Uuid::from_u128(10).to_string(),
            domain: "rack:b".into(),
            until_ms: NOW_MS + 3_600_000,
            reason: "firmware campaign".into(),
            who: "admin".into(),
            created_ms: NOW_MS - 60_000,
            revoked_ms: None,
            revoked_by: None,
            active: true,
        }],
        breaker: BreakerView {
            open: true,
            since_ms: Some(NOW_MS - 120_000),
            why: Some("3 of 4 agents unreachable".into()),
            reset_by: None,
            reset_ms: None,
        },
        audit: vec![AuditEntry {
            seq: 1,
            at_ms: NOW_MS - 60_000,
            who: "admin".into(),
            what: format!(
                "override {} of failure domain rack:b until {} ms",
                Uuid::from_u128(10),
                NOW_MS + 3_600_000
            ),
            why: "firmware campaign".into(),
        }],
        calendar: Default::default(),
        approvals: Default::default(),
        failback: vec![nodecare_protocol::status::HomecomingView {
            incident: Uuid::from_u128(3).to_string(),
            node: "node4".into(),
            healthy_since_ms: Some(NOW_MS - 120_000),
            not_ready: None,
            ended_ms: None,
            instances: vec![
                nodecare_protocol::status::HomeboundView {
                    instance: "web1".into(),
                    state: "back".into(),
                    why: None,
                    attempts: 1,
                },
                nodecare_protocol::status::HomeboundView {
                    instance: "db1".into(),
                    state: "waiting".into(),
                    why: Some("node4 healthy for 2 min of 10 min (settle_secs)".into()),
                    attempts: 0,
                },
            ],
        }],
    }
}

fn golden(name: &str, actual: &str) {
    nodecare_protocol::golden::assert_golden(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/web")
            .join(name),
        actual,
    );
}

/// One tag per line, so that the golden file diffs well.
fn lines(html: &str) -> String {
    html.replace('>', ">\n")
}

#[test]
fn page_html_matches_golden() {
    let snapshot = fixed_snapshot();
    let page = render(&snapshot, None);
    golden("status.html", &lines(&page));
    let actions = Actions {
        user: "admin".into(),
        csrf: "0123abcd".into(),
    };
    golden(
        "status-admin.html",
        &lines(&render(&snapshot, Some(&actions))),
    );
    // What people look for, and escaping of what agents and Ganeti name.
    assert!(page.contains("web&lt;1&gt;"));
    assert!(!page.contains("web<1>"));
    assert!(page.contains("safety budget"));
    assert!(!page.contains("<script"));
    assert!(!page.contains("<form"), "the read-only page has no actions");
    // The gate: the busy domain and its holder, why node3 waits, the grant, the override, the
    // open breaker.
    for needle in [
        "id=\"domain-rack:a\"",
        "rack:b waits",
        "reboot@node1",
        "kernel &lt;update&gt;",
        "firmware campaign",
        "3 of 4 agents unreachable",
        "id=\"audit\"",
    ] {
        assert!(page.contains(needle), "{needle:?} not on the page");
    }
    let admin = render(
        &snapshot,
        Some(&Actions {
            user: "admin".into(),
            csrf: "0123abcd".into(),
        }),
    );
    for action in [
        "action=\"/ui/admin/breaker/reset\"",
        "action=\"/ui/admin/overrides\"",
        "/revoke\"",
    ] {
        assert!(admin.contains(action), "{action:?} not on the admin page");
    }
}

#[test]
fn empty_cluster_page_says_so() {
    let snapshot = Snapshot {
        node: "node1".into(),
        now_ms: NOW_MS,
        round: RoundSummary::default(),
        incidents: Vec::new(),
        agents: Vec::new(),
        max_disrupted_nodes: 1,
        gate: GateStatus::default(),
        instance_repairs: Vec::new(),
        campaigns: Vec::new(),
    };
    let page = render(&snapshot, None);
    assert!(!page.contains("Maintenance campaigns"), "{page}");
    assert!(page.contains("No incident"), "{page}");
    assert!(page.contains("none read yet"), "{page}");
}

/// node3 evacuated (completed, tag on the node), node2 waiting on the budget, node5's agent
/// down; the API served on a loopback port with a users file.
async fn scenario() -> (Harness, String, tokio::task::JoinHandle<()>, ApiState) {
    let mut h = Harness::new(5, "a:diskless:3,b:diskless:2,c:diskless:4", |c| {
        c.max_disrupted_nodes = 1;
    })
    .await
    .unwrap();
    h.agents.get(&node(3)).unwrap().set_verdict(verdict(
        "evacuate",
        json!({"disk": "/dev/sdb"}),
        None,
    ));
    assert!(
        h.until(20, |i| i.len() == 1
            && i[0].repair_status == RepairStatus::Completed)
            .await
            .unwrap()
    );
    h.agents.get(&node(2)).unwrap().set_verdict(verdict(
        "evacuate",
        json!({"psu": "failed"}),
        None,
    ));
    h.agents.get(&node(5)).unwrap().set_down(true);
    for _ in 0..3 {
        h.round().await.unwrap();
    }
    let users = h.state_dir.path().join("users");
    nodecare_tests::harness::write_secret(&users, "admin secret write\nviewer look\n").unwrap();
    let mut api = h.coordinator.api().clone();
    api.users = Some(users);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let app = router(api.clone());
    let server = tokio::spawn(async move {
        if let Err(error) = axum::serve(listener, app).await {
            eprintln!("test server: {error}");
        }
    });
    (h, base, server, api)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn actions_need_a_writer_a_form_token_and_the_same_origin() {
    let (h, base, server, _api) = scenario().await;
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let page = client
        .get(format!("{base}/ui/"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(!page.contains("<form"), "read-only without authentication");
    let admin = format!("{base}/ui/admin/");
    let answer = client.get(&admin).send().await.unwrap();
    assert_eq!(answer.status(), 401);
    assert!(
        answer.headers()["www-authenticate"]
            .to_str()
            .unwrap()
            .starts_with("Basic")
    );
    let answer = client
        .get(&admin)
        .basic_auth("viewer", Some("look"))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 403);
    let page = client
        .get(&admin)
        .basic_auth("admin", Some("secret"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let blocked = h
        .incidents()
        .unwrap()
        .into_iter()
        .find(|i| i.node == node(2))
        .unwrap();
    let action = format!("/ui/admin/incidents/{}/cancel", blocked.uuid);
    assert!(page.contains(&action), "{page}");
    let token = page
        .split("name=\"csrf\" value=\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .unwrap()
        .to_owned();
    let url = format!("{base}{action}");
    let origin = base.clone();
    let post = |user: &str, password: &str, origin: &str, body: String| {
        client
            .post(&url)
            .basic_auth(user, Some(password))
            .header("origin", origin)
            .header("content-type", "application/x-www-form-urlencoded")
            .body(body)
    };
    for (request, code) in [
        (client.post(&url).body(format!("csrf={token}")), 401),
        (
            post("viewer", "look", &origin, format!("csrf={token}")),
            403,
        ),
        (post("admin", "secret", &origin, String::new()), 403),
        (post("admin", "secret", &origin, "csrf=00".into()), 403),
        (
            post(
                "admin",
                "secret",
                "http://elsewhere.example",
                format!("csrf={token}"),
            ),
            403,
        ),
    ] {
        assert_eq!(request.send().await.unwrap().status(), code);
        let still = h.incidents().unwrap();
        assert!(
            still
                .iter()
                .any(|i| i.uuid == blocked.uuid && i.repair_status == RepairStatus::Noted),
            "a refused action changes nothing: {still:#?}"
        );
    }
    let answer = post("admin", "secret", &origin, format!("csrf={token}"))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 303);
    assert_eq!(answer.headers()["location"], "/ui/admin/");
    let canceled = h
        .incidents()
        .unwrap()
        .into_iter()
        .find(|i| i.uuid == blocked.uuid)
        .unwrap();
    assert_eq!(canceled.repair_status, RepairStatus::Canceled);
    // Acknowledging records the decision; the next round removes the tag through Ganeti (a
    // recorded intent with the reason trail) and records the acknowledgement. An incident
    // without a tag on its node has nothing to acknowledge.
    let done = h
        .incidents()
        .unwrap()
        .into_iter()
        .find(|i| i.node == node(3))
        .unwrap();
    assert!(done.tag_applied && !done.acknowledged, "{done:#?}");
    let page = client
        .get(&admin)
        .basic_auth("admin", Some("secret"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let acknowledge = format!("/ui/admin/incidents/{}/acknowledge", done.uuid);
    assert!(page.contains(&acknowledge), "{page}");
    let ack = |uuid: Uuid| {
        client
            .post(format!("{base}/ui/admin/incidents/{uuid}/acknowledge"))
            .basic_auth("admin", Some("secret"))
            .header("origin", &origin)
            .body(format!("csrf={token}"))
    };
    assert_eq!(ack(blocked.uuid).send().await.unwrap().status(), 409);
    let submitted_before = h.sim.submissions().len();
    assert_eq!(ack(done.uuid).send().await.unwrap().status(), 303);
    // Issue 25 (4): no Ganeti write from the HTTP handler; the tag is still on the node.
    assert_eq!(
        h.sim.submissions().len(),
        submitted_before,
        "{:?}",
        h.sim.submissions()
    );
    assert!(h.node_tags(&node(3)).contains(&done.tag));
    let mut h = h;
    let uuid = done.uuid;
    assert!(
        h.until(5, |incidents| incidents
            .iter()
            .all(|i| i.uuid != uuid || i.acknowledged))
            .await
            .unwrap(),
        "a round records the acknowledgement"
    );
    let tags = h.sim.with_cluster(|c| c.nodes[&node(3)].tags.clone());
    assert!(!tags.contains(&done.tag), "{tags:?}");
    // The round removed it with the reason trail (incident and intent) and recorded the step.
    let untag = h
        .sim
        .submissions()
        .into_iter()
        .skip(submitted_before)
        .find(|s| s.op_id == "OP_TAGS_DEL")
        .expect("the round removed the tag");
    assert_eq!(untag.intent, Some(format!("{uuid}/untag-1")), "{untag:?}");
    assert!(
        untag
            .reason_text
            .as_deref()
            .is_some_and(|t| t.contains("acknowledged by admin on the nodecare web page")),
        "{untag:?}"
    );
    let intents = h.coordinator.api().store.intents().unwrap();
    assert!(
        intents
            .iter()
            .any(|i| i.incident == uuid && i.key == "untag-1"),
        "{intents:?}"
    );

    // The breaker's reset and the overrides: same checks, audited under the user's name.
    let store = &h.coordinator.api().store;
    store
        .set_breaker_open("test storm", nodecare_protocol::now_ms())
        .unwrap();
    let form = |path: &str, body: String| {
        client
            .post(format!("{base}{path}"))
            .basic_auth("admin", Some("secret"))
            .header("origin", &origin)
            .header("content-type", "application/x-www-form-urlencoded")
            .body(body)
    };
    assert_eq!(
        form("/ui/admin/breaker/reset", "reason=x".into())
            .send()
            .await
            .unwrap()
            .status(),
        403,
        "no form token"
    );
    assert!(store.breaker().unwrap().open);
    let answer = form(
        "/ui/admin/breaker/reset",
        format!("csrf={token}&reason=detector+fixed"),
    )
    .send()
    .await
    .unwrap();
    assert_eq!(answer.status(), 303);
    let breaker = store.breaker().unwrap();
    assert!(!breaker.open);
    assert_eq!(breaker.reset_by.as_deref(), Some("admin"));
    let domain = h
        .coordinator
        .api()
        .board
        .gate
        .read()
        .unwrap()
        .as_ref()
        .and_then(|g| g.view.nodes.values().next().map(|f| f.domain.clone()))
        .unwrap_or_else(|| "group:default".to_owned());
    let answer = form(
        "/ui/admin/overrides",
        format!(
            "csrf={token}&domain={}&hours=2&reason=firmware+%26+bios",
            domain.replace(':', "%3A")
        ),
    )
    .send()
    .await
    .unwrap();
    assert_eq!(answer.status(), 303);
    let overrides = store
        .overrides_in_force(nodecare_protocol::now_ms())
        .unwrap();
    assert_eq!(overrides.len(), 1);
    assert_eq!(
        (
            overrides[0].domain.as_str(),
            overrides[0].reason.as_str(),
            overrides[0].who.as_str()
        ),
        (domain.as_str(), "firmware & bios", "admin")
    );
    let page = client
        .get(&admin)
        .basic_auth("admin", Some("secret"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let revoke = format!("/ui/admin/overrides/{}/revoke", overrides[0].id);
    assert!(page.contains(&revoke), "{page}");
    let answer = form(&revoke, format!("csrf={token}")).send().await.unwrap();
    assert_eq!(answer.status(), 303);
    assert!(
        store
            .overrides_in_force(nodecare_protocol::now_ms())
            .unwrap()
            .is_empty()
    );
    let log = store.audit_log(10).unwrap();
    assert!(
        log.iter()
            .filter(|e| !e.what.starts_with("open"))
            .all(|e| e.who == "admin"),
        "{log:#?}"
    );
    server.abort();
}

/// Hosts Chromium itself talks to, whatever page it shows.
const BROWSER_SERVICES: &[&str] = &[
    "clients2.google.com",
    "update.googleapis.com",
    "accounts.google.com",
    "optimizationguide-pa.googleapis.com",
    "content-autofill.googleapis.com",
];

fn find_chromium() -> Option<PathBuf> {
    ["/usr/bin/chromium", "/usr/bin/chromium-browser"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
}

/// Records the first line of every request a browser sends to it as its proxy: any request
/// that is not to the coordinator on loopback ends up here.
async fn recording_proxy() -> (String, Arc<Mutex<Vec<String>>>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap().to_string();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let record = Arc::clone(&seen);
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let record = Arc::clone(&record);
            tokio::spawn(async move {
                let mut buffer = vec![0u8; 4096];
                let n = stream.read(&mut buffer).await.unwrap_or(0);
                let text = String::from_utf8_lossy(&buffer[..n]);
                let first = text.lines().next().unwrap_or("").to_owned();
                record.lock().unwrap().push(first);
            });
        }
    });
    (address, seen)
}

#[allow(
    clippy::disallowed_methods,
    reason = "the browser under test is started by the test itself, not by nodecare"
)]
async fn chromium(
    binary: &Path,
    profile: &Path,
    proxy: &str,
    extra: &[String],
) -> (String, String) {
    let output = tokio::process::Command::new(binary)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--disable-extensions",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-default-apps",
            "--no-pings",
            "--disable-features=NetworkTimeServiceQuerying,OptimizationHints,MediaRouter,Translate",
            "--enable-logging=stderr",
            "--v=0",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg(format!("--proxy-server=http://{proxy}"))
        .args(extra)
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(Duration::from_secs(120), output)
        .await
        .expect("chromium finishes within 2 minutes")
        .expect("chromium starts");
    (
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn page_in_headless_chromium() {
    let Some(binary) = find_chromium() else {
        let required = std::env::var("NODECARE_REQUIRE_BROWSER").is_ok_and(|v| v == "1");
        assert!(
            !required,
            "NODECARE_REQUIRE_BROWSER=1 but chromium is missing (apt-get install chromium)"
        );
        eprintln!("skipped: chromium is not installed (apt-get install chromium)");
        return;
    };
    let (h, base, server, _api) = scenario().await;
    let (proxy, requests) = recording_proxy().await;
    let profile = tempfile::tempdir().unwrap();
    let url = format!("{base}/ui/");
    let (dom, log) = chromium(
        &binary,
        profile.path(),
        &proxy,
        &["--dump-dom".into(), url.clone()],
    )
    .await;
    let incidents = h.incidents().unwrap();
    let done = incidents.iter().find(|i| i.node == node(3)).unwrap();
    let waiting = incidents.iter().find(|i| i.node == node(2)).unwrap();
    assert!(
        dom.contains(&format!("incident-{}", done.uuid)),
        "{dom}\n{log}"
    );
    assert!(dom.contains(&format!("incident-{}", waiting.uuid)), "{dom}");
    let reason = waiting.blocked_by.as_deref().unwrap();
    assert!(reason.starts_with("cap: cluster"), "{reason}");
    assert!(
        dom.contains(reason),
        "the blocked incident's reason is shown: {dom}"
    );
    let job = done.jobs.first().copied().unwrap();
    assert!(
        dom.contains(&format!("<td class=\"job-id\">{job}</td>")),
        "job {job} is shown: {dom}"
    );
    assert!(dom.contains("unreachable"), "node5's agent is down: {dom}");
    // A phone-sized screenshot for people to look at.
    let target = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/web-status.png");
    if let Some(dir) = target.parent() {
        std::fs::create_dir_all(dir).unwrap();
    }
    let (_, shot_log) = chromium(
        &binary,
        profile.path(),
        &proxy,
        &[
            format!("--screenshot={}", target.display()),
            "--window-size=412,1600".into(),
            "--hide-scrollbars".into(),
            url,
        ],
    )
    .await;
    let png = std::fs::read(&target).unwrap();
    assert!(png.starts_with(b"\x89PNG"), "{shot_log}");
    // Nothing fetched from anywhere but the coordinator: every request off loopback went to
    // the recording proxy, and only the browser's own services (clock, updates, accounts) may
    // be there; the DOM references nothing off the page's origin either.
    let requests = requests.lock().unwrap().clone();
    let off: Vec<&String> = requests
        .iter()
        .filter(|line| !BROWSER_SERVICES.iter().any(|host| line.contains(host)))
        .collect();
    assert!(
        off.is_empty(),
        "the page made requests off the coordinator: {off:?}"
    );
    for attribute in ["src=\"", "href=\"", "action=\""] {
        for rest in dom.split(attribute).skip(1) {
            let target = rest.split('"').next().unwrap_or("");
            assert!(
                target.starts_with('/') || target.starts_with('#'),
                "{attribute}{target}\" leaves the coordinator"
            );
        }
    }
    assert!(!dom.contains("url("), "no style fetches anything");
    for text in [&log, &shot_log] {
        for line in text.lines() {
            assert!(
                !(line.contains("CONSOLE") || line.contains("Uncaught")),
                "script error or console message: {line}"
            );
        }
    }
    server.abort();
}

/// Instance repairs (harep's duty) have their own section: instance, state, the repair, what
/// happens and what holds it back.
#[test]
fn instance_repairs_are_shown_with_what_holds_them() {
    let mut snapshot = fixed_snapshot();
    snapshot.instance_repairs = vec![nodecare_protocol::status::InstanceRepairSummary {
        instance: "inst3.example.com".into(),
        state: "Needs repair".into(),
        needs: Some("failover".into()),
        note: "primary node4.example.com is offline".into(),
        blocked_by: Some("storm breaker open: 9 of 20 nodes opened incidents within 120 s".into()),
    }];
    let html = render(&snapshot, None);
    assert!(html.contains("id=\"instance-repairs\""), "{html}");
    assert!(html.contains("id=\"instance-inst3.example.com\""));
    assert!(html.contains("primary node4.example.com is offline"));
    assert!(html.contains("storm breaker open: 9 of 20 nodes"));
    assert!(!render(&fixed_snapshot(), None).contains("Instance repairs"));
}

/// A page on another site that posts a `text/plain` form to the JSON API as soon as it opens,
/// with the operator's credentials in the form's address.
async fn attacking_site(target: &str) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let action = target.replacen("http://", "http://admin:secret@", 1);
    let page = format!(
        "<!doctype html><html><body>\
         <form id=f method=post enctype=text/plain action=\"{action}/1/overrides\">\
         <input name='{{\"domain\":\"group:default\",\"duration_s\":604800,\"reason\":\"csrf' value='\"}}'>\
         </form><script>document.getElementById('f').submit()</script></body></html>"
    );
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let page = page.clone();
            tokio::spawn(async move {
                let mut buffer = vec![0u8; 4096];
                let _read = stream.read(&mut buffer).await;
                let answer = format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{page}",
                    page.len()
                );
                let _written = stream.write_all(answer.as_bytes()).await;
            });
        }
    });
    // Another site: `localhost` is not `127.0.0.1`.
    format!("http://localhost:{port}/")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_site_cannot_write_through_the_json_api_in_chromium() {
    let Some(binary) = find_chromium() else {
        let required = std::env::var("NODECARE_REQUIRE_BROWSER").is_ok_and(|v| v == "1");
        assert!(
            !required,
            "NODECARE_REQUIRE_BROWSER=1 but chromium is missing (apt-get install chromium)"
        );
        eprintln!("skipped: chromium is not installed (apt-get install chromium)");
        return;
    };
    let (h, base, server, _api) = scenario().await;
    let (proxy, _requests) = recording_proxy().await;
    let profile = tempfile::tempdir().unwrap();
    let attack = attacking_site(&base).await;
    let (dom, log) = chromium(
        &binary,
        profile.path(),
        &proxy,
        &[
            "--proxy-bypass-list=<-loopback>;localhost;127.0.0.1".into(),
            "--virtual-time-budget=5000".into(),
            "--dump-dom".into(),
            attack,
        ],
    )
    .await;
    let overrides = h
        .coordinator
        .api()
        .store
        .overrides_in_force(nodecare_protocol::now_ms())
        .unwrap();
    assert!(
        overrides.is_empty(),
        "another site set an override: {overrides:?}\n{dom}\n{log}"
    );
    assert!(
        dom.contains("refused") || dom.contains("Content-Type"),
        "the form reached the API and was refused: {dom}\n{log}"
    );
    server.abort();
}
