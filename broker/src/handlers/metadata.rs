//! ApiVersions and Metadata, answered by any core from its copy of the metadata.

use std::rc::Rc;

use borges_protocol::frame::{Frame, FrameHeader};
use borges_protocol::{wire, ApiKey, ErrorCode};
use flatbuffers::FlatBufferBuilder;

use crate::acl::check as acl_check;
use crate::failure::Failure;
use crate::metadata::{BrokerState, MetadataImage, TopicRecord, NO_LEADER};
use crate::shard::Shard;
use crate::wire as w;

/// Serves ApiVersions: every API this broker serves with its version range.
pub async fn api_versions(shard: Rc<Shard>, frame: Frame) -> Option<w::Response> {
    Some(api_versions_response(&shard, &frame.header, None))
}

/// The answer to an ApiVersions request this broker cannot serve as sent (a version it does not
/// support, or a message that does not verify): the version-0 body (header `api_version` 0)
/// with `failure`'s code and the full list of supported APIs, as Kafka answers.
pub fn api_versions_v0(shard: &Shard, header: &FrameHeader, failure: &Failure) -> w::Response {
    let mut v0 = *header;
    v0.api_version = 0;
    api_versions_response(shard, &v0, Some(failure))
}

fn api_versions_response(
    shard: &Shard,
    header: &FrameHeader,
    failure: Option<&Failure>,
) -> w::Response {
    let mut fbb = FlatBufferBuilder::with_capacity(256);
    let ranges: Vec<wire::ApiVersionRange> = ApiKey::ALL
        .iter()
        .filter(|k| super::served(**k))
        .map(|k| wire::ApiVersionRange::new(*k as u16, k.min_version(), k.max_version()))
        .collect();
    let ranges = fbb.create_vector(&ranges);
    let version = fbb.create_string(env!("CARGO_PKG_VERSION"));
    let error_message = w::message(&mut fbb, failure);
    let root = wire::ApiVersionsResponse::create(
        &mut fbb,
        &wire::ApiVersionsResponseArgs {
            error_code: w::code(failure),
            error_message,
            api_versions: Some(ranges),
            broker_software_version: Some(version),
            frame_size_bytes_max: shard.config().limits.frame_size_bytes_max,
        },
    );
    fbb.finish(root, None);
    w::response(header, fbb.finished_data(), Vec::new())
}

/// The metadata of a topic that does not exist: `InvalidTopicName` when its name breaks the
/// rules, else `UnknownTopicOrPartition`.
fn unknown_topic<'a>(
    fbb: &mut FlatBufferBuilder<'a>,
    name: &str,
) -> flatbuffers::WIPOffset<wire::TopicMetadata<'a>> {
    let failure = crate::partition::unknown_topic(name);
    let n = fbb.create_string(name);
    let m = w::message(fbb, Some(&failure));
    wire::TopicMetadata::create(
        fbb,
        &wire::TopicMetadataArgs {
            name: Some(n),
            error_code: failure.code as u16,
            error_message: m,
            ..Default::default()
        },
    )
}

/// The metadata of a topic the principal may not describe: `TopicAuthorizationFailed`
/// whether it exists or not (nothing said about it); counted as a refusal.
fn unauthorized_topic<'a>(
    shard: &Shard,
    fbb: &mut FlatBufferBuilder<'a>,
    name: &str,
) -> flatbuffers::WIPOffset<wire::TopicMetadata<'a>> {
    let topic = borges_protocol::acl::ResourceType::Topic;
    shard
        .metrics()
        .count_authorization_failure(ApiKey::Metadata, topic);
    let failure = Failure::new(
        ErrorCode::TopicAuthorizationFailed,
        format!("not authorized to Describe topic {name:?}"),
    );
    let n = fbb.create_string(name);
    let m = w::message(fbb, Some(&failure));
    wire::TopicMetadata::create(
        fbb,
        &wire::TopicMetadataArgs {
            name: Some(n),
            error_code: failure.code as u16,
            error_message: m,
            ..Default::default()
        },
    )
}

