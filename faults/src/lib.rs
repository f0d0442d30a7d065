//! The fault suite's workload driver (issue 15; docs/reliability.md "The fault suite").
//!
//! `scripts/fault-suite.sh` starts the brokers and injects the faults; this crate is what runs
//! against them, through the SDK (`borges-client`), recording everything into a
//! `borges-checker` history:
//! - [`topology`]: creating the workload topic (replication factor 3, `min.insync.replicas`,
//!   `durability=fsync`), the leader of a partition (the target of leader faults), waiting for
//!   a full ISR, and a probe of whether followers are fed at all.
//! - [`workload`]: acks=all idempotent producers writing unique values to every partition in
//!   turn (recorded ok / failed / unknown), assign-mode consumers that seek now and then and
//!   are replaced every `consumer_lifetime_s`, and group-mode consumers of one group.
//! - [`readback`]: the final read of every partition from its log start to its high
//!   watermark, each through a fresh consumer.
//!
//! Test support, never a dependency of the broker. Every task runs on a tokio runtime; the
//! recorder is the only shared state (an `Arc`ed buffer behind one mutex, test-only).

pub mod readback;
pub mod topology;
pub mod workload;

use std::time::Duration;

use borges_client::ClientConfig;

/// Process ids, op ids and values of the workload history start here.
pub const WORKLOAD_ID_BASE: u64 = 1;
/// Process ids of the final read's history start here (disjoint from the workload's).
pub const READBACK_ID_BASE: u64 = 1 << 40;

/// Client settings every part of the driver uses: short timeouts, so that a request to a
/// paused or cut-off broker fails over instead of hanging the workload.
pub fn client_config(bootstrap: &str, request_timeout_ms: u64) -> ClientConfig {
    let mut config = ClientConfig::new(bootstrap)
        .client_id("borges-fault-driver")
        .request_timeout_ms(request_timeout_ms);
    config.connect_timeout_ms = request_timeout_ms.min(2_000);
    config.metadata_max_age_ms = 2_000;
    config
}

/// Runs `f` until it succeeds or `deadline` passes, sleeping `pause` between attempts; returns
/// the last error on timeout.
pub async fn retry_until<T, E, F, Fut>(
    deadline: tokio::time::Instant,
    pause: Duration,
    mut f: F,
) -> Result<T, E>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, E>>,
{
    loop {
        match f().await {
            Ok(v) => return Ok(v),
            Err(e) if tokio::time::Instant::now() + pause >= deadline => return Err(e),
            Err(_) => tokio::time::sleep(pause).await,
        }
    }
}
