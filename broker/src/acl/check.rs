//! What each API needs (docs/operations.md, "ACLs"), checked on the connection's core after
//! the request's message verified and before it is dispatched or forwarded, so a refused
//! request changes nothing. A refusal answers the whole request with an `ErrorResponse`
//! carrying `TopicAuthorizationFailed`, `GroupAuthorizationFailed` or
//! `ClusterAuthorizationFailed` for the first resource refused.
//!
//! Where Kafka answers per resource, so does Borges: the handlers of Produce, Fetch,
//! ListOffsets, OffsetForLeaderEpoch (a client's), OffsetCommit (its topics; the group is
//! checked here), CreateTopics, DeleteTopics, CreatePartitions, DescribeConfigs and
//! AlterConfigs check each resource with a [`TopicGate`] (or [`allowed`]) while they parse,
//! answer a refused one with its refusal and serve the others. Metadata and ListGroups are
//! not refused: their handlers leave out what the principal may not describe
//! ([`may_describe_topic`], [`may_describe_group`]); so does OffsetFetch's handler with the
//! topics of the group's offsets.

use borges_protocol::acl::{Operation, ResourceType};
use borges_protocol::{wire as m, ApiKey, ErrorCode};

use super::Authorizer;
use crate::failure::Failure;
use crate::metrics::CoreMetrics;
use crate::wire;

/// One permission a request needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Need<'a> {
    /// An operation on a topic.
    Topic(Operation, &'a str),
    /// An operation on a group.
    Group(Operation, &'a str),
    /// An operation on the cluster.
    Cluster(Operation),
    /// CreateTopics: Create on the cluster or on the topic.
    CreateTopic(&'a str),
    /// InitProducerId: IdempotentWrite on the cluster or Write on some topic.
    ProducerId,
}

/// Checks a verified request of `api` from `principal`; `Err` is the refusal to answer.
pub fn request(
    authorizer: &Authorizer,
    principal: &str,
    api: ApiKey,
    message: &[u8],
) -> Result<(), Failure> {
    if !authorizer.enabled() || authorizer.is_super_user(principal) {
        return Ok(());
    }
    for need in needs(api, message)? {
        allowed(authorizer, principal, &need)?;
    }
    Ok(())
}

/// Whether `principal` may see topic `name` in Metadata.
pub fn may_describe_topic(authorizer: &Authorizer, principal: &str, name: &str) -> bool {
    authorizer.authorize(principal, Operation::Describe, ResourceType::Topic, name)
}

/// Whether `principal` may see group `id` in ListGroups (Describe on the group, or on the
/// cluster).
pub fn may_describe_group(authorizer: &Authorizer, principal: &str, id: &str) -> bool {
    authorizer.authorize(principal, Operation::Describe, ResourceType::Group, id)
        || authorizer.authorize_cluster(principal, Operation::Describe)
}

/// The resource type a refusal's code names (`None`: not an authorization failure).
pub fn refused_resource(code: ErrorCode) -> Option<ResourceType> {
    match code {
        ErrorCode::TopicAuthorizationFailed => Some(ResourceType::Topic),
        ErrorCode::GroupAuthorizationFailed => Some(ResourceType::Group),
        ErrorCode::ClusterAuthorizationFailed => Some(ResourceType::Cluster),
        _ => None,
    }
}

fn refused(code: ErrorCode, principal: &str, what: String) -> Failure {
    Failure::new(
        code,
        format!("{principal} is not authorized to {what} (no ACL allows it, or one denies it)"),
    )
}

/// `Ok` when `principal` has `need`, else the refusal.
pub fn allowed(authorizer: &Authorizer, principal: &str, need: &Need<'_>) -> Result<(), Failure> {
    let a = authorizer;
    let (ok, code, what) = match *need {
        Need::Topic(op, name) => (
            a.authorize(principal, op, ResourceType::Topic, name),
            ErrorCode::TopicAuthorizationFailed,
            format!("{op} topic {name:?}"),
        ),
        Need::Group(op, id) => (
            a.authorize(principal, op, ResourceType::Group, id),
            ErrorCode::GroupAuthorizationFailed,
            format!("{op} group {id:?}"),
        ),
        Need::Cluster(op) => (
            a.authorize_cluster(principal, op),
            ErrorCode::ClusterAuthorizationFailed,
            format!("{op} the cluster"),
        ),
        Need::CreateTopic(name) => (
            a.authorize_cluster(principal, Operation::Create)
                || a.authorize(principal, Operation::Create, ResourceType::Topic, name),
            ErrorCode::TopicAuthorizationFailed,
            format!("Create topic {name:?}"),
        ),
        Need::ProducerId => (
            a.authorize_cluster(principal, Operation::IdempotentWrite)
                || a.authorize_any(principal, Operation::Write, ResourceType::Topic),
            ErrorCode::ClusterAuthorizationFailed,
            "IdempotentWrite the cluster (or Write some topic)".to_string(),
        ),
    };
    match ok {
        true => Ok(()),
        false => Err(refused(code, principal, what)),
    }
}

/// The per-topic check of one request whose API Kafka answers per topic: built by its handler
/// on the connection's core, asked once per topic of the request while it parses. Each
/// refusal is counted under the API and `topic`. Free when the authorizer is off or the
/// principal is a super user.
pub struct TopicGate<'a> {
    /// The authorizer and principal to ask; `None`: everything passes.
    check: Option<(std::rc::Rc<Authorizer>, &'a str)>,
    api: ApiKey,
    operation: Operation,
    metrics: &'a CoreMetrics,
}

impl<'a> TopicGate<'a> {
    /// The gate for `operation` on the topics of an `api` request from `principal`.
    pub fn new(
        authorizer: std::rc::Rc<Authorizer>,
        metrics: &'a CoreMetrics,
        principal: &'a str,
        api: ApiKey,
        operation: Operation,
    ) -> TopicGate<'a> {
        let checked = authorizer.enabled() && !authorizer.is_super_user(principal);
        TopicGate {
            check: checked.then_some((authorizer, principal)),
            api,
            operation,
            metrics,
        }
    }

    /// `Ok` when the principal may do the gate's operation on `topic`, else the refusal to
    /// answer each of the topic's partitions with (counted).
    pub fn check(&self, topic: &str) -> Result<(), Failure> {
        let Some((authorizer, principal)) = &self.check else {
            return Ok(());
        };
        let refused = allowed(authorizer, principal, &Need::Topic(self.operation, topic));
        if refused.is_err() {
            self.metrics
                .count_authorization_failure(self.api, ResourceType::Topic);
        }
        refused
    }
}

type Strings<'a> = Option<flatbuffers::Vector<'a, flatbuffers::ForwardsUOffset<&'a str>>>;

fn names<'a>(v: Strings<'a>, each: impl Fn(&'a str) -> Need<'a>) -> Vec<Need<'a>> {
    v.into_iter().flatten().map(each).collect()
}

