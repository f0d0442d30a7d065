//! A faulty disk for tests: the real files, with faults injected in front of them and a record
//! of what a power loss may take away.
//!
//! A [`FaultyDisk`] is reached through [`crate::fs::Disk::Faulty`]; files opened through it do
//! their real IO on the real file system, so what a component reads back (recovery included) is
//! what the faulty disk left. On top of the real IO it
//! - injects faults by rule ([`FaultRule`]): an errno instead of the operation (`EIO` on write
//!   or fdatasync, `ENOSPC`, `EMFILE` on open), a torn write that stores only the first
//!   `keep_bytes` of a write and then fails with `EIO`, or a delay before the operation (a slow
//!   disk);
//! - optionally models free space ([`FaultyDisk::set_free_bytes`]): growing a file or creating
//!   one fails with `ENOSPC` when the space is gone, removing and shrinking gives it back, and
//!   the free-space probe answers from the model;
//! - counts the operations that completed ([`FaultyDisk::count`]), so a test can tell an
//!   fdatasync from none;
//! - journals every mutation not yet made durable, so that [`FaultyDisk::power_loss`] can put
//!   the files where a power loss may leave them: data written since a file's last fdatasync
//!   kept, lost or torn, and creations, renames and removals since the directory's last fsync
//!   undone (a prefix of them survives, as a journaling file system commits them in order).
//!
//! What it does not model: faults on reads, directory removal (`remove_dir_all`), hard links,
//! and files mutated outside [`crate::fs::Disk`] (they are taken as durable as they are when
//! first touched through it). Lives on one core (`Rc`, `RefCell`).

use std::cell::RefCell;
use std::collections::HashMap;
use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The operations a [`FaultRule`] can target.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FaultOp {
    /// Opening a file (read-only or for writing; creating it or not).
    Open,
    /// A write (direct or buffered).
    Write,
    /// fdatasync of a file.
    Sync,
    /// Pre-allocation (`fallocate`).
    Allocate,
    /// `ftruncate`.
    Truncate,
    /// Renaming a file.
    Rename,
    /// Removing a file.
    Remove,
    /// fsync of a directory.
    SyncDir,
    /// Creating a directory.
    CreateDir,
}

/// What an injected fault does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Fault {
    /// The operation is not done and fails with this errno (`libc::EIO`, `libc::ENOSPC`, ...).
    Fail(i32),
    /// Writes only: the first `keep_bytes` of the write reach the file, the rest of the range
    /// keeps its old bytes, and the write fails with `EIO`.
    Torn {
        /// Bytes of the write that reach the file.
        keep_bytes: usize,
    },
    /// The operation waits this long (real time), then runs normally.
    Delay(Duration),
}

/// Injects `fault` into operations `op` on paths containing `path_contains`: the first `skip`
/// matching operations pass, the next `count` get the fault, later ones pass again.
#[derive(Clone, Debug)]
pub struct FaultRule {
    /// The operation.
    pub op: FaultOp,
    /// Substring the path must contain ("" matches every path).
    pub path_contains: String,
    /// Matching operations let through before the fault applies.
    pub skip: u64,
    /// Matching operations that get the fault (`u64::MAX`: all of them).
    pub count: u64,
    /// The fault.
    pub fault: Fault,
}

impl FaultRule {
    /// `fault` on the next `op` on any path.
    pub fn new(op: FaultOp, fault: Fault) -> FaultRule {
        FaultRule {
            op,
            path_contains: String::new(),
            skip: 0,
            count: 1,
            fault,
        }
    }

    /// Only on paths containing `part` (a file suffix such as ".log").
    pub fn on_path(mut self, part: &str) -> FaultRule {
        self.path_contains = part.to_string();
        self
    }

    /// Lets the first `skip` matching operations through.
    pub fn after(mut self, skip: u64) -> FaultRule {
        self.skip = skip;
        self
    }

    /// Applies to `count` matching operations.
    pub fn times(mut self, count: u64) -> FaultRule {
        self.count = count;
        self
    }

    /// Applies to every matching operation from now on.
    pub fn forever(self) -> FaultRule {
        self.times(u64::MAX)
    }
}

/// How [`FaultyDisk::power_loss`] treats what was not made durable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PowerLoss {
    /// Every byte not fdatasynced and every name change not fsynced in its directory is lost.
    DropUnsynced,
    /// Each unsynced write is kept, lost or torn at a random byte, each unsynced size change
    /// kept or lost, and a random prefix of each directory's unsynced name changes survives;
    /// the same seed gives the same outcome.
    Random(u64),
}

