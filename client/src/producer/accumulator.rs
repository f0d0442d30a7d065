//! The record accumulator: per-partition queues of batches, encoded as records arrive.
//!
//! Pure logic, no IO: `append` encodes a record straight into its partition's open batch
//! (the bytes that will go on the wire); `drain` closes batches whose linger expired (or that a
//! flush asked for), and hands the sendable ones to the sender grouped by destination address,
//! at most `in_flight_requests_max` requests per address and `request_size_bytes_max` bytes per
//! request; `finish_request` takes back what the broker refused retriably. Owned by the producer
//! behind one short mutex: `send()` holds it to append one record, the sender to drain.

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::sync::{Arc, Mutex, OnceLock};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use borges_protocol::batch::{set_producer_fields, BatchBuilder, BatchOptions};
use bytes::{Bytes, BytesMut};

use super::partitioner::StickyPartitioner;
use super::sequence::{Identity, PartitionSequences, Refusal, Sequenced};
use crate::error::{ClientError, Result};

/// What the broker said about a whole batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct BatchAck {
    /// Offset of the batch's first record; -1 with `acks=0`.
    pub base_offset: i64,
    /// The broker's append time for LogAppendTime topics, else -1.
    pub log_append_time_ms: i64,
}

/// The outcome of one batch, shared by the delivery futures of all its records.
#[derive(Debug, Default)]
pub(crate) struct BatchCompletion {
    result: OnceLock<Result<BatchAck>>,
    /// When the outcome was set (written before `result`).
    completed_at: OnceLock<Instant>,
    wakers: Mutex<Vec<Waker>>,
}

impl BatchCompletion {
    /// Sets the outcome (first call wins) and wakes every waiting future.
    pub fn complete(&self, result: Result<BatchAck>) {
        let _ = self.completed_at.set(Instant::now());
        let _ = self.result.set(result);
        let wakers = match self.wakers.lock() {
            Ok(mut w) => std::mem::take(&mut *w),
            Err(poisoned) => std::mem::take(&mut *poisoned.into_inner()),
        };
        for waker in wakers {
            waker.wake();
        }
    }

    /// The outcome, or `Pending` after registering `cx`'s waker.
    pub fn poll_result(&self, cx: &mut Context<'_>) -> Poll<&Result<BatchAck>> {
        if let Some(result) = self.result.get() {
            return Poll::Ready(result);
        }
        {
            let mut wakers = match self.wakers.lock() {
                Ok(w) => w,
                Err(poisoned) => poisoned.into_inner(),
            };
            if !wakers.iter().any(|w| w.will_wake(cx.waker())) {
                wakers.push(cx.waker().clone());
            }
        }
        match self.result.get() {
            Some(result) => Poll::Ready(result),
            None => Poll::Pending,
        }
    }

    /// When the outcome became known; `None` while the batch is pending.
    pub fn completed_at(&self) -> Option<Instant> {
        self.result.get().and(self.completed_at.get().copied())
    }

    /// Whether the outcome is known.
    #[cfg(test)]
    pub fn is_complete(&self) -> bool {
        self.result.get().is_some()
    }
}

/// A batch's bytes: still open for records, or finished (header, CRC, compression).
#[derive(Debug)]
pub(crate) enum Payload {
    /// Records are still being appended (or the batch is closed but not built yet).
    Open(BatchBuilder),
    /// The finished RecordBatch v2.
    Built(Bytes),
}

/// One batch of one partition on its way to the broker.
#[derive(Debug)]
pub(crate) struct ProducerBatch {
    pub id: u64,
    pub topic: Arc<str>,
    pub partition: i32,
    pub payload: Payload,
    pub records_count: i32,
    pub completion: Arc<BatchCompletion>,
    pub created: Instant,
    /// Sends so far.
    pub attempts: u32,
    /// Not before this instant (retry backoff).
    pub not_before: Option<Instant>,
    /// The address the last attempt failed at.
    pub failed_at: Option<String>,
    /// Whether that failure asked for new metadata (a leader that moved, a connection lost,
    /// a timeout). Then, while the metadata still routes the partition to `failed_at`, the
    /// backoff runs and metadata is refreshed; once it routes elsewhere the batch goes at
    /// once (Kafka's KIP-951: no backoff after a leader change). And it goes back to
    /// `failed_at` only with metadata fetched after the failure: a leader cut off from its
    /// cluster is replaced within the session timeout, and a retry sent to it on the old
    /// metadata waits out a whole request timeout while the partition's later batches reach
    /// the new leader and are refused there as out of order.
    pub failed_leader: bool,
    /// When the last attempt failed.
    pub failed_when: Option<Instant>,
    /// Consecutive failed attempts at `failed_at`: the exponent of the retry backoff, so a new
    /// leader's first refusal (its core not serving yet) backs off `retry_backoff_ms`, not
    /// what the old leader's failures grew it to.
    pub backoff_attempts: u32,
    /// Buffer memory to give back when the batch completes.
    pub reserved_bytes: usize,
    /// Idempotent producers: the batch's producer id, epoch and first sequence, from its first
    /// send until it completes (or is renumbered after an epoch bump).
    pub sequence: Option<Sequenced>,
    /// Whether the batch was sent with its current sequence: then the broker may have it, and
    /// it is resent alone for its partition (so a duplicate answer is unambiguous).
    pub sequence_sent: bool,
}

impl ProducerBatch {
    /// Notes that the attempt at `addr` failed (`needs_metadata`: the error asked for new
    /// metadata): the backoff's exponent grows while it fails at one address and restarts at
    /// another.
    pub fn failed(&mut self, addr: &str, needs_metadata: bool, now: Instant) {
        self.failed_when = Some(now);
        if self.failed_at.as_deref() == Some(addr) {
            self.backoff_attempts += 1;
        } else {
            self.failed_at = Some(addr.to_string());
            self.backoff_attempts = 1;
        }
        self.failed_leader = needs_metadata;
    }

    /// A new, empty batch `id` of `topic`/`partition` around `builder`.
    fn open(
        id: u64,
        topic: Arc<str>,
        partition: i32,
        builder: BatchBuilder,
        created: Instant,
    ) -> ProducerBatch {
        ProducerBatch {
            id,
            topic,
            partition,
            payload: Payload::Open(builder),
            records_count: 0,
            completion: Arc::new(BatchCompletion::default()),
            created,
            attempts: 0,
            not_before: None,
            failed_at: None,
            failed_leader: false,
            failed_when: None,
            backoff_attempts: 0,
            reserved_bytes: 0,
            sequence: None,
            sequence_sent: false,
        }
    }

    /// Gives the batch its idempotence fields (before its first send with them).
    fn set_sequence(&mut self, s: Sequenced) {
        let (pid, epoch, seq) = (s.identity.producer_id, s.identity.epoch, s.base_sequence);
        match &mut self.payload {
            Payload::Open(builder) => builder.set_producer(pid, epoch, seq),
            Payload::Built(bytes) => {
                // Renumbered after an epoch bump: the fields are inside the CRC (rare path).
                let mut patched = BytesMut::from(&bytes[..]);
                set_producer_fields(&mut patched, pid, epoch, seq);
                *bytes = patched.freeze();
            }
        }
        self.sequence = Some(s);
        self.sequence_sent = false;
    }

