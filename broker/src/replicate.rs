//! Partition replication between broker processes (docs/cluster.md, "Partition
//! replication"), on the core that owns each replica:
//!
//! - **followers**: one fetcher task per follower replica ([`start_fetchers`]) connects to the
//!   owning core of the leader (its own port, from the image: no hop on the leader) and sends
//!   Fetch with this broker's id and epoch; `borges_replication::replica::FollowerFetcher`
//!   decides each step (sync first under `durability=fsync`, truncate on a diverging epoch,
//!   append, back off, wait for metadata) and the partition executes it;
//! - **leaders**: the ISR check every `replica_lag_time_max_ms / 2` ([`run_isr_checks`]) and
//!   the ISR changes of the core's leaders sent to the controller as AlterPartition
//!   ([`run_isr_outbox`]); the fetch serving itself is the partition's (`read_replica`).

use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use borges_protocol::api::ApiKey;
use borges_protocol::frame::{Frame, FrameDecoder};
use borges_protocol::message::{self, MessageHead};
use borges_protocol::scram::{self, ScramClient, ScramError};
use borges_protocol::{wire, ErrorCode};
use borges_replication::replica::{
    FetchAnswer, FetchPosition, FetcherSettings, FollowerFetcher, FollowerStep,
};
use borges_runtime::net::TcpStream;
use borges_runtime::{task, time};
use bytes::BytesMut;
use flatbuffers::FlatBufferBuilder;

use crate::cluster::ClusterHandle;
use crate::cluster_config::ClusterSettings;
use crate::lifecycle::Lifecycle;
use crate::metadata::{AlterPartition, MetadataChange, MetadataImage};
use crate::metrics::CoreMetrics;
use crate::partition::replica::FollowTarget;
use crate::partition::{Partition, PartitionTable};
use crate::sasl::client::{self as sasl_client, InterBrokerAuthError};
use crate::sasl::{InterBrokerUser, Sasl};

/// Bytes a fetch response may carry beyond its records (message and headers).
const FETCH_RESPONSE_OVERHEAD_BYTES_MAX: u32 = 64 * 1024;
/// Longest wait for new metadata before a waiting fetcher looks again.
const METADATA_WAIT_MS_MAX: u64 = 1_000;
/// A fetch's answer is awaited this much longer than the leader may hold it.
const FETCH_GRACE_MS: u64 = 5_000;
/// Bytes read from a leader connection at a time.
const READ_CHUNK_BYTES: usize = 64 * 1024;

/// What a fetcher needs besides its partition. Shared by the fetchers of one core.
#[derive(Clone)]
pub struct FetchContext {
    /// The core's partitions and image.
    pub table: Rc<PartitionTable>,
    /// Shutdown stops the fetchers.
    pub lifecycle: Rc<Lifecycle>,
    /// This broker.
    pub broker_id: i32,
    /// Replication settings.
    pub settings: ClusterSettings,
    /// TLS to the leaders' listeners, when `[tls]` is on.
    pub tls: Option<Arc<borges_runtime::tls::TlsContext>>,
    /// SASL, when `[sasl]` is on: the fetchers authenticate as its inter-broker user.
    pub sasl: Option<Arc<Sasl>>,
    /// The core's metrics (failed authentications are counted).
    pub metrics: Rc<CoreMetrics>,
    /// The cluster member (told when a replica's repair ends).
    pub cluster: Option<Arc<ClusterHandle>>,
}

/// Why a follower's fetch step failed.
#[derive(Debug, thiserror::Error)]
enum FetchError {
    /// The leader did not accept this broker's inter-broker credentials (or could not prove
    /// its own): counted in `borges_replica_fetch_authentication_failures_total`.
    #[error("authenticating to {addr} as {user:?}: {source}")]
    Authentication {
        /// The leader's core address.
        addr: SocketAddr,
        /// The inter-broker user.
        user: String,
        /// What failed.
        source: InterBrokerAuthError,
    },
    /// Anything else (connection, timeout, answer, log).
    #[error("{0}")]
    Other(String),
}

