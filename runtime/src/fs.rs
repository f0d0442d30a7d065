//! Direct-IO files (O_DIRECT through io_uring) and the aligned buffers they need.
//!
//! Rules measured on our machines (see `RUNTIME-NOTES.md`): writes need position and length
//! aligned to [`DirectFile::alignment`]; reads accept any range; writes that extend a file
//! serialize, so pre-allocate; the first direct-IO file an executor opens on a device decides
//! whether polled IO is used, so call [`prime_device`] first on every executor.

use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::path::Path;
use std::rc::Rc;

use crate::fault::{FaultOp, FaultyDisk, FileFaults};

/// glommio's error as an `io::Error` that keeps the errno (glommio's own conversion turns
/// its "enhanced" errors into messages without one, and storage tells `ENOSPC` and `EMFILE`
/// from other failures by the errno).
pub(crate) fn os_error<T>(e: glommio::GlommioError<T>) -> io::Error {
    match e {
        glommio::GlommioError::EnhancedIoError { source, .. } => match source.raw_os_error() {
            Some(code) => io::Error::from_raw_os_error(code),
            None => source,
        },
        other => other.into(),
    }
}

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
///
/// Opened through a [`Disk::Faulty`], it carries that disk's fault context and every
/// mutating operation goes through it first; on the real disk that is one `None` check.
pub struct DirectFile {
    inner: glommio::io::DmaFile,
    faults: Option<Rc<FileFaults>>,
}

impl DirectFile {
    /// Opens an existing file read-only.
    pub async fn open_read(path: impl AsRef<Path>) -> io::Result<DirectFile> {
        let inner = glommio::io::DmaFile::open(path.as_ref())
            .await
            .map_err(os_error)?;
        Ok(DirectFile {
            inner,
            faults: None,
        })
    }

    /// Opens a file for reading and writing, creating it when `create` is set. Never truncates.
    pub async fn open_write(path: impl AsRef<Path>, create: bool) -> io::Result<DirectFile> {
        let inner = glommio::io::OpenOptions::new()
            .read(true)
            .write(true)
            .create(create)
            .dma_open(path.as_ref())
            .await
            .map_err(os_error)?;
        Ok(DirectFile {
            inner,
            faults: None,
        })
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
        self.write_reusable_at(buf, position).await.0
    }

    /// Like [`DirectFile::write_at`] but hands the buffer back for reuse once the write is done
    /// (`None` if the runtime still holds it), so that a writer can recycle its buffers instead
    /// of allocating (and page-faulting) fresh memory for every write.
    pub async fn write_reusable_at(
        &self,
        buf: AlignedBuf,
        position: u64,
    ) -> (io::Result<()>, Option<AlignedBuf>) {
        if let Some(faults) = &self.faults {
            // Boxed so that the real path's future does not carry the faulty one's state.
            return Box::pin(faulty_direct_write(&self.inner, faults, buf, position)).await;
        }
        direct_write(&self.inner, buf, position).await
    }

    /// Reads up to `len` bytes at `position` (any alignment). Fewer bytes come back at the end
    /// of the file.
    pub async fn read_at(&self, position: u64, len: usize) -> io::Result<ReadBuf> {
        Ok(ReadBuf(
            self.inner.read_at(position, len).await.map_err(os_error)?,
        ))
    }

    /// fdatasync.
    pub async fn sync_data(&self) -> io::Result<()> {
        let Some(faults) = &self.faults else {
            return self.inner.fdatasync().await.map_err(os_error);
        };
        Box::pin(faulty_sync(faults, async {
            self.inner.fdatasync().await.map_err(os_error)
        }))
        .await
    }

    /// Reserves blocks up to `size` bytes; with `keep_size` the visible file size is unchanged.
    pub async fn pre_allocate(&self, size: u64, keep_size: bool) -> io::Result<()> {
        let Some(faults) = &self.faults else {
            return self
                .inner
                .pre_allocate(size, keep_size)
                .await
                .map_err(os_error);
        };
        faults.disk.gate(FaultOp::Allocate, &faults.path).await?;
        faults.reserve_growth(size)?;
        self.inner
            .pre_allocate(size, keep_size)
            .await
            .map_err(os_error)?;
        if !keep_size {
            faults.allocated(size);
        }
        Ok(())
    }

