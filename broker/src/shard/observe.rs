//! What the metrics and health endpoint asks of the cores: every core's health, and this
//! broker's place in the cluster as its metadata image shows it.

use std::collections::BTreeMap;
use std::rc::Rc;

use std::time::Duration;

use borges_runtime::time;

use super::{Shard, ShardMessage};
use crate::lifecycle::{CoreHealth, LifecycleMessage};
use crate::metadata::{BrokerState, MetadataImage, NO_LEADER};
use crate::metrics::BrokerFigures;
use crate::metrics::ClusterFigures;
use crate::topic_config;

/// How long `/healthz` waits for a core's answer.
const HEALTH_REPLY_TIMEOUT_MS: u64 = 2000;

impl Shard {
    /// The health of every core that answers, in core order (a core that does not answer is
    /// missing, which the caller reports as unhealthy).
    pub async fn gather_health(self: &Rc<Self>) -> Vec<CoreHealth> {
        let mut health = Vec::with_capacity(self.cores());
        for to in 0..self.cores() {
            if to == self.id {
                health.push(self.health());
                continue;
            }
            let asked = self.mesh.ask(to, |reply| {
                ShardMessage::Lifecycle(LifecycleMessage::Health { reply })
            });
            // A core busy opening its partitions answers once it is done.
            let timeout = Duration::from_millis(HEALTH_REPLY_TIMEOUT_MS);
            if let Some(Ok(h)) = time::timeout(timeout, asked).await {
                health.push(h);
            }
        }
        health
    }

    /// Cluster role and partition leadership of this broker, from its latest image.
    pub fn cluster_figures(&self) -> ClusterFigures {
        let handle = self.cluster_handle();
        let broker_id = self.config.broker_id;
        let controller_id = match &handle {
            Some(h) => h.controller_id(),
            None => Some(broker_id),
        };
        leadership(&self.image(), handle.is_some(), broker_id, controller_id)
    }

    /// Whole-broker figures, without the host's (read off the executor by the caller).
    pub fn broker_figures(&self) -> BrokerFigures {
        BrokerFigures {
            version: env!("CARGO_PKG_VERSION"),
            commit: option_env!("BORGES_GIT_COMMIT").unwrap_or("unknown"),
            uptime_s: crate::metrics::uptime_s(),
            host: Default::default(),
            cluster: self.cluster_figures(),
        }
    }
}

/// Leader counts and replication state of the partitions `broker_id` leads (every partition
/// on a single node), and offline partitions when it is the active controller.
fn leadership(
    image: &MetadataImage,
    clustered: bool,
    broker_id: i32,
    controller_id: Option<i32>,
) -> ClusterFigures {
    let active_controller = controller_id == Some(broker_id);
    let mut f = ClusterFigures {
        clustered,
        active_controller,
        controller_id,
        unclean_leader_elections: image.unclean_leader_elections,
        ..ClusterFigures::default()
    };
    for topic in image.topics.values() {
        let min_isr = topic_config::min_insync_replicas(&topic.configs);
        for p in &topic.partitions {
            if clustered && p.leader == NO_LEADER && active_controller {
                f.offline += 1;
            }
            if clustered && p.leader != broker_id {
                continue;
            }
            f.leaders += 1;
            f.under_replicated += u64::from(p.isr.len() < p.replicas.len());
            f.under_min_isr += u64::from((p.isr.len() as i64) < min_isr);
        }
    }
    let mut brokers: BTreeMap<&'static str, u64> = BTreeMap::new();
    for b in image.brokers.values() {
        let state = match b.state {
            BrokerState::Fenced => "fenced",
            BrokerState::Running => "running",
            BrokerState::ShuttingDown => "shutting_down",
        };
        *brokers.entry(state).or_default() += 1;
    }
    f.brokers = brokers.into_iter().collect();
    f
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metadata::PartitionRecord;

    fn image_with(partitions: Vec<PartitionRecord>, min_isr: &str) -> MetadataImage {
        let mut image = MetadataImage::new(1);
        let json = serde_json::json!({
            "name": "t", "id": image.cluster_id, "internal": false,
            "configs": {"min.insync.replicas": min_isr}, "partitions": partitions,
        });
        image
            .topics
            .insert("t".into(), serde_json::from_value(json).unwrap());
        image
    }

    fn replicated(leader: i32, isr: Vec<i32>) -> PartitionRecord {
        PartitionRecord {
            replicas: vec![1, 2, 3],
            leader,
            isr,
            ..PartitionRecord::single_node(0)
        }
    }

    #[test]
    fn a_single_node_leads_everything_and_controls() {
        let image = image_with(vec![PartitionRecord::single_node(0); 3], "2");
        let f = leadership(&image, false, 7, Some(7));
        assert!(f.active_controller && !f.clustered);
        assert_eq!((f.leaders, f.under_replicated, f.under_min_isr), (3, 0, 3));
    }

    #[test]
    fn a_member_counts_what_it_leads_and_the_controller_counts_offline() {
        let parts = vec![
            replicated(1, vec![1, 2, 3]),
            replicated(1, vec![1]),
            replicated(2, vec![2, 3]),
            replicated(NO_LEADER, vec![]),
        ];
        let image = image_with(parts, "2");
        let one = leadership(&image, true, 1, Some(2));
        assert_eq!(
            (one.leaders, one.under_replicated, one.under_min_isr),
            (2, 1, 1)
        );
        assert_eq!(
            one.offline, 0,
            "only the active controller counts offline partitions"
        );
        let two = leadership(&image, true, 2, Some(2));
        assert_eq!((two.leaders, two.under_replicated, two.offline), (1, 1, 1));
    }
}
