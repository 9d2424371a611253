#!/usr/bin/env bash
# Installs hvnet for use outside the repository: the binary (a release build),
# its manual pages and bash completion, the systemd unit template, and the
# CNI plugin hvnet-cni, also where container runtimes look for plugins
# ($CNI_BIN_DIRS, default /opt/cni/bin and /usr/lib/cni, Debian's podman's).
#
#   scripts/install.sh [PREFIX]     # default PREFIX /usr/local; run as root
#                                   # (or put sudo in front, if you have it)
#
# The unit goes to $SYSTEMD_UNIT_DIR (default /etc/systemd/system) when that
# directory exists; topology files for it go to /etc/hvnet/NAME.toml.
#
# Needs what scripts/install-deps.sh installs (Rust, the build tools).
set -euo pipefail
cd "$(dirname "$0")/.."
prefix="${1:-/usr/local}"
[ -f "$HOME/.cargo/env" ] && . "$HOME/.cargo/env"
if [ "$(id -u)" != 0 ] && [ ! -w "$prefix" ]; then
    echo "install.sh: $prefix is not writable; run as root (or with sudo)" >&2
    exit 1
fi
# Both binaries in one release build in the repository's build directory,
# as scripts/test.sh builds them, so that a built tree installs at once
# (`cargo install` of each package alone resolves the shared crates'
# features apart and built them all again).
CARGO_TARGET_DIR="$PWD/target" cargo build --quiet --release --locked -p hvnet -p hvnet-cni
install -D -m 0755 target/release/hvnet "$prefix/bin/hvnet"
install -D -m 0755 target/release/hvnet-cni "$prefix/bin/hvnet-cni"
for d in ${CNI_BIN_DIRS:-/opt/cni/bin /usr/lib/cni}; do
    mkdir -p "$d"
    install -m 0755 "$prefix/bin/hvnet-cni" "$d/hvnet-cni"
done
"$prefix/bin/hvnet" man "$prefix/share/man/man1" >/dev/null
mkdir -p "$prefix/share/bash-completion/completions"
"$prefix/bin/hvnet" completions bash >"$prefix/share/bash-completion/completions/hvnet"
# Where the unit's topology files live (hvnet@NAME reads /etc/hvnet/NAME.toml).
mkdir -p /etc/hvnet
unit_dir="${SYSTEMD_UNIT_DIR:-/etc/systemd/system}"
if [ -d "$unit_dir" ]; then
    sed "s|/usr/local/bin/hvnet|$prefix/bin/hvnet|" packaging/systemd/hvnet@.service >"$unit_dir/hvnet@.service"
fi
echo "installed $prefix/bin/hvnet, its manual pages (man hvnet), bash completion and hvnet@.service"
echo "installed hvnet-cni in $prefix/bin and ${CNI_BIN_DIRS:-/opt/cni/bin /usr/lib/cni} (docs/guide/containers.md)"
echo "run a topology as a service: cp TOPOLOGY.toml /etc/hvnet/NAME.toml && systemctl enable --now hvnet@NAME"