/// A change of a file's contents, in completion order.
#[derive(Clone, Debug)]
enum Mutation {
    Write { position: u64, data: Vec<u8> },
    SetLen(u64),
    Extend(u64),
}

/// A file's contents as a power loss may leave them.
#[derive(Default)]
struct Inode {
    /// Contents covered by a completed fdatasync.
    durable: Vec<u8>,
    /// Mutations since, with their sequence numbers.
    pending: Vec<(u64, Mutation)>,
    next_seq: u64,
    /// Current length (for the free-space model).
    len: u64,
}

/// A change of a directory's entries not yet fsynced.
#[derive(Clone, Debug)]
enum NameOp {
    Link(PathBuf, u64),
    Unlink(PathBuf),
    Rename(PathBuf, PathBuf),
    Mkdir(PathBuf),
}

#[derive(Default)]
struct State {
    rules: Vec<FaultRule>,
    completed: Vec<(FaultOp, PathBuf)>,
    free_bytes: Option<u64>,
    inodes: HashMap<u64, Inode>,
    next_inode: u64,
    /// Current names of tracked files.
    names: HashMap<PathBuf, u64>,
    /// Names as the last fsync of their directory left them (`None`: absent).
    durable_names: HashMap<PathBuf, Option<u64>>,
    /// Directories created through the disk and whether their creation is durable.
    durable_dirs: HashMap<PathBuf, bool>,
    /// Unsynced name changes per directory, in order.
    dir_ops: HashMap<PathBuf, Vec<NameOp>>,
}

/// The faulty disk. See the module documentation. Lives on one core.
#[derive(Default)]
pub struct FaultyDisk {
    state: RefCell<State>,
}

/// What a file opened through a [`FaultyDisk`] carries: the disk, its path, its inode.
pub(crate) struct FileFaults {
    pub disk: std::rc::Rc<FaultyDisk>,
    pub path: PathBuf,
    inode: Option<u64>,
}

fn errno(code: i32) -> io::Error {
    io::Error::from_raw_os_error(code)
}

fn parent(path: &Path) -> PathBuf {
    path.parent().map(Path::to_path_buf).unwrap_or_default()
}

impl FaultyDisk {
    /// A disk without rules, with real free space.
    pub fn new() -> std::rc::Rc<FaultyDisk> {
        std::rc::Rc::new(FaultyDisk::default())
    }

    /// Adds a rule (rules are tried in the order they were added; the first that fires wins).
    pub fn inject(&self, rule: FaultRule) {
        self.state.borrow_mut().rules.push(rule);
    }

    /// Removes every rule.
    pub fn clear_faults(&self) {
        self.state.borrow_mut().rules.clear();
    }

    /// Models free space: `Some(n)` bytes left (growing files takes from it, removing and
    /// shrinking gives back, the free-space probe answers it), `None` the real file system.
    pub fn set_free_bytes(&self, free: Option<u64>) {
        self.state.borrow_mut().free_bytes = free;
    }

    /// Free bytes in the model, if it is on.
    pub fn modelled_free_bytes(&self) -> Option<u64> {
        self.state.borrow().free_bytes
    }

    /// Completed operations `op` on paths containing `path_contains`.
    pub fn count(&self, op: FaultOp, path_contains: &str) -> u64 {
        let st = self.state.borrow();
        st.completed
            .iter()
            .filter(|(o, p)| *o == op && p.to_string_lossy().contains(path_contains))
            .count() as u64
    }

    /// The fault for the next `op` on `path`, consuming the rule's skip or count.
    pub(crate) fn before(&self, op: FaultOp, path: &Path) -> Option<Fault> {
        let mut st = self.state.borrow_mut();
        let text = path.to_string_lossy();
        for rule in st.rules.iter_mut() {
            if rule.op != op || !text.contains(rule.path_contains.as_str()) {
                continue;
            }
            if rule.skip > 0 {
                rule.skip -= 1;
                continue;
            }
            if rule.count > 0 {
                if rule.count != u64::MAX {
                    rule.count -= 1;
                }
                return Some(rule.fault.clone());
            }
        }
        None
    }

