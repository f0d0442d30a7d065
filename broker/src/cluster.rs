//! A cluster member's Raft executor and its bridge to the cores.
//!
//! In cluster mode the process runs one more executor thread (`borges-raft`, a side executor,
//! never a data core) with the broker's [`ClusterMember`]: the metadata quorum node, writes
//! forwarded to the active controller, registration and heartbeats. The cores reach it through
//! [`ClusterHandle`] (shared by every core, `Send + Sync`): requests go over a bounded channel,
//! and every applied image comes back through a latest-value slot that each core follows, so a
//! slow core may skip intermediate images but never applies one older than it has seen.

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::atomic::{AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use borges_protocol::ErrorCode;
use borges_replication::cluster::ChangeReply;
use borges_replication::controller::{ControllerCluster, LocalFuture};
use borges_replication::link::LinkError;
use borges_replication::member::{ClusterMember, Heartbeat, MemberConfig};
use borges_replication::network::RaftTuning;
use borges_replication::node::NodeConfig;
use borges_runtime::side::{self, SideExecutorConfig};
use futures_channel::{mpsc, oneshot};
use futures_lite::StreamExt;
use tokio::sync::watch;

use crate::cluster_config::ClusterSettings;
use crate::config::BrokerConfig;
use crate::error::BrokerError;
use crate::failure::Failure;
use crate::metadata::{BrokerRegistration, MetadataChange, MetadataImage};

/// Requests from the cores to the Raft executor waiting at most.
pub const CLUSTER_REQUESTS_QUEUED_MAX: usize = 1024;
/// How often a waiter checks how far the cores have applied the metadata log.
const APPLIED_POLL_MS: u64 = 2;

/// What the cores ask the Raft executor.
enum SideRequest {
    Write {
        change: MetadataChange,
        reply: oneshot::Sender<Result<ChangeReply, Failure>>,
    },
    Register {
        registration: BrokerRegistration,
        reply: oneshot::Sender<Result<u64, Failure>>,
    },
    ControlledShutdown {
        reply: oneshot::Sender<Result<(), Failure>>,
    },
    Stop {
        reply: oneshot::Sender<()>,
    },
}

/// The cores' handle on the cluster member. Shared by every core (`Send + Sync`).
pub struct ClusterHandle {
    requests: mpsc::Sender<SideRequest>,
    images: watch::Receiver<Arc<MetadataImage>>,
    /// The metadata revision each core has applied.
    applied: Box<[AtomicU64]>,
    /// Partitions each core is repairing from their leader (`partition::repair`): while any
    /// is, this broker asks to stay fenced.
    repairing: Box<[AtomicUsize]>,
    /// The Raft leader (active controller) as this node last saw it; -1 for none.
    controller_id: AtomicI64,
    /// This broker's node id.
    pub node_id: i32,
    /// The cluster id from `meta.properties`.
    pub cluster_id: String,
    /// The `[cluster]` settings.
    pub settings: ClusterSettings,
}

impl ClusterHandle {
    async fn ask<T>(&self, make: impl FnOnce(oneshot::Sender<T>) -> SideRequest) -> Option<T> {
        let (tx, rx) = oneshot::channel();
        let mut requests = self.requests.clone();
        futures_lite::future::poll_fn(|cx| requests.poll_ready(cx))
            .await
            .ok()?;
        requests.start_send(make(tx)).ok()?;
        rx.await.ok()
    }

    fn gone() -> Failure {
        Failure::new(ErrorCode::ShuttingDown, "the cluster member has stopped")
    }

    /// Commits a metadata change through the active controller.
    pub async fn write(&self, change: MetadataChange) -> Result<ChangeReply, Failure> {
        self.ask(|reply| SideRequest::Write { change, reply })
            .await
            .unwrap_or_else(|| Err(Self::gone()))
    }

    /// Registers this broker; answers its broker epoch. Heartbeats start.
    pub async fn register(&self, registration: BrokerRegistration) -> Result<u64, Failure> {
        self.ask(|reply| SideRequest::Register {
            registration,
            reply,
        })
        .await
        .unwrap_or_else(|| Err(Self::gone()))
    }

    /// Moves this broker's leadership away and stops its heartbeats.
    pub async fn controlled_shutdown(&self) -> Result<(), Failure> {
        self.ask(|reply| SideRequest::ControlledShutdown { reply })
            .await
            .unwrap_or_else(|| Err(Self::gone()))
    }

    /// Stops the Raft node.
    pub async fn stop(&self) {
        let _ = self.ask(|reply| SideRequest::Stop { reply }).await;
    }

    /// The latest image the member applied.
    pub fn latest(&self) -> Arc<MetadataImage> {
        self.images.borrow().clone()
    }

    /// A receiver of every applied image (latest value).
    pub fn images(&self) -> watch::Receiver<Arc<MetadataImage>> {
        self.images.clone()
    }

    /// Core `core` has applied `revision`.
    pub fn set_applied(&self, core: usize, revision: u64) {
        if let Some(a) = self.applied.get(core) {
            a.fetch_max(revision, Ordering::SeqCst);
        }
    }

    /// The revision every core has applied.
    pub fn applied(&self) -> u64 {
        self.applied
            .iter()
            .map(|a| a.load(Ordering::SeqCst))
            .min()
            .unwrap_or(0)
    }

    /// Core `core` repairs `count` partitions from their leaders.
    pub fn set_repairing(&self, core: usize, count: usize) {
        if let Some(r) = self.repairing.get(core) {
            r.store(count, Ordering::SeqCst);
        }
    }

    /// Partitions under repair on this broker.
    pub fn repairing(&self) -> usize {
        self.repairing
            .iter()
            .map(|r| r.load(Ordering::SeqCst))
            .sum()
    }

    /// What heartbeats report as applied: the revision every core applied, or 0 while a
    /// partition is under repair (Kafka's `wantFence`): the controller unfences a broker only
    /// once it reports the revision of its registration, so a broker that repairs a replica
    /// neither leads nor joins an ISR until the repair ends.
    pub fn applied_for_heartbeat(&self) -> u64 {
        if self.repairing() > 0 {
            0
        } else {
            self.applied()
        }
    }

    /// Waits until every core has applied `revision`; false after `timeout`.
    pub async fn wait_applied(&self, revision: u64, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        while self.applied() < revision {
            if Instant::now() > deadline {
                return false;
            }
            borges_runtime::time::sleep(Duration::from_millis(APPLIED_POLL_MS)).await;
        }
        true
    }

    /// The active controller's node id, if known.
    pub fn controller_id(&self) -> Option<i32> {
        let id = self.controller_id.load(Ordering::SeqCst);
        (id >= 0).then_some(id as i32)
    }

    /// How long metadata requests wait for the controller.
    pub fn request_timeout(&self) -> Duration {
        Duration::from_millis(self.settings.controller_request_timeout_ms)
    }
}

/// Checks the data directory against the mode: a cluster member needs one formatted for its
/// node id (`borges storage format`) and returns its cluster id; the single-node broker stamps
/// its directory on first start.
pub fn check_data_dir(config: &BrokerConfig) -> Result<Option<String>, BrokerError> {
    use borges_replication::format;
    let node_id = u64::try_from(config.broker_id).unwrap_or(0);
    if !config.cluster.enabled() {
        format::ensure_single_node(&config.data_dir, node_id)
            .map_err(|e| BrokerError::Config(e.to_string()))?;
        return Ok(None);
    }
    let props = format::check_cluster_member(&config.data_dir, node_id)
        .map_err(|e| BrokerError::Config(e.to_string()))?;
    Ok(Some(props.cluster_id))
}

/// The host clients should use for this broker: `advertised_host`, else the listen host
/// (127.0.0.1 for an unspecified one).
pub fn advertised_host(config: &BrokerConfig) -> String {
    if let Some(h) = &config.advertised_host {
        return h.clone();
    }
    match config.listen.parse::<std::net::SocketAddr>() {
        Ok(a) if !a.ip().is_unspecified() => a.ip().to_string(),
        _ => "127.0.0.1".to_string(),
    }
}

/// Start-up: checks the data directory (see [`check_data_dir`]) and, for a cluster member,
/// starts its Raft executor thread.
pub fn prepare(
    config: &BrokerConfig,
    cores: usize,
    tls: Option<Arc<borges_runtime::tls::TlsContext>>,
) -> Result<Option<ClusterThread>, BrokerError> {
    match check_data_dir(config)? {
        Some(cluster_id) => start(config, cluster_id, cores, tls).map(Some),
        None => Ok(None),
    }
}

/// What this broker registers: its advertised host, main port, every core's port and its
/// controller-link address; a new incarnation per process start.
pub fn registration(
    config: &BrokerConfig,
    host: String,
    cores: &[crate::types::CoreEndpoint],
) -> BrokerRegistration {
    let port = config
        .listen
        .parse::<std::net::SocketAddr>()
        .map_or(0, |a| a.port());
    let controller_addr = config
        .cluster
        .voters()
        .ok()
        .and_then(|v| v.get(&(config.broker_id as u64)).cloned())
        .or_else(|| config.cluster.controller_listen.clone())
        .unwrap_or_default();
    BrokerRegistration {
        id: config.broker_id,
        incarnation: crate::metadata::Uuid::random(),
        host,
        port,
        cores: cores
            .iter()
            .map(|e| crate::metadata::CorePort {
                core: e.core,
                port: e.addr.port(),
            })
            .collect(),
        controller_addr,
    }
}

impl ControllerCluster for ClusterHandle {
    fn node_id(&self) -> i32 {
        self.node_id
    }

    fn latest(&self) -> Arc<MetadataImage> {
        ClusterHandle::latest(self)
    }

    fn write(&self, change: MetadataChange) -> LocalFuture<'_, Result<ChangeReply, Failure>> {
        Box::pin(ClusterHandle::write(self, change))
    }

    fn wait_applied(&self, revision: u64, timeout: Duration) -> LocalFuture<'_, bool> {
        Box::pin(ClusterHandle::wait_applied(self, revision, timeout))
    }

    fn request_timeout(&self) -> Duration {
        ClusterHandle::request_timeout(self)
    }

    fn voters(&self) -> usize {
        self.settings.controller_voters.len()
    }

    fn default_replication_factor(&self) -> i16 {
        self.settings.default_replication_factor
    }

    fn offsets_topic_replication_factor(&self) -> i16 {
        self.settings.offsets_topic_replication_factor
    }
}

