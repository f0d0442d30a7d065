//! The Borges benchmark suite.
//!
//! Runs a [`workload::Workload`] against a broker through a [`driver::Driver`] (`borges` or
//! `kafka`), measures publish and end-to-end latency (corrected for coordinated omission),
//! throughput per second and the broker's CPU and memory, and writes a [`result::RunResult`].
//! [`report`] turns result files into a side-by-side markdown table and SVG charts.
//!
//! Not part of the public SDK.

pub mod blast;
pub mod clock;
pub mod driver;
pub mod error;
pub mod machine;
pub mod payload;
pub mod procstat;
pub mod report;
pub mod result;
pub mod runner;
pub mod stats;
pub mod workload;

pub use error::LoadgenError;
