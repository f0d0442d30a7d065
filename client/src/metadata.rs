//! The client's view of the cluster: brokers with their per-core endpoints, topics, partition
//! leaders and owning cores; and the routing rule that picks the address for a partition.

use std::collections::HashMap;
use std::time::Instant;

use borges_protocol::{wire, ErrorCode};

use crate::error::{ClientError, Result};
use crate::types::{PartitionInfo, TopicId};

/// A broker and the addresses of its cores.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct BrokerInfo {
    pub id: i32,
    /// `host:port` of the main listener.
    pub addr: String,
    /// `host:port` per core id.
    pub cores: HashMap<u16, String>,
}

/// One partition as metadata describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PartitionMeta {
    pub error: ErrorCode,
    pub info: PartitionInfo,
}

/// One topic as metadata describes it.
#[derive(Debug, Clone)]
pub(crate) struct TopicMeta {
    pub name: String,
    pub topic_id: TopicId,
    pub error: Option<ClientError>,
    pub is_internal: bool,
    /// Sorted by partition number; index = partition number when the broker sent them all.
    pub partitions: Vec<PartitionMeta>,
}

impl TopicMeta {
    /// Number of partitions.
    pub fn partition_count(&self) -> u32 {
        self.partitions.len() as u32
    }

    /// The partition's metadata.
    pub fn partition(&self, partition: i32) -> Option<&PartitionMeta> {
        let p = usize::try_from(partition).ok()?;
        match self.partitions.get(p) {
            Some(meta) if meta.info.partition == partition => Some(meta),
            _ => self
                .partitions
                .iter()
                .find(|m| m.info.partition == partition),
        }
    }

    /// Partitions that have a leader now (the sticky partitioner picks among these).
    pub fn available_partitions(&self) -> Vec<u32> {
        let mut available: Vec<u32> = self
            .partitions
            .iter()
            .filter(|p| p.info.leader >= 0 && p.error == ErrorCode::None)
            .map(|p| p.info.partition as u32)
            .collect();
        // Ascending, so that the sticky partitioner finds its partition by binary search.
        available.sort_unstable();
        available
    }
}

/// A snapshot of cluster metadata. Immutable once built; refreshed by replacing the `Arc`.
#[derive(Debug, Clone)]
pub(crate) struct ClusterMetadata {
    pub brokers: HashMap<i32, BrokerInfo>,
    pub topics: HashMap<String, TopicMeta>,
    pub epoch: i64,
    pub fetched_at: Instant,
}

impl Default for ClusterMetadata {
    fn default() -> Self {
        ClusterMetadata {
            brokers: HashMap::new(),
            topics: HashMap::new(),
            epoch: -1,
            fetched_at: Instant::now(),
        }
    }
}

impl ClusterMetadata {
    /// Builds a snapshot from a Metadata response.
    pub fn from_response(response: wire::MetadataResponseT) -> Result<ClusterMetadata> {
        crate::error::check_code(response.error_code, response.error_message)?;
        let brokers = response
            .brokers
            .unwrap_or_default()
            .into_iter()
            .map(|b| {
                let cores = b
                    .cores
                    .unwrap_or_default()
                    .into_iter()
                    .map(|c| (c.core_id, join_host_port(&c.host, c.port)))
                    .collect();
                let info = BrokerInfo {
                    id: b.broker_id,
                    addr: join_host_port(&b.host, b.port),
                    cores,
                };
                (b.broker_id, info)
            })
            .collect();
        let topics = response
            .topics
            .unwrap_or_default()
            .into_iter()
            .map(|t| (t.name.clone(), topic_meta(t)))
            .collect();
        Ok(ClusterMetadata {
            brokers,
            topics,
            epoch: response.metadata_epoch,
            fetched_at: Instant::now(),
        })
    }

    /// A copy of `self` with the brokers of `newer` and its topics added or replaced.
    pub fn merged(&self, newer: ClusterMetadata) -> ClusterMetadata {
        let mut topics = self.topics.clone();
        topics.extend(newer.topics);
        ClusterMetadata {
            brokers: newer.brokers,
            topics,
            epoch: newer.epoch,
            fetched_at: newer.fetched_at,
        }
    }

