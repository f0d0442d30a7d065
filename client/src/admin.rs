//! The admin client: topics, configs and offsets.

mod scram;

pub use scram::{ScramDeletion, ScramUpsertion, UserScramCredentials};

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use borges_protocol::acl::{self, Acl, AclFilter};
use borges_protocol::{wire, ApiKey, ErrorCode};

use crate::client::ClientCore;
use crate::codec::obj;
use crate::codec::{self, decode};
use crate::config::ClientConfig;
use crate::error::{check_code, ClientError, Result};
use crate::group;
use crate::metadata::ClusterMetadata;
use crate::retry;
use crate::types::{
    AlterConfig, ConfigEntry, ConfigSource, GroupCoordinator, GroupDescription, GroupListing,
    GroupState, ListedOffset, MemberDescription, NewTopic, OffsetSpec, TopicDescription,
    TopicPartition, TopicResult,
};

/// Pipelined admin requests a connection may carry.
const ADMIN_IN_FLIGHT_REQUESTS_MAX: usize = 16;
/// First pause before a ListOffsets query is sent again after its leader moved.
const LIST_OFFSETS_BACKOFF_MS: u64 = 50;
/// Longest pause between ListOffsets attempts.
const LIST_OFFSETS_BACKOFF_MS_MAX: u64 = 1_000;

/// Creates, deletes, describes and lists topics; reads and alters topic configs; looks up
/// offsets. Cheap to clone; `Send + Sync`.
///
/// ```no_run
/// # async fn example() -> borges_client::Result<()> {
/// use borges_client::{Admin, AlterConfig, ClientConfig, NewTopic};
/// let admin = Admin::new(ClientConfig::new("127.0.0.1:9292")).await?;
/// admin.create_topics(vec![NewTopic::new("orders", 4).config("retention.ms", "86400000")]).await?;
/// admin.alter_configs("orders", vec![AlterConfig::set("retention.ms", "3600000")]).await?;
/// for topic in admin.describe_topics(&["orders"]).await? {
///     println!("{} has {} partitions", topic.name, topic.partitions.len());
/// }
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Admin {
    core: Arc<ClientCore>,
}

impl Admin {
    /// Connects to a bootstrap broker (fetching the cluster's metadata).
    pub async fn new(config: ClientConfig) -> Result<Admin> {
        let core = ClientCore::new(config, ADMIN_IN_FLIGHT_REQUESTS_MAX)?;
        core.refresh_metadata(Some(&[])).await?;
        Ok(Admin { core })
    }

    /// Creates topics. Fails with the first topic's error (the message names the topic);
    /// the other topics were still created. [`Admin::create_topics_each`] tells each result.
    pub async fn create_topics(&self, topics: Vec<NewTopic>) -> Result<()> {
        first_error(self.create_topics_each(topics).await?)
    }

    /// Creates topics and returns each topic's result, in request order. The outer error is
    /// a failure of the whole request (no broker reachable, a malformed request).
    pub async fn create_topics_each(&self, topics: Vec<NewTopic>) -> Result<Vec<TopicResult>> {
        let names: Vec<String> = topics.iter().map(|t| t.name.clone()).collect();
        let request = obj!(wire::CreateTopicsRequestT {
            topics: Some(
                topics
                    .into_iter()
                    .map(|t| obj!(wire::CreatableTopicT {
                        name: t.name,
                        num_partitions: t.num_partitions,
                        replication_factor: t.replication_factor,
                        configs: Some(
                            t.configs
                                .into_iter()
                                .map(|(name, value)| obj!(wire::ConfigEntryT {
                                    name,
                                    value: Some(value)
                                }))
                                .collect(),
                        ),
                    }))
                    .collect(),
            ),
            timeout_ms: self.timeout_ms(),
            validate_only: false,
        });
        let frame = self
            .core
            .call_any(ApiKey::CreateTopics, codec::encode(|fbb| request.pack(fbb)))
            .await?;
        let response = decode!(CreateTopicsResponse, frame)?;
        check_code(response.error_code, response.error_message)?;
        let answers = response
            .topics
            .unwrap_or_default()
            .into_iter()
            .map(|t| (t.name, t.error_code, t.error_message));
        Ok(topic_results(&names, answers))
    }

