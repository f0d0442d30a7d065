//! The consumer: assigned partitions, positions, pipelined fetches, record decoding.
//!
//! Each poll keeps one fetch in flight per destination (the core that owns the partitions):
//! as soon as a response arrives, the next fetch for that core goes out from the positions
//! after its batches, before the application sees the records, so the network and the broker
//! work while the application processes. Responses are decoded lazily: at most one undecoded
//! response per core waits behind the records already buffered.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use borges_protocol::batch::{BatchError, BatchHeader, RecordBatch};
use borges_protocol::{wire, ApiKey, ErrorCode};
use bytes::Bytes;
use tokio::sync::mpsc;

use crate::admin::{list_offsets, list_offsets_until};
use crate::client::ClientCore;
use crate::codec::obj;
use crate::codec::{self, decode};
use crate::config::{ClientConfig, ConsumerConfig, OffsetReset};
use crate::connection::{await_reply, Reply, Request};
use crate::error::{check_code, ClientError, Result};
use crate::group::{self, Group, GroupSettings};
use crate::retry::{WarnLimiter, WARN_INTERVAL_MS};
use crate::types::{ConsumerRecord, Offset, OffsetSpec, TopicPartition};

/// Pipelined requests per consumer connection (one fetch plus offset lookups).
const CONSUMER_IN_FLIGHT_REQUESTS_MAX: usize = 4;
/// How long `partitions_for` and `assign` wait for a topic to appear in the metadata: a
/// consumer reads existing topics, so an unknown topic fails after one fresh lookup plus a
/// short grace period.
const TOPIC_METADATA_WAIT_MS: u64 = 1_000;
/// How long one wait of [`Consumer::stream`] lasts before it polls again.
const STREAM_POLL_MS: u64 = 1_000;

/// Callbacks for group mode: the group coordinator assigns partitions to members; a member
/// hears about changes through this listener.
pub trait RebalanceListener: Send {
    /// Partitions newly assigned to this member; called before records of them are returned.
    fn on_partitions_assigned(&mut self, partitions: &[TopicPartition]);
    /// Partitions taken away; called before they go, so the member can commit its positions.
    fn on_partitions_revoked(&mut self, partitions: &[TopicPartition]);
}

struct PartitionState {
    topic: Arc<str>,
    /// The next offset `poll()` returns; `None` until reset by `auto_offset_reset`.
    position: Option<i64>,
    /// The next offset to fetch (ahead of `position` by what is buffered).
    fetch_position: i64,
    /// Bumped by seek and reset, so that fetches sent before are ignored.
    generation: u64,
    /// Records of this partition in the buffer.
    buffered: usize,
    high_watermark: i64,
    /// Paused by the application: not fetched, its buffered records are held back.
    paused: bool,
    /// A fetched batch at `fetch_position` failed its checks: the partition is not fetched, and
    /// once its buffered records are returned `poll` reports this until a seek moves past it.
    corrupt: Option<Corrupt>,
    /// The fetch offset the broker called out of range, until the reset is logged.
    out_of_range: Option<i64>,
}

impl PartitionState {
    fn new(topic: &str, position: Option<i64>) -> PartitionState {
        PartitionState {
            topic: topic.into(),
            position,
            fetch_position: position.unwrap_or(0),
            generation: 0,
            buffered: 0,
            high_watermark: -1,
            paused: false,
            corrupt: None,
            out_of_range: None,
        }
    }
}

/// What one fetch asked for, to check its response against.
struct SentFetch {
    addr: String,
    partitions: Vec<(TopicPartition, u64, i64)>,
}

struct FetchDone {
    sent: SentFetch,
    reply: Reply,
}

/// Reads records from assigned partitions. Not `Clone`; `poll` takes `&mut self`. `Send` and
/// `Sync`: a consumer can be polled inside `tokio::spawn`.
///
/// ```no_run
/// # async fn example() -> borges_client::Result<()> {
/// use borges_client::{ClientConfig, Consumer, ConsumerConfig, Offset, TopicPartition};
/// use std::time::Duration;
/// let mut consumer = Consumer::new(ClientConfig::new("127.0.0.1:9292"), ConsumerConfig::default()).await?;
/// let tp = TopicPartition::new("orders", 0);
/// consumer.assign(vec![tp.clone()]).await?;
/// consumer.seek(&tp, Offset::Timestamp(1_700_000_000_000)).await?;
/// loop {
///     for record in consumer.poll(Duration::from_millis(500)).await? {
///         println!("{}@{}: {:?}", record.partition, record.offset, record.value);
///     }
/// }
/// # }
/// ```
pub struct Consumer {
    core: Arc<ClientCore>,
    config: ConsumerConfig,
    partitions: BTreeMap<TopicPartition, PartitionState>,
    buffered: VecDeque<ConsumerRecord>,
    in_flight: HashMap<String, ()>,
    completed: VecDeque<FetchDone>,
    results_tx: mpsc::UnboundedSender<FetchDone>,
    results_rx: mpsc::UnboundedReceiver<FetchDone>,
    retry_at: Option<Instant>,
    refresh_needed: bool,
    /// Group mode: membership, listener, last auto-commit.
    group: Option<Group>,
    /// Behind a mutex only so that `Consumer` is `Sync` (and `poll` futures are `Send`);
    /// reached through `&mut self`, never locked.
    listener: Option<std::sync::Mutex<Box<dyn RebalanceListener>>>,
    last_auto_commit: Instant,
    /// Assigned partitions that are paused (0 keeps `poll` on its fast path).
    paused_count: usize,
    /// Rate limit of the warnings about what retries hide (failing fetches, missing topics).
    warnings: WarnLimiter,
}

impl Consumer {
    /// Connects to a bootstrap broker. With `group_id` set, call [`Consumer::subscribe`] to
    /// join the group (or [`Consumer::assign`] to read without joining, committing to the
    /// group only by explicit commits).
    pub async fn new(client: ClientConfig, config: ConsumerConfig) -> Result<Consumer> {
        config.validate()?;
        if config.group_id.as_deref() == Some("") {
            return Err(ClientError::InvalidConfig(
                "group_id must not be empty".into(),
            ));
        }
        let core = ClientCore::new(client, CONSUMER_IN_FLIGHT_REQUESTS_MAX)?;
        core.refresh_metadata(Some(&[])).await?;
        let (results_tx, results_rx) = mpsc::unbounded_channel();
        Ok(Consumer {
            core,
            config,
            partitions: BTreeMap::new(),
            buffered: VecDeque::new(),
            in_flight: HashMap::new(),
            completed: VecDeque::new(),
            results_tx,
            results_rx,
            retry_at: None,
            refresh_needed: false,
            group: None,
            listener: None,
            last_auto_commit: Instant::now(),
            paused_count: 0,
            warnings: WarnLimiter::new(WARN_INTERVAL_MS),
        })
    }

