//! Frame memory fairness against a real broker: connections that declare large frames and then
//! send their bodies slowly, or never, must not keep other clients from being served; a frame
//! body must arrive within `frame_read_timeout_ms`; a connection's first frame has a smaller
//! budget than later ones.
//!
//! No timed assertions: a normal client's requests either complete (within a generous deadline)
//! or never do, which is what the bug looked like.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

use borges_protocol::frame::FrameHeader;
use borges_protocol::message::{self, MessageHead};
use borges_protocol::{wire, ApiKey, ErrorCode};
use borges_testkit::{BrokerOptions, BrokerProcess};
use common::{make_batch, value, RawClient};
use flatbuffers::FlatBufferBuilder;

/// How long a normal client may take before the test calls it "never served". Generous: the
/// point is "completes" against "never", not how fast.
const SERVED_DEADLINE: Duration = Duration::from_secs(60);

/// A 64 MiB frame, as declared by the stalling connections.
const DECLARED_FRAME_BYTES: usize = 64 << 20;

fn start(extra_limits: &str) -> BrokerProcess {
    let broker = BrokerProcess::start_with(BrokerOptions {
        cores: 2,
        config_toml: Some(format!("[limits]\n{extra_limits}\n")),
        ..Default::default()
    });
    let mut c = RawClient::connect(broker.addr());
    assert_eq!(c.create_topic("good", 2, &[]), ErrorCode::None);
    for p in 0..2 {
        assert_eq!(c.produce("good", p, &["ok"], -1).0, ErrorCode::None);
    }
    broker
}

/// Every core's own address, from the ready file.
fn core_addrs(broker: &BrokerProcess) -> Vec<SocketAddr> {
    broker.ready["cores"]
        .as_array()
        .expect("cores in the ready file")
        .iter()
        .map(|c| c["addr"].as_str().unwrap().parse().unwrap())
        .collect()
}

/// A valid Produce frame header (checksum included) declaring `frame_bytes` in all.
fn declared_header(frame_bytes: usize, correlation_id: u32) -> [u8; 24] {
    let message = 64;
    FrameHeader::new(
        ApiKey::Produce as u16,
        0,
        0,
        correlation_id,
        message,
        frame_bytes - 24 - message,
    )
    .expect("header")
    .to_bytes()
}

/// Opens `per_core` connections to every core's own port, each sending one ApiVersions request
/// (so that it is established and may send frames of up to `frame_size_bytes_max`) and then
/// only a header that declares a 64 MiB frame.
fn stalled_connections(broker: &BrokerProcess, per_core: usize) -> Vec<TcpStream> {
    let mut out = Vec::new();
    for addr in core_addrs(broker) {
        for i in 0..per_core {
            let mut s = TcpStream::connect(addr).expect("connect");
            s.write_all(&api_versions_frame(1)).expect("ApiVersions");
            s.write_all(&declared_header(DECLARED_FRAME_BYTES, i as u32 + 2))
                .expect("header");
            out.push(s);
        }
    }
    out
}

/// Four normal requests (metadata, produce, fetch, fetch) on every core's own port, in a thread;
/// panics when they do not all complete within [`SERVED_DEADLINE`].
fn normal_clients_are_served(broker: &BrokerProcess, what: &str) {
    let addrs = core_addrs(broker);
    let cores = addrs.len();
    let (done, finished) = mpsc::channel();
    std::thread::spawn(move || {
        for (core, addr) in addrs.into_iter().enumerate() {
            let served = std::panic::catch_unwind(|| four_requests(addr, core as i32 % 2));
            let _ = done.send(served.map_err(|_| format!("core {core}'s requests failed")));
        }
    });
    for _ in 0..cores {
        match finished.recv_timeout(SERVED_DEADLINE) {
            Ok(Ok(())) => {}
            Ok(Err(e)) => panic!("{e} while {what}"),
            Err(_) => {
                panic!("a normal client was not served within {SERVED_DEADLINE:?} while {what}")
            }
        }
    }
}

fn four_requests(addr: SocketAddr, partition: i32) {
    let mut c = RawClient::connect(addr);
    c.placement("good");
    let (code, base) = c.produce("good", partition, &["more"], -1);
    assert_eq!(code, ErrorCode::None);
    let (code, _, records) = c.fetch("good", partition, 0);
    assert_eq!(code, ErrorCode::None);
    assert_eq!(value(&records[0]), "ok");
    let (code, _, records) = c.fetch("good", partition, base);
    assert_eq!(code, ErrorCode::None);
    assert_eq!(records.iter().map(value).collect::<Vec<_>>(), ["more"]);
}

