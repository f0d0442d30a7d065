//! The cluster's metadata state machine: the broker lifecycle (registration, fencing,
//! controlled shutdown), leader election (from the ISR, then from the eligible leader replicas
//! of KIP-966, then, only where a topic enables `unclean.leader.election.enable`, from any
//! running replica), ISR changes (AlterPartition), preferred-leader election, replica
//! placement, and [`ClusterMetadata`], the [`StateMachine`] every member applies the metadata
//! log into.
//!
//! Eligible leader replicas (ELR, KIP-966): a replica that leaves the ISR while the ISR is
//! (then) smaller than the topic's `min.insync.replicas` joins the partition's ELR. The leader's
//! high watermark does not advance while the ISR is below `min.insync.replicas`
//! (`replica::LeaderState`), and a replica in the ISR is never behind the high watermark, so an
//! ELR member holds every record below it: electing it loses nothing acknowledged with
//! acks=all. The ISR may therefore become empty (its last member fenced); the ELR then names
//! who may lead. The ELR is cleared once the ISR is back at `min.insync.replicas`; a member
//! that rejoins the ISR leaves it.
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
        MetadataChange::ElectPreferredLeaders => elect_preferred_leaders(next),
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
        | MetadataChange::AddPartitions { .. }
        | MetadataChange::ReplaceAcls { .. }
        | MetadataChange::ReplaceScramCredentials { .. } => {
            unreachable!("topic, ACL and SCRAM changes are applied by MetadataImage::apply_at")
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

/// The topic configs leader election reads (deterministic: from the image alone).
#[derive(Debug, Clone, Copy)]
struct ElectionRules {
    /// `min.insync.replicas` (default 1).
    min_isr: usize,
    /// `unclean.leader.election.enable` (default false).
    unclean: bool,
}

impl ElectionRules {
    fn of(configs: &BTreeMap<String, String>) -> ElectionRules {
        ElectionRules {
            min_isr: configs
                .get("min.insync.replicas")
                .and_then(|v| v.parse::<usize>().ok())
                .unwrap_or(1)
                .max(1),
            unclean: configs
                .get("unclean.leader.election.enable")
                .is_some_and(|v| v.eq_ignore_ascii_case("true")),
        }
    }
}

/// Where a new leader came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Election {
    /// An ISR member (clean).
    Isr(i32),
    /// An eligible leader replica, the ISR being empty (clean: it has the committed data).
    Elr(i32),
    /// Any running replica although no ISR or ELR member runs: possible data loss.
    Unclean(i32),
    /// No replica may lead.
    Nobody,
}

/// Chooses a leader among `running` brokers: the first ISR member in replica order; when the
/// ISR is empty, the first ELR member; when no ISR or ELR member runs and the topic enables
/// unclean election, the first running replica.
fn choose_leader(p: &PartitionRecord, running: &[i32], rules: ElectionRules) -> Election {
    let runs = |r: &i32| running.contains(r);
    if let Some(r) = p.replicas.iter().find(|r| p.isr.contains(r) && runs(r)) {
        return Election::Isr(*r);
    }
    if p.isr.is_empty() {
        if let Some(r) = p.replicas.iter().find(|r| p.elr.contains(r) && runs(r)) {
            return Election::Elr(*r);
        }
    }
    if rules.unclean && !p.isr.iter().chain(&p.elr).any(runs) {
        if let Some(r) = p.replicas.iter().find(|r| runs(r)) {
            return Election::Unclean(*r);
        }
    }
    Election::Nobody
}

/// Makes `election` the partition's leader (bumping the leader epoch). A leader from the ELR
/// or an unclean one is the whole new ISR.
fn elect(
    next_unclean: &mut u64,
    topic: &str,
    index: usize,
    p: &mut PartitionRecord,
    election: Election,
) {
    match election {
        Election::Isr(r) => set_leader(p, r),
        Election::Elr(r) => {
            set_leader(p, r);
            p.isr = vec![r];
            tracing::info!(
                topic,
                partition = index,
                leader = r,
                "leader elected from the ELR"
            );
        }
        Election::Unclean(r) => {
            set_leader(p, r);
            p.isr = vec![r];
            p.elr.clear();
            p.last_known_elr.clear();
            *next_unclean += 1;
            tracing::warn!(
                topic,
                partition = index,
                leader = r,
                "unclean leader election (unclean.leader.election.enable): records acknowledged \
                 by the previous ISR may be lost"
            );
        }
        Election::Nobody => set_leader(p, NO_LEADER),
    }
}

/// Removes `gone` from the ISR; if the ISR is then below `min.insync.replicas` it joins the
/// ELR (it held every record below the high watermark, which stops advancing).
fn leave_isr(p: &mut PartitionRecord, gone: i32, rules: ElectionRules) {
    p.isr.retain(|&r| r != gone);
    if p.isr.len() < rules.min_isr && !p.elr.contains(&gone) {
        p.elr.push(gone);
    }
}

/// KIP-966's invariants: ELR members are not in the ISR, and there is no ELR while the ISR is
/// at least `min.insync.replicas` (the high watermark advances without them).
fn settle_elr(p: &mut PartitionRecord, rules: ElectionRules) {
    let isr = p.isr.clone();
    p.elr.retain(|r| !isr.contains(r));
    if p.isr.len() >= rules.min_isr {
        p.elr.clear();
        p.last_known_elr.clear();
    }
}

