//! ACLs against real broker processes (issue 20 item 3): SASL users, `[security]
//! authorizer_enabled` with `User:admin` a super user. A principal without ACLs gets its
//! authorization error from every API and nothing changes; Metadata and ListGroups leave out
//! what it may not describe; a prefixed allow; a deny beating an allow; Fetch and Produce
//! refused on their own permission (Describe is not Read); OffsetFetch leaves out (or, named,
//! refuses) topics the principal may not describe; refusals counted in the metrics by API and
//! resource type; CreateTopics and DeleteTopics answered per topic; the CLI add/list/remove
//! round trip;
//! ACLs kept across a restart.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use borges_client::acl::{Acl, AclFilter, Operation, PatternType, Permission, ResourceType};
use borges_client::{
    Admin, AlterConfig, ClientConfig, ClientError, Consumer, ConsumerConfig, ErrorCode, NewTopic,
    OffsetReset, OffsetSpec, Producer, ProducerConfig, ProducerRecord, SaslConfig, TopicPartition,
};
use borges_testkit::{borges_bin, BrokerOptions, BrokerProcess};

const CONFIG: &str = "[sasl]\nmechanisms = [\"SCRAM-SHA-256\"]\n\n[security]\n\
                      authorizer_enabled = true\nsuper_users = [\"User:admin\"]\n";

const USERS: &[&str] = &["admin", "alice", "bob", "carol"];

fn password(name: &str) -> String {
    format!("pw-{name}")
}

fn acl_broker() -> BrokerProcess {
    let broker = BrokerProcess::start_with(BrokerOptions {
        config_toml: Some(CONFIG.into()),
        ..BrokerOptions::default()
    });
    for name in USERS {
        let mut child = std::process::Command::new(borges_bin())
            .args(["user", "create", name, "--password-stdin", "--data-dir"])
            .arg(broker.data_dir())
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("run borges user");
        let mut input = child.stdin.take().unwrap();
        input
            .write_all(format!("{}\n", password(name)).as_bytes())
            .unwrap();
        drop(input);
        assert!(child.wait().unwrap().success());
    }
    broker
}

fn config(broker: &BrokerProcess, user: &str) -> ClientConfig {
    let sasl = SaslConfig::scram("SCRAM-SHA-256", user, &password(user)).unwrap();
    ClientConfig::new(&broker.bootstrap())
        .request_timeout_ms(10_000)
        .sasl(Some(sasl))
}

/// The broker's error code inside `e` (also behind NoBrokerAvailable).
fn code_of(e: &ClientError) -> Option<ErrorCode> {
    match e {
        ClientError::NoBrokerAvailable { last, .. } => code_of(last),
        e => e.code(),
    }
}

#[track_caller]
fn refused<T: std::fmt::Debug>(what: &str, result: Result<T, ClientError>, code: ErrorCode) {
    match result {
        Err(e) => assert_eq!(code_of(&e), Some(code), "{what}: {e}"),
        Ok(v) => panic!("{what}: allowed without an ACL: {v:?}"),
    }
}

