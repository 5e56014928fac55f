//! Write authentication: a users file in Ganeti RAPI's format and HTTP basic auth.
//!
//! The file (default `/etc/nodecare/users`) has one user per line, `user password [options]`,
//! as Ganeti's `/var/lib/ganeti/rapi/users`: blank lines and lines starting with `#` are
//! ignored; the password is plain text, `{CLEARTEXT}text`, or `{HA1}` followed by the
//! hexadecimal MD5 of `user:Ganeti Remote API:password`; options are comma-separated, and
//! `write` grants writes (`read` is accepted and grants nothing more, since reads are open).
//!
//! The file is read again on every write request, so edits take effect at once, and a missing
//! or invalid file refuses every write with a clear message.

use std::collections::BTreeMap;
use std::path::Path;

use base64::Engine as _;
use md5::{Digest as _, Md5};
use subtle::ConstantTimeEq as _;

/// The realm of `{HA1}` hashes: Ganeti RAPI's, so that its users file works unchanged.
pub const HA1_REALM: &str = "Ganeti Remote API";
pub use crate::config::DEFAULT_USERS_PATH;

/// A stored password.
#[derive(Clone, PartialEq, Eq)]
pub enum Password {
    /// Plain text (or `{CLEARTEXT}`).
    Plain(String),
    /// `{HA1}`: lowercase hex MD5 of `user:realm:password`.
    Ha1(String),
}

impl std::fmt::Debug for Password {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Plain(_) => f.write_str("Plain(..)"),
            Self::Ha1(_) => f.write_str("Ha1(..)"),
        }
    }
}

/// One user of the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct User {
    /// Password.
    pub password: Password,
    /// Whether the user may write.
    pub write: bool,
}

/// A users file problem.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UsersError {
    /// The file cannot be read.
    #[error("cannot read users file {path}: {error}")]
    Read {
        /// Path.
        path: String,
        /// Cause.
        error: String,
    },
    /// A line is invalid.
    #[error("users file line {line}: {message}")]
    Line {
        /// 1-based line number.
        line: usize,
        /// What is wrong.
        message: String,
    },
}

/// The parsed users file.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Users {
    users: BTreeMap<String, User>,
}

/// Why a request may not write.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// No or unparseable credentials, unknown user or wrong password: HTTP 401.
    #[error("{0}")]
    Unauthenticated(String),
    /// A valid user without the write option: HTTP 403.
    #[error("user {0:?} may not write (no \"write\" option in the users file)")]
    NotWriter(String),
    /// The users file is missing or invalid: HTTP 403 (writes are disabled).
    #[error("writes are disabled: {0}")]
    Disabled(String),
}

impl Users {
    /// Parses the text of a users file.
    pub fn parse(text: &str) -> Result<Self, UsersError> {
        let mut users = BTreeMap::new();
        for (index, raw) in text.lines().enumerate() {
            let line = raw.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let bad = |message: String| UsersError::Line {
                line: index + 1,
                message,
            };
            let fields: Vec<&str> = line.split_whitespace().collect();
            let (name, secret, options) = match fields.as_slice() {
                [name, secret] => (*name, *secret, None),
                [name, secret, options] => (*name, *secret, Some(*options)),
                _ => {
                    return Err(bad(format!(
                        "expected \"user password [options]\", got {} fields",
                        fields.len()
                    )));
                }
            };
            let password = parse_password(secret).map_err(bad)?;
            let mut write = false;
            for option in options.into_iter().flat_map(|o| o.split(',')) {
                match option.to_ascii_lowercase().as_str() {
                    "write" => write = true,
                    "read" | "" => {}
                    other => return Err(bad(format!("unknown option {other:?}"))),
                }
            }
            if users
                .insert(name.to_owned(), User { password, write })
                .is_some()
            {
                return Err(bad(format!("user {name:?} appears twice")));
            }
        }
        Ok(Self { users })
    }

    /// Reads and parses `path`, a secret file: refused (every write with it) when others could
    /// have written it or can read it ([`nodecare_daemon::secret`], as ssh refuses a key).
    pub fn load(path: &Path) -> Result<Self, UsersError> {
        let bytes =
            nodecare_daemon::secret::read_secret_file(path).map_err(|e| UsersError::Read {
                path: path.display().to_string(),
                error: e.to_string(),
            })?;
        let text = String::from_utf8(bytes).map_err(|_| UsersError::Read {
            path: path.display().to_string(),
            error: "not UTF-8".into(),
        })?;
        Self::parse(&text)
    }

