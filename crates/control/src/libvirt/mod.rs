//! libvirt's guests on the switch, as libvirt puts guests on Open
//! vSwitch: a domain's `<interface type='vhostuser'>` whose socket is in
//! the topology's `[libvirt] sockets` directory gets a port when the
//! guest starts (or the interface is hot-plugged, or the guest migrates
//! in), with the settings its XML gives, and loses it when the guest has
//! gone. No port is written by hand per guest.
//!
//! Two ways in, one per socket mode (docs/guide/libvirt.md says why):
//!
//! - `mode='server'` (QEMU listens; Open vSwitch's recommended
//!   `dpdkvhostuserclient`): libvirt binds the socket before QEMU starts,
//!   QEMU binds it at a hot-plug, and QEMU then waits for the switch. The
//!   [`agent`] watches the directory; a new socket is looked up in
//!   libvirt (read-only: which running domain's interface it is, and that
//!   interface's settings) and gets its port, which connects. This is the
//!   one way that sees a hot-plug: libvirt runs no hook for one, and its
//!   device-added event comes after QEMU's `netdev_add`, which waits for
//!   the switch.
//! - `mode='client'` (the switch listens): the socket must exist before
//!   QEMU starts, so libvirt's `prepare` hook (`hvnet libvirt-hook`,
//!   installed by `scripts/install-deps.sh`) asks the daemon for the port
//!   first ([`hook`]). A hot-plug in this mode finds no socket: use
//!   `mode='server'`.
//!
//! The hook also checks every interface of a starting domain that is
//! meant for hvnet (its socket in hvnet's directories, or hvnet's
//! metadata naming it) and refuses the start, in libvirt's error, where one
//! would not work: a socket outside the directory, a VLAN out of range, a
//! MAC the switch has. A port goes when its guest has: its connection
//! ended and no running domain has its interface any more (a shutdown, a
//! destroy, a detach, a migration away), or the `release` hook says so.

pub mod agent;
pub mod domain;
pub(crate) mod hook;
mod virsh;

use crate::topology::Libvirt;
use domain::{Domain, Nic, Vlan};
use std::path::Path;

/// Whether `socket` is in the directory `lv` watches (directly: libvirt's
/// guests' sockets are its entries).
pub fn in_directory(lv: &Libvirt, socket: &Path) -> bool {
    socket.parent() == Some(lv.sockets.as_path())
}

/// A socket libvirt bound for a guest that has gone, removed when nothing
/// listens on it any more (a connection attempt: only for a socket no
/// running domain has, whose QEMU is gone or never was). True if removed.
fn remove_left_over(path: &Path) -> bool {
    std::os::unix::net::UnixStream::connect(path).is_err() && std::fs::remove_file(path).is_ok()
}

/// The port's name: hvnet's metadata `name`, else `<target dev>`, else
/// the socket file's name without `.sock`.
pub fn port_name(nic: &Nic) -> String {
    nic.name.clone().unwrap_or_else(|| {
        let stem = nic
            .socket
            .file_name()
            .map(|f| f.to_string_lossy().into_owned())
            .unwrap_or_default();
        stem.strip_suffix(".sock").unwrap_or(&stem).to_string()
    })
}

/// The `[[vm]]` table of interface `nic` of domain `dom`: what `hvnet vm
/// add` would be given for it.
pub fn vm_table(lv: &Libvirt, dom: &Domain, nic: &Nic) -> String {
    let q = |s: &str| toml::Value::String(s.into()).to_string();
    let mut t = format!(
        "[[vm]]\nname = {}\nkind = \"vhost-user\"\nmac = \"{}\"\nqueues = {}\nconnected = {}\nsocket = {}\n",
        q(&port_name(nic)),
        nic.mac,
        nic.queues,
        nic.link_up,
        q(&nic.socket.to_string_lossy()),
    );
    t += &identity(dom, nic);
    t += &rest_of_table(lv, nic);
    t
}

/// The table's `domain`, `domain_uuid` and `alias`: who the port is for.
/// What the table cannot take is left out, not refused (the port is the
/// guest's network; its identity only a label).
fn identity(dom: &Domain, nic: &Nic) -> String {
    let q = |s: &str| toml::Value::String(s.into()).to_string();
    let label = |w: &str| Some(printable(w)).filter(|w| !w.is_empty() && w.len() <= 1024);
    let Some(name) = label(&dom.name) else {
        return String::new();
    };
    let mut t = format!("domain = {}\n", q(&name));
    if crate::topology::attach::is_uuid(&dom.uuid) {
        t += &format!("domain_uuid = {}\n", q(&dom.uuid));
    }
    if let Some(a) = nic.alias.as_deref().and_then(label) {
        t += &format!("alias = {}\n", q(&a));
    }
    t
}

/// The rest of [`vm_table`]: the socket's mode, rates and VLANs.
fn rest_of_table(lv: &Libvirt, nic: &Nic) -> String {
    let q = |s: &str| toml::Value::String(s.into()).to_string();
    let mut t = String::new();
    if nic.qemu_listens {
        t += "mode = \"client\"\n";
    } else {
        t += &format!(
            "mode = \"server\"\nsocket_group = {}\nsocket_mode = \"0660\"\n",
            q(&lv.group)
        );
    }
    // libvirt's <outbound> is what the guest sends (a policer, as
    // libvirt's own tc and Open vSwitch do it), <inbound> what it
    // receives (a shaper); averages in kB/s, bursts in KiB.
    for (way, r) in [
        ("tx", nic.bandwidth.outbound),
        ("rx", nic.bandwidth.inbound),
    ] {
        let Some(r) = r else { continue };
        t += &format!("{way}_rate = \"{}kbit\"\n", r.average.saturating_mul(8));
        if let Some(b) = r.burst {
            let least = hvnet_datapath::rate::MIN_BURST.div_ceil(1024);
            t += &format!("{way}_burst = \"{}kb\"\n", b.max(least));
        }
    }
    match &nic.vlan {
        Vlan::None => {}
        Vlan::Access(id) => t += &format!("vlan = {id}\n"),
        Vlan::Trunk { vlans, native } => {
            let list: Vec<String> = vlans
                .iter()
                .map(|v| match v.parse::<u16>() {
                    Ok(n) => n.to_string(),
                    Err(_) => q(v),
                })
                .collect();
            t += &format!("vlan_mode = \"trunk\"\nvlans = [{}]\n", list.join(", "));
            if let Some(n) = native {
                t += &format!("native_vlan = {n}\n");
            }
        }
    }
    t
}

/// `s` with its control characters as spaces (a comment's text).
fn printable(s: &str) -> String {
    s.chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect()
}
