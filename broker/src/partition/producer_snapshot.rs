//! Producer-state snapshots: `<20-digit offset>.producer-snapshot` files in the partition
//! directory (Kafka's `.snapshot` files), each holding the producer state of every batch below
//! its offset, so that recovery replays only the log after the newest usable snapshot.
//!
//! Format (big-endian, docs/storage-format.md): magic `BRGSPSN1`, version u32 (1), offset i64,
//! producer count u32, then per producer: id i64, epoch i16, last timestamp i64, batch count u8
//! (1..=5), and per batch (oldest first): first sequence i32, last sequence i32, base offset
//! i64, last offset i64; then a CRC-32C of everything before it.
//!
//! A snapshot is written only once the log below its offset is as durable as the topic's
//! durability promises (`wait_acked` at `acks=all`), so after a crash it never describes
//! batches the log lost — and when it does (a power loss under `durability = none`), recovery
//! sees its offset beyond the log end and uses an older one. The newest
//! [`SNAPSHOTS_KEPT`] are kept.

use std::path::{Path, PathBuf};

use super::producer::{BatchMeta, ProducerLimits, ProducerState, PRODUCER_BATCHES_KEPT};

/// File name suffix.
pub const SNAPSHOT_SUFFIX: &str = ".producer-snapshot";
/// Snapshots kept per partition (older ones are removed when a new one is written).
pub const SNAPSHOTS_KEPT: usize = 2;

const MAGIC: &[u8; 8] = b"BRGSPSN1";
const VERSION: u32 = 1;
const HEAD_SIZE_BYTES: usize = 8 + 4 + 8 + 4;
const ENTRY_SIZE_BYTES: usize = 8 + 2 + 8 + 1;
const BATCH_SIZE_BYTES: usize = 4 + 4 + 8 + 8;

/// Path of the snapshot at `offset` in partition directory `dir`.
pub fn snapshot_path(dir: &Path, offset: i64) -> PathBuf {
    dir.join(format!("{offset:020}{SNAPSHOT_SUFFIX}"))
}

/// Offsets of the snapshot files in `dir`, ascending.
pub fn list(dir: &Path) -> Vec<i64> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut offsets: Vec<i64> = entries
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let digits = name.strip_suffix(SNAPSHOT_SUFFIX)?;
            (digits.len() == 20).then(|| digits.parse().ok())?
        })
        .collect();
    offsets.sort_unstable();
    offsets
}

/// Encodes `state` as of `offset`.
pub fn encode(state: &ProducerState, offset: i64) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEAD_SIZE_BYTES + state.len() * 64 + 4);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&VERSION.to_be_bytes());
    out.extend_from_slice(&offset.to_be_bytes());
    out.extend_from_slice(&(state.len() as u32).to_be_bytes());
    for (id, e) in state.entries() {
        let batches: Vec<BatchMeta> = e.batches().collect();
        assert!(!batches.is_empty() && batches.len() <= PRODUCER_BATCHES_KEPT);
        out.extend_from_slice(&id.to_be_bytes());
        out.extend_from_slice(&e.epoch.to_be_bytes());
        out.extend_from_slice(&e.last_timestamp_ms.to_be_bytes());
        out.push(batches.len() as u8);
        for b in batches {
            out.extend_from_slice(&b.first_seq.to_be_bytes());
            out.extend_from_slice(&b.last_seq.to_be_bytes());
            out.extend_from_slice(&b.base_offset.to_be_bytes());
            out.extend_from_slice(&b.last_offset.to_be_bytes());
        }
    }
    let crc = crc32c::crc32c(&out);
    out.extend_from_slice(&crc.to_be_bytes());
    out
}

/// A cursor over a snapshot body that never reads past its end.
struct Reader<'a> {
    src: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn take<const N: usize>(&mut self) -> Result<[u8; N], String> {
        let bytes = self
            .src
            .get(self.at..self.at + N)
            .ok_or_else(|| format!("truncated at byte {}", self.at))?;
        self.at += N;
        Ok(bytes.try_into().expect("N bytes"))
    }
    fn i64(&mut self) -> Result<i64, String> {
        self.take::<8>().map(i64::from_be_bytes)
    }
    fn i32(&mut self) -> Result<i32, String> {
        self.take::<4>().map(i32::from_be_bytes)
    }
}

