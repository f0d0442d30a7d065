//! Kafka muscle memory through the real binary: Kafka's flag names beside ours, the tools'
//! output formats, `--format json`, and exit code 2 for usage errors (issue 18, item 3).

mod common;

use std::process::Command;

use borges_testkit::BrokerProcess;
use common::{borges, failed, json, ok, usage_error};

#[test]
fn topic_commands_take_kafka_flags() {
    let broker = BrokerProcess::start();
    let bootstrap = broker.bootstrap();
    // --bootstrap-server and --topic, as kafka-topics.sh takes them.
    let created = Command::new(env!("CARGO_BIN_EXE_borges"))
        .args(["--bootstrap-server", &bootstrap, "topic", "create"])
        .args(["--topic", "t", "--partitions", "2"])
        .output()
        .unwrap();
    assert_eq!(ok(created), "Created topic t.\n");
    assert_eq!(
        ok(borges(
            &broker,
            &["topic", "create", "t", "--if-not-exists"],
            None
        )),
        ""
    );
    let e = failed(borges(&broker, &["topic", "create", "t"], None));
    assert!(e.contains("TopicAlreadyExists"), "{e}");

    assert_eq!(
        ok(borges(
            &broker,
            &["topic", "alter", "t", "--partitions", "4"],
            None
        )),
        "Topic t now has 4 partitions.\n"
    );
    let described = ok(borges(
        &broker,
        &["topic", "describe", "--topic", "t"],
        None,
    ));
    assert!(described.contains("\tPartitionCount: 4\t"), "{described}");
    assert_eq!(described.lines().count(), 5, "{described}");
    let e = failed(borges(
        &broker,
        &["topic", "alter", "t", "--partitions", "2"],
        None,
    ));
    assert!(e.starts_with("error: Invalid"), "shrinking is refused: {e}");

    for args in [
        &[
            "topic",
            "alter",
            "missing",
            "--config",
            "retention.ms=1",
            "--if-exists",
        ][..],
        &[
            "topic",
            "alter",
            "missing",
            "--partitions",
            "3",
            "--if-exists",
        ],
        &["topic", "delete", "--topic", "missing", "--if-exists"],
    ] {
        assert_eq!(ok(borges(&broker, args, None)), "", "{args:?}");
    }
    let e = failed(borges(&broker, &["topic", "delete", "missing"], None));
    assert!(e.contains("UnknownTopicOrPartition"), "{e}");
    let e = usage_error(borges(&broker, &["topic", "alter", "t"], None));
    assert!(e.contains("nothing to alter"), "{e}");
    usage_error(borges(
        &broker,
        &["topic", "create", "a", "--topic", "b"],
        None,
    ));
    usage_error(borges(&broker, &["topic", "create"], None));

    // Every config with its source, as kafka-configs.sh --describe --all.
    ok(borges(
        &broker,
        &["topic", "alter", "t", "--config", "retention.ms=1000"],
        None,
    ));
    let all = ok(borges(
        &broker,
        &["topic", "describe", "t", "--all-configs"],
        None,
    ));
    let lines: Vec<&str> = all.lines().collect();
    assert_eq!(lines[0], "All configs for topic t are:");
    assert!(
        lines.contains(&"  retention.ms=1000 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:retention.ms=1000}"),
        "{all}"
    );
    assert!(
        lines.contains(&"  cleanup.policy=delete sensitive=false synonyms={DEFAULT_CONFIG:cleanup.policy=delete}"),
        "{all}"
    );
    assert!(
        lines.len() > 10,
        "every config, not only the topic's own: {all}"
    );
}

#[test]
fn topic_offsets_show_log_start_high_watermark_and_size() {
    let broker = BrokerProcess::start();
    ok(borges(
        &broker,
        &["topic", "create", "o", "--partitions", "2"],
        None,
    ));
    let lines: String = (0..5).map(|i| format!("v{i}\n")).collect();
    ok(borges(
        &broker,
        &["produce", "o", "--partition", "1"],
        Some(&lines),
    ));
    let table = ok(borges(&broker, &["topic", "offsets", "o"], None));
    let rows: Vec<Vec<&str>> = table
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(
        rows[0],
        [
            "TOPIC",
            "PARTITION",
            "LOG-START-OFFSET",
            "HIGH-WATERMARK",
            "SIZE-BYTES"
        ]
    );
    assert_eq!(&rows[1][..5], ["o", "0", "0", "0", "0"], "{table}");
    assert_eq!(&rows[2][..4], ["o", "1", "0", "5"], "{table}");
    let size: i64 = rows[2][4].parse().unwrap();
    assert!(
        size > 5 * 2,
        "five records take more than their values: {table}"
    );
    // kafka-get-offsets.sh lines with --time.
    assert_eq!(
        ok(borges(
            &broker,
            &["topic", "offsets", "o", "--time", "-1"],
            None
        )),
        "o:0:0\no:1:5\n"
    );
    assert_eq!(
        ok(borges(
            &broker,
            &[
                "topic",
                "offsets",
                "--topic",
                "o",
                "--time",
                "earliest",
                "--partitions",
                "1"
            ],
            None
        )),
        "o:1:0\n"
    );
    let doc = json(&ok(borges(
        &broker,
        &["topic", "offsets", "o", "--format", "json"],
        None,
    )));
    assert_eq!(doc[1]["high_watermark"], 5);
    assert_eq!(doc[1]["size_bytes"], size);
    usage_error(borges(
        &broker,
        &["topic", "offsets", "o", "--time", "soon"],
        None,
    ));
    usage_error(borges(
        &broker,
        &["topic", "offsets", "o", "--partitions", "7"],
        None,
    ));
}

