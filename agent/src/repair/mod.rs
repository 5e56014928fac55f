//! The repair path: run a whitelisted repair command for an incident, on a signed request from the
//! coordinator.
//!
//! A request ([`nodecare_protocol::repair::RepairRequest`] in a signed envelope) is refused, with
//! nothing run, when its body is too large, it is malformed, its signature is bad or expired, its
//! nonce was seen before, it is for another node, or its command is not in the repair whitelist.
//! Otherwise it runs at most once per incident: the "running" record is written durably before the
//! command starts, and every later request for the incident gets that record (its progress while
//! it runs, its result afterwards), across agent restarts. A run found "running" at start-up is
//! reported as `interrupted`, never repeated.
//!
//! The sandbox follows Ganeti's restricted commands, hardened: the whitelist rules and the
//! race-free exec of the diagnose scripts, an empty environment (fixed `PATH` only), the node's
//! repair lock (one repair at a time), a timeout that kills the whole process group, and capped
//! output. The exit code alone decides success. Refused requests are answered after a fixed delay,
//! per connection and without holding any lock, so a flood of them slows its sender only.
//!
//! Every request, accepted or refused, gets a line in the fsync'd audit log.

pub mod audit;
pub mod exec;
pub mod http;
pub mod lock;
pub mod store;

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use nodecare_collectors::whitelist::{Owner, Whitelist};
use nodecare_protocol::now_ms;
use nodecare_protocol::repair::{
    DEFAULT_REPAIR_COMMANDS_DIR, MAX_REPAIR_BODY_BYTES, RefusalReason, RepairRecord, RepairRefusal,
    RepairRequest, RepairRequestError, RepairState, open_repair_request,
};
use nodecare_protocol::sign::{KeyRing, SignedEnvelope, VerifyError, VerifyPolicy};
use serde_json::Value;
use tokio::task::AbortHandle;

use self::audit::{AuditEntry, AuditError, AuditLog, AuditSource, bounded};
use self::exec::{RunEnd, RunLimits, SharedOutput, kill_run_group, run_repair, shared_output};
use self::store::{NonceCheck, NonceStore, RecordFiles, RecordStore, StoreError};

/// Default time a repair command may run.
pub const DEFAULT_REPAIR_TIMEOUT: Duration = Duration::from_secs(600);
/// Default wait for the node's repair lock (Ganeti waits 8 s).
pub const DEFAULT_LOCK_TIMEOUT: Duration = Duration::from_secs(8);
/// Default delay before a refused request is answered.
pub const DEFAULT_INVALID_REQUEST_DELAY: Duration = Duration::from_millis(1500);
/// Default number of refusals waiting out their delay at once.
pub const DEFAULT_MAX_DELAYED_REFUSALS: usize = 256;
/// Default cap on kept stdout and stderr, each.
pub const DEFAULT_OUTPUT_CAP: usize = 64 * 1024;
/// Default longest validity window of a request (the nonce is kept that long).
pub const DEFAULT_MAX_REQUEST_TTL: Duration = Duration::from_secs(3600);
/// Default size at which the audit log is rotated.
pub const DEFAULT_AUDIT_MAX_BYTES: u64 = 64 * 1024 * 1024;

/// Settings of the repair path.
#[derive(Debug, Clone)]
pub struct RepairConfig {
    /// This node's name: requests for another node are refused.
    pub node: String,
    /// Where records, nonces and the audit log live.
    pub state_dir: PathBuf,
    /// The repair whitelist directory.
    pub commands_dir: PathBuf,
    /// Who must own the whitelist directory and its commands (root:root in production).
    pub whitelist_owner: Owner,
    /// The node's repair lock file.
    pub lock_path: PathBuf,
    /// How long a request waits for the lock before it is refused as busy.
    pub lock_timeout: Duration,
    /// Delay before answering a refused request.
    pub invalid_request_delay: Duration,
    /// Refusals that may wait out their delay at once; beyond that, a refusal is answered at once
    /// and its connection closed, so that a flood cannot pile up sleeping connections.
    pub max_delayed_refusals: usize,
    /// Time limit of a command without its own entry in `command_timeouts`.
    pub default_timeout: Duration,
    /// Per-command time limits.
    pub command_timeouts: BTreeMap<String, Duration>,
    /// How long output may stay open after the command exited.
    pub output_grace: Duration,
    /// stdout bytes kept.
    pub stdout_cap: usize,
    /// stderr bytes kept.
    pub stderr_cap: usize,
    /// Largest request body.
    pub max_body_bytes: usize,
    /// How long the body of a request may take to arrive.
    pub body_timeout: Duration,
    /// Longest accepted `expires_at - issued_at`.
    pub max_request_ttl: Duration,
    /// Clock skew tolerated on signatures.
    pub verify_policy: VerifyPolicy,
    /// Size at which the audit log is rotated.
    pub audit_max_bytes: u64,
}

