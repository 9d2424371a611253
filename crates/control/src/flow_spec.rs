//! A frame described in words, for `hvnet trace PORT FLOW`: `dst=web1
//! proto=tcp dport=443 flags=S`, `src=198.18.0.9 dst=198.18.0.2 size=1500`,
//! `arp dst=198.18.0.2`, `vlan=10 dmac=ff:ff:ff:ff:ff:ff`. The words are
//! read here (each refused with the word and the reason); the names in
//! them are resolved by the caller, who knows the topology; and the frame
//! is built as a guest's stack would send it (its checksums right, its
//! payload zeros), so that every stage judges it as it would the real one.

use hvnet_wire::checksum::{self, pseudo_header_v4, pseudo_header_v6};
use hvnet_wire::ethernet::MacAddr;
use std::net::IpAddr;

/// The fields a FLOW may name, in the order help lists them.
pub const FIELDS: &[&str] = &[
    "src", "dst", "smac", "dmac", "vlan", "proto", "sport", "dport", "flags", "size", "ttl",
];

/// The protocols a FLOW may name.
pub const PROTOS: &[&str] = &["icmp", "tcp", "udp", "arp"];

/// The longest FLOW read (a line of words, not a file).
pub const MAX_LEN: usize = 1024;

/// A frame's protocol above IP (or ARP instead of IP).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Proto {
    /// An echo request.
    Icmp,
    /// A TCP segment with `flags`.
    Tcp,
    /// A UDP datagram.
    Udp,
    /// An ARP request for `dst`.
    Arp,
}

/// One end of the flow as written: an address or a VM's name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Host {
    /// A MAC address.
    Mac(MacAddr),
    /// An IP address.
    Ip(IpAddr),
    /// A VM (or port) by name: its MAC and address.
    Name(String),
}

/// A FLOW, read: what it names, nothing resolved yet.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FlowSpec {
    /// `src=`: the sender (default: the traced port's VM).
    pub src: Option<Host>,
    /// `dst=`: the receiver.
    pub dst: Option<Host>,
    /// `smac=`, `dmac=`: the Ethernet addresses, over what `src`/`dst` say.
    pub smac: Option<MacAddr>,
    /// See `smac`.
    pub dmac: Option<MacAddr>,
    /// `vlan=`: an 802.1Q tag in the frame (as a trunk's guest tags it).
    pub vlan: Option<u16>,
    /// `proto=` or a bare protocol word (default: ICMP with an IP `dst`).
    pub proto: Option<Proto>,
    /// `sport=`, `dport=`: TCP and UDP ports.
    pub sport: Option<u16>,
    /// See `sport`.
    pub dport: Option<u16>,
    /// `flags=`: TCP flags as tcpdump writes them (`S`, `SA`, `F.`, `R`).
    pub flags: Option<u8>,
    /// `size=`: the IP packet's length in bytes (as an MTU counts).
    pub size: Option<u16>,
    /// `ttl=`: the IP TTL or hop limit.
    pub ttl: Option<u8>,
}

/// A FLOW's words refused: the word and the reason.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FlowError {
    /// The word as given (empty for the FLOW as a whole).
    pub word: String,
    /// Why.
    pub reason: String,
}

impl std::fmt::Display for FlowError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.word.is_empty() {
            write!(f, "{}", self.reason)
        } else {
            write!(f, "{:?}: {}", self.word, self.reason)
        }
    }
}

fn refuse(word: &str, reason: impl Into<String>) -> FlowError {
    FlowError {
        word: word.chars().take(64).collect(),
        reason: reason.into(),
    }
}

fn number<T: TryFrom<u64>>(
    word: &str,
    v: &str,
    lo: u64,
    hi: u64,
    what: &str,
) -> Result<T, FlowError> {
    v.parse::<u64>()
        .ok()
        .filter(|n| (lo..=hi).contains(n))
        .and_then(|n| T::try_from(n).ok())
        .ok_or_else(|| refuse(word, format!("{what} is a number from {lo} to {hi}")))
}

fn host(word: &str, v: &str) -> Result<Host, FlowError> {
    if let Ok(ip) = v.parse::<IpAddr>() {
        return Ok(Host::Ip(ip));
    }
    if let Ok(mac) = v.parse::<MacAddr>() {
        return Ok(Host::Mac(mac));
    }
    let name_char = |c: char| c.is_ascii_alphanumeric() || "-_.".contains(c);
    if !v.is_empty() && v.len() <= 64 && v.chars().all(name_char) {
        return Ok(Host::Name(v.to_string()));
    }
    Err(refuse(word, "an IP address, a MAC address or a VM's name"))
}

