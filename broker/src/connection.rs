//! One client connection: a reader that decodes frames and dispatches requests in order, and a
//! writer that sends responses in request order.
//!
//! Dispatch has two phases. The ordered phase runs in the reader, one request at a time: routing,
//! validation, and the appends of a produce (locally, or queued to the owning core's outbox, which
//! preserves order). The completion phase (waiting for acknowledgements, long polls, reads) runs
//! as its own task, so requests on a connection progress concurrently; the writer awaits the
//! tasks in request order. The number of requests in flight is bounded per connection, and the
//! bytes of request frames per core, so a slow or hostile client cannot exhaust memory.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::rc::Rc;
use std::time::Duration;

use borges_protocol::frame::{Frame, FrameDecoder, FrameHeader};
use borges_protocol::DecodeError;
use borges_runtime::net::TcpStream;
use borges_runtime::sync::{Notify, StaticPermit};
use borges_runtime::task;
use borges_runtime::time;
use bytes::BytesMut;
use thiserror::Error;

use crate::admission::RequestMemoryError;
use crate::config::FetchSendMode;
use crate::dispatch::ResponseTask;
use crate::failure::Failure;
use crate::shard::Shard;
use crate::types::SendChunk;
use crate::wire::{self, Response};

/// Why a connection's reader stopped.
#[derive(Debug, Error)]
enum CloseReason {
    #[error("broker shutting down")]
    ShuttingDown,
    #[error("peer closed")]
    PeerClosed,
    #[error("idle for {0} ms")]
    Idle(u128),
    #[error("read: {0}")]
    Read(std::io::Error),
    #[error("undecodable frame")]
    UndecodableFrame,
    #[error(transparent)]
    RequestMemory(RequestMemoryError),
}

/// Bytes read from a socket at once when no frame size is known yet.
const READ_CHUNK_BYTES: usize = 64 * 1024;

/// The read buffer of a connection. Large frames get a buffer of their own from `calloc` (whose
/// fresh pages the kernel hands out zeroed), so no memset pass precedes the receive copy;
/// `initialized` tracks how far past `len` the bytes are known to be initialized, so that
/// growing `len` over them needs no zeroing either.
struct ReadBuffer {
    buf: BytesMut,
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