    /// Deletes topics. Fails with the first topic's error; the others were still deleted.
    pub async fn delete_topics(&self, names: &[&str]) -> Result<()> {
        first_error(self.delete_topics_each(names).await?)
    }

    /// Deletes topics and returns each topic's result, in request order.
    pub async fn delete_topics_each(&self, names: &[&str]) -> Result<Vec<TopicResult>> {
        let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        let request = obj!(wire::DeleteTopicsRequestT {
            topic_names: Some(names.clone()),
            timeout_ms: self.timeout_ms(),
        });
        let frame = self
            .core
            .call_any(ApiKey::DeleteTopics, codec::encode(|fbb| request.pack(fbb)))
            .await?;
        let response = decode!(DeleteTopicsResponse, frame)?;
        check_code(response.error_code, response.error_message)?;
        let answers = response
            .topics
            .unwrap_or_default()
            .into_iter()
            .map(|t| (t.name, t.error_code, t.error_message));
        Ok(topic_results(&names, answers))
    }

    /// Grows `topic` to `total_count` partitions (CreatePartitions). Existing partitions
    /// keep their data; keys may map to other partitions from now on.
    pub async fn create_partitions(&self, topic: &str, total_count: i32) -> Result<()> {
        let request = obj!(wire::CreatePartitionsRequestT {
            topics: Some(vec![obj!(wire::CreatePartitionsTopicT {
                name: topic.to_string(),
                count: total_count,
            })]),
            timeout_ms: self.timeout_ms(),
            validate_only: false,
        });
        let frame = self
            .core
            .call_any(
                ApiKey::CreatePartitions,
                codec::encode(|fbb| request.pack(fbb)),
            )
            .await?;
        let response = decode!(CreatePartitionsResponse, frame)?;
        check_code(response.error_code, response.error_message)?;
        let answers = response
            .results
            .unwrap_or_default()
            .into_iter()
            .map(|t| (t.name, t.error_code, t.error_message));
        first_error(topic_results(&[topic.to_string()], answers))
    }

    /// Names of every topic except internal ones, sorted.
    pub async fn list_topics(&self) -> Result<Vec<String>> {
        self.list(false).await
    }

    /// Names of every topic, internal ones (`__consumer_offsets`) included, sorted.
    pub async fn list_all_topics(&self) -> Result<Vec<String>> {
        self.list(true).await
    }

    async fn list(&self, internal: bool) -> Result<Vec<String>> {
        let metadata = self.core.refresh_metadata(None).await?;
        let mut names: Vec<String> = metadata
            .topics
            .values()
            .filter(|t| t.error.is_none() && (internal || !t.is_internal))
            .map(|t| t.name.clone())
            .collect();
        names.sort();
        Ok(names)
    }

    /// Ids of the brokers the last metadata listed (in a cluster: every live broker).
    pub fn broker_ids(&self) -> Vec<i32> {
        let mut ids: Vec<i32> = self.core.metadata().brokers.keys().copied().collect();
        ids.sort_unstable();
        ids
    }

    /// Describes topics: id, partitions with leader, replicas, ISR and owning core, and every
    /// config. Fails when a topic does not exist.
    pub async fn describe_topics(&self, names: &[&str]) -> Result<Vec<TopicDescription>> {
        let wanted: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        let metadata = self.core.refresh_metadata(Some(&wanted)).await?;
        let mut out = Vec::with_capacity(names.len());
        for name in names {
            let topic = metadata
                .topics
                .get(*name)
                .ok_or_else(|| ClientError::Broker {
                    code: borges_protocol::ErrorCode::UnknownTopicOrPartition,
                    message: Some(format!("topic {name} does not exist")),
                })?;
            if let Some(e) = &topic.error {
                return Err(name_error(e.clone(), name));
            }
            out.push(TopicDescription {
                name: topic.name.clone(),
                topic_id: topic.topic_id,
                is_internal: topic.is_internal,
                partitions: topic.partitions.iter().map(|p| p.info.clone()).collect(),
                configs: self.describe_configs(name).await?,
            });
        }
        Ok(out)
    }

