//! Flatbuffers messages inside frames, as both ends use them:
//!
//! - **Decoding**: [`decode_message`] verifies a root table with bounded
//!   [`flatbuffers::VerifierOptions`] ([`MessageLimits`]) before anything reads it, and maps every
//!   failure to [`DecodeError::InvalidMessage`]. [`verify_request`] / [`verify_response`] check a
//!   message against the root table of an [`ApiKey`].
//! - **Payload ranges**: [`resolve_payload_range`] turns a [`wire::PayloadRange`] into a checked
//!   `Range<usize>` inside the frame's payload region; [`produce_payload_ranges`] also refuses
//!   overlapping ranges, so every partition of a Produce request owns its bytes.
//! - **Encoding**: [`encode_message_head`] writes the frame header and the message for a payload
//!   that the caller writes separately (spliced from a file, vectored write);
//!   [`encode_message`] writes all three into one buffer. [`MessageHead`] carries the header
//!   fields and knows how a response echoes its request.
//! - **Errors**: [`encode_error_response`] / [`decode_error_response`] for the `ErrorResponse`
//!   sent with `FLAG_RESPONSE | FLAG_ERROR`.

use std::ops::Range;

use bytes::{BufMut, BytesMut};
use flatbuffers::{Allocator, FlatBufferBuilder, Follow, Verifiable, VerifierOptions, WIPOffset};

use crate::api::{wire, ApiKey};
use crate::error::{DecodeError, EncodeError, ErrorCode};
use crate::frame::{FrameHeader, FLAG_ERROR, FLAG_RESPONSE, FRAME_HEADER_SIZE_BYTES};

/// Deepest nesting of tables a message may have (the schema needs 4).
pub const MESSAGE_DEPTH_MAX: usize = 16;
/// Most tables one message may hold (a Metadata response for 10,000 partitions needs ~10,000).
pub const MESSAGE_TABLES_MAX: usize = 1 << 20;
/// Largest size a message may appear to have when its object graph is expanded into a tree
/// (guards against shared sub-objects that make verification quadratic).
pub const MESSAGE_APPARENT_SIZE_BYTES_MAX: usize = 256 * 1024 * 1024;
/// Longest `error_message` an [`encode_error_response`] writes; longer texts are cut at a
/// character boundary.
pub const ERROR_MESSAGE_SIZE_BYTES_MAX: usize = 1024;

/// Bounds applied while verifying a flatbuffers message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MessageLimits {
    /// Deepest table nesting.
    pub depth_max: usize,
    /// Most tables.
    pub tables_max: usize,
    /// Largest apparent (tree-expanded) size in bytes.
    pub apparent_size_bytes_max: usize,
}

impl Default for MessageLimits {
    fn default() -> Self {
        MessageLimits {
            depth_max: MESSAGE_DEPTH_MAX,
            tables_max: MESSAGE_TABLES_MAX,
            apparent_size_bytes_max: MESSAGE_APPARENT_SIZE_BYTES_MAX,
        }
    }
}

impl MessageLimits {
    /// The flatbuffers verifier options for these limits. Strings must be NUL-terminated, as
    /// every flatbuffers builder writes them.
    pub fn verifier_options(&self) -> VerifierOptions {
        VerifierOptions {
            max_depth: self.depth_max,
            max_tables: self.tables_max,
            max_apparent_size: self.apparent_size_bytes_max,
            ignore_missing_null_terminator: false,
        }
    }
}

/// Verifies `message` as a root table `T` with the default [`MessageLimits`] and returns the
/// accessor. Example: `decode_message::<wire::ProduceRequest>(&frame.message)`.
pub fn decode_message<'a, T>(message: &'a [u8]) -> Result<T::Inner, DecodeError>
where
    T: Follow<'a> + Verifiable + 'a,
{
    decode_message_with::<T>(message, &MessageLimits::default())
}

