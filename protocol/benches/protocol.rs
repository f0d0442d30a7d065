//! Micro-benchmarks of the protocol codecs. Run with
//! `cargo bench -p borges-protocol --bench protocol`; results in docs/bench/protocol.md.

use std::hint::black_box;

use borges_protocol::batch::{self, BatchBuilder, BatchOptions, Compression, RecordBatch};
use borges_protocol::frame::{
    encode_frame, FrameDecoder, FrameHeader, FRAME_SIZE_BYTES_MAX_DEFAULT,
};
use borges_protocol::message::{decode_message, encode_message_head_into, MessageHead};
use borges_protocol::{wire, ApiKey};
use bytes::{Bytes, BytesMut};
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};

const RECORD_SIZE_BYTES: usize = 1024;
const BATCH_SIZES_BYTES: &[usize] = &[16 * 1024, 64 * 1024, 1024 * 1024];

/// A 1 KiB value that compresses like typical JSON events (field names repeat, values vary).
fn event_value(seed: u64) -> Vec<u8> {
    let mut out = Vec::with_capacity(RECORD_SIZE_BYTES);
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    while out.len() < RECORD_SIZE_BYTES {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let field = format!(
            "{{\"user\":\"u{}\",\"event\":\"click\",\"ts\":{},\"v\":{}}},",
            x % 100_000,
            1_700_000_000_000u64 + (x % 1_000_000),
            x >> 40
        );
        out.extend_from_slice(field.as_bytes());
    }
    out.truncate(RECORD_SIZE_BYTES);
    out
}

fn values(count: usize) -> Vec<Vec<u8>> {
    (0..count as u64).map(event_value).collect()
}

fn build_batch(compression: Compression, values: &[Vec<u8>]) -> Bytes {
    let mut builder = BatchBuilder::new(
        BatchOptions {
            compression,
            ..BatchOptions::default()
        },
        values.len() * (RECORD_SIZE_BYTES + 16),
    );
    for (i, v) in values.iter().enumerate() {
        builder.push(1_700_000_000_000 + i as i64, Some(b"user-1"), Some(v), &[]);
    }
    builder.build().unwrap()
}

fn frames(c: &mut Criterion) {
    let mut group = c.benchmark_group("frame");
    let message = vec![7u8; 200];
    let payload = vec![1u8; 1024];
    group.throughput(Throughput::Elements(1));
    group.bench_function("header_encode", |b| {
        b.iter(|| {
            FrameHeader::new(6, 0, 0, black_box(42), 200, 1024)
                .unwrap()
                .to_bytes()
        })
    });
    let header = FrameHeader::new(6, 0, 0, 42, 200, 1024).unwrap().to_bytes();
    group.bench_function("header_decode", |b| {
        b.iter(|| FrameHeader::decode(black_box(&header), FRAME_SIZE_BYTES_MAX_DEFAULT).unwrap())
    });
    let mut out = BytesMut::with_capacity(4096);
    group.bench_function("encode_head_200B_message", |b| {
        b.iter(|| {
            out.clear();
            let head = MessageHead::request(ApiKey::Produce, 0, black_box(1));
            encode_message_head_into(&mut out, head, &message, 1024).unwrap();
        })
    });
    // 64 pipelined frames of 24 + 200 + 1024 bytes, decoded from one buffer.
    let mut stream = BytesMut::new();
    for i in 0..64 {
        stream.extend_from_slice(&encode_frame(6, 0, 0, i, &message, &payload).unwrap());
    }
    let stream = stream.freeze();
    group.throughput(Throughput::Elements(64));
    group.bench_function("decode_64_pipelined_1248B_frames", |b| {
        b.iter(|| {
            let mut buf = BytesMut::from(&stream[..]);
            let mut decoder = FrameDecoder::new(FRAME_SIZE_BYTES_MAX_DEFAULT);
            let mut n = 0;
            while let Some(f) = decoder.decode(&mut buf).unwrap() {
                n += f.payload.len();
            }
            n
        })
    });
    group.finish();
}

