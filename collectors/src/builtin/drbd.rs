//! `drbd`: DRBD device states, from `/proc/drbd` (DRBD 8.0–8.4) or `drbdsetup status --json`
//! (DRBD 9, whose `/proc/drbd` only has the version), paired with instances through confd.
//!
//! The data has mond's shape: `{"status":{code,message},"versionInfo":{…},"deviceInfos":[…]}`,
//! one device entry per minor, status by connection state merged with `max`, and the merged
//! message built like mond's (each non-empty message on its own line, newest device first,
//! after a leading newline).

use std::path::PathBuf;

use nodecare_protocol::report::with_status;
use nodecare_protocol::{ReportKind, StatusCode};
use serde::Serialize;
use serde_json::Value;

use super::systool::{ToolError, run_tool};
use super::{BuiltinConfig, ParseError, parse_u64};
use crate::confd::{DrbdMinor, ViewHandle};
use crate::{CollectError, CollectFuture, Collector, CollectorSpec};

/// The version header of `/proc/drbd`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct VersionInfo {
    /// e.g. `8.4.2`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// API version.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub api: Option<String>,
    /// Protocol version range.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub proto: Option<String>,
    /// Module source version (instead of a git hash on some builds).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub srcversion: Option<String>,
    /// Git hash of the build.
    #[serde(rename = "gitHash", skip_serializing_if = "Option::is_none")]
    pub git_hash: Option<String>,
    /// Who built it and when.
    #[serde(rename = "buildBy", skip_serializing_if = "Option::is_none")]
    pub build_by: Option<String>,
}

impl VersionInfo {
    /// The major version number, when known.
    pub fn major(&self) -> Option<u32> {
        self.version.as_deref()?.split('.').next()?.parse().ok()
    }
}

/// A device's performance counters (KiB and request counts), mond's field names.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct PerfIndicators {
    /// `ns`: KiB sent to the peer.
    #[serde(rename = "networkSend")]
    pub network_send: u64,
    /// `nr`: KiB received from the peer.
    #[serde(rename = "networkReceive")]
    pub network_receive: u64,
    /// `dw`: KiB written to the local disk.
    #[serde(rename = "diskWrite")]
    pub disk_write: u64,
    /// `dr`: KiB read from the local disk.
    #[serde(rename = "diskRead")]
    pub disk_read: u64,
    /// `al`: activity log updates.
    #[serde(rename = "activityLog")]
    pub activity_log: u64,
    /// `bm`: bitmap updates.
    #[serde(rename = "bitMap")]
    pub bit_map: u64,
    /// `lo`: open local requests.
    #[serde(rename = "localCount")]
    pub local_count: u64,
    /// `pe`: requests sent to the peer, not yet answered.
    pub pending: u64,
    /// `ua`: requests from the peer, not yet acknowledged.
    pub unacknowledged: u64,
    /// `ap`: application requests not yet completed.
    #[serde(rename = "applicationPending")]
    pub application_pending: u64,
    /// `ep`: epoch objects (8.3+).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub epochs: Option<u64>,
    /// `wo`: write ordering method (8.3+).
    #[serde(rename = "writeOrder", skip_serializing_if = "Option::is_none")]
    pub write_order: Option<String>,
    /// `oos`: KiB out of sync (8.3+).
    #[serde(rename = "outOfSync", skip_serializing_if = "Option::is_none")]
    pub out_of_sync: Option<u64>,
}

/// Resynchronisation progress.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SyncStatus {
    /// Percent done.
    pub percentage: f64,
    /// `"remaining/total"`.
    pub progress: String,
    /// Unit of `progress`: `KiloByte`, `MegaByte`, `GigaByte`.
    #[serde(rename = "progressUnit")]
    pub progress_unit: String,
    /// `hh:mm:ss`.
    #[serde(rename = "timeToFinish")]
    pub time_to_finish: String,
    /// Current speed.
    pub speed: u64,
    /// Target speed, when DRBD shows one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub want: Option<u64>,
    /// Unit of `speed` and `want`.
    #[serde(rename = "speedUnit")]
    pub speed_unit: String,
}

