//! One write round.
//!
//! Contract: a round takes the pending batches of the writer's segment from the flushed point
//! on (at most `write_size_bytes_max x writes_in_flight_max` bytes, at least one batch),
//! reserves file space ahead of them, copies them exactly once into aligned buffers behind the
//! retained partial last block, and writes those buffers from the block boundary with at most
//! `writes_in_flight_max` direct-IO writes in flight. Only when every write of the round
//! succeeded do the writer's position and tail and the log's flushed point advance; a failed
//! round changes neither, so it can be written again from the same place.

use std::io;
use std::rc::Rc;

use borges_runtime::fs::{AlignedBuf, DirectFile};
use bytes::Bytes;

use super::{align_down, align_up, io_error, WriteParts, Writer};
use crate::log::{PartitionLog, Point};
use crate::StorageError;

/// Copies consecutive byte slices into consecutive destination buffers.
struct StreamCopy<'a> {
    parts: Vec<&'a [u8]>,
    part: usize,
    at: usize,
}

impl StreamCopy<'_> {
    fn copy(&mut self, dst: &mut [u8]) {
        let mut filled = 0;
        while filled < dst.len() {
            let p = self.parts[self.part];
            let n = (p.len() - self.at).min(dst.len() - filled);
            dst[filled..filled + n].copy_from_slice(&p[self.at..self.at + n]);
            filled += n;
            self.at += n;
            if self.at == p.len() {
                self.part += 1;
                self.at = 0;
            }
        }
    }
}

/// Builds the aligned buffers of one round: `tail` then `batches`, starting at the aligned
/// position, cut every `chunk_size_bytes` (aligned); the last buffer is zero-padded. Full-size
/// chunks come from `spare` when it has one.
fn build_chunks(
    file: &DirectFile,
    start: u64,
    tail: &[u8],
    batches: &[Bytes],
    chunk_size_bytes: u64,
    spare: &mut Vec<AlignedBuf>,
) -> (Vec<(u64, AlignedBuf)>, Vec<u8>) {
    let align = file.alignment();
    let mut parts: Vec<&[u8]> = Vec::with_capacity(batches.len() + 1);
    if !tail.is_empty() {
        parts.push(tail);
    }
    parts.extend(batches.iter().map(|b| &b[..]).filter(|b| !b.is_empty()));
    let stream_len: u64 = parts.iter().map(|p| p.len() as u64).sum();
    let mut copy = StreamCopy {
        parts,
        part: 0,
        at: 0,
    };
    let mut chunks = Vec::new();
    let mut done = 0u64;
    let mut new_tail = Vec::new();
    while done < stream_len {
        let len = chunk_size_bytes.min(stream_len - done) as usize;
        let buf = match spare.pop() {
            Some(mut buf) if len as u64 == chunk_size_bytes && buf.len() == len => {
                copy.copy(buf.as_bytes_mut());
                buf
            }
            _ => file.alloc_with(align_up(len as u64, align) as usize, |dst| {
                copy.copy(&mut dst[..len]);
                len
            }),
        };
        if done + len as u64 == stream_len {
            let keep = len - (len as u64 % align) as usize;
            new_tail = buf.as_bytes()[keep..len].to_vec();
        }
        chunks.push((start + done, buf));
        done += len as u64;
    }
    (chunks, new_tail)
}

/// Writes the chunks with at most `in_flight_max` writes at once; the first error wins.
/// Full-size buffers go back to the core's pool.
async fn write_chunks(
    file: &Rc<DirectFile>,
    chunks: Vec<(u64, AlignedBuf)>,
    in_flight_max: usize,
    chunk_size_bytes: u64,
    core: &crate::core::CoreStorage,
) -> io::Result<()> {
    type Write = borges_runtime::task::Task<(io::Result<()>, Option<AlignedBuf>)>;
    let mut tasks: std::collections::VecDeque<Write> = std::collections::VecDeque::new();
    let mut result = Ok(());
    let recycle = |r: (io::Result<()>, Option<AlignedBuf>), result: &mut io::Result<()>| {
        let (r, buf) = r;
        if let Some(buf) = buf.filter(|b| b.len() as u64 == chunk_size_bytes) {
            core.recycle_write_buffer(buf);
        }
        if result.is_ok() {
            *result = r;
        }
    };
    for (pos, buf) in chunks {
        if tasks.len() >= in_flight_max.max(1) {
            let done = tasks.pop_front().expect("non-empty").await;
            recycle(done, &mut result);
        }
        let f = file.clone();
        tasks.push_back(borges_runtime::task::spawn(async move {
            f.write_reusable_at(buf, pos).await
        }));
    }
    for t in tasks {
        let done = t.await;
        recycle(done, &mut result);
    }
    result
}

