//! The guards on frames built byte by byte: each lie a VM can tell
//! refused by its named guard, and the honest frames beside it passed.

use super::*;
use proptest::prelude::*;
use std::time::Duration;

const MAC: MacAddr = MacAddr([2, 0, 0, 0, 0, 0xa]);
const OTHER_MAC: MacAddr = MacAddr([2, 0, 0, 0, 0, 0xb]);
const OWN4: [u8; 4] = [198, 18, 0, 1];
const VICTIM4: [u8; 4] = [198, 18, 0, 2];
const OWN6: &str = "fd00::1";
const VICTIM6: &str = "fd00::2";

fn v6(s: &str) -> [u8; 16] {
    s.parse::<Ipv6Addr>().unwrap().octets()
}

fn settings(addrs: &str) -> PortSettings {
    PortSettings {
        addresses: Addresses::parse(addrs).unwrap(),
        ..PortSettings::default()
    }
}

/// The victim's addresses are another port's.
fn check(frame: &[u8], s: &PortSettings) -> Result<(), DropReason> {
    let victims = settings("198.18.0.2, fd00::2");
    let port = PortView {
        mac: MAC,
        settings: s,
        owned_elsewhere: |ip| victims.addresses.owns(ip),
        now: Instant::now(),
    };
    let layers = Layers::parse(frame).expect("a well-formed frame");
    inspect(frame, &layers, &port)
}

fn eth(src: MacAddr, ethertype: u16, payload: &[u8]) -> Vec<u8> {
    let mut f = vec![0x33, 0x33, 0, 0, 0, 1];
    f.extend(src.0);
    f.extend(ethertype.to_be_bytes());
    f.extend(payload);
    f
}

fn ipv4(src: [u8; 4], protocol: u8, l4: &[u8]) -> Vec<u8> {
    let mut h = vec![0x45, 0, 0, 0, 0, 0, 0x40, 0, 64, protocol, 0, 0];
    h[2..4].copy_from_slice(&u16::try_from(20 + l4.len()).unwrap().to_be_bytes());
    h.extend(src);
    h.extend([198, 18, 0, 255]);
    h.extend(l4);
    eth(MAC, 0x0800, &h)
}

fn udp(sport: u16, dport: u16) -> Vec<u8> {
    let mut u = sport.to_be_bytes().to_vec();
    u.extend(dport.to_be_bytes());
    u.extend(12u16.to_be_bytes());
    u.extend([0, 0, 1, 2, 3, 4]);
    u
}

fn ipv6(src: [u8; 16], next: u8, body: &[u8]) -> Vec<u8> {
    let mut h = vec![0x60, 0, 0, 0];
    h.extend(u16::try_from(body.len()).unwrap().to_be_bytes());
    h.extend([next, 255]);
    h.extend(src);
    h.extend(v6("ff02::1"));
    h.extend(body);
    eth(MAC, 0x86dd, &h)
}

/// An ICMPv6 message of `kind` about `target` with one link-layer
/// address option (`opt`: 1 source, 2 target) of `lla`.
fn nd_msg(kind: u8, target: [u8; 16], opt: u8, lla: MacAddr) -> Vec<u8> {
    let mut m = vec![kind, 0, 0, 0, 0x20, 0, 0, 0];
    m.extend(target);
    m.extend([opt, 1]);
    m.extend(lla.0);
    m
}

/// An ARP message in a frame from the port's MAC.
fn arp_frame(sender_mac: MacAddr, sender_ip: [u8; 4], op: arp::Operation) -> Vec<u8> {
    let mut f = arp::Repr {
        op,
        sender_mac,
        sender_ip,
        target_mac: OTHER_MAC,
        target_ip: [198, 18, 0, 9],
    }
    .frame()
    .to_vec();
    f[6..12].copy_from_slice(&MAC.0);
    f
}

#[test]
fn an_arp_reply_for_another_vms_address_is_refused_and_its_own_passes() {
    let s = settings("198.18.0.1");
    let reply = arp::Operation::Reply;
    assert_eq!(
        check(&arp_frame(MAC, VICTIM4, reply), &s),
        Err(DropReason::ArpGuard)
    );
    assert_eq!(check(&arp_frame(MAC, OWN4, reply), &s), Ok(()));
    assert_eq!(
        check(&arp_frame(MAC, OWN4, arp::Operation::Request), &s),
        Ok(())
    );
    assert_eq!(
        check(&arp_frame(MAC, [0; 4], arp::Operation::Request), &s),
        Ok(()),
        "a probe (RFC 5227) claims nothing"
    );
    assert_eq!(
        check(&arp_frame(OTHER_MAC, OWN4, reply), &s),
        Err(DropReason::ArpGuard),
        "a sender MAC not the frame's"
    );
    assert_eq!(
        check(&arp_frame(MAC, [198, 18, 0, 77], reply), &s),
        Err(DropReason::ArpGuard),
        "nobody's address, but not the port's"
    );
    let off = PortSettings {
        arp_guard: false,
        ..s
    };
    assert_eq!(check(&arp_frame(MAC, VICTIM4, reply), &off), Ok(()));
}

