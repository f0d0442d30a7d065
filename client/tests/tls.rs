//! TLS against real broker processes: produce and consume over TLS (every core's port, fetches
//! on the copy path), the refusals (plaintext client, wrong CA, mTLS without a client
//! certificate), and a certificate reload on SIGHUP that keeps established connections.
//! Certificates are generated per test (borges_testkit::tls).

use std::time::{Duration, Instant};

use borges_client::{
    Admin, ClientConfig, ClientError, ErrorCode, NewTopic, Producer, ProducerConfig,
    ProducerRecord, TlsConfig,
};
use borges_testkit::tls::{CertFiles, TestCa};
use borges_testkit::{BrokerOptions, BrokerProcess};

fn tls_broker(server: &CertFiles, client_ca: Option<&std::path::Path>) -> BrokerProcess {
    let mut args = vec![
        "--tls-cert".to_string(),
        server.cert.display().to_string(),
        "--tls-key".to_string(),
        server.key.display().to_string(),
    ];
    if let Some(ca) = client_ca {
        args.push("--tls-client-ca".into());
        args.push(ca.display().to_string());
    }
    BrokerProcess::start_with(BrokerOptions {
        args,
        ..BrokerOptions::default()
    })
}

fn config(broker: &BrokerProcess, tls: Option<TlsConfig>) -> ClientConfig {
    ClientConfig::new(&broker.bootstrap())
        .request_timeout_ms(20_000)
        .tls(tls)
}

/// The text of an error and everything it wraps.
fn text(e: &ClientError) -> String {
    match e {
        ClientError::NoBrokerAvailable { last, .. } => format!("{e} / {}", text(last)),
        _ => e.to_string(),
    }
}

async fn produce(producer: &Producer, topic: &str, from: usize, n: usize) {
    let mut acks = Vec::new();
    for i in from..from + n {
        let record = ProducerRecord::new(topic)
            .key(format!("k{i}"))
            .value(format!("value-{i}-{}", "x".repeat(i % 300)));
        acks.push(producer.send(record).await.expect("send"));
    }
    for ack in acks {
        ack.await.expect("acknowledged over TLS");
    }
}

