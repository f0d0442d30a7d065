//! The producer: partitioning, batching, compression, acks, retries, backpressure.
//!
//! `send()` encodes the record into its partition's open batch (see [`accumulator`]) under one
//! short lock and returns a [`DeliveryFuture`]. One sender task drains ready batches, groups
//! them by the address of the core that owns each partition (shard-aware routing), and writes
//! one produce request per core connection carrying all of that core's ready partitions, with
//! up to `in_flight_requests_per_connection_max` requests pipelined per connection. Responses
//! complete the batches' futures, or put retriable failures back into their queues after a
//! backoff (refreshing metadata when the leader moved or the connection failed).
//!
//! With `enable_idempotence` (the default) the producer first gets a producer id
//! (InitProducerId) and numbers each partition's batches ([`sequence`]): a retry the broker
//! already has is answered with the original offset instead of being appended again, and up to
//! five batches per partition may be in flight with their order kept across retries.

pub(crate) mod accumulator;
pub(crate) mod partitioner;
pub(crate) mod sequence;

use std::collections::HashMap;
use std::future::Future;
use std::pin::{pin, Pin};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use borges_protocol::batch::BatchOptions;
use borges_protocol::{wire, ApiKey, ErrorCode};
use tokio::sync::Notify;

use self::accumulator::{
    record_size_upper_bytes, Accumulator, AccumulatorConfig, BatchAck, BatchCompletion, Payload,
    ProducerBatch, RecordRef, TopicRouting,
};
use self::sequence::{Identity, Refusal};
use crate::client::ClientCore;
use crate::codec;
use crate::codec::obj;
use crate::config::{Acks, ClientConfig, ProducerConfig};
use crate::connection::{await_reply, Reply, Request};
use crate::error::{ClientError, Result};
use crate::metadata::ClusterMetadata;
use crate::retry::{WarnLimiter, WARN_INTERVAL_MS};
use crate::timer::PreciseTimer;
use crate::types::{ProducerRecord, RecordMetadata};

/// Sends records to a Borges cluster. Cheap to clone (all clones share one accumulator, one
/// sender task and one set of connections); `Send + Sync`. Needs a tokio runtime.
///
/// ```no_run
/// # async fn example() -> borges_client::Result<()> {
/// use borges_client::{ClientConfig, Producer, ProducerConfig, ProducerRecord};
/// let producer = Producer::new(ClientConfig::new("127.0.0.1:9292"), ProducerConfig::default()).await?;
/// let ack = producer.send(ProducerRecord::new("orders").key("user-1").value("created")).await?;
/// let metadata = ack.await?;
/// println!("partition {} offset {}", metadata.partition, metadata.offset);
/// producer.close().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Producer {
    inner: Arc<Inner>,
    _handle: Arc<HandleGuard>,
}

struct Inner {
    core: Arc<ClientCore>,
    config: ProducerConfig,
    accumulator: Mutex<Accumulator>,
    memory: MemoryPool,
    wake_sender: Notify,
    batch_done: Notify,
    closed: AtomicBool,
    refresh_running: AtomicBool,
    /// Rate limit of the warnings about retried batches.
    warnings: WarnLimiter,
    /// An InitProducerId for partitions whose epochs ran out is running.
    producer_id_running: AtomicBool,
}

/// Dropped with the last `Producer` clone: lets the sender finish what is queued and exit.
struct HandleGuard(Arc<Inner>);

impl Drop for HandleGuard {
    fn drop(&mut self) {
        self.0.closed.store(true, Ordering::Release);
        self.0.lock().closing = true;
        self.0.wake_sender.notify_one();
    }
}

