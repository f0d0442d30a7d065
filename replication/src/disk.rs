//! The Raft node's file IO, with an optional power-loss model for tests.
//!
//! Every durable step of the Raft storage goes through [`Disk`]: appending to a log segment,
//! fdatasync of a file, fsync of a directory, atomic replacement of a small file (write a
//! temporary, fdatasync it, rename it over the target, fsync the directory), removal. The real
//! disk makes exactly those system calls, blocking, on the Raft node's own executor thread: the
//! metadata log writes little, a blocking fdatasync there delays only Raft's own work (which
//! waits for it anyway), and it stays clear of glommio 0.9's file paths, one of which parked a
//! test executor in `io_uring_enter` for good here (a lost completion wake-up, as the runtime
//! crate documents for truncate and rename).
//!
//! [`Disk::with_power_loss_model`] adds a model of what survives a power cut, fed by the same
//! calls: a file's data is what its last fdatasync saw, and a name (created, renamed or removed)
//! is durable only after its directory was fsynced. [`Disk::power_loss`], called once the node
//! is stopped, puts every file it saw back to that state: unsynced bytes vanish, unsynced
//! renames revert, unsynced creations disappear, unsynced removals come back. A node that
//! reports data durable before syncing it loses that data in a test that cuts the power, as it
//! would on a real machine. The model is for tests only (it keeps copies of synced files in
//! memory); the real disk carries no bookkeeping.

use std::collections::HashMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

/// What the model knows of one path.
#[derive(Debug, Clone, Default)]
struct Tracked {
    /// A file exists at the path now.
    exists: bool,
    /// The current name is durable (its directory was fsynced since it appeared).
    linked: bool,
    /// Data of the current file as of its last fdatasync.
    synced: Vec<u8>,
    /// What the path held durably before the current, not yet durable, name: `None` absent.
    before: Option<Vec<u8>>,
}

impl Tracked {
    /// What a power cut leaves at this path.
    fn after_power_loss(&self) -> Option<Vec<u8>> {
        if self.linked {
            self.exists.then(|| self.synced.clone())
        } else {
            self.before.clone()
        }
    }
}

#[derive(Debug, Default)]
struct Model {
    paths: Mutex<HashMap<PathBuf, Tracked>>,
    sync_delay_ms: AtomicU64,
    /// The power went out: syncs no longer make anything durable.
    cut: std::sync::atomic::AtomicBool,
}

