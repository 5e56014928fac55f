//! A simulated Ganeti cluster with fault injection.
//!
//! * [`Simulation`] holds the cluster ([`model::SimCluster`]: nodes, instances of every disk
//!   template, tags, capacity, jobs that finish after a configurable delay) and answers RAPI v2
//!   requests with the JSON shapes of Ganeti 3.0.2 ([`Simulation::answer`], routes in
//!   [`rapi_routes`]).
//! * [`Simulation::client`]: nodecare's one RAPI client ([`RapiClient`], which implements
//!   [`nodecare_ganeti::Ganeti`]) over an in-process transport to that handler, for fast tests.
//! * [`Simulation::serve`] serves the same handler over HTTP or HTTPS on loopback, for the
//!   demo and the crash tests of the coordinator binary (the `nodecare-ganeti-sim` binary wraps
//!   it).
//! * Faults: failing jobs ([`model::JobFailureRule`]), HTTP 5xx answers, hanging requests and
//!   connection resets, answers lost after the request was carried out ([`HttpFaults`]), slow jobs ([`Simulation::set_job_delay`]), jobs that
//!   vanish from the queue or stay `running` forever ([`Simulation::vanish_next_jobs`],
//!   [`Simulation::stick_next_jobs`]), a master that moves ([`Simulation::set_master`]) seen
//!   through each node's RAPI daemon ([`Simulation::client_on`]).
//! * Every submission is recorded with its reason, so tests can assert that no intent was
//!   submitted twice ([`Simulation::duplicate_intents`]).

pub mod model;
pub mod rapi_routes;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Request, Response};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

use model::{JobFailureRule, SimCluster, SimConfig, Submission};
use nodecare_ganeti::rapi::client::{Credentials, RapiClient};
use nodecare_ganeti::rapi::transport::{
    RapiRequest, RapiResponse, Transport, TransportError, TransportFuture,
};
pub use rapi_routes::SimBody;
use rapi_routes::{SimAnswer, SimRequest};

/// The status [`Simulation::answer`] gives for a request whose connection is reset: the HTTP
/// server closes the connection without an answer, the in-process transport fails.
pub const RESET: u16 = 0;

/// How long RAPI's `/2/jobs/<id>/wait` blocks at most (Ganeti uses 10 s).
const WAIT_PERIOD: Duration = Duration::from_secs(10);

/// HTTP-level faults; each counter is consumed by matching requests.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HttpFaults {
    /// The next N matching requests answer HTTP 502.
    #[serde(default)]
    pub fail_5xx: u32,
    /// The next N matching requests hang for `hang_ms` and then answer 504 (a client with a
    /// shorter timeout sees a timeout).
    #[serde(default)]
    pub hang: u32,
    #[serde(default = "default_hang_ms")]
    pub hang_ms: u64,
    /// The next N matching requests get no answer: the connection is closed under them (a
    /// connection reset).
    #[serde(default)]
    pub reset: u32,
    /// The next N matching requests are carried out (a job submitted is created) and then
    /// get no answer: the connection is closed after the work is done (an answer lost on its
    /// way back, a client timing out while Ganeti finishes).
    #[serde(default)]
    pub lose_answer: u32,
    /// The next N matching requests are carried out at once and answered only `hang_ms`
    /// later (Ganeti's answer delayed behind its locks, while what it did already holds).
    #[serde(default)]
    pub slow_answer: u32,
    /// Only requests whose path contains this string are affected.
    #[serde(default)]
    pub path_contains: Option<String>,
    /// Only requests whose path is exactly this one are affected (`/2/jobs`: the job list,
    /// not one job).
    #[serde(default)]
    pub path_is: Option<String>,
    /// Only requests with this method are affected.
    #[serde(default)]
    pub method: Option<String>,
}

fn default_hang_ms() -> u64 {
    60_000
}

#[derive(Debug)]
enum FaultAction {
    None,
    Reset,
    /// Handled, then the connection is closed without the answer.
    LoseAnswer,
    /// Handled, then answered after a while.
    SlowAnswer(Duration),
    Fail,
    Hang(Duration),
}

