//! A libvirt domain's XML, as far as hvnet reads it: its vhost-user
//! interfaces, and what hvnet's own `<metadata>` element says of them.
//!
//! libvirt has words for a port's MAC (`<mac>`), queue pairs (`<driver
//! queues>`), cable (`<link state>`) and name (`<target dev>`); those are
//! read where libvirt puts them. It refuses `<vlan>` on a vhost-user
//! interface (only Open vSwitch's tap ports and passthrough take one), so
//! VLANs live in hvnet's metadata, in `<vlan>`'s own syntax:
//!
//! ```xml
//! <metadata>
//!   <hvnet:ports xmlns:hvnet="urn:hvnet:libvirt:1">
//!     <hvnet:port mac="52:54:00:00:00:01" name="web1">
//!       <hvnet:vlan trunk="yes">
//!         <hvnet:tag id="10"/>
//!         <hvnet:tag id="20"/>
//!         <hvnet:tag id="5" nativeMode="untagged"/>
//!       </hvnet:vlan>
//!     </hvnet:port>
//!   </hvnet:ports>
//! </metadata>
//! ```

use hvnet_wire::MacAddr;
use std::path::PathBuf;

/// hvnet's namespace in a domain's `<metadata>`.
pub const NAMESPACE: &str = "urn:hvnet:libvirt:1";

/// The largest domain XML read (libvirt's own limit for a domain is far
/// larger; hvnet reads only its interfaces and metadata).
pub const MAX_XML: usize = 4 << 20;

/// A domain: its name and its vhost-user interfaces.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Domain {
    /// The domain's name.
    pub name: String,
    /// Its UUID.
    pub uuid: String,
    /// Its `<interface type='vhostuser'>` elements, in order.
    pub nics: Vec<Nic>,
}

/// One `<interface type='vhostuser'>`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Nic {
    /// `<mac address>`.
    pub mac: MacAddr,
    /// `<source path>`.
    pub socket: PathBuf,
    /// `<source mode='server'>`: QEMU (or libvirt for it) listens and the
    /// switch connects; `'client'`: the switch listens.
    pub qemu_listens: bool,
    /// `<driver queues>` (1 where absent).
    pub queues: usize,
    /// `<link state='down'>` makes this false.
    pub link_up: bool,
    /// The port's name: hvnet's metadata `name`, else `<target dev>`.
    pub name: Option<String>,
    /// The port's VLANs, from hvnet's metadata.
    pub vlan: Vlan,
    /// hvnet's metadata names this interface (by its MAC): the domain
    /// means it for an hvnet switch, wherever its socket is.
    pub claimed: bool,
    /// `<bandwidth>`: libvirt keeps it on a vhost-user interface without
    /// applying it ("not implemented yet" in its log); the switch does.
    pub bandwidth: Bandwidth,
    /// `<alias name>`: the interface's name in the domain (libvirt's
    /// `net0`, or a user's `ua-…`), for the port's identity.
    pub alias: Option<String>,
}

/// An interface's `<bandwidth>`, in libvirt's units.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Bandwidth {
    /// `<inbound>`: what the guest receives (libvirt shapes it).
    pub inbound: Option<BandwidthRate>,
    /// `<outbound>`: what the guest sends (libvirt polices it).
    pub outbound: Option<BandwidthRate>,
}

/// One direction of `<bandwidth>`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BandwidthRate {
    /// `average`, in kilobytes (1000 bytes) a second, as libvirt hands it
    /// to `tc` (`kbps`).
    pub average: u64,
    /// `burst`, in KiB (`tc`'s `kb`).
    pub burst: Option<u64>,
}

/// A port's VLANs, as libvirt's `<vlan>` writes them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Vlan {
    /// No `<vlan>`: the switch's untagged segment.
    #[default]
    None,
    /// One `<tag>`: an access port of that VLAN.
    Access(u16),
    /// `trunk='yes'` or several tags: those VLANs tagged, and the one
    /// with `nativeMode='untagged'` untagged.
    Trunk {
        /// The VLANs carried (ids or `a-b` ranges, as hvnet's `vlans`).
        vlans: Vec<String>,
        /// The native VLAN.
        native: Option<u16>,
    },
}