impl From<String> for FetchError {
    fn from(e: String) -> Self {
        FetchError::Other(e)
    }
}

/// Starts a fetcher for every follower replica on this core that has none (after each
/// metadata image).
pub fn start_fetchers(ctx: &FetchContext) {
    for p in ctx.table.all() {
        if p.follow_target().is_some() && p.claim_fetcher() {
            let ctx = ctx.clone();
            task::spawn(async move {
                follow(&p, &ctx).await;
                p.release_fetcher();
            })
            .detach();
        }
    }
}

/// One follower replica's fetch loop, until it stops following (or the broker stops).
async fn follow(p: &Rc<Partition>, ctx: &FetchContext) {
    let settings = FetcherSettings {
        back_off_ms: ctx.settings.replica_fetch_backoff_ms as i64,
        sync_before_fetch: p.syncs_before_fetch(),
    };
    let back_off = Duration::from_millis(ctx.settings.replica_fetch_backoff_ms);
    let mut fetcher: Option<FollowerFetcher> = None;
    let mut conn: Option<LeaderConnection> = None;
    while !ctx.lifecycle.is_shutting_down() {
        let Some(target) = p.follow_target() else {
            return;
        };
        let f = fetcher.get_or_insert_with(|| {
            FollowerFetcher::new(target.leader, target.leader_epoch, settings)
        });
        f.on_metadata(target.leader, target.leader_epoch);
        let step = match f.next(&**p, time::now_ms()) {
            FollowerStep::Fetch(position) => {
                match fetch_once(p, ctx, target, f, &mut conn, position).await {
                    Ok(Some(step)) => Ok(step),
                    // The leader moved while the fetch was out: its answer (if it ever
                    // comes) is of no use, and the connection is mid-response.
                    Ok(None) => {
                        conn = None;
                        continue;
                    }
                    Err(e) => Err(e),
                }
            }
            other => Ok(other),
        };
        let result = match step {
            // The leader may not have applied the image naming it yet: look again after a
            // back-off (or at once when this broker's image changes).
            Ok(FollowerStep::AwaitMetadata) => {
                wait_role_change(p, back_off).await;
                fetcher = None;
                Ok(())
            }
            Ok(step) => {
                let appended = matches!(step, FollowerStep::Append { .. });
                let done = execute(p, target, step).await.map_err(FetchError::Other);
                if done.is_ok() && appended && p.is_repairing() {
                    finish_repair(p, ctx).await;
                }
                done
            }
            Err(e) => Err(e),
        };
        if let Err(e) = result {
            if matches!(e, FetchError::Authentication { .. }) {
                let failures = &ctx.metrics.replica_fetch_authentication_failures;
                failures.set(failures.get() + 1);
            }
            tracing::warn!(partition = %p.id(), leader = target.leader, "replica fetch: {e}");
            conn = None;
            wait_role_change(p, back_off).await;
        }
    }
}

/// Ends `p`'s repair if its log reached the leader's high watermark, and tells the cluster
/// member how many repairs this core still runs.
async fn finish_repair(p: &Partition, ctx: &FetchContext) {
    match p.finish_repair_if_caught_up().await {
        Ok(false) => {}
        Ok(true) => {
            if let Some(cluster) = &ctx.cluster {
                cluster.set_repairing(p.core(), ctx.table.repairing());
            }
        }
        Err(e) => tracing::warn!(partition = %p.id(), "ending the repair: {e}"),
    }
}

