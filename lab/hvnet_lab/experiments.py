"""The lab's scenarios, as data: each names the study it reproduces (or
says it is a measurement), the workload, the runner and the kinds of VM
it can run with; a study is named by its short title in
docs/references.md. Each runner takes (tmp, quick, reps, log[, vms]) and
returns its figures and raw runs. The runners live in one module per
study, named for what it studies (`lro_gain`: LRO for VMXNET3 on Windows
VMs; `queues` and `uplink_offload`: NIC Technology in vSphere;
`cpu_and_rings`: CPU Scheduling and VMXNET3 Ring Exhaustion; `lro_rate`:
LRO in a Virtualized System; `jumbo_frames`: Jumbo Frames Inside Virtual
Machines) and per group of measurements (`migration`,
`fabric_compare`, `wire_compare`, `guest_compare`, `vhost_compare`,
`neighbours`, `evpn_compare`); what they share is in `runners` (iperf3 with its cost,
interleaving), `fleet` (VMs behind an uplink), `fabrics` and
`wire_fabrics` (what joins the VMs), `figures` (the figure records) and
`verdict` (the rule).

What is emulated, said beside every figure: a "VM" is a network namespace
behind a TAP; a "native" sender is a VM whose vNIC has TSO off, so
MTU-sized frames reach the switch as from a physical NIC; a CPU limit is a
cgroup-v1 quota on the VM's delivery thread ("vCPU") and its iperf3
server, not a hypervisor's scheduler.
"""

import math

from . import multicast

from . import (cpu_and_rings, evpn_compare, fabric_compare, guest_compare, jumbo_frames, lro_gain, lro_rate, migration,
               libvirt_churn, migration_libvirt, neighbours, poll_budget, port_scale, queues, uplink_offload, vhost_compare, wire_compare)
from . import rates
from . import uplink_shares
from . import teams
from . import host_day
from . import restart_gap
from . import acl_cost
from . import capture_cost
from . import ipfix_cost
from . import routing
from . import irb_compare
from . import containers
from . import feature_cost
from . import planted_faults

