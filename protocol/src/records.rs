//! The records inside a batch (Kafka record format v2), checked field by field.
//!
//! One walker reads every record and checks every rule of the format: varints within their
//! bounds, each field inside the record's `length`, key and value lengths >= -1, header counts
//! and sizes that fit the record, offset deltas in order, timestamps that do not overflow. It
//! reads from a [`Source`]: an uncompressed records section in memory, or a zstd stream inflated
//! through a fixed window ([`WINDOW_SIZE_BYTES`]), so validating a compressed batch never holds
//! more than the window of its records and never inflates more than the caller's limit, whatever
//! the frames declare. What the walker finds is handed to a [`Visit`]: nothing (validation) or
//! [`crate::batch::Record`]s (decoding).

use std::cell::RefCell;
use std::fmt;
use std::ops::Range;

use zstd::zstd_safe::{self, DCtx, InBuffer, OutBuffer, ResetDirective};

use crate::batch::{BatchError, BatchHeader, TimestampType};
use crate::varint::{get_varint, get_varlong, VarintError};

/// Smallest record body: attributes, timestamp delta, offset delta, key length, value length and
/// headers count, one byte each.
pub const RECORD_BODY_SIZE_BYTES_MIN: usize = 6;
/// The window a zstd records section is inflated through while it is validated (the size zstd
/// recommends for streaming output, `ZSTD_DStreamOutSize`).
pub const WINDOW_SIZE_BYTES: usize = 128 * 1024;
/// The zstd frame magic number as it appears on the wire (RFC 8878, 0xFD2FB528 little-endian).
pub const ZSTD_MAGIC: [u8; 4] = [0x28, 0xb5, 0x2f, 0xfd];
/// Longest varint (32-bit) and varlong (64-bit) encodings.
const VARINT_SIZE_BYTES_MAX: usize = 5;
const VARLONG_SIZE_BYTES_MAX: usize = 10;

/// A field of a record, as rules name them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum RecordField {
    /// `length` varint.
    Length,
    /// `attributes` byte.
    Attributes,
    /// `timestamp_delta` varlong.
    TimestampDelta,
    /// `offset_delta` varint.
    OffsetDelta,
    /// `key_length` varint.
    KeyLength,
    /// The key bytes.
    Key,
    /// `value_length` varint.
    ValueLength,
    /// The value bytes.
    Value,
    /// `headers_count` varint.
    HeadersCount,
    /// A header's key length varint.
    HeaderKeyLength,
    /// A header's key bytes.
    HeaderKey,
    /// A header's value length varint.
    HeaderValueLength,
    /// A header's value bytes.
    HeaderValue,
}

impl fmt::Display for RecordField {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            RecordField::Length => "record length",
            RecordField::Attributes => "attributes",
            RecordField::TimestampDelta => "timestamp delta",
            RecordField::OffsetDelta => "offset delta",
            RecordField::KeyLength => "key length",
            RecordField::Key => "key",
            RecordField::ValueLength => "value length",
            RecordField::Value => "value",
            RecordField::HeadersCount => "headers count",
            RecordField::HeaderKeyLength => "header key length",
            RecordField::HeaderKey => "header key",
            RecordField::HeaderValueLength => "header value length",
            RecordField::HeaderValue => "header value",
        })
    }
}

/// The rule of the record format a record breaks (docs/protocol.md section 5.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RecordRule {
    /// The records section ends before `records_count` records.
    #[error("the records section ends before it (records_count is {records_count})")]
    Missing {
        /// The header's records_count.
        records_count: i32,
    },
    /// `length` is below the smallest record or beyond the bytes left in the section.
    #[error(
        "record length {length} is outside {RECORD_BODY_SIZE_BYTES_MIN}..={bytes_left} \
         (the bytes left in the records section)"
    )]
    Length {
        /// The record's length.
        length: i32,
        /// Bytes left in the records section (for zstd: under the decompression limit).
        bytes_left: u64,
    },
    /// The record would take a zstd section's decompressed records past the limit.
    #[error(
        "record length {length} would take the decompressed records past {limit_bytes} bytes \
         (decompressed_size_bytes_max)"
    )]
    PastDecompressionLimit {
        /// The record's length.
        length: i32,
        /// `decompressed_size_bytes_max`.
        limit_bytes: u64,
    },
    /// A varint longer than 5 bytes (varlong: 10) or beyond 32 bits.
    #[error(
        "{0} {kind} is over-long (more than {size_max} bytes or out of range)",
        kind = .0.varint_kind(),
        size_max = .0.varint_size_bytes_max()
    )]
    Overlong(RecordField),
    /// A field runs past the record's `length`.
    #[error("{0} runs past the record's length")]
    PastLength(RecordField),
    /// The records section ends inside a field.
    #[error("the records section ends inside the {0}")]
    SectionEnd(RecordField),
    /// The record's fields end before its `length`.
    #[error("the record's fields end {unused_bytes} bytes before its length")]
    UnusedBytes {
        /// Bytes of the record after its last field.
        unused_bytes: u64,
    },
    /// A length below -1 (below 0 for a header key, which cannot be null).
    #[error("{field} {length} is below {min}", min = field.length_min())]
    NegativeLength {
        /// The length field.
        field: RecordField,
        /// Its value.
        length: i32,
    },
    /// A producer's records must have offset deltas 0, 1, 2, ...
    #[error(
        "offset delta {offset_delta}, expected {expected} \
         (a producer's records have offset deltas 0, 1, 2, ...)"
    )]
    OffsetDelta {
        /// The record's offset delta.
        offset_delta: i32,
        /// The record's index, the only valid delta.
        expected: i32,
    },
    /// Offset deltas of a stored batch must increase and stay within last_offset_delta.
    #[error(
        "offset delta {offset_delta} {} or exceeds last_offset_delta {last_offset_delta}",
        previous.map_or_else(|| "is negative".to_string(), |p| format!("does not follow {p}"))
    )]
    OffsetDeltaOrder {
        /// The record's offset delta.
        offset_delta: i32,
        /// The previous record's offset delta, if any.
        previous: Option<i32>,
        /// The header's last_offset_delta.
        last_offset_delta: i32,
    },
    /// `headers_count` is negative or more than the record's bytes can hold.
    #[error(
        "headers count {count} is negative or more than the {bytes_left} bytes left in the \
         record can hold"
    )]
    HeadersCount {
        /// The headers count.
        count: i32,
        /// Bytes left in the record (each header takes at least 2).
        bytes_left: u64,
    },
    /// base_timestamp + timestamp_delta overflows an i64.
    #[error("base_timestamp + timestamp delta {timestamp_delta} overflows")]
    TimestampOverflow {
        /// The record's timestamp delta.
        timestamp_delta: i64,
    },
    /// A producer's record timestamp is negative.
    #[error(
        "timestamp {timestamp} is negative (timestamps are milliseconds since the Unix epoch)"
    )]
    NegativeTimestamp {
        /// The record's timestamp.
        timestamp: i64,
    },
}