    /// Whether the batch must be the only one of its partition in a request.
    fn goes_alone(&self) -> bool {
        self.sequence.is_some() && self.sequence_sent
    }

    /// Bytes on the wire (uncompressed estimate while open).
    pub fn size_bytes(&self) -> usize {
        match &self.payload {
            Payload::Open(builder) => builder.size_bytes(),
            Payload::Built(bytes) => bytes.len(),
        }
    }

    /// Finishes the batch if it is still open (compresses, computes the CRC).
    pub fn build(&mut self) -> Result<()> {
        if let Payload::Open(_) = self.payload {
            let open = std::mem::replace(&mut self.payload, Payload::Built(Bytes::new()));
            if let Payload::Open(builder) = open {
                self.payload = Payload::Built(builder.build()?);
            }
        }
        Ok(())
    }
}

#[derive(Debug, Default)]
struct PartitionQueue {
    open: Option<ProducerBatch>,
    /// In batch id (creation) order, retried batches included.
    ready: VecDeque<ProducerBatch>,
    /// Idempotent producers: the partition's sequences.
    sequences: Option<PartitionSequences>,
}

impl PartitionQueue {
    /// Puts a batch back in id order (retries go before the batches created after them).
    fn insert_in_order(&mut self, batch: ProducerBatch) {
        let at = self.ready.partition_point(|b| b.id < batch.id);
        self.ready.insert(at, batch);
    }
}

/// A topic's partition count and the partitions with a leader, as of one metadata generation.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct TopicRouting {
    /// The `ClientCore` metadata generation this was taken from.
    pub generation: u64,
    pub partition_count: u32,
    pub available: Vec<u32>,
}

#[derive(Debug)]
struct TopicQueues {
    name: Arc<str>,
    /// Index = partition number.
    partitions: Vec<PartitionQueue>,
    sticky: StickyPartitioner,
    routing: Option<TopicRouting>,
}

impl TopicQueues {
    fn queue(&mut self, partition: i32) -> &mut PartitionQueue {
        let index = usize::try_from(partition).expect("partitions are checked non-negative");
        if self.partitions.len() <= index {
            self.partitions
                .resize_with(index + 1, PartitionQueue::default);
        }
        &mut self.partitions[index]
    }
}

/// Settings the accumulator needs (from `ProducerConfig`).
#[derive(Debug, Clone)]
pub(crate) struct AccumulatorConfig {
    pub batch_size_bytes: usize,
    pub linger: Duration,
    pub options: BatchOptions,
    pub request_size_bytes_max: usize,
    pub in_flight_requests_max: usize,
    pub delivery_timeout: Duration,
    /// The producer id and epoch of an idempotent producer; `None` without idempotence.
    pub identity: Option<Identity>,
}

/// A record borrowed for appending.
pub(crate) struct RecordRef<'a> {
    pub timestamp: i64,
    pub key: Option<&'a [u8]>,
    pub value: Option<&'a [u8]>,
    pub headers: &'a [(String, Option<Bytes>)],
}

/// Where an appended record went.
pub(crate) struct Appended {
    pub completion: Arc<BatchCompletion>,
    /// Offset delta of the record inside its batch.
    pub index: i32,
    /// A new batch was opened.
    #[cfg_attr(not(test), allow(dead_code))]
    pub batch_created: bool,
    /// A batch became full and is ready to send.
    #[cfg_attr(not(test), allow(dead_code))]
    pub batch_ready: bool,
    /// The sender must be woken: a batch is ready, or a new batch is due before the sender's
    /// planned wake-up (so most appends at moderate rates wake nobody).
    pub wake_sender: bool,
}

/// What `drain` hands to the sender.
#[derive(Debug, Default)]
pub(crate) struct Drained {
    /// One request per entry: destination address and its batches, grouped by partition in
    /// queue order.
    pub requests: Vec<(String, Vec<ProducerBatch>)>,
    /// Batches older than `delivery_timeout`, to fail.
    pub expired: Vec<ProducerBatch>,
    /// When `drain` should run again at the latest (a linger or backoff ends).
    pub next_wakeup: Option<Instant>,
    /// Some partition with data has no known leader: metadata should be refreshed.
    pub leader_missing: bool,
    /// Some partition's next batch backs off after its leader failed, and the metadata still
    /// names that leader: metadata should be refreshed (again) until it names another.
    pub leader_failed: bool,
    /// Some partition waits for a new producer id (its epochs are used up).
    pub producer_id_needed: bool,
}

/// The accumulator. See the module documentation.
#[derive(Debug)]
pub(crate) struct Accumulator {
    config: AccumulatorConfig,
    topics: Vec<TopicQueues>,
    topic_index: HashMap<Arc<str>, usize>,
    /// The topic of the last append: most producers send to one topic at a time, and a pointer
    /// comparison is cheaper than hashing the name.
    last_topic: Option<(Arc<str>, usize)>,
    next_batch_id: u64,
    incomplete: BTreeSet<u64>,
    flush_until: u64,
    in_flight: HashMap<String, usize>,
    seed: u64,
    /// Set by `close`: every open batch is sent at once.
    pub closing: bool,
    /// When the sender will drain again without being woken, as planned by the last `drain`:
    /// `None` = only when woken.
    sender_wakeup: Option<Instant>,
}

/// An upper bound of a record's encoded size inside a batch, including its length prefix.
pub(crate) fn record_size_upper_bytes(record: &RecordRef<'_>) -> usize {
    let bytes = |b: Option<&[u8]>| 5 + b.map_or(0, <[u8]>::len);
    let mut size = 5 + 1 + 10 + 5 + bytes(record.key) + bytes(record.value) + 5;
    for (k, v) in record.headers {
        size += 5 + k.len() + bytes(v.as_deref());
    }
    size
}

impl Accumulator {
    /// An empty accumulator; `seed` seeds the sticky partitioners.
    pub fn new(config: AccumulatorConfig, seed: u64) -> Accumulator {
        Accumulator {
            config,
            topics: Vec::new(),
            topic_index: HashMap::new(),
            last_topic: None,
            next_batch_id: 0,
            incomplete: BTreeSet::new(),
            flush_until: 0,
            in_flight: HashMap::new(),
            seed,
            closing: false,
            sender_wakeup: None,
        }
    }

    /// The index of `topic`'s queues, creating them on first use.
    pub fn topic(&mut self, topic: &Arc<str>) -> usize {
        if let Some((last, index)) = &self.last_topic {
            if Arc::ptr_eq(last, topic) || **last == **topic {
                return *index;
            }
        }
        let index = match self.topic_index.get(&**topic) {
            Some(index) => *index,
            None => {
                self.seed = crate::retry::splitmix64(self.seed);
                self.topics.push(TopicQueues {
                    name: topic.clone(),
                    partitions: Vec::new(),
                    sticky: StickyPartitioner::new(self.seed),
                    routing: None,
                });
                self.topic_index
                    .insert(topic.clone(), self.topics.len() - 1);
                self.topics.len() - 1
            }
        };
        self.last_topic = Some((topic.clone(), index));
        index
    }

