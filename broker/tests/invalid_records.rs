//! Record-level validation on produce, against a real broker: batches whose header and CRC are
//! fine but whose records break a rule of the record format (or that inflate without bound) are
//! refused with a typed error naming the record and the rule, nothing of that partition request
//! is appended, and valid batches of every shape are still accepted.

mod common;

use borges_protocol::batch::{
    field, BatchBuilder, BatchOptions, Compression, BATCH_HEADER_SIZE_BYTES, LOG_OVERHEAD_BYTES,
};
use borges_protocol::varint::{put_varint, put_varlong};
use borges_protocol::ErrorCode;
use borges_testkit::BrokerProcess;
use common::{value, RawClient};

const TIMESTAMP_MS: i64 = 1_700_000_000_000;

/// One record's bytes: `length` varint, then the body as given.
fn framed(body: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    put_varint(&mut out, body.len() as i32);
    out.extend_from_slice(body);
    out
}

fn nullable(out: &mut Vec<u8>, bytes: Option<&[u8]>) {
    match bytes {
        None => put_varint(out, -1),
        Some(b) => {
            put_varint(out, b.len() as i32);
            out.extend_from_slice(b);
        }
    }
}

/// A well-formed record body with the given offset delta and value.
fn body(offset_delta: i32, value: &[u8]) -> Vec<u8> {
    let mut out = vec![0u8];
    put_varlong(&mut out, 0);
    put_varint(&mut out, offset_delta);
    nullable(&mut out, Some(b"k"));
    nullable(&mut out, Some(value));
    put_varint(&mut out, 0);
    out
}

/// Header fields a test may change; `assemble` computes batch_length and the CRC.
struct Fields {
    attributes: i16,
    last_offset_delta: i32,
    max_timestamp: i64,
    records_count: i32,
}

fn fields(records_count: i32) -> Fields {
    Fields {
        attributes: 0,
        last_offset_delta: records_count - 1,
        max_timestamp: TIMESTAMP_MS,
        records_count,
    }
}

/// A v2 batch around `section` with a correct batch_length and CRC: everything the broker
/// checked before record-level validation passes.
fn assemble(f: &Fields, section: &[u8]) -> Vec<u8> {
    let mut b = Vec::with_capacity(BATCH_HEADER_SIZE_BYTES + section.len());
    b.extend_from_slice(&0i64.to_be_bytes());
    let batch_length = (BATCH_HEADER_SIZE_BYTES - LOG_OVERHEAD_BYTES + section.len()) as i32;
    b.extend_from_slice(&batch_length.to_be_bytes());
    b.extend_from_slice(&(-1i32).to_be_bytes());
    b.push(2);
    b.extend_from_slice(&[0; 4]);
    b.extend_from_slice(&f.attributes.to_be_bytes());
    b.extend_from_slice(&f.last_offset_delta.to_be_bytes());
    b.extend_from_slice(&TIMESTAMP_MS.to_be_bytes());
    b.extend_from_slice(&f.max_timestamp.to_be_bytes());
    b.extend_from_slice(&(-1i64).to_be_bytes());
    b.extend_from_slice(&(-1i16).to_be_bytes());
    b.extend_from_slice(&(-1i32).to_be_bytes());
    b.extend_from_slice(&f.records_count.to_be_bytes());
    assert_eq!(b.len(), BATCH_HEADER_SIZE_BYTES);
    b.extend_from_slice(section);
    let crc = crc32c::crc32c(&b[field::ATTRIBUTES..]);
    b[field::CRC..field::CRC + 4].copy_from_slice(&crc.to_be_bytes());
    b
}

/// A batch of `n` well-formed records with offset deltas `deltas`.
fn with_deltas(deltas: &[i32]) -> Vec<u8> {
    let section: Vec<u8> = deltas
        .iter()
        .flat_map(|&d| framed(&body(d, b"v")))
        .collect();
    assemble(&fields(deltas.len() as i32), &section)
}

/// One record whose body is `raw` (length prefix correct).
fn one_raw(raw: &[u8]) -> Vec<u8> {
    assemble(&fields(1), &framed(raw))
}

/// A zstd frame (RFC 8878) of `total_bytes` zero bytes, written as RLE blocks of 128 KiB: 4 bytes
/// per block, so 1.5 GiB fit in ~48 KiB, as in the report that found this.
fn zstd_zero_bomb(total_bytes: u64) -> Vec<u8> {
    const BLOCK_BYTES: u64 = 128 * 1024;
    let mut out = vec![0x28, 0xb5, 0x2f, 0xfd];
    // Frame header descriptor: no content size, not single-segment, no checksum, no dictionary;
    // window descriptor: exponent 7 -> window 2^17 = 128 KiB (a block's maximum size).
    out.push(0x00);
    out.push(7 << 3);
    let blocks = total_bytes.div_ceil(BLOCK_BYTES);
    for i in 0..blocks {
        let size = BLOCK_BYTES.min(total_bytes - i * BLOCK_BYTES) as u32;
        let last = u32::from(i + 1 == blocks);
        let block_header = last | (1 << 1) | (size << 3); // type 1 = RLE
        out.extend_from_slice(&block_header.to_le_bytes()[..3]);
        out.push(0);
    }
    out
}

