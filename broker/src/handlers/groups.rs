//! Consumer-group APIs. Each group request goes to the group's coordinator core (locally or by
//! message); FindCoordinator tells clients which core that is; ListGroups asks every core.

use std::collections::{BTreeMap, BTreeSet};
use std::rc::Rc;

use borges_protocol::acl::{Operation, ResourceType};
use borges_protocol::frame::{Frame, FrameHeader};
use borges_protocol::{wire, ApiKey, ErrorCode};
use flatbuffers::{FlatBufferBuilder, WIPOffset};

use crate::failure::Failure;
use crate::groups::assignor::Assignment;
use crate::groups::coordinator::{
    self, check_group_id, CommitItem, GroupRequest, GroupResponse, GroupView,
};
use crate::groups::state::{Committed, Heartbeat};
use crate::shard::Shard;
use crate::wire as w;

/// Serves a group API.
pub async fn handle(
    shard: Rc<Shard>,
    api: ApiKey,
    frame: Frame,
    (peer, principal): (Rc<str>, Rc<str>),
) -> Option<w::Response> {
    let header = frame.header;
    let mut fbb = FlatBufferBuilder::with_capacity(512);
    let result = match api {
        ApiKey::FindCoordinator => find_coordinator(&shard, &frame, &mut fbb),
        ApiKey::ConsumerGroupHeartbeat => heartbeat(&shard, &frame, &peer, &mut fbb).await,
        ApiKey::OffsetCommit => offset_commit(&shard, &frame, &principal, &mut fbb).await,
        ApiKey::OffsetFetch => offset_fetch(&shard, &frame, &principal, &mut fbb).await,
        ApiKey::ListGroups => list_groups(&shard, &frame, &principal, &mut fbb).await,
        ApiKey::DescribeGroups => describe_groups(&shard, &frame, &mut fbb).await,
        _ => delete_groups(&shard, &frame, &mut fbb).await,
    };
    Some(match result {
        Ok(()) => w::response(&header, fbb.finished_data(), Vec::new()),
        Err(f) => request_failed(&header, api, &f),
    })
}

fn unexpected() -> Failure {
    Failure::new(
        ErrorCode::UnknownServerError,
        "unexpected coordinator answer",
    )
}

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
        ApiKey::FindCoordinator => finish!(FindCoordinatorResponse, FindCoordinatorResponseArgs),
        ApiKey::ConsumerGroupHeartbeat => {
            finish!(
                ConsumerGroupHeartbeatResponse,
                ConsumerGroupHeartbeatResponseArgs
            )
        }
        ApiKey::OffsetCommit => finish!(OffsetCommitResponse, OffsetCommitResponseArgs),
        ApiKey::OffsetFetch => finish!(OffsetFetchResponse, OffsetFetchResponseArgs),
        ApiKey::ListGroups => finish!(ListGroupsResponse, ListGroupsResponseArgs),
        ApiKey::DescribeGroups => finish!(DescribeGroupsResponse, DescribeGroupsResponseArgs),
        _ => finish!(DeleteGroupsResponse, DeleteGroupsResponseArgs),
    }
    w::response(header, fbb.finished_data(), Vec::new())
}

fn topic_partitions<'a>(
    fbb: &mut FlatBufferBuilder<'a>,
    a: &Assignment,
) -> WIPOffset<flatbuffers::Vector<'a, flatbuffers::ForwardsUOffset<wire::TopicPartitions<'a>>>> {
    let items: Vec<_> = a
        .iter()
        .map(|(t, ps)| {
            let ps: Vec<i32> = ps.iter().copied().collect();
            let ps = fbb.create_vector(&ps);
            let t = fbb.create_string(t);
            wire::TopicPartitions::create(
                fbb,
                &wire::TopicPartitionsArgs {
                    topic: Some(t),
                    partitions: Some(ps),
                },
            )
        })
        .collect();
    fbb.create_vector(&items)
}