/// Sends one fetch; returns what its answer asks for, or `None` when the partition stopped
/// following `target` before the answer came (a new leader, or this broker leads now): a
/// paused or cut-off old leader would otherwise hold the fetcher for the whole fetch wait
/// plus grace (5.5 s by default) while the new leader waits for it to rejoin the ISR.
async fn fetch_once(
    p: &Rc<Partition>,
    ctx: &FetchContext,
    target: FollowTarget,
    fetcher: &mut FollowerFetcher,
    conn: &mut Option<LeaderConnection>,
    position: FetchPosition,
) -> Result<Option<FollowerStep>, FetchError> {
    let image = ctx.table.image();
    let addr = leader_address(&image, target)?;
    if conn.as_ref().is_none_or(|c| c.addr != addr) {
        let mut c = LeaderConnection::connect(addr, &ctx.settings, ctx.tls.as_deref()).await?;
        if let Some(user) = ctx.sasl.as_ref().and_then(|s| s.inter_broker()) {
            c.authenticate(&user, &ctx.settings).await?;
        }
        *conn = Some(c);
    }
    let c = conn.as_mut().expect("connected above");
    let broker_epoch = image
        .brokers
        .get(&ctx.broker_id)
        .map_or(-1, |b| b.epoch as i64);
    let request = fetch_request(p, ctx, broker_epoch, &position, c.next_correlation());
    let answered = async { Some(c.round_trip(&request, &ctx.settings).await) };
    let moved = async {
        target_moved(p, target).await;
        None
    };
    let Some(frame) = futures_lite::future::or(answered, moved).await else {
        tracing::debug!(partition = %p.id(), leader = target.leader,
            "the leader changed during a replica fetch; fetching anew");
        return Ok(None);
    };
    let frame = frame?;
    let answer = parse_answer(p, &frame)?;
    if answer.error == ErrorCode::None && answer.diverging_epoch.is_none() {
        p.note_leader_high_watermark(answer.high_watermark);
    }
    Ok(Some(fetcher.on_answer(
        &position,
        &answer.view(&frame),
        &**p,
        time::now_ms(),
    )))
}

/// Resolves once `p` no longer follows `target`.
async fn target_moved(p: &Partition, target: FollowTarget) {
    loop {
        let seen = p.role_changed().generation();
        if p.follow_target() != Some(target) {
            return;
        }
        p.role_changed().changed_since(seen).await;
    }
}

/// Executes a step that is not a fetch.
async fn execute(
    p: &Rc<Partition>,
    target: FollowTarget,
    step: FollowerStep,
) -> Result<(), String> {
    match step {
        FollowerStep::Fetch(_) => Ok(()),
        FollowerStep::Sync => p.sync_log().await.map_err(|e| e.to_string()),
        FollowerStep::Truncate(offset) => {
            if p.follow_target() != Some(target) {
                return Ok(());
            }
            tracing::info!(partition = %p.id(), offset, leader = target.leader,
                "truncating a diverged follower log");
            p.truncate_to(offset).await.map_err(|e| e.to_string())
        }
        FollowerStep::RestartAt(offset) => {
            if p.follow_target() != Some(target) {
                return Ok(());
            }
            tracing::info!(partition = %p.id(), offset, "restarting the follower log");
            p.restart_replica_at(offset)
                .await
                .map_err(|e| e.to_string())
        }
        FollowerStep::Append {
            batches,
            high_watermark,
        } => {
            if !batches.is_empty() {
                let appended = p.append_replicated(target, batches).await;
                if !appended.map_err(|e| e.to_string())? {
                    return Ok(());
                }
            }
            p.set_follower_high_watermark(high_watermark);
            Ok(())
        }
        FollowerStep::AwaitMetadata => Ok(()),
        FollowerStep::BackOff { until_ms } => {
            let wait_ms = (until_ms - time::now_ms()).max(1) as u64;
            wait_role_change(p, Duration::from_millis(wait_ms)).await;
            Ok(())
        }
    }
}

/// Waits for a role change of `p`, at most `timeout`.
async fn wait_role_change(p: &Partition, timeout: Duration) {
    let seen = p.role_changed().generation();
    time::timeout(timeout, p.role_changed().changed_since(seen)).await;
}