/// The permissions a verified request of `api` needs, in request order.
pub fn needs(api: ApiKey, message: &[u8]) -> Result<Vec<Need<'_>>, Failure> {
    Ok(match api {
        ApiKey::ApiVersions | ApiKey::SaslHandshake | ApiKey::SaslAuthenticate => Vec::new(),
        ApiKey::Metadata | ApiKey::ListGroups => Vec::new(),
        // Per topic, by their handlers' TopicGate: Write, Describe.
        ApiKey::Produce | ApiKey::ListOffsets => Vec::new(),
        // A follower's requests need ClusterAction; a client's are checked per topic by the
        // handler (Read, Describe).
        ApiKey::Fetch => {
            let r = wire::verify::<m::FetchRequest>(message)?;
            replica_needs(r.replica_id())
        }
        ApiKey::OffsetForLeaderEpoch => {
            let r = wire::verify::<m::OffsetForLeaderEpochRequest>(message)?;
            replica_needs(r.replica_id())
        }
        ApiKey::InitProducerId => vec![Need::ProducerId],
        _ => return admin_needs(api, message),
    })
}

/// ClusterAction for a follower's request (`replica_id >= 0`); nothing more for a client's,
/// whose topics its handler checks.
fn replica_needs(replica_id: i32) -> Vec<Need<'static>> {
    match replica_id >= 0 {
        true => vec![Need::Cluster(Operation::ClusterAction)],
        false => Vec::new(),
    }
}

