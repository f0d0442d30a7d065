//! A loopback sink for producer benchmarks: a tiny broker stand-in that answers Metadata for
//! any topic (`--partitions` partitions, all led by itself), reads Produce requests, walks their
//! batch headers to assign offsets, and answers them (or not, with acks=0). It discards the
//! records. Other APIs get an `UnsupportedApi` error.
//!
//! ```text
//! taskset -c 1 cargo run --release -p borges-client --example sink -- --listen 127.0.0.1:19393 --partitions 8
//! ```

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use borges_protocol::batch::BatchHeader;
use borges_protocol::frame::{Frame, FrameDecoder, FrameHeader, FLAG_ERROR, FLAG_RESPONSE};
use borges_protocol::{wire, ApiKey, ErrorCode};
use bytes::BytesMut;
use flatbuffers::FlatBufferBuilder;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

mod bench_util;

use bench_util::arg;

struct Stats {
    bytes: AtomicU64,
    records: AtomicU64,
}

fn main() -> std::io::Result<()> {
    let listen = arg("--listen", "127.0.0.1:19393");
    let partitions: i32 = arg("--partitions", "8").parse().unwrap_or(8);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(serve(listen, partitions))
}

async fn serve(listen: String, partitions: i32) -> std::io::Result<()> {
    let listener = TcpListener::bind(&listen).await?;
    let local = listener.local_addr()?;
    eprintln!("sink listening on {local}, {partitions} partitions per topic");
    let stats = Arc::new(Stats {
        bytes: AtomicU64::new(0),
        records: AtomicU64::new(0),
    });
    tokio::spawn(report(stats.clone()));
    loop {
        let (socket, _) = listener.accept().await?;
        socket.set_nodelay(true)?;
        let stats = stats.clone();
        let host = local.ip().to_string();
        let port = local.port();
        tokio::spawn(async move {
            if let Err(e) = connection(socket, stats, host, port, partitions).await {
                eprintln!("connection ended: {e}");
            }
        });
    }
}

async fn report(stats: Arc<Stats>) {
    let mut last = (0u64, 0u64, Instant::now());
    loop {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let bytes = stats.bytes.load(Ordering::Relaxed);
        let records = stats.records.load(Ordering::Relaxed);
        let secs = last.2.elapsed().as_secs_f64();
        if bytes != last.0 {
            eprintln!(
                "sink: {:.0} MB/s, {:.0} records/s",
                (bytes - last.0) as f64 / secs / 1e6,
                (records - last.1) as f64 / secs
            );
        }
        last = (bytes, records, Instant::now());
    }
}

async fn connection(
    mut socket: TcpStream,
    stats: Arc<Stats>,
    host: String,
    port: u16,
    partitions: i32,
) -> std::io::Result<()> {
    let mut decoder = FrameDecoder::new(256 << 20);
    let mut buf = BytesMut::with_capacity(8 << 20);
    let mut out = Vec::with_capacity(64 * 1024);
    let mut offsets: HashMap<(String, i32), i64> = HashMap::new();
    loop {
        loop {
            let frame = decoder
                .decode(&mut buf)
                .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))?;
            let Some(frame) = frame else { break };
            stats
                .bytes
                .fetch_add(u64::from(frame.header.frame_size_bytes), Ordering::Relaxed);
            answer(
                &frame,
                &mut out,
                &mut offsets,
                &stats,
                &host,
                port,
                partitions,
            );
        }
        if !out.is_empty() {
            socket.write_all(&out).await?;
            out.clear();
        }
        if buf.capacity() - buf.len() < 1 << 20 {
            buf.reserve(4 << 20);
        }
        if socket.read_buf(&mut buf).await? == 0 {
            return Ok(());
        }
    }
}

fn push_frame(out: &mut Vec<u8>, request: &FrameHeader, flags: u16, message: &[u8]) {
    let header = FrameHeader::new(
        request.api_key,
        request.api_version,
        flags,
        request.correlation_id,
        message.len(),
        0,
    )
    .expect("small frame");
    out.extend_from_slice(&header.to_bytes());
    out.extend_from_slice(message);
}

