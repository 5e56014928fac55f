//! The API's HTTP server: its own accept loop over hyper, so that hostile clients cannot hold
//! the coordinator's descriptors or memory.
//!
//! - **Connection cap** ([`ServerLimits::max_connections`], default 1024, far below the unit's
//!   `LimitNOFILE=65536`, so that descriptors stay for the agents' reads and watches): a
//!   connection over the cap is answered `503` with `Retry-After: 1` (one non-blocking write) and
//!   closed at once. One client address holds at most [`ServerLimits::max_per_client`]
//!   (default 32) of them, so that one host cannot take every connection from the operators, the
//!   CLI and Prometheus. An eighth of them ([`ServerLimits::reserved`]) is kept for the addresses
//!   operators authenticated from ([`Operators`]): a connection is placed by its address when it
//!   is accepted, so that many addresses together never take every connection from the
//!   operators.
//! - **Local socket** ([`serve_local`]): the CLI on the master reaches the same API over a Unix
//!   socket (`api_socket`, `/run/nodecare/coordinator.sock`) with connections of its own, for
//!   root, the coordinator's own user and the members of `api_socket_group` only (the caller's
//!   credentials, `SO_PEERCRED`). Such a caller is an operator who may write without a password
//!   ([`local_caller`]) and is never throttled, so that floods and password guessing on the
//!   network never lock the master's operators out.
//! - **Header timeout** ([`ServerLimits::header_timeout`], 10 s): a request head not complete
//!   within it closes the connection (slowloris); it also bounds a kept-alive connection idle
//!   between requests.
//! - **Connection lifetime** ([`ServerLimits::connection_lifetime`], 60 s): after it the connection
//!   is shut down gracefully (the request in flight finishes, at most 10 s more), so that no
//!   client, reading its answer slowly or not at all, holds a connection longer.
//! - **Body** ([`guard`]): every request body is read within [`ServerLimits::body_timeout`]
//!   (10 s, else `408`) and up to [`ServerLimits::max_body_bytes`] (64 KiB, else `413`).
//! - **Writes** ([`guard`]): a write (any method but GET, HEAD, OPTIONS) from another site is
//!   refused (`403`): `Sec-Fetch-Site` other than `same-origin` or `none`, or an `Origin` that does
//!   not name the `Host` the request was sent to. A JSON API write with a body must say
//!   `Content-Type: application/json` (`415`); the web page's forms (`/ui/admin/…`) have their
//!   own checks ([`crate::ui`]). The reads with a cost ([`COSTLY_READS`]: `explain` and
//!   `what-if`, JSON and pages) are refused from another site the same way, so that no other
//!   site's page makes a browser decode the flight recorder or run a what-if.
//! - **Password guessing** ([`crate::auth::Throttle`]): failed basic-auth attempts are counted per
//!   client address and user, and per user, and logged (rate-limited); past 10 failures of one
//!   user from one address in a minute, that address is answered `429` with `Retry-After` for
//!   that user until the minute ends; past 30 failures of a user from every address, each
//!   attempt for it waits 1 s before it is checked (slowed, never refused: the right password
//!   from an address that is not guessing still gets in).
//!
//! An accept error (e.g. `EMFILE`) is counted, logged at most once a minute and retried after
//! 50 ms, never in a busy loop.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::http::{HeaderMap, Method, Request, StatusCode, header};
use axum::response::{IntoResponse, Response};
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use nodecare_daemon::slots::{Full, Share, Slots};
use tokio::net::{TcpListener, UnixListener};
use tokio::task::JoinSet;

use crate::api::error;
use crate::board::Board;
pub use crate::callers::{LocalCaller, Operators, local_caller};

