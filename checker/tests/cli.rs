//! The `borges-checker` binary as the fault-suite script calls it: a history recorded by a
//! driver, fault events appended by the CLI from another process, copies of two brokers' data
//! directories with real segment files.

use std::path::Path;
use std::process::{Command, Output};

use borges_checker::{ConsumerMode, Recorder};
use borges_protocol::batch::{
    set_base_offset, set_partition_leader_epoch, BatchBuilder, BatchOptions,
};

const CHECKER: &str = env!("CARGO_BIN_EXE_borges-checker");

fn checker(args: &[&str]) -> Output {
    Command::new(CHECKER)
        .args(args)
        .output()
        .expect("run borges-checker")
}

fn fault(history: &Path, args: &[&str]) {
    let mut all = vec!["fault", "--history", history.to_str().expect("utf-8 path")];
    all.extend_from_slice(args);
    let out = checker(&all);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Records a run of five acknowledged writes to partition 0 with a fault in the middle.
fn record(dir: &Path) -> Vec<u64> {
    let history = dir.join("run.jsonl");
    let faults = dir.join("faults.jsonl");
    let recorder = Recorder::create(&history, 1).expect("recorder");
    recorder.header("jepsen");
    let producer = recorder.process();
    let values: Vec<u64> = (0..5).map(|_| recorder.value()).collect();
    for (offset, &value) in values.iter().enumerate() {
        if offset == 2 {
            fault(
                &faults,
                &[
                    "start",
                    "--id",
                    "k1",
                    "--fault",
                    "kill-leader",
                    "--target",
                    "node 1",
                    "--partitions",
                    "0",
                ],
            );
        }
        recorder.send(producer, 0, value).ok(offset as i64);
        if offset == 3 {
            fault(&faults, &["end", "--id", "k1"]);
        }
    }
    let consumer = recorder.process();
    recorder.assign(consumer, ConsumerMode::Assign, &[0]);
    recorder.seek(consumer, 0, Some(0));
    let records: Vec<(i32, i64, u64)> = values
        .iter()
        .enumerate()
        .map(|(o, &v)| (0, o as i64, v))
        .collect();
    recorder.poll(consumer, &records);
    let reader = recorder.process();
    let finals: Vec<(i64, u64)> = records.iter().map(|&(_, o, v)| (o, v)).collect();
    recorder.final_read(reader, 0, &finals);
    recorder.final_end(reader, 0, 0, 5);
    recorder.flush().expect("flush");
    values
}

fn write_replica(data_dir: &Path, values: &[u64]) {
    let partition = data_dir.join("jepsen-0");
    std::fs::create_dir_all(&partition).expect("mkdir");
    let mut bytes = Vec::new();
    for (offset, chunk) in values.chunks(2).enumerate() {
        let mut builder = BatchBuilder::new(BatchOptions::default(), 256);
        for value in chunk {
            builder.push(
                0,
                None,
                Some(&borges_checker::history::value_bytes(*value)),
                &[],
            );
        }
        let mut batch = builder.build().expect("batch").to_vec();
        set_base_offset(&mut batch, offset as i64 * 2);
        set_partition_leader_epoch(&mut batch, 1);
        bytes.extend_from_slice(&batch);
    }
    bytes.extend(std::iter::repeat_n(0u8, 1024));
    std::fs::write(partition.join(format!("{:020}.log", 0)), bytes).expect("segment");
}

fn check(dir: &Path) -> Output {
    let arg = |name: &str| dir.join(name).to_str().expect("utf-8").to_string();
    let (history, faults) = (arg("run.jsonl"), arg("faults.jsonl"));
    let (one, two) = (
        format!("1={}", arg("node-1")),
        format!("2={}", arg("node-2")),
    );
    checker(&[
        "check",
        "--history",
        &history,
        "--history",
        &faults,
        "--replica",
        &one,
        "--replica",
        &two,
    ])
}

fn last_line(out: &Output) -> String {
    let stdout = String::from_utf8_lossy(&out.stdout);
    stdout.lines().last().unwrap_or("").to_string()
}

#[test]
fn a_clean_run_prints_the_summary_last_and_exits_zero() {
    let dir = tempfile::tempdir().expect("tempdir");
    let values = record(dir.path());
    write_replica(&dir.path().join("node-1"), &values);
    write_replica(&dir.path().join("node-2"), &values);
    let out = check(dir.path());
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("fault k1 kill-leader target 'node 1'"),
        "{stdout}"
    );
    let summary = last_line(&out);
    assert!(summary.starts_with("anomalies=0 acked=5 lost=0 duplicates=0 inconsistent=0 skips=0 divergent_replicas=0 failover_ms_max="), "{summary}");
}

#[test]
fn a_corrupt_replica_is_an_anomaly_and_exits_one() {
    let dir = tempfile::tempdir().expect("tempdir");
    let values = record(dir.path());
    write_replica(&dir.path().join("node-1"), &values);
    write_replica(&dir.path().join("node-2"), &values);
    let segment = dir
        .path()
        .join("node-2/jepsen-0")
        .join(format!("{:020}.log", 0));
    let mut bytes = std::fs::read(&segment).expect("read");
    bytes[70] ^= 0xff; // inside the first batch's records: its CRC no longer matches
    std::fs::write(&segment, bytes).expect("write");
    let out = check(dir.path());
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(
        stdout.contains("anomaly replica_divergence: jepsen-0 node 2 vs node 1"),
        "{stdout}"
    );
    assert!(last_line(&out).starts_with(
        "anomalies=1 acked=5 lost=0 duplicates=0 inconsistent=0 skips=0 divergent_replicas=1 "
    ));
}

#[test]
fn an_unreadable_history_exits_two() {
    let dir = tempfile::tempdir().expect("tempdir");
    let history = dir.path().join("bad.jsonl");
    std::fs::write(&history, "{not json}\n{}\n").expect("write");
    let out = checker(&["check", "--history", history.to_str().expect("utf-8")]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("bad.jsonl:1"));
}