    /// The cached routing of topic `index` when it is from metadata `generation`.
    pub fn routing(&self, index: usize, generation: u64) -> Option<&TopicRouting> {
        self.topics[index]
            .routing
            .as_ref()
            .filter(|r| r.generation == generation)
    }

    /// Caches the routing of topic `index`.
    pub fn set_routing(&mut self, index: usize, routing: TopicRouting) {
        self.topics[index].routing = Some(routing);
    }

    /// The sticky partition for a keyless record of topic `index`, using its cached routing.
    pub fn sticky_partition(&mut self, index: usize, record_size_bytes: usize) -> u32 {
        let batch_size_bytes = self.config.batch_size_bytes;
        let queues = &mut self.topics[index];
        let (count, available) = match &queues.routing {
            Some(r) => (r.partition_count, r.available.as_slice()),
            None => (1, &[][..]),
        };
        queues
            .sticky
            .next(available, count, record_size_bytes, batch_size_bytes)
    }

    /// Encodes `record` into the open batch of `topic`/`partition`, opening a new batch when
    /// there is none or the record does not fit.
    pub fn append(
        &mut self,
        topic_index: usize,
        partition: i32,
        record: &RecordRef<'_>,
        reserved_bytes: usize,
        now: impl FnOnce() -> Instant,
    ) -> Appended {
        let batch_size_bytes = self.config.batch_size_bytes;
        let options = self.config.options;
        let mut next_id = self.next_batch_id;
        let queues = &mut self.topics[topic_index];
        let topic = queues.name.clone();
        let queue = queues.queue(partition);
        let mut batch_ready = false;
        if let Some(open) = &queue.open {
            let Payload::Open(builder) = &open.payload else {
                unreachable!("open batches are unbuilt")
            };
            let headers = header_refs(record.headers);
            let size = builder.record_size_bytes(
                record.timestamp,
                record.key,
                record.value,
                headers.as_slice(),
            );
            if builder.size_bytes() + size > batch_size_bytes {
                queue.ready.extend(queue.open.take());
                batch_ready = true;
            }
        }
        let batch_created = queue.open.is_none();
        if batch_created {
            let capacity = batch_size_bytes.max(reserved_bytes);
            let builder = BatchBuilder::new(options, capacity);
            queue.open = Some(ProducerBatch::open(
                next_id,
                topic,
                partition,
                builder,
                now(),
            ));
            next_id += 1;
        }
        let open = queue.open.as_mut().expect("opened above");
        let Payload::Open(builder) = &mut open.payload else {
            unreachable!("open batches are unbuilt")
        };
        let headers = header_refs(record.headers);
        builder.push(
            record.timestamp,
            record.key,
            record.value,
            headers.as_slice(),
        );
        let index = open.records_count;
        open.records_count += 1;
        open.reserved_bytes += reserved_bytes;
        let completion = open.completion.clone();
        let created = open.created;
        let (id, full) = (open.id, builder.size_bytes() >= batch_size_bytes);
        if full {
            queue.ready.extend(queue.open.take());
            batch_ready = true;
        }
        self.next_batch_id = next_id;
        if batch_created {
            self.incomplete.insert(id);
        }
        let due = created + self.config.linger;
        let wake_sender =
            batch_ready || (batch_created && self.sender_wakeup.is_none_or(|at| due < at));
        Appended {
            completion,
            index,
            batch_created,
            batch_ready,
            wake_sender,
        }
    }

    /// Marks every batch that exists now as to be sent without waiting for linger; returns
    /// the mark to pass to [`Accumulator::flushed`].
    pub fn begin_flush(&mut self) -> u64 {
        self.flush_until = self.flush_until.max(self.next_batch_id);
        self.next_batch_id
    }

    /// Whether every batch created before the `begin_flush` that returned `mark` completed.
    pub fn flushed(&self, mark: u64) -> bool {
        self.incomplete.first().is_none_or(|id| *id >= mark)
    }

    /// Whether no batch is incomplete.
    pub fn is_idle(&self) -> bool {
        self.incomplete.is_empty()
    }

    /// Topics with queued data (metadata refreshes cover these).
    pub fn topics(&self) -> Vec<String> {
        self.topics.iter().map(|t| t.name.to_string()).collect()
    }

    /// Collects sendable batches; see the module documentation. `route` maps a partition to
    /// its destination address (`None` while it has no leader), from metadata fetched at
    /// `metadata_at`.
    pub fn drain(
        &mut self,
        now: Instant,
        metadata_at: Instant,
        route: impl Fn(&str, i32) -> Option<String>,
    ) -> Drained {
        let mut drained = Drained::default();
        let mut building = Building::default();
        let config = self.config.clone();
        let force_before = if self.closing {
            u64::MAX
        } else {
            self.flush_until
        };
        for queues in &mut self.topics {
            for queue in &mut queues.partitions {
                close_if_due(queue, now, &config, force_before, &mut drained.next_wakeup);
                expire(queue, now, config.delivery_timeout, &mut drained.expired);
                if let (None, Some(identity)) = (&queue.sequences, config.identity) {
                    queue.sequences = Some(PartitionSequences::new(identity));
                }
                drain_partition(
                    queue,
                    (now, metadata_at),
                    &config,
                    &route,
                    &mut self.in_flight,
                    &mut building,
                    &mut drained,
                );
            }
        }
        // A sender that got requests drains again right after sending them; otherwise it
        // sleeps until the next deadline.
        self.sender_wakeup = if drained.requests.is_empty() {
            drained.next_wakeup
        } else {
            Some(now)
        };
        drained
    }

    /// Takes back the outcome of a request to `addr`: `retry` batches go back to the front of
    /// their partitions in their original order; `done` ids are complete. Returns the buffer
    /// memory to release.
    pub fn finish_request(
        &mut self,
        addr: &str,
        done: &[(u64, usize)],
        retry: Vec<ProducerBatch>,
    ) -> usize {
        if let Some(n) = self.in_flight.get_mut(addr) {
            *n = n.saturating_sub(1);
        }
        self.requeue(retry);
        self.complete(done)
    }

    /// Puts retried batches back in their partitions, in batch id order (before the batches
    /// created after them).
    pub fn requeue(&mut self, retry: Vec<ProducerBatch>) {
        for batch in retry {
            let index = self.topic(&batch.topic);
            self.topics[index]
                .queue(batch.partition)
                .insert_in_order(batch);
        }
    }

    fn sequences(&mut self, batch: &ProducerBatch) -> Option<&mut PartitionSequences> {
        let index = self.topic(&batch.topic);
        self.topics[index].queue(batch.partition).sequences.as_mut()
    }

