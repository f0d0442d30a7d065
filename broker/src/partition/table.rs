//! `PartitionTable`: the partitions one core owns, by topic, kept in line with the metadata
//! image.

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::Arc;

use borges_protocol::ErrorCode;
use borges_runtime::sync::Semaphore;
use borges_runtime::task;
use borges_storage::{CoreStorage, PartitionLog, StorageError};

use borges_replication::replica::IsrChangeRequest;

use super::replica::{IsrOutbox, ReplicaContext};
use super::Partition;
use crate::config::BrokerConfig;
use crate::error::BrokerError;
use crate::failure::Failure;
use crate::metadata::{partition_dir, MetadataImage, PartitionRecord, TopicRecord, Uuid};
use crate::metrics::CoreMetrics;
use crate::topic_config;
use crate::types::PartitionRef;

/// Partitions opened concurrently while applying metadata.
const PARTITION_OPENS_IN_FLIGHT_MAX: usize = 32;

/// The partitions of one topic that this core owns (others are `None`).
struct TopicPartitions {
    /// Topic id the partitions belong to (a re-created topic gets new ones).
    id: Uuid,
    /// By partition index.
    partitions: Vec<Option<Rc<Partition>>>,
}

/// Every partition one core owns, and the core's copy of the metadata image that placed them.
/// Lives on one core.
pub struct PartitionTable {
    core: usize,
    config: Arc<BrokerConfig>,
    storage: Rc<CoreStorage>,
    metrics: Rc<CoreMetrics>,
    image: RefCell<Arc<MetadataImage>>,
    topics: RefCell<HashMap<String, TopicPartitions>>,
    /// ISR changes this core's leaders want committed (drained by the replication task).
    isr_outbox: Rc<IsrOutbox>,
    /// One image application at a time: a newer image waits until the one before it is
    /// applied, so an older one can never finish (open partitions, set roles) after it.
    applying: Rc<Semaphore>,
}

impl PartitionTable {
    /// An empty table for core `core` of `cores`.
    pub fn new(
        core: usize,
        cores: usize,
        config: Arc<BrokerConfig>,
        storage: Rc<CoreStorage>,
        metrics: Rc<CoreMetrics>,
    ) -> PartitionTable {
        PartitionTable {
            core,
            config,
            storage,
            metrics,
            image: RefCell::new(Arc::new(MetadataImage::new(cores as u16))),
            topics: RefCell::new(HashMap::new()),
            isr_outbox: Rc::new(IsrOutbox::default()),
            applying: Rc::new(Semaphore::new(1)),
        }
    }

    /// ISR changes this core's leaders want committed.
    pub fn isr_outbox(&self) -> &Rc<IsrOutbox> {
        &self.isr_outbox
    }

    /// Queues a leader's ISR change for the controller (dropped, and asked again at the next
    /// check, when the outbox is full).
    pub fn queue_isr_change(&self, p: &Partition, change: IsrChangeRequest) {
        if !self.isr_outbox.push(p.id().clone(), change.clone()) {
            p.isr_change_failed(change.leader_epoch);
        }
    }

    /// The periodic ISR check of every partition this core leads (every
    /// `replica_lag_time_max_ms / 2`): shrinks go to the outbox.
    pub fn check_isrs(&self, now_ms: i64) {
        for p in self.all() {
            if let Some(change) = p.check_isr(now_ms) {
                self.queue_isr_change(&p, change);
            }
        }
    }

    /// What the image means for the replicas on this core.
    fn replica_context(&self) -> ReplicaContext {
        ReplicaContext {
            broker_id: self.config.broker_id,
            cluster: self.config.cluster.enabled(),
            replica_lag_time_max_ms: self.config.cluster.replica_lag_time_max_ms as i64,
            now_ms: borges_runtime::time::now_ms(),
        }
    }

    /// Applies every partition's record of `image` to its replica role here.
    fn apply_roles(&self, image: &MetadataImage) {
        let ctx = self.replica_context();
        for p in self.all() {
            let rec = image
                .topics
                .get(&*p.id().topic)
                .and_then(|t| t.partitions.get(p.id().partition as usize));
            if let Some(rec) = rec {
                p.apply_replica_record(rec, ctx);
            }
        }
    }

    /// This core's copy of the metadata image.
    pub fn image(&self) -> Arc<MetadataImage> {
        self.image.borrow().clone()
    }

    /// The storage context of this core.
    pub fn storage(&self) -> &Rc<CoreStorage> {
        &self.storage
    }

    /// The metrics of this core.
    pub fn metrics(&self) -> &Rc<CoreMetrics> {
        &self.metrics
    }

