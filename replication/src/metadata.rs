//! Cluster metadata: brokers, topics, their configs, partition placement, leaders, leader
//! epochs and ISR, as an immutable image that every core holds a copy of
//! (`Arc<MetadataImage>`), changed only through [`MetadataChange`]s.
//!
//! Single node: the controller (core 0) persists the image in one JSON file replaced
//! atomically (write, fsync, rename, fsync directory) on every change ([`MetadataStore`]).
//! Cluster: the changes are the commands of the Raft-replicated metadata log
//! ([`crate::cluster::ClusterMetadata`]); every member applies them in log order into the same
//! image, whose revision is then the Raft index of the last applied change.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use thiserror::Error;

/// Name of the internal topic that stores committed offsets.
pub const CONSUMER_OFFSETS_TOPIC: &str = "__consumer_offsets";
/// Longest legal topic name (Kafka's limit).
pub const TOPIC_NAME_BYTES_MAX: usize = 249;
/// Most SCRAM credentials (user and mechanism pairs) the cluster metadata holds.
pub const SCRAM_CREDENTIALS_MAX: usize = 10_000;
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
    /// A change applied at a revision the image has passed.
    #[error("change at revision {revision} is older than the image's revision {current}")]
    Stale {
        /// The change's revision.
        revision: u64,
        /// The image's.
        current: u64,
    },
    /// A broker change that the cluster's state refuses.
    #[error("{0}")]
    Broker(String),
    /// A ReplaceAcls based on ACLs that have changed since (another broker's change came
    /// first): the broker applies its change to the new ACLs and asks again.
    #[error(
        "the ACLs changed meanwhile (generation {current}, the change was based on {based_on})"
    )]
    AclsChanged {
        /// The generation the change was computed from.
        based_on: u64,
        /// The image's.
        current: u64,
    },
    /// A ReplaceScramCredentials based on credentials that have changed since: the broker
    /// applies its change to the new credentials and asks again.
    #[error("the SCRAM credentials changed meanwhile (generation {current}, based on {based_on})")]
    ScramCredentialsChanged {
        /// The generation the change was computed from.
        based_on: u64,
        /// The image's.
        current: u64,
    },
    /// A ReplaceScramCredentials with more than [`SCRAM_CREDENTIALS_MAX`] credentials.
    #[error("{count} SCRAM credentials; the cluster holds at most {SCRAM_CREDENTIALS_MAX}")]
    ScramCredentialsLimit {
        /// Credentials in the change.
        count: usize,
    },
    /// An AlterPartition that the controller refuses (Kafka's error names the code).
    #[error("{code:?}: {message}")]
    AlterPartition {
        /// The wire code for the leader.
        code: borges_protocol::ErrorCode,
        /// Details.
        message: String,
    },
    /// Not enough brokers for a replication factor.
    #[error("replication factor {asked} is larger than the {available} running brokers")]
    ReplicationFactor {
        /// Asked for.
        asked: i64,
        /// Running brokers.
        available: usize,
    },
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

/// "No leader" in [`PartitionRecord::leader`] (Kafka's -1).
pub const NO_LEADER: i32 = -1;

/// One partition's placement and leadership.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionRecord {
    /// The core that owns the partition on its leader broker.
    pub core: u16,
    /// Leader epoch; bumps with every leader change (stays 0 on a single node).
    pub leader_epoch: i32,
    /// Replica broker ids; the first is the preferred leader.
    pub replicas: Vec<i32>,
    /// Leader broker id, [`NO_LEADER`] when none is eligible (cluster mode; a single node
    /// leads everything itself).
    #[serde(default)]
    pub leader: i32,
    /// In-sync replicas (cluster mode).
    #[serde(default)]
    pub isr: Vec<i32>,
    /// Eligible leader replicas (KIP-966): replicas that left the ISR while it was below
    /// `min.insync.replicas`, so hold every record below the high watermark; leaders come from
    /// here when the ISR is empty (`cluster.rs`).
    #[serde(default)]
    pub elr: Vec<i32>,
    /// Last known ELR (KIP-966; kept empty: Borges does not track unclean shutdowns, which is
    /// what moves members from the ELR to it in Kafka).
    #[serde(default)]
    pub last_known_elr: Vec<i32>,
    /// The core of each replica on its broker, parallel to `replicas` (cluster mode; empty on
    /// a single node, where `core` says it).
    #[serde(default)]
    pub replica_cores: Vec<u16>,
    /// Bumps with every leader or ISR change (AlterPartition's partition epoch).
    #[serde(default)]
    pub partition_epoch: i32,
}