EXPERIMENTS = [
    {"name": "lro-native", "reproduces": "LRO for VMXNET3 on Windows VMs, Figures 1-3", "run": lro_gain.lro_native,
     "workload": "native sender (TSO off at its port, MTU 1500) to a VM; LRO off vs on; 256 B / 16 KiB / 64 KiB writes, 8/64/256 KiB socket buffers"},
    {"name": "lro-local", "reproduces": "LRO for VMXNET3 on Windows VMs, Figures 4-6",
     "run": lro_gain.lro_local, "vms": ("netns", "uml", "qemu"),
     "workload": "VM to VM; receiver LRO on vs off (hvnet segments); bridge and OVS as references"},
    {"name": "lro-native-wire", "reproduces": "LRO for VMXNET3 on Windows VMs, Figures 1-3",
     "run": lro_gain.lro_native_wire,
     "workload": "as lro-native with a real external host on an uplink's wire (the uplink's own LRO off) as the sender"},
    {"name": "lro-rate", "reproduces": "LRO in a Virtualized System", "run": lro_rate.lro_rate,
     "workload": "as lro-native with 64 KiB writes; delayed ACKs on and off (quickack) in the receiving VM"},
    {"name": "lro-rate-wire", "reproduces": "LRO in a Virtualized System", "run": lro_rate.lro_rate_wire,
     "workload": "external host on an uplink's wire to a VM, 64 KiB writes; no LRO, LRO at the physical interface "
                 "(the uplink device's GRO), LRO at the virtual interface (hvnet's, into the VM)"},
    {"name": "cpu-limit", "reproduces": "CPU Scheduling and VMXNET3 Ring Exhaustion, part 1",
     "run": cpu_and_rings.cpu_limit, "vms": ("netns", "uml", "qemu"),
     "workload": "4 streams into a VM whose vCPU and iperf3 server are held to 15-100% of a core, and unlimited"},
    {"name": "ring-exhaustion", "reproduces": "CPU Scheduling and VMXNET3 Ring Exhaustion, part 2",
     "run": cpu_and_rings.ring_exhaustion, "vms": ("netns", "qemu"),
     "workload": "12 streams into a VM held to 25% of a core; rings 256/512/4096 (a QEMU guest's receive virtqueue: "
                 "256/512/1024); LRO on and off"},
    {"name": "jumbo", "reproduces": "Jumbo Frames Inside Virtual Machines",
     "run": jumbo_frames.jumbo, "vms": ("netns", "uml", "qemu"),
     "workload": "VM to VM at MTU 1500 vs 9000, 4 streams; bridge and OVS as references"},
    {"name": "multiqueue", "reproduces": "NIC Technology in vSphere, Figure 3; CPU Scheduling and VMXNET3 Ring Exhaustion, FAQ",
     "run": queues.multiqueue, "vms": ("netns", "uml", "qemu"),
     "workload": "one VM with 1 vs 4 receive queues, 8 streams, RSS spreading flows"},
    {"name": "uplink-rss", "reproduces": "NIC Technology in vSphere, Figure 3", "run": queues.uplink_rss,
     "workload": "external host to one VM through an uplink, 8 streams, small (256 B, TCP_NODELAY) and large writes; "
                 "RSS off (1 queue at the uplink and the VM) vs on (4 and 4)"},
    {"name": "vxlan-rss", "reproduces": "NIC Technology in vSphere, Figure 4", "run": queues.vxlan_rss,
     "workload": "external host's vxlan device to 16 VMs (8 with --quick) behind hvnet's tunnel endpoint, a stream each; the uplink on "
                 "1 queue vs 4 spread by the inner flow's Toeplitz hash"},
    {"name": "splitrx", "reproduces": "NIC Technology in vSphere, Figure 5", "run": queues.splitrx,
     "workload": "VXLAN to 8 VMs (4 with --quick) on one uplink queue, a stream each; delivery by the queue's thread vs each VM's own "
                 "thread (SplitRxMode); ping latency idle and under load"},
    {"name": "tso-offload", "reproduces": "NIC Technology in vSphere, Figure 6", "run": uplink_offload.tso_offload,
     "workload": "8 VMs (4 with --quick) send a stream each to the external host; the uplink's TSO hardware vs software (and VXLAN, "
                 "software on this kernel); the switch's CPU per Gbit/s"},
    {"name": "rx-csum", "reproduces": "NIC Technology in vSphere, Figure 7", "run": uplink_offload.rx_csum,
     "workload": "VXLAN to 8 VMs (4 with --quick), a 125 Mbit/s stream each; the uplink's receive checksums from the device vs "
                 "checked by hvnet, the two switches at the same moment; the switch's CPU per Gbit received"},
    {"name": "uplink-lro", "reproduces": "NIC Technology in vSphere, Figure 8", "run": uplink_offload.uplink_lro,
     "workload": "external host on the wire of an uplink to a VM, 64 KiB writes; the uplink's LRO hardware (device GRO) "
                 "vs software (hvnet's GRO before switching)"},
    {"name": "netqueue", "reproduces": "NIC Technology in vSphere, Figure 9", "run": queues.netqueue_dynamic,
     "workload": "4 VMs behind an uplink with 5 queues, a stream to each from an external host at 100 Mbit/s and "
                 "unlimited; static vs Dynamic NetQueue"},
    {"name": "port-batch", "reproduces": "NIC Technology in vSphere, Figure 10", "run": queues.port_batch,
     "workload": "VXLAN to 4 VMs (2 with --quick), small (64 B, TCP_NODELAY) and large writes; the endpoint's queue read 32 frames per "
                 "system call vs one; frames per CPU-second of the switch"},
    {"name": "fabrics", "reproduces": "measurement", "run": fabric_compare.fabrics,
     "workload": "VM to VM through hvnet (and with io_uring TAP writes), the Linux bridge and Open vSwitch's userspace "
                 "datapath, all up at once, interleaved: 1 and 4 streams, 256 B and 64 KiB writes at MTU 1500, 64 KiB at "
                 "9000"},
    {"name": "routing", "reproduces": "measurement", "run": routing.routing,
     "workload": "VM to VM between two subnets routed at hvnet's gateway, beside bridged in one subnet through hvnet, "
                 "the Linux bridge, and Linux routing between two bridges; 1 and 4 streams, 64 KiB writes, "
                 "interleaved"},
    {"name": "irb", "reproduces": "measurement", "run": irb_compare.irb,
     "workload": "two hvnet hosts and two Linux VTEPs with FRR's symmetric IRB: a VM-to-VM stream routed across two "
                 "hosts (1 and 4 streams), hvnet beside Linux, interleaved; how soon a new VM's host route is "
                 "installed at the other host"},
    {"name": "per-frame", "reproduces": "measurement", "run": fabric_compare.per_frame,
     "workload": "VM to VM, wire-sized frames (sender TSO off, receiver LRO off): CPU time, cycles, instructions, system "
                 "calls and context switches of the hvnet daemon per frame (perf stat)"},
    {"name": "hostile-neighbour", "reproduces": "measurement", "run": neighbours.hostile_neighbour,
     "workload": "VM c to VM b beside an idle VM a, one flooding b with 1-byte TCP segments and random source MACs, "
                 "and the same flood with a's port policed at 10 Mbit/s (tx_rate), interleaved; the daemon's memory"},
    {"name": "uplinks", "reproduces": "measurement", "run": wire_compare.uplinks,
     "workload": "external host to a VM and back through an uplink: hvnet's uplink vs a Linux bridge on the wire, hvnet's "
                 "VXLAN endpoint vs Linux's vxlan device and Open vSwitch's; 1 and 4 streams, host to VM (the host's NIC "
                 "sending wire-sized frames, or left at its default offloads) and VM to host"},
    {"name": "tunnel", "reproduces": "measurement", "run": wire_compare.tunnel,
     "workload": "VM to external host and back over VXLAN, the host's NIC at its default offloads: hvnet's endpoint "
                 "handing the kernel tunnelled GSO frames and segmenting them itself, beside Linux's bridge and vxlan "
                 "device with the wire's near end at its defaults and without VXLAN segmentation offload, and both over an IPv6 "
                 "underlay; 1 and 4 streams"},
    {"name": "vhost-frames", "reproduces": "measurement", "run": vhost_compare.vhost_frames,
     "workload": "DPDK testpmd front ends (txonly to rxonly) on vhost-user ports of hvnet and of Open vSwitch with DPDK, "
                 "64 and 1500 B frames: CPU per frame and frames per second"},
    {"name": "feature-cost", "reproduces": "measurement", "run": feature_cost.feature_cost,
     "workload": "vhost-frames' testpmd front ends at 64 B: the daemon's CPU per frame with every feature off, beside a "
                 "build without the feature stages, and with each feature on alone (snooping, guards, policer, "
                 "shaper, mirror, security group, IPFIX, capture, a trace waiting)"},
    {"name": "diagnose-faults", "reproduces": "measurement", "run": planted_faults.diagnose_faults,
     "workload": "sixteen faults planted as an operator would make them (a ring of 64 dropping and one holding "
                 "its senders, segments lost past the switch, lro=off, tx_rate=10mbit, "
                 "cpu_limit=5, an MTU of 9000 on one side, a security group without the service's port, an address "
                 "not the VM's, a trunk without the VLAN, a neighbour nobody has, a guest held to 10 % of a core, "
                 "its guest gone, a team member down, a tunnel without the remote's peer), each with the traffic "
                 "that shows it: is it the first finding of hvnet diagnose, with its setting; and a healthy VM under "
                 "iperf3 with 4 streams, ten times: no finding"},
    {"name": "guests", "reproduces": "measurement", "run": guest_compare.guests,
     "workload": "QEMU guest to QEMU guest, one stream, through hvnet's vhost-user ports, QEMU's own virtio-net on TAPs in "
                 "a Linux bridge, and DPDK testpmd's vhost back end; fresh guests every run"},
    {"name": "guests-vlan", "reproduces": "measurement", "run": guest_compare.guests_vlan,
     "workload": "QEMU guest to QEMU guest, one stream, through hvnet's trunk ports (VLAN 10, native VLAN 1): over "
                 "802.1Q sub-interfaces the guests' kernels make vs untagged; fresh guests every run"},
    {"name": "frame-rate", "reproduces": "measurement", "run": guest_compare.frame_rate,
     "workload": "64-byte frames from a DPDK testpmd front end (txonly) to another (rxonly), through hvnet or through "
                 "testpmd's own vhost back end"},
    {"name": "migration-loss", "reproduces": "measurement", "run": migration.migration_loss,
     "workload": "a QEMU guest live-migrated to another host under pings every 10 ms from a namespace VM; hvnet's "
                 "vhost-user ports on two switches vs QEMU's own virtio-net on TAPs in two Linux bridges"},
    {"name": "migration-libvirt", "reproduces": "measurement", "run": migration_libvirt.libvirt_migration_loss,
     "workload": "a QEMU guest started and live-migrated by libvirt (virsh migrate --live, to a second libvirtd in a "
                 "mount namespace of its own) under pings every 10 ms from a namespace VM; hvnet's vhost-user ports "
                 "made and removed as libvirt binds and drops the sockets vs QEMU's own virtio-net on TAPs in two "
                 "Linux bridges"},
    {"name": "libvirt-churn", "reproduces": "measurement", "run": libvirt_churn.libvirt_churn,
     "workload": "20 QEMU guests (4 with --quick) started at once by libvirt on ports hvnet makes as libvirt binds their "
                 "sockets, each pinging a namespace VM, then destroyed; 5 rounds (2 with --quick): time from eth0 up to "
                 "the first answer, and what is left after each round"},
    {"name": "evpn-install", "reproduces": "measurement", "run": evpn_compare.evpn_install,
     "workload": "a BGP EVPN fabric of two hvnet hosts and two Linux VTEPs with FRR: a VM connected on an hvnet host, "
                 "and a VM appearing on a Linux VTEP, timed from the source's FDB to the others' (kernel FDB events), "
                 "and the same for their removal; 20 samples each"},
    {"name": "evpn-scale", "reproduces": "measurement", "run": evpn_compare.evpn_scale,
     "workload": "1,000 MAC/IP routes behind 100 VTEPs from a GoBGP speaker to an hvnet host and a Linux VTEP with FRR "
                 "at once: time to install and to remove, the daemon's memory; VM-to-VM throughput across two hvnet "
                 "hosts with them installed vs two with static remotes"},
    {"name": "evpn-segments", "reproduces": "measurement", "run": evpn_compare.evpn_segments,
     "workload": "1,000 MAC/IP routes behind 100 VTEPs in 100 VNIs (one VTEP per VNI) from a GoBGP speaker to an hvnet "
                 "host whose uplink carries the 100 segments and a Linux VTEP with a bridge and a vxlan device per "
                 "VNI, at once: time to install, and the memory each host's processes grow by"},
    {"name": "port-scale", "reproduces": "measurement", "run": port_scale.port_scale,
     "workload": "64, 256 and 1,000 namespace VMs (64 and 256 with --quick) of one queue on one switch, nothing "
                 "sent: the daemon's threads, idle CPU, memory per port, hvnet up and down; then 500 broadcasts from "
                 "one VM (CPU per copy), and the same broadcasts through the Linux bridge with as many namespaces; "
                 "with HVNET_LAB_BASELINE another build beside"},
    {"name": "container-start", "reproduces": "measurement", "run": containers.container_start,
     "workload": "podman (CNI backend) runs 20 containers (5 with --quick) and containerd's CRI (crictl runp) 20 pod "
                 "sandboxes one after another on a network of hvnet-cni on a running switch and of the reference "
                 "bridge plugin, host-local addresses: start to the first answered ping to a peer, removal, and what "
                 "is left after"},
    {"name": "container-churn", "reproduces": "measurement", "run": containers.container_churn,
     "workload": "podman runs and removes 200 containers (50 with --quick), and crictl 100 pods (25), one after "
                 "another on an hvnet-cni network while two others carry a SHA-256-checked 32 MiB file: the file "
                 "intact, and ports, leases, the daemon's descriptors and threads left after"},
    {"name": "port-churn", "reproduces": "measurement", "run": port_scale.port_churn,
     "workload": "an iperf3 stream and a SHA-256-checked file between two VMs while 200 VMs (50 with --quick) are "
                 "added one by one with hvnet vm add and removed again, against the same traffic without churn"},
    {"name": "port-load", "reproduces": "measurement", "run": port_scale.port_load,
     "workload": "64 namespace VMs (16 with --quick) in pairs, each sender iperf3 -u -b 0 -l 64: frames forwarded per "
                 "second, all together; with HVNET_LAB_BASELINE another build beside, interleaved"},
    {"name": "multicast", "reproduces": "measurement", "run": multicast.multicast,
     "workload": "the multicast case of NIC Technology in vSphere: one VM sends a 100 Mbit/s UDP group stream to 16 namespace VMs (8 with "
                 "--quick) of which a quarter joined; hvnet with IGMP/MLD snooping (its querier on) and flooding, each "
                 "with SplitRxMode off and on, and the Linux bridge with mcast_snooping 1 and mcast_querier 1 and with "
                 "0, all up at once: frames at the members and at the others, the switch's and the machine's CPU per "
                 "delivered frame"},
    {"name": "poll-budget", "reproduces": "measurement", "run": poll_budget.poll_budget,
     "workload": "a namespace VM pings a peer on a vhost-user port, back to back (ping -f) and every 5 ms: testpmd "
                 "--forward-mode=icmpecho with [switch] busy_poll_max_us 0, 10, 50 and 200 (0 and 50 with --quick), "
                 "and real guests hvnet starts answering with their own kernel, User-Mode Linux and QEMU (TCG), with "
                 "0, 50 and 200 (0 and 50 with --quick) and a smaller flood: round trip, transactions per second, the "
                 "daemon's CPU (its own threads) per transaction; a 64 B testpmd stream (txonly to rxonly) through two "
                 "vhost-user ports per budget: the daemon's CPU per frame"},
    {"name": "rates", "reproduces": "measurement", "run": rates.rates,
     "workload": "one TCP stream VM a to VM b through a 1 Gbit/s limit at its default burst: hvnet's policer on a "
                 "(tx_rate) and shaper on b (rx_rate), the Linux bridge with tc TBF and with HTB on its port toward "
                 "b, Open vSwitch userspace with an OpenFlow meter (drop band) on a's port; all up at once, runs "
                 "interleaved: goodput and TCP retransmits"},
    {"name": "uplink-shares", "reproduces": "measurement", "run": uplink_shares.uplink_shares,
     "workload": "three VMs (a, b, c) send one TCP stream each at once through an uplink of capacity 1 Gbit/s to a "
                 "host on the wire, with shares 100, 50, 50 and with 50 each, interleaved: what each got, its part "
                 "of the three's total, the total against the capacity"},
    {"name": "teams", "reproduces": "measurement", "run": teams.teams,
     "workload": "hvnet's NIC teams on two veth members limited to 1 Gbit/s each (tc TBF) into Open vSwitch userspace "
                 "with a host behind it (a plain bridge; an LACP balance-tcp bond for lacp): VMs to the host, one VM "
                 "one stream, two VMs (port-id), one VM 4 streams (port-id, lacp); a member's carrier pulled under "
                 "pings every 10 ms: pings lost and time to recover, hvnet active-backup and lacp vs Open vSwitch "
                 "userspace with an active-backup bond in hvnet's place"},
    {"name": "host-day", "reproduces": "measurement", "run": host_day.host_day,
     "workload": "a host's day compressed (60 min; 45 s with --quick; HVNET_LAB_HOST_DAY_MINUTES): VMs added and "
                 "removed, settings and VLANs changed at run time, a security group and a mirror applied and taken "
                 "away, captures, an uplink team's member pulled and put back, libvirt guests started, hot-plugged, "
                 "migrated to a second host and destroyed, libvirtd restarted, FRR killed under an EVPN fabric, the "
                 "switch stopped (SIGTERM), "
                 "upgraded in place (a second build renamed over its binary) and killed (SIGKILL) and brought up "
                 "again, while two "
                 "untouched VMs carry SHA-256-checked transfers: what is left over against the start, memory, "
                 "balance"},
    {"name": "restart-gap", "reproduces": "measurement", "run": restart_gap.restart_gap,
     "workload": "a QEMU guest on a vhost-user port in client mode (the guest listens) and a namespace pinging it "
                 "every 10 ms through the switch, the switch restarted (hvnet: SIGTERM and `hvnet up`; Open vSwitch "
                 "with DPDK: `ovs-appctl exit` and ovs-vswitchd again on its database): the longest silence, pings "
                 "lost, the restart's own time"},
    {"name": "acl-cost", "reproduces": "measurement", "run": acl_cost.acl_cost,
     "workload": "VM to VM, one TCP stream of wire-sized frames: both VMs in a security group of 100 rules with "
                 "10,000 UDP connections tracked between them, and without groups; the Linux bridge with a "
                 "100-rule nftables forward chain (ct state established,related) and 10,000 connections, and "
                 "without: CPU per frame (docs/guide/security-groups.md)"},
    {"name": "capture-cost", "reproduces": "measurement", "run": capture_cost.capture_cost,
     "workload": "VM to VM, one TCP stream of wire-sized frames: no capture, and `hvnet capture` of every frame at "
                 "the receiver's port at every point (in, offload, out, drop) to /dev/null; with "
                 "HVNET_LAB_BASELINE, a build without capture beside them: CPU per frame and per captured copy "
                 "(docs/guide/capture.md)"},
    {"name": "ipfix-cost", "reproduces": "measurement", "run": ipfix_cost.ipfix_cost,
     "workload": "VM to VM, one TCP stream of wire-sized frames through hvnet and through Open vSwitch userspace, "
                 "each without flow export, with IPFIX of every frame and of 1 in 1000: CPU per frame "
                 "(docs/guide/capture.md)"},
]


def finite(x):
    return isinstance(x, (int, float)) and math.isfinite(x)
