//! The Borges broker: a thread-per-core server. See docs/ARCHITECTURE.md.
//!
//! - [`server`]: start-up, executors, listeners, shutdown.
//! - `core`: one core's state (its partitions, metadata copy, outboxes).
//! - `router`: cross-core messages and outboxes.
//! - `connection`, `dispatch`, `handlers`: requests from the wire to the owning core and back.
//! - `controller`, [`metadata`]: metadata changes (core 0) and the persisted store.
//! - `metrics`: per-core metrics and the Prometheus endpoint.

pub mod cli;
pub mod config;
mod connection;
mod controller;
mod core;
mod dispatch;
mod error;
mod failure;
mod groups;
mod handlers;
mod logging;
pub mod metadata;
mod metrics;
mod partition;
mod router;
mod server;
mod topic_config;
mod types;
mod wire;

pub use config::BrokerConfig;
pub use error::BrokerError;
