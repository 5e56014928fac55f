//! The coordinator's state across master failovers: replicas on the master candidates' agents.
//!
//! Ganeti elects the master; nodecare's state follows it. The acting coordinator pushes its whole
//! state (the SQLite database as one snapshot, `Store::snapshot`) to the agent of every master
//! candidate, numbered with a [`Generation`], and needs a majority of them to keep it
//! ([`write_quorum`]) before any of its writes reaches Ganeti or an agent ([`Replicator::ensure`],
//! called by [`ReplicatedGaneti`] for every Ganeti write, by the repair client, after every write
//! to the API, and at the end of a round when the state changed). `ensure` pushes every time,
//! changed or not: the push is what confirms with a majority that this coordinator's epoch is
//! still current, so a superseded master is fenced before it writes. A coordinator that becomes
//! the master reads the copies of the master candidates first ([`Replicator::take_over`]), naming
//! the epoch it will start ([`takeover_epoch`]): each agent that answers promises to refuse pushes
//! of lower epochs from then on, so the old master cannot reach a majority between the read and
//! the new master's push. With promises from enough of them ([`read_quorum`]: any majority of
//! writes and that many reads share a node), it restores the newest copy when it is newer than
//! its own state, and pushes the promised epoch to a majority; only then does it act. A copy is
//! kept by an agent only when it is newer than the one it holds and of an epoch not below the one
//! it promised, so a coordinator that lost the master role cannot reach a majority any more: its
//! writes stop (fencing), whatever it believes. A confirmation holds a lease ([`Lease`]): a write
//! starts only within it ([`Replicator::confirm_write`]), and a takeover waits it out, with the
//! longest a write may take, between its read and its push, so that the old master's last
//! writes are over before the new master acts.
//!
//! Limits: the snapshot is the whole database (kept small by retention); a master candidate
//! added after the last push holds nothing until the next push; with fewer than a majority of
//! master candidates' agents reachable, the master writes nothing (visible in the round's error
//! and `/1/replication`).

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use nodecare_protocol::replica::{
    Generation, Lease, PushAccepted, PushRefused, REPLICA_PATH, REPLICA_READ_PATH, ReadAnswer,
    ReadCopy, ReplicaHeader, ReplicaRead, open_answer, sign_push, sign_read,
};
use nodecare_protocol::{HmacKey, KeyRing, Signer, VerifyPolicy, now_ms};
use serde::Serialize;

use crate::scrape::AgentUrls;
use crate::store::{Store, StoreError};
use nodecare_ganeti::{
    ClusterInfo, Ganeti, GanetiError, GanetiFuture, Group, Instance, Job, JobCancel, JobId,
    JobSummary, Node, Op, Reason, TagTarget,
};

/// The store document holding the generation of the state (the last one pushed or restored).
pub const GENERATION_DOCUMENT: &str = "replica-generation";

/// How long a push or read request stays valid.
const REQUEST_TTL_MS: u64 = 60_000;

/// Reads of one takeover, the first and those tried again above an epoch a refusal named.
const TAKEOVER_READ_ATTEMPTS: usize = 3;

/// Copies a majority of `candidates` master candidates must keep before the master writes.
pub const fn write_quorum(candidates: usize) -> usize {
    candidates / 2 + 1
}

/// Answers a new master needs from `candidates` master candidates before it acts: any
/// [`write_quorum`] of them and this many share at least one node.
pub const fn read_quorum(candidates: usize) -> usize {
    candidates.saturating_sub(write_quorum(candidates)) + 1
}

/// One master candidate's agent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Peer {
    /// Node name.
    pub node: String,
    /// Its agent's base URL.
    pub base_url: String,
}

/// The master candidates of `nodes` (the master included), with their agents' URLs.
pub fn candidates(nodes: &[Node], urls: &AgentUrls) -> Vec<Peer> {
    let mut peers: Vec<Peer> = nodes
        .iter()
        .filter(|node| node.master_candidate || node.role == nodecare_ganeti::NodeRole::Master)
        .map(|node| Peer {
            node: node.name.clone(),
            base_url: urls.base(node),
        })
        .collect();
    peers.sort_by(|a, b| a.node.cmp(&b.node));
    peers
}

/// What a new master does with the copies it read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TakeoverPlan {
    /// Restore the copy of this node (its generation is newer than the local state's).
    pub restore_from: Option<(String, Generation)>,
    /// The generation the new master starts with.
    pub start: Generation,
}

