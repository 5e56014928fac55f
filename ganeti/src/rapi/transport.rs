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
    pub body: RapiBody,
}

/// An answer's body as it arrived, in chunks: decoding reads a large one with
/// [`RapiBody::into_reader`], which lets each chunk go once it is read, so a large answer
/// (`GET /2/nodes?bulk=1` is ~12 MB of JSON at 10 000 nodes) and what it decodes to are not both
/// held whole, and a small one from one buffer ([`RapiBody::into_contiguous`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RapiBody {
    chunks: std::collections::VecDeque<bytes::Bytes>,
}

impl RapiBody {
    /// Appends a chunk.
    pub fn push(&mut self, chunk: bytes::Bytes) {
        if !chunk.is_empty() {
            self.chunks.push_back(chunk);
        }
    }

    /// Its length in bytes.
    pub fn len(&self) -> usize {
        self.chunks.iter().map(bytes::Bytes::len).sum()
    }

    /// Whether it is empty.
    pub fn is_empty(&self) -> bool {
        self.chunks.is_empty()
    }

    /// Its first `limit` bytes (all of it when shorter), in one buffer.
    pub fn prefix(&self, limit: usize) -> Vec<u8> {
        let mut prefix = Vec::with_capacity(limit.min(self.len()));
        for chunk in &self.chunks {
            let room = limit - prefix.len();
            if room == 0 {
                break;
            }
            prefix.extend_from_slice(&chunk[..room.min(chunk.len())]);
        }
        prefix
    }

    /// Its bytes in one buffer when that costs no copy (it arrived in one chunk) or at most
    /// `limit` bytes; otherwise itself, to be read chunk by chunk ([`RapiBody::into_reader`]).
    /// JSON decodes several times faster from one buffer than from a reader, and a buffer of
    /// at most `limit` bytes is small beside what it decodes to.
    pub fn into_contiguous(mut self, limit: usize) -> Result<bytes::Bytes, Self> {
        if self.chunks.len() <= 1 {
            return Ok(self.chunks.pop_front().unwrap_or_default());
        }
        let len = self.len();
        if len > limit {
            return Err(self);
        }
        let mut whole = bytes::BytesMut::with_capacity(len);
        for chunk in self.chunks {
            whole.extend_from_slice(&chunk);
        }
        Ok(whole.freeze())
    }

    /// A reader of its bytes that drops each chunk once read.
    pub fn into_reader(self) -> impl std::io::Read {
        ChunkReader {
            chunks: self.chunks,
        }
    }
}

impl From<Vec<u8>> for RapiBody {
    fn from(bytes: Vec<u8>) -> Self {
        let mut body = Self::default();
        body.push(bytes::Bytes::from(bytes));
        body
    }
}

/// Reads chunks in order, dropping each once it is read.
struct ChunkReader {
    chunks: std::collections::VecDeque<bytes::Bytes>,
}

impl std::io::Read for ChunkReader {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let Some(chunk) = self.chunks.front_mut() else {
            return Ok(0);
        };
        let n = buf.len().min(chunk.len());
        buf[..n].copy_from_slice(&chunk[..n]);
        if n == chunk.len() {
            self.chunks.pop_front();
        } else {
            *chunk = chunk.slice(n..);
        }
        Ok(n)
    }
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
        // The body's chunks are kept as they arrive: copying them into one buffer (reqwest's
        // `bytes()`), then into a `Vec`, held up to three copies of the body at once (6 MB
        // each for `GET /2/nodes?bulk=1` at 10 000 nodes), and the decoding a fourth.
        let mut body = RapiBody::default();
        while let Some(chunk) = response.chunk().await.map_err(|e| transport_error(&e))? {
            body.push(chunk);
        }
        Ok(RapiResponse { status, body })
    }
}

impl Transport for HttpsTransport {
    fn send<'a>(&'a self, request: &'a RapiRequest, timeout: Duration) -> TransportFuture<'a> {
        Box::pin(self.send_now(request, timeout))
    }
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

    use std::io::Read;

    /// A body reads back whole across its chunks, and its reader lets each chunk go once read.
    #[test]
    fn a_body_reads_across_its_chunks_and_lets_them_go() {
        let mut body = RapiBody::default();
        for chunk in ["[1, ", "", "22, 3", "33]"] {
            body.push(bytes::Bytes::from(chunk));
        }
        assert_eq!(body.len(), 12);
        assert_eq!(body.prefix(6), b"[1, 22");
        assert_eq!(body.prefix(100), b"[1, 22, 333]");
        let decoded: Vec<u32> =
            serde_json::from_reader(std::io::BufReader::new(body.clone().into_reader())).unwrap();
        assert_eq!(decoded, [1, 22, 333]);
        let mut reader = ChunkReader {
            chunks: body.chunks,
        };
        let mut first = [0u8; 3];
        assert_eq!(reader.read(&mut first).unwrap(), 3);
        assert_eq!(reader.chunks.len(), 3, "a chunk is kept while partly read");
        let mut rest = [0u8; 1];
        assert_eq!(reader.read(&mut rest).unwrap(), 1);
        assert_eq!(reader.chunks.len(), 2, "and dropped once read");
        let mut all = Vec::new();
        reader.read_to_end(&mut all).unwrap();
        assert_eq!(all, b"22, 333]");
        assert!(reader.chunks.is_empty());
    }

    /// A body comes in one buffer when it arrived in one chunk (whatever its size) or is at
    /// most the limit, and stays in its chunks otherwise; nothing is lost either way.
    #[test]
    fn a_body_is_one_buffer_only_when_that_is_cheap() {
        let mut body = RapiBody::default();
        for chunk in ["[1, ", "22, 3", "33]"] {
            body.push(bytes::Bytes::from(chunk));
        }
        assert_eq!(
            body.clone().into_contiguous(12).unwrap(),
            &b"[1, 22, 333]"[..]
        );
        let kept = body.clone().into_contiguous(11).unwrap_err();
        assert_eq!(kept, body, "over the limit: the chunks as they were");
        let one = RapiBody::from(b"[4, 5]".to_vec());
        assert_eq!(one.into_contiguous(0).unwrap(), &b"[4, 5]"[..]);
        assert!(RapiBody::default().into_contiguous(0).unwrap().is_empty());
    }
}