    /// `newer` with the partitions that `self` knows at a higher leader epoch (same topic id)
    /// kept as `self` has them (KIP-320's rule): a broker that was paused or cut off answers
    /// metadata from before the leader moved, and taking it would send requests back to the
    /// deposed leader.
    pub fn keeping_newer_epochs(&self, mut newer: ClusterMetadata) -> ClusterMetadata {
        for (name, fresh) in &mut newer.topics {
            let Some(known) = self.topics.get(name) else {
                continue;
            };
            if known.topic_id != fresh.topic_id || fresh.error.is_some() {
                continue;
            }
            for p in &mut fresh.partitions {
                if let Some(k) = known.partition(p.info.partition) {
                    if k.info.leader_epoch > p.info.leader_epoch {
                        *p = k.clone();
                    }
                }
            }
        }
        newer
    }

    /// The main address of the broker that `addr` (its main listener or one of its cores)
    /// belongs to.
    pub fn broker_of(&self, addr: &str) -> Option<&str> {
        self.brokers
            .values()
            .find(|b| b.addr == addr || b.cores.values().any(|a| a == addr))
            .map(|b| b.addr.as_str())
    }

    /// The address requests for `topic`/`partition` go to: the owning core's own port when
    /// `shard_aware` and the broker advertises it, otherwise the leader's main listener.
    /// `None` while the partition has no known leader.
    pub fn leader_addr(&self, topic: &str, partition: i32, shard_aware: bool) -> Option<&str> {
        let meta = self.topics.get(topic)?.partition(partition)?;
        let broker = self.brokers.get(&meta.info.leader)?;
        if shard_aware {
            if let Some(addr) = broker.cores.get(&meta.info.leader_core) {
                return Some(addr);
            }
        }
        Some(&broker.addr)
    }

    /// Main listener addresses of every known broker.
    pub fn broker_addrs(&self) -> Vec<String> {
        let mut ids: Vec<_> = self.brokers.keys().copied().collect();
        ids.sort_unstable();
        ids.iter().map(|id| self.brokers[id].addr.clone()).collect()
    }
}

/// `host:port`, with brackets around IPv6 hosts.
pub(crate) fn join_host_port(host: &str, port: u16) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

