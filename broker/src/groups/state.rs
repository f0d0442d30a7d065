//! One consumer group's membership state machine (in the spirit of KIP-848): members join,
//! heartbeat and leave with one API; the coordinator computes a target assignment whenever the
//! membership, a subscription or a subscribed topic's partition count changes, and reconciles
//! each member towards it incrementally: a member first revokes the partitions it must give up,
//! and a partition is handed to its new owner only once no other member may still own it.
//! Member epochs fence zombies. Pure logic: no IO, no clock (the caller passes `now`).

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use borges_protocol::ErrorCode;

use super::assignor::{self, Assignment, MemberSubscription};
use crate::failure::Failure;

/// A committed offset.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Committed {
    /// Next offset to consume.
    pub offset: i64,
    /// Leader epoch of the record before it, or -1.
    pub leader_epoch: i32,
    /// Client-supplied metadata.
    pub metadata: String,
    /// When it was committed (ms since the epoch).
    pub commit_timestamp_ms: i64,
}

/// Limits and defaults from the broker configuration.
#[derive(Debug, Clone, Copy)]
pub struct GroupLimits {
    /// Default session timeout.
    pub session_timeout_ms: u32,
    /// Smallest accepted session timeout.
    pub session_timeout_ms_min: u32,
    /// Largest accepted session timeout.
    pub session_timeout_ms_max: u32,
    /// Heartbeat interval told to members.
    pub heartbeat_interval_ms: u32,
    /// Members per group.
    pub members_max: u32,
}

/// A heartbeat (join: epoch 0; leave: epoch -1).
#[derive(Debug, Clone, Default)]
pub struct Heartbeat {
    /// Member id; empty to let the coordinator choose when joining.
    pub member_id: String,
    /// 0 join, -1 leave, else the member's epoch.
    pub member_epoch: i32,
    /// Static membership id (recorded only).
    pub instance_id: Option<String>,
    /// Rack (recorded only).
    pub rack_id: Option<String>,
    /// Client id.
    pub client_id: String,
    /// Client address as the broker saw it.
    pub client_host: String,
    /// Time allowed to revoke partitions; -1 for the session timeout.
    pub rebalance_timeout_ms: i32,
    /// Requested session timeout; -1 for the default.
    pub session_timeout_ms: i32,
    /// New subscription, or `None` when unchanged.
    pub subscribed_topics: Option<Vec<String>>,
    /// Partitions the member owns now, or `None` when unchanged.
    pub owned: Option<Assignment>,
}

/// The coordinator's answer to a heartbeat.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeartbeatReply {
    /// The member's id.
    pub member_id: String,
    /// Its epoch after this heartbeat (-1 after leaving).
    pub member_epoch: i32,
    /// How often to heartbeat.
    pub heartbeat_interval_ms: i32,
    /// The partitions it should own now.
    pub assignment: Assignment,
}

/// One member.
#[derive(Debug, Clone)]
pub struct Member {
    /// Member id.
    pub id: String,
    /// Current epoch.
    pub epoch: i32,
    /// Epoch before the last bump (a heartbeat with it is tolerated: the reply may be lost).
    pub previous_epoch: i32,
    /// Client id.
    pub client_id: String,
    /// Client host.
    pub client_host: String,
    /// Static membership id.
    pub instance_id: Option<String>,
    /// Rack.
    pub rack_id: Option<String>,
    /// Subscribed topics.
    pub topics: BTreeSet<String>,
    /// Session timeout.
    pub session_timeout: Duration,
    /// Time allowed to revoke.
    pub rebalance_timeout: Duration,
    /// Heartbeat interval told to this member: the broker's, at most a third of its session.
    pub heartbeat_interval_ms: u32,
    /// Removed when no heartbeat arrives before this.
    pub session_deadline: Instant,
    /// Removed when it has not revoked what it must by this.
    pub revoke_deadline: Option<Instant>,
    /// What the member may own: what it reported plus what it was last given.
    pub owned: Assignment,
}