/// The epoch a takeover names in its reads: one above the local state's and above `seen`, the
/// highest epoch a refused read named.
pub const fn takeover_epoch(local: Generation, seen: u64) -> u64 {
    let highest = if local.epoch > seen {
        local.epoch
    } else {
        seen
    };
    highest.saturating_add(1)
}

/// Plans a takeover from the local state's generation, the epoch its reads named (promised by
/// the nodes that answered; 0 for reads without one) and the copies read (node, generation): it
/// starts that epoch, or one above every epoch seen when that is higher (it is not when the
/// copies come from nodes that promised it).
pub fn plan_takeover(
    local: Generation,
    promised: u64,
    copies: &[(String, Generation)],
) -> TakeoverPlan {
    let newest = copies
        .iter()
        .filter(|(_, generation)| *generation > local)
        .max_by(|a, b| a.1.cmp(&b.1).then_with(|| b.0.cmp(&a.0)))
        .cloned();
    let epoch = copies
        .iter()
        .map(|(_, generation)| generation.epoch)
        .chain(std::iter::once(local.epoch))
        .max()
        .unwrap_or(0);
    TakeoverPlan {
        restore_from: newest,
        start: Generation {
            epoch: epoch.saturating_add(1).max(promised),
            number: 0,
        },
    }
}

/// A push's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PushReply {
    /// Kept (or already held): the generation held now.
    Accepted(Generation),
    /// Refused: the node holds this newer (or conflicting) generation.
    Refused(Generation),
    /// Refused: the node promised this later epoch to another coordinator's takeover.
    Promised(u64),
}

/// What the answers to a push amount to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PushOutcome {
    /// A majority keeps the generation pushed (the nodes that keep it, sorted).
    Kept(Vec<String>),
    /// A node holds a newer generation: another coordinator took over.
    Superseded {
        /// The node.
        node: String,
        /// What it holds.
        held: Generation,
    },
    /// Fewer than a majority keep it (the nodes that do, sorted).
    NoQuorum(Vec<String>),
}

/// Judges the answers `replies` (node, answer) of `candidates` master candidates to a push of
/// `generation` (a node that did not answer is absent): any node holding a newer generation, or
/// having promised a later epoch, supersedes this coordinator; otherwise the nodes holding
/// exactly `generation` count toward [`write_quorum`].
pub fn judge_push(
    generation: Generation,
    candidates: usize,
    replies: &[(String, PushReply)],
) -> PushOutcome {
    let mut kept_by = Vec::new();
    let mut superseded = None;
    for (node, reply) in replies {
        match reply {
            PushReply::Accepted(held) if *held == generation => kept_by.push(node.clone()),
            PushReply::Accepted(held) | PushReply::Refused(held) => {
                if *held > generation {
                    superseded = Some((node.clone(), *held));
                }
            }
            PushReply::Promised(epoch) => {
                let promised = Generation {
                    epoch: *epoch,
                    number: 0,
                };
                if promised > generation {
                    superseded = Some((node.clone(), promised));
                }
            }
        }
    }
    kept_by.sort();
    if let Some((node, held)) = superseded {
        return PushOutcome::Superseded { node, held };
    }
    if kept_by.len() < write_quorum(candidates) {
        return PushOutcome::NoQuorum(kept_by);
    }
    PushOutcome::Kept(kept_by)
}

/// A boxed future of a peer call.
pub type PeerFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, String>> + Send + 'a>>;

/// How replicas reach the master candidates' agents: HTTP ([`HttpPeers`]) or, in tests, memory.
pub trait ReplicaPeers: Send + Sync + std::fmt::Debug {
    /// Sends a push frame to `peer`.
    fn push<'a>(&'a self, peer: &'a Peer, frame: Vec<u8>) -> PeerFuture<'a, PushReply>;
    /// Sends a signed read to `peer`; its answer's bytes.
    fn read<'a>(&'a self, peer: &'a Peer, body: Vec<u8>) -> PeerFuture<'a, Vec<u8>>;
}

/// The agents over HTTP (`PUT /1/replica`, `POST /1/replica/read`).
#[derive(Debug, Clone)]
pub struct HttpPeers {
    client: reqwest::Client,
    timeout: Duration,
}

impl HttpPeers {
    /// Peers reached with `client`, each call bounded by `timeout`.
    pub fn new(client: reqwest::Client, timeout: Duration) -> Self {
        Self { client, timeout }
    }
}

