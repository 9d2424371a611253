//! What the daemon does when libvirt's `qemu` hook calls (through
//! `packaging/libvirt/hvnet-hook`, which asks every running switch): at
//! `prepare`, before libvirt has made anything for the guest, every
//! interface meant for this switch is checked, and the ones the switch
//! serves (`mode='client'`) get their ports — all or none; at `release`,
//! after the guest has gone, their ports go. A refusal's words reach
//! libvirt's error for `virsh start` (and the destination's, for a
//! migration).

use super::domain::{self, Nic};
use super::{in_directory, port_name, remove_left_over, vm_table};
use crate::ctl::Ctl;
use crate::proto::CtlError;
use crate::topology::SOCKETS_ROOT;
use serde_json::{json, Value};

/// The hook's operation `op` (libvirt's: `prepare`, `start`, `started`,
/// `stopped`, `release`, `migrate`, `restore`, `reconnect`) for the domain
/// `xml`.
pub(crate) fn hook(cx: &Ctl, op: &str, xml: &str) -> Result<Value, CtlError> {
    let answer = carry_out(cx, op, xml);
    if let Err(e) = &answer {
        tracing::warn!(op, error = %e, "libvirt: hook refused");
    }
    answer
}

fn carry_out(cx: &Ctl, op: &str, xml: &str) -> Result<Value, CtlError> {
    let topo = cx.topology();
    let Some(lv) = topo.libvirt.clone() else {
        return Ok(json!({"ports": []}));
    };
    let dom = match domain::parse(xml) {
        Ok(d) => d,
        // Refused only where it is the switch's: another switch's guest,
        // or one on no switch at all, starts as libvirt says.
        Err(e)
            if xml.contains(domain::NAMESPACE) || xml.contains(&*lv.sockets.to_string_lossy()) =>
        {
            return Err(CtlError::refused(format!(
                "hvnet: {}",
                crate::error::chain(&e)
            )))
        }
        Err(_) => return Ok(json!({"ports": []})),
    };
    let ours: Vec<&Nic> = dom
        .nics
        .iter()
        .filter(|n| in_directory(&lv, &n.socket))
        .collect();
    match op {
        "prepare" => {
            // Meant for a switch (hvnet's metadata names it) but where
            // none looks: the guest would wait for a port forever.
            if let Some(n) = dom.nics.iter().find(|n| {
                n.claimed && !in_directory(&lv, &n.socket) && !n.socket.starts_with(SOCKETS_ROOT)
            }) {
                return Err(CtlError::refused(format!(
                    "hvnet: domain {}: interface {}: socket {} is outside hvnet's directories (this switch's, topology {}: {})",
                    dom.name,
                    n.mac,
                    n.socket.display(),
                    topo.name,
                    lv.sockets.display()
                )));
            }
            // Everything checked before anything is made: each port as
            // `hvnet vm add` would check it, against the switch and the
            // domain's other interfaces.
            let mut next = crate::topology::Topology::clone(&topo);
            for n in &ours {
                // A port left on this socket (a guest that ended without
                // its `release`) gives way to the guest starting now.
                if let Some(old) = next
                    .vms
                    .iter()
                    .position(|v| v.vhost.path.as_deref() == Some(&n.socket))
                {
                    next.vms.remove(old);
                }
                let vm = next
                    .parse_vm(&vm_table(&lv, &dom, n))
                    .map_err(|e| refusal(&dom.name, n, &e.to_string()))?;
                next.vms.push(vm);
            }
            let mut made = Vec::new();
            for n in ours.iter().filter(|n| !n.qemu_listens) {
                let stale = topo
                    .vms
                    .iter()
                    .find(|v| v.vhost.path.as_deref() == Some(&n.socket))
                    .map(|v| v.name.clone());
                if let Some(old) = stale {
                    // (Gone meanwhile is as good.)
                    let _ = crate::reconcile::del_vm(cx, &old);
                }
                match crate::reconcile::add_vm(cx, &vm_table(&lv, &dom, n)) {
                    Ok(_) => made.push(port_name(n)),
                    Err(e) => {
                        for m in &made {
                            let _ = crate::reconcile::del_vm(cx, m);
                        }
                        return Err(refusal(&dom.name, n, &e.to_string()));
                    }
                }
            }
            tracing::info!(domain = %dom.name, ports = ?made, "libvirt: guest prepared");
            Ok(json!({"ports": made}))
        }
        "release" => {
            let mut gone = Vec::new();
            for n in &ours {
                // The socket first: a port gone while its socket stays
                // is one removed by hand, to the watch.
                if n.qemu_listens {
                    remove_left_over(&n.socket);
                }
                if let Some(vm) =
                    cx.topology().vms.iter().find(|v| {
                        v.vhost.path.as_deref() == Some(n.socket.as_path()) && v.mac == n.mac
                    })
                {
                    if crate::reconcile::del_vm(cx, &vm.name).is_ok() {
                        gone.push(vm.name.clone());
                    }
                }
            }
            if !gone.is_empty() {
                tracing::info!(domain = %dom.name, ports = ?gone, "libvirt: guest released");
            }
            Ok(json!({"ports": gone}))
        }
        _ => Ok(json!({"ports": []})),
    }
}

/// A refusal naming the domain and the interface.
fn refusal(domain: &str, n: &Nic, why: &str) -> CtlError {
    CtlError::refused(format!(
        "hvnet: domain {domain}: interface {} ({}): {why}",
        n.mac,
        n.socket.display()
    ))
}
