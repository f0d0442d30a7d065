//! Framing: a fixed 24-byte little-endian header, then a flatbuffers message, then a raw payload
//! region that carries record batches (never re-encoded, never inside the flatbuffer).
//!
//! ```text
//! offset size field
//!  0     4    frame_size_bytes    u32  whole frame, header included
//!  4     2    header_size_bytes   u16  FRAME_HEADER_SIZE_BYTES (24) in this version
//!  6     2    api_key             u16  see crate::api::ApiKey
//!  8     2    api_version         u16
//! 10     2    flags               u16  bit 0 RESPONSE, bit 1 ERROR (message is an ErrorResponse)
//! 12     4    correlation_id      u32  echoed in the response
//! 16     4    message_size_bytes  u32  flatbuffers message length
//! 20     4    header_crc32c       u32  CRC-32C of bytes 0..20
//! 24     ..   message             message_size_bytes
//! ..     ..   payload             frame_size_bytes - header_size_bytes - message_size_bytes
//! ```
//!
//! [`FrameDecoder`] is sans-IO: feed it a buffer, it returns a complete [`Frame`], `None` for
//! "need more bytes", or a typed [`DecodeError`]. It checks the declared size against
//! `frame_size_bytes_max` from the first 24 bytes, before anything is allocated for the frame.

use bytes::{Buf, BufMut, Bytes, BytesMut};

use crate::error::DecodeError;

/// Size of the fixed frame header in this protocol version.
pub const FRAME_HEADER_SIZE_BYTES: usize = 24;

/// Default `frame_size_bytes_max`: the largest frame a peer accepts unless configured otherwise.
pub const FRAME_SIZE_BYTES_MAX_DEFAULT: u32 = 64 * 1024 * 1024;

/// Smallest accepted `frame_size_bytes_max`.
pub const FRAME_SIZE_BYTES_MAX_MIN: u32 = FRAME_HEADER_SIZE_BYTES as u32 + 1024;

/// Header flag: the frame is a response.
pub const FLAG_RESPONSE: u16 = 0b01;
/// Header flag: the message is an `ErrorResponse` (request-level failure before the API's own
/// response could be built, for example an unknown API key).
pub const FLAG_ERROR: u16 = 0b10;
const FLAGS_KNOWN: u16 = 0b11;
const _: () = assert!(FLAGS_KNOWN == FLAG_RESPONSE | FLAG_ERROR && FLAG_RESPONSE & FLAG_ERROR == 0);

/// The fixed-layout frame header. It carries its own CRC-32C so that it can be trusted before
/// the rest of the frame is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(C)]
pub struct FrameHeader {
    /// Whole frame size, header included.
    pub frame_size_bytes: u32,
    /// Header size; `FRAME_HEADER_SIZE_BYTES` in this version.
    pub header_size_bytes: u16,
    /// API key (see `crate::api::ApiKey`).
    pub api_key: u16,
    /// API version.
    pub api_version: u16,
    /// `FLAG_RESPONSE`, `FLAG_ERROR`.
    pub flags: u16,
    /// Chosen by the client, echoed by the server.
    pub correlation_id: u32,
    /// Length of the flatbuffers message that follows the header.
    pub message_size_bytes: u32,
    /// CRC-32C of header bytes 0..20.
    pub header_crc32c: u32,
}

const _: () = assert!(std::mem::size_of::<FrameHeader>() == FRAME_HEADER_SIZE_BYTES);

impl FrameHeader {
    /// Builds a header for a frame with the given message and payload sizes; computes the
    /// checksum. Returns `None` when the sizes do not fit in a `u32` frame.
    pub fn new(
        api_key: u16,
        api_version: u16,
        flags: u16,
        correlation_id: u32,
        message_size_bytes: usize,
        payload_size_bytes: usize,
    ) -> Option<FrameHeader> {
        let total = FRAME_HEADER_SIZE_BYTES
            .checked_add(message_size_bytes)?
            .checked_add(payload_size_bytes)?;
        let mut header = FrameHeader {
            frame_size_bytes: u32::try_from(total).ok()?,
            header_size_bytes: FRAME_HEADER_SIZE_BYTES as u16,
            api_key,
            api_version,
            flags,
            correlation_id,
            message_size_bytes: u32::try_from(message_size_bytes).ok()?,
            header_crc32c: 0,
        };
        header.header_crc32c = header.compute_crc();
        Some(header)
    }