    /// The broker acknowledged `batch` (or answered that it already had it).
    pub fn batch_acked(&mut self, batch: &ProducerBatch) {
        if batch.sequence.is_some() {
            if let Some(s) = self.sequences(batch) {
                s.resolved(batch.id);
            }
        }
    }

    /// What to do with `batch` after `error`: without idempotence, retry what is retriable.
    /// `Renumber` clears the batch's sequence (it gets a new one when it is sent again).
    pub fn batch_refused(&mut self, batch: &mut ProducerBatch, error: &ClientError) -> Refusal {
        let Some(sent) = batch.sequence else {
            return if error.is_retriable() {
                Refusal::Retry
            } else {
                Refusal::Fail
            };
        };
        let refusal = match self.sequences(batch) {
            Some(s) => s.refused(batch.id, sent, error.code(), error.is_retriable()),
            None => Refusal::Fail,
        };
        if refusal == Refusal::Renumber {
            batch.sequence = None;
            batch.sequence_sent = false;
            self.renumber_waiting(batch);
        }
        refusal
    }

    /// After an epoch bump (or a batch of an older identity coming back), the batches of the
    /// partition waiting for their retry with an older identity's sequence are renumbered
    /// too. Left as they were, they would keep the window from handing out sequences
    /// (`can_assign` waits for every older-identity batch) while the renumbered batch in
    /// front of them waits for a sequence: neither would ever be sent.
    fn renumber_waiting(&mut self, batch: &ProducerBatch) {
        let index = self.topic(&batch.topic);
        let queue = self.topics[index].queue(batch.partition);
        let Some(sequences) = queue.sequences.as_mut() else {
            return;
        };
        for waiting in queue.ready.iter_mut() {
            let Some(sent) = waiting.sequence else {
                continue;
            };
            if !sequences.is_current(sent) {
                sequences.renumbered(waiting.id);
                waiting.sequence = None;
                waiting.sequence_sent = false;
            }
        }
    }

    /// `batch` fails for good although it was to be retried (its retries ran out).
    pub fn batch_abandoned(&mut self, batch: &ProducerBatch) {
        if let Some(sent) = batch.sequence {
            if let Some(s) = self.sequences(batch) {
                s.abandoned(batch.id, sent);
            }
        }
    }

    /// Gives the partitions that wait for one a new producer id.
    pub fn set_producer_id(&mut self, identity: Identity) {
        for queues in &mut self.topics {
            for queue in &mut queues.partitions {
                if let Some(s) = queue.sequences.as_mut() {
                    s.set_producer_id(identity);
                }
            }
        }
    }

    /// Marks batches complete; returns the buffer memory to release.
    pub fn complete(&mut self, done: &[(u64, usize)]) -> usize {
        let mut released = 0;
        for (id, reserved) in done {
            self.incomplete.remove(id);
            released += reserved;
        }
        released
    }
}

/// Header slices for the batch builder; no allocation for records without headers.
enum HeaderRefs<'a> {
    None,
    Some(Vec<(&'a [u8], Option<&'a [u8]>)>),
}

impl<'a> HeaderRefs<'a> {
    fn as_slice(&self) -> &[(&'a [u8], Option<&'a [u8]>)] {
        match self {
            HeaderRefs::None => &[],
            HeaderRefs::Some(v) => v,
        }
    }
}

fn header_refs(headers: &[(String, Option<Bytes>)]) -> HeaderRefs<'_> {
    if headers.is_empty() {
        return HeaderRefs::None;
    }
    HeaderRefs::Some(
        headers
            .iter()
            .map(|(k, v)| (k.as_bytes(), v.as_deref()))
            .collect(),
    )
}

fn earliest(slot: &mut Option<Instant>, at: Instant) {
    if slot.is_none_or(|current| at < current) {
        *slot = Some(at);
    }
}

fn close_if_due(
    queue: &mut PartitionQueue,
    now: Instant,
    config: &AccumulatorConfig,
    force_before: u64,
    next_wakeup: &mut Option<Instant>,
) {
    let Some(open) = &queue.open else { return };
    let due = open.created + config.linger;
    if due <= now || open.id < force_before {
        queue.ready.extend(queue.open.take());
    } else {
        earliest(next_wakeup, due);
    }
}

fn expire(
    queue: &mut PartitionQueue,
    now: Instant,
    timeout: Duration,
    expired: &mut Vec<ProducerBatch>,
) {
    while queue
        .ready
        .front()
        .is_some_and(|b| b.created + timeout <= now)
    {
        let batch = queue.ready.pop_front().expect("front exists");
        if let (Some(sent), Some(s)) = (batch.sequence, queue.sequences.as_mut()) {
            s.abandoned(batch.id, sent);
        }
        expired.push(batch);
    }
}

/// The requests `drain` is filling: per address, the current request's slot and bytes, and
/// whether the partition being drained already put a batch into it (and whether that batch
/// goes alone).
#[derive(Default)]
struct Building {
    by_addr: HashMap<String, (usize, usize)>,
    partition_in_slot: Option<(usize, bool)>,
}

/// Whether `front` still waits for its backoff (the wake-up is noted in `drained`). A batch
/// whose failed leader the metadata has replaced goes at once (KIP-951); one whose leader the
/// metadata still names asks for a metadata refresh, and after its backoff goes back to that
/// leader only once the metadata is newer than the failure (the refresh wakes the sender).
fn waits_out_backoff(
    front: &ProducerBatch,
    (now, metadata_at): (Instant, Instant),
    route: &impl Fn(&str, i32) -> Option<String>,
    drained: &mut Drained,
) -> bool {
    let moved = front
        .failed_at
        .as_ref()
        .filter(|_| front.failed_leader)
        .map(|failed| route(&front.topic, front.partition).is_some_and(|addr| addr != *failed));
    let Some(at) = front.not_before.filter(|at| *at > now) else {
        let stale = front
            .failed_when
            .is_some_and(|failed| metadata_at <= failed);
        if moved == Some(false) && stale {
            drained.leader_failed = true;
            return true;
        }
        return false;
    };
    if moved == Some(true) {
        return false;
    }
    drained.leader_failed |= moved.is_some();
    earliest(&mut drained.next_wakeup, at);
    true
}

