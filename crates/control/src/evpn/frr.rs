//! FRR's daemons as `hvnet up` runs them for a topology with `[frr]`
//! (demos, tests, the lab): zebra and bgpd in the daemon's network
//! namespace, under a path space of their own (`-N hvnet-TOPOLOGY`: their
//! sockets and PID files in `/var/run/frr/hvnet-TOPOLOGY`), configured
//! through vtysh as FRR documents EVPN for Linux VTEPs, stopped by `hvnet
//! down`. A host that runs FRR already needs none of this: its own FRR
//! picks up the shadow devices (see `docs/guide/evpn.md`).

use crate::topology::Frr;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// Where Debian's FRR keeps its daemons.
const FRR_LIBEXEC: &str = "/usr/lib/frr";
/// Where FRR's daemons keep their sockets and PID files.
const FRR_RUN: &str = "/var/run/frr";

impl Frr {
    /// The configuration applied through vtysh.
    pub fn config(&self, hostname: &str) -> String {
        let mut c = format!(
            "hostname {hostname}\n!\nrouter bgp {}\n bgp router-id {}\n no bgp default ipv4-unicast\n timers bgp {} {}\n",
            self.asn,
            self.router_id,
            self.keepalive_secs,
            3 * self.keepalive_secs
        );
        for n in &self.neighbors {
            c += &format!(
                " neighbor {n} remote-as {}\n neighbor {n} timers connect 2\n",
                self.asn
            );
        }
        c += " !\n address-family l2vpn evpn\n";
        for n in &self.neighbors {
            c += &format!("  neighbor {n} activate\n");
        }
        c += "  advertise-all-vni\n exit-address-family\n!\n";
        c
    }
}

/// FRR's daemons of one topology, as they run.
#[derive(Clone, Debug)]
pub struct FrrRun {
    /// FRR's path space (`-N`).
    pub pathspace: String,
}

impl FrrRun {
    /// The run of topology `topology`.
    pub fn of(topology: &str) -> FrrRun {
        FrrRun {
            pathspace: format!("hvnet-{topology}"),
        }
    }

    /// Their run directory, owned by user frr: sockets, PID files, the
    /// configuration applied and the daemons' logs (vtysh's
    /// `--config_dir` is its parent, where it finds `PATHSPACE/vtysh.conf`).
    pub fn run_dir(&self) -> PathBuf {
        Path::new(FRR_RUN).join(&self.pathspace)
    }

