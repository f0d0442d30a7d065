//! A corrupt batch on disk, through the real binary and the SDK: `borges consume` prints every
//! record before it and then one clear error naming its offset; the SDK delivers the same
//! records, then reports `ClientError::CorruptBatch` until the application skips past it.
//!
//! Two ways a broker ends up serving a bad batch, both built here by editing a segment file of
//! a stopped broker: a flipped bit in a closed file that sendfile serves unchecked (the consumer's
//! CRC check catches it), and records with duplicate offset deltas under a valid CRC, as a broker
//! from before record validation stored them (only the record checks catch it).

use std::path::Path;
use std::process::Output;
use std::time::Duration;

use borges_client::{
    ClientConfig, ClientError, Consumer, ConsumerConfig, ConsumerRecord, Offset, TopicPartition,
};
use borges_protocol::batch::{self, BatchHeader};
use borges_testkit::{BrokerOptions, BrokerProcess};

fn borges(broker: &BrokerProcess, args: &[&str], stdin: &str) -> Output {
    broker.run_cli(args, stdin)
}

fn succeeds(output: Output) {
    assert!(
        output.status.success(),
        "stderr: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// Byte ranges of the batches of a segment file.
fn batches(segment: &[u8]) -> Vec<(BatchHeader, std::ops::Range<usize>)> {
    batch::BatchIter::new(segment)
        .map_while(Result::ok)
        .collect()
}

/// Creates `topic` and produces three batches: a b c (offsets 0-2), d e (3-4), f (5), with
/// `configs` (`segment.ms=1`: each batch in a segment of its own).
fn three_batches(broker: &BrokerProcess, topic: &str, configs: &[&str]) {
    let mut args = vec!["topic", "create", topic, "--partitions", "1"];
    for c in configs {
        args.extend(["--config", c]);
    }
    succeeds(borges(broker, &args, ""));
    for lines in ["a\nb\nc\n", "d\ne\n", "f\n"] {
        succeeds(borges(broker, &["produce", topic], lines));
    }
}

/// Applies `damage` to the batch at offset 3 (the second), in whichever segment holds it.
fn damage_second_batch(data_dir: &Path, topic: &str, damage: impl Fn(&mut [u8])) {
    let dir = data_dir.join(format!("{topic}-0"));
    let mut bases = Vec::new();
    for entry in std::fs::read_dir(&dir).expect("partition directory") {
        let path = entry.expect("entry").path();
        if path.extension().is_none_or(|e| e != "log") {
            continue;
        }
        let mut bytes = std::fs::read(&path).expect("segment file");
        let found = batches(&bytes);
        bases.extend(found.iter().map(|(h, _)| h.base_offset));
        if let Some((_, range)) = found.iter().find(|(h, _)| h.base_offset == 3) {
            damage(&mut bytes[range.clone()]);
            std::fs::write(&path, bytes).expect("write segment");
        }
    }
    bases.sort();
    assert_eq!(bases, [0, 3, 5], "three batches in {}", dir.display());
}

fn values(records: &[ConsumerRecord]) -> Vec<(i64, String)> {
    records
        .iter()
        .map(|r| {
            let v = r.value.as_deref().unwrap_or_default();
            (r.offset, String::from_utf8_lossy(v).into_owned())
        })
        .collect()
}

/// Polls until the consumer reports an error; returns what it delivered and the error.
async fn poll_until_error(consumer: &mut Consumer) -> (Vec<ConsumerRecord>, ClientError) {
    let mut delivered = Vec::new();
    for _ in 0..100 {
        match consumer.poll(Duration::from_millis(200)).await {
            Ok(records) => delivered.extend(records),
            Err(e) => return (delivered, e),
        }
    }
    panic!(
        "no error after 100 polls; delivered {:?}",
        values(&delivered)
    );
}

async fn sdk_reads_around_the_corrupt_batch(bootstrap: String, topic: &str) {
    let mut consumer = Consumer::new(ClientConfig::new(&bootstrap), ConsumerConfig::default())
        .await
        .unwrap();
    let tp = TopicPartition::new(topic, 0);
    consumer.assign(vec![tp.clone()]).await.unwrap();
    consumer.seek(&tp, Offset::Beginning).await.unwrap();
    let (delivered, error) = poll_until_error(&mut consumer).await;
    let abc = [(0, "a"), (1, "b"), (2, "c")].map(|(o, v)| (o, v.to_string()));
    assert_eq!(values(&delivered), abc);
    match &error {
        ClientError::CorruptBatch {
            topic: t,
            partition: 0,
            offset: 3,
            next_offset: Some(5),
            ..
        } if t == topic => {}
        other => panic!("expected CorruptBatch at offset 3: {other:?}"),
    }
    assert_eq!(
        consumer.position(&tp),
        Some(3),
        "the position stays at the bad batch"
    );
    // Reported again until the application moves past it.
    let again = consumer.poll(Duration::from_millis(200)).await;
    assert!(matches!(
        again,
        Err(ClientError::CorruptBatch { offset: 3, .. })
    ));
    assert_eq!(consumer.skip_corrupt_batch(&tp).unwrap(), 5);
    let mut rest = Vec::new();
    while rest.is_empty() {
        rest = consumer.poll(Duration::from_millis(500)).await.unwrap();
    }
    assert_eq!(values(&rest), [(5, "f".to_string())]);
}

fn cli_prints_the_good_records_then_the_error(broker: &BrokerProcess, topic: &str) {
    let print = ["--timeout-ms", "5000", "--print-offset"];
    let output = borges(
        broker,
        &[&["consume", topic, "--from-beginning"], &print[..]].concat(),
        "",
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "stdout: {stdout}");
    assert_eq!(stdout, "Offset:0\ta\nOffset:1\tb\nOffset:2\tc\n");
    // One error line (the SDK's warning for the same batch may come before it, as a log line).
    let errors: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("error: "))
        .collect();
    assert_eq!(errors.len(), 1, "{stderr}");
    let advice = format!("borges consume {topic} --partition 0 --offset 5");
    for words in [
        "error: ",
        &format!("corrupt record batch in {topic}-0 at offset 3: "),
        "every record before it was printed",
        &advice,
    ] {
        assert!(stderr.contains(words), "{stderr:?} lacks {words:?}");
    }
    // The command the error gives reads on after the batch.
    let args: Vec<&str> = advice.split(' ').skip(1).chain(print).collect();
    let output = borges(broker, &args, "");
    succeeds(output.clone());
    assert_eq!(String::from_utf8_lossy(&output.stdout), "Offset:5\tf\n");
}

#[test]
fn consumers_deliver_every_record_before_a_corrupt_batch_then_report_its_offset() {
    let mut broker = BrokerProcess::start_with(BrokerOptions {
        cores: 1,
        ..BrokerOptions::default()
    });
    // A closed segment is not read back at start-up (the recovery checkpoint covers it), and
    // sendfile serves it without a check: the corruption reaches the consumer. In the active
    // segment, recovery would find it and refuse to open the partition.
    three_batches(&broker, "flipped", &["segment.ms=1"]);
    three_batches(&broker, "duplicates", &[]);
    assert!(broker.terminate(Duration::from_secs(30)).is_some());
    // Disk corruption: one bit of the value "e".
    damage_second_batch(broker.data_dir(), "flipped", |b| {
        let last = b.len() - 1;
        b[last - 1] ^= 0x04;
    });
    // Offset deltas 0, 0 under a valid CRC. Each record is 8 bytes (length, attributes,
    // timestamp delta, offset delta, null key, value length, value, headers count).
    damage_second_batch(broker.data_dir(), "duplicates", |b| {
        let second_delta = batch::field::RECORDS + 8 + 3;
        assert_eq!(b[second_delta], 0x02, "offset delta 1");
        b[second_delta] = 0x00;
        batch::set_crc(b);
    });
    broker.restart();
    for topic in ["flipped", "duplicates"] {
        cli_prints_the_good_records_then_the_error(&broker, topic);
    }
    let runtime = tokio::runtime::Runtime::new().unwrap();
    for topic in ["flipped", "duplicates"] {
        runtime.block_on(sdk_reads_around_the_corrupt_batch(
            broker.bootstrap(),
            topic,
        ));
    }
}
