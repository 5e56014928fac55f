//! HTTPS client for Ganeti's remote API (RAPI v2), implementing [`crate::ganeti::Ganeti`].
