//! Direct-IO files (O_DIRECT through io_uring) and the aligned buffers they need.
//!
//! Rules measured on our machines (see `RUNTIME-NOTES.md`): writes need position and length
//! aligned to [`DirectFile::alignment`]; reads accept any range; writes that extend a file
//! serialize, so pre-allocate; the first direct-IO file an executor opens on a device decides
//! whether polled IO is used, so call [`prime_device`] first on every executor.

use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::path::Path;

/// An aligned buffer for direct-IO writes. Lives on the core that allocated it.
pub struct AlignedBuf(glommio::io::DmaBuffer);

impl AlignedBuf {
    /// Buffer length.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether the buffer is empty.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The contents.
    pub fn as_bytes(&self) -> &[u8] {
        self.0.as_bytes()
    }

    /// The contents, mutable.
    pub fn as_bytes_mut(&mut self) -> &mut [u8] {
        self.0.as_bytes_mut()
    }

    /// Shrinks the buffer to `len` bytes (which must stay aligned for writes).
    pub fn truncate(&mut self, len: usize) {
        self.0.trim_to_size(len);
    }
}

/// Bytes read from a file; dereferences to `[u8]`.
pub struct ReadBuf(glommio::io::ReadResult);

impl std::ops::Deref for ReadBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.0
    }
}

/// A file opened with O_DIRECT, driven by this core's io_uring. Lives on one core.
pub struct DirectFile {
    inner: glommio::io::DmaFile,
}

impl DirectFile {
    /// Opens an existing file read-only.
    pub async fn open_read(path: impl AsRef<Path>) -> io::Result<DirectFile> {
        let inner = glommio::io::DmaFile::open(path.as_ref()).await?;
        Ok(DirectFile { inner })
    }

    /// Opens a file for reading and writing, creating it when `create` is set. Never truncates.
    pub async fn open_write(path: impl AsRef<Path>, create: bool) -> io::Result<DirectFile> {
        let inner = glommio::io::OpenOptions::new()
            .read(true)
            .write(true)
            .create(create)
            .dma_open(path.as_ref())
            .await?;
        Ok(DirectFile { inner })
    }

    /// Required alignment of write positions and lengths.
    pub fn alignment(&self) -> u64 {
        self.inner.alignment()
    }

    /// Allocates an aligned buffer of `size` bytes, zero-filled, usable for writes to this file.
    pub fn alloc(&self, size: usize) -> AlignedBuf {
        let mut buf = self.inner.alloc_dma_buffer(size);
        buf.as_bytes_mut().fill(0);
        AlignedBuf(buf)
    }

    /// Allocates an aligned buffer of `size` bytes and lets `fill` write its contents; `fill`
    /// returns how many leading bytes it wrote, and the rest of the buffer is zeroed. Saves
    /// zeroing bytes that are about to be overwritten (the copy on the write path).
    pub fn alloc_with(&self, size: usize, fill: impl FnOnce(&mut [u8]) -> usize) -> AlignedBuf {
        let mut buf = self.inner.alloc_dma_buffer(size);
        let bytes = buf.as_bytes_mut();
        let written = fill(bytes).min(size);
        bytes[written..].fill(0);
        AlignedBuf(buf)
    }

    /// Writes the whole buffer at `position`; both must be aligned. Returns bytes written; a
    /// short write is returned as an error, never as success.
    pub async fn write_at(&self, buf: AlignedBuf, position: u64) -> io::Result<()> {
        let len = buf.len();
        let written = self.inner.write_at(buf.0, position).await?;
        if written != len {
            return Err(io::Error::new(
                io::ErrorKind::WriteZero,
                format!("short direct write: {written} of {len} bytes at {position}"),
            ));
        }
        Ok(())
    }

