//! Faults of the disk seen through a real broker process.

mod common;

use std::time::Duration;

use borges_protocol::ErrorCode;
use borges_testkit::{BrokerOptions, BrokerProcess};
use common::{value, RawClient};

/// The copy path (`fetch.send_mode = "copy"`, the TLS path) reads batches into memory and
/// checks each one's CRC on the way out: a batch corrupted on disk after it was acknowledged
/// is refused with a typed error instead of being served, and the broker keeps serving.
#[test]
fn a_batch_corrupted_on_disk_is_refused_on_the_copy_path() {
    let mut broker = BrokerProcess::start_with(BrokerOptions {
        cores: 1,
        config_toml: Some("[fetch]\nsend_mode = \"copy\"\n".into()),
        ..BrokerOptions::default()
    });
    {
        let mut c = RawClient::connect(broker.addr());
        // Small segments, so the damaged batch lies in a closed segment.
        let big = "x".repeat(3000);
        assert_eq!(
            c.create_topic("damaged", 1, &[("segment.bytes", "4096")]),
            ErrorCode::None
        );
        for _ in 0..4 {
            assert_eq!(c.produce("damaged", 0, &[&big], -1).0, ErrorCode::None);
        }
        assert_eq!(c.create_topic("intact", 1, &[]), ErrorCode::None);
        assert_eq!(
            c.produce("intact", 0, &["one", "two"], -1).0,
            ErrorCode::None
        );
    }
    let status = broker
        .terminate(Duration::from_secs(30))
        .expect("clean exit");
    assert!(status.success(), "exit status {status}");
    // Recovery after a clean shutdown revalidates only the active segment; flip a bit of the
    // first (closed) segment's record, inside the batch's CRC.
    let segment = broker
        .data_dir()
        .join("damaged-0")
        .join("00000000000000000000.log");
    let mut bytes = std::fs::read(&segment).expect("segment file");
    let last = bytes.len() - 1;
    bytes[last] ^= 0x01;
    std::fs::write(&segment, &bytes).unwrap();
    broker.restart();
    let mut c = RawClient::connect(broker.addr());
    let (code, _, _, data) = c.fetch_raw("damaged", 0, 0, 0, 0);
    assert_eq!(code, ErrorCode::StorageError);
    assert!(data.is_empty(), "no byte of a corrupt batch is served");
    let intact: Vec<String> = c.fetch_all("intact", 0, 0).iter().map(value).collect();
    assert_eq!(intact, ["one", "two"]);
}