/// Moves the sendable batches of one partition into requests: in order, while the front batch
/// is not waiting for its backoff, has a leader, fits (request size, requests in flight per
/// address) and, for idempotent producers, can keep or get a sequence. A batch sent before
/// with its sequence travels alone for its partition.
fn drain_partition(
    queue: &mut PartitionQueue,
    (now, metadata_at): (Instant, Instant),
    config: &AccumulatorConfig,
    route: &impl Fn(&str, i32) -> Option<String>,
    in_flight: &mut HashMap<String, usize>,
    building: &mut Building,
    drained: &mut Drained,
) {
    building.partition_in_slot = None;
    while let Some(front) = queue.ready.front() {
        if waits_out_backoff(front, (now, metadata_at), route, drained) {
            return;
        }
        if let (None, Some(s)) = (front.sequence, &queue.sequences) {
            if !s.can_assign() {
                drained.producer_id_needed |= s.needs_producer_id();
                return;
            }
        }
        let Some(addr) = route(&front.topic, front.partition) else {
            drained.leader_missing = true;
            return;
        };
        let size = front.size_bytes();
        let alone = front.goes_alone();
        let shares = |slot: usize| {
            building
                .partition_in_slot
                .is_none_or(|(s, was_alone)| s != slot || !(alone || was_alone))
        };
        let slot = match building.by_addr.get(&addr) {
            Some(&(slot, bytes))
                if (bytes == 0 || bytes + size <= config.request_size_bytes_max)
                    && shares(slot) =>
            {
                slot
            }
            _ => {
                let n = in_flight.entry(addr.clone()).or_insert(0);
                if *n >= config.in_flight_requests_max {
                    return;
                }
                *n += 1;
                drained.requests.push((addr.clone(), Vec::new()));
                building
                    .by_addr
                    .insert(addr.clone(), (drained.requests.len() - 1, 0));
                drained.requests.len() - 1
            }
        };
        let mut batch = queue.ready.pop_front().expect("front exists");
        if batch.sequence.is_none() {
            if let Some(s) = queue.sequences.as_mut() {
                batch.set_sequence(s.assign(batch.id, batch.records_count));
            }
        }
        building.by_addr.get_mut(&addr).expect("inserted").1 += size;
        building.partition_in_slot = Some((slot, alone));
        drained.requests[slot].1.push(batch);
    }
}

