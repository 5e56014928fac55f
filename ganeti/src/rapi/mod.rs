//! Ganeti's remote API (RAPI v2).
//!
//! * [`request`]: every write ([`crate::Op`]) as its RAPI request, written once
//!   ([`request::rapi_request`]). Always built.
//! * [`types`]: the RAPI JSON shapes, job failures, and the reason trail that ties every job to
//!   its incident ([`types::reason_query_value`]). Always built.
//! * [`transport`] (feature `client`): what carries one request to RAPI and its answer back;
//!   [`transport::HttpsTransport`] is the real one.
//! * [`client::RapiClient`] (feature `client`): every call nodecare needs (the reads of cluster,
//!   nodes, instances, groups, tags and jobs; every write as `submit` of an [`crate::Op`];
//!   job cancel), each bounded by a timeout, basic authentication from a credentials file
//!   ([`client::Credentials`]).
//! * [`tls`] (feature `client`): the cluster certificate is pinned (Ganeti's self-signed CA
//!   certificate without subject alternative names fails ordinary verification).

#[cfg(feature = "client")]
pub mod client;
#[cfg(feature = "client")]
pub mod config;
pub mod request;
#[cfg(feature = "client")]
pub mod tls;
#[cfg(feature = "client")]
pub mod transport;
pub mod types;

#[cfg(feature = "client")]
pub use client::{Credentials, RapiClient, RapiConfig, RapiError, ServerTrust};