fn mac(word: &str, v: &str) -> Result<MacAddr, FlowError> {
    v.parse()
        .map_err(|_| refuse(word, "a MAC address (02:00:00:00:00:01)"))
}

/// TCP flags in tcpdump's letters: S, F, R, P, U, E, W (CWR), and `.` or
/// A for ACK.
fn tcp_flags(word: &str, v: &str) -> Result<u8, FlowError> {
    let mut f = 0u8;
    for c in v.chars() {
        f |= match c {
            'F' => 0x01,
            'S' => 0x02,
            'R' => 0x04,
            'P' => 0x08,
            '.' | 'A' => 0x10,
            'U' => 0x20,
            'E' => 0x40,
            'W' => 0x80,
            _ => {
                return Err(refuse(
                    word,
                    "TCP flags are the letters S F R P A (or .) U E W",
                ))
            }
        };
    }
    if v.is_empty() {
        return Err(refuse(
            word,
            "no flags: write them as tcpdump does (S, SA, F., R)",
        ));
    }
    Ok(f)
}

/// Reads a FLOW's words.
pub fn parse(words: &str) -> Result<FlowSpec, FlowError> {
    if words.len() > MAX_LEN {
        return Err(refuse(
            "",
            format!("a FLOW is at most {MAX_LEN} characters"),
        ));
    }
    let mut s = FlowSpec::default();
    let mut seen: Vec<&str> = Vec::new();
    for word in words.split_whitespace() {
        let (key, v) = match word.split_once('=') {
            Some(kv) => kv,
            None if PROTOS.contains(&word) => ("proto", word),
            None => {
                return Err(refuse(
                    word,
                    format!(
                        "not a field=value word nor a protocol ({}); the fields are {}",
                        PROTOS.join(", "),
                        FIELDS.join(", ")
                    ),
                ))
            }
        };
        if seen.contains(&key) {
            return Err(refuse(word, format!("{key} is given twice")));
        }
        match key {
            "src" => s.src = Some(host(word, v)?),
            "dst" => s.dst = Some(host(word, v)?),
            "smac" => s.smac = Some(mac(word, v)?),
            "dmac" => s.dmac = Some(mac(word, v)?),
            "vlan" => s.vlan = Some(number(word, v, 1, 4094, "a VLAN")?),
            "proto" => {
                s.proto = Some(match v {
                    "icmp" => Proto::Icmp,
                    "tcp" => Proto::Tcp,
                    "udp" => Proto::Udp,
                    "arp" => Proto::Arp,
                    _ => {
                        return Err(refuse(
                            word,
                            format!("the protocols are {}", PROTOS.join(", ")),
                        ))
                    }
                })
            }
            "sport" => s.sport = Some(number(word, v, 0, 65535, "a port")?),
            "dport" => s.dport = Some(number(word, v, 0, 65535, "a port")?),
            "flags" => s.flags = Some(tcp_flags(word, v)?),
            "size" => s.size = Some(number(word, v, 20, 65535, "an IP packet's size")?),
            "ttl" => s.ttl = Some(number(word, v, 1, 255, "a TTL")?),
            _ => {
                return Err(refuse(
                    word,
                    format!("no field {key:?}; the fields are {}", FIELDS.join(", ")),
                ))
            }
        }
        seen.push(key);
    }
    if seen.is_empty() {
        return Err(refuse(
            "",
            format!(
                "an empty FLOW: name at least dst= (the fields are {})",
                FIELDS.join(", ")
            ),
        ));
    }
    let proto = s.proto;
    let ports = s.sport.is_some() || s.dport.is_some();
    if ports && !matches!(proto, Some(Proto::Tcp | Proto::Udp)) {
        return Err(refuse("", "sport= and dport= need proto=tcp or proto=udp"));
    }
    if s.flags.is_some() && proto != Some(Proto::Tcp) {
        return Err(refuse("", "flags= needs proto=tcp"));
    }
    if proto == Some(Proto::Arp) && (s.size.is_some() || s.ttl.is_some()) {
        return Err(refuse("", "an ARP request has no size= or ttl="));
    }
    Ok(s)
}

/// A FLOW resolved: every address known.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Resolved {
    /// Ethernet source and destination.
    pub smac: MacAddr,
    /// See `smac`.
    pub dmac: MacAddr,
    /// The tag, if any.
    pub vlan: Option<u16>,
    /// IP source and destination (the same family), if the frame is IP
    /// or ARP.
    pub ips: Option<(IpAddr, IpAddr)>,
}