impl RecordField {
    /// "varlong" for the timestamp delta, "varint" for every other varint field.
    fn varint_kind(self) -> &'static str {
        if self == RecordField::TimestampDelta {
            "varlong"
        } else {
            "varint"
        }
    }

    /// The longest encoding of this field's varint.
    fn varint_size_bytes_max(self) -> usize {
        if self == RecordField::TimestampDelta {
            VARLONG_SIZE_BYTES_MAX
        } else {
            VARINT_SIZE_BYTES_MAX
        }
    }

    /// The smallest valid value of a length field: -1 (null), 0 for a header key.
    fn length_min(self) -> i32 {
        if self == RecordField::HeaderKeyLength {
            0
        } else {
            -1
        }
    }
}

/// How offset deltas must run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Deltas {
    /// Record `i` has offset delta `i` (a producer's batch).
    Exact,
    /// Strictly increasing within `0..=last_offset_delta` (a stored batch: compaction leaves
    /// holes).
    Increasing,
}

/// The rules a walk applies beyond the format itself.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Rules {
    pub deltas: Deltas,
    /// Producers: base_timestamp + timestamp_delta must not overflow and must be >= 0.
    /// Otherwise the sum wraps, as Kafka computes it, and any value is accepted.
    pub producer_timestamps: bool,
}

/// Where a key, value or header's bytes are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Span {
    /// Length -1.
    Null,
    /// This range of an in-memory records section.
    At(Range<usize>),
    /// Streamed past (zstd validation).
    Skipped,
}

/// Receives what a walk reads. Both methods default to doing nothing (validation).
pub(crate) trait Visit {
    /// Whether the visitor needs the spans of keys, values and headers. A visitor that does
    /// not lets the walker take the fast path for records it can see whole.
    const WANTS_SPANS: bool = false;
    /// One header of the record being read (before its [`Visit::record`]).
    fn header(&mut self, _key: Span, _value: Span) {}
    /// One whole, valid record.
    fn record(&mut self, _offset_delta: i32, _timestamp: i64, _key: Span, _value: Span) {}
}

impl Visit for () {}

/// What a walk found besides the records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Summary {
    /// Largest record timestamp (`i64::MIN` for no records).
    pub max_timestamp: i64,
}

/// The bytes of a records section, read front to back.
pub(crate) trait Source {
    /// At most `n` bytes at the cursor; fewer only where the section ends.
    fn peek(&mut self, n: usize) -> Result<&[u8], BatchError>;
    /// Moves the cursor `n` bytes on (`n` at most what the last `peek` returned).
    fn advance(&mut self, n: usize);
    /// Consumes `n` bytes; `None` when the section ends first.
    fn take(&mut self, n: usize) -> Result<Option<Span>, BatchError>;
    /// The next `n` bytes in one piece, without consuming them; `None` when they cannot be
    /// had in one piece (the section ends first, or they exceed the window).
    fn whole(&mut self, n: usize) -> Result<Option<&[u8]>, BatchError>;
    /// An upper bound of the bytes left in the section.
    fn bytes_left_max(&self) -> u64;
    /// The decompression limit that bounds the section, if it is inflated.
    fn decompressed_size_bytes_max(&self) -> Option<u64>;
    /// After the last record: how many bytes the section still holds (0 when it ends here).
    fn trailing(&mut self) -> Result<u64, BatchError>;
}

/// An uncompressed records section in memory.
pub(crate) struct SliceSource<'a> {
    src: &'a [u8],
    position: usize,
}

