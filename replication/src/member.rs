//! One broker's membership of the cluster, on the Raft node's executor: the metadata quorum
//! node ([`RaftNode`] over [`ClusterMetadata`]), writes forwarded to the active controller
//! (the Raft leader), registration and heartbeats, and — while this node leads — the
//! controller's duties: broker sessions, unfencing caught-up brokers, fencing expired ones,
//! and the periodic preferred-leader election (Kafka's `auto.leader.rebalance.enable`).
//!
//! Sessions live in the active controller's memory only (as in KRaft): a new leader starts
//! every registered broker's session afresh, so a failover never fences a live broker, and
//! only state changes (fence, unfence, controlled shutdown) become log records. One session
//! is not fresh: the previous leader's starts at the last AppendEntries this node received
//! from it. Raft node and broker are one process, so that is when the broker was last known
//! to run, and a dead controller's broker is fenced a session timeout after its death rather
//! than after the takeover (which comes an election timeout later). A previous leader that
//! still runs heartbeats to the new one within a heartbeat interval and keeps its session.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use borges_protocol::controller_link::ControllerApiKey;
use borges_protocol::frame::Frame;
use serde::{Deserialize, Serialize};

use crate::cluster::{ChangeReply, ClusterMetadata};
use crate::error::ReplicationError;
use crate::link::{self, FrameConn, Hello, HelloOk, LinkError, LinkLimits, QuorumStatus};
use crate::metadata::{BrokerRegistration, BrokerState, MetadataChange, MetadataImage};
use crate::network::exchange;
use crate::node::{LinkExtension, NodeConfig, RaftNode};
use crate::sm_store::ApplyObserver;
use crate::types::Raft;

/// How a member runs.
#[derive(Debug, Clone)]
pub struct MemberConfig {
    /// The Raft node.
    pub node: NodeConfig,
    /// How often a broker heartbeats to the active controller.
    pub heartbeat_interval_ms: u64,
    /// A broker not heard from for this long is fenced.
    pub session_timeout_ms: u64,
    /// How long a metadata write waits for an active controller before it fails.
    pub request_timeout_ms: u64,
    /// How often the active controller gives partitions their preferred (first) replica back
    /// as leader, when it runs and is in the ISR; `None`: never (Kafka's
    /// `auto.leader.rebalance.enable` and `leader.imbalance.check.interval.seconds`).
    pub leader_rebalance_interval_ms: Option<u64>,
}

/// A broker's heartbeat.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Heartbeat {
    /// Broker id.
    pub id: i32,
    /// Its broker epoch.
    pub epoch: u64,
    /// The metadata revision every one of its cores has applied.
    pub applied: u64,
}

/// A broker-only member's request to follow the log.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AddLearner {
    /// Its node id.
    pub node_id: u64,
    /// Its controller-link address.
    pub addr: String,
}

/// The active controller's answer.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct HeartbeatReply {
    /// The broker's state after this heartbeat.
    pub state: BrokerState,
}

/// The active controller's side: sessions. Lives on the Raft node's executor.
struct Duties {
    node_id: u64,
    session_timeout: Duration,
    raft: RefCell<Option<Raft<ClusterMetadata>>>,
    image: RefCell<Arc<MetadataImage>>,
    /// Last heartbeat per broker id, for the term in `term`.
    sessions: RefCell<HashMap<i32, Instant>>,
    term: Cell<u64>,
    /// The last node that sent this one AppendEntries, and when.
    leader_contact: Cell<Option<(u64, Instant)>>,
    /// Preferred-leader elections: how often, and when the last check was.
    rebalance_interval: Option<Duration>,
    rebalance_checked: Cell<Instant>,
}

impl Duties {
    fn raft(&self) -> Option<Raft<ClusterMetadata>> {
        self.raft.borrow().clone()
    }

    /// Whether this node leads; a new term restarts every session.
    fn leads(&self, raft: &Raft<ClusterMetadata>) -> bool {
        let m = raft.metrics().borrow().clone();
        if m.current_leader != Some(self.node_id) {
            return false;
        }
        if self.term.get() != m.current_term {
            self.term.set(m.current_term);
            self.restart_sessions(Instant::now());
        }
        true
    }

