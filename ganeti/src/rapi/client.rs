//! Async client for Ganeti's RAPI v2 over HTTPS with a pinned cluster certificate.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use super::request::{rapi_request, segment, tags_path, truncate};
use super::transport::{HttpsTransport, Method, RapiBody, RapiRequest, Transport, TransportError};
use super::types::{
    JobWaitAnswer, RapiClusterInfo, RapiErrorBody, RapiGroup, RapiInstance, RapiJob, RapiNode,
    RapiOpCode, TagTarget, WireReasonEntry,
};
use crate as ganeti;
use crate::{Ganeti, GanetiError, GanetiFuture, JobId, JobStatus, Op, Reason};

pub use super::config::{
    Credentials, DEFAULT_IALLOCATOR, DEFAULT_RAPI_URL, RAPI_WAIT_PERIOD, RapiConfig, RapiError,
    ServerTrust,
};

/// An answer of at most this many bytes (4 000 instances' `GET /2/instances?bulk=1` is ~2 MB)
/// is decoded from one buffer; a larger one as it is read, chunk by chunk (10 000 nodes' list is
/// ~12 MB), so that it and what it decodes to are not both held whole.
const CONTIGUOUS_LIMIT: usize = 8 * 1024 * 1024;

/// Ganeti RAPI v2 client: sends the reads and each write's request ([`rapi_request`]), and decodes
/// the answers.
/// Cheap to clone (shares the transport and its connection pool).
#[derive(Debug, Clone)]
pub struct RapiClient {
    transport: Arc<dyn Transport>,
    base_url: String,
    request_timeout: Duration,
    /// The source written before every job's reason text ([`crate::REASON_SOURCE`] unless
    /// [`Self::with_reason_source`] says otherwise).
    reason_source: String,
}

impl RapiClient {
    /// A client of the RAPI server at `config.base_url`, over [`HttpsTransport`].
    pub fn new(config: RapiConfig) -> Result<Self, RapiError> {
        let transport = HttpsTransport::new(&config)?;
        let base_url = transport.base_url().to_owned();
        Ok(Self {
            transport: Arc::new(transport),
            base_url,
            request_timeout: config.request_timeout,
            reason_source: crate::REASON_SOURCE.to_owned(),
        })
    }

    /// The same client writing `source` before every job's reason text (checked with
    /// [`crate::check_reason_source`]).
    pub fn with_reason_source(mut self, source: &str) -> Result<Self, RapiError> {
        crate::check_reason_source(source).map_err(RapiError::Config)?;
        source.clone_into(&mut self.reason_source);
        Ok(self)
    }

    /// The source written before every job's reason text.
    pub fn reason_source(&self) -> &str {
        &self.reason_source
    }

    /// A client over another transport (e.g. an in-process simulated cluster); `base_url` only
    /// names the server (in errors and [`Self::base_url`]).
    pub fn with_transport(
        transport: Arc<dyn Transport>,
        base_url: impl Into<String>,
        request_timeout: Duration,
    ) -> Self {
        Self {
            transport,
            base_url: base_url.into(),
            request_timeout,
            reason_source: crate::REASON_SOURCE.to_owned(),
        }
    }

    pub fn base_url(&self) -> &str {
        &self.base_url
    }

    // ---- reads ----

    /// `GET /2/info`.
    pub async fn cluster_info(&self) -> Result<RapiClusterInfo, RapiError> {
        self.get_json("/2/info", &[]).await
    }

    /// `GET /2/nodes?bulk=1`.
    pub async fn nodes(&self) -> Result<Vec<RapiNode>, RapiError> {
        self.get_json("/2/nodes", &[("bulk", "1")]).await
    }

    /// `GET /2/nodes/<name>`.
    pub async fn node(&self, name: &str) -> Result<RapiNode, RapiError> {
        self.get_json(&format!("/2/nodes/{}", segment(name)?), &[])
            .await
    }

    /// `GET /2/instances?bulk=1`.
    pub async fn instances(&self) -> Result<Vec<RapiInstance>, RapiError> {
        self.get_json("/2/instances", &[("bulk", "1")]).await
    }

    /// `GET /2/instances/<name>`.
    pub async fn instance(&self, name: &str) -> Result<RapiInstance, RapiError> {
        self.get_json(&format!("/2/instances/{}", segment(name)?), &[])
            .await
    }

    /// `GET /2/groups?bulk=1`.
    pub async fn groups(&self) -> Result<Vec<RapiGroup>, RapiError> {
        self.get_json("/2/groups", &[("bulk", "1")]).await
    }

    /// `GET .../tags`.
    pub async fn tags(&self, target: &TagTarget) -> Result<Vec<String>, RapiError> {
        self.get_json(&tags_path(target)?, &[]).await
    }

    /// `GET /2/jobs/<id>`, of a job in the queue or archived (Ganeti's job query loads a job
    /// named by id from the archive too: `loadJobFromDisk` with `archived`). An unknown job is
    /// [`RapiError::JobNotFound`]: Ganeti answers 200 with every field `null` for it.
    pub async fn job(&self, id: JobId) -> Result<RapiJob, RapiError> {
        let path = format!("/2/jobs/{id}");
        let value: Value = match self.get_json(&path, &[]).await {
            Err(e) if e.http_status() == Some(404) => return Err(RapiError::JobNotFound(id)),
            other => other?,
        };
        if value.get("status").is_none_or(Value::is_null) {
            return Err(RapiError::JobNotFound(id));
        }
        serde_json::from_value(value).map_err(|e| decode_error("GET", &path, &e))
    }

