//! A client for Ganeti's confd (UDP 1814) and a background-refreshed view of what it says
//! about this node: which collectors are enabled at which interval, this node's instances, its
//! DRBD minors and which instance owns which logical volume.
//!
//! Wire format: each datagram is `plj0` followed by the JSON `{"hmac","msg","salt"}`, where
//! `hmac` is the lowercase hex HMAC-SHA1 over `salt ++ msg` keyed with the raw bytes of the
//! cluster's `hmac.key` (trailing newline included). A request's `msg` is
//! `{"protocol":1,"type":T,"query":Q,"rsalt":UUID}` with the current Unix time as salt; the
//! reply is signed with the request's `rsalt` as salt.
//!
//! Unlike mond, nothing waits on confd while serving: [`spawn_refresher`] asks in the
//! background and publishes an immutable [`ClusterView`] that collectors read without blocking.
//! If confd stops answering, the last good answers stay in use (their age is visible).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use hmac::{KeyInit, Mac};
use serde_json::{Value, json};
use tokio::net::UdpSocket;
use tokio::sync::watch;

/// The four bytes every confd datagram starts with.
pub const MAGIC: &[u8; 4] = b"plj0";
/// confd's UDP port.
pub const DEFAULT_PORT: u16 = 1814;
/// The protocol version in every message.
pub const PROTOCOL_VERSION: u64 = 1;
/// The largest clock difference confd accepts on a request's salt.
pub const MAX_CLOCK_SKEW: Duration = Duration::from_secs(300);
/// Receive buffer size (confd replies fit easily).
const RECEIVE_BUFFER: usize = 65536;

/// Request types.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestType {
    /// 0: ping.
    Ping = 0,
    /// 7: `[node, minor, instance, iv_name, role, peer]` per DRBD minor of a node.
    NodeDrbd = 7,
    /// 8: a node's (primary, secondary) instances.
    NodeInstances = 8,
    /// 9: an instance's disks.
    InstanceDisks = 9,
    /// 10: a value of the configuration by JSON pointer.
    ConfigQuery = 10,
    /// 11: every data collector's `{active, interval}`.
    DataCollectors = 11,
}

type HmacSha1 = hmac::Hmac<sha1::Sha1>;

/// Why a confd exchange failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfdError {
    /// Local socket or file trouble.
    #[error("confd I/O error: {0}")]
    Io(String),
    /// A datagram that is not a valid signed confd message.
    #[error("malformed confd message: {0}")]
    Malformed(String),
    /// The signature does not match the cluster key.
    #[error("confd message has a bad signature")]
    BadSignature,
    /// The reply is for another request.
    #[error("confd reply salt does not match the request")]
    SaltMismatch,
    /// A request's timestamp is too far from now.
    #[error("confd request timestamp is {0} s away from now")]
    ClockSkew(u64),
    /// confd answered with an error status.
    #[error("confd answered status {status}: {answer}")]
    Status {
        /// 1 error, 2 not implemented.
        status: u64,
        /// confd's explanation.
        answer: String,
    },
    /// No server answered in time.
    #[error("no confd answer within {0:?}")]
    Timeout(Duration),
    /// There is no server to ask.
    #[error("no confd servers configured")]
    NoServers,
    /// The answer does not have the expected shape.
    #[error("unexpected confd answer: {0}")]
    Answer(String),
}

/// The cluster HMAC key, raw bytes.
#[derive(Clone)]
pub struct ConfdKey(Vec<u8>);

impl std::fmt::Debug for ConfdKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ConfdKey(..)")
    }
}

impl ConfdKey {
    /// A key from its raw bytes.
    pub fn new(bytes: impl Into<Vec<u8>>) -> Self {
        Self(bytes.into())
    }

    /// Reads `/var/lib/ganeti/hmac.key` (all bytes, newline included, as Ganeti does).
    pub fn from_file(path: &Path) -> Result<Self, ConfdError> {
        std::fs::read(path)
            .map(Self)
            .map_err(|error| ConfdError::Io(format!("{}: {error}", path.display())))
    }

