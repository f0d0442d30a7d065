//! Producer integration tests against a real broker process.

mod common;

use std::collections::HashMap;

use borges_client::{
    Acks, ClientError, Compression, ErrorCode, Producer, ProducerConfig, ProducerRecord,
};
use borges_protocol::partitioner::partition_for_key;
use common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keyed_records_over_many_partitions_land_where_kafka_puts_them_in_order() {
    let broker = broker();
    let partitions = 32;
    create_topic(&broker, "many", partitions).await;
    let producer = Producer::new(config(&broker), ProducerConfig::default())
        .await
        .unwrap();
    let keys = 100;
    let per_key = 20;
    let mut acks = Vec::new();
    for seq in 0..per_key {
        for k in 0..keys {
            let record = ProducerRecord::new("many")
                .key(format!("key-{k}"))
                .value(format!("key-{k} seq-{seq}"));
            acks.push((k, seq, producer.send(record).await.unwrap()));
        }
    }
    let mut written: HashMap<(i32, i64), String> = HashMap::new();
    for (k, seq, ack) in acks {
        let meta = ack.await.unwrap();
        let key = format!("key-{k}");
        assert_eq!(
            meta.partition as u32,
            partition_for_key(key.as_bytes(), partitions as u32),
            "{key}"
        );
        assert!(meta.offset >= 0);
        assert!(written
            .insert((meta.partition, meta.offset), format!("{key} seq-{seq}"))
            .is_none());
    }
    producer.close().await.unwrap();

    let read = read_all(&broker, "many", (keys * per_key) as usize).await;
    let total: usize = read.values().map(Vec::len).sum();
    assert_eq!(total, (keys * per_key) as usize);
    let mut last_seq: HashMap<String, i32> = HashMap::new();
    for (partition, records) in &read {
        for (i, r) in records.iter().enumerate() {
            assert_eq!(r.offset, i as i64, "offsets are dense from 0");
            let value = text(&r.value);
            assert_eq!(written[&(*partition, r.offset)], value);
            let (key, seq) = value.split_once(" seq-").unwrap();
            assert_eq!(text(&r.key), key);
            let seq: i32 = seq.parse().unwrap();
            let previous = last_seq.insert(key.to_string(), seq);
            assert_eq!(
                previous.map_or(0, |p| p + 1),
                seq,
                "per-key order for {key}"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_acks_level_delivers() {
    let broker = broker();
    create_topic(&broker, "acks", 4).await;
    let mut expected = 0;
    for (acks, compression) in [
        (Acks::None, Compression::None),
        (Acks::Leader, Compression::Zstd),
        (Acks::All, Compression::None),
    ] {
        let config = ProducerConfig {
            acks,
            compression,
            ..ProducerConfig::default()
        };
        let producer = Producer::new(common::config(&broker), config)
            .await
            .unwrap();
        let mut acks_seen = Vec::new();
        for i in 0..500 {
            let record = ProducerRecord::new("acks").value(format!("{acks:?}-{i}"));
            acks_seen.push(producer.send(record).await.unwrap());
        }
        producer.flush().await.unwrap();
        for ack in acks_seen {
            let meta = ack.await.unwrap();
            if acks == Acks::None {
                assert_eq!(meta.offset, -1, "acks=0 has no offsets");
            } else {
                assert!(meta.offset >= 0);
            }
        }
        producer.close().await.unwrap();
        expected += 500;
    }
    let read = read_all(&broker, "acks", expected).await;
    let mut values: Vec<String> = read.values().flatten().map(|r| text(&r.value)).collect();
    values.sort();
    values.dedup();
    assert_eq!(values.len(), expected);
    for level in ["None", "Leader", "All"] {
        assert_eq!(values.iter().filter(|v| v.starts_with(level)).count(), 500);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keyless_records_stick_to_a_partition_per_batch_and_spread_over_time() {
    let broker = broker();
    create_topic(&broker, "sticky", 4).await;
    let config = ProducerConfig {
        batch_size_bytes: 4096,
        ..ProducerConfig::default()
    };
    let producer = Producer::new(common::config(&broker), config)
        .await
        .unwrap();
    let mut acks = Vec::new();
    for i in 0..2000 {
        let record = ProducerRecord::new("sticky").value(format!("{i:0100}"));
        acks.push(producer.send(record).await.unwrap());
    }
    let mut partitions = Vec::new();
    for ack in acks {
        partitions.push(ack.await.unwrap().partition);
    }
    // Consecutive records share a partition for about one batch; every partition gets some.
    let switches = partitions.windows(2).filter(|w| w[0] != w[1]).count();
    assert!(switches < partitions.len() / 10, "{switches} switches");
    let mut used = partitions.clone();
    used.sort();
    used.dedup();
    assert_eq!(used, vec![0, 1, 2, 3]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explicit_partitions_headers_and_timestamps_round_trip() {
    let broker = broker();
    create_topic(&broker, "explicit", 3).await;
    let producer = Producer::new(config(&broker), ProducerConfig::default())
        .await
        .unwrap();
    let ack = producer
        .send(
            ProducerRecord::new("explicit")
                .key("k")
                .value("v")
                .header("h", "x")
                .partition(2)
                .timestamp(1_234),
        )
        .await
        .unwrap();
    let meta = ack.await.unwrap();
    assert_eq!((meta.partition, meta.offset, meta.timestamp), (2, 0, 1_234));
    let err = producer
        .send(ProducerRecord::new("explicit").value("v").partition(3))
        .await
        .err()
        .unwrap();
    assert!(matches!(err, ClientError::InvalidArgument(_)), "{err}");
    producer.close().await.unwrap();
    let read = read_all(&broker, "explicit", 1).await;
    let record = &read[&2][0];
    assert_eq!(record.timestamp, 1_234);
    assert_eq!(record.headers.len(), 1);
    assert_eq!(record.headers[0].0, "h");
    assert_eq!(text(&record.headers[0].1), "x");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_topic_is_a_typed_error_after_max_block() {
    let broker = broker();
    let config = ProducerConfig {
        max_block_ms: 300,
        ..ProducerConfig::default()
    };
    let producer = Producer::new(common::config(&broker), config)
        .await
        .unwrap();
    let err = producer
        .send(ProducerRecord::new("no-such-topic").value("v"))
        .await
        .err()
        .unwrap();
    assert_eq!(
        err.code(),
        Some(ErrorCode::UnknownTopicOrPartition),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn buffer_memory_is_bounded_and_send_waits_for_it() {
    let broker = broker();
    create_topic(&broker, "bounded", 2).await;
    let buffer_memory_bytes_max = 64 * 1024;
    let config = ProducerConfig {
        buffer_memory_bytes_max,
        batch_size_bytes: 16 * 1024,
        acks: Acks::All,
        ..ProducerConfig::default()
    };
    let producer = Producer::new(common::config(&broker), config)
        .await
        .unwrap();
    let value = bytes::Bytes::from(vec![b'x'; 1024]);
    let mut acks = Vec::new();
    let mut peak = 0;
    for _ in 0..2_000 {
        let ack = producer
            .send(ProducerRecord::new("bounded").value(value.clone()))
            .await
            .unwrap();
        peak = peak.max(producer.buffered_bytes());
        acks.push(ack);
    }
    // 2 MB went through a 64 KiB buffer: send() waited for acknowledgements to free memory.
    assert!(peak <= buffer_memory_bytes_max, "peak {peak}");
    for ack in acks {
        ack.await.unwrap();
    }
    assert_eq!(producer.buffered_bytes(), 0);
    producer.close().await.unwrap();
}

/// A bootstrap broker that accepts connections and never answers (a paused process) is
/// skipped: the metadata request times out there and goes on to the next address, and later
/// requests try it last. Before, a metadata request stopped at the first timeout, so a paused
/// broker first in the list kept every refresh (and the producer) waiting.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_bootstrap_broker_is_passed_over() {
    let broker = broker();
    create_topic(&broker, "silent", 1).await;
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let silent_addr = silent.local_addr().unwrap().to_string();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = silent.accept().await {
            held.push(socket); // accepted, never read or answered
        }
    });
    let client = borges_client::ClientConfig::new(&format!("{silent_addr},{}", broker.bootstrap()))
        .request_timeout_ms(500);
    let producer = Producer::new(client, ProducerConfig::default())
        .await
        .expect("a producer despite the silent first address");
    let meta = producer
        .send(ProducerRecord::new("silent").value("v"))
        .await
        .expect("metadata through the second address")
        .await
        .expect("acknowledged");
    assert_eq!(meta.offset, 0);
}