fn parse_assignment(
    v: Option<flatbuffers::Vector<'_, flatbuffers::ForwardsUOffset<wire::TopicPartitions<'_>>>>,
) -> Option<Assignment> {
    v.map(|v| {
        let mut a: Assignment = BTreeMap::new();
        for tp in v.iter() {
            let set: BTreeSet<i32> = tp.partitions().iter().flatten().collect();
            if !set.is_empty() {
                a.entry(tp.topic().to_string()).or_default().extend(set);
            }
        }
        a
    })
}

/// Cluster mode: the coordinator is the leader of the group's offsets partition, on its
/// owning core there: (core, port, broker id, host).
fn cluster_coordinator(
    image: &crate::metadata::MetadataImage,
    partition: u32,
) -> Result<(usize, u16, i32, String), Failure> {
    let unavailable = |m: &str| Failure::new(ErrorCode::CoordinatorNotAvailable, m.to_string());
    let rec = image
        .topics
        .get(crate::metadata::CONSUMER_OFFSETS_TOPIC)
        .and_then(|t| t.partitions.get(partition as usize))
        .ok_or_else(|| unavailable("the offsets topic does not exist yet"))?;
    let broker = image
        .brokers
        .get(&rec.leader)
        .ok_or_else(|| unavailable("the offsets partition has no leader"))?;
    let r = &broker.registration;
    let port = r
        .cores
        .iter()
        .find(|c| c.core == rec.core)
        .map(|c| c.port)
        .ok_or_else(|| unavailable("the leader did not register that core"))?;
    Ok((usize::from(rec.core), port, r.id, r.host.clone()))
}

fn find_coordinator(
    shard: &Rc<Shard>,
    frame: &Frame,
    fbb: &mut FlatBufferBuilder<'_>,
) -> Result<(), Failure> {
    let req = w::verify::<wire::FindCoordinatorRequest>(&frame.message)?;
    let image = shard.image();
    let endpoints = shard.admission().endpoints();
    let host = super::metadata::advertised_host(shard);
    let keys: Vec<String> = req.keys().iter().flatten().map(str::to_string).collect();
    let items: Vec<_> = keys
        .iter()
        .map(|key| {
            let found = check_group_id(key)
                .and_then(|_| coordinator::coordinator_core(&image, key))
                .and_then(|(c, p)| match shard.cluster_handle() {
                    None => endpoints
                        .get(c)
                        .map(|e| (c, e.addr.port(), shard.config().broker_id, host.clone()))
                        .ok_or_else(|| {
                            Failure::new(ErrorCode::CoordinatorNotAvailable, "core not serving yet")
                        }),
                    Some(_) => cluster_coordinator(&image, p),
                });
            let f = found.as_ref().err();
            let message = w::message(fbb, f);
            let k = fbb.create_string(key);
            let (core_id, port, node_id, h) =
                found.as_ref().map_or((0, 0, -1, ""), |(c, p, n, h)| {
                    (*c as u16, *p, *n, h.as_str())
                });
            let h = fbb.create_string(h);
            wire::Coordinator::create(
                fbb,
                &wire::CoordinatorArgs {
                    key: Some(k),
                    node_id,
                    host: Some(h),
                    port,
                    core_id,
                    error_code: w::code(f),
                    error_message: message,
                },
            )
        })
        .collect();
    let items = fbb.create_vector(&items);
    let root = wire::FindCoordinatorResponse::create(
        fbb,
        &wire::FindCoordinatorResponseArgs {
            error_code: 0,
            error_message: None,
            coordinators: Some(items),
        },
    );
    fbb.finish(root, None);
    Ok(())
}