#[test]
fn produce_and_consume_take_console_tool_properties() {
    let broker = BrokerProcess::start();
    ok(borges(
        &broker,
        &["topic", "create", "p", "--partitions", "1"],
        None,
    ));
    ok(borges(
        &broker,
        &[
            "produce",
            "--topic",
            "p",
            "--property",
            "parse.key=true",
            "--property",
            "key.separator=:",
            "--header",
            "src=test",
            "--header",
            "n=1",
        ],
        Some("k1:v1\nk2:v2\n"),
    ));
    ok(borges(&broker, &["produce", "p"], Some("no key\n")));
    let consume = |extra: &[&str]| {
        let mut args = vec!["consume", "p", "--from-beginning", "--max-messages", "3"];
        args.extend_from_slice(extra);
        ok(borges(&broker, &args, None))
    };
    assert_eq!(
        consume(&[
            "--property",
            "print.key=true",
            "--property",
            "print.headers=true",
            "--print-offset",
            "--key-separator",
            " | ",
        ]),
        "Offset:0 | src:test,n:1 | k1 | v1\nOffset:1 | src:test,n:1 | k2 | v2\nOffset:2 | NO_HEADERS | null | no key\n"
    );
    assert_eq!(
        consume(&["--print-key", "--no-value", "--null-literal", "-"]),
        "k1\nk2\n-\n"
    );
    assert_eq!(
        consume(&[
            "--property",
            "print.value=false",
            "--property",
            "print.partition=true"
        ]),
        "Partition:0\nPartition:0\nPartition:0\n"
    );
    let e = usage_error(borges(
        &broker,
        &["consume", "p", "--property", "print.colour=true"],
        None,
    ));
    assert!(e.contains("print.colour"), "{e}");
    let e = usage_error(borges(
        &broker,
        &["consume", "p", "--partition", "0", "--offset", "first"],
        None,
    ));
    assert!(e.contains("--offset"), "{e}");
    usage_error(borges(
        &broker,
        &["produce", "p", "--property", "parse.key=yes"],
        Some(""),
    ));
    usage_error(borges(
        &broker,
        &["produce", "p", "--delivery-timeout-ms", "0"],
        Some(""),
    ));
    usage_error(borges(
        &broker,
        &["consume", "p", "--group", "g", "--offset", "1"],
        None,
    ));
}

#[test]
fn lists_and_describes_speak_json() {
    let broker = BrokerProcess::start();
    ok(borges(
        &broker,
        &[
            "topic",
            "create",
            "j",
            "--partitions",
            "2",
            "--config",
            "retention.ms=5000",
        ],
        None,
    ));
    assert_eq!(
        json(&ok(borges(
            &broker,
            &["topic", "list", "--exclude-internal", "--format", "json"],
            None
        ))),
        serde_json::json!(["j"])
    );
    let doc = json(&ok(borges(
        &broker,
        &["topic", "describe", "j", "--format", "json"],
        None,
    )));
    assert_eq!(doc[0]["name"], "j");
    assert_eq!(doc[0]["partition_count"], 2);
    assert_eq!(doc[0]["partitions"][1]["partition"], 1);
    assert_eq!(doc[0]["topic_id"].as_str().map(str::len), Some(22));
    assert_eq!(
        doc[0]["configs"],
        serde_json::json!([{"name": "retention.ms", "value": "5000", "source": "DYNAMIC_TOPIC_CONFIG", "read_only": false}])
    );
    let all = json(&ok(borges(
        &broker,
        &[
            "topic",
            "describe",
            "j",
            "--all-configs",
            "--format",
            "json",
        ],
        None,
    )));
    assert!(all[0]["configs"].as_array().unwrap().len() > 10);
    ok(borges(
        &broker,
        &["produce", "j", "--partition", "0"],
        Some("a\nb\n"),
    ));
    ok(borges(
        &broker,
        &[
            "consume",
            "j",
            "--group",
            "jg",
            "--from-beginning",
            "--max-messages",
            "2",
        ],
        None,
    ));
    assert_eq!(
        json(&ok(borges(
            &broker,
            &["group", "list", "--format", "json"],
            None
        ))),
        serde_json::json!([{"group": "jg", "state": "Empty"}])
    );
    let doc = json(&ok(borges(
        &broker,
        &["group", "describe", "jg", "--format", "json"],
        None,
    )));
    assert_eq!(doc[0]["group"], "jg");
    assert_eq!(doc[0]["members"], 0);
    assert_eq!(doc[0]["partitions"][0]["current_offset"], 2);
    assert_eq!(doc[0]["partitions"][0]["lag"], 0);
    assert_eq!(doc[0]["partitions"][1]["current_offset"], 0);
    let state = json(&ok(borges(
        &broker,
        &["group", "describe", "jg", "--state", "--format", "json"],
        None,
    )));
    assert_eq!(state[0]["state"], "Empty");
    assert_eq!(state[0]["coordinator"]["node_id"], 0);
    let members = json(&ok(borges(
        &broker,
        &["group", "describe", "jg", "--members", "--format", "json"],
        None,
    )));
    assert_eq!(members[0]["members"], serde_json::json!([]));
}
