//! `hvnet`: the command-line front of the hvnet virtual switch.

#![forbid(unsafe_code)]

mod acl_cmd;
mod capture;
mod capture_cmd;
mod diagnose_cmd;
#[cfg(test)]
mod docs_tests;
mod pcap_cmd;
mod switch_cmd;
mod top;
mod trace_cmd;

use clap::{CommandFactory, Parser, Subcommand};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;

/// The version `--version` prints; a measurement build says what it is.
const VERSION: &str = if cfg!(hvnet_bare_arcs) {
    concat!(
        env!("CARGO_PKG_VERSION"),
        " (bare arcs: no feature stages, for measurement only)"
    )
} else {
    env!("CARGO_PKG_VERSION")
};

/// hvnet — a userspace virtual switch with a hypervisor's network offloads
/// (LRO, TSO, checksum offload, RSS, VXLAN), and the tools to see what each
/// is worth.
///
/// Start VMs (network namespaces behind TAP devices) with `hvnet up
/// TOPOLOGY.toml`, look at them with `hvnet ports`, `hvnet stats`, `hvnet
/// port` and `hvnet fdb`, watch them live with `hvnet top`, and remove them
/// with `hvnet down`. Run a topology as a service with `hvnet daemon FILE`
/// (`hvnet@.service`); `--metrics` serves Prometheus metrics. The live
/// commands need root.
#[derive(Debug, Parser)]
#[command(name = "hvnet", version = VERSION, about, long_about, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Create the VMs of a topology file and run the switch; returns when
    /// traffic can flow. On a topology that runs, apply the file instead:
    /// its new VMs and uplinks added, those it no longer has removed,
    /// changed port settings applied, the rest untouched.
    Up {
        /// The topology (TOML; see examples/topologies/).
        file: PathBuf,
        /// Print the result as JSON.
        #[arg(long)]
        json: bool,
        /// Serve Prometheus metrics at http://ADDR/metrics (`--metrics` or
        /// `--metrics=ADDR`; default
        /// 127.0.0.1:9100; loopback unless another address is given).
        #[arg(long, value_name = "ADDR", num_args = 0..=1, require_equals = true, default_missing_value = hvnet_control::metrics::DEFAULT_ADDR)]
        metrics: Option<std::net::SocketAddr>,
        /// Once every port is open, give up root: run as nobody, without
        /// capabilities (a namespace VM's MTU then no longer changes at run
        /// time; uml guests are refused). See docs/security.md.
        #[arg(long)]
        drop_privileges: bool,
    },
    /// Stop the switch and remove everything `up` created (also after a
    /// crash).
    Down {
        /// Topology name (default: the only one that is up; `-t NAME` says
        /// the same).
        name: Option<String>,
        #[command(flatten)]
        target: switch_cmd::Target,
    },
    /// List ports: number, type, switch, MAC, client (as `net-stats -l`).
    Ports(#[command(flatten)] switch_cmd::Target),
    /// Show a node of the statistics tree, as vsish does:
    /// /ports/PORT/{client_stats,tx_summary,rx_summary,accounting,rxqueues/N/status};
    /// /uplinks/UPLINK/ the same, with txqueues/N/status, filters (NetQueue
    /// and RSS), team (a team's) and vxlan (a tunnel endpoint's).
    Stats {
        /// Tree path (default: the root, which lists its children).
        #[arg(default_value = "/")]
        path: String,
        #[command(flatten)]
        target: switch_cmd::Target,
    },
    /// Show a port's settings (ring sizes, LRO, TSO, checksum offload, MTU),
    /// or change them at run time with `set`.
    Port {
        #[command(flatten)]
        args: switch_cmd::PortArgs,
        #[command(flatten)]
        target: switch_cmd::Target,
    },
    /// Show the learned MAC addresses.
    Fdb(#[command(flatten)] switch_cmd::Target),
    /// Show multicast snooping's table, as `bridge mdb show`: each group's
    /// member ports per VLAN with the seconds until they expire, the
    /// router ports (uplinks always; ports a query was heard on), the
    /// queriers heard, and the `[switch] multicast_*` settings.
    Mdb(#[command(flatten)] switch_cmd::Target),
    /// Show flow export (`[ipfix]`): its collectors, sampling and
    /// timeouts, the flows cached, and the frames metered and records sent.
    Ipfix(#[command(flatten)] switch_cmd::Target),
    /// Show the port mirrors (`[[mirror]]`: SPAN to a port, RSPAN to a
    /// VLAN, ERSPAN over GRE): what each selects, where its copies go, the
    /// copies sent and lost.
    Mirror(#[command(flatten)] switch_cmd::Target),
    /// Show each NIC team: its members and their state (active, standby,
    /// down; with LACP distributing, collecting, not in aggregate), the
    /// LACP partner's system and key, the ports each member carries, its
    /// failovers and the frames it dropped by reason.
    Team(#[command(flatten)] switch_cmd::Target),
    /// Show the datapath's workers (one per CPU of `[switch] cpus`, each
    /// pinned): the receive queues each owns, each queue's share of its
    /// worker's time and of a CPU over the last second, the worker's busy
    /// %, its sleeps and wake-ups (as `ovs-appctl dpif-netdev/pmd-rxq-show`).
    Workers(#[command(flatten)] switch_cmd::Target),
    /// Show BGP EVPN at each EVPN uplink: the flood list and remote MACs
    /// with where each came from (evpn, learned, static) and its VTEP, the
    /// remote IPs whose ARP is answered here, the counters, and BGP's
    /// sessions as FRR reports them.
    Evpn(#[command(flatten)] switch_cmd::Target),
    /// Show routing at the edge: each tenant's gateways (per VLAN, the
    /// anycast address the switch answers for), its routes (connected and
    /// static, as `ip route show vrf`) and its neighbours (as `ip neigh`,
    /// with where each came from), and what the gateways did.
    Route {
        /// Only this tenant.
        tenant: Option<String>,
        #[command(flatten)]
        target: switch_cmd::Target,
    },
    /// Run a command inside a VM of any kind and pass its output and exit
    /// status through: `hvnet exec VM -- ip -br addr`.
    Exec {
        /// The VM.
        vm: String,
        /// Hand this process's standard input to the command (a real
        /// guest's command otherwise reads nothing).
        #[arg(short = 'i', long = "stdin")]
        stdin: bool,
        /// The command and its arguments.
        #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true)]
        command: Vec<String>,
        #[command(flatten)]
        target: switch_cmd::Target,
    },
    /// Start a real guest again (killed first if it runs); it reconnects to
    /// its port.
    Restart {
        /// The VM (kind = "uml" or "qemu").
        vm: String,
        #[command(flatten)]
        target: switch_cmd::Target,
    },
    /// End a real guest's process as a crash would: its port goes down,
    /// the switch goes on (`hvnet restart VM` brings it back).
    Kill {
        /// The VM (kind = "uml" or "qemu").
        vm: String,
        #[command(flatten)]
        target: switch_cmd::Target,
    },
    /// Show security groups: each port's rules in the order they are
    /// matched with their hit counts, what its stages did and its
    /// connection table; `--conntrack` lists the tracked connections as
    /// `conntrack -L`; `--reapply` checks established ones against the
    /// rules now.
    Acl {
        #[command(flatten)]
        args: acl_cmd::AclArgs,
        #[command(flatten)]
        target: switch_cmd::Target,
    },
    /// Capture a port's frames live at a point along their path, as ESXi's
    /// pktcap-uw with tcpdump's habits: as the port handed them over
    /// (`in`), as the offload stage made them (`offload`), as written to
    /// the port (`out`), or where they were dropped (`drop`, with the
    /// reason). Any port kind: a namespace VM, a real guest's vhost-user
    /// port (which no kernel device shows), an uplink, a tunnel endpoint.
    ///
    /// `hvnet capture web0 icmp` prints a line a frame; `-w FILE` writes
    /// pcapng (`tshark -r FILE -T fields -e frame.comment` shows each
    /// frame's point, queue and drop reason); `-w - | tcpdump -r -` or
    /// `| wireshark -k -i -` watches live. Capturing nothing costs the
    /// switch nothing; a capture that cannot keep up loses copies
    /// (counted at the end), never frames.
    Capture(capture_cmd::CaptureArgs),
    /// Trace a frame's path through the switch: a frame described in
    /// words (FLOW), or the next real frames a port sends that match a
    /// filter (`--live`). Every stage on the path writes one line — the
    /// VLAN it was put in, the guard or security-group rule that passed
    /// or dropped it and why, the FDB hit or the flood, the mirror copies,
    /// the queue and tag at each port it leaves by — and its verdict,
    /// delivered (where) or dropped (the named reason).
    ///
    /// `hvnet trace web0 dst=db0 proto=tcp dport=5432 flags=S` builds that
    /// SYN as web0's guest would send it and runs every decision on it,
    /// delivering it nowhere (`--inject` sends it on). FLOW words:
    /// `src=` and `dst=` (an IP address, a MAC address or a VM's name;
    /// `src` defaults to the port's VM), `smac=`, `dmac=`, `vlan=` (a tag
    /// in the frame), `proto=` or a bare `icmp`, `tcp`, `udp`, `arp`
    /// (default icmp, an echo request), `sport=`, `dport=`, `flags=` (TCP,
    /// as tcpdump writes them: S, SA, F., R), `size=` (the IP packet's
    /// bytes, as an MTU counts them), `ttl=`.
    ///
    /// `hvnet trace web0 --live icmp` waits for the next ICMP frame from
    /// web0 (`-c 5` for five, `--timeout` seconds). While it waits, the
    /// port's frames are matched against the filter; those not traced pay
    /// one bit test per stage. `--json` for tools.
    Trace(trace_cmd::TraceArgs),
    /// Find why a VM is slow or cannot reach another, as an expert
    /// would: over a short window (`-w`, default 3 s) the switch reads the
    /// VM's port counters and their rates, its guest's CPU (how long its
    /// threads wait to run, %RDY, and a CPU quota that holds them) and
    /// the frames it sends, and names each cause it finds — a receive
    /// ring that fills, a policer or `cpu_limit` holding it, a security
    /// group, guard or VLAN that drops its frames, an MTU larger than its
    /// peer's, its link down, a team degraded, a neighbour nothing
    /// answers for, LRO or TSO off under load, TCP segments sent again —
    /// each with the counters that show it, the setting behind it and the
    /// command that changes it. A healthy VM gets "no finding" with the
    /// figures that say so. `--json` for tools.
    Diagnose(diagnose_cmd::DiagnoseArgs),
    /// Add or remove one VM while the switch runs, as `ovs-vsctl
    /// add-port`/`del-port` do: no other VM is touched.
    #[command(subcommand)]
    Vm(switch_cmd::VmCmd),
    /// Run the offload engines on capture files (pcap in, pcap out).
    #[command(subcommand)]
    Pcap(pcap_cmd::PcapCmd),
    /// Reproduce the published studies: `hvnet lab list`, `hvnet lab run
    /// NAME...|all [--quick] [--out DIR]`, `hvnet lab report [--out DIR]`.
    #[command(disable_help_flag = true)]
    Lab {
        /// Arguments for the lab (see `hvnet lab --help`).
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// A live view of the ports and the VMs' CPU, as esxtop's.
    ///
    /// Per port: Mbit/s and frames/s each way, drops by reason, receive
    /// ring fill, LRO/TSO activity, and the VM's threads' %USED, %RUN and
    /// %RDY. Keys re-sort (n name, t/r Mbit/s sent/received, d drops, u
    /// %USED, y %RDY; q quits). `-b` prints CSV (or `--json` lines) every
    /// `-d` seconds for `-n` samples, for scripts.
    Top(top::TopArgs),
    /// Print shell completions for hvnet (bash, zsh, fish, elvish,
    /// powershell): `hvnet completions bash >
    /// /usr/share/bash-completion/completions/hvnet`.
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
    /// Write the manual pages (hvnet.1 and one per command, hvnet-up.1 …)
    /// into DIR, generated from this command line's own definition.
    Man {
        /// Where to write them (e.g. /usr/local/share/man/man1).
        dir: PathBuf,
    },
    /// Run the switch of a topology in the foreground (as a service).
    ///
    /// What `up` starts in the background, and what a service manager
    /// runs (see packaging/systemd/hvnet@.service). Creates the topology, or re-attaches to the VMs
    /// a stopped daemon left; SIGTERM or SIGINT stop it and leave the VMs
    /// with their NICs. Logs to stderr; `HVNET_LOG` filters (e.g. `debug`).
    Daemon {
        /// The topology file.
        file: PathBuf,
        /// The caller holds the topology's lock (`up` does).
        #[arg(long, hide = true)]
        locked: bool,
        /// Serve Prometheus metrics at http://ADDR/metrics (`--metrics` or
        /// `--metrics=ADDR`; default
        /// 127.0.0.1:9100; loopback unless another address is given).
        #[arg(long, value_name = "ADDR", num_args = 0..=1, require_equals = true, default_missing_value = hvnet_control::metrics::DEFAULT_ADDR)]
        metrics: Option<std::net::SocketAddr>,
        /// Once every port is open, give up root: run as nobody, without
        /// capabilities (a namespace VM's MTU then no longer changes at run
        /// time; uml guests are refused). See docs/security.md.
        #[arg(long)]
        drop_privileges: bool,
    },
}

/// Writes `hvnet.1` and `hvnet-COMMAND.1` for each visible command.
fn man_pages(dir: &std::path::Path) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let cmd = Cli::command();
    let write = |name: &str, c: clap::Command| -> Result<(), String> {
        let path = dir.join(format!("{name}.1"));
        let mut out = Vec::new();
        clap_mangen::Man::new(c)
            .title(name.to_uppercase())
            .render(&mut out)
            .map_err(|e| e.to_string())?;
        std::fs::write(&path, out).map_err(|e| format!("{}: {e}", path.display()))
    };
    write("hvnet", cmd.clone())?;
    let mut n = 1;
    for sub in cmd.get_subcommands().filter(|c| !c.is_hide_set()) {
        let name = format!("hvnet-{}", sub.get_name());
        let usage = format!("hvnet {}", sub.get_name());
        write(
            &name,
            sub.clone()
                .bin_name(usage.clone())
                .display_name(name.clone()),
        )?;
        n += 1;
    }
    println!("{n} manual pages written to {}", dir.display());
    Ok(())
}

/// Runs the lab (Python, in the repository's `lab/` directory) with this
/// binary as the hvnet under test.
fn lab(args: Vec<String>) -> Result<(), String> {
    let exe = std::env::current_exe().map_err(|e| format!("cannot find my own binary: {e}"))?;
    let dir = std::env::var_os("HVNET_LAB_DIR")
        .map(PathBuf::from)
        .or_else(|| exe.ancestors().map(|a| a.join("lab")).find(|d| d.join("hvnet_lab/__main__.py").exists()))
        .ok_or("the lab is not next to this binary; run it from a clone of the repository or set HVNET_LAB_DIR")?;
    // The lab replaces this process, so that Ctrl-C and signals reach it
    // alone and it decides, after cleaning up, how the command ends.
    let e = std::process::Command::new("python3")
        .args(["-m", "hvnet_lab"])
        .args(&args)
        .env("PYTHONPATH", &dir)
        .env("HVNET_BIN", &exe)
        .exec();
    Err(format!("cannot run python3: {e}"))
}

/// The daemon's log: to stderr (the state directory's `daemon.log` when
/// `up` started it, the journal under systemd), `info` and above unless
/// `HVNET_LOG` says otherwise (`warn`, `debug`, `hvnet_control=debug`, …).
fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("HVNET_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .with_target(false)
        .init();
}

fn main() {
    let cli = Cli::parse();
    // Not in the daemon: a client that goes away must not end the switch.
    if !matches!(cli.cmd, Cmd::Daemon { .. }) {
        hvnet_sys::default_sigpipe();
    }
    let result = match cli.cmd {
        Cmd::Pcap(p) => match pcap_cmd::run(p) {
            Ok(code) => std::process::exit(code),
            Err(e) => Err(e.to_string()),
        },
        Cmd::Up {
            file,
            json,
            metrics,
            drop_privileges,
        } => switch_cmd::up(file, json, metrics, drop_privileges),
        Cmd::Down { name, target } => switch_cmd::down(name, &target),
        Cmd::Ports(t) => switch_cmd::ports(&t),
        Cmd::Stats { path, target } => switch_cmd::stats(&target, path),
        Cmd::Port { args, target } => switch_cmd::port(&target, args),
        Cmd::Fdb(t) => switch_cmd::fdb(&t),
        Cmd::Mdb(t) => switch_cmd::mdb(&t),
        Cmd::Mirror(t) => switch_cmd::mirror(&t),
        Cmd::Ipfix(t) => switch_cmd::ipfix(&t),
        Cmd::Team(t) => switch_cmd::team(&t),
        Cmd::Workers(t) => switch_cmd::workers(&t),
        Cmd::Vm(c) => switch_cmd::vm(c),
        Cmd::Evpn(t) => switch_cmd::evpn(&t),
        Cmd::Route { tenant, target } => switch_cmd::route(&target, tenant),
        Cmd::Acl { args, target } => acl_cmd::acl(&target, args),
        Cmd::Top(a) => top::top(a),
        Cmd::Capture(a) => capture_cmd::capture(a),
        Cmd::Trace(a) => trace_cmd::trace(a),
        Cmd::Diagnose(a) => diagnose_cmd::diagnose(a),
        Cmd::Exec {
            vm,
            stdin,
            command,
            target,
        } => match switch_cmd::exec(&target, &vm, stdin, &command) {
            Ok(code) => std::process::exit(code),
            Err(e) => Err(e),
        },
        Cmd::Restart { vm, target } => switch_cmd::guest_ctl(&target, vm, true),
        Cmd::Kill { vm, target } => switch_cmd::guest_ctl(&target, vm, false),
        Cmd::Daemon {
            file,
            locked,
            metrics,
            drop_privileges,
        } => {
            init_logging();
            hvnet_control::topology::load(&file)
                .map_err(|e| e.to_string())
                .and_then(|t| switch_cmd::enter_netns(&t))
                .and_then(|()| {
                    hvnet_control::daemon::daemon(&file, locked, metrics, drop_privileges)
                        .map_err(|e| e.to_string())
                })
        }
        Cmd::Lab { args } => lab(args),
        Cmd::Completions { shell } => {
            clap_complete::generate(shell, &mut Cli::command(), "hvnet", &mut std::io::stdout());
            Ok(())
        }
        Cmd::Man { dir } => man_pages(&dir),
    };
    if let Err(e) = result {
        eprintln!("hvnet: {e}");
        std::process::exit(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// tcpdump's habit: options after the filter expression are options,
    /// not words of the filter.
    #[test]
    fn capture_takes_options_after_its_expression() {
        let cli = Cli::try_parse_from([
            "hvnet", "capture", "a", "tcp", "port", "5201", "-w", "a.pcapng", "-c", "3",
        ])
        .unwrap();
        let Cmd::Capture(a) = cli.cmd else {
            panic!("not a capture: {cli:?}")
        };
        assert_eq!(a.filter, ["tcp", "port", "5201"]);
        assert_eq!(a.write.as_deref(), Some(std::path::Path::new("a.pcapng")));
        assert_eq!(a.count, Some(3));
    }
}