    /// Whether `FLAG_RESPONSE` is set.
    pub fn is_response(&self) -> bool {
        self.flags & FLAG_RESPONSE != 0
    }

    /// Whether `FLAG_ERROR` is set.
    pub fn is_error(&self) -> bool {
        self.flags & FLAG_ERROR != 0
    }

    /// Size of the raw payload region.
    pub fn payload_size_bytes(&self) -> usize {
        self.frame_size_bytes as usize
            - self.header_size_bytes as usize
            - self.message_size_bytes as usize
    }

    /// Encodes the header into its 24 wire bytes.
    pub fn to_bytes(&self) -> [u8; FRAME_HEADER_SIZE_BYTES] {
        let mut out = [0u8; FRAME_HEADER_SIZE_BYTES];
        self.write_fields(&mut out);
        out[20..24].copy_from_slice(&self.header_crc32c.to_le_bytes());
        out
    }

    /// Appends the 24 wire bytes to `dst`.
    pub fn encode(&self, dst: &mut impl BufMut) {
        dst.put_slice(&self.to_bytes());
    }

    fn write_fields(&self, out: &mut [u8; FRAME_HEADER_SIZE_BYTES]) {
        out[0..4].copy_from_slice(&self.frame_size_bytes.to_le_bytes());
        out[4..6].copy_from_slice(&self.header_size_bytes.to_le_bytes());
        out[6..8].copy_from_slice(&self.api_key.to_le_bytes());
        out[8..10].copy_from_slice(&self.api_version.to_le_bytes());
        out[10..12].copy_from_slice(&self.flags.to_le_bytes());
        out[12..16].copy_from_slice(&self.correlation_id.to_le_bytes());
        out[16..20].copy_from_slice(&self.message_size_bytes.to_le_bytes());
    }

    fn compute_crc(&self) -> u32 {
        let mut out = [0u8; FRAME_HEADER_SIZE_BYTES];
        self.write_fields(&mut out);
        crc32c::crc32c(&out[0..20])
    }

    /// Decodes and checks a header from the first 24 bytes of `src`: checksum, header size,
    /// flags, message size, and `frame_size_bytes_max`.
    pub fn decode(src: &[u8], frame_size_bytes_max: u32) -> Result<FrameHeader, DecodeError> {
        if src.len() < FRAME_HEADER_SIZE_BYTES {
            return Err(DecodeError::Truncated {
                what: "frame header",
                needed: FRAME_HEADER_SIZE_BYTES as u64,
                available: src.len() as u64,
            });
        }
        let u16_at = |at: usize| u16::from_le_bytes([src[at], src[at + 1]]);
        let u32_at =
            |at: usize| u32::from_le_bytes([src[at], src[at + 1], src[at + 2], src[at + 3]]);
        let header = FrameHeader {
            frame_size_bytes: u32_at(0),
            header_size_bytes: u16_at(4),
            api_key: u16_at(6),
            api_version: u16_at(8),
            flags: u16_at(10),
            correlation_id: u32_at(12),
            message_size_bytes: u32_at(16),
            header_crc32c: u32_at(20),
        };
        let computed = crc32c::crc32c(&src[0..20]);
        if computed != header.header_crc32c {
            return Err(DecodeError::FrameHeaderChecksum {
                stored: header.header_crc32c,
                computed,
            });
        }
        if header.frame_size_bytes > frame_size_bytes_max {
            return Err(DecodeError::FrameTooLarge {
                size_bytes: u64::from(header.frame_size_bytes),
                size_bytes_max: u64::from(frame_size_bytes_max),
            });
        }
        if usize::from(header.header_size_bytes) < FRAME_HEADER_SIZE_BYTES {
            return Err(DecodeError::InvalidFrameHeader(
                "header_size_bytes below 24",
            ));
        }
        if header.flags & !FLAGS_KNOWN != 0 {
            return Err(DecodeError::InvalidFrameHeader("unknown flag bits set"));
        }
        let body = u64::from(header.header_size_bytes) + u64::from(header.message_size_bytes);
        if body > u64::from(header.frame_size_bytes) {
            return Err(DecodeError::InvalidFrameHeader(
                "header_size_bytes + message_size_bytes exceed frame_size_bytes",
            ));
        }
        Ok(header)
    }
}

