//! Partition replication between real broker processes (testkit's `Cluster`, three brokers on
//! loopback): acks=all records survive a kill -9 of the leader, the high watermark waits for
//! the followers (consumers never see above it), a follower that was down catches up and
//! rejoins the ISR, acks=all is refused with NotEnoughReplicas (nothing appended) while two of
//! three replicas are down (acks=1 and reads still served), and a former leader with records
//! that were never committed truncates them when it comes back. Where the test ends with every
//! replica in sync, their logs are read from the data directories (borges-checker's replica
//! reader: offsets, CRC, leader epoch of every batch) and must be identical batch for batch up
//! to the high watermark.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use borges_checker::replica::{self, ReplicaLog};
use borges_client::{
    Acks, ClientConfig, Consumer, ConsumerConfig, Offset, Producer, ProducerConfig, ProducerRecord,
    TopicPartition,
};
use borges_replication::metadata::MetadataImage;
use borges_testkit::cluster::{Cluster, ClusterOptions, CLUSTER_WAIT};

const TOPIC: &str = "replicated";

/// `voters` combined brokers; `session_timeout_ms`, `replica_lag_time_max_ms`.
fn cluster(voters: usize, session_timeout_ms: u64, lag_ms: u64) -> Cluster {
    Cluster::start_with(ClusterOptions {
        voters,
        cluster_toml: format!(
            "heartbeat_interval_ms = 200\nsession_timeout_ms = {session_timeout_ms}\n\
             replica_lag_time_max_ms = {lag_ms}\n"
        ),
        ..ClusterOptions::default()
    })
}

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

fn partition_of(image: &MetadataImage) -> Option<&borges_replication::metadata::PartitionRecord> {
    image.topics.get(TOPIC).and_then(|t| t.partitions.first())
}

/// Creates the one-partition topic with three replicas and `min.insync.replicas`, and waits
/// until every broker has it with the full ISR.
fn create_topic(c: &mut Cluster, min_isr: u32) {
    let config = format!("min.insync.replicas={min_isr}");
    c.cli(&[
        "topic",
        "create",
        TOPIC,
        "--partitions",
        "1",
        "--replication-factor",
        "3",
        "--config",
        &config,
    ]);
    c.wait_for_every_node("the topic everywhere", |i| {
        partition_of(i).is_some_and(|p| p.isr.len() == 3)
    });
}

/// Sends `values` to partition 0, one at a time; per value its offset or the error.
async fn produce(
    bootstrap: &str,
    values: impl IntoIterator<Item = String>,
    config: ProducerConfig,
) -> Vec<(String, Result<i64, String>)> {
    let producer = Producer::new(client(bootstrap), config)
        .await
        .expect("producer");
    let mut out = Vec::new();
    for v in values {
        let record = ProducerRecord::new(TOPIC).partition(0).value(v.clone());
        let outcome = match producer.send(record).await {
            Ok(delivery) => delivery.await.map(|m| m.offset).map_err(|e| e.to_string()),
            Err(e) => Err(e.to_string()),
        };
        out.push((v, outcome));
    }
    // Bounded: with the followers stopped a close may wait on requests that never finish.
    let _ = tokio::time::timeout(Duration::from_secs(5), producer.close()).await;
    out
}

/// Retries for the first sends after a topic is created or a broker goes: every node's applied
/// image can name the leader a moment before the leader's core serves the partition, and a send
/// in that window is answered NotLeaderOrFollower (retriable, as in Kafka). Without retries the
/// first send failed that way once in a CI run.
const RETRIES_UNTIL_SERVED: u32 = 20;