    /// The user named `name` if `password` is theirs.
    pub fn check(&self, name: &str, password: &str) -> Option<&User> {
        let user = self.users.get(name)?;
        let ok = match &user.password {
            Password::Plain(stored) => bool::from(stored.as_bytes().ct_eq(password.as_bytes())),
            Password::Ha1(stored) => {
                let computed = ha1(name, password);
                bool::from(stored.as_bytes().ct_eq(computed.as_bytes()))
            }
        };
        ok.then_some(user)
    }

    /// Whether `authorization` (an HTTP `Authorization` header value, if any) names a user that
    /// may write; the user's name if so.
    pub fn authorize_write(&self, authorization: Option<&str>) -> Result<String, Refusal> {
        let (name, password) = basic_credentials(authorization)?;
        match self.check(&name, &password) {
            Some(user) if user.write => Ok(name),
            Some(_) => Err(Refusal::NotWriter(name)),
            None => Err(Refusal::Unauthenticated(
                "unknown user or wrong password".into(),
            )),
        }
    }
}

/// `{HA1}` hash of a user's password: hex MD5 of `user:Ganeti Remote API:password`.
pub fn ha1(user: &str, password: &str) -> String {
    hex::encode(Md5::digest(format!("{user}:{HA1_REALM}:{password}")))
}

fn parse_password(secret: &str) -> Result<Password, String> {
    if let Some(rest) = secret.strip_prefix('{') {
        let Some((scheme, value)) = rest.split_once('}') else {
            return Err("password starts with \"{\" but has no scheme".into());
        };
        return match scheme.to_ascii_uppercase().as_str() {
            "CLEARTEXT" => Ok(Password::Plain(value.to_owned())),
            "HA1" => {
                let lower = value.to_ascii_lowercase();
                if lower.len() == 32 && lower.bytes().all(|b| b.is_ascii_hexdigit()) {
                    Ok(Password::Ha1(lower))
                } else {
                    Err("{HA1} password must be 32 hexadecimal digits".into())
                }
            }
            other => Err(format!("unknown password scheme {{{other}}}")),
        };
    }
    Ok(Password::Plain(secret.to_owned()))
}

/// Decodes `Basic base64(user:password)`.
pub fn basic_credentials(authorization: Option<&str>) -> Result<(String, String), Refusal> {
    let header = authorization.ok_or_else(|| {
        Refusal::Unauthenticated("this action needs HTTP basic authentication".into())
    })?;
    let (scheme, encoded) = header
        .trim()
        .split_once(' ')
        .ok_or_else(|| Refusal::Unauthenticated("malformed Authorization header".into()))?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return Err(Refusal::Unauthenticated(format!(
            "unsupported authentication scheme {scheme:?} (use Basic)"
        )));
    }
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(encoded.trim())
        .map_err(|_| Refusal::Unauthenticated("Authorization is not valid base64".into()))?;
    let text = String::from_utf8(bytes)
        .map_err(|_| Refusal::Unauthenticated("Authorization is not UTF-8".into()))?;
    let (user, password) = text
        .split_once(':')
        .ok_or_else(|| Refusal::Unauthenticated("Authorization has no \"user:password\"".into()))?;
    Ok((user.to_owned(), password.to_owned()))
}

/// Authorises a write against the users file at `path` (read now).
pub fn authorize_write(
    path: Option<&Path>,
    authorization: Option<&str>,
) -> Result<String, Refusal> {
    let Some(path) = path else {
        return Err(Refusal::Disabled("no users file is configured".into()));
    };
    let users = Users::load(path).map_err(|e| Refusal::Disabled(e.to_string()))?;
    users.authorize_write(authorization)
}

/// Lets a log line through at most once per period; counts what it held back.
#[derive(Debug)]
pub struct LogLimiter {
    period: std::time::Duration,
    last: Option<std::time::Instant>,
    suppressed: u64,
}