/// The server's limits (see the module documentation).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServerLimits {
    /// Most connections open at once.
    pub max_connections: usize,
    /// Most connections open at once from one client address.
    pub max_per_client: usize,
    /// Connections of `max_connections` only the addresses operators authenticated from
    /// ([`Operators`]) may take.
    pub reserved: usize,
    /// Longest time to receive a request head (and longest idle time between requests).
    pub header_timeout: Duration,
    /// Longest time to receive a request body.
    pub body_timeout: Duration,
    /// Largest request body, in bytes.
    pub max_body_bytes: usize,
    /// Longest life of a connection before it is shut down gracefully.
    pub connection_lifetime: Duration,
    /// Every read needs a user of the users file too (`api_reads_need_login`), not only writes;
    /// the local socket's callers excepted.
    pub reads_need_login: bool,
}

/// Default [`ServerLimits::max_connections`].
pub use crate::config::DEFAULT_MAX_CONNECTIONS;
/// Default [`ServerLimits::max_per_client`].
pub const DEFAULT_MAX_PER_CLIENT: usize = 32;
/// Default [`ServerLimits::max_body_bytes`].
pub const MAX_BODY_BYTES: usize = 64 * 1024;

impl ServerLimits {
    /// The defaults with at most `max_connections` connections, an eighth of them reserved.
    pub fn with_max_connections(max_connections: usize) -> Self {
        Self {
            max_connections,
            reserved: max_connections / 8,
            ..Self::default()
        }
    }
}

impl Default for ServerLimits {
    fn default() -> Self {
        Self {
            max_connections: DEFAULT_MAX_CONNECTIONS,
            max_per_client: DEFAULT_MAX_PER_CLIENT,
            reserved: DEFAULT_MAX_CONNECTIONS / 8,
            header_timeout: Duration::from_secs(10),
            body_timeout: Duration::from_secs(10),
            max_body_bytes: MAX_BODY_BYTES,
            reads_need_login: false,
            connection_lifetime: Duration::from_secs(60),
        }
    }
}

/// How long a connection shut down at the end of its life may still finish its request.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

