//! Swapping cleaned segments in, atomically, and finishing or discarding an interrupted swap.
//!
//! On disk, for a group of segments `B1 < B2 < ... < Bn` cleaned into one segment named `B1`:
//! 1. `B1.log.cleaned`, `B1.index.cleaned`, `B1.timeindex.cleaned` are written and fdatasynced
//!    beside the originals (a crash now: recovery removes every `.cleaned` file; the old
//!    segments are untouched);
//! 2. the manifest `B1.swap` (`borges-swap 1 <B1> <end offset> <B1,...,Bn> <crc32c>`) is
//!    written atomically (temporary file, fdatasync, rename, directory fsync): the commit point;
//! 3. the files of `B2..Bn` are removed, the `.cleaned` files renamed over `B1`'s (index files
//!    first, the log last), the directory fsynced, the manifest removed, the directory fsynced.
//!
//! Recovery finds a manifest and redoes step 3 (every step is idempotent), so after a crash
//! at any point the directory holds either the old segments or the new one, never a mix.

use std::path::{Path, PathBuf};
use std::rc::Rc;

use super::build::Cleaned;
use crate::core::CoreStorage;
use crate::log::{Gate, PartitionLog};
use crate::segment::{segment_path, INDEX_SUFFIX, LOG_SUFFIX, TIME_INDEX_SUFFIX};
use crate::writer::io_error;
use crate::StorageError;

/// Suffix added to the files of a segment being written by the cleaner.
pub const CLEANED_SUFFIX: &str = "cleaned";
/// Suffix of a swap manifest (`<20-digit base>.swap`): the cleaner's commit point.
pub const SWAP_SUFFIX: &str = "swap";

/// `<dir>/<base>.<suffix>.cleaned`.
pub(crate) fn cleaned_path(dir: &Path, base: i64, suffix: &str) -> PathBuf {
    let mut p = segment_path(dir, base, suffix).into_os_string();
    p.push(".");
    p.push(CLEANED_SUFFIX);
    PathBuf::from(p)
}

fn manifest_path(dir: &Path, base: i64) -> PathBuf {
    segment_path(dir, base, SWAP_SUFFIX)
}

/// What a swap replaces.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Manifest {
    base: i64,
    end: i64,
    replaced: Vec<i64>,
}

impl Manifest {
    fn encode(&self) -> Vec<u8> {
        let bases: Vec<String> = self.replaced.iter().map(i64::to_string).collect();
        let body = format!(
            "borges-swap 1 {} {} {}",
            self.base,
            self.end,
            bases.join(",")
        );
        format!("{body} {:08x}\n", crc32c::crc32c(body.as_bytes())).into_bytes()
    }

    fn decode(bytes: &[u8]) -> Option<Manifest> {
        let text = std::str::from_utf8(bytes).ok()?.trim_end();
        let (body, crc) = text.rsplit_once(' ')?;
        if u32::from_str_radix(crc, 16).ok()? != crc32c::crc32c(body.as_bytes()) {
            return None;
        }
        let mut parts = body.strip_prefix("borges-swap 1 ")?.split(' ');
        let base = parts.next()?.parse().ok()?;
        let end = parts.next()?.parse().ok()?;
        let replaced: Option<Vec<i64>> = parts.next()?.split(',').map(|b| b.parse().ok()).collect();
        let m = Manifest {
            base,
            end,
            replaced: replaced?,
        };
        (m.replaced.first() == Some(&m.base) && parts.next().is_none()).then_some(m)
    }
}

async fn remove_if_present(core: &CoreStorage, path: &Path) -> Result<(), StorageError> {
    match core.disk.remove_file(path).await {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(io_error("remove", path, e)),
    }
}

/// Step 3: replaced segments out, the cleaned one in, manifest gone. Idempotent.
async fn complete(core: &CoreStorage, dir: &Path, m: &Manifest) -> Result<(), StorageError> {
    for &b in &m.replaced[1..] {
        for suffix in [INDEX_SUFFIX, TIME_INDEX_SUFFIX, LOG_SUFFIX] {
            remove_if_present(core, &segment_path(dir, b, suffix)).await?;
        }
    }
    for suffix in [INDEX_SUFFIX, TIME_INDEX_SUFFIX, LOG_SUFFIX] {
        let from = cleaned_path(dir, m.base, suffix);
        if std::fs::metadata(&from).is_ok() {
            let to = segment_path(dir, m.base, suffix);
            core.disk
                .rename(&from, &to)
                .await
                .map_err(|e| io_error("rename", &from, e))?;
        }
    }
    core.sync_dir(dir).await?;
    remove_if_present(core, &manifest_path(dir, m.base)).await?;
    core.sync_dir(dir).await
}

