//! One member of the controller quorum: the openraft node with its durable stores, its
//! network, and the controller listener that serves the link.
//!
//! Formation follows KRaft's static voter set: every node is started with the same
//! `voters` map (node id → controller-link address). A voter whose log is empty initializes
//! the cluster with exactly that membership (openraft: initializing several nodes with the same
//! membership is safe), so no node is special and any majority forms the quorum. A node that
//! is not among the voters is a learner: it follows the log once the leader adds it
//! ([`RaftNode::add_learner`]).
//!
//! A `RaftNode` lives on the executor that started it (in a broker, the side executor for the
//! controller); everything it owns is touched only there.

use std::cell::Cell;
use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::rc::Rc;
use std::sync::Arc;

use borges_protocol::controller_link::ControllerApiKey;
use borges_protocol::frame::Frame;
use borges_runtime::net::TcpListener;
use borges_runtime::sync::Notify;
use futures_lite::future;
use openraft::error::{ClientWriteError, RaftError};
use openraft::{ChangeMembers, SnapshotPolicy};

use crate::disk::Disk;
use crate::error::ReplicationError;
use crate::link::{
    self, AppliedState, FrameConn, Hello, HelloOk, LinkError, LinkLimits, QuorumStatus,
};
use crate::log_store::{LogStore, MetaDir};
use crate::network::{Network, RaftTuning};
use crate::sm_store::{ApplyObserver, StateMachineStore};
use crate::types::{Node, NodeId, Raft, RaftMetrics, StateMachine, TypeConfig};

/// How to run one node.
#[derive(Debug, Clone)]
pub struct NodeConfig {
    /// The cluster every member shares (`borges storage format --cluster-id`).
    pub cluster_id: String,
    /// This node.
    pub node_id: NodeId,
    /// The data directory (the Raft files go to `<data_dir>/meta/`).
    pub data_dir: PathBuf,
    /// The controller listener's address.
    pub listen: SocketAddr,
    /// Address other members use to reach this node (defaults to `listen`).
    pub advertised: Option<String>,
    /// The initial voters: node id → controller-link address.
    pub voters: BTreeMap<NodeId, String>,
    /// Timers, snapshots, segments.
    pub tuning: RaftTuning,
    /// Link limits.
    pub link: LinkLimits,
    /// The node's file IO.
    pub disk: Disk,
}

impl NodeConfig {
    /// Checks what cannot work.
    pub fn validate(&self) -> Result<(), ReplicationError> {
        if self.cluster_id.is_empty() {
            return Err(ReplicationError::Config("cluster id is empty".into()));
        }
        if self.voters.is_empty() {
            return Err(ReplicationError::Config("no controller voters".into()));
        }
        let t = &self.tuning;
        if t.election_timeout_ms <= t.heartbeat_interval_ms * 2 {
            return Err(ReplicationError::Config(format!(
                "election timeout {} ms must exceed twice the heartbeat interval {} ms",
                t.election_timeout_ms, t.heartbeat_interval_ms
            )));
        }
        Ok(())
    }

    fn advertised(&self) -> String {
        self.advertised
            .clone()
            .unwrap_or_else(|| self.listen.to_string())
    }

    fn is_voter(&self) -> bool {
        self.voters.contains_key(&self.node_id)
    }

    fn openraft_config(&self) -> Result<Arc<openraft::Config>, ReplicationError> {
        let t = &self.tuning;
        let rank = self.voters.keys().position(|&id| id == self.node_id);
        let (min, max) = t.election_window(rank.unwrap_or(self.voters.len()) as u64);
        let config = openraft::Config {
            cluster_name: self.cluster_id.clone(),
            heartbeat_interval: t.heartbeat_interval_ms,
            election_timeout_min: min,
            election_timeout_max: max,
            install_snapshot_timeout: t.install_snapshot_timeout_ms,
            snapshot_policy: SnapshotPolicy::LogsSinceLast(t.snapshot_after_entries.max(1)),
            max_in_snapshot_log_to_keep: t.log_entries_kept_after_snapshot,
            snapshot_max_chunk_size: t.snapshot_chunk_size_bytes,
            ..Default::default()
        };
        config
            .validate()
            .map(Arc::new)
            .map_err(|e| ReplicationError::Config(e.to_string()))
    }
}