    /// A new term led by this node: every registered broker's session starts at `now`, but
    /// the previous leader's at this node's last contact with it (see the module comment).
    fn restart_sessions(&self, now: Instant) {
        let previous = self
            .leader_contact
            .get()
            .filter(|&(node, _)| node != self.node_id);
        let mut sessions = self.sessions.borrow_mut();
        sessions.clear();
        for &id in self.image.borrow().brokers.keys() {
            let seen = match previous {
                Some((node, at)) if u64::try_from(id).ok() == Some(node) => at.min(now),
                _ => now,
            };
            sessions.insert(id, seen);
        }
    }

    async fn write(&self, change: MetadataChange) -> Result<ChangeReply, LinkError> {
        let raft = self.raft().ok_or(LinkError::Raft("not started".into()))?;
        raft.client_write(change)
            .await
            .map(|r| r.data)
            .map_err(|e| LinkError::Raft(e.to_string()))
    }

    fn not_leader(raft: &Raft<ClusterMetadata>) -> LinkError {
        let m = raft.metrics().borrow().clone();
        let leader_addr = m.current_leader.and_then(|id| {
            m.membership_config
                .membership()
                .get_node(&id)
                .map(|n| n.addr.clone())
        });
        LinkError::NotLeader {
            leader_id: m.current_leader,
            leader_addr,
        }
    }

    /// Adds a broker-only member as a learner (a no-op when it is one already).
    async fn add_learner(&self, req: AddLearner) -> Result<(), LinkError> {
        let raft = self.raft().ok_or(LinkError::Raft("not started".into()))?;
        if !self.leads(&raft) {
            return Err(Self::not_leader(&raft));
        }
        let known = raft
            .metrics()
            .borrow()
            .membership_config
            .membership()
            .get_node(&req.node_id)
            .is_some_and(|n| n.addr == req.addr);
        if known {
            return Ok(());
        }
        let node = crate::types::Node { addr: req.addr };
        raft.add_learner(req.node_id, node, false)
            .await
            .map(drop)
            .map_err(|e| LinkError::Raft(e.to_string()))
    }

    async fn heartbeat(&self, hb: Heartbeat) -> Result<HeartbeatReply, LinkError> {
        let raft = self.raft().ok_or(LinkError::Raft("not started".into()))?;
        if !self.leads(&raft) {
            return Err(Self::not_leader(&raft));
        }
        let state = {
            let image = self.image.borrow();
            match image.brokers.get(&hb.id) {
                Some(b) if b.epoch == hb.epoch => b.state,
                _ => {
                    return Err(LinkError::StaleBrokerEpoch {
                        id: hb.id,
                        epoch: hb.epoch,
                    })
                }
            }
        };
        self.sessions.borrow_mut().insert(hb.id, Instant::now());
        if state == BrokerState::Fenced && hb.applied >= hb.epoch {
            let change = MetadataChange::UnfenceBroker {
                id: hb.id,
                epoch: hb.epoch,
            };
            if let Some((_, e)) = self.write(change).await?.error {
                tracing::warn!(broker = hb.id, "unfencing refused: {e}");
                return Ok(HeartbeatReply { state });
            }
            tracing::info!(broker = hb.id, epoch = hb.epoch, "broker unfenced");
            return Ok(HeartbeatReply {
                state: BrokerState::Running,
            });
        }
        Ok(HeartbeatReply { state })
    }