    /// Every config of a topic with its value and source.
    pub async fn describe_configs(&self, topic: &str) -> Result<Vec<ConfigEntry>> {
        let request = obj!(wire::DescribeConfigsRequestT {
            resources: Some(vec![obj!(wire::DescribeConfigsResourceT {
                resource_type: wire::ConfigResourceType::Topic,
                resource_name: topic.to_string(),
                config_names: None,
            })]),
            include_documentation: false,
        });
        let frame = self
            .core
            .call_any(
                ApiKey::DescribeConfigs,
                codec::encode(|fbb| request.pack(fbb)),
            )
            .await?;
        let response = decode!(DescribeConfigsResponse, frame)?;
        check_code(response.error_code, response.error_message)?;
        let result = response
            .results
            .unwrap_or_default()
            .into_iter()
            .find(|r| r.resource_name == topic)
            .ok_or_else(|| {
                ClientError::Protocol(format!("DescribeConfigs response lacks {topic}"))
            })?;
        check_code(result.error_code, result.error_message).map_err(|e| name_error(e, topic))?;
        let mut entries: Vec<ConfigEntry> = result
            .configs
            .unwrap_or_default()
            .into_iter()
            .map(|c| ConfigEntry {
                name: c.name,
                value: if c.is_sensitive { None } else { c.value },
                source: config_source(c.source),
                read_only: c.read_only,
            })
            .collect();
        entries.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(entries)
    }

    /// Changes a topic's configs incrementally (set or delete each named config).
    pub async fn alter_configs(&self, topic: &str, changes: Vec<AlterConfig>) -> Result<()> {
        let configs = changes
            .into_iter()
            .map(|c| match c {
                AlterConfig::Set(name, value) => obj!(wire::AlterableConfigT {
                    name,
                    op: wire::AlterConfigOp::Set,
                    value: Some(value)
                }),
                AlterConfig::Delete(name) => obj!(wire::AlterableConfigT {
                    name,
                    op: wire::AlterConfigOp::Delete,
                    value: None
                }),
            })
            .collect();
        let request = obj!(wire::AlterConfigsRequestT {
            resources: Some(vec![obj!(wire::AlterConfigsResourceT {
                resource_type: wire::ConfigResourceType::Topic,
                resource_name: topic.to_string(),
                configs: Some(configs),
            })]),
            validate_only: false,
        });
        let frame = self
            .core
            .call_any(ApiKey::AlterConfigs, codec::encode(|fbb| request.pack(fbb)))
            .await?;
        let response = decode!(AlterConfigsResponse, frame)?;
        check_code(response.error_code, response.error_message)?;
        for r in response.results.unwrap_or_default() {
            check_code(r.error_code, r.error_message)
                .map_err(|e| name_error(e, &r.resource_name))?;
        }
        Ok(())
    }

    /// Looks up offsets: earliest, latest (the high watermark), the record with the largest
    /// timestamp, or the first record at or after a time (offset -1 when there is none).
    pub async fn list_offsets(
        &self,
        queries: Vec<(TopicPartition, OffsetSpec)>,
    ) -> Result<Vec<ListedOffset>> {
        list_offsets(&self.core, &queries).await
    }

    /// Every consumer group the cluster knows, sorted by id.
    pub async fn list_groups(&self) -> Result<Vec<GroupListing>> {
        let request = wire::ListGroupsRequestT::default();
        let frame = self
            .core
            .call_any(ApiKey::ListGroups, codec::encode(|fbb| request.pack(fbb)))
            .await?;
        let response = decode!(ListGroupsResponse, frame)?;
        check_code(response.error_code, response.error_message)?;
        let mut groups: Vec<GroupListing> = response
            .groups
            .unwrap_or_default()
            .into_iter()
            .map(|g| GroupListing {
                group_id: g.group_id,
                state: GroupState::parse(g.group_state.as_deref().unwrap_or_default()),
            })
            .collect();
        groups.sort_by(|a, b| a.group_id.cmp(&b.group_id));
        Ok(groups)
    }

