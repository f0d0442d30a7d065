//! The group coordinator of one core: the groups whose `__consumer_offsets` partition this core
//! owns. It replays those partitions at start-up, appends every commit to them (acknowledged
//! once durable), and expires members whose sessions lapse.

use std::cell::{Cell, RefCell};
use std::collections::{BTreeSet, HashMap};
use std::rc::Rc;
use std::time::{Duration, Instant};

use borges_protocol::batch::{BatchBuilder, BatchOptions, RecordBatch};
use borges_protocol::partitioner::partition_for_key;
use borges_protocol::ErrorCode;
use borges_runtime::{task, time};
use bytes::BytesMut;
use futures_channel::oneshot;

use super::assignor::Assignment;
use super::records::{OffsetKey, OffsetValue};
use super::state::{Committed, Group, GroupLimits, Heartbeat, HeartbeatReply};
use crate::config::GroupSettings;
use crate::error::BrokerError;
use crate::failure::Failure;
use crate::lifecycle::Lifecycle;
use crate::metadata::{MetadataImage, CONSUMER_OFFSETS_TOPIC};
use crate::partition::{self, PartitionTable};
use crate::types::{Acks, PartitionRef};

/// Longest group id accepted.
pub const GROUP_ID_BYTES_MAX: usize = 255;
/// How often sessions are checked.
const SWEEP_INTERVAL_MS: u64 = 100;
/// Bytes read at once while replaying an offsets partition.
const REPLAY_READ_BYTES: u64 = 1 << 20;

/// One partition offset to commit.
#[derive(Debug, Clone)]
pub struct CommitItem {
    /// Topic.
    pub topic: String,
    /// Partition.
    pub partition: i32,
    /// Next offset to consume.
    pub offset: i64,
    /// Leader epoch, or -1.
    pub leader_epoch: i32,
    /// Client metadata.
    pub metadata: Option<String>,
}

/// A member as DescribeGroups shows it.
#[derive(Debug, Clone)]
pub struct MemberView {
    /// Member id.
    pub member_id: String,
    /// Static id.
    pub instance_id: Option<String>,
    /// Rack.
    pub rack_id: Option<String>,
    /// Epoch.
    pub member_epoch: i32,
    /// Client id.
    pub client_id: String,
    /// Client host.
    pub client_host: String,
    /// Subscription.
    pub topics: Vec<String>,
    /// What it owns (or is being given).
    pub assignment: Assignment,
    /// Its target.
    pub target: Assignment,
}

/// A group as DescribeGroups shows it.
#[derive(Debug, Clone)]
pub struct GroupView {
    /// Group id.
    pub group_id: String,
    /// State name.
    pub state: String,
    /// Group epoch.
    pub epoch: i32,
    /// Assignment epoch.
    pub assignment_epoch: i32,
    /// Members.
    pub members: Vec<MemberView>,
}

/// Requests a coordinator executes.
#[derive(Debug, Clone)]
pub enum GroupRequest {
    /// Join, heartbeat or leave.
    Heartbeat {
        /// Group id.
        group: String,
        /// The heartbeat.
        heartbeat: Heartbeat,
    },
    /// Commit offsets.
    Commit {
        /// Group id.
        group: String,
        /// Member id (empty for administrative commits).
        member_id: String,
        /// Member epoch (-1 for administrative commits).
        member_epoch: i32,
        /// Offsets.
        items: Vec<CommitItem>,
    },
    /// Read committed offsets; `None` for every committed partition.
    Fetch {
        /// Group id.
        group: String,
        /// (topic, partitions) wanted.
        topics: Option<Vec<(String, Vec<i32>)>>,
    },
    /// Describe one group.
    Describe {
        /// Group id.
        group: String,
    },
    /// Every group of this core.
    List,
    /// Delete a group without members.
    Delete {
        /// Group id.
        group: String,
    },
}

