//! A failed write takes the whole log directory offline: every log of the core refuses appends
//! and acknowledgements, nothing pretends success. The failure is a real one: a full file
//! system (a 512 KiB tmpfs; skipped where tmpfs cannot be mounted).

mod common;

use std::path::PathBuf;
use std::process::Command;

use borges_storage::{AckLevel, Durability, StorageError};
use common::*;

struct Mount(PathBuf);

impl Drop for Mount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

#[test]
fn a_full_disk_fails_the_log_directory_for_every_log_of_the_core() {
    let dir = tempfile::tempdir().unwrap();
    let mnt = dir.path().join("small");
    std::fs::create_dir(&mnt).unwrap();
    let mounted = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=512k", "tmpfs"])
        .arg(&mnt)
        .status()
        .is_ok_and(|s| s.success());
    if !mounted {
        eprintln!("skipping: cannot mount a tmpfs here");
        return;
    }
    let _mount = Mount(mnt.clone());
    run(move || async move {
        let core = core(&mnt, storage_config()).await;
        let a = open(&core, &mnt.join("a-0"), small_config(Durability::Fsync)).await;
        let b = open(&core, &mnt.join("b-0"), small_config(Durability::None)).await;
        let info = a.append(vec![batch(0, 1, 0, 100)], 0).unwrap();
        // The flusher pre-allocates at least 1 MiB for the segment: ENOSPC.
        let err = a
            .wait_acked(info.last_offset, AckLevel::Leader)
            .await
            .unwrap_err();
        assert!(matches!(err, StorageError::LogDirFailed(_)), "{err}");
        assert!(core.is_failed());
        assert!(matches!(
            a.append(vec![batch(1, 1, 0, 1)], 0),
            Err(StorageError::LogDirFailed(_))
        ));
        assert!(matches!(
            b.append(vec![batch(0, 1, 0, 1)], 0),
            Err(StorageError::LogDirFailed(_))
        ));
        assert!(matches!(
            a.flush().await,
            Err(StorageError::LogDirFailed(_))
        ));
        assert_eq!(a.offsets().high_watermark, 0, "nothing was acknowledged");
        assert!(matches!(
            a.close().await,
            Err(StorageError::LogDirFailed(_))
        ));
    });
}
