//! Consumer-group membership (server-side, incremental assignment in the spirit of KIP-848) and
//! the group requests the consumer and the admin client share.
//!
//! A subscribed consumer runs one heartbeat task. It finds the group's coordinator (a broker
//! core), joins with member epoch 0, heartbeats every `heartbeat_interval_ms` (sooner when the
//! consumer changed what it owns), reports the partitions the consumer owns, and publishes the
//! assignment each reply carries. The consumer applies that assignment in `poll`: it first gives
//! up revoked partitions (committing them with auto-commit, then telling the rebalance
//! listener), then takes the new ones (starting from their committed offsets), and reports the
//! result, which lets the coordinator hand revoked partitions to their new owners. A fenced or
//! unknown member loses its partitions and joins again.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use borges_protocol::{wire, ApiKey, ErrorCode};
use tokio::sync::Notify;

use crate::client::ClientCore;
use crate::codec::{self, decode, obj};
use crate::error::{check_code, ClientError, Result};
use crate::metadata::join_host_port;
use crate::types::{GroupCoordinator, TopicPartition};

/// Partitions by topic.
pub(crate) type Assignment = BTreeMap<String, BTreeSet<i32>>;

/// Backoff after a failed heartbeat or coordinator lookup.
const GROUP_RETRY_BACKOFF_MS: u64 = 200;

/// What the heartbeat task and the consumer share. Behind one short mutex; never held across an
/// await.
#[derive(Debug, Default)]
pub(crate) struct Membership {
    pub member_id: String,
    /// 0 before joining (and after being fenced).
    pub epoch: i32,
    pub subscription: Vec<String>,
    /// The latest assignment from the coordinator that differs from `owned`, for the consumer
    /// to apply.
    pub target: Option<Assignment>,
    /// What the consumer owns now (reported in every heartbeat).
    pub owned: Assignment,
    /// The coordinator's `host:port` (its core's own port), once found.
    pub coordinator: Option<String>,
    /// A fatal error for `poll` to return.
    pub error: Option<ClientError>,
    /// Set by `close`: the task sends a leave heartbeat and stops.
    pub leaving: bool,
    pub stopped: bool,
}

/// The consumer's handle on its group membership.
pub(crate) struct Group {
    pub state: Arc<Mutex<Membership>>,
    /// Wakes the heartbeat task early (owned partitions changed, leaving).
    pub wake: Arc<Notify>,
    /// Signalled after every heartbeat reply.
    pub replied: Arc<Notify>,
}

/// Settings of the heartbeat task.
#[derive(Debug, Clone)]
pub(crate) struct GroupSettings {
    pub group_id: String,
    pub client_id: String,
    pub session_timeout_ms: u64,
}

impl Group {
    /// Starts membership of `settings.group_id` with `topics`.
    pub fn start(core: Arc<ClientCore>, settings: GroupSettings, topics: Vec<String>) -> Group {
        let state = Arc::new(Mutex::new(Membership {
            subscription: topics,
            ..Membership::default()
        }));
        let group = Group {
            state,
            wake: Arc::new(Notify::new()),
            replied: Arc::new(Notify::new()),
        };
        tokio::spawn(heartbeat_loop(
            core,
            settings,
            group.state.clone(),
            group.wake.clone(),
            group.replied.clone(),
        ));
        group
    }

    /// Locks the shared state.
    pub fn lock(&self) -> MutexGuard<'_, Membership> {
        lock(&self.state)
    }

    /// Asks the task to leave the group and waits (bounded) until it did.
    pub async fn leave(&self, timeout_ms: u64) {
        self.lock().leaving = true;
        self.wake.notify_one();
        let wait = async {
            loop {
                let replied = self.replied.notified();
                if self.lock().stopped {
                    return;
                }
                replied.await;
            }
        };
        let _ = tokio::time::timeout(Duration::from_millis(timeout_ms), wait).await;
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        lock(&self.state).leaving = true;
        self.wake.notify_one();
    }
}

fn lock(state: &Mutex<Membership>) -> MutexGuard<'_, Membership> {
    match state.lock() {
        Ok(guard) => guard,
        Err(poisoned) => poisoned.into_inner(),
    }
}

