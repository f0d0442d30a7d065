//! The cluster layer of Borges: a controller quorum replicating the cluster metadata through
//! Raft (openraft), one node per broker process on its own executor thread.
//!
//! - [`rt`]: openraft's async runtime over `borges_runtime` (glommio).
//! - [`types`]: the type configuration and the [`types::StateMachine`] seam.
//! - [`disk`]: the node's file IO, with a power-loss model for tests.
//! - [`log_store`]: the durable Raft log, vote and committed position.
//! - [`sm_store`]: the state machine and its durable snapshots.

// openraft's error types (StorageError, RPCError, RaftError) are large by design; results
// carrying them are what its traits require.
#![allow(clippy::result_large_err)]

pub mod disk;
pub mod error;
pub mod log_store;
pub mod rt;
pub mod sm_store;
pub mod types;