impl Model {
    fn with<T>(&self, f: impl FnOnce(&mut HashMap<PathBuf, Tracked>) -> T) -> T {
        f(&mut self.paths.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// A path seen for the first time is taken as durable as it is.
    fn track(paths: &mut HashMap<PathBuf, Tracked>, path: &Path) {
        paths.entry(path.to_path_buf()).or_insert_with(|| {
            let data = std::fs::read(path).ok();
            Tracked {
                exists: data.is_some(),
                linked: true,
                synced: data.clone().unwrap_or_default(),
                before: data,
            }
        });
    }

    fn created(&self, path: &Path) {
        self.with(|paths| {
            let before = paths.get(path).and_then(Tracked::after_power_loss);
            paths.insert(
                path.to_path_buf(),
                Tracked {
                    exists: true,
                    linked: false,
                    synced: Vec::new(),
                    before,
                },
            );
        });
    }

    fn synced_file(&self, path: &Path) {
        if self.cut.load(Ordering::SeqCst) {
            return;
        }
        let now = std::fs::read(path).unwrap_or_default();
        self.with(|paths| {
            Self::track(paths, path);
            if let Some(t) = paths.get_mut(path) {
                t.synced = now;
            }
        });
    }

    fn removed(&self, path: &Path) {
        self.with(|paths| {
            Self::track(paths, path);
            if let Some(t) = paths.get_mut(path) {
                t.before = t.after_power_loss();
                t.exists = false;
                t.linked = false;
            }
        });
    }

    fn renamed(&self, from: &Path, to: &Path) {
        self.with(|paths| {
            Self::track(paths, from);
            Self::track(paths, to);
            let moved = paths.get(from).cloned().unwrap_or_default();
            let before = paths.get(to).and_then(Tracked::after_power_loss);
            paths.insert(
                to.to_path_buf(),
                Tracked {
                    exists: true,
                    linked: false,
                    synced: moved.synced,
                    before,
                },
            );
            if let Some(t) = paths.get_mut(from) {
                t.before = t.after_power_loss();
                t.exists = false;
                t.linked = false;
            }
        });
    }

    fn synced_dir(&self, dir: &Path) {
        if self.cut.load(Ordering::SeqCst) {
            return;
        }
        self.with(|paths| {
            for (path, t) in paths.iter_mut() {
                if path.parent() != Some(dir) {
                    continue;
                }
                if !t.exists {
                    t.before = None;
                }
                t.linked = true;
            }
        });
    }

    fn power_loss(&self) -> io::Result<()> {
        let paths = self.with(std::mem::take);
        self.cut.store(false, Ordering::SeqCst);
        for (path, t) in paths {
            match t.after_power_loss() {
                Some(data) => std::fs::write(&path, data)?,
                None => match std::fs::remove_file(&path) {
                    Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
                    _ => {}
                },
            }
        }
        Ok(())
    }
}

/// The file IO of one Raft node. Cheap to clone; lives on the node's executor (the model, when
/// present, is shared with the test that cuts the power).
#[derive(Debug, Clone, Default)]
pub struct Disk {
    model: Option<Arc<Model>>,
}

impl Disk {
    /// The real disk.
    pub fn real() -> Disk {
        Disk::default()
    }

    /// The real disk plus a model of what a power cut would keep (tests only, see the module
    /// documentation).
    pub fn with_power_loss_model() -> Disk {
        Disk {
            model: Some(Arc::new(Model::default())),
        }
    }

    /// Puts every file this disk touched back to what a power cut would have left. Call only
    /// while no node uses the files. No effect on the real disk.
    pub fn power_loss(&self) -> io::Result<()> {
        match &self.model {
            Some(m) => m.power_loss(),
            None => Ok(()),
        }
    }

    /// The power goes out now: from here on no sync makes anything durable, so a later
    /// [`Disk::power_loss`] restores the state of this instant (the node may go on running
    /// until it is stopped). No effect on the real disk.
    pub fn cut_power_now(&self) {
        if let Some(m) = &self.model {
            m.cut.store(true, Ordering::SeqCst);
        }
    }

    /// Makes every fdatasync of an appended file wait this long first (tests: a slow log
    /// device widens the window between writing data and making it durable; small files
    /// replaced whole are not slowed). No effect on the real disk.
    pub fn set_sync_delay(&self, delay: Duration) {
        if let Some(m) = &self.model {
            m.sync_delay_ms
                .store(delay.as_millis() as u64, Ordering::Relaxed);
        }
    }

    /// Opens `path` for appending, creating it (not yet durable: fsync its directory) when
    /// `create` is set and it does not exist.
    pub async fn open_append(&self, path: &Path, create: bool) -> io::Result<LogFile> {
        let existed = path.exists();
        // The model must see an existing file before this node writes to it.
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(create)
            .truncate(false)
            .open(path)?;
        match (&self.model, existed) {
            (Some(m), false) => m.created(path),
            (Some(m), true) => m.with(|paths| Model::track(paths, path)),
            (None, _) => {}
        }
        Ok(LogFile {
            file,
            path: path.to_path_buf(),
            disk: self.clone(),
        })
    }

    /// fsyncs a directory: names created, renamed or removed in it become durable.
    pub async fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        std::fs::File::open(dir)?.sync_all()?;
        if let Some(m) = &self.model {
            m.synced_dir(dir);
        }
        Ok(())
    }

    /// Removes a file (durable once its directory is fsynced).
    pub async fn remove(&self, path: &Path) -> io::Result<()> {
        if let Some(m) = &self.model {
            m.removed(path);
        }
        match std::fs::remove_file(path) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            other => other,
        }
    }

    /// Replaces `path` with `contents` atomically and durably: a crash leaves the old or the new
    /// contents, and once this returns, the new ones survive a power cut.
    pub async fn replace(&self, path: &Path, contents: Vec<u8>) -> io::Result<()> {
        let (dir, name) = match (path.parent(), path.file_name()) {
            (Some(d), Some(n)) => (d, n),
            _ => return Err(io::Error::new(io::ErrorKind::InvalidInput, "no file name")),
        };
        let tmp = dir.join(format!(".{}.tmp", name.to_string_lossy()));
        self.remove(&tmp).await?;
        let file = self.open_append(&tmp, true).await?;
        file.write_at(contents, 0).await?;
        file.sync_now().await?;
        file.close().await?;
        if let Some(m) = &self.model {
            m.renamed(&tmp, path);
        }
        std::fs::rename(&tmp, path)?;
        self.sync_dir(dir).await
    }

    async fn before_sync(&self) {
        if let Some(m) = &self.model {
            let ms = m.sync_delay_ms.load(Ordering::Relaxed);
            if ms > 0 {
                borges_runtime::time::sleep(Duration::from_millis(ms)).await;
            }
        }
    }
}

