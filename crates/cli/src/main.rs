//! `hvnet`: the command-line front of the hvnet virtual switch.

#![forbid(unsafe_code)]

mod capture;
mod pcap_cmd;

use clap::{Parser, Subcommand};

/// hvnet — a userspace virtual switch with a hypervisor's network offloads
/// (LRO, TSO, checksum offload, RSS, VXLAN), and the tools to see what each
/// is worth.
#[derive(Debug, Parser)]
#[command(name = "hvnet", version, about, long_about = None, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Run the offload engines on capture files (pcap in, pcap out).
    #[command(subcommand)]
    Pcap(pcap_cmd::PcapCmd),
}

fn main() {
    let cli = Cli::parse();
    let code = match cli.cmd {
        Cmd::Pcap(p) => match pcap_cmd::run(p) {
            Ok(code) => code,
            Err(e) => {
                eprintln!("hvnet: {e}");
                1
            }
        },
    };
    std::process::exit(code);
}