async fn heartbeat_loop(
    core: Arc<ClientCore>,
    settings: GroupSettings,
    state: Arc<Mutex<Membership>>,
    wake: Arc<Notify>,
    replied: Arc<Notify>,
) {
    loop {
        let coordinator = lock(&state).coordinator.clone();
        let addr = match coordinator {
            Some(addr) => addr,
            None => match find_coordinator(&core, &settings.group_id).await {
                Ok(addr) => {
                    lock(&state).coordinator = Some(addr.clone());
                    addr
                }
                Err(e) => {
                    tracing::debug!(error = %e, group = %settings.group_id, "coordinator lookup failed");
                    if lock(&state).leaving {
                        break;
                    }
                    // A refusal that retrying cannot change (GroupAuthorizationFailed,
                    // InvalidGroupId) is poll's to return; the rest retries.
                    handle_error(&mut lock(&state), e);
                    replied.notify_waiters();
                    tokio::time::sleep(Duration::from_millis(GROUP_RETRY_BACKOFF_MS)).await;
                    continue;
                }
            },
        };
        let leaving = lock(&state).leaving;
        let request = heartbeat_request(&settings, &lock(&state));
        let result = heartbeat(&core, &addr, request).await;
        if leaving {
            break;
        }
        let interval_ms = match result {
            Ok(reply) => {
                // The coordinator's interval, but never so long that the session could lapse.
                let interval_ms = u64::try_from(reply.heartbeat_interval_ms)
                    .unwrap_or(1_000)
                    .min(settings.session_timeout_ms / 3)
                    .max(10);
                apply_reply(&mut lock(&state), reply);
                replied.notify_waiters();
                interval_ms
            }
            Err(e) => {
                handle_error(&mut lock(&state), e);
                replied.notify_waiters();
                tokio::time::sleep(Duration::from_millis(GROUP_RETRY_BACKOFF_MS)).await;
                continue;
            }
        };
        let woken = wake.notified();
        if lock(&state).leaving {
            continue;
        }
        let _ = tokio::time::timeout(Duration::from_millis(interval_ms), woken).await;
    }
    let mut s = lock(&state);
    s.stopped = true;
    s.epoch = -1;
    drop(s);
    replied.notify_waiters();
}

/// What one heartbeat reply said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct HeartbeatReply {
    pub member_id: String,
    pub member_epoch: i32,
    pub heartbeat_interval_ms: i32,
    pub assignment: Option<Assignment>,
}

/// Records a successful reply: ids, epoch, and the assignment when it differs from what the
/// consumer owns.
pub(crate) fn apply_reply(state: &mut Membership, reply: HeartbeatReply) {
    state.member_id = reply.member_id;
    state.epoch = reply.member_epoch;
    if let Some(assignment) = reply.assignment {
        if assignment != state.owned {
            state.target = Some(assignment);
        } else {
            state.target = None;
        }
    }
}

/// Handles a failed heartbeat: lost membership drops every partition and rejoins; a moved
/// coordinator is looked up again; other retriable errors retry; the rest is fatal.
pub(crate) fn handle_error(state: &mut Membership, error: ClientError) {
    match error.code() {
        Some(ErrorCode::UnknownMemberId | ErrorCode::FencedMemberEpoch) => {
            tracing::warn!("group membership lost ({error}); rejoining");
            state.epoch = 0;
            state.target = Some(Assignment::new());
        }
        Some(ErrorCode::NotCoordinator | ErrorCode::CoordinatorNotAvailable) => {
            state.coordinator = None;
        }
        _ if error.is_retriable() => {
            if error.needs_metadata_refresh() {
                state.coordinator = None;
            }
        }
        _ => state.error = Some(error),
    }
}

fn heartbeat_request(settings: &GroupSettings, state: &Membership) -> Vec<u8> {
    let epoch = if state.leaving { -1 } else { state.epoch };
    let request = obj!(wire::ConsumerGroupHeartbeatRequestT {
        group_id: settings.group_id.clone(),
        member_id: (!state.member_id.is_empty()).then(|| state.member_id.clone()),
        member_epoch: epoch,
        client_id: Some(settings.client_id.clone()),
        session_timeout_ms: i32::try_from(settings.session_timeout_ms).unwrap_or(i32::MAX),
        rebalance_timeout_ms: -1,
        subscribed_topic_names: Some(state.subscription.clone()),
        owned_partitions: Some(to_wire(&state.owned)),
    });
    codec::encode(|fbb| request.pack(fbb))
}