/// A configured device.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Device {
    /// Minor number.
    pub minor: u64,
    /// Connection (or replication) state, e.g. `Connected`, `SyncSource`, `StandAlone`.
    #[serde(rename = "connectionState")]
    pub connection_state: String,
    /// This node's role.
    #[serde(rename = "localRole")]
    pub local_role: String,
    /// The peer's role.
    #[serde(rename = "remoteRole")]
    pub remote_role: String,
    /// This node's disk state.
    #[serde(rename = "localState")]
    pub local_state: String,
    /// The peer's disk state.
    #[serde(rename = "remoteState")]
    pub remote_state: String,
    /// `A`, `B`, `C`, or `" "` when unknown.
    #[serde(rename = "replicationProtocol")]
    pub replication_protocol: String,
    /// I/O state flags, e.g. `r-----`.
    #[serde(rename = "ioFlags")]
    pub io_flags: String,
    /// Counters.
    #[serde(rename = "perfIndicators")]
    pub perf_indicators: PerfIndicators,
    /// Resync progress, while resyncing.
    #[serde(rename = "syncStatus", skip_serializing_if = "Option::is_none")]
    pub sync_status: Option<SyncStatus>,
    /// The Ganeti instance using this minor, when known.
    pub instance: Option<String>,
}

/// One minor in the report.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum DeviceInfo {
    /// A minor that exists but has no configuration.
    Unconfigured {
        /// Minor number.
        minor: u64,
        /// Always `Unconfigured`.
        #[serde(rename = "connectionState")]
        connection_state: &'static str,
    },
    /// A configured minor.
    Configured(Box<Device>),
}

impl DeviceInfo {
    /// The minor number.
    pub fn minor(&self) -> u64 {
        match self {
            Self::Unconfigured { minor, .. } => *minor,
            Self::Configured(device) => device.minor,
        }
    }
}

/// Everything `/proc/drbd` (or `drbdsetup`) says.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct DrbdStatus {
    /// The version header.
    pub version: VersionInfo,
    /// One entry per minor, in the source's order.
    pub devices: Vec<DeviceInfo>,
}

/// Parses DRBD 8.x `/proc/drbd` (for DRBD 9 only the version header is present).
pub fn parse_proc_drbd(text: &str) -> Result<DrbdStatus, ParseError> {
    let mut status = DrbdStatus::default();
    for (index, raw_line) in text.lines().enumerate() {
        let number = index + 1;
        // Some 8.3 builds print a NUL after the I/O flags.
        let line = raw_line.trim_end_matches(['\0', ' ', '\t', '\r']);
        let trimmed = line.trim_start();
        if trimmed.is_empty() {
            continue;
        }
        if let Some(rest) = trimmed.strip_prefix("version:") {
            parse_version_line(number, rest, &mut status.version)?;
        } else if let Some(rest) = trimmed.strip_prefix("GIT-hash:") {
            let rest = rest.trim();
            let (hash, build) = match rest.split_once(" build by ") {
                Some((hash, build)) => (hash.trim(), Some(build.trim())),
                None => (rest, None),
            };
            status.version.git_hash = Some(hash.to_owned());
            status.version.build_by = build.map(str::to_owned);
        } else if let Some(rest) = trimmed.strip_prefix("srcversion:") {
            status.version.srcversion = Some(rest.trim().to_owned());
        } else if trimmed.starts_with("Transports") {
            // DRBD 9 lists its transport modules; not part of mond's data.
        } else if is_device_line(trimmed) {
            status.devices.push(parse_device_line(number, trimmed)?);
        } else if trimmed.starts_with("ns:") {
            let device = last_configured(&mut status, number, "ns")?;
            device.perf_indicators = parse_perf_line(number, trimmed)?;
        } else if trimmed.starts_with('[') || trimmed.starts_with("finish:") {
            let device = last_configured(&mut status, number, "sync")?;
            parse_sync_text(number, trimmed, device)?;
        } else if trimmed.starts_with("resync:")
            || trimmed.starts_with("act_log:")
            || trimmed.starts_with("verified:")
        {
            // Cache statistics and online-verify progress: not part of mond's data.
        } else {
            return Err(ParseError::new(
                number,
                "line",
                format!("unrecognised /proc/drbd line {:?}", truncate(trimmed)),
            ));
        }
    }
    Ok(status)
}

fn truncate(text: &str) -> String {
    text.chars().take(60).collect()
}

fn is_device_line(line: &str) -> bool {
    line.split_once(':')
        .is_some_and(|(minor, _)| !minor.is_empty() && minor.bytes().all(|b| b.is_ascii_digit()))
}

fn last_configured<'a>(
    status: &'a mut DrbdStatus,
    line: usize,
    field: &str,
) -> Result<&'a mut Device, ParseError> {
    match status.devices.last_mut() {
        Some(DeviceInfo::Configured(device)) => Ok(device),
        _ => Err(ParseError::new(
            line,
            field,
            "no configured device before this line",
        )),
    }
}