    /// Applies a fault that is not a torn write: an error, or a delay then `Ok`.
    pub(crate) async fn gate(&self, op: FaultOp, path: &Path) -> io::Result<()> {
        match self.before(op, path) {
            None => Ok(()),
            Some(Fault::Fail(code)) => Err(errno(code)),
            Some(Fault::Delay(d)) => {
                crate::time::sleep(d).await;
                Ok(())
            }
            // Only writes can tear; elsewhere a torn write is an I/O error.
            Some(Fault::Torn { .. }) => Err(errno(libc::EIO)),
        }
    }

    pub(crate) fn completed(&self, op: FaultOp, path: &Path) {
        self.state
            .borrow_mut()
            .completed
            .push((op, path.to_path_buf()));
    }

    /// Takes `bytes` from the free-space model; `ENOSPC` if they are not there.
    fn take_space(st: &mut State, bytes: u64) -> io::Result<()> {
        match st.free_bytes {
            Some(free) if bytes > free => Err(errno(libc::ENOSPC)),
            Some(free) => {
                st.free_bytes = Some(free - bytes);
                Ok(())
            }
            None => Ok(()),
        }
    }

    fn give_space(st: &mut State, bytes: u64) {
        if let Some(free) = st.free_bytes.as_mut() {
            *free += bytes;
        }
    }

    /// Free bytes for the probe: the model's, or `None` for the real file system's.
    pub(crate) fn probe_free_bytes(&self) -> Option<u64> {
        self.state.borrow().free_bytes
    }

    /// Starts tracking `path` if it exists and is not tracked: its current contents count as
    /// durable. Returns its inode.
    fn track_existing(st: &mut State, path: &Path) -> Option<u64> {
        if let Some(&ino) = st.names.get(path) {
            return Some(ino);
        }
        let contents = std::fs::read(path).ok()?;
        let ino = st.next_inode;
        st.next_inode += 1;
        st.inodes.insert(
            ino,
            Inode {
                len: contents.len() as u64,
                durable: contents,
                ..Inode::default()
            },
        );
        st.names.insert(path.to_path_buf(), ino);
        st.durable_names
            .entry(path.to_path_buf())
            .or_insert(Some(ino));
        Some(ino)
    }

    /// Before opening `path` for writing: the fault, and space for a new file. Starts tracking
    /// an existing file before the open; returns whether it existed.
    pub(crate) async fn before_open_write(&self, path: &Path, create: bool) -> io::Result<bool> {
        self.gate(FaultOp::Open, path).await?;
        let mut st = self.state.borrow_mut();
        let existed = Self::track_existing(&mut st, path).is_some();
        if create && !existed && st.free_bytes == Some(0) {
            return Err(errno(libc::ENOSPC));
        }
        Ok(existed)
    }

    /// After a successful open for writing: the file's fault context; a file that did not
    /// exist is an unsynced creation in its directory.
    pub(crate) fn opened_write(self: &std::rc::Rc<Self>, path: &Path, existed: bool) -> FileFaults {
        let mut st = self.state.borrow_mut();
        let ino = match st.names.get(path) {
            Some(&ino) if existed => ino,
            _ => Self::link_new(&mut st, path),
        };
        drop(st);
        self.completed(FaultOp::Open, path);
        FileFaults {
            disk: self.clone(),
            path: path.to_path_buf(),
            inode: Some(ino),
        }
    }

    /// A file opened read-only: faults by rule only, nothing tracked.
    pub(crate) fn opened_read(self: &std::rc::Rc<Self>, path: &Path) -> FileFaults {
        self.completed(FaultOp::Open, path);
        FileFaults {
            disk: self.clone(),
            path: path.to_path_buf(),
            inode: None,
        }
    }

    fn link_new(st: &mut State, path: &Path) -> u64 {
        let ino = st.next_inode;
        st.next_inode += 1;
        st.inodes.insert(ino, Inode::default());
        st.names.insert(path.to_path_buf(), ino);
        st.durable_names.entry(path.to_path_buf()).or_insert(None);
        st.dir_ops
            .entry(parent(path))
            .or_default()
            .push(NameOp::Link(path.to_path_buf(), ino));
        ino
    }

