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
use std::future::Future;
use std::rc::Rc;
use std::time::Duration;

use borges_protocol::frame::{Frame, FrameHeader, FRAME_HEADER_SIZE_BYTES};
use borges_protocol::ErrorCode;
use borges_runtime::net::{Accepted, TcpStream};
use borges_runtime::sync::Notify;
use borges_runtime::task;
use borges_runtime::time;
use thiserror::Error;

use crate::config::FetchSendMode;
use crate::dispatch::ResponseTask;
use crate::failure::Failure;
use crate::frame_reader::{FrameReader, ReadStop};
use crate::request_memory::MemoryPermit;
use crate::shard::Shard;
use crate::types::SendChunk;
use crate::wire::{self, Response};

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
    /// Set by the writer when a response ended the connection: the reader stops.
    ended: std::cell::Cell<bool>,
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

    /// A response ended the connection: nothing more is read or answered.
    fn end(&self) {
        self.ended.set(true);
        self.changed.notify_all();
    }

    /// Resolves once a response ended the connection.
    async fn ended(&self) {
        loop {
            let seen = self.changed.generation();
            if self.ended.get() {
                return;
            }
            self.changed.changed_since(seen).await;
        }
    }
}

/// Why a connection's reader stopped.
#[derive(Debug, Error)]
enum CloseReason {
    #[error("broker shutting down")]
    ShuttingDown,
    #[error("peer closed")]
    PeerClosed,
    #[error("idle for {0:?}")]
    Idle(Duration),
    #[error("read: {0}")]
    Read(std::io::Error),
    /// Answered with this failure; the connection closes after lingering.
    #[error("refused: {0}")]
    Refused(Failure),
    /// A response ended the connection (see `Response::close_after`); it lingers too.
    #[error("ended by a response")]
    Ended,
    /// SASL on, and not authenticated within `sasl.authentication_timeout_ms`.
    #[error("not authenticated within sasl.authentication_timeout_ms ({0} ms)")]
    Unauthenticated(u64),
}

impl From<ReadStop> for CloseReason {
    fn from(stop: ReadStop) -> CloseReason {
        match stop {
            ReadStop::PeerClosed => CloseReason::PeerClosed,
            ReadStop::Idle(d) => CloseReason::Idle(d),
            ReadStop::Failed(e) => CloseReason::Read(e),
            ReadStop::Refused(f) => CloseReason::Refused(f),
        }
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
        Err(refusal) => return refuse(shard, stream, refusal).await,
    };
    let stream = match shard.tls() {
        None => stream,
        Some(tls) => match handshake(&shard, stream, &tls, &peer).await {
            Some(stream) => stream,
            None => return,
        },
    };
    let writer_stream = match stream.try_clone() {
        Ok(s) => s,
        Err(e) => {
            let refusal = Failure::new(
                ErrorCode::TooManyConnections,
                format!("no descriptor for the connection: {e}"),
            );
            return refuse(shard, stream, refusal).await;
        }
    };
    let in_flight = Rc::new(InFlight {
        queue: RefCell::new(VecDeque::new()),
        pushed: std::cell::Cell::new(0),
        capacity: shard.config().limits.in_flight_requests_per_connection_max as usize,
        changed: Notify::default(),
        closed: std::cell::Cell::new(false),
        ended: std::cell::Cell::new(false),
    });
    let writer = task::spawn(write_loop(shard.clone(), writer_stream, in_flight.clone()));
    let peer_host: Rc<str> = Rc::from(peer.rsplit_once(':').map_or(peer.as_str(), |(h, _)| h));
    let mut stream = stream;
    let mut auth = shard.sasl().map(crate::sasl::Authenticator::new);
    let mut principal: Rc<str> = match stream.tls_peer_subject() {
        Some(subject) => Rc::from(format!("User:{subject}")),
        None => Rc::from(crate::acl::ANONYMOUS),
    };
    let mut conn = Conn {
        peer: &peer_host,
        principal: &mut principal,
        auth: &mut auth,
    };
    let reason = read_loop(&shard, &mut stream, &in_flight, &mut conn).await;
    tracing::debug!(%peer, "closing connection: {reason}");
    in_flight.close();
    writer.await;
    if matches!(reason, CloseReason::Refused(_) | CloseReason::Ended) {
        linger(&mut stream).await;
    }
}

