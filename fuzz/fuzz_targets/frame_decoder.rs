//! Feeds arbitrary bytes to the sans-IO frame decoder in chunks whose sizes come from the input,
//! then verifies each decoded frame's message against its API's request or response table.
//! Nothing may panic; a decoded frame must be consistent with its header.
#![no_main]

use borges_protocol::frame::{FrameDecoder, FRAME_HEADER_SIZE_BYTES};
use borges_protocol::message::{self, MessageLimits};
use borges_protocol::ApiKey;
use bytes::{BufMut, BytesMut};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&chunk_seed, stream)) = data.split_first() else {
        return;
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
