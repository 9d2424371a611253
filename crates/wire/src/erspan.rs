//! ERSPAN (draft-foschiano-erspan) over GRE (RFC 2784, sequence numbers
//! as RFC 2890): the headers a mirrored frame is sent inside, type II
//! (GRE protocol 0x88BE) and type III (0x22EB). Emission only: hvnet
//! sends mirror copies and never reads ERSPAN.
//!
//! ```
//! # use hvnet_wire::erspan::{Erspan, Version};
//! let e = Erspan { version: Version::II, session: 7, vlan: 10, tagged: true, egress: false, truncated: false };
//! let mut h = [0u8; 24];
//! let n = e.emit(&mut h, 1, 0);
//! assert_eq!(n, 16);
//! assert_eq!(&h[..4], &[0x10, 0x00, 0x88, 0xbe]); // GRE with S, ERSPAN II
//! assert_eq!(h[8] >> 4, 1); // ERSPAN version 1 = type II
//! ```

/// GRE's protocol for ERSPAN type II.
pub const PROTO_TYPE_II: u16 = 0x88be;
/// GRE's protocol for ERSPAN type III.
pub const PROTO_TYPE_III: u16 = 0x22eb;
/// IP protocol number of GRE.
pub const IPPROTO_GRE: u8 = 47;

/// ERSPAN's type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Version {
    /// Type II (ERSPAN version 1): an 8-byte header.
    II,
    /// Type III (ERSPAN version 2): a 12-byte header with a timestamp and
    /// the frame's direction.
    III,
}

/// One mirrored frame's ERSPAN fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Erspan {
    /// Type II or III.
    pub version: Version,
    /// The session (0..=1023), as the receiver filters on it.
    pub session: u16,
    /// The frame's VLAN (0: none).
    pub vlan: u16,
    /// The frame carries its 802.1Q tag (encapsulation type 3).
    pub tagged: bool,
    /// Mirrored as it left a port (type III's D bit), not as it came in.
    pub egress: bool,
    /// The frame was cut to fit (the T bit).
    pub truncated: bool,
}

impl Erspan {
    /// Bytes of GRE and ERSPAN headers.
    pub fn header_len(&self) -> usize {
        8 + match self.version {
            Version::II => 8,
            Version::III => 12,
        }
    }

    /// Writes the GRE header (with sequence number `seq`) and the ERSPAN
    /// header (type III's timestamp `ts_100us`, in 100 µs units) into
    /// `out`; returns their length. Panics if `out` is shorter.
    pub fn emit(&self, out: &mut [u8], seq: u32, ts_100us: u32) -> usize {
        let proto = match self.version {
            Version::II => PROTO_TYPE_II,
            Version::III => PROTO_TYPE_III,
        };
        // GRE: only S (a sequence number follows), version 0.
        out[0..2].copy_from_slice(&0x1000u16.to_be_bytes());
        out[2..4].copy_from_slice(&proto.to_be_bytes());
        out[4..8].copy_from_slice(&seq.to_be_bytes());
        let ver: u32 = match self.version {
            Version::II => 1,
            Version::III => 2,
        };
        // Ver(4) VLAN(12) COS(3) En or BSO(2) T(1) Session(10).
        let en = match (self.version, self.tagged) {
            (Version::II, true) => 3,
            _ => 0,
        };
        let w0 = ver << 28
            | u32::from(self.vlan & 0x0fff) << 16
            | en << 11
            | u32::from(self.truncated) << 10
            | u32::from(self.session & 0x03ff);
        out[8..12].copy_from_slice(&w0.to_be_bytes());
        match self.version {
            // Reserved(12) Index(20): 0.
            Version::II => out[12..16].fill(0),
            Version::III => {
                out[12..16].copy_from_slice(&ts_100us.to_be_bytes());
                // SGT(16) P(1) FT(5) HwID(6) D(1) Gra(2) O(1): frame type
                // 0 (Ethernet), granularity 00 (100 µs).
                let w2 = u32::from(self.egress) << 3;
                out[16..20].copy_from_slice(&w2.to_be_bytes());
            }
        }
        self.header_len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn type_iii_carries_its_session_vlan_direction_and_time() {
        let e = Erspan {
            version: Version::III,
            session: 1023,
            vlan: 4094,
            tagged: false,
            egress: true,
            truncated: true,
        };
        let mut h = [0u8; 20];
        assert_eq!(e.emit(&mut h, 0xdead_beef, 0x0102_0304), 20);
        assert_eq!(&h[..8], &[0x10, 0, 0x22, 0xeb, 0xde, 0xad, 0xbe, 0xef]);
        let w0 = u32::from_be_bytes(h[8..12].try_into().unwrap());
        assert_eq!(w0 >> 28, 2);
        assert_eq!((w0 >> 16) & 0xfff, 4094);
        assert_eq!((w0 >> 10) & 1, 1);
        assert_eq!(w0 & 0x3ff, 1023);
        assert_eq!(&h[12..16], &[1, 2, 3, 4]);
        assert_eq!(u32::from_be_bytes(h[16..20].try_into().unwrap()), 1 << 3);
    }
}
