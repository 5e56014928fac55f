//! Fake nodecare agents: each serves a signed diagnose report whose verdict a test sets, and a
//! repair endpoint whose outcome a test sets. Many fake agents can run in one process, each on
//! its own listener.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use nodecare_protocol::now_ms;
use nodecare_protocol::repair::{RepairRecord, RepairState, open_repair_request};
use nodecare_protocol::{
    DiagnosePayload, HmacKey, KeyRing, NodeVerdict, ScriptVerdict, SignedEnvelope, Signer,
    VerifyPolicy,
};
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

/// A merged verdict of one script `disk` with the given status, details and command.
pub fn verdict(status: &str, details: Value, command: Option<&str>) -> NodeVerdict {
    let mut script = json!({"status": status, "details": details});
    if let Some(command) = command {
        script["command"] = json!(command);
    }
    let parsed = ScriptVerdict::from_value(&script)
        .unwrap_or_else(|e| ScriptVerdict::unknown(e.to_string()));
    NodeVerdict::merge([("disk".to_owned(), parsed)].into_iter().collect())
        .unwrap_or_else(|_| NodeVerdict::merge(BTreeMap::new()).unwrap_or_else(|_| unreachable!()))
}

/// One command an agent took (a repair or a campaign's hook), as the agent saw it when the
/// signed request arrived: what an independent checker judges against the cluster at that
/// moment.
#[derive(Debug, Clone)]
pub struct Delivery {
    /// The node whose agent took it.
    pub node: String,
    /// The request's incident or hook request id.
    pub id: String,
    /// The whitelisted command it runs.
    pub command: String,
}

/// Called, synchronously, with each command an agent takes for the first time (before it
/// answers): it may look at the simulated cluster as it is at that moment.
#[derive(Clone)]
pub struct DeliveryObserver(pub Arc<dyn Fn(&Delivery) + Send + Sync>);

impl std::fmt::Debug for DeliveryObserver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("DeliveryObserver")
    }
}

/// How the fake agent answers repair requests.
#[derive(Debug, Clone, Copy)]
pub struct RepairBehaviour {
    /// Exit code of the simulated command.
    pub exit_code: i32,
    /// How long it "runs".
    pub duration: Duration,
}

#[derive(Debug)]
struct Run {
    record: RepairRecord,
    started: Instant,
}

/// Called with each repair request an agent receives for the first time (its id, or incident,
/// and its command), as it arrives: a test looks at the cluster at that moment.
pub type RepairObserver = Arc<dyn Fn(&str, &str) + Send + Sync>;

#[derive(Debug)]
struct AgentState {
    node: String,
    signer: Signer,
    ring: KeyRing,
    verdict: Mutex<NodeVerdict>,
    sequence: Mutex<u64>,
    /// Canned body (benchmarks, replays): when set, served as is.
    canned: Mutex<Option<Bytes>>,
    /// The last body served.
    last: Mutex<Option<Bytes>>,
    /// Lifetime of the reports it signs.
    ttl: Mutex<Duration>,
    repair: Mutex<RepairBehaviour>,
    runs: Mutex<BTreeMap<String, Run>>,
    /// Repairs first requested of any agent of the set ([`FakeAgents::repairs_requested`]).
    repairs_requested: Arc<std::sync::atomic::AtomicU64>,
    requests: Mutex<u64>,
    down: Mutex<bool>,
    /// Unreachable like `down`, but set and cleared apart from it: gone at its hook
    /// ([`FakeAgent::set_away_at`]).
    away: Mutex<bool>,
    /// The command whose first request makes the agent go away before it takes it.
    away_at: Mutex<Option<String>>,
    /// Repair requests and polls answer 503 and are not kept (the agent unreachable for them).
    repairs_down: Mutex<bool>,
    /// Told of every repair request received for the first time.
    on_repair: Mutex<Option<Observer>>,
    /// The DRBD state its signed storage report shows (whole: no minors, by default).
    storage: Mutex<nodecare_protocol::DrbdState>,
    storage_sequence: Mutex<u64>,
    /// The boot id and reboot sentinel its diagnose payload carries (absent by default).
    boot: Mutex<(Option<String>, Option<bool>)>,
    /// The mond reports its signed load report carries (none: it answers 503, as an agent
    /// without a key).
    load: Mutex<Option<Vec<nodecare_protocol::Report>>>,
    /// Verified check requests received.
    checks: Mutex<u64>,
    /// Told of each command taken ([`FakeAgents::observe_deliveries`]).
    observer: Arc<Mutex<Option<DeliveryObserver>>>,
    /// The copy of the coordinator's state it keeps: the real agent's keeper, in a temporary
    /// directory.
    replica: nodecare_agent::replica::ReplicaKeeper,
    _replica_dir: tempfile::TempDir,
    /// How far the node's clock is off, in milliseconds (a clock jump).
    clock_offset_ms: Mutex<i64>,
    /// Long-poll: a watch `after` a sequence below this value is answered at once; raised by
    /// every change of what is served.
    mark: tokio::sync::watch::Sender<u64>,
}

