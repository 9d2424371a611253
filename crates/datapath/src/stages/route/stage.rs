//! The gateway ([`crate::route`]) as a stage, after the FDB (the sender is
//! learned first) and before forwarding: in a tenant's segment, ARP for
//! the gateway answered, ARP replies to it learned, pings to it answered,
//! and IPv4 frames to its MAC routed into their next hop's segment, where
//! the forwarding stage takes them on as any frame of that VLAN.

use super::frames;
use super::{Hop, Hop6, Router, Segment};
use crate::arc::{Decl, Kind};
use crate::counters::DropReason;
use crate::engine::worker::Burst;
use crate::engine::worker::InRun;
use crate::engine::worker::{Ctx, State};
use hvnet_offload::OffloadInfo;
use hvnet_port::Packet;
use hvnet_wire::{arp, nd, EtherType, MacAddr};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

pub(crate) const DECL: Decl<InRun> = Decl {
    name: "route",
    kind: Kind::Policy,
    after: &["fdb"],
    before: &["ipfix", "suppress", "snoop", "forward"],
    wants: |f| f.services.has::<Router>(),
    run: route_burst,
};

/// A queue's router, taken again whenever the settings are read (a
/// worker's locals are).
#[derive(Default)]
struct Held {
    router: Option<Arc<Router>>,
    taken: bool,
}