    /// Removes `path` (tracked as an unsynced unlink).
    pub(crate) async fn remove_file(&self, path: &Path) -> io::Result<()> {
        self.gate(FaultOp::Remove, path).await?;
        {
            let mut st = self.state.borrow_mut();
            Self::track_existing(&mut st, path);
        }
        std::fs::remove_file(path)?;
        let mut st = self.state.borrow_mut();
        if let Some(ino) = st.names.remove(path) {
            let len = st.inodes.get(&ino).map_or(0, |i| i.len);
            Self::give_space(&mut st, len);
        }
        st.dir_ops
            .entry(parent(path))
            .or_default()
            .push(NameOp::Unlink(path.to_path_buf()));
        drop(st);
        self.completed(FaultOp::Remove, path);
        Ok(())
    }

    /// Renames `from` to `to` (tracked as an unsynced rename in `from`'s directory).
    pub(crate) async fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.gate(FaultOp::Rename, from).await?;
        {
            let mut st = self.state.borrow_mut();
            Self::track_existing(&mut st, from);
            Self::track_existing(&mut st, to);
        }
        std::fs::rename(from, to)?;
        let mut st = self.state.borrow_mut();
        if let Some(old) = st.names.remove(to) {
            let len = st.inodes.get(&old).map_or(0, |i| i.len);
            Self::give_space(&mut st, len);
        }
        if let Some(ino) = st.names.remove(from) {
            st.names.insert(to.to_path_buf(), ino);
        }
        st.durable_names.entry(to.to_path_buf()).or_insert(None);
        st.dir_ops
            .entry(parent(from))
            .or_default()
            .push(NameOp::Rename(from.to_path_buf(), to.to_path_buf()));
        drop(st);
        self.completed(FaultOp::Rename, from);
        Ok(())
    }

    /// Creates `dir` and its missing parents (each an unsynced creation in its parent).
    pub(crate) async fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        let mut missing = Vec::new();
        let mut at = Some(dir);
        while let Some(d) = at.filter(|d| !d.as_os_str().is_empty() && !d.exists()) {
            missing.push(d.to_path_buf());
            at = d.parent();
        }
        for d in missing.into_iter().rev() {
            self.gate(FaultOp::CreateDir, &d).await?;
            if self.state.borrow().free_bytes == Some(0) {
                return Err(errno(libc::ENOSPC));
            }
            std::fs::create_dir(&d)?;
            let mut st = self.state.borrow_mut();
            st.durable_dirs.insert(d.clone(), false);
            st.dir_ops
                .entry(parent(&d))
                .or_default()
                .push(NameOp::Mkdir(d.clone()));
            drop(st);
            self.completed(FaultOp::CreateDir, &d);
        }
        Ok(())
    }

    /// fsync of `dir`: its name changes so far become durable.
    pub(crate) async fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        self.gate(FaultOp::SyncDir, dir).await?;
        crate::fs::sync_dir(dir)?;
        let mut st = self.state.borrow_mut();
        let ops = st.dir_ops.remove(dir).unwrap_or_default();
        for op in ops {
            apply_name_op(&mut st, &op);
        }
        drop(st);
        self.completed(FaultOp::SyncDir, dir);
        Ok(())
    }

    /// Puts every tracked file where a power loss may leave it (see [`PowerLoss`]) and makes
    /// that state the durable one. Call it with the component that wrote the files stopped
    /// (crashed): their open files are no longer to be used.
    pub fn power_loss(&self, mode: PowerLoss) -> io::Result<()> {
        let mut rng = SplitMix(match mode {
            PowerLoss::DropUnsynced => 0,
            PowerLoss::Random(seed) => seed,
        });
        let random = matches!(mode, PowerLoss::Random(_));
        let mut st = self.state.borrow_mut();
        let mut dirs: Vec<PathBuf> = st.dir_ops.keys().cloned().collect();
        dirs.sort();
        for dir in dirs {
            let ops = st.dir_ops.remove(&dir).unwrap_or_default();
            let keep = if random {
                rng.below(ops.len() as u64 + 1) as usize
            } else {
                0
            };
            for op in &ops[..keep] {
                apply_name_op(&mut st, op);
            }
        }
        let mut inodes: Vec<u64> = st.inodes.keys().copied().collect();
        inodes.sort_unstable();
        for ino in inodes {
            let inode = st.inodes.get_mut(&ino).expect("listed");
            let image = power_loss_image(inode, random.then_some(&mut rng));
            inode.len = image.len() as u64;
            inode.durable = image;
            inode.pending.clear();
        }
        materialize(&mut st)
    }
}

