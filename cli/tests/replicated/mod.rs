//! Helpers of the replicated-cluster tests (`replication.rs`, `replication_corruption.rs`,
//! `leader_election.rs`): the SDK's producer and consumer against a testkit `Cluster`, and the
//! replicas' logs read from the nodes' data directories (borges-checker's replica reader).

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use borges_checker::replica::{self, ReplicaLog};
use borges_client::{
    Acks, ClientConfig, Consumer, ConsumerConfig, Offset, Producer, ProducerConfig, ProducerRecord,
    TopicPartition,
};
use borges_testkit::cluster::{Cluster, ClusterOptions, CLUSTER_WAIT};

/// Per value sent: the value and its offset, or the error as text.
pub type Sent = Vec<(String, Result<i64, String>)>;

/// `voters` combined brokers whose `[cluster]` section is `cluster_toml`.
pub fn cluster(voters: usize, cluster_toml: String) -> Cluster {
    Cluster::start_with(ClusterOptions {
        voters,
        cluster_toml,
        ..ClusterOptions::default()
    })
}

pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime")
}

pub fn client(bootstrap: &str) -> ClientConfig {
    ClientConfig::new(bootstrap).request_timeout_ms(20_000)
}

/// acks=all, no linger, `retries_max` retries (50 ms backoff, up to 500 ms).
pub fn acks_all(retries_max: u32, delivery_timeout_ms: u64) -> ProducerConfig {
    ProducerConfig {
        acks: Acks::All,
        linger_ms: 0,
        retries_max,
        retry_backoff_ms: 50,
        retry_backoff_max_ms: 500,
        delivery_timeout_ms,
        ..ProducerConfig::default()
    }
}

/// Sends `value` to `topic`-`partition` and waits for its delivery: its offset or the error.
pub async fn send_one(
    producer: &Producer,
    topic: &str,
    partition: i32,
    value: String,
) -> Result<i64, String> {
    let record = ProducerRecord::new(topic).partition(partition).value(value);
    match producer.send(record).await {
        Ok(delivery) => delivery.await.map(|m| m.offset).map_err(|e| e.to_string()),
        Err(e) => Err(e.to_string()),
    }
}

/// Sends `values` to `topic`-`partition`, one at a time, with a new producer of `config`.
pub async fn produce(
    bootstrap: &str,
    (topic, partition): (&str, i32),
    values: impl IntoIterator<Item = String>,
    config: ProducerConfig,
) -> Sent {
    produce_with(client(bootstrap), (topic, partition), values, config).await
}

/// [`produce`] with the client settings `client` (TLS, SASL).
pub async fn produce_with(
    client: ClientConfig,
    (topic, partition): (&str, i32),
    values: impl IntoIterator<Item = String>,
    config: ProducerConfig,
) -> Sent {
    let producer = Producer::new(client, config).await.expect("producer");
    let mut out = Vec::new();
    for v in values {
        let outcome = send_one(&producer, topic, partition, v.clone()).await;
        out.push((v, outcome));
    }
    // Bounded: with the followers stopped a close may wait on requests that never finish.
    let _ = tokio::time::timeout(Duration::from_secs(5), producer.close()).await;
    out
}

/// `prefix-0` .. `prefix-(n-1)`.
pub fn values(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}-{i}")).collect()
}

/// Reads `topic`-`partition` from the beginning (through its leader, as the consumer finds
/// it) until its position reaches the high watermark of the latest fetch answer: every record
/// below it (offset -> value) and that high watermark.
pub async fn read_to_high_watermark(
    bootstrap: &str,
    topic: &str,
    partition: i32,
) -> (BTreeMap<i64, String>, i64) {
    read_to_high_watermark_with(client(bootstrap), topic, partition).await
}

/// [`read_to_high_watermark`] with the client settings `client` (TLS, SASL).
pub async fn read_to_high_watermark_with(
    client: ClientConfig,
    topic: &str,
    partition: i32,
) -> (BTreeMap<i64, String>, i64) {
    let mut consumer = Consumer::new(client, ConsumerConfig::default())
        .await
        .expect("consumer");
    let tp = TopicPartition::new(topic, partition);
    consumer.assign(vec![tp.clone()]).await.expect("assign");
    consumer.seek(&tp, Offset::Beginning).await.expect("seek");
    let mut out = BTreeMap::new();
    let guard = Instant::now() + CLUSTER_WAIT;
    loop {
        for r in consumer
            .poll(Duration::from_millis(300))
            .await
            .expect("poll")
        {
            let v = String::from_utf8_lossy(r.value.as_deref().unwrap_or_default()).into_owned();
            out.insert(r.offset, v);
        }
        let position = consumer.position(&tp).unwrap_or(0);
        if let Some(hw) = consumer.high_watermark(&tp) {
            if position >= hw {
                return (out, hw);
            }
        }
        assert!(Instant::now() < guard, "never reached the high watermark");
    }
}

/// Every acknowledged value is at its offset in `log`; returns how many were acknowledged.
pub fn check_acked(sent: &[(String, Result<i64, String>)], log: &BTreeMap<i64, String>) -> usize {
    let mut acked = 0;
    for (v, outcome) in sent {
        if let Ok(offset) = outcome {
            assert_eq!(
                log.get(offset),
                Some(v),
                "acknowledged {v} at {offset} is lost"
            );
            acked += 1;
        }
    }
    acked
}

/// Partition 0 of `topic` on node `id`, read from its data directory.
pub fn replica_log(c: &mut Cluster, topic: &str, id: u64) -> ReplicaLog {
    let dir = c.node(id).data_dir().join(format!("{topic}-0"));
    replica::read_partition_dir(id, topic, 0, &dir)
        .unwrap_or_else(|e| panic!("replica of node {id}: {e}"))
}

/// One line for a failure message: the node, its batches and its problem.
pub fn describe(log: &ReplicaLog) -> String {
    let batches: Vec<String> = log.batches.iter().map(|b| b.to_string()).collect();
    format!(
        "node {}: [{}] problem {:?}",
        log.node,
        batches.join(", "),
        log.problem
    )
}

/// The replicas of partition 0 of `topic` on `nodes` hold every batch below `hw`, identical
/// batch for batch (offsets, CRC, leader epoch). Below the high watermark everything is
/// fdatasynced on every ISR member (`durability=fsync`), so the files of running brokers can
/// be read.
pub fn assert_replicas_identical(c: &mut Cluster, topic: &str, nodes: &[u64], hw: i64) {
    let logs: Vec<ReplicaLog> = nodes.iter().map(|&id| replica_log(c, topic, id)).collect();
    let bound = BTreeMap::from([((topic.to_string(), 0), hw)]);
    let comparison = replica::compare(&logs, &bound);
    let summary: Vec<String> = logs.iter().map(describe).collect();
    assert!(
        comparison.anomalies.is_empty(),
        "replicas differ below the high watermark {hw}: {:?}\n{}",
        comparison.anomalies,
        summary.join("\n")
    );
    for l in &logs {
        assert!(
            l.log_end() >= hw,
            "node {} holds only {} of {hw}: {}",
            l.node,
            l.log_end(),
            summary.join("\n")
        );
    }
}