impl HttpFaults {
    fn take(&mut self, method: &str, path: &str) -> FaultAction {
        let matches = self
            .path_contains
            .as_deref()
            .is_none_or(|p| path.contains(p))
            && self.path_is.as_deref().is_none_or(|p| path == p)
            && self
                .method
                .as_deref()
                .is_none_or(|m| m.eq_ignore_ascii_case(method));
        if !matches {
            return FaultAction::None;
        }
        if self.reset > 0 {
            self.reset -= 1;
            FaultAction::Reset
        } else if self.lose_answer > 0 {
            self.lose_answer -= 1;
            FaultAction::LoseAnswer
        } else if self.slow_answer > 0 {
            self.slow_answer -= 1;
            FaultAction::SlowAnswer(Duration::from_millis(self.hang_ms))
        } else if self.fail_5xx > 0 {
            self.fail_5xx -= 1;
            FaultAction::Fail
        } else if self.hang > 0 {
            self.hang -= 1;
            FaultAction::Hang(Duration::from_millis(self.hang_ms))
        } else {
            FaultAction::None
        }
    }
}

/// A write sent to the RAPI daemon of a node ([`Simulation::client_on`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Write {
    /// The node whose RAPI daemon it was sent to.
    pub via: String,
    /// The master when it arrived.
    pub master: String,
    pub method: String,
    pub path: String,
    /// Whether it reached the cluster (only the master's RAPI answers).
    pub accepted: bool,
}

#[derive(Debug)]
struct Shared {
    writes: Mutex<Vec<Write>>,
    cluster: Mutex<SimCluster>,
    faults: Mutex<HttpFaults>,
    credentials: Mutex<Option<Credentials>>,
    start: Instant,
    changed: tokio::sync::Notify,
}

/// A simulated Ganeti cluster. Cheap to clone (shared state).
#[derive(Debug, Clone)]
pub struct Simulation {
    shared: Arc<Shared>,
}

/// PEM certificate and key for the simulated RAPI's HTTPS.
#[derive(Debug, Clone)]
pub struct SimTls {
    pub cert_pem: String,
    pub key_pem: String,
}

impl SimTls {
    /// A certificate shaped like Ganeti's cluster certificate: self-signed, `CA:TRUE`, CN
    /// `ganeti.example.com`, no subject alternative name (feature `cert`).
    #[cfg(feature = "cert")]
    pub fn ganeti_like() -> Result<Self, String> {
        let key = rcgen::KeyPair::generate().map_err(|e| format!("cannot generate a key: {e}"))?;
        let mut params =
            rcgen::CertificateParams::new(Vec::<String>::new()).map_err(|e| e.to_string())?;
        params.distinguished_name = rcgen::DistinguishedName::new();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "ganeti.example.com");
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let cert = params
            .self_signed(&key)
            .map_err(|e| format!("cannot sign the certificate: {e}"))?;
        Ok(Self {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        })
    }

    fn acceptor(&self) -> Result<tokio_rustls::TlsAcceptor, String> {
        use rustls::pki_types::pem::PemObject;
        use rustls::pki_types::{CertificateDer, PrivateKeyDer};
        let certs = CertificateDer::pem_slice_iter(self.cert_pem.as_bytes())
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| format!("bad certificate PEM: {e}"))?;
        let key = PrivateKeyDer::from_pem_slice(self.key_pem.as_bytes())
            .map_err(|e| format!("bad key PEM: {e}"))?;
        let config = rustls::ServerConfig::builder_with_provider(
            nodecare_ganeti::rapi::tls::crypto_provider(),
        )
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| format!("bad certificate/key: {e}"))?;
        Ok(tokio_rustls::TlsAcceptor::from(Arc::new(config)))
    }
}

/// A running simulated RAPI server; stops when dropped or on [`SimServer::stop`].
#[derive(Debug)]
pub struct SimServer {
    pub addr: SocketAddr,
    /// `http://127.0.0.1:<port>` or `https://127.0.0.1:<port>`.
    pub url: String,
    task: JoinHandle<()>,
}

impl SimServer {
    pub fn stop(self) {
        self.task.abort();
    }
}

impl Drop for SimServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Simulation {
    pub fn new(config: SimConfig) -> Result<Self, String> {
        let mut cluster = SimCluster::new(config)?;
        cluster.trail_epoch_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        Ok(Self {
            shared: Arc::new(Shared {
                writes: Mutex::new(Vec::new()),
                cluster: Mutex::new(cluster),
                faults: Mutex::new(HttpFaults::default()),
                credentials: Mutex::new(None),
                start: Instant::now(),
                changed: tokio::sync::Notify::new(),
            }),
        })
    }

