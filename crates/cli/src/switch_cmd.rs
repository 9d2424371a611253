//! The live switch commands: `up`, `down`, and the operator views over the
//! control socket (`ports`, `stats`, `port`, `fdb`).

use clap::{Args, Subcommand};
use hvnet_control::daemon::{self, DaemonError};
use hvnet_control::proto::{self, Request};
use hvnet_control::topology;
use serde_json::{json, Value};
use std::path::PathBuf;

/// Which running topology a view talks to.
#[derive(Debug, Args)]
pub struct Target {
    /// Topology name (default: the only one that is up).
    #[arg(short = 't', long = "topology", value_name = "NAME", global = true)]
    pub topology: Option<String>,
    /// Print JSON instead of a table.
    #[arg(long, global = true)]
    pub json: bool,
}

/// `hvnet port PORT [set KEY=VALUE…]`
#[derive(Debug, Args)]
pub struct PortArgs {
    /// The port (its VM's name).
    pub port: String,
    #[command(subcommand)]
    pub action: Option<PortAction>,
}

/// What to do to a port.
#[derive(Debug, Subcommand)]
pub enum PortAction {
    /// Change settings at run time: lro=on|off tso=on|off csum=on|off
    /// mtu=68..9000 ring1=32..4096 ring2=32..4096 allow_forged_transmits=on|off
    /// rx_overflow=drop|backpressure delivery=auto|thread rx_usecs=0..10000
    /// (wake-up coalescing at its receive queues, as ethtool's rx-usecs)
    /// connected=on|off (the vNIC's cable: off drops its traffic and
    /// withdraws its addresses from an EVPN fabric) tx_rate=RATE|off
    /// tx_burst=BYTES|off (a policer on what the VM sends) rx_rate=RATE|off
    /// rx_burst=BYTES|off (a shaper on what it receives), rates and bursts
    /// as tc writes them (1gbit, 256kb); cpu_limit=0..100 (the most of one
    /// worker's time its queues take, in percent; 0: no limit);
    /// shares=1..100 reservation=RATE|off (a VM's part of an uplink's
    /// capacity), capacity=RATE|off (an uplink's, which its VMs' shares
    /// divide; docs/guide/rates.md).
    /// Guards (docs/guide/guards.md): source_guard, arp_guard, nd_guard,
    /// dhcp_guard, ra_guard, dhcp_snooping =on|off;
    /// addresses=ADDR,PREFIX/LEN,…|none. VLANs (docs/guide/topologies.md):
    /// vlan=0..4094 (a VM's access VLAN; 0: untagged), vlan_mode=access|trunk,
    /// vlans=1-4094 lists (10,20,100-199), native_vlan=1..4094|none.
    ///
    /// Changes are kept in the topology's state: the switch restarted
    /// makes them again, whoever declared the port (the topology file,
    /// libvirt, the CNI plugin, `hvnet vm add`). `hvnet up FILE` sets a
    /// port the file declares back to the file's settings (its MTU
    /// stays as set) and says so. `hvnet port PORT` shows where each
    /// setting comes from (`sources`: file, libvirt, cni, vm add,
    /// run-time or default).
    Set {
        /// KEY=VALUE pairs.
        #[arg(required = true, value_name = "KEY=VALUE")]
        changes: Vec<String>,
    },
}

pub(crate) fn pick(t: &Target) -> Result<String, String> {
    if let Some(n) = &t.topology {
        topology::check_topology_name(n)?;
        if !daemon::topologies().contains(n) {
            return Err(format!(
                "no topology named {n} is up (up: {})",
                list_or_none(&daemon::topologies())
            ));
        }
        return Ok(n.clone());
    }
    match daemon::topologies().as_slice() {
        [] => Err("no topology is up; start one with `hvnet up TOPOLOGY.toml`".into()),
        [one] => Ok(one.clone()),
        many => Err(format!(
            "several topologies are up ({}); choose one with -t NAME",
            many.join(", ")
        )),
    }
}

fn list_or_none(v: &[String]) -> String {
    if v.is_empty() {
        "none".into()
    } else {
        v.join(", ")
    }
}

pub(crate) fn call(t: &Target, req: Request) -> Result<Value, String> {
    let name = pick(t)?;
    let sock = daemon::state_dir(&name).join("ctl.sock");
    // A request that boots a guest waits as long as the guest takes.
    let wait = match req {
        Request::VmAdd { .. } | Request::Restart { .. } => {
            hvnet_control::guest::BOOT_TIMEOUT + std::time::Duration::from_secs(30)
        }
        // A trace or a diagnosis waits as long as it was told to.
        Request::Trace { timeout_ms, .. }
        | Request::Diagnose {
            window_ms: timeout_ms,
            ..
        } => std::time::Duration::from_millis(timeout_ms) + std::time::Duration::from_secs(10),
        _ => std::time::Duration::from_secs(10),
    };
    let r = proto::call_waiting(&sock, &req, wait).map_err(|e| socket_error(&name, &sock, &e))?;
    if r.ok {
        return Ok(r.data);
    }
    // With --json, the refusal typed too (on stdout, where the answer
    // would have been), for scripts; the words go to stderr as always.
    if let (true, Some(detail)) = (t.json, &r.detail) {
        println!("{}", serde_json::json!({ "error": detail }));
    }
    Err(r.error)
}

