//! A namespace VM in a network namespace hvnet did not make — a
//! container's, made by its runtime and handed over by the CNI plugin
//! (`netns = PATH`, `ifname = IF`) — with the routes its IPAM gave it and
//! the container it belongs to.

use serde::Serialize;
use std::net::IpAddr;
use std::path::PathBuf;

/// Where a VM's interface goes when its namespace is someone else's.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Attach {
    /// The namespace's handle (`/run/netns/…`, `/proc/PID/ns/net`).
    pub netns: PathBuf,
    /// The interface's name there.
    pub ifname: String,
    /// Routes through the interface.
    pub routes: Vec<Route>,
}

/// The container (and CNI network) a port was made for, when a CNI plugin
/// made it: such a port is the plugin's, not the topology file's (`hvnet
/// up FILE` leaves it, GC removes it).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Container {
    /// The runtime's container ID (`CNI_CONTAINERID`).
    pub id: String,
    /// The CNI network's name.
    pub network: String,
    /// The Kubernetes pod, `NAMESPACE/NAME`, when a kubelet (or a CRI
    /// runtime) asked for it (`K8S_POD_NAMESPACE`, `K8S_POD_NAME`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pod: Option<String>,
}

/// The libvirt domain a port was made for, and its interface, as Open
/// vSwitch keeps `external_ids:vm-uuid` and `iface-id` for controllers:
/// shown by `hvnet port`/`ports`, in the metrics' labels and captures.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct GuestDomain {
    /// The domain's name.
    pub name: String,
    /// Its UUID.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub uuid: Option<String>,
    /// The interface's alias (`<alias name>`, `ua-…` or libvirt's `net0`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub alias: Option<String>,
}

impl GuestDomain {
    /// As a port's external IDs: `domain`, `domain_uuid`, `interface`.
    pub fn external_ids(&self) -> Vec<(String, String)> {
        let mut v = vec![("domain".to_string(), self.name.clone())];
        if let Some(u) = &self.uuid {
            v.push(("domain_uuid".into(), u.clone()));
        }
        if let Some(a) = &self.alias {
            v.push(("interface".into(), a.clone()));
        }
        v
    }
}

/// Most bytes a domain's name, UUID or alias may have here.
const MAX_DOMAIN_WORD: usize = 1024;

/// Whether `u` is a UUID as libvirt writes one: 32 hexadecimal digits,
/// dashes between.
pub fn is_uuid(u: &str) -> bool {
    u.chars().filter(char::is_ascii_hexdigit).count() == 32
        && u.chars().all(|c| c.is_ascii_hexdigit() || c == '-')
}

/// `domain`, `domain_uuid` and `alias` of a `[[vm]]` table: the
/// domain's name first (a UUID or alias without it is refused), each
/// printable and at most 1024 bytes.
pub(super) fn guest_domain(
    name: Option<&str>,
    uuid: Option<&str>,
    alias: Option<&str>,
) -> Result<Option<GuestDomain>, String> {
    let Some(name) = name else {
        return match (uuid, alias) {
            (None, None) => Ok(None),
            _ => {
                Err("domain_uuid and alias are for a libvirt domain's port (domain = NAME)".into())
            }
        };
    };
    for (key, w) in [
        ("domain", Some(name)),
        ("domain_uuid", uuid),
        ("alias", alias),
    ] {
        let Some(w) = w else { continue };
        if w.is_empty() || w.len() > MAX_DOMAIN_WORD || w.chars().any(char::is_control) {
            return Err(format!(
                "{key} {w:?}: 1 to {MAX_DOMAIN_WORD} printable characters"
            ));
        }
    }
    if let Some(u) = uuid {
        if !is_uuid(u) {
            return Err(format!(
                "domain_uuid {u:?}: a UUID (32 hexadecimal digits, dashes between)"
            ));
        }
    }
    Ok(Some(GuestDomain {
        name: name.to_string(),
        uuid: uuid.map(str::to_string),
        alias: alias.map(str::to_string),
    }))
}

/// A route as `ip route` writes it: `DST` or `DST via GW`, DST a prefix
/// or `default`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Route {
    /// The destination's address.
    pub dst: IpAddr,
    /// Its prefix length.
    pub prefix: u8,
    /// The next hop, if not on the link.
    pub via: Option<IpAddr>,
}

impl std::fmt::Display for Route {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.dst, self.prefix)?;
        if let Some(v) = self.via {
            write!(f, " via {v}")?;
        }
        Ok(())
    }
}

