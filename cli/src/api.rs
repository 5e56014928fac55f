//! Talking to the coordinator's API: its address, the HTTP client, credentials of a write and
//! the coordinator's error answers. Shared by every command that calls the coordinator.

use std::time::Duration;

use serde::Deserialize;

/// Default coordinator API (on the master).
pub(crate) const DEFAULT_URL: &str = "http://127.0.0.1:1816";

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

pub(crate) fn client() -> Result<reqwest::blocking::Client, String> {
    // reqwest is built without a TLS provider of its own; an error means one is installed.
    if rustls::crypto::ring::default_provider()
        .install_default()
        .is_err()
    {
        // Already installed by another part of the program.
    }
    reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .map_err(|e| format!("cannot build the HTTP client: {e}"))
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
    let response = client()?
        .get(url)
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