/// Largest answer to a push read.
const MAX_PUSH_ANSWER_BYTES: usize = 16 * 1024;

fn short(body: &[u8]) -> String {
    String::from_utf8_lossy(body).chars().take(300).collect()
}

impl HttpPeers {
    /// Sends `body` to `path` of `peer`'s agent; the answer's status and bytes.
    async fn send(
        &self,
        method: reqwest::Method,
        peer: &Peer,
        path: &str,
        body: Vec<u8>,
    ) -> Result<(reqwest::StatusCode, Vec<u8>, String), String> {
        let url = format!("{}{path}", peer.base_url);
        let response = self
            .client
            .request(method, &url)
            .timeout(self.timeout)
            .body(body)
            .send()
            .await
            .map_err(|error| format!("{url}: {error}"))?;
        let status = response.status();
        if !status.is_success() && status != reqwest::StatusCode::CONFLICT {
            let text = crate::scrape::error_text(response).await;
            return Ok((status, text.into_bytes(), url));
        }
        // A push is answered with a few hundred bytes; a read with one replica at most.
        let limit = if path == REPLICA_READ_PATH {
            usize::try_from(nodecare_protocol::replica::MAX_REPLICA_BYTES)
                .unwrap_or(usize::MAX)
                .saturating_add(nodecare_protocol::replica::MAX_ENVELOPE_LINE_BYTES + 2)
        } else {
            MAX_PUSH_ANSWER_BYTES
        };
        let bytes = crate::scrape::read_capped(response, limit)
            .await
            .map_err(|error| format!("{url}: {error}"))?;
        Ok((status, bytes, url))
    }
}

impl ReplicaPeers for HttpPeers {
    fn push<'a>(&'a self, peer: &'a Peer, frame: Vec<u8>) -> PeerFuture<'a, PushReply> {
        Box::pin(async move {
            let (status, body, url) = self
                .send(reqwest::Method::PUT, peer, REPLICA_PATH, frame)
                .await?;
            match status {
                reqwest::StatusCode::OK => nodecare_protocol::json::decode::<PushAccepted>(&body)
                    .map(|accepted| PushReply::Accepted(accepted.held))
                    .map_err(|error| format!("{url}: not a push answer: {error}")),
                reqwest::StatusCode::CONFLICT => {
                    nodecare_protocol::json::decode::<PushRefused>(&body)
                        .map(|refused| match refused.promised {
                            Some(epoch) => PushReply::Promised(epoch),
                            None => PushReply::Refused(refused.held),
                        })
                        .map_err(|error| format!("{url}: not a push answer: {error}"))
                }
                other => Err(format!("{url}: HTTP {other}: {}", short(&body))),
            }
        })
    }

    fn read<'a>(&'a self, peer: &'a Peer, body: Vec<u8>) -> PeerFuture<'a, Vec<u8>> {
        Box::pin(async move {
            let (status, bytes, url) = self
                .send(reqwest::Method::POST, peer, REPLICA_READ_PATH, body)
                .await?;
            if status != reqwest::StatusCode::OK {
                return Err(format!("{url}: HTTP {status}: {}", short(&bytes)));
            }
            Ok(bytes)
        })
    }
}

/// Why the state is not (yet) where it must be before a write.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReplicaError {
    /// This coordinator has not taken over yet (not the master, or the takeover waits).
    #[error("the state is not taken over yet")]
    NotTakenOver,
    /// Too few master candidates answered a takeover's read.
    #[error(
        "takeover waits: copies of the state read from {answered} of {candidates} master candidates, {needed} needed ({errors})"
    )]
    ReadQuorum {
        /// Answers.
        answered: usize,
        /// Master candidates.
        candidates: usize,
        /// Needed.
        needed: usize,
        /// Why the others did not answer.
        errors: String,
    },
    /// Too few master candidates kept the state.
    #[error(
        "state generation {generation} kept by {acked} of {candidates} master candidates, {needed} needed ({errors})"
    )]
    WriteQuorum {
        /// The generation pushed.
        generation: Generation,
        /// Nodes that kept it.
        acked: usize,
        /// Master candidates.
        candidates: usize,
        /// Needed.
        needed: usize,
        /// Why the others did not keep it.
        errors: String,
    },
    /// A master candidate holds a newer generation (or promised a later epoch to a takeover):
    /// another coordinator took over.
    #[error(
        "superseded: {node} holds (or promised) state generation {held}, newer than this coordinator's {ours}; another coordinator took over"
    )]
    Superseded {
        /// The node.
        node: String,
        /// What it holds (for a promise: the promised epoch's first generation).
        held: Generation,
        /// Ours.
        ours: Generation,
    },
    /// The push confirming a write took longer than the lease admits writes after it: the
    /// write was not started.
    #[error(
        "the confirmation's lease ran out before the write could start: its push took {took_ms} ms, the lease admits writes for {validity_ms} ms after a push is sent"
    )]
    LeaseExpired {
        /// How long the last push took.
        took_ms: u64,
        /// [`Lease::validity`].
        validity_ms: u64,
    },
    /// The local state failed.
    #[error("state database: {0}")]
    Store(String),
    /// A copy or a request could not be made.
    #[error("{0}")]
    Protocol(String),
}