async fn heartbeat(
    shard: &Rc<Shard>,
    frame: &Frame,
    peer: &str,
    fbb: &mut FlatBufferBuilder<'_>,
) -> Result<(), Failure> {
    let (group, hb) = {
        let req = w::verify::<wire::ConsumerGroupHeartbeatRequest>(&frame.message)?;
        (
            req.group_id().to_string(),
            Heartbeat {
                member_id: req.member_id().unwrap_or_default().to_string(),
                member_epoch: req.member_epoch(),
                instance_id: req.instance_id().map(str::to_string),
                rack_id: req.rack_id().map(str::to_string),
                client_id: req.client_id().unwrap_or_default().to_string(),
                client_host: format!("/{peer}"),
                rebalance_timeout_ms: req.rebalance_timeout_ms(),
                session_timeout_ms: req.session_timeout_ms(),
                subscribed_topics: req
                    .subscribed_topic_names()
                    .map(|v| v.iter().map(str::to_string).collect()),
                owned: parse_assignment(req.owned_partitions()),
            },
        )
    };
    let reply = match shard
        .group(
            &group,
            GroupRequest::Heartbeat {
                group: group.clone(),
                heartbeat: hb,
            },
        )
        .await?
    {
        GroupResponse::Heartbeat(r) => r,
        _ => Err(unexpected()),
    };
    let (failure, reply) = match reply {
        Ok(r) => (None, Some(r)),
        Err(f) => (Some(f), None),
    };
    let message = w::message(fbb, failure.as_ref());
    let member = reply.as_ref().map(|r| fbb.create_string(&r.member_id));
    let assignment = reply.as_ref().map(|r| topic_partitions(fbb, &r.assignment));
    let root = wire::ConsumerGroupHeartbeatResponse::create(
        fbb,
        &wire::ConsumerGroupHeartbeatResponseArgs {
            error_code: w::code(failure.as_ref()),
            error_message: message,
            member_id: member,
            member_epoch: reply.as_ref().map_or(-1, |r| r.member_epoch),
            heartbeat_interval_ms: reply
                .as_ref()
                .map_or(shard.config().groups.heartbeat_interval_ms as i32, |r| {
                    r.heartbeat_interval_ms
                }),
            assignment,
        },
    );
    fbb.finish(root, None);
    Ok(())
}

/// The coordinator's answer per item; a refusal of the whole commit (a fenced member, ...)
/// answers every item.
async fn commit(
    shard: &Rc<Shard>,
    group: String,
    member_id: String,
    member_epoch: i32,
    items: Vec<CommitItem>,
) -> Result<Vec<Option<Failure>>, Failure> {
    let count = items.len();
    let request = GroupRequest::Commit {
        group: group.clone(),
        member_id,
        member_epoch,
        items,
    };
    Ok(match shard.group(&group, request).await? {
        GroupResponse::Commit(Ok(answers)) => answers,
        GroupResponse::Commit(Err(f)) => vec![Some(f); count],
        _ => vec![Some(unexpected()); count],
    })
}

