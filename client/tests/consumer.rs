//! Consumer integration tests against a real broker process.

mod common;

use std::time::Duration;

use borges_client::{
    ClientConfig, ClientError, Consumer, ConsumerConfig, Offset, OffsetReset, Producer,
    ProducerConfig, ProducerRecord, TopicPartition,
};
use common::*;

async fn produce_timestamps(broker: &borges_testkit::BrokerProcess, topic: &str) {
    let producer = Producer::new(config(broker), ProducerConfig::default())
        .await
        .unwrap();
    // Ten records, 1000 ms apart, in several batches.
    for i in 0..10i64 {
        let ack = producer
            .send(
                ProducerRecord::new(topic)
                    .value(format!("r{i}"))
                    .partition(0)
                    .timestamp(1_000_000 + i * 1_000),
            )
            .await
            .unwrap();
        if i % 3 == 0 {
            ack.await.unwrap();
        }
    }
    producer.close().await.unwrap();
}

async fn consumer(broker: &borges_testkit::BrokerProcess) -> Consumer {
    Consumer::new(config(broker), ConsumerConfig::default())
        .await
        .unwrap()
}

async fn poll_values(consumer: &mut Consumer, n: usize) -> Vec<(i64, String)> {
    let mut out = Vec::new();
    for _ in 0..40 {
        for r in consumer.poll(Duration::from_millis(250)).await.unwrap() {
            out.push((r.offset, text(&r.value)));
        }
        if out.len() >= n {
            break;
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seek_by_timestamp_offset_beginning_and_end() {
    let broker = broker();
    create_topic(&broker, "times", 1).await;
    produce_timestamps(&broker, "times").await;
    let mut consumer = consumer(&broker).await;
    let p0 = tp("times", 0);
    consumer.assign(vec![p0.clone()]).await.unwrap();

    consumer
        .seek(&p0, Offset::Timestamp(1_004_500))
        .await
        .unwrap();
    assert_eq!(consumer.position(&p0), Some(5));
    let values = poll_values(&mut consumer, 5).await;
    assert_eq!(values.first(), Some(&(5, "r5".to_string())));
    assert_eq!(values.len(), 5);
    assert_eq!(consumer.position(&p0), Some(10));

    // Exactly on a record's timestamp: that record.
    consumer
        .seek(&p0, Offset::Timestamp(1_002_000))
        .await
        .unwrap();
    assert_eq!(consumer.position(&p0), Some(2));
    // After the last record: the end.
    consumer
        .seek(&p0, Offset::Timestamp(9_999_999))
        .await
        .unwrap();
    assert_eq!(consumer.position(&p0), Some(10));

    // Inside a batch: records before the position are skipped.
    consumer.seek(&p0, Offset::At(7)).await.unwrap();
    let values = poll_values(&mut consumer, 3).await;
    assert_eq!(
        values.iter().map(|v| v.0).collect::<Vec<_>>(),
        vec![7, 8, 9]
    );

    consumer.seek(&p0, Offset::Beginning).await.unwrap();
    assert_eq!(poll_values(&mut consumer, 10).await.len(), 10);
    consumer.seek(&p0, Offset::End).await.unwrap();
    assert_eq!(consumer.position(&p0), Some(10));
    assert!(consumer
        .poll(Duration::from_millis(200))
        .await
        .unwrap()
        .is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_consumer_sees_new_records_and_latest_reset_skips_old_ones() {
    let broker = broker();
    create_topic(&broker, "tail", 2).await;
    let producer = Producer::new(config(&broker), ProducerConfig::default())
        .await
        .unwrap();
    producer
        .send(ProducerRecord::new("tail").value("old").partition(1))
        .await
        .unwrap()
        .await
        .unwrap();
    let mut consumer = consumer(&broker).await;
    let partitions = consumer.partitions_for("tail").await.unwrap();
    consumer.assign(partitions).await.unwrap();
    // auto_offset_reset = Latest: nothing old.
    assert!(consumer
        .poll(Duration::from_millis(300))
        .await
        .unwrap()
        .is_empty());
    producer
        .send(ProducerRecord::new("tail").value("new").partition(1))
        .await
        .unwrap()
        .await
        .unwrap();
    let values = poll_values(&mut consumer, 1).await;
    assert_eq!(values, vec![(1, "new".to_string())]);
    producer.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn earliest_reset_reads_everything_and_assign_and_subscribe_exclude_each_other() {
    let broker = broker();
    create_topic(&broker, "reset", 1).await;
    produce_timestamps(&broker, "reset").await;
    let config = ConsumerConfig {
        auto_offset_reset: OffsetReset::Earliest,
        ..ConsumerConfig::default()
    };
    let mut consumer = Consumer::new(common::config(&broker), config)
        .await
        .unwrap();
    consumer.assign(vec![tp("reset", 0)]).await.unwrap();
    assert_eq!(poll_values(&mut consumer, 10).await.len(), 10);

    // Subscribing needs a group id.
    let err = consumer.subscribe(&["reset"]).await.unwrap_err();
    assert!(matches!(err, ClientError::InvalidConfig(_)), "{err}");

    let group = ConsumerConfig {
        group_id: Some("g".into()),
        ..ConsumerConfig::default()
    };
    let mut member = Consumer::new(ClientConfig::new(&broker.bootstrap()), group)
        .await
        .unwrap();
    member.subscribe(&["reset"]).await.unwrap();
    let err = member.assign(vec![tp("reset", 0)]).await.unwrap_err();
    assert!(matches!(err, ClientError::InvalidArgument(_)), "{err}");
    member.close().await.unwrap();
}

/// A paused partition is neither fetched nor returned, also what is already buffered of it;
/// resumed, it continues at its position.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paused_partitions_return_nothing_until_resumed() {
    // One core: one fetch response carries both partitions, so records of the partition
    // paused below are already buffered when it is paused.
    let broker = borges_testkit::BrokerProcess::start_with(borges_testkit::BrokerOptions {
        cores: 1,
        ..Default::default()
    });
    create_topic(&broker, "p", 2).await;
    let producer = Producer::new(config(&broker), ProducerConfig::default())
        .await
        .unwrap();
    for partition in 0..2 {
        for i in 0..5 {
            let record = ProducerRecord::new("p")
                .partition(partition)
                .value(format!("{partition}-{i}"));
            producer.send(record).await.unwrap().await.unwrap();
        }
    }
    producer.close().await.unwrap();
    let one_at_a_time = ConsumerConfig {
        max_poll_records: 1,
        ..ConsumerConfig::default()
    };
    let mut consumer = Consumer::new(config(&broker), one_at_a_time).await.unwrap();
    let (p0, p1) = (tp("p", 0), tp("p", 1));
    consumer.assign(vec![p0.clone(), p1.clone()]).await.unwrap();
    for p in [&p0, &p1] {
        consumer.seek(p, Offset::Beginning).await.unwrap();
    }
    // The first record's partition is paused with four more records of it buffered ahead of
    // the other partition's.
    let first = poll_values(&mut consumer, 1).await;
    let paused = if first[0].1.starts_with("0-") {
        &p0
    } else {
        &p1
    };
    let other = if paused == &p0 { &p1 } else { &p0 };
    consumer.pause(std::slice::from_ref(paused)).unwrap();
    assert_eq!(consumer.paused(), vec![paused.clone()]);
    let values = |records: Vec<(i64, String)>| -> Vec<String> {
        records.into_iter().map(|(_, v)| v).collect()
    };
    let named = |p: &TopicPartition, offsets: std::ops::Range<i32>| -> Vec<String> {
        offsets.map(|i| format!("{}-{i}", p.partition)).collect()
    };
    assert_eq!(
        values(poll_values(&mut consumer, 5).await),
        named(other, 0..5)
    );
    // Long enough for a fetch of the paused partition to come back, had one been sent.
    assert!(consumer
        .poll(Duration::from_millis(500))
        .await
        .unwrap()
        .is_empty());
    assert_eq!(consumer.position(paused), Some(1));
    consumer.resume(std::slice::from_ref(paused)).unwrap();
    assert_eq!(
        values(poll_values(&mut consumer, 4).await),
        named(paused, 1..5)
    );
    assert!(consumer.pause(&[tp("p", 9)]).is_err());
}

/// `stream()` yields records one by one; dropping it after three leaves the position after
/// the third, although the fetch brought all ten (nothing yielded is lost, nothing unyielded
/// is counted as read).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_yields_records_and_positions_follow_what_it_yielded() {
    use futures_lite::StreamExt;
    let broker = broker();
    create_topic(&broker, "s", 1).await;
    produce_timestamps(&broker, "s").await;
    let mut consumer = consumer(&broker).await;
    let p0 = tp("s", 0);
    consumer.assign(vec![p0.clone()]).await.unwrap();
    consumer.seek(&p0, Offset::Beginning).await.unwrap();
    // The stream is Send: it can run in a spawned task.
    let (consumer, offsets) = tokio::spawn(async move {
        let offsets: Vec<i64> = consumer
            .stream()
            .take(3)
            .map(|r| r.unwrap().offset)
            .collect()
            .await;
        (consumer, offsets)
    })
    .await
    .unwrap();
    assert_eq!(offsets, [0, 1, 2]);
    assert_eq!(consumer.position(&p0), Some(3));
    let mut consumer = consumer;
    let rest = poll_values(&mut consumer, 7).await;
    assert_eq!(rest.first().map(|(o, _)| *o), Some(3));
    assert_eq!(rest.len(), 7);
}
