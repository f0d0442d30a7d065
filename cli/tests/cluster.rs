//! Three-broker clusters of real processes on loopback (testkit's `Cluster`): formation,
//! topic changes seen by every broker, failover of the active controller, a broker-only
//! member, refusal of unformatted and foreign directories, a restart of all three, fencing
//! and controlled shutdown.

use std::process::Command;
use std::time::{Duration, Instant};

use borges_replication::metadata::{BrokerState, MetadataImage};
use borges_testkit::borges_bin;
use borges_testkit::cluster::{borges, Cluster, ClusterOptions};

fn topic_on(image: &MetadataImage, name: &str, partitions: usize) -> bool {
    image
        .topics
        .get(name)
        .is_some_and(|t| t.partitions.len() == partitions)
}

#[test]
fn three_brokers_form_a_cluster_and_every_one_sees_topic_changes() {
    let mut c = Cluster::start(3);
    c.wait_for_controller();
    let images = c.wait_for_every_node("three running brokers", |i| {
        i.brokers.len() == 3 && i.brokers.values().all(|b| b.state == BrokerState::Running)
    });
    assert_eq!(images.len(), 3);
    c.cli(&[
        "topic",
        "create",
        "orders",
        "--partitions",
        "3",
        "--replication-factor",
        "3",
    ]);
    let images = c.wait_for_every_node("orders everywhere", |i| topic_on(i, "orders", 3));
    let placed = &images[0].topics["orders"];
    for image in &images {
        assert_eq!(
            &image.topics["orders"], placed,
            "every broker applies the same record"
        );
    }
    let leaders: std::collections::BTreeSet<i32> =
        placed.partitions.iter().map(|p| p.leader).collect();
    assert_eq!(
        leaders.len(),
        3,
        "leaders spread over the brokers: {placed:?}"
    );
    c.cli(&["topic", "alter", "orders", "--config", "retention.ms=60000"]);
    c.wait_for_every_node("the new config everywhere", |i| {
        i.topics["orders"]
            .configs
            .get("retention.ms")
            .map(String::as_str)
            == Some("60000")
    });
    // Each broker describes the same leaders, replicas and ISR in Kafka's format.
    let first = c.node(1).addr();
    let described = borges(&["--bootstrap", &first, "topic", "describe", "orders"]);
    assert!(described.contains("ReplicationFactor: 3"), "{described}");
    assert!(described.contains("\tIsr: "), "{described}");
    assert!(described.contains("\tElr: \tLastKnownElr: "), "{described}");
    for id in [2, 3] {
        let addr = c.node(id).addr();
        assert_eq!(
            borges(&["--bootstrap", &addr, "topic", "describe", "orders"]),
            described
        );
    }
    c.cli(&["topic", "delete", "orders"]);
    c.wait_for_every_node("orders gone", |i| !i.topics.contains_key("orders"));
}

