//! The values settings are written in: rates and bursts as `tc` writes
//! them, addresses and prefixes as `ip` does, vSphere's share levels.
//! Kept apart from the stages that use them, so that the settings name no
//! stage.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// vSphere's share levels: low, normal (the default), high.
pub const SHARES_NORMAL: u32 = 50;

/// The smallest burst a rate takes: one largest GSO frame and its headers.
pub const MIN_BURST: u64 = 65_536 + 1024;
/// The largest rate a port takes (1 Tbit/s).
pub const MAX_RATE: u64 = 1_000_000_000_000;
/// The longest a burst may be, at any rate (1 GiB).
pub const MAX_BURST: u64 = 1 << 30;

/// A rate in bits a second, written as `tc` writes it: `"1gbit"`,
/// `"500mbit"`, `"64kbit"`, `"9600bit"` (SI multiples), or a number of
/// bits a second.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Rate(pub u64);

/// A burst in bytes: `"256kb"`, `"2mb"`, `"1500b"` (multiples of 1024, as
/// `tc`), or a number of bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Burst(pub u64);

/// Reads a rate as [`Rate`] says; the error names what it takes.
pub fn parse_rate(s: &str) -> Result<Rate, String> {
    let units = [
        ("tbit", 1_000_000_000_000),
        ("gbit", 1_000_000_000),
        ("mbit", 1_000_000),
        ("kbit", 1_000),
        ("bit", 1),
    ];
    let r = scaled(s, &units).ok_or_else(|| {
        format!("rate {s:?} is not a number with bit, kbit, mbit, gbit or tbit (as tc writes it, e.g. \"1gbit\")")
    })?;
    if !(1..=MAX_RATE).contains(&r) {
        return Err(format!("rate {s:?} is outside 1bit..1tbit"));
    }
    Ok(Rate(r))
}

/// Reads a burst as [`Burst`] says; the error names what it takes.
pub fn parse_burst(s: &str) -> Result<Burst, String> {
    let units = [("gb", 1 << 30), ("mb", 1 << 20), ("kb", 1 << 10), ("b", 1)];
    let b = scaled(s, &units).ok_or_else(|| {
        format!("burst {s:?} is not a number with b, kb, mb or gb (bytes, as tc writes it, e.g. \"256kb\")")
    })?;
    if !(MIN_BURST..=MAX_BURST).contains(&b) {
        return Err(format!(
            "burst {s:?} is outside {}kb..1gb (at least one largest GSO frame)",
            MIN_BURST.div_ceil(1024)
        ));
    }
    Ok(Burst(b))
}

/// `s` as a number with one of `units` (case-insensitive), or a bare number.
fn scaled(s: &str, units: &[(&str, u64)]) -> Option<u64> {
    let t = s.trim().to_ascii_lowercase();
    let (digits, mult) = units
        .iter()
        .find_map(|(u, m)| t.strip_suffix(u).map(|d| (d.trim(), *m)))
        .unwrap_or((t.as_str(), 1));
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse::<u64>().ok()?.checked_mul(mult)
}

/// The rate as `tc` would print it (the largest unit it is a whole
/// number of).
impl std::fmt::Display for Rate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let r = self.0;
        match [
            (1_000_000_000_000, "tbit"),
            (1_000_000_000, "gbit"),
            (1_000_000, "mbit"),
            (1_000, "kbit"),
        ]
        .into_iter()
        .find(|(m, _)| r.is_multiple_of(*m))
        {
            Some((m, u)) => write!(f, "{}{u}", r / m),
            None => write!(f, "{r}bit"),
        }
    }
}

impl std::fmt::Display for Burst {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let b = self.0;
        match [(1 << 30, "gb"), (1 << 20, "mb"), (1 << 10, "kb")]
            .into_iter()
            .find(|(m, _)| b.is_multiple_of(*m))
        {
            Some((m, u)) => write!(f, "{}{u}", b / m),
            None => write!(f, "{b}b"),
        }
    }
}

