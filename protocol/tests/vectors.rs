//! Known-answer vectors of the wire format: `protocol/tests/vectors/`.
//!
//! Each vector fixes the inputs (key, payload, sequence, times) and the exact bytes a conforming
//! implementation produces: the canonical bytes the MAC covers, the MAC, and the envelope as
//! served. Any change of wire bytes fails here. `docs/PROTOCOL.md` explains the files.
//!
//! After an intended format change, rewrite the files with `UPDATE_GOLDEN=1 cargo test -p
//! nodecare-protocol --test vectors` and review the diff.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code")]

use std::collections::BTreeMap;
use std::path::PathBuf;

use nodecare_protocol::repair::{
    RepairRecord, RepairRequest, RepairState, open_repair_request, sign_repair_request,
};
use nodecare_protocol::{
    DiagnosePayload, DrbdMinor, DrbdState, HmacKey, KeyRing, NodeVerdict, ScriptVerdict,
    SignedEnvelope, Signer, StoragePayload, VerifyPolicy,
};

/// Signing time of every vector (2027-01-15T08:00:00Z).
const ISSUED_AT_MS: u64 = 1_800_000_000_000;
const TTL_MS: u64 = 180_000;
const NODE: &str = "node1.example.com";

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/vectors")
}

/// Compares `actual` with the file `name` byte for byte (or writes it when blessing).
fn check(name: &str, actual: &[u8]) {
    nodecare_protocol::golden::assert_golden(dir().join(name), actual);
}

fn read(name: &str) -> Vec<u8> {
    std::fs::read(dir().join(name)).unwrap()
}

fn key() -> HmacKey {
    let text = String::from_utf8(read("key.hex")).unwrap();
    HmacKey::new(hex::decode(text.trim()).unwrap())
}

