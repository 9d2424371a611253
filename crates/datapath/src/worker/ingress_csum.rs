//! Receive checksum offload in software at an uplink (`csum =
//! "software"`): the device's word on a frame's checksum — `DATA_VALID`,
//! or a partial checksum a veth peer left unfinished — is not taken; hvnet
//! completes or verifies every transport checksum itself, as a hypervisor
//! must behind a NIC that cannot check encapsulated frames (seed 001,
//! Figure 7). At a VXLAN endpoint this runs on the inner frame.
//!
//! A frame found wrong is passed on unvouched (no `DATA_VALID`), so that
//! the receiving kernel drops and counts it, as it would behind such a NIC.

use crate::counters::{add, IngressCounters};
use hvnet_offload::csum::{complete_partial, validate_l4};
use hvnet_offload::CsumState;
use hvnet_port::Packet;

/// Completes or verifies `pkt`'s transport checksum in software.
pub(crate) fn verify(pkt: &mut Packet, c: &IngressCounters) {
    // A GSO frame's checksum is made per segment, by whoever segments it.
    if pkt.meta.offload.gso.is_some() {
        return;
    }
    let state = match pkt.meta.offload.csum {
        CsumState::Partial { start, offset } => {
            match complete_partial(pkt.buf.frame_mut(), start, offset) {
                Ok(()) => CsumState::Good,
                Err(_) => CsumState::Unknown,
            }
        }
        _ => {
            let layers = pkt.meta.layers;
            match validate_l4(pkt.frame(), &layers) {
                Ok(s) => s,
                // No TCP or UDP: nothing to check.
                Err(_) => return,
            }
        }
    };
    add(&c.csum_verified, 1);
    if state == CsumState::Bad {
        add(&c.csum_bad, 1);
    }
    pkt.meta.offload.csum = state;
}
