//! Partition replication as plain logic (no IO, no runtime): the leader's view of its
//! followers (log ends, caught-up times, ISR, high watermark, ISR changes for the
//! controller), acks=all waiters, and the follower's fetcher state machine. The owning core
//! of each partition holds these beside its log and runs the steps they ask for (storage
//! calls, fetches, AlterPartition through the controller). The rules and their sources are
//! in each module's documentation.
//!
//! - [`leader`]: [`LeaderState`]: follower fetches, ISR shrink after
//!   `replica_lag_time_max_ms`, expansion when caught up, the high watermark (smallest log end
//!   over the maximal ISR, frozen below `min_insync_replicas`), the AlterPartition request.
//! - [`acks`]: [`AckWaiters`]: acks=all released by the high watermark.
//! - [`follower`]: [`FollowerFetcher`]: fetch position, diverging-epoch truncation (KIP-279),
//!   fenced epochs, CRC-checked batches, sync before reporting under `durability=fsync`.

pub mod acks;
pub mod follower;
pub mod leader;

pub use acks::AckWaiters;
pub use follower::{
    check_fetched_records, truncation_offset, FetchAnswer, FetchPosition, FetcherSettings,
    FollowerFetcher, FollowerStep, LocalLog,
};
pub use leader::{
    BrokerId, FetchRefusal, FetchUpdate, FollowerState, IsrChangeRequest, LeaderSettings,
    LeaderState, ReplicaFetch,
};

#[cfg(test)]
mod tests;