/// Answers of a coordinator.
#[derive(Debug)]
pub enum GroupResponse {
    /// To a heartbeat.
    Heartbeat(Result<HeartbeatReply, Failure>),
    /// To a commit: per item.
    Commit(Result<Vec<Option<Failure>>, Failure>),
    /// To a fetch: (topic, partition, committed).
    Fetch(Result<Vec<(String, i32, Option<Committed>)>, Failure>),
    /// To a describe.
    Describe(Result<GroupView, Failure>),
    /// To a list: (group, state).
    List(Vec<(String, String)>),
    /// To a delete.
    Delete(Result<(), Failure>),
}

/// A group request and where its answer goes; executed on the group's coordinator core.
pub struct GroupMessage {
    /// The request.
    pub request: GroupRequest,
    /// The answer.
    pub reply: oneshot::Sender<GroupResponse>,
}

/// The coordinator state of one core: the groups whose offsets partition it owns. Lives on one
/// core.
pub struct Coordinator {
    core: usize,
    partitions: Rc<PartitionTable>,
    lifecycle: Rc<Lifecycle>,
    groups: RefCell<HashMap<String, Group>>,
    /// Offsets partitions of this core that are replayed and serving.
    loaded: RefCell<BTreeSet<u32>>,
    limits: GroupLimits,
    offset_metadata_bytes_max: usize,
    sweeping: Cell<bool>,
}

/// The `__consumer_offsets` partition of a group.
pub fn offsets_partition(group: &str, partitions: usize) -> u32 {
    partition_for_key(group.as_bytes(), partitions.max(1) as u32)
}

/// The coordinator core of a group, from a metadata image.
pub fn coordinator_core(image: &MetadataImage, group: &str) -> Result<(usize, u32), Failure> {
    let topic = image.topics.get(CONSUMER_OFFSETS_TOPIC).ok_or_else(|| {
        Failure::new(
            ErrorCode::CoordinatorNotAvailable,
            "the offsets topic does not exist yet",
        )
    })?;
    let p = offsets_partition(group, topic.partitions.len());
    let core = topic
        .partitions
        .get(p as usize)
        .map(|r| usize::from(r.core))
        .ok_or_else(|| Failure::new(ErrorCode::CoordinatorNotAvailable, "no offsets partition"))?;
    Ok((core, p))
}

/// Checks a group id.
pub fn check_group_id(group: &str) -> Result<(), Failure> {
    if group.is_empty() || group.len() > GROUP_ID_BYTES_MAX {
        return Err(Failure::new(
            ErrorCode::InvalidGroupId,
            format!("group id must be 1..={GROUP_ID_BYTES_MAX} bytes long"),
        ));
    }
    Ok(())
}

impl Coordinator {
    /// A coordinator with no groups, for core `core`, appending to and replaying from the
    /// offsets partitions in `partitions`.
    pub fn new(
        core: usize,
        config: &GroupSettings,
        partitions: Rc<PartitionTable>,
        lifecycle: Rc<Lifecycle>,
    ) -> Coordinator {
        Coordinator {
            core,
            partitions,
            lifecycle,
            groups: RefCell::new(HashMap::new()),
            loaded: RefCell::new(BTreeSet::new()),
            limits: GroupLimits {
                session_timeout_ms: config.session_timeout_ms,
                session_timeout_ms_min: config.session_timeout_ms_min,
                session_timeout_ms_max: config.session_timeout_ms_max,
                heartbeat_interval_ms: config.heartbeat_interval_ms,
                members_max: config.group_members_max,
            },
            offset_metadata_bytes_max: config.offset_metadata_bytes_max as usize,
            sweeping: Cell::new(false),
        }
    }

    /// Committed offsets of every group here: (group, topic, partition, offset).
    pub fn committed(&self) -> Vec<(String, String, i32, i64)> {
        let groups = self.groups.borrow();
        let mut out = Vec::new();
        for g in groups.values() {
            for ((t, p), c) in &g.offsets {
                out.push((g.id.clone(), t.clone(), *p, c.offset));
            }
        }
        out
    }

