//! The admission API against a live coordinator on the simulated cluster: the documented
//! reboot script (`packaging/examples/nodecare-reboot`, curl) is granted, refused with `429`
//! while the budget is taken, and granted again once the first node is released; overrides and
//! the breaker reset need a writer and are audited; everything shows in `/1/overview`.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests")]
#![allow(
    clippy::disallowed_methods,
    reason = "the test runs the documented shell script"
)]

use std::path::{Path, PathBuf};
use std::process::Command;

use nodecare_protocol::gate::{BreakerView, Grant, OverrideView, Refusal};
use nodecare_protocol::status::Overview;
use nodecare_tests::harness::{Harness, node};

fn script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../packaging/examples/nodecare-reboot")
}

/// Runs the reboot script; its exit code and output.
async fn reboot(url: &str, dir: &Path, action: &str, node: &str) -> (Option<i32>, String, String) {
    let mut command = Command::new("sh");
    command
        .arg(script())
        .args([action, node])
        .env("NODECARE_URL", url)
        .env("NODECARE_USER", "ops")
        .env("NODECARE_PASSWORD_FILE", dir.join("password"))
        .env("NODECARE_TTL", "600")
        .env("NODECARE_REASON", "kernel \"6.12\" update")
        .env("NODECARE_STATE_DIR", dir.join("state"))
        .env(
            "DRAIN_COMMAND",
            format!("echo \"$1\" >> {}", dir.join("drained").display()),
        )
        .env(
            "REBOOT_COMMAND",
            format!("echo \"$1\" >> {}", dir.join("rebooted").display()),
        )
        .env(
            "UNDRAIN_COMMAND",
            format!("echo \"$1\" >> {}", dir.join("undrained").display()),
        );
    let output = tokio::task::spawn_blocking(move || command.output())
        .await
        .unwrap()
        .unwrap();
    (
        output.status.code(),
        String::from_utf8(output.stdout).unwrap(),
        String::from_utf8(output.stderr).unwrap(),
    )
}

fn lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

