//! The read side of one connection: frames decoded from the socket under the core's request
//! memory, with a deadline per frame and a smaller size budget for a connection's first frame.
//!
//! Memory is taken as a frame's bytes arrive (see `request_memory`): when a header declares a
//! frame, the connection takes [`MEMORY_STEP_BYTES_MIN`], and each time the bytes read reach
//! what it holds it takes up to [`MEMORY_STEP_GROWTH`] times more, never more than the frame.
//! So a peer that declares 64 MiB and sends 1 KiB holds 64 KiB, and one that sends half its
//! frame holds at most the frame. The read buffer grows with the memory held, not with the
//! declared size.

use std::io;
use std::rc::Rc;
use std::time::Duration;

use borges_protocol::frame::{Frame, FrameDecoder};
use borges_protocol::{DecodeError, ErrorCode};
use borges_runtime::net::TcpStream;
use borges_runtime::time::{self, Instant};
use bytes::BytesMut;

use crate::config::LimitsConfig;
use crate::failure::Failure;
use crate::request_memory::{MemoryPermit, RequestMemory};

/// Bytes read from a socket at once when no frame size is known yet.
pub const READ_CHUNK_BYTES: usize = 64 * 1024;

/// The memory a frame takes first when its header arrives, and its smallest step.
pub const MEMORY_STEP_BYTES_MIN: u64 = 64 * 1024;

/// Each step multiplies the memory a frame holds by at most this.
pub const MEMORY_STEP_GROWTH: u64 = 4;

/// The read buffer of a connection. Large frames get a buffer of their own from `calloc` (whose
/// fresh pages the kernel hands out zeroed), so no memset pass precedes the receive copy;
/// `initialized` tracks how far past `len` the bytes are known to be initialized, so that
/// growing `len` over them needs no zeroing either.
pub struct ReadBuffer {
    pub buf: BytesMut,
    /// `buf[..initialized]` (up to capacity) is initialized memory.
    initialized: usize,
}

impl ReadBuffer {
    fn new() -> ReadBuffer {
        ReadBuffer {
            buf: BytesMut::with_capacity(READ_CHUNK_BYTES),
            initialized: 0,
        }
    }

    /// Grows `len` by `want` bytes for a receive and returns them. `capacity_bytes` is the
    /// capacity the frame being read may have now (the memory it holds), when known.
    fn prepare(&mut self, want: usize, capacity_bytes: Option<usize>) -> &mut [u8] {
        let start = self.buf.len();
        if let Some(capacity) = capacity_bytes {
            if capacity > READ_CHUNK_BYTES && self.buf.capacity() < capacity {
                let mut fresh = BytesMut::zeroed(capacity);
                fresh[..start].copy_from_slice(&self.buf);
                fresh.truncate(start);
                self.buf = fresh;
                self.initialized = capacity;
            }
        }
        let end = start + want;
        if end <= self.initialized && end <= self.buf.capacity() {
            // SAFETY: bytes up to `initialized` were written (zeroed or received) in this very
            // allocation, which neither `truncate` nor `split_to` moves or frees.
            unsafe { self.buf.set_len(end) };
        } else {
            self.buf.resize(end, 0);
            self.initialized = end;
        }
        &mut self.buf[start..]
    }

    /// Keeps `n` of the bytes prepared at `start`.
    fn commit(&mut self, start: usize, n: usize) {
        self.buf.truncate(start + n);
    }

    /// Notes that `n` bytes were split off the front.
    fn consumed(&mut self, n: usize) {
        self.initialized = self.initialized.saturating_sub(n);
    }
}

/// Why reading stopped short of a frame.
pub enum ReadStop {
    /// The peer closed its side.
    PeerClosed,
    /// No byte for `connection_idle_timeout_ms` between frames.
    Idle(Duration),
    /// The socket failed.
    Failed(io::Error),
    /// The frame broke a rule or a limit; answer the failure, then close.
    Refused(Failure),
}

/// How much of the frame in progress the memory it holds covers: what to take next.
fn memory_target_bytes(held: u64, buffered: u64, total: u64) -> u64 {
    let target = MEMORY_STEP_BYTES_MIN
        .max(held.saturating_mul(MEMORY_STEP_GROWTH))
        .max(buffered + 1);
    target.min(total)
}

/// Decodes frames from one connection. Lives on the connection's core.
pub struct FrameReader {
    decoder: FrameDecoder,
    pub rb: ReadBuffer,
    /// Memory held by the frame in progress; covers `rb.buf[..permit.bytes()]`.
    permit: Option<MemoryPermit>,
    /// When the frame in progress must be whole.
    deadline: Option<Instant>,
    frames_read: u64,
    frame_read_timeout: Duration,
    frame_size_bytes_max: u32,
    first_frame_size_bytes_max: u32,
    /// While the connection has not authenticated (SASL on): the largest frame it may send.
    unauthenticated_frame_size_bytes_max: Option<u32>,
}

