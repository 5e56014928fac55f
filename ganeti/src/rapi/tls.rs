//! TLS for Ganeti's RAPI: pin the cluster certificate.
//!
//! Ganeti's RAPI certificate is self-signed and names no host in a subject alternative name;
//! the one Ganeti 3.0.2 really generates is even an X.509 **version 1** certificate (no
//! extensions at all), which WebPKI cannot parse. So ordinary verification always rejects it.
//! Instead the server must present exactly one of the configured certificates (byte-for-byte
//! DER equality). The handshake signature is still verified against that certificate's public
//! key, so a peer that merely replays the public certificate without its private key fails the
//! handshake: under TLS 1.3 with the raw public key taken from the pinned certificate (works
//! for v1 certificates), under TLS 1.2 through WebPKI (v3 certificates only).

use std::path::Path;
use std::sync::{Arc, OnceLock};

use rustls::DigitallySignedStruct;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{CryptoProvider, WebPkiSupportedAlgorithms};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, SubjectPublicKeyInfoDer, UnixTime};

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
    #[error("RAPI certificate {path}: {message}")]
    BadCertificate { path: String, message: String },
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
    for cert in &certs {
        subject_public_key_info(cert.as_ref()).map_err(|message| {
            TlsSetupError::BadCertificate {
                path: origin.to_owned(),
                message,
            }
        })?;
    }
    Ok(certs)
}

/// One DER element: (tag, contents, whole element, rest of the input).
type DerElement<'a> = (u8, &'a [u8], &'a [u8], &'a [u8]);

fn der_element(input: &[u8]) -> Result<DerElement<'_>, String> {
    let (&tag, rest) = input.split_first().ok_or("truncated DER")?;
    let (&first, rest) = rest.split_first().ok_or("truncated DER length")?;
    let (len, rest) = if first < 0x80 {
        (usize::from(first), rest)
    } else {
        let n = usize::from(first & 0x7f);
        if n == 0 || n > 4 || rest.len() < n {
            return Err("unsupported DER length".into());
        }
        let (bytes, rest) = rest.split_at(n);
        (
            bytes
                .iter()
                .fold(0usize, |acc, b| (acc << 8) | usize::from(*b)),
            rest,
        )
    };
    if rest.len() < len {
        return Err("DER element longer than its input".into());
    }
    let header = input.len() - rest.len();
    let (contents, after) = rest.split_at(len);
    Ok((tag, contents, &input[..header + len], after))
}

/// The `subjectPublicKeyInfo` element of an X.509 certificate (any version).
pub fn subject_public_key_info(cert_der: &[u8]) -> Result<&[u8], String> {
    const SEQUENCE: u8 = 0x30;
    let (tag, certificate, _, _) = der_element(cert_der)?;
    if tag != SEQUENCE {
        return Err("not an X.509 certificate (no outer SEQUENCE)".into());
    }
    let (tag, tbs, _, _) = der_element(certificate)?;
    if tag != SEQUENCE {
        return Err("not an X.509 certificate (no tbsCertificate)".into());
    }
    let mut rest = tbs;
    // [0] EXPLICIT version is absent in version 1 certificates.
    let (tag, _, _, after) = der_element(rest)?;
    if tag == 0xa0 {
        rest = after;
    }
    // serialNumber, signature, issuer, validity, subject, then subjectPublicKeyInfo.
    for _ in 0..5 {
        let (_, _, _, after) = der_element(rest)?;
        rest = after;
    }
    let (tag, _, whole, _) = der_element(rest)?;
    if tag != SEQUENCE {
        return Err("certificate has no subjectPublicKeyInfo".into());
    }
    Ok(whole)
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
        // Only called after verify_server_cert accepted `cert`, i.e. it is a pinned one.
        let spki = subject_public_key_info(cert.as_ref()).map_err(|_| {
            rustls::Error::InvalidCertificate(rustls::CertificateError::BadEncoding)
        })?;
        rustls::crypto::verify_tls13_signature_with_raw_key(
            message,
            &SubjectPublicKeyInfoDer::from(spki),
            dss,
            &self.algorithms,
        )
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
    fn spki_of_a_version_1_certificate() {
        // Shape of Ganeti 3.0.2's cluster certificate: X.509 v1, no extensions.
        let pem = include_str!("../../tests/data/ganeti-v1-cert.pem");
        let certs = parse_pinned_certificates(pem.as_bytes(), "v1").unwrap();
        let spki = subject_public_key_info(certs[0].as_ref()).unwrap();
        assert_eq!(spki[0], 0x30);
        assert!(spki.len() > 256, "an RSA-2048 key");
        let key = rcgen::KeyPair::generate().unwrap();
        let v3 = rcgen::CertificateParams::new(Vec::<String>::new())
            .unwrap()
            .self_signed(&key)
            .unwrap();
        assert!(
            subject_public_key_info(v3.der())
                .unwrap()
                .ends_with(key.public_key_raw())
        );
        assert!(subject_public_key_info(b"\x30\x03\x02\x01").is_err());
        assert!(subject_public_key_info(&[]).is_err());
    }

    mod props {
        use super::super::*;
        use proptest::prelude::*;
        proptest! {
            #[test]
            fn spki_parser_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
                let _parsed = subject_public_key_info(&bytes).is_ok();
            }
        }
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
