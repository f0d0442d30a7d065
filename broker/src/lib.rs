//! The Borges broker. See docs/ARCHITECTURE.md.

pub mod cli;
pub mod config;
mod error;
mod logging;
mod server;

pub use config::BrokerConfig;
pub use error::BrokerError;