/// One complete decoded frame. `message` is the flatbuffers message (not yet verified: use the
/// typed accessors in `crate::api`), `payload` is the raw payload region, mutable so that the
/// broker can stamp offsets into record batch headers without copying them.
#[derive(Debug)]
pub struct Frame {
    /// The checked header.
    pub header: FrameHeader,
    /// The flatbuffers message bytes.
    pub message: Bytes,
    /// The raw payload region (record batches).
    pub payload: BytesMut,
}

/// Sans-IO frame decoder with a hard size limit.
#[derive(Debug, Clone)]
pub struct FrameDecoder {
    frame_size_bytes_max: u32,
    pending: Option<FrameHeader>,
}

impl FrameDecoder {
    /// A decoder that refuses frames above `frame_size_bytes_max` bytes.
    pub fn new(frame_size_bytes_max: u32) -> FrameDecoder {
        FrameDecoder {
            frame_size_bytes_max: frame_size_bytes_max.max(FRAME_SIZE_BYTES_MAX_MIN),
            pending: None,
        }
    }

    /// The configured limit.
    pub fn frame_size_bytes_max(&self) -> u32 {
        self.frame_size_bytes_max
    }

    /// How many bytes the next complete frame needs in total (header included), when its header
    /// has been seen; lets a reader reserve exactly once. `None` before a header is available.
    pub fn frame_size_bytes_next(&self) -> Option<usize> {
        self.pending.map(|h| h.frame_size_bytes as usize)
    }

    /// Takes one complete frame off the front of `buf`. Returns `Ok(None)` when more bytes are
    /// needed. After an error the stream is unusable: the caller must close the connection.
    pub fn decode(&mut self, buf: &mut BytesMut) -> Result<Option<Frame>, DecodeError> {
        let header = match self.pending {
            Some(header) => header,
            None => {
                if buf.len() < FRAME_HEADER_SIZE_BYTES {
                    return Ok(None);
                }
                let header = FrameHeader::decode(&buf[..], self.frame_size_bytes_max)?;
                self.pending = Some(header);
                header
            }
        };
        let frame_size = header.frame_size_bytes as usize;
        if buf.len() < frame_size {
            return Ok(None);
        }
        self.pending = None;
        let mut frame = buf.split_to(frame_size);
        frame.advance(usize::from(header.header_size_bytes));
        let message = frame.split_to(header.message_size_bytes as usize).freeze();
        Ok(Some(Frame {
            header,
            message,
            payload: frame,
        }))
    }
}