    /// Whether this core holds a replica of `rec` (on a single node: owns it).
    pub fn replica_here(&self, rec: &PartitionRecord) -> bool {
        rec.core_on(self.config.broker_id)
            .is_some_and(|c| usize::from(c) == self.core)
    }

    /// Whether this broker leads `rec` (a single node leads everything).
    pub fn leads(&self, rec: &PartitionRecord) -> bool {
        !self.config.cluster.enabled() || rec.leader == self.config.broker_id
    }

    /// The core owning a partition, and the image that says so. In a cluster, only the
    /// partition's leader serves it; other brokers answer `NotLeaderOrFollower`.
    pub fn locate(
        &self,
        topic: &str,
        partition: i32,
    ) -> Result<(usize, Arc<MetadataImage>), Failure> {
        let image = self.image();
        let Some(t) = image.topics.get(topic) else {
            return Err(unknown_topic(topic));
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
        if !self.leads(p) {
            return Err(Failure::new(
                ErrorCode::NotLeaderOrFollower,
                format!(
                    "broker {} does not lead {topic}-{partition} (leader: {}, epoch {}); \
                     refresh metadata",
                    self.config.broker_id, p.leader, p.leader_epoch
                ),
            ));
        }
        Ok((usize::from(p.core), image))
    }

    /// A partition this core owns.
    pub fn get(&self, partition: &PartitionRef) -> Result<Rc<Partition>, Failure> {
        let found = self
            .topics
            .borrow()
            .get(&*partition.topic)
            .and_then(|t| t.partitions.get(partition.partition as usize))
            .and_then(|p| p.clone());
        if let Some(p) = &found {
            strict_assert!(p.core() == self.core && p.id() == partition);
        }
        found.ok_or_else(|| {
            Failure::new(
                ErrorCode::NotLeaderOrFollower,
                format!("{partition} is not served by core {}", self.core),
            )
        })
    }

    /// Every partition this core owns.
    pub fn all(&self) -> Vec<Rc<Partition>> {
        let topics = self.topics.borrow();
        topics
            .values()
            .flat_map(|t| t.partitions.iter().flatten().cloned())
            .collect()
    }

    /// Brings this core's partitions in line with `image`: opens new ones, reconfigures
    /// changed ones, deletes removed topics' logs. An image older than the current one is
    /// ignored, and applications run one at a time in arrival order, so the core's image (its
    /// revision, and the leader epochs it carries) only moves forward.
    pub async fn apply(self: &Rc<Self>, image: Arc<MetadataImage>) -> Result<(), BrokerError> {
        let applying = self.applying.clone();
        let _one_at_a_time = applying.acquire_static_permit(1).await;
        let old = self.image.replace(image.clone());
        if old.revision > image.revision {
            self.image.replace(old);
            return Ok(());
        }
        self.drop_removed_topics(&image).await?;
        // One shared copy of a topic's record for all its partitions to open: a copy each
        // made creating a topic of N partitions cost N copies of N partition records (10 GB
        // and more at 9,000 partitions, the broker's memory growing until it died).
        let mut opens: Vec<(Rc<TopicRecord>, usize)> = Vec::new();
        for t in image.topics.values() {
            self.reconfigure_topic(t, &old).await?;
            let mut shared: Option<Rc<TopicRecord>> = None;
            for (p, rec) in t.partitions.iter().enumerate() {
                if self.replica_here(rec) && !self.has(&t.name, t.id, p) {
                    let t = shared.get_or_insert_with(|| Rc::new(t.clone()));
                    opens.push((t.clone(), p));
                }
            }
        }
        for chunk in opens.chunks(PARTITION_OPENS_IN_FLIGHT_MAX) {
            let tasks: Vec<_> = chunk
                .iter()
                .map(|(t, p)| {
                    let table = self.clone();
                    let (t, p) = (t.clone(), *p);
                    task::spawn(async move { table.open(&t, p).await })
                })
                .collect();
            for t in tasks {
                t.await?;
            }
        }
        self.apply_roles(&image);
        Ok(())
    }

    fn has(&self, topic: &str, id: Uuid, partition: usize) -> bool {
        self.topics
            .borrow()
            .get(topic)
            .is_some_and(|t| t.id == id && t.partitions.get(partition).is_some_and(|p| p.is_some()))
    }

    async fn open(&self, topic: &TopicRecord, partition: usize) -> Result<(), BrokerError> {
        let dir = partition_dir(&self.config.data_dir, &topic.name, partition as u32);
        let log_config = topic_config::log_config(&topic.configs, &self.config);
        let opening = |source| BrokerError::Partition {
            action: "opening",
            partition: dir.display().to_string(),
            cause: source,
        };
        if self.repairable(topic, partition) {
            super::repair::resume_interrupted(&self.storage, &dir)
                .await
                .map_err(opening)?;
        }
        let log = match PartitionLog::open(&self.storage, dir.clone(), log_config.clone()).await {
            Ok(log) => log,
            // Corrupt before the recovery point: a replica fetches its log again from the
            // leader and does not lead until then (`repair`); a lone replica stays refused.
            Err(cause @ StorageError::Corrupt { .. }) if self.repairable(topic, partition) => {
                super::repair::quarantine(&self.storage, &dir, &cause)
                    .await
                    .map_err(opening)?;
                PartitionLog::open(&self.storage, dir.clone(), log_config)
                    .await
                    .map_err(opening)?
            }
            Err(cause) => return Err(opening(cause)),
        };
        log.set_compaction(topic_config::compaction_config(
            &topic.configs,
            &self.config,
        ));
        let id = PartitionRef {
            topic: Arc::from(topic.name.as_str()),
            partition: partition as u32,
        };
        let leader_epoch = topic
            .partitions
            .get(partition)
            .map_or(0, |p| p.leader_epoch);
        let min_isr = topic_config::min_insync_replicas(&topic.configs);
        strict_assert!(
            topic
                .partitions
                .get(partition)
                .is_some_and(|p| self.replica_here(p)),
            "core {} opens {id}, which the image places elsewhere",
            self.core
        );
        let opened = Partition::open(
            id,
            self.core,
            log,
            leader_epoch,
            min_isr,
            &self.config.producers,
        )
        .await
        .map_err(|source| BrokerError::Partition {
            action: "rebuilding the producer state of",
            partition: dir.display().to_string(),
            cause: source,
        })?;
        self.install(topic, partition, Rc::new(opened));
        Ok(())
    }

    /// Puts the opened `partition` of `topic` into the table.
    fn install(&self, topic: &TopicRecord, partition: usize, opened: Rc<Partition>) {
        let mut topics = self.topics.borrow_mut();
        let entry = topics
            .entry(topic.name.clone())
            .or_insert_with(|| TopicPartitions {
                id: topic.id,
                partitions: Vec::new(),
            });
        if entry.partitions.len() < topic.partitions.len() {
            entry.partitions.resize(topic.partitions.len(), None);
        }
        entry.partitions[partition] = Some(opened);
    }

    /// Whether a replica of `topic`'s `partition` can be repaired from another one (cluster
    /// mode, more than one replica).
    fn repairable(&self, topic: &TopicRecord, partition: usize) -> bool {
        self.config.cluster.enabled()
            && topic
                .partitions
                .get(partition)
                .is_some_and(|p| p.replicas.len() > 1)
    }

    /// Partitions of this core under repair from their leader.
    pub fn repairing(&self) -> usize {
        self.all().iter().filter(|p| p.is_repairing()).count()
    }

    /// Applies a topic's configs to its open partitions when they changed, and its leader
    /// epochs always.
    async fn reconfigure_topic(
        &self,
        t: &TopicRecord,
        old: &MetadataImage,
    ) -> Result<(), BrokerError> {
        let partitions: Vec<Rc<Partition>> = self
            .topics
            .borrow()
            .get(&t.name)
            .filter(|tp| tp.id == t.id)
            .map(|tp| tp.partitions.iter().flatten().cloned().collect())
            .unwrap_or_default();
        let min_isr = topic_config::min_insync_replicas(&t.configs);
        for p in &partitions {
            let epoch = t
                .partitions
                .get(p.id.partition as usize)
                .map_or(p.leader_epoch(), |r| r.leader_epoch);
            p.set_leadership(epoch, min_isr);
        }
        let changed = old
            .topics
            .get(&t.name)
            .is_some_and(|o| o.id == t.id && o.configs != t.configs);
        if !changed {
            return Ok(());
        }
        let log_config = topic_config::log_config(&t.configs, &self.config);
        let compaction = topic_config::compaction_config(&t.configs, &self.config);
        for p in partitions {
            p.log.set_compaction(compaction);
            p.log
                .update_config(log_config.clone())
                .await
                .map_err(|source| BrokerError::Partition {
                    action: "reconfiguring",
                    partition: t.name.clone(),
                    cause: source,
                })?;
        }
        Ok(())
    }

    async fn drop_removed_topics(&self, image: &MetadataImage) -> Result<(), BrokerError> {
        let removed: Vec<(String, TopicPartitions)> = {
            let mut topics = self.topics.borrow_mut();
            let names: Vec<String> = topics
                .iter()
                .filter(|(name, tp)| image.topics.get(*name).is_none_or(|t| t.id != tp.id))
                .map(|(name, _)| name.clone())
                .collect();
            names
                .into_iter()
                .filter_map(|n| topics.remove(&n).map(|tp| (n, tp)))
                .collect()
        };
        for (name, tp) in removed {
            for p in tp.partitions.into_iter().flatten() {
                p.log
                    .delete()
                    .await
                    .map_err(|source| BrokerError::Partition {
                        action: "deleting a partition of",
                        partition: name.clone(),
                        cause: source,
                    })?;
            }
            tracing::info!(core = self.core, topic = %name, "deleted topic's partitions");
        }
        Ok(())
    }
}

/// Why a topic that is not in the metadata cannot be served: `InvalidTopicName` (not
/// retriable: such a topic can never exist) when its name breaks the naming rules, else the
/// retriable `UnknownTopicOrPartition`.
pub fn unknown_topic(topic: &str) -> Failure {
    match crate::metadata::check_topic_name(topic) {
        Err(e) => Failure::new(ErrorCode::InvalidTopicName, e.to_string()),
        Ok(()) => Failure::new(
            ErrorCode::UnknownTopicOrPartition,
            format!("topic {topic:?} does not exist"),
        ),
    }
}

#[cfg(test)]
mod tests {
    use borges_storage::StorageConfig;

