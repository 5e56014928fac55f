//! `POST /1/check`: the coordinator asks the agent to run its diagnose scripts now (`nodecare
//! check NODE`) instead of at the next interval.
//!
//! The body is a signed envelope whose payload is a [`CheckRequest`] for this node (the cluster
//! key, expiry, clock skew and node are checked as for a repair request); a replayed nonce is
//! refused, also after a restart (nonces are kept in `<state_dir>/check/nonces.jsonl`, fsynced
//! before the check starts, as the repair nonces are), and at most one check starts per `min_interval` (`429` with `retry_after_ms`
//! otherwise). Accepted: `202` with a [`CheckAnswer`] naming the sequence of the signed report
//! served now; the check's result is the first report with a higher sequence (a long-poll of
//! `/1/report/node/diagnose/signed?after=<sequence>` sees it at once).

use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Body;
use hyper::header::{CONTENT_TYPE, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use nodecare_protocol::repair::{CheckAnswer, CheckRequest, open_check_request};
use nodecare_protocol::{KeyRing, SignedEnvelope, VerifyPolicy, now_ms};
use tokio::sync::Notify;

use crate::cache::{CachedSigned, ReportCache};
use crate::refusals::{Endpoint, Refusals};
use crate::repair::store::{NonceCheck, NonceStore, StoreError};

/// Largest accepted body, in bytes.
pub const MAX_CHECK_BODY_BYTES: usize = 16 * 1024;
/// Fewest milliseconds between two checks.
pub const DEFAULT_MIN_CHECK_INTERVAL: Duration = Duration::from_secs(10);
/// Longest validity window of an accepted request.
pub const MAX_CHECK_TTL: Duration = Duration::from_secs(300);
/// Most nonces remembered (requests beyond are refused until old ones expire).
const MAX_NONCES: usize = 10_000;

/// The check endpoint.
#[derive(Debug)]
pub struct CheckService {
    keys: KeyRing,
    node: String,
    policy: VerifyPolicy,
    min_interval: Duration,
    wake: Arc<Notify>,
    cache: Arc<ReportCache>,
    state: Mutex<State>,
    refusals: Arc<Refusals>,
}

#[derive(Debug)]
struct State {
    last: Option<Instant>,
    nonces: NonceStore,
}

/// Why a check was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// Not a well-formed, authentic request for this node (`400`/`403`).
    Invalid(StatusCode, String),
    /// The nonce was used before (`409`).
    Replayed(String),
    /// The nonce cannot be kept durably (`503`).
    Unavailable(String),
    /// Too soon after the last check (`429`).
    TooSoon {
        /// How long to wait.
        retry_after_ms: u64,
    },
}

