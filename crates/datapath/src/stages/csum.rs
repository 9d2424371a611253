//! Receive checksum offload in software at an uplink (`csum =
//! "software"`): the device's word on a frame's checksum — `DATA_VALID`,
//! or a partial checksum a veth peer left unfinished — is not taken; hvnet
//! completes or verifies every transport checksum itself, as a hypervisor
//! must behind a NIC that cannot check encapsulated frames (NIC
//! Technology in vSphere, Figure 7). At a VXLAN endpoint this runs on the inner frame.
//!
//! A frame found wrong is passed on unvouched (no `DATA_VALID`), so that
//! the receiving kernel drops and counts it, as it would behind such a NIC.

use crate::arc::{Decl, Kind};
use crate::counters::{add, IngressCounters};
use crate::engine::worker::Burst;
use crate::engine::worker::InRun;
use crate::engine::worker::{Ctx, State};
use hvnet_offload::csum::{complete_partial, validate_l4};
use hvnet_offload::CsumState;
use hvnet_port::Packet;

pub(crate) const DECL: Decl<InRun> = Decl {
    name: "checksum",
    kind: Kind::Offload,
    after: &[],
    before: &["lro"],
    wants: |f| f.uplink && f.csum_software,
    run: verify_burst,
};

fn verify_burst(_: &mut State, cx: &Ctx, b: &mut Burst) {
    let c = &cx.port.ingress[cx.q];
    for i in b.live() {
        verify(&mut b[i], c);
        b.trace(&cx.port.tracer, i, "checksum", || {
            format!("checked in software: {:?}", b[i].meta.offload.csum)
        });
    }
}

/// Completes or verifies `pkt`'s transport checksum in software.
fn verify(pkt: &mut Packet, c: &IngressCounters) {
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