impl PartitionLog {
    /// Writes one round of pending batches; false if there was nothing to write.
    pub(super) async fn write_round(self: &Rc<Self>, w: &mut Writer) -> Result<bool, StorageError> {
        self.write_round_parts(&mut w.parts().0).await
    }

    pub(super) async fn write_round_parts(
        self: &Rc<Self>,
        w: &mut WriteParts<'_>,
    ) -> Result<bool, StorageError> {
        let chunk = align_down(self.core.config.write_size_bytes_max as u64, w.align).max(w.align);
        let cap = chunk * self.core.tuning.writes_in_flight_max.max(1) as u64;
        let (batches, total, end_offset) = {
            let st = self.state.borrow();
            let mut batches = Vec::new();
            let mut total = 0u64;
            let mut end_offset = st.flushed.offset;
            for b in st.mem.range(st.first_pending()..) {
                if b.segment_base != w.segment_base || (total > 0 && total + b.size() > cap) {
                    break;
                }
                debug_assert_eq!(
                    b.position,
                    *w.position + total,
                    "pending batches are contiguous"
                );
                total += b.size();
                end_offset = b.last_offset + 1;
                batches.push(b.bytes.clone());
            }
            (batches, total, end_offset)
        };
        if batches.is_empty() {
            return Ok(false);
        }
        let needed = *w.position + total;
        self.ensure_allocated(w, needed).await?;
        let start = align_down(*w.position, w.align);
        let (chunks, new_tail) = {
            let mut spare = self.core.write_buffers.borrow_mut();
            build_chunks(w.file, start, w.tail, &batches, chunk, &mut spare)
        };
        drop(batches);
        let in_flight = self.core.tuning.writes_in_flight_max;
        write_chunks(w.file, chunks, in_flight, chunk, &self.core)
            .await
            .map_err(|e| io_error("write", w.log_path, e))?;
        *w.position += total;
        *w.tail = new_tail;
        debug_assert_eq!(w.tail.len() as u64, *w.position % w.align);
        self.complete_flush(w, total, end_offset);
        Ok(true)
    }

    /// Accounts a completed round: flushed point, budgets, tail cache, waiters.
    fn complete_flush(self: &Rc<Self>, w: &WriteParts<'_>, total: u64, end_offset: i64) {
        let hw_moved = {
            let mut st = self.state.borrow_mut();
            if st.flusher_stopped {
                return;
            }
            st.flushed = Point {
                offset: end_offset,
                segment_base: w.segment_base,
                position: *w.position,
            };
            st.unflushed_bytes -= total;
            st.cached_bytes += total;
            st.advance_hw()
        };
        self.core.sub_unflushed(total);
        self.core.add_cached(self, end_offset, total);
        self.core.enforce_tail_budget();
        self.progress.notify_all();
        if hw_moved {
            self.changes.notify_all();
        }
    }

    async fn ensure_allocated(
        &self,
        w: &mut WriteParts<'_>,
        needed: u64,
    ) -> Result<(), StorageError> {
        if needed <= *w.allocated_bytes {
            return Ok(());
        }
        // Grow by what the segment already holds (doubling), within [min step, max step]: the
        // space reserved ahead never exceeds what was written, so many quiet partitions cannot
        // fill a disk with reservations.
        let tuning = &self.core.tuning;
        let step = (*w.allocated_bytes)
            .clamp(
                tuning.preallocate_step_min_bytes,
                tuning
                    .preallocate_step_bytes
                    .max(tuning.preallocate_step_min_bytes),
            )
            .max(w.align);
        let target = align_up(needed.max(*w.allocated_bytes + step), w.align);
        w.file
            .pre_allocate(target, false)
            .await
            .map_err(|e| io_error("pre-allocate", w.log_path, e))?;
        *w.allocated_bytes = target;
        Ok(())
    }
}
