//! SASL/SCRAM in a three-broker cluster (issue 20): every client listener requires SASL, so
//! the followers' replica fetches authenticate to the leaders as the inter-broker user
//! (`sasl.inter_broker_username` and `sasl.inter_broker_password_file`, Kafka's
//! `sasl.mechanism.inter.broker.protocol` and broker principal). With the right password
//! acks=all with min.insync.replicas=3 is acknowledged and every replica holds the same
//! batches; with a wrong one the followers never fetch: each failure is logged and counted in
//! `borges_replica_fetch_authentication_failures_total`, and acks=all is refused.

mod replicated;

use std::io::{Read, Write};
use std::path::Path;

use borges_client::{ClientConfig, SaslConfig};
use borges_testkit::cluster::{wait_until, Cluster};
use borges_testkit::users::create_file_user;
use replicated::{acks_all, check_acked, runtime, values};

const TOPIC: &str = "secured";
const ALICE_PASSWORD: &str = "alice-secret";
const BROKER_PASSWORD: &str = "broker-secret";
const ADMIN_PASSWORD: &str = "admin-secret";

/// A cluster whose brokers require SCRAM-SHA-256 and fetch as `broker` with the password
/// `inter_broker_password`; every broker reads one credentials file (alice and broker).
fn sasl_cluster(dir: &Path, inter_broker_password: &str) -> Cluster {
    sasl_cluster_with(dir, inter_broker_password, "")
}

/// [`sasl_cluster`] with more TOML sections (`extra`); admin is a user too.
fn sasl_cluster_with(dir: &Path, inter_broker_password: &str, extra: &str) -> Cluster {
    let credentials = dir.join("credentials.toml");
    create_file_user(&credentials, "alice", ALICE_PASSWORD);
    create_file_user(&credentials, "broker", BROKER_PASSWORD);
    create_file_user(&credentials, "admin", ADMIN_PASSWORD);
    std::fs::write(dir.join("admin.pw"), format!("{ADMIN_PASSWORD}\n")).unwrap();
    let password_file = dir.join("broker.pw");
    std::fs::write(&password_file, format!("{inter_broker_password}\n")).unwrap();
    std::fs::write(dir.join("alice.pw"), format!("{ALICE_PASSWORD}\n")).unwrap();
    let toml = format!(
        "heartbeat_interval_ms = 200\nsession_timeout_ms = 3000\n\n[sasl]\n\
         mechanisms = [\"SCRAM-SHA-256\"]\ncredentials_file = {:?}\n\
         inter_broker_username = \"broker\"\ninter_broker_password_file = {:?}\n{extra}",
        credentials.display().to_string(),
        password_file.display().to_string()
    );
    replicated::cluster(3, toml)
}

/// `topic create` as alice: replication factor 3, min.insync.replicas=3.
fn create_topic(c: &mut Cluster, dir: &Path) {
    let pw = dir.join("alice.pw").display().to_string();
    c.cli(&[
        "--sasl-mechanism",
        "SCRAM-SHA-256",
        "--sasl-username",
        "alice",
        "--sasl-password-file",
        &pw,
        "topic",
        "create",
        TOPIC,
        "--partitions",
        "1",
        "--replication-factor",
        "3",
        "--config",
        "min.insync.replicas=3",
    ]);
}

fn alice(bootstrap: &str) -> ClientConfig {
    let sasl = SaslConfig::scram("SCRAM-SHA-256", "alice", ALICE_PASSWORD).unwrap();
    replicated::client(bootstrap).sasl(Some(sasl))
}

/// The sum of `name`'s series on node `id`'s metrics endpoint (0 when unreachable).
fn metric(c: &mut Cluster, id: u64, name: &str) -> u64 {
    let Ok(mut s) = std::net::TcpStream::connect(c.node(id).metrics_addr()) else {
        return 0;
    };
    let _ = write!(
        s,
        "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    );
    let mut text = String::new();
    let _ = s.read_to_string(&mut text);
    text.lines()
        .filter(|l| l.starts_with(name))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64
}

const AUTH_FAILURES: &str = "borges_replica_fetch_authentication_failures_total";

#[test]
fn followers_authenticate_as_the_inter_broker_user() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = sasl_cluster(dir.path(), BROKER_PASSWORD);
    create_topic(&mut c, dir.path());
    let rt = runtime();
    let bootstrap = c.bootstrap();
    let sent = rt.block_on(replicated::produce_with(
        alice(&bootstrap),
        (TOPIC, 0),
        values("v", 50),
        acks_all(20, 30_000),
    ));
    let (log, hw) = rt.block_on(replicated::read_to_high_watermark_with(
        alice(&bootstrap),
        TOPIC,
        0,
    ));
    let acked = check_acked(&sent, &log);
    assert_eq!(
        acked,
        50,
        "acks=all with min.insync.replicas=3 needs the followers: {sent:?}\n{}",
        c.logs()
    );
    replicated::assert_replicas_identical(&mut c, TOPIC, &[1, 2, 3], hw);
    for id in 1..=3 {
        assert_eq!(metric(&mut c, id, AUTH_FAILURES), 0, "node {id}");
    }
    // Without credentials a client is refused (the listeners do require SASL).
    let refused = rt.block_on(borges_client::Producer::new(
        replicated::client(&bootstrap),
        acks_all(0, 5_000),
    ));
    assert!(
        refused.is_err(),
        "a producer without credentials was served"
    );
}

