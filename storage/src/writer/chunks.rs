//! One write round.
//!
//! Contract: a round takes the pending batches of the writer's segment from the flushed point
//! on (at most `write_size_bytes_max x writes_in_flight_max` bytes, at least one batch),
//! reserves file space ahead of them, copies them exactly once into aligned buffers behind the
//! retained partial last block, and writes those buffers from the block boundary with at most
//! `writes_in_flight_max` direct-IO writes in flight. Batches appended while its writes are in
//! flight join the round (within the same bound), so the device is not left idle between
//! rounds under load; no block is ever in two writes at once. Only when every write of the
//! round succeeded do the writer's position and tail and the log's flushed point advance; a
//! failed round changes neither, so it can be written again from the same place.

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

/// Builds the aligned buffers of one take of a round: `carry` (the bytes of the partial block
/// at the aligned position `start`) then `batches`, cut every `chunk_size_bytes` (aligned).
/// With `write_tail` the last buffer is the zero-padded partial block; without, the bytes past
/// the last block boundary are held back. Either way those bytes are returned: the carry of the
/// next take. Full-size chunks come from `spare` when it has one.
fn build_chunks(
    file: &DirectFile,
    start: u64,
    carry: &[u8],
    batches: &[Bytes],
    chunk_size_bytes: u64,
    spare: &mut Vec<AlignedBuf>,
    write_tail: bool,
) -> (Vec<(u64, AlignedBuf)>, Vec<u8>) {
    let align = file.alignment();
    let mut parts: Vec<&[u8]> = Vec::with_capacity(batches.len() + 1);
    if !carry.is_empty() {
        parts.push(carry);
    }
    parts.extend(batches.iter().map(|b| &b[..]).filter(|b| !b.is_empty()));
    let stream_len: u64 = parts.iter().map(|p| p.len() as u64).sum();
    let full_len = align_down(stream_len, align);
    let chunked_len = if write_tail { stream_len } else { full_len };
    let mut copy = StreamCopy {
        parts,
        part: 0,
        at: 0,
    };
    let mut chunks = Vec::new();
    let mut done = 0u64;
    while done < chunked_len {
        let len = chunk_size_bytes.min(chunked_len - done) as usize;
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
        chunks.push((start + done, buf));
        done += len as u64;
    }
    let mut next_carry = vec![0u8; (stream_len - full_len) as usize];
    if write_tail {
        if let Some((pos, last)) = chunks.last() {
            let from = (start + full_len - pos) as usize;
            let n = next_carry.len();
            next_carry.copy_from_slice(&last.as_bytes()[from..from + n]);
        }
    } else {
        copy.copy(&mut next_carry);
    }
    (chunks, next_carry)
}

type WriteTask = borges_runtime::task::Task<(io::Result<()>, Option<AlignedBuf>)>;

/// The direct-IO writes of one round in flight, at most `in_flight_max` at once; the first
/// error wins. Full-size buffers go back to the core's pool as their writes finish.
struct Writes<'a> {
    file: &'a Rc<DirectFile>,
    core: &'a crate::core::CoreStorage,
    tasks: std::collections::VecDeque<WriteTask>,
    in_flight_max: usize,
    chunk_size_bytes: u64,
    result: io::Result<()>,
}

impl Writes<'_> {
    fn finished(&mut self, r: (io::Result<()>, Option<AlignedBuf>)) {
        let (r, buf) = r;
        if let Some(buf) = buf.filter(|b| b.len() as u64 == self.chunk_size_bytes) {
            self.core.recycle_write_buffer(buf);
        }
        if self.result.is_ok() {
            self.result = r;
        }
    }

    /// Starts the writes of `chunks`, first waiting for the oldest whenever the window is full.
    async fn submit(&mut self, chunks: Vec<(u64, AlignedBuf)>) {
        for (pos, buf) in chunks {
            if self.tasks.len() >= self.in_flight_max.max(1) {
                let done = self.tasks.pop_front().expect("non-empty").await;
                self.finished(done);
            }
            let f = self.file.clone();
            self.tasks
                .push_back(borges_runtime::task::spawn(async move {
                    f.write_reusable_at(buf, pos).await
                }));
        }
    }

    /// Waits until the oldest write finishes or `work` changes from `seen` (new batches).
    async fn oldest_or_work(&mut self, work: &borges_runtime::sync::Notify, seen: u64) {
        let Some(oldest) = self.tasks.front_mut() else {
            return;
        };
        let done = futures_lite::future::or(async { Some(oldest.await) }, async {
            work.changed_since(seen).await;
            None
        })
        .await;
        if let Some(done) = done {
            self.tasks.pop_front();
            self.finished(done);
        }
    }

    /// Waits for every write; the round's result.
    async fn drain(&mut self) -> io::Result<()> {
        while let Some(t) = self.tasks.pop_front() {
            let done = t.await;
            self.finished(done);
        }
        std::mem::replace(&mut self.result, Ok(()))
    }
}

/// Where a round stands: its writes, the bytes past the last block boundary written or held
/// back (`carry`), whether the carry's block is in one of the writes (the first take wrote
/// it), and the bytes and offset end taken so far.
struct Round<'a> {
    writes: Writes<'a>,
    carry: Vec<u8>,
    carry_in_flight: bool,
    total: u64,
    end_offset: i64,
}

