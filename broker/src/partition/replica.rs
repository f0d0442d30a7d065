//! The replication role of a partition on its owning core (docs/cluster.md, "Partition
//! replication"), driven by the metadata image:
//!
//! - **alone**: a single node, or a partition with one replica: the log's own (durability
//!   based) high watermark, as before replication;
//! - **leader**: [`LeaderState`] (each follower's log end and caught-up time, the ISR, the high
//!   watermark over the maximal ISR, frozen below `min.insync.replicas`), fed by replica
//!   fetches; the log's high watermark is bound by it; acks=all waits for it;
//! - **follower**: the leader to fetch from ([`FollowTarget`]); the fetcher (`replicate`)
//!   appends the leader's batches and bounds the high watermark by the leader's;
//! - **offline**: no leader: nothing is appended and the high watermark stays.
//!
//! ISR changes the leader wants go to the controller through the core's [`IsrOutbox`].

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;

use borges_protocol::ErrorCode;
use borges_replication::replica::{IsrChangeRequest, LeaderSettings, LeaderState, ReplicaFetch};
use borges_runtime::sync::Notify;

use super::Partition;
use crate::failure::Failure;
use crate::metadata::{PartitionRecord, NO_LEADER};
use crate::types::PartitionRef;

/// ISR changes queued on one core for the controller, at most this many.
pub const ISR_CHANGES_QUEUED_MAX: usize = 4096;

/// ISR changes (AlterPartition) the leaders of one core want the controller to commit. Lives
/// on its core; the core's replication task drains it.
#[derive(Default)]
pub struct IsrOutbox {
    queue: RefCell<VecDeque<(PartitionRef, IsrChangeRequest)>>,
    /// Bumped on every push.
    pub pushed: Notify,
}

impl IsrOutbox {
    /// Queues a change; false (and nothing queued) when `ISR_CHANGES_QUEUED_MAX` wait.
    pub fn push(&self, partition: PartitionRef, change: IsrChangeRequest) -> bool {
        let mut q = self.queue.borrow_mut();
        if q.len() >= ISR_CHANGES_QUEUED_MAX {
            return false;
        }
        q.push_back((partition, change));
        drop(q);
        self.pushed.notify_all();
        true
    }

    /// Every queued change, oldest first.
    pub fn take_all(&self) -> Vec<(PartitionRef, IsrChangeRequest)> {
        self.queue.borrow_mut().drain(..).collect()
    }
}

/// The leader a follower replica fetches from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FollowTarget {
    /// The leader's broker id.
    pub leader: i32,
    /// Its leader epoch.
    pub leader_epoch: i32,
    /// The core owning the partition on the leader (its own port is in the image).
    pub leader_core: u16,
}

/// A partition's replication role.
pub enum Role {
    /// No other replica: the log's own high watermark.
    Alone,
    /// This broker leads, with followers.
    Leader(Box<LeaderState>),
    /// This broker follows.
    Follower(FollowTarget),
    /// No leader (or not a replica any more): nothing is appended.
    Offline,
}

/// What a metadata image says to a partition's replica on this broker.
#[derive(Debug, Clone, Copy)]
pub struct ReplicaContext {
    /// This broker.
    pub broker_id: i32,
    /// Cluster mode (else: alone).
    pub cluster: bool,
    /// `replica_lag_time_max_ms`.
    pub replica_lag_time_max_ms: i64,
    /// Now (ms).
    pub now_ms: i64,
}

/// The replication state of one partition. Lives on the partition's owning core.
pub struct ReplicaState {
    role: RefCell<Role>,
    /// Bumped on every role, ISR or settings change: acks=all waiters check again.
    changed: Notify,
    /// A fetcher task runs for this partition (it exits once the role is not follower).
    fetcher_running: Cell<bool>,
}

impl ReplicaState {
    /// The state of a partition with no followers.
    pub fn leader_only() -> ReplicaState {
        ReplicaState {
            role: RefCell::new(Role::Alone),
            changed: Notify::default(),
            fetcher_running: Cell::new(false),
        }
    }
}

impl Partition {
    /// The leader to follow, when this replica follows.
    pub fn follow_target(&self) -> Option<FollowTarget> {
        match &*self.replica.role.borrow() {
            Role::Follower(t) => Some(*t),
            _ => None,
        }
    }

    /// Bumped on every role change (the fetcher waits on it for new metadata).
    pub fn role_changed(&self) -> &Notify {
        &self.replica.changed
    }

    /// Claims the fetcher slot: true if no fetcher runs (the caller starts one).
    pub fn claim_fetcher(&self) -> bool {
        !self.replica.fetcher_running.replace(true)
    }

    /// The fetcher exits.
    pub fn release_fetcher(&self) {
        self.replica.fetcher_running.set(false);
    }