impl PartitionRecord {
    /// A single-node partition on `core`.
    pub fn single_node(core: u16) -> PartitionRecord {
        PartitionRecord {
            core,
            leader_epoch: 0,
            replicas: vec![0],
            leader: 0,
            isr: vec![0],
            elr: Vec::new(),
            last_known_elr: Vec::new(),
            replica_cores: Vec::new(),
            partition_epoch: 0,
        }
    }

    /// The core owning this partition on broker `broker`, if it holds a replica.
    pub fn core_on(&self, broker: i32) -> Option<u16> {
        if self.replica_cores.is_empty() {
            return Some(self.core);
        }
        let i = self.replicas.iter().position(|&r| r == broker)?;
        self.replica_cores.get(i).copied()
    }
}

/// A broker's state as the controller sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BrokerState {
    /// Registered but not (or no longer) serving: its session expired, or it has not caught up
    /// since it registered. Leads nothing, is in no ISR it can leave.
    Fenced,
    /// Heartbeating and caught up.
    Running,
    /// Moving its leadership away before it stops (controlled shutdown).
    ShuttingDown,
}

impl BrokerState {
    /// As `borges cluster describe` prints it.
    pub fn as_str(self) -> &'static str {
        match self {
            BrokerState::Fenced => "fenced",
            BrokerState::Running => "running",
            BrokerState::ShuttingDown => "shutting down",
        }
    }
}

/// One core's own port on a broker.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct CorePort {
    /// Core id.
    pub core: u16,
    /// Its port (on the broker's host).
    pub port: u16,
}

/// What a broker registers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BrokerRegistration {
    /// Broker (node) id.
    pub id: i32,
    /// Random per process start: a restart is a new incarnation.
    pub incarnation: Uuid,
    /// Advertised host.
    pub host: String,
    /// Main listener port.
    pub port: u16,
    /// Every core's own port.
    pub cores: Vec<CorePort>,
    /// Controller-link address.
    pub controller_addr: String,
}

/// A registered broker.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BrokerRecord {
    /// What it registered.
    pub registration: BrokerRegistration,
    /// Broker epoch: the metadata revision (Raft index) of its registration.
    pub epoch: u64,
    /// Fenced, running or shutting down.
    pub state: BrokerState,
}

/// One ACL in the cluster metadata (issue 20): Kafka's AccessControlEntryRecord, with the
/// enum values as their names (`Topic`, `Literal`, `Read`, `Allow`), as the ACLs file has
/// them. The broker checks every field before it writes one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AclRecord {
    /// `User:NAME` or `User:*`.
    pub principal: String,
    /// `Topic`, `Group` or `Cluster`.
    pub resource_type: String,
    /// The resource's name (or prefix); `*` for every one.
    pub resource_name: String,
    /// `Literal` or `Prefixed`.
    pub pattern: String,
    /// `Read`, `Write`, ..., `All`.
    pub operation: String,
    /// `Allow` or `Deny`.
    pub permission: String,
}

/// One user's SCRAM credential for one mechanism in the cluster metadata (issue 20): what the
/// broker authenticates with, never the password nor the salted password. The byte strings
/// are base64 (standard, padded), as in the credentials file; the broker checks every field
/// (`Credential::validate`) before it writes one and again when it installs them.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScramCredentialRecord {
    /// The username.
    pub name: String,
    /// `SCRAM-SHA-256` or `SCRAM-SHA-512`.
    pub mechanism: String,
    /// PBKDF2 iterations.
    pub iterations: u32,
    /// The salt.
    pub salt: String,
    /// `H(HMAC(SaltedPassword, "Client Key"))`.
    pub stored_key: String,
    /// `HMAC(SaltedPassword, "Server Key")`.
    pub server_key: String,
}