impl Producer {
    /// Validates the configuration, fetches the cluster's metadata from a bootstrap broker and
    /// starts the sender task.
    pub async fn new(client: ClientConfig, config: ProducerConfig) -> Result<Producer> {
        config.validate()?;
        let core = ClientCore::new(client, config.in_flight_requests_per_connection_max)?;
        core.refresh_metadata(Some(&[])).await?;
        let identity = match config.idempotent() {
            true => Some(init_producer_id(&core).await?),
            false => None,
        };
        let accumulator = Accumulator::new(
            AccumulatorConfig {
                batch_size_bytes: config.batch_size_bytes,
                linger: Duration::from_millis(config.linger_ms),
                options: BatchOptions {
                    compression: config.compression.to_batch(),
                    compression_level: config.compression_level,
                    ..BatchOptions::default()
                },
                request_size_bytes_max: config.request_size_bytes_max,
                in_flight_requests_max: config.in_flight_requests_per_connection_max,
                delivery_timeout: Duration::from_millis(config.delivery_timeout_ms),
                identity,
            },
            seed(),
        );
        let inner = Arc::new(Inner {
            core,
            memory: MemoryPool::new(config.buffer_memory_bytes_max),
            config,
            accumulator: Mutex::new(accumulator),
            wake_sender: Notify::new(),
            batch_done: Notify::new(),
            closed: AtomicBool::new(false),
            refresh_running: AtomicBool::new(false),
            warnings: WarnLimiter::new(WARN_INTERVAL_MS),
            producer_id_running: AtomicBool::new(false),
        });
        tokio::spawn(run_sender(inner.clone()));
        Ok(Producer {
            _handle: Arc::new(HandleGuard(inner.clone())),
            inner,
        })
    }

    /// Queues `record` for sending. Waits while the buffer is full (backpressure) or the topic's
    /// metadata is unknown, at most `max_block_ms`. The returned future resolves once the
    /// broker acknowledged the record (or it failed for good); dropping it does not cancel the
    /// send.
    pub async fn send(&self, record: ProducerRecord) -> Result<DeliveryFuture> {
        let inner = &self.inner;
        if inner.closed.load(Ordering::Acquire) {
            return Err(ClientError::Closed("producer"));
        }
        let timestamp = record.timestamp.unwrap_or_else(now_ms);
        let record_ref = RecordRef {
            timestamp,
            key: record.key.as_deref(),
            value: record.value.as_deref(),
            headers: &record.headers,
        };
        let size = record_size_upper_bytes(&record_ref);
        let size_max = inner.config.request_size_bytes_max - 1024;
        if size > size_max {
            return Err(ClientError::RecordTooLarge {
                size_bytes: size,
                size_bytes_max: size_max,
                limit: "request_size_bytes_max - 1 KiB",
            });
        }
        inner
            .memory
            .acquire(size, inner.config.max_block_ms)
            .await?;
        let appended = match self.append(&record, &record_ref, size).await {
            Ok(appended) => appended,
            Err(e) => {
                inner.memory.release(size);
                return Err(e);
            }
        };
        let (appended, partition) = appended;
        if appended.wake_sender {
            inner.wake_sender.notify_one();
        }
        Ok(DeliveryFuture {
            topic: record.topic,
            partition,
            index: appended.index,
            timestamp,
            completion: appended.completion,
        })
    }

    /// Chooses the partition and appends under the accumulator lock, using the topic's routing
    /// cached in the accumulator while the metadata generation is unchanged (one pointer
    /// comparison per record in the common case).
    async fn append(
        &self,
        record: &ProducerRecord,
        record_ref: &RecordRef<'_>,
        size: usize,
    ) -> Result<(accumulator::Appended, i32)> {
        let inner = &self.inner;
        loop {
            let generation = inner.core.metadata_generation();
            {
                let mut acc = inner.lock();
                let index = acc.topic(&record.topic);
                if let Some(count) = acc.routing(index, generation).map(|r| r.partition_count) {
                    let partition = partitioner::choose_partition(
                        record.partition,
                        record.key.as_deref(),
                        count,
                        || acc.sticky_partition(index, size),
                    )?;
                    let appended = acc.append(index, partition, record_ref, size, Instant::now);
                    return Ok((appended, partition));
                }
            }
            let routing = self.routing_of(&record.topic).await?;
            let mut acc = inner.lock();
            let index = acc.topic(&record.topic);
            acc.set_routing(index, routing);
        }
    }

