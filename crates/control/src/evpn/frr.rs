//! FRR's daemons as `hvnet up` runs them for a topology with `[frr]`
//! (demos, tests, the lab): zebra and bgpd in the daemon's network
//! namespace, under a path space of their own (`-N hvnet-TOPOLOGY`: their
//! sockets and PID files in `/var/run/frr/hvnet-TOPOLOGY`), configured
//! through vtysh as FRR documents EVPN for Linux VTEPs, stopped by `hvnet
//! down`. A host that runs FRR already needs none of this: its own FRR
//! picks up the shadow devices (see `docs/guide/evpn.md`).

use crate::topology::{Frr, Topology};
use hvnet_datapath::route::Tenant;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// Where Debian's FRR keeps its daemons.
const FRR_LIBEXEC: &str = "/usr/lib/frr";
/// Where FRR's daemons keep their sockets and PID files.
const FRR_RUN: &str = "/var/run/frr";

impl Frr {
    /// The configuration applied through vtysh; with `routed`, the tenant
    /// routed across hosts (symmetric IRB, FRR's documented set-up in the
    /// default VRF): its L3 VNI, its subnets advertised as type-5 routes,
    /// and zebra's routes written with plain next hops (which the sync
    /// reads).
    pub fn config(&self, hostname: &str, routed: Option<&Tenant>) -> String {
        let l3 = routed.and_then(|t| Some((t, t.l3?)));
        let mut c = format!("hostname {hostname}\n!\n");
        if let Some((_, l3)) = l3 {
            c += &format!("no zebra nexthop kernel enable\nvni {}\n!\n", l3.vni);
        }
        c += &format!(
            "router bgp {}\n bgp router-id {}\n no bgp default ipv4-unicast\n timers bgp {} {}\n",
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
        if let Some((t, _)) = l3 {
            c += " no bgp network import-check\n !\n address-family ipv4 unicast\n";
            for g in &t.gateways {
                let (a, n) = g.ipv4;
                c += &format!("  network {}/{n}\n", hvnet_datapath::route::network(a, n));
            }
            c += " exit-address-family\n";
        }
        c += " !\n address-family l2vpn evpn\n";
        for n in &self.neighbors {
            c += &format!("  neighbor {n} activate\n");
        }
        c += "  advertise-all-vni\n";
        if l3.is_some() {
            c += "  advertise ipv4 unicast\n";
        }
        c += " exit-address-family\n!\n";
        c
    }
}

/// Why FRR could not be started or asked.
#[derive(Debug, thiserror::Error)]
pub enum FrrError {
    /// FRR's daemons are not where Debian's FRR puts them.
    #[error("[frr]: FRR is not installed ({}/zebra missing): apt-get install frr, or remove [frr] and run the host's own FRR", .libexec.display())]
    NotInstalled {
        /// Where zebra was looked for.
        libexec: PathBuf,
    },
    /// The run directory or a file in it could not be written.
    #[error("cannot write {}", .path.display())]
    Write {
        /// The directory or file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A daemon could not be run.
    #[error("cannot start FRR's {daemon}")]
    Spawn {
        /// `zebra` or `bgpd`.
        daemon: &'static str,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A daemon exited with a failure instead of going to the background.
    #[error("FRR's {daemon} did not start ({status}); see {}", .dir.display())]
    Exited {
        /// `zebra` or `bgpd`.
        daemon: &'static str,
        /// How it exited.
        status: std::process::ExitStatus,
        /// The run directory, with its log.
        dir: PathBuf,
    },
    /// A daemon's vty socket did not appear in time.
    #[error("FRR's {daemon} did not get ready within {} s (no {})", .waited.as_secs(), .socket.display())]
    NotReady {
        /// `zebra` or `bgpd`.
        daemon: &'static str,
        /// How long it was waited for.
        waited: Duration,
        /// The socket waited for.
        socket: PathBuf,
    },
    /// vtysh could not be run.
    #[error("cannot run vtysh")]
    Vtysh(#[source] std::io::Error),
    /// vtysh failed (a command refused, a daemon not answering).
    #[error("vtysh: {output}")]
    VtyshFailed {
        /// What it printed.
        output: String,
    },
    /// FRR's answer to a JSON command is not JSON.
    #[error("FRR's answer is not JSON: {answer}")]
    NotJson {
        /// The answer.
        answer: String,
        /// Where it stops being JSON.
        #[source]
        source: serde_json::Error,
    },
}

/// How long a daemon's vty socket is waited for.
const READY_WAIT: Duration = Duration::from_secs(20);

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
    pub fn start(
        &self,
        frr: &Frr,
        hostname: &str,
        routed: Option<&Tenant>,
    ) -> Result<(), FrrError> {
        if self.running() {
            tracing::info!(pathspace = %self.pathspace, "FRR runs already: kept");
            return Ok(());
        }
        self.stop();
        let bin = Path::new(FRR_LIBEXEC);
        if !bin.join("zebra").exists() {
            return Err(FrrError::NotInstalled {
                libexec: bin.into(),
            });
        }
        let dir = self.run_dir();
        std::fs::create_dir_all(&dir).map_err(|source| FrrError::Write {
            path: dir.clone(),
            source,
        })?;
        let empty = dir.join("empty.conf");
        let conf = dir.join("frr.conf");
        let _ = std::fs::write(&empty, "");
        let _ = std::fs::write(dir.join("vtysh.conf"), "");
        std::fs::write(&conf, frr.config(hostname, routed)).map_err(|source| FrrError::Write {
            path: conf.clone(),
            source,
        })?;
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
                .map_err(|source| FrrError::Spawn { daemon, source })?;
            if !status.success() {
                return Err(FrrError::Exited {
                    daemon,
                    status,
                    dir,
                });
            }
            self.wait_socket(daemon)?;
        }
        let out = self.vtysh(&["-f".as_ref(), conf.as_os_str()])?;
        tracing::info!(pathspace = %self.pathspace, output = %out.trim(), "FRR started and configured");
        Ok(())
    }

    fn wait_socket(&self, daemon: &'static str) -> Result<(), FrrError> {
        let socket = self.run_dir().join(format!("{daemon}.vty"));
        let deadline = Instant::now() + READY_WAIT;
        while !socket.exists() {
            if Instant::now() > deadline {
                return Err(FrrError::NotReady {
                    daemon,
                    waited: READY_WAIT,
                    socket,
                });
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(())
    }

    /// Runs vtysh on this run's daemons.
    pub fn vtysh(&self, args: &[&std::ffi::OsStr]) -> Result<String, FrrError> {
        let out = Command::new("vtysh")
            .args(["-N", &self.pathspace, "--config_dir", FRR_RUN])
            .args(args)
            .output()
            .map_err(FrrError::Vtysh)?;
        if !out.status.success() {
            return Err(FrrError::VtyshFailed {
                output: format!(
                    "{}{}",
                    String::from_utf8_lossy(&out.stdout).trim(),
                    String::from_utf8_lossy(&out.stderr).trim()
                ),
            });
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

/// How long after a failed start FRR is tried again.
const RESTART_RETRY: Duration = Duration::from_secs(30);

/// The FRR a switch's daemon starts, and keeps running while the daemon
/// runs, as FRR's own watchfrr keeps its daemons: a zebra or bgpd that
/// is gone (crashed, killed, stopped by hand) is started again with the
/// topology's configuration. BGP then comes back with its sessions, and
/// the routes zebra took with it are installed again.
#[derive(Debug)]
pub struct FrrKeeper {
    run: FrrRun,
    frr: Frr,
    hostname: String,
    routed: Option<Tenant>,
    next_try: Instant,
}

impl FrrKeeper {
    /// The FRR `hvnet up` starts for `topo` (its `[frr]`, its routed
    /// tenant's L3 VNI), if it has one.
    pub fn of(topo: &Topology) -> Option<FrrKeeper> {
        Some(FrrKeeper {
            run: FrrRun::of(&topo.name),
            frr: topo.frr.clone()?,
            hostname: topo.name.clone(),
            routed: topo.tenants.iter().find(|t| t.l3.is_some()).cloned(),
            next_try: Instant::now(),
        })
    }

    /// Starts it (see [`FrrRun::start`]; one that runs already is kept).
    pub fn start(&self) -> Result<(), FrrError> {
        self.run
            .start(&self.frr, &self.hostname, self.routed.as_ref())
    }

    /// FRR started again if it is not running (at most every
    /// 30 s while starting it fails); true if it was.
    pub fn look(&mut self, now: Instant) -> bool {
        if now < self.next_try || self.run.running() {
            return false;
        }
        tracing::warn!(pathspace = %self.run.pathspace, "FRR's zebra or bgpd is gone: starting FRR again");
        match self.start() {
            Ok(()) => true,
            Err(e) => {
                tracing::error!(
                    pathspace = %self.run.pathspace, error = %crate::error::chain(&e),
                    "FRR could not be started again; trying again in {} s", RESTART_RETRY.as_secs()
                );
                self.next_try = now + RESTART_RETRY;
                false
            }
        }
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
pub fn bgp_summary(run: Option<&FrrRun>) -> Result<Value, FrrError> {
    let args = ["-c", "show bgp l2vpn evpn summary json"];
    let text = match run {
        Some(r) => r.vtysh(&args.map(std::ffi::OsStr::new))?,
        None => {
            let out = Command::new("vtysh")
                .args(args)
                .output()
                .map_err(FrrError::Vtysh)?;
            String::from_utf8_lossy(&out.stdout).into_owned()
        }
    };
    serde_json::from_str(&text).map_err(|source| FrrError::NotJson {
        answer: text.trim().to_string(),
        source,
    })
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
        let c = frr.config("h1", None);
        assert!(!c.contains("advertise ipv4 unicast"));
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
        // A tenant routed across hosts: its L3 VNI and its subnets.
        let t = Tenant {
            name: "blue".into(),
            mac: hvnet_datapath::route::DEFAULT_GATEWAY_MAC,
            gateways: vec![hvnet_datapath::route::Gateway {
                vlan: 10,
                ipv4: ("198.19.80.254".parse().unwrap(), 24),
                ipv6: None,
            }],
            routes: vec![],
            l3: Some(hvnet_datapath::route::L3Vni {
                vni: 5999,
                vlan: 999,
            }),
        };
        let c = frr.config("h1", Some(&t));
        for line in [
            "vni 5999",
            "no zebra nexthop kernel enable",
            "  network 198.19.80.0/24",
            "  advertise ipv4 unicast",
        ] {
            assert!(c.lines().any(|l| l == line), "{line:?} in\n{c}");
        }
    }

    #[test]
    fn an_error_names_what_failed_and_keeps_why_as_its_source() {
        let e = FrrError::NotReady {
            daemon: "bgpd",
            waited: READY_WAIT,
            socket: "/var/run/frr/hvnet-t/bgpd.vty".into(),
        };
        assert_eq!(
            e.to_string(),
            "FRR's bgpd did not get ready within 20 s (no /var/run/frr/hvnet-t/bgpd.vty)"
        );
        let e = FrrError::Spawn {
            daemon: "zebra",
            source: std::io::Error::from(std::io::ErrorKind::NotFound),
        };
        assert_eq!(e.to_string(), "cannot start FRR's zebra");
        assert_eq!(
            crate::error::chain(&e),
            "cannot start FRR's zebra: entity not found"
        );
    }
}
