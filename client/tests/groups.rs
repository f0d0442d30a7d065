//! Consumer groups against a real broker: independent groups, partitions split inside a
//! group, commits and resumption, admin group APIs.

mod common;

use std::collections::{BTreeSet, HashSet};
use std::time::{Duration, Instant};

use borges_client::{
    Admin, Consumer, ConsumerConfig, ErrorCode, OffsetReset, Producer, ProducerConfig,
    ProducerRecord, TopicPartition,
};
use common::*;

async fn produce(broker: &borges_testkit::BrokerProcess, topic: &str, from: usize, n: usize) {
    let producer = Producer::new(config(broker), ProducerConfig::default())
        .await
        .unwrap();
    for i in from..from + n {
        let record = ProducerRecord::new(topic)
            .key(format!("k{i}"))
            .value(format!("v{i}"));
        drop(producer.send(record).await.unwrap());
    }
    producer.close().await.unwrap();
}

async fn member(broker: &borges_testkit::BrokerProcess, group: &str, topic: &str) -> Consumer {
    let config = ConsumerConfig {
        group_id: Some(group.into()),
        auto_offset_reset: OffsetReset::Earliest,
        auto_commit_interval_ms: 200,
        ..ConsumerConfig::default()
    };
    let mut consumer = Consumer::new(common::config(broker), config).await.unwrap();
    consumer.subscribe(&[topic]).await.unwrap();
    consumer
}