fn diagnose_payload() -> DiagnosePayload {
    let disk = ScriptVerdict::parse(
        br#"{"status":"evacuate","details":{"device":"sda","reallocated_sectors":12,"temperature":41.5},"fingerprint":["/details/device"]}"#,
    )
    .unwrap();
    let net = ScriptVerdict::parse(br#"{"status":"Ok"}"#).unwrap();
    let slow = ScriptVerdict::unknown("timed out after 30 s");
    let scripts: BTreeMap<String, ScriptVerdict> = [
        ("disk".to_owned(), disk),
        ("net".to_owned(), net),
        ("slow".to_owned(), slow),
    ]
    .into_iter()
    .collect();
    DiagnosePayload {
        verdict: NodeVerdict::merge(scripts).unwrap(),
        collected_at_ms: ISSUED_AT_MS - 1_500,
        age_ms: 1_500,
        stale: false,
        interval_ms: 60_000,
        boot_id: None,
        reboot_required: None,
    }
}

fn storage_payload() -> StoragePayload {
    StoragePayload {
        drbd: DrbdState::Minors {
            minors: vec![
                DrbdMinor {
                    minor: 0,
                    instance: Some("inst1.example.com".into()),
                    connection: "Connected".into(),
                    local_disk: "UpToDate".into(),
                    peer_disk: "UpToDate".into(),
                    role: "Primary".into(),
                    peer_role: "Secondary".into(),
                    sync_percent: None,
                    out_of_sync_kib: Some(0),
                },
                DrbdMinor {
                    minor: 1,
                    instance: Some("inst2.example.com".into()),
                    connection: "SyncSource".into(),
                    local_disk: "UpToDate".into(),
                    peer_disk: "Inconsistent".into(),
                    role: "Secondary".into(),
                    peer_role: "Primary".into(),
                    sync_percent: Some(45.2),
                    out_of_sync_kib: Some(563_200),
                },
                DrbdMinor::unconfigured(2),
            ],
        },
        collected_at_ms: ISSUED_AT_MS - 200,
        interval_ms: 10_000,
    }
}

fn repair_request() -> RepairRequest {
    RepairRequest {
        node: NODE.into(),
        incident_id: "0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b".into(),
        command: "restart-multipathd".into(),
        input: serde_json::json!({
            "status": "live-repair",
            "command": "restart-multipathd",
            "details": {"multipath": {"status": "live-repair", "command": "restart-multipathd"}},
            "fingerprint": "5c1f…"
        }),
        nonce: "7d3c9a0e5b2f4c18a6e1d0b9f8c7a6e5".into(),
    }
}

/// One signed vector: the signed bytes, the MAC and the envelope, then verification and
/// decoding of the stored envelope.
fn check_envelope(prefix: &str, envelope: &SignedEnvelope) {
    check(
        &format!("{prefix}.signed-bytes.json"),
        &envelope.signed_bytes().unwrap(),
    );
    check(
        &format!("{prefix}.mac.hex"),
        format!("{}\n", envelope.signature).as_bytes(),
    );
    check(
        &format!("{prefix}.envelope.json"),
        &serde_json::to_vec(envelope).unwrap(),
    );
    let stored = read(&format!("{prefix}.envelope.json"));
    let ring = KeyRing::single(key());
    let verified = ring
        .verify_json(
            &stored,
            ISSUED_AT_MS + 1,
            VerifyPolicy::default(),
            Some(NODE),
            None,
        )
        .unwrap();
    assert_eq!(&verified, envelope);
}

#[test]
fn key_id() {
    check("key-id.txt", format!("{}\n", key().id()).as_bytes());
}

#[test]
fn signed_diagnose_envelope() {
    let payload = diagnose_payload();
    check(
        "diagnose.payload.json",
        &nodecare_protocol::canonical_bytes(&serde_json::to_value(&payload).unwrap()).unwrap(),
    );
    let envelope = Signer::new(key(), NODE)
        .sign(
            serde_json::to_value(&payload).unwrap(),
            1_800_000_000_001,
            ISSUED_AT_MS,
            TTL_MS,
        )
        .unwrap();
    check_envelope("diagnose", &envelope);
    let decoded: DiagnosePayload = serde_json::from_value(envelope.payload.clone()).unwrap();
    assert_eq!(decoded, payload);
}

/// The diagnose payload of an agent that reads the boot id and the reboot sentinel: the two
/// fields are added, every other byte is as above, and the payload without them still decodes.
#[test]
fn signed_diagnose_envelope_with_boot_id() {
    let payload = DiagnosePayload {
        boot_id: Some("4c6b1e1a-8f1e-4d2a-9b7c-3e5f6a7b8c9d".into()),
        reboot_required: Some(true),
        ..diagnose_payload()
    };
    check(
        "diagnose-boot.payload.json",
        &nodecare_protocol::canonical_bytes(&serde_json::to_value(&payload).unwrap()).unwrap(),
    );
    let envelope = Signer::new(key(), NODE)
        .sign(
            serde_json::to_value(&payload).unwrap(),
            1_800_000_000_003,
            ISSUED_AT_MS,
            TTL_MS,
        )
        .unwrap();
    check_envelope("diagnose-boot", &envelope);
    let decoded: DiagnosePayload = serde_json::from_value(envelope.payload.clone()).unwrap();
    assert_eq!(decoded, payload);
    // The older payload (no boot fields) decodes with both absent.
    let old: DiagnosePayload = serde_json::from_slice(&read("diagnose.payload.json")).unwrap();
    assert_eq!(old.boot_id, None);
    assert_eq!(old.reboot_required, None);
}

#[test]
fn signed_storage_envelope() {
    let payload = storage_payload();
    check(
        "storage-drbd.payload.json",
        &nodecare_protocol::canonical_bytes(&serde_json::to_value(&payload).unwrap()).unwrap(),
    );
    // The same sequence counter as the diagnose report: the next number after it.
    let envelope = Signer::new(key(), NODE)
        .sign(
            serde_json::to_value(&payload).unwrap(),
            1_800_000_000_002,
            ISSUED_AT_MS,
            30_000,
        )
        .unwrap();
    check_envelope("storage-drbd", &envelope);
    let decoded: StoragePayload = serde_json::from_value(envelope.payload.clone()).unwrap();
    assert_eq!(decoded, payload);
    // A payload of one kind never decodes as the other.
    assert!(serde_json::from_value::<DiagnosePayload>(envelope.payload).is_err());
    let diagnose = serde_json::to_value(diagnose_payload()).unwrap();
    assert!(serde_json::from_value::<StoragePayload>(diagnose).is_err());
}

#[test]
fn signed_repair_request() {
    let envelope = sign_repair_request(
        &Signer::new(key(), NODE),
        repair_request(),
        42,
        ISSUED_AT_MS,
        300_000,
    )
    .unwrap();
    check(
        "repair-request.payload.json",
        &nodecare_protocol::canonical_bytes(&envelope.payload).unwrap(),
    );
    check_envelope("repair-request", &envelope);
    let opened = open_repair_request(
        &KeyRing::single(key()),
        &envelope,
        ISSUED_AT_MS + 1,
        VerifyPolicy::default(),
        NODE,
    )
    .unwrap();
    assert_eq!(opened, repair_request());
}

#[test]
fn repair_record() {
    let mut record = RepairRecord::running(&repair_request(), ISSUED_AT_MS + 20).unwrap();
    record.state = RepairState::Failed;
    record.exit_code = Some(3);
    record.finished_at_ms = Some(ISSUED_AT_MS + 1_250);
    record.duration_ms = Some(1_230);
    record.stdout = "restarting multipathd\n".into();
    record.stderr = "multipathd: still 1 failed path\n".into();
    check("repair-record.json", &serde_json::to_vec(&record).unwrap());
    let stored: RepairRecord = serde_json::from_slice(&read("repair-record.json")).unwrap();
    assert_eq!(stored, record);
}

/// A takeover's read of the replicas (`POST /1/replica/read`) naming the epoch it will start,
/// the agent's promise of it, its refusal, and a push refused for the promise: the fields the
/// promise added, absent when not set, so the older forms read as before.
#[test]
fn replica_read_promise_and_refusals() {
    use nodecare_protocol::replica::{
        PushRefused, ReadAnswer, ReadDecision, ReplicaRead, open_answer, open_read, sign_answer,
        sign_read,
    };
    let read = ReplicaRead {
        node: NODE.into(),
        read_nonce: "4f1d2c3b5a6978e0".into(),
        epoch: Some(3),
    };
    let body = sign_read(&Signer::new(key(), NODE), &read, 7, ISSUED_AT_MS, 60_000).unwrap();
    let envelope = SignedEnvelope::from_json(&body).unwrap();
    check_envelope("replica-read", &envelope);
    let ring = KeyRing::single(key());
    assert_eq!(
        open_read(
            &ring,
            &body,
            ISSUED_AT_MS + 1,
            VerifyPolicy::default(),
            NODE
        )
        .unwrap(),
        read
    );
    let agent = Signer::new(key(), NODE);
    for (prefix, decision, expected) in [
        (
            "replica-answer-promised",
            ReadDecision::Promise(3),
            ReadAnswer::Copy(None),
        ),
        (
            "replica-answer-refused",
            ReadDecision::Refuse { highest: 4 },
            ReadAnswer::Refused { highest: 4 },
        ),
    ] {
        let frame = sign_answer(
            &agent,
            &read.read_nonce,
            decision,
            None,
            ISSUED_AT_MS,
            60_000,
        )
        .unwrap();
        let (envelope, rest) = nodecare_protocol::replica::split_frame(&frame).unwrap();
        assert!(rest.is_empty());
        check_envelope(prefix, &envelope);
        let answer = open_answer(
            &ring,
            &frame,
            ISSUED_AT_MS + 1,
            VerifyPolicy::default(),
            NODE,
            &read.read_nonce,
            Some(3),
        )
        .unwrap();
        assert_eq!(answer, expected, "{prefix}");
    }
    let refused = PushRefused {
        held: nodecare_protocol::replica::Generation {
            epoch: 2,
            number: 5,
        },
        promised: Some(3),
    };
    check(
        "replica-push-refused-promised.json",
        &serde_json::to_vec(&refused).unwrap(),
    );
}