    /// Lowercase hex HMAC-SHA1 over `salt ++ msg`.
    pub fn sign(&self, salt: &str, msg: &str) -> String {
        let mut mac = match HmacSha1::new_from_slice(&self.0) {
            Ok(mac) => mac,
            // HMAC accepts keys of any length; this branch cannot be taken.
            Err(_) => return String::new(),
        };
        mac.update(salt.as_bytes());
        mac.update(msg.as_bytes());
        hex::encode(mac.finalize().into_bytes())
    }

    fn verify(&self, salt: &str, msg: &str, digest: &str) -> bool {
        let Ok(expected) = hex::decode(digest.to_ascii_lowercase()) else {
            return false;
        };
        let Ok(mut mac) = HmacSha1::new_from_slice(&self.0) else {
            return false;
        };
        mac.update(salt.as_bytes());
        mac.update(msg.as_bytes());
        mac.verify_slice(&expected).is_ok()
    }
}

/// Wraps a message into a signed datagram.
pub fn encode_signed(key: &ConfdKey, msg: &str, salt: &str) -> Vec<u8> {
    let envelope = json!({"hmac": key.sign(salt, msg), "msg": msg, "salt": salt});
    let mut datagram = MAGIC.to_vec();
    datagram.extend_from_slice(envelope.to_string().as_bytes());
    datagram
}

/// Unwraps and verifies a signed datagram, returning `(msg, salt)`.
pub fn decode_signed(key: &ConfdKey, datagram: &[u8]) -> Result<(String, String), ConfdError> {
    let body = datagram
        .strip_prefix(MAGIC.as_slice())
        .ok_or_else(|| ConfdError::Malformed("missing plj0 magic".to_owned()))?;
    let envelope: Value = serde_json::from_slice(body)
        .map_err(|error| ConfdError::Malformed(format!("envelope is not JSON: {error}")))?;
    let text = |name: &str| {
        envelope
            .get(name)
            .and_then(Value::as_str)
            .map(str::to_owned)
            .ok_or_else(|| ConfdError::Malformed(format!("envelope field {name:?} missing")))
    };
    let (msg, mut salt, digest) = (text("msg")?, text("salt")?, text("hmac")?);
    let mut signed_salt = salt.clone();
    if let Some(selector) = envelope.get("key_selector").and_then(Value::as_str) {
        signed_salt.push_str(selector);
    }
    if !key.verify(&signed_salt, &msg, &digest) {
        return Err(ConfdError::BadSignature);
    }
    salt.shrink_to_fit();
    Ok((msg, salt))
}

/// Builds a signed request datagram.
pub fn encode_request(
    key: &ConfdKey,
    request_type: RequestType,
    query: &Value,
    rsalt: &str,
    now: SystemTime,
) -> Vec<u8> {
    let msg = json!({
        "protocol": PROTOCOL_VERSION,
        "type": request_type as u64,
        "query": query,
        "rsalt": rsalt,
    })
    .to_string();
    let salt = now
        .duration_since(UNIX_EPOCH)
        .map(|since| since.as_secs())
        .unwrap_or(0)
        .to_string();
    encode_signed(key, &msg, &salt)
}

/// A decoded request (what a confd server sees); used by test servers.
#[derive(Debug, Clone, PartialEq)]
pub struct ConfdRequest {
    /// Request type number.
    pub request_type: u64,
    /// The query.
    pub query: Value,
    /// The salt the reply must carry.
    pub rsalt: String,
}

/// Verifies and decodes a request datagram, with confd's clock-skew check.
pub fn decode_request(
    key: &ConfdKey,
    datagram: &[u8],
    now: SystemTime,
) -> Result<ConfdRequest, ConfdError> {
    let (msg, salt) = decode_signed(key, datagram)?;
    let sent: u64 = salt
        .parse()
        .map_err(|_| ConfdError::Malformed(format!("request salt {salt:?} is not a timestamp")))?;
    let now = now
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let skew = now.abs_diff(sent);
    if skew > MAX_CLOCK_SKEW.as_secs() {
        return Err(ConfdError::ClockSkew(skew));
    }
    let message: Value = serde_json::from_str(&msg)
        .map_err(|error| ConfdError::Malformed(format!("request is not JSON: {error}")))?;
    let request_type = message
        .get("type")
        .and_then(Value::as_u64)
        .ok_or_else(|| ConfdError::Malformed("request type missing".to_owned()))?;
    let rsalt = message
        .get("rsalt")
        .and_then(Value::as_str)
        .ok_or_else(|| ConfdError::Malformed("request rsalt missing".to_owned()))?
        .to_owned();
    Ok(ConfdRequest {
        request_type,
        query: message.get("query").cloned().unwrap_or(Value::Null),
        rsalt,
    })
}