/// Encodes a whole frame (header, message, payload) into one buffer. Useful for small frames and
/// tests; large senders write the header, message and payload parts separately (vectored or with
/// sendfile) using [`FrameHeader::new`].
pub fn encode_frame(
    api_key: u16,
    api_version: u16,
    flags: u16,
    correlation_id: u32,
    message: &[u8],
    payload: &[u8],
) -> Option<BytesMut> {
    let header = FrameHeader::new(
        api_key,
        api_version,
        flags,
        correlation_id,
        message.len(),
        payload.len(),
    )?;
    let mut out = BytesMut::with_capacity(header.frame_size_bytes as usize);
    header.encode(&mut out);
    out.put_slice(message);
    out.put_slice(payload);
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_round_trip() {
        let h = FrameHeader::new(6, 1, FLAG_RESPONSE, 77, 100, 4096).unwrap();
        let bytes = h.to_bytes();
        let d = FrameHeader::decode(&bytes, u32::MAX).unwrap();
        assert_eq!(h, d);
        assert_eq!(d.payload_size_bytes(), 4096);
        assert!(d.is_response());
        assert!(!d.is_error());
    }

    /// A request's header is not a response; an error-only flag is not one either (a mutant
    /// that reads every header as a response survived without this).
    #[test]
    fn request_and_error_flags_are_not_responses() {
        let request = FrameHeader::new(6, 1, 0, 77, 100, 0).unwrap();
        assert!(!request.is_response());
        assert!(!request.is_error());
        let error_only = FrameHeader::new(6, 1, FLAG_ERROR, 77, 100, 0).unwrap();
        assert!(!error_only.is_response());
        assert!(error_only.is_error());
    }

    #[test]
    fn decoder_needs_more_then_yields_frame() {
        let frame = encode_frame(7, 0, 0, 5, b"msg", b"payload").unwrap();
        let mut dec = FrameDecoder::new(FRAME_SIZE_BYTES_MAX_DEFAULT);
        let mut buf = BytesMut::new();
        for (i, b) in frame.iter().enumerate() {
            buf.put_u8(*b);
            let out = dec.decode(&mut buf).unwrap();
            if i + 1 < frame.len() {
                assert!(out.is_none());
            } else {
                let f = out.unwrap();
                assert_eq!(&f.message[..], b"msg");
                assert_eq!(&f.payload[..], b"payload");
                assert_eq!(f.header.correlation_id, 5);
            }
        }
        assert!(buf.is_empty());
    }

    #[test]
    fn oversized_frame_rejected_from_header_alone() {
        let h = FrameHeader::new(6, 0, 0, 1, 10, 100 << 20).unwrap();
        let mut buf = BytesMut::from(&h.to_bytes()[..]);
        let mut dec = FrameDecoder::new(1 << 20);
        let err = dec.decode(&mut buf).unwrap_err();
        assert!(matches!(err, DecodeError::FrameTooLarge { .. }));
        assert_eq!(buf.capacity(), FRAME_HEADER_SIZE_BYTES);
    }

    #[test]
    fn corrupted_header_byte_is_detected() {
        let frame = encode_frame(1, 0, 0, 9, b"m", b"").unwrap();
        for i in 0..FRAME_HEADER_SIZE_BYTES {
            let mut bad = frame.clone();
            bad[i] ^= 0x40;
            let mut dec = FrameDecoder::new(FRAME_SIZE_BYTES_MAX_DEFAULT);
            assert!(dec.decode(&mut bad).is_err(), "byte {i}");
        }
    }

    /// A header with chosen fields and a valid checksum, so that the checks after the checksum
    /// are what judges it.
    fn signed(header_size_bytes: u16, flags: u16, frame: u32, message: u32) -> [u8; 24] {
        let mut h = FrameHeader::new(1, 0, 0, 3, 0, 0).unwrap();
        h.header_size_bytes = header_size_bytes;
        h.flags = flags;
        h.frame_size_bytes = frame;
        h.message_size_bytes = message;
        h.header_crc32c = h.compute_crc();
        h.to_bytes()
    }

    #[test]
    fn fewer_than_24_bytes_are_truncated() {
        let bytes = FrameHeader::new(1, 0, 0, 3, 0, 0).unwrap().to_bytes();
        let err = FrameHeader::decode(&bytes[..23], u32::MAX).unwrap_err();
        assert!(matches!(
            err,
            DecodeError::Truncated {
                needed: 24,
                available: 23,
                ..
            }
        ));
        assert!(FrameHeader::decode(&bytes, u32::MAX).is_ok());
    }

    #[test]
    fn a_frame_of_exactly_the_limit_is_accepted() {
        let at_limit = signed(24, 0, 4096, 10);
        assert!(FrameHeader::decode(&at_limit, 4096).is_ok());
        let err = FrameHeader::decode(&at_limit, 4095).unwrap_err();
        assert!(matches!(
            err,
            DecodeError::FrameTooLarge {
                size_bytes: 4096,
                size_bytes_max: 4095
            }
        ));
    }

    #[test]
    fn header_fields_are_checked_behind_a_valid_checksum() {
        let invalid = |b: [u8; 24]| match FrameHeader::decode(&b, u32::MAX) {
            Err(DecodeError::InvalidFrameHeader(why)) => why,
            other => panic!("expected InvalidFrameHeader, got {other:?}"),
        };
        assert_eq!(invalid(signed(23, 0, 100, 0)), "header_size_bytes below 24");
        assert_eq!(invalid(signed(0, 0, 100, 0)), "header_size_bytes below 24");
        assert!(FrameHeader::decode(&signed(32, 0, 100, 0), u32::MAX).is_ok());
        for flags in [1 << 2, 1 << 15, FLAGS_KNOWN | 1 << 3] {
            assert_eq!(invalid(signed(24, flags, 100, 0)), "unknown flag bits set");
        }
        for flags in [0, FLAG_RESPONSE, FLAG_ERROR, FLAGS_KNOWN] {
            assert!(FrameHeader::decode(&signed(24, flags, 100, 0), u32::MAX).is_ok());
        }
        let exceed = "header_size_bytes + message_size_bytes exceed frame_size_bytes";
        assert_eq!(invalid(signed(24, 0, 100, 77)), exceed);
        assert_eq!(invalid(signed(40, 0, 100, 61)), exceed);
        // Header plus message filling the frame exactly is a frame without payload.
        let full = FrameHeader::decode(&signed(40, 0, 100, 60), u32::MAX).unwrap();
        assert_eq!(full.payload_size_bytes(), 0);
        // The sum is taken in u64: a u32 sum would wrap below the frame size.
        assert_eq!(invalid(signed(24, 0, 100, u32::MAX - 10)), exceed);
    }

    #[test]
    fn decoder_limit_and_next_frame_size() {
        assert_eq!(
            FrameDecoder::new(0).frame_size_bytes_max(),
            FRAME_SIZE_BYTES_MAX_MIN
        );
        assert_eq!(FrameDecoder::new(1 << 20).frame_size_bytes_max(), 1 << 20);
        let frame = encode_frame(7, 0, 0, 5, b"msg", b"payload").unwrap();
        let mut dec = FrameDecoder::new(FRAME_SIZE_BYTES_MAX_DEFAULT);
        let mut buf = BytesMut::from(&frame[..FRAME_HEADER_SIZE_BYTES + 1]);
        assert_eq!(dec.frame_size_bytes_next(), None);
        assert!(dec.decode(&mut buf).unwrap().is_none());
        assert_eq!(dec.frame_size_bytes_next(), Some(frame.len()));
        buf.extend_from_slice(&frame[FRAME_HEADER_SIZE_BYTES + 1..]);
        assert!(dec.decode(&mut buf).unwrap().is_some());
        assert_eq!(dec.frame_size_bytes_next(), None);
    }

    #[test]
    fn a_bare_24_byte_frame_decodes_from_exactly_24_bytes() {
        let mut buf = encode_frame(2, 1, 0, 8, b"", b"").unwrap();
        assert_eq!(buf.len(), FRAME_HEADER_SIZE_BYTES);
        let frame = FrameDecoder::new(FRAME_SIZE_BYTES_MAX_DEFAULT)
            .decode(&mut buf)
            .unwrap()
            .expect("a complete frame");
        assert!(frame.message.is_empty() && frame.payload.is_empty());
        assert_eq!((frame.header.api_key, frame.header.correlation_id), (2, 8));
    }

    #[test]
    fn the_default_limit_is_64_mib_and_the_smallest_limit_1048_bytes() {
        let header = |frame: u32| signed(24, 0, frame, 0);
        let mut default = FrameDecoder::new(FRAME_SIZE_BYTES_MAX_DEFAULT);
        let mut at = BytesMut::from(&header(64 << 20)[..]);
        assert!(
            default.decode(&mut at).unwrap().is_none(),
            "64 MiB is allowed"
        );
        let mut above = BytesMut::from(&header((64 << 20) + 1)[..]);
        let err = FrameDecoder::new(FRAME_SIZE_BYTES_MAX_DEFAULT).decode(&mut above);
        assert!(matches!(err, Err(DecodeError::FrameTooLarge { .. })));
        // A limit below the smallest one is raised to 24 + 1024 bytes.
        assert!(
            FrameHeader::decode(&header(1048), FrameDecoder::new(0).frame_size_bytes_max()).is_ok()
        );
        assert!(
            FrameHeader::decode(&header(1049), FrameDecoder::new(0).frame_size_bytes_max())
                .is_err()
        );
    }
}