    fn pid(&self, daemon: &str) -> Option<u32> {
        let pid: u32 = std::fs::read_to_string(self.run_dir().join(format!("{daemon}.pid")))
            .ok()?
            .trim()
            .parse()
            .ok()?;
        // That daemon, not a process that took its number since.
        let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).ok()?;
        (comm.trim() == daemon).then_some(pid)
    }

    /// True when zebra and bgpd of this run are alive.
    pub fn running(&self) -> bool {
        self.pid("zebra").is_some() && self.pid("bgpd").is_some()
    }

    /// Starts zebra, then bgpd, in the caller's network namespace, and
    /// applies `frr`'s configuration; a run that is alive already (the
    /// switch's daemon restarted) is kept.
    pub fn start(&self, frr: &Frr, hostname: &str) -> Result<(), String> {
        if self.running() {
            tracing::info!(pathspace = %self.pathspace, "FRR runs already: kept");
            return Ok(());
        }
        self.stop();
        let bin = Path::new(FRR_LIBEXEC);
        if !bin.join("zebra").exists() {
            return Err(format!(
                "[frr]: FRR is not installed ({}/zebra missing): apt-get install frr, or remove [frr] and run the host's own FRR",
                bin.display()
            ));
        }
        let dir = self.run_dir();
        std::fs::create_dir_all(&dir).map_err(|e| format!("create {}: {e}", dir.display()))?;
        let empty = dir.join("empty.conf");
        let conf = dir.join("frr.conf");
        let _ = std::fs::write(&empty, "");
        let _ = std::fs::write(dir.join("vtysh.conf"), "");
        std::fs::write(&conf, frr.config(hostname))
            .map_err(|e| format!("write {}: {e}", conf.display()))?;
        // The daemons drop to user frr: it owns what they write.
        let _ = Command::new("chown")
            .args(["-R", "frr:frr"])
            .arg(&dir)
            .status();
        for daemon in ["zebra", "bgpd"] {
            let log = format!("file:{}", dir.join(format!("{daemon}.log")).display());
            let status = Command::new(bin.join(daemon))
                .args(["-d", "-N", &self.pathspace, "-P", "0", "-f"])
                .arg(&empty)
                .args(["--log", &log])
                .status()
                .map_err(|e| format!("start FRR's {daemon}: {e}"))?;
            if !status.success() {
                return Err(format!(
                    "FRR's {daemon} did not start ({status}); see {}",
                    dir.display()
                ));
            }
            self.wait_socket(daemon)?;
        }
        let out = self.vtysh(&["-f".as_ref(), conf.as_os_str()])?;
        tracing::info!(pathspace = %self.pathspace, output = %out.trim(), "FRR started and configured");
        Ok(())
    }

    fn wait_socket(&self, daemon: &str) -> Result<(), String> {
        let sock = self.run_dir().join(format!("{daemon}.vty"));
        let deadline = Instant::now() + Duration::from_secs(20);
        while !sock.exists() {
            if Instant::now() > deadline {
                return Err(format!(
                    "FRR's {daemon} did not get ready within 20 s (no {})",
                    sock.display()
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(())
    }

    /// Runs vtysh on this run's daemons.
    pub fn vtysh(&self, args: &[&std::ffi::OsStr]) -> Result<String, String> {
        let out = Command::new("vtysh")
            .args(["-N", &self.pathspace, "--config_dir", FRR_RUN])
            .args(args)
            .output()
            .map_err(|e| format!("run vtysh: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "vtysh: {}{}",
                String::from_utf8_lossy(&out.stdout).trim(),
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// Stops the run's daemons (bgpd first, so that it says goodbye to its
    /// neighbours) and removes its run directory.
    pub fn stop(&self) {
        for daemon in ["bgpd", "zebra"] {
            if let Some(pid) = self.pid(daemon) {
                let _ = Command::new("kill").arg(pid.to_string()).status();
                let deadline = Instant::now() + Duration::from_secs(5);
                while alive(pid) && Instant::now() < deadline {
                    std::thread::sleep(Duration::from_millis(20));
                }
                if alive(pid) {
                    let _ = Command::new("kill")
                        .args(["-KILL", &pid.to_string()])
                        .status();
                }
            }
        }
        let _ = std::fs::remove_dir_all(self.run_dir());
    }
}

/// True while process `pid` runs (a zombie has ended: its parent, init
/// for a daemon, reaps it when it will).
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rsplit(')')
                .next()
                .map(|rest| !rest.trim_start().starts_with('Z'))
        })
        .unwrap_or(false)
}

/// BGP's EVPN sessions as FRR reports them (`show bgp l2vpn evpn summary
/// json`), from the topology's own FRR run or else the host's FRR.
pub fn bgp_summary(run: Option<&FrrRun>) -> Result<Value, String> {
    let args = ["-c", "show bgp l2vpn evpn summary json"];
    let text = match run {
        Some(r) => r.vtysh(&args.map(std::ffi::OsStr::new))?,
        None => {
            let out = Command::new("vtysh")
                .args(args)
                .output()
                .map_err(|e| format!("run vtysh: {e}"))?;
            String::from_utf8_lossy(&out.stdout).into_owned()
        }
    };
    serde_json::from_str(&text).map_err(|_| format!("FRR's answer is not JSON: {}", text.trim()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_configuration_is_frrs_documented_evpn_set_up() {
        let frr = Frr {
            asn: 65000,
            router_id: "198.18.60.11".parse().unwrap(),
            neighbors: vec!["198.18.60.12".parse().unwrap()],
            keepalive_secs: 3,
        };
        let c = frr.config("h1");
        for line in [
            "router bgp 65000",
            " bgp router-id 198.18.60.11",
            " neighbor 198.18.60.12 remote-as 65000",
            "  neighbor 198.18.60.12 activate",
            "  advertise-all-vni",
            " timers bgp 3 9",
        ] {
            assert!(c.lines().any(|l| l == line), "{line:?} in\n{c}");
        }
    }
}
