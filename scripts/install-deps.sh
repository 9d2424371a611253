#!/usr/bin/env bash
# Installs what hvnet needs on Debian 12, as root: the kernel tools its
# demo and tests drive (iperf3, tcpdump, tshark, ethtool, iproute2,
# headless Chromium for the lab report's check, User-Mode Linux for real
# guests, DPDK's testpmd), Debian's Rust toolchain if there is no recent
# enough one, and the Python test libraries (scapy, pytest).
# Safe to run again: it installs only what is missing.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
export PATH="$HOME/.cargo/bin:$PATH"

if [ "$(id -u)" -ne 0 ]; then
    echo "install-deps: run as root (it uses apt-get)" >&2
    exit 1
fi

# chromium: the tests open the lab's HTML report in a real (headless) browser.
# user-mode-linux: real guests (kind = "uml"), their own kernel and
# virtio-net driver on a vhost-user port. dpdk-dev: testpmd, a second
# virtio front end (net_virtio_user) and the reference vhost back end.
# qemu-system-x86 and busybox-static: QEMU guests (TCG here, KVM on a
# real host) with Debian's cloud kernel, fetched below.
# libvirt-daemon-system and libvirt-clients: a guest defined in libvirt on an
# hvnet port (the test starts libvirt's daemons itself where none runs).
# frr: BGP EVPN (zebra and bgpd, started per host namespace by hvnet up and
# the tests; Debian starts none here without systemd). gobgpd: the lab's
# route injector for EVPN at scale (a fabric's worth of routes). nftables:
# the lab's reference for security groups (acl-cost: the bridge with rules).
# containernetworking-plugins (the reference IPAM plugins), podman, runc
# and containerd: containers put on the switch by hvnet-cni (runc: crun
# refuses this machine's cgroup layout; containerd's CRI is a kubelet's
# path to CNI, driven by crictl, below).
need=(iperf3 tcpdump tshark libpcap-dev nfdump ethtool iproute2 iputils-ping python3 ca-certificates curl gcc libc6-dev chromium user-mode-linux dpdk-dev qemu-system-x86 busybox-static libvirt-daemon-system libvirt-clients frr gobgpd nftables containernetworking-plugins podman runc containerd)
missing=()
for p in "${need[@]}"; do
    dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
    echo "install-deps: installing ${missing[*]}"
    apt-get update -qq
    # tshark asks whether non-root users may capture; answer no, quietly.
    echo "wireshark-common wireshark-common/install-setuid boolean false" | debconf-set-selections
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# crictl, the CRI's command line (what a kubelet asks containerd for, asked
# by hand): Debian 12 has no package of it, so it is built from the Go
# module proxy when Go is here (about a minute on 2 cores); without it the
# CRI tests and lab rows are skipped, saying why.
# cnitool, the CNI project's own client (libcni), likewise.
go="$(command -v go || echo /usr/local/go/bin/go)"
for tool in sigs.k8s.io/cri-tools/cmd/crictl@v1.37.0 github.com/containernetworking/cni/cnitool@v1.3.0; do
    bin="$(basename "${tool%@*}")"
    command -v "$bin" >/dev/null 2>&1 && continue
    if [ -x "$go" ]; then
        echo "install-deps: building $bin from the Go module proxy ($tool)"
        GOBIN=/usr/local/bin GOFLAGS=-p=2 "$go" install "$tool" \
            || echo "install-deps: $bin did not build; the tests that need it will be skipped" >&2
    else
        echo "install-deps: no Go toolchain: $bin not built, the tests that need it will be skipped" >&2
    fi
done