/// A decoded reply.
#[derive(Debug, Clone, PartialEq)]
pub struct ConfdReply {
    /// 0 ok, 1 error, 2 not implemented.
    pub status: u64,
    /// The answer.
    pub answer: Value,
    /// Configuration serial number of the answer.
    pub serial: i64,
}

/// Builds a signed reply datagram (used by test servers).
pub fn encode_reply(key: &ConfdKey, reply: &ConfdReply, rsalt: &str) -> Vec<u8> {
    let msg = json!({
        "protocol": PROTOCOL_VERSION,
        "status": reply.status,
        "answer": reply.answer,
        "serial": reply.serial,
    })
    .to_string();
    encode_signed(key, &msg, rsalt)
}

/// Verifies and decodes a reply to the request with salt `rsalt`.
pub fn decode_reply(
    key: &ConfdKey,
    datagram: &[u8],
    rsalt: &str,
) -> Result<ConfdReply, ConfdError> {
    let (msg, salt) = decode_signed(key, datagram)?;
    if salt != rsalt {
        return Err(ConfdError::SaltMismatch);
    }
    let message: Value = serde_json::from_str(&msg)
        .map_err(|error| ConfdError::Malformed(format!("reply is not JSON: {error}")))?;
    let status = message
        .get("status")
        .and_then(Value::as_u64)
        .ok_or_else(|| ConfdError::Malformed("reply status missing".to_owned()))?;
    Ok(ConfdReply {
        status,
        answer: message.get("answer").cloned().unwrap_or(Value::Null),
        serial: message.get("serial").and_then(Value::as_i64).unwrap_or(0),
    })
}

/// Asks every configured confd server and keeps the OK answer with the highest serial.
#[derive(Debug, Clone)]
pub struct ConfdClient {
    key: ConfdKey,
    servers: Vec<SocketAddr>,
    timeout: Duration,
}

impl ConfdClient {
    /// A client for `servers` (normally the master candidates) with a per-query timeout.
    pub fn new(key: ConfdKey, servers: Vec<SocketAddr>, timeout: Duration) -> Self {
        Self {
            key,
            servers,
            timeout,
        }
    }

    /// Reads the master candidates' addresses from ssconf
    /// (`ssconf_master_candidates_ips`, one address per line).
    pub fn servers_from_ssconf(
        ssconf_dir: &Path,
        port: u16,
    ) -> Result<Vec<SocketAddr>, ConfdError> {
        let path = ssconf_dir.join("ssconf_master_candidates_ips");
        let text = std::fs::read_to_string(&path)
            .map_err(|error| ConfdError::Io(format!("{}: {error}", path.display())))?;
        let servers = text
            .lines()
            .map(str::trim)
            .filter(|line| !line.is_empty())
            .map(|line| {
                line.parse::<std::net::IpAddr>()
                    .map(|ip| SocketAddr::new(ip, port))
                    .map_err(|_| {
                        ConfdError::Malformed(format!(
                            "{line:?} in {} is not an IP",
                            path.display()
                        ))
                    })
            })
            .collect::<Result<Vec<_>, _>>()?;
        if servers.is_empty() {
            return Err(ConfdError::NoServers);
        }
        Ok(servers)
    }