/// Serves controller-link keys the Raft node itself does not know (the broker lifecycle's
/// heartbeats): the payload in, the JSON answer or a [`LinkError`] out. Lives on the node's
/// executor.
pub trait LinkExtension {
    /// Whether this extension serves `key`.
    fn serves(&self, key: ControllerApiKey) -> bool;
    /// Answers one request.
    fn handle<'a>(
        &'a self,
        key: ControllerApiKey,
        frame: &'a Frame,
    ) -> std::pin::Pin<
        Box<dyn std::future::Future<Output = Result<serde_json::Value, LinkError>> + 'a>,
    >;
    /// Called with the sender of every AppendEntries this node receives (the leader, or a
    /// node that still believes it leads): evidence that its process ran just now.
    fn heard_from_leader(&self, _node_id: u64) {}
}

struct Shared<S: StateMachine> {
    config: NodeConfig,
    extension: Option<Rc<dyn LinkExtension>>,
    raft: Raft<S>,
    sm: StateMachineStore<S>,
    /// Connections being served.
    connections: Cell<usize>,
    /// Bumped once to stop the listener and every connection.
    stop: Rc<Notify>,
}

/// A running node. Lives on the executor that started it.
pub struct RaftNode<S: StateMachine> {
    shared: Rc<Shared<S>>,
    accept: borges_runtime::side::JoinHandle<()>,
}

impl<S: StateMachine> RaftNode<S> {
    /// Opens the node's storage (refusing a directory of another cluster or node), binds the
    /// controller listener, starts Raft and, for a voter with an empty log, initializes the
    /// cluster with the configured voters. `observer` sees every state change.
    pub async fn start(
        config: NodeConfig,
        observer: Option<ApplyObserver<S>>,
    ) -> Result<RaftNode<S>, ReplicationError> {
        Self::start_with(config, observer, None).await
    }

    /// [`RaftNode::start`], with `extension` serving the controller-link keys it names.
    pub async fn start_with(
        config: NodeConfig,
        observer: Option<ApplyObserver<S>>,
        extension: Option<Rc<dyn LinkExtension>>,
    ) -> Result<RaftNode<S>, ReplicationError> {
        config.validate()?;
        let dir = MetaDir::new(&config.data_dir);
        let log = LogStore::<S>::open(
            dir.clone(),
            &config.cluster_id,
            config.node_id,
            config.disk.clone(),
            config.tuning.segment_size_bytes_max,
        )
        .await?;
        let sm = StateMachineStore::<S>::open(dir, config.disk.clone(), observer).await?;
        let listener = TcpListener::bind_exclusive(config.listen).map_err(|e| {
            ReplicationError::Config(format!("controller listener {}: {e}", config.listen))
        })?;
        let network = Network::new(
            config.cluster_id.clone(),
            config.node_id,
            config.link.clone(),
            &config.tuning,
        );
        let raft = openraft::Raft::new(
            config.node_id,
            config.openraft_config()?,
            network,
            log,
            sm.clone(),
        )
        .await
        .map_err(|e| ReplicationError::Raft(e.to_string()))?;
        let shared = Rc::new(Shared {
            config,
            extension,
            raft,
            sm,
            connections: Cell::new(0),
            stop: Notify::new(),
        });
        let stop_generation = shared.stop.generation();
        let accept = borges_runtime::side::spawn_detached(accept_loop(
            shared.clone(),
            listener,
            stop_generation,
        ));
        let node = RaftNode { shared, accept };
        node.initialize_if_new().await?;
        Ok(node)
    }

    async fn initialize_if_new(&self) -> Result<(), ReplicationError> {
        let config = &self.shared.config;
        if !config.is_voter() {
            return Ok(());
        }
        let raft = &self.shared.raft;
        if raft
            .is_initialized()
            .await
            .map_err(|e| ReplicationError::Raft(e.to_string()))?
        {
            return Ok(());
        }
        let members: BTreeMap<NodeId, Node> = config
            .voters
            .iter()
            .map(|(&id, addr)| {
                let addr = if id == config.node_id {
                    config.advertised()
                } else {
                    addr.clone()
                };
                (id, Node { addr })
            })
            .collect();
        match raft.initialize(members).await {
            Ok(()) => Ok(()),
            // Another voter's membership reached this node first: same membership, fine.
            Err(RaftError::APIError(openraft::error::InitializeError::NotAllowed(_))) => Ok(()),
            Err(e) => Err(ReplicationError::Raft(e.to_string())),
        }
    }

