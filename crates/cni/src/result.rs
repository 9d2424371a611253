//! The ADD result, in the configuration's version: the container's
//! interface (with its sandbox, and in 1.1 its MTU and a vhost-user
//! socket's path), its addresses, routes and DNS.

use crate::ipam::Leases;
use serde_json::{json, Value};

/// The container's interface as ADD made it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Made {
    /// Its name in the container.
    pub ifname: String,
    /// Its MAC.
    pub mac: String,
    /// Its MTU.
    pub mtu: u64,
    /// The container's namespace.
    pub sandbox: String,
    /// A vhost-user port's socket (CNI 1.1 `socketPath`).
    pub socket: Option<String>,
}

/// The result object of `version`.
pub fn result(version: &str, made: &Made, leases: &Leases, dns: Option<&Value>) -> Value {
    let v11 = version == "1.1.0";
    let old = !version.starts_with('1');
    let mut iface = json!({"name": made.ifname, "mac": made.mac, "sandbox": made.sandbox});
    if v11 {
        iface["mtu"] = json!(made.mtu);
        if let Some(s) = &made.socket {
            iface["socketPath"] = json!(s);
        }
    }
    let ips: Vec<Value> = leases
        .ips
        .iter()
        .map(|(a, p, gw)| {
            let mut ip = json!({"address": format!("{a}/{p}"), "interface": 0});
            if let Some(g) = gw {
                ip["gateway"] = json!(g.to_string());
            }
            if old {
                ip["version"] = json!(if a.is_ipv4() { "4" } else { "6" });
            }
            ip
        })
        .collect();
    let routes: Vec<Value> = leases
        .routes
        .iter()
        .map(|(d, p, gw)| {
            let mut r = json!({"dst": format!("{d}/{p}")});
            if let Some(g) = gw {
                r["gw"] = json!(g.to_string());
            }
            r
        })
        .collect();
    let mut out = json!({"cniVersion": version, "interfaces": [iface], "ips": ips});
    if !routes.is_empty() {
        out["routes"] = json!(routes);
    }
    if let Some(d) = dns.or(leases.dns.as_ref()) {
        out["dns"] = d.clone();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn made() -> Made {
        Made {
            ifname: "eth0".into(),
            mac: "02:00:00:00:00:01".into(),
            mtu: 1500,
            sandbox: "/run/netns/c1".into(),
            socket: None,
        }
    }

    #[test]
    fn each_version_has_its_shape() {
        let l = Leases {
            ips: vec![(
                "198.18.0.2".parse().unwrap(),
                24,
                Some("198.18.0.1".parse().unwrap()),
            )],
            routes: vec![(
                "0.0.0.0".parse().unwrap(),
                0,
                Some("198.18.0.1".parse().unwrap()),
            )],
            dns: None,
        };
        let r = result("1.1.0", &made(), &l, None);
        assert_eq!(r["interfaces"][0]["mtu"], 1500);
        assert_eq!(r["ips"][0]["interface"], 0);
        assert!(r["ips"][0].get("version").is_none());
        assert_eq!(r["routes"][0]["dst"], "0.0.0.0/0");
        let r = result("1.0.0", &made(), &l, None);
        assert!(r["interfaces"][0].get("mtu").is_none());
        let r = result(
            "0.4.0",
            &made(),
            &l,
            Some(&json!({"nameservers": ["198.18.0.1"]})),
        );
        assert_eq!(r["ips"][0]["version"], "4");
        assert_eq!(r["dns"]["nameservers"][0], "198.18.0.1");
    }
}