    /// Milliseconds since the simulation started (its clock).
    pub fn now_ms(&self) -> u64 {
        u64::try_from(self.shared.start.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    fn lock(&self) -> MutexGuard<'_, SimCluster> {
        // A panic while holding the lock cannot leave the model half-updated in a way later
        // reads care about, so a poisoned lock is simply taken over.
        let mut guard = self
            .shared
            .cluster
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        guard.advance(self.now_ms());
        guard
    }

    /// Runs `f` on the cluster state (after advancing the jobs to now) and wakes job waiters.
    /// `f` may change anything, the job queue included: the next advance looks at every
    /// unfinished job again.
    pub fn with_cluster<R>(&self, f: impl FnOnce(&mut SimCluster) -> R) -> R {
        let result = {
            let mut cluster = self.lock();
            let result = f(&mut cluster);
            cluster.touched();
            result
        };
        self.shared.changed.notify_waiters();
        result
    }

    /// Reads the cluster state (after advancing the jobs to now) without waking waiters: a
    /// reader that follows the cluster often (a benchmark's sampler) costs its jobs nothing.
    pub fn peek<R>(&self, f: impl FnOnce(&SimCluster) -> R) -> R {
        f(&self.lock())
    }

    /// Makes matching jobs fail with an `OpExecError`.
    pub fn fail_jobs(&self, rule: JobFailureRule) {
        self.with_cluster(|c| c.failure_rules.push(rule));
    }

    /// The next `n` jobs submitted by clients vanish from the queue at once (RAPI answers 404
    /// for them), as a job lost with a master's queue.
    pub fn vanish_next_jobs(&self, n: u32) {
        self.with_cluster(|c| c.vanish_next = n);
    }

    /// The next `n` jobs submitted by clients start and never finish (stuck in `running`).
    pub fn stick_next_jobs(&self, n: u32) {
        self.with_cluster(|c| c.stick_next = n);
    }

    /// Changes the delay of jobs submitted from now on.
    pub fn set_job_delay(&self, delay: Duration) {
        self.with_cluster(|c| c.job_delay = delay);
    }

    /// Replaces the HTTP faults.
    pub fn set_http_faults(&self, faults: HttpFaults) {
        *self
            .shared
            .faults
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = faults;
    }

    /// The HTTP faults not yet consumed.
    pub fn http_faults(&self) -> HttpFaults {
        self.shared
            .faults
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Requires basic authentication with these credentials (RAPI answers 401 otherwise).
    pub fn require_credentials(&self, credentials: Option<Credentials>) {
        *self
            .shared
            .credentials
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = credentials;
    }

    /// Every job submission so far, in order.
    pub fn submissions(&self) -> Vec<Submission> {
        self.peek(|c| c.submissions.clone())
    }

    /// Client intents (`incident/intent`) submitted more than once.
    pub fn duplicate_intents(&self) -> Vec<String> {
        self.peek(SimCluster::duplicate_intents)
    }

    /// Waits until every job is finished (or `limit` passes); true if all finished.
    pub async fn settle(&self, limit: Duration) -> bool {
        let deadline = Instant::now() + limit;
        loop {
            let next = self.peek(|c| c.next_change_in(self.now_ms()));
            let Some(ms) = next else { return true };
            if Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(ms.clamp(1, 50))).await;
        }
    }

    fn fault(&self, method: &str, path: &str) -> FaultAction {
        self.shared
            .faults
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take(method, path)
    }

    /// Handles one decoded RAPI request (after faults and authentication).
    pub async fn handle(&self, req: &SimRequest) -> (u16, SimBody) {
        // The routes change the job queue only through the cluster's own methods, which keep
        // its next due time.
        let answer = rapi_routes::route(&mut self.lock(), req, self.now_ms());
        self.shared.changed.notify_waiters();
        match answer {
            SimAnswer::Now(status, body) => (status, body.into()),
            SimAnswer::Encoded(status, bytes) => (status, SimBody::Encoded(bytes)),
            SimAnswer::WaitJob { id, previous } => {
                let deadline = tokio::time::Instant::now() + WAIT_PERIOD;
                loop {
                    let notified = self.shared.changed.notified();
                    let (over, next) = self.peek(|c| {
                        (
                            rapi_routes::wait_is_over(c, id, previous.as_deref()),
                            c.next_change_in(self.now_ms()),
                        )
                    });
                    if over {
                        // A read: the other waiters are woken (the jobs may have moved on), the
                        // cluster is not taken as changed by hand.
                        let answer =
                            self.peek(|c| rapi_routes::wait_answer(c, id, previous.as_deref()));
                        self.shared.changed.notify_waiters();
                        return (200, answer.unwrap_or(Value::Null).into());
                    }
                    if tokio::time::Instant::now() >= deadline {
                        return (200, Value::Null.into());
                    }
                    let pause = Duration::from_millis(next.unwrap_or(50).clamp(1, 200));
                    // Either a change was signalled or the pause ended: re-check both ways.
                    let _signalled = tokio::time::timeout(pause, notified).await.is_ok();
                }
            }
        }
    }

    /// Serves the simulated RAPI on `addr` (use `127.0.0.1:0`), over HTTPS when `tls` is given.
    /// Extra endpoints for tests: `GET /sim/submissions`, `GET /sim/duplicates`,
    /// `POST /sim/http-faults` ([`HttpFaults`]), `POST /sim/fail-jobs` ([`JobFailureRule`]),
    /// `POST /sim/job-delay` (`{"ms": N}`), `POST /sim/node-memory` (`{"node", "mib"}`).
    pub async fn serve(&self, addr: SocketAddr, tls: Option<SimTls>) -> std::io::Result<SimServer> {
        let listener = TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let acceptor = match &tls {
            Some(t) => Some(t.acceptor().map_err(std::io::Error::other)?),
            None => None,
        };
        let url = format!(
            "{}://{}",
            if acceptor.is_some() { "https" } else { "http" },
            addr
        );
        let sim = self.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _peer)) = listener.accept().await else {
                    continue;
                };
                let sim = sim.clone();
                let acceptor = acceptor.clone();
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |req| {
                        let sim = sim.clone();
                        async move {
                            sim.serve_http(req).await.ok_or_else(|| {
                                std::io::Error::new(
                                    std::io::ErrorKind::ConnectionReset,
                                    "injected connection reset",
                                )
                            })
                        }
                    });
                    let builder = hyper::server::conn::http1::Builder::new();
                    match acceptor {
                        Some(acceptor) => {
                            if let Ok(tls_stream) = acceptor.accept(stream).await {
                                let io = hyper_util::rt::TokioIo::new(tls_stream);
                                // A client closing the connection mid-request is not an error here.
                                let _closed = builder.serve_connection(io, service).await.is_err();
                            }
                        }
                        None => {
                            let io = hyper_util::rt::TokioIo::new(stream);
                            let _closed = builder.serve_connection(io, service).await.is_err();
                        }
                    }
                });
            }
        });
        Ok(SimServer { addr, url, task })
    }

    /// Answers one HTTP request; `None`: close the connection without an answer.
    async fn serve_http(&self, req: Request<Incoming>) -> Option<Response<Full<Bytes>>> {
        let method = req.method().as_str().to_owned();
        let path = req.uri().path().to_owned();
        let query = req
            .uri()
            .query()
            .map(rapi_routes::parse_query)
            .unwrap_or_default();
        let authorized = self.authorized(req.headers().get(hyper::header::AUTHORIZATION));
        let json_body = req
            .headers()
            .get(hyper::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("application/json"));
        let body = match req.into_body().collect().await {
            Ok(collected) => collected.to_bytes(),
            Err(_) => {
                return Some(respond(
                    400,
                    &rapi_routes::error(400, "Bad Request", "unreadable body"),
                ));
            }
        };
        if path.starts_with("/sim/") {
            let (status, value) = self.control(&method, &path, &body);
            return Some(respond(status, &value));
        }
        let (status, body) = self
            .answer(&method, &path, query, authorized, json_body, &body)
            .await;
        if status == RESET {
            return None;
        }
        Some(respond_bytes(status, body.into_bytes()))
    }

    /// Answers one RAPI request as it came off the wire (method, path, decoded query, whether
    /// it authenticated, whether the body is declared JSON, body bytes): injected faults first,
    /// then authentication, body decoding, and the route. Both the HTTP server and the
    /// in-process transport of [`Self::client`] answer through here.
    pub async fn answer(
        &self,
        method: &str,
        path: &str,
        query: Vec<(String, String)>,
        authorized: bool,
        json_body: bool,
        body: &[u8],
    ) -> (u16, SimBody) {
        let mut slow = None;
        let lose_answer = match self.fault(method, path) {
            FaultAction::None => false,
            FaultAction::LoseAnswer => true,
            FaultAction::SlowAnswer(d) => {
                slow = Some(d);
                false
            }
            FaultAction::Reset => return (RESET, Value::Null.into()),
            FaultAction::Fail => {
                return (
                    502,
                    rapi_routes::error(502, "Bad Gateway", "injected fault").into(),
                );
            }
            FaultAction::Hang(d) => {
                tokio::time::sleep(d).await;
                return (
                    504,
                    rapi_routes::error(504, "Gateway Timeout", "injected hang").into(),
                );
            }
        };
        let answer = self
            .answer_unfaulted(method, path, query, authorized, json_body, body)
            .await;
        if lose_answer {
            return (RESET, Value::Null.into());
        }
        if let Some(d) = slow {
            tokio::time::sleep(d).await;
        }
        answer
    }

    /// [`Self::answer`] after the faults: authentication, body decoding, the route.
    async fn answer_unfaulted(
        &self,
        method: &str,
        path: &str,
        query: Vec<(String, String)>,
        authorized: bool,
        json_body: bool,
        body: &[u8],
    ) -> (u16, SimBody) {
        if !authorized {
            return (
                401,
                rapi_routes::error(
                    401,
                    "Unauthorized",
                    "No permission -- see authorization schemes",
                )
                .into(),
            );
        }
        let body = if body.is_empty() {
            None
        } else if !json_body {
            return (
                415,
                rapi_routes::error(
                    415,
                    "Unsupported Media Type",
                    "Entity body in unsupported format",
                )
                .into(),
            );
        } else {
            match serde_json::from_slice::<Value>(body) {
                Ok(v) => Some(v),
                Err(e) => {
                    return (
                        400,
                        rapi_routes::error(
                            400,
                            "Bad Request",
                            &format!("Unable to parse JSON data: {e}"),
                        )
                        .into(),
                    );
                }
            }
        };
        self.handle(&SimRequest {
            method: method.to_owned(),
            path: path.to_owned(),
            query,
            body,
        })
        .await
    }

    /// nodecare's RAPI client talking to this simulation in process (no sockets). Requests are
    /// authorized as if they carried the right credentials; faults apply as over HTTP.
    pub fn client(&self) -> RapiClient {
        self.client_with_timeout(IN_PROCESS_TIMEOUT)
    }

    /// [`Self::client`] with another bound on each request.
    pub fn client_with_timeout(&self, request_timeout: Duration) -> RapiClient {
        RapiClient::with_transport(
            Arc::new(InProcess {
                sim: self.clone(),
                on: None,
            }),
            IN_PROCESS_URL,
            request_timeout,
        )
    }

    /// A client of the RAPI daemon on `node` (a coordinator's default `https://127.0.0.1:5080`):
    /// it answers only while `node` is the master, like Ganeti's RAPI, which runs on the master
    /// alone; otherwise the connection is refused. Every write (`POST`, `PUT`, `DELETE`) is
    /// recorded ([`Self::writes`]).
    pub fn client_on(&self, node: &str) -> RapiClient {
        RapiClient::with_transport(
            Arc::new(InProcess {
                sim: self.clone(),
                on: Some(node.to_owned()),
            }),
            IN_PROCESS_URL,
            IN_PROCESS_TIMEOUT,
        )
    }

    /// Makes `node` the master (`gnt-cluster master-failover` on it).
    pub fn set_master(&self, node: &str) -> Result<(), String> {
        self.with_cluster(|c| c.set_master(node))
    }

    /// The master now.
    pub fn master(&self) -> String {
        self.peek(|c| c.master().to_owned())
    }

    /// Every write sent through a [`Self::client_on`] client, in order.
    pub fn writes(&self) -> Vec<Write> {
        self.shared
            .writes
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    fn authorized(&self, header: Option<&hyper::header::HeaderValue>) -> bool {
        let guard = self
            .shared
            .credentials
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let Some(expected) = guard.as_ref() else {
            return true;
        };
        let Some(value) = header.and_then(|h| h.to_str().ok()) else {
            return false;
        };
        let Some(encoded) = value.strip_prefix("Basic ") else {
            return false;
        };
        decode_base64(encoded.trim())
            .is_some_and(|d| d == format!("{}:{}", expected.user, expected.password).into_bytes())
    }

    fn control(&self, method: &str, path: &str, body: &[u8]) -> (u16, Value) {
        let parsed: Result<Value, _> = if body.is_empty() {
            Ok(Value::Null)
        } else {
            serde_json::from_slice(body)
        };
        let Ok(parsed) = parsed else {
            return (400, json!({"error": "body is not JSON"}));
        };
        let bad = |e: serde_json::Error| (400, json!({"error": e.to_string()}));
        match (method, path) {
            ("GET", "/sim/submissions") => (200, json!(self.submissions())),
            ("GET", "/sim/duplicates") => (200, json!(self.duplicate_intents())),
            ("GET", "/sim/state") => (
                200,
                self.with_cluster(|c| {
                    let nodes = c.nodes_json();
                    let instances: Vec<Value> =
                        c.instances.values().map(|i| c.instance_json(i)).collect();
                    json!({"nodes": nodes, "instances": instances})
                }),
            ),
            ("POST", "/sim/http-faults") => match serde_json::from_value::<HttpFaults>(parsed) {
                Ok(f) => {
                    self.set_http_faults(f);
                    (200, json!("ok"))
                }
                Err(e) => bad(e),
            },
            ("POST", "/sim/fail-jobs") => match serde_json::from_value::<JobFailureRule>(parsed) {
                Ok(rule) => {
                    self.fail_jobs(rule);
                    (200, json!("ok"))
                }
                Err(e) => bad(e),
            },
            ("POST", "/sim/job-delay") => match parsed.get("ms").and_then(Value::as_u64) {
                Some(ms) => {
                    self.set_job_delay(Duration::from_millis(ms));
                    (200, json!("ok"))
                }
                None => (400, json!({"error": "want {\"ms\": N}"})),
            },
            ("POST", "/sim/node-memory") => {
                let node = parsed
                    .get("node")
                    .and_then(Value::as_str)
                    .map(str::to_owned);
                let mib = parsed.get("mib").and_then(Value::as_u64);
                let (Some(node), Some(mib)) = (node, mib) else {
                    return (400, json!({"error": "want {\"node\", \"mib\"}"}));
                };
                let found = self.with_cluster(|c| {
                    c.nodes
                        .get_mut(&node)
                        .map(|n| n.memory_total_mib = mib)
                        .is_some()
                });
                if found {
                    (200, json!("ok"))
                } else {
                    (404, json!({"error": "no such node"}))
                }
            }
            _ => (404, json!({"error": "unknown simulation endpoint"})),
        }
    }
}

