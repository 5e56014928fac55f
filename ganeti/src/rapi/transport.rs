//! What carries one RAPI request to Ganeti and its answer back.
//!
//! The [`super::client::RapiClient`] builds each request (method, path, query, JSON body; a
//! write's from [`super::request::rapi_request`]) and hands it to a [`Transport`] with its
//! timeout. [`HttpsTransport`] is the real
//! one (reqwest, the cluster certificate pinned, basic authentication); the simulated cluster
//! of `nodecare-ganeti-sim` provides an in-process one that answers from its route handler.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use super::config::{Credentials, RAPI_WAIT_PERIOD, RapiConfig, RapiError, ServerTrust};
use super::tls;

pub use super::request::{Method, RapiRequest};

/// The answer to a [`RapiRequest`]: HTTP status and body bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RapiResponse {
    pub status: u16,
    pub body: Vec<u8>,
}

/// Why a request got no answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TransportError {
    /// No answer within the request's timeout.
    #[error("timed out")]
    Timeout,
    /// Connecting, TLS, or reading the answer failed.
    #[error("{0}")]
    Failed(String),
}

/// Boxed future of [`Transport::send`] (keeps the trait `dyn`-compatible).
pub type TransportFuture<'a> =
    Pin<Box<dyn Future<Output = Result<RapiResponse, TransportError>> + Send + 'a>>;

/// Carries requests to a RAPI server.
pub trait Transport: Send + Sync + fmt::Debug {
    /// Sends one request and returns the answer, whatever its status; the whole exchange may
    /// take `timeout`.
    fn send<'a>(&'a self, request: &'a RapiRequest, timeout: Duration) -> TransportFuture<'a>;
}

/// RAPI over HTTPS with the cluster certificate pinned (or plain HTTP for a simulation on
/// loopback), with basic authentication.
#[derive(Debug, Clone)]
pub struct HttpsTransport {
    http: reqwest::Client,
    base_url: String,
    credentials: Option<Credentials>,
}

impl HttpsTransport {
    pub fn new(config: &RapiConfig) -> Result<Self, RapiError> {
        let base_url = config.base_url.trim_end_matches('/').to_owned();
        let https = base_url.starts_with("https://");
        if !https && !base_url.starts_with("http://") {
            return Err(RapiError::Config(format!(
                "RAPI URL must start with https:// (got `{base_url}`)"
            )));
        }
        let builder = reqwest::Client::builder()
            .no_proxy()
            .connect_timeout(config.connect_timeout)
            .timeout(config.request_timeout + RAPI_WAIT_PERIOD)
            .pool_idle_timeout(Duration::from_secs(30))
            .user_agent(concat!("nodecare-coordinator/", env!("CARGO_PKG_VERSION")));
        let builder = match (&config.trust, https) {
            (ServerTrust::PlainHttp, true) => {
                return Err(RapiError::Config(
                    "an https:// RAPI URL needs a pinned certificate (--rapi-cert)".into(),
                ));
            }
            (ServerTrust::PlainHttp, false) => builder,
            (_, false) => {
                return Err(RapiError::Config(format!(
                    "a pinned certificate was given but the RAPI URL `{base_url}` is not https://"
                )));
            }
            (ServerTrust::PinnedCertFile(path), true) => {
                let certs = tls::load_pinned_certificates(path)?;
                builder.use_preconfigured_tls(tls::pinned_client_config(certs)?)
            }
            (ServerTrust::PinnedCertPem(pem), true) => {
                let certs = tls::parse_pinned_certificates(pem, "configured PEM")?;
                builder.use_preconfigured_tls(tls::pinned_client_config(certs)?)
            }
        };
        // reqwest needs the process-wide provider even with a preconfigured TLS config.
        let _provider = tls::crypto_provider();
        let http = builder
            .build()
            .map_err(|e| RapiError::Config(format!("cannot build HTTP client: {e}")))?;
        Ok(Self {
            http,
            base_url,
            credentials: config.credentials.clone(),
        })
    }

    /// The server's URL, without a trailing slash.
    pub fn base_url(&self) -> &str {
        &self.base_url
    }

    async fn send_now(
        &self,
        request: &RapiRequest,
        timeout: Duration,
    ) -> Result<RapiResponse, TransportError> {
        let method = match request.method {
            Method::Get => reqwest::Method::GET,
            Method::Put => reqwest::Method::PUT,
            Method::Post => reqwest::Method::POST,
            Method::Delete => reqwest::Method::DELETE,
        };
        let url = format!("{}{}", self.base_url, request.path);
        let mut builder = self
            .http
            .request(method, &url)
            .timeout(timeout)
            .header("Accept", "application/json");
        if !request.query.is_empty() {
            builder = builder.query(&request.query);
        }
        if let Some(creds) = &self.credentials {
            builder = builder.basic_auth(&creds.user, Some(&creds.password));
        }
        if let Some(body) = &request.body {
            builder = builder.json(body);
        }
        let mut response = builder.send().await.map_err(|e| transport_error(&e))?;
        let status = response.status().as_u16();
        // The body's chunks go straight into one buffer of the announced size: collecting them
        // first and copying them into one (reqwest's `bytes()`), then into a `Vec`, held up to
        // three copies of the body at once (6 MB each for `GET /2/nodes?bulk=1` at 10 000
        // nodes).
        let mut body = Vec::with_capacity(preallocated(response.content_length()));
        while let Some(chunk) = response.chunk().await.map_err(|e| transport_error(&e))? {
            body.extend_from_slice(&chunk);
        }
        Ok(RapiResponse { status, body })
    }
}

impl Transport for HttpsTransport {
    fn send<'a>(&'a self, request: &'a RapiRequest, timeout: Duration) -> TransportFuture<'a> {
        Box::pin(self.send_now(request, timeout))
    }
}

/// Most bytes reserved up front for an answer's body from its `Content-Length` (a longer body
/// still grows the buffer as it arrives).
pub const MAX_PREALLOCATED_BODY: usize = 64 * 1024 * 1024;

/// The capacity reserved for a body announced as `content_length` bytes. Pure.
pub fn preallocated(content_length: Option<u64>) -> usize {
    content_length
        .and_then(|length| usize::try_from(length).ok())
        .unwrap_or(0)
        .min(MAX_PREALLOCATED_BODY)
}

fn transport_error(e: &reqwest::Error) -> TransportError {
    if e.is_timeout() {
        return TransportError::Timeout;
    }
    // The source chain carries the useful part (e.g. the TLS verification failure).
    let mut message = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(inner) = source {
        message.push_str(": ");
        message.push_str(&inner.to_string());
        source = inner.source();
    }
    TransportError::Failed(message)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_announced_body_is_reserved_within_a_bound() {
        assert_eq!(preallocated(None), 0);
        assert_eq!(preallocated(Some(6_000_000)), 6_000_000);
        assert_eq!(preallocated(Some(u64::MAX)), MAX_PREALLOCATED_BODY);
    }
}
