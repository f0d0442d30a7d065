//! Flatbuffers message verification for every request and response type: the first input byte
//! selects the API and side; the rest is the message. A message that verifies must be fully
//! readable (unpacked into the object API) without panicking; Produce and Fetch ranges are
//! resolved against a payload region whose size also comes from the input.
#![no_main]

use borges_protocol::message::{self, decode_message, MessageLimits};
use borges_protocol::{wire, ApiKey};
use libfuzzer_sys::fuzz_target;

macro_rules! unpack_all {
    ($key:expr, $is_response:expr, $msg:expr, $( $api:ident => $request:ident, $response:ident; )*) => {
        match $key {
            $( ApiKey::$api => {
                if $is_response {
                    if let Ok(m) = decode_message::<wire::$response>($msg) {
                        let _ = m.unpack();
                    }
                } else if let Ok(m) = decode_message::<wire::$request>($msg) {
                    let _ = m.unpack();
                }
            } )*
        }
    };
}

fuzz_target!(|data: &[u8]| {
    let Some((&selector, msg)) = data.split_first() else {
        return;
    };
    let key = ApiKey::ALL[usize::from(selector >> 1) % ApiKey::ALL.len()];
    let is_response = selector & 1 == 1;
    let limits = MessageLimits::default();
    let verified = if is_response {
        message::verify_response(key, msg, &limits).is_ok()
    } else {
        message::verify_request(key, msg, &limits).is_ok()
    };
    let _ = message::decode_error_response(msg);
    if !verified {
        return;
    }
    let payload_size_bytes = usize::from(selector) * 97;
    if let (ApiKey::Produce, false) = (key, is_response) {
        if let Ok(r) = decode_message::<wire::ProduceRequest>(msg) {
            if let Ok(ranges) = message::produce_payload_ranges(&r, payload_size_bytes) {
                assert!(ranges.iter().all(|r| r.end <= payload_size_bytes));
                assert!(message::check_disjoint(&ranges).is_ok());
            }
        }
    }
    if let (ApiKey::Fetch, true) = (key, is_response) {
        if let Ok(r) = decode_message::<wire::FetchResponse>(msg) {
            let _ = message::fetch_payload_ranges(&r, payload_size_bytes);
        }
    }
    unpack_all!(key, is_response, msg,
        ApiVersions => ApiVersionsRequest, ApiVersionsResponse;
        Metadata => MetadataRequest, MetadataResponse;
        CreateTopics => CreateTopicsRequest, CreateTopicsResponse;
        DeleteTopics => DeleteTopicsRequest, DeleteTopicsResponse;
        DescribeConfigs => DescribeConfigsRequest, DescribeConfigsResponse;
        AlterConfigs => AlterConfigsRequest, AlterConfigsResponse;
        Produce => ProduceRequest, ProduceResponse;
        Fetch => FetchRequest, FetchResponse;
        ListOffsets => ListOffsetsRequest, ListOffsetsResponse;
        FindCoordinator => FindCoordinatorRequest, FindCoordinatorResponse;
        ConsumerGroupHeartbeat => ConsumerGroupHeartbeatRequest, ConsumerGroupHeartbeatResponse;
        OffsetCommit => OffsetCommitRequest, OffsetCommitResponse;
        OffsetFetch => OffsetFetchRequest, OffsetFetchResponse;
        ListGroups => ListGroupsRequest, ListGroupsResponse;
        DescribeGroups => DescribeGroupsRequest, DescribeGroupsResponse;
        DeleteGroups => DeleteGroupsRequest, DeleteGroupsResponse;
        OffsetForLeaderEpoch => OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse;
        CreatePartitions => CreatePartitionsRequest, CreatePartitionsResponse;
        InitProducerId => InitProducerIdRequest, InitProducerIdResponse;
        SaslHandshake => SaslHandshakeRequest, SaslHandshakeResponse;
        SaslAuthenticate => SaslAuthenticateRequest, SaslAuthenticateResponse;
        CreateAcls => CreateAclsRequest, CreateAclsResponse;
        DescribeAcls => DescribeAclsRequest, DescribeAclsResponse;
        DeleteAcls => DeleteAclsRequest, DeleteAclsResponse;
        AlterUserScramCredentials =>
            AlterUserScramCredentialsRequest, AlterUserScramCredentialsResponse;
        DescribeUserScramCredentials =>
            DescribeUserScramCredentialsRequest, DescribeUserScramCredentialsResponse;
    );
});