    /// Truncates or extends the file to `size` bytes: a direct `ftruncate` (see [`ftruncate`]).
    pub async fn truncate(&self, size: u64) -> io::Result<()> {
        faulty_truncate(self.faults.as_deref(), self.inner.as_raw_fd(), size).await
    }

    /// Current file size.
    pub async fn size(&self) -> io::Result<u64> {
        self.inner.file_size().await.map_err(os_error)
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
/// page cache, so its descriptor is the one to hand to `sendfile`. Lives on one core; carries
/// its disk's fault context like [`DirectFile`].
pub struct BufferedFile {
    inner: glommio::io::BufferedFile,
    faults: Option<Rc<FileFaults>>,
}

impl BufferedFile {
    /// Opens an existing file read-only (`O_RDONLY`).
    pub async fn open_read(path: impl AsRef<Path>) -> io::Result<BufferedFile> {
        let inner = glommio::io::BufferedFile::open(path.as_ref())
            .await
            .map_err(os_error)?;
        Ok(BufferedFile {
            inner,
            faults: None,
        })
    }

    /// Opens a file for reading and writing, creating it when `create` is set. Never truncates.
    pub async fn open_write(path: impl AsRef<Path>, create: bool) -> io::Result<BufferedFile> {
        let inner = glommio::io::OpenOptions::new()
            .read(true)
            .write(true)
            .create(create)
            .buffered_open(path.as_ref())
            .await
            .map_err(os_error)?;
        Ok(BufferedFile {
            inner,
            faults: None,
        })
    }

    /// Reads up to `len` bytes at `position`; fewer come back at the end of the file.
    pub async fn read_at(&self, position: u64, len: usize) -> io::Result<ReadBuf> {
        Ok(ReadBuf(
            self.inner.read_at(position, len).await.map_err(os_error)?,
        ))
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
        let Some(faults) = &self.faults else {
            return buffered_write(&self.inner, buf, position).await;
        };
        Box::pin(faulty_buffered_write(&self.inner, faults, buf, position)).await
    }

    /// fdatasync.
    pub async fn sync_data(&self) -> io::Result<()> {
        let Some(faults) = &self.faults else {
            return self.inner.fdatasync().await.map_err(os_error);
        };
        Box::pin(faulty_sync(faults, async {
            self.inner.fdatasync().await.map_err(os_error)
        }))
        .await
    }

    /// Truncates or extends the file to `size` bytes: a direct `ftruncate` (see [`ftruncate`]).
    pub async fn truncate(&self, size: u64) -> io::Result<()> {
        faulty_truncate(self.faults.as_deref(), self.inner.as_raw_fd(), size).await
    }

    /// Current file size.
    pub async fn size(&self) -> io::Result<u64> {
        self.inner.file_size().await.map_err(os_error)
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

/// A direct-IO write of the whole buffer, handing the buffer back when the ring released it.
async fn direct_write(
    file: &glommio::io::DmaFile,
    buf: AlignedBuf,
    position: u64,
) -> (io::Result<()>, Option<AlignedBuf>) {
    let len = buf.len();
    let shared = Rc::new(buf.0);
    let result = match file.write_rc_at(shared.clone(), position).await {
        Ok(written) if written == len => Ok(()),
        Ok(written) => Err(io::Error::new(
            io::ErrorKind::WriteZero,
            format!("short direct write: {written} of {len} bytes at {position}"),
        )),
        Err(e) => Err(os_error(e)),
    };
    (result, Rc::try_unwrap(shared).ok().map(AlignedBuf))
}

/// [`direct_write`] on a faulty disk: the rule's fault first; a torn write stores the first
/// `keep_bytes` (the rest of the aligned range is rewritten with the bytes it held) and fails.
async fn faulty_direct_write(
    file: &glommio::io::DmaFile,
    faults: &FileFaults,
    mut buf: AlignedBuf,
    position: u64,
) -> (io::Result<()>, Option<AlignedBuf>) {
    let len = buf.len();
    let keep = match faults.disk.before(FaultOp::Write, &faults.path) {
        None => len,
        Some(crate::fault::Fault::Fail(code)) => {
            return (Err(io::Error::from_raw_os_error(code)), Some(buf))
        }
        Some(crate::fault::Fault::Delay(d)) => {
            crate::time::sleep(d).await;
            len
        }
        Some(crate::fault::Fault::Torn { keep_bytes }) => keep_bytes.min(len),
    };
    if let Err(e) = faults.reserve_growth(position + len as u64) {
        return (Err(e), Some(buf));
    }
    if keep < len {
        let old = match file.read_at(position + keep as u64, len - keep).await {
            Ok(old) => old,
            Err(e) => return (Err(os_error(e)), Some(buf)),
        };
        let dst = &mut buf.as_bytes_mut()[keep..];
        dst.fill(0);
        dst[..old.len()].copy_from_slice(&old);
    }
    let kept = buf.as_bytes()[..keep].to_vec();
    let (result, buf) = direct_write(file, buf, position).await;
    if result.is_ok() {
        faults.wrote(position, &kept);
    }
    if keep < len {
        return (Err(io::Error::from_raw_os_error(libc::EIO)), buf);
    }
    (result, buf)
}

async fn buffered_write(
    file: &glommio::io::BufferedFile,
    buf: Vec<u8>,
    position: u64,
) -> io::Result<()> {
    let len = buf.len();
    let written = file.write_at(buf, position).await.map_err(os_error)?;
    if written != len {
        return Err(io::Error::new(
            io::ErrorKind::WriteZero,
            format!("short write: {written} of {len} bytes at {position}"),
        ));
    }
    Ok(())
}

/// [`buffered_write`] on a faulty disk (a torn write stores only the first `keep_bytes`).
async fn faulty_buffered_write(
    file: &glommio::io::BufferedFile,
    faults: &FileFaults,
    mut buf: Vec<u8>,
    position: u64,
) -> io::Result<()> {
    let len = buf.len();
    let keep = match faults.disk.before(FaultOp::Write, &faults.path) {
        None => len,
        Some(crate::fault::Fault::Fail(code)) => return Err(io::Error::from_raw_os_error(code)),
        Some(crate::fault::Fault::Delay(d)) => {
            crate::time::sleep(d).await;
            len
        }
        Some(crate::fault::Fault::Torn { keep_bytes }) => keep_bytes.min(len),
    };
    buf.truncate(keep);
    faults.reserve_growth(position + keep as u64)?;
    let kept = buf.clone();
    if !buf.is_empty() {
        buffered_write(file, buf, position).await?;
    }
    faults.wrote(position, &kept);
    if keep < len {
        return Err(io::Error::from_raw_os_error(libc::EIO));
    }
    Ok(())
}

/// An fdatasync on a faulty disk: the rule's fault, else `sync`; on success what was written
/// before it started becomes durable.
async fn faulty_sync(
    faults: &FileFaults,
    sync: impl std::future::Future<Output = io::Result<()>>,
) -> io::Result<()> {
    faults.disk.gate(FaultOp::Sync, &faults.path).await?;
    let covers = faults.sync_started();
    sync.await?;
    faults.synced(covers);
    Ok(())
}

/// `ftruncate`, through the fault context when there is one.
async fn faulty_truncate(faults: Option<&FileFaults>, fd: RawFd, size: u64) -> io::Result<()> {
    let Some(faults) = faults else {
        return ftruncate(fd, size);
    };
    faults.disk.gate(FaultOp::Truncate, &faults.path).await?;
    ftruncate(fd, size)?;
    faults.set_len(size)
}

/// The disk a component's files live on: the real one, or a [`FaultyDisk`] that tests use to
/// inject faults and simulate power loss. An enum, so the real disk costs one branch per open
/// and one `None` check per file operation. Every file a component mutates should be opened
/// and renamed, removed and synced through its `Disk`. Lives on one core.
#[derive(Clone, Default)]
pub enum Disk {
    /// The real file system.
    #[default]
    Real,
    /// The real file system behind injected faults (tests).
    Faulty(Rc<FaultyDisk>),
}

impl Disk {
    /// [`DirectFile::open_read`].
    pub async fn open_direct_read(&self, path: impl AsRef<Path>) -> io::Result<DirectFile> {
        let path = path.as_ref();
        let Disk::Faulty(disk) = self else {
            return DirectFile::open_read(path).await;
        };
        disk.gate(FaultOp::Open, path).await?;
        let mut file = DirectFile::open_read(path).await?;
        file.faults = Some(Rc::new(disk.opened_read(path)));
        Ok(file)
    }

    /// [`DirectFile::open_write`].
    pub async fn open_direct_write(
        &self,
        path: impl AsRef<Path>,
        create: bool,
    ) -> io::Result<DirectFile> {
        let path = path.as_ref();
        let Disk::Faulty(disk) = self else {
            return DirectFile::open_write(path, create).await;
        };
        let existed = disk.before_open_write(path, create).await?;
        let mut file = DirectFile::open_write(path, create).await?;
        file.faults = Some(Rc::new(disk.opened_write(path, existed)));
        Ok(file)
    }

    /// [`BufferedFile::open_read`].
    pub async fn open_buffered_read(&self, path: impl AsRef<Path>) -> io::Result<BufferedFile> {
        let path = path.as_ref();
        let Disk::Faulty(disk) = self else {
            return BufferedFile::open_read(path).await;
        };
        disk.gate(FaultOp::Open, path).await?;
        let mut file = BufferedFile::open_read(path).await?;
        file.faults = Some(Rc::new(disk.opened_read(path)));
        Ok(file)
    }

    /// [`BufferedFile::open_write`].
    pub async fn open_buffered_write(
        &self,
        path: impl AsRef<Path>,
        create: bool,
    ) -> io::Result<BufferedFile> {
        let path = path.as_ref();
        let Disk::Faulty(disk) = self else {
            return BufferedFile::open_write(path, create).await;
        };
        let existed = disk.before_open_write(path, create).await?;
        let mut file = BufferedFile::open_write(path, create).await?;
        file.faults = Some(Rc::new(disk.opened_write(path, existed)));
        Ok(file)
    }

    /// [`replace_file`]: on a faulty disk as its steps (create the temporary file, write,
    /// fdatasync, rename, fsync the directory), each open to faults.
    pub async fn replace_file(
        &self,
        path: impl AsRef<Path>,
        contents: Vec<u8>,
        sync_parent: bool,
    ) -> io::Result<()> {
        let path = path.as_ref();
        if matches!(self, Disk::Real) {
            return replace_file(path, contents, sync_parent).await;
        }
        let (dir, tmp) = temporary_path(path)?;
        let f = self.open_buffered_write(&tmp, true).await?;
        f.truncate(0).await?;
        f.write_all_at(contents, 0).await?;
        f.sync_data().await?;
        f.close().await?;
        self.rename(&tmp, path).await?;
        if sync_parent {
            self.sync_dir(dir).await?;
        }
        Ok(())
    }

    /// [`sync_dir_async`].
    pub async fn sync_dir(&self, dir: impl AsRef<Path>) -> io::Result<()> {
        match self {
            Disk::Real => sync_dir_async(dir).await,
            Disk::Faulty(disk) => disk.sync_dir(dir.as_ref()).await,
        }
    }

    /// [`remove_file`].
    pub async fn remove_file(&self, path: impl AsRef<Path>) -> io::Result<()> {
        match self {
            Disk::Real => remove_file(path).await,
            Disk::Faulty(disk) => disk.remove_file(path.as_ref()).await,
        }
    }

    /// [`rename`].
    pub async fn rename(&self, from: impl AsRef<Path>, to: impl AsRef<Path>) -> io::Result<()> {
        match self {
            Disk::Real => rename(from, to).await,
            Disk::Faulty(disk) => disk.rename(from.as_ref(), to.as_ref()).await,
        }
    }

    /// Creates `dir` and its missing parents (a direct `mkdir`, see [`ftruncate`]).
    pub async fn create_dir_all(&self, dir: impl AsRef<Path>) -> io::Result<()> {
        match self {
            Disk::Real => std::fs::create_dir_all(dir),
            Disk::Faulty(disk) => disk.create_dir_all(dir.as_ref()).await,
        }
    }

    /// Bytes available to this process on the file system holding `path` (`statvfs`:
    /// `f_bavail x f_frsize`, what `df` shows as available); on a faulty disk with a
    /// free-space model, the model's figure.
    pub fn free_bytes(&self, path: impl AsRef<Path>) -> io::Result<u64> {
        if let Disk::Faulty(disk) = self {
            if let Some(free) = disk.probe_free_bytes() {
                return Ok(free);
            }
        }
        free_bytes(path)
    }
}

/// `statvfs(2)`: bytes available to unprivileged users on the file system holding `path`.
pub fn free_bytes(path: impl AsRef<Path>) -> io::Result<u64> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_ref().as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path contains a NUL byte"))?;
    // SAFETY: `statvfs` writes into the zeroed struct we pass; `c` is a valid C string.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: see above; both pointers are valid for the call.
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(st.f_bavail.saturating_mul(st.f_frsize))
}

/// `(directory, .<name>.tmp)` for replacing `path`.
fn temporary_path(path: &Path) -> io::Result<(&Path, std::path::PathBuf)> {
    match (path.parent(), path.file_name()) {
        (Some(d), Some(n)) => Ok((d, d.join(format!(".{}.tmp", n.to_string_lossy())))),
        _ => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "path has no parent or file name",
        )),
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
    let d = glommio::io::Directory::open(dir.as_ref())
        .await
        .map_err(os_error)?;
    d.sync().await.map_err(os_error)?;
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
    let (dir, tmp) = temporary_path(path)?;
    let f = glommio::io::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .buffered_open(&tmp)
        .await
        .map_err(os_error)?;
    let len = contents.len();
    let written = f.write_at(contents, 0).await.map_err(os_error)?;
    if written != len {
        return Err(io::Error::new(io::ErrorKind::WriteZero, "short write"));
    }
    f.fdatasync().await.map_err(os_error)?;
    f.close().await.map_err(os_error)?;
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
        // Every core primes the same directory at start-up: a plain write would truncate the
        // file while another core opens it, and an empty file is exactly what misleads glommio
        // (one core then parked for good at start-up under load). Written beside and renamed
        // over, the probe is always either absent or whole.
        std::fs::create_dir_all(dir.as_ref())?;
        let tmp = dir.as_ref().join(format!(
            ".borges-device-probe.{}.{:?}.tmp",
            std::process::id(),
            std::thread::current().id()
        ));
        std::fs::write(&tmp, vec![0u8; 4096])?;
        std::fs::rename(&tmp, &path)?;
    }
    tracing::debug!(path = %path.display(), "device probe: opening");
    let file = DirectFile::open_read(&path).await?;
    tracing::debug!(path = %path.display(), "device probe: opened, reading");
    let _ = file.read_at(0, 512).await?;
    tracing::debug!(path = %path.display(), "device probe: read");
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
    let dir = directory_of(path)?;
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

/// The directory `path` is in: `.` for a bare file name (`--ready-file ready.json` failed with
/// "No such file or directory" when the empty parent was synced).
fn directory_of(path: &Path) -> io::Result<&Path> {
    match path.parent() {
        Some(d) if d.as_os_str().is_empty() => Ok(Path::new(".")),
        Some(d) => Ok(d),
        None => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "path has no parent",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bare_file_name_is_in_the_working_directory() {
        assert_eq!(
            directory_of(Path::new("ready.json")).unwrap(),
            Path::new(".")
        );
        assert_eq!(directory_of(Path::new("a/b.json")).unwrap(), Path::new("a"));
        assert_eq!(directory_of(Path::new("/x")).unwrap(), Path::new("/"));
        assert!(directory_of(Path::new("/")).is_err());
    }

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