    /// The partition count of `topic` and the partitions that have a leader, from cached
    /// metadata, fetching it when the topic is not known yet.
    async fn routing_of(&self, topic: &Arc<str>) -> Result<TopicRouting> {
        let generation = self.inner.core.metadata_generation();
        let metadata = self.inner.core.metadata();
        let metadata = match metadata.topics.get(&**topic) {
            Some(t) if t.error.is_none() && t.partition_count() > 0 => metadata,
            _ => {
                let topics = [topic.to_string()];
                self.inner
                    .core
                    .metadata_for(&topics, self.inner.config.max_block_ms)
                    .await?
            }
        };
        let meta = metadata
            .topics
            .get(&**topic)
            .ok_or_else(|| ClientError::Broker {
                code: ErrorCode::UnknownTopicOrPartition,
                message: Some(format!("topic {topic} not found")),
            })?;
        if meta.is_internal {
            return Err(ClientError::Broker {
                code: ErrorCode::InvalidTopicOperation,
                message: Some(format!("topic {topic} is internal")),
            });
        }
        Ok(TopicRouting {
            generation: generation.max(self.inner.core.metadata_generation()),
            partition_count: meta.partition_count(),
            available: meta.available_partitions(),
        })
    }

    /// Sends every record queued so far without waiting for `linger_ms` and waits until each
    /// one has completed (acknowledged or failed; the delivery futures tell which).
    pub async fn flush(&self) -> Result<()> {
        let mark = self.inner.lock().begin_flush();
        self.inner.wake_sender.notify_one();
        loop {
            let mut notified = pin!(self.inner.batch_done.notified());
            notified.as_mut().enable();
            if self.inner.lock().flushed(mark) {
                return Ok(());
            }
            notified.await;
        }
    }

    /// Flushes, then stops accepting records. Other clones fail with `Closed` afterwards.
    pub async fn close(&self) -> Result<()> {
        self.flush().await?;
        self.inner.closed.store(true, Ordering::Release);
        self.inner.lock().closing = true;
        self.inner.wake_sender.notify_one();
        Ok(())
    }

    /// Bytes of buffer memory in use (records queued or in flight).
    pub fn buffered_bytes(&self) -> usize {
        self.inner.memory.used.load(Ordering::Relaxed)
    }
}

impl Inner {
    fn lock(&self) -> MutexGuard<'_, Accumulator> {
        match self.accumulator.lock() {
            Ok(guard) => guard,
            Err(poisoned) => poisoned.into_inner(),
        }
    }

    /// Starts one metadata refresh in the background unless one is running. Refreshes are at
    /// least `retry_backoff_ms` apart, so a partition that stays leaderless (a broker
    /// restarting) does not make the producer hammer the cluster with Metadata requests;
    /// `leader_failed` (a batch failed at its leader, or waits for a leader the metadata still
    /// names): `retry_backoff_ms / LEADER_FAILED_REFRESHES_PER_BACKOFF` apart, since the
    /// controller replaces a dead leader after its session timeout and each refresh gap adds
    /// up to itself to the failover.
    fn request_metadata_refresh(self: &Arc<Self>, leader_failed: bool) {
        if self.refresh_running.swap(true, Ordering::AcqRel) {
            return;
        }
        let inner = self.clone();
        tokio::spawn(async move {
            let since = inner.core.metadata().fetched_at.elapsed();
            let gap_ms = if leader_failed {
                inner.config.retry_backoff_ms / LEADER_FAILED_REFRESHES_PER_BACKOFF
            } else {
                inner.config.retry_backoff_ms
            };
            let gap = Duration::from_millis(gap_ms.max(1));
            if since < gap {
                tokio::time::sleep(gap - since).await;
            }
            let topics = inner.lock().topics();
            if let Err(e) = inner.core.refresh_metadata(Some(&topics)).await {
                tracing::debug!(error = %e, "metadata refresh failed");
                tokio::time::sleep(gap).await;
            }
            inner.refresh_running.store(false, Ordering::Release);
            inner.wake_sender.notify_one();
        });
    }

    /// Asks for a new producer id in the background (a partition used up its epochs), unless
    /// one is being asked for; retried after `retry_backoff_ms` on failure.
    fn request_producer_id(self: &Arc<Self>) {
        if self.producer_id_running.swap(true, Ordering::AcqRel) {
            return;
        }
        let inner = self.clone();
        tokio::spawn(async move {
            match init_producer_id(&inner.core).await {
                Ok(identity) => inner.lock().set_producer_id(identity),
                Err(e) => {
                    tracing::debug!(error = %e, "InitProducerId failed");
                    tokio::time::sleep(Duration::from_millis(inner.config.retry_backoff_ms)).await;
                }
            }
            inner.producer_id_running.store(false, Ordering::Release);
            inner.wake_sender.notify_one();
        });
    }
}

