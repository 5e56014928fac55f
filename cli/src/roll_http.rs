//! Fetching the RAPI answers over HTTPS, pinning the cluster certificate.
//!
//! Ganeti's RAPI certificate is self-signed, marked CA and has no subject
//! alternative name, so ordinary WebPKI verification rejects it. Instead the
//! certificate given with `--rapi-ca` (Ganeti's `rapi.pem`) is pinned: the
//! server must present exactly that certificate and prove it holds the key.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use rustls::DigitallySignedStruct;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{CryptoProvider, WebPkiSupportedAlgorithms};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};

#[derive(Debug)]
struct PinnedCertificate {
    pinned: Vec<CertificateDer<'static>>,
    algorithms: WebPkiSupportedAlgorithms,
}

impl ServerCertVerifier for PinnedCertificate {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        if self
            .pinned
            .iter()
            .any(|c| c.as_ref() == end_entity.as_ref())
        {
            Ok(ServerCertVerified::assertion())
        } else {
            Err(rustls::Error::InvalidCertificate(
                rustls::CertificateError::ApplicationVerificationFailure,
            ))
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

fn pinned_certificates(pem: &[u8], shown: &str) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("{shown}: invalid PEM: {e}"))?;
    if certs.is_empty() {
        return Err(format!("{shown}: no certificate found"));
    }
    Ok(certs)
}

fn tls_config(ca: &Path) -> Result<rustls::ClientConfig, String> {
    let shown = ca.display().to_string();
    let pem = std::fs::read(ca).map_err(|e| format!("{shown}: {e}"))?;
    let pinned = pinned_certificates(&pem, &shown)?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let verifier = PinnedCertificate {
        pinned,
        algorithms: provider.signature_verification_algorithms,
    };
    Ok(rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS setup: {e}"))?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(verifier))
        .with_no_client_auth())
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
    // reqwest is built without a provider and needs a process-wide one;
    // if one is already installed it stays.
    let _first_install =
        CryptoProvider::install_default(rustls::crypto::ring::default_provider()).is_ok();
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
    nodecare_roll::rapi::cluster_from_rapi(nodecare_roll::rapi::RapiAnswers {
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
        let e = pinned_certificates(
            b"-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n",
            "x.pem",
        )
        .unwrap_err();
        assert!(e.contains("x.pem"), "{e}");
    }

    #[test]
    fn requires_pinning_and_https() {
        let e = load("https://127.0.0.1:5080", None).unwrap_err();
        assert!(e.contains("--rapi-ca"), "{e}");
        let e = load("http://127.0.0.1:5080", None).unwrap_err();
        assert!(e.contains("only https://"), "{e}");
    }

    #[test]
    fn verifier_accepts_only_the_pinned_certificate() {
        let provider = rustls::crypto::ring::default_provider();
        let v = PinnedCertificate {
            pinned: vec![CertificateDer::from(vec![1u8, 2, 3])],
            algorithms: provider.signature_verification_algorithms,
        };
        let name = ServerName::try_from("cluster").unwrap();
        let now = UnixTime::now();
        assert!(
            v.verify_server_cert(&CertificateDer::from(vec![1u8, 2, 3]), &[], &name, &[], now)
                .is_ok()
        );
        assert!(
            v.verify_server_cert(&CertificateDer::from(vec![9u8]), &[], &name, &[], now)
                .is_err()
        );
    }
}