fn parse_version_line(
    line: usize,
    rest: &str,
    version: &mut VersionInfo,
) -> Result<(), ParseError> {
    let rest = rest.trim();
    let (number, details) = match rest.split_once(' ') {
        Some((number, details)) => (number, details.trim()),
        None => (rest, ""),
    };
    if number.is_empty() {
        return Err(ParseError::new(line, "version", "empty version"));
    }
    version.version = Some(number.to_owned());
    if let Some(inner) = details.strip_prefix('(').and_then(|d| d.strip_suffix(')')) {
        for part in inner.split('/') {
            match part.split_once(':') {
                Some(("api", value)) => version.api = Some(value.to_owned()),
                Some(("proto", value)) => version.proto = Some(value.to_owned()),
                _ => {
                    return Err(ParseError::new(
                        line,
                        "version",
                        format!("unexpected {part:?} in the api/proto part"),
                    ));
                }
            }
        }
    }
    Ok(())
}

fn split_pair(line: usize, field: &str, value: &str) -> Result<(String, String), ParseError> {
    value
        .split_once('/')
        .map(|(a, b)| (a.to_owned(), b.to_owned()))
        .ok_or_else(|| {
            ParseError::new(line, field, format!("{value:?} is not a local/remote pair"))
        })
}

fn parse_device_line(line: usize, text: &str) -> Result<DeviceInfo, ParseError> {
    let Some((minor_text, rest)) = text.split_once(':') else {
        return Err(ParseError::new(line, "minor", "missing ':'"));
    };
    let minor = parse_u64(line, "minor", minor_text)?;
    let rest = rest.trim_start();
    let Some(after_cs) = rest.strip_prefix("cs:") else {
        return Err(ParseError::new(line, "cs", "connection state missing"));
    };
    let (connection_state, rest) = after_cs
        .split_once(' ')
        .map_or((after_cs, ""), |(cs, rest)| (cs, rest));
    if connection_state.is_empty() {
        return Err(ParseError::new(line, "cs", "empty connection state"));
    }
    if connection_state == "Unconfigured" {
        return Ok(DeviceInfo::Unconfigured {
            minor,
            connection_state: "Unconfigured",
        });
    }
    let rest = rest.trim_start();
    // DRBD 8.0 says st: for roles, 8.3+ says ro:.
    let Some(after_roles) = rest
        .strip_prefix("ro:")
        .or_else(|| rest.strip_prefix("st:"))
    else {
        return Err(ParseError::new(line, "ro", "roles missing"));
    };
    let (roles, rest) = after_roles
        .split_once(' ')
        .ok_or_else(|| ParseError::new(line, "ds", "disk states missing"))?;
    let (local_role, remote_role) = split_pair(line, "ro", roles)?;
    let rest = rest.trim_start();
    let Some(after_ds) = rest.strip_prefix("ds:") else {
        return Err(ParseError::new(line, "ds", "disk states missing"));
    };
    let (disks, tail) = after_ds.split_once(' ').unwrap_or((after_ds, ""));
    let (local_state, remote_state) = split_pair(line, "ds", disks)?;
    // The protocol is one character right after the separating space; a disconnected device
    // shows a blank there.
    let mut chars = tail.chars();
    let protocol = chars.next().unwrap_or(' ');
    if !(protocol == ' ' || protocol.is_ascii_alphabetic()) {
        return Err(ParseError::new(
            line,
            "protocol",
            format!("{protocol:?} is not a replication protocol"),
        ));
    }
    let io_flags = chars
        .as_str()
        .trim_matches(|c: char| c.is_whitespace() || c == '\0');
    if io_flags.is_empty() {
        return Err(ParseError::new(line, "ioFlags", "I/O flags missing"));
    }
    Ok(DeviceInfo::Configured(Box::new(Device {
        minor,
        connection_state: connection_state.to_owned(),
        local_role,
        remote_role,
        local_state,
        remote_state,
        replication_protocol: protocol.to_string(),
        io_flags: io_flags.to_owned(),
        perf_indicators: PerfIndicators::default(),
        sync_status: None,
        instance: None,
    })))
}

fn parse_perf_line(line: usize, text: &str) -> Result<PerfIndicators, ParseError> {
    let mut perf = PerfIndicators::default();
    let mut seen = 0u16;
    for word in text.split_ascii_whitespace() {
        let Some((key, value)) = word.split_once(':') else {
            return Err(ParseError::new(line, word, "expected key:value"));
        };
        let slot = match key {
            "ns" => &mut perf.network_send,
            "nr" => &mut perf.network_receive,
            "dw" => &mut perf.disk_write,
            "dr" => &mut perf.disk_read,
            "al" => &mut perf.activity_log,
            "bm" => &mut perf.bit_map,
            "lo" => &mut perf.local_count,
            "pe" => &mut perf.pending,
            "ua" => &mut perf.unacknowledged,
            "ap" => &mut perf.application_pending,
            "ep" => {
                perf.epochs = Some(parse_u64(line, key, value)?);
                continue;
            }
            "wo" => {
                perf.write_order = Some(value.to_owned());
                continue;
            }
            "oos" => {
                perf.out_of_sync = Some(parse_u64(line, key, value)?);
                continue;
            }
            // Counters newer versions add are not part of mond's data.
            _ => continue,
        };
        *slot = parse_u64(line, key, value)?;
        seen += 1;
    }
    if seen < 10 {
        return Err(ParseError::new(
            line,
            "perfIndicators",
            "expected ns nr dw dr al bm lo pe ua ap",
        ));
    }
    Ok(perf)
}

