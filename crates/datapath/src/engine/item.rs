//! What the datapath moves: a batch of frames at a time, and the item a
//! guest receive ring holds.

use hvnet_offload::gro::Coalesced;
use hvnet_offload::GsoInfo;
use hvnet_port::Packet;

/// Frames read per batch before the GRO tables are flushed and staged
/// frames published (a NAPI budget).
pub const BATCH: usize = 64;

/// What a frame in a guest receive ring is. Items are moved several
/// times on their way (staged, published, popped), so the rare, large
/// coalesced frame is boxed and a plain frame moves only its packet
/// (boxing that too would allocate per frame).
#[allow(clippy::large_enum_variant)]
pub enum RingItem {
    /// A frame as received (possibly a GSO frame).
    Frame {
        /// The packet.
        pkt: Packet,
        /// Segment it on delivery (the guest does not take it whole).
        segment: Option<GsoInfo>,
    },
    /// A coalesced frame (one per run of up to 64 segments).
    Coalesced(Box<Coalesced<Packet>>),
}

impl RingItem {
    /// Bytes of the frame as delivered (a coalesced frame's whole length).
    pub fn bytes(&self) -> usize {
        match self {
            RingItem::Coalesced(c) => c.len(),
            RingItem::Frame { pkt, .. } => pkt.len(),
        }
    }

    /// Offered frames this item accounts for.
    pub fn sources(&self) -> u64 {
        match self {
            RingItem::Coalesced(c) => c.count as u64,
            RingItem::Frame { .. } => 1,
        }
    }

    /// Copies a payload left in a sending guest's memory into the frame's
    /// buffer (before the item outlives the batch that read it).
    pub fn fill_pending(&mut self) {
        if let RingItem::Frame { pkt, .. } = self {
            pkt.buf.fill_pending();
        }
    }
}