    /// `GET /2/jobs?bulk=1`: every job still in the queue, with opcodes and reason trails.
    pub async fn jobs(&self) -> Result<Vec<RapiJob>, RapiError> {
        self.jobs_listed(None).await
    }

    /// The jobs among `ids` only, with their status and opcodes (reason trails): asked for by
    /// a job query filtered on their ids ([`Self::jobs_queried`]), so that Ganeti loads those
    /// jobs alone, not its whole queue. A RAPI that refuses the query (an HTTP error, an answer
    /// that does not decode) is asked for its whole job list instead (`GET /2/jobs?bulk=1`,
    /// the others' texts passed over after their id).
    pub async fn jobs_among(&self, ids: &BTreeSet<JobId>) -> Result<Vec<RapiJob>, RapiError> {
        match self.jobs_queried(ids).await {
            Err(RapiError::Http { .. } | RapiError::Decode { .. }) => {
                self.jobs_listed(Some(ids)).await
            }
            answer => answer,
        }
    }

    /// `PUT /2/query/job` with the fields `id`, `status` and `ops` and a filter naming `ids`
    /// (at most [`QUERY_JOBS_AT_ONCE`] per request): the jobs Ganeti has among them, in its
    /// order, each opcode with its id and reason trail only (its other parameters are not
    /// read). A job whose status is not available (not found, not readable) is left out.
    pub async fn jobs_queried(&self, ids: &BTreeSet<JobId>) -> Result<Vec<RapiJob>, RapiError> {
        let path = "/2/query/job";
        let ids: Vec<JobId> = ids.iter().copied().collect();
        let mut jobs = Vec::with_capacity(ids.len());
        for chunk in ids.chunks(QUERY_JOBS_AT_ONCE) {
            let query = JobQuery {
                fields: &JOB_QUERY_FIELDS,
                qfilter: IdsFilter(chunk),
            };
            let body = serde_json::to_value(&query).map_err(|e| decode_error("PUT", path, &e))?;
            let answer = self
                .send_body(
                    &request(Method::Put, path, &[], Some(body)),
                    self.request_timeout,
                )
                .await?;
            let answer: QueryAnswer = decoded(Method::Put, path, answer, CONTIGUOUS_LIMIT)?;
            jobs.extend(answer.jobs(path)?);
        }
        Ok(jobs)
    }

    async fn jobs_listed(
        &self,
        among: Option<&BTreeSet<JobId>>,
    ) -> Result<Vec<RapiJob>, RapiError> {
        let path = "/2/jobs";
        let request = request(Method::Get, path, &[("bulk", "1")], None);
        let body = self.send_body(&request, self.request_timeout).await?;
        jobs_of(path, body, CONTIGUOUS_LIMIT, among)
    }
}

/// The jobs of the answer `body` to a bulk job list (those among `among`, when given): each
/// job's text found in the list (borrowed from one buffer when that is cheap: `limit`), then
/// decoded into its type, with no JSON tree in between.
fn jobs_of(
    path: &str,
    body: RapiBody,
    limit: usize,
    among: Option<&BTreeSet<JobId>>,
) -> Result<Vec<RapiJob>, RapiError> {
    match body.into_contiguous(limit) {
        Ok(whole) => {
            let listed: Vec<&serde_json::value::RawValue> = serde_json::from_slice(&whole)
                .map_err(|e| body_error(Method::Get, path, &e, &whole[..whole.len().min(1024)]))?;
            job_list(path, &listed, among)
        }
        Err(body) => {
            let listed: Vec<Box<serde_json::value::RawValue>> =
                decoded(Method::Get, path, body, limit)?;
            job_list(path, &listed, among)
        }
    }
}

/// The request `method` `path` with `query` and JSON `body`.
fn request(method: Method, path: &str, query: &[(&str, &str)], body: Option<Value>) -> RapiRequest {
    RapiRequest {
        method,
        path: path.to_owned(),
        query: query
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
        body,
    }
}

/// The jobs of a bulk job list (those among `among`, when given: the others' ids only are
/// read), each decoded from its own text; a job archived between listing and reading (null
/// fields) is left out, any other job that does not decode is an error.
fn job_list<T: std::ops::Deref<Target = serde_json::value::RawValue>>(
    path: &str,
    listed: &[T],
    among: Option<&BTreeSet<JobId>>,
) -> Result<Vec<RapiJob>, RapiError> {
    /// A listed job's id alone (every other field passed over).
    #[derive(serde::Deserialize)]
    struct Listed {
        #[serde(default)]
        id: Option<JobId>,
    }
    let mut jobs = Vec::with_capacity(among.map_or(listed.len(), BTreeSet::len));
    for text in listed {
        if let Some(among) = among {
            let id = serde_json::from_str::<Listed>(text.get())
                .map_err(|e| decode_error("GET", path, &e))?
                .id;
            if !id.is_some_and(|id| among.contains(&id)) {
                continue;
            }
        }
        match serde_json::from_str::<RapiJob>(text.get()) {
            Ok(job) => jobs.push(job),
            Err(_) if archived(text.get()) => {}
            Err(e) => return Err(decode_error("GET", path, &e)),
        }
    }
    Ok(jobs)
}

impl RapiClient {
    /// `DELETE /2/jobs/<id>`: cancels a job that has not started. Ganeti answers
    /// `[success, message]`: `[true, "Job 5 canceled"]` for a queued job, `[true, "Job 5 will
    /// be canceled"]` for a waiting one, `[false, "Job 5 is no longer waiting in the queue"]`
    /// for a running or finished one.
    pub async fn cancel_job(&self, id: JobId) -> Result<ganeti::JobCancel, RapiError> {
        let path = format!("/2/jobs/{id}");
        let answer: Value = match self
            .call(Method::Delete, &path, &[], None, self.request_timeout)
            .await
        {
            Err(e) if e.http_status() == Some(404) => return Err(RapiError::JobNotFound(id)),
            other => other?,
        };
        decode_job_cancel(&answer).ok_or_else(|| RapiError::Decode {
            method: "DELETE".into(),
            path,
            message: format!(
                "expected [success, message], got {}",
                truncate(&answer.to_string())
            ),
        })
    }