/// A fresh producer id and epoch from any broker (InitProducerId).
async fn init_producer_id(core: &ClientCore) -> Result<Identity> {
    let message = obj!(wire::InitProducerIdRequestT {
        transactional_id: None,
        transaction_timeout_ms: -1,
        producer_id: -1,
        producer_epoch: -1,
    });
    let frame = core
        .call_any(
            ApiKey::InitProducerId,
            codec::encode(|fbb| message.pack(fbb)),
        )
        .await?;
    let response = codec::decode!(InitProducerIdResponse, frame)?;
    crate::error::check_code(response.error_code, response.error_message)?;
    if response.producer_id < 0 || response.producer_epoch < 0 {
        return Err(ClientError::Protocol(format!(
            "InitProducerId answered producer id {} epoch {}",
            response.producer_id, response.producer_epoch
        )));
    }
    Ok(Identity {
        producer_id: response.producer_id,
        epoch: response.producer_epoch,
    })
}

/// Resolves to where the record was written, or why it could not be. See [`Producer::send`].
#[must_use = "the future tells whether the record was delivered"]
pub struct DeliveryFuture {
    topic: Arc<str>,
    partition: i32,
    index: i32,
    timestamp: i64,
    completion: Arc<BatchCompletion>,
}

impl DeliveryFuture {
    /// The partition the record was assigned to.
    pub fn partition(&self) -> i32 {
        self.partition
    }

    /// When the producer learnt the outcome of this record's batch (the broker's answer was
    /// processed, or the batch failed for good); `None` while it is pending. Lets an
    /// application measure publish latency exactly without polling the future the moment it
    /// resolves: all records of a batch share this instant.
    pub fn completed_at(&self) -> Option<Instant> {
        self.completion.completed_at()
    }
}

impl Future for DeliveryFuture {
    type Output = Result<RecordMetadata>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        match this.completion.poll_result(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(Err(e)) => Poll::Ready(Err(e.clone())),
            Poll::Ready(Ok(ack)) => Poll::Ready(Ok(RecordMetadata {
                topic: this.topic.clone(),
                partition: this.partition,
                offset: if ack.base_offset < 0 {
                    -1
                } else {
                    ack.base_offset + i64::from(this.index)
                },
                timestamp: if ack.log_append_time_ms >= 0 {
                    ack.log_append_time_ms
                } else {
                    this.timestamp
                },
            })),
        }
    }
}

/// Bounded buffer memory: `send()` reserves a record's size, completion gives it back.
struct MemoryPool {
    used: AtomicUsize,
    max: usize,
    freed: Notify,
}

impl MemoryPool {
    fn new(max: usize) -> MemoryPool {
        MemoryPool {
            used: AtomicUsize::new(0),
            max,
            freed: Notify::new(),
        }
    }

    fn try_acquire(&self, size: usize) -> bool {
        let mut used = self.used.load(Ordering::Relaxed);
        loop {
            // A record larger than the whole buffer still goes through when nothing else is
            // buffered.
            if used != 0 && used + size > self.max {
                return false;
            }
            match self.used.compare_exchange_weak(
                used,
                used + size,
                Ordering::AcqRel,
                Ordering::Relaxed,
            ) {
                Ok(_) => return true,
                Err(current) => used = current,
            }
        }
    }

    async fn acquire(&self, size: usize, max_block_ms: u64) -> Result<()> {
        if self.try_acquire(size) {
            return Ok(());
        }
        let wait = async {
            loop {
                let mut notified = pin!(self.freed.notified());
                notified.as_mut().enable();
                if self.try_acquire(size) {
                    return;
                }
                notified.await;
            }
        };
        tokio::time::timeout(Duration::from_millis(max_block_ms), wait)
            .await
            .map_err(|_| ClientError::Timeout {
                what: "waiting for producer buffer memory",
                timeout_ms: max_block_ms,
            })
    }