/// The answer to a connection over the cap, written without waiting.
const OVER_CAP: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\nRetry-After: 1\r\nContent-Type: application/json\r\nContent-Length: 62\r\nConnection: close\r\n\r\n{\"code\":503,\"message\":\"too many connections to the coordinator\"}";

/// Serves `app` (the router of [`crate::http::router`], with [`guard`] applied) on `listener`
/// until `shutdown` completes, within `limits`; `board` counts what is refused.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    limits: ServerLimits,
    board: Arc<Board>,
    shutdown: impl Future<Output = ()> + Send,
) {
    let slots = Slots::with_reserve(
        limits.max_connections,
        limits.max_per_client,
        limits.reserved,
    );
    let mut connections = JoinSet::new();
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let mut accept_errors = crate::auth::LogLimiter::new(Duration::from_secs(60));
    let mut over_cap = crate::auth::LogLimiter::new(Duration::from_secs(60));
    let mut over_client_cap = crate::auth::LogLimiter::new(Duration::from_secs(60));
    tokio::pin!(shutdown);
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = &mut shutdown => break,
            Some(_) = connections.join_next(), if !connections.is_empty() => continue,
        };
        let (stream, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(error) => {
                board.metrics.api_refused("accept_error");
                if let Some(suppressed) = accept_errors.allow() {
                    tracing::warn!(%error, suppressed, "the API cannot accept a connection (descriptors exhausted?); retrying");
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let share = if board.operators.knows(peer.ip()) {
            Share::Reserved
        } else {
            Share::Shared
        };
        let slot = match slots.try_take_as(peer.ip(), share) {
            Ok(slot) => slot,
            Err(full) => {
                let (reason, limiter, max, what) = match full {
                    Full::Peer => (
                        "client_cap",
                        &mut over_client_cap,
                        limits.max_per_client,
                        "API connection cap of one client reached: connection refused",
                    ),
                    Full::Total => (
                        "connection_cap",
                        &mut over_cap,
                        limits.max_connections,
                        "API connection cap reached: connection refused",
                    ),
                };
                board.metrics.api_refused(reason);
                if let Some(suppressed) = limiter.allow() {
                    tracing::warn!(%peer, suppressed, max, "{what}");
                }
                // Best effort, never waiting: the client may not read.
                if let Err(error) = stream.try_write(OVER_CAP) {
                    tracing::debug!(%peer, %error, "cannot answer a refused connection");
                }
                drop(stream);
                continue;
            }
        };
        if let Err(error) = stream.set_nodelay(true) {
            tracing::debug!(%peer, %error, "cannot disable Nagle");
        }
        let app = app.clone();
        let service = hyper::service::service_fn(move |request: Request<hyper::body::Incoming>| {
            let mut request = request.map(Body::new);
            request.extensions_mut().insert(ConnectInfo(peer));
            let app = app.clone();
            async move {
                use tower_service::Service as _;
                let mut app = app;
                app.call(request).await
            }
        });
        connections.spawn(serve_connection(
            TokioIo::new(stream),
            service,
            limits,
            stopped.clone(),
            Arc::clone(&board),
            peer.to_string(),
            slot,
        ));
    }
    drop(listener);
    if stop.send(true).is_err() {
        tracing::debug!("no API connection left to stop");
    }
    while connections.join_next().await.is_some() {}
}

/// Serves one connection within `limits` (header timeout, connection life, a graceful end at
/// shutdown), holding `slot` until it ends.
async fn serve_connection<I, S, B>(
    io: I,
    service: S,
    limits: ServerLimits,
    mut stopped: tokio::sync::watch::Receiver<bool>,
    board: Arc<Board>,
    peer: String,
    slot: impl Send,
) where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
    S: hyper::service::HttpService<hyper::body::Incoming, ResBody = B> + Send,
    S::Future: Send,
    B: hyper::body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let _slot = slot;
    let connection = http1::Builder::new()
        .timer(TokioTimer::new())
        .keep_alive(true)
        .header_read_timeout(limits.header_timeout)
        .max_buf_size(64 * 1024)
        .serve_connection(io, service);
    tokio::pin!(connection);
    let life = tokio::time::sleep(limits.connection_lifetime);
    tokio::pin!(life);
    let result = tokio::select! {
        result = connection.as_mut() => result,
        () = &mut life => {
            connection.as_mut().graceful_shutdown();
            match tokio::time::timeout(SHUTDOWN_GRACE, connection.as_mut()).await {
                Ok(result) => result,
                Err(_) => return,
            }
        }
        _ = stopped.changed() => {
            connection.as_mut().graceful_shutdown();
            if tokio::time::timeout(SHUTDOWN_GRACE, connection.as_mut()).await.is_err() {
                tracing::debug!(%peer, "API connection dropped at shutdown");
            }
            return;
        }
    };
    if let Err(error) = result {
        if error.is_timeout() {
            board.metrics.api_refused("header_timeout");
        }
        tracing::debug!(%peer, %error, "API connection ended with an error");
    }
}

/// Who may use the local socket besides root and the coordinator's own user.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LocalAccess {
    /// The group (`api_socket_group`) whose members may, if any.
    pub group: Option<u32>,
}

/// Connections of the local socket open at once, at most.
pub const LOCAL_MAX_CONNECTIONS: usize = 64;

/// Whether a caller with user `uid`, primary group `gid` and supplementary `groups` may use
/// the local socket of a coordinator running as `own_uid`. Pure.
pub fn local_caller_allowed(
    uid: u32,
    gid: u32,
    groups: &[u32],
    own_uid: u32,
    access: LocalAccess,
) -> bool {
    uid == 0
        || uid == own_uid
        || access
            .group
            .is_some_and(|group| gid == group || groups.contains(&group))
}

