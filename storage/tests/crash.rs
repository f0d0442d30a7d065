//! A real writer process killed with SIGKILL in the middle of writing: every offset it
//! reported as acknowledged must be there after recovery, contiguous and intact.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use borges_storage::{Durability, LogConfig, ReadBound};
use common::*;

/// Runs the writer until it acknowledged at least `min_acked`, kills it, returns the last
/// acknowledged offset.
fn run_and_kill(dir: &std::path::Path, durability: &str, min_acked: i64) -> i64 {
    let mut child = Command::new(env!("CARGO_BIN_EXE_borges-storage-crash-writer"))
        .arg(dir.join("p-0"))
        .arg(durability)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("writer starts");
    let stdout = child.stdout.take().expect("piped");
    let mut last = -1;
    for line in BufReader::new(stdout).lines() {
        let line = line.expect("line");
        if let Some(v) = line.strip_prefix("acked ") {
            last = v.parse().expect("offset");
            if last >= min_acked {
                break;
            }
        }
    }
    child.kill().expect("SIGKILL");
    child.wait().expect("reaped");
    assert!(last >= min_acked, "writer stopped early at {last}");
    last
}

fn check_recovered(dir: &std::path::Path, durability: Durability, acked: i64) -> i64 {
    let root = dir.to_path_buf();
    run(move || async move {
        let dir = root.as_path();
        let core = core(dir, storage_config()).await;
        let config = LogConfig {
            segment_size_bytes: 256 * 1024,
            index_interval_bytes: 1024,
            durability,
            ..LogConfig::default()
        };
        let log = open(&core, &dir.join("p-0"), config).await;
        let end = log.offsets().log_end_offset;
        assert!(
            end > acked,
            "acknowledged offset {acked} lost: log ends at {end}"
        );
        let batches = read_all(&log, 0, ReadBound::HighWatermark).await;
        let records = values(&batches);
        assert_eq!(records.len() as i64, end, "offsets are contiguous from 0");
        for (i, (offset, _)) in records.iter().enumerate() {
            assert_eq!(*offset, i as i64);
        }
        assert_values_match_offsets(&batches);
        log.verify().await.expect("closed segments verify");
        log.close().await.unwrap();
        end
    })
}

#[test]
fn sigkill_mid_write_loses_no_acknowledged_record() {
    for (name, durability) in [
        ("fsync", Durability::Fsync),
        ("interval", Durability::Interval),
        ("none", Durability::None),
    ] {
        let dir = tempfile::tempdir().unwrap();
        // Two kills in a row: the second run starts from a recovered log.
        let acked = run_and_kill(dir.path(), name, 3_000);
        let end = check_recovered(dir.path(), durability, acked);
        let acked = run_and_kill(dir.path(), name, end + 2_000);
        check_recovered(dir.path(), durability, acked);
    }
}