    fn release(&self, size: usize) {
        if size > 0 {
            self.used.fetch_sub(size, Ordering::AcqRel);
            self.freed.notify_waiters();
        }
    }
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

fn seed() -> u64 {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    nanos ^ u64::from(std::process::id()).rotate_left(32)
}

/// Metadata refreshes per `retry_backoff_ms` while a batch waits for a leader whose connection
/// failed and that the metadata still names (every 20 ms with the default 100 ms): a Metadata
/// request for the producer's topics to a live broker, for at most the brokers' session
/// timeout (then the leader is replaced, or the partition has none and the refreshes slow
/// down to `retry_backoff_ms`).
const LEADER_FAILED_REFRESHES_PER_BACKOFF: u64 = 5;

/// Whether the broker of `addr` stopped answering (a request timed out, a connection failed)
/// after `metadata` was fetched. Nothing is sent to it until newer metadata names it again:
/// a leader cut off from its cluster is replaced within the session timeout, and a batch sent
/// to it on the old metadata (a reconnect succeeds: clients still reach it) waits out a whole
/// request timeout while the partition's later batches reach the new leader and are refused
/// there as out of order.
fn suspected_since_metadata(
    metadata: &ClusterMetadata,
    suspects: &HashMap<String, Instant>,
    addr: &str,
) -> bool {
    if suspects.is_empty() {
        return false;
    }
    let broker = metadata.broker_of(addr).unwrap_or(addr);
    suspects
        .get(broker)
        .is_some_and(|since| *since >= metadata.fetched_at)
}

/// The sender task: drains, sends, sleeps until the next linger or backoff deadline or until
/// woken (a batch filled, a request finished, a flush, metadata arrived).
async fn run_sender(inner: Arc<Inner>) {
    let mut timer = PreciseTimer::new();
    loop {
        let now = Instant::now();
        let metadata = inner.core.metadata();
        let shard_aware = inner.core.config.shard_aware;
        let suspects = inner.core.suspects_since(metadata.fetched_at);
        let drained = inner
            .lock()
            .drain(now, metadata.fetched_at, |topic, partition| {
                let addr = metadata.leader_addr(topic, partition, shard_aware)?;
                if suspected_since_metadata(&metadata, &suspects, addr) {
                    return None;
                }
                Some(addr.to_string())
            });
        if drained.leader_missing
            || drained.leader_failed
            || now.duration_since(metadata.fetched_at).as_millis() as u64
                > inner.core.config.metadata_max_age_ms
        {
            inner.request_metadata_refresh(drained.leader_failed);
        }
        if drained.producer_id_needed {
            inner.request_producer_id();
        }
        for batch in drained.expired {
            let error = ClientError::DeliveryTimeout {
                timeout_ms: inner.config.delivery_timeout_ms,
                last: Box::new(ClientError::Broker {
                    code: ErrorCode::NotLeaderOrFollower,
                    message: Some("no leader known for the partition".into()),
                }),
            };
            fail_batches(&inner, vec![batch], error);
        }
        let sent_any = !drained.requests.is_empty();
        for (addr, batches) in drained.requests {
            send_request(&inner, addr, batches).await;
        }
        if sent_any {
            continue;
        }
        if inner.closed.load(Ordering::Acquire) && inner.lock().is_idle() {
            return;
        }
        let notified = inner.wake_sender.notified();
        match drained.next_wakeup {
            // The linger or backoff deadline on a precise timer (see `crate::timer`).
            Some(at) => futures_lite::future::or(notified, timer.sleep_until(at)).await,
            None => notified.await,
        }
    }
}

/// Builds and submits one produce request; a task awaits its response.
async fn send_request(inner: &Arc<Inner>, addr: String, mut batches: Vec<ProducerBatch>) {
    let mut failed = Vec::new();
    batches.retain_mut(|b| match b.build() {
        Ok(()) => true,
        Err(e) => {
            failed.push((b.id, b.reserved_bytes, b.completion.clone(), e));
            false
        }
    });
    for (id, reserved, completion, error) in failed {
        let released = inner.lock().complete(&[(id, reserved)]);
        inner.memory.release(released);
        completion.complete(Err(error));
        inner.batch_done.notify_waiters();
    }
    for b in &mut batches {
        b.attempts += 1;
        b.sequence_sent = b.sequence.is_some();
    }
    let (request, layout) = produce_request(&inner.config, &batches);
    let submitted = match inner.core.connection(&addr).await {
        Ok(conn) => conn.submit(request).await.map(|r| (conn, r)),
        Err(e) => Err(e),
    };
    let timeout_ms = inner.core.config.request_timeout_ms + inner.config.linger_ms;
    let inner = inner.clone();
    match submitted {
        Err(e) => finish_request(&inner, &addr, batches, &layout, Err(e)),
        Ok((conn, receiver)) => {
            tokio::spawn(async move {
                let reply = await_reply(receiver, timeout_ms, &conn).await;
                drop(conn);
                if matches!(reply, Err(ClientError::Timeout { .. })) {
                    inner.core.suspect_unresponsive(&addr);
                }
                finish_request(&inner, &addr, batches, &layout, reply);
            });
        }
    }
}

/// Where each batch sits in a request: (topic index, partition index) per batch.
type Layout = Vec<(usize, usize)>;

/// The produce request for `batches`. `drain` hands them over grouped by topic and, inside a
/// topic, by partition in queue order, so each partition's batches are contiguous in the
/// payload region and one `PayloadRange` covers them.
fn produce_request(config: &ProducerConfig, batches: &[ProducerBatch]) -> (Request, Layout) {
    let mut topics: Vec<wire::TopicProduceDataT> = Vec::new();
    let mut payload = Vec::with_capacity(batches.len());
    let mut layout = Vec::with_capacity(batches.len());
    let mut position = 0u32;
    for batch in batches {
        let Payload::Built(bytes) = &batch.payload else {
            unreachable!("batches are built before sending")
        };
        let topic_index = match topics.last() {
            Some(t) if t.name == *batch.topic => topics.len() - 1,
            _ => {
                topics.push(obj!(wire::TopicProduceDataT {
                    name: batch.topic.to_string(),
                    partitions: Some(Vec::new())
                }));
                topics.len() - 1
            }
        };
        let partitions = topics[topic_index].partitions.get_or_insert_with(Vec::new);
        let length = bytes.len() as u32;
        let partition_index = match partitions.last_mut() {
            Some(p) if p.partition == batch.partition => {
                if let Some(range) = p.records.as_mut() {
                    range.length += length;
                }
                partitions.len() - 1
            }
            _ => {
                partitions.push(obj!(wire::PartitionProduceDataT {
                    partition: batch.partition,
                    records: Some(obj!(wire::PayloadRangeT {
                        offset: position,
                        length
                    })),
                }));
                partitions.len() - 1
            }
        };
        position += length;
        payload.push(bytes.clone());
        layout.push((topic_index, partition_index));
    }
    let message = obj!(wire::ProduceRequestT {
        transactional_id: None,
        acks: config.acks.as_i16(),
        timeout_ms: i32::try_from(config.delivery_timeout_ms.min(30_000)).unwrap_or(30_000),
        topics: Some(topics),
    });
    let request = Request {
        api_key: ApiKey::Produce,
        message: codec::encode(|fbb| message.pack(fbb)),
        payload,
        expect_response: config.acks != Acks::None,
    };
    (request, layout)
}

/// Tells about a retried batch: at debug level every time, as a warning the first time per
/// partition and error kind and then every `WARN_INTERVAL_MS` (a produce that waits for
/// `min.insync.replicas` or a dead broker until `delivery_timeout_ms` is not silent).
fn warn_retry(inner: &Inner, batch: &ProducerBatch, e: &ClientError) {
    let kind = e.code().map_or("connection", |c| c.name());
    let key = format!("{}-{} {kind}", batch.topic, batch.partition);
    if inner.warnings.allow(&key) {
        tracing::warn!(
            "producing to {}-{} failed: {e}; retrying until delivery_timeout_ms ({} ms) \
             after the record was sent",
            batch.topic,
            batch.partition,
            inner.config.delivery_timeout_ms
        );
    } else {
        tracing::debug!(topic = %batch.topic, partition = batch.partition, error = %e, "retrying batch");
    }
}

/// Handles a produce request's outcome: completes, fails or requeues each batch.
fn finish_request(
    inner: &Arc<Inner>,
    addr: &str,
    batches: Vec<ProducerBatch>,
    layout: &Layout,
    reply: Reply,
) {
    let outcomes = match reply.and_then(|frame| batch_outcomes(frame, &batches, layout)) {
        Ok(outcomes) => outcomes,
        Err(e) => vec![Err(e); batches.len()],
    };
    let now = Instant::now();
    let mut done = Vec::new();
    let mut completions = Vec::new();
    let mut retry = Vec::new();
    let mut refresh = false;
    let mut acc = inner.lock();
    for (mut batch, outcome) in batches.into_iter().zip(outcomes) {
        let e = match outcome {
            Ok(ack) => {
                acc.batch_acked(&batch);
                completions.push((batch.completion.clone(), Ok(ack)));
                done.push((batch.id, batch.reserved_bytes));
                continue;
            }
            Err(e) => e,
        };
        refresh |= e.needs_metadata_refresh();
        batch.failed(addr, e.needs_metadata_refresh(), now);
        let refusal = acc.batch_refused(&mut batch, &e);
        let at = match refusal {
            Refusal::Fail => None,
            Refusal::Retry | Refusal::Renumber => retry_at(&inner.config, &batch, &e, now),
        };
        if let Some(at) = at {
            warn_retry(inner, &batch, &e);
            batch.not_before = Some(at);
            retry.push(batch);
            continue;
        }
        if refusal != Refusal::Fail {
            acc.batch_abandoned(&batch);
        }
        let e = if refusal == Refusal::Fail || batch.attempts > inner.config.retries_max {
            e
        } else {
            ClientError::DeliveryTimeout {
                timeout_ms: inner.config.delivery_timeout_ms,
                last: Box::new(e),
            }
        };
        completions.push((batch.completion.clone(), Err(e)));
        done.push((batch.id, batch.reserved_bytes));
    }
    let released = acc.finish_request(addr, &done, retry);
    drop(acc);
    inner.memory.release(released);
    // Futures resolve only after their memory is free and their batches are off the books.
    for (completion, result) in completions {
        completion.complete(result);
    }
    if refresh {
        // The leader moved or its connection failed: the batch waits for new metadata.
        inner.request_metadata_refresh(true);
    }
    inner.batch_done.notify_waiters();
    inner.wake_sender.notify_one();
}

/// When to send `batch` again after `error`, or `None` when its retries (`retries_max`) or its
/// time (`delivery_timeout_ms`) ran out. NotLeaderOrFollower backs off from `retry_backoff_ms
/// / LEADER_FAILED_REFRESHES_PER_BACKOFF`: a broker that the metadata just named leader may not
/// have taken the role yet (the controller's broker answers Metadata with the new leader a
/// few ms before the leader's core leads), and if the metadata is what is stale, the refresh
/// it asks for sends the batch to the new leader at once anyway. So does an out-of-order
/// sequence: the batches pipelined behind a refused one get it, and go again right after it.
fn retry_at(
    config: &ProducerConfig,
    batch: &ProducerBatch,
    error: &ClientError,
    now: Instant,
) -> Option<Instant> {
    if batch.attempts > config.retries_max {
        return None;
    }
    let leader_not_ready = matches!(
        error.code(),
        Some(ErrorCode::NotLeaderOrFollower | ErrorCode::OutOfOrderSequenceNumber)
    );
    let base_ms = if leader_not_ready {
        (config.retry_backoff_ms / LEADER_FAILED_REFRESHES_PER_BACKOFF).max(1)
    } else {
        config.retry_backoff_ms
    };
    let backoff = crate::retry::backoff_ms(
        batch.backoff_attempts.max(1),
        base_ms,
        config.retry_backoff_max_ms,
        batch.id,
    );
    let at = now + Duration::from_millis(backoff);
    (at < batch.created + Duration::from_millis(config.delivery_timeout_ms)).then_some(at)
}

/// Fails batches that never made it into a request.
fn fail_batches(inner: &Arc<Inner>, batches: Vec<ProducerBatch>, error: ClientError) {
    let mut done = Vec::new();
    for batch in &batches {
        done.push((batch.id, batch.reserved_bytes));
    }
    let released = inner.lock().complete(&done);
    inner.memory.release(released);
    for batch in batches {
        batch.completion.complete(Err(error.clone()));
    }
    inner.batch_done.notify_waiters();
}

/// Each batch's result from a produce response (or acks=0: written, offset unknown).
fn batch_outcomes(
    frame: Option<crate::connection::Response>,
    batches: &[ProducerBatch],
    layout: &Layout,
) -> Result<Vec<Result<BatchAck>>> {
    let Some(frame) = frame else {
        return Ok(vec![
            Ok(BatchAck {
                base_offset: -1,
                log_append_time_ms: -1
            });
            batches.len()
        ]);
    };
    let response = codec::decode!(ProduceResponse, frame)?;
    crate::error::check_code(response.error_code, response.error_message)?;
    let topics = response.topics.unwrap_or_default();
    // Offsets of later batches of a partition follow the first batch's records.
    let mut next_offset: std::collections::HashMap<(usize, usize), i64> =
        std::collections::HashMap::new();
    let mut outcomes = Vec::with_capacity(batches.len());
    for (batch, &slot) in batches.iter().zip(layout) {
        let found = topics
            .iter()
            .find(|t| t.name == *batch.topic)
            .and_then(|t| {
                t.partitions
                    .as_ref()?
                    .iter()
                    .find(|p| p.partition == batch.partition)
            });
        outcomes.push(match found {
            None => Err(ClientError::Protocol(format!(
                "produce response lacks {}-{}",
                batch.topic, batch.partition
            ))),
            Some(p) => match ClientError::from_code(p.error_code, p.error_message.clone()) {
                // A retry the broker already had: the original's offset (sent alone).
                Some(e) if e.code() == Some(ErrorCode::DuplicateSequenceNumber) => Ok(BatchAck {
                    base_offset: p.base_offset,
                    log_append_time_ms: p.log_append_time_ms,
                }),
                Some(e) => Err(e),
                None => {
                    let base = *next_offset.entry(slot).or_insert(p.base_offset);
                    next_offset.insert(slot, base + i64::from(batch.records_count));
                    Ok(BatchAck {
                        base_offset: base,
                        log_append_time_ms: p.log_append_time_ms,
                    })
                }
            },
        });
    }
    Ok(outcomes)
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::time::{Duration, Instant};

    use super::suspected_since_metadata;
    use crate::metadata::{BrokerInfo, ClusterMetadata};

    #[test]
    fn a_broker_that_stopped_answering_gets_nothing_until_newer_metadata_names_it() {
        let fetched = Instant::now();
        let metadata = ClusterMetadata {
            brokers: HashMap::from([(
                1,
                BrokerInfo {
                    id: 1,
                    addr: "b1:9292".into(),
                    cores: HashMap::from([(0, "b1:9293".into())]),
                },
            )]),
            fetched_at: fetched,
            ..ClusterMetadata::default()
        };
        let none = HashMap::new();
        assert!(!suspected_since_metadata(&metadata, &none, "b1:9293"));
        // Its core's request timed out after the metadata was fetched: held back.
        let later = HashMap::from([("b1:9292".to_string(), fetched + Duration::from_millis(5))]);
        assert!(suspected_since_metadata(&metadata, &later, "b1:9293"));
        assert!(suspected_since_metadata(&metadata, &later, "b1:9292"));
        assert!(!suspected_since_metadata(&metadata, &later, "b2:9293"));
        // Metadata fetched after the failure still names it: it is the leader, send.
        let refreshed = ClusterMetadata {
            fetched_at: fetched + Duration::from_millis(10),
            ..metadata.clone()
        };
        assert!(!suspected_since_metadata(&refreshed, &later, "b1:9293"));
    }
}