/// The bytes a request built from `batches` carries in its payload region, at least the
/// batch headers.
#[cfg(test)]
fn payload_size_bytes(batches: &[ProducerBatch]) -> usize {
    batches.iter().map(ProducerBatch::size_bytes).sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::producer::sequence::Identity;

    fn config() -> AccumulatorConfig {
        AccumulatorConfig {
            batch_size_bytes: 1000,
            linger: Duration::from_millis(5),
            options: BatchOptions::default(),
            request_size_bytes_max: 2500,
            in_flight_requests_max: 2,
            delivery_timeout: Duration::from_secs(10),
            identity: None,
        }
    }

    fn value(n: usize) -> Vec<u8> {
        vec![b'x'; n]
    }

    fn append(
        acc: &mut Accumulator,
        topic: &Arc<str>,
        partition: i32,
        v: &[u8],
        now: Instant,
    ) -> Appended {
        let record = RecordRef {
            timestamp: 1,
            key: None,
            value: Some(v),
            headers: &[],
        };
        let size = record_size_upper_bytes(&record);
        let index = acc.topic(topic);
        acc.append(index, partition, &record, size, || now)
    }

    fn route(_: &str, p: i32) -> Option<String> {
        Some(format!("core{}", p % 2))
    }

    /// `acc.drain` by `route` on metadata as fresh as the drain (fetched after every failure).
    fn drain_fresh(acc: &mut Accumulator, now: Instant) -> Drained {
        acc.drain(now, now, route)
    }

    #[test]
    fn the_sender_is_woken_only_when_a_batch_is_due_before_its_plan_or_ready() {
        let mut acc = Accumulator::new(config(), 1);
        let t: Arc<str> = "t".into();
        let t0 = Instant::now();
        // Nothing planned yet: the first batch wakes the sender.
        assert!(append(&mut acc, &t, 0, &value(10), t0).wake_sender);
        // The sender drains and plans to wake when partition 0's batch is due (t0 + 5 ms).
        let drained = drain_fresh(&mut acc, t0);
        assert!(drained.requests.is_empty());
        assert_eq!(drained.next_wakeup, Some(t0 + Duration::from_millis(5)));
        // A batch opened later is due later: no need to wake the sender.
        let later = append(&mut acc, &t, 1, &value(10), t0 + Duration::from_millis(1));
        assert!(later.batch_created && !later.wake_sender);
        // More records in open batches wake nobody; a full batch does.
        assert!(!append(&mut acc, &t, 1, &value(10), t0 + Duration::from_millis(2)).wake_sender);
        assert!(append(&mut acc, &t, 1, &value(990), t0 + Duration::from_millis(2)).wake_sender);
        // At t0 + 5 ms the sender sends partition 0's batch and the full one, then drains
        // again at once: new batches need no wake-up.
        let drained = drain_fresh(&mut acc, t0 + Duration::from_millis(5));
        assert!(!drained.requests.is_empty());
        assert!(!append(&mut acc, &t, 2, &value(10), t0 + Duration::from_millis(5)).wake_sender);
        // A sender that planned to sleep until woken is woken by a new batch.
        for (addr, batches) in drained.requests {
            let ids: Vec<_> = batches.iter().map(|b| (b.id, b.reserved_bytes)).collect();
            acc.finish_request(&addr, &ids, Vec::new());
        }
        let now = t0 + Duration::from_millis(20);
        let drained = drain_fresh(&mut acc, now);
        assert!(!drained.requests.is_empty(), "partitions 1 and 2 are due");
        for (addr, batches) in drained.requests {
            let ids: Vec<_> = batches.iter().map(|b| (b.id, b.reserved_bytes)).collect();
            acc.finish_request(&addr, &ids, Vec::new());
        }
        let idle = drain_fresh(&mut acc, now);
        assert!(idle.requests.is_empty() && idle.next_wakeup.is_none());
        assert!(append(&mut acc, &t, 3, &value(10), now).wake_sender);
    }

    #[test]
    fn records_fill_a_batch_until_batch_size_then_it_is_ready() {
        let mut acc = Accumulator::new(config(), 1);
        let t: Arc<str> = "t".into();
        let now = Instant::now();
        let first = append(&mut acc, &t, 0, &value(300), now);
        assert!(first.batch_created && !first.batch_ready);
        assert_eq!(append(&mut acc, &t, 0, &value(300), now).index, 1);
        // The third record fits under 1000 with the header, the fourth closes the batch.
        let a3 = append(&mut acc, &t, 0, &value(300), now);
        assert_eq!(a3.index, 2);
        let a4 = append(&mut acc, &t, 0, &value(300), now);
        assert!(a4.batch_ready && a4.batch_created);
        assert_eq!(a4.index, 0);
        // Before linger only the full batch is sendable.
        let drained = drain_fresh(&mut acc, now);
        assert_eq!(drained.requests.len(), 1);
        assert_eq!(drained.requests[0].1.len(), 1);
        assert_eq!(drained.requests[0].1[0].records_count, 3);
        assert_eq!(drained.next_wakeup, Some(now + Duration::from_millis(5)));
        // After linger the open batch goes too.
        let later = drain_fresh(&mut acc, now + Duration::from_millis(5));
        assert_eq!(later.requests[0].1[0].records_count, 1);
        assert!(later.next_wakeup.is_none());
    }

    #[test]
    fn drain_groups_by_address_and_respects_request_size_and_in_flight_limits() {
        let mut acc = Accumulator::new(config(), 1);
        let t: Arc<str> = "t".into();
        let now = Instant::now();
        for p in 0..4 {
            for _ in 0..7 {
                append(&mut acc, &t, p, &value(400), now);
            }
        }
        // Each partition: three full batches (2 records each) and one open (1 record): more
        // than two requests of 2500 bytes per address.
        let drained = drain_fresh(&mut acc, now + Duration::from_millis(5));
        // Requests per address are limited to 2500 bytes: 2 batches of ~900 + more in a second
        // request; two requests per address at most (in flight).
        let mut per_addr: HashMap<String, usize> = HashMap::new();
        for (addr, batches) in &drained.requests {
            *per_addr.entry(addr.clone()).or_default() += 1;
            assert!(payload_size_bytes(batches) <= 2500);
            // Batches of one partition stay contiguous and in order.
            for w in batches.windows(2) {
                if w[0].partition == w[1].partition {
                    assert!(w[0].id < w[1].id);
                }
            }
        }
        assert!(per_addr.values().all(|n| *n == 2));
        // Nothing more goes out until a request finishes.
        assert!(drain_fresh(&mut acc, now + Duration::from_millis(6))
            .requests
            .is_empty());
        let (addr, batches) = drained.requests.into_iter().next().unwrap();
        let done: Vec<_> = batches.iter().map(|b| (b.id, b.reserved_bytes)).collect();
        assert!(acc.finish_request(&addr, &done, Vec::new()) > 0);
        assert!(!drain_fresh(&mut acc, now + Duration::from_millis(6))
            .requests
            .is_empty());
    }

    #[test]
    fn retried_batches_go_back_in_order_after_their_backoff() {
        let mut cfg = config();
        cfg.request_size_bytes_max = 1 << 20;
        let mut acc = Accumulator::new(cfg, 1);
        let t: Arc<str> = "t".into();
        let now = Instant::now();
        for _ in 0..6 {
            append(&mut acc, &t, 0, &value(400), now);
        }
        let mark = acc.begin_flush();
        let drained = drain_fresh(&mut acc, now);
        let (addr, mut batches) = drained.requests.into_iter().next().unwrap();
        assert_eq!(batches.len(), 3);
        let ids: Vec<u64> = batches.iter().map(|b| b.id).collect();
        let retry_at = now + Duration::from_millis(100);
        for b in &mut batches {
            b.not_before = Some(retry_at);
            b.attempts = 1;
        }
        acc.finish_request(&addr, &[], batches);
        assert!(!acc.flushed(mark));
        let early = drain_fresh(&mut acc, now + Duration::from_millis(50));
        assert!(early.requests.is_empty());
        assert_eq!(early.next_wakeup, Some(retry_at));
        let again = drain_fresh(&mut acc, retry_at);
        let (addr, batches) = again.requests.into_iter().next().unwrap();
        assert_eq!(batches.iter().map(|b| b.id).collect::<Vec<_>>(), ids);
        let done: Vec<_> = batches.iter().map(|b| (b.id, b.reserved_bytes)).collect();
        acc.finish_request(&addr, &done, Vec::new());
        assert!(acc.flushed(mark));
        assert!(acc.is_idle());
    }

    #[test]
    fn a_batch_whose_leader_failed_goes_at_once_when_the_metadata_names_another() {
        let mut acc = Accumulator::new(config(), 1);
        let t: Arc<str> = "t".into();
        let now = Instant::now();
        append(&mut acc, &t, 0, &value(10), now);
        let drained = drain_fresh(&mut acc, now + Duration::from_millis(5));
        let (addr, mut batches) = drained.requests.into_iter().next().unwrap();
        let retry_at = now + Duration::from_millis(1000);
        for b in &mut batches {
            b.not_before = Some(retry_at);
        }
        assert_eq!(batches[0].backoff_attempts, 0);
        batches[0].failed(&addr, true, now);
        batches[0].failed(&addr, true, now);
        assert_eq!(batches[0].backoff_attempts, 2, "grows at one address");
        acc.finish_request(&addr, &[], batches);
        let later = now + Duration::from_millis(10);
        let same = drain_fresh(&mut acc, later);
        assert!(
            same.requests.is_empty(),
            "the backoff runs at the same leader"
        );
        assert!(
            same.leader_failed,
            "metadata is asked for while it names the failed leader"
        );
        assert_eq!(same.next_wakeup, Some(retry_at));
        let moved = acc.drain(later, later, |_, _| Some("elsewhere".to_string()));
        assert!(!moved.leader_failed);
        let (to, sent) = moved.requests.into_iter().next().expect("sent at once");
        assert_eq!((to.as_str(), sent.len()), ("elsewhere", 1));
        // A failure that did not ask for metadata (NotEnoughReplicas) keeps its backoff.
        let mut sent = sent;
        sent[0].failed(&to, false, now);
        assert_eq!(sent[0].backoff_attempts, 1, "restarts at another address");
        sent[0].not_before = Some(retry_at);
        acc.finish_request(&to, &[], sent);
        let kept = acc.drain(later, later, |_, _| Some("third".to_string()));
        assert!(kept.requests.is_empty() && !kept.leader_failed);
    }

    #[test]
    fn a_batch_goes_back_to_its_failed_leader_only_with_metadata_newer_than_the_failure() {
        let mut acc = Accumulator::new(config(), 1);
        let t: Arc<str> = "t".into();
        let now = Instant::now();
        append(&mut acc, &t, 0, &value(10), now);
        let sent_at = now + Duration::from_millis(5);
        let drained = drain_fresh(&mut acc, sent_at);
        let (addr, mut batches) = drained.requests.into_iter().next().unwrap();
        // The request timed out: the batch backs off 50 ms and the refresh is asked for.
        let failed = now + Duration::from_millis(3_005);
        batches[0].failed(&addr, true, failed);
        batches[0].not_before = Some(failed + Duration::from_millis(50));
        acc.finish_request(&addr, &[], batches);
        let after_backoff = failed + Duration::from_millis(60);
        // Metadata from before the failure still names the leader: the batch waits for the
        // refresh instead of going back to a leader that stopped answering.
        let stale = acc.drain(after_backoff, sent_at, route);
        assert!(stale.requests.is_empty(), "not resent on old metadata");
        assert!(stale.leader_failed, "and a refresh is asked for");
        // Metadata fetched after the failure that still names it: the batch goes there.
        let fresh = acc.drain(after_backoff, failed + Duration::from_millis(55), route);
        let (to, sent) = fresh.requests.into_iter().next().expect("resent");
        assert_eq!((to, sent.len()), (addr, 1));
        assert!(!fresh.leader_failed);
    }

    #[test]
    fn partitions_without_leader_wait_and_old_batches_expire() {
        let mut acc = Accumulator::new(config(), 1);
        let t: Arc<str> = "t".into();
        let now = Instant::now();
        append(&mut acc, &t, 1, &value(10), now);
        let drained = acc.drain(
            now + Duration::from_millis(5),
            now + Duration::from_millis(5),
            |_, _| None,
        );
        assert!(drained.leader_missing);
        assert!(drained.requests.is_empty());
        let late = acc.drain(
            now + Duration::from_secs(10),
            now + Duration::from_secs(10),
            |_, _| None,
        );
        assert_eq!(late.expired.len(), 1);
    }

    #[test]
    fn a_record_larger_than_the_batch_size_gets_its_own_batch() {
        let mut acc = Accumulator::new(config(), 1);
        let t: Arc<str> = "t".into();
        let now = Instant::now();
        append(&mut acc, &t, 0, &value(10), now);
        let big = append(&mut acc, &t, 0, &value(1500), now);
        assert!(big.batch_ready && big.batch_created && big.index == 0);
        let drained = drain_fresh(&mut acc, now);
        let batches = &drained.requests[0].1;
        assert_eq!(batches.len(), 2);
        assert_eq!(batches[1].records_count, 1);
        assert!(batches[1].size_bytes() > 1500);
    }

    #[test]
    fn built_batches_decode_to_the_appended_records() {
        let mut acc = Accumulator::new(config(), 1);
        let t: Arc<str> = "t".into();
        let now = Instant::now();
        let headers = vec![("h".to_string(), Some(Bytes::from_static(b"x")))];
        let record = RecordRef {
            timestamp: 77,
            key: Some(b"k"),
            value: Some(b"v"),
            headers: &headers,
        };
        let index = acc.topic(&t);
        acc.append(index, 0, &record, 64, || now);
        acc.append(
            index,
            0,
            &RecordRef {
                timestamp: 78,
                key: None,
                value: None,
                headers: &[],
            },
            64,
            || now,
        );
        acc.closing = true;
        let mut drained = drain_fresh(&mut acc, now);
        let batch = &mut drained.requests[0].1[0];
        batch.build().unwrap();
        let Payload::Built(bytes) = &batch.payload else {
            panic!()
        };
        let parsed = borges_protocol::batch::RecordBatch::parse(bytes.clone()).unwrap();
        let records = parsed.records(1 << 20).unwrap();
        assert_eq!(records.len(), 2);
        assert_eq!(records[0].key.as_deref(), Some(&b"k"[..]));
        assert_eq!(records[0].headers[0].value.as_deref(), Some(&b"x"[..]));
        assert_eq!(records[1].timestamp, 78);
        assert_eq!(records[1].value, None);
    }

    fn idempotent_config() -> AccumulatorConfig {
        AccumulatorConfig {
            request_size_bytes_max: 1 << 20,
            in_flight_requests_max: 100,
            identity: Some(Identity {
                producer_id: 7,
                epoch: 0,
            }),
            ..config()
        }
    }

    fn header(batch: &mut ProducerBatch) -> borges_protocol::batch::BatchHeader {
        batch.build().unwrap();
        let Payload::Built(bytes) = &batch.payload else {
            panic!()
        };
        borges_protocol::batch::validate(bytes).unwrap()
    }

    #[test]
    fn idempotent_batches_are_numbered_in_order_five_per_partition_at_most() {
        let mut acc = Accumulator::new(idempotent_config(), 1);
        let t: Arc<str> = "t".into();
        let now = Instant::now();
        // Seven full batches of two records each on partition 0.
        for _ in 0..14 {
            append(&mut acc, &t, 0, &value(400), now);
        }
        let mut drained = drain_fresh(&mut acc, now);
        let (addr, batches) = &mut drained.requests[0];
        assert_eq!(batches.len(), 5, "five unresolved batches per partition");
        for (i, b) in batches.iter_mut().enumerate() {
            let h = header(b);
            assert_eq!((h.producer_id, h.producer_epoch), (7, 0));
            assert_eq!(h.base_sequence, 2 * i as i32);
        }
        assert!(drain_fresh(&mut acc, now).requests.is_empty());
        // The first is acknowledged: one more may go, numbered after the fifth.
        let first = batches.remove(0);
        acc.batch_acked(&first);
        acc.finish_request(addr, &[(first.id, first.reserved_bytes)], Vec::new());
        let mut next = drain_fresh(&mut acc, now);
        assert_eq!(next.requests[0].1.len(), 1);
        assert_eq!(header(&mut next.requests[0].1[0]).base_sequence, 10);
    }

    #[test]
    fn retried_batches_go_alone_and_in_id_order() {
        let mut acc = Accumulator::new(idempotent_config(), 1);
        let t: Arc<str> = "t".into();
        let now = Instant::now();
        for _ in 0..6 {
            append(&mut acc, &t, 0, &value(400), now);
        }
        let drained = drain_fresh(&mut acc, now + Duration::from_millis(5));
        let (addr, mut batches) = drained.requests.into_iter().next().unwrap();
        assert_eq!(batches.len(), 3, "fresh batches share a request");
        for b in &mut batches {
            b.build().unwrap();
            b.attempts = 1;
            b.sequence_sent = true;
        }
        // The responses come back in an order that would put them out of order at the front.
        let ids: Vec<u64> = batches.iter().map(|b| b.id).collect();
        let mut batches = batches.into_iter();
        let (b0, b1, b2) = (
            batches.next().unwrap(),
            batches.next().unwrap(),
            batches.next().unwrap(),
        );
        acc.finish_request(&addr, &[], vec![b1]);
        acc.requeue(vec![b2, b0]);
        let again = drain_fresh(&mut acc, now);
        assert_eq!(again.requests.len(), 3, "one request per retried batch");
        let resent: Vec<u64> = again.requests.iter().map(|(_, b)| b[0].id).collect();
        assert_eq!(resent, ids);
        assert!(again.requests.iter().all(|(_, b)| b.len() == 1));
    }

    #[test]
    fn an_unresolvable_gap_renumbers_the_partition_with_a_new_epoch() {
        let mut acc = Accumulator::new(idempotent_config(), 1);
        let t: Arc<str> = "t".into();
        let now = Instant::now();
        for _ in 0..4 {
            append(&mut acc, &t, 0, &value(400), now);
        }
        let mut drained = drain_fresh(&mut acc, now + Duration::from_millis(5));
        let (addr, batches) = drained.requests.remove(0);
        let gap = ClientError::Broker {
            code: borges_protocol::ErrorCode::OutOfOrderSequenceNumber,
            message: None,
        };
        let mut retry = Vec::new();
        for mut b in batches {
            b.build().unwrap();
            b.sequence_sent = true;
            let refusal = acc.batch_refused(&mut b, &gap);
            assert_eq!(refusal, Refusal::Renumber, "batch {}", b.id);
            retry.push(b);
        }
        acc.finish_request(&addr, &[], retry);
        let mut again = drain_fresh(&mut acc, now);
        let resent = &mut again.requests[0].1;
        assert_eq!(
            resent.len(),
            2,
            "renumbered batches are fresh: they share a request"
        );
        let h: Vec<_> = resent.iter_mut().map(header).collect();
        assert_eq!((h[0].producer_epoch, h[0].base_sequence), (1, 0));
        assert_eq!((h[1].producer_epoch, h[1].base_sequence), (1, 2));
    }

    /// A batch waiting for its retry with the old epoch's sequence when an earlier batch of its
    /// partition causes the bump is renumbered too: it would otherwise keep the renumbered
    /// batch in front of it from getting a sequence, and neither would ever be sent again.
    #[test]
    fn a_bump_renumbers_the_batches_waiting_with_the_old_epoch() {
        let mut acc = Accumulator::new(idempotent_config(), 1);
        let t: Arc<str> = "t".into();
        let now = Instant::now();
        let mut requests = Vec::new();
        for i in 0..2 {
            append(&mut acc, &t, 0, &value(400), now);
            let at = now + Duration::from_millis(5 * (i + 1));
            requests.push(drain_fresh(&mut acc, at).requests.remove(0));
        }
        let (addr_b, mut b) = requests.pop().unwrap();
        let (addr_a, mut a) = requests.pop().unwrap();
        let moved = ClientError::Broker {
            code: borges_protocol::ErrorCode::NotLeaderOrFollower,
            message: None,
        };
        let gap = ClientError::Broker {
            code: borges_protocol::ErrorCode::OutOfOrderSequenceNumber,
            message: None,
        };
        b[0].sequence_sent = true;
        assert_eq!(acc.batch_refused(&mut b[0], &moved), Refusal::Retry);
        acc.finish_request(&addr_b, &[], b);
        a[0].sequence_sent = true;
        assert_eq!(acc.batch_refused(&mut a[0], &gap), Refusal::Renumber);
        acc.finish_request(&addr_a, &[], a);
        let later = now + Duration::from_millis(20);
        let mut again = drain_fresh(&mut acc, later);
        let mut resent: Vec<ProducerBatch> =
            again.requests.drain(..).flat_map(|(_, b)| b).collect();
        let h: Vec<_> = resent.iter_mut().map(header).collect();
        let fields: Vec<_> = h
            .iter()
            .map(|h| (h.producer_epoch, h.base_sequence))
            .collect();
        assert_eq!(fields, [(1, 0), (1, 1)], "both renumbered, in order");
    }

    #[test]
    fn completion_wakes_and_reports_once() {
        let c = BatchCompletion::default();
        assert!(!c.is_complete());
        assert_eq!(c.completed_at(), None);
        let before = Instant::now();
        c.complete(Ok(BatchAck {
            base_offset: 5,
            log_append_time_ms: -1,
        }));
        let at = c.completed_at().expect("completed");
        assert!(at >= before && at <= Instant::now());
        c.complete(Ok(BatchAck {
            base_offset: 9,
            log_append_time_ms: -1,
        }));
        let waker = std::task::Waker::noop();
        let mut cx = Context::from_waker(waker);
        match c.poll_result(&mut cx) {
            Poll::Ready(Ok(ack)) => assert_eq!(ack.base_offset, 5),
            other => panic!("{other:?}"),
        }
        assert_eq!(
            c.completed_at(),
            Some(at),
            "the first outcome's time is kept"
        );
    }
}

