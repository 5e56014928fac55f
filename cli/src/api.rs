//! Talking to the coordinator's API: its address, the HTTP client, credentials of a write and
//! the coordinator's error answers. Shared by every command that calls the coordinator.

use std::time::Duration;

use serde::Deserialize;

/// Default coordinator API (on the master). While the coordinator's local socket
/// ([`DEFAULT_SOCKET`]) is there and this user may connect to it, the default goes there.
pub(crate) const DEFAULT_URL: &str = "http://127.0.0.1:1816";
/// The coordinator's local socket on the master (its `api_socket`).
pub(crate) const DEFAULT_SOCKET: &str = "/run/nodecare/coordinator.sock";
/// How `--url` names a local socket: `unix:/run/nodecare/coordinator.sock`.
const UNIX_PREFIX: &str = "unix:";
/// The URL of requests sent over a local socket (its host is not used).
const SOCKET_BASE: &str = "http://localhost";

/// Where a request for `url` goes: a local socket and the URL to ask there, or `url` itself
/// over the network.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Target {
    /// Over the network.
    Network(String),
    /// Over a local socket.
    Socket {
        /// The socket.
        path: std::path::PathBuf,
        /// The URL asked on it.
        url: String,
    },
}

/// Whether the coordinator answers this process on the socket `path`: it is a socket and a
/// request there is answered `200` (a caller the coordinator does not let in gets `403`, a
/// socket no coordinator listens on refuses the connection).
fn usable_socket(path: &std::path::Path) -> bool {
    use std::os::unix::fs::FileTypeExt as _;
    if !std::fs::metadata(path).is_ok_and(|metadata| metadata.file_type().is_socket()) {
        return false;
    }
    install_crypto_provider();
    reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(2))
        .unix_socket(path)
        .build()
        .and_then(|client| client.get(format!("{SOCKET_BASE}/1")).send())
        .is_ok_and(|response| response.status().is_success())
}

/// Where a request for `url` (a `--url` with a path appended) goes. `unix:PATH`: the socket is
/// the first prefix of `PATH` ending before a `/` that is not a directory, what follows the
/// request's path. The default URL goes to `default_socket` when `usable` says so.
pub(crate) fn target(
    url: &str,
    default_socket: &std::path::Path,
    usable: impl Fn(&std::path::Path) -> bool,
) -> Result<Target, String> {
    if let Some(rest) = url.strip_prefix(UNIX_PREFIX) {
        let mut ends: Vec<usize> = rest
            .char_indices()
            .filter(|(at, c)| *c == '/' && *at > 0)
            .map(|(at, _)| at)
            .collect();
        ends.push(rest.len());
        for end in ends {
            let path = std::path::Path::new(&rest[..end]);
            if path.is_dir() {
                continue;
            }
            if !path.exists() {
                return Err(format!("no coordinator socket at {}", path.display()));
            }
            let request = &rest[end..];
            return Ok(Target::Socket {
                path: path.to_owned(),
                url: format!(
                    "{SOCKET_BASE}{}",
                    if request.is_empty() { "/" } else { request }
                ),
            });
        }
        return Err(format!(
            "{url}: names no socket (unix:/run/nodecare/coordinator.sock)"
        ));
    }
    if let Some(rest) = url.strip_prefix(DEFAULT_URL)
        && (rest.is_empty() || rest.starts_with('/'))
        && usable(default_socket)
    {
        return Ok(Target::Socket {
            path: default_socket.to_owned(),
            url: format!("{SOCKET_BASE}{rest}"),
        });
    }
    Ok(Target::Network(url.to_owned()))
}

/// The credentials of a write: `--user` with the password from `--password-file` or the
/// `NODECARE_PASSWORD` environment variable.
pub(crate) fn credentials(
    user: Option<&str>,
    password_file: Option<&std::path::Path>,
    env_password: Option<String>,
) -> Result<Option<(String, String)>, String> {
    let Some(user) = user else {
        if password_file.is_some() {
            return Err("--password-file needs --user".into());
        }
        return Ok(None);
    };
    let password = match password_file {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .map_err(|e| format!("cannot read the password file {}: {e}", path.display()))?;
            text.lines().next().unwrap_or("").to_owned()
        }
        None => env_password.ok_or_else(|| {
            format!("--user {user} needs a password: --password-file FILE or NODECARE_PASSWORD")
        })?,
    };
    if password.is_empty() {
        return Err("the password is empty".into());
    }
    Ok(Some((user.to_owned(), password)))
}

/// reqwest is built without a TLS provider of its own: installs ring's (once; an error means
/// one is installed already).
fn install_crypto_provider() {
    if rustls::crypto::ring::default_provider()
        .install_default()
        .is_err()
    {
        // Already installed by another part of the program.
    }
}

