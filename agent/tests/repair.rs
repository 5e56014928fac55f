//! The repair endpoint end to end on loopback: runs, refusals, idempotency, restarts, the lock,
//! the audit log and manual runs.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod repair_support;

use std::time::Duration;

use nodecare_agent::repair::{lock, run_manually};
use nodecare_protocol::repair::RepairRequest;
use nodecare_protocol::sign::{HmacKey, Signer};
use repair_support::*;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_a_command_with_the_verdict_on_stdin_in_an_empty_environment() {
    let fixture = Fixture::new();
    fixture.command(
        "show-env",
        "echo \"stdin=$(cat)\"\necho \"env=$(/usr/bin/env | sort | tr '\\n' ' ')\"\necho oops >&2\nexit 0",
    );
    let server = Server::start(fixture.config()).await;
    let id = incident(1);
    let request = request(&id, "show-env");
    let reply = post(server.addr, &sign(request.clone())).await;
    assert_eq!(reply.status, 202, "{reply:?}");
    assert_eq!(reply.body["state"], "running");
    assert_eq!(reply.body["incident_id"], id.as_str());
    assert!(reply.elapsed < DELAY, "a valid request is not delayed");
    let record = wait_final(server.addr, &id).await;
    assert_eq!(record["state"], "succeeded", "{record}");
    assert_eq!(record["exit_code"], 0);
    assert!(record["duration_ms"].as_u64().is_some());
    assert!(record["finished_at_ms"].as_u64() >= record["started_at_ms"].as_u64());
    let stdout = record["stdout"].as_str().unwrap();
    let stdin_line = stdout
        .lines()
        .next()
        .unwrap()
        .strip_prefix("stdin=")
        .unwrap();
    let echoed: serde_json::Value = serde_json::from_str(stdin_line).unwrap();
    assert_eq!(echoed, request.input);
    let env_line = stdout.lines().nth(1).unwrap();
    assert!(
        env_line.contains("PATH=/usr/sbin:/usr/bin:/sbin:/bin"),
        "{env_line}"
    );
    for inherited in ["HOME=", "USER=", "CARGO", "RUST"] {
        assert!(
            !env_line.contains(inherited),
            "{inherited} leaked: {env_line}"
        );
    }
    assert_eq!(record["stderr"], "oops\n");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn non_zero_exit_is_a_failure_and_output_is_capped() {
    let fixture = Fixture::new();
    fixture.command(
        "fails",
        "head -c 100000 /dev/zero | tr '\\0' x\necho bad >&2\nexit 3",
    );
    let mut config = fixture.config();
    config.stdout_cap = 1000;
    let server = Server::start(config).await;
    let id = incident(2);
    assert_eq!(
        post(server.addr, &sign(request(&id, "fails"))).await.status,
        202
    );
    let record = wait_final(server.addr, &id).await;
    assert_eq!(record["state"], "failed");
    assert_eq!(record["exit_code"], 3);
    assert_eq!(record["stdout"].as_str().unwrap().len(), 1000);
    assert_eq!(record["stdout_truncated"], true);
    assert_eq!(record["stderr"], "bad\n");
    assert_eq!(record["stderr_truncated"], false);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timeout_kills_the_whole_process_group() {
    let fixture = Fixture::new();
    fixture.command(
        "hangs",
        "sleep 300 &\necho $! > @MARKS@/child.pid\necho started\nsleep 300",
    );
    let mut config = fixture.config();
    config
        .command_timeouts
        .insert("hangs".into(), Duration::from_millis(500));
    let server = Server::start(config).await;
    let id = incident(3);
    assert_eq!(
        post(server.addr, &sign(request(&id, "hangs"))).await.status,
        202
    );
    // Progress is visible while it runs.
    wait_until(Duration::from_secs(5), || {
        fixture.marks.join("child.pid").exists()
    })
    .await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    let progress = get(server.addr, &id).await;
    assert_eq!(progress.body["state"], "running");
    assert_eq!(progress.body["stdout"], "started\n");
    let record = wait_final(server.addr, &id).await;
    assert_eq!(record["state"], "timed-out", "{record}");
    assert!(record["duration_ms"].as_u64().unwrap() < 5_000);
    let pid: i32 = std::fs::read_to_string(fixture.marks.join("child.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    wait_until(Duration::from_secs(2), || {
        // Gone, or a zombie waiting for init.
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .map(|stat| stat.contains(") Z "))
            .unwrap_or(true)
    })
    .await;
    server.stop().await;
}

/// Posts `body` and checks it is refused with `status`/`reason`, after the delay, with nothing run.
async fn assert_refused(
    fixture: &Fixture,
    server: &Server,
    body: &[u8],
    status: u16,
    reason: &str,
) {
    let before = fixture.audit_lines().len();
    let reply = post_bytes(server.addr, body).await;
    assert_eq!(reply.status, status, "{reason}: {reply:?}");
    assert_eq!(reply.body["state"], "refused", "{reply:?}");
    assert_eq!(reply.body["reason"], reason, "{reply:?}");
    assert!(!reply.body["message"].as_str().unwrap().is_empty());
    assert!(
        reply.elapsed >= DELAY,
        "{reason}: answered after {:?}",
        reply.elapsed
    );
    assert_eq!(fixture.runs_of("fix"), 0, "{reason}: something ran");
    let lines = fixture.audit_lines();
    assert_eq!(lines.len(), before + 1, "{reason}: one audit line");
    let last = lines.last().unwrap();
    assert_eq!(last["outcome"], "refused");
    assert_eq!(last["detail"], reason);
    assert!(last["peer"].as_str().unwrap().starts_with("127.0.0.1:"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_invalid_request_is_refused_and_runs_nothing() {
    let fixture = Fixture::new();
    fixture.counting_command("fix", 0);
    // Whitelisted in name but breaking the rules: group-writable, and a symlink.
    fixture.counting_command("writable", 0);
    std::fs::set_permissions(
        fixture.commands.join("writable"),
        std::os::unix::fs::PermissionsExt::from_mode(0o775),
    )
    .unwrap();
    std::os::unix::fs::symlink(
        fixture.commands.join("fix"),
        fixture.commands.join("linked"),
    )
    .unwrap();
    let server = Server::start(fixture.config()).await;
    let id = incident(10);
    let json = |envelope: &nodecare_protocol::SignedEnvelope| serde_json::to_vec(envelope).unwrap();

    // Another node: an envelope signed for it, and an envelope for us whose payload names it.
    let mut other = request(&id, "fix");
    other.node = "node2.example.com".into();
    assert_refused(
        &fixture,
        &server,
        &json(&sign(other.clone())),
        403,
        "wrong-node",
    )
    .await;
    let signer = Signer::new(HmacKey::new(KEY.to_vec()), NODE);
    let forged = signer
        .sign(serde_json::to_value(&other).unwrap(), 1, now_ms(), 60_000)
        .unwrap();
    assert_refused(&fixture, &server, &json(&forged), 403, "wrong-node").await;

    // Not whitelisted: missing, breaking a rule, a symlink, a path.
    for command in ["missing", "writable", "linked"] {
        assert_refused(
            &fixture,
            &server,
            &json(&sign(request(&id, command))),
            403,
            "not-whitelisted",
        )
        .await;
    }
    let mut path = serde_json::to_value(request(&id, "fix")).unwrap();
    path["command"] = json!("../fix");
    let signed_path = signer.sign(path, 1, now_ms(), 60_000).unwrap();
    assert_refused(&fixture, &server, &json(&signed_path), 400, "malformed").await;

    // Bad signatures: another key, tampering.
    let stranger = Signer::new(HmacKey::new(b"another key".to_vec()), NODE);
    let foreign = nodecare_protocol::repair::sign_repair_request(
        &stranger,
        request(&id, "fix"),
        1,
        now_ms(),
        60_000,
    )
    .unwrap();
    assert_refused(&fixture, &server, &json(&foreign), 401, "bad-signature").await;
    let mut tampered = sign(request(&id, "fix"));
    tampered.payload["input"]["details"] = json!("changed");
    assert_refused(&fixture, &server, &json(&tampered), 401, "bad-signature").await;

    // Expired, and issued in the future.
    let old = nodecare_protocol::repair::sign_repair_request(
        &signer,
        request(&id, "fix"),
        1,
        now_ms() - 3_600_000,
        60_000,
    )
    .unwrap();
    assert_refused(&fixture, &server, &json(&old), 401, "expired").await;
    let future = nodecare_protocol::repair::sign_repair_request(
        &signer,
        request(&id, "fix"),
        1,
        now_ms() + 3_600_000,
        60_000,
    )
    .unwrap();
    assert_refused(&fixture, &server, &json(&future), 401, "expired").await;
    // A validity window longer than the node accepts.
    let long = nodecare_protocol::repair::sign_repair_request(
        &signer,
        request(&id, "fix"),
        1,
        now_ms(),
        30 * 24 * 3_600_000,
    )
    .unwrap();
    assert_refused(&fixture, &server, &json(&long), 400, "malformed").await;

    // Malformed bodies.
    assert_refused(&fixture, &server, b"not json", 400, "malformed").await;
    assert_refused(&fixture, &server, b"{}", 400, "malformed").await;

    // Oversized: declared, and streamed without a length.
    let big = vec![b' '; 300 * 1024];
    assert_refused(&fixture, &server, &big, 413, "body-too-large").await;
    let before = fixture.audit_lines().len();
    let mut chunked = Vec::new();
    for _ in 0..5 {
        chunked.extend_from_slice(format!("{:x}\r\n", 64 * 1024).as_bytes());
        chunked.extend_from_slice(&vec![b' '; 64 * 1024]);
        chunked.extend_from_slice(b"\r\n");
    }
    chunked.extend_from_slice(b"0\r\n\r\n");
    let reply = http(
        server.addr,
        "POST",
        "/1/repair",
        "Transfer-Encoding: chunked\r\n",
        &chunked,
    )
    .await;
    assert_eq!(reply.status, 413, "{reply:?}");
    assert_eq!(reply.body["reason"], "body-too-large");
    assert!(reply.elapsed >= DELAY);
    assert_eq!(fixture.audit_lines().len(), before + 1);

    // Replayed: the second use of an envelope is refused, even though the first ran.
    let envelope = sign(request(&id, "fix"));
    assert_eq!(post(server.addr, &envelope).await.status, 202);
    wait_final(server.addr, &id).await;
    assert_eq!(fixture.runs_of("fix"), 1);
    let reply = post(server.addr, &envelope).await;
    assert_eq!(reply.status, 409);
    assert_eq!(reply.body["reason"], "replayed");
    assert!(reply.elapsed >= DELAY);
    assert_eq!(fixture.runs_of("fix"), 1);

    // Nothing else ran at all.
    assert_eq!(fixture.runs_of("writable"), 0);
    let accepted = fixture
        .audit_lines()
        .iter()
        .filter(|line| line["outcome"] == "accepted")
        .count();
    assert_eq!(accepted, 1);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_are_idempotent_by_incident() {
    let fixture = Fixture::new();
    fixture.command(
        "slow",
        "echo run >> @MARKS@/slow.runs\nsleep 0.5\necho done",
    );
    fixture.counting_command("fix", 0);
    let server = Server::start(fixture.config()).await;
    let id = incident(20);
    let first = request(&id, "slow");
    assert_eq!(post(server.addr, &sign(first.clone())).await.status, 202);
    // While it runs: the same incident (fresh nonce) gets the progress, 202.
    let mut again = first.clone();
    again.nonce = "another-nonce".into();
    let reply = post(server.addr, &sign(again.clone())).await;
    assert_eq!(reply.status, 202, "{reply:?}");
    assert_eq!(reply.body["state"], "running");
    // Another command for the same incident is a conflict.
    let reply = post(server.addr, &sign(request(&id, "fix"))).await;
    assert_eq!(reply.status, 409);
    assert_eq!(reply.body["reason"], "incident-conflict");
    let record = wait_final(server.addr, &id).await;
    assert_eq!(record["state"], "succeeded");
    // After it finished: the final record, 200, and still one run.
    again.nonce = "a-third-nonce".into();
    let reply = post(server.addr, &sign(again)).await;
    assert_eq!(reply.status, 200);
    assert_eq!(reply.body, record);
    assert_eq!(fixture.runs_of("slow"), 1);
    assert_eq!(fixture.runs_of("fix"), 0);
    // Different input for the same incident is a conflict too.
    let mut changed = request(&id, "slow");
    changed.input = json!({"status": "live-repair", "details": "other"});
    assert_eq!(
        post(server.addr, &sign(changed)).await.body["reason"],
        "incident-conflict"
    );
    // Unknown and malformed incident ids.
    assert_eq!(get(server.addr, &incident(21)).await.status, 404);
    assert_eq!(get(server.addr, "nope").await.status, 400);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idempotency_and_replay_protection_survive_a_restart() {
    let fixture = Fixture::new();
    fixture.counting_command("fix", 0);
    fixture.command("hangs", "echo run >> @MARKS@/hangs.runs\nsleep 300");
    let done = incident(30);
    let cut = incident(31);

    let server = Server::start(fixture.config()).await;
    let finished_envelope = sign(request(&done, "fix"));
    assert_eq!(post(server.addr, &finished_envelope).await.status, 202);
    let finished = wait_final(server.addr, &done).await;
    assert_eq!(finished["state"], "succeeded");
    let running = request(&cut, "hangs");
    assert_eq!(post(server.addr, &sign(running.clone())).await.status, 202);
    wait_until(Duration::from_secs(5), || fixture.runs_of("hangs") == 1).await;
    server.crash().await;

    let server = Server::start(fixture.config()).await;
    // The finished run is reported as before and not repeated.
    assert_eq!(get(server.addr, &done).await.body, finished);
    let reply = post(server.addr, &sign(request(&done, "fix"))).await;
    assert_eq!(reply.status, 200);
    assert_eq!(reply.body, finished);
    assert_eq!(fixture.runs_of("fix"), 1);
    // The run cut by the restart is interrupted, and not run again.
    let record = get(server.addr, &cut).await.body;
    assert_eq!(record["state"], "interrupted", "{record}");
    assert!(record["error"].as_str().unwrap().contains("not run again"));
    let mut retry = running;
    retry.nonce = "after-restart".into();
    let reply = post(server.addr, &sign(retry)).await;
    assert_eq!(reply.status, 200);
    assert_eq!(reply.body["state"], "interrupted");
    assert_eq!(fixture.runs_of("hangs"), 1);
    // A nonce used before the restart is still refused.
    let reply = post(server.addr, &finished_envelope).await;
    assert_eq!(reply.body["reason"], "replayed");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_repair_lock_serialises_repairs() {
    let fixture = Fixture::new();
    fixture.counting_command("fix", 0);
    let config = fixture.config();
    let held = lock::acquire(&config.lock_path, Duration::ZERO)
        .await
        .unwrap();
    let server = Server::start(config).await;
    let id = incident(40);
    let reply = post(server.addr, &sign(request(&id, "fix"))).await;
    assert_eq!(reply.status, 503, "{reply:?}");
    assert_eq!(reply.body["reason"], "busy");
    // Busy is not the sender's fault: no deliberate delay beyond the lock wait.
    assert!(reply.elapsed < Duration::from_millis(300) + DELAY);
    assert_eq!(fixture.runs_of("fix"), 0);
    assert_eq!(get(server.addr, &id).await.status, 404);
    drop(held);
    assert_eq!(
        post(server.addr, &sign(request(&id, "fix"))).await.status,
        202
    );
    assert_eq!(wait_final(server.addr, &id).await["state"], "succeeded");
    server.stop().await;
}

/// A request that expires while it waits for the repair lock (the agent stopped meanwhile, or
/// another tool holding the lock) runs nothing once it gets the lock: the command starts only
/// within the request's validity.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_that_expires_while_it_waits_for_the_lock_runs_nothing() {
    let fixture = Fixture::new();
    fixture.counting_command("fix", 0);
    let mut config = fixture.config();
    config.lock_timeout = Duration::from_secs(5);
    let held = lock::acquire(&config.lock_path, Duration::ZERO)
        .await
        .unwrap();
    let server = Server::start(config).await;
    let id = incident(41);
    let signer = Signer::new(HmacKey::new(KEY.to_vec()), NODE.to_owned());
    // Valid for 500 ms; the lock is given up after 3 s (past its expiry and the 2 s of skew).
    let envelope = nodecare_protocol::repair::sign_repair_request(
        &signer,
        request(&id, "fix"),
        1,
        now_ms(),
        500,
    )
    .unwrap();
    let release = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs(3)).await;
        drop(held);
    });
    let reply = post(server.addr, &envelope).await;
    release.await.unwrap();
    assert_eq!(reply.status, 401, "{reply:?}");
    assert_eq!(reply.body["reason"], "expired", "{reply:?}");
    assert_eq!(fixture.runs_of("fix"), 0);
    assert_eq!(get(server.addr, &id).await.status, 404);
    // Refused, not reserved: a fresh request for the incident runs.
    assert_eq!(
        post(server.addr, &sign(request(&id, "fix"))).await.status,
        202
    );
    assert_eq!(wait_final(server.addr, &id).await["state"], "succeeded");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operators_run_repairs_by_hand_in_the_same_sandbox() {
    let fixture = Fixture::new();
    fixture.command(
        "fix",
        "echo run >> @MARKS@/fix.runs\ncat\n/usr/bin/env >&2\nexit 2",
    );
    let config = fixture.config();
    let input = json!({"status": "live-repair", "details": {"host": 3}});
    let record = run_manually(&config, "fix", &input, "uid=0").await.unwrap();
    assert_eq!(record.state, nodecare_protocol::repair::RepairState::Failed);
    assert_eq!(record.exit_code, Some(2));
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&record.stdout).unwrap(),
        input
    );
    // The shell itself adds PWD; nothing comes from the caller's environment.
    let env: Vec<&str> = record
        .stderr
        .lines()
        .filter(|line| !line.starts_with("PWD="))
        .collect();
    assert_eq!(env, ["PATH=/usr/sbin:/usr/bin:/sbin:/bin"]);
    assert!(
        run_manually(&config, "missing", &input, "uid=0")
            .await
            .is_err()
    );
    let lines = fixture.audit_lines();
    let outcomes: Vec<_> = lines
        .iter()
        .map(|line| line["outcome"].as_str().unwrap())
        .collect();
    assert_eq!(outcomes, ["accepted", "finished", "refused"]);
    assert!(lines.iter().all(|line| line["source"] == "cli"));
    // Held lock: the manual run waits, then gives up.
    let held = lock::acquire(&config.lock_path, Duration::ZERO)
        .await
        .unwrap();
    assert!(run_manually(&config, "fix", &input, "uid=0").await.is_err());
    drop(held);
    assert_eq!(fixture.runs_of("fix"), 1);
}

#[test]
fn request_type_is_what_the_coordinator_signs() {
    // The wire contract in one place: these fields, nothing else.
    let value = serde_json::to_value(RepairRequest {
        node: NODE.into(),
        incident_id: incident(1),
        command: "fix".into(),
        input: json!({}),
        nonce: "n".into(),
    })
    .unwrap();
    let mut keys: Vec<_> = value.as_object().unwrap().keys().cloned().collect();
    keys.sort();
    assert_eq!(keys, ["command", "incident_id", "input", "node", "nonce"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_serves_the_repair_endpoint() {
    let fixture = Fixture::new();
    fixture.counting_command("fix", 0);
    let key = fixture.root.path().join("hmac.key");
    std::fs::write(&key, KEY).unwrap();
    // A secret readable by root alone, as the agent requires.
    std::fs::set_permissions(&key, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    let diagnose = fixture.root.path().join("diagnose");
    std::fs::create_dir(&diagnose).unwrap();
    let config = nodecare_agent::config::Config {
        listen: "127.0.0.1:0".parse().unwrap(),
        node_name: Some(NODE.into()),
        hmac_key: key,
        state_dir: fixture.state.clone(),
        diagnose_dir: diagnose,
        repair_dir: fixture.commands.clone(),
        repair_invalid_request_delay_ms: 100,
        ..Default::default()
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let agent = nodecare_agent::serve(config, listener).await.unwrap();
    let addr = agent.local_addr();
    let reply = post_bytes(addr, b"garbage").await;
    assert_eq!(reply.status, 400);
    assert_eq!(reply.body["reason"], "malformed");
    let id = incident(50);
    let reply = post(addr, &sign(request(&id, "fix"))).await;
    // The agent demands a root:root whitelist: as root the command runs, otherwise it is refused.
    if nix::unistd::geteuid().is_root() {
        assert_eq!(reply.status, 202, "{reply:?}");
        assert_eq!(wait_final(addr, &id).await["state"], "succeeded");
        assert_eq!(fixture.runs_of("fix"), 1);
    } else {
        assert_eq!(reply.body["reason"], "not-whitelisted", "{reply:?}");
        assert_eq!(get(addr, &id).await.status, 404);
    }
    assert_eq!(get(addr, &incident(51)).await.status, 404);
    assert!(
        fixture.state.join("repair-audit.jsonl").exists(),
        "the audit log is in the state directory"
    );
    agent.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repair_command_inherits_no_descriptor_but_0_1_2() {
    let fixture = Fixture::new();
    fixture.command("list-fds", "exec ls -l /proc/self/fd/");
    // A descriptor of the agent without close-on-exec (as a jobserver pipe or a descriptor
    // inherited from the service manager would be).
    let marker_dir = tempfile::tempdir().unwrap();
    let marker = std::fs::File::create(marker_dir.path().join("inherited-marker")).unwrap();
    nix::fcntl::fcntl(
        &marker,
        nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::empty()),
    )
    .unwrap();
    let config = fixture.config();
    let record = run_manually(&config, "list-fds", &json!({"status": "Ok"}), "uid=0")
        .await
        .unwrap();
    drop(marker);
    assert_eq!(record.exit_code, Some(0), "{record:?}");
    // `ls -l`: one `N -> target` line per descriptor.
    let descriptors: Vec<(String, String)> = record
        .stdout
        .lines()
        .filter_map(|line| line.split_once(" -> "))
        .map(|(left, target)| {
            let fd = left.rsplit(' ').next().unwrap_or("").to_owned();
            (fd, target.to_owned())
        })
        .collect();
    assert!(descriptors.len() >= 3, "{}", record.stdout);
    for (fd, target) in &descriptors {
        let allowed = matches!(fd.as_str(), "0" | "1" | "2")
            // ls's own handle on the directory it lists
            || (target.starts_with("/proc/") && target.ends_with("/fd"))
            // the checked script, held by its interpreter
            || target.ends_with("/list-fds");
        assert!(
            allowed,
            "descriptor {fd} -> {target} reached the repair command:\n{}",
            record.stdout
        );
    }
    assert!(
        !record.stdout.contains("inherited-marker"),
        "{}",
        record.stdout
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repair_whitelist_reached_through_a_symlink_or_a_writable_parent_runs_nothing() {
    use std::os::unix::fs::PermissionsExt;
    let fixture = Fixture::new();
    fixture.command("fix", "echo run >> @MARKS@/fix.runs");
    let input = json!({"status": "live-repair"});
    let link = fixture.root.path().join("link");
    std::os::unix::fs::symlink(fixture.root.path(), &link).unwrap();
    let mut config = fixture.config();
    config.commands_dir = link.join("node-repair-commands");
    let error = run_manually(&config, "fix", &input, "uid=0")
        .await
        .unwrap_err();
    assert!(error.to_string().contains("is a symbolic link"), "{error}");

    let config = fixture.config();
    std::fs::set_permissions(fixture.root.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let error = run_manually(&config, "fix", &input, "uid=0")
        .await
        .unwrap_err();
    assert!(
        error.to_string().contains("writable by group or others"),
        "{error}"
    );
    std::fs::set_permissions(fixture.root.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    assert!(run_manually(&config, "fix", &input, "uid=0").await.is_ok());
    assert_eq!(fixture.runs_of("fix"), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_refused_requests_keeps_the_audit_of_a_real_repair() {
    let fixture = Fixture::new();
    fixture.counting_command("fix", 0);
    let mut config = fixture.config();
    config.audit_max_bytes = 4 * 1024;
    config.invalid_request_delay = Duration::from_millis(1);
    let server = Server::start(config).await;
    let id = incident(1);
    assert_eq!(
        post(server.addr, &sign(request(&id, "fix"))).await.status,
        202
    );
    wait_final(server.addr, &id).await;
    // Enough refused requests to rotate a log of 4 KiB several times over.
    for _ in 0..200 {
        assert_eq!(post_bytes(server.addr, b"not json").await.status, 400);
    }
    let kept: Vec<_> = ["repair-audit.jsonl", "repair-audit.jsonl.1"]
        .iter()
        .flat_map(|name| fixture.audit_file_lines(name))
        .filter(|line| line["incident_id"] == id.as_str())
        .map(|line| line["outcome"].as_str().unwrap().to_owned())
        .collect();
    assert!(kept.contains(&"accepted".to_owned()), "{kept:?}");
    assert!(kept.contains(&"finished".to_owned()), "{kept:?}");
    let refused = fixture.audit_file_lines("repair-refused.jsonl");
    assert!(!refused.is_empty());
    assert!(refused.iter().all(|line| line["outcome"] == "refused"));
    server.stop().await;
}