impl FrameReader {
    /// A reader for a new connection: its first frame may have `first_frame_size_bytes_max`.
    pub fn new(limits: &LimitsConfig) -> FrameReader {
        let first = limits
            .first_frame_size_bytes_max
            .min(limits.frame_size_bytes_max);
        FrameReader {
            decoder: FrameDecoder::new(first),
            rb: ReadBuffer::new(),
            permit: None,
            deadline: None,
            frames_read: 0,
            frame_read_timeout: Duration::from_millis(limits.frame_read_timeout_ms),
            frame_size_bytes_max: limits.frame_size_bytes_max,
            first_frame_size_bytes_max: first,
            unauthenticated_frame_size_bytes_max: None,
        }
    }

    /// Until [`FrameReader::authenticated`], frames may have at most `size_bytes_max` bytes: a
    /// larger header is refused before anything is read or allocated for its body.
    pub fn limit_until_authenticated(&mut self, size_bytes_max: u32) {
        strict_assert!(self.frames_read == 0 && self.rb.buf.is_empty());
        self.unauthenticated_frame_size_bytes_max = Some(size_bytes_max);
        self.decoder = FrameDecoder::new(self.size_bytes_max_now());
    }

    /// The connection authenticated: the configured limits apply. Call between frames.
    pub fn authenticated(&mut self) {
        if self.unauthenticated_frame_size_bytes_max.take().is_some() {
            self.decoder = FrameDecoder::new(self.size_bytes_max_now());
        }
    }

    /// The largest frame the next one may be.
    fn size_bytes_max_now(&self) -> u32 {
        let limit = if self.frames_read == 0 {
            self.first_frame_size_bytes_max
        } else {
            self.frame_size_bytes_max
        };
        self.unauthenticated_frame_size_bytes_max
            .map_or(limit, |u| u.min(limit))
    }

    /// Takes the next whole frame off the buffer, with the memory it holds (none when its
    /// bytes came in one read before its header was known: then the caller takes it).
    pub fn next_frame(&mut self) -> Result<Option<(Frame, Option<MemoryPermit>)>, Failure> {
        let frame = match self.decoder.decode(&mut self.rb.buf) {
            Ok(Some(frame)) => frame,
            Ok(None) => return Ok(None),
            Err(e) => return Err(self.decode_failure(e)),
        };
        let size_bytes = frame.header.frame_size_bytes as usize;
        self.rb.consumed(size_bytes);
        self.deadline = None;
        let first = self.frames_read == 0;
        self.frames_read += 1;
        if first {
            self.decoder = FrameDecoder::new(self.size_bytes_max_now());
        }
        let permit = self.permit.take();
        if let Some(p) = &permit {
            strict_assert_eq!(
                p.bytes(),
                size_bytes as u64,
                "a frame holds exactly its bytes"
            );
        }
        Ok(Some((frame, permit)))
    }

    fn decode_failure(&self, error: DecodeError) -> Failure {
        let first_limited =
            self.frames_read == 0 && self.first_frame_size_bytes_max < self.frame_size_bytes_max;
        match error {
            DecodeError::FrameTooLarge { size_bytes, .. }
                if self.unauthenticated_frame_size_bytes_max.is_some() =>
            {
                Failure::new(
                    ErrorCode::FrameTooLarge,
                    format!(
                        "before authentication a frame may have at most {} bytes \
                         (sasl.unauthenticated_frame_size_bytes_max), this one declares \
                         {size_bytes}",
                        self.size_bytes_max_now()
                    ),
                )
            }
            DecodeError::FrameTooLarge { size_bytes, .. } if first_limited => Failure::new(
                ErrorCode::FrameTooLarge,
                format!(
                    "a connection's first frame may have at most {} bytes \
                     (limits.first_frame_size_bytes_max), this one declares {size_bytes}; \
                     later frames may have up to {} (send ApiVersions first)",
                    self.first_frame_size_bytes_max, self.frame_size_bytes_max
                ),
            ),
            e => Failure::new(e.error_code(), e.to_string()),
        }
    }