    /// Every partition of `topic`, from fresh metadata.
    pub async fn partitions_for(&self, topic: &str) -> Result<Vec<TopicPartition>> {
        let topics = [topic.to_string()];
        let metadata = self
            .core
            .metadata_for(&topics, TOPIC_METADATA_WAIT_MS)
            .await?;
        let meta = &metadata.topics[topic];
        Ok(meta
            .partitions
            .iter()
            .map(|p| TopicPartition::new(topic, p.info.partition))
            .collect())
    }

    /// Reads exactly these partitions from now on. Partitions kept from the previous
    /// assignment keep their positions; new ones start per `auto_offset_reset` unless sought.
    pub async fn assign(&mut self, partitions: Vec<TopicPartition>) -> Result<()> {
        if self.group.is_some() {
            return Err(ClientError::InvalidArgument(
                "the consumer is subscribed: its group assigns the partitions".into(),
            ));
        }
        let mut topics: Vec<String> = partitions.iter().map(|tp| tp.topic.clone()).collect();
        topics.sort();
        topics.dedup();
        let metadata = self
            .core
            .metadata_for(&topics, TOPIC_METADATA_WAIT_MS)
            .await?;
        for tp in &partitions {
            if metadata
                .topics
                .get(&tp.topic)
                .and_then(|t| t.partition(tp.partition))
                .is_none()
            {
                return Err(ClientError::InvalidArgument(format!(
                    "partition {tp} does not exist"
                )));
            }
        }
        let mut next = BTreeMap::new();
        for tp in partitions {
            let state = self
                .partitions
                .remove(&tp)
                .unwrap_or_else(|| PartitionState::new(&tp.topic, None));
            next.insert(tp, state);
        }
        self.partitions = next;
        self.recount_paused();
        let partitions = &self.partitions;
        self.buffered
            .retain(|r| partitions.contains_key(&TopicPartition::new(&*r.topic, r.partition)));
        Ok(())
    }

    /// The assigned partitions.
    pub fn assignment(&self) -> Vec<TopicPartition> {
        self.partitions.keys().cloned().collect()
    }

    /// Moves the position of an assigned partition. Timestamps resolve to the first record at
    /// or after the time (the end of the log when there is none).
    pub async fn seek(&mut self, tp: &TopicPartition, offset: Offset) -> Result<()> {
        if !self.partitions.contains_key(tp) {
            return Err(ClientError::InvalidArgument(format!(
                "partition {tp} is not assigned"
            )));
        }
        let position = match offset {
            Offset::At(o) if o >= 0 => o,
            Offset::At(o) => {
                return Err(ClientError::InvalidArgument(format!(
                    "offset {o} is negative"
                )))
            }
            Offset::Beginning => self.lookup(tp, OffsetSpec::Earliest).await?,
            Offset::End => self.lookup(tp, OffsetSpec::Latest).await?,
            Offset::Timestamp(ms) => match self.lookup(tp, OffsetSpec::Timestamp(ms)).await? {
                -1 => self.lookup(tp, OffsetSpec::Latest).await?,
                o => o,
            },
        };
        self.set_position(tp, position);
        Ok(())
    }

    /// The next offset `poll` returns for `tp`; `None` when not assigned or not yet reset.
    pub fn position(&self, tp: &TopicPartition) -> Option<i64> {
        self.partitions.get(tp).and_then(|s| s.position)
    }

    /// The high watermark seen in the last fetch of `tp` (-1 before the first).
    pub fn high_watermark(&self, tp: &TopicPartition) -> Option<i64> {
        self.partitions.get(tp).map(|s| s.high_watermark)
    }

    /// Group mode: joins `group_id` (required) and reads the partitions the group's
    /// coordinator assigns to this member; calling it again changes the subscription. Partitions
    /// start from the group's committed offsets, else per `auto_offset_reset`.
    pub async fn subscribe(&mut self, topics: &[&str]) -> Result<()> {
        let Some(group_id) = self.config.group_id.clone() else {
            return Err(ClientError::InvalidConfig(
                "subscribe needs ConsumerConfig::group_id".into(),
            ));
        };
        if topics.is_empty() {
            return Err(ClientError::InvalidArgument(
                "subscribe to at least one topic".into(),
            ));
        }
        let topics: Vec<String> = topics.iter().map(|t| t.to_string()).collect();
        if let Some(group) = &self.group {
            group.lock().subscription = topics;
            group.wake.notify_one();
            return Ok(());
        }
        if !self.partitions.is_empty() {
            self.partitions.clear();
            self.paused_count = 0;
            self.buffered.clear();
        }
        let settings = GroupSettings {
            group_id,
            client_id: self.core.config.client_id.clone(),
            session_timeout_ms: self.config.session_timeout_ms,
        };
        self.group = Some(Group::start(self.core.clone(), settings, topics));
        self.last_auto_commit = Instant::now();
        Ok(())
    }

    /// Group mode: like `subscribe`, calling `listener` on every assignment change.
    pub async fn subscribe_with_listener(
        &mut self,
        topics: &[&str],
        listener: Box<dyn RebalanceListener>,
    ) -> Result<()> {
        self.listener = Some(std::sync::Mutex::new(listener));
        self.subscribe(topics).await
    }

    /// Group mode: this member's id and epoch (empty and 0 before the first heartbeat reply).
    pub fn member(&self) -> Option<(String, i32)> {
        self.group.as_ref().map(|g| {
            let s = g.lock();
            (s.member_id.clone(), s.epoch)
        })
    }

    /// Commits the positions of every assigned partition (the offsets after the records `poll`
    /// returned) to the group and waits for the coordinator.
    pub async fn commit_sync(&mut self) -> Result<()> {
        let offsets = self.positions(self.partitions.keys());
        self.commit_offsets_sync(&offsets).await
    }

    /// Commits these offsets (each the next offset to read) to the group. A subscribed member
    /// commits as itself (retrying once its epoch is current); otherwise the commit is
    /// administrative, which the coordinator accepts only while the group has no members.
    pub async fn commit_offsets_sync(&mut self, offsets: &[(TopicPartition, i64)]) -> Result<()> {
        let group_id = self.group_id()?;
        if offsets.is_empty() {
            return Ok(());
        }
        let mut attempts = 0;
        loop {
            attempts += 1;
            let (member_id, epoch) = self.member().unwrap_or((String::new(), -1));
            let result = match self.coordinator(&group_id).await {
                Ok(addr) => {
                    group::commit(&self.core, &addr, &group_id, &member_id, epoch, offsets).await
                }
                Err(e) => Err(e),
            };
            match result {
                Err(e) if e.is_retriable() && attempts < 10 => {
                    if matches!(
                        e.code(),
                        Some(ErrorCode::NotCoordinator | ErrorCode::CoordinatorNotAvailable)
                    ) || e.needs_metadata_refresh()
                    {
                        if let Some(g) = &self.group {
                            g.lock().coordinator = None;
                        }
                    }
                    self.wait_for_heartbeat().await;
                }
                other => return other,
            }
        }
    }