/// The leader's owning core's own address.
fn leader_address(image: &MetadataImage, target: FollowTarget) -> Result<SocketAddr, String> {
    let broker = image
        .brokers
        .get(&target.leader)
        .ok_or_else(|| format!("leader {} is not registered", target.leader))?;
    let reg = &broker.registration;
    let port = reg
        .cores
        .iter()
        .find(|c| c.core == target.leader_core)
        .map_or(reg.port, |c| c.port);
    format!("{}:{port}", reg.host)
        .parse()
        .map_err(|e| format!("leader {} address {}:{port}: {e}", target.leader, reg.host))
}

/// A Fetch for one partition with the follower's fields.
fn fetch_request(
    p: &Partition,
    ctx: &FetchContext,
    broker_epoch: i64,
    position: &FetchPosition,
    correlation_id: u32,
) -> BytesMut {
    let s = &ctx.settings;
    let mut fbb = FlatBufferBuilder::with_capacity(256);
    let partition = wire::FetchPartition::create(
        &mut fbb,
        &wire::FetchPartitionArgs {
            partition: p.id().partition as i32,
            current_leader_epoch: position.current_leader_epoch,
            fetch_offset: position.fetch_offset,
            last_fetched_epoch: position.last_fetched_epoch,
            log_start_offset: position.log_start_offset,
            partition_max_bytes: s.replica_fetch_bytes_max as i32,
        },
    );
    let partitions = fbb.create_vector(&[partition]);
    let name = fbb.create_string(&p.id().topic);
    let topic = wire::FetchTopic::create(
        &mut fbb,
        &wire::FetchTopicArgs {
            name: Some(name),
            partitions: Some(partitions),
        },
    );
    let topics = fbb.create_vector(&[topic]);
    let root = wire::FetchRequest::create(
        &mut fbb,
        &wire::FetchRequestArgs {
            replica_id: ctx.broker_id,
            replica_epoch: broker_epoch,
            max_wait_ms: s.replica_fetch_wait_max_ms as i32,
            min_bytes: 1,
            max_bytes: s.replica_fetch_bytes_max as i32,
            isolation_level: wire::IsolationLevel::ReadUncommitted,
            topics: Some(topics),
        },
    );
    fbb.finish(root, None);
    let head = MessageHead::request(ApiKey::Fetch, 0, correlation_id);
    match message::encode_message(head, &fbb, &[]) {
        Ok(frame) => frame,
        Err(e) => unreachable!("a one-partition Fetch is a few hundred bytes: {e}"),
    }
}

/// The leader's answer for the partition, with its records' range in the payload.
struct Answer {
    error: ErrorCode,
    high_watermark: i64,
    log_start_offset: i64,
    diverging_epoch: Option<(i32, i64)>,
    records: std::ops::Range<usize>,
}

impl Answer {
    fn view<'a>(&self, frame: &'a Frame) -> FetchAnswer<'a> {
        FetchAnswer {
            error: self.error,
            high_watermark: self.high_watermark,
            log_start_offset: self.log_start_offset,
            diverging_epoch: self.diverging_epoch,
            records: &frame.payload[self.records.clone()],
        }
    }
}