    /// Describes groups: state, epoch, members and what each owns. Fails with the first
    /// group's error (`GroupIdNotFound` for an unknown group).
    pub async fn describe_groups(&self, groups: &[&str]) -> Result<Vec<GroupDescription>> {
        let request = obj!(wire::DescribeGroupsRequestT {
            group_ids: Some(groups.iter().map(|g| g.to_string()).collect()),
        });
        let frame = self
            .core
            .call_any(
                ApiKey::DescribeGroups,
                codec::encode(|fbb| request.pack(fbb)),
            )
            .await?;
        let response = decode!(DescribeGroupsResponse, frame)?;
        check_code(response.error_code, response.error_message)?;
        let mut out = Vec::new();
        for g in response.groups.unwrap_or_default() {
            check_code(g.error_code, g.error_message).map_err(|e| name_error(e, &g.group_id))?;
            let members = g
                .members
                .unwrap_or_default()
                .into_iter()
                .map(|m| MemberDescription {
                    member_id: m.member_id,
                    member_epoch: m.member_epoch,
                    client_id: m.client_id.unwrap_or_default(),
                    client_host: m.client_host.unwrap_or_default(),
                    assignment: group::partitions(&group::from_wire(
                        &m.assignment.unwrap_or_default(),
                    )),
                    target_assignment: group::partitions(&group::from_wire(
                        &m.target_assignment.unwrap_or_default(),
                    )),
                    subscribed_topics: m.subscribed_topic_names.unwrap_or_default(),
                })
                .collect();
            out.push(GroupDescription {
                group_id: g.group_id,
                state: GroupState::parse(g.group_state.as_deref().unwrap_or_default()),
                group_epoch: g.group_epoch,
                assignment_epoch: g.assignment_epoch,
                assignor: g.assignor_name.unwrap_or_default(),
                members,
            });
        }
        Ok(out)
    }

    /// The broker and core that coordinate `group_id`.
    pub async fn group_coordinator(&self, group_id: &str) -> Result<GroupCoordinator> {
        group::lookup_coordinator(&self.core, group_id).await
    }

    /// Every committed offset of `group`, sorted by topic and partition.
    pub async fn list_group_offsets(&self, group_id: &str) -> Result<Vec<(TopicPartition, i64)>> {
        let addr = group::find_coordinator(&self.core, group_id).await?;
        let committed = group::fetch_committed(&self.core, &addr, group_id, None).await?;
        Ok(committed
            .into_iter()
            .filter_map(|(tp, o)| o.map(|o| (tp, o)))
            .collect())
    }

    /// Sets committed offsets of `group` (each the next offset to read). The coordinator
    /// accepts this only while the group has no active members (`NonEmptyGroup` otherwise).
    pub async fn alter_group_offsets(
        &self,
        group_id: &str,
        offsets: &[(TopicPartition, i64)],
    ) -> Result<()> {
        let addr = group::find_coordinator(&self.core, group_id).await?;
        group::commit(&self.core, &addr, group_id, "", -1, offsets).await
    }

    /// Deletes groups without active members, and their committed offsets.
    pub async fn delete_groups(&self, groups: &[&str]) -> Result<()> {
        let request = obj!(wire::DeleteGroupsRequestT {
            group_ids: Some(groups.iter().map(|g| g.to_string()).collect()),
        });
        let frame = self
            .core
            .call_any(ApiKey::DeleteGroups, codec::encode(|fbb| request.pack(fbb)))
            .await?;
        let response = decode!(DeleteGroupsResponse, frame)?;
        check_code(response.error_code, response.error_message)?;
        for r in response.results.unwrap_or_default() {
            check_code(r.error_code, r.error_message).map_err(|e| name_error(e, &r.group_id))?;
        }
        Ok(())
    }

    /// Adds ACLs (CreateAcls; needs Alter on the cluster): one result per ACL, in order. An
    /// ACL the broker holds already is a success.
    pub async fn create_acls(&self, acls: &[Acl]) -> Result<Vec<Result<()>>> {
        let message = codec::encode(|fbb| {
            let items: Vec<_> = acls.iter().map(|a| acl::encode_acl(fbb, a)).collect();
            let creations = Some(fbb.create_vector(&items));
            wire::CreateAclsRequest::create(fbb, &wire::CreateAclsRequestArgs { creations })
        });
        let frame = self.core.call_any(ApiKey::CreateAcls, message).await?;
        let response = decode!(CreateAclsResponse, frame)?;
        check_code(response.error_code, response.error_message)?;
        let results = response.results.unwrap_or_default();
        if results.len() != acls.len() {
            return Err(ClientError::Protocol(format!(
                "CreateAcls: {} results for {} ACLs",
                results.len(),
                acls.len()
            )));
        }
        Ok(results
            .into_iter()
            .map(|r| check_code(r.error_code, r.error_message))
            .collect())
    }