    /// Commits the current positions in the background; failures are logged.
    pub fn commit_async(&mut self) -> Result<()> {
        let group_id = self.group_id()?;
        let offsets = self.positions(self.partitions.keys());
        let (member_id, epoch) = self.member().unwrap_or((String::new(), -1));
        let coordinator = self
            .group
            .as_ref()
            .and_then(|g| g.lock().coordinator.clone());
        let core = self.core.clone();
        tokio::spawn(async move {
            let addr = match coordinator {
                Some(addr) => Ok(addr),
                None => group::find_coordinator(&core, &group_id).await,
            };
            let result = match addr {
                Ok(addr) => {
                    group::commit(&core, &addr, &group_id, &member_id, epoch, &offsets).await
                }
                Err(e) => Err(e),
            };
            if let Err(e) = result {
                tracing::warn!(error = %e, group = %group_id, "asynchronous commit failed");
            }
        });
        Ok(())
    }

    /// The group's committed offsets of `partitions` (`None` where nothing is committed).
    pub async fn committed(
        &self,
        partitions: &[TopicPartition],
    ) -> Result<Vec<(TopicPartition, Option<i64>)>> {
        let group_id = self.group_id()?;
        let addr = self.coordinator(&group_id).await?;
        group::fetch_committed(&self.core, &addr, &group_id, Some(partitions)).await
    }

    /// Group mode: commits the positions (with `enable_auto_commit`), tells the listener the
    /// partitions are revoked, and leaves the group, so that its partitions move to other
    /// members at once. Without a group it only drops the consumer.
    pub async fn close(mut self) -> Result<()> {
        let Some(_) = &self.group else { return Ok(()) };
        let mut result = Ok(());
        if self.config.enable_auto_commit {
            result = self.commit_sync().await;
        }
        let owned: Vec<TopicPartition> = self.partitions.keys().cloned().collect();
        if let Some(listener) = self.listener() {
            if !owned.is_empty() {
                listener.on_partitions_revoked(&owned);
            }
        }
        if let Some(group) = &self.group {
            group.leave(self.core.config.request_timeout_ms).await;
        }
        result
    }

