//! The cluster's metadata state machine: the broker lifecycle (registration, fencing,
//! controlled shutdown), leader election from the ISR, ISR changes (AlterPartition), replica
//! placement, and [`ClusterMetadata`], the [`StateMachine`] every member applies the metadata
//! log into.
//!
//! Everything here is deterministic: every member applies the same commands in the same order
//! and arrives at the same image. Validation that depends on the image (a topic that exists
//! already, a stale broker epoch) happens in `apply`, so two brokers racing the same request
//! both commit and the later one is answered with the refusal.

use std::collections::BTreeMap;
use std::sync::Arc;

use borges_protocol::ErrorCode;
use serde::{Deserialize, Serialize};

use crate::metadata::{
    AlterPartition, BrokerRecord, BrokerState, MetadataChange, MetadataError, MetadataImage,
    PartitionRecord, NO_LEADER,
};
use crate::types::StateMachine;

/// Applies the broker-lifecycle and partition-state changes to `next` (already at its new
/// revision).
pub(crate) fn apply_broker_change(
    next: &mut MetadataImage,
    change: &MetadataChange,
) -> Result<(), MetadataError> {
    match change {
        MetadataChange::RegisterBroker(reg) => {
            let record = BrokerRecord {
                registration: reg.clone(),
                epoch: next.revision,
                state: BrokerState::Fenced,
            };
            next.brokers.insert(reg.id, record);
            // The previous incarnation led nothing it can still serve.
            move_leadership_off(next, reg.id, false);
        }
        MetadataChange::UnfenceBroker { id, epoch } => {
            set_state(next, *id, *epoch, BrokerState::Running)?;
            elect_leaderless(next, *id);
        }
        MetadataChange::FenceBroker { id, epoch } => {
            set_state(next, *id, *epoch, BrokerState::Fenced)?;
            move_leadership_off(next, *id, true);
        }
        MetadataChange::ControlledShutdown { id, epoch } => {
            set_state(next, *id, *epoch, BrokerState::ShuttingDown)?;
            move_leadership_off(next, *id, true);
        }
        MetadataChange::AlterPartition(alter) => alter_partition(next, alter)?,
        MetadataChange::AllocateProducerIds { broker, size } => {
            if *size <= 0 || !next.brokers.contains_key(broker) {
                return Err(MetadataError::Broker(format!(
                    "broker {broker} cannot reserve {size} producer ids"
                )));
            }
            next.next_producer_id = next
                .next_producer_id
                .checked_add(*size)
                .ok_or_else(|| MetadataError::Broker("producer ids are exhausted".into()))?;
        }
        MetadataChange::CreateTopic(_)
        | MetadataChange::DeleteTopic { .. }
        | MetadataChange::SetTopicConfigs { .. }
        | MetadataChange::AddPartitions { .. } => {
            unreachable!("topic changes are applied by MetadataImage::apply_at")
        }
    }
    Ok(())
}

fn set_state(
    next: &mut MetadataImage,
    id: i32,
    epoch: u64,
    state: BrokerState,
) -> Result<(), MetadataError> {
    let b = next
        .brokers
        .get_mut(&id)
        .ok_or_else(|| MetadataError::Broker(format!("broker {id} is not registered")))?;
    if b.epoch != epoch {
        return Err(MetadataError::Broker(format!(
            "broker {id}: stale broker epoch {epoch} (current {})",
            b.epoch
        )));
    }
    b.state = state;
    Ok(())
}

/// Gives the partitions `gone` leads a new leader: the first running ISR member in replica
/// order, else none (Kafka keeps the last ISR member and waits for it; no unclean election).
/// With `shrink`, `gone` also leaves every ISR it is in, unless it is the last member.
fn move_leadership_off(next: &mut MetadataImage, gone: i32, shrink: bool) {
    let running: Vec<i32> = next
        .brokers
        .values()
        .filter(|b| b.state == BrokerState::Running && b.registration.id != gone)
        .map(|b| b.registration.id)
        .collect();
    for t in next.topics.values_mut() {
        for p in t.partitions.iter_mut() {
            if !p.replicas.contains(&gone) || p.replica_cores.is_empty() {
                continue;
            }
            let mut changed = false;
            if shrink && p.isr.len() > 1 && p.isr.contains(&gone) {
                p.isr.retain(|&r| r != gone);
                changed = true;
            }
            if p.leader == gone {
                let leader = p
                    .replicas
                    .iter()
                    .copied()
                    .find(|r| p.isr.contains(r) && running.contains(r))
                    .unwrap_or(NO_LEADER);
                set_leader(p, leader);
                changed = true;
            }
            if changed {
                p.partition_epoch += 1;
            }
        }
    }
}