    use super::*;
    use crate::metadata::MetadataChange;
    use crate::testing::on_one_core;

    fn topic(name: &str, partitions: usize) -> MetadataChange {
        MetadataChange::CreateTopic(TopicRecord {
            name: name.into(),
            id: Uuid::random(),
            internal: false,
            configs: Default::default(),
            partitions: (0..partitions)
                .map(|_| PartitionRecord::single_node(0))
                .collect(),
        })
    }

    /// Images 1 (`kept`), 2 (+ `gone` with `n` partitions), 3 (`gone` deleted).
    fn images(n: usize) -> [Arc<MetadataImage>; 3] {
        let first = MetadataImage::new(1).apply(&topic("kept", 1)).unwrap();
        let second = first.apply(&topic("gone", n)).unwrap();
        let third = second
            .apply(&MetadataChange::DeleteTopic {
                name: "gone".into(),
            })
            .unwrap();
        [Arc::new(first), Arc::new(second), Arc::new(third)]
    }

    fn with_table<F, Fut>(f: F)
    where
        F: FnOnce(Rc<PartitionTable>) -> Fut + Send + 'static,
        Fut: std::future::Future<Output = ()> + 'static,
    {
        let tmp = tempfile::tempdir().unwrap();
        let data = tmp.path().to_path_buf();
        on_one_core(move || async move {
            let storage = CoreStorage::new(&data, StorageConfig::default())
                .await
                .unwrap();
            let config = BrokerConfig {
                data_dir: data.clone(),
                ..BrokerConfig::default()
            };
            let table = Rc::new(PartitionTable::new(
                0,
                1,
                Arc::new(config),
                storage,
                Rc::new(CoreMetrics::new(0)),
            ));
            f(table.clone()).await;
            for p in table.all() {
                p.close().await.unwrap();
            }
        });
    }

