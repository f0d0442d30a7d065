//! `borges-loadgen blast`: the broker's own limits, without client-library overhead.
//!
//! The SDK producer encodes every record and the SDK consumer decodes every record; at a million
//! records a second that work, not the broker, sets the pace. `blast` sends one pre-encoded
//! request over and over (a Produce of ready-made batches, or a Fetch of recent data) on
//! pipelined connections and only counts what comes back, so the broker is the bottleneck.

use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use borges_protocol::batch::{BatchBuilder, BatchOptions};
use borges_protocol::frame::{FrameDecoder, FRAME_HEADER_SIZE_BYTES};
use borges_protocol::message::{self, MessageHead};
use borges_protocol::{wire, ApiKey, ErrorCode};
use bytes::BytesMut;
use flatbuffers::FlatBufferBuilder;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::Semaphore;

/// What to blast.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum BlastKind {
    /// Produce pre-built batches.
    Produce,
    /// Fetch from a fixed offset (recent data) again and again.
    Fetch,
}

/// Settings of a blast.
#[derive(Debug, Clone, clap::Args)]
pub struct BlastArgs {
    /// Produce or fetch.
    #[arg(value_enum)]
    pub kind: BlastKind,
    /// Address to send to (a core's own port avoids cross-core hops).
    #[arg(long)]
    pub target: String,
    /// Topic (must exist).
    #[arg(long)]
    pub topic: String,
    /// Partition.
    #[arg(long, default_value_t = 0)]
    pub partition: i32,
    /// Record size.
    #[arg(long, default_value_t = 1024)]
    pub record_bytes: usize,
    /// Batch size (produce).
    #[arg(long, default_value_t = 65536)]
    pub batch_bytes: usize,
    /// Batches per produce request.
    #[arg(long, default_value_t = 16)]
    pub batches_per_request: usize,
    /// acks for produce: 0, 1 or -1.
    #[arg(long, default_value_t = 1, allow_hyphen_values = true)]
    pub acks: i16,
    /// Fetch offset (fetch).
    #[arg(long, default_value_t = 0)]
    pub offset: i64,
    /// Fetch this many records before the partition's end instead of `--offset` (needs
    /// `--bootstrap`).
    #[arg(long)]
    pub offset_from_end: Option<i64>,
    /// Broker address for looking up offsets.
    #[arg(long)]
    pub bootstrap: Option<String>,
    /// Bytes per fetch (fetch).
    #[arg(long, default_value_t = 1 << 20)]
    pub fetch_bytes: i32,
    /// Connections.
    #[arg(long, default_value_t = 1)]
    pub connections: usize,
    /// Requests in flight per connection.
    #[arg(long, default_value_t = 8)]
    pub in_flight: usize,
    /// Seconds to run (after one second of warm-up).
    #[arg(long, default_value_t = 10)]
    pub duration_s: u64,
    /// Connect with TLS, verifying the broker against these CA certificates (PEM).
    #[arg(long, value_name = "FILE")]
    pub tls_ca: Option<std::path::PathBuf>,
}

/// The two directions of a blast connection, plain or TLS.
type Sides = (
    Box<dyn tokio::io::AsyncRead + Send + Unpin>,
    Box<dyn tokio::io::AsyncWrite + Send + Unpin>,
);

async fn open(args: &BlastArgs) -> Result<Sides> {
    let stream = TcpStream::connect(&args.target)
        .await
        .with_context(|| format!("connecting to {}", args.target))?;
    stream.set_nodelay(true)?;
    let Some(ca) = &args.tls_ca else {
        let (rx, tx) = stream.into_split();
        return Ok((Box::new(rx), Box::new(tx)));
    };
    let config = borges_client::TlsConfig::new(ca).rustls_config()?;
    let host = args
        .target
        .rsplit_once(':')
        .map_or(&*args.target, |(h, _)| h);
    let name = rustls::pki_types::ServerName::try_from(host.to_string())?;
    let tls = tokio_rustls::TlsConnector::from(config)
        .connect(name, stream)
        .await
        .with_context(|| format!("TLS handshake with {}", args.target))?;
    let (rx, tx) = tokio::io::split(tls);
    Ok((Box::new(rx), Box::new(tx)))
}