    /// Applies this partition's record from a new metadata image: becomes leader (a new
    /// epoch begins at the log end), follower, alone or offline, or takes a committed ISR.
    /// Returns the ISR change to ask for, if any.
    pub fn apply_replica_record(&self, rec: &PartitionRecord, ctx: ReplicaContext) {
        self.check_owner();
        let settings = LeaderSettings {
            replica_lag_time_max_ms: ctx.replica_lag_time_max_ms,
            min_insync_replicas: self.min_insync_replicas.get().max(1) as usize,
        };
        let end = self.log.offsets().log_end_offset;
        let mut role = self.replica.role.borrow_mut();
        if !ctx.cluster || (rec.replicas.len() <= 1 && rec.leader == ctx.broker_id) {
            if !matches!(*role, Role::Alone) {
                if ctx.cluster {
                    self.log.begin_epoch(rec.leader_epoch);
                }
                *role = Role::Alone;
                self.log.set_replicated(false);
                self.replica.changed.notify_all();
            }
            return;
        }
        self.log.set_replicated(true);
        let new_role = match &mut *role {
            Role::Leader(l)
                if rec.leader == ctx.broker_id && l.leader_epoch() == rec.leader_epoch =>
            {
                let mut moved = None;
                if rec.partition_epoch != l.partition_epoch() {
                    let (_, m) = l.on_isr_committed(&rec.isr, rec.partition_epoch, end);
                    moved = m;
                }
                if l.settings() != settings {
                    moved = l.set_settings(settings, end).or(moved);
                }
                if let Some(hw) = moved {
                    self.log.set_replication_hw(hw);
                }
                None
            }
            _ if rec.leader == ctx.broker_id && self.is_repairing() => {
                // Its log lacks what the leader had (recovery found it corrupt): leading would
                // lose committed records. The broker stays fenced while it repairs, so the
                // controller should not have chosen it.
                tracing::error!(partition = %self.id, epoch = rec.leader_epoch,
                    "named leader while under repair from the leader: staying offline");
                Some(Role::Offline)
            }
            _ if rec.leader == ctx.broker_id => Some(self.become_leader(rec, ctx, settings)),
            _ if rec.leader != NO_LEADER && rec.replicas.contains(&ctx.broker_id) => {
                Some(Role::Follower(FollowTarget {
                    leader: rec.leader,
                    leader_epoch: rec.leader_epoch,
                    leader_core: rec.core,
                }))
            }
            _ => Some(Role::Offline),
        };
        if let Some(r) = new_role {
            let same = matches!((&*role, &r), (Role::Follower(a), Role::Follower(b)) if a == b)
                || matches!((&*role, &r), (Role::Offline, Role::Offline));
            if same {
                return;
            }
            tracing::info!(partition = %self.id, role = r.name(), leader = rec.leader,
                epoch = rec.leader_epoch, isr = ?rec.isr, "replica role");
            *role = r;
        }
        drop(role);
        self.replica.changed.notify_all();
    }

    fn become_leader(
        &self,
        rec: &PartitionRecord,
        ctx: ReplicaContext,
        settings: LeaderSettings,
    ) -> Role {
        // Kafka's makeLeader: the new epoch starts at the log end, before anything is served.
        self.log.begin_epoch(rec.leader_epoch);
        let o = self.log.offsets();
        let mut state = LeaderState::new(
            ctx.broker_id,
            (rec.leader_epoch, rec.partition_epoch),
            &rec.replicas,
            &rec.isr,
            (o.log_end_offset, o.high_watermark),
            ctx.now_ms,
            settings,
        );
        if let Some(hw) = state.on_append(o.log_end_offset) {
            self.log.set_replication_hw(hw);
        }
        Role::Leader(Box::new(state))
    }

    /// Refuses an append on a replica that does not lead (a follower, or no leader), and
    /// acks=all while the ISR is below `min.insync.replicas` (nothing appended).
    pub(super) fn check_appendable(&self, acks_all: bool) -> Result<(), Failure> {
        let role = self.replica.role.borrow();
        match &*role {
            Role::Alone => {
                let min_isr = self.min_insync_replicas.get();
                if acks_all && min_isr > 1 {
                    return Err(not_enough_replicas(
                        ErrorCode::NotEnoughReplicas,
                        min_isr,
                        1,
                    ));
                }
                Ok(())
            }
            Role::Leader(l) => {
                if acks_all && l.check_acks_all().is_err() {
                    return Err(not_enough_replicas(
                        ErrorCode::NotEnoughReplicas,
                        self.min_insync_replicas.get(),
                        l.isr().len(),
                    ));
                }
                Ok(())
            }
            Role::Follower(t) => Err(Failure::new(
                ErrorCode::NotLeaderOrFollower,
                format!(
                    "{} is a follower here (leader: broker {}, epoch {}); refresh metadata",
                    self.id, t.leader, t.leader_epoch
                ),
            )),
            Role::Offline => Err(Failure::new(
                ErrorCode::NotLeaderOrFollower,
                format!("{} has no leader here; refresh metadata", self.id),
            )),
        }
    }