impl From<StoreError> for ReplicaError {
    fn from(error: StoreError) -> Self {
        Self::Store(error.to_string())
    }
}

/// What replication did last, for `/1/replication` and `/metrics`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ReplicationStatus {
    /// Whether replication is on.
    pub enabled: bool,
    /// The generation of the state acted on; `None` until taken over.
    pub generation: Option<Generation>,
    /// The master candidates last seen.
    pub candidates: Vec<String>,
    /// Which of them hold the current generation.
    pub kept_by: Vec<String>,
    /// Unix ms of the last push that reached a majority.
    pub last_push_ms: Option<u64>,
    /// Pushes that reached a majority.
    pub pushes: u64,
    /// Copy restored at the last takeover: the node it came from and its generation.
    pub restored_from: Option<(String, Generation)>,
    /// Unix ms of the last takeover.
    pub taken_over_ms: Option<u64>,
    /// The last failure (cleared by the next success).
    pub error: Option<String>,
}

#[derive(Debug, Default)]
struct Inner {
    candidates: Vec<Peer>,
    /// The generation acted on; `None`: not taken over.
    generation: Option<Generation>,
    /// `Store::changes` when the current generation was pushed.
    pushed_changes: u64,
    /// Nodes holding the current generation.
    kept_by: Vec<String>,
    last_push_ms: Option<u64>,
    /// The highest epoch a takeover's refused read named: the next takeover names one above.
    seen_epoch: u64,
}

/// The answers to a takeover's reads.
#[derive(Debug, Default)]
struct ReadRound {
    /// Nodes that promised the epoch (and answered with their copy, if any).
    promised: usize,
    /// The copies read.
    copies: Vec<(String, ReadCopy)>,
    /// The highest epoch a refusal named (0: none).
    refused: u64,
    /// Why the others did not promise.
    errors: Vec<String>,
}

/// The replication of the coordinator's state to the master candidates.
#[derive(Debug)]
pub struct Replicator {
    store: Arc<Store>,
    peers: Arc<dyn ReplicaPeers>,
    key: HmacKey,
    ring: KeyRing,
    node: String,
    urls: AgentUrls,
    lease: Lease,
    inner: tokio::sync::Mutex<Inner>,
    status: RwLock<ReplicationStatus>,
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

impl Replicator {
    /// Replication of `store` by the coordinator of `node`, signing with `key`, reaching the
    /// agents (at `urls`) through `peers`; its confirmations hold `lease`.
    pub fn new(
        store: Arc<Store>,
        peers: Arc<dyn ReplicaPeers>,
        key: HmacKey,
        node: String,
        urls: AgentUrls,
        lease: Lease,
    ) -> Self {
        Self {
            store,
            peers,
            ring: KeyRing::single(key.clone()),
            key,
            node,
            urls,
            lease,
            inner: tokio::sync::Mutex::new(Inner::default()),
            status: RwLock::new(ReplicationStatus {
                enabled: true,
                ..ReplicationStatus::default()
            }),
        }
    }

    /// What replication did last.
    pub fn status(&self) -> ReplicationStatus {
        self.status
            .read()
            .map(|status| status.clone())
            .unwrap_or_default()
    }

    fn record(&self, change: impl FnOnce(&mut ReplicationStatus)) {
        if let Ok(mut status) = self.status.write() {
            change(&mut status);
        }
    }

    /// The lease of its confirmations.
    pub const fn lease(&self) -> Lease {
        self.lease
    }

