//! A trace across the tunnel. A traced frame leaves with a mark in its
//! outer headers ([`OuterMark`]: a UDP source port and a token that every
//! VXLAN endpoint ignores), so that a far endpoint that is hvnet traces
//! it too and sends its part back, inside VXLAN marked as a report, to
//! the endpoint that sent it; those reports wait here until the trace's
//! reader takes them. A far end that is not hvnet delivers the frame as
//! any other and sends nothing back.

use super::encap::{write_encapsulated, TunnelScratch};
use super::{Inner, Vtep};
use crate::device::Transmitter;
use crate::outgoing::{SendError, Written};
use crate::packet::{mac_at, Packet};
use hvnet_offload::gso::CsumMode;
use hvnet_offload::vxlan::{OuterMark, Tunnel, MARK_REPORT};
use hvnet_wire::{Layers, MacAddr, NetKind};
use std::collections::VecDeque;
use std::net::IpAddr;
use std::sync::Mutex;

/// Reports kept for their readers, at most (the oldest go first).
const MAX_REPORTS: usize = 256;

/// A report's inner EtherType (IEEE's local experimental one).
const REPORT_ETHERTYPE: u16 = 0x88b5;

/// The longest report payload: what fits a 1500-byte underlay with the
/// outer headers and the inner Ethernet header.
pub const MAX_REPORT: usize = 1500 - 70 - 14;

/// Origins of marked frames remembered, at most.
const MAX_ORIGINS: usize = 64;

/// Far ends' reports by token, for the trace that marked the frame; and
/// where the marked frames that arrived came from, by token (this host's
/// reports go back there, from whichever queue switched the frame).
#[derive(Default)]
pub(super) struct Reports {
    kept: Mutex<VecDeque<(u16, Vec<u8>)>>,
    origins: Mutex<VecDeque<(u16, IpAddr)>>,
}

impl Reports {
    fn push(&self, token: u16, payload: &[u8]) {
        let mut r = self.kept.lock().expect("reports lock");
        if r.len() == MAX_REPORTS {
            r.pop_front();
        }
        r.push_back((token, payload.to_vec()));
    }
}

/// The mark on an underlay frame's outer headers, if it has one.
pub(super) fn read_mark(frame: &[u8], l: &Layers) -> Option<OuterMark> {
    let (net, t) = (l.net()?, l.transport()?);
    let ip = frame.get(net.offset..)?;
    let token = match net.kind {
        NetKind::Ipv4 => u32::from(u16::from_be_bytes([*ip.get(4)?, *ip.get(5)?])),
        NetKind::Ipv6 => {
            u32::from_be_bytes([*ip.first()?, *ip.get(1)?, *ip.get(2)?, *ip.get(3)?]) & 0xf_ffff
        }
    };
    let udp = frame.get(t.offset..t.offset + 2)?;
    OuterMark::read(u16::from_be_bytes([udp[0], udp[1]]), token)
}

impl Vtep {
    /// Writes `frame` (no GSO frame) to `remote` (its underlay MAC
    /// `mac`) with `mark`, in the endpoint's own VNI, as the endpoint
    /// writes any frame.
    fn send_one(
        &self,
        tx: &mut dyn Transmitter,
        (remote, mac): (IpAddr, MacAddr),
        mark: OuterMark,
        frame: &[u8],
        offload: hvnet_offload::OffloadInfo,
    ) -> Result<(), SendError> {
        let tunnel = Tunnel {
            mark: Some(mark),
            ..self.tunnel_to(self.cfg.vni, remote, mac)
        };
        let inner = Inner {
            frame,
            rest: &[],
            layers: None,
            hash: None,
            offload,
        };
        let mut written = Written::default();
        // A frame that is not GSO takes no segmenting mode or scratch.
        let mut scratch = TunnelScratch::default();
        write_encapsulated(
            tx,
            &tunnel,
            &inner,
            CsumMode::Full,
            &mut scratch,
            &mut written,
        )
        .map_err(|()| SendError::Failed)
    }