/// The smallest IP packet of `proto` in `family`: its headers (an echo
/// request carries ping's 56 bytes by default).
fn headers(proto: Proto, v6: bool) -> usize {
    let ip = if v6 { 40 } else { 20 };
    ip + match proto {
        Proto::Icmp => 8 + 56,
        Proto::Tcp => 20,
        Proto::Udp => 8,
        Proto::Arp => 0,
    }
}

/// The frame a guest's stack would send for `s` between `r`'s
/// addresses.
pub fn build(s: &FlowSpec, r: &Resolved) -> Result<Vec<u8>, FlowError> {
    let mut f = Vec::with_capacity(128);
    f.extend_from_slice(&r.dmac.0);
    f.extend_from_slice(&r.smac.0);
    if let Some(v) = r.vlan {
        f.extend_from_slice(&0x8100u16.to_be_bytes());
        f.extend_from_slice(&v.to_be_bytes());
    }
    let proto = s.proto.unwrap_or(Proto::Icmp);
    let Some((src, dst)) = r.ips else {
        if s.proto.is_some() {
            return Err(refuse(
                "",
                "an IP or ARP frame needs dst= an IP address or a VM with one",
            ));
        }
        // Ethernet alone: an empty frame of an experimental type.
        f.extend_from_slice(&0x88b5u16.to_be_bytes());
        f.resize(f.len().max(60), 0);
        return Ok(f);
    };
    if proto == Proto::Arp {
        let (IpAddr::V4(spa), IpAddr::V4(tpa)) = (src, dst) else {
            return Err(refuse(
                "",
                "ARP is IPv4's: IPv6 finds neighbours with ICMPv6",
            ));
        };
        f.extend_from_slice(&0x0806u16.to_be_bytes());
        f.extend_from_slice(&[0, 1, 8, 0, 6, 4, 0, 1]);
        f.extend_from_slice(&r.smac.0);
        f.extend_from_slice(&spa.octets());
        f.extend_from_slice(&[0; 6]);
        f.extend_from_slice(&tpa.octets());
        f.resize(f.len().max(60), 0);
        return Ok(f);
    }
    let v6 = src.is_ipv6();
    if v6 != dst.is_ipv6() {
        return Err(refuse("", "src and dst are of different IP versions"));
    }
    let min = headers(proto, v6);
    let size = match s.size {
        Some(n) if usize::from(n) < min => {
            return Err(refuse(
                "",
                format!("size={n} is less than this packet's headers ({min} bytes)"),
            ))
        }
        Some(n) => usize::from(n),
        None => min,
    };
    let ttl = s.ttl.unwrap_or(64);
    let ip_len = if v6 { 40 } else { 20 };
    let l4_len = size - ip_len;
    let (ip_proto, l4) = match proto {
        Proto::Icmp => {
            let mut m = vec![0u8; l4_len];
            m[0] = if v6 { 128 } else { 8 };
            m[4..6].copy_from_slice(&0x4876u16.to_be_bytes());
            m[6..8].copy_from_slice(&1u16.to_be_bytes());
            (if v6 { 58 } else { 1 }, m)
        }
        Proto::Tcp => {
            let mut m = vec![0u8; l4_len];
            m[0..2].copy_from_slice(&s.sport.unwrap_or(49152).to_be_bytes());
            m[2..4].copy_from_slice(&s.dport.unwrap_or(80).to_be_bytes());
            m[4..8].copy_from_slice(&1u32.to_be_bytes());
            let flags = s.flags.unwrap_or(0x02);
            if flags & 0x10 != 0 {
                m[8..12].copy_from_slice(&1u32.to_be_bytes());
            }
            m[12] = 5 << 4;
            m[13] = flags;
            m[14..16].copy_from_slice(&64240u16.to_be_bytes());
            (6, m)
        }
        Proto::Udp => {
            let mut m = vec![0u8; l4_len];
            m[0..2].copy_from_slice(&s.sport.unwrap_or(49152).to_be_bytes());
            m[2..4].copy_from_slice(&s.dport.unwrap_or(9).to_be_bytes());
            m[4..6].copy_from_slice(&(l4_len as u16).to_be_bytes());
            (17, m)
        }
        Proto::Arp => unreachable!("ARP is built above"),
    };
    let mut l4 = l4;
    let csum_at = match proto {
        Proto::Icmp => 2,
        Proto::Tcp => 16,
        _ => 6,
    };
    let sum = match (src, dst) {
        (IpAddr::V4(a), IpAddr::V4(b)) if proto != Proto::Icmp => {
            pseudo_header_v4(a.octets(), b.octets(), ip_proto, l4_len as u32)
        }
        (IpAddr::V6(a), IpAddr::V6(b)) => {
            pseudo_header_v6(a.octets(), b.octets(), ip_proto, l4_len as u32)
        }
        _ => checksum::Sum::default(),
    };
    let mut c = sum.add_bytes(&l4).finish();
    if proto == Proto::Udp && c == 0 {
        c = 0xffff;
    }
    l4[csum_at..csum_at + 2].copy_from_slice(&c.to_be_bytes());
    match (src, dst) {
        (IpAddr::V4(a), IpAddr::V4(b)) => {
            f.extend_from_slice(&0x0800u16.to_be_bytes());
            let mut h = [0u8; 20];
            h[0] = 0x45;
            h[2..4].copy_from_slice(&(size as u16).to_be_bytes());
            h[6] = 0x40; // don't fragment, as a TCP stack sets it
            h[8] = ttl;
            h[9] = ip_proto;
            h[12..16].copy_from_slice(&a.octets());
            h[16..20].copy_from_slice(&b.octets());
            let c = checksum::checksum(&h);
            h[10..12].copy_from_slice(&c.to_be_bytes());
            f.extend_from_slice(&h);
        }
        (IpAddr::V6(a), IpAddr::V6(b)) => {
            f.extend_from_slice(&0x86ddu16.to_be_bytes());
            let mut h = [0u8; 40];
            h[0] = 0x60;
            h[4..6].copy_from_slice(&(l4_len as u16).to_be_bytes());
            h[6] = ip_proto;
            h[7] = ttl;
            h[8..24].copy_from_slice(&a.octets());
            h[24..40].copy_from_slice(&b.octets());
            f.extend_from_slice(&h);
        }
        _ => unreachable!("the families were checked"),
    }
    f.extend_from_slice(&l4);
    f.resize(f.len().max(60), 0);
    Ok(f)
}