    /// Fences every broker whose session expired (only while this node leads).
    async fn expire_sessions(&self) {
        let Some(raft) = self.raft() else { return };
        if !self.leads(&raft) {
            return;
        }
        let now = Instant::now();
        let expired: Vec<(i32, u64)> = {
            let image = self.image.borrow();
            let mut sessions = self.sessions.borrow_mut();
            image
                .brokers
                .values()
                .filter(|b| b.state != BrokerState::Fenced)
                .filter(|b| {
                    let seen = *sessions.entry(b.registration.id).or_insert(now);
                    now.duration_since(seen) > self.session_timeout
                })
                .map(|b| (b.registration.id, b.epoch))
                .collect()
        };
        for (id, epoch) in expired {
            match self.write(MetadataChange::FenceBroker { id, epoch }).await {
                Ok(r) if r.error.is_none() => {
                    tracing::warn!(broker = id, epoch, "session expired: broker fenced")
                }
                Ok(_) => {}
                Err(e) => tracing::warn!(broker = id, "fencing failed: {e}"),
            }
        }
    }
}

impl Duties {
    /// Every `rebalance_interval`, while this node leads: if some partition's preferred
    /// replica runs, is in the ISR and does not lead, commits `ElectPreferredLeaders`.
    async fn rebalance_leaders(&self) {
        let Some(interval) = self.rebalance_interval else {
            return;
        };
        if self.rebalance_checked.get().elapsed() < interval {
            return;
        }
        self.rebalance_checked.set(Instant::now());
        let Some(raft) = self.raft() else { return };
        if !self.leads(&raft) {
            return;
        }
        let imbalanced = crate::cluster::preferred_leader_imbalance(&self.image.borrow());
        if imbalanced == 0 {
            return;
        }
        match self.write(MetadataChange::ElectPreferredLeaders).await {
            Ok(r) if r.error.is_none() => {
                tracing::info!(partitions = imbalanced, "preferred leaders elected")
            }
            Ok(r) => tracing::warn!("preferred-leader election refused: {:?}", r.error),
            Err(e) => tracing::warn!("preferred-leader election failed: {e}"),
        }
    }
}

impl LinkExtension for Duties {
    fn serves(&self, key: ControllerApiKey) -> bool {
        matches!(
            key,
            ControllerApiKey::BrokerHeartbeat | ControllerApiKey::AddLearner
        )
    }

    fn heard_from_leader(&self, node_id: u64) {
        self.leader_contact.set(Some((node_id, Instant::now())));
    }

    fn handle<'a>(
        &'a self,
        key: ControllerApiKey,
        frame: &'a Frame,
    ) -> std::pin::Pin<
        Box<dyn std::future::Future<Output = Result<serde_json::Value, LinkError>> + 'a>,
    > {
        Box::pin(async move {
            let value = if key == ControllerApiKey::AddLearner {
                let req: AddLearner = link::decode(frame)?;
                self.add_learner(req).await?;
                serde_json::Value::Null
            } else {
                let hb: Heartbeat = link::decode(frame)?;
                let reply = self.heartbeat(hb).await?;
                serde_json::to_value(reply).map_err(|e| LinkError::Malformed(e.to_string()))?
            };
            Ok(value)
        })
    }
}

/// A connection to the active controller, opened on demand. Lives on the node's executor.
struct LeaderLink {
    cluster_id: String,
    node_id: u64,
    limits: LinkLimits,
    conn: Option<(String, FrameConn)>,
    correlation_id: u32,
}

impl LeaderLink {
    async fn call<Req: Serialize, Resp: serde::de::DeserializeOwned>(
        &mut self,
        addr: &str,
        key: ControllerApiKey,
        request: &Req,
        timeout: Duration,
    ) -> Result<Result<Resp, LinkError>, String> {
        let work = async {
            let mut conn = match self.conn.take() {
                Some((a, c)) if a == addr => c,
                _ => self.connect(addr).await?,
            };
            self.correlation_id = self.correlation_id.wrapping_add(1);
            let answer = exchange(&mut conn, key, self.correlation_id, request).await?;
            self.conn = Some((addr.to_string(), conn));
            Ok(answer)
        };
        match borges_runtime::time::timeout(timeout, work).await {
            Some(r) => r,
            None => Err(format!("{addr}: {key} timed out")),
        }
    }