impl RepairConfig {
    /// Production defaults for `node` with state under `state_dir`.
    pub fn new(node: impl Into<String>, state_dir: impl Into<PathBuf>) -> Self {
        let state_dir = state_dir.into();
        Self {
            node: node.into(),
            lock_path: lock::default_lock_path(&state_dir),
            state_dir,
            commands_dir: PathBuf::from(DEFAULT_REPAIR_COMMANDS_DIR),
            whitelist_owner: Owner::ROOT,
            lock_timeout: DEFAULT_LOCK_TIMEOUT,
            invalid_request_delay: DEFAULT_INVALID_REQUEST_DELAY,
            max_delayed_refusals: DEFAULT_MAX_DELAYED_REFUSALS,
            default_timeout: DEFAULT_REPAIR_TIMEOUT,
            command_timeouts: BTreeMap::new(),
            output_grace: Duration::from_secs(2),
            stdout_cap: DEFAULT_OUTPUT_CAP,
            stderr_cap: DEFAULT_OUTPUT_CAP,
            max_body_bytes: MAX_REPAIR_BODY_BYTES,
            body_timeout: Duration::from_secs(10),
            max_request_ttl: DEFAULT_MAX_REQUEST_TTL,
            verify_policy: VerifyPolicy::default(),
            audit_max_bytes: DEFAULT_AUDIT_MAX_BYTES,
        }
    }

    /// The time limit of `command`.
    pub fn timeout_of(&self, command: &str) -> Duration {
        self.command_timeouts
            .get(command)
            .copied()
            .unwrap_or(self.default_timeout)
    }

    fn whitelist(&self) -> Whitelist {
        Whitelist::with_owner(&self.commands_dir, self.whitelist_owner)
    }
}

