//! Cluster metadata: topics, their configs and partition placement, as an immutable image that
//! every core holds a copy of (`Arc<MetadataImage>`), changed only through [`MetadataChange`]s
//! applied by the controller core (core 0) and persisted in the data directory.
//!
//! Single node: the store is one JSON file replaced atomically (write, fsync, rename, fsync
//! directory) on every change. The changes are the records a Raft-replicated metadata log will
//! carry once the controller quorum exists: the controller then appends them to its log instead
//! of rewriting the file, and brokers replay them into the same image.
//!
//! This module names no other broker module (it depends on serde, libc and the runtime's atomic
//! file replace only), so that it can move as-is into the cluster-metadata crate.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use thiserror::Error;

/// Name of the internal topic that stores committed offsets.
pub const CONSUMER_OFFSETS_TOPIC: &str = "__consumer_offsets";
/// Longest legal topic name (Kafka's limit).
pub const TOPIC_NAME_BYTES_MAX: usize = 249;
/// File format version of `metadata.json`.
const FORMAT_VERSION: u32 = 1;

/// Why a topic name is illegal.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum TopicNameError {
    /// The name is empty.
    #[error("topic name is empty")]
    Empty,
    /// `.` or `..`.
    #[error("topic name cannot be {0:?}")]
    Dots(String),
    /// Longer than [`TOPIC_NAME_BYTES_MAX`].
    #[error("topic name is {0} characters long; the maximum is {TOPIC_NAME_BYTES_MAX}")]
    TooLong(usize),
    /// A character outside `[A-Za-z0-9._-]`.
    #[error("topic name {name:?} contains {found:?}; only ASCII letters, digits, '.', '_' and '-' are allowed")]
    BadCharacter {
        /// The name.
        name: String,
        /// The first illegal character.
        found: char,
    },
}

/// Checks a topic name against Kafka's rules.
pub fn check_topic_name(name: &str) -> Result<(), TopicNameError> {
    if name.is_empty() {
        return Err(TopicNameError::Empty);
    }
    if name == "." || name == ".." {
        return Err(TopicNameError::Dots(name.to_string()));
    }
    if name.len() > TOPIC_NAME_BYTES_MAX {
        return Err(TopicNameError::TooLong(name.len()));
    }
    if let Some(c) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
    {
        return Err(TopicNameError::BadCharacter {
            name: name.to_string(),
            found: c,
        });
    }
    Ok(())
}

/// Errors of the metadata image and its store.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum MetadataError {
    /// A change names a topic that exists already.
    #[error("topic {0:?} already exists")]
    TopicExists(String),
    /// A change names a topic that does not exist.
    #[error("topic {0:?} does not exist")]
    NoSuchTopic(String),
    /// The store file cannot be parsed.
    #[error("{} is unreadable ({cause}); refusing to start rather than lose topics", path.display())]
    Unreadable {
        /// The store file.
        path: PathBuf,
        /// The parse error.
        cause: serde_json::Error,
    },
    /// The store file has a format this build does not read.
    #[error("{} has format {found} but this build reads format {FORMAT_VERSION}", path.display())]
    Format {
        /// The store file.
        path: PathBuf,
        /// Its format version.
        found: u32,
    },
    /// Encoding the image failed.
    #[error("encoding metadata: {0}")]
    Encode(serde_json::Error),
    /// Reading or writing the store failed.
    #[error("{context}: {cause}")]
    Io {
        /// What was being done.
        context: String,
        /// The cause.
        cause: std::io::Error,
    },
}

/// A 128-bit id shown as Kafka shows topic ids (URL-safe base64 without padding).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Uuid(#[serde(with = "hex_u128")] pub u128);

impl Uuid {
    /// A random id from the kernel's generator.
    pub fn random() -> Uuid {
        let mut bytes = [0u8; 16];
        let mut filled = 0;
        while filled < bytes.len() {
            // SAFETY: writes at most the remaining length into our buffer.
            let n = unsafe {
                libc::getrandom(bytes[filled..].as_mut_ptr().cast(), bytes.len() - filled, 0)
            };
            if n > 0 {
                filled += n as usize;
            }
        }
        Uuid(u128::from_be_bytes(bytes))
    }