    /// The ACLs `filter` names (DescribeAcls; needs Describe on the cluster).
    pub async fn describe_acls(&self, filter: &AclFilter) -> Result<Vec<Acl>> {
        let message = codec::encode(|fbb| {
            let filter = Some(acl::encode_filter(fbb, filter));
            wire::DescribeAclsRequest::create(fbb, &wire::DescribeAclsRequestArgs { filter })
        });
        let frame = self.core.call_any(ApiKey::DescribeAcls, message).await?;
        let response = flatbuffers::root::<wire::DescribeAclsResponse>(&frame.message)
            .map_err(|e| codec::invalid_message("DescribeAclsResponse", e))?;
        check_code(
            response.error_code(),
            response.error_message().map(str::to_string),
        )?;
        decode_acls(response.acls())
    }

    /// Removes the ACLs each filter names (DeleteAcls; needs Alter on the cluster): per
    /// filter, the ACLs it removed.
    pub async fn delete_acls(&self, filters: &[AclFilter]) -> Result<Vec<Result<Vec<Acl>>>> {
        let message = codec::encode(|fbb| {
            let items: Vec<_> = filters.iter().map(|f| acl::encode_filter(fbb, f)).collect();
            let filters = Some(fbb.create_vector(&items));
            wire::DeleteAclsRequest::create(fbb, &wire::DeleteAclsRequestArgs { filters })
        });
        let frame = self.core.call_any(ApiKey::DeleteAcls, message).await?;
        let response = flatbuffers::root::<wire::DeleteAclsResponse>(&frame.message)
            .map_err(|e| codec::invalid_message("DeleteAclsResponse", e))?;
        check_code(
            response.error_code(),
            response.error_message().map(str::to_string),
        )?;
        let results: Vec<_> = response.filter_results().into_iter().flatten().collect();
        if results.len() != filters.len() {
            return Err(ClientError::Protocol(format!(
                "DeleteAcls: {} results for {} filters",
                results.len(),
                filters.len()
            )));
        }
        Ok(results
            .iter()
            .map(|r| {
                check_code(r.error_code(), r.error_message().map(str::to_string))?;
                decode_acls(r.matching_acls())
            })
            .collect())
    }

    fn timeout_ms(&self) -> i32 {
        i32::try_from(self.core.config.request_timeout_ms).unwrap_or(i32::MAX)
    }
}

/// Each requested topic's result from the broker's per-topic answers; a topic the broker did
/// not answer for is a protocol violation.
fn topic_results(
    names: &[String],
    answers: impl Iterator<Item = (String, u16, Option<String>)>,
) -> Vec<TopicResult> {
    let mut answers: Vec<(String, u16, Option<String>)> = answers.collect();
    names
        .iter()
        .map(|name| {
            let result = match answers.iter().position(|(n, _, _)| n == name) {
                Some(i) => {
                    let (_, code, message) = answers.swap_remove(i);
                    check_code(code, message).map_err(|e| name_error(e, name))
                }
                None => Err(ClientError::Protocol(format!(
                    "the response has no result for topic {name}"
                ))),
            };
            TopicResult {
                name: name.clone(),
                result,
            }
        })
        .collect()
}

type Bindings<'a> =
    Option<flatbuffers::Vector<'a, flatbuffers::ForwardsUOffset<wire::AclBinding<'a>>>>;

fn decode_acls(bindings: Bindings<'_>) -> Result<Vec<Acl>> {
    bindings
        .into_iter()
        .flatten()
        .map(|b| {
            acl::decode_acl(&b)
                .map_err(|e| ClientError::Protocol(format!("an ACL from the broker: {e}")))
        })
        .collect()
}

fn first_error(results: Vec<TopicResult>) -> Result<()> {
    results.into_iter().try_for_each(|r| r.result)
}

/// Prefixes a broker error's message with the resource name when the broker did not say it.
fn name_error(e: ClientError, name: &str) -> ClientError {
    match e {
        ClientError::Broker { code, message } => {
            let text = message.unwrap_or_else(|| code.description().to_string());
            let message = if text.contains(name) {
                text
            } else {
                format!("{name}: {text}")
            };
            ClientError::Broker {
                code,
                message: Some(message),
            }
        }
        other => other,
    }
}