    /// One `GET /2/jobs/<id>/wait` (with a JSON body, as RAPI wants): blocks up to
    /// [`RAPI_WAIT_PERIOD`] until the status differs from `previous`. `None` = no change.
    pub async fn wait_for_job_change(
        &self,
        id: JobId,
        previous: Option<JobStatus>,
    ) -> Result<Option<JobStatus>, RapiError> {
        let path = format!("/2/jobs/{id}/wait");
        let body = json!({
            "fields": ["status"],
            "previous_job_info": previous.map(|s| vec![s.as_str()]),
            "previous_log_serial": Value::Null,
        });
        let answer: Option<JobWaitAnswer> = match self
            .call(
                Method::Get,
                &path,
                &[],
                Some(body),
                self.request_timeout + RAPI_WAIT_PERIOD,
            )
            .await
        {
            Ok(v) => v,
            // RAPI answers 500 "Can't load job file" (or 404) for unknown jobs.
            Err(e) if matches!(e.http_status(), Some(404)) => {
                return Err(RapiError::JobNotFound(id));
            }
            Err(e) => return Err(e),
        };
        let Some(answer) = answer else {
            return Ok(None);
        };
        let status = answer
            .job_info
            .first()
            .cloned()
            .ok_or_else(|| RapiError::Decode {
                method: "GET".into(),
                path: path.clone(),
                message: "empty job_info".into(),
            })?;
        let status: JobStatus =
            serde_json::from_value(status).map_err(|e| decode_error("GET", &path, &e))?;
        Ok(Some(status))
    }

    /// Waits until the job is finalized (success, error, canceled) and returns it, or fails
    /// with [`RapiError::JobWaitTimeout`] after `limit`.
    pub async fn wait_for_job(&self, id: JobId, limit: Duration) -> Result<RapiJob, RapiError> {
        let start = Instant::now();
        let mut job = self.job(id).await?;
        while !job.status.is_final() {
            if start.elapsed() >= limit {
                return Err(RapiError::JobWaitTimeout {
                    job: id,
                    after: limit,
                    status: job.status,
                });
            }
            let remaining = limit.saturating_sub(start.elapsed());
            match tokio::time::timeout(remaining, self.wait_for_job_change(id, Some(job.status)))
                .await
            {
                Ok(Ok(_)) => {}
                Ok(Err(e)) if e.is_transient() => {
                    tokio::time::sleep(Duration::from_millis(200).min(remaining)).await
                }
                Ok(Err(e)) => return Err(e),
                Err(_elapsed) => {}
            }
            job = self.job(id).await?;
        }
        Ok(job)
    }

    // ---- writes ----

    /// Submits `op` as a job with the request [`rapi_request`] writes (the reason in the
    /// `reason` query parameter after this client's source, dependencies in the body's
    /// `depends`); the answer must be a bare job id.
    pub async fn submit(&self, op: &Op, reason: &Reason) -> Result<JobId, RapiError> {
        let request = rapi_request(op, reason, &self.reason_source)?;
        let id: Value = self.send(&request, self.request_timeout).await?;
        id.as_u64().ok_or_else(|| RapiError::Decode {
            method: request.method.to_string(),
            path: request.path.clone(),
            message: format!("expected a job id, got {}", truncate(&id.to_string())),
        })
    }

    // ---- plumbing ----

    async fn get_json<T: DeserializeOwned>(
        &self,
        path: &str,
        query: &[(&str, &str)],
    ) -> Result<T, RapiError> {
        self.call(Method::Get, path, query, None, self.request_timeout)
            .await
    }

    async fn call<T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        query: &[(&str, &str)],
        body: Option<Value>,
        timeout: Duration,
    ) -> Result<T, RapiError> {
        self.send(&request(method, path, query, body), timeout)
            .await
    }

    /// Sends `request` and decodes a 2xx answer's JSON; anything else is an error naming the
    /// request's method and path.
    async fn send<T: DeserializeOwned>(
        &self,
        request: &RapiRequest,
        timeout: Duration,
    ) -> Result<T, RapiError> {
        let body = self.send_body(request, timeout).await?;
        decoded(request.method, &request.path, body, CONTIGUOUS_LIMIT)
    }

    /// Sends `request` and returns a 2xx answer's body; anything else is an error naming the
    /// request's method and path.
    async fn send_body(
        &self,
        request: &RapiRequest,
        timeout: Duration,
    ) -> Result<RapiBody, RapiError> {
        let (method, path) = (request.method, request.path.as_str());
        let response = self
            .transport
            .send(request, timeout)
            .await
            .map_err(|e| match e {
                TransportError::Timeout => RapiError::Timeout {
                    method: method.to_string(),
                    path: path.to_owned(),
                    after: timeout,
                },
                TransportError::Failed(message) => RapiError::Transport {
                    method: method.to_string(),
                    path: path.to_owned(),
                    message,
                },
            })?;
        if !(200..300).contains(&response.status) {
            return Err(http_error(
                method.as_str(),
                path,
                response.status,
                &response.body.prefix(usize::MAX),
            ));
        }
        Ok(response.body)
    }
}