#[cfg(test)]
mod tests {
    use super::*;
    use hvnet_wire::layers::Layers;

    fn resolved(src: &str, dst: &str) -> Resolved {
        Resolved {
            smac: "02:00:00:00:00:01".parse().unwrap(),
            dmac: "02:00:00:00:00:02".parse().unwrap(),
            vlan: None,
            ips: Some((src.parse().unwrap(), dst.parse().unwrap())),
        }
    }

    #[test]
    fn words_become_fields_and_bad_ones_are_refused_with_the_word() {
        let s = parse("dst=web1 tcp dport=5201 flags=S size=1500 vlan=10").unwrap();
        assert_eq!(s.dst, Some(Host::Name("web1".into())));
        assert_eq!(
            (s.proto, s.dport, s.flags, s.size, s.vlan),
            (Some(Proto::Tcp), Some(5201), Some(2), Some(1500), Some(10))
        );
        for (words, word, why) in [
            ("dst=1.2.3.4 vlan=4095", "vlan=4095", "1 to 4094"),
            ("dst=1.2.3.4 color=red", "color=red", "no field \"color\""),
            ("dst=1.2.3.4 sctp", "sctp", "not a field=value"),
            ("dst=1.2.3.4 proto=gre", "proto=gre", "icmp, tcp, udp, arp"),
            ("tcp dport=99999", "dport=99999", "0 to 65535"),
            ("tcp flags=SX", "flags=SX", "S F R P"),
            ("dst=a dst=b", "dst=b", "twice"),
            ("dst=!!", "dst=!!", "a VM's name"),
        ] {
            let e = parse(words).unwrap_err();
            assert_eq!(e.word, word, "{words}");
            assert!(e.reason.contains(why), "{words}: {e}");
        }
        assert!(parse("").unwrap_err().reason.contains("empty"));
        assert!(parse("udp flags=S")
            .unwrap_err()
            .reason
            .contains("proto=tcp"));
        assert!(parse("dport=80")
            .unwrap_err()
            .reason
            .contains("proto=tcp or proto=udp"));
    }

