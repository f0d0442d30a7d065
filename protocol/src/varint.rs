//! Zigzag varints as Kafka encodes them in records (protobuf-style base-128, little-endian
//! groups, zigzag for signed values).

/// Why a varint could not be decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VarintError {
    /// The input ended in the middle of the varint.
    Truncated,
    /// More continuation bytes than the type allows.
    Overlong,
}

/// Number of bytes the zigzag varint encoding of `value` takes.
pub fn varint_size(value: i32) -> usize {
    let mut v = zigzag32(value);
    let mut n = 1;
    while v >= 0x80 {
        v >>= 7;
        n += 1;
    }
    n
}

/// Number of bytes the zigzag varlong encoding of `value` takes.
pub fn varlong_size(value: i64) -> usize {
    let mut v = zigzag64(value);
    let mut n = 1;
    while v >= 0x80 {
        v >>= 7;
        n += 1;
    }
    n
}

fn zigzag32(value: i32) -> u32 {
    ((value << 1) ^ (value >> 31)) as u32
}

fn zigzag64(value: i64) -> u64 {
    ((value << 1) ^ (value >> 63)) as u64
}

/// Appends the zigzag varint encoding of `value`.
pub fn put_varint(dst: &mut Vec<u8>, value: i32) {
    put_unsigned(dst, u64::from(zigzag32(value)));
}

/// Appends the zigzag varlong encoding of `value`.
pub fn put_varlong(dst: &mut Vec<u8>, value: i64) {
    put_unsigned(dst, zigzag64(value));
}

fn put_unsigned(dst: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        dst.push((v as u8) | 0x80);
        v >>= 7;
    }
    dst.push(v as u8);
}

fn get_unsigned(src: &[u8], bytes_max: usize) -> Result<(u64, usize), VarintError> {
    let mut value: u64 = 0;
    for i in 0..bytes_max {
        let Some(&b) = src.get(i) else {
            return Err(VarintError::Truncated);
        };
        value |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            return Ok((value, i + 1));
        }
    }
    Err(VarintError::Overlong)
}

/// The unsigned value of a one- or two-byte varint at the start of `src`, with its size: most
/// fields of a record (lengths below 8 KiB, small deltas, counts) take one or two bytes.
#[inline(always)]
fn short_unsigned(src: &[u8]) -> Option<(u64, usize)> {
    match *src {
        [b0, ..] if b0 < 0x80 => Some((u64::from(b0), 1)),
        [b0, b1, ..] if b1 < 0x80 => Some((u64::from(b0 & 0x7f) | (u64::from(b1) << 7), 2)),
        _ => None,
    }
}

/// Decodes a zigzag varint; returns the value and the number of bytes read.
#[inline(always)]
pub fn get_varint(src: &[u8]) -> Result<(i32, usize), VarintError> {
    let (raw, n) = match short_unsigned(src) {
        Some(short) => short,
        None => long_varint(src)?,
    };
    let raw = raw as u32;
    Ok((((raw >> 1) as i32) ^ -((raw & 1) as i32), n))
}

#[inline(never)]
fn long_varint(src: &[u8]) -> Result<(u64, usize), VarintError> {
    let (raw, n) = get_unsigned(src, 5)?;
    if raw > u64::from(u32::MAX) {
        return Err(VarintError::Overlong);
    }
    Ok((raw, n))
}

/// Decodes a zigzag varlong; returns the value and the number of bytes read.
#[inline(always)]
pub fn get_varlong(src: &[u8]) -> Result<(i64, usize), VarintError> {
    let (raw, n) = match short_unsigned(src) {
        Some(short) => short,
        None => long_varlong(src)?,
    };
    Ok((((raw >> 1) as i64) ^ -((raw & 1) as i64), n))
}

#[inline(never)]
fn long_varlong(src: &[u8]) -> Result<(u64, usize), VarintError> {
    get_unsigned(src, 10)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_vectors() {
        // Values from Kafka's ByteUtilsTest.
        let cases: &[(i32, &[u8])] = &[
            (0, &[0x00]),
            (-1, &[0x01]),
            (1, &[0x02]),
            (63, &[0x7e]),
            (-64, &[0x7f]),
            (64, &[0x80, 0x01]),
            (-65, &[0x81, 0x01]),
            (8191, &[0xfe, 0x7f]),
            (i32::MAX, &[0xfe, 0xff, 0xff, 0xff, 0x0f]),
            (i32::MIN, &[0xff, 0xff, 0xff, 0xff, 0x0f]),
        ];
        for &(v, bytes) in cases {
            let mut out = Vec::new();
            put_varint(&mut out, v);
            assert_eq!(out, bytes, "{v}");
            assert_eq!(varint_size(v), bytes.len());
            assert_eq!(get_varint(bytes).unwrap(), (v, bytes.len()));
        }
    }

    #[test]
    fn varlong_extremes_round_trip() {
        for v in [0i64, 1, -1, i64::MAX, i64::MIN, 1 << 40, -(1 << 40)] {
            let mut out = Vec::new();
            put_varlong(&mut out, v);
            assert_eq!(out.len(), varlong_size(v));
            assert_eq!(get_varlong(&out).unwrap(), (v, out.len()));
        }
    }

    #[test]
    fn truncated_and_overlong_are_errors() {
        assert_eq!(get_varint(&[0x80]), Err(VarintError::Truncated));
        assert_eq!(get_varint(&[]), Err(VarintError::Truncated));
        assert_eq!(
            get_varint(&[0xff, 0xff, 0xff, 0xff, 0xff, 0x01]),
            Err(VarintError::Overlong)
        );
        assert_eq!(
            get_varint(&[0xff, 0xff, 0xff, 0xff, 0x1f]),
            Err(VarintError::Overlong)
        );
        assert_eq!(get_varlong(&[0xff; 11]), Err(VarintError::Overlong));
    }
}