/// A control socket that could not be reached, in the operator's words.
/// Asks the switch; prints its answer as JSON with `--json`, else with
/// `print`.
pub(crate) fn show(t: &Target, req: Request, print: impl Fn(&Value)) -> Result<(), String> {
    let v = call(t, req)?;
    if t.json {
        println!("{v}");
    } else {
        print(&v);
    }
    Ok(())
}

/// A `--FLAG SECONDS` value: more than 0 and at most `max` seconds.
pub(crate) fn seconds(flag: &str, v: f64, max: u64) -> Result<std::time::Duration, String> {
    if !(v > 0.0 && v <= max as f64) {
        return Err(format!(
            "--{flag} {v}: seconds, more than 0 and at most {max}"
        ));
    }
    Ok(std::time::Duration::from_secs_f64(v))
}

pub(crate) fn socket_error(name: &str, sock: &std::path::Path, e: &std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::NotFound | std::io::ErrorKind::ConnectionRefused => {
            format!("the daemon of topology {name} is not running (its VMs are kept: `hvnet up FILE` re-attaches to them, `hvnet down {name}` removes them)")
        }
        std::io::ErrorKind::PermissionDenied => {
            "the control socket is root's; run as root".to_string()
        }
        _ => format!("control socket {}: {e}", sock.display()),
    }
}

/// `hvnet up FILE`
pub fn up(
    file: PathBuf,
    json_out: bool,
    metrics: Option<std::net::SocketAddr>,
    drop_privileges: bool,
) -> Result<(), String> {
    let exe = std::env::current_exe().map_err(|e| format!("cannot find my own binary: {e}"))?;
    if let Ok(topo) = topology::load(&file) {
        enter_netns(&topo)?;
    }
    let report = daemon::up(&file, &exe, metrics, drop_privileges).map_err(|e| match e {
        DaemonError::Topology(t) => t.to_string(),
        other => other.to_string(),
    })?;
    if let Some(a) = &report.applied {
        if metrics.is_some() || drop_privileges {
            eprintln!(
                "hvnet: topology {} runs already: --metrics and --drop-privileges belong to its daemon's start and were not changed (`hvnet down {}` and up again to change them)",
                report.topo.name, report.topo.name
            );
        }
        if json_out {
            println!("{}", json!({"topology": report.topo.name, "applied": a}));
        } else {
            let list = |k: &str| joined(&a[k], ", ");
            let segments: Vec<String> = a["segments"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|g| {
                    format!(
                        "; uplink {} segments added {}, removed {}",
                        s(&g["uplink"]),
                        joined(&g["added"], " "),
                        joined(&g["removed"], " ")
                    )
                })
                .collect();
            let reverted = match joined(&a["reverted"], ", ").as_str() {
                "none" => String::new(),
                r => format!(" (run-time changes reverted to the file's: {r})"),
            };
            let p = &a["policy"];
            let mut policy = format!(
                "; security groups changed {}",
                joined(&p["security_groups"], ", ")
            );
            let ports_groups = joined(&p["ports_groups"], ", ");
            if ports_groups != "none" {
                policy += &format!(" (ports' groups: {ports_groups})");
            }
            for (k, what) in [
                ("mirrors", "mirrors"),
                ("ipfix", "IPFIX"),
                ("tenants", "tenants' routing"),
            ] {
                if p[k].as_bool() == Some(true) {
                    policy += &format!("; {what} changed");
                }
            }
            println!(
                "topology {} runs; applied {}: added {}; removed {}; uplinks added {}; uplinks removed {}; settings changed {}{}{}{}; {} VMs and {} uplinks now",
                report.topo.name,
                file.display(),
                list("added"),
                list("removed"),
                list("uplinks_added"),
                list("uplinks_removed"),
                list("changed"),
                reverted,
                segments.concat(),
                policy,
                s(&a["vms"]),
                s(&a["uplinks"])
            );
        }
        return Ok(());
    }
    let reattached = report.bringup == daemon::Bringup::Reattach;
    let topo = report.topo;
    if json_out {
        let vms: Vec<Value> = topo
            .vms
            .iter()
            .map(|v| {
                let mut o = json!({"vm": v.name, "kind": v.kind, "mac": v.mac.to_string()});
                if v.kind == topology::VmKind::Netns {
                    o["netns"] = json!(topo.netns_path(v));
                } else {
                    o["socket"] = json!(hvnet_control::guest::socket_path(
                        &daemon::state_dir(&topo.name),
                        &v.name
                    ));
                }
                o
            })
            .collect();
        let uplinks: Vec<Value> = topo
            .uplinks
            .iter()
            .map(|u| json!({"uplink": u.name, "device": u.device, "queues": u.queues}))
            .collect();
        let hosts: Vec<Value> = topo
            .hosts
            .iter()
            .map(|h| json!({"host": h.name, "netns": topo.netns_of(&h.name), "uplink": h.uplink, "mac": h.mac.to_string()}))
            .collect();
        println!(
            "{}",
            json!({"topology": topo.name, "reattached": reattached, "vms": vms, "uplinks": uplinks, "hosts": hosts})
        );
    } else {
        if reattached {
            println!(
                "topology {} is up again: re-attached to its {} VMs (their NICs and addresses were kept; counters start from zero)",
                topo.name,
                topo.vms.len()
            );
        } else {
            println!("topology {} is up: {} VMs", topo.name, topo.vms.len());
        }
        for v in &topo.vms {
            let addr = v.ipv4.map(|(a, l)| format!("{a}/{l}")).unwrap_or_default();
            let place = match v.kind {
                topology::VmKind::Netns if v.attach.is_some() => {
                    format!("netns {}", topo.netns_path(v).display())
                }
                topology::VmKind::Netns => format!("netns {}", topo.netns(v)),
                k => format!("{} guest", k.name()),
            };
            println!(
                "  {:<12} {:<30} {} {} {} mtu {}",
                v.name,
                place,
                v.ifname(),
                v.mac,
                addr,
                v.settings.mtu
            );
        }
        for u in &topo.uplinks {
            println!(
                "  uplink {:<5} on {} ({} queues, mtu {})",
                u.name, u.device, u.queues, u.settings.mtu
            );
        }
        for h in &topo.hosts {
            let addr = h.ipv4.map(|(a, l)| format!("{a}/{l}")).unwrap_or_default();
            println!(
                "  host {:<7} netns {:<24} eth0 {} {} (on the wire of {})",
                h.name,
                topo.netns_of(&h.name),
                h.mac,
                addr,
                h.uplink
            );
        }
        for w in topo.warnings() {
            println!("warning: {w}");
        }
        println!(
            "run commands in a VM with: hvnet exec {} -- …",
            topo.vms
                .first()
                .map(|v| v.name.as_str())
                .unwrap_or_default()
        );
    }
    Ok(())
}