    /// Like [`DirectFile::write_at`] but hands the buffer back for reuse once the write is done
    /// (`None` if the runtime still holds it), so that a writer can recycle its buffers instead
    /// of allocating (and page-faulting) fresh memory for every write.
    pub async fn write_reusable_at(
        &self,
        buf: AlignedBuf,
        position: u64,
    ) -> (io::Result<()>, Option<AlignedBuf>) {
        let len = buf.len();
        let shared = std::rc::Rc::new(buf.0);
        let result = match self.inner.write_rc_at(shared.clone(), position).await {
            Ok(written) if written == len => Ok(()),
            Ok(written) => Err(io::Error::new(
                io::ErrorKind::WriteZero,
                format!("short direct write: {written} of {len} bytes at {position}"),
            )),
            Err(e) => Err(e.into()),
        };
        (result, std::rc::Rc::try_unwrap(shared).ok().map(AlignedBuf))
    }

    /// Reads up to `len` bytes at `position` (any alignment). Fewer bytes come back at the end
    /// of the file.
    pub async fn read_at(&self, position: u64, len: usize) -> io::Result<ReadBuf> {
        Ok(ReadBuf(self.inner.read_at(position, len).await?))
    }

    /// fdatasync.
    pub async fn sync_data(&self) -> io::Result<()> {
        Ok(self.inner.fdatasync().await?)
    }

    /// Reserves blocks up to `size` bytes; with `keep_size` the visible file size is unchanged.
    pub async fn pre_allocate(&self, size: u64, keep_size: bool) -> io::Result<()> {
        Ok(self.inner.pre_allocate(size, keep_size).await?)
    }

    /// Truncates or extends the file to `size` bytes: a direct `ftruncate` (see [`ftruncate`]).
    pub async fn truncate(&self, size: u64) -> io::Result<()> {
        ftruncate(self.inner.as_raw_fd(), size)
    }

    /// Current file size.
    pub async fn size(&self) -> io::Result<u64> {
        Ok(self.inner.file_size().await?)
    }

    /// Closes the file. The descriptor is handed to the ring to close without waiting for the
    /// result: awaiting glommio's `close` was seen to never complete now and then (the executor
    /// stayed parked in `io_uring_enter`), and a close after the data was fdatasynced reports
    /// nothing a caller could act on.
    pub async fn close(self) -> io::Result<()> {
        drop(self.inner);
        Ok(())
    }
}

impl AsRawFd for DirectFile {
    fn as_raw_fd(&self) -> RawFd {
        self.inner.as_raw_fd()
    }
}

/// A plain (buffered, not O_DIRECT) file driven by this core's io_uring: reads go through the
/// page cache, so its descriptor is the one to hand to `sendfile`. Lives on one core.
pub struct BufferedFile {
    inner: glommio::io::BufferedFile,
}

impl BufferedFile {
    /// Opens an existing file read-only (`O_RDONLY`).
    pub async fn open_read(path: impl AsRef<Path>) -> io::Result<BufferedFile> {
        let inner = glommio::io::BufferedFile::open(path.as_ref()).await?;
        Ok(BufferedFile { inner })
    }

    /// Opens a file for reading and writing, creating it when `create` is set. Never truncates.
    pub async fn open_write(path: impl AsRef<Path>, create: bool) -> io::Result<BufferedFile> {
        let inner = glommio::io::OpenOptions::new()
            .read(true)
            .write(true)
            .create(create)
            .buffered_open(path.as_ref())
            .await?;
        Ok(BufferedFile { inner })
    }

    /// Reads up to `len` bytes at `position`; fewer come back at the end of the file.
    pub async fn read_at(&self, position: u64, len: usize) -> io::Result<ReadBuf> {
        Ok(ReadBuf(self.inner.read_at(position, len).await?))
    }

