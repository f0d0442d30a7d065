//! Administrative APIs: CreateTopics, DeleteTopics, AlterConfigs and CreatePartitions go to the
//! controller (core 0); DescribeConfigs is answered from this core's metadata. Each checks its
//! resources against the ACLs here, on the connection's core, as Kafka does: a resource refused
//! is answered with its refusal (`TopicAuthorizationFailed`, or `ClusterAuthorizationFailed`
//! for broker configs) and only the others are served.

use std::rc::Rc;

use borges_protocol::acl::Operation;
use borges_protocol::frame::{Frame, FrameHeader};
use borges_protocol::{wire, ApiKey, ErrorCode};
use borges_replication::controller::{
    ConfigOp, ControllerRequest, NewTopic, Results, TopicCreated,
};
use flatbuffers::FlatBufferBuilder;
use futures_channel::oneshot;

use crate::acl::check::{self as acl_check, Need};
use crate::acl::Authorizer;
use crate::failure::Failure;
use crate::shard::Shard;
use crate::topic_config::{self, ConfigSource};
use crate::wire as w;

/// Serves the APIs the controller executes.
pub async fn controller_request(
    shard: Rc<Shard>,
    api: ApiKey,
    frame: Frame,
    principal: Rc<str>,
) -> Option<w::Response> {
    let header = frame.header;
    let from = &principal;
    Some(match api {
        ApiKey::CreateTopics => create_topics(&shard, &header, &frame, from).await,
        ApiKey::DeleteTopics => delete_topics(&shard, &header, &frame, from).await,
        ApiKey::AlterConfigs => alter_configs(&shard, &header, &frame, from).await,
        _ => create_partitions(&shard, &header, &frame, from).await,
    })
}

/// A response table with only a request-level error, for any admin API.
fn request_failed(header: &FrameHeader, api: ApiKey, f: &Failure) -> w::Response {
    let mut fbb = FlatBufferBuilder::with_capacity(128);
    let message = w::message(&mut fbb, Some(f));
    let code = f.code as u16;
    macro_rules! finish {
        ($t:ident, $args:ident) => {{
            let root = wire::$t::create(
                &mut fbb,
                &wire::$args {
                    error_code: code,
                    error_message: message,
                    ..Default::default()
                },
            );
            fbb.finish(root, None);
        }};
    }
    match api {
        ApiKey::CreateTopics => finish!(CreateTopicsResponse, CreateTopicsResponseArgs),
        ApiKey::DeleteTopics => finish!(DeleteTopicsResponse, DeleteTopicsResponseArgs),
        ApiKey::AlterConfigs => finish!(AlterConfigsResponse, AlterConfigsResponseArgs),
        ApiKey::DescribeConfigs => finish!(DescribeConfigsResponse, DescribeConfigsResponseArgs),
        _ => finish!(CreatePartitionsResponse, CreatePartitionsResponseArgs),
    }
    w::response(header, fbb.finished_data(), Vec::new())
}

/// Per topic of a CreateTopics, DeleteTopics or CreatePartitions request (in request order),
/// its refusal by the authorizer, if any; each refusal is counted.
fn refusals<'a>(
    shard: &Shard,
    principal: &str,
    api: ApiKey,
    names: impl Iterator<Item = &'a str>,
) -> Vec<Option<Failure>> {
    let authorizer = shard.authorizer();
    let need = |name| match api {
        ApiKey::CreateTopics => Need::CreateTopic(name),
        ApiKey::CreatePartitions => Need::Topic(Operation::Alter, name),
        _ => Need::Topic(Operation::Delete, name),
    };
    names
        .map(|name| refusal(shard, &authorizer, principal, api, &need(name)))
        .collect()
}

/// The authorizer's refusal of `need` to `principal` in an `api` request, if any; counted under
/// the resource type refused.
fn refusal(
    shard: &Shard,
    authorizer: &Authorizer,
    principal: &str,
    api: ApiKey,
    need: &Need<'_>,
) -> Option<Failure> {
    let refused = acl_check::allowed(authorizer, principal, need).err()?;
    if let Some(resource) = acl_check::refused_resource(refused.code) {
        shard.metrics().count_authorization_failure(api, resource);
    }
    Some(refused)
}