    /// Replays the offsets partitions this core owns and has not loaded yet; starts the session
    /// sweeper once. Called after every metadata change on this core.
    pub async fn load(self: &Rc<Self>) -> Result<(), BrokerError> {
        let image = self.partitions.image();
        let Some(topic) = image.topics.get(CONSUMER_OFFSETS_TOPIC) else {
            return Ok(());
        };
        for (p, rec) in topic.partitions.iter().enumerate() {
            let here = self.partitions.replica_here(rec) && self.partitions.leads(rec);
            if !here {
                self.unload(p as u32, topic.partitions.len());
                continue;
            }
            if self.loaded.borrow().contains(&(p as u32)) {
                continue;
            }
            let records =
                self.replay(p as u32)
                    .await
                    .map_err(|source| BrokerError::OffsetsReplay {
                        partition: p as u32,
                        cause: source,
                    })?;
            self.loaded.borrow_mut().insert(p as u32);
            tracing::debug!(
                core = self.core,
                partition = p,
                records,
                "offsets partition loaded"
            );
        }
        if !self.sweeping.replace(true) {
            task::spawn(self.clone().sweep()).detach();
        }
        Ok(())
    }

    /// This core no longer leads offsets partition `partition` (of `partitions`): its groups
    /// go from memory and it answers NotCoordinator, so that nothing is served from a state
    /// the next leader's commits leave behind; should it lead again, it replays the partition
    /// again. (A restarted broker applies old images on its way up, some naming it leader: it
    /// loaded the partition then and, without this, served those offsets when it led again.)
    fn unload(&self, partition: u32, partitions: usize) {
        if !self.loaded.borrow_mut().remove(&partition) {
            return;
        }
        let mut groups = self.groups.borrow_mut();
        let before = groups.len();
        groups.retain(|id, _| offsets_partition(id, partitions) != partition);
        tracing::info!(
            core = self.core,
            partition,
            groups = before - groups.len(),
            "offsets partition led elsewhere now: its groups unloaded"
        );
    }

    /// Replays offsets partition `partition` up to its log end, as Kafka's coordinator does:
    /// a new leader's log wins, and its high watermark may still lag the commits it already
    /// holds (a follower learns the high watermark one fetch later), so a replay bounded by
    /// the high watermark would miss the last acknowledged commits.
    async fn replay(self: &Rc<Self>, partition: u32) -> Result<usize, Failure> {
        let offsets = self.partitions.get(&offsets_ref(partition))?;
        let mut offset = offsets.offsets().log_start_offset;
        let mut applied = 0;
        loop {
            let end = offsets.offsets().log_end_offset;
            if offset >= end {
                return Ok(applied);
            }
            let (bytes, _) = offsets.read_to_log_end(offset, REPLAY_READ_BYTES).await?;
            let batches = RecordBatch::parse_many(&bytes)?;
            if batches.is_empty() {
                return Err(Failure::new(
                    ErrorCode::CorruptRecordBatch,
                    format!("no batch at offset {offset}"),
                ));
            }
            for batch in batches {
                for record in batch.records(64 << 20)? {
                    offset = record.offset + 1;
                    let Some(key) = record.key.as_deref().and_then(OffsetKey::decode) else {
                        continue;
                    };
                    self.apply(key, record.value.as_deref().and_then(OffsetValue::decode));
                    applied += 1;
                }
                offset = offset.max(batch.last_offset() + 1);
            }
        }
    }

