//! The SDK's ListOffsets on a three-broker cluster (testkit's `Cluster`): only a partition's
//! leader answers it, so `Admin::list_offsets` and the consumer's seeks send each partition's
//! query to its leader, from any bootstrap broker, and follow a leader that moved while the
//! client's metadata still names the old one (which answers NotLeaderOrFollower): refresh,
//! retry at the new leader.

use borges_client::{
    Acks, Admin, ClientConfig, Consumer, ConsumerConfig, ListedOffset, Offset, OffsetSpec,
    Producer, ProducerConfig, ProducerRecord, TopicPartition,
};
use borges_testkit::cluster::Cluster;

const TOPIC: &str = "offsets";
const PARTITIONS: i32 = 3;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime")
}

fn client(bootstrap: &str) -> ClientConfig {
    ClientConfig::new(bootstrap).request_timeout_ms(20_000)
}

/// Partition `p` gets `p + 1` records (acks=all), so each answer shows which partition it is.
async fn fill(bootstrap: &str) {
    let config = ProducerConfig {
        acks: Acks::All,
        linger_ms: 0,
        ..ProducerConfig::default()
    };
    let producer = Producer::new(client(bootstrap), config)
        .await
        .expect("producer");
    for p in 0..PARTITIONS {
        for i in 0..=p {
            let record = ProducerRecord::new(TOPIC)
                .partition(p)
                .value(format!("{p}-{i}"));
            let delivery = producer.send(record).await.expect("send");
            delivery.await.expect("acknowledged");
        }
    }
    producer.close().await.expect("close");
}

/// (earliest, latest) of every partition, asked in one `list_offsets` call.
async fn offsets(admin: &Admin) -> Vec<(i64, i64)> {
    let mut queries = Vec::new();
    for p in 0..PARTITIONS {
        let tp = TopicPartition::new(TOPIC, p);
        queries.push((tp.clone(), OffsetSpec::Earliest));
        queries.push((tp, OffsetSpec::Latest));
    }
    let listed: Vec<ListedOffset> = admin
        .list_offsets(queries)
        .await
        .unwrap_or_else(|e| panic!("list_offsets: {e}"));
    listed
        .chunks(2)
        .map(|c| (c[0].offset, c[1].offset))
        .collect()
}

fn expected() -> Vec<(i64, i64)> {
    (0..PARTITIONS).map(|p| (0, i64::from(p) + 1)).collect()
}

/// The log end of partition `p` as a consumer bootstrapped at `bootstrap` finds it (a seek to
/// the end is a ListOffsets at the leader).
async fn seek_to_end(bootstrap: &str, p: i32) -> i64 {
    let mut consumer = Consumer::new(client(bootstrap), ConsumerConfig::default())
        .await
        .expect("consumer");
    let tp = TopicPartition::new(TOPIC, p);
    consumer.assign(vec![tp.clone()]).await.expect("assign");
    consumer
        .seek(&tp, Offset::End)
        .await
        .unwrap_or_else(|e| panic!("seek to the end of {tp}: {e}"));
    consumer.position(&tp).expect("a position")
}

/// Replication factor 3 and three partitions, whose leaders rotate over the brokers: from a
/// client bootstrapped at any one broker, most partitions are led elsewhere. Then the leader
/// of partition 0 is killed and comes back as a follower while a client's metadata still names
/// it: the client refreshes and asks the new leader.
#[test]
fn list_offsets_reaches_each_partitions_leader_and_follows_a_moved_one() {
    let mut c = Cluster::start(3);
    c.cli(&[
        "topic",
        "create",
        TOPIC,
        "--partitions",
        &PARTITIONS.to_string(),
        "--replication-factor",
        "3",
    ]);
    c.wait_for_every_node("every partition with three in sync", |i| {
        i.topics.get(TOPIC).is_some_and(|t| {
            t.partitions.len() == PARTITIONS as usize
                && t.partitions
                    .iter()
                    .all(|p| p.isr.len() == 3 && p.leader > 0)
        })
    });
    let leaders: Vec<i32> = (0..PARTITIONS as usize)
        .map(|p| c.leader_of(TOPIC, p).expect("a leader"))
        .collect();
    eprintln!("leaders of partitions 0..{PARTITIONS}: {leaders:?}");
    let rt = runtime();
    rt.block_on(fill(&c.bootstrap()));
    for id in 1..=3u64 {
        let addr = c.node(id).addr();
        let admin = rt.block_on(Admin::new(client(&addr))).expect("admin");
        assert_eq!(rt.block_on(offsets(&admin)), expected(), "bootstrap {id}");
        for p in 0..PARTITIONS {
            assert_eq!(rt.block_on(seek_to_end(&addr, p)), i64::from(p) + 1);
        }
    }

    // A client whose metadata names the leader of partition 0; that leader goes and comes
    // back as a follower.
    let old = leaders[0] as u64;
    let bystander = (1..=3u64).find(|&id| id != old).expect("another broker");
    let admin = rt
        .block_on(Admin::new(client(&c.node(bystander).addr())))
        .expect("admin");
    assert_eq!(rt.block_on(offsets(&admin)), expected());
    c.kill9(old);
    c.wait_for_every_node("a new leader of partition 0", |i| {
        i.topics
            .get(TOPIC)
            .and_then(|t| t.partitions.first())
            .is_some_and(|p| p.leader > 0 && p.leader != old as i32)
    });
    c.restart(old);
    c.wait_for_every_node("the old leader back in sync", |i| {
        i.topics
            .get(TOPIC)
            .and_then(|t| t.partitions.first())
            .is_some_and(|p| p.isr.contains(&(old as i32)))
    });
    let now = c.leader_of(TOPIC, 0).expect("a leader");
    eprintln!("partition 0: leader {old} killed and restarted, leader now {now}");
    assert_eq!(rt.block_on(offsets(&admin)), expected(), "after the move");
    // The restarted broker's own answers for what it does not lead are refusals; through it a
    // fresh client still finds every leader.
    let addr = c.node(old).addr();
    let admin = rt.block_on(Admin::new(client(&addr))).expect("admin");
    assert_eq!(rt.block_on(offsets(&admin)), expected(), "bootstrap {old}");
}