/// Rates and bursts are written as `tc` writes them (`"1gbit"`,
/// `"256kb"`) and read as [`parse_rate`] and [`parse_burst`] read them, or
/// as a bare number (bits a second, bytes).
macro_rules! tc_words {
    ($t:ty, $parse:ident) => {
        impl Serialize for $t {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.collect_str(self)
            }
        }

        impl<'de> Deserialize<'de> for $t {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                #[derive(Deserialize)]
                #[serde(untagged)]
                enum NumberOrWord {
                    Number(u64),
                    Word(String),
                }
                match NumberOrWord::deserialize(d)? {
                    NumberOrWord::Number(n) => $parse(&n.to_string()),
                    NumberOrWord::Word(w) => $parse(&w),
                }
                .map_err(serde::de::Error::custom)
            }
        }
    };
}
tc_words!(Rate, parse_rate);
tc_words!(Burst, parse_burst);

/// The smallest default burst: 8,000 kbit (1,000,000 bytes), Open
/// vSwitch's default for its policer. A bucket of a few GSO frames makes a
/// TCP sender at a low rate lose frames whole windows at a time (at 10
/// Mbit/s with 65 KiB, 0.4 of the rate got through); a megabyte lets it
/// settle at the rate.
pub const DEFAULT_MIN_BURST: u64 = 1_000_000;

/// The default burst of a rate: 10 ms of it (at least a tick's worth of
/// the rate, as Linux's `tc` wants), and at least [`DEFAULT_MIN_BURST`].
pub fn default_burst(rate: Rate) -> Burst {
    Burst((rate.0 / 8 / 100).clamp(DEFAULT_MIN_BURST, MAX_BURST))
}

/// Most entries a port's `addresses` takes.
pub const MAX_ADDRESSES: usize = 64;

/// An address, or a prefix of them (`198.18.0.0/24`, `fe80::/64`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cidr {
    addr: IpAddr,
    len: u8,
}

impl Cidr {
    /// One address.
    pub fn host(addr: IpAddr) -> Cidr {
        let len = if addr.is_ipv4() { 32 } else { 128 };
        Cidr { addr, len }
    }
    /// The prefix `len` bits long that `addr` is in (its host bits kept:
    /// a gateway's own address with its subnet's length); a length past
    /// the family's is taken as a host.
    pub fn prefix(addr: IpAddr, len: u8) -> Cidr {
        let max = if addr.is_ipv4() { 32 } else { 128 };
        Cidr {
            addr,
            len: len.min(max),
        }
    }
    /// True if `ip` is in it.
    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.addr, ip) {
            (IpAddr::V4(a), IpAddr::V4(b)) => {
                let m = u32::MAX.checked_shl(32 - u32::from(self.len)).unwrap_or(0);
                u32::from(a) & m == u32::from(b) & m
            }
            (IpAddr::V6(a), IpAddr::V6(b)) => {
                let m = u128::MAX
                    .checked_shl(128 - u32::from(self.len))
                    .unwrap_or(0);
                u128::from(a) & m == u128::from(b) & m
            }
            _ => false,
        }
    }
    /// True for one address (not a prefix).
    pub fn is_host(&self) -> bool {
        self.len == if self.addr.is_ipv4() { 32 } else { 128 }
    }
}

impl std::fmt::Display for Cidr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.is_host() {
            write!(f, "{}", self.addr)
        } else {
            write!(f, "{}/{}", self.addr, self.len)
        }
    }
}