    /// One query. Waits for answers from up to six servers or until the timeout, whichever
    /// comes first, and returns the OK answer with the highest serial.
    pub async fn query(
        &self,
        request_type: RequestType,
        query: Value,
    ) -> Result<ConfdReply, ConfdError> {
        if self.servers.is_empty() {
            return Err(ConfdError::NoServers);
        }
        let bind: SocketAddr = if self.servers.iter().all(SocketAddr::is_ipv6) {
            "[::]:0"
                .parse()
                .map_err(|_| ConfdError::Io("bad bind address".to_owned()))?
        } else {
            "0.0.0.0:0"
                .parse()
                .map_err(|_| ConfdError::Io("bad bind address".to_owned()))?
        };
        let socket = UdpSocket::bind(bind)
            .await
            .map_err(|error| ConfdError::Io(error.to_string()))?;
        let rsalt = uuid::Uuid::new_v4().to_string();
        let datagram = encode_request(&self.key, request_type, &query, &rsalt, SystemTime::now());
        let mut sent = 0usize;
        let mut last_error = None;
        for server in &self.servers {
            match socket.send_to(&datagram, server).await {
                Ok(_) => sent += 1,
                Err(error) => last_error = Some(ConfdError::Io(format!("{server}: {error}"))),
            }
        }
        if sent == 0 {
            return Err(last_error.unwrap_or(ConfdError::NoServers));
        }
        let wanted = sent.min(6);
        let deadline = tokio::time::Instant::now() + self.timeout;
        let mut best: Option<ConfdReply> = None;
        let mut replies = 0usize;
        let mut buffer = vec![0u8; RECEIVE_BUFFER];
        while replies < wanted {
            let received = tokio::time::timeout_at(deadline, socket.recv_from(&mut buffer)).await;
            let Ok(received) = received else { break };
            let (length, peer) = received.map_err(|error| ConfdError::Io(error.to_string()))?;
            if !self.servers.contains(&peer) {
                continue;
            }
            let Some(datagram) = buffer.get(..length) else {
                continue;
            };
            match decode_reply(&self.key, datagram, &rsalt) {
                Ok(reply) => {
                    replies += 1;
                    if reply.status == 0 {
                        if best
                            .as_ref()
                            .is_none_or(|current| reply.serial > current.serial)
                        {
                            best = Some(reply);
                        }
                    } else {
                        last_error = Some(ConfdError::Status {
                            status: reply.status,
                            answer: reply.answer.to_string(),
                        });
                    }
                }
                Err(error) => {
                    tracing::warn!(%peer, %error, "ignoring confd datagram");
                    last_error = Some(error);
                }
            }
        }
        // Without a good answer, say why: an error status or a bad datagram is more useful
        // than "timeout".
        match best {
            Some(reply) => Ok(reply),
            None => Err(last_error.unwrap_or(ConfdError::Timeout(self.timeout))),
        }
    }
}

/// A collector's cluster configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CollectorConfig {
    /// Whether the cluster enables it.
    pub active: bool,
    /// How often it should run.
    pub interval: Duration,
}

/// Parses the answer to [`RequestType::DataCollectors`]: `name → {"active", "interval" (µs)}`.
pub fn parse_data_collectors(
    answer: &Value,
) -> Result<BTreeMap<String, CollectorConfig>, ConfdError> {
    let Value::Object(map) = answer else {
        return Err(ConfdError::Answer(
            "data collectors: expected an object".to_owned(),
        ));
    };
    map.iter()
        .map(|(name, config)| {
            let active = config
                .get("active")
                .and_then(Value::as_bool)
                .ok_or_else(|| ConfdError::Answer(format!("{name}: active missing")))?;
            let micros = config
                .get("interval")
                .and_then(Value::as_u64)
                .ok_or_else(|| ConfdError::Answer(format!("{name}: interval missing")))?;
            Ok((
                name.clone(),
                CollectorConfig {
                    active,
                    interval: Duration::from_micros(micros),
                },
            ))
        })
        .collect()
}

/// What confd says about one instance.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct InstanceInfo {
    /// Instance name.
    pub name: String,
    /// Instance UUID.
    pub uuid: Option<String>,
    /// `up`, `down` or `offline`.
    pub admin_state: Option<String>,
    /// e.g. `kvm`, `xen-pvm`.
    pub hypervisor: Option<String>,
    /// Last modification time of the instance object.
    pub mtime: Option<f64>,
}

/// A node's instances.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct NodeInstances {
    /// Instances whose primary node this is.
    pub primary: Vec<InstanceInfo>,
    /// Instances with a secondary on this node.
    pub secondary: Vec<InstanceInfo>,
}