/// Why a domain's XML was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DomainError {
    /// The XML is larger than [`MAX_XML`].
    #[error("domain XML larger than {} bytes", MAX_XML)]
    TooLarge,
    /// The XML does not parse.
    #[error("cannot read the domain XML")]
    Xml(#[source] roxmltree::Error),
    /// The root element is not `<domain>`.
    #[error("domain XML: the root element is <{root}>, not <domain>")]
    NotDomain {
        /// The root element's name.
        root: String,
    },
    /// An `<interface type='vhostuser'>` has no `<mac address>`.
    #[error("an <interface type='vhostuser'> without <mac address>")]
    NoMac,
    /// An interface's `<mac address>` is not a MAC address.
    #[error("<mac address='{text}'> is not a MAC address")]
    BadMac {
        /// The address as written.
        text: String,
    },
    /// A vhost-user interface does not read.
    #[error("cannot read interface {mac}")]
    Interface {
        /// The interface's MAC.
        mac: MacAddr,
        /// What is wrong with it.
        #[source]
        source: InterfaceError,
    },
    /// An `<hvnet:port>` of hvnet's metadata has no `mac`.
    #[error("hvnet metadata: <hvnet:port> without a mac")]
    PortNoMac,
    /// An `<hvnet:port>`'s `mac` is not a MAC address.
    #[error("hvnet metadata: mac {text:?} is not a MAC address")]
    PortBadMac {
        /// The address as written.
        text: String,
    },
    /// An `<hvnet:port>`'s `<hvnet:vlan>` does not read.
    #[error("cannot read the VLANs of port {mac} in hvnet metadata")]
    PortVlan {
        /// The port's MAC.
        mac: MacAddr,
        /// What is wrong with its VLANs.
        #[source]
        source: VlanError,
    },
}

/// Why an `<interface type='vhostuser'>` was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum InterfaceError {
    /// `<source>` has no `path`.
    #[error("<source> without a path")]
    NoSocket,
    /// `<source mode>` is neither `server` nor `client`.
    #[error("<source mode='{mode}'>: server or client")]
    SourceMode {
        /// The mode as written.
        mode: String,
    },
    /// `<driver queues>` is not a count (1 or more).
    #[error("<driver queues='{queues}'> is not a count")]
    Queues {
        /// The count as written.
        queues: String,
    },
    /// A `<bandwidth>` value is not a number.
    #[error("<bandwidth><{direction} {attribute}='{value}'> is not a number")]
    Bandwidth {
        /// `inbound` or `outbound`.
        direction: &'static str,
        /// `average` or `burst`.
        attribute: &'static str,
        /// The value as written.
        value: String,
    },
}

/// Why a `<vlan>` (in hvnet's metadata) was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum VlanError {
    /// `trunk` is neither `yes` nor `no`.
    #[error("<vlan trunk='{trunk}'>: yes or no")]
    Trunk {
        /// The value as written.
        trunk: String,
    },
    /// `<vlan>` holds an element other than `<tag>`.
    #[error("<vlan> holds <tag> elements, not <{element}>")]
    NotTag {
        /// The element's name.
        element: String,
    },
    /// A `<tag>` has no `id`.
    #[error("<tag> without an id")]
    NoId,
    /// A VLAN id (or a range's end) is outside 1..4094.
    #[error("VLAN {id:?} is outside 1..4094")]
    OutOfRange {
        /// The id or range as written.
        id: String,
    },
    /// A range `a-b` whose `a` is above its `b`.
    #[error("VLAN range {id:?} runs backwards")]
    Backwards {
        /// The range as written.
        id: String,
    },
    /// Two tags say `nativeMode`.
    #[error("two tags with nativeMode; a trunk has one native VLAN")]
    TwoNative,
    /// The native VLAN's tag is a range.
    #[error("native VLAN {id:?} must be one id")]
    NativeRange {
        /// The id as written.
        id: String,
    },
    /// `nativeMode='tagged'`, which the switch does not do.
    #[error("nativeMode='tagged' is not supported: a native VLAN's frames leave untagged (nativeMode='untagged')")]
    NativeTagged,
    /// `nativeMode` is neither `untagged` nor `tagged`.
    #[error("nativeMode='{mode}': untagged")]
    NativeMode {
        /// The mode as written.
        mode: String,
    },
    /// `<vlan>` holds no `<tag>`.
    #[error("<vlan> without a <tag>")]
    NoTag,
    /// An access port's one tag is a range.
    #[error("access VLAN {id:?} must be one id (a range needs trunk='yes')")]
    AccessRange {
        /// The range as written.
        id: String,
    },
    /// A native VLAN on a port that is no trunk.
    #[error("nativeMode needs a trunk (trunk='yes', as libvirt's <vlan>)")]
    NativeNeedsTrunk,
}