/// Polls until `n` distinct values arrived (guarded by a generous timeout).
async fn read_values(consumer: &mut Consumer, n: usize) -> HashSet<String> {
    let mut seen = HashSet::new();
    let guard = Instant::now() + Duration::from_secs(60);
    while seen.len() < n && Instant::now() < guard {
        for r in consumer.poll(Duration::from_millis(200)).await.unwrap() {
            seen.insert(text(&r.value));
        }
    }
    seen
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn independent_groups_each_get_every_record() {
    let broker = broker();
    create_topic(&broker, "events", 4).await;
    produce(&broker, "events", 0, 200).await;
    let mut a = member(&broker, "audit", "events").await;
    let mut b = member(&broker, "search", "events").await;
    assert_eq!(read_values(&mut a, 200).await.len(), 200);
    assert_eq!(read_values(&mut b, 200).await.len(), 200);
    a.close().await.unwrap();
    b.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn members_of_one_group_split_the_partitions_and_commits_resume_the_group() {
    let broker = broker();
    create_topic(&broker, "orders", 4).await;
    produce(&broker, "orders", 0, 400).await;
    let mut first = member(&broker, "workers", "orders").await;
    let mut second = member(&broker, "workers", "orders").await;
    let mut seen = HashSet::new();
    let guard = Instant::now() + Duration::from_secs(60);
    // Poll both until every record was seen and the two own disjoint halves.
    loop {
        for c in [&mut first, &mut second] {
            for r in c.poll(Duration::from_millis(100)).await.unwrap() {
                seen.insert(text(&r.value));
            }
        }
        let a: BTreeSet<TopicPartition> = first.assignment().into_iter().collect();
        let b: BTreeSet<TopicPartition> = second.assignment().into_iter().collect();
        let split = a.len() == 2 && b.len() == 2 && a.is_disjoint(&b);
        if (seen.len() == 400 && split) || Instant::now() > guard {
            assert!(split, "assignments {a:?} and {b:?}");
            break;
        }
    }
    assert_eq!(seen.len(), 400, "every record at least once");
    first.commit_sync().await.unwrap();
    second.commit_sync().await.unwrap();
    first.close().await.unwrap();
    second.close().await.unwrap();

    // Committed offsets cover everything read: a new member sees only new records.
    produce(&broker, "orders", 400, 40).await;
    let mut third = member(&broker, "workers", "orders").await;
    let fresh = read_values(&mut third, 40).await;
    assert_eq!(fresh.len(), 40);
    assert!(
        fresh
            .iter()
            .all(|v| v[1..].parse::<usize>().unwrap() >= 400),
        "{fresh:?}"
    );
    third.close().await.unwrap();

    let admin = Admin::new(config(&broker)).await.unwrap();
    let committed = admin.list_group_offsets("workers").await.unwrap();
    assert_eq!(committed.len(), 4);
    assert_eq!(committed.iter().map(|(_, o)| o).sum::<i64>(), 440);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_lists_describes_resets_and_deletes_groups() {
    let broker = broker();
    create_topic(&broker, "t", 2).await;
    produce(&broker, "t", 0, 10).await;
    let mut c = member(&broker, "g", "t").await;
    assert_eq!(read_values(&mut c, 10).await.len(), 10);
    c.commit_sync().await.unwrap();
    let admin = Admin::new(config(&broker)).await.unwrap();
    let groups = admin.list_groups().await.unwrap();
    assert!(groups.iter().any(|g| g.group_id == "g"), "{groups:?}");
    let described = admin.describe_groups(&["g"]).await.unwrap();
    assert_eq!(described[0].members.len(), 1);
    let (member_id, _) = c.member().unwrap();
    assert_eq!(described[0].members[0].member_id, member_id);
    assert_eq!(described[0].members[0].assignment.len(), 2);

    // Resetting offsets is refused while the group has members.
    let err = admin
        .alter_group_offsets("g", &[(tp("t", 0), 0)])
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some(ErrorCode::NonEmptyGroup), "{err}");
    c.close().await.unwrap();
    admin
        .alter_group_offsets("g", &[(tp("t", 0), 0), (tp("t", 1), 0)])
        .await
        .unwrap();
    let offsets = admin.list_group_offsets("g").await.unwrap();
    assert_eq!(offsets, vec![(tp("t", 0), 0), (tp("t", 1), 0)]);
    // The next member replays from the reset offsets.
    let mut again = member(&broker, "g", "t").await;
    assert_eq!(read_values(&mut again, 10).await.len(), 10);
    again.close().await.unwrap();

    admin.delete_groups(&["g"]).await.unwrap();
    let groups = admin.list_groups().await.unwrap();
    assert!(!groups.iter().any(|g| g.group_id == "g"), "{groups:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leaving_member_hands_its_partitions_over_and_offsets_survive_a_broker_restart() {
    let mut broker = broker();
    create_topic(&broker, "jobs", 4).await;
    produce(&broker, "jobs", 0, 100).await;
    let mut stays = member(&broker, "crew", "jobs").await;
    let mut leaves = member(&broker, "crew", "jobs").await;
    let guard = Instant::now() + Duration::from_secs(60);
    // Records either member returned: `leaves` commits what it read (auto-commit, and on
    // close), so `stays` continues from there on the partitions it takes over.
    let mut seen = HashSet::new();
    while !(stays.assignment().len() == 2 && leaves.assignment().len() == 2)
        && Instant::now() < guard
    {
        for c in [&mut stays, &mut leaves] {
            for r in c.poll(Duration::from_millis(100)).await.unwrap() {
                seen.insert(text(&r.value));
            }
        }
    }
    assert_eq!(leaves.assignment().len(), 2);
    leaves.close().await.unwrap();
    while !(stays.assignment().len() == 4 && seen.len() == 100) && Instant::now() < guard {
        for r in stays.poll(Duration::from_millis(100)).await.unwrap() {
            seen.insert(text(&r.value));
        }
    }
    assert_eq!(
        stays.assignment().len(),
        4,
        "the remaining member owns every partition"
    );
    assert_eq!(seen.len(), 100);
    stays.commit_sync().await.unwrap();
    stays.close().await.unwrap();

    let admin = Admin::new(config(&broker)).await.unwrap();
    let before = admin.list_group_offsets("crew").await.unwrap();
    assert_eq!(before.iter().map(|(_, o)| o).sum::<i64>(), 100);
    let broker = tokio::task::spawn_blocking(move || {
        broker.restart();
        broker
    })
    .await
    .unwrap();
    let admin = Admin::new(config(&broker)).await.unwrap();
    assert_eq!(admin.list_group_offsets("crew").await.unwrap(), before);
}

fn limited_member_config(
    group: &str,
    reset: OffsetReset,
    max_poll_records: usize,
) -> ConsumerConfig {
    ConsumerConfig {
        group_id: Some(group.into()),
        auto_offset_reset: reset,
        max_poll_records,
        // Only the commits on revocation and close count here.
        auto_commit_interval_ms: 3_600_000,
        ..ConsumerConfig::default()
    }
}

/// Polls until one non-empty batch arrived; returns its values.
async fn first_batch(consumer: &mut Consumer) -> Vec<String> {
    let guard = Instant::now() + Duration::from_secs(60);
    loop {
        let records = consumer.poll(Duration::from_millis(200)).await.unwrap();
        if !records.is_empty() || Instant::now() > guard {
            return records.iter().map(|r| text(&r.value)).collect();
        }
    }
}

/// `close` commits the position of every assigned partition, also those the member reached no
/// record in (their reset position), and nothing past what `poll` returned: a member that
/// starts at the latest offsets after it continues exactly where the first stopped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn close_commits_the_position_of_every_assigned_partition() {
    let broker = broker();
    create_topic(&broker, "t", 4).await;
    produce(&broker, "t", 0, 400).await;
    let config = limited_member_config("g", OffsetReset::Earliest, 150);
    let mut first = Consumer::new(common::config(&broker), config)
        .await
        .unwrap();
    first.subscribe(&["t"]).await.unwrap();
    let read = first_batch(&mut first).await;
    assert!(!read.is_empty() && read.len() <= 150, "{}", read.len());
    first.close().await.unwrap();
    let admin = Admin::new(common::config(&broker)).await.unwrap();
    let committed = admin.list_group_offsets("g").await.unwrap();
    assert_eq!(
        committed.len(),
        4,
        "every partition committed: {committed:?}"
    );
    assert_eq!(
        committed.iter().map(|(_, o)| *o as usize).sum::<usize>(),
        read.len(),
        "exactly what poll returned"
    );

    let config = limited_member_config("g", OffsetReset::Latest, 500);
    let mut second = Consumer::new(common::config(&broker), config)
        .await
        .unwrap();
    second.subscribe(&["t"]).await.unwrap();
    let rest = read_values(&mut second, 400 - read.len()).await;
    second.close().await.unwrap();
    let all: HashSet<&String> = read.iter().chain(&rest).collect();
    assert_eq!(rest.len(), 400 - read.len());
    assert_eq!(all.len(), 400, "every record once");
}

/// On revocation a member commits the positions of the partitions it gives up (reset
/// positions included, for the partitions it reached no record in), so their new owner, which
/// would otherwise start at the latest offsets, continues exactly there: every record reaches
/// the group once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revocation_commits_the_positions_of_the_revoked_partitions() {
    let broker = broker();
    create_topic(&broker, "t", 4).await;
    produce(&broker, "t", 0, 400).await;
    let config = limited_member_config("g", OffsetReset::Earliest, 50);
    let mut first = Consumer::new(common::config(&broker), config)
        .await
        .unwrap();
    first.subscribe(&["t"]).await.unwrap();
    // At most 50 records, so at least three partitions are reached by none; then the member
    // reads nothing more until the coordinator took two partitions from it.
    let mut by_first = first_batch(&mut first).await;
    first.pause(&first.assignment()).unwrap();
    let config = limited_member_config("g", OffsetReset::Latest, 50);
    let mut second = Consumer::new(common::config(&broker), config)
        .await
        .unwrap();
    second.subscribe(&["t"]).await.unwrap();
    let guard = Instant::now() + Duration::from_secs(60);
    let mut by_second = Vec::new();
    while first.assignment().len() != 2 && Instant::now() < guard {
        assert!(first
            .poll(Duration::from_millis(50))
            .await
            .unwrap()
            .is_empty());
        for r in second.poll(Duration::from_millis(50)).await.unwrap() {
            by_second.push(text(&r.value));
        }
    }
    assert_eq!(first.assignment().len(), 2, "two partitions were revoked");
    first.resume(&first.assignment()).unwrap();
    while by_first.len() + by_second.len() < 400 && Instant::now() < guard {
        for r in first.poll(Duration::from_millis(50)).await.unwrap() {
            by_first.push(text(&r.value));
        }
        for r in second.poll(Duration::from_millis(50)).await.unwrap() {
            by_second.push(text(&r.value));
        }
    }
    assert_eq!(first.assignment().len(), 2, "the partitions were split");
    assert_eq!(second.assignment().len(), 2);
    first.close().await.unwrap();
    second.close().await.unwrap();
    let all: HashSet<&String> = by_first.iter().chain(&by_second).collect();
    assert_eq!(all.len(), 400, "every record reached the group");
    assert_eq!(by_first.len() + by_second.len(), 400, "and only once");
}
