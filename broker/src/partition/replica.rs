//! Seam: the replication state of a partition this core leads.
//!
//! With replication (see docs/ARCHITECTURE.md, "Where the next features go") this holds the
//! in-sync replica set, each follower's fetch position and last fetch time, and the high
//! watermark they allow: the leader advances it when every ISR member has fetched past an
//! offset, and `acks=all` waits for it. Followers fetch from the leader on the leader's owning
//! core, so this state is touched by that core only, like the log.

/// Replication state of one partition. Lives on the partition's owning core. Today the leader
/// is the only replica: the ISR is the leader alone and the log's own (durability-based) high
/// watermark is the partition's high watermark.
#[derive(Debug, Default)]
pub struct ReplicaState {
    _leader_only: (),
}

impl ReplicaState {
    /// The state of a partition with no followers.
    pub fn leader_only() -> ReplicaState {
        ReplicaState::default()
    }

    /// Members of the in-sync replica set, the leader included.
    pub fn in_sync_replicas(&self) -> usize {
        1
    }
}