#[test]
fn a_port_of_unknown_addresses_may_claim_any_but_another_ports() {
    let s = settings("");
    let reply = arp::Operation::Reply;
    assert_eq!(
        check(&arp_frame(MAC, VICTIM4, reply), &s),
        Err(DropReason::ArpGuard)
    );
    assert_eq!(check(&arp_frame(MAC, [198, 18, 0, 77], reply), &s), Ok(()));
    let na = nd_msg(136, v6(VICTIM6), 2, MAC);
    assert_eq!(
        check(&ipv6(v6("fd00::77"), 58, &na), &s),
        Err(DropReason::NdGuard)
    );
    let na = nd_msg(136, v6("fd00::77"), 2, MAC);
    assert_eq!(check(&ipv6(v6("fd00::77"), 58, &na), &s), Ok(()));
    // Nor is it source-guarded.
    assert_eq!(check(&ipv4(VICTIM4, 17, &udp(1000, 53)), &s), Ok(()));
}

#[test]
fn a_neighbor_advertisement_for_another_vms_address_is_refused() {
    let s = settings("198.18.0.1, fd00::1");
    let own = v6(OWN6);
    let lie = nd_msg(136, v6(VICTIM6), 2, MAC);
    assert_eq!(check(&ipv6(own, 58, &lie), &s), Err(DropReason::NdGuard));
    let honest = nd_msg(136, own, 2, MAC);
    assert_eq!(check(&ipv6(own, 58, &honest), &s), Ok(()));
    let lla = eui64_link_local(MAC).octets();
    let honest_ll = nd_msg(136, lla, 2, MAC);
    assert_eq!(
        check(&ipv6(lla, 58, &honest_ll), &s),
        Ok(()),
        "its EUI-64 link-local address is its own"
    );
    let other_ll = eui64_link_local(OTHER_MAC).octets();
    let lie_ll = nd_msg(136, other_ll, 2, MAC);
    assert_eq!(
        check(&ipv6(lla, 58, &lie_ll), &s),
        Err(DropReason::NdGuard),
        "another's link-local address"
    );
    let wrong_lla = nd_msg(136, own, 2, OTHER_MAC);
    assert_eq!(
        check(&ipv6(own, 58, &wrong_lla), &s),
        Err(DropReason::NdGuard),
        "a target link-layer address not the frame's"
    );
    let mut zero_len = honest.clone();
    zero_len[25] = 0;
    assert_eq!(
        check(&ipv6(own, 58, &zero_len), &s),
        Err(DropReason::NdGuard)
    );
    // Another port's address as its source too: ND inspection names it.
    assert_eq!(
        check(&ipv6(v6(VICTIM6), 58, &lie), &s),
        Err(DropReason::NdGuard)
    );
}

#[test]
fn solicitations_claim_their_source_and_duplicate_address_probes_pass() {
    let s = settings("fd00::1");
    let ns = |src: &str, lla| ipv6(v6(src), 58, &nd_msg(135, v6("fd00::9"), 1, lla));
    assert_eq!(check(&ns(OWN6, MAC), &s), Ok(()));
    assert_eq!(check(&ns(VICTIM6, MAC), &s), Err(DropReason::NdGuard));
    assert_eq!(check(&ns(OWN6, OTHER_MAC), &s), Err(DropReason::NdGuard));
    // DAD: from ::, no source link-layer option.
    let dad = ipv6([0; 16], 58, &nd_msg(135, v6(OWN6), 0, MAC)[..24]);
    assert_eq!(check(&dad, &s), Ok(()));
    let mld2 = ipv6([0; 16], 58, &[143, 0, 0, 0, 0, 0, 0, 0]);
    assert_eq!(check(&mld2, &s), Ok(()), "an MLD report before an address");
    let ping_from_nothing = ipv6([0; 16], 58, &[128, 0, 0, 0, 0, 0, 0, 0]);
    assert_eq!(check(&ping_from_nothing, &s), Err(DropReason::SourceGuard));
}

