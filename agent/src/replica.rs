//! The copy of the coordinator's state this node keeps while it is a master candidate
//! (`PUT /1/replica`, `POST /1/replica/read`; wire format in `nodecare_protocol::replica`).
//!
//! A push is read as a stream and judged before its snapshot is: the envelope line (at most
//! [`MAX_ENVELOPE_LINE_BYTES`], within [`ENVELOPE_TIMEOUT`]) must verify with the cluster key and
//! `Content-Length` must be the length its signed header names; only then, one push at a time,
//! are the snapshot's bytes streamed into the digest and a temporary file (within
//! [`BODY_TIMEOUT`]), never held in memory. A push whose generation is higher than the copy held
//! is kept (`<state_dir>/replica/kept`, fsynced, renamed); an older one, or one of an epoch below
//! the epoch promised, is refused with `409` naming the generation held (and the promise), which
//! tells a coordinator that another one took over. A read signed with the cluster key names the
//! epoch its takeover will start: when it is above every epoch promised or held, the promise is
//! persisted (`<state_dir>/replica/promised`, fsynced, renamed) before the answer, and the read
//! is answered with the kept push, read from the file, under an envelope this agent signs with
//! the read's nonce; otherwise it is refused in that envelope, naming the highest epoch.
//! `nodecare-agent replica discard` sets the kept copy aside ([`discard`], to
//! `<state_dir>/replica/discarded`), not the promise; a running agent notices at its next push or
//! read. The discarded copy's generation stays a floor: a push at or below it is refused (a frame
//! captured before the discard is never kept again, so a takeover cannot read state older than
//! what was discarded), and a takeover's read must name an epoch above it; the coordinator that
//! takes over then pushes above it.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Body;
use hyper::header::{CONTENT_LENGTH, CONTENT_TYPE, HeaderValue, RETRY_AFTER};
use hyper::{Method, Request, Response, StatusCode};
use nodecare_protocol::replica::{
    Generation, MAX_ENVELOPE_LINE_BYTES, MAX_READ_BODY_BYTES, MAX_REPLICA_BYTES, PushAccepted,
    PushDecision, PushRefused, REPLICA_PATH, REPLICA_READ_PATH, ReadDecision, ReplicaHeader,
    decide_push, decide_read, open_kept, open_push_line, open_read, push_frame_len, sign_answer,
};
use nodecare_protocol::{HmacKey, KeyRing, Signer, VerifyPolicy, now_ms};
use sha2::{Digest, Sha256};
use tokio::io::AsyncWriteExt;

use crate::check::{error_body, json};
use crate::refusals::{Endpoint, Refusals};

/// How long a read's answer stays valid.
const ANSWER_TTL_MS: u64 = 60_000;
/// How long the envelope line of a push (not yet authenticated) may take to arrive.
pub const ENVELOPE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long the rest of a verified push's body may take to arrive.
pub const BODY_TIMEOUT: Duration = Duration::from_secs(60);
/// How long the body of a read may take to arrive.
pub const READ_BODY_TIMEOUT: Duration = Duration::from_secs(10);
/// The largest `Content-Length` of a push: the longest envelope line, `\n`, the largest snapshot.
pub const MAX_PUSH_BYTES: u64 = MAX_REPLICA_BYTES + MAX_ENVELOPE_LINE_BYTES as u64 + 1;
/// `Retry-After` (seconds) of a push refused while another one is being received.
pub const PUSH_BUSY_RETRY_AFTER_SECS: u64 = 1;

/// Whether `path` is one of the replica endpoints.
pub fn is_replica_path(path: &str) -> bool {
    path == REPLICA_PATH || path == REPLICA_READ_PATH
}

/// The replica endpoints of one node.
#[derive(Debug)]
pub struct ReplicaKeeper {
    keys: KeyRing,
    signer: Signer,
    node: String,
    policy: VerifyPolicy,
    dir: PathBuf,
    /// The copy held and the epoch promised, judged together.
    kept: tokio::sync::Mutex<Kept>,
    /// Held while a verified push's snapshot is received: one at a time.
    receiving: tokio::sync::Mutex<()>,
    refusals: Arc<Refusals>,
}

/// Why the keeper cannot start, or a copy cannot be discarded.
#[derive(Debug, thiserror::Error)]
#[error("replica directory {path}: {error}")]
pub struct KeeperError {
    path: String,
    error: std::io::Error,
}

