//! Fetching the RAPI answers over HTTPS with nodecare's Ganeti client, pinning the cluster
//! certificate.
//!
//! Ganeti's RAPI certificate is self-signed with no subject alternative name
//! (an X.509 v1 certificate in Ganeti 3.0.2), so ordinary WebPKI verification
//! rejects it. Instead the certificate given with `--rapi-ca` (Ganeti's
//! `rapi.pem`) is pinned: the server must present exactly that certificate and
//! prove it holds the key.

use std::path::Path;
use std::time::Duration;

use nodecare_ganeti::rapi::client::{Credentials, RapiClient, RapiConfig, ServerTrust};
use nodecare_roll::from_rapi::{DecodedAnswers, cluster_from_decoded};

/// A RAPI client for `url` (`https://user:pass@host:port`), pinning the certificate in `ca`;
/// also the address to name in errors (without the credentials).
pub(crate) fn client(url: &str, ca: Option<&Path>) -> Result<(RapiClient, String), String> {
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
    let mut config = RapiConfig::new(
        base.as_str().trim_end_matches('/'),
        ServerTrust::PinnedCertFile(ca.to_path_buf()),
    );
    config.connect_timeout = Duration::from_secs(15);
    config.request_timeout = Duration::from_secs(60);
    if !user.is_empty() {
        config = config.with_credentials(Credentials { user, password });
    }
    // Errors name the server without the credentials.
    let shown = base.as_str().trim_end_matches('/').to_owned();
    let client = RapiClient::new(config).map_err(|e| format!("{shown}: {e}"))?;
    Ok((client, shown))
}

/// Loads the cluster from a RAPI endpoint such as `https://user:pass@host:5080`.
pub(crate) fn load(url: &str, ca: Option<&Path>) -> Result<nodecare_roll::Cluster, String> {
    let (client, shown) = client(url, ca)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the HTTP runtime: {e}"))?;
    let answers = runtime
        .block_on(async {
            Ok::<_, nodecare_ganeti::rapi::RapiError>(DecodedAnswers {
                groups: client.groups().await?,
                nodes: client.nodes().await?,
                instances: client.instances().await?,
                info: client.cluster_info().await?,
            })
        })
        .map_err(|e| format!("{shown}: {e}"))?;
    cluster_from_decoded(&answers).map_err(|e| e.to_string())
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
        let e = load("https://127.0.0.1:5080", Some(&pem)).unwrap_err();
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