/// Commits the offsets of the topics `principal` may Read (the group's Read was checked
/// before dispatch); each partition of another topic is answered `TopicAuthorizationFailed`.
async fn offset_commit(
    shard: &Rc<Shard>,
    frame: &Frame,
    principal: &str,
    fbb: &mut FlatBufferBuilder<'_>,
) -> Result<(), Failure> {
    let gate = shard.topic_gate(principal, ApiKey::OffsetCommit, Operation::Read);
    let mut refused = Vec::new();
    let (group, member_id, member_epoch, items) = {
        let req = w::verify::<wire::OffsetCommitRequest>(&frame.message)?;
        let mut items = Vec::new();
        for t in req.topics().iter().flatten() {
            if let Err(f) = gate.check(t.name()) {
                let parts = t.partitions().into_iter().flatten();
                refused.extend(parts.map(|p| ((t.name().to_string(), p.partition()), f.clone())));
                continue;
            }
            for p in t.partitions().iter().flatten() {
                items.push(CommitItem {
                    topic: t.name().to_string(),
                    partition: p.partition(),
                    offset: p.committed_offset(),
                    leader_epoch: p.committed_leader_epoch(),
                    metadata: p.committed_metadata().map(str::to_string),
                });
            }
        }
        (
            req.group_id().to_string(),
            req.member_id().unwrap_or_default().to_string(),
            req.member_epoch(),
            items,
        )
    };
    drop(gate);
    let keys: Vec<(String, i32)> = items
        .iter()
        .map(|i| (i.topic.clone(), i.partition))
        .collect();
    let per_item = match items.is_empty() {
        true => Vec::new(),
        false => commit(shard, group, member_id, member_epoch, items).await?,
    };
    let mut by_topic: BTreeMap<String, Vec<(i32, Option<Failure>)>> = BTreeMap::new();
    let refused = refused.into_iter().map(|(key, f)| (key, Some(f)));
    for ((t, p), f) in keys.into_iter().zip(per_item).chain(refused) {
        by_topic.entry(t).or_default().push((p, f));
    }
    let topics: Vec<_> = by_topic
        .into_iter()
        .map(|(t, parts)| {
            let parts: Vec<_> = parts
                .into_iter()
                .map(|(p, f)| {
                    let message = w::message(fbb, f.as_ref());
                    wire::OffsetCommitPartitionResponse::create(
                        fbb,
                        &wire::OffsetCommitPartitionResponseArgs {
                            partition: p,
                            error_code: w::code(f.as_ref()),
                            error_message: message,
                        },
                    )
                })
                .collect();
            let parts = fbb.create_vector(&parts);
            let name = fbb.create_string(&t);
            wire::OffsetCommitTopicResponse::create(
                fbb,
                &wire::OffsetCommitTopicResponseArgs {
                    name: Some(name),
                    partitions: Some(parts),
                },
            )
        })
        .collect();
    let topics = fbb.create_vector(&topics);
    let root = wire::OffsetCommitResponse::create(
        fbb,
        &wire::OffsetCommitResponseArgs {
            error_code: 0,
            error_message: None,
            topics: Some(topics),
        },
    );
    fbb.finish(root, None);
    Ok(())
}

/// A topic's answers in OffsetFetch: (partition, committed offset, error).
type FetchedTopics = BTreeMap<String, Vec<(i32, Option<Committed>, ErrorCode)>>;

async fn offset_fetch(
    shard: &Rc<Shard>,
    frame: &Frame,
    principal: &str,
    fbb: &mut FlatBufferBuilder<'_>,
) -> Result<(), Failure> {
    let (group, topics) = {
        let req = w::verify::<wire::OffsetFetchRequest>(&frame.message)?;
        let topics = req.topics().map(|v| {
            v.iter()
                .map(|tp| {
                    (
                        tp.topic().to_string(),
                        tp.partitions().iter().flatten().collect(),
                    )
                })
                .collect::<Vec<(String, Vec<i32>)>>()
        });
        (req.group_id().to_string(), topics)
    };
    let every_topic = topics.is_none();
    let request = GroupRequest::Fetch {
        group: group.clone(),
        topics,
    };
    let found = match shard.group(&group, request).await? {
        GroupResponse::Fetch(r) => r?,
        _ => return Err(unexpected()),
    };
    // Kafka (KafkaApis.handleOffsetFetchRequest): a topic named in the request that the
    // principal may not Describe is answered TopicAuthorizationFailed on each partition, with
    // no offset; asked for every topic, such topics are left out.
    let authorizer = shard.authorizer();
    let mut by_topic = FetchedTopics::new();
    for (t, p, c) in found {
        let answer = match crate::acl::check::may_describe_topic(&authorizer, principal, &t) {
            true => (p, c, ErrorCode::None),
            false if every_topic => continue,
            false => {
                let metrics = shard.metrics();
                metrics.count_authorization_failure(ApiKey::OffsetFetch, ResourceType::Topic);
                (p, None, ErrorCode::TopicAuthorizationFailed)
            }
        };
        by_topic.entry(t).or_default().push(answer);
    }
    offset_fetch_response(fbb, by_topic);
    Ok(())
}

