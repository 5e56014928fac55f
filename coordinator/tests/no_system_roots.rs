//! The coordinator starts on a host without CA certificates: a Debian installed with
//! `--no-install-recommends` (as Debian 13's Ganeti 3.1 node root of tests/ganeti/make-root.sh)
//! has no `ca-certificates`. The agents speak plain HTTP and sign their reports, so the agent
//! client trusts no certificate authority and must not need the system's.
//!
//! The check runs in a child process of this test binary whose `SSL_CERT_FILE` and
//! `SSL_CERT_DIR` name a file and a directory that do not exist: the system's certificates are
//! then not found, as on such a host.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code")]

use std::process::Command;
use std::time::Duration;

use nodecare_coordinator::scrape::{ScrapeSettings, Scraper};
use nodecare_protocol::{HmacKey, KeyRing, VerifyPolicy};

const CHILD: &str = "NODECARE_TEST_NO_SYSTEM_ROOTS_CHILD";
const TEST: &str = "the_agent_client_builds_without_system_ca_certificates";

#[test]
#[allow(
    clippy::disallowed_methods,
    reason = "the test runs its own binary again, with another environment"
)]
fn the_agent_client_builds_without_system_ca_certificates() {
    if std::env::var_os(CHILD).is_some() {
        let settings = ScrapeSettings {
            concurrency: 2,
            timeout: Duration::from_secs(5),
            policy: VerifyPolicy::default(),
        };
        let key = HmacKey::new(b"0123456789abcdef0123456789abcdef".to_vec());
        if let Err(e) = Scraper::new(KeyRing::single(key), settings) {
            panic!("{e}");
        }
        return;
    }
    let missing = std::env::temp_dir().join(format!("nodecare-no-roots-{}", std::process::id()));
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", TEST, "--nocapture", "--test-threads=1"])
        .env(CHILD, "1")
        .env("SSL_CERT_FILE", missing.join("ca-certificates.crt"))
        .env("SSL_CERT_DIR", &missing)
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "without CA certificates: {text}");
    assert!(text.contains("1 passed"), "the child ran no test: {text}");
}
