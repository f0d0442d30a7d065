//! The controller: core 0 of every broker performs that broker's metadata changes, one at a
//! time: validate, persist, then wait until every core has opened, reconfigured or deleted
//! its partitions. Requests arriving on other cores are forwarded there by the broker.
//!
//! Single node: core 0 owns the metadata store (a file) and pushes each new image to every
//! core. Cluster: the change is committed through the Raft metadata log by the active
//! controller ([`ControllerCluster::write`]), every member applies it, and this broker answers
//! once all its cores applied it. Topics are placed on running brokers (`place_replicas`). The
//! state machine re-validates every change against the image it applies to, so requests
//! racing on two brokers both commit and the later one is answered with the refusal.
//!
//! The broker reaches this module through [`ControllerHost`] (its cores, its topic-config
//! validation) and [`ControllerCluster`] (its cluster member's handle); this crate names no
//! broker type.

pub mod producer_ids;

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use borges_protocol::ErrorCode;
use borges_runtime::sync::Semaphore;
use borges_runtime::task;
use futures_channel::oneshot;
use thiserror::Error;

use crate::cluster::{place_replicas, ChangeReply};
use crate::failure::Failure;
use crate::metadata::{
    check_topic_name, MetadataChange, MetadataError, MetadataImage, MetadataStore, PartitionRecord,
    TopicRecord, Uuid, CONSUMER_OFFSETS_TOPIC,
};
use producer_ids::{DurableCounter, ProducerIdAndEpoch, ProducerIdManager};