/// The supplementary groups of process `pid` (its `Groups:` line in `/proc/<pid>/status`);
/// none when it cannot be read.
fn supplementary_groups(pid: Option<i32>) -> Vec<u32> {
    let Some(pid) = pid else {
        return Vec::new();
    };
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|line| line.strip_prefix("Groups:"))
        .map(|groups| {
            groups
                .split_whitespace()
                .filter_map(|gid| gid.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// The answer to a local caller that may not use the socket, written without waiting.
const LOCAL_REFUSED: &[u8] = b"HTTP/1.1 403 Forbidden\r\nContent-Type: application/json\r\nContent-Length: 82\r\nConnection: close\r\n\r\n{\"code\":403,\"message\":\"the local socket is for root and the members of api_socket_group\"}";

/// Serves `app` (as [`serve`] does) on the local socket `listener` until `shutdown`
/// completes: for the callers `access` allows (by their credentials, `SO_PEERCRED`), at most
/// [`LOCAL_MAX_CONNECTIONS`] at once, with the timeouts of `limits`. Requests run with their
/// [`LocalCaller`] ([`local_caller`]).
pub async fn serve_local(
    listener: UnixListener,
    app: Router,
    limits: ServerLimits,
    access: LocalAccess,
    board: Arc<Board>,
    shutdown: impl Future<Output = ()> + Send,
) {
    let slots = Arc::new(tokio::sync::Semaphore::new(LOCAL_MAX_CONNECTIONS));
    let own_uid = nix::unistd::geteuid().as_raw();
    let mut connections = JoinSet::new();
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let mut refused_log = crate::auth::LogLimiter::new(Duration::from_secs(60));
    let mut accept_errors = crate::auth::LogLimiter::new(Duration::from_secs(60));
    tokio::pin!(shutdown);
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = &mut shutdown => break,
            Some(_) = connections.join_next(), if !connections.is_empty() => continue,
        };
        let stream = match accepted {
            Ok((stream, _)) => stream,
            Err(error) => {
                board.metrics.api_refused("accept_error");
                if let Some(suppressed) = accept_errors.allow() {
                    tracing::warn!(%error, suppressed, "the local socket cannot accept a connection; retrying");
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let credentials = match stream.peer_cred() {
            Ok(credentials) => credentials,
            Err(error) => {
                tracing::debug!(%error, "a local caller without credentials: closed");
                continue;
            }
        };
        let (uid, gid) = (credentials.uid(), credentials.gid());
        let groups = supplementary_groups(credentials.pid());
        if !local_caller_allowed(uid, gid, &groups, own_uid, access) {
            board.metrics.api_refused("local_refused");
            if let Some(suppressed) = refused_log.allow() {
                tracing::warn!(
                    uid,
                    gid,
                    suppressed,
                    "local socket refused to a caller neither root nor in api_socket_group"
                );
            }
            if let Err(error) = stream.try_write(LOCAL_REFUSED) {
                tracing::debug!(%error, "cannot answer a refused local caller");
            }
            continue;
        }
        let Ok(slot) = Arc::clone(&slots).try_acquire_owned() else {
            board.metrics.api_refused("local_cap");
            if let Err(error) = stream.try_write(OVER_CAP) {
                tracing::debug!(%error, "cannot answer a refused local caller");
            }
            continue;
        };
        let name = nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid))
            .ok()
            .flatten()
            .map_or_else(|| format!("uid {uid}"), |user| user.name);
        let caller = LocalCaller { uid, name };
        let app = app.clone();
        let label = format!("local:{}", caller.name);
        let service = hyper::service::service_fn(move |request: Request<hyper::body::Incoming>| {
            let request = request.map(Body::new);
            let app = app.clone();
            crate::callers::scope_local_caller(caller.clone(), async move {
                use tower_service::Service as _;
                let mut app = app;
                app.call(request).await
            })
        });
        connections.spawn(serve_connection(
            TokioIo::new(stream),
            service,
            limits,
            stopped.clone(),
            Arc::clone(&board),
            label,
            slot,
        ));
    }
    drop(listener);
    if stop.send(true).is_err() {
        tracing::debug!("no local API connection left to stop");
    }
    while connections.join_next().await.is_some() {}
}

/// Binds the local socket at `path`: a socket left there by a coordinator no longer running is
/// replaced; one a running coordinator answers on is left alone (an error). The socket is
/// `0666`: who may use it is decided by the caller's credentials ([`serve_local`]), which
/// lets the members of `api_socket_group` in without giving the file to that group.
pub fn bind_local(path: &std::path::Path) -> std::io::Result<UnixListener> {
    use std::os::unix::fs::{FileTypeExt as _, PermissionsExt as _};
    if let Ok(metadata) = std::fs::symlink_metadata(path) {
        if !metadata.file_type().is_socket() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::AlreadyExists,
                format!("{} exists and is not a socket", path.display()),
            ));
        }
        if std::os::unix::net::UnixStream::connect(path).is_ok() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::AddrInUse,
                format!("another coordinator answers on {}", path.display()),
            ));
        }
        std::fs::remove_file(path)?;
    }
    let listener = UnixListener::bind(path)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o666))?;
    Ok(listener)
}