async fn heartbeat(core: &ClientCore, addr: &str, message: Vec<u8>) -> Result<HeartbeatReply> {
    let frame = core
        .call(addr, ApiKey::ConsumerGroupHeartbeat, message)
        .await?;
    let response = decode!(ConsumerGroupHeartbeatResponse, frame)?;
    check_code(response.error_code, response.error_message)?;
    Ok(HeartbeatReply {
        member_id: response.member_id.unwrap_or_default(),
        member_epoch: response.member_epoch,
        heartbeat_interval_ms: response.heartbeat_interval_ms,
        assignment: response.assignment.map(|a| from_wire(&a)),
    })
}

/// The `host:port` of the core that coordinates `group`.
pub(crate) async fn find_coordinator(core: &ClientCore, group: &str) -> Result<String> {
    let c = lookup_coordinator(core, group).await?;
    Ok(join_host_port(&c.host, c.port))
}

/// The broker and core that coordinate `group` (FindCoordinator).
pub(crate) async fn lookup_coordinator(core: &ClientCore, group: &str) -> Result<GroupCoordinator> {
    let request = obj!(wire::FindCoordinatorRequestT {
        key_type: wire::CoordinatorType::Group,
        keys: Some(vec![group.to_string()]),
    });
    let frame = core
        .call_any(
            ApiKey::FindCoordinator,
            codec::encode(|fbb| request.pack(fbb)),
        )
        .await?;
    let response = decode!(FindCoordinatorResponse, frame)?;
    check_code(response.error_code, response.error_message)?;
    let c = response
        .coordinators
        .unwrap_or_default()
        .into_iter()
        .find(|c| c.key == group)
        .ok_or_else(|| ClientError::Protocol(format!("FindCoordinator response lacks {group}")))?;
    check_code(c.error_code, c.error_message)?;
    match c.host {
        Some(host) if c.port != 0 => Ok(GroupCoordinator {
            node_id: c.node_id,
            host,
            port: c.port,
            core_id: c.core_id,
        }),
        _ => Err(ClientError::Broker {
            code: ErrorCode::CoordinatorNotAvailable,
            message: Some(format!("no coordinator address for group {group}")),
        }),
    }
}

/// Commits `offsets` for `group` as (`member_id`, `member_epoch`); an empty member id with
/// epoch -1 is an administrative commit (only while the group has no members).
pub(crate) async fn commit(
    core: &ClientCore,
    addr: &str,
    group: &str,
    member_id: &str,
    member_epoch: i32,
    offsets: &[(TopicPartition, i64)],
) -> Result<()> {
    let mut topics: BTreeMap<&str, Vec<wire::OffsetCommitPartitionT>> = BTreeMap::new();
    for (tp, offset) in offsets {
        topics
            .entry(&tp.topic)
            .or_default()
            .push(obj!(wire::OffsetCommitPartitionT {
                partition: tp.partition,
                committed_offset: *offset,
                committed_leader_epoch: -1,
            }));
    }
    let request = obj!(wire::OffsetCommitRequestT {
        group_id: group.to_string(),
        member_id: (!member_id.is_empty()).then(|| member_id.to_string()),
        member_epoch,
        topics: Some(
            topics
                .into_iter()
                .map(|(name, partitions)| obj!(wire::OffsetCommitTopicT {
                    name: name.to_string(),
                    partitions: Some(partitions)
                }))
                .collect(),
        ),
    });
    let frame = core
        .call(
            addr,
            ApiKey::OffsetCommit,
            codec::encode(|fbb| request.pack(fbb)),
        )
        .await?;
    let response = decode!(OffsetCommitResponse, frame)?;
    check_code(response.error_code, response.error_message)?;
    for t in response.topics.unwrap_or_default() {
        for p in t.partitions.unwrap_or_default() {
            check_code(p.error_code, p.error_message)?;
        }
    }
    Ok(())
}

/// Committed offsets of `group` for `partitions` (`None`: every committed partition); `None`
/// for a partition without a commit.
pub(crate) async fn fetch_committed(
    core: &ClientCore,
    addr: &str,
    group: &str,
    partitions: Option<&[TopicPartition]>,
) -> Result<Vec<(TopicPartition, Option<i64>)>> {
    let topics = partitions.map(|ps| {
        let mut by_topic: Assignment = BTreeMap::new();
        for tp in ps {
            by_topic
                .entry(tp.topic.clone())
                .or_default()
                .insert(tp.partition);
        }
        to_wire(&by_topic)
    });
    let request = obj!(wire::OffsetFetchRequestT {
        group_id: group.to_string(),
        member_epoch: -1,
        topics,
    });
    let frame = core
        .call(
            addr,
            ApiKey::OffsetFetch,
            codec::encode(|fbb| request.pack(fbb)),
        )
        .await?;
    let response = decode!(OffsetFetchResponse, frame)?;
    check_code(response.error_code, response.error_message)?;
    let mut out = Vec::new();
    for t in response.topics.unwrap_or_default() {
        for p in t.partitions.unwrap_or_default() {
            check_code(p.error_code, p.error_message)?;
            let committed = (p.committed_offset >= 0).then_some(p.committed_offset);
            out.push((TopicPartition::new(&t.name, p.partition), committed));
        }
    }
    out.sort();
    Ok(out)
}

