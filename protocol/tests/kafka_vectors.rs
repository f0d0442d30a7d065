//! Record batches produced by real Kafka code, checked against our decoder and encoder.
//!
//! The bytes are the fixtures published in the tests of the `rskafka` crate
//! (`src/protocol/record.rs`): batches captured on the wire from librdkafka, and one batch a
//! Kafka broker returned after the official Java client produced it. They were not produced by
//! our code, so they pin the byte layout, the CRC-32C and zstd framing to what Kafka does.

use borges_protocol::batch::{
    self, field, BatchBuilder, BatchError, BatchOptions, Compression, RecordBatch, TimestampType,
};
use bytes::Bytes;

fn hex(lines: &[&str]) -> Bytes {
    let text: String = lines.concat();
    let bytes: Vec<u8> = (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).unwrap())
        .collect();
    Bytes::from(bytes)
}

/// librdkafka, uncompressed, one record: null key, a 103-byte protobuf value, two headers.
fn rdkafka_null_key() -> Bytes {
    hex(&[
        "00000000000000000000011a00000000026798b9540000000000000000017ebe",
        "dc91f60000017ebedc91f6ffffffffffffffffffffffffffff00000001ce0300",
        "000001ce010a650a2f746573745f746f7069635f33373339386638642d393566",
        "382d343465652d383361342d34643063353932623434366412320a0375706312",
        "170a047573657210031a0a1208000000000000f03f22010012100a0474696d65",
        "10041a030a016422010018010418636f6e74656e742d74797065a4016170706c",
        "69636174696f6e2f782d70726f746f6275663b20736368656d613d22696e666c",
        "7578646174612e696f782e77726974655f6275666665722e76312e5772697465",
        "4275666665725061796c6f6164221a696f782d6e616d657370616365126e616d",
        "657370616365",
    ])
}

/// librdkafka, zstd, one record: key `x` * 100, value `hello kafka`, header foo=bar.
fn rdkafka_zstd() -> Bytes {
    hex(&[
        "00000000000000000000005d0000000002a16e4e950004000000000000017ebf",
        "78f3ad0000017ebf78f3adffffffffffffffffffffffffffff0000000128b52f",
        "fd00581d0100e8fc01000000c801781668656c6c6f206b61666b610206666f6f",
        "06626172010020055c",
    ])
}

/// The official Java client's snappy batch of two records, as a Kafka broker served it.
fn java_snappy() -> Bytes {
    hex(&[
        "00000000000000000000008c0000000002791e2dce0002000000010000017f07",
        "257ab10000017f07257ab1ffffffffffffffffffffffffffff0000000282534e",
        "4150505900000000010000000100000047ff011cfc01000000c80178fe01008a",
        "0100641668656c6c6f206b61666b610206666f6f06626172fa01000002fe8000",
        "9680004c14736f6d652076616c75650206666f6f06626172",
    ])
}

const PROTOBUF_VALUE_PREFIX: &[u8] =
    b"\x0a\x65\x0a\x2ftest_topic_37398f8d-95f8-44ee-83a4-4d0c592b446d";
const CONTENT_TYPE: &[u8] =
    b"application/x-protobuf; schema=\"influxdata.iox.write_buffer.v1.WriteBufferPayload\"";

#[test]
fn rdkafka_uncompressed_batch_decodes() {
    let batch = RecordBatch::parse(rdkafka_null_key()).unwrap();
    let h = batch.header();
    assert_eq!(h.base_offset, 0);
    assert_eq!(h.partition_leader_epoch, 0);
    assert_eq!(h.records_count, 1);
    assert_eq!(h.last_offset_delta, 0);
    assert_eq!(h.base_timestamp, 1_643_879_633_398);
    assert_eq!(h.max_timestamp, 1_643_879_633_398);
    assert_eq!(
        (h.producer_id, h.producer_epoch, h.base_sequence),
        (-1, -1, -1)
    );
    assert_eq!(h.compression(), Compression::None);
    assert_eq!(h.timestamp_type(), TimestampType::CreateTime);
    let records = batch.records(1 << 20).unwrap();
    assert_eq!(records.len(), 1);
    let r = &records[0];
    assert_eq!(r.offset, 0);
    assert_eq!(r.timestamp, 1_643_879_633_398);
    assert_eq!(r.key, None);
    let value = r.value.as_ref().unwrap();
    assert_eq!(value.len(), 103);
    assert!(value.starts_with(PROTOBUF_VALUE_PREFIX));
    assert_eq!(r.headers.len(), 2);
    assert_eq!(&r.headers[0].key[..], b"content-type");
    assert_eq!(r.headers[0].value.as_deref(), Some(CONTENT_TYPE));
    assert_eq!(&r.headers[1].key[..], b"iox-namespace");
    assert_eq!(r.headers[1].value.as_deref(), Some(&b"namespace"[..]));
}