/// What the keeper holds: one lock, so that a push's last judgement and its rename never
/// interleave with a promise.
#[derive(Debug, Default)]
struct Kept {
    /// The header of the copy held (its frame is the file `kept`).
    header: Option<ReplicaHeader>,
    /// The highest epoch promised to a takeover's read (the file `promised`; 0: none).
    promised: u64,
    /// The generation of the last copy discarded (the file `discarded`): no push at or below
    /// it is kept, no read at or below its epoch promised.
    floor: Option<Generation>,
}

impl Kept {
    /// The decision on a push of `incoming`: a push at or below a discarded copy's generation,
    /// while none newer is held, is refused as older than that copy.
    fn decide_push(&self, incoming: &ReplicaHeader) -> PushDecision {
        if self.header.is_none()
            && incoming.generation.epoch >= self.promised
            && let Some(floor) = self.floor
            && incoming.generation <= floor
        {
            return PushDecision::Refuse { held: floor };
        }
        decide_push(self.header.as_ref(), self.promised, incoming)
    }

    /// The generation a refusal names as held: the copy's, else the discarded copy's.
    fn held_or_floor(&self) -> Option<Generation> {
        self.header
            .as_ref()
            .map(|held| held.generation)
            .or(self.floor)
    }
}

fn file(dir: &Path) -> PathBuf {
    dir.join("kept")
}

fn promise_file(dir: &Path) -> PathBuf {
    dir.join("promised")
}

fn discarded_file(dir: &Path) -> PathBuf {
    dir.join("discarded")
}

/// The epoch promised under `dir`: 0 when none was; an unreadable promise is an error (a keeper
/// that forgot its promise could let an old master's push overwrite a newer state).
fn load_promise(dir: &Path) -> Result<u64, KeeperError> {
    let path = promise_file(dir);
    match std::fs::read_to_string(&path) {
        Ok(text) => text.trim().parse::<u64>().map_err(|error| KeeperError {
            path: path.display().to_string(),
            error: std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("not an epoch ({error}); remove the file only when no takeover runs"),
            ),
        }),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(0),
        Err(error) => Err(KeeperError {
            path: path.display().to_string(),
            error,
        }),
    }
}

/// Persists the promise of `epoch` under `dir`: written to a temporary file, fsynced, renamed,
/// the directory fsynced.
fn save_promise(dir: &Path, epoch: u64) -> std::io::Result<()> {
    let temporary = dir.join("promised.tmp");
    {
        use std::io::Write as _;
        use std::os::unix::fs::OpenOptionsExt as _;
        let mut out = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&temporary)?;
        writeln!(out, "{epoch}")?;
        out.sync_all()?;
    }
    std::fs::rename(&temporary, promise_file(dir))?;
    std::fs::File::open(dir)?.sync_all()
}

/// Sets aside the copy kept under `dir` (`<state_dir>/replica`, renamed to `discarded`):
/// `nodecare-agent replica discard`, for a copy the coordinator cannot restore. Returns whether
/// there was one. The running agent holds none from its next push or read on, and keeps the
/// discarded copy's generation as a floor (module documentation).
pub fn discard(dir: &Path) -> Result<bool, KeeperError> {
    match std::fs::rename(file(dir), discarded_file(dir)) {
        Ok(()) => {
            if let Ok(directory) = std::fs::File::open(dir)
                && let Err(error) = directory.sync_all()
            {
                tracing::warn!(%error, "cannot sync the replica directory");
            }
            Ok(true)
        }
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(error) => Err(KeeperError {
            path: file(dir).display().to_string(),
            error,
        }),
    }
}

/// The `409` answer of a push `decision` refused, given the generation `held`; `None` when it
/// is not a refusal.
fn refusal(decision: PushDecision, held: Option<Generation>) -> Option<PushRefused> {
    match decision {
        PushDecision::Keep | PushDecision::Same => None,
        PushDecision::Refuse { held } => Some(PushRefused {
            held,
            promised: None,
        }),
        PushDecision::Promised { epoch } => Some(PushRefused {
            held: held.unwrap_or_default(),
            promised: Some(epoch),
        }),
    }
}

/// Why a push was not kept, with the answer's status.
struct Refused(StatusCode, String);

impl ReplicaKeeper {
    /// The keeper of `node`, its copy under `dir` (created if missing). A kept copy that does not
    /// verify is moved aside to `kept.unreadable` and logged; the node then holds none.
    pub fn open(
        key: HmacKey,
        node: String,
        policy: VerifyPolicy,
        dir: PathBuf,
    ) -> Result<Self, KeeperError> {
        Self::open_counting(key, node, policy, dir, Arc::new(Refusals::default()))
    }