/// Decodes a snapshot: (offset, state). Checks magic, version, CRC, lengths and that every
/// batch lies below the offset.
pub fn decode(src: &[u8], limits: ProducerLimits) -> Result<(i64, ProducerState), String> {
    if src.len() < HEAD_SIZE_BYTES + 4 {
        return Err(format!("{} bytes is too short", src.len()));
    }
    let (body, crc) = src.split_at(src.len() - 4);
    let stored = u32::from_be_bytes(crc.try_into().map_err(|_| "crc")?);
    if crc32c::crc32c(body) != stored {
        return Err("CRC mismatch".into());
    }
    let mut r = Reader { src: body, at: 0 };
    if &r.take::<8>()? != MAGIC {
        return Err("bad magic".into());
    }
    let version = r.take::<4>().map(u32::from_be_bytes)?;
    if version != VERSION {
        return Err(format!("unknown version {version}"));
    }
    let offset = r.i64()?;
    let count = r.take::<4>().map(u32::from_be_bytes)? as usize;
    if count > (body.len() - HEAD_SIZE_BYTES) / (ENTRY_SIZE_BYTES + BATCH_SIZE_BYTES) {
        return Err(format!("{count} producers cannot fit"));
    }
    let mut state = ProducerState::new(limits);
    for _ in 0..count {
        let id = r.i64()?;
        let epoch = r.take::<2>().map(i16::from_be_bytes)?;
        let last_timestamp_ms = r.i64()?;
        let n = usize::from(r.take::<1>()?[0]);
        if n == 0 || n > PRODUCER_BATCHES_KEPT || id < 0 || epoch < 0 {
            return Err(format!("producer {id}: epoch {epoch}, {n} batches"));
        }
        let mut batches = Vec::with_capacity(n);
        for _ in 0..n {
            let b = BatchMeta {
                first_seq: r.i32()?,
                last_seq: r.i32()?,
                base_offset: r.i64()?,
                last_offset: r.i64()?,
            };
            if b.base_offset > b.last_offset || b.last_offset >= offset || b.first_seq < 0 {
                return Err(format!("producer {id}: batch {b:?} beyond offset {offset}"));
            }
            batches.push(b);
        }
        state.restore(id, epoch, last_timestamp_ms, &batches);
    }
    if r.at != body.len() {
        return Err(format!("{} trailing bytes", body.len() - r.at));
    }
    Ok((offset, state))
}

/// Writes `bytes` as the snapshot at `offset` (atomically: temporary file, fdatasync, rename),
/// then removes all but the newest [`SNAPSHOTS_KEPT`].
pub async fn write(dir: &Path, offset: i64, bytes: Vec<u8>) -> std::io::Result<()> {
    borges_runtime::fs::replace_file(snapshot_path(dir, offset), bytes, false).await?;
    let offsets = list(dir);
    let old = offsets.len().saturating_sub(SNAPSHOTS_KEPT);
    for &o in &offsets[..old] {
        let _ = borges_runtime::fs::remove_file(snapshot_path(dir, o)).await;
    }
    Ok(())
}

/// Removes the snapshots above `offset` (they describe batches the log no longer has).
pub async fn remove_above(dir: &Path, offset: i64) {
    for o in list(dir).into_iter().filter(|&o| o > offset) {
        let _ = borges_runtime::fs::remove_file(snapshot_path(dir, o)).await;
    }
}