/// A file written at chosen positions (log segments, temporaries). Lives on one executor.
pub struct LogFile {
    file: std::fs::File,
    path: PathBuf,
    disk: Disk,
}

impl LogFile {
    /// Writes all of `bytes` at `position` (in the page cache; not durable until [`sync`]).
    ///
    /// [`sync`]: LogFile::sync
    pub async fn write_at(&self, bytes: Vec<u8>, position: u64) -> io::Result<()> {
        use std::os::unix::fs::FileExt;
        self.file.write_all_at(&bytes, position)
    }

    /// fdatasync: the data written so far (and the size) survive a power cut.
    pub async fn sync(&self) -> io::Result<()> {
        self.disk.before_sync().await;
        self.sync_now().await
    }

    /// fdatasync without the test delay (small files replaced whole).
    async fn sync_now(&self) -> io::Result<()> {
        self.file.sync_data()?;
        if let Some(m) = &self.disk.model {
            m.synced_file(&self.path);
        }
        Ok(())
    }

    /// Cuts the file to `size` bytes (durable after [`LogFile::sync`]).
    pub async fn truncate(&self, size: u64) -> io::Result<()> {
        self.file.set_len(size)
    }

    /// The file size.
    pub async fn size(&self) -> io::Result<u64> {
        Ok(self.file.metadata()?.len())
    }

    /// The whole file.
    pub async fn read_all(&self) -> io::Result<Vec<u8>> {
        use std::os::unix::fs::FileExt;
        let size = usize::try_from(self.size().await?)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "file too large"))?;
        let mut out = vec![0u8; size];
        self.file.read_exact_at(&mut out, 0)?;
        Ok(out)
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Closes the file.
    pub async fn close(self) -> io::Result<()> {
        drop(self.file);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(f: impl std::future::Future<Output = ()> + 'static) {
        borges_runtime::executor::run_local(f).unwrap();
    }

    #[test]
    fn power_loss_keeps_only_what_was_synced() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().to_path_buf();
        let disk = Disk::with_power_loss_model();
        let model = disk.clone();
        run(async move {
            // Synced data and a synced name survive; the unsynced tail does not.
            let a = disk.open_append(&d.join("a"), true).await.unwrap();
            a.write_at(b"durable".to_vec(), 0).await.unwrap();
            a.sync().await.unwrap();
            disk.sync_dir(&d).await.unwrap();
            a.write_at(b"-lost".to_vec(), 7).await.unwrap();
            // A durable replacement survives (it fsyncs the directory).
            disk.replace(&d.join("c"), b"one".to_vec()).await.unwrap();
            // A synced file whose name was never made durable disappears.
            let b = disk.open_append(&d.join("b"), true).await.unwrap();
            b.write_at(b"x".to_vec(), 0).await.unwrap();
            b.sync().await.unwrap();
        });
        std::fs::write(dir.path().join("untouched"), b"u").unwrap();
        model.power_loss().unwrap();
        assert_eq!(std::fs::read(dir.path().join("a")).unwrap(), b"durable");
        assert!(!dir.path().join("b").exists());
        assert_eq!(std::fs::read(dir.path().join("c")).unwrap(), b"one");
        assert_eq!(std::fs::read(dir.path().join("untouched")).unwrap(), b"u");
    }

    #[test]
    fn power_loss_reverts_unsynced_renames_and_removals() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().to_path_buf();
        std::fs::write(d.join("kept"), b"old").unwrap();
        std::fs::write(d.join("gone"), b"back").unwrap();
        let disk = Disk::with_power_loss_model();
        let model = disk.clone();
        run(async move {
            // A replacement whose temporary was synced but whose rename was not.
            let tmp = disk.open_append(&d.join(".kept.tmp"), true).await.unwrap();
            tmp.write_at(b"new".to_vec(), 0).await.unwrap();
            tmp.sync().await.unwrap();
            disk.model
                .as_ref()
                .unwrap()
                .renamed(&d.join(".kept.tmp"), &d.join("kept"));
            std::fs::rename(d.join(".kept.tmp"), d.join("kept")).unwrap();
            disk.remove(&d.join("gone")).await.unwrap();
        });
        assert_eq!(std::fs::read(dir.path().join("kept")).unwrap(), b"new");
        model.power_loss().unwrap();
        assert_eq!(std::fs::read(dir.path().join("kept")).unwrap(), b"old");
        assert_eq!(std::fs::read(dir.path().join("gone")).unwrap(), b"back");
        assert!(!dir.path().join(".kept.tmp").exists());
    }
}