fn acks_all(retries_max: u32, delivery_timeout_ms: u64) -> ProducerConfig {
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

/// The partition's high watermark, as its leader's fetch answers carry it.
async fn high_watermark(bootstrap: &str) -> i64 {
    read_with_high_watermark(bootstrap).await.1
}

/// Every record of partition 0 below the high watermark: offset -> value.
async fn read_all(bootstrap: &str) -> BTreeMap<i64, String> {
    read_with_high_watermark(bootstrap).await.0
}

/// Reads partition 0 from the beginning (through its leader, as the consumer finds it) until
/// its position reaches the high watermark of the latest fetch answer.
async fn read_with_high_watermark(bootstrap: &str) -> (BTreeMap<i64, String>, i64) {
    let mut consumer = Consumer::new(client(bootstrap), ConsumerConfig::default())
        .await
        .expect("consumer");
    let tp = TopicPartition::new(TOPIC, 0);
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

fn values(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}-{i}")).collect()
}

/// Every acknowledged value is at its offset in `log`.
fn check_acked(sent: &[(String, Result<i64, String>)], log: &BTreeMap<i64, String>) -> usize {
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

/// Partition 0's replica on each of `nodes`, read from its data directory.
fn replica_logs(c: &mut Cluster, nodes: &[u64]) -> Vec<ReplicaLog> {
    nodes
        .iter()
        .map(|&id| {
            let dir = c.node(id).data_dir().join(format!("{TOPIC}-0"));
            replica::read_partition_dir(id, TOPIC, 0, &dir)
                .unwrap_or_else(|e| panic!("replica of node {id}: {e}"))
        })
        .collect()
}

/// The replicas of partition 0 on `nodes` hold every batch below `hw`, identical batch for
/// batch (offsets, CRC, leader epoch). Below the high watermark everything is fdatasynced on
/// every ISR member (`durability=fsync`), so the files of running brokers can be read.
fn assert_replicas_identical(c: &mut Cluster, nodes: &[u64], hw: i64) {
    let logs = replica_logs(c, nodes);
    let bound = BTreeMap::from([((TOPIC.to_string(), 0), hw)]);
    let comparison = replica::compare(&logs, &bound);
    let summary: Vec<String> = logs
        .iter()
        .map(|l| {
            let batches: Vec<String> = l.batches.iter().map(|b| b.to_string()).collect();
            format!("node {}: [{}] {:?}", l.node, batches.join(", "), l.problem)
        })
        .collect();
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

/// Waits until every node's image shows all three replicas of partition 0 in the ISR.
fn wait_for_full_isr(c: &mut Cluster, what: &str) {
    c.wait_for_every_node(what, |i| partition_of(i).is_some_and(|p| p.isr.len() == 3));
}

fn signal(c: &mut Cluster, id: u64, sig: libc::c_int) {
    let pid = c.node(id).pid() as libc::pid_t;
    // SAFETY: a signal to a broker process this test started.
    assert_eq!(
        unsafe { libc::kill(pid, sig) },
        0,
        "signal {sig} to broker {id}"
    );
}

/// RF 3, min.insync.replicas 2: records acknowledged to acks=all before and across a kill -9
/// of the leader are all readable from the new leader, at the offsets acknowledged.
#[test]
fn acks_all_records_survive_a_kill9_of_the_leader() {
    let mut c = cluster(3, 3000, 10_000);
    create_topic(&mut c, 2);
    let leader = c.leader_of(TOPIC, 0).expect("a leader") as u64;
    let rt = runtime();
    let bootstrap = c.bootstrap();
    let mut sent = rt.block_on(produce(
        &bootstrap,
        values("before", 300),
        acks_all(RETRIES_UNTIL_SERVED, 30_000),
    ));
    assert!(
        sent.iter().all(|(_, r)| r.is_ok()),
        "all acknowledged: {sent:?}"
    );
    c.kill9(leader);
    let after = c.wait_for_every_node("a new leader", |i| {
        partition_of(i).is_some_and(|p| p.leader >= 0 && p.leader != leader as i32)
    });
    let new_leader = partition_of(&after[0]).unwrap().leader;
    let bootstrap = c.bootstrap();
    sent.extend(rt.block_on(produce(
        &bootstrap,
        values("after", 100),
        acks_all(20, 60_000),
    )));
    let log = rt.block_on(read_all(&c.bootstrap()));
    let acked = check_acked(&sent, &log);
    assert!(acked >= 300, "{acked} acknowledged");
    eprintln!("leader {leader} killed, new leader {new_leader}: {acked} acknowledged, all read");
}

/// With a follower stopped (SIGSTOP), records the leader appends (acks=1) stay above the high
/// watermark: consumers do not see them until that follower fetches them.
#[test]
fn consumers_never_see_records_above_the_high_watermark() {
    // Long session and lag: the stopped follower stays in the ISR, so only its fetches can
    // move the high watermark.
    let mut c = cluster(3, 20_000, 60_000);
    create_topic(&mut c, 1);
    let leader = c.leader_of(TOPIC, 0).expect("a leader") as u64;
    let rt = runtime();
    let bootstrap = c.bootstrap();
    let first = rt.block_on(produce(
        &bootstrap,
        values("replicated", 10),
        acks_all(RETRIES_UNTIL_SERVED, 30_000),
    ));
    assert!(first.iter().all(|(_, r)| r.is_ok()), "{first:?}");
    let leader_addr = c.node(leader).addr();
    assert_eq!(rt.block_on(high_watermark(&leader_addr)), 10);
    // One follower stopped, not the active controller: the quorum keeps working.
    let controller = c.wait_for_controller();
    let stopped = (1..=3)
        .find(|&id| id != leader && id != controller)
        .unwrap();
    signal(&mut c, stopped, libc::SIGSTOP);
    let one = ProducerConfig {
        acks: Acks::Leader,
        ..acks_all(0, 30_000)
    };
    let unreplicated = rt.block_on(produce(&leader_addr, values("leader-only", 5), one));
    assert!(
        unreplicated.iter().all(|(_, r)| r.is_ok()),
        "{unreplicated:?}"
    );
    let hw = rt.block_on(high_watermark(&leader_addr));
    let seen = rt.block_on(read_all(&leader_addr));
    signal(&mut c, stopped, libc::SIGCONT);
    assert_eq!(
        hw, 10,
        "the high watermark passed records only the leader has"
    );
    assert_eq!(
        seen.len(),
        10,
        "a consumer saw records above the high watermark: {seen:?}"
    );
    let deadline = Instant::now() + CLUSTER_WAIT;
    while rt.block_on(high_watermark(&leader_addr)) < 15 {
        assert!(Instant::now() < deadline, "the followers never caught up");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(rt.block_on(read_all(&leader_addr)).len(), 15);
}

/// A follower killed with SIGKILL leaves the ISR; records keep being acknowledged by the two
/// others; restarted, it catches up and rejoins the ISR (`topic describe` shows it); after a
/// kill -9 of the leader the new one serves every acknowledged record.
#[test]
fn a_follower_that_was_down_catches_up_and_rejoins_the_isr() {
    let mut c = cluster(3, 3000, 2000);
    create_topic(&mut c, 2);
    let leader = c.leader_of(TOPIC, 0).expect("a leader") as u64;
    let follower = (1..=3).find(|&id| id != leader).unwrap();
    c.kill9(follower);
    c.wait_for_every_node("the follower out of the ISR", |i| {
        partition_of(i).is_some_and(|p| !p.isr.contains(&(follower as i32)))
    });
    let rt = runtime();
    let bootstrap = c.bootstrap();
    let sent = rt.block_on(produce(
        &bootstrap,
        values("while-down", 200),
        acks_all(RETRIES_UNTIL_SERVED, 30_000),
    ));
    assert!(sent.iter().all(|(_, r)| r.is_ok()), "{sent:?}");
    c.restart(follower);
    c.wait_for_every_node("the follower back in the ISR", |i| {
        partition_of(i).is_some_and(|p| p.isr.contains(&(follower as i32)))
    });
    let described = c.cli(&["topic", "describe", TOPIC]);
    let isr_line = described
        .lines()
        .find(|l| l.contains("Isr: "))
        .expect("a partition line");
    let isr = isr_line
        .split("Isr: ")
        .nth(1)
        .unwrap()
        .split('\t')
        .next()
        .unwrap();
    assert_eq!(isr.split(',').count(), 3, "{described}");
    // The leader goes: the new one (from the ISR) serves every acknowledged record.
    c.kill9(leader);
    c.wait_for_every_node("a new leader", |i| {
        partition_of(i).is_some_and(|p| p.leader >= 0 && p.leader != leader as i32)
    });
    let (log, hw) = rt.block_on(read_with_high_watermark(&c.bootstrap()));
    assert_eq!(check_acked(&sent, &log), 200);
    // The killed leader's files stay: all three replicas hold the same batches below the high
    // watermark.
    assert_replicas_identical(&mut c, &[1, 2, 3], hw);
}

/// RF 3, min.insync.replicas 2, two of the partition's three replicas down: acks=all is
/// refused with NotEnoughReplicas and nothing is appended; acks=1 is still served by the
/// leader; reads keep working and see only what was committed (the high watermark does not
/// move while the ISR is below `min.insync.replicas`). Five voters, so that the controller
/// quorum survives the two followers (the ISR shrinks through it). Back, the followers catch
/// up, the high watermark passes the acks=1 records and the three logs are identical.
#[test]
fn acks_all_with_two_brokers_down_is_refused_and_appends_nothing() {
    let mut c = cluster(5, 3000, 10_000);
    create_topic(&mut c, 2);
    let leader = c.leader_of(TOPIC, 0).expect("a leader") as u64;
    let rt = runtime();
    let leader_addr = c.node(leader).addr();
    let first = rt.block_on(produce(
        &leader_addr,
        values("ok", 5),
        acks_all(RETRIES_UNTIL_SERVED, 30_000),
    ));
    assert!(first.iter().all(|(_, r)| r.is_ok()), "{first:?}");
    let image = c.image_of(leader).expect("the leader's image");
    let replicas = partition_of(&image).unwrap().replicas.clone();
    let followers: Vec<u64> = replicas
        .iter()
        .filter(|&&id| id != leader as i32)
        .map(|&id| id as u64)
        .collect();
    for &f in &followers {
        c.kill9(f);
    }
    c.wait_for_every_node("the ISR down to the leader", |i| {
        partition_of(i).is_some_and(|p| p.isr == vec![leader as i32])
    });
    let refused = rt.block_on(produce(
        &leader_addr,
        values("refused", 3),
        acks_all(0, 30_000),
    ));
    for (_, outcome) in &refused {
        let e = outcome.as_ref().expect_err("acks=all must be refused");
        assert!(e.contains("NotEnoughReplicas:"), "{e}");
        assert!(!e.contains("AfterAppend"), "refused before the append: {e}");
    }
    let one = ProducerConfig {
        acks: Acks::Leader,
        ..acks_all(0, 30_000)
    };
    let leader_only = rt.block_on(produce(&leader_addr, values("acks1", 2), one));
    let offsets: Vec<i64> = leader_only
        .iter()
        .map(|(_, r)| *r.as_ref().unwrap())
        .collect();
    assert_eq!(
        offsets,
        vec![5, 6],
        "nothing of the refused batches was appended"
    );
    // Reads keep working, below the high watermark that stays where the ISR left it.
    let (seen, hw) = rt.block_on(read_with_high_watermark(&c.bootstrap()));
    assert_eq!(
        hw, 5,
        "the high watermark moved with the ISR below min.insync.replicas"
    );
    let expected: BTreeMap<i64, String> = (0..5).map(|i| (i, format!("ok-{i}"))).collect();
    assert_eq!(seen, expected);
    for &f in &followers {
        c.restart(f);
    }
    c.wait_for_every_node("the followers back in the ISR", |i| {
        partition_of(i).is_some_and(|p| p.isr.len() == 3)
    });
    let deadline = Instant::now() + CLUSTER_WAIT;
    while rt.block_on(high_watermark(&leader_addr)) < 7 {
        assert!(
            Instant::now() < deadline,
            "the high watermark never reached 7"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let seen = rt.block_on(read_all(&leader_addr));
    assert_eq!(seen.get(&6).map(String::as_str), Some("acks1-1"));
    let mut nodes = followers.clone();
    nodes.push(leader);
    assert_replicas_identical(&mut c, &nodes, 7);
}

/// A diverged follower: the leader appends records its followers never get (both killed with
/// SIGKILL, acks=1), then dies too (kill -9). The followers come back, one of them leads in a
/// new epoch and writes other records at those offsets. The old leader comes back as a
/// follower, learns from the new leader's diverging-epoch answer where its log left the
/// leader's, truncates its tail there and fetches on: no offset holds two values on any
/// replica that could lead, and the three logs are identical batch for batch.
#[test]
fn a_former_leader_truncates_the_records_that_were_never_committed() {
    // A long lag: the followers stay in the ISR (only ISR members may lead next).
    let mut c = cluster(3, 3000, 30_000);
    create_topic(&mut c, 2);
    let old = c.leader_of(TOPIC, 0).expect("a leader") as u64;
    let followers: Vec<u64> = (1..=3).filter(|&id| id != old).collect();
    let rt = runtime();
    let old_addr = c.node(old).addr();
    let committed = rt.block_on(produce(
        &old_addr,
        values("committed", 10),
        acks_all(0, 30_000),
    ));
    assert!(committed.iter().all(|(_, r)| r.is_ok()), "{committed:?}");
    for &f in &followers {
        c.kill9(f);
    }
    // Not idempotent: a producer id comes from the controller, whose quorum is down with the
    // two followers. Bounded: a send that never completes ends the attempt.
    let one = ProducerConfig {
        acks: Acks::Leader,
        enable_idempotence: false,
        ..acks_all(0, 10_000)
    };
    let uncommitted = rt
        .block_on(async {
            let sent = produce(&old_addr, values("uncommitted", 5), one);
            tokio::time::timeout(Duration::from_secs(60), sent).await
        })
        .expect("the acks=1 records answered within 60 s");
    c.kill9(old);
    let taken: Vec<i64> = uncommitted
        .iter()
        .filter_map(|(_, r)| r.clone().ok())
        .collect();
    assert!(
        !taken.is_empty() && taken == (10..10 + taken.len() as i64).collect::<Vec<_>>(),
        "the old leader took acks=1 records after the committed ones: {uncommitted:?}"
    );
    // Both at once: neither serves before the other is back (no quorum alone).
    for &f in &followers {
        c.restart_nowait(f);
    }
    for &f in &followers {
        c.wait_ready(f);
    }
    c.wait_for_every_node("a new leader", |i| {
        partition_of(i).is_some_and(|p| p.leader >= 0 && p.leader != old as i32)
    });
    let bootstrap = c.bootstrap();
    let fresh = rt.block_on(produce(
        &bootstrap,
        values("new-leader", 5),
        acks_all(20, 60_000),
    ));
    let fresh_offsets: Vec<i64> = fresh
        .iter()
        .map(|(v, r)| *r.as_ref().unwrap_or_else(|e| panic!("{v}: {e}")))
        .collect();
    assert_eq!(
        fresh_offsets,
        (10..15).collect::<Vec<_>>(),
        "the new leader writes where its log ended"
    );
    c.restart(old);
    wait_for_full_isr(&mut c, "the old leader back in the ISR");
    let (log, hw) = rt.block_on(read_with_high_watermark(&c.bootstrap()));
    assert_eq!(hw, 15);
    assert_eq!(check_acked(&committed, &log), 10);
    assert_eq!(check_acked(&fresh, &log), 5);
    assert!(
        log.values().all(|v| !v.starts_with("uncommitted")),
        "a record that was never committed is served: {log:?}"
    );
    // The old leader's own log no longer holds its uncommitted batches: batch for batch the
    // same as the new leader's.
    assert_replicas_identical(&mut c, &[1, 2, 3], hw);
}

/// RF 3, min.insync.replicas 2: the leader is paused (SIGSTOP: its connections stay open and
/// answer nothing) while a producer that knows it keeps sending with acks=all. The controller
/// fences it and moves the partition; the producer must find the new leader (a request timeout
/// refreshes the metadata, and the metadata request skips the silent broker) and the other
/// follower must leave its fetch to the paused leader at once, or the new leader's high
/// watermark waits for it. The follower fetch wait is 20 s here, longer than the delivery
/// timeout, so a fetcher that sat out its fetch would fail the test. Every record is
/// acknowledged while the old leader is still stopped, and all of them are read back after.
#[test]
fn acks_all_writes_move_on_while_the_leader_is_paused() {
    let mut c = Cluster::start_with(ClusterOptions {
        voters: 3,
        cluster_toml: "heartbeat_interval_ms = 100\nsession_timeout_ms = 1500\n\
                       replica_lag_time_max_ms = 60000\nreplica_fetch_wait_max_ms = 20000\n"
            .into(),
        ..ClusterOptions::default()
    });
    create_topic(&mut c, 2);
    let leader = c.leader_of(TOPIC, 0).expect("a leader") as u64;
    let rt = runtime();
    let bootstrap = c.bootstrap();
    let config = ProducerConfig {
        delivery_timeout_ms: 15_000,
        ..acks_all(u32::MAX, 15_000)
    };
    let sent = rt.block_on(async {
        let client = ClientConfig::new(&bootstrap).request_timeout_ms(1_000);
        let producer = Producer::new(client, config).await.expect("producer");
        let mut sent = Vec::new();
        for (i, v) in values("paused", 20).into_iter().enumerate() {
            if i == 10 {
                signal(&mut c, leader, libc::SIGSTOP);
            }
            let record = ProducerRecord::new(TOPIC).partition(0).value(v.clone());
            let outcome = match producer.send(record).await {
                Ok(delivery) => delivery.await.map(|m| m.offset).map_err(|e| e.to_string()),
                Err(e) => Err(e.to_string()),
            };
            sent.push((v, outcome));
        }
        let _ = tokio::time::timeout(Duration::from_secs(5), producer.close()).await;
        sent
    });
    signal(&mut c, leader, libc::SIGCONT);
    let failed: Vec<_> = sent.iter().filter(|(_, r)| r.is_err()).collect();
    assert!(
        failed.is_empty(),
        "acknowledged while broker {leader} was paused: {} of 20; failed: {failed:?}",
        20 - failed.len()
    );
    // Read once the continued broker knows it was deposed: until then it still serves its
    // own (older) high watermark to a consumer that asks it first.
    c.wait_for_every_node("the new leader everywhere", |i| {
        partition_of(i).is_some_and(|p| p.leader >= 0 && p.leader != leader as i32)
    });
    let log = rt.block_on(read_all(&c.bootstrap()));
    assert_eq!(check_acked(&sent, &log), 20);
}