/// Verifies `message` as a root table `T` within `limits` and returns the accessor.
pub fn decode_message_with<'a, T>(
    message: &'a [u8],
    limits: &MessageLimits,
) -> Result<T::Inner, DecodeError>
where
    T: Follow<'a> + Verifiable + 'a,
{
    let options = limits.verifier_options();
    flatbuffers::root_with_opts::<T>(&options, message).map_err(|e| {
        let name = std::any::type_name::<T>();
        let name = name.rsplit("::").next().unwrap_or(name);
        DecodeError::InvalidMessage(format!("{name}: {e}"))
    })
}

macro_rules! api_roots {
    ($( $key:ident => $request:ident, $response:ident; )*) => {
        /// Verifies `message` as the request root table of `api_key` (`<Api>Request`).
        pub fn verify_request(
            api_key: ApiKey,
            message: &[u8],
            limits: &MessageLimits,
        ) -> Result<(), DecodeError> {
            match api_key {
                $( ApiKey::$key => decode_message_with::<wire::$request>(message, limits).map(drop), )*
            }
        }

        /// Verifies `message` as the response root table of `api_key` (`<Api>Response`).
        pub fn verify_response(
            api_key: ApiKey,
            message: &[u8],
            limits: &MessageLimits,
        ) -> Result<(), DecodeError> {
            match api_key {
                $( ApiKey::$key => decode_message_with::<wire::$response>(message, limits).map(drop), )*
            }
        }

        /// Name of the request root table of `api_key`.
        pub fn request_table_name(api_key: ApiKey) -> &'static str {
            match api_key { $( ApiKey::$key => stringify!($request), )* }
        }

        /// Name of the response root table of `api_key`.
        pub fn response_table_name(api_key: ApiKey) -> &'static str {
            match api_key { $( ApiKey::$key => stringify!($response), )* }
        }
    };
}

api_roots! {
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
}

/// A [`wire::PayloadRange`] for `length` bytes at `offset` in the payload region, checked to fit
/// the wire's `u32` fields.
pub fn payload_range(offset: usize, length: usize) -> Result<wire::PayloadRange, EncodeError> {
    let too_large = || EncodeError::PayloadRangeTooLarge {
        offset: offset as u64,
        length: length as u64,
    };
    let offset_u32 = u32::try_from(offset).map_err(|_| too_large())?;
    let length_u32 = u32::try_from(length).map_err(|_| too_large())?;
    offset_u32.checked_add(length_u32).ok_or_else(too_large)?;
    Ok(wire::PayloadRange::new(offset_u32, length_u32))
}

/// Resolves a payload range against a payload region of `payload_size_bytes`. An absent range
/// is the empty range `0..0` (no records).
pub fn resolve_payload_range(
    range: Option<&wire::PayloadRange>,
    payload_size_bytes: usize,
) -> Result<Range<usize>, DecodeError> {
    let Some(range) = range else {
        return Ok(0..0);
    };
    let offset = range.offset() as usize;
    let length = range.length() as usize;
    match offset.checked_add(length) {
        Some(end) if end <= payload_size_bytes => Ok(offset..end),
        _ => Err(DecodeError::PayloadRange {
            offset: offset as u64,
            length: length as u64,
            payload_size_bytes: payload_size_bytes as u64,
        }),
    }
}

/// Checks that no two non-empty ranges overlap (empty ranges own no bytes and never overlap).
pub fn check_disjoint(ranges: &[Range<usize>]) -> Result<(), DecodeError> {
    let mut order: Vec<&Range<usize>> = ranges.iter().filter(|r| !r.is_empty()).collect();
    order.sort_unstable_by_key(|r| (r.start, r.end));
    for pair in order.windows(2) {
        let (first, second) = (pair[0], pair[1]);
        if second.start < first.end {
            return Err(DecodeError::PayloadRangeOverlap {
                first_offset: first.start as u64,
                first_length: first.len() as u64,
                second_offset: second.start as u64,
                second_length: second.len() as u64,
            });
        }
    }
    Ok(())
}