/// The answers in request order: each refusal, else the controller's next result.
fn merged<T>(
    refused: Vec<Option<Failure>>,
    served: Vec<Result<T, Failure>>,
) -> Vec<Result<T, Failure>> {
    let mut served = served.into_iter();
    let missing = || Failure::new(ErrorCode::UnknownServerError, "no controller result");
    refused
        .into_iter()
        .map(|r| match r {
            Some(f) => Err(f),
            None => served.next().unwrap_or_else(|| Err(missing())),
        })
        .collect()
}

/// Asks the controller for the `items` that `refused` lets through (nothing when none is
/// left) and merges its results with the refusals, in request order; `Err` when the
/// controller could not be asked.
async fn serve_allowed<I, T>(
    shard: &Rc<Shard>,
    refused: Vec<Option<Failure>>,
    items: Vec<I>,
    request: impl FnOnce(Vec<I>, oneshot::Sender<Results<T>>) -> ControllerRequest,
) -> Result<Results<T>, Failure> {
    let mut allowed = refused.iter().map(Option::is_none);
    let items: Vec<I> = (items.into_iter())
        .filter(|_| allowed.next() == Some(true))
        .collect();
    let served = match items.is_empty() {
        true => Vec::new(),
        false => shard.controller(|reply| request(items, reply)).await?,
    };
    Ok(merged(refused, served))
}

/// A CreateTopics request's topics and its validate_only.
fn parse_create(frame: &Frame) -> Result<(Vec<NewTopic>, bool), Failure> {
    w::verify::<wire::CreateTopicsRequest>(&frame.message).map(|req| {
        let topics: Vec<NewTopic> = req
            .topics()
            .iter()
            .flatten()
            .map(|t| NewTopic {
                name: t.name().to_string(),
                num_partitions: t.num_partitions(),
                replication_factor: t.replication_factor(),
                configs: t
                    .configs()
                    .iter()
                    .flatten()
                    .map(|c| (c.name().to_string(), c.value().map(str::to_string)))
                    .collect(),
            })
            .collect();
        (topics, req.validate_only())
    })
}

async fn create_topics(
    shard: &Rc<Shard>,
    header: &FrameHeader,
    frame: &Frame,
    principal: &str,
) -> w::Response {
    let parsed = parse_create(frame);
    let (topics, validate_only) = match parsed {
        Ok(p) => p,
        Err(f) => return request_failed(header, ApiKey::CreateTopics, &f),
    };
    let names: Vec<String> = topics.iter().map(|t| t.name.clone()).collect();
    let refused = refusals(
        shard,
        principal,
        ApiKey::CreateTopics,
        names.iter().map(|n| &**n),
    );
    let request = |topics, reply| ControllerRequest::CreateTopics {
        topics,
        validate_only,
        reply,
    };
    let results = match serve_allowed(shard, refused, topics, request).await {
        Ok(r) => r,
        Err(f) => return request_failed(header, ApiKey::CreateTopics, &f),
    };
    let mut fbb = FlatBufferBuilder::with_capacity(256);
    let items: Vec<_> = names
        .iter()
        .zip(results.iter())
        .map(|(name, r)| created_result(&mut fbb, shard, name, r))
        .collect();
    let items = fbb.create_vector(&items);
    let root = wire::CreateTopicsResponse::create(
        &mut fbb,
        &wire::CreateTopicsResponseArgs {
            error_code: 0,
            error_message: None,
            topics: Some(items),
        },
    );
    fbb.finish(root, None);
    w::response(header, fbb.finished_data(), Vec::new())
}

/// One topic's result; on success `configs` lists every topic config with its effective value
/// (the broker defaults included), as DescribeConfigs would.
fn created_result<'a>(
    fbb: &mut FlatBufferBuilder<'a>,
    shard: &Shard,
    name: &str,
    r: &Result<TopicCreated, Failure>,
) -> flatbuffers::WIPOffset<wire::CreatableTopicResult<'a>> {
    let f = r.as_ref().err();
    let message = w::message(fbb, f);
    let configs = r.as_ref().ok().map(|c| {
        let entries: Vec<_> = topic_config::effective(&c.configs, shard.config())
            .iter()
            .map(|(k, v, _)| {
                let k = fbb.create_string(k);
                let v = fbb.create_string(v);
                wire::ConfigEntry::create(
                    fbb,
                    &wire::ConfigEntryArgs {
                        name: Some(k),
                        value: Some(v),
                    },
                )
            })
            .collect();
        fbb.create_vector(&entries)
    });
    let name = fbb.create_string(name);
    let id = r
        .as_ref()
        .ok()
        .map(|c| wire::Uuid::new(c.id.hi(), c.id.lo()));
    wire::CreatableTopicResult::create(
        fbb,
        &wire::CreatableTopicResultArgs {
            name: Some(name),
            topic_id: id.as_ref(),
            error_code: w::code(f),
            error_message: message,
            num_partitions: r.as_ref().map_or(-1, |c| c.num_partitions),
            replication_factor: r.as_ref().map_or(-1, |c| c.replication_factor),
            configs,
        },
    )
}

