//! Every write as its RAPI request, written once: [`rapi_request`] maps an [`Op`] and its
//! [`Reason`] to the method, path, query and JSON body Ganeti 3.0.2's RAPI expects. Pure and
//! always built; the RAPI client sends what it returns, and the simulated cluster answers the
//! same requests.

use std::fmt;

use serde_json::{Value, json};

use super::types::{MigrationMode, reason_query_value};
use crate::{JobId, Op, Reason, ReplaceDisksMode, TagTarget};

/// The allocator used when none is configured.
pub const DEFAULT_IALLOCATOR: &str = "hail";

/// The HTTP methods RAPI uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Method {
    Get,
    Put,
    Post,
    Delete,
}

impl Method {
    /// The method's name on the wire.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Get => "GET",
            Self::Put => "PUT",
            Self::Post => "POST",
            Self::Delete => "DELETE",
        }
    }
}

impl fmt::Display for Method {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One RAPI request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RapiRequest {
    pub method: Method,
    /// Absolute path, e.g. `/2/nodes/node1/evacuate`.
    pub path: String,
    /// Query parameters, in order (not yet percent-encoded).
    pub query: Vec<(String, String)>,
    /// JSON body, sent as `application/json`; `None` sends no body.
    pub body: Option<Value>,
}

impl RapiRequest {
    /// A request without query or body.
    pub fn new(method: Method, path: impl Into<String>) -> Self {
        Self {
            method,
            path: path.into(),
            query: Vec::new(),
            body: None,
        }
    }
}

/// Why an operation has no RAPI request (refused before anything is sent).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct InvalidRequest(pub String);

/// The request that submits `op` as a job. The reason travels in the `reason` query parameter
/// (`<reason_source> <reason text>`, [`reason_query_value`]), its dependencies in the body's
/// `depends` (`[[id, ["success"]], ...]`, which RAPI adds to every opcode resource's
/// parameters). Refused: a name that is not one URL path segment ([`segment`]), a tag
/// operation without tags, dependencies on a resource whose body cannot carry them.
pub fn rapi_request(
    op: &Op,
    reason: &Reason,
    reason_source: &str,
) -> Result<RapiRequest, InvalidRequest> {
    let mut query: Vec<(String, String)> = Vec::new();
    let (method, path, body) = match op {
        // The role resource's body is a bare string, which cannot carry `depends`: a chained
        // drain goes through the modify resource (and the role resource cannot clear just the
        // drained flag). `?force=1` on the role, as maintd forces it. Every drain asks Ganeti to
        // promote another master candidate in the node's place (`auto-promote` on the role,
        // `auto_promote` in the modify body): with the candidate pool full Ganeti refuses to
        // drain a candidate without it, and `force` does not bypass that.
        Op::SetNodeDrained {
            node,
            drained: true,
        } if reason.depends.is_empty() => {
            query.push(("force".into(), "1".into()));
            query.push(("auto-promote".into(), "1".into()));
            (
                Method::Put,
                format!("/2/nodes/{}/role", segment(node)?),
                json!("drained"),
            )
        }
        Op::SetNodeDrained { node, drained } => {
            let body = if *drained {
                json!({"drained": true, "force": true, "auto_promote": true})
            } else {
                json!({"drained": false})
            };
            (
                Method::Post,
                format!("/2/nodes/{}/modify", segment(node)?),
                body,
            )
        }
        // `auto_promote` keeps the master-candidate pool filled when a candidate goes offline.
        Op::SetNodeOffline { node, offline } => {
            let body = if *offline {
                json!({"offline": true, "auto_promote": true})
            } else {
                json!({"offline": false})
            };
            (
                Method::Post,
                format!("/2/nodes/{}/modify", segment(node)?),
                body,
            )
        }
        // Ganeti's default timeout; the down state is remembered.
        Op::ShutdownInstance { instance } => (
            Method::Put,
            format!("/2/instances/{}/shutdown", segment(instance)?),
            json!({}),
        ),
        Op::MigrateInstance { instance, target } => {
            let mut body = serde_json::Map::new();
            body.insert(
                "mode".into(),
                serde_json::to_value(MigrationMode::Live).unwrap_or(Value::Null),
            );
            insert_opt(&mut body, "target_node", target.as_deref());
            body.insert("allow_failover".into(), false.into());
            body.insert("cleanup".into(), false.into());
            (
                Method::Put,
                format!("/2/instances/{}/migrate", segment(instance)?),
                Value::Object(body),
            )
        }
        Op::FailoverInstance { instance, target } => {
            let mut body = serde_json::Map::new();
            insert_opt(&mut body, "target_node", target.as_deref());
            body.insert("ignore_consistency".into(), false.into());
            (
                Method::Put,
                format!("/2/instances/{}/failover", segment(instance)?),
                Value::Object(body),
            )
        }
        // The body is never empty, so RAPI does not fall back to its legacy query-string
        // interface.
        Op::ReplaceDisks { instance, mode } => {
            let mut body = serde_json::Map::new();
            body.insert("mode".into(), mode.as_str().into());
            if let ReplaceDisksMode::ReplaceNewSecondary {
                remote_node,
                iallocator,
            } = mode
            {
                insert_opt(&mut body, "remote_node", remote_node.as_deref());
                if remote_node.is_none() {
                    let ialloc = iallocator.as_deref().unwrap_or(DEFAULT_IALLOCATOR);
                    body.insert("iallocator".into(), ialloc.into());
                }
            }
            body.insert("early_release".into(), false.into());
            (
                Method::Post,
                format!("/2/instances/{}/replace-disks", segment(instance)?),
                Value::Object(body),
            )
        }
        Op::EvacuateNode {
            node,
            mode,
            iallocator,
        } => (
            Method::Post,
            format!("/2/nodes/{}/evacuate", segment(node)?),
            json!({
                "mode": mode.as_str(),
                "iallocator": iallocator.as_deref().unwrap_or(DEFAULT_IALLOCATOR),
                "early_release": false,
            }),
        ),
        Op::AddTags { target, tags } | Op::RemoveTags { target, tags } => {
            if tags.is_empty() {
                return Err(InvalidRequest(
                    "a tag operation needs at least one tag".into(),
                ));
            }
            query.extend(tags.iter().map(|t| ("tag".to_owned(), t.clone())));
            let method = if matches!(op, Op::AddTags { .. }) {
                Method::Put
            } else {
                Method::Delete
            };
            (method, tags_path(target)?, Value::Null)
        }
        Op::RecreateInstanceDisks {
            instance,
            iallocator,
        } => (
            Method::Post,
            format!("/2/instances/{}/recreate-disks", segment(instance)?),
            json!({"disks": [], "nodes": [], "iallocator": iallocator}),
        ),
        // The OS and its parameters stay as they are; `nostartup=1` unless `start`. Ganeti
        // 3.0.2 refuses a body together with query parameters on this resource ("Can't combine
        // query and body parameters"), and the reason can only travel as a query parameter, so
        // the request uses the query interface and has no body: it cannot carry `depends`
        // either (refused rather than dropped). Ganeti 3.0.2 builds this job (shutdown,
        // reinstall, startup) without the `reason` parameter: the job's trail holds only
        // Ganeti's own entries (checked on the real cluster).
        Op::ReinstallInstance { instance, start } => {
            let path = format!("/2/instances/{}/reinstall", segment(instance)?);
            if !reason.depends.is_empty() {
                return Err(InvalidRequest(format!(
                    "POST {path}: RAPI's reinstall cannot wait for other jobs"
                )));
            }
            if !start {
                query.push(("nostartup".into(), "1".into()));
            }
            (Method::Post, path, Value::Null)
        }
    };
    query.push(("reason".into(), reason_query_value(reason_source, reason)));
    let body = with_depends(&body, &reason.depends)
        .map_err(|message| InvalidRequest(format!("{method} {path}: {message}")))?;
    Ok(RapiRequest {
        method,
        path,
        query,
        body,
    })
}

/// The path of a target's tags (`GET`, `PUT`, `DELETE`).
pub fn tags_path(target: &TagTarget) -> Result<String, InvalidRequest> {
    Ok(match target {
        TagTarget::Cluster => "/2/tags".to_owned(),
        TagTarget::Node(n) => format!("/2/nodes/{}/tags", segment(n)?),
        TagTarget::Instance(i) => format!("/2/instances/{}/tags", segment(i)?),
        TagTarget::Group(g) => format!("/2/groups/{}/tags", segment(g)?),
    })
}

/// A node, instance or group name as one URL path segment. Ganeti names are host names
/// (letters, digits, `.`, `-`, `_`); anything else is refused rather than escaped.
pub fn segment(name: &str) -> Result<&str, InvalidRequest> {
    let ok = !name.is_empty()
        && name.len() <= 255
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_'))
        && name != "."
        && name != "..";
    if ok {
        Ok(name)
    } else {
        Err(InvalidRequest(format!(
            "invalid Ganeti object name `{}`",
            truncate(name)
        )))
    }
}

/// The request body with RAPI's `depends` parameter added (`None` for an empty body). RAPI
/// reads `depends` only from a JSON object body, so a bare-value body cannot carry it.
fn with_depends(body: &Value, depends: &[JobId]) -> Result<Option<Value>, String> {
    if depends.is_empty() {
        return Ok((!body.is_null()).then(|| body.clone()));
    }
    let list: Vec<Value> = depends.iter().map(|id| json!([id, ["success"]])).collect();
    let mut map = match body {
        Value::Null => serde_json::Map::new(),
        Value::Object(map) => map.clone(),
        _ => return Err("this resource's body cannot carry job dependencies".into()),
    };
    map.insert("depends".into(), Value::Array(list));
    Ok(Some(Value::Object(map)))
}

fn insert_opt(body: &mut serde_json::Map<String, Value>, key: &str, value: Option<&str>) {
    if let Some(v) = value {
        body.insert(key.to_owned(), Value::String(v.to_owned()));
    }
}

/// At most 300 bytes of `text`, for error messages.
pub(crate) fn truncate(text: &str) -> String {
    const MAX: usize = 300;
    if text.len() <= MAX {
        return text.to_owned();
    }
    let mut cut = MAX;
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}...", &text[..cut])
}