    /// Grows `len` by `want` bytes for a receive and returns them. `frame_total` is the size of
    /// the frame being read, when its header has been seen.
    fn prepare(&mut self, want: usize, frame_total: Option<usize>) -> &mut [u8] {
        let start = self.buf.len();
        if let Some(total) = frame_total {
            if total > READ_CHUNK_BYTES && self.buf.capacity() < total {
                let mut fresh = BytesMut::zeroed(total);
                fresh[..start].copy_from_slice(&self.buf);
                fresh.truncate(start);
                self.buf = fresh;
                self.initialized = total;
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

/// A request in flight: the correlation id its response must carry, and its completion.
struct Pending {
    correlation_id: u32,
    task: ResponseTask,
    /// Position in the connection's request order, set by [`InFlight::push`].
    sequence: u64,
}

impl Pending {
    fn new(correlation_id: u32, task: ResponseTask) -> Pending {
        Pending {
            correlation_id,
            task,
            sequence: 0,
        }
    }
}

/// Requests in flight on one connection, in order. Lives on the connection's core.
struct InFlight {
    queue: RefCell<VecDeque<Pending>>,
    /// Requests pushed so far.
    pushed: std::cell::Cell<u64>,
    capacity: usize,
    changed: Notify,
    closed: std::cell::Cell<bool>,
}

impl InFlight {
    async fn push(&self, mut task: Pending) {
        loop {
            let seen = self.changed.generation();
            if self.queue.borrow().len() < self.capacity {
                break;
            }
            self.changed.changed_since(seen).await;
        }
        task.sequence = self.pushed.get();
        self.pushed.set(task.sequence + 1);
        self.queue.borrow_mut().push_back(task);
        strict_assert!(self.queue.borrow().len() <= self.capacity);
        self.changed.notify_all();
    }

    async fn pop(&self) -> Option<Pending> {
        loop {
            let seen = self.changed.generation();
            if let Some(t) = self.queue.borrow_mut().pop_front() {
                self.changed.notify_all();
                return Some(t);
            }
            if self.closed.get() {
                return None;
            }
            self.changed.changed_since(seen).await;
        }
    }

    fn close(&self) {
        self.closed.set(true);
        self.changed.notify_all();
    }
}

/// Serves one accepted connection until it closes.
pub async fn serve(shard: Rc<Shard>, stream: TcpStream) {
    let peer = stream
        .peer_addr()
        .map(|a| a.to_string())
        .unwrap_or_default();
    let _guard = match shard.admission().admit() {
        Ok(guard) => guard,
        Err(refusal) => return refuse(stream, &refusal).await,
    };
    let writer_stream = match stream.try_clone() {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!(%peer, "cannot duplicate socket: {e}");
            return;
        }
    };
    let in_flight = Rc::new(InFlight {
        queue: RefCell::new(VecDeque::new()),
        pushed: std::cell::Cell::new(0),
        capacity: shard.config().limits.in_flight_requests_per_connection_max as usize,
        changed: Notify::default(),
        closed: std::cell::Cell::new(false),
    });
    let writer = task::spawn(write_loop(shard.clone(), writer_stream, in_flight.clone()));
    let peer_host: Rc<str> = Rc::from(peer.rsplit_once(':').map_or(peer.as_str(), |(h, _)| h));
    if let Err(reason) = read_loop(&shard, stream, &in_flight, &peer_host).await {
        tracing::debug!(%peer, "closing connection: {reason}");
    }
    in_flight.close();
    writer.await;
}

/// Answers a connection over the core's limit with an ErrorResponse and closes it.
async fn refuse(mut stream: TcpStream, refusal: &Failure) {
    let header = FrameHeader::new(0, 0, 0, 0, 0, 0).unwrap_or(FrameHeader {
        frame_size_bytes: 24,
        header_size_bytes: 24,
        api_key: 0,
        api_version: 0,
        flags: 0,
        correlation_id: 0,
        message_size_bytes: 0,
        header_crc32c: 0,
    });
    let r = wire::error_response(&header, refusal);
    let _ = stream.write_all(&r.head).await;
    let _ = stream.shutdown().await;
}

async fn read_loop(
    shard: &Rc<Shard>,
    mut stream: TcpStream,
    in_flight: &InFlight,
    peer: &Rc<str>,
) -> Result<(), CloseReason> {
    let limits = &shard.config().limits;
    let idle = Duration::from_millis(limits.connection_idle_timeout_ms);
    let mut decoder = FrameDecoder::new(limits.frame_size_bytes_max);
    let mut rb = ReadBuffer::new();
    let mut permit: Option<StaticPermit> = None;
    loop {
        if shard.lifecycle().is_shutting_down() {
            return Err(CloseReason::ShuttingDown);
        }
        match decoder.decode(&mut rb.buf) {
            Ok(Some(frame)) => {
                borges_runtime::executor::note_activity();
                rb.consumed(frame.header.frame_size_bytes as usize);
                let permit = match permit.take() {
                    Some(p) => p,
                    None => acquire(shard, frame_size(&frame)).await?,
                };
                let correlation_id = frame.header.correlation_id;
                let task = crate::dispatch::request(shard, frame, permit, peer).await;
                in_flight.push(Pending::new(correlation_id, task)).await;
                continue;
            }
            Ok(None) => {}
            Err(e) => {
                reject_stream(shard, in_flight, &rb.buf, e).await;
                return Err(CloseReason::UndecodableFrame);
            }
        }
        let total = decoder.frame_size_bytes_next();
        let want = match total {
            Some(total) => {
                if permit.is_none() {
                    permit = Some(acquire(shard, total as u64).await?);
                }
                total.saturating_sub(rb.buf.len()).max(1)
            }
            None => READ_CHUNK_BYTES,
        };
        let start = rb.buf.len();
        let read = read_some(shard, &mut stream, rb.prepare(want, total), idle).await;
        match read {
            Ok(0) => {
                rb.commit(start, 0);
                return Err(CloseReason::PeerClosed);
            }
            Ok(n) => {
                rb.commit(start, n);
                shard
                    .metrics()
                    .bytes_received
                    .set(shard.metrics().bytes_received.get() + n as u64);
            }
            Err(e) => {
                rb.commit(start, 0);
                return Err(e);
            }
        }
    }
}

fn frame_size(frame: &Frame) -> u64 {
    u64::from(frame.header.frame_size_bytes)
}

async fn acquire(shard: &Rc<Shard>, bytes: u64) -> Result<StaticPermit, CloseReason> {
    shard
        .admission()
        .request_memory(bytes)
        .await
        .map_err(CloseReason::RequestMemory)
}

/// Reads, giving up after `idle` without bytes or when the broker starts shutting down.
async fn read_some(
    shard: &Rc<Shard>,
    stream: &mut TcpStream,
    buf: &mut [u8],
    idle: Duration,
) -> Result<usize, CloseReason> {
    let seen = shard.lifecycle().shutdown().generation();
    let read = futures_lite::future::or(
        async { Some(time::timeout(idle, stream.read(buf)).await) },
        async {
            shard.lifecycle().shutdown().changed_since(seen).await;
            None
        },
    )
    .await;
    match read {
        None => Err(CloseReason::ShuttingDown),
        Some(None) => Err(CloseReason::Idle(idle.as_millis())),
        Some(Some(Ok(n))) => Ok(n),
        Some(Some(Err(e))) => Err(CloseReason::Read(e)),
    }
}

/// Answers an undecodable frame with an ErrorResponse (correlation id when the header is
/// readable, else 0) before the connection closes.
async fn reject_stream(
    shard: &Rc<Shard>,
    in_flight: &InFlight,
    buf: &BytesMut,
    error: DecodeError,
) {
    shard
        .metrics()
        .malformed_frames
        .set(shard.metrics().malformed_frames.get() + 1);
    let header = FrameHeader::decode(buf, u32::MAX)
        .ok()
        .and_then(|h| FrameHeader::new(h.api_key, h.api_version, 0, h.correlation_id, 0, 0))
        .or_else(|| FrameHeader::new(0, 0, 0, 0, 0, 0));
    let Some(header) = header else { return };
    let failure = Failure::new(error.error_code(), error.to_string());
    let response = wire::error_response(&header, &failure);
    let correlation_id = header.correlation_id;
    let task = task::spawn(async move { Some(response) });
    in_flight.push(Pending::new(correlation_id, task)).await;
}

async fn write_loop(shard: Rc<Shard>, mut stream: TcpStream, in_flight: Rc<InFlight>) {
    let copy_mode = shard.config().fetch.send_mode == FetchSendMode::Copy;
    let mut next_sequence = 0u64;
    while let Some(pending) = in_flight.pop().await {
        // Responses leave in request order: each answers the next request read.
        strict_assert_eq!(
            pending.sequence,
            next_sequence,
            "a request completed out of request order"
        );
        next_sequence += 1;
        let Some(response) = pending.task.await else {
            continue;
        };
        strict_assert_eq!(
            FrameHeader::decode(&response.head, u32::MAX)
                .ok()
                .filter(|h| h.is_response())
                .map(|h| h.correlation_id),
            Some(pending.correlation_id),
            "a response left out of request order"
        );
        if let Err(e) = write_response(&shard, &mut stream, response, copy_mode).await {
            tracing::debug!("write failed, closing connection: {e}");
            break;
        }
    }
    let _ = stream.shutdown().await;
}

async fn write_response(
    shard: &Rc<Shard>,
    stream: &mut TcpStream,
    response: Response,
    _copy_mode: bool,
) -> std::io::Result<()> {
    let mut total = response.head.len() as u64;
    let mut pending: Vec<bytes::Bytes> = vec![response.head];
    for chunk in response.payload {
        match chunk {
            SendChunk::Memory(b) => {
                total += b.len() as u64;
                pending.push(b);
            }
            SendChunk::File {
                fd,
                position,
                length,
            } => {
                flush_vectored(stream, &mut pending).await?;
                stream.send_file(fd, position, length, true).await?;
                total += length;
                shard
                    .metrics()
                    .bytes_sendfile
                    .set(shard.metrics().bytes_sendfile.get() + length);
            }
        }
    }
    flush_vectored(stream, &mut pending).await?;
    shard
        .metrics()
        .bytes_sent
        .set(shard.metrics().bytes_sent.get() + total);
    Ok(())
}

async fn flush_vectored(
    stream: &mut TcpStream,
    pending: &mut Vec<bytes::Bytes>,
) -> std::io::Result<()> {
    if pending.is_empty() {
        return Ok(());
    }
    let slices: Vec<&[u8]> = pending.iter().map(|b| b.as_ref()).collect();
    stream.write_all_vectored(&slices).await?;
    pending.clear();
    Ok(())
}