/// A consumer group. Lives on its coordinator core.
#[derive(Debug, Clone)]
pub struct Group {
    /// Group id.
    pub id: String,
    /// Bumped by every membership, subscription or metadata change.
    pub epoch: i32,
    /// Epoch of the current target assignment.
    pub assignment_epoch: i32,
    /// Members by id.
    pub members: BTreeMap<String, Member>,
    /// Target assignment by member.
    pub target: BTreeMap<String, Assignment>,
    /// Partition counts of the subscribed topics the target was computed with.
    pub partition_counts: BTreeMap<String, usize>,
    /// Committed offsets by (topic, partition).
    pub offsets: BTreeMap<(String, i32), Committed>,
    /// Members joined so far (for generated member ids).
    joined: u64,
}

fn union(a: &Assignment, b: &Assignment) -> Assignment {
    let mut out = a.clone();
    for (t, ps) in b {
        out.entry(t.clone()).or_default().extend(ps);
    }
    out.retain(|_, ps| !ps.is_empty());
    out
}

fn minus(a: &Assignment, b: &Assignment) -> Assignment {
    let mut out = Assignment::new();
    for (t, ps) in a {
        let keep: BTreeSet<i32> = match b.get(t) {
            Some(bs) => ps.difference(bs).copied().collect(),
            None => ps.clone(),
        };
        if !keep.is_empty() {
            out.insert(t.clone(), keep);
        }
    }
    out
}

fn intersect(a: &Assignment, b: &Assignment) -> Assignment {
    let mut out = Assignment::new();
    for (t, ps) in a {
        if let Some(bs) = b.get(t) {
            let both: BTreeSet<i32> = ps.intersection(bs).copied().collect();
            if !both.is_empty() {
                out.insert(t.clone(), both);
            }
        }
    }
    out
}

impl Group {
    /// An empty group.
    pub fn new(id: &str) -> Group {
        Group {
            id: id.to_string(),
            epoch: 0,
            assignment_epoch: 0,
            members: BTreeMap::new(),
            target: BTreeMap::new(),
            partition_counts: BTreeMap::new(),
            offsets: BTreeMap::new(),
            joined: 0,
        }
    }

