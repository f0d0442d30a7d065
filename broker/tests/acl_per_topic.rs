//! Per-topic authorization, as Kafka answers it: in one Produce, Fetch, ListOffsets,
//! OffsetForLeaderEpoch or OffsetCommit request, each partition of a topic the principal may
//! not use is answered `TopicAuthorizationFailed` and the other topics are served; nothing of
//! the refused topic changes. (Before, the whole request was refused for one such topic.)
//!
//! The broker runs with the authorizer on and no SASL, so every connection is
//! `User:ANONYMOUS`, which may do everything on topics `app.*`, create and describe `secret`
//! (but neither write nor read it), and read group `g`; `hidden` is named by no ACL and does
//! not exist.

mod common;

use borges_protocol::batch::Compression;
use borges_protocol::{wire, ApiKey, ErrorCode};
use borges_testkit::{BrokerOptions, BrokerProcess};
use common::{make_batch, value, RawClient, Reply};
use flatbuffers::{FlatBufferBuilder, UnionWIPOffset, WIPOffset};

const ACLS: &str = r#"
[[acl]]
principal = "User:ANONYMOUS"
resource_type = "Topic"
resource_name = "app."
pattern = "Prefixed"
operation = "All"
permission = "Allow"

[[acl]]
principal = "User:ANONYMOUS"
resource_type = "Topic"
resource_name = "secret"
pattern = "Literal"
operation = "Create"
permission = "Allow"

[[acl]]
principal = "User:ANONYMOUS"
resource_type = "Topic"
resource_name = "secret"
pattern = "Literal"
operation = "Describe"
permission = "Allow"

[[acl]]
principal = "User:ANONYMOUS"
resource_type = "Group"
resource_name = "g"
pattern = "Literal"
operation = "Read"
permission = "Allow"
"#;

/// A generated object-API value (its structs are non-exhaustive): defaults, then these fields.
macro_rules! obj {
    ($ty:path { $($field:ident : $value:expr),* $(,)? }) => {{
        let mut o = <$ty>::default();
        $( o.$field = $value; )*
        o
    }};
}

const REFUSED: ErrorCode = ErrorCode::TopicAuthorizationFailed;

fn broker(dir: &std::path::Path) -> BrokerProcess {
    let acls = dir.join("acls.toml");
    std::fs::write(&acls, ACLS).unwrap();
    let config = format!(
        "[security]\nauthorizer_enabled = true\nacls_file = {:?}\n",
        acls.display().to_string()
    );
    BrokerProcess::start_with(BrokerOptions {
        config_toml: Some(config),
        ..BrokerOptions::default()
    })
}

/// `(topic, partition, error code)` of every partition of a response, in response order.
type Codes = Vec<(String, i32, ErrorCode)>;