/// Partitions of an assignment as topic-partitions, sorted.
pub(crate) fn partitions(assignment: &Assignment) -> Vec<TopicPartition> {
    assignment
        .iter()
        .flat_map(|(t, ps)| ps.iter().map(move |p| TopicPartition::new(t, *p)))
        .collect()
}

/// An assignment from topic-partitions.
pub(crate) fn assignment_of<'a>(
    partitions: impl IntoIterator<Item = &'a TopicPartition>,
) -> Assignment {
    let mut out = Assignment::new();
    for tp in partitions {
        out.entry(tp.topic.clone())
            .or_default()
            .insert(tp.partition);
    }
    out
}

pub(crate) fn to_wire(assignment: &Assignment) -> Vec<wire::TopicPartitionsT> {
    assignment
        .iter()
        .map(|(t, ps)| {
            obj!(wire::TopicPartitionsT {
                topic: t.clone(),
                partitions: Some(ps.iter().copied().collect())
            })
        })
        .collect()
}

pub(crate) fn from_wire(topics: &[wire::TopicPartitionsT]) -> Assignment {
    let mut out = Assignment::new();
    for t in topics {
        let ps: BTreeSet<i32> = t.partitions.iter().flatten().copied().collect();
        if !ps.is_empty() {
            out.entry(t.topic.clone()).or_default().extend(ps);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a(pairs: &[(&str, &[i32])]) -> Assignment {
        pairs
            .iter()
            .map(|(t, ps)| (t.to_string(), ps.iter().copied().collect()))
            .collect()
    }

    #[test]
    fn replies_publish_only_assignments_that_differ_from_what_is_owned() {
        let mut s = Membership {
            owned: a(&[("t", &[0, 1])]),
            ..Membership::default()
        };
        apply_reply(
            &mut s,
            HeartbeatReply {
                member_id: "m".into(),
                member_epoch: 3,
                heartbeat_interval_ms: 100,
                assignment: Some(a(&[("t", &[0, 1])])),
            },
        );
        assert_eq!((s.member_id.as_str(), s.epoch), ("m", 3));
        assert!(s.target.is_none());
        apply_reply(
            &mut s,
            HeartbeatReply {
                member_id: "m".into(),
                member_epoch: 3,
                heartbeat_interval_ms: 100,
                assignment: Some(a(&[("t", &[1])])),
            },
        );
        assert_eq!(s.target, Some(a(&[("t", &[1])])));
    }

    #[test]
    fn fenced_members_drop_everything_and_rejoin_while_other_errors_retry_or_stop() {
        let mut s = Membership {
            epoch: 5,
            owned: a(&[("t", &[0])]),
            coordinator: Some("h:1".into()),
            ..Membership::default()
        };
        handle_error(
            &mut s,
            ClientError::from_code(ErrorCode::FencedMemberEpoch as u16, None).unwrap(),
        );
        assert_eq!(s.epoch, 0);
        assert_eq!(s.target, Some(Assignment::new()));
        handle_error(
            &mut s,
            ClientError::from_code(ErrorCode::NotCoordinator as u16, None).unwrap(),
        );
        assert!(s.coordinator.is_none());
        assert!(s.error.is_none());
        handle_error(
            &mut s,
            ClientError::from_code(ErrorCode::InvalidGroupId as u16, None).unwrap(),
        );
        assert!(s.error.is_some());
    }

    #[test]
    fn assignments_round_trip_through_the_wire_shape() {
        let x = a(&[("a", &[2, 0]), ("b", &[1])]);
        assert_eq!(from_wire(&to_wire(&x)), x);
        let tps = partitions(&x);
        assert_eq!(tps[0], TopicPartition::new("a", 0));
        assert_eq!(assignment_of(&tps), x);
    }
}