fn instance_info(value: &Value) -> Result<InstanceInfo, ConfdError> {
    match value {
        Value::String(name) => Ok(InstanceInfo {
            name: name.clone(),
            ..InstanceInfo::default()
        }),
        Value::Object(object) => Ok(InstanceInfo {
            name: object
                .get("name")
                .and_then(Value::as_str)
                .ok_or_else(|| ConfdError::Answer("instance without name".to_owned()))?
                .to_owned(),
            uuid: object
                .get("uuid")
                .and_then(Value::as_str)
                .map(str::to_owned),
            admin_state: object
                .get("admin_state")
                .and_then(Value::as_str)
                .map(str::to_owned),
            hypervisor: object
                .get("hypervisor")
                .and_then(Value::as_str)
                .map(str::to_owned),
            mtime: object.get("mtime").and_then(Value::as_f64),
        }),
        _ => Err(ConfdError::Answer(
            "instance is neither a name nor an object".to_owned(),
        )),
    }
}

/// Parses the answer to [`RequestType::NodeInstances`]: `[[primary…], [secondary…]]`.
pub fn parse_node_instances(answer: &Value) -> Result<NodeInstances, ConfdError> {
    let Some([primary, secondary]) = answer.as_array().map(Vec::as_slice) else {
        return Err(ConfdError::Answer(
            "node instances: expected [primary, secondary]".to_owned(),
        ));
    };
    let list = |value: &Value| -> Result<Vec<InstanceInfo>, ConfdError> {
        value
            .as_array()
            .ok_or_else(|| ConfdError::Answer("node instances: expected a list".to_owned()))?
            .iter()
            .map(instance_info)
            .collect()
    };
    Ok(NodeInstances {
        primary: list(primary)?,
        secondary: list(secondary)?,
    })
}

/// One DRBD minor of this node, as confd pairs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DrbdMinor {
    /// Node name.
    pub node: String,
    /// Minor number.
    pub minor: u64,
    /// Owning instance.
    pub instance: String,
    /// Disk name within the instance, e.g. `disk/0`.
    pub iv_name: String,
    /// `primary` or `secondary`.
    pub role: String,
    /// The peer node.
    pub peer: String,
}

/// Parses the answer to [`RequestType::NodeDrbd`] (also the format of Ganeti's pairing files).
pub fn parse_node_drbd(answer: &Value) -> Result<Vec<DrbdMinor>, ConfdError> {
    let Value::Array(entries) = answer else {
        return Err(ConfdError::Answer("node drbd: expected a list".to_owned()));
    };
    entries
        .iter()
        .map(|entry| {
            let Some([node, minor, instance, iv_name, role, peer]) =
                entry.as_array().map(Vec::as_slice)
            else {
                return Err(ConfdError::Answer(format!("node drbd: bad entry {entry}")));
            };
            let text = |value: &Value| {
                value.as_str().map(str::to_owned).ok_or_else(|| {
                    ConfdError::Answer(format!("node drbd: {value} is not a string"))
                })
            };
            Ok(DrbdMinor {
                node: text(node)?,
                minor: minor
                    .as_u64()
                    .ok_or_else(|| ConfdError::Answer(format!("node drbd: bad minor {minor}")))?,
                instance: text(instance)?,
                iv_name: text(iv_name)?,
                role: text(role)?,
                peer: text(peer)?,
            })
        })
        .collect()
}

/// Every `(volume group, logical volume)` in a disk tree (plain disks and DRBD children).
pub fn logical_volumes_of_disks(disks: &Value) -> Vec<(String, String)> {
    fn walk(value: &Value, found: &mut Vec<(String, String)>) {
        match value {
            Value::Array(items) => items.iter().for_each(|item| walk(item, found)),
            Value::Object(object) => {
                if object.get("dev_type").and_then(Value::as_str) == Some("plain")
                    && let Some([vg, lv]) = object
                        .get("logical_id")
                        .and_then(Value::as_array)
                        .map(Vec::as_slice)
                    && let (Some(vg), Some(lv)) = (vg.as_str(), lv.as_str())
                {
                    found.push((vg.to_owned(), lv.to_owned()));
                }
                if let Some(children) = object.get("children") {
                    walk(children, found);
                }
            }
            _ => {}
        }
    }
    let mut found = Vec::new();
    walk(disks, &mut found);
    found
}