fn unit_name(line: usize, field: &str, unit: &str) -> Result<&'static str, ParseError> {
    match unit {
        "K" => Ok("KiloByte"),
        "M" => Ok("MegaByte"),
        "G" => Ok("GigaByte"),
        "T" => Ok("TeraByte"),
        _ => Err(ParseError::new(
            line,
            field,
            format!("unknown unit {unit:?}"),
        )),
    }
}

fn parse_grouped(line: usize, field: &str, text: &str) -> Result<u64, ParseError> {
    let digits: String = text.chars().filter(|c| *c != ',').collect();
    parse_u64(line, field, &digits)
}

fn normalise_duration(line: usize, text: &str) -> Result<String, ParseError> {
    let parts: Vec<&str> = text.split(':').collect();
    let [hours, minutes, seconds] = parts.as_slice() else {
        return Err(ParseError::new(
            line,
            "finish",
            format!("{text:?} is not h:mm:ss"),
        ));
    };
    let hours = parse_u64(line, "finish", hours)?;
    let minutes = parse_u64(line, "finish", minutes)?;
    let seconds = parse_u64(line, "finish", seconds)?;
    Ok(format!("{hours:02}:{minutes:02}:{seconds:02}"))
}

/// Parses the progress bar line and/or the `finish:` line (the 2.6.39 kernel prints both on
/// one line).
fn parse_sync_text(line: usize, text: &str, device: &mut Device) -> Result<(), ParseError> {
    let mut rest = text;
    if rest.starts_with('[') {
        let after_bar = rest
            .split_once(']')
            .map(|(_, after)| after.trim_start())
            .ok_or_else(|| ParseError::new(line, "sync", "unterminated progress bar"))?;
        let after_label = after_bar
            .strip_prefix("sync'ed:")
            .ok_or_else(|| ParseError::new(line, "sync", "expected \"sync'ed:\""))?
            .trim_start();
        let (percent, after_percent) = after_label
            .split_once('%')
            .ok_or_else(|| ParseError::new(line, "percentage", "missing '%'"))?;
        let percentage: f64 = percent.trim().parse().map_err(|_| {
            ParseError::new(line, "percentage", format!("{percent:?} is not a number"))
        })?;
        if !percentage.is_finite() {
            return Err(ParseError::new(line, "percentage", "not finite"));
        }
        let after_percent = after_percent.trim_start();
        let inner = after_percent
            .strip_prefix('(')
            .and_then(|text| text.split_once(')'))
            .ok_or_else(|| ParseError::new(line, "progress", "expected (remaining/total)"))?;
        let (progress, after) = inner;
        let (remaining, total) = progress
            .split_once('/')
            .ok_or_else(|| ParseError::new(line, "progress", "expected remaining/total"))?;
        parse_u64(line, "progress", remaining)?;
        parse_u64(line, "progress", total)?;
        let unit_end = after
            .find(|c: char| !c.is_ascii_alphabetic())
            .unwrap_or(after.len());
        // The unit is one letter; "Mfinish:" on 2.6.39 runs straight into the finish part.
        let unit = after.get(..1).filter(|_| unit_end >= 1).unwrap_or("");
        let progress_unit = unit_name(line, "progressUnit", unit)?;
        device.sync_status = Some(SyncStatus {
            percentage,
            progress: progress.to_owned(),
            progress_unit: progress_unit.to_owned(),
            time_to_finish: String::new(),
            speed: 0,
            want: None,
            speed_unit: String::new(),
        });
        rest = after.get(1..).unwrap_or("").trim_start();
    }
    if rest.is_empty() {
        return Ok(());
    }
    let Some(finish) = rest.strip_prefix("finish:") else {
        return Err(ParseError::new(
            line,
            "finish",
            format!("unexpected {:?}", truncate(rest)),
        ));
    };
    let Some(sync) = device.sync_status.as_mut() else {
        return Err(ParseError::new(
            line,
            "finish",
            "finish line without a progress line",
        ));
    };
    let words: Vec<&str> = finish.split_ascii_whitespace().collect();
    let mut position = 0;
    let mut next = |field: &str| -> Result<&str, ParseError> {
        let word = words
            .get(position)
            .copied()
            .ok_or_else(|| ParseError::new(line, field, "missing"))?;
        position += 1;
        Ok(word)
    };
    sync.time_to_finish = normalise_duration(line, next("finish")?)?;
    if next("speed")? != "speed:" {
        return Err(ParseError::new(line, "speed", "expected \"speed:\""));
    }
    sync.speed = parse_grouped(line, "speed", next("speed")?)?;
    let mut word = next("speedUnit")?;
    if word.starts_with('(') {
        // The average speed in parentheses is not part of mond's data.
        word = next("speedUnit")?;
    }
    if word == "want:" {
        sync.want = Some(parse_grouped(line, "want", next("want")?)?);
        word = next("speedUnit")?;
    }
    sync.speed_unit = match word {
        "K/sec" => "KiloByte/Second",
        "M/sec" => "MegaByte/Second",
        other => {
            return Err(ParseError::new(
                line,
                "speedUnit",
                format!("unknown unit {other:?}"),
            ));
        }
    }
    .to_owned();
    Ok(())
}