#[cfg(test)]
mod tests {
    use uuid::Uuid;

    use super::*;
    use crate::EvacuateMode;

    const INCIDENT: &str = "6f1c2f0e-9a55-4d8c-8f1e-0c3d2b1a0f99";
    const SOURCE: &str = "gnt:daemon:maintd";

    fn reason() -> Reason {
        let incident = Uuid::parse_str(INCIDENT).unwrap_or_default();
        Reason::new(incident, "k", "why")
    }

    fn reason_value() -> String {
        format!("{SOURCE} nodecare incident={INCIDENT} intent=k: why")
    }

    fn node(name: &str) -> String {
        name.to_owned()
    }

    /// An operation and its request: method, path, query before the reason, body.
    type Row = (
        Op,
        Method,
        &'static str,
        Vec<(&'static str, &'static str)>,
        Option<Value>,
    );

    /// Every variant with the exact request Ganeti 3.0.2's RAPI gets (what the client has
    /// always sent): method, path, query in order, body.
    fn table() -> Vec<Row> {
        vec![
            (
                Op::drain("node1"),
                Method::Put,
                "/2/nodes/node1/role",
                vec![("force", "1"), ("auto-promote", "1")],
                Some(json!("drained")),
            ),
            (
                Op::undrain("node1"),
                Method::Post,
                "/2/nodes/node1/modify",
                vec![],
                Some(json!({"drained": false})),
            ),
            (
                Op::offline("node1"),
                Method::Post,
                "/2/nodes/node1/modify",
                vec![],
                Some(json!({"offline": true, "auto_promote": true})),
            ),
            (
                Op::online("node1"),
                Method::Post,
                "/2/nodes/node1/modify",
                vec![],
                Some(json!({"offline": false})),
            ),
            (
                Op::ShutdownInstance {
                    instance: "inst1".into(),
                },
                Method::Put,
                "/2/instances/inst1/shutdown",
                vec![],
                Some(json!({})),
            ),
            (
                Op::MigrateInstance {
                    instance: "inst1".into(),
                    target: None,
                },
                Method::Put,
                "/2/instances/inst1/migrate",
                vec![],
                Some(json!({"mode": "live", "allow_failover": false, "cleanup": false})),
            ),
            (
                Op::MigrateInstance {
                    instance: "inst1".into(),
                    target: Some(node("node2")),
                },
                Method::Put,
                "/2/instances/inst1/migrate",
                vec![],
                Some(json!({
                    "mode": "live", "target_node": "node2",
                    "allow_failover": false, "cleanup": false
                })),
            ),
            (
                Op::FailoverInstance {
                    instance: "inst1".into(),
                    target: None,
                },
                Method::Put,
                "/2/instances/inst1/failover",
                vec![],
                Some(json!({"ignore_consistency": false})),
            ),
            (
                Op::FailoverInstance {
                    instance: "inst1".into(),
                    target: Some(node("node2")),
                },
                Method::Put,
                "/2/instances/inst1/failover",
                vec![],
                Some(json!({"target_node": "node2", "ignore_consistency": false})),
            ),
            (
                Op::ReplaceDisks {
                    instance: "inst1".into(),
                    mode: ReplaceDisksMode::ReplaceNewSecondary {
                        remote_node: Some(node("node3")),
                        iallocator: None,
                    },
                },
                Method::Post,
                "/2/instances/inst1/replace-disks",
                vec![],
                Some(json!({
                    "mode": "replace_new_secondary", "remote_node": "node3",
                    "early_release": false
                })),
            ),
            (
                Op::ReplaceDisks {
                    instance: "inst1".into(),
                    mode: ReplaceDisksMode::ReplaceNewSecondary {
                        remote_node: None,
                        iallocator: None,
                    },
                },
                Method::Post,
                "/2/instances/inst1/replace-disks",
                vec![],
                Some(json!({
                    "mode": "replace_new_secondary", "iallocator": "hail",
                    "early_release": false
                })),
            ),
            (
                Op::ReplaceDisks {
                    instance: "inst1".into(),
                    mode: ReplaceDisksMode::ReplaceNewSecondary {
                        remote_node: None,
                        iallocator: Some("other".into()),
                    },
                },
                Method::Post,
                "/2/instances/inst1/replace-disks",
                vec![],
                Some(json!({
                    "mode": "replace_new_secondary", "iallocator": "other",
                    "early_release": false
                })),
            ),
            (
                Op::ReplaceDisks {
                    instance: "inst1".into(),
                    mode: ReplaceDisksMode::ReplaceAuto,
                },
                Method::Post,
                "/2/instances/inst1/replace-disks",
                vec![],
                Some(json!({"mode": "replace_auto", "early_release": false})),
            ),
            (
                Op::ReplaceDisks {
                    instance: "inst1".into(),
                    mode: ReplaceDisksMode::ReplaceOnPrimary,
                },
                Method::Post,
                "/2/instances/inst1/replace-disks",
                vec![],
                Some(json!({"mode": "replace_on_primary", "early_release": false})),
            ),
            (
                Op::ReplaceDisks {
                    instance: "inst1".into(),
                    mode: ReplaceDisksMode::ReplaceOnSecondary,
                },
                Method::Post,
                "/2/instances/inst1/replace-disks",
                vec![],
                Some(json!({"mode": "replace_on_secondary", "early_release": false})),
            ),
            (
                Op::EvacuateNode {
                    node: "node1".into(),
                    mode: EvacuateMode::PrimaryOnly,
                    iallocator: None,
                },
                Method::Post,
                "/2/nodes/node1/evacuate",
                vec![],
                Some(json!({"mode": "primary-only", "iallocator": "hail", "early_release": false})),
            ),
            (
                Op::EvacuateNode {
                    node: "node1".into(),
                    mode: EvacuateMode::SecondaryOnly,
                    iallocator: Some("other".into()),
                },
                Method::Post,
                "/2/nodes/node1/evacuate",
                vec![],
                Some(json!({
                    "mode": "secondary-only", "iallocator": "other", "early_release": false
                })),
            ),
            (
                Op::add_node_tags("node1", vec!["a".into(), "b:c".into()]),
                Method::Put,
                "/2/nodes/node1/tags",
                vec![("tag", "a"), ("tag", "b:c")],
                None,
            ),
            (
                Op::RemoveTags {
                    target: TagTarget::Cluster,
                    tags: vec!["a".into()],
                },
                Method::Delete,
                "/2/tags",
                vec![("tag", "a")],
                None,
            ),
            (
                Op::AddTags {
                    target: TagTarget::Instance("inst1".into()),
                    tags: vec!["a".into()],
                },
                Method::Put,
                "/2/instances/inst1/tags",
                vec![("tag", "a")],
                None,
            ),
            (
                Op::RemoveTags {
                    target: TagTarget::Group("default".into()),
                    tags: vec!["a".into()],
                },
                Method::Delete,
                "/2/groups/default/tags",
                vec![("tag", "a")],
                None,
            ),
            (
                Op::RecreateInstanceDisks {
                    instance: "inst1".into(),
                    iallocator: "hail".into(),
                },
                Method::Post,
                "/2/instances/inst1/recreate-disks",
                vec![],
                Some(json!({"disks": [], "nodes": [], "iallocator": "hail"})),
            ),
            (
                Op::ReinstallInstance {
                    instance: "inst1".into(),
                    start: true,
                },
                Method::Post,
                "/2/instances/inst1/reinstall",
                vec![],
                None,
            ),
            (
                Op::ReinstallInstance {
                    instance: "inst1".into(),
                    start: false,
                },
                Method::Post,
                "/2/instances/inst1/reinstall",
                vec![("nostartup", "1")],
                None,
            ),
        ]
    }