impl LogLimiter {
    /// At most one line per `period`.
    pub fn new(period: std::time::Duration) -> Self {
        Self {
            period,
            last: None,
            suppressed: 0,
        }
    }

    /// `Some(lines held back since the last one)` when a line may be logged now.
    pub fn allow(&mut self) -> Option<u64> {
        self.allow_at(std::time::Instant::now())
    }

    /// [`Self::allow`] at `now`.
    pub fn allow_at(&mut self, now: std::time::Instant) -> Option<u64> {
        if self
            .last
            .is_some_and(|last| now.saturating_duration_since(last) < self.period)
        {
            self.suppressed = self.suppressed.saturating_add(1);
            return None;
        }
        self.last = Some(now);
        Some(std::mem::take(&mut self.suppressed))
    }
}

/// Failed authentications per client: past [`Throttle::MAX_FAILURES`] in a window of
/// [`Throttle::WINDOW`], a client is refused (HTTP 429) until its window ends. At most
/// [`Throttle::MAX_CLIENTS`] clients are tracked; past that, unknown clients share one entry, so
/// that many addresses throttle each other instead of growing the table. Failures are logged at
/// most once per window and client.
#[derive(Debug, Default)]
pub struct Throttle {
    clients: std::sync::Mutex<std::collections::HashMap<Option<std::net::IpAddr>, Failures>>,
}

#[derive(Debug, Clone, Copy)]
struct Failures {
    since: std::time::Instant,
    count: u32,
}

impl Throttle {
    /// Failures allowed per client and window.
    pub const MAX_FAILURES: u32 = 10;
    /// The window.
    pub const WINDOW: std::time::Duration = std::time::Duration::from_secs(60);
    /// Most clients tracked.
    pub const MAX_CLIENTS: usize = 4096;

    /// How long `client` must still wait, if it is throttled now.
    pub fn refused(&self, client: Option<std::net::IpAddr>) -> Option<std::time::Duration> {
        self.refused_at(client, std::time::Instant::now())
    }

    /// [`Self::refused`] at `now`.
    pub fn refused_at(
        &self,
        client: Option<std::net::IpAddr>,
        now: std::time::Instant,
    ) -> Option<std::time::Duration> {
        let clients = self
            .clients
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let key = if clients.contains_key(&client) || clients.len() < Self::MAX_CLIENTS {
            client
        } else {
            None
        };
        let failures = clients.get(&key)?;
        let elapsed = now.saturating_duration_since(failures.since);
        (failures.count >= Self::MAX_FAILURES && elapsed < Self::WINDOW)
            .then(|| Self::WINDOW.saturating_sub(elapsed))
    }

    /// Records a failed authentication of `client`.
    pub fn failed(&self, client: Option<std::net::IpAddr>) {
        self.failed_at(client, std::time::Instant::now());
    }