#[test]
fn a_wrong_inter_broker_password_is_logged_and_counted() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = sasl_cluster(dir.path(), "not-the-password");
    create_topic(&mut c, dir.path());
    wait_until("the followers' failed authentications counted", || {
        (1..=3).any(|id| metric(&mut c, id, AUTH_FAILURES) >= 2)
    });
    // The leaders count them too (the failed exchanges of their client listeners).
    let refused: u64 = (1..=3)
        .map(|id| metric(&mut c, id, "borges_sasl_authentication_failures_total"))
        .sum();
    assert!(
        refused >= 2,
        "leaders counted {refused} failed authentications"
    );
    let logs = c.logs();
    assert!(
        logs.contains("authenticating to") && logs.contains("as \"broker\""),
        "no failed authentication in the logs:\n{logs}"
    );
    let rt = runtime();
    let bootstrap = c.bootstrap();
    let sent = rt.block_on(replicated::produce_with(
        alice(&bootstrap),
        (TOPIC, 0),
        values("v", 1),
        acks_all(3, 5_000),
    ));
    assert!(
        sent[0].1.is_err(),
        "acknowledged by an ISR of 3 whose followers cannot fetch: {sent:?}"
    );
}

/// `borges` as `user` (its password file in `dir`) against node `id` only.
fn cli_on(c: &mut Cluster, dir: &Path, id: u64, user: &str, args: &[&str]) -> String {
    let addr = c.node(id).addr();
    let pw = dir.join(format!("{user}.pw")).display().to_string();
    let mut all = vec![
        "--bootstrap",
        addr.as_str(),
        "--sasl-mechanism",
        "SCRAM-SHA-256",
        "--sasl-username",
        user,
        "--sasl-password-file",
        pw.as_str(),
    ];
    all.extend_from_slice(args);
    borges_testkit::cluster::borges(&all)
}

/// One acks=all record to each partition of `topic` as alice: how many were acknowledged
/// (none when alice may not even start an idempotent producer).
fn alice_writes(c: &mut Cluster, topic: &str, partitions: i32) -> usize {
    let rt = runtime();
    let bootstrap = c.bootstrap();
    rt.block_on(async {
        let Ok(producer) =
            borges_client::Producer::new(alice(&bootstrap), acks_all(3, 10_000)).await
        else {
            return 0;
        };
        let mut acked = 0;
        for p in 0..partitions {
            let sent = replicated::send_one(&producer, topic, p, format!("w{p}")).await;
            acked += usize::from(sent.is_ok());
        }
        let close = producer.close();
        let _ = tokio::time::timeout(std::time::Duration::from_secs(5), close).await;
        acked
    })
}

/// ACLs live in the metadata log: one added on broker 2 is listed by and enforced on every
/// broker (three partitions, one leader each), is in no broker's ACLs file, and survives a
/// restart of every broker.
#[test]
fn an_acl_added_on_one_broker_is_enforced_by_all_and_survives_restarts() {
    let dir = tempfile::tempdir().unwrap();
    let security = "\n[security]\nauthorizer_enabled = true\n\
                    super_users = [\"User:broker\", \"User:admin\"]\n";
    let mut c = sasl_cluster_with(dir.path(), BROKER_PASSWORD, security);
    let d = dir.path();
    for topic in [TOPIC, "other"] {
        let create = ["topic", "create", topic, "--partitions", "3"];
        cli_on(
            &mut c,
            d,
            1,
            "admin",
            &[&create[..], &["--replication-factor", "3"]].concat(),
        );
    }
    c.wait_for_every_node("a leader per partition", |i| {
        i.topics
            .get(TOPIC)
            .is_some_and(|t| t.partitions.iter().all(|p| p.isr.len() == 3))
    });
    let before = alice_writes(&mut c, TOPIC, 3);
    assert_eq!(before, 0, "alice wrote without an ACL");
    let acl = ["--allow-principal", "User:alice", "--operation", "Write"];
    let args = [&["acl", "add"][..], &acl[..], &["--topic", TOPIC]].concat();
    cli_on(&mut c, d, 2, "admin", &args);
    listed_by_every_broker_and_in_no_file(&mut c, d);
    assert_eq!(alice_writes(&mut c, TOPIC, 3), 3, "{}", c.logs());
    let other = alice_writes(&mut c, "other", 3);
    assert_eq!(other, 0, "the ACL names one topic");
    for id in 1..=3 {
        c.kill9(id);
    }
    for id in 1..=3 {
        c.restart_nowait(id);
    }
    for id in 1..=3 {
        c.wait_ready(id);
    }
    listed_by_every_broker_and_in_no_file(&mut c, d);
    let after = alice_writes(&mut c, TOPIC, 3);
    assert_eq!(after, 3, "after the restart: {}", c.logs());
    assert_eq!(alice_writes(&mut c, "other", 3), 0);
}

/// Every broker lists alice's ACL; no broker's ACLs file holds it.
fn listed_by_every_broker_and_in_no_file(c: &mut Cluster, dir: &Path) {
    for id in 1..=3 {
        let listed = cli_on(c, dir, id, "admin", &["acl", "list"]);
        assert!(listed.contains("User:alice"), "node {id}: {listed}");
        let file = c.node(id).data_dir().join("acls.toml");
        let text = std::fs::read_to_string(&file).unwrap_or_default();
        assert!(!text.contains("alice"), "node {id}'s file: {text}");
    }
}
