//! The cluster layer of Borges: a controller quorum replicating the cluster metadata through
//! Raft (openraft), one node per broker process on its own executor thread.
//!
//! - [`rt`]: openraft's async runtime over `borges_runtime` (glommio).
//! - [`types`]: the type configuration and the [`types::StateMachine`] seam.
//! - [`disk`]: the node's file IO, with a power-loss model for tests.
//! - [`log_store`]: the durable Raft log, vote and committed position.
//! - [`sm_store`]: the state machine and its durable snapshots.
//! - [`link`]: the controller link (frames, Hello, messages, a blocking client).
//! - [`network`]: openraft's network over the link, and the node's tuning.
//! - [`node`]: one quorum member: storage, Raft, the controller listener.
//! - [`metadata`]: the metadata image and its changes; [`cluster`]: the broker lifecycle,
//!   placement and the metadata state machine; [`format`]: `meta.properties`.
//! - [`replica`]: partition replication as plain logic: leader state, acks, follower fetcher.
//! - [`failure`]: a wire error code with a message, as requests answer them;
//!   [`controller`]: metadata changes of a broker (its core 0), single node or through the
//!   metadata log, and producer ids.

// openraft's error types (StorageError, RPCError, RaftError) are large by design; results
// carrying them are what its traits require.
#![allow(clippy::result_large_err)]

#[macro_use]
#[doc(hidden)]
pub mod assert;

pub mod cluster;
pub mod controller;
pub mod disk;
pub mod error;
pub mod failure;
pub mod format;
pub mod link;
pub mod log_store;
pub mod member;
pub mod metadata;
pub mod network;
pub mod node;
pub mod replica;
pub mod rt;
pub mod sm_store;
pub mod types;
