//! `hvnet-cni`: run by a container runtime with the spec's environment
//! and a network configuration on standard input; prints the result (or
//! the error object) on standard output.

use std::io::Read;
use std::process::ExitCode;

fn main() -> ExitCode {
    if std::env::args()
        .nth(1)
        .is_some_and(|a| a == "--help" || a == "-h")
    {
        println!("{HELP}");
        return ExitCode::SUCCESS;
    }
    let mut stdin = Vec::new();
    let read = if std::env::var("CNI_COMMAND").as_deref() == Ok("VERSION") {
        // Runtimes may give VERSION nothing to read.
        let _ = std::io::stdin().read_to_end(&mut stdin);
        Ok(())
    } else {
        std::io::stdin().read_to_end(&mut stdin).map(drop)
    };
    let (out, ok) = match read {
        Ok(()) => hvnet_cni::run(|k| std::env::var(k).ok(), &stdin),
        Err(e) => {
            let err = hvnet_cni::error::CniError::new(
                hvnet_cni::error::code::IO_FAILURE,
                "cannot read the configuration",
                e.to_string(),
            );
            (Some(err.to_json("1.1.0")), false)
        }
    };
    if let Some(v) = out {
        println!("{v}");
    }
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

const HELP: &str = "hvnet-cni: a CNI plugin that puts containers on a running hvnet switch

A container runtime runs it (podman with the CNI backend, containerd's CRI,
a kubelet through them) with CNI_COMMAND=ADD|DEL|CHECK|GC|STATUS|VERSION,
CNI_CONTAINERID, CNI_NETNS, CNI_IFNAME, CNI_PATH and the network's
configuration on standard input, for example:

  {\"cniVersion\": \"1.0.0\", \"name\": \"web\", \"type\": \"hvnet-cni\",
   \"topology\": \"t1\", \"vlan\": 10, \"mtu\": 9000,
   \"ipam\": {\"type\": \"host-local\", \"ranges\": [[{\"subnet\": \"198.18.10.0/24\"}]]}}

`topology` names the hvnet topology whose switch the container joins (it
must be up: the plugin never starts one); every other key is a [[vm]]
table's (vlan, vlan_mode, vlans, native_vlan, mtu, mac, queues,
security_groups, tx_rate, rx_rate, bursts, guards...). Addresses come from
the IPAM plugin named in `ipam`. Errors are printed as CNI error objects
(codes 1-11 the spec's, 100-104 hvnet-cni's). See docs/guide/containers.md.";
