//! Consumer groups on a cluster (issue 14, item 7): `__consumer_offsets` is replicated like
//! any topic, and a group's committed offsets survive the loss (kill -9) of the broker that
//! coordinated the group, right after its last commit was acknowledged, and then of the next
//! coordinator too, while the first one is back as a follower. Three real brokers (testkit's
//! `Cluster`), offsets topic with replication factor 3.

use std::time::{Duration, Instant};

use borges_client::{ClientConfig, Consumer, ConsumerConfig, TopicPartition};
use borges_protocol::partitioner::partition_for_key;
use borges_replication::metadata::{MetadataImage, PartitionRecord, CONSUMER_OFFSETS_TOPIC};
use borges_testkit::cluster::{Cluster, ClusterOptions, CLUSTER_WAIT};

const TOPIC: &str = "tracked";
const GROUP: &str = "survivors";

fn cluster() -> Cluster {
    Cluster::start_with(ClusterOptions {
        voters: 3,
        cluster_toml: "heartbeat_interval_ms = 200\nsession_timeout_ms = 3000\n\
                       replica_lag_time_max_ms = 10000\n"
            .to_string(),
        ..ClusterOptions::default()
    })
}

/// The group's offsets partition in `image`.
fn offsets_partition(image: &MetadataImage) -> Option<&PartitionRecord> {
    let topic = image.topics.get(CONSUMER_OFFSETS_TOPIC)?;
    let p = partition_for_key(GROUP.as_bytes(), topic.partitions.len() as u32);
    topic.partitions.get(p as usize)
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime")
}

/// A group consumer that never subscribes: its commits are administrative (the group has no
/// members), its reads of the committed offsets go to the coordinator.
async fn consumer(bootstrap: &str) -> Consumer {
    let client = ClientConfig::new(bootstrap).request_timeout_ms(10_000);
    let config = ConsumerConfig {
        group_id: Some(GROUP.to_string()),
        enable_auto_commit: false,
        ..ConsumerConfig::default()
    };
    Consumer::new(client, config).await.expect("consumer")
}

fn tp() -> TopicPartition {
    TopicPartition::new(TOPIC, 0)
}

/// Commits `offsets` one after the other, each acknowledged before the next.
async fn commit_all(bootstrap: &str, offsets: impl IntoIterator<Item = i64>) {
    let mut c = consumer(bootstrap).await;
    for offset in offsets {
        c.commit_offsets_sync(&[(tp(), offset)])
            .await
            .unwrap_or_else(|e| panic!("commit {offset}: {e}"));
    }
}

/// The committed offset of the partition as a fresh consumer on `bootstrap` reads it, asked
/// again while the coordinator moves or loads (retriable errors), for up to `CLUSTER_WAIT`.
async fn committed(bootstrap: &str) -> Option<i64> {
    let deadline = Instant::now() + CLUSTER_WAIT;
    loop {
        let c = consumer(bootstrap).await;
        match c.committed(&[tp()]).await {
            Ok(found) => return found.first().and_then(|(_, o)| *o),
            Err(e) if e.is_retriable() && Instant::now() < deadline => {
                eprintln!("committed offsets not served yet: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("reading the committed offsets: {e}"),
        }
    }
}

/// The broker leading the group's offsets partition once every live node agrees, all three
/// replicas in its ISR.
fn settled_coordinator(c: &mut Cluster, what: &str) -> u64 {
    let images = c.wait_for_every_node(what, |i| {
        offsets_partition(i).is_some_and(|p| p.leader >= 0 && p.isr.len() == 3)
    });
    offsets_partition(&images[0])
        .expect("the offsets partition")
        .leader as u64
}

/// Bootstrap addresses of every node but `gone`.
fn bootstrap_without(c: &mut Cluster, gone: u64) -> String {
    (1..=3)
        .filter(|&id| id != gone)
        .map(|id| c.node(id).addr())
        .collect::<Vec<_>>()
        .join(",")
}

#[test]
fn committed_offsets_survive_the_loss_of_their_coordinator() {
    let mut c = cluster();
    c.cli(&[
        "topic",
        "create",
        TOPIC,
        "--partitions",
        "1",
        "--replication-factor",
        "3",
    ]);
    let first = settled_coordinator(&mut c, "the offsets partition on three replicas");
    let rt = runtime();
    let bootstrap = c.bootstrap();
    rt.block_on(commit_all(&bootstrap, 1..=20));
    // At once after the last acknowledgement: the followers may not have heard yet that the
    // last commits are below the high watermark.
    c.kill9(first);
    let survivors = bootstrap_without(&mut c, first);
    c.wait_for_every_node("a new coordinator", |i| {
        offsets_partition(i).is_some_and(|p| p.leader >= 0 && p.leader != first as i32)
    });
    assert_eq!(
        rt.block_on(committed(&survivors)),
        Some(20),
        "the new coordinator lost acknowledged commits"
    );
    // The new coordinator takes commits; the first one comes back as a follower of its
    // offsets partition and catches up; then the second coordinator is lost too.
    rt.block_on(commit_all(&survivors, 21..=30));
    c.restart(first);
    let second = settled_coordinator(&mut c, "the first coordinator back in the ISR");
    assert_ne!(second, first);
    let bootstrap = c.bootstrap();
    rt.block_on(commit_all(&bootstrap, [31]));
    c.kill9(second);
    let survivors = bootstrap_without(&mut c, second);
    c.wait_for_every_node("a third coordinator", |i| {
        offsets_partition(i).is_some_and(|p| p.leader >= 0 && p.leader != second as i32)
    });
    assert_eq!(
        rt.block_on(committed(&survivors)),
        Some(31),
        "commits acknowledged by the second coordinator were lost"
    );
}
