//! TLS for Ganeti's RAPI: pin the cluster certificate.
//!
//! Ganeti's RAPI certificate is self-signed, marked `CA:TRUE` and has no subject alternative
//! name, so WebPKI verification (which needs a SAN match and refuses a CA certificate as the
//! end entity) always rejects it. Instead the server must present exactly one of the
//! configured certificates (byte-for-byte DER equality). The handshake signature is still
//! verified against that certificate's key, so a peer that merely replays the public
//! certificate without its private key fails the handshake.

use std::path::Path;
use std::sync::{Arc, OnceLock};

use rustls::DigitallySignedStruct;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{CryptoProvider, WebPkiSupportedAlgorithms};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};

/// Errors loading the pinned certificate.
#[derive(Debug, thiserror::Error)]
pub enum TlsSetupError {
    #[error("cannot read RAPI certificate {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("RAPI certificate {path} holds no PEM CERTIFICATE block")]
    NoCertificate { path: String },
    #[error("RAPI certificate {path} is not valid PEM: {message}")]
    BadPem { path: String, message: String },
    #[error("cannot build the TLS configuration: {0}")]
    Config(String),
}

/// The process-wide rustls provider (ring). reqwest is built with `rustls-no-provider`, so a
/// default provider must exist before any client is built; installing is idempotent here and
/// tolerates a provider another part of the process installed first.
pub fn crypto_provider() -> Arc<CryptoProvider> {
    static PROVIDER: OnceLock<Arc<CryptoProvider>> = OnceLock::new();
    PROVIDER
        .get_or_init(|| {
            let provider = Arc::new(rustls::crypto::ring::default_provider());
            if CryptoProvider::get_default().is_none() {
                // Losing the race to another installer is fine: any default will do for
                // reqwest, and our own configs always use `provider` explicitly.
                let _ignored = CryptoProvider::install_default((*provider).clone());
            }
            provider
        })
        .clone()
}

/// Reads every certificate of a PEM file (a Ganeti `rapi.pem` also holds the private key,
/// which is skipped). Several certificates allow a rollover: any of them is accepted.
pub fn load_pinned_certificates(
    path: &Path,
) -> Result<Vec<CertificateDer<'static>>, TlsSetupError> {
    let shown = path.display().to_string();
    let pem = std::fs::read(path).map_err(|source| TlsSetupError::Read {
        path: shown.clone(),
        source,
    })?;
    parse_pinned_certificates(&pem, &shown)
}

/// Parses the certificates of PEM text; `origin` names it in errors.
pub fn parse_pinned_certificates(
    pem: &[u8],
    origin: &str,
) -> Result<Vec<CertificateDer<'static>>, TlsSetupError> {
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TlsSetupError::BadPem {
            path: origin.to_owned(),
            message: e.to_string(),
        })?;
    if certs.is_empty() {
        return Err(TlsSetupError::NoCertificate {
            path: origin.to_owned(),
        });
    }
    Ok(certs)
}

/// Accepts exactly the pinned certificates, whatever their shape and validity period; the
/// host name is not checked (Ganeti's certificate names none).
#[derive(Debug)]
pub struct PinnedCertVerifier {
    pinned: Vec<CertificateDer<'static>>,
    algorithms: WebPkiSupportedAlgorithms,
}

impl PinnedCertVerifier {
    pub fn new(pinned: Vec<CertificateDer<'static>>, provider: &CryptoProvider) -> Self {
        Self {
            pinned,
            algorithms: provider.signature_verification_algorithms,
        }
    }
}

impl ServerCertVerifier for PinnedCertVerifier {
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
            .any(|pin| pin.as_ref() == end_entity.as_ref())
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

/// A client configuration that trusts only the pinned certificates.
pub fn pinned_client_config(
    pinned: Vec<CertificateDer<'static>>,
) -> Result<rustls::ClientConfig, TlsSetupError> {
    let provider = crypto_provider();
    let verifier = Arc::new(PinnedCertVerifier::new(pinned, &provider));
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsSetupError::Config(e.to_string()))?
        .dangerous()
        .with_custom_certificate_verifier(verifier)
        .with_no_client_auth();
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pem_without_certificate_is_an_error() {
        let err = parse_pinned_certificates(
            b"-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n",
            "x",
        )
        .unwrap_err();
        assert!(matches!(err, TlsSetupError::NoCertificate { .. }), "{err}");
        let err = parse_pinned_certificates(b"", "x").unwrap_err();
        assert!(matches!(err, TlsSetupError::NoCertificate { .. }));
    }

    #[test]
    fn missing_file_is_an_error() {
        let err = load_pinned_certificates(Path::new("/nonexistent/rapi.pem")).unwrap_err();
        assert!(err.to_string().contains("/nonexistent/rapi.pem"));
    }

    #[test]
    fn verifier_compares_der() {
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(Vec::<String>::new())
            .unwrap()
            .self_signed(&key)
            .unwrap();
        let other_key = rcgen::KeyPair::generate().unwrap();
        let other = rcgen::CertificateParams::new(Vec::<String>::new())
            .unwrap()
            .self_signed(&other_key)
            .unwrap();
        let verifier = PinnedCertVerifier::new(vec![cert.der().clone()], &crypto_provider());
        let name = ServerName::try_from("ganeti.example.com").unwrap();
        assert!(
            verifier
                .verify_server_cert(cert.der(), &[], &name, &[], UnixTime::now())
                .is_ok()
        );
        assert!(
            verifier
                .verify_server_cert(other.der(), &[], &name, &[], UnixTime::now())
                .is_err()
        );
    }
}