/// The records range of every partition of a Produce request, in request order (topic by
/// topic, partition by partition), each inside the payload region and no two overlapping.
pub fn produce_payload_ranges(
    request: &wire::ProduceRequest<'_>,
    payload_size_bytes: usize,
) -> Result<Vec<Range<usize>>, DecodeError> {
    let mut ranges = Vec::new();
    for topic in request.topics().iter().flatten() {
        for partition in topic.partitions().iter().flatten() {
            ranges.push(resolve_payload_range(
                partition.records(),
                payload_size_bytes,
            )?);
        }
    }
    check_disjoint(&ranges)?;
    Ok(ranges)
}

/// The records range of every partition of a Fetch response, in response order, each inside
/// the payload region.
pub fn fetch_payload_ranges(
    response: &wire::FetchResponse<'_>,
    payload_size_bytes: usize,
) -> Result<Vec<Range<usize>>, DecodeError> {
    let mut ranges = Vec::new();
    for topic in response.topics().iter().flatten() {
        for partition in topic.partitions().iter().flatten() {
            ranges.push(resolve_payload_range(
                partition.records(),
                payload_size_bytes,
            )?);
        }
    }
    Ok(ranges)
}

/// The header fields of a frame to encode, apart from the sizes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MessageHead {
    /// Raw API key (raw so that an error response can echo a key this build does not know).
    pub api_key: u16,
    /// API version.
    pub api_version: u16,
    /// `FLAG_RESPONSE`, `FLAG_ERROR`.
    pub flags: u16,
    /// Correlation id.
    pub correlation_id: u32,
}

impl MessageHead {
    /// A request head.
    pub fn request(api_key: ApiKey, api_version: u16, correlation_id: u32) -> MessageHead {
        MessageHead {
            api_key: api_key as u16,
            api_version,
            flags: 0,
            correlation_id,
        }
    }

    /// The head of the response to `request`: same key, version and correlation id,
    /// `FLAG_RESPONSE`.
    pub fn response_to(request: &FrameHeader) -> MessageHead {
        MessageHead {
            api_key: request.api_key,
            api_version: request.api_version,
            flags: FLAG_RESPONSE,
            correlation_id: request.correlation_id,
        }
    }

    /// The head of an `ErrorResponse` to `request`: `FLAG_RESPONSE | FLAG_ERROR`.
    pub fn error_response_to(request: &FrameHeader) -> MessageHead {
        MessageHead {
            flags: FLAG_RESPONSE | FLAG_ERROR,
            ..MessageHead::response_to(request)
        }
    }

    /// The head of an `ErrorResponse` after a framing error, when no request header could be
    /// trusted: key 0, version 0, correlation id 0.
    pub fn error_response_to_stream() -> MessageHead {
        MessageHead {
            api_key: 0,
            api_version: 0,
            flags: FLAG_RESPONSE | FLAG_ERROR,
            correlation_id: 0,
        }
    }

    /// The full frame header for a message and payload of the given sizes.
    pub fn frame_header(
        &self,
        message_size_bytes: usize,
        payload_size_bytes: usize,
    ) -> Result<FrameHeader, EncodeError> {
        FrameHeader::new(
            self.api_key,
            self.api_version,
            self.flags,
            self.correlation_id,
            message_size_bytes,
            payload_size_bytes,
        )
        .ok_or(EncodeError::FrameTooLarge {
            size_bytes: (FRAME_HEADER_SIZE_BYTES as u64)
                .saturating_add(message_size_bytes as u64)
                .saturating_add(payload_size_bytes as u64),
        })
    }
}

/// Appends the frame header and `message` to `dst`, for a payload of `payload_size_bytes` that
/// the caller writes right after. Returns the header written.
pub fn encode_message_head_into(
    dst: &mut BytesMut,
    head: MessageHead,
    message: &[u8],
    payload_size_bytes: usize,
) -> Result<FrameHeader, EncodeError> {
    let header = head.frame_header(message.len(), payload_size_bytes)?;
    dst.reserve(FRAME_HEADER_SIZE_BYTES + message.len());
    dst.put_slice(&header.to_bytes());
    dst.put_slice(message);
    Ok(header)
}