    /// Every variant appears in [`table`] (a new variant without a row fails to compile here).
    fn covered(op: &Op) -> usize {
        match op {
            Op::SetNodeDrained { .. } => 0,
            Op::SetNodeOffline { .. } => 1,
            Op::ShutdownInstance { .. } => 2,
            Op::MigrateInstance { .. } => 3,
            Op::FailoverInstance { .. } => 4,
            Op::ReplaceDisks { .. } => 5,
            Op::EvacuateNode { .. } => 6,
            Op::AddTags { .. } => 7,
            Op::RemoveTags { .. } => 8,
            Op::RecreateInstanceDisks { .. } => 9,
            Op::ReinstallInstance { .. } => 10,
        }
    }

    #[test]
    fn every_op_has_its_exact_request() {
        let mut seen = [false; 11];
        for (op, method, path, query, body) in table() {
            seen[covered(&op)] = true;
            let mut expected_query: Vec<(String, String)> = query
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect();
            expected_query.push(("reason".into(), reason_value()));
            assert_eq!(
                rapi_request(&op, &reason(), SOURCE),
                Ok(RapiRequest {
                    method,
                    path: path.to_owned(),
                    query: expected_query,
                    body,
                }),
                "{op:?}"
            );
        }
        assert!(seen.iter().all(|s| *s), "{seen:?}");
    }