#[cfg(test)]
mod proptests {
    use super::*;
    use proptest::prelude::*;

    /// (timestamp, key, value, headers) of a generated record.
    type GenRecord = (
        i64,
        Option<Vec<u8>>,
        Option<Vec<u8>>,
        Vec<(String, Option<Vec<u8>>)>,
    );
    /// (timestamp, key, value, header count) of a record, per partition.
    type Seen = Vec<Vec<(i64, Option<Vec<u8>>, Option<Vec<u8>>, usize)>>;

    fn record_strategy() -> impl Strategy<Value = GenRecord> {
        (
            0i64..4_000_000_000_000,
            proptest::option::of(proptest::collection::vec(any::<u8>(), 0..40)),
            proptest::option::of(proptest::collection::vec(any::<u8>(), 0..300)),
            proptest::collection::vec(
                (
                    "[a-z]{1,5}",
                    proptest::option::of(proptest::collection::vec(any::<u8>(), 0..8)),
                ),
                0..3,
            ),
        )
    }

    proptest! {
        /// Whatever is appended comes back, in order, from the built batches of each partition,
        /// with the offset deltas the delivery futures report.
        #[test]
        fn appended_records_decode_from_the_built_batches(
            records in proptest::collection::vec((0i32..3, record_strategy()), 1..60),
            batch_size_bytes in 200usize..2000,
            zstd in any::<bool>(),
        ) {
            let options = BatchOptions {
                compression: if zstd { borges_protocol::batch::Compression::Zstd } else { borges_protocol::batch::Compression::None },
                ..BatchOptions::default()
            };
            let config = AccumulatorConfig {
                batch_size_bytes,
                linger: Duration::from_millis(0),
                options,
                request_size_bytes_max: 1 << 20,
                in_flight_requests_max: 100,
                delivery_timeout: Duration::from_secs(60),
                identity: None,
            };
            let mut acc = Accumulator::new(config, 1);
            let topic: Arc<str> = "t".into();
            let index = acc.topic(&topic);
            let now = Instant::now();
            let mut expected: Seen = vec![Vec::new(); 3];
            let mut positions = Vec::new();
            for (partition, (ts, key, value, headers)) in &records {
                let headers: Vec<(String, Option<Bytes>)> = headers.iter().map(|(k, v)| (k.clone(), v.clone().map(Bytes::from))).collect();
                let record = RecordRef { timestamp: *ts, key: key.as_deref(), value: value.as_deref(), headers: &headers };
                let size = record_size_upper_bytes(&record);
                let appended = acc.append(index, *partition, &record, size, || now);
                positions.push((*partition, appended.completion.clone(), appended.index));
                expected[*partition as usize].push((*ts, key.clone(), value.clone(), headers.len()));
            }
            acc.closing = true;
            let drained = acc.drain(now, now, |_, p| Some(format!("core{p}")));
            let mut decoded: Seen = vec![Vec::new(); 3];
            let mut next_offset = [0i64; 3];
            for (_, mut batches) in drained.requests {
                for batch in &mut batches {
                    batch.build().unwrap();
                    let Payload::Built(bytes) = &batch.payload else { unreachable!() };
                    let parsed = borges_protocol::batch::RecordBatch::parse(bytes.clone()).unwrap();
                    prop_assert_eq!(parsed.records_count(), batch.records_count);
                    let p = batch.partition as usize;
                    batch.completion.complete(Ok(BatchAck { base_offset: next_offset[p], log_append_time_ms: -1 }));
                    next_offset[p] += i64::from(batch.records_count);
                    for r in parsed.records(1 << 20).unwrap() {
                        decoded[p].push((r.timestamp, r.key.map(|b| b.to_vec()), r.value.map(|b| b.to_vec()), r.headers.len()));
                    }
                }
            }
            prop_assert_eq!(decoded, expected);
            // Each record's batch offset + index is its position in its partition.
            let mut seen = [0i64; 3];
            let waker = std::task::Waker::noop();
            let mut cx = Context::from_waker(waker);
            for (partition, completion, idx) in positions {
                let Poll::Ready(Ok(ack)) = completion.poll_result(&mut cx) else { panic!("incomplete") };
                prop_assert_eq!(ack.base_offset + i64::from(idx), seen[partition as usize]);
                seen[partition as usize] += 1;
            }
        }
    }
}
