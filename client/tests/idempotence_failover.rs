//! The idempotent producer (on by default, 5 requests in flight per connection) through leader
//! failover on three real broker processes: the leader of the partitions is killed (-9)
//! mid-stream, again and again, while the producer keeps writing with acks=all; batches in
//! flight at a kill are retried to the new leader. Every acknowledged record must end up
//! exactly once and in send order per partition (checked by `borges-checker` on the recorded
//! history): a retried batch that the old leader had already replicated is recognised by the
//! new leader from the producer state its replica rebuilt from the batches it fetched.

mod exactly_once;

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use borges_checker::history::parse_value;
use borges_checker::Recorder;
use borges_client::{
    Acks, ClientConfig, Consumer, ConsumerConfig, Offset, Producer, ProducerConfig, TopicPartition,
};
use borges_testkit::cluster::{first_partition, Cluster, CLUSTER_WAIT};
use exactly_once::{check_exactly_once, run_with_faults, wait_for_acked, Progress, Stream};

const TOPIC: &str = "exactly-once-failover";
const PARTITIONS: i32 = 2;
const RECORDS: usize = 6_000;
const KILLS: usize = 3;
/// Records are sent one every 8 ms (the stream lasts about 50 s, several kill cycles).
const STREAM: Stream = Stream {
    topic: TOPIC,
    records: RECORDS,
    interval: Some(Duration::from_millis(8)),
};

fn client(bootstrap: &str) -> ClientConfig {
    let mut config = ClientConfig::new(bootstrap).request_timeout_ms(5_000);
    config.metadata_max_age_ms = 1_000;
    config
}

fn producer_config() -> ProducerConfig {
    ProducerConfig {
        acks: Acks::All,
        linger_ms: 2,
        batch_size_bytes: 2048,
        retry_backoff_ms: 20,
        retry_backoff_max_ms: 200,
        delivery_timeout_ms: 180_000,
        ..ProducerConfig::default()
    }
}

/// Waits until every live node's image shows both partitions with a leader and the full ISR.
fn wait_full_isr(c: &mut Cluster) {
    c.wait_for_every_node("full ISR", |i| {
        i.topics.get(TOPIC).is_some_and(|t| {
            t.partitions.len() == PARTITIONS as usize
                && t.partitions
                    .iter()
                    .all(|p| p.leader >= 0 && p.isr.len() == 3)
        })
    });
}

/// Kills the leader of partition 0 `KILLS` times, each once a further share of the records is
/// acknowledged, restarting it and waiting for the full ISR before the next kill; returns the
/// acknowledged counts seen at the kills.
fn kill_leaders_mid_stream(
    c: &mut Cluster,
    recorder: &Recorder,
    progress: &Progress,
) -> Vec<usize> {
    let mut at_kill = Vec::new();
    for k in 0..KILLS {
        let threshold = RECORDS * (k + 1) / (KILLS + 2);
        if !wait_for_acked(progress, threshold, RECORDS, Duration::from_secs(180)) {
            return at_kill;
        }
        let leader = c.leader_of(TOPIC, 0).expect("partition 0 has a leader") as u64;
        let id = format!("kill-{k}");
        recorder.fault_start(&id, "kill-leader", &format!("node {leader}"), &[0]);
        c.kill9(leader);
        at_kill.push(progress.acked.load(Ordering::Relaxed));
        // The survivors elect a new leader while the producer writes; then the old one returns.
        c.wait_for_every_node("a new leader of partition 0", |i| {
            first_partition(i, TOPIC).is_some_and(|p| p.leader >= 0 && p.leader != leader as i32)
        });
        c.restart(leader);
        recorder.fault_end(&id);
        wait_full_isr(c);
    }
    at_kill
}

/// Every record of every partition up to `ends` (the acknowledged ends, below every high
/// watermark): partition -> [(offset, value)].
async fn read_all(bootstrap: &str, ends: &BTreeMap<i32, i64>) -> BTreeMap<i32, Vec<(i64, u64)>> {
    let mut consumer = Consumer::new(client(bootstrap), ConsumerConfig::default())
        .await
        .expect("consumer");
    let tps: Vec<TopicPartition> = (0..PARTITIONS)
        .map(|p| TopicPartition::new(TOPIC, p))
        .collect();
    consumer.assign(tps.clone()).await.expect("assign");
    for tp in &tps {
        consumer.seek(tp, Offset::Beginning).await.expect("seek");
    }
    let mut out: BTreeMap<i32, Vec<(i64, u64)>> = BTreeMap::new();
    let guard = Instant::now() + CLUSTER_WAIT;
    loop {
        for r in consumer
            .poll(Duration::from_millis(300))
            .await
            .expect("poll")
        {
            let v = parse_value(r.value.as_deref().expect("a value")).expect("a recorded value");
            out.entry(r.partition).or_default().push((r.offset, v));
        }
        let caught_up = tps.iter().all(|tp| {
            let end = ends.get(&tp.partition).copied().unwrap_or(0);
            consumer.position(tp).unwrap_or(0) >= end
        });
        if caught_up {
            return out;
        }
        assert!(Instant::now() < guard, "never reached the high watermarks");
    }
}

async fn final_read(bootstrap: &str, recorder: &Recorder, ends: &BTreeMap<i32, i64>) {
    let process = recorder.process();
    let read = read_all(bootstrap, ends).await;
    for partition in 0..PARTITIONS {
        let end = ends.get(&partition).copied().unwrap_or(0);
        let values: Vec<(i64, u64)> = read
            .get(&partition)
            .into_iter()
            .flatten()
            .copied()
            .filter(|(o, _)| *o < end)
            .collect();
        recorder.final_read(process, partition, &values);
        recorder.final_end(process, partition, 0, end);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_record_exactly_once_and_in_order_through_leader_failover() {
    let mut c = tokio::task::spawn_blocking(|| {
        let mut c = Cluster::start(3);
        c.cli(&[
            "topic",
            "create",
            TOPIC,
            "--partitions",
            &PARTITIONS.to_string(),
            "--replication-factor",
            "3",
            "--config",
            "min.insync.replicas=2",
        ]);
        wait_full_isr(&mut c);
        c
    })
    .await
    .unwrap();
    let bootstrap = c.bootstrap();
    let recorder = Recorder::in_memory();
    recorder.header(TOPIC);
    let producer = Producer::new(client(&bootstrap), producer_config())
        .await
        .unwrap();
    let progress = Arc::new(Progress::default());
    let (c, at_kill) = run_with_faults(
        (producer, &recorder, &progress),
        STREAM,
        c,
        kill_leaders_mid_stream,
    )
    .await;
    assert_eq!(at_kill.len(), KILLS, "every kill happened");
    let ends = progress.ends.lock().unwrap().clone();
    final_read(&bootstrap, &recorder, &ends).await;
    eprintln!("kills at {at_kill:?} acknowledged");
    let summary = check_exactly_once(&recorder, RECORDS);
    eprintln!("{summary}");
    drop(c);
}
