//! The Borges broker: a thread-per-core server. See docs/ARCHITECTURE.md.
//!
//! Modules, from the leaves up (each names only modules before it):
//! - `strict_assert!` (from `borges_replication`), used everywhere.
//! - `types`, `failure`, `durable_file`, [`metadata`], `error`, `metrics`, [`config`],
//!   `topic_config`: plain values, error types, whole-file rewrites, the metadata image and
//!   store, per-core counters;
//!   `cluster_config`: the `[cluster]` settings.
//! - `lifecycle`, `request_memory`, `admission`, `descriptors`, `mesh`: one core's
//!   serving/shutdown state, its request memory, its connections and listeners, the descriptor
//!   budget, its outboxes to the other cores.
//! - `partition`: the partitions a core owns (append, read, long poll, offsets).
//! - `groups`: consumer-group coordinators. (The controller, which performs metadata changes
//!   on core 0, and producer ids live in `borges_replication::controller`; the shard is its
//!   `ControllerHost`.)
//! - `shard`: one core's services and the messages between cores.
//! - `wire`, `handlers`, `dispatch`, `frame_reader`, `connection`: requests from the wire to the
//!   shard and back.
//! - `cluster`: a cluster member's Raft executor and its bridge to the cores.
//! - [`server`]: start-up, executors, listeners, shutdown; [`cli`]: `borges broker`.

// `strict_assert!` and `strict_assert_eq!` (one definition, in borges-replication; this
// crate's `strict-assertions` feature turns on that crate's).
#[macro_use]
extern crate borges_replication;

pub mod acl;
mod admission;
pub mod cli;
mod cluster;
pub mod cluster_config;
pub mod config;
mod connection;
mod descriptors;
mod dispatch;
mod durable_file;
mod endpoint;
mod error;
mod failure;
mod frame_reader;
mod groups;
mod handlers;
mod lifecycle;
mod logging;
mod mesh;
pub mod metadata;
mod metrics;
mod partition;
mod replicate;
mod request_memory;
pub mod sasl;
mod server;
mod shard;
#[cfg(test)]
mod testing;
mod topic_config;
mod types;
mod wire;

pub use config::BrokerConfig;
pub use error::BrokerError;
