//! One core of the broker: its partitions, its copy of the metadata, its outboxes to the other
//! cores, and the loop that executes messages from them.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::Arc;

use borges_runtime::channel::{CoreReceiver, CoreSenders};
use borges_runtime::net::TcpListener;
use borges_runtime::sync::{Notify, Semaphore};
use borges_runtime::task;
use borges_storage::{CoreStorage, PartitionLog};
use futures_channel::oneshot;

use crate::config::BrokerConfig;
use crate::controller::Controller;
use crate::metadata::{partition_dir, MetadataImage, TopicRecord, Uuid};
use crate::metrics::CoreMetrics;
use crate::router::{CoreEndpoint, CoreMessage, Failure, Outbox, PartitionRef};
use crate::topic_config;
use borges_protocol::ErrorCode;

/// Partitions opened concurrently while applying metadata.
const PARTITION_OPENS_IN_FLIGHT_MAX: usize = 32;

/// The logs of one topic's partitions that this core owns (others are `None`).
pub struct TopicLogs {
    /// Topic id the logs belong to (a re-created topic gets new logs).
    pub id: Uuid,
    /// Logs by partition index.
    pub logs: Vec<Option<Rc<PartitionLog>>>,
}

/// Everything one core owns. Lives on one core; other cores reach it only by message.
pub struct Core {
    /// This core's index.
    pub id: usize,
    /// Number of cores.
    pub cores: usize,
    /// Broker configuration (shared, read-only).
    pub config: Arc<BrokerConfig>,
    /// This core's copy of the metadata.
    pub metadata: RefCell<Arc<MetadataImage>>,
    /// Partition logs this core owns, by topic.
    pub topics: RefCell<HashMap<String, TopicLogs>>,
    /// The storage context of this core.
    pub storage: Rc<CoreStorage>,
    /// Outboxes to the other cores (`None` at this core's index).
    pub outboxes: Vec<Option<Rc<Outbox>>>,
    /// Metrics of this core.
    pub metrics: CoreMetrics,
    /// Every core's own address, known once all cores are bound.
    pub endpoints: RefCell<Arc<Vec<CoreEndpoint>>>,
    /// Bytes of request frames in flight on this core.
    pub request_memory: Rc<Semaphore>,
    /// Open connections on this core.
    pub connections: Cell<u32>,
    /// Connections this core accepts at most.
    pub connections_max: u32,
    /// Set when shutdown starts; connections stop reading new requests.
    pub shutting_down: Cell<bool>,
    /// Bumped once, when shutdown starts.
    pub shutdown: Notify,
    /// Bumped whenever a connection closes.
    pub connection_closed: Notify,
    /// Listeners, bound by `Bind`, taken by `Serve`.
    pub listeners: RefCell<Vec<TcpListener>>,
    /// The controller (core 0 only).
    pub controller: Option<Controller>,
    /// Resolved once this core finished shutting down.
    pub stopped: Notify,
    /// The consumer groups this core coordinates.
    pub groups: crate::groups::coordinator::Coordinator,
}

impl Core {
    /// Builds the core's state.
    pub fn new(
        id: usize,
        config: Arc<BrokerConfig>,
        storage: Rc<CoreStorage>,
        senders: &CoreSenders<Vec<CoreMessage>>,
    ) -> Rc<Core> {
        let cores = senders.cores();
        let outboxes = (0..cores)
            .map(|to| (to != id).then(|| Outbox::new(to, config.limits.cross_core_queue_depth_max)))
            .collect();
        let connections_max = config.limits.connections_max.div_ceil(cores as u32).max(1);
        Rc::new(Core {
            id,
            cores,
            metadata: RefCell::new(Arc::new(MetadataImage::new(cores as u16))),
            topics: RefCell::new(HashMap::new()),
            storage,
            outboxes,
            metrics: CoreMetrics::new(id),
            endpoints: RefCell::new(Arc::new(Vec::new())),
            request_memory: Rc::new(Semaphore::new(
                config.limits.request_memory_bytes_max_per_core,
            )),
            connections: Cell::new(0),
            connections_max,
            shutting_down: Cell::new(false),
            shutdown: Notify::default(),
            connection_closed: Notify::default(),
            listeners: RefCell::new(Vec::new()),
            controller: (id == 0).then(Controller::new),
            stopped: Notify::default(),
            groups: crate::groups::coordinator::Coordinator::new(&config.groups),
            config,
        })
    }