fn produce_frame(args: &BlastArgs) -> Result<BytesMut> {
    let value = vec![b'x'; args.record_bytes];
    // Real timestamps: retention judges segments by them.
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64);
    let mut payload = Vec::new();
    for _ in 0..args.batches_per_request {
        let mut b = BatchBuilder::new(BatchOptions::default(), args.batch_bytes);
        while b.size_bytes() + args.record_bytes + 16 <= args.batch_bytes || b.is_empty() {
            b.push(now_ms, None, Some(&value), &[]);
        }
        payload.extend_from_slice(&b.build()?);
    }
    let range = wire::PayloadRange::new(0, payload.len() as u32);
    let fbb = message::one_topic_produce_request(
        &args.topic,
        &[(args.partition, range)],
        args.acks,
        30_000,
    );
    Ok(message::encode_message(
        MessageHead::request(ApiKey::Produce, 0, 1),
        &fbb,
        &payload,
    )?)
}

fn fetch_frame(args: &BlastArgs) -> Result<BytesMut> {
    let mut fbb = FlatBufferBuilder::new();
    let p = wire::FetchPartition::create(
        &mut fbb,
        &wire::FetchPartitionArgs {
            partition: args.partition,
            fetch_offset: args.offset,
            partition_max_bytes: args.fetch_bytes,
            ..Default::default()
        },
    );
    let parts = fbb.create_vector(&[p]);
    let name = fbb.create_string(&args.topic);
    let t = wire::FetchTopic::create(
        &mut fbb,
        &wire::FetchTopicArgs {
            name: Some(name),
            partitions: Some(parts),
        },
    );
    let topics = fbb.create_vector(&[t]);
    let root = wire::FetchRequest::create(
        &mut fbb,
        &wire::FetchRequestArgs {
            max_wait_ms: 0,
            min_bytes: 0,
            max_bytes: args.fetch_bytes,
            topics: Some(topics),
            ..Default::default()
        },
    );
    fbb.finish(root, None);
    Ok(message::encode_message(
        MessageHead::request(ApiKey::Fetch, 0, 1),
        &fbb,
        &[],
    )?)
}

/// Checks a response for a partition error.
fn check_response(kind: BlastKind, message: &[u8]) -> Result<()> {
    let code = match kind {
        BlastKind::Produce => {
            let r = message::decode_message::<wire::ProduceResponse>(message)?;
            r.topics()
                .and_then(|t| t.iter().next())
                .and_then(|t| t.partitions())
                .and_then(|p| p.iter().next())
                .map_or(r.error_code(), |p| p.error_code())
        }
        BlastKind::Fetch => {
            let r = message::decode_message::<wire::FetchResponse>(message)?;
            r.topics()
                .and_then(|t| t.iter().next())
                .and_then(|t| t.partitions())
                .and_then(|p| p.iter().next())
                .map_or(r.error_code(), |p| p.error_code())
        }
    };
    if code != 0 {
        bail!("broker answered {}", ErrorCode::from_u16(code));
    }
    Ok(())
}

/// Counts of one connection.
#[derive(Default, Clone, Copy)]
struct Counts {
    requests: u64,
    bytes: u64,
}