/// Why the repair service could not start or a manual run could not happen.
#[derive(Debug, thiserror::Error)]
pub enum RepairError {
    /// Durable state is unusable.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The audit log is unusable.
    #[error(transparent)]
    Audit(#[from] AuditError),
    /// The command is not whitelisted.
    #[error(transparent)]
    Whitelist(#[from] nodecare_collectors::whitelist::WhitelistError),
    /// The repair lock was not acquired.
    #[error(transparent)]
    Lock(#[from] lock::LockError),
    /// The input has no canonical form.
    #[error(transparent)]
    Request(#[from] RepairRequestError),
}

/// The refusal reason for a request that did not open.
pub fn refusal_of(error: &RepairRequestError) -> RefusalReason {
    match error {
        RepairRequestError::Verify(verify) => match verify {
            VerifyError::Malformed(_) => RefusalReason::Malformed,
            VerifyError::UnknownKey(_) | VerifyError::BadSignature => RefusalReason::BadSignature,
            VerifyError::Expired { .. } | VerifyError::ClockSkew { .. } => RefusalReason::Expired,
            VerifyError::Replay { .. } => RefusalReason::Replayed,
            VerifyError::WrongNode { .. } => RefusalReason::WrongNode,
        },
        RepairRequestError::NodeMismatch { .. } => RefusalReason::WrongNode,
        RepairRequestError::BadIncidentId(_)
        | RepairRequestError::BadCommand(_)
        | RepairRequestError::BadNonce(_)
        | RepairRequestError::BadNode(_)
        | RepairRequestError::Input(_)
        | RepairRequestError::Payload(_)
        | RepairRequestError::Sign(_) => RefusalReason::Malformed,
    }
}

/// The answer to a repair request.
#[derive(Debug, Clone, PartialEq)]
pub enum RepairAnswer {
    /// Nothing ran. Answered after the invalid-request delay unless `delay` is false (busy or
    /// internal errors, which are not the sender's fault).
    Refused {
        /// Why.
        refusal: RepairRefusal,
        /// Whether the deliberate delay applies.
        delay: bool,
    },
    /// The incident's record: just started, or from an earlier request.
    Record {
        /// The record.
        record: RepairRecord,
        /// Whether this request started the run.
        started: bool,
    },
}

impl RepairAnswer {
    fn refused(reason: RefusalReason, message: impl Into<String>) -> Self {
        let delay = !matches!(reason, RefusalReason::Busy | RefusalReason::Internal);
        Self::Refused {
            refusal: RepairRefusal::new(reason, message),
            delay,
        }
    }
}

/// Who sent a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Origin {
    /// Where it came from.
    pub source: AuditSource,
    /// Peer address or operator.
    pub peer: String,
}

/// A run in progress.
#[derive(Debug)]
struct LiveRun {
    record: RepairRecord,
    output: SharedOutput,
    pgid: Mutex<i32>,
    abort: Mutex<Option<AbortHandle>>,
}

impl LiveRun {
    fn snapshot(&self) -> RepairRecord {
        let mut record = self.record.clone();
        let live = self.output.lock().unwrap_or_else(PoisonError::into_inner);
        record.stdout = live.stdout.text();
        record.stderr = live.stderr.text();
        record.stdout_truncated = live.stdout.truncated();
        record.stderr_truncated = live.stderr.truncated();
        record
    }
}

#[derive(Debug)]
enum Slot {
    /// Claimed by a request that is still checking the whitelist or waiting for the lock.
    Starting,
    Running(Arc<LiveRun>),
}

#[derive(Debug)]
struct Runs {
    store: RecordStore,
    slots: HashMap<String, Slot>,
}

enum Claim {
    Claimed,
    Starting,
    Running(Arc<LiveRun>),
    Recorded,
}

/// The repair service: verifies requests, runs commands, keeps records.
#[derive(Debug)]
pub struct RepairService {
    config: RepairConfig,
    keys: KeyRing,
    runs: Mutex<Runs>,
    files: RecordFiles,
    nonces: Arc<Mutex<NonceStore>>,
    audit: AuditLog,
    refused_audit: AuditLog,
    delayed_refusals: Arc<tokio::sync::Semaphore>,
    refusals: Mutex<BTreeMap<&'static str, u64>>,
}

/// Fields of a request as claimed before authentication, for the audit log.
#[derive(Debug, Default, Clone)]
struct Claimed {
    authenticated: bool,
    incident_id: Option<String>,
    command: Option<String>,
    key_id: Option<String>,
    nonce: Option<String>,
}

impl Claimed {
    fn from_envelope(envelope: &SignedEnvelope) -> Self {
        let text = |key: &str| {
            envelope
                .payload
                .get(key)
                .and_then(Value::as_str)
                .map(bounded)
        };
        Self {
            authenticated: false,
            incident_id: text("incident_id"),
            command: text("command"),
            key_id: Some(bounded(&envelope.key_id)),
            nonce: text("nonce"),
        }
    }
}

impl RepairService {
    /// Opens the state under `config.state_dir` (turning interrupted runs into `interrupted`
    /// records) and starts the audit log.
    pub fn open(config: RepairConfig, keys: KeyRing) -> Result<Arc<Self>, RepairError> {
        let (store, interrupted) = RecordStore::open(&config.state_dir)?;
        let nonces = NonceStore::open(&config.state_dir, now_ms())?;
        let audit = AuditLog::open(&config.state_dir, config.audit_max_bytes)?;
        let refused_audit = AuditLog::open_named(
            &config.state_dir,
            audit::REFUSED_FILE_NAME,
            config.audit_max_bytes,
        )?;
        for record in &interrupted {
            tracing::warn!(
                incident = %record.incident_id,
                command = %record.command,
                "repair was running when the agent stopped; reported as interrupted"
            );
        }
        Ok(Arc::new(Self {
            files: store.files(),
            runs: Mutex::new(Runs {
                store,
                slots: HashMap::new(),
            }),
            nonces: Arc::new(Mutex::new(nonces)),
            audit,
            refused_audit,
            delayed_refusals: Arc::new(tokio::sync::Semaphore::new(
                config
                    .max_delayed_refusals
                    .min(tokio::sync::Semaphore::MAX_PERMITS),
            )),
            refusals: Mutex::new(RefusalReason::ALL.iter().map(|r| (r.as_str(), 0)).collect()),
            keys,
            config,
        }))
    }

    /// The settings.
    pub fn config(&self) -> &RepairConfig {
        &self.config
    }

    /// The audit log.
    pub fn audit_log(&self) -> &AuditLog {
        &self.audit
    }

    /// Refused requests since the agent started, by reason (every reason present).
    pub fn refusal_counts(&self) -> BTreeMap<&'static str, u64> {
        self.refusals
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn count_refusal(&self, reason: RefusalReason) {
        *self
            .refusals
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(reason.as_str())
            .or_insert(0) += 1;
    }

    fn runs(&self) -> std::sync::MutexGuard<'_, Runs> {
        self.runs.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The incident's record: the live progress while it runs, else the stored record.
    pub fn record(&self, incident_id: &str) -> Result<Option<RepairRecord>, StoreError> {
        {
            let runs = self.runs();
            match runs.slots.get(incident_id) {
                Some(Slot::Running(live)) => return Ok(Some(live.snapshot())),
                Some(Slot::Starting) | None => {}
            }
            if !runs.store.contains(incident_id) {
                return Ok(None);
            }
        }
        self.files.load(incident_id).map(Some)
    }

    async fn audit(
        &self,
        origin: &Origin,
        claimed: &Claimed,
        outcome: &str,
        detail: Option<String>,
        message: Option<String>,
    ) -> Result<(), AuditError> {
        self.audit_to(&self.audit, origin, claimed, outcome, detail, message)
            .await
    }

    async fn audit_to(
        &self,
        log: &AuditLog,
        origin: &Origin,
        claimed: &Claimed,
        outcome: &str,
        detail: Option<String>,
        message: Option<String>,
    ) -> Result<(), AuditError> {
        let entry = AuditEntry {
            at: now_ms(),
            source: origin.source.clone(),
            peer: origin.peer.clone(),
            authenticated: claimed.authenticated,
            incident_id: claimed.incident_id.clone(),
            command: claimed.command.clone(),
            key_id: claimed.key_id.clone(),
            nonce: claimed.nonce.clone(),
            outcome: outcome.into(),
            detail,
            message: message.map(|text| bounded(&text)),
        };
        log.record(&entry).await
    }

    async fn refuse(
        &self,
        origin: &Origin,
        claimed: &Claimed,
        reason: RefusalReason,
        message: String,
    ) -> RepairAnswer {
        let detail = serde_json::to_value(reason)
            .ok()
            .and_then(|value| value.as_str().map(str::to_owned));
        // Refused requests have a log of their own: a flood of them must not rotate the
        // audit of real repairs away.
        if let Err(error) = self
            .audit_to(
                &self.refused_audit,
                origin,
                claimed,
                "refused",
                detail,
                Some(message.clone()),
            )
            .await
        {
            tracing::error!(%error, "cannot audit a refused repair request");
        }
        self.count_refusal(reason);
        RepairAnswer::refused(reason, message)
    }

    /// Handles the body of `POST /1/repair` (already read within the size limit).
    pub async fn submit(self: &Arc<Self>, origin: &Origin, body: &[u8]) -> RepairAnswer {
        let envelope = match SignedEnvelope::from_json(body) {
            Ok(envelope) => envelope,
            Err(error) => {
                return self
                    .refuse(
                        origin,
                        &Claimed::default(),
                        RefusalReason::Malformed,
                        format!("body is not a signed envelope: {error}"),
                    )
                    .await;
            }
        };
        let mut claimed = Claimed::from_envelope(&envelope);
        let now = now_ms();
        let request = match open_repair_request(
            &self.keys,
            &envelope,
            now,
            self.config.verify_policy,
            &self.config.node,
        ) {
            Ok(request) => request,
            Err(error) => {
                return self
                    .refuse(origin, &claimed, refusal_of(&error), error.to_string())
                    .await;
            }
        };
        claimed.authenticated = true;
        let window = envelope.expires_at_ms.saturating_sub(envelope.issued_at_ms);
        if u128::from(window) > self.config.max_request_ttl.as_millis() {
            let message = format!(
                "validity window {window} ms exceeds the {} ms this node accepts",
                self.config.max_request_ttl.as_millis()
            );
            return self
                .refuse(origin, &claimed, RefusalReason::Malformed, message)
                .await;
        }
        let keep_until = envelope
            .expires_at_ms
            .saturating_add(self.config.verify_policy.skew_ms());
        let nonces = Arc::clone(&self.nonces);
        let nonce = request.nonce.clone();
        let checked = tokio::task::spawn_blocking(move || {
            nonces
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .check_and_insert(&nonce, keep_until, now)
        })
        .await;
        match checked {
            Ok(Ok(NonceCheck::Fresh)) => {}
            Ok(Ok(NonceCheck::Replayed)) => {
                let message = format!(
                    "nonce {:?} was already used (replayed request)",
                    request.nonce
                );
                return self
                    .refuse(origin, &claimed, RefusalReason::Replayed, message)
                    .await;
            }
            Ok(Err(error)) => {
                return self
                    .refuse(origin, &claimed, RefusalReason::Internal, error.to_string())
                    .await;
            }
            Err(error) => {
                return self
                    .refuse(origin, &claimed, RefusalReason::Internal, error.to_string())
                    .await;
            }
        }
        let valid_until = envelope
            .expires_at_ms
            .saturating_add(self.config.verify_policy.skew_ms());
        self.start(origin, &claimed, request, now, valid_until)
            .await
    }

    /// Returns an existing run for the incident, or starts one.
    /// `valid_until`: Unix ms after which the request must not start its command (its expiry
    /// plus the allowed clock skew).
    async fn start(
        self: &Arc<Self>,
        origin: &Origin,
        claimed: &Claimed,
        request: RepairRequest,
        now: u64,
        valid_until: u64,
    ) -> RepairAnswer {
        let fingerprint = match request.input_fingerprint() {
            Ok(fingerprint) => fingerprint,
            Err(error) => {
                return self
                    .refuse(origin, claimed, RefusalReason::Malformed, error.to_string())
                    .await;
            }
        };
        let claim = {
            let mut runs = self.runs();
            match runs.slots.get(&request.incident_id) {
                Some(Slot::Starting) => Claim::Starting,
                Some(Slot::Running(live)) => Claim::Running(Arc::clone(live)),
                None if runs.store.contains(&request.incident_id) => Claim::Recorded,
                None => {
                    runs.slots
                        .insert(request.incident_id.clone(), Slot::Starting);
                    Claim::Claimed
                }
            }
        };
        let existing = match claim {
            Claim::Claimed => None,
            Claim::Starting => {
                let message = format!(
                    "a request for incident {} is being started; retry",
                    request.incident_id
                );
                return self
                    .refuse(origin, claimed, RefusalReason::Busy, message)
                    .await;
            }
            Claim::Running(live) => Some(Ok(live.snapshot())),
            Claim::Recorded => Some(self.files.load(&request.incident_id)),
        };
        if let Some(existing) = existing {
            return match existing {
                Ok(record) => {
                    self.duplicate(origin, claimed, &request, &fingerprint, record)
                        .await
                }
                Err(error) => {
                    let message = format!(
                        "incident {} has a record that cannot be read: {error}",
                        request.incident_id
                    );
                    self.refuse(origin, claimed, RefusalReason::Internal, message)
                        .await
                }
            };
        }
        match self
            .launch(origin, claimed, &request, fingerprint, now, valid_until)
            .await
        {
            Ok(record) => RepairAnswer::Record {
                record,
                started: true,
            },
            Err(answer) => {
                let mut runs = self.runs();
                if matches!(runs.slots.get(&request.incident_id), Some(Slot::Starting)) {
                    runs.slots.remove(&request.incident_id);
                }
                runs.store.unreserve(&request.incident_id);
                answer
            }
        }
    }

    async fn duplicate(
        &self,
        origin: &Origin,
        claimed: &Claimed,
        request: &RepairRequest,
        fingerprint: &str,
        record: RepairRecord,
    ) -> RepairAnswer {
        if record.command != request.command || record.input_fingerprint != fingerprint {
            let message = format!(
                "incident {} already has a {} run of {:?} with input {}; refusing {:?} with input {}",
                request.incident_id,
                record.state.as_str(),
                record.command,
                record.input_fingerprint,
                request.command,
                fingerprint
            );
            return self
                .refuse(origin, claimed, RefusalReason::IncidentConflict, message)
                .await;
        }
        if let Err(error) = self
            .audit(
                origin,
                claimed,
                "duplicate",
                Some(record.state.as_str().to_owned()),
                None,
            )
            .await
        {
            tracing::error!(%error, "cannot audit a duplicate repair request");
        }
        RepairAnswer::Record {
            record,
            started: false,
        }
    }

    /// Checks the whitelist, takes the lock, records the run durably and spawns it; a request
    /// that expired while it waited for the lock (or while the agent was stopped) runs nothing.
    async fn launch(
        self: &Arc<Self>,
        origin: &Origin,
        claimed: &Claimed,
        request: &RepairRequest,
        fingerprint: String,
        now: u64,
        valid_until: u64,
    ) -> Result<RepairRecord, RepairAnswer> {
        let whitelist = self.config.whitelist();
        let command = request.command.clone();
        let opened = tokio::task::spawn_blocking(move || whitelist.open(&command)).await;
        let executable = match opened {
            Ok(Ok(executable)) => executable,
            Ok(Err(error)) => {
                return Err(self
                    .refuse(
                        origin,
                        claimed,
                        RefusalReason::NotWhitelisted,
                        error.to_string(),
                    )
                    .await);
            }
            Err(error) => {
                return Err(self
                    .refuse(origin, claimed, RefusalReason::Internal, error.to_string())
                    .await);
            }
        };
        let guard = match lock::acquire(&self.config.lock_path, self.config.lock_timeout).await {
            Ok(guard) => guard,
            Err(error @ lock::LockError::Busy { .. }) => {
                return Err(self
                    .refuse(origin, claimed, RefusalReason::Busy, error.to_string())
                    .await);
            }
            Err(error) => {
                return Err(self
                    .refuse(origin, claimed, RefusalReason::Internal, error.to_string())
                    .await);
            }
        };
        // Verified when it arrived, it may have waited since: for the lock, or in a stopped
        // agent. A command starts only within the request's validity.
        let started = now_ms();
        if started > valid_until {
            drop(guard);
            let message = format!(
                "expired at {valid_until} ms (skew included) while it waited to start, now {started} ms"
            );
            return Err(self
                .refuse(origin, claimed, RefusalReason::Expired, message)
                .await);
        }
        let mut record = match RepairRecord::running(request, now) {
            Ok(record) => record,
            Err(error) => {
                return Err(self
                    .refuse(origin, claimed, RefusalReason::Malformed, error.to_string())
                    .await);
            }
        };
        record.input_fingerprint = fingerprint;
        if let Err(error) = self.audit(origin, claimed, "accepted", None, None).await {
            return Err(self
                .refuse(
                    origin,
                    claimed,
                    RefusalReason::Internal,
                    format!("cannot audit the request, so nothing runs: {error}"),
                )
                .await);
        }
        // Durable before spawning: after a crash the run is reported, never repeated.
        let files = self.files.clone();
        let to_save = record.clone();
        let saved = tokio::task::spawn_blocking(move || files.save(&to_save)).await;
        match saved {
            Ok(Ok(())) => {}
            Ok(Err(error)) => {
                return Err(self
                    .refuse(origin, claimed, RefusalReason::Internal, error.to_string())
                    .await);
            }
            Err(error) => {
                return Err(self
                    .refuse(origin, claimed, RefusalReason::Internal, error.to_string())
                    .await);
            }
        }
        self.runs().store.reserve(&request.incident_id);
        let live = Arc::new(LiveRun {
            record: record.clone(),
            output: shared_output(self.config.stdout_cap, self.config.stderr_cap),
            pgid: Mutex::new(0),
            abort: Mutex::new(None),
        });
        self.runs().slots.insert(
            request.incident_id.clone(),
            Slot::Running(Arc::clone(&live)),
        );
        let input = serde_json::to_vec(&request.input).unwrap_or_default();
        let limits = RunLimits {
            timeout: self.config.timeout_of(&request.command),
            output_grace: self.config.output_grace,
        };
        let service = Arc::clone(self);
        let task_live = Arc::clone(&live);
        let task = tokio::spawn(async move {
            let _guard = guard;
            let pgid_slot = Arc::clone(&task_live);
            let (end, duration) =
                run_repair(&executable, input, limits, &task_live.output, move |pgid| {
                    *pgid_slot
                        .pgid
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner) = pgid;
                })
                .await;
            service.finish(&task_live, end, duration).await;
        });
        *live.abort.lock().unwrap_or_else(PoisonError::into_inner) = Some(task.abort_handle());
        Ok(record)
    }

    async fn finish(&self, live: &LiveRun, end: RunEnd, duration: Duration) {
        let record = finished_record(live.snapshot(), &end, duration, now_ms());
        let files = self.files.clone();
        let to_save = record.clone();
        match tokio::task::spawn_blocking(move || files.save(&to_save)).await {
            Ok(Ok(())) => {}
            Ok(Err(error)) => tracing::error!(%error, "cannot record a finished repair"),
            Err(error) => tracing::error!(%error, "cannot record a finished repair"),
        }
        self.runs().slots.remove(&record.incident_id);
        let origin = Origin {
            source: AuditSource::Agent,
            peer: "local".into(),
        };
        let claimed = Claimed {
            authenticated: true,
            incident_id: Some(record.incident_id.clone()),
            command: Some(record.command.clone()),
            key_id: None,
            nonce: None,
        };
        let message = record
            .error
            .clone()
            .or_else(|| record.exit_code.map(|code| format!("exit code {code}")));
        if let Err(error) = self
            .audit(
                &origin,
                &claimed,
                "finished",
                Some(record.state.as_str().to_owned()),
                message,
            )
            .await
        {
            tracing::error!(%error, "cannot audit a finished repair");
        }
    }

    /// Stops every run without recording an outcome (as a crash would): their records stay
    /// "running" on disk and the next start reports them as `interrupted`. The process groups are
    /// killed.
    pub fn abandon_runs(&self) {
        let runs = self.runs();
        for slot in runs.slots.values() {
            if let Slot::Running(live) = slot {
                if let Some(abort) = live
                    .abort
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .take()
                {
                    abort.abort();
                }
                kill_run_group(*live.pgid.lock().unwrap_or_else(PoisonError::into_inner));
            }
        }
    }

    /// Whether any command is running.
    pub fn is_idle(&self) -> bool {
        self.runs().slots.is_empty()
    }
}

/// Starts the repair service for the agent with the cluster key at `key_path`, or logs why it
/// cannot (then the endpoint answers 503 and nothing can run).
pub fn open_with_key_file(config: RepairConfig, key_path: &Path) -> Option<Arc<RepairService>> {
    let key = match crate::signing::load_key(key_path) {
        Ok(key) => key,
        Err(error) => {
            tracing::error!(%error, "repairs are unavailable");
            return None;
        }
    };
    match RepairService::open(config, KeyRing::single(key)) {
        Ok(service) => Some(service),
        Err(error) => {
            tracing::error!(%error, "repairs are unavailable");
            None
        }
    }
}

/// The final record of a run.
pub fn finished_record(
    mut record: RepairRecord,
    end: &RunEnd,
    duration: Duration,
    now: u64,
) -> RepairRecord {
    record.finished_at_ms = Some(now);
    record.duration_ms = Some(u64::try_from(duration.as_millis()).unwrap_or(u64::MAX));
    match end {
        RunEnd::Exited(code) => {
            record.exit_code = Some(*code);
            // The exit code alone decides: anything but 0 is a failure.
            record.state = if *code == 0 {
                RepairState::Succeeded
            } else {
                RepairState::Failed
            };
        }
        RunEnd::Signalled(signal) => {
            record.signal = Some(*signal);
            record.state = RepairState::Failed;
            record.error = Some(format!("killed by signal {signal}"));
        }
        RunEnd::TimedOut(limit) => {
            record.state = RepairState::TimedOut;
            record.signal = Some(libc::SIGKILL);
            record.error = Some(format!(
                "timed out after {} s; its process group was killed",
                limit.as_secs_f64()
            ));
        }
        RunEnd::StdoutOverflow(cap) => {
            // Not under the policy repairs run with; recorded as a failure all the same.
            record.state = RepairState::Failed;
            record.error = Some(format!("wrote more than {cap} bytes to stdout"));
        }
        RunEnd::SpawnFailed(reason) => {
            record.state = RepairState::Failed;
            record.error = Some(format!("cannot start the command: {reason}"));
        }
        RunEnd::Io(reason) => {
            record.state = RepairState::Failed;
            record.error = Some(reason.clone());
        }
    }
    record
}

/// Runs a repair command by hand (`nodecare-agent repair`), in the same sandbox and under the
/// same lock as the daemon's runs, and audits it. Nothing is recorded per incident.
pub async fn run_manually(
    config: &RepairConfig,
    command: &str,
    input: &Value,
    operator: &str,
) -> Result<RepairRecord, RepairError> {
    std::fs::create_dir_all(&config.state_dir).map_err(|error| StoreError {
        path: config.state_dir.display().to_string(),
        reason: error.to_string(),
    })?;
    let audit = AuditLog::open(&config.state_dir, config.audit_max_bytes)?;
    let mut entry = AuditEntry {
        at: now_ms(),
        source: AuditSource::Cli,
        peer: operator.to_owned(),
        authenticated: true,
        incident_id: None,
        command: Some(bounded(command)),
        key_id: None,
        nonce: None,
        outcome: "accepted".into(),
        detail: None,
        message: None,
    };
    let executable = match config.whitelist().open(command) {
        Ok(executable) => executable,
        Err(error) => {
            entry.outcome = "refused".into();
            entry.detail = Some("not-whitelisted".into());
            entry.message = Some(bounded(&error.to_string()));
            audit.record(&entry).await?;
            return Err(error.into());
        }
    };
    let guard = match lock::acquire(&config.lock_path, config.lock_timeout).await {
        Ok(guard) => guard,
        Err(error) => {
            entry.outcome = "refused".into();
            entry.detail = Some("busy".into());
            entry.message = Some(bounded(&error.to_string()));
            audit.record(&entry).await?;
            return Err(error.into());
        }
    };
    audit.record(&entry).await?;
    let request = RepairRequest {
        node: config.node.clone(),
        incident_id: "00000000-0000-0000-0000-000000000000".into(),
        command: command.to_owned(),
        input: input.clone(),
        nonce: "manual".into(),
    };
    let record = RepairRecord::running(&request, now_ms())?;
    let output = shared_output(config.stdout_cap, config.stderr_cap);
    let limits = RunLimits {
        timeout: config.timeout_of(command),
        output_grace: config.output_grace,
    };
    let bytes = serde_json::to_vec(input).unwrap_or_default();
    let (end, duration) = run_repair(&executable, bytes, limits, &output, |_| {}).await;
    drop(guard);
    let live = LiveRun {
        record,
        output,
        pgid: Mutex::new(0),
        abort: Mutex::new(None),
    };
    let record = finished_record(live.snapshot(), &end, duration, now_ms());
    entry.at = now_ms();
    entry.outcome = "finished".into();
    entry.detail = Some(record.state.as_str().to_owned());
    entry.message = record
        .error
        .clone()
        .or_else(|| record.exit_code.map(|code| format!("exit code {code}")));
    audit.record(&entry).await?;
    Ok(record)
}

/// The state directory's audit log path (for documentation and tools).
pub fn audit_path(state_dir: &Path) -> PathBuf {
    state_dir.join(audit::AUDIT_FILE_NAME)
}

/// The state directory's log of refused requests.
pub fn refused_audit_path(state_dir: &Path) -> PathBuf {
    state_dir.join(audit::REFUSED_FILE_NAME)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_verify_error_maps_to_a_refusal() {
        let cases = [
            (VerifyError::Malformed("x".into()), RefusalReason::Malformed),
            (
                VerifyError::UnknownKey("k".into()),
                RefusalReason::BadSignature,
            ),
            (VerifyError::BadSignature, RefusalReason::BadSignature),
            (
                VerifyError::Expired {
                    expires_at_ms: 1,
                    now: 2,
                    skew: 0,
                },
                RefusalReason::Expired,
            ),
            (
                VerifyError::ClockSkew {
                    issued_at_ms: 1,
                    ahead: 2,
                    skew: 0,
                },
                RefusalReason::Expired,
            ),
            (
                VerifyError::WrongNode {
                    got: "a".into(),
                    expected: "b".into(),
                },
                RefusalReason::WrongNode,
            ),
        ];
        for (error, reason) in cases {
            assert_eq!(refusal_of(&RepairRequestError::Verify(error)), reason);
        }
        assert_eq!(
            refusal_of(&RepairRequestError::NodeMismatch {
                request: "a".into(),
                envelope: "b".into()
            }),
            RefusalReason::WrongNode
        );
        assert_eq!(
            refusal_of(&RepairRequestError::BadCommand("x".into())),
            RefusalReason::Malformed
        );
    }

    #[test]
    fn exit_code_alone_decides_success() {
        let request = RepairRequest {
            node: "n".into(),
            incident_id: "0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b".into(),
            command: "c".into(),
            input: serde_json::json!({}),
            nonce: "x".into(),
        };
        let running = RepairRecord::running(&request, 10).unwrap();
        let cases = [
            (RunEnd::Exited(0), RepairState::Succeeded),
            (RunEnd::Exited(1), RepairState::Failed),
            (RunEnd::Exited(-1), RepairState::Failed),
            (RunEnd::Signalled(15), RepairState::Failed),
            (
                RunEnd::TimedOut(Duration::from_secs(1)),
                RepairState::TimedOut,
            ),
            (RunEnd::SpawnFailed("x".into()), RepairState::Failed),
            (RunEnd::Io("x".into()), RepairState::Failed),
        ];
        for (end, state) in cases {
            let record = finished_record(running.clone(), &end, Duration::from_millis(7), 20);
            assert_eq!(record.state, state, "{end:?}");
            assert_eq!(record.duration_ms, Some(7));
            assert_eq!(record.finished_at_ms, Some(20));
        }
        assert!(
            !RepairAnswer::refused(RefusalReason::Busy, "x")
                .eq(&RepairAnswer::refused(RefusalReason::Malformed, "x"))
        );
    }
}