#[test]
fn router_advertisements_and_redirects_are_refused_even_behind_extension_headers() {
    let s = settings("fd00::1");
    let lla = eui64_link_local(MAC).octets();
    let ra = [134, 0, 0, 0, 64, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
    assert_eq!(check(&ipv6(lla, 58, &ra), &s), Err(DropReason::RaGuard));
    // Hop-by-hop options (8 bytes of padding) before it (RFC 7113).
    let mut hbh = vec![58, 0, 1, 4, 0, 0, 0, 0];
    hbh.extend(ra);
    assert_eq!(check(&ipv6(lla, 0, &hbh), &s), Err(DropReason::RaGuard));
    let redirect = nd_msg(137, v6("fd00::9"), 2, MAC);
    assert_eq!(
        check(&ipv6(lla, 58, &redirect), &s),
        Err(DropReason::RaGuard)
    );
    let router = PortSettings {
        ra_guard: false,
        ..s.clone()
    };
    assert_eq!(check(&ipv6(lla, 58, &ra), &router), Ok(()));
    let rs = [133, 0, 0, 0, 0, 0, 0, 0];
    assert_eq!(check(&ipv6(lla, 58, &rs), &s), Ok(()), "a solicitation");
    assert_eq!(check(&ipv6([0; 16], 58, &rs), &s), Ok(()), "one from ::");
}

#[test]
fn dhcp_servers_are_refused_and_clients_pass() {
    let s = settings("198.18.0.1, fd00::1");
    assert_eq!(
        check(&ipv4(OWN4, 17, &udp(67, 68)), &s),
        Err(DropReason::DhcpGuard),
        "an offer"
    );
    assert_eq!(
        check(&ipv4(OWN4, 17, &udp(67, 67)), &s),
        Err(DropReason::DhcpGuard),
        "a relay"
    );
    assert_eq!(
        check(&ipv4([0; 4], 17, &udp(68, 67)), &s),
        Ok(()),
        "a discover"
    );
    assert_eq!(
        check(&ipv4(OWN4, 17, &udp(68, 67)), &s),
        Ok(()),
        "a renewal"
    );
    let lla = eui64_link_local(MAC).octets();
    let mut advertise = udp(547, 546);
    assert_eq!(
        check(&ipv6(lla, 17, &advertise), &s),
        Err(DropReason::DhcpGuard)
    );
    advertise[0..4].copy_from_slice(&[2, 34, 2, 35]);
    assert_eq!(check(&ipv6(lla, 17, &advertise), &s), Ok(()), "a solicit");
    let server = PortSettings {
        dhcp_guard: false,
        ..s
    };
    assert_eq!(check(&ipv4(OWN4, 17, &udp(67, 68)), &server), Ok(()));
}

#[test]
fn ip_source_guard_takes_the_ports_addresses_and_prefixes() {
    let s = settings("198.18.0.1, 198.18.8.0/24, fd00::1");
    let dns = udp(1000, 53);
    assert_eq!(check(&ipv4(OWN4, 17, &dns), &s), Ok(()));
    assert_eq!(check(&ipv4([198, 18, 8, 9], 17, &dns), &s), Ok(()));
    assert_eq!(
        check(&ipv4(VICTIM4, 17, &dns), &s),
        Err(DropReason::SourceGuard)
    );
    assert_eq!(
        check(&ipv4([0; 4], 17, &dns), &s),
        Err(DropReason::SourceGuard),
        "0.0.0.0 only for DHCP"
    );
    assert_eq!(check(&ipv4([0; 4], 2, &[0x22; 8]), &s), Ok(()), "IGMP");
    assert_eq!(check(&ipv6(v6(OWN6), 17, &dns), &s), Ok(()));
    assert_eq!(
        check(&ipv6(v6("fd00::3"), 17, &dns), &s),
        Err(DropReason::SourceGuard)
    );
    let off = PortSettings {
        source_guard: false,
        ..s.clone()
    };
    assert_eq!(check(&ipv4(VICTIM4, 17, &dns), &off), Ok(()));
    // IPv4 only: IPv6 is not guarded.
    let four = settings("198.18.0.1");
    assert_eq!(check(&ipv6(v6("fd00::3"), 17, &dns), &four), Ok(()));
}

#[test]
fn addresses_are_read_and_refused_with_the_reason() {
    let a = Addresses::parse("198.18.0.1, fd00::/64 ,fe80::/10").unwrap();
    assert_eq!(a.entries().len(), 3);
    assert!(a.contains("fd00::42".parse().unwrap()));
    assert!(!a.owns("fd00::42".parse().unwrap()));
    assert!(a.owns("198.18.0.1".parse().unwrap()));
    let j = serde_json::to_value(&a).unwrap();
    assert_eq!(
        j,
        serde_json::json!(["198.18.0.1", "fd00::/64", "fe80::/10"])
    );
    assert_eq!(serde_json::from_value::<Addresses>(j).unwrap(), a);
    assert_eq!(
        serde_json::from_value::<Addresses>(serde_json::json!("none")).unwrap(),
        Addresses::default()
    );
    for (bad, why) in [
        ("198.18.0.1/24", "host bits set"),
        ("198.18.0.0/33", "prefix length is 0..32"),
        ("nope", "not an IP address"),
        ("224.0.0.1", "not a unicast address"),
        ("::", "not a unicast address"),
        ("255.255.255.255", "not a unicast address"),
    ] {
        let e = Addresses::parse(bad).unwrap_err();
        assert!(e.contains(why), "{bad}: {e}");
    }
    let many = (0..=MAX_ADDRESSES)
        .map(|i| format!("198.18.1.{i}"))
        .collect::<Vec<_>>()
        .join(",");
    assert!(Addresses::parse(&many).unwrap_err().contains("at most"));
}

#[test]
fn the_eui64_link_local_address_is_linuxs() {
    let mac = MacAddr([0x52, 0x54, 0x00, 0x12, 0x34, 0x56]);
    assert_eq!(
        eui64_link_local(mac),
        "fe80::5054:ff:fe12:3456".parse::<Ipv6Addr>().unwrap()
    );
}

#[test]
fn cut_frames_never_panic() {
    let s = settings("198.18.0.1, fd00::1");
    let frames = [
        arp_frame(MAC, VICTIM4, arp::Operation::Reply),
        ipv6(v6(OWN6), 58, &nd_msg(136, v6(VICTIM6), 2, MAC)),
        ipv6(v6(OWN6), 58, &nd_msg(135, v6(VICTIM6), 1, MAC)),
        ipv4(OWN4, 17, &udp(67, 68)),
    ];
    for f in frames {
        for n in 0..=f.len() {
            if Layers::parse(&f[..n]).is_ok() {
                let _ = check(&f[..n], &s);
            }
        }
    }
}

proptest! {
    #[test]
    fn any_frame_is_passed_or_named(tail in proptest::collection::vec(any::<u8>(), 0..120), kind in 0usize..4) {
        let s = settings("198.18.0.1, fd00::1");
        let f = match kind {
            0 => eth(MAC, 0x0806, &tail),
            1 => ipv6(v6(OWN6), 58, &tail),
            2 => ipv6(v6(OWN6), 0, &tail),
            _ => ipv4(OWN4, 17, &tail),
        };
        if let Ok(layers) = Layers::parse(&f) {
            let port = PortView { mac: MAC, settings: &s, owned_elsewhere: |_| true, now: Instant::now() };
            let _ = inspect(&f, &layers, &port);
        }
    }
}

#[test]
fn a_dhcp_lease_is_the_ports_address_while_it_lasts() {
    let mut s = settings("");
    let dns = udp(1000, 53);
    assert_eq!(
        check(&ipv4([198, 18, 0, 77], 17, &dns), &s),
        Ok(()),
        "unguarded"
    );
    let now = Instant::now();
    s.leases
        .learn(Ipv4Addr::from(OWN4), now + Duration::from_secs(60));
    let at = |when, frame: &[u8]| {
        let port = PortView {
            mac: MAC,
            settings: &s,
            owned_elsewhere: |_| false,
            now: when,
        };
        inspect(frame, &Layers::parse(frame).unwrap(), &port)
    };
    assert_eq!(at(now, &ipv4(OWN4, 17, &dns)), Ok(()));
    assert_eq!(
        at(now, &ipv4([198, 18, 0, 77], 17, &dns)),
        Err(DropReason::SourceGuard)
    );
    let later = now + Duration::from_secs(61);
    assert_eq!(
        at(later, &ipv4(OWN4, 17, &dns)),
        Err(DropReason::SourceGuard),
        "the lease ended"
    );
    assert_eq!(
        at(later, &ipv4([0; 4], 17, &udp(68, 67))),
        Ok(()),
        "DHCP again"
    );
}
