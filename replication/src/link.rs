//! The controller link: framed requests between controller listeners.
//!
//! Frames are the protocol crate's 24-byte [`FrameHeader`] with a [`ControllerApiKey`], an empty
//! flatbuffers message and a JSON payload (see `borges_protocol::controller_link`). Every
//! connection starts with [`Hello`]: the receiver checks the cluster id (and the node id the
//! caller meant to reach) before it answers anything else, so a node of another cluster, or one
//! pointed at the wrong address, is refused at once with a [`LinkError`] saying why. After that
//! a connection carries one request at a time, answered in order.
//!
//! [`FrameConn`] does this over the runtime's TCP streams (on the Raft node's executor);
//! [`LinkClient`] is a small blocking client over `std::net` for tools and tests.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, ToSocketAddrs};
use std::time::Duration;

use borges_protocol::controller_link::ControllerApiKey;
use borges_protocol::frame::{Frame, FrameDecoder, FrameHeader, FLAG_ERROR, FLAG_RESPONSE};
use borges_runtime::net::TcpStream;
use bytes::BytesMut;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::error::ReplicationError;
use crate::types::LogId;

/// Limits of the controller link.
#[derive(Debug, Clone)]
pub struct LinkLimits {
    /// Largest frame sent or accepted (a snapshot chunk must fit).
    pub frame_size_bytes_max: u32,
    /// Connections a controller listener serves at once; more are closed at accept.
    pub connections_max: usize,
    /// How long a caller waits to connect (and, with TLS, for the handshake).
    pub connect_timeout_ms: u64,
    /// TLS on every link connection, both ways (the broker's `[tls]`); none: plaintext.
    pub tls: Option<std::sync::Arc<borges_runtime::tls::TlsContext>>,
}

impl Default for LinkLimits {
    fn default() -> Self {
        LinkLimits {
            frame_size_bytes_max: 16 << 20,
            connections_max: 256,
            connect_timeout_ms: 1000,
            tls: None,
        }
    }
}

/// Connects to a link peer at `addr` (`host:port`) within `limits.connect_timeout_ms`, with
/// the TLS handshake when the link has TLS (the peer's certificate must name `host`).
pub async fn connect(addr: &str, limits: &LinkLimits) -> Result<TcpStream, String> {
    let sock = resolve(addr).map_err(|e| format!("{addr}: {e}"))?;
    let timeout = Duration::from_millis(limits.connect_timeout_ms);
    let mut stream = match borges_runtime::time::timeout(timeout, TcpStream::connect(sock)).await {
        Some(Ok(s)) => s,
        Some(Err(e)) => return Err(format!("{addr}: {e}")),
        None => return Err(format!("{addr}: connect timed out")),
    };
    let Some(tls) = &limits.tls else {
        return Ok(stream);
    };
    let config = tls
        .client()
        .ok_or_else(|| format!("{addr}: TLS without a CA to verify the peer (tls.ca_file)"))?;
    let host = addr.rsplit_once(':').map_or(addr, |(h, _)| h);
    let name = borges_runtime::tls::server_name(host).map_err(|e| format!("{addr}: {e}"))?;
    match borges_runtime::time::timeout(timeout, stream.connect_tls(config, name)).await {
        Some(Ok(())) => Ok(stream),
        Some(Err(e)) => Err(format!("{addr}: {e}")),
        None => Err(format!("{addr}: TLS handshake timed out")),
    }
}

/// First request of every connection.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Hello {
    /// The caller's cluster id; must equal the receiver's.
    pub cluster_id: String,
    /// The calling node, if it is one.
    pub from_node: Option<u64>,
    /// The node the caller meant to reach, if it knows.
    pub to_node: Option<u64>,
}

/// Answer to [`Hello`].
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct HelloOk {
    /// The receiving node.
    pub node_id: u64,
}