    /// [`Self::open`], counting refused requests in `refusals`.
    pub fn open_counting(
        key: HmacKey,
        node: String,
        policy: VerifyPolicy,
        dir: PathBuf,
        refusals: Arc<Refusals>,
    ) -> Result<Self, KeeperError> {
        std::fs::create_dir_all(&dir).map_err(|error| KeeperError {
            path: dir.display().to_string(),
            error,
        })?;
        let keys = KeyRing::single(key.clone());
        // A push that was being received when the agent stopped.
        drop(std::fs::remove_file(dir.join("kept.tmp")));
        drop(std::fs::remove_file(dir.join("promised.tmp")));
        let promised = load_promise(&dir)?;
        if promised > 0 {
            tracing::info!(
                promised,
                "refusing replica pushes of epochs below the one promised"
            );
        }
        let floor = match std::fs::read(discarded_file(&dir)) {
            Ok(bytes) => match open_kept(&keys, &bytes, &node) {
                Ok((header, _)) => {
                    tracing::info!(generation = %header.generation, "refusing replica pushes at or below the copy discarded");
                    Some(header.generation)
                }
                Err(error) => {
                    tracing::warn!(%error, "the discarded replica does not verify: its generation is not known");
                    None
                }
            },
            Err(_) => None,
        };
        let kept = match std::fs::read(file(&dir)) {
            Ok(bytes) => match open_kept(&keys, &bytes, &node) {
                Ok((header, _)) => {
                    tracing::info!(generation = %header.generation, from = %header.coordinator, "holding a replica of the coordinator's state");
                    Some(header)
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
            kept: tokio::sync::Mutex::new(Kept {
                header: kept,
                promised,
                floor,
            }),
            receiving: tokio::sync::Mutex::new(()),
            refusals,
        })
    }

    /// What is held, the header forgotten when the file was discarded meanwhile.
    async fn held_header(&self) -> tokio::sync::MutexGuard<'_, Kept> {
        let mut kept = self.kept.lock().await;
        if kept.header.is_some()
            && matches!(std::fs::symlink_metadata(file(&self.dir)), Err(error) if error.kind() == std::io::ErrorKind::NotFound)
        {
            tracing::warn!(
                "the kept replica was discarded; holding none, refusing pushes at or below it"
            );
            kept.floor = kept
                .header
                .take()
                .map(|header| header.generation)
                .max(kept.floor);
        }
        kept
    }

    /// The generation held, if any.
    pub async fn held(&self) -> Option<Generation> {
        self.held_header()
            .await
            .header
            .as_ref()
            .map(|header| header.generation)
    }

    /// The highest epoch promised to a takeover's read (0: none).
    pub async fn promised(&self) -> u64 {
        self.kept.lock().await.promised
    }

    /// Judges a whole push frame at `now` and keeps it when it is newer (the same path as a push
    /// received over HTTP).
    pub async fn push(&self, bytes: Vec<u8>, now: u64) -> Response<Full<Bytes>> {
        let length = bytes.len();
        let mut request = Request::new(Full::new(Bytes::from(bytes)));
        *request.method_mut() = Method::PUT;
        if let Ok(value) = HeaderValue::from_str(&length.to_string()) {
            request.headers_mut().insert(CONTENT_LENGTH, value);
        }
        self.receive_push(request, now).await
    }

    async fn receive_push<B>(&self, request: Request<B>, now: u64) -> Response<Full<Bytes>>
    where
        B: Body<Data = Bytes> + Unpin,
        B::Error: std::fmt::Display,
    {
        match self.try_receive_push(request, now).await {
            Ok(response) => response,
            Err(Refused(status, message)) => {
                if status == StatusCode::SERVICE_UNAVAILABLE {
                    let mut response = json(status, &error_body(&message));
                    response
                        .headers_mut()
                        .insert(RETRY_AFTER, HeaderValue::from(PUSH_BUSY_RETRY_AFTER_SECS));
                    return response;
                }
                if status.is_client_error() {
                    self.refusals.count(Endpoint::Replica, status);
                } else {
                    tracing::error!(%message, "replica push failed");
                }
                json(status, &error_body(&message))
            }
        }
    }

