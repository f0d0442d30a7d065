//! One TCP connection to one broker core, pipelined.
//!
//! A connection is two tokio tasks: the writer takes queued requests in order, registers the
//! ones that expect a response with the reader (before their bytes hit the socket), and writes
//! many frames with one vectored write; the reader decodes response frames and completes the
//! oldest registered request with each (the broker answers in request order). The number of
//! requests outstanding is bounded by `in_flight_requests_max` (a semaphore whose permit travels
//! with the request and is dropped when its response arrives).
//!
//! A failure on either side closes the connection: every queued and outstanding request is
//! completed with [`ClientError::ConnectionClosed`] or the IO error, and the pool replaces the
//! connection on next use.

use std::io::IoSlice;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use borges_protocol::frame::{FrameHeader, FRAME_HEADER_SIZE_BYTES};
use borges_protocol::{wire, ApiKey};
use bytes::{Buf, BufMut, Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot, Notify, OwnedSemaphorePermit, Semaphore};

use crate::error::{ClientError, Result};

/// The read side of a connection (a TCP half, or a TLS stream's).
type ReadSide = Box<dyn AsyncRead + Send + Unpin>;
/// The write side of a connection.
type WriteSide = Box<dyn AsyncWrite + Send + Unpin>;

/// Frames the writer coalesces into one vectored write at most.
const WRITE_COALESCE_FRAMES_MAX: usize = 64;
/// IO slices handed to one `writev` at most (Linux `IOV_MAX` is 1024).
const WRITE_IOVECS_MAX: usize = 256;
/// Initial read buffer; grows to the size of the largest frame seen.
const READ_BUFFER_BYTES: usize = 256 * 1024;
/// Requests queued for the writer beyond the in-flight ones.
const WRITE_QUEUE_DEPTH_MAX: usize = 1024;

/// What a submitted request resolves to: the response frame, or `None` for requests that get
/// no response (produce with `acks=0`), once written.
pub(crate) type Reply = Result<Option<Response>>;

/// A request ready to be written.
pub(crate) struct Request {
    /// API key.
    pub api_key: ApiKey,
    /// The finished flatbuffers message.
    pub message: Vec<u8>,
    /// The raw payload region, as chunks written back to back (record batches).
    pub payload: Vec<Bytes>,
    /// False for produce with `acks=0`.
    pub expect_response: bool,
}

impl Request {
    /// A request with a message and no payload.
    pub fn new(api_key: ApiKey, message: Vec<u8>) -> Request {
        Request {
            api_key,
            message,
            payload: Vec::new(),
            expect_response: true,
        }
    }
}

struct Outgoing {
    chunks: Vec<Bytes>,
    correlation_id: u32,
    expect_response: bool,
    reply: oneshot::Sender<Reply>,
    _permit: OwnedSemaphorePermit,
}

struct Pending {
    correlation_id: u32,
    reply: oneshot::Sender<Reply>,
    _permit: OwnedSemaphorePermit,
}

/// Shared by the handle and both tasks: set once, when the connection dies.
struct Shutdown {
    closed: AtomicBool,
    notify: Notify,
    /// Why the connection died (the first failure), for requests submitted after that.
    reason: std::sync::Mutex<Option<ClientError>>,
}

impl Shutdown {
    fn close(&self) {
        self.closed.store(true, Ordering::Release);
        self.notify.notify_waiters();
    }

    /// Closes, remembering `reason` unless an earlier one is known.
    fn close_with(&self, reason: &ClientError) {
        {
            let mut known = match self.reason.lock() {
                Ok(k) => k,
                Err(poisoned) => poisoned.into_inner(),
            };
            if known.is_none() && !matches!(reason, ClientError::ConnectionClosed { .. }) {
                *known = Some(reason.clone());
            }
        }
        self.close();
    }

