//! The confd client against fake confd servers on loopback that verify requests exactly as
//! Ganeti's confd does (magic, HMAC-SHA1 over salt+msg, clock skew) and sign their replies with
//! the request's rsalt.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use nodecare_collectors::confd::{
    ClusterView, ConfdClient, ConfdError, ConfdKey, ConfdReply, RequestType, decode_request,
    encode_reply, refresh_once, spawn_refresher,
};
use serde_json::{Value, json};
use tokio::net::UdpSocket;

fn key() -> ConfdKey {
    ConfdKey::new(b"2bb5e2f8c7a8e5b1d3b1f0a4c9e6d7f8a1b2c3d4\n".to_vec())
}

/// What the fake cluster answers per request type.
fn answer(request_type: u64, query: &Value) -> (u64, Value) {
    match (request_type, query.as_str()) {
        (0, _) => (0, json!(true)),
        (11, _) => (
            0,
            json!({
                "cpu-avg-load": {"active": true, "interval": 5_000_000u64},
                "lv": {"active": false, "interval": 60_000_000u64},
                "drbd": {"active": true, "interval": 10_000_000u64},
            }),
        ),
        (8, Some("node1.example.com")) => (
            0,
            json!([[{"name": "inst1", "uuid": "u1", "admin_state": "up", "hypervisor": "kvm", "mtime": 1.5}], [{"name": "inst2"}]]),
        ),
        (7, Some("node1.example.com")) => (
            0,
            json!([[
                "node1.example.com",
                0,
                "inst1",
                "disk/0",
                "primary",
                "node2.example.com"
            ]]),
        ),
        (9, Some("inst1")) => (
            0,
            json!([{"dev_type": "drbd", "children": [
                {"dev_type": "plain", "logical_id": ["xenvg", "u1.disk0_data"]},
                {"dev_type": "plain", "logical_id": ["xenvg", "u1.disk0_meta"]}]}]),
        ),
        (9, Some("inst2")) => (
            0,
            json!([{"dev_type": "plain", "logical_id": ["xenvg", "u2.disk0"]}]),
        ),
        _ => (1, json!("Node not found in the configuration")),
    }
}

/// A fake confd server; `serial` lets tests tell servers apart.
async fn fake_confd(key: ConfdKey, serial: i64) -> SocketAddr {
    let socket = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let address = socket.local_addr().unwrap();
    tokio::spawn(async move {
        let mut buffer = vec![0u8; 4096];
        loop {
            let Ok((length, peer)) = socket.recv_from(&mut buffer).await else {
                return;
            };
            // Requests that fail verification get no answer, as with the real confd.
            let Ok(request) = decode_request(&key, &buffer[..length], SystemTime::now()) else {
                continue;
            };
            let (status, answer) = answer(request.request_type, &request.query);
            let reply = ConfdReply {
                status,
                answer,
                serial,
            };
            let datagram = encode_reply(&key, &reply, &request.rsalt);
            drop(socket.send_to(&datagram, peer).await);
        }
    });
    address
}

#[tokio::test]
async fn query_gets_a_verified_answer() {
    let server = fake_confd(key(), 7).await;
    let client = ConfdClient::new(key(), vec![server], Duration::from_secs(2));
    let reply = client.query(RequestType::Ping, Value::Null).await.unwrap();
    assert_eq!(
        reply,
        ConfdReply {
            status: 0,
            answer: json!(true),
            serial: 7
        }
    );
    let error = client
        .query(RequestType::NodeInstances, json!("nosuchnode"))
        .await
        .unwrap_err();
    assert!(
        matches!(error, ConfdError::Status { status: 1, .. }),
        "{error}"
    );
}

#[tokio::test]
async fn highest_serial_wins_across_master_candidates() {
    let servers = vec![
        fake_confd(key(), 3).await,
        fake_confd(key(), 9).await,
        fake_confd(key(), 5).await,
    ];
    let client = ConfdClient::new(key(), servers, Duration::from_secs(2));
    let reply = client.query(RequestType::Ping, Value::Null).await.unwrap();
    assert_eq!(reply.serial, 9);
}