    /// Encapsulates traced frame `pkt` with `mark` to each remote it goes
    /// to (a GSO frame is not marked: its segments are made later), and
    /// says where it went.
    pub(super) fn send_marked(
        &self,
        tx: &mut dyn Transmitter,
        pkt: &Packet,
        mark: OuterMark,
    ) -> Result<String, SendError> {
        let frame = pkt.frame();
        if pkt.meta.offload.gso.is_some() || frame.len() < 14 {
            return Err(SendError::Failed);
        }
        // A frame of one of the tunnel's VLANs crosses in that VLAN's VNI
        // (untagged): the traced frame is sent as the others are.
        if self.has_vlans() && frame[12..14] == [0x81, 0x00] {
            return Err(SendError::Failed);
        }
        let vni = self.cfg.vni;
        let mut remotes = smallvec::SmallVec::new();
        let flooded = self.remotes_for(vni, mac_at(frame, 0), &mut remotes);
        let (mut sent, mut unresolved) = (Vec::new(), Vec::new());
        for &(remote, mac) in &remotes {
            match mac {
                Some(mac) => {
                    self.send_one(tx, (remote, mac), mark, frame, pkt.meta.offload)?;
                    sent.push(remote.to_string());
                }
                None => unresolved.push(remote.to_string()),
            }
        }
        if sent.is_empty() {
            return Err(SendError::Unresolved);
        }
        let how = if flooded {
            "flooded"
        } else {
            "to the remote its destination is behind"
        };
        let left = if unresolved.is_empty() {
            String::new()
        } else {
            format!(" (not to {}: unresolved)", unresolved.join(", "))
        };
        Ok(format!(
            "VXLAN VNI {vni}, {how}: {} from {}, UDP {} to {}{left}",
            sent.join(", "),
            self.cfg.local,
            mark.kind,
            self.cfg.port
        ))
    }

    /// A marked frame of trace `token` came from `remote`.
    pub(super) fn marked_from(&self, token: u16, remote: IpAddr) {
        let mut o = self.reports.origins.lock().expect("reports lock");
        if o.len() == MAX_ORIGINS {
            o.pop_front();
        }
        o.push_back((token, remote));
    }

    /// Sends this host's part of trace `token` to the endpoint that
    /// marked the frame (as much of `payload` as one frame holds).
    pub(super) fn send_report(&self, tx: &mut dyn Transmitter, token: u16, payload: &[u8]) {
        let origin = {
            let o = self.reports.origins.lock().expect("reports lock");
            o.iter().rev().find(|(t, _)| *t == token).map(|(_, r)| *r)
        };
        let Some(remote) = origin else {
            return;
        };
        let Some(mac) = self.neighbours.read().expect("lock").get(&remote).copied() else {
            return;
        };
        let mut inner = Vec::with_capacity(14 + payload.len());
        inner.extend_from_slice(&mac.0);
        inner.extend_from_slice(&self.cfg.mac.0);
        inner.extend_from_slice(&REPORT_ETHERTYPE.to_be_bytes());
        inner.extend_from_slice(&payload[..payload.len().min(MAX_REPORT)]);
        inner.resize(inner.len().max(60), 0);
        let mark = OuterMark {
            kind: MARK_REPORT,
            token,
        };
        let _ = self.send_one(tx, (remote, mac), mark, &inner, Default::default());
    }

    /// A report that arrived (its inner frame), kept for its trace.
    pub(super) fn keep_report(&self, token: u16, inner: &[u8]) {
        let ours = inner.len() >= 14 && inner[12..14] == REPORT_ETHERTYPE.to_be_bytes();
        if ours {
            let body = &inner[14..];
            // Up to the padding.
            let end = body.iter().rposition(|b| *b != 0).map_or(0, |i| i + 1);
            self.reports.push(token, &body[..end]);
        }
    }

    /// The far ends' reports for trace `token`, taken.
    pub fn take_reports(&self, token: u16) -> Vec<Vec<u8>> {
        let mut r = self.reports.kept.lock().expect("reports lock");
        let mut out = Vec::new();
        r.retain(|(t, p)| {
            if *t == token {
                out.push(p.clone());
                false
            } else {
                true
            }
        });
        out
    }
}