/// Swaps `cleaned` in: false (and the cleaned files removed) if its segments changed meanwhile.
pub(crate) async fn commit(log: &Rc<PartitionLog>, cleaned: Cleaned) -> Result<bool, StorageError> {
    let base = cleaned.group[0].base;
    let unchanged = {
        let mut st = log.state.borrow_mut();
        let same = cleaned.group.iter().all(|s| {
            st.segments.get(&s.base).is_some_and(|m| {
                m.is_finalized() && m.next_offset == s.next && m.size_bytes == s.size
            })
        });
        let ok = same && st.gate == Gate::Open && st.corrupt.is_none() && !st.flusher_stopped;
        if ok {
            st.cleaner.swapping = true;
        }
        ok
    };
    if !unchanged {
        discard(log).await;
        return Ok(false);
    }
    let m = Manifest {
        base,
        end: cleaned.group.last().expect("a group has a segment").next,
        replaced: cleaned.group.iter().map(|s| s.base).collect(),
    };
    let result = swap_in(log, &m, &cleaned).await;
    log.state.borrow_mut().cleaner.swapping = false;
    log.progress.notify_all();
    result.map(|()| true)
}

async fn swap_in(
    log: &Rc<PartitionLog>,
    m: &Manifest,
    cleaned: &Cleaned,
) -> Result<(), StorageError> {
    let manifest = manifest_path(&log.dir, m.base);
    if let Err(e) = log
        .core
        .replace_file("write swap manifest", &manifest, m.encode(), true)
        .await
    {
        // Before the commit point: the old segments stand.
        let _ = log.core.disk.remove_file(&manifest).await;
        discard(log).await;
        return Err(e);
    }
    if let Err(e) = complete(&log.core, &log.dir, m).await {
        // After the commit point the files are part old, part new until recovery finishes the
        // swap: the partition stops serving until then.
        return Err(log.mark_corrupt(&manifest, 0, &format!("cleaner swap interrupted: {e}")));
    }
    let last_modified = {
        let mut st = log.state.borrow_mut();
        let mut last_modified = 0;
        for &b in &m.replaced[1..] {
            if let Some(seg) = st.segments.remove(&b) {
                last_modified = seg.last_modified_ms;
            }
        }
        let seg = st
            .segments
            .get_mut(&m.base)
            .expect("the swapped segment exists");
        seg.size_bytes = cleaned.size;
        seg.next_offset = m.end;
        seg.max_timestamp = cleaned.index.max_timestamp;
        seg.max_timestamp_offset = cleaned.index.max_timestamp_offset;
        seg.last_modified_ms = seg.last_modified_ms.max(last_modified);
        seg.last_modified_ms
    };
    let _ = last_modified;
    for &b in &m.replaced {
        log.core.forget_file(log.id, b);
    }
    log.evict_cached_before(m.end);
    Ok(())
}

/// Removes every `.cleaned` file of the log (a cleaning that did not reach its commit point).
pub(crate) async fn discard(log: &PartitionLog) {
    for path in cleaned_files(&log.dir) {
        let _ = log.core.disk.remove_file(&path).await;
    }
}

fn cleaned_files(dir: &Path) -> Vec<PathBuf> {
    let suffix = format!(".{CLEANED_SUFFIX}");
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with(&suffix))
        .map(|e| e.path())
        .collect()
}

/// At open, before anything else reads the directory: finishes every swap whose manifest
/// exists, then removes the `.cleaned` files of cleanings that did not commit.
pub(crate) async fn recover_swaps(core: &CoreStorage, dir: &Path) -> Result<(), StorageError> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Ok(());
    };
    let mut manifests: Vec<(i64, PathBuf)> = entries
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            crate::segment::parse_segment_name(&name, SWAP_SUFFIX).map(|b| (b, e.path()))
        })
        .collect();
    manifests.sort();
    for (_, path) in &manifests {
        let bytes = std::fs::read(path).map_err(|e| io_error("read", path, e))?;
        let Some(m) = Manifest::decode(&bytes) else {
            return Err(StorageError::Corrupt {
                path: path.clone(),
                position: 0,
                reason: "invalid cleaner swap manifest".into(),
            });
        };
        tracing::warn!(file = %path.display(), "finishing an interrupted cleaner swap");
        complete(core, dir, &m).await?;
    }
    let leftovers = cleaned_files(dir);
    for path in &leftovers {
        tracing::info!(file = %path.display(), "removing a cleaner file that was never swapped in");
        remove_if_present(core, path).await?;
    }
    if !leftovers.is_empty() {
        core.sync_dir(dir).await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manifest_round_trips_and_refuses_damage() {
        let m = Manifest {
            base: 10,
            end: 90,
            replaced: vec![10, 40, 70],
        };
        let b = m.encode();
        assert_eq!(Manifest::decode(&b), Some(m));
        let mut damaged = b.clone();
        damaged[15] ^= 1;
        assert_eq!(Manifest::decode(&damaged), None);
        assert_eq!(
            cleaned_path(Path::new("/d"), 3, LOG_SUFFIX),
            Path::new("/d/00000000000000000003.log.cleaned")
        );
    }
}
