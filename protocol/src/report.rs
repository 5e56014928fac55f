//! The report envelope of Ganeti's monitoring daemon (mond), field for field.
//!
//! Field order, types and the status-code convention follow mond 3.0.2 so that existing Ganeti
//! clients (htools' mond backend, maintd, scrapers) read our reports unchanged.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// Version string that mond uses for built-in collectors.
pub const BUILTIN_COLLECTOR_VERSION: &str = "B";
/// Format version of every built-in collector's data.
pub const BUILTIN_FORMAT_VERSION: u32 = 1;
/// The category that mond reports, in `/1/list/collectors`, for collectors without one.
pub const DEFAULT_CATEGORY: &str = "default";
/// Categories mond accepts in `/1/report/<category>/<name>` (plus [`DEFAULT_CATEGORY`]).
pub const KNOWN_CATEGORIES: [&str; 5] = ["instance", "storage", "daemon", "hypervisor", "node"];

/// Whether a collector reports performance figures or a status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ReportKind {
    /// Kind 0: performance data.
    Performance,
    /// Kind 1: status data carrying `{"status":{"code","message"}}`.
    Status,
}

impl ReportKind {
    /// The integer mond uses on the wire.
    pub const fn code(self) -> u8 {
        match self {
            Self::Performance => 0,
            Self::Status => 1,
        }
    }
}

impl Serialize for ReportKind {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_u8(self.code())
    }
}

impl<'de> Deserialize<'de> for ReportKind {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        match u8::deserialize(deserializer)? {
            0 => Ok(Self::Performance),
            1 => Ok(Self::Status),
            other => Err(serde::de::Error::custom(format!(
                "report kind must be 0 (performance) or 1 (status), got {other}"
            ))),
        }
    }
}

/// mond's status codes for status collectors; merged by taking the maximum.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum StatusCode {
    /// 0: everything is fine.
    Ok,
    /// 1: something is wrong but is being fixed automatically.
    TempBad,
    /// 2: the collector could not determine the state.
    Unknown,
    /// 4: something is wrong and needs attention.
    Bad,
}

impl StatusCode {
    /// The integer mond uses on the wire.
    pub const fn code(self) -> u8 {
        match self {
            Self::Ok => 0,
            Self::TempBad => 1,
            Self::Unknown => 2,
            Self::Bad => 4,
        }
    }

    /// Parses mond's integer code.
    pub const fn from_code(code: u64) -> Option<Self> {
        match code {
            0 => Some(Self::Ok),
            1 => Some(Self::TempBad),
            2 => Some(Self::Unknown),
            4 => Some(Self::Bad),
            _ => None,
        }
    }
}

impl Serialize for StatusCode {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_u8(self.code())
    }
}

impl<'de> Deserialize<'de> for StatusCode {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let code = u64::deserialize(deserializer)?;
        Self::from_code(code).ok_or_else(|| {
            serde::de::Error::custom(format!("status code must be 0, 1, 2 or 4, got {code}"))
        })
    }
}

/// Builds mond's `{"code":…,"message":…}` status object.
pub fn status_object(code: StatusCode, message: &str) -> Value {
    let mut status = Map::new();
    status.insert("code".into(), Value::from(code.code()));
    status.insert("message".into(), Value::from(message));
    Value::Object(status)
}

/// Adds a `status` member to report data the way mond does: into an object, or around a
/// non-object as `{"status":…,"data":…}`.
pub fn with_status(data: Value, code: StatusCode, message: &str) -> Value {
    match data {
        Value::Object(mut map) => {
            map.insert("status".into(), status_object(code, message));
            Value::Object(map)
        }
        other => {
            let mut map = Map::new();
            map.insert("status".into(), status_object(code, message));
            map.insert("data".into(), other);
            Value::Object(map)
        }
    }
}

