//! The copy of the coordinator's state this node keeps while it is a master candidate
//! (`PUT /1/replica`, `POST /1/replica/read`; wire format in `nodecare_protocol::replica`).
//!
//! A push verified with the cluster key is kept when its generation is higher than the copy held
//! (written to `<state_dir>/replica/kept` through a temporary file, fsynced, renamed); an older
//! one is refused with `409` naming the generation held, which tells a coordinator that another
//! one took over. A read signed with the cluster key is answered with the kept push, under an
//! envelope this agent signs with the read's nonce.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Body;
use hyper::header::{CONTENT_TYPE, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use nodecare_protocol::replica::{
    MAX_ENVELOPE_LINE_BYTES, MAX_READ_BODY_BYTES, MAX_REPLICA_BYTES, PushAccepted, PushDecision,
    PushRefused, REPLICA_PATH, REPLICA_READ_PATH, ReplicaHeader, decide_push, open_kept, open_push,
    open_read, sign_answer,
};
use nodecare_protocol::{HmacKey, KeyRing, Signer, VerifyPolicy, now_ms};

use crate::check::{error_body, json};

/// How long a read's answer stays valid.
const ANSWER_TTL_MS: u64 = 60_000;
/// How long a push's body may take to arrive.
const BODY_TIMEOUT: Duration = Duration::from_secs(60);

/// Whether `path` is one of the replica endpoints.
pub fn is_replica_path(path: &str) -> bool {
    path == REPLICA_PATH || path == REPLICA_READ_PATH
}

#[derive(Debug)]
struct Kept {
    header: ReplicaHeader,
    frame: Arc<Vec<u8>>,
}

/// The replica endpoints of one node.
#[derive(Debug)]
pub struct ReplicaKeeper {
    keys: KeyRing,
    signer: Signer,
    node: String,
    policy: VerifyPolicy,
    dir: PathBuf,
    kept: tokio::sync::Mutex<Option<Kept>>,
}

/// Why the keeper cannot start.
#[derive(Debug, thiserror::Error)]
#[error("replica directory {path}: {error}")]
pub struct KeeperError {
    path: String,
    error: std::io::Error,
}

fn file(dir: &Path) -> PathBuf {
    dir.join("kept")
}

impl ReplicaKeeper {
    /// The keeper of `node`, its copy under `dir` (created if missing). A kept copy that does not
    /// verify is moved aside to `kept.unreadable` and logged; the node then holds none.
    pub fn open(
        key: HmacKey,
        node: String,
        policy: VerifyPolicy,
        dir: PathBuf,
    ) -> Result<Self, KeeperError> {
        std::fs::create_dir_all(&dir).map_err(|error| KeeperError {
            path: dir.display().to_string(),
            error,
        })?;
        let keys = KeyRing::single(key.clone());
        let kept = match std::fs::read(file(&dir)) {
            Ok(bytes) => match open_kept(&keys, &bytes, &node) {
                Ok((header, _)) => {
                    tracing::info!(generation = %header.generation, from = %header.coordinator, "holding a replica of the coordinator's state");
                    Some(Kept {
                        header,
                        frame: Arc::new(bytes),
                    })
                }
                Err(error) => {
                    tracing::error!(%error, "the kept replica does not verify; moving it aside to kept.unreadable");
                    if let Err(error) = std::fs::rename(file(&dir), dir.join("kept.unreadable")) {
                        tracing::error!(%error, "cannot move the unreadable replica aside");
                    }
                    None
                }
            },
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => None,
            Err(error) => {
                return Err(KeeperError {
                    path: file(&dir).display().to_string(),
                    error,
                });
            }
        };
        Ok(Self {
            keys,
            signer: Signer::new(key, node.clone()),
            node,
            policy,
            dir,
            kept: tokio::sync::Mutex::new(kept),
        })
    }

    /// The generation held, if any.
    pub async fn held(&self) -> Option<nodecare_protocol::replica::Generation> {
        self.kept
            .lock()
            .await
            .as_ref()
            .map(|kept| kept.header.generation)
    }

    /// Judges a push at `now` and keeps it when it is newer.
    pub async fn push(&self, bytes: Vec<u8>, now: u64) -> Response<Full<Bytes>> {
        let header = match open_push(&self.keys, &bytes, now, self.policy, &self.node) {
            Ok((header, _)) => header,
            Err(error) => {
                tracing::warn!(%error, "replica push refused");
                return json(StatusCode::FORBIDDEN, &error_body(&error.to_string()));
            }
        };
        let mut kept = self.kept.lock().await;
        match decide_push(kept.as_ref().map(|kept| &kept.header), &header) {
            PushDecision::Same => json(
                StatusCode::OK,
                &PushAccepted {
                    held: header.generation,
                },
            ),
            PushDecision::Refuse { held } => {
                tracing::warn!(pushed = %header.generation, %held, from = %header.coordinator, "replica push older than the copy held: refused");
                json(StatusCode::CONFLICT, &PushRefused { held })
            }
            PushDecision::Keep => {
                let dir = self.dir.clone();
                let frame = Arc::new(bytes);
                let to_write = Arc::clone(&frame);
                let written =
                    tokio::task::spawn_blocking(move || write_atomically(&dir, &to_write)).await;
                match written {
                    Ok(Ok(())) => {
                        tracing::debug!(generation = %header.generation, from = %header.coordinator, bytes = frame.len(), "replica kept");
                        let generation = header.generation;
                        *kept = Some(Kept { header, frame });
                        json(StatusCode::OK, &PushAccepted { held: generation })
                    }
                    Ok(Err(error)) => {
                        tracing::error!(%error, "cannot write the replica");
                        json(
                            StatusCode::INTERNAL_SERVER_ERROR,
                            &error_body(&format!("cannot write the replica: {error}")),
                        )
                    }
                    Err(error) => json(
                        StatusCode::INTERNAL_SERVER_ERROR,
                        &error_body(&format!("cannot write the replica: {error}")),
                    ),
                }
            }
        }
    }

    /// Answers a read at `now`.
    pub async fn read(&self, body: &[u8], now: u64) -> Response<Full<Bytes>> {
        let read = match open_read(&self.keys, body, now, self.policy, &self.node) {
            Ok(read) => read,
            Err(error) => {
                tracing::warn!(%error, "replica read refused");
                return json(StatusCode::FORBIDDEN, &error_body(&error.to_string()));
            }
        };
        let kept = self.kept.lock().await;
        let answer = sign_answer(
            &self.signer,
            &read.read_nonce,
            kept.as_ref()
                .map(|kept| (&kept.header, kept.frame.as_slice())),
            now,
            ANSWER_TTL_MS,
        );
        drop(kept);
        match answer {
            Ok(bytes) => {
                let mut response = Response::new(Full::new(Bytes::from(bytes)));
                response.headers_mut().insert(
                    CONTENT_TYPE,
                    HeaderValue::from_static("application/octet-stream"),
                );
                response
            }
            Err(error) => json(
                StatusCode::INTERNAL_SERVER_ERROR,
                &error_body(&error.to_string()),
            ),
        }
    }

    /// Answers `PUT /1/replica` and `POST /1/replica/read`.
    pub async fn handle_http<B>(&self, request: Request<B>) -> Response<Full<Bytes>>
    where
        B: Body<Data = Bytes>,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        let reading = request.uri().path() == REPLICA_READ_PATH;
        let (method, limit) = if reading {
            (Method::POST, MAX_READ_BODY_BYTES)
        } else {
            (
                Method::PUT,
                usize::try_from(MAX_REPLICA_BYTES)
                    .unwrap_or(usize::MAX)
                    .saturating_add(MAX_ENVELOPE_LINE_BYTES + 1),
            )
        };
        if request.method() != method {
            return json(
                StatusCode::METHOD_NOT_ALLOWED,
                &error_body(&format!("use {method}")),
            );
        }
        let limited = Limited::new(request.into_body(), limit);
        let body = match tokio::time::timeout(BODY_TIMEOUT, limited.collect()).await {
            Ok(Ok(collected)) => collected.to_bytes(),
            Ok(Err(error)) => {
                return json(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    &error_body(&format!(
                        "cannot read the body (at most {limit} bytes): {error}"
                    )),
                );
            }
            Err(_) => {
                return json(
                    StatusCode::REQUEST_TIMEOUT,
                    &error_body("body not received in time"),
                );
            }
        };
        if reading {
            self.read(&body, now_ms()).await
        } else {
            self.push(body.to_vec(), now_ms()).await
        }
    }
}