    /// Whether this coordinator has taken over (and may write).
    pub async fn has_taken_over(&self) -> bool {
        self.inner.lock().await.generation.is_some()
    }

    /// This node stopped being the master: nothing is written until the next takeover.
    pub async fn stand_down(&self) {
        let mut inner = self.inner.lock().await;
        if inner.generation.take().is_some() {
            tracing::info!(
                "replication: standing down; the next takeover reads the master candidates' copies again"
            );
        }
        self.record(|status| {
            status.generation = None;
            status.candidates.clear();
            status.kept_by.clear();
        });
    }

    /// The master candidates among `nodes` (read this round): pushes go to them from now on.
    pub async fn set_candidates(&self, nodes: &[Node]) {
        let peers = candidates(nodes, &self.urls);
        let names = peers.iter().map(|peer| peer.node.clone()).collect();
        self.inner.lock().await.candidates = peers;
        self.record(|status| status.candidates = names);
    }

    /// Takes over as the master: reads the master candidates' copies, restores the newest when
    /// it is newer than the local state, waits out the lease of the old master's last
    /// confirmation ([`Lease::takeover_wait`] from the end of the read), then starts the next
    /// epoch and pushes it to a majority.
    pub async fn take_over(&self, nodes: &[Node]) -> Result<(), ReplicaError> {
        let result = self.take_over_inner(nodes).await;
        if let Err(error) = &result {
            self.record(|status| status.error = Some(error.to_string()));
        }
        result
    }

    async fn take_over_inner(&self, nodes: &[Node]) -> Result<(), ReplicaError> {
        let Some((start, read_end)) = self.read_and_restore(nodes).await? else {
            return Ok(());
        };
        // The old master may hold a confirmation pushed before one of the promises just
        // counted (a read quorum and its last write majority share a node, which kept that push
        // before it promised): its writes start within the lease and end within `call_bound`.
        // Nothing of this coordinator is written before they are over.
        let wait = self.lease.takeover_wait();
        let until = read_end + wait;
        if until > tokio::time::Instant::now() {
            tracing::info!(
                wait_ms = millis(wait),
                "takeover: waiting out the old master's lease before acting"
            );
            tokio::time::sleep_until(until).await;
        }
        let mut inner = self.inner.lock().await;
        if inner.generation.is_some() {
            return Ok(());
        }
        self.push_locked(&mut inner, start).await?;
        self.record(|status| status.taken_over_ms = Some(now_ms()));
        Ok(())
    }

    /// A takeover's read and restore: the generation to start and when the read ended (after
    /// every promise it counts); `None` when taken over already.
    async fn read_and_restore(
        &self,
        nodes: &[Node],
    ) -> Result<Option<(Generation, tokio::time::Instant)>, ReplicaError> {
        let mut inner = self.inner.lock().await;
        if inner.generation.is_some() {
            return Ok(None);
        }
        inner.candidates = candidates(nodes, &self.urls);
        let peers = inner.candidates.clone();
        let local: Generation = self
            .store
            .document(GENERATION_DOCUMENT)?
            .unwrap_or_default();
        let needed = read_quorum(peers.len());
        // A read refused for its epoch (another takeover promised or reached it) is tried again
        // at once one above the highest epoch named, a few times.
        let mut attempt = 0;
        let (epoch, copies, read_end) = loop {
            attempt += 1;
            let epoch = takeover_epoch(local, inner.seen_epoch);
            let round = self.read_copies(&peers, epoch).await;
            if round.promised >= needed {
                break (epoch, round.copies, tokio::time::Instant::now());
            }
            inner.seen_epoch = inner.seen_epoch.max(round.refused);
            if round.refused < epoch || attempt >= TAKEOVER_READ_ATTEMPTS {
                return Err(ReplicaError::ReadQuorum {
                    answered: round.promised,
                    candidates: peers.len(),
                    needed,
                    errors: round.errors.join("; "),
                });
            }
            tracing::info!(
                epoch,
                refused = round.refused,
                "a takeover's read of epoch {epoch} was refused for a later epoch; reading again above it"
            );
        };
        let seen: Vec<(String, Generation)> = copies
            .iter()
            .map(|(node, copy)| (node.clone(), copy.header.generation))
            .collect();
        let mut plan = plan_takeover(local, epoch, &seen);
        // The newest copy that restores and checks: a copy that does not (a garbage snapshot
        // under a valid signature) is passed over for the next one, down to this node's own
        // state. The new epoch is above every copy seen, so the next push replaces the bad one.
        let mut newer: Vec<&(String, ReadCopy)> = copies
            .iter()
            .filter(|(_, copy)| copy.header.generation > local)
            .collect();
        newer.sort_by(|a, b| {
            b.1.header
                .generation
                .cmp(&a.1.header.generation)
                .then_with(|| a.0.cmp(&b.0))
        });
        plan.restore_from = None;
        for (node, copy) in newer {
            let generation = copy.header.generation;
            match self.store.restore(&copy.snapshot) {
                Ok(()) => {
                    tracing::warn!(from = %node, %generation, local = %local, "took over the state kept by a master candidate (newer than this node's)");
                    plan.restore_from = Some((node.clone(), generation));
                    break;
                }
                Err(error) => {
                    tracing::error!(from = %node, %generation, %error, "a master candidate's copy does not restore; trying the next newest");
                }
            }
        }
        if plan.restore_from.is_none() {
            tracing::info!(generation = %local, copies = seen.len(), "took over with this node's own state (no master candidate holds a newer one that restores)");
        }
        let restored = plan.restore_from.clone();
        self.record(|status| status.restored_from = restored);
        Ok(Some((plan.start, read_end)))
    }