/// The answer `body` of `method` `path`, decoded from one buffer when that is cheap (`limit`),
/// else as it is read, each chunk let go once read; the start is kept for an error (`truncate`
/// shows at most its first 300 bytes).
fn decoded<T: DeserializeOwned>(
    method: Method,
    path: &str,
    body: RapiBody,
    limit: usize,
) -> Result<T, RapiError> {
    let start = body.prefix(1024);
    match body.into_contiguous(limit) {
        Ok(whole) => serde_json::from_slice(&whole),
        Err(body) => serde_json::from_reader(std::io::BufReader::with_capacity(
            64 * 1024,
            body.into_reader(),
        )),
    }
    .map_err(|e| body_error(method, path, &e, &start))
}

/// An answer of `method` `path` that does not decode, with the start of its body (`start`).
fn body_error(method: Method, path: &str, e: &serde_json::Error, start: &[u8]) -> RapiError {
    RapiError::Decode {
        method: method.to_string(),
        path: path.to_owned(),
        message: format!("{e} in {}", truncate(&String::from_utf8_lossy(start))),
    }
}

impl From<RapiError> for GanetiError {
    fn from(e: RapiError) -> Self {
        match e {
            RapiError::Http {
                status: 401 | 403, ..
            } => Self::Unauthorized(e.to_string()),
            RapiError::Http { status: 404, .. } | RapiError::JobNotFound(_) => {
                Self::NotFound(e.to_string())
            }
            RapiError::Http { status, .. } if status >= 500 => Self::Server {
                status,
                message: e.to_string(),
            },
            RapiError::Http { status, .. } => Self::Rejected {
                status,
                message: e.to_string(),
            },
            RapiError::Config(_) => Self::Rejected {
                status: 400,
                message: e.to_string(),
            },
            RapiError::Decode { .. } => Self::Decode(e.to_string()),
            RapiError::Tls(_)
            | RapiError::Credentials { .. }
            | RapiError::Transport { .. }
            | RapiError::Timeout { .. }
            | RapiError::JobWaitTimeout { .. } => Self::Transport(e.to_string()),
        }
    }
}

impl Ganeti for RapiClient {
    fn cluster_info(&self) -> GanetiFuture<'_, ganeti::ClusterInfo> {
        Box::pin(async move { Ok(RapiClient::cluster_info(self).await?.into()) })
    }

    fn nodes(&self) -> GanetiFuture<'_, Vec<ganeti::Node>> {
        Box::pin(async move { Ok(converted(RapiClient::nodes(self).await?)) })
    }

    fn instances(&self) -> GanetiFuture<'_, Vec<ganeti::Instance>> {
        Box::pin(async move { Ok(converted(RapiClient::instances(self).await?)) })
    }

    fn submit<'a>(&'a self, op: &'a Op, reason: &'a Reason) -> GanetiFuture<'a, JobId> {
        Box::pin(async move { Ok(RapiClient::submit(self, op, reason).await?) })
    }

    fn groups(&self) -> GanetiFuture<'_, Vec<ganeti::Group>> {
        Box::pin(async move { Ok(converted(RapiClient::groups(self).await?)) })
    }

    fn tags<'a>(&'a self, target: &'a TagTarget) -> GanetiFuture<'a, Vec<String>> {
        Box::pin(async move { Ok(RapiClient::tags(self, target).await?) })
    }

    fn job(&self, id: JobId) -> GanetiFuture<'_, ganeti::Job> {
        Box::pin(async move { Ok(RapiClient::job(self, id).await?.into()) })
    }

    fn jobs(&self) -> GanetiFuture<'_, Vec<ganeti::JobSummary>> {
        Box::pin(async move { Ok(converted(RapiClient::jobs(self).await?)) })
    }

    fn jobs_among<'a>(
        &'a self,
        ids: &'a BTreeSet<JobId>,
    ) -> GanetiFuture<'a, Vec<ganeti::JobSummary>> {
        Box::pin(async move { Ok(converted(RapiClient::jobs_among(self, ids).await?)) })
    }

    fn cancel_job(&self, id: JobId) -> GanetiFuture<'_, ganeti::JobCancel> {
        Box::pin(async move { Ok(RapiClient::cancel_job(self, id).await?) })
    }

    fn wait_job_change(
        &self,
        id: JobId,
        previous: Option<JobStatus>,
    ) -> GanetiFuture<'_, Option<JobStatus>> {
        Box::pin(async move { Ok(RapiClient::wait_for_job_change(self, id, previous).await?) })
    }
}

/// RAPI's answer to a job cancel, `[bool, str]`.
fn decode_job_cancel(answer: &Value) -> Option<ganeti::JobCancel> {
    match answer.as_array().map(Vec::as_slice) {
        Some([Value::Bool(canceled), Value::String(message)]) => Some(ganeti::JobCancel {
            canceled: *canceled,
            message: message.clone(),
        }),
        _ => None,
    }
}

/// The jobs of a job query's answer (`PUT /2/query/job`), as [`RapiClient::jobs_queried`]
/// reads them: a row without its id or status is left out. Pure.
pub fn job_query_jobs(answer: &[u8]) -> Result<Vec<RapiJob>, RapiError> {
    let path = "/2/query/job";
    let answer: QueryAnswer =
        serde_json::from_slice(answer).map_err(|e| decode_error("PUT", path, &e))?;
    answer.jobs(path)
}

/// The jobs of a bulk job list (`GET /2/jobs?bulk=1`), those among `among` when given, as
/// [`RapiClient::jobs_among`] reads them when the job query is refused. Pure.
pub fn job_list_jobs(
    answer: &[u8],
    among: Option<&BTreeSet<JobId>>,
) -> Result<Vec<RapiJob>, RapiError> {
    let mut body = RapiBody::default();
    body.push(bytes::Bytes::copy_from_slice(answer));
    jobs_of("/2/jobs", body, CONTIGUOUS_LIMIT, among)
}