/// The host clients should use for this broker.
pub fn advertised_host(shard: &Shard) -> String {
    if let Some(h) = &shard.config().advertised_host {
        return h.clone();
    }
    shard
        .config()
        .listen
        .parse::<std::net::SocketAddr>()
        .map(|a| {
            if a.ip().is_unspecified() {
                "127.0.0.1".to_string()
            } else {
                a.ip().to_string()
            }
        })
        .unwrap_or_else(|_| "127.0.0.1".to_string())
}

/// Serves Metadata.
pub async fn metadata(shard: Rc<Shard>, frame: Frame, principal: Rc<str>) -> Option<w::Response> {
    let header = frame.header;
    let requested: Result<Option<Vec<String>>, Failure> =
        w::verify::<wire::MetadataRequest>(&frame.message).map(|req| {
            let names: Vec<String> = req
                .topics()
                .map(|t| t.iter().map(str::to_string).collect())
                .unwrap_or_default();
            if names.is_empty() && req.all_topics() {
                None
            } else {
                Some(names)
            }
        });
    let image = shard.image();
    let endpoints = shard.admission().endpoints();
    let broker_id = shard.config().broker_id;
    let host = advertised_host(&shard);
    let port = shard
        .config()
        .listen
        .parse::<std::net::SocketAddr>()
        .map_or(0, |a| a.port());
    let mut fbb = FlatBufferBuilder::with_capacity(1024);
    let requested = match requested {
        Ok(r) => r,
        Err(f) => {
            let message = w::message(&mut fbb, Some(&f));
            let root = wire::MetadataResponse::create(
                &mut fbb,
                &wire::MetadataResponseArgs {
                    error_code: f.code as u16,
                    error_message: message,
                    ..Default::default()
                },
            );
            fbb.finish(root, None);
            return Some(w::response(&header, fbb.finished_data(), Vec::new()));
        }
    };
    let cluster = shard.cluster_handle();
    let brokers = match &cluster {
        None => vec![single_broker(&mut fbb, &endpoints, &host, broker_id, port)],
        Some(_) => cluster_brokers(&mut fbb, &image),
    };
    let brokers = fbb.create_vector(&brokers);
    let single = cluster.is_none().then_some(broker_id);
    let authorizer = shard.authorizer();
    let may_describe = |name: &str| acl_check::may_describe_topic(&authorizer, &principal, name);
    let mut topics = Vec::new();
    match requested {
        None => {
            for t in image.topics.values().filter(|t| may_describe(&t.name)) {
                topics.push(topic(&mut fbb, t, single));
            }
        }
        Some(names) => {
            for name in names {
                match image.topics.get(&name) {
                    _ if !may_describe(&name) => {
                        topics.push(unauthorized_topic(&shard, &mut fbb, &name))
                    }
                    Some(t) => topics.push(topic(&mut fbb, t, single)),
                    None => topics.push(unknown_topic(&mut fbb, &name)),
                }
            }
        }
    }
    let topics = fbb.create_vector(&topics);
    let (cluster_id, controller_id) = match &cluster {
        None => (format!("{:032x}", image.cluster_id.0), broker_id),
        Some(c) => (c.cluster_id.clone(), c.controller_id().unwrap_or(-1)),
    };
    let cluster_id = fbb.create_string(&cluster_id);
    let root = wire::MetadataResponse::create(
        &mut fbb,
        &wire::MetadataResponseArgs {
            error_code: 0,
            error_message: None,
            cluster_id: Some(cluster_id),
            controller_id,
            brokers: Some(brokers),
            topics: Some(topics),
            metadata_epoch: image.revision as i64,
        },
    );
    fbb.finish(root, None);
    Some(w::response(&header, fbb.finished_data(), Vec::new()))
}

