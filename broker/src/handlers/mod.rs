//! Request handlers, one module per API family.
//!
//! [`handle`] runs a request's ordered phase (see `connection`) and returns the future that
//! completes it. Handlers parse the verified flatbuffers message into owned values first, so the
//! completion future holds no borrow of the frame.

pub mod admin;
pub mod fetch;
pub mod groups;
pub mod metadata;
pub mod offsets;
pub mod produce;

use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;

use borges_protocol::frame::Frame;
use borges_protocol::ApiKey;

use crate::core::Core;
use crate::wire::Response;

/// A request's completion.
pub type Completion = Pin<Box<dyn Future<Output = Option<Response>>>>;

/// APIs this build serves; ApiVersions lists exactly these.
pub fn served(api: ApiKey) -> bool {
    matches!(
        api,
        ApiKey::ApiVersions
            | ApiKey::Metadata
            | ApiKey::CreateTopics
            | ApiKey::DeleteTopics
            | ApiKey::DescribeConfigs
            | ApiKey::AlterConfigs
            | ApiKey::Produce
            | ApiKey::Fetch
            | ApiKey::ListOffsets
            | ApiKey::CreatePartitions
            | ApiKey::FindCoordinator
            | ApiKey::ConsumerGroupHeartbeat
            | ApiKey::OffsetCommit
            | ApiKey::OffsetFetch
            | ApiKey::ListGroups
            | ApiKey::DescribeGroups
            | ApiKey::DeleteGroups
    )
}

/// Runs the ordered phase of a request and returns its completion.
pub async fn handle(core: &Rc<Core>, api: ApiKey, frame: Frame, peer: &Rc<str>) -> Completion {
    match api {
        ApiKey::Produce => produce::handle(core, frame).await,
        ApiKey::Fetch => Box::pin(fetch::handle(core.clone(), frame)),
        ApiKey::ListOffsets => Box::pin(offsets::handle(core.clone(), frame)),
        ApiKey::ApiVersions => Box::pin(metadata::api_versions(core.clone(), frame)),
        ApiKey::Metadata => Box::pin(metadata::metadata(core.clone(), frame)),
        ApiKey::DescribeConfigs => Box::pin(admin::describe_configs(core.clone(), frame)),
        ApiKey::CreateTopics
        | ApiKey::DeleteTopics
        | ApiKey::AlterConfigs
        | ApiKey::CreatePartitions => Box::pin(admin::controller_request(core.clone(), api, frame)),
        ApiKey::FindCoordinator
        | ApiKey::ConsumerGroupHeartbeat
        | ApiKey::OffsetCommit
        | ApiKey::OffsetFetch
        | ApiKey::ListGroups
        | ApiKey::DescribeGroups
        | ApiKey::DeleteGroups => Box::pin(groups::handle(core.clone(), api, frame, peer.clone())),
        ApiKey::OffsetForLeaderEpoch => Box::pin(async { None }),
    }
}