    /// Reads exactly `len` bytes at `position`, looping over short reads; an error if the file
    /// ends first.
    pub async fn read_exact_at(&self, position: u64, len: usize) -> io::Result<Vec<u8>> {
        let mut out = Vec::with_capacity(len);
        while out.len() < len {
            let got = self
                .read_at(position + out.len() as u64, len - out.len())
                .await?;
            if got.is_empty() {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    format!("file ends before byte {}", position + len as u64),
                ));
            }
            out.extend_from_slice(&got);
        }
        Ok(out)
    }

    /// Writes all of `buf` at `position` (a short write is an error, never success).
    pub async fn write_all_at(&self, buf: Vec<u8>, position: u64) -> io::Result<()> {
        let len = buf.len();
        let written = self.inner.write_at(buf, position).await?;
        if written != len {
            return Err(io::Error::new(
                io::ErrorKind::WriteZero,
                format!("short write: {written} of {len} bytes at {position}"),
            ));
        }
        Ok(())
    }

    /// fdatasync.
    pub async fn sync_data(&self) -> io::Result<()> {
        Ok(self.inner.fdatasync().await?)
    }

    /// Truncates or extends the file to `size` bytes: a direct `ftruncate` (see [`ftruncate`]).
    pub async fn truncate(&self, size: u64) -> io::Result<()> {
        ftruncate(self.inner.as_raw_fd(), size)
    }

    /// Current file size.
    pub async fn size(&self) -> io::Result<u64> {
        Ok(self.inner.file_size().await?)
    }

    /// Closes the file. The descriptor is handed to the ring to close without waiting for the
    /// result: awaiting glommio's `close` was seen to never complete now and then (the executor
    /// stayed parked in `io_uring_enter`), and a close after the data was fdatasynced reports
    /// nothing a caller could act on.
    pub async fn close(self) -> io::Result<()> {
        drop(self.inner);
        Ok(())
    }
}

impl AsRawFd for BufferedFile {
    fn as_raw_fd(&self) -> RawFd {
        self.inner.as_raw_fd()
    }
}

/// `ftruncate(2)` called directly on the core.
///
/// glommio 0.9 runs truncate, rename, unlink and mkdir on a helper thread that wakes the
/// executor through an eventfd. In the storage tests that wake-up was lost now and then: the
/// executor stayed parked in `io_uring_enter` for good (a truncation followed by a checkpoint
/// rename hung about one run in four of the model test). These metadata calls take
/// microseconds, so they are made synchronously instead.
fn ftruncate(fd: RawFd, size: u64) -> io::Result<()> {
    let size = libc::off_t::try_from(size)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "file size too large"))?;
    // SAFETY: a plain syscall on a descriptor we own; no memory is passed.
    if unsafe { libc::ftruncate(fd, size) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Removes a file: a direct `unlink` (see [`ftruncate`] for why not glommio's helper thread).
pub async fn remove_file(path: impl AsRef<Path>) -> io::Result<()> {
    std::fs::remove_file(path)
}

/// Renames a file: a direct `rename` (see [`ftruncate`] for why not glommio's helper thread).
pub async fn rename(from: impl AsRef<Path>, to: impl AsRef<Path>) -> io::Result<()> {
    std::fs::rename(from, to)
}

/// fsyncs a directory without blocking the core.
pub async fn sync_dir_async(dir: impl AsRef<Path>) -> io::Result<()> {
    let d = glommio::io::Directory::open(dir.as_ref()).await?;
    d.sync().await?;
    Ok(d.close().await?)
}

/// Replaces `path` with `contents` without blocking the core: write a temporary file,
/// fdatasync it, rename it over `path`; with `sync_parent` also fsync the directory so that the
/// rename itself is durable (without it a crash may leave the previous version in place, never a
/// partial one).
pub async fn replace_file(
    path: impl AsRef<Path>,
    contents: Vec<u8>,
    sync_parent: bool,
) -> io::Result<()> {
    let path = path.as_ref();
    let (dir, name) = match (path.parent(), path.file_name()) {
        (Some(d), Some(n)) => (d, n),
        _ => {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "path has no parent or file name",
            ))
        }
    };
    let tmp = dir.join(format!(".{}.tmp", name.to_string_lossy()));
    let f = glommio::io::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .buffered_open(&tmp)
        .await?;
    let len = contents.len();
    let written = f.write_at(contents, 0).await?;
    if written != len {
        return Err(io::Error::new(io::ErrorKind::WriteZero, "short write"));
    }
    f.fdatasync().await?;
    f.close().await?;
    rename(&tmp, path).await?;
    if sync_parent {
        sync_dir_async(dir).await?;
    }
    Ok(())
}