/// The HTTP client for `url` and the URL to ask with it: over the coordinator's local socket
/// when `url` names one (`unix:PATH`) or is the default and the socket is there ([`target`]).
pub(crate) fn client_for(url: &str) -> Result<(reqwest::blocking::Client, String), String> {
    install_crypto_provider();
    let builder = reqwest::blocking::Client::builder().timeout(Duration::from_secs(10));
    let (builder, url) = match target(url, std::path::Path::new(DEFAULT_SOCKET), usable_socket)? {
        Target::Network(url) => (builder, url),
        Target::Socket { path, url } => (builder.unix_socket(path), url),
    };
    let client = builder
        .build()
        .map_err(|e| format!("cannot build the HTTP client: {e}"))?;
    Ok((client, url))
}

/// The coordinator's error answer (`{"code", "message"}`).
#[derive(Debug, Deserialize)]
struct ApiError {
    message: String,
}

/// The message of an error answer, or the body itself if it is not one.
pub(crate) fn message(body: &str) -> String {
    serde_json::from_str::<ApiError>(body).map_or_else(|_| body.trim().to_owned(), |e| e.message)
}

/// GETs `url` and returns the body of a successful answer.
pub(crate) fn fetch(url: &str) -> Result<String, String> {
    let (client, target) = client_for(url)?;
    let response = client
        .get(target)
        .send()
        .map_err(|e| format!("cannot reach the coordinator at {url}: {e}"))?;
    let status = response.status();
    let body = response
        .text()
        .map_err(|e| format!("{url}: cannot read the answer: {e}"))?;
    if !status.is_success() {
        return Err(format!("{url}: HTTP {status}: {}", message(&body)));
    }
    Ok(body)
}

/// `GET url` for command `command`: the answer as it came (`json`), or decoded as `T` and
/// rendered for people. Errors on stderr, exit status 1.
pub(crate) fn show<T: serde::de::DeserializeOwned>(
    command: &str,
    url: &str,
    json: bool,
    render: impl FnOnce(&T) -> String,
) -> std::process::ExitCode {
    let body = match fetch(url) {
        Ok(body) => body,
        Err(message) => {
            eprintln!("nodecare {command}: {message}");
            return std::process::ExitCode::FAILURE;
        }
    };
    if json {
        println!("{body}");
        return std::process::ExitCode::SUCCESS;
    }
    match serde_json::from_str::<T>(&body) {
        Ok(answer) => {
            print!("{}", render(&answer));
            std::process::ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("nodecare {command}: the coordinator's answer does not decode: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_local_socket_is_named_or_taken_by_default_when_it_answers() {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("coordinator.sock");
        let listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
        let named = format!("unix:{}/1/breaker/reset", socket.display());
        assert_eq!(
            target(&named, &socket, |_| false),
            Ok(Target::Socket {
                path: socket.clone(),
                url: "http://localhost/1/breaker/reset".into()
            })
        );
        assert_eq!(
            target(&format!("unix:{}", socket.display()), &socket, |_| false),
            Ok(Target::Socket {
                path: socket.clone(),
                url: "http://localhost/".into()
            })
        );
        let missing = format!("unix:{}/1/status", dir.path().join("none.sock").display());
        assert!(
            target(&missing, &socket, |_| true)
                .unwrap_err()
                .contains("no coordinator socket")
        );
        // The default URL goes to the socket only while the coordinator answers there.
        let default = format!("{DEFAULT_URL}/1/breaker");
        assert_eq!(
            target(&default, &socket, |_| true),
            Ok(Target::Socket {
                path: socket.clone(),
                url: "http://localhost/1/breaker".into()
            })
        );
        assert_eq!(
            target(&default, &socket, |_| false),
            Ok(Target::Network(default.clone()))
        );
        let other = "http://127.0.0.1:18160/1/breaker";
        assert_eq!(
            target(other, &socket, |_| true),
            Ok(Target::Network(other.into()))
        );
        assert!(!usable_socket(&dir.path().join("none.sock")));
        // A socket nobody answers on is not used.
        drop(listener);
        assert!(!usable_socket(&socket));
    }

    #[test]
    fn credentials_come_from_a_file_or_the_environment() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("pw");
        std::fs::write(&file, "s3cret\nignored\n").unwrap();
        assert_eq!(credentials(None, None, Some("x".into())), Ok(None));
        assert_eq!(
            credentials(Some("admin"), Some(&file), Some("env".into())),
            Ok(Some(("admin".into(), "s3cret".into())))
        );
        assert_eq!(
            credentials(Some("admin"), None, Some("env".into())),
            Ok(Some(("admin".into(), "env".into())))
        );
        assert!(
            credentials(Some("admin"), None, None)
                .unwrap_err()
                .contains("needs a password")
        );
        assert!(
            credentials(None, Some(&file), None)
                .unwrap_err()
                .contains("needs --user")
        );
        assert!(
            credentials(Some("admin"), Some(&dir.path().join("missing")), None)
                .unwrap_err()
                .contains("cannot read the password file")
        );
        std::fs::write(&file, "\n").unwrap();
        assert!(credentials(Some("admin"), Some(&file), None).is_err());
    }
}
