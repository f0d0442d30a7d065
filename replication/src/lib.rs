//! The cluster layer of Borges: a controller quorum replicating the cluster metadata through
//! Raft (openraft), one node per broker process on its own executor thread.
//!
//! - [`rt`]: openraft's async runtime over `borges_runtime` (glommio).
//! - [`types`]: the type configuration and the [`types::StateMachine`] seam.

pub mod rt;
pub mod types;