async fn connection(
    args: BlastArgs,
    frame: BytesMut,
    deadline: Instant,
    warm_until: Instant,
) -> Result<Counts> {
    let (mut rx, mut tx) = open(&args).await?;
    let window = std::sync::Arc::new(Semaphore::new(args.in_flight.max(1)));
    let expect_reply = !(args.kind == BlastKind::Produce && args.acks == 0);
    let frame = frame.freeze();
    let frame_bytes = frame.len() as u64;
    let w = window.clone();
    let writer = tokio::spawn(async move {
        let mut sent = 0u64;
        while Instant::now() < deadline {
            if expect_reply {
                w.acquire().await?.forget();
            }
            tx.write_all(&frame).await?;
            // TLS: rustls may still hold the frame's last records.
            tx.flush().await?;
            if Instant::now() >= warm_until {
                sent += 1;
            }
        }
        anyhow::Ok(sent)
    });
    let mut counts = Counts::default();
    let mut buf = BytesMut::with_capacity(4 << 20);
    let mut decoder = FrameDecoder::new(u32::MAX);
    let mut checked = false;
    if expect_reply {
        loop {
            match decoder.decode(&mut buf)? {
                Some(f) => {
                    // Every produce answer is checked (they are small); fetch answers once.
                    if args.kind == BlastKind::Produce || !checked {
                        check_response(args.kind, &f.message)?;
                        checked = true;
                    }
                    if Instant::now() >= warm_until {
                        counts.requests += 1;
                        counts.bytes += (f.payload.len() + FRAME_HEADER_SIZE_BYTES) as u64;
                    }
                    window.add_permits(1);
                    if Instant::now() >= deadline {
                        break;
                    }
                }
                None => {
                    if rx.read_buf(&mut buf).await? == 0 {
                        break;
                    }
                }
            }
        }
    }
    let sent = writer.await??;
    if args.kind == BlastKind::Produce {
        // Produce moves data to the broker: count the request frames sent after warm-up.
        counts.requests = sent;
        counts.bytes = sent * frame_bytes;
    }
    Ok(counts)
}

/// Resolves `--offset-from-end` to an absolute offset with a ListOffsets for the latest offset.
async fn resolve_offset(args: &BlastArgs) -> Result<i64> {
    let Some(back) = args.offset_from_end else {
        return Ok(args.offset);
    };
    let bootstrap = args
        .bootstrap
        .as_deref()
        .context("--offset-from-end needs --bootstrap")?;
    let tls = args.tls_ca.clone().map(borges_client::TlsConfig::new);
    let admin =
        borges_client::Admin::new(borges_client::ClientConfig::new(bootstrap).tls(tls)).await?;
    let tp = borges_client::TopicPartition::new(args.topic.as_str(), args.partition);
    let listed = admin
        .list_offsets(vec![(tp, borges_client::OffsetSpec::Latest)])
        .await?;
    let end = listed.first().map_or(0, |l| l.offset);
    Ok((end - back).max(0))
}

/// Runs a blast and prints per-run figures and `key=value` lines.
pub fn run(mut args: BlastArgs) -> Result<()> {
    if args.offset_from_end.is_some() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        args.offset = rt.block_on(resolve_offset(&args))?;
    }
    let frame = match args.kind {
        BlastKind::Produce => produce_frame(&args)?,
        BlastKind::Fetch => fetch_frame(&args)?,
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let start = Instant::now();
    let warm_until = start + Duration::from_secs(1);
    let deadline = warm_until + Duration::from_secs(args.duration_s);
    let totals = runtime.block_on(async {
        let mut tasks = Vec::new();
        for _ in 0..args.connections.max(1) {
            tasks.push(tokio::spawn(connection(
                args.clone(),
                frame.clone(),
                deadline,
                warm_until,
            )));
        }
        let mut total = Counts::default();
        for t in tasks {
            let c = t.await??;
            total.requests += c.requests;
            total.bytes += c.bytes;
        }
        anyhow::Ok(total)
    })?;
    let secs = args.duration_s.max(1) as f64;
    let mb_s = totals.bytes as f64 / secs / (1 << 20) as f64;
    println!(
        "blast {:?}: {} requests, {:.1} MiB in {secs:.0} s",
        args.kind,
        totals.requests,
        totals.bytes as f64 / (1 << 20) as f64
    );
    println!("throughput_mb_s={mb_s:.1}");
    println!("requests_s={:.0}", totals.requests as f64 / secs);
    Ok(())
}
