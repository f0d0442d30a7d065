//! Leader election between real broker processes (testkit's `Cluster` on loopback): the
//! preferred (first) replica leads again once it is back in the ISR
//! (`auto_leader_rebalance_enable`), and not while the rebalance is off; with a partition's
//! whole ISR gone, only an eligible leader replica (KIP-966) leads, with every acknowledged
//! record (three voters plus three broker-only members holding the partition, so that the
//! controller quorum survives). The unclean-election rules are state-machine tests in
//! `replication/src/cluster/tests.rs`.

mod replicated;

use std::time::Duration;

use borges_replication::metadata::{BrokerState, MetadataImage, PartitionRecord, NO_LEADER};
use borges_testkit::cluster::{first_partition, Cluster};
use replicated::{acks_all, check_acked, read_to_high_watermark, runtime, values, Sent};

const TOPIC: &str = "elected";

fn cluster(rebalance: bool) -> Cluster {
    replicated::cluster(
        3,
        format!(
            "heartbeat_interval_ms = 200\nsession_timeout_ms = 3000\n\
             replica_lag_time_max_ms = 2000\nauto_leader_rebalance_enable = {rebalance}\n\
             leader_imbalance_check_interval_ms = 300\n"
        ),
    )
}

fn partition_of(image: &MetadataImage) -> Option<&PartitionRecord> {
    first_partition(image, TOPIC)
}

/// Creates the one-partition topic with three replicas; returns its preferred replica, once
/// every broker sees it leading with the full ISR.
fn create_topic(c: &mut Cluster) -> i32 {
    c.cli(&[
        "topic",
        "create",
        TOPIC,
        "--partitions",
        "1",
        "--replication-factor",
        "3",
    ]);
    let images = c.wait_for_every_node("the topic everywhere", |i| {
        partition_of(i).is_some_and(|p| p.isr.len() == 3 && p.leader == p.replicas[0])
    });
    partition_of(&images[0]).expect("the partition").replicas[0]
}

/// Kills the preferred leader, waits for another leader and for the preferred replica to be
/// back in the ISR after its restart.
fn fail_over_and_rejoin(c: &mut Cluster, preferred: i32) {
    c.kill9(preferred as u64);
    c.wait_for_every_node("another leader", |i| {
        partition_of(i).is_some_and(|p| p.leader >= 0 && p.leader != preferred)
    });
    c.restart(preferred as u64);
    c.wait_for_every_node("the preferred replica back in the ISR", |i| {
        partition_of(i).is_some_and(|p| p.isr.contains(&preferred))
    });
}

/// Planted: `ElectPreferredLeaders` left every leader where it was -> timed out waiting for
/// the preferred leader.
#[test]
fn the_preferred_replica_leads_again_once_it_rejoined_the_isr() {
    let mut c = cluster(true);
    let preferred = create_topic(&mut c);
    fail_over_and_rejoin(&mut c, preferred);
    c.wait_for_every_node("the preferred replica leading again", |i| {
        partition_of(i).is_some_and(|p| p.leader == preferred)
    });
    let described = c.cli(&["topic", "describe", TOPIC]);
    assert!(
        described.contains(&format!("Leader: {preferred}\t")),
        "{described}"
    );
}

/// Planted: the rebalance ran whatever `auto_leader_rebalance_enable` said -> the preferred
/// replica led again.
#[test]
fn without_auto_rebalance_leadership_stays_where_failover_put_it() {
    let mut c = cluster(false);
    let preferred = create_topic(&mut c);
    fail_over_and_rejoin(&mut c, preferred);
    // Ten check intervals: with the rebalance on, leadership is back within one or two.
    std::thread::sleep(Duration::from_secs(3));
    let leader = c.leader_of(TOPIC, 0).expect("a leader");
    assert_ne!(leader, preferred);
}

/// Sends `n` values `acked-i` to `partition` with acks=all; per value its offset or the error.
async fn produce(bootstrap: &str, partition: i32, n: usize) -> Sent {
    let config = acks_all(20, 30_000);
    replicated::produce(bootstrap, (TOPIC, partition), values("acked", n), config).await
}

