//! Feeds bytes to the sans-IO frame decoder in chunks whose sizes come from the input, then
//! verifies each decoded frame's message against its API's request or response table. Nothing
//! may panic; a decoded frame must be consistent with its header.
//!
//! The first byte picks the mode. Raw (even): the rest of the input is the byte stream, so the
//! header checksum rejects almost every mutation. Checksummed (odd): the input is cut into
//! frames whose 20 header-field bytes come from the fuzzer (any sizes, flags, keys) and whose
//! checksum the harness computes, followed by as many body bytes as the next input byte says;
//! this drives the checks after the checksum and the message verification.
#![no_main]
use borges_protocol::frame::{FrameDecoder, FRAME_HEADER_SIZE_BYTES};
use borges_protocol::message::{self, MessageLimits};
use borges_protocol::ApiKey;
use bytes::{BufMut, BytesMut};
use libfuzzer_sys::fuzz_target;

/// Frames with fuzzer-chosen header fields and a correct header checksum.
fn checksummed_stream(mut input: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while input.len() >= 21 {
        let (fields, rest) = input.split_at(20);
        out.extend_from_slice(fields);
        out.extend_from_slice(&crc32c::crc32c(fields).to_le_bytes());
        let body = usize::from(rest[0]) * 4;
        let rest = &rest[1..];
        let take = body.min(rest.len());
        out.extend_from_slice(&rest[..take]);
        input = &rest[take..];
    }
    out
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, data)) = data.split_first() else {
        return;
    };
    let Some((&chunk_seed, stream)) = data.split_first() else {
        return;
    };
    let built;
    let stream = if mode & 1 == 1 {
        built = checksummed_stream(stream);
        &built[..]
    } else {
        stream
    };
    let chunk_size_bytes = usize::from(chunk_seed).max(1);
    // A small limit so that the size check is exercised; at least the decoder's minimum.
    let mut decoder = FrameDecoder::new(64 * 1024);
    let mut buf = BytesMut::new();
    let limits = MessageLimits::default();
    for chunk in stream.chunks(chunk_size_bytes) {
        buf.put_slice(chunk);
        loop {
            match decoder.decode(&mut buf) {
                Ok(Some(frame)) => {
                    let h = frame.header;
                    assert_eq!(
                        h.frame_size_bytes as usize,
                        usize::from(h.header_size_bytes)
                            + frame.message.len()
                            + frame.payload.len()
                    );
                    assert!(usize::from(h.header_size_bytes) >= FRAME_HEADER_SIZE_BYTES);
                    assert!(h.frame_size_bytes <= decoder.frame_size_bytes_max());
                    if let Some(key) = ApiKey::from_u16(h.api_key) {
                        if h.is_error() {
                            let _ = message::decode_error_response(&frame.message);
                        } else if h.is_response() {
                            let _ = message::verify_response(key, &frame.message, &limits);
                        } else {
                            let _ = message::verify_request(key, &frame.message, &limits);
                        }
                    }
                }
                Ok(None) => break,
                Err(_) => return,
            }
        }
    }
});
