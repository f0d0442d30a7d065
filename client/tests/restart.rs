//! A broker killed with SIGKILL and restarted in the middle of producing: the producer's
//! retries absorb it, every record is acknowledged, and every acknowledged record is readable
//! at its offset.

mod common;

use std::collections::HashMap;

use borges_client::{Acks, Producer, ProducerConfig, ProducerRecord};
use common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_in_the_middle_of_producing_is_absorbed_by_retries() {
    let mut broker = broker();
    create_topic(&broker, "restart", 4).await;
    let config = ProducerConfig {
        acks: Acks::All,
        linger_ms: 2,
        retry_backoff_ms: 50,
        retry_backoff_max_ms: 500,
        delivery_timeout_ms: 90_000,
        ..ProducerConfig::default()
    };
    let producer = Producer::new(common::config(&broker), config)
        .await
        .unwrap();
    let total = 4_000;
    let sender = {
        let producer = producer.clone();
        tokio::spawn(async move {
            let mut acks = Vec::new();
            for i in 0..total {
                let record = ProducerRecord::new("restart")
                    .key(format!("k{}", i % 16))
                    .value(format!("v{i}"));
                acks.push((i, producer.send(record).await.unwrap()));
                if i % 100 == 0 {
                    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
                }
            }
            let mut written = HashMap::new();
            for (i, ack) in acks {
                let meta = ack
                    .await
                    .expect("every record is acknowledged after retries");
                let value = format!("v{i}");
                if let Some(other) = written.insert((meta.partition, meta.offset), value.clone()) {
                    panic!(
                        "{value} and {other} were both acknowledged at partition {} offset {}",
                        meta.partition, meta.offset
                    );
                }
            }
            written
        })
    };
    tokio::time::sleep(std::time::Duration::from_millis(150)).await;
    // The sender sleeps 5 ms every 100 records: 200 ms at least, so the kill lands mid-way.
    assert!(
        !sender.is_finished(),
        "the kill must happen while producing"
    );
    let broker = tokio::task::spawn_blocking(move || {
        broker.kill9();
        std::thread::sleep(std::time::Duration::from_millis(300));
        broker.restart();
        broker
    })
    .await
    .unwrap();
    let written = sender.await.unwrap();
    producer.close().await.unwrap();
    assert_eq!(written.len(), total);

    // Records acknowledged before the kill survived it (acks=all); retried ones may appear
    // twice (no idempotence yet), so read at least as many as were acknowledged.
    let read = read_all(&broker, "restart", total).await;
    let mut by_offset = HashMap::new();
    for (partition, records) in &read {
        for r in records {
            by_offset.insert((*partition, r.offset), text(&r.value));
        }
    }
    for (at, value) in &written {
        assert_eq!(by_offset.get(at), Some(value), "record at {at:?}");
    }
}
