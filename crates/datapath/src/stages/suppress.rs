//! ARP and ND suppression (RFC 7432 §10): a VM's ARP request or IPv6
//! neighbor solicitation for a remote address the fabric advertised with
//! its MAC (BGP EVPN) is answered here, to the VM's port, instead of being
//! flooded to every VTEP of the segment.

use crate::arc::{Decl, Kind};
use crate::engine::worker::Burst;
use crate::engine::worker::InRun;
use crate::engine::worker::{Ctx, State};
use hvnet_offload::OffloadInfo;
use hvnet_port::Packet;
use hvnet_wire::{arp, nd, EtherType, MacAddr};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

pub(crate) const DECL: Decl<InRun> = Decl {
    name: "suppress",
    kind: Kind::Policy,
    after: &["fdb"],
    before: &["snoop"],
    wants: |f| f.suppression && !f.uplink,
    run: suppress_burst,
};

/// Requests the fabric answers are answered and go no further.
fn suppress_burst(st: &mut State, cx: &Ctx, b: &mut Burst) {
    for i in b.live() {
        // The answer is mirrored and traced as its request.
        (st.mirrored, st.tracing) = (b.mirrored[i], b.traced(i));
        let answered = b[i].dst().is_multicast() && {
            b[i].buf.fill_pending();
            st.suppress(cx, &b[i])
        };
        (st.mirrored, st.tracing) = (0, None);
        if !answered {
            b.trace(&cx.port.tracer, i, "suppress", || {
                "no request the fabric answers".into()
            });
        } else {
            b.trace(&cx.port.tracer, i, "suppress", || {
                "answered for the fabric".into()
            });
            b.release(i);
        }
    }
}

impl State {
    /// Answers `pkt` if it is an ARP request or a neighbor solicitation
    /// from a VM for an advertised remote address on its segment; true if
    /// answered (the request is consumed).
    fn suppress(&mut self, cx: &Ctx, pkt: &Packet) -> bool {
        // The request read first: most group frames are neither, and are
        // not looked at further.
        let Some(request) = Request::of(pkt) else {
            return false;
        };
        let Some((vtep, vni)) = cx.sw.endpoint_on(pkt.meta.vlan) else {
            return false;
        };
        let Some(mac) = vtep.evpn_resolve(vni, request.target()) else {
            return false;
        };
        let Some(mut buf) = self.pool.take(pkt.buf.class()) else {
            return false;
        };
        let nd = matches!(request, Request::Nd { .. });
        match request {
            Request::Arp(req) => buf.fill(
                &arp::Repr {
                    op: arp::Operation::Reply,
                    sender_mac: mac,
                    sender_ip: req.target_ip,
                    target_mac: req.sender_mac,
                    target_ip: req.sender_ip,
                }
                .frame(),
            ),
            Request::Nd { target, from } => {
                buf.fill(&nd::advertisement(mac, target, pkt.src(), from))
            }
        }
        let Ok(mut answer) = Packet::parse(buf, OffloadInfo::default()) else {
            return false;
        };
        // In the request's VLAN (tagged back to a trunk as it came).
        answer.meta.vlan = pkt.meta.vlan;
        let c = &cx.port.ingress[cx.q];
        cx.count(
            if nd {
                &c.nd_suppressed
            } else {
                &c.arp_suppressed
            },
            1,
        );
        if !cx.synthetic() {
            vtep.count_suppressed(nd);
        }
        self.egress(cx, cx.port.id, answer);
        true
    }
}

/// What a VM asks the segment to resolve.
enum Request {
    /// A broadcast ARP request.
    Arp(arp::Repr),
    /// A neighbor solicitation for `target`, from `from`.
    Nd { target: [u8; 16], from: [u8; 16] },
}

impl Request {
    fn of(pkt: &Packet) -> Option<Request> {
        let l = &pkt.meta.layers;
        let frame = pkt.frame();
        match l.ethertype() {
            EtherType::Arp if pkt.dst() == MacAddr::BROADCAST => {
                let req = arp::Packet::new_checked(&frame[l.l2_len()..])
                    .and_then(|p| arp::Repr::parse(&p))
                    .ok()?;
                (req.op == arp::Operation::Request).then_some(Request::Arp(req))
            }
            EtherType::Ipv6 => {
                let ip = &frame[l.net()?.offset..];
                let target = nd::solicited_target(ip)?;
                Some(Request::Nd {
                    target,
                    from: ip[8..24].try_into().ok()?,
                })
            }
            _ => None,
        }
    }

    fn target(&self) -> IpAddr {
        match self {
            Request::Arp(r) => IpAddr::V4(Ipv4Addr::from(r.target_ip)),
            Request::Nd { target, .. } => IpAddr::V6(Ipv6Addr::from(*target)),
        }
    }
}