    fn reason(&self) -> Option<ClientError> {
        match self.reason.lock() {
            Ok(k) => k.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    async fn wait(&self) {
        loop {
            let notified = self.notify.notified();
            if self.is_closed() {
                return;
            }
            notified.await;
        }
    }
}

/// A pipelined connection to one `host:port`. Cheap to share (`Arc`); `Send + Sync`.
pub(crate) struct Connection {
    addr: String,
    queue: mpsc::Sender<Outgoing>,
    in_flight: Arc<Semaphore>,
    next_correlation_id: AtomicU32,
    shutdown: Arc<Shutdown>,
}

impl Connection {
    /// Connects to `addr` within `connect_timeout_ms` (TCP, then the TLS handshake when `tls`
    /// is given) and starts the writer and reader tasks.
    pub async fn connect(
        addr: &str,
        connect_timeout_ms: u64,
        in_flight_requests_max: usize,
        frame_size_bytes_max: u32,
        tls: Option<&Arc<rustls::ClientConfig>>,
    ) -> Result<Connection> {
        let connect = TcpStream::connect(addr);
        let stream = tokio::time::timeout(Duration::from_millis(connect_timeout_ms), connect)
            .await
            .map_err(|_| ClientError::Timeout {
                what: "connect",
                timeout_ms: connect_timeout_ms,
            })?
            .map_err(|e| ClientError::io(addr, e))?;
        stream
            .set_nodelay(true)
            .map_err(|e| ClientError::io(addr, e))?;
        let (read_half, write_half): (ReadSide, WriteSide) = match tls {
            None => {
                let (r, w) = stream.into_split();
                (Box::new(r), Box::new(w))
            }
            Some(config) => {
                let tls = crate::tls::handshake(addr, stream, config, connect_timeout_ms).await?;
                let (r, w) = tokio::io::split(tls);
                (Box::new(r), Box::new(w))
            }
        };
        let (queue, queue_rx) = mpsc::channel(WRITE_QUEUE_DEPTH_MAX);
        let (pending_tx, pending_rx) = mpsc::unbounded_channel();
        let shutdown = Arc::new(Shutdown {
            closed: AtomicBool::new(false),
            notify: Notify::new(),
            reason: std::sync::Mutex::new(None),
        });
        tokio::spawn(write_loop(
            write_half,
            queue_rx,
            pending_tx,
            shutdown.clone(),
            addr.to_string(),
        ));
        tokio::spawn(read_loop(
            read_half,
            pending_rx,
            frame_size_bytes_max,
            shutdown.clone(),
            addr.to_string(),
        ));
        Ok(Connection {
            addr: addr.to_string(),
            queue,
            in_flight: Arc::new(Semaphore::new(in_flight_requests_max.max(1))),
            next_correlation_id: AtomicU32::new(1),
            shutdown,
        })
    }

    /// Whether the connection has died (the pool then opens a new one).
    pub fn is_closed(&self) -> bool {
        self.shutdown.is_closed() || self.queue.is_closed()
    }

    /// Queues `request` behind the ones already submitted on this connection, waiting for an
    /// in-flight slot first. The returned receiver resolves to the response.
    pub async fn submit(&self, request: Request) -> Result<oneshot::Receiver<Reply>> {
        let permit = self
            .in_flight
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| self.closed_error())?;
        if self.is_closed() {
            return Err(self.closed_error());
        }
        let correlation_id = self.next_correlation_id.fetch_add(1, Ordering::Relaxed);
        let header = FrameHeader::new(
            request.api_key as u16,
            request.api_key.max_version(),
            0,
            correlation_id,
            request.message.len(),
            request.payload.iter().map(Bytes::len).sum(),
        )
        .ok_or_else(|| ClientError::InvalidArgument("request larger than 4 GiB".into()))?;
        let mut head = BytesMut::with_capacity(FRAME_HEADER_SIZE_BYTES + request.message.len());
        head.extend_from_slice(&header.to_bytes());
        head.extend_from_slice(&request.message);
        let mut chunks = Vec::with_capacity(1 + request.payload.len());
        chunks.push(head.freeze());
        chunks.extend(request.payload);
        let (reply, receiver) = oneshot::channel();
        let outgoing = Outgoing {
            chunks,
            correlation_id,
            expect_response: request.expect_response,
            reply,
            _permit: permit,
        };
        self.queue
            .send(outgoing)
            .await
            .map_err(|_| self.closed_error())?;
        Ok(receiver)
    }

    /// Sends `request` and waits up to `timeout_ms` for its response.
    pub async fn call(&self, request: Request, timeout_ms: u64) -> Result<Response> {
        let receiver = self.submit(request).await?;
        let frame = await_reply(receiver, timeout_ms, self).await?;
        frame.ok_or_else(|| ClientError::Protocol("no response frame".into()))
    }

    fn closed_error(&self) -> ClientError {
        if let Some(reason) = self.shutdown.reason() {
            return reason;
        }
        ClientError::ConnectionClosed {
            addr: self.addr.clone(),
        }
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        self.shutdown.close();
    }
}

/// Waits for a reply to a request submitted on `conn` within `timeout_ms`. A request that
/// times out closes the connection (as Kafka's client disconnects on a request timeout): the
/// peer may be paused or cut off, every other request in flight on it fails at once
/// (retriable) instead of each waiting out its own timeout, their in-flight slots are free
/// again, and the next request opens a new connection. Without that, a silent peer keeps
/// every slot of the connection and `submit` waits forever for one.
pub(crate) async fn await_reply(
    receiver: oneshot::Receiver<Reply>,
    timeout_ms: u64,
    conn: &Connection,
) -> Reply {
    match tokio::time::timeout(Duration::from_millis(timeout_ms), receiver).await {
        Err(_) => {
            conn.shutdown.close();
            Err(ClientError::Timeout {
                what: "request",
                timeout_ms,
            })
        }
        Ok(Err(_)) => Err(conn.closed_error()),
        Ok(Ok(reply)) => reply,
    }
}

async fn write_loop(
    mut socket: WriteSide,
    mut queue: mpsc::Receiver<Outgoing>,
    pending: mpsc::UnboundedSender<Pending>,
    shutdown: Arc<Shutdown>,
    addr: String,
) {
    let mut batch = Vec::with_capacity(WRITE_COALESCE_FRAMES_MAX);
    let mut written = Vec::with_capacity(WRITE_COALESCE_FRAMES_MAX);
    let mut chunks: Vec<Bytes> = Vec::new();
    let failure = loop {
        let received = tokio::select! {
            n = queue.recv_many(&mut batch, WRITE_COALESCE_FRAMES_MAX) => n,
            _ = shutdown.wait() => break ClientError::ConnectionClosed { addr: addr.clone() },
        };
        if received == 0 {
            break ClientError::ConnectionClosed { addr: addr.clone() };
        }
        for outgoing in batch.drain(..) {
            chunks.extend(outgoing.chunks);
            if outgoing.expect_response {
                let entry = Pending {
                    correlation_id: outgoing.correlation_id,
                    reply: outgoing.reply,
                    _permit: outgoing._permit,
                };
                if let Err(mpsc::error::SendError(entry)) = pending.send(entry) {
                    // The reader ended: say why when it knows.
                    let error = shutdown
                        .reason()
                        .unwrap_or_else(|| ClientError::ConnectionClosed { addr: addr.clone() });
                    let _ = entry.reply.send(Err(error));
                }
            } else {
                written.push((outgoing.reply, outgoing._permit));
            }
        }
        if let Err(e) = write_chunks(&mut socket, &mut chunks).await {
            for (reply, _permit) in written.drain(..) {
                let _ = reply.send(Err(ClientError::io(&addr, clone_io(&e))));
            }
            break crate::tls::io_error(&addr, e);
        }
        for (reply, _permit) in written.drain(..) {
            let _ = reply.send(Ok(None));
        }
    };
    shutdown.close_with(&failure);
    let failure = shutdown.reason().unwrap_or(failure);
    queue.close();
    while let Ok(outgoing) = queue.try_recv() {
        let _ = outgoing.reply.send(Err(failure.clone()));
    }
    let _ = socket.shutdown().await;
}

fn clone_io(e: &std::io::Error) -> std::io::Error {
    std::io::Error::new(e.kind(), e.to_string())
}

/// Writes every chunk, in order, with vectored writes; empties `chunks`.
async fn write_chunks(socket: &mut WriteSide, chunks: &mut Vec<Bytes>) -> std::io::Result<()> {
    let mut first = 0;
    while first < chunks.len() {
        let slices: Vec<IoSlice<'_>> = chunks[first..]
            .iter()
            .take(WRITE_IOVECS_MAX)
            .map(|c| IoSlice::new(c))
            .collect();
        let mut n = socket.write_vectored(&slices).await?;
        drop(slices);
        if n == 0 {
            return Err(std::io::ErrorKind::WriteZero.into());
        }
        while n > 0 {
            let chunk = &mut chunks[first];
            let take = n.min(chunk.len());
            chunk.advance(take);
            n -= take;
            if chunk.is_empty() {
                first += 1;
            }
        }
        while first < chunks.len() && chunks[first].is_empty() {
            first += 1;
        }
    }
    chunks.clear();
    // TLS: rustls may still hold encrypted records of the last write (a no-op for TCP).
    socket.flush().await
}

async fn read_loop(
    mut socket: ReadSide,
    mut pending: mpsc::UnboundedReceiver<Pending>,
    frame_size_bytes_max: u32,
    shutdown: Arc<Shutdown>,
    addr: String,
) {
    let mut reader = FrameReader::new(frame_size_bytes_max);
    let failure = loop {
        let frame = tokio::select! {
            r = reader.next(&mut socket, &addr) => r,
            _ = shutdown.wait() => break ClientError::ConnectionClosed { addr: addr.clone() },
        };
        match frame.and_then(|frame| dispatch(frame, &mut pending, &addr)) {
            Ok(()) => {}
            Err(e) => break e,
        }
    };
    shutdown.close_with(&failure);
    let failure = shutdown.reason().unwrap_or(failure);
    pending.close();
    while let Ok(entry) = pending.try_recv() {
        let _ = entry.reply.send(Err(failure.clone()));
    }
}

/// A response frame: header, flatbuffers message and raw payload region, both `Bytes` views
/// of one buffer (record batches are sliced out of the payload without copying).
#[derive(Debug, Clone)]
pub(crate) struct Response {
    /// The checked header.
    pub header: FrameHeader,
    /// The flatbuffers message.
    pub message: Bytes,
    /// The payload region.
    pub payload: Bytes,
}

impl Response {
    fn from_frame_bytes(header: FrameHeader, frame: Bytes) -> Response {
        let message_start = usize::from(header.header_size_bytes);
        let payload_start = message_start + header.message_size_bytes as usize;
        Response {
            header,
            message: frame.slice(message_start..payload_start),
            payload: frame.slice(payload_start..),
        }
    }
}

/// Frames larger than this are read into a pooled buffer of their own instead of the shared
/// read buffer.
const LARGE_FRAME_BYTES_MIN: usize = 64 * 1024;
/// Large-frame buffers a connection keeps for reuse, and their total size at most.
const POOLED_BUFFERS_MAX: usize = 8;
const POOLED_BUFFER_BYTES_MAX: usize = 64 << 20;

/// Buffers of large frames, given back when the last `Bytes` view of a frame is dropped (the
/// application dropped the records it was given). Reusing them avoids asking the kernel for
/// fresh zeroed pages for every large fetch response, which cost several times the CPU of
/// decoding the records.
#[derive(Default)]
struct BufferPool {
    free: std::sync::Mutex<Vec<Vec<u8>>>,
}

impl BufferPool {
    fn take(&self, size: usize) -> Vec<u8> {
        let mut free = match self.free.lock() {
            Ok(free) => free,
            Err(poisoned) => poisoned.into_inner(),
        };
        match free.iter().position(|b| b.capacity() >= size) {
            Some(i) => {
                let mut buf = free.swap_remove(i);
                buf.clear();
                buf
            }
            None => Vec::with_capacity(size.next_multiple_of(LARGE_FRAME_BYTES_MIN)),
        }
    }