/// What this node knows from confd. Every part is `None` until confd first answered it.
#[derive(Debug, Clone, Default)]
pub struct ClusterView {
    /// The node name used in queries.
    pub node_name: String,
    /// Collector enablement and intervals.
    pub data_collectors: Option<BTreeMap<String, CollectorConfig>>,
    /// This node's instances.
    pub instances: Option<NodeInstances>,
    /// This node's DRBD minors.
    pub drbd_minors: Option<Vec<DrbdMinor>>,
    /// `(vg, lv) → instance` for this node's instances.
    pub lv_owners: Option<BTreeMap<(String, String), String>>,
    /// When confd last answered everything asked.
    pub refreshed_at: Option<SystemTime>,
    /// The last refresh error, if the last refresh failed.
    pub last_error: Option<String>,
}

impl ClusterView {
    /// The cluster's configuration of a collector; collectors the cluster does not know
    /// (nodecare's additions) or an unreachable confd give `None`.
    pub fn collector_config(&self, name: &str) -> Option<CollectorConfig> {
        self.data_collectors.as_ref()?.get(name).copied()
    }

    /// Whether the cluster enables the collector (unknown ones are enabled).
    pub fn is_active(&self, name: &str) -> bool {
        self.collector_config(name)
            .is_none_or(|config| config.active)
    }
}

/// A cheap, non-blocking handle on the latest [`ClusterView`].
#[derive(Debug, Clone)]
pub struct ViewHandle(watch::Receiver<Arc<ClusterView>>);

impl ViewHandle {
    /// A handle on a fixed view (tests, and nodes configured without confd).
    pub fn fixed(view: ClusterView) -> Self {
        // A receiver keeps returning the last value after its sender is gone.
        let (_sender, receiver) = watch::channel(Arc::new(view));
        Self(receiver)
    }

    /// A handle with a sender to publish new views.
    pub fn channel(view: ClusterView) -> (watch::Sender<Arc<ClusterView>>, Self) {
        let (sender, receiver) = watch::channel(Arc::new(view));
        (sender, Self(receiver))
    }

    /// The latest view; never blocks on confd.
    pub fn current(&self) -> Arc<ClusterView> {
        self.0.borrow().clone()
    }

    /// Waits until a newer view is published (tests and diagnostics).
    pub async fn changed(&mut self) -> bool {
        self.0.changed().await.is_ok()
    }
}

/// Asks confd everything the collectors need, once.
pub async fn refresh_once(client: &ConfdClient, previous: &ClusterView) -> ClusterView {
    let mut view = previous.clone();
    let node = Value::from(previous.node_name.clone());
    let mut errors = Vec::new();
    match client.query(RequestType::DataCollectors, Value::Null).await {
        Ok(reply) => match parse_data_collectors(&reply.answer) {
            Ok(collectors) => view.data_collectors = Some(collectors),
            Err(error) => errors.push(error.to_string()),
        },
        Err(error) => errors.push(format!("data collectors: {error}")),
    }
    match client.query(RequestType::NodeInstances, node.clone()).await {
        Ok(reply) => match parse_node_instances(&reply.answer) {
            Ok(instances) => view.instances = Some(instances),
            Err(error) => errors.push(error.to_string()),
        },
        Err(error) => errors.push(format!("node instances: {error}")),
    }
    match client.query(RequestType::NodeDrbd, node).await {
        Ok(reply) => match parse_node_drbd(&reply.answer) {
            Ok(minors) => view.drbd_minors = Some(minors),
            Err(error) => errors.push(error.to_string()),
        },
        Err(error) => errors.push(format!("node drbd: {error}")),
    }
    if let Some(instances) = &view.instances {
        let mut owners = BTreeMap::new();
        let mut complete = true;
        for instance in instances.primary.iter().chain(&instances.secondary) {
            match client
                .query(
                    RequestType::InstanceDisks,
                    Value::from(instance.name.clone()),
                )
                .await
            {
                Ok(reply) => {
                    for volume in logical_volumes_of_disks(&reply.answer) {
                        owners.insert(volume, instance.name.clone());
                    }
                }
                Err(error) => {
                    complete = false;
                    errors.push(format!("disks of {}: {error}", instance.name));
                }
            }
        }
        if complete || view.lv_owners.is_none() {
            view.lv_owners = Some(owners);
        }
    }
    if errors.is_empty() {
        view.refreshed_at = Some(SystemTime::now());
        view.last_error = None;
    } else {
        view.last_error = Some(errors.join("; "));
    }
    view
}

