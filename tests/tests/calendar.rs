//! Maintenance windows and freezes against a live coordinator on the simulated cluster: a
//! freeze set at run time holds another tool's request (`429`, naming the freeze) until it is
//! lifted, is listed, audited and shown in the status and `/metrics`; outside the configured
//! window a request waits naming the next window; neither holds what already holds its nodes.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests")]

use nodecare_protocol::calendar::{CalendarStatus, FreezeView};
use nodecare_protocol::gate::Refusal;
use nodecare_protocol::status::Overview;
use nodecare_tests::harness::{Harness, node};

async fn serve(h: &Harness) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let app = nodecare_coordinator::http::router(h.coordinator.api().clone());
    tokio::spawn(async move { axum::serve(listener, app).await });
    url
}

async fn ask(client: &reqwest::Client, url: &str, n: usize) -> reqwest::Response {
    client
        .post(format!("{url}/1/disruptions"))
        .basic_auth("ops", Some("secret"))
        .json(&serde_json::json!({"node": node(n), "reason": "kernel", "requester": "kured", "ttl_s": 600}))
        .send()
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_freeze_holds_planned_work_until_it_is_lifted() {
    let dir = tempfile::tempdir().unwrap();
    let users = dir.path().join("users");
    nodecare_tests::harness::write_secret(&users, "ops secret write\nviewer look read\n").unwrap();
    let mut h = Harness::new(4, "a:drbd:1,b:drbd:3", move |config| {
        config.users = users;
        config.max_disrupted_nodes = 2;
        config.calendar.time_zone = "UTC".into();
    })
    .await
    .unwrap();
    let url = serve(&h).await;
    let client = reqwest::Client::new();
    h.round().await.unwrap();

    // Only writers freeze; a bad request is a clear 400 and keeps nothing.
    let answer = client
        .post(format!("{url}/1/freezes"))
        .basic_auth("viewer", Some("look"))
        .json(&serde_json::json!({"duration_s": 3600, "reason": "incident 42"}))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 403);
    for (body, says) in [
        (
            serde_json::json!({"duration_s": 3600, "reason": " "}),
            "needs a reason",
        ),
        (
            serde_json::json!({"duration_s": 3600, "until": "2099-01-01", "reason": "x"}),
            "exactly one of until and duration_s",
        ),
        (
            serde_json::json!({"until": "someday", "reason": "x"}),
            "not a date",
        ),
        (
            serde_json::json!({"duration_s": 60, "reason": "x", "by": "me"}),
            "unknown field",
        ),
    ] {
        let answer = client
            .post(format!("{url}/1/freezes"))
            .basic_auth("ops", Some("secret"))
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(answer.status(), 400, "{body}");
        assert!(answer.text().await.unwrap().contains(says), "{body}");
    }
    let listed: CalendarStatus = client
        .get(format!("{url}/1/freezes"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(listed.freezes.is_empty());
    assert_eq!(listed.window, None);

    // A freeze for an hour: another tool's request waits, naming it.
    let answer = client
        .post(format!("{url}/1/freezes"))
        .basic_auth("ops", Some("secret"))
        .json(&serde_json::json!({"duration_s": 3600, "reason": "incident 42 in progress"}))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 201);
    let freeze: FreezeView = answer.json().await.unwrap();
    assert!(freeze.active);
    assert_eq!(freeze.who, "ops");
    let answer = ask(&client, &url, 2).await;
    assert_eq!(answer.status(), 429);
    let refusal: Refusal = answer.json().await.unwrap();
    assert!(
        refusal.blocked_by.starts_with("frozen until ")
            && refusal.blocked_by.contains("incident 42 in progress")
            && refusal.blocked_by.contains(&freeze.id),
        "{}",
        refusal.blocked_by
    );
    // A round sees it: the status, the gauge and the audit log say so.
    h.round().await.unwrap();
    let overview: Overview = client
        .get(format!("{url}/1/overview"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let calendar = overview.calendar.expect("the calendar in the status");
    assert_eq!(calendar.freezes.len(), 1);
    assert!(calendar.freezes[0].active);
    assert!(
        overview
            .audit
            .iter()
            .any(|a| a.who == "ops" && a.what.starts_with("freeze "))
    );
    let metrics = client
        .get(format!("{url}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains("nodecare_coordinator_frozen 1"),
        "{metrics}"
    );
    assert!(metrics.contains("nodecare_coordinator_maintenance_window_open 1"));

    // Lifted: the request is granted; lifting again is a 409, an unknown id a 404.
    let answer = client
        .delete(format!("{url}/1/freezes/{}", freeze.id))
        .basic_auth("ops", Some("secret"))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 200);
    let lifted: FreezeView = answer.json().await.unwrap();
    assert_eq!(lifted.lifted_by.as_deref(), Some("ops"));
    assert!(!lifted.active);
    let answer = client
        .delete(format!("{url}/1/freezes/{}", freeze.id))
        .basic_auth("ops", Some("secret"))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 409);
    let answer = client
        .delete(format!("{url}/1/freezes/{}", uuid::Uuid::nil()))
        .basic_auth("ops", Some("secret"))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 404);
    let answer = ask(&client, &url, 2).await;
    assert_eq!(answer.status(), 201, "{}", answer.text().await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outside_its_window_a_request_waits_naming_the_next_window() {
    let dir = tempfile::tempdir().unwrap();
    let users = dir.path().join("users");
    nodecare_tests::harness::write_secret(&users, "ops secret write\n").unwrap();
    // A window three days from today (UTC): closed now, whatever the day.
    let days = nodecare_protocol::now_ms() / 86_400_000;
    let names = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"];
    let day = names[usize::try_from((days + 3) % 7).unwrap()];
    let window = format!("{day} 02:00-05:00");
    let configured = window.clone();
    let mut h = Harness::new(4, "a:drbd:1,b:drbd:3", move |config| {
        config.users = users;
        config.calendar.time_zone = "UTC".into();
        config.calendar.windows = vec![configured];
    })
    .await
    .unwrap();
    let url = serve(&h).await;
    let client = reqwest::Client::new();
    h.round().await.unwrap();
    let answer = ask(&client, &url, 2).await;
    assert_eq!(answer.status(), 429);
    let refusal: Refusal = answer.json().await.unwrap();
    assert!(
        refusal
            .blocked_by
            .starts_with(&format!("outside the maintenance window (next: {day} "))
            && refusal.blocked_by.contains(&window),
        "{}",
        refusal.blocked_by
    );
    let listed: CalendarStatus = client
        .get(format!("{url}/1/freezes"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(listed.windows, [window]);
    assert!(
        listed
            .window
            .is_some_and(|w| !w.open && w.next_ms.is_some())
    );
    let metrics = client
        .get(format!("{url}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(metrics.contains("nodecare_coordinator_maintenance_window_open 0"));
}

/// `--check-config` reads the calendar's time zone from the system: an unknown one, or a
/// window that does not parse, is a configuration error (exit code 2) naming it.
#[test]
fn check_config_refuses_an_unknown_time_zone_and_a_bad_window() {
    let dir = tempfile::tempdir().unwrap();
    let key_path = dir.path().join("hmac.key");
    std::fs::write(&key_path, b"nodecare-test-cluster-hmac-key\n").unwrap();
    std::fs::set_permissions(
        &key_path,
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )
    .unwrap();
    let run = |calendar: &str| {
        let config = format!(
            "node_name = \"n1\"\nstate_dir = {:?}\nhmac_key = {:?}\n[rapi]\nurl = \"http://127.0.0.1:9\"\nallow_plain_http = true\n{calendar}",
            dir.path().join("state"),
            key_path,
        );
        let path = dir.path().join("coordinator.toml");
        std::fs::write(&path, config).unwrap();
        #[allow(
            clippy::disallowed_methods,
            reason = "the test runs the daemon's binary"
        )]
        let output =
            std::process::Command::new(env!("CARGO_BIN_EXE_nodecare-coordinator-under-test"))
                .arg("--config")
                .arg(&path)
                .arg("--check-config")
                .env("NODECARE_LOG", "error")
                .output()
                .unwrap();
        (
            output.status.code(),
            String::from_utf8_lossy(&output.stdout).into_owned(),
            String::from_utf8_lossy(&output.stderr).into_owned(),
        )
    };
    let (code, stdout, stderr) =
        run("[calendar]\ntime_zone = \"UTC\"\nwindows = [\"Tue,Thu 02:00-05:00\"]\n");
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    assert!(stdout.contains("Tue,Thu 02:00-05:00"), "{stdout}");
    let (code, _, stderr) = run("[calendar]\ntime_zone = \"Mars/Olympus_Mons\"\n");
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("calendar.time_zone \"Mars/Olympus_Mons\""),
        "{stderr}"
    );
    let (code, _, stderr) = run("[calendar]\nwindows = [\"Tue 02:00\"]\n");
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("window \"Tue 02:00\""), "{stderr}");
}

/// The admin page sets a freeze (form token, same origin) and lifts it; the page lists it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_admin_page_sets_and_lifts_a_freeze() {
    let dir = tempfile::tempdir().unwrap();
    let users = dir.path().join("users");
    nodecare_tests::harness::write_secret(&users, "admin secret write\n").unwrap();
    let mut h = Harness::new(3, "a:diskless:1", move |config| {
        config.users = users;
        config.calendar.time_zone = "UTC".into();
    })
    .await
    .unwrap();
    let base = serve(&h).await;
    h.round().await.unwrap();
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let admin_page = || async {
        client
            .get(format!("{base}/ui/admin/"))
            .basic_auth("admin", Some("secret"))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
    };
    let page = admin_page().await;
    assert!(page.contains("action=\"/ui/admin/freezes\""), "{page}");
    assert!(!page.contains("section id=\"calendar\""));
    let token = page
        .split("name=\"csrf\" value=\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .unwrap()
        .to_owned();
    let post = |path: String, body: String| {
        client
            .post(format!("{base}{path}"))
            .basic_auth("admin", Some("secret"))
            .header("origin", base.clone())
            .header("content-type", "application/x-www-form-urlencoded")
            .body(body)
            .send()
    };
    // Without the form's token: refused, nothing kept.
    let answer = post("/ui/admin/freezes".into(), "hours=2&reason=x".into())
        .await
        .unwrap();
    assert_eq!(answer.status(), 403);
    assert!(h.coordinator.api().store.freezes().unwrap().is_empty());
    let answer = post(
        "/ui/admin/freezes".into(),
        format!("csrf={token}&hours=2&reason=storage+firmware+window"),
    )
    .await
    .unwrap();
    assert_eq!(answer.status(), 303);
    let freezes = h.coordinator.api().store.freezes().unwrap();
    assert_eq!(freezes.len(), 1);
    assert_eq!(freezes[0].who, "admin");
    assert_eq!(freezes[0].reason, "storage firmware window");
    let page = admin_page().await;
    assert!(page.contains("section id=\"calendar\""), "{page}");
    assert!(page.contains("storage firmware window"));
    let lift = format!("/ui/admin/freezes/{}/lift", freezes[0].id);
    assert!(page.contains(&lift), "{page}");
    let answer = post(lift, format!("csrf={token}")).await.unwrap();
    assert_eq!(answer.status(), 303);
    let freezes = h.coordinator.api().store.freezes().unwrap();
    assert_eq!(freezes[0].lifted_by.as_deref(), Some("admin"));
}