fn offset_fetch_response(fbb: &mut FlatBufferBuilder<'_>, by_topic: FetchedTopics) {
    let topics: Vec<_> = by_topic
        .into_iter()
        .map(|(t, parts)| {
            let parts: Vec<_> = parts
                .into_iter()
                .map(|(p, c, code)| {
                    let metadata = c.as_ref().map(|c| fbb.create_string(&c.metadata));
                    wire::OffsetFetchPartitionResponse::create(
                        fbb,
                        &wire::OffsetFetchPartitionResponseArgs {
                            partition: p,
                            committed_offset: c.as_ref().map_or(-1, |c| c.offset),
                            committed_leader_epoch: c.as_ref().map_or(-1, |c| c.leader_epoch),
                            metadata,
                            error_code: code as u16,
                            error_message: None,
                        },
                    )
                })
                .collect();
            let parts = fbb.create_vector(&parts);
            let name = fbb.create_string(&t);
            wire::OffsetFetchTopicResponse::create(
                fbb,
                &wire::OffsetFetchTopicResponseArgs {
                    name: Some(name),
                    partitions: Some(parts),
                },
            )
        })
        .collect();
    let topics = fbb.create_vector(&topics);
    let root = wire::OffsetFetchResponse::create(
        fbb,
        &wire::OffsetFetchResponseArgs {
            error_code: 0,
            error_message: None,
            topics: Some(topics),
        },
    );
    fbb.finish(root, None);
}

async fn list_groups(
    shard: &Rc<Shard>,
    frame: &Frame,
    principal: &str,
    fbb: &mut FlatBufferBuilder<'_>,
) -> Result<(), Failure> {
    let filter: Vec<String> = {
        let req = w::verify::<wire::ListGroupsRequest>(&frame.message)?;
        req.states_filter()
            .iter()
            .flatten()
            .map(str::to_string)
            .collect()
    };
    let mut all: Vec<(String, String)> = Vec::new();
    for listed in shard.group_everywhere(GroupRequest::List).await? {
        if let GroupResponse::List(v) = listed {
            all.extend(v);
        }
    }
    let authorizer = shard.authorizer();
    all.retain(|(group, state)| {
        (filter.is_empty() || filter.iter().any(|f| f.eq_ignore_ascii_case(state)))
            && crate::acl::check::may_describe_group(&authorizer, principal, group)
    });
    all.sort();
    let items: Vec<_> = all
        .iter()
        .map(|(g, s)| {
            let g = fbb.create_string(g);
            let s = fbb.create_string(s);
            let p = fbb.create_string("consumer");
            wire::ListedGroup::create(
                fbb,
                &wire::ListedGroupArgs {
                    group_id: Some(g),
                    group_state: Some(s),
                    protocol_type: Some(p),
                },
            )
        })
        .collect();
    let items = fbb.create_vector(&items);
    let root = wire::ListGroupsResponse::create(
        fbb,
        &wire::ListGroupsResponseArgs {
            error_code: 0,
            error_message: None,
            groups: Some(items),
        },
    );
    fbb.finish(root, None);
    Ok(())
}