    fn apply(&self, key: OffsetKey, value: Option<OffsetValue>) {
        let mut groups = self.groups.borrow_mut();
        match value {
            Some(v) => {
                groups
                    .entry(key.group.clone())
                    .or_insert_with(|| Group::new(&key.group))
                    .offsets
                    .insert(
                        (key.topic, key.partition),
                        Committed {
                            offset: v.offset,
                            leader_epoch: v.leader_epoch,
                            metadata: v.metadata,
                            commit_timestamp_ms: v.commit_timestamp_ms,
                        },
                    );
            }
            None => {
                if let Some(g) = groups.get_mut(&key.group) {
                    g.offsets.remove(&(key.topic, key.partition));
                    if g.is_disposable() {
                        groups.remove(&key.group);
                    }
                }
            }
        }
    }

    async fn sweep(self: Rc<Self>) {
        loop {
            time::sleep(Duration::from_millis(SWEEP_INTERVAL_MS)).await;
            if self.lifecycle.is_shutting_down() {
                return;
            }
            let now = Instant::now();
            let mut groups = self.groups.borrow_mut();
            for g in groups.values_mut() {
                for id in g.expire(now) {
                    tracing::info!(group = %g.id, member = %id, "member expired; reassigning its partitions");
                }
            }
            groups.retain(|_, g| !g.is_disposable());
        }
    }

    fn check_loaded(&self, group: &str) -> Result<u32, Failure> {
        let image = self.partitions.image();
        let (owner, p) = coordinator_core(&image, group)?;
        if owner != self.core {
            return Err(Failure::new(
                ErrorCode::NotCoordinator,
                format!("core {} does not coordinate group {group}", self.core),
            ));
        }
        let led_here = image
            .topics
            .get(CONSUMER_OFFSETS_TOPIC)
            .and_then(|t| t.partitions.get(p as usize))
            .is_some_and(|rec| self.partitions.leads(rec));
        if !led_here {
            return Err(Failure::new(
                ErrorCode::NotCoordinator,
                format!("this broker does not lead the offsets partition of group {group}"),
            ));
        }
        if !self.loaded.borrow().contains(&p) {
            return Err(Failure::new(
                ErrorCode::CoordinatorLoadInProgress,
                "the coordinator is still replaying the offsets topic",
            ));
        }
        Ok(p)
    }

    /// Executes a group request on this (the coordinator) core.
    pub async fn execute(self: &Rc<Self>, request: GroupRequest) -> GroupResponse {
        match request {
            GroupRequest::Heartbeat { group, heartbeat } => {
                GroupResponse::Heartbeat(self.heartbeat_one(&group, heartbeat))
            }
            GroupRequest::Commit {
                group,
                member_id,
                member_epoch,
                items,
            } => GroupResponse::Commit(self.commit(&group, &member_id, member_epoch, items).await),
            GroupRequest::Fetch { group, topics } => {
                GroupResponse::Fetch(self.fetch(&group, topics))
            }
            GroupRequest::Describe { group } => GroupResponse::Describe(self.describe(&group)),
            GroupRequest::List => GroupResponse::List(
                self.groups
                    .borrow()
                    .values()
                    .map(|g| (g.id.clone(), g.state().to_string()))
                    .collect(),
            ),
            GroupRequest::Delete { group } => GroupResponse::Delete(self.delete(&group).await),
        }
    }

    fn heartbeat_one(&self, group: &str, heartbeat: Heartbeat) -> Result<HeartbeatReply, Failure> {
        check_group_id(group)?;
        self.check_loaded(group)?;
        let image = self.partitions.image();
        let partitions_of = |t: &str| image.topics.get(t).map(|t| t.partitions.len());
        let mut groups = self.groups.borrow_mut();
        if heartbeat.member_epoch != 0 && !groups.contains_key(group) {
            return Err(Failure::new(
                ErrorCode::UnknownMemberId,
                format!(
                    "group {group} has no member {}; rejoin with epoch 0",
                    heartbeat.member_id
                ),
            ));
        }
        let g = groups
            .entry(group.to_string())
            .or_insert_with(|| Group::new(group));
        let reply = g.heartbeat(heartbeat, &self.limits, &partitions_of, Instant::now());
        if g.is_disposable() {
            groups.remove(group);
        }
        reply
    }