impl std::fmt::Debug for ScramCredentialRecord {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScramCredentialRecord")
            .field("name", &self.name)
            .field("mechanism", &self.mechanism)
            .field("iterations", &self.iterations)
            .finish_non_exhaustive()
    }
}

fn is_zero(v: &u64) -> bool {
    *v == 0
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
    /// Registered brokers by id (cluster mode).
    #[serde(default)]
    pub brokers: BTreeMap<i32, BrokerRecord>,
    /// Start of the next block of producer ids (cluster mode; Kafka's AllocateProducerIds).
    #[serde(default)]
    pub next_producer_id: i64,
    /// Unclean leader elections the metadata log has made (cluster mode; each one may have
    /// lost acknowledged records). Kept in the image so every broker reports the same count
    /// and it survives controller failover.
    #[serde(default)]
    pub unclean_leader_elections: u64,
    /// The revision of the last ReplaceAcls (cluster mode); 0: the metadata log has never held
    /// ACLs, and each broker uses its ACLs file. Absent in images from before ACLs.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub acl_generation: u64,
    /// The cluster's ACLs (cluster mode), in force on every broker once `acl_generation > 0`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub acls: Vec<AclRecord>,
    /// The revision of the last ReplaceScramCredentials (cluster mode); 0: the metadata log
    /// has never held SCRAM credentials, and each broker uses its credentials file.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub scram_generation: u64,
    /// The cluster's SCRAM credentials (cluster mode), in force on every broker once
    /// `scram_generation > 0`; at most [`SCRAM_CREDENTIALS_MAX`].
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub scram_credentials: Vec<ScramCredentialRecord>,
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
            brokers: BTreeMap::new(),
            next_producer_id: 0,
            unclean_leader_elections: 0,
            acl_generation: 0,
            acls: Vec::new(),
            scram_generation: 0,
            scram_credentials: Vec::new(),
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
        self.apply_at(change, self.revision + 1)
    }

    /// Applies a change as revision `revision` (in cluster mode the change's Raft index; a
    /// broker registered by it gets that as its broker epoch).
    pub fn apply_at(
        &self,
        change: &MetadataChange,
        revision: u64,
    ) -> Result<MetadataImage, MetadataError> {
        if revision <= self.revision {
            return Err(MetadataError::Stale {
                revision,
                current: self.revision,
            });
        }
        let mut next = self.clone();
        next.revision = revision;
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
                next.topic_mut(name)?.configs = configs.clone();
                crate::cluster::elect_offline_of_topic(&mut next, name);
            }
            MetadataChange::AddPartitions { name, partitions } => {
                next.topic_mut(name)?
                    .partitions
                    .extend(partitions.iter().cloned());
            }
            MetadataChange::ReplaceAcls { based_on, acls } => {
                if *based_on != self.acl_generation {
                    return Err(MetadataError::AclsChanged {
                        based_on: *based_on,
                        current: self.acl_generation,
                    });
                }
                next.acls = acls.clone();
                next.acl_generation = revision;
            }
            MetadataChange::ReplaceScramCredentials {
                based_on,
                credentials,
            } => replace_scram_credentials(&mut next, *based_on, credentials)?,
            other => crate::cluster::apply_broker_change(&mut next, other)?,
        }
        Ok(next)
    }

    /// The SCRAM credential of `name` for `mechanism` (its SASL name), if the image holds one.
    pub fn scram_credential(&self, name: &str, mechanism: &str) -> Option<&ScramCredentialRecord> {
        self.scram_credentials
            .iter()
            .find(|c| c.name == name && c.mechanism == mechanism)
    }

    /// A topic to change.
    pub fn topic_mut(&mut self, name: &str) -> Result<&mut TopicRecord, MetadataError> {
        self.topics
            .get_mut(name)
            .ok_or_else(|| MetadataError::NoSuchTopic(name.to_string()))
    }
}