/// Makes one directory change durable.
fn apply_name_op(st: &mut State, op: &NameOp) {
    match op {
        NameOp::Link(path, ino) => {
            st.durable_names.insert(path.clone(), Some(*ino));
        }
        NameOp::Unlink(path) => {
            st.durable_names.insert(path.clone(), None);
        }
        NameOp::Rename(from, to) => {
            let ino = st.durable_names.get(from).copied().flatten();
            st.durable_names.insert(to.clone(), ino);
            st.durable_names.insert(from.clone(), None);
        }
        NameOp::Mkdir(dir) => {
            st.durable_dirs.insert(dir.clone(), true);
        }
    }
}

/// A file's contents after a power loss: the durable contents plus each pending mutation kept,
/// lost or (writes) torn, chosen by `rng`; without `rng` all pending mutations are lost.
fn power_loss_image(inode: &Inode, mut rng: Option<&mut SplitMix>) -> Vec<u8> {
    let mut image = inode.durable.clone();
    for (_, m) in &inode.pending {
        let Some(rng) = rng.as_deref_mut() else {
            break;
        };
        match (m, rng.below(3)) {
            (_, 0) => {}
            (Mutation::Write { position, data }, 1) => apply_write(&mut image, *position, data),
            (Mutation::Write { position, data }, _) => {
                let keep = rng.below(data.len() as u64 + 1) as usize;
                apply_write(&mut image, *position, &data[..keep]);
            }
            (m, _) => apply_mutation(&mut image, m),
        }
    }
    image
}

fn apply_write(image: &mut Vec<u8>, position: u64, data: &[u8]) {
    let start = position as usize;
    let end = start + data.len();
    if image.len() < end {
        image.resize(end, 0);
    }
    image[start..end].copy_from_slice(data);
}

fn apply_mutation(image: &mut Vec<u8>, m: &Mutation) {
    match m {
        Mutation::Write { position, data } => apply_write(image, *position, data),
        Mutation::SetLen(len) => image.resize(*len as usize, 0),
        Mutation::Extend(len) => {
            if image.len() < *len as usize {
                image.resize(*len as usize, 0);
            }
        }
    }
}

/// Writes the durable state to the real files: durable names get their inode's contents,
/// other tracked names are removed, directories whose creation was lost go with their contents.
fn materialize(st: &mut State) -> io::Result<()> {
    let lost_dirs: Vec<PathBuf> = st
        .durable_dirs
        .iter()
        .filter(|(_, durable)| !**durable)
        .map(|(d, _)| d.clone())
        .collect();
    let in_lost_dir = |p: &Path| lost_dirs.iter().any(|d| p.starts_with(d));
    let mut paths: Vec<PathBuf> = st
        .durable_names
        .keys()
        .chain(st.names.keys())
        .cloned()
        .collect();
    paths.sort();
    paths.dedup();
    for path in &paths {
        if in_lost_dir(path) {
            continue;
        }
        match st.durable_names.get(path).copied().flatten() {
            Some(ino) => std::fs::write(path, &st.inodes[&ino].durable)?,
            None => match std::fs::remove_file(path) {
                Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
                _ => {}
            },
        }
    }
    for dir in &lost_dirs {
        match std::fs::remove_dir_all(dir) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
            _ => {}
        }
    }
    st.durable_dirs.retain(|_, durable| *durable);
    st.durable_names.retain(|p, _| !in_lost_dir(p));
    st.names = st
        .durable_names
        .iter()
        .filter_map(|(p, ino)| ino.map(|i| (p.clone(), i)))
        .collect();
    Ok(())
}

impl FileFaults {
    fn with_inode<R>(&self, f: impl FnOnce(&mut State, u64) -> R) -> Option<R> {
        let ino = self.inode?;
        let mut st = self.disk.state.borrow_mut();
        Some(f(&mut st, ino))
    }

    /// Space for growing the file to `end` bytes (the free-space model).
    pub fn reserve_growth(&self, end: u64) -> io::Result<()> {
        self.with_inode(|st, ino| {
            let len = st.inodes.get(&ino).map_or(0, |i| i.len);
            FaultyDisk::take_space(st, end.saturating_sub(len))
        })
        .unwrap_or(Ok(()))
    }

    fn record(&self, m: Mutation) {
        self.with_inode(|st, ino| {
            let inode = st.inodes.entry(ino).or_default();
            inode.len = match &m {
                Mutation::Write { position, data } => inode.len.max(position + data.len() as u64),
                Mutation::SetLen(len) => *len,
                Mutation::Extend(len) => inode.len.max(*len),
            };
            let seq = inode.next_seq;
            inode.next_seq += 1;
            inode.pending.push((seq, m));
        });
    }