    async fn connect(&mut self, addr: &str) -> Result<FrameConn, String> {
        let stream = link::connect(addr, &self.limits).await?;
        let mut conn = FrameConn::new(stream, self.limits.frame_size_bytes_max);
        let hello = Hello {
            cluster_id: self.cluster_id.clone(),
            from_node: Some(self.node_id),
            to_node: None,
        };
        let ok: Result<HelloOk, LinkError> =
            exchange(&mut conn, ControllerApiKey::Hello, 0, &hello).await?;
        ok.map_err(|e| format!("{addr}: {e}"))?;
        Ok(conn)
    }
}

/// A broker's cluster membership. Lives on the Raft node's executor.
pub struct ClusterMember {
    node: RaftNode<ClusterMetadata>,
    config: MemberConfig,
    duties: Rc<Duties>,
    /// Idle connections to the active controller (one per concurrent caller).
    links: RefCell<Vec<LeaderLink>>,
    /// Set once: stops heartbeats and session checks.
    stopped: Cell<bool>,
}

impl ClusterMember {
    /// Starts the Raft node; `on_image` sees every applied image (on this executor).
    pub async fn start(
        config: MemberConfig,
        on_image: Rc<dyn Fn(Arc<MetadataImage>)>,
    ) -> Result<Rc<ClusterMember>, ReplicationError> {
        let duties = Rc::new(Duties {
            node_id: config.node.node_id,
            session_timeout: Duration::from_millis(config.session_timeout_ms),
            raft: RefCell::new(None),
            image: RefCell::new(Arc::new(MetadataImage::default())),
            sessions: RefCell::new(HashMap::new()),
            term: Cell::new(0),
            leader_contact: Cell::new(None),
            rebalance_interval: config
                .leader_rebalance_interval_ms
                .map(|ms| Duration::from_millis(ms.max(1))),
            rebalance_checked: Cell::new(Instant::now()),
        });
        let d = duties.clone();
        let observer: ApplyObserver<ClusterMetadata> = Rc::new(move |state, _| {
            *d.image.borrow_mut() = state.image.clone();
            on_image(state.image.clone());
        });
        let ext: Rc<dyn LinkExtension> = duties.clone();
        let node = RaftNode::start_with(config.node.clone(), Some(observer), Some(ext)).await?;
        *duties.raft.borrow_mut() = Some(node.raft().clone());
        let member = Rc::new(ClusterMember {
            node,
            config,
            duties,
            links: RefCell::new(Vec::new()),
            stopped: Cell::new(false),
        });
        borges_runtime::side::spawn_detached(session_loop(Rc::downgrade(&member)));
        if !member
            .config
            .node
            .voters
            .contains_key(&member.config.node.node_id)
        {
            member.join_as_learner().await?;
        }
        Ok(member)
    }

    /// The Raft node.
    pub fn node(&self) -> &RaftNode<ClusterMetadata> {
        &self.node
    }

    /// The quorum as this node sees it.
    pub fn status(&self) -> QuorumStatus {
        self.node.status()
    }

    /// The latest applied image.
    pub fn image(&self) -> Arc<MetadataImage> {
        self.duties.image.borrow().clone()
    }

    fn take_link(&self) -> LeaderLink {
        self.links.borrow_mut().pop().unwrap_or_else(|| LeaderLink {
            cluster_id: self.config.node.cluster_id.clone(),
            node_id: self.config.node.node_id,
            limits: self.config.node.link.clone(),
            conn: None,
            correlation_id: 0,
        })
    }

