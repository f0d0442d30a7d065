//! Small mounted file systems for tests of a full disk: a tmpfs or a loop-mounted ext4 image,
//! unmounted (and the image removed) when the guard drops, also when the test fails.
//!
//! Mounting needs root; where it is not allowed a test calls [`skip`], which prints a
//! `SKIPPED:` line and lets the test pass, unless `BORGES_REQUIRE_MOUNT=1` (CI sets it), which
//! makes a missing prerequisite a failure.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The environment variable that makes [`skip`] fail instead.
pub const REQUIRE_MOUNT: &str = "BORGES_REQUIRE_MOUNT";

/// Prints why a test is skipped, or panics when `BORGES_REQUIRE_MOUNT=1`.
pub fn skip(reason: &str) {
    crate::skip(REQUIRE_MOUNT, reason);
}

/// The kind of small file system.
#[derive(Clone, Copy, Debug)]
pub enum SmallFs {
    /// `mount -t tmpfs -o size=N`.
    Tmpfs,
    /// An ext4 image (`mkfs.ext4 -m 0`) mounted with `-o loop`.
    Ext4,
}

/// A mounted small file system; unmounted on drop.
pub struct Mount {
    path: PathBuf,
    _dir: tempfile::TempDir,
}

impl Mount {
    /// The mount point.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        // Lazy: a broker still holding files there cannot keep the mount alive.
        let _ = Command::new("umount").arg("-l").arg(&self.path).status();
    }
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

/// Mounts a `kind` file system of `size_mib` MiB, or says why it cannot.
pub fn mount_small(kind: SmallFs, size_mib: u64) -> Result<Mount, String> {
    let dir = tempfile::Builder::new()
        .prefix("borges-mount-")
        .tempdir()
        .map_err(|e| e.to_string())?;
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

/// Writes `path` until the file system is full (or `bytes_max` is written); returns the bytes
/// written.
pub fn fill(path: &Path, bytes_max: u64) -> u64 {
    use std::io::Write;
    let mut f = std::fs::File::create(path).expect("create filler");
    let chunk = vec![7u8; 64 * 1024];
    let mut written = 0u64;
    while written < bytes_max {
        match f.write(&chunk) {
            Ok(0) => break,
            Ok(n) => written += n as u64,
            Err(e) if e.raw_os_error() == Some(libc::ENOSPC) => break,
            Err(e) => panic!("filling {}: {e}", path.display()),
        }
    }
    let _ = f.sync_all();
    written
}