    #[test]
    fn a_built_frame_parses_as_described_and_its_checksums_verify() {
        for (words, src, dst) in [
            (
                "tcp dport=5201 flags=S size=1500",
                "198.18.0.1",
                "198.18.0.2",
            ),
            (
                "udp sport=5000 dport=53 size=200",
                "198.18.0.1",
                "198.18.0.2",
            ),
            ("icmp", "198.18.0.1", "198.18.0.2"),
            ("tcp dport=22 flags=SA", "2001:db8::1", "2001:db8::2"),
            ("udp dport=4789", "2001:db8::1", "2001:db8::2"),
            ("icmp size=1280", "2001:db8::1", "2001:db8::2"),
        ] {
            let s = parse(words).unwrap();
            let f = build(&s, &resolved(src, dst)).unwrap();
            let l = Layers::parse(&f).unwrap();
            let net = l.net().expect("IP");
            let ip = &f[net.offset..net.end];
            let v6 = src.contains(':');
            let ip_len = if v6 { 40 } else { 20 };
            if let Some(n) = s.size {
                assert_eq!(ip.len(), usize::from(n), "{words}");
            }
            if !v6 {
                assert!(
                    checksum::verifies(checksum::Sum::default().add_bytes(&ip[..ip_len])),
                    "{words}: IP checksum"
                );
            }
            let (proto, l4) = (net.protocol, &f[net.offset + net.header_len..net.end]);
            let pseudo = match (
                src.parse::<IpAddr>().unwrap(),
                dst.parse::<IpAddr>().unwrap(),
            ) {
                (IpAddr::V4(_), _) if proto == 1 => checksum::Sum::default(),
                (IpAddr::V4(a), IpAddr::V4(b)) => {
                    pseudo_header_v4(a.octets(), b.octets(), proto, l4.len() as u32)
                }
                (IpAddr::V6(a), IpAddr::V6(b)) => {
                    pseudo_header_v6(a.octets(), b.octets(), proto, l4.len() as u32)
                }
                _ => unreachable!(),
            };
            assert!(
                checksum::verifies(pseudo.add_bytes(l4)),
                "{words}: L4 checksum"
            );
            if let Some(p) = s.dport {
                assert_eq!(u16::from_be_bytes([l4[2], l4[3]]), p);
            }
        }
    }

    #[test]
    fn arp_and_tags_are_built_as_a_guest_sends_them() {
        let mut r = resolved("198.18.0.1", "198.18.0.2");
        r.vlan = Some(10);
        r.dmac = MacAddr::BROADCAST;
        let f = build(&parse("arp dst=198.18.0.2").unwrap(), &r).unwrap();
        assert_eq!(&f[12..16], &[0x81, 0x00, 0, 10]);
        assert_eq!(&f[16..18], &[0x08, 0x06]);
        assert_eq!(&f[18 + 24..18 + 28], &[198, 18, 0, 2]);
        let l = Layers::parse(&f).unwrap();
        assert_eq!(l.outer_vlan(), Some(10));
        let e = build(
            &parse("arp").unwrap(),
            &resolved("2001:db8::1", "2001:db8::2"),
        )
        .unwrap_err();
        assert!(e.reason.contains("IPv4"));
        let e = build(
            &parse("icmp size=30").unwrap(),
            &resolved("198.18.0.1", "198.18.0.2"),
        )
        .unwrap_err();
        assert!(e.reason.contains("headers"));
    }

    use proptest::prelude::*;

    proptest! {
        /// Any words made of the fields and their values (good and bad):
        /// refused with a word that was given, or built into a frame
        /// whose size and tag are what the words say.
        #[test]
        fn any_words_are_refused_or_built_as_said(
            words in proptest::collection::vec(
                prop_oneof![
                    proptest::sample::select(FIELDS).prop_flat_map(|f| {
                        prop_oneof![
                            proptest::strategy::Just(format!("{f}=")),
                            (0u32..70000).prop_map(move |n| format!("{f}={n}")),
                            proptest::sample::select(&["S", "SA", "F.", "X", "tcp", "udp", "arp", "icmp", "198.18.0.2", "fd00::2", "02:00:00:00:00:09", "web"][..])
                                .prop_map(move |v| format!("{f}={v}")),
                        ]
                    }),
                    proptest::sample::select(PROTOS).prop_map(str::to_string),
                    "[ -~]{0,12}",
                ],
                0..8,
            ),
            v6 in proptest::bool::ANY,
        ) {
            let text = words.join(" ");
            match parse(&text) {
                Err(e) => prop_assert!(e.word.is_empty() || text.contains(&e.word)),
                Ok(s) => {
                    let r = if v6 { resolved("2001:db8::1", "2001:db8::2") } else { resolved("198.18.0.1", "198.18.0.2") };
                    let r = Resolved { vlan: s.vlan, ..r };
                    if let Ok(f) = build(&s, &r) {
                        let l = Layers::parse(&f).expect("a built frame parses");
                        prop_assert_eq!(l.outer_vlan(), s.vlan);
                        if let (Some(n), Some(net)) = (s.size, l.net()) {
                            prop_assert_eq!(net.end - net.offset, usize::from(n));
                        }
                    }
                }
            }
        }
    }
}
