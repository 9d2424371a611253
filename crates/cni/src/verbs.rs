//! The verbs: ADD makes the container's port on the switch (its address
//! from the IPAM plugin), DEL removes it (and is done however often it
//! comes), CHECK compares it with ADD's result, GC removes the ports of
//! attachments the runtime no longer lists, STATUS says whether the
//! switch answers.

use crate::config::NetConf;
use crate::env::{Command, Env};
use crate::error::{code, CniError};
use crate::ipam::{self, Leases};
use crate::name::port_name;
use crate::result::{result, Made};
use crate::switch::{self, SwitchError};
use hvnet_control::proto::Request;
use hvnet_datapath::rate::MIN_BURST;
use serde_json::Value;
use std::net::IpAddr;
use std::time::Duration;

/// How long the switch may take to make a port.
const ADD_WAIT: Duration = Duration::from_secs(60);
/// How long the other requests may take.
const WAIT: Duration = Duration::from_secs(20);

fn switch_error(e: SwitchError) -> CniError {
    match e {
        SwitchError::NotUp(_) => {
            CniError::new(code::NO_TOPOLOGY, "no such topology", e.to_string())
        }
        SwitchError::NoAnswer(..) => CniError::new(
            code::TRY_AGAIN_LATER,
            "the switch does not answer",
            e.to_string(),
        ),
        SwitchError::Said(ref why, Some(hvnet_control::proto::CtlError::Failed { .. })) => {
            CniError::new(code::SWITCH_FAILED, "the switch failed", why.clone())
        }
        SwitchError::Said(why, _) => {
            CniError::new(code::SWITCH_REFUSED, "the switch refused the port", why)
        }
    }
}

/// ADD: the IPAM plugin's addresses, then the port; the result.
pub fn add(env: &Env, conf: &NetConf, stdin: &[u8]) -> Result<Value, CniError> {
    // Nothing leased for a switch that is not there, or for an attachment
    // it has already (the IPAM plugin would be asked to release the
    // lease the first ADD took, when this one failed).
    let name = port_name(&env.container, &env.ifname);
    match switch::call(
        &conf.topology,
        &Request::PortShow { name: name.clone() },
        WAIT,
    ) {
        Ok(_) => {
            return Err(CniError::new(
                code::SWITCH_REFUSED,
                "the attachment exists",
                format!(
                    "container {} has {} on this network already (port {name})",
                    env.container, env.ifname
                ),
            ))
        }
        Err(e) if e.not_found() => {}
        Err(e) => return Err(switch_error(e)),
    }
    let leases = match &conf.ipam {
        Some(kind) => {
            let r = ipam::run(env, kind, Command::Add, stdin)?.unwrap_or(Value::Null);
            match ipam::leases(&r) {
                Ok(l) => l,
                Err(e) => {
                    let _ = ipam::run(env, kind, Command::Del, stdin);
                    return Err(e);
                }
            }
        }
        None => Leases::default(),
    };
    // The network's socket directory, for a vhost-user port.
    let dir = conf.socket_dir.as_ref().map(|d| {
        std::fs::create_dir_all(d).map_err(|e| {
            CniError::new(
                code::IO_FAILURE,
                "cannot make the network's socket directory",
                format!("{}: {e}", d.display()),
            )
        })
    });
    let table = match dir.transpose().and_then(|_| vm_table(env, conf, &leases)) {
        Ok(t) => t,
        Err(e) => {
            if let Some(kind) = &conf.ipam {
                let _ = ipam::run(env, kind, Command::Del, stdin);
            }
            return Err(e);
        }
    };
    let reply = match switch::call(&conf.topology, &Request::VmAdd { table }, ADD_WAIT) {
        Ok(r) => r,
        Err(e) => {
            // A failed ADD undoes itself: the addresses go back — unless
            // the switch did not answer in time and may still make the
            // port with them: then only once it says the port is not
            // there (else the runtime's DEL releases them).
            let may_be_made = match e {
                SwitchError::NoAnswer(..) => {
                    let del = Request::VmDel { name: name.clone() };
                    match switch::call(&conf.topology, &del, WAIT) {
                        Ok(_) => false,
                        Err(d) => !d.not_found(),
                    }
                }
                _ => false,
            };
            if let (Some(kind), false) = (&conf.ipam, may_be_made) {
                let _ = ipam::run(env, kind, Command::Del, stdin);
            }
            return Err(switch_error(e));
        }
    };
    let mtu = conf
        .vm
        .iter()
        .find(|(k, _)| k == "mtu")
        .and_then(|(_, v)| v.as_u64())
        .unwrap_or(1500);
    let made = Made {
        ifname: env.ifname.clone(),
        mac: reply["mac"].as_str().unwrap_or_default().to_string(),
        mtu,
        sandbox: env
            .netns
            .as_ref()
            .map(|p| p.display().to_string())
            .unwrap_or_default(),
        socket: conf.socket_dir.as_ref().map(|d| socket_path(d, &name)),
    };
    Ok(result(&conf.version, &made, &leases, conf.dns.as_ref()))
}