/// `hvnet down [NAME]` (or `-t NAME`, as every other command takes it).
/// Idempotent, as cleanup scripts want: with nothing up, or NAME not up,
/// it says so and succeeds.
pub fn down(name: Option<String>, t: &Target) -> Result<(), String> {
    let json_out = t.json;
    let wanted = name.or_else(|| t.topology.clone());
    if let Some(n) = &wanted {
        topology::check_topology_name(n)?;
    }
    let up = daemon::topologies();
    let name = match (wanted, up.as_slice()) {
        (Some(n), _) if up.contains(&n) => n,
        (None, [one]) => one.clone(),
        (None, []) | (Some(_), _) => {
            let what = if json_out {
                "{}"
            } else {
                "nothing to take down: no such topology is up"
            };
            println!("{what}");
            return Ok(());
        }
        (None, many) => {
            return Err(format!(
                "several topologies are up ({}); choose one with -t NAME",
                many.join(", ")
            ))
        }
    };
    // A topology that runs in a namespace of its own is taken down there
    // (its devices are that namespace's).
    if let Some(st) = hvnet_control::state::read_state(&daemon::state_dir(&name)) {
        if let Ok(topo) = topology::parse(&st.topology_text) {
            enter_netns(&topo)?;
        }
    }
    let r = daemon::down(&name).map_err(|e| e.to_string())?;
    if json_out {
        println!("{}", serde_json::to_string(&r).expect("report serializes"));
    } else {
        match r.stopped_pid {
            Some(p) => println!("topology {name}: daemon {p} stopped"),
            None => println!("topology {name}: daemon was not running"),
        }
        if !r.namespaces.is_empty() {
            println!("removed namespaces: {}", r.namespaces.join(", "));
        }
        if !r.interfaces.is_empty() {
            println!("removed interfaces: {}", r.interfaces.join(", "));
        }
        for l in &r.left {
            println!("left untouched: {l}");
        }
    }
    Ok(())
}

/// `hvnet ports`
pub fn ports(t: &Target) -> Result<(), String> {
    let v = call(t, Request::Ports)?;
    if t.json {
        println!("{v}");
        return Ok(());
    }
    println!(
        "PORT   TYPE              SWITCH     MAC                CLIENT         QUEUES LINK    VLAN"
    );
    for p in v.as_array().into_iter().flatten() {
        println!(
            "{:<6} {:<17} {:<10} {:<18} {:<14} {:<6} {:<7} {}",
            s(&p["port"]),
            s(&p["type"]),
            s(&p["switch"]),
            s(&p["mac"]),
            s(&p["client"]),
            s(&p["queues"]),
            s(&p["link"]),
            vlan_column(p)
        );
    }
    Ok(())
}