    /// A broker-only member: asks the voters (following the leader hint) to add it as a
    /// learner, until one does or `request_timeout_ms` passes.
    async fn join_as_learner(&self) -> Result<(), ReplicationError> {
        let node = &self.config.node;
        let req = AddLearner {
            node_id: node.node_id,
            addr: node
                .advertised
                .clone()
                .unwrap_or_else(|| node.listen.to_string()),
        };
        let timeout = Duration::from_millis(self.config.request_timeout_ms);
        let deadline = Instant::now() + timeout;
        let mut hint: Option<String> = None;
        let mut last = String::from("no voter answered");
        while Instant::now() < deadline {
            let addrs: Vec<String> = hint
                .take()
                .into_iter()
                .chain(node.voters.values().cloned())
                .collect();
            for addr in addrs {
                let mut link = self.take_link();
                let left = Duration::from_millis(node.link.connect_timeout_ms);
                let answer: Result<Result<serde_json::Value, LinkError>, String> = link
                    .call(&addr, ControllerApiKey::AddLearner, &req, left)
                    .await;
                match answer {
                    Ok(Ok(_)) => {
                        tracing::info!(%addr, "added as a learner: following the metadata log");
                        return Ok(());
                    }
                    Ok(Err(LinkError::NotLeader { leader_addr, .. })) => {
                        hint = leader_addr;
                        if hint.is_some() {
                            break;
                        }
                    }
                    Ok(Err(e)) => last = e.to_string(),
                    Err(e) => last = e,
                }
            }
            borges_runtime::side::Sleep::new(Duration::from_millis(50)).await;
        }
        Err(ReplicationError::Raft(format!(
            "a broker-only member could not join as a learner within {timeout:?}: {last}"
        )))
    }

    /// The leader's id and controller-link address, if this node knows one.
    fn leader(&self) -> Option<(u64, String)> {
        let m = self.node.metrics();
        let id = m.current_leader?;
        let addr = m.membership_config.membership().get_node(&id)?.addr.clone();
        Some((id, addr))
    }

    /// Sends `request` to the active controller, following leader changes, until `timeout`
    /// passes.
    async fn to_leader<Req: Serialize, Resp: serde::de::DeserializeOwned>(
        &self,
        key: ControllerApiKey,
        request: &Req,
        timeout: Duration,
    ) -> Result<Resp, LinkError> {
        let deadline = Instant::now() + timeout;
        let mut last = LinkError::NotLeader {
            leader_id: None,
            leader_addr: None,
        };
        while Instant::now() < deadline {
            if let Some((_, addr)) = self.leader() {
                let left = deadline.saturating_duration_since(Instant::now());
                let mut link = self.take_link();
                let answer = link.call::<Req, Resp>(&addr, key, request, left).await;
                if link.conn.is_some() {
                    self.links.borrow_mut().push(link);
                }
                match answer {
                    Ok(Ok(answer)) => return Ok(answer),
                    Ok(Err(e @ LinkError::NotLeader { .. })) | Ok(Err(e @ LinkError::Raft(_))) => {
                        last = e
                    }
                    Ok(Err(e)) => return Err(e),
                    Err(e) => last = LinkError::Raft(e),
                }
            }
            borges_runtime::side::Sleep::new(Duration::from_millis(20)).await;
        }
        Err(last)
    }

    /// Commits `change` through the active controller; answers once it is applied there.
    pub async fn write(&self, change: MetadataChange) -> Result<ChangeReply, LinkError> {
        let timeout = Duration::from_millis(self.config.request_timeout_ms);
        self.to_leader(ControllerApiKey::ClientWrite, &change, timeout)
            .await
    }

    /// Registers this broker (a new incarnation); answers its broker epoch.
    pub async fn register(&self, registration: BrokerRegistration) -> Result<u64, LinkError> {
        let reply = self
            .write(MetadataChange::RegisterBroker(registration))
            .await?;
        match reply.error {
            None => Ok(reply.index),
            Some((_, e)) => Err(LinkError::Raft(e)),
        }
    }

    /// One heartbeat to the active controller, tried until `timeout`.
    pub async fn heartbeat(
        &self,
        hb: &Heartbeat,
        timeout: Duration,
    ) -> Result<HeartbeatReply, LinkError> {
        self.to_leader(ControllerApiKey::BrokerHeartbeat, hb, timeout)
            .await
    }

    /// Stops session checks and the Raft node (a clean stop). Waits up to a second for the
    /// background loops to let go of the member.
    pub async fn shutdown(self: Rc<Self>) {
        self.stopped.set(true);
        self.links.borrow_mut().clear();
        let mut member = self;
        for _ in 0..100 {
            match Rc::try_unwrap(member) {
                Ok(m) => return m.node.shutdown().await,
                Err(still) => member = still,
            }
            borges_runtime::side::Sleep::new(Duration::from_millis(10)).await;
        }
        tracing::warn!("cluster member still in use at shutdown; Raft not stopped cleanly");
    }