/// This broker alone, with every core's own port (single node).
fn single_broker<'a>(
    fbb: &mut FlatBufferBuilder<'a>,
    endpoints: &[crate::types::CoreEndpoint],
    host: &str,
    broker_id: i32,
    port: u16,
) -> flatbuffers::WIPOffset<wire::BrokerMetadata<'a>> {
    let cores: Vec<_> = endpoints
        .iter()
        .map(|e| core_endpoint(fbb, host, e.core, e.addr.port()))
        .collect();
    let cores = fbb.create_vector(&cores);
    let h = fbb.create_string(host);
    wire::BrokerMetadata::create(
        fbb,
        &wire::BrokerMetadataArgs {
            broker_id,
            host: Some(h),
            port,
            rack: None,
            cores: Some(cores),
        },
    )
}

fn core_endpoint<'a>(
    fbb: &mut FlatBufferBuilder<'a>,
    host: &str,
    core: u16,
    port: u16,
) -> flatbuffers::WIPOffset<wire::CoreEndpoint<'a>> {
    let h = fbb.create_string(host);
    wire::CoreEndpoint::create(
        fbb,
        &wire::CoreEndpointArgs {
            core_id: core,
            host: Some(h),
            port,
        },
    )
}

/// Every registered broker that is not fenced, with its per-core ports (cluster mode).
fn cluster_brokers<'a>(
    fbb: &mut FlatBufferBuilder<'a>,
    image: &MetadataImage,
) -> Vec<flatbuffers::WIPOffset<wire::BrokerMetadata<'a>>> {
    image
        .brokers
        .values()
        .filter(|b| b.state != BrokerState::Fenced)
        .map(|b| {
            let r = &b.registration;
            let cores: Vec<_> = r
                .cores
                .iter()
                .map(|c| core_endpoint(fbb, &r.host, c.core, c.port))
                .collect();
            let cores = fbb.create_vector(&cores);
            let h = fbb.create_string(&r.host);
            wire::BrokerMetadata::create(
                fbb,
                &wire::BrokerMetadataArgs {
                    broker_id: r.id,
                    host: Some(h),
                    port: r.port,
                    rack: None,
                    cores: Some(cores),
                },
            )
        })
        .collect()
}

/// A topic's metadata: on a single node (`single` = its broker id) it leads every partition;
/// in a cluster the image says who leads, the replicas and the ISR.
fn topic<'a>(
    fbb: &mut FlatBufferBuilder<'a>,
    t: &TopicRecord,
    single: Option<i32>,
) -> flatbuffers::WIPOffset<wire::TopicMetadata<'a>> {
    let parts: Vec<_> = t
        .partitions
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let (leader, replicas, isr) = match single {
                Some(id) => (id, vec![id], vec![id]),
                None => (p.leader, p.replicas.clone(), p.isr.clone()),
            };
            let replicas = fbb.create_vector(&replicas);
            let isr = fbb.create_vector(&isr);
            let leaderless = leader == NO_LEADER;
            let message =
                leaderless.then(|| fbb.create_string("no leader: no in-sync replica is running"));
            wire::PartitionMetadata::create(
                fbb,
                &wire::PartitionMetadataArgs {
                    partition: i as i32,
                    error_code: if leaderless {
                        ErrorCode::NotLeaderOrFollower as u16
                    } else {
                        0
                    },
                    error_message: message,
                    leader_id: leader,
                    leader_epoch: p.leader_epoch,
                    replicas: Some(replicas),
                    isr: Some(isr),
                    offline_replicas: None,
                    leader_core: p.core,
                },
            )
        })
        .collect();
    let parts = fbb.create_vector(&parts);
    let name = fbb.create_string(&t.name);
    let id = wire::Uuid::new(t.id.hi(), t.id.lo());
    wire::TopicMetadata::create(
        fbb,
        &wire::TopicMetadataArgs {
            name: Some(name),
            topic_id: Some(&id),
            error_code: 0,
            error_message: None,
            is_internal: t.internal,
            partitions: Some(parts),
        },
    )
}