/// A vhost-user port's socket in `dir`.
fn socket_path(dir: &std::path::Path, port: &str) -> String {
    dir.join(format!("{port}.sock")).display().to_string()
}

/// The `[[vm]]` table of the container's port: where it goes, its
/// addresses and routes, the runtime's MAC and bandwidth, and the
/// configuration's own keys.
pub fn vm_table(env: &Env, conf: &NetConf, leases: &Leases) -> Result<String, CniError> {
    let mut t = toml::Table::new();
    let s = |v: &str| toml::Value::String(v.to_string());
    let name = port_name(&env.container, &env.ifname);
    t.insert("name".into(), s(&name));
    if let Some(dir) = &conf.socket_dir {
        t.insert("kind".into(), s("vhost-user"));
        t.insert("socket".into(), s(&socket_path(dir, &name)));
    } else {
        let netns = env
            .netns
            .as_ref()
            .map(|p| p.display().to_string())
            .unwrap_or_default();
        t.insert("netns".into(), s(&netns));
        t.insert("ifname".into(), s(&env.ifname));
    }
    t.insert("container".into(), s(&env.container));
    t.insert("network".into(), s(&conf.name));
    // The pod is a label: one a runtime names outside Kubernetes' words
    // is left out, not a reason to refuse the container.
    match env.pod() {
        Some(pod) if hvnet_control::topology::attach::valid_pod(&pod) => {
            t.insert("pod".into(), s(&pod));
        }
        Some(pod) => eprintln!(
            "hvnet-cni: pod {pod:?} is not NAMESPACE/NAME in Kubernetes' words: not tagged"
        ),
        None => {}
    }
    for (k, v) in &conf.vm {
        t.insert(k.clone(), to_toml(k, v)?);
    }
    let one = |v4: bool| {
        let mut of = leases.ips.iter().filter(|(a, _, _)| a.is_ipv4() == v4);
        let first = of.next();
        match of.next() {
            Some(_) => Err(CniError::new(
                code::INVALID_CONFIG,
                "more addresses than a port takes",
                format!("the IPAM plugin gave more than one IPv{}: hvnet-cni configures one IPv4 and one IPv6 address", if v4 { 4 } else { 6 }),
            )),
            None => Ok(first),
        }
    };
    if let Some((a, p, _)) = one(true)? {
        t.insert("ipv4".into(), s(&format!("{a}/{p}")));
    }
    if let Some((a, p, _)) = one(false)? {
        t.insert("ipv6".into(), s(&format!("{a}/{p}")));
    }
    if !leases.routes.is_empty() && conf.socket_dir.is_none() {
        let routes = leases
            .routes
            .iter()
            .map(|(d, p, gw)| match gw {
                Some(g) => s(&format!("{d}/{p} via {g}")),
                None => s(&format!("{d}/{p}")),
            })
            .collect();
        t.insert("routes".into(), toml::Value::Array(routes));
    }
    if let Some(mac) = &conf.runtime.mac {
        t.insert("mac".into(), s(mac));
    }
    if let Some(b) = conf.runtime.bandwidth {
        // Into the container is what the switch delivers to it (its
        // shaper, rx); out of it what it sends (its policer, tx). Bursts
        // come in bits; below one largest GSO frame a port would pass
        // nothing, so they are at least that.
        let burst = |bits: u64| s(&format!("{}b", (bits / 8).max(MIN_BURST)));
        if b.ingress_rate > 0 {
            t.insert("rx_rate".into(), s(&format!("{}bit", b.ingress_rate)));
            t.insert("rx_burst".into(), burst(b.ingress_burst));
        }
        if b.egress_rate > 0 {
            t.insert("tx_rate".into(), s(&format!("{}bit", b.egress_rate)));
            t.insert("tx_burst".into(), burst(b.egress_burst));
        }
    }
    let mut doc = toml::Table::new();
    doc.insert("vm".into(), toml::Value::Array(vec![toml::Value::Table(t)]));
    toml::to_string(&doc).map_err(|e| {
        CniError::new(
            code::INVALID_CONFIG,
            "invalid network configuration",
            e.to_string(),
        )
    })
}

