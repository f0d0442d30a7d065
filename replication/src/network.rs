//! openraft's network: one connection per (replication stream or vote) target over the
//! controller link, opened lazily, dropped on any error and opened again on the next call.
//!
//! Errors map onto openraft's: a refused or timed-out connect, or a peer that refuses the
//! Hello (another cluster, another node), is `Unreachable` (openraft backs off before the next
//! try, [`RaftTuning::heartbeat_interval_ms`] x 4 here); a failure mid-call is `Network` (retried
//! on the next heartbeat); a deadline is `Timeout`; the peer Raft's own error is `RemoteError`.

use std::marker::PhantomData;
use std::time::Duration;

use borges_protocol::controller_link::ControllerApiKey;
use openraft::error::{
    InstallSnapshotError, NetworkError, RPCError, RaftError, RemoteError, Timeout, Unreachable,
};
use openraft::network::{Backoff, RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use openraft::RPCTypes;
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::link::{self, FrameConn, Hello, HelloOk, LinkError, LinkLimits};
use crate::types::{Node, NodeId, StateMachine, TypeConfig};

/// Tuning of the Raft node.
#[derive(Debug, Clone)]
pub struct RaftTuning {
    /// Leader heartbeat period (openraft ticks every 1.5 x this).
    pub heartbeat_interval_ms: u64,
    /// Election timeout of the first voter (lowest id); see [`RaftTuning::election_window`].
    pub election_timeout_ms: u64,
    /// How much later each next voter's election window starts.
    pub election_stagger_ms: u64,
    /// Width of each voter's election window.
    pub election_window_ms: u64,
    /// A snapshot is built after this many entries since the last one.
    pub snapshot_after_entries: u64,
    /// Entries kept in the log behind a snapshot (for followers slightly behind).
    pub log_entries_kept_after_snapshot: u64,
    /// Log segment size before a new one starts.
    pub segment_size_bytes_max: u64,
    /// Deadline of one AppendEntries / Vote call.
    pub rpc_timeout_ms: u64,
    /// Deadline of one InstallSnapshot chunk.
    pub install_snapshot_timeout_ms: u64,
    /// Snapshot chunk size.
    pub snapshot_chunk_size_bytes: u64,
}

impl Default for RaftTuning {
    fn default() -> Self {
        RaftTuning {
            heartbeat_interval_ms: 50,
            election_timeout_ms: 150,
            election_stagger_ms: 100,
            election_window_ms: 50,
            snapshot_after_entries: 10_000,
            log_entries_kept_after_snapshot: 1_000,
            segment_size_bytes_max: crate::log_store::SEGMENT_SIZE_BYTES_MAX_DEFAULT,
            rpc_timeout_ms: 1_000,
            install_snapshot_timeout_ms: 5_000,
            snapshot_chunk_size_bytes: 1 << 20,
        }
    }
}

impl RaftTuning {
    /// The election window `[min, max)` of the voter with rank `rank` (its position among the
    /// voters by id). openraft 0.9 draws a node's election timeout once, at start; windows that
    /// overlap by less than a tick let two nodes time out together again and again and split
    /// the vote every round (seen in the runtime A/B: a 3-node cluster without a leader for over
    /// 9 s). Staggered windows make the lowest-ranked live voter ask first.
    pub fn election_window(&self, rank: u64) -> (u64, u64) {
        let min = self.election_timeout_ms + rank * self.election_stagger_ms;
        (min, min + self.election_window_ms.max(1))
    }

    /// Backoff after `Unreachable`.
    pub fn backoff(&self) -> Duration {
        Duration::from_millis(self.heartbeat_interval_ms * 4)
    }
}

/// The network factory of one node.
pub struct Network<S> {
    cluster_id: String,
    node_id: NodeId,
    limits: LinkLimits,
    backoff: Duration,
    _s: PhantomData<fn() -> S>,
}

impl<S> Network<S> {
    /// The factory of node `node_id` in cluster `cluster_id`.
    pub fn new(
        cluster_id: String,
        node_id: NodeId,
        limits: LinkLimits,
        tuning: &RaftTuning,
    ) -> Self {
        Network {
            cluster_id,
            node_id,
            limits,
            backoff: tuning.backoff(),
            _s: PhantomData,
        }
    }
}

impl<S: StateMachine> RaftNetworkFactory<TypeConfig<S>> for Network<S> {
    type Network = Peer<S>;

    async fn new_client(&mut self, target: NodeId, node: &Node) -> Peer<S> {
        Peer {
            cluster_id: self.cluster_id.clone(),
            from: self.node_id,
            target,
            addr: node.addr.clone(),
            limits: self.limits.clone(),
            backoff: self.backoff,
            conn: None,
            correlation_id: 0,
            _s: PhantomData,
        }
    }
}

/// A call's failure, before it is mapped onto openraft's error.
enum CallError {
    Unreachable(String),
    Network(String),
    Timeout,
}

/// The connection to one target. Lives on the Raft node's executor.
pub struct Peer<S> {
    cluster_id: String,
    from: NodeId,
    target: NodeId,
    addr: String,
    limits: LinkLimits,
    backoff: Duration,
    conn: Option<FrameConn>,
    correlation_id: u32,
    _s: PhantomData<fn() -> S>,
}

impl<S: StateMachine> Peer<S> {
    async fn connect(&mut self) -> Result<FrameConn, CallError> {
        let stream = link::connect(&self.addr, &self.limits)
            .await
            .map_err(CallError::Unreachable)?;
        let mut conn = FrameConn::new(stream, self.limits.frame_size_bytes_max);
        let hello = Hello {
            cluster_id: self.cluster_id.clone(),
            from_node: Some(self.from),
            to_node: Some(self.target),
        };
        let answer: Result<HelloOk, LinkError> =
            exchange(&mut conn, ControllerApiKey::Hello, 0, &hello)
                .await
                .map_err(CallError::Unreachable)?;
        if let Err(e) = answer {
            tracing::warn!(
                target_node = self.target, addr = %self.addr, error = %e,
                "controller link refused"
            );
            return Err(CallError::Unreachable(e.to_string()));
        }
        Ok(conn)
    }

    async fn call<Req: Serialize, Resp: DeserializeOwned>(
        &mut self,
        key: ControllerApiKey,
        request: &Req,
        deadline: Duration,
    ) -> Result<Resp, CallError> {
        let work = async {
            let mut conn = match self.conn.take() {
                Some(c) => c,
                None => self.connect().await?,
            };
            self.correlation_id = self.correlation_id.wrapping_add(1);
            let answer: Result<Resp, LinkError> =
                exchange(&mut conn, key, self.correlation_id, request)
                    .await
                    .map_err(CallError::Network)?;
            self.conn = Some(conn);
            answer.map_err(|e| CallError::Network(e.to_string()))
        };
        match borges_runtime::time::timeout(deadline, work).await {
            Some(r) => r,
            None => {
                self.conn = None;
                Err(CallError::Timeout)
            }
        }
    }

    fn map_error<E: std::error::Error>(
        &self,
        e: CallError,
        action: RPCTypes,
        deadline: Duration,
    ) -> RPCError<NodeId, Node, E> {
        match e {
            CallError::Unreachable(m) => {
                RPCError::Unreachable(Unreachable::new(&std::io::Error::other(m)))
            }
            CallError::Network(m) => {
                RPCError::Network(NetworkError::new(&std::io::Error::other(m)))
            }
            CallError::Timeout => RPCError::Timeout(Timeout {
                action,
                id: self.from,
                target: self.target,
                timeout: deadline,
            }),
        }
    }

    async fn rpc<Req: Serialize, Resp: DeserializeOwned, E>(
        &mut self,
        key: ControllerApiKey,
        action: RPCTypes,
        request: &Req,
        deadline: Duration,
    ) -> Result<Resp, RPCError<NodeId, Node, RaftError<NodeId, E>>>
    where
        E: std::error::Error + DeserializeOwned,
        Result<Resp, RaftError<NodeId, E>>: DeserializeOwned,
    {
        match self
            .call::<Req, Result<Resp, RaftError<NodeId, E>>>(key, request, deadline)
            .await
        {
            Ok(Ok(resp)) => Ok(resp),
            Ok(Err(remote)) => Err(RPCError::RemoteError(RemoteError::new(self.target, remote))),
            Err(e) => Err(self.map_error(e, action, deadline)),
        }
    }
}

/// Sends one request on `conn` and reads its response.
pub(crate) async fn exchange<Req: Serialize, Resp: DeserializeOwned>(
    conn: &mut FrameConn,
    key: ControllerApiKey,
    correlation_id: u32,
    request: &Req,
) -> Result<Result<Resp, LinkError>, String> {
    conn.send(key, 0, correlation_id, request)
        .await
        .map_err(|e| e.to_string())?;
    let frame = conn
        .read_frame()
        .await
        .map_err(|e| e.to_string())?
        .ok_or_else(|| "connection closed".to_string())?;
    if frame.header.correlation_id != correlation_id || !frame.header.is_response() {
        return Err("response out of order".into());
    }
    link::decode_response(&frame).map_err(|e| e.to_string())
}

impl<S: StateMachine> RaftNetwork<TypeConfig<S>> for Peer<S> {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig<S>>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<NodeId>, RPCError<NodeId, Node, RaftError<NodeId>>> {
        let key = ControllerApiKey::RaftAppendEntries;
        self.rpc(key, RPCTypes::AppendEntries, &rpc, option.hard_ttl())
            .await
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig<S>>,
        option: RPCOption,
    ) -> Result<
        InstallSnapshotResponse<NodeId>,
        RPCError<NodeId, Node, RaftError<NodeId, InstallSnapshotError>>,
    > {
        let key = ControllerApiKey::RaftInstallSnapshot;
        self.rpc(key, RPCTypes::InstallSnapshot, &rpc, option.hard_ttl())
            .await
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<NodeId>,
        option: RPCOption,
    ) -> Result<VoteResponse<NodeId>, RPCError<NodeId, Node, RaftError<NodeId>>> {
        self.rpc(
            ControllerApiKey::RaftVote,
            RPCTypes::Vote,
            &rpc,
            option.hard_ttl(),
        )
        .await
    }

    fn backoff(&self) -> Backoff {
        Backoff::new(std::iter::repeat(self.backoff))
    }
}