    async fn try_receive_push<B>(
        &self,
        request: Request<B>,
        now: u64,
    ) -> Result<Response<Full<Bytes>>, Refused>
    where
        B: Body<Data = Bytes> + Unpin,
        B::Error: std::fmt::Display,
    {
        let declared = content_length(&request)?;
        let mut body = request.into_body();
        // The envelope line, bounded in size and time, before anything else.
        let (line, mut rest) = tokio::time::timeout(ENVELOPE_TIMEOUT, envelope_line(&mut body))
            .await
            .map_err(|_| {
                Refused(
                    StatusCode::REQUEST_TIMEOUT,
                    format!(
                        "envelope line not received within {} s",
                        ENVELOPE_TIMEOUT.as_secs()
                    ),
                )
            })??;
        let header = open_push_line(&self.keys, &line, now, self.policy, &self.node)
            .map_err(|error| Refused(StatusCode::FORBIDDEN, error.to_string()))?;
        let expected = push_frame_len(line.len(), &header);
        if declared != expected {
            return Err(Refused(
                StatusCode::BAD_REQUEST,
                format!(
                    "Content-Length {declared} differs from the {expected} bytes the signed header names"
                ),
            ));
        }
        let (decision, held) = {
            let kept = self.held_header().await;
            (kept.decide_push(&header), kept.held_or_floor())
        };
        match decision {
            PushDecision::Keep => {}
            PushDecision::Same => {
                return Ok(json(
                    StatusCode::OK,
                    &PushAccepted {
                        held: header.generation,
                    },
                ));
            }
            PushDecision::Refuse { .. } | PushDecision::Promised { .. } => {
                let answer = refusal(decision, held).unwrap_or(PushRefused {
                    held: held.unwrap_or_default(),
                    promised: None,
                });
                tracing::info!(pushed = %header.generation, held = %answer.held, promised = ?answer.promised, from = %header.coordinator, "replica push older than the copy held or of an epoch below the one promised: refused");
                return Ok(json(StatusCode::CONFLICT, &answer));
            }
        }
        let Ok(_receiving) = self.receiving.try_lock() else {
            return Err(Refused(
                StatusCode::SERVICE_UNAVAILABLE,
                "another push is being received".into(),
            ));
        };
        let temporary = self.dir.join("kept.tmp");
        let received = tokio::time::timeout(
            BODY_TIMEOUT,
            self.receive_snapshot(&temporary, &line, &header, &mut rest, &mut body),
        )
        .await
        .unwrap_or_else(|_| {
            Err(Refused(
                StatusCode::REQUEST_TIMEOUT,
                format!("snapshot not received within {} s", BODY_TIMEOUT.as_secs()),
            ))
        });
        if let Err(refused) = received {
            drop(tokio::fs::remove_file(&temporary).await);
            return Err(refused);
        }
        let mut kept = self.held_header().await;
        let decision = kept.decide_push(&header);
        match decision {
            PushDecision::Keep => {}
            PushDecision::Same => {
                drop(tokio::fs::remove_file(&temporary).await);
                return Ok(json(
                    StatusCode::OK,
                    &PushAccepted {
                        held: header.generation,
                    },
                ));
            }
            PushDecision::Refuse { .. } | PushDecision::Promised { .. } => {
                drop(tokio::fs::remove_file(&temporary).await);
                let held = kept.held_or_floor();
                let answer = refusal(decision, held).unwrap_or(PushRefused {
                    held: held.unwrap_or_default(),
                    promised: None,
                });
                return Ok(json(StatusCode::CONFLICT, &answer));
            }
        }
        let dir = self.dir.clone();
        let renamed = tokio::task::spawn_blocking(move || {
            std::fs::rename(dir.join("kept.tmp"), file(&dir))?;
            std::fs::File::open(&dir)?.sync_all()
        })
        .await;
        match renamed {
            Ok(Ok(())) => {
                tracing::debug!(generation = %header.generation, from = %header.coordinator, bytes = header.size, "replica kept");
                let generation = header.generation;
                kept.header = Some(header);
                Ok(json(StatusCode::OK, &PushAccepted { held: generation }))
            }
            Ok(Err(error)) => Err(Refused(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("cannot write the replica: {error}"),
            )),
            Err(error) => Err(Refused(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("cannot write the replica: {error}"),
            )),
        }
    }