fn write_atomically(dir: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let temporary = dir.join("kept.tmp");
    let mut out = std::fs::File::create(&temporary)?;
    out.write_all(bytes)?;
    out.sync_all()?;
    drop(out);
    std::fs::rename(&temporary, file(dir))?;
    std::fs::File::open(dir)?.sync_all()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code")]

    use super::*;
    use nodecare_protocol::replica::{Generation, ReplicaRead, open_answer, sign_push, sign_read};

    fn key() -> HmacKey {
        HmacKey::new(b"keeper test key".to_vec())
    }

    fn push_bytes(generation: Generation, snapshot: &[u8], now: u64) -> Vec<u8> {
        let header = ReplicaHeader::describe("node2", "node1", generation, snapshot, now);
        sign_push(
            &Signer::new(key(), "node2"),
            &header,
            snapshot,
            1,
            now,
            60_000,
        )
        .unwrap()
    }

    async fn body(response: Response<Full<Bytes>>) -> (StatusCode, Vec<u8>) {
        let status = response.status();
        (
            status,
            response
                .into_body()
                .collect()
                .await
                .unwrap()
                .to_bytes()
                .to_vec(),
        )
    }

    async fn read_back(keeper: &ReplicaKeeper, now: u64) -> Option<Vec<u8>> {
        let request = sign_read(
            &Signer::new(key(), "node2"),
            &ReplicaRead {
                node: "node2".into(),
                read_nonce: "r1".into(),
            },
            1,
            now,
            30_000,
        )
        .unwrap();
        let (status, bytes) = body(keeper.read(&request, now).await).await;
        assert_eq!(status, StatusCode::OK);
        open_answer(
            &KeyRing::single(key()),
            &bytes,
            now,
            VerifyPolicy::default(),
            "node2",
            "r1",
        )
        .unwrap()
        .map(|copy| copy.snapshot)
    }

    #[tokio::test]
    async fn keeps_newer_refuses_older_and_survives_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        let open = || {
            ReplicaKeeper::open(
                key(),
                "node2".into(),
                VerifyPolicy::default(),
                dir.path().join("replica"),
            )
            .unwrap()
        };
        let keeper = open();
        let now = now_ms();
        assert_eq!(read_back(&keeper, now).await, None);
        let first = Generation {
            epoch: 1,
            number: 3,
        };
        let (status, _) = body(keeper.push(push_bytes(first, b"three", now), now).await).await;
        assert_eq!(status, StatusCode::OK);
        // The same push again: accepted, nothing changes.
        let (status, _) = body(keeper.push(push_bytes(first, b"three", now), now).await).await;
        assert_eq!(status, StatusCode::OK);
        // Older: refused with what is held.
        let older = Generation {
            epoch: 1,
            number: 2,
        };
        let (status, refused) = body(keeper.push(push_bytes(older, b"two", now), now).await).await;
        assert_eq!(status, StatusCode::CONFLICT);
        let refused: PushRefused = serde_json::from_slice(&refused).unwrap();
        assert_eq!(refused.held, first);
        // A forged push (other key): refused.
        let forged = sign_push(
            &Signer::new(HmacKey::new(b"other".to_vec()), "node2"),
            &ReplicaHeader::describe(
                "node2",
                "node9",
                Generation {
                    epoch: 9,
                    number: 0,
                },
                b"x",
                now,
            ),
            b"x",
            1,
            now,
            60_000,
        )
        .unwrap();
        let (status, _) = body(keeper.push(forged, now).await).await;
        assert_eq!(status, StatusCode::FORBIDDEN);
        assert_eq!(
            read_back(&keeper, now).await.as_deref(),
            Some(&b"three"[..])
        );
        // A new epoch replaces it, and is what a restarted agent holds.
        let next = Generation {
            epoch: 2,
            number: 0,
        };
        let (status, _) = body(keeper.push(push_bytes(next, b"epoch two", now), now).await).await;
        assert_eq!(status, StatusCode::OK);
        drop(keeper);
        let keeper = open();
        assert_eq!(keeper.held().await, Some(next));
        assert_eq!(
            read_back(&keeper, now_ms()).await.as_deref(),
            Some(&b"epoch two"[..])
        );
    }

    #[tokio::test]
    async fn an_unreadable_copy_is_moved_aside() {
        let dir = tempfile::tempdir().unwrap();
        let replica = dir.path().join("replica");
        std::fs::create_dir_all(&replica).unwrap();
        std::fs::write(replica.join("kept"), b"garbage\nbytes").unwrap();
        let keeper = ReplicaKeeper::open(
            key(),
            "node2".into(),
            VerifyPolicy::default(),
            replica.clone(),
        )
        .unwrap();
        assert_eq!(keeper.held().await, None);
        assert!(replica.join("kept.unreadable").exists());
    }
}
