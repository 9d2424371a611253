#!/usr/bin/env bash
# Installs what hvnet needs, builds it, and runs the demo: two VMs on the
# hvnet switch, iperf3 between them with LRO off and on, a table of what the
# receiving VM got, and everything torn down. Run as root.
# Options go to scripts/demo.py (--seconds N, --streams N, --offline).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"
scripts/install-deps.sh
echo "demo: building hvnet (release)"
cargo build --release --quiet -p hvnet
HVNET_BIN="$PWD/target/release/hvnet" PYTHONPATH="$PWD/lab" python3 scripts/demo.py "$@"