/// Admin for `user`, retried while the broker re-reads its credentials file.
async fn admin(broker: &BrokerProcess, user: &str) -> Admin {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let attempt = async {
            let a = Admin::new(config(broker, user)).await?;
            a.list_topics().await.map(|_| a)
        };
        match attempt.await {
            Ok(a) => return a,
            Err(e) if Instant::now() < deadline => eprintln!("not yet: {e}"),
            Err(e) => panic!("{user} never authenticated: {e}"),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// An ACL broker, the super user's admin, and `topics` (name, partitions) created by it.
async fn broker_with_topics(topics: &[(&str, i32)]) -> (BrokerProcess, Admin) {
    let broker = acl_broker();
    let admin = admin(&broker, "admin").await;
    for &(name, partitions) in topics {
        admin
            .create_topics(vec![NewTopic::new(name, partitions)])
            .await
            .unwrap();
    }
    (broker, admin)
}

async fn producer(broker: &BrokerProcess, user: &str, idempotent: bool) -> Producer {
    let settings = ProducerConfig {
        enable_idempotence: idempotent,
        max_block_ms: 5_000,
        ..ProducerConfig::default()
    };
    Producer::new(config(broker, user), settings).await.unwrap()
}

async fn produce(p: &Producer, topic: &str, value: &str) -> Result<(), ClientError> {
    let record = ProducerRecord::new(topic).key("k").value(value.to_string());
    p.send(record).await?.await.map(drop)
}

/// Reads partition 0 of `topic` from the start as `user`: the records' count.
async fn consume(broker: &BrokerProcess, user: &str, topic: &str) -> Result<usize, ClientError> {
    let settings = ConsumerConfig {
        auto_offset_reset: OffsetReset::Earliest,
        ..ConsumerConfig::default()
    };
    let mut c = Consumer::new(config(broker, user), settings).await?;
    c.assign(vec![TopicPartition::new(topic, 0)]).await?;
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut n = 0;
    while Instant::now() < deadline {
        n += c.poll(Duration::from_millis(300)).await?.len();
    }
    Ok(n)
}

fn acl(principal: &str, op: Operation, name: &str, permission: Permission) -> Acl {
    Acl {
        principal: principal.into(),
        resource_type: ResourceType::Topic,
        resource_name: name.into(),
        pattern: PatternType::Literal,
        operation: op,
        permission,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_principal_without_acls_is_refused_by_every_api_and_nothing_changes() {
    let (broker, admin) = broker_with_topics(&[("t", 2)]).await;
    let p = producer(&broker, "admin", true).await;
    for i in 0..3 {
        produce(&p, "t", &format!("v{i}")).await.unwrap();
    }
    let tp = TopicPartition::new("t", 0);
    admin
        .alter_group_offsets("g", &[(tp.clone(), 1)])
        .await
        .unwrap();
    let before = state(&admin).await;
    let bob = self::admin(&broker, "bob").await;
    topics_refused(&broker, &bob).await;
    groups_refused(&bob, &tp).await;
    join_refused(&broker).await;
    acls_refused(&bob).await;
    assert_eq!(
        state(&admin).await,
        before,
        "a refused request changed something"
    );
    assert!(!admin
        .list_topics()
        .await
        .unwrap()
        .contains(&"x".to_string()));
}

/// What the admin sees: topics, partition counts, end offsets, retention, group offsets, ACLs.
async fn state(admin: &Admin) -> String {
    let topics = admin.list_topics().await.unwrap();
    let described = admin.describe_topics(&["t"]).await.unwrap();
    let ends = admin
        .list_offsets(vec![
            (TopicPartition::new("t", 0), OffsetSpec::Latest),
            (TopicPartition::new("t", 1), OffsetSpec::Latest),
        ])
        .await
        .unwrap();
    let ends: Vec<i64> = ends.iter().map(|o| o.offset).collect();
    let retention = admin.describe_configs("t").await.unwrap();
    let retention = retention
        .iter()
        .find(|c| c.name == "retention.ms")
        .map(|c| &c.value);
    let groups = admin.list_group_offsets("g").await.unwrap();
    let acls = admin.describe_acls(&AclFilter::default()).await.unwrap();
    let partitions = described[0].partitions.len();
    format!("{topics:?} {partitions} {ends:?} {retention:?} {groups:?} {acls:?}")
}

async fn topics_refused(broker: &BrokerProcess, bob: &Admin) {
    let topic = ErrorCode::TopicAuthorizationFailed;
    refused(
        "CreateTopics",
        bob.create_topics(vec![NewTopic::new("x", 1)]).await,
        topic,
    );
    refused("DeleteTopics", bob.delete_topics(&["t"]).await, topic);
    refused(
        "CreatePartitions",
        bob.create_partitions("t", 4).await,
        topic,
    );
    refused("DescribeConfigs", bob.describe_configs("t").await, topic);
    let retention = vec![AlterConfig::set("retention.ms", "1000")];
    refused(
        "AlterConfigs",
        bob.alter_configs("t", retention).await,
        topic,
    );
    let latest = vec![(TopicPartition::new("t", 0), OffsetSpec::Latest)];
    refused("ListOffsets", bob.list_offsets(latest).await, topic);
    refused("Metadata of t", bob.describe_topics(&["t"]).await, topic);
    let listed = bob.list_topics().await.unwrap();
    assert!(
        listed.is_empty(),
        "Metadata lists what bob may not describe: {listed:?}"
    );
    let plain = producer(broker, "bob", false).await;
    refused("Produce", produce(&plain, "t", "no").await, topic);
    let cluster = ErrorCode::ClusterAuthorizationFailed;
    let idempotent = Producer::new(
        config(broker, "bob"),
        ProducerConfig {
            max_block_ms: 5_000,
            ..ProducerConfig::default()
        },
    );
    let sent = async { produce(&idempotent.await?, "t", "no").await };
    refused("InitProducerId", sent.await, cluster);
    refused("Fetch", consume(broker, "bob", "t").await, topic);
}

async fn groups_refused(bob: &Admin, tp: &TopicPartition) {
    let group = ErrorCode::GroupAuthorizationFailed;
    refused("FindCoordinator", bob.group_coordinator("g").await, group);
    refused("OffsetFetch", bob.list_group_offsets("g").await, group);
    refused(
        "OffsetCommit",
        bob.alter_group_offsets("g", &[(tp.clone(), 0)]).await,
        group,
    );
    refused("DescribeGroups", bob.describe_groups(&["g"]).await, group);
    refused("DeleteGroups", bob.delete_groups(&["g"]).await, group);
    let listed = bob.list_groups().await.unwrap();
    assert!(
        listed.is_empty(),
        "ListGroups lists what bob may not describe: {listed:?}"
    );
}

/// Joining group `g` as bob: FindCoordinator (Describe group) is refused, and the consumer's
/// poll returns the refusal.
async fn join_refused(broker: &BrokerProcess) {
    let joined = async {
        let settings = ConsumerConfig::default().group_id("g");
        let mut c = Consumer::new(config(broker, "bob"), settings).await?;
        c.subscribe(&["t"]).await?;
        c.poll(Duration::from_secs(3)).await
    };
    let joined = tokio::time::timeout(Duration::from_secs(30), joined).await;
    let joined = joined.expect("a refused join ends within 30 s");
    refused(
        "ConsumerGroupHeartbeat",
        joined,
        ErrorCode::GroupAuthorizationFailed,
    );
}

async fn acls_refused(bob: &Admin) {
    let cluster = ErrorCode::ClusterAuthorizationFailed;
    let everything = acl("User:bob", Operation::All, "*", Permission::Allow);
    refused("CreateAcls", bob.create_acls(&[everything]).await, cluster);
    refused(
        "DescribeAcls",
        bob.describe_acls(&AclFilter::default()).await,
        cluster,
    );
    let mine = AclFilter {
        principal: Some("User:bob".into()),
        ..AclFilter::default()
    };
    refused("DeleteAcls", bob.delete_acls(&[mine]).await, cluster);
}

fn password_file(dir: &Path, user: &str) -> PathBuf {
    let path = dir.join(format!("{user}.password"));
    std::fs::write(&path, format!("{}\n", password(user))).unwrap();
    path
}

/// Runs `borges acl ARGS` as `user`; its standard output, or its standard error on failure.
fn cli(broker: &BrokerProcess, user: &str, args: &[&str]) -> Result<String, String> {
    let file = password_file(broker.data_dir(), user);
    let file = file.to_string_lossy().into_owned();
    let mut all = vec!["--sasl-mechanism", "SCRAM-SHA-256", "--sasl-username", user];
    all.extend(["--sasl-password-file", &file, "acl"]);
    all.extend(args);
    let out = broker.run_cli(&all, "");
    match out.status.success() {
        true => Ok(String::from_utf8_lossy(&out.stdout).into_owned()),
        false => Err(String::from_utf8_lossy(&out.stderr).into_owned()),
    }
}

#[track_caller]
fn ok(r: Result<String, String>) -> String {
    r.unwrap_or_else(|e| panic!("borges acl: {e}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prefixes_allow_denies_win_and_the_cli_round_trips() {
    let mut broker = acl_broker();
    let admin = admin(&broker, "admin").await;
    for t in ["app.data", "app.secret", "other"] {
        admin
            .create_topics(vec![NewTopic::new(t, 1)])
            .await
            .unwrap();
    }
    add_and_list(&broker);
    alice_and_carol(&broker).await;
    ok(cli(
        &broker,
        "admin",
        &[
            "remove",
            "--deny-principal",
            "User:alice",
            "--operation",
            "Write",
            "--topic",
            "app.secret",
        ],
    ));
    let alice = producer(&broker, "alice", true).await;
    produce(&alice, "app.secret", "now allowed")
        .await
        .expect("the deny was removed");
    broker.restart();
    let listed = ok(cli(
        &broker,
        "admin",
        &[
            "list",
            "--topic",
            "app.",
            "--resource-pattern-type",
            "prefixed",
        ],
    ));
    assert!(
        listed.contains("User:alice") && !listed.contains("DENY"),
        "{listed}"
    );
}

/// Adds alice's prefixed allow and her deny, carol's Describe, with the CLI; lists them.
fn add_and_list(broker: &BrokerProcess) {
    ok(cli(
        broker,
        "admin",
        &[
            "add",
            "--allow-principal",
            "User:alice",
            "--operation",
            "All",
            "--topic",
            "app.",
            "--resource-pattern-type",
            "prefixed",
        ],
    ));
    ok(cli(
        broker,
        "admin",
        &[
            "add",
            "--deny-principal",
            "User:alice",
            "--operation",
            "Write",
            "--topic",
            "app.secret",
        ],
    ));
    ok(cli(
        broker,
        "admin",
        &[
            "add",
            "--allow-principal",
            "User:carol",
            "--operation",
            "Describe",
            "--topic",
            "app.data",
        ],
    ));
    let listed = ok(cli(broker, "admin", &["list"]));
    for line in [
        "ResourcePattern(resourceType=TOPIC, name=app., patternType=PREFIXED)",
        "(principal=User:alice, host=*, operation=ALL, permissionType=ALLOW)",
        "(principal=User:alice, host=*, operation=WRITE, permissionType=DENY)",
        "(principal=User:carol, host=*, operation=DESCRIBE, permissionType=ALLOW)",
    ] {
        assert!(listed.contains(line), "{line} not in\n{listed}");
    }
    let refusal = cli(broker, "bob", &["list"]).expect_err("bob listed ACLs");
    assert!(
        refusal.contains("CLUSTER_AUTHORIZATION_FAILED") || refusal.contains("luster"),
        "{refusal}"
    );
}

async fn alice_and_carol(broker: &BrokerProcess) {
    let topic = ErrorCode::TopicAuthorizationFailed;
    let alice = producer(broker, "alice", true).await;
    produce(&alice, "app.data", "allowed by the prefix")
        .await
        .expect("prefixed allow");
    refused(
        "Produce denied",
        produce(&alice, "app.secret", "no").await,
        topic,
    );
    assert_eq!(consume(broker, "alice", "app.data").await.unwrap(), 1);
    assert_eq!(
        consume(broker, "alice", "app.secret").await.unwrap(),
        0,
        "Read not denied"
    );
    let mut seen = self::admin(broker, "alice")
        .await
        .list_topics()
        .await
        .unwrap();
    seen.sort();
    assert_eq!(
        seen,
        ["app.data", "app.secret"],
        "Metadata filtered by Describe"
    );
    let carol = self::admin(broker, "carol").await;
    assert_eq!(carol.list_topics().await.unwrap(), ["app.data"]);
    refused(
        "Fetch with Describe only",
        consume(broker, "carol", "app.data").await,
        topic,
    );
    let plain = producer(broker, "carol", false).await;
    refused(
        "Produce with Describe only",
        produce(&plain, "app.data", "no").await,
        topic,
    );
}

/// OffsetFetch as a principal with Describe on the group and on topic `t` only: asked for
/// every topic, the group's offsets of `secret` are left out; asked for `secret` by name, its
/// partition is answered TopicAuthorizationFailed (Kafka's OffsetFetch both ways).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn offset_fetch_leaves_out_topics_the_principal_may_not_describe() {
    let (broker, admin) = broker_with_topics(&[("t", 1), ("secret", 1)]).await;
    let (t0, secret0) = (
        TopicPartition::new("t", 0),
        TopicPartition::new("secret", 0),
    );
    admin
        .alter_group_offsets("g", &[(t0.clone(), 1), (secret0.clone(), 2)])
        .await
        .unwrap();
    let mut describe_group = acl("User:alice", Operation::Describe, "g", Permission::Allow);
    describe_group.resource_type = ResourceType::Group;
    let describe_t = acl("User:alice", Operation::Describe, "t", Permission::Allow);
    admin
        .create_acls(&[describe_group, describe_t])
        .await
        .unwrap();
    let alice = self::admin(&broker, "alice").await;
    assert_eq!(
        alice.list_group_offsets("g").await.unwrap(),
        [(t0.clone(), 1)],
        "OffsetFetch of every topic shows a topic alice may not describe"
    );
    let settings = ConsumerConfig::default().group_id("g");
    let c = Consumer::new(config(&broker, "alice"), settings)
        .await
        .unwrap();
    let committed = c.committed(std::slice::from_ref(&t0)).await.unwrap();
    assert_eq!(committed, [(t0, Some(1))]);
    refused(
        "OffsetFetch of secret by name",
        c.committed(&[secret0]).await,
        ErrorCode::TopicAuthorizationFailed,
    );
}

/// `borges_authorization_failures_total` summed over the cores' series whose labels include
/// `api` and `resource_type`, from the broker's metrics endpoint.
fn authorization_failures(broker: &BrokerProcess, api: &str, resource_type: &str) -> u64 {
    use std::io::Read;
    let mut s = std::net::TcpStream::connect(broker.metrics_addr()).expect("metrics");
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    let (api, resource) = (
        format!("api=\"{api}\""),
        format!("resource_type=\"{resource_type}\""),
    );
    let series = text
        .lines()
        .filter(|l| l.starts_with("borges_authorization_failures_total{"))
        .filter(|l| l.contains(&api) && l.contains(&resource));
    series
        .map(|l| l.rsplit(' ').next().unwrap().parse::<u64>().unwrap())
        .sum()
}

/// Each refusal is counted once under its API and the type of the resource refused: whole
/// requests (topic, group, cluster) and a named topic in Metadata and OffsetFetch answers;
/// what a listing leaves out is not counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_are_counted_per_api_and_resource_type() {
    let (broker, admin) = broker_with_topics(&[("t", 1)]).await;
    let t0 = TopicPartition::new("t", 0);
    admin
        .alter_group_offsets("g", &[(t0.clone(), 1)])
        .await
        .unwrap();
    let mut describe_group = acl("User:carol", Operation::Describe, "g", Permission::Allow);
    describe_group.resource_type = ResourceType::Group;
    admin.create_acls(&[describe_group]).await.unwrap();
    let count = |api, resource| authorization_failures(&broker, api, resource);
    assert_eq!(count("DeleteTopics", "topic"), 0);
    let bob = self::admin(&broker, "bob").await;
    let carol = self::admin(&broker, "carol").await;
    assert!(bob.list_topics().await.unwrap().is_empty());
    assert!(carol.list_group_offsets("g").await.unwrap().is_empty());
    let topic = ErrorCode::TopicAuthorizationFailed;
    refused("DeleteTopics", bob.delete_topics(&["t"]).await, topic);
    refused("DeleteTopics", bob.delete_topics(&["t"]).await, topic);
    refused("Metadata of t", bob.describe_topics(&["t"]).await, topic);
    let group = ErrorCode::GroupAuthorizationFailed;
    refused("DescribeGroups", bob.describe_groups(&["g"]).await, group);
    let cluster = ErrorCode::ClusterAuthorizationFailed;
    let listed = bob.describe_acls(&AclFilter::default()).await;
    refused("DescribeAcls", listed, cluster);
    let settings = ConsumerConfig::default().group_id("g");
    let c = Consumer::new(config(&broker, "carol"), settings)
        .await
        .unwrap();
    refused("OffsetFetch of t", c.committed(&[t0]).await, topic);
    assert_eq!(count("DeleteTopics", "topic"), 2);
    assert_eq!(count("Metadata", "topic"), 1);
    assert_eq!(count("DescribeGroups", "group"), 1);
    assert_eq!(count("DescribeAcls", "cluster"), 1);
    assert_eq!(count("OffsetFetch", "topic"), 1);
    assert_eq!(count("OffsetFetch", "group"), 0);
}

/// CreateTopics and DeleteTopics answer per topic (as Kafka): a topic the principal may not
/// create or delete is answered TopicAuthorizationFailed and the others in the request are
/// served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_and_delete_topics_answer_per_topic() {
    let (broker, admin) = broker_with_topics(&[("other", 1)]).await;
    let mut all = acl("User:alice", Operation::All, "app.", Permission::Allow);
    all.pattern = PatternType::Prefixed;
    admin.create_acls(&[all]).await.unwrap();
    let alice = self::admin(&broker, "alice").await;
    let new = vec![NewTopic::new("app.a", 1), NewTopic::new("no.b", 1)];
    let created = alice.create_topics_each(new).await.unwrap();
    let codes: Vec<_> = created
        .iter()
        .map(|r| r.result.as_ref().err().and_then(code_of))
        .collect();
    let topic = Some(ErrorCode::TopicAuthorizationFailed);
    assert_eq!(codes, [None, topic], "{created:?}");
    let mut listed = admin.list_topics().await.unwrap();
    listed.sort();
    assert_eq!(listed, ["app.a", "other"]);
    let deleted = alice.delete_topics_each(&["other", "app.a"]).await.unwrap();
    let codes: Vec<_> = deleted
        .iter()
        .map(|r| r.result.as_ref().err().and_then(code_of))
        .collect();
    assert_eq!(codes, [topic, None], "{deleted:?}");
    assert_eq!(admin.list_topics().await.unwrap(), ["other"]);
}

/// A consumer assigned a topic it may read and one it may only describe, fetched in one
/// request (one connection): the broker answers the second `TopicAuthorizationFailed` and
/// serves the first (per topic, as Kafka), and the SDK buffers the first's records before it
/// returns the refusal, so they reach the application although the refused partition comes
/// first in every response ("a.secret" sorts before "app.x").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_partition_does_not_stall_the_others_of_a_fetch() {
    let (broker, admin) = broker_with_topics(&[("app.x", 1), ("a.secret", 1)]).await;
    let mut all = acl("User:alice", Operation::All, "app.", Permission::Allow);
    all.pattern = PatternType::Prefixed;
    let describe = acl(
        "User:alice",
        Operation::Describe,
        "a.secret",
        Permission::Allow,
    );
    admin.create_acls(&[all, describe]).await.unwrap();
    let p = producer(&broker, "admin", false).await;
    for topic in ["app.x", "a.secret"] {
        for i in 0..3 {
            produce(&p, topic, &format!("{topic}-{i}")).await.unwrap();
        }
    }
    let settings = ConsumerConfig {
        auto_offset_reset: OffsetReset::Earliest,
        ..ConsumerConfig::default()
    };
    let one_connection = config(&broker, "alice").shard_aware(false);
    let mut c = Consumer::new(one_connection, settings).await.unwrap();
    let assigned = [
        TopicPartition::new("a.secret", 0),
        TopicPartition::new("app.x", 0),
    ];
    c.assign(assigned.to_vec()).await.unwrap();
    let (mut values, mut refusals) = (Vec::new(), 0);
    let deadline = Instant::now() + Duration::from_secs(20);
    while values.len() < 3 && Instant::now() < deadline {
        match c.poll(Duration::from_millis(200)).await {
            Ok(records) => values.extend(records.into_iter().map(|r| {
                let v = r.value.unwrap_or_default();
                (
                    r.topic.to_string(),
                    String::from_utf8_lossy(&v).into_owned(),
                )
            })),
            Err(e) if code_of(&e) == Some(ErrorCode::TopicAuthorizationFailed) => refusals += 1,
            Err(e) => panic!("unexpected error: {e}"),
        }
    }
    let expected: Vec<_> = (0..3)
        .map(|i| ("app.x".to_string(), format!("app.x-{i}")))
        .collect();
    assert_eq!(values, expected, "app.x's records, and nothing of a.secret");
    assert!(refusals > 0, "a.secret was refused");
}