fn described<'a>(
    fbb: &mut FlatBufferBuilder<'a>,
    group: &str,
    view: Result<GroupView, Failure>,
) -> WIPOffset<wire::DescribedGroup<'a>> {
    let (failure, view) = match view {
        Ok(v) => (None, Some(v)),
        Err(f) => (Some(f), None),
    };
    let message = w::message(fbb, failure.as_ref());
    let members = view.as_ref().map(|v| {
        let ms: Vec<_> = v
            .members
            .iter()
            .map(|m| {
                let id = fbb.create_string(&m.member_id);
                let instance = m.instance_id.as_deref().map(|s| fbb.create_string(s));
                let rack = m.rack_id.as_deref().map(|s| fbb.create_string(s));
                let client = fbb.create_string(&m.client_id);
                let host = fbb.create_string(&m.client_host);
                let topics: Vec<_> = m.topics.iter().map(|t| fbb.create_string(t)).collect();
                let topics = fbb.create_vector(&topics);
                let assignment = topic_partitions(fbb, &m.assignment);
                let target = topic_partitions(fbb, &m.target);
                wire::DescribedGroupMember::create(
                    fbb,
                    &wire::DescribedGroupMemberArgs {
                        member_id: Some(id),
                        instance_id: instance,
                        rack_id: rack,
                        member_epoch: m.member_epoch,
                        client_id: Some(client),
                        client_host: Some(host),
                        subscribed_topic_names: Some(topics),
                        assignment: Some(assignment),
                        target_assignment: Some(target),
                    },
                )
            })
            .collect();
        fbb.create_vector(&ms)
    });
    let g = fbb.create_string(view.as_ref().map_or(group, |v| v.group_id.as_str()));
    let state = fbb.create_string(view.as_ref().map_or("Dead", |v| v.state.as_str()));
    let assignor = fbb.create_string("uniform");
    wire::DescribedGroup::create(
        fbb,
        &wire::DescribedGroupArgs {
            error_code: w::code(failure.as_ref()),
            error_message: message,
            group_id: Some(g),
            group_state: Some(state),
            group_epoch: view.as_ref().map_or(-1, |v| v.epoch),
            assignment_epoch: view.as_ref().map_or(-1, |v| v.assignment_epoch),
            assignor_name: Some(assignor),
            members,
        },
    )
}

async fn describe_groups(
    shard: &Rc<Shard>,
    frame: &Frame,
    fbb: &mut FlatBufferBuilder<'_>,
) -> Result<(), Failure> {
    let ids: Vec<String> = {
        let req = w::verify::<wire::DescribeGroupsRequest>(&frame.message)?;
        req.group_ids()
            .iter()
            .flatten()
            .map(str::to_string)
            .collect()
    };
    let mut views = Vec::with_capacity(ids.len());
    for id in &ids {
        let view = match shard
            .group(id, GroupRequest::Describe { group: id.clone() })
            .await
        {
            Ok(GroupResponse::Describe(r)) => r,
            Ok(_) => Err(unexpected()),
            Err(f) => Err(f),
        };
        views.push(view);
    }
    let items: Vec<_> = ids
        .iter()
        .zip(views)
        .map(|(id, v)| described(fbb, id, v))
        .collect();
    let items = fbb.create_vector(&items);
    let root = wire::DescribeGroupsResponse::create(
        fbb,
        &wire::DescribeGroupsResponseArgs {
            error_code: 0,
            error_message: None,
            groups: Some(items),
        },
    );
    fbb.finish(root, None);
    Ok(())
}

async fn delete_groups(
    shard: &Rc<Shard>,
    frame: &Frame,
    fbb: &mut FlatBufferBuilder<'_>,
) -> Result<(), Failure> {
    let ids: Vec<String> = {
        let req = w::verify::<wire::DeleteGroupsRequest>(&frame.message)?;
        req.group_ids()
            .iter()
            .flatten()
            .map(str::to_string)
            .collect()
    };
    let mut results = Vec::with_capacity(ids.len());
    for id in &ids {
        let r = match shard
            .group(id, GroupRequest::Delete { group: id.clone() })
            .await
        {
            Ok(GroupResponse::Delete(r)) => r,
            Ok(_) => Err(unexpected()),
            Err(f) => Err(f),
        };
        results.push(r);
    }
    let items: Vec<_> = ids
        .iter()
        .zip(results)
        .map(|(id, r)| {
            let f = r.err();
            let message = w::message(fbb, f.as_ref());
            let g = fbb.create_string(id);
            wire::DeletableGroupResult::create(
                fbb,
                &wire::DeletableGroupResultArgs {
                    group_id: Some(g),
                    error_code: w::code(f.as_ref()),
                    error_message: message,
                },
            )
        })
        .collect();
    let items = fbb.create_vector(&items);
    let root = wire::DeleteGroupsResponse::create(
        fbb,
        &wire::DeleteGroupsResponseArgs {
            error_code: 0,
            error_message: None,
            results: Some(items),
        },
    );
    fbb.finish(root, None);
    Ok(())
}