/// Reads a domain's XML.
pub fn parse(xml: &str) -> Result<Domain, DomainError> {
    if xml.len() > MAX_XML {
        return Err(DomainError::TooLarge);
    }
    let doc = roxmltree::Document::parse(xml).map_err(DomainError::Xml)?;
    let root = doc.root_element();
    if !root.has_tag_name("domain") {
        return Err(DomainError::NotDomain {
            root: root.tag_name().name().to_string(),
        });
    }
    let text_of = |tag: &str| {
        root.children()
            .find(|n| n.has_tag_name(tag))
            .and_then(|n| n.text())
            .map(|t| t.trim().to_string())
            .unwrap_or_default()
    };
    let name = text_of("name");
    let uuid = text_of("uuid");
    let meta = metadata(root)?;
    let mut nics = Vec::new();
    let devices = root.children().filter(|n| n.has_tag_name("devices"));
    for iface in devices
        .flat_map(|d| d.children())
        .filter(|n| n.has_tag_name("interface") && n.attribute("type") == Some("vhostuser"))
    {
        let child = |tag: &str| iface.children().find(|n| n.has_tag_name(tag));
        let at = |tag: &str, attr: &str| child(tag).and_then(|n| n.attribute(attr));
        let mac_text = at("mac", "address").ok_or(DomainError::NoMac)?;
        let mac: MacAddr = mac_text.parse().map_err(|_| DomainError::BadMac {
            text: mac_text.to_string(),
        })?;
        let bad = |source| DomainError::Interface { mac, source };
        let Some(socket) = at("source", "path") else {
            return Err(bad(InterfaceError::NoSocket));
        };
        let qemu_listens = match at("source", "mode") {
            Some("server") => true,
            Some("client") | None => false,
            Some(m) => {
                return Err(bad(InterfaceError::SourceMode {
                    mode: m.to_string(),
                }))
            }
        };
        let queues = match at("driver", "queues") {
            None => 1,
            Some(q) => q.parse::<usize>().ok().filter(|q| *q >= 1).ok_or_else(|| {
                bad(InterfaceError::Queues {
                    queues: q.to_string(),
                })
            })?,
        };
        let link_up = at("link", "state") != Some("down");
        let bandwidth = match child("bandwidth") {
            Some(b) => bandwidth(b).map_err(bad)?,
            None => Bandwidth::default(),
        };
        let mine = meta.iter().find(|m| m.mac == mac);
        let target = at("target", "dev").filter(|d| !d.is_empty());
        nics.push(Nic {
            mac,
            socket: PathBuf::from(socket),
            qemu_listens,
            queues,
            link_up,
            name: mine
                .and_then(|m| m.name.clone())
                .or(target.map(str::to_string)),
            vlan: mine.map(|m| m.vlan.clone()).unwrap_or_default(),
            claimed: mine.is_some(),
            bandwidth,
            alias: at("alias", "name")
                .filter(|a| !a.is_empty())
                .map(str::to_string),
        });
    }
    Ok(Domain { name, uuid, nics })
}

/// Reads `<bandwidth>`'s `<inbound>` and `<outbound>` (`peak` and `floor`
/// are libvirt's HTB ceiling and guarantee, which a port's rates do not
/// have: not read).
fn bandwidth(b: roxmltree::Node) -> Result<Bandwidth, InterfaceError> {
    let way =
        |tag: &'static str| -> Result<Option<BandwidthRate>, InterfaceError> {
            let Some(n) = b.children().find(|n| n.has_tag_name(tag)) else {
                return Ok(None);
            };
            let number =
                |attr: &'static str| -> Result<Option<u64>, InterfaceError> {
                    match n.attribute(attr) {
                        None => Ok(None),
                        Some(v) => v.trim().parse::<u64>().map(Some).map_err(|_| {
                            InterfaceError::Bandwidth {
                                direction: tag,
                                attribute: attr,
                                value: v.to_string(),
                            }
                        }),
                    }
                };
            match number("average")? {
                // libvirt takes 0 as no limit.
                None | Some(0) => Ok(None),
                Some(average) => Ok(Some(BandwidthRate {
                    average,
                    burst: number("burst")?.filter(|b| *b > 0),
                })),
            }
        };
    Ok(Bandwidth {
        inbound: way("inbound")?,
        outbound: way("outbound")?,
    })
}