/// A port's VLANs in `hvnet ports`: an access port's VLAN (`10`); a
/// trunk's allowed VLANs and native VLAN (`T:10,20,100-199/n5`, `T:all`).
fn vlan_column(p: &Value) -> String {
    if p["vlan_mode"] != "trunk" {
        return s(&p["vlan"]);
    }
    let vlans = match s(&p["vlans"]) {
        v if v == "1-4094" => "all".to_string(),
        v => v,
    };
    match p["native_vlan"].as_u64() {
        Some(n) => format!("T:{vlans}/n{n}"),
        None => format!("T:{vlans}"),
    }
}

/// The items of JSON array `v` joined by `sep`, or "none".
fn joined(v: &Value, sep: &str) -> String {
    let items: Vec<String> = v.as_array().into_iter().flatten().map(s).collect();
    if items.is_empty() {
        "none".to_string()
    } else {
        items.join(sep)
    }
}

fn s(v: &Value) -> String {
    v.as_str().map_or_else(|| v.to_string(), str::to_string)
}

/// `hvnet stats [PATH]`
pub fn stats(t: &Target, path: String) -> Result<(), String> {
    let v = call(t, Request::Stats { path })?;
    if t.json {
        println!("{v}");
    } else {
        print_tree(&v, 0);
    }
    Ok(())
}

fn print_tree(v: &Value, indent: usize) {
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                if x.is_object() {
                    println!("{:indent$}{k}:", "");
                    print_tree(x, indent + 2);
                } else {
                    println!("{:indent$}{k}: {}", "", s(x));
                }
            }
        }
        Value::Array(a) => {
            for x in a {
                println!("{:indent$}{}", "", s(x));
            }
        }
        other => println!("{:indent$}{}", "", s(other)),
    }
}

/// `hvnet port PORT [set …]`
pub fn port(t: &Target, a: PortArgs) -> Result<(), String> {
    let v = match a.action {
        None => call(t, Request::PortShow { name: a.port })?,
        Some(PortAction::Set { changes }) => {
            let mut m = serde_json::Map::new();
            for c in changes {
                let (k, val) = c
                    .split_once('=')
                    .ok_or_else(|| format!("{c:?}: expected KEY=VALUE"))?;
                let val = match val {
                    "on" | "true" => json!(true),
                    "off" | "false" => json!(false),
                    // Numbers as numbers; words (rx_overflow=drop,
                    // delivery=thread) go as they are, and the daemon names
                    // the allowed values if one is wrong.
                    n => n.parse::<u64>().map_or_else(|_| json!(n), |x| json!(x)),
                };
                m.insert(k.to_string(), val);
            }
            call(
                t,
                Request::PortSet {
                    name: a.port,
                    changes: Value::Object(m),
                },
            )?
        }
    };
    if t.json {
        println!("{v}");
    } else {
        print_tree(&v, 0);
    }
    Ok(())
}

/// `hvnet fdb`
pub fn fdb(t: &Target) -> Result<(), String> {
    let v = call(t, Request::Fdb)?;
    if t.json {
        println!("{v}");
        return Ok(());
    }
    println!("PORT  NAME         VLAN  MAC                KIND     AGE(s)");
    for r in v.as_array().into_iter().flatten() {
        println!(
            "{:<5} {:<12} {:<5} {:<18} {:<8} {}",
            s(&r["port"]),
            s(&r["port_name"]),
            s(&r["vlan"]),
            s(&r["mac"]),
            s(&r["kind"]),
            s(&r["age_secs"])
        );
    }
    Ok(())
}

/// `hvnet mdb`
pub fn ipfix(t: &Target) -> Result<(), String> {
    let v = call(t, Request::Ipfix)?;
    if t.json {
        println!("{v}");
        return Ok(());
    }
    if v.is_null() {
        println!("flow export is off (no [ipfix] in the topology)");
        return Ok(());
    }
    let targets: Vec<String> = v["targets"]
        .as_array()
        .into_iter()
        .flatten()
        .map(s)
        .collect();
    println!(
        "targets {}, sampling 1 in {}, observation domain {}, active timeout {} s, idle timeout {} s",
        targets.join(", "),
        v["sampling"],
        v["obs_domain_id"],
        v["cache_active_timeout"],
        v["cache_idle_timeout"]
    );
    let c = &v["counters"];
    println!(
        "flows cached {} (at most {}); frames metered {}, not metered (cache full) {}; records sent {} in {} messages, send errors {}",
        v["flows"], v["cache_max_flows"], c["metered"], c["cache_full"], c["records"], c["messages"], c["send_errors"]
    );
    Ok(())
}

