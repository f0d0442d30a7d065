//! Request handlers, one module per API family.
//!
//! [`handle`] runs a request's ordered phase (see `connection`) and returns the future that
//! completes it. Handlers parse the verified flatbuffers message into owned values first, so the
//! completion future holds no borrow of the frame.

pub mod acls;
pub mod admin;
pub mod epochs;
pub mod fetch;
pub mod groups;
pub mod metadata;
pub mod offsets;
pub mod produce;
pub mod producer;
pub mod scram;

use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;

use borges_protocol::frame::Frame;
use borges_protocol::ApiKey;

use crate::shard::Shard;
use crate::wire::Response;

/// A request's completion.
pub type Completion = Pin<Box<dyn Future<Output = Option<Response>>>>;

/// APIs this build serves (the ApiKey table says which); ApiVersions lists exactly these.
pub fn served(api: ApiKey) -> bool {
    api.is_served()
}

/// Who sent a request: the peer's host and the connection's principal.
pub struct Requester<'a> {
    /// The peer's host.
    pub peer: &'a Rc<str>,
    /// `User:NAME` (SASL), `User:SUBJECT` (mTLS) or `User:ANONYMOUS`.
    pub principal: &'a Rc<str>,
}

/// Runs the ordered phase of a request and returns its completion.
pub async fn handle(
    shard: &Rc<Shard>,
    api: ApiKey,
    frame: Frame,
    from: Requester<'_>,
) -> Completion {
    let (peer, principal) = (from.peer, from.principal);
    match api {
        ApiKey::Produce => produce::handle(shard, frame, principal).await,
        ApiKey::Fetch => Box::pin(fetch::handle(shard.clone(), frame, principal.clone())),
        ApiKey::ListOffsets => Box::pin(offsets::handle(shard.clone(), frame, principal.clone())),
        ApiKey::ApiVersions => Box::pin(metadata::api_versions(shard.clone(), frame)),
        ApiKey::Metadata => Box::pin(metadata::metadata(shard.clone(), frame, principal.clone())),
        ApiKey::DescribeConfigs => {
            let principal = principal.clone();
            Box::pin(admin::describe_configs(shard.clone(), frame, principal))
        }
        ApiKey::CreateTopics
        | ApiKey::DeleteTopics
        | ApiKey::AlterConfigs
        | ApiKey::CreatePartitions => {
            let principal = principal.clone();
            Box::pin(admin::controller_request(
                shard.clone(),
                api,
                frame,
                principal,
            ))
        }
        ApiKey::FindCoordinator
        | ApiKey::ConsumerGroupHeartbeat
        | ApiKey::OffsetCommit
        | ApiKey::OffsetFetch
        | ApiKey::ListGroups
        | ApiKey::DescribeGroups
        | ApiKey::DeleteGroups => {
            let from = (peer.clone(), principal.clone());
            Box::pin(groups::handle(shard.clone(), api, frame, from))
        }
        ApiKey::InitProducerId => Box::pin(producer::init_producer_id(shard.clone(), frame)),
        ApiKey::OffsetForLeaderEpoch => {
            Box::pin(epochs::handle(shard.clone(), frame, principal.clone()))
        }
        ApiKey::CreateAcls => Box::pin(acls::create(shard.clone(), frame)),
        ApiKey::DescribeAcls => Box::pin(acls::describe(shard.clone(), frame)),
        ApiKey::DeleteAcls => Box::pin(acls::delete(shard.clone(), frame)),
        ApiKey::AlterUserScramCredentials => Box::pin(scram::alter(shard.clone(), frame)),
        ApiKey::DescribeUserScramCredentials => Box::pin(scram::describe(shard.clone(), frame)),
        // With SASL on, the connection's authenticator answers these before dispatch.
        ApiKey::SaslHandshake | ApiKey::SaslAuthenticate => {
            let response = crate::sasl::not_enabled(&frame.header);
            Box::pin(async move { Some(response) })
        }
    }
}
