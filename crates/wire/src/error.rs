//! Why a header could not be read: one variant per reason, so that every
//! drop has its own counter.

/// A parse failure. Small and `Copy`: it is counted, not carried.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Error {
    /// The buffer ends before the header does.
    Truncated,
    /// IP version field is not the one the view expects.
    BadVersion,
    /// A header-length field is below the minimum or points past the buffer.
    BadHeaderLen,
    /// A length field disagrees with the buffer (for example IPv4 total
    /// length larger than the frame).
    BadLength,
    /// More stacked 802.1Q tags, IPv6 extension headers or encapsulations
    /// than we follow.
    TooDeep,
    /// A virtio-net header field holds a value the spec does not define.
    BadVnetHeader,
}

impl core::fmt::Display for Error {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            Error::Truncated => "header truncated",
            Error::BadVersion => "wrong IP version",
            Error::BadHeaderLen => "bad header length field",
            Error::BadLength => "length field disagrees with the frame",
            Error::TooDeep => "too many stacked headers",
            Error::BadVnetHeader => "bad virtio-net header",
        })
    }
}

impl std::error::Error for Error {}

/// Result alias for the wire views.
pub type Result<T> = core::result::Result<T, Error>;

#[inline]
pub(crate) fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

#[inline]
pub(crate) fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

#[inline]
pub(crate) fn put16(b: &mut [u8], at: usize, v: u16) {
    b[at..at + 2].copy_from_slice(&v.to_be_bytes());
}

#[inline]
pub(crate) fn put32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_be_bytes());
}