pub fn mirror(t: &Target) -> Result<(), String> {
    let v = call(t, Request::Mirror)?;
    if t.json {
        println!("{v}");
        return Ok(());
    }
    println!("NAME             SELECTS                                  OUTPUT                   COPIES     BYTES       LOST");
    for m in v.as_array().into_iter().flatten() {
        let list = |k: &str| {
            m[k].as_array()
                .map(|a| {
                    a.iter()
                        .map(|x| x.to_string().trim_matches('"').to_string())
                        .collect::<Vec<_>>()
                        .join(",")
                })
                .unwrap_or_default()
        };
        let mut sel = Vec::new();
        if m["select_all"] == true {
            sel.push("all".to_string());
        }
        for (k, w) in [
            ("select_src_port", "from"),
            ("select_dst_port", "to"),
            ("select_vlan", "vlan"),
        ] {
            let l = list(k);
            if !l.is_empty() {
                sel.push(format!("{w} {l}"));
            }
        }
        let o = &m["output"];
        let out = if let Some(p) = o["port"].as_str() {
            format!("port {p}")
        } else if let Some(v) = o["vlan"].as_u64() {
            format!("vlan {v}")
        } else {
            let e = &o["erspan"];
            format!(
                "erspan {} type {} session {}",
                s(&e["remote"]),
                e["version"],
                e["session"]
            )
        };
        println!(
            "{:<16} {:<40} {:<24} {:<10} {:<11} {}",
            s(&m["name"]),
            sel.join("; "),
            out,
            m["copies"].to_string(),
            m["bytes"].to_string(),
            m["lost"]
        );
    }
    Ok(())
}

pub fn mdb(t: &Target) -> Result<(), String> {
    let v = call(t, Request::Mdb)?;
    if t.json {
        println!("{v}");
        return Ok(());
    }
    let on = |k: &str| if v[k] == true { "on" } else { "off" };
    println!(
        "snooping {}, querier {}, flood unknown {}",
        on("multicast_snooping"),
        on("multicast_querier"),
        on("multicast_flood_unknown")
    );
    println!("VLAN  GROUP                     PORT  NAME         STATE  EXPIRES(s)");
    for r in v["mdb"].as_array().into_iter().flatten() {
        println!(
            "{:<5} {:<25} {:<5} {:<12} {:<6} {}",
            s(&r["vlan"]),
            s(&r["group"]),
            s(&r["port"]),
            s(&r["port_name"]),
            s(&r["state"]),
            s(&r["expires_secs"])
        );
    }
    for r in v["router"].as_array().into_iter().flatten() {
        let vlan = if r["vlan"].is_null() {
            "every VLAN".to_string()
        } else {
            format!("VLAN {}", s(&r["vlan"]))
        };
        println!(
            "router port {} ({}), {vlan}, {}",
            s(&r["port_name"]),
            s(&r["port"]),
            s(&r["state"])
        );
    }
    for q in v["queriers"].as_array().into_iter().flatten() {
        println!(
            "querier {} ({}) on {}, VLAN {}, {} s left",
            s(&q["addr"]),
            s(&q["family"]),
            s(&q["port_name"]),
            s(&q["vlan"]),
            s(&q["expires_secs"])
        );
    }
    Ok(())
}

/// `hvnet vm add|del`
#[derive(Debug, clap::Subcommand)]
pub enum VmCmd {
    /// Create a VM and give it a port on the running switch:
    /// `hvnet vm add -t TOPO web3 ipv4=10.10.0.3/24 queues=2`. The keys are
    /// a `[[vm]]` table's (kind, ipv4, ipv6, mac, mtu, queues, vlan, lro,
    /// tso, csum, ring1, ring2, rx_overflow, delivery, mode, socket, …),
    /// checked as in a topology file; without `mac`, one is derived.
    Add {
        /// The VM's name.
        name: String,
        /// Settings, KEY=VALUE each.
        #[arg(value_name = "KEY=VALUE")]
        settings: Vec<String>,
        #[command(flatten)]
        target: Target,
    },
    /// Remove a VM: its port leaves the switch (its learned addresses and
    /// queues with it), a guest hvnet started (kind uml or qemu) is
    /// stopped, and what hvnet created for it is deleted. A guest started
    /// elsewhere runs on without the port: libvirt's is not given one
    /// again until its socket is bound again (the domain started again or
    /// the interface plugged again), also by a restarted switch; stop the
    /// domain with `virsh destroy` first to take it off the network.
    Del {
        /// The VM's name.
        name: String,
        #[command(flatten)]
        target: Target,
    },
}

/// A `[[vm]]` table from `KEY=VALUE` words: numbers, `true`/`false` and
/// lists (`[…]`) as they are, everything else as a string.
pub fn vm_table(name: &str, settings: &[String]) -> Result<String, String> {
    let mut t = format!("[[vm]]\nname = {name:?}\n");
    for kv in settings {
        let (k, v) = kv
            .split_once('=')
            .ok_or_else(|| format!("{kv:?}: settings are KEY=VALUE (as ipv4=10.10.0.3/24)"))?;
        let (k, v) = (k.trim(), v.trim());
        if k.is_empty() || !k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            return Err(format!("{kv:?}: {k:?} is not a setting's name"));
        }
        let raw = v.parse::<i64>().is_ok() || v == "true" || v == "false" || v.starts_with('[');
        if raw {
            t += &format!("{k} = {v}\n");
        } else {
            t += &format!("{k} = {v:?}\n");
        }
    }
    Ok(t)
}