fn admin_needs(api: ApiKey, message: &[u8]) -> Result<Vec<Need<'_>>, Failure> {
    Ok(match api {
        // Checked per resource by their handlers (handlers/admin.rs), as Kafka: a resource
        // refused is answered with its refusal and the others are served. CreateTopics:
        // Create; DeleteTopics: Delete; CreatePartitions: Alter; DescribeConfigs and
        // AlterConfigs: DescribeConfigs / AlterConfigs on the topic ([`config_need`]).
        ApiKey::CreateTopics
        | ApiKey::DeleteTopics
        | ApiKey::CreatePartitions
        | ApiKey::DescribeConfigs
        | ApiKey::AlterConfigs => Vec::new(),
        _ => return group_needs(api, message),
    })
}

/// What `op` (DescribeConfigs, AlterConfigs) on a config resource needs: the operation on the
/// topic, or on the cluster for broker configs.
pub fn config_need(op: Operation, kind: m::ConfigResourceType, name: &str) -> Need<'_> {
    match kind {
        m::ConfigResourceType::Topic => Need::Topic(op, name),
        _ => Need::Cluster(op),
    }
}

fn group_needs(api: ApiKey, message: &[u8]) -> Result<Vec<Need<'_>>, Failure> {
    use Operation::*;
    Ok(match api {
        ApiKey::FindCoordinator => {
            let r = wire::verify::<m::FindCoordinatorRequest>(message)?;
            names(r.keys(), |g| Need::Group(Describe, g))
        }
        ApiKey::DescribeGroups => {
            let r = wire::verify::<m::DescribeGroupsRequest>(message)?;
            names(r.group_ids(), |g| Need::Group(Describe, g))
        }
        ApiKey::DeleteGroups => {
            let r = wire::verify::<m::DeleteGroupsRequest>(message)?;
            names(r.group_ids(), |g| Need::Group(Delete, g))
        }
        ApiKey::ConsumerGroupHeartbeat => {
            let r = wire::verify::<m::ConsumerGroupHeartbeatRequest>(message)?;
            vec![Need::Group(Read, r.group_id())]
        }
        // Its topics (Read) are checked per topic by the handler.
        ApiKey::OffsetCommit => {
            let r = wire::verify::<m::OffsetCommitRequest>(message)?;
            vec![Need::Group(Read, r.group_id())]
        }
        ApiKey::OffsetFetch => {
            let r = wire::verify::<m::OffsetFetchRequest>(message)?;
            vec![Need::Group(Describe, r.group_id())]
        }
        _ => return Ok(acl_needs(api)),
    })
}

