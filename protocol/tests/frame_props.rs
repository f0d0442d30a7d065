//! Frames: round trips through the sans-IO decoder in arbitrary chunkings, pipelined frames, and
//! truncation and corruption at every byte offset (errors or "need more", never panics).

use borges_protocol::frame::{
    encode_frame, FrameDecoder, FrameHeader, FLAG_ERROR, FLAG_RESPONSE, FRAME_HEADER_SIZE_BYTES,
    FRAME_SIZE_BYTES_MAX_DEFAULT,
};
use borges_protocol::message::{decode_message, verify_request, MessageLimits};
use borges_protocol::{wire, ApiKey, DecodeError};
use bytes::{BufMut, BytesMut};
use proptest::prelude::*;

#[derive(Debug, Clone)]
struct FrameInput {
    api_key: u16,
    api_version: u16,
    flags: u16,
    correlation_id: u32,
    message: Vec<u8>,
    payload: Vec<u8>,
}

fn frame_strategy() -> impl Strategy<Value = FrameInput> {
    (
        any::<u16>(),
        any::<u16>(),
        prop_oneof![
            Just(0),
            Just(FLAG_RESPONSE),
            Just(FLAG_RESPONSE | FLAG_ERROR)
        ],
        any::<u32>(),
        prop::collection::vec(any::<u8>(), 0..200),
        prop::collection::vec(any::<u8>(), 0..600),
    )
        .prop_map(
            |(api_key, api_version, flags, correlation_id, message, payload)| FrameInput {
                api_key,
                api_version,
                flags,
                correlation_id,
                message,
                payload,
            },
        )
}

fn encode(f: &FrameInput) -> BytesMut {
    encode_frame(
        f.api_key,
        f.api_version,
        f.flags,
        f.correlation_id,
        &f.message,
        &f.payload,
    )
    .unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn pipelined_frames_decode_in_any_chunking(
        frames in prop::collection::vec(frame_strategy(), 1..6),
        chunk in 1usize..97,
    ) {
        let mut stream = Vec::new();
        for f in &frames {
            stream.extend_from_slice(&encode(f));
        }
        let mut decoder = FrameDecoder::new(FRAME_SIZE_BYTES_MAX_DEFAULT);
        let mut buf = BytesMut::new();
        let mut decoded = Vec::new();
        for piece in stream.chunks(chunk) {
            buf.put_slice(piece);
            while let Some(frame) = decoder.decode(&mut buf).unwrap() {
                decoded.push(frame);
            }
        }
        prop_assert!(buf.is_empty());
        prop_assert_eq!(decoded.len(), frames.len());
        for (d, f) in decoded.iter().zip(&frames) {
            prop_assert_eq!(d.header.api_key, f.api_key);
            prop_assert_eq!(d.header.api_version, f.api_version);
            prop_assert_eq!(d.header.flags, f.flags);
            prop_assert_eq!(d.header.correlation_id, f.correlation_id);
            prop_assert_eq!(&d.message[..], &f.message[..]);
            prop_assert_eq!(&d.payload[..], &f.payload[..]);
            prop_assert_eq!(d.header.payload_size_bytes(), f.payload.len());
        }
    }

    #[test]
    fn truncated_frames_need_more_bytes(f in frame_strategy()) {
        let bytes = encode(&f);
        for len in 0..bytes.len() {
            let mut prefix = BytesMut::from(&bytes[..len]);
            let mut decoder = FrameDecoder::new(FRAME_SIZE_BYTES_MAX_DEFAULT);
            prop_assert!(decoder.decode(&mut prefix).unwrap().is_none());
            prop_assert_eq!(prefix.len(), len, "a partial frame is never consumed");
            if len >= FRAME_HEADER_SIZE_BYTES {
                prop_assert_eq!(decoder.frame_size_bytes_next(), Some(bytes.len()));
            }
            prop_assert!(FrameHeader::decode(&bytes[..len.min(FRAME_HEADER_SIZE_BYTES - 1)], u32::MAX).is_err());
        }
    }

    #[test]
    fn every_header_corruption_is_an_error(f in frame_strategy(), flip in 1u8..=255) {
        let bytes = encode(&f);
        for at in 0..FRAME_HEADER_SIZE_BYTES {
            let mut bad = bytes.clone();
            bad[at] ^= flip;
            let mut decoder = FrameDecoder::new(FRAME_SIZE_BYTES_MAX_DEFAULT);
            prop_assert!(decoder.decode(&mut bad).is_err(), "byte {}", at);
        }
    }

    #[test]
    fn corruption_after_the_header_never_panics(f in frame_strategy(), flip in 1u8..=255) {
        // The header CRC does not cover the message or payload; the message verifier must catch
        // what it can, and nothing may panic.
        let bytes = encode(&f);
        for at in FRAME_HEADER_SIZE_BYTES..bytes.len() {
            let mut bad = bytes.clone();
            bad[at] ^= flip;
            let frame = FrameDecoder::new(FRAME_SIZE_BYTES_MAX_DEFAULT)
                .decode(&mut bad)
                .unwrap()
                .unwrap();
            for &key in ApiKey::ALL {
                let _ = verify_request(key, &frame.message, &MessageLimits::default());
            }
            let _ = decode_message::<wire::ErrorResponse>(&frame.message);
        }
    }

    #[test]
    fn arbitrary_streams_never_panic(stream in prop::collection::vec(any::<u8>(), 0..300)) {
        let mut buf = BytesMut::from(&stream[..]);
        let mut decoder = FrameDecoder::new(FRAME_SIZE_BYTES_MAX_DEFAULT);
        while let Ok(Some(_)) = decoder.decode(&mut buf) {}
    }

    #[test]
    fn frames_above_the_limit_are_refused_before_their_body(
        size in (4096u32 + 1)..u32::MAX,
    ) {
        let header = FrameHeader::new(7, 0, 0, 1, 0, (size as usize) - FRAME_HEADER_SIZE_BYTES)
            .unwrap();
        let mut buf = BytesMut::from(&header.to_bytes()[..]);
        let mut decoder = FrameDecoder::new(4096);
        let refused = matches!(
            decoder.decode(&mut buf),
            Err(DecodeError::FrameTooLarge { size_bytes_max: 4096, .. })
        );
        prop_assert!(refused);
    }
}

#[test]
fn header_fields_sit_at_their_documented_offsets() {
    let h = FrameHeader::new(0x0102, 0x0304, FLAG_RESPONSE, 0x0a0b_0c0d, 3, 5).unwrap();
    let b = h.to_bytes();
    assert_eq!(&b[0..4], &32u32.to_le_bytes());
    assert_eq!(&b[4..6], &24u16.to_le_bytes());
    assert_eq!(&b[6..8], &[0x02, 0x01]);
    assert_eq!(&b[8..10], &[0x04, 0x03]);
    assert_eq!(&b[10..12], &[0x01, 0x00]);
    assert_eq!(&b[12..16], &[0x0d, 0x0c, 0x0b, 0x0a]);
    assert_eq!(&b[16..20], &3u32.to_le_bytes());
    assert_eq!(&b[20..24], &crc32c::crc32c(&b[0..20]).to_le_bytes());
}