fn topic_meta(t: wire::TopicMetadataT) -> TopicMeta {
    let mut partitions: Vec<PartitionMeta> = t
        .partitions
        .unwrap_or_default()
        .into_iter()
        .map(|p| PartitionMeta {
            error: ErrorCode::from_u16(p.error_code),
            info: PartitionInfo {
                partition: p.partition,
                leader: p.leader_id,
                leader_epoch: p.leader_epoch,
                replicas: p.replicas.unwrap_or_default(),
                isr: p.isr.unwrap_or_default(),
                leader_core: p.leader_core,
            },
        })
        .collect();
    partitions.sort_by_key(|p| p.info.partition);
    TopicMeta {
        topic_id: t
            .topic_id
            .map(|id| TopicId::from_halves(id.hi, id.lo))
            .unwrap_or_default(),
        error: ClientError::from_code(t.error_code, t.error_message),
        is_internal: t.is_internal,
        name: t.name,
        partitions,
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::codec::obj;

    /// A response with one broker (two cores) and `topic` with `partitions` partitions, whose
    /// partitions alternate between the cores.
    pub(crate) fn response(topic: &str, partitions: i32) -> wire::MetadataResponseT {
        obj!(wire::MetadataResponseT {
            brokers: Some(vec![obj!(wire::BrokerMetadataT {
                broker_id: 0,
                host: "127.0.0.1".into(),
                port: 9292,
                cores: Some(vec![
                    obj!(wire::CoreEndpointT {
                        core_id: 0,
                        host: "127.0.0.1".into(),
                        port: 9300
                    }),
                    obj!(wire::CoreEndpointT {
                        core_id: 1,
                        host: "127.0.0.1".into(),
                        port: 9301
                    }),
                ])
            })]),
            topics: Some(vec![obj!(wire::TopicMetadataT {
                name: topic.into(),
                topic_id: Some(obj!(wire::UuidT { hi: 1, lo: 2 })),
                partitions: Some(
                    (0..partitions)
                        .rev()
                        .map(|p| obj!(wire::PartitionMetadataT {
                            partition: p,
                            leader_id: 0,
                            leader_epoch: 0,
                            replicas: Some(vec![0]),
                            isr: Some(vec![0]),
                            leader_core: (p % 2) as u16
                        }))
                        .collect(),
                )
            })]),
            metadata_epoch: 5
        })
    }

    #[test]
    fn partitions_route_to_their_owning_core() {
        let m = ClusterMetadata::from_response(response("t", 4)).unwrap();
        assert_eq!(m.leader_addr("t", 0, true), Some("127.0.0.1:9300"));
        assert_eq!(m.leader_addr("t", 1, true), Some("127.0.0.1:9301"));
        assert_eq!(m.leader_addr("t", 3, true), Some("127.0.0.1:9301"));
        assert_eq!(m.leader_addr("t", 3, false), Some("127.0.0.1:9292"));
        assert_eq!(m.leader_addr("t", 4, true), None);
        assert_eq!(m.leader_addr("u", 0, true), None);
        let t = &m.topics["t"];
        assert_eq!(t.partition_count(), 4);
        assert_eq!(t.partition(2).unwrap().info.partition, 2);
        assert_eq!(t.available_partitions(), vec![0, 1, 2, 3]);
        assert_eq!(m.broker_addrs(), vec!["127.0.0.1:9292"]);
    }

    #[test]
    fn leaderless_partitions_are_not_available_and_not_routable() {
        let mut r = response("t", 2);
        r.topics.as_mut().unwrap()[0].partitions.as_mut().unwrap()[0].leader_id = -1;
        let m = ClusterMetadata::from_response(r).unwrap();
        // Partitions were sent in reverse order: index 0 is partition 1.
        assert_eq!(m.topics["t"].available_partitions(), vec![0]);
        assert_eq!(m.leader_addr("t", 1, true), None);
    }

    #[test]
    fn missing_core_endpoint_falls_back_to_the_main_listener_and_merge_keeps_other_topics() {
        let mut r = response("t", 3);
        r.brokers.as_mut().unwrap()[0].cores = None;
        let m = ClusterMetadata::from_response(r).unwrap();
        assert_eq!(m.leader_addr("t", 2, true), Some("127.0.0.1:9292"));
        let newer = ClusterMetadata::from_response(response("u", 1)).unwrap();
        let merged = m.merged(newer);
        assert!(merged.topics.contains_key("t") && merged.topics.contains_key("u"));
        assert_eq!(merged.leader_addr("u", 0, true), Some("127.0.0.1:9300"));
        assert_eq!(join_host_port("::1", 5), "[::1]:5");
    }

    #[test]
    fn metadata_from_before_a_leader_moved_does_not_replace_newer_epochs() {
        let with_epoch = |leader: i32, epoch: i32, topic_id: u64| {
            let mut r = response("t", 2);
            let t = &mut r.topics.as_mut().unwrap()[0];
            t.topic_id = Some(obj!(wire::UuidT {
                hi: topic_id,
                lo: 2
            }));
            for p in t.partitions.as_mut().unwrap() {
                if p.partition == 0 {
                    p.leader_id = leader;
                    p.leader_epoch = epoch;
                }
            }
            ClusterMetadata::from_response(r).unwrap()
        };
        let known = with_epoch(2, 5, 1);
        // A deposed broker still names itself leader at epoch 4.
        let kept = known.keeping_newer_epochs(with_epoch(1, 4, 1));
        let p0 = kept.topics["t"].partition(0).unwrap();
        assert_eq!((p0.info.leader, p0.info.leader_epoch), (2, 5));
        // Newer epochs and other partitions are taken.
        let taken = known.keeping_newer_epochs(with_epoch(3, 6, 1));
        assert_eq!(taken.topics["t"].partition(0).unwrap().info.leader, 3);
        // A recreated topic (another id) starts its epochs anew.
        let recreated = known.keeping_newer_epochs(with_epoch(1, 0, 9));
        assert_eq!(recreated.topics["t"].partition(0).unwrap().info.leader, 1);
        assert_eq!(known.broker_of("127.0.0.1:9301"), Some("127.0.0.1:9292"));
        assert_eq!(known.broker_of("127.0.0.1:1"), None);
    }

    #[test]
    fn topic_level_error_is_kept() {
        let mut r = response("t", 1);
        r.topics.as_mut().unwrap()[0].error_code = ErrorCode::UnknownTopicOrPartition as u16;
        let m = ClusterMetadata::from_response(r).unwrap();
        assert_eq!(
            m.topics["t"].error.as_ref().and_then(ClientError::code),
            Some(ErrorCode::UnknownTopicOrPartition)
        );
    }
}
