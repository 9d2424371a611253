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

/// Reads a domain's XML.
pub fn parse(xml: &str) -> Result<Domain, String> {
    if xml.len() > MAX_XML {
        return Err(format!("domain XML larger than {MAX_XML} bytes"));
    }
    let doc = roxmltree::Document::parse(xml).map_err(|e| format!("domain XML: {e}"))?;
    let root = doc.root_element();
    if !root.has_tag_name("domain") {
        return Err(format!(
            "domain XML: the root element is <{}>, not <domain>",
            root.tag_name().name()
        ));
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
        let mac_text =
            at("mac", "address").ok_or("an <interface type='vhostuser'> without <mac address>")?;
        let mac: MacAddr = mac_text
            .parse()
            .map_err(|_| format!("<mac address='{mac_text}'> is not a MAC address"))?;
        let Some(socket) = at("source", "path") else {
            return Err(format!("interface {mac}: <source> without a path"));
        };
        let qemu_listens = match at("source", "mode") {
            Some("server") => true,
            Some("client") | None => false,
            Some(m) => {
                return Err(format!(
                    "interface {mac}: <source mode='{m}'>: server or client"
                ))
            }
        };
        let queues =
            match at("driver", "queues") {
                None => 1,
                Some(q) => q.parse::<usize>().ok().filter(|q| *q >= 1).ok_or_else(|| {
                    format!("interface {mac}: <driver queues='{q}'> is not a count")
                })?,
            };
        let link_up = at("link", "state") != Some("down");
        let bandwidth = match child("bandwidth") {
            Some(b) => bandwidth(b).map_err(|e| format!("interface {mac}: {e}"))?,
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
        });
    }
    Ok(Domain { name, uuid, nics })
}

/// Reads `<bandwidth>`'s `<inbound>` and `<outbound>` (`peak` and `floor`
/// are libvirt's HTB ceiling and guarantee, which a port's rates do not
/// have: not read).
fn bandwidth(b: roxmltree::Node) -> Result<Bandwidth, String> {
    let way = |tag: &str| -> Result<Option<BandwidthRate>, String> {
        let Some(n) = b.children().find(|n| n.has_tag_name(tag)) else {
            return Ok(None);
        };
        let number = |attr: &str| -> Result<Option<u64>, String> {
            match n.attribute(attr) {
                None => Ok(None),
                Some(v) => v
                    .trim()
                    .parse::<u64>()
                    .map(Some)
                    .map_err(|_| format!("<bandwidth><{tag} {attr}='{v}'> is not a number")),
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
fn metadata(root: roxmltree::Node) -> Result<Vec<PortMeta>, String> {
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
        let mac_text = port
            .attribute("mac")
            .ok_or("hvnet metadata: <hvnet:port> without a mac")?;
        let mac = mac_text
            .parse()
            .map_err(|_| format!("hvnet metadata: mac {mac_text:?} is not a MAC address"))?;
        let vlan = match port
            .children()
            .find(|n| n.has_tag_name((NAMESPACE, "vlan")))
        {
            None => Vlan::None,
            Some(v) => vlan(v).map_err(|e| format!("hvnet metadata, port {mac}: {e}"))?,
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
fn vlan(v: roxmltree::Node) -> Result<Vlan, String> {
    let trunk = match v.attribute("trunk") {
        None | Some("no") => false,
        Some("yes") => true,
        Some(t) => return Err(format!("<vlan trunk='{t}'>: yes or no")),
    };
    let mut ids = Vec::new();
    let mut native = None;
    for tag in v.children().filter(|n| n.is_element()) {
        if !tag.has_tag_name((NAMESPACE, "tag")) {
            return Err(format!(
                "<vlan> holds <tag> elements, not <{}>",
                tag.tag_name().name()
            ));
        }
        let id = tag.attribute("id").ok_or("<tag> without an id")?;
        check_id(id)?;
        match tag.attribute("nativeMode") {
            None => {}
            Some("untagged") => {
                if native.is_some() {
                    return Err("two tags with nativeMode; a trunk has one native VLAN".into());
                }
                native = Some(
                    id.parse::<u16>()
                        .map_err(|_| format!("native VLAN {id:?} must be one id"))?,
                );
            }
            Some("tagged") => {
                return Err(
                    "nativeMode='tagged' is not supported: a native VLAN's frames leave untagged (nativeMode='untagged')"
                        .into(),
                )
            }
            Some(m) => return Err(format!("nativeMode='{m}': untagged")),
        }
        ids.push(id.to_string());
    }
    match ids.len() {
        0 => Err("<vlan> without a <tag>".into()),
        1 if !trunk => Ok(Vlan::Access(ids[0].parse().map_err(|_| {
            format!(
                "access VLAN {:?} must be one id (a range needs trunk='yes')",
                ids[0]
            )
        })?)),
        _ if !trunk && native.is_some() => {
            Err("nativeMode needs a trunk (trunk='yes', as libvirt's <vlan>)".into())
        }
        _ => Ok(Vlan::Trunk { vlans: ids, native }),
    }
}

/// A VLAN id or an `a-b` range, each 1..4094.
fn check_id(id: &str) -> Result<(), String> {
    let one = |s: &str| {
        s.trim()
            .parse::<u16>()
            .ok()
            .filter(|v| (1..=4094).contains(v))
            .ok_or_else(|| format!("VLAN {id:?} is outside 1..4094"))
    };
    match id.split_once('-') {
        None => one(id).map(drop),
        Some((a, b)) if one(a)? <= one(b)? => Ok(()),
        Some(_) => Err(format!("VLAN range {id:?} runs backwards")),
    }
}

#[cfg(test)]
mod tests;