fn parse_answer(p: &Partition, frame: &Frame) -> Result<Answer, String> {
    if frame.header.is_error() {
        let (code, text) =
            message::decode_error_response(&frame.message).map_err(|e| e.to_string())?;
        return Err(format!("leader answered {code}: {}", text.unwrap_or("")));
    }
    let response = message::decode_message::<wire::FetchResponse>(&frame.message)
        .map_err(|e| format!("undecodable fetch response: {e}"))?;
    if response.error_code() != 0 {
        return Err(format!(
            "leader refused the fetch ({}): {}",
            ErrorCode::from_u16(response.error_code()),
            response.error_message().unwrap_or("")
        ));
    }
    let found = response
        .topics()
        .iter()
        .flatten()
        .filter(|t| t.name() == &*p.id().topic)
        .flat_map(|t| t.partitions().into_iter().flatten())
        .find(|r| r.partition() == p.id().partition as i32)
        .ok_or_else(|| "the fetch response lacks the partition".to_string())?;
    let records = message::resolve_payload_range(found.records(), frame.payload.len())
        .map_err(|e| e.to_string())?;
    Ok(Answer {
        error: ErrorCode::from_u16(found.error_code()),
        high_watermark: found.high_watermark(),
        log_start_offset: found.log_start_offset(),
        diverging_epoch: found.diverging_epoch().map(|d| (d.epoch(), d.end_offset())),
        records,
    })
}

/// A follower's connection to the leader's owning core. Lives on the follower's core.
struct LeaderConnection {
    addr: SocketAddr,
    stream: TcpStream,
    decoder: FrameDecoder,
    buf: BytesMut,
    correlation_id: u32,
}

impl LeaderConnection {
    async fn connect(
        addr: SocketAddr,
        s: &ClusterSettings,
        tls: Option<&borges_runtime::tls::TlsContext>,
    ) -> Result<Self, String> {
        let connect = TcpStream::connect(addr);
        let mut stream = time::timeout(Duration::from_millis(FETCH_GRACE_MS), connect)
            .await
            .ok_or_else(|| format!("connecting to {addr} timed out"))?
            .map_err(|e| format!("connecting to {addr}: {e}"))?;
        if let Some(tls) = tls {
            let config = tls
                .client()
                .ok_or_else(|| format!("TLS to {addr}: no tls.ca_file to verify it with"))?;
            let name = borges_runtime::tls::server_name(&addr.ip().to_string())
                .map_err(|e| e.to_string())?;
            let handshake = stream.connect_tls(config, name);
            time::timeout(Duration::from_millis(FETCH_GRACE_MS), handshake)
                .await
                .ok_or_else(|| format!("TLS handshake with {addr} timed out"))?
                .map_err(|e| format!("{addr}: {e}"))?;
        }
        let frame_max = s
            .replica_fetch_bytes_max
            .saturating_add(FETCH_RESPONSE_OVERHEAD_BYTES_MAX);
        Ok(LeaderConnection {
            addr,
            stream,
            decoder: FrameDecoder::new(frame_max),
            buf: BytesMut::new(),
            correlation_id: 0,
        })
    }

    /// Authenticates as `user` (SaslHandshake, then the two SCRAM rounds); the leader's
    /// server-final proof is verified.
    async fn authenticate(
        &mut self,
        user: &InterBrokerUser,
        s: &ClusterSettings,
    ) -> Result<(), FetchError> {
        let failed = |addr, source| FetchError::Authentication {
            addr,
            user: user.username.clone(),
            source,
        };
        let addr = self.addr;
        let correlation_id = self.next_correlation();
        let request = sasl_client::handshake_request(user.mechanism, correlation_id);
        let frame = self.round_trip(&request, s).await?;
        sasl_client::handshake_answer(&frame).map_err(|e| failed(addr, e))?;
        let mut scram = ScramClient::new(
            user.mechanism,
            &user.username,
            user.password.as_bytes(),
            scram::random_nonce(),
        );
        let scram_failed = |e: ScramError| failed(addr, e.into());
        let client_first = scram.client_first().map_err(scram_failed)?;
        let server_first = self.sasl_round(&client_first, s).await?;
        let server_first = server_first.map_err(|e| failed(addr, e))?;
        let client_final = scram.server_first(&server_first).map_err(scram_failed)?;
        let server_final = self.sasl_round(&client_final, s).await?;
        let server_final = server_final.map_err(|e| failed(addr, e))?;
        scram.server_final(&server_final).map_err(scram_failed)
    }