/// The pending batches of one take: their bytes, size and the offset after the last.
struct Take {
    batches: Vec<Bytes>,
    total: u64,
    end_offset: i64,
}

impl PartitionLog {
    /// Writes one round of pending batches; false if there was nothing to write.
    pub(super) async fn write_round(self: &Rc<Self>, w: &mut Writer) -> Result<bool, StorageError> {
        self.write_round_parts(&mut w.parts().0).await
    }

    /// One round. Its first take writes what is pending, partial last block included (one
    /// write at low load). Batches appended while that round's writes are in flight join it as
    /// further takes, whose full blocks are written at once and whose partial last block waits
    /// for the next take or the round's end, so that no block is ever in two writes at once;
    /// the second take first waits for the first's writes, which include the block it rewrites.
    /// A round ends when nothing is pending and nothing is in flight, or at
    /// `write_size_bytes_max x writes_in_flight_max` bytes; only then does the flushed point
    /// advance, over all of it.
    pub(super) async fn write_round_parts(
        self: &Rc<Self>,
        w: &mut WriteParts<'_>,
    ) -> Result<bool, StorageError> {
        let chunk = align_down(self.core.config.write_size_bytes_max as u64, w.align).max(w.align);
        let in_flight_max = self.core.tuning.writes_in_flight_max;
        let cap = chunk * in_flight_max.max(1) as u64;
        let mut r = Round {
            writes: Writes {
                file: w.file,
                core: &self.core,
                tasks: Default::default(),
                in_flight_max,
                chunk_size_bytes: chunk,
                result: Ok(()),
            },
            carry: w.tail.clone(),
            carry_in_flight: false,
            total: 0,
            end_offset: 0,
        };
        let result = loop {
            let seen = self.work.generation();
            let after = (r.total > 0).then_some(r.end_offset);
            let Some(take) = self.take_pending(w, after, r.total, cap) else {
                if r.writes.tasks.is_empty() || r.total >= cap || r.writes.result.is_err() {
                    break Ok(());
                }
                r.writes.oldest_or_work(&self.work, seen).await;
                continue;
            };
            let needed = *w.position + r.total + take.total;
            if let Err(e) = self.ensure_allocated(w, needed).await {
                break Err(e);
            }
            if r.carry_in_flight {
                if let Err(e) = r.writes.drain().await {
                    break Err(io_error("write", w.log_path, e));
                }
            }
            let at = align_down(*w.position + r.total, w.align);
            let first = r.total == 0;
            let (chunks, next) = {
                let mut spare = self.core.write_buffers.borrow_mut();
                build_chunks(
                    w.file,
                    at,
                    &r.carry,
                    &take.batches,
                    chunk,
                    &mut spare,
                    first,
                )
            };
            r.carry = next;
            r.carry_in_flight = first && !r.carry.is_empty();
            r.writes.submit(chunks).await;
            r.total += take.total;
            r.end_offset = take.end_offset;
        };
        self.finish_round(w, r, result).await
    }

    /// The pending batches of the writer's segment after `after` (none: after the flushed
    /// point), `taken` bytes into the round, while the round stays within `cap` bytes (the
    /// first take has at least one batch); `None` if there are none.
    fn take_pending(
        &self,
        w: &WriteParts<'_>,
        after: Option<i64>,
        taken: u64,
        cap: u64,
    ) -> Option<Take> {
        let st = self.state.borrow();
        let from = after.unwrap_or(st.flushed.offset);
        let first = st.mem.partition_point(|b| b.base_offset < from);
        let mut take = Take {
            batches: Vec::new(),
            total: 0,
            end_offset: from,
        };
        for b in st.mem.range(first..) {
            let total = taken + take.total;
            if b.segment_base != w.segment_base || (total > 0 && total + b.size() > cap) {
                break;
            }
            debug_assert_eq!(
                b.position,
                *w.position + total,
                "pending batches are contiguous"
            );
            take.total += b.size();
            take.end_offset = b.last_offset + 1;
            take.batches.push(b.bytes.clone());
        }
        (!take.batches.is_empty()).then_some(take)
    }

    /// Ends a round: writes the held-back partial block, waits for every write, and only when
    /// all succeeded advances the writer and the flushed point over the round's bytes.
    async fn finish_round(
        self: &Rc<Self>,
        w: &mut WriteParts<'_>,
        round: Round<'_>,
        result: Result<(), StorageError>,
    ) -> Result<bool, StorageError> {
        let Round {
            mut writes,
            carry,
            carry_in_flight,
            total,
            end_offset,
        } = round;
        if result.is_ok() && total > 0 && !carry.is_empty() && !carry_in_flight {
            let at = align_down(*w.position + total, w.align);
            let size = writes.chunk_size_bytes;
            let chunks = {
                let mut spare = self.core.write_buffers.borrow_mut();
                build_chunks(w.file, at, &carry, &[], size, &mut spare, true).0
            };
            writes.submit(chunks).await;
        }
        let written = writes.drain().await;
        result?;
        written.map_err(|e| io_error("write", w.log_path, e))?;
        if total == 0 {
            return Ok(false);
        }
        *w.position += total;
        *w.tail = carry;
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