/// ACL and SCRAM user management: Describe on the cluster to list, Alter to change (as
/// Kafka).
fn acl_needs(api: ApiKey) -> Vec<Need<'static>> {
    match api {
        ApiKey::DescribeAcls | ApiKey::DescribeUserScramCredentials => {
            vec![Need::Cluster(Operation::Describe)]
        }
        ApiKey::CreateAcls | ApiKey::DeleteAcls | ApiKey::AlterUserScramCredentials => {
            vec![Need::Cluster(Operation::Alter)]
        }
        // Every API is named above; a new one is refused until it is named.
        _ => vec![Need::Cluster(Operation::All)],
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use borges_protocol::acl::{Acl, PatternType, Permission};

    fn finish<T>(build: impl FnOnce(&mut flatbuffers::FlatBufferBuilder<'static>) -> T) -> Vec<u8>
    where
        T: Into<flatbuffers::WIPOffset<flatbuffers::UnionWIPOffset>>,
    {
        let mut fbb = flatbuffers::FlatBufferBuilder::new();
        let root = build(&mut fbb).into();
        fbb.finish_minimal(root);
        fbb.finished_data().to_vec()
    }

    fn topics_of_epochs(replica_id: i32) -> Vec<u8> {
        let mut r = m::OffsetForLeaderEpochRequestT::default();
        r.replica_id = replica_id;
        let mut t = m::OffsetForLeaderEpochTopicT::default();
        t.name = "t".into();
        r.topics = Some(vec![t]);
        finish(|fbb| r.pack(fbb).as_union_value())
    }

    #[test]
    fn replica_requests_need_cluster_action_and_client_ones_the_topic() {
        use Operation::*;
        let client = topics_of_epochs(-1);
        let follower = topics_of_epochs(2);
        assert_eq!(
            needs(ApiKey::OffsetForLeaderEpoch, &client).unwrap(),
            vec![],
            "a client's topics are checked per topic by the handler"
        );
        assert_eq!(
            needs(ApiKey::OffsetForLeaderEpoch, &follower).unwrap(),
            vec![Need::Cluster(ClusterAction)]
        );
        let mut f = m::FetchRequestT::default();
        f.replica_id = 1;
        let mut t = m::FetchTopicT::default();
        t.name = "t".into();
        f.topics = Some(vec![t]);
        let fetch = finish(|fbb| f.pack(fbb).as_union_value());
        assert_eq!(
            needs(ApiKey::Fetch, &fetch).unwrap(),
            vec![Need::Cluster(ClusterAction)]
        );
    }

    fn broker_kind() -> m::ConfigResourceType {
        m::ConfigResourceType::Broker
    }

    #[test]
    fn groups_and_broker_configs() {
        use Operation::*;
        let mut h = m::ConsumerGroupHeartbeatRequestT::default();
        h.group_id = "g".into();
        let heartbeat = finish(|fbb| h.pack(fbb).as_union_value());
        assert_eq!(
            needs(ApiKey::ConsumerGroupHeartbeat, &heartbeat).unwrap(),
            vec![Need::Group(Read, "g")]
        );
        let mut c = m::DescribeConfigsRequestT::default();
        let mut broker = m::DescribeConfigsResourceT::default();
        broker.resource_type = m::ConfigResourceType::Broker;
        broker.resource_name = "1".into();
        let mut topic = m::DescribeConfigsResourceT::default();
        topic.resource_name = "t".into();
        c.resources = Some(vec![broker, topic]);
        let configs = finish(|fbb| c.pack(fbb).as_union_value());
        assert_eq!(
            needs(ApiKey::DescribeConfigs, &configs).unwrap(),
            vec![],
            "checked per resource by the handler"
        );
        assert_eq!(
            config_need(DescribeConfigs, broker_kind(), "1"),
            Need::Cluster(DescribeConfigs)
        );
        assert_eq!(
            config_need(AlterConfigs, m::ConfigResourceType::Topic, "t"),
            Need::Topic(AlterConfigs, "t")
        );
        for api in ApiKey::ALL {
            let empty = finish(|fbb| {
                let t = fbb.start_table();
                fbb.end_table(t).as_union_value()
            });
            // Required fields make some empty messages invalid; none may panic.
            let _ = needs(*api, &empty);
        }
    }

    #[test]
    fn refusals_carry_their_code_and_super_users_pass() {
        let settings = crate::config::SecuritySettings {
            authorizer_enabled: true,
            super_users: vec!["User:admin".into()],
            ..crate::config::SecuritySettings::default()
        };
        let write = Acl {
            principal: "User:p".into(),
            resource_type: ResourceType::Topic,
            resource_name: "logs".into(),
            pattern: PatternType::Literal,
            operation: Operation::Write,
            permission: Permission::Allow,
        };
        let a = Authorizer::new(&settings, vec![write]);
        let code = |need: Need<'_>| allowed(&a, "User:p", &need).err().map(|f| f.code);
        assert_eq!(code(Need::ProducerId), None, "Write on some topic");
        assert_eq!(code(Need::Topic(Operation::Describe, "logs")), None);
        assert_eq!(
            code(Need::CreateTopic("logs")),
            Some(ErrorCode::TopicAuthorizationFailed)
        );
        assert_eq!(
            code(Need::Group(Operation::Read, "g")),
            Some(ErrorCode::GroupAuthorizationFailed)
        );
        assert_eq!(
            code(Need::Cluster(Operation::Alter)),
            Some(ErrorCode::ClusterAuthorizationFailed)
        );
        let empty = finish(|fbb| {
            let t = fbb.start_table();
            fbb.end_table(t).as_union_value()
        });
        assert!(request(&a, "User:admin", ApiKey::CreateAcls, &empty).is_ok());
        assert!(request(&a, "User:p", ApiKey::CreateAcls, &empty).is_err());
    }
}