/// Most job ids one job query names (its filter grows with each).
pub const QUERY_JOBS_AT_ONCE: usize = 512;

/// The fields a job query asks for: what [`ganeti::JobSummary`] needs (the reason trails are
/// in `ops`).
const JOB_QUERY_FIELDS: [&str; 3] = ["id", "status", "ops"];

/// The body of `PUT /2/query/job`.
#[derive(serde::Serialize)]
struct JobQuery<'a> {
    fields: &'a [&'a str],
    qfilter: IdsFilter<'a>,
}

/// Ganeti's query filter naming these job ids: `["|", ["=", "id", 1], ["=", "id", 2], …]`.
struct IdsFilter<'a>(&'a [JobId]);

impl serde::Serialize for IdsFilter<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeSeq as _;
        let mut seq = serializer.serialize_seq(Some(self.0.len() + 1))?;
        seq.serialize_element("|")?;
        for id in self.0 {
            seq.serialize_element(&("=", "id", id))?;
        }
        seq.end()
    }
}

/// The answer to a query (`/2/query/<resource>`): the fields' definitions, then one row per
/// item, each a `[result status, value]` pair per field in the fields' order.
#[derive(serde::Deserialize)]
struct QueryAnswer {
    fields: Vec<QueryField>,
    data: Vec<Vec<QueryCell>>,
}

/// One field's definition (only its name is read).
#[derive(serde::Deserialize)]
struct QueryField {
    name: String,
}

/// One value: Ganeti's result status (0, normal, is the only one with a value) and the value.
#[derive(serde::Deserialize)]
struct QueryCell(u8, Box<serde_json::value::RawValue>);

/// An opcode as a job query's poll reads it: its id and reason trail, its other parameters
/// passed over unread (a drain chained after many jobs lists each of them).
#[derive(serde::Deserialize)]
struct QueriedOp {
    #[serde(rename = "OP_ID")]
    op_id: String,
    #[serde(default)]
    reason: Vec<WireReasonEntry>,
    #[serde(default)]
    comment: Option<String>,
}

impl QueriedOp {
    fn into_op(self) -> RapiOpCode {
        RapiOpCode {
            op_id: self.op_id,
            reason: self.reason,
            comment: self.comment,
            params: serde_json::Map::new(),
        }
    }
}

/// The result status of a value that is there.
const RS_NORMAL: u8 = 0;

impl QueryAnswer {
    /// Each row as a job (`id`, `status`, `ops`); a row whose id or status is not there is
    /// left out; a value that is there but does not decode is an error.
    fn jobs(&self, path: &str) -> Result<Vec<RapiJob>, RapiError> {
        let column = |name: &str| self.fields.iter().position(|f| f.name == name);
        let (Some(id_at), Some(status_at)) = (column("id"), column("status")) else {
            return Err(RapiError::Decode {
                method: "PUT".to_owned(),
                path: path.to_owned(),
                message: "the answer has no id or status field".to_owned(),
            });
        };
        let ops_at = column("ops");
        let mut jobs = Vec::with_capacity(self.data.len());
        for row in &self.data {
            let normal = |at: usize| row.get(at).filter(|cell| cell.0 == RS_NORMAL);
            let (Some(id), Some(status)) = (normal(id_at), normal(status_at)) else {
                continue;
            };
            let id: JobId =
                serde_json::from_str(id.1.get()).map_err(|e| decode_error("PUT", path, &e))?;
            let status =
                serde_json::from_str(status.1.get()).map_err(|e| decode_error("PUT", path, &e))?;
            let ops = match ops_at.and_then(normal) {
                Some(ops) => serde_json::from_str::<Vec<QueriedOp>>(ops.1.get())
                    .map_err(|e| decode_error("PUT", path, &e))?
                    .into_iter()
                    .map(QueriedOp::into_op)
                    .collect(),
                None => Vec::new(),
            };
            jobs.push(RapiJob {
                id,
                status,
                summary: Vec::new(),
                ops,
                opstatus: Vec::new(),
                opresult: Vec::new(),
                received_ts: None,
                start_ts: None,
                end_ts: None,
            });
        }
        Ok(jobs)
    }
}

/// Converts RAPI's records to the trait's types.
/// `records` converted. The conversion reuses the records' buffer, sized for RAPI's larger
/// records (`RapiNode` is half as large again as `Node`): it is shrunk to the converted ones,
/// ~1 MB less for 10 000 nodes.
fn converted<R, T: From<R>>(records: Vec<R>) -> Vec<T> {
    let mut converted: Vec<T> = records.into_iter().map(Into::into).collect();
    converted.shrink_to_fit();
    converted
}

fn http_error(method: &str, path: &str, status: u16, body: &[u8]) -> RapiError {
    let message = match serde_json::from_slice::<RapiErrorBody>(body) {
        Ok(parsed) if parsed.explain.is_empty() => parsed.message,
        Ok(parsed) => format!("{} ({})", parsed.message, parsed.explain),
        Err(_) => truncate(&String::from_utf8_lossy(body)),
    };
    RapiError::Http {
        method: method.to_owned(),
        path: path.to_owned(),
        status,
        message,
    }
}

/// Whether a job of the bulk list comes back archived (its `status` null or absent).
fn archived(text: &str) -> bool {
    #[derive(serde::Deserialize)]
    struct Probe {
        #[serde(default)]
        status: Option<serde::de::IgnoredAny>,
    }
    serde_json::from_str::<Probe>(text).is_ok_and(|probe| probe.status.is_none())
}

