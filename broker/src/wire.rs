//! Encoding and decoding helpers at the broker's edge of the protocol.

use borges_protocol::frame::FrameHeader;
use borges_protocol::message::{self, MessageHead};
use borges_protocol::ErrorCode;
use bytes::{Bytes, BytesMut};
use flatbuffers::{FlatBufferBuilder, Follow, Verifiable, WIPOffset};

use crate::failure::Failure;
use crate::types::SendChunk;

/// A response ready to write: the frame header and message, then payload chunks.
pub struct Response {
    /// Frame header + flatbuffers message; empty for [`Response::close_only`].
    pub head: Bytes,
    /// The payload region, in order.
    pub payload: Vec<SendChunk>,
    /// The connection closes once this response is written (a Produce whose `acks` the broker
    /// cannot know, or an `acks = 0` Produce that failed).
    pub close_after: bool,
}

impl Response {
    /// No frame: the connection closes instead (an `acks = 0` Produce that failed: Kafka's rule,
    /// so the producer learns of the failure without a frame it never asked for).
    pub fn close_only() -> Response {
        Response {
            head: Bytes::new(),
            payload: Vec::new(),
            close_after: true,
        }
    }

    /// This response, then the connection closes.
    pub fn then_close(mut self) -> Response {
        self.close_after = true;
        self
    }
}

/// Verifies a request message (bounded by the protocol's `MessageLimits`) and returns its root
/// table.
pub fn verify<'a, T>(message: &'a [u8]) -> Result<T::Inner, Failure>
where
    T: 'a + Follow<'a> + Verifiable,
{
    message::decode_message::<T>(message).map_err(|e| Failure::new(e.error_code(), e.to_string()))
}

/// Builds the response to `request` around a finished message and its payload chunks.
pub fn response(request: &FrameHeader, message: &[u8], payload: Vec<SendChunk>) -> Response {
    let payload_len: u64 = payload.iter().map(|c| c.len()).sum();
    let mut head = BytesMut::new();
    match message::encode_message_head_into(
        &mut head,
        MessageHead::response_to(request),
        message,
        payload_len as usize,
    ) {
        Ok(_) => Response {
            head: head.freeze(),
            payload,
            close_after: false,
        },
        // Payloads are bounded by fetch.response_bytes_max, so this means a broken invariant;
        // answer with an error instead of a frame that lies about its size.
        Err(e) => error_response(
            request,
            &Failure::new(
                ErrorCode::UnknownServerError,
                format!("response too large: {e}"),
            ),
        ),
    }
}

/// A request-level `ErrorResponse` (FLAG_ERROR) for `request`.
pub fn error_response(request: &FrameHeader, failure: &Failure) -> Response {
    let head = message::encode_error_response(
        MessageHead::error_response_to(request),
        failure.code,
        failure.message.as_deref().unwrap_or(""),
    );
    Response {
        head: head.freeze(),
        payload: Vec::new(),
        close_after: false,
    }
}

/// Index ranges of the runs of consecutive items with the same topic, in order (responses list
/// partitions grouped by topic, in request order).
pub fn topic_runs<T>(
    items: &[T],
    topic: impl Fn(&T) -> &std::sync::Arc<str>,
) -> Vec<std::ops::Range<usize>> {
    let mut runs: Vec<std::ops::Range<usize>> = Vec::new();
    for (i, item) in items.iter().enumerate() {
        match runs.last_mut() {
            Some(run) if topic(&items[run.start]) == topic(item) => run.end = i + 1,
            _ => runs.push(i..i + 1),
        }
    }
    runs
}

/// Creates an optional error message string.
pub fn message<'a>(
    fbb: &mut FlatBufferBuilder<'a>,
    failure: Option<&Failure>,
) -> Option<WIPOffset<&'a str>> {
    failure
        .and_then(|f| f.message.as_deref())
        .map(|m| fbb.create_string(m))
}

/// The error code of an optional failure (0 when none).
pub fn code(failure: Option<&Failure>) -> u16 {
    failure.map_or(0, |f| f.code as u16)
}

/// Cuts the payload region into the byte ranges named by a request, without copying. Ranges
/// must lie inside the payload and must not overlap; they may come in any order. Returns one
/// buffer per range, in the order given.
pub fn split_payload(
    mut payload: BytesMut,
    ranges: &[(u32, u32)],
) -> Result<Vec<BytesMut>, Failure> {
    let size = payload.len() as u64;
    let mut order: Vec<usize> = (0..ranges.len()).collect();
    order.sort_by_key(|&i| ranges[i].0);
    let mut out: Vec<Option<BytesMut>> = (0..ranges.len()).map(|_| None).collect();
    let mut consumed: u64 = 0;
    for i in order {
        let (offset, length) = (u64::from(ranges[i].0), u64::from(ranges[i].1));
        if offset < consumed || offset + length > size {
            return Err(Failure::new(
                ErrorCode::MalformedFrame,
                format!(
                    "payload range {offset}+{length} overlaps another range or leaves the {size}-byte payload"
                ),
            ));
        }
        let _gap = payload.split_to((offset - consumed) as usize);
        out[i] = Some(payload.split_to(length as usize));
        consumed = offset + length;
    }
    Ok(out.into_iter().map(|b| b.unwrap_or_default()).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topic_runs_group_consecutive_topics() {
        let t = |s: &str| std::sync::Arc::<str>::from(s);
        let items = [t("a"), t("a"), t("b"), t("a")];
        assert_eq!(topic_runs(&items, |x| x), vec![0..2, 2..3, 3..4]);
        assert!(topic_runs::<std::sync::Arc<str>>(&[], |x| x).is_empty());
    }

    #[test]
    fn split_payload_in_any_order_without_overlap() {
        let payload = BytesMut::from(&b"aaabbbbcc"[..]);
        let parts = split_payload(payload.clone(), &[(7, 2), (0, 3), (3, 4)]).unwrap();
        assert_eq!(&parts[0][..], b"cc");
        assert_eq!(&parts[1][..], b"aaa");
        assert_eq!(&parts[2][..], b"bbbb");
        assert!(split_payload(payload.clone(), &[(0, 3), (2, 2)]).is_err());
        assert!(split_payload(payload.clone(), &[(8, 2)]).is_err());
        assert!(split_payload(payload, &[(u32::MAX, u32::MAX)]).is_err());
    }

    #[test]
    fn error_response_is_a_flagged_frame() {
        let req = FrameHeader::new(999, 0, 0, 42, 0, 0).unwrap();
        let r = error_response(
            &req,
            &Failure::new(ErrorCode::UnsupportedApi, "no such API"),
        );
        let h = FrameHeader::decode(&r.head, u32::MAX).unwrap();
        assert!(h.is_response() && h.is_error());
        assert_eq!(h.correlation_id, 42);
        let msg = &r.head[borges_protocol::frame::FRAME_HEADER_SIZE_BYTES..];
        let (code, text) = message::decode_error_response(msg).unwrap();
        assert_eq!(code, ErrorCode::UnsupportedApi);
        assert_eq!(text, Some("no such API"));
    }
}