/// Why a controller-link request was refused (the payload of a `FLAG_ERROR` response).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, thiserror::Error)]
#[non_exhaustive]
pub enum LinkError {
    /// The two ends belong to different clusters.
    #[error(
        "cluster id mismatch: node {node_id} belongs to cluster {ours}, the caller to {theirs}"
    )]
    ClusterIdMismatch {
        /// The receiving node.
        node_id: u64,
        /// The receiver's cluster.
        ours: String,
        /// The caller's cluster.
        theirs: String,
    },
    /// The caller meant another node.
    #[error("this is node {ours}, not node {asked}")]
    WrongNode {
        /// The receiving node.
        ours: u64,
        /// The node the caller asked for.
        asked: u64,
    },
    /// The first request was not a Hello.
    #[error("the first request on a controller-link connection must be Hello")]
    NoHello,
    /// A key this build does not serve.
    #[error("unsupported controller-link api key {0}")]
    Unsupported(u16),
    /// A request that does not decode.
    #[error("malformed request: {0}")]
    Malformed(String),
    /// Only the leader takes writes.
    #[error("not the leader (leader: {leader_id:?} at {leader_addr:?})")]
    NotLeader {
        /// The current leader, if known.
        leader_id: Option<u64>,
        /// Its controller-link address.
        leader_addr: Option<String>,
    },
    /// The Raft node failed the request.
    #[error("raft: {0}")]
    Raft(String),
    /// A connection that did not name the cluster may only describe it.
    #[error("this connection did not give the cluster id: it may only describe the quorum")]
    ReadOnly,
    /// The broker's registration is not current (it must register again).
    #[error("broker {id}: broker epoch {epoch} is not current")]
    StaleBrokerEpoch {
        /// Broker id.
        id: i32,
        /// The epoch it sent.
        epoch: u64,
    },
}

/// The quorum as one node sees it (the answer to `DescribeQuorum`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QuorumStatus {
    /// Cluster id.
    pub cluster_id: String,
    /// The answering node.
    pub node_id: u64,
    /// Its Raft state: Leader, Follower, Candidate, Learner, Shutdown.
    pub state: String,
    /// The leader it knows of.
    pub leader_id: Option<u64>,
    /// Its current term (Kafka's LeaderEpoch).
    pub term: u64,
    /// Index of its last log entry.
    pub last_log_index: Option<u64>,
    /// Index of its last applied entry (committed entries are applied in order).
    pub last_applied: Option<u64>,
    /// Index of its latest snapshot.
    pub snapshot_index: Option<u64>,
    /// Its log start: entries up to here are purged.
    pub purged_index: Option<u64>,
    /// Voters of the effective membership.
    pub voters: Vec<u64>,
    /// Members that follow the log without voting.
    pub learners: Vec<u64>,
    /// Every member's controller-link address.
    pub addresses: BTreeMap<u64, String>,
    /// On the leader: the last log index each member has matched.
    pub matched: Option<BTreeMap<u64, Option<u64>>>,
    /// On the leader: milliseconds since a quorum last acknowledged it.
    pub millis_since_quorum_ack: Option<u64>,
}

/// One node's applied state (the answer to `ReadState`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AppliedState {
    /// Last applied log position.
    pub last_applied: Option<LogId>,
    /// The state machine's encoding (`StateMachine::encode`).
    pub state: Vec<u8>,
}

/// Encodes a request or response frame with a JSON payload.
pub fn encode<T: Serialize>(
    key: ControllerApiKey,
    flags: u16,
    correlation_id: u32,
    body: &T,
) -> Result<Vec<u8>, ReplicationError> {
    let payload = serde_json::to_vec(body).map_err(|e| ReplicationError::Link(e.to_string()))?;
    let header = FrameHeader::new(key as u16, 0, flags, correlation_id, 0, payload.len())
        .ok_or_else(|| ReplicationError::Link("frame too large".into()))?;
    let mut out = Vec::with_capacity(header.frame_size_bytes as usize);
    out.extend_from_slice(&header.to_bytes());
    out.extend_from_slice(&payload);
    Ok(out)
}

/// Decodes a frame's JSON payload.
pub fn decode<T: DeserializeOwned>(frame: &Frame) -> Result<T, LinkError> {
    serde_json::from_slice(&frame.payload).map_err(|e| LinkError::Malformed(e.to_string()))
}