    /// The node id.
    pub fn node_id(&self) -> NodeId {
        self.shared.config.node_id
    }

    /// The openraft handle.
    pub fn raft(&self) -> &Raft<S> {
        &self.shared.raft
    }

    /// The latest metrics.
    pub fn metrics(&self) -> RaftMetrics {
        self.shared.raft.metrics().borrow().clone()
    }

    /// The quorum as this node sees it.
    pub fn status(&self) -> QuorumStatus {
        status(&self.shared)
    }

    /// Runs `f` on the applied state.
    pub fn with_state<T>(&self, f: impl FnOnce(&S, Option<crate::types::LogId>) -> T) -> T {
        self.shared.sm.with_state(f)
    }

    /// Replicates `command` and answers once it is applied; only the leader takes writes.
    pub async fn write(&self, command: S::Command) -> Result<S::Reply, LinkError> {
        write(&self.shared, command).await
    }

    /// On the leader: adds `id` (reachable at `addr`) as a learner that follows the log.
    pub async fn add_learner(&self, id: NodeId, addr: String) -> Result<(), LinkError> {
        let result = self.shared.raft.add_learner(id, Node { addr }, false).await;
        result.map(drop).map_err(|e| write_error(&self.shared, e))
    }

    /// On the leader: removes learners (they stop receiving the log).
    pub async fn remove_learners(&self, ids: BTreeSet<NodeId>) -> Result<(), LinkError> {
        let change = ChangeMembers::RemoveNodes(ids);
        let result = self.shared.raft.change_membership(change, false).await;
        result.map(drop).map_err(|e| write_error(&self.shared, e))
    }

    /// Stops Raft, the listener and every connection (a clean stop).
    pub async fn shutdown(self) {
        let shared = self.shared.clone();
        self.close_listener().await;
        if let Err(e) = shared.raft.shutdown().await {
            tracing::warn!(error = %e, "raft shutdown");
        }
    }

    /// Stops abruptly, as a killed process would: the listener and every served connection
    /// close, Raft is not told (its tasks stay parked until the executor goes away). For tests
    /// that crash a node inside a process that goes on.
    pub async fn halt(self) {
        self.close_listener().await;
    }

    async fn close_listener(self) {
        let RaftNode { shared, accept, .. } = self;
        shared.stop.notify_all();
        // The listener and the connections end at their next poll, woken by the stop.
        let waited = future::or(async { accept.await.is_some() }, async {
            borges_runtime::time::sleep(std::time::Duration::from_secs(1)).await;
            false
        });
        if !waited.await {
            tracing::warn!("controller listener did not stop within 1 s");
        }
        while shared.connections.get() > 0 {
            borges_runtime::time::sleep(std::time::Duration::from_millis(1)).await;
        }
    }
}

fn status<S: StateMachine>(shared: &Shared<S>) -> QuorumStatus {
    let m = shared.raft.metrics().borrow().clone();
    let membership = m.membership_config.membership();
    let voters: Vec<NodeId> = membership.voter_ids().collect();
    let learners: Vec<NodeId> = membership.learner_ids().collect();
    let addresses = membership
        .nodes()
        .map(|(id, n)| (*id, n.addr.clone()))
        .collect();
    let matched = m
        .replication
        .as_ref()
        .map(|r| r.iter().map(|(id, l)| (*id, l.map(|l| l.index))).collect());
    QuorumStatus {
        cluster_id: shared.config.cluster_id.clone(),
        node_id: shared.config.node_id,
        state: format!("{:?}", m.state),
        leader_id: m.current_leader,
        term: m.current_term,
        last_log_index: m.last_log_index,
        last_applied: m.last_applied.map(|l| l.index),
        snapshot_index: m.snapshot.map(|l| l.index),
        purged_index: m.purged.map(|l| l.index),
        voters,
        learners,
        addresses,
        matched,
        millis_since_quorum_ack: m.millis_since_quorum_ack,
    }
}

fn not_leader<S: StateMachine>(shared: &Shared<S>, leader_id: Option<NodeId>) -> LinkError {
    let m = shared.raft.metrics().borrow().clone();
    let leader_id = leader_id.or(m.current_leader);
    let leader_addr = leader_id.and_then(|id| {
        m.membership_config
            .membership()
            .get_node(&id)
            .map(|n| n.addr.clone())
    });
    LinkError::NotLeader {
        leader_id,
        leader_addr,
    }
}

