//! A three-broker cluster with TLS and client certificates everywhere (testkit's `Cluster`):
//! the controller link (Raft, registrations, heartbeats) and the follower fetches run over TLS,
//! so a replicated topic gets its full ISR and acks=all records are acknowledged and read back;
//! a plaintext controller-link client is refused; `borges cluster describe` works with the
//! TLS flags. Certificates are generated per test.

use std::time::{Duration, Instant};

use borges_client::{
    Acks, ClientConfig, Consumer, ConsumerConfig, Offset, Producer, ProducerConfig, ProducerRecord,
    TlsConfig, TopicPartition,
};
use borges_replication::link::LinkClient;
use borges_testkit::cluster::{borges, Cluster, ClusterOptions, CLUSTER_WAIT};
use borges_testkit::tls::{CertFiles, TestCa, TlsFiles};

fn path(p: &std::path::Path) -> String {
    p.display().to_string()
}

const TOPIC: &str = "secure-replicated";

#[test]
fn a_tls_cluster_replicates_over_tls() {
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new(dir.path(), "cluster-ca");
    let broker = ca.broker("broker");
    let alice = ca.issue("alice", "alice", &[]);
    let mut c = Cluster::start_with(ClusterOptions {
        voters: 3,
        args: vec![
            "--tls-cert".into(),
            path(&broker.cert),
            "--tls-key".into(),
            path(&broker.key),
            "--tls-ca".into(),
            path(&ca.cert),
            "--tls-client-ca".into(),
            path(&ca.cert),
        ],
        tls: Some(TlsFiles {
            ca: ca.cert.clone(),
            identity: Some(alice.clone()),
        }),
        ..ClusterOptions::default()
    });
    // The quorum forms over the TLS controller link (the testkit reads it over TLS too).
    c.wait_for_controller();
    c.cli(&[
        "topic",
        "create",
        TOPIC,
        "--partitions",
        "1",
        "--replication-factor",
        "3",
        // acks=all then needs every replica: the followers must fetch (over TLS).
        "--config",
        "min.insync.replicas=3",
    ]);
    // Followers fetch from the leader's TLS port: the ISR fills.
    c.wait_for_every_node("the full ISR", |i| {
        i.topics
            .get(TOPIC)
            .and_then(|t| t.partitions.first())
            .is_some_and(|p| p.isr.len() == 3)
    });

    let bootstrap = c.bootstrap();
    let tls = TlsConfig::new(&ca.cert).identity(&alice.cert, &alice.key);
    let config = ClientConfig::new(&bootstrap)
        .request_timeout_ms(20_000)
        .tls(Some(tls));
    let read = produce_and_read(&config);
    assert_eq!(read.len(), 300, "{}", c.logs());
    assert_eq!(read[299], "v299");
    let images = c.wait_for_every_node("the full ISR after the produce", |i| {
        i.topics
            .get(TOPIC)
            .and_then(|t| t.partitions.first())
            .is_some_and(|p| p.isr.len() == 3)
    });
    assert_eq!(images.len(), 3);

    controller_link_refuses_plaintext(&mut c, &ca, &alice);
}

/// 300 acks=all records produced and read back over TLS.
fn produce_and_read(config: &ClientConfig) -> Vec<String> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let producer = Producer::new(
            config.clone(),
            ProducerConfig {
                acks: Acks::All,
                ..ProducerConfig::default()
            },
        )
        .await
        .expect("producer");
        let mut acks = Vec::new();
        for i in 0..300 {
            let record = ProducerRecord::new(TOPIC).value(format!("v{i}"));
            acks.push(producer.send(record).await.expect("send"));
        }
        for ack in acks {
            // acks=all: the followers fetched it over TLS.
            ack.await.expect("acknowledged by the full ISR");
        }
        producer.close().await.unwrap();
        let mut consumer = Consumer::new(config.clone(), ConsumerConfig::default())
            .await
            .unwrap();
        let tp = TopicPartition::new(TOPIC, 0);
        consumer.assign(vec![tp.clone()]).await.unwrap();
        consumer.seek(&tp, Offset::Beginning).await.unwrap();
        let mut values = Vec::new();
        let guard = Instant::now() + CLUSTER_WAIT;
        while values.len() < 300 && Instant::now() < guard {
            for r in consumer.poll(Duration::from_millis(300)).await.unwrap() {
                values.push(
                    String::from_utf8_lossy(r.value.as_deref().unwrap_or_default()).into_owned(),
                );
            }
        }
        values
    })
}

/// A plaintext controller-link client gets no answer; `cluster describe` works with the TLS
/// flags and fails without them.
fn controller_link_refuses_plaintext(c: &mut Cluster, ca: &TestCa, alice: &CertFiles) {
    let controller = c.node(1).controller_addr();
    assert!(
        LinkClient::connect(&controller, "", Duration::from_secs(2))
            .and_then(|mut l| l.describe())
            .is_err(),
        "a plaintext client was served by a TLS controller link"
    );
    let mut args = vec![
        "--tls-ca".to_string(),
        path(&ca.cert),
        "--tls-cert".into(),
        path(&alice.cert),
        "--tls-key".into(),
        path(&alice.key),
        "cluster".into(),
        "describe".into(),
        "--bootstrap-controller".into(),
        controller,
    ];
    let described = borges(&args.iter().map(String::as_str).collect::<Vec<_>>());
    assert!(described.contains("LeaderId"), "{described}");
    args.drain(..6);
    let plain = std::process::Command::new(borges_testkit::borges_bin())
        .args(&args)
        .output()
        .unwrap();
    assert!(
        !plain.status.success(),
        "cluster describe without TLS worked"
    );
}
