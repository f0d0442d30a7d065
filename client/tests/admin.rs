//! Admin integration tests against a real broker process.

mod common;

use borges_client::{
    Admin, AlterConfig, ConfigSource, ErrorCode, NewTopic, OffsetSpec, Producer, ProducerConfig,
    ProducerRecord,
};
use common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn topics_are_created_described_altered_listed_and_deleted() {
    let broker = broker();
    let admin = Admin::new(config(&broker)).await.unwrap();
    admin
        .create_topics(vec![
            NewTopic::new("orders", 4).config("retention.ms", "86400000")
        ])
        .await
        .unwrap();
    let err = admin
        .create_topics(vec![NewTopic::new("orders", 4)])
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some(ErrorCode::TopicAlreadyExists), "{err}");
    let err = admin
        .create_topics(vec![NewTopic::new("bad name!", 1)])
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some(ErrorCode::InvalidTopicName), "{err}");

    let described = admin.describe_topics(&["orders"]).await.unwrap();
    let orders = &described[0];
    assert_eq!(orders.partitions.len(), 4);
    assert_eq!(orders.replication_factor(), 1);
    assert!(orders
        .partitions
        .iter()
        .all(|p| p.leader >= 0 && p.isr == p.replicas));
    let retention = orders
        .configs
        .iter()
        .find(|c| c.name == "retention.ms")
        .unwrap();
    assert_eq!(retention.value.as_deref(), Some("86400000"));
    assert_eq!(retention.source, ConfigSource::Topic);

    alter_and_delete_retention(&admin).await;

    assert!(admin
        .list_topics()
        .await
        .unwrap()
        .contains(&"orders".to_string()));
    admin.delete_topics(&["orders"]).await.unwrap();
    assert!(!admin
        .list_topics()
        .await
        .unwrap()
        .contains(&"orders".to_string()));
    let err = admin.describe_topics(&["orders"]).await.unwrap_err();
    assert_eq!(
        err.code(),
        Some(ErrorCode::UnknownTopicOrPartition),
        "{err}"
    );
}

/// `retention.ms` of "orders" set, then deleted (back to the default), then refused with a
/// value that is not a number.
async fn alter_and_delete_retention(admin: &Admin) {
    admin
        .alter_configs("orders", vec![AlterConfig::set("retention.ms", "1000")])
        .await
        .unwrap();
    let configs = admin.describe_configs("orders").await.unwrap();
    let retention = configs.iter().find(|c| c.name == "retention.ms").unwrap();
    assert_eq!(retention.value.as_deref(), Some("1000"));
    admin
        .alter_configs("orders", vec![AlterConfig::delete("retention.ms")])
        .await
        .unwrap();
    let configs = admin.describe_configs("orders").await.unwrap();
    let retention = configs.iter().find(|c| c.name == "retention.ms").unwrap();
    assert_ne!(retention.source, ConfigSource::Topic);
    let err = admin
        .alter_configs("orders", vec![AlterConfig::set("retention.ms", "soon")])
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some(ErrorCode::InvalidConfig), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_offsets_by_spec() {
    let broker = broker();
    let admin = create_topic(&broker, "offsets", 2).await;
    let producer = Producer::new(config(&broker), ProducerConfig::default())
        .await
        .unwrap();
    for (i, ts) in [5_000i64, 9_000, 7_000].into_iter().enumerate() {
        producer
            .send(
                ProducerRecord::new("offsets")
                    .value(format!("{i}"))
                    .partition(0)
                    .timestamp(ts),
            )
            .await
            .unwrap()
            .await
            .unwrap();
    }
    producer.close().await.unwrap();
    let p0 = tp("offsets", 0);
    let p1 = tp("offsets", 1);
    let listed = admin
        .list_offsets(vec![
            (p0.clone(), OffsetSpec::Earliest),
            (p0.clone(), OffsetSpec::Latest),
            (p0.clone(), OffsetSpec::MaxTimestamp),
            (p0.clone(), OffsetSpec::Timestamp(6_000)),
            (p0.clone(), OffsetSpec::Timestamp(10_000)),
            (p1.clone(), OffsetSpec::Latest),
        ])
        .await
        .unwrap();
    let offsets: Vec<i64> = listed.iter().map(|l| l.offset).collect();
    assert_eq!(offsets, vec![0, 3, 1, 1, -1, 0]);
    assert_eq!(listed[2].timestamp, 9_000);
}