impl<'a> SliceSource<'a> {
    pub(crate) fn new(src: &'a [u8]) -> SliceSource<'a> {
        SliceSource { src, position: 0 }
    }
}

impl Source for SliceSource<'_> {
    #[inline]
    fn peek(&mut self, n: usize) -> Result<&[u8], BatchError> {
        let end = self.src.len().min(self.position.saturating_add(n));
        Ok(&self.src[self.position..end])
    }

    #[inline]
    fn advance(&mut self, n: usize) {
        debug_assert!(n <= self.src.len() - self.position);
        self.position += n;
    }

    #[inline]
    fn take(&mut self, n: usize) -> Result<Option<Span>, BatchError> {
        if self.src.len() - self.position < n {
            return Ok(None);
        }
        let range = self.position..self.position + n;
        self.position += n;
        Ok(Some(Span::At(range)))
    }

    #[inline]
    fn whole(&mut self, n: usize) -> Result<Option<&[u8]>, BatchError> {
        Ok(self.src.get(self.position..self.position.saturating_add(n)))
    }

    #[inline]
    fn bytes_left_max(&self) -> u64 {
        (self.src.len() - self.position) as u64
    }

    fn decompressed_size_bytes_max(&self) -> Option<u64> {
        None
    }

    fn trailing(&mut self) -> Result<u64, BatchError> {
        Ok((self.src.len() - self.position) as u64)
    }
}

/// A zstd records section inflated through a fixed window, at most `limit` bytes in all.
struct ZstdSource<'a> {
    dctx: &'a mut DCtx<'static>,
    input: &'a [u8],
    input_position: usize,
    window: &'a mut [u8],
    start: usize,
    end: usize,
    produced_bytes: u64,
    limit_bytes: u64,
    /// The last call ended inside a frame (or with output still to flush).
    in_frame: bool,
}

impl ZstdSource<'_> {
    /// Makes at least `n` bytes available at the cursor unless the section ends first; returns
    /// whether it did.
    fn fill(&mut self, n: usize) -> Result<bool, BatchError> {
        debug_assert!(n <= self.window.len());
        while self.end - self.start < n {
            if self.input_position == self.input.len() && !self.in_frame {
                return Ok(false);
            }
            if self.start > 0 {
                self.window.copy_within(self.start..self.end, 0);
                self.end -= self.start;
                self.start = 0;
            }
            // Never inflate more than one byte past the limit: that byte proves the excess.
            let budget = self.limit_bytes + 1 - self.produced_bytes;
            let room = ((self.window.len() - self.end) as u64).min(budget) as usize;
            let mut out = OutBuffer::around(&mut self.window[self.end..self.end + room]);
            let mut input = InBuffer::around(&self.input[self.input_position..]);
            let hint = self
                .dctx
                .decompress_stream(&mut out, &mut input)
                .map_err(|code| zstd_failure("zstd", code))?;
            let (written, read) = (out.pos(), input.pos());
            self.end += written;
            self.produced_bytes += written as u64;
            self.input_position += read;
            self.in_frame = hint != 0;
            if self.produced_bytes > self.limit_bytes {
                return Err(BatchError::DecompressedTooLarge {
                    size_bytes_max: self.limit_bytes,
                });
            }
            if written == 0 && read == 0 {
                return Err(BatchError::Decompression(
                    "the zstd stream ends inside a frame".into(),
                ));
            }
        }
        Ok(true)
    }
}

impl Source for ZstdSource<'_> {
    fn peek(&mut self, n: usize) -> Result<&[u8], BatchError> {
        self.fill(n)?;
        let end = self.end.min(self.start + n);
        Ok(&self.window[self.start..end])
    }

    fn advance(&mut self, n: usize) {
        debug_assert!(n <= self.end - self.start);
        self.start += n;
    }

    fn take(&mut self, mut n: usize) -> Result<Option<Span>, BatchError> {
        loop {
            let available = self.end - self.start;
            if available >= n {
                self.start += n;
                return Ok(Some(Span::Skipped));
            }
            n -= available;
            self.start = self.end;
            if !self.fill(1)? {
                return Ok(None);
            }
        }
    }

    fn whole(&mut self, n: usize) -> Result<Option<&[u8]>, BatchError> {
        // At most half the window, so that compacting always makes room.
        if n > self.window.len() / 2 || !self.fill(n)? {
            return Ok(None);
        }
        Ok(Some(&self.window[self.start..self.start + n]))
    }

    fn bytes_left_max(&self) -> u64 {
        self.limit_bytes - self.produced_bytes + (self.end - self.start) as u64
    }

    fn decompressed_size_bytes_max(&self) -> Option<u64> {
        Some(self.limit_bytes)
    }

    fn trailing(&mut self) -> Result<u64, BatchError> {
        self.fill(1)?;
        Ok((self.end - self.start) as u64)
    }
}

fn zstd_failure(what: &str, code: usize) -> BatchError {
    BatchError::Decompression(format!("{what}: {}", zstd_safe::get_error_name(code)))
}