/// Runs the TLS handshake of an accepted connection within `tls.handshake_timeout_ms`. A
/// plaintext client is answered `TlsRequired` in plaintext and closed; a failed handshake
/// (rustls sent the peer an alert saying why) is counted and logged.
async fn handshake(
    shard: &Rc<Shard>,
    stream: TcpStream,
    tls: &borges_runtime::tls::TlsContext,
    peer: &str,
) -> Option<TcpStream> {
    let timeout_ms = shard.config().tls.handshake_timeout_ms;
    let metrics = shard.metrics();
    let accepted = time::timeout(
        Duration::from_millis(timeout_ms),
        stream.accept_tls(tls.server()),
    )
    .await;
    match accepted {
        Some(Ok(Accepted::Tls(stream))) => {
            count(&metrics.tls_handshakes);
            match stream.tls_peer_subject() {
                Some(principal) => tracing::debug!(%peer, %principal, "TLS connection"),
                None => tracing::debug!(%peer, "TLS connection"),
            }
            Some(stream)
        }
        Some(Ok(Accepted::Plaintext { stream, head })) => {
            count(&metrics.tls_plaintext_refused);
            tracing::debug!(%peer, "plaintext bytes on a TLS listener: answered TlsRequired");
            let refusal = Failure::new(
                ErrorCode::TlsRequired,
                "this listener requires TLS: connect with TLS (borges --tls-ca FILE, \
                 ClientConfig::tls)",
            );
            refuse_after(shard.clone(), stream, refusal, head).await;
            None
        }
        Some(Err(e)) => {
            count(&metrics.tls_handshake_failures);
            tracing::debug!(%peer, "TLS handshake failed: {e}");
            None
        }
        None => {
            count(&metrics.tls_handshake_failures);
            tracing::debug!(
                %peer,
                "TLS handshake not done within tls.handshake_timeout_ms ({timeout_ms} ms)"
            );
            None
        }
    }
}

/// How long a connection that is being closed after an error is read (and what it sends
/// dropped) so that its last response is not destroyed by a reset.
const LINGER_MS: u64 = 1_000;

/// Most bytes read and dropped while lingering.
const LINGER_BYTES_MAX: usize = 1 << 20;

/// Reads and drops what the peer still sends, until it closes, for at most [`LINGER_MS`] and
/// [`LINGER_BYTES_MAX`]. The sending side is already shut down, so the peer has read end of
/// stream after the last response.
async fn linger(stream: &mut TcpStream) {
    let deadline = time::Instant::now() + Duration::from_millis(LINGER_MS);
    let mut sink = [0u8; 4096];
    let mut dropped = 0;
    while dropped < LINGER_BYTES_MAX {
        let left = deadline.saturating_duration_since(time::Instant::now());
        match time::timeout(left, stream.read(&mut sink)).await {
            Some(Ok(n)) if n > 0 => dropped += n,
            _ => return,
        }
    }
}

/// Longest wait for a refused connection's first request header, so that the refusal answers
/// that request (with its correlation id) instead of arriving unasked.
const REFUSAL_HEADER_WAIT_MS_MAX: u64 = 1_000;

/// Answers the first request of a connection that cannot be served (over `connections_max`,
/// or no descriptor for it) with an ErrorResponse carrying `refusal`, then closes it. A peer
/// that sends no header within [`REFUSAL_HEADER_WAIT_MS_MAX`] is closed without an answer.
pub async fn refuse(shard: Rc<Shard>, stream: TcpStream, refusal: Failure) {
    refuse_after(shard, stream, refusal, Vec::new()).await
}

/// [`refuse`] for a connection whose first bytes (`head`) were read already.
async fn refuse_after(shard: Rc<Shard>, mut stream: TcpStream, refusal: Failure, read: Vec<u8>) {
    let _refusing = shard.admission().refusing();
    let wait = Duration::from_millis(
        REFUSAL_HEADER_WAIT_MS_MAX.min(shard.config().limits.frame_read_timeout_ms),
    );
    let deadline = time::Instant::now() + wait;
    let mut head = [0u8; FRAME_HEADER_SIZE_BYTES];
    let mut got = read.len().min(head.len());
    head[..got].copy_from_slice(&read[..got]);
    while got < head.len() {
        let left = deadline.saturating_duration_since(time::Instant::now());
        match time::timeout(left, stream.read(&mut head[got..])).await {
            Some(Ok(n)) if n > 0 => got += n,
            _ => return,
        }
    }
    let Some(header) = request_header(&head) else {
        return;
    };
    let r = wire::error_response(&header, &refusal);
    if stream.write_all(&r.head).await.is_ok() && stream.shutdown_write().await.is_ok() {
        linger(&mut stream).await;
    }
}