fn config_source(source: wire::ConfigSource) -> ConfigSource {
    match source {
        wire::ConfigSource::TopicConfig => ConfigSource::Topic,
        wire::ConfigSource::BrokerConfig => ConfigSource::Broker,
        wire::ConfigSource::Default => ConfigSource::Default,
        _ => ConfigSource::Unknown,
    }
}

/// Whether a ListOffsets failure for a partition says its leader moved or is not known yet,
/// so that the query is worth repeating at the leader fresh metadata names: a broker that does
/// not lead it (any more), a stale or newer leader epoch, a broker shutting down, a partition
/// the answering broker has not applied yet (while the metadata has it), or a lost connection.
fn leader_moved(e: &ClientError, topic_known: bool) -> bool {
    match e {
        ClientError::Broker { code, .. } => match code {
            ErrorCode::NotLeaderOrFollower
            | ErrorCode::FencedLeaderEpoch
            | ErrorCode::UnknownLeaderEpoch
            | ErrorCode::ShuttingDown
            | ErrorCode::RequestTimedOut => true,
            ErrorCode::UnknownTopicOrPartition => topic_known,
            _ => false,
        },
        ClientError::Io { .. }
        | ClientError::ConnectionClosed { .. }
        | ClientError::Timeout { .. }
        | ClientError::NoBrokerAvailable { .. } => true,
        _ => false,
    }
}

/// ListOffsets for `queries`, each partition's query at its leader broker (in a cluster only
/// the leader answers; it forwards to the owning core). The metadata is refreshed first when
/// it lacks a queried topic or a partition's leader. Queries answered with an error that says
/// the leader moved ([`leader_moved`]) are sent again, to the leader of freshly refreshed
/// metadata, with backoff, until `request_timeout_ms` has passed; the last such error is
/// returned then. Other errors are returned at once. Answers come back in query order.
pub(crate) async fn list_offsets(
    core: &ClientCore,
    queries: &[(TopicPartition, OffsetSpec)],
) -> Result<Vec<ListedOffset>> {
    let deadline = Instant::now() + Duration::from_millis(core.config.request_timeout_ms);
    list_offsets_until(core, queries, deadline).await
}

/// [`list_offsets`] with its own deadline: no retry starts after `deadline` (a deadline in the
/// past makes one attempt, for callers that retry themselves).
pub(crate) async fn list_offsets_until(
    core: &ClientCore,
    queries: &[(TopicPartition, OffsetSpec)],
    deadline: Instant,
) -> Result<Vec<ListedOffset>> {
    let mut topics: Vec<String> = queries.iter().map(|(tp, _)| tp.topic.clone()).collect();
    topics.sort();
    topics.dedup();
    let mut out: Vec<Option<ListedOffset>> = vec![None; queries.len()];
    let mut pending: Vec<usize> = (0..queries.len()).collect();
    let mut metadata = core.metadata();
    if !routable(&metadata, queries) {
        metadata = refreshed(core, &topics, metadata).await;
    }
    let mut attempt: u32 = 0;
    loop {
        let mut by_leader: BTreeMap<Option<String>, Vec<usize>> = BTreeMap::new();
        for &i in &pending {
            let tp = &queries[i].0;
            let addr = metadata.leader_addr(&tp.topic, tp.partition, false);
            by_leader
                .entry(addr.map(str::to_string))
                .or_default()
                .push(i);
        }
        let mut retry = Vec::new();
        let mut last_error = None;
        for (addr, indexes) in by_leader {
            let sub: Vec<(TopicPartition, OffsetSpec)> =
                indexes.iter().map(|&i| queries[i].clone()).collect();
            let answers = match list_offsets_at(core, addr.as_deref(), &sub).await {
                Ok(answers) => answers,
                Err(e) => vec![Err(e); sub.len()],
            };
            for (i, answer) in indexes.into_iter().zip(answers) {
                match answer {
                    Ok(listed) => out[i] = Some(listed),
                    Err(e) => {
                        let tp = &queries[i].0;
                        let known = metadata.topics.get(&tp.topic).is_some_and(|t| {
                            t.error.is_none() && t.partition(tp.partition).is_some()
                        });
                        if !leader_moved(&e, known) {
                            return Err(e);
                        }
                        retry.push(i);
                        last_error = Some(e);
                    }
                }
            }
        }
        let Some(error) = last_error else {
            return Ok(out.into_iter().flatten().collect());
        };
        attempt += 1;
        let backoff_ms = retry::backoff_ms(
            attempt,
            LIST_OFFSETS_BACKOFF_MS,
            LIST_OFFSETS_BACKOFF_MS_MAX,
            u64::from(attempt),
        );
        if Instant::now() + Duration::from_millis(backoff_ms) >= deadline {
            return Err(error);
        }
        tracing::debug!(%error, attempt, "ListOffsets: the leader moved; refreshing metadata");
        tokio::time::sleep(Duration::from_millis(backoff_ms)).await;
        metadata = refreshed(core, &topics, metadata).await;
        pending = retry;
    }
}