/// A configuration value as the `[[vm]]` table's.
fn to_toml(key: &str, v: &Value) -> Result<toml::Value, CniError> {
    let bad = || {
        CniError::new(
            code::INVALID_CONFIG,
            "invalid network configuration",
            format!("{key} = {v}: not a value a [[vm]] key takes"),
        )
    };
    Ok(match v {
        Value::Bool(b) => toml::Value::Boolean(*b),
        Value::Number(n) => match n.as_i64() {
            Some(i) => toml::Value::Integer(i),
            None => toml::Value::Float(n.as_f64().ok_or_else(bad)?),
        },
        Value::String(s) => toml::Value::String(s.clone()),
        Value::Array(a) => toml::Value::Array(
            a.iter()
                .map(|x| to_toml(key, x))
                .collect::<Result<_, _>>()?,
        ),
        Value::Object(o) => toml::Value::Table(
            o.iter()
                .map(|(k, x)| Ok((k.clone(), to_toml(key, x)?)))
                .collect::<Result<_, CniError>>()?,
        ),
        Value::Null => return Err(bad()),
    })
}

/// DEL: the port removed (already gone is done), the addresses released.
/// A switch that does not answer has the removal waiting for it: done
/// when its daemon starts again.
pub fn del(env: &Env, conf: &NetConf, stdin: &[u8]) -> Result<(), CniError> {
    let name = port_name(&env.container, &env.ifname);
    match switch::call(&conf.topology, &Request::VmDel { name: name.clone() }, WAIT) {
        Ok(_) => {}
        Err(e) if e.not_found() => {}
        // Taken down: nothing of it is left.
        Err(SwitchError::NotUp(_)) => {}
        Err(SwitchError::NoAnswer(..)) => remember_del(&conf.topology, &name)?,
        // The port is still there with its addresses: they are not given
        // back (to another container) before it goes; the runtime asks
        // again.
        Err(e) => return Err(switch_error(e)),
    }
    // A vhost-user port's socket: gone with the port, and gone too when
    // the removal waits for a daemon that does not answer.
    if let Some(dir) = &conf.socket_dir {
        let _ = std::fs::remove_file(socket_path(dir, &name));
    }
    if let Some(kind) = &conf.ipam {
        ipam::run(env, kind, Command::Del, stdin)?;
    }
    Ok(())
}

/// A removal for a daemon that does not answer: a file it reads when it
/// starts.
fn remember_del(topology: &str, name: &str) -> Result<(), CniError> {
    let d = switch::dir(topology).join(hvnet_control::state::PENDING_DEL);
    std::fs::create_dir_all(&d)
        .and_then(|()| std::fs::write(d.join(name), b""))
        .map_err(|e| {
            CniError::new(
                code::IO_FAILURE,
                "cannot remember the removal",
                format!("{}: {e}", d.display()),
            )
        })
}

/// CHECK: the port is there, where ADD put it, with ADD's MAC and
/// addresses, and the IPAM plugin agrees.
pub fn check(env: &Env, conf: &NetConf, stdin: &[u8]) -> Result<(), CniError> {
    let Some(prev) = &conf.prev_result else {
        return Err(CniError::new(
            code::INVALID_CONFIG,
            "CHECK needs prevResult",
            "the runtime passes ADD's result as prevResult",
        ));
    };
    if let Some(kind) = &conf.ipam {
        ipam::run(env, kind, Command::Check, stdin)?;
    }
    let name = port_name(&env.container, &env.ifname);
    let fail = |what: String| {
        CniError::new(
            code::CHECK_FAILED,
            "the attachment is not as ADD made it",
            what,
        )
    };
    let port = switch::call(
        &conf.topology,
        &Request::PortShow { name: name.clone() },
        WAIT,
    )
    .map_err(|e| {
        if e.not_found() {
            fail(format!(
                "the switch has no port {name} for container {}",
                env.container
            ))
        } else {
            switch_error(e)
        }
    })?;
    if let Some(dir) = &conf.socket_dir {
        // A socket, whose front end (the container's DPDK) may not have
        // opened it yet: the port is there, on that socket.
        let want = socket_path(dir, &name);
        let have = port["vhost_user"]["socket"].as_str().unwrap_or_default();
        if have != want {
            return Err(fail(format!(
                "port {name}'s socket is {have:?}, not {want}"
            )));
        }
        return match std::fs::metadata(&want) {
            Ok(_) => Ok(()),
            Err(e) => Err(fail(format!("the socket {want}: {e}"))),
        };
    }
    let netns = env
        .netns
        .as_ref()
        .map(|p| p.display().to_string())
        .unwrap_or_default();
    if port["netns"].as_str() != Some(netns.as_str())
        || port["ifname"].as_str() != Some(env.ifname.as_str())
    {
        return Err(fail(format!(
            "port {name} is {} in {}, not {} in {netns}",
            port["ifname"], port["netns"], env.ifname
        )));
    }
    if port["link"].as_str() != Some("up") {
        return Err(fail(format!("port {name}'s link is {}", port["link"])));
    }
    let handle = std::fs::File::open(&netns)
        .map_err(|e| fail(format!("the container's namespace {netns}: {e}")))?;
    let mut rtnl =
        hvnet_control::rtnl::Rtnl::in_netns_of(&handle).map_err(|e| fail(e.to_string()))?;
    let mac = rtnl
        .mac(&env.ifname)
        .map_err(|_| fail(format!("{netns} has no interface {}", env.ifname)))?
        .map(|m| m.to_string());
    let want = prev["interfaces"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|i| i["name"].as_str() == Some(env.ifname.as_str()))
        .and_then(|i| i["mac"].as_str());
    if let (Some(want), Some(have)) = (want, mac.as_deref()) {
        if !want.eq_ignore_ascii_case(have) {
            return Err(fail(format!(
                "{} has MAC {have}, ADD gave it {want}",
                env.ifname
            )));
        }
    }
    let have: Vec<IpAddr> = rtnl.addresses(&env.ifname).unwrap_or_default();
    for ip in prev["ips"].as_array().into_iter().flatten() {
        let a = ip["address"]
            .as_str()
            .and_then(|a| a.split('/').next()?.parse::<IpAddr>().ok());
        if let Some(a) = a {
            if !have.contains(&a) {
                return Err(fail(format!(
                    "{} does not have {a}, which ADD gave it",
                    env.ifname
                )));
            }
        }
    }
    Ok(())
}

