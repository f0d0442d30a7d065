//! Sequential validation of the batches in a segment file: recovery, index rebuilds, scrubs.
//!
//! Reads with direct IO in large chunks, two reads in flight, and checks each batch exactly as
//! recovery requires: header (length, magic, counts), CRC-32C, and that its base offset is at
//! least the one expected (offsets increasing; compaction leaves holes between batches).

use std::io;
use std::rc::Rc;

use borges_protocol::batch::{self, BatchHeader, BATCH_HEADER_SIZE_BYTES};
use borges_runtime::fs::{DirectFile, ReadBuf};
use borges_runtime::task::{self, Task};

/// Largest batch the storage accepts or expects on disk, bytes. Anything claiming more while
/// scanning is treated as garbage.
pub const BATCH_SIZE_BYTES_MAX: usize = 256 * 1024 * 1024;

/// Why a scan stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ScanStop {
    /// The file ended exactly after the last valid batch.
    EndOfFile,
    /// Zeros follow the last valid batch (pre-allocated space): a normal end.
    ZeroPadding,
    /// The bytes after the last valid batch are not a valid batch.
    Invalid(String),
}

/// Where a scan ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScanOutcome {
    /// Position after the last valid batch.
    pub end_position: u64,
    /// Offset after the last valid batch.
    pub next_offset: i64,
    /// Why it stopped there.
    pub stop: ScanStop,
    /// Valid batches seen.
    pub batches: u64,
}

enum Check {
    Valid(BatchHeader),
    Stop(ScanStop),
}

/// Total size of the batch whose first 12+ bytes are `prefix`, or why there is none.
fn declared_size(prefix: &[u8], remaining_in_file: u64) -> Result<usize, ScanStop> {
    if prefix[..BATCH_HEADER_SIZE_BYTES.min(prefix.len())]
        .iter()
        .all(|&b| b == 0)
    {
        return Err(ScanStop::ZeroPadding);
    }
    let header = BatchHeader::parse(prefix).map_err(|e| ScanStop::Invalid(e.to_string()))?;
    let size = header.size_bytes();
    if size > BATCH_SIZE_BYTES_MAX || size as u64 > remaining_in_file {
        return Err(ScanStop::Invalid(format!(
            "batch of {size} bytes runs past the end of the file or the batch size limit"
        )));
    }
    Ok(size)
}

fn check_batch(bytes: &[u8], expected_offset: i64) -> Check {
    match batch::validate(bytes) {
        Err(e) => Check::Stop(ScanStop::Invalid(e.to_string())),
        Ok(h) if h.base_offset < expected_offset => Check::Stop(ScanStop::Invalid(format!(
            "base offset {} where at least {expected_offset} was expected",
            h.base_offset
        ))),
        Ok(h) => Check::Valid(h),
    }
}

/// State of a scan across read chunks.
struct Scanner<'a> {
    file_size: u64,
    position: u64,
    next_offset: i64,
    batches: u64,
    carry: Vec<u8>,
    on_batch: &'a mut dyn FnMut(u64, &BatchHeader),
}

impl Scanner<'_> {
    fn accept(&mut self, header: &BatchHeader) {
        (self.on_batch)(self.position, header);
        self.position += header.size_bytes() as u64;
        self.next_offset = header.next_offset();
        self.batches += 1;
    }

    /// Completes a batch straddling chunks from `data`; returns bytes of `data` consumed, or a stop.
    fn feed_carry(&mut self, data: &[u8]) -> Result<usize, ScanStop> {
        let mut used = 0;
        if self.carry.len() < BATCH_HEADER_SIZE_BYTES {
            used = (BATCH_HEADER_SIZE_BYTES - self.carry.len()).min(data.len());
            self.carry.extend_from_slice(&data[..used]);
            if self.carry.len() < BATCH_HEADER_SIZE_BYTES {
                return Ok(used);
            }
        }
        let size = declared_size(&self.carry, self.file_size - self.position)?;
        debug_assert!(size >= self.carry.len());
        let take = (size - self.carry.len()).min(data.len() - used);
        self.carry.extend_from_slice(&data[used..used + take]);
        used += take;
        if self.carry.len() < size {
            return Ok(used);
        }
        let carry = std::mem::take(&mut self.carry);
        match check_batch(&carry, self.next_offset) {
            Check::Valid(h) => self.accept(&h),
            Check::Stop(s) => return Err(s),
        }
        Ok(used)
    }

    /// Parses every whole batch of `data` (which starts at `self.position`).
    fn feed(&mut self, data: &[u8]) -> Result<(), ScanStop> {
        let mut at = 0;
        if !self.carry.is_empty() {
            at = self.feed_carry(data)?;
            if !self.carry.is_empty() {
                return Ok(());
            }
        }
        while data.len() - at >= BATCH_HEADER_SIZE_BYTES {
            let size = declared_size(&data[at..], self.file_size - self.position)?;
            if data.len() - at < size {
                break;
            }
            match check_batch(&data[at..at + size], self.next_offset) {
                Check::Valid(h) => self.accept(&h),
                Check::Stop(s) => return Err(s),
            }
            at += size;
        }
        self.carry.extend_from_slice(&data[at..]);
        Ok(())
    }

    fn finish(self, stop: Option<ScanStop>) -> ScanOutcome {
        let stop = stop.unwrap_or_else(|| {
            if self.carry.is_empty() {
                ScanStop::EndOfFile
            } else if self.carry.iter().all(|&b| b == 0) {
                ScanStop::ZeroPadding
            } else {
                ScanStop::Invalid(format!(
                    "truncated batch: {} bytes before the end of the file",
                    self.carry.len()
                ))
            }
        });
        ScanOutcome {
            end_position: self.position,
            next_offset: self.next_offset,
            stop,
            batches: self.batches,
        }
    }
}

fn spawn_read(file: &Rc<DirectFile>, position: u64, len: usize) -> Task<io::Result<ReadBuf>> {
    let file = file.clone();
    task::spawn(async move { file.read_at(position, len).await })
}

/// Scans `[start, file_size)` of `file`, calling `on_batch(position, header)` for each valid
/// batch, until the first invalid one. Base offsets start at `expected_offset` or later and
/// increase.
pub async fn scan_segment(
    file: &Rc<DirectFile>,
    file_size: u64,
    start: u64,
    expected_offset: i64,
    read_size_bytes: usize,
    on_batch: &mut dyn FnMut(u64, &BatchHeader),
) -> io::Result<ScanOutcome> {
    assert!(
        start <= file_size,
        "scan start {start} past file size {file_size}"
    );
    let read_size = read_size_bytes.max(64 * 1024) as u64;
    let mut scanner = Scanner {
        file_size,
        position: start,
        next_offset: expected_offset,
        batches: 0,
        carry: Vec::new(),
        on_batch,
    };
    let mut next_read = start;
    let mut in_flight = std::collections::VecDeque::new();
    let mut stop = None;
    loop {
        while in_flight.len() < 2 && next_read < file_size {
            let len = read_size.min(file_size - next_read);
            in_flight.push_back((len, spawn_read(file, next_read, len as usize)));
            next_read += len;
        }
        let Some((len, read)) = in_flight.pop_front() else {
            break;
        };
        let data = read.await?;
        if (data.len() as u64) < len {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!("short read of {} bytes where {len} exist", data.len()),
            ));
        }
        if let Err(s) = scanner.feed(&data) {
            stop = Some(s);
            break;
        }
    }
    for (_, t) in in_flight {
        let _ = t.await;
    }
    Ok(scanner.finish(stop))
}
