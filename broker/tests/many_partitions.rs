//! A topic of many partitions: creating it costs memory in proportion to its partitions.
//! Each partition to open once carried its own copy of the topic's record with every
//! partition's record in it, so a topic of N partitions cost N² partition records: creating
//! 9,000 partitions grew a broker past 15 GB until it was killed.

mod common;

use borges_protocol::ErrorCode;
use borges_testkit::BrokerProcess;
use common::RawClient;

fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    let line = status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .expect("VmRSS");
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

#[test]
fn creating_a_topic_of_many_partitions_costs_memory_in_proportion() {
    const PARTITIONS: u64 = 1_500;
    /// Per partition opened, generously (an idle partition costs about 8 KiB in a release
    /// build; the quadratic copies cost about 1.5 MiB each at this count).
    const PER_PARTITION_KIB_MAX: u64 = 100;
    let broker = BrokerProcess::start();
    let mut c = RawClient::connect(broker.addr());
    assert_eq!(c.create_topic("warm", 1, &[]), ErrorCode::None);
    let before = rss_kib(broker.pid());
    assert_eq!(
        c.create_topic("many", PARTITIONS as i32, &[]),
        ErrorCode::None
    );
    let grown = rss_kib(broker.pid()).saturating_sub(before);
    assert!(
        grown <= PARTITIONS * PER_PARTITION_KIB_MAX,
        "{PARTITIONS} partitions grew the broker by {grown} KiB"
    );
    assert_eq!(
        c.produce("many", PARTITIONS as i32 - 1, &["last"], -1).0,
        ErrorCode::None
    );
}