/// The newest snapshot in `dir` at or below `log_end_offset` that decodes; damaged ones are
/// removed. `None` when there is none (the whole log is replayed).
pub async fn load_newest(
    dir: &Path,
    log_end_offset: i64,
    limits: ProducerLimits,
) -> Option<(i64, ProducerState)> {
    for offset in list(dir).into_iter().rev() {
        let path = snapshot_path(dir, offset);
        if offset > log_end_offset {
            // It describes batches the log lost (a crash under `durability = none`): were it
            // kept, it would be taken once the log grows past it again.
            tracing::warn!(
                file = %path.display(),
                log_end_offset,
                "removing a producer snapshot beyond the log end (the log lost its tail)"
            );
            let _ = borges_runtime::fs::remove_file(&path).await;
            continue;
        }
        let read = match borges_runtime::fs::BufferedFile::open_read(&path).await {
            Ok(f) => {
                let bytes = match f.size().await {
                    Ok(size) => f.read_exact_at(0, size as usize).await,
                    Err(e) => Err(e),
                };
                let _ = f.close().await;
                bytes
            }
            Err(e) => Err(e),
        };
        match read
            .map_err(|e| e.to_string())
            .and_then(|b| decode(&b, limits))
        {
            Ok((o, state)) if o == offset => return Some((o, state)),
            Ok((o, _)) => {
                tracing::warn!(
                    file = %path.display(),
                    "producer snapshot says offset {o}; removing it"
                )
            }
            Err(reason) => {
                tracing::warn!(
                    file = %path.display(),
                    "removing an unreadable producer snapshot: {reason}"
                )
            }
        }
        let _ = borges_runtime::fs::remove_file(&path).await;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use borges_protocol::batch::BatchHeader;

    const LIMITS: ProducerLimits = ProducerLimits {
        expiration_ms: 60_000,
        producers_max: 1_000,
    };

    fn sample() -> ProducerState {
        let mut s = ProducerState::new(LIMITS);
        let mut base = 0;
        for (pid, epoch, seq, n) in [
            (1i64, 0i16, 0i32, 3i32),
            (2, 4, 0, 1),
            (1, 0, 3, 2),
            (3, 0, i32::MAX, 2),
        ] {
            s.replay(&BatchHeader {
                base_offset: base,
                batch_length: 100,
                partition_leader_epoch: 0,
                magic: 2,
                crc: 0,
                attributes: 0,
                last_offset_delta: n - 1,
                base_timestamp: 5,
                max_timestamp: 5 + base,
                producer_id: pid,
                producer_epoch: epoch,
                base_sequence: seq,
                records_count: n,
            });
            base += i64::from(n);
        }
        s
    }

    fn sorted(s: &ProducerState) -> Vec<(i64, i16, i64, Vec<BatchMeta>)> {
        let mut v: Vec<_> = s
            .entries()
            .map(|(id, e)| (id, e.epoch, e.last_timestamp_ms, e.batches().collect()))
            .collect();
        v.sort_by_key(|e| e.0);
        v
    }

    #[test]
    fn snapshots_round_trip_and_refuse_damage() {
        let s = sample();
        let bytes = encode(&s, 8);
        let (offset, back) = decode(&bytes, LIMITS).unwrap();
        assert_eq!(offset, 8);
        assert_eq!(sorted(&back), sorted(&s));
        for i in 0..bytes.len() {
            let mut bad = bytes.clone();
            bad[i] ^= 0x04;
            assert!(decode(&bad, LIMITS).is_err(), "flip at {i}");
        }
        for len in 0..bytes.len() {
            assert!(decode(&bytes[..len], LIMITS).is_err(), "cut at {len}");
        }
        // A snapshot whose batches reach its own offset is inconsistent.
        assert!(decode(&encode(&s, 7), LIMITS).is_err());
        let empty = ProducerState::new(LIMITS);
        assert!(decode(&encode(&empty, 0), LIMITS).unwrap().1.is_empty());
    }

    #[test]
    fn the_newest_usable_snapshot_is_loaded_and_old_ones_removed() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().to_path_buf();
        crate::testing::on_one_core(move || async move {
            let s = sample();
            for offset in [8, 9, 10, 11] {
                write(&d, offset, encode(&s, offset)).await.unwrap();
            }
            assert_eq!(list(&d), vec![10, 11]);
            // Beyond the log end: removed (it describes batches the log lost).
            let (o, _) = load_newest(&d, 10, LIMITS).await.unwrap();
            assert_eq!(o, 10);
            assert_eq!(list(&d), vec![10]);
            // Damaged: removed, the older one is used.
            write(&d, 9, encode(&s, 9)).await.unwrap();
            write(&d, 11, encode(&s, 11)).await.unwrap();
            std::fs::write(snapshot_path(&d, 11), b"garbage").unwrap();
            let (o, back) = load_newest(&d, 20, LIMITS).await.unwrap();
            assert_eq!((o, sorted(&back)), (10, sorted(&s)));
            assert_eq!(list(&d), vec![10]);
            remove_above(&d, 9).await;
            assert!(load_newest(&d, 20, LIMITS).await.is_none());
        });
    }
}