/// The status of one device by its connection state, with mond's codes and messages.
pub fn device_status(device: &DeviceInfo) -> (StatusCode, Option<String>) {
    let DeviceInfo::Configured(device) = device else {
        return (StatusCode::Ok, None);
    };
    let (code, text) = match device.connection_state.as_str() {
        "StandAlone" => (StatusCode::Bad, "No network config available"),
        "Disconnecting" => (StatusCode::Bad, "The peer is being disconnected"),
        "TearDown" => (StatusCode::Bad, "The peer is closing the connection"),
        "Unconnected" | "WFConnection" | "WFReportParams" | "Connecting" => (
            StatusCode::TempBad,
            "Trying to establish a network connection",
        ),
        "Timeout" | "BrokenPipe" | "NetworkFailure" | "ProtocolError" => (
            StatusCode::TempBad,
            "Communication problems between the peers",
        ),
        "Connected" | "Established" | "StartingSyncS" | "StartingSyncT" | "WFBitMapS"
        | "WFBitMapT" | "WFSyncUUID" | "SyncSource" | "SyncTarget" | "PausedSyncS"
        | "PausedSyncT" | "VerifyS" | "VerifyT" | "Ahead" | "Behind" => {
            return (StatusCode::Ok, None);
        }
        other => {
            return (
                StatusCode::Unknown,
                Some(format!(
                    "{}: Unknown connection state {other}",
                    device.minor
                )),
            );
        }
    };
    (code, Some(format!("{}: {text}", device.minor)))
}

/// Sets each configured device's instance from confd's minor list.
pub fn pair_instances(status: &mut DrbdStatus, minors: &[DrbdMinor]) {
    for device in &mut status.devices {
        if let DeviceInfo::Configured(device) = device {
            device.instance = minors
                .iter()
                .find(|entry| entry.minor == device.minor)
                .map(|entry| entry.instance.clone());
        }
    }
}

/// mond's report data: status merged with `max`, messages newest device first.
pub fn to_report_data(status: &DrbdStatus) -> Value {
    let mut code = StatusCode::Ok;
    let mut messages = Vec::new();
    for device in &status.devices {
        let (device_code, message) = device_status(device);
        code = code.max(device_code);
        messages.extend(message);
    }
    let message = if messages.is_empty() {
        String::new()
    } else {
        messages.reverse();
        format!("\n{}", messages.join("\n"))
    };
    let data = serde_json::json!({
        "versionInfo": serde_json::to_value(&status.version).unwrap_or(Value::Null),
        "deviceInfos": serde_json::to_value(&status.devices).unwrap_or(Value::Null),
    });
    with_status(data, code, &message)
}