fn respond(status: u16, value: &Value) -> Response<Full<Bytes>> {
    respond_bytes(
        status,
        serde_json::to_vec(value).unwrap_or_else(|_| b"null".to_vec()),
    )
}

fn respond_bytes(status: u16, body: Vec<u8>) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() =
        hyper::StatusCode::from_u16(status).unwrap_or(hyper::StatusCode::INTERNAL_SERVER_ERROR);
    response.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json"),
    );
    response
}

/// Standard base64 decoding (for the Authorization header).
fn decode_base64(text: &str) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    let mut buffer = 0u32;
    let mut bits = 0;
    for c in text.bytes() {
        let v = match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            b'=' => break,
            _ => return None,
        };
        buffer = (buffer << 6) | u32::from(v);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push(u8::try_from((buffer >> bits) & 0xff).ok()?);
        }
    }
    Some(out)
}

/// The name [`Simulation::client`]'s client gives its server.
const IN_PROCESS_URL: &str = "sim://in-process";

/// Request timeout of [`Simulation::client`] (the RAPI client's default).
const IN_PROCESS_TIMEOUT: Duration = Duration::from_secs(30);

/// The in-process transport of [`Simulation::client`]: the request goes to
/// [`Simulation::answer`] as its bytes would arrive over HTTP (JSON body, decoded query).
#[derive(Debug)]
struct InProcess {
    sim: Simulation,
    /// The node whose RAPI daemon this is; `None`: the master's, wherever it is.
    on: Option<String>,
}

