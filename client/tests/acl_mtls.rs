//! ACLs on principals from client certificates (issue 20 item 3 with item 1's mTLS): a broker
//! that requires a client certificate takes each connection's principal from the certificate's
//! subject (`User:O=Borges Tests,CN=alice`, RFC 4514), and the authorizer judges that
//! principal like a SASL user's: a super user by subject, an allow for one subject, and
//! another subject from the same CA refused with nothing changed.

use borges_client::acl::{Acl, Operation, PatternType, Permission, ResourceType};
use borges_client::{
    Admin, ClientConfig, ClientError, ErrorCode, NewTopic, OffsetSpec, Producer, ProducerConfig,
    ProducerRecord, TlsConfig, TopicPartition,
};
use borges_testkit::tls::{CertFiles, TestCa};
use borges_testkit::{BrokerOptions, BrokerProcess};

/// The principal of a certificate `TestCa::issue` made for common name `cn`.
fn principal(cn: &str) -> String {
    format!("User:O=Borges Tests,CN={cn}")
}

fn config(broker: &BrokerProcess, ca: &TestCa, who: &CertFiles) -> ClientConfig {
    ClientConfig::new(&broker.bootstrap())
        .request_timeout_ms(10_000)
        .tls(Some(TlsConfig::new(&ca.cert).identity(&who.cert, &who.key)))
}

fn code_of(e: &ClientError) -> Option<ErrorCode> {
    match e {
        ClientError::NoBrokerAvailable { last, .. } => code_of(last),
        e => e.code(),
    }
}

async fn produce(broker: &BrokerProcess, ca: &TestCa, who: &CertFiles) -> Result<(), ClientError> {
    // Not idempotent: InitProducerId would need IdempotentWrite on the cluster, and the
    // refusal judged here is the topic's.
    let settings = ProducerConfig {
        enable_idempotence: false,
        max_block_ms: 5_000,
        ..ProducerConfig::default()
    };
    let p = Producer::new(config(broker, ca, who), settings).await?;
    let record = ProducerRecord::new("orders")
        .key("k")
        .value("v".to_string());
    p.send(record).await?.await.map(drop)
}

/// A broker that requires a certificate of `ca`, with the authorizer on and the `admin`
/// subject a super user.
fn mtls_broker(ca: &TestCa, server: &CertFiles) -> BrokerProcess {
    let toml = format!(
        "[security]\nauthorizer_enabled = true\nsuper_users = [{:?}]\n",
        principal("admin")
    );
    BrokerProcess::start_with(BrokerOptions {
        args: vec![
            "--tls-cert".into(),
            server.cert.display().to_string(),
            "--tls-key".into(),
            server.key.display().to_string(),
            "--tls-client-ca".into(),
            ca.cert.display().to_string(),
        ],
        config_toml: Some(toml),
        ..BrokerOptions::default()
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn certificate_subjects_are_principals_under_acls() {
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new(dir.path(), "ca");
    let server = ca.broker("broker");
    let (admin_cert, alice, mallory) = (
        ca.issue("admin", "admin", &[]),
        ca.issue("alice", "alice", &[]),
        ca.issue("mallory", "mallory", &[]),
    );
    let broker = mtls_broker(&ca, &server);

    let admin = Admin::new(config(&broker, &ca, &admin_cert)).await.unwrap();
    admin
        .create_topics(vec![NewTopic::new("orders", 1)])
        .await
        .expect("the super user's subject may create");
    let allow = |operation| Acl {
        principal: principal("alice"),
        resource_type: ResourceType::Topic,
        resource_name: "orders".into(),
        pattern: PatternType::Literal,
        operation,
        permission: Permission::Allow,
    };
    admin
        .create_acls(&[allow(Operation::Write), allow(Operation::Describe)])
        .await
        .unwrap()
        .into_iter()
        .for_each(|r| r.expect("ACL created"));

    produce(&broker, &ca, &alice)
        .await
        .expect("alice's subject is allowed to write");
    let refused = produce(&broker, &ca, &mallory)
        .await
        .expect_err("another subject of the same CA wrote");
    assert_eq!(
        code_of(&refused),
        Some(ErrorCode::TopicAuthorizationFailed),
        "{refused}"
    );
    let mallory_admin = Admin::new(config(&broker, &ca, &mallory)).await.unwrap();
    assert!(
        mallory_admin.list_topics().await.unwrap().is_empty(),
        "Metadata lists a topic mallory may not describe"
    );
    let refused = mallory_admin
        .create_topics(vec![NewTopic::new("mallory", 1)])
        .await
        .expect_err("mallory created a topic");
    assert_eq!(
        code_of(&refused),
        Some(ErrorCode::TopicAuthorizationFailed),
        "{refused}"
    );
    // Nothing changed: one topic, one record (alice's).
    assert_eq!(admin.list_topics().await.unwrap(), ["orders"]);
    let end = admin
        .list_offsets(vec![(TopicPartition::new("orders", 0), OffsetSpec::Latest)])
        .await
        .unwrap();
    assert_eq!(end.first().map(|o| o.offset), Some(1), "{end:?}");
}