/// Checks that a zstd records section is a sequence of whole zstd frames (RFC 8878): each
/// starts with the zstd magic number (no skippable frames, no legacy formats) and its blocks
/// end inside the section.
pub(crate) fn check_zstd_frames(section: &[u8]) -> Result<(), BatchError> {
    let mut position = 0;
    while position < section.len() {
        let rest = &section[position..];
        if !rest.starts_with(&ZSTD_MAGIC) {
            let start = &rest[..rest.len().min(4)];
            return Err(BatchError::Decompression(format!(
                "the records section is flagged zstd but byte {position} starts {start:02x?}, \
                 not a zstd frame (magic 28 b5 2f fd)"
            )));
        }
        let size = zstd_safe::find_frame_compressed_size(rest)
            .map_err(|code| zstd_failure(&format!("zstd frame at byte {position}"), code))?;
        if size == 0 {
            return Err(BatchError::Decompression(format!(
                "empty zstd frame at byte {position}"
            )));
        }
        position += size;
    }
    Ok(())
}

thread_local! {
    /// One streaming decompression context and window per thread (per core in the broker),
    /// reused across batches.
    static ZSTD_STREAM: RefCell<Option<(DCtx<'static>, Box<[u8]>)>> = const { RefCell::new(None) };
}

/// Walks a zstd records section through the thread's window, inflating at most
/// `decompressed_size_bytes_max` bytes.
pub(crate) fn walk_zstd<V: Visit>(
    header: &BatchHeader,
    rules: Rules,
    section: &[u8],
    decompressed_size_bytes_max: usize,
    visit: &mut V,
) -> Result<Summary, BatchError> {
    check_zstd_frames(section)?;
    ZSTD_STREAM.with(|cell| {
        let mut slot = cell.borrow_mut();
        if slot.is_none() {
            let dctx = DCtx::try_create()
                .ok_or_else(|| BatchError::Decompression("cannot create a zstd context".into()))?;
            *slot = Some((dctx, vec![0u8; WINDOW_SIZE_BYTES].into_boxed_slice()));
        }
        let Some((dctx, window)) = slot.as_mut() else {
            unreachable!("just stored");
        };
        dctx.reset(ResetDirective::SessionOnly)
            .map_err(|code| zstd_failure("zstd reset", code))?;
        let mut source = ZstdSource {
            dctx,
            input: section,
            input_position: 0,
            window,
            start: 0,
            end: 0,
            produced_bytes: 0,
            limit_bytes: decompressed_size_bytes_max as u64,
            in_frame: false,
        };
        walk(header, rules, &mut source, visit)
    })
}

/// Reads `records_count` records from `source`, checking every rule, then checks that the
/// section ends there.
pub(crate) fn walk<S: Source, V: Visit>(
    header: &BatchHeader,
    rules: Rules,
    source: &mut S,
    visit: &mut V,
) -> Result<Summary, BatchError> {
    let mut walker = Walker {
        source,
        visit,
        header,
        rules,
        index: 0,
        offset_delta: None,
        previous_delta: None,
        left: 0,
        max_timestamp: i64::MIN,
    };
    for index in 0..header.records_count.max(0) {
        walker.index = index as u32;
        walker.record()?;
    }
    let trailing = walker.source.trailing()?;
    if trailing != 0 {
        return Err(BatchError::TrailingBytes(trailing));
    }
    Ok(Summary {
        max_timestamp: walker.max_timestamp,
    })
}

/// The fast path for a record body seen whole (`record` is exactly its `length` bytes): checks
/// the same structure as the field-by-field reading but returns only whether it holds, with the
/// timestamp and offset deltas. `None` on anything unusual; the walker then reads the record
/// field by field, which is the reference and names the rule. It accepts nothing that reading
/// refuses (the fuzz target `produce_validate` checks it).
#[inline]
fn parse_whole(record: &[u8]) -> Option<(i64, i32)> {
    let mut at = 1; // attributes
    let (timestamp_delta, n) = get_varlong(record.get(at..)?).ok()?;
    at += n;
    let (offset_delta, n) = get_varint(record.get(at..)?).ok()?;
    at += n;
    at = skip_bytes(record, at, true)?;
    at = skip_bytes(record, at, true)?;
    let (count, n) = get_varint(record.get(at..)?).ok()?;
    at += n;
    if count < 0 || count as usize > (record.len() - at) / 2 {
        return None;
    }
    for _ in 0..count {
        at = skip_bytes(record, at, false)?;
        at = skip_bytes(record, at, true)?;
    }
    (at == record.len()).then_some((timestamp_delta, offset_delta))
}

/// Skips a length-prefixed byte string at `at`; returns the position after it.
#[inline]
fn skip_bytes(record: &[u8], at: usize, nullable: bool) -> Option<usize> {
    let (length, n) = get_varint(record.get(at..)?).ok()?;
    let at = at + n;
    if length == -1 && nullable {
        return Some(at);
    }
    if length < 0 {
        return None;
    }
    let end = at.checked_add(length as usize)?;
    (end <= record.len()).then_some(end)
}

struct Walker<'w, S, V> {
    source: &'w mut S,
    visit: &'w mut V,
    header: &'w BatchHeader,
    rules: Rules,
    index: u32,
    offset_delta: Option<i32>,
    previous_delta: Option<i32>,
    /// Bytes left in the current record.
    left: usize,
    max_timestamp: i64,
}