impl std::str::FromStr for Cidr {
    type Err = String;
    /// An address, or a prefix without host bits: what a port may send
    /// from and claim, so no group, unspecified or broadcast address.
    fn from_str(s: &str) -> Result<Cidr, String> {
        let (a, len) = match s.split_once('/') {
            Some((a, l)) => (a, Some(l)),
            None => (s, None),
        };
        let addr: IpAddr = a
            .trim()
            .parse()
            .map_err(|_| format!("{s:?} is not an IP address or prefix"))?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let len = match len {
            None => max,
            Some(l) => l
                .trim()
                .parse::<u8>()
                .ok()
                .filter(|l| *l <= max)
                .ok_or_else(|| format!("{s:?}: prefix length is 0..{max}"))?,
        };
        if addr.is_multicast() || addr.is_unspecified() || addr == IpAddr::V4(Ipv4Addr::BROADCAST) {
            return Err(format!(
                "{s:?} is not a unicast address: a port cannot own it"
            ));
        }
        let c = Cidr { addr, len };
        if c.network() != addr {
            return Err(format!(
                "{s:?} has host bits set: write the address alone, or the prefix {}/{len}",
                c.network()
            ));
        }
        Ok(c)
    }
}

impl Cidr {
    /// Its network address: its address with the host bits clear.
    pub fn network(&self) -> IpAddr {
        match self.addr {
            IpAddr::V4(a) => {
                let m = u32::MAX.checked_shl(32 - u32::from(self.len)).unwrap_or(0);
                IpAddr::V4(Ipv4Addr::from(u32::from(a) & m))
            }
            IpAddr::V6(a) => {
                let m = u128::MAX
                    .checked_shl(128 - u32::from(self.len))
                    .unwrap_or(0);
                IpAddr::V6(Ipv6Addr::from(u128::from(a) & m))
            }
        }
    }
}

/// A port's addresses as the guards see them: what it may send from and
/// answer for in ARP and ND. Written as a list (`["198.18.0.5",
/// "fd00::5", "198.18.7.0/24"]`) or one comma-separated string (`hvnet
/// port VM set addresses=198.18.0.5,fd00::5`; `none` clears it).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Addresses(Vec<Cidr>);

impl Addresses {
    /// From entries, checked: at most [`MAX_ADDRESSES`].
    pub fn new(entries: Vec<Cidr>) -> Result<Addresses, String> {
        if entries.len() > MAX_ADDRESSES {
            return Err(format!("at most {MAX_ADDRESSES} addresses"));
        }
        Ok(Addresses(entries))
    }
    /// Parses a comma-separated list (`none` or nothing: empty).
    pub fn parse(s: &str) -> Result<Addresses, String> {
        let s = s.trim();
        if s.is_empty() || s == "none" {
            return Ok(Addresses::default());
        }
        Addresses::new(
            s.split(',')
                .map(str::parse)
                .collect::<Result<Vec<Cidr>, String>>()?,
        )
    }
    /// Its entries.
    pub fn entries(&self) -> &[Cidr] {
        &self.0
    }
    /// Adds one (kept once).
    pub fn push(&mut self, c: Cidr) {
        if !self.0.contains(&c) {
            self.0.push(c);
        }
    }
    /// True if it has an entry of `ip`'s family (the family is guarded).
    pub(crate) fn guards_family_of(&self, ip: IpAddr) -> bool {
        self.0.iter().any(|c| c.addr.is_ipv4() == ip.is_ipv4())
    }
    /// True if `ip` is in one of its entries.
    pub fn contains(&self, ip: IpAddr) -> bool {
        self.0.iter().any(|c| c.contains(ip))
    }
    /// True if `ip` is one of its single addresses (a prefix a router VM
    /// may send from is not a claim on each address in it).
    pub fn owns(&self, ip: IpAddr) -> bool {
        self.0.iter().any(|c| c.is_host() && c.addr == ip)
    }
}

impl Serialize for Addresses {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.0.iter().map(|c| c.to_string()))
    }
}

impl<'de> Deserialize<'de> for Addresses {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Addresses, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Repr {
            One(String),
            List(Vec<String>),
        }
        let r = Repr::deserialize(d)
            .map_err(|_| serde::de::Error::custom("expected a list of addresses"))?;
        match r {
            Repr::One(s) => Addresses::parse(&s),
            Repr::List(l) => l
                .iter()
                .map(|s| s.parse())
                .collect::<Result<Vec<Cidr>, String>>()
                .and_then(Addresses::new),
        }
        .map_err(serde::de::Error::custom)
    }
}
