//! Helpers shared by the integration tests: a real broker (borges-testkit) and small readers.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use borges_client::{
    Admin, ClientConfig, Consumer, ConsumerConfig, ConsumerRecord, NewTopic, Offset, OffsetSpec,
    TopicPartition,
};
use borges_testkit::BrokerProcess;

/// Starts a broker (2 cores where available).
pub fn broker() -> BrokerProcess {
    BrokerProcess::start()
}

/// Client settings for `broker`.
pub fn config(broker: &BrokerProcess) -> ClientConfig {
    ClientConfig::new(&broker.bootstrap()).request_timeout_ms(20_000)
}

/// Creates `name` with `partitions` partitions.
pub async fn create_topic(broker: &BrokerProcess, name: &str, partitions: i32) -> Admin {
    let admin = Admin::new(config(broker)).await.expect("admin");
    admin
        .create_topics(vec![NewTopic::new(name, partitions)])
        .await
        .expect("create topic");
    admin
}

/// Reads every partition of `topic` from the beginning up to the high watermark each had
/// when the read started (at least `expected` records in total, or until a generous guard
/// timeout), returned per partition in offset order.
pub async fn read_all(
    broker: &BrokerProcess,
    topic: &str,
    expected: usize,
) -> BTreeMap<i32, Vec<ConsumerRecord>> {
    let mut consumer = Consumer::new(config(broker), ConsumerConfig::default())
        .await
        .expect("consumer");
    let partitions = consumer.partitions_for(topic).await.expect("partitions");
    let admin = Admin::new(config(broker)).await.expect("admin");
    let ends = admin
        .list_offsets(
            partitions
                .iter()
                .map(|tp| (tp.clone(), OffsetSpec::Latest))
                .collect(),
        )
        .await
        .expect("latest offsets");
    consumer.assign(partitions.clone()).await.expect("assign");
    for tp in &partitions {
        consumer.seek(tp, Offset::Beginning).await.expect("seek");
    }
    let mut by_partition: BTreeMap<i32, Vec<ConsumerRecord>> = BTreeMap::new();
    let mut count = 0;
    let guard = Instant::now() + Duration::from_secs(60);
    let done = |consumer: &Consumer, count: usize| {
        count >= expected
            && ends
                .iter()
                .all(|end| consumer.position(&end.topic_partition).unwrap_or(0) >= end.offset)
    };
    while !done(&consumer, count) && Instant::now() < guard {
        for record in consumer
            .poll(Duration::from_millis(500))
            .await
            .expect("poll")
        {
            by_partition
                .entry(record.partition)
                .or_default()
                .push(record);
            count += 1;
        }
    }
    by_partition
}

/// `topic`-`partition`.
pub fn tp(topic: &str, partition: i32) -> TopicPartition {
    TopicPartition::new(topic, partition)
}

/// The value of a record as text.
pub fn text(bytes: &Option<bytes::Bytes>) -> String {
    bytes
        .as_deref()
        .map(|b| String::from_utf8_lossy(b).into_owned())
        .unwrap_or_else(|| "null".into())
}
