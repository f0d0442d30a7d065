//! Partition replication between real broker processes (testkit's `Cluster`, three brokers on
//! loopback): acks=all records survive a kill -9 of the leader, the high watermark waits for
//! the followers (consumers never see above it), a follower that was down catches up and
//! rejoins the ISR, acks=all is refused with NotEnoughReplicas (nothing appended) while two of
//! three replicas are down (acks=1 and reads still served), and a former leader with records
//! that were never committed truncates them when it comes back. Where the test ends with every
//! replica in sync, their logs are read from the data directories (borges-checker's replica
//! reader: offsets, CRC, leader epoch of every batch) and must be identical batch for batch up
//! to the high watermark.

mod replicated;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use borges_client::{Acks, ClientConfig, Producer, ProducerConfig};
use borges_replication::metadata::{MetadataImage, PartitionRecord};
use borges_testkit::cluster::{first_partition, Cluster, ClusterOptions, CLUSTER_WAIT};
use replicated::{acks_all, check_acked, runtime, send_one, values, Sent};

const TOPIC: &str = "replicated";

/// `voters` combined brokers; `session_timeout_ms`, `replica_lag_time_max_ms`.
fn cluster(voters: usize, session_timeout_ms: u64, lag_ms: u64) -> Cluster {
    replicated::cluster(
        voters,
        format!(
            "heartbeat_interval_ms = 200\nsession_timeout_ms = {session_timeout_ms}\n\
             replica_lag_time_max_ms = {lag_ms}\n"
        ),
    )
}

fn partition_of(image: &MetadataImage) -> Option<&PartitionRecord> {
    first_partition(image, TOPIC)
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
    wait_for_full_isr(c, "the topic everywhere");
}

/// Sends `values` to partition 0, one at a time; per value its offset or the error.
async fn produce(
    bootstrap: &str,
    values: impl IntoIterator<Item = String>,
    config: ProducerConfig,
) -> Sent {
    replicated::produce(bootstrap, (TOPIC, 0), values, config).await
}

/// Retries for the first sends after a topic is created or a broker goes: every node's applied
/// image can name the leader a moment before the leader's core serves the partition, and a send
/// in that window is answered NotLeaderOrFollower (retriable, as in Kafka). Without retries the
/// first send failed that way once in a CI run.
const RETRIES_UNTIL_SERVED: u32 = 20;