/// Reads `topic` from the beginning over `config` until `expected` records came.
async fn read(config: ClientConfig, topic: &str, expected: usize) -> Vec<String> {
    use borges_client::{Consumer, ConsumerConfig, Offset};
    let mut consumer = Consumer::new(config, ConsumerConfig::default())
        .await
        .expect("consumer");
    let partitions = consumer.partitions_for(topic).await.expect("partitions");
    consumer.assign(partitions.clone()).await.expect("assign");
    for tp in &partitions {
        consumer.seek(tp, Offset::Beginning).await.expect("seek");
    }
    let mut values = Vec::new();
    let guard = Instant::now() + Duration::from_secs(60);
    while values.len() < expected && Instant::now() < guard {
        for r in consumer
            .poll(Duration::from_millis(300))
            .await
            .expect("poll")
        {
            values.push(String::from_utf8_lossy(r.value.as_deref().unwrap_or_default()).into());
        }
    }
    values
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn produce_and_consume_over_tls_and_refusals() {
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new(dir.path(), "ca");
    let other = TestCa::new(dir.path(), "other-ca");
    let mut broker = tls_broker(&ca.broker("broker"), None);
    let tls = TlsConfig::new(&ca.cert);

    let admin = Admin::new(config(&broker, Some(tls.clone())))
        .await
        .expect("admin over TLS");
    admin
        .create_topics(vec![NewTopic::new("secure", 4)])
        .await
        .expect("create topic over TLS");
    // Shard-aware (the default): every partition's requests go to its core's own port.
    let producer = Producer::new(
        config(&broker, Some(tls.clone())),
        ProducerConfig::default(),
    )
    .await
    .unwrap();
    produce(&producer, "secure", 0, 2000).await;
    let values = read(config(&broker, Some(tls.clone())), "secure", 2000).await;
    assert_eq!(values.len(), 2000);
    for i in [0usize, 999, 1999] {
        let want = format!("value-{i}-{}", "x".repeat(i % 300));
        assert!(values.contains(&want), "record {i} missing");
    }
    producer.close().await.unwrap();
    drop(admin);

    // After a restart the records come from the segment files: over TLS they take the copy
    // path (read, encrypt), never sendfile, which would put plaintext file bytes on the wire.
    let status = broker
        .terminate(Duration::from_secs(30))
        .expect("clean exit");
    assert!(status.success());
    broker.restart();
    let values = read(config(&broker, Some(tls.clone())), "secure", 2000).await;
    assert_eq!(
        values.len(),
        2000,
        "every record read back from the files over TLS"
    );
    let metrics = scrape(&broker.metrics_addr());
    assert!(
        counter(&metrics, "borges_bytes_sent_total") > 300_000,
        "{metrics}"
    );
    assert_eq!(counter(&metrics, "borges_bytes_sendfile_total"), 0);
    let producer = Producer::new(
        config(&broker, Some(tls.clone())),
        ProducerConfig::default(),
    )
    .await
    .unwrap();

    refusals(&broker, &ca, &other).await;

    // Still serving TLS clients after the refusals.
    produce(&producer, "secure", 2000, 10).await;
    producer.close().await.unwrap();
    let metrics = scrape(&broker.metrics_addr());
    assert!(
        counter(&metrics, "borges_tls_plaintext_refused_total") >= 2,
        "{metrics}"
    );
    assert!(counter(&metrics, "borges_tls_handshake_failures_total") >= 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mtls_needs_a_client_certificate_and_sighup_reload_keeps_connections() {
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new(dir.path(), "ca");
    let server = ca.broker("broker");
    let client = ca.issue("alice", "alice", &[]);
    let broker = tls_broker(&server, Some(&ca.cert));
    let with_cert = TlsConfig::new(&ca.cert).identity(&client.cert, &client.key);

    let admin = Admin::new(config(&broker, Some(with_cert.clone())))
        .await
        .expect("admin with a client certificate");
    admin
        .create_topics(vec![NewTopic::new("mtls", 2)])
        .await
        .unwrap();
    let producer = Producer::new(
        config(&broker, Some(with_cert.clone())),
        ProducerConfig::default(),
    )
    .await
    .unwrap();
    produce(&producer, "mtls", 0, 100).await;

    // Without a client certificate the broker refuses the handshake.
    let err = first_error(config(&broker, Some(TlsConfig::new(&ca.cert)))).await;
    assert!(text(&err).contains("CertificateRequired"), "{}", text(&err));

    // Reload: the broker's certificate is replaced by one of a new CA, then SIGHUP.
    let ca2 = TestCa::new(dir.path(), "ca2");
    let fresh = ca2.broker("broker-2");
    std::fs::copy(&fresh.cert, &server.cert).unwrap();
    std::fs::copy(&fresh.key, &server.key).unwrap();
    // SAFETY: a signal to our own child process.
    unsafe {
        libc::kill(broker.pid() as i32, libc::SIGHUP);
    }
    let trusts_ca2 = TlsConfig::new(&ca2.cert).identity(&client.cert, &client.key);
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let attempt = async {
            let admin = Admin::new(config(&broker, Some(trusts_ca2.clone()))).await?;
            admin.list_topics().await
        };
        match attempt.await {
            Ok(topics) => {
                assert!(topics.contains(&"mtls".to_string()));
                break;
            }
            Err(e) if Instant::now() < deadline => {
                let _ = e;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("the new certificate is not served: {}", text(&e)),
        }
    }
    // New connections trusting only the old CA now fail ...
    let err = first_error(config(&broker, Some(with_cert.clone()))).await;
    assert!(text(&err).contains("UnknownIssuer"), "{}", text(&err));
    // ... while the producer's connections, established before the reload, still work (a
    // reconnect would fail: it trusts only the old CA).
    produce(&producer, "mtls", 100, 100).await;
    producer.close().await.unwrap();
    assert!(broker.log().contains("TLS certificates reloaded"));
}

/// The error of a client's first request.
async fn first_error(config: ClientConfig) -> ClientError {
    match Admin::new(config).await {
        Ok(admin) => admin.list_topics().await.unwrap_err(),
        Err(e) => e,
    }
}

/// A plaintext client, a client of another CA, the CLI with and without TLS.
async fn refusals(broker: &BrokerProcess, ca: &TestCa, other: &TestCa) {
    // A plaintext client: a typed, clear refusal in plaintext.
    let err = first_error(config(broker, None)).await;
    assert_eq!(err.code(), Some(ErrorCode::TlsRequired), "{}", text(&err));
    assert!(text(&err).contains("requires TLS"), "{}", text(&err));

    // A client trusting another CA refuses the broker's certificate.
    let err = first_error(config(broker, Some(TlsConfig::new(&other.cert)))).await;
    assert!(text(&err).contains("UnknownIssuer"), "{}", text(&err));

    // The CLI over TLS, and without it.
    let out = broker.run_cli(
        &["--tls-ca", &ca.cert.display().to_string(), "topic", "list"],
        "",
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success() && stdout.contains("secure"), "{out:?}");
    let out = broker.run_cli(&["topic", "list"], "");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && stderr.contains("TlsRequired"),
        "{stderr}"
    );
}

fn scrape(addr: &str) -> String {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).expect("metrics");
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out
}

/// Sum of a counter over its series.
fn counter(metrics: &str, name: &str) -> u64 {
    metrics
        .lines()
        .filter(|l| l.starts_with(name))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64
}