    async fn commit(
        self: &Rc<Self>,
        group: &str,
        member_id: &str,
        member_epoch: i32,
        items: Vec<CommitItem>,
    ) -> Result<Vec<Option<Failure>>, Failure> {
        check_group_id(group)?;
        let partition = self.check_loaded(group)?;
        {
            let groups = self.groups.borrow();
            match groups.get(group) {
                Some(g) => g.check_commit(member_id, member_epoch)?,
                None if member_id.is_empty() => {}
                None => {
                    return Err(Failure::new(
                        ErrorCode::UnknownMemberId,
                        format!("group {group} has no member {member_id}"),
                    ))
                }
            }
        }
        let now = time::now_ms();
        let max = self.offset_metadata_bytes_max;
        let mut results: Vec<Option<Failure>> = Vec::with_capacity(items.len());
        let mut builder = BatchBuilder::new(BatchOptions::default(), 64 * items.len());
        let mut accepted = Vec::new();
        for item in items {
            let metadata = item.metadata.clone().unwrap_or_default();
            if metadata.len() > max {
                results.push(Some(Failure::new(
                    ErrorCode::OffsetMetadataTooLarge,
                    format!("metadata of {} bytes exceeds {max}", metadata.len()),
                )));
                continue;
            }
            if item.offset < 0 {
                results.push(Some(Failure::new(
                    ErrorCode::InvalidRequest,
                    format!("committed offset {} is negative", item.offset),
                )));
                continue;
            }
            let key = OffsetKey {
                group: group.to_string(),
                topic: item.topic.clone(),
                partition: item.partition,
            };
            let value = OffsetValue {
                offset: item.offset,
                leader_epoch: item.leader_epoch,
                metadata,
                commit_timestamp_ms: now,
            };
            builder.push(now, Some(&key.encode()), Some(&value.encode()), &[]);
            results.push(None);
            accepted.push((key, value));
        }
        if !accepted.is_empty() {
            self.append(partition, builder).await?;
            for (key, value) in accepted {
                self.apply(key, Some(value));
            }
        }
        Ok(results)
    }

    /// Appends a batch to an offsets partition (the partitions' one append path, `acks=all`) and
    /// waits until it is durable.
    async fn append(self: &Rc<Self>, partition: u32, builder: BatchBuilder) -> Result<(), Failure> {
        let bytes = builder
            .build()
            .map_err(|e| Failure::new(ErrorCode::UnknownServerError, e.to_string()))?;
        let offsets = self.partitions.get(&offsets_ref(partition))?;
        let batches = partition::validate(BytesMut::from(&bytes[..]), usize::MAX)?;
        offsets
            .append(batches, Acks::All)
            .await?
            .acknowledged(None)
            .await
            .map(|_| ())
    }

    fn fetch(
        &self,
        group: &str,
        topics: Option<Vec<(String, Vec<i32>)>>,
    ) -> Result<Vec<(String, i32, Option<Committed>)>, Failure> {
        check_group_id(group)?;
        self.check_loaded(group)?;
        let groups = self.groups.borrow();
        let g = groups.get(group);
        Ok(match topics {
            None => g
                .map(|g| {
                    g.offsets
                        .iter()
                        .map(|((t, p), c)| (t.clone(), *p, Some(c.clone())))
                        .collect()
                })
                .unwrap_or_default(),
            Some(topics) => topics
                .into_iter()
                .flat_map(|(t, ps)| {
                    ps.into_iter()
                        .map(|p| {
                            let c = g.and_then(|g| g.offsets.get(&(t.clone(), p)).cloned());
                            (t.clone(), p, c)
                        })
                        .collect::<Vec<_>>()
                })
                .collect(),
        })
    }