    fn give(&self, buf: Vec<u8>) {
        if buf.capacity() > POOLED_BUFFER_BYTES_MAX / 2 {
            return;
        }
        let mut free = match self.free.lock() {
            Ok(free) => free,
            Err(poisoned) => poisoned.into_inner(),
        };
        let pooled: usize = free.iter().map(Vec::capacity).sum();
        if free.len() < POOLED_BUFFERS_MAX && pooled + buf.capacity() <= POOLED_BUFFER_BYTES_MAX {
            free.push(buf);
        }
    }
}

/// A pooled buffer owned by `Bytes` views; returns to its pool when they are all dropped.
struct Pooled {
    buf: Vec<u8>,
    pool: Arc<BufferPool>,
}

impl AsRef<[u8]> for Pooled {
    fn as_ref(&self) -> &[u8] {
        &self.buf
    }
}

impl Drop for Pooled {
    fn drop(&mut self) {
        self.pool.give(std::mem::take(&mut self.buf));
    }
}

/// Reads whole frames off a socket: small frames through one shared read buffer, large ones
/// into pooled buffers of their own. Checks each header (CRC, sizes, `frame_size_bytes_max`)
/// before reading the rest.
struct FrameReader {
    buf: BytesMut,
    frame_size_bytes_max: u32,
    pool: Arc<BufferPool>,
}

impl FrameReader {
    fn new(frame_size_bytes_max: u32) -> FrameReader {
        FrameReader {
            buf: BytesMut::with_capacity(READ_BUFFER_BYTES),
            frame_size_bytes_max: frame_size_bytes_max
                .max(borges_protocol::frame::FRAME_SIZE_BYTES_MAX_MIN),
            pool: Arc::new(BufferPool::default()),
        }
    }