fn is_write(method: &Method) -> bool {
    !matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS)
}

/// The reads with a cost (the flight recorder decoded, a what-if's rounds run), which another
/// site's page must not make a browser ask for, as it must not make it write: `explain` and
/// `what-if`, in the JSON API and as pages.
pub const COSTLY_READS: [&str; 4] = ["/1/explain", "/1/what-if", "/ui/explain", "/ui/what-if"];

fn is_costly_read(method: &Method, path: &str) -> bool {
    !is_write(method) && COSTLY_READS.contains(&path)
}

/// Why a write comes from another site, if it does: `Sec-Fetch-Site` other than `same-origin`
/// or `none`, or an `Origin` that does not name the `Host`. A request with neither (the CLI,
/// curl) passes. Pure.
pub fn cross_site(headers: &HeaderMap) -> Option<String> {
    cross_site_request(headers, "write")
}

/// As [`cross_site`], for a request of kind `what` (a write, a costly read).
fn cross_site_request(headers: &HeaderMap, what: &str) -> Option<String> {
    if let Some(site) = headers.get("sec-fetch-site") {
        let site = site.to_str().unwrap_or("");
        if !site.eq_ignore_ascii_case("same-origin") && !site.eq_ignore_ascii_case("none") {
            return Some(format!(
                "{what} from another site (Sec-Fetch-Site: {site}) refused"
            ));
        }
    }
    let origin = headers.get(header::ORIGIN)?;
    let origin = origin.to_str().unwrap_or("");
    let host = headers
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let authority = origin
        .strip_prefix("http://")
        .or_else(|| origin.strip_prefix("https://"))
        .map(|rest| rest.split('/').next().unwrap_or(""));
    match authority {
        Some(authority) if !host.is_empty() && authority.eq_ignore_ascii_case(host) => None,
        _ => Some(format!(
            "{what} from origin {origin:?} to {host:?} refused (cross-site protection)"
        )),
    }
}

/// Whether a JSON API write's `Content-Type` is acceptable: `application/json` (parameters
/// allowed), or none at all for a request without a body. Pure.
pub fn json_content_type(headers: &HeaderMap, body_len: usize) -> Result<(), String> {
    match headers.get(header::CONTENT_TYPE) {
        None if body_len == 0 => Ok(()),
        None => Err("a write with a body needs Content-Type: application/json".into()),
        Some(value) => {
            let text = value.to_str().unwrap_or("");
            let essence = text.split(';').next().unwrap_or("").trim();
            if essence.eq_ignore_ascii_case("application/json") {
                Ok(())
            } else {
                Err(format!(
                    "Content-Type {text:?} refused: JSON writes need Content-Type: application/json"
                ))
            }
        }
    }
}

