//! Routes requests to their handlers, on the connection's core.

use borges_protocol::frame::{Frame, FrameHeader};
use borges_protocol::{ApiKey, ErrorCode};
use borges_runtime::task::{self, Task};
use std::rc::Rc;

use crate::failure::Failure;
use crate::handlers;
use crate::request_memory::MemoryPermit;
use crate::shard::Shard;
use crate::wire::{self, Response};

/// A request being completed; resolves to the response to write (none for acks=0 produces).
pub type ResponseTask = Task<Option<Response>>;

/// Dispatches one request. Runs the ordered phase now and returns the completion task. The
/// frame's memory permit is released when the task finishes.
pub async fn request(
    shard: &Rc<Shard>,
    frame: Frame,
    permit: MemoryPermit,
    from: handlers::Requester<'_>,
) -> ResponseTask {
    let header = frame.header;
    let started = borges_runtime::time::Instant::now();
    let checked = served_api(&header).and_then(|api| {
        verify_message(api, &frame.message)?;
        Ok(api)
    });
    let api = match checked {
        Ok(api) => api,
        Err(failure) if ApiKey::from_u16(header.api_key) == Some(ApiKey::ApiVersions) => {
            // Kafka's rule: ApiVersions is always answered with its version-0 body, so that a
            // client of any version learns what this broker supports.
            shard.metrics().count_request(header.api_key, true);
            let response = handlers::metadata::api_versions_v0(shard, &header, &failure);
            return task::spawn(async move {
                drop(permit);
                Some(response)
            });
        }
        Err(failure) => {
            shard.metrics().count_request(header.api_key, true);
            let mut response = wire::error_response(&header, &failure);
            // A Produce whose message cannot be read may have had acks = 0 (no answer
            // expected): after this answer the connection closes, so correlation cannot drift.
            if header.api_key == ApiKey::Produce as u16 && failure.code == ErrorCode::MalformedFrame
            {
                response = response.then_close();
            }
            return task::spawn(async move {
                drop(permit);
                Some(response)
            });
        }
    };
    if let Err(failure) = authorize(shard, api, &frame, from.principal) {
        shard.metrics().count_request(header.api_key, true);
        if let Some(resource) = crate::acl::check::refused_resource(failure.code) {
            shard.metrics().count_authorization_failure(api, resource);
        }
        tracing::debug!(principal = %from.principal, "{api} refused: {failure}");
        // Produce is never refused whole (its handler answers per topic), so every refused
        // request expects an answer.
        let response = wire::error_response(&header, &failure);
        return task::spawn(async move {
            drop(permit);
            Some(response)
        });
    }
    shard.metrics().count_request(header.api_key, false);
    let pending = handlers::handle(shard, api, frame, from).await;
    let shard = shard.clone();
    task::spawn(async move {
        let response = pending.await;
        drop(permit);
        shard.metrics().record_latency(api, started.elapsed());
        response
    })
}

/// Checks the connection's principal against this core's ACLs (`acl::check`), before the
/// request is dispatched or forwarded.
fn authorize(shard: &Shard, api: ApiKey, frame: &Frame, principal: &str) -> Result<(), Failure> {
    let authorizer = shard.authorizer();
    crate::acl::check::request(&authorizer, principal, api, &frame.message)
}

/// Verifies the request's flatbuffers message (within the protocol's limits) for its API; a
/// message that does not verify is answered with an `ErrorResponse` before any handler runs.
fn verify_message(api: ApiKey, message: &[u8]) -> Result<(), Failure> {
    use borges_protocol::wire as m;
    match api {
        ApiKey::ApiVersions => wire::verify::<m::ApiVersionsRequest>(message).map(drop),
        ApiKey::Metadata => wire::verify::<m::MetadataRequest>(message).map(drop),
        ApiKey::CreateTopics => wire::verify::<m::CreateTopicsRequest>(message).map(drop),
        ApiKey::DeleteTopics => wire::verify::<m::DeleteTopicsRequest>(message).map(drop),
        ApiKey::DescribeConfigs => wire::verify::<m::DescribeConfigsRequest>(message).map(drop),
        ApiKey::AlterConfigs => wire::verify::<m::AlterConfigsRequest>(message).map(drop),
        ApiKey::Produce => wire::verify::<m::ProduceRequest>(message).map(drop),
        ApiKey::Fetch => wire::verify::<m::FetchRequest>(message).map(drop),
        ApiKey::ListOffsets => wire::verify::<m::ListOffsetsRequest>(message).map(drop),
        ApiKey::CreatePartitions => wire::verify::<m::CreatePartitionsRequest>(message).map(drop),
        ApiKey::FindCoordinator => wire::verify::<m::FindCoordinatorRequest>(message).map(drop),
        ApiKey::ConsumerGroupHeartbeat => {
            wire::verify::<m::ConsumerGroupHeartbeatRequest>(message).map(drop)
        }
        ApiKey::OffsetCommit => wire::verify::<m::OffsetCommitRequest>(message).map(drop),
        ApiKey::OffsetFetch => wire::verify::<m::OffsetFetchRequest>(message).map(drop),
        ApiKey::ListGroups => wire::verify::<m::ListGroupsRequest>(message).map(drop),
        ApiKey::DescribeGroups => wire::verify::<m::DescribeGroupsRequest>(message).map(drop),
        ApiKey::DeleteGroups => wire::verify::<m::DeleteGroupsRequest>(message).map(drop),
        ApiKey::OffsetForLeaderEpoch => {
            wire::verify::<m::OffsetForLeaderEpochRequest>(message).map(drop)
        }
        ApiKey::InitProducerId => wire::verify::<m::InitProducerIdRequest>(message).map(drop),
        ApiKey::SaslHandshake => wire::verify::<m::SaslHandshakeRequest>(message).map(drop),
        ApiKey::SaslAuthenticate => wire::verify::<m::SaslAuthenticateRequest>(message).map(drop),
        ApiKey::CreateAcls => wire::verify::<m::CreateAclsRequest>(message).map(drop),
        ApiKey::DescribeAcls => wire::verify::<m::DescribeAclsRequest>(message).map(drop),
        ApiKey::DeleteAcls => wire::verify::<m::DeleteAclsRequest>(message).map(drop),
        ApiKey::AlterUserScramCredentials => {
            wire::verify::<m::AlterUserScramCredentialsRequest>(message).map(drop)
        }
        ApiKey::DescribeUserScramCredentials => {
            wire::verify::<m::DescribeUserScramCredentialsRequest>(message).map(drop)
        }
    }
}

/// The API of a request this broker serves, or why it is refused.
fn served_api(header: &FrameHeader) -> Result<ApiKey, Failure> {
    let Some(api) = ApiKey::from_u16(header.api_key) else {
        return Err(Failure::new(
            ErrorCode::UnsupportedApi,
            format!("unknown API key {}", header.api_key),
        ));
    };
    if !handlers::served(api) {
        return Err(Failure::new(
            ErrorCode::UnsupportedApi,
            format!("{api} is not served by this broker yet"),
        ));
    }
    if header.api_version < api.min_version() || header.api_version > api.max_version() {
        return Err(Failure::new(
            ErrorCode::UnsupportedVersion,
            format!(
                "{api} version {} is not supported; supported versions are {}..={}",
                header.api_version,
                api.min_version(),
                api.max_version()
            ),
        ));
    }
    if header.is_response() {
        return Err(Failure::new(
            ErrorCode::InvalidRequest,
            "a client sent a frame flagged as a response",
        ));
    }
    Ok(api)
}