    /// A write of `data` at `position` completed.
    pub fn wrote(&self, position: u64, data: &[u8]) {
        self.record(Mutation::Write {
            position,
            data: data.to_vec(),
        });
        self.disk.completed(FaultOp::Write, &self.path);
    }

    /// The file was cut or extended to `len` bytes.
    pub fn set_len(&self, len: u64) -> io::Result<()> {
        self.with_inode(|st, ino| {
            let cur = st.inodes.get(&ino).map_or(0, |i| i.len);
            if len > cur {
                FaultyDisk::take_space(st, len - cur)
            } else {
                FaultyDisk::give_space(st, cur - len);
                Ok(())
            }
        })
        .unwrap_or(Ok(()))?;
        self.record(Mutation::SetLen(len));
        self.disk.completed(FaultOp::Truncate, &self.path);
        Ok(())
    }

    /// Blocks were reserved up to `len` bytes (the visible size grows with them).
    pub fn allocated(&self, len: u64) {
        self.record(Mutation::Extend(len));
        self.disk.completed(FaultOp::Allocate, &self.path);
    }

    /// The sequence number an fdatasync starting now covers (everything recorded before it).
    pub fn sync_started(&self) -> u64 {
        self.with_inode(|st, ino| st.inodes.get(&ino).map_or(0, |i| i.next_seq))
            .unwrap_or(0)
    }

    /// The fdatasync that started at `covers` returned success: what it covered is durable.
    pub fn synced(&self, covers: u64) {
        self.with_inode(|st, ino| {
            let inode = st.inodes.entry(ino).or_default();
            let (done, later): (Vec<_>, Vec<_>) =
                inode.pending.drain(..).partition(|(seq, _)| *seq < covers);
            for (_, m) in &done {
                apply_mutation(&mut inode.durable, m);
            }
            inode.pending = later;
        });
        self.disk.completed(FaultOp::Sync, &self.path);
    }
}

