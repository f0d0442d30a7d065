//! Runs the `borges` binary against a real broker and compares its output with what Kafka's
//! tools print (the seeds), fields separated by tabs.

use std::io::Write;
use std::process::{Command, Output, Stdio};

use borges_testkit::BrokerProcess;

const ORDERS: &str = "user-1:created order 100\nuser-2:created order 101\nuser-1:paid order 100\nuser-3:created order 102\nuser-2:paid order 101\nuser-3:paid order 102\n";

fn borges(broker: &BrokerProcess, args: &[&str], stdin: Option<&str>) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_borges"))
        .args(args)
        .env("BORGES_BOOTSTRAP", broker.bootstrap())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run borges");
    let mut input = child.stdin.take().expect("stdin");
    if let Some(text) = stdin {
        input.write_all(text.as_bytes()).expect("write stdin");
    }
    drop(input);
    child.wait_with_output().expect("borges output")
}

fn ok(output: Output) -> String {
    assert!(
        output.status.success(),
        "exit {:?}, stderr: {}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).expect("utf-8 stdout")
}

/// A failure: exit code 1 and exactly one line on stderr, starting with `error: `.
fn failed(output: Output) -> String {
    assert_eq!(output.status.code(), Some(1), "expected exit code 1");
    let stderr = String::from_utf8(output.stderr).expect("utf-8 stderr");
    assert_eq!(stderr.lines().count(), 1, "one line: {stderr:?}");
    assert!(stderr.starts_with("error: "), "{stderr}");
    stderr
}

/// A usage error: exit code 2 and a message on stderr starting with `error: `.
fn usage_error(output: Output) -> String {
    let stderr = String::from_utf8(output.stderr).expect("utf-8 stderr");
    assert_eq!(
        output.status.code(),
        Some(2),
        "expected a usage error: {stderr}"
    );
    assert!(stderr.starts_with("error: "), "{stderr}");
    stderr
}

/// Lines sorted by partition then offset (records of different partitions may interleave).
fn by_partition_and_offset(text: &str) -> Vec<String> {
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    let key = |line: &String| -> (i64, i64) {
        let field = |name: &str| {
            line.split('\t')
                .find_map(|f| f.strip_prefix(name))
                .and_then(|v| v.parse().ok())
                .unwrap_or(-1)
        };
        (field("Partition:"), field("Offset:"))
    };
    lines.sort_by_key(key);
    lines
}

#[test]
fn quickstart_matches_the_kafka_seed_output() {
    let broker = BrokerProcess::start();
    assert_eq!(
        ok(borges(
            &broker,
            &[
                "topic",
                "create",
                "orders",
                "--partitions",
                "4",
                "--replication-factor",
                "1"
            ],
            None
        )),
        "Created topic orders.\n"
    );
    let describe = ok(borges(&broker, &["topic", "describe", "orders"], None));
    let lines: Vec<&str> = describe.lines().collect();
    assert_eq!(lines.len(), 5, "{describe}");
    let head: Vec<&str> = lines[0].split('\t').collect();
    assert_eq!(head[0], "Topic: orders");
    let id = head[1].strip_prefix("TopicId: ").expect("TopicId field");
    assert_eq!(id.len(), 22, "Kafka-style base64 topic id: {id}");
    assert_eq!(
        &head[2..],
        ["PartitionCount: 4", "ReplicationFactor: 1", "Configs: "]
    );
    for (p, line) in lines[1..].iter().enumerate() {
        assert_eq!(
            *line,
            format!("\tTopic: orders\tPartition: {p}\tLeader: 0\tReplicas: 0\tIsr: 0")
        );
    }

    assert_eq!(
        ok(borges(
            &broker,
            &["produce", "orders", "--key-separator", ":"],
            Some(ORDERS)
        )),
        ""
    );
    let consumed = ok(borges(
        &broker,
        &[
            "consume",
            "orders",
            "--from-beginning",
            "--max-messages",
            "6",
            "--print-partition",
            "--print-offset",
            "--print-key",
        ],
        None,
    ));
    // The exact lines of the seed's kafka-console-consumer run.
    let expected = [
        "Partition:0\tOffset:0\tuser-1\tcreated order 100",
        "Partition:0\tOffset:1\tuser-2\tcreated order 101",
        "Partition:0\tOffset:2\tuser-1\tpaid order 100",
        "Partition:0\tOffset:3\tuser-2\tpaid order 101",
        "Partition:3\tOffset:0\tuser-3\tcreated order 102",
        "Partition:3\tOffset:1\tuser-3\tpaid order 102",
    ];
    assert_eq!(by_partition_and_offset(&consumed), expected);

    // One partition from an offset, value only; exits after the idle timeout.
    let tail = ok(borges(
        &broker,
        &[
            "consume",
            "orders",
            "--partition",
            "3",
            "--offset",
            "1",
            "--timeout-ms",
            "1000",
        ],
        None,
    ));
    assert_eq!(tail, "paid order 102\n");
    let stamped = ok(borges(
        &broker,
        &[
            "consume",
            "orders",
            "--partition",
            "3",
            "--offset",
            "earliest",
            "--max-messages",
            "1",
            "--print-timestamp",
            "--print-key",
        ],
        None,
    ));
    let fields: Vec<&str> = stamped.trim_end().split('\t').collect();
    assert!(
        fields[0]
            .strip_prefix("CreateTime:")
            .is_some_and(|t| t.parse::<i64>().is_ok()),
        "{stamped}"
    );
    assert_eq!(&fields[1..], ["user-3", "created order 102"]);
}

#[test]
fn topic_list_alter_delete_and_acks_levels() {
    let broker = BrokerProcess::start();
    ok(borges(
        &broker,
        &[
            "topic",
            "create",
            "logs",
            "--config",
            "retention.ms=86400000",
        ],
        None,
    ));
    ok(borges(
        &broker,
        &["topic", "create", "audit", "--partitions", "2"],
        None,
    ));
    assert_eq!(
        ok(borges(
            &broker,
            &["topic", "list", "--exclude-internal"],
            None
        )),
        "audit\nlogs\n"
    );
    // As kafka-topics.sh --list: internal topics are listed unless excluded.
    assert_eq!(
        ok(borges(&broker, &["topic", "list"], None)),
        "__consumer_offsets\naudit\nlogs\n"
    );
    let describe = ok(borges(&broker, &["topic", "describe", "logs"], None));
    assert!(
        describe
            .lines()
            .next()
            .unwrap()
            .ends_with("\tConfigs: retention.ms=86400000"),
        "{describe}"
    );

    assert_eq!(
        ok(borges(
            &broker,
            &[
                "topic",
                "alter",
                "logs",
                "--config",
                "retention.ms=1000",
                "--config",
                "segment.ms=60000"
            ],
            None
        )),
        "Completed updating config for topic logs.\n"
    );
    let describe = ok(borges(&broker, &["topic", "describe", "logs"], None));
    assert!(
        describe
            .lines()
            .next()
            .unwrap()
            .ends_with("\tConfigs: retention.ms=1000,segment.ms=60000"),
        "{describe}"
    );
    ok(borges(
        &broker,
        &["topic", "alter", "logs", "--delete-config", "segment.ms"],
        None,
    ));
    let describe = ok(borges(&broker, &["topic", "describe", "logs"], None));
    assert!(
        describe
            .lines()
            .next()
            .unwrap()
            .ends_with("\tConfigs: retention.ms=1000"),
        "{describe}"
    );

    for acks in ["0", "1", "all"] {
        ok(borges(
            &broker,
            &["produce", "audit", "--acks", acks, "--partition", "1"],
            Some(&format!("acks {acks}\n")),
        ));
    }
    let consumed = ok(borges(
        &broker,
        &[
            "consume",
            "audit",
            "--from-beginning",
            "--max-messages",
            "3",
            "--print-offset",
        ],
        None,
    ));
    assert_eq!(
        consumed,
        "Offset:0\tacks 0\nOffset:1\tacks 1\nOffset:2\tacks all\n"
    );

    assert_eq!(
        ok(borges(&broker, &["topic", "delete", "audit"], None)),
        "Deleted topic audit.\n"
    );
    assert_eq!(
        ok(borges(
            &broker,
            &["topic", "list", "--exclude-internal"],
            None
        )),
        "logs\n"
    );
}

#[test]
fn errors_are_one_clear_line_and_a_non_zero_exit() {
    let broker = BrokerProcess::start();
    ok(borges(&broker, &["topic", "create", "t"], None));
    let e = failed(borges(&broker, &["topic", "create", "t"], None));
    assert!(e.contains("TopicAlreadyExists"), "{e}");
    let e = failed(borges(&broker, &["topic", "describe", "missing"], None));
    assert!(e.contains("UnknownTopicOrPartition"), "{e}");
    let e = failed(borges(&broker, &["topic", "create", "bad/name"], None));
    assert!(e.contains("InvalidTopicName"), "{e}");
    let e = failed(borges(
        &broker,
        &["produce", "t", "--key-separator", ":"],
        Some("k:v\nno separator here\n"),
    ));
    assert!(e.contains("line 2"), "{e}");
    let e = failed(borges(
        &broker,
        &["produce", "t", "--partition", "7"],
        Some("v\n"),
    ));
    assert!(e.contains("partition 7"), "{e}");
    let e = failed(borges(
        &broker,
        &["consume", "missing", "--max-messages", "1"],
        None,
    ));
    assert!(e.contains("UnknownTopicOrPartition"), "{e}");
    let e = failed(borges(&broker, &["group", "describe", "nobody"], None));
    assert!(e.contains("nobody"), "{e}");
    let e = usage_error(borges(
        &broker,
        &[
            "group",
            "reset-offsets",
            "g",
            "--topic",
            "t",
            "--to-datetime",
            "soon",
        ],
        None,
    ));
    assert!(e.contains("RFC 3339"), "{e}");
    let e = failed(borges(
        &broker,
        &["--bootstrap", "127.0.0.1:1", "topic", "list"],
        None,
    ));
    assert!(e.contains("127.0.0.1:1"), "{e}");
}

#[test]
fn every_command_has_help_with_examples() {
    let commands: &[&[&str]] = &[
        &[],
        &["broker"],
        &["topic", "create"],
        &["topic", "describe"],
        &["topic", "list"],
        &["topic", "delete"],
        &["topic", "alter"],
        &["topic", "offsets"],
        &["produce"],
        &["consume"],
        &["group", "list"],
        &["group", "describe"],
        &["group", "reset-offsets"],
        &["group", "delete"],
    ];
    for command in commands {
        let output = Command::new(env!("CARGO_BIN_EXE_borges"))
            .args(command.iter().copied())
            .arg("--help")
            .output()
            .expect("run borges --help");
        let text = String::from_utf8_lossy(&output.stdout);
        assert!(output.status.success(), "{command:?}");
        assert!(
            text.contains("Examples:"),
            "{command:?} --help lacks examples:\n{text}"
        );
    }
}

#[test]
fn consumer_groups_consume_commit_describe_reset_and_delete() {
    let broker = BrokerProcess::start();
    ok(borges(
        &broker,
        &["topic", "create", "orders", "--partitions", "4"],
        None,
    ));
    ok(borges(
        &broker,
        &["produce", "orders", "--key-separator", ":"],
        Some(ORDERS),
    ));
    let group_consume = |extra: &[&str]| {
        let mut args = vec![
            "consume",
            "orders",
            "--group",
            "audit-svc",
            "--print-partition",
            "--print-offset",
            "--print-key",
        ];
        args.extend_from_slice(extra);
        ok(borges(&broker, &args, None))
    };
    let first = group_consume(&["--from-beginning", "--max-messages", "6"]);
    assert_eq!(
        by_partition_and_offset(&first),
        [
            "Partition:0\tOffset:0\tuser-1\tcreated order 100",
            "Partition:0\tOffset:1\tuser-2\tcreated order 101",
            "Partition:0\tOffset:2\tuser-1\tpaid order 100",
            "Partition:0\tOffset:3\tuser-2\tpaid order 101",
            "Partition:3\tOffset:0\tuser-3\tcreated order 102",
            "Partition:3\tOffset:1\tuser-3\tpaid order 102",
        ]
    );
    assert_eq!(ok(borges(&broker, &["group", "list"], None)), "audit-svc\n");

    // The consumer committed its positions and left: no members, no lag.
    ok(borges(
        &broker,
        &["produce", "orders", "--key-separator", ":"],
        Some("user-1:shipped order 100\nuser-2:shipped order 101\n"),
    ));
    let describe = ok(borges(&broker, &["group", "describe", "audit-svc"], None));
    let lines: Vec<&str> = describe.lines().collect();
    assert_eq!(lines[0], "");
    assert_eq!(
        lines[1],
        "Consumer group 'audit-svc' has no active members."
    );
    let table: Vec<Vec<&str>> = lines[3..]
        .iter()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(
        table[0],
        [
            "GROUP",
            "TOPIC",
            "PARTITION",
            "CURRENT-OFFSET",
            "LOG-END-OFFSET",
            "LAG",
            "CONSUMER-ID",
            "HOST",
            "CLIENT-ID"
        ]
    );
    assert_eq!(
        table[1],
        ["audit-svc", "orders", "0", "4", "6", "2", "-", "-", "-"]
    );
    // Partitions the member reached no record in are committed at their reset position.
    for p in ["1", "2"] {
        assert_eq!(
            table[p.parse::<usize>().unwrap() + 1],
            ["audit-svc", "orders", p, "0", "0", "0", "-", "-", "-"]
        );
    }
    assert_eq!(
        table[4],
        ["audit-svc", "orders", "3", "2", "2", "0", "-", "-", "-"]
    );
    assert_eq!(table.len(), 5);
    // Columns are aligned: every line has its fields at the header's positions.
    let column = lines[3].find("LOG-END-OFFSET").unwrap();
    assert_eq!(&lines[4][column..column + 1], "6");

    // The group resumes where it committed.
    let resumed = group_consume(&["--timeout-ms", "2000"]);
    assert_eq!(
        by_partition_and_offset(&resumed),
        [
            "Partition:0\tOffset:4\tuser-1\tshipped order 100",
            "Partition:0\tOffset:5\tuser-2\tshipped order 101"
        ]
    );

    // Reset: a dry run changes nothing; --execute does.
    let dry = ok(borges(
        &broker,
        &[
            "group",
            "reset-offsets",
            "audit-svc",
            "--topic",
            "orders",
            "--shift-by",
            "-1",
        ],
        None,
    ));
    let rows: Vec<Vec<&str>> = dry
        .lines()
        .skip(2)
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(rows[0], ["audit-svc", "orders", "0", "5"]);
    assert_eq!(rows[3], ["audit-svc", "orders", "3", "1"]);
    let replay = ok(borges(
        &broker,
        &[
            "group",
            "reset-offsets",
            "audit-svc",
            "--topic",
            "orders",
            "--to-earliest",
            "--execute",
        ],
        None,
    ));
    assert_eq!(
        replay.lines().nth(1),
        Some("GROUP     TOPIC  PARTITION  NEW-OFFSET")
    );
    let all = group_consume(&["--max-messages", "8"]);
    assert_eq!(all.lines().count(), 8);

    assert_eq!(
        ok(borges(&broker, &["group", "delete", "audit-svc"], None)),
        "Deletion of requested consumer groups ('audit-svc') was successful.\n"
    );
    assert_eq!(ok(borges(&broker, &["group", "list"], None)), "");
}