    /// The positions of `partitions` to commit: the offset after the last record `poll`
    /// returned, or where the partition was reset or sought to when `poll` returned none of
    /// it (never the fetch position, which runs ahead by what is buffered). Partitions
    /// without a position yet (never reset) are left out.
    fn positions<'a>(
        &self,
        partitions: impl IntoIterator<Item = &'a TopicPartition>,
    ) -> Vec<(TopicPartition, i64)> {
        partitions
            .into_iter()
            .filter_map(|tp| {
                let position = self.partitions.get(tp)?.position?;
                Some((tp.clone(), position))
            })
            .collect()
    }

    fn listener(&mut self) -> Option<&mut Box<dyn RebalanceListener>> {
        let cell = self.listener.as_mut()?;
        Some(match cell.get_mut() {
            Ok(listener) => listener,
            Err(poisoned) => poisoned.into_inner(),
        })
    }

    fn group_id(&self) -> Result<String> {
        self.config.group_id.clone().ok_or_else(|| {
            ClientError::InvalidConfig("committing needs ConsumerConfig::group_id".into())
        })
    }

    async fn coordinator(&self, group_id: &str) -> Result<String> {
        if let Some(addr) = self
            .group
            .as_ref()
            .and_then(|g| g.lock().coordinator.clone())
        {
            return Ok(addr);
        }
        let addr = group::find_coordinator(&self.core, group_id).await?;
        if let Some(g) = &self.group {
            g.lock().coordinator = Some(addr.clone());
        }
        Ok(addr)
    }

    async fn wait_for_heartbeat(&self) {
        match &self.group {
            Some(g) => {
                let replied = g.replied.notified();
                g.wake.notify_one();
                let _ = tokio::time::timeout(Duration::from_millis(1_000), replied).await;
            }
            None => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }

    /// Applies the coordinator's latest assignment: revoked partitions first (auto-commit,
    /// listener), then new ones from their committed offsets; reports what is owned now.
    async fn reconcile_group(&mut self) -> Result<()> {
        let Some(group) = &self.group else {
            return Ok(());
        };
        let (target, error) = {
            let mut s = group.lock();
            (s.target.take(), s.error.take())
        };
        if let Some(e) = error {
            return Err(e);
        }
        let Some(target) = target else { return Ok(()) };
        let current = group::assignment_of(self.partitions.keys());
        let revoked: Vec<TopicPartition> = self
            .partitions
            .keys()
            .filter(|tp| {
                !target
                    .get(&tp.topic)
                    .is_some_and(|ps| ps.contains(&tp.partition))
            })
            .cloned()
            .collect();
        let added: Vec<TopicPartition> = group::partitions(&target)
            .into_iter()
            .filter(|tp| {
                !current
                    .get(&tp.topic)
                    .is_some_and(|ps| ps.contains(&tp.partition))
            })
            .collect();
        if !revoked.is_empty() {
            self.revoke(&revoked).await;
        }
        if !added.is_empty() {
            if let Err(e) = self.take_partitions(&added).await {
                if !e.is_retriable() {
                    return Err(e);
                }
                // Try again on the next poll.
                if let Some(group) = &self.group {
                    group.lock().target.get_or_insert(target);
                }
                self.back_off();
                return Ok(());
            }
        }
        if let Some(group) = &self.group {
            group.lock().owned = group::assignment_of(self.partitions.keys());
            group.wake.notify_one();
        }
        Ok(())
    }

    async fn revoke(&mut self, revoked: &[TopicPartition]) {
        if self.config.enable_auto_commit && self.member().is_some_and(|(_, epoch)| epoch > 0) {
            let offsets = self.positions(revoked);
            if let Err(e) = self.commit_offsets_sync(&offsets).await {
                tracing::warn!(error = %e, "commit of revoked partitions failed");
            }
        }
        if let Some(listener) = self.listener() {
            listener.on_partitions_revoked(revoked);
        }
        for tp in revoked {
            self.partitions.remove(tp);
        }
        self.recount_paused();
        let partitions = &self.partitions;
        self.buffered
            .retain(|r| partitions.contains_key(&TopicPartition::new(&*r.topic, r.partition)));
    }

    async fn take_partitions(&mut self, added: &[TopicPartition]) -> Result<()> {
        let group_id = self.group_id()?;
        let addr = self.coordinator(&group_id).await?;
        let committed = group::fetch_committed(&self.core, &addr, &group_id, Some(added)).await?;
        let mut topics: Vec<String> = added.iter().map(|tp| tp.topic.clone()).collect();
        topics.dedup();
        self.core
            .metadata_for(&topics, self.core.config.request_timeout_ms)
            .await?;
        for tp in added {
            let position = committed
                .iter()
                .find(|(c, _)| c == tp)
                .and_then(|(_, o)| *o);
            self.partitions
                .insert(tp.clone(), PartitionState::new(&tp.topic, position));
        }
        if let Some(listener) = self.listener() {
            listener.on_partitions_assigned(added);
        }
        Ok(())
    }

    async fn auto_commit(&mut self) {
        let due = self.config.enable_auto_commit
            && self.group.is_some()
            && self.last_auto_commit.elapsed()
                >= Duration::from_millis(self.config.auto_commit_interval_ms);
        if !due {
            return;
        }
        self.last_auto_commit = Instant::now();
        if let Err(e) = self.commit_sync().await {
            tracing::warn!(error = %e, "auto-commit failed");
        }
    }

    /// Returns the next records (at most `max_poll_records`), waiting up to `timeout` for some
    /// to arrive; an empty vector when none did.
    pub async fn poll(&mut self, timeout: Duration) -> Result<Vec<ConsumerRecord>> {
        let records_max = self.config.max_poll_records;
        self.poll_up_to(timeout, records_max).await
    }

    /// The records one at a time, as a [`Stream`](futures_lite::Stream) (the trait of the
    /// `futures` crates): each item is one record, or the error `poll` returned, after which
    /// the stream ends. Positions advance per record taken from the stream, so commits never
    /// cover records the stream has not yielded (dropping the stream loses nothing). The
    /// stream borrows the consumer; drop it to commit, seek or close.
    ///
    /// ```no_run
    /// # async fn example(consumer: &mut borges_client::Consumer) -> borges_client::Result<()> {
    /// use futures_lite::StreamExt;
    /// let mut records = consumer.stream();
    /// while let Some(record) = records.next().await {
    ///     let record = record?;
    ///     println!("{}@{}", record.partition, record.offset);
    /// }
    /// # Ok(()) }
    /// ```
    pub fn stream(
        &mut self,
    ) -> impl futures_lite::Stream<Item = Result<ConsumerRecord>> + Send + Unpin + '_ {
        // Boxed once per stream, so that it is `Unpin` (`StreamExt::next` needs that).
        Box::pin(futures_lite::stream::unfold(
            Some(self),
            |consumer| async move {
                let consumer = consumer?;
                loop {
                    let wait = Duration::from_millis(STREAM_POLL_MS);
                    match consumer.poll_up_to(wait, 1).await {
                        Ok(mut records) => {
                            if let Some(record) = records.pop() {
                                return Some((Ok(record), Some(consumer)));
                            }
                        }
                        Err(e) => return Some((Err(e), None)),
                    }
                }
            },
        ))
    }

    async fn poll_up_to(
        &mut self,
        timeout: Duration,
        records_max: usize,
    ) -> Result<Vec<ConsumerRecord>> {
        let deadline = Instant::now() + timeout;
        self.auto_commit().await;
        loop {
            self.reconcile_group().await?;
            if self.has_returnable_records() {
                return Ok(self.take_buffered(records_max));
            }
            if let Some(error) = self.corrupt_batch_error() {
                return Err(error);
            }
            if let Some(done) = self.completed.pop_front() {
                self.handle_fetch(done)?;
                self.send_fetches().await?;
                continue;
            }
            self.prepare().await?;
            self.send_fetches().await?;
            let wake = self.retry_at.map_or(deadline, |at| at.min(deadline));
            // Group mode: a heartbeat reply may carry a new assignment to apply.
            let replied = self.group.as_ref().map(|g| g.replied.clone());
            let assignment_changed = async {
                match &replied {
                    Some(r) => r.notified().await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                received = self.results_rx.recv() => match received {
                    Some(done) => self.completed.push_back(done),
                    None => return Err(ClientError::Closed("consumer")),
                },
                _ = assignment_changed => {}
                _ = tokio::time::sleep_until(wake.into()) => {
                    if Instant::now() >= deadline {
                        return Ok(Vec::new());
                    }
                }
            }
        }
    }

    async fn lookup(&self, tp: &TopicPartition, spec: OffsetSpec) -> Result<i64> {
        let listed = list_offsets(&self.core, &[(tp.clone(), spec)]).await?;
        Ok(listed.first().map_or(-1, |l| l.offset))
    }

    fn set_position(&mut self, tp: &TopicPartition, position: i64) {
        if let Some(state) = self.partitions.get_mut(tp) {
            state.position = Some(position);
            state.fetch_position = position;
            state.generation += 1;
            state.corrupt = None;
            if state.buffered > 0 {
                state.buffered = 0;
                self.buffered
                    .retain(|r| !(r.partition == tp.partition && *r.topic == *tp.topic));
            }
        }
    }

    /// The corrupt batch `poll` reports: of a partition that is not paused and whose records
    /// before the batch were all returned.
    fn corrupt_batch_error(&self) -> Option<ClientError> {
        self.partitions.iter().find_map(|(tp, s)| match &s.corrupt {
            Some(c) if !s.paused && s.buffered == 0 => Some(ClientError::CorruptBatch {
                topic: tp.topic.clone(),
                partition: tp.partition,
                offset: c.offset,
                next_offset: c.next_offset,
                source: c.error.clone(),
            }),
            _ => None,
        })
    }

    /// Moves past the corrupt batch that `poll` reported for `tp` (a
    /// [`ClientError::CorruptBatch`]) and returns the new position: the offset after the batch.
    /// The records of the batch are not delivered. Fails when `tp` has no corrupt batch, or when
    /// the batch's header is unreadable (`next_offset` is `None`): seek to an offset then.
    pub fn skip_corrupt_batch(&mut self, tp: &TopicPartition) -> Result<i64> {
        let corrupt = self.partitions.get(tp).and_then(|s| s.corrupt.as_ref());
        let Some(corrupt) = corrupt else {
            return Err(ClientError::InvalidArgument(format!(
                "partition {tp} has no corrupt batch to skip"
            )));
        };
        let Some(next) = corrupt.next_offset else {
            return Err(ClientError::InvalidArgument(format!(
                "the corrupt batch of {tp} at offset {} has no readable length: seek to an offset",
                corrupt.offset
            )));
        };
        let from = corrupt.offset;
        tracing::warn!(partition = %tp, from, to = next, "skipping a corrupt batch");
        self.set_position(tp, next);
        Ok(next)
    }

    /// Whether `poll` has buffered records to return (of partitions that are not paused).
    fn has_returnable_records(&self) -> bool {
        if self.paused_count == 0 {
            return !self.buffered.is_empty();
        }
        let partitions = &self.partitions;
        self.buffered.iter().any(|r| !is_paused(partitions, r))
    }

    fn take_buffered(&mut self, n_max: usize) -> Vec<ConsumerRecord> {
        let records: Vec<ConsumerRecord> = if self.paused_count == 0 {
            let n = self.buffered.len().min(n_max);
            self.buffered.drain(..n).collect()
        } else {
            let (mut taken, mut held) = (Vec::new(), VecDeque::new());
            for record in self.buffered.drain(..) {
                if taken.len() < n_max && !is_paused(&self.partitions, &record) {
                    taken.push(record);
                } else {
                    held.push_back(record);
                }
            }
            self.buffered = held;
            taken
        };
        for record in &records {
            let tp = TopicPartition::new(&*record.topic, record.partition);
            if let Some(state) = self.partitions.get_mut(&tp) {
                state.position = Some(record.offset + 1);
                state.buffered -= 1;
                if state.buffered == 0 {
                    state.position = Some(state.fetch_position);
                }
            }
        }
        records
    }

    /// Stops fetching `partitions` and holds back their buffered records until [`resume`];
    /// membership and heartbeats go on (a group member stays in its group). Positions do not
    /// move. A partition that is revoked or unassigned is no longer paused.
    ///
    /// [`resume`]: Consumer::resume
    pub fn pause(&mut self, partitions: &[TopicPartition]) -> Result<()> {
        self.set_paused(partitions, true)
    }

    /// Fetches `partitions` again after [`pause`](Consumer::pause).
    pub fn resume(&mut self, partitions: &[TopicPartition]) -> Result<()> {
        self.set_paused(partitions, false)
    }

    /// The paused partitions.
    pub fn paused(&self) -> Vec<TopicPartition> {
        self.partitions
            .iter()
            .filter(|(_, s)| s.paused)
            .map(|(tp, _)| tp.clone())
            .collect()
    }

    fn set_paused(&mut self, partitions: &[TopicPartition], paused: bool) -> Result<()> {
        if let Some(tp) = partitions
            .iter()
            .find(|tp| !self.partitions.contains_key(tp))
        {
            return Err(ClientError::InvalidArgument(format!(
                "partition {tp} is not assigned"
            )));
        }
        for tp in partitions {
            if let Some(state) = self.partitions.get_mut(tp) {
                state.paused = paused;
            }
        }
        self.recount_paused();
        Ok(())
    }

    fn recount_paused(&mut self) {
        self.paused_count = self.partitions.values().filter(|s| s.paused).count();
    }

    /// Refreshes metadata when asked to and resets partitions without a position.
    async fn prepare(&mut self) -> Result<()> {
        if self.retry_at.is_some_and(|at| at > Instant::now()) {
            return Ok(());
        }
        self.retry_at = None;
        if self.refresh_needed {
            let mut topics: Vec<String> =
                self.partitions.keys().map(|tp| tp.topic.clone()).collect();
            topics.dedup();
            match self.core.refresh_metadata(Some(&topics)).await {
                Ok(metadata) => {
                    self.refresh_needed = false;
                    self.warn_missing_topics(&topics, &metadata);
                }
                Err(e) if e.is_retriable() => {
                    if self.warnings.allow("metadata") {
                        tracing::warn!("metadata refresh failed: {e}; retrying");
                    }
                    self.back_off();
                    return Ok(());
                }
                Err(e) => return Err(e),
            }
        }
        let spec = match self.config.auto_offset_reset {
            OffsetReset::Earliest => OffsetSpec::Earliest,
            OffsetReset::Latest => OffsetSpec::Latest,
            OffsetReset::None => OffsetSpec::Latest,
        };
        let unset: Vec<(TopicPartition, OffsetSpec)> = self
            .partitions
            .iter()
            .filter(|(_, s)| s.position.is_none())
            .map(|(tp, _)| (tp.clone(), spec))
            .collect();
        if unset.is_empty() {
            return Ok(());
        }
        if self.config.auto_offset_reset == OffsetReset::None {
            return Err(ClientError::InvalidArgument(format!(
                "no position for {} and auto_offset_reset is None: seek first",
                unset[0].0
            )));
        }
        // One attempt: `poll` retries through its own back-off and metadata refresh.
        match list_offsets_until(&self.core, &unset, Instant::now()).await {
            Ok(listed) => {
                for l in listed {
                    let position = l.offset.max(0);
                    self.warn_out_of_range_reset(&l.topic_partition, position);
                    self.set_position(&l.topic_partition, position);
                }
                Ok(())
            }
            Err(e) if e.is_retriable() => {
                self.refresh_needed |= e.needs_metadata_refresh();
                self.back_off();
                Ok(())
            }
            Err(e) => Err(e),
        }
    }

    /// A fetch from `addr` failed with a retriable error (a dead connection, a broker that
    /// stays down): a warning the first time and then every `WARN_INTERVAL_MS`.
    fn warn_fetch_failure(&self, addr: &str, e: &ClientError) {
        if self.warnings.allow(addr) {
            tracing::warn!("fetching from {addr} failed: {e}; retrying");
        } else {
            tracing::debug!(error = %e, addr, "fetch failed; retrying");
        }
    }

    /// Assigned topics that fresh metadata no longer has (deleted under the consumer).
    fn warn_missing_topics(&self, topics: &[String], metadata: &crate::metadata::ClusterMetadata) {
        for topic in topics {
            let key = format!("topic {topic}");
            let exists = metadata
                .topics
                .get(topic)
                .is_some_and(|t| t.error.is_none());
            if exists {
                self.warnings.reset(&key);
            } else if self.warnings.allow(&key) {
                tracing::warn!(
                    "topic {topic} of the assigned partitions does not exist (deleted?); retrying"
                );
            }
        }
    }

    /// Logs a reset after `OffsetOutOfRange` (a fetch position past the log end, or before
    /// its start after retention): records are skipped or read again, so it is a warning.
    fn warn_out_of_range_reset(&mut self, tp: &TopicPartition, position: i64) {
        let Some(state) = self.partitions.get_mut(tp) else {
            return;
        };
        if let Some(offset) = state.out_of_range.take() {
            tracing::warn!(
                "offset {offset} of {tp} is out of range; reset to offset {position} (auto_offset_reset {:?})",
                self.config.auto_offset_reset
            );
        }
    }

    fn back_off(&mut self) {
        self.retry_at = Some(Instant::now() + Duration::from_millis(100));
    }

    /// Sends a fetch to every destination that has none in flight nor an undecoded response
    /// waiting.
    async fn send_fetches(&mut self) -> Result<()> {
        if self.retry_at.is_some_and(|at| at > Instant::now()) {
            return Ok(());
        }
        let metadata = self.core.metadata();
        let shard_aware = self.core.config.shard_aware;
        let mut by_addr: BTreeMap<String, Vec<(TopicPartition, u64, i64)>> = BTreeMap::new();
        for (tp, state) in &self.partitions {
            if state.position.is_none() || state.paused || state.corrupt.is_some() {
                continue;
            }
            match metadata.leader_addr(&tp.topic, tp.partition, shard_aware) {
                Some(addr) => by_addr.entry(addr.to_string()).or_default().push((
                    tp.clone(),
                    state.generation,
                    state.fetch_position,
                )),
                None => self.refresh_needed = true,
            }
        }
        let waiting: Vec<&str> = self
            .completed
            .iter()
            .map(|d| d.sent.addr.as_str())
            .collect();
        let ready: Vec<(String, Vec<_>)> = by_addr
            .into_iter()
            .filter(|(addr, _)| {
                !self.in_flight.contains_key(addr) && !waiting.contains(&addr.as_str())
            })
            .collect();
        for (addr, partitions) in ready {
            self.send_fetch(SentFetch { addr, partitions }).await;
        }
        Ok(())
    }

    async fn send_fetch(&mut self, sent: SentFetch) {
        let message = fetch_request(&self.config, &sent.partitions);
        let timeout_ms = self.core.config.request_timeout_ms + self.config.fetch_max_wait_ms;
        let submitted = match self.core.connection(&sent.addr).await {
            Ok(conn) => conn
                .submit(Request::new(ApiKey::Fetch, message))
                .await
                .map(|r| (conn, r)),
            Err(e) => Err(e),
        };
        self.in_flight.insert(sent.addr.clone(), ());
        let tx = self.results_tx.clone();
        match submitted {
            Err(e) => {
                let _ = tx.send(FetchDone {
                    sent,
                    reply: Err(e),
                });
            }
            Ok((conn, receiver)) => {
                let core = self.core.clone();
                tokio::spawn(async move {
                    let reply = await_reply(receiver, timeout_ms, &conn).await;
                    drop(conn);
                    if matches!(reply, Err(ClientError::Timeout { .. })) {
                        core.suspect_unresponsive(&sent.addr);
                    }
                    let _ = tx.send(FetchDone { sent, reply });
                });
            }
        }
    }

    /// Decodes one fetch response into the buffer and advances fetch positions.
    fn handle_fetch(&mut self, done: FetchDone) -> Result<()> {
        self.in_flight.remove(&done.sent.addr);
        let decoded = done.reply.and_then(|frame| {
            let frame =
                frame.ok_or_else(|| ClientError::Protocol("fetch without response".into()))?;
            let payload = frame.payload.clone();
            let response = decode!(FetchResponse, frame)?;
            check_code(response.error_code, response.error_message.clone())?;
            Ok((response, payload))
        });
        let (response, payload) = match decoded {
            Ok(ok) => ok,
            Err(e) if e.is_retriable() => {
                self.warn_fetch_failure(&done.sent.addr, &e);
                self.refresh_needed |= e.needs_metadata_refresh();
                self.back_off();
                return Ok(());
            }
            Err(e) => return Err(e),
        };
        // Every partition is handled before a partition's error is returned, so the records
        // of the others are buffered (the next poll returns them) rather than fetched again:
        // one refused partition (TopicAuthorizationFailed, ...) does not stall the rest.
        let mut first_error = None;
        for topic in response.topics.unwrap_or_default() {
            for p in topic.partitions.unwrap_or_default() {
                let handled = self.handle_partition(&done.sent, &topic.name, p, &payload);
                if let Err(e) = handled {
                    first_error.get_or_insert(e);
                }
            }
        }
        if let Some(e) = first_error {
            return Err(e);
        }
        Ok(())
    }

    fn handle_partition(
        &mut self,
        sent: &SentFetch,
        topic: &str,
        p: wire::FetchPartitionResponseT,
        payload: &Bytes,
    ) -> Result<()> {
        let tp = TopicPartition::new(topic, p.partition);
        let Some(&(_, generation, fetch_offset)) =
            sent.partitions.iter().find(|(t, _, _)| *t == tp)
        else {
            return Err(ClientError::Protocol(format!(
                "fetch response has {tp}, which was not asked for"
            )));
        };
        let Some(state) = self.partitions.get_mut(&tp) else {
            return Ok(());
        };
        if state.generation != generation || state.fetch_position != fetch_offset {
            return Ok(());
        }
        if let Some(error) = ClientError::from_code(p.error_code, p.error_message) {
            return self.partition_error(&tp, error);
        }
        state.high_watermark = p.high_watermark;
        let records = codec::payload_slice(payload, p.records.as_ref())?;
        let decoded = decode_records(
            &state.topic,
            tp.partition,
            &records,
            fetch_offset,
            self.config.decompressed_batch_size_bytes_max,
        );
        state.fetch_position = decoded.next_fetch_offset;
        state.buffered += decoded.records.len();
        if state.buffered == 0 {
            state.position = Some(state.fetch_position);
        }
        if let Some(corrupt) = decoded.corrupt {
            let (offset, error) = (corrupt.offset, &corrupt.error);
            tracing::warn!(partition = %tp, offset, %error, "corrupt record batch");
            state.corrupt = Some(corrupt);
        }
        self.buffered.extend(decoded.records);
        Ok(())
    }

    fn partition_error(&mut self, tp: &TopicPartition, error: ClientError) -> Result<()> {
        match error.code() {
            Some(ErrorCode::OffsetOutOfRange)
                if self.config.auto_offset_reset != OffsetReset::None =>
            {
                if let Some(state) = self.partitions.get_mut(tp) {
                    state.out_of_range = Some(state.fetch_position);
                    state.position = None;
                    state.generation += 1;
                }
                Ok(())
            }
            _ if error.is_retriable() => {
                let key = format!("{tp} {}", error.code().map_or("", |c| c.name()));
                if self.warnings.allow(&key) {
                    tracing::warn!("fetching {tp} failed: {error}; retrying");
                }
                self.refresh_needed |= error.needs_metadata_refresh();
                self.back_off();
                Ok(())
            }
            _ => Err(error),
        }
    }
}