    fn describe(&self, group: &str) -> Result<GroupView, Failure> {
        check_group_id(group)?;
        self.check_loaded(group)?;
        let groups = self.groups.borrow();
        let g = groups.get(group).ok_or_else(|| {
            Failure::new(
                ErrorCode::GroupIdNotFound,
                format!("group {group} does not exist"),
            )
        })?;
        Ok(GroupView {
            group_id: g.id.clone(),
            state: g.state().to_string(),
            epoch: g.epoch,
            assignment_epoch: g.assignment_epoch,
            members: g
                .members
                .values()
                .map(|m| MemberView {
                    member_id: m.id.clone(),
                    instance_id: m.instance_id.clone(),
                    rack_id: m.rack_id.clone(),
                    member_epoch: m.epoch,
                    client_id: m.client_id.clone(),
                    client_host: m.client_host.clone(),
                    topics: m.topics.iter().cloned().collect(),
                    assignment: m.owned.clone(),
                    target: g.target.get(&m.id).cloned().unwrap_or_default(),
                })
                .collect(),
        })
    }

    /// Deletes the committed offsets of topics the image no longer has, as Kafka does: one
    /// tombstone per (group, topic, partition) in `__consumer_offsets`, then out of memory, so
    /// that a topic created again under the same name does not get them back. Called after
    /// every metadata change; a failed append is retried at the next one.
    pub async fn forget_deleted_topics(self: &Rc<Self>) {
        let image = self.partitions.image();
        let doomed: Vec<(String, Vec<(String, i32)>)> = {
            let groups = self.groups.borrow();
            groups
                .values()
                .filter_map(|g| {
                    let gone: Vec<(String, i32)> = g
                        .offsets
                        .keys()
                        .filter(|(t, _)| !image.topics.contains_key(t))
                        .cloned()
                        .collect();
                    (!gone.is_empty()).then(|| (g.id.clone(), gone))
                })
                .collect()
        };
        for (group, gone) in doomed {
            let Ok(partition) = self.check_loaded(&group) else {
                continue;
            };
            let mut builder = BatchBuilder::new(BatchOptions::default(), 64 * gone.len());
            let now = time::now_ms();
            for (topic, p) in &gone {
                let key = OffsetKey {
                    group: group.clone(),
                    topic: topic.clone(),
                    partition: *p,
                };
                builder.push(now, Some(&key.encode()), None, &[]);
            }
            if let Err(f) = self.append(partition, builder).await {
                tracing::warn!(%group, "could not delete a deleted topic's offsets: {f:?}");
                continue;
            }
            if let Some(g) = self.groups.borrow_mut().get_mut(&group) {
                for k in &gone {
                    g.offsets.remove(k);
                }
            }
        }
    }

    async fn delete(self: &Rc<Self>, group: &str) -> Result<(), Failure> {
        check_group_id(group)?;
        let partition = self.check_loaded(group)?;
        let keys: Vec<(String, i32)> = {
            let groups = self.groups.borrow();
            let g = groups.get(group).ok_or_else(|| {
                Failure::new(
                    ErrorCode::GroupIdNotFound,
                    format!("group {group} does not exist"),
                )
            })?;
            if !g.members.is_empty() {
                return Err(Failure::new(
                    ErrorCode::NonEmptyGroup,
                    format!("group {group} has {} active members", g.members.len()),
                ));
            }
            g.offsets.keys().cloned().collect()
        };
        if !keys.is_empty() {
            let now = time::now_ms();
            let mut builder = BatchBuilder::new(BatchOptions::default(), 64 * keys.len());
            for (topic, p) in &keys {
                let key = OffsetKey {
                    group: group.to_string(),
                    topic: topic.clone(),
                    partition: *p,
                };
                builder.push(now, Some(&key.encode()), None, &[]);
            }
            self.append(partition, builder).await?;
        }
        self.groups.borrow_mut().remove(group);
        Ok(())
    }
}

fn offsets_ref(partition: u32) -> PartitionRef {
    PartitionRef {
        topic: CONSUMER_OFFSETS_TOPIC.into(),
        partition,
    }
}