#[test]
fn declared_frames_without_bodies_do_not_stall_other_clients() {
    // The frame timeout is far away, so that only the memory accounting can keep others served.
    let broker = start("frame_read_timeout_ms = 600000");
    // Twelve per core: more than the 8 x 64 MiB that fill a core's default 512 MiB.
    let stalled = stalled_connections(&broker, 12);
    normal_clients_are_served(&broker, "24 connections hold 64 MiB frame headers");
    drop(stalled);
    normal_clients_are_served(&broker, "the stalled connections closed");
}

/// Sends one byte to every connection every 50 ms until `stop`.
fn trickle(mut streams: Vec<TcpStream>, stop: Arc<AtomicBool>) {
    while !stop.load(Ordering::SeqCst) {
        for s in &mut streams {
            let _ = s.write_all(&[0u8]);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn trickled_bodies_on_many_connections_do_not_stall_other_clients() {
    let broker = start("frame_read_timeout_ms = 600000");
    let streams = stalled_connections(&broker, 250);
    let stop = Arc::new(AtomicBool::new(false));
    let trickler = {
        let stop = stop.clone();
        std::thread::spawn(move || trickle(streams, stop))
    };
    normal_clients_are_served(&broker, "500 connections trickle 64 MiB bodies");
    stop.store(true, Ordering::SeqCst);
    trickler.join().unwrap();
    normal_clients_are_served(&broker, "the trickling connections closed");
}

/// Reads until the broker closes the connection; returns the first frame it sent, if any.
fn read_until_closed(mut s: TcpStream) -> Vec<u8> {
    s.set_read_timeout(Some(SERVED_DEADLINE)).unwrap();
    let mut out = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        match s.read(&mut chunk) {
            Ok(0) => return out,
            Ok(n) => out.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return out,
            Err(e) => panic!("the broker did not close the connection: {e}"),
        }
    }
}

/// (error code, correlation id) of an ErrorResponse frame.
fn error_of(bytes: &[u8]) -> (ErrorCode, u32) {
    let h = FrameHeader::decode(bytes, u32::MAX).expect("an ErrorResponse frame");
    assert!(h.is_response() && h.is_error(), "{h:?}");
    let msg = &bytes[24..24 + h.message_size_bytes as usize];
    (
        message::decode_error_response(msg).unwrap().0,
        h.correlation_id,
    )
}

#[test]
fn a_frame_body_must_arrive_within_frame_read_timeout() {
    let broker = start("frame_read_timeout_ms = 300");
    // Silent after the header, and trickling (never idle, never complete): both are closed with
    // a typed error naming the frame's correlation id.
    let mut silent = TcpStream::connect(broker.addr()).unwrap();
    silent.write_all(&declared_header(1 << 20, 41)).unwrap();
    let trickling = TcpStream::connect(broker.addr()).unwrap();
    let mut t = trickling.try_clone().unwrap();
    t.write_all(&declared_header(1 << 20, 42)).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let trickler = {
        let stop = stop.clone();
        std::thread::spawn(move || trickle(vec![t], stop))
    };
    assert_eq!(
        error_of(&read_until_closed(silent)),
        (ErrorCode::RequestTimedOut, 41)
    );
    assert_eq!(
        error_of(&read_until_closed(trickling)),
        (ErrorCode::RequestTimedOut, 42)
    );
    stop.store(true, Ordering::SeqCst);
    trickler.join().unwrap();
    // A header cut short is a frame that has begun too.
    let mut partial = TcpStream::connect(broker.addr()).unwrap();
    partial
        .write_all(&declared_header(1 << 20, 43)[..10])
        .unwrap();
    assert_eq!(
        error_of(&read_until_closed(partial)),
        (ErrorCode::RequestTimedOut, 0)
    );
    normal_clients_are_served(&broker, "after frame read timeouts");
}

/// A Produce frame of about `batch_bytes`, as one batch of one record.
fn produce_frame(batch_bytes: usize, correlation_id: u32) -> Vec<u8> {
    let big = "x".repeat(batch_bytes);
    let batch = make_batch(&[big.as_str()], borges_protocol::batch::Compression::None);
    let range = wire::PayloadRange::new(0, batch.len() as u32);
    let fbb = message::one_topic_produce_request("good", &[(0, range)], -1, 30_000);
    let head = MessageHead::request(ApiKey::Produce, 0, correlation_id);
    message::encode_message(head, &fbb, &batch)
        .unwrap()
        .to_vec()
}

fn api_versions_frame(correlation_id: u32) -> Vec<u8> {
    let mut fbb = FlatBufferBuilder::new();
    let root = wire::ApiVersionsRequest::create(&mut fbb, &Default::default());
    fbb.finish(root, None);
    let head = MessageHead::request(ApiKey::ApiVersions, 0, correlation_id);
    message::encode_message(head, &fbb, &[]).unwrap().to_vec()
}

#[test]
fn a_first_frame_gets_a_smaller_budget_than_later_ones() {
    let broker = start("first_frame_size_bytes_max = 65536");
    let big = produce_frame(200 << 10, 7);
    // As a connection's first frame: refused from its header.
    let mut fresh = TcpStream::connect(broker.addr()).unwrap();
    fresh.write_all(&big[..24]).unwrap();
    assert_eq!(
        error_of(&read_until_closed(fresh)),
        (ErrorCode::FrameTooLarge, 7)
    );
    // After one frame, the same request is served.
    let mut c = RawClient::connect(broker.addr());
    c.stream.write_all(&api_versions_frame(1)).unwrap();
    let r = c.receive().expect("ApiVersions answer");
    assert!(!r.header.is_error());
    c.stream.write_all(&big).unwrap();
    let r = c.receive().expect("Produce answer");
    assert_eq!(r.header.correlation_id, 7);
    assert!(!r.header.is_error());
    let p = flatbuffers::root::<wire::ProduceResponse>(&r.message).unwrap();
    let part = p.topics().unwrap().get(0).partitions().unwrap().get(0);
    assert_eq!(ErrorCode::from_u16(part.error_code()), ErrorCode::None);
}

#[test]
fn honest_large_frames_beyond_request_memory_all_complete() {
    // Request memory for two frames of 1 MiB: eight connections sending 900 KiB frames at
    // once, interleaved, would each hold part of the memory and wait for more forever if memory
    // only came in steps; the reserve lets the oldest finish, then the next.
    let broker = start(
        "frame_size_bytes_max = 1048576\n\
         request_memory_bytes_max_per_core = 2097152\n\
         frame_read_timeout_ms = 600000\n\
         [log]\nmax_message_bytes = 1000000",
    );
    let addr = core_addrs(&broker)[0];
    let (done, finished) = mpsc::channel();
    for i in 0..8u32 {
        let done = done.clone();
        std::thread::spawn(move || {
            let mut c = RawClient::connect(addr);
            let frame = produce_frame(900 << 10, 100 + i);
            for chunk in frame.chunks(64 << 10) {
                c.stream.write_all(chunk).unwrap();
                std::thread::sleep(Duration::from_millis(5));
            }
            let r = c.receive().expect("Produce answer");
            let p = flatbuffers::root::<wire::ProduceResponse>(&r.message).unwrap();
            let part = p.topics().unwrap().get(0).partitions().unwrap().get(0);
            let _ = done.send((r.header.correlation_id, part.error_code()));
        });
    }
    for _ in 0..8 {
        let (id, code) = finished
            .recv_timeout(SERVED_DEADLINE)
            .expect("a large frame never completed");
        assert_eq!(ErrorCode::from_u16(code), ErrorCode::None, "request {id}");
    }
}

/// Reads, in a thread, until the broker closes `s`: the bytes it sent, or why it did not close
/// within [`SERVED_DEADLINE`].
fn read_answer_then_close(mut s: TcpStream) -> std::thread::JoinHandle<Result<Vec<u8>, String>> {
    std::thread::spawn(move || {
        s.set_read_timeout(Some(SERVED_DEADLINE)).unwrap();
        let mut out = Vec::new();
        let mut chunk = [0u8; 4096];
        loop {
            match s.read(&mut chunk) {
                Ok(0) => return Ok(out),
                Ok(n) => out.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return Ok(out),
                Err(e) => return Err(format!("not closed: {e} after {} bytes", out.len())),
            }
        }
    })
}

#[test]
fn many_slow_connections_are_closed_at_the_frame_deadline_while_others_are_served() {
    let broker = start("frame_read_timeout_ms = 2000");
    let addrs = core_addrs(&broker);
    // Per core: 50 that send only a header, 50 that trickle their bodies a byte at a time.
    let (mut silent, mut trickling, mut readers) = (Vec::new(), Vec::new(), Vec::new());
    for (core, addr) in addrs.iter().enumerate() {
        for i in 0..100u32 {
            let id = 1000 * (core as u32 + 1) + i;
            let mut s = TcpStream::connect(addr).expect("connect");
            s.write_all(&declared_header(8 << 20, id)).unwrap();
            readers.push((id, read_answer_then_close(s.try_clone().unwrap())));
            if i % 2 == 0 {
                silent.push(s);
            } else {
                trickling.push(s);
            }
        }
    }
    let stop = Arc::new(AtomicBool::new(false));
    let trickler = {
        let stop = stop.clone();
        std::thread::spawn(move || trickle(trickling, stop))
    };
    normal_clients_are_served(&broker, "200 connections are slow");
    for (id, reader) in readers {
        let bytes = reader
            .join()
            .expect("reader")
            .unwrap_or_else(|e| panic!("{id}: {e}"));
        assert_eq!(
            error_of(&bytes),
            (ErrorCode::RequestTimedOut, id),
            "slow connection {id}"
        );
    }
    stop.store(true, Ordering::SeqCst);
    trickler.join().unwrap();
    drop(silent);
    normal_clients_are_served(&broker, "after 200 frame read timeouts");
}