    /// Reads every peer's copy with a read naming `epoch`.
    async fn read_copies(&self, peers: &[Peer], epoch: u64) -> ReadRound {
        let mut reads = tokio::task::JoinSet::new();
        for peer in peers.iter().cloned() {
            let peers_api = Arc::clone(&self.peers);
            let key = self.key.clone();
            let ring = self.ring.clone();
            reads.spawn(async move {
                let nonce = uuid::Uuid::new_v4().simple().to_string();
                let now = now_ms();
                let read = ReplicaRead {
                    node: peer.node.clone(),
                    read_nonce: nonce.clone(),
                    epoch: Some(epoch),
                };
                let result = match sign_read(
                    &Signer::new(key, peer.node.clone()),
                    &read,
                    now,
                    now,
                    REQUEST_TTL_MS,
                ) {
                    Ok(body) => match peers_api.read(&peer, body).await {
                        Ok(bytes) => open_answer(
                            &ring,
                            &bytes,
                            now_ms(),
                            VerifyPolicy::default(),
                            &peer.node,
                            &nonce,
                            Some(epoch),
                        )
                        .map_err(|error| format!("{}: {error}", peer.node)),
                        Err(error) => Err(format!("{}: {error}", peer.node)),
                    },
                    Err(error) => Err(format!("{}: {error}", peer.node)),
                };
                (peer.node, result)
            });
        }
        let mut round = ReadRound::default();
        while let Some(joined) = reads.join_next().await {
            match joined {
                Ok((node, Ok(ReadAnswer::Copy(copy)))) => {
                    round.promised += 1;
                    if let Some(copy) = copy {
                        round.copies.push((node, copy));
                    }
                }
                Ok((node, Ok(ReadAnswer::Refused { highest }))) => {
                    round.refused = round.refused.max(highest);
                    round.errors.push(format!(
                        "{node}: refused epoch {epoch}: promised or holds epoch {highest}"
                    ));
                }
                Ok((_, Err(error))) => round.errors.push(error),
                Err(error) => round.errors.push(error.to_string()),
            }
        }
        round.errors.sort();
        round
    }

    /// Before a write: pushes the current state as the next generation and makes sure a
    /// majority of the master candidates keep it. It pushes every time, changed or not: a
    /// majority keeping this coordinator's generation is what confirms that its epoch is still
    /// current (no other coordinator took over, none is taking over), so a superseded master
    /// learns it here and writes nothing (a write admitted from an earlier push could follow
    /// another master's takeover).
    pub async fn ensure(&self) -> Result<(), ReplicaError> {
        self.confirm().await.map(|_| ())
    }

    /// [`Replicator::ensure`]; when its push was sent.
    async fn confirm(&self) -> Result<tokio::time::Instant, ReplicaError> {
        let mut inner = self.inner.lock().await;
        let Some(current) = inner.generation else {
            return Err(ReplicaError::NotTakenOver);
        };
        let next = Generation {
            epoch: current.epoch,
            number: current.number.saturating_add(1),
        };
        let result = self.push_locked(&mut inner, next).await;
        if let Err(error) = &result {
            self.record(|status| status.error = Some(error.to_string()));
        }
        result
    }