/// The running Raft executor thread.
pub struct ClusterThread {
    /// The cores' handle.
    pub handle: Arc<ClusterHandle>,
    thread: Option<std::thread::JoinHandle<Result<(), borges_runtime::executor::RuntimeError>>>,
}

impl ClusterThread {
    /// Waits for the thread to end (after [`ClusterHandle::stop`]).
    pub fn join(mut self) {
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn member_config(
    config: &BrokerConfig,
    cluster_id: &str,
    tls: Option<Arc<borges_runtime::tls::TlsContext>>,
) -> Result<MemberConfig, BrokerError> {
    let c = &config.cluster;
    let voters = c.voters().map_err(BrokerError::Config)?;
    let listen = c
        .controller_listen
        .as_deref()
        .unwrap_or_default()
        .parse()
        .map_err(|e| BrokerError::Config(format!("controller_listen: {e}")))?;
    let node_id = config.broker_id as u64;
    let advertised = voters.get(&node_id).cloned();
    let tuning = RaftTuning {
        heartbeat_interval_ms: c.raft_heartbeat_interval_ms,
        election_timeout_ms: c.raft_election_timeout_ms,
        election_stagger_ms: c.raft_election_stagger_ms,
        ..RaftTuning::default()
    };
    Ok(MemberConfig {
        node: NodeConfig {
            cluster_id: cluster_id.to_string(),
            node_id,
            data_dir: config.data_dir.clone(),
            listen,
            advertised,
            voters,
            tuning,
            link: borges_replication::link::LinkLimits {
                tls,
                ..Default::default()
            },
            disk: Default::default(),
        },
        heartbeat_interval_ms: c.heartbeat_interval_ms,
        session_timeout_ms: c.session_timeout_ms,
        request_timeout_ms: c.controller_request_timeout_ms,
        leader_rebalance_interval_ms: c
            .auto_leader_rebalance_enable
            .then_some(c.leader_imbalance_check_interval_ms),
    })
}

/// Starts the Raft executor thread of a cluster member and waits until its node runs (its
/// storage opened, its controller listener bound).
pub fn start(
    config: &BrokerConfig,
    cluster_id: String,
    cores: usize,
    tls: Option<Arc<borges_runtime::tls::TlsContext>>,
) -> Result<ClusterThread, BrokerError> {
    let member = member_config(config, &cluster_id, tls)?;
    let (image_tx, images) = watch::channel(Arc::new(MetadataImage::default()));
    let (requests, requests_rx) = mpsc::channel(CLUSTER_REQUESTS_QUEUED_MAX);
    let handle = Arc::new(ClusterHandle {
        requests,
        images,
        applied: (0..cores).map(|_| AtomicU64::new(0)).collect(),
        repairing: (0..cores).map(|_| AtomicUsize::new(0)).collect(),
        controller_id: AtomicI64::new(-1),
        node_id: config.broker_id,
        cluster_id,
        settings: config.cluster.clone(),
    });
    let (started_tx, started_rx) = std::sync::mpsc::channel();
    let side_config = SideExecutorConfig {
        name: "borges-raft".into(),
        ..SideExecutorConfig::default()
    };
    let h = handle.clone();
    let thread = side::start_side_executor(&side_config, move || async move {
        side_main(member, image_tx, requests_rx, h, started_tx).await
    })?;
    match started_rx.recv() {
        Ok(Ok(())) => Ok(ClusterThread {
            handle,
            thread: Some(thread),
        }),
        Ok(Err(e)) => {
            let _ = thread.join();
            Err(BrokerError::Config(e))
        }
        Err(_) => {
            let _ = thread.join();
            Err(BrokerError::Config(
                "the Raft executor ended at start-up".into(),
            ))
        }
    }
}

/// Waits for the Raft executor thread, if there is one.
pub fn join(thread: Option<ClusterThread>) {
    if let Some(t) = thread {
        t.join();
    }
}

/// This broker's session as the Raft executor keeps it. Lives on that executor.
#[derive(Default)]
struct Session {
    registration: RefCell<Option<BrokerRegistration>>,
    epoch: Cell<u64>,
    stopped: Cell<bool>,
}

async fn side_main(
    config: MemberConfig,
    image_tx: watch::Sender<Arc<MetadataImage>>,
    mut requests: mpsc::Receiver<SideRequest>,
    handle: Arc<ClusterHandle>,
    started: std::sync::mpsc::Sender<Result<(), String>>,
) {
    let on_image = Rc::new(move |image: Arc<MetadataImage>| {
        image_tx.send_if_modified(|current| {
            let newer = image.revision > current.revision;
            if newer {
                *current = image.clone();
            }
            newer
        });
    });
    let member = match ClusterMember::start(config, on_image).await {
        Ok(m) => m,
        Err(e) => {
            let _ = started.send(Err(e.to_string()));
            return;
        }
    };
    let _ = started.send(Ok(()));
    side::spawn_detached(track_controller(Rc::downgrade(&member), handle.clone()));
    let session = Rc::new(Session::default());
    while let Some(request) = requests.next().await {
        if let SideRequest::Stop { reply } = request {
            session.stopped.set(true);
            member.shutdown().await;
            let _ = reply.send(());
            return;
        }
        let (m, s, h) = (member.clone(), session.clone(), handle.clone());
        side::spawn_detached(serve(m, s, h, request));
    }
}

async fn serve(
    member: Rc<ClusterMember>,
    session: Rc<Session>,
    handle: Arc<ClusterHandle>,
    request: SideRequest,
) {
    match request {
        SideRequest::Write { change, reply } => {
            let _ = reply.send(member.write(change).await.map_err(link_failure));
        }
        SideRequest::Register {
            registration,
            reply,
        } => {
            let result = member.register(registration.clone()).await;
            if let Ok(epoch) = result {
                session.epoch.set(epoch);
                *session.registration.borrow_mut() = Some(registration);
                side::spawn_detached(heartbeats(member.clone(), session.clone(), handle));
            }
            let _ = reply.send(result.map_err(link_failure));
        }
        SideRequest::ControlledShutdown { reply } => {
            let _ = reply.send(controlled_shutdown(&member, &session, &handle).await);
        }
        SideRequest::Stop { .. } => {}
    }
}

fn link_failure(e: LinkError) -> Failure {
    let code = match e {
        LinkError::NotLeader { .. } | LinkError::Raft(_) => ErrorCode::RequestTimedOut,
        _ => ErrorCode::UnknownServerError,
    };
    Failure::new(code, format!("no active controller took the change: {e}"))
}

/// Tells the active controller this broker stops: its leadership moves to other ISR members.
/// Heartbeats stop, so its session then expires and it is fenced.
async fn controlled_shutdown(
    member: &ClusterMember,
    session: &Session,
    handle: &ClusterHandle,
) -> Result<(), Failure> {
    session.stopped.set(true);
    let epoch = session.epoch.get();
    if epoch == 0 {
        return Ok(());
    }
    let change = MetadataChange::ControlledShutdown {
        id: handle.node_id,
        epoch,
    };
    let reply = member.write(change).await.map_err(link_failure)?;
    match reply.error {
        None => Ok(()),
        Some((code, message)) => Err(Failure::new(ErrorCode::from_u16(code), message)),
    }
}

/// Heartbeats to the active controller every `heartbeat_interval_ms`; registers again when
/// the controller no longer knows this broker's epoch.
async fn heartbeats(member: Rc<ClusterMember>, session: Rc<Session>, handle: Arc<ClusterHandle>) {
    let period = member.heartbeat_interval();
    while !session.stopped.get() && !member.is_stopped() {
        let hb = Heartbeat {
            id: handle.node_id,
            epoch: session.epoch.get(),
            applied: handle.applied_for_heartbeat(),
        };
        match member.heartbeat(&hb, period * 2).await {
            Ok(_) => {}
            Err(LinkError::StaleBrokerEpoch { .. }) if !session.stopped.get() => {
                let registration = session.registration.borrow().clone();
                if let Some(r) = registration {
                    match member.register(r).await {
                        Ok(epoch) => {
                            tracing::warn!(epoch, "registration was not current: registered again");
                            session.epoch.set(epoch);
                        }
                        Err(e) => tracing::warn!("registering again failed: {e}"),
                    }
                }
            }
            Err(e) => tracing::debug!("heartbeat: {e}"),
        }
        side::Sleep::new(period).await;
    }
}

/// Keeps [`ClusterHandle::controller_id`] current.
async fn track_controller(member: std::rc::Weak<ClusterMember>, handle: Arc<ClusterHandle>) {
    loop {
        let Some(m) = member.upgrade() else { return };
        if m.is_stopped() {
            return;
        }
        let leader = m.status().leader_id.map_or(-1, |id| id as i64);
        handle.controller_id.store(leader, Ordering::SeqCst);
        drop(m);
        side::Sleep::new(Duration::from_millis(20)).await;
    }
}