/// Parses `drbdsetup status --json` (DRBD 9) into mond's device model. The first peer
/// connection of each resource stands for "the remote side", since mond's model has one peer.
pub fn parse_drbdsetup_json(text: &str) -> Result<Vec<DeviceInfo>, ParseError> {
    let resources: Value = serde_json::from_str(text)
        .map_err(|error| ParseError::new(error.line(), "json", error.to_string()))?;
    let Value::Array(resources) = resources else {
        return Err(ParseError::new(1, "json", "expected an array of resources"));
    };
    let mut devices = Vec::new();
    for (index, resource) in resources.iter().enumerate() {
        let field = |name: &str| format!("resource {index}: {name}");
        let role = str_field(resource, "role")
            .ok_or_else(|| ParseError::new(0, field("role"), "missing"))?;
        let suspended = resource
            .get("suspended")
            .and_then(Value::as_bool)
            .unwrap_or(false);
        let connection = resource
            .get("connections")
            .and_then(Value::as_array)
            .and_then(|connections| connections.first());
        let Some(volumes) = resource.get("devices").and_then(Value::as_array) else {
            return Err(ParseError::new(0, field("devices"), "missing"));
        };
        for volume in volumes {
            let minor = volume
                .get("minor")
                .and_then(Value::as_u64)
                .ok_or_else(|| ParseError::new(0, field("devices.minor"), "missing"))?;
            let volume_number = volume.get("volume").and_then(Value::as_u64);
            let peer_device = connection
                .and_then(|c| c.get("peer_devices"))
                .and_then(Value::as_array)
                .and_then(|peers| {
                    peers
                        .iter()
                        .find(|peer| peer.get("volume").and_then(Value::as_u64) == volume_number)
                });
            let connection_state = match connection {
                None => "StandAlone".to_owned(),
                Some(connection) => {
                    let state = str_field(connection, "connection-state").unwrap_or("Unknown");
                    let replication = peer_device
                        .and_then(|peer| str_field(peer, "replication-state"))
                        .unwrap_or("Off");
                    if state == "Connected" && !matches!(replication, "Established" | "Off") {
                        replication.to_owned()
                    } else {
                        state.to_owned()
                    }
                }
            };
            let get = |value: Option<&Value>, key: &str| {
                value
                    .and_then(|v| v.get(key))
                    .and_then(Value::as_u64)
                    .unwrap_or(0)
            };
            let perf = PerfIndicators {
                network_send: get(peer_device, "sent"),
                network_receive: get(peer_device, "received"),
                disk_write: get(Some(volume), "written"),
                disk_read: get(Some(volume), "read"),
                activity_log: get(Some(volume), "al-writes"),
                bit_map: get(Some(volume), "bm-writes"),
                local_count: get(Some(volume), "lower-pending"),
                pending: get(peer_device, "pending"),
                unacknowledged: get(peer_device, "unacked"),
                application_pending: get(Some(volume), "upper-pending"),
                epochs: None,
                write_order: str_field(resource, "write-ordering")
                    .map(|order| order.chars().next().map(String::from).unwrap_or_default()),
                out_of_sync: Some(get(peer_device, "out-of-sync")),
            };
            let sync_status = peer_device.and_then(|peer| {
                let percent = peer.get("percent-in-sync").and_then(Value::as_f64)?;
                connection_state.starts_with("Sync").then(|| {
                    let size = get(Some(volume), "size");
                    let out_of_sync = get(Some(peer), "out-of-sync");
                    SyncStatus {
                        percentage: percent,
                        progress: format!("{out_of_sync}/{size}"),
                        progress_unit: "KiloByte".to_owned(),
                        time_to_finish: String::new(),
                        speed: 0,
                        want: None,
                        speed_unit: "KiloByte/Second".to_owned(),
                    }
                })
            });
            let io_flags = format!("{}-----", if suspended { 's' } else { 'r' });
            devices.push(DeviceInfo::Configured(Box::new(Device {
                minor,
                connection_state,
                local_role: role.to_owned(),
                remote_role: connection
                    .and_then(|c| str_field(c, "peer-role"))
                    .unwrap_or("Unknown")
                    .to_owned(),
                local_state: str_field(volume, "disk-state")
                    .unwrap_or("DUnknown")
                    .to_owned(),
                remote_state: peer_device
                    .and_then(|peer| str_field(peer, "peer-disk-state"))
                    .unwrap_or("DUnknown")
                    .to_owned(),
                // drbdsetup's status does not show the protocol.
                replication_protocol: " ".to_owned(),
                io_flags,
                perf_indicators: perf,
                sync_status,
                instance: None,
            })));
        }
    }
    devices.sort_by_key(DeviceInfo::minor);
    Ok(devices)
}

fn str_field<'a>(value: &'a Value, key: &str) -> Option<&'a str> {
    value.get(key).and_then(Value::as_str)
}

/// The `drbd` collector.
#[derive(Debug)]
pub struct Drbd {
    spec: CollectorSpec,
    proc_drbd: PathBuf,
    drbdsetup: PathBuf,
    limits: super::systool::ToolLimits,
    cluster: Option<ViewHandle>,
}

impl Drbd {
    /// The collector reading `<proc_root>/drbd`.
    pub fn new(config: &BuiltinConfig) -> Self {
        Self {
            spec: config.spec("drbd", Some("storage"), ReportKind::Status),
            proc_drbd: config.proc_root.join("drbd"),
            drbdsetup: config.drbdsetup_path.clone(),
            limits: config.tool_limits(),
            cluster: config.cluster.clone(),
        }
    }