async fn delete_topics(
    shard: &Rc<Shard>,
    header: &FrameHeader,
    frame: &Frame,
    principal: &str,
) -> w::Response {
    let names = match w::verify::<wire::DeleteTopicsRequest>(&frame.message) {
        Ok(req) => req
            .topic_names()
            .map(|n| n.iter().map(str::to_string).collect::<Vec<_>>())
            .unwrap_or_default(),
        Err(f) => return request_failed(header, ApiKey::DeleteTopics, &f),
    };
    let refused = refusals(
        shard,
        principal,
        ApiKey::DeleteTopics,
        names.iter().map(|n| &**n),
    );
    let request = |names, reply| ControllerRequest::DeleteTopics { names, reply };
    let results = match serve_allowed(shard, refused, names.clone(), request).await {
        Ok(r) => r,
        Err(f) => return request_failed(header, ApiKey::DeleteTopics, &f),
    };
    let mut fbb = FlatBufferBuilder::with_capacity(256);
    let items: Vec<_> = names
        .iter()
        .zip(results.iter())
        .map(|(name, r)| {
            let f = r.as_ref().err();
            let message = w::message(&mut fbb, f);
            let name = fbb.create_string(name);
            wire::DeletableTopicResult::create(
                &mut fbb,
                &wire::DeletableTopicResultArgs {
                    name: Some(name),
                    error_code: w::code(f),
                    error_message: message,
                },
            )
        })
        .collect();
    let items = fbb.create_vector(&items);
    let root = wire::DeleteTopicsResponse::create(
        &mut fbb,
        &wire::DeleteTopicsResponseArgs {
            error_code: 0,
            error_message: None,
            topics: Some(items),
        },
    );
    fbb.finish(root, None);
    w::response(header, fbb.finished_data(), Vec::new())
}

/// One AlterConfigs resource: its type, its name, and its operations or why it is refused.
type AlterResource = (
    wire::ConfigResourceType,
    String,
    Result<Vec<ConfigOp>, Failure>,
);
type AlterParsed = (Vec<AlterResource>, bool);

/// The request's resources with their operations, or why each is refused (by the ACLs of
/// `principal` first).
fn parse_alter(shard: &Shard, frame: &Frame, principal: &str) -> Result<AlterParsed, Failure> {
    let req = w::verify::<wire::AlterConfigsRequest>(&frame.message)?;
    let authorizer = shard.authorizer();
    let mut out = Vec::new();
    for r in req.resources().iter().flatten() {
        let (kind, name) = (r.resource_type(), r.resource_name());
        let need = acl_check::config_need(Operation::AlterConfigs, kind, name);
        let refused = refusal(shard, &authorizer, principal, ApiKey::AlterConfigs, &need);
        let ops = if let Some(f) = refused {
            Err(f)
        } else if r.resource_type() != wire::ConfigResourceType::Topic {
            Err(Failure::new(
                ErrorCode::InvalidRequest,
                "only topic configs can be altered; broker settings live in the config file",
            ))
        } else {
            r.configs()
                .iter()
                .flatten()
                .map(|c| match c.op() {
                    wire::AlterConfigOp::Set => c
                        .value()
                        .map(|v| ConfigOp::Set(c.name().to_string(), v.to_string()))
                        .ok_or_else(|| {
                            Failure::new(
                                ErrorCode::InvalidConfig,
                                format!("{}: a SET needs a value", c.name()),
                            )
                        }),
                    wire::AlterConfigOp::Delete => Ok(ConfigOp::Delete(c.name().to_string())),
                    _ => Err(Failure::new(
                        ErrorCode::InvalidRequest,
                        "unknown config operation",
                    )),
                })
                .collect()
        };
        out.push((r.resource_type(), r.resource_name().to_string(), ops));
    }
    Ok((out, req.validate_only()))
}