/// The header to answer a frame with: its own (key, version, correlation id) when its first
/// bytes are a valid header, else key 0 and correlation id 0.
fn request_header(buf: &[u8]) -> Option<FrameHeader> {
    FrameHeader::decode(buf, u32::MAX)
        .ok()
        .and_then(|h| FrameHeader::new(h.api_key, h.api_version, 0, h.correlation_id, 0, 0))
        .or_else(|| FrameHeader::new(0, 0, 0, 0, 0, 0))
}

/// Who is on the other end of a connection, as its reader knows it.
struct Conn<'a> {
    /// The peer's host.
    peer: &'a Rc<str>,
    /// The certificate subject's (mTLS) until SASL authenticates a user; else anonymous.
    principal: &'a mut Rc<str>,
    /// The SASL authenticator (SASL on).
    auth: &'a mut Option<crate::sasl::Authenticator>,
}

async fn read_loop(
    shard: &Rc<Shard>,
    stream: &mut TcpStream,
    in_flight: &InFlight,
    conn: &mut Conn<'_>,
) -> CloseReason {
    let limits = &shard.config().limits;
    let idle_between_frames = Duration::from_millis(limits.connection_idle_timeout_ms);
    let memory = shard.admission().request_memory().clone();
    let mut reader = FrameReader::new(limits);
    let sasl = &shard.config().sasl;
    let auth_deadline = conn.auth.as_ref().map(|_| {
        reader.limit_until_authenticated(sasl.unauthenticated_frame_size_bytes_max);
        time::Instant::now() + Duration::from_millis(sasl.authentication_timeout_ms)
    });
    loop {
        let idle = match idle_limit(shard, conn.auth, auth_deadline, idle_between_frames) {
            Ok(idle) => idle,
            Err(reason) => return reason,
        };
        if shard.lifecycle().is_shutting_down() {
            return CloseReason::ShuttingDown;
        }
        match reader.next_frame() {
            Ok(Some((frame, permit))) => {
                let handled = serve_frame(shard, conn, &mut reader, in_flight, frame, permit);
                match handled.await {
                    Some(reason) => return reason,
                    None => continue,
                }
            }
            Ok(None) => {}
            Err(failure) => {
                count(&shard.metrics().malformed_frames);
                return answer_and_close(in_flight, request_header(&reader.rb.buf), failure).await;
            }
        }
        if in_flight.ended.get() {
            return CloseReason::Ended;
        }
        let filled = futures_lite::future::or(
            async { Some(until_shutdown(shard, reader.fill(&memory, stream, idle)).await) },
            async {
                in_flight.ended().await;
                None
            },
        );
        let Some(filled) = filled.await else {
            return CloseReason::Ended;
        };
        match filled {
            None => return CloseReason::ShuttingDown,
            Some(Ok(n)) => {
                let received = &shard.metrics().bytes_received;
                received.set(received.get() + n as u64);
            }
            Some(Err(ReadStop::Refused(failure))) => {
                count(&shard.metrics().frames_timed_out);
                return answer_and_close(in_flight, request_header(&reader.rb.buf), failure).await;
            }
            Some(Err(stop)) => return stop.into(),
        }
    }
}

/// Takes one whole frame: its memory, the authenticator's word (SASL on), then dispatch, or
/// the authenticator's answer. `Some` when the connection stops.
async fn serve_frame(
    shard: &Rc<Shard>,
    conn: &mut Conn<'_>,
    reader: &mut FrameReader,
    in_flight: &InFlight,
    frame: Frame,
    permit: Option<MemoryPermit>,
) -> Option<CloseReason> {
    borges_runtime::executor::note_activity();
    let size_bytes = u64::from(frame.header.frame_size_bytes);
    let permit = match permit {
        Some(p) => p,
        None => {
            let memory = shard.admission().request_memory().clone();
            match until_shutdown(shard, memory.take(size_bytes, size_bytes)).await {
                Some(p) => p,
                None => return Some(CloseReason::ShuttingDown),
            }
        }
    };
    let correlation_id = frame.header.correlation_id;
    let (frame, permit) = match gate(shard, conn, reader, frame, permit) {
        Ok(pass) => pass,
        Err((response, permit)) => {
            let close = response.close_after;
            let task = task::spawn(async move {
                drop(permit);
                Some(response)
            });
            in_flight.push(Pending::new(correlation_id, task)).await;
            return close.then_some(CloseReason::Ended);
        }
    };
    let from = crate::handlers::Requester {
        peer: conn.peer,
        principal: conn.principal,
    };
    let task = crate::dispatch::request(shard, frame, permit, from).await;
    in_flight.push(Pending::new(correlation_id, task)).await;
    None
}

