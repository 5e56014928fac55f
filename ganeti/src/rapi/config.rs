//! How the RAPI client reaches Ganeti and what goes wrong: the address, credentials, server trust
//! and the client's error, shared by [`super::client`] and [`super::transport`].

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::tls::TlsSetupError;
use crate::{JobId, JobStatus};

/// Default RAPI address (RAPI listens on the master; nodecare's coordinator runs there).
pub const DEFAULT_RAPI_URL: &str = "https://localhost:5080";
/// Allocator used when the caller names none (Ganeti's default).
pub use super::request::DEFAULT_IALLOCATOR;
/// How long RAPI itself blocks in `/2/jobs/<id>/wait` before answering "no change".
pub const RAPI_WAIT_PERIOD: Duration = Duration::from_secs(10);

/// Errors of RAPI calls.
#[derive(Debug, thiserror::Error)]
pub enum RapiError {
    #[error(transparent)]
    Tls(#[from] TlsSetupError),
    #[error("bad RAPI configuration: {0}")]
    Config(String),
    #[error("cannot read RAPI credentials {path}: {message}")]
    Credentials { path: String, message: String },
    #[error("RAPI {method} {path}: {message}")]
    Transport {
        method: String,
        path: String,
        message: String,
    },
    #[error("RAPI {method} {path} timed out after {after:?}")]
    Timeout {
        method: String,
        path: String,
        after: Duration,
    },
    #[error("RAPI {method} {path}: HTTP {status}: {message}")]
    Http {
        method: String,
        path: String,
        status: u16,
        message: String,
    },
    #[error("RAPI {method} {path}: unexpected answer: {message}")]
    Decode {
        method: String,
        path: String,
        message: String,
    },
    #[error("RAPI job {0} does not exist (never submitted, or lost with the queue)")]
    JobNotFound(JobId),
    #[error("RAPI job {job} did not finish within {after:?} (last status {})", status.as_str())]
    JobWaitTimeout {
        job: JobId,
        after: Duration,
        status: JobStatus,
    },
}

impl RapiError {
    /// HTTP status of an error answer, if the server gave one.
    pub fn http_status(&self) -> Option<u16> {
        match self {
            Self::Http { status, .. } => Some(*status),
            _ => None,
        }
    }

    /// Whether retrying the same call later may succeed (network trouble, timeouts, 5xx).
    /// Job submissions must not be blindly retried: a lost answer may hide a queued job.
    pub fn is_transient(&self) -> bool {
        match self {
            Self::Transport { .. } | Self::Timeout { .. } | Self::JobWaitTimeout { .. } => true,
            Self::Http { status, .. } => *status >= 500,
            _ => false,
        }
    }
}

/// RAPI user name and password.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    pub user: String,
    pub password: String,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("user", &self.user)
            .field("password", &"<redacted>")
            .finish()
    }
}

impl Credentials {
    /// Reads credentials from a file; see [`Self::parse`] for the accepted formats.
    pub fn from_file(path: &Path) -> Result<Self, RapiError> {
        let shown = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|e| RapiError::Credentials {
            path: shown.clone(),
            message: e.to_string(),
        })?;
        Self::parse(&text).map_err(|message| RapiError::Credentials {
            path: shown,
            message,
        })
    }

    /// Accepted formats:
    /// * one line `user:password` (the password may contain `:`);
    /// * Ganeti's RAPI users file: lines `user password [options]`, `#` comments, the password
    ///   optionally prefixed `{cleartext}`; the first user with `write` access is taken, else the
    ///   first user. A `{HA1}` hashed password cannot be used by a client and is refused.
    pub fn parse(text: &str) -> Result<Self, String> {
        let lines: Vec<&str> = text
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
            .collect();
        let Some(first) = lines.first() else {
            return Err(
                "no credentials in file (want `user:password` or `user password write`)".into(),
            );
        };
        if lines.len() == 1 && !first.contains(char::is_whitespace) {
            let (user, password) = first
                .split_once(':')
                .ok_or("want `user:password` or Ganeti users-file lines `user password [write]`")?;
            return Self::checked(user, password);
        }
        let mut entries = Vec::new();
        for line in &lines {
            let mut fields = line.split_whitespace();
            let (Some(user), Some(password)) = (fields.next(), fields.next()) else {
                return Err(format!(
                    "users-file line without a password: `{}`",
                    first_word(line)
                ));
            };
            let write = fields.any(|opts| opts.split(',').any(|o| o == "write"));
            entries.push((user, password, write));
        }
        let (user, password, _) = entries
            .iter()
            .find(|(_, _, write)| *write)
            .or_else(|| entries.first())
            .copied()
            .ok_or("no credentials in file")?;
        Self::checked(user, password)
    }

    fn checked(user: &str, password: &str) -> Result<Self, String> {
        if user.is_empty() {
            return Err("empty RAPI user name".into());
        }
        let password = if let Some(rest) = strip_prefix_ci(password, "{cleartext}") {
            rest
        } else if strip_prefix_ci(password, "{ha1}").is_some() {
            return Err(format!(
                "user `{user}` has a {{HA1}} hashed password; a client needs the clear text"
            ));
        } else {
            password
        };
        if password.is_empty() {
            return Err(format!("empty RAPI password for user `{user}`"));
        }
        Ok(Self {
            user: user.to_owned(),
            password: password.to_owned(),
        })
    }
}