async fn alter_configs(
    shard: &Rc<Shard>,
    header: &FrameHeader,
    frame: &Frame,
    principal: &str,
) -> w::Response {
    let (resources, validate_only) = match parse_alter(shard, frame, principal) {
        Ok(p) => p,
        Err(f) => return request_failed(header, ApiKey::AlterConfigs, &f),
    };
    let valid: Vec<(String, Vec<ConfigOp>)> = resources
        .iter()
        .filter_map(|(_, n, ops)| ops.as_ref().ok().map(|o| (n.clone(), o.clone())))
        .collect();
    let asked = valid.len();
    let altered = match asked {
        0 => Ok(Vec::new()),
        _ => {
            let request = |reply| ControllerRequest::AlterConfigs {
                resources: valid,
                validate_only,
                reply,
            };
            shard.controller(request).await
        }
    };
    let results = match altered {
        Ok(r) => {
            strict_assert_eq!(r.len(), asked, "one controller result per resource");
            r.into_iter()
        }
        Err(f) => return request_failed(header, ApiKey::AlterConfigs, &f),
    };
    alter_configs_response(header, &resources, results)
}

/// The AlterConfigs answer: per resource its refusal, else the controller's next result.
fn alter_configs_response(
    header: &FrameHeader,
    resources: &[AlterResource],
    mut results: impl Iterator<Item = Result<(), Failure>>,
) -> w::Response {
    let mut fbb = FlatBufferBuilder::with_capacity(256);
    let items: Vec<_> = resources
        .iter()
        .map(|(ty, name, ops)| {
            let r: Result<(), Failure> = match ops {
                Err(f) => Err(f.clone()),
                Ok(_) => results.next().unwrap_or_else(|| {
                    Err(Failure::new(
                        ErrorCode::UnknownServerError,
                        "missing result",
                    ))
                }),
            };
            let f = r.as_ref().err();
            let message = w::message(&mut fbb, f);
            let name = fbb.create_string(name);
            wire::AlterConfigsResourceResult::create(
                &mut fbb,
                &wire::AlterConfigsResourceResultArgs {
                    error_code: w::code(f),
                    error_message: message,
                    resource_type: *ty,
                    resource_name: Some(name),
                },
            )
        })
        .collect();
    let items = fbb.create_vector(&items);
    let root = wire::AlterConfigsResponse::create(
        &mut fbb,
        &wire::AlterConfigsResponseArgs {
            error_code: 0,
            error_message: None,
            results: Some(items),
        },
    );
    fbb.finish(root, None);
    w::response(header, fbb.finished_data(), Vec::new())
}

async fn create_partitions(
    shard: &Rc<Shard>,
    header: &FrameHeader,
    frame: &Frame,
    principal: &str,
) -> w::Response {
    let parsed = w::verify::<wire::CreatePartitionsRequest>(&frame.message).map(|req| {
        let topics: Vec<(String, i32)> = req
            .topics()
            .iter()
            .flatten()
            .map(|t| (t.name().to_string(), t.count()))
            .collect();
        (topics, req.validate_only())
    });
    let (topics, validate_only) = match parsed {
        Ok(p) => p,
        Err(f) => return request_failed(header, ApiKey::CreatePartitions, &f),
    };
    let names: Vec<String> = topics.iter().map(|t| t.0.clone()).collect();
    let api = ApiKey::CreatePartitions;
    let refused = refusals(shard, principal, api, names.iter().map(|n| &**n));
    let request = |topics, reply| ControllerRequest::CreatePartitions {
        topics,
        validate_only,
        reply,
    };
    let results = match serve_allowed(shard, refused, topics, request).await {
        Ok(r) => r,
        Err(f) => return request_failed(header, api, &f),
    };
    create_partitions_response(header, &names, &results)
}

fn create_partitions_response(
    header: &FrameHeader,
    names: &[String],
    results: &[Result<(), Failure>],
) -> w::Response {
    let mut fbb = FlatBufferBuilder::with_capacity(256);
    let items: Vec<_> = names
        .iter()
        .zip(results.iter())
        .map(|(name, r)| {
            let f = r.as_ref().err();
            let message = w::message(&mut fbb, f);
            let name = fbb.create_string(name);
            wire::CreatePartitionsTopicResult::create(
                &mut fbb,
                &wire::CreatePartitionsTopicResultArgs {
                    name: Some(name),
                    error_code: w::code(f),
                    error_message: message,
                },
            )
        })
        .collect();
    let items = fbb.create_vector(&items);
    let root = wire::CreatePartitionsResponse::create(
        &mut fbb,
        &wire::CreatePartitionsResponseArgs {
            error_code: 0,
            error_message: None,
            results: Some(items),
        },
    );
    fbb.finish(root, None);
    w::response(header, fbb.finished_data(), Vec::new())
}