    fn expected_minors(&self) -> Vec<DrbdMinor> {
        self.cluster
            .as_ref()
            .and_then(|view| view.current().drbd_minors.clone())
            .unwrap_or_default()
    }
}

impl Collector for Drbd {
    fn pace(&self) -> crate::Pace {
        crate::Pace::OnDemand
    }

    fn spec(&self) -> &CollectorSpec {
        &self.spec
    }

    fn collect(&self) -> CollectFuture<'_> {
        Box::pin(async move {
            let minors = self.expected_minors();
            match self.read_with(&minors).await? {
                Some(status) => Ok(to_report_data(&status)),
                None => {
                    // No DRBD module: fine unless the cluster expects minors on this node.
                    let data = serde_json::json!({"versionInfo": {}, "deviceInfos": []});
                    Ok(if minors.is_empty() {
                        with_status(data, StatusCode::Ok, "")
                    } else {
                        with_status(
                            data,
                            StatusCode::Bad,
                            &format!(
                                "\nDRBD is not loaded but the cluster expects {} minor(s) on this node",
                                minors.len()
                            ),
                        )
                    })
                }
            }
        })
    }
}

impl Drbd {
    /// Reads the DRBD state, paired with instances through confd: `None` when DRBD is not
    /// loaded (no `/proc/drbd`). The agent's signed storage report is built from this.
    pub async fn read(&self) -> Result<Option<DrbdStatus>, CollectError> {
        self.read_with(&self.expected_minors()).await
    }

    async fn read_with(&self, minors: &[DrbdMinor]) -> Result<Option<DrbdStatus>, CollectError> {
        let text = match tokio::fs::read_to_string(&self.proc_drbd).await {
            Ok(text) => text,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(error) => {
                return Err(CollectError::Source {
                    source_name: self.proc_drbd.display().to_string(),
                    reason: error.to_string(),
                });
            }
        };
        let mut status =
            parse_proc_drbd(&text).map_err(|error| error.into_collect_error(&self.proc_drbd))?;
        if status.version.major().is_some_and(|major| major >= 9) {
            let output = run_tool(&self.drbdsetup, &["status", "--json"], self.limits)
                .await
                .map_err(|error: ToolError| CollectError::Source {
                    source_name: "drbdsetup status --json".to_owned(),
                    reason: error.to_string(),
                })?;
            let text = String::from_utf8_lossy(&output);
            status.devices = parse_drbdsetup_json(&text).map_err(|error| CollectError::Parse {
                source_name: "drbdsetup status --json".to_owned(),
                reason: error.to_string(),
            })?;
        }
        pair_instances(&mut status, minors);
        Ok(Some(status))
    }
}