/// Why the controller could not load (start-up errors; requests answer [`Failure`]s).
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum ControllerError {
    /// A controller file exists but cannot be trusted (the broker reports it as invalid
    /// configuration: an operator must decide).
    #[error("{0}")]
    Damaged(String),
    /// Reading a controller file failed.
    #[error("{context}: {cause}")]
    Io {
        /// What was being done.
        context: String,
        /// The cause.
        cause: std::io::Error,
    },
    /// The metadata store is unreadable.
    #[error("metadata: {0}")]
    Metadata(#[from] MetadataError),
    /// A metadata change failed.
    #[error(transparent)]
    Failed(#[from] Failure),
}

/// A topic to create.
#[derive(Debug, Clone)]
pub struct NewTopic {
    /// Name.
    pub name: String,
    /// -1 for the broker default.
    pub num_partitions: i32,
    /// -1 for the broker default (1).
    pub replication_factor: i16,
    /// Config overrides (null values are ignored).
    pub configs: Vec<(String, Option<String>)>,
}

/// A created (or validated) topic.
#[derive(Debug, Clone)]
pub struct TopicCreated {
    /// Topic id.
    pub id: Uuid,
    /// Partitions.
    pub num_partitions: i32,
    /// Replication factor.
    pub replication_factor: i16,
    /// Config overrides.
    pub configs: BTreeMap<String, String>,
}

/// One config operation of an AlterConfigs.
#[derive(Debug, Clone)]
pub enum ConfigOp {
    /// Set a value.
    Set(String, String),
    /// Return to the broker default.
    Delete(String),
}

/// Per-item results of controller requests.
pub type Results<T> = Vec<Result<T, Failure>>;

/// Requests only the controller executes.
pub enum ControllerRequest {
    /// CreateTopics.
    CreateTopics {
        /// Topics, in request order.
        topics: Vec<NewTopic>,
        /// Check without creating.
        validate_only: bool,
        /// One result per topic.
        reply: oneshot::Sender<Results<TopicCreated>>,
    },
    /// DeleteTopics.
    DeleteTopics {
        /// Topic names.
        names: Vec<String>,
        /// One result per name.
        reply: oneshot::Sender<Results<()>>,
    },
    /// AlterConfigs on topics.
    AlterConfigs {
        /// (topic, operations).
        resources: Vec<(String, Vec<ConfigOp>)>,
        /// Check without changing.
        validate_only: bool,
        /// One result per resource.
        reply: oneshot::Sender<Results<()>>,
    },
    /// CreatePartitions.
    CreatePartitions {
        /// (topic, new total count).
        topics: Vec<(String, i32)>,
        /// Check without changing.
        validate_only: bool,
        /// One result per topic.
        reply: oneshot::Sender<Results<()>>,
    },
    /// InitProducerId: a fresh producer id (not a metadata change: it does not wait for one).
    InitProducerId {
        /// One result.
        reply: oneshot::Sender<Results<ProducerIdAndEpoch>>,
    },
}

/// What the controller needs from the broker it runs in (its core 0). Narrow on purpose.
pub trait ControllerHost {
    /// The broker's error; start-up errors of the controller convert into it.
    type Error: From<ControllerError> + std::fmt::Display;
    /// Pushes `image` to every core and resolves once each has applied it.
    fn publish(&self, image: Arc<MetadataImage>) -> LocalFuture<'_, Result<(), Self::Error>>;
    /// Checks topic config overrides against the broker's settings; the error says why not.
    fn check_topic_configs(&self, configs: &BTreeMap<String, String>) -> Result<(), String>;
    /// Whether `key` is a topic config the broker knows.
    fn is_topic_config(&self, key: &str) -> bool;
    /// The cluster member, in cluster mode.
    fn cluster(&self) -> Option<Arc<dyn ControllerCluster>>;
}

/// What the controller needs from the cluster member of its process (cluster mode): the
/// broker's cluster handle, which reaches the Raft executor thread.
pub trait ControllerCluster: Send + Sync {
    /// This broker's node id.
    fn node_id(&self) -> i32;
    /// The latest image the member applied.
    fn latest(&self) -> Arc<MetadataImage>;
    /// Commits a metadata change through the active controller.
    fn write(&self, change: MetadataChange) -> LocalFuture<'_, Result<ChangeReply, Failure>>;
    /// Waits until every core has applied `revision`; false after `timeout`.
    fn wait_applied(&self, revision: u64, timeout: Duration) -> LocalFuture<'_, bool>;
    /// How long metadata requests wait for the controller.
    fn request_timeout(&self) -> Duration;
    /// The number of controller voters.
    fn voters(&self) -> usize;
    /// The replication factor of a topic created with -1.
    fn default_replication_factor(&self) -> i16;
    /// The replication factor `__consumer_offsets` asks for.
    fn offsets_topic_replication_factor(&self) -> i16;
}

/// A future that stays on its core.
pub type LocalFuture<'a, T> = Pin<Box<dyn Future<Output = T> + 'a>>;

/// The broker settings the controller uses, as plain values.
#[derive(Debug, Clone)]
pub struct ControllerSettings {
    /// Where the metadata store lives.
    pub data_dir: PathBuf,
    /// Cores partitions are placed on.
    pub cores: u16,
    /// Topics in the cluster at most.
    pub topics_max: u32,
    /// Partitions per topic at most.
    pub partitions_per_topic_max: u32,
    /// Partitions of a topic created with -1.
    pub default_partitions: u32,
    /// Partitions of `__consumer_offsets`.
    pub offsets_topic_partitions: u32,
}

/// Controller state. Lives on core 0.
pub struct Controller {
    settings: ControllerSettings,
    store: RefCell<Option<MetadataStore>>,
    /// Loaded with the store.
    producer_ids: RefCell<Option<Rc<ProducerIdManager>>>,
    /// One metadata change at a time.
    lock: Rc<Semaphore>,
}

impl Controller {
    /// A controller without a loaded store.
    pub fn new(settings: ControllerSettings) -> Controller {
        Controller {
            settings,
            store: RefCell::new(None),
            producer_ids: RefCell::new(None),
            lock: Rc::new(Semaphore::new(1)),
        }
    }
}

impl Controller {
    /// Loads the metadata store (creating it on first start) and pushes it to every core.
    pub async fn load<H: ControllerHost + ?Sized>(&self, host: &H) -> Result<(), H::Error> {
        if let Some(cluster) = host.cluster() {
            // The image comes from the metadata log; `__consumer_offsets` is created once
            // enough brokers run (`ensure_offsets_topic`); producer-id blocks come from the
            // log too, so no two brokers hand out the same id.
            let blocks = producer_ids::ClusterProducerIds(cluster);
            *self.producer_ids.borrow_mut() =
                Some(Rc::new(ProducerIdManager::new(Box::new(blocks))));
            return Ok(());
        }
        let data_dir = self.settings.data_dir.clone();
        let cores = self.settings.cores;
        let (store, counter) = task::spawn_blocking(move || {
            let store = MetadataStore::load_or_create(&data_dir, cores)?;
            let meta_dir = MetadataStore::path_in(&data_dir)
                .parent()
                .map(std::path::Path::to_path_buf)
                .unwrap_or_else(|| data_dir.clone());
            Ok::<_, ControllerError>((store, DurableCounter::load(&meta_dir)?))
        })
        .await?;
        *self.producer_ids.borrow_mut() = Some(Rc::new(ProducerIdManager::new(Box::new(counter))));
        let image = store.image();
        tracing::info!(
            path = %store.path().display(),
            topics = image.topics.len(),
            revision = image.revision,
            "metadata loaded"
        );
        *self.store.borrow_mut() = Some(store);
        let image = if image.topics.contains_key(CONSUMER_OFFSETS_TOPIC) {
            image
        } else {
            self.commit(
                host,
                MetadataChange::CreateTopic(self.offsets_topic(&image)),
            )
            .await
            .map_err(ControllerError::from)?
        };
        let image = match offsets_topic_migration(&image) {
            Some(change) => self
                .commit(host, change)
                .await
                .map_err(ControllerError::from)?,
            None => image,
        };
        host.publish(image).await
    }

    /// The internal topic that stores committed offsets.
    fn offsets_topic(&self, image: &MetadataImage) -> TopicRecord {
        let partitions = self.settings.offsets_topic_partitions as usize;
        let mut configs = BTreeMap::new();
        // Compacted (as Kafka's): the latest commit per (group, topic, partition) is kept, a
        // tombstone removes one after delete.retention.ms.
        configs.insert("cleanup.policy".to_string(), "compact".to_string());
        configs.insert("segment.bytes".to_string(), (100u64 << 20).to_string());
        configs.insert("durability".to_string(), "fsync".to_string());
        TopicRecord {
            name: CONSUMER_OFFSETS_TOPIC.to_string(),
            id: Uuid::random(),
            internal: true,
            configs,
            partitions: image
                .place(partitions)
                .into_iter()
                .map(PartitionRecord::single_node)
                .collect(),
        }
    }

    /// Cluster mode: creates `__consumer_offsets` once as many brokers run as its
    /// replication factor asks (capped by the voter count). Returns whether it exists now.
    pub async fn ensure_offsets_topic<H: ControllerHost + ?Sized>(&self, host: &H) -> bool {
        let Some(cluster) = host.cluster() else {
            return true;
        };
        let image = cluster.latest();
        if image.topics.contains_key(CONSUMER_OFFSETS_TOPIC) {
            if let Some(change) = offsets_topic_migration(&image) {
                let _permit = self.lock.acquire_static_permit(1).await;
                if let Err(f) = self.commit(host, change).await {
                    tracing::warn!("making {CONSUMER_OFFSETS_TOPIC} compacted: {f}");
                }
            }
            return true;
        }
        let voters = cluster.voters().max(1);
        let rf = (cluster.offsets_topic_replication_factor().max(1) as usize).min(voters);
        let Ok(placed) =
            place_replicas(&image, self.settings.offsets_topic_partitions as usize, rf)
        else {
            return false;
        };
        let mut topic = self.offsets_topic(&image);
        topic.partitions = placed;
        let _permit = self.lock.acquire_static_permit(1).await;
        match self.commit(host, MetadataChange::CreateTopic(topic)).await {
            Ok(_) => true,
            Err(f) if f.code == ErrorCode::TopicAlreadyExists => true,
            Err(f) => {
                tracing::warn!("creating {CONSUMER_OFFSETS_TOPIC}: {f}");
                false
            }
        }
    }

    /// Persists a change (on a blocking thread, or through the cluster's metadata log) and
    /// returns the new image.
    async fn commit<H: ControllerHost + ?Sized>(
        &self,
        host: &H,
        change: MetadataChange,
    ) -> Result<Arc<MetadataImage>, Failure> {
        if let Some(cluster) = host.cluster() {
            return commit_to_cluster(&*cluster, change).await;
        }
        let store = self.store.borrow_mut().take();
        let Some(mut store) = store else {
            return Err(Failure::new(
                ErrorCode::CoordinatorLoadInProgress,
                "metadata is not loaded yet",
            ));
        };
        let before = store.image().revision;
        let (store, result) = task::spawn_blocking(move || {
            let r = store.commit(&change);
            (store, r)
        })
        .await;
        *self.store.borrow_mut() = Some(store);
        let image = result.map_err(|e| {
            let code = match &e {
                MetadataError::Io { cause, .. } => crate::failure::io_error_code(cause),
                _ => ErrorCode::StorageError,
            };
            Failure::new(code, e.to_string())
        })?;
        strict_assert_eq!(image.revision, before + 1, "one revision per change");
        Ok(image)
    }

    fn current<H: ControllerHost + ?Sized>(&self, host: &H) -> Arc<MetadataImage> {
        if let Some(cluster) = host.cluster() {
            return cluster.latest();
        }
        self.store
            .borrow()
            .as_ref()
            .map(|s| s.image())
            .unwrap_or_else(|| Arc::new(MetadataImage::new(self.settings.cores)))
    }

    /// Executes a controller request and replies.
    pub async fn execute<H: ControllerHost + ?Sized>(&self, host: &H, request: ControllerRequest) {
        let request = match request {
            ControllerRequest::InitProducerId { reply } => {
                let _ = reply.send(vec![self.init_producer_id().await]);
                return;
            }
            other => other,
        };
        let lock = self.lock.clone();
        let _permit = lock.acquire_static_permit(1).await;
        match request {
            ControllerRequest::CreateTopics {
                topics,
                validate_only,
                reply,
            } => {
                let _ = reply.send(self.create_topics(host, topics, validate_only).await);
            }
            ControllerRequest::DeleteTopics { names, reply } => {
                let _ = reply.send(self.delete_topics(host, names).await);
            }
            ControllerRequest::AlterConfigs {
                resources,
                validate_only,
                reply,
            } => {
                let _ = reply.send(self.alter_configs(host, resources, validate_only).await);
            }
            ControllerRequest::CreatePartitions {
                topics,
                validate_only,
                reply,
            } => {
                let _ = reply.send(self.create_partitions(host, topics, validate_only).await);
            }
            ControllerRequest::InitProducerId { .. } => unreachable!("answered above"),
        }
    }

    async fn init_producer_id(&self) -> Result<ProducerIdAndEpoch, Failure> {
        let manager = self.producer_ids.borrow().clone();
        match manager {
            Some(m) => m.next().await,
            None => Err(Failure::new(
                ErrorCode::Busy,
                "producer ids are not loaded yet; retry",
            )),
        }
    }

    /// Applies `changes` in order (persisting each), then pushes the final image to every core.
    /// Each change's slot receives the commit's failure, or the broadcast's failure.
    async fn commit_all<H: ControllerHost + ?Sized, T: Clone>(
        &self,
        host: &H,
        changes: Vec<(usize, MetadataChange, T)>,
        results: &mut [Result<T, Failure>],
    ) {
        let mut last = None;
        let mut committed = Vec::new();
        for (i, change, ok) in changes {
            match self.commit(host, change).await {
                Ok(image) => {
                    last = Some(image);
                    results[i] = Ok(ok);
                    committed.push(i);
                }
                Err(f) => results[i] = Err(f),
            }
        }
        // In cluster mode every core applied the change before `commit` returned.
        if let Some(image) = last.filter(|_| host.cluster().is_none()) {
            if let Err(e) = host.publish(image).await {
                tracing::error!("applying metadata on cores failed: {e}");
                for i in committed {
                    results[i] = Err(Failure::new(
                        ErrorCode::StorageError,
                        format!("metadata committed but not applied on every core: {e}"),
                    ));
                }
            }
        }
    }

    async fn create_topics<H: ControllerHost + ?Sized>(
        &self,
        host: &H,
        topics: Vec<NewTopic>,
        validate_only: bool,
    ) -> Results<TopicCreated> {
        let mut results = pending(topics.len());
        let mut image = (*self.current(host)).clone();
        let mut changes = Vec::new();
        let mut seen = std::collections::HashSet::new();
        for (i, t) in topics.into_iter().enumerate() {
            if !seen.insert(t.name.clone()) {
                results[i] = Err(Failure::new(
                    ErrorCode::InvalidRequest,
                    format!("topic {:?} appears twice in the request", t.name),
                ));
                continue;
            }
            match self.new_topic_record(host, &image, &t) {
                Err(f) => results[i] = Err(f),
                Ok(record) => {
                    let created = TopicCreated {
                        id: record.id,
                        num_partitions: record.partitions.len() as i32,
                        replication_factor: record
                            .partitions
                            .first()
                            .map_or(1, |p| p.replicas.len() as i16),
                        configs: record.configs.clone(),
                    };
                    if validate_only {
                        results[i] = Ok(created);
                        continue;
                    }
                    let change = MetadataChange::CreateTopic(record);
                    match image.apply(&change) {
                        Ok(next) => image = next,
                        Err(e) => {
                            results[i] =
                                Err(Failure::new(ErrorCode::InvalidRequest, e.to_string()));
                            continue;
                        }
                    }
                    changes.push((i, change, created));
                }
            }
        }
        self.commit_all(host, changes, &mut results).await;
        results
    }

    fn new_topic_record<H: ControllerHost + ?Sized>(
        &self,
        host: &H,
        image: &MetadataImage,
        t: &NewTopic,
    ) -> Result<TopicRecord, Failure> {
        let limits = &self.settings;
        check_topic_name(&t.name)
            .map_err(|e| Failure::new(ErrorCode::InvalidTopicName, e.to_string()))?;
        if image.topics.contains_key(&t.name) {
            return Err(Failure::new(
                ErrorCode::TopicAlreadyExists,
                format!("topic {:?} already exists", t.name),
            ));
        }
        if image.topics.len() as u32 >= limits.topics_max {
            return Err(Failure::new(
                ErrorCode::LimitExceeded,
                format!(
                    "the cluster already has limits.topics_max = {} topics",
                    limits.topics_max
                ),
            ));
        }
        let partitions = if t.num_partitions == -1 {
            self.settings.default_partitions as i32
        } else {
            t.num_partitions
        };
        if partitions < 1 || partitions as u32 > limits.partitions_per_topic_max {
            return Err(Failure::new(
                ErrorCode::InvalidPartitions,
                format!(
                    "partition count {partitions} must be between 1 and {} (limits.partitions_per_topic_max)",
                    limits.partitions_per_topic_max
                ),
            ));
        }
        if host.cluster().is_none() && !matches!(t.replication_factor, -1 | 1) {
            return Err(Failure::new(
                ErrorCode::InvalidReplicationFactor,
                format!(
                    "replication factor {} is larger than the 1 broker available",
                    t.replication_factor
                ),
            ));
        }
        let configs: BTreeMap<String, String> = t
            .configs
            .iter()
            .filter_map(|(k, v)| v.as_ref().map(|v| (k.clone(), v.clone())))
            .collect();
        host.check_topic_configs(&configs)
            .map_err(|e| Failure::new(ErrorCode::InvalidConfig, e))?;
        let partitions = self.place(host, image, partitions as usize, t.replication_factor)?;
        Ok(TopicRecord {
            name: t.name.clone(),
            id: Uuid::random(),
            internal: false,
            configs,
            partitions,
        })
    }

    /// Partitions for `count` new ones: on cores of this broker (single node), or replicas
    /// on distinct running brokers (cluster; -1 = `default_replication_factor`).
    fn place<H: ControllerHost + ?Sized>(
        &self,
        host: &H,
        image: &MetadataImage,
        count: usize,
        replication_factor: i16,
    ) -> Result<Vec<PartitionRecord>, Failure> {
        let Some(cluster) = host.cluster() else {
            let cores = image.place(count);
            return Ok(cores
                .into_iter()
                .map(PartitionRecord::single_node)
                .collect());
        };
        let rf = match replication_factor {
            -1 => cluster.default_replication_factor(),
            rf => rf,
        };
        if rf < 1 {
            return Err(Failure::new(
                ErrorCode::InvalidReplicationFactor,
                format!("replication factor {rf} must be at least 1"),
            ));
        }
        place_replicas(image, count, rf as usize)
            .map_err(|e| Failure::new(ErrorCode::InvalidReplicationFactor, e.to_string()))
    }

    async fn delete_topics<H: ControllerHost + ?Sized>(
        &self,
        host: &H,
        names: Vec<String>,
    ) -> Results<()> {
        let mut results = pending(names.len());
        let mut image = (*self.current(host)).clone();
        let mut changes = Vec::new();
        for (i, name) in names.into_iter().enumerate() {
            let Some(t) = image.topics.get(&name) else {
                results[i] = Err(Failure::new(
                    ErrorCode::UnknownTopicOrPartition,
                    format!("topic {name:?} does not exist"),
                ));
                continue;
            };
            if t.internal {
                results[i] = Err(Failure::new(
                    ErrorCode::InvalidTopicOperation,
                    format!("{name} is internal and cannot be deleted"),
                ));
                continue;
            }
            let change = MetadataChange::DeleteTopic { name };
            if let Ok(next) = image.apply(&change) {
                image = next;
            }
            changes.push((i, change, ()));
        }
        self.commit_all(host, changes, &mut results).await;
        results
    }

    async fn alter_configs<H: ControllerHost + ?Sized>(
        &self,
        host: &H,
        resources: Vec<(String, Vec<ConfigOp>)>,
        validate_only: bool,
    ) -> Results<()> {
        let mut results = pending(resources.len());
        let mut image = (*self.current(host)).clone();
        let mut changes = Vec::new();
        for (i, (name, ops)) in resources.into_iter().enumerate() {
            let Some(t) = image.topics.get(&name) else {
                results[i] = Err(Failure::new(
                    ErrorCode::UnknownTopicOrPartition,
                    format!("topic {name:?} does not exist"),
                ));
                continue;
            };
            let mut configs = t.configs.clone();
            for op in ops {
                match op {
                    ConfigOp::Set(k, v) => {
                        configs.insert(k, v);
                    }
                    ConfigOp::Delete(k) => {
                        if !host.is_topic_config(&k) {
                            results[i] = Err(Failure::new(
                                ErrorCode::InvalidConfig,
                                format!("unknown topic config {k:?}"),
                            ));
                        }
                        configs.remove(&k);
                    }
                }
            }
            if results[i]
                .as_ref()
                .is_err_and(|f| f.code == ErrorCode::InvalidConfig)
            {
                continue;
            }
            if let Err(e) = host.check_topic_configs(&configs) {
                results[i] = Err(Failure::new(ErrorCode::InvalidConfig, e));
                continue;
            }
            if validate_only {
                results[i] = Ok(());
                continue;
            }
            let change = MetadataChange::SetTopicConfigs { name, configs };
            if let Ok(next) = image.apply(&change) {
                image = next;
            }
            changes.push((i, change, ()));
        }
        self.commit_all(host, changes, &mut results).await;
        results
    }

    async fn create_partitions<H: ControllerHost + ?Sized>(
        &self,
        host: &H,
        topics: Vec<(String, i32)>,
        validate_only: bool,
    ) -> Results<()> {
        let mut results = pending(topics.len());
        let mut image = (*self.current(host)).clone();
        let mut changes = Vec::new();
        let max = self.settings.partitions_per_topic_max;
        for (i, (name, count)) in topics.into_iter().enumerate() {
            let Some(t) = image.topics.get(&name) else {
                results[i] = Err(Failure::new(
                    ErrorCode::UnknownTopicOrPartition,
                    format!("topic {name:?} does not exist"),
                ));
                continue;
            };
            let have = t.partitions.len() as i32;
            if t.internal {
                results[i] = Err(Failure::new(
                    ErrorCode::InvalidTopicOperation,
                    format!("{name} is internal"),
                ));
                continue;
            }
            if count <= have || count as u32 > max {
                results[i] = Err(Failure::new(
                    ErrorCode::InvalidPartitions,
                    format!("topic {name:?} has {have} partitions; the new count must be larger and at most {max}"),
                ));
                continue;
            }
            if validate_only {
                results[i] = Ok(());
                continue;
            }
            let rf = t.partitions.first().map_or(1, |p| p.replicas.len() as i16);
            let partitions = match self.place(host, &image, (count - have) as usize, rf) {
                Ok(p) => p,
                Err(f) => {
                    results[i] = Err(f);
                    continue;
                }
            };
            let change = MetadataChange::AddPartitions { name, partitions };
            if let Ok(next) = image.apply(&change) {
                image = next;
            }
            changes.push((i, change, ()));
        }
        self.commit_all(host, changes, &mut results).await;
        results
    }
}

/// A `__consumer_offsets` created before compaction existed has the `delete` policy and
/// `retention.ms=-1`, so it grows without bound: the change that makes it compacted (Kafka's
/// policy for it), keeping its other configs; None when its policy already compacts.
fn offsets_topic_migration(image: &MetadataImage) -> Option<MetadataChange> {
    let topic = image.topics.get(CONSUMER_OFFSETS_TOPIC)?;
    let compacts = topic
        .configs
        .get("cleanup.policy")
        .is_some_and(|p| p.split(',').any(|v| v.trim() == "compact"));
    if compacts {
        return None;
    }
    let mut configs = topic.configs.clone();
    configs.insert("cleanup.policy".to_string(), "compact".to_string());
    configs.remove("retention.ms");
    tracing::info!(
        "{CONSUMER_OFFSETS_TOPIC} predates compaction: setting cleanup.policy=compact \
         (the latest commit per group and partition is kept)"
    );
    Some(MetadataChange::SetTopicConfigs {
        name: CONSUMER_OFFSETS_TOPIC.to_string(),
        configs,
    })
}

/// Commits `change` through the metadata log and waits until every core of this broker has
/// applied it; the image is then this broker's.
async fn commit_to_cluster(
    cluster: &dyn ControllerCluster,
    change: MetadataChange,
) -> Result<Arc<MetadataImage>, Failure> {
    let reply = cluster.write(change).await?;
    if let Some((code, message)) = reply.error {
        return Err(Failure::new(ErrorCode::from_u16(code), message));
    }
    if !cluster
        .wait_applied(reply.index, cluster.request_timeout())
        .await
    {
        return Err(Failure::new(
            ErrorCode::RequestTimedOut,
            format!(
                "change committed at {} but not applied on every core within {:?}",
                reply.index,
                cluster.request_timeout()
            ),
        ));
    }
    Ok(cluster.latest())
}

fn pending<T>(n: usize) -> Vec<Result<T, Failure>> {
    (0..n)
        .map(|_| Err(Failure::new(ErrorCode::UnknownServerError, "not processed")))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn image_with_offsets_topic(configs: &[(&str, &str)]) -> MetadataImage {
        let mut image = MetadataImage::new(1);
        let topic = TopicRecord {
            name: CONSUMER_OFFSETS_TOPIC.to_string(),
            id: Uuid::random(),
            internal: true,
            configs: configs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            partitions: Vec::new(),
        };
        image.topics.insert(topic.name.clone(), topic);
        image
    }

    /// Planted: `compacts` true for any policy -> an old offsets topic is left on `delete`.
    #[test]
    fn an_offsets_topic_from_before_compaction_becomes_compacted() {
        let old = image_with_offsets_topic(&[
            ("retention.ms", "-1"),
            ("segment.bytes", "104857600"),
            ("durability", "fsync"),
        ]);
        let Some(MetadataChange::SetTopicConfigs { name, configs }) = offsets_topic_migration(&old)
        else {
            panic!("no migration for an offsets topic without a compact policy");
        };
        assert_eq!(name, CONSUMER_OFFSETS_TOPIC);
        assert_eq!(
            configs.get("cleanup.policy").map(String::as_str),
            Some("compact")
        );
        assert_eq!(
            configs.get("retention.ms"),
            None,
            "retention -1 would outlive compaction"
        );
        assert_eq!(
            configs.get("segment.bytes").map(String::as_str),
            Some("104857600")
        );
        assert_eq!(configs.get("durability").map(String::as_str), Some("fsync"));
        let migrated = old.apply(&MetadataChange::SetTopicConfigs { name, configs });
        assert!(offsets_topic_migration(&migrated.expect("applies")).is_none());
    }

    #[test]
    fn a_compacting_offsets_topic_or_none_is_left_alone() {
        for policy in ["compact", "compact,delete", "delete, compact"] {
            let image = image_with_offsets_topic(&[("cleanup.policy", policy)]);
            assert!(offsets_topic_migration(&image).is_none(), "{policy}");
        }
        assert!(offsets_topic_migration(&MetadataImage::new(1)).is_none());
    }
}