/// `hvnet vm add|del`
pub fn vm(c: VmCmd) -> Result<(), String> {
    match c {
        VmCmd::Add {
            name,
            settings,
            target,
        } => {
            let table = vm_table(&name, &settings)?;
            // A refusal of the table's line N names the setting given
            // there (line 1 is `[[vm]]`, line 2 the name).
            let v = call(&target, Request::VmAdd { table }).map_err(|e| {
                let at = e
                    .strip_prefix("line ")
                    .and_then(|r| r.split_once(": "))
                    .and_then(|(n, rest)| Some((n.parse::<usize>().ok()?, rest)));
                match at {
                    Some((n, rest)) if n >= 3 && n - 3 < settings.len() => {
                        format!("{}: {rest}", settings[n - 3])
                    }
                    _ => e,
                }
            })?;
            if target.json {
                println!("{v}");
            } else {
                println!(
                    "vm {}: added ({} VM, port {}, mac {})",
                    s(&v["vm"]),
                    s(&v["kind"]),
                    s(&v["port"]),
                    s(&v["mac"])
                );
            }
        }
        VmCmd::Del { name, target } => {
            let v = call(&target, Request::VmDel { name })?;
            if target.json {
                println!("{v}");
            } else {
                println!("vm {}: removed", s(&v["vm"]));
            }
        }
    }
    Ok(())
}

/// `hvnet workers`
pub fn workers(t: &Target) -> Result<(), String> {
    let v = call(t, Request::Workers)?;
    if t.json {
        println!("{v}");
        return Ok(());
    }
    for w in v.as_array().into_iter().flatten() {
        println!(
            "{} (cpu {}, tid {}, nice {}): busy {} %, sleeps {}, wake-ups {}, turns {}",
            s(&w["name"]),
            s(&w["cpu"]),
            s(&w["tid"]),
            s(&w["nice"]),
            s(&w["busy_pct"]),
            s(&w["sleeps"]),
            s(&w["wakeups"]),
            s(&w["turns"])
        );
        for q in w["queues"].as_array().into_iter().flatten() {
            println!(
                "  port {:<16} queue {:<3} usage {:>5} %  of cpu {:>5} %",
                s(&q["port"]),
                s(&q["queue"]),
                s(&q["share_pct"]),
                s(&q["load_pct"])
            );
        }
    }
    Ok(())
}

/// Moves this process (still one thread: every thread it starts, and
/// the daemon it starts, follow) into the topology's network namespace,
/// when it names one: its uplinks' devices, EVPN's shadow and FRR are
/// that namespace's, a host of its own on this machine.
pub fn enter_netns(topo: &topology::Topology) -> Result<(), String> {
    let Some(ns) = &topo.netns else {
        return Ok(());
    };
    let handle = hvnet_sys::netns::open(ns).map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotFound {
            format!(
                "topology {}: network namespace {ns} does not exist: `netns` names the namespace the switch runs in, with its uplinks' devices; make it first (ip netns add {ns}) and its uplinks' devices in it",
                topo.name
            )
        } else {
            format!("topology {}: network namespace {ns}: {e}", topo.name)
        }
    })?;
    hvnet_sys::netns::enter(&handle).map_err(|e| format!("enter network namespace {ns}: {e}"))
}

/// `hvnet route [TENANT]`: per tenant its gateways, routes and
/// neighbours, as `ip route show vrf` and `ip neigh` print them.
pub fn route(t: &Target, tenant: Option<String>) -> Result<(), String> {
    let v = call(t, Request::Route { tenant })?;
    if t.json {
        println!("{v}");
        return Ok(());
    }
    for x in v["tenants"].as_array().into_iter().flatten() {
        let l3 = match x["l3"].as_object() {
            Some(l3) => format!(
                "  L3 VNI {} (VLAN {})  router MAC {}",
                s(&l3["vni"]),
                s(&l3["vlan"]),
                s(&v["router_mac"])
            ),
            None => String::new(),
        };
        println!(
            "tenant {}  gateway MAC {}{l3}",
            s(&x["name"]),
            s(&x["gateway_mac"])
        );
        for r in x["routes"].as_array().into_iter().flatten() {
            let via = match r["via"].as_str() {
                Some(v) => format!("via {v} "),
                None => String::new(),
            };
            let gw = x["gateways"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|g| g[0] == r["vlan"] && s(&g[1]).contains(':') == s(&r["to"]).contains(':'))
                .map(|g| format!(" src {}", s(&g[1]).split('/').next().unwrap_or_default()))
                .unwrap_or_default();
            let how = if r["kind"] == "connected" {
                "proto kernel scope link"
            } else {
                "proto static"
            };
            println!("  {} {via}dev vlan{} {how}{gw}", s(&r["to"]), s(&r["vlan"]));
        }
        if let Some(l3) = x["l3"].as_object() {
            for r in x["remote"].as_array().into_iter().flatten() {
                println!(
                    "  {}/{} via {} dev vlan{} proto bgp onlink (L3 VNI {})",
                    s(&r["to"][0]),
                    s(&r["to"][1]),
                    s(&r["vtep"]),
                    s(&l3["vlan"]),
                    s(&l3["vni"])
                );
            }
        }
        for n in x["neighbours"].as_array().into_iter().flatten() {
            println!(
                "  {} dev vlan{} lladdr {} {}",
                s(&n["ip"]),
                s(&n["vlan"]),
                s(&n["mac"]),
                if n["origin"] == "static" {
                    "PERMANENT"
                } else {
                    "REACHABLE"
                }
            );
        }
    }
    println!(
        "routed {}  gateway ARP answered {}  gateway pings answered {}  ARP requests sent {}  neighbours refused {}",
        s(&v["routed"]),
        s(&v["gateway_arp"]),
        s(&v["gateway_echo"]),
        s(&v["arp_requests_sent"]),
        s(&v["neighbours_refused"])
    );
    Ok(())
}