impl<S: Source, V: Visit> Walker<'_, S, V> {
    fn fail(&self, rule: RecordRule) -> BatchError {
        BatchError::Record {
            index: self.index,
            offset_delta: self.offset_delta,
            rule,
        }
    }

    /// A varint of at most `size_max` bytes inside the record.
    #[inline]
    fn raw_varint(
        &mut self,
        field: RecordField,
        size_max: usize,
        decode: impl Fn(&[u8]) -> Result<(i64, usize), VarintError>,
    ) -> Result<i64, BatchError> {
        let want = self.left.min(size_max);
        let (decoded, available) = {
            let window = self.source.peek(want)?;
            (decode(window), window.len())
        };
        match decoded {
            Ok((value, n)) => {
                self.source.advance(n);
                self.left -= n;
                Ok(value)
            }
            Err(VarintError::Overlong) => Err(self.fail(RecordRule::Overlong(field))),
            Err(VarintError::Truncated) if available == self.left => {
                Err(self.fail(RecordRule::PastLength(field)))
            }
            Err(VarintError::Truncated) => Err(self.fail(RecordRule::SectionEnd(field))),
        }
    }

    #[inline]
    fn varint(&mut self, field: RecordField) -> Result<i32, BatchError> {
        let v = self.raw_varint(field, VARINT_SIZE_BYTES_MAX, |b| {
            get_varint(b).map(|(v, n)| (i64::from(v), n))
        })?;
        Ok(v as i32)
    }

    /// A length-prefixed byte string; `nullable` allows length -1.
    #[inline]
    fn bytes(
        &mut self,
        length_field: RecordField,
        data_field: RecordField,
        nullable: bool,
    ) -> Result<Span, BatchError> {
        let length = self.varint(length_field)?;
        if length == -1 && nullable {
            return Ok(Span::Null);
        }
        if length < 0 {
            return Err(self.fail(RecordRule::NegativeLength {
                field: length_field,
                length,
            }));
        }
        let length = length as usize;
        if length > self.left {
            return Err(self.fail(RecordRule::PastLength(data_field)));
        }
        match self.source.take(length)? {
            Some(span) => {
                self.left -= length;
                Ok(span)
            }
            None => Err(self.fail(RecordRule::SectionEnd(data_field))),
        }
    }

    fn record(&mut self) -> Result<(), BatchError> {
        self.offset_delta = None;
        if self.source.peek(1)?.is_empty() {
            return Err(self.fail(RecordRule::Missing {
                records_count: self.header.records_count,
            }));
        }
        self.left = usize::MAX;
        let length = self.varint(RecordField::Length)?;
        let bytes_left = self.source.bytes_left_max();
        if length >= 0 && length as u64 > bytes_left {
            if let Some(limit_bytes) = self.source.decompressed_size_bytes_max() {
                return Err(self.fail(RecordRule::PastDecompressionLimit {
                    length,
                    limit_bytes,
                }));
            }
        }
        if length < RECORD_BODY_SIZE_BYTES_MIN as i32 || length as u64 > bytes_left {
            return Err(self.fail(RecordRule::Length { length, bytes_left }));
        }
        self.left = length as usize;
        if !V::WANTS_SPANS {
            if let Some((timestamp_delta, offset_delta)) =
                self.source.whole(self.left)?.and_then(parse_whole)
            {
                self.source.advance(self.left);
                self.left = 0;
                self.offset_delta = Some(offset_delta);
                self.check_offset_delta(offset_delta)?;
                let timestamp = self.timestamp(timestamp_delta)?;
                self.visit
                    .record(offset_delta, timestamp, Span::Skipped, Span::Skipped);
                return Ok(());
            }
        }
        match self.source.take(1)? {
            Some(_) => self.left -= 1, // attributes: unused in v2
            None => return Err(self.fail(RecordRule::SectionEnd(RecordField::Attributes))),
        }
        let timestamp_delta = self.raw_varint(
            RecordField::TimestampDelta,
            VARLONG_SIZE_BYTES_MAX,
            get_varlong,
        )?;
        let offset_delta = self.varint(RecordField::OffsetDelta)?;
        self.offset_delta = Some(offset_delta);
        self.check_offset_delta(offset_delta)?;
        let timestamp = self.timestamp(timestamp_delta)?;
        let key = self.bytes(RecordField::KeyLength, RecordField::Key, true)?;
        let value = self.bytes(RecordField::ValueLength, RecordField::Value, true)?;
        self.headers()?;
        if self.left != 0 {
            return Err(self.fail(RecordRule::UnusedBytes {
                unused_bytes: self.left as u64,
            }));
        }
        self.visit.record(offset_delta, timestamp, key, value);
        Ok(())
    }

    fn headers(&mut self) -> Result<(), BatchError> {
        let count = self.varint(RecordField::HeadersCount)?;
        // Each header takes at least two bytes (two one-byte lengths).
        if count < 0 || count as usize > self.left / 2 {
            return Err(self.fail(RecordRule::HeadersCount {
                count,
                bytes_left: self.left as u64,
            }));
        }
        for _ in 0..count {
            let key = self.bytes(RecordField::HeaderKeyLength, RecordField::HeaderKey, false)?;
            let value = self.bytes(
                RecordField::HeaderValueLength,
                RecordField::HeaderValue,
                true,
            )?;
            self.visit.header(key, value);
        }
        Ok(())
    }

    fn check_offset_delta(&mut self, offset_delta: i32) -> Result<(), BatchError> {
        let ok = match self.rules.deltas {
            Deltas::Exact => offset_delta as u32 == self.index,
            Deltas::Increasing => {
                offset_delta <= self.header.last_offset_delta
                    && self
                        .previous_delta
                        .map_or(offset_delta >= 0, |p| offset_delta > p)
            }
        };
        if !ok {
            return Err(self.fail(match self.rules.deltas {
                Deltas::Exact => RecordRule::OffsetDelta {
                    offset_delta,
                    expected: self.index as i32,
                },
                Deltas::Increasing => RecordRule::OffsetDeltaOrder {
                    offset_delta,
                    previous: self.previous_delta,
                    last_offset_delta: self.header.last_offset_delta,
                },
            }));
        }
        self.previous_delta = Some(offset_delta);
        Ok(())
    }

    fn timestamp(&mut self, timestamp_delta: i64) -> Result<i64, BatchError> {
        let base = self.header.base_timestamp;
        let create_time = if self.rules.producer_timestamps {
            let Some(t) = base.checked_add(timestamp_delta) else {
                return Err(self.fail(RecordRule::TimestampOverflow { timestamp_delta }));
            };
            if t < 0 {
                return Err(self.fail(RecordRule::NegativeTimestamp { timestamp: t }));
            }
            t
        } else {
            base.wrapping_add(timestamp_delta)
        };
        self.max_timestamp = self.max_timestamp.max(create_time);
        Ok(match self.header.timestamp_type() {
            TimestampType::LogAppendTime => self.header.max_timestamp,
            TimestampType::CreateTime => create_time,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::{
        self, field, BatchBuilder, BatchOptions, Compression, ProduceLimits, RecordBatch,
        BATCH_HEADER_SIZE_BYTES, LOG_OVERHEAD_BYTES,
    };
    use crate::varint::{put_varint, put_varlong};

    const LIMITS: ProduceLimits = ProduceLimits {
        batch_size_bytes_max: 64 << 20,
        decompressed_size_bytes_max: 64 << 20,
    };

    /// Replaces the records section of a one-record uncompressed batch and fixes length, count
    /// and CRC.
    fn with_section(section: &[u8], records_count: i32, compression: Compression) -> Vec<u8> {
        let mut b = BatchBuilder::new(BatchOptions::default(), 16);
        b.push(1_000, None, Some(b"v"), &[]);
        let mut bytes = b.build().unwrap()[..BATCH_HEADER_SIZE_BYTES].to_vec();
        bytes.extend_from_slice(section);
        let batch_length = (bytes.len() - LOG_OVERHEAD_BYTES) as i32;
        bytes[field::BATCH_LENGTH..field::BATCH_LENGTH + 4]
            .copy_from_slice(&batch_length.to_be_bytes());
        bytes[field::ATTRIBUTES + 1] = compression as u8;
        let last = (records_count - 1).max(0);
        bytes[field::LAST_OFFSET_DELTA..field::LAST_OFFSET_DELTA + 4]
            .copy_from_slice(&last.to_be_bytes());
        bytes[field::RECORDS_COUNT..field::RECORDS_COUNT + 4]
            .copy_from_slice(&records_count.to_be_bytes());
        let crc = crc32c::crc32c(&bytes[field::ATTRIBUTES..]);
        bytes[field::CRC..field::CRC + 4].copy_from_slice(&crc.to_be_bytes());
        bytes
    }

    fn framed(body: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        put_varint(&mut out, body.len() as i32);
        out.extend_from_slice(body);
        out
    }

    /// attributes, timestamp delta 0, the offset delta, key null, value "v", then `tail`.
    fn body(offset_delta: i32, tail: &[u8]) -> Vec<u8> {
        let mut out = vec![0u8, 0x00];
        put_varint(&mut out, offset_delta);
        out.extend_from_slice(&[0x01, 0x02, b'v']);
        out.extend_from_slice(tail);
        out
    }

    fn rule_of(bytes: &[u8]) -> (u32, RecordRule) {
        match batch::validate_produced(bytes, LIMITS) {
            Err(BatchError::Record { index, rule, .. }) => (index, rule),
            other => panic!("expected a record rule, got {other:?}"),
        }
    }

    /// (records section, records_count, index of the bad record, the rule it breaks).
    type Case = (Vec<u8>, i32, u32, RecordRule);

    fn layout_cases() -> Vec<Case> {
        use RecordField as F;
        use RecordRule as R;
        let ok = framed(&body(0, &[0]));
        let overlong = [0xff, 0xff, 0xff, 0xff, 0xff, 0x01];
        vec![
            (ok, 2, 1, R::Missing { records_count: 2 }),
            (
                framed(&[0, 0, 0, 1, 1]),
                1,
                0,
                R::Length {
                    length: 5,
                    bytes_left: 5,
                },
            ),
            (
                [&[0x20][..], &body(0, &[0])].concat(),
                1,
                0,
                R::Length {
                    length: 16,
                    bytes_left: 7,
                },
            ),
            (
                framed(&body(0, &overlong)),
                1,
                0,
                R::Overlong(F::HeadersCount),
            ),
            (
                framed(&body(0, &[0x80])),
                1,
                0,
                R::PastLength(F::HeadersCount),
            ),
            (
                framed(&[0, 0, 0, 0x01, 0x0a, b'v', 0]),
                1,
                0,
                R::PastLength(F::Value),
            ),
            (
                framed(&body(0, &[0, 7])),
                1,
                0,
                R::UnusedBytes { unused_bytes: 1 },
            ),
            (
                framed(&body(0, &[0x02, 0x01, 0x00])),
                1,
                0,
                R::NegativeLength {
                    field: F::HeaderKeyLength,
                    length: -1,
                },
            ),
        ]
    }

    fn value_cases() -> Vec<Case> {
        use RecordRule as R;
        let ok = framed(&body(0, &[0]));
        vec![
            (
                [ok.clone(), framed(&body(2, &[0]))].concat(),
                2,
                1,
                R::OffsetDelta {
                    offset_delta: 2,
                    expected: 1,
                },
            ),
            (
                [ok.clone(), ok].concat(),
                2,
                1,
                R::OffsetDelta {
                    offset_delta: 0,
                    expected: 1,
                },
            ),
            (
                framed(&body(0, &[0x06, 0, 0])),
                1,
                0,
                R::HeadersCount {
                    count: 3,
                    bytes_left: 2,
                },
            ),
        ]
    }

    #[test]
    fn each_rule_names_the_record_and_the_field() {
        for (section, count, index, rule) in layout_cases().into_iter().chain(value_cases()) {
            let bytes = with_section(&section, count, Compression::None);
            assert_eq!(rule_of(&bytes), (index, rule), "{rule}");
        }
    }

    #[test]
    fn timestamps_must_not_overflow_or_go_negative_in_a_producers_batch() {
        let mut raw = vec![0u8];
        put_varlong(&mut raw, i64::MAX);
        raw.extend_from_slice(&[0x00, 0x01, 0x02, b'v', 0x00]);
        let bytes = with_section(&framed(&raw), 1, Compression::None);
        assert_eq!(
            rule_of(&bytes).1,
            RecordRule::TimestampOverflow {
                timestamp_delta: i64::MAX
            }
        );
        // Stored batches wrap, as Kafka computes timestamps.
        let stored = RecordBatch::parse(bytes.into()).unwrap();
        assert_eq!(
            stored.records(1 << 20).unwrap()[0].timestamp,
            1_000i64.wrapping_add(i64::MAX)
        );
        let mut raw = vec![0u8];
        put_varlong(&mut raw, -1_001);
        raw.extend_from_slice(&[0x00, 0x01, 0x02, b'v', 0x00]);
        let bytes = with_section(&framed(&raw), 1, Compression::None);
        let err = batch::validate_produced(&bytes, LIMITS).unwrap_err();
        assert_eq!(err.error_code(), crate::ErrorCode::InvalidTimestamp);
    }

    #[test]
    fn stored_batches_allow_holes_but_not_disorder() {
        let holes = [framed(&body(0, &[0])), framed(&body(3, &[0]))].concat();
        let mut bytes = with_section(&holes, 2, Compression::None);
        bytes[field::LAST_OFFSET_DELTA + 3] = 3;
        let crc = crc32c::crc32c(&bytes[field::ATTRIBUTES..]);
        bytes[field::CRC..field::CRC + 4].copy_from_slice(&crc.to_be_bytes());
        let records = RecordBatch::parse(bytes.clone().into())
            .unwrap()
            .records(1 << 20)
            .unwrap();
        assert_eq!(records.iter().map(|r| r.offset).collect::<Vec<_>>(), [0, 3]);
        // A producer may not leave holes.
        assert!(batch::validate_produced(&bytes, LIMITS).is_err());
        let disorder = [framed(&body(1, &[0])), framed(&body(0, &[0]))].concat();
        let bytes = with_section(&disorder, 2, Compression::None);
        assert!(matches!(
            RecordBatch::parse(bytes.into()).unwrap().records(1 << 20),
            Err(BatchError::Record {
                index: 1,
                rule: RecordRule::OffsetDeltaOrder { .. },
                ..
            })
        ));
    }

    fn zstd_batch(values: &[Vec<u8>]) -> Vec<u8> {
        let mut b = BatchBuilder::new(
            BatchOptions {
                compression: Compression::Zstd,
                ..BatchOptions::default()
            },
            0,
        );
        for (i, v) in values.iter().enumerate() {
            let key = vec![b'k'; i % 300];
            b.push(1_000 + i as i64, Some(&key), Some(v), &[(b"h", Some(&key))]);
        }
        b.build().unwrap().to_vec()
    }

    #[test]
    fn records_straddling_the_window_stream_through_it() {
        // Sizes around the window so that lengths, fields and values cross its boundary.
        let sizes = [
            1,
            WINDOW_SIZE_BYTES - 40,
            3,
            WINDOW_SIZE_BYTES + 7,
            2 * WINDOW_SIZE_BYTES,
        ];
        let values: Vec<Vec<u8>> = (0..40)
            .map(|i| vec![(i % 251) as u8; sizes[i % sizes.len()] + i])
            .collect();
        let bytes = zstd_batch(&values);
        let header = batch::validate_produced(&bytes, LIMITS).unwrap();
        assert_eq!(header.records_count, 40);
        let records = RecordBatch::parse(bytes.into())
            .unwrap()
            .records(64 << 20)
            .unwrap();
        assert!(records
            .iter()
            .zip(&values)
            .all(|(r, v)| r.value.as_deref() == Some(&v[..])));
    }

    #[test]
    fn zstd_limit_is_a_bound_on_inflation_not_on_the_declared_size() {
        let values: Vec<Vec<u8>> = (0..8).map(|_| vec![0u8; 1 << 20]).collect();
        let bytes = zstd_batch(&values);
        assert!(bytes.len() < 8192);
        let total = 8 * (1 << 20) + 8 * 400;
        for (limit, ok) in [(total + 4096, true), (4 << 20, false), (1000, false)] {
            let limits = ProduceLimits {
                decompressed_size_bytes_max: limit,
                ..LIMITS
            };
            let result = batch::validate_produced(&bytes, limits);
            assert_eq!(result.is_ok(), ok, "limit {limit}: {result:?}");
        }
    }

    #[test]
    fn zstd_sections_must_be_whole_standard_frames() {
        let good = zstd_batch(&[b"value".to_vec()]);
        let frame = &good[field::RECORDS..];
        let uncompressed = framed(&body(0, &[0]));
        let skippable = [&[0x50, 0x2a, 0x4d, 0x18, 0, 0, 0, 0][..], frame].concat();
        let truncated = &frame[..frame.len() - 1];
        let trailing = [frame, &[0x00][..]].concat();
        for section in [&uncompressed[..], &skippable, truncated, &trailing] {
            let bytes = with_section(section, 1, Compression::Zstd);
            assert!(matches!(
                batch::validate_produced(&bytes, LIMITS),
                Err(BatchError::Decompression(_))
            ));
            assert!(RecordBatch::parse(bytes.into())
                .unwrap()
                .records(1 << 20)
                .is_err());
        }
        // Two frames whose output concatenates into the records are fine.
        let (a, b) = uncompressed.split_at(3);
        let two = [
            zstd::bulk::compress(a, 1).unwrap(),
            zstd::bulk::compress(b, 1).unwrap(),
        ]
        .concat();
        let bytes = with_section(&two, 1, Compression::Zstd);
        batch::validate_produced(&bytes, LIMITS).unwrap();
        // Decompressed records must end where the stream ends.
        let extra = zstd::bulk::compress(&[uncompressed.clone(), vec![9]].concat(), 1).unwrap();
        let bytes = with_section(&extra, 1, Compression::Zstd);
        assert_eq!(
            batch::validate_produced(&bytes, LIMITS),
            Err(BatchError::TrailingBytes(1))
        );
    }

    /// Records the deltas the walk reports, taking the field-by-field path.
    struct Slow(Vec<(i32, i64)>);

    impl Visit for Slow {
        const WANTS_SPANS: bool = true;
        fn record(&mut self, offset_delta: i32, timestamp: i64, _: Span, _: Span) {
            self.0.push((offset_delta, timestamp));
        }
    }

    proptest::proptest! {
        /// The fast path accepts a record body exactly when the field-by-field reading does,
        /// with the same deltas.
        #[test]
        fn the_fast_path_agrees_with_the_field_by_field_reading(
            timestamp_delta in proptest::prelude::any::<i64>(),
            offset_delta in 0i32..1000,
            lengths in proptest::collection::vec(-1i32..9, 2..9),
            lie in proptest::option::of((0usize..9, -2i32..3)),
            flips in proptest::collection::vec((0usize..64, proptest::prelude::any::<u8>()), 0..2),
        ) {
            // key, value, then (lengths.len() - 2) / 2 headers; `lie` changes one length
            // prefix without changing its bytes.
            let headers = (lengths.len() - 2) / 2;
            let mut raw = vec![0u8];
            put_varlong(&mut raw, timestamp_delta);
            put_varint(&mut raw, offset_delta);
            for (i, &length) in lengths[..2 + 2 * headers].iter().enumerate() {
                if i == 2 {
                    put_varint(&mut raw, headers as i32);
                }
                let length = if i >= 2 && i % 2 == 0 { length.max(0) } else { length };
                let told = match lie {
                    Some((at, by)) if at == i => length + by,
                    _ => length,
                };
                put_varint(&mut raw, told);
                raw.extend(std::iter::repeat_n(b'x', length.max(0) as usize));
            }
            if headers == 0 {
                put_varint(&mut raw, 0);
            }
            for (at, flip) in flips {
                let at = at % raw.len();
                raw[at] ^= flip;
            }
            let bytes = with_section(&framed(&raw), 1, Compression::None);
            let mut header = BatchHeader::parse(&bytes).unwrap();
            header.last_offset_delta = i32::MAX;
            let section = &bytes[crate::batch::field::RECORDS..];
            let mut slow = Slow(Vec::new());
            // Deltas are checked after either reading, by the same code: leave them out.
            let rules = Rules { deltas: Deltas::Increasing, producer_timestamps: false };
            header.last_offset_delta = i32::MAX;
            let by_fields = walk(&header, rules, &mut SliceSource::new(section), &mut slow);
            let fast = parse_whole(&raw);
            // A flip may make the offset delta negative: that reading stops there.
            let delta_refused = matches!(
                &by_fields,
                Err(BatchError::Record { rule: RecordRule::OffsetDeltaOrder { .. }, .. })
            );
            proptest::prop_assume!(!delta_refused);
            proptest::prop_assert_eq!(fast.is_some(), by_fields.is_ok(), "{:?}", by_fields);
            if let Some((timestamp_delta, offset_delta)) = fast {
                let timestamp = 1_000i64.wrapping_add(timestamp_delta);
                proptest::prop_assert_eq!(slow.0, vec![(offset_delta, timestamp)]);
            }
        }
    }
}