/// A [`RepairObserver`] kept in the agent's state.
#[derive(Clone)]
struct Observer(RepairObserver);

impl std::fmt::Debug for Observer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Observer")
    }
}

impl AgentState {
    /// Something new is served from now on: wakes the long-polls.
    fn changed(&self) {
        let next = self.sequence.lock().map_or(0, |s| *s) + 1;
        self.mark.send_modify(|mark| *mark = (*mark).max(next));
    }
}

/// One fake agent.
#[derive(Debug, Clone)]
pub struct FakeAgent {
    state: Arc<AgentState>,
    /// Where it listens.
    pub addr: SocketAddr,
}

impl FakeAgent {
    /// Sets the verdict served from now on.
    pub fn set_verdict(&self, verdict: NodeVerdict) {
        if let Ok(mut v) = self.state.verdict.lock() {
            *v = verdict;
        }
        self.state.changed();
    }

    /// Makes the agent answer 503 (true) or normally (false).
    pub fn set_down(&self, down: bool) {
        if let Ok(mut d) = self.state.down.lock() {
            *d = down;
        }
        self.state.changed();
    }

    /// Makes the agent go away (unreachable, as [`Self::set_down`], but apart from it) when the
    /// first request for `command` arrives, before it takes it: an agent lost exactly when a
    /// campaign's hook reaches it. `None`: disarmed.
    pub fn set_away_at(&self, command: Option<&str>) {
        if let Ok(mut a) = self.state.away_at.lock() {
            *a = command.map(str::to_owned);
        }
    }

    /// Whether the agent went away at a request ([`Self::set_away_at`]) and is still away.
    pub fn is_away(&self) -> bool {
        self.state.away.lock().map(|a| *a).unwrap_or(false)
    }

    /// Brings an agent that went away back (`false`), or sends it away (`true`).
    pub fn set_away(&self, away: bool) {
        if let Ok(mut a) = self.state.away.lock() {
            *a = away;
        }
        self.state.changed();
    }

    /// How many verified check requests it received.
    pub fn checks(&self) -> u64 {
        self.state.checks.lock().map_or(0, |c| *c)
    }

    /// Sets the DRBD state of its signed storage report.
    pub fn set_storage(&self, drbd: nodecare_protocol::DrbdState) {
        if let Ok(mut state) = self.state.storage.lock() {
            *state = drbd;
        }
    }

    /// Sets the boot id its diagnose payload carries from now on (`None`: the field is absent).
    pub fn set_boot_id(&self, boot_id: Option<&str>) {
        if let Ok(mut boot) = self.state.boot.lock() {
            boot.0 = boot_id.map(str::to_owned);
        }
        self.state.changed();
    }

    /// The node reboots: a new boot id, and every repair command still running is ended by the
    /// reboot (`interrupted`), as the real agent reports a command its node's reboot killed.
    pub fn reboot(&self, boot_id: &str) {
        if let Ok(mut runs) = self.state.runs.lock() {
            for run in runs.values_mut() {
                if run.record.state == RepairState::Running {
                    run.record.state = RepairState::Interrupted;
                    run.record.finished_at_ms = Some(now_ms());
                }
            }
        }
        self.set_boot_id(Some(boot_id));
    }

    /// Sets the reboot sentinel its diagnose payload carries from now on (`None`: absent).
    pub fn set_reboot_required(&self, required: Option<bool>) {
        if let Ok(mut boot) = self.state.boot.lock() {
            boot.1 = required;
        }
        self.state.changed();
    }