/// `hvnet evpn`: per EVPN uplink, the flood list and remote MACs with
/// where each came from, the remote IPs ARP is answered for, the counters,
/// and BGP's sessions as FRR reports them.
pub fn evpn(t: &Target) -> Result<(), String> {
    let v = call(t, Request::Evpn)?;
    if t.json {
        println!("{v}");
        return Ok(());
    }
    for u in v["uplinks"].as_array().into_iter().flatten() {
        let x = &u["vxlan"];
        println!(
            "uplink {}  VNI {}  VTEP {}  shadow {} / {}",
            s(&u["name"]),
            s(&x["vni"]),
            s(&x["local"]),
            s(&u["shadow"]["bridge"]),
            s(&u["shadow"]["vxlan"])
        );
        let segments = x["segments"].as_array().map_or(&[][..], Vec::as_slice);
        if segments.len() > 1 {
            println!("  segments (VNI, VLAN, shadow bridge, flood list, remote MACs, remote IPs):");
            for (g, sh) in segments
                .iter()
                .zip(u["shadows"].as_array().into_iter().flatten())
            {
                let flood: Vec<String> = g["flood_list"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(s)
                    .collect();
                println!(
                    "    {:<9} {:<6} {:<12} [{}] {} {}",
                    s(&g["vni"]),
                    g["vlan"].as_u64().map_or("own".into(), |v| v.to_string()),
                    s(&sh["bridge"]),
                    flood.join(", "),
                    s(&g["remote_macs"]),
                    s(&g["remote_ips"])
                );
            }
        }
        println!("  remote VTEPs (VTEP, origin, MAC):");
        for r in x["remotes"].as_array().into_iter().flatten() {
            println!(
                "    {:<16} {:<8} {}",
                s(&r["ip"]),
                s(&r["origin"]),
                s(&r["mac"])
            );
        }
        println!("  remote MACs (VNI, MAC, VTEP, origin, age s):");
        for m in x["remote_macs"].as_array().into_iter().flatten() {
            println!(
                "    {:<9} {:<18} {:<16} {:<8} {}",
                s(&m["vni"]),
                s(&m["mac"]),
                s(&m["remote"]),
                s(&m["origin"]),
                s(&m["age_secs"])
            );
        }
        println!(
            "  remote IPs answered for (ARP, ND): {}",
            x["remote_ips"].as_array().map_or(0, Vec::len)
        );
        print!("  counters:");
        for (k, c) in x["evpn"].as_object().into_iter().flatten() {
            print!(" {k}={c}");
        }
        println!();
    }
    // FRR 8.4 answers with the address family's object itself; later
    // versions wrap it in "l2VpnEvpn".
    let bgp = v["bgp"].get("l2VpnEvpn").unwrap_or(&v["bgp"]);
    match bgp["peers"].as_object() {
        Some(peers) => {
            println!(
                "BGP (l2vpn evpn) router ID {}, AS {}:",
                s(&bgp["routerId"]),
                s(&bgp["as"])
            );
            println!("  NEIGHBOR         STATE        UP/DOWN    PREFIXES RECEIVED");
            for (n, p) in peers {
                println!(
                    "  {:<16} {:<12} {:<10} {}",
                    n,
                    s(&p["state"]),
                    s(&p["peerUptime"]),
                    s(&p["pfxRcd"])
                );
            }
        }
        None => println!("BGP: {}", s(&v["bgp_error"])),
    }
    Ok(())
}

/// `hvnet exec VM -- COMMAND…`: runs a command in a VM of any kind, its
/// output and exit status passed through. A namespace VM's command runs
/// with this process's standard streams (`ip netns exec`); a guest's
/// command gets this process's standard input only with `-i`, and its
/// output when it ends.
pub fn exec(t: &Target, vm: &str, stdin: bool, argv: &[String]) -> Result<i32, String> {
    let name = pick(t)?;
    let dir = daemon::state_dir(&name);
    let state = hvnet_control::state::read_state(&dir)
        .ok_or_else(|| format!("topology {name} has no state"))?;
    // What runs: VMs added at run time too.
    let topo = state
        .running_topology()
        .or_else(|_| topology::load(&state.file).map_err(|e| e.to_string()))?;
    let v = topo.vms.iter().find(|v| v.name == vm).ok_or_else(|| {
        let names: Vec<String> = topo.vms.iter().map(|v| v.name.clone()).collect();
        format!(
            "no VM named {vm:?} in topology {name} (VMs: {})",
            names.join(", ")
        )
    })?;
    match v.kind {
        topology::VmKind::Netns if v.attach.is_some() => {
            use std::os::unix::process::CommandExt;
            let net = format!("--net={}", topo.netns_path(v).display());
            let e = std::process::Command::new("nsenter")
                .arg(net)
                .arg("--")
                .args(argv)
                .exec();
            Err(format!("cannot run nsenter: {e}"))
        }
        topology::VmKind::Netns => {
            use std::os::unix::process::CommandExt;
            let e = std::process::Command::new("ip")
                .args(["netns", "exec", &topo.netns(v)])
                .args(argv)
                .exec();
            Err(format!("cannot run ip netns exec: {e}"))
        }
        topology::VmKind::Uml | topology::VmKind::Qemu => {
            let input = if stdin {
                let mut b = Vec::new();
                std::io::Read::read_to_end(&mut std::io::stdin(), &mut b)
                    .map_err(|e| format!("reading standard input: {e}"))?;
                Some(b)
            } else {
                None
            };
            let out = hvnet_control::guest::exec(&dir, vm, argv, input.as_deref())
                .map_err(|e| e.to_string())?;
            use std::io::Write;
            let _ = std::io::stdout().write_all(&out.stdout);
            let _ = std::io::stderr().write_all(&out.stderr);
            Ok(out.status)
        }
        topology::VmKind::VhostUser => Err(format!(
            "vm {vm} is a vhost-user socket for a guest hvnet did not start; run commands in it as its hypervisor allows"
        )),
    }
}

/// `hvnet restart VM` / `hvnet kill VM`.
pub fn guest_ctl(t: &Target, vm: String, start: bool) -> Result<(), String> {
    let req = if start {
        Request::Restart { vm }
    } else {
        Request::Kill { vm }
    };
    let v = call(t, req)?;
    if t.json {
        println!("{v}");
    } else if v["running"].as_bool() == Some(true) {
        println!("vm {}: guest running (pid {})", s(&v["vm"]), v["pid"]);
    } else {
        println!("vm {}: guest stopped", s(&v["vm"]));
    }
    Ok(())
}

/// `hvnet team`
pub fn team(t: &Target) -> Result<(), String> {
    let v = call(t, Request::Team)?;
    if t.json {
        println!("{v}");
        return Ok(());
    }
    for tm in v["teams"].as_array().into_iter().flatten() {
        println!(
            "team {}  teaming {}  link {}  active {}  failovers {}  failbacks {}  announcements {}  placements {} (refused {})",
            s(&tm["name"]),
            s(&tm["teaming"]),
            s(&tm["link"]),
            s(&tm["active"]),
            s(&tm["failovers"]),
            s(&tm["failbacks"]),
            s(&tm["announcements"]),
            tm["placements"].as_array().map_or(0, Vec::len),
            s(&tm["placements_refused"])
        );
        if tm["partner"].is_object() {
            let p = &tm["partner"];
            println!(
                "  LACP partner: system {},{}  key {}",
                s(&p["system_priority"]),
                s(&p["system"]),
                s(&p["key"])
            );
        }
        println!("  MEMBER           MAC                STATE             TX FRAMES    RX FRAMES  DOWNS  PORTS");
        for m in tm["members"].as_array().into_iter().flatten() {
            let dev = s(&m["device"]);
            let carried: Vec<String> = tm["placements"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|p| s(&p["member"]) == dev)
                .map(|p| match p["port"].as_str() {
                    Some(port) => port.to_string(),
                    None => s(&p["mac"]),
                })
                .collect();
            println!(
                "  {:<16} {:<18} {:<17} {:>9} {:>12} {:>6}  {}",
                dev,
                s(&m["mac"]),
                s(&m["state"]),
                s(&m["tx_frames"]),
                s(&m["rx_frames"]),
                s(&m["downs"]),
                carried.join(",")
            );
            if let Some(l) = m["lacp"].as_object() {
                println!(
                    "      lacp: partner {} {},{} key {} port {}  actor state {}  partner state {}  pdus in {} out {}",
                    s(&l["partner_status"]),
                    s(&l["partner"]["system_priority"]),
                    s(&l["partner"]["system"]),
                    s(&l["partner"]["key"]),
                    s(&l["partner_port"]),
                    s(&l["actor_state"]),
                    s(&l["partner_state"]),
                    s(&l["rx"]),
                    s(&l["tx"])
                );
            }
        }
        print!("  drops:");
        for (k, c) in tm["drops"].as_object().into_iter().flatten() {
            print!(" {k} {c}");
        }
        println!();
    }
    Ok(())
}
