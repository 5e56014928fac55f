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
        let (name, user) = self.authorize_read(authorization)?;
        if user.write {
            Ok(name)
        } else {
            Err(Refusal::NotWriter(name))
        }
    }

    /// Whether `authorization` names a user with the right password, writer or not; the user's
    /// name and entry if so.
    pub fn authorize_read(&self, authorization: Option<&str>) -> Result<(String, &User), Refusal> {
        let (name, password) = basic_credentials(authorization)?;
        match self.check(&name, &password) {
            Some(user) => Ok((name, user)),
            None => Err(Refusal::Unauthenticated(
                "unknown user or wrong password".into(),
            )),
        }
    }
}

/// Whether `authorization` names a user of the users file at `path` (read now) with the right
/// password, writer or not (`api_reads_need_login`); the user's name if so.
pub fn authorize_read(path: Option<&Path>, authorization: Option<&str>) -> Result<String, Refusal> {
    Ok(users_at(path)?.authorize_read(authorization)?.0)
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
    users_at(path)?.authorize_write(authorization)
}

/// The users file at `path`, read now; a missing or invalid one disables what needs it.
fn users_at(path: Option<&Path>) -> Result<Users, Refusal> {
    let Some(path) = path else {
        return Err(Refusal::Disabled("no users file is configured".into()));
    };
    Users::load(path).map_err(|e| Refusal::Disabled(e.to_string()))
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

/// Failed authentications, counted per source address and user, and per user over every source.
///
/// Past [`Throttle::MAX_FAILURES`] failures of one user from one address in a window of
/// [`Throttle::WINDOW`], that address is refused (HTTP 429) for that user until its window ends:
/// the address is itself guessing. Failures of other users, or from other addresses, never
/// refuse anyone: past [`Throttle::USER_FAILURES`] failures of a user from every address in a
/// window, each attempt for that user waits [`Throttle::USER_DELAY`] before it is checked
/// ([`Admission::Slow`]), right password or not, so that guessing from many addresses is slowed
/// and the operator still gets in. Each table holds at most [`Throttle::MAX_ENTRIES`] entries;
/// when full, ended windows are dropped, then the oldest window: an entry is never shared. User
/// names are counted by their first [`Throttle::MAX_USER_BYTES`] bytes. Failures are logged at
/// most once per window and entry.
#[derive(Debug, Default)]
pub struct Throttle {
    state: std::sync::Mutex<ThrottleState>,
}

#[derive(Debug, Default)]
struct ThrottleState {
    pairs: std::collections::HashMap<(Option<std::net::IpAddr>, String), Failures>,
    users: std::collections::HashMap<String, Failures>,
}

#[derive(Debug, Clone, Copy)]
struct Failures {
    since: std::time::Instant,
    count: u32,
}

/// What the throttle says of an attempt to authenticate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    /// Check the credentials now.
    Go,
    /// Check them after this wait (the user is being guessed from many addresses).
    Slow(std::time::Duration),
    /// Refuse without checking: this address guessed this user's password too often; the
    /// window ends after this long.
    Refuse(std::time::Duration),
}

/// Counts one failure in `table` under `key`, making room first (never sharing an entry);
/// answers the count in the current window.
fn count_failure<K: std::hash::Hash + Eq + Clone>(
    table: &mut std::collections::HashMap<K, Failures>,
    key: &K,
    now: std::time::Instant,
) -> u32 {
    if !table.contains_key(key) && table.len() >= Throttle::MAX_ENTRIES {
        table.retain(|_, f| now.saturating_duration_since(f.since) < Throttle::WINDOW);
        if table.len() >= Throttle::MAX_ENTRIES
            && let Some(oldest) = table
                .iter()
                .min_by_key(|(_, f)| f.since)
                .map(|(k, _)| k.clone())
        {
            table.remove(&oldest);
        }
    }
    let entry = table.entry(key.clone()).or_insert(Failures {
        since: now,
        count: 0,
    });
    if now.saturating_duration_since(entry.since) >= Throttle::WINDOW {
        *entry = Failures {
            since: now,
            count: 0,
        };
    }
    entry.count = entry.count.saturating_add(1);
    entry.count
}

