//! Fetching the RAPI answers over HTTPS with nodecare's Ganeti client, pinning the cluster
//! certificate.
//!
//! Ganeti's RAPI certificate is self-signed with no subject alternative name
//! (an X.509 v1 certificate in Ganeti 3.0.2), so ordinary WebPKI verification
//! rejects it. Instead the certificate given with `--rapi-ca` (Ganeti's
//! `rapi.pem`) is pinned: the server must present exactly that certificate and
//! prove it holds the key.

use std::path::Path;

use nodecare_ganeti::rapi::client::{RapiClient, RapiConfig};
use nodecare_roll::from_rapi::{DecodedAnswers, cluster_from_decoded};

/// A RAPI client for `url` (`https://user:pass@host:port`), pinning the certificate in `ca`;
/// also the address to name in errors (without the credentials).
pub(crate) fn client(url: &str, ca: Option<&Path>) -> Result<(RapiClient, String), String> {
    let (config, shown) = RapiConfig::for_operator(url, ca)?;
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