    /// Before a write (a Ganeti job or cancel, an agent request), started as soon as this
    /// returns: [`Replicator::ensure`], and the lease of its confirmation still admits writes
    /// ([`Lease::admits`]: a takeover that began after that push was sent waits until writes
    /// started under it are over). A push that outlasted the lease is made again, once.
    pub async fn confirm_write(&self) -> Result<(), ReplicaError> {
        let mut took = Duration::ZERO;
        for _ in 0..2 {
            let sent = self.confirm().await?;
            took = sent.elapsed();
            if self.lease.admits(took) {
                return Ok(());
            }
        }
        let error = ReplicaError::LeaseExpired {
            took_ms: millis(took),
            validity_ms: millis(self.lease.validity()),
        };
        self.record(|status| status.error = Some(error.to_string()));
        Err(error)
    }

    /// After a round: pushes the state when it changed and the last push is older than
    /// `interval` (what changed without a write: new incidents, sequences), so that a takeover
    /// loses at most that much of it.
    pub async fn settle(&self, interval: Duration) -> Result<(), ReplicaError> {
        let due = {
            let inner = self.inner.lock().await;
            inner.generation.is_some()
                && self.store.changes() != inner.pushed_changes
                && inner.last_push_ms.is_none_or(|last| {
                    now_ms().saturating_sub(last)
                        >= u64::try_from(interval.as_millis()).unwrap_or(u64::MAX)
                })
        };
        if due { self.ensure().await } else { Ok(()) }
    }

    /// Pushes `generation`; when a majority keeps it, when the push was sent (before the first
    /// frame left: the lease of the confirmation counts from then).
    async fn push_locked(
        &self,
        inner: &mut Inner,
        generation: Generation,
    ) -> Result<tokio::time::Instant, ReplicaError> {
        self.store.save_document(GENERATION_DOCUMENT, &generation)?;
        // The change counter before the snapshot: a change between the two is in the snapshot
        // and counted as not pushed (pushed again), never counted as pushed without being in it.
        let changes = self.store.changes();
        let snapshot = Arc::new(self.store.snapshot()?);
        let created = now_ms();
        let peers = inner.candidates.clone();
        let sent = tokio::time::Instant::now();
        let mut pushes = tokio::task::JoinSet::new();
        for peer in peers.clone() {
            let header = ReplicaHeader::describe(
                peer.node.clone(),
                self.node.clone(),
                generation,
                &snapshot,
                created,
            );
            let frame = sign_push(
                &Signer::new(self.key.clone(), peer.node.clone()),
                &header,
                &snapshot,
                created,
                created,
                REQUEST_TTL_MS,
            )
            .map_err(|error| ReplicaError::Protocol(error.to_string()))?;
            let peers_api = Arc::clone(&self.peers);
            pushes.spawn(async move {
                let reply = peers_api.push(&peer, frame).await;
                (peer.node, reply)
            });
        }
        let mut replies = Vec::new();
        let mut errors = Vec::new();
        while let Some(joined) = pushes.join_next().await {
            match joined {
                Ok((node, Ok(reply))) => {
                    match reply {
                        PushReply::Accepted(held) if held == generation => {}
                        PushReply::Accepted(held) | PushReply::Refused(held) => {
                            errors.push(format!("{node}: holds {held}"));
                        }
                        PushReply::Promised(epoch) => {
                            errors.push(format!("{node}: promised epoch {epoch}"));
                        }
                    }
                    replies.push((node, reply));
                }
                Ok((node, Err(error))) => errors.push(format!("{node}: {error}")),
                Err(error) => errors.push(error.to_string()),
            }
        }
        errors.sort();
        let kept_by = match judge_push(generation, peers.len(), &replies) {
            PushOutcome::Kept(kept_by) => kept_by,
            PushOutcome::Superseded { node, held } => {
                inner.generation = None;
                inner.kept_by.clear();
                tracing::error!(%node, %held, ours = %generation, "another coordinator took over: standing down");
                self.record(|status| status.generation = None);
                return Err(ReplicaError::Superseded {
                    node,
                    held,
                    ours: generation,
                });
            }
            PushOutcome::NoQuorum(kept_by) => {
                // `pushed_changes` stays at the last push that reached a majority: the state is
                // still to be pushed.
                inner.kept_by.clear();
                if inner.generation.is_some() {
                    inner.generation = Some(generation);
                }
                return Err(ReplicaError::WriteQuorum {
                    generation,
                    acked: kept_by.len(),
                    candidates: peers.len(),
                    needed: write_quorum(peers.len()),
                    errors: errors.join("; "),
                });
            }
        };
        inner.generation = Some(generation);
        inner.pushed_changes = changes;
        inner.kept_by.clone_from(&kept_by);
        inner.last_push_ms = Some(created);
        tracing::debug!(%generation, bytes = snapshot.len(), kept_by = kept_by.len(), "state replicated");
        self.record(|status| {
            status.generation = Some(generation);
            status.kept_by = kept_by;
            status.last_push_ms = Some(created);
            status.pushes += 1;
            status.error = None;
        });
        Ok(sent)
    }
}

/// The one Ganeti client of an acting coordinator with replication on: every write
/// ([`Ganeti::submit`], [`Ganeti::cancel_job`]) waits until a majority of the master candidates
/// keep the state that led to it, starts within the lease of that confirmation
/// ([`Replicator::confirm_write`]) and is abandoned when it takes longer than the lease's
/// `call_bound` (which a takeover waits for too); reads pass through.
#[derive(Debug)]
pub struct ReplicatedGaneti {
    inner: Arc<dyn Ganeti>,
    replicator: Arc<Replicator>,
}

impl ReplicatedGaneti {
    /// Wraps `inner`.
    pub fn new(inner: Arc<dyn Ganeti>, replicator: Arc<Replicator>) -> Self {
        Self { inner, replicator }
    }

