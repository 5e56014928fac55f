//! The gate's wire types as the coordinator serves them and its clients send them: one golden
//! JSON file per type under `tests/gate/`, decoded back to the same value. Any change of the
//! wire shape fails here; after an intended change, rewrite the files with
//! `UPDATE_GOLDEN=1 cargo test -p nodecare-protocol --test gate` and review the diff.

#![allow(clippy::unwrap_used, reason = "test code")]

use std::fmt::Debug;
use std::path::PathBuf;

use nodecare_protocol::gate::{
    AuditEntry, BlockedBy, BreakerReset, BreakerView, Disrupted, DisruptionRequest, DomainStatus,
    Grant, OverrideRequest, OverrideView, Refusal, Waiting,
};
use nodecare_protocol::golden::assert_golden;
use serde::Serialize;
use serde::de::DeserializeOwned;

fn check<T: Serialize + DeserializeOwned + PartialEq + Debug>(name: &str, value: &T) {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/gate")
        .join(format!("{name}.json"));
    let mut actual = serde_json::to_string_pretty(value).unwrap();
    actual.push('\n');
    assert_golden(&path, &actual);
    let back: T = serde_json::from_str(&actual).unwrap();
    assert_eq!(&back, value, "{name} does not decode to the same value");
}

const ID: &str = "9a000000-0000-4000-8000-000000000001";

#[test]
fn admission() {
    check(
        "disruption-request",
        &DisruptionRequest {
            node: "node3.example.com".into(),
            reason: "kernel update".into(),
            requester: "reboot@node3".into(),
            ttl_s: 3600,
        },
    );
    check(
        "grant",
        &Grant {
            id: ID.into(),
            node: "node3.example.com".into(),
            reason: "kernel update".into(),
            requester: "reboot@node3".into(),
            granted_ms: 1_795_431_150_000,
            expires_ms: 1_795_434_750_000,
            who: "ops".into(),
        },
    );
    check(
        "refusal",
        &Refusal {
            blocked_by: "failure domain rack:r2 is disrupted (node7: incident 5b2e); rack:r1 waits"
                .into(),
            blocked: BlockedBy::Domain {
                busy: "rack:r2".into(),
                holders: vec!["node7: incident 5b2e".into()],
                wanted: "rack:r1".into(),
            },
        },
    );
    check(
        "refusal-storage",
        &Refusal {
            blocked_by: "storage health unknown: node7 (unreachable)".into(),
            blocked: BlockedBy::Storage {
                what: vec!["node7 (unreachable)".into()],
                unknown: true,
            },
        },
    );
}

#[test]
fn overrides_and_breaker() {
    check(
        "override-request",
        &OverrideRequest {
            domain: "rack:r2".into(),
            until_ms: None,
            duration_s: Some(7200),
            reason: "firmware campaign".into(),
        },
    );
    check(
        "override",
        &OverrideView {
            id: ID.into(),
            domain: "rack:r2".into(),
            until_ms: 1_795_438_350_000,
            reason: "firmware campaign".into(),
            who: "admin".into(),
            created_ms: 1_795_431_150_000,
            revoked_ms: Some(1_795_431_200_000),
            revoked_by: Some("ops".into()),
            active: false,
        },
    );
    check(
        "breaker",
        &BreakerView {
            open: true,
            since_ms: Some(1_795_431_150_000),
            why: Some("6 of 10 agents unreachable or unverifiable (limit 50%)".into()),
            reset_by: Some("ops".into()),
            reset_ms: Some(1_795_430_000_000),
        },
    );
    check(
        "breaker-reset",
        &BreakerReset {
            reason: Some("detector fixed".into()),
        },
    );
    check(
        "domain",
        &DomainStatus {
            domain: "rack:r1".into(),
            nodes: vec!["node1".into(), "node2".into()],
            disrupted: vec![Disrupted {
                node: "node2".into(),
                holder: format!("admission {ID} of reboot@node2"),
            }],
            override_until_ms: Some(1_795_438_350_000),
        },
    );
    check(
        "audit-entry",
        &AuditEntry {
            seq: 7,
            at_ms: 1_795_431_150_000,
            who: "ops".into(),
            what: format!("release disruption {ID} of node3.example.com (requester reboot@node3)"),
            why: "released".into(),
        },
    );
    check(
        "waiting",
        &Waiting {
            duty: "node-repair".into(),
            subject: "node node3".into(),
            blocked_by: "storm breaker open: 6 of 10 agents unreachable".into(),
        },
    );
}