/// A broker that is running again leads the leaderless partitions whose ISR it is in.
fn elect_leaderless(next: &mut MetadataImage, id: i32) {
    for t in next.topics.values_mut() {
        for p in t.partitions.iter_mut() {
            if p.leader == NO_LEADER && p.isr.contains(&id) && !p.replica_cores.is_empty() {
                set_leader(p, id);
                p.partition_epoch += 1;
            }
        }
    }
}

fn set_leader(p: &mut PartitionRecord, leader: i32) {
    p.leader = leader;
    p.leader_epoch += 1;
    if let Some(core) = p.core_on(leader) {
        p.core = core;
    }
}

/// Kafka's `validateAlterPartitionData`, in short: the asking broker leads the partition in
/// the epoch it names, its partition epoch is current, the ISR contains it, is a subset of
/// the replicas, and every member it adds is running.
fn alter_partition(next: &mut MetadataImage, a: &AlterPartition) -> Result<(), MetadataError> {
    let refuse = |code: ErrorCode, message: String| MetadataError::AlterPartition { code, message };
    let running: Vec<i32> = next
        .brokers
        .values()
        .filter(|b| b.state == BrokerState::Running)
        .map(|b| b.registration.id)
        .collect();
    let epoch_ok = next
        .brokers
        .get(&a.leader)
        .is_some_and(|b| b.epoch == a.broker_epoch);
    if !epoch_ok {
        return Err(refuse(
            ErrorCode::NotLeaderOrFollower,
            format!(
                "broker {} has a stale broker epoch {}",
                a.leader, a.broker_epoch
            ),
        ));
    }
    let t = next.topic_mut(&a.topic)?;
    let p = t.partitions.get_mut(a.partition as usize).ok_or_else(|| {
        refuse(
            ErrorCode::UnknownTopicOrPartition,
            format!("{}-{} does not exist", a.topic, a.partition),
        )
    })?;
    if p.leader != a.leader || p.leader_epoch != a.leader_epoch {
        return Err(refuse(
            ErrorCode::FencedLeaderEpoch,
            format!(
                "broker {} in leader epoch {} does not lead {}-{} (leader {} epoch {})",
                a.leader, a.leader_epoch, a.topic, a.partition, p.leader, p.leader_epoch
            ),
        ));
    }
    if p.partition_epoch != a.partition_epoch {
        return Err(refuse(
            ErrorCode::InvalidRequest,
            format!(
                "partition epoch {} is stale (current {})",
                a.partition_epoch, p.partition_epoch
            ),
        ));
    }
    let subset = a.isr.iter().all(|r| p.replicas.contains(r));
    let added_ok = a
        .isr
        .iter()
        .all(|r| p.isr.contains(r) || running.contains(r));
    if !a.isr.contains(&a.leader) || !subset || !added_ok {
        return Err(refuse(
            ErrorCode::InvalidRequest,
            format!(
                "ISR {:?} must contain the leader, be a subset of the replicas {:?} and add \
                 only running brokers",
                a.isr, p.replicas
            ),
        ));
    }
    p.isr = a.isr.clone();
    p.partition_epoch += 1;
    Ok(())
}

/// Places `count` new partitions with `rf` replicas each on distinct running brokers. Leaders
/// (first replicas) rotate over the brokers, continuing across topics; each replica goes to
/// its broker's least-loaded core.
pub fn place_replicas(
    image: &MetadataImage,
    count: usize,
    rf: usize,
) -> Result<Vec<PartitionRecord>, MetadataError> {
    let brokers: Vec<&BrokerRecord> = image
        .brokers
        .values()
        .filter(|b| b.state == BrokerState::Running)
        .collect();
    if rf == 0 || rf > brokers.len() {
        return Err(MetadataError::ReplicationFactor {
            asked: rf as i64,
            available: brokers.len(),
        });
    }
    let mut load = core_load(image);
    let placed_before: usize = image.topics.values().map(|t| t.partitions.len()).sum();
    let mut out = Vec::with_capacity(count);
    for i in 0..count {
        let start = (placed_before + i) % brokers.len();
        let mut replicas = Vec::with_capacity(rf);
        let mut cores = Vec::with_capacity(rf);
        for j in 0..rf {
            let b = brokers[(start + j) % brokers.len()];
            let id = b.registration.id;
            let n = b.registration.cores.len().max(1);
            let loads = load.entry(id).or_insert_with(|| vec![0; n]);
            if loads.len() < n {
                loads.resize(n, 0);
            }
            let core = (0..n).min_by_key(|&c| (loads[c], c)).unwrap_or(0);
            loads[core] += 1;
            replicas.push(id);
            cores.push(
                b.registration
                    .cores
                    .get(core)
                    .map_or(core as u16, |c| c.core),
            );
        }
        out.push(PartitionRecord {
            core: cores[0],
            leader_epoch: 0,
            leader: replicas[0],
            isr: replicas.clone(),
            replicas,
            elr: Vec::new(),
            last_known_elr: Vec::new(),
            replica_cores: cores,
            partition_epoch: 0,
        });
    }
    Ok(out)
}