/// Sends the request `pack` builds and returns the reply, which must be the API's own
/// response, not a refusal of the whole request.
fn call(
    c: &mut RawClient,
    api: ApiKey,
    pack: impl FnOnce(&mut FlatBufferBuilder<'static>) -> WIPOffset<UnionWIPOffset>,
    payload: &[u8],
) -> Reply {
    let mut fbb = FlatBufferBuilder::new();
    let root = pack(&mut fbb);
    fbb.finish(root, None);
    let reply = c.call(api, &fbb, payload);
    assert!(
        !reply.header.is_error(),
        "the request was refused whole: {:?}",
        borges_protocol::message::decode_error_response(&reply.message)
    );
    reply
}

fn produce(c: &mut RawClient, topics: &[&str]) -> (Codes, Vec<i64>) {
    let mut payload = Vec::new();
    let mut request = obj!(wire::ProduceRequestT {
        acks: -1,
        timeout_ms: 30_000,
    });
    let mut data = Vec::new();
    for t in topics {
        let batch = make_batch(&[&format!("{t}-0")], Compression::None);
        let records = obj!(wire::PayloadRangeT {
            offset: payload.len() as u32,
            length: batch.len() as u32,
        });
        payload.extend_from_slice(&batch);
        data.push(obj!(wire::TopicProduceDataT {
            name: t.to_string(),
            partitions: Some(vec![obj!(wire::PartitionProduceDataT {
                partition: 0,
                records: Some(records),
            })]),
        }));
    }
    request.topics = Some(data);
    let reply = call(
        c,
        ApiKey::Produce,
        |fbb| request.pack(fbb).as_union_value(),
        &payload,
    );
    let r = flatbuffers::root::<wire::ProduceResponse>(&reply.message)
        .unwrap()
        .unpack();
    assert_eq!(r.error_code, 0, "{:?}", r.error_message);
    let mut codes = Vec::new();
    let mut offsets = Vec::new();
    for t in r.topics.unwrap_or_default() {
        for p in t.partitions.unwrap_or_default() {
            codes.push((
                t.name.clone(),
                p.partition,
                ErrorCode::from_u16(p.error_code),
            ));
            offsets.push(p.base_offset);
        }
    }
    (codes, offsets)
}

fn fetch(c: &mut RawClient, topics: &[&str]) -> (Codes, Vec<Vec<String>>) {
    let topics = topics.iter().map(|t| {
        obj!(wire::FetchTopicT {
            name: t.to_string(),
            partitions: Some(vec![obj!(wire::FetchPartitionT {
                partition: 0,
                fetch_offset: 0,
            })]),
        })
    });
    let request = obj!(wire::FetchRequestT {
        max_wait_ms: 0,
        min_bytes: 0,
        topics: Some(topics.collect()),
    });
    let reply = call(
        c,
        ApiKey::Fetch,
        |fbb| request.pack(fbb).as_union_value(),
        &[],
    );
    let r = flatbuffers::root::<wire::FetchResponse>(&reply.message)
        .unwrap()
        .unpack();
    let (mut codes, mut values) = (Vec::new(), Vec::new());
    for t in r.topics.unwrap_or_default() {
        for p in t.partitions.unwrap_or_default() {
            codes.push((
                t.name.clone(),
                p.partition,
                ErrorCode::from_u16(p.error_code),
            ));
            let range = p.records.unwrap_or_default();
            let (start, end) = (
                range.offset as usize,
                (range.offset + range.length) as usize,
            );
            let records = common::decode(&reply.payload.slice(start..end), 0);
            values.push(records.iter().map(value).collect());
        }
    }
    (codes, values)
}

fn list_offsets(c: &mut RawClient, topics: &[&str]) -> (Codes, Vec<i64>) {
    let topics = topics.iter().map(|t| {
        obj!(wire::ListOffsetsTopicT {
            name: t.to_string(),
            partitions: Some(vec![obj!(wire::ListOffsetsPartitionT {
                partition: 0,
                current_leader_epoch: -1,
                timestamp: -1,
            })]),
        })
    });
    let request = obj!(wire::ListOffsetsRequestT {
        topics: Some(topics.collect()),
    });
    let reply = call(
        c,
        ApiKey::ListOffsets,
        |fbb| request.pack(fbb).as_union_value(),
        &[],
    );
    let r = flatbuffers::root::<wire::ListOffsetsResponse>(&reply.message)
        .unwrap()
        .unpack();
    let (mut codes, mut offsets) = (Vec::new(), Vec::new());
    for t in r.topics.unwrap_or_default() {
        for p in t.partitions.unwrap_or_default() {
            codes.push((
                t.name.clone(),
                p.partition,
                ErrorCode::from_u16(p.error_code),
            ));
            offsets.push(p.offset);
        }
    }
    (codes, offsets)
}

fn epoch_ends(c: &mut RawClient, topics: &[&str]) -> Codes {
    let topics = topics.iter().map(|t| {
        obj!(wire::OffsetForLeaderEpochTopicT {
            name: t.to_string(),
            partitions: Some(vec![obj!(wire::OffsetForLeaderEpochPartitionT {
                partition: 0,
                current_leader_epoch: -1,
                leader_epoch: 0,
            })]),
        })
    });
    let request = obj!(wire::OffsetForLeaderEpochRequestT {
        replica_id: -1,
        topics: Some(topics.collect()),
    });
    let reply = call(
        c,
        ApiKey::OffsetForLeaderEpoch,
        |fbb| request.pack(fbb).as_union_value(),
        &[],
    );
    let r = flatbuffers::root::<wire::OffsetForLeaderEpochResponse>(&reply.message)
        .unwrap()
        .unpack();
    let mut codes = Vec::new();
    for t in r.topics.unwrap_or_default() {
        for p in t.partitions.unwrap_or_default() {
            codes.push((
                t.name.clone(),
                p.partition,
                ErrorCode::from_u16(p.error_code),
            ));
        }
    }
    codes
}

fn codes(expected: &[(&str, ErrorCode)]) -> Codes {
    let each = expected.iter().map(|(t, code)| (t.to_string(), 0, *code));
    each.collect()
}

/// `borges_authorization_failures_total{api=API, resource_type="topic"}` over the cores.
fn topic_refusals(broker: &BrokerProcess, api: &str) -> u64 {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(broker.metrics_addr()).expect("metrics");
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    let api = format!("api=\"{api}\"");
    text.lines()
        .filter(|l| l.starts_with("borges_authorization_failures_total{"))
        .filter(|l| l.contains(&api) && l.contains("resource_type=\"topic\""))
        .map(|l| l.rsplit(' ').next().unwrap().parse::<u64>().unwrap())
        .sum()
}

#[test]
fn refused_topics_are_answered_per_partition_and_the_others_are_served() {
    let dir = tempfile::tempdir().unwrap();
    let broker = broker(dir.path());
    let mut c = RawClient::connect(broker.addr());
    assert_eq!(c.create_topic("app.a", 1, &[]), ErrorCode::None);
    assert_eq!(c.create_topic("secret", 1, &[]), ErrorCode::None);

    let (answers, offsets) = produce(&mut c, &["app.a", "secret"]);
    let ok = ErrorCode::None;
    assert_eq!(answers, codes(&[("app.a", ok), ("secret", REFUSED)]));
    assert_eq!(offsets, [0, -1]);
    // Nothing reached `secret` (ANONYMOUS may describe it); `hidden` is refused though it
    // does not exist (authorization comes before existence, as in Kafka).
    let (answers, ends) = list_offsets(&mut c, &["app.a", "secret", "hidden"]);
    let expected = [("app.a", ok), ("secret", ok), ("hidden", REFUSED)];
    assert_eq!(answers, codes(&expected));
    assert_eq!(&ends[..2], [1, 0]);

    let (answers, values) = fetch(&mut c, &["app.a", "secret"]);
    assert_eq!(answers, codes(&[("app.a", ok), ("secret", REFUSED)]));
    assert_eq!(values, [vec!["app.a-0".to_string()], vec![]]);

    let answers = epoch_ends(&mut c, &["app.a", "hidden"]);
    assert_eq!(answers, codes(&[("app.a", ok), ("hidden", REFUSED)]));

    let committed = c.commit("g", "", -1, &[("app.a", 0, 1), ("secret", 0, 0)]);
    assert_eq!(committed, [ok, REFUSED]);
    assert_eq!(c.committed("g"), [("app.a".to_string(), 0, 1)]);

    for api in [
        "Produce",
        "ListOffsets",
        "Fetch",
        "OffsetForLeaderEpoch",
        "OffsetCommit",
    ] {
        assert_eq!(topic_refusals(&broker, api), 1, "{api}: one refused topic");
    }
}

/// `(resource name, error code)` per result of an admin response, in response order.
type ResourceCodes = Vec<(String, ErrorCode)>;

fn create_partitions(c: &mut RawClient, topics: &[&str], count: i32) -> ResourceCodes {
    let topics = topics.iter().map(|t| {
        obj!(wire::CreatePartitionsTopicT {
            name: t.to_string(),
            count: count,
        })
    });
    let request = obj!(wire::CreatePartitionsRequestT {
        topics: Some(topics.collect()),
        timeout_ms: 30_000,
    });
    let reply = call(
        c,
        ApiKey::CreatePartitions,
        |fbb| request.pack(fbb).as_union_value(),
        &[],
    );
    let r = flatbuffers::root::<wire::CreatePartitionsResponse>(&reply.message)
        .unwrap()
        .unpack();
    let results = r.results.unwrap_or_default().into_iter();
    results
        .map(|t| (t.name, ErrorCode::from_u16(t.error_code)))
        .collect()
}

/// DescribeConfigs of `(type, name)` resources: the codes, and each result's `retention.ms`.
fn describe_configs(
    c: &mut RawClient,
    resources: &[(wire::ConfigResourceType, &str)],
) -> (ResourceCodes, Vec<Option<String>>) {
    let resources = resources.iter().map(|(kind, name)| {
        obj!(wire::DescribeConfigsResourceT {
            resource_type: *kind,
            resource_name: name.to_string(),
        })
    });
    let request = obj!(wire::DescribeConfigsRequestT {
        resources: Some(resources.collect()),
    });
    let reply = call(
        c,
        ApiKey::DescribeConfigs,
        |fbb| request.pack(fbb).as_union_value(),
        &[],
    );
    let r = flatbuffers::root::<wire::DescribeConfigsResponse>(&reply.message)
        .unwrap()
        .unpack();
    let (mut codes, mut retention) = (Vec::new(), Vec::new());
    for result in r.results.unwrap_or_default() {
        codes.push((result.resource_name, ErrorCode::from_u16(result.error_code)));
        let configs = result.configs.unwrap_or_default().into_iter();
        let found = configs.into_iter().find(|e| e.name == "retention.ms");
        retention.push(found.and_then(|e| e.value));
    }
    (codes, retention)
}

fn alter_retention(c: &mut RawClient, topics: &[&str], retention_ms: &str) -> ResourceCodes {
    let resources = topics.iter().map(|t| {
        obj!(wire::AlterConfigsResourceT {
            resource_name: t.to_string(),
            configs: Some(vec![obj!(wire::AlterableConfigT {
                name: "retention.ms".to_string(),
                value: Some(retention_ms.to_string()),
            })]),
        })
    });
    let request = obj!(wire::AlterConfigsRequestT {
        resources: Some(resources.collect()),
    });
    let reply = call(
        c,
        ApiKey::AlterConfigs,
        |fbb| request.pack(fbb).as_union_value(),
        &[],
    );
    let r = flatbuffers::root::<wire::AlterConfigsResponse>(&reply.message)
        .unwrap()
        .unpack();
    let results = r.results.unwrap_or_default().into_iter();
    results
        .map(|t| (t.resource_name, ErrorCode::from_u16(t.error_code)))
        .collect()
}

fn named(expected: &[(&str, ErrorCode)]) -> ResourceCodes {
    let each = expected.iter().map(|(t, code)| (t.to_string(), *code));
    each.collect()
}

/// CreatePartitions, DescribeConfigs and AlterConfigs answer per resource too: a topic the
/// principal may not alter or describe gets `TopicAuthorizationFailed`, broker configs without
/// the cluster's DescribeConfigs `ClusterAuthorizationFailed`, and the others are served.
#[test]
fn admin_requests_answer_per_resource() {
    let dir = tempfile::tempdir().unwrap();
    let broker = broker(dir.path());
    let mut c = RawClient::connect(broker.addr());
    assert_eq!(c.create_topic("app.a", 1, &[]), ErrorCode::None);
    assert_eq!(c.create_topic("secret", 1, &[]), ErrorCode::None);
    let ok = ErrorCode::None;

    let answers = create_partitions(&mut c, &["app.a", "secret"], 2);
    assert_eq!(answers, named(&[("app.a", ok), ("secret", REFUSED)]));
    assert_eq!(c.placement("app.a").1.len(), 2, "app.a grew");
    assert_eq!(c.placement("secret").1.len(), 1, "secret did not");

    let answers = alter_retention(&mut c, &["secret", "app.a"], "3600000");
    assert_eq!(answers, named(&[("secret", REFUSED), ("app.a", ok)]));

    let topic = wire::ConfigResourceType::Topic;
    let broker_configs = wire::ConfigResourceType::Broker;
    let resources = [(topic, "app.a"), (topic, "secret"), (broker_configs, "0")];
    let (answers, retention) = describe_configs(&mut c, &resources);
    let cluster = ErrorCode::ClusterAuthorizationFailed;
    let expected = [("app.a", ok), ("secret", REFUSED), ("0", cluster)];
    assert_eq!(answers, named(&expected));
    assert_eq!(retention, [Some("3600000".to_string()), None, None]);

    let count = |api| topic_refusals(&broker, api);
    for api in ["CreatePartitions", "AlterConfigs", "DescribeConfigs"] {
        assert_eq!(count(api), 1, "{api}: one refused topic");
    }
}
