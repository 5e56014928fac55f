//! Wire types shared by the nodecare agent and coordinator.
//!
//! - [`report`]: the report envelope of Ganeti's monitoring daemon (mond), byte-compatible.
//! - [`verdict`]: the self-diagnose verdict (`Ok`, `live-repair`, `evacuate`, `evacuate-failover`,
//!   plus our explicit `unknown`) and how several scripts' verdicts merge into one.
//! - [`canonical`]: RFC 8785 canonical JSON and verdict fingerprints.
//! - [`sign`]: the HMAC-SHA256 signed envelope, keyed by the cluster HMAC key.
//! - [`diagnose`]: the payload of the signed diagnose report.
//! - [`storage`]: the payload of the signed storage (DRBD) report.
//! - [`load`]: the payload of the signed load report (mond's `cpu-avg-load` and `kvm-inst-rss`).
//! - [`repair`]: the signed repair request and the repair record.
//! - [`json`]: strict JSON reading (a repeated key is an error, never "the last one wins").
//! - [`clock`]: the one wall clock, Unix milliseconds (and seconds), and the one date text.
//! - [`status`]: the coordinator's status API, as `nodecare status` reads it.
//! - [`gate`]: the coordinator's admission API, overrides, storm breaker and failure domains.
//! - [`maintenance`]: rolling maintenance campaigns (`/1/maintenance`) and the hook's stdin.
//! - `golden` (feature `test-support`): the one golden-file check of every crate's tests.

pub mod calendar;
pub mod canonical;
pub mod clock;
pub mod diagnose;
pub mod explain;
pub mod gate;
#[cfg(any(test, feature = "test-support"))]
pub mod golden;
pub mod json;
pub mod limits;
pub mod load;
pub mod maintenance;
pub mod notify;
pub mod repair;
pub mod replica;
pub mod report;
pub mod sign;
pub mod status;
pub mod storage;
pub mod verdict;
pub mod what_if;

pub use canonical::{CanonicalError, CanonicalJson, canonical_bytes, fingerprint_of};
pub use clock::{now_ms, now_s};
pub use diagnose::DiagnosePayload;
pub use load::{CpuAvgLoad, LoadPayload};
pub use report::{CollectorListEntry, Report, ReportKind, StatusCode};
pub use sign::{
    HmacKey, KeyRing, SignError, SignedEnvelope, Signer, Times, VerifyError, VerifyPolicy,
    check_current,
};
pub use storage::{DrbdMinor, DrbdState, StoragePayload};
pub use verdict::{DiagnoseStatus, NodeVerdict, ScriptVerdict, VerdictError};