/// acks=1, no retries.
fn acks_one() -> ProducerConfig {
    ProducerConfig {
        acks: Acks::Leader,
        ..acks_all(0, 30_000)
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

/// Reads partition 0 from the beginning until its position reaches the high watermark.
async fn read_with_high_watermark(bootstrap: &str) -> (BTreeMap<i64, String>, i64) {
    replicated::read_to_high_watermark(bootstrap, TOPIC, 0).await
}

/// Waits until the high watermark `bootstrap` serves reaches `hw`.
fn wait_for_high_watermark(rt: &tokio::runtime::Runtime, bootstrap: &str, hw: i64, what: &str) {
    let deadline = Instant::now() + CLUSTER_WAIT;
    while rt.block_on(high_watermark(bootstrap)) < hw {
        assert!(Instant::now() < deadline, "{what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The replicas of partition 0 on `nodes` hold every batch below `hw`, identical batch for
/// batch.
fn assert_replicas_identical(c: &mut Cluster, nodes: &[u64], hw: i64) {
    replicated::assert_replicas_identical(c, TOPIC, nodes, hw);
}

/// Waits until every node's image shows all three replicas of partition 0 in the ISR.
fn wait_for_full_isr(c: &mut Cluster, what: &str) {
    c.wait_for_every_node(what, |i| partition_of(i).is_some_and(|p| p.isr.len() == 3));
}

/// Waits until every node's image names a leader of partition 0 other than `old`.
fn wait_for_new_leader(c: &mut Cluster, old: u64, what: &str) -> Vec<MetadataImage> {
    c.wait_for_every_node(what, |i| {
        partition_of(i).is_some_and(|p| p.leader >= 0 && p.leader != old as i32)
    })
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
    let after = wait_for_new_leader(&mut c, leader, "a new leader");
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
    c.signal(stopped, libc::SIGSTOP);
    let unreplicated = rt.block_on(produce(&leader_addr, values("leader-only", 5), acks_one()));
    assert!(
        unreplicated.iter().all(|(_, r)| r.is_ok()),
        "{unreplicated:?}"
    );
    let hw = rt.block_on(high_watermark(&leader_addr));
    let seen = rt.block_on(read_all(&leader_addr));
    c.signal(stopped, libc::SIGCONT);
    assert_eq!(
        hw, 10,
        "the high watermark passed records only the leader has"
    );
    assert_eq!(
        seen.len(),
        10,
        "a consumer saw records above the high watermark: {seen:?}"
    );
    wait_for_high_watermark(&rt, &leader_addr, 15, "the followers never caught up");
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
    wait_for_new_leader(&mut c, leader, "a new leader");
    // A new leader's high watermark can start below what the old one had acknowledged (as in
    // Kafka, it learned the old high watermark from its last fetch answer and moves it once
    // the other follower fetches from it): the acknowledged records must become visible, not
    // at once. Reading at once saw 199 of 200 in a CI run.
    wait_for_high_watermark(
        &rt,
        &c.bootstrap(),
        200,
        "acknowledged records never visible",
    );
    let (log, hw) = rt.block_on(read_with_high_watermark(&c.bootstrap()));
    assert_eq!(check_acked(&sent, &log), 200);
    // The killed leader's files stay: all three replicas hold the same batches below the high
    // watermark.
    assert_replicas_identical(&mut c, &[1, 2, 3], hw);
}

/// Writes 5 records with acks=all through `leader_addr`, then kills the partition's two
/// followers and waits until the ISR is the leader alone; returns the followers.
fn isr_down_to_the_leader(c: &mut Cluster, rt: &tokio::runtime::Runtime, leader: u64) -> Vec<u64> {
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
    followers
}

/// With the ISR below min.insync.replicas: acks=all is refused before the append, acks=1 is
/// appended right after the 5 committed records.
fn refused_but_acks1_served(rt: &tokio::runtime::Runtime, leader_addr: &str) {
    let refused = rt.block_on(produce(
        leader_addr,
        values("refused", 3),
        acks_all(0, 30_000),
    ));
    for (_, outcome) in &refused {
        let e = outcome.as_ref().expect_err("acks=all must be refused");
        assert!(e.contains("NotEnoughReplicas:"), "{e}");
        assert!(!e.contains("AfterAppend"), "refused before the append: {e}");
    }
    let leader_only = rt.block_on(produce(leader_addr, values("acks1", 2), acks_one()));
    let offsets: Vec<i64> = leader_only
        .iter()
        .map(|(_, r)| *r.as_ref().unwrap())
        .collect();
    assert_eq!(
        offsets,
        vec![5, 6],
        "nothing of the refused batches was appended"
    );
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
    let followers = isr_down_to_the_leader(&mut c, &rt, leader);
    refused_but_acks1_served(&rt, &leader_addr);
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
    wait_for_full_isr(&mut c, "the followers back in the ISR");
    wait_for_high_watermark(&rt, &leader_addr, 7, "the high watermark never reached 7");
    let seen = rt.block_on(read_all(&leader_addr));
    assert_eq!(seen.get(&6).map(String::as_str), Some("acks1-1"));
    let mut nodes = followers.clone();
    nodes.push(leader);
    assert_replicas_identical(&mut c, &nodes, 7);
}

/// Writes 10 committed records through the old leader `old`, kills its `followers`, has it
/// take acks=1 records that they never get, and kills it too. Returns the committed sends.
fn diverge_and_kill_the_leader(
    c: &mut Cluster,
    rt: &tokio::runtime::Runtime,
    old: u64,
    followers: &[u64],
) -> Sent {
    let old_addr = c.node(old).addr();
    let committed = rt.block_on(produce(
        &old_addr,
        values("committed", 10),
        acks_all(0, 30_000),
    ));
    assert!(committed.iter().all(|(_, r)| r.is_ok()), "{committed:?}");
    for &f in followers {
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
    committed
}

/// Brings `followers` back (both at once: neither serves before the other is back, no quorum
/// alone); one of them leads and writes 5 records where its log ended (offsets 10..15).
fn a_new_leader_writes_on(
    c: &mut Cluster,
    rt: &tokio::runtime::Runtime,
    old: u64,
    followers: &[u64],
) -> Sent {
    for &f in followers {
        c.restart_nowait(f);
    }
    for &f in followers {
        c.wait_ready(f);
    }
    wait_for_new_leader(c, old, "a new leader");
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
    fresh
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
    let committed = diverge_and_kill_the_leader(&mut c, &rt, old, &followers);
    let fresh = a_new_leader_writes_on(&mut c, &rt, old, &followers);
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
                c.signal(leader, libc::SIGSTOP);
            }
            let outcome = send_one(&producer, TOPIC, 0, v.clone()).await;
            sent.push((v, outcome));
        }
        let _ = tokio::time::timeout(Duration::from_secs(5), producer.close()).await;
        sent
    });
    c.signal(leader, libc::SIGCONT);
    let failed: Vec<_> = sent.iter().filter(|(_, r)| r.is_err()).collect();
    assert!(
        failed.is_empty(),
        "acknowledged while broker {leader} was paused: {} of 20; failed: {failed:?}",
        20 - failed.len()
    );
    // Read once the continued broker knows it was deposed: until then it still serves its
    // own (older) high watermark to a consumer that asks it first.
    wait_for_new_leader(&mut c, leader, "the new leader everywhere");
    let log = rt.block_on(read_all(&c.bootstrap()));
    assert_eq!(check_acked(&sent, &log), 20);
}