/// Replicas per core of every broker (index = position in its registered core list).
fn core_load(image: &MetadataImage) -> BTreeMap<i32, Vec<usize>> {
    let mut load: BTreeMap<i32, Vec<usize>> = BTreeMap::new();
    for t in image.topics.values() {
        for p in &t.partitions {
            for (r, c) in p.replicas.iter().zip(&p.replica_cores) {
                let v = load.entry(*r).or_default();
                let i = image
                    .brokers
                    .get(r)
                    .and_then(|b| b.registration.cores.iter().position(|x| x.core == *c))
                    .unwrap_or(usize::from(*c));
                if v.len() <= i {
                    v.resize(i + 1, 0);
                }
                v[i] += 1;
            }
        }
    }
    load
}

/// What applying a metadata command answers.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChangeReply {
    /// The command's Raft index (= the image revision it produced; a broker epoch for a
    /// registration).
    pub index: u64,
    /// Why the command changed nothing: (wire error code, message).
    pub error: Option<(u16, String)>,
    /// For `AllocateProducerIds`: the first id of the reserved block.
    #[serde(default)]
    pub block_start: Option<i64>,
}

/// The cluster metadata as the replicated state machine: the image, advanced by every applied
/// command. Lives on the Raft node's executor.
#[derive(Debug, Clone, Default)]
pub struct ClusterMetadata {
    /// The applied image (`revision` = index of the last applied command).
    pub image: Arc<MetadataImage>,
}

impl Default for MetadataImage {
    fn default() -> Self {
        let mut image = MetadataImage::new(0);
        // Every member must start from the same image: no random id.
        image.cluster_id = crate::metadata::Uuid(0);
        image
    }
}

fn error_code(e: &MetadataError) -> ErrorCode {
    match e {
        MetadataError::TopicExists(_) => ErrorCode::TopicAlreadyExists,
        MetadataError::NoSuchTopic(_) => ErrorCode::UnknownTopicOrPartition,
        MetadataError::AlterPartition { code, .. } => *code,
        MetadataError::ReplicationFactor { .. } => ErrorCode::InvalidReplicationFactor,
        _ => ErrorCode::InvalidRequest,
    }
}

impl StateMachine for ClusterMetadata {
    type Command = MetadataChange;
    type Reply = ChangeReply;

    fn apply(&mut self, index: u64, _term: u64, command: &MetadataChange) -> ChangeReply {
        let block_start = matches!(command, MetadataChange::AllocateProducerIds { .. })
            .then_some(self.image.next_producer_id);
        match self.image.apply_at(command, index) {
            Ok(next) => {
                self.image = Arc::new(next);
                ChangeReply {
                    index,
                    error: None,
                    block_start,
                }
            }
            Err(e) => {
                // The revision still moves to this index: waiting for "revision >= index"
                // must end for refused commands too.
                let mut same = (*self.image).clone();
                same.revision = same.revision.max(index);
                self.image = Arc::new(same);
                ChangeReply {
                    index,
                    error: Some((error_code(&e) as u16, e.to_string())),
                    block_start: None,
                }
            }
        }
    }

    fn encode(&self) -> Result<Vec<u8>, String> {
        serde_json::to_vec(&*self.image).map_err(|e| e.to_string())
    }

    fn decode(bytes: &[u8]) -> Result<Self, String> {
        let image: MetadataImage = serde_json::from_slice(bytes).map_err(|e| e.to_string())?;
        Ok(ClusterMetadata {
            image: Arc::new(image),
        })
    }
}

#[cfg(test)]
mod tests;