    #[test]
    fn bodies_serialize_byte_for_byte() {
        // serde_json sorts object keys (preserve_order is never enabled), so the bytes sent
        // are these whatever the insertion order.
        let op = Op::MigrateInstance {
            instance: "inst1".into(),
            target: Some("node2".into()),
        };
        let request = rapi_request(&op, &reason().after([7, 4]), SOURCE).unwrap_or_else(|e| {
            panic!("{e}");
        });
        let body = serde_json::to_string(&request.body).unwrap_or_default();
        assert_eq!(
            body,
            r#"{"allow_failover":false,"cleanup":false,"depends":[[4,["success"]],[7,["success"]]],"mode":"live","target_node":"node2"}"#
        );
    }

    #[test]
    fn dependencies_go_into_the_body() {
        let chained = reason().after([4, 7]);
        let depends = json!([[4, ["success"]], [7, ["success"]]]);
        // A chained drain cannot use the role resource (bare string body).
        let request = rapi_request(&Op::drain("node1"), &chained, SOURCE);
        assert_eq!(
            request,
            Ok(RapiRequest {
                method: Method::Post,
                path: "/2/nodes/node1/modify".into(),
                query: vec![("reason".into(), reason_value())],
                body: Some(
                    json!({"drained": true, "force": true, "auto_promote": true, "depends": depends})
                ),
            })
        );
        // Tags have no body: the dependencies make one.
        let op = Op::add_node_tags("node1", vec!["a".into()]);
        let request = rapi_request(&op, &chained, SOURCE);
        assert_eq!(
            request.map(|r| r.body),
            Ok(Some(json!({"depends": depends})))
        );
        // Every object body keeps its fields.
        let op = Op::online("node1");
        assert_eq!(
            rapi_request(&op, &chained, SOURCE).map(|r| r.body),
            Ok(Some(json!({"offline": false, "depends": depends})))
        );
    }

