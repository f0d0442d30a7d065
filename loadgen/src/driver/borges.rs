//! The `borges` driver: Borges through its Rust SDK (`borges-client`).
//!
//! Written once the SDK's producer/consumer/admin exist.

use std::sync::Arc;

use super::{
    ConsumerDriver, ConsumerSpec, Driver, ProducerDriver, ProducerSpec, Result, TopicSpec,
};
use crate::error::LoadgenError;
use crate::stats::ClientStats;

const NAME: &str = "borges";

/// Borges via `borges-client`.
pub struct BorgesDriver {
    bootstrap: String,
}

impl BorgesDriver {
    /// A driver for the broker at `bootstrap`.
    pub fn new(bootstrap: &str, _runtime: tokio::runtime::Handle) -> Result<BorgesDriver> {
        Ok(BorgesDriver {
            bootstrap: bootstrap.to_string(),
        })
    }

    fn unavailable(&self) -> LoadgenError {
        LoadgenError::driver(NAME, format!("SDK not available yet ({})", self.bootstrap))
    }
}

impl Driver for BorgesDriver {
    fn name(&self) -> &'static str {
        NAME
    }
    fn create_topics(&self, _topics: &[TopicSpec]) -> Result<()> {
        Err(self.unavailable())
    }
    fn delete_topics(&self, _names: &[String]) -> Result<()> {
        Err(self.unavailable())
    }
    fn producer(
        &self,
        _spec: &ProducerSpec,
        _stats: Arc<ClientStats>,
    ) -> Result<Box<dyn ProducerDriver>> {
        Err(self.unavailable())
    }
    fn consumer(&self, _spec: &ConsumerSpec) -> Result<Box<dyn ConsumerDriver>> {
        Err(self.unavailable())
    }
}