/// The checks in front of every handler: password-guess throttling, the body's size and time
/// limits, and the cross-site and `Content-Type` checks of writes (module documentation).
pub async fn guard(
    board: Arc<Board>,
    throttle: Arc<crate::auth::Throttle>,
    users: Option<Arc<std::path::Path>>,
    limits: ServerLimits,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let client = request
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|info| info.0.ip());
    let credentials = request.headers().contains_key(header::AUTHORIZATION);
    let authorization = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    // The user an attempt names (unchecked: only its failures are counted under it).
    let user = if credentials {
        let authorization = request
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok());
        crate::auth::basic_credentials(authorization)
            .map(|(user, _)| user)
            .unwrap_or_default()
    } else {
        String::new()
    };
    let local = local_caller().is_some();
    let admission = if credentials && !local {
        throttle.admit(client, &user)
    } else {
        crate::auth::Admission::Go
    };
    if let crate::auth::Admission::Slow(wait) = admission {
        board.metrics.api_refused("auth_slowed");
        tokio::time::sleep(wait).await;
    }
    if let crate::auth::Admission::Refuse(wait) = admission {
        board.metrics.api_refused("auth_throttled");
        let mut response = error(
            StatusCode::TOO_MANY_REQUESTS,
            format!(
                "too many failed authentications from this client: retry in {} s",
                wait.as_secs().max(1)
            ),
        );
        if let Ok(value) = axum::http::HeaderValue::from_str(&wait.as_secs().max(1).to_string()) {
            response.headers_mut().insert(header::RETRY_AFTER, value);
        }
        return response;
    }
    let write = is_write(request.method());
    let costly = is_costly_read(request.method(), request.uri().path());
    if (write || costly)
        && let Some(message) = cross_site_request(
            request.headers(),
            if write {
                "write"
            } else {
                "costly read (explain, what-if)"
            },
        )
    {
        board.metrics.api_refused("cross_site");
        tracing::info!(client = ?client, path = %request.uri().path(), "{message}");
        return error(StatusCode::FORBIDDEN, message);
    }
    if limits.reads_need_login
        && !write
        && !local
        && let Err(refusal) =
            crate::auth::authorize_read(users.as_deref(), authorization.as_deref())
    {
        if credentials && matches!(refusal, crate::auth::Refusal::Unauthenticated(_)) {
            board.metrics.api_refused("auth_failure");
            throttle.failed(client, &user);
        }
        return read_refused(request.uri().path(), &refusal);
    }
    let declared = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|length| length > limits.max_body_bytes as u64) {
        board.metrics.api_refused("body_too_large");
        return closing(error(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("request body larger than {} bytes", limits.max_body_bytes),
        ));
    }
    let (parts, body) = request.into_parts();
    let bytes = match tokio::time::timeout(
        limits.body_timeout,
        axum::body::to_bytes(body, limits.max_body_bytes),
    )
    .await
    {
        Ok(Ok(bytes)) => bytes,
        Ok(Err(body_error)) => {
            let too_large = std::error::Error::source(&body_error)
                .is_some_and(|source| source.is::<http_body_util::LengthLimitError>());
            if too_large {
                board.metrics.api_refused("body_too_large");
                return closing(error(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    format!("request body larger than {} bytes", limits.max_body_bytes),
                ));
            }
            return closing(error(
                StatusCode::BAD_REQUEST,
                format!("cannot read the request body: {body_error}"),
            ));
        }
        Err(_) => {
            board.metrics.api_refused("body_timeout");
            return closing(error(
                StatusCode::REQUEST_TIMEOUT,
                format!(
                    "request body not received within {} s",
                    limits.body_timeout.as_secs()
                ),
            ));
        }
    };
    let json_api = !parts.uri.path().starts_with("/ui/");
    if write
        && json_api
        && let Err(message) = json_content_type(&parts.headers, bytes.len())
    {
        board.metrics.api_refused("content_type");
        return error(StatusCode::UNSUPPORTED_MEDIA_TYPE, message);
    }
    let response = next
        .run(Request::from_parts(parts, Body::from(bytes)))
        .await;
    if credentials && !local && response.status() == StatusCode::UNAUTHORIZED {
        board.metrics.api_refused("auth_failure");
        throttle.failed(client, &user);
    }
    // An address an operator authenticated from may take the reserved connections from now on.
    if credentials
        && !matches!(
            response.status(),
            StatusCode::UNAUTHORIZED | StatusCode::TOO_MANY_REQUESTS
        )
        && let Some(client) = client
        && !board.operators.knows(client)
        && let Some(users) = users.as_deref()
        && let Ok((name, password)) = crate::auth::basic_credentials(authorization.as_deref())
        && crate::auth::Users::load(users)
            .is_ok_and(|users| users.check(&name, &password).is_some())
    {
        board.operators.learn(client);
    }
    response.into_response()
}