fn strip_prefix_ci<'a>(text: &'a str, prefix: &str) -> Option<&'a str> {
    let head = text.get(..prefix.len())?;
    head.eq_ignore_ascii_case(prefix)
        .then(|| &text[prefix.len()..])
}

fn first_word(line: &str) -> &str {
    line.split_whitespace().next().unwrap_or_default()
}

/// How the client authenticates the server.
#[derive(Debug, Clone)]
pub enum ServerTrust {
    /// HTTPS, trusting exactly the certificates of this PEM file (Ganeti's `rapi.pem` works:
    /// its private key block is ignored).
    PinnedCertFile(PathBuf),
    /// HTTPS, trusting exactly these PEM certificates.
    PinnedCertPem(Vec<u8>),
    /// Plain HTTP, for the in-process simulation only; refused for `https://` URLs.
    PlainHttp,
}

/// Client settings. Every request has a timeout; job waits are bounded separately.
#[derive(Debug, Clone)]
pub struct RapiConfig {
    pub base_url: String,
    pub trust: ServerTrust,
    pub credentials: Option<Credentials>,
    pub connect_timeout: Duration,
    /// Bound of every single request (a `/wait` call gets [`RAPI_WAIT_PERIOD`] on top).
    pub request_timeout: Duration,
}

impl RapiConfig {
    pub fn new(base_url: impl Into<String>, trust: ServerTrust) -> Self {
        Self {
            base_url: base_url.into(),
            trust,
            credentials: None,
            connect_timeout: Duration::from_secs(5),
            request_timeout: Duration::from_secs(30),
        }
    }

    pub fn with_credentials(mut self, credentials: Credentials) -> Self {
        self.credentials = Some(credentials);
        self
    }

    /// The settings for an operator's RAPI address (`https://user:pass@host:port`) with the
    /// cluster's self-signed certificate pinned from `ca` (a copy of Ganeti's `rapi.pem`), and
    /// the address to name in errors (without the credentials).
    pub fn for_operator(url: &str, ca: Option<&Path>) -> Result<(Self, String), String> {
        let mut base = reqwest::Url::parse(url).map_err(|e| format!("{url}: invalid URL: {e}"))?;
        if base.scheme() != "https" {
            return Err(format!("{url}: only https:// RAPI addresses are supported"));
        }
        let Some(ca) = ca else {
            return Err(format!(
                "{url}: Ganeti's RAPI certificate is self-signed; pin it with --rapi-ca FILE \
                 (a copy of /var/lib/ganeti/rapi.pem from the master node)"
            ));
        };
        let user = base.username().to_owned();
        let password = base.password().unwrap_or_default().to_owned();
        if base.set_username("").is_err() || base.set_password(None).is_err() {
            return Err(format!("{url}: cannot use credentials with this URL"));
        }
        let shown = base.as_str().trim_end_matches('/').to_owned();
        let mut config = Self::new(shown.clone(), ServerTrust::PinnedCertFile(ca.to_path_buf()));
        config.connect_timeout = Duration::from_secs(15);
        config.request_timeout = Duration::from_secs(60);
        if !user.is_empty() {
            config = config.with_credentials(Credentials { user, password });
        }
        Ok((config, shown))
    }
}

impl From<super::request::InvalidRequest> for RapiError {
    fn from(e: super::request::InvalidRequest) -> Self {
        Self::Config(e.0)
    }
}