    #[test]
    fn impossible_requests_are_refused() {
        let chained = reason().after([4]);
        let reinstall = Op::ReinstallInstance {
            instance: "inst1".into(),
            start: true,
        };
        assert_eq!(
            rapi_request(&reinstall, &chained, SOURCE),
            Err(InvalidRequest(
                "POST /2/instances/inst1/reinstall: RAPI's reinstall cannot wait for other jobs"
                    .into()
            ))
        );
        let untagged = Op::add_node_tags("node1", Vec::new());
        assert_eq!(
            rapi_request(&untagged, &reason(), SOURCE),
            Err(InvalidRequest(
                "a tag operation needs at least one tag".into()
            ))
        );
        for bad in ["../x", "a/b", "", "a?b", ".", ".."] {
            let op = Op::drain(bad);
            assert!(
                rapi_request(&op, &reason(), SOURCE).is_err(),
                "{bad:?} was accepted"
            );
        }
        let op = Op::RemoveTags {
            target: TagTarget::Group("a b".into()),
            tags: vec!["x".into()],
        };
        assert_eq!(
            rapi_request(&op, &reason(), SOURCE),
            Err(InvalidRequest("invalid Ganeti object name `a b`".into()))
        );
    }

    #[test]
    fn the_reason_source_and_control_characters() {
        let incident = Uuid::parse_str(INCIDENT).unwrap_or_default();
        let reason = Reason::new(incident, "k", "line\nbreak");
        let request = rapi_request(&Op::undrain("node1"), &reason, "site:repair");
        assert_eq!(
            request.map(|r| r.query),
            Ok(vec![(
                "reason".into(),
                format!("site:repair nodecare incident={INCIDENT} intent=k: line break")
            )])
        );
    }

    #[test]
    fn names_are_checked() {
        assert!(segment("node1.example.com").is_ok());
        assert!(segment(&"a".repeat(256)).is_err());
        assert!(segment(&"a".repeat(255)).is_ok());
    }

    #[test]
    fn depends_goes_into_an_object_body() {
        assert_eq!(with_depends(&Value::Null, &[]), Ok(None));
        assert_eq!(
            with_depends(&json!({"mode": "live"}), &[]),
            Ok(Some(json!({"mode": "live"})))
        );
        assert_eq!(
            with_depends(&Value::Null, &[4, 7]),
            Ok(Some(
                json!({"depends": [[4, ["success"]], [7, ["success"]]]})
            ))
        );
        assert!(with_depends(&json!("drained"), &[4]).is_err());
    }
}