impl CheckService {
    /// The endpoint for `node`: a check wakes `wake` (the diagnose collector's scheduler); the
    /// nonces of accepted checks are kept in `nonce_dir/nonces.jsonl`.
    #[allow(
        clippy::too_many_arguments,
        reason = "the parts of one service, set once"
    )]
    pub fn new(
        keys: KeyRing,
        node: String,
        policy: VerifyPolicy,
        min_interval: Duration,
        wake: Arc<Notify>,
        cache: Arc<ReportCache>,
        nonce_dir: &Path,
        refusals: Arc<Refusals>,
    ) -> Result<Self, StoreError> {
        let nonces = NonceStore::open_in(nonce_dir, now_ms())?;
        Ok(Self {
            keys,
            node,
            policy,
            min_interval,
            wake,
            cache,
            state: Mutex::new(State { last: None, nonces }),
            refusals,
        })
    }

    /// Judges a request body at `now` (Unix ms) and, when accepted, wakes the diagnose run.
    pub fn submit(&self, body: &[u8], now: u64) -> Result<CheckAnswer, Refusal> {
        let envelope = SignedEnvelope::from_json(body).map_err(|error| {
            Refusal::Invalid(
                StatusCode::BAD_REQUEST,
                format!("body is not a signed envelope: {error}"),
            )
        })?;
        let request: CheckRequest =
            open_check_request(&self.keys, &envelope, now, self.policy, &self.node)
                .map_err(|error| Refusal::Invalid(StatusCode::FORBIDDEN, error.to_string()))?;
        let window = envelope.expires_at_ms.saturating_sub(envelope.issued_at_ms);
        if u128::from(window) > MAX_CHECK_TTL.as_millis() {
            return Err(Refusal::Invalid(
                StatusCode::BAD_REQUEST,
                format!(
                    "validity window {window} ms exceeds {} ms",
                    MAX_CHECK_TTL.as_millis()
                ),
            ));
        }
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if state.nonces.is_remembered(&request.check_nonce, now) {
            return Err(Refusal::Replayed(format!(
                "nonce {:?} was already used",
                request.check_nonce
            )));
        }
        if state.nonces.len() >= MAX_NONCES {
            return Err(Refusal::TooSoon {
                retry_after_ms: 1_000,
            });
        }
        if let Some(last) = state.last {
            let since = last.elapsed();
            if since < self.min_interval {
                let wait = self.min_interval.saturating_sub(since);
                return Err(Refusal::TooSoon {
                    retry_after_ms: u64::try_from(wait.as_millis()).unwrap_or(u64::MAX),
                });
            }
        }
        let keep_until = envelope.expires_at_ms.saturating_add(self.policy.skew_ms());
        match state
            .nonces
            .check_and_insert(&request.check_nonce, keep_until, now)
        {
            Ok(NonceCheck::Fresh) => {}
            Ok(NonceCheck::Replayed) => {
                return Err(Refusal::Replayed(format!(
                    "nonce {:?} was already used",
                    request.check_nonce
                )));
            }
            Err(error) => {
                tracing::error!(%error, "cannot keep a check's nonce; check refused");
                return Err(Refusal::Unavailable(format!(
                    "cannot keep the check's nonce: {error}"
                )));
            }
        }
        state.last = Some(Instant::now());
        drop(state);
        let after_sequence = match &self.cache.snapshot().signed {
            CachedSigned::Envelope { sequence, .. } => Some(*sequence),
            CachedSigned::Unavailable(_) => None,
        };
        tracing::info!(node = %self.node, "diagnose run requested by a signed check");
        self.wake.notify_one();
        Ok(CheckAnswer {
            node: self.node.clone(),
            after_sequence,
        })
    }

    /// Answers `POST /1/check`.
    pub async fn handle_http<B>(&self, request: Request<B>) -> Response<Full<Bytes>>
    where
        B: Body<Data = Bytes>,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        if request.method() != Method::POST {
            return json(StatusCode::METHOD_NOT_ALLOWED, &error_body("use POST"));
        }
        let limited = Limited::new(request.into_body(), MAX_CHECK_BODY_BYTES);
        let body = match tokio::time::timeout(Duration::from_secs(10), limited.collect()).await {
            Ok(Ok(collected)) => collected.to_bytes(),
            Ok(Err(error)) => {
                self.refusals
                    .count(Endpoint::Check, StatusCode::PAYLOAD_TOO_LARGE);
                return json(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    &error_body(&format!(
                        "cannot read the body (at most {MAX_CHECK_BODY_BYTES} bytes): {error}"
                    )),
                );
            }
            Err(_) => {
                self.refusals
                    .count(Endpoint::Check, StatusCode::REQUEST_TIMEOUT);
                return json(
                    StatusCode::REQUEST_TIMEOUT,
                    &error_body("body not received in time"),
                );
            }
        };
        match self.submit(&body, now_ms()) {
            Ok(answer) => json(StatusCode::ACCEPTED, &answer),
            Err(Refusal::Invalid(status, message)) => {
                self.refusals.count(Endpoint::Check, status);
                json(status, &error_body(&message))
            }
            Err(Refusal::Replayed(message)) => {
                self.refusals.count(Endpoint::Check, StatusCode::CONFLICT);
                json(StatusCode::CONFLICT, &error_body(&message))
            }
            Err(Refusal::Unavailable(message)) => {
                json(StatusCode::SERVICE_UNAVAILABLE, &error_body(&message))
            }
            Err(Refusal::TooSoon { retry_after_ms }) => json(
                StatusCode::TOO_MANY_REQUESTS,
                &serde_json::json!({
                    "error": "a check ran moments ago",
                    "retry_after_ms": retry_after_ms,
                }),
            ),
        }
    }
}

/// `{"error": message}`.
pub(crate) fn error_body(message: &str) -> serde_json::Value {
    serde_json::json!({ "error": message })
}