fn write_error<S: StateMachine>(
    shared: &Shared<S>,
    e: RaftError<NodeId, ClientWriteError<NodeId, Node>>,
) -> LinkError {
    match e {
        RaftError::APIError(ClientWriteError::ForwardToLeader(f)) => {
            not_leader(shared, f.leader_id)
        }
        other => LinkError::Raft(other.to_string()),
    }
}

async fn write<S: StateMachine>(
    shared: &Shared<S>,
    command: S::Command,
) -> Result<S::Reply, LinkError> {
    match shared.raft.client_write(command).await {
        Ok(resp) => Ok(resp.data),
        Err(e) => Err(write_error(shared, e)),
    }
}

async fn accept_loop<S: StateMachine>(shared: Rc<Shared<S>>, listener: TcpListener, stop: u64) {
    loop {
        let accepted = future::or(async { Some(listener.accept().await) }, async {
            shared.stop.changed_since(stop).await;
            None
        })
        .await;
        let stream = match accepted {
            None => return,
            Some(Ok(s)) => s,
            Some(Err(e)) => {
                tracing::warn!(error = %e, "controller listener accept");
                borges_runtime::time::sleep(std::time::Duration::from_millis(10)).await;
                continue;
            }
        };
        if shared.connections.get() >= shared.config.link.connections_max {
            tracing::warn!(
                connections_max = shared.config.link.connections_max,
                "controller listener: too many connections, closing a new one"
            );
            drop(stream);
            continue;
        }
        shared.connections.set(shared.connections.get() + 1);
        let s = shared.clone();
        borges_runtime::side::spawn_detached(async move {
            let served = future::or(async { Some(secure_and_serve(&s, stream).await) }, async {
                s.stop.changed_since(stop).await;
                None
            });
            if let Some(Err(e)) = served.await {
                tracing::debug!(error = %e, "controller-link connection ended");
            }
            s.connections.set(s.connections.get() - 1);
        });
    }
}

/// Runs the TLS handshake when the link has TLS (a peer that does not speak it is closed),
/// then serves the connection.
async fn secure_and_serve<S: StateMachine>(
    shared: &Shared<S>,
    stream: borges_runtime::net::TcpStream,
) -> Result<(), ReplicationError> {
    let link = &shared.config.link;
    let stream = match &link.tls {
        None => stream,
        Some(tls) => {
            let timeout = std::time::Duration::from_millis(link.connect_timeout_ms);
            match borges_runtime::time::timeout(timeout, stream.accept_tls(tls.server())).await {
                Some(Ok(borges_runtime::net::Accepted::Tls(s))) => s,
                Some(Ok(borges_runtime::net::Accepted::Plaintext { .. })) => {
                    return Err(ReplicationError::Link(
                        "plaintext on the TLS controller link: closed".into(),
                    ))
                }
                Some(Err(e)) => return Err(ReplicationError::Link(e.to_string())),
                None => {
                    return Err(ReplicationError::Link(
                        "TLS handshake on the controller link timed out".into(),
                    ))
                }
            }
        }
    };
    serve(shared, FrameConn::new(stream, link.frame_size_bytes_max)).await
}

/// Serves one connection: Hello first, then requests one at a time.
async fn serve<S: StateMachine>(
    shared: &Shared<S>,
    mut conn: FrameConn,
) -> Result<(), ReplicationError> {
    let link_err = |e: std::io::Error| ReplicationError::Link(e.to_string());
    let Some(first) = conn.read_frame().await.map_err(link_err)? else {
        return Ok(());
    };
    let corr = first.header.correlation_id;
    let mut read_only = false;
    let hello = match ControllerApiKey::from_u16(first.header.api_key) {
        Some(ControllerApiKey::Hello) => link::decode::<Hello>(&first).and_then(|h| {
            // A tool that does not know the cluster id may only read.
            read_only = h.cluster_id.is_empty() && h.from_node.is_none();
            check_hello(shared, h)
        }),
        _ => Err(LinkError::NoHello),
    };
    let refused = hello.is_err();
    conn.respond(ControllerApiKey::Hello, corr, &hello).await?;
    if refused {
        return Ok(());
    }
    while let Some(frame) = conn.read_frame().await.map_err(link_err)? {
        let key = ControllerApiKey::from_u16(frame.header.api_key);
        let reads = matches!(
            key,
            Some(ControllerApiKey::DescribeQuorum | ControllerApiKey::ReadState)
        );
        if read_only && !reads {
            let corr = frame.header.correlation_id;
            let e: Result<(), LinkError> = Err(LinkError::ReadOnly);
            conn.respond(key.unwrap_or(ControllerApiKey::Hello), corr, &e)
                .await?;
            continue;
        }
        dispatch(shared, &mut conn, frame).await?;
    }
    Ok(())
}

