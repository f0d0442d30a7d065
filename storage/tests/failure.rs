//! Resource exhaustion and failures of the log directory.
//!
//! - A full disk (a real one: a small tmpfs and a loop-mounted ext4) makes the directory
//!   read-only, not failed: appends are refused with `DiskFull`, acknowledged data reads back,
//!   and once space is freed writes resume by themselves, without reopening anything.
//! - The free-space probe refuses appends early below `disk_free_bytes_min` (faulty disk with a
//!   free-space model).
//! - Running out of descriptors (`EMFILE`, or the core's storage budget) is transient: the one
//!   operation fails with `TooManyOpenFiles` or is retried; the directory never fails.
//! - A real I/O error, or `ENOSPC` from an fdatasync, still takes the directory offline.
//!
//! The mounted tests need root and `mount`; where they cannot mount they print
//! `SKIPPED: <reason>` and pass, unless `BORGES_REQUIRE_MOUNT=1`, which makes that a failure
//! (CI sets it).

mod common;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use borges_runtime::fault::{Fault, FaultOp, FaultRule};
use borges_runtime::fs::Disk;
use borges_runtime::time::Clock;
use borges_storage::{
    AckLevel, DiskState, Durability, StorageConfig, StorageError, DISK_FREE_RESUME_MARGIN_BYTES,
};
use common::*;

const REQUIRE_MOUNT: &str = "BORGES_REQUIRE_MOUNT";

/// Prints why a test is skipped, or fails it when `BORGES_REQUIRE_MOUNT=1`.
fn skip(reason: &str) {
    if std::env::var(REQUIRE_MOUNT).is_ok_and(|v| v == "1") {
        panic!("{reason} ({REQUIRE_MOUNT}=1: the prerequisite must exist)");
    }
    // Past the harness's output capture, so that a passing run shows the skip.
    let thread = std::thread::current();
    let mut out = std::io::stdout().lock();
    let _ = writeln!(
        out,
        "SKIPPED: {}: {reason} (set {REQUIRE_MOUNT}=1 to make this a failure)",
        thread.name().unwrap_or("test")
    );
}

/// A mounted small file system, unmounted on drop.
struct Mount {
    path: PathBuf,
    _dir: tempfile::TempDir,
}

impl Drop for Mount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.path).status();
    }
}

#[derive(Clone, Copy, Debug)]
enum SmallFs {
    Tmpfs,
    Ext4,
}

fn run_ok(cmd: &mut Command) -> Result<(), String> {
    match cmd.output() {
        Ok(o) if o.status.success() => Ok(()),
        Ok(o) => Err(format!(
            "{cmd:?}: {}",
            String::from_utf8_lossy(&o.stderr).trim()
        )),
        Err(e) => Err(format!("{cmd:?}: {e}")),
    }
}

/// Mounts a small `kind` file system of `size_mib` MiB, or says why not.
fn mount_small(kind: SmallFs, size_mib: u64) -> Result<Mount, String> {
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let path = dir.path().join("mnt");
    std::fs::create_dir(&path).map_err(|e| e.to_string())?;
    match kind {
        SmallFs::Tmpfs => run_ok(
            Command::new("mount")
                .args(["-t", "tmpfs", "-o", &format!("size={size_mib}m"), "tmpfs"])
                .arg(&path),
        )?,
        SmallFs::Ext4 => {
            let image = dir.path().join("ext4.img");
            let file = std::fs::File::create(&image).map_err(|e| e.to_string())?;
            file.set_len(size_mib << 20).map_err(|e| e.to_string())?;
            run_ok(
                Command::new("mkfs.ext4")
                    .args(["-q", "-F", "-m", "0"])
                    .arg(&image),
            )?;
            run_ok(
                Command::new("mount")
                    .args(["-o", "loop"])
                    .arg(&image)
                    .arg(&path),
            )?;
        }
    }
    Ok(Mount { path, _dir: dir })
}

/// Writes a file until the file system is full; returns its path.
fn fill(dir: &Path) -> PathBuf {
    let path = dir.join("filler");
    let mut f = std::fs::File::create(&path).expect("create filler");
    let chunk = vec![7u8; 64 * 1024];
    loop {
        match f.write(&chunk) {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) if e.raw_os_error() == Some(libc::ENOSPC) => break,
            Err(e) => panic!("filling: {e}"),
        }
    }
    let _ = f.sync_all();
    path
}

fn probing_config(disk_free_bytes_min: u64) -> StorageConfig {
    StorageConfig {
        disk_free_bytes_min,
        disk_probe_interval_ms: 10,
        ..storage_config()
    }
}