    /// Whether [`ClusterMember::shutdown`] started.
    pub fn is_stopped(&self) -> bool {
        self.stopped.get()
    }

    /// How often to heartbeat.
    pub fn heartbeat_interval(&self) -> Duration {
        Duration::from_millis(self.config.heartbeat_interval_ms.max(1))
    }

    /// How often the active controller looks for expired sessions: a fraction of the
    /// heartbeat interval, so a dead broker is fenced within `session_timeout_ms` plus a few
    /// ms rather than plus up to one heartbeat interval (the check reads a map in memory).
    pub fn session_check_interval(&self) -> Duration {
        let ms = self.config.heartbeat_interval_ms / SESSION_CHECKS_PER_HEARTBEAT;
        Duration::from_millis(ms.max(1))
    }
}

/// Session expiry checks per heartbeat interval (every 20 ms with the default 100 ms).
const SESSION_CHECKS_PER_HEARTBEAT: u64 = 5;

async fn session_loop(member: std::rc::Weak<ClusterMember>) {
    loop {
        let Some(period) = member.upgrade().map(|m| m.session_check_interval()) else {
            return;
        };
        borges_runtime::side::Sleep::new(period).await;
        let Some(m) = member.upgrade() else { return };
        if m.stopped.get() {
            return;
        }
        let duties = m.duties.clone();
        drop(m);
        duties.expire_sessions().await;
        duties.rebalance_leaders().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metadata::{BrokerRecord, BrokerRegistration, Uuid};

    fn duties(node_id: u64, brokers: &[i32]) -> Duties {
        let mut image = MetadataImage::default();
        for &id in brokers {
            let registration = BrokerRegistration {
                id,
                incarnation: Uuid::random(),
                host: "127.0.0.1".into(),
                port: 9000,
                cores: Vec::new(),
                controller_addr: String::new(),
            };
            image.brokers.insert(
                id,
                BrokerRecord {
                    registration,
                    epoch: 1,
                    state: BrokerState::Running,
                },
            );
        }
        Duties {
            node_id,
            session_timeout: Duration::from_millis(750),
            raft: RefCell::new(None),
            image: RefCell::new(Arc::new(image)),
            sessions: RefCell::new(HashMap::new()),
            term: Cell::new(0),
            leader_contact: Cell::new(None),
            rebalance_interval: None,
            rebalance_checked: Cell::new(Instant::now()),
        }
    }

    /// A takeover starts the previous leader's session at the last contact with it, so a
    /// dead controller's broker is fenced a session timeout after its death; every other
    /// session starts afresh (a failover never fences a live follower).
    #[test]
    fn a_new_leader_starts_the_previous_leaders_session_at_its_last_contact() {
        let d = duties(2, &[1, 2, 3]);
        d.heard_from_leader(1);
        let contact = d.leader_contact.get().unwrap().1;
        let now = contact + Duration::from_millis(300);
        d.restart_sessions(now);
        let sessions = d.sessions.borrow();
        assert_eq!(sessions.get(&1), Some(&contact));
        assert_eq!(sessions.get(&2), Some(&now));
        assert_eq!(sessions.get(&3), Some(&now));
    }

    /// Without a contact (a first election, or this node never followed anyone), and for
    /// the node's own id, every session is fresh.
    #[test]
    fn without_a_previous_leader_every_session_is_fresh() {
        let d = duties(2, &[1, 2, 3]);
        let now = Instant::now();
        d.restart_sessions(now);
        assert!(d.sessions.borrow().values().all(|&seen| seen == now));
        d.heard_from_leader(2);
        let later = now + Duration::from_millis(10);
        d.restart_sessions(later);
        assert!(d.sessions.borrow().values().all(|&seen| seen == later));
    }
}