fn decode_error(method: &str, path: &str, e: &serde_json::Error) -> RapiError {
    RapiError::Decode {
        method: method.to_owned(),
        path: path.to_owned(),
        message: e.to_string(),
    }
}

#[cfg(test)]
#[allow(
    clippy::disallowed_methods,
    reason = "the tests exercise the client's writes themselves"
)]
mod tests {
    use super::*;

    /// A bulk job list decodes job by job: an archived job (null fields) is left out, a job
    /// that is neither is an error naming the path.
    #[test]
    fn a_job_list_leaves_out_archived_jobs_and_refuses_garbage() {
        let job = r#"{"id": 5, "status": "success", "summary": ["NODE_SET_PARAMS(n1)"], "ops": [], "opstatus": [], "received_ts": null, "start_ts": null, "end_ts": null}"#;
        let archived = r#"{"id": 6, "status": null, "summary": null, "ops": null}"#;
        let raw = |text: &str| serde_json::value::RawValue::from_string(text.to_owned()).unwrap();
        let jobs = job_list("/2/jobs", &[raw(job), raw(archived)], None).unwrap();
        assert_eq!(jobs.iter().map(|j| j.id).collect::<Vec<_>>(), [5]);
        let error = job_list(
            "/2/jobs",
            &[raw(job), raw(r#"{"id": 7, "status": 3}"#)],
            None,
        )
        .unwrap_err();
        assert!(error.to_string().contains("/2/jobs"), "{error}");
        assert!(job_list("/2/jobs", &[raw("[1, 2]")], None).is_err());
    }

    /// A job query's answer, as a real Ganeti 3.0.2 gave it (job 3's opcode cut to the fields
    /// read, job 99999 unknown): the known job with its status and reason trail; the unknown
    /// one (its status not available) left out.
    #[test]
    fn a_job_query_answer_gives_the_jobs_it_has() {
        let answer: QueryAnswer = serde_json::from_str(SAMPLE_JOB_QUERY).unwrap();
        let jobs = answer.jobs("/2/query/job").unwrap();
        assert_eq!(jobs.len(), 1);
        assert_eq!((jobs[0].id, jobs[0].status), (3, JobStatus::Success));
        assert_eq!(
            jobs[0].reasons().first().map(|r| r.source.as_str()),
            Some("gnt:client:gnt-node")
        );
    }

    /// The columns are found by their names, in any order; an answer without `id` or `status`,
    /// or with a value there that does not decode, is an error naming the request; a row
    /// without `ops` gives a job without opcodes.
    #[test]
    fn a_job_query_answer_is_read_by_its_field_names() {
        let answer = |fields: &str, rows: &str| -> QueryAnswer {
            let fields: Vec<String> = fields
                .split(',')
                .map(|name| format!(r#"{{"name": "{name}"}}"#))
                .collect();
            serde_json::from_str(&format!(
                r#"{{"fields": [{}], "data": {rows}}}"#,
                fields.join(",")
            ))
            .unwrap()
        };
        let jobs = answer("status,id", r#"[[[0, "running"], [0, 7]]]"#)
            .jobs("/2/query/job")
            .unwrap();
        assert_eq!(
            (jobs[0].id, jobs[0].status, jobs[0].ops.len()),
            (7, JobStatus::Running, 0)
        );
        for (fields, rows) in [
            ("id,ops", r#"[[[0, 7], [0, []]]]"#),
            ("id,status", r#"[[[0, "seven"], [0, "running"]]]"#),
            ("id,status", r#"[[[0, 7], [0, "sleeping"]]]"#),
            (
                "id,status,ops",
                r#"[[[0, 7], [0, "running"], [0, "not opcodes"]]]"#,
            ),
        ] {
            let error = answer(fields, rows).jobs("/2/query/job").unwrap_err();
            assert!(
                error.to_string().contains("/2/query/job"),
                "{fields}: {error}"
            );
        }
        // A row whose id or status is not there (any status but 0) is left out.
        let jobs = answer(
            "id,status",
            r#"[[[3, null], [0, "running"]], [[0, 8], [2, null]], [[0, 9], [0, "queued"]]]"#,
        )
        .jobs("/2/query/job")
        .unwrap();
        assert_eq!(jobs.iter().map(|j| j.id).collect::<Vec<_>>(), [9]);
    }

    /// The filter names every id asked for, as Ganeti reads it.
    #[test]
    fn a_job_query_names_its_ids_in_its_filter() {
        let query = JobQuery {
            fields: &JOB_QUERY_FIELDS,
            qfilter: IdsFilter(&[4, 9]),
        };
        assert_eq!(
            serde_json::to_string(&query).unwrap(),
            r#"{"fields":["id","status","ops"],"qfilter":["|",["=","id",4],["=","id",9]]}"#
        );
    }

    const SAMPLE_JOB_QUERY: &str = r#"{"data": [[[0, 3], [0, "success"], [0, [{"OP_ID": "OP_NODE_ADD", "comment": null, "debug_level": 0, "depends": null, "node_name": "node2.nodecare.test", "priority": 0, "reason": [["gnt:client:gnt-node", "add", 1795859770790800896], ["gnt:opcode:node_add", "job=3;index=0", 1795859770792286000]]}]]], [[0, 99999], [3, null], [3, null]]], "fields": [{"doc": "Job ID", "kind": "number", "name": "id", "title": "ID"}, {"doc": "Job status", "kind": "text", "name": "status", "title": "Status"}, {"doc": "List of all opcodes", "kind": "other", "name": "ops", "title": "OpCodes"}]}"#;

    /// Among a list, only the jobs asked for are given, decoded whole; the others' texts are
    /// passed over after their id (here, one whose opcodes would not decode); a job whose id
    /// does not decode is an error naming the request.
    #[test]
    fn the_jobs_among_a_list_are_those_asked_for() {
        let job = |id: u64| {
            format!(
                r#"{{"id": {id}, "status": "running", "summary": [], "ops": [], "opstatus": [], "received_ts": null, "start_ts": null, "end_ts": null}}"#
            )
        };
        let list = format!(
            r#"[{}, {{"id": 6, "status": "success", "ops": "not opcodes"}}, {}, {}]"#,
            job(5),
            job(7),
            job(8)
        );
        let body = || {
            let mut body = RapiBody::default();
            body.push(bytes::Bytes::copy_from_slice(list.as_bytes()));
            body
        };
        let among = BTreeSet::from([5, 8, 9]);
        let jobs = jobs_of("/2/jobs", body(), usize::MAX, Some(&among)).unwrap();
        assert_eq!(jobs.iter().map(|j| j.id).collect::<Vec<_>>(), [5, 8]);
        assert!(
            jobs_of("/2/jobs", body(), usize::MAX, None).is_err(),
            "the whole list decodes every job"
        );
        let mut bad = RapiBody::default();
        bad.push(bytes::Bytes::from_static(br#"[{"id": "x"}]"#));
        let error = jobs_of("/2/jobs", bad, usize::MAX, Some(&among)).unwrap_err();
        assert!(error.to_string().contains("GET /2/jobs"), "{error}");
    }

    /// An answer decodes the same from one buffer and as it is read (several chunks over the
    /// limit), and garbage is an error naming the request either way.
    #[test]
    fn an_answer_decodes_the_same_whole_and_chunk_by_chunk() {
        let job = r#"{"id": 5, "status": "success", "summary": ["NODE_SET_PARAMS(n1)"], "ops": [], "opstatus": [], "received_ts": null, "start_ts": null, "end_ts": null}"#;
        let list = format!(r#"[{job}, {{"id": 6, "status": null, "summary": null, "ops": null}}]"#);
        let chunked = |text: &str| {
            let mut body = RapiBody::default();
            for piece in text.as_bytes().chunks(7) {
                body.push(bytes::Bytes::copy_from_slice(piece));
            }
            body
        };
        for limit in [0, usize::MAX] {
            let jobs = jobs_of("/2/jobs", chunked(&list), limit, None).unwrap();
            assert_eq!(
                jobs.iter().map(|j| j.id).collect::<Vec<_>>(),
                [5],
                "limit {limit}"
            );
            let error = jobs_of("/2/jobs", chunked("[{\"id\": 7,"), limit, None).unwrap_err();
            assert!(error.to_string().contains("GET /2/jobs"), "{error}");
            let numbers: Vec<u32> =
                decoded(Method::Get, "/2/x", chunked("[1, 22, 333, 4444]"), limit).unwrap();
            assert_eq!(numbers, [1, 22, 333, 4444], "limit {limit}");
            let error = decoded::<Vec<u32>>(Method::Get, "/2/x", chunked("[1, 22, \"a\"]"), limit)
                .unwrap_err();
            assert!(error.to_string().contains("GET /2/x"), "{error}");
        }
    }

    /// The nodes of `GET /2/nodes?bulk=1` keep no room sized for RAPI's larger records.
    #[test]
    fn converted_nodes_hold_no_spare_room() {
        let record: RapiNode = serde_json::from_value(serde_json::json!({
            "name": "n1", "uuid": "u1", "role": "R", "group.uuid": "g1", "pip": "10.0.0.1",
        }))
        .unwrap();
        assert!(std::mem::size_of::<RapiNode>() > std::mem::size_of::<ganeti::Node>());
        let nodes: Vec<ganeti::Node> = converted(vec![record; 1000]);
        assert_eq!(nodes.len(), 1000);
        assert_eq!(nodes.capacity(), 1000);
        assert_eq!(nodes[999].primary_ip, "10.0.0.1");
    }

    /// Records every request and answers job id 1.
    #[derive(Debug, Default)]
    struct Recorder(std::sync::Mutex<Vec<RapiRequest>>);

    impl Transport for Recorder {
        fn send<'a>(
            &'a self,
            request: &'a RapiRequest,
            _timeout: Duration,
        ) -> super::super::transport::TransportFuture<'a> {
            if let Ok(mut seen) = self.0.lock() {
                seen.push(request.clone());
            }
            Box::pin(async {
                Ok(super::super::transport::RapiResponse {
                    status: 200,
                    body: b"1".to_vec().into(),
                })
            })
        }
    }

    /// What the client submits is exactly [`rapi_request`]'s request, with the client's reason
    /// source; a request that cannot be written is refused before anything is sent.
    #[tokio::test]
    async fn every_write_sends_its_op_request() {
        use crate::{EvacuateMode, ReplaceDisksMode, TagTarget};
        let recorder = Arc::new(Recorder::default());
        let client = RapiClient::with_transport(recorder.clone(), "rec://", Duration::from_secs(1))
            .with_reason_source("site:repair")
            .unwrap_or_else(|e| panic!("{e}"));
        let ops = vec![
            Op::drain("node1"),
            Op::undrain("node1"),
            Op::offline("node1"),
            Op::online("node1"),
            Op::ShutdownInstance {
                instance: "inst1".into(),
            },
            Op::MigrateInstance {
                instance: "inst1".into(),
                target: None,
            },
            Op::MigrateInstance {
                instance: "inst1".into(),
                target: Some("node2".into()),
            },
            Op::FailoverInstance {
                instance: "inst1".into(),
                target: None,
            },
            Op::FailoverInstance {
                instance: "inst1".into(),
                target: Some("node2".into()),
            },
            Op::ReplaceDisks {
                instance: "inst1".into(),
                mode: ReplaceDisksMode::ReplaceNewSecondary {
                    remote_node: Some("node3".into()),
                    iallocator: None,
                },
            },
            Op::ReplaceDisks {
                instance: "inst1".into(),
                mode: ReplaceDisksMode::ReplaceNewSecondary {
                    remote_node: None,
                    iallocator: None,
                },
            },
            Op::ReplaceDisks {
                instance: "inst1".into(),
                mode: ReplaceDisksMode::ReplaceAuto,
            },
            Op::EvacuateNode {
                node: "node1".into(),
                mode: EvacuateMode::SecondaryOnly,
                iallocator: None,
            },
            Op::EvacuateNode {
                node: "node1".into(),
                mode: EvacuateMode::PrimaryOnly,
                iallocator: Some("x".into()),
            },
            Op::add_node_tags("node1", vec!["a".into(), "b".into()]),
            Op::RemoveTags {
                target: TagTarget::Cluster,
                tags: vec!["a".into()],
            },
            Op::AddTags {
                target: TagTarget::Group("g".into()),
                tags: vec!["a".into()],
            },
            Op::RecreateInstanceDisks {
                instance: "inst1".into(),
                iallocator: "hail".into(),
            },
            Op::ReinstallInstance {
                instance: "inst1".into(),
                start: true,
            },
            Op::ReinstallInstance {
                instance: "inst1".into(),
                start: false,
            },
        ];
        let plain = Reason::new(uuid::Uuid::nil(), "k", "why\tnot");
        let chained = plain.clone().after([3, 9]);
        for reason in [&plain, &chained] {
            for op in &ops {
                let g: &dyn Ganeti = &client;
                let sent = g.submit(op, reason).await;
                let expected = rapi_request(op, reason, "site:repair");
                let last = recorder.0.lock().ok().and_then(|mut seen| seen.pop());
                match expected {
                    Ok(request) => {
                        assert_eq!(sent, Ok(1), "{op:?}");
                        assert_eq!(last, Some(request), "{op:?} {reason:?}");
                    }
                    Err(e) => {
                        assert_eq!(last, None, "{op:?}");
                        let err = sent.err().map(|e| e.to_string()).unwrap_or_default();
                        assert!(err.contains(&e.0), "{err} / {e}");
                    }
                }
            }
        }
    }

    #[test]
    fn job_cancel_answers_decode() {
        assert_eq!(
            decode_job_cancel(&json!([true, "Job 5 canceled"])),
            Some(ganeti::JobCancel {
                canceled: true,
                message: "Job 5 canceled".into()
            })
        );
        assert_eq!(
            decode_job_cancel(&json!([false, "Job 5 is no longer waiting in the queue"]))
                .map(|c| c.canceled),
            Some(false)
        );
        assert_eq!(decode_job_cancel(&json!(5)), None);
        assert_eq!(decode_job_cancel(&json!([true])), None);
        assert_eq!(decode_job_cancel(&json!(["true", "x"])), None);
    }

    #[test]
    fn credentials_formats() {
        let c = Credentials::parse("admin:se:cret\n").unwrap();
        assert_eq!((c.user.as_str(), c.password.as_str()), ("admin", "se:cret"));
        let c = Credentials::parse("# users\nreader pw1\nadmin {CLEARTEXT}pw2 write\n").unwrap();
        assert_eq!((c.user.as_str(), c.password.as_str()), ("admin", "pw2"));
        let c = Credentials::parse("only pw").unwrap();
        assert_eq!((c.user.as_str(), c.password.as_str()), ("only", "pw"));
        assert!(
            Credentials::parse("admin {HA1}abcdef write")
                .unwrap_err()
                .contains("HA1")
        );
        assert!(Credentials::parse("").is_err());
        assert!(Credentials::parse("# nothing\n").is_err());
        assert!(Credentials::parse("nocolon").is_err());
        assert!(Credentials::parse(":pw").is_err());
        assert!(Credentials::parse("user:").is_err());
        assert!(Credentials::parse("a b write\nlonely").is_err());
        assert!(!format!("{:?}", Credentials::parse("a:secret").unwrap()).contains("secret"));
    }

    #[test]
    fn config_mismatches_are_refused() {
        let err = RapiClient::new(RapiConfig::new(
            "https://localhost:5080",
            ServerTrust::PlainHttp,
        ))
        .unwrap_err();
        assert!(matches!(err, RapiError::Config(_)), "{err}");
        let err = RapiClient::new(RapiConfig::new("ftp://x", ServerTrust::PlainHttp)).unwrap_err();
        assert!(matches!(err, RapiError::Config(_)), "{err}");
        let err = RapiClient::new(RapiConfig::new(
            "http://localhost:5080",
            ServerTrust::PinnedCertPem(b"x".to_vec()),
        ))
        .unwrap_err();
        assert!(matches!(err, RapiError::Config(_)), "{err}");
        let err = RapiClient::new(RapiConfig::new(
            "https://localhost:5080",
            ServerTrust::PinnedCertPem(Vec::new()),
        ))
        .unwrap_err();
        assert!(matches!(err, RapiError::Tls(_)), "{err}");
    }

    mod props {
        use super::super::*;
        use proptest::prelude::*;
        proptest! {
            #[test]
            fn credentials_parse_never_panics(text in "(?s).{0,200}") {
                let _outcome = Credentials::parse(&text).is_ok();
            }
        }
    }
}