impl std::str::FromStr for Route {
    type Err = String;
    fn from_str(s: &str) -> Result<Route, String> {
        let words: Vec<&str> = s.split_whitespace().collect();
        let (dst, via) = match words[..] {
            [dst] => (dst, None),
            [dst, "via", gw] => (dst, Some(gw)),
            _ => return Err(format!("route {s:?}: write DST or DST via GATEWAY")),
        };
        let via = via
            .map(|g| g.parse::<IpAddr>())
            .transpose()
            .map_err(|_| format!("route {s:?}: the gateway is not an IP address"))?;
        let (dst, prefix) = match dst.split_once('/') {
            _ if dst == "default" => match via {
                Some(IpAddr::V6(_)) => (IpAddr::from([0u16; 8]), 0),
                _ => (IpAddr::from([0u8; 4]), 0),
            },
            Some((a, p)) => {
                let a: IpAddr = a
                    .parse()
                    .map_err(|_| format!("route {s:?}: {a:?} is not an IP address"))?;
                let p: u8 = p
                    .parse()
                    .map_err(|_| format!("route {s:?}: {p:?} is not a prefix length"))?;
                (a, p)
            }
            None => {
                let a: IpAddr = dst
                    .parse()
                    .map_err(|_| format!("route {s:?}: {dst:?} is not an IP address"))?;
                (a, if a.is_ipv4() { 32 } else { 128 })
            }
        };
        let most = if dst.is_ipv4() { 32 } else { 128 };
        if prefix > most {
            return Err(format!(
                "route {s:?}: prefix length {prefix} is over {most}"
            ));
        }
        if via.is_some_and(|v| v.is_ipv4() != dst.is_ipv4()) {
            return Err(format!(
                "route {s:?}: the gateway is not of the destination's family"
            ));
        }
        Ok(Route { dst, prefix, via })
    }
}

/// A Linux interface name: 1 to 15 bytes, no `/`, `:` or white space,
/// not `.` or `..` (what the kernel's `dev_valid_name` takes, and what
/// CNI asks of `CNI_IFNAME`).
pub fn check_ifname(s: &str) -> Result<(), String> {
    if s.is_empty() || s.len() > 15 {
        return Err(format!("ifname {s:?}: 1 to 15 bytes"));
    }
    if s == "." || s == ".." || s.contains(['/', ':']) || s.chars().any(char::is_whitespace) {
        return Err(format!(
            "ifname {s:?}: no '/', ':' or white space, and not '.' or '..'"
        ));
    }
    Ok(())
}

/// True if `p` is a pod's `NAMESPACE/NAME` in Kubernetes' words.
pub fn valid_pod(p: &str) -> bool {
    check_pod(p).is_ok()
}

/// A pod's `NAMESPACE/NAME`: two Kubernetes names (DNS labels and
/// subdomains: lowercase letters, digits, '-' and '.', at most 253).
fn check_pod(p: &str) -> Result<(), String> {
    let name = |s: &str| {
        !s.is_empty()
            && s.len() <= 253
            && s.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '-' | '.'))
    };
    match p.split_once('/') {
        Some((ns, n)) if name(ns) && name(n) => Ok(()),
        _ => Err(format!(
            "pod {p:?}: NAMESPACE/NAME, each lowercase letters, digits, '-' and '.'"
        )),
    }
}

/// The `[[vm]]` keys of an attached VM as written, checked together.
pub(super) fn parse(
    netns: Option<&str>,
    ifname: Option<&str>,
    routes: Option<&[String]>,
) -> Result<Option<Attach>, String> {
    let Some(netns) = netns else {
        let stray = [("ifname", ifname.is_some()), ("routes", routes.is_some())];
        return match stray.iter().find(|(_, given)| *given) {
            Some((key, _)) => Err(format!(
                "{key} is for a VM in a namespace given by netns = PATH"
            )),
            None => Ok(None),
        };
    };
    let path = PathBuf::from(netns);
    if !path.is_absolute() {
        return Err(format!(
            "netns {netns:?}: give the namespace's path (/run/netns/NAME)"
        ));
    }
    let ifname = ifname.unwrap_or("eth0");
    check_ifname(ifname)?;
    let routes = routes
        .unwrap_or_default()
        .iter()
        .map(|r| r.parse())
        .collect::<Result<Vec<Route>, String>>()?;
    Ok(Some(Attach {
        netns: path,
        ifname: ifname.to_string(),
        routes,
    }))
}