fn is_paused(partitions: &BTreeMap<TopicPartition, PartitionState>, r: &ConsumerRecord) -> bool {
    partitions
        .get(&TopicPartition::new(&*r.topic, r.partition))
        .is_some_and(|s| s.paused)
}

/// The Fetch request for `partitions` (topic-partition, generation, fetch offset).
fn fetch_request(config: &ConsumerConfig, partitions: &[(TopicPartition, u64, i64)]) -> Vec<u8> {
    let mut topics: Vec<wire::FetchTopicT> = Vec::new();
    for (tp, _, offset) in partitions {
        if topics.last().is_none_or(|t| t.name != tp.topic) {
            topics.push(obj!(wire::FetchTopicT {
                name: tp.topic.clone(),
                partitions: Some(Vec::new())
            }));
        }
        if let Some(list) = topics.last_mut().and_then(|t| t.partitions.as_mut()) {
            list.push(obj!(wire::FetchPartitionT {
                partition: tp.partition,
                fetch_offset: *offset,
                partition_max_bytes: config.partition_fetch_bytes_max as i32
            }));
        }
    }
    let request = obj!(wire::FetchRequestT {
        max_wait_ms: config.fetch_max_wait_ms as i32,
        min_bytes: config.fetch_min_bytes as i32,
        max_bytes: config.fetch_max_bytes as i32,
        topics: Some(topics)
    });
    codec::encode(|fbb| request.pack(fbb))
}