/// GC: the ports this network made for attachments the runtime no longer
/// lists are removed; then the IPAM plugin's GC.
pub fn gc(env: &Env, conf: &NetConf, stdin: &[u8]) -> Result<(), CniError> {
    // Without the runtime's list every port of the network would look
    // stale: refused rather than guessed.
    let Some(valid) = &conf.valid_attachments else {
        return Err(CniError::new(
            code::INVALID_CONFIG,
            "GC needs the runtime's list of attachments",
            "cni.dev/valid-attachments is missing (an empty list removes every port of the network)",
        ));
    };
    let mut errors = Vec::new();
    match switch::call(&conf.topology, &Request::Ports, WAIT) {
        Ok(rows) => {
            for r in rows.as_array().into_iter().flatten() {
                let c = &r["container"];
                let (Some(id), Some(net), Some(ifname), Some(name)) = (
                    c["id"].as_str(),
                    c["network"].as_str(),
                    r["ifname"].as_str(),
                    r["name"].as_str(),
                ) else {
                    continue;
                };
                let listed = valid.iter().any(|(i, f)| i == id && f == ifname);
                if net == conf.name && !listed {
                    match switch::call(&conf.topology, &Request::VmDel { name: name.into() }, WAIT)
                    {
                        Ok(_) => {}
                        Err(e) if e.not_found() => {}
                        Err(e) => errors.push(format!("port {name} (container {id}): {e}")),
                    }
                }
            }
        }
        // Nothing of a topology that is down is left to collect.
        Err(SwitchError::NotUp(_)) => {}
        Err(e) => errors.push(e.to_string()),
    }
    // An IPAM plugin older than CNI 1.1 has no GC (its leases are
    // released by each DEL).
    if let Some(kind) = conf.ipam.as_ref().filter(|k| ipam::speaks(env, k, "1.1.0")) {
        if let Err(e) = ipam::run(env, kind, Command::Gc, stdin) {
            errors.push(e.to_string());
        }
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(CniError::new(
            code::SWITCH_FAILED,
            "garbage collection left some behind",
            errors.join("; "),
        ))
    }
}

/// STATUS: ADD can be served when the topology's switch answers.
pub fn status(env: &Env, conf: &NetConf, stdin: &[u8]) -> Result<(), CniError> {
    switch::call(&conf.topology, &Request::Ports, WAIT).map_err(|e| {
        CniError::new(
            code::NOT_AVAILABLE,
            "the switch is not available",
            e.to_string(),
        )
    })?;
    if let Some(kind) = conf.ipam.as_ref().filter(|k| ipam::speaks(env, k, "1.1.0")) {
        ipam::run(env, kind, Command::Status, stdin).map_err(|e| {
            CniError::new(
                code::NOT_AVAILABLE,
                "the IPAM plugin is not available",
                e.to_string(),
            )
        })?;
    }
    Ok(())
}