/// A zstd batch of `count` well-formed records with 1 MiB values each: it compresses to a few KB
/// and inflates to `count` MiB, each record within the limit, the whole beyond it.
fn zstd_valid_records_bomb(count: usize) -> Vec<u8> {
    let zeros = vec![0u8; 1 << 20];
    let mut b = BatchBuilder::new(
        BatchOptions {
            compression: Compression::Zstd,
            ..BatchOptions::default()
        },
        0,
    );
    for _ in 0..count {
        b.push(TIMESTAMP_MS, None, Some(&zeros), &[]);
    }
    b.build().unwrap().to_vec()
}

fn good(values: &[&str], compression: Compression) -> Vec<u8> {
    let mut b = BatchBuilder::new(
        BatchOptions {
            compression,
            ..BatchOptions::default()
        },
        256,
    );
    for (i, v) in values.iter().enumerate() {
        // Out-of-order timestamps, null keys, headers with null values: all valid.
        let key = (i % 2 == 0).then_some(&b"key"[..]);
        b.push(
            TIMESTAMP_MS - i as i64,
            key,
            Some(v.as_bytes()),
            &[(b"h", None), (b"trace", Some(b"abc"))],
        );
    }
    b.build().unwrap().to_vec()
}

/// An invalid case: (name, bytes, expected code, words the message must contain).
type Case = (&'static str, Vec<u8>, ErrorCode, Vec<&'static str>);

/// Every invalid case.
fn invalid_cases() -> Vec<Case> {
    let mut cases = record_field_cases();
    cases.extend(header_cases());
    cases.extend(zstd_cases());
    cases
}

/// Records whose fields break a rule.
fn record_field_cases() -> Vec<Case> {
    let mut cases = vec![
        (
            "offset deltas 0,0,1",
            with_deltas(&[0, 0, 1]),
            ErrorCode::InvalidRecordBatch,
            vec!["record 1", "offset delta 0", "expected 1"],
        ),
        (
            "offset deltas 0,1,3",
            with_deltas(&[0, 1, 3]),
            ErrorCode::InvalidRecordBatch,
            vec!["record 2", "offset delta 3"],
        ),
    ];
    let mut overlong_key = vec![0u8, 0x00, 0x00];
    overlong_key.extend_from_slice(&[0xff, 0xff, 0xff, 0xff, 0xff, 0x01]); // 6-byte varint
    overlong_key.extend_from_slice(&[0x00, 0x00]);
    cases.push((
        "over-long key length varint",
        one_raw(&overlong_key),
        ErrorCode::InvalidRecordBatch,
        vec!["record 0", "key length", "over-long"],
    ));
    let mut overlong_timestamp = vec![0u8];
    overlong_timestamp.extend_from_slice(&[0x80; 10]); // 11-byte varlong
    overlong_timestamp.extend_from_slice(&[0x00, 0x00, 0x01, 0x01, 0x00]);
    cases.push((
        "over-long timestamp delta varlong",
        one_raw(&overlong_timestamp),
        ErrorCode::InvalidRecordBatch,
        vec!["record 0", "timestamp delta", "over-long"],
    ));
    let mut negative_value = vec![0u8, 0x00, 0x00, 0x01];
    put_varint(&mut negative_value, -5);
    negative_value.extend_from_slice(&[0x00; 6]);
    cases.push((
        "value length -5",
        one_raw(&negative_value),
        ErrorCode::InvalidRecordBatch,
        vec!["record 0", "value length -5"],
    ));
    for (name, count) in [
        ("headers count -3", -3),
        ("headers count 1,000,000,000", 1_000_000_000),
    ] {
        let mut raw = vec![0u8, 0x00, 0x00, 0x01, 0x02, b'v'];
        put_varint(&mut raw, count);
        raw.extend_from_slice(&[0x00; 4]);
        cases.push((
            name,
            one_raw(&raw),
            ErrorCode::InvalidRecordBatch,
            vec!["record 0", "headers count"],
        ));
    }
    let mut short_fields = body(0, b"v");
    short_fields.extend_from_slice(&[0, 0, 0]);
    cases.push((
        "record length longer than its fields",
        one_raw(&short_fields),
        ErrorCode::InvalidRecordBatch,
        vec!["record 0", "3 bytes before"],
    ));
    cases
}