/// Waits (real time, at most 30 s) until `done` holds.
async fn wait_until(what: &str, done: impl Fn() -> bool) {
    for _ in 0..3_000 {
        if done() {
            return;
        }
        borges_runtime::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("not reached in 30 s: {what}");
}

/// `future`, or a panic after 30 s (real time) instead of a hung test.
async fn within_30_s<T>(future: impl std::future::Future<Output = T>) -> T {
    match borges_runtime::time::timeout(Duration::from_secs(30), future).await {
        Some(t) => t,
        None => panic!("not done in 30 s"),
    }
}

/// On a real full disk: read-only, reads go on, writes resume once space is freed.
fn full_disk_is_read_only_until_space_is_freed(kind: SmallFs, size_mib: u64) {
    let mount = match mount_small(kind, size_mib) {
        Ok(m) => m,
        Err(reason) => return skip(&format!("cannot mount a {kind:?}: {reason}")),
    };
    let mnt = mount.path.clone();
    run(move || async move {
        // No early refusal: the flusher's own ENOSPC turns the directory read-only.
        let core = core(&mnt, probing_config(0)).await;
        let log = open(&core, &mnt.join("a-0"), small_config(Durability::Fsync)).await;
        let mut acked = Vec::new();
        for i in 0..10 {
            let info = log.append(vec![batch(i, 1, 0, 1000)], 0).unwrap();
            log.wait_acked(info.last_offset, AckLevel::All)
                .await
                .unwrap();
            acked.push(info.last_offset);
        }
        let acked_bytes = log_bytes(&log).await;
        let filler = fill(&mnt);
        // More than the segment has pre-allocated: a write round runs out of space.
        let mut pending = Vec::new();
        for i in 10..40 {
            match log.append(vec![batch(i, 1, 0, 100_000)], 0) {
                Ok(info) => pending.push(info.last_offset),
                Err(e) => panic!("appends before the disk is seen full are taken: {e}"),
            }
        }
        wait_until("read-only after ENOSPC", || core.is_read_only()).await;
        assert!(!core.is_failed(), "a full disk is not a failed one");
        assert!(matches!(
            core.disk_state(),
            DiskState::ReadOnly {
                out_of_space: true,
                ..
            }
        ));
        let err = log.append(vec![batch(99, 1, 0, 10)], 0).unwrap_err();
        assert!(matches!(err, StorageError::DiskFull { .. }), "{err}");
        let hw = log.offsets().high_watermark;
        let visible: Vec<u8> = read_all(&log, 0, borges_storage::ReadBound::HighWatermark)
            .await
            .iter()
            .flat_map(|b| b.as_bytes().to_vec())
            .collect();
        assert!(
            hw >= 10 && visible.starts_with(&acked_bytes),
            "acknowledged data reads back"
        );
        std::fs::remove_file(&filler).unwrap();
        wait_until("writable once space is back", || !core.is_read_only()).await;
        let last = *pending.last().expect("pending appends");
        within_30_s(log.wait_acked(last, AckLevel::All))
            .await
            .unwrap();
        let info = log.append(vec![batch(40, 1, 0, 10)], 0).unwrap();
        within_30_s(log.wait_acked(info.last_offset, AckLevel::All))
            .await
            .unwrap();
        assert_eq!(core.disk_state(), DiskState::Writable);
        assert_values_match_offsets(
            &read_all(&log, 0, borges_storage::ReadBound::HighWatermark).await,
        );
        log.close().await.unwrap();
    });
    drop(mount);
}

#[test]
fn a_full_tmpfs_makes_the_directory_read_only_and_writes_resume_when_space_is_freed() {
    full_disk_is_read_only_until_space_is_freed(SmallFs::Tmpfs, 16);
}

#[test]
fn a_full_ext4_makes_the_directory_read_only_and_writes_resume_when_space_is_freed() {
    full_disk_is_read_only_until_space_is_freed(SmallFs::Ext4, 32);
}

#[test]
fn appends_are_refused_below_the_free_space_minimum_and_resume_above_it() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().to_path_buf();
    run(move || async move {
        let faulty = borges_runtime::fault::FaultyDisk::new();
        let min = 8 << 20;
        faulty.set_free_bytes(Some(64 << 20));
        let (clock, time) = Clock::manual(1_700_000_000_000);
        let config = StorageConfig {
            disk_probe_interval_ms: 1_000,
            ..probing_config(min)
        };
        let core = core_on(&root, config, Disk::Faulty(faulty.clone()), clock).await;
        let log = open(&core, &root.join("p-0"), small_config(Durability::Fsync)).await;
        let info = log.append(vec![batch(0, 1, 0, 100)], 0).unwrap();
        log.wait_acked(info.last_offset, AckLevel::All)
            .await
            .unwrap();
        faulty.set_free_bytes(Some(min - 1));
        assert_eq!(
            core.disk_state(),
            DiskState::Writable,
            "until the next probe"
        );
        time.advance(Duration::from_millis(1_000));
        wait_until("the probe turns the directory read-only", || {
            core.is_read_only()
        })
        .await;
        assert_eq!(
            core.disk_state(),
            DiskState::ReadOnly {
                out_of_space: false,
                free_bytes: Some(min - 1)
            }
        );
        let err = log.append(vec![batch(1, 1, 0, 100)], 0).unwrap_err();
        assert!(
            matches!(err, StorageError::DiskFull { free_bytes_min, .. } if free_bytes_min == min)
        );
        assert!(matches!(
            log.truncate_to(0).await,
            Err(StorageError::DiskFull { .. })
        ));
        faulty.set_free_bytes(Some(min + DISK_FREE_RESUME_MARGIN_BYTES - 1));
        assert!(
            core.probe_disk() != DiskState::Writable,
            "not above the resume margin"
        );
        faulty.set_free_bytes(Some(min + DISK_FREE_RESUME_MARGIN_BYTES));
        time.advance(Duration::from_millis(1_000));
        wait_until("writable again", || !core.is_read_only()).await;
        let info = log.append(vec![batch(1, 1, 0, 100)], 0).unwrap();
        log.wait_acked(info.last_offset, AckLevel::All)
            .await
            .unwrap();
        log.close().await.unwrap();
    });
}