/// The frame header and the message of a finished `builder`, for a payload of
/// `payload_size_bytes` written separately. Panics if `builder` is not finished (a programming
/// error, never input-driven).
pub fn encode_message_head<A: Allocator>(
    head: MessageHead,
    builder: &FlatBufferBuilder<'_, A>,
    payload_size_bytes: usize,
) -> Result<BytesMut, EncodeError> {
    let message = builder.finished_data();
    let mut out = BytesMut::with_capacity(FRAME_HEADER_SIZE_BYTES + message.len());
    encode_message_head_into(&mut out, head, message, payload_size_bytes)?;
    Ok(out)
}

/// A whole frame in one buffer: header, the message of a finished `builder`, then `payload`.
pub fn encode_message<A: Allocator>(
    head: MessageHead,
    builder: &FlatBufferBuilder<'_, A>,
    payload: &[u8],
) -> Result<BytesMut, EncodeError> {
    let message = builder.finished_data();
    let mut out = BytesMut::with_capacity(FRAME_HEADER_SIZE_BYTES + message.len() + payload.len());
    encode_message_head_into(&mut out, head, message, payload.len())?;
    out.put_slice(payload);
    Ok(out)
}

fn clip_to_char_boundary(text: &str, size_bytes_max: usize) -> &str {
    if text.len() <= size_bytes_max {
        return text;
    }
    let mut end = size_bytes_max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// Builds an `ErrorResponse` table in `fbb` (not finished). The message is cut to
/// [`ERROR_MESSAGE_SIZE_BYTES_MAX`].
pub fn build_error_response<'b, A: Allocator + 'b>(
    fbb: &mut FlatBufferBuilder<'b, A>,
    code: ErrorCode,
    message: Option<&str>,
) -> WIPOffset<wire::ErrorResponse<'b>> {
    let error_message =
        message.map(|m| fbb.create_string(clip_to_char_boundary(m, ERROR_MESSAGE_SIZE_BYTES_MAX)));
    wire::ErrorResponse::create(
        fbb,
        &wire::ErrorResponseArgs {
            error_code: code as u16,
            error_message,
        },
    )
}

/// A whole `ErrorResponse` frame (no payload). `head` is normally
/// [`MessageHead::error_response_to`] or [`MessageHead::error_response_to_stream`].
pub fn encode_error_response(head: MessageHead, code: ErrorCode, message: &str) -> BytesMut {
    let mut fbb =
        FlatBufferBuilder::with_capacity(64 + message.len().min(ERROR_MESSAGE_SIZE_BYTES_MAX));
    let root = build_error_response(&mut fbb, code, Some(message));
    fbb.finish_minimal(root);
    // Bounded: a header, a u16 and at most ERROR_MESSAGE_SIZE_BYTES_MAX bytes of text.
    match encode_message(head, &fbb, &[]) {
        Ok(frame) => frame,
        Err(e) => unreachable!("an ErrorResponse frame is a few KiB at most: {e}"),
    }
}

/// Reads an `ErrorResponse` message: its code and optional text.
pub fn decode_error_response(message: &[u8]) -> Result<(ErrorCode, Option<&str>), DecodeError> {
    let response = decode_message::<wire::ErrorResponse>(message)?;
    Ok((
        ErrorCode::from_u16(response.error_code()),
        response.error_message(),
    ))
}