/// Batch headers a producer may not send, or that disagree with their records.
fn header_cases() -> Vec<Case> {
    let mut cases = Vec::new();
    for bit in 7..16 {
        let section = framed(&body(0, b"v"));
        let mut f = fields(1);
        f.attributes = 1 << bit;
        cases.push((
            "reserved attribute bit",
            assemble(&f, &section),
            ErrorCode::InvalidRecordBatch,
            vec!["reserved"],
        ));
    }
    let mut counts = fields(2);
    counts.last_offset_delta = 5;
    let two: Vec<u8> = [0, 1]
        .iter()
        .flat_map(|&d| framed(&body(d, b"v")))
        .collect();
    cases.push((
        "last_offset_delta beyond records_count - 1",
        assemble(&counts, &two),
        ErrorCode::InvalidRecordBatch,
        vec!["last_offset_delta 5"],
    ));
    let mut max_ts = fields(2);
    max_ts.max_timestamp = TIMESTAMP_MS + 7;
    cases.push((
        "max_timestamp above every record",
        assemble(&max_ts, &two),
        ErrorCode::InvalidRecordBatch,
        vec!["max_timestamp"],
    ));
    let mut negative_ts = vec![0u8];
    put_varlong(&mut negative_ts, -TIMESTAMP_MS - 1);
    negative_ts.extend_from_slice(&[0x00, 0x01, 0x02, b'v', 0x00]);
    cases.push((
        "negative record timestamp",
        one_raw(&negative_ts),
        ErrorCode::InvalidTimestamp,
        vec!["record 0", "timestamp -1"],
    ));
    cases
}

/// zstd sections that are not zstd or inflate without bound, and a bad batch after a good one.
fn zstd_cases() -> Vec<Case> {
    let mut cases = Vec::new();
    let mut not_zstd = fields(1);
    not_zstd.attributes = Compression::Zstd as i16;
    cases.push((
        "uncompressed records flagged zstd",
        assemble(&not_zstd, &framed(&body(0, b"v"))),
        ErrorCode::InvalidRecordBatch,
        vec!["zstd"],
    ));
    let bomb = zstd_zero_bomb(3 << 29);
    assert!(bomb.len() < 50_000, "{} bytes", bomb.len());
    cases.push((
        "zstd bomb: 1.5 GiB of zeros from 48 KiB",
        assemble(&not_zstd, &bomb),
        ErrorCode::InvalidRecordBatch,
        vec!["record 0"],
    ));
    let records_bomb = zstd_valid_records_bomb(80);
    assert!(records_bomb.len() < 100_000, "{} bytes", records_bomb.len());
    cases.push((
        "zstd bomb: 80 valid records of 1 MiB",
        records_bomb,
        ErrorCode::InvalidRecordBatch,
        vec!["decompressed", "67108864"],
    ));
    // A good batch followed by a bad one: the whole partition request is refused.
    let mut pair = good(&["fine"], Compression::None);
    pair.extend_from_slice(&with_deltas(&[0, 0]));
    cases.push((
        "a good batch, then a bad one",
        pair,
        ErrorCode::InvalidRecordBatch,
        vec!["batch 1", "record 1"],
    ));
    cases
}

#[test]
fn records_that_break_the_format_are_refused_and_nothing_is_appended() {
    let broker = BrokerProcess::start();
    let mut c = RawClient::connect(broker.addr());
    assert_eq!(c.create_topic("records", 1, &[]), ErrorCode::None);
    let mut accepted = Vec::new();
    for (name, bytes, expected, words) in invalid_cases() {
        let (code, offset, message) = c.produce_raw("records", 0, &bytes, -1).unwrap();
        if code == ErrorCode::None {
            accepted.push(format!("{name}: accepted at offset {offset}"));
            continue;
        }
        let message = message.unwrap_or_default();
        assert_eq!(code, expected, "{name}: {message}");
        assert_eq!(offset, -1, "{name}");
        for word in words {
            assert!(message.contains(word), "{name}: {message:?} lacks {word:?}");
        }
    }
    assert!(
        accepted.is_empty(),
        "invalid batches accepted:\n{}",
        accepted.join("\n")
    );
    let (code, hw, records) = c.fetch("records", 0, 0);
    assert_eq!((code, hw, records.len()), (ErrorCode::None, 0, 0));

    // Valid batches of every shape still go in, several per partition request included.
    let mut two = good(&["a", "b", "c"], Compression::None);
    two.extend_from_slice(&good(&["d", "e"], Compression::Zstd));
    assert_eq!(
        c.produce_raw("records", 0, &two, -1).unwrap(),
        (ErrorCode::None, 0, None)
    );
    let records = c.fetch_all("records", 0, 0);
    let values: Vec<String> = records.iter().map(value).collect();
    assert_eq!(values, ["a", "b", "c", "d", "e"]);
    assert_eq!(records[1].key, None);
    assert_eq!(records[2].headers.len(), 2);
}
