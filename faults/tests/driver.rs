//! The driver against three real brokers (testkit cluster on loopback, no faults): the
//! workload's history and the final read must check clean, every partition must be read
//! completely, and the leader query must name a live broker. `min.insync.replicas` is 1 here:
//! this test is about what the driver records, not about replication.

use std::time::Duration;

use borges_checker::{check_history, CheckOptions, History, Recorder};
use borges_faults::topology::{self, TopicSpec};
use borges_faults::workload::{self, WorkloadOptions};
use borges_faults::{client_config, readback, READBACK_ID_BASE, WORKLOAD_ID_BASE};
use borges_testkit::cluster::Cluster;

const TOPIC: &str = "driver";
const PARTITIONS: i32 = 3;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fault_free_run_checks_clean_with_every_partition_read_back() {
    let mut cluster = tokio::task::block_in_place(|| Cluster::start(3));
    let config = client_config(&cluster.bootstrap(), 5_000);
    let spec = TopicSpec {
        name: TOPIC.into(),
        partitions: PARTITIONS,
        replication_factor: 3,
        min_insync_replicas: 1,
        durability: "fsync".into(),
    };
    topology::create_topic(&config, &spec, Duration::from_secs(60))
        .await
        .expect("topic");
    let leader = topology::leader(&config, TOPIC, 0, Duration::from_secs(10)).await;
    assert!((1..=3).contains(&leader), "leader {leader}");

    let dir = tempfile_dir(&cluster);
    let (workload_path, final_path) = (dir.join("workload.jsonl"), dir.join("final.jsonl"));
    let options = WorkloadOptions {
        topic: TOPIC.into(),
        partitions: PARTITIONS,
        duration: Duration::from_secs(6),
        producers: 2,
        rate_per_producer_per_s: 100,
        in_flight_per_partition_max: 8,
        delivery_timeout_ms: 30_000,
        assign_consumers: 1,
        group_consumers: 1,
        consumer_lifetime_s: 3,
        seed: 7,
    };
    let recorder = Recorder::create(&workload_path, WORKLOAD_ID_BASE).expect("history");
    let tally = workload::run(config.clone(), options, recorder).await;
    eprintln!("workload {}", tally.line());

    let recorder = Recorder::create(&final_path, READBACK_ID_BASE).expect("history");
    let reads = readback::read_back(
        &config,
        TOPIC,
        PARTITIONS,
        &recorder,
        Duration::from_secs(60),
    )
    .await;
    drop(recorder);
    assert!(reads.iter().all(|r| r.complete), "{reads:?}");

    let history = History::merge(vec![
        History::read_jsonl(&workload_path).expect("workload history"),
        History::read_jsonl(&final_path).expect("final history"),
    ])
    .expect("merge");
    let report = check_history(&history, &CheckOptions::default()).expect("check");
    for a in &report.anomalies {
        eprintln!("anomaly {a}");
    }
    assert!(report.anomalies.is_empty(), "{}", report.summary);
    assert!(report.summary.acked > 0, "{}", report.summary);
    let read: usize = reads.iter().map(|r| r.records).sum();
    assert_eq!(
        read, report.summary.acked,
        "every record read is an acknowledged one"
    );
    assert_eq!(
        report.final_hw.len(),
        PARTITIONS as usize,
        "{:?}",
        report.notes
    );
}

/// A directory for the histories inside the cluster's temporary directory.
fn tempfile_dir(cluster: &Cluster) -> std::path::PathBuf {
    let dir = cluster.dir().join("histories");
    std::fs::create_dir_all(&dir).expect("mkdir");
    dir
}