/// The running brokers, without `except`.
fn running_brokers(next: &MetadataImage, except: Option<i32>) -> Vec<i32> {
    next.brokers
        .values()
        .filter(|b| b.state == BrokerState::Running && Some(b.registration.id) != except)
        .map(|b| b.registration.id)
        .collect()
}

/// Gives the partitions `gone` leads a new leader ([`choose_leader`]). With `shrink`, `gone`
/// also leaves every ISR it is in (into the ELR where the ISR falls below
/// `min.insync.replicas`), so an ISR may become empty.
fn move_leadership_off(next: &mut MetadataImage, gone: i32, shrink: bool) {
    let running = running_brokers(next, Some(gone));
    let mut unclean = next.unclean_leader_elections;
    for t in next.topics.values_mut() {
        let rules = ElectionRules::of(&t.configs);
        for (i, p) in t.partitions.iter_mut().enumerate() {
            if !p.replicas.contains(&gone) || p.replica_cores.is_empty() {
                continue;
            }
            let mut changed = false;
            if shrink && p.isr.contains(&gone) {
                leave_isr(p, gone, rules);
                changed = true;
            }
            if p.leader == gone {
                let election = choose_leader(p, &running, rules);
                elect(&mut unclean, &t.name, i, p, election);
                changed = true;
            }
            if changed {
                settle_elr(p, rules);
                p.partition_epoch += 1;
            }
        }
    }
    next.unclean_leader_elections = unclean;
}

/// A broker that is running again: the leaderless partitions it holds a replica of get a
/// leader if one may lead now ([`choose_leader`]: it, as an ISR or ELR member, or as an
/// unclean choice where the topic allows it).
fn elect_leaderless(next: &mut MetadataImage, id: i32) {
    elect_offline(next, |_, p| p.replicas.contains(&id));
}

/// A topic's configs changed: its leaderless partitions get a leader if one may lead now
/// (Kafka elects at once when `unclean.leader.election.enable` is turned on).
pub(crate) fn elect_offline_of_topic(next: &mut MetadataImage, topic: &str) {
    elect_offline(next, |t, _| t == topic);
}

/// The leaderless partitions (cluster mode) that `which` selects get a leader if one may lead.
fn elect_offline(next: &mut MetadataImage, which: impl Fn(&str, &PartitionRecord) -> bool) {
    let running = running_brokers(next, None);
    let mut unclean = next.unclean_leader_elections;
    for t in next.topics.values_mut() {
        let rules = ElectionRules::of(&t.configs);
        for (i, p) in t.partitions.iter_mut().enumerate() {
            if p.leader != NO_LEADER || p.replica_cores.is_empty() || !which(&t.name, p) {
                continue;
            }
            let election = choose_leader(p, &running, rules);
            if election != Election::Nobody {
                elect(&mut unclean, &t.name, i, p, election);
                settle_elr(p, rules);
                p.partition_epoch += 1;
            }
        }
    }
    next.unclean_leader_elections = unclean;
}

/// Preferred-leader election (Kafka's `auto.leader.rebalance.enable` round, or
/// `kafka-leader-election.sh --election-type preferred` for every partition): a partition whose
/// first replica runs, is in the ISR and does not lead gets it back as leader.
fn elect_preferred_leaders(next: &mut MetadataImage) {
    let running = running_brokers(next, None);
    for t in next.topics.values_mut() {
        for p in t.partitions.iter_mut() {
            if let Some(preferred) = preferred_ready(p, &running) {
                set_leader(p, preferred);
                p.partition_epoch += 1;
            }
        }
    }
}

/// The partition's preferred (first) replica, if it runs, is in the ISR and does not lead.
fn preferred_ready(p: &PartitionRecord, running: &[i32]) -> Option<i32> {
    let preferred = *p.replicas.first()?;
    let ready = !p.replica_cores.is_empty()
        && p.leader != preferred
        && p.isr.contains(&preferred)
        && running.contains(&preferred);
    ready.then_some(preferred)
}

/// Partitions whose preferred replica could lead again now (what an `ElectPreferredLeaders`
/// command would move).
pub fn preferred_leader_imbalance(image: &MetadataImage) -> usize {
    let running = running_brokers(image, None);
    image
        .topics
        .values()
        .flat_map(|t| &t.partitions)
        .filter(|p| preferred_ready(p, &running).is_some())
        .count()
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
    let rules = ElectionRules::of(&t.configs);
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
    set_isr(p, &a.isr, rules);
    Ok(())
}

/// A committed AlterPartition: the new ISR; members it drops while it is below
/// `min.insync.replicas` join the ELR, members it adds leave it.
fn set_isr(p: &mut PartitionRecord, isr: &[i32], rules: ElectionRules) {
    let removed: Vec<i32> = p.isr.iter().copied().filter(|r| !isr.contains(r)).collect();
    p.isr = isr.to_vec();
    for r in removed {
        leave_isr(p, r, rules);
    }
    settle_elr(p, rules);
    p.partition_epoch += 1;
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
        MetadataError::AclsChanged { .. } => ErrorCode::OperationInProgress,
        MetadataError::ScramCredentialsChanged { .. } => ErrorCode::OperationInProgress,
        MetadataError::ScramCredentialsLimit { .. } => ErrorCode::LimitExceeded,
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