fn messages(c: &mut Criterion) {
    // A Produce request naming 100 partitions: verify + walk every range.
    let partitions: Vec<_> = (0..100u32)
        .map(|p| (p as i32, wire::PayloadRange::new(p * 16384, 16384)))
        .collect();
    let fbb =
        borges_protocol::message::one_topic_produce_request("events", &partitions, -1, 30_000);
    let bytes = fbb.finished_data().to_vec();
    let mut group = c.benchmark_group("message");
    group.throughput(Throughput::Elements(1));
    group.bench_function("verify_produce_request_100_partitions", |b| {
        b.iter(|| {
            let r = decode_message::<wire::ProduceRequest>(black_box(&bytes)).unwrap();
            borges_protocol::message::produce_payload_ranges(&r, 100 * 16384)
                .unwrap()
                .len()
        })
    });
    group.finish();
}

fn crc_and_validation(c: &mut Criterion) {
    let mut group = c.benchmark_group("batch_validate");
    for &size in BATCH_SIZES_BYTES {
        let batch = build_batch(Compression::None, &values(size / RECORD_SIZE_BYTES));
        group.throughput(Throughput::Bytes(batch.len() as u64));
        group.bench_with_input(BenchmarkId::new("validate", size), &batch, |b, batch| {
            b.iter(|| batch::validate(black_box(batch)).unwrap())
        });
        group.bench_with_input(BenchmarkId::new("crc32c_only", size), &batch, |b, batch| {
            b.iter(|| crc32c::crc32c(black_box(batch)))
        });
        group.bench_with_input(
            BenchmarkId::new("records_decode", size),
            &batch,
            |b, batch| {
                let batch = RecordBatch::parse(batch.clone()).unwrap();
                b.iter(|| batch.records(8 << 20).unwrap().len())
            },
        );
    }
    group.finish();
}

fn zstd(c: &mut Criterion) {
    let mut group = c.benchmark_group("zstd");
    group.sample_size(20);
    for &size in BATCH_SIZES_BYTES {
        let values = values(size / RECORD_SIZE_BYTES);
        group.throughput(Throughput::Bytes(size as u64));
        group.bench_with_input(
            BenchmarkId::new("build_compress_l1", size),
            &values,
            |b, v| b.iter(|| build_batch(Compression::Zstd, v).len()),
        );
        let compressed = RecordBatch::parse(build_batch(Compression::Zstd, &values)).unwrap();
        eprintln!(
            "zstd level 1, {size} B of records -> {} B batch",
            compressed.as_bytes().len()
        );
        group.bench_with_input(
            BenchmarkId::new("decompress_decode", size),
            &compressed,
            |b, batch| b.iter(|| batch.records(8 << 20).unwrap().len()),
        );
    }
    group.finish();
}

/// The broker's produce-path check, side by side with what it replaced: `validate` (header and
/// CRC: the old check, plus a length walk for uncompressed batches) against `validate_produced`
/// (header, CRC, every record decoded and checked; zstd inflated through the 128 KiB window).
/// Small records are the worst case per byte; throughput is per byte of the batch as sent.
fn produce_validation(c: &mut Criterion) {
    let mut group = c.benchmark_group("produce_validation");
    group.sample_size(30);
    let limits = batch::ProduceLimits {
        batch_size_bytes_max: 8 << 20,
        decompressed_size_bytes_max: batch::DECOMPRESSED_SIZE_BYTES_MAX_DEFAULT,
    };
    for record_size in [100usize, 1024] {
        for compression in [Compression::None, Compression::Zstd] {
            let count = (1 << 20) / record_size;
            let values: Vec<Vec<u8>> = (0..count as u64)
                .map(|i| event_value(i)[..record_size].to_vec())
                .collect();
            let batch = build_batch(compression, &values);
            let name = format!("{compression:?}_{record_size}B_records_1MiB");
            group.throughput(Throughput::Bytes(batch.len() as u64));
            group.bench_with_input(BenchmarkId::new("validate", &name), &batch, |b, batch| {
                b.iter(|| batch::validate(black_box(batch)).unwrap())
            });
            group.bench_with_input(
                BenchmarkId::new("validate_produced", &name),
                &batch,
                |b, batch| b.iter(|| batch::validate_produced(black_box(batch), limits).unwrap()),
            );
        }
    }
    // The cost of refusing a bomb: 80 records of 1 MiB zeros (a few KB compressed) inflate
    // through the window until the 64 MiB limit.
    let zeros = vec![0u8; 1 << 20];
    let mut builder = BatchBuilder::new(
        BatchOptions {
            compression: Compression::Zstd,
            ..BatchOptions::default()
        },
        0,
    );
    for _ in 0..80 {
        builder.push(1_700_000_000_000, None, Some(&zeros), &[]);
    }
    let bomb = builder.build().unwrap();
    eprintln!("bomb: {} B batch, 80 MiB of records", bomb.len());
    group.throughput(Throughput::Elements(1));
    group.sample_size(10);
    group.bench_function("validate_produced/refuse_zstd_bomb_64MiB_limit", |b| {
        b.iter(|| batch::validate_produced(black_box(&bomb), limits).unwrap_err())
    });
    group.finish();
}