/// One `<hvnet:port>` of the metadata.
struct PortMeta {
    mac: MacAddr,
    name: Option<String>,
    vlan: Vlan,
}

/// hvnet's `<hvnet:ports>` in the domain's `<metadata>`.
fn metadata(root: roxmltree::Node) -> Result<Vec<PortMeta>, DomainError> {
    let ours = root
        .children()
        .filter(|n| n.has_tag_name("metadata"))
        .flat_map(|m| m.children())
        .filter(|n| n.has_tag_name((NAMESPACE, "ports")));
    let mut out = Vec::new();
    for port in ours
        .flat_map(|p| p.children())
        .filter(|n| n.has_tag_name((NAMESPACE, "port")))
    {
        let mac_text = port.attribute("mac").ok_or(DomainError::PortNoMac)?;
        let mac = mac_text.parse().map_err(|_| DomainError::PortBadMac {
            text: mac_text.to_string(),
        })?;
        let vlan = match port
            .children()
            .find(|n| n.has_tag_name((NAMESPACE, "vlan")))
        {
            None => Vlan::None,
            Some(v) => vlan(v).map_err(|source| DomainError::PortVlan { mac, source })?,
        };
        out.push(PortMeta {
            mac,
            name: port.attribute("name").map(str::to_string),
            vlan,
        });
    }
    Ok(out)
}

/// `<vlan>`, as libvirt reads it (`virNetDevVlanParse`): one tag is an
/// access VLAN unless `trunk='yes'`; several are a trunk; at most one is
/// native. hvnet takes `a-b` ranges as ids too.
fn vlan(v: roxmltree::Node) -> Result<Vlan, VlanError> {
    let trunk = match v.attribute("trunk") {
        None | Some("no") => false,
        Some("yes") => true,
        Some(t) => {
            return Err(VlanError::Trunk {
                trunk: t.to_string(),
            })
        }
    };
    let mut ids = Vec::new();
    let mut native = None;
    for tag in v.children().filter(|n| n.is_element()) {
        if !tag.has_tag_name((NAMESPACE, "tag")) {
            return Err(VlanError::NotTag {
                element: tag.tag_name().name().to_string(),
            });
        }
        let id = tag.attribute("id").ok_or(VlanError::NoId)?;
        check_id(id)?;
        match tag.attribute("nativeMode") {
            None => {}
            Some("untagged") => {
                if native.is_some() {
                    return Err(VlanError::TwoNative);
                }
                native = Some(
                    id.parse::<u16>()
                        .map_err(|_| VlanError::NativeRange { id: id.to_string() })?,
                );
            }
            Some("tagged") => return Err(VlanError::NativeTagged),
            Some(m) => {
                return Err(VlanError::NativeMode {
                    mode: m.to_string(),
                })
            }
        }
        ids.push(id.to_string());
    }
    match ids.len() {
        0 => Err(VlanError::NoTag),
        1 if !trunk => {
            Ok(Vlan::Access(ids[0].parse().map_err(|_| {
                VlanError::AccessRange { id: ids[0].clone() }
            })?))
        }
        _ if !trunk && native.is_some() => Err(VlanError::NativeNeedsTrunk),
        _ => Ok(Vlan::Trunk { vlans: ids, native }),
    }
}

/// A VLAN id or an `a-b` range, each 1..4094.
fn check_id(id: &str) -> Result<(), VlanError> {
    let one = |s: &str| {
        s.trim()
            .parse::<u16>()
            .ok()
            .filter(|v| (1..=4094).contains(v))
            .ok_or_else(|| VlanError::OutOfRange { id: id.to_string() })
    };
    match id.split_once('-') {
        None => one(id).map(drop),
        Some((a, b)) if one(a)? <= one(b)? => Ok(()),
        Some(_) => Err(VlanError::Backwards { id: id.to_string() }),
    }
}

#[cfg(test)]
mod tests;