/// Three voters and three broker-only members (4, 5, 6); a topic whose partition `index` is
/// on the broker-only members only. Returns the cluster, `index`, its leader and the others.
fn partition_off_the_voters() -> (Cluster, i32, i32, i32, i32) {
    let mut c = replicated::cluster(
        3,
        "heartbeat_interval_ms = 200\nsession_timeout_ms = 3000\n\
         replica_lag_time_max_ms = 2000\nauto_leader_rebalance_enable = false\n"
            .into(),
    );
    for id in 4..=6 {
        c.add_broker_only(id);
    }
    c.wait_for_every_node("six running brokers", |i| {
        i.brokers
            .values()
            .filter(|b| b.state == BrokerState::Running)
            .count()
            == 6
    });
    c.cli(&[
        "topic",
        "create",
        TOPIC,
        "--partitions",
        "6",
        "--replication-factor",
        "3",
        "--config",
        "min.insync.replicas=2",
    ]);
    let images = c.wait_for_every_node("the topic with full ISRs", |i| {
        i.topics.get(TOPIC).is_some_and(|t| {
            t.partitions
                .iter()
                .all(|p| p.isr.len() == 3 && p.leader >= 0)
        })
    });
    // Leaders rotate over the six brokers: one partition is [4, 5, 6] exactly.
    let (index, p) = images[0].topics[TOPIC]
        .partitions
        .iter()
        .enumerate()
        .find(|(_, p)| p.replicas.iter().all(|&r| r >= 4))
        .expect("a partition on the broker-only members");
    let (index, l) = (index as i32, p.leader);
    let others: Vec<i32> = p.replicas.iter().copied().filter(|&r| r != l).collect();
    (c, index, l, others[0], others[1])
}

fn partition(i: &MetadataImage, index: i32) -> PartitionRecord {
    i.topics[TOPIC].partitions[index as usize].clone()
}

/// Kills `a`, `b`, then the leader `l`, waiting after each for the ISR and ELR it leads to.
fn lose_the_isr(c: &mut Cluster, index: i32, l: i32, a: i32, b: i32) {
    let on = |i: &MetadataImage| partition(i, index);
    c.kill9(a as u64);
    c.wait_for_every_node("a out of the ISR, no ELR", |i| {
        let p = on(i);
        p.isr.len() == 2 && !p.isr.contains(&a) && p.elr.is_empty()
    });
    c.kill9(b as u64);
    c.wait_for_every_node("b in the ELR", |i| {
        let p = on(i);
        p.isr == vec![l] && p.elr == vec![b]
    });
    c.kill9(l as u64);
    c.wait_for_every_node("the ISR empty, b and l eligible", |i| {
        let p = on(i);
        p.leader == NO_LEADER && p.isr.is_empty() && p.elr == vec![b, l]
    });
}

/// RF 3, min.insync.replicas 2, the partition on the three broker-only members `l` (leader),
/// `a`, `b`: `a` then `b` then `l` killed. `b` left an ISR below min.insync.replicas and `l`
/// was its last member, so both are in the ELR; `a` left while the ISR was still at
/// min.insync.replicas. Restarted, `a` may not lead (unclean election is off); `b` may, and
/// serves every acknowledged record.
/// Planted: choose_leader without the ELR branch -> timed out waiting for `b` to lead;
/// planted: unclean election always on -> `a` led.
#[test]
fn with_the_isr_gone_only_an_eligible_replica_leads_and_keeps_every_acknowledged_record() {
    let (mut c, index, l, a, b) = partition_off_the_voters();
    let on = move |i: &MetadataImage| partition(i, index);
    let rt = runtime();
    let sent = rt.block_on(produce(&c.bootstrap(), index, 50));
    assert!(sent.iter().all(|(_, r)| r.is_ok()), "{sent:?}");
    lose_the_isr(&mut c, index, l, a, b);
    c.restart(a as u64);
    let images = c.wait_for_every_node("a running", |i| {
        i.brokers
            .get(&a)
            .is_some_and(|r| r.state == BrokerState::Running)
    });
    for i in &images {
        assert_eq!(on(i).leader, NO_LEADER, "a left the ISR too early to lead");
        assert_eq!(i.unclean_leader_elections, 0);
    }

    c.restart(b as u64);
    c.wait_for_every_node("b leading", |i| on(i).leader == b);
    let (log, _) = rt.block_on(read_to_high_watermark(&c.bootstrap(), TOPIC, index));
    assert_eq!(
        check_acked(&sent, &log),
        sent.len(),
        "every record acknowledged"
    );
    let described = c.cli(&["topic", "describe", TOPIC]);
    let line = described
        .lines()
        .find(|x| x.contains(&format!("Partition: {index}\t")))
        .expect("the partition's line");
    assert!(line.contains(&format!("Leader: {b}\t")), "{described}");
}