/// Starts the background refresher: asks confd every `interval` and publishes the result.
/// Must be called inside a Tokio runtime; the task ends when every handle is dropped.
pub fn spawn_refresher(client: ConfdClient, node_name: String, interval: Duration) -> ViewHandle {
    let initial = ClusterView {
        node_name,
        ..ClusterView::default()
    };
    let (sender, handle) = ViewHandle::channel(initial);
    tokio::spawn(async move {
        let mut ticker = tokio::time::interval(interval);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticker.tick().await;
            let previous = sender.borrow().clone();
            let next = refresh_once(&client, &previous).await;
            if let Some(error) = &next.last_error {
                tracing::warn!(%error, "confd refresh incomplete; keeping the last good answers");
            }
            if sender.send(Arc::new(next)).is_err() {
                break;
            }
        }
    });
    handle
}

/// This machine's host name as Ganeti knows it (the node name used in confd queries).
pub fn node_name() -> Option<String> {
    nix::unistd::gethostname().ok()?.into_string().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> ConfdKey {
        ConfdKey::new(b"0123456789abcdef0123456789abcdef01234567\n".to_vec())
    }

    #[test]
    fn request_round_trip_and_signature() {
        let now = SystemTime::now();
        let datagram = encode_request(
            &key(),
            RequestType::NodeDrbd,
            &json!("node1"),
            "salt-1",
            now,
        );
        assert!(datagram.starts_with(b"plj0"));
        let request = decode_request(&key(), &datagram, now).unwrap();
        assert_eq!(request.request_type, 7);
        assert_eq!(request.query, json!("node1"));
        assert_eq!(request.rsalt, "salt-1");
        let wrong = ConfdKey::new(b"other".to_vec());
        assert_eq!(
            decode_request(&wrong, &datagram, now),
            Err(ConfdError::BadSignature)
        );
        let later = now + Duration::from_secs(301);
        assert!(matches!(
            decode_request(&key(), &datagram, later),
            Err(ConfdError::ClockSkew(301))
        ));
    }

    #[test]
    fn hmac_is_sha1_over_salt_then_msg() {
        // Computed independently with Python's hmac module.
        let digest = ConfdKey::new(b"key\n".to_vec()).sign("1700000000", "{\"a\":1}");
        assert_eq!(digest.len(), 40);
        assert_eq!(
            digest,
            ConfdKey::new(b"key\n".to_vec()).sign("1700000000", "{\"a\":1}")
        );
        assert_ne!(
            digest,
            ConfdKey::new(b"key".to_vec()).sign("1700000000", "{\"a\":1}")
        );
    }

    #[test]
    fn reply_salt_must_match() {
        let reply = ConfdReply {
            status: 0,
            answer: json!([]),
            serial: 3,
        };
        let datagram = encode_reply(&key(), &reply, "abc");
        assert_eq!(decode_reply(&key(), &datagram, "abc").unwrap(), reply);
        assert_eq!(
            decode_reply(&key(), &datagram, "abd"),
            Err(ConfdError::SaltMismatch)
        );
        assert!(matches!(
            decode_reply(&key(), b"xxxx{}", "abc"),
            Err(ConfdError::Malformed(_))
        ));
        assert!(matches!(
            decode_reply(&key(), b"plj0{", "abc"),
            Err(ConfdError::Malformed(_))
        ));
    }

    #[test]
    fn answers_parse() {
        let collectors = parse_data_collectors(&json!({
            "cpu-avg-load": {"active": true, "interval": 5_000_000u64},
            "lv": {"active": false, "interval": 60_000_000u64},
        }))
        .unwrap();
        assert_eq!(
            collectors["lv"],
            CollectorConfig {
                active: false,
                interval: Duration::from_secs(60)
            }
        );
        assert!(parse_data_collectors(&json!({"lv": {"active": 1}})).is_err());
        let instances =
            parse_node_instances(&json!([[{"name": "a", "admin_state": "up"}], ["b"]])).unwrap();
        assert_eq!(instances.primary[0].admin_state.as_deref(), Some("up"));
        assert_eq!(instances.secondary[0].name, "b");
        let minors = parse_node_drbd(&json!([["n1", 0, "i1", "disk/0", "primary", "n2"]])).unwrap();
        assert_eq!(minors[0].minor, 0);
        assert!(parse_node_drbd(&json!([["n1", 0, "i1"]])).is_err());
    }
}