# The QEMU guests' kernel: Debian's cloud kernel package, unpacked (not
# installed: it is the guests' kernel, not this machine's).
qemu_kernel=/var/cache/hvnet/qemu-guest
if ! ls "$qemu_kernel"/root/boot/vmlinuz-* >/dev/null 2>&1; then
    pkg="$(apt-cache depends linux-image-cloud-amd64 | sed -n 's/.*Depends: \(linux-image-.*-cloud-amd64\)$/\1/p' | head -1)"
    echo "install-deps: fetching $pkg for QEMU guests"
    mkdir -p "$qemu_kernel"
    (cd "$qemu_kernel" && apt-get download -qq "$pkg" 2>/dev/null && dpkg-deb -x "$pkg"_*.deb root && rm -f "$pkg"_*.deb)
fi

# Rust: the toolchain already here (rustup's, say) if it is recent enough;
# otherwise Debian's own current one, `rustc-web` and `cargo-web` (with
# clippy and rustfmt), which Debian 12 keeps up to date through its
# security archive for the browsers' builds. Nothing is piped from the
# internet into a shell.
rust_min="$(sed -n 's/^rust-version = "\(.*\)"/\1/p' "$(dirname "$0")/../Cargo.toml")"
rust_ok() {
    command -v cargo >/dev/null 2>&1 && command -v rustc >/dev/null 2>&1 || return 1
    have="$(rustc --version | awk '{print $2}')"
    [ "$(printf '%s\n%s\n' "$rust_min" "$have" | sort -V | head -1)" = "$rust_min" ]
}
if ! rust_ok; then
    echo "install-deps: installing Debian's Rust toolchain (rustc-web, cargo-web, clippy, rustfmt)"
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends rustc-web cargo-web rust-web-clippy rustfmt-web >/dev/null
    hash -r
    if ! rust_ok; then
        echo "install-deps: hvnet needs Rust $rust_min or newer; found $(rustc --version 2>/dev/null || echo none)." >&2
        echo "install-deps: enable Debian's security archive (bookworm-security) for a current rustc-web, or install Rust with rustup." >&2
        exit 1
    fi
fi

if ! python3 -c 'import scapy, pytest, matplotlib, tomli_w' >/dev/null 2>&1; then
    echo "install-deps: installing scapy, pytest, matplotlib and tomli-w"
    python3 -m pip install --quiet --disable-pip-version-check scapy pytest matplotlib tomli-w 2>/dev/null ||
        python3 -m pip install --quiet --disable-pip-version-check --break-system-packages scapy pytest matplotlib tomli-w ||
        apt-get install -y -qq python3-scapy python3-pytest python3-matplotlib python3-tomli-w >/dev/null
fi

# Open vSwitch, the lab's and the bench's reference switch. Its packaged
# service must not start: the lab runs its own daemons in a private run
# directory.
if ! command -v ovs-vswitchd >/dev/null 2>&1; then
    echo "install-deps: installing openvswitch-switch (service not started)"
    # A policy-rc.d already there (a container's) is kept and put back.
    saved=""
    if [ -e /usr/sbin/policy-rc.d ]; then
        saved="$(mktemp)"
        cp -p /usr/sbin/policy-rc.d "$saved"
    fi
    printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d
    chmod +x /usr/sbin/policy-rc.d
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends openvswitch-switch >/dev/null || true
    if [ -n "$saved" ]; then
        mv "$saved" /usr/sbin/policy-rc.d
    else
        rm -f /usr/sbin/policy-rc.d
    fi
fi

# libvirt's qemu hook for hvnet (packaging/libvirt/hvnet-hook): a guest's
# ports the switch serves are made before QEMU starts, and a domain whose
# interface cannot work on hvnet is refused in libvirt's own error. A
# running libvirtd reads it at its next start (or SIGHUP).
if [ -d /etc/libvirt ]; then
    hook=/etc/libvirt/hooks/qemu.d/hvnet
    if ! cmp -s "$(dirname "$0")/../packaging/libvirt/hvnet-hook" "$hook"; then
        echo "install-deps: installing libvirt's hook for hvnet ($hook)"
        install -D -m 0755 "$(dirname "$0")/../packaging/libvirt/hvnet-hook" "$hook"
    fi
fi