    /// Sets the reports of its signed load report (`None`: the report answers 503).
    pub fn set_load(&self, load: Option<Vec<nodecare_protocol::Report>>) {
        if let Ok(mut state) = self.state.load.lock() {
            *state = load;
        }
    }

    /// Makes the agent answer repair requests and polls with 503, keeping none (true), or
    /// normally (false): the agent unreachable for them while its reports still go out.
    pub fn set_repairs_down(&self, down: bool) {
        if let Ok(mut d) = self.state.repairs_down.lock() {
            *d = down;
        }
    }

    /// Calls `observer` with every repair request received for the first time, as it arrives
    /// (`None`: no more).
    pub fn set_on_repair(&self, observer: Option<RepairObserver>) {
        if let Ok(mut o) = self.state.on_repair.lock() {
            *o = observer.map(Observer);
        }
    }

    /// Sets how repairs behave.
    pub fn set_repair(&self, behaviour: RepairBehaviour) {
        if let Ok(mut r) = self.state.repair.lock() {
            *r = behaviour;
        }
    }

    /// Incidents for which a repair was requested.
    pub fn repairs(&self) -> Vec<String> {
        self.state
            .runs
            .lock()
            .map(|r| r.keys().cloned().collect())
            .unwrap_or_default()
    }

    /// Repairs requested, each as (incident or request id, when the request arrived).
    pub fn repair_arrivals(&self) -> Vec<(String, Instant)> {
        self.state
            .runs
            .lock()
            .map(|r| {
                r.iter()
                    .map(|(id, run)| (id.clone(), run.started))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Repairs requested, each as (incident or request id, command).
    pub fn repair_commands(&self) -> Vec<(String, String)> {
        self.state
            .runs
            .lock()
            .map(|r| {
                r.iter()
                    .map(|(id, run)| (id.clone(), run.record.command.clone()))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Report requests served.
    pub fn requests(&self) -> u64 {
        self.state.requests.lock().map(|r| *r).unwrap_or(0)
    }

    /// Base URL.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Puts the node's clock `offset_ms` off (positive: ahead): the reports it signs from now
    /// on carry that time.
    pub fn set_clock_offset(&self, offset_ms: i64) {
        if let Ok(mut o) = self.state.clock_offset_ms.lock() {
            *o = offset_ms;
        }
        self.state.changed();
    }

    /// Sets the lifetime of the reports signed from now on (60 s by default).
    pub fn set_ttl(&self, ttl: Duration) {
        if let Ok(mut t) = self.state.ttl.lock() {
            *t = ttl;
        }
        self.state.changed();
    }

    /// Stops signing and serves the last report it served, unchanged, for every request: what
    /// a static server replaying a stopped agent's last envelope does. Returns whether there
    /// was a report to replay.
    pub fn replay_last(&self) -> bool {
        let last = self.state.last.lock().ok().and_then(|l| l.clone());
        match (last, self.state.canned.lock()) {
            (Some(body), Ok(mut canned)) => {
                *canned = Some(body);
                true
            }
            _ => false,
        }
    }

    /// Serves a pre-signed report of `verdict` from now on (benchmarks): [`Self::freeze`] with
    /// another verdict, waking the long-polls only once the new report is served.
    pub fn refreeze(&self, verdict: NodeVerdict, ttl: Duration) {
        if let Ok(mut v) = self.state.verdict.lock() {
            *v = verdict;
        }
        self.freeze(ttl);
    }

    /// Pre-signs one report (valid for `ttl`) and serves it for every request (benchmarks).
    pub fn freeze(&self, ttl: Duration) {
        let verdict = self.state.verdict.lock().map(|v| v.clone()).ok();
        if let Some(verdict) = verdict
            && let Ok(body) = sign_report(&self.state, &verdict, ttl)
            && let Ok(mut canned) = self.state.canned.lock()
        {
            *canned = Some(Bytes::from(body));
            let sequence = self.state.sequence.lock().map_or(0, |s| *s);
            self.state
                .mark
                .send_modify(|mark| *mark = (*mark).max(sequence));
        }
    }
}

fn sign_report(
    state: &AgentState,
    verdict: &NodeVerdict,
    ttl: Duration,
) -> Result<Vec<u8>, String> {
    let sequence = {
        let mut s = state.sequence.lock().map_err(|e| e.to_string())?;
        *s += 1;
        *s
    };
    let offset = state.clock_offset_ms.lock().map_or(0, |o| *o);
    let now = now_ms().saturating_add_signed(offset);
    let (boot_id, reboot_required) = state.boot.lock().map_err(|e| e.to_string())?.clone();
    let payload = serde_json::to_value(DiagnosePayload {
        verdict: verdict.clone(),
        collected_at_ms: now,
        age_ms: 0,
        stale: false,
        interval_ms: 1000,
        boot_id,
        reboot_required,
    })
    .map_err(|e| e.to_string())?;
    let ttl_ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX);
    let envelope = state
        .signer
        .sign(payload, sequence, now, ttl_ms)
        .map_err(|e| e.to_string())?;
    serde_json::to_vec(&envelope).map_err(|e| e.to_string())
}

/// The signed storage (DRBD) report.
async fn storage_report(State(state): State<Arc<AgentState>>) -> Response {
    if unreachable(&state) {
        return (StatusCode::SERVICE_UNAVAILABLE, "down").into_response();
    }
    let signed = (|| -> Result<Vec<u8>, String> {
        let sequence = {
            let mut s = state.storage_sequence.lock().map_err(|e| e.to_string())?;
            *s += 1;
            *s
        };
        let drbd = state.storage.lock().map_err(|e| e.to_string())?.clone();
        let now = now_ms();
        let payload = serde_json::to_value(nodecare_protocol::StoragePayload {
            drbd,
            collected_at_ms: now,
            interval_ms: 10_000,
        })
        .map_err(|e| e.to_string())?;
        let envelope = state
            .signer
            .sign(payload, sequence, now, 30_000)
            .map_err(|e| e.to_string())?;
        serde_json::to_vec(&envelope).map_err(|e| e.to_string())
    })();
    match signed {
        Ok(body) => (
            [(axum::http::header::CONTENT_TYPE, "application/json")],
            body,
        )
            .into_response(),
        Err(error) => (StatusCode::INTERNAL_SERVER_ERROR, error).into_response(),
    }
}

/// The signed load report.
async fn load_report(State(state): State<Arc<AgentState>>) -> Response {
    if unreachable(&state) {
        return (StatusCode::SERVICE_UNAVAILABLE, "down").into_response();
    }
    let Some(load) = state.load.lock().ok().and_then(|l| l.clone()) else {
        return (StatusCode::SERVICE_UNAVAILABLE, "no load").into_response();
    };
    let signed = (|| -> Result<Vec<u8>, String> {
        let sequence = {
            let mut s = state.storage_sequence.lock().map_err(|e| e.to_string())?;
            *s += 1;
            *s
        };
        let now = now_ms();
        let payload = serde_json::to_value(nodecare_protocol::LoadPayload {
            load,
            collected_at_ms: now,
            interval_ms: 10_000,
        })
        .map_err(|e| e.to_string())?;
        let envelope = state
            .signer
            .sign(payload, sequence, now, 30_000)
            .map_err(|e| e.to_string())?;
        serde_json::to_vec(&envelope).map_err(|e| e.to_string())
    })();
    match signed {
        Ok(body) => (
            [(axum::http::header::CONTENT_TYPE, "application/json")],
            body,
        )
            .into_response(),
        Err(error) => (StatusCode::INTERNAL_SERVER_ERROR, error).into_response(),
    }
}

/// The agent's long-poll (`?after=<sequence>&wait=<seconds>`): waits until something newer is
/// served, or answers 304 at the end of the wait.
async fn report(
    State(state): State<Arc<AgentState>>,
    axum::extract::RawQuery(query): axum::extract::RawQuery,
) -> Response {
    if let Ok(mut r) = state.requests.lock() {
        *r += 1;
    }
    let mut after = None;
    let mut wait = 0u64;
    for pair in query.as_deref().unwrap_or_default().split('&') {
        match pair.split_once('=') {
            Some(("after", value)) => after = value.parse::<u64>().ok(),
            Some(("wait", value)) => wait = value.parse().unwrap_or(0),
            _ => {}
        }
    }
    if let Some(after) = after {
        let mut mark = state.mark.subscribe();
        let waited = tokio::time::timeout(
            Duration::from_secs(wait.min(60)),
            mark.wait_for(|mark| after < *mark),
        )
        .await;
        if !matches!(waited, Ok(Ok(_))) {
            return StatusCode::NOT_MODIFIED.into_response();
        }
    }
    if unreachable(&state) {
        return (StatusCode::SERVICE_UNAVAILABLE, "down").into_response();
    }
    if let Some(body) = state.canned.lock().ok().and_then(|c| c.clone()) {
        return ([("content-type", "application/json")], body).into_response();
    }
    let verdict = match state.verdict.lock() {
        Ok(v) => v.clone(),
        Err(_) => return StatusCode::INTERNAL_SERVER_ERROR.into_response(),
    };
    let ttl = state.ttl.lock().map_or(Duration::from_secs(60), |t| *t);
    match sign_report(&state, &verdict, ttl) {
        Ok(body) => {
            let body = Bytes::from(body);
            if let Ok(mut last) = state.last.lock() {
                *last = Some(body.clone());
            }
            ([("content-type", "application/json")], body).into_response()
        }
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e).into_response(),
    }
}

fn current(run: &mut Run, behaviour: RepairBehaviour) -> RepairRecord {
    if run.record.state == RepairState::Running && run.started.elapsed() >= behaviour.duration {
        run.record.state = if behaviour.exit_code == 0 {
            RepairState::Succeeded
        } else {
            RepairState::Failed
        };
        run.record.exit_code = Some(behaviour.exit_code);
        run.record.finished_at_ms = Some(now_ms());
    }
    run.record.clone()
}

/// A signed check request: counted, answered as the agent does (`202`), the report re-signed.
/// The real agent's replica keeper behind the fake agent's switch (down: unreachable).
async fn replica_push(State(state): State<Arc<AgentState>>, body: Bytes) -> Response {
    if unreachable(&state) {
        return StatusCode::SERVICE_UNAVAILABLE.into_response();
    }
    state
        .replica
        .push(body.to_vec(), now_ms())
        .await
        .into_response()
}

async fn replica_read(State(state): State<Arc<AgentState>>, body: Bytes) -> Response {
    if unreachable(&state) {
        return StatusCode::SERVICE_UNAVAILABLE.into_response();
    }
    state.replica.read(&body, now_ms()).await.into_response()
}

impl FakeAgent {
    /// The generation of the coordinator's state this agent keeps.
    pub async fn replica_held(&self) -> Option<nodecare_protocol::replica::Generation> {
        self.state.replica.held().await
    }
}

async fn check(State(state): State<Arc<AgentState>>, body: Bytes) -> Response {
    let envelope: SignedEnvelope = match serde_json::from_slice(&body) {
        Ok(e) => e,
        Err(e) => return (StatusCode::BAD_REQUEST, e.to_string()).into_response(),
    };
    if let Err(e) = nodecare_protocol::repair::open_check_request(
        &state.ring,
        &envelope,
        now_ms(),
        VerifyPolicy::default(),
        &state.node,
    ) {
        return (
            StatusCode::FORBIDDEN,
            axum::Json(json!({"error": e.to_string()})),
        )
            .into_response();
    }
    if let Ok(mut checks) = state.checks.lock() {
        *checks += 1;
    }
    let after_sequence = state.sequence.lock().map(|s| *s).ok();
    state.changed();
    (
        StatusCode::ACCEPTED,
        axum::Json(nodecare_protocol::repair::CheckAnswer {
            node: state.node.clone(),
            after_sequence,
        }),
    )
        .into_response()
}

/// Whether the agent is unreachable: down, or gone away at a request.
fn unreachable(state: &AgentState) -> bool {
    state.down.lock().map(|d| *d).unwrap_or(false) || state.away.lock().map(|a| *a).unwrap_or(false)
}

/// Whether a request for `command` (not taken before) makes the agent go away now, without
/// taking it ([`FakeAgent::set_away_at`]).
fn goes_away_at(state: &AgentState, command: &str, id: &str) -> bool {
    let known = state.runs.lock().is_ok_and(|runs| runs.contains_key(id));
    let Ok(mut away_at) = state.away_at.lock() else {
        return false;
    };
    if known || away_at.as_deref() != Some(command) {
        return false;
    }
    *away_at = None;
    if let Ok(mut away) = state.away.lock() {
        *away = true;
    }
    true
}

async fn repair(State(state): State<Arc<AgentState>>, body: Bytes) -> Response {
    if unreachable(&state) {
        return (StatusCode::SERVICE_UNAVAILABLE, "down").into_response();
    }
    let envelope: SignedEnvelope = match serde_json::from_slice(&body) {
        Ok(e) => e,
        Err(e) => return (StatusCode::BAD_REQUEST, e.to_string()).into_response(),
    };
    let request = match open_repair_request(
        &state.ring,
        &envelope,
        now_ms(),
        VerifyPolicy::default(),
        &state.node,
    ) {
        Ok(r) => r,
        Err(e) => {
            return (
                    StatusCode::UNAUTHORIZED,
                    axum::Json(json!({"state": "refused", "reason": "bad-signature", "message": e.to_string()})),
                )
                    .into_response();
        }
    };
    if state.repairs_down.lock().map(|d| *d).unwrap_or(false) {
        return (StatusCode::SERVICE_UNAVAILABLE, "down").into_response();
    }
    if goes_away_at(&state, &request.command, &request.incident_id) {
        return (StatusCode::SERVICE_UNAVAILABLE, "down").into_response();
    }
    let behaviour = state.repair.lock().map(|r| *r).unwrap_or(RepairBehaviour {
        exit_code: 0,
        duration: Duration::ZERO,
    });
    let observer = state.on_repair.lock().ok().and_then(|o| o.clone());
    let Ok(mut runs) = state.runs.lock() else {
        return StatusCode::INTERNAL_SERVER_ERROR.into_response();
    };
    if !runs.contains_key(&request.incident_id) {
        let observer = state.observer.lock().ok().and_then(|o| o.clone());
        if let Some(observer) = observer {
            (observer.0)(&Delivery {
                node: state.node.clone(),
                id: request.incident_id.clone(),
                command: request.command.clone(),
            });
        }
    }
    let run = runs.entry(request.incident_id.clone()).or_insert_with(|| {
        state
            .repairs_requested
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        if let Some(Observer(observer)) = observer {
            observer(&request.incident_id, &request.command);
        }
        Run {
            record: RepairRecord::running(&request, now_ms()).unwrap_or_else(|_| unreachable!()),
            started: Instant::now(),
        }
    });
    let record = current(run, behaviour);
    let status = if record.state == RepairState::Running {
        StatusCode::ACCEPTED
    } else {
        StatusCode::OK
    };
    (status, axum::Json(record)).into_response()
}

async fn repair_status(State(state): State<Arc<AgentState>>, Path(id): Path<String>) -> Response {
    if unreachable(&state) || state.repairs_down.lock().map(|d| *d).unwrap_or(false) {
        return (StatusCode::SERVICE_UNAVAILABLE, "down").into_response();
    }
    let behaviour = state.repair.lock().map(|r| *r).unwrap_or(RepairBehaviour {
        exit_code: 0,
        duration: Duration::ZERO,
    });
    let Ok(mut runs) = state.runs.lock() else {
        return StatusCode::INTERNAL_SERVER_ERROR.into_response();
    };
    match runs.get_mut(&id) {
        Some(run) => axum::Json(current(run, behaviour)).into_response(),
        None => (StatusCode::NOT_FOUND, "unknown incident").into_response(),
    }
}

/// A set of fake agents and their server tasks.
#[derive(Debug, Default)]
pub struct FakeAgents {
    /// Agents by node name.
    pub agents: BTreeMap<String, FakeAgent>,
    tasks: Vec<JoinHandle<()>>,
    /// Repairs first requested of any of them.
    repairs_requested: Arc<std::sync::atomic::AtomicU64>,
    /// Told of each command any of them takes.
    observer: Arc<Mutex<Option<DeliveryObserver>>>,
}

impl FakeAgents {
    /// Starts an agent for `node` on `bind` (e.g. `127.0.0.1:0`), healthy (`Ok`).
    pub async fn start(
        &mut self,
        node: &str,
        key: &HmacKey,
        bind: SocketAddr,
    ) -> std::io::Result<FakeAgent> {
        let listener = TcpListener::bind(bind).await?;
        let addr = listener.local_addr()?;
        let replica_dir = tempfile::tempdir()?;
        let state = Arc::new(AgentState {
            node: node.to_owned(),
            signer: Signer::new(key.clone(), node),
            ring: KeyRing::single(key.clone()),
            verdict: Mutex::new(verdict("Ok", Value::Null, None)),
            sequence: Mutex::new(0),
            canned: Mutex::new(None),
            last: Mutex::new(None),
            ttl: Mutex::new(Duration::from_secs(60)),
            repair: Mutex::new(RepairBehaviour {
                exit_code: 0,
                duration: Duration::from_millis(200),
            }),
            runs: Mutex::new(BTreeMap::new()),
            repairs_requested: Arc::clone(&self.repairs_requested),
            requests: Mutex::new(0),
            down: Mutex::new(false),
            away: Mutex::new(false),
            away_at: Mutex::new(None),
            repairs_down: Mutex::new(false),
            on_repair: Mutex::new(None),
            storage: Mutex::new(nodecare_protocol::DrbdState::Minors { minors: Vec::new() }),
            storage_sequence: Mutex::new(0),
            boot: Mutex::new((None, None)),
            load: Mutex::new(None),
            checks: Mutex::new(0),
            observer: Arc::clone(&self.observer),
            replica: nodecare_agent::replica::ReplicaKeeper::open(
                key.clone(),
                node.to_owned(),
                VerifyPolicy::default(),
                replica_dir.path().join("replica"),
            )
            .map_err(std::io::Error::other)?,
            _replica_dir: replica_dir,
            clock_offset_ms: Mutex::new(0),
            mark: tokio::sync::watch::Sender::new(1),
        });
        let app = Router::new()
            .route("/1/report/node/diagnose/signed", get(report))
            .route(
                nodecare_protocol::storage::SIGNED_DRBD_PATH,
                get(storage_report),
            )
            .route(nodecare_protocol::load::SIGNED_LOAD_PATH, get(load_report))
            .route("/1/repair", post(repair))
            .route(nodecare_protocol::repair::CHECK_PATH, post(check))
            .route("/1/repair/{id}", get(repair_status))
            .route(
                nodecare_protocol::replica::REPLICA_PATH,
                // As the real agent: a push of up to the replica limit is read.
                axum::routing::put(replica_push).layer(axum::extract::DefaultBodyLimit::max(
                    usize::try_from(nodecare_agent::replica::MAX_PUSH_BYTES).unwrap_or(usize::MAX),
                )),
            )
            .route(
                nodecare_protocol::replica::REPLICA_READ_PATH,
                post(replica_read),
            )
            .with_state(Arc::clone(&state));
        self.tasks.push(tokio::spawn(async move {
            if let Err(error) = axum::serve(listener, app).await {
                tracing::warn!(%error, "fake agent stopped");
            }
        }));
        let agent = FakeAgent { state, addr };
        self.agents.insert(node.to_owned(), agent.clone());
        Ok(agent)
    }

    /// Per-node base URLs, for the coordinator's `[agents] overrides`.
    pub fn overrides(&self) -> BTreeMap<String, String> {
        self.agents
            .iter()
            .map(|(node, agent)| (node.clone(), agent.url()))
            .collect()
    }

    /// The agent of `node`.
    pub fn get(&self, node: &str) -> Option<&FakeAgent> {
        self.agents.get(node)
    }

    /// Calls `observer` with each command any agent of the set (started before or after) takes
    /// for the first time, at the moment it takes it.
    pub fn observe_deliveries(&self, observer: DeliveryObserver) {
        if let Ok(mut o) = self.observer.lock() {
            *o = Some(observer);
        }
    }

    /// How many repairs (incidents or requests) were requested of any of them so far: a reader
    /// that follows the repairs looks at each agent only when this moved.
    pub fn repairs_requested(&self) -> u64 {
        self.repairs_requested
            .load(std::sync::atomic::Ordering::Relaxed)
    }
}

impl Drop for FakeAgents {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}