/// The failures counted in `table` under `key` in its current window, and when it began.
fn in_window<K: std::hash::Hash + Eq>(
    table: &std::collections::HashMap<K, Failures>,
    key: &K,
    now: std::time::Instant,
) -> Option<(u32, std::time::Duration)> {
    let failures = table.get(key)?;
    let elapsed = now.saturating_duration_since(failures.since);
    (elapsed < Throttle::WINDOW).then_some((failures.count, elapsed))
}

impl Throttle {
    /// Failures allowed per address and user in a window.
    pub const MAX_FAILURES: u32 = 10;
    /// Failures of a user, from every address, in a window past which its attempts are slowed.
    pub const USER_FAILURES: u32 = 30;
    /// The wait of each attempt for a user past [`Self::USER_FAILURES`].
    pub const USER_DELAY: std::time::Duration = std::time::Duration::from_secs(1);
    /// The window.
    pub const WINDOW: std::time::Duration = std::time::Duration::from_secs(60);
    /// Most entries per table.
    pub const MAX_ENTRIES: usize = 4096;
    /// Bytes of a user name counted.
    pub const MAX_USER_BYTES: usize = 64;

    fn user_key(user: &str) -> String {
        let mut end = user.len().min(Self::MAX_USER_BYTES);
        while !user.is_char_boundary(end) {
            end -= 1;
        }
        user[..end].to_owned()
    }

    fn state(&self) -> std::sync::MutexGuard<'_, ThrottleState> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// What to do with an attempt of `user` from `client`.
    pub fn admit(&self, client: Option<std::net::IpAddr>, user: &str) -> Admission {
        self.admit_at(client, user, std::time::Instant::now())
    }

    /// [`Self::admit`] at `now`.
    pub fn admit_at(
        &self,
        client: Option<std::net::IpAddr>,
        user: &str,
        now: std::time::Instant,
    ) -> Admission {
        let user = Self::user_key(user);
        let state = self.state();
        if let Some((count, elapsed)) = in_window(&state.pairs, &(client, user.clone()), now)
            && count >= Self::MAX_FAILURES
        {
            return Admission::Refuse(Self::WINDOW.saturating_sub(elapsed));
        }
        match in_window(&state.users, &user, now) {
            Some((count, _)) if count >= Self::USER_FAILURES => Admission::Slow(Self::USER_DELAY),
            _ => Admission::Go,
        }
    }

    /// Records a failed authentication of `user` from `client`.
    pub fn failed(&self, client: Option<std::net::IpAddr>, user: &str) {
        self.failed_at(client, user, std::time::Instant::now());
    }

    /// [`Self::failed`] at `now`.
    pub fn failed_at(&self, client: Option<std::net::IpAddr>, user: &str, now: std::time::Instant) {
        let user = Self::user_key(user);
        let mut state = self.state();
        let pair = count_failure(&mut state.pairs, &(client, user.clone()), now);
        let all = count_failure(&mut state.users, &user, now);
        let client_text = client.map_or_else(|| "(unknown)".to_owned(), |ip| ip.to_string());
        if pair == 1 {
            tracing::warn!(client = %client_text, %user, "failed authentication (further failures of this client and user are logged once per minute)");
        } else if pair == Self::MAX_FAILURES {
            tracing::warn!(client = %client_text, %user, failures = pair, window_s = Self::WINDOW.as_secs(), "too many failed authentications: this client is refused for this user until its window ends");
        }
        if all == Self::USER_FAILURES {
            tracing::warn!(%user, failures = all, window_s = Self::WINDOW.as_secs(), delay_ms = Self::USER_DELAY.as_millis(), "a user's password is being guessed from several addresses: each attempt for it waits until the window ends");
        }
    }