    fn gone_is_open(table: &PartitionTable) -> bool {
        table.topics.borrow().contains_key("gone")
    }

    /// Planted: the revision check removed from `apply` -> the older image deleted `gone`
    /// again and the core's revision went back to 1.
    #[test]
    fn an_older_image_than_the_cores_is_never_applied() {
        with_table(|table| async move {
            let [first, second, _] = images(1);
            table.apply(second.clone()).await.unwrap();
            assert!(gone_is_open(&table));
            table.apply(first).await.unwrap();
            assert_eq!(table.image().revision, second.revision);
            assert!(gone_is_open(&table), "the older image closed a partition");
        });
    }

    /// Two applications racing on one core (an image arriving while the previous one still
    /// opens partitions): the core ends at the newer one, without the partitions it deleted.
    /// Planted: no one-at-a-time permit in `apply` -> the older image's opens finished after
    /// the newer image was applied and `gone` stayed open.
    #[test]
    fn an_image_arriving_during_an_application_is_applied_after_it() {
        with_table(|table| async move {
            let [first, second, third] = images(8);
            table.apply(first).await.unwrap();
            let (a, b) =
                futures_lite::future::zip(table.apply(second), table.apply(third.clone())).await;
            a.unwrap();
            b.unwrap();
            assert_eq!(table.image().revision, third.revision);
            assert!(
                !gone_is_open(&table),
                "a deleted topic's partitions are open"
            );
        });
    }
}