/// A read refused under `api_reads_need_login`: `401` with the challenge of the API or, for the
/// page (`/ui/`), of the page's realm; `403` when no users file can be read.
fn read_refused(path: &str, refusal: &crate::auth::Refusal) -> Response {
    let challenge = if path.starts_with("/ui/") || path == "/ui" {
        crate::ui::ADMIN_CHALLENGE
    } else {
        crate::api::API_CHALLENGE
    };
    crate::api::refused_as(
        refusal,
        format!("reads need a login here: {refusal}"),
        challenge,
    )
}

/// A refusal given before the whole body was read: the rest of the body is still on the
/// connection, so the connection ends with this answer and a client must not send another
/// request on it.
fn closing(mut response: Response) -> Response {
    response.headers_mut().insert(
        header::CONNECTION,
        axum::http::HeaderValue::from_static("close"),
    );
    response
}

#[cfg(test)]
mod local_tests {
    use std::net::IpAddr;
    use std::time::Instant;

    use super::*;

    #[test]
    fn the_local_socket_is_for_root_its_own_user_and_the_group() {
        let none = LocalAccess::default();
        let admins = LocalAccess { group: Some(500) };
        // (uid, gid, supplementary groups, access) → allowed; the coordinator runs as uid 0.
        for (uid, gid, groups, access, allowed) in [
            (0, 0, vec![], none, true),
            (1000, 1000, vec![], none, false),
            (1000, 1000, vec![500], none, false),
            (1000, 1000, vec![500], admins, true),
            (1000, 500, vec![], admins, true),
            (1000, 1000, vec![501], admins, false),
        ] {
            assert_eq!(
                local_caller_allowed(uid, gid, &groups, 0, access),
                allowed,
                "{uid} {gid} {groups:?} {access:?}"
            );
        }
        // A coordinator running as its own user lets that user in.
        assert!(local_caller_allowed(990, 990, &[], 990, none));
    }

    #[test]
    fn operators_addresses_are_bounded_and_the_oldest_forgotten() {
        let operators = Operators::default();
        let start = Instant::now();
        let address = |n: u32| IpAddr::from(std::net::Ipv4Addr::from(0x0a00_0000 + n));
        for n in 0..u32::try_from(Operators::MAX_ADDRESSES).unwrap_or(u32::MAX) {
            operators.learn_at(address(n), start + Duration::from_millis(u64::from(n)));
        }
        // Seen again: the newest.
        operators.learn_at(address(0), start + Duration::from_secs(10));
        operators.learn_at(address(5000), start + Duration::from_secs(11));
        assert!(operators.knows(address(0)));
        assert!(!operators.knows(address(1)), "the least recently seen went");
        assert!(operators.knows(address(5000)));
        assert!(operators.knows("::ffff:10.0.19.136".parse().unwrap()));
        assert!(!operators.knows("127.0.0.1".parse().unwrap()));
    }
}