    /// Streams the snapshot into the digest and `temporary` (the frame as received), then
    /// checks its size and digest and syncs the file.
    async fn receive_snapshot<B>(
        &self,
        temporary: &Path,
        line: &[u8],
        header: &ReplicaHeader,
        rest: &mut Bytes,
        body: &mut B,
    ) -> Result<(), Refused>
    where
        B: Body<Data = Bytes> + Unpin,
        B::Error: std::fmt::Display,
    {
        let write_error = |error: std::io::Error| {
            Refused(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("cannot write the replica: {error}"),
            )
        };
        let mut out = tokio::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(temporary)
            .await
            .map_err(write_error)?;
        out.write_all(line).await.map_err(write_error)?;
        out.write_all(b"\n").await.map_err(write_error)?;
        let mut digest = Sha256::new();
        let mut received: u64 = 0;
        let mut chunk = std::mem::take(rest);
        loop {
            if !chunk.is_empty() {
                received = received.saturating_add(chunk.len() as u64);
                if received > header.size {
                    return Err(Refused(
                        StatusCode::BAD_REQUEST,
                        format!("snapshot longer than the {} bytes signed", header.size),
                    ));
                }
                digest.update(&chunk);
                out.write_all(&chunk).await.map_err(write_error)?;
            }
            match body.frame().await {
                None => break,
                Some(Ok(frame)) => chunk = frame.into_data().unwrap_or_default(),
                Some(Err(error)) => {
                    return Err(Refused(
                        StatusCode::BAD_REQUEST,
                        format!("cannot read the snapshot: {error}"),
                    ));
                }
            }
        }
        if received != header.size {
            return Err(Refused(
                StatusCode::FORBIDDEN,
                format!(
                    "snapshot does not match its header: {received} bytes, header says {}",
                    header.size
                ),
            ));
        }
        let sha256 = hex::encode(digest.finalize());
        if sha256 != header.sha256 {
            return Err(Refused(
                StatusCode::FORBIDDEN,
                format!(
                    "snapshot does not match its header: sha256 {sha256}, header says {}",
                    header.sha256
                ),
            ));
        }
        out.flush().await.map_err(write_error)?;
        out.sync_all().await.map_err(write_error)?;
        Ok(())
    }

    /// Answers a read at `now`.
    pub async fn read(&self, body: &[u8], now: u64) -> Response<Full<Bytes>> {
        let read = match open_read(&self.keys, body, now, self.policy, &self.node) {
            Ok(read) => read,
            Err(error) => {
                self.refusals
                    .count(Endpoint::Replica, StatusCode::FORBIDDEN);
                return json(StatusCode::FORBIDDEN, &error_body(&error.to_string()));
            }
        };
        let mut kept = self.held_header().await;
        // A discarded copy's epoch counts as promised: the takeover starts above it.
        let promised = kept
            .floor
            .map_or(kept.promised, |floor| floor.epoch.max(kept.promised));
        let decision = decide_read(kept.header.as_ref(), promised, read.epoch);
        if let ReadDecision::Promise(epoch) = decision {
            // Persisted before the answer: a promise forgotten across a restart is no promise.
            let dir = self.dir.clone();
            let saved = tokio::task::spawn_blocking(move || save_promise(&dir, epoch)).await;
            match saved {
                Ok(Ok(())) => {
                    tracing::info!(
                        epoch,
                        "promised a takeover's epoch: refusing replica pushes of lower epochs"
                    );
                    kept.promised = epoch;
                }
                Ok(Err(error)) => {
                    return json(
                        StatusCode::INTERNAL_SERVER_ERROR,
                        &error_body(&format!("cannot persist the promise: {error}")),
                    );
                }
                Err(error) => {
                    return json(
                        StatusCode::INTERNAL_SERVER_ERROR,
                        &error_body(&format!("cannot persist the promise: {error}")),
                    );
                }
            }
        }
        let held = match decision {
            ReadDecision::Refuse { highest } => {
                tracing::info!(epoch = ?read.epoch, highest, "a takeover's read names an epoch not above the one promised or held: refused");
                None
            }
            ReadDecision::Answer | ReadDecision::Promise(_) => kept.header.as_ref(),
        };
        let frame = match held {
            None => None,
            Some(header) => {
                let path = file(&self.dir);
                let bytes = match tokio::fs::read(&path).await {
                    Ok(bytes) => bytes,
                    Err(error) => {
                        return json(
                            StatusCode::INTERNAL_SERVER_ERROR,
                            &error_body(&format!("cannot read the kept replica: {error}")),
                        );
                    }
                };
                match open_kept(&self.keys, &bytes, &self.node) {
                    Ok((on_disk, _)) if on_disk == *header => Some((header.clone(), bytes)),
                    Ok(_) | Err(_) => {
                        return json(
                            StatusCode::INTERNAL_SERVER_ERROR,
                            &error_body("the kept replica changed on disk"),
                        );
                    }
                }
            }
        };
        drop(kept);
        let answer = sign_answer(
            &self.signer,
            &read.read_nonce,
            decision,
            frame
                .as_ref()
                .map(|(header, bytes)| (header, bytes.as_slice())),
            now,
            ANSWER_TTL_MS,
        );
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
        B: Body<Data = Bytes> + Unpin,
        B::Error: std::fmt::Display + Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        let reading = request.uri().path() == REPLICA_READ_PATH;
        let method = if reading { Method::POST } else { Method::PUT };
        if request.method() != method {
            return json(
                StatusCode::METHOD_NOT_ALLOWED,
                &error_body(&format!("use {method}")),
            );
        }
        if !reading {
            return self.receive_push(request, now_ms()).await;
        }
        let limited = Limited::new(request.into_body(), MAX_READ_BODY_BYTES);
        let body = match tokio::time::timeout(READ_BODY_TIMEOUT, limited.collect()).await {
            Ok(Ok(collected)) => collected.to_bytes(),
            Ok(Err(error)) => {
                self.refusals
                    .count(Endpoint::Replica, StatusCode::PAYLOAD_TOO_LARGE);
                return json(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    &error_body(&format!(
                        "cannot read the body (at most {MAX_READ_BODY_BYTES} bytes): {error}"
                    )),
                );
            }
            Err(_) => {
                self.refusals
                    .count(Endpoint::Replica, StatusCode::REQUEST_TIMEOUT);
                return json(
                    StatusCode::REQUEST_TIMEOUT,
                    &error_body("body not received in time"),
                );
            }
        };
        self.read(&body, now_ms()).await
    }
}

