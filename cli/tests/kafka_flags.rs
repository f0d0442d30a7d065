//! Kafka muscle memory through the real binary: Kafka's flag names beside ours, the tools'
//! output formats, `--format json`, and exit code 2 for usage errors (issue 18, item 3).

mod common;

use std::process::Command;

use borges_testkit::BrokerProcess;
use common::{borges, failed, json, ok, run, run_with_input, usage_error};

#[test]
fn topics_are_created_altered_and_deleted_with_kafka_topics_flags() {
    let broker = BrokerProcess::start();
    // --bootstrap-server and --topic, as kafka-topics.sh takes them.
    let created = Command::new(env!("CARGO_BIN_EXE_borges"))
        .args(["--bootstrap-server", &broker.bootstrap(), "topic", "create"])
        .args(["--topic", "t", "--partitions", "2"])
        .output()
        .unwrap();
    assert_eq!(ok(created), "Created topic t.\n");
    assert_eq!(ok(run(&broker, "topic create t --if-not-exists")), "");
    let e = failed(run(&broker, "topic create t"));
    assert!(e.contains("TopicAlreadyExists"), "{e}");

    let grown = ok(run(&broker, "topic alter t --partitions 4"));
    assert_eq!(grown, "Topic t now has 4 partitions.\n");
    let described = ok(run(&broker, "topic describe --topic t"));
    assert!(described.contains("\tPartitionCount: 4\t"), "{described}");
    assert_eq!(described.lines().count(), 5, "{described}");
    let e = failed(run(&broker, "topic alter t --partitions 2"));
    assert!(e.starts_with("error: Invalid"), "shrinking is refused: {e}");

    for line in [
        "topic alter missing --config retention.ms=1 --if-exists",
        "topic alter missing --partitions 3 --if-exists",
        "topic delete --topic missing --if-exists",
    ] {
        assert_eq!(ok(run(&broker, line)), "", "{line}");
    }
    let e = failed(run(&broker, "topic delete missing"));
    assert!(e.contains("UnknownTopicOrPartition"), "{e}");
    let e = usage_error(run(&broker, "topic alter t"));
    assert!(e.contains("nothing to alter"), "{e}");
    usage_error(run(&broker, "topic create a --topic b"));
    usage_error(run(&broker, "topic create"));
}

#[test]
fn all_configs_lists_every_config_with_its_source() {
    let broker = BrokerProcess::start();
    ok(run(&broker, "topic create t --config retention.ms=1000"));
    // As kafka-configs.sh --describe --all.
    let all = ok(run(&broker, "topic describe t --all-configs"));
    let lines: Vec<&str> = all.lines().collect();
    assert_eq!(lines[0], "All configs for topic t are:");
    let own =
        "  retention.ms=1000 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:retention.ms=1000}";
    assert!(lines.contains(&own), "{all}");
    let default = concat!(
        "  cleanup.policy=delete sensitive=false ",
        "synonyms={DEFAULT_CONFIG:cleanup.policy=delete}"
    );
    assert!(lines.contains(&default), "{all}");
    assert!(
        lines.len() > 10,
        "every config, not only the topic's own: {all}"
    );
}

#[test]
fn topic_offsets_show_log_start_high_watermark_and_size() {
    let broker = BrokerProcess::start();
    ok(run(&broker, "topic create o --partitions 2"));
    let lines: String = (0..5).map(|i| format!("v{i}\n")).collect();
    ok(run_with_input(&broker, "produce o --partition 1", &lines));
    let table = ok(run(&broker, "topic offsets o"));
    let rows: Vec<Vec<&str>> = table
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    let header = [
        "TOPIC",
        "PARTITION",
        "LOG-START-OFFSET",
        "HIGH-WATERMARK",
        "SIZE-BYTES",
    ];
    assert_eq!(rows[0], header);
    assert_eq!(&rows[1][..5], ["o", "0", "0", "0", "0"], "{table}");
    assert_eq!(&rows[2][..4], ["o", "1", "0", "5"], "{table}");
    let size: i64 = rows[2][4].parse().unwrap();
    assert!(
        size > 5 * 2,
        "five records take more than their values: {table}"
    );
    // kafka-get-offsets.sh lines with --time.
    assert_eq!(
        ok(run(&broker, "topic offsets o --time -1")),
        "o:0:0\no:1:5\n"
    );
    let earliest = ok(run(
        &broker,
        "topic offsets --topic o --time earliest --partitions 1",
    ));
    assert_eq!(earliest, "o:1:0\n");
    let doc = json(&ok(run(&broker, "topic offsets o --format json")));
    assert_eq!(doc[1]["high_watermark"], 5);
    assert_eq!(doc[1]["size_bytes"], size);
    usage_error(run(&broker, "topic offsets o --time soon"));
    usage_error(run(&broker, "topic offsets o --partitions 7"));
}