/// A JSON answer of the signed endpoints (`/1/check`, `/1/replica`).
pub(crate) fn json(status: StatusCode, body: &impl serde::Serialize) -> Response<Full<Bytes>> {
    let bytes = serde_json::to_vec(body).unwrap_or_else(|_| b"{}".to_vec());
    let mut response = Response::new(Full::new(Bytes::from(bytes)));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

#[cfg(test)]
mod tests {
    use super::*;
    use nodecare_collectors::Registry;
    use nodecare_protocol::repair::sign_check_request;
    use nodecare_protocol::{HmacKey, Signer};

    fn service(min_interval: Duration) -> (CheckService, Arc<Notify>, Signer) {
        let dir = tempfile::tempdir().unwrap();
        let (service, wake, signer) = service_in(dir.path(), min_interval);
        drop(dir);
        (service, wake, signer)
    }

    fn service_in(dir: &Path, min_interval: Duration) -> (CheckService, Arc<Notify>, Signer) {
        let key = HmacKey::new(b"check-key".to_vec());
        let wake = Arc::new(Notify::new());
        let cache = Arc::new(ReportCache::new(&Registry::default()));
        let service = CheckService::new(
            KeyRing::single(key.clone()),
            "node1".into(),
            VerifyPolicy::default(),
            min_interval,
            Arc::clone(&wake),
            cache,
            &dir.join("check"),
            Arc::new(Refusals::default()),
        )
        .unwrap();
        (service, wake, Signer::new(key, "node1"))
    }

    #[test]
    fn a_nonce_is_refused_after_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        let (service, _, signer) = service_in(dir.path(), Duration::ZERO);
        let now = now_ms();
        let request = body(&signer, "once", now, 60_000);
        assert!(service.submit(&request, now).is_ok());
        drop(service);
        let (restarted, _, _) = service_in(dir.path(), Duration::ZERO);
        assert!(matches!(
            restarted.submit(&request, now + 1),
            Err(Refusal::Replayed(_))
        ));
        assert!(
            restarted
                .submit(&body(&signer, "other", now, 60_000), now + 1)
                .is_ok()
        );
    }

    fn body(signer: &Signer, nonce: &str, now: u64, ttl: u64) -> Vec<u8> {
        let request = CheckRequest {
            node: signer.node().to_owned(),
            check_nonce: nonce.into(),
        };
        let envelope = sign_check_request(signer, request, now, now, ttl).unwrap();
        serde_json::to_vec(&envelope).unwrap()
    }

    #[tokio::test]
    async fn signed_checks_wake_the_diagnose_run_once_per_interval_and_replays_are_refused() {
        let (service, wake, signer) = service(Duration::from_secs(3600));
        let now = now_ms();
        let woken = wake.notified();
        assert_eq!(
            service.submit(&body(&signer, "a", now, 60_000), now),
            Ok(CheckAnswer {
                node: "node1".into(),
                after_sequence: None
            })
        );
        tokio::time::timeout(Duration::from_secs(1), woken)
            .await
            .unwrap();
        assert!(matches!(
            service.submit(&body(&signer, "a", now, 60_000), now),
            Err(Refusal::Replayed(_))
        ));
        assert!(matches!(
            service.submit(&body(&signer, "b", now, 60_000), now),
            Err(Refusal::TooSoon { .. })
        ));
    }

    #[test]
    fn forged_other_node_malformed_and_long_lived_requests_are_refused() {
        let (service, _, signer) = service(Duration::ZERO);
        let now = now_ms();
        let forger = Signer::new(HmacKey::new(b"other".to_vec()), "node1");
        let other = Signer::new(HmacKey::new(b"check-key".to_vec()), "node2");
        for (body, status) in [
            (body(&forger, "x", now, 60_000), StatusCode::FORBIDDEN),
            (body(&other, "y", now, 60_000), StatusCode::FORBIDDEN),
            (b"{not json".to_vec(), StatusCode::BAD_REQUEST),
            (body(&signer, "z", now, 3_600_000), StatusCode::BAD_REQUEST),
        ] {
            match service.submit(&body, now) {
                Err(Refusal::Invalid(got, _)) => assert_eq!(got, status),
                other => panic!("{other:?}"),
            }
        }
    }
}
