//! RAPI v2 request routing for the simulated cluster, free of IO: a request (method, path,
//! query, JSON body) becomes an HTTP status and a JSON answer with Ganeti 3.0.2's shapes.

use serde_json::{Value, json};

use super::model::{SimCluster, SimOp, TagKind};
use nodecare_ganeti::JobStatus;

/// A decoded request.
#[derive(Debug, Clone, PartialEq)]
pub struct SimRequest {
    pub method: String,
    pub path: String,
    pub query: Vec<(String, String)>,
    /// `None` for an empty body.
    pub body: Option<Value>,
}

impl SimRequest {
    fn query_value(&self, name: &str) -> Option<&str> {
        self.query
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
    fn query_all(&self, name: &str) -> Vec<String> {
        self.query
            .iter()
            .filter(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
            .collect()
    }
    fn bulk(&self) -> bool {
        self.query_value("bulk").is_some_and(|v| v == "1")
    }
    fn body_field(&self, name: &str) -> Option<&Value> {
        self.body
            .as_ref()
            .and_then(|b| b.get(name))
            .filter(|v| !v.is_null())
    }
    fn body_str(&self, name: &str) -> Option<String> {
        self.body_field(name)
            .and_then(Value::as_str)
            .map(str::to_owned)
    }
}

/// What the route asks the server to do.
#[derive(Debug, Clone, PartialEq)]
pub enum SimAnswer {
    /// Answer now.
    Now(u16, Value),
    /// Answer now with JSON already encoded (the bulk instance list).
    Encoded(u16, Vec<u8>),
    /// `/2/jobs/<id>/wait`: wait until the job's status differs from `previous` (or up to
    /// RAPI's wait period), then answer.
    WaitJob { id: u64, previous: Option<String> },
}

/// An answer's body: a JSON value, or JSON already encoded.
#[derive(Debug, Clone, PartialEq)]
pub enum SimBody {
    /// A value, encoded when sent.
    Value(Value),
    /// Encoded JSON.
    Encoded(Vec<u8>),
}

impl SimBody {
    /// The body's bytes.
    pub fn into_bytes(self) -> Vec<u8> {
        match self {
            Self::Value(value) => serde_json::to_vec(&value).unwrap_or_else(|_| b"null".to_vec()),
            Self::Encoded(bytes) => bytes,
        }
    }

    /// The body as a JSON value (`null` for encoded bytes that are not JSON).
    pub fn into_value(self) -> Value {
        match self {
            Self::Value(value) => value,
            Self::Encoded(bytes) => serde_json::from_slice(&bytes).unwrap_or(Value::Null),
        }
    }
}

impl From<Value> for SimBody {
    fn from(value: Value) -> Self {
        Self::Value(value)
    }
}

pub fn error(code: u16, message: &str, explain: &str) -> Value {
    json!({"code": code, "message": message, "explain": explain})
}

fn not_found() -> SimAnswer {
    SimAnswer::Now(
        404,
        error(404, "Not Found", "Nothing matches the given URI"),
    )
}

/// The job fields a job query knows (name, kind, title, doc), as Ganeti 3.0.2 defines them.
const JOB_QUERY_FIELDS: [(&str, &str, &str, &str); 9] = [
    ("id", "number", "ID", "Job ID"),
    ("status", "text", "Status", "Job status"),
    ("ops", "other", "OpCodes", "List of all opcodes"),
    (
        "summary",
        "other",
        "Summary",
        "List of per-opcode summaries",
    ),
    (
        "opstatus",
        "other",
        "OpCode_status",
        "List of opcode status",
    ),
    (
        "opresult",
        "other",
        "OpCode_result",
        "List of opcode output",
    ),
    (
        "received_ts",
        "other",
        "Received",
        "Timestamp of when job was received (tuple containing seconds and microseconds)",
    ),
    (
        "start_ts",
        "other",
        "Start",
        "Timestamp of job start (tuple containing seconds and microseconds)",
    ),
    (
        "end_ts",
        "other",
        "End",
        "Timestamp of job end (tuple containing seconds and microseconds)",
    ),
];

/// The job ids a job query's filter names: every job without one, `["=", "id", N]`, or an
/// `|` of those (the filters nodecare sends); `Err` for any other filter.
fn filtered_job_ids(
    filter: Option<&Value>,
) -> Result<Option<std::collections::BTreeSet<u64>>, String> {
    let one = |f: &Value| -> Option<u64> {
        match f.as_array().map(Vec::as_slice) {
            Some([op, field, id]) if op == "=" && field == "id" => id.as_u64(),
            _ => None,
        }
    };
    let Some(filter) = filter else {
        return Ok(None);
    };
    if let Some(id) = one(filter) {
        return Ok(Some(std::collections::BTreeSet::from([id])));
    }
    match filter.as_array().map(Vec::as_slice) {
        Some([op, rest @ ..]) if op == "|" => rest
            .iter()
            .map(|f| one(f).ok_or_else(|| format!("The simulation filters jobs by id only: {f}")))
            .collect::<Result<_, _>>()
            .map(Some),
        _ => Err(format!("The simulation filters jobs by id only: {filter}")),
    }
}

/// `PUT /2/query/job` (`{"fields": [...], "qfilter": ...}`): one row per job, a `[status,
/// value]` pair per field; a job named by the filter that the queue does not have gives its id
/// and "not available" (3) elsewhere, an unknown field "unknown" (1), as Ganeti answers.
fn query_jobs(cluster: &mut SimCluster, req: &SimRequest) -> SimAnswer {
    let Some(fields) = req.body_field("fields").and_then(Value::as_array) else {
        return bad_request("The 'fields' parameter should be a list");
    };
    let Some(fields) = fields
        .iter()
        .map(Value::as_str)
        .collect::<Option<Vec<&str>>>()
    else {
        return bad_request("The 'fields' parameter should be a list of strings");
    };
    let filter = req
        .body_field("qfilter")
        .or_else(|| req.body_field("filter"));
    let ids: Vec<u64> = match filtered_job_ids(filter) {
        Ok(Some(ids)) => ids.into_iter().collect(),
        // The live queue; a filter naming jobs loads archived ones too.
        Ok(None) => cluster
            .jobs
            .keys()
            .filter(|id| !cluster.archived.contains(id))
            .copied()
            .collect(),
        Err(message) => return bad_request(&message),
    };
    let details = fields.iter().any(|f| matches!(*f, "opresult" | "oplog"));
    let definitions: Vec<Value> = fields
        .iter()
        .map(
            |field| match JOB_QUERY_FIELDS.iter().find(|(name, ..)| name == field) {
                Some((name, kind, title, doc)) => {
                    json!({"name": name, "kind": kind, "title": title, "doc": doc})
                }
                None => json!({"name": field, "kind": "unknown", "title": field,
                "doc": format!("Unknown field '{field}'")}),
            },
        )
        .collect();
    // Encoded row by row, each job's opcodes kept encoded while the job does not change.
    let mut out = b"{\"fields\":".to_vec();
    out.extend_from_slice(&serde_json::to_vec(&definitions).unwrap_or_else(|_| b"[]".to_vec()));
    out.extend_from_slice(b",\"data\":[");
    for (row, id) in ids.iter().enumerate() {
        if row > 0 {
            out.push(b',');
        }
        out.push(b'[');
        for (column, field) in fields.iter().enumerate() {
            if column > 0 {
                out.push(b',');
            }
            if !JOB_QUERY_FIELDS.iter().any(|(name, ..)| name == field) {
                out.extend_from_slice(b"[1,null]");
                continue;
            }
            match cluster.job_field_bytes(*id, field, details) {
                Some(value) => {
                    out.extend_from_slice(b"[0,");
                    out.extend_from_slice(&value);
                    out.push(b']');
                }
                None if *field == "id" => out.extend_from_slice(format!("[0,{id}]").as_bytes()),
                None => out.extend_from_slice(b"[3,null]"),
            }
        }
        out.push(b']');
    }
    out.extend_from_slice(b"]}");
    SimAnswer::Encoded(200, out)
}

fn bad_request(message: &str) -> SimAnswer {
    SimAnswer::Now(
        400,
        error(400, message, "Bad request syntax or unsupported method"),
    )
}

fn method_not_allowed() -> SimAnswer {
    SimAnswer::Now(
        501,
        error(
            501,
            "Method not implemented",
            "Server does not support this operation",
        ),
    )
}

/// Percent-decodes a query component (`+` is a space, as in form encoding).
pub fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes.get(i) {
            Some(b'+') => out.push(b' '),
            Some(b'%') => {
                let hex = bytes
                    .get(i + 1..i + 3)
                    .and_then(|h| std::str::from_utf8(h).ok());
                match hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                    Some(b) => {
                        out.push(b);
                        i += 2;
                    }
                    None => out.push(b'%'),
                }
            }
            Some(b) => out.push(*b),
            None => {}
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Splits `a=1&b=x%20y` into decoded pairs.
pub fn parse_query(query: &str) -> Vec<(String, String)> {
    query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|pair| match pair.split_once('=') {
            Some((k, v)) => (percent_decode(k), percent_decode(v)),
            None => (percent_decode(pair), String::new()),
        })
        .collect()
}

/// Decodes RAPI's `depends` body parameter, `[[job_id, [final_status, ...]], ...]`, which RAPI
/// adds to the parameters of every opcode resource whose body is a JSON object.
fn parse_depends(req: &SimRequest) -> Result<Vec<(u64, Vec<JobStatus>)>, String> {
    let Some(value) = req.body_field("depends") else {
        return Ok(Vec::new());
    };
    // Ganeti 3.0.2 names the opcode (`OP_TAGS_SET.depends`); the route does not know it yet.
    let invalid = || {
        "Invalid body parameters: (\"Parameter 'depends' fails validation\", 'wrong_input')"
            .to_owned()
    };
    let list = value.as_array().ok_or_else(invalid)?;
    list.iter()
        .map(|dep| {
            let [id, statuses] = dep.as_array().map(Vec::as_slice).ok_or_else(invalid)? else {
                return Err(invalid());
            };
            let id = id.as_u64().ok_or_else(invalid)?;
            let statuses = statuses
                .as_array()
                .ok_or_else(invalid)?
                .iter()
                .map(|s| {
                    s.as_str()
                        .and_then(JobStatus::from_name)
                        .filter(|s| s.is_final())
                        .ok_or_else(invalid)
                })
                .collect::<Result<Vec<_>, _>>()?;
            Ok((id, statuses))
        })
        .collect()
}

/// Routes one request against the cluster (already advanced to `now_ms`). A job the request
/// submits waits for the body's `depends`, as Ganeti's does.
pub fn route(cluster: &mut SimCluster, req: &SimRequest, now_ms: u64) -> SimAnswer {
    // RAPI builds the reason trail itself; a body `reason` is refused.
    if req.body_field("reason").is_some() {
        return bad_request("Can't overwrite static parameters {'reason'}");
    }
    let depends = match parse_depends(req) {
        Ok(depends) => depends,
        Err(message) => return bad_request(&message),
    };
    let first_new = cluster.next_job_id();
    let answer = route_request(cluster, req, now_ms);
    if !depends.is_empty() {
        for id in first_new..cluster.next_job_id() {
            cluster.set_depends(id, depends.clone());
        }
    }
    answer
}

fn route_request(cluster: &mut SimCluster, req: &SimRequest, now_ms: u64) -> SimAnswer {
    let parts: Vec<&str> = req
        .path
        .trim_matches('/')
        .split('/')
        .filter(|s| !s.is_empty())
        .collect();
    let reason = req.query_value("reason").map(str::to_owned);
    let reason = reason.as_deref();
    let method = req.method.as_str();
    let ok = |v: Value| SimAnswer::Now(200, v);
    match (method, parts.as_slice()) {
        ("GET", []) => ok(Value::Null),
        ("GET", ["version"]) => ok(json!(2)),
        ("GET", ["2", "info"]) => ok(cluster.info_json()),
        ("GET", ["2", "features"]) => ok(json!([
            "instance-create-reqv1",
            "node-evac-res1",
            "node-migrate-reqv1",
            "instance-reinstall-reqv1"
        ])),
        ("GET", ["2", "nodes"]) if req.bulk() => {
            SimAnswer::Encoded(200, cluster.nodes_json_bytes())
        }
        ("GET", ["2", "nodes"]) => {
            let nodes: Vec<Value> = cluster
                .node_order
                .iter()
                .filter_map(|n| cluster.nodes.get(n))
                .map(|n| json!({"id": n.name, "uri": format!("/2/nodes/{}", n.name)}))
                .collect();
            ok(Value::Array(nodes))
        }
        ("GET", ["2", "nodes", name]) => match cluster.nodes.get(*name) {
            Some(n) => ok(cluster.node_json(n)),
            None => not_found(),
        },
        (_, ["2", "nodes", name, rest @ ..]) if !cluster.nodes.contains_key(*name) => {
            let _ = rest;
            not_found()
        }
        ("GET", ["2", "nodes", name, "role"]) => {
            let role = match cluster
                .nodes
                .get(*name)
                .map(|n| cluster.node_json(n)["role"].clone())
            {
                Some(Value::String(r)) => match r.as_str() {
                    "M" => "master",
                    "C" => "master-candidate",
                    "D" => "drained",
                    "O" => "offline",
                    _ => "regular",
                },
                _ => return not_found(),
            };
            ok(json!(role))
        }
        ("PUT", ["2", "nodes", name, "role"]) => {
            let (drained, offline) = match req.body.as_ref().and_then(Value::as_str) {
                Some("drained") => (Some(true), None),
                Some("offline") => (None, Some(true)),
                Some("regular") => (Some(false), Some(false)),
                Some("master-candidate") => (None, None),
                Some(other) => return bad_request(&format!("Can't set '{other}' role")),
                None => return bad_request("Body contents must be a string"),
            };
            // RAPI reads `auto-promote` as an integer (`_checkIntVariable`).
            let auto_promote = match req.query_value("auto-promote").map(str::parse::<i64>) {
                None => false,
                Some(Ok(v)) => v != 0,
                Some(Err(_)) => {
                    return bad_request("Invalid value for 'auto-promote': not an integer");
                }
            };
            let op = SimOp::SetNodeParams {
                node: (*name).to_owned(),
                drained,
                offline,
                auto_promote,
            };
            ok(json!(cluster.submit(op, reason, "nodes_name_role", now_ms)))
        }
        ("POST", ["2", "nodes", name, "modify"]) => {
            let flag = |k: &str| req.body_field(k).and_then(Value::as_bool);
            let op = SimOp::SetNodeParams {
                node: (*name).to_owned(),
                drained: flag("drained"),
                offline: flag("offline"),
                auto_promote: flag("auto_promote").unwrap_or(false),
            };
            ok(json!(cluster.submit(
                op,
                reason,
                "nodes_name_modify",
                now_ms
            )))
        }
        ("POST", ["2", "nodes", name, "evacuate"]) => {
            let Some(mode) = req.body_str("mode") else {
                return bad_request("Missing 'mode'");
            };
            let op = SimOp::NodeEvacuate {
                node: (*name).to_owned(),
                mode,
            };
            ok(json!(cluster.submit(
                op,
                reason,
                "nodes_name_evacuate",
                now_ms
            )))
        }
        (_, ["2", "nodes", name, "tags"]) => tags(
            cluster,
            req,
            TagKind::Node,
            name,
            reason,
            now_ms,
            "nodes_name_tags",
        ),
        ("GET", ["2", "instances"]) if req.bulk() => {
            SimAnswer::Encoded(200, cluster.instances_json_bytes())
        }
        ("GET", ["2", "instances"]) => {
            let list: Vec<Value> = cluster
                .instances
                .values()
                .map(|i| json!({"id": i.name, "uri": format!("/2/instances/{}", i.name)}))
                .collect();
            ok(Value::Array(list))
        }
        ("GET", ["2", "instances", name]) => match cluster.instances.get(*name) {
            Some(i) => ok(cluster.instance_json(i)),
            None => not_found(),
        },
        (_, ["2", "instances", name, _rest @ ..]) if !cluster.instances.contains_key(*name) => {
            not_found()
        }
        ("PUT", ["2", "instances", name, "migrate"]) => {
            let op = SimOp::InstanceMigrate {
                instance: (*name).to_owned(),
                target: req.body_str("target_node"),
                mode: req.body_str("mode"),
            };
            ok(json!(cluster.submit(
                op,
                reason,
                "instances_name_migrate",
                now_ms
            )))
        }
        ("PUT", ["2", "instances", name, "failover"]) => {
            let op = SimOp::InstanceFailover {
                instance: (*name).to_owned(),
                target: req.body_str("target_node"),
            };
            ok(json!(cluster.submit(
                op,
                reason,
                "instances_name_failover",
                now_ms
            )))
        }
        ("PUT", ["2", "instances", name, "shutdown"]) => {
            let op = SimOp::InstanceShutdown {
                instance: (*name).to_owned(),
            };
            ok(json!(cluster.submit(
                op,
                reason,
                "instances_name_shutdown",
                now_ms
            )))
        }
        ("POST", ["2", "instances", name, "replace-disks"]) => {
            let Some(mode) = req.body_str("mode") else {
                return bad_request("Missing 'mode'");
            };
            let op = SimOp::ReplaceDisks {
                instance: (*name).to_owned(),
                mode,
                remote_node: req.body_str("remote_node"),
            };
            ok(json!(cluster.submit(
                op,
                reason,
                "instances_name_replace_disks",
                now_ms
            )))
        }
        ("POST", ["2", "instances", name, "recreate-disks"]) => {
            let op = SimOp::InstanceRecreateDisks {
                instance: (*name).to_owned(),
                iallocator: req.body_str("iallocator"),
            };
            ok(json!(cluster.submit(
                op,
                reason,
                "instances_name_recreate_disks",
                now_ms
            )))
        }
        ("POST", ["2", "instances", name, "reinstall"]) => {
            // As Ganeti 3.0.2: a body, or query parameters (the legacy interface), never both.
            let body = req.body.as_ref().filter(|b| !b.is_null());
            if body.is_some() && !req.query.is_empty() {
                return bad_request("Can't combine query and body parameters");
            }
            let start = match body {
                Some(_) => req
                    .body_field("start")
                    .and_then(Value::as_bool)
                    .unwrap_or(true),
                None => req.query_value("nostartup").is_none_or(|v| v == "0"),
            };
            let op = SimOp::InstanceReinstall {
                instance: (*name).to_owned(),
                start,
            };
            // Ganeti 3.0.2 builds this job itself and puts no `reason` into its trail.
            ok(json!(cluster.submit(
                op,
                None,
                "instances_name_reinstall",
                now_ms
            )))
        }
        (_, ["2", "instances", name, "tags"]) => tags(
            cluster,
            req,
            TagKind::Instance,
            name,
            reason,
            now_ms,
            "instances_name_tags",
        ),
        ("GET", ["2", "groups"]) => {
            if req.bulk() {
                ok(json!([cluster.group_json()]))
            } else {
                ok(json!([{"name": "default", "uri": "/2/groups/default"}]))
            }
        }
        ("GET", ["2", "groups", "default"]) => ok(cluster.group_json()),
        (_, ["2", "groups", "default", "tags"]) => tags(
            cluster,
            req,
            TagKind::Group,
            "default",
            reason,
            now_ms,
            "groups_name_tags",
        ),
        (_, ["2", "tags"]) => tags(cluster, req, TagKind::Cluster, "", reason, now_ms, "tags"),
        ("GET", ["2", "jobs"]) if req.bulk() => SimAnswer::Encoded(200, cluster.jobs_json_bytes()),
        ("GET", ["2", "jobs"]) => {
            let list: Vec<Value> = cluster
                .jobs
                .values()
                .filter(|j| !cluster.archived.contains(&j.id))
                .map(|j| json!({"id": j.id, "uri": format!("/2/jobs/{}", j.id)}))
                .collect();
            ok(Value::Array(list))
        }
        ("PUT", ["2", "query", "job"]) => query_jobs(cluster, req),
        ("GET", ["2", "jobs", id]) => {
            let job = id.parse::<u64>().ok().and_then(|id| cluster.jobs.get(&id));
            match job {
                Some(j) => ok(cluster.job_json(j, true)),
                // Ganeti answers 200 with every field null for an unknown job.
                None => ok(
                    json!({"id": id.parse::<u64>().ok(), "ops": null, "status": null, "summary": null,
                    "opstatus": null, "received_ts": null, "start_ts": null, "end_ts": null, "oplog": null, "opresult": null}),
                ),
            }
        }
        ("GET", ["2", "jobs", id, "wait"]) => {
            let Some(id) = id
                .parse::<u64>()
                .ok()
                .filter(|id| cluster.jobs.contains_key(id))
            else {
                return SimAnswer::Now(
                    500,
                    error(500, "Can't load job file", "Server got itself in trouble"),
                );
            };
            let Some(fields) = req.body_field("fields").and_then(Value::as_array) else {
                return bad_request("The 'fields' parameter should be a list");
            };
            if fields.iter().any(|f| f.as_str() != Some("status")) {
                return bad_request("The simulation only waits on the 'status' field");
            }
            let previous = req
                .body_field("previous_job_info")
                .and_then(Value::as_array)
                .and_then(|a| a.first())
                .and_then(Value::as_str)
                .map(str::to_owned);
            SimAnswer::WaitJob { id, previous }
        }
        ("DELETE", ["2", "jobs", id]) => {
            match id
                .parse::<u64>()
                .ok()
                .and_then(|id| cluster.cancel_job(id, now_ms))
            {
                Some((canceled, message)) => ok(json!([canceled, message])),
                // As for waiting on it: Ganeti cannot load the job's file.
                None => SimAnswer::Now(
                    500,
                    error(500, "Can't load job file", "Server got itself in trouble"),
                ),
            }
        }
        ("GET", _) => not_found(),
        ("PUT" | "POST" | "DELETE", ["2", ..]) => method_not_allowed(),
        _ => not_found(),
    }
}

fn tags(
    cluster: &mut SimCluster,
    req: &SimRequest,
    kind: TagKind,
    name: &str,
    reason: Option<&str>,
    now_ms: u64,
    resource: &str,
) -> SimAnswer {
    let current = match kind {
        TagKind::Cluster => Some(cluster.cluster_tags.clone()),
        TagKind::Node => cluster.nodes.get(name).map(|n| n.tags.clone()),
        TagKind::Instance => cluster.instances.get(name).map(|i| i.tags.clone()),
        TagKind::Group => Some(cluster.group_tags.clone()),
    };
    let Some(current) = current else {
        return not_found();
    };
    let tags = req.query_all("tag");
    let op = match req.method.as_str() {
        "GET" => return SimAnswer::Now(200, json!(current)),
        "PUT" => SimOp::TagsSet {
            kind,
            name: name.to_owned(),
            tags,
        },
        "DELETE" => SimOp::TagsDel {
            kind,
            name: name.to_owned(),
            tags,
        },
        _ => return method_not_allowed(),
    };
    SimAnswer::Now(200, json!(cluster.submit(op, reason, resource, now_ms)))
}

/// The answer to a job wait once the status is known: RAPI's `{"job_info": [status],
/// "log_entries": []}`, or `null` when nothing changed.
pub fn wait_answer(cluster: &SimCluster, id: u64, previous: Option<&str>) -> Option<Value> {
    let job = cluster.jobs.get(&id)?;
    let status = job.status.as_str();
    if previous == Some(status) && !job.status.is_final() {
        return None;
    }
    Some(json!({"job_info": [status], "log_entries": []}))
}

/// Whether a waiter may answer now.
pub fn wait_is_over(cluster: &SimCluster, id: u64, previous: Option<&str>) -> bool {
    cluster.jobs.get(&id).is_none_or(|j| {
        previous != Some(j.status.as_str())
            || matches!(
                j.status,
                JobStatus::Success | JobStatus::Error | JobStatus::Canceled
            )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::SimConfig;

    fn req(method: &str, path: &str, query: &str, body: Option<Value>) -> SimRequest {
        SimRequest {
            method: method.into(),
            path: path.into(),
            query: parse_query(query),
            body,
        }
    }

    #[test]
    fn query_decoding() {
        assert_eq!(percent_decode("a%20b+c%3D"), "a b c=");
        assert_eq!(percent_decode("%zz%"), "%zz%");
        assert_eq!(
            parse_query("tag=a&tag=b&bulk"),
            vec![
                ("tag".into(), "a".into()),
                ("tag".into(), "b".into()),
                ("bulk".into(), String::new())
            ]
        );
    }

    #[test]
    fn routes_answer_like_ganeti() {
        let mut c =
            SimCluster::new(SimConfig::from_spec(3, "inst1:diskless:2", "sim.test").unwrap())
                .unwrap();
        assert_eq!(
            route(&mut c, &req("GET", "/2/nodes/nosuch", "", None), 0),
            not_found()
        );
        let SimAnswer::Encoded(200, nodes) =
            route(&mut c, &req("GET", "/2/nodes", "bulk=1", None), 0)
        else {
            panic!()
        };
        let nodes: Value = serde_json::from_slice(&nodes).unwrap();
        assert_eq!(nodes.as_array().unwrap().len(), 3);
        assert_eq!(nodes[0]["role"], "M");
        let SimAnswer::Now(400, _) = route(
            &mut c,
            &req(
                "PUT",
                "/2/instances/inst1.sim.test/migrate",
                "",
                Some(json!({"reason": [["x","y",1]]})),
            ),
            0,
        ) else {
            panic!()
        };
        let SimAnswer::Now(200, id) = route(
            &mut c,
            &req(
                "PUT",
                "/2/nodes/node2.sim.test/tags",
                "tag=a&reason=why",
                None,
            ),
            0,
        ) else {
            panic!()
        };
        let id = id.as_u64().unwrap();
        let SimAnswer::Now(200, job) =
            route(&mut c, &req("GET", &format!("/2/jobs/{id}"), "", None), 0)
        else {
            panic!()
        };
        assert_eq!(job["ops"][0]["reason"][0], json!(["gnt:user", "why", 0]));
        let SimAnswer::Now(200, unknown) = route(&mut c, &req("GET", "/2/jobs/999", "", None), 0)
        else {
            panic!()
        };
        assert!(unknown["status"].is_null());
        let SimAnswer::Now(500, _) = route(
            &mut c,
            &req(
                "GET",
                "/2/jobs/999/wait",
                "",
                Some(json!({"fields": ["status"]})),
            ),
            0,
        ) else {
            panic!()
        };
        assert_eq!(
            route(
                &mut c,
                &req(
                    "GET",
                    &format!("/2/jobs/{id}/wait"),
                    "",
                    Some(json!({"fields": ["status"], "previous_job_info": ["queued"]}))
                ),
                0
            ),
            SimAnswer::WaitJob {
                id,
                previous: Some("queued".into())
            }
        );
    }
}
