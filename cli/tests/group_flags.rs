//! kafka-consumer-groups.sh flags through the real binary: --all-groups, --members,
//! --state, reset-offsets scopes (--topic T:P,P, --all-topics) and targets (--to-current,
//! --by-duration) (issue 18, item 3).

mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use borges_testkit::BrokerProcess;
use common::{borges, json, ok, run, run_with_input, usage_error};

/// A child process killed when dropped (a failing test leaves no member behind).
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn committed(broker: &BrokerProcess, group: &str) -> Vec<(String, i64, i64)> {
    let doc = json(&ok(borges(
        broker,
        &["group", "describe", group, "--format", "json"],
        None,
    )));
    doc[0]["partitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["topic"].as_str().unwrap().to_string(),
                p["partition"].as_i64().unwrap(),
                p["current_offset"].as_i64().unwrap_or(-1),
            )
        })
        .collect()
}

/// Two groups, g1 reading topic a and g2 reading b (2 partitions, 4 records each), every
/// record read.
fn two_groups() -> BrokerProcess {
    let broker = BrokerProcess::start();
    for t in ["a", "b"] {
        ok(run(&broker, &format!("topic create {t} --partitions 2")));
        let lines: String = (0..4).map(|i| format!("{t}{i}\n")).collect();
        for p in [0, 1] {
            ok(run_with_input(
                &broker,
                &format!("produce {t} --partition {p}"),
                &lines,
            ));
        }
    }
    for (group, topic) in [("g1", "a"), ("g2", "b")] {
        let line = format!("consume {topic} --group {group} --from-beginning --max-messages 8");
        ok(run(&broker, &line));
    }
    broker
}

#[test]
fn groups_are_listed_and_described_as_kafka_consumer_groups_does() {
    let broker = two_groups();
    assert_eq!(
        ok(run(&broker, "group list --state")),
        "GROUP STATE\ng1    Empty\ng2    Empty\n"
    );
    let all = ok(run(&broker, "group describe --all-groups"));
    let tables = all.matches("has no active members").count();
    assert_eq!(tables, 2, "one table per group: {all}");
    let state = ok(run(&broker, "group describe --group g1 --state"));
    let row: Vec<&str> = state.lines().nth(2).unwrap().split_whitespace().collect();
    assert_eq!(row[0], "g1");
    assert_eq!(&row[2..], ["(0)", "uniform", "Empty", "0"], "{state}");
    assert_eq!(
        ok(run(&broker, "group delete --all-groups")),
        "Deletion of requested consumer groups ('g1', 'g2') was successful.\n"
    );
}

#[test]
fn reset_offsets_takes_partitions_all_topics_all_groups_current_and_durations() {
    let broker = two_groups();
    // Only partition 0 of a moves; b is not g1's business.
    ok(run(
        &broker,
        "group reset-offsets g1 --topic a:0 --to-offset 1 --execute",
    ));
    let moved = [("a".into(), 0, 1), ("a".into(), 1, 4)];
    assert_eq!(committed(&broker, "g1"), moved);
    // --to-current is the committed offsets; a dry run over --all-topics prints them.
    let current = ok(run(
        &broker,
        "group reset-offsets g1 --all-topics --to-current",
    ));
    let rows: Vec<Vec<&str>> = current
        .lines()
        .skip(2)
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(rows, [["g1", "a", "0", "1"], ["g1", "a", "1", "4"]]);
    // Every record is younger than an hour: --by-duration PT1H goes back to the start.
    ok(run(
        &broker,
        "group reset-offsets --all-groups --all-topics --by-duration PT1H --execute",
    ));
    for group in ["g1", "g2"] {
        let offsets = committed(&broker, group);
        assert!(
            offsets.iter().all(|(_, _, o)| *o == 0),
            "{group}: {offsets:?}"
        );
    }
    usage_error(run(
        &broker,
        "group reset-offsets g1 --topic a:9 --to-latest",
    ));
}

/// Polls `group describe G --members --verbose` until it shows `wanted` (an error until the
/// member joined; the guard bounds the wait).
fn wait_for_members(broker: &BrokerProcess, group: &str, wanted: &str) -> String {
    let guard = Instant::now() + Duration::from_secs(60);
    loop {
        let output = run(
            broker,
            &format!("group describe {group} --members --verbose"),
        );
        let text = String::from_utf8_lossy(&output.stdout).into_owned();
        if text.contains(wanted) || Instant::now() > guard {
            return text;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn members_are_listed_with_their_assignment() {
    let broker = BrokerProcess::start();
    ok(run(&broker, "topic create m --partitions 2"));
    let member = Command::new(env!("CARGO_BIN_EXE_borges"))
        .args(["--bootstrap", &broker.bootstrap()])
        .args(["consume", "m", "--group", "live"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Killed when the test fails before its own SIGINT.
    let mut member = KillOnDrop(member);
    let described = wait_for_members(&broker, "live", "m(0,1)");
    let lines: Vec<Vec<&str>> = described
        .lines()
        .skip(1)
        .map(|l| l.split_whitespace().collect())
        .collect();
    let header = [
        "GROUP",
        "CONSUMER-ID",
        "HOST",
        "CLIENT-ID",
        "#PARTITIONS",
        "ASSIGNMENT",
    ];
    assert_eq!(lines[0], header);
    assert_eq!(lines[1][0], "live");
    assert!(lines[1][1].starts_with("borges-cli-"), "{described}");
    assert_eq!(&lines[1][3..], ["borges-cli", "2", "m(0,1)"], "{described}");
    let plain = ok(run(&broker, "group describe live --members"));
    assert!(!plain.contains("ASSIGNMENT"), "{plain}");
    let state = ok(run(&broker, "group describe live --state"));
    let row = state.lines().nth(2).unwrap();
    assert!(row.ends_with(" Stable          1"), "{state}");
    // SIGINT: the member commits, leaves and exits 0.
    // SAFETY: signalling our own child.
    unsafe { libc::kill(member.0.id() as i32, libc::SIGINT) };
    let status = member.0.wait().unwrap();
    assert!(status.success(), "{status}");
}