    /// [`Self::failed`] at `now`.
    pub fn failed_at(&self, client: Option<std::net::IpAddr>, now: std::time::Instant) {
        let mut clients = self
            .clients
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if !clients.contains_key(&client) && clients.len() >= Self::MAX_CLIENTS {
            clients.retain(|_, f| now.saturating_duration_since(f.since) < Self::WINDOW);
        }
        let key = if clients.contains_key(&client) || clients.len() < Self::MAX_CLIENTS {
            client
        } else {
            None
        };
        let entry = clients.entry(key).or_insert(Failures {
            since: now,
            count: 0,
        });
        if now.saturating_duration_since(entry.since) >= Self::WINDOW {
            *entry = Failures {
                since: now,
                count: 0,
            };
        }
        entry.count = entry.count.saturating_add(1);
        let client_text = key.map_or_else(|| "(unknown or shared)".to_owned(), |ip| ip.to_string());
        if entry.count == 1 {
            tracing::warn!(client = %client_text, "failed authentication (further failures of this client are logged once per minute)");
        } else if entry.count == Self::MAX_FAILURES {
            tracing::warn!(client = %client_text, failures = entry.count, window_s = Self::WINDOW.as_secs(), "too many failed authentications: client throttled until its window ends");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(user: &str, password: &str) -> String {
        format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"))
        )
    }

    const FILE: &str = "# operators\n\
        admin secret write\n\
        viewer look read\n\
        hashed {HA1}HASH write\n\
        \n\
        clear {CLEARTEXT}pa:ss read,write\n";

    fn users() -> Users {
        Users::parse(&FILE.replace("HASH", &ha1("hashed", "s3cret"))).unwrap()
    }

    #[test]
    fn ha1_matches_ganeti() {
        // md5("jack:Ganeti Remote API:abc123"), as `echo -n ... | md5sum` computes it.
        assert_eq!(ha1("jack", "abc123"), "54c12257ee9be413f2f3182435514aae");
    }

    #[test]
    fn writers_are_accepted() {
        let users = users();
        for (user, password) in [
            ("admin", "secret"),
            ("hashed", "s3cret"),
            ("clear", "pa:ss"),
        ] {
            assert_eq!(
                users.authorize_write(Some(&header(user, password))),
                Ok(user.to_owned())
            );
        }
    }

    #[test]
    fn each_refusal_has_its_reason() {
        let users = users();
        let table: Vec<(Option<String>, Refusal)> = vec![
            (
                None,
                Refusal::Unauthenticated("this action needs HTTP basic authentication".into()),
            ),
            (
                Some("Bearer abc".into()),
                Refusal::Unauthenticated(
                    "unsupported authentication scheme \"Bearer\" (use Basic)".into(),
                ),
            ),
            (
                Some("Basic !!!".into()),
                Refusal::Unauthenticated("Authorization is not valid base64".into()),
            ),
            (
                Some("Basic".into()),
                Refusal::Unauthenticated("malformed Authorization header".into()),
            ),
            (
                Some(format!(
                    "Basic {}",
                    base64::engine::general_purpose::STANDARD.encode("nocolon")
                )),
                Refusal::Unauthenticated("Authorization has no \"user:password\"".into()),
            ),
            (
                Some(header("admin", "wrong")),
                Refusal::Unauthenticated("unknown user or wrong password".into()),
            ),
            (
                Some(header("nobody", "secret")),
                Refusal::Unauthenticated("unknown user or wrong password".into()),
            ),
            (
                Some(header("hashed", "HASH")),
                Refusal::Unauthenticated("unknown user or wrong password".into()),
            ),
            (
                Some(header("viewer", "look")),
                Refusal::NotWriter("viewer".into()),
            ),
        ];
        for (authorization, expected) in table {
            assert_eq!(
                users.authorize_write(authorization.as_deref()),
                Err(expected),
                "{authorization:?}"
            );
        }
    }

    #[test]
    fn bad_files_are_errors() {
        for (text, line) in [
            ("admin\n", 1),
            ("# c\nadmin pw write extra\n", 2),
            ("admin pw admin\n", 1),
            ("admin {HA1}xyz write\n", 1),
            ("admin {MD5}abc write\n", 1),
            ("admin {HA1 write\n", 1),
            ("a x\na y\n", 2),
        ] {
            match Users::parse(text) {
                Err(UsersError::Line { line: got, .. }) => assert_eq!(got, line, "{text:?}"),
                other => panic!("{text:?}: {other:?}"),
            }
        }
    }

    #[test]
    fn a_users_file_others_can_read_or_write_disables_writes() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("users");
        std::fs::write(&path, "admin secret write\n").unwrap();
        let authorization = header("admin", "secret");
        for (mode, allowed) in [
            (0o600, true),
            (0o644, false),
            (0o620, false),
            (0o602, false),
        ] {
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
            let result = authorize_write(Some(&path), Some(&authorization));
            if allowed {
                assert_eq!(result, Ok("admin".to_owned()), "{mode:o}");
            } else {
                assert!(
                    matches!(&result, Err(Refusal::Disabled(why)) if why.contains("refusing secret file")),
                    "{mode:o}: {result:?}"
                );
            }
        }
    }

    #[test]
    fn missing_or_unconfigured_file_disables_writes() {
        let authorization = header("admin", "secret");
        assert!(matches!(
            authorize_write(None, Some(&authorization)),
            Err(Refusal::Disabled(_))
        ));
        assert!(matches!(
            authorize_write(
                Some(Path::new("/nonexistent/nodecare-users")),
                Some(&authorization)
            ),
            Err(Refusal::Disabled(_))
        ));
    }
}