/// How long the reader may wait for bytes: the idle timeout, or less until the connection has
/// authenticated (SASL on), whose deadline closes it.
fn idle_limit(
    shard: &Rc<Shard>,
    auth: &Option<crate::sasl::Authenticator>,
    auth_deadline: Option<time::Instant>,
    idle_between_frames: Duration,
) -> Result<Duration, CloseReason> {
    let unauthenticated = auth.as_ref().is_some_and(|a| a.user().is_none());
    match auth_deadline {
        Some(deadline) if unauthenticated => {
            let left = deadline.saturating_duration_since(time::Instant::now());
            if left.is_zero() {
                count(&shard.metrics().sasl_authentication_failures);
                let timeout_ms = shard.config().sasl.authentication_timeout_ms;
                return Err(CloseReason::Unauthenticated(timeout_ms));
            }
            Ok(idle_between_frames.min(left))
        }
        _ => Ok(idle_between_frames),
    }
}

type Gated = Result<(Frame, MemoryPermit), (Response, MemoryPermit)>;

/// Asks the connection's authenticator (SASL on) about `frame`: pass it on to dispatch, or
/// the answer to send instead.
fn gate(
    shard: &Rc<Shard>,
    conn: &mut Conn<'_>,
    reader: &mut FrameReader,
    frame: Frame,
    permit: MemoryPermit,
) -> Gated {
    let Some(a) = conn.auth.as_mut() else {
        return Ok((frame, permit));
    };
    let (gate, outcome) = a.gate(&frame);
    if let crate::sasl::Outcome::Authenticated(user) = &outcome {
        *conn.principal = Rc::from(format!("User:{user}"));
    }
    note_outcome(shard, conn.peer, outcome);
    if a.user().is_some() {
        reader.authenticated();
    }
    match gate {
        crate::sasl::Gate::Pass => Ok((frame, permit)),
        crate::sasl::Gate::Answer(response) => Err((response, permit)),
    }
}

/// Counts and logs what a frame did to a connection's authentication.
fn note_outcome(shard: &Rc<Shard>, peer: &str, outcome: crate::sasl::Outcome) {
    match outcome {
        crate::sasl::Outcome::None => {}
        crate::sasl::Outcome::Authenticated(user) => {
            count(&shard.metrics().sasl_authentications);
            tracing::debug!(%peer, principal = %format!("User:{user}"), "SASL authenticated");
        }
        crate::sasl::Outcome::Failed(reason) => {
            count(&shard.metrics().sasl_authentication_failures);
            tracing::info!(%peer, "SASL authentication failed: {reason}");
        }
    }
}

fn count(counter: &std::cell::Cell<u64>) {
    counter.set(counter.get() + 1);
}

/// Runs `future` unless the broker starts shutting down first (`None`).
async fn until_shutdown<T>(shard: &Rc<Shard>, future: impl Future<Output = T>) -> Option<T> {
    let seen = shard.lifecycle().shutdown().generation();
    if shard.lifecycle().is_shutting_down() {
        return None;
    }
    futures_lite::future::or(async { Some(future.await) }, async {
        shard.lifecycle().shutdown().changed_since(seen).await;
        None
    })
    .await
}

/// Queues an ErrorResponse for a frame that cannot be served (correlation id of its header
/// when that is readable, else 0); the connection closes after it.
async fn answer_and_close(
    in_flight: &InFlight,
    header: Option<FrameHeader>,
    failure: Failure,
) -> CloseReason {
    if let Some(header) = header {
        let response = wire::error_response(&header, &failure);
        let task = task::spawn(async move { Some(response) });
        in_flight
            .push(Pending::new(header.correlation_id, task))
            .await;
    }
    CloseReason::Refused(failure)
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
        let close_after = response.close_after;
        if response.head.is_empty() {
            strict_assert!(close_after, "a response without a frame must close");
            in_flight.end();
            break;
        }
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
        if close_after {
            in_flight.end();
            break;
        }
    }
    let _ = stream.shutdown_write().await;
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
                // Over TLS this reads the range into memory and encrypts it.
                stream.send_file(fd, position, length, true).await?;
                total += length;
                if !stream.is_tls() {
                    shard
                        .metrics()
                        .bytes_sendfile
                        .set(shard.metrics().bytes_sendfile.get() + length);
                }
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