    /// Queues a message for core `to` (waits while that outbox is full).
    pub async fn send(&self, to: usize, msg: CoreMessage) {
        match self.outboxes.get(to).and_then(|o| o.as_ref()) {
            Some(outbox) => outbox.push(msg).await,
            None => tracing::error!(
                core = self.id,
                to,
                "message to self or unknown core dropped"
            ),
        }
    }

    /// Sends a message to core `to` built around a reply channel, and waits for the reply.
    pub async fn ask<R>(
        &self,
        to: usize,
        make: impl FnOnce(oneshot::Sender<R>) -> CoreMessage,
    ) -> Result<R, Failure> {
        let (tx, rx) = oneshot::channel();
        self.send(to, make(tx)).await;
        crate::router::await_reply(rx).await
    }

    /// Runs an operation on every core at once: `local` here, and the message built by `remote`
    /// on every other core. Waits for all of them; the errors of every core, joined.
    pub async fn on_every_core(
        self: &Rc<Self>,
        local: impl std::future::Future<Output = Result<(), String>>,
        remote: impl Fn(oneshot::Sender<Result<(), String>>) -> CoreMessage,
    ) -> Result<(), String> {
        let mut asks = Vec::new();
        for to in (0..self.cores).filter(|&to| to != self.id) {
            let (tx, rx) = oneshot::channel();
            self.send(to, remote(tx)).await;
            asks.push(task::spawn(async move {
                crate::router::await_reply(rx)
                    .await
                    .map_err(|f| f.message.unwrap_or_default())
                    .and_then(|r| r)
            }));
        }
        let mut errors = Vec::new();
        if let Err(e) = local.await {
            errors.push(e);
        }
        for a in asks {
            if let Err(e) = a.await {
                errors.push(e);
            }
        }
        if errors.is_empty() {
            Ok(())
        } else {
            Err(errors.join("; "))
        }
    }

    /// The topic record and the owning core of a partition, from this core's metadata.
    pub fn locate(
        &self,
        topic: &str,
        partition: i32,
    ) -> Result<(usize, Arc<MetadataImage>), Failure> {
        let image = self.metadata.borrow().clone();
        let Some(t) = image.topics.get(topic) else {
            return Err(Failure::new(
                ErrorCode::UnknownTopicOrPartition,
                format!("topic {topic:?} does not exist"),
            ));
        };
        let Some(p) = usize::try_from(partition)
            .ok()
            .and_then(|i| t.partitions.get(i))
        else {
            return Err(Failure::new(
                ErrorCode::UnknownTopicOrPartition,
                format!(
                    "topic {topic:?} has {} partitions; partition {partition} does not exist",
                    t.partitions.len()
                ),
            ));
        };
        Ok((usize::from(p.core), image))
    }

    /// The log of a partition this core owns.
    pub fn log(&self, partition: &PartitionRef) -> Result<Rc<PartitionLog>, Failure> {
        self.topics
            .borrow()
            .get(&*partition.topic)
            .and_then(|t| t.logs.get(partition.partition as usize))
            .and_then(|l| l.clone())
            .ok_or_else(|| {
                Failure::new(
                    ErrorCode::NotLeaderOrFollower,
                    format!(
                        "{}-{} is not served by core {}",
                        partition.topic, partition.partition, self.id
                    ),
                )
            })
    }

    /// Brings this core's partitions in line with `image`: opens new ones, reconfigures
    /// changed ones, deletes removed topics' logs.
    pub async fn apply_metadata(self: &Rc<Self>, image: Arc<MetadataImage>) -> Result<(), String> {
        let old = self.metadata.replace(image.clone());
        if old.revision > image.revision {
            self.metadata.replace(old);
            return Ok(());
        }
        self.drop_removed_topics(&image).await?;
        let mut opens = Vec::new();
        for t in image.topics.values() {
            self.reconfigure_topic(t, &old).await?;
            for (p, rec) in t.partitions.iter().enumerate() {
                if usize::from(rec.core) == self.id && !self.has_log(&t.name, t.id, p) {
                    opens.push((t.clone(), p));
                }
            }
        }
        for chunk in opens.chunks(PARTITION_OPENS_IN_FLIGHT_MAX) {
            let tasks: Vec<_> = chunk
                .iter()
                .map(|(t, p)| {
                    let core = self.clone();
                    let (t, p) = (t.clone(), *p);
                    task::spawn(async move { core.open_partition(&t, p).await })
                })
                .collect();
            for t in tasks {
                t.await?;
            }
        }
        crate::groups::coordinator::load(self).await
    }