fn check_hello<S: StateMachine>(shared: &Shared<S>, hello: Hello) -> Result<HelloOk, LinkError> {
    let node_id = shared.config.node_id;
    let tool = hello.cluster_id.is_empty() && hello.from_node.is_none();
    if hello.cluster_id != shared.config.cluster_id && !tool {
        tracing::warn!(
            theirs = %hello.cluster_id, from_node = ?hello.from_node,
            "controller link: refusing a node of another cluster"
        );
        return Err(LinkError::ClusterIdMismatch {
            node_id,
            ours: shared.config.cluster_id.clone(),
            theirs: hello.cluster_id,
        });
    }
    if let Some(asked) = hello.to_node.filter(|&n| n != node_id) {
        return Err(LinkError::WrongNode {
            ours: node_id,
            asked,
        });
    }
    Ok(HelloOk { node_id })
}

async fn dispatch<S: StateMachine>(
    shared: &Shared<S>,
    conn: &mut FrameConn,
    frame: Frame,
) -> Result<(), ReplicationError> {
    let corr = frame.header.correlation_id;
    let Some(key) = ControllerApiKey::from_u16(frame.header.api_key) else {
        let e: Result<(), LinkError> = Err(LinkError::Unsupported(frame.header.api_key));
        return conn.respond(ControllerApiKey::Hello, corr, &e).await;
    };
    if let Some(ext) = shared.extension.as_ref().filter(|e| e.serves(key)) {
        let answer = ext.handle(key, &frame).await;
        return conn.respond(key, corr, &answer).await;
    }
    let raft = &shared.raft;
    match key {
        ControllerApiKey::RaftVote => match link::decode(&frame) {
            Ok(req) => conn.respond(key, corr, &Ok(raft.vote(req).await)).await,
            Err(e) => conn.respond::<()>(key, corr, &Err(e)).await,
        },
        ControllerApiKey::RaftAppendEntries => match link::decode(&frame) {
            Ok(req) => {
                let req: openraft::raft::AppendEntriesRequest<TypeConfig<S>> = req;
                let from = req.vote.leader_id().voted_for();
                if let (Some(ext), Some(from)) = (shared.extension.as_ref(), from) {
                    ext.heard_from_leader(from);
                }
                conn.respond(key, corr, &Ok(raft.append_entries(req).await))
                    .await
            }
            Err(e) => conn.respond::<()>(key, corr, &Err(e)).await,
        },
        ControllerApiKey::RaftInstallSnapshot => match link::decode(&frame) {
            Ok(req) => {
                conn.respond(key, corr, &Ok(raft.install_snapshot(req).await))
                    .await
            }
            Err(e) => conn.respond::<()>(key, corr, &Err(e)).await,
        },
        ControllerApiKey::ClientWrite => {
            let answer = match link::decode::<S::Command>(&frame) {
                Ok(command) => write(shared, command).await,
                Err(e) => Err(e),
            };
            conn.respond(key, corr, &answer).await
        }
        ControllerApiKey::DescribeQuorum => conn.respond(key, corr, &Ok(status(shared))).await,
        ControllerApiKey::ReadState => {
            let answer = shared.sm.with_state(|state, last| {
                state
                    .encode()
                    .map(|bytes| AppliedState {
                        last_applied: last,
                        state: bytes,
                    })
                    .map_err(LinkError::Raft)
            });
            conn.respond(key, corr, &answer).await
        }
        ControllerApiKey::Hello => {
            let e: Result<(), LinkError> = Err(LinkError::Malformed("second Hello".into()));
            conn.respond(key, corr, &e).await
        }
        ControllerApiKey::BrokerHeartbeat | ControllerApiKey::AddLearner => {
            let e: Result<(), LinkError> = Err(LinkError::Unsupported(key as u16));
            conn.respond(key, corr, &e).await
        }
    }
}