    /// One SaslAuthenticate round: the connection's error, or the answer's.
    async fn sasl_round(
        &mut self,
        auth_bytes: &[u8],
        s: &ClusterSettings,
    ) -> Result<Result<Vec<u8>, InterBrokerAuthError>, String> {
        let correlation_id = self.next_correlation();
        let request = sasl_client::authenticate_request(auth_bytes, correlation_id);
        let frame = self.round_trip(&request, s).await?;
        Ok(sasl_client::authenticate_answer(&frame))
    }

    fn next_correlation(&mut self) -> u32 {
        self.correlation_id = self.correlation_id.wrapping_add(1);
        self.correlation_id
    }

    /// Sends `request` and reads its response, within the fetch wait plus a grace period.
    async fn round_trip(&mut self, request: &[u8], s: &ClusterSettings) -> Result<Frame, String> {
        let deadline = Duration::from_millis(s.replica_fetch_wait_max_ms + FETCH_GRACE_MS);
        let exchange = async {
            self.stream
                .write_all(request)
                .await
                .map_err(|e| format!("sending to {}: {e}", self.addr))?;
            self.read_frame().await
        };
        time::timeout(deadline, exchange)
            .await
            .ok_or_else(|| format!("no fetch answer from {} within {deadline:?}", self.addr))?
    }

    async fn read_frame(&mut self) -> Result<Frame, String> {
        let mut chunk = vec![0u8; READ_CHUNK_BYTES];
        loop {
            if let Some(frame) = self
                .decoder
                .decode(&mut self.buf)
                .map_err(|e| e.to_string())?
            {
                return Ok(frame);
            }
            let n = self
                .stream
                .read(&mut chunk)
                .await
                .map_err(|e| format!("reading from {}: {e}", self.addr))?;
            if n == 0 {
                return Err(format!("{} closed the connection", self.addr));
            }
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }
}

/// Sends the ISR changes of this core's leaders to the controller (AlterPartition), until
/// shutdown. A refused or failed change is asked again by the next ISR check.
pub async fn run_isr_outbox(
    table: Rc<PartitionTable>,
    cluster: Arc<ClusterHandle>,
    lifecycle: Rc<Lifecycle>,
) {
    let outbox = table.isr_outbox().clone();
    while !lifecycle.is_shutting_down() {
        let seen = outbox.pushed.generation();
        for (partition, change) in outbox.take_all() {
            let epoch = cluster
                .latest()
                .brokers
                .get(&cluster.node_id)
                .map_or(0, |b| b.epoch);
            let alter = AlterPartition {
                topic: partition.topic.to_string(),
                partition: partition.partition,
                leader: change.leader_id,
                broker_epoch: epoch,
                leader_epoch: change.leader_epoch,
                partition_epoch: change.partition_epoch,
                isr: change.new_isr.clone(),
            };
            let refused = match cluster.write(MetadataChange::AlterPartition(alter)).await {
                Ok(reply) => reply.error.map(|(code, m)| format!("code {code}: {m}")),
                Err(f) => Some(f.to_string()),
            };
            tracing::info!(%partition, isr = ?change.new_isr, refused = ?refused, "AlterPartition");
            if refused.is_some() {
                if let Ok(p) = table.get(&partition) {
                    p.isr_change_failed(change.leader_epoch);
                }
            }
        }
        let wait = outbox.pushed.changed_since(seen);
        time::timeout(Duration::from_millis(METADATA_WAIT_MS_MAX), wait).await;
    }
}

/// The leaders' ISR check on this core every `replica_lag_time_max_ms / 2`, until shutdown.
pub async fn run_isr_checks(table: Rc<PartitionTable>, lifecycle: Rc<Lifecycle>, lag_ms: u64) {
    let period = Duration::from_millis((lag_ms / 2).max(10));
    while !lifecycle.is_shutting_down() {
        time::sleep(period).await;
        table.check_isrs(time::now_ms());
    }
}