/// The push's `Content-Length`: required, at most [`MAX_PUSH_BYTES`].
fn content_length<B>(request: &Request<B>) -> Result<u64, Refused> {
    let Some(value) = request.headers().get(CONTENT_LENGTH) else {
        return Err(Refused(
            StatusCode::LENGTH_REQUIRED,
            "a push needs a Content-Length".into(),
        ));
    };
    let declared = value
        .to_str()
        .ok()
        .and_then(|text| text.parse::<u64>().ok())
        .ok_or_else(|| Refused(StatusCode::BAD_REQUEST, "bad Content-Length".into()))?;
    if declared > MAX_PUSH_BYTES {
        return Err(Refused(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("a push is at most {MAX_PUSH_BYTES} bytes, {declared} announced"),
        ));
    }
    Ok(declared)
}

/// Reads up to the end of the envelope line: the line (without `\n`) and the bytes after it.
async fn envelope_line<B>(body: &mut B) -> Result<(Vec<u8>, Bytes), Refused>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: std::fmt::Display,
{
    let mut line = Vec::new();
    loop {
        let chunk = match body.frame().await {
            None => {
                return Err(Refused(
                    StatusCode::FORBIDDEN,
                    "not a replica frame: the body ends before the envelope line does".into(),
                ));
            }
            Some(Err(error)) => {
                return Err(Refused(
                    StatusCode::BAD_REQUEST,
                    format!("cannot read the body: {error}"),
                ));
            }
            Some(Ok(frame)) => frame.into_data().unwrap_or_default(),
        };
        let room = (MAX_ENVELOPE_LINE_BYTES + 1).saturating_sub(line.len());
        let window = &chunk[..chunk.len().min(room)];
        if let Some(end) = window.iter().position(|byte| *byte == b'\n') {
            line.extend_from_slice(&chunk[..end]);
            return Ok((line, chunk.slice(end + 1..)));
        }
        if chunk.len() >= room {
            return Err(Refused(
                StatusCode::FORBIDDEN,
                format!(
                    "not a replica frame: no end of the envelope line within {MAX_ENVELOPE_LINE_BYTES} bytes"
                ),
            ));
        }
        line.extend_from_slice(&chunk);
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code")]

    use super::*;
    use nodecare_protocol::replica::{ReadAnswer, ReplicaRead, open_answer, sign_push, sign_read};

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
                epoch: None,
            },
            1,
            now,
            30_000,
        )
        .unwrap();
        let (status, bytes) = body(keeper.read(&request, now).await).await;
        assert_eq!(status, StatusCode::OK);
        let answer = open_answer(
            &KeyRing::single(key()),
            &bytes,
            now,
            VerifyPolicy::default(),
            "node2",
            "r1",
            None,
        )
        .unwrap();
        match answer {
            ReadAnswer::Copy(copy) => copy.map(|copy| copy.snapshot),
            ReadAnswer::Refused { highest } => panic!("a read without an epoch refused: {highest}"),
        }
    }

    /// A takeover's read of `epoch`, as the coordinator reads its answer.
    async fn read_epoch(keeper: &ReplicaKeeper, now: u64, epoch: u64) -> ReadAnswer {
        let request = sign_read(
            &Signer::new(key(), "node2"),
            &ReplicaRead {
                node: "node2".into(),
                read_nonce: "r2".into(),
                epoch: Some(epoch),
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
            "r2",
            Some(epoch),
        )
        .unwrap()
    }

    /// The fix of the model check's first finding: a takeover's read makes the keeper refuse the
    /// old master's pushes, across a restart too.
    #[tokio::test]
    async fn a_promised_epoch_refuses_older_pushes_across_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        let now = now_ms();
        let keeper = keeper_in(dir.path());
        let one = |number| Generation { epoch: 1, number };
        let (status, _) = body(keeper.push(push_bytes(one(0), b"1.0", now), now).await).await;
        assert_eq!(status, StatusCode::OK);
        // A takeover reads with epoch 2: promised, answered with the copy.
        let ReadAnswer::Copy(Some(copy)) = read_epoch(&keeper, now, 2).await else {
            panic!("a copy");
        };
        assert_eq!(copy.snapshot, b"1.0");
        assert_eq!(keeper.promised().await, 2);
        // The old master's next push (1.1) is refused, naming the promise.
        let (status, refused) = body(keeper.push(push_bytes(one(1), b"1.1", now), now).await).await;
        assert_eq!(status, StatusCode::CONFLICT);
        let refused: PushRefused = serde_json::from_slice(&refused).unwrap();
        assert_eq!(
            refused,
            PushRefused {
                held: one(0),
                promised: Some(2)
            }
        );
        // Another takeover of the same epoch is refused, naming it, without the copy.
        assert_eq!(
            read_epoch(&keeper, now, 2).await,
            ReadAnswer::Refused { highest: 2 }
        );
        // The promise outlives a restart.
        drop(keeper);
        let keeper = keeper_in(dir.path());
        assert_eq!(keeper.promised().await, 2);
        let (status, _) = body(keeper.push(push_bytes(one(2), b"1.2", now), now).await).await;
        assert_eq!(status, StatusCode::CONFLICT);
        assert_eq!(keeper.held().await, Some(one(0)));
        // The promised epoch's push is kept.
        let two = Generation {
            epoch: 2,
            number: 0,
        };
        let (status, _) = body(keeper.push(push_bytes(two, b"2.0", now), now).await).await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(keeper.held().await, Some(two));
        // A read without an epoch (an older coordinator) promises nothing.
        assert_eq!(read_back(&keeper, now).await.as_deref(), Some(&b"2.0"[..]));
        assert_eq!(keeper.promised().await, 2);
        // An unreadable promise is no promise forgotten: the keeper does not start.
        drop(keeper);
        std::fs::write(dir.path().join("replica/promised"), b"two\n").unwrap();
        assert!(
            ReplicaKeeper::open(
                key(),
                "node2".into(),
                VerifyPolicy::default(),
                dir.path().join("replica"),
            )
            .is_err()
        );
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

    fn keeper_in(dir: &Path) -> ReplicaKeeper {
        ReplicaKeeper::open(
            key(),
            "node2".into(),
            VerifyPolicy::default(),
            dir.join("replica"),
        )
        .unwrap()
    }

    fn put(bytes: Vec<u8>, length: Option<u64>) -> Request<Full<Bytes>> {
        let mut request = Request::new(Full::new(Bytes::from(bytes)));
        *request.method_mut() = Method::PUT;
        if let Some(length) = length {
            request
                .headers_mut()
                .insert(CONTENT_LENGTH, HeaderValue::from(length));
        }
        request
    }

    #[tokio::test]
    async fn a_push_is_judged_by_its_envelope_and_length_before_its_snapshot() {
        let dir = tempfile::tempdir().unwrap();
        let keeper = keeper_in(dir.path());
        let now = now_ms();
        let generation = Generation {
            epoch: 1,
            number: 1,
        };
        let bytes = push_bytes(generation, b"snapshot", now);
        let length = bytes.len() as u64;
        for (declared, status) in [
            (Some(length + 5), StatusCode::BAD_REQUEST),
            (Some(length - 1), StatusCode::BAD_REQUEST),
            (None, StatusCode::LENGTH_REQUIRED),
            (Some(MAX_PUSH_BYTES + 1), StatusCode::PAYLOAD_TOO_LARGE),
        ] {
            let (got, text) = body(keeper.handle_http(put(bytes.clone(), declared)).await).await;
            assert_eq!(
                got,
                status,
                "{declared:?}: {}",
                String::from_utf8_lossy(&text)
            );
        }
        // An unsigned frame is refused on its first line, whatever follows.
        let mut unsigned = b"{\"payload\":1}\n".to_vec();
        unsigned.extend_from_slice(&[0; 4096]);
        let unsigned_length = unsigned.len() as u64;
        let (got, _) = body(
            keeper
                .handle_http(put(unsigned, Some(unsigned_length)))
                .await,
        )
        .await;
        assert_eq!(got, StatusCode::FORBIDDEN);
        // A line without its end within the bound.
        let endless = vec![b'x'; MAX_ENVELOPE_LINE_BYTES + 2];
        let (got, text) = body(keeper.handle_http(put(endless, Some(MAX_PUSH_BYTES))).await).await;
        assert_eq!(
            got,
            StatusCode::FORBIDDEN,
            "{}",
            String::from_utf8_lossy(&text)
        );
        // One push is received at a time.
        let receiving = keeper.receiving.try_lock().unwrap();
        let answer = keeper.handle_http(put(bytes.clone(), Some(length))).await;
        assert_eq!(answer.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert!(answer.headers().contains_key(RETRY_AFTER));
        drop(receiving);
        assert_eq!(keeper.held().await, None);
        let (got, _) = body(keeper.handle_http(put(bytes.clone(), Some(length))).await).await;
        assert_eq!(got, StatusCode::OK);
        assert_eq!(keeper.held().await, Some(generation));
        assert_eq!(
            std::fs::read(dir.path().join("replica/kept")).unwrap(),
            bytes
        );
        assert!(!dir.path().join("replica/kept.tmp").exists());
    }

    #[tokio::test]
    async fn a_snapshot_other_than_signed_is_not_kept() {
        let dir = tempfile::tempdir().unwrap();
        let keeper = keeper_in(dir.path());
        let now = now_ms();
        let generation = Generation {
            epoch: 1,
            number: 1,
        };
        let mut bytes = push_bytes(generation, b"snapshot", now);
        let last = bytes.len() - 1;
        bytes[last] ^= 1;
        let (got, text) = body(keeper.push(bytes, now).await).await;
        assert_eq!(got, StatusCode::FORBIDDEN);
        assert!(String::from_utf8_lossy(&text).contains("sha256"));
        assert_eq!(keeper.held().await, None);
        assert!(!dir.path().join("replica/kept.tmp").exists());
    }

    #[tokio::test]
    async fn a_discarded_copy_is_forgotten_and_nothing_older_kept_again() {
        let dir = tempfile::tempdir().unwrap();
        let keeper = keeper_in(dir.path());
        let now = now_ms();
        let high = Generation {
            epoch: 9,
            number: 0,
        };
        let (status, _) = body(keeper.push(push_bytes(high, b"garbage", now), now).await).await;
        assert_eq!(status, StatusCode::OK);
        let low = Generation {
            epoch: 2,
            number: 0,
        };
        let (status, _) = body(keeper.push(push_bytes(low, b"good", now), now).await).await;
        assert_eq!(status, StatusCode::CONFLICT);
        // A frame of the discarded copy's own epoch, captured before it.
        let captured = push_bytes(
            Generation {
                epoch: 9,
                number: 0,
            },
            b"garbage",
            now,
        );
        assert!(discard(&dir.path().join("replica")).unwrap());
        assert!(!discard(&dir.path().join("replica")).unwrap());
        assert_eq!(keeper.held().await, None);
        assert_eq!(read_back(&keeper, now).await, None);
        // Nothing at or below the discarded copy is kept again, before or after a restart.
        for keeper in [keeper, keeper_in(dir.path())] {
            for frame in [push_bytes(low, b"good", now), captured.clone()] {
                let (status, refused) = body(keeper.push(frame, now).await).await;
                assert_eq!(status, StatusCode::CONFLICT);
                let refused: PushRefused = serde_json::from_slice(&refused).unwrap();
                assert_eq!(refused.held, high);
            }
            assert_eq!(keeper.held().await, None);
            // A takeover must start above the discarded copy's epoch.
            assert_eq!(
                read_epoch(&keeper, now, 9).await,
                ReadAnswer::Refused { highest: 9 }
            );
        }
        let keeper = keeper_in(dir.path());
        assert_eq!(read_epoch(&keeper, now, 10).await, ReadAnswer::Copy(None));
        let (status, _) = body(
            keeper
                .push(
                    push_bytes(
                        Generation {
                            epoch: 10,
                            number: 0,
                        },
                        b"good",
                        now,
                    ),
                    now,
                )
                .await,
        )
        .await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(read_back(&keeper, now).await.as_deref(), Some(&b"good"[..]));
    }
}