    fn has_log(&self, topic: &str, id: Uuid, partition: usize) -> bool {
        self.topics
            .borrow()
            .get(topic)
            .is_some_and(|t| t.id == id && t.logs.get(partition).is_some_and(|l| l.is_some()))
    }

    async fn open_partition(&self, topic: &TopicRecord, partition: usize) -> Result<(), String> {
        let dir = partition_dir(&self.config.data_dir, &topic.name, partition as u32);
        let log_config = topic_config::log_config(&topic.configs, &self.config);
        let log = PartitionLog::open(&self.storage, dir.clone(), log_config)
            .await
            .map_err(|e| format!("opening {}: {e}", dir.display()))?;
        let mut topics = self.topics.borrow_mut();
        let entry = topics
            .entry(topic.name.clone())
            .or_insert_with(|| TopicLogs {
                id: topic.id,
                logs: Vec::new(),
            });
        if entry.logs.len() < topic.partitions.len() {
            entry.logs.resize(topic.partitions.len(), None);
        }
        entry.logs[partition] = Some(log);
        Ok(())
    }

    async fn reconfigure_topic(&self, t: &TopicRecord, old: &MetadataImage) -> Result<(), String> {
        let changed = old
            .topics
            .get(&t.name)
            .is_some_and(|o| o.id == t.id && o.configs != t.configs);
        if !changed {
            return Ok(());
        }
        let logs: Vec<Rc<PartitionLog>> = self
            .topics
            .borrow()
            .get(&t.name)
            .map(|tl| tl.logs.iter().flatten().cloned().collect())
            .unwrap_or_default();
        let log_config = topic_config::log_config(&t.configs, &self.config);
        for log in logs {
            log.update_config(log_config.clone())
                .await
                .map_err(|e| format!("reconfiguring {}: {e}", t.name))?;
        }
        Ok(())
    }

    async fn drop_removed_topics(&self, image: &MetadataImage) -> Result<(), String> {
        let removed: Vec<(String, TopicLogs)> = {
            let mut topics = self.topics.borrow_mut();
            let names: Vec<String> = topics
                .iter()
                .filter(|(name, tl)| image.topics.get(*name).is_none_or(|t| t.id != tl.id))
                .map(|(name, _)| name.clone())
                .collect();
            names
                .into_iter()
                .filter_map(|n| topics.remove(&n).map(|tl| (n, tl)))
                .collect()
        };
        for (name, tl) in removed {
            for log in tl.logs.into_iter().flatten() {
                log.delete()
                    .await
                    .map_err(|e| format!("deleting a partition of {name}: {e}"))?;
            }
            tracing::info!(core = self.id, topic = %name, "deleted topic's partitions");
        }
        Ok(())
    }

    /// Every log this core owns.
    pub fn all_logs(&self) -> Vec<(PartitionRef, Rc<PartitionLog>)> {
        let topics = self.topics.borrow();
        let mut out = Vec::new();
        for (name, tl) in topics.iter() {
            let topic: Arc<str> = Arc::from(name.as_str());
            for (p, log) in tl.logs.iter().enumerate() {
                if let Some(log) = log {
                    out.push((
                        PartitionRef {
                            topic: topic.clone(),
                            partition: p as u32,
                        },
                        log.clone(),
                    ));
                }
            }
        }
        out
    }
}

/// Runs one inbox: executes the batches of messages coming from one other core, in order.
pub async fn run_inbox(core: Rc<Core>, inbox: CoreReceiver<Vec<CoreMessage>>) {
    while let Some(batch) = inbox.recv().await {
        borges_runtime::executor::note_activity();
        for msg in batch {
            crate::dispatch::execute(&core, msg).await;
        }
    }
}