    async fn fill(&mut self, socket: &mut ReadSide, wanted: usize, addr: &str) -> Result<()> {
        while self.buf.len() < wanted {
            if self.buf.capacity() - self.buf.len() < 4096 {
                self.buf
                    .reserve(READ_BUFFER_BYTES.max(wanted - self.buf.len()));
            }
            match socket.read_buf(&mut self.buf).await {
                Ok(0) => {
                    return Err(ClientError::ConnectionClosed {
                        addr: addr.to_string(),
                    })
                }
                Ok(_) => {}
                Err(e) => return Err(crate::tls::io_error(addr, e)),
            }
        }
        Ok(())
    }

    async fn next(&mut self, socket: &mut ReadSide, addr: &str) -> Result<Response> {
        self.fill(socket, FRAME_HEADER_SIZE_BYTES, addr).await?;
        let header = FrameHeader::decode(
            &self.buf[..FRAME_HEADER_SIZE_BYTES],
            self.frame_size_bytes_max,
        )?;
        let size = header.frame_size_bytes as usize;
        if size < LARGE_FRAME_BYTES_MIN {
            self.fill(socket, size, addr).await?;
            let frame = self.buf.split_to(size).freeze();
            return Ok(Response::from_frame_bytes(header, frame));
        }
        let mut large = self.pool.take(size);
        let buffered = self.buf.len().min(size);
        large.extend_from_slice(&self.buf[..buffered]);
        self.buf.advance(buffered);
        while large.len() < size {
            let missing = size - large.len();
            let mut limited = (&mut large).limit(missing);
            match socket.read_buf(&mut limited).await {
                Ok(0) => {
                    return Err(ClientError::ConnectionClosed {
                        addr: addr.to_string(),
                    })
                }
                Ok(_) => {}
                Err(e) => return Err(crate::tls::io_error(addr, e)),
            }
        }
        let frame = Bytes::from_owner(Pooled {
            buf: large,
            pool: self.pool.clone(),
        });
        Ok(Response::from_frame_bytes(header, frame))
    }
}

/// Completes the oldest outstanding request with `frame`.
fn dispatch(
    frame: Response,
    pending: &mut mpsc::UnboundedReceiver<Pending>,
    addr: &str,
) -> Result<()> {
    if !frame.header.is_response() {
        return Err(ClientError::Protocol(format!(
            "{addr} sent a frame without the response flag"
        )));
    }
    let Ok(entry) = pending.try_recv() else {
        return Err(unexpected_frame(&frame, addr));
    };
    if entry.correlation_id != frame.header.correlation_id {
        let error = unexpected_frame(&frame, addr);
        let _ = entry.reply.send(Err(error.clone()));
        return Err(error);
    }
    let reply = if frame.header.is_error() {
        Err(error_response(&frame))
    } else {
        Ok(Some(frame))
    };
    let _ = entry.reply.send(reply);
    Ok(())
}

/// A frame nobody waits for: a connection-level ErrorResponse (the broker closes after it) or a
/// protocol violation.
fn unexpected_frame(frame: &Response, addr: &str) -> ClientError {
    if frame.header.is_error() {
        return error_response(frame);
    }
    ClientError::Protocol(format!(
        "{addr} answered correlation id {} that no request is waiting for",
        frame.header.correlation_id
    ))
}

/// Decodes the `ErrorResponse` of a frame with `FLAG_ERROR`.
pub(crate) fn error_response(frame: &Response) -> ClientError {
    match flatbuffers::root::<wire::ErrorResponse>(&frame.message) {
        Ok(e) => ClientError::from_code(e.error_code(), e.error_message().map(str::to_string))
            .unwrap_or_else(|| ClientError::Protocol("ErrorResponse without an error code".into())),
        Err(e) => ClientError::Protocol(format!("undecodable ErrorResponse: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use borges_protocol::frame::{encode_frame, FrameDecoder, FLAG_ERROR, FLAG_RESPONSE};
    use borges_protocol::ErrorCode;
    use tokio::net::TcpListener;

    fn error_message(code: ErrorCode, text: &str) -> Vec<u8> {
        let mut fbb = flatbuffers::FlatBufferBuilder::new();
        let msg = fbb.create_string(text);
        let root = wire::ErrorResponse::create(
            &mut fbb,
            &wire::ErrorResponseArgs {
                error_code: code as u16,
                error_message: Some(msg),
            },
        );
        fbb.finish_minimal(root);
        fbb.finished_data().to_vec()
    }

    /// A loopback peer that echoes each request's payload back as the response payload,
    /// answers api key 4 (UnsupportedApi) with an ErrorResponse, and never answers frames with
    /// empty messages.
    async fn echo_peer() -> String {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.unwrap();
            let mut decoder = FrameDecoder::new(1 << 20);
            let mut buf = BytesMut::new();
            loop {
                while let Some(frame) = decoder.decode(&mut buf).unwrap() {
                    let h = frame.header;
                    if frame.message.is_empty() {
                        continue;
                    }
                    let out = if h.api_key == 4 {
                        let m = error_message(ErrorCode::UnsupportedApi, "no such api");
                        encode_frame(
                            h.api_key,
                            h.api_version,
                            FLAG_RESPONSE | FLAG_ERROR,
                            h.correlation_id,
                            &m,
                            b"",
                        )
                    } else {
                        encode_frame(
                            h.api_key,
                            h.api_version,
                            FLAG_RESPONSE,
                            h.correlation_id,
                            &frame.message,
                            &frame.payload,
                        )
                    };
                    socket.write_all(&out.unwrap()).await.unwrap();
                }
                if socket.read_buf(&mut buf).await.unwrap() == 0 {
                    return;
                }
            }
        });
        addr
    }

    #[tokio::test]
    async fn pipelined_requests_complete_in_order_with_their_payloads() {
        let addr = echo_peer().await;
        let conn = Connection::connect(&addr, 1000, 8, 1 << 20, None)
            .await
            .unwrap();
        let mut receivers = Vec::new();
        for i in 0..100u32 {
            let mut request = Request::new(ApiKey::Metadata, vec![1, 2, 3]);
            request.payload = vec![
                Bytes::from(i.to_le_bytes().to_vec()),
                Bytes::from_static(b"xy"),
            ];
            receivers.push(conn.submit(request).await.unwrap());
        }
        for (i, r) in receivers.into_iter().enumerate() {
            let frame = await_reply(r, 5000, &conn).await.unwrap().unwrap();
            assert_eq!(&frame.payload[..4], &(i as u32).to_le_bytes());
            assert_eq!(&frame.payload[4..], b"xy");
            assert_eq!(frame.header.correlation_id, i as u32 + 1);
        }
    }

    #[tokio::test]
    async fn large_frames_use_pooled_buffers_and_interleave_with_small_ones() {
        let addr = echo_peer().await;
        let conn = Connection::connect(&addr, 1000, 8, 1 << 20, None)
            .await
            .unwrap();
        for round in 0..3u8 {
            let mut receivers = Vec::new();
            for i in 0..6u8 {
                let size = if i % 2 == 0 {
                    200 * 1024 + usize::from(i)
                } else {
                    10
                };
                let mut request = Request::new(ApiKey::Fetch, vec![i]);
                request.payload = vec![Bytes::from(vec![round ^ i; size])];
                receivers.push((i, size, conn.submit(request).await.unwrap()));
            }
            for (i, size, r) in receivers {
                let frame = await_reply(r, 5000, &conn).await.unwrap().unwrap();
                assert_eq!(&frame.message[..], &[i]);
                assert_eq!(frame.payload.len(), size);
                assert!(frame.payload.iter().all(|b| *b == round ^ i));
            }
        }
    }

    #[test]
    fn pool_reuses_buffers_and_bounds_what_it_keeps() {
        let pool = Arc::new(BufferPool::default());
        let first = pool.take(100_000);
        let capacity = first.capacity();
        drop(Bytes::from_owner(Pooled {
            buf: first,
            pool: pool.clone(),
        }));
        let again = pool.take(90_000);
        assert_eq!(again.capacity(), capacity, "the freed buffer is reused");
        for _ in 0..20 {
            pool.give(Vec::with_capacity(1 << 20));
        }
        assert!(pool.free.lock().unwrap().len() <= POOLED_BUFFERS_MAX);
        pool.give(Vec::with_capacity(POOLED_BUFFER_BYTES_MAX));
        assert!(pool
            .free
            .lock()
            .unwrap()
            .iter()
            .all(|b| b.capacity() <= POOLED_BUFFER_BYTES_MAX / 2));
    }

    #[tokio::test]
    async fn error_response_maps_to_typed_error_and_no_response_requests_complete_on_write() {
        let addr = echo_peer().await;
        let conn = Connection::connect(&addr, 1000, 8, 1 << 20, None)
            .await
            .unwrap();
        let err = conn
            .call(Request::new(ApiKey::DescribeConfigs, vec![9]), 5000)
            .await
            .unwrap_err();
        assert_eq!(err.code(), Some(ErrorCode::UnsupportedApi));
        assert_eq!(err.to_string(), "UnsupportedApi: no such api");
        let mut silent = Request::new(ApiKey::Produce, Vec::new());
        silent.expect_response = false;
        let reply = conn.submit(silent).await.unwrap().await.unwrap().unwrap();
        assert!(reply.is_none());
        // The connection still works after both.
        let frame = conn
            .call(Request::new(ApiKey::Metadata, vec![7]), 5000)
            .await
            .unwrap();
        assert_eq!(&frame.message[..], &[7]);
    }

    #[tokio::test]
    async fn peer_closing_fails_outstanding_requests_and_marks_the_connection_closed() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.unwrap();
            let mut buf = [0u8; 64];
            let _ = socket.read(&mut buf).await;
            drop(socket);
        });
        let conn = Connection::connect(&addr, 1000, 8, 1 << 20, None)
            .await
            .unwrap();
        let err = conn
            .call(Request::new(ApiKey::Metadata, vec![1]), 5000)
            .await
            .unwrap_err();
        assert!(err.is_retriable(), "{err}");
        assert!(conn.is_closed());
        assert!(conn
            .submit(Request::new(ApiKey::Metadata, vec![1]))
            .await
            .is_err());
    }

    #[tokio::test]
    async fn a_request_timeout_closes_the_connection_and_frees_its_slots() {
        // A peer that takes requests and never answers (a paused broker).
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.unwrap();
            let mut buf = [0u8; 4096];
            while socket.read(&mut buf).await.is_ok_and(|n| n > 0) {}
        });
        let conn = Connection::connect(&addr, 1000, 2, 1 << 20, None)
            .await
            .unwrap();
        let other = conn
            .submit(Request::new(ApiKey::Metadata, vec![1]))
            .await
            .unwrap();
        let err = conn
            .call(Request::new(ApiKey::Metadata, vec![2]), 100)
            .await
            .unwrap_err();
        assert!(matches!(err, ClientError::Timeout { .. }), "{err}");
        assert!(conn.is_closed(), "a timed-out connection is replaced");
        // The other request in flight fails at once instead of waiting out its timeout.
        let other = tokio::time::timeout(Duration::from_secs(5), other)
            .await
            .expect("failed at once")
            .unwrap();
        assert!(other.is_err_and(|e| e.is_retriable()));
        // Its slots are free: a submit does not wait for one (it fails: closed).
        let again = tokio::time::timeout(
            Duration::from_secs(5),
            conn.submit(Request::new(ApiKey::Metadata, vec![3])),
        )
        .await
        .expect("no wait for a slot");
        assert!(again.is_err());
    }

    #[tokio::test]
    async fn connect_refused_is_a_retriable_io_error() {
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let err = Connection::connect(&format!("127.0.0.1:{port}"), 1000, 1, 1 << 20, None)
            .await
            .err()
            .unwrap();
        assert!(matches!(err, ClientError::Io { .. }));
        assert!(err.is_retriable());
    }
}
