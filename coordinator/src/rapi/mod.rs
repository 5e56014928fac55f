//! HTTPS client for Ganeti's remote API (RAPI v2), implementing [`crate::ganeti::Ganeti`].
//!
//! * [`client::RapiClient`]: every call nodecare needs (cluster, nodes, instances, groups, tags,
//!   jobs, drain/offline, migrate, failover, replace-disks, node evacuation), each bounded by a
//!   timeout, basic authentication from a credentials file ([`client::Credentials`]).
//! * [`tls`]: the cluster certificate is pinned (Ganeti's self-signed CA certificate without
//!   subject alternative names fails ordinary verification).
//! * [`types`]: the RAPI JSON shapes, job failures, and the reason trail that ties every job to
//!   its incident ([`types::reason_query_value`]).

pub mod client;
pub mod tls;
pub mod types;

pub use client::{Credentials, RapiClient, RapiConfig, RapiError, ServerTrust};
