//! The cluster as the workload sees it: the topic, its leaders and ISRs, and whether followers
//! receive data at all.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use borges_client::{
    Acks, Admin, ClientConfig, ErrorCode, NewTopic, PartitionInfo, Producer, ProducerConfig,
    ProducerRecord,
};
use tokio::time::Instant;

use crate::retry_until;

/// How the workload topic is created.
#[derive(Debug, Clone)]
pub struct TopicSpec {
    /// Its name.
    pub name: String,
    /// Partitions (Jepsen's keys).
    pub partitions: i32,
    /// Replicas per partition.
    pub replication_factor: i16,
    /// `min.insync.replicas`.
    pub min_insync_replicas: u32,
    /// `durability` (fsync | interval | none).
    pub durability: String,
}

/// Creates the topic (retrying while the cluster is still forming; an existing topic is
/// accepted) and waits until every partition has a leader.
pub async fn create_topic(config: &ClientConfig, spec: &TopicSpec, wait: Duration) -> Result<()> {
    let deadline = Instant::now() + wait;
    let topic = NewTopic::new(spec.name.clone(), spec.partitions)
        .replication_factor(spec.replication_factor)
        .config("min.insync.replicas", spec.min_insync_replicas.to_string())
        .config("durability", spec.durability.clone());
    retry_until(deadline, Duration::from_millis(250), || async {
        let admin = Admin::new(config.clone()).await?;
        match admin.create_topics_each(vec![topic.clone()]).await?.pop() {
            Some(result) => match result.result {
                Err(borges_client::ClientError::Broker {
                    code: ErrorCode::TopicAlreadyExists,
                    ..
                }) => Ok(()),
                other => other,
            },
            None => Ok(()),
        }
    })
    .await
    .with_context(|| format!("creating topic {}", spec.name))?;
    retry_until(deadline, Duration::from_millis(100), || async {
        let partitions = describe(config, &spec.name).await?;
        match partitions.iter().find(|p| p.leader < 0) {
            Some(p) => Err(anyhow!("partition {} has no leader", p.partition)),
            None if partitions.len() == spec.partitions as usize => Ok(()),
            None => Err(anyhow!("{} partitions known", partitions.len())),
        }
    })
    .await
    .with_context(|| format!("waiting for leaders of {}", spec.name))
}

/// The partitions of `topic` as the cluster's metadata describes them.
pub async fn describe(config: &ClientConfig, topic: &str) -> Result<Vec<PartitionInfo>> {
    let admin = Admin::new(config.clone()).await?;
    let mut topics = admin.describe_topics(&[topic]).await?;
    let described = topics
        .pop()
        .ok_or_else(|| anyhow!("topic {topic} not described"))?;
    Ok(described.partitions)
}

/// The leader of `topic`-`partition` (-1 when it has none), asking until `wait` passes.
pub async fn leader(config: &ClientConfig, topic: &str, partition: i32, wait: Duration) -> i32 {
    let deadline = Instant::now() + wait;
    let found = retry_until(deadline, Duration::from_millis(100), || async {
        let partitions = describe(config, topic).await?;
        match partitions.iter().find(|p| p.partition == partition) {
            Some(p) if p.leader >= 0 => Ok(p.leader),
            Some(_) => Err(anyhow!("no leader")),
            None => Err(anyhow!("no partition {partition}")),
        }
    })
    .await;
    found.unwrap_or(-1)
}

/// Waits until every partition of `topic` has a leader and its ISR holds every replica.
/// Returns the partitions still short of that when `wait` passed (empty: full everywhere).
pub async fn wait_for_full_isr(
    config: &ClientConfig,
    topic: &str,
    wait: Duration,
) -> Vec<PartitionInfo> {
    let deadline = Instant::now() + wait;
    let mut short = Vec::new();
    loop {
        if let Ok(partitions) = describe(config, topic).await {
            short = partitions
                .into_iter()
                .filter(|p| p.leader < 0 || p.isr.len() < p.replicas.len())
                .collect();
            if short.is_empty() {
                return short;
            }
        }
        if Instant::now() >= deadline {
            return short;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The probe's verdict: whether followers hold what the leader acknowledged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Replication {
    /// Every replica holds the probe record.
    Active,
    /// Some replica does not, after the wait: the reason names it.
    Inactive(String),
}

/// Writes one record with acks=all to partition 0 of `probe_topic` (created with replication
/// factor `data_dirs.len()`), then waits up to `wait` for every broker's data directory
/// (`(node, dir)`) to hold it. The probe uses its own topic: its record must not appear in
/// the workload's history.
pub async fn probe_replication(
    config: &ClientConfig,
    probe_topic: &str,
    data_dirs: &[(u64, PathBuf)],
    wait: Duration,
) -> Result<Replication> {
    if data_dirs.is_empty() {
        bail!("the probe needs the brokers' data directories");
    }
    let spec = TopicSpec {
        name: probe_topic.to_string(),
        partitions: 1,
        replication_factor: data_dirs.len() as i16,
        min_insync_replicas: 1,
        durability: "fsync".into(),
    };
    create_topic(config, &spec, wait).await?;
    let producer = Producer::new(
        config.clone(),
        ProducerConfig {
            acks: Acks::All,
            delivery_timeout_ms: wait.as_millis() as u64,
            ..ProducerConfig::default()
        },
    )
    .await?;
    let record = ProducerRecord::new(probe_topic).partition(0).value("probe");
    let written = producer.send(record).await?.await?;
    producer.close().await?;
    let deadline = Instant::now() + wait;
    loop {
        let mut missing = Vec::new();
        for (node, dir) in data_dirs {
            let logs = borges_checker::replica::read_node(*node, dir, probe_topic)?;
            let end = logs.iter().map(|l| l.log_end()).max().unwrap_or(0);
            if end <= written.offset {
                missing.push(format!("node {node} holds {end} records"));
            }
        }
        if missing.is_empty() {
            return Ok(Replication::Active);
        }
        if Instant::now() >= deadline {
            return Ok(Replication::Inactive(format!(
                "after an acks=all write at offset {} and {} ms: {}",
                written.offset,
                wait.as_millis(),
                missing.join(", ")
            )));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