    /// The high 64 bits.
    pub fn hi(self) -> u64 {
        (self.0 >> 64) as u64
    }

    /// The low 64 bits.
    pub fn lo(self) -> u64 {
        self.0 as u64
    }
}

mod hex_u128 {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(v: &u128, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&format!("{v:032x}"))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<u128, D::Error> {
        let s = String::deserialize(d)?;
        u128::from_str_radix(&s, 16).map_err(serde::de::Error::custom)
    }
}

/// One partition's placement and leadership.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionRecord {
    /// The core that owns the partition on its leader broker.
    pub core: u16,
    /// Leader epoch; bumps with every leader change (stays 0 on a single node).
    pub leader_epoch: i32,
    /// Replica broker ids; the first is the preferred leader.
    pub replicas: Vec<i32>,
}

/// One topic.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TopicRecord {
    /// Topic name.
    pub name: String,
    /// Topic id; a re-created topic gets a new one.
    pub id: Uuid,
    /// Whether the topic is internal (`__consumer_offsets`).
    pub internal: bool,
    /// Topic-level config overrides (Kafka's dotted names).
    pub configs: BTreeMap<String, String>,
    /// Partitions by index.
    pub partitions: Vec<PartitionRecord>,
}

/// Immutable snapshot of the cluster metadata. Shared by every core; replaced, never mutated.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MetadataImage {
    /// File format version.
    pub format: u32,
    /// Increases with every change.
    pub revision: u64,
    /// Cluster id, fixed at first start.
    pub cluster_id: Uuid,
    /// Core count the placement was computed for.
    pub cores: u16,
    /// Topics by name.
    pub topics: BTreeMap<String, TopicRecord>,
}

impl MetadataImage {
    /// An empty image for a new cluster.
    pub fn new(cores: u16) -> MetadataImage {
        MetadataImage {
            format: FORMAT_VERSION,
            revision: 0,
            cluster_id: Uuid::random(),
            cores,
            topics: BTreeMap::new(),
        }
    }

    /// Number of partitions placed on each core.
    pub fn load_per_core(&self) -> Vec<usize> {
        let mut load = vec![0usize; usize::from(self.cores.max(1))];
        for t in self.topics.values() {
            for p in &t.partitions {
                if let Some(l) = load.get_mut(usize::from(p.core)) {
                    *l += 1;
                }
            }
        }
        load
    }

    /// Cores for `count` new partitions: each goes to the least-loaded core (lowest index on
    /// ties), so partitions spread evenly over cores across topics.
    pub fn place(&self, count: usize) -> Vec<u16> {
        let mut load = self.load_per_core();
        (0..count)
            .map(|_| {
                let (core, _) = load
                    .iter()
                    .enumerate()
                    .min_by_key(|(i, l)| (**l, *i))
                    .unwrap_or((0, &0));
                load[core] += 1;
                core as u16
            })
            .collect()
    }

    /// Re-places partitions for a new core count: a partition keeps its core when that core
    /// still exists and is not above the balanced share; the others move to the least-loaded
    /// cores. Safe only before any core has opened a partition (start-up).
    pub fn replaced_for_cores(&self, cores: u16) -> MetadataImage {
        let cores = cores.max(1);
        let total: usize = self.topics.values().map(|t| t.partitions.len()).sum();
        let share = total.div_ceil(usize::from(cores));
        let mut load = vec![0usize; usize::from(cores)];
        let mut next = self.clone();
        next.cores = cores;
        next.revision += 1;
        let mut homeless = Vec::new();
        for t in next.topics.values_mut() {
            for (i, p) in t.partitions.iter_mut().enumerate() {
                let c = usize::from(p.core);
                if c < load.len() && load[c] < share {
                    load[c] += 1;
                } else {
                    homeless.push((t.name.clone(), i));
                }
            }
        }
        for (name, i) in homeless {
            let (core, _) = load
                .iter()
                .enumerate()
                .min_by_key(|(i, l)| (**l, *i))
                .unwrap_or((0, &0));
            load[core] += 1;
            if let Some(p) = next
                .topics
                .get_mut(&name)
                .and_then(|t| t.partitions.get_mut(i))
            {
                p.core = core as u16;
            }
        }
        next
    }

