//! kafka-consumer-groups.sh flags through the real binary: --all-groups, --members,
//! --state, reset-offsets scopes (--topic T:P,P, --all-topics) and targets (--to-current,
//! --by-duration) (issue 18, item 3).

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use borges_testkit::BrokerProcess;
use common::{borges, json, ok, usage_error};

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

#[test]
fn groups_are_described_and_reset_as_kafka_consumer_groups_does() {
    let broker = BrokerProcess::start();
    for t in ["a", "b"] {
        ok(borges(
            &broker,
            &["topic", "create", t, "--partitions", "2"],
            None,
        ));
        let lines: String = (0..4).map(|i| format!("{t}{i}\n")).collect();
        ok(borges(
            &broker,
            &["produce", t, "--partition", "0"],
            Some(&lines),
        ));
        ok(borges(
            &broker,
            &["produce", t, "--partition", "1"],
            Some(&lines),
        ));
    }
    for (group, topic) in [("g1", "a"), ("g2", "b")] {
        ok(borges(
            &broker,
            &[
                "consume",
                topic,
                "--group",
                group,
                "--from-beginning",
                "--max-messages",
                "8",
            ],
            None,
        ));
    }
    assert_eq!(
        ok(borges(&broker, &["group", "list", "--state"], None)),
        "GROUP STATE\ng1    Empty\ng2    Empty\n"
    );
    let all = ok(borges(
        &broker,
        &["group", "describe", "--all-groups"],
        None,
    ));
    assert_eq!(
        all.matches("has no active members").count(),
        2,
        "one table per group: {all}"
    );
    let state = ok(borges(
        &broker,
        &["group", "describe", "--group", "g1", "--state"],
        None,
    ));
    let row: Vec<&str> = state.lines().nth(2).unwrap().split_whitespace().collect();
    assert_eq!(row[0], "g1");
    assert_eq!(&row[2..], ["(0)", "uniform", "Empty", "0"], "{state}");

    // Only partition 0 of a moves; b is not g1's business.
    ok(borges(
        &broker,
        &[
            "group",
            "reset-offsets",
            "g1",
            "--topic",
            "a:0",
            "--to-offset",
            "1",
            "--execute",
        ],
        None,
    ));
    assert_eq!(
        committed(&broker, "g1"),
        [("a".into(), 0, 1), ("a".into(), 1, 4)]
    );
    // --to-current is the committed offsets; a dry run over --all-topics prints them.
    let current = ok(borges(
        &broker,
        &[
            "group",
            "reset-offsets",
            "g1",
            "--all-topics",
            "--to-current",
        ],
        None,
    ));
    let rows: Vec<Vec<&str>> = current
        .lines()
        .skip(2)
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(rows, [["g1", "a", "0", "1"], ["g1", "a", "1", "4"]]);
    // Every record is younger than an hour: --by-duration PT1H goes back to the start.
    ok(borges(
        &broker,
        &[
            "group",
            "reset-offsets",
            "--all-groups",
            "--all-topics",
            "--by-duration",
            "PT1H",
            "--execute",
        ],
        None,
    ));
    for group in ["g1", "g2"] {
        assert!(
            committed(&broker, group).iter().all(|(_, _, o)| *o == 0),
            "{group}: {:?}",
            committed(&broker, group)
        );
    }
    usage_error(borges(
        &broker,
        &[
            "group",
            "reset-offsets",
            "g1",
            "--topic",
            "a:9",
            "--to-latest",
        ],
        None,
    ));
    assert_eq!(
        ok(borges(&broker, &["group", "delete", "--all-groups"], None)),
        "Deletion of requested consumer groups ('g1', 'g2') was successful.\n"
    );
}

#[test]
fn members_are_listed_with_their_assignment() {
    let broker = BrokerProcess::start();
    ok(borges(
        &broker,
        &["topic", "create", "m", "--partitions", "2"],
        None,
    ));
    let member = Command::new(env!("CARGO_BIN_EXE_borges"))
        .args([
            "--bootstrap",
            &broker.bootstrap(),
            "consume",
            "m",
            "--group",
            "live",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Killed when the test fails before its own SIGINT.
    let mut member = KillOnDrop(member);
    let guard = Instant::now() + Duration::from_secs(60);
    let described = loop {
        // An error until the member joined.
        let output = borges(
            &broker,
            &["group", "describe", "live", "--members", "--verbose"],
            None,
        );
        let text = String::from_utf8_lossy(&output.stdout).into_owned();
        if text.contains("m(0,1)") || Instant::now() > guard {
            break text;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let lines: Vec<Vec<&str>> = described
        .lines()
        .skip(1)
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(
        lines[0],
        [
            "GROUP",
            "CONSUMER-ID",
            "HOST",
            "CLIENT-ID",
            "#PARTITIONS",
            "ASSIGNMENT"
        ]
    );
    assert_eq!(lines[1][0], "live");
    assert!(lines[1][1].starts_with("borges-cli-"), "{described}");
    assert_eq!(&lines[1][3..], ["borges-cli", "2", "m(0,1)"], "{described}");
    let plain = ok(borges(
        &broker,
        &["group", "describe", "live", "--members"],
        None,
    ));
    assert!(!plain.contains("ASSIGNMENT"), "{plain}");
    let state = ok(borges(
        &broker,
        &["group", "describe", "live", "--state"],
        None,
    ));
    assert!(
        state
            .lines()
            .nth(2)
            .unwrap()
            .ends_with(" Stable          1"),
        "{state}"
    );
    // SIGINT: the member commits, leaves and exits 0.
    // SAFETY: signalling our own child.
    unsafe { libc::kill(member.0.id() as i32, libc::SIGINT) };
    let status = member.0.wait().unwrap();
    assert!(status.success(), "{status}");
    let mut out = String::new();
    if let Some(stdout) = member.0.stdout.take() {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            out.push_str(&line);
        }
    }
    assert_eq!(out, "");
}