    /// The leader appended: the high watermark may move (an ISR of the leader alone).
    pub(super) fn after_append(&self) {
        let end = self.log.offsets().log_end_offset;
        let moved = match &mut *self.replica.role.borrow_mut() {
            Role::Leader(l) => l.on_append(end),
            _ => None,
        };
        if let Some(hw) = moved {
            self.log.set_replication_hw(hw);
        }
    }

    /// A follower's fetch reached this leader: its state, ISR expansion, the high watermark.
    /// Returns the ISR change to ask for.
    pub(super) fn note_replica_fetch(
        &self,
        fetch: &ReplicaFetch,
        now_ms: i64,
    ) -> Result<Option<IsrChangeRequest>, Failure> {
        let end = self.log.offsets().log_end_offset;
        let mut role = self.replica.role.borrow_mut();
        let Role::Leader(l) = &mut *role else {
            return Err(Failure::new(
                ErrorCode::NotLeaderOrFollower,
                format!("{} is not led by this broker; refresh metadata", self.id),
            ));
        };
        let update = l.on_fetch(fetch, end, now_ms).map_err(|r| {
            Failure::new(
                r.error_code(),
                format!(
                    "{}: replica fetch from broker {} (leader epoch {}, broker epoch {}) \
                     refused: {r:?}; the leader epoch is {}",
                    self.id,
                    fetch.replica_id,
                    fetch.current_leader_epoch,
                    fetch.broker_epoch,
                    l.leader_epoch()
                ),
            )
        })?;
        drop(role);
        if let Some(hw) = update.high_watermark_moved {
            self.log.set_replication_hw(hw);
        }
        Ok(update.isr_change)
    }

    /// The periodic ISR check of a leader: the shrink to ask for, if a follower lags.
    pub fn check_isr(&self, now_ms: i64) -> Option<IsrChangeRequest> {
        let end = self.log.offsets().log_end_offset;
        match &mut *self.replica.role.borrow_mut() {
            Role::Leader(l) => l.check_isr_shrink(end, now_ms),
            _ => None,
        }
    }

    /// The controller refused (or never answered) an ISR change: the next check asks again.
    pub fn isr_change_failed(&self, leader_epoch: i32) {
        if let Role::Leader(l) = &mut *self.replica.role.borrow_mut() {
            if l.leader_epoch() == leader_epoch {
                l.on_isr_change_failed();
            }
        }
    }

    /// acks=all on a replicated leader: resolves once the high watermark passes
    /// `last_offset`; NotEnoughReplicasAfterAppend when the ISR falls below
    /// `min.insync.replicas` meanwhile, NotLeaderOrFollower when leadership moves.
    pub(super) async fn wait_replicated(&self, last_offset: i64) -> Result<(), Failure> {
        let epoch = self.leader_epoch();
        let committed = self.log.wait_committed(last_offset);
        let mut committed = std::pin::pin!(committed);
        loop {
            let seen = self.replica.changed.generation();
            if self.log.offsets().high_watermark > last_offset {
                return Ok(());
            }
            match &*self.replica.role.borrow() {
                Role::Leader(l) if l.leader_epoch() == epoch => {
                    if l.check_acks_all().is_err() {
                        return Err(not_enough_replicas(
                            ErrorCode::NotEnoughReplicasAfterAppend,
                            self.min_insync_replicas.get(),
                            l.isr().len(),
                        ));
                    }
                }
                Role::Alone => {}
                _ => {
                    return Err(Failure::new(
                        ErrorCode::NotLeaderOrFollower,
                        format!(
                            "{}: leadership moved before offset {last_offset} was replicated",
                            self.id
                        ),
                    ))
                }
            }
            let changed = async {
                self.replica.changed.changed_since(seen).await;
                None
            };
            let done = async { Some((&mut committed).await) };
            if let Some(result) = futures_lite::future::or(done, changed).await {
                return result.map_err(Failure::from);
            }
        }
    }
}

impl Role {
    fn name(&self) -> &'static str {
        match self {
            Role::Alone => "alone",
            Role::Leader(_) => "leader",
            Role::Follower(_) => "follower",
            Role::Offline => "offline",
        }
    }
}

fn not_enough_replicas(code: ErrorCode, min_isr: i64, isr: usize) -> Failure {
    Failure::new(
        code,
        format!(
            "min.insync.replicas = {min_isr} but the in-sync replica set has {isr} member{}",
            if isr == 1 { "" } else { "s" }
        ),
    )
}