/// A small deterministic generator (SplitMix64) for power-loss outcomes.
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform-ish in `0..n` (`n` > 0).
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::Disk;

    fn on_core<T>(f: impl std::future::Future<Output = T>) -> T {
        crate::executor::run_local(f).expect("executor")
    }

    /// Writes `byte` x `len` at `position` of a direct-IO file (aligned).
    async fn write_block(file: &crate::fs::DirectFile, position: u64, byte: u8, len: usize) {
        let buf = file.alloc_with(len, |dst| {
            dst.fill(byte);
            dst.len()
        });
        file.write_at(buf, position).await.expect("write");
    }

    #[test]
    fn power_loss_drops_what_was_not_synced_and_name_changes_not_fsynced() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().to_path_buf();
        on_core(async move {
            crate::fs::prime_device(&root).await.unwrap();
            let faulty = FaultyDisk::new();
            let disk = Disk::Faulty(faulty.clone());
            let part = root.join("p");
            disk.create_dir_all(&part).await.unwrap();
            disk.sync_dir(&root).await.unwrap();
            let path = part.join("seg");
            let f = disk.open_direct_write(&path, true).await.unwrap();
            f.pre_allocate(8192, false).await.unwrap();
            write_block(&f, 0, 1, 4096).await;
            f.sync_data().await.unwrap();
            disk.sync_dir(&part).await.unwrap();
            write_block(&f, 4096, 2, 4096).await;
            disk.replace_file(part.join("cp"), b"one".to_vec(), true)
                .await
                .unwrap();
            let unsynced = part.join("new");
            disk.open_buffered_write(&unsynced, true).await.unwrap();
            disk.replace_file(part.join("cp"), b"two".to_vec(), false)
                .await
                .unwrap();
            drop(f);
            assert_eq!(faulty.count(FaultOp::Sync, "seg"), 1);
            faulty.power_loss(PowerLoss::DropUnsynced).unwrap();
            let seg = std::fs::read(&path).unwrap();
            assert_eq!(seg.len(), 8192, "the synced pre-allocation stays");
            assert!(seg[..4096].iter().all(|&b| b == 1), "synced bytes stay");
            assert!(seg[4096..].iter().all(|&b| b == 0), "unsynced bytes go");
            assert!(
                !unsynced.exists(),
                "a creation the directory never synced goes"
            );
            assert_eq!(std::fs::read(part.join("cp")).unwrap(), b"one");
        });
    }

    #[test]
    fn a_directory_whose_creation_was_not_synced_disappears() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().to_path_buf();
        on_core(async move {
            let faulty = FaultyDisk::new();
            let disk = Disk::Faulty(faulty.clone());
            let part = root.join("q");
            disk.create_dir_all(&part).await.unwrap();
            let f = disk
                .open_buffered_write(part.join("f"), true)
                .await
                .unwrap();
            f.write_all_at(b"data".to_vec(), 0).await.unwrap();
            f.sync_data().await.unwrap();
            disk.sync_dir(&part).await.unwrap();
            drop(f);
            faulty.power_loss(PowerLoss::DropUnsynced).unwrap();
            assert!(!part.exists(), "the parent directory was never fsynced");
        });
    }

    #[test]
    fn rules_fail_tear_and_count_operations() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().to_path_buf();
        on_core(async move {
            crate::fs::prime_device(&root).await.unwrap();
            let faulty = FaultyDisk::new();
            let disk = Disk::Faulty(faulty.clone());
            let path = root.join("t.log");
            let f = disk.open_direct_write(&path, true).await.unwrap();
            f.pre_allocate(8192, false).await.unwrap();
            write_block(&f, 0, 7, 4096).await;
            faulty.inject(FaultRule::new(FaultOp::Sync, Fault::Fail(libc::EIO)).on_path(".log"));
            let err = f.sync_data().await.unwrap_err();
            assert_eq!(err.raw_os_error(), Some(libc::EIO));
            f.sync_data().await.unwrap();
            assert_eq!(
                faulty.count(FaultOp::Sync, ".log"),
                1,
                "the failed one is not counted"
            );
            faulty.inject(FaultRule::new(
                FaultOp::Write,
                Fault::Torn { keep_bytes: 100 },
            ));
            let buf = f.alloc_with(4096, |dst| {
                dst.fill(9);
                dst.len()
            });
            let err = f.write_at(buf, 0).await.unwrap_err();
            assert_eq!(err.raw_os_error(), Some(libc::EIO));
            let got = std::fs::read(&path).unwrap();
            assert!(
                got[..100].iter().all(|&b| b == 9),
                "the torn write's prefix landed"
            );
            assert!(
                got[100..4096].iter().all(|&b| b == 7),
                "the rest kept its bytes"
            );
            faulty.set_free_bytes(Some(4096));
            assert_eq!(disk.free_bytes(&root).unwrap(), 4096);
            let err = f.pre_allocate(16384, false).await.unwrap_err();
            assert_eq!(err.raw_os_error(), Some(libc::ENOSPC));
            f.pre_allocate(12288, false).await.unwrap();
            assert_eq!(faulty.modelled_free_bytes(), Some(0));
            let err = disk
                .open_buffered_write(root.join("other"), true)
                .await
                .err()
                .expect("no space for a new file");
            assert_eq!(err.raw_os_error(), Some(libc::ENOSPC));
            f.truncate(4096).await.unwrap();
            assert_eq!(faulty.modelled_free_bytes(), Some(8192));
        });
    }

    #[test]
    fn random_power_loss_is_reproducible_from_its_seed() {
        let outcome = |seed: u64| {
            let dir = tempfile::tempdir().unwrap();
            let root = dir.path().to_path_buf();
            on_core(async move {
                let faulty = FaultyDisk::new();
                let disk = Disk::Faulty(faulty.clone());
                let path = root.join("r");
                let f = disk.open_buffered_write(&path, true).await.unwrap();
                f.write_all_at(vec![1; 1000], 0).await.unwrap();
                f.sync_data().await.unwrap();
                for i in 0..8u8 {
                    f.write_all_at(vec![i + 2; 1000], u64::from(i) * 1000)
                        .await
                        .unwrap();
                }
                drop(f);
                faulty.power_loss(PowerLoss::Random(seed)).unwrap();
                std::fs::read(&path).unwrap_or_default()
            })
        };
        assert_eq!(outcome(42), outcome(42));
        let outcomes: std::collections::HashSet<Vec<u8>> = (0..8).map(outcome).collect();
        assert!(
            outcomes.len() > 1,
            "different seeds give different outcomes"
        );
    }
}