    /// Applies a change, returning the next image (revision + 1).
    pub fn apply(&self, change: &MetadataChange) -> Result<MetadataImage, MetadataError> {
        let mut next = self.clone();
        next.revision += 1;
        match change {
            MetadataChange::CreateTopic(topic) => {
                if next.topics.contains_key(&topic.name) {
                    return Err(MetadataError::TopicExists(topic.name.clone()));
                }
                next.topics.insert(topic.name.clone(), topic.clone());
            }
            MetadataChange::DeleteTopic { name } => {
                if next.topics.remove(name).is_none() {
                    return Err(MetadataError::NoSuchTopic(name.clone()));
                }
            }
            MetadataChange::SetTopicConfigs { name, configs } => {
                let t = next
                    .topics
                    .get_mut(name)
                    .ok_or_else(|| MetadataError::NoSuchTopic(name.clone()))?;
                t.configs = configs.clone();
            }
            MetadataChange::AddPartitions { name, partitions } => {
                let t = next
                    .topics
                    .get_mut(name)
                    .ok_or_else(|| MetadataError::NoSuchTopic(name.clone()))?;
                t.partitions.extend(partitions.iter().cloned());
            }
        }
        Ok(next)
    }
}

/// A metadata change: the unit the controller persists (today in a file, later in its Raft log).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum MetadataChange {
    /// A new topic with its placement.
    CreateTopic(TopicRecord),
    /// Remove a topic.
    DeleteTopic {
        /// Topic name.
        name: String,
    },
    /// Replace a topic's config overrides.
    SetTopicConfigs {
        /// Topic name.
        name: String,
        /// The full new set of overrides.
        configs: BTreeMap<String, String>,
    },
    /// Append partitions to a topic.
    AddPartitions {
        /// Topic name.
        name: String,
        /// The new partitions, in index order.
        partitions: Vec<PartitionRecord>,
    },
}

/// The persisted store. Owned by the controller core (core 0).
pub struct MetadataStore {
    path: PathBuf,
    image: Arc<MetadataImage>,
}

impl MetadataStore {
    /// Path of the store inside a data directory.
    pub fn path_in(data_dir: &Path) -> PathBuf {
        data_dir.join("meta").join("metadata.json")
    }