fn answer(
    frame: &Frame,
    out: &mut Vec<u8>,
    offsets: &mut HashMap<(String, i32), i64>,
    stats: &Stats,
    host: &str,
    port: u16,
    partitions: i32,
) {
    let mut fbb = FlatBufferBuilder::with_capacity(1024);
    match ApiKey::from_u16(frame.header.api_key) {
        Some(ApiKey::Metadata) => {
            let request =
                flatbuffers::root::<wire::MetadataRequest>(&frame.message).map(|r| r.unpack());
            let names = request.ok().and_then(|r| r.topics).unwrap_or_default();
            let host = fbb.create_string(host);
            let broker = wire::BrokerMetadata::create(
                &mut fbb,
                &wire::BrokerMetadataArgs {
                    broker_id: 0,
                    host: Some(host),
                    port,
                    ..Default::default()
                },
            );
            let brokers = fbb.create_vector(&[broker]);
            let mut topics = Vec::new();
            for name in &names {
                let parts: Vec<_> = (0..partitions)
                    .map(|p| {
                        let replicas = fbb.create_vector(&[0]);
                        let isr = fbb.create_vector(&[0]);
                        wire::PartitionMetadata::create(
                            &mut fbb,
                            &wire::PartitionMetadataArgs {
                                partition: p,
                                leader_id: 0,
                                leader_epoch: 0,
                                replicas: Some(replicas),
                                isr: Some(isr),
                                ..Default::default()
                            },
                        )
                    })
                    .collect();
                let parts = fbb.create_vector(&parts);
                let name = fbb.create_string(name);
                topics.push(wire::TopicMetadata::create(
                    &mut fbb,
                    &wire::TopicMetadataArgs {
                        name: Some(name),
                        partitions: Some(parts),
                        ..Default::default()
                    },
                ));
            }
            let topics = fbb.create_vector(&topics);
            let root = wire::MetadataResponse::create(
                &mut fbb,
                &wire::MetadataResponseArgs {
                    brokers: Some(brokers),
                    topics: Some(topics),
                    ..Default::default()
                },
            );
            fbb.finish_minimal(root);
            push_frame(out, &frame.header, FLAG_RESPONSE, fbb.finished_data());
        }
        Some(ApiKey::Produce) => {
            let Ok(request) = flatbuffers::root::<wire::ProduceRequest>(&frame.message) else {
                return;
            };
            let mut topic_responses = Vec::new();
            for topic in request.topics().iter().flatten() {
                let mut parts = Vec::new();
                for p in topic.partitions().iter().flatten() {
                    let range = p
                        .records()
                        .map(|r| (r.offset() as usize, r.length() as usize))
                        .unwrap_or((0, 0));
                    let records = count_records(&frame.payload[range.0..range.0 + range.1]);
                    stats.records.fetch_add(records as u64, Ordering::Relaxed);
                    let next = offsets
                        .entry((topic.name().to_string(), p.partition()))
                        .or_insert(0);
                    let base = *next;
                    *next += records;
                    parts.push(wire::PartitionProduceResponse::create(
                        &mut fbb,
                        &wire::PartitionProduceResponseArgs {
                            partition: p.partition(),
                            base_offset: base,
                            log_append_time_ms: -1,
                            log_start_offset: 0,
                            ..Default::default()
                        },
                    ));
                }
                let parts = fbb.create_vector(&parts);
                let name = fbb.create_string(topic.name());
                topic_responses.push(wire::TopicProduceResponse::create(
                    &mut fbb,
                    &wire::TopicProduceResponseArgs {
                        name: Some(name),
                        partitions: Some(parts),
                    },
                ));
            }
            if request.acks() == 0 {
                return;
            }
            let topics = fbb.create_vector(&topic_responses);
            let root = wire::ProduceResponse::create(
                &mut fbb,
                &wire::ProduceResponseArgs {
                    topics: Some(topics),
                    ..Default::default()
                },
            );
            fbb.finish_minimal(root);
            push_frame(out, &frame.header, FLAG_RESPONSE, fbb.finished_data());
        }
        _ => {
            let msg = fbb.create_string("the sink only answers Metadata and Produce");
            let root = wire::ErrorResponse::create(
                &mut fbb,
                &wire::ErrorResponseArgs {
                    error_code: ErrorCode::UnsupportedApi as u16,
                    error_message: Some(msg),
                },
            );
            fbb.finish_minimal(root);
            push_frame(
                out,
                &frame.header,
                FLAG_RESPONSE | FLAG_ERROR,
                fbb.finished_data(),
            );
        }
    }
}

/// Records in concatenated batches, from their headers only.
fn count_records(mut batches: &[u8]) -> i64 {
    let mut n = 0;
    while let Ok(header) = BatchHeader::parse(batches) {
        n += i64::from(header.records_count);
        batches = batches.get(header.size_bytes()..).unwrap_or_default();
    }
    n
}
