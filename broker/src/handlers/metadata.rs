//! ApiVersions and Metadata, answered by any core from its copy of the metadata.

use std::rc::Rc;

use borges_protocol::frame::Frame;
use borges_protocol::{wire, ApiKey, ErrorCode};
use flatbuffers::FlatBufferBuilder;

use crate::failure::Failure;
use crate::metadata::TopicRecord;
use crate::shard::Shard;
use crate::wire as w;

/// Serves ApiVersions: every API this broker serves with its version range.
pub async fn api_versions(shard: Rc<Shard>, frame: Frame) -> Option<w::Response> {
    let header = frame.header;
    // The request carries only informational fields; a malformed one is still answered.
    let _ = w::verify::<wire::ApiVersionsRequest>(&frame.message);
    let mut fbb = FlatBufferBuilder::with_capacity(256);
    let ranges: Vec<wire::ApiVersionRange> = ApiKey::ALL
        .iter()
        .filter(|k| super::served(**k))
        .map(|k| wire::ApiVersionRange::new(*k as u16, k.min_version(), k.max_version()))
        .collect();
    let ranges = fbb.create_vector(&ranges);
    let version = fbb.create_string(env!("CARGO_PKG_VERSION"));
    let root = wire::ApiVersionsResponse::create(
        &mut fbb,
        &wire::ApiVersionsResponseArgs {
            error_code: 0,
            error_message: None,
            api_versions: Some(ranges),
            broker_software_version: Some(version),
            frame_size_bytes_max: shard.config().limits.frame_size_bytes_max,
        },
    );
    fbb.finish(root, None);
    Some(w::response(&header, fbb.finished_data(), Vec::new()))
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
pub async fn metadata(shard: Rc<Shard>, frame: Frame) -> Option<w::Response> {
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
    let cores: Vec<_> = endpoints
        .iter()
        .map(|e| {
            let h = fbb.create_string(&host);
            wire::CoreEndpoint::create(
                &mut fbb,
                &wire::CoreEndpointArgs {
                    core_id: e.core,
                    host: Some(h),
                    port: e.addr.port(),
                },
            )
        })
        .collect();
    let cores = fbb.create_vector(&cores);
    let h = fbb.create_string(&host);
    let broker = wire::BrokerMetadata::create(
        &mut fbb,
        &wire::BrokerMetadataArgs {
            broker_id,
            host: Some(h),
            port,
            rack: None,
            cores: Some(cores),
        },
    );
    let brokers = fbb.create_vector(&[broker]);
    let mut topics = Vec::new();
    match requested {
        None => {
            for t in image.topics.values() {
                topics.push(topic(&mut fbb, t, broker_id));
            }
        }
        Some(names) => {
            for name in names {
                match image.topics.get(&name) {
                    Some(t) => topics.push(topic(&mut fbb, t, broker_id)),
                    None => {
                        let n = fbb.create_string(&name);
                        let m = fbb.create_string(&format!("topic {name:?} does not exist"));
                        topics.push(wire::TopicMetadata::create(
                            &mut fbb,
                            &wire::TopicMetadataArgs {
                                name: Some(n),
                                error_code: ErrorCode::UnknownTopicOrPartition as u16,
                                error_message: Some(m),
                                ..Default::default()
                            },
                        ));
                    }
                }
            }
        }
    }
    let topics = fbb.create_vector(&topics);
    let cluster = fbb.create_string(&format!("{:032x}", image.cluster_id.0));
    let root = wire::MetadataResponse::create(
        &mut fbb,
        &wire::MetadataResponseArgs {
            error_code: 0,
            error_message: None,
            cluster_id: Some(cluster),
            controller_id: broker_id,
            brokers: Some(brokers),
            topics: Some(topics),
            metadata_epoch: image.revision as i64,
        },
    );
    fbb.finish(root, None);
    Some(w::response(&header, fbb.finished_data(), Vec::new()))
}

fn topic<'a>(
    fbb: &mut FlatBufferBuilder<'a>,
    t: &TopicRecord,
    broker_id: i32,
) -> flatbuffers::WIPOffset<wire::TopicMetadata<'a>> {
    let parts: Vec<_> = t
        .partitions
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let replicas = fbb.create_vector(&[broker_id]);
            let isr = fbb.create_vector(&[broker_id]);
            wire::PartitionMetadata::create(
                fbb,
                &wire::PartitionMetadataArgs {
                    partition: i as i32,
                    error_code: 0,
                    error_message: None,
                    leader_id: broker_id,
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