#[test]
fn builder_reproduces_rdkafka_bytes_exactly() {
    let original = rdkafka_null_key();
    let record = RecordBatch::parse(original.clone())
        .unwrap()
        .records(1 << 20)
        .unwrap()[0]
        .clone();
    let mut builder = BatchBuilder::new(BatchOptions::default(), 512);
    let headers: Vec<(&[u8], Option<&[u8]>)> = record
        .headers
        .iter()
        .map(|h| (&h.key[..], h.value.as_deref()))
        .collect();
    builder.push(record.timestamp, None, record.value.as_deref(), &headers);
    let mut built = builder.build().unwrap().to_vec();
    // The producer leaves the leader epoch to the broker (-1); this capture came back with 0.
    assert_eq!(
        &built[field::PARTITION_LEADER_EPOCH..field::MAGIC],
        &[0xff; 4]
    );
    batch::set_partition_leader_epoch(&mut built, 0);
    assert_eq!(built, original.to_vec());
}

#[test]
fn rdkafka_zstd_batch_decodes() {
    let batch = RecordBatch::parse(rdkafka_zstd()).unwrap();
    assert_eq!(batch.header().compression(), Compression::Zstd);
    assert_eq!(batch.header().base_timestamp, 1_643_889_882_029);
    let records = batch.records(1 << 20).unwrap();
    assert_eq!(records.len(), 1);
    assert_eq!(records[0].key.as_deref(), Some(&[b'x'; 100][..]));
    assert_eq!(records[0].value.as_deref(), Some(&b"hello kafka"[..]));
    assert_eq!(&records[0].headers[0].key[..], b"foo");
    assert_eq!(records[0].headers[0].value.as_deref(), Some(&b"bar"[..]));
    // Our zstd output differs in bytes (another encoder) but must decode to the same records.
    let mut builder = BatchBuilder::new(
        BatchOptions {
            compression: Compression::Zstd,
            ..BatchOptions::default()
        },
        256,
    );
    let r = &records[0];
    builder.push(
        r.timestamp,
        r.key.as_deref(),
        r.value.as_deref(),
        &[(b"foo", Some(b"bar"))],
    );
    let ours = RecordBatch::parse(builder.build().unwrap()).unwrap();
    assert_eq!(ours.records(1 << 20).unwrap(), records);
}

#[test]
fn java_snappy_batch_validates_but_is_unsupported() {
    let bytes = java_snappy();
    let header = batch::validate(&bytes).unwrap();
    assert_eq!(header.records_count, 2);
    assert_eq!(header.last_offset_delta, 1);
    assert_eq!(header.base_timestamp, 1_645_092_371_121);
    assert_eq!(header.compression(), Compression::Snappy);
    let batch = RecordBatch::parse(bytes).unwrap();
    assert_eq!(
        batch.records(1 << 20),
        Err(BatchError::UnsupportedCompression(Compression::Snappy))
    );
}

#[test]
fn kafka_batches_are_rejected_when_any_covered_byte_changes() {
    for bytes in [rdkafka_null_key(), rdkafka_zstd(), java_snappy()] {
        for at in field::MAGIC..bytes.len() {
            let mut bad = bytes.to_vec();
            bad[at] ^= 0x10;
            assert!(batch::validate(&bad).is_err(), "byte {at}");
        }
    }
}

#[test]
fn librdkafka_batches_pass_the_brokers_produce_validation() {
    let limits = batch::ProduceLimits {
        batch_size_bytes_max: 1 << 20,
        decompressed_size_bytes_max: 1 << 20,
    };
    for bytes in [rdkafka_null_key(), rdkafka_zstd()] {
        let header = batch::validate_produced(&bytes, limits).unwrap();
        assert_eq!(header.size_bytes(), bytes.len());
    }
    assert_eq!(
        batch::validate_produced(&java_snappy(), limits),
        Err(BatchError::UnsupportedCompression(Compression::Snappy))
    );
}