/// Records decoded from one partition's fetched bytes.
#[derive(Debug)]
pub(crate) struct DecodedRecords {
    pub records: Vec<ConsumerRecord>,
    /// The offset after the last whole good batch (the next fetch starts here; at a corrupt
    /// batch, its offset).
    pub next_fetch_offset: i64,
    /// The batch decoding stopped at, if one failed its checks.
    pub corrupt: Option<Corrupt>,
}

/// A fetched batch that failed its checks (CRC, header, records, decompression).
#[derive(Debug, Clone)]
pub(crate) struct Corrupt {
    /// The first offset not delivered (where the consumer stands).
    pub offset: i64,
    /// Where to resume past the batch: the next batch's base offset when the response holds one
    /// (stamped by the broker), else the batch's own end; `None` when its header is unreadable.
    pub next_offset: Option<i64>,
    pub error: BatchError,
}

/// Decodes concatenated batches (CRC checked, records checked, zstd inflated up to the limit),
/// skipping records below `fetch_offset` (the first batch may start before it) and control
/// batches. A partial batch at the end is left for the next fetch. At the first batch that
/// fails its checks decoding stops: the records before it are returned with the failure.
pub(crate) fn decode_records(
    topic: &Arc<str>,
    partition: i32,
    bytes: &Bytes,
    fetch_offset: i64,
    decompressed_size_bytes_max: usize,
) -> DecodedRecords {
    let mut decoded = DecodedRecords {
        records: Vec::new(),
        next_fetch_offset: fetch_offset,
        corrupt: None,
    };
    let mut position = 0;
    while position < bytes.len() {
        let rest = &bytes[position..];
        let header = match BatchHeader::parse(rest) {
            // A partial batch ends a response cut at its size limit; the broker always sends
            // at least one whole batch, so a partial first batch is corruption.
            Err(BatchError::Truncated { .. }) if position > 0 => break,
            Ok(h) if h.size_bytes() > rest.len() && position > 0 => break,
            Ok(h) if h.size_bytes() <= rest.len() => h,
            Ok(h) => {
                let error = BatchError::Truncated {
                    needed: h.size_bytes() as u64,
                    available: rest.len() as u64,
                };
                decoded.corrupt = Some(corrupt_at(&decoded, None, error));
                break;
            }
            Err(error) => {
                decoded.corrupt = Some(corrupt_at(&decoded, None, error));
                break;
            }
        };
        let end = position + header.size_bytes();
        // Wholly before the fetch offset: the broker sent it because it starts the range, or
        // because the consumer skipped a corrupt batch.
        if header.last_offset() < decoded.next_fetch_offset {
            position = end;
            continue;
        }
        if let Err(error) = decode_batch(
            topic,
            partition,
            bytes.slice(position..end),
            decompressed_size_bytes_max,
            &mut decoded,
        ) {
            let next = following_base_offset(&bytes[end..]).unwrap_or(header.next_offset());
            decoded.corrupt = Some(corrupt_at(&decoded, Some(next), error));
            break;
        }
        decoded.next_fetch_offset = header.next_offset();
        position = end;
    }
    decoded
}