#[test]
fn produce_and_consume_take_console_tool_properties() {
    let broker = BrokerProcess::start();
    ok(run(&broker, "topic create p --partitions 1"));
    let keyed = "produce --topic p --property parse.key=true --property key.separator=: \
                 --header src=test --header n=1";
    ok(run_with_input(&broker, keyed, "k1:v1\nk2:v2\n"));
    ok(run_with_input(&broker, "produce p", "no key\n"));
    let consume = |extra: &[&str]| {
        let mut args = vec!["consume", "p", "--from-beginning", "--max-messages", "3"];
        args.extend_from_slice(extra);
        ok(borges(&broker, &args, None))
    };
    let properties = [
        "--property",
        "print.key=true",
        "--property",
        "print.headers=true",
    ];
    let separated = ["--print-offset", "--key-separator", " | "];
    assert_eq!(
        consume(&[&properties[..], &separated[..]].concat()),
        concat!(
            "Offset:0 | src:test,n:1 | k1 | v1\n",
            "Offset:1 | src:test,n:1 | k2 | v2\n",
            "Offset:2 | NO_HEADERS | null | no key\n"
        )
    );
    let no_value = consume(&["--print-key", "--no-value", "--null-literal", "-"]);
    assert_eq!(no_value, "k1\nk2\n-\n");
    let partitions_only = [
        "--property",
        "print.value=false",
        "--property",
        "print.partition=true",
    ];
    assert_eq!(consume(&partitions_only), "Partition:0\n".repeat(3));
}

#[test]
fn console_tool_mistakes_are_usage_errors() {
    let broker = BrokerProcess::start();
    ok(run(&broker, "topic create p"));
    let e = usage_error(run(&broker, "consume p --property print.colour=true"));
    assert!(e.contains("print.colour"), "{e}");
    let e = usage_error(run(&broker, "consume p --partition 0 --offset first"));
    assert!(e.contains("--offset"), "{e}");
    usage_error(run_with_input(
        &broker,
        "produce p --property parse.key=yes",
        "",
    ));
    usage_error(run_with_input(
        &broker,
        "produce p --delivery-timeout-ms 0",
        "",
    ));
    usage_error(run(&broker, "consume p --group g --offset 1"));
    usage_error(run(&broker, "consume p --unknown-flag"));
}

#[test]
fn topic_lists_and_descriptions_speak_json() {
    let broker = BrokerProcess::start();
    ok(run(
        &broker,
        "topic create j --partitions 2 --config retention.ms=5000",
    ));
    let names = json(&ok(run(
        &broker,
        "topic list --exclude-internal --format json",
    )));
    assert_eq!(names, serde_json::json!(["j"]));
    let doc = json(&ok(run(&broker, "topic describe j --format json")));
    assert_eq!(doc[0]["name"], "j");
    assert_eq!(doc[0]["partition_count"], 2);
    assert_eq!(doc[0]["partitions"][1]["partition"], 1);
    assert_eq!(doc[0]["topic_id"].as_str().map(str::len), Some(22));
    let own = serde_json::json!([{"name": "retention.ms", "value": "5000",
        "source": "DYNAMIC_TOPIC_CONFIG", "read_only": false}]);
    assert_eq!(doc[0]["configs"], own);
    let all = json(&ok(run(
        &broker,
        "topic describe j --all-configs --format json",
    )));
    assert!(all[0]["configs"].as_array().unwrap().len() > 10);
}

#[test]
fn groups_speak_json() {
    let broker = BrokerProcess::start();
    ok(run(&broker, "topic create j --partitions 2"));
    ok(run_with_input(&broker, "produce j --partition 0", "a\nb\n"));
    ok(run(
        &broker,
        "consume j --group jg --from-beginning --max-messages 2",
    ));
    let groups = json(&ok(run(&broker, "group list --format json")));
    assert_eq!(
        groups,
        serde_json::json!([{"group": "jg", "state": "Empty"}])
    );
    let doc = json(&ok(run(&broker, "group describe jg --format json")));
    assert_eq!(doc[0]["group"], "jg");
    assert_eq!(doc[0]["members"], 0);
    assert_eq!(doc[0]["partitions"][0]["current_offset"], 2);
    assert_eq!(doc[0]["partitions"][0]["lag"], 0);
    assert_eq!(doc[0]["partitions"][1]["current_offset"], 0);
    let state = json(&ok(run(&broker, "group describe jg --state --format json")));
    assert_eq!(state[0]["state"], "Empty");
    assert_eq!(state[0]["coordinator"]["node_id"], 0);
    let members = json(&ok(run(
        &broker,
        "group describe jg --members --format json",
    )));
    assert_eq!(members[0]["members"], serde_json::json!([]));
    let reset = json(&ok(run(
        &broker,
        "group reset-offsets jg --topic j:0 --to-earliest --format json",
    )));
    let row = serde_json::json!([{"group": "jg", "topic": "j", "partition": 0, "new_offset": 0}]);
    assert_eq!(reset, row);
}
