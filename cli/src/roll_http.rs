//! Fetching the RAPI answers over HTTPS, pinning the cluster certificate.
//!
//! Ganeti's RAPI certificate is self-signed with no subject alternative name
//! (an X.509 v1 certificate in Ganeti 3.0.2), so ordinary WebPKI verification
//! rejects it. Instead the certificate given with `--rapi-ca` (Ganeti's
//! `rapi.pem`) is pinned with the coordinator's verifier: the server must
//! present exactly that certificate and prove it holds the key.

use std::path::Path;
use std::time::Duration;

use nodecare_ganeti::rapi::tls;

fn tls_config(ca: &Path) -> Result<rustls::ClientConfig, String> {
    let pinned = tls::load_pinned_certificates(ca).map_err(|e| e.to_string())?;
    tls::pinned_client_config(pinned).map_err(|e| e.to_string())
}

/// An error with its causes, which is where reqwest puts the useful part.
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}

/// Loads the cluster from a RAPI endpoint such as `https://user:pass@host:5080`.
pub(crate) fn load(url: &str, ca: Option<&Path>) -> Result<nodecare_roll::Cluster, String> {
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
    let password = base.password().map(str::to_owned);
    if base.set_username("").is_err() || base.set_password(None).is_err() {
        return Err(format!("{url}: cannot use credentials with this URL"));
    }
    // reqwest is built without a provider and needs a process-wide one.
    tls::crypto_provider();
    let client = reqwest::blocking::Client::builder()
        .use_preconfigured_tls(tls_config(ca)?)
        .connect_timeout(Duration::from_secs(15))
        .timeout(Duration::from_secs(60))
        .build()
        .map_err(|e| format!("HTTP client: {e}"))?;
    let fetch = |path: &str| -> Result<String, String> {
        let target = base.join(path).map_err(|e| format!("{url}: {e}"))?;
        let mut req = client.get(target.clone());
        if !user.is_empty() {
            req = req.basic_auth(&user, password.as_deref());
        }
        let resp = req
            .send()
            .map_err(|e| format!("{target}: {}", error_chain(&e)))?;
        let status = resp.status();
        let body = resp.text().map_err(|e| format!("{target}: {e}"))?;
        if !status.is_success() {
            let snippet: String = body.chars().take(200).collect();
            return Err(format!("{target}: HTTP {status}: {snippet}"));
        }
        Ok(body)
    };
    let groups = fetch("/2/groups?bulk=1")?;
    let nodes = fetch("/2/nodes?bulk=1")?;
    let instances = fetch("/2/instances?bulk=1")?;
    let info = fetch("/2/info")?;
    nodecare_roll::from_rapi::cluster_from_rapi(nodecare_roll::from_rapi::RapiAnswers {
        info: &info,
        groups: &groups,
        nodes: &nodes,
        instances: &instances,
    })
    .map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pem_without_certificate_is_rejected() {
        let dir = tempfile::tempdir().unwrap();
        let pem = dir.path().join("x.pem");
        std::fs::write(
            &pem,
            b"-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n",
        )
        .unwrap();
        let e = tls_config(&pem).unwrap_err();
        assert!(e.contains("x.pem"), "{e}");
    }

    #[test]
    fn requires_pinning_and_https() {
        let e = load("https://127.0.0.1:5080", None).unwrap_err();
        assert!(e.contains("--rapi-ca"), "{e}");
        let e = load("http://127.0.0.1:5080", None).unwrap_err();
        assert!(e.contains("only https://"), "{e}");
    }
}