/// The effective configs of one DescribeConfigs resource, or why there are none.
fn resource_configs(
    shard: &Shard,
    image: &crate::metadata::MetadataImage,
    kind: wire::ConfigResourceType,
    name: &str,
) -> (Option<Failure>, Vec<(&'static str, String, ConfigSource)>) {
    match kind {
        wire::ConfigResourceType::Topic => match image.topics.get(name) {
            Some(t) => (None, topic_config::effective(&t.configs, shard.config())),
            None => (Some(crate::partition::unknown_topic(name)), Vec::new()),
        },
        wire::ConfigResourceType::Broker => (
            None,
            topic_config::effective(&Default::default(), shard.config()),
        ),
        _ => (
            Some(Failure::new(
                ErrorCode::InvalidRequest,
                "unknown resource type",
            )),
            Vec::new(),
        ),
    }
}

/// Serves DescribeConfigs from this core's metadata; a resource `principal` may not describe
/// is answered with its refusal.
pub async fn describe_configs(
    shard: Rc<Shard>,
    frame: Frame,
    principal: Rc<str>,
) -> Option<w::Response> {
    let header = frame.header;
    let req = match w::verify::<wire::DescribeConfigsRequest>(&frame.message) {
        Ok(r) => r,
        Err(f) => return Some(request_failed(&header, ApiKey::DescribeConfigs, &f)),
    };
    let authorizer = shard.authorizer();
    let image = shard.image();
    let include_docs = req.include_documentation();
    let mut fbb = FlatBufferBuilder::with_capacity(1024);
    let mut results = Vec::new();
    for r in req.resources().iter().flatten() {
        let name = r.resource_name().to_string();
        let wanted: Option<Vec<String>> = r
            .config_names()
            .map(|v| v.iter().map(str::to_string).collect())
            .filter(|v: &Vec<String>| !v.is_empty());
        let need = acl_check::config_need(Operation::DescribeConfigs, r.resource_type(), &name);
        let api = ApiKey::DescribeConfigs;
        let refused = refusal(&shard, &authorizer, &principal, api, &need);
        let (failure, entries) = match refused {
            Some(f) => (Some(f), Vec::new()),
            None => resource_configs(&shard, &image, r.resource_type(), &name),
        };
        let broker = r.resource_type() == wire::ConfigResourceType::Broker;
        let entries: Vec<_> = entries
            .into_iter()
            .filter(|(n, _, _)| wanted.as_ref().is_none_or(|w| w.iter().any(|x| x == n)))
            .map(|(n, v, source)| {
                let doc = include_docs
                    .then(|| topic_config::doc(n))
                    .flatten()
                    .map(|d| fbb.create_string(d));
                let n = fbb.create_string(n);
                let v = fbb.create_string(&v);
                wire::DescribeConfigsEntry::create(
                    &mut fbb,
                    &wire::DescribeConfigsEntryArgs {
                        name: Some(n),
                        value: Some(v),
                        read_only: broker,
                        source: match (broker, source) {
                            (true, _) => wire::ConfigSource::BrokerConfig,
                            (false, ConfigSource::Topic) => wire::ConfigSource::TopicConfig,
                            (false, ConfigSource::Default) => wire::ConfigSource::Default,
                        },
                        is_sensitive: false,
                        documentation: doc,
                    },
                )
            })
            .collect();
        let entries = fbb.create_vector(&entries);
        let message = w::message(&mut fbb, failure.as_ref());
        let name = fbb.create_string(&name);
        results.push(wire::DescribeConfigsResult::create(
            &mut fbb,
            &wire::DescribeConfigsResultArgs {
                error_code: w::code(failure.as_ref()),
                error_message: message,
                resource_type: r.resource_type(),
                resource_name: Some(name),
                configs: Some(entries),
            },
        ));
    }
    let results = fbb.create_vector(&results);
    let root = wire::DescribeConfigsResponse::create(
        &mut fbb,
        &wire::DescribeConfigsResponseArgs {
            error_code: 0,
            error_message: None,
            results: Some(results),
        },
    );
    fbb.finish(root, None);
    Some(w::response(&header, fbb.finished_data(), Vec::new()))
}