/// A finished Produce request for partitions of one topic, each `(partition, its byte range of
/// the payload region)`: the request tools, benchmarks and tests send (the client SDK builds
/// requests spanning topics itself). Encode it with [`encode_message`] and the payload.
pub fn one_topic_produce_request(
    topic: &str,
    partitions: &[(i32, wire::PayloadRange)],
    acks: i16,
    timeout_ms: i32,
) -> FlatBufferBuilder<'static> {
    let mut fbb = FlatBufferBuilder::new();
    let partitions: Vec<_> = partitions
        .iter()
        .map(|(partition, records)| {
            wire::PartitionProduceData::create(
                &mut fbb,
                &wire::PartitionProduceDataArgs {
                    partition: *partition,
                    records: Some(records),
                },
            )
        })
        .collect();
    let partitions = fbb.create_vector(&partitions);
    let name = fbb.create_string(topic);
    let topic = wire::TopicProduceData::create(
        &mut fbb,
        &wire::TopicProduceDataArgs {
            name: Some(name),
            partitions: Some(partitions),
        },
    );
    let topics = fbb.create_vector(&[topic]);
    let root = wire::ProduceRequest::create(
        &mut fbb,
        &wire::ProduceRequestArgs {
            transactional_id: None,
            acks,
            timeout_ms,
            topics: Some(topics),
        },
    );
    fbb.finish_minimal(root);
    fbb
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::{FrameDecoder, FRAME_SIZE_BYTES_MAX_DEFAULT};

    fn produce_request(ranges: &[(u32, u32)]) -> FlatBufferBuilder<'static> {
        let partitions: Vec<_> = ranges
            .iter()
            .enumerate()
            .map(|(i, &(offset, length))| (i as i32, wire::PayloadRange::new(offset, length)))
            .collect();
        one_topic_produce_request("orders", &partitions, 1, 30_000)
    }

    #[test]
    fn produce_round_trip_with_separate_payload() {
        let payload = b"aaaabbbbbbcc";
        let fbb = produce_request(&[(0, 4), (4, 6), (10, 2)]);
        let head = MessageHead::request(ApiKey::Produce, 0, 42);
        let mut wire_bytes = encode_message_head(head, &fbb, payload.len()).unwrap();
        wire_bytes.put_slice(payload);
        assert_eq!(wire_bytes, encode_message(head, &fbb, payload).unwrap());

        let frame = FrameDecoder::new(FRAME_SIZE_BYTES_MAX_DEFAULT)
            .decode(&mut wire_bytes)
            .unwrap()
            .unwrap();
        assert_eq!(frame.header.api_key, ApiKey::Produce as u16);
        assert_eq!(frame.header.correlation_id, 42);
        verify_request(ApiKey::Produce, &frame.message, &MessageLimits::default()).unwrap();
        let request = decode_message::<wire::ProduceRequest>(&frame.message).unwrap();
        assert_eq!(request.acks(), 1);
        let ranges = produce_payload_ranges(&request, frame.payload.len()).unwrap();
        let parts: Vec<&[u8]> = ranges.iter().map(|r| &frame.payload[r.clone()]).collect();
        assert_eq!(parts, [&b"aaaa"[..], b"bbbbbb", b"cc"]);
    }

    #[test]
    fn out_of_bounds_and_overlapping_ranges_are_refused() {
        let fbb = produce_request(&[(0, 4), (3, 2)]);
        let request = decode_message::<wire::ProduceRequest>(fbb.finished_data()).unwrap();
        assert!(matches!(
            produce_payload_ranges(&request, 10),
            Err(DecodeError::PayloadRangeOverlap {
                first_offset: 0,
                second_offset: 3,
                ..
            })
        ));
        assert!(matches!(
            produce_payload_ranges(&request, 4),
            Err(DecodeError::PayloadRange { offset: 3, .. })
        ));
        let huge = wire::PayloadRange::new(u32::MAX, u32::MAX);
        assert!(resolve_payload_range(Some(&huge), u32::MAX as usize).is_err());
        assert_eq!(resolve_payload_range(None, 0).unwrap(), 0..0);
        // Empty ranges own no bytes.
        check_disjoint(&[0..4, 2..2, 4..8]).unwrap();
    }

    #[test]
    fn payload_range_checks_u32() {
        assert!(payload_range(0, u32::MAX as usize).is_ok());
        assert!(payload_range(1, u32::MAX as usize).is_err());
        assert!(payload_range(u32::MAX as usize + 1, 0).is_err());
    }

    #[test]
    fn wrong_root_type_and_garbage_are_invalid_messages() {
        let fbb = produce_request(&[(0, 4)]);
        for bad in [&[][..], &[1, 2, 3], &[0xff; 64]] {
            assert!(matches!(
                decode_message::<wire::ProduceRequest>(bad),
                Err(DecodeError::InvalidMessage(_))
            ));
        }
        // A missing required field is caught: an ErrorResponse with the default error code has
        // no field 0, which DeletableTopicResult requires (its `name`).
        let mut other = FlatBufferBuilder::new();
        let r = build_error_response(&mut other, ErrorCode::None, Some("x"));
        other.finish_minimal(r);
        assert!(decode_message::<wire::DeletableTopicResult>(other.finished_data()).is_err());
        assert!(decode_message::<wire::ErrorResponse>(other.finished_data()).is_ok());
        // Verifying against every request type must not panic.
        for &key in ApiKey::ALL {
            let _ = verify_request(key, fbb.finished_data(), &MessageLimits::default());
            let _ = verify_response(key, fbb.finished_data(), &MessageLimits::default());
        }
    }

    #[test]
    fn depth_and_table_limits_apply() {
        let fbb = produce_request(&[(0, 1), (1, 1), (2, 1)]);
        let tight = MessageLimits {
            tables_max: 3,
            ..MessageLimits::default()
        };
        let err = decode_message_with::<wire::ProduceRequest>(fbb.finished_data(), &tight);
        assert!(matches!(err, Err(DecodeError::InvalidMessage(m)) if m.contains("ProduceRequest")));
        let shallow = MessageLimits {
            depth_max: 1,
            ..MessageLimits::default()
        };
        assert!(
            decode_message_with::<wire::ProduceRequest>(fbb.finished_data(), &shallow).is_err()
        );
    }

    #[test]
    fn error_response_echoes_request_and_round_trips() {
        let request = FrameHeader::new(999, 3, 0, 77, 10, 0).unwrap();
        let mut bytes = encode_error_response(
            MessageHead::error_response_to(&request),
            ErrorCode::UnsupportedApi,
            "unknown API key 999",
        );
        let frame = FrameDecoder::new(FRAME_SIZE_BYTES_MAX_DEFAULT)
            .decode(&mut bytes)
            .unwrap()
            .unwrap();
        assert_eq!(frame.header.api_key, 999);
        assert_eq!(frame.header.api_version, 3);
        assert_eq!(frame.header.correlation_id, 77);
        assert!(frame.header.is_response() && frame.header.is_error());
        let (code, text) = decode_error_response(&frame.message).unwrap();
        assert_eq!(code, ErrorCode::UnsupportedApi);
        assert_eq!(text, Some("unknown API key 999"));
    }

    #[test]
    fn long_error_messages_are_clipped_on_a_char_boundary() {
        let text = "é".repeat(ERROR_MESSAGE_SIZE_BYTES_MAX);
        let mut bytes = encode_error_response(
            MessageHead::error_response_to_stream(),
            ErrorCode::MalformedFrame,
            &text,
        );
        let frame = FrameDecoder::new(FRAME_SIZE_BYTES_MAX_DEFAULT)
            .decode(&mut bytes)
            .unwrap()
            .unwrap();
        assert_eq!(frame.header.correlation_id, 0);
        let (_, clipped) = decode_error_response(&frame.message).unwrap();
        let clipped = clipped.unwrap();
        assert_eq!(clipped.len(), ERROR_MESSAGE_SIZE_BYTES_MAX);
        assert!(text.starts_with(clipped));
    }

    proptest::proptest! {
        #[test]
        fn check_disjoint_agrees_with_pairwise_comparison(
            spans in proptest::collection::vec((0usize..64, 0usize..16), 0..8),
        ) {
            let ranges: Vec<Range<usize>> = spans.iter().map(|&(s, l)| s..s + l).collect();
            let overlapping = ranges.iter().enumerate().any(|(i, a)| {
                ranges[i + 1..]
                    .iter()
                    .any(|b| !a.is_empty() && !b.is_empty() && a.start < b.end && b.start < a.end)
            });
            proptest::prop_assert_eq!(check_disjoint(&ranges).is_err(), overlapping);
        }
    }

    #[test]
    fn table_names_follow_the_api_names() {
        for &key in ApiKey::ALL {
            assert_eq!(request_table_name(key), format!("{}Request", key.name()));
            assert_eq!(response_table_name(key), format!("{}Response", key.name()));
        }
    }

    #[test]
    fn clipping_backs_off_to_the_start_of_a_cut_character() {
        assert_eq!(clip_to_char_boundary("aé", 2), "a");
        assert_eq!(clip_to_char_boundary("a€b", 3), "a");
        assert_eq!(clip_to_char_boundary("a€b", 4), "a€");
        assert_eq!(clip_to_char_boundary("abc", 3), "abc");
        assert_eq!(clip_to_char_boundary("abc", 2), "ab");
    }

    /// A Fetch response of one topic whose partitions carry `ranges` (or none when `None`).
    fn fetch_response(ranges: &[Option<(u32, u32)>]) -> FlatBufferBuilder<'static> {
        let mut fbb = FlatBufferBuilder::new();
        let partitions: Vec<_> = ranges
            .iter()
            .enumerate()
            .map(|(i, range)| {
                let records = range.map(|(offset, length)| wire::PayloadRange::new(offset, length));
                wire::FetchPartitionResponse::create(
                    &mut fbb,
                    &wire::FetchPartitionResponseArgs {
                        partition: i as i32,
                        records: records.as_ref(),
                        ..Default::default()
                    },
                )
            })
            .collect();
        let partitions = fbb.create_vector(&partitions);
        let name = fbb.create_string("orders");
        let topic = wire::FetchTopicResponse::create(
            &mut fbb,
            &wire::FetchTopicResponseArgs {
                name: Some(name),
                partitions: Some(partitions),
            },
        );
        let topics = fbb.create_vector(&[topic]);
        let root = wire::FetchResponse::create(
            &mut fbb,
            &wire::FetchResponseArgs {
                topics: Some(topics),
                ..Default::default()
            },
        );
        fbb.finish_minimal(root);
        fbb
    }

    #[test]
    fn fetch_payload_ranges_resolve_every_partition_in_order() {
        let fbb = fetch_response(&[Some((0, 3)), None, Some((3, 5))]);
        let response = decode_message::<wire::FetchResponse>(fbb.finished_data()).unwrap();
        assert_eq!(
            fetch_payload_ranges(&response, 8).unwrap(),
            [0..3, 0..0, 3..8]
        );
        assert!(matches!(
            fetch_payload_ranges(&response, 7),
            Err(DecodeError::PayloadRange {
                offset: 3,
                length: 5,
                payload_size_bytes: 7
            })
        ));
    }

    #[test]
    fn the_default_limits_admit_a_message_of_a_few_mib() {
        // A 4 MiB string: far below MESSAGE_APPARENT_SIZE_BYTES_MAX (256 MiB), so a smaller
        // default (a slip in the constant's product) would refuse real Metadata responses.
        let mut fbb = FlatBufferBuilder::new();
        let text = fbb.create_string(&"x".repeat(4 << 20));
        let root = wire::ErrorResponse::create(
            &mut fbb,
            &wire::ErrorResponseArgs {
                error_code: ErrorCode::UnknownServerError as u16,
                error_message: Some(text),
            },
        );
        fbb.finish_minimal(root);
        let (code, message) = decode_error_response(fbb.finished_data()).unwrap();
        assert_eq!(code, ErrorCode::UnknownServerError);
        assert_eq!(message.map(str::len), Some(4 << 20));
    }

    #[test]
    fn a_stream_error_response_is_flagged_response_and_error() {
        let head = MessageHead::error_response_to_stream();
        assert_eq!(
            (head.api_key, head.api_version, head.correlation_id),
            (0, 0, 0)
        );
        assert_eq!(head.flags, FLAG_RESPONSE | FLAG_ERROR);
        let request = FrameHeader::new(3, 2, 0, 9, 0, 0).unwrap();
        assert_eq!(
            MessageHead::error_response_to(&request).flags,
            FLAG_RESPONSE | FLAG_ERROR
        );
        assert_eq!(MessageHead::response_to(&request).flags, FLAG_RESPONSE);
    }
}