#[test]
fn enospc_from_an_fdatasync_still_fails_the_directory() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().to_path_buf();
    run(move || async move {
        let (core, faulty) = faulty_core(&root, probing_config(0)).await;
        let log = open(&core, &root.join("s-0"), small_config(Durability::Fsync)).await;
        faulty.inject(FaultRule::new(FaultOp::Sync, Fault::Fail(libc::ENOSPC)).on_path(".log"));
        let info = log.append(vec![batch(0, 1, 0, 100)], 0).unwrap();
        let err = log
            .wait_acked(info.last_offset, AckLevel::All)
            .await
            .unwrap_err();
        assert!(matches!(err, StorageError::LogDirFailed(_)), "{err}");
        assert!(matches!(core.disk_state(), DiskState::Failed { .. }));
    });
}

#[test]
fn out_of_descriptors_is_transient_for_opens_rolls_and_reopens() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().to_path_buf();
    run(move || async move {
        let (core, faulty) = faulty_core(&root, probing_config(0)).await;
        // CreateTopics: the open fails with a typed, retriable error, and works when retried.
        faulty.inject(FaultRule::new(FaultOp::Open, Fault::Fail(libc::EMFILE)).on_path(".log"));
        let path = root.join("e-0");
        let err = borges_storage::PartitionLog::open(
            &core,
            path.clone(),
            small_config(Durability::Fsync),
        )
        .await
        .err()
        .expect("EMFILE on open");
        assert!(
            matches!(err, StorageError::TooManyOpenFiles { .. }),
            "{err}"
        );
        assert!(err.is_transient() && !core.is_failed());
        let log = open(&core, &path, small_config(Durability::Fsync)).await;
        // A roll (and any reopen of the hibernated files) meets EMFILE twice, then works.
        faulty.inject(
            FaultRule::new(FaultOp::Open, Fault::Fail(libc::ENFILE))
                .on_path(".log")
                .times(2),
        );
        let mut last = 0;
        for i in 0..40 {
            let info = log.append(vec![batch(i, 1, 0, 1000)], 0).unwrap();
            last = info.last_offset;
        }
        log.wait_acked(last, AckLevel::All).await.unwrap();
        assert!(log.segment_count() > 1, "the appends rolled a segment");
        assert!(!core.is_failed() && !core.is_read_only());
        assert_values_match_offsets(
            &read_all(&log, 0, borges_storage::ReadBound::HighWatermark).await,
        );
        log.close().await.unwrap();
    });
}

/// Descriptors of this process (Linux).
fn process_descriptors() -> u64 {
    std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count() as u64)
}

#[test]
fn storage_never_holds_more_descriptors_than_its_budget() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().to_path_buf();
    run(move || async move {
        let config = StorageConfig {
            open_files_max: 2,
            open_writers_max: 2,
            ..probing_config(0)
        };
        let budget = config.descriptors_max();
        let before = process_descriptors();
        let core = core(&root, config).await;
        let mut logs = Vec::new();
        let mut refused = 0;
        while logs.len() < 24 {
            let path = root.join(format!("d-{}", logs.len()));
            match borges_storage::PartitionLog::open(&core, path, small_config(Durability::Fsync))
                .await
            {
                Ok(log) => logs.push(log),
                Err(e @ StorageError::TooManyOpenFiles { .. }) => {
                    refused += 1;
                    assert!(refused < 1_000, "opens keep failing: {e}");
                    borges_runtime::time::sleep(Duration::from_millis(5)).await;
                }
                Err(e) => panic!("{e}"),
            }
            assert!(core.open_descriptors() <= budget);
        }
        let mut last = Vec::new();
        for (i, log) in logs.iter().enumerate() {
            let info = log.append(vec![batch(0, 2, i as i64, 3000)], 0).unwrap();
            last.push(info.last_offset);
        }
        for (log, last) in logs.iter().zip(&last) {
            loop {
                assert!(core.open_descriptors() <= budget);
                let done = borges_runtime::time::timeout(
                    Duration::from_millis(5),
                    log.wait_acked(*last, AckLevel::All),
                )
                .await;
                match done {
                    Some(r) => break r.unwrap(),
                    None => continue,
                }
            }
            // Reads go through the read cache (and its share of the budget).
            let got = read_all(log, 0, borges_storage::ReadBound::HighWatermark).await;
            assert_values_match_offsets(&got);
            assert!(core.open_descriptors() <= budget);
            assert!(process_descriptors() <= before + budget + 8);
        }
        assert!(!core.is_failed());
        for log in logs {
            log.close().await.unwrap();
        }
    });
}