/// One report, exactly as mond serialises it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Report {
    /// Collector name, e.g. `cpu-avg-load`.
    pub name: String,
    /// Collector version; `"B"` for built-ins.
    pub version: String,
    /// Version of the data format.
    pub format_version: u32,
    /// Build time of the report in nanoseconds since the epoch (microsecond precision).
    pub timestamp: u64,
    /// Category (`storage`, `instance`, `daemon`, `hypervisor`, `node`) or `null`.
    pub category: Option<String>,
    /// Performance (0) or status (1).
    pub kind: ReportKind,
    /// Collector-specific data.
    pub data: Value,
}

/// One row of `/1/list/collectors`: `[name, category-or-"default", kind]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CollectorListEntry {
    /// Collector name.
    pub name: String,
    /// Category, with `None` shown as `"default"`.
    pub category: Option<String>,
    /// Report kind.
    pub kind: ReportKind,
}

impl Serialize for CollectorListEntry {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeTuple;
        let mut tuple = serializer.serialize_tuple(3)?;
        tuple.serialize_element(&self.name)?;
        tuple.serialize_element(self.category.as_deref().unwrap_or(DEFAULT_CATEGORY))?;
        tuple.serialize_element(&self.kind)?;
        tuple.end()
    }
}

impl<'de> Deserialize<'de> for CollectorListEntry {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let (name, category, kind) = <(String, String, ReportKind)>::deserialize(deserializer)?;
        let category = (category != DEFAULT_CATEGORY).then_some(category);
        Ok(Self {
            name,
            category,
            kind,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn envelope_matches_mond_field_order_and_types() {
        let report = Report {
            name: "cpu-avg-load".into(),
            version: BUILTIN_COLLECTOR_VERSION.into(),
            format_version: BUILTIN_FORMAT_VERSION,
            timestamp: 1_795_330_632_408_866_000,
            category: None,
            kind: ReportKind::Performance,
            data: serde_json::json!({"cpu_number": 2}),
        };
        let text = serde_json::to_string(&report).unwrap();
        assert_eq!(
            text,
            r#"{"name":"cpu-avg-load","version":"B","format_version":1,"timestamp":1795330632408866000,"category":null,"kind":0,"data":{"cpu_number":2}}"#
        );
        let back: Report = serde_json::from_str(&text).unwrap();
        assert_eq!(back, report);
    }

    #[test]
    fn real_mond_report_parses() {
        let text = r#"{"name":"drbd","version":"B","format_version":1,"timestamp":1,"category":"storage","kind":1,"data":{"status":{"code":4,"message":"\n0: No network config available"}}}"#;
        let report: Report = serde_json::from_str(text).unwrap();
        assert_eq!(report.kind, ReportKind::Status);
        assert_eq!(report.category.as_deref(), Some("storage"));
    }

    #[test]
    fn bad_kind_and_code_are_rejected() {
        assert!(serde_json::from_str::<ReportKind>("3").is_err());
        assert!(serde_json::from_str::<StatusCode>("3").is_err());
        assert_eq!(
            serde_json::from_str::<StatusCode>("4").unwrap(),
            StatusCode::Bad
        );
    }

    #[test]
    fn list_entry_uses_default_category() {
        let entry = CollectorListEntry {
            name: "cpu-avg-load".into(),
            category: None,
            kind: ReportKind::Performance,
        };
        assert_eq!(
            serde_json::to_string(&entry).unwrap(),
            r#"["cpu-avg-load","default",0]"#
        );
        let back: CollectorListEntry = serde_json::from_str(r#"["drbd","storage",1]"#).unwrap();
        assert_eq!(back.category.as_deref(), Some("storage"));
    }

    #[test]
    fn status_is_added_like_mond() {
        let data = with_status(serde_json::json!([1]), StatusCode::Unknown, "x");
        assert_eq!(
            data,
            serde_json::json!({"status": {"code": 2, "message": "x"}, "data": [1]})
        );
        assert!(StatusCode::Bad > StatusCode::Unknown && StatusCode::Unknown > StatusCode::TempBad);
    }
}