#[test]
fn produce_and_consume_through_the_leaders_of_a_replicated_topic() {
    let mut c = Cluster::start(3);
    c.cli(&[
        "topic",
        "create",
        "t",
        "--partitions",
        "3",
        "--replication-factor",
        "3",
    ]);
    c.wait_for_every_node("t everywhere", |i| topic_on(i, "t", 3));
    let bootstrap = c.bootstrap();
    let mut produce = Command::new(borges_bin())
        .args(["--bootstrap", &bootstrap, "produce", "t"])
        .stdin(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    {
        use std::io::Write;
        let stdin = produce.stdin.as_mut().unwrap();
        for i in 0..30 {
            writeln!(stdin, "value-{i}").unwrap();
        }
    }
    assert!(produce.wait().unwrap().success());
    let out = c.cli(&["consume", "t", "--from-beginning", "--max-messages", "30"]);
    let mut got: Vec<&str> = out.lines().collect();
    got.sort();
    let mut want: Vec<String> = (0..30).map(|i| format!("value-{i}")).collect();
    want.sort();
    assert_eq!(got, want);
}

/// Kills the active controller with SIGKILL: another takes over, metadata changes keep
/// working, and the old one rejoins and catches up.
#[test]
fn kill9_of_the_active_controller_fails_over_and_the_old_one_rejoins() {
    let mut c = Cluster::start(3);
    let old = c.wait_for_controller();
    c.kill9(old);
    let new = c.wait_for_controller();
    assert_ne!(new, old);
    c.cli(&["topic", "create", "after-failover", "--partitions", "2"]);
    c.wait_for_every_node("the topic on the survivors", |i| {
        topic_on(i, "after-failover", 2)
    });
    c.wait_for_broker_state(old as i32, BrokerState::Fenced);
    c.restart(old);
    c.wait_for_every_node("the old controller caught up and running", |i| {
        topic_on(i, "after-failover", 2)
            && i.brokers
                .get(&(old as i32))
                .is_some_and(|b| b.state == BrokerState::Running)
    });
    c.cli(&["topic", "create", "after-rejoin", "--partitions", "1"]);
    c.wait_for_every_node("a change after the rejoin", |i| {
        topic_on(i, "after-rejoin", 1)
    });
}

/// Fencing moves a dead broker's partitions to another ISR member with a bumped leader epoch.
#[test]
fn a_killed_broker_is_fenced_and_its_partitions_get_leaders_from_the_isr() {
    let mut c = Cluster::start(3);
    c.cli(&[
        "topic",
        "create",
        "f",
        "--partitions",
        "3",
        "--replication-factor",
        "3",
    ]);
    c.wait_for_every_node("f everywhere", |i| topic_on(i, "f", 3));
    let victim = c.leader_of("f", 0).expect("a leader") as u64;
    let before = c.image_of(victim).unwrap().topics["f"].partitions[0].clone();
    c.kill9(victim);
    c.wait_for_broker_state(victim as i32, BrokerState::Fenced);
    let images = c.wait_for_every_node("new leaders", |i| {
        i.topics["f"]
            .partitions
            .iter()
            .all(|p| p.leader != victim as i32)
    });
    let after = &images[0].topics["f"].partitions[0];
    assert!(after.isr.contains(&after.leader) && !after.isr.contains(&(victim as i32)));
    assert_eq!(after.leader_epoch, before.leader_epoch + 1);
    let described = c.cli(&["topic", "describe", "f"]);
    assert!(
        !described.contains(&format!("Leader: {victim}\t")),
        "{described}"
    );
}

#[test]
fn sigterm_moves_leadership_away_before_the_broker_exits() {
    let mut c = Cluster::start(3);
    c.cli(&[
        "topic",
        "create",
        "s",
        "--partitions",
        "3",
        "--replication-factor",
        "3",
    ]);
    c.wait_for_every_node("s everywhere", |i| topic_on(i, "s", 3));
    let status = c
        .terminate(2, Duration::from_secs(30))
        .expect("exits on SIGTERM");
    assert!(status.success(), "{status:?}");
    // Without waiting: leadership moved before the process exited.
    let image = c.image_of(1).unwrap();
    assert!(
        image.topics["s"].partitions.iter().all(|p| p.leader != 2),
        "{:?}",
        image.topics["s"]
    );
    assert_ne!(image.brokers[&2].state, BrokerState::Running);
}

#[test]
fn a_broker_only_member_follows_the_log_without_voting() {
    let mut c = Cluster::start(3);
    c.wait_for_controller();
    c.add_broker_only(4);
    c.wait_for_broker_state(4, BrokerState::Running);
    let quorum = c.quorum().unwrap();
    assert_eq!(quorum.voters, vec![1, 2, 3]);
    c.cli(&[
        "topic",
        "create",
        "seen-by-4",
        "--partitions",
        "4",
        "--replication-factor",
        "4",
    ]);
    let image = c.wait_for_every_node("the topic on the observer", |i| topic_on(i, "seen-by-4", 4));
    assert_eq!(image.len(), 4);
    let controllers = c.controller_bootstrap();
    let status = borges(&[
        "cluster",
        "describe",
        "--bootstrap-controller",
        &controllers,
    ]);
    assert!(
        status.contains("CurrentVoters:          [1,2,3]"),
        "{status}"
    );
    assert!(status.contains("CurrentObservers:       [4]"), "{status}");
    assert!(status.contains("BrokerId: 4\t"), "{status}");
}

#[test]
fn restart_of_all_three_keeps_the_metadata() {
    let mut c = Cluster::start(3);
    c.cli(&[
        "topic",
        "create",
        "kept",
        "--partitions",
        "5",
        "--replication-factor",
        "2",
    ]);
    c.cli(&["topic", "alter", "kept", "--config", "retention.ms=1234"]);
    let before = c.wait_for_every_node("kept everywhere", |i| {
        i.topics
            .get("kept")
            .is_some_and(|t| t.configs.contains_key("retention.ms"))
    });
    let topic = before[0].topics["kept"].clone();
    for id in 1..=3 {
        c.kill9(id);
    }
    for id in 1..=3 {
        c.restart_nowait(id);
    }
    for id in 1..=3 {
        c.wait_ready(id);
    }
    let after = c.wait_for_every_node("kept after the restart", |i| i.topics.contains_key("kept"));
    for image in after {
        let t = &image.topics["kept"];
        assert_eq!(
            (t.id, &t.configs, t.partitions.len()),
            (topic.id, &topic.configs, 5)
        );
    }
}

fn broker_command(dir: &std::path::Path, node_id: &str, ctl: u16) -> std::process::Output {
    let port = borges_testkit::free_port();
    let voters = format!("{node_id}@127.0.0.1:{ctl},8@127.0.0.1:2,9@127.0.0.1:3");
    let voters = voters.as_str();
    Command::new(borges_bin())
        .args(["broker", "--node-id", node_id, "--data-dir"])
        .arg(dir)
        .args([
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--metrics-listen",
            "",
            "--core-port-base",
            "0",
        ])
        .args(["--controller-listen", &format!("127.0.0.1:{ctl}")])
        .args(["--controller-voters", voters, "--cores", "1"])
        .output()
        .unwrap()
}

#[test]
fn a_cluster_broker_refuses_an_unformatted_or_foreign_directory() {
    let tmp = tempfile::tempdir().unwrap();
    let voters = borges_testkit::free_port();
    let empty = tmp.path().join("empty");
    let out = broker_command(&empty, "1", voters);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("is not formatted") && err.contains("borges storage format"),
        "{err}"
    );
    let other = tmp.path().join("other");
    let d = other.to_str().unwrap();
    borges(&[
        "storage",
        "format",
        "--data-dir",
        d,
        "--cluster-id",
        "c1",
        "--node-id",
        "2",
    ]);
    let out = broker_command(&other, "1", voters);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("formatted for node 2"), "{err}");
    // A single-node directory is refused as a member, and a member's as a single node.
    let single = tmp.path().join("single");
    std::fs::create_dir_all(&single).unwrap();
    std::fs::write(
        single.join("meta.properties"),
        "cluster.id=x\ndirectory.id=y\nnode.id=1\nborges.single.node=true\nversion=1\n",
    )
    .unwrap();
    let out = broker_command(&single, "1", voters);
    assert!(String::from_utf8_lossy(&out.stderr).contains("single-node broker"));
    let formatted = Command::new(borges_bin())
        .args([
            "storage",
            "format",
            "--data-dir",
            d,
            "--cluster-id",
            "c2",
            "--node-id",
            "2",
        ])
        .output()
        .unwrap();
    assert!(!formatted.status.success(), "formatting twice is refused");
}

#[test]
fn a_foreign_cluster_member_is_refused_by_the_quorum() {
    let mut c = Cluster::start_with(ClusterOptions {
        voters: 3,
        ..ClusterOptions::default()
    });
    c.wait_for_controller();
    let epoch = c.image_of(1).unwrap().brokers[&3].epoch;
    // Node 3's directory formatted again for another cluster: the others refuse its Hello.
    c.kill9(3);
    let dir = c.node(3).data_dir();
    std::fs::remove_dir_all(&dir).unwrap();
    let d = dir.to_str().unwrap().to_string();
    borges(&[
        "storage",
        "format",
        "--data-dir",
        &d,
        "--cluster-id",
        "intruder",
        "--node-id",
        "3",
    ]);
    c.restart_nowait(3);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if c.node(3).log().contains("cluster id mismatch") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no refusal logged:\n{}",
            c.node(3).log()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // Its old registration expires; it never registers again (it gives up and exits).
    c.wait_for_broker_state(3, BrokerState::Fenced);
    let image = c.image_of(1).unwrap();
    assert_eq!(
        image.brokers[&3].epoch, epoch,
        "no new registration from the intruder"
    );
}