#[tokio::test]
async fn wrong_key_or_silent_server_times_out_quickly() {
    let server = fake_confd(ConfdKey::new(b"another cluster\n".to_vec()), 1).await;
    let client = ConfdClient::new(key(), vec![server], Duration::from_millis(300));
    let started = Instant::now();
    let error = client
        .query(RequestType::Ping, Value::Null)
        .await
        .unwrap_err();
    assert_eq!(error, ConfdError::Timeout(Duration::from_millis(300)));
    assert!(started.elapsed() < Duration::from_secs(2));

    // A server signing with another key is rejected, not believed.
    let socket = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let address = socket.local_addr().unwrap();
    tokio::spawn(async move {
        let mut buffer = vec![0u8; 4096];
        while let Ok((length, peer)) = socket.recv_from(&mut buffer).await {
            let Ok(request) = decode_request(&key(), &buffer[..length], SystemTime::now()) else {
                continue;
            };
            let forged = encode_reply(
                &ConfdKey::new(b"forger".to_vec()),
                &ConfdReply {
                    status: 0,
                    answer: json!("forged"),
                    serial: 99,
                },
                &request.rsalt,
            );
            drop(socket.send_to(&forged, peer).await);
        }
    });
    let client = ConfdClient::new(key(), vec![address], Duration::from_millis(300));
    let error = client
        .query(RequestType::Ping, Value::Null)
        .await
        .unwrap_err();
    assert_eq!(error, ConfdError::BadSignature);
}

#[tokio::test]
async fn refresh_builds_the_cluster_view() {
    let server = fake_confd(key(), 4).await;
    let client = ConfdClient::new(key(), vec![server], Duration::from_secs(2));
    let previous = ClusterView {
        node_name: "node1.example.com".into(),
        ..ClusterView::default()
    };
    let view = refresh_once(&client, &previous).await;
    assert_eq!(view.last_error, None);
    assert!(view.refreshed_at.is_some());
    assert!(view.is_active("cpu-avg-load"));
    assert!(!view.is_active("lv"));
    // Collectors the cluster does not know (nodecare's own) stay enabled.
    assert!(view.is_active("inst-status-kvm"));
    assert_eq!(
        view.collector_config("drbd").unwrap().interval,
        Duration::from_secs(10)
    );
    let instances = view.instances.as_ref().unwrap();
    assert_eq!(instances.primary[0].admin_state.as_deref(), Some("up"));
    assert_eq!(instances.secondary[0].name, "inst2");
    assert_eq!(view.drbd_minors.as_ref().unwrap()[0].instance, "inst1");
    let owners = view.lv_owners.as_ref().unwrap();
    assert_eq!(
        owners[&("xenvg".to_owned(), "u1.disk0_meta".to_owned())],
        "inst1"
    );
    assert_eq!(
        owners[&("xenvg".to_owned(), "u2.disk0".to_owned())],
        "inst2"
    );
}

#[tokio::test]
async fn unreachable_confd_keeps_the_last_good_view() {
    let server = fake_confd(key(), 4).await;
    let client = ConfdClient::new(key(), vec![server], Duration::from_secs(2));
    let previous = ClusterView {
        node_name: "node1.example.com".into(),
        ..ClusterView::default()
    };
    let good = refresh_once(&client, &previous).await;
    let dead = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let silent = ConfdClient::new(
        key(),
        vec![dead.local_addr().unwrap()],
        Duration::from_millis(100),
    );
    let stale = refresh_once(&silent, &good).await;
    assert!(
        stale
            .last_error
            .as_deref()
            .unwrap()
            .contains("no confd answer")
    );
    assert_eq!(stale.refreshed_at, good.refreshed_at);
    assert!(!stale.is_active("lv"));
    assert_eq!(stale.drbd_minors, good.drbd_minors);
}

#[tokio::test]
async fn background_refresher_never_blocks_readers() {
    // A confd that never answers: readers still get a view immediately.
    let dead = Arc::new(UdpSocket::bind("127.0.0.1:0").await.unwrap());
    let client = ConfdClient::new(
        key(),
        vec![dead.local_addr().unwrap()],
        Duration::from_secs(5),
    );
    let handle = spawn_refresher(client, "node1.example.com".into(), Duration::from_secs(15));
    let started = Instant::now();
    for _ in 0..1000 {
        let view = handle.current();
        assert_eq!(view.node_name, "node1.example.com");
        assert!(view.is_active("lv"));
    }
    assert!(started.elapsed() < Duration::from_secs(1));

    let server = fake_confd(key(), 4).await;
    let client = ConfdClient::new(key(), vec![server], Duration::from_secs(2));
    let mut handle = spawn_refresher(client, "node1.example.com".into(), Duration::from_secs(15));
    tokio::time::timeout(Duration::from_secs(5), async {
        while handle.current().refreshed_at.is_none() {
            assert!(handle.changed().await);
        }
    })
    .await
    .unwrap();
    assert!(!handle.current().is_active("lv"));
}