impl InProcess {
    async fn send_now(
        &self,
        request: &RapiRequest,
        timeout: Duration,
    ) -> Result<RapiResponse, TransportError> {
        if let Some(node) = &self.on {
            let master = self.sim.master();
            let method = request.method.as_str();
            let accepted = *node == master;
            if !matches!(method, "GET" | "HEAD") {
                self.sim
                    .shared
                    .writes
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .push(Write {
                        via: node.clone(),
                        master,
                        method: method.to_owned(),
                        path: request.path.clone(),
                        accepted,
                    });
            }
            if !accepted {
                return Err(TransportError::Failed(format!(
                    "connection refused: no RAPI daemon on {node} (not the master)"
                )));
            }
        }
        let body = match &request.body {
            Some(value) => serde_json::to_vec(value)
                .map_err(|e| TransportError::Failed(format!("cannot encode the body: {e}")))?,
            None => Vec::new(),
        };
        let answer = self.sim.answer(
            request.method.as_str(),
            &request.path,
            request.query.clone(),
            true,
            true,
            &body,
        );
        let (status, answer) = tokio::time::timeout(timeout, answer)
            .await
            .map_err(|_elapsed| TransportError::Timeout)?;
        if status == RESET {
            return Err(TransportError::Failed(
                "connection reset by peer (injected)".into(),
            ));
        }
        let body = answer.into_bytes();
        Ok(RapiResponse {
            status,
            body: body.into(),
        })
    }
}

