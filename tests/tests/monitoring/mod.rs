//! `/metrics` and the incident webhook, over a whole evacuation.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use nodecare_coordinator::notify::WebhookSettings;
use nodecare_core::incident::RepairStatus;
use nodecare_tests::fake_agent::verdict;
use nodecare_tests::harness::{Harness, node};
use serde_json::{Value, json};

/// A webhook receiver that answers 500 to the first `failures` requests, then 200.
#[derive(Clone, Default)]
struct Receiver {
    attempts: Arc<Mutex<usize>>,
    failures: usize,
    received: Arc<Mutex<Vec<Value>>>,
}

#[allow(clippy::unwrap_used, reason = "test helper")]
async fn receive(State(receiver): State<Receiver>, Json(body): Json<Value>) -> StatusCode {
    let mut attempts = receiver.attempts.lock().unwrap();
    *attempts += 1;
    if *attempts <= receiver.failures {
        return StatusCode::INTERNAL_SERVER_ERROR;
    }
    receiver.received.lock().unwrap().push(body);
    StatusCode::NO_CONTENT
}

fn sample<'a>(text: &'a str, series: &str) -> Option<&'a str> {
    text.lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' '))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_and_webhook_follow_an_evacuation() {
    let mut h = Harness::new(3, "a:drbd:2,b:diskless:2", |_| {})
        .await
        .unwrap();
    let receiver = Receiver {
        failures: 2,
        ..Receiver::default()
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let hook = listener.local_addr().unwrap();
    let app = axum::Router::new()
        .route("/hook", axum::routing::post(receive))
        .with_state(receiver.clone());
    let hook_server = tokio::spawn(async move { axum::serve(listener, app).await });
    let worker = h
        .coordinator
        .api()
        .board
        .start_webhook(WebhookSettings {
            url: format!("http://{hook}/hook"),
            timeout: Duration::from_secs(5),
            retries: 3,
            backoff: Duration::from_millis(20),
        })
        .unwrap();

    h.agents
        .get(&node(2))
        .unwrap()
        .set_verdict(verdict("evacuate", json!({"disk": "sdb"}), None));
    let done = h
        .until(20, |i| {
            i.len() == 1 && i[0].repair_status == RepairStatus::Completed
        })
        .await
        .unwrap();
    assert!(done, "{:#?}", h.incidents().unwrap());
    // Acknowledge: the tag is removed.
    h.sim
        .with_cluster(|c| c.nodes.get_mut(&node(2)).unwrap().tags.clear());
    h.round().await.unwrap();

    // The webhook got every change, in order, despite two 500s (retried with backoff).
    let mut events = Vec::new();
    for _ in 0..200 {
        events = receiver
            .received
            .lock()
            .unwrap()
            .iter()
            .map(|body| body["event"].as_str().unwrap_or("").to_owned())
            .collect();
        if events.len() >= 4 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert_eq!(
        events,
        ["noted", "pending", "completed", "acknowledged"],
        "{:#?}",
        receiver.received.lock().unwrap()
    );
    let bodies = receiver.received.lock().unwrap().clone();
    // Every body decodes as the protocol's wire type (unknown fields refused).
    for body in &bodies {
        let typed: nodecare_protocol::notify::Notification =
            serde_json::from_value(body.clone()).unwrap();
        assert_eq!(typed.node, node(2));
    }
    let incident = &h.incidents().unwrap()[0];
    assert_eq!(bodies[2]["incident"], json!(incident.uuid));
    assert_eq!(bodies[2]["node"], json!(node(2)));
    assert_eq!(bodies[2]["action"], "evacuate");
    assert_eq!(bodies[2]["repair-status"], "completed");
    assert_eq!(bodies[2]["ready_for_repair"], true);
    assert_eq!(bodies[3]["ready_for_repair"], false);
    assert_eq!(*receiver.attempts.lock().unwrap(), 6);

    // /metrics over HTTP.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = nodecare_coordinator::http::router(h.coordinator.api().clone());
    let server = tokio::spawn(async move { axum::serve(listener, app).await });
    let response = reqwest::get(format!("http://{addr}/metrics"))
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert!(
        response.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/plain; version=0.0.4")
    );
    let text = response.text().await.unwrap();
    if let Some(path) = std::env::var_os("NODECARE_METRICS_OUT") {
        std::fs::create_dir_all(&path).unwrap();
        std::fs::write(std::path::Path::new(&path).join("coordinator.txt"), &text).unwrap();
    }
    for (series, expected) in [
        (
            "nodecare_coordinator_incidents{state=\"completed\",action=\"evacuate\"}",
            "1",
        ),
        (
            "nodecare_coordinator_incidents{state=\"pending\",action=\"evacuate\"}",
            "0",
        ),
        ("nodecare_coordinator_agents{outcome=\"verified\"}", "3"),
        ("nodecare_coordinator_agents{outcome=\"unreachable\"}", "0"),
        (
            "nodecare_coordinator_jobs_submitted_total{kind=\"drain\"}",
            "1",
        ),
        (
            "nodecare_coordinator_jobs_submitted_total{kind=\"tag\"}",
            "1",
        ),
        (
            "nodecare_coordinator_jobs_failed_total{kind=\"drain\"}",
            "0",
        ),
        ("nodecare_coordinator_time_to_heal_seconds_count", "1"),
        (
            "nodecare_coordinator_notifications_total{result=\"sent\"}",
            "4",
        ),
        (
            "nodecare_coordinator_notifications_total{result=\"dropped\"}",
            "0",
        ),
        ("nodecare_coordinator_budget_max_disrupted_nodes", "1"),
        ("nodecare_coordinator_budget_in_use", "1"),
        ("nodecare_coordinator_round_errors_total", "0"),
    ] {
        assert_eq!(sample(&text, series), Some(expected), "{series} in\n{text}");
    }
    let moves: u64 = ["migrate", "failover", "replace-secondary"]
        .iter()
        .filter_map(|kind| {
            sample(
                &text,
                &format!("nodecare_coordinator_jobs_submitted_total{{kind=\"{kind}\"}}"),
            )?
            .parse::<u64>()
            .ok()
        })
        .sum();
    assert!(moves >= 2, "{text}");
    let rounds: u64 = sample(&text, "nodecare_coordinator_round_duration_seconds_count")
        .unwrap()
        .parse()
        .unwrap();
    assert!(rounds >= 3, "{text}");
    server.abort();
    hook_server.abort();
    worker.abort();
}
