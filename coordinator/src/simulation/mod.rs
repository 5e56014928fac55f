//! In-process simulated Ganeti cluster implementing [`crate::ganeti::Ganeti`].