fn corrupt_at(decoded: &DecodedRecords, next_offset: Option<i64>, error: BatchError) -> Corrupt {
    Corrupt {
        offset: decoded.next_fetch_offset,
        next_offset: next_offset.filter(|n| *n > decoded.next_fetch_offset),
        error,
    }
}

/// The base offset of the batch at the start of `rest`, if its header parses.
fn following_base_offset(rest: &[u8]) -> Option<i64> {
    BatchHeader::parse(rest).ok().map(|h| h.base_offset)
}

/// Checks and decodes one whole batch, appending its records at or after the fetch position.
fn decode_batch(
    topic: &Arc<str>,
    partition: i32,
    bytes: Bytes,
    decompressed_size_bytes_max: usize,
    decoded: &mut DecodedRecords,
) -> std::result::Result<(), BatchError> {
    let batch = RecordBatch::parse(bytes)?;
    if batch.header().is_control() {
        return Ok(());
    }
    let records = batch.records(decompressed_size_bytes_max)?;
    let from = decoded.next_fetch_offset;
    decoded.records.extend(
        records
            .into_iter()
            .filter(|r| r.offset >= from)
            .map(|record| ConsumerRecord {
                topic: topic.clone(),
                partition,
                offset: record.offset,
                timestamp: record.timestamp,
                key: record.key,
                value: record.value,
                headers: record
                    .headers
                    .into_iter()
                    .map(|h| (String::from_utf8_lossy(&h.key).into_owned(), h.value))
                    .collect(),
            }),
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use borges_protocol::batch::{set_base_offset, BatchBuilder, BatchOptions, Compression};
    use bytes::BytesMut;

    fn batch(base_offset: i64, values: &[&str], compression: Compression) -> Vec<u8> {
        let mut b = BatchBuilder::new(
            BatchOptions {
                compression,
                ..BatchOptions::default()
            },
            256,
        );
        for (i, v) in values.iter().enumerate() {
            b.push(
                1000 + i as i64,
                Some(b"k"),
                Some(v.as_bytes()),
                &[(b"h", Some(b"x"))],
            );
        }
        let mut bytes = BytesMut::from(&b.build().unwrap()[..]);
        set_base_offset(&mut bytes, base_offset);
        bytes.to_vec()
    }

    fn topic() -> Arc<str> {
        "t".into()
    }

    #[test]
    fn records_below_the_fetch_offset_are_skipped_and_the_position_advances_per_batch() {
        let mut bytes = batch(10, &["a", "b", "c"], Compression::None);
        bytes.extend(batch(13, &["d", "e"], Compression::Zstd));
        let decoded = decode_records(&topic(), 2, &Bytes::from(bytes), 12, 1 << 20);
        let offsets: Vec<i64> = decoded.records.iter().map(|r| r.offset).collect();
        assert_eq!(offsets, vec![12, 13, 14]);
        assert_eq!(decoded.next_fetch_offset, 15);
        let r = &decoded.records[0];
        assert_eq!(r.value.as_deref(), Some(&b"c"[..]));
        assert_eq!(r.partition, 2);
        assert_eq!(r.timestamp, 1002);
        assert_eq!(
            r.headers,
            vec![("h".to_string(), Some(Bytes::from_static(b"x")))]
        );
    }

    #[test]
    fn a_partial_trailing_batch_is_left_for_the_next_fetch() {
        let mut bytes = batch(0, &["a"], Compression::None);
        let second = batch(1, &["b"], Compression::None);
        bytes.extend(&second[..second.len() - 5]);
        let decoded = decode_records(&topic(), 0, &Bytes::from(bytes), 0, 1 << 20);
        assert_eq!(decoded.records.len(), 1);
        assert_eq!(decoded.next_fetch_offset, 1);
    }

    #[test]
    fn records_before_a_corrupt_batch_are_delivered_and_the_batch_is_reported() {
        let good = batch(0, &["a", "b"], Compression::None);
        let mut bad = batch(2, &["c", "d"], Compression::None);
        let last = bad.len() - 1;
        bad[last] ^= 0xff;
        let after = batch(4, &["e"], Compression::None);
        let bytes = Bytes::from([good.clone(), bad.clone(), after].concat());
        let decoded = decode_records(&topic(), 0, &bytes, 0, 1 << 20);
        let offsets: Vec<i64> = decoded.records.iter().map(|r| r.offset).collect();
        assert_eq!(offsets, [0, 1]);
        assert_eq!(decoded.next_fetch_offset, 2);
        let corrupt = decoded.corrupt.unwrap();
        assert_eq!((corrupt.offset, corrupt.next_offset), (2, Some(4)));
        assert!(matches!(corrupt.error, BatchError::CrcMismatch { .. }));
        // Seeking past it: the broker sends the corrupt batch again (it starts the range), the
        // consumer skips it by its header and goes on.
        let from_next = decode_records(&topic(), 0, &bytes.slice(good.len()..), 4, 1 << 20);
        assert!(from_next.corrupt.is_none());
        assert_eq!(from_next.records[0].offset, 4);
        // Last in the response, the corrupt batch's own header says where it ends.
        let alone = decode_records(&topic(), 0, &Bytes::from(bad), 2, 1 << 20);
        assert_eq!(alone.corrupt.unwrap().next_offset, Some(4));
    }

    #[test]
    fn invalid_records_bombs_and_unreadable_headers_are_reported_with_their_offset() {
        // Offset deltas 0, 0 with a valid CRC, as an older broker stored them.
        let mut dup = batch(7, &["x", "y"], Compression::None);
        // Each record is 13 bytes: length, attributes, timestamp delta, offset delta, ...
        let second_delta = borges_protocol::batch::field::RECORDS + 13 + 3;
        assert_eq!(dup[second_delta], 0x02);
        dup[second_delta] = 0x00;
        borges_protocol::batch::set_crc(&mut dup);
        let decoded = decode_records(&topic(), 0, &Bytes::from(dup), 7, 1 << 20);
        assert!(decoded.records.is_empty());
        let corrupt = decoded.corrupt.unwrap();
        assert_eq!((corrupt.offset, corrupt.next_offset), (7, Some(9)));
        assert!(
            corrupt.error.to_string().contains("record 1"),
            "{}",
            corrupt.error
        );
        let big = "x".repeat(10_000);
        let bomb = Bytes::from(batch(0, &[&big, &big], Compression::Zstd));
        let refused = decode_records(&topic(), 0, &bomb, 0, 4096);
        assert!(matches!(
            refused.corrupt.unwrap().error,
            BatchError::DecompressedTooLarge { .. }
        ));
        assert_eq!(
            decode_records(&topic(), 0, &bomb, 0, 1 << 20).records.len(),
            2
        );
        // A header that cannot be parsed: no way to know where the batch ends.
        let mut garbage = batch(3, &["z"], Compression::None);
        garbage[borges_protocol::batch::field::MAGIC] = 9;
        let unreadable = decode_records(&topic(), 0, &Bytes::from(garbage), 3, 1 << 20);
        assert_eq!(unreadable.corrupt.unwrap().next_offset, None);
    }

    #[test]
    fn fetch_request_groups_partitions_by_topic() {
        let config = ConsumerConfig::default();
        let parts = vec![
            (TopicPartition::new("a", 0), 0, 5),
            (TopicPartition::new("a", 1), 0, 7),
            (TopicPartition::new("b", 0), 0, 0),
        ];
        let bytes = fetch_request(&config, &parts);
        let request = flatbuffers::root::<wire::FetchRequest>(&bytes)
            .unwrap()
            .unpack();
        let topics = request.topics.unwrap();
        assert_eq!(topics.len(), 2);
        let a = topics[0].partitions.as_ref().unwrap();
        assert_eq!((a[1].partition, a[1].fetch_offset), (1, 7));
        assert_eq!(request.max_wait_ms, 500);
        assert_eq!(request.replica_id, -1);
    }
}

#[cfg(test)]
mod proptests {
    use super::*;
    use borges_protocol::batch::{set_base_offset, BatchBuilder, BatchOptions};
    use bytes::BytesMut;
    use proptest::prelude::*;

    proptest! {
        /// From any fetch offset inside a run of batches, exactly the records at or after it
        /// come back, in order, and the next fetch starts after the last whole batch.
        #[test]
        fn decoding_from_any_offset_returns_exactly_the_records_after_it(
            sizes in proptest::collection::vec(1usize..6, 1..8),
            start in 0i64..40,
            cut in 0usize..50,
        ) {
            let mut bytes = Vec::new();
            let mut base = 0i64;
            let mut first_size = 0;
            for n in &sizes {
                let mut b = BatchBuilder::new(BatchOptions::default(), 64);
                for i in 0..*n {
                    b.push(base + i as i64, None, Some(format!("{}", base + i as i64).as_bytes()), &[]);
                }
                let mut batch = BytesMut::from(&b.build().unwrap()[..]);
                set_base_offset(&mut batch, base);
                bytes.extend_from_slice(&batch);
                base += *n as i64;
                if first_size == 0 {
                    first_size = bytes.len();
                }
            }
            let total = base;
            // A fetch may end in the middle of a batch after the first (the broker always
            // sends the first whole: a partial first batch is corruption).
            let kept = bytes.len() - cut.min(bytes.len() - 1);
            let topic: Arc<str> = "t".into();
            let fetched = Bytes::from(bytes[..kept].to_vec());
            let decoded = decode_records(&topic, 0, &fetched, start, 1 << 20);
            if kept < first_size {
                prop_assert!(decoded.records.is_empty());
                prop_assert_eq!(decoded.corrupt.map(|c| c.offset), Some(start));
                return Ok(());
            }
            prop_assert!(decoded.corrupt.is_none());
            let offsets: Vec<i64> = decoded.records.iter().map(|r| r.offset).collect();
            let whole_end = decoded.next_fetch_offset.max(start);
            let expected: Vec<i64> = (start..whole_end.min(total)).collect();
            prop_assert_eq!(&offsets, &expected);
            for r in &decoded.records {
                prop_assert_eq!(text(&r.value), r.offset.to_string());
            }
            prop_assert!(decoded.next_fetch_offset >= start);
        }
    }

    fn text(b: &Option<Bytes>) -> String {
        String::from_utf8_lossy(b.as_deref().unwrap_or_default()).into_owned()
    }
}