/// What the gateway does with one frame.
enum Verdict {
    /// Not the gateway's: on as it was.
    Pass,
    /// Answered or taken here (counted as the gateway's).
    Answered(Option<Vec<u8>>, &'static str),
    /// Routed: on into `vlan`, to `mac` (its head rewritten already).
    Routed {
        vlan: u16,
        mac: MacAddr,
        hop: IpAddr,
    },
    /// Dropped for `reason`, with what the gateway sends back or asks
    /// (`into`: the VLAN it goes to).
    Dropped(DropReason, Option<(Vec<u8>, u16)>, String),
}

fn route_burst(st: &mut State, cx: &Ctx, b: &mut Burst) {
    let h = st.locals.get::<Held>();
    if !h.taken {
        (h.router, h.taken) = (super::current(&cx.sw), true);
    }
    let Some(r) = h.router.clone() else {
        return;
    };
    for i in b.live() {
        let vlan = b[i].meta.vlan;
        let Some(seg) = r.segment(vlan) else {
            b.trace(&cx.port.tracer, i, "route", || {
                format!("VLAN {vlan} is no tenant's segment")
            });
            continue;
        };
        let verdict = judge(st, cx, &r, seg, &mut b[i]);
        (st.mirrored, st.tracing) = (b.mirrored[i], b.traced(i));
        match verdict {
            Verdict::Pass => {
                b.trace(&cx.port.tracer, i, "route", || "not to the gateway".into());
            }
            Verdict::Answered(reply, what) => {
                b.trace(&cx.port.tracer, i, "route", || {
                    format!("the gateway: {what}")
                });
                cx.count(&cx.port.ingress[cx.q].gateway_answered, 1);
                if let Some(f) = reply {
                    send(st, cx, &[cx.port.id], &f, vlan);
                }
                b.release(i);
            }
            Verdict::Routed {
                vlan: out,
                mac,
                hop,
            } => {
                b[i].meta.vlan = out;
                b.learned[i] = cx.sw.fdb.lookup(out, mac, st.now);
                cx.count(&cx.port.ingress[cx.q].routed, 1);
                if !cx.synthetic() {
                    r.counters.routed.fetch_add(1, Relaxed);
                }
                b.trace(&cx.port.tracer, i, "route", || {
                    format!("routed from VLAN {vlan} into VLAN {out}: next hop {hop} at {mac}, TTL one less")
                });
            }
            Verdict::Dropped(reason, sent, why) => {
                b.trace(&cx.port.tracer, i, "route", || why);
                if let Some((f, into)) = sent.filter(|_| !cx.synthetic()) {
                    let to = if into == vlan {
                        vec![cx.port.id]
                    } else {
                        st.ports_of_vlan(cx, into).to_vec()
                    };
                    send(st, cx, &to, &f, into);
                }
                cx.drop_from(b, i, reason);
            }
        }
        (st.mirrored, st.tracing) = (0, None);
    }
}

/// Frame `f`, made by the gateway, to ports `to` in VLAN `vlan`.
fn send(st: &mut State, cx: &Ctx, to: &[usize], f: &[u8], vlan: u16) {
    let Some((&last, rest)) = to.split_last() else {
        return;
    };
    let class = if f.len() <= hvnet_port::pool::SMALL_FRAME {
        hvnet_port::pool::SizeClass::Small
    } else {
        hvnet_port::pool::SizeClass::Large
    };
    let Some(mut buf) = st.pool.take(class) else {
        return;
    };
    buf.fill(f);
    let Ok(mut pkt) = Packet::parse(buf, OffloadInfo::default()) else {
        return;
    };
    pkt.meta.vlan = vlan;
    st.send_copies(cx, rest, last, pkt);
}

/// What the gateway of segment `seg` makes of `pkt`; a routed frame's
/// head is rewritten here.
fn judge(st: &State, cx: &Ctx, r: &Router, seg: Segment, pkt: &mut Packet) -> Verdict {
    let gw_mac = r.mac(seg);
    let l = pkt.meta.layers;
    let learn = !cx.synthetic();
    let Some(gateway) = seg.gateway else {
        // The tenant's L3 VNI: what another host routed here, to this
        // host's router MAC.
        return match l.ethertype() {
            EtherType::Ipv4 if pkt.dst() == r.router_mac() => route_ipv4(st, cx, r, seg, pkt),
            _ => Verdict::Pass,
        };
    };
    if cx.port.is_uplink() {
        // A segment's frames from the fabric: each host's own gateway
        // answers its VMs; these are switched as they are.
        return Verdict::Pass;
    }
    match l.ethertype() {
        EtherType::Arp => {
            let Ok(a) = arp::Packet::new_checked(&pkt.buf.held()[l.l2_len()..])
                .and_then(|p| arp::Repr::parse(&p))
            else {
                return Verdict::Pass;
            };
            let vlan = pkt.meta.vlan;
            let for_gateway = a.target_ip == gateway.octets();
            match a.op {
                arp::Operation::Request if for_gateway => {
                    if learn {
                        r.learn(vlan, IpAddr::from(a.sender_ip), a.sender_mac);
                        r.counters.gateway_arp.fetch_add(1, Relaxed);
                    }
                    Verdict::Answered(
                        Some(frames::arp_reply(&a, gw_mac).to_vec()),
                        "ARP for its address answered",
                    )
                }
                arp::Operation::Reply if pkt.dst() == gw_mac => {
                    if learn {
                        r.learn(vlan, IpAddr::from(a.sender_ip), a.sender_mac);
                    }
                    Verdict::Answered(None, "ARP reply learned")
                }
                _ => Verdict::Pass,
            }
        }
        EtherType::Ipv4 if pkt.dst() == gw_mac => route_ipv4(st, cx, r, seg, pkt),
        EtherType::Ipv6 => ipv6(st, cx, r, seg, pkt),
        _ => Verdict::Pass,
    }
}

/// An IPv6 frame in a segment: neighbour discovery for the gateway
/// answered or learned from, a frame to its MAC routed.
fn ipv6(st: &State, cx: &Ctx, r: &Router, seg: Segment, pkt: &mut Packet) -> Verdict {
    let (Some(gw6), Some(net)) = (seg.gateway6, pkt.meta.layers.net()) else {
        return Verdict::Pass;
    };
    let gw_mac = r.mac(seg);
    let vlan = pkt.meta.vlan;
    let learn = !cx.synthetic();
    if net.protocol == nd::ICMPV6 {
        let head = pkt.buf.held();
        let packet = &head[net.offset..];
        if let Some(target) = nd::solicited_target(packet) {
            if Ipv6Addr::from(target) != gw6 {
                return Verdict::Pass;
            }
            let from: [u8; 16] = packet[8..24].try_into().expect("16 bytes");
            if learn {
                r.learn(vlan, IpAddr::from(from), pkt.src());
                r.counters.gateway_arp.fetch_add(1, Relaxed);
            }
            let reply = nd::router_advertisement_reply(gw_mac, target, pkt.src(), from);
            return Verdict::Answered(
                Some(reply.to_vec()),
                "neighbour solicitation for its address answered",
            );
        }
        if pkt.dst() == gw_mac {
            if let Some((target, mac)) = nd::advertised(packet) {
                if learn {
                    r.learn(vlan, IpAddr::from(target), mac.unwrap_or(pkt.src()));
                }
                return Verdict::Answered(None, "neighbour advertisement learned");
            }
        }
    }
    if pkt.dst() != gw_mac {
        return Verdict::Pass;
    }
    route_ipv6(st, cx, r, (seg, gw6), pkt)
}

fn route_ipv6(
    st: &State,
    cx: &Ctx,
    r: &Router,
    (seg, gw6): (Segment, Ipv6Addr),
    pkt: &mut Packet,
) -> Verdict {
    let gw_mac = r.mac(seg);
    let net = pkt.meta.layers.net().expect("an IPv6 frame's header");
    let ip = net.offset;
    let head = pkt.buf.held();
    let Some(dst) = head
        .get(ip + 24..ip + 40)
        .and_then(|b| <[u8; 16]>::try_from(b).ok())
    else {
        return Verdict::Pass;
    };
    let dst = Ipv6Addr::from(dst);
    match r.hop6(seg, dst) {
        // (A fragment is taken unanswered: the gateway does not
        // reassemble.)
        Hop6::Gateway if net.fragment => to_gateway(cx, r, None),
        Hop6::Gateway => {
            pkt.buf.fill_pending();
            to_gateway(cx, r, frames::echo_reply6(pkt.frame(), ip, net.end, gw_mac))
        }
        Hop6::None => unrouted(dst.into()),
        Hop6::Via { .. } if head[ip + 7] <= 1 => Verdict::Dropped(
            DropReason::TtlExceeded,
            frames::time_exceeded6(head, ip, gw6, gw_mac).map(|f| (f, pkt.meta.vlan)),
            format!("to {dst}: hop limit exceeded"),
        ),
        Hop6::Via { vlan, ip: hop } => {
            let ask = |s: Segment| Some(frames::solicitation(s.gateway6?, gw_mac, hop));
            let mac = match next_hop(st, cx, r, (vlan, IpAddr::V6(hop)), ask) {
                Ok(mac) => mac,
                Err(v) => return v,
            };
            frames::route_ipv6(pkt.buf.held_mut(), ip, gw_mac, mac);
            Verdict::Routed {
                vlan,
                mac,
                hop: IpAddr::V6(hop),
            }
        }
    }
}

fn route_ipv4(st: &State, cx: &Ctx, r: &Router, seg: Segment, pkt: &mut Packet) -> Verdict {
    let gw_mac = r.mac(seg);
    let Some(net) = pkt.meta.layers.net() else {
        return Verdict::Pass;
    };
    let (ip, hlen) = (net.offset, net.header_len);
    let head = pkt.buf.held();
    if head.len() < ip + 20 {
        return Verdict::Pass;
    }
    let dst = Ipv4Addr::from(<[u8; 4]>::try_from(&head[ip + 16..ip + 20]).expect("4 bytes"));
    match r.hop(seg, dst) {
        Hop::Gateway if net.fragment => to_gateway(cx, r, None),
        Hop::Gateway => {
            pkt.buf.fill_pending();
            to_gateway(
                cx,
                r,
                frames::echo_reply(pkt.frame(), ip, hlen, net.end, gw_mac),
            )
        }
        Hop::None => unrouted(dst.into()),
        Hop::Remote { .. } if seg.gateway.is_none() => Verdict::Dropped(
            DropReason::Unrouted,
            None,
            format!("to {dst}: from the fabric and back into it, not routed"),
        ),
        _ if head[ip + 8] <= 1 => {
            // Back to the sender from its own segment's gateway (one
            // routed here from another host gets no answer: this host
            // has no address in the L3 VNI).
            let sent = seg.gateway.map(|gw| {
                (
                    frames::time_exceeded(head, ip, hlen, gw, gw_mac),
                    pkt.meta.vlan,
                )
            });
            Verdict::Dropped(
                DropReason::TtlExceeded,
                sent,
                format!("to {dst}: TTL exceeded"),
            )
        }
        Hop::Remote { vni, vlan, vtep } => {
            let rmac = cx
                .sw
                .endpoint_on(vlan)
                .and_then(|(e, _)| e.evpn_resolve(vni, vtep));
            let Some(rmac) = rmac else {
                return Verdict::Dropped(
                    DropReason::NeighbourUnresolved,
                    None,
                    format!("to {dst}: behind {vtep}, whose router MAC the fabric has not said"),
                );
            };
            frames::route_ipv4(pkt.buf.held_mut(), ip, r.router_mac(), rmac);
            Verdict::Routed {
                vlan,
                mac: rmac,
                hop: vtep,
            }
        }
        Hop::Via { vlan, ip: hop } => {
            let ask = |s: Segment| Some(frames::arp_request(s.gateway?, gw_mac, hop).to_vec());
            let mac = match next_hop(st, cx, r, (vlan, IpAddr::V4(hop)), ask) {
                Ok(mac) => mac,
                Err(v) => return v,
            };
            frames::route_ipv4(pkt.buf.held_mut(), ip, gw_mac, mac);
            Verdict::Routed {
                vlan,
                mac,
                hop: IpAddr::V4(hop),
            }
        }
    }
}

/// A frame to a gateway's own address: an echo request answered with
/// `reply`, anything else taken.
fn to_gateway(cx: &Ctx, r: &Router, reply: Option<Vec<u8>>) -> Verdict {
    if reply.is_none() {
        return Verdict::Answered(None, "to its own address, taken");
    }
    if !cx.synthetic() {
        r.counters.gateway_echo.fetch_add(1, Relaxed);
    }
    Verdict::Answered(reply, "echo request answered")
}

/// A frame to an address its tenant has no route to.
fn unrouted(dst: IpAddr) -> Verdict {
    Verdict::Dropped(
        DropReason::Unrouted,
        None,
        format!("no route to {dst} in the tenant"),
    )
}

/// The MAC of next hop `hop` in segment `vlan`; else the frame dropped,
/// and the gateway's request for it (`ask`: ARP, or a neighbour
/// solicitation, from the segment's gateway) sent, at most every
/// half second.
fn next_hop(
    st: &State,
    cx: &Ctx,
    r: &Router,
    (vlan, hop): (u16, IpAddr),
    ask: impl FnOnce(Segment) -> Option<Vec<u8>>,
) -> Result<MacAddr, Verdict> {
    if let Some(mac) = neighbour(cx, r, vlan, hop) {
        return Ok(mac);
    }
    let asked = !cx.synthetic() && r.should_ask(vlan, hop, st.now);
    let request = r.segment(vlan).filter(|_| asked).and_then(ask);
    let said = if request.is_some() {
        r.counters.arp_requests_sent.fetch_add(1, Relaxed);
        if hop.is_ipv6() {
            ", asked with a neighbour solicitation"
        } else {
            ", asked with ARP"
        }
    } else {
        ""
    };
    Err(Verdict::Dropped(
        DropReason::NeighbourUnresolved,
        request.map(|f| (f, vlan)),
        format!("next hop {hop} in VLAN {vlan} not resolved{said}"),
    ))
}

/// The MAC of next hop `ip` in segment `vlan`: the router's neighbours
/// (the topology's VMs, ARP learned), else what BGP EVPN advertised in
/// that segment.
fn neighbour(cx: &Ctx, r: &Router, vlan: u16, ip: IpAddr) -> Option<MacAddr> {
    r.neighbour(vlan, ip).or_else(|| {
        let (vtep, vni) = cx.sw.endpoint_on(vlan)?;
        vtep.evpn_resolve(vni, ip)
    })
}