/// A round publishes the gate's view on the board.
async fn gate_view(h: &mut Harness) {
    h.round().await.unwrap();
    assert!(h.coordinator.api().board.gate.read().unwrap().is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_reboot_script_is_admitted_refused_and_admitted_again() {
    let dir = tempfile::tempdir().unwrap();
    let users = dir.path().join("users");
    nodecare_tests::harness::write_secret(&users, "ops secret write\nviewer look read\n").unwrap();
    std::fs::write(dir.path().join("password"), "secret\n").unwrap();
    let users_path = users.clone();
    let mut h = Harness::new(4, "a:drbd:1,b:drbd:3", move |config| {
        config.users = users_path;
        config.max_disrupted_nodes = 1;
    })
    .await
    .unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let app = nodecare_coordinator::http::router(h.coordinator.api().clone());
    let server = tokio::spawn(async move { axum::serve(listener, app).await });
    let client = reqwest::Client::new();

    // Before any round the gate has no view: 503, clearly.
    let answer = client
        .post(format!("{url}/1/disruptions"))
        .basic_auth("ops", Some("secret"))
        .json(&serde_json::json!({"node": node(2), "reason": "r", "requester": "q", "ttl_s": 60}))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 503);
    assert!(
        answer
            .text()
            .await
            .unwrap()
            .contains("not finished a round")
    );
    gate_view(&mut h).await;

    // Writes need a writer.
    let answer = client
        .post(format!("{url}/1/disruptions"))
        .json(&serde_json::json!({"node": node(2), "reason": "r", "requester": "q", "ttl_s": 60}))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 401);
    let answer = client
        .post(format!("{url}/1/disruptions"))
        .basic_auth("viewer", Some("look"))
        .json(&serde_json::json!({"node": node(2), "reason": "r", "requester": "q", "ttl_s": 60}))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 403);
    // Bad input is a clear 400 or 404.
    let answer = client
        .post(format!("{url}/1/disruptions"))
        .basic_auth("ops", Some("secret"))
        .json(&serde_json::json!({"node": node(2), "reason": "r", "requester": "q", "ttl_s": 0}))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 400);
    assert!(answer.text().await.unwrap().contains("ttl_s"));
    let answer = client
        .post(format!("{url}/1/disruptions"))
        .basic_auth("ops", Some("secret"))
        .json(&serde_json::json!({"node": "node9", "reason": "r", "requester": "q", "ttl_s": 60}))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 404);

    // node2 is granted: the script drains and reboots it.
    let (code, stdout, stderr) = reboot(&url, dir.path(), "start", &node(2)).await;
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    assert_eq!(lines(&dir.path().join("drained")), [node(2)]);
    assert_eq!(lines(&dir.path().join("rebooted")), [node(2)]);
    let grants: Vec<Grant> = client
        .get(format!("{url}/1/disruptions"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(grants.len(), 1);
    assert_eq!(grants[0].node, node(2));
    assert_eq!(grants[0].who, "ops");
    assert_eq!(grants[0].reason, "kernel \"6.12\" update");
    assert_eq!(
        h.coordinator
            .api()
            .store
            .grants_in_force(nodecare_protocol::now_ms())
            .unwrap()
            .len(),
        1
    );

    // The same requester again: renewed (200), still one grant.
    let (code, stdout, stderr) = reboot(&url, dir.path(), "start", &node(2)).await;
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    let grants: Vec<Grant> = client
        .get(format!("{url}/1/disruptions"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(grants.len(), 1);

    // node3 waits: the budget (one node) is taken by node2's grant. Nothing is drained.
    let (code, stdout, stderr) = reboot(&url, dir.path(), "start", &node(3)).await;
    assert_eq!(code, Some(3), "{stdout}{stderr}");
    assert!(
        stderr.contains("refused, retry later") && stderr.contains("blocked_by"),
        "{stderr}"
    );
    assert_eq!(lines(&dir.path().join("rebooted")), [node(2), node(2)]);
    let answer = client
        .post(format!("{url}/1/disruptions"))
        .basic_auth("ops", Some("secret"))
        .json(&serde_json::json!({"node": node(3), "reason": "r", "requester": "q", "ttl_s": 60}))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 429);
    let refusal: Refusal = answer.json().await.unwrap();
    assert!(refusal.blocked_by.contains(&node(2)), "{refusal:?}");

    // The overview shows the grant holding node2 in its failure domain.
    let overview: Overview = client
        .get(format!("{url}/1/overview"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(overview.grants.len(), 1);
    let busy: Vec<_> = overview
        .domains
        .iter()
        .filter(|d| !d.disrupted.is_empty())
        .collect();
    assert_eq!(busy.len(), 1, "{:?}", overview.domains);
    assert_eq!(busy[0].disrupted[0].node, node(2));
    assert!(
        busy[0].disrupted[0].holder.contains("reboot@"),
        "{:?}",
        busy[0]
    );

    // node2 is back: undrained and released; node3 is granted now.
    let (code, stdout, stderr) = reboot(&url, dir.path(), "finish", &node(2)).await;
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    assert_eq!(lines(&dir.path().join("undrained")), [node(2)]);
    assert!(!dir.path().join(format!("state/grant-{}", node(2))).exists());
    let (code, stdout, stderr) = reboot(&url, dir.path(), "start", &node(3)).await;
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    let (code, _, _) = reboot(&url, dir.path(), "finish", &node(3)).await;
    assert_eq!(code, Some(0));
    // A failed drain gives the grant back: nothing is rebooted, nothing stays held.
    let failing = dir.path().join("failing");
    std::fs::create_dir_all(&failing).unwrap();
    std::fs::copy(dir.path().join("password"), failing.join("password")).unwrap();
    let mut command = Command::new("sh");
    command
        .arg(script())
        .args(["start", &node(4)])
        .env("NODECARE_URL", &url)
        .env("NODECARE_USER", "ops")
        .env("NODECARE_PASSWORD_FILE", failing.join("password"))
        .env("NODECARE_STATE_DIR", failing.join("state"))
        .env("DRAIN_COMMAND", "exit 7")
        .env(
            "REBOOT_COMMAND",
            format!("touch {}", failing.join("rebooted").display()),
        );
    let output = tokio::task::spawn_blocking(move || command.output())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    assert!(!failing.join("rebooted").exists());
    let grants: Vec<Grant> = client
        .get(format!("{url}/1/disruptions"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(grants.is_empty(), "{grants:?}");
    // finish without a grant is a no-op.
    let (code, stdout, _) = reboot(&url, dir.path(), "finish", &node(3)).await;
    assert_eq!(code, Some(0));
    assert!(stdout.contains("nothing to finish"), "{stdout}");

    // An override, revoked; the breaker reset when closed is a 409. All audited.
    let domain = overview.domains[0].domain.clone();
    let answer = client
        .post(format!("{url}/1/overrides"))
        .basic_auth("ops", Some("secret"))
        .json(&serde_json::json!({"domain": domain, "duration_s": 600, "reason": "firmware"}))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 201);
    let set: OverrideView = answer.json().await.unwrap();
    assert!(set.active);
    let answer = client
        .post(format!("{url}/1/overrides"))
        .basic_auth("ops", Some("secret"))
        .json(&serde_json::json!({"domain": "rack:nowhere", "duration_s": 600, "reason": "typo"}))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 400);
    let answer = client
        .delete(format!("{url}/1/overrides/{}", set.id))
        .basic_auth("ops", Some("secret"))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 200);
    let answer = client
        .delete(format!("{url}/1/overrides/{}", set.id))
        .basic_auth("ops", Some("secret"))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 409);
    let answer = client
        .post(format!("{url}/1/breaker/reset"))
        .basic_auth("ops", Some("secret"))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 409);
    h.coordinator
        .api()
        .store
        .set_breaker_open("test storm", nodecare_protocol::now_ms())
        .unwrap();
    // While the breaker is open, nothing new is admitted.
    let (code, _, stderr) = reboot(&url, dir.path(), "start", &node(4)).await;
    assert_eq!(code, Some(3), "{stderr}");
    assert!(
        stderr.contains("storm breaker open: test storm"),
        "{stderr}"
    );
    let answer = client
        .post(format!("{url}/1/breaker/reset"))
        .basic_auth("ops", Some("secret"))
        .json(&serde_json::json!({"reason": "detector fixed"}))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 200);
    let breaker: BreakerView = client
        .get(format!("{url}/1/breaker"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(!breaker.open);
    assert_eq!(breaker.reset_by.as_deref(), Some("ops"));
    let log = h.coordinator.api().store.audit_log(100).unwrap();
    let whats: Vec<&str> = log
        .iter()
        .map(|e| e.what.split(' ').next().unwrap())
        .collect();
    assert_eq!(
        whats,
        [
            "grant", "renew", "release", "grant", "release", "grant", "release", "override",
            "revoke", "open", "reset"
        ],
        "{log:#?}"
    );
    assert!(log.iter().all(|e| !e.who.is_empty()));
    let served: Vec<nodecare_protocol::gate::AuditEntry> = client
        .get(format!("{url}/1/audit?limit=3"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(served, log[log.len() - 3..]);
    let answer = client
        .get(format!("{url}/1/audit?limit=0"))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 400);
    server.abort();
}

/// Overrides are held to their budget in the replicated state: once the overrides in force fill
/// it, a new one is refused with `507` saying why and what to do; revoking one makes room.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_override_past_the_state_budget_is_refused_with_507() {
    let dir = tempfile::tempdir().unwrap();
    let users = dir.path().join("users");
    nodecare_tests::harness::write_secret(&users, "ops secret write\n").unwrap();
    let users_path = users.clone();
    let mut h = Harness::new(4, "a:drbd:1,b:drbd:3", move |config| {
        config.users = users_path;
    })
    .await
    .unwrap();
    gate_view(&mut h).await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let app = nodecare_coordinator::http::router(h.coordinator.api().clone());
    let server = tokio::spawn(async move { axum::serve(listener, app).await });
    let client = reqwest::Client::new();
    let overview: Overview = client
        .get(format!("{url}/1/overview"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let domain = overview.domains[0].domain.clone();
    let reason = "r".repeat(nodecare_protocol::limits::MAX_TEXT_BYTES);
    let post = || {
        client
            .post(format!("{url}/1/overrides"))
            .basic_auth("ops", Some("secret"))
            .json(&serde_json::json!({"domain": domain, "duration_s": 3600, "reason": reason}))
            .send()
    };
    // Writers filled the overrides (directly in the store: the same write as the API's).
    let store = std::sync::Arc::clone(&h.coordinator.api().store);
    let now = nodecare_protocol::now_ms();
    let mut n = 0_u128;
    loop {
        n += 1;
        let new = nodecare_core::gate::Override {
            id: uuid::Uuid::from_u128(n),
            domain: domain.clone(),
            until_ms: now + 3_600_000,
            reason: reason.clone(),
            who: "ops".into(),
            created_ms: now,
        };
        match store.add_override(&new) {
            Ok(()) => {}
            Err(nodecare_coordinator::store::StoreError::Full(_)) => break,
            Err(error) => panic!("{error}"),
        }
    }
    let answer = post().await.unwrap();
    assert_eq!(answer.status(), 507);
    let why = answer.text().await.unwrap();
    assert!(
        why.contains("revoke the overrides no longer needed"),
        "{why}"
    );
    let answer = client
        .delete(format!("{url}/1/overrides/{}", uuid::Uuid::from_u128(1)))
        .basic_auth("ops", Some("secret"))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 200);
    assert_eq!(post().await.unwrap().status(), 201);
    server.abort();
}
