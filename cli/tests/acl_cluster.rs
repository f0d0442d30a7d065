//! ACLs in a three-broker cluster (issue 20 item 3): with the authorizer on, the followers'
//! replica fetches (Fetch and OffsetForLeaderEpoch with a replica id) need ClusterAction on the
//! cluster; with it granted to the brokers' principal (plaintext: `User:ANONYMOUS`), acks=all
//! with min.insync.replicas=3 is acknowledged and every replica holds the same batches, while a
//! topic the principal has no ACL for is refused. ACLs are per broker: every node reads the
//! same ACLs file here, written before the cluster starts.

mod replicated;

use borges_client::{Admin, ClientError, ErrorCode, NewTopic};
use replicated::{acks_all, check_acked, runtime, values};

const TOPIC: &str = "guarded";

const ACLS: &str = r#"
[[acl]]
principal = "User:ANONYMOUS"
resource_type = "Cluster"
resource_name = "kafka-cluster"
pattern = "Literal"
operation = "ClusterAction"
permission = "Allow"

[[acl]]
principal = "User:ANONYMOUS"
resource_type = "Topic"
resource_name = "guarded"
pattern = "Literal"
operation = "All"
permission = "Allow"
"#;

fn code_of(e: &ClientError) -> Option<ErrorCode> {
    match e {
        ClientError::NoBrokerAvailable { last, .. } => code_of(last),
        e => e.code(),
    }
}

#[test]
fn replica_fetches_keep_working_with_the_authorizer_on() {
    let dir = tempfile::tempdir().unwrap();
    let acls = dir.path().join("acls.toml");
    std::fs::write(&acls, ACLS).unwrap();
    let toml = format!(
        "heartbeat_interval_ms = 200\nsession_timeout_ms = 3000\n\n[security]\n\
         authorizer_enabled = true\nacls_file = {:?}\n",
        acls.display().to_string()
    );
    let mut c = replicated::cluster(3, toml);
    c.cli(&[
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
    let rt = runtime();
    let bootstrap = c.bootstrap();
    let sent = rt.block_on(replicated::produce(
        &bootstrap,
        (TOPIC, 0),
        values("v", 50),
        acks_all(20, 30_000),
    ));
    let (log, hw) = rt.block_on(replicated::read_to_high_watermark(&bootstrap, TOPIC, 0));
    let acked = check_acked(&sent, &log);
    assert_eq!(
        acked, 50,
        "acks=all with min.insync.replicas=3 needs the followers: {sent:?}"
    );
    replicated::assert_replicas_identical(&mut c, TOPIC, &[1, 2, 3], hw);
    let refused = rt.block_on(async {
        let admin = Admin::new(replicated::client(&bootstrap)).await?;
        admin
            .create_topics(vec![NewTopic::new("unguarded", 1)])
            .await
    });
    let e = refused.expect_err("a topic without an ACL was created");
    assert_eq!(
        code_of(&e),
        Some(ErrorCode::TopicAuthorizationFailed),
        "{e}"
    );
}