/// Whether `metadata` names a leader for every queried partition.
fn routable(metadata: &ClusterMetadata, queries: &[(TopicPartition, OffsetSpec)]) -> bool {
    queries.iter().all(|(tp, _)| {
        metadata
            .leader_addr(&tp.topic, tp.partition, false)
            .is_some()
    })
}

/// Fresh metadata for `topics`, or `current` when the refresh fails (the next attempt's
/// request fails the same way and is retried or returned).
async fn refreshed(
    core: &ClientCore,
    topics: &[String],
    current: Arc<ClusterMetadata>,
) -> Arc<ClusterMetadata> {
    match core.refresh_metadata(Some(topics)).await {
        Ok(m) => m,
        Err(e) => {
            tracing::debug!(error = %e, "ListOffsets: metadata refresh failed");
            current
        }
    }
}

/// ListOffsets for `queries` at `addr`, or at any broker; one result per query.
async fn list_offsets_at(
    core: &ClientCore,
    addr: Option<&str>,
    queries: &[(TopicPartition, OffsetSpec)],
) -> Result<Vec<Result<ListedOffset>>> {
    let mut by_topic: BTreeMap<&str, Vec<wire::ListOffsetsPartitionT>> = BTreeMap::new();
    for (tp, spec) in queries {
        by_topic
            .entry(&tp.topic)
            .or_default()
            .push(obj!(wire::ListOffsetsPartitionT {
                partition: tp.partition,
                current_leader_epoch: -1,
                timestamp: spec.wire_timestamp(),
            }));
    }
    let request = obj!(wire::ListOffsetsRequestT {
        replica_id: -1,
        isolation_level: wire::IsolationLevel::ReadUncommitted,
        topics: Some(
            by_topic
                .into_iter()
                .map(|(name, partitions)| obj!(wire::ListOffsetsTopicT {
                    name: name.to_string(),
                    partitions: Some(partitions)
                }))
                .collect(),
        ),
    });
    let message = codec::encode(|fbb| request.pack(fbb));
    let frame = match addr {
        Some(addr) => core.call(addr, ApiKey::ListOffsets, message).await?,
        None => core.call_any(ApiKey::ListOffsets, message).await?,
    };
    let response = decode!(ListOffsetsResponse, frame)?;
    parse_list_offsets_each(response, queries)
}

/// Matches a ListOffsets response to the queries, in query order; the first error fails.
#[cfg(test)]
fn parse_list_offsets(
    response: wire::ListOffsetsResponseT,
    queries: &[(TopicPartition, OffsetSpec)],
) -> Result<Vec<ListedOffset>> {
    parse_list_offsets_each(response, queries)?
        .into_iter()
        .collect()
}