/// A response's answer: the payload, or the peer's [`LinkError`].
pub fn decode_response<T: DeserializeOwned>(
    frame: &Frame,
) -> Result<Result<T, LinkError>, LinkError> {
    if frame.header.is_error() {
        return Ok(Err(decode::<LinkError>(frame)?));
    }
    Ok(Ok(decode::<T>(frame)?))
}

/// Resolves `host:port`.
pub fn resolve(addr: &str) -> std::io::Result<SocketAddr> {
    if let Ok(a) = addr.parse::<SocketAddr>() {
        return Ok(a);
    }
    addr.to_socket_addrs()?.next().ok_or_else(|| {
        std::io::Error::new(std::io::ErrorKind::NotFound, format!("{addr}: no address"))
    })
}

/// A framed connection on the Raft node's executor. Lives on that executor.
pub struct FrameConn {
    stream: TcpStream,
    decoder: FrameDecoder,
    buf: BytesMut,
    read_chunk: Vec<u8>,
    frame_size_bytes_max: u32,
}

impl FrameConn {
    /// Wraps a connected stream.
    pub fn new(stream: TcpStream, frame_size_bytes_max: u32) -> FrameConn {
        FrameConn {
            stream,
            decoder: FrameDecoder::new(frame_size_bytes_max),
            buf: BytesMut::new(),
            read_chunk: vec![0; 64 << 10],
            frame_size_bytes_max,
        }
    }

    /// The next frame; `None` when the peer closed between frames.
    pub async fn read_frame(&mut self) -> std::io::Result<Option<Frame>> {
        loop {
            match self.decoder.decode(&mut self.buf) {
                Ok(Some(frame)) => return Ok(Some(frame)),
                Ok(None) => {}
                Err(e) => return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, e)),
            }
            let n = self.stream.read(&mut self.read_chunk).await?;
            if n == 0 {
                if self.buf.is_empty() {
                    return Ok(None);
                }
                return Err(std::io::ErrorKind::UnexpectedEof.into());
            }
            self.buf.extend_from_slice(&self.read_chunk[..n]);
        }
    }

    /// Sends one frame with a JSON payload.
    pub async fn send<T: Serialize>(
        &mut self,
        key: ControllerApiKey,
        flags: u16,
        correlation_id: u32,
        body: &T,
    ) -> Result<(), ReplicationError> {
        let bytes = encode(key, flags, correlation_id, body)?;
        if bytes.len() > self.frame_size_bytes_max as usize {
            return Err(ReplicationError::Link(format!(
                "{key} frame of {} bytes exceeds frame_size_bytes_max {}",
                bytes.len(),
                self.frame_size_bytes_max
            )));
        }
        self.stream
            .write_all(&bytes)
            .await
            .map_err(|e| ReplicationError::Link(e.to_string()))
    }

    /// Sends a response: the answer, or `FLAG_ERROR` with the error.
    pub async fn respond<T: Serialize>(
        &mut self,
        key: ControllerApiKey,
        correlation_id: u32,
        answer: &Result<T, LinkError>,
    ) -> Result<(), ReplicationError> {
        match answer {
            Ok(body) => self.send(key, FLAG_RESPONSE, correlation_id, body).await,
            Err(e) => {
                self.send(key, FLAG_RESPONSE | FLAG_ERROR, correlation_id, e)
                    .await
            }
        }
    }
}

/// A blocking byte stream: TCP, or TLS over it.
trait BlockingStream: Read + Write + Send {}
impl<T: Read + Write + Send> BlockingStream for T {}

/// A blocking controller-link client (tools and tests), over `std::net` (TLS with
/// [`LinkClient::connect_tls`]).
pub struct LinkClient {
    stream: Box<dyn BlockingStream>,
    decoder: FrameDecoder,
    buf: BytesMut,
    correlation_id: u32,
    /// The node at the other end.
    pub node_id: u64,
}

impl LinkClient {
    /// Connects to `addr` and introduces itself as a client of cluster `cluster_id`.
    pub fn connect(
        addr: &str,
        cluster_id: &str,
        timeout: Duration,
    ) -> Result<LinkClient, ReplicationError> {
        Self::connect_tls(addr, cluster_id, timeout, None)
    }

