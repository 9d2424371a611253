//! Looking domains up in libvirt, read-only, through libvirt's own client
//! (`virsh -r`). Why not a binding: the Rust `virt` crate links libvirt
//! into the switch (every install would need libvirt's library, even with
//! no libvirt on the host), and it has no safe wrapper for what a daemon
//! would add next (events); the switch asks libvirt something only when a
//! socket appears or a guest's connection ends, where a process per
//! question costs nothing that matters.

use super::domain::{self, Domain, Nic};
use std::path::Path;
use std::process::Command;

/// How long one question to libvirt may take (a libvirtd that does not
/// answer is taken as one that is not there; the question is asked again).
const TIMEOUT_SECS: &str = "10";

/// Why libvirt could not say.
#[derive(Debug, thiserror::Error)]
pub enum VirshError {
    /// virsh could not be run.
    #[error("cannot run virsh")]
    Run(#[source] std::io::Error),
    /// virsh failed (libvirt refused, or did not answer in time).
    #[error("virsh {command}: {stderr}")]
    Failed {
        /// virsh's command (`list`, `dumpxml`).
        command: String,
        /// What virsh said, on its standard error.
        stderr: String,
    },
}

impl VirshError {
    /// libvirt has no such domain (one gone between a list and a look).
    fn no_domain(&self) -> bool {
        matches!(self, VirshError::Failed { stderr, .. }
            if stderr.contains("failed to get domain") || stderr.contains("not found"))
    }
}

/// libvirt at one URI, read-only.
pub struct Virsh {
    uri: String,
}

impl Virsh {
    /// libvirt at `uri` (`qemu:///system`).
    pub fn new(uri: &str) -> Virsh {
        Virsh { uri: uri.into() }
    }

    fn run(&self, args: &[&str]) -> Result<String, VirshError> {
        let out = Command::new("timeout")
            .arg(TIMEOUT_SECS)
            .args(["virsh", "-r", "-q", "-c", &self.uri])
            .args(args)
            .env("LC_ALL", "C")
            .output()
            .map_err(VirshError::Run)?;
        if !out.status.success() {
            return Err(VirshError::Failed {
                command: args.first().unwrap_or(&"").to_string(),
                stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
            });
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// The running domains' names.
    pub fn running(&self) -> Result<Vec<String>, VirshError> {
        Ok(self
            .run(&["list", "--name"])?
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .map(str::to_string)
            .collect())
    }

    /// `<target dev>` of interface `nic` as the domain's configuration
    /// gives it: a running vhost-user interface's is blanked where
    /// `ovs-vsctl` is installed (libvirt asks Open vSwitch for the name,
    /// which knows none). An interface hot-plugged live only has none.
    fn configured_name(&self, domain: &str, nic: &Nic) -> Option<String> {
        let xml = self
            .run(&["dumpxml", "--inactive", "--domain", domain])
            .ok()?;
        let config = domain::parse(&xml).ok()?;
        config
            .nics
            .into_iter()
            .find(|n| n.mac == nic.mac)
            .and_then(|n| n.name)
    }

    /// The running domain with an interface on `socket`, and that
    /// interface (`None`: no running domain has one). A domain gone
    /// meanwhile, or whose hvnet metadata does not read, is skipped; any
    /// other failure is an error (libvirt could not say).
    pub fn owner(&self, socket: &Path) -> Result<Option<(Domain, Nic)>, VirshError> {
        for name in self.running()? {
            let xml = match self.run(&["dumpxml", "--domain", &name]) {
                Ok(x) => x,
                // Gone between the list and the look.
                Err(e) if e.no_domain() => continue,
                // libvirt did not answer (restarting, busy): nobody can
                // say the socket has no owner.
                Err(e) => return Err(e),
            };
            let dom = match domain::parse(&xml) {
                Ok(d) => d,
                // An XML whose hvnet metadata is wrong (the hook refuses
                // those at a start; a hot-plug has no hook): not one of
                // the switch's guests.
                Err(e) => {
                    let error = crate::error::chain(&e);
                    tracing::warn!(domain = %name, %error, "libvirt: domain not read");
                    continue;
                }
            };
            if let Some(nic) = dom.nics.iter().find(|n| n.socket == socket) {
                let mut nic = nic.clone();
                if nic.name.is_none() {
                    nic.name = self.configured_name(&name, &nic);
                }
                return Ok(Some((dom, nic)));
            }
        }
        Ok(None)
    }
}