/// The `[[vm]]` keys naming the container a port was made for, checked
/// together.
pub(super) fn container(
    container: Option<&str>,
    network: Option<&str>,
    pod: Option<&str>,
) -> Result<Option<Container>, String> {
    let Some(id) = container else {
        return match (network, pod) {
            (None, None) => Ok(None),
            (Some(_), _) => Err("network is for a container's port (container = ID)".into()),
            (None, Some(_)) => Err("pod is for a container's port (container = ID)".into()),
        };
    };
    if id.is_empty()
        || !id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))
    {
        return Err(format!(
            "container {id:?}: letters, digits, '_', '.' and '-' (a CNI container ID)"
        ));
    }
    if let Some(p) = pod {
        check_pod(p)?;
    }
    Ok(Some(Container {
        id: id.to_string(),
        network: network.unwrap_or_default().to_string(),
        pod: pod.map(str::to_string),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_read_as_ip_route_writes_them() {
        let r: Route = "default via 198.18.0.1".parse().unwrap();
        assert_eq!(r.to_string(), "0.0.0.0/0 via 198.18.0.1");
        let r: Route = "default via 2001:db8::1".parse().unwrap();
        assert_eq!(r.to_string(), "::/0 via 2001:db8::1");
        let r: Route = "198.19.0.0/16".parse().unwrap();
        assert_eq!((r.prefix, r.via), (16, None));
        assert_eq!("198.19.0.9".parse::<Route>().unwrap().prefix, 32);
        for bad in [
            "198.19.0.0/33",
            "198.19.0.0/16 via 2001:db8::1",
            "198.19.0.0/16 dev eth0",
            "nowhere",
            "",
        ] {
            assert!(bad.parse::<Route>().is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn a_domain_needs_its_name_and_a_uuid_is_a_uuid() {
        assert_eq!(guest_domain(None, None, None), Ok(None));
        let d = guest_domain(Some("web1"), None, Some("net0"))
            .unwrap()
            .unwrap();
        assert_eq!(d.external_ids().len(), 2);
        for (name, uuid, alias, why) in [
            (
                None,
                Some("4dea22b3-1d52-d8f3-2516-782e98ab3fa0"),
                None,
                "domain = NAME",
            ),
            (Some(""), None, None, "printable"),
            (Some("web1"), Some("4dea22b3"), None, "32 hexadecimal"),
            (
                Some("web1"),
                Some("4dea22b3-1d52-d8f3-2516-782e98ab3fzz"),
                None,
                "32 hexadecimal",
            ),
            (Some("web1"), None, Some("a\u{7}"), "printable"),
        ] {
            let e = guest_domain(name, uuid, alias).unwrap_err();
            assert!(e.contains(why), "{e}");
        }
    }

    #[test]
    fn interface_names_are_what_the_kernel_takes() {
        assert!(check_ifname("eth0").is_ok());
        assert!(check_ifname("net1.100").is_ok());
        for bad in ["", ".", "..", "a/b", "a:b", "a b", "sixteen-chars-xx"] {
            assert!(check_ifname(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn the_keys_of_an_attached_vm_need_its_namespace() {
        assert_eq!(parse(None, None, None), Ok(None));
        let e = parse(None, Some("eth1"), None).unwrap_err();
        assert!(e.starts_with("ifname is for a VM in a namespace"), "{e}");
        let e = parse(Some("run/netns/x"), None, None).unwrap_err();
        assert!(e.contains("path"), "{e}");
        let a = parse(
            Some("/run/netns/x"),
            None,
            Some(&["default via 198.18.0.1".into()]),
        )
        .unwrap()
        .unwrap();
        assert_eq!(a.ifname, "eth0");
        assert_eq!(a.routes.len(), 1);
    }

    #[test]
    fn a_container_is_named_by_its_id_network_and_pod() {
        assert_eq!(container(None, None, None), Ok(None));
        let c = container(Some("abc123"), Some("net"), Some("web/frontend-7d4b9"))
            .unwrap()
            .unwrap();
        assert_eq!(
            (c.id.as_str(), c.network.as_str(), c.pod.as_deref()),
            ("abc123", "net", Some("web/frontend-7d4b9"))
        );
        assert!(container(Some("a b"), None, None).is_err());
        let e = container(None, None, Some("web/a")).unwrap_err();
        assert!(e.starts_with("pod is for a container's port"), "{e}");
        let e = container(None, Some("net"), None).unwrap_err();
        assert!(e.starts_with("network is for a container's port"), "{e}");
        for bad in ["web", "/a", "web/", "Web/a", "web/a b", "a/b/c"] {
            assert!(
                container(Some("c1"), None, Some(bad)).is_err(),
                "{bad:?} taken"
            );
        }
    }
}