    /// [`LinkClient::connect`], over TLS with `tls` when given (the listener's certificate
    /// must name the host of `addr`).
    pub fn connect_tls(
        addr: &str,
        cluster_id: &str,
        timeout: Duration,
        tls: Option<std::sync::Arc<rustls::ClientConfig>>,
    ) -> Result<LinkClient, ReplicationError> {
        let link = |e: std::io::Error| ReplicationError::Link(format!("{addr}: {e}"));
        let sock = resolve(addr).map_err(link)?;
        let stream = std::net::TcpStream::connect_timeout(&sock, timeout).map_err(link)?;
        stream.set_read_timeout(Some(timeout)).map_err(link)?;
        stream.set_write_timeout(Some(timeout)).map_err(link)?;
        stream.set_nodelay(true).map_err(link)?;
        let stream: Box<dyn BlockingStream> = match tls {
            None => Box::new(stream),
            Some(config) => {
                let host = addr.rsplit_once(':').map_or(addr, |(h, _)| h);
                let name = borges_runtime::tls::server_name(host)
                    .map_err(|e| ReplicationError::Link(format!("{addr}: {e}")))?;
                let conn = rustls::ClientConnection::new(config, name)
                    .map_err(|e| ReplicationError::Link(format!("{addr}: TLS: {e}")))?;
                Box::new(rustls::StreamOwned::new(conn, stream))
            }
        };
        let mut client = LinkClient {
            stream,
            decoder: FrameDecoder::new(LinkLimits::default().frame_size_bytes_max),
            buf: BytesMut::new(),
            correlation_id: 0,
            node_id: 0,
        };
        let hello = Hello {
            cluster_id: cluster_id.to_string(),
            from_node: None,
            to_node: None,
        };
        let ok: HelloOk = client
            .call(ControllerApiKey::Hello, &hello)?
            .map_err(|e| ReplicationError::Link(e.to_string()))?;
        client.node_id = ok.node_id;
        Ok(client)
    }

    /// One request: the peer's answer, or its [`LinkError`].
    pub fn call<Req: Serialize, Resp: DeserializeOwned>(
        &mut self,
        key: ControllerApiKey,
        request: &Req,
    ) -> Result<Result<Resp, LinkError>, ReplicationError> {
        self.correlation_id = self.correlation_id.wrapping_add(1);
        let bytes = encode(key, 0, self.correlation_id, request)?;
        let io = |e: std::io::Error| ReplicationError::Link(e.to_string());
        self.stream.write_all(&bytes).map_err(io)?;
        self.stream.flush().map_err(io)?;
        let frame = loop {
            match self.decoder.decode(&mut self.buf) {
                Ok(Some(frame)) => break frame,
                Ok(None) => {}
                Err(e) => return Err(ReplicationError::Link(e.to_string())),
            }
            let mut chunk = [0u8; 16 << 10];
            let n = self.stream.read(&mut chunk).map_err(io)?;
            if n == 0 {
                return Err(ReplicationError::Link("connection closed".into()));
            }
            self.buf.extend_from_slice(&chunk[..n]);
        };
        if frame.header.correlation_id != self.correlation_id || !frame.header.is_response() {
            return Err(ReplicationError::Link("response out of order".into()));
        }
        decode_response(&frame).map_err(|e| ReplicationError::Link(e.to_string()))
    }

    /// `DescribeQuorum`.
    pub fn describe(&mut self) -> Result<QuorumStatus, ReplicationError> {
        self.call(ControllerApiKey::DescribeQuorum, &())?
            .map_err(|e| ReplicationError::Link(e.to_string()))
    }

    /// `ReadState`.
    pub fn read_state(&mut self) -> Result<AppliedState, ReplicationError> {
        self.call(ControllerApiKey::ReadState, &())?
            .map_err(|e| ReplicationError::Link(e.to_string()))
    }

    /// `ClientWrite`: the leader's reply, or [`LinkError::NotLeader`] from a follower.
    pub fn write<C: Serialize, R: DeserializeOwned>(
        &mut self,
        command: &C,
    ) -> Result<Result<R, LinkError>, ReplicationError> {
        self.call(ControllerApiKey::ClientWrite, command)
    }
}