impl Transport for InProcess {
    fn send<'a>(&'a self, request: &'a RapiRequest, timeout: Duration) -> TransportFuture<'a> {
        Box::pin(self.send_now(request, timeout))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reason_trails_are_stamped_on_the_wall_clock() {
        let sim = Simulation::new(SimConfig::from_spec(2, "", "sim.test").unwrap()).unwrap();
        let before_ns = u64::try_from(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos(),
        )
        .unwrap();
        let now = sim.now_ms();
        let job = sim.with_cluster(|c| {
            let id = c.submit(
                crate::model::SimOp::SetNodeParams {
                    node: "node2.sim.test".into(),
                    drained: Some(true),
                    offline: None,
                    auto_promote: false,
                },
                Some("nodecare incident=x intent=drain"),
                "nodes",
                now,
            );
            let job = c.jobs.get(&id).unwrap().clone();
            c.job_json(&job, false)
        });
        let trail = job["ops"][0]["reason"].as_array().unwrap();
        for entry in trail {
            let ns = entry[2].as_u64().unwrap();
            // Within a minute of the wall clock, not milliseconds since the simulation began.
            assert!(
                ns + 60_000_000_000 >= before_ns && ns <= before_ns + 60_000_000_000,
                "{entry} vs {before_ns}"
            );
        }
    }

    #[test]
    fn base64_decodes() {
        assert_eq!(decode_base64("YWRtaW46c2VjcmV0").unwrap(), b"admin:secret");
        assert_eq!(decode_base64("YQ==").unwrap(), b"a");
        assert!(decode_base64("!!").is_none());
    }

    #[test]
    fn http_faults_are_consumed() {
        let mut f = HttpFaults {
            reset: 1,
            lose_answer: 1,
            slow_answer: 1,
            fail_5xx: 1,
            hang: 1,
            hang_ms: 5,
            path_contains: Some("/2/jobs".into()),
            path_is: None,
            method: None,
        };
        assert!(matches!(f.take("GET", "/2/info"), FaultAction::None));
        assert!(matches!(f.take("GET", "/2/jobs/1"), FaultAction::Reset));
        assert!(matches!(
            f.take("GET", "/2/jobs/1"),
            FaultAction::LoseAnswer
        ));
        assert!(matches!(
            f.take("GET", "/2/jobs/1"),
            FaultAction::SlowAnswer(_)
        ));
        assert!(matches!(f.take("GET", "/2/jobs/1"), FaultAction::Fail));
        assert!(matches!(f.take("GET", "/2/jobs/1"), FaultAction::Hang(_)));
        assert!(matches!(f.take("GET", "/2/jobs/1"), FaultAction::None));
        let mut list = HttpFaults {
            fail_5xx: 1,
            path_is: Some("/2/jobs".into()),
            ..HttpFaults::default()
        };
        assert!(matches!(list.take("GET", "/2/jobs/1"), FaultAction::None));
        assert!(matches!(list.take("GET", "/2/jobs"), FaultAction::Fail));
    }
}