/// Applies a ReplaceScramCredentials to `next` (at its revision).
fn replace_scram_credentials(
    next: &mut MetadataImage,
    based_on: u64,
    credentials: &[ScramCredentialRecord],
) -> Result<(), MetadataError> {
    if based_on != next.scram_generation {
        return Err(MetadataError::ScramCredentialsChanged {
            based_on,
            current: next.scram_generation,
        });
    }
    if credentials.len() > SCRAM_CREDENTIALS_MAX {
        return Err(MetadataError::ScramCredentialsLimit {
            count: credentials.len(),
        });
    }
    next.scram_credentials = credentials.to_vec();
    next.scram_generation = next.revision;
    Ok(())
}

/// A metadata change: the unit the controller persists (a single node's file, or the
/// cluster's Raft log).
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
    /// A broker (re)starts: a new incarnation, a new broker epoch, fenced until it has caught
    /// up with the metadata log.
    RegisterBroker(BrokerRegistration),
    /// A registered broker caught up and heartbeats: it may lead and serve.
    UnfenceBroker {
        /// Broker id.
        id: i32,
        /// Its broker epoch; a stale one changes nothing.
        epoch: u64,
    },
    /// A broker's session expired: it leads nothing; its partitions get leaders from the ISR.
    FenceBroker {
        /// Broker id.
        id: i32,
        /// Its broker epoch; a stale one changes nothing.
        epoch: u64,
    },
    /// A broker is stopping on purpose: its leadership moves away first.
    ControlledShutdown {
        /// Broker id.
        id: i32,
        /// Its broker epoch.
        epoch: u64,
    },
    /// A partition leader changes its ISR (Kafka's AlterPartition, KIP-497).
    AlterPartition(AlterPartition),
    /// Preferred-leader election: every partition whose first replica runs, is in the ISR and
    /// does not lead gets it back as leader (the active controller writes it when
    /// `auto_leader_rebalance_enable` finds such partitions).
    ElectPreferredLeaders,
    /// A broker reserves the next `size` producer ids (the block starts at the image's
    /// `next_producer_id` before the change).
    AllocateProducerIds {
        /// The reserving broker.
        broker: i32,
        /// Ids in the block.
        size: i64,
    },
    /// The cluster's ACLs become `acls` (CreateAcls and DeleteAcls on any broker, computed
    /// there from the image's ACLs of generation `based_on`; refused when the image's
    /// generation has moved, so concurrent changes are not lost).
    ReplaceAcls {
        /// The `acl_generation` the change was computed from.
        based_on: u64,
        /// The whole new set.
        acls: Vec<AclRecord>,
    },
    /// The cluster's SCRAM credentials become `credentials` (AlterUserScramCredentials on any
    /// broker, computed there from the image's credentials of generation `based_on`, or from
    /// that broker's credentials file while the generation is 0; refused when the image's
    /// generation has moved, so concurrent changes are not lost, and above
    /// [`SCRAM_CREDENTIALS_MAX`]).
    ReplaceScramCredentials {
        /// The `scram_generation` the change was computed from.
        based_on: u64,
        /// The whole new set.
        credentials: Vec<ScramCredentialRecord>,
    },
}

/// An ISR change asked by a partition's leader.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AlterPartition {
    /// Topic name.
    pub topic: String,
    /// Partition index.
    pub partition: u32,
    /// The asking leader.
    pub leader: i32,
    /// Its broker epoch.
    pub broker_epoch: u64,
    /// The leader epoch it leads in.
    pub leader_epoch: i32,
    /// The partition epoch it last saw.
    pub partition_epoch: i32,
    /// The new ISR (contains the leader, a subset of the replicas).
    pub isr: Vec<i32>,
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
                .map(|&core| PartitionRecord::single_node(core))
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