/// The minors of `status` as the signed storage report carries them. Pure.
pub fn to_storage_minors(status: &DrbdStatus) -> Vec<nodecare_protocol::DrbdMinor> {
    status
        .devices
        .iter()
        .map(|device| match device {
            DeviceInfo::Unconfigured { minor, .. } => {
                nodecare_protocol::DrbdMinor::unconfigured(*minor)
            }
            DeviceInfo::Configured(device) => nodecare_protocol::DrbdMinor {
                minor: device.minor,
                instance: device.instance.clone(),
                connection: device.connection_state.clone(),
                local_disk: device.local_state.clone(),
                peer_disk: device.remote_state.clone(),
                role: device.local_role.clone(),
                peer_role: device.remote_role.clone(),
                sync_percent: device
                    .sync_status
                    .as_ref()
                    .map(|sync| sync.percentage)
                    .filter(|percent| percent.is_finite()),
                out_of_sync_kib: device.perf_indicators.out_of_sync,
            },
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_line_variants() {
        let status = parse_proc_drbd(
            "version: 8.3.1 (api:88/proto:86-89)\n 1: cs:Connected ro:Secondary/Primary ds:UpToDate/UpToDate C r---\0\n    ns:0 nr:1 dw:2 dr:3 al:4 bm:5 lo:6 pe:7 ua:8 ap:9 ep:1 wo:f oos:0\n 8: cs:StandAlone ro:Secondary/Unknown ds:UpToDate/DUnknown   r---\n    ns:0 nr:1 dw:2 dr:3 al:4 bm:5 lo:6 pe:7 ua:8 ap:9\n 9: cs:Unconfigured\n",
        )
        .unwrap();
        assert_eq!(status.version.api.as_deref(), Some("88"));
        let DeviceInfo::Configured(first) = &status.devices[0] else {
            panic!()
        };
        assert_eq!(first.io_flags, "r---");
        assert_eq!(first.replication_protocol, "C");
        assert_eq!(first.perf_indicators.application_pending, 9);
        let DeviceInfo::Configured(second) = &status.devices[1] else {
            panic!()
        };
        assert_eq!(second.replication_protocol, " ");
        assert_eq!(status.devices[2].minor(), 9);
        let data = to_report_data(&status);
        assert_eq!(data["status"]["code"], 4);
        assert_eq!(
            data["status"]["message"],
            "\n8: No network config available"
        );
    }

    #[test]
    fn storage_minors_carry_states_progress_and_instances() {
        let mut status = parse_proc_drbd(
            "version: 8.4.11 (api:1/proto:86-101)\n 0: cs:Connected ro:Primary/Secondary ds:UpToDate/UpToDate C r-----\n    ns:1 nr:0 dw:1 dr:1 al:0 bm:0 lo:0 pe:0 ua:0 ap:0 ep:1 wo:f oos:0\n 1: cs:SyncSource ro:Primary/Secondary ds:UpToDate/Inconsistent C r-----\n    ns:1 nr:0 dw:1 dr:1 al:0 bm:0 lo:0 pe:0 ua:0 ap:0 ep:1 wo:f oos:563200\n\t[=====>..............] sync'ed: 45.2% (550/1024)M\n\tfinish: 0:00:10 speed: 30,000 (30,000) K/sec\n 2: cs:Unconfigured\n",
        )
        .unwrap();
        pair_instances(
            &mut status,
            &[DrbdMinor {
                node: "node1".into(),
                minor: 1,
                instance: "inst2".into(),
                iv_name: "disk/0".into(),
                role: "primary".into(),
                peer: "node2".into(),
            }],
        );
        let minors = to_storage_minors(&status);
        assert_eq!(minors.len(), 3);
        assert!(minors[0].is_whole());
        assert_eq!(minors[0].out_of_sync_kib, Some(0));
        assert_eq!(minors[0].instance, None);
        assert!(!minors[1].is_whole());
        assert_eq!(minors[1].instance.as_deref(), Some("inst2"));
        assert_eq!(minors[1].sync_percent, Some(45.2));
        assert_eq!(minors[1].out_of_sync_kib, Some(563_200));
        assert_eq!(
            minors[1].describe(),
            "SyncSource 45.2%, disks UpToDate/Inconsistent"
        );
        assert_eq!(
            (minors[1].role.as_str(), minors[1].peer_role.as_str()),
            ("Primary", "Secondary")
        );
        assert!(minors[2].is_unconfigured());
    }

    #[tokio::test]
    async fn read_without_proc_drbd_is_not_installed() {
        let dir = tempfile::tempdir().unwrap();
        let config = BuiltinConfig {
            proc_root: dir.path().to_owned(),
            ..BuiltinConfig::default()
        };
        let drbd = Drbd::new(&config);
        assert_eq!(drbd.read().await.unwrap(), None);
        std::fs::write(dir.path().join("drbd"), "garbage\n").unwrap();
        assert!(drbd.read().await.is_err());
        std::fs::write(
            dir.path().join("drbd"),
            "version: 8.4.11 (api:1/proto:86-101)\n 0: cs:WFConnection ro:Secondary/Unknown ds:UpToDate/DUnknown C r-----\n",
        )
        .unwrap();
        let status = drbd.read().await.unwrap().unwrap();
        assert_eq!(to_storage_minors(&status)[0].connection, "WFConnection");
    }

    #[test]
    fn errors_name_line_and_field() {
        let error = parse_proc_drbd("version: 8.4.2 (api:1/proto:86-101)\n 0: cs:Connected ro:Primary ds:UpToDate/UpToDate C r-----\n").unwrap_err();
        assert_eq!((error.line, error.field.as_str()), (2, "ro"));
        let error =
            parse_proc_drbd(" 0: cs:Connected ro:A/B ds:C/D C r--\n    ns:x\n").unwrap_err();
        assert_eq!(error.line, 2);
        let error = parse_proc_drbd("    ns:0 nr:0\n").unwrap_err();
        assert_eq!((error.line, error.field.as_str()), (1, "ns"));
        let error = parse_proc_drbd("garbage\n").unwrap_err();
        assert_eq!(error.field, "line");
    }

    #[test]
    fn unknown_states_are_status_unknown() {
        let status = parse_proc_drbd(" 0: cs:Weird ro:A/B ds:C/D C r--\n").unwrap();
        assert_eq!(
            device_status(&status.devices[0]),
            (
                StatusCode::Unknown,
                Some("0: Unknown connection state Weird".to_owned())
            )
        );
    }
}