/// Side by side in one run: a fresh zstd context per call (what `zstd::bulk::compress` and
/// `zstd::stream::read::Decoder` do) against the reused per-thread contexts `BatchBuilder` and
/// `RecordBatch::records` use.
fn zstd_contexts(c: &mut Criterion) {
    let mut group = c.benchmark_group("zstd_context");
    group.sample_size(20);
    for &size in BATCH_SIZES_BYTES {
        let uncompressed: Vec<u8> = values(size / RECORD_SIZE_BYTES).concat();
        let compressed = zstd::bulk::compress(&uncompressed, 1).unwrap();
        group.throughput(Throughput::Bytes(size as u64));
        group.bench_with_input(
            BenchmarkId::new("compress_fresh", size),
            &uncompressed,
            |b, u| b.iter(|| zstd::bulk::compress(u, 1).unwrap().len()),
        );
        let mut compressor = zstd::bulk::Compressor::new(1).unwrap();
        group.bench_with_input(
            BenchmarkId::new("compress_reused", size),
            &uncompressed,
            |b, u| b.iter(|| compressor.compress(u).unwrap().len()),
        );
        group.bench_with_input(
            BenchmarkId::new("decompress_fresh_stream", size),
            &compressed,
            |b, z| {
                b.iter(|| {
                    let mut out = Vec::new();
                    std::io::Read::read_to_end(
                        &mut zstd::stream::read::Decoder::new(&z[..]).unwrap(),
                        &mut out,
                    )
                    .unwrap()
                })
            },
        );
        let mut decompressor = zstd::bulk::Decompressor::new().unwrap();
        group.bench_with_input(
            BenchmarkId::new("decompress_reused_exact", size),
            &compressed,
            |b, z| b.iter(|| decompressor.decompress(z, size).unwrap().len()),
        );
    }
    group.finish();
}

fn builder(c: &mut Criterion) {
    let mut group = c.benchmark_group("batch_builder");
    let values = values(1024);
    for &size in BATCH_SIZES_BYTES {
        let count = size / RECORD_SIZE_BYTES;
        group.throughput(Throughput::Bytes((count * RECORD_SIZE_BYTES) as u64));
        group.bench_with_input(
            BenchmarkId::new("push_build_1KiB_records", size),
            &count,
            |b, &count| {
                b.iter(|| {
                    let mut builder = BatchBuilder::new(
                        BatchOptions::default(),
                        count * (RECORD_SIZE_BYTES + 16),
                    );
                    for (i, v) in values[..count].iter().enumerate() {
                        builder.push(1_700_000_000_000 + i as i64, None, Some(v), &[]);
                    }
                    builder.build().unwrap()
                })
            },
        );
    }
    // The same 1 MiB batch from a builder created without a capacity hint: the buffer grows by
    // doubling (about 15 reallocations and copies).
    let count = 1024;
    group.throughput(Throughput::Bytes((count * RECORD_SIZE_BYTES) as u64));
    group.bench_function("push_build_1KiB_records_no_capacity_hint/1048576", |b| {
        b.iter(|| {
            let mut builder = BatchBuilder::new(BatchOptions::default(), 0);
            for (i, v) in values[..count].iter().enumerate() {
                builder.push(1_700_000_000_000 + i as i64, None, Some(v), &[]);
            }
            builder.build().unwrap()
        })
    });
    group.finish();
}

criterion_group!(
    benches,
    frames,
    messages,
    crc_and_validation,
    produce_validation,
    zstd,
    zstd_contexts,
    builder
);
criterion_main!(benches);