    /// Loads the store, or creates an empty one for `cores` cores. Blocking file IO: call it
    /// from a blocking thread or at start-up.
    pub fn load_or_create(data_dir: &Path, cores: u16) -> Result<MetadataStore, MetadataError> {
        let path = Self::path_in(data_dir);
        let image = match std::fs::read(&path) {
            Ok(bytes) => {
                let image: MetadataImage =
                    serde_json::from_slice(&bytes).map_err(|source| MetadataError::Unreadable {
                        path: path.clone(),
                        cause: source,
                    })?;
                if image.format != FORMAT_VERSION {
                    return Err(MetadataError::Format {
                        path,
                        found: image.format,
                    });
                }
                image
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => MetadataImage::new(cores),
            Err(e) => {
                return Err(MetadataError::Io {
                    context: format!("reading {}", path.display()),
                    cause: e,
                })
            }
        };
        let mut store = MetadataStore {
            path,
            image: Arc::new(image),
        };
        if store.image.cores != cores {
            tracing::warn!(
                from = store.image.cores,
                to = cores,
                "core count changed: re-placing partitions"
            );
            let next = store.image.replaced_for_cores(cores);
            store.persist(&next)?;
            store.image = Arc::new(next);
        } else if store.image.revision == 0 {
            let image = (*store.image).clone();
            store.persist(&image)?;
        }
        Ok(store)
    }

    /// The current image.
    pub fn image(&self) -> Arc<MetadataImage> {
        self.image.clone()
    }

    /// Where the store lives.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Validates and persists `change`; on success the store moves to the next image. Blocking.
    pub fn commit(&mut self, change: &MetadataChange) -> Result<Arc<MetadataImage>, MetadataError> {
        let next = self.image.apply(change)?;
        self.persist(&next)?;
        self.image = Arc::new(next);
        Ok(self.image.clone())
    }

    fn persist(&self, image: &MetadataImage) -> Result<(), MetadataError> {
        let dir = self.path.parent().unwrap_or(Path::new("."));
        std::fs::create_dir_all(dir).map_err(|e| MetadataError::Io {
            context: format!("creating {}", dir.display()),
            cause: e,
        })?;
        let bytes = serde_json::to_vec_pretty(image).map_err(MetadataError::Encode)?;
        borges_runtime::fs::write_atomic(&self.path, &bytes).map_err(|e| MetadataError::Io {
            context: format!("writing {}", self.path.display()),
            cause: e,
        })
    }
}

/// The directory of a partition inside the data directory: `<data>/<topic>-<partition>`.
pub fn partition_dir(data_dir: &Path, topic: &str, partition: u32) -> PathBuf {
    data_dir.join(format!("{topic}-{partition}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn topic(name: &str, cores: &[u16]) -> TopicRecord {
        TopicRecord {
            name: name.into(),
            id: Uuid::random(),
            internal: false,
            configs: BTreeMap::new(),
            partitions: cores
                .iter()
                .map(|&core| PartitionRecord {
                    core,
                    leader_epoch: 0,
                    replicas: vec![0],
                })
                .collect(),
        }
    }

    #[test]
    fn topic_names_follow_kafka_rules() {
        assert!(check_topic_name("orders").is_ok());
        assert!(check_topic_name("a.b_c-D9").is_ok());
        assert!(check_topic_name(&"x".repeat(249)).is_ok());
        assert!(check_topic_name(&"x".repeat(250)).is_err());
        assert!(check_topic_name("").is_err());
        assert!(check_topic_name(".").is_err());
        assert!(check_topic_name("..").is_err());
        assert!(check_topic_name("a/b").is_err());
        assert!(check_topic_name("é").is_err());
        assert!(check_topic_name("a b").is_err());
    }

    #[test]
    fn placement_spreads_evenly_across_topics() {
        let mut image = MetadataImage::new(2);
        let p = image.place(3);
        assert_eq!(p, vec![0, 1, 0]);
        image = image
            .apply(&MetadataChange::CreateTopic(topic("a", &p)))
            .unwrap();
        assert_eq!(image.place(1), vec![1]);
    }

    #[test]
    fn core_count_change_keeps_balance_and_valid_cores() {
        let mut image = MetadataImage::new(4);
        let p = image.place(8);
        image = image
            .apply(&MetadataChange::CreateTopic(topic("a", &p)))
            .unwrap();
        let shrunk = image.replaced_for_cores(2);
        assert_eq!(shrunk.load_per_core(), vec![4, 4]);
        let grown = shrunk.replaced_for_cores(4);
        assert_eq!(grown.load_per_core(), vec![2, 2, 2, 2]);
    }

    #[test]
    fn store_survives_reload_and_refuses_garbage() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = MetadataStore::load_or_create(dir.path(), 2).unwrap();
        let t = topic("orders", &[0, 1]);
        store
            .commit(&MetadataChange::CreateTopic(t.clone()))
            .unwrap();
        assert!(store.commit(&MetadataChange::CreateTopic(t)).is_err());
        let again = MetadataStore::load_or_create(dir.path(), 2).unwrap();
        assert_eq!(again.image(), store.image());
        std::fs::write(MetadataStore::path_in(dir.path()), b"{not json").unwrap();
        assert!(MetadataStore::load_or_create(dir.path(), 2).is_err());
    }

    #[test]
    fn uuid_round_trips_through_json() {
        let u = Uuid::random();
        let s = serde_json::to_string(&u).unwrap();
        assert_eq!(serde_json::from_str::<Uuid>(&s).unwrap(), u);
        assert_eq!(((u.hi() as u128) << 64) | u.lo() as u128, u.0);
    }
}
