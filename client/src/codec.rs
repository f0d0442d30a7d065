//! Encoding requests and decoding responses with the generated flatbuffers object API
//! (`wire::*T` types: plain owned data). Pure functions, no IO.

use borges_protocol::{wire, DecodeError};
use flatbuffers::{FlatBufferBuilder, WIPOffset};

use crate::error::{ClientError, Result};

/// Finishes a message built by `build` and returns its bytes.
pub(crate) fn encode<T>(
    build: impl FnOnce(&mut FlatBufferBuilder<'static>) -> WIPOffset<T>,
) -> Vec<u8> {
    let mut fbb = FlatBufferBuilder::with_capacity(256);
    let root = build(&mut fbb);
    fbb.finish_minimal(root);
    fbb.finished_data().to_vec()
}

/// Builds a generated `wire::*T` object (they are `#[non_exhaustive]`, so struct
/// expressions are not allowed): `obj!(wire::FooT { a: 1, b })` starts from `Default` and sets
/// each named field.
macro_rules! obj {
    ($($ty:ident)::+ { $($field:ident $(: $value:expr)?),* $(,)? }) => {{
        #[allow(clippy::needless_update)]
        let mut o = $($ty)::+::default();
        $( crate::codec::obj!(@set o, $field $(, $value)?); )*
        o
    }};
    (@set $o:ident, $field:ident, $value:expr) => { $o.$field = $value; };
    (@set $o:ident, $field:ident) => { $o.$field = $field; };
}
pub(crate) use obj;

/// Verifies and unpacks the response message of `frame` as `wire::$ty`.
macro_rules! decode {
    ($ty:ident, $frame:expr) => {
        flatbuffers::root::<borges_protocol::wire::$ty>(&$frame.message)
            .map(|m| m.unpack())
            .map_err(|e| crate::codec::invalid_message(stringify!($ty), e))
    };
}
pub(crate) use decode;

pub(crate) fn invalid_message(what: &str, e: flatbuffers::InvalidFlatbuffer) -> ClientError {
    ClientError::Decode(DecodeError::InvalidMessage(format!("{what}: {e}")))
}

/// The bytes of a payload range inside a frame's (frozen) payload region, without copying;
/// checked against the region.
pub(crate) fn payload_slice(
    payload: &bytes::Bytes,
    range: Option<&wire::PayloadRangeT>,
) -> Result<bytes::Bytes> {
    let Some(range) = range else {
        return Ok(bytes::Bytes::new());
    };
    let start = range.offset as usize;
    let end = start.checked_add(range.length as usize);
    match end {
        Some(end) if end <= payload.len() => Ok(payload.slice(start..end)),
        _ => Err(ClientError::Decode(DecodeError::PayloadRange {
            offset: u64::from(range.offset),
            length: u64::from(range.length),
            payload_size_bytes: payload.len() as u64,
        })),
    }
}

/// A Metadata request for `topics` (`None`: every topic).
pub(crate) fn metadata_request(topics: Option<&[String]>) -> Vec<u8> {
    let request = obj!(wire::MetadataRequestT {
        topics: topics.map(<[String]>::to_vec),
        all_topics: topics.is_none(),
    });
    encode(|fbb| request.pack(fbb))
}

#[cfg(test)]
mod tests {
    use super::*;
    use borges_protocol::frame::{encode_frame, FrameDecoder, FLAG_RESPONSE};

    #[test]
    fn metadata_request_round_trips() {
        let bytes = metadata_request(Some(&["a".to_string(), "b".to_string()]));
        let request = flatbuffers::root::<wire::MetadataRequest>(&bytes)
            .unwrap()
            .unpack();
        assert_eq!(request.topics.unwrap(), vec!["a", "b"]);
        assert!(!request.all_topics);
        let all = metadata_request(None);
        let request = flatbuffers::root::<wire::MetadataRequest>(&all)
            .unwrap()
            .unpack();
        assert!(request.all_topics);
        assert!(request.topics.is_none());
    }

    #[test]
    fn payload_ranges_outside_the_region_are_refused() {
        let mut buf = bytes::BytesMut::from(
            &encode_frame(7, 0, FLAG_RESPONSE, 1, b"m", b"0123456789").unwrap()[..],
        );
        let frame = FrameDecoder::new(1 << 20)
            .decode(&mut buf)
            .unwrap()
            .unwrap();
        let payload = frame.payload.freeze();
        let ok = payload_slice(
            &payload,
            Some(&obj!(wire::PayloadRangeT {
                offset: 2,
                length: 3
            })),
        )
        .unwrap();
        assert_eq!(&ok[..], b"234");
        assert!(payload_slice(
            &payload,
            Some(&obj!(wire::PayloadRangeT {
                offset: 8,
                length: 3
            }))
        )
        .is_err());
        assert!(payload_slice(
            &payload,
            Some(&obj!(wire::PayloadRangeT {
                offset: u32::MAX,
                length: u32::MAX
            }))
        )
        .is_err());
        assert!(payload_slice(&payload, None).unwrap().is_empty());
    }

    #[test]
    fn garbage_messages_are_typed_decode_errors() {
        let mut buf = bytes::BytesMut::from(
            &encode_frame(1, 0, FLAG_RESPONSE, 1, &[0xff; 3], b"").unwrap()[..],
        );
        let frame = FrameDecoder::new(1 << 20)
            .decode(&mut buf)
            .unwrap()
            .unwrap();
        let result: Result<wire::MetadataResponseT> = decode!(MetadataResponse, frame);
        assert!(matches!(result, Err(ClientError::Decode(_))));
    }
}