    /// Empty, Assigning, Reconciling or Stable.
    pub fn state(&self) -> &'static str {
        if self.members.is_empty() {
            "Empty"
        } else if self.epoch > self.assignment_epoch {
            "Assigning"
        } else if self
            .members
            .values()
            .any(|m| m.epoch != self.assignment_epoch || m.revoke_deadline.is_some())
        {
            "Reconciling"
        } else {
            "Stable"
        }
    }

    /// Handles a heartbeat. `partitions_of` gives a topic's partition count (None if it does
    /// not exist).
    pub fn heartbeat(
        &mut self,
        hb: Heartbeat,
        limits: &GroupLimits,
        partitions_of: &dyn Fn(&str) -> Option<usize>,
        now: Instant,
    ) -> Result<HeartbeatReply, Failure> {
        let member_id = match hb.member_epoch {
            0 => self.join(&hb, limits, now)?,
            -1 => {
                if self.members.remove(&hb.member_id).is_some() {
                    self.epoch += 1;
                    self.target.remove(&hb.member_id);
                }
                return Ok(HeartbeatReply {
                    member_id: hb.member_id,
                    member_epoch: -1,
                    heartbeat_interval_ms: limits.heartbeat_interval_ms as i32,
                    assignment: Assignment::new(),
                });
            }
            epoch => self.heartbeat_existing(&hb, epoch)?,
        };
        if let Some(m) = self.members.get_mut(&member_id) {
            m.session_deadline = now + m.session_timeout;
        }
        self.refresh_target(partitions_of);
        let assignment = self.reconcile(&member_id, now);
        let (epoch, interval) = self
            .members
            .get(&member_id)
            .map_or((0, limits.heartbeat_interval_ms), |m| {
                (m.epoch, m.heartbeat_interval_ms)
            });
        Ok(HeartbeatReply {
            member_id,
            member_epoch: epoch,
            heartbeat_interval_ms: interval as i32,
            assignment,
        })
    }

    fn join(
        &mut self,
        hb: &Heartbeat,
        limits: &GroupLimits,
        now: Instant,
    ) -> Result<String, Failure> {
        let topics: BTreeSet<String> = match &hb.subscribed_topics {
            Some(t) if !t.is_empty() => t.iter().cloned().collect(),
            _ => {
                return Err(Failure::new(
                    ErrorCode::InvalidRequest,
                    "joining (member_epoch 0) needs a non-empty subscription",
                ))
            }
        };
        let rejoin = !hb.member_id.is_empty() && self.members.contains_key(&hb.member_id);
        if !rejoin && self.members.len() as u32 >= limits.members_max {
            return Err(Failure::new(
                ErrorCode::GroupMaxSizeReached,
                format!(
                    "group {} already has {} members",
                    self.id, limits.members_max
                ),
            ));
        }
        let session_ms = if hb.session_timeout_ms <= 0 {
            limits.session_timeout_ms
        } else {
            (hb.session_timeout_ms as u32)
                .clamp(limits.session_timeout_ms_min, limits.session_timeout_ms_max)
        };
        let rebalance_ms = if hb.rebalance_timeout_ms <= 0 {
            session_ms
        } else {
            hb.rebalance_timeout_ms as u32
        };
        self.joined += 1;
        let id = if hb.member_id.is_empty() {
            let uuid = crate::metadata::Uuid::random();
            format!(
                "{}-{:016x}",
                hb.client_id.chars().take(64).collect::<String>(),
                uuid.lo()
            )
        } else {
            hb.member_id.clone()
        };
        let session_timeout = Duration::from_millis(u64::from(session_ms));
        self.members.insert(
            id.clone(),
            Member {
                id: id.clone(),
                epoch: 0,
                previous_epoch: 0,
                client_id: hb.client_id.clone(),
                client_host: hb.client_host.clone(),
                instance_id: hb.instance_id.clone(),
                rack_id: hb.rack_id.clone(),
                topics,
                session_timeout,
                rebalance_timeout: Duration::from_millis(u64::from(rebalance_ms)),
                heartbeat_interval_ms: limits.heartbeat_interval_ms.min(session_ms / 3).max(1),
                session_deadline: now + session_timeout,
                revoke_deadline: None,
                owned: Assignment::new(),
            },
        );
        self.epoch += 1;
        Ok(id)
    }

    fn heartbeat_existing(&mut self, hb: &Heartbeat, epoch: i32) -> Result<String, Failure> {
        let Some(m) = self.members.get_mut(&hb.member_id) else {
            return Err(Failure::new(
                ErrorCode::UnknownMemberId,
                format!(
                    "{} is not a member of group {}; rejoin with epoch 0",
                    hb.member_id, self.id
                ),
            ));
        };
        if epoch != m.epoch && epoch != m.previous_epoch {
            let current = m.epoch;
            self.members.remove(&hb.member_id);
            self.target.remove(&hb.member_id);
            self.epoch += 1;
            return Err(Failure::new(
                ErrorCode::FencedMemberEpoch,
                format!("member epoch {epoch} is fenced (current {current}); rejoin with epoch 0"),
            ));
        }
        if let Some(topics) = &hb.subscribed_topics {
            let topics: BTreeSet<String> = topics.iter().cloned().collect();
            if topics != m.topics {
                m.topics = topics;
                self.epoch += 1;
            }
        }
        if let Some(owned) = &hb.owned {
            m.owned = owned.clone();
        }
        Ok(hb.member_id.clone())
    }

    /// Recomputes the target assignment when the group epoch moved or a subscribed topic's
    /// partition count changed.
    fn refresh_target(&mut self, partitions_of: &dyn Fn(&str) -> Option<usize>) {
        let topics: BTreeSet<&String> = self
            .members
            .values()
            .flat_map(|m| m.topics.iter())
            .collect();
        let counts: BTreeMap<String, usize> = topics
            .into_iter()
            .filter_map(|t| partitions_of(t).map(|n| (t.clone(), n)))
            .collect();
        if counts != self.partition_counts {
            self.epoch += 1;
        }
        if self.epoch == self.assignment_epoch {
            return;
        }
        let subs: Vec<MemberSubscription> = self
            .members
            .values()
            .map(|m| MemberSubscription {
                member_id: m.id.clone(),
                topics: m.topics.clone(),
            })
            .collect();
        self.target = assignor::assign(&subs, &counts, &self.target);
        self.partition_counts = counts;
        self.assignment_epoch = self.epoch;
    }

    /// Moves one member towards its target: revoke first, then receive what nobody else may
    /// still own. Returns the assignment to send.
    fn reconcile(&mut self, member_id: &str, now: Instant) -> Assignment {
        let target = self.target.get(member_id).cloned().unwrap_or_default();
        let others: Assignment = self
            .members
            .values()
            .filter(|m| m.id != member_id)
            .fold(Assignment::new(), |acc, m| union(&acc, &m.owned));
        let assignment_epoch = self.assignment_epoch;
        let Some(m) = self.members.get_mut(member_id) else {
            return Assignment::new();
        };
        let to_revoke = minus(&m.owned, &target);
        let assigned = if !to_revoke.is_empty() {
            m.revoke_deadline.get_or_insert(now + m.rebalance_timeout);
            intersect(&m.owned, &target)
        } else {
            m.revoke_deadline = None;
            if m.epoch != assignment_epoch {
                m.previous_epoch = m.epoch;
                m.epoch = assignment_epoch;
            }
            minus(&target, &others)
        };
        m.owned = union(&m.owned, &assigned);
        assigned
    }

    /// Removes members whose session expired or who did not revoke in time. Returns their ids.
    pub fn expire(&mut self, now: Instant) -> Vec<String> {
        let gone: Vec<String> = self
            .members
            .values()
            .filter(|m| now >= m.session_deadline || m.revoke_deadline.is_some_and(|d| now >= d))
            .map(|m| m.id.clone())
            .collect();
        for id in &gone {
            self.members.remove(id);
            self.target.remove(id);
        }
        if !gone.is_empty() {
            self.epoch += 1;
        }
        gone
    }

    /// Whether a commit from (`member_id`, `member_epoch`) is accepted. An empty member id with
    /// epoch -1 is an administrative commit, accepted only while the group has no members.
    pub fn check_commit(&self, member_id: &str, member_epoch: i32) -> Result<(), Failure> {
        if member_id.is_empty() {
            if member_epoch != -1 {
                return Err(Failure::new(
                    ErrorCode::InvalidRequest,
                    "a commit without a member id must carry member epoch -1",
                ));
            }
            if !self.members.is_empty() {
                return Err(Failure::new(
                    ErrorCode::NonEmptyGroup,
                    format!(
                        "group {} has {} active members; only they may commit",
                        self.id,
                        self.members.len()
                    ),
                ));
            }
            return Ok(());
        }
        let Some(m) = self.members.get(member_id) else {
            return Err(Failure::new(
                ErrorCode::UnknownMemberId,
                format!("{member_id} is not a member of group {}", self.id),
            ));
        };
        match member_epoch.cmp(&m.epoch) {
            std::cmp::Ordering::Equal => Ok(()),
            std::cmp::Ordering::Less => Err(Failure::new(
                ErrorCode::StaleMemberEpoch,
                format!("member epoch {member_epoch} is stale (current {})", m.epoch),
            )),
            std::cmp::Ordering::Greater => Err(Failure::new(
                ErrorCode::FencedMemberEpoch,
                format!(
                    "member epoch {member_epoch} is unknown (current {})",
                    m.epoch
                ),
            )),
        }
    }

    /// Whether the group holds nothing worth keeping.
    pub fn is_disposable(&self) -> bool {
        self.members.is_empty() && self.offsets.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: GroupLimits = GroupLimits {
        session_timeout_ms: 10_000,
        session_timeout_ms_min: 1_000,
        session_timeout_ms_max: 60_000,
        heartbeat_interval_ms: 1_000,
        members_max: 10,
    };

    fn four(_t: &str) -> Option<usize> {
        Some(4)
    }

    fn join(g: &mut Group, client: &str, now: Instant) -> HeartbeatReply {
        g.heartbeat(
            Heartbeat {
                client_id: client.into(),
                subscribed_topics: Some(vec!["orders".into()]),
                ..Default::default()
            },
            &LIMITS,
            &four,
            now,
        )
        .unwrap()
    }

    fn beat(
        g: &mut Group,
        r: &HeartbeatReply,
        owned: &Assignment,
        now: Instant,
    ) -> Result<HeartbeatReply, Failure> {
        g.heartbeat(
            Heartbeat {
                member_id: r.member_id.clone(),
                member_epoch: r.member_epoch,
                owned: Some(owned.clone()),
                ..Default::default()
            },
            &LIMITS,
            &four,
            now,
        )
    }

    fn n(a: &Assignment) -> usize {
        assignor::count(a)
    }

    #[test]
    fn first_member_gets_everything_second_waits_for_revocation() {
        let now = Instant::now();
        let mut g = Group::new("g");
        let a = join(&mut g, "a", now);
        assert_eq!(n(&a.assignment), 4);
        assert_eq!(g.state(), "Stable");
        let b = join(&mut g, "b", now);
        // b's target is 2 partitions, but a still owns them: b gets nothing yet.
        assert_eq!(n(&b.assignment), 0);
        assert_eq!(g.state(), "Reconciling");
        // a heartbeats owning all 4: told to keep only its 2.
        let a2 = beat(&mut g, &a, &a.assignment, now).unwrap();
        assert_eq!(n(&a2.assignment), 2);
        assert_eq!(
            a2.member_epoch, a.member_epoch,
            "epoch waits for the revocation"
        );
        // a acknowledges by reporting 2; it moves to the new epoch.
        let a3 = beat(&mut g, &a2, &a2.assignment, now).unwrap();
        assert!(a3.member_epoch > a.member_epoch);
        // b now receives the released partitions; nothing overlaps.
        let b2 = beat(&mut g, &b, &b.assignment, now).unwrap();
        assert_eq!(n(&b2.assignment), 2);
        for (t, ps) in &b2.assignment {
            assert!(a3.assignment.get(t).is_none_or(|aps| aps.is_disjoint(ps)));
        }
        let b3 = beat(&mut g, &b2, &b2.assignment, now).unwrap();
        assert_eq!(b3.assignment, b2.assignment);
        let _ = beat(&mut g, &a3, &a3.assignment, now).unwrap();
        assert_eq!(g.state(), "Stable");
    }

    #[test]
    fn heartbeat_interval_fits_the_session() {
        let now = Instant::now();
        let mut g = Group::new("g");
        let short = g
            .heartbeat(
                Heartbeat {
                    session_timeout_ms: 1_500,
                    subscribed_topics: Some(vec!["orders".into()]),
                    ..Default::default()
                },
                &LIMITS,
                &four,
                now,
            )
            .unwrap();
        assert_eq!(short.heartbeat_interval_ms, 500);
        let default = join(&mut g, "b", now);
        assert_eq!(default.heartbeat_interval_ms, 1_000);
    }

    #[test]
    fn crashed_member_expires_and_its_partitions_move() {
        let now = Instant::now();
        let mut g = Group::new("g");
        let a = join(&mut g, "a", now);
        let a1 = beat(&mut g, &a, &a.assignment, now).unwrap();
        let b = join(&mut g, "b", now);
        let a2 = beat(&mut g, &a1, &a1.assignment, now).unwrap();
        let _a3 = beat(&mut g, &a2, &a2.assignment, now).unwrap();
        let b1 = beat(&mut g, &b, &b.assignment, now).unwrap();
        assert_eq!(n(&b1.assignment), 2);
        // a stops heartbeating; after its session timeout it is removed.
        let later = now + Duration::from_millis(10_001);
        let b2 = beat(
            &mut g,
            &b1,
            &b1.assignment,
            later - Duration::from_millis(1),
        )
        .unwrap();
        assert_eq!(g.expire(later), vec![a.member_id.clone()]);
        let b3 = beat(&mut g, &b2, &b2.assignment, later).unwrap();
        assert_eq!(n(&b3.assignment), 4);
    }

    #[test]
    fn stale_and_unknown_members_are_fenced() {
        let now = Instant::now();
        let mut g = Group::new("g");
        let a = join(&mut g, "a", now);
        let a1 = beat(&mut g, &a, &a.assignment, now).unwrap();
        assert!(g.check_commit(&a1.member_id, a1.member_epoch).is_ok());
        assert_eq!(
            g.check_commit(&a1.member_id, a1.member_epoch - 1)
                .unwrap_err()
                .code,
            ErrorCode::StaleMemberEpoch
        );
        assert_eq!(
            g.check_commit("zombie", 3).unwrap_err().code,
            ErrorCode::UnknownMemberId
        );
        assert_eq!(
            g.check_commit("", -1).unwrap_err().code,
            ErrorCode::NonEmptyGroup
        );
        let mut stale = a1.clone();
        stale.member_epoch = a1.member_epoch + 5;
        assert_eq!(
            beat(&mut g, &stale, &Assignment::new(), now)
                .unwrap_err()
                .code,
            ErrorCode::FencedMemberEpoch
        );
        // Fenced means removed: the old id can no longer commit.
        assert_eq!(
            g.check_commit(&a1.member_id, a1.member_epoch)
                .unwrap_err()
                .code,
            ErrorCode::UnknownMemberId
        );
        assert!(g.check_commit("", -1).is_ok());
    }

    #[test]
    fn leaving_releases_partitions_and_new_partitions_are_assigned() {
        let now = Instant::now();
        let mut g = Group::new("g");
        let a = join(&mut g, "a", now);
        let b = join(&mut g, "b", now);
        let a1 = beat(&mut g, &a, &a.assignment, now).unwrap();
        let a2 = beat(&mut g, &a1, &a1.assignment, now).unwrap();
        let b1 = beat(&mut g, &b, &b.assignment, now).unwrap();
        assert_eq!(n(&a2.assignment) + n(&b1.assignment), 4);
        let left = g
            .heartbeat(
                Heartbeat {
                    member_id: a.member_id.clone(),
                    member_epoch: -1,
                    ..Default::default()
                },
                &LIMITS,
                &four,
                now,
            )
            .unwrap();
        assert_eq!(left.member_epoch, -1);
        let b2 = beat(&mut g, &b1, &b1.assignment, now).unwrap();
        assert_eq!(n(&b2.assignment), 4);
        // The topic grows to 6 partitions: the next heartbeat assigns them.
        let six = |_: &str| Some(6);
        let b3 = g
            .heartbeat(
                Heartbeat {
                    member_id: b2.member_id.clone(),
                    member_epoch: b2.member_epoch,
                    owned: Some(b2.assignment.clone()),
                    ..Default::default()
                },
                &LIMITS,
                &six,
                now,
            )
            .unwrap();
        assert_eq!(n(&b3.assignment), 6);
    }
}
