//! `borges group reset-offsets`: a dry run changes nothing; `--to-datetime --execute` replays a
//! group from a point in time.

use std::process::Command;

use borges_client::{
    Admin, ClientConfig, NewTopic, Producer, ProducerConfig, ProducerRecord, TopicPartition,
};
use borges_testkit::BrokerProcess;

/// 2026-01-01T00:00:00Z in ms.
const T0: i64 = 1_767_225_600_000;

fn borges(broker: &BrokerProcess, args: &[&str]) -> String {
    let output = Command::new(env!("CARGO_BIN_EXE_borges"))
        .arg("--bootstrap")
        .arg(broker.bootstrap())
        .args(args)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}

/// Without --execute (and with --dry-run) nothing is committed, whatever the target; the
/// group's committed offset of events-0 is 10.
async fn dry_runs_change_nothing(broker: &BrokerProcess, admin: &Admin) {
    let dry_runs: [&[&str]; 3] = [
        &["--to-earliest"],
        &["--to-offset", "3", "--dry-run"],
        &["--shift-by", "-4"],
    ];
    for target in dry_runs {
        let mut args = vec!["group", "reset-offsets", "replay", "--topic", "events"];
        args.extend_from_slice(target);
        let printed = tokio::task::block_in_place(|| borges(broker, &args));
        let row: Vec<&str> = printed.lines().nth(2).unwrap().split_whitespace().collect();
        assert_ne!(row[3], "10", "{target:?} computes a new offset: {printed}");
        assert_eq!(
            admin.list_group_offsets("replay").await.unwrap(),
            vec![(TopicPartition::new("events", 0), 10)],
            "a dry run ({target:?}) changed the committed offset"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reset_to_a_datetime_replays_from_there() {
    let broker = BrokerProcess::start();
    let config = ClientConfig::new(&broker.bootstrap());
    let admin = Admin::new(config.clone()).await.unwrap();
    admin
        .create_topics(vec![NewTopic::new("events", 1)])
        .await
        .unwrap();
    let producer = Producer::new(config, ProducerConfig::default())
        .await
        .unwrap();
    for i in 0..10i64 {
        let record = ProducerRecord::new("events")
            .value(format!("e{i}"))
            .timestamp(T0 + i * 1_000);
        drop(producer.send(record).await.unwrap());
    }
    producer.close().await.unwrap();
    // The group has read everything.
    admin
        .alter_group_offsets("replay", &[(TopicPartition::new("events", 0), 10)])
        .await
        .unwrap();

    dry_runs_change_nothing(&broker, &admin).await;

    let reset = tokio::task::block_in_place(|| {
        borges(
            &broker,
            &[
                "group",
                "reset-offsets",
                "replay",
                "--topic",
                "events",
                "--to-datetime",
                "2026-01-01T00:00:06.500Z",
                "--execute",
            ],
        )
    });
    let row: Vec<&str> = reset.lines().nth(2).unwrap().split_whitespace().collect();
    assert_eq!(row, ["replay", "events", "0", "7"]);
    assert_eq!(
        admin.list_group_offsets("replay").await.unwrap(),
        vec![(TopicPartition::new("events", 0), 7)]
    );
    let replayed = tokio::task::block_in_place(|| {
        borges(
            &broker,
            &[
                "consume",
                "events",
                "--group",
                "replay",
                "--timeout-ms",
                "2000",
                "--print-offset",
            ],
        )
    });
    assert_eq!(replayed, "Offset:7\te7\nOffset:8\te8\nOffset:9\te9\n");
}