/// Matches a ListOffsets response to the queries, in query order: each query's offset or its
/// partition's error. The outer error is the response's own error or a malformed response.
fn parse_list_offsets_each(
    response: wire::ListOffsetsResponseT,
    queries: &[(TopicPartition, OffsetSpec)],
) -> Result<Vec<Result<ListedOffset>>> {
    check_code(response.error_code, response.error_message)?;
    let topics = response.topics.unwrap_or_default();
    // The same partition may be asked about several times (earliest and latest): the k-th
    // query of a partition takes its k-th answer.
    let mut used: HashMap<(&str, i32), usize> = HashMap::new();
    queries
        .iter()
        .map(|(tp, _)| {
            let seen = used.entry((tp.topic.as_str(), tp.partition)).or_insert(0);
            let p = topics
                .iter()
                .filter(|t| t.name == tp.topic)
                .flat_map(|t| t.partitions.iter().flatten())
                .filter(|p| p.partition == tp.partition)
                .nth(*seen)
                .ok_or_else(|| ClientError::Protocol(format!("ListOffsets response lacks {tp}")))?;
            *seen += 1;
            Ok(check_code(p.error_code, p.error_message.clone())
                .map_err(|e| name_error(e, &tp.to_string()))
                .map(|()| ListedOffset {
                    topic_partition: tp.clone(),
                    offset: p.offset,
                    timestamp: p.timestamp,
                    size_bytes: p.size_bytes,
                }))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn list_offsets_response_is_matched_to_queries() {
        let response = obj!(wire::ListOffsetsResponseT {
            topics: Some(vec![obj!(wire::ListOffsetsTopicResponseT {
                name: "t".into(),
                partitions: Some(vec![
                    obj!(wire::ListOffsetsPartitionResponseT {
                        partition: 1,
                        offset: 10,
                        timestamp: 5
                    }),
                    obj!(wire::ListOffsetsPartitionResponseT {
                        partition: 0,
                        offset: -1,
                        timestamp: -1
                    }),
                ]),
            })])
        });
        let queries = vec![
            (TopicPartition::new("t", 0), OffsetSpec::Timestamp(99)),
            (TopicPartition::new("t", 1), OffsetSpec::Latest),
        ];
        let listed = parse_list_offsets(response.clone(), &queries).unwrap();
        assert_eq!(listed[0].offset, -1);
        assert_eq!(listed[1].offset, 10);
        let missing = vec![(TopicPartition::new("t", 2), OffsetSpec::Latest)];
        assert!(matches!(
            parse_list_offsets(response, &missing),
            Err(ClientError::Protocol(_))
        ));
    }

    #[test]
    fn repeated_queries_of_one_partition_take_answers_in_order() {
        let response = obj!(wire::ListOffsetsResponseT {
            topics: Some(vec![obj!(wire::ListOffsetsTopicResponseT {
                name: "t".into(),
                partitions: Some(vec![
                    obj!(wire::ListOffsetsPartitionResponseT {
                        partition: 0,
                        offset: 0
                    }),
                    obj!(wire::ListOffsetsPartitionResponseT {
                        partition: 0,
                        offset: 7
                    }),
                ]),
            })]),
        });
        let queries = vec![
            (TopicPartition::new("t", 0), OffsetSpec::Earliest),
            (TopicPartition::new("t", 0), OffsetSpec::Latest),
        ];
        let listed = parse_list_offsets(response, &queries).unwrap();
        assert_eq!((listed[0].offset, listed[1].offset), (0, 7));
    }

    #[test]
    fn topic_results_follow_the_request_order_and_name_the_topic() {
        let names = vec!["a".to_string(), "b".to_string(), "c".to_string()];
        let answers = vec![
            ("b".to_string(), ErrorCode::TopicAlreadyExists as u16, None),
            ("a".to_string(), 0, None),
        ];
        let results = topic_results(&names, answers.into_iter());
        assert_eq!(results.len(), 3);
        assert!(results[0].result.is_ok());
        let b = results[1].result.as_ref().unwrap_err();
        assert_eq!(b.code(), Some(ErrorCode::TopicAlreadyExists));
        assert!(b.to_string().contains("b:"), "{b}");
        assert!(matches!(results[2].result, Err(ClientError::Protocol(_))));
        assert!(first_error(results).is_err());
    }

    #[test]
    fn partition_errors_name_the_partition() {
        let response = obj!(wire::ListOffsetsResponseT {
            topics: Some(vec![obj!(wire::ListOffsetsTopicResponseT {
                name: "t".into(),
                partitions: Some(vec![obj!(wire::ListOffsetsPartitionResponseT {
                    partition: 0,
                    error_code: ErrorCode::UnknownTopicOrPartition as u16
                })]),
            })])
        });
        let err = parse_list_offsets(
            response,
            &[(TopicPartition::new("t", 0), OffsetSpec::Earliest)],
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "UnknownTopicOrPartition: t-0: unknown topic or partition"
        );
    }
}