    /// `call`'s write, once a majority keeps the state and within the lease of that
    /// confirmation (the call is made only then), abandoned after the lease's `call_bound`.
    fn guarded<'a, T: Send + 'a>(
        &'a self,
        call: impl FnOnce() -> GanetiFuture<'a, T> + Send + 'a,
    ) -> GanetiFuture<'a, T> {
        Box::pin(async move {
            self.replicator
                .confirm_write()
                .await
                .map_err(|error| GanetiError::NotSubmitted(error.to_string()))?;
            let bound = self.replicator.lease().call_bound;
            tokio::time::timeout(bound, call())
                .await
                .unwrap_or_else(|_| {
                    Err(GanetiError::Transport(format!(
                        "no answer within {} ms: the write is abandoned (a new master waits that long after the lease)",
                        millis(bound)
                    )))
                })
        })
    }
}

impl Ganeti for ReplicatedGaneti {
    fn cluster_info(&self) -> GanetiFuture<'_, ClusterInfo> {
        self.inner.cluster_info()
    }

    fn nodes(&self) -> GanetiFuture<'_, Vec<Node>> {
        self.inner.nodes()
    }

    fn instances(&self) -> GanetiFuture<'_, Vec<Instance>> {
        self.inner.instances()
    }

    #[expect(
        clippy::disallowed_methods,
        reason = "the fencing wrapper passes on what its caller submits"
    )]
    fn submit<'a>(&'a self, op: &'a Op, reason: &'a Reason) -> GanetiFuture<'a, JobId> {
        self.guarded(move || self.inner.submit(op, reason))
    }

    fn groups(&self) -> GanetiFuture<'_, Vec<Group>> {
        self.inner.groups()
    }

    fn tags<'a>(&'a self, target: &'a TagTarget) -> GanetiFuture<'a, Vec<String>> {
        self.inner.tags(target)
    }

    fn job(&self, id: JobId) -> GanetiFuture<'_, Job> {
        self.inner.job(id)
    }

    fn jobs(&self) -> GanetiFuture<'_, Vec<JobSummary>> {
        self.inner.jobs()
    }

    fn jobs_among<'a>(
        &'a self,
        ids: &'a std::collections::BTreeSet<JobId>,
    ) -> GanetiFuture<'a, Vec<JobSummary>> {
        self.inner.jobs_among(ids)
    }

    fn cancel_job(&self, id: JobId) -> GanetiFuture<'_, JobCancel> {
        self.guarded(move || self.inner.cancel_job(id))
    }

    fn wait_job_change(
        &self,
        id: JobId,
        previous: Option<nodecare_ganeti::JobStatus>,
    ) -> GanetiFuture<'_, Option<nodecare_ganeti::JobStatus>> {
        self.inner.wait_job_change(id, previous)
    }
}

#[cfg(test)]
#[path = "replica_tests.rs"]
mod tests;