    /// Reads more of the frame in progress (or the next header), taking request memory for it
    /// first. Gives up at the frame's deadline, or after `idle` between frames.
    pub async fn fill(
        &mut self,
        memory: &Rc<RequestMemory>,
        stream: &mut TcpStream,
        idle: Duration,
    ) -> Result<usize, ReadStop> {
        if self.deadline.is_none() && !self.rb.buf.is_empty() {
            self.deadline = Some(Instant::now() + self.frame_read_timeout);
        }
        let total = self.decoder.frame_size_bytes_next();
        let want = match total {
            Some(total) => self.reserve(memory, total as u64).await?,
            None => READ_CHUNK_BYTES,
        };
        let capacity = self.permit.as_ref().map(|p| p.bytes() as usize);
        let limit = match self.deadline {
            Some(d) => idle.min(d.saturating_duration_since(Instant::now())),
            None => idle,
        };
        let start = self.rb.buf.len();
        let read = time::timeout(limit, stream.read(self.rb.prepare(want, capacity))).await;
        let n = match read {
            Some(Ok(n)) => n,
            Some(Err(e)) => {
                self.rb.commit(start, 0);
                return Err(ReadStop::Failed(e));
            }
            None => {
                self.rb.commit(start, 0);
                return Err(self.timed_out(idle, false));
            }
        };
        self.rb.commit(start, n);
        if n == 0 {
            return Err(ReadStop::PeerClosed);
        }
        Ok(n)
    }

    /// Makes the memory of the frame in progress cover at least one more byte; returns how many
    /// bytes the next read may take.
    async fn reserve(&mut self, memory: &Rc<RequestMemory>, total: u64) -> Result<usize, ReadStop> {
        let buffered = self.rb.buf.len() as u64;
        let held = self.permit.as_ref().map_or(0, MemoryPermit::bytes);
        strict_assert!(
            buffered < total,
            "a whole frame is decoded before reading more"
        );
        if held > buffered {
            return Ok((held - buffered) as usize);
        }
        let step = memory_target_bytes(held, buffered, total) - held;
        let taken = match memory.try_take(step) {
            Some(p) => p,
            None => {
                let left = self.deadline.map_or(self.frame_read_timeout, |d| {
                    d.saturating_duration_since(Instant::now())
                });
                match time::timeout(left, memory.take(step, total - held)).await {
                    Some(p) => p,
                    None => return Err(self.timed_out(Duration::ZERO, true)),
                }
            }
        };
        match &mut self.permit {
            Some(p) => p.merge(taken),
            None => self.permit = Some(taken),
        }
        let held = self.permit.as_ref().map_or(0, MemoryPermit::bytes);
        strict_assert!(held > buffered && held <= total);
        Ok((held - buffered) as usize)
    }

    /// What a timeout means: idle between frames, or a frame not whole in time.
    fn timed_out(&self, idle: Duration, waiting_for_memory: bool) -> ReadStop {
        let Some(deadline) = self.deadline else {
            return ReadStop::Idle(idle);
        };
        if !waiting_for_memory && Instant::now() < deadline {
            return ReadStop::Idle(idle);
        }
        let timeout_ms = self.frame_read_timeout.as_millis();
        let declared = self
            .decoder
            .frame_size_bytes_next()
            .map_or("a frame whose header".to_string(), |b| {
                format!("a {b}-byte frame")
            });
        let failure = if waiting_for_memory {
            Failure::new(
                ErrorCode::Busy,
                format!(
                    "no request memory for {declared} within \
                     limits.frame_read_timeout_ms ({timeout_ms} ms)"
                ),
            )
        } else {
            Failure::new(
                ErrorCode::RequestTimedOut,
                format!(
                    "{declared} did not arrive within limits.frame_read_timeout_ms \
                     ({timeout_ms} ms); {} bytes came",
                    self.rb.buf.len()
                ),
            )
        };
        ReadStop::Refused(failure)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_grows_with_the_bytes_that_arrived_never_past_the_frame() {
        let mib = 1 << 20;
        // A bare header of a 64 MiB frame takes one small step.
        assert_eq!(memory_target_bytes(0, 24, 64 * mib), MEMORY_STEP_BYTES_MIN);
        // Then at most MEMORY_STEP_GROWTH times what it holds.
        assert_eq!(
            memory_target_bytes(MEMORY_STEP_BYTES_MIN, MEMORY_STEP_BYTES_MIN, 64 * mib),
            MEMORY_STEP_BYTES_MIN * MEMORY_STEP_GROWTH
        );
        assert_eq!(memory_target_bytes(32 * mib, 32 * mib, 64 * mib), 64 * mib);
        // A small frame takes exactly its size.
        assert_eq!(memory_target_bytes(0, 24, 100), 100);
        // What already arrived is always covered, with room for one more byte.
        assert_eq!(memory_target_bytes(0, 70_000, 64 * mib), 70_001);
    }
}