/// Works around glommio's storage-polling detection (glommio issues #605 and #670): the first
/// direct-IO file an executor opens on a device decides whether polled IO is used, and a new
/// empty or write-only file makes that decision wrongly. Opening an existing non-empty file
/// read-only first makes it right. Call once per executor per data directory, before any other
/// direct-IO file there is opened.
pub async fn prime_device(dir: impl AsRef<Path>) -> io::Result<()> {
    let path = dir.as_ref().join(".borges-device-probe");
    let needs_write = std::fs::metadata(&path)
        .map(|m| m.len() < 4096)
        .unwrap_or(true);
    if needs_write {
        std::fs::create_dir_all(dir.as_ref())?;
        std::fs::write(&path, vec![0u8; 4096])?;
    }
    let file = DirectFile::open_read(&path).await?;
    let _ = file.read_at(0, 512).await?;
    file.close().await
}

/// fsyncs a directory so that creations, renames and deletions in it are durable.
pub fn sync_dir(dir: impl AsRef<Path>) -> io::Result<()> {
    std::fs::File::open(dir.as_ref())?.sync_all()
}

/// Atomically replaces `path` with `contents`: write a temporary file, fsync it, rename it over
/// `path`, fsync the directory. Blocking; small files only (checkpoints, metadata).
pub fn write_atomic(path: impl AsRef<Path>, contents: &[u8]) -> io::Result<()> {
    use std::io::Write;
    let path = path.as_ref();
    let dir = path
        .parent()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "path has no parent"))?;
    let name = path
        .file_name()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "path has no file name"))?;
    let tmp = dir.join(format!(".{}.tmp", name.to_string_lossy()));
    {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(contents)?;
        f.sync_all()?;
    }
    std::fs::rename(&tmp, path)?;
    sync_dir(dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn write_read_sync_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        crate::executor::run_local(async move {
            prime_device(dir.path()).await.unwrap();
            let f = DirectFile::open_write(&path, true).await.unwrap();
            let align = f.alignment() as usize;
            f.pre_allocate(1 << 20, false).await.unwrap();
            let mut buf = f.alloc(align * 2);
            buf.as_bytes_mut()[..5].copy_from_slice(b"hello");
            f.write_at(buf, align as u64).await.unwrap();
            f.sync_data().await.unwrap();
            let r = f.read_at(align as u64, 5).await.unwrap();
            assert_eq!(&r[..], b"hello");
            let r = f.read_at(3, 4).await.unwrap();
            assert_eq!(&r[..], &[0, 0, 0, 0]);
            f.truncate(align as u64 + 5).await.unwrap();
            assert_eq!(f.size().await.unwrap(), align as u64 + 5);
            f.close().await.unwrap();
        })
        .unwrap();
    }

    #[test]
    fn unaligned_write_is_an_error_not_a_panic() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("g");
        crate::executor::run_local(async move {
            prime_device(dir.path()).await.unwrap();
            let f = DirectFile::open_write(&path, true).await.unwrap();
            let buf = f.alloc(4096);
            assert!(f.write_at(buf, 100).await.is_err());
        })
        .unwrap();
    }

    #[test]
    fn write_atomic_replaces() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("meta");
        write_atomic(&p, b"one").unwrap();
        write_atomic(&p, b"two").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"two");
    }
}