    /// Entries held (address and user pairs, users), for tests and figures.
    pub fn entries(&self) -> (usize, usize) {
        let state = self.state();
        (state.pairs.len(), state.users.len())
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

    mod throttle {
        use super::super::{Admission, Throttle};
        use std::net::{IpAddr, Ipv4Addr};
        use std::time::{Duration, Instant};

        fn ip(n: u32) -> Option<IpAddr> {
            Some(IpAddr::V4(Ipv4Addr::from(0x7f00_0000 + n)))
        }

        #[test]
        fn an_address_guessing_a_user_is_refused_for_that_user_only() {
            let t = Throttle::default();
            let now = Instant::now();
            for _ in 0..Throttle::MAX_FAILURES {
                assert_eq!(t.admit_at(ip(1), "admin", now), Admission::Go);
                t.failed_at(ip(1), "admin", now);
            }
            assert_eq!(
                t.admit_at(ip(1), "admin", now + Duration::from_secs(20)),
                Admission::Refuse(Duration::from_secs(40))
            );
            // Another user from that address, that user from another address: untouched.
            assert_eq!(t.admit_at(ip(1), "viewer", now), Admission::Go);
            assert_eq!(t.admit_at(ip(2), "admin", now), Admission::Go);
            // The window ends.
            assert_eq!(
                t.admit_at(ip(1), "admin", now + Throttle::WINDOW),
                Admission::Go
            );
        }

        #[test]
        fn guesses_from_many_addresses_slow_the_user_and_refuse_nobody() {
            let t = Throttle::default();
            let now = Instant::now();
            for n in 0..Throttle::USER_FAILURES {
                t.failed_at(ip(100 + n), "admin", now);
            }
            assert_eq!(
                t.admit_at(ip(1), "admin", now),
                Admission::Slow(Throttle::USER_DELAY)
            );
            assert_eq!(t.admit_at(ip(1), "viewer", now), Admission::Go);
            assert_eq!(
                t.admit_at(ip(1), "admin", now + Throttle::WINDOW),
                Admission::Go
            );
        }

        #[test]
        fn a_full_table_evicts_and_never_shares_an_entry() {
            let t = Throttle::default();
            let now = Instant::now();
            // One failure from each of more addresses than the table holds, each a user of
            // its own (so that no user is slowed either).
            let many = u32::try_from(Throttle::MAX_ENTRIES).unwrap() + 10;
            for n in 0..many {
                t.failed_at(
                    ip(10 + n),
                    &format!("u{n}"),
                    now + Duration::from_millis(n.into()),
                );
            }
            let (pairs, users) = t.entries();
            assert!(pairs <= Throttle::MAX_ENTRIES && users <= Throttle::MAX_ENTRIES);
            // An address that never failed gets in with any user.
            assert_eq!(t.admit_at(ip(1), "admin", now), Admission::Go);
            // A guesser keeps its own entry while newer ones come: the oldest are evicted.
            let t = Throttle::default();
            for _ in 0..Throttle::MAX_FAILURES {
                t.failed_at(ip(1), "admin", now + Duration::from_secs(1));
            }
            for n in 0..many {
                t.failed_at(ip(10 + n), "x", now);
            }
            assert!(matches!(
                t.admit_at(ip(1), "admin", now + Duration::from_secs(2)),
                Admission::Refuse(_)
            ));
        }

        #[test]
        fn user_names_are_counted_by_their_first_bytes() {
            let t = Throttle::default();
            let now = Instant::now();
            let long = "é".repeat(100);
            for _ in 0..Throttle::MAX_FAILURES {
                t.failed_at(ip(1), &long, now);
            }
            assert!(matches!(
                t.admit_at(ip(1), &long, now),
                Admission::Refuse(_)
            ));
        }
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
